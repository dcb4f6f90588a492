/* Canonicalisation: composites become primitives in their numerically stable forms, transpose
 * becomes permute with an explicit perm, and reduction axes become sorted non-negative lists, so
 * that equivalent spellings of one computation give one graph (and one signature).
 *
 *   softmax     e = exp(x - max(x)); e / sum(e)
 *   log_softmax (x - max(x)) - log(sum(exp(x - max(x))))
 *   logsumexp   log(sum(exp(x - max(x)))) + max(x)
 *   layernorm   xc = x - mean(x); xc * rsqrt(mean(xc^2) + eps) [* weight] [+ bias]
 *   rmsnorm     x * rsqrt(mean(x^2) + eps) [* weight]
 *   reduction over axes in several runs (batch norm's [0, 2, 3]): one reduction per run of
 *               adjacent axes, innermost first ([2, 3], then [0]), each keeping its dimensions,
 *               then a reshape when the original drops them; a mean of equal-sized means is the
 *               mean, and the kernel families reduce one run of axes
 *   attention   with a head wider than OPS_ATTENTION_FUSED_MAX_HEAD, not causal, k and v with
 *               q's heads: softmax(matmul(q, k, transpose_b) * scale) then matmul with v (the
 *               fused kernels keep a head on chip; this materialises the scores)
 *
 * Reductions keep their dimension so the results broadcast back against x. Intermediate tensors
 * are named after the composite's output ("y.max", "y.sum"), made unique if taken. */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct canon {
    const ops_graph *src; /* validated */
    ops_graph *dst;
    int fresh; /* counter for fallback names */
} canon;

static ops_operand T(int t)
{
    return (ops_operand){.tensor = t};
}

static ops_operand S(double v)
{
    return (ops_operand){.tensor = OPS_SCALAR, .scalar = v};
}

static bool name_taken(const canon *c, const char *name)
{
    return ops_graph_find_tensor(c->src, name) >= 0 || ops_graph_find_tensor(c->dst, name) >= 0;
}

/* "<out><suffix>", else "<out><suffix>.<k>", else "_canon.<k>" when too long. */
static void fresh_name(canon *c, const char *out, const char *suffix, char *buf, size_t len)
{
    if (strlen(out) + strlen(suffix) + 8 <= OPS_MAX_NAME_LEN) {
        snprintf(buf, len, "%s%s", out, suffix);
        for (int k = 1; name_taken(c, buf); k++)
            snprintf(buf, len, "%s%s.%d", out, suffix, k);
        return;
    }
    do
        snprintf(buf, len, "_canon.%d", c->fresh++);
    while (name_taken(c, buf));
}

/* Adds one node to dst; returns its output tensor index or a negative errno. */
static int emit(canon *c, ops_op op, const char *name, const ops_attrs *a, int n_in,
                const ops_operand *in)
{
    int ni = ops_graph_add_node(c->dst, op, name, a);
    if (ni < 0)
        return ni;
    ops_node *n = &c->dst->nodes[ni];
    n->n_in = n_in;
    for (int k = 0; k < n_in; k++)
        n->in[k] = in[k];
    return n->out;
}

/* An intermediate: fresh name from the composite's output name and a suffix. */
static int step(canon *c, const char *out, const char *suffix, ops_op op, const ops_attrs *a,
                int n_in, const ops_operand *in)
{
    char name[OPS_MAX_NAME_LEN + 32];
    fresh_name(c, out, suffix, name, sizeof(name));
    return emit(c, op, name, a, n_in, in);
}

static void reduce_attrs(ops_op op, int first, int last, bool keepdim, ops_attrs *a)
{
    ops_attrs_default(op, a);
    for (int ax = first; ax <= last; ax++)
        a->axes[a->n_axes++] = ax;
    a->keepdim = keepdim;
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        if ((rc = (expr)) < 0)                                                                     \
            return rc;                                                                             \
    } while (0)

static int expand_softmax_family(canon *c, const ops_node *n, const ops_operand *in,
                                 const char *out)
{
    const ops_tensor *x = &c->src->tensors[n->in[0].tensor];
    int ax = n->attrs.axis < 0 ? n->attrs.axis + x->shape.rank : n->attrs.axis;
    ops_attrs red, none;
    int rc, mx, sub, ex, sum, lg;
    ops_attrs_default(OPS_ADD, &none);
    reduce_attrs(OPS_REDUCE_MAX, ax, ax, true, &red);
    TRY(mx = step(c, out, ".max", OPS_REDUCE_MAX, &red, 1, in));
    TRY(sub = step(c, out, ".sub", OPS_SUB, &none, 2, (ops_operand[]){in[0], T(mx)}));
    TRY(ex = step(c, out, ".exp", OPS_EXP, &none, 1, (ops_operand[]){T(sub)}));
    reduce_attrs(OPS_REDUCE_SUM, ax, ax, true, &red);
    TRY(sum = step(c, out, ".sum", OPS_REDUCE_SUM, &red, 1, (ops_operand[]){T(ex)}));
    if (n->op == OPS_SOFTMAX)
        return emit(c, OPS_DIV, out, &none, 2, (ops_operand[]){T(ex), T(sum)});
    TRY(lg = step(c, out, ".log", OPS_LOG, &none, 1, (ops_operand[]){T(sum)}));
    if (n->op == OPS_LOG_SOFTMAX)
        return emit(c, OPS_SUB, out, &none, 2, (ops_operand[]){T(sub), T(lg)});
    /* logsumexp */
    if (n->attrs.keepdim)
        return emit(c, OPS_ADD, out, &none, 2, (ops_operand[]){T(lg), T(mx)});
    int lse;
    TRY(lse = step(c, out, ".lse", OPS_ADD, &none, 2, (ops_operand[]){T(lg), T(mx)}));
    ops_attrs rs;
    ops_attrs_default(OPS_RESHAPE, &rs);
    rs.shape = c->src->tensors[n->out].shape;
    return emit(c, OPS_RESHAPE, out, &rs, 1, (ops_operand[]){T(lse)});
}

static int expand_norm(canon *c, const ops_node *n, const ops_operand *in, const char *out)
{
    const ops_tensor *x = &c->src->tensors[n->in[0].tensor];
    int r = x->shape.rank;
    int ax = n->attrs.axis < 0 ? n->attrs.axis + r : n->attrs.axis;
    bool layer = n->op == OPS_LAYERNORM;
    bool has_w = n->n_in >= 2, has_b = n->n_in >= 3;
    ops_attrs mean, none;
    ops_attrs_default(OPS_ADD, &none);
    reduce_attrs(OPS_REDUCE_MEAN, ax, r - 1, true, &mean);
    int rc, centred = -1, sq, var, vareps, rstd;
    ops_operand base = in[0];
    if (layer) {
        int mu;
        TRY(mu = step(c, out, ".mean", OPS_REDUCE_MEAN, &mean, 1, in));
        TRY(centred = step(c, out, ".xc", OPS_SUB, &none, 2, (ops_operand[]){in[0], T(mu)}));
        base = T(centred);
    }
    TRY(sq = step(c, out, ".sq", OPS_SQUARE, &none, 1, (ops_operand[]){base}));
    TRY(var = step(c, out, layer ? ".var" : ".ms", OPS_REDUCE_MEAN, &mean, 1,
                   (ops_operand[]){T(sq)}));
    TRY(vareps = step(c, out, ".eps", OPS_ADD, &none, 2, (ops_operand[]){T(var), S(n->attrs.eps)}));
    TRY(rstd = step(c, out, ".rstd", OPS_RSQRT, &none, 1, (ops_operand[]){T(vareps)}));
    if (!has_w)
        return emit(c, OPS_MUL, out, &none, 2, (ops_operand[]){base, T(rstd)});
    int norm, scaled;
    TRY(norm = step(c, out, ".norm", OPS_MUL, &none, 2, (ops_operand[]){base, T(rstd)}));
    if (!has_b)
        return emit(c, OPS_MUL, out, &none, 2, (ops_operand[]){T(norm), in[1]});
    TRY(scaled = step(c, out, ".scaled", OPS_MUL, &none, 2, (ops_operand[]){T(norm), in[1]}));
    return emit(c, OPS_ADD, out, &none, 2, (ops_operand[]){T(scaled), in[2]});
}

/* The sorted non-negative reduced axes of reduction n over x as a bit mask. */
static unsigned reduce_mask(const ops_node *n, int rank)
{
    unsigned mask = 0;
    for (int i = 0; i < n->attrs.n_axes; i++)
        mask |= 1u << (n->attrs.axes[i] < 0 ? n->attrs.axes[i] + rank : n->attrs.axes[i]);
    return mask;
}

/* Runs of adjacent set bits in mask. */
static int axis_runs(unsigned mask)
{
    int runs = 0;
    for (int i = 0; i < 32; i++)
        runs += (mask >> i & 1) && !(i > 0 && (mask >> (i - 1) & 1));
    return runs;
}

/* A reduction over several runs of axes: one per run, innermost first, keeping dimensions;
 * then the reshape that drops them when the original does. */
static int split_reduction(canon *c, const ops_node *n, const ops_operand *in, const char *out,
                           unsigned mask)
{
    int rc, cur = -1, runs = axis_runs(mask), done = 0;
    ops_operand src = in[0];
    for (int hi = 31; hi >= 0; hi--) {
        if (!(mask >> hi & 1))
            continue;
        int lo = hi;
        while (lo > 0 && (mask >> (lo - 1) & 1))
            lo--;
        ops_attrs a;
        reduce_attrs(n->op, lo, hi, true, &a);
        bool last = ++done == runs;
        if (last && n->attrs.keepdim)
            return emit(c, n->op, out, &a, 1, &src);
        TRY(cur = step(c, out, last ? ".keep" : ".part", n->op, &a, 1, &src));
        src = T(cur);
        hi = lo;
    }
    ops_attrs rs;
    ops_attrs_default(OPS_RESHAPE, &rs);
    rs.shape = c->src->tensors[n->out].shape;
    return emit(c, OPS_RESHAPE, out, &rs, 1, &src);
}

/* Whether attention node n is expanded: a head wider than the fused kernels take, without the
 * causal mask or grouped heads the expansion has no op for. */
static bool attention_expands(const ops_graph *g, const ops_node *n)
{
    if (n->op != OPS_ATTENTION || n->attrs.causal)
        return false;
    const ops_shape *q = &g->tensors[n->in[0].tensor].shape,
                    *k = &g->tensors[n->in[1].tensor].shape,
                    *v = &g->tensors[n->in[2].tensor].shape;
    if (q->d[q->rank - 1].size <= OPS_ATTENTION_FUSED_MAX_HEAD &&
        v->d[v->rank - 1].size <= OPS_ATTENTION_FUSED_MAX_HEAD)
        return false;
    for (int i = 0; i < q->rank - 2; i++)
        if (q->d[i].size != k->d[i].size)
            return false; /* grouped heads: matmul does not broadcast them */
    return true;
}

/* softmax(q k^T * scale) v as matmul, mul, the softmax expansion, matmul. */
static int expand_attention(canon *c, const ops_node *n, const ops_operand *in, const char *out)
{
    const ops_shape *q = &c->src->tensors[n->in[0].tensor].shape;
    double scale = n->attrs.has_scale ? n->attrs.scale : 1.0 / sqrt((double)q->d[q->rank - 1].size);
    ops_attrs mm, none, red;
    ops_attrs_default(OPS_MATMUL, &mm);
    ops_attrs_default(OPS_ADD, &none);
    mm.transpose_b = true;
    int rc, qk, sc, mx, sub, ex, sum, p;
    int ax = q->rank - 1;
    TRY(qk = step(c, out, ".qk", OPS_MATMUL, &mm, 2, (ops_operand[]){in[0], in[1]}));
    TRY(sc = step(c, out, ".scores", OPS_MUL, &none, 2, (ops_operand[]){T(qk), S(scale)}));
    reduce_attrs(OPS_REDUCE_MAX, ax, ax, true, &red);
    TRY(mx = step(c, out, ".max", OPS_REDUCE_MAX, &red, 1, (ops_operand[]){T(sc)}));
    TRY(sub = step(c, out, ".sub", OPS_SUB, &none, 2, (ops_operand[]){T(sc), T(mx)}));
    TRY(ex = step(c, out, ".exp", OPS_EXP, &none, 1, (ops_operand[]){T(sub)}));
    reduce_attrs(OPS_REDUCE_SUM, ax, ax, true, &red);
    TRY(sum = step(c, out, ".sum", OPS_REDUCE_SUM, &red, 1, (ops_operand[]){T(ex)}));
    TRY(p = step(c, out, ".p", OPS_DIV, &none, 2, (ops_operand[]){T(ex), T(sum)}));
    ops_attrs_default(OPS_MATMUL, &mm);
    return emit(c, OPS_MATMUL, out, &mm, 2, (ops_operand[]){T(p), in[2]});
}

static int copy_node(canon *c, const ops_node *n, const ops_operand *in, const char *out)
{
    ops_attrs a = n->attrs;
    const ops_tensor *x = n->in[0].tensor >= 0 ? &c->src->tensors[n->in[0].tensor] : NULL;
    ops_op op = n->op;
    switch (op) {
    case OPS_REDUCE_SUM:
    case OPS_REDUCE_MEAN:
    case OPS_REDUCE_MAX:
    case OPS_REDUCE_MIN: {
        KT_REQUIRE(x); /* validated: the operand is a tensor */
        unsigned mask = reduce_mask(n, x->shape.rank);
        if (axis_runs(mask) > 1)
            return split_reduction(c, n, in, out, mask);
        a.n_axes = 0;
        for (int i = 0; i < x->shape.rank; i++)
            if (mask & (1u << i))
                a.axes[a.n_axes++] = i;
        break;
    }
    case OPS_TRANSPOSE:
        KT_REQUIRE(x);
        op = OPS_PERMUTE;
        if (a.n_perm == 0) {
            a.n_perm = x->shape.rank;
            for (int i = 0; i < a.n_perm; i++)
                a.perm[i] = i;
            a.perm[a.n_perm - 2] = a.n_perm - 1;
            a.perm[a.n_perm - 1] = a.n_perm - 2;
        }
        break;
    default:
        break;
    }
    return emit(c, op, out, &a, n->n_in, in);
}

static int canon_node(canon *c, const ops_node *n)
{
    ops_operand in[OPS_MAX_OPERANDS];
    for (int k = 0; k < n->n_in; k++) {
        in[k] = n->in[k];
        if (in[k].tensor != OPS_SCALAR) {
            in[k].tensor = ops_graph_find_tensor(c->dst, c->src->tensors[n->in[k].tensor].name);
            KT_REQUIRE(in[k].tensor >= 0); /* emitted in topological order */
        }
    }
    const char *out = c->src->tensors[n->out].name;
    switch (n->op) {
    case OPS_SOFTMAX:
    case OPS_LOG_SOFTMAX:
    case OPS_LOGSUMEXP:
        return expand_softmax_family(c, n, in, out);
    case OPS_LAYERNORM:
    case OPS_RMSNORM:
        return expand_norm(c, n, in, out);
    case OPS_ATTENTION:
        if (attention_expands(c->src, n))
            return expand_attention(c, n, in, out);
        return copy_node(c, n, in, out);
    default:
        return copy_node(c, n, in, out);
    }
}

/* Nodes the expansions above emit for n; keep in step with them (test_validate checks every
 * composite against ops_graph_canonicalize). */
static int expanded_nodes(const ops_graph *g, const ops_node *n)
{
    switch (n->op) {
    case OPS_REDUCE_SUM:
    case OPS_REDUCE_MEAN:
    case OPS_REDUCE_MAX:
    case OPS_REDUCE_MIN: {
        int runs = axis_runs(reduce_mask(n, g->tensors[n->in[0].tensor].shape.rank));
        return runs > 1 ? runs + !n->attrs.keepdim : 1; /* [reshape] */
    }
    case OPS_ATTENTION:
        return attention_expands(g, n) ? 8 : 1; /* matmul, mul, max, sub, exp, sum, div, matmul */
    case OPS_SOFTMAX:
        return 5; /* max, sub, exp, sum, div */
    case OPS_LOG_SOFTMAX:
        return 6; /* max, sub, exp, sum, log, sub */
    case OPS_LOGSUMEXP:
        return n->attrs.keepdim ? 6 : 7; /* max, sub, exp, sum, log, add [, reshape] */
    case OPS_LAYERNORM:
    case OPS_RMSNORM:
        /* [mean, sub,] square, mean, add, rsqrt, mul [, mul [, add]] */
        return (n->op == OPS_LAYERNORM ? 2 : 0) + 5 + (n->n_in >= 2) + (n->n_in >= 3);
    default:
        return 1;
    }
}

int ops_graph_canonical_nodes(const ops_graph *g)
{
    int total = 0;
    for (int i = 0; i < g->n_nodes; i++)
        total += expanded_nodes(g, &g->nodes[i]);
    return total;
}

int ops_graph_canonicalize(const ops_graph *g, ops_graph **out, ops_diag *d)
{
    *out = NULL;
    int rc = -ENOMEM;
    int32_t *order = NULL;
    canon c = {0};
    ops_graph *src = ops_graph_clone(g);
    if (!src)
        goto fail;
    c.src = src;
    rc = ops_graph_validate(src, d);
    if (rc < 0)
        goto fail;
    rc = -ENOMEM;
    order = calloc((size_t)src->n_nodes + 1, sizeof(int32_t));
    c.dst = ops_graph_new(src->name);
    if (!order || !c.dst)
        goto fail;
    rc = ops_graph_topo_order(src, order, d);
    if (rc < 0)
        goto fail;
    for (int s = 0; s < src->n_syms; s++)
        if ((rc = ops_graph_sym(c.dst, src->syms[s])) < 0)
            goto fail;
    for (int t = 0; t < src->n_tensors; t++) {
        const ops_tensor *x = &src->tensors[t];
        if (x->producer >= 0)
            continue;
        rc = ops_graph_add_input(c.dst, x->name, x->dtype, &x->shape, x->is_const);
        if (rc < 0)
            goto fail;
    }
    for (int k = 0; k < src->n_nodes; k++)
        if ((rc = canon_node(&c, &src->nodes[order[k]])) < 0)
            goto fail;
    for (int i = 0; i < src->n_outputs; i++) {
        int t = ops_graph_find_tensor(c.dst, src->tensors[src->outputs[i]].name);
        KT_REQUIRE(t >= 0);
        if ((rc = ops_graph_mark_output(c.dst, t)) < 0)
            goto fail;
    }
    rc = ops_graph_validate(c.dst, d);
    if (rc < 0)
        goto fail;
    free(order);
    ops_graph_free(src);
    *out = c.dst;
    return 0;
fail:
    if (rc == -ENOMEM && d)
        ops_diag_set(d, NULL, OPS_RULE_NONE, -1, NULL, "out of memory canonicalising the graph");
    free(order);
    ops_graph_free(src);
    ops_graph_free(c.dst);
    return rc;
}
