/* conv family: the cost model (ops/conv/conv.h lists the files). */
#include "conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    double gather = !pl->cp_async && ci->t * ci->r * ci->s > 16 ? 64.0 : 16.0;
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

void conv_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
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
        if (conv_tiled_plan_make(&ci, s, dev, &pl)) {
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
            loads += conv_div_up(pl.tq + (ci.s - 1 - ph) / ci.sw, 4);
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
    } else if (s->v[K_ALGO] == ALGO_DEPTHWISE) {
        dw_plan pl;
        if (conv_dw_plan_make(&ci, s, dev, &pl)) {
            e->seconds = INFINITY;
            return;
        }
        /* The halo: neighbouring tiles read their patches' overlap again (from L2 mostly). */
        double patch = (double)pl.in_h * pl.in_w, owned = (double)pl.tile_p * ci.sh *
                                                       (double)pl.tile_q * ci.sw;
        if (patch > owned)
            bytes += x_bytes * 0.3 * (patch - owned) / owned;
        /* Per output: R * S FFMAs, each with a shared load (the filter word is a broadcast
         * shared by the TK x TQ outputs of a lane); the patch fill, a load, a store and the
         * bounds per element, and the barrier, per block. Work on the padded tile. */
        double fma = (double)ci.r * ci.s * pl.tk * pl.tq;
        double per_block = pl.warps * (fma * 2.0 + (double)ci.r * ci.s +
                                       pl.tk * pl.tq * (4.0 + 2.0 * ci.epilogue_nodes)) +
                           patch * 8.0 / 32.0 + 100.0;
        double tile_eff = (double)(ci.p * ci.q) /
                          (double)(pl.tiles_p * pl.tile_p * pl.tiles_q * pl.tile_q);
        compute_eff = pl.warps * fma / per_block * tile_eff;
        /* The fill's loads are in flight together (every thread several), then the stencil
         * runs from shared memory: other resident blocks hide each one's fill. */
        launch_eff = launch_efficiency(dev, pl.tiles_p * pl.tiles_q * ci.n * ci.c, pl.threads,
                                       pl.regs, pl.smem, 2.0, &occ);
    } else if (s->v[K_ALGO] == ALGO_DIRECT) {
        direct_plan pl;
        if (conv_direct_plan_make(&ci, s, dev, &pl)) {
            e->seconds = INFINITY;
            return;
        }
        int64_t kblocks = conv_div_up(ci.k, pl.tk);
        /* Each channel block re-reads the input, mostly from L2. */
        bytes += x_bytes * 0.05 * (double)(kblocks - 1);
        /* FMAs per filter row against the loads feeding them (input window and weights). */
        double fma = (double)pl.tk * pl.tq * (double)ci.s;
        double loads = (double)pl.win + (double)pl.tk * (double)ci.s;
        compute_eff = 0.9 * fma / (fma + loads);
        launch_eff = launch_efficiency(dev, (int64_t)conv_div_up(pl.spatial, pl.threads) * kblocks,
                                       pl.threads, pl.regs, pl.smem, 1.0, &occ);
    } else {
        ig_plan pl;
        if (conv_ig_plan_make(grp, &ci, s, dev, &pl)) {
            e->seconds = INFINITY;
            return;
        }
        int64_t mt = conv_div_up(ci.gm, pl.bm), nt = conv_div_up(ci.kg, pl.bn),
                kt = conv_div_up(ci.gk, pl.bk);
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
            t_compute = tf32_core_time(&pl, &ci, dev, (double)(mt * nt * ci.groups) * (double)kt,
                                       flops, tile_eff * loop_eff);
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
