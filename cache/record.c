/* Stored form of kernel records and trial entries: a canonical msgpack map followed by SHA-256 of
 * the map's bytes. Field names and types are in docs/formats.md (part 3). */
#include "internal.h"
#include "ops/ops.h"
#include "ktune_config.h"

#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

static const char *const arg_kind_names[CACHE_ARG_KIND_COUNT] = {"input", "output", "workspace",
                                                                 "scalar"};
static const char *const scalar_names[CACHE_SCALAR_COUNT] = {"i32", "i64", "f32", "f64"};
static const char *const timing_names[] = {"cold", "hot"};
static const char *const trial_status_names[CACHE_TRIAL_STATUS_COUNT] = {"ok", "wrong", "fault",
                                                                         "hang", "compile_error"};

void cache_record_init(cache_record *r)
{
    memset(r, 0, sizeof(*r));
}

void cache_record_free(cache_record *r)
{
    if (!r)
        return;
    free(r->graph_name);
    free(r->source);
    free(r->cubin);
    for (int i = 0; i < r->n_kernels && r->kernels; i++) {
        free(r->kernels[i].entry);
        free(r->kernels[i].args);
    }
    free(r->kernels);
    for (int i = 0; i < r->n_layouts && r->layouts; i++)
        free(r->layouts[i].layout);
    free(r->layouts);
    free(r->family);
    free(r->schedule);
    free(r->ktune_version);
    memset(r, 0, sizeof(*r));
}

const char *cache_trial_status_name(cache_trial_status s)
{
    return (unsigned)s < CACHE_TRIAL_STATUS_COUNT ? trial_status_names[s] : NULL;
}

int cache_trial_status_from_name(const char *name, cache_trial_status *out)
{
    for (int i = 0; i < CACHE_TRIAL_STATUS_COUNT; i++) {
        if (strcmp(name, trial_status_names[i]) == 0) {
            *out = (cache_trial_status)i;
            return 0;
        }
    }
    return -EINVAL;
}

bool cache_value_check(const void *buf, size_t len)
{
    if (len < CACHE_CHECKSUM_BYTES + 1)
        return false;
    uint8_t digest[CACHE_CHECKSUM_BYTES];
    ops_sha256(buf, len - CACHE_CHECKSUM_BYTES, digest);
    return memcmp(digest, (const uint8_t *)buf + len - CACHE_CHECKSUM_BYTES,
                  CACHE_CHECKSUM_BYTES) == 0;
}

/* ---- encoding ---- */

/* Every pack call below writes into an sbuffer, which fails only when realloc does. */
#define PK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != 0)                                                                           \
            goto oom;                                                                              \
    } while (0)

static int pk_str(msgpack_packer *pk, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    return msgpack_pack_str_with_body(pk, s ? s : "", n);
}

static int pk_kstr(msgpack_packer *pk, const char *key, const char *s)
{
    return pk_str(pk, key) || pk_str(pk, s);
}

static int pk_ku(msgpack_packer *pk, const char *key, uint64_t v)
{
    return pk_str(pk, key) || msgpack_pack_uint64(pk, v);
}

static int pk_ki(msgpack_packer *pk, const char *key, int64_t v)
{
    return pk_str(pk, key) || msgpack_pack_int64(pk, v);
}

static int pk_kf(msgpack_packer *pk, const char *key, double v)
{
    return pk_str(pk, key) || msgpack_pack_double(pk, v);
}

static bool bad_num(double v)
{
    return !isfinite(v) || v < 0;
}

static int check_record(const cache_record *r, kt_err *err)
{
    if (r->n_kernels < 1 || r->n_kernels > CACHE_MAX_KERNELS || !r->kernels)
        return kt_err_set(err, -EINVAL, "record: %d kernels (1..%d allowed)", r->n_kernels,
                          CACHE_MAX_KERNELS);
    if (r->n_layouts < 0 || (r->n_layouts > 0 && !r->layouts))
        return kt_err_set(err, -EINVAL, "record: bad layout list");
    if ((r->cubin_len && !r->cubin) || (r->source_len && !r->source))
        return kt_err_set(err, -EINVAL, "record: blob length without data");
    if ((unsigned)r->timing > CACHE_TIMING_HOT)
        return kt_err_set(err, -EINVAL, "record: bad timing mode %d", (int)r->timing);
    if ((unsigned)r->key.precision > OPS_PREC_REDUCED)
        return kt_err_set(err, -EINVAL, "record: bad precision %d", (int)r->key.precision);
    if (bad_num(r->time_ns) || bad_num(r->time_p10_ns) || bad_num(r->time_p90_ns) ||
        bad_num(r->err_norm) || bad_num(r->err_max) || bad_num(r->tolerance) ||
        bad_num(r->cublaslt_ns) || bad_num(r->naive_ns))
        return kt_err_set(err, -EINVAL, "record: times and errors must be finite and >= 0");
    for (int i = 0; i < r->n_kernels; i++) {
        const cache_kernel *k = &r->kernels[i];
        if (k->n_args < 0 || k->n_args > CACHE_MAX_ARGS || (k->n_args && !k->args))
            return kt_err_set(err, -EINVAL, "record: kernel %d: %d arguments (0..%d allowed)", i,
                              k->n_args, CACHE_MAX_ARGS);
        if (!k->entry || !k->entry[0])
            return kt_err_set(err, -EINVAL, "record: kernel %d has no entry-point name", i);
        for (int j = 0; j < k->n_args; j++) {
            const cache_arg *a = &k->args[j];
            if ((unsigned)a->kind >= CACHE_ARG_KIND_COUNT ||
                (a->kind == CACHE_ARG_SCALAR && (unsigned)a->scalar >= CACHE_SCALAR_COUNT))
                return kt_err_set(err, -EINVAL, "record: kernel %d argument %d: bad kind", i, j);
        }
    }
    return 0;
}

static int pk_arg(msgpack_packer *pk, const cache_arg *a)
{
    bool scalar = a->kind == CACHE_ARG_SCALAR;
    if (msgpack_pack_map(pk, scalar ? 3 : 2) || pk_kstr(pk, "kind", arg_kind_names[a->kind]))
        return -1;
    switch (a->kind) {
    case CACHE_ARG_INPUT:
    case CACHE_ARG_OUTPUT:
        return pk_ki(pk, "index", a->index);
    case CACHE_ARG_WORKSPACE:
        return pk_ku(pk, "offset", a->offset);
    default:
        if (pk_kstr(pk, "type", scalar_names[a->scalar]))
            return -1;
        if (a->scalar == CACHE_SCALAR_I32 || a->scalar == CACHE_SCALAR_I64)
            return pk_ki(pk, "value", a->ival);
        return pk_kf(pk, "value", a->fval);
    }
}

static int pk_u32x3(msgpack_packer *pk, const char *key, const uint32_t v[3])
{
    return pk_str(pk, key) || msgpack_pack_array(pk, 3) || msgpack_pack_uint32(pk, v[0]) ||
           msgpack_pack_uint32(pk, v[1]) || msgpack_pack_uint32(pk, v[2]);
}

static int finish(msgpack_sbuffer *sb, uint8_t **out, size_t *len)
{
    uint8_t digest[CACHE_CHECKSUM_BYTES];
    ops_sha256(sb->data, sb->size, digest);
    if (msgpack_sbuffer_write(sb, (const char *)digest, sizeof(digest)) != 0)
        return -ENOMEM;
    *len = sb->size;
    *out = (uint8_t *)msgpack_sbuffer_release(sb);
    return 0;
}

int cache_record_encode(const cache_record *r, uint8_t **out, size_t *len, kt_err *err)
{
    cache_bound shapes[CACHE_MAX_SHAPES];
    int rc = cache_key_sorted(&r->key, shapes, err);
    if (rc < 0)
        return rc;
    if ((rc = check_record(r, err)) < 0)
        return rc;

    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    const cache_gpu *g = &r->key.gpu;

    PK(msgpack_pack_map(&pk, 19));
    PK(pk_ku(&pk, "v", CACHE_RECORD_VERSION));
    PK(pk_str(&pk, "gpu"));
    PK(msgpack_pack_map(&pk, 7));
    PK(pk_kstr(&pk, "name", g->name));
    PK(pk_ki(&pk, "sm_major", g->sm_major));
    PK(pk_ki(&pk, "sm_minor", g->sm_minor));
    PK(pk_ki(&pk, "sm_count", g->sm_count));
    PK(pk_ku(&pk, "mem", g->mem_bytes));
    PK(pk_ki(&pk, "driver", g->driver_version));
    PK(pk_ki(&pk, "cuda", g->cuda_version));
    PK(pk_str(&pk, "sig"));
    PK(msgpack_pack_bin_with_body(&pk, r->key.sig, OPS_SIG_BYTES));
    PK(pk_str(&pk, "shapes"));
    PK(msgpack_pack_array(&pk, (size_t)r->key.n_shapes));
    for (int i = 0; i < r->key.n_shapes; i++) {
        PK(msgpack_pack_array(&pk, 2));
        PK(pk_str(&pk, shapes[i].name));
        PK(msgpack_pack_int64(&pk, shapes[i].value));
    }
    PK(pk_kstr(&pk, "precision", ops_precision_name(r->key.precision)));
    PK(pk_kstr(&pk, "graph", r->graph_name));
    PK(pk_str(&pk, "source"));
    PK(msgpack_pack_str_with_body(&pk, r->source ? r->source : "", r->source_len));
    PK(pk_str(&pk, "cubin"));
    PK(msgpack_pack_bin_with_body(&pk, r->cubin, r->cubin_len));
    PK(pk_str(&pk, "kernels"));
    PK(msgpack_pack_array(&pk, (size_t)r->n_kernels));
    for (int i = 0; i < r->n_kernels; i++) {
        const cache_kernel *k = &r->kernels[i];
        PK(msgpack_pack_map(&pk, 6));
        PK(pk_kstr(&pk, "entry", k->entry));
        PK(pk_u32x3(&pk, "grid", k->grid));
        PK(pk_u32x3(&pk, "block", k->block));
        PK(pk_ku(&pk, "smem", k->smem_bytes));
        PK(pk_str(&pk, "zero"));
        PK(msgpack_pack_array(&pk, 2));
        PK(msgpack_pack_uint64(&pk, k->zero_offset));
        PK(msgpack_pack_uint64(&pk, k->zero_bytes));
        PK(pk_str(&pk, "args"));
        PK(msgpack_pack_array(&pk, (size_t)k->n_args));
        for (int j = 0; j < k->n_args; j++)
            PK(pk_arg(&pk, &k->args[j]));
    }
    PK(pk_ku(&pk, "workspace", r->workspace_bytes));
    PK(pk_str(&pk, "layouts"));
    PK(msgpack_pack_array(&pk, (size_t)r->n_layouts));
    for (int i = 0; i < r->n_layouts; i++) {
        PK(msgpack_pack_map(&pk, 2));
        PK(pk_ki(&pk, "input", r->layouts[i].input));
        PK(pk_kstr(&pk, "layout", r->layouts[i].layout));
    }
    PK(pk_kstr(&pk, "family", r->family));
    PK(pk_kstr(&pk, "schedule", r->schedule));
    PK(pk_str(&pk, "time"));
    PK(msgpack_pack_map(&pk, 5));
    PK(pk_kf(&pk, "median", r->time_ns));
    PK(pk_kf(&pk, "p10", r->time_p10_ns));
    PK(pk_kf(&pk, "p90", r->time_p90_ns));
    PK(pk_kstr(&pk, "mode", timing_names[r->timing]));
    PK(pk_ku(&pk, "reps", r->reps));
    PK(pk_str(&pk, "verify"));
    PK(msgpack_pack_map(&pk, 4));
    PK(pk_str(&pk, "ok"));
    PK(r->verified ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk));
    PK(pk_kf(&pk, "norm", r->err_norm));
    PK(pk_kf(&pk, "max", r->err_max));
    PK(pk_kf(&pk, "tol", r->tolerance));
    PK(pk_str(&pk, "baseline"));
    PK(msgpack_pack_map(&pk, 2));
    PK(pk_kf(&pk, "cublaslt", r->cublaslt_ns));
    PK(pk_kf(&pk, "naive", r->naive_ns));
    PK(pk_kstr(&pk, "ktune", r->ktune_version ? r->ktune_version : KTUNE_VERSION));
    PK(pk_ki(&pk, "nvrtc", r->nvrtc_version));
    PK(pk_ki(&pk, "created", r->created));
    if (finish(&sb, out, len) < 0)
        goto oom;
    return 0;
oom:
    msgpack_sbuffer_destroy(&sb);
    return kt_err_set(err, -ENOMEM, "out of memory encoding a record");
}

int cache_trial_encode(const cache_trial *t, uint8_t **out, size_t *len, kt_err *err)
{
    if (!cache_trial_status_name(t->status))
        return kt_err_set(err, -EINVAL, "trial: bad status %d", (int)t->status);
    size_t cl = strnlen(t->cand, sizeof(t->cand));
    if (cl == 0 || cl == sizeof(t->cand))
        return kt_err_set(err, -EINVAL, "trial: candidate id empty or longer than %d bytes",
                          CACHE_CAND_MAX - 1);
    if (!isfinite(t->time_ns) || !isfinite(t->error))
        return kt_err_set(err, -EINVAL, "trial: time and error must be finite");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    char detail[sizeof(t->detail)];
    snprintf(detail, sizeof(detail), "%.*s", (int)sizeof(t->detail) - 1, t->detail);
    PK(msgpack_pack_map(&pk, 7));
    PK(pk_ku(&pk, "v", CACHE_TRIAL_VERSION));
    PK(pk_kstr(&pk, "cand", t->cand));
    PK(pk_kstr(&pk, "status", trial_status_names[t->status]));
    PK(pk_kf(&pk, "time", t->time_ns));
    PK(pk_kf(&pk, "error", t->error));
    PK(pk_kstr(&pk, "detail", detail));
    PK(pk_ki(&pk, "ts", t->ts));
    if (finish(&sb, out, len) < 0)
        goto oom;
    return 0;
oom:
    msgpack_sbuffer_destroy(&sb);
    return kt_err_set(err, -ENOMEM, "out of memory encoding a trial");
}

/* ---- decoding ---- */

#define BAD(...) kt_err_set(err, -EBADMSG, __VA_ARGS__)

static bool key_is(const msgpack_object *k, const char *name)
{
    size_t n = strlen(name);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
           memcmp(k->via.str.ptr, name, n) == 0;
}

static int get_i64(const msgpack_object *o, int64_t lo, int64_t hi, int64_t *out, const char *what,
                   kt_err *err)
{
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= (uint64_t)INT64_MAX)
        v = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        v = o->via.i64;
    else
        return BAD("record field '%s': expected an integer", what);
    if (v < lo || v > hi)
        return BAD("record field '%s': %lld out of range", what, (long long)v);
    *out = v;
    return 0;
}

static int get_i32(const msgpack_object *o, int32_t *out, const char *what, kt_err *err)
{
    int64_t v = 0;
    int rc = get_i64(o, INT32_MIN, INT32_MAX, &v, what, err);
    *out = (int32_t)v;
    return rc;
}

static int get_u64(const msgpack_object *o, uint64_t max, uint64_t *out, const char *what,
                   kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
        return BAD("record field '%s': expected an unsigned integer <= %llu", what,
                   (unsigned long long)max);
    *out = o->via.u64;
    return 0;
}

static int get_u32(const msgpack_object *o, uint32_t *out, const char *what, kt_err *err)
{
    uint64_t v = 0;
    int rc = get_u64(o, UINT32_MAX, &v, what, err);
    *out = (uint32_t)v;
    return rc;
}

static int get_f64(const msgpack_object *o, double *out, const char *what, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_FLOAT64 && o->type != MSGPACK_OBJECT_FLOAT32)
        return BAD("record field '%s': expected a float", what);
    *out = o->via.f64;
    return 0;
}

static int get_strbuf(const msgpack_object *o, char *buf, size_t cap, const char *what, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap)
        return BAD("record field '%s': expected a string shorter than %zu bytes", what, cap);
    memcpy(buf, o->via.str.ptr, o->via.str.size);
    buf[o->via.str.size] = '\0';
    return 0;
}

static int get_strdup(const msgpack_object *o, char **out, size_t *len, const char *what,
                      kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return BAD("record field '%s': expected a string", what);
    char *s = malloc(o->via.str.size + 1);
    if (!s)
        return kt_err_set(err, -ENOMEM, "out of memory decoding a record");
    memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    free(*out);
    *out = s;
    if (len)
        *len = o->via.str.size;
    return 0;
}

static int get_enum(const msgpack_object *o, const char *const *names, int n, int *out,
                    const char *what, kt_err *err)
{
    for (int i = 0; i < n; i++) {
        if (key_is(o, names[i])) {
            *out = i;
            return 0;
        }
    }
    return BAD("record field '%s': unknown value", what);
}

static int get_u32x3(const msgpack_object *o, uint32_t v[3], const char *what, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
        return BAD("record field '%s': expected 3 integers", what);
    for (int i = 0; i < 3; i++) {
        int rc = get_u32(&o->via.array.ptr[i], &v[i], what, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Walks a map object: for each key calls the field decoder with its index in names (or skips an
 * unknown key), then checks that every name was seen exactly once. */
typedef int (*field_fn)(int field, const msgpack_object *v, void *ctx, kt_err *err);

static int walk_map(const msgpack_object *o, const char *const *names, int n, field_fn fn,
                    void *ctx, const char *what, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_MAP)
        return BAD("record field '%s': expected a map", what);
    uint64_t seen = 0;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        for (int f = 0; f < n; f++) {
            if (!key_is(&kv->key, names[f]))
                continue;
            if (seen & (1ull << f))
                return BAD("record field '%s.%s' appears twice", what, names[f]);
            seen |= 1ull << f;
            int rc = fn(f, &kv->val, ctx, err);
            if (rc < 0)
                return rc;
            break;
        }
    }
    for (int f = 0; f < n; f++) {
        if (!(seen & (1ull << f)))
            return BAD("record field '%s.%s' is missing", what, names[f]);
    }
    return 0;
}

static const char *const gpu_fields[] = {"name", "sm_major", "sm_minor", "sm_count",
                                         "mem",  "driver",   "cuda"};

static int gpu_field(int f, const msgpack_object *v, void *ctx, kt_err *err)
{
    cache_gpu *g = ctx;
    switch (f) {
    case 0:
        return get_strbuf(v, g->name, sizeof(g->name), "gpu.name", err);
    case 1:
        return get_i32(v, &g->sm_major, "gpu.sm_major", err);
    case 2:
        return get_i32(v, &g->sm_minor, "gpu.sm_minor", err);
    case 3:
        return get_i32(v, &g->sm_count, "gpu.sm_count", err);
    case 4:
        return get_u64(v, UINT64_MAX, &g->mem_bytes, "gpu.mem", err);
    case 5:
        return get_i32(v, &g->driver_version, "gpu.driver", err);
    default:
        return get_i32(v, &g->cuda_version, "gpu.cuda", err);
    }
}

static const char *const arg_fields_io[] = {"kind", "index"};
static const char *const arg_fields_ws[] = {"kind", "offset"};
static const char *const arg_fields_scalar[] = {"kind", "type", "value"};

static int arg_field(int f, const msgpack_object *v, void *ctx, kt_err *err)
{
    cache_arg *a = ctx;
    int e = 0, rc;
    if (f == 0)
        return 0; /* kind: read before the walk */
    switch (a->kind) {
    case CACHE_ARG_INPUT:
    case CACHE_ARG_OUTPUT:
        return get_i32(v, &a->index, "arg.index", err);
    case CACHE_ARG_WORKSPACE:
        return get_u64(v, UINT64_MAX, &a->offset, "arg.offset", err);
    default:
        break;
    }
    if (f == 1) {
        rc = get_enum(v, scalar_names, CACHE_SCALAR_COUNT, &e, "arg.type", err);
        a->scalar = (cache_scalar)e;
        return rc;
    }
    /* value: the type field may come after it, so accept either form and check below */
    if (v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32)
        return get_f64(v, &a->fval, "arg.value", err);
    return get_i64(v, INT64_MIN, INT64_MAX, &a->ival, "arg.value", err);
}

static int decode_arg(const msgpack_object *o, cache_arg *a, kt_err *err)
{
    memset(a, 0, sizeof(*a));
    if (o->type != MSGPACK_OBJECT_MAP)
        return BAD("record field 'arg': expected a map");
    const msgpack_object *kind = NULL;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        if (key_is(&o->via.map.ptr[i].key, "kind"))
            kind = &o->via.map.ptr[i].val;
    }
    int e = 0;
    if (!kind)
        return BAD("record field 'arg.kind' is missing");
    int rc = get_enum(kind, arg_kind_names, CACHE_ARG_KIND_COUNT, &e, "arg.kind", err);
    if (rc < 0)
        return rc;
    a->kind = (cache_arg_kind)e;
    switch (a->kind) {
    case CACHE_ARG_INPUT:
    case CACHE_ARG_OUTPUT:
        return walk_map(o, arg_fields_io, 2, arg_field, a, "arg", err);
    case CACHE_ARG_WORKSPACE:
        return walk_map(o, arg_fields_ws, 2, arg_field, a, "arg", err);
    default:
        rc = walk_map(o, arg_fields_scalar, 3, arg_field, a, "arg", err);
        if (rc < 0)
            return rc;
        /* the value's msgpack form must match its declared type */
        bool is_int = a->scalar == CACHE_SCALAR_I32 || a->scalar == CACHE_SCALAR_I64;
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (!key_is(&kv->key, "value"))
                continue;
            bool got_float =
                kv->val.type == MSGPACK_OBJECT_FLOAT64 || kv->val.type == MSGPACK_OBJECT_FLOAT32;
            if (got_float == is_int)
                return BAD("record field 'arg.value' does not match its type");
        }
        if (a->scalar == CACHE_SCALAR_I32 && (a->ival < INT32_MIN || a->ival > INT32_MAX))
            return BAD("record field 'arg.value' out of range for i32");
        return 0;
    }
}

static const char *const kernel_fields[] = {"entry", "grid", "block", "smem", "args", "zero"};

static int kernel_field(int f, const msgpack_object *v, void *ctx, kt_err *err)
{
    cache_kernel *k = ctx;
    switch (f) {
    case 0:
        return get_strdup(v, &k->entry, NULL, "kernel.entry", err);
    case 1:
        return get_u32x3(v, k->grid, "kernel.grid", err);
    case 2:
        return get_u32x3(v, k->block, "kernel.block", err);
    case 3:
        return get_u32(v, &k->smem_bytes, "kernel.smem", err);
    case 5: {
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size != 2)
            return BAD("record field 'kernel.zero': expected [offset, bytes]");
        int rc = get_u64(&v->via.array.ptr[0], UINT64_MAX, &k->zero_offset, "kernel.zero", err);
        return rc < 0 ? rc
                      : get_u64(&v->via.array.ptr[1], UINT64_MAX, &k->zero_bytes, "kernel.zero",
                                err);
    }
    default:
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > CACHE_MAX_ARGS)
            return BAD("record field 'kernel.args': expected at most %d arguments", CACHE_MAX_ARGS);
        free(k->args);
        k->n_args = 0;
        k->args = calloc(v->via.array.size ? v->via.array.size : 1, sizeof(*k->args));
        if (!k->args)
            return kt_err_set(err, -ENOMEM, "out of memory decoding a record");
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            int rc = decode_arg(&v->via.array.ptr[i], &k->args[i], err);
            if (rc < 0)
                return rc;
            k->n_args++;
        }
        return 0;
    }
}

static const char *const layout_fields[] = {"input", "layout"};

static int layout_field(int f, const msgpack_object *v, void *ctx, kt_err *err)
{
    cache_layout *l = ctx;
    if (f == 0)
        return get_i32(v, &l->input, "layout.input", err);
    return get_strdup(v, &l->layout, NULL, "layout.layout", err);
}

static const char *const time_fields[] = {"median", "p10", "p90", "mode", "reps"};
static const char *const verify_fields[] = {"ok", "norm", "max", "tol"};
static const char *const baseline_fields[] = {"cublaslt", "naive"};

static int time_field(int f, const msgpack_object *v, void *ctx, kt_err *err)
{
    cache_record *r = ctx;
    int e = 0, rc;
    switch (f) {
    case 0:
        return get_f64(v, &r->time_ns, "time.median", err);
    case 1:
        return get_f64(v, &r->time_p10_ns, "time.p10", err);
    case 2:
        return get_f64(v, &r->time_p90_ns, "time.p90", err);
    case 3:
        rc = get_enum(v, timing_names, 2, &e, "time.mode", err);
        r->timing = (cache_timing)e;
        return rc;
    default:
        return get_u32(v, &r->reps, "time.reps", err);
    }
}

static int verify_field(int f, const msgpack_object *v, void *ctx, kt_err *err)
{
    cache_record *r = ctx;
    switch (f) {
    case 0:
        if (v->type != MSGPACK_OBJECT_BOOLEAN)
            return BAD("record field 'verify.ok': expected a boolean");
        r->verified = v->via.boolean;
        return 0;
    case 1:
        return get_f64(v, &r->err_norm, "verify.norm", err);
    case 2:
        return get_f64(v, &r->err_max, "verify.max", err);
    default:
        return get_f64(v, &r->tolerance, "verify.tol", err);
    }
}

static int baseline_field(int f, const msgpack_object *v, void *ctx, kt_err *err)
{
    cache_record *r = ctx;
    return get_f64(v, f == 0 ? &r->cublaslt_ns : &r->naive_ns,
                   f == 0 ? "baseline.cublaslt" : "baseline.naive", err);
}

static int decode_shapes(const msgpack_object *v, cache_key *k, kt_err *err)
{
    if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > CACHE_MAX_SHAPES)
        return BAD("record field 'shapes': expected at most %d pairs", CACHE_MAX_SHAPES);
    k->n_shapes = 0;
    for (uint32_t i = 0; i < v->via.array.size; i++) {
        const msgpack_object *p = &v->via.array.ptr[i];
        if (p->type != MSGPACK_OBJECT_ARRAY || p->via.array.size != 2)
            return BAD("record field 'shapes': expected [name, value] pairs");
        cache_bound *b = &k->shapes[i];
        int rc = get_strbuf(&p->via.array.ptr[0], b->name, sizeof(b->name), "shapes.name", err);
        if (rc < 0 ||
            (rc = get_i64(&p->via.array.ptr[1], 1, INT64_MAX, &b->value, "shapes.value", err)) < 0)
            return rc;
        k->n_shapes++;
    }
    return 0;
}

static const char *const record_fields[] = {
    "v",      "gpu",      "sig",       "shapes",  "precision", "graph",    "source",
    "cubin",  "kernels",  "workspace", "layouts", "family",    "schedule", "time",
    "verify", "baseline", "ktune",     "nvrtc",   "created"};

static int record_field(int f, const msgpack_object *v, void *ctx, kt_err *err)
{
    cache_record *r = ctx;
    uint64_t u = 0;
    int rc = 0;
    char name[16];
    switch (f) {
    case 0:
        if ((rc = get_u64(v, UINT32_MAX, &u, "v", err)) < 0)
            return rc;
        if (u != CACHE_RECORD_VERSION)
            return BAD("record version %llu is not supported (this build reads %d)",
                       (unsigned long long)u, CACHE_RECORD_VERSION);
        return 0;
    case 1:
        return walk_map(v, gpu_fields, KT_ARRAY_LEN(gpu_fields), gpu_field, &r->key.gpu, "gpu",
                        err);
    case 2:
        if (v->type != MSGPACK_OBJECT_BIN || v->via.bin.size != OPS_SIG_BYTES)
            return BAD("record field 'sig': expected %d bytes", OPS_SIG_BYTES);
        memcpy(r->key.sig, v->via.bin.ptr, OPS_SIG_BYTES);
        return 0;
    case 3:
        return decode_shapes(v, &r->key, err);
    case 4:
        if ((rc = get_strbuf(v, name, sizeof(name), "precision", err)) < 0)
            return rc;
        if (ops_precision_from_name(name, &r->key.precision) < 0)
            return BAD("record field 'precision': unknown value '%s'", name);
        return 0;
    case 5:
        return get_strdup(v, &r->graph_name, NULL, "graph", err);
    case 6:
        return get_strdup(v, &r->source, &r->source_len, "source", err);
    case 7:
        if (v->type != MSGPACK_OBJECT_BIN)
            return BAD("record field 'cubin': expected bytes");
        free(r->cubin);
        r->cubin = malloc(v->via.bin.size ? v->via.bin.size : 1);
        if (!r->cubin)
            return kt_err_set(err, -ENOMEM, "out of memory decoding a record");
        memcpy(r->cubin, v->via.bin.ptr, v->via.bin.size);
        r->cubin_len = v->via.bin.size;
        return 0;
    case 8:
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size < 1 ||
            v->via.array.size > CACHE_MAX_KERNELS)
            return BAD("record field 'kernels': expected 1..%d kernels", CACHE_MAX_KERNELS);
        r->kernels = calloc(v->via.array.size, sizeof(*r->kernels));
        if (!r->kernels)
            return kt_err_set(err, -ENOMEM, "out of memory decoding a record");
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            r->n_kernels++;
            rc = walk_map(&v->via.array.ptr[i], kernel_fields, KT_ARRAY_LEN(kernel_fields),
                          kernel_field, &r->kernels[i], "kernel", err);
            if (rc < 0)
                return rc;
        }
        return 0;
    case 9:
        return get_u64(v, UINT64_MAX, &r->workspace_bytes, "workspace", err);
    case 10:
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > 1024)
            return BAD("record field 'layouts': expected an array");
        r->layouts = calloc(v->via.array.size ? v->via.array.size : 1, sizeof(*r->layouts));
        if (!r->layouts)
            return kt_err_set(err, -ENOMEM, "out of memory decoding a record");
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            r->n_layouts++;
            rc = walk_map(&v->via.array.ptr[i], layout_fields, 2, layout_field, &r->layouts[i],
                          "layout", err);
            if (rc < 0)
                return rc;
        }
        return 0;
    case 11:
        return get_strdup(v, &r->family, NULL, "family", err);
    case 12:
        return get_strdup(v, &r->schedule, NULL, "schedule", err);
    case 13:
        return walk_map(v, time_fields, KT_ARRAY_LEN(time_fields), time_field, r, "time", err);
    case 14:
        return walk_map(v, verify_fields, KT_ARRAY_LEN(verify_fields), verify_field, r, "verify",
                        err);
    case 15:
        return walk_map(v, baseline_fields, 2, baseline_field, r, "baseline", err);
    case 16:
        return get_strdup(v, &r->ktune_version, NULL, "ktune", err);
    case 17:
        return get_i32(v, &r->nvrtc_version, "nvrtc", err);
    default:
        return get_i64(v, INT64_MIN, INT64_MAX, &r->created, "created", err);
    }
}

/* Checks the trailing checksum and unpacks the body into *res (caller destroys it). */
static int unpack_value(const void *buf, size_t len, msgpack_unpacked *res, const char *what,
                        kt_err *err)
{
    if (!cache_value_check(buf, len))
        return BAD("%s: checksum mismatch (the stored bytes are damaged)", what);
    size_t off = 0, body = len - CACHE_CHECKSUM_BYTES;
    msgpack_unpack_return ur = msgpack_unpack_next(res, buf, body, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        return kt_err_set(err, -ENOMEM, "out of memory decoding a %s", what);
    if (ur != MSGPACK_UNPACK_SUCCESS || off != body)
        return BAD("%s: malformed msgpack body", what);
    if (res->data.type != MSGPACK_OBJECT_MAP)
        return BAD("%s: body is not a map", what);
    return 0;
}

int cache_record_decode(const void *buf, size_t len, cache_record *out, kt_err *err)
{
    cache_record_free(out);
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    int rc = unpack_value(buf, len, &res, "record", err);
    if (rc == 0)
        rc = walk_map(&res.data, record_fields, KT_ARRAY_LEN(record_fields), record_field, out,
                      "record", err);
    cache_bound sorted[CACHE_MAX_SHAPES];
    if (rc == 0 && cache_key_sorted(&out->key, sorted, NULL) < 0)
        rc = BAD("record: its key parts are invalid");
    msgpack_unpacked_destroy(&res);
    return rc;
}

static const char *const trial_fields[] = {"v", "cand", "status", "time", "error", "detail", "ts"};

static int trial_field(int f, const msgpack_object *v, void *ctx, kt_err *err)
{
    cache_trial *t = ctx;
    uint64_t u = 0;
    int e = 0, rc;
    switch (f) {
    case 0:
        if ((rc = get_u64(v, UINT32_MAX, &u, "v", err)) < 0)
            return rc;
        return u == CACHE_TRIAL_VERSION
                   ? 0
                   : BAD("trial version %llu is not supported", (unsigned long long)u);
    case 1:
        return get_strbuf(v, t->cand, sizeof(t->cand), "cand", err);
    case 2:
        rc = get_enum(v, trial_status_names, CACHE_TRIAL_STATUS_COUNT, &e, "status", err);
        t->status = (cache_trial_status)e;
        return rc;
    case 3:
        return get_f64(v, &t->time_ns, "time", err);
    case 4:
        return get_f64(v, &t->error, "error", err);
    case 5:
        return get_strbuf(v, t->detail, sizeof(t->detail), "detail", err);
    default:
        return get_i64(v, INT64_MIN, INT64_MAX, &t->ts, "ts", err);
    }
}

int cache_trial_decode(const void *buf, size_t len, cache_trial *out, kt_err *err)
{
    memset(out, 0, sizeof(*out));
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    int rc = unpack_value(buf, len, &res, "trial", err);
    if (rc == 0)
        rc = walk_map(&res.data, trial_fields, KT_ARRAY_LEN(trial_fields), trial_field, out,
                      "trial", err);
    msgpack_unpacked_destroy(&res);
    return rc;
}
