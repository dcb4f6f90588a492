/* conv family: the knobs, the group (conv_analyse), each algorithm's plan and the pruning
 * (conv_prune) (ops/conv/conv.h lists the files). */
#include "conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const algo_labels[] = {"implicit_gemm", "direct", "tiled", "depthwise"};
const char *const conv_math_labels[] = {"ffma", "mma", "tf32", "tf32x3"};
static const char *const filter_labels[] = {"shared", "registers"};

const ops_knob conv_knobs[N_KNOBS] = {
    [K_ALGO] = {"algo", 4, {ALGO_IGEMM, ALGO_DIRECT, ALGO_TILED, ALGO_DEPTHWISE}, algo_labels},
    [K_MATH] = {"math", 4, {MATH_FFMA, MATH_MMA, MATH_TF32, MATH_TF32X3}, conv_math_labels},
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

/* Fills ci when the group is one conv (2-d or 3-d) plus an elementwise epilogue; false
 * otherwise. */
bool conv_analyse(const ops_group *grp, conv_info *ci)
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
        if (ops_op_info_get(n->op)->kind == OPS_KIND_CONV) {
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
    int rank = ops_conv_spatial(cn->op) + 2;
    if (xt->shape.rank != rank || wt->shape.rank != rank || os->rank != rank)
        return false;
    if (!ops_shape_same_sizes(&g->tensors[ci->y].shape, os))
        return false;
    ci->dt = xt->dtype;
    if (ci->dt != OPS_DT_F32 && ci->dt != OPS_DT_F16 && ci->dt != OPS_DT_BF16)
        return false;
    if (wt->dtype != ci->dt || (ci->bias >= 0 && g->tensors[ci->bias].dtype != ci->dt))
        return false;
    for (int i = 0; i < rank; i++)
        if (xt->shape.d[i].size < 1 || wt->shape.d[i].size < 1 || os->d[i].size < 1)
            return false;
    /* Every epilogue value is computed per output element: its shape must broadcast there. */
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        if (n == cn)
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
    ops_conv_geom cg;
    ops_conv_geom_of(g, cn, &cg);
    ci->nd = rank - 2;
    ci->nhwc = cg.nhwc;
    ci->n = cg.n;
    ci->c = cg.c;
    ci->dep = cg.in[0];
    ci->h = cg.in[1];
    ci->wd = cg.in[2];
    ci->k = cg.k;
    ci->cg = cg.cg;
    ci->t = cg.ker[0];
    ci->r = cg.ker[1];
    ci->s = cg.ker[2];
    ci->od = cg.out[0];
    ci->oh = cg.out[1];
    ci->p = cg.out[0] * cg.out[1];
    ci->q = cg.out[2];
    ci->sd = cg.stride[0];
    ci->sh = cg.stride[1];
    ci->sw = cg.stride[2];
    ci->pd = cg.pad[0];
    ci->ph = cg.pad[1];
    ci->pw = cg.pad[2];
    ci->dd = cg.dil[0];
    ci->dh = cg.dil[1];
    ci->dw = cg.dil[2];
    ci->idd = cg.idil[0];
    ci->idh = cg.idil[1];
    ci->idw = cg.idil[2];
    ci->general = ci->nd == 3 || ci->idd > 1 || ci->idh > 1 || ci->idw > 1;
    ci->groups = (int)cg.groups;
    if (ci->c != ci->cg * ci->groups || ci->k % ci->groups != 0)
        return false;
    ci->kg = ci->k / ci->groups;
    ci->gm = ci->n * ci->p * ci->q;
    ci->gk = ci->cg * ci->t * ci->r * ci->s;
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

bool conv_matches(const ops_group *grp)
{
    conv_info ci;
    return conv_analyse(grp, &ci);
}

/* ---- schedules: derived tile shapes and resource estimates ---- */

int conv_div_up(int64_t a, int64_t b)
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
    if (!ci->nhwc || ci->general)
        return false;
    if (math == MATH_MMA)
        return (ci->dt == OPS_DT_F16 || ci->dt == OPS_DT_BF16) && ci->cg % 8 == 0;
    if (math == MATH_TF32 || math == MATH_TF32X3)
        return ci->dt == OPS_DT_F32 && ci->cg % 4 == 0;
    return false;
}

/* Fills the plan; returns NULL or the reason the schedule is illegal. */
const char *conv_ig_plan_make(const ops_group *grp, const conv_info *ci, const ops_schedule *s,
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
    int per_row = ci->general ? 4 : 3; /* origin offset, (depth,) height, width */
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
        pl->regs = pl->mi * pl->ni * 4 + frags + per_row * rows + b_rows + staged + 40;
    } else {
        pl->regs = pl->tm * pl->tn + pl->tm + pl->tn + per_row * rows + staged + 32;
    }
    int cap = dev->regs_per_sm / pl->threads;
    if (cap > dev->max_regs_per_thread)
        cap = dev->max_regs_per_thread;
    if (pl->regs > REG_BUDGET || pl->regs > cap * 3 / 4)
        return "regs";
    return NULL;
}

/* The direct and depthwise kernels' register estimate against what ptxas can give each thread
 * of a block of `threads`, with room for the estimate's error. */
static bool regs_fit(const ops_device *dev, int threads, int regs)
{
    int cap = dev->regs_per_sm / threads;
    if (cap > dev->max_regs_per_thread)
        cap = dev->max_regs_per_thread;
    return regs <= 160 && regs <= cap * 3 / 4;
}

const char *conv_direct_plan_make(const conv_info *ci, const ops_schedule *s, const ops_device *dev,
                                  direct_plan *pl)
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
    pl->spatial = ci->n * ci->p * conv_div_up(ci->q, pl->tq);
    if (pl->spatial > ((int64_t)1 << 31) - 1024 || conv_div_up(ci->k, pl->tk) > 65535)
        return "shape";
    pl->win = (pl->tq - 1) * ci->sw + (int)(ci->s - 1) * ci->dw + 1;
    if (pl->shared) {
        pl->smem = pl->tk * (int)ci->gk * 4;
        if (ci->gk > 65536 || pl->smem > dev->smem_per_block_optin)
            return "smem";
    }
    pl->regs = pl->tk * pl->tq + pl->win + (pl->shared ? pl->tk : pl->tk * (int)ci->s) + 24;
    return regs_fit(dev, pl->threads, pl->regs) ? NULL : "regs";
}

const char *conv_dw_plan_make(const conv_info *ci, const ops_schedule *s, const ops_device *dev,
                              dw_plan *pl)
{
    memset(pl, 0, sizeof(*pl));
    if (ci->nhwc || ci->nd != 2 || ci->cg != 1 || ci->kg != 1)
        return "shape"; /* NCHW, one filter a channel */
    pl->tk = s->v[K_TK];
    pl->tq = s->v[K_TQ];
    pl->warps = s->v[K_WARPS];
    pl->threads = 32 * pl->warps;
    if (pl->threads < 64 || pl->threads > dev->max_threads_per_block)
        return "threads";
    pl->tile_p = pl->warps * pl->tk;
    pl->tile_q = 32 * pl->tq;
    /* a tile more than twice the output: the same kernel as a smaller one, idle threads */
    if ((pl->tq > 1 && pl->tile_q / 2 >= ci->q) || (pl->tile_p > 2 && pl->tile_p / 2 >= ci->p))
        return "redundant";
    pl->in_h = (pl->tile_p - 1) * ci->sh + (int)(ci->r - 1) * ci->dh + 1;
    pl->in_w = (pl->tile_q - 1) * ci->sw + (int)(ci->s - 1) * ci->dw + 1;
    pl->tiles_p = conv_div_up(ci->p, pl->tile_p);
    pl->tiles_q = conv_div_up(ci->q, pl->tile_q);
    if (ci->n * ci->c > 65535 || pl->tiles_p * pl->tiles_q > ((int64_t)1 << 31) - 1)
        return "shape"; /* grid.y is the plane */
    pl->smem = (pl->in_h * pl->in_w + (int)(ci->r * ci->s)) * 4;
    if (pl->smem > dev->smem_per_block_optin)
        return "smem";
    pl->regs = pl->tk * pl->tq + 32;
    return regs_fit(dev, pl->threads, pl->regs) ? NULL : "regs";
}

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

const char *conv_tiled_plan_make(const conv_info *ci, const ops_schedule *s, const ops_device *dev,
                                 tiled_plan *pl)
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
        int64_t pad = (int64_t)conv_div_up(ci->p, oh) * oh * conv_div_up(ci->q, ow) * ow;
        int64_t patch = ((int64_t)(oh - 1) * ci->sh + ci->r) * ((int64_t)(ow - 1) * ci->sw + ci->s);
        if (best_pad < 0 || pad < best_pad || (pad == best_pad && patch <= best_patch)) {
            best_pad = pad;
            best_patch = patch;
            pl->oh = oh;
            pl->ow = ow;
            pl->cgn = cgn;
        }
    }
    pl->tiles_p = conv_div_up(ci->p, pl->oh);
    pl->tiles_q = conv_div_up(ci->q, pl->ow);
    pl->kblocks = conv_div_up(ci->k, pl->bn);
    if (ci->n > 65535 || pl->kblocks * pl->tiles_p * pl->tiles_q > ((int64_t)1 << 31) - 1)
        return "shape";
    if (ci->r > 64 || ci->s > 64 || ci->sh > 16 || ci->sw > 16)
        return "shape"; /* keeps the patch arithmetic below small */
    pl->ih = (pl->oh - 1) * ci->sh + (int)ci->r;
    pl->iw = (pl->ow - 1) * ci->sw + (int)ci->s;
    pl->ridx = conv_div_up(pl->ih, ci->sh);
    pl->wv = conv_div_up(pl->tq + (ci->s - 1) / ci->sw, 4);
    pl->xt = conv_div_up(pl->ih, pl->threads / 32);
    pl->xi = conv_div_up(pl->iw, 32);
    pl->ft = conv_div_up(pl->bn, pl->threads / 32);
    pl->fi = conv_div_up(ci->r * ci->s, 32);
    /* A phase holds the patch's columns of that phase and what the last column group's 16-byte
     * window loads reach. */
    pl->pl = conv_div_up(pl->iw, ci->sw);
    if (pl->pl < (pl->cgn - 1) * pl->tq + 4 * pl->wv)
        pl->pl = (pl->cgn - 1) * pl->tq + 4 * pl->wv;
    pl->pl = conv_div_up(pl->pl, 4) * 4;
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
    pl->bnp = conv_div_up(pl->bn, 4) * 4;
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
    static const bool used[4][N_KNOBS] = {
        [ALGO_IGEMM] = {[K_MATH] = true,
                        [K_BM] = true,
                        [K_BN] = true,
                        [K_BK] = true,
                        [K_WARPS] = true,
                        [K_STAGES] = true},
        [ALGO_DIRECT] = {[K_WARPS] = true, [K_TK] = true, [K_TQ] = true, [K_FILTER] = true},
        [ALGO_TILED] =
            {[K_BM] = true, [K_BN] = true, [K_STAGES] = true, [K_TK] = true, [K_TQ] = true},
        [ALGO_DEPTHWISE] = {[K_WARPS] = true, [K_TK] = true, [K_TQ] = true},
    };
    if (algo < 0 || algo > ALGO_DEPTHWISE)
        return false;
    for (int k = K_ALGO + 1; k < N_KNOBS; k++)
        if (!used[algo][k] && s->v[k] != conv_knobs[k].values[0])
            return false;
    return true;
}

const char *conv_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev)
{
    conv_info ci;
    if (!conv_analyse(grp, &ci))
        return "shape";
    int algo = s->v[K_ALGO];
    if (!other_knobs_default(s, algo))
        return "redundant";
    if (ci.general && algo != ALGO_IGEMM)
        return "shape"; /* the direct and tiled kernels are 2-d without input dilation */
    if (algo == ALGO_DIRECT) {
        direct_plan pl;
        return conv_direct_plan_make(&ci, s, dev, &pl);
    }
    if (algo == ALGO_TILED) {
        tiled_plan pl;
        return conv_tiled_plan_make(&ci, s, dev, &pl);
    }
    if (algo == ALGO_DEPTHWISE) {
        dw_plan pl;
        return conv_dw_plan_make(&ci, s, dev, &pl);
    }
    ig_plan pl;
    return conv_ig_plan_make(grp, &ci, s, dev, &pl);
}
