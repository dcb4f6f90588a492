/* conv family: kt_conv_store, the bias, fused elementwise chain and store of one output
 * element that every kernel calls (ops/conv/conv.h lists the files). */
#include "conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The float expression of graph tensor t at output element (n, k, p, q). */
static void operand_expr(kt_buf *e, const ops_group *grp, const conv_info *ci, const conv_names *nm,
                         int t)
{
    const ops_graph *g = grp->g;
    static const char *const nchw[] = {"n", "k", "p", "q"}, *const nhwc[] = {"n", "p", "q", "k"};
    /* 3-d: p folds the output depth and height (p = od * OH + oh) */
    static const char *const ncdhw[] = {"n", "k", "(p / OH)", "(p % OH)", "q"}, *const ndhwc[] = {
                                                                                    "n", "(p / OH)",
                                                                                    "(p % OH)", "q",
                                                                                    "k"};
    const char *const *names = ci->nd == 3 ? (ci->nhwc ? ndhwc : ncdhw) : (ci->nhwc ? nhwc : nchw);
    kt_buf off = {0};
    ops_emit_bcast_offset(&off, &g->tensors[t].shape, &g->tensors[ci->conv_out].shape, names);
    char ref[600];
    snprintf(ref, sizeof(ref), "%s[%s]", conv_param_of(grp, nm, t), off.data ? off.data : "0");
    kt_buf_free(&off);
    ops_emit_to_float(e, g->tensors[t].dtype, ref);
}

/* kt_conv_store(acc, n, k, p, q, ...): adds the bias, runs the epilogue chain and writes the
 * output element; every kernel calls it once per output element it owns. */
int conv_emit_store_fn(kt_buf *b, const ops_group *grp, const conv_info *ci, const conv_names *nm)
{
    const ops_graph *g = grp->g;
    char var[OPS_GROUP_MAX_NODES][16];
    int var_tensor[OPS_GROUP_MAX_NODES];
    int n_vars = 0, rc = 0;
    kt_buf_line(b, "/* Bias, epilogue and store of output element (n, k, p, q). */");
    static const char *const lead[] = {"float acc", "idx_t n", "idx_t k", "idx_t p", "idx_t q"};
    conv_emit_signature(b, "__device__ __forceinline__ void kt_conv_store", lead, 5, nm);
    kt_buf_line(b, "{");
    b->indent += 4;
    for (int i = 0; i < grp->n_nodes && rc == 0; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        const ops_tensor *t = &g->tensors[n->out];
        kt_buf e = {0};
        if (n == ci->node) {
            kt_buf_printf(&e, "acc");
            if (ci->bias >= 0) {
                /* The conv's bias is per output channel (not NumPy-aligned to the last axis). */
                char ref[32], fl[64];
                snprintf(ref, sizeof(ref), "%s[k]", conv_param_of(grp, nm, ci->bias));
                kt_buf_printf(&e, " + %s", conv_to_f(fl, sizeof(fl), ci->dt, ref));
            }
        } else {
            kt_buf opb[OPS_MAX_OPERANDS] = {{0}};
            const char *ops[OPS_MAX_OPERANDS] = {0};
            for (int k = 0; k < n->n_in; k++) {
                int ti = n->in[k].tensor;
                if (ti == OPS_SCALAR)
                    continue;
                const char *v = NULL;
                for (int j = 0; j < n_vars; j++)
                    if (var_tensor[j] == ti)
                        v = var[j];
                if (v)
                    kt_buf_printf(&opb[k], "%s", v);
                else
                    operand_expr(&opb[k], grp, ci, nm, ti);
                ops[k] = opb[k].data ? opb[k].data : "0.0f";
            }
            rc = ops_emit_elementwise(&e, n, ops);
            for (int k = 0; k < OPS_MAX_OPERANDS; k++)
                kt_buf_free(&opb[k]);
        }
        snprintf(var[n_vars], sizeof(var[n_vars]), "v%d", n_vars);
        var_tensor[n_vars] = n->out;
        char c[OPS_EMIT_COMMENT_MAX];
        kt_buf_line(b, "const float %s = %s; /* %s = %s */", var[n_vars], e.data ? e.data : "0.0f",
                    ops_emit_comment_text(t->name, c, sizeof(c)), ops_op_info_get(n->op)->name);
        if (kt_buf_status(&e) < 0)
            rc = -ENOMEM;
        kt_buf_free(&e);
        n_vars++;
    }
    const char *yv = "acc";
    for (int j = 0; j < n_vars; j++)
        if (var_tensor[j] == ci->y)
            yv = var[j];
    kt_buf val = {0};
    ops_emit_from_float(&val, g->tensors[ci->y].dtype, yv);
    kt_buf_line(b, "y[%s] = %s;",
                ci->nhwc ? "((n * P + p) * Q + q) * K + k" : "((n * K + k) * P + p) * Q + q",
                val.data ? val.data : yv);
    if (kt_buf_status(&val) < 0)
        rc = -ENOMEM;
    kt_buf_free(&val);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_printf(b, "\n");
    return rc;
}
