/* row family: after a reduction: the row values, the ROW and FLAT nodes that become known, the
 * per-row outputs (ops/row/row.h lists the files). */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The row values of the reductions of accs, r<slot> (and the pair tails). */
void row_emit_finalize(rw_gen *s, kt_buf *b, const rw_acc *accs, int n_acc)
{
    const rw_info *in = s->in;
    for (int i = 0; i < n_acc; i++) {
        const rw_acc *a = &accs[i];
        const ops_node *n = row_slot_node(in, a->slot);
        char c[OPS_EMIT_COMMENT_MAX], ct[OPS_EMIT_COMMENT_MAX];
        const char *name =
            ops_emit_comment_text(in->g->tensors[in->tensor[a->slot]].name, c, sizeof(c));
        if (a->kind == RK_WELFORD) {
            kt_buf_line(b, "const float r%d = a%d; /* %s */", a->slot, a->slot, name);
            kt_buf_line(
                b, "const float r%d = a%d_m2 / %lld.0f; /* %s */", a->tail, a->slot,
                (long long)in->L,
                ops_emit_comment_text(in->g->tensors[in->tensor[a->tail]].name, ct, sizeof(ct)));
        } else if (a->kind == RK_ONLINE) {
            kt_buf_line(b, "const float r%d = a%d; /* %s */", a->slot, a->slot, name);
            kt_buf_line(
                b, "const float r%d = a%d_s; /* %s */", a->tail, a->slot,
                ops_emit_comment_text(in->g->tensors[in->tensor[a->tail]].name, ct, sizeof(ct)));
        } else if (n->op == OPS_REDUCE_MEAN) {
            kt_buf_line(b, "const float r%d = a%d / %lld.0f; /* %s */", a->slot, a->slot,
                        (long long)in->L, name);
        } else {
            kt_buf_line(b, "const float r%d = a%d; /* %s */", a->slot, a->slot, name);
        }
    }
}

/* ROW and FLAT nodes (not reductions) that become known at `level`. */
void row_emit_nodes(rw_gen *s, kt_buf *b, int level)
{
    const rw_info *in = s->in;
    for (int u = in->grp->n_in; u < in->n_slots; u++) {
        const ops_node *n = row_slot_node(in, u);
        if (in->cls[u] == CL_FULL || row_is_reduce(n->op) || in->level[u] != level)
            continue;
        row_line_start(b);
        kt_buf_printf(b, "const float r%d = ", u);
        row_emit_node_expr(s, b, u);
        char c[OPS_EMIT_COMMENT_MAX];
        kt_buf_printf(b, "; /* %s */\n",
                      ops_emit_comment_text(in->g->tensors[in->tensor[u]].name, c, sizeof(c)));
    }
}

/* Per-row outputs, written once by the row's first thread. */
void row_emit_outputs(rw_gen *s, kt_buf *b, const char *cond)
{
    const rw_info *in = s->in;
    bool any = false;
    for (int i = 0; i < in->grp->n_out; i++)
        any |= in->cls[row_slot_of(in, in->grp->out[i])] != CL_FULL;
    if (!any)
        return;
    if (cond) {
        kt_buf_line(b, "if (%s) {", cond);
        b->indent += 4;
    }
    for (int i = 0; i < in->grp->n_out; i++) {
        int u = row_slot_of(in, in->grp->out[i]);
        if (in->cls[u] == CL_FULL)
            continue;
        char pn[64], val[16];
        row_param_of(in, u, pn, sizeof(pn));
        snprintf(val, sizeof(val), "r%d", u);
        row_line_start(b);
        kt_buf_printf(b, "%s[row] = ", pn);
        ops_emit_from_float(b, in->g->tensors[in->tensor[u]].dtype, val);
        kt_buf_printf(b, ";\n");
    }
    if (cond) {
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
}
