/* attention family: knobs, the problem, the schedule's geometry and its pruning
 * (ops/attention/attention.h lists the files). */
#include "attention.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const attn_math_labels[] = {"ffma", "f16", "bf16"};
static const char *const layout_labels[] = {"pad", "swizzle"};
static const char *const qfrag_labels[] = {"smem", "regs"};
static const char *const exp_labels[] = {"exp", "exp2"};
static const char *const mma_labels[] = {"sync", "wgmma", "wgmma_ws", "splitkv", "splitkv_tc"};
static const char *const grid_labels[] = {"tiles", "persistent"};

const ops_knob attn_knobs[N_KNOBS] = {
    [K_BQ] = {"bq", 3, {64, 128, 192}, NULL},
    [K_BKV] = {"bkv", 3, {32, 64, 128}, NULL},
    [K_WARPS] = {"warps", 3, {4, 8, 12}, NULL},
    [K_STAGES] = {"stages", 3, {1, 2, 3}, NULL},
    [K_MATH] = {"math", 3, {MATH_FFMA, MATH_F16, MATH_BF16}, attn_math_labels},
    /* mma path only: shared-memory rows padded by 16 bytes, or 16-byte chunks XOR-swizzled */
    [K_LAYOUT] = {"smem", 2, {LAYOUT_PAD, LAYOUT_SWIZZLE}, layout_labels},
    /* mma path only: Q's A fragments re-read from shared memory per tile, or kept in registers */
    [K_QFRAG] = {"q", 2, {QFRAG_SMEM, QFRAG_REGS}, qfrag_labels},
    /* natural exp, or exp2 with log2(e) folded into the scale */
    [K_EXP] = {"exp", 2, {EXP_E, EXP_2}, exp_labels},
    /* 16-bit path only: mma.sync, Hopper's warpgroup wgmma, or wgmma fed by a TMA producer */
    [K_MMA] = {"mma",
               5,
               {MMA_SYNC, MMA_WGMMA, MMA_WGMMA_WS, MMA_SPLITKV, MMA_SPLITKV_TC},
               mma_labels},
    /* wgmma_ws only: a block per work item, or a block per SM walking them */
    [K_GRID] = {"grid", 2, {GRID_TILES, GRID_PERSISTENT}, grid_labels},
    /* splitkv only: key slices a k/v head (1: every other kernel) */
    [K_SPLITS] = {"splits", 6, {1, 4, 8, 16, 32, 128}, NULL},
    /* wgmma_ws with two or three consumers only: turns at the tensor cores */
    [K_PINGPONG] = {"pingpong", 2, {0, 1}, NULL},
};

bool attn_analyse(const ops_group *grp, attn_info *a)
{
    const ops_graph *g = grp->g;
    memset(a, 0, sizeof(*a));
    a->g = g;
    a->att_node = -1;
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        if (n->op == OPS_ATTENTION) {
            if (a->att_node >= 0)
                return false;
            a->att_node = grp->nodes[i];
        } else if (!ops_is_elementwise(n->op)) {
            return false;
        }
    }
    if (a->att_node < 0 || grp->n_out != 1)
        return false;
    a->att = &g->nodes[a->att_node];
    a->q = a->att->in[0].tensor;
    a->k = a->att->in[1].tensor;
    a->v = a->att->in[2].tensor;
    a->out = grp->out[0];
    /* q, k and v come from outside: the family has no prologue. */
    for (int k = 0; k < 3; k++) {
        int32_t p = g->tensors[a->att->in[k].tensor].producer;
        if (p >= 0 && (grp->mask >> p & 1))
            return false;
    }
    const ops_tensor *ot = &g->tensors[a->att->out];
    /* Every other node computes one value per attention output element. */
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        if (grp->nodes[i] != a->att_node &&
            !ops_shape_same_sizes(&g->tensors[n->out].shape, &ot->shape))
            return false;
    }
    a->has_epilogue = grp->n_nodes > 1;
    const ops_tensor *q = &g->tensors[a->q], *k = &g->tensors[a->k], *v = &g->tensors[a->v];
    a->dt = q->dtype;
    a->out_dt = g->tensors[a->out].dtype;
    a->rank = q->shape.rank;
    if (k->shape.rank != a->rank || v->shape.rank != a->rank || ot->shape.rank != a->rank)
        return false;
    a->batch = 1;
    a->hq = a->rank > 2 ? q->shape.d[a->rank - 3].size : 1;
    a->group = 1;
    for (int i = 0; i < a->rank - 2; i++) {
        int64_t qs = q->shape.d[i].size, ks = k->shape.d[i].size;
        if (v->shape.d[i].size != ks)
            return false;
        if (ks != qs && !(i == a->rank - 3 && ks > 0 && qs % ks == 0))
            return false;
        if (ks != qs) /* grouped-query (validated: ks divides qs) */
            a->group = qs / ks;
        a->batch *= qs;
    }
    a->sq = q->shape.d[a->rank - 2].size;
    a->d = q->shape.d[a->rank - 1].size;
    a->skv = k->shape.d[a->rank - 2].size;
    a->dv = v->shape.d[a->rank - 1].size;
    a->causal = a->att->attrs.causal;
    a->scale = a->att->attrs.has_scale ? a->att->attrs.scale : 1.0 / sqrt((double)a->d);
    return a->dt == OPS_DT_F32 || a->dt == OPS_DT_F16 || a->dt == OPS_DT_BF16;
}

bool attention_matches(const ops_group *grp)
{
    attn_info a;
    return attn_analyse(grp, &a);
}

void attn_geometry(const attn_info *a, const ops_schedule *s, attn_geom *m)
{
    memset(m, 0, sizeof(*m));
    m->bq = s->v[K_BQ];
    m->bkv = s->v[K_BKV];
    m->warps = s->v[K_WARPS];
    m->threads = m->warps * 32;
    m->stages = s->v[K_STAGES];
    m->math = s->v[K_MATH];
    m->layout = s->v[K_LAYOUT];
    m->qfrag = s->v[K_QFRAG];
    m->exp2 = s->v[K_EXP] == EXP_2;
    m->splitkv = s->v[K_MMA] == MMA_SPLITKV || s->v[K_MMA] == MMA_SPLITKV_TC;
    m->tc = s->v[K_MMA] == MMA_SPLITKV_TC;
    m->splits = s->v[K_SPLITS];
    m->wgmma = s->v[K_MMA] == MMA_WGMMA || s->v[K_MMA] == MMA_WGMMA_WS;
    m->ws = s->v[K_MMA] == MMA_WGMMA_WS;
    m->persistent = s->v[K_GRID] == GRID_PERSISTENT;
    m->pingpong = s->v[K_PINGPONG] == 1;
    int d = (int)a->d, dv = (int)a->dv;
    if (m->splitkv) {
        /* Q's rows in a static array; with stages > 1, each warp's ring of 32-key chunks of K
         * and V in dynamic shared memory; per lane a K row, the rows' scores and O columns */
        int pad = m->tc ? 16 : 0; /* splitkv_tc pads K's and V's rows by 8 elements each */
        m->smem = m->stages > 1
                      ? m->warps * m->stages * 32 * (d + dv + pad) * (int)ops_dtype_size(a->dt)
                      : 0;
        /* after the key loop the same space holds the warps' partials for the block's merge */
        int parts = m->warps * (int)attn_splitkv_part_floats(a) * 4;
        if (parts > m->smem)
            m->smem = parts;
        /* tc: Q's A fragments, O, S and P; else a K row, the rows' scores and O columns */
        m->regs = m->tc
                      ? d / 4 + dv / 2 + 64
                      : (int)(a->d / 2 + 2 * a->group * a->sq + a->group * a->sq * a->dv / 32 + 40);
    } else if (m->math == MATH_FFMA) {
        m->tx = 16;
        m->ty = m->threads / m->tx;
        m->rq = m->bq / m->ty;
        m->rk = m->bkv / m->tx;
        m->rd = dv / m->tx;
        /* Q rows and K^T rows padded by a word: the column walks hit distinct banks. */
        m->qs = d + 1;
        m->ks = m->bkv + 1;
        m->vs = dv;
        int64_t words = (int64_t)m->bq * m->qs + (int64_t)m->stages * d * m->ks +
                        (int64_t)m->stages * m->bkv * m->vs + (int64_t)m->bq * (m->bkv + 1) +
                        3 * (int64_t)m->bq;
        m->smem = 4 * words;
        m->regs = m->rq * m->rd + m->rq * m->rk + m->rq + m->rk + m->rd + 40;
    } else if (m->wgmma) {
        m->mt = 1;
        m->qs = m->ks = d;
        m->vs = dv;
        m->consumers = m->warps / 4;
        /* unpadded swizzled tiles, plus 1 KiB to align the first to 1024 bytes */
        m->smem = 2 * ((int64_t)m->bq * d + (int64_t)m->stages * m->bkv * (d + dv)) + 1024;
        /* S and O accumulators, P repacked (alive while the P V wgmmas run), statistics. */
        m->regs = m->bkv / 2 + dv / 2 + m->bkv / 4 + 40; /* ptxas 13.0: 110-203 */
        if (m->ws) {
            m->threads += 128;                           /* the producer warpgroup */
            m->smem += 8 * (2 + 4 * (int64_t)m->stages); /* Q's barriers, K's and V's rings' */
            /* 65536 registers: the producer keeps 24 a thread, the consumers share the rest
             * (a multiple of 8; one consumer needs no move: 256 threads get 255 each) */
            m->consumer_regs = m->consumers == 1 ? 0 : (65536 / 128 - 24) / m->consumers / 8 * 8;
        }
    } else {
        m->mt = m->bq / (m->warps * 16);
        int pad = m->layout == LAYOUT_PAD ? 8 : 0;
        m->qs = d + pad;
        m->ks = d + pad;
        m->vs = dv + pad;
        m->smem = 2 * ((int64_t)m->bq * m->qs + (int64_t)m->stages * m->bkv * (m->ks + m->vs));
        /* Accumulators O and S, S counted 1.5 times (P is repacked from it while ptxas keeps
         * ldmatrix results in flight), Q fragments, row statistics, addresses. Calibrated on
         * ptxas 13.0 reports: D=128 with Bkv=128 spills, everything under the budget does not. */
        m->regs = m->mt * (dv / 8) * 4 + m->mt * (m->bkv / 8) * 6 +
                  (m->qfrag == QFRAG_REGS ? m->mt * (d / 16) * 4 : 0) + m->mt * 8 + 48;
    }
    m->q_tiles = (a->sq + m->bq - 1) / m->bq;
    for (int64_t t = 0; t < m->q_tiles; t++) {
        int64_t end = a->skv;
        if (a->causal) {
            int64_t last = (t + 1) * m->bq < a->sq ? (t + 1) * m->bq : a->sq;
            end = last < a->skv ? last : a->skv;
        }
        m->kv_tiles += (end + m->bkv - 1) / m->bkv;
    }
}

/* mma=splitkv (decode.c): 16-bit data, few query rows a k/v head, no epilogue; the knobs it
 * does not read at one value. */
static const char *splitkv_prune(const attn_info *a, const attn_geom *m, const ops_device *dev)
{
    if ((m->math == MATH_F16 && a->dt != OPS_DT_F16) ||
        (m->math == MATH_BF16 && a->dt != OPS_DT_BF16) || m->math == MATH_FFMA)
        return "shape";
    if (m->bq != 64 || m->bkv != 32 || m->layout != LAYOUT_PAD || m->qfrag != QFRAG_SMEM ||
        !m->exp2 || m->persistent || m->pingpong || (m->warps != 4 && m->warps != 8))
        return "redundant";
    if (a->has_epilogue || a->d % 64 != 0 || (a->dv != 64 && a->dv != 128 && a->dv != 256))
        return "shape";
    if (a->group * a->sq > 16)
        return "shape"; /* the packed rows' scores and O live in registers (tc: one m16 tile) */
    if (m->tc && m->stages < 2)
        return "redundant"; /* the tensor-core form reads its fragments from the ring */
    if (m->tc && dev->sm_major < 8)
        return "shape";
    if (m->tc && m->regs > 200)
        return "regs";
    if ((a->skv + m->splits - 1) / m->splits < 32 || a->batch / a->group > 65535)
        return "shape"; /* slices of whole 32-key chunks; grid.y */
    /* a warp's chunks: the slice's keys over its warps */
    int64_t chunks = ((a->skv + m->splits - 1) / m->splits + 32 * m->warps - 1) / (32 * m->warps);
    if (m->stages > 1 && chunks < m->stages)
        return "redundant"; /* a ring longer than a warp's walk */
    if (m->smem + a->group * a->sq * a->d * 4 > dev->smem_per_block_optin)
        return "smem"; /* the ring and Q's rows (fp32) */
    return NULL;
}

const char *attention_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev)
{
    attn_info a;
    if (!attn_analyse(grp, &a))
        return "shape";
    attn_geom m;
    attn_geometry(&a, s, &m);
    if (a.sq < 1 || a.skv < 1 || a.batch < 1 || a.batch > 65535 || a.d > MAX_HEAD_DIM ||
        a.dv > MAX_HEAD_DIM)
        return "shape";
    if (m.splits > 1 && !m.splitkv)
        return "redundant"; /* the decode kernel's knob (splits 1: one launch, no combine) */
    if (m.splitkv)
        return splitkv_prune(&a, &m, dev);
    if (m.math == MATH_FFMA) {
        /* f16/bf16 data always has its tensor-core path. */
        if (a.dt != OPS_DT_F32)
            return "redundant";
        if (m.layout != LAYOUT_PAD || m.qfrag != QFRAG_SMEM || m.wgmma || m.stages > 2)
            return "redundant"; /* knobs of the mma path */
        if (a.dv % m.tx != 0 || a.d < 1)
            return "shape";
        if (m.bq % m.ty != 0)
            return "divisibility";
        if (m.regs > FFMA_REG_BUDGET)
            return "regs";
    } else {
        /* The tensor-core path runs in the data's own 16-bit type (f32 data would need
         * "reduced" precision and a converting loader, which this family does not have). */
        if ((m.math == MATH_F16 && a.dt != OPS_DT_F16) ||
            (m.math == MATH_BF16 && a.dt != OPS_DT_BF16))
            return "shape";
        if (a.d % 16 != 0 || a.dv % 16 != 0)
            return "shape";
        if (m.layout == LAYOUT_SWIZZLE && (a.d % 64 != 0 || a.dv % 64 != 0))
            return "shape"; /* the swizzle permutes 8 chunks of 16 bytes */
        if (m.bq % (m.warps * 16) != 0)
            return "divisibility";
        if (dev->sm_major < 8)
            return "shape";
        if (m.wgmma) {
            /* Hopper only; the descriptors name 128-byte rows of 64-column blocks, and (wgmma)
             * V's single 64-column block along N or (wgmma_ws) DV / 64 of them */
            if (dev->sm_major != 9 || strcmp(dev->arch, "sm_90a") != 0)
                return "shape";
            if (a.d % 64 != 0 || (m.ws ? a.dv % 64 != 0 || a.dv > 256 : a.dv != 64))
                return "shape";
            if (m.layout != LAYOUT_SWIZZLE || m.qfrag != QFRAG_SMEM || m.stages < 2)
                return "redundant"; /* the layout is the hardware's; Q is read by descriptor */
            if (m.bq != 16 * m.warps)
                return "divisibility"; /* a warpgroup per 64 query rows */
            if (m.bkv < 64)
                return "divisibility";
        } else if (m.warps > 8 || m.bq > 128 || m.stages > 2) {
            return "redundant"; /* 192-row tiles and 3-buffer rings are the wgmma path's */
        }
        /* wgmma_ws: a consumer's registers are what setmaxnreg gives it */
        int cap = m.ws ? (m.consumer_regs ? m.consumer_regs : 240) : MMA_REG_BUDGET;
        if (m.regs > cap || (!m.ws && m.regs > dev->regs_per_sm / m.threads))
            return "regs";
    }
    if ((m.persistent || m.pingpong) && !m.ws)
        return "redundant"; /* the knobs of the TMA kernel */
    if (m.pingpong && m.consumers < 2)
        return "redundant"; /* one consumer has no one to take turns with */
    if (m.threads > dev->max_threads_per_block)
        return "threads";
    if (m.smem > dev->smem_per_block_optin)
        return "smem";
    return NULL;
}
