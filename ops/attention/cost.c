/* attention family: the cost model (ops/attention/attention.h lists the files). */
#include "attention.h"

#include <math.h>
#include <string.h>

/* Roofline over the tiles actually visited (causal blocks skip the tiles past their diagonal),
 * divided by an efficiency for occupancy, wave quantisation and the pipeline. */
void attention_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                        ops_estimate *e)
{
    memset(e, 0, sizeof(*e));
    attn_info a;
    if (!attn_analyse(grp, &a))
        return;
    attn_geom m;
    attn_geometry(&a, s, &m);
    const ops_graph *g = grp->g;
    if (m.splitkv) { /* decode: K and V streamed once, the partials written and read back */
        double kv = (double)(a.batch / a.group) * (double)a.skv * (double)(a.d + a.dv) *
                    (double)ops_dtype_size(a.dt);
        double ws = 2.0 * (double)attn_splitkv_workspace(&a, &m);
        e->flops = 4.0 * (double)a.batch * (double)a.sq * (double)a.skv * (double)a.d;
        e->bytes = kv + ws;
        /* Streaming HBM needs every SM busy with enough bytes in flight (Little's law: its
         * share of the bandwidth times ~2 us of loaded latency). A warp's ring keeps stages - 1
         * 32-key chunks ahead; its own loads (stages 1) about a quarter chunk. */
        double blocks = (double)m.splits * (double)(a.batch / a.group);
        double per_sm = fmin((double)(dev->max_threads_per_sm / m.threads),
                             m.smem > 0 ? floor((double)dev->smem_per_sm / m.smem) : 32.0);
        per_sm = fmax(per_sm, 1.0);
        double busy = fmin(1.0, blocks / dev->sm_count);
        double chunk = 32.0 * (double)(a.d + a.dv) * (double)ops_dtype_size(a.dt);
        double inflight = fmin(per_sm, ceil(blocks / dev->sm_count)) * m.warps * chunk *
                          (m.stages > 1 ? m.stages - 1 : 0.25);
        double need = dev->dram_bytes_per_s / dev->sm_count * 2e-6;
        double fill = busy * fmin(1.0, inflight / need);
        /* past one wave of resident blocks, the last wave's idle SMs (blocks are equal work),
         * and each wave's start: Q's rows and the first chunks a round trip away */
        double waves = blocks / ((double)dev->sm_count * per_sm);
        if (waves > 1.0)
            fill *= waves / ceil(waves);
        e->occupancy = fill;
        /* then the FFMA form's products bound it (38% of the SMs' issue, where cuDNN's tensor
         * cores took 11% at 93% of DRAM's peak), which the tensor-core form frees */
        double eff = m.tc ? 0.95 : m.stages > 1 ? 0.9 : 0.8;
        e->seconds = e->bytes / (dev->dram_bytes_per_s * eff * fmax(fill, 0.05)) +
                     ceil(waves) * 1e-6 + (m.splits > 1 ? 6e-6 : 3e-6); /* launches */
        return;
    }
    /* Work of the visited tiles: QK^T and PV on whole Bq x Bkv tiles. */
    double tile_work = (double)m.bq * m.bkv * 2.0 * (double)(a.d + a.dv);
    e->flops = tile_work * (double)m.kv_tiles * (double)a.batch;
    double bytes = 0;
    for (int i = 0; i < grp->n_in; i++) {
        const ops_tensor *t = &g->tensors[grp->in[i]];
        bytes += (double)ops_shape_numel(&t->shape) * (double)ops_dtype_size(t->dtype);
    }
    const ops_tensor *ot = &g->tensors[grp->out[0]];
    bytes += (double)ops_shape_numel(&ot->shape) * (double)ops_dtype_size(ot->dtype);
    /* K and V re-reads beyond the L2 footprint: count them once per q tile when a batch
     * entry's K and V do not fit in a slice of L2. */
    double kv_bytes = (double)a.skv * (double)(a.d + a.dv) * (double)ops_dtype_size(a.dt);
    if (kv_bytes * dev->sm_count > (double)dev->l2_bytes)
        bytes += kv_bytes * (double)a.batch * (double)(m.q_tiles - 1) * 0.25;
    e->bytes = bytes;

    double peak = m.math == MATH_FFMA ? dev->fp32_flops_per_s : dev->f16_flops_per_s;
    /* flash attention on sm_90: ffma, mma.sync, wgmma (Hopper's tensor-core rate needs wgmma),
     * wgmma fed by a TMA producer (no block barrier, no copy arithmetic on the consumers) */
    double base = m.math == MATH_FFMA ? 0.45 : m.ws ? 0.70 : m.wgmma ? 0.62 : 0.40;
    /* Resident blocks per SM. */
    int regs = m.regs < 32 ? 32 : m.regs;
    int by_threads = dev->max_threads_per_sm / m.threads;
    int by_regs = dev->regs_per_sm / (regs * m.threads);
    int by_smem = (int)(dev->smem_per_sm / (m.smem + 1024));
    int per_sm = by_threads;
    if (by_regs < per_sm)
        per_sm = by_regs;
    if (by_smem < per_sm)
        per_sm = by_smem;
    if (dev->max_blocks_per_sm < per_sm)
        per_sm = dev->max_blocks_per_sm;
    if (per_sm < 1)
        per_sm = 1;
    e->occupancy = (double)(per_sm * m.threads) / dev->max_threads_per_sm;
    double occ_eff = 0.55 + e->occupancy;
    if (occ_eff > 1.0)
        occ_eff = 1.0;
    /* Wave quantisation: the last wave of blocks runs partly empty. */
    double blocks = (double)m.q_tiles * (double)a.batch;
    double slots = (double)dev->sm_count * per_sm;
    double waves = ceil(blocks / slots);
    double wave_eff = blocks / (waves * slots);
    /* Pipeline: a second buffer hides the loads; short tiles pay the per-tile overhead. */
    double pipe = m.stages == 1 ? 0.88 : 1.0;
    if (m.wgmma && !m.ws && m.stages == 2)
        pipe = 0.95; /* a second block barrier per tile */
    double tile = m.bkv == 32 ? 0.85 : m.bkv == 64 ? 1.0 : 0.97;
    double knobs = 1.0;
    if (m.math != MATH_FFMA) {
        knobs *= m.layout == LAYOUT_SWIZZLE ? 1.0 : 0.98;
        knobs *= m.qfrag == QFRAG_REGS ? 1.0 : 0.95;
    }
    knobs *= m.exp2 ? 1.0 : 0.96;
    double eff = base * occ_eff * wave_eff * pipe * tile * knobs;
    double t_math = e->flops / (peak * eff);
    double t_mem = e->bytes / (dev->dram_bytes_per_s * 0.85);
    e->seconds = (t_math > t_mem ? t_math : t_mem) + 3e-6;
}
