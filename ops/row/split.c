/* row family: split_row (a kernel per level, partials through the workspace) and split_cluster (one
 * kernel, partials through distributed shared memory) (ops/row/row.h lists the files). */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Workspace layout of split_row: per level, [row][split][component] floats. */
int64_t row_ws_level_offset(const rw_info *in, const rw_plan *p, int level)
{
    int64_t off = 0;
    for (int q = 1; q < level; q++)
        off += in->n_rows * p->S * row_level_components(in, q);
    return off;
}

/* split_cluster: the offset of `level`'s partial in every block's kt_part[]. */
static int cluster_part_offset(const rw_info *in, int level)
{
    int off = 0;
    for (int q = 1; q < level; q++)
        off += row_level_components(in, q);
    return off;
}

/* Re-reads the partials of `level` and combines them, every block the same way, so all get the
 * same value. split_cluster: every thread folds the S <= 8 partials from the shared memory of
 * the cluster's blocks, s' = 0 .. S-1 in order. split_row / split_lane: thread t of a row folds
 * partials t, t + tpr, ... from the workspace, then the row's threads combine theirs like a
 * pass's partials (row_emit_group_reduce), so hundreds of chunks cost a few loads a thread. */
static void emit_combine(rw_gen *s, kt_buf *b, int level)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    bool cluster = p->strategy == ST_CLUSTER;
    rw_acc accs[RW_MAX_SLOTS];
    int n = row_level_accs(in, level, accs);
    int nc = row_level_components(in, level);
    kt_buf_line(b, "/* level %d: combine the %d partials */", level, p->S);
    for (int i = 0; i < n; i++)
        row_acc_decl(b, &accs[i]);
    if (cluster)
        kt_buf_line(b, "for (int q = 0; q < %d; q++) {", p->S);
    else
        kt_buf_line(b, "for (int q = t; q < %d; q += %d) {", p->S, p->tpr);
    b->indent += 4;
    if (cluster)
        kt_buf_line(b, "const unsigned part = kt_cluster_addr(kt_part + %d, q); /* block q's */",
                    cluster_part_offset(in, level));
    else
        kt_buf_line(b, "const float *part = ws + %lld + (row * %d + q) * %d;",
                    (long long)row_ws_level_offset(in, p, level), p->S, nc);
    int c0 = 0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < row_kind_components(accs[i].kind); c++, c0++) {
            char oth[32];
            row_acc_comp(oth, sizeof(oth), &accs[i], c, "o_");
            if (cluster)
                kt_buf_line(b, "const float %s = kt_ld_cluster(part + %d);", oth, 4 * c0);
            else
                kt_buf_line(b, "const float %s = part[%d];", oth, c0);
        }
    for (int i = 0; i < n; i++)
        row_acc_merge(b, &accs[i], "o_");
    b->indent -= 4;
    kt_buf_line(b, "}");
    if (!cluster && p->tpr > 1)
        row_emit_group_reduce(s, b, accs, n);
    row_emit_finalize(s, b, accs, n);
    row_emit_nodes(s, b, level);
}

/* The rest of a split_row / split_cluster / split_lane kernel: kt_red, which thread, row and
 * chunk (for split_cluster the chunk is the block's rank in its cluster), then body (freed),
 * closing the kernel. split_lane: lane g of every warp on row g of the block's 32 adjacent rows
 * (a row past the end clamped to the last, its stores skipped, so barriers stay uniform).
 * `reversed`: the blocks take their (rows, chunk) from the end of the grid. The kernels of a
 * split read the same chunks in turn, and blocks start roughly in blockIdx order, so a kernel
 * walking the grid backwards first reads what the previous one read last, while it is still in
 * L2 (kernels alternate: level 1 forwards, level 2 backwards, ...). */
static void emit_chunk_kernel_end(rw_gen *s, kt_buf *b, kt_buf *body, bool reversed)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    if (reversed)
        kt_buf_line(b, "    const unsigned blk = gridDim.x - 1 - blockIdx.x; /* backwards: the "
                       "kernel before read these chunks last */");
    else
        kt_buf_line(b, "    const unsigned blk = blockIdx.x;");
    if (row_lanes(p)) {
        kt_buf_line(b, "    __shared__ float kt_red[%d];",
                    p->G * row_partials(p) * (p->red_floats ? p->red_floats : 1));
        kt_buf_line(b, "    const int g = threadIdx.x %% %d; /* row group: the lane */", p->G);
        kt_buf_line(b, "    const int t = threadIdx.x / %d; /* thread in the row: the warp */",
                    p->G);
        kt_buf_line(b, "    const %s row_raw = (%s)(blk / %d) * %d + g;", s->ix, s->ix,
                    p->S, p->G);
        kt_buf_line(b, "    const bool row_ok = row_raw < %lld;", (long long)in->n_rows);
        kt_buf_line(b, "    const %s row = row_ok ? row_raw : %lld; /* clamped: barriers stay "
                       "uniform */",
                    s->ix, (long long)in->n_rows - 1);
    } else {
        if (p->tpr > 32)
            kt_buf_line(b, "    __shared__ float kt_red[%d];",
                        (p->tpr / 32) * (p->red_floats ? p->red_floats : 1));
        kt_buf_line(b, "    const int t = threadIdx.x;");
        if (p->tpr > 32) {
            kt_buf_line(b, "    const int lane = threadIdx.x %% 32;");
            kt_buf_line(b, "    const int warp = t / 32;");
        }
        kt_buf_line(b, "    const %s row = blk / %d;", s->ix, p->S);
    }
    kt_buf_line(b, "    const int sp = blk %% %d; /* which chunk of the row */", p->S);
    kt_buf_line(b, "    const %s jbeg = (%s)sp * %lld;", s->ix, s->ix, (long long)p->chunk);
    kt_buf_line(b, "    const %s jend = jbeg + %lld < %lld ? jbeg + %lld : %lld;", s->ix,
                (long long)p->chunk, (long long)in->L, (long long)p->chunk, (long long)in->L);
    kt_buf ind = {0};
    ind.indent = 4;
    row_emit_coords(s, &ind);
    if (ind.data)
        kt_buf_printf(b, "%s", ind.data);
    if (body->data)
        kt_buf_printf(b, "%s", body->data);
    kt_buf_line(b, "}");
    if (kt_buf_status(body) < 0 || kt_buf_status(&ind) < 0)
        b->oom = true;
    kt_buf_free(body);
    kt_buf_free(&ind);
}

/* Kernel `level` of split_row (level n_levels + 1: the output kernel). */
void row_emit_split_kernel(rw_gen *s, kt_buf *b, const char *entry, int level, ops_kernel_launch *k)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    row_emit_signature(s, b, entry, true, k);
    kt_buf body = {0};
    body.indent = 4;
    s->use_o = s->use_in = false;
    if (level > in->n_levels && !in->full_out) /* uniform in the block: before any barrier */
        kt_buf_line(&body, "if (sp != 0) return; /* only chunk 0's block writes the row's "
                           "outputs */");
    row_emit_setup(s, &body);
    for (int q = 1; q < level && q <= in->n_levels; q++)
        emit_combine(s, &body, q);
    if (level <= in->n_levels) {
        rw_acc accs[RW_MAX_SLOTS];
        int n = row_level_accs(in, level, accs);
        kt_buf_line(&body, "/* level %d: this chunk's partial */", level);
        row_emit_pass(s, &body, level, accs, n);
        row_emit_group_reduce(s, &body, accs, n);
        kt_buf_line(&body, "if (%s) {", row_lanes(p) ? "t == 0 && row_ok" : "threadIdx.x == 0");
        body.indent += 4;
        kt_buf_line(&body, "float *part = ws + %lld + (row * %d + sp) * %d;",
                    (long long)row_ws_level_offset(in, p, level), p->S,
                    row_level_components(in, level));
        int c0 = 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < row_kind_components(accs[i].kind); c++, c0++) {
                char own[32];
                row_acc_comp(own, sizeof(own), &accs[i], c, "");
                kt_buf_line(&body, "part[%d] = %s;", c0, own);
            }
        body.indent -= 4;
        kt_buf_line(&body, "}");
    } else {
        if (in->full_out) {
            kt_buf_line(&body, "/* this chunk of the outputs */");
            row_emit_pass(s, &body, level, NULL, 0);
        }
        row_emit_outputs(s, &body,
                         row_lanes(p) ? "sp == 0 && t == 0 && row_ok" : "sp == 0 && threadIdx.x == 0");
    }
    kt_buf_line(b, "    float *const ws = static_cast<float *>(workspace);");
    emit_chunk_kernel_end(s, b, &body, level % 2 == 0);
}

/* The one kernel of split_cluster: per level, each block's partial of its chunk goes to its
 * kt_part[], a cluster barrier, and every block combines the S partials in chunk order; then the
 * outputs of its chunk. */
void row_emit_cluster_kernel(rw_gen *s, kt_buf *b, const char *entry, ops_kernel_launch *k)
{
    const rw_info *in = s->in;
    row_emit_signature(s, b, entry, false, k);
    kt_buf body = {0};
    body.indent = 4;
    s->use_o = s->use_in = false;
    row_emit_setup(s, &body);
    for (int q = 1; q <= in->n_levels; q++) {
        rw_acc accs[RW_MAX_SLOTS];
        int n = row_level_accs(in, q, accs);
        kt_buf_line(&body, "{ /* level %d: this chunk's partial, for the cluster */", q);
        body.indent += 4;
        row_emit_pass(s, &body, q, accs, n);
        row_emit_group_reduce(s, &body, accs, n);
        kt_buf_line(&body, "if (threadIdx.x == 0) {");
        body.indent += 4;
        int c0 = 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < row_kind_components(accs[i].kind); c++, c0++) {
                char own[32];
                row_acc_comp(own, sizeof(own), &accs[i], c, "");
                kt_buf_line(&body, "kt_part[%d] = %s;", cluster_part_offset(in, q) + c0, own);
            }
        body.indent -= 4;
        kt_buf_line(&body, "}");
        body.indent -= 4;
        kt_buf_line(&body, "}");
        kt_buf_line(&body, "kt_cluster_sync(); /* every chunk's level-%d partial is in place */",
                    q);
        emit_combine(s, &body, q);
    }
    kt_buf_line(&body, "kt_cluster_sync(); /* every block has read the partials it needs from the "
                       "others: none exits before */");
    if (in->full_out) {
        kt_buf_line(&body, "/* this chunk of the outputs */");
        row_emit_pass(s, &body, in->n_levels + 1, NULL, 0);
    }
    row_emit_outputs(s, &body, "sp == 0 && threadIdx.x == 0");
    kt_buf_line(b, "    __shared__ float kt_part[%d]; /* this chunk's partial of every level */",
                cluster_part_offset(in, in->n_levels + 1));
    emit_chunk_kernel_end(s, b, &body, false); /* its rank in the cluster is its chunk */
}
