/* libktune's client: a blocking connection to ktuned over its Unix socket, speaking the wire
 * protocol of docs/protocol.md (a stream of msgpack maps each way).
 *
 * One ktune_client is one connection. Every public call takes the client's lock, sends one
 * request with the next id, and reads messages until the reply with that id arrives; messages
 * with other ids (the late reply of a request that timed out, the remaining events of a watch
 * the caller stopped following) are dropped. Socket I/O is non-blocking under poll() with a
 * deadline, and every system call is retried on EINTR.
 *
 * What the daemon sends is checked like any input: a reply over 64 MiB, nesting deeper than 32
 * (msgpack-c's unpacker stack), bytes that are not msgpack or a message that is not a map break
 * the connection with -EPROTO; a Job, GPU or stats object with a field of the wrong type is
 * -EPROTO for that call only. */
#include "libktune_internal.h"
#include "ktune_config.h"
#include "ops/msgpack_util.h"

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <msgpack.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CLIENT_MAX_REPLY   ((size_t)64 << 20) /* bytes of one message from the daemon */
#define CLIENT_MAX_REQUEST ((size_t)4 << 20)  /* the daemon's KD_MAX_REQUEST */
#define CLIENT_READ_CHUNK  ((size_t)64 << 10)
#define CLIENT_TIMEOUT_S   30.0

struct ktune_client {
    pthread_mutex_t lock; /* error-checking: a watch callback calling back in gets -EDEADLK */
    int fd;
    char what[128]; /* the socket path, for messages */
    char path[108]; /* the socket path when ktune_connect made the connection ("": from an fd),
                     * for the reconnect after ktuned closed it idle (revive) */
    uint64_t next_id;
    double timeout_s;
    msgpack_unpacker up;
    bool up_live; /* up is initialised (false only after a failed re-initialisation) */
    int broken;   /* 0, or the negative errno that made the stream unusable */
    char broken_msg[256];
    ktune_hello hello;
};

/* ---- time ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Milliseconds left until deadline (<= 0: none) for poll(): -1 waits without limit. */
static int ms_left(double deadline)
{
    if (deadline <= 0)
        return -1;
    double left = (deadline - now_s()) * 1e3;
    if (left <= 0)
        return 0;
    return left > 1e9 ? 1000000000 : (int)ceil(left);
}

/* ---- the connection ---- */

static int client_break(ktune_client *c, ktune_error *err, int rc, const char *fmt, ...)
    KT_PRINTF(4, 5);
static int client_break(ktune_client *c, ktune_error *err, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->broken_msg, sizeof(c->broken_msg), fmt, ap);
    va_end(ap);
    c->broken = rc;
    return ktune_err_from(err, rc, "%s", c->broken_msg);
}

/* Waits for events on c->fd until deadline. 0 ready, -ETIMEDOUT, or a broken connection. */
static int wait_fd(ktune_client *c, short events, double deadline, ktune_error *err)
{
    for (;;) {
        struct pollfd p = {.fd = c->fd, .events = events};
        int n = poll(&p, 1, ms_left(deadline));
        if (n > 0)
            return 0;
        if (n == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return client_break(c, err, -errno, "poll on the connection to ktuned at %s: %s",
                                c->what, strerror(errno));
    }
}

static int send_all(ktune_client *c, const char *buf, size_t len, const char *op, double deadline,
                    ktune_error *err)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(c->fd, buf + off, len - off, MSG_NOSIGNAL);
        if (n >= 0) {
            off += (size_t)n;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(c, POLLOUT, deadline, err);
            if (rc == -ETIMEDOUT)
                /* Part of a message may be out: the stream cannot be resynchronised. */
                return client_break(c, err, rc,
                                    "ktuned at %s did not read the '%s' request "
                                    "within %.0f s",
                                    c->what, op, c->timeout_s);
            if (rc < 0)
                return rc;
            continue;
        }
        if (errno == EPIPE || errno == ECONNRESET)
            return client_break(c, err, -errno, "ktuned at %s closed the connection", c->what);
        return client_break(c, err, -errno, "sending to ktuned at %s: %s", c->what,
                            strerror(errno));
    }
    return 0;
}

/* Reads messages until the one whose id is `id` (others are dropped) and leaves it in *msg
 * (initialised by the caller, who destroys it). deadline <= 0: no limit. */
static int recv_id(ktune_client *c, uint64_t id, const char *op, msgpack_unpacked *msg,
                   double deadline, ktune_error *err)
{
    for (;;) {
        msgpack_unpack_return ur = msgpack_unpacker_next(&c->up, msg);
        if (ur == MSGPACK_UNPACK_SUCCESS) {
            const msgpack_object *o = &msg->data;
            if (o->type != MSGPACK_OBJECT_MAP)
                return client_break(c, err, -EPROTO,
                                    "ktuned at %s sent a message that is not "
                                    "a map",
                                    c->what);
            const msgpack_object *mid = kt_mp_get(o, "id");
            if (mid && mid->type == MSGPACK_OBJECT_POSITIVE_INTEGER && mid->via.u64 == id)
                return 0;
            /* id 0 is never ours: an error with it is ktuned refusing the connection (too
             * many connections, shutting down; docs/protocol.md), the answer to this call */
            const msgpack_object *ok = kt_mp_get(o, "ok");
            if (mid && mid->type == MSGPACK_OBJECT_POSITIVE_INTEGER && mid->via.u64 == 0 && ok &&
                ok->type == MSGPACK_OBJECT_BOOLEAN && !ok->via.boolean)
                return 0;
            continue; /* a stale reply or event of an earlier request */
        }
        if (ur == MSGPACK_UNPACK_PARSE_ERROR)
            return client_break(c, err, -EPROTO, "ktuned at %s sent bytes that are not msgpack",
                                c->what);
        if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
            return client_break(c, err, -EPROTO,
                                "cannot decode a message from ktuned at %s "
                                "(nested deeper than 32 levels, or out of memory)",
                                c->what);
        /* MSGPACK_UNPACK_CONTINUE: the next message is not complete yet. */
        if (msgpack_unpacker_message_size(&c->up) > CLIENT_MAX_REPLY)
            return client_break(c, err, -EPROTO, "ktuned at %s sent a message over %zu MiB",
                                c->what, CLIENT_MAX_REPLY >> 20);
        if (!msgpack_unpacker_reserve_buffer(&c->up, CLIENT_READ_CHUNK))
            return client_break(c, err, -ENOMEM, "out of memory reading from ktuned at %s",
                                c->what);
        ssize_t n =
            read(c->fd, msgpack_unpacker_buffer(&c->up), msgpack_unpacker_buffer_capacity(&c->up));
        if (n > 0) {
            msgpack_unpacker_buffer_consumed(&c->up, (size_t)n);
        } else if (n == 0 || errno == ECONNRESET) {
            return client_break(c, err, -ECONNRESET, "ktuned at %s closed the connection", c->what);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(c, POLLIN, deadline, err);
            if (rc == -ETIMEDOUT) /* not broken: a late reply is dropped by its id */
                return ktune_err_from(err, rc, "no reply from ktuned at %s to '%s' within %.3g s",
                                      c->what, op, c->timeout_s);
            if (rc < 0)
                return rc;
        } else if (errno != EINTR) {
            return client_break(c, err, -errno, "reading from ktuned at %s: %s", c->what,
                                strerror(errno));
        }
    }
}

/* ---- requests ---- */

typedef struct req {
    msgpack_sbuffer sb; /* the arguments; the envelope is packed in front when sent */
    msgpack_packer pk;
    const char *op;
    uint64_t id;
    uint32_t n_args; /* counted by p_key: the map header cannot disagree with the body */
    int fail;
} req;

static void p_str(req *r, const char *s)
{
    r->fail |= kt_mp_pack_str(&r->pk, s);
}

/* One top-level argument's key; its value is packed next. */
static void p_key(req *r, const char *k)
{
    r->n_args++;
    p_str(r, k);
}

static void p_key_str(req *r, const char *k, const char *v)
{
    p_key(r, k);
    p_str(r, v);
}

static void p_key_i64(req *r, const char *k, int64_t v)
{
    p_key(r, k);
    r->fail |= msgpack_pack_int64(&r->pk, v);
}

static void p_key_bool(req *r, const char *k, bool v)
{
    p_key(r, k);
    r->fail |= v ? msgpack_pack_true(&r->pk) : msgpack_pack_false(&r->pk);
}

static void p_key_f64(req *r, const char *k, double v)
{
    p_key(r, k);
    r->fail |= msgpack_pack_double(&r->pk, v);
}

/* Starts a request; the caller holds c->lock (ids are taken in send order). */
static void req_begin(req *r, ktune_client *c, const char *op)
{
    memset(r, 0, sizeof(*r));
    msgpack_sbuffer_init(&r->sb);
    msgpack_packer_init(&r->pk, &r->sb, msgpack_sbuffer_write);
    r->op = op;
    r->id = c->next_id++;
}

/* The envelope {"v": 1, "id": N, "op": NAME, + n_args more} into head. */
static int req_head(const req *r, msgpack_sbuffer *head)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, head, msgpack_sbuffer_write);
    size_t ol = strlen(r->op);
    return msgpack_pack_map(&pk, 3 + r->n_args) | msgpack_pack_str_with_body(&pk, "v", 1) |
           msgpack_pack_int(&pk, 1) | msgpack_pack_str_with_body(&pk, "id", 2) |
           msgpack_pack_uint64(&pk, r->id) | msgpack_pack_str_with_body(&pk, "op", 2) |
           msgpack_pack_str_with_body(&pk, r->op, ol);
}

static void req_free(req *r)
{
    msgpack_sbuffer_destroy(&r->sb);
}

/* Maps an error reply to its negative errno, with the daemon's message. */
static int error_reply(const ktune_client *c, const char *op, const msgpack_object *o,
                       ktune_error *err)
{
    const msgpack_object *e = kt_mp_get(o, "error");
    const msgpack_object *code = kt_mp_get(e, "code"), *msg = kt_mp_get(e, "msg");
    char name[32] = "", text[sizeof(err->msg)] = "";
    if (code && code->type == MSGPACK_OBJECT_STR)
        snprintf(name, sizeof(name), "%.*s", (int)code->via.str.size, code->via.str.ptr);
    if (msg && msg->type == MSGPACK_OBJECT_STR)
        snprintf(text, sizeof(text), "%.*s", (int)msg->via.str.size, msg->via.str.ptr);
    int rc = ktune_errno_from_name(name);
    if (!text[0])
        snprintf(text, sizeof(text), "ktuned at %s refused '%s'%s%s", c->what, op,
                 name[0] ? " with " : " without a reason", name);
    return ktune_err_from(err, rc ? -rc : -EIO, "%s", text);
}

/* Sends r and waits for its reply into *msg (initialised by the caller, who destroys it). An
 * error reply returns its negative errno. Caller holds c->lock. */
static int revive(ktune_client *c, ktune_error *err);

static int call(ktune_client *c, req *r, msgpack_unpacked *msg, ktune_error *err)
{
    if (c->broken)
        return ktune_err_from(err, c->broken, "connection to ktuned at %s is unusable: %s", c->what,
                              c->broken_msg);
    if (revive(c, err) < 0)
        return c->broken;
    msgpack_sbuffer head;
    msgpack_sbuffer_init(&head);
    if (r->fail || req_head(r, &head) != 0) {
        msgpack_sbuffer_destroy(&head);
        return ktune_err_from(err, -ENOMEM, "out of memory building the '%s' request", r->op);
    }
    if (head.size + r->sb.size > CLIENT_MAX_REQUEST) {
        msgpack_sbuffer_destroy(&head);
        return ktune_err_from(err, -E2BIG,
                              "the '%s' request is %zu bytes, over the daemon's "
                              "%zu MiB cap",
                              r->op, head.size + r->sb.size, CLIENT_MAX_REQUEST >> 20);
    }
    double deadline = c->timeout_s > 0 ? now_s() + c->timeout_s : 0;
    int rc = send_all(c, head.data, head.size, r->op, deadline, err);
    msgpack_sbuffer_destroy(&head);
    if (rc == 0 && r->sb.size)
        rc = send_all(c, r->sb.data, r->sb.size, r->op, deadline, err);
    if (rc == 0) {
        if ((rc = recv_id(c, r->id, r->op, msg, deadline, err)) < 0)
            return rc;
    } else if (rc == -EPIPE || rc == -ECONNRESET) {
        /* ktuned may have said why before closing (a refused connection, a request it had
         * no memory for): its error is in the socket still, and better than "closed" */
        ktune_error why;
        if (recv_id(c, r->id, r->op, msg, now_s(), &why) < 0)
            return rc;
    } else {
        return rc;
    }
    const msgpack_object *ok = kt_mp_get(&msg->data, "ok");
    if (!ok || ok->type != MSGPACK_OBJECT_BOOLEAN)
        return ktune_err_from(err, -EPROTO, "ktuned at %s answered '%s' without 'ok'", c->what,
                              r->op);
    if (!ok->via.boolean)
        return error_reply(c, r->op, &msg->data, err);
    return 0;
}

static int lock_client(ktune_client *c, const char *fn, ktune_error *err)
{
    int rc = pthread_mutex_lock(&c->lock);
    if (rc == EDEADLK)
        return ktune_err_from(err, -EDEADLK,
                              "%s: called from a ktune_watch callback on the same "
                              "client (use another client)",
                              fn);
    KT_REQUIRE(rc == 0);
    return 0;
}

static void unlock_client(ktune_client *c)
{
    KT_REQUIRE(pthread_mutex_unlock(&c->lock) == 0);
}

static void clear_err(ktune_error *err)
{
    if (err)
        *err = (ktune_error){0};
}

/* ---- decoding what the daemon sends ---- */

typedef struct dec {
    ktune_error *err;
    const char *obj; /* "a Job", "a GPU", ... */
    int rc;
} dec;

static void dec_fail(dec *d, const char *key, const char *want)
{
    if (!d->rc)
        d->rc = ktune_err_from(d->err, -EPROTO, "ktuned sent %s whose '%s' is not %s", d->obj, key,
                               want);
}

static void d_str(dec *d, const msgpack_object *m, const char *key, char *dst, size_t cap)
{
    const msgpack_object *v = kt_mp_get(m, key);
    dst[0] = '\0';
    if (!v || v->type == MSGPACK_OBJECT_NIL)
        return;
    if (v->type != MSGPACK_OBJECT_STR)
        return dec_fail(d, key, "a string");
    size_t n = v->via.str.size < cap - 1 ? v->via.str.size : cap - 1;
    memcpy(dst, v->via.str.ptr, n);
    dst[n] = '\0';
}

static bool to_i64(const msgpack_object *v, int64_t *out)
{
    if (kt_mp_i64(v, out))
        return true;
    if ((v->type != MSGPACK_OBJECT_FLOAT64 && v->type != MSGPACK_OBJECT_FLOAT32) ||
        v->via.f64 != floor(v->via.f64) || !(fabs(v->via.f64) < 9e18))
        return false;
    *out = (int64_t)v->via.f64;
    return true;
}

static void d_i64(dec *d, const msgpack_object *m, const char *key, int64_t *dst, int64_t dflt)
{
    const msgpack_object *v = kt_mp_get(m, key);
    *dst = dflt;
    if (v && v->type != MSGPACK_OBJECT_NIL && !to_i64(v, dst))
        dec_fail(d, key, "an integer");
}

static void d_int(dec *d, const msgpack_object *m, const char *key, int *dst, int dflt)
{
    int64_t v;
    d_i64(d, m, key, &v, dflt);
    if (v < INT32_MIN || v > INT32_MAX)
        return dec_fail(d, key, "a 32-bit integer");
    *dst = (int)v;
}

static void d_u64(dec *d, const msgpack_object *m, const char *key, uint64_t *dst)
{
    const msgpack_object *v = kt_mp_get(m, key);
    *dst = 0;
    if (!v || v->type == MSGPACK_OBJECT_NIL)
        return;
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *dst = v->via.u64;
    else if ((v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32) &&
             v->via.f64 >= 0 && v->via.f64 < 1.8e19 && v->via.f64 == floor(v->via.f64))
        *dst = (uint64_t)v->via.f64;
    else
        dec_fail(d, key, "an unsigned integer");
}

static void d_f64(dec *d, const msgpack_object *m, const char *key, double *dst)
{
    const msgpack_object *v = kt_mp_get(m, key);
    *dst = 0;
    if (!v || v->type == MSGPACK_OBJECT_NIL)
        return;
    if (v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32)
        *dst = v->via.f64;
    else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *dst = (double)v->via.u64;
    else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *dst = (double)v->via.i64;
    else
        dec_fail(d, key, "a number");
}

static void d_bool(dec *d, const msgpack_object *m, const char *key, bool *dst)
{
    const msgpack_object *v = kt_mp_get(m, key);
    *dst = false;
    if (!v || v->type == MSGPACK_OBJECT_NIL)
        return;
    if (v->type != MSGPACK_OBJECT_BOOLEAN)
        return dec_fail(d, key, "a boolean");
    *dst = v->via.boolean;
}

/* {"M": 1024, "N": 512} -> "M=1024;N=512" (in the daemon's order). */
static void d_shapes(dec *d, const msgpack_object *m, const char *key, char *dst, size_t cap)
{
    const msgpack_object *v = kt_mp_get(m, key);
    dst[0] = '\0';
    if (!v || v->type == MSGPACK_OBJECT_NIL)
        return;
    if (v->type != MSGPACK_OBJECT_MAP)
        return dec_fail(d, key, "a map of names to integers");
    size_t off = 0;
    for (uint32_t i = 0; i < v->via.map.size; i++) {
        const msgpack_object *k = &v->via.map.ptr[i].key;
        int64_t val;
        if (k->type != MSGPACK_OBJECT_STR || !to_i64(&v->via.map.ptr[i].val, &val))
            return dec_fail(d, key, "a map of names to integers");
        int n = snprintf(dst + off, cap - off, "%s%.*s=%" PRId64, i ? ";" : "",
                         (int)k->via.str.size, k->via.str.ptr, val);
        if (n < 0 || (size_t)n >= cap - off) { /* keep whole bindings only */
            dst[off] = '\0';
            return;
        }
        off += (size_t)n;
    }
}

/* {"wrong": 1, "compile_error": 2} -> j->failures (the first ones that fit; names cut to fit). */
static void d_failures(dec *d, const msgpack_object *m, const char *key, ktune_job *j)
{
    const msgpack_object *v = kt_mp_get(m, key);
    j->n_failures = 0;
    if (!v || v->type == MSGPACK_OBJECT_NIL)
        return;
    if (v->type != MSGPACK_OBJECT_MAP)
        return dec_fail(d, key, "a map of classes to counts");
    const int cap = (int)(sizeof(j->failures) / sizeof(j->failures[0]));
    for (uint32_t i = 0; i < v->via.map.size; i++) {
        const msgpack_object *k = &v->via.map.ptr[i].key;
        int64_t n;
        if (k->type != MSGPACK_OBJECT_STR || !to_i64(&v->via.map.ptr[i].val, &n) || n < 0 ||
            n > INT32_MAX)
            return dec_fail(d, key, "a map of classes to counts");
        if (j->n_failures == cap)
            continue;
        struct ktune_job_failure *f = &j->failures[j->n_failures++];
        size_t len = k->via.str.size < sizeof(f->name) - 1 ? k->via.str.size : sizeof(f->name) - 1;
        memcpy(f->name, k->via.str.ptr, len);
        f->name[len] = '\0';
        f->count = (int)n;
    }
}

static int decode_job(const msgpack_object *o, ktune_job *j, ktune_error *err)
{
    dec d = {.err = err, .obj = "a Job"};
    memset(j, 0, sizeof(*j));
    if (!o || o->type != MSGPACK_OBJECT_MAP)
        return ktune_err_from(err, -EPROTO, "ktuned sent a Job that is not a map");
    const msgpack_object *id = kt_mp_get(o, "job");
    if (!id || id->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return ktune_err_from(err, -EPROTO, "ktuned sent a Job without its id ('job')");
    j->id = id->via.u64;
    char state[16];
    d_str(&d, o, "state", state, sizeof(state));
    int s = 0;
    while (s <= KTUNE_JOB_CANCELLED && strcmp(state, ktune_job_state_name((ktune_job_state)s)) != 0)
        s++;
    if (!d.rc && s > KTUNE_JOB_CANCELLED)
        return ktune_err_from(err, -EPROTO,
                              "ktuned sent job %" PRIu64 " in an unknown state "
                              "'%s'",
                              j->id, state);
    j->state = (ktune_job_state)s;
    d_str(&d, o, "name", j->name, sizeof(j->name));
    d_int(&d, o, "priority", &j->priority, 0);
    d_int(&d, o, "gpu", &j->gpu, -1);
    d_str(&d, o, "signature", j->signature, sizeof(j->signature));
    d_shapes(&d, o, "shapes", j->shapes, sizeof(j->shapes));
    d_str(&d, o, "precision", j->precision, sizeof(j->precision));
    d_f64(&d, o, "budget_s", &j->budget_s);
    d_f64(&d, o, "tolerance", &j->tolerance);
    d_i64(&d, o, "submitted", &j->submitted, 0);
    d_i64(&d, o, "started", &j->started, 0);
    d_i64(&d, o, "finished", &j->finished, 0);
    d_str(&d, o, "phase", j->phase, sizeof(j->phase));
    d_int(&d, o, "trials", &j->trials, 0);
    d_int(&d, o, "measured", &j->measured, 0);
    d_int(&d, o, "resumed", &j->resumed, 0);
    d_f64(&d, o, "elapsed_s", &j->elapsed_s);
    d_f64(&d, o, "best_ns", &j->best_ns);
    d_f64(&d, o, "baseline_ns", &j->baseline_ns);
    d_f64(&d, o, "floor_ns", &j->floor_ns);
    d_f64(&d, o, "err_norm", &j->err_norm);
    d_str(&d, o, "family", j->family, sizeof(j->family));
    d_str(&d, o, "schedule", j->schedule, sizeof(j->schedule));
    d_bool(&d, o, "record", &j->record);
    d_str(&d, o, "error", j->error, sizeof(j->error));
    d_failures(&d, o, "failures", j);
    d_f64(&d, o, "compile_s", &j->compile_s);
    d_f64(&d, o, "measure_s", &j->measure_s);
    d_i64(&d, o, "owner", &j->owner, -1);
    return d.rc;
}

static int decode_gpu(const msgpack_object *o, ktune_gpu *g, ktune_error *err)
{
    dec d = {.err = err, .obj = "a GPU"};
    memset(g, 0, sizeof(*g));
    if (!o || o->type != MSGPACK_OBJECT_MAP)
        return ktune_err_from(err, -EPROTO, "ktuned sent a GPU that is not a map");
    char sm[16];
    d_int(&d, o, "index", &g->index, 0);
    d_str(&d, o, "name", g->name, sizeof(g->name));
    d_str(&d, o, "sm", sm, sizeof(sm));
    if (sm[0]) { /* "9.0" */
        char *dot = NULL, *end = NULL;
        long major = strtol(sm, &dot, 10), minor = *dot == '.' ? strtol(dot + 1, &end, 10) : -1;
        if (dot == sm || *dot != '.' || end == dot + 1 || *end || major < 0 || major > 99 ||
            minor < 0 || minor > 99)
            dec_fail(&d, "sm", "a compute capability like \"9.0\"");
        else
            g->sm_major = (int)major, g->sm_minor = (int)minor;
    }
    d_int(&d, o, "sm_count", &g->sm_count, 0);
    d_u64(&d, o, "mem_bytes", &g->mem_bytes);
    d_int(&d, o, "driver_version", &g->driver_version, 0);
    d_int(&d, o, "cuda_version", &g->cuda_version, 0);
    d_str(&d, o, "state", g->state, sizeof(g->state));
    d_u64(&d, o, "job", &g->job);
    d_int(&d, o, "restarts", &g->restarts, 0);
    d_str(&d, o, "error", g->error, sizeof(g->error));
    return d.rc;
}

/* ---- connecting ---- */

/* A client running as root trusts ktuned only where root or the service user created the
 * socket file and listens on it: a path in a directory others may write (/tmp) can be bound
 * first by anyone, whose "daemon" would then answer root's requests (docs/operations.md, "The
 * socket"). SO_PEERCRED names the process that called listen() on what fd reached. */
static int check_trusted(int fd, const char *path, ktune_error *err)
{
    if (geteuid() != 0)
        return 0;
    const char *name = getenv("KTUNE_SERVICE_USER");
    if (!name || !name[0])
        name = KTUNE_SERVICE_USER;
    uid_t service = 0; /* a service user that does not exist: root only */
    struct passwd pw, *found = NULL;
    char pwbuf[2048];
    if (getpwnam_r(name, &pw, pwbuf, sizeof(pwbuf), &found) == 0 && found)
        service = pw.pw_uid;
    struct stat st;
    if (lstat(path, &st) < 0)
        return ktune_err_from(err, -errno, "cannot reach ktuned at %s: %s", path, strerror(errno));
    struct ucred peer;
    socklen_t len = sizeof(peer);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) < 0)
        return ktune_err_from(err, -errno, "cannot reach ktuned at %s: SO_PEERCRED: %s", path,
                              strerror(errno));
    bool file_ok = st.st_uid == 0 || st.st_uid == service;
    bool peer_ok = peer.uid == 0 || peer.uid == service;
    if (file_ok && peer_ok)
        return 0;
    char service_desc[128];
    if (service)
        snprintf(service_desc, sizeof(service_desc), "the service user %s (uid %u)", name,
                 (unsigned)service);
    else
        snprintf(service_desc, sizeof(service_desc), "the service user (no user %s here)", name);
    return ktune_err_from(err, -EPERM,
                          "not trusting %s: %s uid %u, neither root nor %s; a client running as "
                          "root uses only their sockets ($KTUNE_SERVICE_USER names the service "
                          "user)",
                          path,
                          file_ok ? "the process listening on it runs as" : "the file belongs to",
                          (unsigned)(file_ok ? peer.uid : st.st_uid), service_desc);
}

/* A connected, trusted socket to ktuned at path. 0 with *fd, or a negative errno with err. */
static int open_socket(const char *path, int *out_fd, ktune_error *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return ktune_err_from(err, -ENAMETOOLONG,
                              "cannot reach ktuned at %s: a socket path "
                              "has at most %zu bytes",
                              path, sizeof(sa.sun_path) - 1);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ktune_err_from(err, -errno, "cannot reach ktuned at %s: socket: %s", path,
                              strerror(errno));
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    if (rc < 0 && errno == EINTR) {
        /* The connection goes on in the background: wait for it and read its outcome. */
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int so = 0;
        socklen_t sl = sizeof(so);
        while ((rc = poll(&p, 1, (int)(CLIENT_TIMEOUT_S * 1e3))) < 0 && errno == EINTR)
            ;
        if (rc == 0)
            errno = ETIMEDOUT;
        else if (rc > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) == 0)
            errno = so;
        rc = rc > 0 && so == 0 ? 0 : -1;
    }
    if (rc < 0) {
        int e = errno;
        close(fd);
        return ktune_err_from(err, -e, "cannot reach ktuned at %s: %s", path, strerror(e));
    }
    if ((rc = check_trusted(fd, path, err)) < 0) {
        close(fd);
        return rc;
    }
    *out_fd = fd;
    return 0;
}

KTUNE_EXPORT int ktune_connect(const char *socket_path, ktune_client **out, ktune_error *err)
{
    clear_err(err);
    if (!out)
        return ktune_err_from(err, -EINVAL, "ktune_connect: out is NULL");
    *out = NULL;
    const char *path = socket_path && socket_path[0] ? socket_path : ktune_default_socket();
    int fd = -1;
    int rc = open_socket(path, &fd, err);
    if (rc < 0)
        return rc;
    if ((rc = ktune_client_from_fd(fd, path, out, err)) == 0)
        snprintf((*out)->path, sizeof((*out)->path), "%s", path); /* < sun_path: checked */
    return rc;
}

/* The hello exchange on c's connection: c->hello filled, or a negative errno with err saying
 * "cannot reach ktuned at ..." or, when ktuned turned the connection away, so. */
static int say_hello(ktune_client *c, ktune_error *err)
{
    int rc;
    req r;
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    req_begin(&r, c, "hello");
    p_key_str(&r, "client", "libktune " KTUNE_VERSION);
    if ((rc = call(c, &r, &m, err)) < 0) {
        /* err already says what happened; make it a "cannot reach" line, or, when ktuned
         * turned the connection away, say so (the CLI shows this line as it is). */
        if (err) {
            char tmp[sizeof(err->msg)];
            snprintf(tmp, sizeof(tmp), "%s", err->msg);
            if (rc == -EUSERS || rc == -ESHUTDOWN)
                ktune_err_from(err, rc, "ktuned refused the connection: %s; socket %s", tmp,
                               c->what);
            else
                ktune_err_from(err, rc, "cannot reach ktuned at %s: %s", c->what, tmp);
        }
        goto fail;
    }
    dec d = {.err = err, .obj = "a hello reply"};
    int64_t proto = 0;
    d_str(&d, &m.data, "version", c->hello.version, sizeof(c->hello.version));
    d_i64(&d, &m.data, "protocol", &proto, 0);
    d_i64(&d, &m.data, "pid", &c->hello.pid, 0);
    d_i64(&d, &m.data, "uid", &c->hello.uid, -1);
    d_int(&d, &m.data, "gpus", &c->hello.gpus, 0);
    if ((rc = d.rc) < 0)
        goto fail;
    if (proto != 1) {
        rc = ktune_err_from(err, -EPROTO,
                            "ktuned at %s speaks protocol %" PRId64 "; this "
                            "libktune %s speaks protocol 1",
                            c->what, proto, KTUNE_VERSION);
        goto fail;
    }
    c->hello.protocol = (int)proto;
    msgpack_unpacked_destroy(&m);
    req_free(&r);
    return 0;
fail:
    msgpack_unpacked_destroy(&m);
    req_free(&r);
    return rc;
}

/* ktuned closes a connection idle past its idle-timeout (docs/protocol.md, "Connections"):
 * nothing was in flight then, so a client made by ktune_connect that finds its connection closed
 * before it sends a request connects again, once, and the caller never sees the close. */
static int revive(ktune_client *c, ktune_error *err)
{
    char b;
    ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (!c->path[0] || n > 0 || (n < 0 && errno != ECONNRESET))
        return 0; /* open (or not ours to reopen): the request says how it is */
    ktune_error why = {0};
    int fd = -1;
    int rc = open_socket(c->path, &fd, &why);
    if (rc < 0)
        return client_break(c, err, rc, "%s", why.msg);
    close(c->fd);
    c->fd = fd;
    /* a fresh unpacker in place (msgpack-c's keeps a pointer into itself: it cannot be moved);
     * nothing was in flight, so nothing buffered is lost */
    msgpack_unpacker_destroy(&c->up);
    if (!(c->up_live = msgpack_unpacker_init(&c->up, CLIENT_READ_CHUNK)))
        return client_break(c, err, -ENOMEM, "out of memory reconnecting to ktuned at %s", c->what);
    if ((rc = say_hello(c, &why)) < 0)
        return client_break(c, err, rc, "%s", why.msg);
    return 0;
}

int ktune_client_from_fd(int fd, const char *what, ktune_client **out, ktune_error *err)
{
    clear_err(err);
    *out = NULL;
    int rc = 0;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        rc = ktune_err_from(err, -errno, "cannot reach ktuned at %s: fcntl: %s", what,
                            strerror(errno));
        close(fd);
        return rc;
    }
    ktune_client *c = calloc(1, sizeof(*c));
    if (!c || !msgpack_unpacker_init(&c->up, CLIENT_READ_CHUNK)) {
        free(c);
        close(fd);
        return ktune_err_from(err, -ENOMEM, "cannot reach ktuned at %s: out of memory", what);
    }
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&c->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    c->fd = fd;
    c->up_live = true;
    c->next_id = 1;
    c->timeout_s = CLIENT_TIMEOUT_S;
    snprintf(c->what, sizeof(c->what), "%s", what ? what : "(socket)");

    if ((rc = say_hello(c, err)) < 0) {
        ktune_disconnect(c);
        return rc;
    }
    *out = c;
    return 0;
}

const ktune_hello *ktune_client_hello(const ktune_client *c)
{
    return &c->hello;
}

KTUNE_EXPORT void ktune_disconnect(ktune_client *c)
{
    if (!c)
        return;
    close(c->fd);
    if (c->up_live)
        msgpack_unpacker_destroy(&c->up);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

KTUNE_EXPORT void ktune_client_set_timeout(ktune_client *c, double seconds)
{
    if (!c || lock_client(c, "ktune_client_set_timeout", NULL) < 0)
        return;
    c->timeout_s = seconds > 0 && isfinite(seconds) ? seconds : CLIENT_TIMEOUT_S;
    unlock_client(c);
}

/* ---- jobs ---- */

static int valid_precision(const char *p)
{
    return !p || !strcmp(p, "exact") || !strcmp(p, "tf32") || !strcmp(p, "reduced");
}

/* Packs the "graph" and "shapes" arguments. */
static int pack_graph_shapes(req *r, const ktune_graph *g, const ktune_shape *shapes, int n_shapes,
                             const char *fn, ktune_error *err)
{
    p_key(r, "graph");
    if (ops_graph_pack(&r->pk, g->g) < 0)
        return ktune_err_from(err, -ENOMEM, "%s: out of memory packing the graph", fn);
    p_key(r, "shapes");
    r->fail |= msgpack_pack_map(&r->pk, (uint32_t)n_shapes);
    for (int i = 0; i < n_shapes; i++) {
        p_str(r, shapes[i].name);
        r->fail |= msgpack_pack_int64(&r->pk, shapes[i].value);
    }
    return 0;
}

static int check_shapes(const ktune_shape *shapes, int n_shapes, const char *fn, ktune_error *err)
{
    if (n_shapes < 0 || (n_shapes > 0 && !shapes))
        return ktune_err_from(err, -EINVAL, "%s: %d shapes given without an array", fn, n_shapes);
    for (int i = 0; i < n_shapes; i++) {
        if (!shapes[i].name || !shapes[i].name[0])
            return ktune_err_from(err, -EINVAL, "%s: shape %d has no name", fn, i);
        if (shapes[i].value <= 0)
            return ktune_err_from(err, -EINVAL, "%s: shape %s=%" PRId64 " must be positive", fn,
                                  shapes[i].name, shapes[i].value);
        for (int k = 0; k < i; k++)
            if (strcmp(shapes[k].name, shapes[i].name) == 0)
                return ktune_err_from(err, -EINVAL, "%s: shape %s given twice", fn, shapes[i].name);
    }
    return 0;
}

KTUNE_EXPORT int ktune_submit(ktune_client *c, const ktune_graph *g, const ktune_shape *shapes,
                              int n_shapes, const ktune_submit_opts *opts, ktune_job *out,
                              bool *joined, ktune_error *err)
{
    return ktune_submit2(c, g, shapes, n_shapes, opts, 0, out, joined, err);
}

KTUNE_EXPORT int ktune_submit2(ktune_client *c, const ktune_graph *g, const ktune_shape *shapes,
                               int n_shapes, const ktune_submit_opts *opts, unsigned flags,
                               ktune_job *out, bool *joined, ktune_error *err)
{
    clear_err(err);
    static const ktune_submit_opts dflt = KTUNE_SUBMIT_OPTS_INIT;
    const ktune_submit_opts *o = opts ? opts : &dflt;
    int rc;
    if (!c || !g || !out)
        return ktune_err_from(err, -EINVAL, "ktune_submit: client, graph and out are required");
    if ((rc = check_shapes(shapes, n_shapes, "ktune_submit", err)) < 0)
        return rc;
    if (!valid_precision(o->precision))
        return ktune_err_from(err, -EINVAL,
                              "ktune_submit: precision '%s' is not exact, tf32 or "
                              "reduced",
                              o->precision);
    if (o->priority < -100 || o->priority > 100)
        return ktune_err_from(err, -EINVAL, "ktune_submit: priority %d is outside -100..100",
                              o->priority);
    if (o->budget_s > 86400 || isnan(o->budget_s) || isnan(o->tolerance))
        return ktune_err_from(err, -EINVAL,
                              "ktune_submit: budget must be at most 86400 s and "
                              "the tolerance a number");
    if (o->gpu < -1)
        return ktune_err_from(err, -EINVAL, "ktune_submit: gpu %d (-1: any)", o->gpu);
    if (flags & ~(unsigned)(KTUNE_SUBMIT_RETUNE | KTUNE_SUBMIT_REMEASURE))
        return ktune_err_from(err, -EINVAL, "ktune_submit2: unknown flags 0x%x",
                              flags & ~(unsigned)(KTUNE_SUBMIT_RETUNE | KTUNE_SUBMIT_REMEASURE));
    if ((rc = lock_client(c, "ktune_submit", err)) < 0)
        return rc;
    req r;
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    req_begin(&r, c, "submit");
    if ((rc = pack_graph_shapes(&r, g, shapes, n_shapes, "ktune_submit", err)) < 0)
        goto out;
    p_key_str(&r, "precision", o->precision ? o->precision : "exact");
    p_key_f64(&r, "budget_s", o->budget_s > 0 ? o->budget_s : 60.0);
    if (o->tolerance > 0)
        p_key_f64(&r, "tolerance", o->tolerance);
    p_key_i64(&r, "priority", o->priority);
    p_key_i64(&r, "gpu", o->gpu);
    if (o->name)
        p_key_str(&r, "name", o->name);
    /* sent only when asked: a daemon that predates them would ignore them anyway */
    if (flags & KTUNE_SUBMIT_RETUNE)
        p_key_bool(&r, "retune", true);
    if (flags & KTUNE_SUBMIT_REMEASURE)
        p_key_bool(&r, "remeasure", true);
    if ((rc = call(c, &r, &m, err)) < 0)
        goto out;
    if ((rc = decode_job(kt_mp_get(&m.data, "job"), out, err)) < 0)
        goto out;
    if (joined) {
        dec d = {.err = err, .obj = "a submit reply"};
        d_bool(&d, &m.data, "joined", joined);
        rc = d.rc;
    }
out:
    unlock_client(c);
    msgpack_unpacked_destroy(&m);
    req_free(&r);
    return rc;
}

/* status and cancel: {job: id} -> {job: Job}. */
static int job_call(ktune_client *c, const char *op, uint64_t job, ktune_job *out, ktune_error *err)
{
    clear_err(err);
    if (!c || !out)
        return ktune_err_from(err, -EINVAL, "ktune_%s: client and out are required", op);
    int rc = lock_client(c, op, err);
    if (rc < 0)
        return rc;
    req r;
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    req_begin(&r, c, op);
    p_key(&r, "job");
    r.fail |= msgpack_pack_uint64(&r.pk, job);
    if ((rc = call(c, &r, &m, err)) == 0)
        rc = decode_job(kt_mp_get(&m.data, "job"), out, err);
    unlock_client(c);
    msgpack_unpacked_destroy(&m);
    req_free(&r);
    return rc;
}

KTUNE_EXPORT int ktune_status(ktune_client *c, uint64_t job, ktune_job *out, ktune_error *err)
{
    return job_call(c, "status", job, out, err);
}

KTUNE_EXPORT int ktune_cancel(ktune_client *c, uint64_t job, ktune_job *out, ktune_error *err)
{
    return job_call(c, "cancel", job, out, err);
}

static bool job_ended(const ktune_job *j)
{
    return j->state == KTUNE_JOB_DONE || j->state == KTUNE_JOB_FAILED ||
           j->state == KTUNE_JOB_CANCELLED;
}

KTUNE_EXPORT int ktune_watch(ktune_client *c, uint64_t job, ktune_watch_cb cb, void *ctx,
                             ktune_job *final, ktune_error *err)
{
    clear_err(err);
    if (!c || !cb)
        return ktune_err_from(err, -EINVAL, "ktune_watch: client and callback are required");
    int rc = lock_client(c, "ktune_watch", err);
    if (rc < 0)
        return rc;
    req r;
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    ktune_job j;
    req_begin(&r, c, "watch");
    p_key(&r, "job");
    r.fail |= msgpack_pack_uint64(&r.pk, job);
    if ((rc = call(c, &r, &m, err)) < 0 ||
        (rc = decode_job(kt_mp_get(&m.data, "job"), &j, err)) < 0)
        goto out;
    /* The lock stays held while cb runs: a callback that calls back into c gets -EDEADLK. */
    if (final)
        *final = j;
    if (cb(&j, ctx) != 0 || job_ended(&j))
        goto out; /* an "end" event may follow: the next call drops it by its id */
    for (;;) {
        if ((rc = recv_id(c, r.id, "watch", &m, 0, err)) < 0)
            goto out;
        const msgpack_object *ev = kt_mp_get(&m.data, "event");
        bool end = ev && ev->type == MSGPACK_OBJECT_STR && ev->via.str.size == 3 &&
                   memcmp(ev->via.str.ptr, "end", 3) == 0;
        bool progress = ev && ev->type == MSGPACK_OBJECT_STR && ev->via.str.size == 8 &&
                        memcmp(ev->via.str.ptr, "progress", 8) == 0;
        if (!end && !progress) {
            const msgpack_object *ok = kt_mp_get(&m.data, "ok");
            if (ok && ok->type == MSGPACK_OBJECT_BOOLEAN && !ok->via.boolean) {
                rc = error_reply(c, "watch", &m.data, err);
                goto out;
            }
            rc = ktune_err_from(err, -EPROTO,
                                "ktuned at %s sent a watch message that is "
                                "neither a progress nor an end event",
                                c->what);
            goto out;
        }
        if ((rc = decode_job(kt_mp_get(&m.data, "job"), &j, err)) < 0)
            goto out;
        if (j.id != job) {
            rc = ktune_err_from(err, -EPROTO,
                                "ktuned at %s sent an event of job %" PRIu64
                                " to a watch of job %" PRIu64,
                                c->what, j.id, job);
            goto out;
        }
        if (final)
            *final = j;
        if (cb(&j, ctx) != 0 || end)
            goto out;
    }
out:
    unlock_client(c);
    msgpack_unpacked_destroy(&m);
    req_free(&r);
    return rc;
}

KTUNE_EXPORT int ktune_jobs(ktune_client *c, unsigned state_mask, int limit, ktune_job **out,
                            size_t *n, ktune_error *err)
{
    clear_err(err);
    if (!c || !out || !n)
        return ktune_err_from(err, -EINVAL, "ktune_jobs: client, out and n are required");
    *out = NULL;
    *n = 0;
    unsigned all = (1u << (KTUNE_JOB_CANCELLED + 1)) - 1;
    if (state_mask & ~all)
        return ktune_err_from(err, -EINVAL, "ktune_jobs: state mask 0x%x has unknown bits",
                              state_mask);
    int rc = lock_client(c, "ktune_jobs", err);
    if (rc < 0)
        return rc;
    req r;
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    ktune_job *jobs = NULL;
    req_begin(&r, c, "jobs");
    if (state_mask) {
        p_key(&r, "state");
        r.fail |= msgpack_pack_array(&r.pk, (uint32_t)__builtin_popcount(state_mask));
        for (int s = 0; s <= KTUNE_JOB_CANCELLED; s++)
            if (state_mask & (1u << s))
                p_str(&r, ktune_job_state_name((ktune_job_state)s));
    }
    if (limit > 0)
        p_key_i64(&r, "limit", limit);
    if ((rc = call(c, &r, &m, err)) < 0)
        goto out;
    const msgpack_object *arr = kt_mp_get(&m.data, "jobs");
    if (!arr || arr->type != MSGPACK_OBJECT_ARRAY) {
        rc = ktune_err_from(err, -EPROTO, "ktuned at %s answered 'jobs' without a jobs array",
                            c->what);
        goto out;
    }
    size_t cnt = arr->via.array.size;
    if (cnt && !(jobs = calloc(cnt, sizeof(*jobs)))) {
        rc = ktune_err_from(err, -ENOMEM, "ktune_jobs: out of memory for %zu jobs", cnt);
        goto out;
    }
    for (size_t i = 0; i < cnt; i++)
        if ((rc = decode_job(&arr->via.array.ptr[i], &jobs[i], err)) < 0)
            goto out;
    *out = jobs;
    *n = cnt;
    jobs = NULL;
out:
    unlock_client(c);
    free(jobs);
    msgpack_unpacked_destroy(&m);
    req_free(&r);
    return rc;
}

/* ---- the daemon ---- */

/* A request with no arguments; the reply stays in *m. */
static int plain_call(ktune_client *c, const char *op, msgpack_unpacked *m, ktune_error *err)
{
    int rc = lock_client(c, op, err);
    if (rc < 0)
        return rc;
    req r;
    req_begin(&r, c, op);
    rc = call(c, &r, m, err);
    unlock_client(c);
    req_free(&r);
    return rc;
}

KTUNE_EXPORT int ktune_gpus(ktune_client *c, ktune_gpu **out, size_t *n, char *note,
                            ktune_error *err)
{
    clear_err(err);
    if (!c || !out || !n)
        return ktune_err_from(err, -EINVAL, "ktune_gpus: client, out and n are required");
    *out = NULL;
    *n = 0;
    if (note)
        note[0] = '\0';
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    ktune_gpu *gpus = NULL;
    int rc = plain_call(c, "gpus", &m, err);
    if (rc < 0)
        goto out;
    const msgpack_object *arr = kt_mp_get(&m.data, "gpus");
    if (!arr || arr->type != MSGPACK_OBJECT_ARRAY) {
        rc = ktune_err_from(err, -EPROTO, "ktuned at %s answered 'gpus' without a gpus array",
                            c->what);
        goto out;
    }
    size_t cnt = arr->via.array.size;
    if (cnt && !(gpus = calloc(cnt, sizeof(*gpus)))) {
        rc = ktune_err_from(err, -ENOMEM, "ktune_gpus: out of memory");
        goto out;
    }
    for (size_t i = 0; i < cnt; i++)
        if ((rc = decode_gpu(&arr->via.array.ptr[i], &gpus[i], err)) < 0)
            goto out;
    if (note) {
        dec d = {.err = err, .obj = "a gpus reply"};
        d_str(&d, &m.data, "note", note, 256);
        if ((rc = d.rc) < 0)
            goto out;
    }
    *out = gpus;
    *n = cnt;
    gpus = NULL;
out:
    free(gpus);
    msgpack_unpacked_destroy(&m);
    return rc;
}

KTUNE_EXPORT int ktune_stats_get(ktune_client *c, ktune_stats *out, ktune_error *err)
{
    clear_err(err);
    if (!c || !out)
        return ktune_err_from(err, -EINVAL, "ktune_stats_get: client and out are required");
    memset(out, 0, sizeof(*out));
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    int rc = plain_call(c, "stats", &m, err);
    if (rc < 0)
        goto out;
    dec d = {.err = err, .obj = "stats"};
    const msgpack_object *o = &m.data;
    d_f64(&d, o, "uptime_s", &out->uptime_s);
    d_int(&d, o, "clients", &out->clients, 0);
    d_u64(&d, o, "requests", &out->requests);
    d_int(&d, o, "gpus", &out->gpus, 0);
    d_u64(&d, o, "rss_bytes", &out->rss_bytes);
    const msgpack_object *jobs = kt_mp_get(o, "jobs");
    if (jobs && jobs->type != MSGPACK_OBJECT_MAP)
        dec_fail(&d, "jobs", "a map");
    for (int s = 0; s <= KTUNE_JOB_CANCELLED; s++)
        d_int(&d, jobs, ktune_job_state_name((ktune_job_state)s), &out->jobs[s], 0);
    const msgpack_object *cache = kt_mp_get(o, "cache");
    if (cache && cache->type != MSGPACK_OBJECT_MAP)
        dec_fail(&d, "cache", "a map");
    d_str(&d, cache, "path", out->cache_path, sizeof(out->cache_path));
    d_u64(&d, cache, "records", &out->cache_records);
    d_u64(&d, cache, "keys", &out->cache_keys);
    d_u64(&d, cache, "trials", &out->cache_trials);
    d_u64(&d, cache, "map_size", &out->cache_map_size);
    d_u64(&d, cache, "map_used", &out->cache_map_used);
    rc = d.rc;
out:
    msgpack_unpacked_destroy(&m);
    return rc;
}

KTUNE_EXPORT int ktune_lookup_remote(ktune_client *c, const ktune_graph *g,
                                     const ktune_shape *shapes, int n_shapes, const char *precision,
                                     int gpu, bool *found, ktune_record_info *out, char **source,
                                     ktune_error *err)
{
    clear_err(err);
    if (source)
        *source = NULL;
    if (!c || !g || !found || !out)
        return ktune_err_from(err, -EINVAL,
                              "ktune_lookup_remote: client, graph, found and out "
                              "are required");
    *found = false;
    memset(out, 0, sizeof(*out));
    int rc = check_shapes(shapes, n_shapes, "ktune_lookup_remote", err);
    if (rc < 0)
        return rc;
    if (!valid_precision(precision))
        return ktune_err_from(err, -EINVAL,
                              "ktune_lookup_remote: precision '%s' is not exact, "
                              "tf32 or reduced",
                              precision);
    if (gpu < 0)
        return ktune_err_from(err, -EINVAL, "ktune_lookup_remote: gpu %d is not an index", gpu);
    if ((rc = lock_client(c, "ktune_lookup_remote", err)) < 0)
        return rc;
    req r;
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    req_begin(&r, c, "lookup");
    if ((rc = pack_graph_shapes(&r, g, shapes, n_shapes, "ktune_lookup_remote", err)) < 0)
        goto out;
    p_key_str(&r, "precision", precision ? precision : "exact");
    p_key_i64(&r, "gpu", gpu);
    p_key(&r, "source");
    r.fail |= source ? msgpack_pack_true(&r.pk) : msgpack_pack_false(&r.pk);
    if ((rc = call(c, &r, &m, err)) < 0)
        goto out;
    dec d = {.err = err, .obj = "a lookup reply"};
    d_bool(&d, &m.data, "found", found);
    if (d.rc || !*found) {
        rc = d.rc;
        goto out;
    }
    const msgpack_object *rec = kt_mp_get(&m.data, "record");
    if (!rec || rec->type != MSGPACK_OBJECT_MAP) {
        rc = ktune_err_from(err, -EPROTO, "ktuned at %s found a record but sent none", c->what);
        goto out;
    }
    d.obj = "a record";
    d_str(&d, rec, "family", out->family, sizeof(out->family));
    d_str(&d, rec, "schedule", out->schedule, sizeof(out->schedule));
    d_f64(&d, rec, "time_ns", &out->time_ns);
    d_f64(&d, rec, "p10_ns", &out->p10_ns);
    d_f64(&d, rec, "p90_ns", &out->p90_ns);
    d_f64(&d, rec, "err_norm", &out->err_norm);
    d_f64(&d, rec, "tolerance", &out->tolerance);
    d_f64(&d, rec, "cublaslt_ns", &out->cublaslt_ns);
    d_u64(&d, rec, "workspace_bytes", &out->workspace_bytes);
    d_int(&d, rec, "kernels", &out->n_kernels, 0);
    d_i64(&d, rec, "created", &out->created, 0);
    d_str(&d, rec, "gpu", out->gpu, sizeof(out->gpu));
    if ((rc = d.rc) < 0)
        goto out;
    if (source) {
        const msgpack_object *s = kt_mp_get(&m.data, "source");
        if (s && s->type != MSGPACK_OBJECT_STR && s->type != MSGPACK_OBJECT_NIL) {
            rc = ktune_err_from(err, -EPROTO,
                                "ktuned sent a lookup reply whose 'source' is not "
                                "a string");
            goto out;
        }
        size_t len = s && s->type == MSGPACK_OBJECT_STR ? s->via.str.size : 0;
        if (!(*source = malloc(len + 1))) {
            rc = ktune_err_from(err, -ENOMEM,
                                "ktune_lookup_remote: out of memory for the "
                                "source");
            goto out;
        }
        if (len)
            memcpy(*source, s->via.str.ptr, len);
        (*source)[len] = '\0';
    }
out:
    if (rc < 0)
        *found = false;
    unlock_client(c);
    msgpack_unpacked_destroy(&m);
    req_free(&r);
    return rc;
}
