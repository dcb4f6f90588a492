/* attention family: the fused epilogue (a device function of the attention output and the
 * group's other inputs), O / l and the stores of both accumulator layouts (ops/attention/
 * attention.h lists the files). */
#include "attention.h"

#include <errno.h>
#include <stdio.h>

/* The epilogue as a device function: float value of one output element from the attention
 * output o at (batch entry bidx, row, col). */
int attn_emit_epilogue_fn(kt_buf *b, const ops_group *grp, const attn_info *a)
{
    const ops_graph *g = grp->g;
    /* The batch index is split into per-axis indices only when an input needs them. */
    bool need_batch = false;
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        for (int k = 0; k < n->n_in && grp->nodes[i] != a->att_node; k++) {
            int32_t t = n->in[k].tensor;
            if (t >= 0 && !attn_in_group(grp, t) && g->tensors[t].shape.rank > 2)
                need_batch = true;
        }
    }
    kt_buf_line(b, "/* The fused epilogue: one output element from the attention output o. */");
    kt_buf_line(b, "__device__ __forceinline__ float kt_epilogue(float o, int bidx, int row, "
                   "int col,");
    b->indent += 4;
    for (int i = 0; i < grp->n_in; i++) {
        const ops_tensor *t = &g->tensors[grp->in[i]];
        kt_buf_line(b, "const %s *__restrict__ in%d%s", ops_emit_ctype(t->dtype), i,
                    i + 1 < grp->n_in ? "," : ")");
    }
    b->indent -= 4;
    kt_buf_line(b, "{");
    b->indent += 4;
    const ops_shape *os = &g->tensors[a->att->out].shape;
    char idx_names[OPS_MAX_RANK][16];
    const char *idx[OPS_MAX_RANK];
    for (int i = 0; i < os->rank; i++) {
        if (i == os->rank - 2)
            snprintf(idx_names[i], sizeof(idx_names[i]), "row");
        else if (i == os->rank - 1)
            snprintf(idx_names[i], sizeof(idx_names[i]), "col");
        else
            snprintf(idx_names[i], sizeof(idx_names[i]), "i%d", i);
        idx[i] = idx_names[i];
    }
    if (need_batch && os->rank > 2) {
        kt_buf_line(b, "int rest = bidx;");
        for (int i = os->rank - 3; i >= 0; i--) {
            if (i > 0)
                kt_buf_line(b, "const int i%d = rest %% %lld;", i, (long long)os->d[i].size);
            else
                kt_buf_line(b, "const int i0 = rest;");
            if (i > 0)
                kt_buf_line(b, "rest /= %lld;", (long long)os->d[i].size);
        }
    } else {
        kt_buf_line(b, "(void)bidx;");
    }
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        if (grp->nodes[i] == a->att_node)
            continue;
        char ops[OPS_MAX_OPERANDS][512];
        const char *opp[OPS_MAX_OPERANDS] = {0};
        for (int k = 0; k < n->n_in; k++) {
            int32_t t = n->in[k].tensor;
            opp[k] = ops[k];
            if (t == OPS_SCALAR) {
                ops[k][0] = '\0';
            } else if (t == a->att->out) {
                snprintf(ops[k], sizeof(ops[k]), "o");
            } else if (attn_in_group(grp, t)) {
                snprintf(ops[k], sizeof(ops[k]), "v%d", g->tensors[t].producer);
            } else {
                kt_buf ix = {0}, ld = {0};
                ops_emit_bcast_offset(&ix, &g->tensors[t].shape, os, idx);
                kt_buf_printf(&ld, "in%d[%s]", attn_input_index(grp, t), ix.data ? ix.data : "0");
                kt_buf e = {0};
                ops_emit_to_float(&e, g->tensors[t].dtype, ld.data ? ld.data : "0");
                snprintf(ops[k], sizeof(ops[k]), "%s", e.data ? e.data : "0");
                int st = kt_buf_status(&ix) | kt_buf_status(&ld) | kt_buf_status(&e);
                kt_buf_free(&ix);
                kt_buf_free(&ld);
                kt_buf_free(&e);
                if (st)
                    return -ENOMEM;
            }
        }
        kt_buf_printf(b, "%*sconst float v%d = ", b->indent, "", grp->nodes[i]);
        if (ops_emit_elementwise(b, n, opp) < 0)
            return -EINVAL;
        char c[OPS_EMIT_COMMENT_MAX];
        kt_buf_printf(b, "; /* %s */\n",
                      ops_emit_comment_text(g->tensors[n->out].name, c, sizeof(c)));
    }
    kt_buf_line(b, "return v%d;", g->tensors[a->out].producer);
    attn_emit_close(b, 1);
    return 0;
}

/* Arguments of the epilogue call: every group input. */
static void epilogue_args(kt_buf *b, const ops_group *grp)
{
    for (int i = 0; i < grp->n_in; i++)
        kt_buf_printf(b, ", in%d", i);
}

/* const float NAME = the output value of element (row, col) from the attention value val: the
 * epilogue applied when the group has one. */
static void emit_value(kt_buf *b, const ops_group *grp, const attn_info *a, const char *name,
                       const char *val, const char *col)
{
    if (a->has_epilogue) {
        kt_buf b2 = {0};
        epilogue_args(&b2, grp);
        kt_buf_line(b, "const float %s = kt_epilogue(%s, bidx, row, %s%s);", name, val, col,
                    b2.data);
        kt_buf_free(&b2);
    } else {
        kt_buf_line(b, "const float %s = %s;", name, val);
    }
}

/* Opens the store of one row's columns (l is set; so is row where the argument is NULL): inv =
 * 1 / l, rows past SQ are not written, j walks nj column steps, col = col_expr.
 * store_cols_close closes it. */
static void store_cols_open(kt_buf *b, const char *row, const char *nj, const char *col_expr)
{
    kt_buf_line(b, "const float inv = l > 0.0f ? 1.0f / l : 0.0f;");
    if (row)
        kt_buf_line(b, "const int row = %s;", row);
    kt_buf_line(b, "if (row < SQ) {");
    b->indent += 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < %s; j++) {", nj);
    b->indent += 4;
    kt_buf_line(b, "const int col = %s;", col_expr);
}

static void store_cols_close(kt_buf *b)
{
    attn_emit_close(b, 2);
}

static void store_open(kt_buf *b, const char *ni)
{
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* O / l, the epilogue, and the store (rows past SQ are not written) */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %s; i++) {", ni);
    b->indent += 4;
}

static void emit_store_pair(kt_buf *b, const attn_info *a, const char *v0, const char *v1,
                            const char *off)
{
    if (a->out_dt == OPS_DT_F32) {
        kt_buf_line(b, "*reinterpret_cast<float2 *>(gO + %s) = make_float2(%s, %s);", off, v0, v1);
        return;
    }
    const char *cv = a->out_dt == OPS_DT_F16 ? "kt_f32_to_f16" : "kt_f32_to_bf16";
    kt_buf_line(b, "*reinterpret_cast<unsigned *>(gO + %s) =", off);
    kt_buf_line(b, "    (unsigned)%s(%s) | ((unsigned)%s(%s) << 16);", cv, v0, cv, v1);
}

/* O / l, the epilogue and the store of o[MT][DV / 8][4] (m16n8 C layout, rows from wq0). */
void attn_emit_mma_store(kt_buf *b, const ops_group *grp, const attn_info *a)
{
    store_open(b, "MT");
    attn_emit_for_open(b, "h", "2");
    kt_buf_line(b, "float l = row_l[i][h];");
    kt_buf_line(b, "l += __shfl_xor_sync(0xffffffffu, l, 1);");
    kt_buf_line(b, "l += __shfl_xor_sync(0xffffffffu, l, 2);");
    store_cols_open(b, "wq0 + i * 16 + g + h * 8", "DV / 8", "j * 8 + 2 * t4");
    emit_value(b, grp, a, "y0", "o[i][j][2 * h] * inv", "col");
    emit_value(b, grp, a, "y1", "o[i][j][2 * h + 1] * inv", "col + 1");
    emit_store_pair(b, a, "y0", "y1", "row * DV + col");
    store_cols_close(b);
    attn_emit_close(b, 2);
}

/* O / l, the epilogue and the store of the FFMA path's o[RQ][RD] (rows ty + TY i, columns
 * tx + TX j; l in sL). */
void attn_emit_ffma_store(kt_buf *b, const ops_group *grp, const attn_info *a)
{
    store_open(b, "RQ");
    kt_buf_line(b, "const int row = q0 + ty + TY * i;");
    kt_buf_line(b, "const float l = sL[ty + TY * i];");
    store_cols_open(b, NULL, "RD", "tx + TX * j");
    emit_value(b, grp, a, "y", "o[i][j] * inv", "col");
    kt_buf e = {0};
    ops_emit_from_float(&e, a->out_dt, "y");
    kt_buf_line(b, "gO[row * DV + col] = %s;", e.data);
    kt_buf_free(&e);
    store_cols_close(b);
    attn_emit_close(b, 1);
}
