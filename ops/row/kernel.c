/* row family: the one-kernel strategies (warp_per_row, block_per_row, rows_per_block,
 * thread_per_row, lane_per_row): signature, row coordinates, the fused kernel (ops/row/row.h lists
 * the files). */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void row_emit_signature(rw_gen *s, kt_buf *b, const char *entry, bool workspace,
                        ops_kernel_launch *k)
{
    const rw_info *in = s->in;
    char cluster[48] = "";
    if (s->p->strategy == ST_CLUSTER) /* a row's chunks are one cluster */
        snprintf(cluster, sizeof(cluster), "__cluster_dims__(%d, 1, 1) ", s->p->S);
    kt_buf_printf(b, "extern \"C\" __global__ void %s__launch_bounds__(%d, 1) %s(", cluster,
                  s->p->threads, entry);
    k->n_args = 0;
    for (int i = 0; i < in->grp->n_in; i++) {
        char pn[64];
        row_param_of(in, i, pn, sizeof(pn));
        kt_buf_printf(b, "%sconst %s *__restrict__ %s", i ? ", " : "",
                      ops_emit_ctype(in->g->tensors[in->grp->in[i]].dtype), pn);
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = in->grp->in[i]};
    }
    for (int i = 0; i < in->grp->n_out; i++) {
        char pn[64];
        row_param_of(in, row_slot_of(in, in->grp->out[i]), pn, sizeof(pn));
        kt_buf_printf(b, ", %s *__restrict__ %s",
                      ops_emit_ctype(in->g->tensors[in->grp->out[i]].dtype), pn);
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = in->grp->out[i]};
    }
    if (workspace) {
        kt_buf_printf(b, ", void *__restrict__ workspace");
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 0};
    }
    kt_buf_printf(b, ")\n");
    kt_buf_line(b, "{");
}

/* The row decomposition: o (outer index) and in (inner index) as the body needs them. */
void row_emit_coords(rw_gen *s, kt_buf *b)
{
    const rw_info *in = s->in;
    if (s->use_o)
        kt_buf_line(b, in->inner > 1 ? "const %s o = row / %lld;" : "const %s o = row;", s->ix,
                    (long long)in->inner);
    if (s->use_in)
        kt_buf_line(b, "const %s in = row %% %lld;", s->ix, (long long)in->inner);
}

/* The single kernel of the non-split strategies. */
void row_emit_fused_kernel(rw_gen *s, kt_buf *b, const char *entry, ops_kernel_launch *k)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    row_emit_signature(s, b, entry, false, k);
    /* The row's body first (it tells which coordinates it reads), then the prologue. */
    kt_buf row = {0};
    row.indent = p->rseq > 1 ? 8 : 4;
    s->use_o = s->use_in = false;
    row_emit_setup(s, &row);
    row_emit_cache_fill(s, &row);
    for (int lvl = 1; lvl <= in->n_levels; lvl++) {
        rw_acc accs[RW_MAX_SLOTS];
        int n = row_level_accs(in, lvl, accs);
        kt_buf_line(&row, "/* pass %d: %s */", lvl, n > 1 ? "reductions" : "reduction");
        row_emit_pass(s, &row, lvl, accs, n);
        row_emit_group_reduce(s, &row, accs, n);
        row_emit_finalize(s, &row, accs, n);
        row_emit_nodes(s, &row, lvl);
    }
    if (in->full_out) {
        kt_buf_line(&row, "/* pass %d: outputs */", in->n_levels + 1);
        row_emit_pass(s, &row, in->n_levels + 1, NULL, 0);
    }
    bool masked_rows = in->n_rows % p->rows_per_block != 0;
    if (p->tpr > 1)
        row_emit_outputs(s, &row, masked_rows ? "t == 0 && row_ok" : "t == 0");
    else
        row_emit_outputs(s, &row, masked_rows ? "row_ok" : NULL);

    if (row_partials(p))
        kt_buf_line(b, "    __shared__ float kt_red[%d];",
                    p->G * row_partials(p) * (p->red_floats ? p->red_floats : 1));
    if (p->storage == STO_SHARED && p->n_cached)
        kt_buf_line(b, "    " OPS_DYNAMIC_SMEM " /* %lld bytes */", (long long)p->smem);
    if (p->strategy == ST_LANE) {
        kt_buf_line(b, "    const int g = threadIdx.x %% %d; /* row group: the lane */", p->G);
        kt_buf_line(b, "    const int t = threadIdx.x / %d; /* thread in the row: the warp */",
                    p->G);
    } else {
        if (p->G > 1 && p->tpr > 1)
            kt_buf_line(b, "    const int g = threadIdx.x / %d; /* row group */", p->tpr);
        else if (p->G > 1)
            kt_buf_line(b, "    const int g = threadIdx.x; /* row group: a row per thread */");
        if (p->tpr > 1 && p->G > 1)
            kt_buf_line(b, "    const int t = threadIdx.x %% %d; /* thread in the row */", p->tpr);
        else if (p->tpr > 1)
            kt_buf_line(b, "    const int t = threadIdx.x; /* thread in the row */");
    }
    if (p->tpr > 32) {
        kt_buf_line(b, "    const int lane = threadIdx.x %% 32;");
        kt_buf_line(b, "    const int warp = t / 32;");
    }
    if (p->storage == STO_SHARED && p->n_cached) {
        int idx = 0;
        for (int u = 0; u < in->n_slots; u++) {
            if (!p->cached[u])
                continue;
            /* Group g's region holds its row of every cached input, one after another. */
            char region[48];
            if (p->G > 1)
                snprintf(region, sizeof(region), "g * %d + %d", p->n_cached, idx);
            else
                snprintf(region, sizeof(region), "%d", idx);
            kt_buf_line(b,
                        "    float *const s%d = reinterpret_cast<float *>(kt_smem) + (%s) * %lld;",
                        u, region, (long long)row_smem_stride(p, in->L));
            idx++;
        }
    }
    if (p->storage == STO_REGS && p->n_cached)
        for (int u = 0; u < in->n_slots; u++)
            if (p->cached[u]) {
                char c[OPS_EMIT_COMMENT_MAX];
                kt_buf_line(
                    b, "    float c%d[%d]; /* this thread's elements of %s */", u, p->nk * p->vec,
                    ops_emit_comment_text(in->g->tensors[in->tensor[u]].name, c, sizeof(c)));
            }
    const char *gterm = p->G > 1 ? " + g" : "";
    if (p->rseq > 1) {
        kt_buf_line(b, "#pragma unroll 1");
        kt_buf_line(b, "    for (int rs = 0; rs < %d; rs++) {", p->rseq);
        kt_buf_line(b, "        const %s row_raw = (%s)blockIdx.x * %lld + rs * %d%s;", s->ix,
                    s->ix, (long long)p->rows_per_block, p->G, gterm);
    } else {
        kt_buf_line(b, "    const %s row_raw = (%s)blockIdx.x * %lld%s;", s->ix, s->ix,
                    (long long)p->rows_per_block, gterm);
    }
    kt_buf ind = {0};
    ind.indent = row.indent;
    if (masked_rows) {
        kt_buf_line(&ind, "const bool row_ok = row_raw < %lld;", (long long)in->n_rows);
        kt_buf_line(&ind,
                    "const %s row = row_ok ? row_raw : %lld; /* clamped: barriers stay "
                    "uniform */",
                    s->ix, (long long)in->n_rows - 1);
    } else {
        kt_buf_line(&ind, "const %s row = row_raw;", s->ix);
        if (p->G * p->rseq > 1 && in->full_out)
            kt_buf_line(&ind, "const bool row_ok = true;");
    }
    row_emit_coords(s, &ind);
    if (ind.data)
        kt_buf_printf(b, "%s", ind.data);
    if (row.data)
        kt_buf_printf(b, "%s", row.data);
    if (p->rseq > 1)
        kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    if (kt_buf_status(&row) < 0 || kt_buf_status(&ind) < 0)
        b->oom = true;
    kt_buf_free(&row);
    kt_buf_free(&ind);
}
