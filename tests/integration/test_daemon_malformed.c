/* ktuned against hostile and broken clients (docs/protocol.md "Framing" and "Envelope"): framing
 * errors close that connection only, well-framed bad requests get an error reply naming the
 * field and leave the connection open, and the daemon never dies. A bystander connection opened
 * at the start must keep getting answers after every case. */
#include "daemon_harness.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static dh_daemon daemon_;
static dh_conn bystander;
static void *graph_mp;
static size_t graph_len;
static const dh_shape shapes[2] = {{"M", 64}, {"N", 256}};

static int setup(void **state)
{
    (void)state;
    if (dh_init(&daemon_, "malformed") < 0)
        return -1;
    /* debug: refused requests are logged too, with their messages (test_untrusted_strings) */
    dh_opts o = {.gpus = "0", .log_level = "debug"};
    if (dh_start(&daemon_, &o, 30.0) < 0)
        return -1;
    if (dh_connect(&bystander, daemon_.sock) < 0)
        return -1;
    return dh_example_graph("gelu_tanh_chain", &graph_mp, &graph_len);
}

static int teardown(void **state)
{
    (void)state;
    dh_close(&bystander);
    free(graph_mp);
    dh_cleanup(&daemon_);
    return 0;
}

/* The daemon is alive and the bystander still gets a prompt answer. */
static void check_bystander(const char *after)
{
    if (!dh_alive(&daemon_)) {
        dh_dump_log(&daemon_, 4000);
        fail_msg("ktuned died after: %s", after);
    }
    double t0 = dh_now();
    int rc = dh_hello(&bystander, 2.0, NULL);
    if (rc < 0)
        fail_msg("the bystander got no hello reply after %s (%d)", after, rc);
    double dt = dh_now() - t0;
    if (dt > dh_scale())
        fail_msg("the bystander waited %.2f s for hello after %s", dt, after);
}

static void connect_or_fail(dh_conn *c)
{
    int rc = dh_connect(c, daemon_.sock);
    if (rc < 0)
        fail_msg("connect %s: %d", daemon_.sock, rc);
}

/* Sends raw bytes (a failed send is fine: the daemon may close first) and expects the daemon to
 * close the connection within 5 s, having sent at most max_msgs messages. */
static void expect_closed_after(const void *p, size_t n, int max_msgs, const char *what)
{
    dh_conn c;
    connect_or_fail(&c);
    (void)dh_send(&c, p, n);
    int msgs = 0;
    int rc = dh_wait_closed(&c, 5.0, &msgs);
    dh_close(&c);
    if (rc < 0)
        fail_msg("%s: the daemon did not close the connection (%d)", what, rc);
    if (msgs > max_msgs)
        fail_msg("%s: %d replies before the close, expected at most %d", what, msgs, max_msgs);
    check_bystander(what);
}

/* What a strict msgpack decoder asks of a string: well-formed UTF-8 (no overlong forms, no
 * surrogates, nothing past U+10FFFF). Written here independently of the daemon's checker. */
static bool utf8_ok(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xc2 && c <= 0xdf ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        if (len == 0 || n - i < len)
            return false;
        uint32_t cp = len == 1 ? c : c & (0x7f >> len);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* Every string in o, map keys included, is UTF-8. */
static bool strings_utf8(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_STR:
        return utf8_ok((const unsigned char *)o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_ARRAY:
        for (uint32_t i = 0; i < o->via.array.size; i++)
            if (!strings_utf8(&o->via.array.ptr[i]))
                return false;
        return true;
    case MSGPACK_OBJECT_MAP:
        for (uint32_t i = 0; i < o->via.map.size; i++)
            if (!strings_utf8(&o->via.map.ptr[i].key) || !strings_utf8(&o->via.map.ptr[i].val))
                return false;
        return true;
    default:
        return true;
    }
}

/* Expects an error reply with code and id on c, a one-line message naming `field` (when
 * non-NULL); the connection stays usable (checked by the caller's next request). */
static void expect_error_reply2(dh_conn *c, uint64_t id, const char *code, const char *alt,
                                const char *field, const char *what)
{
    const msgpack_object *rep;
    int rc = dh_recv(c, 5.0, &rep);
    if (rc < 0)
        fail_msg("%s: no reply (%d)", what, rc);
    char desc[400];
    dh_describe(rep, desc, sizeof(desc));
    if (dh_ok(rep) || !dh_get(rep, "error.code"))
        fail_msg("%s: expected error %s, got %s", what, code, desc);
    char got[32], msg[512];
    dh_str(rep, "error.code", got, sizeof(got));
    dh_str(rep, "error.msg", msg, sizeof(msg));
    if (strcmp(got, code) != 0 && !(alt && strcmp(got, alt) == 0))
        fail_msg("%s: expected %s, got %s", what, code, desc);
    if ((uint64_t)dh_int(rep, "id", -1) != id)
        fail_msg("%s: expected id %llu in the reply, got %s", what, (unsigned long long)id, desc);
    if (!msg[0] || strchr(msg, '\n'))
        fail_msg("%s: the message must be one non-empty line: %s", what, desc);
    if (field && !strstr(msg, field))
        fail_msg("%s: the message does not name '%s': %s", what, field, desc);
    /* nothing in it may drive a terminal or trip a strict decoder */
    for (const char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            fail_msg("%s: control character 0x%02x in the message: %s", what, (unsigned char)*p,
                     desc);
    if (!strings_utf8(rep))
        fail_msg("%s: the reply holds a string that is not UTF-8", what);
}

static void expect_error_reply(dh_conn *c, uint64_t id, const char *code, const char *field,
                               const char *what)
{
    expect_error_reply2(c, id, code, NULL, field, what);
}

/* ---- framing errors: the connection is closed ---- */

static void test_truncated_frames(void **state)
{
    (void)state;
    dh_conn c;
    connect_or_fail(&c);
    dh_req r;
    dh_req_begin(&r, &c, "submit", 2);
    dh_req_raw(&r, "graph", graph_mp, graph_len);
    dh_req_key(&r, "shapes");
    dh_req_shapes(&r, shapes, 2);
    /* cut inside the graph, leave the half frame a while, then close */
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size / 2), 0);
    usleep(200 * 1000);
    check_bystander("half a submit frame pending on another connection");
    dh_close(&c);
    check_bystander("half a submit frame then close");
    /* every prefix length of a hello, each on its own connection closed at once */
    dh_req h;
    dh_conn tmp = {.next_id = 1};
    dh_req_begin(&h, &tmp, "hello", 0);
    for (size_t cut = 1; cut < h.sb.size; cut++) {
        connect_or_fail(&c);
        (void)dh_send(&c, h.sb.data, cut);
        dh_close(&c);
    }
    dh_req_free(&h);
    dh_req_free(&r);
    check_bystander("truncated hellos");
}

static void test_top_level_not_a_map(void **state)
{
    (void)state;
    static const unsigned char array[] = {0x93, 0x01, 0x02, 0x03};      /* [1, 2, 3] */
    static const unsigned char str[] = {0xa5, 'h', 'e', 'l', 'l', 'o'}; /* "hello" */
    static const unsigned char integer[] = {0x2a};                      /* 42 */
    static const unsigned char nil[] = {0xc0};                          /* nil */
    expect_closed_after(array, sizeof(array), 0, "a msgpack array at top level");
    expect_closed_after(str, sizeof(str), 0, "a msgpack string at top level");
    expect_closed_after(integer, sizeof(integer), 0, "an integer at top level");
    expect_closed_after(nil, sizeof(nil), 0, "nil at top level");
}

static void test_garbage(void **state)
{
    (void)state;
    unsigned char junk[4096];
    junk[0] = 0xc1; /* never used in msgpack */
    unsigned x = 12345;
    for (size_t i = 1; i < sizeof(junk); i++) {
        x = x * 1103515245u + 12345u;
        junk[i] = (unsigned char)(x >> 16);
    }
    expect_closed_after(junk, sizeof(junk), 0, "4 KiB of garbage bytes");
    static const char http[] = "GET / HTTP/1.1\r\nHost: ktuned\r\n\r\n";
    /* 'G' is a positive fixint: a top-level integer, a framing error */
    expect_closed_after(http, sizeof(http) - 1, 0, "an HTTP request");
}

static void test_valid_frame_then_garbage(void **state)
{
    (void)state;
    dh_conn c;
    connect_or_fail(&c);
    dh_req h;
    dh_req_begin(&h, &c, "hello", 0);
    static const unsigned char junk[] = {0xc1, 0xc1, 0xc1, 0xc1};
    msgpack_sbuffer_write(&h.sb, (const char *)junk, sizeof(junk));
    assert_int_equal(dh_send(&c, h.sb.data, h.sb.size), 0);
    const msgpack_object *rep;
    int rc = dh_recv(&c, 5.0, &rep);
    if (rc < 0)
        fail_msg("hello followed by garbage: no reply to the hello (%d)", rc);
    if (!dh_ok(rep) || (uint64_t)dh_int(rep, "id", 0) != h.id) {
        char d[300];
        dh_describe(rep, d, sizeof(d));
        fail_msg("hello followed by garbage: expected the hello reply, got %s", d);
    }
    dh_req_free(&h);
    int msgs = 0;
    if (dh_wait_closed(&c, 5.0, &msgs) < 0)
        fail_msg("hello followed by garbage: the connection stayed open");
    assert_int_equal(msgs, 0);
    dh_close(&c);
    check_bystander("a valid frame followed by garbage");
}

static void test_deep_nesting(void **state)
{
    (void)state;
    enum { DEPTH = 10000 };
    dh_conn tmp = {.next_id = 50};
    dh_req r;
    /* {"v":1,"id":50,"op":"hello","x":[[[[...nil...]]]]} 10 000 deep */
    dh_req_begin(&r, &tmp, "hello", 1);
    dh_req_key(&r, "x");
    for (int i = 0; i < DEPTH; i++)
        msgpack_pack_array(&r.pk, 1);
    msgpack_pack_nil(&r.pk);
    expect_closed_after(r.sb.data, r.sb.size, 0, "arrays nested 10 000 deep");
    dh_req_free(&r);
    /* the same with maps, and an unterminated one (the daemon must not wait for the end) */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (int i = 0; i < DEPTH; i++) {
        msgpack_pack_map(&pk, 1);
        msgpack_pack_str_with_body(&pk, "k", 1);
    }
    expect_closed_after(sb.data, sb.size, 0, "maps nested 10 000 deep, unterminated");
    msgpack_sbuffer_destroy(&sb);

    /* well under the cap of 32: an ignored unknown key nested 20 deep is fine */
    dh_conn c;
    connect_or_fail(&c);
    dh_req_begin(&r, &c, "hello", 1);
    dh_req_key(&r, "x");
    for (int i = 0; i < 20; i++)
        msgpack_pack_array(&r.pk, 1);
    msgpack_pack_nil(&r.pk);
    const msgpack_object *rep;
    int rc = dh_call(&c, &r, 5.0, &rep);
    if (rc < 0 || !dh_ok(rep))
        fail_msg("a hello with an unknown key nested 20 deep was refused (%d)", rc);
    dh_close(&c);
    check_bystander("deep nesting");
}

static void test_oversized_message(void **state)
{
    (void)state;
    /* A submit whose graph is a 5 MiB bin: over KD_MAX_REQUEST (4 MiB). The envelope comes first,
     * so the daemon may answer E2BIG before closing; nothing else is allowed. */
    size_t big = 5u << 20;
    char *blob = calloc(1, big);
    assert_non_null(blob);
    dh_conn c;
    connect_or_fail(&c);
    dh_req r;
    dh_req_begin(&r, &c, "submit", 2);
    dh_req_key(&r, "graph");
    msgpack_pack_bin_with_body(&r.pk, blob, big);
    dh_req_key(&r, "shapes");
    dh_req_shapes(&r, shapes, 2);
    free(blob);
    (void)dh_send(&c, r.sb.data, r.sb.size);
    const msgpack_object *rep;
    int rc = dh_recv(&c, 10.0, &rep);
    if (rc == 0) {
        char d[300];
        dh_describe(rep, d, sizeof(d));
        char code[16];
        dh_str(rep, "error.code", code, sizeof(code));
        if (dh_ok(rep) || strcmp(code, "E2BIG") != 0)
            fail_msg("a 5 MiB request: expected E2BIG or a close, got %s", d);
        uint64_t id = (uint64_t)dh_int(rep, "id", -1);
        if (id != r.id && id != 0)
            fail_msg("a 5 MiB request: E2BIG with id %llu, expected %llu", (unsigned long long)id,
                     (unsigned long long)r.id);
        if (dh_wait_closed(&c, 5.0, NULL) < 0)
            fail_msg("a 5 MiB request: E2BIG but the connection stayed open");
        print_message("a 5 MiB request: E2BIG (id %llu), then closed\n", (unsigned long long)id);
    } else if (rc == -ECONNRESET) {
        print_message("a 5 MiB request: closed without a reply\n");
    } else {
        fail_msg("a 5 MiB request: expected E2BIG or a close, got %d", rc);
    }
    dh_req_free(&r);
    dh_close(&c);
    check_bystander("a 5 MiB request");

    /* A string header announcing 8 MiB, then 4.5 MiB of its body and no more: over the
     * buffered-bytes cap, so the daemon closes without waiting for the rest. */
    size_t part = (9u << 20) / 2;
    char *buf = malloc(part + 64);
    assert_non_null(buf);
    /* {"v": 1, "id": 51, "op": "hello", "x": str32 of 8 MiB ... */
    static const char head[] = "\x84\xa1v\x01\xa2id\x33\xa2op\xa5hello\xa1x\xdb\x00\x80\x00\x00";
    size_t n = sizeof(head) - 1;
    memcpy(buf, head, n);
    memset(buf + n, 'a', part);
    n += part;
    connect_or_fail(&c);
    (void)dh_send(&c, buf, n);
    free(buf);
    int msgs = 0;
    rc = dh_wait_closed(&c, 10.0, &msgs);
    dh_close(&c);
    if (rc < 0)
        fail_msg("4.5 MiB of an unfinished 8 MiB string: the connection stayed open");
    assert_true(msgs <= 1);
    check_bystander("an unfinished 8 MiB string");
}

static void test_huge_headers_without_body(void **state)
{
    (void)state;
    int64_t rss0 = dh_rss_bytes(daemon_.pid);
    /* map32 / array32 / bin32 headers announcing 4 G entries, with nothing after them. The
     * daemon must neither allocate for them nor stop serving others; it may close the
     * connection or wait for more. */
    static const unsigned char heads[][6] = {
        {0xdf, 0xff, 0xff, 0xff, 0xff, 0},   /* map32 */
        {0xdd, 0xff, 0xff, 0xff, 0xff, 0},   /* array32 */
        {0x81, 0xa1, 'x', 0xdd, 0xff, 0xff}, /* {"x": array32 ... (cut in its length) */
        {0xc6, 0xff, 0xff, 0xff, 0xff, 0},   /* bin32 */
    };
    static const size_t lens[] = {5, 5, 6, 5};
    dh_conn cs[4];
    for (int i = 0; i < 4; i++) {
        connect_or_fail(&cs[i]);
        (void)dh_send(&cs[i], heads[i], lens[i]);
    }
    usleep(300 * 1000);
    check_bystander("huge headers with no body (connections still open)");
    int64_t rss1 = dh_rss_bytes(daemon_.pid);
    for (int i = 0; i < 4; i++)
        dh_close(&cs[i]);
    check_bystander("huge headers with no body, then close");
    if (rss0 > 0 && rss1 > rss0 + (256 << 20))
        fail_msg("huge headers: ktuned's RSS grew from %lld to %lld bytes", (long long)rss0,
                 (long long)rss1);
}

/* ---- well-framed bad requests: an error reply, the connection stays open ---- */

static void test_bad_envelopes(void **state)
{
    (void)state;
    dh_conn c;
    connect_or_fail(&c);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
#define KEY(s) msgpack_pack_str_with_body(&pk, s, strlen(s))
#define SEND()                                                                                     \
    do {                                                                                           \
        assert_int_equal(dh_send(&c, sb.data, sb.size), 0);                                        \
        msgpack_sbuffer_clear(&sb);                                                                \
    } while (0)
    /* v: 2 */
    msgpack_pack_map(&pk, 3);
    KEY("v"), msgpack_pack_int(&pk, 2), KEY("id"), msgpack_pack_int(&pk, 11), KEY("op"),
        KEY("hello");
    SEND();
    expect_error_reply(&c, 11, "EPROTO", NULL, "v: 2");
    /* v missing */
    msgpack_pack_map(&pk, 2);
    KEY("id"), msgpack_pack_int(&pk, 12), KEY("op"), KEY("hello");
    SEND();
    expect_error_reply(&c, 12, "EPROTO", NULL, "no v");
    /* v: "1" */
    msgpack_pack_map(&pk, 3);
    KEY("v"), KEY("1"), KEY("id"), msgpack_pack_int(&pk, 13), KEY("op"), KEY("hello");
    SEND();
    expect_error_reply(&c, 13, "EPROTO", NULL, "v: \"1\"");
    /* id missing, negative, a string, a float: EINVAL with id 0 */
    msgpack_pack_map(&pk, 2);
    KEY("v"), msgpack_pack_int(&pk, 1), KEY("op"), KEY("hello");
    SEND();
    expect_error_reply(&c, 0, "EINVAL", "id", "no id");
    msgpack_pack_map(&pk, 3);
    KEY("v"), msgpack_pack_int(&pk, 1), KEY("id"), msgpack_pack_int(&pk, -4), KEY("op"),
        KEY("hello");
    SEND();
    expect_error_reply(&c, 0, "EINVAL", "id", "id: -4");
    msgpack_pack_map(&pk, 3);
    KEY("v"), msgpack_pack_int(&pk, 1), KEY("id"), KEY("7"), KEY("op"), KEY("hello");
    SEND();
    expect_error_reply(&c, 0, "EINVAL", "id", "id: \"7\"");
    msgpack_pack_map(&pk, 3);
    KEY("v"), msgpack_pack_int(&pk, 1), KEY("id"), msgpack_pack_double(&pk, 1.5), KEY("op"),
        KEY("hello");
    SEND();
    expect_error_reply(&c, 0, "EINVAL", "id", "id: 1.5");
    /* unknown op, missing op, op not a string */
    msgpack_pack_map(&pk, 3);
    KEY("v"), msgpack_pack_int(&pk, 1), KEY("id"), msgpack_pack_int(&pk, 14), KEY("op"),
        KEY("frobnicate");
    SEND();
    expect_error_reply(&c, 14, "ENOSYS", "frobnicate", "op: frobnicate");
    msgpack_pack_map(&pk, 2);
    KEY("v"), msgpack_pack_int(&pk, 1), KEY("id"), msgpack_pack_int(&pk, 15);
    SEND();
    expect_error_reply2(&c, 15, "ENOSYS", "EINVAL", NULL, "no op");
    msgpack_pack_map(&pk, 3);
    KEY("v"), msgpack_pack_int(&pk, 1), KEY("id"), msgpack_pack_int(&pk, 16), KEY("op"),
        msgpack_pack_int(&pk, 3);
    SEND();
    expect_error_reply2(&c, 16, "ENOSYS", "EINVAL", NULL, "op: 3");
    /* an empty map */
    msgpack_pack_map(&pk, 0);
    SEND();
    expect_error_reply2(&c, 0, "EINVAL", "EPROTO", NULL, "{}");
    /* non-string keys are ignored like unknown keys */
    msgpack_pack_map(&pk, 4);
    KEY("v"), msgpack_pack_int(&pk, 1), KEY("id"), msgpack_pack_int(&pk, 17), KEY("op"),
        KEY("hello"), msgpack_pack_int(&pk, 5), msgpack_pack_int(&pk, 6);
    SEND();
    const msgpack_object *rep;
    assert_int_equal(dh_recv(&c, 5.0, &rep), 0);
    if (!dh_ok(rep) || dh_int(rep, "id", 0) != 17)
        fail_msg("a hello with an integer key was not answered ok");
#undef KEY
#undef SEND
    msgpack_sbuffer_destroy(&sb);
    /* still open */
    assert_int_equal(dh_hello(&c, 5.0, NULL), 0);
    dh_close(&c);
    check_bystander("bad envelopes");
}

/* One submit with a field replaced: what = the field's key, pack = its value. */
typedef struct bad_field {
    const char *key;   /* the field, NULL: leave it out */
    const char *value; /* its value as raw msgpack bytes */
    size_t value_len;
    const char *named; /* the reply must name this ("" : don't check) */
    const char *code;  /* expected code */
    const char *alt;   /* another acceptable code, or NULL */
} bad_field;

#define MP(s) s, sizeof(s) - 1

static void send_submit_with(dh_conn *c, const bad_field *f, uint64_t *id)
{
    /* the good fields, except the one replaced */
    static const char *good[] = {"graph",     "shapes",   "precision", "budget_s",
                                 "tolerance", "priority", "gpu",       "name"};
    uint32_t n = 1; /* the replacement */
    for (size_t i = 0; i < ARRAY_LEN(good); i++)
        n += strcmp(f->key, good[i]) != 0;
    dh_req r;
    dh_req_begin(&r, c, "submit", n);
    *id = r.id;
    for (size_t i = 0; i < ARRAY_LEN(good); i++) {
        if (strcmp(f->key, good[i]) == 0)
            continue;
        if (strcmp(good[i], "graph") == 0)
            dh_req_raw(&r, "graph", graph_mp, graph_len);
        else if (strcmp(good[i], "shapes") == 0) {
            dh_req_key(&r, "shapes");
            dh_req_shapes(&r, shapes, 2);
        } else if (strcmp(good[i], "precision") == 0)
            dh_req_str(&r, "precision", "exact");
        else if (strcmp(good[i], "budget_s") == 0)
            dh_req_num(&r, "budget_s", 5.0);
        else if (strcmp(good[i], "tolerance") == 0)
            dh_req_num(&r, "tolerance", 0.0);
        else if (strcmp(good[i], "priority") == 0)
            dh_req_int(&r, "priority", 0);
        else if (strcmp(good[i], "gpu") == 0)
            dh_req_int(&r, "gpu", -1);
        else
            dh_req_str(&r, "name", "malformed-test");
    }
    dh_req_raw(&r, f->key, f->value, f->value_len);
    assert_int_equal(dh_send(c, r.sb.data, r.sb.size), 0);
    dh_req_free(&r);
}

static void test_submit_wrong_types(void **state)
{
    (void)state;
    /* raw msgpack values */
    /* clang-format off */
    static const bad_field cases[] = {
        {"graph", MP("\x2a"), "graph", "EINVAL", NULL},                      /* 42 */
        {"graph", MP("\xa3" "abc"), "graph", "EINVAL", NULL},                /* "abc" */
        {"graph", MP("\x92\x01\x02"), "graph", "EINVAL", NULL},              /* [1, 2] */
        {"graph", MP("\x80"), "", "EINVAL", NULL},                           /* {} */
        {"graph", MP("\xc4\x03" "\xc1\xc1\xc1"), "graph", "EINVAL", NULL},   /* bin, not msgpack */
        {"shapes", MP("\x92\x01\x02"), "shapes", "EINVAL", NULL},            /* [1, 2] */
        {"shapes", MP("\xa1x"), "shapes", "EINVAL", NULL},                   /* "x" */
        {"shapes", MP("\x82\xa1M\xa3" "big\xa1N\x10"), "M", "EINVAL", NULL}, /* {M: "big"} */
        {"shapes", MP("\x82\xa1M\xcb\x3f\xf8\0\0\0\0\0\0\xa1N\x10"), "M", "EINVAL", NULL}, /* 1.5 */
        {"shapes", MP("\x82\xa1M\xfb\xa1N\x10"), "M", "EINVAL", NULL},       /* M: -5 */
        {"shapes", MP("\x82\xa1M\x00\xa1N\x10"), "M", "EINVAL", NULL},       /* M: 0 */
        {"shapes", MP("\x81\xa1N\x10"), "M", "EINVAL", NULL},                /* M unbound */
        {"shapes", MP("\x83\xa1M\x10\xa1N\x10\xa1Q\x10"), "Q", "EINVAL", NULL}, /* unknown Q */
        {"shapes", MP("\x82\xa1M\xcf\x7f\xff\xff\xff\xff\xff\xff\xff\xa1N\x10"), "", "EINVAL",
         "E2BIG"},                                                           /* M: 2^63-1 */
        {"precision", MP("\x03"), "precision", "EINVAL", NULL},              /* 3 */
        {"precision", MP("\xa3" "fp8"), "precision", "EINVAL", NULL},        /* "fp8" */
        {"budget_s", MP("\xa2" "60"), "budget_s", "EINVAL", NULL},           /* "60" */
        {"budget_s", MP("\x00"), "budget_s", "EINVAL", NULL},                /* 0 */
        {"budget_s", MP("\xce\x3b\x9a\xca\x00"), "budget_s", "EINVAL", NULL}, /* 1e9 */
        {"budget_s", MP("\xcb\x7f\xf8\0\0\0\0\0\0"), "budget_s", "EINVAL", NULL}, /* NaN */
        {"tolerance", MP("\xa1x"), "tolerance", "EINVAL", NULL},             /* "x" */
        {"tolerance", MP("\xff"), "tolerance", "EINVAL", NULL},              /* -1 */
        {"priority", MP("\xa4high"), "priority", "EINVAL", NULL},            /* "high" */
        {"priority", MP("\xcd\x03\xe8"), "priority", "EINVAL", NULL},        /* 1000 */
        {"gpu", MP("\xa1" "0"), "gpu", "EINVAL", NULL},                      /* "0" */
        {"gpu", MP("\x07"), "gpu", "EINVAL", "ENODEV"},                      /* no GPU 7 */
        {"gpu", MP("\xfa"), "gpu", "EINVAL", NULL},                          /* -6 */
        {"name", MP("\x05"), "name", "EINVAL", NULL},                        /* 5 */
        {"name", MP("\x91\xa1x"), "name", "EINVAL", NULL},                   /* ["x"] */
        {NULL, NULL, 0, "graph", "EINVAL", NULL},                            /* graph missing */
    };
    /* clang-format on */
    dh_conn c;
    connect_or_fail(&c);
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        const bad_field *f = &cases[i];
        uint64_t id;
        if (!f->key) {
            /* graph missing: send a submit with everything but the graph */
            dh_req r;
            dh_req_begin(&r, &c, "submit", 1);
            id = r.id;
            dh_req_key(&r, "shapes");
            dh_req_shapes(&r, shapes, 2);
            assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
            dh_req_free(&r);
        } else {
            send_submit_with(&c, f, &id);
        }
        char what[128];
        snprintf(what, sizeof(what), "submit case %zu (%s)", i, f->key ? f->key : "no graph");
        const msgpack_object *rep;
        int rc = dh_recv(&c, 10.0, &rep);
        if (rc < 0)
            fail_msg("%s: no reply (%d)", what, rc);
        char code[32], d[400];
        dh_str(rep, "error.code", code, sizeof(code));
        dh_describe(rep, d, sizeof(d));
        if (dh_ok(rep))
            fail_msg("%s: accepted: %s", what, d);
        if (strcmp(code, f->code) != 0 && !(f->alt && strcmp(code, f->alt) == 0))
            fail_msg("%s: expected %s, got %s", what, f->code, d);
        if ((uint64_t)dh_int(rep, "id", -1) != id)
            fail_msg("%s: wrong id in %s", what, d);
        char msg[512];
        dh_str(rep, "error.msg", msg, sizeof(msg));
        if (!msg[0] || strchr(msg, '\n'))
            fail_msg("%s: the message must be one line: %s", what, d);
        if (f->named[0] && !strstr(msg, f->named))
            fail_msg("%s: the message does not name '%s': %s", what, f->named, d);
    }
    /* none of those made a job; the connection is still open */
    dh_req r;
    dh_req_begin(&r, &c, "jobs", 0);
    const msgpack_object *rep;
    assert_int_equal(dh_call(&c, &r, 5.0, &rep), 0);
    assert_true(dh_ok(rep));
    const msgpack_object *jobs = dh_get(rep, "jobs");
    assert_non_null(jobs);
    assert_int_equal(jobs->type, MSGPACK_OBJECT_ARRAY);
    if (jobs->via.array.size != 0)
        fail_msg("bad submits created %u jobs", jobs->via.array.size);
    dh_close(&c);
    check_bystander("bad submits");
}

static void test_other_ops_bad_args(void **state)
{
    (void)state;
    dh_conn c;
    connect_or_fail(&c);
    dh_req r;
    /* status: job missing / a string / unknown */
    dh_req_begin(&r, &c, "status", 0);
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "EINVAL", "job", "status without job");
    dh_req_free(&r);
    dh_req_begin(&r, &c, "status", 1);
    dh_req_str(&r, "job", "1");
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "EINVAL", "job", "status job \"1\"");
    dh_req_free(&r);
    dh_req_begin(&r, &c, "status", 1);
    dh_req_int(&r, "job", 987654);
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "ENOENT", NULL, "status of an unknown job");
    dh_req_free(&r);
    /* watch and cancel of an unknown job */
    dh_req_begin(&r, &c, "watch", 1);
    dh_req_int(&r, "job", 987654);
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "ENOENT", NULL, "watch of an unknown job");
    dh_req_free(&r);
    dh_req_begin(&r, &c, "cancel", 1);
    dh_req_int(&r, "job", 987654);
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "ENOENT", NULL, "cancel of an unknown job");
    dh_req_free(&r);
    /* jobs: a bad state, a bad limit */
    dh_req_begin(&r, &c, "jobs", 1);
    dh_req_str(&r, "state", "sleeping");
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "EINVAL", "state", "jobs state sleeping");
    dh_req_free(&r);
    dh_req_begin(&r, &c, "jobs", 1);
    dh_req_str(&r, "limit", "ten");
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "EINVAL", "limit", "jobs limit \"ten\"");
    dh_req_free(&r);
    /* lookup: no graph, shapes of the wrong type, a bad precision */
    dh_req_begin(&r, &c, "lookup", 1);
    dh_req_key(&r, "shapes");
    dh_req_shapes(&r, shapes, 2);
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "EINVAL", "graph", "lookup without graph");
    dh_req_free(&r);
    dh_req_begin(&r, &c, "lookup", 2);
    dh_req_raw(&r, "graph", graph_mp, graph_len);
    dh_req_int(&r, "shapes", 3);
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "EINVAL", "shapes", "lookup shapes: 3");
    dh_req_free(&r);
    dh_req_begin(&r, &c, "lookup", 3);
    dh_req_raw(&r, "graph", graph_mp, graph_len);
    dh_req_key(&r, "shapes");
    dh_req_shapes(&r, shapes, 2);
    dh_req_str(&r, "precision", "approximate");
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "EINVAL", "precision", "lookup precision approximate");
    dh_req_free(&r);
    /* a lookup that is fine finds nothing in the empty cache */
    bool found = true;
    assert_int_equal(dh_lookup(&c, graph_mp, graph_len, shapes, 2, 5.0, &found, NULL), 0);
    assert_false(found);
    dh_close(&c);
    check_bystander("bad arguments to other ops");
}

/* A submit whose field key is the string val (n bytes, any bytes). */
static void submit_with_str(dh_conn *c, const char *key, const char *val, size_t n, uint64_t *id)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_str_with_body(&pk, val, n);
    bad_field f = {key, sb.data, sb.size, "", "EINVAL", NULL};
    send_submit_with(c, &f, id);
    msgpack_sbuffer_destroy(&sb);
}

/* The msgpack graph {name: NAME (when not NULL), inputs: {IN: f32 [4]}, nodes: [{out: y, op: OP,
 * in: [IN]}], outputs: [y]}. */
static void pack_graph(msgpack_sbuffer *sb, const char *name, const char *in, const char *op)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
#define S(x) msgpack_pack_str_with_body(&pk, x, strlen(x))
    msgpack_pack_map(&pk, name ? 4 : 3);
    if (name)
        S("name"), S(name);
    S("inputs"), msgpack_pack_map(&pk, 1), S(in), msgpack_pack_map(&pk, 2);
    S("dtype"), S("f32"), S("shape"), msgpack_pack_array(&pk, 1), msgpack_pack_int(&pk, 4);
    S("nodes"), msgpack_pack_array(&pk, 1), msgpack_pack_map(&pk, 3);
    S("out"), S("y"), S("op"), S(op), S("in"), msgpack_pack_array(&pk, 1), S(in);
    S("outputs"), msgpack_pack_array(&pk, 1), S("y");
#undef S
}

/* Untrusted strings (docs/protocol.md "Names"): a job name with a newline and ESC, or bytes that
 * are not UTF-8, is refused with a one-line message showing them escaped, and never reaches the
 * log raw (journald reads a line starting "<0>" as an emergency); a graph's bad tensor name is
 * refused naming the field; unknown ops, state filters and shape keys are echoed escaped; and a
 * `jobs` reply afterwards holds only UTF-8. */
static void test_untrusted_strings(void **state)
{
    (void)state;
    dh_conn c;
    connect_or_fail(&c);
    uint64_t id;
    static const char forged[] = "x\n<0>emerg forged\x1b[2J\x1b]0;pwned\x07";
    submit_with_str(&c, "name", forged, sizeof(forged) - 1, &id);
    expect_error_reply(&c, id, "EINVAL", "'name' 'x\\x0a<0>emerg forged\\x1b[2J\\x1b]0;pwned\\x07'",
                       "a job name with a newline and ESC");
    static const char latin1[] = "gr\xf6\xdf"
                                 "e";
    submit_with_str(&c, "name", latin1, sizeof(latin1) - 1, &id);
    expect_error_reply(&c, id, "EINVAL", "'gr\\xf6\\xdfe' is not valid UTF-8",
                       "a job name in Latin-1");
    char longname[80];
    memset(longname, 'a', sizeof(longname));
    submit_with_str(&c, "name", longname, 64, &id);
    expect_error_reply(&c, id, "EINVAL", "'name' must be shorter than 64 bytes",
                       "a job name of 64 bytes");

    /* the graph: a tensor name that is not UTF-8, an op with a newline */
    msgpack_sbuffer g;
    msgpack_sbuffer_init(&g);
    pack_graph(&g, NULL, "x\xff", "relu");
    bad_field f = {"graph", g.data, g.size, "", "EINVAL", NULL};
    send_submit_with(&c, &f, &id);
    expect_error_reply(&c, id, "EINVAL", "graph input name 'x\\xff' is not valid UTF-8",
                       "a tensor name that is not UTF-8");
    msgpack_sbuffer_clear(&g);
    pack_graph(&g, NULL, "x", "bad\nop");
    f = (bad_field){"graph", g.data, g.size, "", "EINVAL", NULL};
    send_submit_with(&c, &f, &id);
    expect_error_reply(&c, id, "EINVAL", "'bad\\x0aop' is not an op", "an unknown op 'bad\\nop'");

    /* a job without a name takes its graph's, cut to 63 bytes between characters: 62 'g' and a
     * two-byte character straddling the limit leave 62 bytes */
    char gname[80];
    memset(gname, 'g', 62);
    snprintf(gname + 62, sizeof(gname) - 62, "\xc3\xa9tail");
    msgpack_sbuffer_clear(&g);
    pack_graph(&g, gname, "x", "relu");
    dh_submit_args unnamed = {.graph = g.data, .graph_len = g.size, .budget_s = 5, .gpu = -1};
    dh_job job;
    bool joined = false;
    char code[16];
    assert_int_equal(dh_submit(&c, &unnamed, 10.0, &job, &joined), 0);
    (void)dh_cancel(&c, job.id, 10.0, &job, code);
    msgpack_sbuffer_destroy(&g);

    /* echoes: the request's op, a state filter, a shape key */
    dh_req r;
    dh_req_begin(&r, &c, "bad\nop\x1b[2J", 0);
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "ENOSYS", "unknown op 'bad\\x0aop\\x1b[2J'", "op 'bad\\nop'");
    dh_req_free(&r);
    dh_req_begin(&r, &c, "jobs", 1);
    dh_req_str(&r, "state", "done\n<0>x");
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "EINVAL", "'done\\x0a<0>x'", "jobs state with a newline");
    dh_req_free(&r);
    static const dh_shape odd[2] = {{"M\n<0>x", 64}, {"N", 256}};
    dh_req_begin(&r, &c, "lookup", 2);
    dh_req_raw(&r, "graph", graph_mp, graph_len);
    dh_req_key(&r, "shapes");
    dh_req_shapes(&r, odd, 2);
    assert_int_equal(dh_send(&c, r.sb.data, r.sb.size), 0);
    expect_error_reply(&c, r.id, "EINVAL", "M\\x0a<0>x", "a shape key with a newline");
    dh_req_free(&r);
    /* a hello's client string is only logged (at debug): escaped there */
    dh_req_begin(&r, &c, "hello", 1);
    dh_req_str(&r, "client", "c\n<0>emerg hello\x1b[2J");
    const msgpack_object *rep;
    assert_int_equal(dh_call(&c, &r, 5.0, &rep), 0);
    assert_true(dh_ok(rep));

    /* a name in UTF-8 with a backslash is a name: kept as sent */
    static const char good[] = "gr\xc3\xb6\xc3\x9f"
                               "e \xe2\x9c\x93 a\\b";
    dh_submit_args a = {.graph = graph_mp,
                        .graph_len = graph_len,
                        .shapes = shapes,
                        .n_shapes = 2,
                        .budget_s = 5,
                        .gpu = -1,
                        .name = good};
    assert_int_equal(dh_submit(&c, &a, 10.0, &job, &joined), 0);
    (void)dh_cancel(&c, job.id, 10.0, &job, code);
    dh_req_begin(&r, &c, "jobs", 0);
    assert_int_equal(dh_call(&c, &r, 5.0, &rep), 0);
    assert_true(dh_ok(rep));
    if (!strings_utf8(rep))
        fail_msg("a jobs reply holds a string that is not UTF-8");
    const msgpack_object *jobs = dh_get(rep, "jobs");
    assert_non_null(jobs);
    assert_int_equal(jobs->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(jobs->via.array.size, 2); /* the refused submits made none */
    char name[128];
    dh_str(&jobs->via.array.ptr[0], "name", name, sizeof(name)); /* newest first */
    assert_string_equal(name, good);
    dh_str(&jobs->via.array.ptr[1], "name", name, sizeof(name));
    gname[62] = '\0';
    assert_string_equal(name, gname);
    dh_close(&c);

    /* the log: no line of the daemon's own starting "<0>" or holding a raw ESC or a byte that
     * is not UTF-8; the refused requests were logged (debug), so this looked at their lines */
    FILE *lf = fopen(daemon_.log, "rb");
    assert_non_null(lf);
    char line[4096];
    bool saw_forged = false, saw_hello = false;
    while (fgets(line, sizeof(line), lf)) {
        if (strncmp(line, "<0>", 3) == 0)
            fail_msg("a forged emergency line in the log: %s", line);
        if (strchr(line, 0x1b) || !utf8_ok((const unsigned char *)line, strlen(line)))
            fail_msg("a raw ESC or non-UTF-8 bytes in the log: %s", line);
        saw_forged |= strstr(line, "x\\x0a<0>emerg forged") != NULL;
        saw_hello |= strstr(line, "c\\x0a<0>emerg hello\\x1b[2J") != NULL;
    }
    fclose(lf);
    if (!saw_forged || !saw_hello) {
        dh_dump_log(&daemon_, 4000);
        fail_msg("the refused name or the hello's client was not logged escaped (%d, %d)",
                 saw_forged, saw_hello);
    }
    check_bystander("untrusted strings");
}

static void test_pipelined_requests(void **state)
{
    (void)state;
    /* 200 requests in one write: 200 replies, in request order */
    dh_conn c;
    connect_or_fail(&c);
    msgpack_sbuffer all;
    msgpack_sbuffer_init(&all);
    uint64_t first = c.next_id;
    for (int i = 0; i < 200; i++) {
        dh_req r;
        static const char *ops[] = {"hello", "stats", "gpus", "jobs"};
        dh_req_begin(&r, &c, ops[i % 4], 0);
        msgpack_sbuffer_write(&all, r.sb.data, r.sb.size);
        dh_req_free(&r);
    }
    assert_int_equal(dh_send(&c, all.data, all.size), 0);
    msgpack_sbuffer_destroy(&all);
    for (int i = 0; i < 200; i++) {
        const msgpack_object *rep;
        int rc = dh_recv(&c, 10.0, &rep);
        if (rc < 0)
            fail_msg("pipelined: reply %d of 200 missing (%d)", i, rc);
        if (!dh_ok(rep) || (uint64_t)dh_int(rep, "id", 0) != first + (uint64_t)i)
            fail_msg("pipelined: reply %d out of order or failed (id %lld)", i,
                     (long long)dh_int(rep, "id", 0));
    }
    dh_close(&c);
    /* 300 connections opened and dropped at once */
    dh_conn cs[300];
    int opened = 0;
    for (int i = 0; i < 300; i++)
        if (dh_connect(&cs[i], daemon_.sock) == 0)
            opened++;
        else
            cs[i].fd = -1, cs[i].init = false;
    for (int i = 0; i < 300; i++)
        dh_close(&cs[i]);
    assert_true(opened >= 100);
    check_bystander("300 connections dropped");
}

/* Last: everything closed above is forgotten, the daemon still answers, and stats counts only
 * the bystander. */
static void test_final_state(void **state)
{
    (void)state;
    check_bystander("every malformed case");
    assert_int_equal(kill(daemon_.pid, 0), 0);
    /* hello reports the daemon's pid and the peer uid it saw (SO_PEERCRED) */
    dh_req h;
    dh_req_begin(&h, &bystander, "hello", 0);
    const msgpack_object *hr;
    assert_int_equal(dh_call(&bystander, &h, 5.0, &hr), 0);
    assert_int_equal(dh_int(hr, "pid", -1), daemon_.pid);
    assert_int_equal(dh_int(hr, "uid", -1), (int64_t)getuid());
    assert_int_equal(dh_int(hr, "protocol", -1), 1);
    assert_int_equal(dh_int(hr, "gpus", -1), 1);
    int64_t clients = -1;
    double t_end = dh_now() + 3.0;
    while (dh_now() < t_end) {
        dh_req r;
        dh_req_begin(&r, &bystander, "stats", 0);
        const msgpack_object *rep;
        assert_int_equal(dh_call(&bystander, &r, 5.0, &rep), 0);
        assert_true(dh_ok(rep));
        clients = dh_int(rep, "clients", -1);
        if (clients == 1)
            break;
        usleep(100 * 1000);
    }
    if (clients != 1)
        fail_msg("stats says %lld clients with only the bystander connected", (long long)clients);
    /* and it shuts down cleanly (exit 0; under a sanitizer build, also no leak report) */
    dh_close(&bystander);
    int st = -1;
    if (dh_stop(&daemon_, SIGTERM, 10.0, &st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        dh_dump_log(&daemon_, 4000);
        fail_msg("ktuned did not exit 0 on SIGTERM after the malformed input (wait status 0x%x)",
                 st);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated_frames),
        cmocka_unit_test(test_top_level_not_a_map),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_valid_frame_then_garbage),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_oversized_message),
        cmocka_unit_test(test_huge_headers_without_body),
        cmocka_unit_test(test_bad_envelopes),
        cmocka_unit_test(test_submit_wrong_types),
        cmocka_unit_test(test_other_ops_bad_args),
        cmocka_unit_test(test_untrusted_strings),
        cmocka_unit_test(test_pipelined_requests),
        cmocka_unit_test(test_final_state),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
