/* The library family: a matmul group run by cuBLASLt instead of a generated kernel.
 *
 * A group matches when it is one matmul followed by an epilogue chain cuBLASLt can fuse:
 * optionally a bias add (a vector over the output's last dim, broadcast over rows), then
 * optionally relu or gelu_tanh. The candidates are the first 8 results of cuBLASLt's heuristic
 * (cublasLtMatmulAlgoGetHeuristic), enumerated on the GPU; here the family only describes the
 * call (ops/library.h) and emits a comment block naming it: n_kernels is 0. */
#include "library.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { K_HEURISTIC, N_KNOBS };

static const ops_knob library_knobs[N_KNOBS] = {
    [K_HEURISTIC] = {"heuristic", 8, {0, 1, 2, 3, 4, 5, 6, 7}, NULL},
};

typedef struct lib_info {
    int mm_node;
    const ops_node *mm;
    int32_t a, b, out; /* graph tensors: matmul operands and the group's output */
    int32_t bias;      /* bias tensor or -1 */
    ops_op act;        /* OPS_RELU, OPS_GELU_TANH, or OPS_OP_INVALID */
    int out_rank;
    int64_t batch;              /* product of the output's batch dims */
    int64_t m, n, k;            /* row-major problem */
    int64_t stride_a, stride_b; /* elements between batches (0: reused) */
    ops_dtype dt;
} lib_info;

/* True when t's shape is [..1.., n]: one value per output column. */
static bool is_row_bias(const ops_tensor *t, int64_t n, int out_rank)
{
    const ops_shape *s = &t->shape;
    if (s->rank < 1 || s->rank > out_rank || s->d[s->rank - 1].size != n)
        return false;
    for (int i = 0; i < s->rank - 1; i++)
        if (s->d[i].size != 1)
            return false;
    return true;
}

/* Batch stride of a matmul operand against the output's batch dims: one matrix when its batch
 * dims equal the output's, 0 when it has none (or all 1), -1 when cuBLASLt's single stride
 * cannot express the broadcast. */
static int64_t batch_stride(const ops_shape *op, const ops_shape *out)
{
    int ob = out->rank - 2, pb = op->rank - 2;
    int64_t matrix = op->d[op->rank - 1].size * op->d[op->rank - 2].size;
    bool all_one = true, equal = pb == ob;
    for (int i = 0; i < pb; i++) {
        all_one &= op->d[i].size == 1;
        if (equal)
            equal &= op->d[i].size == out->d[i].size;
    }
    if (equal)
        return matrix;
    return all_one ? 0 : -1;
}

static bool lib_analyse(const ops_group *grp, lib_info *li)
{
    const ops_graph *g = grp->g;
    memset(li, 0, sizeof(*li));
    li->bias = -1;
    li->act = OPS_OP_INVALID;
    if (grp->n_nodes < 1 || grp->n_nodes > 3 || grp->n_out != 1)
        return false;
    li->mm_node = grp->nodes[0];
    li->mm = &g->nodes[li->mm_node];
    if (li->mm->op != OPS_MATMUL)
        return false;
    li->a = li->mm->in[0].tensor;
    li->b = li->mm->in[1].tensor;
    const ops_tensor *ta = &g->tensors[li->a], *tb = &g->tensors[li->b];
    const ops_tensor *tm = &g->tensors[li->mm->out];
    li->dt = tm->dtype;
    if (li->dt != OPS_DT_F16 && li->dt != OPS_DT_BF16 && li->dt != OPS_DT_F32)
        return false;
    if (ta->shape.rank < 2 || tb->shape.rank < 2 || tm->shape.rank < 2)
        return false;
    li->out_rank = tm->shape.rank;
    li->m = tm->shape.d[li->out_rank - 2].size;
    li->n = tm->shape.d[li->out_rank - 1].size;
    li->k = ta->shape.d[ta->shape.rank - (li->mm->attrs.transpose_a ? 2 : 1)].size;
    li->batch = 1;
    for (int i = 0; i < li->out_rank - 2; i++)
        li->batch *= tm->shape.d[i].size;
    li->stride_a = batch_stride(&ta->shape, &tm->shape);
    li->stride_b = batch_stride(&tb->shape, &tm->shape);
    if (li->stride_a < 0 || li->stride_b < 0 || li->batch > INT32_MAX)
        return false;

    /* The epilogue chain: [add bias] then [relu | gelu_tanh], each consuming the previous. */
    int32_t cur = li->mm->out;
    for (int i = 1; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        if (n->op == OPS_ADD && li->bias < 0 && li->act == OPS_OP_INVALID) {
            int k = n->in[0].tensor == cur ? 1 : n->in[1].tensor == cur ? 0 : -1;
            if (k < 0 || n->in[k].tensor < 0 || n->in[1 - k].tensor != cur)
                return false;
            const ops_tensor *bt = &g->tensors[n->in[k].tensor];
            if (bt->producer >= 0 && (grp->mask >> bt->producer & 1))
                return false;
            if (!is_row_bias(bt, li->n, li->out_rank) || bt->dtype != li->dt)
                return false;
            li->bias = n->in[k].tensor;
        } else if ((n->op == OPS_RELU || n->op == OPS_GELU_TANH) && li->act == OPS_OP_INVALID) {
            if (n->in[0].tensor != cur)
                return false;
            li->act = n->op;
        } else {
            return false;
        }
        cur = n->out;
    }
    li->out = cur;
    return grp->out[0] == cur;
}

static bool library_matches(const ops_group *grp)
{
    lib_info li;
    return lib_analyse(grp, &li);
}

static const char *library_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev)
{
    lib_info li;
    if (!lib_analyse(grp, &li))
        return "shape";
    if (s->v[K_HEURISTIC] < 0 || s->v[K_HEURISTIC] > 7)
        return "shape";
    return NULL;
}

static ops_lt_dtype lt_dtype(ops_dtype dt)
{
    return dt == OPS_DT_F16 ? OPS_LT_R_16F : dt == OPS_DT_BF16 ? OPS_LT_R_16BF : OPS_LT_R_32F;
}

int ops_library_describe(const ops_group *grp, const ops_schedule *s, ops_lt_desc *out, ops_diag *d)
{
    lib_info li;
    if (s->family != OPS_FAM_LIBRARY)
        return ops_diag_set(d, grp->g, OPS_RULE_SCHEMA, -1, "",
                            "library: the schedule is not of the library family");
    if (!lib_analyse(grp, &li))
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "library: the group is not a matmul with a cuBLASLt epilogue");
    const ops_attrs *at = &li.mm->attrs;
    memset(out, 0, sizeof(*out));
    out->compute = OPS_LT_COMPUTE_32F;
    if (li.dt == OPS_DT_F32 && grp->precision != OPS_PREC_EXACT)
        out->compute = OPS_LT_COMPUTE_32F_FAST_TF32;
    out->scale_type = OPS_LT_R_32F;
    out->alpha = 1.0;
    out->beta = 0.0;
    /* C^T = op(B)^T op(A)^T: cuBLASLt's A is the graph's B, its B the graph's A. */
    out->transa = at->transpose_b ? OPS_LT_OP_T : OPS_LT_OP_N;
    out->transb = at->transpose_a ? OPS_LT_OP_T : OPS_LT_OP_N;
    out->m = li.n;
    out->n = li.m;
    out->k = li.k;
    out->lda = at->transpose_b ? li.k : li.n;
    out->ldb = at->transpose_a ? li.m : li.k;
    out->ldc = li.n;
    out->a_rows = out->transa == OPS_LT_OP_N ? out->m : out->k;
    out->a_cols = out->transa == OPS_LT_OP_N ? out->k : out->m;
    out->b_rows = out->transb == OPS_LT_OP_N ? out->k : out->n;
    out->b_cols = out->transb == OPS_LT_OP_N ? out->n : out->k;
    out->a_type = out->b_type = out->c_type = lt_dtype(li.dt);
    out->batch_count = (int32_t)li.batch;
    out->stride_a = li.stride_b;
    out->stride_b = li.stride_a;
    out->stride_c = li.m * li.n;
    out->a_tensor = li.b;
    out->b_tensor = li.a;
    out->c_tensor = li.out;
    out->bias_tensor = li.bias;
    bool bias = li.bias >= 0;
    if (li.act == OPS_RELU)
        out->epilogue = bias ? OPS_LT_EPILOGUE_RELU_BIAS : OPS_LT_EPILOGUE_RELU;
    else if (li.act == OPS_GELU_TANH)
        out->epilogue = bias ? OPS_LT_EPILOGUE_GELU_BIAS : OPS_LT_EPILOGUE_GELU;
    else
        out->epilogue = bias ? OPS_LT_EPILOGUE_BIAS : OPS_LT_EPILOGUE_DEFAULT;
    out->heuristic_index = s->v[K_HEURISTIC];
    out->workspace_bytes = OPS_LT_WORKSPACE_BYTES;
    return 0;
}

static const char *dtype_cuda(ops_lt_dtype t)
{
    return t == OPS_LT_R_16F ? "CUDA_R_16F" : t == OPS_LT_R_16BF ? "CUDA_R_16BF" : "CUDA_R_32F";
}

static const char *compute_cuda(ops_lt_compute c)
{
    switch (c) {
    case OPS_LT_COMPUTE_32F_FAST_16F:
        return "CUBLAS_COMPUTE_32F_FAST_16F";
    case OPS_LT_COMPUTE_32F_FAST_16BF:
        return "CUBLAS_COMPUTE_32F_FAST_16BF";
    case OPS_LT_COMPUTE_32F_FAST_TF32:
        return "CUBLAS_COMPUTE_32F_FAST_TF32";
    case OPS_LT_COMPUTE_32F:
        break;
    }
    return "CUBLAS_COMPUTE_32F";
}

static const char *epilogue_cuda(ops_lt_epilogue e)
{
    switch (e) {
    case OPS_LT_EPILOGUE_RELU:
        return "CUBLASLT_EPILOGUE_RELU";
    case OPS_LT_EPILOGUE_BIAS:
        return "CUBLASLT_EPILOGUE_BIAS";
    case OPS_LT_EPILOGUE_RELU_BIAS:
        return "CUBLASLT_EPILOGUE_RELU_BIAS";
    case OPS_LT_EPILOGUE_GELU:
        return "CUBLASLT_EPILOGUE_GELU (tanh approximation)";
    case OPS_LT_EPILOGUE_GELU_BIAS:
        return "CUBLASLT_EPILOGUE_GELU_BIAS (tanh approximation)";
    case OPS_LT_EPILOGUE_DEFAULT:
        break;
    }
    return "CUBLASLT_EPILOGUE_DEFAULT";
}

static int library_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                        ops_emitted *out, ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    ops_lt_desc lt;
    int rc = ops_library_describe(grp, s, &lt, d);
    if (rc < 0)
        return rc;
    const ops_graph *g = grp->g;
    char ca[OPS_EMIT_COMMENT_MAX], cb[OPS_EMIT_COMMENT_MAX], cc[OPS_EMIT_COMMENT_MAX];
    char cbias[OPS_EMIT_COMMENT_MAX];
    const char *na = ops_emit_comment_text(g->tensors[lt.a_tensor].name, ca, sizeof(ca));
    const char *nb = ops_emit_comment_text(g->tensors[lt.b_tensor].name, cb, sizeof(cb));
    const char *nc = ops_emit_comment_text(g->tensors[lt.c_tensor].name, cc, sizeof(cc));
    kt_buf b = {0};
    ops_emit_header(&b, grp, s);
    kt_buf_printf(&b, "/*\n");
    kt_buf_printf(&b, " * No generated kernel: this candidate is one cuBLASLt call.\n");
    kt_buf_printf(&b,
                  " * Row-major %s [M=%lld, N=%lld] is computed as its column-major "
                  "transpose\n",
                  nc, (long long)lt.n, (long long)lt.m);
    kt_buf_printf(&b,
                  " *   %s^T (%lld x %lld) = op(%s)^T op(%s)^T, so cuBLASLt's A is %s and "
                  "its B is %s.\n",
                  nc, (long long)lt.m, (long long)lt.n, na, nb, na, nb);
    kt_buf_printf(&b, " *\n");
    kt_buf_printf(&b, " * cublasLtMatmulDescCreate(&op, %s, CUDA_R_32F);\n",
                  compute_cuda(lt.compute));
    kt_buf_printf(&b, " *   CUBLASLT_MATMUL_DESC_TRANSA   = %s\n",
                  lt.transa == OPS_LT_OP_T ? "CUBLAS_OP_T" : "CUBLAS_OP_N");
    kt_buf_printf(&b, " *   CUBLASLT_MATMUL_DESC_TRANSB   = %s\n",
                  lt.transb == OPS_LT_OP_T ? "CUBLAS_OP_T" : "CUBLAS_OP_N");
    kt_buf_printf(&b, " *   CUBLASLT_MATMUL_DESC_EPILOGUE = %s\n", epilogue_cuda(lt.epilogue));
    if (lt.bias_tensor >= 0)
        kt_buf_printf(&b,
                      " *   CUBLASLT_MATMUL_DESC_BIAS_POINTER = %s (%lld values, one per "
                      "row of D)\n",
                      ops_emit_comment_text(g->tensors[lt.bias_tensor].name, cbias, sizeof(cbias)),
                      (long long)lt.m);
    kt_buf_printf(&b, " * cublasLtMatrixLayoutCreate (type, rows, cols, ld):\n");
    kt_buf_printf(&b, " *   A = %-8s (%s, %lld, %lld, %lld)\n", na, dtype_cuda(lt.a_type),
                  (long long)lt.a_rows, (long long)lt.a_cols, (long long)lt.lda);
    kt_buf_printf(&b, " *   B = %-8s (%s, %lld, %lld, %lld)\n", nb, dtype_cuda(lt.b_type),
                  (long long)lt.b_rows, (long long)lt.b_cols, (long long)lt.ldb);
    kt_buf_printf(&b, " *   C = D = %-4s (%s, %lld, %lld, %lld)\n", nc, dtype_cuda(lt.c_type),
                  (long long)lt.m, (long long)lt.n, (long long)lt.ldc);
    if (lt.batch_count > 1)
        kt_buf_printf(
            &b, " *   BATCH_COUNT = %d, STRIDED_BATCH_OFFSET A %lld, B %lld, C = D %lld\n",
            lt.batch_count, (long long)lt.stride_a, (long long)lt.stride_b, (long long)lt.stride_c);
    kt_buf_printf(&b,
                  " * cublasLtMatmulAlgoGetHeuristic(..., workspace %lld bytes) -> result "
                  "[%d]\n",
                  (long long)lt.workspace_bytes, lt.heuristic_index);
    kt_buf_printf(&b,
                  " * cublasLtMatmul(lt, op, &alpha = 1.0f, %s, A, %s, B, &beta = 0.0f, "
                  "%s, C, %s, D, &algo, workspace, %lld, stream);\n",
                  na, nb, nc, nc, (long long)lt.workspace_bytes);
    kt_buf_printf(&b, " */\n");
    if (kt_buf_status(&b) < 0) {
        kt_buf_free(&b);
        return -ENOMEM;
    }
    out->source = kt_buf_take(&b);
    out->n_kernels = 0;
    out->workspace_bytes = lt.workspace_bytes;
    return 0;
}

/* Roofline with a cuBLAS-like efficiency: 85% of peak on full waves of 128x128 tiles, less
 * for short K; each later heuristic result is assumed a little slower than the first. */
static void library_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                             ops_estimate *e)
{
    memset(e, 0, sizeof(*e));
    lib_info li;
    if (!lib_analyse(grp, &li))
        return;
    const ops_graph *g = grp->g;
    double mnk = (double)li.m * (double)li.n * (double)li.k * (double)li.batch;
    e->flops = 2.0 * mnk + (double)li.m * li.n * li.batch * (grp->n_nodes - 1);
    double size = (double)ops_dtype_size(li.dt);
    e->bytes =
        size * ((double)ops_shape_numel(&g->tensors[li.a].shape) +
                (double)ops_shape_numel(&g->tensors[li.b].shape) + (double)li.m * li.n * li.batch);
    if (li.bias >= 0)
        e->bytes += size * (double)li.n;
    double peak = dev->f16_flops_per_s;
    if (li.dt == OPS_DT_F32)
        peak = grp->precision == OPS_PREC_EXACT ? dev->fp32_flops_per_s : dev->tf32_flops_per_s;
    double tiles = ceil((double)li.m / 128) * ceil((double)li.n / 128) * (double)li.batch;
    double waves = ceil(tiles / dev->sm_count);
    double wave_eff = tiles / (waves * dev->sm_count);
    double k_eff = (double)li.k / ((double)li.k + 64.0);
    double rank = 1.0 - 0.03 * s->v[K_HEURISTIC];
    double eff = 0.85 * wave_eff * k_eff * rank;
    /* 16-bit data whose rows are not 16-byte multiples (any of A, B, C's leading dimensions,
     * which are K or M, N or K, and N): cuBLASLt's unaligned kernels, measured on the H200 at
     * 4093^3 f16 in 879 us against ~185 for 4096^3 (bench/results/h200-2026-11-29-i22-sweep/) */
    if (size == 2) {
        const ops_node *mm = li.mm;
        int64_t lda = mm->attrs.transpose_a ? li.m : li.k, ldb = mm->attrs.transpose_b ? li.k : li.n;
        if (lda % 8 || ldb % 8 || li.n % 8)
            eff /= 4.7;
    }
    double t_math = e->flops / (peak * eff);
    double t_mem = e->bytes / (dev->dram_bytes_per_s * 0.9 * rank);
    e->seconds = (t_math > t_mem ? t_math : t_mem) + 4e-6;
    e->occupancy = 0.5;
}

const ops_family ops_family_library = {
    .id = OPS_FAM_LIBRARY,
    .name = "library",
    .n_knobs = N_KNOBS,
    .knobs = library_knobs,
    .matches = library_matches,
    .prune = library_prune,
    .emit = library_emit,
    .estimate = library_estimate,
};
