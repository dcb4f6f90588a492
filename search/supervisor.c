/* The supervisor of a ktune-worker process (search/supervisor.h).
 *
 * The channel is one AF_UNIX stream socketpair, the child's end dup'ed onto both its stdin and
 * stdout: the worker reads and writes plain file descriptors as with pipes, and we write with
 * send(MSG_NOSIGNAL), so a worker that died under us is an EPIPE to classify, never a SIGPIPE
 * that kills the CLI or the daemon (the process-wide SIGPIPE disposition stays the caller's).
 *
 * Every exchange is one msgpack map out and one map back, read through a msgpack_unpacker with
 * poll() until the request's deadline. End of stream means the worker died (the candidate
 * faulted it); a missed deadline means the kernel hangs: SIGKILL, reap, respawn, hello. */
#include "supervisor.h"

#include "compile.h"

#include "ops/msgpack_util.h"
#include "ops/ops.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TAG                 "worker"
#define REPLY_MAX_BYTES     (16u << 20) /* a reply is a few hundred bytes; anything huge is junk */
#define QUIT_GRACE_S        2.0
#define DEFAULT_HELLO_S     60.0
#define READ_CHUNK          65536
#define WORKER_EXE_NAME     "ktune-worker"
#define ENV_WORKER          "KTUNE_WORKER"
#define ENV_VISIBLE_DEVICES "CUDA_VISIBLE_DEVICES"

extern char **environ;

struct srch_worker {
    char *exe;
    int gpu;
    double hello_timeout_s;
    pid_t pid; /* <= 0: not running */
    int fd;    /* our end of the socketpair, -1 when not running */
    msgpack_unpacker up;
    bool up_live;
    int restarts;
    ops_device dev;
    cache_gpu gpu_fp;
    /* Guards pid between a reap and srch_worker_abort (another thread): a reaped pid may be
     * reused, so it is never signalled after its waitpid. */
    pthread_mutex_t pid_lock;
};

/* Why an exchange ended without a reply. */
typedef enum xfer_end { XFER_REPLY = 0, XFER_DIED, XFER_DEADLINE, XFER_PROTO } xfer_end;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- locating the worker executable ---- */

/* Order: opts->exe; $KTUNE_WORKER; next to the running binary (an install that puts both in one
 * directory); <dir>/../search/ktune-worker (the build tree: build/client/ktune and
 * build/search/ktune-worker); <dir>/../libexec/ktune-worker (an install under a prefix). */
static int find_worker(const char *given, char **out, kt_err *err)
{
    return kt_find_exe(given, ENV_WORKER, WORKER_EXE_NAME, out, err);
}

/* ---- process management ---- */

/* The child's environment: ours with CUDA_VISIBLE_DEVICES replaced. Built before fork so the
 * child only calls async-signal-safe functions between fork and exec. */
static char **child_env(int gpu, char *visible, size_t visible_len)
{
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **env = calloc(n + 2, sizeof(*env));
    if (!env)
        return NULL;
    size_t k = 0;
    size_t plen = strlen(ENV_VISIBLE_DEVICES);
    for (size_t i = 0; i < n; i++)
        if (!(strncmp(environ[i], ENV_VISIBLE_DEVICES, plen) == 0 && environ[i][plen] == '='))
            env[k++] = environ[i];
    snprintf(visible, visible_len, "%s=%d", ENV_VISIBLE_DEVICES, gpu);
    env[k++] = visible;
    env[k] = NULL;
    return env;
}

static void reap(srch_worker *w, int *status)
{
    pthread_mutex_lock(&w->pid_lock);
    if (w->pid > 0) {
        int st = 0;
        while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (status)
            *status = st;
    }
    w->pid = -1;
    pthread_mutex_unlock(&w->pid_lock);
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    if (w->up_live)
        msgpack_unpacker_destroy(&w->up);
    w->up_live = false;
}

static void kill_and_reap(srch_worker *w, int *status)
{
    if (w->pid > 0)
        kill(w->pid, SIGKILL);
    reap(w, status);
}

static void describe_exit(int status, char *buf, size_t len)
{
    if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else
        snprintf(buf, len, "ended (wait status %#x)", (unsigned)status);
}

static int spawn(srch_worker *w, kt_err *err)
{
    int sv[2];
    char visible[64];
    char **env = child_env(w->gpu, visible, sizeof(visible));
    if (!env)
        return kt_err_set(err, -ENOMEM, "out of memory spawning the worker");
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        int e = errno;
        free(env);
        return kt_err_set(err, -e, "socketpair: %s", strerror(e));
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        free(env);
        return kt_err_set(err, -e, "fork: %s", strerror(e));
    }
    if (pid == 0) {
        /* A worker must never outlive its supervisor: it may be spinning a kernel. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        if (dup2(sv[1], 0) < 0 || dup2(sv[1], 1) < 0)
            _exit(127);
        /* Leave nothing of ours open in the worker (compile-pool sockets, the LMDB file). */
        close_range(3, ~0u, 0);
        char *argv[] = {w->exe, NULL};
        execve(w->exe, argv, env);
        _exit(127);
    }
    free(env);
    close(sv[1]);
    pthread_mutex_lock(&w->pid_lock);
    w->pid = pid;
    pthread_mutex_unlock(&w->pid_lock);
    w->fd = sv[0];
    if (!msgpack_unpacker_init(&w->up, READ_CHUNK)) {
        kill_and_reap(w, NULL);
        return kt_err_set(err, -ENOMEM, "out of memory for the reply unpacker");
    }
    w->up_live = true;
    return 0;
}

/* ---- one exchange ---- */

static int send_all(srch_worker *w, const char *buf, size_t len, double deadline, xfer_end *end)
{
    size_t off = 0;
    while (off < len) {
        double left = deadline - now_s();
        if (left <= 0) {
            *end = XFER_DEADLINE;
            return -1;
        }
        struct pollfd p = {.fd = w->fd, .events = POLLOUT};
        int pr = poll(&p, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue; /* timeout: re-checked at the top */
        ssize_t n = send(w->fd, buf + off, len - off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            *end = XFER_DIED; /* EPIPE, ECONNRESET: the worker is gone */
            return -1;
        }
        off += (size_t)n;
    }
    return 0;
}

/* Reads until one complete map is unpacked into *msg (the caller destroys it). */
static int recv_one(srch_worker *w, msgpack_unpacked *msg, double deadline, xfer_end *end)
{
    for (;;) {
        msgpack_unpack_return ur = msgpack_unpacker_next(&w->up, msg);
        if (ur == MSGPACK_UNPACK_SUCCESS) {
            if (msg->data.type != MSGPACK_OBJECT_MAP) {
                *end = XFER_PROTO;
                return -1;
            }
            return 0;
        }
        if (ur != MSGPACK_UNPACK_CONTINUE ||
            msgpack_unpacker_message_size(&w->up) > REPLY_MAX_BYTES) {
            *end = XFER_PROTO;
            return -1;
        }
        double left = deadline - now_s();
        if (left <= 0) {
            *end = XFER_DEADLINE;
            return -1;
        }
        struct pollfd p = {.fd = w->fd, .events = POLLIN};
        int pr = poll(&p, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        if (!msgpack_unpacker_reserve_buffer(&w->up, READ_CHUNK)) {
            *end = XFER_PROTO;
            return -1;
        }
        ssize_t n =
            read(w->fd, msgpack_unpacker_buffer(&w->up), msgpack_unpacker_buffer_capacity(&w->up));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            *end = XFER_DIED;
            return -1;
        }
        msgpack_unpacker_buffer_consumed(&w->up, (size_t)n);
    }
}

static int exchange(srch_worker *w, const msgpack_sbuffer *req, msgpack_unpacked *reply,
                    double timeout_s, xfer_end *end)
{
    double deadline = now_s() + timeout_s;
    *end = XFER_REPLY;
    if (send_all(w, req->data, req->size, deadline, end) < 0)
        return -1;
    return recv_one(w, reply, deadline, end);
}

/* ---- reading replies ---- */

static bool obj_int(const msgpack_object *o, int64_t *out)
{
    return o && kt_mp_i64(o, out);
}

static double obj_num(const msgpack_object *o)
{
    int64_t i;
    if (o && (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32))
        return o->via.f64;
    return obj_int(o, &i) ? (double)i : 0;
}

static void obj_str(const msgpack_object *o, char *buf, size_t len)
{
    if (o && o->type == MSGPACK_OBJECT_STR)
        snprintf(buf, len, "%.*s", (int)o->via.str.size, o->via.str.ptr);
    else if (len)
        buf[0] = '\0';
}

static bool reply_ok(const msgpack_object *o)
{
    const msgpack_object *ok = kt_mp_get(o, "ok");
    return ok && ok->type == MSGPACK_OBJECT_BOOLEAN && ok->via.boolean;
}

/* The worker's error object {"code": "ENODEV", "msg": "..."} as a negative errno. */
static int reply_error(const msgpack_object *o, const char *what, kt_err *err)
{
    static const struct {
        const char *name;
        int code;
    } codes[] = {{"ENODEV", ENODEV},       {"EINVAL", EINVAL}, {"ENOMEM", ENOMEM},
                 {"EPROTO", EPROTO},       {"EIO", EIO},       {"ENOENT", ENOENT},
                 {"ETIMEDOUT", ETIMEDOUT}, {"ENOSYS", ENOSYS}, {"EOVERFLOW", EOVERFLOW}};
    const msgpack_object *e = kt_mp_get(o, "error");
    char code[32], msg[400];
    obj_str(kt_mp_get(e, "code"), code, sizeof(code));
    obj_str(kt_mp_get(e, "msg"), msg, sizeof(msg));
    int rc = -EIO;
    for (size_t i = 0; i < KT_ARRAY_LEN(codes); i++)
        if (strcmp(code, codes[i].name) == 0)
            rc = -codes[i].code;
    return kt_err_set(err, rc, "%s: worker says %s: %s", what, code[0] ? code : "error",
                      msg[0] ? msg : "(no message)");
}

/* The device description for the space: the device table's entry for the GPU's name (its
 * throughput figures: the worker does not measure peaks), the lent H100's for a name not in it
 * (docs/search.md), overridden by what the worker read off its GPU. */
static void read_hello(srch_worker *w, const msgpack_object *o)
{
    const msgpack_object *g = kt_mp_get(o, "gpu");
    ops_device *d = &w->dev;
    cache_gpu *fp = &w->gpu_fp;
    int64_t v;
    memset(fp, 0, sizeof(*fp));
    obj_str(kt_mp_get(g, "name"), fp->name, sizeof(fp->name));
    if (ops_device_find(fp->name, d) < 0)
        ops_device_h100(d);
    snprintf(d->name, sizeof(d->name), "%s", fp->name);
    if (obj_int(kt_mp_get(g, "sm_major"), &v))
        d->sm_major = fp->sm_major = (int)v;
    if (obj_int(kt_mp_get(g, "sm_minor"), &v))
        d->sm_minor = fp->sm_minor = (int)v;
    if (obj_int(kt_mp_get(g, "sm_count"), &v))
        d->sm_count = fp->sm_count = (int)v;
    if (obj_int(kt_mp_get(g, "mem_bytes"), &v))
        fp->mem_bytes = (uint64_t)v;
    if (obj_int(kt_mp_get(g, "driver_version"), &v))
        fp->driver_version = (int32_t)v;
    if (obj_int(kt_mp_get(g, "cuda_version"), &v))
        fp->cuda_version = (int32_t)v;
    if (obj_int(kt_mp_get(g, "l2_bytes"), &v) && v > 0)
        d->l2_bytes = v;
    if (obj_int(kt_mp_get(g, "smem_per_block_optin"), &v) && v > 0)
        d->smem_per_block_optin = (int)v;
    if (obj_int(kt_mp_get(g, "regs_per_sm"), &v) && v > 0)
        d->regs_per_sm = (int)v;
    /* Architecture-specific targets ("a") unlock wgmma/TMA on sm_90 and later. */
    snprintf(d->arch, sizeof(d->arch), "sm_%d%d%s", d->sm_major, d->sm_minor,
             d->sm_major >= 9 ? "a" : "");
}

static void stop_process(srch_worker *w);

static int say_hello(srch_worker *w, kt_err *err)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    kt_mp_pack_kstr(&pk, "op", "hello");
    msgpack_unpacked reply;
    msgpack_unpacked_init(&reply);
    xfer_end end;
    int rc = 0;
    if (exchange(w, &sb, &reply, w->hello_timeout_s, &end) < 0) {
        int status = 0;
        char how[128] = "";
        kill_and_reap(w, &status);
        if (end == XFER_DIED)
            describe_exit(status, how, sizeof(how));
        rc = kt_err_set(err, end == XFER_DEADLINE ? -ETIMEDOUT : -EIO, "worker %s: hello %s%s",
                        w->exe,
                        end == XFER_DEADLINE ? "timed out"
                        : end == XFER_DIED   ? "got no reply: it "
                                             : "got a malformed reply",
                        how);
        if (end == XFER_DIED && WIFEXITED(status) && WEXITSTATUS(status) == 127)
            rc = kt_err_set(err, -ENOENT, "worker %s could not be executed", w->exe);
        goto out;
    }
    if (!reply_ok(&reply.data)) {
        rc = reply_error(&reply.data, "hello", err);
        stop_process(w);
        goto out;
    }
    read_hello(w, &reply.data);
out:
    msgpack_unpacked_destroy(&reply);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static int start_process(srch_worker *w, kt_err *err)
{
    int rc = spawn(w, err);
    if (rc < 0)
        return rc;
    return say_hello(w, err);
}

/* Kills a worker that failed a candidate and starts a fresh one. */
static int restart(srch_worker *w, kt_err *err)
{
    kill_and_reap(w, NULL);
    w->restarts++;
    int rc = start_process(w, err);
    if (rc < 0)
        kt_log_err(TAG, "cannot restart the worker: %s", err ? err->msg : "");
    return rc;
}

/* ---- public ---- */

static void stop_process(srch_worker *w)
{
    if (w->pid <= 0)
        return;
    static const char quit[] = "\x81\xa2op\xa4quit"; /* {"op": "quit"} */
    (void)!send(w->fd, quit, sizeof(quit) - 1, MSG_NOSIGNAL);
    double deadline = now_s() + QUIT_GRACE_S;
    while (now_s() < deadline) {
        int st;
        pthread_mutex_lock(&w->pid_lock);
        pid_t r = waitpid(w->pid, &st, WNOHANG);
        bool gone = r == w->pid || (r < 0 && errno != EINTR);
        if (gone)
            w->pid = -1;
        pthread_mutex_unlock(&w->pid_lock);
        if (gone)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill_and_reap(w, NULL);
}

int srch_worker_start(const srch_worker_opts *opts, srch_worker **out, ops_device *dev,
                      cache_gpu *gpu, kt_err *err)
{
    srch_worker_opts def = {0};
    if (!opts)
        opts = &def;
    if (!out)
        return kt_err_set(err, -EINVAL, "srch_worker_start: no out pointer");
    *out = NULL;
    srch_worker *w = calloc(1, sizeof(*w));
    if (!w)
        return kt_err_set(err, -ENOMEM, "out of memory");
    w->pid = -1;
    w->fd = -1;
    pthread_mutex_init(&w->pid_lock, NULL);
    w->gpu = opts->gpu;
    w->hello_timeout_s = opts->hello_timeout_s > 0 ? opts->hello_timeout_s : DEFAULT_HELLO_S;
    int rc = find_worker(opts->exe, &w->exe, err);
    if (rc < 0)
        goto fail;
    if ((rc = start_process(w, err)) < 0)
        goto fail;
    if (dev)
        *dev = w->dev;
    if (gpu)
        *gpu = w->gpu_fp;
    *out = w;
    return 0;
fail:
    free(w->exe);
    free(w);
    return rc;
}

void srch_worker_device(const srch_worker *w, ops_device *dev, cache_gpu *gpu)
{
    if (dev)
        *dev = w->dev;
    if (gpu)
        *gpu = w->gpu_fp;
}

void srch_worker_abort(srch_worker *w)
{
    pthread_mutex_lock(&w->pid_lock);
    if (w->pid > 0)
        kill(w->pid, SIGKILL);
    pthread_mutex_unlock(&w->pid_lock);
}

void srch_worker_stop(srch_worker *w)
{
    if (!w)
        return;
    stop_process(w);
    pthread_mutex_destroy(&w->pid_lock);
    free(w->exe);
    free(w);
}

int srch_worker_restarts(const srch_worker *w)
{
    return w->restarts;
}

/* Packs {"op": "eval", ...} around srch_eval_req_pack's map, whichever way that map starts: the
 * request encoding is worker_proto.c's, the envelope key is ours. */
static int pack_eval(const srch_eval_req *req, msgpack_sbuffer *out, kt_err *err)
{
    msgpack_sbuffer body;
    msgpack_sbuffer_init(&body);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
    int rc = srch_eval_req_pack(&pk, req);
    if (rc < 0) {
        msgpack_sbuffer_destroy(&body);
        return kt_err_set(err, rc, "cannot encode the eval request");
    }
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    size_t off = 0;
    if (msgpack_unpack_next(&m, body.data, body.size, &off) != MSGPACK_UNPACK_SUCCESS ||
        m.data.type != MSGPACK_OBJECT_MAP) {
        rc = kt_err_set(err, -EPROTO, "eval request does not encode as one map");
        goto out;
    }
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    if (kt_mp_get(&m.data, "op")) {
        msgpack_sbuffer_write(out, body.data, body.size);
    } else {
        msgpack_pack_map(&pk, m.data.via.map.size + 1);
        kt_mp_pack_kstr(&pk, "op", "eval");
        for (uint32_t i = 0; i < m.data.via.map.size; i++) {
            msgpack_pack_object(&pk, m.data.via.map.ptr[i].key);
            msgpack_pack_object(&pk, m.data.via.map.ptr[i].val);
        }
    }
out:
    msgpack_unpacked_destroy(&m);
    msgpack_sbuffer_destroy(&body);
    return rc;
}

int srch_worker_eval(srch_worker *w, const srch_eval_req *req, double deadline_s,
                     srch_eval_result *res, kt_err *err)
{
    if (!w || !req || !res || deadline_s <= 0)
        return kt_err_set(err, -EINVAL, "srch_worker_eval: bad arguments");
    memset(res, 0, sizeof(*res));
    res->id = req->id;
    if (w->pid <= 0) {
        int rc = start_process(w, err);
        if (rc < 0)
            return rc;
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_unpacked reply;
    msgpack_unpacked_init(&reply);
    int rc = pack_eval(req, &sb, err);
    if (rc < 0)
        goto out;
    xfer_end end;
    if (exchange(w, &sb, &reply, deadline_s, &end) < 0) {
        int status = 0;
        char how[128] = "";
        if (end == XFER_DEADLINE) {
            res->status = SRCH_HANG;
            snprintf(res->msg, sizeof(res->msg),
                     "no reply within the %.1f s deadline: worker killed", deadline_s);
            kill_and_reap(w, &status);
        } else {
            /* Died, or spoke garbage (a scribbling kernel can do that too): a fault either way. */
            if (end == XFER_PROTO)
                kill_and_reap(w, &status);
            else
                reap(w, &status);
            describe_exit(status, how, sizeof(how));
            res->status = SRCH_FAULT;
            snprintf(res->msg, sizeof(res->msg), "worker %s during the candidate",
                     end == XFER_PROTO ? "sent a malformed reply" : how);
        }
        kt_log_warn(TAG, "candidate %llu: %s: %s; restarting the worker",
                    (unsigned long long)req->id, srch_status_str(res->status), res->msg);
        rc = restart(w, err);
        goto out;
    }
    if (!reply_ok(&reply.data)) {
        /* The worker refused the request (bad image, unsupported candidate): the candidate's
         * fault, not the worker's; it stays up. */
        kt_err e = {0};
        reply_error(&reply.data, "eval", &e);
        res->status = SRCH_LOAD_ERROR;
        snprintf(res->msg, sizeof(res->msg), "%.*s", (int)sizeof(res->msg) - 1, e.msg);
        goto out;
    }
    kt_err perr = {0};
    if (srch_eval_result_unpack(&reply.data, res, &perr) < 0) {
        res->status = SRCH_FAULT;
        snprintf(res->msg, sizeof(res->msg), "malformed eval reply: %.200s", perr.msg);
        rc = restart(w, err);
        goto out;
    }
    res->id = req->id;
    if (res->status == SRCH_FAULT) {
        /* A sticky CUDA error poisoned the worker's context: nothing it measures is trusted
         * any more. */
        rc = restart(w, err);
    }
out:
    msgpack_unpacked_destroy(&reply);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

int srch_worker_retime(srch_worker *w, const uint64_t *ids, int n, int rounds, bool cold,
                       double deadline_s, srch_time_stats *out, kt_err *err)
{
    if (!w || !ids || n <= 0 || rounds <= 0 || !out || deadline_s <= 0)
        return kt_err_set(err, -EINVAL, "srch_worker_retime: bad arguments");
    if (w->pid <= 0)
        return kt_err_set(err, -ESRCH, "retime: the worker restarted; nothing is loaded");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    kt_mp_pack_kstr(&pk, "op", "retime");
    kt_mp_pack_str(&pk, "ids");
    msgpack_pack_array(&pk, (size_t)n);
    for (int i = 0; i < n; i++)
        msgpack_pack_uint64(&pk, ids[i]);
    kt_mp_pack_str(&pk, "rounds");
    msgpack_pack_int(&pk, rounds);
    kt_mp_pack_kbool(&pk, "cold", cold);
    msgpack_unpacked reply;
    msgpack_unpacked_init(&reply);
    xfer_end end;
    int rc = 0;
    if (exchange(w, &sb, &reply, deadline_s, &end) < 0) {
        rc = kt_err_set(err, end == XFER_DEADLINE ? -ETIMEDOUT : -EIO,
                        "retime: the worker %s; restarted",
                        end == XFER_DEADLINE ? "missed its deadline" : "died");
        kt_err rerr = {0};
        if (restart(w, &rerr) < 0)
            rc = kt_err_set(err, rerr.code, "%s", rerr.msg);
        goto out;
    }
    if (!reply_ok(&reply.data)) {
        rc = reply_error(&reply.data, "retime", err);
        goto out;
    }
    const msgpack_object *times = kt_mp_get(&reply.data, "times");
    if (!times || times->type != MSGPACK_OBJECT_ARRAY) {
        rc = kt_err_set(err, -EPROTO, "retime: reply without a times array");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        bool found = false;
        for (uint32_t j = 0; j < times->via.array.size && !found; j++) {
            const msgpack_object *t = &times->via.array.ptr[j];
            int64_t id = 0, reps = 0;
            if (!obj_int(kt_mp_get(t, "id"), &id) || (uint64_t)id != ids[i])
                continue;
            found = true;
            memset(&out[i], 0, sizeof(out[i]));
            out[i].median_ns = obj_num(kt_mp_get(t, "median_ns"));
            out[i].p10_ns = obj_num(kt_mp_get(t, "p10_ns"));
            out[i].p90_ns = obj_num(kt_mp_get(t, "p90_ns"));
            if (obj_int(kt_mp_get(t, "reps"), &reps))
                out[i].reps = (int)reps;
            out[i].cold = cold;
        }
        if (!found) {
            rc = kt_err_set(err, -ENOENT, "retime: no time for candidate %llu in the reply",
                            (unsigned long long)ids[i]);
            goto out;
        }
    }
out:
    msgpack_unpacked_destroy(&reply);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}
