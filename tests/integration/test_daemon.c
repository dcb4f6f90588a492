/* ktuned end to end over its socket, with a tiny raw-msgpack client: the fake worker (tests/
 * fake_worker) stands in for ktune-worker, candidates are really emitted and compiled with NVRTC.
 * hello, gpus, submit -> watch -> done with a record, status, duplicate join, lookup, stats, jobs,
 * error replies; cancel of a queued job and of a running one; priorities on one GPU; SIGTERM
 * with a running job (exit 0 within 10 s, the job queued again) and the restart that resumes it;
 * the no-GPU daemon. Environment: KTUNED_BIN, KTUNE_FAKE_WORKER, KTUNE_SOURCE_ROOT. */
#include "ops/ops.h"

#include <fcntl.h>
#include <ftw.h>
#include <msgpack.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[64], sock_path[100], cache_dir[100], log_path[100];
static pid_t daemon_pid = -1;
static ops_graph *softmax;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the daemon process ---- */

/* Starts ktuned on the test's socket and cache with the fake worker; env entries "K=V" are added
 * to the daemon's environment (the fake worker inherits them). */
static void start_daemon(const char *const *env)
{
    const char *bin = getenv("KTUNED_BIN"), *worker = getenv("KTUNE_FAKE_WORKER");
    assert_non_null(bin);
    assert_non_null(worker);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 2);
        dup2(fd, 1);
        for (; env && *env; env++)
            putenv((char *)*env);
        execl(bin, bin, "--socket", sock_path, "--cache", cache_dir, "--worker", worker, "--gpus",
              "0", "--compile-jobs", "2", "--config", "/dev/null", (char *)NULL);
        _exit(127);
    }
    daemon_pid = pid;
    /* ready when the socket accepts */
    for (double t0 = now_s(); now_s() - t0 < 10;) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
        int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
        close(fd);
        if (rc == 0)
            return;
        usleep(20000);
    }
    fail_msg("ktuned did not listen on %s within 10 s (log: %s)", sock_path, log_path);
}

/* SIGTERM; asserts a clean exit (status 0) within 10 s and returns the seconds it took. */
static double stop_daemon(void)
{
    assert_true(daemon_pid > 0);
    double t0 = now_s();
    kill(daemon_pid, SIGTERM);
    int status = 0;
    for (;;) {
        pid_t r = waitpid(daemon_pid, &status, WNOHANG);
        if (r == daemon_pid)
            break;
        if (now_s() - t0 > 10) {
            kill(daemon_pid, SIGKILL);
            waitpid(daemon_pid, &status, 0);
            daemon_pid = -1;
            fail_msg("ktuned did not exit within 10 s of SIGTERM (log: %s)", log_path);
        }
        usleep(10000);
    }
    daemon_pid = -1;
    double took = now_s() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("ktuned exited with wait status %#x (log: %s)", (unsigned)status, log_path);
    return took;
}

/* ---- a raw msgpack client ---- */

typedef struct client {
    int fd;
    msgpack_unpacker up;
    uint64_t next_id;
} client;

static void client_open(client *c)
{
    c->fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
    assert_int_equal(connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_true(msgpack_unpacker_init(&c->up, 1 << 16));
    c->next_id = 1;
}

static void client_close(client *c)
{
    close(c->fd);
    msgpack_unpacker_destroy(&c->up);
}

typedef struct req {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t id;
} req;

static void pk_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* {"v": 1, "id": N, "op": op, ...n_args pairs the caller packs next} */
static void req_begin(client *c, req *r, const char *op, int n_args)
{
    msgpack_sbuffer_init(&r->sb);
    msgpack_packer_init(&r->pk, &r->sb, msgpack_sbuffer_write);
    r->id = c->next_id++;
    msgpack_pack_map(&r->pk, 3 + (size_t)n_args);
    pk_str(&r->pk, "v");
    msgpack_pack_int(&r->pk, 1);
    pk_str(&r->pk, "id");
    msgpack_pack_uint64(&r->pk, r->id);
    pk_str(&r->pk, "op");
    pk_str(&r->pk, op);
}

static void send_raw(client *c, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

/* Next message (a map) within timeout; false when none came. */
static bool recv_msg(client *c, msgpack_unpacked *out, double timeout)
{
    double end = now_s() + timeout;
    for (;;) {
        msgpack_unpack_return ur = msgpack_unpacker_next(&c->up, out);
        if (ur == MSGPACK_UNPACK_SUCCESS) {
            assert_int_equal(out->data.type, MSGPACK_OBJECT_MAP);
            return true;
        }
        assert_int_equal(ur, MSGPACK_UNPACK_CONTINUE);
        double left = end - now_s();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
            continue;
        assert_true(msgpack_unpacker_reserve_buffer(&c->up, 1 << 16));
        ssize_t n =
            read(c->fd, msgpack_unpacker_buffer(&c->up), msgpack_unpacker_buffer_capacity(&c->up));
        if (n <= 0)
            return false;
        msgpack_unpacker_buffer_consumed(&c->up, (size_t)n);
    }
}

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

static int64_t get_int(const msgpack_object *m, const char *key)
{
    const msgpack_object *v = get(m, key);
    assert_non_null(v);
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return v->via.i64;
    assert_int_equal(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    return (int64_t)v->via.u64;
}

static double get_f64(const msgpack_object *m, const char *key)
{
    const msgpack_object *v = get(m, key);
    assert_non_null(v);
    assert_true(v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32);
    return v->via.f64;
}

static bool get_bool(const msgpack_object *m, const char *key)
{
    const msgpack_object *v = get(m, key);
    assert_non_null(v);
    assert_int_equal(v->type, MSGPACK_OBJECT_BOOLEAN);
    return v->via.boolean;
}

/* The string at key, copied (static buffer per call site is enough for these tests). */
static const char *get_str(const msgpack_object *m, const char *key, char *buf, size_t len)
{
    const msgpack_object *v = get(m, key);
    assert_non_null(v);
    assert_int_equal(v->type, MSGPACK_OBJECT_STR);
    snprintf(buf, len, "%.*s", (int)v->via.str.size, v->via.str.ptr);
    return buf;
}

static bool str_is(const msgpack_object *m, const char *key, const char *want)
{
    char buf[512];
    return strcmp(get_str(m, key, buf, sizeof(buf)), want) == 0;
}

/* Sends r and waits for its reply (events of other requests are skipped). *out is the caller's
 * to destroy. */
static void call(client *c, req *r, msgpack_unpacked *out)
{
    send_raw(c, r->sb.data, r->sb.size);
    msgpack_sbuffer_destroy(&r->sb);
    msgpack_unpacked_init(out);
    for (;;) {
        if (!recv_msg(c, out, 30))
            fail_msg("no reply to request %llu (log: %s)", (unsigned long long)r->id, log_path);
        if (get(&out->data, "event") || (uint64_t)get_int(&out->data, "id") != r->id)
            continue;
        return;
    }
}

static void expect_ok(const msgpack_unpacked *m)
{
    if (!get_bool(&m->data, "ok")) {
        char msg[512];
        fail_msg("error reply: %s", get_str(get(&m->data, "error"), "msg", msg, sizeof(msg)));
    }
}

static void expect_error(const msgpack_unpacked *m, const char *code, const char *needle)
{
    assert_false(get_bool(&m->data, "ok"));
    const msgpack_object *e = get(&m->data, "error");
    char got[64], msg[512];
    get_str(e, "code", got, sizeof(got));
    get_str(e, "msg", msg, sizeof(msg));
    if (strcmp(got, code) != 0 || (needle && !strstr(msg, needle)))
        fail_msg("expected %s (%s), got %s: %s", code, needle ? needle : "", got, msg);
}

/* A simple request with up to one unsigned argument. */
static void simple(client *c, const char *op, const char *arg, uint64_t value,
                   msgpack_unpacked *out)
{
    req r;
    req_begin(c, &r, op, arg ? 1 : 0);
    if (arg) {
        pk_str(&r.pk, arg);
        msgpack_pack_uint64(&r.pk, value);
    }
    call(c, &r, out);
}

typedef struct job_args {
    const ops_graph *g;
    int64_t m, n;
    double budget_s;
    int priority;
    double tolerance;
} job_args;

static void submit(client *c, const job_args *a, msgpack_unpacked *out)
{
    req r;
    req_begin(c, &r, "submit", 5);
    pk_str(&r.pk, "graph");
    assert_int_equal(ops_graph_pack(&r.pk, a->g), 0);
    pk_str(&r.pk, "shapes");
    msgpack_pack_map(&r.pk, 2);
    pk_str(&r.pk, "M");
    msgpack_pack_int64(&r.pk, a->m);
    pk_str(&r.pk, "N");
    msgpack_pack_int64(&r.pk, a->n);
    pk_str(&r.pk, "budget_s");
    msgpack_pack_double(&r.pk, a->budget_s);
    pk_str(&r.pk, "priority");
    msgpack_pack_int(&r.pk, a->priority);
    pk_str(&r.pk, "tolerance");
    msgpack_pack_double(&r.pk, a->tolerance);
    call(c, &r, out);
}

static uint64_t submit_id(client *c, const job_args *a, bool *joined)
{
    msgpack_unpacked m;
    submit(c, a, &m);
    expect_ok(&m);
    uint64_t id = (uint64_t)get_int(get(&m.data, "job"), "job");
    if (joined)
        *joined = get_bool(&m.data, "joined");
    msgpack_unpacked_destroy(&m);
    return id;
}

/* The job's state name into buf; the whole Job into *job when non-NULL (caller destroys m). */
static const char *job_state(client *c, uint64_t id, char *buf, size_t len)
{
    msgpack_unpacked m;
    simple(c, "status", "job", id, &m);
    expect_ok(&m);
    get_str(get(&m.data, "job"), "state", buf, len);
    msgpack_unpacked_destroy(&m);
    return buf;
}

static void wait_state(client *c, uint64_t id, const char *want, double timeout)
{
    char st[32] = "";
    for (double t0 = now_s(); now_s() - t0 < timeout; usleep(50000))
        if (strcmp(job_state(c, id, st, sizeof(st)), want) == 0)
            return;
    fail_msg("job %llu is %s, not %s, after %.0f s (log: %s)", (unsigned long long)id, st, want,
             timeout, log_path);
}

static void wait_gpu_up(client *c)
{
    for (double t0 = now_s(); now_s() - t0 < 20; usleep(50000)) {
        msgpack_unpacked m;
        simple(c, "hello", NULL, 0, &m);
        expect_ok(&m);
        int64_t n = get_int(&m.data, "gpus");
        msgpack_unpacked_destroy(&m);
        if (n == 1)
            return;
    }
    fail_msg("the GPU did not come up (log: %s)", log_path);
}

/* ---- fixtures ---- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/ktuned-test-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(sock_path, sizeof(sock_path), "%s/ktuned.sock", dir);
    snprintf(cache_dir, sizeof(cache_dir), "%s/cache", dir);
    snprintf(log_path, sizeof(log_path), "%s/ktuned.log", dir);
    return 0;
}

static int teardown(void **state)
{
    /* a daemon still running: the test ended early, on a failed assertion */
    bool failed = daemon_pid > 0;
    if (daemon_pid > 0) {
        kill(daemon_pid, SIGKILL);
        waitpid(daemon_pid, NULL, 0);
        daemon_pid = -1;
    }
    /* the log of a failed test on stdout: its last 60 lines (every line with KTUNED_TEST_LOG) */
    bool all = getenv("KTUNED_TEST_LOG") != NULL;
    FILE *f = fopen(log_path, "r");
    if (f && (failed || all)) {
        static char ring[60][1024];
        long n = 0;
        printf("---- %s ----\n", log_path);
        while (fgets(ring[n % 60], sizeof(ring[0]), f))
            if (all)
                fputs(ring[n % 60], stdout);
            else
                n++;
        for (long i = n > 60 ? n - 60 : 0; i < n; i++)
            fputs(ring[i % 60], stdout);
    }
    if (f)
        fclose(f);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* ---- tests ---- */

static void test_submit_watch_lookup(void **state)
{
    start_daemon(NULL);
    client c;
    client_open(&c);
    wait_gpu_up(&c);

    msgpack_unpacked m;
    simple(&c, "hello", NULL, 0, &m);
    expect_ok(&m);
    assert_int_equal(get_int(&m.data, "protocol"), 1);
    assert_int_equal(get_int(&m.data, "pid"), daemon_pid);
    assert_int_equal(get_int(&m.data, "uid"), getuid());
    msgpack_unpacked_destroy(&m);

    simple(&c, "gpus", NULL, 0, &m);
    expect_ok(&m);
    const msgpack_object *gpus = get(&m.data, "gpus");
    assert_int_equal(gpus->via.array.size, 1);
    assert_true(str_is(&gpus->via.array.ptr[0], "name", "NVIDIA H100 80GB HBM3"));
    assert_true(str_is(&gpus->via.array.ptr[0], "sm", "9.0"));
    assert_true(str_is(&gpus->via.array.ptr[0], "state", "idle"));
    assert_true(str_is(&m.data, "note", ""));
    msgpack_unpacked_destroy(&m);

    /* submit, then watch until the end */
    job_args a = {softmax, 64, 128, 60, 0, 0};
    bool joined = true;
    uint64_t id = submit_id(&c, &a, &joined);
    assert_false(joined);
    req r;
    req_begin(&c, &r, "watch", 1);
    pk_str(&r.pk, "job");
    msgpack_pack_uint64(&r.pk, id);
    uint64_t watch_id = r.id;
    call(&c, &r, &m);
    expect_ok(&m);
    assert_int_equal(get_int(get(&m.data, "job"), "job"), id);
    msgpack_unpacked_destroy(&m);
    int progress = 0;
    double last = 0, min_gap = 1e9;
    char st[32];
    for (;;) {
        msgpack_unpacked_init(&m);
        if (!recv_msg(&c, &m, 120))
            fail_msg("no end event for job %llu (log: %s)", (unsigned long long)id, log_path);
        assert_int_equal(get_int(&m.data, "id"), watch_id);
        bool end = str_is(&m.data, "event", "end");
        if (!end) {
            assert_true(str_is(&m.data, "event", "progress"));
            assert_true(str_is(get(&m.data, "job"), "state", "running"));
            double t = now_s();
            if (progress++ > 0 && t - last < min_gap)
                min_gap = t - last;
            last = t;
            msgpack_unpacked_destroy(&m);
            continue;
        }
        const msgpack_object *j = get(&m.data, "job");
        get_str(j, "state", st, sizeof(st));
        if (strcmp(st, "done") != 0) {
            char err[256];
            fail_msg("job ended %s: %s", st, get_str(j, "error", err, sizeof(err)));
        }
        assert_true(get_bool(j, "record"));
        assert_true(get_int(j, "trials") > 0);
        assert_true(get_f64(j, "best_ns") > 0);
        assert_true(get_int(j, "finished") >= get_int(j, "started"));
        assert_int_equal(get_int(j, "gpu"), 0);
        char fam[32];
        assert_true(get_str(j, "family", fam, sizeof(fam))[0] != '\0');
        msgpack_unpacked_destroy(&m);
        break;
    }
    assert_true(progress >= 1);
    if (progress >= 3) /* throttled to 4 a second (a little slack for the timer) */
        assert_true(min_gap > 0.15);

    /* status of the finished job; a duplicate joins it; watching it ends at once */
    simple(&c, "status", "job", id, &m);
    expect_ok(&m);
    assert_true(str_is(get(&m.data, "job"), "state", "done"));
    assert_true(str_is(get(&m.data, "job"), "precision", "exact"));
    assert_int_equal(get_int(get(get(&m.data, "job"), "shapes"), "M"), 64);
    msgpack_unpacked_destroy(&m);
    assert_int_equal(submit_id(&c, &a, &joined), id);
    assert_true(joined);
    simple(&c, "watch", "job", id, &m);
    expect_ok(&m);
    msgpack_unpacked_destroy(&m);
    msgpack_unpacked_init(&m);
    assert_true(recv_msg(&c, &m, 5));
    assert_true(str_is(&m.data, "event", "end"));
    msgpack_unpacked_destroy(&m);

    /* lookup finds the record, with its source on request */
    req_begin(&c, &r, "lookup", 3);
    pk_str(&r.pk, "graph");
    ops_graph_pack(&r.pk, softmax);
    pk_str(&r.pk, "shapes");
    msgpack_pack_map(&r.pk, 2);
    pk_str(&r.pk, "N");
    msgpack_pack_int(&r.pk, 128);
    pk_str(&r.pk, "M");
    msgpack_pack_int(&r.pk, 64);
    pk_str(&r.pk, "source");
    msgpack_pack_true(&r.pk);
    call(&c, &r, &m);
    expect_ok(&m);
    assert_true(get_bool(&m.data, "found"));
    const msgpack_object *rec = get(&m.data, "record");
    assert_true(get_f64(rec, "time_ns") > 0);
    assert_true(str_is(rec, "gpu", "NVIDIA H100 80GB HBM3"));
    assert_non_null(get(&m.data, "source"));
    msgpack_unpacked_destroy(&m);
    /* other shapes: not found */
    req_begin(&c, &r, "lookup", 2);
    pk_str(&r.pk, "graph");
    ops_graph_pack(&r.pk, softmax);
    pk_str(&r.pk, "shapes");
    msgpack_pack_map(&r.pk, 2);
    pk_str(&r.pk, "N");
    msgpack_pack_int(&r.pk, 256);
    pk_str(&r.pk, "M");
    msgpack_pack_int(&r.pk, 64);
    call(&c, &r, &m);
    expect_ok(&m);
    assert_false(get_bool(&m.data, "found"));
    msgpack_unpacked_destroy(&m);

    simple(&c, "stats", NULL, 0, &m);
    expect_ok(&m);
    assert_int_equal(get_int(get(&m.data, "jobs"), "done"), 1);
    assert_true(get_int(&m.data, "rss_bytes") > 0);
    assert_true(get_int(get(&m.data, "cache"), "records") >= 1);
    assert_true(get_int(&m.data, "clients") >= 1);
    msgpack_unpacked_destroy(&m);
    simple(&c, "jobs", NULL, 0, &m);
    expect_ok(&m);
    assert_int_equal(get(&m.data, "jobs")->via.array.size, 1);
    msgpack_unpacked_destroy(&m);

    /* error replies keep the connection open */
    simple(&c, "frobnicate", NULL, 0, &m);
    expect_error(&m, "ENOSYS", "frobnicate");
    msgpack_unpacked_destroy(&m);
    simple(&c, "status", "job", 999, &m);
    expect_error(&m, "ENOENT", "999");
    msgpack_unpacked_destroy(&m);
    simple(&c, "cancel", "job", id, &m);
    expect_error(&m, "EINVAL", "already done");
    msgpack_unpacked_destroy(&m);
    job_args bad = {softmax, 64, 0, 60, 0, 0};
    submit(&c, &bad, &m);
    expect_error(&m, "EINVAL", "shapes.N");
    msgpack_unpacked_destroy(&m);
    /* {"id": 7, "op": "hello"} without "v" */
    static const uint8_t no_v[] = {0x82, 0xa2, 'i', 'd', 0x07, 0xa2, 'o',
                                   'p',  0xa5, 'h', 'e', 'l',  'l',  'o'};
    send_raw(&c, no_v, sizeof(no_v));
    msgpack_unpacked_init(&m);
    assert_true(recv_msg(&c, &m, 5));
    assert_int_equal(get_int(&m.data, "id"), 7);
    expect_error(&m, "EPROTO", "'v'");
    msgpack_unpacked_destroy(&m);
    simple(&c, "hello", NULL, 0, &m);
    expect_ok(&m);
    msgpack_unpacked_destroy(&m);
    client_close(&c);
    stop_daemon();
}

/* One GPU, a slow fake worker: a running job, then queued ones; the higher priority runs first,
 * a queued job is cancelled at once, a running one after its candidate in flight. */
static void test_priorities_and_cancel(void **state)
{
    static const char *const env[] = {"FAKE_DELAY_MS=150", NULL};
    start_daemon(env);
    client c;
    client_open(&c);
    wait_gpu_up(&c);
    job_args first = {softmax, 32, 64, 3, 0, 0};
    uint64_t a = submit_id(&c, &first, NULL);
    wait_state(&c, a, "running", 20);
    job_args low = {softmax, 32, 128, 3, 0, 0}, high = {softmax, 16, 128, 2, 50, 0},
             doomed = {softmax, 32, 256, 3, 0, 0};
    uint64_t b = submit_id(&c, &low, NULL);
    uint64_t h = submit_id(&c, &high, NULL);
    uint64_t x = submit_id(&c, &doomed, NULL);
    char st[32];
    assert_string_equal(job_state(&c, b, st, sizeof(st)), "queued");
    assert_string_equal(job_state(&c, x, st, sizeof(st)), "queued");

    /* cancel of a queued job: at once */
    msgpack_unpacked m;
    simple(&c, "cancel", "job", x, &m);
    expect_ok(&m);
    assert_true(str_is(get(&m.data, "job"), "state", "cancelled"));
    msgpack_unpacked_destroy(&m);

    /* the higher priority job runs before the older, lower one */
    char sb[32], sh[32];
    for (double t0 = now_s();; usleep(20000)) {
        if (now_s() - t0 > 60)
            fail_msg("job %llu never ran (log: %s)", (unsigned long long)h, log_path);
        job_state(&c, b, sb, sizeof(sb));
        job_state(&c, h, sh, sizeof(sh));
        assert_string_equal(sb, "queued"); /* never before h */
        if (strcmp(sh, "queued") != 0)
            break;
    }
    wait_state(&c, h, "done", 60);
    wait_state(&c, b, "running", 30);

    /* cancel of a running job: cancelled after the candidate in flight */
    simple(&c, "cancel", "job", b, &m);
    expect_ok(&m);
    msgpack_unpacked_destroy(&m);
    wait_state(&c, b, "cancelled", 10);
    simple(&c, "status", "job", b, &m);
    expect_ok(&m);
    char err[256];
    assert_non_null(strstr(get_str(get(&m.data, "job"), "error", err, sizeof(err)), "cancel"));
    msgpack_unpacked_destroy(&m);
    /* a cancelled job's duplicate starts a new job */
    bool joined = true;
    uint64_t again = submit_id(&c, &low, &joined);
    assert_false(joined);
    assert_true(again > x);

    simple(&c, "jobs", NULL, 0, &m);
    expect_ok(&m);
    const msgpack_object *list = get(&m.data, "jobs");
    assert_int_equal(list->via.array.size, 5);
    assert_int_equal(get_int(&list->via.array.ptr[0], "job"), again); /* newest first */
    msgpack_unpacked_destroy(&m);
    client_close(&c);
    stop_daemon();
}

/* SIGTERM with a running job: exit 0 within 10 s, the job queued again in the journal; the
 * restart resumes it from its trial log and finishes it. */
static void test_sigterm_and_resume(void **state)
{
    static const char *const slow[] = {"FAKE_DELAY_MS=300", NULL};
    start_daemon(slow);
    client c;
    client_open(&c);
    wait_gpu_up(&c);
    job_args a = {softmax, 64, 64, 120, 5, 0};
    uint64_t id = submit_id(&c, &a, NULL);
    msgpack_unpacked m;
    int64_t trials = 0;
    for (double t0 = now_s(); trials < 3; usleep(100000)) {
        if (now_s() - t0 > 60)
            fail_msg("job %llu made no progress (log: %s)", (unsigned long long)id, log_path);
        simple(&c, "status", "job", id, &m);
        expect_ok(&m);
        trials = get_int(get(&m.data, "job"), "trials");
        msgpack_unpacked_destroy(&m);
    }
    client_close(&c);
    double took = stop_daemon();
    assert_true(took < 10);

    start_daemon(NULL);
    client_open(&c);
    simple(&c, "status", "job", id, &m);
    expect_ok(&m);
    const msgpack_object *j = get(&m.data, "job");
    char st[32];
    get_str(j, "state", st, sizeof(st));
    assert_true(strcmp(st, "queued") == 0 || strcmp(st, "running") == 0);
    assert_int_equal(get_int(j, "priority"), 5);
    assert_true(get_f64(j, "elapsed_s") > 0);
    msgpack_unpacked_destroy(&m);
    wait_state(&c, id, "done", 120);
    simple(&c, "status", "job", id, &m);
    expect_ok(&m);
    j = get(&m.data, "job");
    assert_true(get_bool(j, "record"));
    assert_true(get_int(j, "resumed") >= trials - 1); /* all but the one in flight at most */
    msgpack_unpacked_destroy(&m);
    client_close(&c);
    stop_daemon();
}

/* The worker finds no device: every other op still works, gpus says why, submit is ENODEV. */
static void test_no_gpu(void **state)
{
    static const char *const env[] = {"FAKE_NODEV=1", NULL};
    start_daemon(env);
    client c;
    client_open(&c);
    msgpack_unpacked m;
    bool noted = false;
    for (double t0 = now_s(); !noted && now_s() - t0 < 20; usleep(50000)) {
        simple(&c, "gpus", NULL, 0, &m);
        expect_ok(&m);
        char note[256];
        get_str(&m.data, "note", note, sizeof(note));
        if (note[0]) {
            assert_int_equal(get(&m.data, "gpus")->via.array.size, 0);
            assert_non_null(strstr(note, "no GPU"));
            assert_null(strchr(note, '\n'));
            noted = true;
        }
        msgpack_unpacked_destroy(&m);
    }
    assert_true(noted);
    simple(&c, "hello", NULL, 0, &m);
    expect_ok(&m);
    assert_int_equal(get_int(&m.data, "gpus"), 0);
    msgpack_unpacked_destroy(&m);
    job_args a = {softmax, 64, 64, 10, 0, 0};
    submit(&c, &a, &m);
    expect_error(&m, "ENODEV", "no GPU");
    msgpack_unpacked_destroy(&m);
    simple(&c, "stats", NULL, 0, &m);
    expect_ok(&m);
    assert_int_equal(get_int(&m.data, "gpus"), 0);
    msgpack_unpacked_destroy(&m);
    simple(&c, "jobs", NULL, 0, &m);
    expect_ok(&m);
    assert_int_equal(get(&m.data, "jobs")->via.array.size, 0);
    msgpack_unpacked_destroy(&m);
    client_close(&c);
    stop_daemon();
}

static ops_graph *load_example(const char *name)
{
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    char path[1024];
    snprintf(path, sizeof(path), "%s/examples/%s", root ? root : ".", name);
    ops_graph *g = NULL;
    ops_diag d = {0};
    if (ops_graph_from_json_file(path, &g, &d) < 0 || ops_graph_validate(g, &d) < 0) {
        fprintf(stderr, "%s: %s\n", path, d.msg);
        exit(1);
    }
    return g;
}

int main(void)
{
    if (!getenv("KTUNED_BIN") || !getenv("KTUNE_FAKE_WORKER")) {
        fprintf(stderr, "test_daemon: KTUNED_BIN and KTUNE_FAKE_WORKER must be set\n");
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);
    softmax = load_example("softmax.json");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_submit_watch_lookup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_priorities_and_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigterm_and_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_gpu, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ops_graph_free(softmax);
    return rc;
}
