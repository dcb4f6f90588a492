/* The physical floor of a kernel record: no kernel can beat the time its compulsory memory
 * traffic and arithmetic take at the GPU's peak rates, so a record faster than that was not
 * measured (a rewritten bundle, a broken timer). docs/formats.md (part 3) has the rule. */
#include "internal.h"
#include "ops/family.h"
#include "ops/ops.h"

#include <stdio.h>

/* Bytes of the record's inputs and outputs as bound: each read or written once at least. */
static double slot_bytes(const cache_record *r)
{
    double bytes = 0;
    for (int i = 0; r->slots && i < r->n_inputs + r->n_outputs; i++) {
        double n = (double)ops_dtype_size(r->slots[i].dtype);
        for (int k = 0; k < r->slots[i].rank; k++)
            n *= (double)r->slots[i].dims[k];
        bytes += n;
    }
    return bytes;
}

/* The floor and what set it ("268 MB at 3.0 TB/s on NVIDIA H100 80GB HBM3"). */
static double floor_ns(const cache_record *r, const ops_graph *g, char *why, size_t cap)
{
    ops_device dev;
    bool known = ops_device_find(r->key.gpu.name, &dev) == 0;
    /* Back-to-back (hot) repetitions may find the inputs in L2, and a kernel may end with its
     * outputs still dirty there: at most two L2s' worth of the traffic can skip DRAM. */
    double bytes = slot_bytes(r), dram = bytes - 2.0 * (double)dev.l2_bytes;
    double mem_ns = dram > 0 ? dram / dev.dram_bytes_per_s * 1e9 : 0;
    double flops = 0, flop_ns = 0;
    if (g) {
        ops_cost c;
        ops_diag d = {0};
        double peak = dev.f16_flops_per_s; /* the fastest unit any precision policy may use */
        if (dev.tf32_flops_per_s > peak)
            peak = dev.tf32_flops_per_s;
        if (dev.fp32_flops_per_s > peak)
            peak = dev.fp32_flops_per_s;
        if (ops_graph_cost(g, &c, &d) == 0 && peak > 0) {
            flops = c.flops;
            flop_ns = flops / peak * 1e9;
        }
    }
    if (why)
        snprintf(why, cap, "%.3g MB (%.3g MB past 2x L2) at %.3g TB/s, %.3g GFLOP on %s%s",
                 bytes / 1e6, dram > 0 ? dram / 1e6 : 0.0, dev.dram_bytes_per_s / 1e12, flops / 1e9,
                 dev.name, known ? "" : " (the table's fastest GPU: this one is not in it)");
    return CACHE_FLOOR_FACTOR * (mem_ns > flop_ns ? mem_ns : flop_ns);
}

double cache_record_floor_ns(const cache_record *r, const ops_graph *g)
{
    return floor_ns(r, g, NULL, 0);
}

int cache_record_check_floor(const cache_record *r, const ops_graph *g, kt_err *err)
{
    char why[256];
    double f = floor_ns(r, g, why, sizeof(why));
    if (r->time_ns >= f)
        return 0;
    return kt_err_set(
        err, -ERANGE,
        "median %.4g ns is below the physical floor %.4g ns of its problem (%.0f%% of "
        "%s): implausible",
        r->time_ns, f, CACHE_FLOOR_FACTOR * 100, why);
}
