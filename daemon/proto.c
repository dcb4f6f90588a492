/* The envelope of a request, the dispatch table lookup, argument checks with precise messages,
 * and the packing of replies, events, Job and GPU objects. docs/protocol.md. */
#include "kd.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- packing ---- */

void kd_pack_job(msgpack_packer *pk, const kd_job *kj)
{
    const cache_job *j = &kj->j;
    char sig[2 * OPS_SIG_BYTES + 1];
    kt_hex(j->sig, OPS_SIG_BYTES, sig);
    int nfail = 0;
    for (int s = 1; s < SRCH_STATUS_COUNT; s++)
        nfail += kj->failures[s] > 0;
    msgpack_pack_map(pk, 30);
    kt_mp_pack_ku64(pk, "job", j->id);
    kt_mp_pack_ku64(pk, "owner", j->owner);
    kt_mp_pack_kstr(pk, "name", j->name);
    kt_mp_pack_kstr(pk, "state", cache_job_state_name(j->state));
    kt_mp_pack_ki64(pk, "priority", j->priority);
    /* where it runs or ran; while queued, where it is pinned (-1: anywhere) */
    kt_mp_pack_ki64(pk, "gpu",
                    j->state != CACHE_JOB_QUEUED && kj->ran_on >= 0 ? kj->ran_on : j->gpu);
    kt_mp_pack_kstr(pk, "signature", sig);
    kt_mp_pack_str(pk, "shapes");
    msgpack_pack_map(pk, (size_t)j->n_shapes);
    for (int i = 0; i < j->n_shapes; i++)
        kt_mp_pack_ki64(pk, j->shapes[i].name, j->shapes[i].value);
    kt_mp_pack_kstr(pk, "precision", ops_precision_name(j->precision));
    kt_mp_pack_kf64(pk, "budget_s", j->budget_s);
    kt_mp_pack_kf64(pk, "tolerance", j->tolerance);
    kt_mp_pack_ki64(pk, "submitted", j->submitted);
    kt_mp_pack_ki64(pk, "started", j->started);
    kt_mp_pack_ki64(pk, "finished", j->finished);
    kt_mp_pack_kstr(pk, "phase", kj->phase);
    kt_mp_pack_ki64(pk, "trials", j->trials);
    kt_mp_pack_ki64(pk, "measured", j->measured);
    kt_mp_pack_ki64(pk, "resumed", j->resumed);
    kt_mp_pack_kf64(pk, "elapsed_s", j->elapsed_s);
    kt_mp_pack_kf64(pk, "best_ns", j->best_ns);
    kt_mp_pack_kf64(pk, "baseline_ns", j->baseline_ns);
    kt_mp_pack_kf64(pk, "floor_ns", j->floor_ns);
    kt_mp_pack_kf64(pk, "err_norm", j->err_norm);
    kt_mp_pack_kstr(pk, "family", j->family);
    kt_mp_pack_kstr(pk, "schedule", j->schedule);
    kt_mp_pack_kbool(pk, "record", j->record);
    kt_mp_pack_str(pk, "failures");
    msgpack_pack_map(pk, (size_t)nfail);
    for (int s = 1; s < SRCH_STATUS_COUNT; s++)
        if (kj->failures[s] > 0)
            kt_mp_pack_ki64(pk, srch_status_str((srch_status)s), kj->failures[s]);
    kt_mp_pack_kf64(pk, "compile_s", j->compile_s);
    kt_mp_pack_kf64(pk, "measure_s", j->measure_s);
    kt_mp_pack_kstr(pk, "error", j->error);
}

void kd_pack_gpu(msgpack_packer *pk, const kd_gpu *g)
{
    char sm[16];
    snprintf(sm, sizeof(sm), "%d.%d", g->fp.sm_major, g->fp.sm_minor);
    msgpack_pack_map(pk, 11);
    kt_mp_pack_ki64(pk, "index", g->index);
    kt_mp_pack_kstr(pk, "name", g->fp.name);
    kt_mp_pack_kstr(pk, "sm", g->fp.name[0] ? sm : "");
    kt_mp_pack_ki64(pk, "sm_count", g->fp.sm_count);
    kt_mp_pack_ku64(pk, "mem_bytes", g->fp.mem_bytes);
    kt_mp_pack_ki64(pk, "driver_version", g->fp.driver_version);
    kt_mp_pack_ki64(pk, "cuda_version", g->fp.cuda_version);
    kt_mp_pack_kstr(pk, "state", kd_gpu_state_name(g->state));
    kt_mp_pack_ku64(pk, "job", g->job);
    kt_mp_pack_ki64(pk, "restarts", g->restarts);
    kt_mp_pack_kstr(pk, "error", g->error);
}

void kd_send_event(kd_conn *c, uint64_t id, const char *event, const kd_job *j)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    kt_mp_pack_ku64(&pk, "id", id);
    kt_mp_pack_kstr(&pk, "event", event);
    kt_mp_pack_str(&pk, "job");
    kd_pack_job(&pk, j);
    kd_conn_send(c, &sb);
    msgpack_sbuffer_destroy(&sb);
}

/* ---- arguments ---- */

int kd_fail(kd_req *r, int code, const char *fmt, ...)
{
    char msg[sizeof(r->err.msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return kt_err_set(&r->err, code, "%s: %s", r->op, msg);
}

const msgpack_object *kd_arg(const kd_req *r, const char *key)
{
    const msgpack_object *v = kt_mp_get(r->msg, key);
    return v && v->type != MSGPACK_OBJECT_NIL ? v : NULL;
}

int kd_arg_uint(kd_req *r, const char *key, bool required, uint64_t def, uint64_t *out)
{
    const msgpack_object *v = kd_arg(r, key);
    if (!v) {
        if (required)
            return kd_fail(r, -EINVAL, "'%s' is missing", key);
        *out = def;
        return 0;
    }
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return kd_fail(r, -EINVAL, "'%s' must be an unsigned integer", key);
    *out = v->via.u64;
    return 0;
}

int kd_arg_int(kd_req *r, const char *key, int64_t lo, int64_t hi, int64_t def, int64_t *out)
{
    const msgpack_object *v = kd_arg(r, key);
    if (!v) {
        *out = def;
        return 0;
    }
    int64_t x;
    if (!kt_mp_i64(v, &x))
        return kd_fail(r, -EINVAL, "'%s' must be an integer in %lld..%lld", key, (long long)lo,
                       (long long)hi);
    if (x < lo || x > hi)
        return kd_fail(r, -EINVAL, "'%s' must be an integer in %lld..%lld, not %lld", key,
                       (long long)lo, (long long)hi, (long long)x);
    *out = x;
    return 0;
}

int kd_arg_num(kd_req *r, const char *key, double lo, double hi, double def, double *out)
{
    const msgpack_object *v = kd_arg(r, key);
    if (!v) {
        *out = def;
        return 0;
    }
    double x;
    if (v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32)
        x = v->via.f64;
    else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        x = (double)v->via.u64;
    else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        x = (double)v->via.i64;
    else
        return kd_fail(r, -EINVAL, "'%s' must be a number in %g..%g", key, lo, hi);
    if (!isfinite(x) || x < lo || x > hi)
        return kd_fail(r, -EINVAL, "'%s' must be a number in %g..%g", key, lo, hi);
    *out = x;
    return 0;
}

int kd_arg_bool(kd_req *r, const char *key, bool def, bool *out)
{
    const msgpack_object *v = kd_arg(r, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (v->type != MSGPACK_OBJECT_BOOLEAN)
        return kd_fail(r, -EINVAL, "'%s' must be a boolean", key);
    *out = v->via.boolean;
    return 0;
}

int kd_arg_str(kd_req *r, const char *key, char *buf, size_t cap, const char *def)
{
    const msgpack_object *v = kd_arg(r, key);
    if (!v) {
        snprintf(buf, cap, "%s", def ? def : "");
        return 0;
    }
    if (v->type != MSGPACK_OBJECT_STR)
        return kd_fail(r, -EINVAL, "'%s' must be a string", key);
    if (v->via.str.size >= cap)
        return kd_fail(r, -EINVAL, "'%s' must be shorter than %zu bytes", key, cap);
    /* an empty string may come with a NULL ptr: no mem* call on it */
    if (v->via.str.size && memchr(v->via.str.ptr, '\0', v->via.str.size))
        return kd_fail(r, -EINVAL, "'%s' must not contain NUL bytes", key);
    if (v->via.str.size)
        memcpy(buf, v->via.str.ptr, v->via.str.size);
    buf[v->via.str.size] = '\0';
    return 0;
}

msgpack_packer *kd_field(kd_req *r, const char *key)
{
    r->n_fields++;
    kt_mp_pack_str(&r->pk, key);
    return &r->pk;
}

/* ---- replies ---- */

static const char *errno_name(int code)
{
    const char *n = strerrorname_np(code < 0 ? -code : code);
    return n ? n : "EIO";
}

void kd_pack_error_reply(msgpack_sbuffer *sb, uint64_t id, const char *code, const char *msg)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    kt_mp_pack_ku64(&pk, "id", id);
    kt_mp_pack_kbool(&pk, "ok", false);
    kt_mp_pack_str(&pk, "error");
    msgpack_pack_map(&pk, 2);
    kt_mp_pack_kstr(&pk, "code", code);
    kt_mp_pack_kstr(&pk, "msg", msg);
}

static void send_error(kd_conn *c, uint64_t id, int code, const char *msg)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    kd_pack_error_reply(&sb, id, errno_name(code), msg);
    kd_conn_send(c, &sb);
    msgpack_sbuffer_destroy(&sb);
}

static void send_ok(kd_req *r)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2 + r->n_fields);
    kt_mp_pack_ku64(&pk, "id", r->id);
    kt_mp_pack_kbool(&pk, "ok", true);
    if (r->body.size && msgpack_sbuffer_write(&sb, r->body.data, r->body.size) != 0) {
        msgpack_sbuffer_destroy(&sb);
        send_error(r->c, r->id, -ENOMEM, "out of memory writing the reply");
        return;
    }
    kd_conn_send(r->c, &sb);
    msgpack_sbuffer_destroy(&sb);
}

void kd_dispatch(kd_conn *c, const msgpack_object *msg, const uint8_t *raw, size_t raw_len,
                 kd_prep *prep)
{
    kd_daemon *d = c->d;
    d->requests++;
    kd_req r = {
        .d = d, .c = c, .op = "request", .msg = msg, .raw = raw, .raw_len = raw_len, .prep = prep};
    /* the envelope, before the body */
    const msgpack_object *id = kt_mp_get(msg, "id"), *v = kt_mp_get(msg, "v"),
                         *op = kt_mp_get(msg, "op");
    if (!id || id->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        send_error(c, 0, -EINVAL, "request: 'id' must be an unsigned integer");
        return;
    }
    r.id = id->via.u64;
    if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 != 1) {
        send_error(c, r.id, -EPROTO, "request: protocol version 'v' must be 1");
        return;
    }
    if (!op || op->type != MSGPACK_OBJECT_STR) {
        send_error(c, r.id, -EINVAL, "request: 'op' must be a string");
        return;
    }
    const kd_op *o = kd_ops;
    for (; o->name; o++)
        if (kt_mp_str_is(op, o->name))
            break;
    if (!o->name) {
        char m[160], esc[KT_ESC_MAX];
        snprintf(m, sizeof(m), "request: unknown op '%s'",
                 kt_escape(esc, sizeof(esc), op->via.str.ptr, op->via.str.size, 0));
        send_error(c, r.id, -ENOSYS, m);
        return;
    }
    r.op = o->name;
    if (prep && strcmp(prep->op, o->name) != 0)
        r.prep = NULL; /* prepared for another op: the handler does its own */
    if ((o->flags & KD_OP_REFUSED_STOPPING) && d->stopping) {
        char m[160];
        snprintf(m, sizeof(m), "%s: ktuned is shutting down", o->name);
        send_error(c, r.id, -ESHUTDOWN, m);
        return;
    }
    msgpack_sbuffer_init(&r.body);
    msgpack_packer_init(&r.pk, &r.body, msgpack_sbuffer_write);
    int rc = o->fn(&r);
    if (rc < 0) {
        kt_log_debug(KD_LOG_SERVER, "connection %llu: %s", (unsigned long long)c->serial,
                     r.err.msg);
        send_error(c, r.id, rc, r.err.msg[0] ? r.err.msg : "failed");
    } else {
        send_ok(&r);
        if (r.end_job)
            kd_send_event(c, r.id, "end", r.end_job);
    }
    msgpack_sbuffer_destroy(&r.body);
}
