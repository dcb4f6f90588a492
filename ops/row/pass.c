/* row family: a pass over the row: row setup, the element loop, the row cache (registers, shared
 * memory), one pass per level and the output pass (ops/row/row.h lists the files). */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Row-level loads: per-row inputs and the row bases of the FULL inputs and outputs. */
void row_emit_setup(rw_gen *s, kt_buf *b)
{
    const rw_info *in = s->in;
    for (int u = 0; u < in->n_slots; u++) {
        bool out_full = false;
        for (int i = 0; i < in->grp->n_out; i++)
            out_full |= in->grp->out[i] == in->tensor[u] && in->cls[u] == CL_FULL;
        bool is_in = in->node[u] < 0;
        if (!(is_in && in->cls[u] == CL_FULL) && !out_full)
            continue;
        row_line_start(b);
        kt_buf_printf(b, "const %s b%d = ", s->ix, u);
        row_emit_offset(s, b, u);
        char c[OPS_EMIT_COMMENT_MAX];
        kt_buf_printf(b, "; /* row start in %s */\n",
                      ops_emit_comment_text(in->g->tensors[in->tensor[u]].name, c, sizeof(c)));
    }
    for (int u = 0; u < in->grp->n_in; u++) {
        const ops_tensor *t = &in->g->tensors[in->tensor[u]];
        char pn[64];
        row_param_of(in, u, pn, sizeof(pn));
        if (in->flat_use[u]) {
            row_line_start(b);
            kt_buf_printf(b, "const float q%d = ", u);
            row_emit_to_float_of(b, t->dtype, "%s[%s]", pn,
                                 ops_shape_numel(&t->shape) == 1 ? "0" : "row");
            kt_buf_printf(b, ";\n");
        }
        if (in->cls[u] != CL_ROW)
            continue;
        kt_buf off = {0};
        row_emit_offset(s, &off, u);
        row_line_start(b);
        kt_buf_printf(b, "const float r%d = ", u);
        row_emit_to_float_of(b, t->dtype, "%s[%s]", pn, off.data ? off.data : "0");
        kt_buf_printf(b, ";\n");
        kt_buf_free(&off);
    }
    row_emit_nodes(s, b, 0);
}

/* The loop over this thread's elements of the row (or chunk), with `body` run per element.
 * j is the element index along the row (lane 0 of a vector). */
static void emit_loop_open(rw_gen *s, kt_buf *b, bool full_unroll)
{
    const rw_plan *p = s->p;
    int64_t span = (int64_t)p->tpr * p->vec;
    if (full_unroll)
        kt_buf_line(b, "#pragma unroll");
    else
        kt_buf_line(b, "#pragma unroll %d", p->nk < 4 ? p->nk : 4);
    kt_buf_line(b, "for (int k = 0; k < %d; k++) {", p->nk);
    b->indent += 4;
    /* j = (k * tpr + t) * vec, spelled without the trivial factors */
    char idx[64];
    if (p->tpr == 1)
        snprintf(idx, sizeof(idx), "k");
    else
        snprintf(idx, sizeof(idx), "(k * %d + t)", p->tpr);
    if (p->vec > 1)
        snprintf(idx + strlen(idx), sizeof(idx) - strlen(idx), " * %d", p->vec);
    kt_buf_line(b, "const %s j = %s%s;", s->ix, s->split ? "jbeg + " : "", idx);
    bool masked =
        s->split ? (p->chunk % span != 0 || s->in->L % p->chunk != 0) : s->in->L % span != 0;
    if (masked) {
        if (s->split)
            kt_buf_line(b, "if (j < jend) {");
        else
            kt_buf_line(b, "if (j < %lld) {", (long long)s->in->L);
        b->indent += 4;
    }
}

static void emit_loop_close(rw_gen *s, kt_buf *b)
{
    const rw_plan *p = s->p;
    int64_t span = (int64_t)p->tpr * p->vec;
    bool masked =
        s->split ? (p->chunk % span != 0 || s->in->L % p->chunk != 0) : s->in->L % span != 0;
    if (masked) {
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
}

/* Opens the loop over the vec elements of one access and starts the line caching element l of
 * slot u: into registers c<u>[], or into `shared_dst` (shared memory or the vector staged for
 * it). The caller ends the line and closes the loop (indent - 4). */
static void emit_lane_store_open(kt_buf *b, const rw_plan *p, int u, const char *shared_dst)
{
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int l = 0; l < %d; l++)", p->vec);
    b->indent += 4;
    row_line_start(b);
    if (p->storage == STO_REGS)
        kt_buf_printf(b, "c%d[k * %d + l] = ", u, p->vec);
    else
        kt_buf_printf(b, "%s = ", shared_dst);
}

/* Fills the row cache (registers c<u>[] or shared s<u>[]) of every cached input. */
void row_emit_cache_fill(rw_gen *s, kt_buf *b)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    if (!p->n_cached)
        return;
    kt_buf_line(b, "/* keep this row of %s in %s */", p->n_cached > 1 ? "the inputs" : "the input",
                p->storage == STO_REGS ? "registers" : "shared memory");
    emit_loop_open(s, b, p->storage == STO_REGS);
    for (int u = 0; u < in->n_slots; u++) {
        if (!p->cached[u])
            continue;
        const ops_tensor *t = &in->g->tensors[in->tensor[u]];
        char pn[64], vt[32], ft[32];
        if (in->mm[u]) { /* computed once per element, then kept */
            char dst[32];
            snprintf(dst, sizeof(dst), "s%d[j + l]", u);
            emit_lane_store_open(b, p, u, dst);
            row_emit_mm_call(in, b, u, "j + l");
            kt_buf_printf(b, ";\n");
            b->indent -= 4;
            continue;
        }
        row_param_of(in, u, pn, sizeof(pn));
        if (p->vec == 1) {
            row_line_start(b);
            if (p->storage == STO_REGS)
                kt_buf_printf(b, "c%d[k] = ", u);
            else
                kt_buf_printf(b, "s%d[j] = ", u);
            kt_buf jb = {0};
            bool used = false;
            row_emit_part(s, &jb, in->a0, in->a1, in->stride[u], "j", &used);
            row_emit_to_float_of(b, t->dtype, "%s[b%d + %s]", pn, u, jb.data ? jb.data : "0");
            kt_buf_free(&jb);
            kt_buf_printf(b, ";\n");
            continue;
        }
        row_vec_type(s, t->dtype, vt, sizeof(vt));
        kt_buf_line(b, "{");
        b->indent += 4;
        kt_buf_line(b, "const %s v = *reinterpret_cast<const %s *>(%s + b%d + j);", vt, vt, pn, u);
        if (p->storage == STO_SHARED) {
            row_vec_type(s, OPS_DT_F32, ft, sizeof(ft));
            kt_buf_line(b, "%s w;", ft);
        }
        emit_lane_store_open(b, p, u, "w.v[l]");
        ops_emit_to_float(b, t->dtype, "v.v[l]");
        kt_buf_printf(b, ";\n");
        b->indent -= 4;
        if (p->storage == STO_SHARED)
            kt_buf_line(b, "*reinterpret_cast<%s *>(s%d + j) = w;", ft, u);
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
    emit_loop_close(s, b);
}

/* One pass: accumulates the reductions of `level` (level > n_levels: writes the FULL outputs
 * instead). */
void row_emit_pass(rw_gen *s, kt_buf *b, int level, const rw_acc *accs, int n_acc)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    bool outputs = level > in->n_levels;
    for (int i = 0; i < n_acc; i++)
        row_acc_decl(b, &accs[i]);
    emit_loop_open(s, b, p->storage == STO_REGS && p->n_cached);
    kt_buf pre = {0}, lane = {0};
    pre.indent = b->indent;
    lane.indent = b->indent + (p->vec > 1 ? 4 : 0);
    rw_body bd = {.s = s, .pre = &pre, .lane = &lane};
    if (!outputs) {
        for (int i = 0; i < n_acc; i++) {
            int src = row_acc_source(in, accs[i].slot);
            row_body_value(&bd, src);
            char v[16];
            snprintf(v, sizeof(v), "f%d", src);
            row_acc_update(&lane, &accs[i], v);
        }
    } else {
        for (int i = 0; i < in->grp->n_out; i++) {
            int u = row_slot_of(in, in->grp->out[i]);
            if (in->cls[u] != CL_FULL)
                continue;
            row_body_value(&bd, u);
            const ops_tensor *t = &in->g->tensors[in->tensor[u]];
            char pn[64], val[16];
            row_param_of(in, u, pn, sizeof(pn));
            snprintf(val, sizeof(val), "f%d", u);
            row_line_start(&lane);
            if (p->vec > 1) {
                char vt[32];
                row_vec_type(s, t->dtype, vt, sizeof(vt));
                kt_buf_line(&pre, "%s o%d;", vt, u);
                kt_buf_printf(&lane, "o%d.v[l] = ", u);
            } else {
                kt_buf jb = {0};
                bool used = false;
                row_emit_part(s, &jb, in->a0, in->a1, in->stride[u], "j", &used);
                if (s->p->G * s->p->rseq > 1) {
                    kt_buf_printf(&lane, "if (row_ok)\n");
                    lane.indent += 4;
                    row_line_start(&lane);
                    lane.indent -= 4;
                }
                kt_buf_printf(&lane, "%s[b%d + %s] = ", pn, u, jb.data ? jb.data : "0");
                kt_buf_free(&jb);
            }
            ops_emit_from_float(&lane, t->dtype, val);
            kt_buf_printf(&lane, ";\n");
        }
    }
    if (pre.data)
        kt_buf_printf(b, "%s", pre.data);
    if (p->vec > 1) {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int l = 0; l < %d; l++) {", p->vec);
    }
    if (lane.data)
        kt_buf_printf(b, "%s", lane.data);
    if (p->vec > 1)
        kt_buf_line(b, "}");
    if (outputs && p->vec > 1) {
        for (int i = 0; i < in->grp->n_out; i++) {
            int u = row_slot_of(in, in->grp->out[i]);
            if (in->cls[u] != CL_FULL)
                continue;
            char pn[64], vt[32];
            row_param_of(in, u, pn, sizeof(pn));
            row_vec_type(s, in->g->tensors[in->tensor[u]].dtype, vt, sizeof(vt));
            if (p->G * p->rseq > 1) {
                kt_buf_line(b, "if (row_ok)");
                b->indent += 4;
            }
            kt_buf_line(b, "*reinterpret_cast<%s *>(%s + b%d + j) = o%d;", vt, pn, u, u);
            if (p->G * p->rseq > 1)
                b->indent -= 4;
        }
    }
    if (kt_buf_status(&pre) < 0 || kt_buf_status(&lane) < 0)
        b->oom = true;
    kt_buf_free(&pre);
    kt_buf_free(&lane);
    emit_loop_close(s, b);
}
