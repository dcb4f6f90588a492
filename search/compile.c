#include "compile.h"

#include "ops/devlib.h"
#include "ops/ops.h"

#include <nvrtc.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAX_JOBS   256
#define FRAME_MAX_BYTES (256u << 20) /* a cubin or source larger than this is a bug */

typedef struct pool_job {
    struct pool_job *next;
    uint64_t tag;
    uint8_t key[SRCH_KEY_BYTES];
    char *source;
} pool_job;

typedef struct pool_done {
    struct pool_done *next;
    srch_compile_result r;
} pool_done;

typedef struct pool_worker {
    pid_t pid;
    int fd;         /* our end of the socketpair; -1 when not running */
    pool_job *job;  /* the compile in flight, or NULL when idle */
    double started; /* monotonic seconds */
    uint8_t *rx;    /* response bytes received so far */
    size_t rx_len, rx_cap;
} pool_worker;

struct srch_pool {
    char arch[32];
    char *compiler; /* the ktune-nvrtc executable each worker process runs */
    double timeout_s;
    char *store_dir;
    int n_workers;
    pool_worker *workers;
    pool_job *queue_head, *queue_tail;
    pool_done *done_head, *done_tail;
    int pending;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *srch_status_name(srch_compile_status s)
{
    switch (s) {
    case SRCH_COMPILE_OK:
        return "ok";
    case SRCH_COMPILE_REJECTED:
        return "compile_error";
    case SRCH_COMPILE_TIMEOUT:
        return "timeout";
    case SRCH_COMPILE_CRASH:
        return "crash";
    }
    return "?";
}

/* ---- NVRTC, the one place its error space is translated ---- */

static int nvrtc_error(nvrtcResult rc, const char *what)
{
    kt_log_err("compile", "%s: %s", what, nvrtcGetErrorString(rc));
    return rc == NVRTC_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

int srch_nvrtc_compile(const char *source, const char *arch, srch_compile_result *r)
{
    char arch_opt[64];
    snprintf(arch_opt, sizeof(arch_opt), "--gpu-architecture=%s", arch);
    const char *opts[] = {arch_opt, "-lineinfo", "--ptxas-options=-v", "-std=c++17"};
    nvrtcProgram prog;
    double t0 = now_s();
    /* Generated kernels #include the device library; its headers are handed over in memory. */
    nvrtcResult rc = nvrtcCreateProgram(&prog, source, "ktune_kernel.cu", ops_devlib_count,
                                        ops_devlib_data, ops_devlib_names);
    if (rc != NVRTC_SUCCESS)
        return nvrtc_error(rc, "nvrtcCreateProgram");
    nvrtcResult crc = nvrtcCompileProgram(prog, (int)KT_ARRAY_LEN(opts), opts);
    int ret = 0;
    size_t log_len = 0;
    if ((rc = nvrtcGetProgramLogSize(prog, &log_len)) != NVRTC_SUCCESS) {
        ret = nvrtc_error(rc, "nvrtcGetProgramLogSize");
        goto out;
    }
    r->log = malloc(log_len + 1);
    if (!r->log) {
        ret = -ENOMEM;
        goto out;
    }
    r->log[0] = '\0';
    if (log_len && (rc = nvrtcGetProgramLog(prog, r->log)) != NVRTC_SUCCESS) {
        ret = nvrtc_error(rc, "nvrtcGetProgramLog");
        goto out;
    }
    r->log[log_len] = '\0';
    if (crc != NVRTC_SUCCESS) {
        r->status = SRCH_COMPILE_REJECTED;
        goto out;
    }
    if ((rc = nvrtcGetCUBINSize(prog, &r->cubin_len)) != NVRTC_SUCCESS) {
        ret = nvrtc_error(rc, "nvrtcGetCUBINSize");
        goto out;
    }
    r->cubin = malloc(r->cubin_len ? r->cubin_len : 1);
    if (!r->cubin) {
        ret = -ENOMEM;
        goto out;
    }
    if ((rc = nvrtcGetCUBIN(prog, r->cubin)) != NVRTC_SUCCESS) {
        ret = nvrtc_error(rc, "nvrtcGetCUBIN");
        goto out;
    }
    r->status = SRCH_COMPILE_OK;
    srch_parse_ptxas_report(r->log, r);
out:
    r->seconds = now_s() - t0;
    nvrtcDestroyProgram(&prog);
    return ret;
}

/* ptxas -v prints, per entry point:
 *   ptxas info    : Compiling entry function 'NAME' for 'sm_90a'
 *   ptxas         .     S bytes stack frame, A bytes spill stores, B bytes spill loads
 *   ptxas info    : Used R registers, used N barriers, M bytes smem, ...
 * Lines of one function follow its "Compiling entry function" line. */
int srch_parse_ptxas_report(const char *log, srch_compile_result *r)
{
    r->n_kernels = 0;
    srch_kernel_usage *k = NULL;
    for (const char *line = log; line && *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char buf[512];
        snprintf(buf, sizeof(buf), "%.*s", (int)(len < sizeof(buf) ? len : sizeof(buf) - 1), line);
        const char *p;
        if ((p = strstr(buf, "Compiling entry function '")) != NULL) {
            if (r->n_kernels < SRCH_MAX_KERNELS) {
                k = &r->kernels[r->n_kernels++];
                memset(k, 0, sizeof(*k));
                p += strlen("Compiling entry function '");
                const char *q = strchr(p, '\'');
                snprintf(k->name, sizeof(k->name), "%.*s", q ? (int)(q - p) : (int)strlen(p), p);
            } else {
                k = NULL;
            }
        } else if (k && (p = strstr(buf, "bytes stack frame")) != NULL) {
            int stack = 0, st = 0, ld = 0;
            const char *s = strchr(buf, '.');
            if (s &&
                sscanf(s + 1, " %d bytes stack frame, %d bytes spill stores, %d bytes spill loads",
                       &stack, &st, &ld) == 3) {
                k->stack_bytes = stack;
                k->spill_store_bytes = st;
                k->spill_load_bytes = ld;
            }
        } else if (k && (p = strstr(buf, "Used ")) != NULL) {
            sscanf(p, "Used %d registers", &k->registers);
            const char *b = strstr(p, "used ");
            if (b)
                sscanf(b, "used %d barriers", &k->barriers);
            /* "M bytes smem": scan back from the keyword to the number before it. */
            const char *sm = strstr(p, " bytes smem");
            if (sm) {
                const char *num = sm;
                while (num > p && num[-1] >= '0' && num[-1] <= '9')
                    num--;
                k->smem_bytes = atoi(num);
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    return r->n_kernels;
}

void srch_compile_result_release(srch_compile_result *r)
{
    free(r->cubin);
    free(r->log);
    r->cubin = NULL;
    r->log = NULL;
}

/* ---- content addressing and the on-disk store ---- */

static void compile_key(const char *arch, const char *source, uint8_t key[SRCH_KEY_BYTES])
{
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    /* Everything that changes the cubin goes into the key: toolchain, arch, options, the
     * device library the source may include, source. */
    uint8_t lib[32];
    char lib_hex[2 * sizeof(lib) + 1];
    ops_devlib_digest(lib);
    kt_hex(lib, sizeof(lib), lib_hex);
    size_t src_len = strlen(source);
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "ktune-compile-v1\nnvrtc %d.%d\narch %s\n"
                     "opts -lineinfo --ptxas-options=-v -std=c++17\ndevlib %s\n",
                     major, minor, arch, lib_hex);
    char *buf = malloc((size_t)n + src_len);
    if (!buf) {
        /* Without memory for the key, hash in two parts (different key, still deterministic). */
        uint8_t a[32], b[32], both[64];
        ops_sha256(head, (size_t)n, a);
        ops_sha256(source, src_len, b);
        memcpy(both, a, 32);
        memcpy(both + 32, b, 32);
        ops_sha256(both, sizeof(both), key);
        return;
    }
    memcpy(buf, head, (size_t)n);
    memcpy(buf + n, source, src_len);
    ops_sha256(buf, (size_t)n + src_len, key);
    free(buf);
}

static void store_path(const srch_pool *p, const uint8_t key[SRCH_KEY_BYTES], const char *ext,
                       char *out, size_t len)
{
    char hex[2 * SRCH_KEY_BYTES + 1];
    kt_hex(key, SRCH_KEY_BYTES, hex);
    snprintf(out, len, "%s/%.2s/%s%s", p->store_dir, hex, hex + 2, ext);
}

static int store_lookup(const srch_pool *p, const uint8_t key[SRCH_KEY_BYTES],
                        srch_compile_result *r)
{
    char path[4096];
    char *cubin = NULL, *log = NULL;
    size_t cubin_len = 0;
    store_path(p, key, ".cubin", path, sizeof(path));
    if (kt_read_file(path, FRAME_MAX_BYTES, &cubin, &cubin_len, NULL) < 0)
        return -ENOENT;
    store_path(p, key, ".log", path, sizeof(path));
    if (kt_read_file(path, FRAME_MAX_BYTES, &log, NULL, NULL) < 0) {
        free(cubin);
        return -ENOENT;
    }
    r->status = SRCH_COMPILE_OK;
    r->cubin = cubin;
    r->cubin_len = cubin_len;
    r->log = log;
    r->from_store = true;
    memcpy(r->key, key, SRCH_KEY_BYTES);
    srch_parse_ptxas_report(log, r);
    return 0;
}

/* Stores a successful compile. A failure to store (full disk) costs a recompile later, never
 * correctness, so it is logged and not returned. The log is written first and the cubin last:
 * a lookup needs both, so a reader never sees a cubin without its report. */
static void store_save(const srch_pool *p, const srch_compile_result *r)
{
    char path[4096];
    store_path(p, r->key, "", path, sizeof(path));
    char *slash = strrchr(path, '/');
    *slash = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        kt_log_warn("compile", "cubin store %s: %s", path, strerror(errno));
        return;
    }
    kt_err err = {0};
    store_path(p, r->key, ".log", path, sizeof(path));
    int rc = kt_write_file(path, r->log, strlen(r->log), 0644, &err);
    if (rc == 0) {
        store_path(p, r->key, ".cubin", path, sizeof(path));
        rc = kt_write_file(path, r->cubin, r->cubin_len, 0644, &err);
    }
    if (rc < 0)
        kt_log_warn("compile", "cubin store: %s", err.msg);
}

/* ---- worker processes ---- */

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n == 0)
            return -EPIPE;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Request: u32 source length, source bytes. Response: u32 payload length, then u8 status,
 * f64 seconds, u32 log length, log, u32 cubin length, cubin. Host byte order: both ends are
 * built together and run on the same machine. */
_Noreturn void srch_compile_serve(int fd, const char *arch)
{
    for (;;) {
        uint32_t len;
        if (read_all(fd, &len, sizeof(len)) < 0 || len > FRAME_MAX_BYTES)
            _exit(0);
        char *src = malloc((size_t)len + 1);
        if (!src || read_all(fd, src, len) < 0)
            _exit(1);
        src[len] = '\0';
        srch_compile_result r = {0};
        int rc = srch_nvrtc_compile(src, arch, &r);
        free(src);
        if (rc < 0) /* NVRTC itself failed: let the parent see a crash and respawn us */
            _exit(2);
        uint32_t log_len = (uint32_t)strlen(r.log), cubin_len = (uint32_t)r.cubin_len;
        uint8_t status = (uint8_t)r.status;
        uint32_t total = 1 + 8 + 4 + log_len + 4 + cubin_len;
        if (write_all(fd, &total, 4) < 0 || write_all(fd, &status, 1) < 0 ||
            write_all(fd, &r.seconds, 8) < 0 || write_all(fd, &log_len, 4) < 0 ||
            write_all(fd, r.log, log_len) < 0 || write_all(fd, &cubin_len, 4) < 0 ||
            write_all(fd, r.cubin ? r.cubin : "", cubin_len) < 0)
            _exit(0);
        srch_compile_result_release(&r);
    }
}

static int worker_start(srch_pool *p, pool_worker *w)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    /* A fresh program, not a fork that goes on running ours: the parent has other threads (a
     * daemon's loop and GPU threads), and a lock one of them held at the fork (seen: the
     * allocator's, under ASan) stays locked forever in a forked child that calls malloc or
     * NVRTC. Between fork and exec the child makes only async-signal-safe calls. */
    char *argv[] = {p->compiler, p->arch, NULL};
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        return -e;
    }
    if (pid == 0) {
        /* Keep only stdio and our end of the socketpair (as fd 3): a child holding the parent's
         * other descriptors (a daemon's listening and client sockets) would keep them open. */
        if (sv[1] != 3 && dup2(sv[1], 3) < 0)
            _exit(127);
        close_range(4, ~0u, 0);
        execv(p->compiler, argv);
        _exit(127);
    }
    close(sv[1]);
    w->pid = pid;
    w->fd = sv[0];
    w->job = NULL;
    w->rx_len = 0;
    return 0;
}

static void worker_stop(pool_worker *w)
{
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    if (w->pid > 0) {
        kill(w->pid, SIGKILL);
        waitpid(w->pid, NULL, 0);
        w->pid = 0;
    }
}

int srch_pool_new(const srch_pool_opts *opts, srch_pool **out, kt_err *err)
{
    srch_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return kt_err_set(err, -ENOMEM, "out of memory creating the compile pool");
    snprintf(p->arch, sizeof(p->arch), "%s", opts->arch ? opts->arch : "sm_90a");
    int frc = kt_find_exe(opts->compiler, SRCH_COMPILER_ENV, SRCH_COMPILER_NAME, &p->compiler, err);
    if (frc < 0) {
        free(p);
        return frc;
    }
    p->timeout_s = opts->timeout_s > 0 ? opts->timeout_s : 60.0;
    int jobs = opts->jobs > 0 ? opts->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    p->n_workers = jobs < 1 ? 1 : jobs > POOL_MAX_JOBS ? POOL_MAX_JOBS : jobs;
    int rc = 0;
    if (opts->store_dir) {
        p->store_dir = strdup(opts->store_dir);
        if (!p->store_dir) {
            rc = kt_err_set(err, -ENOMEM, "out of memory creating the compile pool");
            goto fail;
        }
        if (mkdir(p->store_dir, 0755) != 0 && errno != EEXIST) {
            rc = kt_err_set(err, -errno, "cubin store %s: %s", p->store_dir, strerror(errno));
            goto fail;
        }
    }
    p->workers = calloc((size_t)p->n_workers, sizeof(*p->workers));
    if (!p->workers) {
        rc = kt_err_set(err, -ENOMEM, "out of memory creating the compile pool");
        goto fail;
    }
    for (int i = 0; i < p->n_workers; i++)
        p->workers[i].fd = -1;
    for (int i = 0; i < p->n_workers; i++) {
        if ((rc = worker_start(p, &p->workers[i])) < 0) {
            kt_err_set(err, rc, "cannot start compile worker: %s", strerror(-rc));
            goto fail;
        }
    }
    *out = p;
    return 0;
fail:
    srch_pool_free(p);
    return rc;
}

static void push_done(srch_pool *p, pool_done *d)
{
    d->next = NULL;
    if (p->done_tail)
        p->done_tail->next = d;
    else
        p->done_head = d;
    p->done_tail = d;
}

static int dispatch(srch_pool *p, kt_err *err);

int srch_pool_submit(srch_pool *p, const char *source, uint64_t tag)
{
    uint8_t key[SRCH_KEY_BYTES];
    compile_key(p->arch, source, key);
    if (p->store_dir) {
        pool_done *d = calloc(1, sizeof(*d));
        if (!d)
            return -ENOMEM;
        if (store_lookup(p, key, &d->r) == 0) {
            d->r.tag = tag;
            push_done(p, d);
            p->pending++;
            return 0;
        }
        free(d);
    }
    pool_job *j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->source = strdup(source);
    if (!j->source) {
        free(j);
        return -ENOMEM;
    }
    j->tag = tag;
    memcpy(j->key, key, SRCH_KEY_BYTES);
    if (p->queue_tail)
        p->queue_tail->next = j;
    else
        p->queue_head = j;
    p->queue_tail = j;
    p->pending++;
    /* Start it now if a worker is idle, so compiling overlaps whatever the caller does next
     * (emitting the next candidate). */
    return dispatch(p, NULL);
}

int srch_pool_pending(const srch_pool *p)
{
    return p->pending;
}

static void free_job(pool_job *j)
{
    free(j->source);
    free(j);
}

void srch_pool_discard(srch_pool *p)
{
    while (p->queue_head) {
        pool_job *j = p->queue_head;
        p->queue_head = j->next;
        free_job(j);
        p->pending--;
    }
    p->queue_tail = NULL;
    while (p->done_head) {
        pool_done *d = p->done_head;
        p->done_head = d->next;
        srch_compile_result_release(&d->r);
        free(d);
        p->pending--;
    }
    p->done_tail = NULL;
}

/* Ends the worker's current job with a result that has no cubin (timeout or crash), restarts
 * the worker, and queues the result. */
static int fail_job(srch_pool *p, pool_worker *w, srch_compile_status status, kt_err *err)
{
    pool_job *j = w->job;
    worker_stop(w);
    pool_done *d = calloc(1, sizeof(*d));
    char *log = d ? strdup(status == SRCH_COMPILE_TIMEOUT ? "compile timed out"
                                                          : "compile "
                                                            "worker died")
                  : NULL;
    if (!d || !log) {
        free(d);
        free_job(j);
        p->pending--;
        return kt_err_set(err, -ENOMEM, "out of memory recording a failed compile");
    }
    d->r.tag = j->tag;
    d->r.status = status;
    d->r.log = log;
    d->r.seconds = now_s() - w->started;
    memcpy(d->r.key, j->key, SRCH_KEY_BYTES);
    push_done(p, d);
    free_job(j);
    int rc = worker_start(p, w);
    if (rc < 0)
        return kt_err_set(err, rc, "cannot restart compile worker: %s", strerror(-rc));
    return 0;
}

static int dispatch(srch_pool *p, kt_err *err)
{
    for (int i = 0; i < p->n_workers && p->queue_head; i++) {
        pool_worker *w = &p->workers[i];
        if (w->job)
            continue;
        pool_job *j = p->queue_head;
        p->queue_head = j->next;
        if (!p->queue_head)
            p->queue_tail = NULL;
        w->job = j;
        w->started = now_s();
        w->rx_len = 0;
        uint32_t len = (uint32_t)strlen(j->source);
        if (write_all(w->fd, &len, 4) < 0 || write_all(w->fd, j->source, len) < 0) {
            int rc = fail_job(p, w, SRCH_COMPILE_CRASH, err);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* Parses a complete response in w->rx into a result. */
static int finish_job(srch_pool *p, pool_worker *w, kt_err *err)
{
    const uint8_t *b = w->rx + 4;
    size_t total = w->rx_len - 4;
    uint32_t log_len, cubin_len;
    double seconds;
    if (total < 17)
        return fail_job(p, w, SRCH_COMPILE_CRASH, err);
    memcpy(&seconds, b + 1, 8);
    memcpy(&log_len, b + 9, 4);
    if (13 + (size_t)log_len + 4 > total)
        return fail_job(p, w, SRCH_COMPILE_CRASH, err);
    memcpy(&cubin_len, b + 13 + log_len, 4);
    if (17 + (size_t)log_len + cubin_len != total)
        return fail_job(p, w, SRCH_COMPILE_CRASH, err);
    pool_done *d = calloc(1, sizeof(*d));
    if (d)
        d->r.log = malloc((size_t)log_len + 1);
    if (d && d->r.log && cubin_len)
        d->r.cubin = malloc(cubin_len);
    if (!d || !d->r.log || (cubin_len && !d->r.cubin)) {
        if (d)
            srch_compile_result_release(&d->r);
        free(d);
        return kt_err_set(err, -ENOMEM, "out of memory receiving a compile result");
    }
    pool_job *j = w->job;
    d->r.tag = j->tag;
    d->r.status = b[0] == SRCH_COMPILE_OK ? SRCH_COMPILE_OK : SRCH_COMPILE_REJECTED;
    d->r.seconds = seconds;
    memcpy(d->r.key, j->key, SRCH_KEY_BYTES);
    memcpy(d->r.log, b + 13, log_len);
    d->r.log[log_len] = '\0';
    if (cubin_len) /* a rejected compile has no cubin: d->r.cubin is NULL, memcpy's is UB */
        memcpy(d->r.cubin, b + 17 + log_len, cubin_len);
    d->r.cubin_len = cubin_len;
    srch_parse_ptxas_report(d->r.log, &d->r);
    if (p->store_dir && d->r.status == SRCH_COMPILE_OK)
        store_save(p, &d->r);
    push_done(p, d);
    free_job(j);
    w->job = NULL;
    w->rx_len = 0;
    return 0;
}

static int receive(srch_pool *p, pool_worker *w, kt_err *err)
{
    if (kt_grow(&w->rx, &w->rx_cap, w->rx_len + 65536, 1) < 0)
        return kt_err_set(err, -ENOMEM, "out of memory receiving a compile result");
    ssize_t n = read(w->fd, w->rx + w->rx_len, w->rx_cap - w->rx_len);
    if (n < 0 && errno == EINTR)
        return 0;
    if (n <= 0)
        return fail_job(p, w, SRCH_COMPILE_CRASH, err);
    w->rx_len += (size_t)n;
    if (w->rx_len < 4)
        return 0;
    uint32_t total;
    memcpy(&total, w->rx, 4);
    if (total > FRAME_MAX_BYTES)
        return fail_job(p, w, SRCH_COMPILE_CRASH, err);
    if (w->rx_len < 4 + (size_t)total)
        return 0;
    return finish_job(p, w, err);
}

int srch_pool_next(srch_pool *p, srch_compile_result *out, kt_err *err)
{
    for (;;) {
        if (p->done_head) {
            pool_done *d = p->done_head;
            p->done_head = d->next;
            if (!p->done_head)
                p->done_tail = NULL;
            *out = d->r;
            free(d);
            p->pending--;
            return 0;
        }
        if (p->pending == 0)
            return -EAGAIN;
        int rc = dispatch(p, err);
        if (rc < 0)
            return rc;
        if (p->done_head)
            continue;

        struct pollfd fds[POOL_MAX_JOBS];
        int idx[POOL_MAX_JOBS], n = 0;
        double now = now_s(), wait_s = p->timeout_s;
        for (int i = 0; i < p->n_workers; i++) {
            pool_worker *w = &p->workers[i];
            if (!w->job)
                continue;
            double left = w->started + p->timeout_s - now;
            if (left <= 0) {
                if ((rc = fail_job(p, w, SRCH_COMPILE_TIMEOUT, err)) < 0)
                    return rc;
                continue;
            }
            if (left < wait_s)
                wait_s = left;
            fds[n] = (struct pollfd){.fd = w->fd, .events = POLLIN};
            idx[n++] = i;
        }
        if (p->done_head || n == 0)
            continue;
        int ready = poll(fds, (nfds_t)n, (int)(wait_s * 1000) + 1);
        if (ready < 0 && errno != EINTR)
            return kt_err_set(err, -errno, "compile pool poll: %s", strerror(errno));
        for (int k = 0; k < n && ready > 0; k++) {
            if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if ((rc = receive(p, &p->workers[idx[k]], err)) < 0)
                return rc;
        }
    }
}

void srch_pool_free(srch_pool *p)
{
    if (!p)
        return;
    for (int i = 0; p->workers && i < p->n_workers; i++) {
        pool_worker *w = &p->workers[i];
        worker_stop(w);
        if (w->job)
            free_job(w->job);
        free(w->rx);
    }
    srch_pool_discard(p);
    free(p->workers);
    free(p->store_dir);
    free(p->compiler);
    free(p);
}
