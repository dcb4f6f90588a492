/* The family table, kernel groups, the default device description, schedule formatting. */
#include "family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const ops_family ops_family_pointwise, ops_family_row, ops_family_gemm, ops_family_conv,
    ops_family_attention, ops_family_library, ops_family_reference, ops_family_gemv,
    ops_family_scan;

static const ops_family *const families[OPS_FAM_COUNT] = {
    [OPS_FAM_POINTWISE] = &ops_family_pointwise, [OPS_FAM_ROW] = &ops_family_row,
    [OPS_FAM_GEMM] = &ops_family_gemm,           [OPS_FAM_CONV] = &ops_family_conv,
    [OPS_FAM_ATTENTION] = &ops_family_attention, [OPS_FAM_LIBRARY] = &ops_family_library,
    [OPS_FAM_REFERENCE] = &ops_family_reference, [OPS_FAM_GEMV] = &ops_family_gemv,
    [OPS_FAM_SCAN] = &ops_family_scan,
};

const ops_family *ops_family_get(ops_family_id id)
{
    KT_REQUIRE(id >= 0 && id < OPS_FAM_COUNT);
    return families[id];
}

void ops_device_h100(ops_device *dev)
{
    /* Read off the lent GPU (docs/search.md): H100 80GB HBM3, sm_90, 132 SMs, 50 MB L2, 232448 B
     * opt-in shared memory per block; ~3.0 TB/s copy bandwidth, ~51 TFLOP/s FFMA, ~745 TFLOP/s
     * bf16 tensor cores (cuBLAS 8192^3); tf32 taken as half the f16 rate. */
    *dev = (ops_device){
        .name = "NVIDIA H100 80GB HBM3",
        .arch = "sm_90a",
        .sm_major = 9,
        .sm_minor = 0,
        .sm_count = 132,
        .warp_size = 32,
        .max_threads_per_block = 1024,
        .max_threads_per_sm = 2048,
        .max_blocks_per_sm = 32,
        .regs_per_sm = 65536,
        .max_regs_per_thread = 255,
        .smem_per_block = 48 * 1024,
        .smem_per_block_optin = 232448,
        .smem_per_sm = 233472,
        .l2_bytes = 50 * 1000 * 1000,
        .dram_bytes_per_s = 3.0e12,
        .fp32_flops_per_s = 51e12,
        .tf32_flops_per_s = 372e12,
        .f16_flops_per_s = 745e12,
    };
}

void ops_device_h200(ops_device *dev)
{
    /* The same GH100 compute as the H100 (132 SMs at 1980 MHz, the same caches); HBM3e: a
     * 160 MiB copy ran at 4.19 TB/s on the lent H200 (bench/results/h100-2026-11-26-i15/
     * final-h200/test_gpu_timing.log). Compute rates taken as the H100's (not measured). */
    ops_device_h100(dev);
    snprintf(dev->name, sizeof(dev->name), "%s", "NVIDIA H200");
    dev->dram_bytes_per_s = 4.19e12;
}

int ops_device_find(const char *name, ops_device *dev)
{
    static void (*const table[])(ops_device *) = {ops_device_h100, ops_device_h200};
    ops_device best = {0};
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        ops_device d;
        table[i](&d);
        if (name && strcmp(name, d.name) == 0) {
            *dev = d;
            return 0;
        }
        if (d.dram_bytes_per_s > best.dram_bytes_per_s)
            best = d;
    }
    *dev = best;
    return -ENOENT;
}

int ops_group_init(ops_group *grp, const ops_graph *g, uint64_t mask, ops_diag *d)
{
    if (!g->validated || ops_graph_first_unbound(g))
        return ops_diag_set(d, g, OPS_RULE_UNBOUND_DIM, -1, "",
                            "kernel groups need a validated graph with every dimension bound");
    if (g->n_nodes > OPS_GROUP_MAX_NODES)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "",
                            "graph has %d nodes; kernel groups support at most %d", g->n_nodes,
                            OPS_GROUP_MAX_NODES);
    memset(grp, 0, sizeof(*grp));
    grp->g = g;
    grp->mask = mask;
    int32_t order[OPS_GROUP_MAX_NODES];
    int rc = ops_graph_topo_order(g, order, d);
    if (rc < 0)
        return rc;
    for (int i = 0; i < g->n_nodes; i++)
        if (mask >> order[i] & 1)
            grp->nodes[grp->n_nodes++] = order[i];

    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k].tensor;
            if (t == OPS_SCALAR)
                continue;
            int p = g->tensors[t].producer;
            if (p >= 0 && (mask >> p & 1))
                continue;
            bool seen = false;
            for (int j = 0; j < grp->n_in; j++)
                seen |= grp->in[j] == t;
            if (seen)
                continue;
            if (grp->n_in == OPS_GROUP_MAX_IO)
                return ops_diag_set(d, g, OPS_RULE_SHAPE, grp->nodes[i], g->tensors[t].name,
                                    "kernel group reads more than %d tensors", OPS_GROUP_MAX_IO);
            grp->in[grp->n_in++] = t;
        }
    }
    for (int i = 0; i < grp->n_nodes; i++) {
        int t = g->nodes[grp->nodes[i]].out;
        bool needed = g->tensors[t].is_output;
        for (int c = 0; c < g->n_nodes && !needed; c++) {
            if (mask >> c & 1)
                continue;
            for (int k = 0; k < g->nodes[c].n_in; k++)
                needed |= g->nodes[c].in[k].tensor == t;
        }
        if (!needed)
            continue;
        if (grp->n_out == OPS_GROUP_MAX_IO)
            return ops_diag_set(d, g, OPS_RULE_SHAPE, grp->nodes[i], g->tensors[t].name,
                                "kernel group writes more than %d tensors", OPS_GROUP_MAX_IO);
        grp->out[grp->n_out++] = t;
    }
    return 0;
}

void ops_schedule_format(const ops_schedule *s, char *buf, size_t len)
{
    const ops_family *f = ops_family_get(s->family);
    size_t used = (size_t)snprintf(buf, len, "%s", f->name);
    for (int k = 0; k < f->n_knobs && used < len; k++) {
        const ops_knob *knob = &f->knobs[k];
        const char *label = NULL;
        for (int i = 0; knob->labels && i < knob->n_values; i++)
            if (knob->values[i] == s->v[k])
                label = knob->labels[i];
        if (label)
            used += (size_t)snprintf(buf + used, len - used, " %s=%s", knob->name, label);
        else
            used += (size_t)snprintf(buf + used, len - used, " %s=%d", knob->name, s->v[k]);
    }
}

void ops_emitted_free(ops_emitted *e)
{
    free(e->source);
    memset(e, 0, sizeof(*e));
}

static void count_reason(ops_prune_counts *c, const char *reason, int64_t n)
{
    for (int i = 0; i < c->n_reasons; i++) {
        if (strcmp(c->reasons[i].reason, reason) == 0) {
            c->reasons[i].count += n;
            return;
        }
    }
    if (c->n_reasons < (int)KT_ARRAY_LEN(c->reasons)) {
        c->reasons[c->n_reasons].reason = reason;
        c->reasons[c->n_reasons++].count = n;
    }
}

int ops_family_enumerate(const ops_family *f, const ops_group *grp, const ops_device *dev,
                         int (*cb)(const ops_schedule *s, void *ctx), void *ctx,
                         ops_prune_counts *counts)
{
    KT_REQUIRE(f->n_knobs <= OPS_MAX_KNOBS);
    int prefix = f->prune_prefix ? f->prefix_knobs : 0;
    KT_REQUIRE(prefix >= 0 && prefix <= f->n_knobs);
    if (counts)
        memset(counts, 0, sizeof(*counts));
    int idx[OPS_MAX_KNOBS] = {0};
    int64_t subtree = 1; /* schedules that share one prefix */
    for (int k = 0; k < f->n_knobs; k++) {
        if (f->knobs[k].n_values == 0)
            return 0;
        if (k >= prefix)
            subtree *= f->knobs[k].n_values;
    }
    bool new_prefix = prefix > 0; /* idx[prefix..] are all 0: the first schedule of a prefix */
    for (;;) {
        ops_schedule s = {.family = f->id};
        for (int k = 0; k < f->n_knobs; k++)
            s.v[k] = f->knobs[k].values[idx[k]];
        int step = f->n_knobs - 1; /* the knob to advance next */
        const char *why = new_prefix ? f->prune_prefix(grp, &s, dev) : NULL;
        if (why) {
            if (counts)
                count_reason(counts, why, subtree);
            step = prefix - 1;
        } else if ((why = f->prune ? f->prune(grp, &s, dev) : NULL)) {
            if (counts)
                count_reason(counts, why, 1);
        } else {
            if (counts)
                counts->kept++;
            int rc = cb(&s, ctx);
            if (rc)
                return rc;
        }
        int k = step;
        while (k >= 0 && ++idx[k] == f->knobs[k].n_values)
            idx[k--] = 0;
        if (k < 0)
            return 0;
        new_prefix = k < prefix;
    }
}

int ops_group_subgraph(const ops_group *grp, ops_graph **out, ops_diag *d)
{
    const ops_graph *g = grp->g;
    ops_graph *s = ops_graph_new(g->name);
    int rc = -ENOMEM;
    int32_t map[OPS_GROUP_MAX_NODES * (OPS_MAX_OPERANDS + 1) + OPS_GROUP_MAX_IO];
    if (!s)
        goto fail;
    /* Same symbol table, so bound dimensions keep their symbols (and the signature its form). */
    for (int i = 0; i < g->n_syms; i++)
        if (ops_graph_sym(s, g->syms[i]) < 0)
            goto fail;
    for (int t = 0; t < g->n_tensors && t < (int)KT_ARRAY_LEN(map); t++)
        map[t] = -1;
    if (g->n_tensors > (int)KT_ARRAY_LEN(map)) {
        rc = ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "", "graph too large to extract a group");
        goto fail;
    }
    for (int i = 0; i < grp->n_in; i++) {
        const ops_tensor *t = &g->tensors[grp->in[i]];
        int idx = ops_graph_add_input(s, t->name, t->dtype, &t->shape, t->is_const);
        if (idx < 0)
            goto fail;
        map[grp->in[i]] = idx;
    }
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        int ni = ops_graph_add_node(s, n->op, g->tensors[n->out].name, &n->attrs);
        if (ni < 0)
            goto fail;
        ops_node *c = &s->nodes[ni];
        c->n_in = n->n_in;
        for (int k = 0; k < n->n_in; k++) {
            c->in[k] = n->in[k];
            if (n->in[k].tensor != OPS_SCALAR)
                c->in[k].tensor = map[n->in[k].tensor];
        }
        map[n->out] = c->out;
    }
    for (int i = 0; i < grp->n_out; i++)
        if ((rc = ops_graph_mark_output(s, map[grp->out[i]])) < 0)
            goto fail;
    if ((rc = ops_graph_validate(s, d)) < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    if (rc == -ENOMEM)
        ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "", "out of memory extracting a group");
    ops_graph_free(s);
    return rc;
}
