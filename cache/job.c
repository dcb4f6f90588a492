/* The job journal: the daemon's jobs in the `jobs` database, keyed by the id as 8 big-endian bytes
 * (so a cursor walks them in submission order). A value is a canonical msgpack map followed by
 * SHA-256 of the map, like kernel records (record.c); docs/formats.md (part 3) lists the fields.
 * A value that fails its checksum or does not decode is reported and skipped, never returned. */
#include "internal.h"
#include "ops/ops.h"

#include <inttypes.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_JOB_VERSION 1 /* the "v" field of a stored job */
#define JOB_KEY_BYTES     8

static const char *const job_state_names[CACHE_JOB_STATE_COUNT] = {"queued", "running", "done",
                                                                   "failed", "cancelled"};

const char *cache_job_state_name(cache_job_state s)
{
    return (unsigned)s < CACHE_JOB_STATE_COUNT ? job_state_names[s] : NULL;
}

int cache_job_state_from_name(const char *name, cache_job_state *out)
{
    for (int i = 0; name && i < CACHE_JOB_STATE_COUNT; i++) {
        if (strcmp(name, job_state_names[i]) == 0) {
            *out = (cache_job_state)i;
            return 0;
        }
    }
    return -EINVAL;
}

void cache_job_free(cache_job *j)
{
    if (!j)
        return;
    free(j->graph);
    memset(j, 0, sizeof(*j));
}

static void job_key(uint64_t id, uint8_t key[JOB_KEY_BYTES])
{
    for (int i = 0; i < JOB_KEY_BYTES; i++)
        key[i] = (uint8_t)(id >> (8 * (JOB_KEY_BYTES - 1 - i)));
}

static uint64_t job_key_id(const uint8_t *key)
{
    uint64_t id = 0;
    for (int i = 0; i < JOB_KEY_BYTES; i++)
        id = id << 8 | key[i];
    return id;
}

/* ---- encoding ---- */

static bool bounded_str(const char *s, size_t cap)
{
    return strnlen(s, cap) < cap;
}

static int check_job(const cache_job *j, kt_err *err)
{
    if (j->id == 0)
        return kt_err_set(err, -EINVAL, "job: id 0 is reserved");
    if (!cache_job_state_name(j->state))
        return kt_err_set(err, -EINVAL, "job %" PRIu64 ": bad state %d", j->id, (int)j->state);
    if (j->priority < -100 || j->priority > 100)
        return kt_err_set(err, -EINVAL, "job %" PRIu64 ": priority %d outside -100..100", j->id,
                          (int)j->priority);
    if ((unsigned)j->precision > OPS_PREC_REDUCED)
        return kt_err_set(err, -EINVAL, "job %" PRIu64 ": bad precision %d", j->id,
                          (int)j->precision);
    if (j->n_shapes < 0 || j->n_shapes > CACHE_MAX_SHAPES)
        return kt_err_set(err, -EINVAL, "job %" PRIu64 ": %d shapes (at most %d)", j->id,
                          j->n_shapes, CACHE_MAX_SHAPES);
    for (int i = 0; i < j->n_shapes; i++)
        if (!bounded_str(j->shapes[i].name, sizeof(j->shapes[i].name)))
            return kt_err_set(err, -EINVAL, "job %" PRIu64 ": shape %d name too long", j->id, i);
    if (j->n_failures < 0 || j->n_failures > CACHE_JOB_FAILURE_KINDS)
        return kt_err_set(err, -EINVAL, "job %" PRIu64 ": %d failure classes (at most %d)", j->id,
                          j->n_failures, CACHE_JOB_FAILURE_KINDS);
    for (int i = 0; i < j->n_failures; i++)
        if (!bounded_str(j->failures[i].name, sizeof(j->failures[i].name)))
            return kt_err_set(err, -EINVAL, "job %" PRIu64 ": failure class name too long", j->id);
    if (!bounded_str(j->name, sizeof(j->name)) || !bounded_str(j->family, sizeof(j->family)) ||
        !bounded_str(j->schedule, sizeof(j->schedule)) || !bounded_str(j->error, sizeof(j->error)))
        return kt_err_set(err, -EINVAL, "job %" PRIu64 ": a text field is not terminated", j->id);
    if (j->graph_len && !j->graph)
        return kt_err_set(err, -EINVAL, "job %" PRIu64 ": graph length without data", j->id);
    const double nums[] = {j->tolerance, j->budget_s, j->elapsed_s,
                           j->best_ns,   j->baseline_ns, j->err_norm};
    for (size_t i = 0; i < KT_ARRAY_LEN(nums); i++)
        if (!isfinite(nums[i]) || nums[i] < 0)
            return kt_err_set(err, -EINVAL, "job %" PRIu64 ": times and errors must be finite and "
                              ">= 0", j->id);
    return 0;
}

static int pk_str(msgpack_packer *pk, const char *s)
{
    return msgpack_pack_str_with_body(pk, s, strlen(s));
}

static int pk_key_str(msgpack_packer *pk, const char *k, const char *s)
{
    return pk_str(pk, k) || pk_str(pk, s);
}

static int pk_key_int(msgpack_packer *pk, const char *k, int64_t v)
{
    return pk_str(pk, k) || msgpack_pack_int64(pk, v);
}

static int pk_key_f64(msgpack_packer *pk, const char *k, double v)
{
    return pk_str(pk, k) || msgpack_pack_double(pk, v);
}

#define JOB_FIELDS 27

static int pack_job(msgpack_packer *pk, const cache_job *j)
{
    int e = msgpack_pack_map(pk, JOB_FIELDS);
    e = e || pk_key_int(pk, "v", CACHE_JOB_VERSION);
    e = e || pk_str(pk, "id") || msgpack_pack_uint64(pk, j->id);
    e = e || pk_key_str(pk, "state", job_state_names[j->state]);
    e = e || pk_key_int(pk, "priority", j->priority);
    e = e || pk_key_int(pk, "gpu", j->gpu);
    e = e || pk_key_str(pk, "name", j->name);
    e = e || pk_str(pk, "sig") || msgpack_pack_bin_with_body(pk, j->sig, OPS_SIG_BYTES);
    e = e || pk_str(pk, "shapes") || msgpack_pack_array(pk, (size_t)j->n_shapes);
    for (int i = 0; !e && i < j->n_shapes; i++)
        e = msgpack_pack_array(pk, 2) || pk_str(pk, j->shapes[i].name) ||
            msgpack_pack_int64(pk, j->shapes[i].value);
    e = e || pk_key_str(pk, "precision", ops_precision_name(j->precision));
    e = e || pk_key_f64(pk, "tolerance", j->tolerance);
    e = e || pk_key_f64(pk, "budget", j->budget_s);
    e = e || pk_str(pk, "graph") || msgpack_pack_bin_with_body(pk, j->graph, j->graph_len);
    e = e || pk_key_int(pk, "submitted", j->submitted);
    e = e || pk_key_int(pk, "started", j->started);
    e = e || pk_key_int(pk, "finished", j->finished);
    e = e || pk_key_f64(pk, "elapsed", j->elapsed_s);
    e = e || pk_key_int(pk, "trials", j->trials);
    e = e || pk_key_int(pk, "measured", j->measured);
    e = e || pk_key_int(pk, "resumed", j->resumed);
    e = e || pk_key_f64(pk, "best_ns", j->best_ns);
    e = e || pk_key_f64(pk, "baseline_ns", j->baseline_ns);
    e = e || pk_key_f64(pk, "err_norm", j->err_norm);
    e = e || pk_key_str(pk, "family", j->family);
    e = e || pk_key_str(pk, "schedule", j->schedule);
    e = e || pk_str(pk, "record") || (j->record ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
    e = e || pk_key_str(pk, "error", j->error);
    e = e || pk_str(pk, "failures") || msgpack_pack_map(pk, (size_t)j->n_failures);
    for (int i = 0; !e && i < j->n_failures; i++)
        e = pk_key_int(pk, j->failures[i].name, j->failures[i].count);
    return e ? -ENOMEM : 0;
}

/* The stored form: map, then SHA-256 of the map. *out malloc'd. */
static int encode_job(const cache_job *j, uint8_t **out, size_t *len, kt_err *err)
{
    int rc = check_job(j, err);
    if (rc < 0)
        return rc;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    uint8_t digest[CACHE_CHECKSUM_BYTES];
    if (pack_job(&pk, j) < 0)
        goto oom;
    ops_sha256(sb.data, sb.size, digest);
    if (msgpack_sbuffer_write(&sb, (const char *)digest, sizeof(digest)) != 0)
        goto oom;
    *len = sb.size;
    *out = (uint8_t *)msgpack_sbuffer_release(&sb);
    return 0;
oom:
    msgpack_sbuffer_destroy(&sb);
    return kt_err_set(err, -ENOMEM, "out of memory encoding job %" PRIu64, j->id);
}

/* ---- decoding ---- */

#define BAD(...) kt_err_set(err, -EBADMSG, __VA_ARGS__)

static bool obj_is(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

static int get_int(const msgpack_object *o, int64_t lo, int64_t hi, int64_t *out, const char *what,
                   kt_err *err)
{
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= (uint64_t)INT64_MAX)
        v = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        v = o->via.i64;
    else
        return BAD("job field '%s': expected an integer", what);
    if (v < lo || v > hi)
        return BAD("job field '%s': %" PRId64 " out of range", what, v);
    *out = v;
    return 0;
}

static int get_f64(const msgpack_object *o, double *out, const char *what, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_FLOAT64 && o->type != MSGPACK_OBJECT_FLOAT32)
        return BAD("job field '%s': expected a float", what);
    if (!isfinite(o->via.f64) || o->via.f64 < 0)
        return BAD("job field '%s': expected a finite number >= 0", what);
    *out = o->via.f64;
    return 0;
}

static int get_str(const msgpack_object *o, char *buf, size_t cap, const char *what, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap)
        return BAD("job field '%s': expected a string shorter than %zu bytes", what, cap);
    memcpy(buf, o->via.str.ptr, o->via.str.size);
    buf[o->via.str.size] = '\0';
    return 0;
}

static int get_shapes(const msgpack_object *o, cache_job *j, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > CACHE_MAX_SHAPES)
        return BAD("job field 'shapes': expected at most %d pairs", CACHE_MAX_SHAPES);
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *p = &o->via.array.ptr[i];
        if (p->type != MSGPACK_OBJECT_ARRAY || p->via.array.size != 2)
            return BAD("job field 'shapes': expected [name, value] pairs");
        cache_bound *b = &j->shapes[i];
        int rc = get_str(&p->via.array.ptr[0], b->name, sizeof(b->name), "shapes", err);
        if (rc == 0)
            rc = get_int(&p->via.array.ptr[1], 1, INT64_MAX, &b->value, "shapes", err);
        if (rc < 0)
            return rc;
        j->n_shapes = (int)i + 1;
    }
    return 0;
}

static int get_failures(const msgpack_object *o, cache_job *j, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size > CACHE_JOB_FAILURE_KINDS)
        return BAD("job field 'failures': expected a map of at most %d classes",
                   CACHE_JOB_FAILURE_KINDS);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        struct cache_job_failure *f = &j->failures[i];
        int64_t n = 0;
        int rc = get_str(&o->via.map.ptr[i].key, f->name, sizeof(f->name), "failures", err);
        if (rc == 0)
            rc = get_int(&o->via.map.ptr[i].val, 0, INT32_MAX, &n, "failures", err);
        if (rc < 0)
            return rc;
        f->count = (int32_t)n;
        j->n_failures = (int)i + 1;
    }
    return 0;
}

static const char *const job_fields[JOB_FIELDS] = {
    "v",       "id",       "state",       "priority", "gpu",      "name",     "sig",
    "shapes",  "precision", "tolerance",  "budget",   "graph",    "submitted", "started",
    "finished", "elapsed",  "trials",     "measured", "resumed",  "best_ns",  "baseline_ns",
    "err_norm", "family",   "schedule",   "record",   "error",    "failures"};

static int job_field(int f, const msgpack_object *v, cache_job *j, kt_err *err)
{
    int64_t n = 0;
    char word[16];
    int rc = 0;
    switch (f) {
    case 0:
        if ((rc = get_int(v, 0, INT32_MAX, &n, "v", err)) < 0)
            return rc;
        return n == CACHE_JOB_VERSION ? 0
                                      : BAD("job version %" PRId64 " is not supported (this "
                                            "build reads %d)",
                                            n, CACHE_JOB_VERSION);
    case 1:
        if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 == 0)
            return BAD("job field 'id': expected a positive integer");
        j->id = v->via.u64;
        return 0;
    case 2:
        if ((rc = get_str(v, word, sizeof(word), "state", err)) < 0)
            return rc;
        return cache_job_state_from_name(word, &j->state) == 0
                   ? 0
                   : BAD("job field 'state': unknown value '%s'", word);
    case 3:
        rc = get_int(v, -100, 100, &n, "priority", err);
        j->priority = (int32_t)n;
        return rc;
    case 4:
        rc = get_int(v, -1, INT32_MAX, &n, "gpu", err);
        j->gpu = (int32_t)n;
        return rc;
    case 5:
        return get_str(v, j->name, sizeof(j->name), "name", err);
    case 6:
        if (v->type != MSGPACK_OBJECT_BIN || v->via.bin.size != OPS_SIG_BYTES)
            return BAD("job field 'sig': expected %d bytes", OPS_SIG_BYTES);
        memcpy(j->sig, v->via.bin.ptr, OPS_SIG_BYTES);
        return 0;
    case 7:
        return get_shapes(v, j, err);
    case 8:
        if ((rc = get_str(v, word, sizeof(word), "precision", err)) < 0)
            return rc;
        return ops_precision_from_name(word, &j->precision) == 0
                   ? 0
                   : BAD("job field 'precision': unknown value '%s'", word);
    case 9:
        return get_f64(v, &j->tolerance, "tolerance", err);
    case 10:
        return get_f64(v, &j->budget_s, "budget", err);
    case 11:
        if (v->type != MSGPACK_OBJECT_BIN)
            return BAD("job field 'graph': expected bytes");
        free(j->graph);
        j->graph = malloc(v->via.bin.size ? v->via.bin.size : 1);
        if (!j->graph)
            return kt_err_set(err, -ENOMEM, "out of memory decoding a job");
        memcpy(j->graph, v->via.bin.ptr, v->via.bin.size);
        j->graph_len = v->via.bin.size;
        return 0;
    case 12:
        return get_int(v, INT64_MIN, INT64_MAX, &j->submitted, "submitted", err);
    case 13:
        return get_int(v, INT64_MIN, INT64_MAX, &j->started, "started", err);
    case 14:
        return get_int(v, INT64_MIN, INT64_MAX, &j->finished, "finished", err);
    case 15:
        return get_f64(v, &j->elapsed_s, "elapsed", err);
    case 16:
    case 17:
    case 18: {
        int32_t *dst[] = {&j->trials, &j->measured, &j->resumed};
        rc = get_int(v, 0, INT32_MAX, &n, job_fields[f], err);
        *dst[f - 16] = (int32_t)n;
        return rc;
    }
    case 19:
        return get_f64(v, &j->best_ns, "best_ns", err);
    case 20:
        return get_f64(v, &j->baseline_ns, "baseline_ns", err);
    case 21:
        return get_f64(v, &j->err_norm, "err_norm", err);
    case 22:
        return get_str(v, j->family, sizeof(j->family), "family", err);
    case 23:
        return get_str(v, j->schedule, sizeof(j->schedule), "schedule", err);
    case 24:
        if (v->type != MSGPACK_OBJECT_BOOLEAN)
            return BAD("job field 'record': expected a boolean");
        j->record = v->via.boolean;
        return 0;
    case 25:
        return get_str(v, j->error, sizeof(j->error), "error", err);
    default:
        return get_failures(v, j, err);
    }
}

/* Checks the checksum and decodes a stored job into *out (which owns its graph afterwards; it is
 * freed on failure too). 0, -EBADMSG or -ENOMEM. */
static int decode_job(const void *buf, size_t len, cache_job *out, kt_err *err)
{
    memset(out, 0, sizeof(*out));
    if (!cache_value_check(buf, len))
        return BAD("checksum mismatch (the stored bytes are damaged)");
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    size_t off = 0, body = len - CACHE_CHECKSUM_BYTES;
    int rc = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&res, buf, body, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        rc = kt_err_set(err, -ENOMEM, "out of memory decoding a job");
    else if (ur != MSGPACK_UNPACK_SUCCESS || off != body || res.data.type != MSGPACK_OBJECT_MAP)
        rc = BAD("malformed msgpack body");
    uint32_t seen = 0;
    for (uint32_t i = 0; rc == 0 && i < res.data.via.map.size; i++) {
        const msgpack_object_kv *kv = &res.data.via.map.ptr[i];
        for (int f = 0; f < JOB_FIELDS; f++) {
            if (!obj_is(&kv->key, job_fields[f]))
                continue;
            if (seen & (1u << f))
                rc = BAD("job field '%s' appears twice", job_fields[f]);
            else
                rc = job_field(f, &kv->val, out, err);
            seen |= 1u << f;
            break;
        }
    }
    for (int f = 0; rc == 0 && f < JOB_FIELDS; f++)
        if (!(seen & (1u << f)))
            rc = BAD("job field '%s' is missing", job_fields[f]);
    msgpack_unpacked_destroy(&res);
    if (rc < 0)
        cache_job_free(out);
    return rc;
}

/* Decodes the entry (k, v) of the jobs database, checking that the value's id is its key's.
 * A defect is reported here (once) and returned as -EBADMSG with detail in err. */
static int decode_entry(cache_env *env, const MDB_val *k, const MDB_val *v, cache_job *out,
                        kt_err *err)
{
    kt_err why = {0};
    int rc;
    memset(out, 0, sizeof(*out));
    uint64_t id = k->mv_size == JOB_KEY_BYTES ? job_key_id(k->mv_data) : 0;
    if (k->mv_size != JOB_KEY_BYTES)
        rc = kt_err_set(&why, -EBADMSG, "key of %zu bytes (expected %d)", k->mv_size,
                        JOB_KEY_BYTES);
    else if ((rc = decode_job(v->mv_data, v->mv_size, out, &why)) == 0 && out->id != id) {
        rc = kt_err_set(&why, -EBADMSG, "entry holds job %" PRIu64, out->id);
        cache_job_free(out);
    }
    if (rc == -EBADMSG)
        kt_log_warn(CACHE_LOG, "%s: corrupt job %" PRIu64 " skipped: %s", env->path, id, why.msg);
    if (rc < 0)
        return kt_err_set(err, rc, "job %" PRIu64 ": %s", id, why.msg);
    return 0;
}

/* ---- the calls (each holds the handle's lock, cache.h "Threads") ---- */

typedef struct put_ctx {
    const uint8_t *key;
    const uint8_t *val;
    size_t len;
} put_ctx;

static int put_fn(cache_env *env, MDB_txn *txn, void *ctx, kt_err *err)
{
    put_ctx *p = ctx;
    MDB_val k = {.mv_size = JOB_KEY_BYTES, .mv_data = (void *)p->key};
    MDB_val v = {.mv_size = p->len, .mv_data = (void *)p->val};
    return cache_lmdb_error(env, mdb_put(txn, env->jobs, &k, &v, 0), "cannot store a job", err);
}

static int job_put_locked(cache_env *env, const cache_job *j, kt_err *err)
{
    if (!env || !j)
        return kt_err_set(err, -EINVAL, "cache_job_put: bad arguments");
    uint8_t key[JOB_KEY_BYTES], *val = NULL;
    size_t len = 0;
    int rc = encode_job(j, &val, &len, err);
    if (rc < 0)
        return rc;
    job_key(j->id, key);
    put_ctx p = {key, val, len};
    rc = cache_write(env, put_fn, &p, err);
    free(val);
    return rc;
}

static int job_get_locked(cache_env *env, uint64_t id, cache_job *out, kt_err *err)
{
    if (!env || !out || id == 0)
        return kt_err_set(err, -EINVAL, "cache_job_get: bad arguments");
    memset(out, 0, sizeof(*out));
    uint8_t key[JOB_KEY_BYTES];
    job_key(id, key);
    MDB_txn *txn = NULL;
    int rc = cache_rtxn_begin(env, &txn, err);
    if (rc < 0)
        return rc;
    MDB_val k = {.mv_size = JOB_KEY_BYTES, .mv_data = key}, v;
    int mrc = mdb_get(txn, env->jobs, &k, &v);
    if (mrc == MDB_NOTFOUND)
        rc = kt_err_set(err, -ENOENT, "no job %" PRIu64, id);
    else if (mrc != MDB_SUCCESS)
        rc = cache_lmdb_error(env, mrc, "cannot read a job", err);
    else
        rc = decode_entry(env, &k, &v, out, err);
    cache_rtxn_end(env);
    return rc;
}

static int job_foreach_locked(cache_env *env, cache_job_cb cb, void *ctx, size_t *n_corrupt,
                              kt_err *err)
{
    if (!env || !cb)
        return kt_err_set(err, -EINVAL, "cache_job_foreach: bad arguments");
    if (n_corrupt)
        *n_corrupt = 0;
    MDB_txn *txn = NULL;
    int rc = cache_rtxn_begin(env, &txn, err);
    if (rc < 0)
        return rc;
    MDB_cursor *cur = NULL;
    if ((rc = cache_lmdb_error(env, mdb_cursor_open(txn, env->jobs, &cur), "cannot open a cursor",
                               err)) < 0)
        goto out;
    MDB_val k, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    for (; mrc == MDB_SUCCESS; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        cache_job j;
        kt_err why = {0};
        int drc = decode_entry(env, &k, &v, &j, &why);
        if (drc == -EBADMSG) {
            if (n_corrupt)
                (*n_corrupt)++;
            continue;
        }
        if (drc < 0) {
            rc = kt_err_set(err, drc, "%s", why.msg);
            break;
        }
        rc = cb(&j, ctx);
        cache_job_free(&j);
        if (rc != 0)
            break;
    }
    if (rc == 0 && mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND)
        rc = cache_lmdb_error(env, mrc, "cannot read jobs", err);
    mdb_cursor_close(cur);
out:
    cache_rtxn_end(env);
    return rc;
}

static int job_next_id_locked(cache_env *env, uint64_t *out, kt_err *err)
{
    if (!env || !out)
        return kt_err_set(err, -EINVAL, "cache_job_next_id: bad arguments");
    MDB_txn *txn = NULL;
    int rc = cache_rtxn_begin(env, &txn, err);
    if (rc < 0)
        return rc;
    MDB_cursor *cur = NULL;
    if ((rc = cache_lmdb_error(env, mdb_cursor_open(txn, env->jobs, &cur), "cannot open a cursor",
                               err)) < 0)
        goto out;
    MDB_val k, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    /* The key decides, not the value: a corrupt last entry still reserves its id. */
    if (mrc == MDB_NOTFOUND)
        *out = 1;
    else if (mrc == MDB_SUCCESS && k.mv_size == JOB_KEY_BYTES)
        *out = job_key_id(k.mv_data) + 1;
    else if (mrc == MDB_SUCCESS)
        rc = kt_err_set(err, -EBADMSG, "%s: the last job key has %zu bytes", env->path,
                        k.mv_size);
    else
        rc = cache_lmdb_error(env, mrc, "cannot read the last job", err);
    mdb_cursor_close(cur);
out:
    cache_rtxn_end(env);
    return rc;
}

int cache_job_put(cache_env *env, const cache_job *j, kt_err *err)
{
    cache_lock(env);
    int rc = job_put_locked(env, j, err);
    cache_unlock(env);
    return rc;
}

int cache_job_get(cache_env *env, uint64_t id, cache_job *out, kt_err *err)
{
    cache_lock(env);
    int rc = job_get_locked(env, id, out, err);
    cache_unlock(env);
    return rc;
}

int cache_job_foreach(cache_env *env, cache_job_cb cb, void *ctx, size_t *n_corrupt, kt_err *err)
{
    cache_lock(env);
    int rc = job_foreach_locked(env, cb, ctx, n_corrupt, err);
    cache_unlock(env);
    return rc;
}

int cache_job_next_id(cache_env *env, uint64_t *out, kt_err *err)
{
    cache_lock(env);
    int rc = job_next_id_locked(env, out, err);
    cache_unlock(env);
    return rc;
}
