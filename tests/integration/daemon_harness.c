/* The daemon test harness (daemon_harness.h). */
#include "daemon_harness.h"

#include "ops/msgpack_util.h"
#include "ops/ops.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DH_READ_CHUNK (64u << 10)

double dh_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double dh_scale(void)
{
    const char *v = getenv("KTUNE_TEST_TIME_SCALE");
    double x = v ? atof(v) : 1.0;
    return x >= 1.0 && x <= 100.0 ? x : 1.0;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- the daemon process ---- */

int dh_init(dh_daemon *d, const char *tag)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->root, sizeof(d->root), "/tmp/ktune-%s-XXXXXX", tag);
    if (!mkdtemp(d->root)) {
        int e = errno;
        fprintf(stderr, "harness: mkdtemp %s: %s\n", d->root, strerror(e));
        d->root[0] = '\0';
        return -e;
    }
    snprintf(d->sock, sizeof(d->sock), "%s/ktuned.sock", d->root);
    snprintf(d->cache, sizeof(d->cache), "%s/cache", d->root);
    snprintf(d->log, sizeof(d->log), "%s/ktuned.log", d->root);
    snprintf(d->fake_log, sizeof(d->fake_log), "%s/evals.log", d->root);
    return 0;
}

static void child_exec(const dh_daemon *d, const dh_opts *o, const char *bin, const char *worker)
{
    setpgid(0, 0);
    int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) {
        dup2(nul, 0);
        close(nul);
    }
    unsetenv("KTUNE_SOCKET");
    unsetenv("FAKE_DELAY_MS");
    unsetenv("FAKE_LOG");
    unsetenv("FAKE_LOG_DETAIL");
    char num[32];
    if (o->delay_ms > 0) {
        snprintf(num, sizeof(num), "%d", o->delay_ms);
        setenv("FAKE_DELAY_MS", num, 1);
    }
    if (o->log_evals) {
        setenv("FAKE_LOG", d->fake_log, 1);
        setenv("FAKE_LOG_DETAIL", "1", 1);
    }
    for (int i = 0; i < 8 && o->env[i]; i++)
        putenv((char *)o->env[i]);
    char jobs[16];
    snprintf(jobs, sizeof(jobs), "%d", o->compile_jobs > 0 ? o->compile_jobs : 2);
    char *argv[16 + 8] = {(char *)bin, "--socket", (char *)d->sock, "--cache", (char *)d->cache,
                          "--gpus", (char *)(o->gpus ? o->gpus : "0"), "--worker", (char *)worker,
                          "--compile-jobs", jobs,
                          /* tests open hundreds of connections from one uid, root or not
                           * (test_daemon_limits sets its own limit, later, which wins) */
                          "--max-clients-per-uid", "1000000", NULL};
    int argc = 13;
    if (o->log_level) {
        argv[argc++] = "--log-level";
        argv[argc++] = (char *)o->log_level;
    }
    for (int i = 0; i < 8 && o->args[i]; i++)
        argv[argc++] = (char *)o->args[i];
    argv[argc] = NULL;
    execv(bin, argv);
    fprintf(stderr, "harness: exec %s: %s\n", bin, strerror(errno));
    _exit(127);
}

int dh_start(dh_daemon *d, const dh_opts *o, double timeout_s)
{
    static const dh_opts none = {0};
    if (!o)
        o = &none;
    const char *bin = getenv("KTUNED_BIN"), *worker = getenv("KTUNE_FAKE_WORKER");
    if (!bin || !worker) {
        fprintf(stderr, "harness: KTUNED_BIN and KTUNE_FAKE_WORKER must be set\n");
        return -EINVAL;
    }
    if (d->pid > 0) {
        fprintf(stderr, "harness: the daemon is already running (pid %d)\n", (int)d->pid);
        return -EBUSY;
    }
    d->opts = *o;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0)
        child_exec(d, o, bin, worker);
    setpgid(pid, pid); /* also here: no race with the first kill(-pid) */
    d->pid = pid;
    d->starts++;
    double t_end = dh_now() + timeout_s;
    while (dh_now() < t_end) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            d->pid = 0;
            fprintf(stderr, "harness: ktuned exited during start-up (status 0x%x); its log:\n", st);
            dh_dump_log(d, 4000);
            return -ECHILD;
        }
        dh_conn c;
        if (dh_connect(&c, d->sock) == 0) {
            int rc = dh_hello(&c, 2.0, NULL);
            dh_close(&c);
            if (rc == 0)
                return 0;
        }
        sleep_s(0.02);
    }
    fprintf(stderr, "harness: ktuned did not answer hello within %.1f s; its log:\n", timeout_s);
    dh_dump_log(d, 4000);
    return -ETIMEDOUT;
}

int dh_stop(dh_daemon *d, int sig, double timeout_s, int *wstatus)
{
    if (d->pid <= 0)
        return -ESRCH;
    pid_t pid = d->pid;
    kill(pid, sig);
    double t_end = dh_now() + timeout_s;
    int st = 0, rc = -ETIMEDOUT;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            rc = 0;
            break;
        }
        if (dh_now() >= t_end)
            break;
        sleep_s(0.005);
    }
    if (rc < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    kill(-pid, SIGKILL); /* the daemon's workers and compile processes, if any are left */
    d->pid = 0;
    if (wstatus)
        *wstatus = st;
    return rc;
}

bool dh_alive(dh_daemon *d)
{
    if (d->pid <= 0)
        return false;
    int st;
    pid_t w = waitpid(d->pid, &st, WNOHANG);
    if (w == d->pid) {
        fprintf(stderr, "harness: ktuned (pid %d) has exited, status 0x%x\n", (int)d->pid, st);
        kill(-d->pid, SIGKILL);
        d->pid = 0;
        return false;
    }
    return kill(d->pid, 0) == 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void dh_cleanup(dh_daemon *d)
{
    if (d->pid > 0)
        dh_stop(d, SIGKILL, 5.0, NULL);
    if (d->root[0] && !getenv("KTUNE_KEEP_TMP"))
        nftw(d->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    d->root[0] = '\0';
}

void dh_dump_log(const dh_daemon *d, size_t bytes)
{
    FILE *f = fopen(d->log, "r");
    if (!f)
        return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size > (long)bytes)
            fseek(f, size - (long)bytes, SEEK_SET);
        else
            fseek(f, 0, SEEK_SET);
    }
    char buf[4096];
    size_t n;
    fprintf(stderr, "---- %s ----\n", d->log);
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        fwrite(buf, 1, n, stderr);
    fprintf(stderr, "---- end of log ----\n");
    fclose(f);
}

int64_t dh_rss_bytes(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int64_t kb = -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtoll(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* ---- a connection ---- */

int dh_connect(dh_conn *c, const char *sock)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->next_id = 1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(sock) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (!msgpack_unpacker_init(&c->up, DH_READ_CHUNK)) {
        close(fd);
        return -ENOMEM;
    }
    msgpack_unpacked_init(&c->msg);
    c->fd = fd;
    c->init = true;
    return 0;
}

void dh_close(dh_conn *c)
{
    if (c->init) {
        msgpack_unpacked_destroy(&c->msg);
        msgpack_unpacker_destroy(&c->up);
        c->init = false;
    }
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

int dh_send(dh_conn *c, const void *p, size_t n)
{
    return dh_send_for(c, p, n, 10.0);
}

int dh_send_for(dh_conn *c, const void *p, size_t n, double timeout_s)
{
    const char *b = p;
    double t_end = dh_now() + timeout_s;
    while (n) {
        ssize_t w = send(c->fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            b += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            double left = t_end - dh_now();
            if (left <= 0)
                return -ETIMEDOUT;
            struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
            poll(&pfd, 1, (int)(left * 1000) + 1);
            continue;
        }
        return w < 0 ? -errno : -EPIPE;
    }
    return 0;
}

int dh_recv(dh_conn *c, double timeout_s, const msgpack_object **out)
{
    double t_end = dh_now() + timeout_s;
    for (;;) {
        msgpack_unpack_return ur = msgpack_unpacker_next(&c->up, &c->msg);
        if (ur == MSGPACK_UNPACK_SUCCESS) {
            *out = &c->msg.data;
            return 0;
        }
        if (ur == MSGPACK_UNPACK_PARSE_ERROR)
            return -EPROTO;
        if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
            return -ENOMEM;
        double left = t_end - dh_now();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno != EINTR)
            return -errno;
        if (pr <= 0)
            continue;
        if (!msgpack_unpacker_reserve_buffer(&c->up, DH_READ_CHUNK))
            return -ENOMEM;
        ssize_t n = recv(c->fd, msgpack_unpacker_buffer(&c->up),
                         msgpack_unpacker_buffer_capacity(&c->up), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return -ECONNRESET;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -errno;
        }
        msgpack_unpacker_buffer_consumed(&c->up, (size_t)n);
    }
}

int dh_wait_closed(dh_conn *c, double timeout_s, int *n_msgs)
{
    double t_end = dh_now() + timeout_s;
    int n = 0, rc;
    for (;;) {
        const msgpack_object *o;
        double left = t_end - dh_now();
        if (left <= 0) {
            rc = -ETIMEDOUT;
            break;
        }
        rc = dh_recv(c, left, &o);
        if (rc == 0) {
            n++;
            continue;
        }
        if (rc == -EPROTO) { /* not msgpack from the daemon: drain the raw bytes */
            char buf[4096];
            struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
            if (poll(&pfd, 1, (int)(left * 1000) + 1) <= 0) {
                rc = -ETIMEDOUT;
                break;
            }
            ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
            if (r <= 0) {
                rc = 0;
                break;
            }
            continue;
        }
        rc = rc == -ECONNRESET ? 0 : rc;
        break;
    }
    if (n_msgs)
        *n_msgs = n;
    return rc;
}

/* ---- requests ---- */

void dh_req_begin(dh_req *r, dh_conn *c, const char *op, uint32_t n_args)
{
    msgpack_sbuffer_init(&r->sb);
    msgpack_packer_init(&r->pk, &r->sb, msgpack_sbuffer_write);
    r->id = c->next_id++;
    msgpack_pack_map(&r->pk, n_args + 3);
    kt_mp_pack_str(&r->pk, "v");
    msgpack_pack_uint8(&r->pk, 1);
    kt_mp_pack_str(&r->pk, "id");
    msgpack_pack_uint64(&r->pk, r->id);
    kt_mp_pack_str(&r->pk, "op");
    kt_mp_pack_str(&r->pk, op);
}

void dh_req_key(dh_req *r, const char *key)
{
    kt_mp_pack_str(&r->pk, key);
}

void dh_req_str(dh_req *r, const char *key, const char *val)
{
    kt_mp_pack_str(&r->pk, key);
    kt_mp_pack_str(&r->pk, val);
}

void dh_req_int(dh_req *r, const char *key, int64_t val)
{
    kt_mp_pack_str(&r->pk, key);
    msgpack_pack_int64(&r->pk, val);
}

void dh_req_num(dh_req *r, const char *key, double val)
{
    kt_mp_pack_str(&r->pk, key);
    msgpack_pack_double(&r->pk, val);
}

void dh_req_bool(dh_req *r, const char *key, bool val)
{
    kt_mp_pack_str(&r->pk, key);
    if (val)
        msgpack_pack_true(&r->pk);
    else
        msgpack_pack_false(&r->pk);
}

void dh_req_raw(dh_req *r, const char *key, const void *mp, size_t len)
{
    kt_mp_pack_str(&r->pk, key);
    msgpack_sbuffer_write(&r->sb, mp, len);
}

void dh_req_shapes(dh_req *r, const dh_shape *s, int n)
{
    msgpack_pack_map(&r->pk, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        kt_mp_pack_str(&r->pk, s[i].name);
        msgpack_pack_int64(&r->pk, s[i].value);
    }
}

void dh_req_free(dh_req *r)
{
    msgpack_sbuffer_destroy(&r->sb);
    memset(&r->sb, 0, sizeof(r->sb));
}

int dh_call(dh_conn *c, dh_req *r, double timeout_s, const msgpack_object **reply)
{
    uint64_t id = r->id;
    int rc = dh_send(c, r->sb.data, r->sb.size);
    dh_req_free(r);
    if (rc < 0)
        return rc;
    double t_end = dh_now() + timeout_s;
    for (;;) {
        const msgpack_object *o;
        rc = dh_recv(c, t_end - dh_now(), &o);
        if (rc < 0)
            return rc;
        if (dh_get(o, "event"))
            continue;
        const msgpack_object *rid = dh_get(o, "id");
        if (rid && rid->type == MSGPACK_OBJECT_POSITIVE_INTEGER && rid->via.u64 == id) {
            *reply = o;
            return 0;
        }
        char desc[300];
        dh_describe(o, desc, sizeof(desc));
        fprintf(stderr, "harness: expected the reply to request %llu, got %s\n",
                (unsigned long long)id, desc);
        return -EPROTO;
    }
}

/* ---- replies ---- */

const msgpack_object *dh_get(const msgpack_object *o, const char *path)
{
    const char *p = path;
    while (o && *p) {
        const char *dot = strchr(p, '.');
        size_t klen = dot ? (size_t)(dot - p) : strlen(p);
        if (o->type != MSGPACK_OBJECT_MAP)
            return NULL;
        const msgpack_object *found = NULL;
        for (uint32_t i = 0; i < o->via.map.size && !found; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
                memcmp(k->via.str.ptr, p, klen) == 0)
                found = &o->via.map.ptr[i].val;
        }
        o = found;
        p += klen + (dot ? 1 : 0);
    }
    return o;
}

bool dh_is_str(const msgpack_object *o, const char *path, const char *s)
{
    const msgpack_object *v = dh_get(o, path);
    return v && v->type == MSGPACK_OBJECT_STR && v->via.str.size == strlen(s) &&
           memcmp(v->via.str.ptr, s, v->via.str.size) == 0;
}

bool dh_ok(const msgpack_object *reply)
{
    const msgpack_object *v = dh_get(reply, "ok");
    return v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
}

int64_t dh_int(const msgpack_object *o, const char *path, int64_t dflt)
{
    const msgpack_object *v = dh_get(o, path);
    if (!v)
        return dflt;
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return (int64_t)v->via.u64;
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return v->via.i64;
    if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64)
        return (int64_t)v->via.f64;
    return dflt;
}

double dh_num(const msgpack_object *o, const char *path, double dflt)
{
    const msgpack_object *v = dh_get(o, path);
    if (!v)
        return dflt;
    if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64)
        return v->via.f64;
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return (double)v->via.u64;
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return (double)v->via.i64;
    return dflt;
}

bool dh_bool(const msgpack_object *o, const char *path, bool dflt)
{
    const msgpack_object *v = dh_get(o, path);
    return v && v->type == MSGPACK_OBJECT_BOOLEAN ? v->via.boolean : dflt;
}

void dh_str(const msgpack_object *o, const char *path, char *buf, size_t len)
{
    const msgpack_object *v = dh_get(o, path);
    buf[0] = '\0';
    if (v && v->type == MSGPACK_OBJECT_STR)
        snprintf(buf, len, "%.*s", (int)v->via.str.size, v->via.str.ptr);
}

void dh_describe(const msgpack_object *o, char *buf, size_t len)
{
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (!f) {
        snprintf(buf, len, "(no memory)");
        return;
    }
    msgpack_object_print(f, *o);
    fclose(f);
    snprintf(buf, len, "%s", text ? text : "");
    if (tlen >= len && len > 4)
        memcpy(buf + len - 4, "...", 4);
    free(text);
}

int dh_job_parse(const msgpack_object *job, dh_job *out)
{
    memset(out, 0, sizeof(*out));
    if (!job || job->type != MSGPACK_OBJECT_MAP || !dh_get(job, "job") || !dh_get(job, "state"))
        return -EPROTO;
    out->id = (uint64_t)dh_int(job, "job", 0);
    dh_str(job, "state", out->state, sizeof(out->state));
    out->priority = (int)dh_int(job, "priority", 0);
    out->gpu = (int)dh_int(job, "gpu", -1);
    out->submitted = dh_int(job, "submitted", 0);
    out->started = dh_int(job, "started", 0);
    out->finished = dh_int(job, "finished", 0);
    out->trials = (int)dh_int(job, "trials", 0);
    out->measured = (int)dh_int(job, "measured", 0);
    out->resumed = (int)dh_int(job, "resumed", 0);
    out->elapsed_s = dh_num(job, "elapsed_s", 0);
    out->best_ns = dh_num(job, "best_ns", 0);
    out->record = dh_bool(job, "record", false);
    dh_str(job, "family", out->family, sizeof(out->family));
    dh_str(job, "error", out->error, sizeof(out->error));
    return 0;
}

bool dh_job_final(const dh_job *j)
{
    return strcmp(j->state, "done") == 0 || strcmp(j->state, "failed") == 0 ||
           strcmp(j->state, "cancelled") == 0;
}

/* ---- the ops ---- */

int dh_example_graph(const char *name, void **mp, size_t *len)
{
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    char path[512];
    snprintf(path, sizeof(path), "%s/examples/%s.json", root ? root : ".", name);
    ops_graph *g = NULL;
    ops_diag d = {0};
    int rc = ops_graph_from_json_file(path, &g, &d);
    if (rc < 0) {
        fprintf(stderr, "harness: %s: %s\n", path, d.msg);
        return rc;
    }
    rc = ops_graph_to_msgpack(g, mp, len);
    ops_graph_free(g);
    return rc;
}

/* x[M, 64], then n nodes of op, each of the previous tensor (chain) or of x (branches). */
static int one_input_graph(ops_op op, int n, bool chain, void **mp, size_t *len)
{
    ops_graph *g = ops_graph_new(chain ? "chain" : "branches");
    if (!g)
        return -ENOMEM;
    ops_shape s = {.rank = 2, .d = {{.size = -1, .sym = ops_graph_sym(g, "M")}, {64, OPS_NO_SYM}}};
    int x = ops_graph_add_input(g, "x", OPS_DT_F32, &s, false), prev = x, rc = x < 0 ? x : 0;
    for (int i = 0; i < n && rc == 0; i++) {
        char name[32];
        snprintf(name, sizeof(name), "t%d", i);
        int ni = ops_graph_add_node(g, op, name, NULL);
        if (ni < 0) {
            rc = ni;
            break;
        }
        g->nodes[ni].n_in = 1;
        g->nodes[ni].in[0].tensor = chain ? prev : x;
        prev = g->nodes[ni].out;
        if (!chain || i == n - 1)
            rc = ops_graph_mark_output(g, prev) < 0 ? -ENOMEM : 0;
    }
    ops_diag d = {0};
    if (rc == 0 && (rc = ops_graph_validate(g, &d)) < 0)
        fprintf(stderr, "harness: generated graph: %s\n", d.msg);
    if (rc == 0)
        rc = ops_graph_to_msgpack(g, mp, len);
    ops_graph_free(g);
    return rc;
}

int dh_chain_graph(const char *op, int n, void **mp, size_t *len)
{
    ops_op o = ops_op_from_name(op, 1);
    if (o == OPS_OP_INVALID)
        return -EINVAL;
    return one_input_graph(o, n, true, mp, len);
}

int dh_branches_graph(int k, void **mp, size_t *len)
{
    return one_input_graph(OPS_RELU, k, false, mp, len);
}

static int remote_error(const char *op, const msgpack_object *reply)
{
    char desc[400];
    dh_describe(reply, desc, sizeof(desc));
    fprintf(stderr, "harness: %s answered %s\n", op, desc);
    return -EREMOTEIO;
}

int dh_submit(dh_conn *c, const dh_submit_args *a, double timeout_s, dh_job *job, bool *joined)
{
    uint32_t n = 2 + (a->budget_s > 0) + 1 + (a->gpu >= 0) + (a->name != NULL);
    dh_req r;
    dh_req_begin(&r, c, "submit", n);
    dh_req_raw(&r, "graph", a->graph, a->graph_len);
    dh_req_key(&r, "shapes");
    dh_req_shapes(&r, a->shapes, a->n_shapes);
    if (a->budget_s > 0)
        dh_req_num(&r, "budget_s", a->budget_s);
    dh_req_int(&r, "priority", a->priority);
    if (a->gpu >= 0)
        dh_req_int(&r, "gpu", a->gpu);
    if (a->name)
        dh_req_str(&r, "name", a->name);
    const msgpack_object *rep;
    int rc = dh_call(c, &r, timeout_s, &rep);
    if (rc < 0)
        return rc;
    if (!dh_ok(rep))
        return remote_error("submit", rep);
    if (joined)
        *joined = dh_bool(rep, "joined", false);
    if (dh_job_parse(dh_get(rep, "job"), job) < 0)
        return remote_error("submit (no Job)", rep);
    return 0;
}

int dh_status(dh_conn *c, uint64_t id, double timeout_s, dh_job *job)
{
    dh_req r;
    dh_req_begin(&r, c, "status", 1);
    dh_req_int(&r, "job", (int64_t)id);
    const msgpack_object *rep;
    int rc = dh_call(c, &r, timeout_s, &rep);
    if (rc < 0)
        return rc;
    if (!dh_ok(rep))
        return remote_error("status", rep);
    if (dh_job_parse(dh_get(rep, "job"), job) < 0)
        return remote_error("status (no Job)", rep);
    return 0;
}

int dh_cancel(dh_conn *c, uint64_t id, double timeout_s, dh_job *job, char code[16])
{
    dh_req r;
    dh_req_begin(&r, c, "cancel", 1);
    dh_req_int(&r, "job", (int64_t)id);
    const msgpack_object *rep;
    int rc = dh_call(c, &r, timeout_s, &rep);
    code[0] = '\0';
    if (rc < 0)
        return rc;
    if (!dh_ok(rep)) {
        dh_str(rep, "error.code", code, 16);
        return 0;
    }
    if (dh_job_parse(dh_get(rep, "job"), job) < 0)
        return remote_error("cancel (no Job)", rep);
    return 0;
}

int dh_lookup(dh_conn *c, const void *graph, size_t graph_len, const dh_shape *shapes, int n,
              double timeout_s, bool *found, char family[32])
{
    dh_req r;
    dh_req_begin(&r, c, "lookup", 3);
    dh_req_raw(&r, "graph", graph, graph_len);
    dh_req_key(&r, "shapes");
    dh_req_shapes(&r, shapes, n);
    dh_req_str(&r, "precision", "exact");
    const msgpack_object *rep;
    int rc = dh_call(c, &r, timeout_s, &rep);
    if (rc < 0)
        return rc;
    if (!dh_ok(rep))
        return remote_error("lookup", rep);
    *found = dh_bool(rep, "found", false);
    if (family)
        dh_str(rep, "record.family", family, 32);
    return 0;
}

int dh_hello(dh_conn *c, double timeout_s, int64_t *pid)
{
    dh_req r;
    dh_req_begin(&r, c, "hello", 1);
    dh_req_str(&r, "client", "ktune-integration-tests");
    const msgpack_object *rep;
    int rc = dh_call(c, &r, timeout_s, &rep);
    if (rc < 0)
        return rc;
    if (!dh_ok(rep) || dh_int(rep, "protocol", 0) != 1)
        return remote_error("hello", rep);
    if (pid)
        *pid = dh_int(rep, "pid", 0);
    return 0;
}

int dh_wait_gpus_started(dh_conn *c, double timeout_s)
{
    double t_end = dh_now() + timeout_s;
    for (;;) {
        dh_req r;
        dh_req_begin(&r, c, "gpus", 0);
        const msgpack_object *rep;
        int rc = dh_call(c, &r, timeout_s, &rep);
        if (rc < 0)
            return rc;
        const msgpack_object *gpus = dh_get(rep, "gpus");
        if (!dh_ok(rep) || !gpus || gpus->type != MSGPACK_OBJECT_ARRAY)
            return remote_error("gpus", rep);
        bool starting = false;
        for (uint32_t i = 0; i < gpus->via.array.size; i++)
            starting |= dh_is_str(&gpus->via.array.ptr[i], "state", "starting");
        if (!starting)
            return 0;
        if (dh_now() > t_end) {
            fprintf(stderr, "harness: a GPU is still starting after %.0f s\n", timeout_s);
            return -ETIMEDOUT;
        }
        usleep(50 * 1000);
    }
}

int dh_wait_job(dh_conn *c, uint64_t id, const char *state, double timeout_s, double poll_s,
                dh_job *job)
{
    double t_end = dh_now() + timeout_s;
    for (;;) {
        int rc = dh_status(c, id, 5.0, job);
        if (rc < 0)
            return rc;
        if (dh_job_final(job) || (state && strcmp(job->state, state) == 0))
            return 0;
        if (dh_now() >= t_end)
            return -ETIMEDOUT;
        sleep_s(poll_s);
    }
}

/* ---- the eval log ---- */

int dh_read_evals(const char *path, dh_eval **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : -errno;
    size_t cap = 0;
    char line[2048];
    int rc = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *save = NULL;
        char *key = strtok_r(line, "\t", &save), *sub = strtok_r(NULL, "\t", &save);
        char *binds = strtok_r(NULL, "\t", &save), *pid = strtok_r(NULL, "\t", &save);
        char *ms = strtok_r(NULL, "\t", &save), *kind = strtok_r(NULL, "\t", &save);
        if (!key || !sub || !binds || !pid || !ms) {
            fprintf(stderr, "harness: %s: line %zu is not a FAKE_LOG_DETAIL line\n", path, *n + 1);
            rc = -EPROTO;
            break;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 256;
            dh_eval *grown = realloc(*out, cap * sizeof(**out));
            if (!grown) {
                rc = -ENOMEM;
                break;
            }
            *out = grown;
        }
        dh_eval *e = &(*out)[(*n)++];
        snprintf(e->key, sizeof(e->key), "%s", key);
        snprintf(e->sub, sizeof(e->sub), "%s", sub);
        snprintf(e->bindings, sizeof(e->bindings), "%s", binds);
        e->pid = strtol(pid, NULL, 10);
        e->ms = strtoll(ms, NULL, 10);
        e->load = kind && strcmp(kind, "load") == 0;
    }
    fclose(f);
    if (rc < 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}
