/* row family: the cost model (ops/row/row.h lists the files). */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Roofline with an efficiency from bytes in flight per busy SM (Little's law,
 * OPS_INFLIGHT_BYTES_PER_SM), capped per SM (one SM draws at most about twice its share of the
 * bandwidth), against a critical path: each block walks its rows in sequence, every pass costing
 * a memory latency plus the row's bytes at the block's share of its SM. Extra passes re-read from
 * L2 (counted at 30% of a DRAM read) unless the row is kept on chip; split_row's kernels each
 * read their chunk again (from L2 for what the kernel before read last) and pay a launch each. */
void row_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                  ops_estimate *e)
{
    memset(e, 0, sizeof(*e));
    rw_info *in = malloc(sizeof(*in));
    rw_plan *p = malloc(sizeof(*p));
    if (!in || !p || !row_analyse(grp, s->v[K_PASS] == PASS_ONE, in))
        goto done;
    /* A split the pruner drops as pointless (many rows) is still estimated, as two chunks, so
     * that callers can compare it. */
    if (row_plan_of(in, s, dev, true, p) != NULL && (p->nk == 0 || p->grid == 0))
        goto done;
    const ops_graph *g = grp->g;
    const double latency = 0.8e-6, launch = 1.5e-6;
    double in_bytes = 0, out_bytes = 0, row_in_bytes = 0, row_out_bytes = 0, flops = 0;
    /* per row element, what comes from DRAM: a FULL input shared by the rows (a norm's weight)
     * is read again and again from L1 and L2, so it keeps DRAM busy only in proportion to its
     * size */
    double dram_row_bytes = 0;
    double x_numel = (double)in->n_rows * (double)in->L;
    for (int u = 0; u < grp->n_in; u++) {
        const ops_tensor *t = &g->tensors[grp->in[u]];
        double numel = (double)ops_shape_numel(&t->shape);
        in_bytes += numel * (double)ops_dtype_size(t->dtype);
        if (in->cls[u] == CL_FULL) {
            row_in_bytes += (double)ops_dtype_size(t->dtype);
            double share = numel < x_numel ? numel / x_numel : 1;
            dram_row_bytes += (double)ops_dtype_size(t->dtype) * share;
        }
    }
    for (int i = 0; i < grp->n_out; i++) {
        const ops_tensor *t = &g->tensors[grp->out[i]];
        out_bytes += (double)ops_shape_numel(&t->shape) * (double)ops_dtype_size(t->dtype);
        if (in->cls[row_slot_of(in, grp->out[i])] == CL_FULL)
            row_out_bytes += (double)ops_dtype_size(t->dtype);
    }
    double elems = x_numel;
    for (int u = grp->n_in; u < in->n_slots; u++)
        flops += (in->cls[u] == CL_FULL || row_is_reduce(row_slot_node(in, u)->op) ? elems
                                                                                   : in->n_rows) *
                 (row_slot_node(in, u)->op == OPS_EXP ? 8 : 2);
    int passes = in->n_levels + (in->full_out ? 1 : 0);
    /* A matmul prologue: its K-long dot products, computed once when the row is kept on chip
     * and by every pass otherwise; four FFMA chains fed from L2 (~2.4 ns a step, measured order
     * of magnitude) on each element a thread walks. */
    double mm_k = 0;
    for (int u = grp->n_in; u < in->n_slots; u++) {
        if (!in->mm[u])
            continue;
        const ops_node *n = row_slot_node(in, u);
        const ops_shape *as = &g->tensors[n->in[0].tensor].shape;
        double K = (double)as->d[n->attrs.transpose_a ? 0 : 1].size;
        int computed = p->cached[u] ? 1 : passes;
        flops += 2.0 * K * elems * computed;
        mm_k += K * computed;
    }
    bool split = p->strategy == ST_SPLIT || p->strategy == ST_CLUSTER || p->strategy == ST_SPLIT_LANE;
    bool cluster = p->strategy == ST_CLUSTER;
    int kernels = split && !cluster ? in->n_levels + 1 : 1;
    /* What each pass reads of the FULL inputs, per row element: a normalisation's statistics
     * read x alone, its output pass x, the weight and the bias. */
    double pass_bytes[OPS_GROUP_MAX_NODES + 2] = {0}, read_bytes = 0;
    for (int q = 1; q <= passes && q < OPS_GROUP_MAX_NODES + 2; q++) {
        bool reads[RW_MAX_SLOTS];
        row_pass_reads(in, q, reads);
        for (int u = 0; u < grp->n_in; u++)
            if (reads[u] && in->cls[u] == CL_FULL)
                pass_bytes[q] += (double)ops_dtype_size(g->tensors[grp->in[u]].dtype);
        read_bytes += pass_bytes[q];
    }
    double reread = read_bytes > row_in_bytes ? (read_bytes - row_in_bytes) * elems : 0;
    if (split && !cluster) {
        /* each kernel after the first walks the grid backwards (ops/row/split.c): its first
         * reads, up to about half the L2, are what the kernel before read last */
        for (int q = 2; q <= passes && q < OPS_GROUP_MAX_NODES + 2; q++) {
            double again = (pass_bytes[q] < pass_bytes[q - 1] ? pass_bytes[q] : pass_bytes[q - 1]) *
                           elems;
            double hot = (double)dev->l2_bytes / 2;
            reread -= 0.7 * (again < hot ? again : hot);
        }
    } else if (cluster || p->n_cached == 0) /* the row read again right away: mostly L2 */
        reread *= 0.3;
    else
        reread = 0;
    double ws = split && !cluster
                    ? 2.0 * (double)row_ws_level_offset(in, p, in->n_levels + 1) * 4 * p->S
                    : 0;
    double bytes = in_bytes + out_bytes + reread + ws;
    /* Strided rows read by several threads along the row touch a sector per element. */
    if (in->inner > 1 && p->tpr > 1 && !row_lanes(p))
        bytes += elems * row_in_bytes * (in->inner >= 8 ? 7 : (double)in->inner - 1);

    int regs = p->regs > 0 ? p->regs : 64;
    int bps = dev->regs_per_sm / (regs * p->threads);
    int by_threads = dev->max_threads_per_sm / p->threads;
    bps = bps < by_threads ? bps : by_threads;
    if (p->smem > 0) {
        int by_smem = (int)(dev->smem_per_sm / (p->smem + 1024));
        bps = bps < by_smem ? bps : by_smem;
    }
    bps = bps < dev->max_blocks_per_sm ? bps : dev->max_blocks_per_sm;
    bps = bps < 1 ? 1 : bps;
    double sms = p->grid < dev->sm_count ? (double)p->grid : dev->sm_count;
    double resident = (double)p->grid / sms;
    resident = resident < bps ? resident : bps;
    int ilp =
        p->storage == STO_REGS && p->n_cached ? (p->nk < 8 ? p->nk : 8) : (p->nk < 4 ? p->nk : 4);
    double inflight = resident * p->threads * dram_row_bytes * p->vec * ilp;
    double bw_eff = inflight / OPS_INFLIGHT_BYTES_PER_SM;
    bw_eff = bw_eff < 1 ? bw_eff : 1;
    double waves = (double)p->grid / ((double)bps * dev->sm_count);
    double rounds = waves <= 1 ? 1 : (double)(int64_t)(waves + 0.999999);
    double wave_eff = waves <= 1 ? 1 : waves / rounds;
    double per_sm = 2.0 * dev->dram_bytes_per_s / dev->sm_count;
    double bw = sms * per_sm * bw_eff * wave_eff;
    bw = bw < dev->dram_bytes_per_s * wave_eff ? bw : dev->dram_bytes_per_s * wave_eff;
    double t_mem = bytes / (bw > 0 ? bw : 1);
    double t_math = flops / (dev->fp32_flops_per_s * (sms / dev->sm_count));
    /* The critical path of one block (per kernel for split_row). */
    double share = per_sm / resident;
    double t_path;
    if (split) {
        t_path = 0;
        for (int q = 1; q <= passes && q < OPS_GROUP_MAX_NODES + 2; q++)
            t_path += latency + (double)p->chunk * pass_bytes[q] / share;
        t_path += (double)p->chunk * row_out_bytes / share;
        if (!cluster) /* kernel q folds the partials of levels < q: S / tpr a thread, and a tree */
            t_path += in->n_levels * (in->n_levels + 1) / 2.0 *
                      ((double)((p->S + p->tpr - 1) / p->tpr) * 40e-9 + 0.3e-6);
        if (cluster) /* a cluster barrier and a round of DSMEM reads per level: on the H100
                        softmax 16 x 16384 took 6.6 us (CUDA events) against split_row's 9.4 */
            t_path += in->n_levels * 0.5e-6;
    } else {
        double row_bytes = (double)in->L * (row_in_bytes + row_out_bytes);
        if (p->n_cached == 0)
            row_bytes += (read_bytes > row_in_bytes ? read_bytes - row_in_bytes : 0) *
                         (double)in->L * 0.3;
        double sync = row_partials(p) ? in->n_levels * 0.1e-6 : 0;
        double mm_chain = (double)p->nk * p->vec * mm_k * 2.4e-9;
        /* With the row kept on chip only the first pass waits on memory. The online pairs
         * (one_pass) then save nothing and rescale at every element, an exp in sequence: on
         * the H200, softmax over 1M rows of 64 ran 1.2x slower one_pass than multi_pass (median
         * of 46 pairs, bench/results/h200-2026-11-29-i22-sweep/README.md). */
        int waits = p->n_cached ? 1 : passes;
        double online = p->pass == PASS_ONE && p->n_cached ? (double)p->nk * p->vec * 25e-9 : 0;
        t_path = p->rseq * (waits * latency + sync + row_bytes / share + mm_chain + online);
    }
    t_path *= rounds;
    double t = t_mem > t_math ? t_mem : t_math;
    t = t > t_path ? t : t_path;
    e->seconds = t + launch * kernels;
    e->bytes = bytes;
    e->flops = flops;
    double occ = resident * p->threads * (sms / dev->sm_count) / dev->max_threads_per_sm;
    e->occupancy = occ > 1 ? 1 : occ;
done:
    free(in);
    free(p);
}
