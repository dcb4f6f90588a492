/* row family: the family entry points: matches, prune, emit (the candidate assembled), the family
 * (ops/row/row.h lists the files). */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool row_matches(const ops_group *grp)
{
    rw_info *in = malloc(sizeof(*in));
    if (!in)
        return false;
    bool ok = row_analyse(grp, false, in);
    free(in);
    return ok;
}

static const char *row_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev)
{
    rw_info *in = malloc(sizeof(*in));
    rw_plan *p = malloc(sizeof(*p));
    const char *why = "shape";
    if (in && p && row_analyse(grp, s->v[K_PASS] == PASS_ONE, in))
        why = row_plan_of(in, s, dev, false, p);
    free(in);
    free(p);
    return why;
}

static int row_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                    ops_emitted *out, ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    const ops_graph *g = grp->g;
    int rc = -ENOMEM;
    rw_info *in = malloc(sizeof(*in));
    rw_plan *p = malloc(sizeof(*p));
    kt_buf b = {0}, kern = {0};
    if (!in || !p)
        goto fail;
    rc = -EINVAL;
    if (!row_analyse(grp, s->v[K_PASS] == PASS_ONE, in)) {
        ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "", "row: the group is not a row reduction");
        goto fail;
    }
    const char *why = row_plan_of(in, s, dev, false, p);
    if (why) {
        ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "", "row: schedule is pruned for this group (%s)",
                     why);
        goto fail;
    }
    rw_gen gen = {.in = in, .p = p, .ix = in->wide ? "long long" : "int"};
    gen.split = row_split_ws(p) || p->strategy == ST_CLUSTER;
    char sname[16];
    snprintf(sname, sizeof(sname), "%s", row_strategy_labels[p->strategy]);
    if (p->strategy == ST_CLUSTER) {
        ops_kernel_launch *k = &out->kernels[0];
        snprintf(k->entry, sizeof(k->entry), "ktune_row_split_cluster_t%d_%s_v%d%s", p->threads,
                 p->pass == PASS_ONE ? "one" : "multi", p->vec, grp->entry_suffix);
        kt_buf_printf(&kern, "\n");
        kt_buf_line(
            &kern, "/* %lld rows of %lld elements, %d chunks of %lld per row, a cluster per row */",
            (long long)in->n_rows, (long long)in->L, p->S, (long long)p->chunk);
        row_emit_cluster_kernel(&gen, &kern, k->entry, k);
        k->grid[0] = (uint32_t)p->grid;
        k->grid[1] = k->grid[2] = 1;
        k->block[0] = (uint32_t)p->threads;
        k->block[1] = k->block[2] = 1;
        out->n_kernels = 1;
    } else if (!gen.split) {
        ops_kernel_launch *k = &out->kernels[0];
        snprintf(k->entry, sizeof(k->entry), "ktune_row_%s_t%d_r%d_%s%s_v%d%s", sname, p->threads,
                 p->rows, p->pass == PASS_ONE ? "one" : "multi",
                 p->storage == STO_REGS     ? "_reg"
                 : p->storage == STO_SHARED ? "_smem"
                                            : "_reread",
                 p->vec, grp->entry_suffix);
        kt_buf_printf(&kern, "\n");
        kt_buf_line(&kern,
                    "/* %lld rows of %lld elements (stride %lld); %d row%s per block, "
                    "%d thread%s per row */",
                    (long long)in->n_rows, (long long)in->L, (long long)in->inner,
                    (int)p->rows_per_block, p->rows_per_block > 1 ? "s" : "", p->tpr,
                    p->tpr > 1 ? "s" : "");
        row_emit_fused_kernel(&gen, &kern, k->entry, k);
        k->grid[0] = (uint32_t)p->grid;
        k->grid[1] = k->grid[2] = 1;
        k->block[0] = (uint32_t)p->threads;
        k->block[1] = k->block[2] = 1;
        k->smem_bytes = (uint32_t)p->smem;
        out->n_kernels = 1;
    } else {
        int n_k = in->n_levels + 1;
        for (int lvl = 1; lvl <= n_k; lvl++) {
            ops_kernel_launch *k = &out->kernels[lvl - 1];
            snprintf(k->entry, sizeof(k->entry), "ktune_row_split%s_t%d_%s_v%d_k%d%s",
                     row_lanes(p) ? "_lane" : "", p->threads, p->pass == PASS_ONE ? "one" : "multi",
                     p->vec, lvl, grp->entry_suffix);
            kt_buf_printf(&kern, "\n");
            kt_buf_line(&kern,
                        "/* kernel %d of %d: %lld rows of %lld elements%s, %d chunks "
                        "of %lld per row; %s */",
                        lvl, n_k, (long long)in->n_rows, (long long)in->L,
                        row_lanes(p) ? " (strided: a lane a row, 32 rows a block)" : "", p->S,
                        (long long)p->chunk,
                        lvl <= in->n_levels ? "partial reductions into the workspace"
                                            : "combine and write the outputs");
            row_emit_split_kernel(&gen, &kern, k->entry, lvl, k);
            k->grid[0] = (uint32_t)p->grid;
            k->grid[1] = k->grid[2] = 1;
            k->block[0] = (uint32_t)p->threads;
            k->block[1] = k->block[2] = 1;
        }
        out->n_kernels = n_k;
        out->workspace_bytes = row_ws_level_offset(in, p, in->n_levels + 1) * 4;
    }
    ops_emit_header(&b, grp, s);
    /* between the header comment and the prelude, where a partition's module keeps it at file
     * scope (as ops/gemm/emit.c does) */
    if (p->strategy == ST_CLUSTER || gen.use_warp_sum) {
        kt_buf_line(
            &b, "/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */");
        if (p->strategy == ST_CLUSTER)
            kt_buf_line(&b, "#include \"ktune/cluster.cuh\"");
        if (gen.use_warp_sum)
            kt_buf_line(&b, "#include \"ktune/reduce.cuh\"");
    }
    ops_emit_shared_prelude(&b, out);
    ops_emit_vec_types(&b, gen.vec_types);
    row_emit_mm_functions(in, &b);
    if (kern.data)
        kt_buf_printf(&b, "%s", kern.data);
    if (kt_buf_status(&b) < 0 || kt_buf_status(&kern) < 0) {
        rc = -ENOMEM;
        goto fail;
    }
    out->source = kt_buf_take(&b);
    kt_buf_free(&kern);
    free(in);
    free(p);
    return 0;
fail:
    if (rc == -ENOMEM)
        ops_diag_set(d, g, OPS_RULE_NONE, -1, "", "row: out of memory");
    kt_buf_free(&b);
    kt_buf_free(&kern);
    free(in);
    free(p);
    memset(out, 0, sizeof(*out));
    return rc;
}

const ops_family ops_family_row = {
    .id = OPS_FAM_ROW,
    .name = "row",
    .n_knobs = N_KNOBS,
    .knobs = row_knobs,
    .matches = row_matches,
    .prune = row_prune,
    .emit = row_emit,
    .estimate = row_estimate,
};
