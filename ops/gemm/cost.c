/* gemm family: the cost model (ops/gemm/gemm.h lists the files). */
#include "gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- cost model ----
 * seconds = max(DRAM bytes / bandwidth, L2->SM bytes / L2 bandwidth, executed flops / (peak *
 * efficiency)) + launch latency per kernel (+ the serial split-K hand-off chain). The efficiency
 * multiplies: wave quantisation (blocks over sm_count x resident blocks per SM), the warp tile's
 * shared-memory intensity, latency hiding from resident warps and pipeline depth, the k-loop's fill
 * and drain, and for mma.sync on sm_90 a 0.6 factor (the wgmma peak is out of its reach). The
 * device's f16 rate is what cuBLAS's wgmma kernels reach on the H100 (745 of about 990 TFLOP/s
 * dense), so the 16-bit wgmma kernel is ranked against it without that factor. */

void gemm_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                   ops_estimate *est)
{
    gemm_problem p;
    gemm_cfg c;
    memset(est, 0, sizeof(*est));
    if (gemm_analyse(grp, &p) < 0) {
        est->seconds = INFINITY;
        return;
    }
    gemm_configure(&p, s, dev, &c);
    const ops_graph *g = grp->g;
    double B = (double)p.batch, M = (double)p.M, N = (double)p.N, K = (double)p.K;
    /* a dual group is one GEMM over [B | B2]: nb times the columns, the output once */
    double nb = (double)p.nb;
    est->flops = 2.0 * B * M * N * nb * K;
    double exec = 2.0 * B * (double)(c.tiles_m * c.bm) * (double)(c.tiles_n * c.bn) * nb *
                  (double)(c.ktiles * c.bk);

    /* DRAM: every input and the output once, the split-K workspace written and read back, and
     * re-reads of A and B when they do not stay in L2 (below, once the residency is known). */
    double bytes = 0;
    for (int i = 0; i < grp->n_in; i++) {
        const ops_tensor *t = &g->tensors[grp->in[i]];
        bytes += (double)ops_shape_numel(&t->shape) * (double)ops_dtype_size(t->dtype);
    }
    double obytes = B * M * N * (double)ops_dtype_size(g->tensors[p.out].dtype);
    bytes += obytes;
    double ab =
        B * K *
        (M * (double)ops_dtype_size(p.src_dt[0]) + N * nb * (double)ops_dtype_size(p.src_dt[1]));
    /* (a B tile multicast to a 2-block cluster is read from L2 once for both) */
    double l2_traffic =
        B * (double)(c.tiles_m * c.tiles_n) * (double)(c.ktiles * c.bk) *
        ((double)c.bm * (double)ops_dtype_size(p.src_dt[0]) +
         (double)c.bn * nb * (double)ops_dtype_size(p.src_dt[1]) / (c.mcast == 2 ? 2.0 : 1.0));
    double ws = c.parallel ? (double)c.splitk * B * M * N * 4.0 : 0;
    est->bytes = bytes + 2 * ws;
    /* Serial split-K: the workspace zeroed, and the running sums of every tile written and read
     * back once per hand-off (SPLITK - 1 of them). */
    double sws = c.serial ? (double)gemm_serial_workspace_bytes(&p, &c) : 0;
    double tile_bytes = (double)c.bm * c.bn * 4.0;
    if (c.serial)
        est->bytes += sws + 2.0 * (c.splitk - 1) * B * (double)(c.tiles_m * c.tiles_n) * tile_bytes;

    /* Residency: blocks per SM by threads, shared memory, registers. */
    int regs = c.regs < 32 ? 32 : c.regs;
    int64_t per_sm = dev->max_threads_per_sm / c.threads;
    int64_t by_smem = dev->smem_per_sm / (c.smem_bytes + 1024);
    int64_t by_regs = dev->regs_per_sm / ((int64_t)regs * c.threads);
    if (by_smem < per_sm)
        per_sm = by_smem;
    if (by_regs < per_sm)
        per_sm = by_regs;
    if (dev->max_blocks_per_sm < per_sm)
        per_sm = dev->max_blocks_per_sm;
    if (per_sm < 1)
        per_sm = 1;
    est->occupancy = (double)(per_sm * c.threads) / dev->max_threads_per_sm;
    if (est->occupancy > 1)
        est->occupancy = 1;
    double blocks = B * (double)(c.tiles_m * c.tiles_n) * c.splitk;
    double slots = (double)dev->sm_count * (double)per_sm;
    double waves = blocks / slots;
    /* (stream-K shares the last waves' k tiles out evenly: no partial wave) */
    double wave_eff = c.stream ? 1.0 : waves / ceil(waves);
    double sm_used = blocks < dev->sm_count ? blocks / dev->sm_count : 1.0;

    /* DRAM re-reads. The blocks in flight at once (slots of them, consecutive in the raster
     * order) cover rows_w tile rows: the raster group (RASTER rows, or pairs of rows with mcast)
     * or, when a group row is shorter than the wave, as many rows as the wave spans. A B larger
     * than half of L2 is streamed again for every band of rows_w tile rows; A likewise for every
     * band of columns when its rows_w-row band does not fit. The re-reads overlap the math only
     * in part: a quarter of their time is added past the roofline's max. Fitted on the H100's
     * trials (bf16 4096 x 14336 x 4096, docs/search.md): raster 1 against raster 8 cost 1.19-1.25
     * against 0.71-0.79 ms on 128 x 128 tiles (DRAM-bound), +63 to +283 us on 128 x 256 and
     * 256 x 128 (0.5 ms of re-reads), and a dual group at raster 1 2.25 ms. */
    double t_rereads = 0;
    {
        double tm = (double)c.tiles_m, tn = (double)c.tiles_n;
        double rows_w = fmin(tm, fmax((double)c.raster * c.mcast, slots / tn));
        double cols_w = fmin(tn, fmax(1.0, slots / rows_w));
        double a_bytes = B * M * K * (double)ops_dtype_size(p.src_dt[0]);
        double b_bytes = B * K * N * nb * (double)ops_dtype_size(p.src_dt[1]);
        double half_l2 = (double)dev->l2_bytes / 2;
        double rereads = 0;
        if (b_bytes > half_l2)
            rereads += b_bytes * (ceil(tm / rows_w) - 1);
        if (a_bytes / tm * rows_w > half_l2)
            rereads += a_bytes * (ceil(tn / cols_w) - 1);
        bytes += rereads;
        est->bytes += rereads;
        t_rereads = rereads / (dev->dram_bytes_per_s * fmin(1.0, 2.0 * sm_used));
    }

    double peak = dev->fp32_flops_per_s, eff;
    if (c.tc) {
        peak = c.math == MATH_TF32     ? dev->tf32_flops_per_s
               : c.math == MATH_TF32X3 ? dev->tf32_flops_per_s / 3.0 /* three mmas a product */
                                       : dev->f16_flops_per_s;
        if (dev->sm_major >= 9 && !c.wgmma)
            peak *= 0.6;
        double intensity = (double)c.wtm * c.wtn / (c.wtm + c.wtn); /* flops per smem element */
        eff = fmin(1.0, sqrt(intensity / 32.0));
        if (c.wg16) {
            /* every consumer's wgmmas read the block's B tile: the block tile's intensity, full
             * at 128 x 256; n128 wgmmas re-read A twice as often as n256; one consumer
             * warpgroup idles a little while it waits on its wgmmas. Calibrated on the H100's
             * trial logs (bf16 4096^3, 8192^3, 4096 x 6144 x 4096, docs/search.md): against
             * 128 x 256, 128 x 128 ran 1.17-1.19x, 64 x 256 1.22-1.26x, 64 x 128 1.55-1.77x,
             * ping-pong as fast as cooperative on the same tile, mcast's gain from the L2 term. */
            double wn = c.bn * nb; /* the wgmma's n */
            intensity = (double)c.bm * wn / (c.bm + wn);
            eff = fmin(1.0, sqrt(intensity / 85.0)) * (wn >= 256 ? 1.0 : 0.97) *
                  (c.consumers == 1 ? 0.97 : 1.0);
            /* store=direct: each thread's scattered 4-byte stores hold the consumers off the
             * tensor cores for about 0.16 x 4096 / K of the k loop (measured at bf16 4096^3: every
             * one of 35 schedules slower than with store=tma, cooperative 128 x 256 by 9-12%, and
             * store=tma's three stages beat direct's four); ping-pong hides half of it behind the
             * other consumer (its pairs 2-7% slower) */
            if (!c.tma_store)
                eff /= 1.0 + (c.pingpong ? 0.08 : 0.16) * 4096.0 / (double)(c.ktiles * c.bk) *
                                 /* odd N: single-element stores, twice the instructions (the
                                    H200 at f16 4093^3: ~240 us against ~185 at 4096^3) */
                                 (p.N % 2 ? 2.0 : 1.0);
        }
        if (c.op[0].scalar_frag || c.op[1].scalar_frag)
            eff *= 0.85;
        if (c.smem == SMEM_PAD)
            eff *= 0.94; /* measured on the H100 against XOR at 4096^3 */
    } else {
        double intensity = (double)c.tm * c.tn / (c.tm + c.tn);
        eff = fmin(1.0, sqrt(intensity / 4.0));
    }
    /* tf32x3 wgmma, measured on the H100 at 2048^3: the tensor pipe 42% busy (a wait and a block
     * barrier per k tile, two warps per scheduler); without the in-kernel small-halves pass
     * (wgmma_split) the loop ran 19% faster there */
    if (c.wgmma && !c.wg16)
        eff *= c.presplit ? 0.7 : 0.6;
    int block_warps = c.threads / 32;
    /* a barrier stalls more warps at once (the warp-specialised kernel has none in its k loop) */
    if (block_warps > 4 && !c.wg16)
        eff /= 1.0 + 0.04 * (block_warps - 4);
    double warps = est->occupancy * dev->max_threads_per_sm / 32.0;
    eff *= 0.5 + 0.5 * fmin(1.0, warps / 8.0);
    static const double stage_eff[5] = {0, 0, 0.85, 0.95, 1.0};
    eff *= stage_eff[c.stages < 4 ? c.stages : 4];
    for (int k = 0; k < 2; k++)
        if (!c.op[k].vb)
            eff *= 0.75; /* synchronous register loads stall the pipeline */
    eff *= (double)c.kps / (double)(c.kps + 1);
    eff *= wave_eff;

    double t_math = exec / (peak * eff);
    double t_dram = bytes / (dev->dram_bytes_per_s * fmin(1.0, 2.0 * sm_used));
    double t_l2 = l2_traffic / (3.0 * dev->dram_bytes_per_s * fmin(1.0, 2.0 * sm_used));
    /* The 16-bit TMA kernel's ring: a block has at most `stages` k tiles in flight, each about a
     * microsecond from the copy's issue to its landing (cold, from DRAM), so a block streaming
     * kps k tiles a unit takes kps / stages of those per unit, whatever the bandwidth left over:
     * what bounds shapes of few tiles (DeepBench's 1760 x 128 x 1760 on 28 blocks of 128 x 64:
     * 7.5 us at 4 stages, bench/results/h100-2026-11-27-i19-bench-ncu/). */
    double t_ring = 0;
    if (c.wg16) {
        /* k tiles a block streams: stream-K's even share of all units' */
        double clusters = (double)(c.sk_blocks / c.mcast);
        double units = ceil((double)c.tiles_m / c.mcast) * (double)c.tiles_n * B;
        double per_block =
            c.stream ? ceil(units * (double)c.ktiles / clusters) : ceil(blocks / slots) * c.kps;
        t_ring = per_block * 1e-6 / c.stages;
    }
    double t =
        fmax(fmax(t_math, t_ring), fmax(t_dram, t_l2)) + 0.25 * fmin(t_math, t_rereads) + 2e-6;
    if (c.parallel) /* the reduction kernel reads the partials and applies the epilogue */
        t += (ws + bytes - ab) / dev->dram_bytes_per_s + 2e-6;
    if (c.presplit) /* the split kernel reads A and writes its small halves, then a launch */
        t += 8.0 * (double)(p.M * p.K) / dev->dram_bytes_per_s + 2e-6;
    if (c.wg16 && c.pad_out) /* the padded output rows copied into the output, then a launch */
        t += 2.0 * (double)(p.batch * p.M * c.pad_out_stride) *
                 (double)ops_dtype_size(p.g->tensors[p.out].dtype) / (0.8 * dev->dram_bytes_per_s) +
             2e-6;
    for (int k = 0; c.wg16 && k < 1 + p.nb; k++)
        if (c.pad[k]) /* the padding copy reads and writes the operand, then a launch: aligned
                         16-byte loads shifted into 16-byte stores, taken at 80% of the copy
                         bandwidth (its first form, 2-byte loads, ran at about 40% on the H200:
                         f16 4093^3 in 275 us against ~190 for the GEMM alone) */
            t += 2.0 * 2.0 * (double)(c.pad_rows[k] * c.pad_stride[k]) /
                     (0.8 * dev->dram_bytes_per_s) +
                 2e-6;
    if (c.serial) {
        /* The slices of a tile finish their k loops together and then add up one at a time:
         * per hand-off a fence and a semaphore round trip through L2 (~0.5 us) and one block
         * reading and writing a BM x BN fp32 tile at its SM's share of L2 bandwidth; plus the
         * memset of the workspace before the launch. */
        double sm_l2 = 3.0 * dev->dram_bytes_per_s / dev->sm_count;
        t += (c.splitk - 1) * (0.5e-6 + 2.0 * tile_bytes / sm_l2);
        t += 0.5e-6 + sws / dev->dram_bytes_per_s;
    }
    if (c.stream) {
        /* Stream-K costs about 0.45 of a unit's k loop a block over what its even share saves,
         * measured on the H200 against the data-parallel twin (the same knobs, re-timed
         * interleaved: bench/results/h200-2026-11-28-i19-streamk/): bf16 3072 x 3072 x 4096 on
         * 128 x 128 pairs (4.4 waves) 112 against 120 us, where the waves alone would give 105;
         * 4096^3 on 128 x 256 pairs (3.9 waves) 198 against 180, alone 175; DeepBench's 1760 x
         * 128 x 1760 on 64 x 64 tiles (56 tiles on 132 SMs) 8.0 against 6.4 us, alone ~4. More
         * than the partials' traffic, the flags' round trips and the memset explain (Nsight
         * Compute at 4096^3: the SMs active 14% longer, the tensor pipe 80% busy against 90%). */
        double clusters = (double)(c.sk_blocks / c.mcast);
        double units = ceil((double)c.tiles_m / c.mcast) * (double)c.tiles_n * B;
        t += 0.45 * t * clusters / units;
    }
    if (c.cluster) {
        /* Two cluster barriers, each block reading a tile's worth of partials from the
         * cluster's shared memory, and a cluster's blocks placed together in one GPC: on the
         * H100 (KernelBench's 128 x 1024 x 512, split-K 8) the best cluster schedule ran 5%
         * slower than the best parallel one, whose reduction kernel is estimated at ~3.5 us.
         * The 16-bit wgmma kernel's cluster mode measured alike: at DeepBench's 1760 x 128 x
         * 1760 its best 8.1 us against 7.3 for parallel split-K and 7.5 unsplit (screening,
         * bench/results/h100-2026-11-27-i19-bench-ncu/splitk/). */
        double sm_l2 = 3.0 * dev->dram_bytes_per_s / dev->sm_count;
        t += 3.5e-6 + tile_bytes / sm_l2;
    }
    est->seconds = t;
}
