/* The conv family: one conv2d node (NCHW/OIHW or NHWC/OHWI; stride, padding, dilation, groups,
 * optional bias) plus an elementwise epilogue chain on its output, as one kernel.
 *
 * Three algorithms (knob "algo"):
 *   implicit_gemm  GEMM view M = N*P*Q output pixels, N = K/groups output channels,
 *                  K = (C/groups)*R*S; the im2col matrix is gathered on the fly into shared
 *                  memory. Math (knob "math"):
 *                    ffma    fp32, per-thread TM x TN register tile; every dtype and policy.
 *                    mma     mma.sync m16n8k16 f16/bf16 tensor cores fed by ldmatrix, fp32
 *                            accumulation (f32 data only under "reduced", rounded to bf16).
 *                    tf32    f32 data on m16n8k8 tf32 tensor cores, one mma per product (inputs
 *                            rounded to 11 significant bits: "tf32" and "reduced" policies only).
 *                    tf32x3  f32 data, error-compensated: each operand is split into a tf32 "big"
 *                            part and a tf32 "small" remainder and three mmas sum
 *                            a_small*b_big + a_big*b_small + a_big*b_big into a per-stage partial
 *                            that FADDs carry into the accumulators (the tensor cores accumulate
 *                            by truncation); about fp32 accuracy, so allowed under every policy,
 *                            "exact" included.
 *                  The tensor-core paths share the warp grid (m16n8 accumulator tiles) and the
 *                  epilogue; tf32 paths keep raw floats in shared memory and convert (split) them
 *                  as fragments are read. Tiles move through shared memory either by multi-stage
 *                  cp.async (when the gather is 16-byte contiguous: NHWC, C/groups % 8 == 0 for
 *                  16-bit data, % 4 == 0 for f32 data on the tf32 paths) or by predicated loads
 *                  into registers (stages 1: single buffer; 2: the next tile is loaded while the
 *                  current one is multiplied).
 *   direct         one thread computes TK output channels x TQ adjacent output columns of one
 *                  output row; the filter slice of the block is staged in shared memory
 *                  ("shared") or read per filter row into registers ("registers"). Meant for few
 *                  input channels (the 3-channel first layer of vision nets) and depthwise convs.
 *   tiled          f32 NCHW, groups 1, dilation 1, at most 16 input channels (the first layer of
 *                  vision nets): a block owns one image, an output tile of BM pixels (OH rows x
 *                  OW columns, chosen by the planner to waste the fewest pixels at the edges) and
 *                  BN output channels; a thread TK channels x TQ adjacent columns of one output
 *                  row (BM * BN / (TK * TQ) threads; the knob "warps" stays at its first value).
 *                  The reduction runs one input channel at a time: the input patch the tile needs
 *                  ((OH - 1) * stride + R rows x (OW - 1) * stride + S columns, zeros where the
 *                  patch leaves the image: the padding) and the filter slice [R * S][BN] of that
 *                  channel are staged in shared memory by 4-byte cp.async, "stages" buffers deep
 *                  (1: load, compute; 2-3: the next channels load while this one is computed).
 *                  The patch is stored phase-split by the stride in both directions (column x at
 *                  [x % STR_W][x / STR_W], row y likewise), so the TQ columns of a thread read
 *                  consecutive words for each filter column s: per filter row and column phase a
 *                  thread loads one window of TQ + (S - 1) / STR_W words (16-byte loads) and every
 *                  s of that phase uses it shifted by (s - phase) / STR_W. Filter values are
 *                  stored output-channel-contiguous and read as 16-byte warp broadcasts. Pure
 *                  fp32 FFMA in a fixed order (channel, filter row, column phase, s), so every
 *                  precision policy accepts it. The tile's outputs go back through shared memory
 *                  so that consecutive threads store consecutive columns.
 *
 * Knobs that do not apply to the chosen algorithm must sit at their first value; the other
 * combinations are pruned as "redundant", so every kept schedule is a distinct kernel. */
#include "family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_ALGO, K_MATH, K_BM, K_BN, K_BK, K_WARPS, K_STAGES, K_TK, K_TQ, K_FILTER, N_KNOBS };
enum { ALGO_IGEMM = 0, ALGO_DIRECT = 1, ALGO_TILED = 2 };
/* Values are stored in schedules (cache records, logs): append, never renumber. */
enum { MATH_FFMA = 0, MATH_MMA = 1, MATH_TF32 = 2, MATH_TF32X3 = 3 };
enum { FILTER_SHARED = 0, FILTER_REGS = 1 };

static const char *const algo_labels[] = {"implicit_gemm", "direct", "tiled"};
static const char *const math_labels[] = {"ffma", "mma", "tf32", "tf32x3"};
static const char *const filter_labels[] = {"shared", "registers"};

static const ops_knob conv_knobs[N_KNOBS] = {
    [K_ALGO] = {"algo", 3, {ALGO_IGEMM, ALGO_DIRECT, ALGO_TILED}, algo_labels},
    [K_MATH] = {"math", 4, {MATH_FFMA, MATH_MMA, MATH_TF32, MATH_TF32X3}, math_labels},
    [K_BM] = {"bm", 3, {32, 64, 128}, NULL},
    /* 96: networks with 96 (or 192, 288, ...) output channels, e.g. AlexNet's first layer. */
    [K_BN] = {"bn", 5, {16, 32, 64, 96, 128}, NULL},
    [K_BK] = {"bk", 3, {8, 16, 32}, NULL},
    [K_WARPS] = {"warps", 4, {1, 2, 4, 8}, NULL},
    [K_STAGES] = {"stages", 4, {1, 2, 3, 4}, NULL},
    [K_TK] = {"tk", 4, {1, 2, 4, 8}, NULL},
    [K_TQ] = {"tq", 4, {1, 2, 4, 8}, NULL},
    [K_FILTER] = {"filter", 2, {FILTER_SHARED, FILTER_REGS}, filter_labels},
};

/* Registers a kept schedule may be estimated to need: well under the 255 ptxas allows, since
 * the estimate is coarse and a spill is a failed candidate. */
#define REG_BUDGET 192

/* What the emitters need to know about the group. */
typedef struct conv_info {
    const ops_graph *g;
    const ops_node *node; /* the conv2d */
    int conv_out;         /* its output tensor */
    int x, w, bias;       /* operand tensors; bias -1 when absent */
    int y;                /* the group output */
    ops_dtype dt;         /* dtype of x and w */
    bool nhwc;
    int64_t n, c, h, wd; /* input batch, channels, height, width */
    int64_t k, r, s;     /* filter: output channels, height, width */
    int64_t p, q;        /* output height, width */
    int sh, sw, ph, pw, dh, dw, groups;
    int64_t cg, kg;     /* channels per group (in, out) */
    int64_t gm, gk;     /* GEMM view: rows (output pixels), reduction length */
    bool wide;          /* some offset needs 64 bits */
    int epilogue_nodes; /* elementwise nodes in the group */
} conv_info;

/* True when every dimension of sub broadcasts (right-aligned, equal or 1) against full. */
static bool broadcasts_to(const ops_shape *sub, const ops_shape *full)
{
    if (sub->rank > full->rank)
        return false;
    int shift = full->rank - sub->rank;
    for (int i = 0; i < sub->rank; i++) {
        int64_t a = sub->d[i].size, b = full->d[i + shift].size;
        if (a < 1 || (a != 1 && a != b))
            return false;
    }
    return true;
}

/* Fills ci when the group is one conv2d plus an elementwise epilogue; false otherwise. */
static bool conv_analyse(const ops_group *grp, conv_info *ci)
{
    const ops_graph *g = grp->g;
    memset(ci, 0, sizeof(*ci));
    ci->g = g;
    ci->bias = -1;
    if (!g || !g->validated || grp->n_nodes < 1 || grp->n_out != 1)
        return false;
    int conv = -1;
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        if (n->op == OPS_CONV2D) {
            if (conv >= 0)
                return false; /* two convs */
            conv = grp->nodes[i];
        } else if (!ops_is_elementwise(n->op)) {
            return false;
        } else {
            ci->epilogue_nodes++;
        }
    }
    if (conv < 0)
        return false;
    const ops_node *cn = &g->nodes[conv];
    if (cn->n_in < 2 || cn->n_in > 3)
        return false;
    /* The conv reads graph tensors straight from memory: no prologue inside the group. */
    for (int k = 0; k < cn->n_in; k++) {
        int t = cn->in[k].tensor;
        if (t == OPS_SCALAR)
            return false;
        int prod = g->tensors[t].producer;
        if (prod >= 0 && (grp->mask >> prod & 1))
            return false;
    }
    ci->node = cn;
    ci->conv_out = cn->out;
    ci->x = cn->in[0].tensor;
    ci->w = cn->in[1].tensor;
    ci->bias = cn->n_in == 3 ? cn->in[2].tensor : -1;
    ci->y = grp->out[0];
    const ops_tensor *xt = &g->tensors[ci->x], *wt = &g->tensors[ci->w];
    const ops_shape *os = &g->tensors[ci->conv_out].shape;
    if (xt->shape.rank != 4 || wt->shape.rank != 4 || os->rank != 4)
        return false;
    if (!ops_shape_same_sizes(&g->tensors[ci->y].shape, os))
        return false;
    ci->dt = xt->dtype;
    if (ci->dt != OPS_DT_F32 && ci->dt != OPS_DT_F16 && ci->dt != OPS_DT_BF16)
        return false;
    if (wt->dtype != ci->dt || (ci->bias >= 0 && g->tensors[ci->bias].dtype != ci->dt))
        return false;
    for (int i = 0; i < 4; i++)
        if (xt->shape.d[i].size < 1 || wt->shape.d[i].size < 1 || os->d[i].size < 1)
            return false;
    /* Every epilogue value is computed per output element: its shape must broadcast there. */
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        if (n->op == OPS_CONV2D)
            continue;
        if (!broadcasts_to(&g->tensors[n->out].shape, os))
            return false;
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k].tensor;
            if (t != OPS_SCALAR && !broadcasts_to(&g->tensors[t].shape, os))
                return false;
            if (t != OPS_SCALAR && g->tensors[t].dtype == OPS_DT_F64)
                return false;
        }
    }
    const ops_attrs *a = &cn->attrs;
    ci->nhwc = a->layout == OPS_LAYOUT_NHWC;
    ci->n = xt->shape.d[0].size;
    ci->c = xt->shape.d[ci->nhwc ? 3 : 1].size;
    ci->h = xt->shape.d[ci->nhwc ? 1 : 2].size;
    ci->wd = xt->shape.d[ci->nhwc ? 2 : 3].size;
    ci->k = wt->shape.d[0].size;
    ci->cg = wt->shape.d[ci->nhwc ? 3 : 1].size;
    ci->r = wt->shape.d[ci->nhwc ? 1 : 2].size;
    ci->s = wt->shape.d[ci->nhwc ? 2 : 3].size;
    ci->p = os->d[ci->nhwc ? 1 : 2].size;
    ci->q = os->d[ci->nhwc ? 2 : 3].size;
    ci->sh = a->stride[0];
    ci->sw = a->stride[1];
    ci->ph = a->padding[0];
    ci->pw = a->padding[1];
    ci->dh = a->dilation[0];
    ci->dw = a->dilation[1];
    ci->groups = a->groups > 0 ? a->groups : 1;
    if (ci->c != ci->cg * ci->groups || ci->k % ci->groups != 0)
        return false;
    ci->kg = ci->k / ci->groups;
    ci->gm = ci->n * ci->p * ci->q;
    ci->gk = ci->cg * ci->r * ci->s;
    /* 32-bit offsets unless some tensor the kernel indexes is too large for them. */
    int64_t big = ci->gm * ci->k;
    for (int i = 0; i < grp->n_in; i++) {
        int64_t numel = ops_shape_numel(&g->tensors[grp->in[i]].shape);
        if (numel > big)
            big = numel;
    }
    ci->wide = big > ((int64_t)1 << 30);
    return true;
}

static bool conv_matches(const ops_group *grp)
{
    conv_info ci;
    return conv_analyse(grp, &ci);
}

/* ---- schedules: derived tile shapes and resource estimates ---- */

static int div_up(int64_t a, int64_t b)
{
    return (int)((a + b - 1) / b);
}

/* The tensor-core operand type, or OPS_DT_NONE when the precision policy forbids mma. */
static ops_dtype mma_type(const ops_group *grp, const conv_info *ci)
{
    if (ci->dt == OPS_DT_F16 || ci->dt == OPS_DT_BF16)
        return ci->dt;
    /* f32 data may use 16-bit tensor cores only under "reduced"; bf16 keeps f32's range, so
     * large activations never overflow to inf. */
    return grp->precision == OPS_PREC_REDUCED ? OPS_DT_BF16 : OPS_DT_NONE;
}

/* Why the tf32 math paths are not searched for this group, or NULL when they are. They need
 * f32 data (16-bit data has its own tensor cores: "shape"); plain tf32 rounds every operand to
 * 11 significant bits, which only the "tf32" and "reduced" policies accept ("precision"); the
 * error-compensated tf32x3 keeps about fp32 accuracy and is allowed under every policy. */
static const char *tf32_excluded(const ops_group *grp, const conv_info *ci, int math)
{
    if (ci->dt != OPS_DT_F32)
        return "shape";
    if (math == MATH_TF32 && grp->precision != OPS_PREC_TF32 && grp->precision != OPS_PREC_REDUCED)
        return "precision";
    return NULL;
}

/* Whether the im2col gather is 16-byte contiguous and aligned, so cp.async can move it: NHWC
 * with whole 16-byte channel runs (8 16-bit values on the mma path, 4 floats on the tf32 paths;
 * the ffma path never uses cp.async). */
static bool cp_async_ok(const conv_info *ci, int math)
{
    if (!ci->nhwc)
        return false;
    if (math == MATH_MMA)
        return (ci->dt == OPS_DT_F16 || ci->dt == OPS_DT_BF16) && ci->cg % 8 == 0;
    if (math == MATH_TF32 || math == MATH_TF32X3)
        return ci->dt == OPS_DT_F32 && ci->cg % 4 == 0;
    return false;
}

typedef struct ig_plan {
    int bm, bn, bk, threads, stages, bufs;
    int math;      /* MATH_* */
    bool mma;      /* 16-bit tensor cores (m16n8k16) */
    bool tf32;     /* tf32 or tf32x3: floats in shared memory, m16n8k8 tf32 mmas */
    bool tc;       /* any tensor-core path: warp grid of m16n8 accumulator tiles */
    bool cp_async; /* 16-byte cp.async gather */
    int kstep;     /* reduction depth of one mma: 16 (mma) or 8 (tf32) */
    int vec;       /* cp.async: elements per 16-byte chunk */
    ops_dtype mt;  /* mma operand type */
    /* ffma: per-thread register tile; thread grid (fast dimension first) */
    int tm, tn;
    /* mma: warp grid and per-warp mma tiles */
    int warps_m, warps_n, mi, ni;
    /* loads */
    int a_per, b_per, a_rows; /* plain: elements per thread; distinct gathered rows */
    int a_chunks, b_chunks;   /* cp.async: 16-byte chunks per thread */
    int smem, regs;
} ig_plan;

/* Fills the plan; returns NULL or the reason the schedule is illegal. */
static const char *ig_plan_make(const ops_group *grp, const conv_info *ci, const ops_schedule *s,
                                const ops_device *dev, ig_plan *pl)
{
    memset(pl, 0, sizeof(*pl));
    pl->bm = s->v[K_BM];
    pl->bn = s->v[K_BN];
    pl->bk = s->v[K_BK];
    pl->threads = 32 * s->v[K_WARPS];
    pl->stages = s->v[K_STAGES];
    pl->math = s->v[K_MATH];
    pl->mma = pl->math == MATH_MMA;
    pl->tf32 = pl->math == MATH_TF32 || pl->math == MATH_TF32X3;
    pl->tc = pl->mma || pl->tf32;
    if (pl->math < MATH_FFMA || pl->math > MATH_TF32X3)
        return "shape";
    if (pl->threads > dev->max_threads_per_block)
        return "threads";
    if (ci->groups > 65535 || ci->gm > ((int64_t)1 << 31) - 256)
        return "shape";
    if (pl->mma) {
        pl->mt = mma_type(grp, ci);
        if (pl->mt == OPS_DT_NONE)
            return "shape"; /* the precision policy keeps this group off tensor cores */
        pl->kstep = 16;
        pl->vec = 8;
    } else if (pl->tf32) {
        const char *why = tf32_excluded(grp, ci, pl->math);
        if (why)
            return why;
        pl->kstep = 8;
        pl->vec = 4;
    }
    if (pl->tc) {
        if (pl->bk % pl->kstep)
            return "divisibility";
        pl->cp_async = cp_async_ok(ci, pl->math);
        if (pl->cp_async && pl->stages < 2)
            return "redundant"; /* the cp.async pipeline covers this group */
        if (!pl->cp_async && pl->stages > 2)
            return "align"; /* deep pipelines need the 16-byte cp.async gather */
        /* Warp grid: the most square warp tile whose sides are whole mma tiles. */
        int warps = s->v[K_WARPS], best = -1;
        double best_skew = 1e9;
        for (int wm = 1; wm <= warps; wm *= 2) {
            int wn = warps / wm;
            if (pl->bm % (16 * wm) || pl->bn % (8 * wn))
                continue;
            double skew = fabs(log2((double)pl->bm / wm * wn / pl->bn));
            if (skew < best_skew) {
                best_skew = skew;
                best = wm;
            }
        }
        if (best < 0)
            return "shape";
        pl->warps_m = best;
        pl->warps_n = warps / best;
        pl->mi = pl->bm / best / 16;
        pl->ni = pl->bn / pl->warps_n / 8;
    } else {
        if (pl->stages > 2)
            return "redundant"; /* the ffma path double-buffers through registers at most */
        int per = pl->bm * pl->bn / pl->threads;
        if (per < 1)
            return "threads";
        if (per > 64)
            return "regs";
        /* Near-square register tiles: 8x8, 8x4, 4x4, 4x2, 2x2, 2x1, 1x1. */
        static const int tms[] = {1, 2, 2, 4, 4, 8, 8};
        int lg = 0;
        while ((1 << lg) < per)
            lg++;
        pl->tm = tms[lg];
        pl->tn = per / pl->tm;
        if (pl->tm * pl->tn != per || pl->bm % pl->tm || pl->bn % pl->tn)
            return "shape";
    }
    pl->bufs = pl->stages;
    if (pl->cp_async) {
        int cpr = pl->bk / pl->vec;
        if ((pl->bm * cpr) % pl->threads || (pl->bn * cpr) % pl->threads)
            return "threads";
        pl->a_chunks = pl->bm * cpr / pl->threads;
        pl->b_chunks = pl->bn * cpr / pl->threads;
        if (pl->a_chunks < 1 || pl->b_chunks < 1)
            return "threads";
    } else {
        if ((pl->bm * pl->bk) % pl->threads || (pl->bn * pl->bk) % pl->threads)
            return "threads";
        pl->a_per = pl->bm * pl->bk / pl->threads;
        pl->b_per = pl->bn * pl->bk / pl->threads;
        pl->a_rows = pl->threads >= pl->bm ? 1 : pl->bm / pl->threads;
    }
    /* Tiles much larger than the problem only waste work (the smallest value always stays). */
    if ((pl->bm > 32 && pl->bm / 2 >= ci->gm) || (pl->bn > 16 && pl->bn / 2 >= ci->kg) ||
        (pl->bk > (pl->mma ? 16 : 8) && pl->bk / 2 >= ci->gk))
        return "redundant";
    if (pl->mma)
        pl->smem = pl->bufs * (pl->bm + pl->bn) * (pl->bk + 8) * 2;
    else if (pl->tf32)
        pl->smem = pl->bufs * (pl->bm + pl->bn) * (pl->bk + 4) * 4;
    else
        pl->smem = pl->bufs * pl->bk * (pl->bm + 1 + pl->bn + 1) * 4;
    if (pl->smem > dev->smem_per_block_optin)
        return "smem";
    /* Registers: accumulators + fragments + gather bookkeeping + staged tile + addressing. */
    int rows = pl->cp_async ? pl->a_chunks : pl->a_rows;
    /* Plain loads: ptxas issues every gathered load of a tile before the first shared store
     * (and, double-buffered, keeps them in flight across the multiply), holding value and
     * 64-bit address: count three registers per element. */
    int staged = pl->cp_async ? 0 : 3 * (pl->a_per + pl->b_per);
    if (pl->tc) {
        /* One k step's fragments: A 4 and B 2 registers per mma tile; tf32x3 holds the big and
         * the small part of each, and with four 8-deep steps per stage ptxas also hoists the
         * next step's shared reads (fitted to ptxas 13.0: 128x64x32 and 32x96x32 spilled). */
        int raw = pl->mi * 4 + pl->ni * 2;
        int frags = raw;
        if (pl->math == MATH_TF32X3)
            frags = 2 * raw + (pl->bk / pl->kstep >= 4 ? raw : 0);
        /* tf32 cp.async: each filter-row chunk keeps its 64-bit source and predicate live too
         * (fitted to ptxas 13.0: without this term 32x128x32 and 64x64x32 tiles spilled). */
        int b_rows = pl->tf32 && pl->cp_async ? 4 * pl->b_chunks : 0;
        pl->regs = pl->mi * pl->ni * 4 + frags + 3 * rows + b_rows + staged + 40;
    } else {
        pl->regs = pl->tm * pl->tn + pl->tm + pl->tn + 3 * rows + staged + 32;
    }
    int cap = dev->regs_per_sm / pl->threads;
    if (cap > dev->max_regs_per_thread)
        cap = dev->max_regs_per_thread;
    if (pl->regs > REG_BUDGET || pl->regs > cap * 3 / 4)
        return "regs";
    return NULL;
}

typedef struct direct_plan {
    int tk, tq, threads, win, smem, regs;
    bool shared;
    int64_t spatial; /* thread tiles per channel block: N * P * ceil(Q / TQ) */
} direct_plan;

static const char *direct_plan_make(const conv_info *ci, const ops_schedule *s,
                                    const ops_device *dev, direct_plan *pl)
{
    memset(pl, 0, sizeof(*pl));
    pl->tk = s->v[K_TK];
    pl->tq = s->v[K_TQ];
    pl->threads = 32 * s->v[K_WARPS];
    pl->shared = s->v[K_FILTER] == FILTER_SHARED;
    if (pl->threads > dev->max_threads_per_block)
        return "threads";
    if (pl->threads < 64)
        return "threads"; /* one warp per block leaves the SM idle between filter rows */
    if (ci->groups > 1 && ci->kg % pl->tk)
        return "divisibility"; /* a thread's channels must share one group's inputs */
    if ((pl->tk > 1 && pl->tk / 2 >= ci->k) || (pl->tq > 1 && pl->tq / 2 >= ci->q))
        return "redundant";
    pl->spatial = ci->n * ci->p * div_up(ci->q, pl->tq);
    if (pl->spatial > ((int64_t)1 << 31) - 1024 || div_up(ci->k, pl->tk) > 65535)
        return "shape";
    pl->win = (pl->tq - 1) * ci->sw + (int)(ci->s - 1) * ci->dw + 1;
    if (pl->shared) {
        pl->smem = pl->tk * (int)ci->gk * 4;
        if (ci->gk > 65536 || pl->smem > dev->smem_per_block_optin)
            return "smem";
    }
    pl->regs = pl->tk * pl->tq + pl->win + (pl->shared ? pl->tk : pl->tk * (int)ci->s) + 24;
    int cap = dev->regs_per_sm / pl->threads;
    if (cap > dev->max_regs_per_thread)
        cap = dev->max_regs_per_thread;
    if (pl->regs > 160 || pl->regs > cap * 3 / 4)
        return "regs";
    return NULL;
}

/* The tiled direct kernel's geometry (see the header comment). Sizes in words (floats). */
typedef struct tiled_plan {
    int bm, bn, tk, tq, threads, stages;
    int oh, ow, cgn, pt; /* output tile rows and columns; column groups; pixel threads */
    int ih, iw, ridx;    /* input patch rows and columns; stored rows per row phase */
    int wv;              /* 16-byte loads of the widest column-phase window of a thread */
    int xt, xi, ft, fi;  /* a thread's copies per channel: patch rows x columns, filter rows x taps */
    int pl, rp, bnp;     /* words per column phase, patch row pitch, filter row pitch */
    int xs, ws, stage;   /* patch, filter slice, one stage (patch + filter) */
    int smem, regs, min_blocks;
    int conflicts; /* extra shared-memory wavefronts of a block's window loads (planner's model) */
    int64_t tiles_p, tiles_q, kblocks;
} tiled_plan;

/* Shared-memory wavefronts beyond one per quarter warp when every thread of the block loads 16
 * bytes at word pr * rp + cg * tq (a window load): within each 8-lane quarter, distinct 16-byte
 * chunks falling on the same four banks serialise; equal addresses broadcast. */
static int tiled_conflicts(const tiled_plan *pl, int rp)
{
    int extra = 0;
    for (int q0 = 0; q0 < pl->threads; q0 += 8) {
        int chunks[8], n = 0, per_bank[8] = {0};
        for (int t = q0; t < q0 + 8 && t < pl->threads; t++) {
            int pt = t % pl->pt;
            int chunk = ((pt / pl->cgn) * rp + (pt % pl->cgn) * pl->tq) / 4;
            bool seen = false;
            for (int i = 0; i < n; i++)
                seen |= chunks[i] == chunk;
            if (!seen)
                chunks[n++] = chunk;
        }
        int worst = 0;
        for (int i = 0; i < n; i++)
            if (++per_bank[chunks[i] % 8] > worst)
                worst = per_bank[chunks[i] % 8];
        extra += worst - 1;
    }
    return extra;
}

static const char *tiled_plan_make(const conv_info *ci, const ops_schedule *s,
                                   const ops_device *dev, tiled_plan *pl)
{
    memset(pl, 0, sizeof(*pl));
    pl->bm = s->v[K_BM];
    pl->bn = s->v[K_BN];
    pl->tk = s->v[K_TK];
    pl->tq = s->v[K_TQ];
    pl->stages = s->v[K_STAGES];
    /* What the kernel handles: f32 NCHW, one group, no dilation, few input channels (one
     * barrier per channel: many channels are implicit GEMM's). */
    if (ci->dt != OPS_DT_F32 || ci->nhwc || ci->groups != 1 || ci->dh != 1 || ci->dw != 1 ||
        ci->c > 16)
        return "shape";
    if (pl->tk % 4 || pl->tq % 4)
        return "align"; /* 16-byte filter and window loads */
    if (pl->bn % pl->tk || pl->bm % pl->tq)
        return "divisibility";
    int64_t threads = (int64_t)pl->bm * pl->bn / (pl->tk * pl->tq);
    if (threads < 64 || threads % 32 || threads > dev->max_threads_per_block)
        return "threads";
    pl->threads = (int)threads;
    if ((pl->bn > 16 && pl->bn / 2 >= ci->k) || (pl->bm > 32 && pl->bm / 2 >= ci->p * ci->q))
        return "redundant"; /* tiles much larger than the problem only waste work */
    if (pl->stages > ci->c)
        return "redundant"; /* more buffers than input channels to put in them */
    pl->pt = pl->bm / pl->tq;
    /* The tile shape: the fewest padded output pixels, then the smallest patch, then wider. */
    int64_t best_pad = -1, best_patch = 0;
    for (int cgn = 1; cgn <= pl->pt; cgn *= 2) {
        if (pl->pt % cgn)
            continue;
        int oh = pl->pt / cgn, ow = cgn * pl->tq;
        int64_t pad = (int64_t)div_up(ci->p, oh) * oh * div_up(ci->q, ow) * ow;
        int64_t patch = ((int64_t)(oh - 1) * ci->sh + ci->r) * ((int64_t)(ow - 1) * ci->sw + ci->s);
        if (best_pad < 0 || pad < best_pad || (pad == best_pad && patch <= best_patch)) {
            best_pad = pad;
            best_patch = patch;
            pl->oh = oh;
            pl->ow = ow;
            pl->cgn = cgn;
        }
    }
    pl->tiles_p = div_up(ci->p, pl->oh);
    pl->tiles_q = div_up(ci->q, pl->ow);
    pl->kblocks = div_up(ci->k, pl->bn);
    if (ci->n > 65535 || pl->kblocks * pl->tiles_p * pl->tiles_q > ((int64_t)1 << 31) - 1)
        return "shape";
    if (ci->r > 64 || ci->s > 64 || ci->sh > 16 || ci->sw > 16)
        return "shape"; /* keeps the patch arithmetic below small */
    pl->ih = (pl->oh - 1) * ci->sh + (int)ci->r;
    pl->iw = (pl->ow - 1) * ci->sw + (int)ci->s;
    pl->ridx = div_up(pl->ih, ci->sh);
    pl->wv = div_up(pl->tq + (ci->s - 1) / ci->sw, 4);
    pl->xt = div_up(pl->ih, pl->threads / 32);
    pl->xi = div_up(pl->iw, 32);
    pl->ft = div_up(pl->bn, pl->threads / 32);
    pl->fi = div_up(ci->r * ci->s, 32);
    /* A phase holds the patch's columns of that phase and what the last column group's 16-byte
     * window loads reach. */
    pl->pl = div_up(pl->iw, ci->sw);
    if (pl->pl < (pl->cgn - 1) * pl->tq + 4 * pl->wv)
        pl->pl = (pl->cgn - 1) * pl->tq + 4 * pl->wv;
    pl->pl = div_up(pl->pl, 4) * 4;
    /* The row pitch (16-byte aligned) whose window loads conflict least. */
    int base = ci->sw * pl->pl;
    pl->conflicts = -1;
    for (int rp = base; rp < base + 32; rp += 4) {
        int c = tiled_conflicts(pl, rp);
        if (pl->conflicts < 0 || c < pl->conflicts) {
            pl->conflicts = c;
            pl->rp = rp;
        }
    }
    /* The filter slice [R * S][BNP]: BN rounded to 16 bytes, off a multiple of 32 banks so the
     * copies of consecutive (r, s) spread over banks. */
    pl->bnp = div_up(pl->bn, 4) * 4;
    if (pl->bnp % 32 == 0)
        pl->bnp += 4;
    pl->xs = ci->sh * pl->ridx * pl->rp;
    pl->ws = (int)(ci->r * ci->s) * pl->bnp;
    pl->stage = pl->xs + pl->ws;
    int64_t words = (int64_t)pl->stages * pl->stage;
    if (words < (int64_t)pl->bm * pl->bn)
        words = (int64_t)pl->bm * pl->bn; /* the output tile staged for the stores */
    if (words * 4 > dev->smem_per_block_optin)
        return "smem";
    pl->smem = (int)words * 4;
    /* Accumulators, one window, the filter values of one s (and the next, prefetched), patch
     * and loader addressing: the fewest registers ptxas 13.0 needs without spilling (fitted:
     * 8x4 tiles 88, 8x8 128-160, 4x8 80-96, 4x4 64). */
    pl->regs = pl->tk * pl->tq + 4 * pl->wv + 2 * pl->tk + 32;
    if (pl->regs > REG_BUDGET)
        return "regs";
    /* Blocks per SM that __launch_bounds__ asks ptxas to fit: what shared memory allows, with
     * registers kept to the estimate (rounded up, plus a margin). ptxas caps registers by the
     * warps one of the four schedulers' register files must hold: ceil(blocks * warps / 4). */
    int regs_cap = (pl->regs + 8 + 7) / 8 * 8;
    int per_sched = dev->regs_per_sm / 4 / (32 * regs_cap);
    int by_regs = 4 * per_sched / (pl->threads / 32);
    int by_smem = dev->smem_per_sm / (pl->smem + 1024);
    int by_threads = dev->max_threads_per_sm / pl->threads;
    pl->min_blocks = by_regs < by_smem ? by_regs : by_smem;
    if (by_threads < pl->min_blocks)
        pl->min_blocks = by_threads;
    if (pl->min_blocks < 1)
        pl->min_blocks = 1;
    return NULL;
}

/* The knobs each algorithm reads; the others must stay at their first value. */
static bool other_knobs_default(const ops_schedule *s, int algo)
{
    static const bool used[3][N_KNOBS] = {
        [ALGO_IGEMM] = {[K_MATH] = true,
                        [K_BM] = true,
                        [K_BN] = true,
                        [K_BK] = true,
                        [K_WARPS] = true,
                        [K_STAGES] = true},
        [ALGO_DIRECT] = {[K_WARPS] = true, [K_TK] = true, [K_TQ] = true, [K_FILTER] = true},
        [ALGO_TILED] =
            {[K_BM] = true, [K_BN] = true, [K_STAGES] = true, [K_TK] = true, [K_TQ] = true},
    };
    if (algo < 0 || algo > ALGO_TILED)
        return false;
    for (int k = K_ALGO + 1; k < N_KNOBS; k++)
        if (!used[algo][k] && s->v[k] != conv_knobs[k].values[0])
            return false;
    return true;
}

static const char *conv_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev)
{
    conv_info ci;
    if (!conv_analyse(grp, &ci))
        return "shape";
    int algo = s->v[K_ALGO];
    if (!other_knobs_default(s, algo))
        return "redundant";
    if (algo == ALGO_DIRECT) {
        direct_plan pl;
        return direct_plan_make(&ci, s, dev, &pl);
    }
    if (algo == ALGO_TILED) {
        tiled_plan pl;
        return tiled_plan_make(&ci, s, dev, &pl);
    }
    ig_plan pl;
    return ig_plan_make(grp, &ci, s, dev, &pl);
}

/* ---- emission: shared pieces ---- */

/* The float expression of the stored value `ref` of dtype dt (buf holds it). */
static const char *to_f(char *buf, size_t len, ops_dtype dt, const char *ref)
{
    kt_buf t = {0};
    ops_emit_to_float(&t, dt, ref);
    snprintf(buf, len, "%s", t.data ? t.data : ref);
    kt_buf_free(&t);
    return buf;
}

typedef struct conv_names {
    char in[OPS_GROUP_MAX_IO][16];        /* kernel parameter per group input */
    char param[OPS_GROUP_MAX_IO + 1][64]; /* their declarations, then the output's */
    int n_params;
    char call[512];           /* the names, comma-separated */
    const char *entry_suffix; /* the group's, for the kernel's name */
} conv_names;

static void conv_names_make(const ops_group *grp, const conv_info *ci, conv_names *nm)
{
    const ops_graph *g = grp->g;
    size_t cl = 0;
    nm->n_params = 0;
    nm->entry_suffix = grp->entry_suffix;
    for (int i = 0; i < grp->n_in; i++) {
        int t = grp->in[i];
        /* Formatted from a local: nm->in and nm->param/call are members of one object, and
         * snprintf's destination and arguments are restrict-qualified. */
        char name[sizeof(nm->in[0])];
        if (t == ci->x)
            snprintf(name, sizeof(name), "x");
        else if (t == ci->w)
            snprintf(name, sizeof(name), "w");
        else if (t == ci->bias)
            snprintf(name, sizeof(name), "bias");
        else
            snprintf(name, sizeof(name), "in%d", i);
        memcpy(nm->in[i], name, sizeof(name));
        snprintf(nm->param[nm->n_params++], sizeof(nm->param[0]), "const %s *__restrict__ %s",
                 ops_emit_ctype(g->tensors[t].dtype), name);
        cl += (size_t)snprintf(nm->call + cl, sizeof(nm->call) - cl, "%s%s", i ? ", " : "", name);
    }
    snprintf(nm->param[nm->n_params++], sizeof(nm->param[0]), "%s *__restrict__ y",
             ops_emit_ctype(g->tensors[ci->y].dtype));
    snprintf(nm->call + cl, sizeof(nm->call) - cl, ", y");
}

/* One item of a signature: ", " or a wrap before it unless it is the first; col tracks the column.
 * nonnull: -fsanitize=nonnull-attribute checks strlen's argument and lets execution go on, and GCC
 * 12 then warns (-Wformat-overflow) about the "%s" of that null path; the contract rules it out. */
__attribute__((nonnull)) static void emit_signature_item(kt_buf *b, const char *item, bool first,
                                                         size_t align, size_t *col)
{
    size_t len = strlen(item) + 1; /* with its "," or ")" */
    if (!first && *col + 1 + len > 100) {
        kt_buf_printf(b, ",\n%*s", (int)align, "");
        *col = align;
    } else if (!first) {
        kt_buf_printf(b, ", ");
        *col += 2;
    }
    kt_buf_printf(b, "%s", item);
    *col += strlen(item);
}

/* "head(lead..., params...)" wrapped at 100 columns, continuation lines aligned after '('.
 * lead may be NULL when n_lead is 0. */
static void emit_signature(kt_buf *b, const char *head, const char *const *lead, int n_lead,
                           const conv_names *nm)
{
    size_t col = strlen(head) + 1, align = col;
    kt_buf_printf(b, "%s(", head);
    for (int i = 0; i < n_lead; i++)
        emit_signature_item(b, lead[i], i == 0, align, &col);
    for (int i = 0; i < nm->n_params; i++)
        emit_signature_item(b, nm->param[i], n_lead + i == 0, align, &col);
    kt_buf_printf(b, ")\n");
}

static const char *param_of(const ops_group *grp, const conv_names *nm, int tensor)
{
    for (int i = 0; i < grp->n_in; i++)
        if (grp->in[i] == tensor)
            return nm->in[i];
    return NULL;
}

static void emit_constants(kt_buf *b, const conv_info *ci)
{
    const char *lx = ci->nhwc ? "NHWC" : "NCHW", *lw = ci->nhwc ? "OHWI" : "OIHW";
    kt_buf_line(b, "typedef %s idx_t; /* element offsets */", ci->wide ? "long long" : "int");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Problem shape: input %s, filter %s, output %s. */", lx, lw, lx);
    kt_buf_line(b, "constexpr int BATCH = %lld, C = %lld, H = %lld, W = %lld;", (long long)ci->n,
                (long long)ci->c, (long long)ci->h, (long long)ci->wd);
    kt_buf_line(b, "constexpr int K = %lld, R = %lld, S = %lld;", (long long)ci->k,
                (long long)ci->r, (long long)ci->s);
    kt_buf_line(b, "constexpr int P = %lld, Q = %lld;", (long long)ci->p, (long long)ci->q);
    kt_buf_line(b, "constexpr int STR_H = %d, STR_W = %d, PAD_H = %d, PAD_W = %d;", ci->sh, ci->sw,
                ci->ph, ci->pw);
    kt_buf_line(b, "constexpr int DIL_H = %d, DIL_W = %d;", ci->dh, ci->dw);
    kt_buf_line(b, "constexpr int GROUPS = %d, CG = %lld, KG = %lld; /* channels per group */",
                ci->groups, (long long)ci->cg, (long long)ci->kg);
    kt_buf_line(b, "/* GEMM view: rows are output pixels, columns output channels of a group,");
    kt_buf_line(b, " * the reduction runs over (c, r, s) in the filter's memory order. */");
    kt_buf_line(b, "constexpr int GEMM_M = BATCH * P * Q, GEMM_N = KG, GEMM_K = CG * R * S;");
    kt_buf_printf(b, "\n");
}

/* The float expression of graph tensor t at output element (n, k, p, q). */
static void operand_expr(kt_buf *e, const ops_group *grp, const conv_info *ci, const conv_names *nm,
                         int t)
{
    const ops_graph *g = grp->g;
    static const char *const nchw[] = {"n", "k", "p", "q"}, *const nhwc[] = {"n", "p", "q", "k"};
    kt_buf off = {0};
    ops_emit_bcast_offset(&off, &g->tensors[t].shape, &g->tensors[ci->conv_out].shape,
                          ci->nhwc ? nhwc : nchw);
    char ref[600];
    snprintf(ref, sizeof(ref), "%s[%s]", param_of(grp, nm, t), off.data ? off.data : "0");
    kt_buf_free(&off);
    ops_emit_to_float(e, g->tensors[t].dtype, ref);
}

/* kt_conv_store(acc, n, k, p, q, ...): adds the bias, runs the epilogue chain and writes the
 * output element; every kernel calls it once per output element it owns. */
static int emit_store_fn(kt_buf *b, const ops_group *grp, const conv_info *ci, const conv_names *nm)
{
    const ops_graph *g = grp->g;
    char var[OPS_GROUP_MAX_NODES][16];
    int var_tensor[OPS_GROUP_MAX_NODES];
    int n_vars = 0, rc = 0;
    kt_buf_line(b, "/* Bias, epilogue and store of output element (n, k, p, q). */");
    static const char *const lead[] = {"float acc", "idx_t n", "idx_t k", "idx_t p", "idx_t q"};
    emit_signature(b, "__device__ __forceinline__ void kt_conv_store", lead, 5, nm);
    kt_buf_line(b, "{");
    b->indent += 4;
    for (int i = 0; i < grp->n_nodes && rc == 0; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        const ops_tensor *t = &g->tensors[n->out];
        kt_buf e = {0};
        if (n->op == OPS_CONV2D) {
            kt_buf_printf(&e, "acc");
            if (ci->bias >= 0) {
                /* The conv's bias is per output channel (not NumPy-aligned to the last axis). */
                char ref[32], fl[64];
                snprintf(ref, sizeof(ref), "%s[k]", param_of(grp, nm, ci->bias));
                kt_buf_printf(&e, " + %s", to_f(fl, sizeof(fl), ci->dt, ref));
            }
        } else {
            kt_buf opb[OPS_MAX_OPERANDS] = {{0}};
            const char *ops[OPS_MAX_OPERANDS] = {0};
            for (int k = 0; k < n->n_in; k++) {
                int ti = n->in[k].tensor;
                if (ti == OPS_SCALAR)
                    continue;
                const char *v = NULL;
                for (int j = 0; j < n_vars; j++)
                    if (var_tensor[j] == ti)
                        v = var[j];
                if (v)
                    kt_buf_printf(&opb[k], "%s", v);
                else
                    operand_expr(&opb[k], grp, ci, nm, ti);
                ops[k] = opb[k].data ? opb[k].data : "0.0f";
            }
            rc = ops_emit_elementwise(&e, n, ops);
            for (int k = 0; k < OPS_MAX_OPERANDS; k++)
                kt_buf_free(&opb[k]);
        }
        snprintf(var[n_vars], sizeof(var[n_vars]), "v%d", n_vars);
        var_tensor[n_vars] = n->out;
        char c[OPS_EMIT_COMMENT_MAX];
        kt_buf_line(b, "const float %s = %s; /* %s = %s */", var[n_vars], e.data ? e.data : "0.0f",
                    ops_emit_comment_text(t->name, c, sizeof(c)), ops_op_info_get(n->op)->name);
        if (kt_buf_status(&e) < 0)
            rc = -ENOMEM;
        kt_buf_free(&e);
        n_vars++;
    }
    const char *yv = "acc";
    for (int j = 0; j < n_vars; j++)
        if (var_tensor[j] == ci->y)
            yv = var[j];
    kt_buf val = {0};
    ops_emit_from_float(&val, g->tensors[ci->y].dtype, yv);
    kt_buf_line(b, "y[%s] = %s;",
                ci->nhwc ? "((n * P + p) * Q + q) * K + k" : "((n * K + k) * P + p) * Q + q",
                val.data ? val.data : yv);
    if (kt_buf_status(&val) < 0)
        rc = -ENOMEM;
    kt_buf_free(&val);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_printf(b, "\n");
    return rc;
}

/* ---- emission: direct ---- */

static void emit_direct(kt_buf *b, const conv_info *ci, const direct_plan *pl, const conv_names *nm)
{
    const char *xt = ops_emit_ctype(ci->dt);
    kt_buf_line(b, "/* Direct convolution: each thread computes TK output channels x TQ adjacent "
                   "output columns");
    kt_buf_line(b, " * of one output row; a block shares its TK channels, so filter reads are "
                   "warp-uniform. */");
    kt_buf_line(b, "constexpr int TK = %d, TQ = %d, THREADS = %d;", pl->tk, pl->tq, pl->threads);
    kt_buf_line(b, "constexpr int QT = (Q + TQ - 1) / TQ;   /* column tiles per output row */");
    kt_buf_line(b, "constexpr int SPATIAL = BATCH * P * QT; /* thread tiles per channel block */");
    kt_buf_line(b, "constexpr int WIN = (TQ - 1) * STR_W + (S - 1) * DIL_W + 1; /* input columns "
                   "a thread reads per filter row */");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(THREADS, 1)");
    char entry[64];
    snprintf(entry, sizeof(entry), "ktune_conv_direct%s", nm->entry_suffix);
    emit_signature(b, entry, NULL, 0, nm);
    kt_buf_line(b, "{");
    b->indent = 4;
    kt_buf_line(b, "const int k0 = blockIdx.y * TK;  /* first output channel of this block */");
    kt_buf_line(b, "const int grp = k0 / KG;         /* its group: all TK channels share it */");
    char wl[160], fl[200];
    if (pl->shared) {
        kt_buf_line(b, "/* The block's filter slice [TK][GEMM_K], staged once. */");
        kt_buf_line(b, "extern __shared__ __align__(16) float ws[];");
        kt_buf_line(b, "for (int i = threadIdx.x; i < TK * GEMM_K; i += THREADS)");
        kt_buf_line(b, "    ws[i] = (k0 + i / GEMM_K < K) ? %s : 0.0f;",
                    to_f(fl, sizeof(fl), ci->dt, "w[(idx_t)k0 * GEMM_K + i]"));
        kt_buf_line(b, "__syncthreads();");
    }
    kt_buf_line(b, "const int t = blockIdx.x * THREADS + threadIdx.x;");
    kt_buf_line(b, "if (t >= SPATIAL)");
    kt_buf_line(b, "    return;%s", pl->shared ? " /* after the only barrier */" : "");
    kt_buf_line(b, "const int qt = t %% QT, p = (t / QT) %% P, n = t / (QT * P);");
    kt_buf_line(b, "const int q0 = qt * TQ;");
    kt_buf_line(b, "const int h0 = p * STR_H - PAD_H, w0 = q0 * STR_W - PAD_W;");
    kt_buf_line(b, "float acc[TK][TQ] = {};");
    bool unroll_c = ci->cg * ci->r * ci->s * pl->tk * pl->tq <= 1024;
    bool unroll_r = ci->r * ci->s * pl->tk * pl->tq <= 512;
    kt_buf_line(b, "#pragma unroll%s", unroll_c ? "" : " 1");
    kt_buf_line(b, "for (int c = 0; c < CG; c++) {");
    b->indent = 8;
    if (ci->nhwc)
        kt_buf_line(b, "const %s *xc = x + (idx_t)n * H * W * C + grp * CG + c;", xt);
    else
        kt_buf_line(b, "const %s *xc = x + ((idx_t)n * C + grp * CG + c) * H * W;", xt);
    kt_buf_line(b, "#pragma unroll%s", unroll_r ? "" : " 1");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    b->indent = 12;
    kt_buf_line(b, "const int h = h0 + r * DIL_H;");
    kt_buf_line(b, "if ((unsigned)h >= (unsigned)H)");
    kt_buf_line(b, "    continue;");
    kt_buf_line(b, "const %s *xr = xc + (idx_t)h * W%s;", xt, ci->nhwc ? " * C" : "");
    kt_buf_line(b, "float xv[WIN]; /* the input row segment under this thread's outputs */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < WIN; i++) {");
    kt_buf_line(b, "    const int ww = w0 + i;");
    snprintf(wl, sizeof(wl), "xr[ww%s]", ci->nhwc ? " * C" : "");
    kt_buf_line(b, "    xv[i] = (unsigned)ww < (unsigned)W ? %s : 0.0f;",
                to_f(fl, sizeof(fl), ci->dt, wl));
    kt_buf_line(b, "}");
    const char *widx = ci->nhwc ? "(r * S + s) * CG + c" : "(c * R + r) * S + s";
    if (!pl->shared) {
        kt_buf_line(b, "float wv[TK][S]; /* this filter row of the thread's channels */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int j = 0; j < TK; j++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int s = 0; s < S; s++)");
        snprintf(wl, sizeof(wl), "w[(idx_t)(k0 + j) * GEMM_K + %s]", widx);
        kt_buf_line(b, "        wv[j][s] = k0 + j < K ? %s : 0.0f;",
                    to_f(fl, sizeof(fl), ci->dt, wl));
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int s = 0; s < S; s++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < TK; j++) {");
    if (pl->shared)
        kt_buf_line(b, "        const float wgt = ws[j * GEMM_K + %s];", widx);
    else
        kt_buf_line(b, "        const float wgt = wv[j][s];");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int i = 0; i < TQ; i++)");
    kt_buf_line(b, "            acc[j][i] = fmaf(xv[i * STR_W + s * DIL_W], wgt, acc[j][i]);");
    kt_buf_line(b, "    }");
    b->indent = 8;
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < TK; j++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < TQ; i++)");
    kt_buf_line(b, "        if (k0 + j < K && q0 + i < Q)");
    kt_buf_line(b, "            kt_conv_store(acc[j][i], n, k0 + j, p, q0 + i, %s);", nm->call);
    b->indent = 0;
    kt_buf_line(b, "}");
}

/* ---- emission: implicit GEMM ---- */

/* cp.async primitives: a 16-byte copy that zero-fills when masked, commit and wait. */
static void emit_cp_async_helpers(kt_buf *b)
{
    kt_buf_line(b, "/* 16-byte global -> shared copy; ok == false writes zeros (padding, "
                   "tile edges). */");
    kt_buf_line(b, "__device__ __forceinline__ void kt_cp_async16(void *dst, const void *src, "
                   "bool ok)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    asm volatile(\"cp.async.cg.shared.global [%%0], [%%1], 16, %%2;\\n\"");
    kt_buf_line(b, "                 :");
    kt_buf_line(b, "                 : \"r\"(kt_smem_addr(dst)), \"l\"(src), \"r\"(ok ? 16 : "
                   "0)");
    kt_buf_line(b, "                 : \"memory\");");
    kt_buf_line(b, "}");
    kt_buf_line(b, "__device__ __forceinline__ void kt_cp_async_commit()");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");");
    kt_buf_line(b, "}");
    kt_buf_line(b, "template <int N> __device__ __forceinline__ void kt_cp_async_wait()");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    asm volatile(\"cp.async.wait_group %%0;\\n\" ::\"n\"(N) : \"memory\");");
    kt_buf_line(b, "}");
}

static void emit_mma_helpers(kt_buf *b, const ig_plan *pl)
{
    const char *ty = pl->mt == OPS_DT_BF16 ? "bf16" : "f16";
    kt_buf_line(b, "/* ---- tensor-core and async-copy primitives (inline PTX) ---- */");
    kt_buf_line(b, "__device__ __forceinline__ unsigned kt_smem_addr(const void *p)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    return (unsigned)__cvta_generic_to_shared(p);");
    kt_buf_line(b, "}");
    kt_buf_line(b, "__device__ __forceinline__ void kt_ldmatrix_x4(unsigned (&r)[4], const void "
                   "*p)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%%0, %%1, %%2, "
                   "%%3}, [%%4];\\n\"");
    kt_buf_line(b, "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3])");
    kt_buf_line(b, "                 : \"r\"(kt_smem_addr(p))");
    kt_buf_line(b, "                 : \"memory\");");
    kt_buf_line(b, "}");
    kt_buf_line(b, "__device__ __forceinline__ void kt_ldmatrix_x2(unsigned (&r)[2], const void "
                   "*p)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%%0, %%1}, "
                   "[%%2];\\n\"");
    kt_buf_line(b, "                 : \"=r\"(r[0]), \"=r\"(r[1])");
    kt_buf_line(b, "                 : \"r\"(kt_smem_addr(p))");
    kt_buf_line(b, "                 : \"memory\");");
    kt_buf_line(b, "}");
    kt_buf_line(b, "/* d += a * b on one m16n8k16 tile, %s operands, fp32 accumulation. */", ty);
    kt_buf_line(b, "__device__ __forceinline__ void kt_mma(float (&d)[4], const unsigned (&a)[4], "
                   "const unsigned (&b)[2])");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 \"", ty, ty);
    kt_buf_line(b, "                 \"{%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, %%9}, "
                   "{%%0, %%1, %%2, %%3};\\n\"");
    kt_buf_line(b, "                 : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])");
    kt_buf_line(b, "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), "
                   "\"r\"(b[0]), \"r\"(b[1]));");
    kt_buf_line(b, "}");
    if (pl->cp_async)
        emit_cp_async_helpers(b);
    kt_buf_printf(b, "\n");
}

static void emit_tf32_helpers(kt_buf *b, const ig_plan *pl)
{
    kt_buf_line(b, "/* ---- tf32 tensor-core primitives (inline PTX) ---- */");
    if (pl->cp_async) {
        kt_buf_line(b, "__device__ __forceinline__ unsigned kt_smem_addr(const void *p)");
        kt_buf_line(b, "{");
        kt_buf_line(b, "    return (unsigned)__cvta_generic_to_shared(p);");
        kt_buf_line(b, "}");
    }
    kt_buf_line(b, "/* fp32 -> tf32: round to nearest (ties away) to 10 stored mantissa bits; the "
                   "result is an");
    kt_buf_line(b, " * fp32 bit pattern whose low 13 bits are zero. */");
    kt_buf_line(b, "__device__ __forceinline__ unsigned kt_tf32(float x)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    unsigned r;");
    kt_buf_line(b, "    asm(\"cvt.rna.tf32.f32 %%0, %%1;\\n\" : \"=r\"(r) : \"f\"(x));");
    kt_buf_line(b, "    return r;");
    kt_buf_line(b, "}");
    if (pl->math == MATH_TF32X3) {
        kt_buf_line(b, "/* Error-compensated split (3xTF32): x = big + small + e with big = "
                       "tf32(x), the top 11");
        kt_buf_line(b, " * significant bits, and small = tf32(x - big), the next 11 (x - big "
                       "is exact in fp32), so");
        kt_buf_line(b, " * |small| <= 2^-11 |x| and |e| <= 2^-22 |x|. The kernel sums "
                       "a_small*b_big + a_big*b_small +");
        kt_buf_line(b, " * a_big*b_big (small terms first, so they are not lost against the "
                       "big one): each tf32 x tf32");
        kt_buf_line(b, " * product is exact (11 x 11 bits), and each k step's sum is added to "
                       "the accumulator in fp32.");
        kt_buf_line(b, " * What is dropped (a_small*b_small and the split remainders) is a "
                       "few 2^-22 of |a b|, close");
        kt_buf_line(b, " * to fp32's own 2^-24 rounding, where one plain tf32 mma errs by up "
                       "to 2^-10. */");
        kt_buf_line(b, "__device__ __forceinline__ void kt_tf32_split(float x, unsigned &big, "
                       "unsigned &small)");
        kt_buf_line(b, "{");
        kt_buf_line(b, "    big = kt_tf32(x);");
        kt_buf_line(b, "    small = kt_tf32(x - __uint_as_float(big));");
        kt_buf_line(b, "}");
    }
    kt_buf_line(b, "/* d += a * b on one m16n8k8 tile, tf32 operands, fp32 accumulation. */");
    kt_buf_line(b, "__device__ __forceinline__ void kt_mma_tf32(float (&d)[4], const unsigned "
                   "(&a)[4],");
    kt_buf_line(b, "                                            const unsigned (&b)[2])");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 \"");
    kt_buf_line(b, "                 \"{%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, %%9}, "
                   "{%%0, %%1, %%2, %%3};\\n\"");
    kt_buf_line(b, "                 : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])");
    kt_buf_line(b, "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), "
                   "\"r\"(b[0]), \"r\"(b[1]));");
    kt_buf_line(b, "}");
    if (pl->cp_async)
        emit_cp_async_helpers(b);
    kt_buf_printf(b, "\n");
}

/* The (c, r, s) of reduction index kk, in the filter's memory order. */
static void emit_kk_split(kt_buf *b, const conv_info *ci, const char *kk)
{
    if (ci->nhwc)
        kt_buf_line(b, "const int c = %s %% CG, r = %s / (S * CG), s = (%s / CG) %% S;", kk, kk,
                    kk);
    else
        kt_buf_line(b, "const int c = %s / (R * S), r = (%s / S) %% R, s = %s %% S;", kk, kk, kk);
}

/* Whether the plain loader reads the split of each reduction index from a table (kk_table):
 * it must fit constant memory (8 bytes an entry, with room left for other constants) and the
 * packed (r, s) offsets 15 bits. */
static bool kk_table_ok(const conv_info *ci)
{
    return ci->gk <= 6144 && (ci->r - 1) * ci->dh < 16384 && (ci->s - 1) * ci->dw < 32768 &&
           ci->h < 16384;
}

/* kt_kk[kk] for every reduction index kk (padded to a whole number of BK tiles): .x the offset of
 * x at (c, r, s) from the receptive field's origin, .y (r * DIL_H) << 16 | s * DIL_W; padding
 * entries get r * DIL_H = 16383, a height no load accepts. The loader's kk is the same for the 32
 * lanes of a warp (BM is a multiple of 32), so each lookup is one broadcast read of constant
 * memory instead of two divisions and a remainder per gathered element. */
static void emit_kk_table(kt_buf *b, const conv_info *ci, int bk)
{
    int64_t n = (ci->gk + bk - 1) / bk * bk;
    kt_buf_line(b, "/* Reduction index -> (offset of x from the receptive field's origin, packed "
                   "filter offsets). */");
    kt_buf_printf(b, "__constant__ int2 kt_kk[%lld] = {", (long long)n);
    for (int64_t kk = 0; kk < n; kk++) {
        long long off = 0, rdh = 16383, sdw = 0;
        if (kk < ci->gk) {
            int64_t c, r, sv;
            if (ci->nhwc) {
                c = kk % ci->cg;
                r = kk / (ci->s * ci->cg);
                sv = (kk / ci->cg) % ci->s;
            } else {
                c = kk / (ci->r * ci->s);
                r = (kk / ci->s) % ci->r;
                sv = kk % ci->s;
            }
            rdh = r * ci->dh;
            sdw = sv * ci->dw;
            off = ci->nhwc ? (rdh * ci->wd + sdw) * ci->c + c : (c * ci->h + rdh) * ci->wd + sdw;
        }
        kt_buf_printf(b, "%s{%lld, %lld}", kk % 8 ? ", " : (kk ? ",\n    " : "\n    "), off,
                      rdh << 16 | sdw);
    }
    kt_buf_printf(b, "\n};\n\n");
}

/* Per gathered row (output pixel): where its receptive field starts. Rows past the end get an
 * out-of-range height so each of their loads is masked. */
static void emit_row_setup(kt_buf *b, const conv_info *ci, const char *count, const char *mexpr)
{
    kt_buf_line(b, "/* Gathered rows (output pixels): receptive-field origin; rows past GEMM_M "
                   "get a height");
    kt_buf_line(b, " * no load accepts. */");
    kt_buf_line(b, "idx_t a_base[%s];", count);
    kt_buf_line(b, "int a_h[%s], a_w[%s];", count, count);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %s; i++) {", count);
    kt_buf_line(b, "    const int m = m0 + %s;", mexpr);
    kt_buf_line(b, "    const int q = m %% Q, p = (m / Q) %% P, n = m / (Q * P);");
    if (ci->nhwc)
        kt_buf_line(b, "    a_base[i] = (idx_t)n * H * W * C + grp * CG;");
    else
        kt_buf_line(b, "    a_base[i] = ((idx_t)n * C + grp * CG) * H * W;");
    kt_buf_line(b, "    a_h[i] = m < GEMM_M ? p * STR_H - PAD_H : -(1 << 24);");
    kt_buf_line(b, "    a_w[i] = q * STR_W - PAD_W;");
    kt_buf_line(b, "}");
}

/* The offset of x at gathered row slot `slot`, channel c, input position (h, ww). */
static void x_offset(char *buf, size_t len, const conv_info *ci, const char *slot)
{
    if (ci->nhwc)
        snprintf(buf, len, "a_base[%s] + ((idx_t)h * W + ww) * C + c", slot);
    else
        snprintf(buf, len, "a_base[%s] + ((idx_t)c * H + h) * W + ww", slot);
}

/* The shared-memory value of stored element `ref`: float for ffma and the tf32 paths (f32 data;
 * tf32 rounding happens when fragments are read), the 16-bit mma type for mma (f32 data under
 * "reduced" rounds to bf16 here). */
static const char *tile_value(char *buf, size_t len, const conv_info *ci, const ig_plan *pl,
                              const char *ref)
{
    if (!pl->mma)
        return to_f(buf, len, ci->dt, ref);
    if (ci->dt == OPS_DT_F32)
        snprintf(buf, len, "kt_f32_to_bf16(%s)", ref);
    else
        snprintf(buf, len, "%s", ref);
    return buf;
}

/* Plain predicated loads of tile kt into a_reg/b_reg, and their store into shared memory. */
static void emit_plain_loader(kt_buf *b, const conv_info *ci, const ig_plan *pl)
{
    const char *st = pl->mma ? "unsigned short" : "float";
    const char *zero = pl->mma ? "(unsigned short)0" : "0.0f";
    /* Tensor-core paths store [BM][LDS] / [BN][LDS] (reduction contiguous), ffma [BK][LDA/LDB]. */
    char off[160], ref[200], val[240];
    kt_buf_line(b, "%s a_reg[A_PER], b_reg[B_PER];", st);
    kt_buf_line(b, "/* Gathers tile kt of the implicit im2col matrix and of the filter into "
                   "registers;");
    kt_buf_line(b, " * consecutive threads take consecutive pixels (A) and reduction indices (B), "
                   "so reads coalesce. */");
    kt_buf_line(b, "auto load_tile = [&](int kt) {");
    b->indent += 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int e = 0; e < A_PER; e++) {");
    b->indent += 4;
    kt_buf_line(b, "const int kk = kt * BK + (tid + e * THREADS) / BM;");
    if (kk_table_ok(ci)) {
        kt_buf_line(b, "const int2 t = kt_kk[kk]; /* warp-uniform: a constant-cache broadcast */");
        kt_buf_line(b, "const int h = a_h[e %% A_ROWS] + (t.y >> 16), ww = a_w[e %% A_ROWS] + "
                       "(t.y & 0xffff);");
        kt_buf_line(b, "const bool ok = (unsigned)h < (unsigned)H && (unsigned)ww < (unsigned)W;");
        snprintf(off, sizeof(off), "a_base[e %% A_ROWS] + %s + t.x",
                 /* 64-bit: rows past GEMM_M carry a sentinel height whose product would
                  * overflow an int (their loads are masked) */
                 ci->nhwc ? "((long long)a_h[e % A_ROWS] * W + a_w[e % A_ROWS]) * C"
                          : "(long long)a_h[e % A_ROWS] * W + a_w[e % A_ROWS]");
    } else {
        emit_kk_split(b, ci, "kk");
        kt_buf_line(b, "const int h = a_h[e %% A_ROWS] + r * DIL_H, ww = a_w[e %% A_ROWS] + s * "
                       "DIL_W;");
        kt_buf_line(b, "const bool ok = kk < GEMM_K && (unsigned)h < (unsigned)H && (unsigned)ww "
                       "< (unsigned)W;");
        x_offset(off, sizeof(off), ci, "e % A_ROWS");
    }
    snprintf(ref, sizeof(ref), "x[%s]", off);
    kt_buf_line(b, "a_reg[e] = ok ? %s : %s;", tile_value(val, sizeof(val), ci, pl, ref), zero);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int e = 0; e < B_PER; e++) {");
    b->indent += 4;
    kt_buf_line(b, "const int idx = tid + e * THREADS;");
    kt_buf_line(b, "const int kk = kt * BK + idx %% BK, col = n0 + idx / BK;");
    kt_buf_line(b, "const bool ok = kk < GEMM_K && col < GEMM_N;");
    snprintf(ref, sizeof(ref), "w[(idx_t)(grp * KG + col) * GEMM_K + kk]");
    kt_buf_line(b, "b_reg[e] = ok ? %s : %s;", tile_value(val, sizeof(val), ci, pl, ref), zero);
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "};");
    kt_buf_line(b, "auto store_tile = [&](int stage) {");
    b->indent += 4;
    if (pl->tc) {
        kt_buf_line(b, "%s *as = As + stage * BM * LDS, *bs = Bs + stage * BN * LDS;", st);
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < A_PER; e++) {");
        kt_buf_line(b, "    const int idx = tid + e * THREADS;");
        kt_buf_line(b, "    as[(idx %% BM) * LDS + idx / BM] = a_reg[e];");
        kt_buf_line(b, "}");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < B_PER; e++) {");
        kt_buf_line(b, "    const int idx = tid + e * THREADS;");
        kt_buf_line(b, "    bs[(idx / BK) * LDS + idx %% BK] = b_reg[e];");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "float *as = As + stage * BK * LDA, *bs = Bs + stage * BK * LDB;");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < A_PER; e++) {");
        kt_buf_line(b, "    const int idx = tid + e * THREADS;");
        kt_buf_line(b, "    as[(idx / BM) * LDA + idx %% BM] = a_reg[e];");
        kt_buf_line(b, "}");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < B_PER; e++) {");
        kt_buf_line(b, "    const int idx = tid + e * THREADS;");
        kt_buf_line(b, "    bs[(idx %% BK) * LDB + idx / BK] = b_reg[e];");
        kt_buf_line(b, "}");
    }
    b->indent -= 4;
    kt_buf_line(b, "};");
}

static void emit_cp_async_loader(kt_buf *b, const conv_info *ci, const ig_plan *pl)
{
    char off[160];
    const char *st = pl->mma ? "unsigned short" : "float";
    kt_buf_line(b, "/* Issues the 16-byte copies of tile kt into stage `stage`: each thread copies "
                   "A_CHUNKS");
    kt_buf_line(b,
                " * %d-channel runs of pixels and B_CHUNKS %d-element runs of filter rows, all at "
                "one reduction",
                pl->vec, pl->vec);
    kt_buf_line(b, " * column, so (c, r, s) is split once per tile. */");
    kt_buf_line(b, "auto load_tile = [&](int kt, int stage) {");
    b->indent += 4;
    kt_buf_line(b, "%s *as = As + stage * BM * LDS, *bs = Bs + stage * BN * LDS;", st);
    kt_buf_line(b, "const int kk = kt * BK + (tid %% CPR) * %d;", pl->vec);
    emit_kk_split(b, ci, "kk");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int e = 0; e < A_CHUNKS; e++) {");
    b->indent += 4;
    kt_buf_line(b, "const int h = a_h[e] + r * DIL_H, ww = a_w[e] + s * DIL_W;");
    kt_buf_line(b, "const bool ok = kk < GEMM_K && (unsigned)h < (unsigned)H && (unsigned)ww < "
                   "(unsigned)W;");
    x_offset(off, sizeof(off), ci, "e");
    kt_buf_line(b, "kt_cp_async16(as + ((tid + e * THREADS) / CPR) * LDS + (tid %% CPR) * %d,",
                pl->vec);
    kt_buf_line(b, "              ok ? x + %s : x, ok);", off);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int e = 0; e < B_CHUNKS; e++) {");
    b->indent += 4;
    kt_buf_line(b, "const int col = n0 + (tid + e * THREADS) / CPR;");
    kt_buf_line(b, "const bool ok = kk < GEMM_K && col < GEMM_N;");
    kt_buf_line(b, "kt_cp_async16(bs + ((tid + e * THREADS) / CPR) * LDS + (tid %% CPR) * %d,",
                pl->vec);
    kt_buf_line(b, "              ok ? w + (idx_t)(grp * KG + col) * GEMM_K + kk : w, ok);");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "};");
}

static void emit_compute_ffma(kt_buf *b, const conv_info *ci)
{
    /* The fast thread index runs along the output's contiguous dimension so stores coalesce:
     * pixels for NCHW, channels for NHWC. Shared reads stay conflict-free or broadcast. */
    if (ci->nhwc) {
        kt_buf_line(b, "const int col0 = tid %% (BN / TN), row0 = tid / (BN / TN);");
    } else {
        kt_buf_line(b, "const int row0 = tid %% (BM / TM), col0 = tid / (BM / TM);");
    }
    kt_buf_line(b, "/* Thread tile: rows row0 + i * (BM / TM), columns col0 + j * (BN / TN). */");
    kt_buf_line(b, "float acc[TM][TN] = {};");
    kt_buf_line(b, "auto compute_tile = [&](int stage) {");
    b->indent += 4;
    kt_buf_line(b, "const float *as = As + stage * BK * LDA, *bs = Bs + stage * BK * LDB;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int kk = 0; kk < BK; kk++) {");
    kt_buf_line(b, "    float a[TM], bv[TN];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < TM; i++)");
    kt_buf_line(b, "        a[i] = as[kk * LDA + row0 + i * (BM / TM)];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < TN; j++)");
    kt_buf_line(b, "        bv[j] = bs[kk * LDB + col0 + j * (BN / TN)];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < TM; i++)");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int j = 0; j < TN; j++)");
    kt_buf_line(b, "            acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);");
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "};");
}

static void emit_compute_mma(kt_buf *b)
{
    kt_buf_line(b, "const int lane = tid %% 32, warp = tid / 32;");
    kt_buf_line(b, "const int wm0 = (warp %% WARPS_M) * WTM, wn0 = (warp / WARPS_M) * WTN;");
    kt_buf_line(b, "float acc[MI][NI][4] = {};");
    kt_buf_line(b, "/* One stage: BK / 16 steps of MI x NI mma tiles per warp, fragments by "
                   "ldmatrix. */");
    kt_buf_line(b, "auto compute_tile = [&](int stage) {");
    b->indent += 4;
    kt_buf_line(b, "const unsigned short *as = As + stage * BM * LDS, *bs = Bs + stage * BN * "
                   "LDS;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int k16 = 0; k16 < BK; k16 += 16) {");
    b->indent += 4;
    kt_buf_line(b, "unsigned af[MI][4], bf[NI][2];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int mi = 0; mi < MI; mi++)");
    kt_buf_line(b, "    kt_ldmatrix_x4(af[mi], as + (wm0 + mi * 16 + lane %% 16) * LDS + k16 + "
                   "(lane / 16) * 8);");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ni = 0; ni + 1 < NI; ni += 2) {");
    kt_buf_line(b, "    unsigned t[4];");
    kt_buf_line(b, "    kt_ldmatrix_x4(t, bs + (wn0 + ni * 8 + lane %% 8 + (lane / 16) * 8) * "
                   "LDS + k16 +");
    kt_buf_line(b, "                          ((lane / 8) %% 2) * 8);");
    kt_buf_line(b, "    bf[ni][0] = t[0];");
    kt_buf_line(b, "    bf[ni][1] = t[1];");
    kt_buf_line(b, "    bf[ni + 1][0] = t[2];");
    kt_buf_line(b, "    bf[ni + 1][1] = t[3];");
    kt_buf_line(b, "}");
    kt_buf_line(b, "if (NI %% 2)");
    kt_buf_line(b, "    kt_ldmatrix_x2(bf[NI - 1], bs + (wn0 + (NI - 1) * 8 + lane %% 8) * LDS + "
                   "k16 +");
    kt_buf_line(b, "                                   ((lane / 8) %% 2) * 8);");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int mi = 0; mi < MI; mi++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int ni = 0; ni < NI; ni++)");
    kt_buf_line(b, "        kt_mma(acc[mi][ni], af[mi], bf[ni]);");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "};");
}

/* tf32 / tf32x3: fragments read element-wise from the float tiles (PTX ISA m16n8k8 .tf32
 * layout, g = lane / 4, t = lane % 4): A a0 (g, t), a1 (g + 8, t), a2 (g, t + 4),
 * a3 (g + 8, t + 4); B b0 (k = t, n = g), b1 (k = t + 4, n = g). */
static void emit_compute_tf32(kt_buf *b, const ig_plan *pl)
{
    bool x3 = pl->math == MATH_TF32X3;
    kt_buf_line(b, "const int lane = tid %% 32, warp = tid / 32;");
    kt_buf_line(b, "const int g = lane / 4, t = lane %% 4; /* fragment row and column within an "
                   "mma tile */");
    kt_buf_line(b, "const int wm0 = (warp %% WARPS_M) * WTM, wn0 = (warp / WARPS_M) * WTN;");
    kt_buf_line(b, "float acc[MI][NI][4] = {};");
    if (x3) {
        kt_buf_line(b, "/* One stage: BK / 8 steps of 3 x MI x NI mma tiles per warp. Each float "
                       "is split into");
        kt_buf_line(b, " * its tf32 big and small parts as its fragment is read.");
    } else {
        kt_buf_line(b, "/* One stage: BK / 8 steps of MI x NI mma tiles per warp. Each float is "
                       "rounded to tf32");
        kt_buf_line(b, " * as its fragment is read.");
    }
    kt_buf_line(b, " * Lane (g, t) reads row g, column t: with the 4-float row pad the 32 lanes "
                   "of a read hit");
    kt_buf_line(b, " * 32 distinct banks. */");
    kt_buf_line(b, "auto compute_tile = [&](int stage) {");
    b->indent += 4;
    kt_buf_line(b, "const float *as = As + stage * BM * LDS, *bs = Bs + stage * BN * LDS;");
    if (x3)
        kt_buf_line(b, "float part[MI][NI][4] = {}; /* this stage's products, added to acc at "
                       "its end */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int k8 = 0; k8 < BK; k8 += 8) {");
    b->indent += 4;
    if (x3)
        kt_buf_line(b, "unsigned a_big[MI][4], a_small[MI][4], b_big[NI][2], b_small[NI][2];");
    else
        kt_buf_line(b, "unsigned af[MI][4], bf[NI][2];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int mi = 0; mi < MI; mi++) {");
    b->indent += 4;
    kt_buf_line(b, "const float *ap = as + (wm0 + mi * 16 + g) * LDS + k8 + t;");
    static const char *const a_off[4] = {"0", "8 * LDS", "4", "8 * LDS + 4"};
    static const char *const a_pos[4] = {"(g, t)", "(g + 8, t)", "(g, t + 4)", "(g + 8, t + 4)"};
    for (int r = 0; r < 4; r++) {
        char call[96];
        if (x3)
            snprintf(call, sizeof(call), "kt_tf32_split(ap[%s], a_big[mi][%d], a_small[mi][%d]);",
                     a_off[r], r, r);
        else
            snprintf(call, sizeof(call), "af[mi][%d] = kt_tf32(ap[%s]);", r, a_off[r]);
        kt_buf_line(b, "%-*s /* %s */", x3 ? 62 : 36, call, a_pos[r]);
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ni = 0; ni < NI; ni++) {");
    b->indent += 4;
    kt_buf_line(b, "const float *bp = bs + (wn0 + ni * 8 + g) * LDS + k8 + t;");
    if (x3) {
        kt_buf_line(b, "kt_tf32_split(bp[0], b_big[ni][0], b_small[ni][0]); /* (k = t, n = g) */");
        kt_buf_line(b, "kt_tf32_split(bp[4], b_big[ni][1], b_small[ni][1]); /* (k = t + 4, n = "
                       "g) */");
    } else {
        kt_buf_line(b, "bf[ni][0] = kt_tf32(bp[0]); /* (k = t, n = g) */");
        kt_buf_line(b, "bf[ni][1] = kt_tf32(bp[4]); /* (k = t + 4, n = g) */");
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
    if (x3) {
        /* The tensor cores add into their fp32 accumulator by truncation, so a whole reduction
         * accumulated inside the mmas errs in proportion to K (measured on the H100 for the
         * gemm family: 7e-6 normwise at K = 1024); summing each k step apart and adding it
         * with a round-to-nearest FADD keeps the growth that of fp32. */
        kt_buf_line(b, "/* Small terms first; one pass over the tiles per term keeps MI x NI "
                       "independent mmas");
        kt_buf_line(b, " * in flight. */");
        static const char *const terms[3][2] = {
            {"a_small", "b_big"}, {"a_big", "b_small"}, {"a_big", "b_big"}};
        for (int k = 0; k < 3; k++) {
            kt_buf_line(b, "#pragma unroll");
            kt_buf_line(b, "for (int mi = 0; mi < MI; mi++)");
            kt_buf_line(b, "    #pragma unroll");
            kt_buf_line(b, "    for (int ni = 0; ni < NI; ni++)");
            kt_buf_line(b, "        kt_mma_tf32(part[mi][ni], %s[mi], %s[ni]);", terms[k][0],
                        terms[k][1]);
        }
    } else {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int mi = 0; mi < MI; mi++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int ni = 0; ni < NI; ni++)");
        kt_buf_line(b, "        kt_mma_tf32(acc[mi][ni], af[mi], bf[ni]);");
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
    if (x3) {
        kt_buf_line(b, "/* The tensor cores add into their accumulator by truncation, whose error "
                       "grows with the");
        kt_buf_line(b, " * reduction length: the mmas sum only this stage's BK columns; "
                       "round-to-nearest FADDs carry");
        kt_buf_line(b, " * them into acc. */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int mi = 0; mi < MI; mi++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int ni = 0; ni < NI; ni++)");
        kt_buf_line(b, "        #pragma unroll");
        kt_buf_line(b, "        for (int v = 0; v < 4; v++)");
        kt_buf_line(b, "            acc[mi][ni][v] += part[mi][ni][v];");
    }
    b->indent -= 4;
    kt_buf_line(b, "};");
}

static void emit_igemm(kt_buf *b, const conv_info *ci, const ig_plan *pl, const conv_names *nm)
{
    if (pl->mma)
        emit_mma_helpers(b, pl);
    else if (pl->tf32)
        emit_tf32_helpers(b, pl);
    kt_buf_line(b, "/* Implicit GEMM: block tile BM pixels x BN channels, BK-deep reduction "
                   "steps. */");
    kt_buf_line(b, "constexpr int BM = %d, BN = %d, BK = %d, THREADS = %d, STAGES = %d;", pl->bm,
                pl->bn, pl->bk, pl->threads, pl->stages);
    kt_buf_line(b, "constexpr int KTILES = (GEMM_K + BK - 1) / BK;");
    if (pl->tc) {
        kt_buf_line(b, "constexpr int WARPS_M = %d, WARPS_N = %d;          /* warp grid */",
                    pl->warps_m, pl->warps_n);
        kt_buf_line(b, "constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N; /* warp tile */");
        kt_buf_line(b, "constexpr int MI = WTM / 16, NI = WTN / 8;           /* mma tiles per "
                       "warp */");
        if (pl->mma)
            kt_buf_line(b, "constexpr int LDS = BK + 8; /* row pitch: the 16-byte pad makes "
                           "ldmatrix conflict-free */");
        else
            kt_buf_line(b, "constexpr int LDS = BK + 4; /* row pitch (floats): the pad makes "
                           "fragment reads conflict-free */");
    } else {
        kt_buf_line(b, "constexpr int TM = %d, TN = %d;          /* outputs per thread */", pl->tm,
                    pl->tn);
        kt_buf_line(b, "constexpr int LDA = BM + 1, LDB = BN + 1; /* padded k-major rows */");
    }
    if (pl->cp_async) {
        kt_buf_line(b, "constexpr int CPR = BK / %d; /* 16-byte chunks per tile row */", pl->vec);
        kt_buf_line(b, "constexpr int A_CHUNKS = BM * CPR / THREADS, B_CHUNKS = BN * CPR / "
                       "THREADS;");
    } else {
        kt_buf_line(b, "constexpr int A_PER = BM * BK / THREADS, B_PER = BN * BK / THREADS; /* "
                       "elements per thread */");
        kt_buf_line(b, "constexpr int A_ROWS = THREADS >= BM ? 1 : BM / THREADS; /* distinct "
                       "pixels among them */");
    }
    kt_buf_printf(b, "\n");
    if (!pl->cp_async && kk_table_ok(ci))
        emit_kk_table(b, ci, pl->bk);
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(THREADS, 1)");
    char entry[64];
    snprintf(entry, sizeof(entry), "ktune_conv_igemm_%s%s", math_labels[pl->math],
             nm->entry_suffix);
    emit_signature(b, entry, NULL, 0, nm);
    kt_buf_line(b, "{");
    b->indent = 4;
    kt_buf_line(b, "extern __shared__ __align__(16) unsigned char kt_smem[];");
    if (pl->mma) {
        kt_buf_line(b, "unsigned short *As = (unsigned short *)kt_smem; /* [STAGES][BM][LDS] "
                       "pixels x reduction */");
        kt_buf_line(b, "unsigned short *Bs = As + STAGES * BM * LDS;     /* [STAGES][BN][LDS] "
                       "channels x reduction */");
    } else if (pl->tf32) {
        kt_buf_line(b, "float *As = (float *)kt_smem;     /* [STAGES][BM][LDS] pixels x "
                       "reduction, raw floats */");
        kt_buf_line(b, "float *Bs = As + STAGES * BM * LDS; /* [STAGES][BN][LDS] channels x "
                       "reduction */");
    } else {
        kt_buf_line(b, "float *As = (float *)kt_smem;         /* [STAGES][BK][LDA] */");
        kt_buf_line(b, "float *Bs = As + STAGES * BK * LDA;   /* [STAGES][BK][LDB] */");
    }
    kt_buf_line(b, "const int tid = threadIdx.x;");
    kt_buf_line(b, "const int m0 = blockIdx.x * BM;  /* first output pixel of the tile */");
    kt_buf_line(b, "const int n0 = blockIdx.y * BN;  /* first output channel within the group */");
    kt_buf_line(b, "const int grp = blockIdx.z;      /* conv group */");
    if (pl->cp_async) {
        emit_row_setup(b, ci, "A_CHUNKS", "(tid + i * THREADS) / CPR");
        emit_cp_async_loader(b, ci, pl);
    } else {
        emit_row_setup(b, ci, "A_ROWS", "(tid + i * THREADS) % BM");
        emit_plain_loader(b, ci, pl);
    }
    if (pl->mma)
        emit_compute_mma(b);
    else if (pl->tf32)
        emit_compute_tf32(b, pl);
    else
        emit_compute_ffma(b, ci);
    kt_buf_printf(b, "\n");
    if (pl->cp_async) {
        kt_buf_line(b, "/* Multi-stage pipeline: STAGES - 1 tiles in flight while one is "
                       "multiplied. */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int st = 0; st < STAGES - 1; st++) {");
        kt_buf_line(b, "    if (st < KTILES)");
        kt_buf_line(b, "        load_tile(st, st);");
        kt_buf_line(b, "    kt_cp_async_commit();");
        kt_buf_line(b, "}");
        kt_buf_line(b, "for (int kt = 0; kt < KTILES; kt++) {");
        kt_buf_line(b, "    kt_cp_async_wait<STAGES - 2>(); /* tile kt has landed */");
        kt_buf_line(b, "    __syncthreads();                /* ... for every thread; stage "
                       "(kt - 1) is free */");
        kt_buf_line(b, "    if (kt + STAGES - 1 < KTILES)");
        kt_buf_line(b, "        load_tile(kt + STAGES - 1, (kt + STAGES - 1) %% STAGES);");
        kt_buf_line(b, "    kt_cp_async_commit();");
        kt_buf_line(b, "    compute_tile(kt %% STAGES);");
        kt_buf_line(b, "}");
        kt_buf_line(b, "kt_cp_async_wait<0>();");
    } else if (pl->stages == 2) {
        kt_buf_line(b, "/* Double buffer: tile kt + 1 is loaded into registers while tile kt is "
                       "multiplied. */");
        kt_buf_line(b, "load_tile(0);");
        kt_buf_line(b, "store_tile(0);");
        kt_buf_line(b, "__syncthreads();");
        kt_buf_line(b, "for (int kt = 0; kt < KTILES; kt++) {");
        kt_buf_line(b, "    if (kt + 1 < KTILES)");
        kt_buf_line(b, "        load_tile(kt + 1);");
        kt_buf_line(b, "    compute_tile(kt %% 2);");
        kt_buf_line(b, "    if (kt + 1 < KTILES)");
        kt_buf_line(b, "        store_tile((kt + 1) %% 2);");
        kt_buf_line(b, "    __syncthreads();");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "for (int kt = 0; kt < KTILES; kt++) {");
        kt_buf_line(b, "    load_tile(kt);");
        kt_buf_line(b, "    store_tile(0);");
        kt_buf_line(b, "    __syncthreads();");
        kt_buf_line(b, "    compute_tile(0);");
        kt_buf_line(b, "    __syncthreads();");
        kt_buf_line(b, "}");
    }
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Epilogue: each accumulator is one output element (masked at the edges). */");
    if (pl->tc) {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int mi = 0; mi < MI; mi++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int ni = 0; ni < NI; ni++)");
        kt_buf_line(b, "        #pragma unroll");
        kt_buf_line(b, "        for (int v = 0; v < 4; v++) {");
        kt_buf_line(b, "            const int m = m0 + wm0 + mi * 16 + lane / 4 + (v / 2) * 8;");
        kt_buf_line(b, "            const int col = n0 + wn0 + ni * 8 + (lane %% 4) * 2 + v %% 2;");
        kt_buf_line(b, "            if (m < GEMM_M && col < GEMM_N)");
        kt_buf_line(b, "                kt_conv_store(acc[mi][ni][v], m / (Q * P), grp * KG + "
                       "col, (m / Q) %% P, m %% Q,");
        kt_buf_line(b, "                              %s);", nm->call);
        kt_buf_line(b, "        }");
    } else {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < TM; i++) {");
        kt_buf_line(b, "    const int m = m0 + row0 + i * (BM / TM);");
        kt_buf_line(b, "    if (m >= GEMM_M)");
        kt_buf_line(b, "        continue;");
        kt_buf_line(b, "    const int q = m %% Q, p = (m / Q) %% P, n = m / (Q * P);");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < TN; j++) {");
        kt_buf_line(b, "        const int col = n0 + col0 + j * (BN / TN);");
        kt_buf_line(b, "        if (col < GEMM_N)");
        kt_buf_line(b, "            kt_conv_store(acc[i][j], n, grp * KG + col, p, q, %s);",
                    nm->call);
        kt_buf_line(b, "    }");
        kt_buf_line(b, "}");
    }
    b->indent = 0;
    kt_buf_line(b, "}");
}

/* ---- emission: tiled ---- */

static void emit_tiled(kt_buf *b, const tiled_plan *pl, const conv_names *nm)
{
    char vt[32];
    ops_emit_vec_type_name(OPS_DT_F32, 4, vt, sizeof(vt));
    ops_emit_vec_types(b, OPS_VEC_BIT(OPS_DT_F32, 4));
    kt_buf_line(b, "/* ---- async-copy primitives (inline PTX) ---- */");
    kt_buf_line(b, "__device__ __forceinline__ unsigned kt_smem_addr(const void *p)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    return (unsigned)__cvta_generic_to_shared(p);");
    kt_buf_line(b, "}");
    emit_cp_async_helpers(b);
    kt_buf_line(b, "/* 4-byte global -> shared copy to shared address dst; ok == false writes a "
                   "zero (padding). */");
    kt_buf_line(b, "__device__ __forceinline__ void kt_cp_async4(unsigned dst, const void *src, "
                   "bool ok)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    asm volatile(\"cp.async.ca.shared.global [%%0], [%%1], 4, %%2;\\n\"");
    kt_buf_line(b, "                 :");
    kt_buf_line(b, "                 : \"r\"(dst), \"l\"(src), \"r\"(ok ? 4 : 0)");
    kt_buf_line(b, "                 : \"memory\");");
    kt_buf_line(b, "}");
    kt_buf_line(b, "/* 4-byte global -> shared copy, no zero fill. */");
    kt_buf_line(b, "__device__ __forceinline__ void kt_cp_async4_all(unsigned dst, const void *src)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    asm volatile(\"cp.async.ca.shared.global [%%0], [%%1], 4;\\n\" : : "
                   "\"r\"(dst), \"l\"(src) : \"memory\");");
    kt_buf_line(b, "}");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Tiled direct convolution: a block computes BN output channels of an OH x OW "
                   "output tile of");
    kt_buf_line(b, " * one image; a thread TK channels x TQ adjacent columns of one tile row. "
                   "Input channels are");
    kt_buf_line(b, " * staged one at a time: the input patch under the tile (zeros outside the "
                   "image) and the");
    kt_buf_line(b, " * filter slice [R * S][BNP] of that channel. */");
    kt_buf_line(b, "constexpr int BM = %d, BN = %d, TK = %d, TQ = %d, THREADS = %d, NW = THREADS "
                   "/ 32;",
                pl->bm, pl->bn, pl->tk, pl->tq, pl->threads);
    kt_buf_line(b, "constexpr int STAGES = %d, MIN_BLOCKS = %d;", pl->stages, pl->min_blocks);
    kt_buf_line(b, "constexpr int OH = %d, OW = %d;              /* output tile: OH * OW == BM */",
                pl->oh, pl->ow);
    kt_buf_line(b, "constexpr int CGN = OW / TQ, PT = OH * CGN; /* column groups, threads per "
                   "channel group */");
    kt_buf_line(b, "constexpr int TILES_P = (P + OH - 1) / OH, TILES_Q = (Q + OW - 1) / OW;");
    kt_buf_line(b, "constexpr int KBLOCKS = (K + BN - 1) / BN;");
    kt_buf_line(b, "/* The input patch: IH x IW, stored phase-split by the stride in both "
                   "directions: row y at");
    kt_buf_line(b, " * stored row (y %% STR_H) * RIDX + y / STR_H, column x at word (x %% STR_W) "
                   "* PL + x / STR_W. */");
    kt_buf_line(b, "constexpr int IH = (OH - 1) * STR_H + R, IW = (OW - 1) * STR_W + S;");
    kt_buf_line(b,
                "constexpr int RIDX = (IH + STR_H - 1) / STR_H; /* stored rows per row phase */");
    kt_buf_line(b, "constexpr int PL = %d;  /* words per column phase (what the windows reach) */",
                pl->pl);
    kt_buf_line(b,
                "constexpr int RP = %d; /* row pitch: STR_W * PL, padded against bank "
                "conflicts */",
                pl->rp);
    kt_buf_line(b,
                "constexpr int BNP = %d; /* filter row pitch: BN rounded to 16 bytes, off 32 "
                "banks */",
                pl->bnp);
    kt_buf_line(b, "constexpr int XS = STR_H * RIDX * RP, WS = R * S * BNP, STAGE = XS + WS; /* "
                   "words */");
    kt_buf_line(b, "constexpr int WV = (TQ + (S - 1) / STR_W + 3) / 4; /* 16-byte loads of the "
                   "widest window */");
    kt_buf_line(b, "constexpr int MS = (S + STR_W - 1) / STR_W;        /* filter columns per "
                   "phase, at most */");
    kt_buf_line(b, "/* The copies of a channel: a warp takes patch rows y = warp + NW * t (t < XT) "
                   "and filter");
    kt_buf_line(b, " * channels j = warp + NW * t (t < FT), its lanes patch columns x = lane + 32 "
                   "* i (i < XI) and");
    kt_buf_line(b, " * filter taps rs = lane + 32 * i (i < FI): reads coalesce, and every offset "
                   "but the channel's");
    kt_buf_line(b, " * and the thread's is a constant. Words the windows reach past IW are never "
                   "multiplied:");
    kt_buf_line(b, " * not copied. */");
    kt_buf_line(b, "constexpr int XT = (IH + NW - 1) / NW, XI = (IW + 31) / 32;");
    kt_buf_line(b, "constexpr int FT = (BN + NW - 1) / NW, FI = (R * S + 31) / 32;");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)");
    char entry[64];
    snprintf(entry, sizeof(entry), "ktune_conv_tiled%s", nm->entry_suffix);
    emit_signature(b, entry, NULL, 0, nm);
    kt_buf_line(b, "{");
    b->indent = 4;
    kt_buf_line(b, "extern __shared__ __align__(16) float kt_smem[]; /* [STAGES][STAGE], then "
                   "the output tile */");
    kt_buf_line(b, "const int tid = threadIdx.x, warp = tid / 32, lane = tid %% 32;");
    kt_buf_line(b, "/* Channel blocks of one tile are neighbours in launch order: they read the "
                   "same patch. */");
    kt_buf_line(b, "const int kb = blockIdx.x %% KBLOCKS, tile = blockIdx.x / KBLOCKS;");
    kt_buf_line(b, "const int n = blockIdx.y;");
    kt_buf_line(b, "const int k0 = kb * BN, p0 = (tile / TILES_Q) * OH, q0 = (tile %% TILES_Q) * "
                   "OW;");
    kt_buf_line(b, "const int h0 = p0 * STR_H - PAD_H, w0 = q0 * STR_W - PAD_W; /* patch origin "
                   "*/");
    kt_buf_line(b, "const float *xn = x + (idx_t)n * C * H * W;");
    kt_buf_line(b, "const unsigned smem0 = kt_smem_addr(kt_smem);");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Filter channel j = warp + NW * t is copied while NW * t < jn (inside BN and "
                   "K). */");
    kt_buf_line(b, "const int jn = (K - k0 < BN ? K - k0 : BN) - warp;");
    kt_buf_line(b, "const bool tap_last = lane < R * S - 32 * (FI - 1);");
    kt_buf_line(b, "const float *wt = w + (idx_t)(k0 + warp) * GEMM_K + lane;");
    kt_buf_line(b, "const unsigned wd = smem0 + 4 * (XS + lane * BNP + warp);");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Issues the copies of input channel c into stage `stage`. */");
    kt_buf_line(b, "auto load_chunk = [&](int c, int stage) {");
    b->indent = 8;
    kt_buf_line(b, "const unsigned so = 4 * stage * STAGE;");
    kt_buf_line(b, "const float *xc = xn + (idx_t)c * H * W;");
    kt_buf_line(b, "/* Patch column x = lane + 32 * i: its stored word and whether it lies in "
                   "the image (else");
    kt_buf_line(b, " * zero-filled: a copy of 0 bytes reads nothing). Recomputed per channel: the "
                   "lane id comes");
    kt_buf_line(b, " * from a volatile read, so none of this is hoisted to hold registers during "
                   "the multiplies. */");
    kt_buf_line(b, "unsigned ln;");
    kt_buf_line(b, "asm volatile(\"mov.u32 %%0, %%%%laneid;\" : \"=r\"(ln));");
    kt_buf_line(b, "unsigned xdst[XI];");
    kt_buf_line(b, "bool xin[XI];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < XI; i++) {");
    kt_buf_line(b, "    const unsigned xx = ln + 32 * i;");
    kt_buf_line(b, "    /* With STR_W dividing 32 the offsets of i > 0 are constants. */");
    kt_buf_line(b, "    xdst[i] = smem0 + so +");
    kt_buf_line(b, "              4 * (32 %% STR_W == 0 ? (ln %% STR_W) * PL + ln / STR_W + 32 * i / STR_W");
    kt_buf_line(b, "                                   : (xx %% STR_W) * PL + xx / STR_W);");
    kt_buf_line(b, "    xin[i] = (unsigned)(w0 + (int)xx) < (unsigned)W;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "const bool x_last = (int)ln < IW - 32 * (XI - 1); /* the last column group "
                   "is partial */");
    kt_buf_line(b, "#pragma unroll %s", pl->xt * pl->xi <= 64 ? "" : "1");
    kt_buf_line(b, "for (int t = 0; t < XT; t++) {");
    kt_buf_line(b, "    const int y = warp + NW * t;");
    kt_buf_line(b, "    if (t < XT - 1 || IH %% NW == 0 || y < IH) {");
    kt_buf_line(b, "        const int h = h0 + y;");
    kt_buf_line(b, "        const bool in = (unsigned)h < (unsigned)H;");
    kt_buf_line(b, "        const float *xr = xc + ((idx_t)h * W + w0 + (int)ln);");
    kt_buf_line(b, "        const unsigned d = 4 * RP * ((y %% STR_H) * RIDX + y / STR_H);");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int i = 0; i < XI; i++)");
    kt_buf_line(b, "            if (i < XI - 1 || x_last)");
    kt_buf_line(b, "                kt_cp_async4(xdst[i] + d, xr + 32 * i, in && xin[i]);");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    kt_buf_line(b, "const float *wc = wt + c * R * S;");
    kt_buf_line(b, "#pragma unroll %s", pl->ft * pl->fi <= 128 ? "" : "1");
    kt_buf_line(b, "for (int t = 0; t < FT; t++)");
    kt_buf_line(b, "    if ((NW * (t + 1) <= BN && K %% BN == 0) || NW * t < jn) {");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int i = 0; i < FI; i++)");
    kt_buf_line(b, "            if (i < FI - 1 || tap_last)");
    kt_buf_line(b, "                kt_cp_async4_all(wd + so + 4 * (32 * i * BNP + NW * t),");
    kt_buf_line(b, "                                 wc + NW * t * GEMM_K + 32 * i);");
    kt_buf_line(b, "    }");
    b->indent = 4;
    kt_buf_line(b, "};");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Thread tile: channels k0 + kg * TK + j, row p0 + pr, columns q0 + cg * TQ + "
                   "i. The lanes of");
    kt_buf_line(b, " * a warp differ in pixels (window loads spread over banks) and mostly share "
                   "kg (filter");
    kt_buf_line(b, " * loads broadcast). */");
    kt_buf_line(b, "const int kg = tid / PT, pt = tid %% PT, pr = pt / CGN, cg = pt %% CGN;");
    kt_buf_line(b, "float acc[TK][TQ] = {};");
    kt_buf_line(b, "auto compute_chunk = [&](int stage) {");
    b->indent = 8;
    kt_buf_line(b, "const float *xs = kt_smem + stage * STAGE + pr * RP + cg * TQ;");
    kt_buf_line(b, "const float *ws = kt_smem + stage * STAGE + XS + kg * TK;");
    kt_buf_line(b, "#pragma unroll 1");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    b->indent = 12;
    kt_buf_line(b, "/* Input row pr * STR_H + r of the patch, filter row r. */");
    kt_buf_line(b, "const float *xr = xs + ((r %% STR_H) * RIDX + r / STR_H) * RP;");
    kt_buf_line(b, "const float *wr = ws + r * S * BNP;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ph = 0; ph < STR_W && ph < S; ph++) {");
    b->indent = 16;
    kt_buf_line(b, "/* Filter columns s = ph + m * STR_W read words m .. m + TQ - 1 of this "
                   "window. */");
    kt_buf_line(b, "float xv[4 * WV];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int v = 0; v < WV; v++)");
    kt_buf_line(b, "    if (4 * v < TQ + (S - 1 - ph) / STR_W) {");
    kt_buf_line(b, "        const %s t = *(const %s *)(xr + ph * PL + 4 * v);", vt, vt);
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int u = 0; u < 4; u++)");
    kt_buf_line(b, "            xv[4 * v + u] = t.v[u];");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int m = 0; m < MS; m++) {");
    b->indent = 20;
    kt_buf_line(b, "const int s = ph + m * STR_W;");
    kt_buf_line(b, "if (s >= S)");
    kt_buf_line(b, "    break;");
    kt_buf_line(b, "float wv[TK]; /* filter (r, s) of the thread's channels: a broadcast */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < TK; j += 4) {");
    kt_buf_line(b, "    const %s t = *(const %s *)(wr + s * BNP + j);", vt, vt);
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int u = 0; u < 4; u++)");
    kt_buf_line(b, "        wv[j + u] = t.v[u];");
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < TK; j++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < TQ; i++)");
    kt_buf_line(b, "        acc[j][i] = fmaf(xv[i + m], wv[j], acc[j][i]);");
    b->indent = 16;
    kt_buf_line(b, "}");
    b->indent = 12;
    kt_buf_line(b, "}");
    b->indent = 8;
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "};");
    kt_buf_printf(b, "\n");
    if (pl->stages == 1) {
        kt_buf_line(b, "for (int c = 0; c < C; c++) {");
        kt_buf_line(b, "    load_chunk(c, 0);");
        kt_buf_line(b, "    kt_cp_async_commit();");
        kt_buf_line(b, "    kt_cp_async_wait<0>();");
        kt_buf_line(b, "    __syncthreads();");
        kt_buf_line(b, "    compute_chunk(0);");
        kt_buf_line(b, "    __syncthreads(); /* the stage is free (and, after the last, the "
                       "output tile) */");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "/* STAGES - 1 channels in flight while one is computed. */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int st = 0; st < STAGES - 1; st++) {");
        kt_buf_line(b, "    if (st < C)");
        kt_buf_line(b, "        load_chunk(st, st);");
        kt_buf_line(b, "    kt_cp_async_commit();");
        kt_buf_line(b, "}");
        kt_buf_line(b, "#pragma unroll 1");
        kt_buf_line(b, "for (int c = 0; c < C; c++) {");
        kt_buf_line(b, "    kt_cp_async_wait<STAGES - 2>(); /* channel c has landed */");
        kt_buf_line(b, "    __syncthreads();                /* ... for every thread; stage (c - 1) "
                       "is free */");
        kt_buf_line(b, "    if (c + STAGES - 1 < C)");
        kt_buf_line(b, "        load_chunk(c + STAGES - 1, (c + STAGES - 1) %% STAGES);");
        kt_buf_line(b, "    kt_cp_async_commit();");
        kt_buf_line(b, "    compute_chunk(c %% STAGES);");
        kt_buf_line(b, "}");
        kt_buf_line(b, "kt_cp_async_wait<0>();");
        kt_buf_line(b, "__syncthreads(); /* every stage is free: the output tile reuses them */");
    }
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Epilogue: the tile goes through shared memory ([BN][OH][OW]) so that "
                   "consecutive threads");
    kt_buf_line(b, " * store consecutive columns of a row (masked at the edges). */");
    kt_buf_line(b, "float *os = kt_smem;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < TK; j++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < TQ; i += 4) {");
    kt_buf_line(b, "        %s t;", vt);
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int u = 0; u < 4; u++)");
    kt_buf_line(b, "            t.v[u] = acc[j][i + u];");
    kt_buf_line(b, "        *(%s *)(os + (kg * TK + j) * BM + pr * OW + cg * TQ + i) = t;", vt);
    kt_buf_line(b, "    }");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "/* Element e = tid + THREADS * u of the tile (TK * TQ per thread): channel "
                   "e / BM, pixel");
    kt_buf_line(b, " * e %% BM, the same pixel for every u when THREADS is a multiple of BM. */");
    kt_buf_line(b, "if constexpr (THREADS %% BM == 0) {");
    kt_buf_line(b, "    const int pix = tid %% BM, p = p0 + pix / OW, q = q0 + pix %% OW;");
    kt_buf_line(b, "    if (p < P && q < Q) {");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int u = 0; u < TK * TQ; u++) {");
    kt_buf_line(b, "            const int j = tid / BM + u * (THREADS / BM);");
    kt_buf_line(b, "            if (K %% BN == 0 || k0 + j < K)");
    kt_buf_line(b, "                kt_conv_store(os[j * BM + pix], n, k0 + j, p, q, %s);",
                nm->call);
    kt_buf_line(b, "        }");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "} else {");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int u = 0; u < TK * TQ; u++) {");
    kt_buf_line(b, "        const int e = tid + THREADS * u, j = e / BM, pix = e %% BM;");
    kt_buf_line(b, "        const int p = p0 + pix / OW, q = q0 + pix %% OW;");
    kt_buf_line(b, "        if ((K %% BN == 0 || k0 + j < K) && p < P && q < Q)");
    kt_buf_line(b, "            kt_conv_store(os[e], n, k0 + j, p, q, %s);", nm->call);
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_line(b, "}");
}

static int conv_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                     ops_emitted *out, ops_diag *d)
{
    conv_info ci;
    memset(out, 0, sizeof(*out));
    if (!conv_analyse(grp, &ci))
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "conv: the group is not one conv2d with an elementwise epilogue");
    const char *why = conv_prune(grp, s, dev);
    if (why) {
        char sched[256];
        ops_schedule_format(s, sched, sizeof(sched));
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "conv: schedule '%s' is pruned for this group (%s)", sched, why);
    }
    conv_names nm;
    conv_names_make(grp, &ci, &nm);
    kt_buf b = {0};
    ops_emit_header(&b, grp, s);
    ops_emit_shared_prelude(&b, out);
    kt_buf_printf(&b, "\n");
    emit_constants(&b, &ci);
    int rc = emit_store_fn(&b, grp, &ci, &nm);
    if (rc < 0) {
        kt_buf_free(&b);
        return rc == -ENOMEM ? rc
                             : ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                                            "conv: cannot emit the epilogue");
    }
    ops_kernel_launch *l = &out->kernels[0];
    if (s->v[K_ALGO] == ALGO_TILED) {
        tiled_plan pl;
        tiled_plan_make(&ci, s, dev, &pl);
        emit_tiled(&b, &pl, &nm);
        snprintf(l->entry, sizeof(l->entry), "ktune_conv_tiled%s", grp->entry_suffix);
        l->grid[0] = (uint32_t)(pl.kblocks * pl.tiles_p * pl.tiles_q);
        l->grid[1] = (uint32_t)ci.n;
        l->grid[2] = 1;
        l->block[0] = (uint32_t)pl.threads;
        l->smem_bytes = (uint32_t)pl.smem;
    } else if (s->v[K_ALGO] == ALGO_DIRECT) {
        direct_plan pl;
        direct_plan_make(&ci, s, dev, &pl);
        emit_direct(&b, &ci, &pl, &nm);
        snprintf(l->entry, sizeof(l->entry), "ktune_conv_direct%s", grp->entry_suffix);
        l->grid[0] = (uint32_t)div_up(pl.spatial, pl.threads);
        l->grid[1] = (uint32_t)div_up(ci.k, pl.tk);
        l->grid[2] = 1;
        l->block[0] = (uint32_t)pl.threads;
        l->smem_bytes = (uint32_t)pl.smem;
    } else {
        ig_plan pl;
        ig_plan_make(grp, &ci, s, dev, &pl);
        emit_igemm(&b, &ci, &pl, &nm);
        snprintf(l->entry, sizeof(l->entry), "ktune_conv_igemm_%s%s", math_labels[pl.math],
                 grp->entry_suffix);
        l->grid[0] = (uint32_t)div_up(ci.gm, pl.bm);
        l->grid[1] = (uint32_t)div_up(ci.kg, pl.bn);
        l->grid[2] = (uint32_t)ci.groups;
        l->block[0] = (uint32_t)pl.threads;
        l->smem_bytes = (uint32_t)pl.smem;
    }
    l->block[1] = l->block[2] = 1;
    for (int i = 0; i < grp->n_in; i++)
        l->args[l->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->in[i]};
    l->args[l->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = ci.y};
    if (kt_buf_status(&b) < 0) {
        kt_buf_free(&b);
        return -ENOMEM;
    }
    out->source = kt_buf_take(&b);
    out->n_kernels = 1;
    out->workspace_bytes = 0;
    return 0;
}

/* ---- cost model ---- */

/* Resident blocks per SM and the efficiency that wave quantisation and occupancy leave. ilp
 * (>= 1): independent long-latency operations each warp keeps in flight, which hide latency as
 * extra warps would (1 for FFMA code, whose per-thread tiles the formula was fitted to). */
static double launch_efficiency(const ops_device *dev, int64_t blocks, int threads, int regs,
                                int smem, double ilp, double *occupancy)
{
    int warps = threads / 32;
    int bps = dev->max_blocks_per_sm;
    int by_threads = dev->max_threads_per_sm / threads;
    int regs_rounded = (regs + 7) / 8 * 8;
    int by_regs = dev->regs_per_sm / (regs_rounded * threads);
    int by_smem = smem > 0 ? dev->smem_per_sm / (smem + 1024) : bps;
    if (by_threads < bps)
        bps = by_threads;
    if (by_regs < bps)
        bps = by_regs;
    if (by_smem < bps)
        bps = by_smem;
    if (bps < 1)
        bps = 1;
    int64_t full = (int64_t)dev->sm_count * bps;
    double wave, resident;
    if (blocks >= full) {
        int64_t waves = (blocks + full - 1) / full;
        wave = (double)blocks / (double)(waves * full);
        resident = bps;
    } else {
        /* Fewer blocks than slots: SMs left idle, and fewer warps on the busy ones. */
        wave = blocks >= dev->sm_count ? 1.0 : (double)blocks / dev->sm_count;
        resident = ceil((double)blocks / dev->sm_count);
    }
    double occ = resident * warps / (dev->max_threads_per_sm / 32.0);
    if (occ > 1.0)
        occ = 1.0;
    *occupancy = occ;
    /* Latency hiding saturates around half occupancy. */
    double hiding = occ * ilp;
    double occ_eff = hiding >= 0.5 ? 1.0 : 0.4 + 1.2 * hiding;
    return wave * occ_eff;
}

/* Core-loop time of the tf32 paths over `tiles` (block, k tile) steps: the tensor cores (tf32
 * peak; a third of it for tf32x3, which runs three mmas per product) against the issue slots
 * the warps also need. Per k tile they gather the im2col tile (about 16 instructions per
 * element: index split, bounds, load, shared store; a 16-byte cp.async moves 4 elements) and
 * the filter tile (about 8), and per 8-deep step read their fragments (a shared load and a
 * conversion per register; tf32x3 a load and the three-instruction split) and issue the mmas
 * (tf32x3 then adds each stage's partial sums into the accumulators);
 * the k tile's barrier drains the warps' pipelines (about 64 clocks of the four schedulers).
 * Issue runs at one warp instruction per scheduler and clock, the FFMA rate (fp32 peak / 64
 * warp instructions per second). The two overlap, imperfectly. eff: the useful fraction of the
 * padded tiles times the loop fill. */
static double tf32_core_time(const ig_plan *pl, const conv_info *ci, const ops_device *dev,
                             double tiles, double flops, double eff)
{
    bool x3 = pl->math == MATH_TF32X3;
    double peak = x3 ? dev->tf32_flops_per_s / 3.0 : dev->tf32_flops_per_s;
    double t_tensor = flops / (peak * 0.85 * eff);
    double warps = pl->threads / 32.0, steps = pl->bk / 8.0;
    double per_step =
        (pl->mi * 4 + pl->ni * 2) * (x3 ? 4.0 : 2.0) + (double)(pl->mi * pl->ni) * (x3 ? 3 : 1);
    /* The plain gather of a large filter (more than 16 taps) costs about four times the usual
     * 16 instructions an element (fitted to AlexNet's 11x11 stride-4 layer only: estimated 441
     * us against at least 711 measured; smaller filters keep 16 for want of measurements). */
    double gather = !pl->cp_async && ci->r * ci->s > 16 ? 64.0 : 16.0;
    double per_tile = ((double)pl->bm * gather + (double)pl->bn * 8) * pl->bk / 32.0;
    if (pl->cp_async)
        per_tile /= 8.0;
    per_tile += warps * steps * per_step + 256.0;
    if (x3)
        per_tile += warps * pl->mi * pl->ni * 4; /* the stage's sum carried into acc by FADDs */
    double t_issue = tiles * per_tile / (dev->fp32_flops_per_s / 64.0);
    double hi = t_tensor > t_issue ? t_tensor : t_issue, lo = t_tensor + t_issue - hi;
    return hi + 0.25 * lo;
}

static void conv_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                          ops_estimate *e)
{
    memset(e, 0, sizeof(*e));
    conv_info ci;
    if (!conv_analyse(grp, &ci)) {
        e->seconds = INFINITY;
        return;
    }
    const ops_graph *g = grp->g;
    int64_t out_numel = ci.gm * ci.k;
    double bytes = 0;
    for (int i = 0; i < grp->n_in; i++) {
        const ops_tensor *t = &g->tensors[grp->in[i]];
        bytes += (double)ops_shape_numel(&t->shape) * (double)ops_dtype_size(t->dtype);
    }
    bytes += (double)out_numel * (double)ops_dtype_size(g->tensors[ci.y].dtype);
    double x_bytes =
        (double)ops_shape_numel(&g->tensors[ci.x].shape) * (double)ops_dtype_size(ci.dt);
    double flops = 2.0 * (double)out_numel * (double)ci.gk + (double)out_numel * ci.epilogue_nodes;
    double peak = dev->fp32_flops_per_s, compute_eff, launch_eff, occ;
    double t_compute = -1; /* set by paths that model their core loop themselves */
    if (s->v[K_ALGO] == ALGO_TILED) {
        tiled_plan pl;
        if (tiled_plan_make(&ci, s, dev, &pl)) {
            e->seconds = INFINITY;
            return;
        }
        /* Channel blocks of a tile re-read its patch, mostly from L2 (they run side by side). */
        bytes += x_bytes * 0.05 * (double)(pl.kblocks - 1);
        /* Issue slots per thread and filter row: the FFMAs against the 16-byte window and filter
         * loads feeding them, the bank-conflict replays of the window loads, and the loop
         * (counted in ptxas 13.0's SASS: 8x4 tiles 393 per 352 FFMAs, 8x8 749 per 704). */
        double fma = (double)pl.tk * pl.tq * (double)ci.s;
        double loads = (double)ci.s * pl.tk / 4.0;
        for (int ph = 0; ph < ci.sw && ph < ci.s; ph++)
            loads += div_up(pl.tq + (ci.s - 1 - ph) / ci.sw, 4);
        loads += (double)pl.conflicts / (pl.threads / 8.0) * (double)(ci.sw < ci.s ? ci.sw : ci.s);
        double per_row = fma + loads + 11.0;
        /* Per input channel: the copies (a patch row costs its address and bounds, then two
         * instructions a copy; a filter channel row a 64-bit base, then one or two a copy), the
         * per-channel bookkeeping and the barrier; per block: setup and the staged epilogue. */
        double per_chunk = (double)ci.r * per_row + (double)pl.xt * (6.0 + 2.0 * pl.xi) +
                           (double)pl.ft * (2.0 + 1.5 * pl.fi) + 40.0;
        double per_block = (double)ci.c * per_chunk +
                           (double)pl.tk * pl.tq * (4.0 + 2.0 * ci.epilogue_nodes) + 150.0;
        double useful = (double)ci.c * ci.r * fma;
        /* Work done on the padded tile. */
        double tile_eff = (double)(ci.p * ci.q) /
                          (double)(pl.tiles_p * pl.oh * pl.tiles_q * pl.ow) * (double)ci.k /
                          (double)(pl.kblocks * pl.bn);
        compute_eff = useful / per_block * tile_eff;
        /* Latency hiding: the TK x TQ independent accumulators stand in for warps. */
        double ilp = pl.tk * pl.tq / 16.0;
        launch_eff = launch_efficiency(dev, pl.kblocks * pl.tiles_p * pl.tiles_q * ci.n, pl.threads,
                                       pl.regs, pl.smem, ilp, &occ);
        /* One stage: a block waits for each channel's copies, which other resident blocks
         * cover only in part; deeper pipelines wait for the first channel only. */
        int bps = (int)(occ * dev->max_threads_per_sm / pl.threads + 0.5);
        double wait = pl.stages == 1 ? (bps >= 2 ? 0.9 : 0.75) : 1.0 - 0.1 / ci.c;
        launch_eff *= wait;
    } else if (s->v[K_ALGO] == ALGO_DIRECT) {
        direct_plan pl;
        if (direct_plan_make(&ci, s, dev, &pl)) {
            e->seconds = INFINITY;
            return;
        }
        int64_t kblocks = div_up(ci.k, pl.tk);
        /* Each channel block re-reads the input, mostly from L2. */
        bytes += x_bytes * 0.05 * (double)(kblocks - 1);
        /* FMAs per filter row against the loads feeding them (input window and weights). */
        double fma = (double)pl.tk * pl.tq * (double)ci.s;
        double loads = (double)pl.win + (double)pl.tk * (double)ci.s;
        compute_eff = 0.9 * fma / (fma + loads);
        launch_eff = launch_efficiency(dev, (int64_t)div_up(pl.spatial, pl.threads) * kblocks,
                                       pl.threads, pl.regs, pl.smem, 1.0, &occ);
    } else {
        ig_plan pl;
        if (ig_plan_make(grp, &ci, s, dev, &pl)) {
            e->seconds = INFINITY;
            return;
        }
        int64_t mt = div_up(ci.gm, pl.bm), nt = div_up(ci.kg, pl.bn), kt = div_up(ci.gk, pl.bk);
        bytes += x_bytes * 0.1 * (double)(nt - 1);
        /* Work done on the padded tiles. */
        double tile_eff = (double)ci.gm / (double)(mt * pl.bm) * (double)ci.kg /
                          (double)(nt * pl.bn) * (double)ci.gk / (double)(kt * pl.bk);
        /* A short reduction loop is dominated by the pipeline fill and the epilogue. */
        double loop_eff = (double)kt / (double)(kt + 2);
        static const double pipe[] = {0, 0.6, 0.8, 0.95, 1.0};
        double inner = 1.0, ilp = 1.0;
        if (pl.mma) {
            peak = dev->f16_flops_per_s;
            inner = (double)(pl.mi * pl.ni) / (double)(pl.mi + pl.ni) / 2.0;
            if (!pl.cp_async)
                inner *= 0.6; /* element-wise gathers cannot keep tensor cores fed */
        } else if (pl.tf32) {
            t_compute = tf32_core_time(&pl, &ci, dev, (double)(mt * nt * ci.groups) * (double)kt, flops,
                                       tile_eff * loop_eff);
            /* The MI x NI accumulator tiles of a warp are independent mmas in flight. */
            ilp = pl.mi * pl.ni < 4 ? pl.mi * pl.ni : 4;
        } else {
            inner = (double)(pl.tm * pl.tn) / (double)(pl.tm + pl.tn) / 4.0;
        }
        if (inner > 1.0)
            inner = 1.0;
        compute_eff = 0.85 * inner * pipe[pl.stages] * loop_eff * tile_eff;
        launch_eff =
            launch_efficiency(dev, mt * nt * ci.groups, pl.threads, pl.regs, pl.smem, ilp, &occ);
        /* The load pipeline hides memory latency the same way it hides compute. */
        launch_eff *= pipe[pl.stages] * loop_eff;
    }
    double t_mem = bytes / dev->dram_bytes_per_s;
    if (t_compute < 0)
        t_compute = flops / (peak * compute_eff);
    e->flops = flops;
    e->bytes = bytes;
    e->occupancy = occ;
    e->seconds = (t_mem > t_compute ? t_mem : t_compute) / launch_eff + 2e-6;
}

const ops_family ops_family_conv = {
    .id = OPS_FAM_CONV,
    .name = "conv",
    .n_knobs = N_KNOBS,
    .knobs = conv_knobs,
    .matches = conv_matches,
    .prune = conv_prune,
    .emit = conv_emit,
    .estimate = conv_estimate,
};
