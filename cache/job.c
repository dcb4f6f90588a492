/* The job journal: the daemon's jobs in the `jobs` database, keyed by the id as 8 big-endian bytes
 * (so a cursor walks them in submission order). A value is a canonical msgpack map followed by
 * SHA-256 of the map, like kernel records (the shared codec is codec.c); docs/formats.md (part 3)
 * lists the fields.
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
    if (!kt_text_clean(j->name, strlen(j->name)))
        return kt_err_set(err, -EINVAL, "job %" PRIu64 ": name '%s' is not UTF-8 text", j->id,
                          KT_ESC(j->name));
    if (j->elapsed_at_ms < 0 || j->trials_since_ms < 0)
        return kt_err_set(err, -EINVAL, "job %" PRIu64 ": elapsed_at_ms and trials_since_ms must be >= 0",
                          j->id);
    if (j->graph_len && !j->graph)
        return kt_err_set(err, -EINVAL, "job %" PRIu64 ": graph length without data", j->id);
    const double nums[] = {j->tolerance, j->budget_s,  j->elapsed_s, j->best_ns, j->baseline_ns,
                           j->err_norm,  j->compile_s, j->measure_s, j->floor_ns};
    for (size_t i = 0; i < KT_ARRAY_LEN(nums); i++)
        if (!isfinite(nums[i]) || nums[i] < 0)
            return kt_err_set(err, -EINVAL,
                              "job %" PRIu64 ": times and errors must be finite and "
                              ">= 0",
                              j->id);
    return 0;
}

#define JOB_FIELDS 34

static int pack_job(msgpack_packer *pk, const cache_job *j)
{
    int e = msgpack_pack_map(pk, JOB_FIELDS);
    e = e || kt_mp_pack_ki64(pk, "v", CACHE_JOB_VERSION);
    e = e || kt_mp_pack_ku64(pk, "id", j->id);
    e = e || kt_mp_pack_kstr(pk, "state", job_state_names[j->state]);
    e = e || kt_mp_pack_ki64(pk, "priority", j->priority);
    e = e || kt_mp_pack_ki64(pk, "gpu", j->gpu);
    e = e || kt_mp_pack_kstr(pk, "name", j->name);
    e = e || kt_mp_pack_kbin(pk, "sig", j->sig, OPS_SIG_BYTES);
    e = e || cache_pk_shapes(pk, j->shapes, j->n_shapes);
    e = e || kt_mp_pack_kstr(pk, "precision", ops_precision_name(j->precision));
    e = e || kt_mp_pack_kf64(pk, "tolerance", j->tolerance);
    e = e || kt_mp_pack_kf64(pk, "budget", j->budget_s);
    e = e || kt_mp_pack_kbin(pk, "graph", j->graph, j->graph_len);
    e = e || kt_mp_pack_ki64(pk, "submitted", j->submitted);
    e = e || kt_mp_pack_ki64(pk, "started", j->started);
    e = e || kt_mp_pack_ki64(pk, "finished", j->finished);
    e = e || kt_mp_pack_kf64(pk, "elapsed", j->elapsed_s);
    e = e || kt_mp_pack_ki64(pk, "trials", j->trials);
    e = e || kt_mp_pack_ki64(pk, "measured", j->measured);
    e = e || kt_mp_pack_ki64(pk, "resumed", j->resumed);
    e = e || kt_mp_pack_kf64(pk, "best_ns", j->best_ns);
    e = e || kt_mp_pack_kf64(pk, "baseline_ns", j->baseline_ns);
    e = e || kt_mp_pack_kf64(pk, "err_norm", j->err_norm);
    e = e || kt_mp_pack_kstr(pk, "family", j->family);
    e = e || kt_mp_pack_kstr(pk, "schedule", j->schedule);
    e = e || kt_mp_pack_kbool(pk, "record", j->record);
    e = e || kt_mp_pack_kstr(pk, "error", j->error);
    e = e || kt_mp_pack_str(pk, "failures") || msgpack_pack_map(pk, (size_t)j->n_failures);
    for (int i = 0; !e && i < j->n_failures; i++)
        e = kt_mp_pack_ki64(pk, j->failures[i].name, j->failures[i].count);
    e = e || kt_mp_pack_kf64(pk, "compile_s", j->compile_s);
    e = e || kt_mp_pack_kf64(pk, "measure_s", j->measure_s);
    e = e || kt_mp_pack_kbin(pk, "problem", j->problem, OPS_SIG_BYTES);
    e = e || kt_mp_pack_ku64(pk, "owner", j->owner);
    e = e || kt_mp_pack_ki64(pk, "elapsed_at_ms", j->elapsed_at_ms);
    e = e || kt_mp_pack_ki64(pk, "trials_since_ms", j->trials_since_ms);
    e = e || kt_mp_pack_kf64(pk, "floor_ns", j->floor_ns);
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
    if (pack_job(&pk, j) < 0 || cache_value_finish(&sb, out, len) < 0) {
        msgpack_sbuffer_destroy(&sb);
        return kt_err_set(err, -ENOMEM, "out of memory encoding job %" PRIu64, j->id);
    }
    return 0;
}

/* ---- decoding ---- */

#define BAD(...) kt_err_set(d->err, -EBADMSG, __VA_ARGS__)

/* Times and errors: finite and >= 0. */
static int get_amount(const msgpack_object *o, double *out, const char *what, cache_dec *d)
{
    int rc = cache_get_f64(o, out, what, d);
    if (rc == 0 && (!isfinite(*out) || *out < 0))
        return BAD("job field '%s': expected a finite number >= 0", what);
    return rc;
}

static int get_failures(const msgpack_object *o, cache_job *j, cache_dec *d)
{
    if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size > CACHE_JOB_FAILURE_KINDS)
        return BAD("job field 'failures': expected a map of at most %d classes",
                   CACHE_JOB_FAILURE_KINDS);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        struct cache_job_failure *f = &j->failures[i];
        int64_t n = 0;
        int rc = cache_get_strbuf(&o->via.map.ptr[i].key, f->name, sizeof(f->name), "failures", d);
        if (rc == 0)
            rc = cache_get_i64(&o->via.map.ptr[i].val, 0, INT32_MAX, &n, "failures", d);
        if (rc < 0)
            return rc;
        f->count = (int32_t)n;
        j->n_failures = (int)i + 1;
    }
    return 0;
}

static const char *const job_fields[JOB_FIELDS] = {
    "v",         "id",        "state",     "priority",     "gpu",     "name",      "sig",
    "shapes",    "precision", "tolerance", "budget",       "graph",   "submitted", "started",
    "finished",  "elapsed",   "trials",    "measured",     "resumed", "best_ns",   "baseline_ns",
    "err_norm",  "family",    "schedule",  "record",       "error",   "failures",  "compile_s",
    "measure_s", "problem",   "owner",     "elapsed_at_ms", "trials_since_ms",
    "floor_ns"};
/* Added after journals were written: absent in older entries, decoded as 0 (an entry without
 * an owner is root's: only root or the admin group may cancel it). */
#define JOB_OPTIONAL                                                                               \
    ((1ull << 27) | (1ull << 28) | (1ull << 29) | (1ull << 30) | (1ull << 31) | (1ull << 32) |   \
     (1ull << 33))

/* A text field as stored: entries written before names were checked (docs/protocol.md, "Names")
 * may hold control characters or bytes that are not UTF-8. Such a field is shown escaped, so
 * logs, terminals and strict msgpack decoders of replies never see it raw; the entry is kept. */
static int get_text(const msgpack_object *o, char *buf, size_t cap, const char *what, cache_dec *d)
{
    int rc = cache_get_strbuf(o, buf, cap, what, d);
    /* the stored bytes, NULs included (cache_get_strbuf copies them all) */
    size_t len = rc == 0 ? o->via.str.size : 0;
    if (rc == 0 && !kt_text_clean(buf, len)) {
        char esc[256];
        size_t n = sizeof(esc) < cap ? sizeof(esc) : cap;
        kt_escape(esc, n, buf, len, 0);
        memcpy(buf, esc, strlen(esc) + 1); /* kt_escape wrote at most n <= cap bytes */
    }
    return rc;
}

static int job_field(int f, const msgpack_object *v, void *ctx, cache_dec *d)
{
    cache_job *j = ctx;
    int64_t n = 0;
    char word[16];
    int rc = 0;
    switch (f) {
    case 0:
        return cache_get_version(v, CACHE_JOB_VERSION, d);
    case 1:
        if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 == 0)
            return BAD("job field 'id': expected a positive integer");
        j->id = v->via.u64;
        return 0;
    case 2:
        if ((rc = cache_get_strbuf(v, word, sizeof(word), "state", d)) < 0)
            return rc;
        return cache_job_state_from_name(word, &j->state) == 0
                   ? 0
                   : BAD("job field 'state': unknown value '%s'", word);
    case 3:
        rc = cache_get_i64(v, -100, 100, &n, "priority", d);
        j->priority = (int32_t)n;
        return rc;
    case 4:
        rc = cache_get_i64(v, -1, INT32_MAX, &n, "gpu", d);
        j->gpu = (int32_t)n;
        return rc;
    case 5:
        return get_text(v, j->name, sizeof(j->name), "name", d);
    case 6:
        return cache_get_sig(v, j->sig, d);
    case 7:
        return cache_get_shapes(v, j->shapes, &j->n_shapes, d);
    case 8:
        return cache_get_precision(v, &j->precision, d);
    case 9:
        return get_amount(v, &j->tolerance, "tolerance", d);
    case 10:
        return get_amount(v, &j->budget_s, "budget", d);
    case 11:
        return cache_get_bindup(v, &j->graph, &j->graph_len, "graph", d);
    case 12:
        return cache_get_i64(v, INT64_MIN, INT64_MAX, &j->submitted, "submitted", d);
    case 13:
        return cache_get_i64(v, INT64_MIN, INT64_MAX, &j->started, "started", d);
    case 14:
        return cache_get_i64(v, INT64_MIN, INT64_MAX, &j->finished, "finished", d);
    case 15:
        return get_amount(v, &j->elapsed_s, "elapsed", d);
    case 16:
    case 17:
    case 18: {
        int32_t *dst[] = {&j->trials, &j->measured, &j->resumed};
        rc = cache_get_i64(v, 0, INT32_MAX, &n, job_fields[f], d);
        *dst[f - 16] = (int32_t)n;
        return rc;
    }
    case 19:
        return get_amount(v, &j->best_ns, "best_ns", d);
    case 20:
        return get_amount(v, &j->baseline_ns, "baseline_ns", d);
    case 21:
        return get_amount(v, &j->err_norm, "err_norm", d);
    case 22:
        return get_text(v, j->family, sizeof(j->family), "family", d);
    case 23:
        return get_text(v, j->schedule, sizeof(j->schedule), "schedule", d);
    case 24:
        return cache_get_bool(v, &j->record, "record", d);
    case 25:
        return get_text(v, j->error, sizeof(j->error), "error", d);
    case 26:
        return get_failures(v, j, d);
    case 27:
        return get_amount(v, &j->compile_s, "compile_s", d);
    case 28:
        return get_amount(v, &j->measure_s, "measure_s", d);
    case 29:
        if (v->type != MSGPACK_OBJECT_BIN || v->via.bin.size != OPS_SIG_BYTES)
            return BAD("job field 'problem': expected %d bytes", OPS_SIG_BYTES);
        memcpy(j->problem, v->via.bin.ptr, OPS_SIG_BYTES);
        return 0;
    case 30:
        rc = cache_get_i64(v, 0, UINT32_MAX, &n, "owner", d);
        j->owner = (uint32_t)n;
        return rc;
    case 31:
        return cache_get_i64(v, 0, INT64_MAX, &j->elapsed_at_ms, "elapsed_at_ms", d);
    case 32:
        return cache_get_i64(v, 0, INT64_MAX, &j->trials_since_ms, "trials_since_ms", d);
    default:
        return get_amount(v, &j->floor_ns, "floor_ns", d);
    }
}

/* Checks the checksum and decodes a stored job into *out (which owns its graph afterwards; it is
 * freed on failure too). 0, -EBADMSG or -ENOMEM. */
static int decode_job(const void *buf, size_t len, cache_job *out, kt_err *err)
{
    cache_dec dec = {.doc = "job", .err = err};
    memset(out, 0, sizeof(*out));
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    int rc = cache_value_unpack(buf, len, &res, NULL, &dec);
    if (rc == 0)
        rc = cache_decode_map_opt(&res.data, job_fields, JOB_FIELDS, JOB_OPTIONAL, job_field, out,
                                  NULL, &dec);
    kt_err why = {0}; /* what decodes must be what the encoder accepts (as for records) */
    if (rc == 0 && check_job(out, &why) < 0)
        rc = kt_err_set(err, -EBADMSG, "%s", why.msg);
    msgpack_unpacked_destroy(&res);
    if (rc < 0)
        cache_job_free(out);
    return rc;
}

int cache_job_entry_decode(const void *key, size_t klen, const void *val, size_t vlen,
                           cache_job *out, kt_err *err)
{
    int rc;
    memset(out, 0, sizeof(*out));
    uint64_t id = klen == JOB_KEY_BYTES ? job_key_id(key) : 0;
    if (klen != JOB_KEY_BYTES)
        rc = kt_err_set(err, -EBADMSG, "key of %zu bytes (expected %d)", klen, JOB_KEY_BYTES);
    else if ((rc = decode_job(val, vlen, out, err)) == 0 && out->id != id) {
        rc = kt_err_set(err, -EBADMSG, "entry holds job %" PRIu64, out->id);
        cache_job_free(out);
    }
    return rc;
}

/* Decodes the entry (k, v) of the jobs database, checking that the value's id is its key's.
 * A defect is reported here (once) and returned as -EBADMSG with detail in err. */
static int decode_entry(cache_env *env, const MDB_val *k, const MDB_val *v, cache_job *out,
                        kt_err *err)
{
    kt_err why = {0};
    uint64_t id = k->mv_size == JOB_KEY_BYTES ? job_key_id(k->mv_data) : 0;
    int rc = cache_job_entry_decode(k->mv_data, k->mv_size, v->mv_data, v->mv_size, out, &why);
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

typedef struct foreach_ctx {
    cache_job_cb cb;
    void *ctx;
    size_t *n_corrupt;
} foreach_ctx;

static int foreach_entry(cache_env *env, const MDB_val *k, const MDB_val *v, void *ctx, kt_err *err)
{
    foreach_ctx *fc = ctx;
    cache_job j;
    kt_err why = {0};
    int rc = decode_entry(env, k, v, &j, &why);
    if (rc == -EBADMSG) {
        if (fc->n_corrupt)
            (*fc->n_corrupt)++;
        return 0;
    }
    if (rc < 0)
        return kt_err_set(err, rc, "%s", why.msg);
    rc = fc->cb(&j, fc->ctx);
    cache_job_free(&j);
    return rc;
}

static int job_foreach_locked(cache_env *env, cache_job_cb cb, void *ctx, size_t *n_corrupt,
                              kt_err *err)
{
    if (!env || !cb)
        return kt_err_set(err, -EINVAL, "cache_job_foreach: bad arguments");
    if (n_corrupt)
        *n_corrupt = 0;
    foreach_ctx fc = {cb, ctx, n_corrupt};
    return cache_cursor_walk(env, env->jobs, MDB_FIRST, NULL, foreach_entry, &fc,
                             "cannot read jobs", err);
}

/* The key decides, not the value: a corrupt last entry still reserves its id. Stops the walk at
 * the first (the last) entry. */
static int last_id_entry(cache_env *env, const MDB_val *k, const MDB_val *v, void *ctx, kt_err *err)
{
    (void)v;
    if (k->mv_size != JOB_KEY_BYTES)
        return kt_err_set(err, -EBADMSG, "%s: the last job key has %zu bytes", env->path,
                          k->mv_size);
    *(uint64_t *)ctx = job_key_id(k->mv_data) + 1;
    return 1;
}

static int job_next_id_locked(cache_env *env, uint64_t *out, kt_err *err)
{
    if (!env || !out)
        return kt_err_set(err, -EINVAL, "cache_job_next_id: bad arguments");
    uint64_t next = 1; /* when the journal is empty */
    int rc = cache_cursor_walk(env, env->jobs, MDB_LAST, NULL, last_id_entry, &next,
                               "cannot read the last job", err);
    if (rc < 0)
        return rc;
    *out = next;
    return 0;
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
