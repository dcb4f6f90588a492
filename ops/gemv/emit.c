/* gemv family: a candidate, its epilogue and store, and the family (ops/gemv/gemv.h lists the
 * files). */
#include "gemv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kernel parameter name of group tensor t. */
static void param_name(const ops_group *grp, const gemv_info *in, int t, char *out, size_t len)
{
    if (t == in->a)
        snprintf(out, len, "a");
    else if (t == in->x)
        snprintf(out, len, "x");
    else if (t == in->y)
        snprintf(out, len, "y");
    else
        for (int i = 0; i < grp->n_in; i++)
            if (grp->in[i] == t)
                snprintf(out, len, "in%d", i);
}

/* kt_gemv_store(acc, m, ...): the epilogue chain and the store of output element m (of token
 * row t in the decode form: kt_gemv_store(acc, m, t, ...)). */
static int emit_store(kt_buf *b, const ops_group *grp, const gemv_info *in, const char *params)
{
    const ops_graph *g = grp->g;
    const ops_shape *os = &g->tensors[g->nodes[in->mm].out].shape;
    static const char *const idx_vec[] = {"m", "0"}, *const idx_dec[] = {"t", "m"};
    const char *const *idx = in->decode ? idx_dec : idx_vec;
    char var[OPS_GROUP_MAX_NODES][16];
    int var_tensor[OPS_GROUP_MAX_NODES];
    int n_vars = 0, rc = 0;
    if (in->decode) {
        kt_buf_line(b, "/* Epilogue and store of output element (t, m). */");
        kt_buf_line(b, "__device__ __forceinline__ void kt_gemv_store(float acc, int m, int t, %s)",
                    params);
    } else {
        kt_buf_line(b, "/* Epilogue and store of output element m. */");
        kt_buf_line(b, "__device__ __forceinline__ void kt_gemv_store(float acc, int m, %s)",
                    params);
    }
    kt_buf_line(b, "{");
    snprintf(var[n_vars], sizeof(var[0]), "acc");
    var_tensor[n_vars++] = g->nodes[in->mm].out;
    for (int e = 0; e < in->n_epi && rc == 0; e++) {
        const ops_node *n = &g->nodes[in->epi[e]];
        kt_buf opb[OPS_MAX_OPERANDS] = {{0}};
        const char *ops[OPS_MAX_OPERANDS] = {0};
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k].tensor;
            if (t == OPS_SCALAR)
                continue;
            const char *v = NULL;
            for (int j = 0; j < n_vars; j++)
                if (var_tensor[j] == t)
                    v = var[j];
            if (v) {
                kt_buf_printf(&opb[k], "%s", v);
            } else {
                kt_buf off = {0};
                char pn[16] = "", ref[600];
                ops_emit_bcast_offset(&off, &g->tensors[t].shape, os, idx);
                param_name(grp, in, t, pn, sizeof(pn));
                snprintf(ref, sizeof(ref), "%s[%s]", pn, off.data ? off.data : "0");
                kt_buf_free(&off);
                ops_emit_to_float(&opb[k], g->tensors[t].dtype, ref);
            }
            ops[k] = opb[k].data ? opb[k].data : "0.0f";
        }
        kt_buf ex = {0};
        rc = ops_emit_elementwise(&ex, n, ops);
        snprintf(var[n_vars], sizeof(var[0]), "v%d", e);
        var_tensor[n_vars] = n->out;
        char c[OPS_EMIT_COMMENT_MAX];
        kt_buf_line(b, "    const float %s = %s; /* %s = %s */", var[n_vars],
                    ex.data ? ex.data : "0.0f",
                    ops_emit_comment_text(g->tensors[n->out].name, c, sizeof(c)),
                    ops_op_info_get(n->op)->name);
        if (kt_buf_status(&ex) < 0)
            rc = -ENOMEM;
        kt_buf_free(&ex);
        for (int k = 0; k < OPS_MAX_OPERANDS; k++)
            kt_buf_free(&opb[k]);
        n_vars++;
    }
    const char *yv = "acc";
    for (int j = 0; j < n_vars; j++)
        if (var_tensor[j] == in->y)
            yv = var[j];
    kt_buf val = {0};
    ops_emit_from_float(&val, g->tensors[in->y].dtype, yv);
    kt_buf_line(b, in->decode ? "    y[(long long)t * M + m] = %s;" : "    y[m] = %s;",
                val.data ? val.data : yv);
    if (kt_buf_status(&val) < 0)
        rc = -ENOMEM;
    kt_buf_free(&val);
    kt_buf_line(b, "}");
    kt_buf_printf(b, "\n");
    return rc;
}

int gemv_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev, ops_emitted *out,
              ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    const ops_graph *g = grp->g;
    gemv_info in;
    if (!gemv_analyse(grp, &in))
        return ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "",
                            "gemv: the group is not A [M, K] x B [K, 1] or X [T, K] x W [N, "
                            "K]^T (T <= %d) with an elementwise epilogue",
                            GEMV_MAX_T);
    gemv_plan p;
    const char *why = gemv_plan_make(&in, s, dev, &p);
    if (why)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "",
                            "gemv: schedule is pruned for this group (%s)", why);
    ops_kernel_launch *k = &out->kernels[0];
    static const char *const load_suffix[] = {"", "_lp", "_ls"};
    if (p.math == MATH_MMA)
        snprintf(k->entry, sizeof(k->entry), "ktune_gemv_mma_t%d_r%d_k%d_d%d%s%s", p.threads,
                 p.rows, p.ksplit, p.depth, load_suffix[p.load], grp->entry_suffix);
    else
        snprintf(k->entry, sizeof(k->entry), "ktune_gemv_t%d_p%d_r%d_v%d%s%s", p.threads, p.tpr,
                 p.rows, p.vec, load_suffix[p.load], grp->entry_suffix);
    /* Parameters: the group inputs in order, then y. */
    kt_buf params = {0}, call = {0};
    for (int i = 0; i < grp->n_in; i++) {
        char pn[16] = "";
        param_name(grp, &in, grp->in[i], pn, sizeof(pn));
        kt_buf_printf(&params, "%sconst %s *__restrict__ %s", i ? ", " : "",
                      ops_emit_ctype(g->tensors[grp->in[i]].dtype), pn);
        kt_buf_printf(&call, "%s%s", i ? ", " : "", pn);
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->in[i]};
    }
    kt_buf_printf(&params, ", %s *__restrict__ y", ops_emit_ctype(g->tensors[in.y].dtype));
    kt_buf_printf(&call, ", y");
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = in.y};

    kt_buf b = {0};
    ops_emit_header(&b, grp, s);
    /* between the header comment and the prelude, where a partition's module keeps it at file
     * scope (as ops/gemm/emit.c does) */
    kt_buf_line(&b,
                "/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */");
    if (p.load != LOAD_CACHED)
        kt_buf_line(&b, "#include \"ktune/memory.cuh\"");
    if (p.math == MATH_MMA)
        kt_buf_line(&b, "#include \"ktune/mma.cuh\"");
    else
        kt_buf_line(&b, "#include \"ktune/reduce.cuh\"");
    ops_emit_shared_prelude(&b, out);
    kt_buf_printf(&b, "\n");
    if (in.decode || p.math == MATH_MMA)
        kt_buf_line(&b, "constexpr int M = %lld, K = %lld, T = %lld; /* rows of A, tokens */",
                    (long long)in.M, (long long)in.K, (long long)in.T);
    else
        kt_buf_line(&b, "constexpr int M = %lld, K = %lld;", (long long)in.M, (long long)in.K);
    if (p.math == MATH_MMA) {
        kt_buf_line(&b, "constexpr int THREADS = %d, R = %d; /* R: blocks of 16 rows a warp */",
                    p.threads, p.rows);
    } else {
        kt_buf_line(&b, "constexpr int THREADS = %d, TPR = %d, R = %d, VEC = %d;", p.threads, p.tpr,
                    p.rows, p.vec);
        kt_buf_line(&b, "constexpr int GROUPS = THREADS / TPR; /* lane groups per block */");
    }
    kt_buf_printf(&b, "\n");
    int rc = emit_store(&b, grp, &in, params.data);
    if (p.math == MATH_MMA)
        gemv_emit_mma(&b, &in, &p, k->entry, params.data, call.data);
    else if (in.decode)
        gemv_emit_ffma_decode(&b, &in, &p, k->entry, params.data, call.data);
    else
        gemv_emit_ffma_vector(&b, &in, &p, k->entry, params.data, call.data);
    k->grid[0] = (uint32_t)p.grid;
    k->grid[1] = k->grid[2] = 1;
    k->block[0] = (uint32_t)p.threads;
    k->block[1] = k->block[2] = 1;
    if (rc == 0 && kt_buf_status(&b) < 0)
        rc = -ENOMEM;
    kt_buf_free(&params);
    kt_buf_free(&call);
    if (rc < 0) {
        kt_buf_free(&b);
        return rc == -ENOMEM ? rc : ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "", "gemv: epilogue");
    }
    out->source = b.data;
    out->n_kernels = 1;
    return 0;
}

const ops_family ops_family_gemv = {
    .id = OPS_FAM_GEMV,
    .name = "gemv",
    .n_knobs = N_KNOBS,
    .knobs = gemv_knobs,
    .matches = gemv_matches,
    .prune = gemv_prune,
    .emit = gemv_emit,
    .estimate = gemv_estimate,
};
