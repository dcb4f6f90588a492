/* gemv family: the cost model (ops/gemv/gemv.h lists the files). */
#include "gemv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tensor-core kernel: A once at the DRAM rate its loads in flight and the grid's waves
 * allow; x once per warp's row blocks, from L2 (charged at three times the DRAM rate, the H100's
 * ratio of L2 to HBM bandwidth, roughly). The tensor cores never bound it. */
static void mma_estimate(const gemv_info *in, const gemv_plan *p, const ops_device *dev,
                         double abytes, ops_estimate *e)
{
    double xl2 = (double)in->M / (16.0 * p->rows) * 8.0 * p->ntiles * (double)in->K *
                 (double)ops_dtype_size(in->xdt);
    /* Little's law: DRAM streams at full rate with ~4 MiB in flight (3 TB/s x ~1.3 us); a lane
     * has its row blocks' 16-byte loads of `depth` steps in flight, and the blocks an SM holds
     * are bounded by threads and by registers */
    double by_regs = floor(65536.0 / ((double)p->regs * p->threads));
    double per_sm = fmin((double)(dev->max_threads_per_sm / p->threads), fmax(by_regs, 1.0));
    double slots = (double)dev->sm_count * per_sm;
    double resident = fmin((double)p->grid, slots);
    double eff = fmin(1.0, resident * p->threads * 32.0 * p->rows * p->depth / (4.0 * 1024 * 1024));
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
void gemv_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
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
