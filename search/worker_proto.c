/* The worker protocol's message encoding (see search/worker.h for the conversation).
 *
 * An "eval" request is one msgpack map:
 *
 *   "op"         "eval" (written by the packer; the unpacker accepts and ignores it)
 *   "id"         uint: the caller's candidate id
 *   "sub"        the group's subgraph in the op-graph msgpack form (ops_graph_pack: symbolic)
 *   "bindings"   {NAME: int}: the bound symbols of sub
 *   "precision"  "exact" | "tf32" | "reduced"
 *   "tolerance"  float: normwise tolerance, <= 0 for the worker's default (search/worker_verify.c)
 *   "seeds"      int 0..64: verification input sets (0: the worker's default, 3)
 *   "seed0"      uint: the first seed
 *   "verify", "time"  bool
 *   "timing"     {"cold": bool, "warmup_s", "budget_s": float, "min_reps", "max_reps": int,
 *                 "target_rel": float}  (srch_time_opts)
 *   "library"    bool: a cuBLASLt call ("lt") instead of kernels of a cubin
 *   "cubin"      bin (kernel candidates only)
 *   "kernels"    [{"entry": str, "grid": [3 uint], "block": [3 uint], "smem": uint,
 *                  "zero_ws": bool, "args": [[0, TENSOR] | [1, OFFSET] | [2, TENSOR, OFFSET,
 *                  TMAP], ...] (2: a tensor map over TENSOR, or over the workspace at OFFSET
 *                  when TENSOR is -1; TMAP its ops_tensor_map_pack form), optional "zero":
 *                  [OFFSET, BYTES]: with zero_ws, the workspace range to clear (absent: all of
 *                  it; it must lie inside the workspace)}, ...], at most SRCH_REQ_MAX_KERNELS
 *   "workspace"  int: workspace bytes
 *   "lt"         {ops_lt_desc fields, see pack_lt} (library candidates only)
 *   "record"     optional bool: an assembled cache record over the whole graph (absent: false)
 *   "full"       optional {"graph": the whole canonical graph sub was cut from (ops_graph_pack:
 *                 symbolic), "bindings": {NAME: int}: its bound symbols}. Absent: the worker
 *                 draws sub's inputs at random. Present: it draws full's graph inputs, runs
 *                 full's fp64 reference, and gives each input of sub the tensor of full with
 *                 the same name (an intermediate rounded to its dtype). Every input of sub must
 *                 name a tensor of full with the same dtype and sizes, else -EPROTO.
 *
 * Tensor numbers index sub->tensors as the unpacker rebuilds it (inputs in order, then node
 * outputs in node order: the same numbering ops_group_subgraph produced). Every kernel argument
 * and lt tensor must be a graph input or output of sub: those are the buffers the worker
 * allocates.
 *
 * An "eval" reply (srch_eval_result) is one map: "ok": true, "id", "status" (srch_status_str),
 * "msg", "err_norm", "err_max", "time": {"median_ns", "p10_ns", "p90_ns", "rel_spread": float,
 * "reps", "kernels": int, "cold": bool, "clk0", "clk1": uint (SM clock kHz before, after)}.
 *
 * The worker's "reference" request uses the same map with "op": "reference" and no candidate
 * (no "cubin", "kernels" or "lt"); srch_eval_req_unpack accepts it as such.
 *
 * Unpackers are strict: a missing required key, an unknown key, a wrong type or a value out of
 * range is -EPROTO with the key named in err. The peer is our own supervisor, so strictness
 * finds version skew and bugs early instead of running a misread candidate. */
#include "worker.h"

#include "ops/msgpack_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[SRCH_STATUS_COUNT] = {
    [SRCH_OK] = "ok",
    [SRCH_WRONG] = "wrong",
    [SRCH_RACE] = "race",
    [SRCH_FAULT] = "fault",
    [SRCH_HANG] = "hang",
    [SRCH_LOAD_ERROR] = "load_error",
    [SRCH_UNAVAILABLE] = "unavailable",
    [SRCH_COMPILE_ERROR] = "compile_error",
};

const char *srch_status_str(srch_status s)
{
    return (unsigned)s < SRCH_STATUS_COUNT ? status_names[s] : "unknown";
}

/* ---- packing ---- */

static void pack_u32x3(msgpack_packer *pk, const uint32_t v[3])
{
    msgpack_pack_array(pk, 3);
    for (int i = 0; i < 3; i++)
        msgpack_pack_uint32(pk, v[i]);
}

static void pack_lt(msgpack_packer *pk, const ops_lt_desc *lt)
{
    msgpack_pack_map(pk, 30);
    kt_mp_pack_ki64(pk, "compute", lt->compute);
    kt_mp_pack_ki64(pk, "scale_type", lt->scale_type);
    kt_mp_pack_kf64(pk, "alpha", lt->alpha);
    kt_mp_pack_kf64(pk, "beta", lt->beta);
    kt_mp_pack_ki64(pk, "transa", lt->transa);
    kt_mp_pack_ki64(pk, "transb", lt->transb);
    kt_mp_pack_ki64(pk, "epilogue", lt->epilogue);
    kt_mp_pack_ki64(pk, "bias", lt->bias_tensor);
    kt_mp_pack_ki64(pk, "m", lt->m);
    kt_mp_pack_ki64(pk, "n", lt->n);
    kt_mp_pack_ki64(pk, "k", lt->k);
    kt_mp_pack_ki64(pk, "lda", lt->lda);
    kt_mp_pack_ki64(pk, "ldb", lt->ldb);
    kt_mp_pack_ki64(pk, "ldc", lt->ldc);
    kt_mp_pack_ki64(pk, "a_rows", lt->a_rows);
    kt_mp_pack_ki64(pk, "a_cols", lt->a_cols);
    kt_mp_pack_ki64(pk, "b_rows", lt->b_rows);
    kt_mp_pack_ki64(pk, "b_cols", lt->b_cols);
    kt_mp_pack_ki64(pk, "a_type", lt->a_type);
    kt_mp_pack_ki64(pk, "b_type", lt->b_type);
    kt_mp_pack_ki64(pk, "c_type", lt->c_type);
    kt_mp_pack_ki64(pk, "batch", lt->batch_count);
    kt_mp_pack_ki64(pk, "stride_a", lt->stride_a);
    kt_mp_pack_ki64(pk, "stride_b", lt->stride_b);
    kt_mp_pack_ki64(pk, "stride_c", lt->stride_c);
    kt_mp_pack_ki64(pk, "a", lt->a_tensor);
    kt_mp_pack_ki64(pk, "b", lt->b_tensor);
    kt_mp_pack_ki64(pk, "c", lt->c_tensor);
    kt_mp_pack_ki64(pk, "heuristic", lt->heuristic_index);
    kt_mp_pack_ki64(pk, "workspace", lt->workspace_bytes);
}

static void pack_bindings(msgpack_packer *pk, const srch_binding *b, int n)
{
    msgpack_pack_map(pk, (size_t)n);
    for (int i = 0; i < n; i++) {
        kt_mp_pack_str(pk, b[i].name);
        msgpack_pack_int64(pk, b[i].value);
    }
}

static void pack_kernel(msgpack_packer *pk, const ops_kernel_launch *l, int64_t zero_offset,
                        int64_t zero_bytes)
{
    /* "zero" only where it narrows the clear: requests without it stay as they were. */
    bool zero = l->zero_workspace && zero_bytes > 0;
    msgpack_pack_map(pk, zero ? 7 : 6);
    if (zero) {
        kt_mp_pack_str(pk, "zero");
        msgpack_pack_array(pk, 2);
        msgpack_pack_int64(pk, zero_offset);
        msgpack_pack_int64(pk, zero_bytes);
    }
    kt_mp_pack_str(pk, "entry");
    kt_mp_pack_str(pk, l->entry);
    kt_mp_pack_str(pk, "grid");
    pack_u32x3(pk, l->grid);
    kt_mp_pack_str(pk, "block");
    pack_u32x3(pk, l->block);
    kt_mp_pack_str(pk, "smem");
    msgpack_pack_uint32(pk, l->smem_bytes);
    kt_mp_pack_str(pk, "zero_ws");
    kt_mp_pack_bool(pk, l->zero_workspace);
    kt_mp_pack_str(pk, "args");
    msgpack_pack_array(pk, (size_t)l->n_args);
    for (int a = 0; a < l->n_args; a++) {
        const ops_arg *arg = &l->args[a];
        if (arg->kind == OPS_ARG_TENSOR_MAP) {
            msgpack_pack_array(pk, 4);
            msgpack_pack_int(pk, 2);
            msgpack_pack_int64(pk, arg->tensor < 0 ? -1 : arg->tensor);
            msgpack_pack_int64(pk, arg->offset);
            ops_tensor_map_pack(pk, &arg->tmap);
            continue;
        }
        msgpack_pack_array(pk, 2);
        msgpack_pack_int(pk, arg->kind == OPS_ARG_TENSOR ? 0 : 1);
        msgpack_pack_int64(pk, arg->kind == OPS_ARG_TENSOR ? arg->tensor : arg->offset);
    }
}

int srch_eval_req_pack(msgpack_packer *pk, const srch_eval_req *r)
{
    if (!r->sub || r->n_bindings < 0 || r->n_bindings > SRCH_MAX_BINDINGS || r->n_kernels < 0 ||
        r->n_kernels > SRCH_REQ_MAX_KERNELS)
        return -EINVAL;
    if (r->full && (r->n_full_bindings < 0 || r->n_full_bindings > SRCH_MAX_BINDINGS))
        return -EINVAL;
    bool kernels = !r->library;
    msgpack_pack_map(pk, (kernels ? 16 : 15) + (r->full ? 1 : 0) + (r->record ? 1 : 0));
    if (r->record) {
        kt_mp_pack_str(pk, "record");
        kt_mp_pack_bool(pk, true);
    }
    kt_mp_pack_str(pk, "op");
    kt_mp_pack_str(pk, "eval");
    kt_mp_pack_str(pk, "id");
    msgpack_pack_uint64(pk, r->id);
    kt_mp_pack_str(pk, "sub");
    int rc = ops_graph_pack(pk, r->sub);
    if (rc < 0)
        return rc;
    kt_mp_pack_str(pk, "bindings");
    pack_bindings(pk, r->bindings, r->n_bindings);
    if (r->full) {
        kt_mp_pack_str(pk, "full");
        msgpack_pack_map(pk, 2);
        kt_mp_pack_str(pk, "graph");
        if ((rc = ops_graph_pack(pk, r->full)) < 0)
            return rc;
        kt_mp_pack_str(pk, "bindings");
        pack_bindings(pk, r->full_bindings, r->n_full_bindings);
    }
    kt_mp_pack_str(pk, "precision");
    kt_mp_pack_str(pk, ops_precision_name(r->precision));
    kt_mp_pack_kf64(pk, "tolerance", r->tolerance);
    kt_mp_pack_ki64(pk, "seeds", r->seeds);
    kt_mp_pack_str(pk, "seed0");
    msgpack_pack_uint64(pk, r->seed0);
    kt_mp_pack_str(pk, "verify");
    kt_mp_pack_bool(pk, r->verify);
    kt_mp_pack_str(pk, "time");
    kt_mp_pack_bool(pk, r->time);
    kt_mp_pack_str(pk, "timing");
    msgpack_pack_map(pk, 6);
    kt_mp_pack_str(pk, "cold");
    kt_mp_pack_bool(pk, r->timing.cold);
    kt_mp_pack_kf64(pk, "warmup_s", r->timing.warmup_s);
    kt_mp_pack_kf64(pk, "budget_s", r->timing.budget_s);
    kt_mp_pack_ki64(pk, "min_reps", r->timing.min_reps);
    kt_mp_pack_ki64(pk, "max_reps", r->timing.max_reps);
    kt_mp_pack_kf64(pk, "target_rel", r->timing.target_rel);
    kt_mp_pack_str(pk, "library");
    kt_mp_pack_bool(pk, r->library);
    if (kernels) {
        kt_mp_pack_str(pk, "cubin");
        msgpack_pack_bin(pk, r->cubin_len);
        msgpack_pack_bin_body(pk, r->cubin, r->cubin_len);
    }
    kt_mp_pack_str(pk, "kernels");
    msgpack_pack_array(pk, (size_t)r->n_kernels);
    for (int k = 0; k < r->n_kernels; k++)
        pack_kernel(pk, &r->kernels[k], r->zero_offset[k], r->zero_bytes[k]);
    kt_mp_pack_ki64(pk, "workspace", r->workspace_bytes);
    kt_mp_pack_str(pk, "lt");
    if (r->library)
        pack_lt(pk, &r->lt);
    else
        msgpack_pack_nil(pk);
    return 0;
}

int srch_eval_result_pack(msgpack_packer *pk, const srch_eval_result *r)
{
    if ((unsigned)r->status >= SRCH_STATUS_COUNT)
        return -EINVAL;
    msgpack_pack_map(pk, 7);
    kt_mp_pack_str(pk, "ok");
    msgpack_pack_true(pk);
    kt_mp_pack_str(pk, "id");
    msgpack_pack_uint64(pk, r->id);
    kt_mp_pack_str(pk, "status");
    kt_mp_pack_str(pk, srch_status_str(r->status));
    kt_mp_pack_str(pk, "msg");
    kt_mp_pack_str(pk, r->msg);
    kt_mp_pack_kf64(pk, "err_norm", r->err_norm);
    kt_mp_pack_kf64(pk, "err_max", r->err_max);
    kt_mp_pack_str(pk, "time");
    msgpack_pack_map(pk, 9);
    kt_mp_pack_kf64(pk, "median_ns", r->time.median_ns);
    kt_mp_pack_kf64(pk, "p10_ns", r->time.p10_ns);
    kt_mp_pack_kf64(pk, "p90_ns", r->time.p90_ns);
    kt_mp_pack_kf64(pk, "rel_spread", r->time.rel_spread);
    kt_mp_pack_ki64(pk, "reps", r->time.reps);
    kt_mp_pack_ki64(pk, "kernels", r->time.kernels_per_rep);
    kt_mp_pack_str(pk, "cold");
    kt_mp_pack_bool(pk, r->time.cold);
    kt_mp_pack_ki64(pk, "clk0", r->time.sm_clock_khz_before);
    kt_mp_pack_ki64(pk, "clk1", r->time.sm_clock_khz_after);
    return 0;
}

/* ---- unpacking ---- */

#define BAD(...) kt_err_set(err, -EPROTO, __VA_ARGS__)

static int get_i64(const msgpack_object *o, int64_t lo, int64_t hi, int64_t *out, const char *what,
                   kt_err *err)
{
    int64_t v;
    if (!kt_mp_i64(o, &v))
        return BAD("'%s': expected an integer", what);
    if (v < lo || v > hi)
        return BAD("'%s': %lld out of range [%lld, %lld]", what, (long long)v, (long long)lo,
                   (long long)hi);
    *out = v;
    return 0;
}

static int get_int(const msgpack_object *o, int lo, int hi, int *out, const char *what, kt_err *err)
{
    int64_t v = 0;
    int rc = get_i64(o, lo, hi, &v, what, err);
    *out = (int)v;
    return rc;
}

static int get_u64(const msgpack_object *o, uint64_t *out, const char *what, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return BAD("'%s': expected an unsigned integer", what);
    *out = o->via.u64;
    return 0;
}

static int get_f64(const msgpack_object *o, double *out, const char *what, kt_err *err)
{
    /* Packers write doubles; an integer is accepted where a person might have written one. */
    if (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32)
        *out = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *out = (double)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = (double)o->via.i64;
    else
        return BAD("'%s': expected a number", what);
    return 0;
}

static int get_bool(const msgpack_object *o, bool *out, const char *what, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return BAD("'%s': expected a boolean", what);
    *out = o->via.boolean;
    return 0;
}

static int get_str(const msgpack_object *o, char *buf, size_t cap, const char *what, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap)
        return BAD("'%s': expected a string shorter than %zu bytes", what, cap);
    if (memchr(o->via.str.ptr, '\0', o->via.str.size))
        return BAD("'%s': string holds a NUL byte", what);
    memcpy(buf, o->via.str.ptr, o->via.str.size);
    buf[o->via.str.size] = '\0';
    return 0;
}

static int get_map(const msgpack_object *o, const char *what, kt_err *err)
{
    return o->type == MSGPACK_OBJECT_MAP ? 0 : BAD("'%s': expected a map", what);
}

static int get_u32x3(const msgpack_object *o, uint32_t v[3], const char *what, kt_err *err)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
        return BAD("'%s': expected 3 integers", what);
    for (int i = 0; i < 3; i++) {
        int64_t x = 0;
        int rc = get_i64(&o->via.array.ptr[i], 1, UINT32_MAX, &x, what, err);
        if (rc < 0)
            return rc;
        v[i] = (uint32_t)x;
    }
    return 0;
}

/* The index of o's key in names, or a -EPROTO naming it. */
static int key_index(const msgpack_object *k, const char *const *names, int n, const char *where,
                     kt_err *err)
{
    for (int i = 0; i < n; i++)
        if (kt_mp_str_is(k, names[i]))
            return i;
    if (k->type == MSGPACK_OBJECT_STR)
        return BAD("%s: unknown key '%.*s'", where,
                   (int)(k->via.str.size > 64 ? 64 : k->via.str.size), k->via.str.ptr);
    return BAD("%s: keys must be strings", where);
}

static bool valid_lt_dtype(int64_t v)
{
    return v == OPS_LT_R_32F || v == OPS_LT_R_16F || v == OPS_LT_R_16BF;
}

static bool valid_lt_compute(int64_t v)
{
    return v == OPS_LT_COMPUTE_32F || v == OPS_LT_COMPUTE_32F_FAST_16F ||
           v == OPS_LT_COMPUTE_32F_FAST_16BF || v == OPS_LT_COMPUTE_32F_FAST_TF32;
}

static bool valid_lt_epilogue(int64_t v)
{
    return v == OPS_LT_EPILOGUE_DEFAULT || v == OPS_LT_EPILOGUE_RELU || v == OPS_LT_EPILOGUE_BIAS ||
           v == OPS_LT_EPILOGUE_RELU_BIAS || v == OPS_LT_EPILOGUE_GELU ||
           v == OPS_LT_EPILOGUE_GELU_BIAS;
}

enum {
    LT_COMPUTE,
    LT_SCALE_TYPE,
    LT_ALPHA,
    LT_BETA,
    LT_TRANSA,
    LT_TRANSB,
    LT_EPILOGUE,
    LT_BIAS,
    LT_M,
    LT_N,
    LT_K,
    LT_LDA,
    LT_LDB,
    LT_LDC,
    LT_A_ROWS,
    LT_A_COLS,
    LT_B_ROWS,
    LT_B_COLS,
    LT_A_TYPE,
    LT_B_TYPE,
    LT_C_TYPE,
    LT_BATCH,
    LT_STRIDE_A,
    LT_STRIDE_B,
    LT_STRIDE_C,
    LT_A,
    LT_B,
    LT_C,
    LT_HEURISTIC,
    LT_WORKSPACE,
    LT_N_KEYS
};
static const char *const lt_keys[LT_N_KEYS] = {
    "compute",  "scale_type", "alpha",  "beta",   "transa",    "transb",    "epilogue", "bias",
    "m",        "n",          "k",      "lda",    "ldb",       "ldc",       "a_rows",   "a_cols",
    "b_rows",   "b_cols",     "a_type", "b_type", "c_type",    "batch",     "stride_a", "stride_b",
    "stride_c", "a",          "b",      "c",      "heuristic", "workspace",
};

static int unpack_lt(const msgpack_object *o, ops_lt_desc *lt, kt_err *err)
{
    int rc;
    if ((rc = get_map(o, "lt", err)) < 0)
        return rc;
    uint64_t seen = 0;
    const int64_t big = (int64_t)1 << 40;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        int k = key_index(&kv->key, lt_keys, LT_N_KEYS, "lt", err);
        if (k < 0)
            return k;
        if (seen & (1ull << k))
            return BAD("lt: key '%s' repeated", lt_keys[k]);
        seen |= 1ull << k;
        const char *what = lt_keys[k];
        int64_t v = 0;
        if (k == LT_ALPHA || k == LT_BETA) {
            if ((rc = get_f64(&kv->val, k == LT_ALPHA ? &lt->alpha : &lt->beta, what, err)) < 0)
                return rc;
            continue;
        }
        /* Every other field is an integer; ranges first, meaning below. */
        int64_t lo = 0, hi = big;
        if (k == LT_BIAS)
            lo = -1;
        if ((rc = get_i64(&kv->val, lo, hi, &v, what, err)) < 0)
            return rc;
        switch (k) {
        case LT_COMPUTE:
            if (!valid_lt_compute(v))
                return BAD("lt: unknown compute type %lld", (long long)v);
            lt->compute = (ops_lt_compute)v;
            break;
        case LT_SCALE_TYPE:
        case LT_A_TYPE:
        case LT_B_TYPE:
        case LT_C_TYPE:
            if (!valid_lt_dtype(v))
                return BAD("lt: '%s': unknown data type %lld", what, (long long)v);
            if (k == LT_SCALE_TYPE)
                lt->scale_type = (ops_lt_dtype)v;
            else if (k == LT_A_TYPE)
                lt->a_type = (ops_lt_dtype)v;
            else if (k == LT_B_TYPE)
                lt->b_type = (ops_lt_dtype)v;
            else
                lt->c_type = (ops_lt_dtype)v;
            break;
        case LT_TRANSA:
        case LT_TRANSB:
            if (v > 1)
                return BAD("lt: '%s': expected 0 (N) or 1 (T)", what);
            if (k == LT_TRANSA)
                lt->transa = (ops_lt_op)v;
            else
                lt->transb = (ops_lt_op)v;
            break;
        case LT_EPILOGUE:
            if (!valid_lt_epilogue(v))
                return BAD("lt: unknown epilogue %lld", (long long)v);
            lt->epilogue = (ops_lt_epilogue)v;
            break;
        case LT_BIAS:
            lt->bias_tensor = (int32_t)v;
            break;
        case LT_M:
            lt->m = v;
            break;
        case LT_N:
            lt->n = v;
            break;
        case LT_K:
            lt->k = v;
            break;
        case LT_LDA:
            lt->lda = v;
            break;
        case LT_LDB:
            lt->ldb = v;
            break;
        case LT_LDC:
            lt->ldc = v;
            break;
        case LT_A_ROWS:
            lt->a_rows = v;
            break;
        case LT_A_COLS:
            lt->a_cols = v;
            break;
        case LT_B_ROWS:
            lt->b_rows = v;
            break;
        case LT_B_COLS:
            lt->b_cols = v;
            break;
        case LT_BATCH:
            if (v < 1 || v > INT32_MAX)
                return BAD("lt: 'batch' must be >= 1");
            lt->batch_count = (int32_t)v;
            break;
        case LT_STRIDE_A:
            lt->stride_a = v;
            break;
        case LT_STRIDE_B:
            lt->stride_b = v;
            break;
        case LT_STRIDE_C:
            lt->stride_c = v;
            break;
        case LT_A:
            lt->a_tensor = (int32_t)v;
            break;
        case LT_B:
            lt->b_tensor = (int32_t)v;
            break;
        case LT_C:
            lt->c_tensor = (int32_t)v;
            break;
        case LT_HEURISTIC:
            if (v > 1024)
                return BAD("lt: 'heuristic' out of range");
            lt->heuristic_index = (int)v;
            break;
        case LT_WORKSPACE:
            lt->workspace_bytes = v;
            break;
        }
    }
    if (seen != (1ull << LT_N_KEYS) - 1) {
        for (int k = 0; k < LT_N_KEYS; k++)
            if (!(seen & (1ull << k)))
                return BAD("lt: missing key '%s'", lt_keys[k]);
    }
    if (lt->m < 1 || lt->n < 1 || lt->k < 1)
        return BAD("lt: m, n and k must be >= 1");
    return 0;
}

enum { KN_ENTRY, KN_GRID, KN_BLOCK, KN_SMEM, KN_ZERO_WS, KN_ARGS, KN_ZERO, KN_N_KEYS };
static const char *const kernel_keys[KN_N_KEYS] = {"entry",   "grid", "block", "smem",
                                                   "zero_ws", "args", "zero"};
#define KN_REQUIRED ((1u << KN_ZERO) - 1) /* every key before "zero" */

/* One of a launch's "args": [0, TENSOR], [1, OFFSET] or [2, TENSOR | -1, OFFSET, TMAP]. */
static int unpack_arg(const msgpack_object *e, int a, ops_arg *arg, kt_err *err)
{
    int rc, kind = 0;
    int64_t v = 0;
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size < 2)
        return BAD("'args'[%d]: expected [kind, value]", a);
    if ((rc = get_int(&e->via.array.ptr[0], 0, 2, &kind, "args kind", err)) < 0)
        return rc;
    if (kind == 2) {
        int64_t off = 0;
        ops_diag d = {0};
        if (e->via.array.size != 4)
            return BAD("'args'[%d]: expected [2, tensor, offset, tensor map]", a);
        if ((rc = get_i64(&e->via.array.ptr[1], -1, INT32_MAX, &v, "args tensor", err)) < 0 ||
            (rc = get_i64(&e->via.array.ptr[2], 0, (int64_t)1 << 48, &off, "args offset", err)) < 0)
            return rc;
        if (v >= 0 && off)
            return BAD("'args'[%d]: a tensor map over tensor %lld with an offset", a, (long long)v);
        if (ops_tensor_map_unpack(&e->via.array.ptr[3], &arg->tmap, &d) < 0)
            return BAD("'args'[%d]: %s", a, d.msg);
        arg->kind = OPS_ARG_TENSOR_MAP;
        arg->tensor = (int32_t)v;
        arg->offset = off;
        return 0;
    }
    if (e->via.array.size != 2)
        return BAD("'args'[%d]: expected [kind, value]", a);
    if ((rc = get_i64(&e->via.array.ptr[1], 0, (int64_t)1 << 48, &v, "args value", err)) < 0)
        return rc;
    arg->kind = kind == 0 ? OPS_ARG_TENSOR : OPS_ARG_WORKSPACE;
    if (kind == 0) {
        if (v > INT32_MAX)
            return BAD("'args'[%d]: tensor index out of range", a);
        arg->tensor = (int32_t)v;
    } else {
        arg->offset = v;
    }
    return 0;
}

static int unpack_kernel(const msgpack_object *o, ops_kernel_launch *l, int64_t *zero_offset,
                         int64_t *zero_bytes, kt_err *err)
{
    int rc;
    if ((rc = get_map(o, "kernels[]", err)) < 0)
        return rc;
    unsigned seen = 0;
    memset(l, 0, sizeof(*l));
    *zero_offset = *zero_bytes = 0;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        int k = key_index(&kv->key, kernel_keys, KN_N_KEYS, "kernels[]", err);
        if (k < 0)
            return k;
        if (seen & (1u << k))
            return BAD("kernels[]: key '%s' repeated", kernel_keys[k]);
        seen |= 1u << k;
        int64_t v = 0;
        switch (k) {
        case KN_ENTRY:
            rc = get_str(&kv->val, l->entry, sizeof(l->entry), "entry", err);
            if (rc == 0 && !l->entry[0])
                rc = BAD("'entry': empty");
            break;
        case KN_GRID:
            rc = get_u32x3(&kv->val, l->grid, "grid", err);
            break;
        case KN_BLOCK:
            rc = get_u32x3(&kv->val, l->block, "block", err);
            break;
        case KN_SMEM:
            rc = get_i64(&kv->val, 0, UINT32_MAX, &v, "smem", err);
            l->smem_bytes = (uint32_t)v;
            break;
        case KN_ZERO_WS:
            rc = get_bool(&kv->val, &l->zero_workspace, "zero_ws", err);
            break;
        case KN_ZERO:
            if (kv->val.type != MSGPACK_OBJECT_ARRAY || kv->val.via.array.size != 2)
                return BAD("'zero': expected [offset, bytes]");
            if ((rc = get_i64(&kv->val.via.array.ptr[0], 0, (int64_t)1 << 40, zero_offset,
                              "zero offset", err)) < 0 ||
                (rc = get_i64(&kv->val.via.array.ptr[1], 1, (int64_t)1 << 40, zero_bytes,
                              "zero bytes", err)) < 0)
                return rc;
            break;
        case KN_ARGS:
            if (kv->val.type != MSGPACK_OBJECT_ARRAY || kv->val.via.array.size > OPS_MAX_ARGS)
                return BAD("'args': expected an array of at most %d arguments", OPS_MAX_ARGS);
            l->n_args = (int)kv->val.via.array.size;
            for (int a = 0; a < l->n_args; a++)
                if ((rc = unpack_arg(&kv->val.via.array.ptr[a], a, &l->args[a], err)) < 0)
                    return rc;
            break;
        }
        if (rc < 0)
            return rc;
    }
    for (int k = 0; k < KN_N_KEYS; k++)
        if ((KN_REQUIRED & (1u << k)) && !(seen & (1u << k)))
            return BAD("kernels[]: missing key '%s'", kernel_keys[k]);
    if ((seen & (1u << KN_ZERO)) && !l->zero_workspace)
        return BAD("kernels[]: 'zero' without 'zero_ws'");
    return 0;
}

/* True when tensor t of g is a graph input or a graph output: a buffer the worker allocates. */
static bool is_io_tensor(const ops_graph *g, int32_t t)
{
    if (t < 0 || t >= g->n_tensors)
        return false;
    return g->tensors[t].producer < 0 || g->tensors[t].is_output;
}

enum {
    RQ_OP,
    RQ_ID,
    RQ_SUB,
    RQ_BINDINGS,
    RQ_PRECISION,
    RQ_TOLERANCE,
    RQ_SEEDS,
    RQ_SEED0,
    RQ_VERIFY,
    RQ_TIME,
    RQ_TIMING,
    RQ_LIBRARY,
    RQ_CUBIN,
    RQ_KERNELS,
    RQ_WORKSPACE,
    RQ_LT,
    RQ_FULL,
    RQ_RECORD,
    RQ_N_KEYS
};
static const char *const req_keys[RQ_N_KEYS] = {
    "op",   "id",     "sub",     "bindings", "precision", "tolerance", "seeds", "seed0", "verify",
    "time", "timing", "library", "cubin",    "kernels",   "workspace", "lt",    "full",  "record",
};

enum { TM_COLD, TM_WARMUP, TM_BUDGET, TM_MIN_REPS, TM_MAX_REPS, TM_TARGET, TM_N_KEYS };
static const char *const timing_keys[TM_N_KEYS] = {"cold",     "warmup_s", "budget_s",
                                                   "min_reps", "max_reps", "target_rel"};

static int unpack_timing(const msgpack_object *o, srch_time_opts *t, kt_err *err)
{
    int rc;
    if ((rc = get_map(o, "timing", err)) < 0)
        return rc;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        int k = key_index(&kv->key, timing_keys, TM_N_KEYS, "timing", err);
        if (k < 0)
            return k;
        switch (k) {
        case TM_COLD:
            rc = get_bool(&kv->val, &t->cold, "cold", err);
            break;
        case TM_WARMUP:
            rc = get_f64(&kv->val, &t->warmup_s, "warmup_s", err);
            break;
        case TM_BUDGET:
            rc = get_f64(&kv->val, &t->budget_s, "budget_s", err);
            break;
        case TM_MIN_REPS:
            rc = get_int(&kv->val, 0, 1 << 24, &t->min_reps, "min_reps", err);
            break;
        case TM_MAX_REPS:
            rc = get_int(&kv->val, 0, 1 << 24, &t->max_reps, "max_reps", err);
            break;
        case TM_TARGET:
            rc = get_f64(&kv->val, &t->target_rel, "target_rel", err);
            break;
        }
        if (rc < 0)
            return rc;
    }
    if (!isfinite(t->warmup_s) || !isfinite(t->budget_s) || !isfinite(t->target_rel) ||
        t->warmup_s > 60 || t->budget_s > 600)
        return BAD("timing: warmup_s, budget_s or target_rel out of range");
    return 0;
}

static int unpack_bindings(const msgpack_object *o, srch_binding *out, int *n, const char *what,
                           kt_err *err)
{
    int rc;
    if ((rc = get_map(o, what, err)) < 0)
        return rc;
    if (o->via.map.size > SRCH_MAX_BINDINGS)
        return BAD("'%s': more than %d symbols", what, SRCH_MAX_BINDINGS);
    *n = (int)o->via.map.size;
    for (int i = 0; i < *n; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        if ((rc = get_str(&kv->key, out[i].name, sizeof(out[i].name), "bindings name", err)) < 0 ||
            (rc = get_i64(&kv->val, 1, (int64_t)1 << 40, &out[i].value, "bindings value", err)) < 0)
            return rc;
    }
    return 0;
}

/* Parses, validates and binds a graph ('sub' or 'full'). */
static int unpack_graph(const msgpack_object *o, const srch_binding *bind, int n_bind,
                        const char *what, ops_graph **out, kt_err *err)
{
    ops_graph *g = NULL;
    ops_diag d = {0};
    ops_binding b[SRCH_MAX_BINDINGS];
    int rc = ops_graph_from_msgpack_object(o, &g, &d);
    if (rc == -ENOMEM)
        return kt_err_set(err, rc, "out of memory reading '%s'", what);
    if (rc < 0)
        return BAD("'%s': %s", what, d.msg);
    if ((rc = ops_graph_validate(g, &d)) < 0) {
        rc = BAD("'%s': %s", what, d.msg);
        goto out;
    }
    for (int i = 0; i < n_bind; i++) {
        b[i].name = bind[i].name;
        b[i].value = bind[i].value;
    }
    if ((rc = ops_graph_bind(g, b, n_bind, out, &d)) < 0) {
        rc = rc == -ENOMEM ? kt_err_set(err, rc, "out of memory binding '%s'", what)
                           : BAD("'%s' bindings: %s", what, d.msg);
        goto out;
    }
    const char *unbound = ops_graph_first_unbound(*out);
    if (unbound) {
        rc = BAD("'%s' bindings: symbol '%s' of '%s' is not bound", what, unbound, what);
        ops_graph_free(*out);
        *out = NULL;
    }
out:
    ops_graph_free(g);
    return rc;
}

/* "full": {"graph", "bindings"}, checked against the (already unpacked) sub. */
static int unpack_full(const msgpack_object *o, srch_eval_req *r, kt_err *err)
{
    int rc;
    if ((rc = get_map(o, "full", err)) < 0)
        return rc;
    static const char *const full_keys[] = {"graph", "bindings"};
    const msgpack_object *graph = NULL, *bindings = NULL;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        int k = key_index(&kv->key, full_keys, 2, "full", err);
        if (k < 0)
            return k;
        const msgpack_object **slot = k == 0 ? &graph : &bindings;
        if (*slot)
            return BAD("full: key '%s' repeated", full_keys[k]);
        *slot = &kv->val;
    }
    if (!graph || !bindings)
        return BAD("full: missing key '%s'", graph ? "bindings" : "graph");
    if ((rc = unpack_bindings(bindings, r->full_bindings, &r->n_full_bindings, "full bindings",
                              err)) < 0 ||
        (rc = unpack_graph(graph, r->full_bindings, r->n_full_bindings, "full", &r->full, err)) < 0)
        return rc;
    const ops_graph *sub = r->sub, *full = r->full;
    for (int i = 0; i < sub->n_tensors && sub->tensors[i].producer < 0; i++) {
        const ops_tensor *st = &sub->tensors[i];
        int f = ops_graph_find_tensor(full, st->name);
        if (f < 0)
            return BAD("full: no tensor '%s' (an input of 'sub')", st->name);
        const ops_tensor *ft = &full->tensors[f];
        if (ft->dtype != st->dtype || !ops_shape_same_sizes(&ft->shape, &st->shape))
            return BAD("full: tensor '%s' differs in dtype or shape from the input of 'sub'",
                       st->name);
    }
    return 0;
}

int srch_eval_req_unpack(const msgpack_object *o, srch_eval_req *r, kt_err *err)
{
    memset(r, 0, sizeof(*r));
    r->verify = r->time = true;
    if (o->type != MSGPACK_OBJECT_MAP)
        return BAD("eval request: expected a map");
    const msgpack_object *sub = NULL, *bindings = NULL, *cubin = NULL, *lt = NULL, *kernels = NULL,
                         *full = NULL;
    uint32_t seen = 0;
    int rc = 0;
    bool reference = false;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        int k = key_index(&kv->key, req_keys, RQ_N_KEYS, "eval request", err);
        if (k < 0) {
            rc = k;
            goto fail;
        }
        if (seen & (1u << k)) {
            rc = BAD("eval request: key '%s' repeated", req_keys[k]);
            goto fail;
        }
        seen |= 1u << k;
        const msgpack_object *v = &kv->val;
        char name[16];
        switch (k) {
        case RQ_OP:
            reference = kt_mp_str_is(v, "reference");
            rc = reference || kt_mp_str_is(v, "eval") ? 0 : BAD("'op': expected \"eval\"");
            break;
        case RQ_ID:
            rc = get_u64(v, &r->id, "id", err);
            break;
        case RQ_SUB:
            sub = v;
            break;
        case RQ_BINDINGS:
            bindings = v;
            break;
        case RQ_PRECISION:
            rc = get_str(v, name, sizeof(name), "precision", err);
            if (rc == 0 && ops_precision_from_name(name, &r->precision) < 0)
                rc = BAD("'precision': unknown policy '%s'", name);
            break;
        case RQ_TOLERANCE:
            rc = get_f64(v, &r->tolerance, "tolerance", err);
            if (rc == 0 && !isfinite(r->tolerance))
                rc = BAD("'tolerance': not finite");
            break;
        case RQ_SEEDS:
            rc = get_int(v, 0, 64, &r->seeds, "seeds", err);
            break;
        case RQ_SEED0:
            rc = get_u64(v, &r->seed0, "seed0", err);
            break;
        case RQ_VERIFY:
            rc = get_bool(v, &r->verify, "verify", err);
            break;
        case RQ_TIME:
            rc = get_bool(v, &r->time, "time", err);
            break;
        case RQ_TIMING:
            rc = unpack_timing(v, &r->timing, err);
            break;
        case RQ_LIBRARY:
            rc = get_bool(v, &r->library, "library", err);
            break;
        case RQ_CUBIN:
            cubin = v;
            break;
        case RQ_KERNELS:
            kernels = v;
            break;
        case RQ_WORKSPACE:
            rc = get_i64(v, 0, (int64_t)1 << 40, &r->workspace_bytes, "workspace", err);
            break;
        case RQ_LT:
            lt = v;
            break;
        case RQ_FULL:
            full = v;
            break;
        case RQ_RECORD:
            rc = get_bool(v, &r->record, "record", err);
            break;
        }
        if (rc < 0)
            goto fail;
    }
    if (!(seen & (1u << RQ_ID))) {
        rc = BAD("eval request: missing key 'id'");
        goto fail;
    }
    if (!sub) {
        rc = BAD("eval request: missing key 'sub'");
        goto fail;
    }
    if (bindings &&
        (rc = unpack_bindings(bindings, r->bindings, &r->n_bindings, "bindings", err)) < 0)
        goto fail;
    if ((rc = unpack_graph(sub, r->bindings, r->n_bindings, "sub", &r->sub, err)) < 0)
        goto fail;
    if (full && (rc = unpack_full(full, r, err)) < 0)
        goto fail;
    if (kernels) {
        if (kernels->type != MSGPACK_OBJECT_ARRAY ||
            kernels->via.array.size > SRCH_REQ_MAX_KERNELS) {
            rc = BAD("'kernels': expected an array of at most %d launches", SRCH_REQ_MAX_KERNELS);
            goto fail;
        }
        r->n_kernels = (int)kernels->via.array.size;
        for (int k = 0; k < r->n_kernels; k++) {
            if ((rc = unpack_kernel(&kernels->via.array.ptr[k], &r->kernels[k], &r->zero_offset[k],
                                    &r->zero_bytes[k], err)) < 0)
                goto fail;
            if (r->zero_bytes[k] > r->workspace_bytes - r->zero_offset[k]) {
                rc = BAD("kernel %d ('%s'): zero range [%lld, +%lld) beyond the %lld-byte "
                         "workspace",
                         k, r->kernels[k].entry, (long long)r->zero_offset[k],
                         (long long)r->zero_bytes[k], (long long)r->workspace_bytes);
                goto fail;
            }
            for (int a = 0; a < r->kernels[k].n_args; a++) {
                const ops_arg *arg = &r->kernels[k].args[a];
                bool on_tensor = arg->kind == OPS_ARG_TENSOR ||
                                 (arg->kind == OPS_ARG_TENSOR_MAP && arg->tensor >= 0);
                bool on_ws = arg->kind == OPS_ARG_WORKSPACE ||
                             (arg->kind == OPS_ARG_TENSOR_MAP && arg->tensor < 0);
                if (on_tensor && !is_io_tensor(r->sub, arg->tensor)) {
                    rc = BAD("kernel %d ('%s') argument %d: tensor %d is not an input or output "
                             "of 'sub'",
                             k, r->kernels[k].entry, a, arg->tensor);
                    goto fail;
                }
                if (on_ws && arg->offset >= r->workspace_bytes) {
                    rc = BAD("kernel %d ('%s') argument %d: workspace offset %lld beyond the "
                             "%lld-byte workspace",
                             k, r->kernels[k].entry, a, (long long)arg->offset,
                             (long long)r->workspace_bytes);
                    goto fail;
                }
                if (arg->kind == OPS_ARG_TENSOR_MAP) {
                    /* The copies must stay inside the buffer the map lies over. */
                    uint64_t span = ops_tensor_map_span(&arg->tmap), have;
                    if (on_tensor) {
                        const ops_tensor *x = &r->sub->tensors[arg->tensor];
                        have = (uint64_t)ops_shape_numel(&x->shape) * ops_dtype_size(x->dtype);
                    } else {
                        have = (uint64_t)(r->workspace_bytes - arg->offset);
                    }
                    if (span > have) {
                        rc = BAD("kernel %d ('%s') argument %d: the tensor map spans %llu bytes, "
                                 "its buffer holds %llu",
                                 k, r->kernels[k].entry, a, (unsigned long long)span,
                                 (unsigned long long)have);
                        goto fail;
                    }
                }
            }
        }
    }
    if (reference && !r->library && !cubin && !r->n_kernels)
        return 0; /* a "reference" request names no candidate */
    if (r->library) {
        if (!lt || lt->type == MSGPACK_OBJECT_NIL) {
            rc = BAD("library candidate without 'lt'");
            goto fail;
        }
        if ((rc = unpack_lt(lt, &r->lt, err)) < 0)
            goto fail;
        if (!is_io_tensor(r->sub, r->lt.a_tensor) || !is_io_tensor(r->sub, r->lt.b_tensor) ||
            !is_io_tensor(r->sub, r->lt.c_tensor) ||
            (r->lt.bias_tensor >= 0 && !is_io_tensor(r->sub, r->lt.bias_tensor))) {
            rc = BAD("lt: a tensor is not an input or output of 'sub'");
            goto fail;
        }
        if (r->n_kernels) {
            rc = BAD("library candidate with kernels");
            goto fail;
        }
    } else {
        if (lt && lt->type != MSGPACK_OBJECT_NIL) {
            rc = BAD("'lt' on a kernel candidate");
            goto fail;
        }
        if (!cubin || cubin->type != MSGPACK_OBJECT_BIN || cubin->via.bin.size == 0) {
            rc = BAD("kernel candidate without a 'cubin' (bin)");
            goto fail;
        }
        if (r->n_kernels < 1) {
            rc = BAD("kernel candidate without kernels");
            goto fail;
        }
        r->cubin = malloc(cubin->via.bin.size);
        if (!r->cubin) {
            rc = kt_err_set(err, -ENOMEM, "out of memory copying the cubin");
            goto fail;
        }
        memcpy(r->cubin, cubin->via.bin.ptr, cubin->via.bin.size);
        r->cubin_len = cubin->via.bin.size;
    }
    return 0;
fail:
    srch_eval_req_free(r);
    return rc;
}

void srch_eval_req_free(srch_eval_req *r)
{
    if (!r)
        return;
    ops_graph_free(r->sub);
    ops_graph_free(r->full);
    free(r->cubin);
    r->sub = NULL;
    r->full = NULL;
    r->n_full_bindings = 0;
    r->cubin = NULL;
    r->cubin_len = 0;
}

enum { RS_OK, RS_ID, RS_STATUS, RS_MSG, RS_ERR_NORM, RS_ERR_MAX, RS_TIME, RS_N_KEYS };
static const char *const res_keys[RS_N_KEYS] = {"ok",       "id",      "status", "msg",
                                                "err_norm", "err_max", "time"};
enum {
    TS_MEDIAN,
    TS_P10,
    TS_P90,
    TS_SPREAD,
    TS_REPS,
    TS_KERNELS,
    TS_COLD,
    TS_CLK0,
    TS_CLK1,
    TS_N_KEYS
};
static const char *const time_keys[TS_N_KEYS] = {
    "median_ns", "p10_ns", "p90_ns", "rel_spread", "reps", "kernels", "cold", "clk0", "clk1"};

static int unpack_time(const msgpack_object *o, srch_time_stats *t, kt_err *err)
{
    int rc;
    if ((rc = get_map(o, "time", err)) < 0)
        return rc;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        int k = key_index(&kv->key, time_keys, TS_N_KEYS, "time", err);
        if (k < 0)
            return k;
        int64_t v = 0;
        switch (k) {
        case TS_MEDIAN:
            rc = get_f64(&kv->val, &t->median_ns, "median_ns", err);
            break;
        case TS_P10:
            rc = get_f64(&kv->val, &t->p10_ns, "p10_ns", err);
            break;
        case TS_P90:
            rc = get_f64(&kv->val, &t->p90_ns, "p90_ns", err);
            break;
        case TS_SPREAD:
            rc = get_f64(&kv->val, &t->rel_spread, "rel_spread", err);
            break;
        case TS_REPS:
            rc = get_int(&kv->val, 0, INT32_MAX, &t->reps, "reps", err);
            break;
        case TS_KERNELS:
            rc = get_int(&kv->val, 0, INT32_MAX, &t->kernels_per_rep, "kernels", err);
            break;
        case TS_COLD:
            rc = get_bool(&kv->val, &t->cold, "cold", err);
            break;
        case TS_CLK0:
        case TS_CLK1:
            rc = get_i64(&kv->val, 0, UINT32_MAX, &v, time_keys[k], err);
            if (k == TS_CLK0)
                t->sm_clock_khz_before = (uint32_t)v;
            else
                t->sm_clock_khz_after = (uint32_t)v;
            break;
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

int srch_eval_result_unpack(const msgpack_object *o, srch_eval_result *r, kt_err *err)
{
    memset(r, 0, sizeof(*r));
    if (o->type != MSGPACK_OBJECT_MAP)
        return BAD("eval result: expected a map");
    unsigned seen = 0;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        int k = key_index(&kv->key, res_keys, RS_N_KEYS, "eval result", err);
        if (k < 0)
            return k;
        seen |= 1u << k;
        int rc = 0;
        bool ok = false;
        switch (k) {
        case RS_OK:
            rc = get_bool(&kv->val, &ok, "ok", err);
            if (rc == 0 && !ok)
                rc = BAD("eval result: 'ok' is false");
            break;
        case RS_ID:
            rc = get_u64(&kv->val, &r->id, "id", err);
            break;
        case RS_STATUS:
            rc = BAD("'status': unknown status");
            for (int s = 0; s < SRCH_STATUS_COUNT; s++)
                if (kt_mp_str_is(&kv->val, status_names[s])) {
                    r->status = (srch_status)s;
                    rc = 0;
                }
            break;
        case RS_MSG:
            /* A long message is cut, not refused: it is for people. */
            if (kv->val.type != MSGPACK_OBJECT_STR) {
                rc = BAD("'msg': expected a string");
            } else {
                size_t n = kv->val.via.str.size;
                if (n >= sizeof(r->msg))
                    n = sizeof(r->msg) - 1;
                memcpy(r->msg, kv->val.via.str.ptr, n);
                r->msg[n] = '\0';
            }
            break;
        case RS_ERR_NORM:
            rc = get_f64(&kv->val, &r->err_norm, "err_norm", err);
            break;
        case RS_ERR_MAX:
            rc = get_f64(&kv->val, &r->err_max, "err_max", err);
            break;
        case RS_TIME:
            rc = unpack_time(&kv->val, &r->time, err);
            break;
        }
        if (rc < 0)
            return rc;
    }
    if (!(seen & (1u << RS_ID)) || !(seen & (1u << RS_STATUS)))
        return BAD("eval result: missing 'id' or 'status'");
    return 0;
}
