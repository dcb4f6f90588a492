/* A test double of ktune-worker at the process boundary: it speaks the real protocol
 * (search/worker.h, encoded by search/worker_proto.c) on stdin/stdout but touches no GPU, so the
 * supervisor and the search strategy run in CI.
 *
 * Each candidate gets a "fake key": its kernel entry names joined by '+' then "@<nodes of the
 * group>", or "cublasLt#<heuristic index>@<nodes>" for a library candidate. An assembled cache
 * record ("record": true) gets "record:<entries or cublasLt#<index>> n=<nodes of the graph>
 * ws=<workspace bytes> cubin=<16 hex digits of FNV-1a over the cubin, 0 without>": no '@', so a
 * candidate's key never matches it, and "record:" matches every record. Its time is a
 * deterministic function of that key (10 us * 1.01^(FNV-1a(key) mod 400)), so every run measures
 * the same thing and distinct candidates differ by at least 1%, which is 100 ns or more: past the
 * search's ties (0.5% re-timed, 64 ns absolute), so two of them never tie by accident.
 *
 * Behaviour on command, by environment variables holding comma-separated substrings of fake
 * keys:
 *   FAKE_FAULT   the process dies (SIGKILL to itself): a fault that kills the worker
 *   FAKE_STICKY  replies status "fault" and stays up (a poisoned context the supervisor must
 *                replace)
 *   FAKE_HANG    never replies (sleeps): the supervisor's deadline must fire
 *   FAKE_WRONG   replies status "wrong" with a normwise error of 0.5
 *   FAKE_FAST    a matching candidate takes a hundredth of its time (steers which one wins a
 *                group: "cublasLt" makes the library win every matmul group)
 *   FAKE_ERR     pairs "SUBSTRING=NORM/MAX": a passing candidate whose key contains SUBSTRING
 *                reports normwise error NORM and elementwise ratio MAX (default 1e-7 and 0.01)
 * and:
 *   FAKE_DELAY_MS  sleeps this long in every eval (budget tests)
 *   FAKE_LOG       appends "<fake key>\n" to this file for every eval it receives
 *   FAKE_LOG_DETAIL  (with FAKE_LOG; any non-empty value) each line becomes
 *                  "<fake key>\t<sub>\t<bindings>\t<pid>\t<ms>": sub, 16 hex digits of an FNV-1a
 *                  hash of the request's msgpack "sub" (which group); bindings, "M=64,N=128"
 *                  (those of "full" when the request has it, else of "sub": which job, when jobs
 *                  differ in shapes); pid, this worker's; ms, CLOCK_REALTIME milliseconds; then
 *                  "\tload" when the request neither verifies nor times (a finalist loaded
 *                  again to be re-timed: not a measurement), or "\trecord" for an assembled
 *                  record (an evaluation like a candidate's)
 *   FAKE_NODEV     hello answers ENODEV, as the real worker does on a machine without a GPU
 *   FAKE_SLOW_NTH  N > 0: the N-th eval this process receives (after its FAKE_LOG line) sleeps
 *                  FAKE_SLOW_MS (default 3000) instead of FAKE_DELAY_MS: a long "timing" during
 *                  which a test can kill the worker from outside, by pid;
 *   FAKE_SLOW_ONCE with FAKE_SLOW_NTH, a path: only the first worker process that creates it
 *                  (O_EXCL) is slow, so a respawned worker runs at full speed */
#include "ops/msgpack_util.h"
#include "search/worker.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LOADED 64

static struct {
    uint64_t id;
    double ns;
} loaded[MAX_LOADED];
static int n_loaded;

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static double fake_ns(const char *key)
{
    return 10000.0 * pow(1.01, (double)(fnv1a(key) % 400));
}

static bool listed(const char *env, const char *key)
{
    const char *list = getenv(env);
    if (!list || !list[0])
        return false;
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (tok[0] && strstr(key, tok))
            return true;
    return false;
}

static uint64_t fnv1a_bytes(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= ((const unsigned char *)p)[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void fake_key(const srch_eval_req *r, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    if (r->record)
        off = (size_t)snprintf(buf, len, "record:");
    if (r->library && off < len)
        off += (size_t)snprintf(buf + off, len - off, "cublasLt#%d", r->lt.heuristic_index);
    for (int k = 0; k < r->n_kernels && off < len; k++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s", k ? "+" : "", r->kernels[k].entry);
    if (off >= len)
        return;
    int nodes = r->sub ? r->sub->n_nodes : 0;
    if (r->record)
        snprintf(buf + off, len - off, " n=%d ws=%lld cubin=%016llx", nodes,
                 (long long)r->workspace_bytes,
                 r->cubin ? (unsigned long long)fnv1a_bytes(r->cubin, r->cubin_len) : 0ull);
    else
        snprintf(buf + off, len - off, "@%d", nodes);
}

/* FAKE_ERR: the error a passing candidate with this key reports. */
static void fake_err(const char *key, double *norm, double *max)
{
    const char *list = getenv("FAKE_ERR");
    if (!list || !list[0])
        return;
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strrchr(tok, '=');
        if (!eq || eq == tok)
            continue;
        *eq = '\0';
        if (!strstr(key, tok))
            continue;
        char *slash = strchr(eq + 1, '/');
        *norm = strtod(eq + 1, NULL);
        if (slash)
            *max = strtod(slash + 1, NULL);
        return;
    }
}

/* ---- output ---- */

static void write_all_fd(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            exit(1);
        p += w;
        n -= (size_t)w;
    }
}

static void write_all(const char *p, size_t n)
{
    write_all_fd(1, p, n);
}

static void send_buf(msgpack_sbuffer *sb)
{
    write_all(sb->data, sb->size);
    msgpack_sbuffer_clear(sb);
}

static void reply_error(const char *code, const char *msg)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    kt_mp_pack_str(&pk, "ok");
    msgpack_pack_false(&pk);
    kt_mp_pack_str(&pk, "error");
    msgpack_pack_map(&pk, 2);
    kt_mp_pack_str(&pk, "code");
    kt_mp_pack_str(&pk, code);
    kt_mp_pack_str(&pk, "msg");
    kt_mp_pack_str(&pk, msg);
    send_buf(&sb);
    msgpack_sbuffer_destroy(&sb);
}

static void reply_ok_empty(void)
{
    static const char ok[] = "\x81\xa2ok\xc3"; /* {"ok": true} */
    write_all(ok, sizeof(ok) - 1);
}

static void kv_int(msgpack_packer *pk, const char *k, int64_t v)
{
    kt_mp_pack_str(pk, k);
    msgpack_pack_int64(pk, v);
}

static void hello(void)
{
    if (getenv("FAKE_NODEV")) {
        reply_error("ENODEV", "fake worker: no CUDA device (FAKE_NODEV)");
        return;
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    kt_mp_pack_str(&pk, "ok");
    msgpack_pack_true(&pk);
    kt_mp_pack_str(&pk, "gpu");
    msgpack_pack_map(&pk, 11);
    kt_mp_pack_str(&pk, "name");
    kt_mp_pack_str(&pk, "NVIDIA H100 80GB HBM3");
    kv_int(&pk, "sm_major", 9);
    kv_int(&pk, "sm_minor", 0);
    kv_int(&pk, "sm_count", 132);
    kv_int(&pk, "mem_bytes", 85045510144);
    kv_int(&pk, "driver_version", 13000);
    kv_int(&pk, "cuda_version", 13000);
    kv_int(&pk, "sm_clock_khz", 1980000);
    kv_int(&pk, "l2_bytes", 50000000);
    kv_int(&pk, "smem_per_block_optin", 232448);
    kv_int(&pk, "regs_per_sm", 65536);
    kt_mp_pack_str(&pk, "cupti");
    msgpack_pack_true(&pk);
    kt_mp_pack_str(&pk, "cublaslt");
    msgpack_pack_true(&pk);
    kt_mp_pack_str(&pk, "selftest");
    kt_mp_pack_str(&pk, "ok (fake)");
    send_buf(&sb);
    msgpack_sbuffer_destroy(&sb);
}

/* Writes {"ok": true, ...result} whether or not srch_eval_result_pack writes "ok" itself. */
static void reply_result(const srch_eval_result *res)
{
    msgpack_sbuffer body, out;
    msgpack_sbuffer_init(&body);
    msgpack_sbuffer_init(&out);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
    if (srch_eval_result_pack(&pk, res) < 0)
        exit(3);
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    size_t off = 0;
    if (msgpack_unpack_next(&m, body.data, body.size, &off) != MSGPACK_UNPACK_SUCCESS ||
        m.data.type != MSGPACK_OBJECT_MAP)
        exit(3);
    if (kt_mp_get(&m.data, "ok")) {
        write_all(body.data, body.size);
    } else {
        msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, m.data.via.map.size + 1);
        kt_mp_pack_str(&pk, "ok");
        msgpack_pack_true(&pk);
        for (uint32_t i = 0; i < m.data.via.map.size; i++) {
            msgpack_pack_object(&pk, m.data.via.map.ptr[i].key);
            msgpack_pack_object(&pk, m.data.via.map.ptr[i].val);
        }
        send_buf(&out);
    }
    msgpack_unpacked_destroy(&m);
    msgpack_sbuffer_destroy(&body);
    msgpack_sbuffer_destroy(&out);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void fill_time(srch_time_stats *t, double ns, bool cold)
{
    memset(t, 0, sizeof(*t));
    t->median_ns = ns;
    t->p10_ns = ns * 0.995;
    t->p90_ns = ns * 1.005;
    t->reps = 100;
    t->rel_spread = (t->p90_ns - t->p10_ns) / ns / 10.0;
    t->kernels_per_rep = 1;
    t->cold = cold;
    t->sm_clock_khz_before = t->sm_clock_khz_after = 1980000;
}

/* One FAKE_LOG_DETAIL line, written with one write() so lines of concurrent workers never mix. */
static void log_detail(int fd, const msgpack_object *o, const srch_eval_req *r, const char *key)
{
    uint64_t h = 1469598103934665603ull;
    const msgpack_object *sub = kt_mp_get(o, "sub");
    if (sub) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_object(&pk, *sub);
        for (size_t i = 0; i < sb.size; i++) {
            h ^= (unsigned char)sb.data[i];
            h *= 1099511628211ull;
        }
        msgpack_sbuffer_destroy(&sb);
    }
    int nb = r->full ? r->n_full_bindings : r->n_bindings;
    const srch_binding *b = r->full ? r->full_bindings : r->bindings;
    char binds[SRCH_MAX_BINDINGS * 72] = "";
    size_t off = 0;
    for (int i = 0; i < nb && off < sizeof(binds); i++)
        off += (size_t)snprintf(binds + off, sizeof(binds) - off, "%s%s=%lld", i ? "," : "",
                                b[i].name, (long long)b[i].value);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char line[2048];
    int n =
        snprintf(line, sizeof(line), "%s\t%016llx\t%s\t%ld\t%lld%s\n", key, (unsigned long long)h,
                 binds, (long)getpid(), (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
                 r->record                ? "\trecord"
                 : !r->verify && !r->time ? "\tload"
                                          : "");
    if (n > 0)
        write_all_fd(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* FAKE_SLOW_NTH: whether this eval, the n_evals-th of this process, is the slow one. */
static int n_evals;

static bool slow_now(void)
{
    n_evals++;
    const char *nth = getenv("FAKE_SLOW_NTH");
    if (!nth || atol(nth) != n_evals)
        return false;
    const char *once = getenv("FAKE_SLOW_ONCE");
    if (once && once[0]) {
        int fd = open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0)
            return false;
        close(fd);
    }
    return true;
}

static long slow_ms(void)
{
    const char *ms = getenv("FAKE_SLOW_MS");
    return ms && atol(ms) > 0 ? atol(ms) : 3000;
}

static void eval(const msgpack_object *o)
{
    srch_eval_req req;
    kt_err err = {0};
    memset(&req, 0, sizeof(req));
    if (srch_eval_req_unpack(o, &req, &err) < 0) {
        reply_error("EPROTO", err.msg);
        return;
    }
    char key[1024];
    fake_key(&req, key, sizeof(key));
    const char *log = getenv("FAKE_LOG");
    if (log) {
        int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            const char *detail = getenv("FAKE_LOG_DETAIL");
            if (detail && detail[0])
                log_detail(fd, o, &req, key);
            else
                dprintf(fd, "%s\n", key);
            close(fd);
        }
    }
    const char *delay = getenv("FAKE_DELAY_MS");
    if (slow_now())
        sleep_ms(slow_ms());
    else if (delay)
        sleep_ms(atol(delay));
    if (listed("FAKE_FAULT", key)) {
        fprintf(stderr, "fake worker: faulting on %s\n", key);
        raise(SIGKILL);
    }
    if (listed("FAKE_HANG", key)) {
        fprintf(stderr, "fake worker: hanging on %s\n", key);
        for (;;)
            pause();
    }
    srch_eval_result res;
    memset(&res, 0, sizeof(res));
    res.id = req.id;
    res.status = SRCH_OK;
    res.err_norm = 1e-7;
    res.err_max = 0.01;
    fake_err(key, &res.err_norm, &res.err_max);
    double ns = fake_ns(key);
    if (listed("FAKE_FAST", key))
        ns *= 0.01;
    if (listed("FAKE_STICKY", key)) {
        res.status = SRCH_FAULT;
        snprintf(res.msg, sizeof(res.msg), "CUDA_ERROR_ILLEGAL_ADDRESS (fake)");
    } else if (listed("FAKE_WRONG", key)) {
        res.status = SRCH_WRONG;
        res.err_norm = 0.5;
        res.err_max = 1e4;
        snprintf(res.msg, sizeof(res.msg), "normwise error 0.5 over tolerance (fake)");
    }
    if ((res.status == SRCH_OK || res.status == SRCH_WRONG) && req.time)
        fill_time(&res.time, ns, req.timing.cold);
    if (res.status == SRCH_OK && !req.record) { /* a record is not kept (worker.h) */
        if (n_loaded == MAX_LOADED) {
            memmove(loaded, loaded + 1, sizeof(loaded[0]) * (MAX_LOADED - 1));
            n_loaded--;
        }
        loaded[n_loaded].id = req.id;
        loaded[n_loaded++].ns = ns;
    }
    srch_eval_req_free(&req);
    reply_result(&res);
}

static void retime(const msgpack_object *o)
{
    const msgpack_object *ids = kt_mp_get(o, "ids"), *cold = kt_mp_get(o, "cold");
    if (!ids || ids->type != MSGPACK_OBJECT_ARRAY) {
        reply_error("EINVAL", "retime without ids");
        return;
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (uint32_t i = 0; i < ids->via.array.size; i++) {
        bool found = false;
        for (int k = 0; k < n_loaded; k++)
            found |= loaded[k].id == ids->via.array.ptr[i].via.u64;
        if (!found) {
            reply_error("ENOENT", "retime: candidate not loaded");
            msgpack_sbuffer_destroy(&sb);
            return;
        }
    }
    msgpack_pack_map(&pk, 2);
    kt_mp_pack_str(&pk, "ok");
    msgpack_pack_true(&pk);
    kt_mp_pack_str(&pk, "times");
    msgpack_pack_array(&pk, ids->via.array.size);
    for (uint32_t i = 0; i < ids->via.array.size; i++) {
        uint64_t id = ids->via.array.ptr[i].via.u64;
        double ns = 0;
        for (int k = 0; k < n_loaded; k++)
            if (loaded[k].id == id)
                ns = loaded[k].ns;
        srch_time_stats t;
        fill_time(&t, ns, cold && cold->type == MSGPACK_OBJECT_BOOLEAN && cold->via.boolean);
        msgpack_pack_map(&pk, 5);
        kt_mp_pack_str(&pk, "id");
        msgpack_pack_uint64(&pk, id);
        kt_mp_pack_str(&pk, "median_ns");
        msgpack_pack_double(&pk, t.median_ns);
        kt_mp_pack_str(&pk, "p10_ns");
        msgpack_pack_double(&pk, t.p10_ns);
        kt_mp_pack_str(&pk, "p90_ns");
        msgpack_pack_double(&pk, t.p90_ns);
        kt_mp_pack_str(&pk, "reps");
        msgpack_pack_int(&pk, t.reps * 5);
    }
    send_buf(&sb);
    msgpack_sbuffer_destroy(&sb);
}

int main(void)
{
    msgpack_unpacker up;
    if (!msgpack_unpacker_init(&up, 65536))
        return 1;
    msgpack_unpacked msg;
    msgpack_unpacked_init(&msg);
    int status = 0;
    for (;;) {
        msgpack_unpack_return ur;
        while ((ur = msgpack_unpacker_next(&up, &msg)) == MSGPACK_UNPACK_SUCCESS) {
            const msgpack_object *op = kt_mp_get(&msg.data, "op");
            char name[16] = "";
            if (op && op->type == MSGPACK_OBJECT_STR)
                snprintf(name, sizeof(name), "%.*s", (int)op->via.str.size, op->via.str.ptr);
            if (strcmp(name, "hello") == 0)
                hello();
            else if (strcmp(name, "eval") == 0)
                eval(&msg.data);
            else if (strcmp(name, "retime") == 0)
                retime(&msg.data);
            else if (strcmp(name, "forget") == 0)
                reply_ok_empty();
            else if (strcmp(name, "quit") == 0) {
                reply_ok_empty();
                goto out;
            } else
                reply_error("EINVAL", "fake worker: unknown op");
        }
        if (ur == MSGPACK_UNPACK_PARSE_ERROR) {
            status = 2;
            goto out;
        }
        if (!msgpack_unpacker_reserve_buffer(&up, 65536)) {
            status = 1;
            goto out;
        }
        ssize_t n = read(0, msgpack_unpacker_buffer(&up), msgpack_unpacker_buffer_capacity(&up));
        if (n <= 0)
            goto out;
        msgpack_unpacker_buffer_consumed(&up, (size_t)n);
    }
out: /* freed so that sanitizer builds of the tests report no leak from the double */
    msgpack_unpacked_destroy(&msg);
    msgpack_unpacker_destroy(&up);
    return status;
}
