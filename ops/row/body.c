/* row family: the per-element code: kernel parameters, row offsets, loads, node expressions, the
 * FULL value of a slot (ops/row/row.h lists the files). */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kernel parameter holding slot s (an input or an output), or NULL. */
bool row_param_of(const rw_info *in, int s, char *out, size_t len)
{
    char clean[48];
    ops_emit_identifier(in->g->tensors[in->tensor[s]].name, clean, sizeof(clean));
    for (int i = 0; i < in->grp->n_in; i++)
        if (in->grp->in[i] == in->tensor[s]) {
            snprintf(out, len, "in%d_%s", i, clean);
            return true;
        }
    for (int i = 0; i < in->grp->n_out; i++)
        if (in->grp->out[i] == in->tensor[s]) {
            snprintf(out, len, "out%d_%s", i, clean);
            return true;
        }
    return false;
}

const char *row_vec_type(rw_gen *s, ops_dtype dt, char *buf, size_t len)
{
    s->vec_types |= OPS_VEC_BIT(dt, s->p->vec);
    ops_emit_vec_type_name(dt, s->p->vec, buf, len);
    return buf;
}

void row_line_start(kt_buf *b)
{
    kt_buf_printf(b, "%*s", b->indent, "");
}

/* The offset contributed by X dims [lo, hi] given `var`, the flat index over those dims, for
 * element strides st (0: broadcast). */
void row_emit_part(rw_gen *s, kt_buf *b, int lo, int hi, const int64_t *st, const char *var,
                   bool *used)
{
    const ops_shape *X = &s->in->X;
    int64_t below[OPS_MAX_RANK];
    int64_t acc = 1;
    for (int k = hi; k >= lo; k--) {
        below[k] = acc;
        acc *= X->d[k].size;
    }
    /* Contiguous: stride_k == base * below_k on every dimension that is not 1. */
    int64_t base = -1;
    bool any = false, contiguous = true;
    for (int k = lo; k <= hi; k++) {
        if (X->d[k].size == 1)
            continue;
        if (st[k])
            any = true;
        if (!st[k] || (base >= 0 && st[k] != base * below[k]))
            contiguous = false;
        if (st[k] && base < 0 && st[k] % below[k] == 0)
            base = st[k] / below[k];
        else if (st[k] && base < 0)
            contiguous = false;
    }
    if (!any) {
        kt_buf_printf(b, "0");
        return;
    }
    *used = true;
    if (contiguous) {
        if (base == 1)
            kt_buf_printf(b, "%s", var);
        else
            kt_buf_printf(b, "%s * %lld", var, (long long)base);
        return;
    }
    bool first = true;
    for (int k = lo; k <= hi; k++) {
        if (X->d[k].size == 1 || !st[k])
            continue;
        kt_buf_printf(b, "%s", first ? "" : " + ");
        first = false;
        bool outermost = true;
        for (int m = lo; m < k; m++)
            outermost &= X->d[m].size == 1;
        kt_buf_printf(b, "(%s", var);
        if (below[k] != 1)
            kt_buf_printf(b, " / %lld", (long long)below[k]);
        if (!outermost)
            kt_buf_printf(b, " %% %lld", (long long)X->d[k].size);
        kt_buf_printf(b, ")");
        if (st[k] != 1)
            kt_buf_printf(b, " * %lld", (long long)st[k]);
    }
}

/* The offset of slot u at this row (outer and inner dims only). */
void row_emit_offset(rw_gen *s, kt_buf *b, int u)
{
    const rw_info *in = s->in;
    kt_buf outer = {0}, inner = {0};
    if (in->a0 > 0)
        row_emit_part(s, &outer, 0, in->a0 - 1, in->stride[u], "o", &s->use_o);
    if (in->a1 < in->rank - 1)
        row_emit_part(s, &inner, in->a1 + 1, in->rank - 1, in->stride[u], "in", &s->use_in);
    bool has_o = outer.data && strcmp(outer.data, "0") != 0;
    bool has_in = inner.data && strcmp(inner.data, "0") != 0;
    if (has_o && has_in)
        kt_buf_printf(b, "%s + %s", outer.data, inner.data);
    else
        kt_buf_printf(b, "%s", has_o ? outer.data : has_in ? inner.data : "0");
    if (kt_buf_status(&outer) < 0 || kt_buf_status(&inner) < 0)
        b->oom = true;
    kt_buf_free(&outer);
    kt_buf_free(&inner);
}

void row_emit_to_float_of(kt_buf *b, ops_dtype dt, const char *fmt, ...)
{
    char expr[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(expr, sizeof(expr), fmt, ap);
    va_end(ap);
    ops_emit_to_float(b, dt, expr);
}

/* The float expression of node slot u from its operands' variable names. */
void row_emit_node_expr(rw_gen *s, kt_buf *b, int u)
{
    const rw_info *in = s->in;
    const ops_node *n = row_slot_node(in, u);
    char names[OPS_MAX_OPERANDS][16];
    const char *ops[OPS_MAX_OPERANDS] = {0};
    for (int k = 0; k < n->n_in; k++) {
        if (n->in[k].tensor == OPS_SCALAR) {
            ops[k] = "";
            continue;
        }
        int v = row_slot_of(in, n->in[k].tensor);
        char c = in->cls[v] == CL_FULL ? 'f' : in->cls[u] == CL_FLAT && in->node[v] < 0 ? 'q' : 'r';
        snprintf(names[k], sizeof(names[k]), "%c%d", c, v);
        ops[k] = names[k];
    }
    if (n->op == OPS_RESHAPE) {
        kt_buf_printf(b, "%s", ops[0]);
        return;
    }
    kt_buf e = {0};
    if (ops_emit_elementwise(&e, n, ops) < 0)
        kt_buf_printf(&e, "0.0f /* unsupported */");
    kt_buf_printf(b, "%s", e.data ? e.data : "");
    if (kt_buf_status(&e) < 0)
        b->oom = true;
    kt_buf_free(&e);
}

/* Emits the FULL value of slot u for the current element (lane); returns nothing, the value
 * is f<u>. */
void row_body_value(rw_body *bd, int u)
{
    rw_gen *s = bd->s;
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    if (in->cls[u] != CL_FULL || bd->done[u])
        return;
    bd->done[u] = true;
    const ops_tensor *t = &in->g->tensors[in->tensor[u]];
    const ops_node *n = row_slot_node(in, u);
    char c[OPS_EMIT_COMMENT_MAX];
    if (n && in->mm[u] && !p->cached[u]) {
        row_line_start(bd->lane);
        kt_buf_printf(bd->lane, "const float f%d = ", u);
        row_emit_mm_call(in, bd->lane, u, p->vec > 1 ? "j + l" : "j");
        kt_buf_printf(bd->lane, "; /* %s */\n", ops_emit_comment_text(t->name, c, sizeof(c)));
        return;
    }
    if (n && in->mm[u]) {
        if (p->storage == STO_REGS)
            kt_buf_line(bd->lane, "const float f%d = c%d[k * %d%s]; /* %s */", u, u, p->vec,
                        p->vec > 1 ? " + l" : "", ops_emit_comment_text(t->name, c, sizeof(c)));
        else
            kt_buf_line(bd->lane, "const float f%d = s%d[j%s]; /* %s */", u, u,
                        p->vec > 1 ? " + l" : "", ops_emit_comment_text(t->name, c, sizeof(c)));
        return;
    }
    if (n) {
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k].tensor != OPS_SCALAR)
                row_body_value(bd, row_slot_of(in, n->in[k].tensor));
        row_line_start(bd->lane);
        kt_buf_printf(bd->lane, "const float f%d = ", u);
        row_emit_node_expr(s, bd->lane, u);
        kt_buf_printf(bd->lane, "; /* %s */\n", ops_emit_comment_text(t->name, c, sizeof(c)));
        return;
    }
    const char *lanei = p->vec > 1 ? " + l" : "";
    row_line_start(bd->lane);
    kt_buf_printf(bd->lane, "const float f%d = ", u);
    if (p->cached[u] && p->storage == STO_REGS) {
        kt_buf_printf(bd->lane, "c%d[k * %d%s];\n", u, p->vec, lanei);
        return;
    }
    if (p->cached[u] && p->storage == STO_SHARED) {
        if (p->vec > 1) {
            char vt[32];
            row_vec_type(s, OPS_DT_F32, vt, sizeof(vt));
            kt_buf_line(bd->pre, "const %s sv%d = *reinterpret_cast<const %s *>(s%d + j);", vt, u,
                        vt, u);
            kt_buf_printf(bd->lane, "sv%d.v[l];\n", u);
        } else {
            kt_buf_printf(bd->lane, "s%d[j];\n", u);
        }
        return;
    }
    char pn[64];
    row_param_of(in, u, pn, sizeof(pn));
    if (p->vec > 1) {
        char vt[32];
        row_vec_type(s, t->dtype, vt, sizeof(vt));
        kt_buf_line(bd->pre, "const %s xv%d = *reinterpret_cast<const %s *>(%s + b%d + j);", vt, u,
                    vt, pn, u);
        row_emit_to_float_of(bd->lane, t->dtype, "xv%d.v[l]", u);
    } else {
        kt_buf jb = {0};
        bool used = false;
        row_emit_part(s, &jb, in->a0, in->a1, in->stride[u], "j", &used);
        row_emit_to_float_of(bd->lane, t->dtype, "%s[b%d + %s]", pn, u, jb.data ? jb.data : "0");
        kt_buf_free(&jb);
    }
    kt_buf_printf(bd->lane, ";\n");
}
