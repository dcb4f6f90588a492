/* libktune's client (client/client.c) and graph handle (client/libktune.c) without a daemon: a
 * thread plays ktuned on the other end of a socketpair (the process boundary), reading the
 * client's requests as msgpack and writing canned replies per docs/protocol.md, and recording
 * what it saw; the test thread then checks both sides. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "client/libktune_internal.h"

#include <errno.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- the daemon double ---- */

typedef struct dbl dbl;
typedef void (*dbl_script)(dbl *d);

struct dbl {
    int fd;
    msgpack_unpacker up;
    msgpack_unpacked req; /* the last request read */
    pthread_t th;
    dbl_script script;
    void *arg;
    char fail[512]; /* the first check that failed in the thread */
    int n_req;
    uint64_t last_id;
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

#define DCHECK(d, cond)                                                                            \
    do {                                                                                           \
        if (!(cond) && !(d)->fail[0])                                                              \
            snprintf((d)->fail, sizeof((d)->fail), "%s:%d: double: %s", __FILE__, __LINE__,        \
                     #cond);                                                                       \
    } while (0)

static const msgpack_object *get(const msgpack_object *m, const char *key)
{
    if (!m || m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(key) &&
            memcmp(k->via.str.ptr, key, k->via.str.size) == 0)
            return &m->via.map.ptr[i].val;
    }
    return NULL;
}

static bool str_is(const msgpack_object *o, const char *s)
{
    return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
           memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

static int64_t int_of(const msgpack_object *o)
{
    if (!o)
        return INT64_MIN;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return (int64_t)o->via.u64;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return o->via.i64;
    return INT64_MIN;
}

static double num_of(const msgpack_object *o)
{
    if (o && (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32))
        return o->via.f64;
    return (double)int_of(o);
}

/* Reads one request; false when the client closed. Checks the envelope. */
static bool dbl_read(dbl *d)
{
    for (;;) {
        msgpack_unpack_return r = msgpack_unpacker_next(&d->up, &d->req);
        if (r == MSGPACK_UNPACK_SUCCESS) {
            const msgpack_object *o = &d->req.data;
            DCHECK(d, o->type == MSGPACK_OBJECT_MAP);
            DCHECK(d, int_of(get(o, "v")) == 1);
            const msgpack_object *id = get(o, "id");
            DCHECK(d, id && id->type == MSGPACK_OBJECT_POSITIVE_INTEGER);
            uint64_t v = id ? id->via.u64 : 0;
            DCHECK(d, v > d->last_id); /* ids increase */
            d->last_id = v;
            DCHECK(d, get(o, "op") && get(o, "op")->type == MSGPACK_OBJECT_STR);
            d->n_req++;
            return true;
        }
        DCHECK(d, r == MSGPACK_UNPACK_CONTINUE);
        if (r != MSGPACK_UNPACK_CONTINUE)
            return false;
        msgpack_unpacker_reserve_buffer(&d->up, 65536);
        ssize_t n =
            read(d->fd, msgpack_unpacker_buffer(&d->up), msgpack_unpacker_buffer_capacity(&d->up));
        if (n <= 0)
            return false;
        msgpack_unpacker_buffer_consumed(&d->up, (size_t)n);
    }
}

static bool dbl_op(dbl *d, const char *op)
{
    return str_is(get(&d->req.data, "op"), op);
}

static uint64_t dbl_id(dbl *d)
{
    return (uint64_t)int_of(get(&d->req.data, "id"));
}

static void pk_str(dbl *d, const char *s)
{
    msgpack_pack_str_with_body(&d->pk, s, strlen(s));
}

static void pk_kv_int(dbl *d, const char *k, int64_t v)
{
    pk_str(d, k);
    msgpack_pack_int64(&d->pk, v);
}

static void pk_kv_f64(dbl *d, const char *k, double v)
{
    pk_str(d, k);
    msgpack_pack_double(&d->pk, v);
}

static void pk_kv_str(dbl *d, const char *k, const char *v)
{
    pk_str(d, k);
    pk_str(d, v);
}

/* Writes what was packed so far; false when the client is gone. */
static bool dbl_flush(dbl *d)
{
    size_t off = 0;
    bool ok = true;
    while (off < d->sb.size) {
        ssize_t n = send(d->fd, d->sb.data + off, d->sb.size - off, MSG_NOSIGNAL);
        if (n <= 0) {
            ok = false;
            break;
        }
        off += (size_t)n;
    }
    msgpack_sbuffer_clear(&d->sb);
    return ok;
}

/* {"id": id, "ok": true, ...n_extra more} */
static void pk_ok(dbl *d, uint64_t id, uint32_t n_extra)
{
    msgpack_pack_map(&d->pk, 2 + n_extra);
    pk_str(d, "id");
    msgpack_pack_uint64(&d->pk, id);
    pk_str(d, "ok");
    msgpack_pack_true(&d->pk);
}

static void pk_error(dbl *d, uint64_t id, const char *code, const char *msg)
{
    msgpack_pack_map(&d->pk, 3);
    pk_str(d, "id");
    msgpack_pack_uint64(&d->pk, id);
    pk_str(d, "ok");
    msgpack_pack_false(&d->pk);
    pk_str(d, "error");
    msgpack_pack_map(&d->pk, 2);
    pk_kv_str(d, "code", code);
    pk_kv_str(d, "msg", msg);
}

/* A complete Job object as the protocol describes it. */
static void pk_job(dbl *d, uint64_t job, const char *state, int trials)
{
    bool done = strcmp(state, "done") == 0;
    msgpack_pack_map(&d->pk, 26);
    pk_kv_int(d, "job", (int64_t)job);
    pk_kv_str(d, "name", "gemm_bias_relu");
    pk_kv_str(d, "state", state);
    pk_kv_int(d, "priority", 5);
    pk_kv_int(d, "gpu", strcmp(state, "queued") ? 0 : -1);
    pk_kv_str(d, "signature", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    pk_str(d, "shapes");
    msgpack_pack_map(&d->pk, 2);
    pk_kv_int(d, "M", 1024);
    pk_kv_int(d, "N", 512);
    pk_kv_str(d, "precision", "tf32");
    pk_kv_f64(d, "budget_s", 30.0);
    pk_kv_int(d, "tolerance", 0); /* an integer where a float is usual: accepted */
    pk_kv_int(d, "submitted", 1795000000);
    pk_kv_int(d, "started", strcmp(state, "queued") ? 1795000003 : 0);
    pk_kv_int(d, "finished", done ? 1795000020 : 0);
    pk_kv_str(d, "phase", done ? "" : "screen");
    pk_kv_int(d, "trials", trials);
    pk_kv_int(d, "measured", trials - 2 > 0 ? trials - 2 : 0);
    pk_kv_int(d, "resumed", 2);
    pk_kv_f64(d, "elapsed_s", 12.5);
    pk_kv_f64(d, "best_ns", 5980.0);
    pk_kv_f64(d, "baseline_ns", 3780.0);
    pk_kv_f64(d, "err_norm", 1.2e-4);
    pk_kv_str(d, "family", done ? "gemm" : "");
    pk_kv_str(d, "schedule", done ? "gemm mma 128x128" : "");
    pk_str(d, "record");
    done ? msgpack_pack_true(&d->pk) : msgpack_pack_false(&d->pk);
    pk_str(d, "failures");
    msgpack_pack_map(&d->pk, 1);
    pk_kv_int(d, "wrong", 1);
    pk_kv_str(d, "error", "");
}

static void reply_job(dbl *d, uint64_t id, uint64_t job, const char *state, int trials)
{
    pk_ok(d, id, 1);
    pk_str(d, "job");
    pk_job(d, job, state, trials);
    dbl_flush(d);
}

static void event_job(dbl *d, uint64_t id, const char *event, uint64_t job, const char *state,
                      int trials)
{
    msgpack_pack_map(&d->pk, 3);
    pk_str(d, "id");
    msgpack_pack_uint64(&d->pk, id);
    pk_kv_str(d, "event", event);
    pk_str(d, "job");
    pk_job(d, job, state, trials);
    dbl_flush(d);
}

/* Answers the hello every connection starts with. */
static void dbl_hello(dbl *d, int protocol)
{
    DCHECK(d, dbl_read(d));
    DCHECK(d, dbl_op(d, "hello"));
    DCHECK(d, dbl_id(d) == 1);
    DCHECK(d, get(&d->req.data, "client") != NULL);
    pk_ok(d, dbl_id(d), 5);
    pk_kv_str(d, "version", "0.1.0");
    pk_kv_int(d, "protocol", protocol);
    pk_kv_int(d, "pid", 4242);
    pk_kv_int(d, "uid", 1000);
    pk_kv_int(d, "gpus", 2);
    dbl_flush(d);
}

static void *dbl_main(void *arg)
{
    dbl *d = arg;
    d->script(d);
    shutdown(d->fd, SHUT_RDWR); /* the daemon goes away: the client sees the end of stream */
    return NULL;
}

/* Starts the double running script and connects a client to it (hello included, unless the
 * script makes it fail: then *c is NULL and the return code is what from_fd gave). */
static int dbl_start(dbl *d, dbl_script script, void *arg, ktune_client **c, ktune_error *err)
{
    int sv[2];
    memset(d, 0, sizeof(*d));
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    d->fd = sv[1];
    d->script = script;
    d->arg = arg;
    assert_true(msgpack_unpacker_init(&d->up, 65536));
    msgpack_unpacked_init(&d->req);
    msgpack_sbuffer_init(&d->sb);
    msgpack_packer_init(&d->pk, &d->sb, msgpack_sbuffer_write);
    assert_int_equal(pthread_create(&d->th, NULL, dbl_main, d), 0);
    return ktune_client_from_fd(sv[0], "test-socket", c, err);
}

/* Disconnects the client, joins the double and fails the test on any check it recorded. */
static void dbl_finish(dbl *d, ktune_client *c)
{
    ktune_disconnect(c);
    pthread_join(d->th, NULL);
    close(d->fd);
    msgpack_unpacked_destroy(&d->req);
    msgpack_unpacker_destroy(&d->up);
    msgpack_sbuffer_destroy(&d->sb);
    if (d->fail[0])
        fail_msg("%s", d->fail);
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *example(const char *name)
{
    static char path[1024];
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    snprintf(path, sizeof(path), "%s/examples/%s", root ? root : ".", name);
    return path;
}

/* ---- graphs ---- */

static void test_graph_load(void **state)
{
    ktune_graph *g = NULL;
    ktune_error err;
    assert_int_equal(ktune_graph_load(example("gemm_bias_relu.json"), &g, &err), 0);
    assert_string_equal(err.msg, "");
    assert_string_equal(ktune_graph_name(g), "gemm_bias_relu");
    /* The signature is ops_graph_signature's, in hex. */
    ops_graph *og = NULL;
    ops_diag d = {0};
    uint8_t sig[OPS_SIG_BYTES];
    char hex[2 * OPS_SIG_BYTES + 1];
    assert_int_equal(ops_graph_from_json_file(example("gemm_bias_relu.json"), &og, &d), 0);
    assert_int_equal(ops_graph_validate(og, &d), 0);
    assert_int_equal(ops_graph_signature(og, sig, &d), 0);
    kt_hex(sig, OPS_SIG_BYTES, hex);
    assert_string_equal(ktune_graph_signature(g), hex);
    /* Declared order (what ktune_launch takes), not the canonical one (A, bias, W): every input
     * named once, as the file lists them. */
    assert_int_equal(ktune_graph_n_inputs(g), 3);
    assert_int_equal(ktune_graph_n_outputs(g), 1);
    const char *names[3] = {"A", "W", "bias"};
    for (int i = 0; i < 3; i++)
        assert_string_equal(ktune_graph_input_name(g, i), names[i]);
    assert_string_equal(ktune_graph_output_name(g, 0), "Y");
    assert_null(ktune_graph_input_name(g, 3));
    assert_null(ktune_graph_input_name(g, -1));
    assert_null(ktune_graph_output_name(g, 1));
    ops_graph_free(og);

    /* The same graph as JSON text (len 0: NUL-terminated) has the same signature. */
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(
        kt_read_file(example("gemm_bias_relu.json"), OPS_MAX_GRAPH_BYTES, &text, &len, NULL), 0);
    ktune_graph *g2 = NULL;
    assert_int_equal(ktune_graph_parse(text, 0, &g2, &err), 0);
    assert_string_equal(ktune_graph_signature(g2), hex);
    free(text);
    ktune_graph_free(g2);
    ktune_graph_free(g);
    ktune_graph_free(NULL);
}

static void test_graph_errors(void **state)
{
    ktune_graph *g = (ktune_graph *)1;
    ktune_error err;
    assert_int_equal(ktune_graph_load(example("broken/bad_broadcast.json"), &g, &err), -EINVAL);
    assert_null(g);
    assert_int_equal(err.code, -EINVAL);
    assert_non_null(strstr(err.msg, "bad_broadcast.json"));
    assert_non_null(strstr(err.msg, "broadcast"));
    assert_null(strchr(err.msg, '\n'));
    assert_true(ktune_graph_load("/nonexistent/g.json", &g, &err) < 0);
    assert_non_null(strstr(err.msg, "/nonexistent/g.json"));
    assert_int_equal(ktune_graph_parse("{\"name\": 3}", 0, &g, &err), -EINVAL);
    assert_true(strlen(err.msg) > 0);
    assert_int_equal(ktune_graph_parse("not json", 0, &g, &err), -EINVAL);
    assert_int_equal(ktune_graph_load(NULL, &g, &err), -EINVAL);
    assert_int_equal(ktune_graph_n_inputs(NULL), 0);
    assert_null(ktune_graph_name(NULL));
}

static void test_misc(void **state)
{
    assert_string_equal(ktune_version(), "0.1.0");
    assert_string_equal(ktune_job_state_name(KTUNE_JOB_CANCELLED), "cancelled");
    assert_string_equal(ktune_job_state_name((ktune_job_state)42), "unknown");
    setenv("KTUNE_SOCKET", "/tmp/x.sock", 1);
    assert_string_equal(ktune_default_socket(), "/tmp/x.sock");
    setenv("KTUNE_SOCKET", "", 1);
    assert_string_equal(ktune_default_socket(), "/run/ktune/ktuned.sock");
    unsetenv("KTUNE_SOCKET");
    assert_int_equal(ktune_errno_from_name("ESHUTDOWN"), ESHUTDOWN);
    assert_string_equal(ktune_errno_name(-ENOSPC), "ENOSPC");
}

/* ---- hello ---- */

static void script_hello_only(dbl *d)
{
    dbl_hello(d, 1);
    DCHECK(d, !dbl_read(d)); /* then the client goes away */
}

static void test_hello(void **state)
{
    dbl d;
    ktune_client *c = NULL;
    ktune_error err;
    assert_int_equal(dbl_start(&d, script_hello_only, NULL, &c, &err), 0);
    const ktune_hello *h = ktune_client_hello(c);
    assert_string_equal(h->version, "0.1.0");
    assert_int_equal(h->protocol, 1);
    assert_int_equal(h->pid, 4242);
    assert_int_equal(h->uid, 1000);
    assert_int_equal(h->gpus, 2);
    dbl_finish(&d, c);
}

static void script_hello_v2(dbl *d)
{
    dbl_hello(d, 2);
    dbl_read(d);
}

static void test_hello_protocol_mismatch(void **state)
{
    dbl d;
    ktune_client *c = NULL;
    ktune_error err;
    assert_int_equal(dbl_start(&d, script_hello_v2, NULL, &c, &err), -EPROTO);
    assert_null(c);
    assert_non_null(strstr(err.msg, "protocol 2"));
    dbl_finish(&d, NULL);
}

/* ---- submit, status, errors ---- */

static void script_submit(dbl *d)
{
    dbl_hello(d, 1);
    DCHECK(d, dbl_read(d));
    const msgpack_object *o = &d->req.data;
    DCHECK(d, dbl_op(d, "submit"));
    DCHECK(d, dbl_id(d) == 2);
    const msgpack_object *g = get(o, "graph");
    DCHECK(d, g && g->type == MSGPACK_OBJECT_MAP);
    DCHECK(d, str_is(get(g, "name"), "gemm_bias_relu"));
    /* The graph travels in its msgpack form: the daemon parses it back to the same graph. */
    ops_graph *og = NULL;
    DCHECK(d, g && ops_graph_from_msgpack_object(g, &og, NULL) == 0);
    ops_graph_free(og);
    const msgpack_object *sh = get(o, "shapes");
    DCHECK(d, sh && sh->type == MSGPACK_OBJECT_MAP && sh->via.map.size == 1);
    DCHECK(d, int_of(get(sh, "M")) == 1024);
    DCHECK(d, str_is(get(o, "precision"), "tf32"));
    DCHECK(d, num_of(get(o, "budget_s")) == 30.0);
    DCHECK(d, int_of(get(o, "priority")) == 5);
    DCHECK(d, int_of(get(o, "gpu")) == -1);
    DCHECK(d, str_is(get(o, "name"), "mine"));
    DCHECK(d, get(o, "tolerance") == NULL); /* not given: the daemon's default */
    pk_ok(d, dbl_id(d), 2);
    pk_str(d, "job");
    pk_job(d, 17, "running", 40);
    pk_str(d, "joined");
    msgpack_pack_true(&d->pk);
    dbl_flush(d);
    /* status 99: an error reply */
    DCHECK(d, dbl_read(d));
    DCHECK(d, dbl_op(d, "status") && int_of(get(&d->req.data, "job")) == 99);
    pk_error(d, dbl_id(d), "ENOENT", "status: no job 99");
    dbl_flush(d);
    /* an error code the client does not know */
    DCHECK(d, dbl_read(d));
    pk_error(d, dbl_id(d), "EWHATEVER", "status: something odd");
    dbl_flush(d);
    /* status 17: first a stale event of some old watch, then the reply */
    DCHECK(d, dbl_read(d));
    DCHECK(d, dbl_op(d, "status") && int_of(get(&d->req.data, "job")) == 17);
    event_job(d, 1000, "progress", 3, "running", 1);
    reply_job(d, dbl_id(d), 17, "done", 44);
    dbl_read(d);
}

static void test_submit_status(void **state)
{
    dbl d;
    ktune_client *c = NULL;
    ktune_error err;
    ktune_graph *g = NULL;
    assert_int_equal(ktune_graph_load(example("gemm_bias_relu.json"), &g, &err), 0);
    assert_int_equal(dbl_start(&d, script_submit, NULL, &c, &err), 0);

    /* Argument errors are caught before anything is sent. */
    ktune_shape bad[] = {{"M", 0}};
    ktune_job j;
    bool joined = false;
    assert_int_equal(ktune_submit(c, g, bad, 1, NULL, &j, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "M=0"));
    ktune_submit_opts o = KTUNE_SUBMIT_OPTS_INIT;
    o.precision = "fast";
    ktune_shape shapes[] = {{"M", 1024}};
    assert_int_equal(ktune_submit(c, g, shapes, 1, &o, &j, NULL, &err), -EINVAL);
    o.precision = "tf32";
    o.priority = 500;
    assert_int_equal(ktune_submit(c, g, shapes, 1, &o, &j, NULL, &err), -EINVAL);
    o.priority = 5;
    o.budget_s = 30;
    o.name = "mine";

    int src = ktune_submit(c, g, shapes, 1, &o, &j, &joined, &err);
    if (src != 0)
        fail_msg("submit: %d %s (double: %s)", src, err.msg, d.fail);
    assert_string_equal(err.msg, "");
    assert_true(joined);
    assert_int_equal(j.id, 17);
    assert_int_equal(j.state, KTUNE_JOB_RUNNING);
    assert_string_equal(j.name, "gemm_bias_relu");
    assert_int_equal(j.priority, 5);
    assert_int_equal(j.gpu, 0);
    assert_string_equal(j.signature,
                        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    assert_string_equal(j.shapes, "M=1024;N=512");
    assert_string_equal(j.precision, "tf32");
    assert_true(j.budget_s == 30.0);
    assert_true(j.tolerance == 0.0);
    assert_int_equal(j.submitted, 1795000000);
    assert_int_equal(j.started, 1795000003);
    assert_int_equal(j.finished, 0);
    assert_string_equal(j.phase, "screen");
    assert_int_equal(j.trials, 40);
    assert_int_equal(j.measured, 38);
    assert_int_equal(j.resumed, 2);
    assert_true(j.elapsed_s == 12.5);
    assert_true(j.best_ns == 5980.0 && j.baseline_ns == 3780.0 && j.err_norm == 1.2e-4);
    assert_false(j.record);

    assert_int_equal(ktune_status(c, 99, &j, &err), -ENOENT);
    assert_int_equal(err.code, -ENOENT);
    assert_string_equal(err.msg, "status: no job 99");
    assert_int_equal(ktune_status(c, 99, &j, &err), -EIO);
    assert_string_equal(err.msg, "status: something odd");

    assert_int_equal(ktune_status(c, 17, &j, &err), 0);
    assert_int_equal(j.id, 17);
    assert_int_equal(j.state, KTUNE_JOB_DONE);
    assert_true(j.record);
    assert_string_equal(j.family, "gemm");
    assert_int_equal(j.trials, 44);
    dbl_finish(&d, c);
    ktune_graph_free(g);
}

/* ---- watch ---- */

static void script_watch(dbl *d)
{
    dbl_hello(d, 1);
    /* A full watch: reply, two progress events, the end. */
    DCHECK(d, dbl_read(d));
    DCHECK(d, dbl_op(d, "watch") && int_of(get(&d->req.data, "job")) == 7);
    uint64_t w = dbl_id(d);
    reply_job(d, w, 7, "queued", 0);
    event_job(d, w, "progress", 7, "running", 10);
    event_job(d, w, "progress", 7, "running", 20);
    event_job(d, w, "end", 7, "done", 30);
    /* A watch the caller leaves after the second callback: the rest of its events arrive
     * before the next reply and must be dropped. */
    DCHECK(d, dbl_read(d));
    w = dbl_id(d);
    reply_job(d, w, 8, "running", 1);
    event_job(d, w, "progress", 8, "running", 2);
    DCHECK(d, dbl_read(d)); /* status 8, sent after the caller stopped */
    uint64_t s = dbl_id(d);
    event_job(d, w, "progress", 8, "running", 3);
    event_job(d, w, "end", 8, "done", 4);
    reply_job(d, s, 8, "done", 4);
    /* A watch of a job that already ended: the reply is the last word. */
    DCHECK(d, dbl_read(d));
    w = dbl_id(d);
    reply_job(d, w, 9, "failed", 0);
    event_job(d, w, "end", 9, "failed", 0);
    /* A watch whose event is of another job: a protocol error. */
    DCHECK(d, dbl_read(d));
    w = dbl_id(d);
    reply_job(d, w, 10, "running", 0);
    event_job(d, w, "progress", 11, "running", 0);
    dbl_read(d);
}

typedef struct watch_log {
    int calls;
    int states[8];
    int trials[8];
    int stop_after; /* return non-zero at this call (0: never) */
    ktune_client *c;
    int reentry_rc;
} watch_log;

static int watch_cb(const ktune_job *j, void *ctx)
{
    watch_log *l = ctx;
    if (l->calls < 8) {
        l->states[l->calls] = (int)j->state;
        l->trials[l->calls] = j->trials;
    }
    l->calls++;
    if (l->c) { /* calling back into the same client must fail, not deadlock */
        ktune_job tmp;
        ktune_error e;
        l->reentry_rc = ktune_status(l->c, j->id, &tmp, &e);
    }
    return l->stop_after && l->calls >= l->stop_after;
}

static void test_watch(void **state)
{
    dbl d;
    ktune_client *c = NULL;
    ktune_error err;
    assert_int_equal(dbl_start(&d, script_watch, NULL, &c, &err), 0);
    watch_log l = {0};
    ktune_job fin;
    assert_int_equal(ktune_watch(c, 7, watch_cb, &l, &fin, &err), 0);
    assert_int_equal(l.calls, 4);
    assert_int_equal(l.states[0], KTUNE_JOB_QUEUED);
    assert_int_equal(l.states[1], KTUNE_JOB_RUNNING);
    assert_int_equal(l.trials[2], 20);
    assert_int_equal(l.states[3], KTUNE_JOB_DONE);
    assert_int_equal(fin.state, KTUNE_JOB_DONE);
    assert_int_equal(fin.trials, 30);

    watch_log l2 = {.stop_after = 2, .c = c};
    assert_int_equal(ktune_watch(c, 8, watch_cb, &l2, &fin, &err), 0);
    assert_int_equal(l2.calls, 2);
    assert_int_equal(l2.reentry_rc, -EDEADLK);
    assert_int_equal(fin.trials, 2);
    ktune_job j;
    assert_int_equal(ktune_status(c, 8, &j, &err), 0);
    assert_int_equal(j.state, KTUNE_JOB_DONE);

    watch_log l3 = {0};
    assert_int_equal(ktune_watch(c, 9, watch_cb, &l3, &fin, &err), 0);
    assert_int_equal(l3.calls, 1);
    assert_int_equal(fin.state, KTUNE_JOB_FAILED);

    watch_log l4 = {0};
    assert_int_equal(ktune_watch(c, 10, watch_cb, &l4, &fin, &err), -EPROTO);
    assert_non_null(strstr(err.msg, "job 11"));
    dbl_finish(&d, c);
}

/* ---- timeouts and a daemon that goes away ---- */

static void script_timeout(dbl *d)
{
    dbl_hello(d, 1);
    DCHECK(d, dbl_read(d)); /* status 1: no answer in time */
    uint64_t late = dbl_id(d);
    DCHECK(d, dbl_read(d)); /* status 2 */
    uint64_t now = dbl_id(d);
    reply_job(d, late, 1, "running", 1); /* the late reply, dropped by its id */
    reply_job(d, now, 2, "running", 2);
    DCHECK(d, dbl_read(d)); /* status 3: the daemon dies */
}

static void test_timeout_then_close(void **state)
{
    dbl d;
    ktune_client *c = NULL;
    ktune_error err;
    ktune_job j;
    assert_int_equal(dbl_start(&d, script_timeout, NULL, &c, &err), 0);
    ktune_client_set_timeout(c, 0.2);
    double t0 = mono();
    assert_int_equal(ktune_status(c, 1, &j, &err), -ETIMEDOUT);
    double dt = mono() - t0;
    assert_true(dt >= 0.19 && dt < 2.0);
    assert_non_null(strstr(err.msg, "no reply"));
    ktune_client_set_timeout(c, 5);
    assert_int_equal(ktune_status(c, 2, &j, &err), 0);
    assert_int_equal(j.id, 2);
    assert_int_equal(j.trials, 2);
    assert_int_equal(ktune_status(c, 3, &j, &err), -ECONNRESET);
    assert_non_null(strstr(err.msg, "closed the connection"));
    assert_non_null(strstr(err.msg, "test-socket"));
    /* Later calls fail at once with the same cause. */
    assert_int_equal(ktune_status(c, 3, &j, &err), -ECONNRESET);
    assert_non_null(strstr(err.msg, "unusable"));
    dbl_finish(&d, c);
}

/* ---- malformed replies ---- */

typedef enum { BAD_GARBAGE, BAD_DEEP, BAD_HUGE, BAD_NOT_MAP, BAD_FIELD, BAD_STATE } bad_kind;

static void script_bad(dbl *d)
{
    bad_kind kind = *(bad_kind *)d->arg;
    dbl_hello(d, 1);
    DCHECK(d, dbl_read(d));
    uint64_t id = dbl_id(d);
    switch (kind) {
    case BAD_GARBAGE: {
        static const unsigned char junk[] = {0xc1, 0xc1, 0xc1, 0xc1};
        msgpack_sbuffer_write(&d->sb, (const char *)junk, sizeof(junk));
        dbl_flush(d);
        break;
    }
    case BAD_DEEP:
        pk_ok(d, id, 1);
        pk_str(d, "job");
        for (int i = 0; i < 40; i++)
            msgpack_pack_array(&d->pk, 1);
        msgpack_pack_nil(&d->pk);
        dbl_flush(d);
        break;
    case BAD_HUGE: {
        /* A 100 MiB string: the client gives up at 64 MiB and closes. */
        pk_ok(d, id, 1);
        pk_str(d, "job");
        msgpack_pack_str(&d->pk, 100u << 20);
        dbl_flush(d);
        char *zeros = calloc(1, 1 << 20);
        for (int i = 0; i < 100 && zeros; i++)
            if (send(d->fd, zeros, 1 << 20, MSG_NOSIGNAL) <= 0)
                break;
        free(zeros);
        break;
    }
    case BAD_NOT_MAP:
        msgpack_pack_array(&d->pk, 2);
        msgpack_pack_uint64(&d->pk, id);
        msgpack_pack_true(&d->pk);
        dbl_flush(d);
        break;
    case BAD_FIELD:
        pk_ok(d, id, 1);
        pk_str(d, "job");
        msgpack_pack_map(&d->pk, 3);
        pk_kv_int(d, "job", 5);
        pk_kv_str(d, "state", "running");
        pk_kv_str(d, "trials", "many");
        dbl_flush(d);
        break;
    case BAD_STATE:
        pk_ok(d, id, 1);
        pk_str(d, "job");
        msgpack_pack_map(&d->pk, 2);
        pk_kv_int(d, "job", 5);
        pk_kv_str(d, "state", "sleeping");
        dbl_flush(d);
        break;
    }
    while (dbl_read(d))
        ;
}

static void check_bad(bad_kind kind, int want_rc, const char *want_msg)
{
    dbl d;
    ktune_client *c = NULL;
    ktune_error err;
    ktune_job j;
    assert_int_equal(dbl_start(&d, script_bad, &kind, &c, &err), 0);
    assert_int_equal(ktune_status(c, 5, &j, &err), want_rc);
    if (!strstr(err.msg, want_msg))
        fail_msg("expected '%s' in '%s'", want_msg, err.msg);
    dbl_finish(&d, c);
}

static void test_malformed_replies(void **state)
{
    check_bad(BAD_GARBAGE, -EPROTO, "not msgpack");
    check_bad(BAD_DEEP, -EPROTO, "deeper than 32");
    check_bad(BAD_HUGE, -EPROTO, "over 64 MiB");
    check_bad(BAD_NOT_MAP, -EPROTO, "not a map");
    check_bad(BAD_FIELD, -EPROTO, "'trials' is not an integer");
    check_bad(BAD_STATE, -EPROTO, "unknown state 'sleeping'");
}

/* ---- jobs, gpus, stats, lookup ---- */

static void script_queries(dbl *d)
{
    dbl_hello(d, 1);
    /* jobs --state running,done --limit 5 */
    DCHECK(d, dbl_read(d));
    DCHECK(d, dbl_op(d, "jobs"));
    const msgpack_object *st = get(&d->req.data, "state");
    DCHECK(d, st && st->type == MSGPACK_OBJECT_ARRAY && st->via.array.size == 2);
    DCHECK(d,
           st && str_is(&st->via.array.ptr[0], "running") && str_is(&st->via.array.ptr[1], "done"));
    DCHECK(d, int_of(get(&d->req.data, "limit")) == 5);
    pk_ok(d, dbl_id(d), 1);
    pk_str(d, "jobs");
    msgpack_pack_array(&d->pk, 2);
    pk_job(d, 12, "running", 3);
    pk_job(d, 11, "done", 9);
    dbl_flush(d);
    /* jobs, no filter: no state and no limit sent */
    DCHECK(d, dbl_read(d));
    DCHECK(d, get(&d->req.data, "state") == NULL && get(&d->req.data, "limit") == NULL);
    pk_ok(d, dbl_id(d), 1);
    pk_str(d, "jobs");
    msgpack_pack_array(&d->pk, 0);
    dbl_flush(d);
    /* gpus: none */
    DCHECK(d, dbl_read(d));
    DCHECK(d, dbl_op(d, "gpus"));
    pk_ok(d, dbl_id(d), 2);
    pk_str(d, "gpus");
    msgpack_pack_array(&d->pk, 0);
    pk_kv_str(d, "note", "no GPU: ktune-worker found no CUDA device");
    dbl_flush(d);
    /* gpus: one */
    DCHECK(d, dbl_read(d));
    pk_ok(d, dbl_id(d), 2);
    pk_str(d, "gpus");
    msgpack_pack_array(&d->pk, 1);
    msgpack_pack_map(&d->pk, 11);
    pk_kv_int(d, "index", 0);
    pk_kv_str(d, "name", "NVIDIA H100 80GB HBM3");
    pk_kv_str(d, "sm", "9.0");
    pk_kv_int(d, "sm_count", 132);
    pk_kv_int(d, "mem_bytes", 85030092800);
    pk_kv_int(d, "driver_version", 13000);
    pk_kv_int(d, "cuda_version", 13000);
    pk_kv_str(d, "state", "busy");
    pk_kv_int(d, "job", 12);
    pk_kv_int(d, "restarts", 1);
    pk_kv_str(d, "error", "");
    pk_kv_str(d, "note", "");
    dbl_flush(d);
    /* stats */
    DCHECK(d, dbl_read(d));
    DCHECK(d, dbl_op(d, "stats"));
    pk_ok(d, dbl_id(d), 7);
    pk_kv_f64(d, "uptime_s", 3600.5);
    pk_kv_int(d, "clients", 3);
    pk_kv_int(d, "requests", 12345);
    pk_str(d, "jobs");
    msgpack_pack_map(&d->pk, 5);
    pk_kv_int(d, "queued", 1);
    pk_kv_int(d, "running", 2);
    pk_kv_int(d, "done", 3);
    pk_kv_int(d, "failed", 4);
    pk_kv_int(d, "cancelled", 5);
    pk_kv_int(d, "gpus", 2);
    pk_kv_int(d, "rss_bytes", 10 << 20);
    pk_str(d, "cache");
    msgpack_pack_map(&d->pk, 6);
    pk_kv_str(d, "path", "/var/lib/ktune/cache");
    pk_kv_int(d, "records", 10);
    pk_kv_int(d, "keys", 4);
    pk_kv_int(d, "trials", 900);
    pk_kv_int(d, "map_size", 1 << 30);
    pk_kv_int(d, "map_used", 1 << 20);
    dbl_flush(d);
    /* lookup: found, with source */
    DCHECK(d, dbl_read(d));
    DCHECK(d, dbl_op(d, "lookup"));
    DCHECK(d, str_is(get(&d->req.data, "precision"), "exact"));
    DCHECK(d, int_of(get(&d->req.data, "gpu")) == 1);
    DCHECK(d, get(&d->req.data, "source") &&
                  get(&d->req.data, "source")->type == MSGPACK_OBJECT_BOOLEAN &&
                  get(&d->req.data, "source")->via.boolean);
    DCHECK(d, get(&d->req.data, "graph") && get(&d->req.data, "graph")->type == MSGPACK_OBJECT_MAP);
    pk_ok(d, dbl_id(d), 3);
    pk_str(d, "found");
    msgpack_pack_true(&d->pk);
    pk_str(d, "record");
    msgpack_pack_map(&d->pk, 13);
    pk_kv_str(d, "family", "gemm");
    pk_kv_str(d, "schedule", "gemm mma 128x64");
    pk_kv_f64(d, "time_ns", 5000);
    pk_kv_f64(d, "p10_ns", 4900);
    pk_kv_f64(d, "p90_ns", 5100);
    pk_kv_f64(d, "err_norm", 1e-4);
    pk_kv_f64(d, "tolerance", 1e-2);
    pk_kv_f64(d, "cublaslt_ns", 6000);
    pk_kv_int(d, "workspace_bytes", 4096);
    pk_kv_int(d, "kernels", 1);
    pk_kv_int(d, "created", 1795000000);
    pk_kv_str(d, "gpu", "NVIDIA H100 80GB HBM3");
    pk_kv_int(d, "rank", 0);
    pk_kv_str(d, "source", "__global__ void k() {}\n");
    dbl_flush(d);
    /* lookup: not found */
    DCHECK(d, dbl_read(d));
    DCHECK(d, get(&d->req.data, "source")->via.boolean == false);
    pk_ok(d, dbl_id(d), 1);
    pk_str(d, "found");
    msgpack_pack_false(&d->pk);
    dbl_flush(d);
    dbl_read(d);
}

static void test_queries(void **state)
{
    dbl d;
    ktune_client *c = NULL;
    ktune_error err;
    assert_int_equal(dbl_start(&d, script_queries, NULL, &c, &err), 0);

    ktune_job *jobs = NULL;
    size_t n = 0;
    assert_int_equal(ktune_jobs(c, 1u << 7, 0, &jobs, &n, &err), -EINVAL); /* unknown bit */
    assert_int_equal(
        ktune_jobs(c, (1u << KTUNE_JOB_RUNNING) | (1u << KTUNE_JOB_DONE), 5, &jobs, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(jobs[0].id, 12);
    assert_int_equal(jobs[1].state, KTUNE_JOB_DONE);
    free(jobs);
    assert_int_equal(ktune_jobs(c, 0, 0, &jobs, &n, &err), 0);
    assert_int_equal(n, 0);
    free(jobs);

    ktune_gpu *gpus = NULL;
    char note[256];
    assert_int_equal(ktune_gpus(c, &gpus, &n, note, &err), 0);
    assert_int_equal(n, 0);
    assert_string_equal(note, "no GPU: ktune-worker found no CUDA device");
    free(gpus);
    assert_int_equal(ktune_gpus(c, &gpus, &n, note, &err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(gpus[0].name, "NVIDIA H100 80GB HBM3");
    assert_int_equal(gpus[0].sm_major, 9);
    assert_int_equal(gpus[0].sm_minor, 0);
    assert_int_equal(gpus[0].sm_count, 132);
    assert_true(gpus[0].mem_bytes == 85030092800ull);
    assert_string_equal(gpus[0].state, "busy");
    assert_int_equal(gpus[0].job, 12);
    assert_int_equal(gpus[0].restarts, 1);
    assert_string_equal(note, "");
    free(gpus);

    ktune_stats s;
    assert_int_equal(ktune_stats_get(c, &s, &err), 0);
    assert_true(s.uptime_s == 3600.5);
    assert_int_equal(s.clients, 3);
    assert_int_equal(s.requests, 12345);
    for (int k = 0; k < 5; k++)
        assert_int_equal(s.jobs[k], k + 1);
    assert_string_equal(s.cache_path, "/var/lib/ktune/cache");
    assert_int_equal(s.cache_trials, 900);
    assert_int_equal(s.cache_map_size, 1 << 30);

    ktune_graph *g = NULL;
    assert_int_equal(ktune_graph_load(example("gemm_bias_relu.json"), &g, &err), 0);
    ktune_shape shapes[] = {{"M", 64}};
    bool found = false;
    ktune_record_info ri;
    char *src = NULL;
    assert_int_equal(ktune_lookup_remote(c, g, shapes, 1, NULL, 1, &found, &ri, &src, &err), 0);
    assert_true(found);
    assert_string_equal(ri.family, "gemm");
    assert_true(ri.time_ns == 5000 && ri.cublaslt_ns == 6000);
    assert_int_equal(ri.workspace_bytes, 4096);
    assert_int_equal(ri.n_kernels, 1);
    assert_string_equal(ri.gpu, "NVIDIA H100 80GB HBM3");
    assert_string_equal(src, "__global__ void k() {}\n");
    free(src);
    assert_int_equal(ktune_lookup_remote(c, g, shapes, 1, "exact", 0, &found, &ri, NULL, &err), 0);
    assert_false(found);
    ktune_graph_free(g);
    dbl_finish(&d, c);
}

/* ---- several threads on one client ---- */

#define N_THREADS 4
#define N_CALLS   50

static void script_echo(dbl *d)
{
    dbl_hello(d, 1);
    while (dbl_read(d)) {
        DCHECK(d, dbl_op(d, "status"));
        reply_job(d, dbl_id(d), (uint64_t)int_of(get(&d->req.data, "job")), "running", 1);
    }
}

typedef struct thread_arg {
    ktune_client *c;
    int base, wrong;
} thread_arg;

static void *status_thread(void *arg)
{
    thread_arg *t = arg;
    for (int i = 0; i < N_CALLS; i++) {
        ktune_job j;
        ktune_error err;
        uint64_t want = (uint64_t)(t->base + i + 1);
        if (ktune_status(t->c, want, &j, &err) != 0 || j.id != want)
            t->wrong++;
    }
    return NULL;
}

static void test_threads(void **state)
{
    dbl d;
    ktune_client *c = NULL;
    ktune_error err;
    assert_int_equal(dbl_start(&d, script_echo, NULL, &c, &err), 0);
    pthread_t th[N_THREADS];
    thread_arg args[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (thread_arg){c, i * 1000, 0};
        assert_int_equal(pthread_create(&th[i], NULL, status_thread, &args[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].wrong, 0);
    }
    dbl_finish(&d, c);
    assert_int_equal(d.n_req, 1 + N_THREADS * N_CALLS);
}

/* ---- ktune_connect on real sockets ---- */

typedef struct listener {
    int fd;
    dbl d;
} listener;

static void *accept_one(void *arg)
{
    listener *l = arg;
    int fd = accept(l->fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    l->d.fd = fd;
    script_hello_only(&l->d);
    close(fd);
    return NULL;
}

static void test_connect(void **state)
{
    char dir[] = "/tmp/ktune-test-client-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[100];
    snprintf(path, sizeof(path), "%s/ktuned.sock", dir);
    ktune_client *c = NULL;
    ktune_error err;

    /* Nothing there. */
    assert_int_equal(ktune_connect(path, &c, &err), -ENOENT);
    assert_null(c);
    assert_non_null(strstr(err.msg, "cannot reach ktuned at"));
    assert_non_null(strstr(err.msg, path));
    /* A socket file nobody listens on. */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(ktune_connect(path, &c, &err), -ECONNREFUSED);
    /* A path too long for a Unix socket. */
    char longp[200];
    memset(longp, 'x', sizeof(longp) - 1);
    longp[0] = '/';
    longp[sizeof(longp) - 1] = '\0';
    assert_int_equal(ktune_connect(longp, &c, &err), -ENAMETOOLONG);
    /* Listening, through $KTUNE_SOCKET: connect and hello. */
    assert_int_equal(listen(fd, 4), 0);
    listener l = {.fd = fd};
    assert_true(msgpack_unpacker_init(&l.d.up, 65536));
    msgpack_unpacked_init(&l.d.req);
    msgpack_sbuffer_init(&l.d.sb);
    msgpack_packer_init(&l.d.pk, &l.d.sb, msgpack_sbuffer_write);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, accept_one, &l), 0);
    setenv("KTUNE_SOCKET", path, 1);
    assert_int_equal(ktune_connect(NULL, &c, &err), 0);
    unsetenv("KTUNE_SOCKET");
    assert_int_equal(ktune_client_hello(c)->gpus, 2);
    ktune_disconnect(c);
    pthread_join(th, NULL);
    msgpack_unpacked_destroy(&l.d.req);
    msgpack_unpacker_destroy(&l.d.up);
    msgpack_sbuffer_destroy(&l.d.sb);
    if (l.d.fail[0])
        fail_msg("%s", l.d.fail);
    close(fd);
    unlink(path);
    rmdir(dir);
    ktune_disconnect(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_load),
        cmocka_unit_test(test_graph_errors),
        cmocka_unit_test(test_misc),
        cmocka_unit_test(test_hello),
        cmocka_unit_test(test_hello_protocol_mismatch),
        cmocka_unit_test(test_submit_status),
        cmocka_unit_test(test_watch),
        cmocka_unit_test(test_timeout_then_close),
        cmocka_unit_test(test_malformed_replies),
        cmocka_unit_test(test_queries),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_connect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
