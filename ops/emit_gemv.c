/* The gemv family: a matrix-vector product y[M] = A[M][K] x[K] written as a matmul whose output
 * has one column (N == 1: A [M, K] row-major, B [K, 1]), plus an elementwise epilogue chain on
 * its output, as one kernel. Decode-time LLM layers and DeepBench's inference GEMMs are of this
 * shape: every element of A is read once and used once, so the kernel is bound by DRAM
 * bandwidth and the tile machinery of the gemm family (16-wide tiles, 15 of 16 columns wasted,
 * at most M / BM blocks) only gets in the way.
 *
 * The decode form too: a few token rows against a weight stored as nn.Linear stores it,
 * y[T, N] = X[T, K] W[N, K]^T (matmul with transpose_b, T <= GEMV_MAX_T). There the weight is the
 * streamed matrix A (its N rows of K), the T rows of X are the vectors, and every element of A
 * loaded is used T times from registers (converted to fp32 once), so the weight is still read
 * once; past ~16 tokens FFMA, not DRAM, would bound it, and the gemm family's tensor cores take
 * over.
 *
 * Each row is owned by TPR consecutive lanes (TPR divides 32); a thread group of TPR lanes
 * walks its R rows together: per step every lane loads VEC consecutive elements of x and of
 * each of the R rows (16-byte loads at VEC = 8 for 16-bit data), accumulates in fp32, and at the
 * end the TPR lanes of a row reduce by warp shuffles in a fixed order (deterministic). The lane
 * that owns the row's first element applies the epilogue and stores. x is re-read by every
 * row group: it is small and stays in L1/L2.
 *
 * Knobs: threads per block, lanes per row (TPR), rows per thread group (R), vector width, and
 * how A is loaded (sm_80+): as cached (through L1, the default policy), with a 256-byte L2
 * prefetch hint (each DRAM request fetches the next sectors of the row with it), or streamed
 * (the prefetch, no L1 allocation, and an L2 evict-first policy so A's single use does not push
 * x out; Inductor's reductions load a GEMV's matrix with evict_first).
 *
 * math=mma (16-bit data, sm_80+): the same streaming on the tensor cores, for up to 64 token
 * rows. A warp owns 16 rows of A and one k slice of ksplit; per 32 elements of k each lane loads
 * 16 bytes of rows g and g + 8 (g = lane / 4) and of token g of every 8-token tile, at k offset
 * 8 * (lane % 4), and feeds two m16n8k16 products. That puts memory k 8q .. 8q + 3 of lane q into
 * the product's k slots 2q, 2q + 1, 2q + 8, 2q + 9 (and 8q + 4 .. 8q + 7 into the second's):
 * a permutation of k, the same for A and x, so the dot products are unchanged while every load
 * is a whole 16 bytes of a row. The ksplit warps of a row block add their sums through shared
 * memory in a fixed order (deterministic), and the first applies the epilogue. A warp may own
 * rows (1, 2, 4) blocks of 16 rows, each x load then feeding all of them: x is re-read from L2
 * once per warp, which matters past 8 tokens. */
#include "family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_THREADS, K_TPR, K_ROWS, K_VEC, K_LOAD, K_MATH, K_KSPLIT, N_KNOBS };
enum { LOAD_CACHED, LOAD_PREFETCH, LOAD_STREAM };
enum { MATH_FFMA, MATH_MMA };

static const char *const load_labels[] = {"cached", "prefetch", "stream"};
static const char *const math_labels[] = {"ffma", "mma"};

static const ops_knob gemv_knobs[N_KNOBS] = {
    [K_THREADS] = {"threads", 4, {64, 128, 256, 512}, NULL},
    [K_TPR] = {"tpr", 7, {4, 8, 16, 32, 64, 128, 256}, NULL}, /* lanes per row */
    [K_ROWS] = {"rows", 3, {1, 2, 4}, NULL},                  /* rows per lane group */
    [K_VEC] = {"vec", 4, {1, 2, 4, 8}, NULL},                 /* elements per load */
    [K_LOAD] = {"load", 3, {LOAD_CACHED, LOAD_PREFETCH, LOAD_STREAM}, load_labels}, /* of A */
    [K_MATH] = {"math", 2, {MATH_FFMA, MATH_MMA}, math_labels},
    [K_KSPLIT] = {"ksplit", 4, {1, 2, 4, 8}, NULL}, /* mma: warps sharing a row block's k */
};

/* Token rows of the decode form (y = X W^T): the FFMA kernel's (its sums are registers, and past
 * ~16 FFMA, not DRAM, bounds it) and the tensor-core kernel's (8-token tiles). */
#define GEMV_MAX_T_FFMA 16
#define GEMV_MAX_T      64

typedef struct gemv_info {
    const ops_graph *g;
    int mm;   /* the matmul node */
    int a, x; /* the streamed matrix and the vector(s) (group inputs) */
    int y;    /* the group output */
    ops_dtype adt, xdt;
    int64_t M, K;
    int64_t T;   /* vectors: 1, or X's rows in the decode form */
    bool decode; /* y [T, M] = X [T, K] A [M, K]^T (A is the matmul's second operand) */
    int n_epi;
    int epi[OPS_GROUP_MAX_NODES];
} gemv_info;

static bool in_group(const ops_group *grp, int node)
{
    return node >= 0 && (grp->mask >> node & 1);
}

/* True when grp is one un-batched matmul A [M, K] x B [K, 1] (neither transposed), or
 * X [T, K] x W [N, K]^T with T <= GEMV_MAX_T (the decode form), operands read from memory,
 * followed by elementwise nodes of its output's shape. */
static bool gemv_analyse(const ops_group *grp, gemv_info *in)
{
    const ops_graph *g = grp->g;
    memset(in, 0, sizeof(*in));
    in->g = g;
    in->mm = -1;
    if (!g || !g->validated || grp->n_out != 1)
        return false;
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        if (n->op == OPS_MATMUL) {
            if (in->mm >= 0)
                return false;
            in->mm = grp->nodes[i];
        } else if (!ops_is_elementwise(n->op)) {
            return false;
        }
    }
    if (in->mm < 0)
        return false;
    const ops_node *mm = &g->nodes[in->mm];
    if (mm->attrs.transpose_a)
        return false;
    in->decode = mm->attrs.transpose_b;
    in->a = mm->in[in->decode ? 1 : 0].tensor;
    in->x = mm->in[in->decode ? 0 : 1].tensor;
    if (in->a < 0 || in->x < 0 || in_group(grp, g->tensors[in->a].producer) ||
        in_group(grp, g->tensors[in->x].producer))
        return false;
    const ops_shape *as = &g->tensors[in->a].shape, *xs = &g->tensors[in->x].shape;
    const ops_shape *os = &g->tensors[mm->out].shape;
    if (as->rank != 2 || xs->rank != 2 || os->rank != 2)
        return false;
    in->M = as->d[0].size;
    in->K = as->d[1].size;
    in->T = in->decode ? xs->d[0].size : 1;
    if (in->decode ? xs->d[1].size != in->K || in->T > GEMV_MAX_T : xs->d[1].size != 1)
        return false;
    in->adt = g->tensors[in->a].dtype;
    in->xdt = g->tensors[in->x].dtype;
    if (in->M < 1 || in->K < 1 || in->M * in->K >= ((int64_t)1 << 31))
        return false;
    /* The epilogue: elementwise nodes of the output's shape fed by the matmul's chain; their
     * other operands broadcast into [M, 1]. */
    uint64_t chain = 1ull << in->mm;
    for (int i = 0; i < grp->n_nodes; i++) {
        int ni = grp->nodes[i];
        if (ni == in->mm)
            continue;
        const ops_node *n = &g->nodes[ni];
        if (!ops_shape_same_sizes(&g->tensors[n->out].shape, os))
            return false;
        bool from_chain = false;
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k].tensor;
            if (t == OPS_SCALAR)
                continue;
            if (in_group(grp, g->tensors[t].producer)) {
                if (!(chain >> g->tensors[t].producer & 1))
                    return false;
                from_chain = true;
            } else if (g->tensors[t].shape.rank > 2) {
                return false;
            }
        }
        if (!from_chain)
            return false;
        chain |= 1ull << ni;
        in->epi[in->n_epi++] = ni;
    }
    in->y = grp->out[0];
    return chain >> g->tensors[in->y].producer & 1;
}

static bool gemv_matches(const ops_group *grp)
{
    gemv_info in;
    return gemv_analyse(grp, &in);
}

typedef struct gemv_plan {
    int threads, tpr, rows, vec, load;
    int math, ksplit;
    int ntiles; /* mma: 8-token tiles */
    int64_t rows_per_block, grid;
} gemv_plan;

static const char *mma_plan_make(const gemv_info *in, gemv_plan *p, const ops_device *dev);

static const char *gemv_plan_make(const gemv_info *in, const ops_schedule *s, const ops_device *dev,
                                  gemv_plan *p)
{
    p->threads = s->v[K_THREADS];
    p->tpr = s->v[K_TPR];
    p->rows = s->v[K_ROWS];
    p->vec = s->v[K_VEC];
    p->load = s->v[K_LOAD];
    p->math = s->v[K_MATH];
    p->ksplit = s->v[K_KSPLIT];
    if (p->math == MATH_MMA)
        return mma_plan_make(in, p, dev);
    if (p->ksplit != 1)
        return "redundant"; /* k is split across a row's lanes, not warps */
    if (in->T > GEMV_MAX_T_FFMA)
        return "shape";
    if (p->tpr > p->threads)
        return "redundant"; /* a row's lanes in one block */
    p->rows_per_block = (int64_t)p->threads / p->tpr * p->rows;
    p->grid = (in->M + p->rows_per_block - 1) / p->rows_per_block;
    size_t es = ops_dtype_size(in->adt) > ops_dtype_size(in->xdt) ? ops_dtype_size(in->adt)
                                                                  : ops_dtype_size(in->xdt);
    if (p->threads > dev->max_threads_per_block)
        return "threads";
    if (p->load != LOAD_CACHED && dev->sm_major < 8)
        return "shape"; /* L2 prefetch sizes and cache policies are sm_80 PTX */
    if (p->vec * es > 16)
        return "align";
    if (in->K % p->vec)
        return "divisibility"; /* rows start vector-aligned only when K is a multiple */
    if (p->tpr > 4 && (int64_t)(p->tpr / 2) * p->vec >= in->K)
        return "redundant"; /* half the lanes already cover the row in one step */
    if (p->tpr > 32 && p->rows > 1)
        return "redundant"; /* rows whose reads already span warps: more rows add nothing */
    if (p->rows > 1 && p->rows / 2 * p->threads / p->tpr >= in->M)
        return "redundant";
    /* Enough blocks to keep every SM streaming: a memory-bound kernel needs many loads in
     * flight, so a grid under two waves of 132 SMs is left to the smaller row groups. */
    if (p->grid < 2 * dev->sm_count && (p->rows > 1 || p->threads > 64))
        return "redundant";
    /* sums, A's elements (the decode form also keeps them as fp32 for its T uses, and a row
     * pointer), x's */
    int regs = in->decode ? 24 + p->rows * ((int)in->T + p->vec + 2) + p->vec
                          : 24 + p->rows * (1 + p->vec) + p->vec;
    if (regs > 128)
        return "regs";
    return NULL;
}

/* The tensor-core kernel's plan: warps of 16 rows x a k slice; the FFMA knobs it does not read
 * (lanes per row, rows, vector width) at one value. */
static const char *mma_plan_make(const gemv_info *in, gemv_plan *p, const ops_device *dev)
{
    if (p->tpr != 32 || p->vec != 8)
        return "redundant";
    if (dev->sm_major < 8)
        return "shape";
    if (in->adt != in->xdt || (in->adt != OPS_DT_F16 && in->adt != OPS_DT_BF16))
        return "shape"; /* m16n8k16 takes two 16-bit operands of one type */
    if (in->K % 8)
        return "divisibility"; /* 16-byte loads need rows starting 16-byte aligned */
    int warps = p->threads / 32;
    if (p->ksplit > warps)
        return "redundant";
    int64_t chunks = (in->K + 31) / 32;
    if (p->ksplit > 1 && chunks < 4 * p->ksplit)
        return "redundant"; /* a slice of fewer than 4 steps: the reduction costs more */
    p->ntiles = (int)((in->T + 7) / 8);
    if (p->rows > 1 && p->ntiles < 2)
        return "redundant"; /* more rows a warp only saves re-reads of a larger x */
    p->rows_per_block = 16 * (int64_t)p->rows * (warps / p->ksplit);
    p->grid = (in->M + p->rows_per_block - 1) / p->rows_per_block;
    if (p->grid < 2 * dev->sm_count && p->threads > 128 && p->ksplit == 1)
        return "redundant"; /* few row blocks: split k rather than grow the block */
    /* sums, the row blocks' and the tiles' 16-byte loads (unrolled twice), pointers */
    int regs = 32 + 4 * p->rows * p->ntiles + 2 * (8 * p->rows + 4 * p->ntiles);
    if (regs > 168)
        return "regs";
    return NULL;
}

static const char *gemv_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev)
{
    gemv_info in;
    if (!gemv_analyse(grp, &in))
        return "shape";
    gemv_plan p;
    return gemv_plan_make(&in, s, dev, &p);
}

/* The kernel parameter name of group tensor t. */
static void param_name(const ops_group *grp, const gemv_info *in, int t, char *out, size_t len)
{
    if (t == in->a)
        snprintf(out, len, "a");
    else if (t == in->x)
        snprintf(out, len, "x");
    else if (t == in->y)
        snprintf(out, len, "y");
    else
        for (int i = 0; i < grp->n_in; i++)
            if (grp->in[i] == t)
                snprintf(out, len, "in%d", i);
}

/* kt_gemv_store(acc, m, ...): the epilogue chain and the store of output element m (of token
 * row t in the decode form: kt_gemv_store(acc, m, t, ...)). */
static int emit_store(kt_buf *b, const ops_group *grp, const gemv_info *in, const char *params)
{
    const ops_graph *g = grp->g;
    const ops_shape *os = &g->tensors[g->nodes[in->mm].out].shape;
    static const char *const idx_vec[] = {"m", "0"}, *const idx_dec[] = {"t", "m"};
    const char *const *idx = in->decode ? idx_dec : idx_vec;
    char var[OPS_GROUP_MAX_NODES][16];
    int var_tensor[OPS_GROUP_MAX_NODES];
    int n_vars = 0, rc = 0;
    if (in->decode) {
        kt_buf_line(b, "/* Epilogue and store of output element (t, m). */");
        kt_buf_line(b, "__device__ __forceinline__ void kt_gemv_store(float acc, int m, int t, %s)",
                    params);
    } else {
        kt_buf_line(b, "/* Epilogue and store of output element m. */");
        kt_buf_line(b, "__device__ __forceinline__ void kt_gemv_store(float acc, int m, %s)",
                    params);
    }
    kt_buf_line(b, "{");
    snprintf(var[n_vars], sizeof(var[0]), "acc");
    var_tensor[n_vars++] = g->nodes[in->mm].out;
    for (int e = 0; e < in->n_epi && rc == 0; e++) {
        const ops_node *n = &g->nodes[in->epi[e]];
        kt_buf opb[OPS_MAX_OPERANDS] = {{0}};
        const char *ops[OPS_MAX_OPERANDS] = {0};
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k].tensor;
            if (t == OPS_SCALAR)
                continue;
            const char *v = NULL;
            for (int j = 0; j < n_vars; j++)
                if (var_tensor[j] == t)
                    v = var[j];
            if (v) {
                kt_buf_printf(&opb[k], "%s", v);
            } else {
                kt_buf off = {0};
                char pn[16] = "", ref[600];
                ops_emit_bcast_offset(&off, &g->tensors[t].shape, os, idx);
                param_name(grp, in, t, pn, sizeof(pn));
                snprintf(ref, sizeof(ref), "%s[%s]", pn, off.data ? off.data : "0");
                kt_buf_free(&off);
                ops_emit_to_float(&opb[k], g->tensors[t].dtype, ref);
            }
            ops[k] = opb[k].data ? opb[k].data : "0.0f";
        }
        kt_buf ex = {0};
        rc = ops_emit_elementwise(&ex, n, ops);
        snprintf(var[n_vars], sizeof(var[0]), "v%d", e);
        var_tensor[n_vars] = n->out;
        char c[OPS_EMIT_COMMENT_MAX];
        kt_buf_line(b, "    const float %s = %s; /* %s = %s */", var[n_vars],
                    ex.data ? ex.data : "0.0f",
                    ops_emit_comment_text(g->tensors[n->out].name, c, sizeof(c)),
                    ops_op_info_get(n->op)->name);
        if (kt_buf_status(&ex) < 0)
            rc = -ENOMEM;
        kt_buf_free(&ex);
        for (int k = 0; k < OPS_MAX_OPERANDS; k++)
            kt_buf_free(&opb[k]);
        n_vars++;
    }
    const char *yv = "acc";
    for (int j = 0; j < n_vars; j++)
        if (var_tensor[j] == in->y)
            yv = var[j];
    kt_buf val = {0};
    ops_emit_from_float(&val, g->tensors[in->y].dtype, yv);
    kt_buf_line(b, in->decode ? "    y[(long long)t * M + m] = %s;" : "    y[m] = %s;",
                val.data ? val.data : yv);
    if (kt_buf_status(&val) < 0)
        rc = -ENOMEM;
    kt_buf_free(&val);
    kt_buf_line(b, "}");
    kt_buf_printf(b, "\n");
    return rc;
}

/* The float expressions of element l of a vector load v of dtype dt (v.x, v.y, ... of a uintN). */
static void lane_expr(char *out, size_t len, ops_dtype dt, int vec, const char *v, int l)
{
    static const char *const f[] = {"x", "y", "z", "w"};
    char word[64], bits[96];
    if (ops_dtype_size(dt) == 4) {
        if (vec == 1)
            snprintf(word, sizeof(word), "%s", v);
        else
            snprintf(word, sizeof(word), "%s.%s", v, f[l]);
        snprintf(out, len, "__uint_as_float(%s)", word);
        return;
    }
    int words = vec / 2; /* 16-bit data: two elements per 32-bit word */
    if (vec == 1)
        snprintf(bits, sizeof(bits), "(unsigned short)%s", v);
    else if (words == 1)
        snprintf(bits, sizeof(bits), "(unsigned short)(%s %s)", v, l % 2 ? ">> 16" : "& 0xffffu");
    else
        snprintf(bits, sizeof(bits), "(unsigned short)(%s.%s %s)", v, f[l / 2],
                 l % 2 ? ">> 16" : "& 0xffffu");
    kt_buf t = {0};
    ops_emit_to_float(&t, dt, bits);
    snprintf(out, len, "%s", t.data ? t.data : bits);
    kt_buf_free(&t);
}

/* The unsigned type of one vector load of `bytes` bytes. */
static const char *load_type(int bytes)
{
    return bytes == 16  ? "uint4"
           : bytes == 8 ? "uint2"
           : bytes == 4 ? "unsigned"
                        : "unsigned short";
}

/* The FFMA kernels' start: the lane's rows (clamped), its sums at zero (R of them, or R x T in
 * the decode form), x as vectors, the evict-first policy of a streamed A. */
static void emit_ffma_setup(kt_buf *b, const gemv_info *in, const gemv_plan *p)
{
    const bool decode = in->decode;
    const char *at = load_type(p->vec * (int)ops_dtype_size(in->adt));
    const char *xt = load_type(p->vec * (int)ops_dtype_size(in->xdt));
    kt_buf_line(b, "const int lane = threadIdx.x %% TPR;");
    kt_buf_line(b, "const int m0 = (blockIdx.x * GROUPS + threadIdx.x / TPR) * R;");
    kt_buf_line(b, decode ? "float acc[R][T];" : "float acc[R];");
    kt_buf_line(b, "const %s *arow[R];", at);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    if (decode) {
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int t = 0; t < T; t++)");
        kt_buf_line(b, "        acc[r][t] = 0.0f;");
    } else {
        kt_buf_line(b, "    acc[r] = 0.0f;");
    }
    kt_buf_line(b, "    /* rows past M read row M - 1 (in bounds) and are never stored */");
    kt_buf_line(b, "    const int m = m0 + r < M ? m0 + r : M - 1;");
    kt_buf_line(b, "    arow[r] = (const %s *)(a + (long long)m * K);", at);
    kt_buf_line(b, "}");
    kt_buf_line(b, "const %s *xv = (const %s *)x;", xt, xt);
    if (p->load == LOAD_STREAM) {
        kt_buf_line(b, "/* A is read once: evict it first from L2 */");
        kt_buf_line(b, "const unsigned long long policy = kt_policy_evict_first();");
    }
}

/* aw: row r's VEC elements at vector c. prefetch: kt_ld_nc_pf (a 256-byte L2 prefetch); stream:
 * kt_ld_nc_stream (no L1 allocation, the evict-first policy, the prefetch). */
static void emit_a_load(kt_buf *b, const gemv_info *in, const gemv_plan *p)
{
    const char *at = load_type(p->vec * (int)ops_dtype_size(in->adt));
    if (p->load == LOAD_CACHED)
        kt_buf_line(b, "const %s aw = arow[r][c];", at);
    else if (p->load == LOAD_PREFETCH)
        kt_buf_line(b, "const %s aw = kt_ld_nc_pf(arow[r] + c);", at);
    else
        kt_buf_line(b, "const %s aw = kt_ld_nc_stream(arow[r] + c, policy);", at);
}

/* The FFMA kernels' end when a row's TPR lanes span several warps (TPR > 32): each warp's
 * butterfly sum into shared memory, then the row's first lane adds its WPR warps' sums in warp
 * order (deterministic) and applies the epilogue. With TPR > 32 rows is 1 (pruned otherwise). */
static void emit_cross_warp_sums(kt_buf *b, const gemv_info *in, const char *call)
{
    const char *tt = in->decode ? "T" : "1";
    kt_buf_line(b, "/* a row's lanes span TPR / 32 warps: each warp's butterfly sum, then the "
                   "row's first lane adds");
    kt_buf_line(b, " * them in warp order */");
    kt_buf_line(b, "__shared__ float part[THREADS / 32][%s];", tt);
    if (in->decode) {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int t = 0; t < T; t++) {");
        kt_buf_line(b, "    const float v = kt_warp_sum<32>(acc[0][t]);");
        kt_buf_line(b, "    if ((threadIdx.x & 31) == 0)");
        kt_buf_line(b, "        part[threadIdx.x >> 5][t] = v;");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "const float v = kt_warp_sum<32>(acc[0]);");
        kt_buf_line(b, "if ((threadIdx.x & 31) == 0)");
        kt_buf_line(b, "    part[threadIdx.x >> 5][0] = v;");
    }
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "if (lane != 0 || m0 >= M)");
    kt_buf_line(b, "    return;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int t = 0; t < %s; t++) {", tt);
    kt_buf_line(b, "    float sum = 0.0f;");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int w = 0; w < TPR / 32; w++)");
    kt_buf_line(b, "        sum += part[(threadIdx.x >> 5) + w][t];");
    if (in->decode)
        kt_buf_line(b, "    kt_gemv_store(sum, m0, t, %s);", call);
    else
        kt_buf_line(b, "    kt_gemv_store(sum, m0, %s);", call);
    kt_buf_line(b, "}");
}

/* The vector form's kernel (y = A x). */
static void emit_vector_kernel(kt_buf *b, const gemv_info *in, const gemv_plan *p,
                               const char *entry, const char *params, const char *call)
{
    int abytes = p->vec * (int)ops_dtype_size(in->adt),
        xbytes = p->vec * (int)ops_dtype_size(in->xdt);
    kt_buf_line(b, "/* Lane groups of TPR lanes own R rows each; each step loads VEC elements of "
                   "x and of every row");
    kt_buf_line(b,
                " * per lane (%d-byte loads of A), accumulates in fp32; the row's lanes then "
                "reduce by shuffles. */",
                abytes);
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(THREADS, 1)");
    kt_buf_line(b, "%s(%s)", entry, params);
    kt_buf_line(b, "{");
    b->indent = 4;
    emit_ffma_setup(b, in, p);
    /* Every load of a row in flight at once when a lane's share is short (DRAM wants ~4 MiB in
     * flight across the GPU); deeper unrolling of long rows only costs registers. */
    int64_t lane_steps = (in->K / p->vec + p->tpr - 1) / p->tpr;
    kt_buf_line(b, "#pragma unroll %d", lane_steps <= 16 ? (int)lane_steps : 4);
    kt_buf_line(b, "for (int c = lane; c < K / VEC; c += TPR) {");
    b->indent = 8;
    kt_buf_line(b, "const %s xw = __ldg(xv + c);", load_type(xbytes));
    char ex[160], ea[160];
    kt_buf_line(b, "float xf[VEC];");
    for (int l = 0; l < p->vec; l++) {
        lane_expr(ex, sizeof(ex), in->xdt, p->vec, "xw", l);
        kt_buf_line(b, "xf[%d] = %s;", l, ex);
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    b->indent = 12;
    emit_a_load(b, in, p);
    for (int l = 0; l < p->vec; l++) {
        lane_expr(ea, sizeof(ea), in->adt, p->vec, "aw", l);
        kt_buf_line(b, "acc[r] = fmaf(%s, xf[%d], acc[r]);", ea, l);
    }
    b->indent = 8;
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "}");
    if (p->tpr > 32) {
        emit_cross_warp_sums(b, in, call);
    } else {
        kt_buf_line(b, "/* the TPR lanes of a row add up in a fixed butterfly order */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int r = 0; r < R; r++) {");
        kt_buf_line(b, "    acc[r] = kt_warp_sum<TPR>(acc[r]);");
        kt_buf_line(b, "    if (lane == 0 && m0 + r < M)");
        kt_buf_line(b, "        kt_gemv_store(acc[r], m0 + r, %s);", call);
        kt_buf_line(b, "}");
    }
    b->indent = 0;
    kt_buf_line(b, "}");
}

/* The decode form's kernel (y = X A^T): as the vector form's, but each step converts the R rows'
 * VEC elements of A to fp32 once and uses them for the T token rows of X, whose loads hit L1/L2
 * (X is T * K elements, read by every lane group); T x R sums per lane. */
static void emit_decode_kernel(kt_buf *b, const gemv_info *in, const gemv_plan *p,
                               const char *entry, const char *params, const char *call)
{
    int abytes = p->vec * (int)ops_dtype_size(in->adt),
        xbytes = p->vec * (int)ops_dtype_size(in->xdt);
    kt_buf_line(b, "/* Lane groups of TPR lanes own R rows of A each; each step loads VEC elements "
                   "of every row per");
    kt_buf_line(b,
                " * lane (%d-byte loads), converts them once, and uses them for the T token rows "
                "of x; the row's",
                abytes);
    kt_buf_line(b, " * lanes then reduce each of the T x R sums by shuffles. */");
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(THREADS, 1)");
    kt_buf_line(b, "%s(%s)", entry, params);
    kt_buf_line(b, "{");
    b->indent = 4;
    emit_ffma_setup(b, in, p);
    int64_t lane_steps = (in->K / p->vec + p->tpr - 1) / p->tpr;
    kt_buf_line(b, "#pragma unroll %d", lane_steps <= 8 ? (int)lane_steps : 2);
    kt_buf_line(b, "for (int c = lane; c < K / VEC; c += TPR) {");
    b->indent = 8;
    kt_buf_line(b, "float af[R][VEC];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    b->indent = 12;
    emit_a_load(b, in, p);
    char ex[160];
    for (int l = 0; l < p->vec; l++) {
        lane_expr(ex, sizeof(ex), in->adt, p->vec, "aw", l);
        kt_buf_line(b, "af[r][%d] = %s;", l, ex);
    }
    b->indent = 8;
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int t = 0; t < T; t++) {");
    b->indent = 12;
    kt_buf_line(b, "const %s xw = __ldg(xv + (long long)t * (K / VEC) + c);", load_type(xbytes));
    for (int l = 0; l < p->vec; l++) {
        lane_expr(ex, sizeof(ex), in->xdt, p->vec, "xw", l);
        kt_buf_line(b, "const float x%d = %s;", l, ex);
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    for (int l = 0; l < p->vec; l++)
        kt_buf_line(b, "    acc[r][t] = fmaf(af[r][%d], x%d, acc[r][t]);", l, l);
    kt_buf_line(b, "}");
    b->indent = 8;
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "}");
    if (p->tpr > 32) {
        emit_cross_warp_sums(b, in, call);
    } else {
        kt_buf_line(b, "/* the TPR lanes of a row add up in a fixed butterfly order */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int r = 0; r < R; r++) {");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int t = 0; t < T; t++) {");
        kt_buf_line(b, "        const float sum = kt_warp_sum<TPR>(acc[r][t]);");
        kt_buf_line(b, "        if (lane == 0 && m0 + r < M)");
        kt_buf_line(b, "            kt_gemv_store(sum, m0 + r, t, %s);", call);
        kt_buf_line(b, "    }");
        kt_buf_line(b, "}");
    }
    b->indent = 0;
    kt_buf_line(b, "}");
}

/* The tensor-core kernel (math=mma; see the top of the file), for both forms: the vector form is
 * its one-token case (x [K, 1] is one contiguous row). */
static void emit_mma_kernel(kt_buf *b, const gemv_info *in, const gemv_plan *p, const char *entry,
                            const char *params, const char *call)
{
    const char *mma = in->adt == OPS_DT_BF16 ? "kt_mma_m16n8k16_bf16" : "kt_mma_m16n8k16_f16";
    kt_buf_line(b,
                "constexpr int WARPS = THREADS / 32, KSPLIT = %d; /* warps sharing a row "
                "block's k */",
                p->ksplit);
    kt_buf_line(b, "constexpr int NT = %d; /* 8-token tiles */", p->ntiles);
    kt_buf_line(b, "constexpr int CHUNKS = (K + 31) / 32; /* steps of 32 elements of k */");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* A warp owns R blocks of 16 rows of A and every KSPLIT-th step of k; lane "
                   "(g, q) = (lane / 4,");
    kt_buf_line(b, " * lane %% 4) loads 16 bytes at k 32 c + 8 q of rows g and g + 8 of each "
                   "block and of token g of");
    kt_buf_line(b, " * each tile, which feed two m16n8k16 products (k permuted alike for A and "
                   "x). */");
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(THREADS)");
    kt_buf_line(b, "%s(%s)", entry, params);
    kt_buf_line(b, "{");
    b->indent = 4;
    kt_buf_line(b, "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;");
    kt_buf_line(b, "const int g = lane >> 2, q = lane & 3, ks = warp %% KSPLIT;");
    kt_buf_line(b, "const int m0 = (blockIdx.x * (WARPS / KSPLIT) + warp / KSPLIT) * 16 * R;");
    kt_buf_line(b, "/* rows past M and tokens past T read the last one (in bounds), never "
                   "stored */");
    kt_buf_line(b, "const uint4 *ra[R], *rb[R], *xr[NT];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    kt_buf_line(b, "    const int ma = m0 + 16 * r + g, mb = ma + 8;");
    kt_buf_line(b, "    ra[r] = (const uint4 *)(a + (long long)(ma < M ? ma : M - 1) * K) + q;");
    kt_buf_line(b, "    rb[r] = (const uint4 *)(a + (long long)(mb < M ? mb : M - 1) * K) + q;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < NT; j++) {");
    kt_buf_line(b, "    const int t = 8 * j + g;");
    kt_buf_line(b, "    xr[j] = (const uint4 *)(x + (long long)(t < T ? t : T - 1) * K) + q;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "float acc[R][NT][4] = {};");
    if (p->load == LOAD_STREAM) {
        kt_buf_line(b, "/* A is read once: evict it first from L2 */");
        kt_buf_line(b, "const unsigned long long policy = kt_policy_evict_first();");
    }
    char lda[96], ldb[96];
    for (int w = 0; w < 2; w++) {
        const char *rows = w ? "rb" : "ra";
        char *out = w ? ldb : lda;
        if (p->load == LOAD_CACHED)
            snprintf(out, sizeof(lda), "%s[r][4 * c]", rows);
        else if (p->load == LOAD_PREFETCH)
            snprintf(out, sizeof(lda), "kt_ld_nc_pf(%s[r] + 4 * c)", rows);
        else
            snprintf(out, sizeof(lda), "kt_ld_nc_stream(%s[r] + 4 * c, policy)", rows);
    }
    kt_buf_line(b, "#pragma unroll 2");
    kt_buf_line(b, "for (int c = ks; c < CHUNKS; c += KSPLIT) {");
    b->indent = 8;
    kt_buf_line(b, "/* K is a multiple of 8: a lane's 8 elements are all in k or all past it "
                   "(zeros) */");
    kt_buf_line(b, "const bool in_k = 32 * c + 8 * q < K;");
    kt_buf_line(b, "uint4 wa[R], wb[R];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    kt_buf_line(b, "    wa[r] = in_k ? %s : make_uint4(0u, 0u, 0u, 0u);", lda);
    kt_buf_line(b, "    wb[r] = in_k ? %s : make_uint4(0u, 0u, 0u, 0u);", ldb);
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < NT; j++) {");
    kt_buf_line(b,
                "    const uint4 xw = in_k ? __ldg(xr[j] + 4 * c) : make_uint4(0u, 0u, 0u, 0u);");
    kt_buf_line(b, "    const unsigned b0[2] = {xw.x, xw.y}, b1[2] = {xw.z, xw.w};");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int r = 0; r < R; r++) {");
    kt_buf_line(b,
                "        /* k 8q .. 8q + 3 of rows g, g + 8 into slots 2q, 2q + 1, 2q + 8, 2q + 9; "
                "then 8q + 4 .. */");
    kt_buf_line(b, "        const unsigned a0[4] = {wa[r].x, wb[r].x, wa[r].y, wb[r].y};");
    kt_buf_line(b, "        const unsigned a1[4] = {wa[r].z, wb[r].z, wa[r].w, wb[r].w};");
    kt_buf_line(b, "        %s(acc[r][j], a0, b0);", mma);
    kt_buf_line(b, "        %s(acc[r][j], a1, b1);", mma);
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "}");
    if (p->ksplit > 1) {
        kt_buf_line(b, "/* The row block's KSPLIT warps (consecutive) add up in warp order; the "
                       "first goes on. */");
        kt_buf_line(b, "__shared__ float part[WARPS][R * NT * 4][32];");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < R * NT * 4; e++)");
        kt_buf_line(b, "    part[warp][e][lane] = (&acc[0][0][0])[e];");
        kt_buf_line(b, "__syncthreads();");
        kt_buf_line(b, "if (ks != 0)");
        kt_buf_line(b, "    return;");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < R * NT * 4; e++) {");
        kt_buf_line(b, "    float sum = part[warp][e][lane];");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int k = 1; k < KSPLIT; k++)");
        kt_buf_line(b, "        sum += part[warp + k][e][lane];");
        kt_buf_line(b, "    (&acc[0][0][0])[e] = sum;");
        kt_buf_line(b, "}");
    }
    kt_buf_line(b, "/* lane (g, q) holds rows g (sums 0, 1) and g + 8 (2, 3), tokens 2q and 2q + 1 "
                   "of each tile */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < NT; j++)");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int e = 0; e < 4; e++) {");
    kt_buf_line(
        b,
        "            const int m = m0 + 16 * r + g + (e >> 1) * 8, t = 8 * j + 2 * q + (e & 1);");
    kt_buf_line(b, "            if (m < M && t < T)");
    if (in->decode)
        kt_buf_line(b, "                kt_gemv_store(acc[r][j][e], m, t, %s);", call);
    else
        kt_buf_line(b, "                kt_gemv_store(acc[r][j][e], m, %s);", call);
    kt_buf_line(b, "        }");
    b->indent = 0;
    kt_buf_line(b, "}");
}

static int gemv_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                     ops_emitted *out, ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    const ops_graph *g = grp->g;
    gemv_info in;
    if (!gemv_analyse(grp, &in))
        return ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "",
                            "gemv: the group is not A [M, K] x B [K, 1] or X [T, K] x W [N, "
                            "K]^T (T <= %d) with an elementwise epilogue",
                            GEMV_MAX_T);
    gemv_plan p;
    const char *why = gemv_plan_make(&in, s, dev, &p);
    if (why)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "",
                            "gemv: schedule is pruned for this group (%s)", why);
    ops_kernel_launch *k = &out->kernels[0];
    static const char *const load_suffix[] = {"", "_lp", "_ls"};
    if (p.math == MATH_MMA)
        snprintf(k->entry, sizeof(k->entry), "ktune_gemv_mma_t%d_r%d_k%d%s%s", p.threads, p.rows,
                 p.ksplit, load_suffix[p.load], grp->entry_suffix);
    else
        snprintf(k->entry, sizeof(k->entry), "ktune_gemv_t%d_p%d_r%d_v%d%s%s", p.threads, p.tpr,
                 p.rows, p.vec, load_suffix[p.load], grp->entry_suffix);
    /* Parameters: the group inputs in order, then y. */
    kt_buf params = {0}, call = {0};
    for (int i = 0; i < grp->n_in; i++) {
        char pn[16] = "";
        param_name(grp, &in, grp->in[i], pn, sizeof(pn));
        kt_buf_printf(&params, "%sconst %s *__restrict__ %s", i ? ", " : "",
                      ops_emit_ctype(g->tensors[grp->in[i]].dtype), pn);
        kt_buf_printf(&call, "%s%s", i ? ", " : "", pn);
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->in[i]};
    }
    kt_buf_printf(&params, ", %s *__restrict__ y", ops_emit_ctype(g->tensors[in.y].dtype));
    kt_buf_printf(&call, ", y");
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = in.y};

    kt_buf b = {0};
    ops_emit_header(&b, grp, s);
    /* between the header comment and the prelude, where a partition's module keeps it at file
     * scope (as ops/gemm/emit.c does) */
    kt_buf_line(&b,
                "/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */");
    if (p.load != LOAD_CACHED)
        kt_buf_line(&b, "#include \"ktune/memory.cuh\"");
    if (p.math == MATH_MMA)
        kt_buf_line(&b, "#include \"ktune/mma.cuh\"");
    else
        kt_buf_line(&b, "#include \"ktune/reduce.cuh\"");
    ops_emit_shared_prelude(&b, out);
    kt_buf_printf(&b, "\n");
    if (in.decode || p.math == MATH_MMA)
        kt_buf_line(&b, "constexpr int M = %lld, K = %lld, T = %lld; /* rows of A, tokens */",
                    (long long)in.M, (long long)in.K, (long long)in.T);
    else
        kt_buf_line(&b, "constexpr int M = %lld, K = %lld;", (long long)in.M, (long long)in.K);
    if (p.math == MATH_MMA) {
        kt_buf_line(&b, "constexpr int THREADS = %d, R = %d; /* R: blocks of 16 rows a warp */",
                    p.threads, p.rows);
    } else {
        kt_buf_line(&b, "constexpr int THREADS = %d, TPR = %d, R = %d, VEC = %d;", p.threads, p.tpr,
                    p.rows, p.vec);
        kt_buf_line(&b, "constexpr int GROUPS = THREADS / TPR; /* lane groups per block */");
    }
    kt_buf_printf(&b, "\n");
    int rc = emit_store(&b, grp, &in, params.data);
    if (p.math == MATH_MMA)
        emit_mma_kernel(&b, &in, &p, k->entry, params.data, call.data);
    else if (in.decode)
        emit_decode_kernel(&b, &in, &p, k->entry, params.data, call.data);
    else
        emit_vector_kernel(&b, &in, &p, k->entry, params.data, call.data);
    k->grid[0] = (uint32_t)p.grid;
    k->grid[1] = k->grid[2] = 1;
    k->block[0] = (uint32_t)p.threads;
    k->block[1] = k->block[2] = 1;
    if (rc == 0 && kt_buf_status(&b) < 0)
        rc = -ENOMEM;
    kt_buf_free(&params);
    kt_buf_free(&call);
    if (rc < 0) {
        kt_buf_free(&b);
        return rc == -ENOMEM ? rc : ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "", "gemv: epilogue");
    }
    out->source = b.data;
    out->n_kernels = 1;
    return 0;
}

/* The tensor-core kernel: A once at the DRAM rate its loads in flight and the grid's waves
 * allow; x once per warp's row blocks, from L2 (charged at three times the DRAM rate, the H100's
 * ratio of L2 to HBM bandwidth, roughly). The tensor cores never bound it. */
static void mma_estimate(const gemv_info *in, const gemv_plan *p, const ops_device *dev,
                         double abytes, ops_estimate *e)
{
    double xl2 = (double)in->M / (16.0 * p->rows) * 8.0 * p->ntiles * (double)in->K *
                 (double)ops_dtype_size(in->xdt);
    /* Little's law: DRAM streams at full rate with ~4 MiB in flight (3 TB/s x ~1.3 us); a lane
     * has its row blocks' 16-byte loads of two steps in flight */
    double slots = (double)dev->sm_count * (dev->max_threads_per_sm / p->threads);
    double resident = fmin((double)p->grid, slots);
    double eff = fmin(1.0, resident * p->threads * 64.0 * p->rows / (4.0 * 1024 * 1024));
    if (p->grid > slots) {
        double waves = (double)p->grid / slots;
        eff *= waves / ceil(waves);
    }
    if (p->load == LOAD_STREAM)
        eff *= 1.15;
    e->occupancy = 1.0;
    double mem_s = abytes / (dev->dram_bytes_per_s * eff);
    double l2_s = xl2 / (3.0 * dev->dram_bytes_per_s);
    e->seconds = fmax(mem_s, l2_s) + 2e-6 + (p->ksplit > 1 ? 0.5e-6 : 0.0);
}

/* DRAM-bound: A once, x once per row group (L2 hits, charged at a tenth), y once; the
 * efficiency terms reward 16-byte loads, enough row groups in flight and few idle lanes. The
 * decode form's T FFMAs per element of A bound it too once T is large (at ~70% of FFMA peak). */
static void gemv_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                          ops_estimate *e)
{
    gemv_info in;
    gemv_plan p;
    memset(e, 0, sizeof(*e));
    if (!gemv_analyse(grp, &in) || gemv_plan_make(&in, s, dev, &p) != NULL) {
        e->seconds = 1.0;
        return;
    }
    double abytes = (double)in.M * (double)in.K * (double)ops_dtype_size(in.adt);
    double xbytes = (double)in.T * (double)in.K * (double)ops_dtype_size(in.xdt);
    double groups = (double)in.M / p.rows;
    e->bytes = abytes + xbytes +
               (double)in.T * (double)in.M * (double)ops_dtype_size(grp->g->tensors[in.y].dtype);
    e->flops = 2.0 * (double)in.T * (double)in.M * (double)in.K;
    if (p.math == MATH_MMA) {
        mma_estimate(&in, &p, dev, abytes, e);
        return;
    }
    double load_bytes = p.vec * (double)ops_dtype_size(in.adt);
    double eff = load_bytes >= 16 ? 1.0 : load_bytes >= 8 ? 0.85 : load_bytes >= 4 ? 0.6 : 0.35;
    /* lanes left idle on the last step of a row */
    double steps = ceil((double)in.K / ((double)p.tpr * p.vec));
    eff *= (double)in.K / (steps * p.tpr * p.vec);
    /* loads in flight (R rows per lane group, the unrolled steps: a short row's all, else 4)
     * against the ~4 MiB that DRAM bandwidth times latency asks for (3 TB/s x ~1.3 us) */
    double unroll = steps <= 16 ? steps : 4.0;
    double inflight =
        fmin(1.0, (double)p.rows * unroll * load_bytes * (double)dev->max_threads_per_sm *
                      dev->sm_count / (4.0 * 1024 * 1024));
    eff *= 0.5 + 0.5 * inflight;
    double waves = (double)p.grid / ((double)dev->sm_count * (dev->max_threads_per_sm / p.threads));
    eff *= waves / ceil(waves);
    /* On the H100 (DeepBench 7680 x 2560 f16, cold) the tuner's best streamed kernel took 16.3 us
     * against 18.8 us for the best cached one; the prefetch hint alone is not credited. */
    if (p.load == LOAD_STREAM)
        eff *= 1.15;
    e->occupancy = 1.0;
    double mem_s = (abytes + 0.1 * xbytes * groups) / (dev->dram_bytes_per_s * eff);
    double ffma_s = e->flops / (0.7 * dev->fp32_flops_per_s);
    e->seconds = fmax(mem_s, ffma_s) + 2e-6;
}

const ops_family ops_family_gemv = {
    .id = OPS_FAM_GEMV,
    .name = "gemv",
    .n_knobs = N_KNOBS,
    .knobs = gemv_knobs,
    .matches = gemv_matches,
    .prune = gemv_prune,
    .emit = gemv_emit,
    .estimate = gemv_estimate,
};
