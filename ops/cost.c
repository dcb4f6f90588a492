/* FLOP and minimum-traffic counts of a bound graph, for the roofline cost model and for
 * reporting achieved throughput. Counting rules (docs/formats.md (part 2)):
 *
 *   unary, binary          1 per output element (transcendentals count 1); cast 0
 *   sum / max / min        n - 1 per output element, n = elements reduced into it
 *   mean                   n per output element (n - 1 adds and one divide)
 *   matmul                 2 * batch * M * N * K
 *   conv2d, conv3d         2 * N * K * P * Q * (C / groups) * R * S (taps on input zeros not
 *                          counted), plus N * K * P * Q with bias
 *   attention              2 * batch * pairs * (D + Dv), pairs = Sq * Skv, or for causal the
 *                          unmasked (query, key) pairs only; the softmax is not counted
 *   permute, reshape       0
 *
 * Counts are taken on the canonical graph (composites expanded into primitives). Bytes are the
 * compulsory traffic: every graph input read once and every graph output written once, in their
 * dtypes. */
#include "family.h"
#include "ops.h"

#include <stdlib.h>

static double numel(const ops_graph *g, int t)
{
    return (double)ops_shape_numel(&g->tensors[t].shape);
}

static int64_t dim(const ops_graph *g, int t, int i)
{
    const ops_shape *s = &g->tensors[t].shape;
    return s->d[i < 0 ? i + s->rank : i].size;
}

static double node_flops(const ops_graph *g, const ops_node *n)
{
    double out = numel(g, n->out);
    int32_t x = n->in[0].tensor;
    switch (ops_op_info_get(n->op)->kind) {
    case OPS_KIND_UNARY:
        return n->op == OPS_CAST ? 0.0 : out;
    case OPS_KIND_BINARY:
        return out;
    case OPS_KIND_REDUCE: {
        double red = out > 0 ? numel(g, x) / out : 0.0;
        if (red <= 0)
            return 0.0;
        return out * (n->op == OPS_REDUCE_MEAN ? red : red - 1.0);
    }
    case OPS_KIND_MATMUL: {
        const ops_shape *a = &g->tensors[x].shape;
        int64_t k = a->rank == 1 ? a->d[0].size : dim(g, x, n->attrs.transpose_a ? -2 : -1);
        return 2.0 * out * (double)k;
    }
    case OPS_KIND_CONV: {
        /* Weight OI[D]HW or O[D]HWI: everything but O is reduced into each output element,
         * but for the taps that land on the zeros between input elements (input dilation, a
         * transposed convolution's stride): 1 / input_dilation of them in each dimension. */
        int32_t w = n->in[1].tensor;
        double per_out = numel(g, w) / (double)dim(g, w, 0);
        for (int i = 0; i < ops_conv_spatial(n->op); i++)
            per_out /= n->attrs.input_dilation[i] > 0 ? n->attrs.input_dilation[i] : 1;
        return 2.0 * out * per_out + (n->n_in > 2 ? out : 0.0);
    }
    case OPS_KIND_ATTENTION: {
        int32_t q = n->in[0].tensor, v = n->in[2].tensor, k = n->in[1].tensor;
        int64_t sq = dim(g, q, -2), d = dim(g, q, -1), skv = dim(g, k, -2), dv = dim(g, v, -1);
        double batch = sq * dv > 0 ? out / (double)(sq * dv) : 0.0;
        double pairs = (double)sq * (double)skv;
        if (n->attrs.causal) {
            /* Query i sees keys 0..min(i, Skv-1). */
            int64_t full = sq < skv ? sq : skv;
            pairs = (double)full * (double)(full + 1) / 2.0 + (double)(sq - full) * (double)skv;
        }
        return 2.0 * batch * pairs * (double)(d + dv);
    }
    case OPS_KIND_SCAN: /* one add or multiply per element but the first of each line */
        return out;
    case OPS_KIND_COMPOSITE: /* not reached after canonicalisation */
    case OPS_KIND_LAYOUT:
        break;
    }
    return 0.0;
}

int ops_graph_cost(const ops_graph *g, ops_cost *out, ops_diag *d)
{
    if (!g || !out)
        return -EINVAL;
    ops_graph *canon = NULL;
    int rc = ops_graph_canonicalize(g, &canon, d); /* validates a copy when g is not */
    if (rc < 0)
        goto out;
    for (int t = 0; t < canon->n_tensors; t++) {
        if (ops_shape_numel(&canon->tensors[t].shape) < 0) {
            rc = ops_diag_set(d, canon, OPS_RULE_UNBOUND_DIM, -1, canon->tensors[t].name,
                              "cost: tensor '%s' has an unbound dimension; bind it first",
                              canon->tensors[t].name);
            goto out;
        }
    }
    ops_cost c = {0};
    for (int i = 0; i < canon->n_nodes; i++)
        c.flops += node_flops(canon, &canon->nodes[i]);
    for (int t = 0; t < canon->n_tensors; t++)
        if (canon->tensors[t].producer < 0)
            c.bytes += numel(canon, t) * (double)ops_dtype_size(canon->tensors[t].dtype);
    for (int j = 0; j < canon->n_outputs; j++) {
        int32_t t = canon->outputs[j];
        c.bytes += numel(canon, t) * (double)ops_dtype_size(canon->tensors[t].dtype);
    }
    *out = c;
out:
    ops_graph_free(canon);
    return rc;
}

int ops_graph_roofline(const ops_graph *bound, ops_precision p, const ops_device *dev,
                       ops_roofline *out, ops_diag *d)
{
    if (!bound || !dev || !out)
        return -EINVAL;
    ops_cost c;
    int rc = ops_graph_cost(bound, &c, d);
    if (rc < 0)
        return rc;
    bool half = p == OPS_PREC_REDUCED;
    for (int t = 0; t < bound->n_tensors && !half; t++)
        half = bound->tensors[t].producer < 0 &&
               (bound->tensors[t].dtype == OPS_DT_F16 || bound->tensors[t].dtype == OPS_DT_BF16);
    ops_roofline r = {.bytes = c.bytes, .flops = c.flops, .bytes_per_s = dev->dram_bytes_per_s};
    if (half)
        r.flops_per_s = dev->f16_flops_per_s, r.unit = "f16/bf16 tensor cores";
    else if (p == OPS_PREC_TF32)
        r.flops_per_s = dev->tf32_flops_per_s, r.unit = "tf32 tensor cores";
    else
        r.flops_per_s = dev->fp32_flops_per_s, r.unit = "fp32 FFMA";
    r.mem_ns = r.bytes_per_s > 0 ? r.bytes / r.bytes_per_s * 1e9 : 0;
    r.math_ns = r.flops_per_s > 0 ? r.flops / r.flops_per_s * 1e9 : 0;
    r.memory_bound = r.mem_ns >= r.math_ns;
    r.floor_ns = r.memory_bound ? r.mem_ns : r.math_ns;
    *out = r;
    return 0;
}
