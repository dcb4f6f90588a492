/* gemv family: the groups it takes, the knobs, the plans (ops/gemv/gemv.h lists the files). */
#include "gemv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const load_labels[] = {"cached", "prefetch", "stream"};
static const char *const math_labels[] = {"ffma", "mma"};

const ops_knob gemv_knobs[N_KNOBS] = {
    [K_THREADS] = {"threads", 4, {64, 128, 256, 512}, NULL},
    [K_TPR] = {"tpr", 7, {4, 8, 16, 32, 64, 128, 256}, NULL}, /* lanes per row */
    [K_ROWS] = {"rows", 3, {1, 2, 4}, NULL},                  /* rows per lane group */
    [K_VEC] = {"vec", 4, {1, 2, 4, 8}, NULL},                 /* elements per load */
    [K_LOAD] = {"load", 3, {LOAD_CACHED, LOAD_PREFETCH, LOAD_STREAM}, load_labels}, /* of A */
    [K_MATH] = {"math", 2, {MATH_FFMA, MATH_MMA}, math_labels},
    [K_KSPLIT] = {"ksplit", 4, {1, 2, 4, 8}, NULL}, /* mma: warps sharing a row block's k */
    [K_DEPTH] = {"depth", 3, {2, 4, 8}, NULL},      /* mma: k steps a lane has in flight */
};

static bool in_group(const ops_group *grp, int node)
{
    return node >= 0 && (grp->mask >> node & 1);
}

/* True when grp is one un-batched matmul A [M, K] x B [K, 1] (neither transposed), or
 * X [T, K] x W [N, K]^T with T <= GEMV_MAX_T (the decode form), operands read from memory,
 * followed by elementwise nodes of its output's shape. */
bool gemv_analyse(const ops_group *grp, gemv_info *in)
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

bool gemv_matches(const ops_group *grp)
{
    gemv_info in;
    return gemv_analyse(grp, &in);
}

static const char *mma_plan_make(const gemv_info *in, gemv_plan *p, const ops_device *dev);

const char *gemv_plan_make(const gemv_info *in, const ops_schedule *s, const ops_device *dev,
                           gemv_plan *p)
{
    p->threads = s->v[K_THREADS];
    p->tpr = s->v[K_TPR];
    p->rows = s->v[K_ROWS];
    p->vec = s->v[K_VEC];
    p->load = s->v[K_LOAD];
    p->math = s->v[K_MATH];
    p->ksplit = s->v[K_KSPLIT];
    p->depth = s->v[K_DEPTH];
    if (p->math == MATH_MMA)
        return mma_plan_make(in, p, dev);
    if (p->ksplit != 1 || p->depth != 2)
        return "redundant"; /* k is split across a row's lanes, not warps; unrolled, no ring */
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
    if (p->depth > 2 && (chunks + p->ksplit - 1) / p->ksplit < p->depth)
        return "redundant"; /* a ring deeper than a warp's steps */
    p->ntiles = (int)((in->T + 7) / 8);
    if (p->rows > 1 && p->ntiles < 2)
        return "redundant"; /* more rows a warp only saves re-reads of a larger x */
    p->rows_per_block = 16 * (int64_t)p->rows * (warps / p->ksplit);
    p->grid = (in->M + p->rows_per_block - 1) / p->rows_per_block;
    if (p->grid < 2 * dev->sm_count && p->threads > 128 && p->ksplit == 1)
        return "redundant"; /* few row blocks: split k rather than grow the block */
    /* sums, the ring of the row blocks' and the tiles' 16-byte loads, pointers */
    p->regs = 32 + 4 * p->rows * p->ntiles + p->depth * (8 * p->rows + 4 * p->ntiles) +
              2 * (2 * p->rows + p->ntiles);
    /* __launch_bounds__(THREADS) caps a thread at 64 Ki registers / THREADS (128 at 512) */
    if (p->regs > 200 || p->regs > 65536 / p->threads)
        return "regs";
    return NULL;
}

const char *gemv_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev)
{
    gemv_info in;
    if (!gemv_analyse(grp, &in))
        return "shape";
    gemv_plan p;
    return gemv_plan_make(&in, s, dev, &p);
}
