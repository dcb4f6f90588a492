/* Stored form of kernel records and trial entries: a canonical msgpack map followed by SHA-256 of
 * the map's bytes. Field names and types are in docs/formats.md (part 3). */
#include "internal.h"
#include "ops/ops.h"
#include "ktune_config.h"

#include <inttypes.h>
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
    free(r->slots);
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
    free(r->signer);
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

static bool bad_num(double v)
{
    return !isfinite(v) || v < 0;
}

/* A tensor-map argument: a valid map on a pointer argument, inside the buffer it lies over. */
static int check_tmap(const cache_record *r, const cache_arg *a, int i, int j, int *n_tmaps,
                      kt_err *err)
{
    ops_diag d = {0};
    if (a->kind == CACHE_ARG_SCALAR)
        return kt_err_set(err, -EINVAL, "record: kernel %d argument %d: a scalar with a tensor map",
                          i, j);
    if (++*n_tmaps > CACHE_MAX_TMAPS)
        return kt_err_set(err, -EINVAL, "record: kernel %d: more than %d tensor maps", i,
                          CACHE_MAX_TMAPS);
    if (ops_tensor_map_check(&a->tmap, &d) < 0)
        return kt_err_set(err, -EINVAL, "record: kernel %d argument %d: %s", i, j, d.msg);
    uint64_t have = a->bytes;
    if (a->kind != CACHE_ARG_WORKSPACE) {
        const cache_slot *sl =
            &r->slots[a->kind == CACHE_ARG_INPUT ? a->index : r->n_inputs + a->index];
        have = ops_dtype_size(sl->dtype);
        for (int k = 0; k < sl->rank; k++)
            have *= (uint64_t)sl->dims[k];
    }
    uint64_t span = ops_tensor_map_span(&a->tmap);
    if (span > have)
        return kt_err_set(err, -EINVAL,
                          "record: kernel %d argument %d: its tensor map spans %" PRIu64
                          " bytes of a %" PRIu64 "-byte buffer",
                          i, j, span, have);
    return 0;
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
    if (r->n_inputs < 0 || r->n_outputs < 1 || r->n_inputs > OPS_MAX_GRAPH_TENSORS ||
        r->n_outputs > OPS_MAX_GRAPH_TENSORS || !r->slots)
        return kt_err_set(err, -EINVAL, "record: %d inputs and %d outputs (outputs 1..%d)",
                          r->n_inputs, r->n_outputs, OPS_MAX_GRAPH_TENSORS);
    for (int i = 0; i < r->n_inputs + r->n_outputs; i++) {
        const cache_slot *sl = &r->slots[i];
        if (sl->dtype < OPS_DT_F32 || sl->dtype > OPS_DT_BF16 || sl->rank < 0 ||
            sl->rank > OPS_MAX_RANK)
            return kt_err_set(err, -EINVAL, "record: slot %d: bad dtype or rank", i);
        for (int k = 0; k < sl->rank; k++)
            if (sl->dims[k] < 0 || sl->dims[k] > OPS_MAX_DIM)
                return kt_err_set(err, -EINVAL, "record: slot %d: dimension %d out of range", i, k);
    }
    if (r->signer && (!r->signer[0] || strlen(r->signer) > 64))
        return kt_err_set(err, -EINVAL, "record: signer must be 1..64 bytes");
    if (bad_num(r->key.tolerance))
        return kt_err_set(err, -EINVAL, "record: key tolerance must be finite and >= 0");
    if (bad_num(r->time_ns) || bad_num(r->time_p10_ns) || bad_num(r->time_p90_ns) ||
        bad_num(r->err_norm) || bad_num(r->err_max) || bad_num(r->tolerance) ||
        bad_num(r->cublaslt_ns) || bad_num(r->naive_ns))
        return kt_err_set(err, -EINVAL, "record: times and errors must be finite and >= 0");
    for (int i = 0; i < r->n_kernels; i++) {
        const cache_kernel *k = &r->kernels[i];
        int n_tmaps = 0, rc;
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
            if (a->kind == CACHE_ARG_WORKSPACE &&
                (a->bytes == 0 || a->offset > r->workspace_bytes ||
                 a->bytes > r->workspace_bytes - a->offset))
                return kt_err_set(err, -EINVAL,
                                  "record: kernel %d argument %d: workspace bytes [%" PRIu64
                                  ", +%" PRIu64 ") past its %" PRIu64,
                                  i, j, a->offset, a->bytes, r->workspace_bytes);
            if ((a->kind == CACHE_ARG_INPUT && (a->index < 0 || a->index >= r->n_inputs)) ||
                (a->kind == CACHE_ARG_OUTPUT && (a->index < 0 || a->index >= r->n_outputs)))
                return kt_err_set(err, -EINVAL, "record: kernel %d argument %d: %s %d of %d", i, j,
                                  a->kind == CACHE_ARG_INPUT ? "input" : "output", a->index,
                                  a->kind == CACHE_ARG_INPUT ? r->n_inputs : r->n_outputs);
            if (a->has_tmap && (rc = check_tmap(r, a, i, j, &n_tmaps, err)) < 0)
                return rc;
        }
    }
    /* Every output slot is written by some launch (the caller would get uninitialised memory). */
    return cache_record_check_outputs(r, r->n_outputs, err);
}

int cache_record_check_outputs(const cache_record *r, int n_out, kt_err *err)
{
    if (n_out < 1)
        return kt_err_set(err, -EINVAL, "record: %d outputs", n_out);
    for (int i = 0; i < r->n_kernels; i++)
        for (int j = 0; j < r->kernels[i].n_args; j++) {
            const cache_arg *a = &r->kernels[i].args[j];
            if (a->kind == CACHE_ARG_OUTPUT && (a->index < 0 || a->index >= n_out))
                return kt_err_set(err, -EINVAL,
                                  "record: kernel %s argument %d names output %d; the graph has "
                                  "%d",
                                  r->kernels[i].entry, j, (int)a->index, n_out);
        }
    for (int slot = 0; slot < n_out; slot++) {
        bool written = false;
        for (int i = 0; i < r->n_kernels && !written; i++)
            for (int j = 0; j < r->kernels[i].n_args && !written; j++)
                written = r->kernels[i].args[j].kind == CACHE_ARG_OUTPUT &&
                          r->kernels[i].args[j].index == slot;
        if (!written)
            return kt_err_set(err, -EINVAL,
                              "record: no launch writes output %d (of %d): the caller would get "
                              "it unwritten",
                              slot, n_out);
    }
    return 0;
}

static int pk_arg(msgpack_packer *pk, const cache_arg *a)
{
    bool three = a->kind == CACHE_ARG_SCALAR || a->kind == CACHE_ARG_WORKSPACE;
    bool tmap = a->has_tmap && a->kind != CACHE_ARG_SCALAR; /* "tmap" last, only when present */
    if (msgpack_pack_map(pk, (three ? 3 : 2) + tmap) ||
        kt_mp_pack_kstr(pk, "kind", arg_kind_names[a->kind]))
        return -1;
    switch (a->kind) {
    case CACHE_ARG_INPUT:
    case CACHE_ARG_OUTPUT:
        return kt_mp_pack_ki64(pk, "index", a->index) ||
               (tmap && (kt_mp_pack_str(pk, "tmap") || ops_tensor_map_pack(pk, &a->tmap)));
    case CACHE_ARG_WORKSPACE:
        return kt_mp_pack_ku64(pk, "offset", a->offset) || kt_mp_pack_ku64(pk, "bytes", a->bytes) ||
               (tmap && (kt_mp_pack_str(pk, "tmap") || ops_tensor_map_pack(pk, &a->tmap)));
    default:
        if (kt_mp_pack_kstr(pk, "type", scalar_names[a->scalar]))
            return -1;
        if (a->scalar == CACHE_SCALAR_I32 || a->scalar == CACHE_SCALAR_I64)
            return kt_mp_pack_ki64(pk, "value", a->ival);
        return kt_mp_pack_kf64(pk, "value", a->fval);
    }
}

static int pk_u32x3(msgpack_packer *pk, const char *key, const uint32_t v[3])
{
    return kt_mp_pack_str(pk, key) || msgpack_pack_array(pk, 3) || msgpack_pack_uint32(pk, v[0]) ||
           msgpack_pack_uint32(pk, v[1]) || msgpack_pack_uint32(pk, v[2]);
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

    PK(msgpack_pack_map(&pk, r->signer ? 23 : 22));
    bool any_tmap = false;
    for (int i = 0; i < r->n_kernels; i++)
        for (int j = 0; j < r->kernels[i].n_args; j++)
            any_tmap = any_tmap || r->kernels[i].args[j].has_tmap;
    PK(kt_mp_pack_ku64(&pk, "v", any_tmap ? CACHE_RECORD_VERSION : CACHE_RECORD_VERSION_BASE));
    PK(kt_mp_pack_str(&pk, "gpu"));
    PK(msgpack_pack_map(&pk, 7));
    PK(kt_mp_pack_kstr(&pk, "name", g->name));
    PK(kt_mp_pack_ki64(&pk, "sm_major", g->sm_major));
    PK(kt_mp_pack_ki64(&pk, "sm_minor", g->sm_minor));
    PK(kt_mp_pack_ki64(&pk, "sm_count", g->sm_count));
    PK(kt_mp_pack_ku64(&pk, "mem", g->mem_bytes));
    PK(kt_mp_pack_ki64(&pk, "driver", g->driver_version));
    PK(kt_mp_pack_ki64(&pk, "cuda", g->cuda_version));
    PK(kt_mp_pack_kbin(&pk, "sig", r->key.sig, OPS_SIG_BYTES));
    PK(kt_mp_pack_kbin(&pk, "problem", r->key.problem, OPS_SIG_BYTES));
    PK(cache_pk_shapes(&pk, shapes, r->key.n_shapes));
    PK(kt_mp_pack_kstr(&pk, "precision", ops_precision_name(r->key.precision)));
    PK(kt_mp_pack_kf64(&pk, "key_tolerance", r->key.tolerance));
    PK(kt_mp_pack_str(&pk, "slots"));
    PK(msgpack_pack_array(&pk, 2));
    for (int io = 0; io < 2; io++) {
        int from = io ? r->n_inputs : 0, n = io ? r->n_outputs : r->n_inputs;
        PK(msgpack_pack_array(&pk, (size_t)n));
        for (int i = from; i < from + n; i++) {
            const cache_slot *sl = &r->slots[i];
            PK(msgpack_pack_array(&pk, 2));
            PK(kt_mp_pack_str(&pk, ops_dtype_name(sl->dtype)));
            PK(msgpack_pack_array(&pk, (size_t)sl->rank));
            for (int k = 0; k < sl->rank; k++)
                PK(msgpack_pack_int64(&pk, sl->dims[k]));
        }
    }
    PK(kt_mp_pack_kstr(&pk, "graph", r->graph_name));
    PK(kt_mp_pack_str(&pk, "source"));
    PK(msgpack_pack_str_with_body(&pk, r->source ? r->source : "", r->source_len));
    PK(kt_mp_pack_kbin(&pk, "cubin", r->cubin, r->cubin_len));
    PK(kt_mp_pack_str(&pk, "kernels"));
    PK(msgpack_pack_array(&pk, (size_t)r->n_kernels));
    for (int i = 0; i < r->n_kernels; i++) {
        const cache_kernel *k = &r->kernels[i];
        PK(msgpack_pack_map(&pk, 6));
        PK(kt_mp_pack_kstr(&pk, "entry", k->entry));
        PK(pk_u32x3(&pk, "grid", k->grid));
        PK(pk_u32x3(&pk, "block", k->block));
        PK(kt_mp_pack_ku64(&pk, "smem", k->smem_bytes));
        PK(kt_mp_pack_str(&pk, "zero"));
        PK(msgpack_pack_array(&pk, 2));
        PK(msgpack_pack_uint64(&pk, k->zero_offset));
        PK(msgpack_pack_uint64(&pk, k->zero_bytes));
        PK(kt_mp_pack_str(&pk, "args"));
        PK(msgpack_pack_array(&pk, (size_t)k->n_args));
        for (int j = 0; j < k->n_args; j++)
            PK(pk_arg(&pk, &k->args[j]));
    }
    PK(kt_mp_pack_ku64(&pk, "workspace", r->workspace_bytes));
    PK(kt_mp_pack_str(&pk, "layouts"));
    PK(msgpack_pack_array(&pk, (size_t)r->n_layouts));
    for (int i = 0; i < r->n_layouts; i++) {
        PK(msgpack_pack_map(&pk, 2));
        PK(kt_mp_pack_ki64(&pk, "input", r->layouts[i].input));
        PK(kt_mp_pack_kstr(&pk, "layout", r->layouts[i].layout));
    }
    PK(kt_mp_pack_kstr(&pk, "family", r->family));
    PK(kt_mp_pack_kstr(&pk, "schedule", r->schedule));
    PK(kt_mp_pack_str(&pk, "time"));
    PK(msgpack_pack_map(&pk, 5));
    PK(kt_mp_pack_kf64(&pk, "median", r->time_ns));
    PK(kt_mp_pack_kf64(&pk, "p10", r->time_p10_ns));
    PK(kt_mp_pack_kf64(&pk, "p90", r->time_p90_ns));
    PK(kt_mp_pack_kstr(&pk, "mode", timing_names[r->timing]));
    PK(kt_mp_pack_ku64(&pk, "reps", r->reps));
    PK(kt_mp_pack_str(&pk, "verify"));
    PK(msgpack_pack_map(&pk, 4));
    PK(kt_mp_pack_kbool(&pk, "ok", r->verified));
    PK(kt_mp_pack_kf64(&pk, "norm", r->err_norm));
    PK(kt_mp_pack_kf64(&pk, "max", r->err_max));
    PK(kt_mp_pack_kf64(&pk, "tol", r->tolerance));
    PK(kt_mp_pack_str(&pk, "baseline"));
    PK(msgpack_pack_map(&pk, 2));
    PK(kt_mp_pack_kf64(&pk, "cublaslt", r->cublaslt_ns));
    PK(kt_mp_pack_kf64(&pk, "naive", r->naive_ns));
    PK(kt_mp_pack_kstr(&pk, "ktune", r->ktune_version ? r->ktune_version : KTUNE_VERSION));
    PK(kt_mp_pack_ki64(&pk, "nvrtc", r->nvrtc_version));
    PK(kt_mp_pack_ki64(&pk, "created", r->created));
    if (r->signer) /* optional: records without it keep their v3 bytes */
        PK(kt_mp_pack_kstr(&pk, "signer", r->signer));
    if (cache_value_finish(&sb, out, len) < 0)
        goto oom;
    return 0;
oom:
    msgpack_sbuffer_destroy(&sb);
    return kt_err_set(err, -ENOMEM, "out of memory encoding a record");
}

/* What a trial must satisfy to be stored; the decoder applies the same checks. */
static int check_trial(const cache_trial *t, kt_err *err)
{
    if (!cache_trial_status_name(t->status))
        return kt_err_set(err, -EINVAL, "trial: bad status %d", (int)t->status);
    size_t cl = strnlen(t->cand, sizeof(t->cand));
    if (cl == 0 || cl == sizeof(t->cand))
        return kt_err_set(err, -EINVAL, "trial: candidate id empty or longer than %d bytes",
                          CACHE_CAND_MAX - 1);
    if (!isfinite(t->time_ns) || !isfinite(t->error))
        return kt_err_set(err, -EINVAL, "trial: time and error must be finite");
    if (t->ts_ms < 0)
        return kt_err_set(err, -EINVAL, "trial: ts_ms must be >= 0");
    return 0;
}

int cache_trial_encode(const cache_trial *t, uint8_t **out, size_t *len, kt_err *err)
{
    int crc = check_trial(t, err);
    if (crc < 0)
        return crc;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    char detail[sizeof(t->detail)];
    snprintf(detail, sizeof(detail), "%.*s", (int)sizeof(t->detail) - 1, t->detail);
    PK(msgpack_pack_map(&pk, 8));
    PK(kt_mp_pack_ku64(&pk, "v", CACHE_TRIAL_VERSION));
    PK(kt_mp_pack_kstr(&pk, "cand", t->cand));
    PK(kt_mp_pack_kstr(&pk, "status", trial_status_names[t->status]));
    PK(kt_mp_pack_kf64(&pk, "time", t->time_ns));
    PK(kt_mp_pack_kf64(&pk, "error", t->error));
    PK(kt_mp_pack_kstr(&pk, "detail", detail));
    PK(kt_mp_pack_ki64(&pk, "ts", t->ts));
    PK(kt_mp_pack_ki64(&pk, "ts_ms", t->ts_ms));
    if (cache_value_finish(&sb, out, len) < 0)
        goto oom;
    return 0;
oom:
    msgpack_sbuffer_destroy(&sb);
    return kt_err_set(err, -ENOMEM, "out of memory encoding a trial");
}

/* ---- decoding ---- */

#define BAD(...) kt_err_set(d->err, -EBADMSG, __VA_ARGS__)

static int get_u32x3(const msgpack_object *o, uint32_t v[3], const char *what, cache_dec *d)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
        return BAD("%s field '%s': expected 3 integers", d->doc, what);
    for (int i = 0; i < 3; i++) {
        int rc = cache_get_u32(&o->via.array.ptr[i], &v[i], what, d);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static const char *const gpu_fields[] = {"name", "sm_major", "sm_minor", "sm_count",
                                         "mem",  "driver",   "cuda"};

static int gpu_field(int f, const msgpack_object *v, void *ctx, cache_dec *d)
{
    cache_gpu *g = ctx;
    switch (f) {
    case 0:
        return cache_get_strbuf(v, g->name, sizeof(g->name), "gpu.name", d);
    case 1:
        return cache_get_i32(v, &g->sm_major, "gpu.sm_major", d);
    case 2:
        return cache_get_i32(v, &g->sm_minor, "gpu.sm_minor", d);
    case 3:
        return cache_get_i32(v, &g->sm_count, "gpu.sm_count", d);
    case 4:
        return cache_get_u64(v, UINT64_MAX, &g->mem_bytes, "gpu.mem", d);
    case 5:
        return cache_get_i32(v, &g->driver_version, "gpu.driver", d);
    default:
        return cache_get_i32(v, &g->cuda_version, "gpu.cuda", d);
    }
}

static const char *const arg_fields_io[] = {"kind", "index", "tmap"};
static const char *const arg_fields_ws[] = {"kind", "offset", "bytes", "tmap"};
static const char *const arg_fields_scalar[] = {"kind", "type", "value"};

static int arg_field(int f, const msgpack_object *v, void *ctx, cache_dec *d)
{
    cache_arg *a = ctx;
    int e = 0, rc;
    if (f == 0)
        return 0; /* kind: read before the walk */
    bool io = a->kind == CACHE_ARG_INPUT || a->kind == CACHE_ARG_OUTPUT;
    if ((io && f == 2) || (a->kind == CACHE_ARG_WORKSPACE && f == 3)) { /* "tmap" */
        ops_diag od = {0};
        if (d->v < CACHE_RECORD_VERSION)
            return BAD("record field 'arg.tmap' in a version %llu record",
                       (unsigned long long)d->v);
        if (ops_tensor_map_unpack(v, &a->tmap, &od) < 0)
            return BAD("record field 'arg.tmap': %s", od.msg);
        a->has_tmap = true;
        return 0;
    }
    switch (a->kind) {
    case CACHE_ARG_INPUT:
    case CACHE_ARG_OUTPUT:
        return cache_get_i32(v, &a->index, "arg.index", d);
    case CACHE_ARG_WORKSPACE:
        return f == 1 ? cache_get_u64(v, UINT64_MAX, &a->offset, "arg.offset", d)
                      : cache_get_u64(v, UINT64_MAX, &a->bytes, "arg.bytes", d);
    default:
        break;
    }
    if (f == 1) {
        rc = cache_get_enum(v, scalar_names, CACHE_SCALAR_COUNT, &e, "arg.type", d);
        a->scalar = (cache_scalar)e;
        return rc;
    }
    /* value: the type field may come after it, so accept either form and check below */
    if (v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32)
        return cache_get_f64(v, &a->fval, "arg.value", d);
    return cache_get_i64(v, INT64_MIN, INT64_MAX, &a->ival, "arg.value", d);
}

static int decode_arg(const msgpack_object *o, cache_arg *a, cache_dec *d)
{
    memset(a, 0, sizeof(*a));
    if (o->type != MSGPACK_OBJECT_MAP)
        return BAD("record field 'arg': expected a map");
    const msgpack_object *kind = NULL;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        if (kt_mp_str_is(&o->via.map.ptr[i].key, "kind"))
            kind = &o->via.map.ptr[i].val;
    }
    int e = 0;
    if (!kind)
        return BAD("record field 'arg.kind' is missing");
    int rc = cache_get_enum(kind, arg_kind_names, CACHE_ARG_KIND_COUNT, &e, "arg.kind", d);
    if (rc < 0)
        return rc;
    a->kind = (cache_arg_kind)e;
    switch (a->kind) {
    case CACHE_ARG_INPUT:
    case CACHE_ARG_OUTPUT:
        return cache_decode_map_opt(o, arg_fields_io, 3, 1ull << 2, arg_field, a, "arg", d);
    case CACHE_ARG_WORKSPACE:
        return cache_decode_map_opt(o, arg_fields_ws, 4, 1ull << 3, arg_field, a, "arg", d);
    default:
        rc = cache_decode_map(o, arg_fields_scalar, 3, arg_field, a, "arg", d);
        if (rc < 0)
            return rc;
        /* the value's msgpack form must match its declared type */
        bool is_int = a->scalar == CACHE_SCALAR_I32 || a->scalar == CACHE_SCALAR_I64;
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (!kt_mp_str_is(&kv->key, "value"))
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

static int kernel_field(int f, const msgpack_object *v, void *ctx, cache_dec *d)
{
    cache_kernel *k = ctx;
    switch (f) {
    case 0:
        return cache_get_strdup(v, &k->entry, NULL, "kernel.entry", d);
    case 1:
        return get_u32x3(v, k->grid, "kernel.grid", d);
    case 2:
        return get_u32x3(v, k->block, "kernel.block", d);
    case 3:
        return cache_get_u32(v, &k->smem_bytes, "kernel.smem", d);
    case 5: {
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size != 2)
            return BAD("record field 'kernel.zero': expected [offset, bytes]");
        int rc = cache_get_u64(&v->via.array.ptr[0], UINT64_MAX, &k->zero_offset, "kernel.zero", d);
        return rc < 0 ? rc
                      : cache_get_u64(&v->via.array.ptr[1], UINT64_MAX, &k->zero_bytes,
                                      "kernel.zero", d);
    }
    default:
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > CACHE_MAX_ARGS)
            return BAD("record field 'kernel.args': expected at most %d arguments", CACHE_MAX_ARGS);
        free(k->args);
        k->n_args = 0;
        k->args = calloc(v->via.array.size ? v->via.array.size : 1, sizeof(*k->args));
        if (!k->args)
            return kt_err_set(d->err, -ENOMEM, "out of memory decoding a record");
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            int rc = decode_arg(&v->via.array.ptr[i], &k->args[i], d);
            if (rc < 0)
                return rc;
            k->n_args++;
        }
        return 0;
    }
}

static const char *const layout_fields[] = {"input", "layout"};

static int layout_field(int f, const msgpack_object *v, void *ctx, cache_dec *d)
{
    cache_layout *l = ctx;
    if (f == 0)
        return cache_get_i32(v, &l->input, "layout.input", d);
    return cache_get_strdup(v, &l->layout, NULL, "layout.layout", d);
}

static const char *const time_fields[] = {"median", "p10", "p90", "mode", "reps"};
static const char *const verify_fields[] = {"ok", "norm", "max", "tol"};
static const char *const baseline_fields[] = {"cublaslt", "naive"};

static int time_field(int f, const msgpack_object *v, void *ctx, cache_dec *d)
{
    cache_record *r = ctx;
    int e = 0, rc;
    switch (f) {
    case 0:
        return cache_get_f64(v, &r->time_ns, "time.median", d);
    case 1:
        return cache_get_f64(v, &r->time_p10_ns, "time.p10", d);
    case 2:
        return cache_get_f64(v, &r->time_p90_ns, "time.p90", d);
    case 3:
        rc = cache_get_enum(v, timing_names, 2, &e, "time.mode", d);
        r->timing = (cache_timing)e;
        return rc;
    default:
        return cache_get_u32(v, &r->reps, "time.reps", d);
    }
}

static int verify_field(int f, const msgpack_object *v, void *ctx, cache_dec *d)
{
    cache_record *r = ctx;
    switch (f) {
    case 0:
        return cache_get_bool(v, &r->verified, "verify.ok", d);
    case 1:
        return cache_get_f64(v, &r->err_norm, "verify.norm", d);
    case 2:
        return cache_get_f64(v, &r->err_max, "verify.max", d);
    default:
        return cache_get_f64(v, &r->tolerance, "verify.tol", d);
    }
}

static int baseline_field(int f, const msgpack_object *v, void *ctx, cache_dec *d)
{
    cache_record *r = ctx;
    return cache_get_f64(v, f == 0 ? &r->cublaslt_ns : &r->naive_ns,
                         f == 0 ? "baseline.cublaslt" : "baseline.naive", d);
}

static const char *const record_fields[] = {
    "v",       "gpu",       "sig",     "shapes",  "precision",     "graph", "source", "cubin",
    "kernels", "workspace", "layouts", "family",  "schedule",      "time",  "verify", "baseline",
    "ktune",   "nvrtc",     "created", "problem", "key_tolerance", "slots", "signer"};
#define SIGNER_FIELD 22 /* optional */

/* "slots": [[inputs...], [outputs...]], each [dtype, [dims...]]. */
static int get_slots(const msgpack_object *v, cache_record *r, cache_dec *d)
{
    if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size != 2)
        return BAD("record field 'slots': expected [inputs, outputs]");
    const msgpack_object *in = &v->via.array.ptr[0], *out = &v->via.array.ptr[1];
    if (in->type != MSGPACK_OBJECT_ARRAY || out->type != MSGPACK_OBJECT_ARRAY ||
        in->via.array.size > OPS_MAX_GRAPH_TENSORS || out->via.array.size > OPS_MAX_GRAPH_TENSORS)
        return BAD("record field 'slots': expected at most %d inputs and outputs",
                   OPS_MAX_GRAPH_TENSORS);
    r->n_inputs = (int)in->via.array.size;
    r->n_outputs = (int)out->via.array.size;
    r->slots = calloc((size_t)(r->n_inputs + r->n_outputs) + 1, sizeof(*r->slots));
    if (!r->slots)
        return kt_err_set(d->err, -ENOMEM, "out of memory decoding a record");
    for (int i = 0; i < r->n_inputs + r->n_outputs; i++) {
        const msgpack_object *p =
            i < r->n_inputs ? &in->via.array.ptr[i] : &out->via.array.ptr[i - r->n_inputs];
        cache_slot *sl = &r->slots[i];
        char dt[8];
        if (p->type != MSGPACK_OBJECT_ARRAY || p->via.array.size != 2 ||
            p->via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY ||
            p->via.array.ptr[1].via.array.size > OPS_MAX_RANK)
            return BAD("record field 'slots': expected [dtype, [dims]] with at most %d dims",
                       OPS_MAX_RANK);
        int rc = cache_get_strbuf(&p->via.array.ptr[0], dt, sizeof(dt), "slots.dtype", d);
        if (rc < 0)
            return rc;
        if (ops_dtype_from_name(dt, &sl->dtype) < 0 || sl->dtype == OPS_DT_F64)
            return BAD("record field 'slots': unknown dtype '%s'", dt);
        const msgpack_object *dims = &p->via.array.ptr[1];
        sl->rank = (int)dims->via.array.size;
        for (int k = 0; k < sl->rank; k++)
            if ((rc = cache_get_i64(&dims->via.array.ptr[k], 0, OPS_MAX_DIM, &sl->dims[k],
                                    "slots.dims", d)) < 0)
                return rc;
    }
    return 0;
}

static int record_field(int f, const msgpack_object *v, void *ctx, cache_dec *d)
{
    cache_record *r = ctx;
    int rc = 0;
    switch (f) {
    case 0:
        /* 3 and 4 differ only by arg.tmap, which a version 3 record may not hold */
        rc = cache_get_version(v, CACHE_RECORD_VERSION_BASE, d);
        if (rc < 0)
            rc = cache_get_version(v, CACHE_RECORD_VERSION, d);
        if (rc == 0)
            rc = cache_get_u64(v, UINT32_MAX, &d->v, "v", d);
        return rc;
    case 1:
        return cache_decode_map(v, gpu_fields, KT_ARRAY_LEN(gpu_fields), gpu_field, &r->key.gpu,
                                "gpu", d);
    case 2:
        return cache_get_sig(v, r->key.sig, d);
    case 3:
        return cache_get_shapes(v, r->key.shapes, &r->key.n_shapes, d);
    case 4:
        return cache_get_precision(v, &r->key.precision, d);
    case 5:
        return cache_get_strdup(v, &r->graph_name, NULL, "graph", d);
    case 6:
        return cache_get_strdup(v, &r->source, &r->source_len, "source", d);
    case 7:
        return cache_get_bindup(v, &r->cubin, &r->cubin_len, "cubin", d);
    case 8:
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size < 1 ||
            v->via.array.size > CACHE_MAX_KERNELS)
            return BAD("record field 'kernels': expected 1..%d kernels", CACHE_MAX_KERNELS);
        r->kernels = calloc(v->via.array.size, sizeof(*r->kernels));
        if (!r->kernels)
            return kt_err_set(d->err, -ENOMEM, "out of memory decoding a record");
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            r->n_kernels++;
            rc = cache_decode_map(&v->via.array.ptr[i], kernel_fields, KT_ARRAY_LEN(kernel_fields),
                                  kernel_field, &r->kernels[i], "kernel", d);
            if (rc < 0)
                return rc;
        }
        return 0;
    case 9:
        return cache_get_u64(v, UINT64_MAX, &r->workspace_bytes, "workspace", d);
    case 10:
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > 1024)
            return BAD("record field 'layouts': expected an array");
        r->layouts = calloc(v->via.array.size ? v->via.array.size : 1, sizeof(*r->layouts));
        if (!r->layouts)
            return kt_err_set(d->err, -ENOMEM, "out of memory decoding a record");
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            r->n_layouts++;
            rc = cache_decode_map(&v->via.array.ptr[i], layout_fields, 2, layout_field,
                                  &r->layouts[i], "layout", d);
            if (rc < 0)
                return rc;
        }
        return 0;
    case 11:
        return cache_get_strdup(v, &r->family, NULL, "family", d);
    case 12:
        return cache_get_strdup(v, &r->schedule, NULL, "schedule", d);
    case 13:
        return cache_decode_map(v, time_fields, KT_ARRAY_LEN(time_fields), time_field, r, "time",
                                d);
    case 14:
        return cache_decode_map(v, verify_fields, KT_ARRAY_LEN(verify_fields), verify_field, r,
                                "verify", d);
    case 15:
        return cache_decode_map(v, baseline_fields, 2, baseline_field, r, "baseline", d);
    case 16:
        return cache_get_strdup(v, &r->ktune_version, NULL, "ktune", d);
    case 17:
        return cache_get_i32(v, &r->nvrtc_version, "nvrtc", d);
    case 18:
        return cache_get_i64(v, INT64_MIN, INT64_MAX, &r->created, "created", d);
    case 19:
        if (v->type != MSGPACK_OBJECT_BIN || v->via.bin.size != OPS_SIG_BYTES)
            return BAD("record field 'problem': expected %d bytes", OPS_SIG_BYTES);
        memcpy(r->key.problem, v->via.bin.ptr, OPS_SIG_BYTES);
        return 0;
    case 20:
        return cache_get_f64(v, &r->key.tolerance, "key_tolerance", d);
    case 21:
        return get_slots(v, r, d);
    default:
        return cache_get_strdup(v, &r->signer, NULL, "signer", d);
    }
}

int cache_record_decode(const void *buf, size_t len, cache_record *out, kt_err *err)
{
    cache_dec dec = {.doc = "record", .err = err}, *d = &dec;
    cache_record_free(out);
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    int rc = cache_value_unpack(buf, len, &res, "record", d);
    if (rc == 0)
        rc = cache_decode_map_opt(&res.data, record_fields, KT_ARRAY_LEN(record_fields),
                                  1ull << SIGNER_FIELD, record_field, out, "record", d);
    cache_bound sorted[CACHE_MAX_SHAPES];
    if (rc == 0 && cache_key_sorted(&out->key, sorted, NULL) < 0)
        rc = BAD("record: its key parts are invalid");
    /* What decodes must be what the encoder accepts (fuzz_record found a value that decoded
     * but could not be written back): the same checks, as a corrupt record. */
    kt_err why = {0};
    if (rc == 0 && check_record(out, &why) < 0)
        rc = BAD("%s", why.msg);
    msgpack_unpacked_destroy(&res);
    return rc;
}

static const char *const trial_fields[] = {"v",     "cand",   "status", "time",
                                           "error", "detail", "ts",     "ts_ms"};
/* Added after trials were written: absent in older entries, decoded as 0. */
#define TRIAL_OPTIONAL (1ull << 7)

static int trial_field(int f, const msgpack_object *v, void *ctx, cache_dec *d)
{
    cache_trial *t = ctx;
    int e = 0, rc;
    switch (f) {
    case 0:
        return cache_get_version(v, CACHE_TRIAL_VERSION, d);
    case 1:
        return cache_get_strbuf(v, t->cand, sizeof(t->cand), "cand", d);
    case 2:
        rc = cache_get_enum(v, trial_status_names, CACHE_TRIAL_STATUS_COUNT, &e, "status", d);
        t->status = (cache_trial_status)e;
        return rc;
    case 3:
        return cache_get_f64(v, &t->time_ns, "time", d);
    case 4:
        return cache_get_f64(v, &t->error, "error", d);
    case 5:
        return cache_get_strbuf(v, t->detail, sizeof(t->detail), "detail", d);
    case 6:
        return cache_get_i64(v, INT64_MIN, INT64_MAX, &t->ts, "ts", d);
    default:
        return cache_get_i64(v, 0, INT64_MAX, &t->ts_ms, "ts_ms", d);
    }
}

int cache_trial_decode(const void *buf, size_t len, cache_trial *out, kt_err *err)
{
    cache_dec dec = {.doc = "trial", .err = err};
    memset(out, 0, sizeof(*out));
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    int rc = cache_value_unpack(buf, len, &res, "trial", &dec);
    if (rc == 0)
        rc = cache_decode_map_opt(&res.data, trial_fields, KT_ARRAY_LEN(trial_fields),
                                  TRIAL_OPTIONAL, trial_field, out, NULL, &dec);
    kt_err why = {0}; /* what decodes must be what the encoder accepts (found by fuzz_record) */
    if (rc == 0 && check_trial(out, &why) < 0)
        rc = kt_err_set(err, -EBADMSG, "%s", why.msg);
    msgpack_unpacked_destroy(&res);
    return rc;
}

/* The bound shape of each canonical input and output of g into slots (inputs first). */
static int graph_slots(const ops_graph *g, uint8_t problem[OPS_SIG_BYTES], cache_slot **out,
                       int *n_in, kt_err *err)
{
    *out = NULL;
    *n_in = 0;
    for (int t = 0; t < g->n_tensors; t++)
        *n_in += g->tensors[t].producer < 0;
    int n = *n_in + g->n_outputs;
    int *rank = calloc((size_t)n + 1, sizeof(int));
    cache_slot *slots = calloc((size_t)n + 1, sizeof(*slots));
    ops_diag d = {0};
    int rc = 0;
    if (!rank || !slots) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = ops_graph_problem(g, problem, rank, rank + *n_in, &d)) < 0) {
        kt_err_set(err, rc, "%s", d.msg);
        goto out;
    }
    /* graph inputs in tensor order, then outputs in declaration order, each to its rank */
    for (int t = 0, i = 0; t < g->n_tensors + g->n_outputs; t++) {
        bool is_out = t >= g->n_tensors;
        const ops_tensor *x = &g->tensors[is_out ? g->outputs[t - g->n_tensors] : t];
        if (!is_out && x->producer >= 0)
            continue;
        cache_slot *sl = &slots[is_out ? *n_in + rank[*n_in + (t - g->n_tensors)] : rank[i++]];
        sl->dtype = x->dtype;
        sl->rank = x->shape.rank;
        for (int k = 0; k < x->shape.rank; k++)
            sl->dims[k] = x->shape.d[k].size;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < slots[i].rank; k++)
            if (slots[i].dims[k] < 0) {
                rc = kt_err_set(err, -EINVAL, "the graph is not fully bound");
                goto out;
            }
    *out = slots;
    slots = NULL;
out:
    free(slots);
    free(rank);
    return rc;
}

int cache_record_set_problem(cache_record *r, const ops_graph *g, kt_err *err)
{
    cache_slot *slots = NULL;
    int n_in = 0;
    int rc = graph_slots(g, r->key.problem, &slots, &n_in, err);
    if (rc < 0)
        return rc;
    free(r->slots);
    r->slots = slots;
    r->n_inputs = n_in;
    r->n_outputs = g->n_outputs;
    return 0;
}

static void slot_text(const cache_slot *sl, char *out, size_t cap)
{
    size_t off = (size_t)snprintf(out, cap, "[");
    for (int k = 0; k < sl->rank && off < cap; k++)
        off += (size_t)snprintf(out + off, cap - off, "%s%" PRId64, k ? ", " : "", sl->dims[k]);
    if (off < cap)
        snprintf(out + off, cap - off, "] %s", ops_dtype_name(sl->dtype));
}

int cache_record_check_problem(const cache_record *r, const ops_graph *g, kt_err *err)
{
    cache_slot *slots = NULL;
    int n_in = 0;
    uint8_t problem[OPS_SIG_BYTES];
    int rc = graph_slots(g, problem, &slots, &n_in, err);
    if (rc < 0)
        return rc;
    if (n_in != r->n_inputs || g->n_outputs != r->n_outputs) {
        rc = kt_err_set(err, -EINVAL,
                        "the graph has %d inputs and %d outputs, the record was tuned for %d "
                        "and %d",
                        n_in, g->n_outputs, r->n_inputs, r->n_outputs);
        goto out;
    }
    for (int i = 0; i < n_in + g->n_outputs; i++) {
        const cache_slot *a = &slots[i], *b = &r->slots[i];
        if (a->dtype == b->dtype && a->rank == b->rank &&
            memcmp(a->dims, b->dims, sizeof(a->dims[0]) * (size_t)a->rank) == 0)
            continue;
        char got[200], want[200];
        slot_text(a, got, sizeof(got));
        slot_text(b, want, sizeof(want));
        rc = kt_err_set(err, -EINVAL, "%s %d: %s, the record was tuned for %s",
                        i < n_in ? "input" : "output", i < n_in ? i : i - n_in, got, want);
        goto out;
    }
    if (memcmp(problem, r->key.problem, OPS_SIG_BYTES) != 0)
        rc = kt_err_set(err, -EINVAL, "the graph poses another problem than the record's");
out:
    free(slots);
    return rc;
}
