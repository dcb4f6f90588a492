/* Validation of an op graph: structure, topological order with cycle detection, reachability,
 * and dtype/shape inference with symbolic dimensions; plus binding of symbols to sizes.
 *
 * Dimension equality is symbolic: two dimensions are equal when they name the same symbol, or are
 * both fixed with the same size. A bound symbol keeps its identity (M=512 is not "512"), so a
 * graph that validates bound also validates unbound, except for the checks that need numbers
 * (conv2d spatial sizes, reshape element counts that symbols cannot settle). */
#include "ops.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIMSTR_LEN (OPS_MAX_NAME_LEN + 48) /* one dimension as text, e.g. "M=1024" */
#define WHY_LEN    (2 * DIMSTR_LEN + 32)

typedef struct vctx {
    ops_graph *g;
    ops_diag *d;
    int node;
} vctx;

static int fail(vctx *c, ops_rule rule, const char *tensor, const char *fmt, ...) KT_PRINTF(4, 5);

static int fail(vctx *c, ops_rule rule, const char *tensor, const char *fmt, ...)
{
    char detail[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    return ops_diag_set(c->d, c->g, rule, c->node, tensor, "%s", detail);
}

/* ---- dimension helpers ---- */

static bool dim_fixed_one(ops_dim a)
{
    return a.sym == OPS_NO_SYM && a.size == 1;
}

static bool dim_known(ops_dim a)
{
    return a.size >= 0;
}

static bool dim_eq(ops_dim a, ops_dim b)
{
    return a.sym == b.sym && (a.sym >= 0 || a.size == b.size);
}

static void dim_str(const ops_graph *g, ops_dim a, char *buf, size_t len)
{
    ops_shape s = {.rank = 1, .d = {a}};
    char tmp[DIMSTR_LEN];
    ops_shape_format(g, &s, tmp, sizeof(tmp));
    size_t n = strlen(tmp);
    if (n >= 2 && tmp[0] == '[' && tmp[n - 1] == ']') {
        tmp[n - 1] = '\0';
        snprintf(buf, len, "%s", tmp + 1);
    } else {
        snprintf(buf, len, "%s", tmp);
    }
}

/* Why a and b are not equal, for messages: "512 vs 256" or "cannot prove M and N equal". */
static void mismatch_str(const ops_graph *g, ops_dim a, ops_dim b, char *buf, size_t len)
{
    char sa[DIMSTR_LEN], sb[DIMSTR_LEN];
    dim_str(g, a, sa, sizeof(sa));
    dim_str(g, b, sb, sizeof(sb));
    if (a.sym == OPS_NO_SYM && b.sym == OPS_NO_SYM)
        snprintf(buf, len, "%s vs %s", sa, sb);
    else
        snprintf(buf, len, "cannot prove %s and %s equal", sa, sb);
}

static void shape_str(const ops_graph *g, const ops_shape *s, char *buf, size_t len)
{
    ops_shape_format(g, s, buf, len);
}

/* Element count when every dimension is known; -1 when some is not, -2 on overflow. */
static int64_t numel_checked(const ops_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->d[i].size < 0)
            return -1;
        if (__builtin_mul_overflow(n, s->d[i].size, &n))
            return -2;
    }
    return n;
}

static int normalise_axis(int axis, int rank)
{
    return axis < 0 ? axis + rank : axis;
}

/* NumPy broadcasting of a (operand ai) and b (operand bi) into out. */
static int broadcast(vctx *c, const ops_shape *a, const char *an, const ops_shape *b,
                     const char *bn, ops_shape *out)
{
    int r = a->rank > b->rank ? a->rank : b->rank;
    ops_shape res = {.rank = r};
    for (int i = 0; i < r; i++) {
        int ia = i - (r - a->rank), ib = i - (r - b->rank);
        if (ia < 0) {
            res.d[i] = b->d[ib];
            continue;
        }
        if (ib < 0) {
            res.d[i] = a->d[ia];
            continue;
        }
        ops_dim x = a->d[ia], y = b->d[ib];
        if (dim_fixed_one(x))
            res.d[i] = y;
        else if (dim_fixed_one(y) || dim_eq(x, y))
            res.d[i] = x;
        else {
            char why[WHY_LEN], sa[256], sbuf[256];
            mismatch_str(c->g, x, y, why, sizeof(why));
            shape_str(c->g, a, sa, sizeof(sa));
            shape_str(c->g, b, sbuf, sizeof(sbuf));
            return fail(c, OPS_RULE_BROADCAST, bn, "'%s' %s vs '%s' %s at axis %d: %s", bn, sbuf,
                        an, sa, i, why);
        }
    }
    *out = res;
    return 0;
}

static bool sym_used_by_inputs(const ops_graph *g, int sym)
{
    for (int t = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].producer >= 0)
            continue;
        const ops_shape *s = &g->tensors[t].shape;
        for (int i = 0; i < s->rank && i < OPS_MAX_RANK; i++)
            if (s->d[i].sym == sym)
                return true;
    }
    return false;
}

/* ---- structure ---- */

static bool dtype_ok(ops_dtype dt)
{
    return dt == OPS_DT_F32 || dt == OPS_DT_F16 || dt == OPS_DT_BF16;
}

static int check_input(vctx *c, int t)
{
    const ops_tensor *x = &c->g->tensors[t];
    if (!dtype_ok(x->dtype))
        return fail(c, OPS_RULE_DTYPE, x->name,
                    "graph input '%s' has dtype %s; graphs take f32, f16 or bf16", x->name,
                    ops_dtype_name(x->dtype));
    if (x->shape.rank < 0 || x->shape.rank > OPS_MAX_RANK)
        return fail(c, OPS_RULE_SHAPE, x->name, "graph input '%s' has rank %d; at most %d", x->name,
                    x->shape.rank, OPS_MAX_RANK);
    for (int i = 0; i < x->shape.rank; i++) {
        ops_dim dm = x->shape.d[i];
        if (dm.sym >= c->g->n_syms || dm.sym < OPS_NO_SYM)
            return fail(c, OPS_RULE_SHAPE, x->name,
                        "graph input '%s' dimension %d names symbol %d, which does not exist",
                        x->name, i, (int)dm.sym);
        bool ok = dm.sym >= 0 ? (dm.size == -1 || (dm.size >= 1 && dm.size <= OPS_MAX_DIM))
                              : (dm.size >= 1 && dm.size <= OPS_MAX_DIM);
        if (!ok)
            return fail(c, OPS_RULE_SHAPE, x->name,
                        "graph input '%s' dimension %d is %" PRId64
                        "; dimensions are positive (at most 2^40)",
                        x->name, i, dm.size);
    }
    if (numel_checked(&x->shape) == -2)
        return fail(c, OPS_RULE_SHAPE, x->name, "graph input '%s' has too many elements", x->name);
    return 0;
}

static int check_structure(vctx *c)
{
    ops_graph *g = c->g;
    c->node = -1;
    if (g->n_outputs <= 0)
        return fail(c, OPS_RULE_SCHEMA, NULL, "the graph has no outputs");
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] < 0 || g->outputs[i] >= g->n_tensors)
            return fail(c, OPS_RULE_UNDEFINED, NULL, "graph output %d names tensor index %d", i,
                        (int)g->outputs[i]);
    /* Kernels write node outputs only: an output slot holding a graph input, or a second slot of
     * one tensor, would be handed back to the caller unwritten. */
    for (int i = 0; i < g->n_outputs; i++) {
        const ops_tensor *x = &g->tensors[g->outputs[i]];
        if (x->producer < 0)
            return fail(c, OPS_RULE_SCHEMA, x->name,
                        "output '%s' is a graph input: the caller already holds it", x->name);
        for (int j = 0; j < i; j++)
            if (g->outputs[j] == g->outputs[i])
                return fail(c, OPS_RULE_DUPLICATE, x->name, "graph output '%s' is listed twice",
                            x->name);
    }
    for (int t = 0; t < g->n_tensors; t++) {
        int32_t p = g->tensors[t].producer;
        if (p >= g->n_nodes || (p >= 0 && g->nodes[p].out != t))
            return fail(c, OPS_RULE_SCHEMA, g->tensors[t].name,
                        "tensor '%s' names node %d as producer, which does not produce it",
                        g->tensors[t].name, (int)p);
        if (p < 0) {
            int rc = check_input(c, t);
            if (rc < 0)
                return rc;
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const ops_node *n = &g->nodes[i];
        c->node = i;
        if (n->out < 0 || n->out >= g->n_tensors || g->tensors[n->out].producer != i)
            return fail(c, OPS_RULE_SCHEMA, NULL, "node %d has no valid output tensor", i);
        const char *out = g->tensors[n->out].name;
        if (n->op <= OPS_OP_INVALID || n->op >= OPS_OP_COUNT)
            return fail(c, OPS_RULE_UNKNOWN_OP, out, "op code %d is not an op", (int)n->op);
        const ops_op_info *info = ops_op_info_get(n->op);
        if (n->n_in < info->min_in || n->n_in > info->max_in)
            return fail(c, OPS_RULE_ARITY, out, "%s takes %d to %d operands, got %d", info->name,
                        info->min_in, info->max_in, n->n_in);
        int scalars = 0;
        for (int k = 0; k < n->n_in; k++) {
            int32_t t = n->in[k].tensor;
            if (t == OPS_SCALAR) {
                scalars++;
                if (info->kind != OPS_KIND_BINARY)
                    return fail(c, OPS_RULE_SCHEMA, out,
                                "operand %d is a number; only binary ops take scalar constants", k);
                if (!isfinite(n->in[k].scalar))
                    return fail(c, OPS_RULE_SCHEMA, out, "scalar operand %d is not finite", k);
            } else if (t < 0 || t >= g->n_tensors) {
                return fail(c, OPS_RULE_UNDEFINED, out, "operand %d names tensor index %d", k,
                            (int)t);
            }
        }
        if (scalars == n->n_in)
            return fail(c, OPS_RULE_SCHEMA, out, "both operands are numbers; one must be a tensor");
    }
    return 0;
}

/* ---- topological order ---- */

static int report_cycle(const ops_graph *g, const bool *done, ops_diag *d)
{
    /* Every node left over has an operand produced by another left-over node, so walking from
     * consumer to producer must revisit a node; the walk from that node on is a cycle. */
    int *step = malloc((size_t)g->n_nodes * sizeof(int));
    int *path = malloc((size_t)g->n_nodes * sizeof(int));
    if (!step || !path) {
        free(step);
        free(path);
        return -ENOMEM;
    }
    for (int i = 0; i < g->n_nodes; i++)
        step[i] = -1;
    int u = 0, s = 0;
    while (done[u])
        u++;
    while (step[u] < 0) {
        step[u] = s;
        path[s++] = u;
        const ops_node *n = &g->nodes[u];
        int next = -1;
        for (int k = 0; k < n->n_in && next < 0; k++) {
            int32_t t = n->in[k].tensor;
            int p = t >= 0 ? g->tensors[t].producer : -1;
            if (p >= 0 && !done[p])
                next = p;
        }
        KT_REQUIRE(next >= 0);
        u = next;
    }
    /* path[step[u] .. s) is the cycle, consumers first; print it producer first. */
    int first = step[u], lowest = u;
    char list[400] = "";
    size_t used = 0;
    for (int i = s - 1; i >= first - 1 && used < sizeof(list); i--) {
        int m = i >= first ? path[i] : path[s - 1];
        if (m < lowest)
            lowest = m;
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i == s - 1 ? "" : " -> ",
                                 g->tensors[g->nodes[m].out].name);
    }
    free(step);
    free(path);
    return ops_diag_set(d, g, OPS_RULE_CYCLE, lowest, g->tensors[g->nodes[lowest].out].name,
                        "tensors depend on themselves: %s", list);
}

int ops_graph_topo_order(const ops_graph *g, int32_t *order, ops_diag *d)
{
    int n = g->n_nodes, rc = 0;
    if (n == 0)
        return 0;
    int *indeg = calloc((size_t)n, sizeof(int));
    int *user_start = calloc((size_t)n + 1, sizeof(int));
    int *users = calloc((size_t)n * OPS_MAX_OPERANDS + 1, sizeof(int));
    bool *done = calloc((size_t)n, sizeof(bool));
    if (!indeg || !user_start || !users || !done) {
        rc = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const ops_node *nd = &g->nodes[i];
        for (int k = 0; k < nd->n_in && k < OPS_MAX_OPERANDS; k++) {
            int32_t t = nd->in[k].tensor;
            if (t == OPS_SCALAR)
                continue;
            if (t < 0 || t >= g->n_tensors) {
                rc = ops_diag_set(d, g, OPS_RULE_UNDEFINED, i, NULL,
                                  "operand %d names tensor index %d", k, (int)t);
                goto out;
            }
            int p = g->tensors[t].producer;
            if (p >= 0 && p < n) {
                indeg[i]++;
                user_start[p + 1]++;
            }
        }
    }
    for (int i = 0; i < n; i++)
        user_start[i + 1] += user_start[i];
    int *fill = calloc((size_t)n, sizeof(int));
    if (!fill) {
        rc = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const ops_node *nd = &g->nodes[i];
        for (int k = 0; k < nd->n_in && k < OPS_MAX_OPERANDS; k++) {
            int32_t t = nd->in[k].tensor;
            int p = t >= 0 ? g->tensors[t].producer : -1;
            if (p >= 0 && p < n)
                users[user_start[p] + fill[p]++] = i;
        }
    }
    free(fill);
    /* FIFO Kahn: order is where each node became ready; deterministic for a given graph. */
    int head = 0, tail = 0;
    for (int i = 0; i < n; i++)
        if (indeg[i] == 0)
            order[tail++] = i;
    while (head < tail) {
        int u = order[head++];
        done[u] = true;
        for (int e = user_start[u]; e < user_start[u + 1]; e++)
            if (--indeg[users[e]] == 0)
                order[tail++] = users[e];
    }
    if (tail < n)
        rc = report_cycle(g, done, d);
out:
    free(indeg);
    free(user_start);
    free(users);
    free(done);
    return rc;
}

static int check_reachability(vctx *c, const int32_t *order)
{
    ops_graph *g = c->g;
    bool *live = calloc((size_t)g->n_tensors, sizeof(bool));
    if (!live)
        return -ENOMEM;
    for (int i = 0; i < g->n_outputs; i++)
        live[g->outputs[i]] = true;
    for (int k = g->n_nodes - 1; k >= 0; k--) {
        const ops_node *n = &g->nodes[order[k]];
        if (!live[n->out])
            continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j].tensor >= 0)
                live[n->in[j].tensor] = true;
    }
    int rc = 0;
    for (int t = 0; t < g->n_tensors && rc == 0; t++) {
        if (live[t])
            continue;
        const ops_tensor *x = &g->tensors[t];
        c->node = x->producer;
        if (x->producer < 0)
            rc = fail(c, OPS_RULE_UNUSED, x->name, "graph input '%s' reaches no graph output",
                      x->name);
        else
            rc = fail(c, OPS_RULE_UNUSED, x->name, "'%s' reaches no graph output", x->name);
    }
    free(live);
    return rc;
}

/* ---- per-op inference ---- */

static const ops_tensor *operand(const ops_graph *g, const ops_node *n, int k)
{
    int32_t t = n->in[k].tensor;
    return t >= 0 ? &g->tensors[t] : NULL;
}

static int same_dtype(vctx *c, const ops_tensor *a, const ops_tensor *b)
{
    if (a->dtype != b->dtype)
        return fail(c, OPS_RULE_DTYPE, b->name, "'%s' is %s but '%s' is %s", b->name,
                    ops_dtype_name(b->dtype), a->name, ops_dtype_name(a->dtype));
    return 0;
}

static int infer_unary(vctx *c, const ops_node *n, ops_tensor *out)
{
    const ops_tensor *x = operand(c->g, n, 0);
    const ops_attrs *a = &n->attrs;
    out->dtype = x->dtype;
    out->shape = x->shape;
    switch (n->op) {
    case OPS_LEAKY_RELU:
        if (!isfinite(a->alpha))
            return fail(c, OPS_RULE_ATTR, out->name, "alpha must be finite");
        break;
    case OPS_HARDTANH:
        if (!isfinite(a->lo) || !isfinite(a->hi))
            return fail(c, OPS_RULE_ATTR, out->name, "hardtanh min and max must be finite");
        /* fall through */
    case OPS_CLAMP:
        if (isnan(a->lo) || isnan(a->hi))
            return fail(c, OPS_RULE_ATTR, out->name, "min and max must be numbers");
        if (a->lo > a->hi)
            return fail(c, OPS_RULE_ATTR, out->name, "min %g is greater than max %g", a->lo, a->hi);
        break;
    case OPS_CAST:
        if (!dtype_ok(a->to))
            return fail(c, OPS_RULE_DTYPE, out->name, "cannot cast to %s; use f32, f16 or bf16",
                        ops_dtype_name(a->to));
        out->dtype = a->to;
        break;
    default:
        break;
    }
    return 0;
}

static int infer_binary(vctx *c, const ops_node *n, ops_tensor *out)
{
    const ops_tensor *x = operand(c->g, n, 0), *y = operand(c->g, n, 1);
    if (!x || !y) {
        const ops_tensor *t = x ? x : y;
        out->dtype = t->dtype;
        out->shape = t->shape;
        return 0;
    }
    int rc = same_dtype(c, x, y);
    if (rc < 0)
        return rc;
    out->dtype = x->dtype;
    return broadcast(c, &x->shape, x->name, &y->shape, y->name, &out->shape);
}

/* Normalises and checks reduction axes into a bit mask. */
static int reduce_axes(vctx *c, const ops_attrs *a, const ops_tensor *x, const char *out,
                       unsigned *mask)
{
    *mask = 0;
    if (a->n_axes < 1 || a->n_axes > OPS_MAX_RANK)
        return fail(c, OPS_RULE_ATTR, out, "axes must list 1 to %d axes", OPS_MAX_RANK);
    for (int i = 0; i < a->n_axes; i++) {
        int ax = normalise_axis(a->axes[i], x->shape.rank);
        if (ax < 0 || ax >= x->shape.rank)
            return fail(c, OPS_RULE_ATTR, out, "axis %d is out of range for '%s' of rank %d",
                        a->axes[i], x->name, x->shape.rank);
        if (*mask & (1u << ax))
            return fail(c, OPS_RULE_ATTR, out, "axis %d is listed twice", a->axes[i]);
        *mask |= 1u << ax;
    }
    return 0;
}

static void reduce_shape(const ops_shape *in, unsigned mask, bool keepdim, ops_shape *out)
{
    ops_shape r = {0};
    for (int i = 0; i < in->rank; i++) {
        if (!(mask & (1u << i)))
            r.d[r.rank++] = in->d[i];
        else if (keepdim)
            r.d[r.rank++] = (ops_dim){.size = 1, .sym = OPS_NO_SYM};
    }
    *out = r;
}

static int infer_reduce(vctx *c, const ops_node *n, ops_tensor *out)
{
    const ops_tensor *x = operand(c->g, n, 0);
    unsigned mask;
    int rc = reduce_axes(c, &n->attrs, x, out->name, &mask);
    if (rc < 0)
        return rc;
    out->dtype = x->dtype;
    reduce_shape(&x->shape, mask, n->attrs.keepdim, &out->shape);
    return 0;
}

/* layernorm/rmsnorm weight and bias: shape x.shape[axis:], dtype of x. */
static int check_affine(vctx *c, const ops_tensor *x, int axis, const ops_tensor *p,
                        const char *role)
{
    if (!p)
        return fail(c, OPS_RULE_SCHEMA, NULL, "%s must be a tensor", role);
    int rc = same_dtype(c, x, p);
    if (rc < 0)
        return rc;
    ops_shape want = {.rank = x->shape.rank - axis};
    for (int i = axis; i < x->shape.rank; i++)
        want.d[i - axis] = x->shape.d[i];
    char ws[256], ps[256];
    shape_str(c->g, &want, ws, sizeof(ws));
    shape_str(c->g, &p->shape, ps, sizeof(ps));
    if (p->shape.rank != want.rank)
        return fail(c, OPS_RULE_SHAPE, p->name, "%s '%s' is %s; it must be x.shape[%d:] = %s", role,
                    p->name, ps, axis, ws);
    for (int i = 0; i < want.rank; i++)
        if (!dim_eq(p->shape.d[i], want.d[i])) {
            char why[WHY_LEN];
            mismatch_str(c->g, p->shape.d[i], want.d[i], why, sizeof(why));
            return fail(c, OPS_RULE_CONFLICT_DIM, p->name,
                        "%s '%s' is %s; it must be x.shape[%d:] = %s (%s)", role, p->name, ps, axis,
                        ws, why);
        }
    return 0;
}

/* cumsum, cumprod: x's shape and dtype, the axis inside x. */
static int infer_scan(vctx *c, const ops_node *n, ops_tensor *out)
{
    const ops_tensor *x = operand(c->g, n, 0);
    int ax = normalise_axis(n->attrs.axis, x->shape.rank);
    if (ax < 0 || ax >= x->shape.rank)
        return fail(c, OPS_RULE_SHAPE, x->name, "axis %d is out of range for '%s' of rank %d",
                    n->attrs.axis, x->name, x->shape.rank);
    out->dtype = x->dtype;
    out->shape = x->shape;
    return 0;
}

static int infer_composite(vctx *c, const ops_node *n, ops_tensor *out)
{
    const ops_tensor *x = operand(c->g, n, 0);
    const ops_attrs *a = &n->attrs;
    int rank = x->shape.rank;
    int ax = normalise_axis(a->axis, rank);
    if (ax < 0 || ax >= rank)
        return fail(c, OPS_RULE_SHAPE, x->name, "axis %d is out of range for '%s' of rank %d",
                    a->axis, x->name, rank);
    out->dtype = x->dtype;
    out->shape = x->shape;
    switch (n->op) {
    case OPS_LOGSUMEXP:
        reduce_shape(&x->shape, 1u << ax, a->keepdim, &out->shape);
        break;
    case OPS_LAYERNORM:
    case OPS_RMSNORM: {
        if (!(a->eps > 0) || !isfinite(a->eps))
            return fail(c, OPS_RULE_ATTR, out->name, "eps must be positive and finite, got %g",
                        a->eps);
        static const char *roles[] = {"x", "weight", "bias"};
        for (int k = 1; k < n->n_in; k++) {
            int rc = check_affine(c, x, ax, operand(c->g, n, k), roles[k]);
            if (rc < 0)
                return rc;
        }
        break;
    }
    default:
        break;
    }
    return 0;
}

static int check_rank(vctx *c, const ops_tensor *t, int lo, int hi, const char *what)
{
    if (t->shape.rank < lo || t->shape.rank > hi) {
        char s[256];
        shape_str(c->g, &t->shape, s, sizeof(s));
        if (lo == hi)
            return fail(c, OPS_RULE_SHAPE, t->name, "%s '%s' is %s; it must have rank %d", what,
                        t->name, s, lo);
        return fail(c, OPS_RULE_SHAPE, t->name, "%s '%s' is %s; it must have rank >= %d", what,
                    t->name, s, lo);
    }
    return 0;
}

static int conflict(vctx *c, const char *tensor, const char *what, ops_dim a, ops_dim b)
{
    char why[WHY_LEN];
    mismatch_str(c->g, a, b, why, sizeof(why));
    return fail(c, OPS_RULE_CONFLICT_DIM, tensor, "%s: %s", what, why);
}

static int infer_matmul(vctx *c, const ops_node *n, ops_tensor *out)
{
    const ops_tensor *x = operand(c->g, n, 0), *w = operand(c->g, n, 1);
    int rc;
    if ((rc = check_rank(c, x, 2, OPS_MAX_RANK, "matmul operand")) < 0 ||
        (rc = check_rank(c, w, 2, OPS_MAX_RANK, "matmul operand")) < 0 ||
        (rc = same_dtype(c, x, w)) < 0)
        return rc;
    int ra = x->shape.rank, rb = w->shape.rank;
    ops_dim m = x->shape.d[ra - (n->attrs.transpose_a ? 1 : 2)];
    ops_dim ka = x->shape.d[ra - (n->attrs.transpose_a ? 2 : 1)];
    ops_dim kb = w->shape.d[rb - (n->attrs.transpose_b ? 1 : 2)];
    ops_dim nn = w->shape.d[rb - (n->attrs.transpose_b ? 2 : 1)];
    if (!dim_eq(ka, kb)) {
        char what[2 * OPS_MAX_NAME_LEN + 64];
        snprintf(what, sizeof(what), "contraction dimension of '%s' and '%s' differs", x->name,
                 w->name);
        return conflict(c, w->name, what, ka, kb);
    }
    ops_shape ba = x->shape, bb = w->shape, batch;
    ba.rank -= 2;
    bb.rank -= 2;
    if ((rc = broadcast(c, &ba, x->name, &bb, w->name, &batch)) < 0)
        return rc;
    out->dtype = x->dtype;
    out->shape = batch;
    out->shape.d[out->shape.rank++] = m;
    out->shape.d[out->shape.rank++] = nn;
    return 0;
}

static int need_known(vctx *c, const ops_tensor *t, ops_dim dm, const char *what)
{
    if (dim_known(dm))
        return 0;
    char s[DIMSTR_LEN];
    dim_str(c->g, dm, s, sizeof(s));
    return fail(c, OPS_RULE_UNBOUND_DIM, t->name,
                "%s of '%s' is the unbound symbol %s; bind it (e.g. --shape %s=...)", what, t->name,
                s, s);
}

static int infer_conv(vctx *c, const ops_node *n, ops_tensor *out)
{
    const ops_tensor *x = operand(c->g, n, 0), *w = operand(c->g, n, 1);
    const ops_attrs *a = &n->attrs;
    const char *opname = ops_op_info_get(n->op)->name;
    int nd = ops_conv_spatial(n->op), rank = nd + 2;
    char what[64];
    int rc;
    snprintf(what, sizeof(what), "%s input", opname);
    if ((rc = check_rank(c, x, rank, rank, what)) < 0)
        return rc;
    snprintf(what, sizeof(what), "%s weight", opname);
    if ((rc = check_rank(c, w, rank, rank, what)) < 0 || (rc = same_dtype(c, x, w)) < 0)
        return rc;
    for (int i = 0; i < nd; i++) {
        if (a->stride[i] < 1)
            return fail(c, OPS_RULE_ATTR, out->name, "stride must be >= 1, got %d", a->stride[i]);
        if (a->padding[i] < 0)
            return fail(c, OPS_RULE_ATTR, out->name, "padding must be >= 0, got %d", a->padding[i]);
        if (a->dilation[i] < 1)
            return fail(c, OPS_RULE_ATTR, out->name, "dilation must be >= 1, got %d",
                        a->dilation[i]);
        if (a->input_dilation[i] < 1)
            return fail(c, OPS_RULE_ATTR, out->name, "input_dilation must be >= 1, got %d",
                        a->input_dilation[i]);
        if (a->end_padding[i] < 0)
            return fail(c, OPS_RULE_ATTR, out->name, "end_padding must be >= 0, got %d",
                        a->end_padding[i]);
    }
    if (a->groups < 1)
        return fail(c, OPS_RULE_ATTR, out->name, "groups must be >= 1, got %d", a->groups);
    if (a->layout != OPS_LAYOUT_NCHW && a->layout != OPS_LAYOUT_NHWC)
        return fail(c, OPS_RULE_ATTR, out->name, "layout must be NCHW or NHWC");
    bool nhwc = a->layout == OPS_LAYOUT_NHWC;
    int sp0 = nhwc ? 1 : 2, chax = nhwc ? rank - 1 : 1; /* first spatial axis; channel axis */
    ops_dim bn = x->shape.d[0];
    ops_dim ch = x->shape.d[chax];
    ops_dim o = w->shape.d[0];
    ops_dim wi = w->shape.d[chax];
    static const char *const names2[] = {"height", "width"}, *const names3[] = {"depth", "height",
                                                                                "width"};
    const char *const *sp_names = nd == 3 ? names3 : names2;
    for (int i = 0; i < nd; i++) {
        snprintf(what, sizeof(what), "spatial %s", sp_names[i]);
        if ((rc = need_known(c, x, x->shape.d[sp0 + i], what)) < 0)
            return rc;
        snprintf(what, sizeof(what), "kernel %s", sp_names[i]);
        if ((rc = need_known(c, w, w->shape.d[sp0 + i], what)) < 0)
            return rc;
    }
    if (a->groups == 1) {
        if (!dim_eq(ch, wi))
            return conflict(c, w->name, "weight in-channels differ from the input channels", wi,
                            ch);
    } else {
        if (!dim_known(ch) || !dim_known(o)) {
            const ops_tensor *t = dim_known(ch) ? w : x;
            char s[DIMSTR_LEN];
            dim_str(c->g, dim_known(ch) ? o : ch, s, sizeof(s));
            return fail(c, OPS_RULE_CONFLICT_DIM, t->name,
                        "groups %d: cannot prove that channels %s divide into groups", a->groups,
                        s);
        }
        if (ch.size % a->groups != 0)
            return fail(c, OPS_RULE_ATTR, out->name,
                        "groups %d does not divide the %" PRId64 " input channels of '%s'",
                        a->groups, ch.size, x->name);
        if (o.size % a->groups != 0)
            return fail(c, OPS_RULE_ATTR, out->name,
                        "groups %d does not divide the %" PRId64 " output channels of '%s'",
                        a->groups, o.size, w->name);
        if (!dim_known(wi) || wi.size * a->groups != ch.size) {
            char s[DIMSTR_LEN];
            dim_str(c->g, wi, s, sizeof(s));
            return fail(c, OPS_RULE_CONFLICT_DIM, w->name,
                        "weight in-channels %s must be channels/groups = %" PRId64, s,
                        ch.size / a->groups);
        }
    }
    if (n->n_in == 3) {
        const ops_tensor *b = operand(c->g, n, 2);
        snprintf(what, sizeof(what), "%s bias", opname);
        if ((rc = same_dtype(c, x, b)) < 0 || (rc = check_rank(c, b, 1, 1, what)) < 0)
            return rc;
        if (!dim_eq(b->shape.d[0], o))
            return conflict(c, b->name, "bias length differs from the output channels",
                            b->shape.d[0], o);
    }
    out->dtype = x->dtype;
    out->shape.rank = rank;
    out->shape.d[0] = bn;
    out->shape.d[chax] = o;
    for (int i = 0; i < nd; i++) {
        /* the input with its zeros between elements (input_dilation) and around it */
        int64_t span = (int64_t)a->dilation[i] * (w->shape.d[sp0 + i].size - 1) + 1;
        int64_t room = (x->shape.d[sp0 + i].size - 1) * a->input_dilation[i] + 1 +
                       2 * (int64_t)a->padding[i] + a->end_padding[i];
        if (span > room)
            return fail(c, OPS_RULE_SHAPE, x->name,
                        "kernel %s spans %" PRId64 " but the padded input is only %" PRId64,
                        sp_names[i], span, room);
        out->shape.d[sp0 + i] =
            (ops_dim){.size = (room - span) / a->stride[i] + 1, .sym = OPS_NO_SYM};
    }
    return 0;
}

static int infer_attention(vctx *c, const ops_node *n, ops_tensor *out)
{
    const ops_tensor *q = operand(c->g, n, 0), *k = operand(c->g, n, 1), *v = operand(c->g, n, 2);
    int rc;
    if ((rc = check_rank(c, q, 2, OPS_MAX_RANK, "attention query")) < 0 ||
        (rc = check_rank(c, k, 2, OPS_MAX_RANK, "attention key")) < 0 ||
        (rc = check_rank(c, v, 2, OPS_MAX_RANK, "attention value")) < 0 ||
        (rc = same_dtype(c, q, k)) < 0 || (rc = same_dtype(c, q, v)) < 0)
        return rc;
    int r = q->shape.rank;
    if (k->shape.rank != r || v->shape.rank != r) {
        const ops_tensor *bad = k->shape.rank != r ? k : v;
        return fail(c, OPS_RULE_SHAPE, bad->name,
                    "q, k and v must have the same rank: '%s' has %d, '%s' has %d", q->name, r,
                    bad->name, bad->shape.rank);
    }
    for (int i = 0; i < r - 2; i++) {
        /* grouped-query attention: along the head axis (the last batch axis) k and v may have
         * fewer heads than q, a whole divisor of them (query head h reads k/v head h / group) */
        ops_dim qd = q->shape.d[i], kd = k->shape.d[i];
        bool grouped = i == r - 3 && qd.sym < 0 && kd.sym < 0 && kd.size > 0 && kd.size < qd.size &&
                       qd.size % kd.size == 0;
        if (!dim_eq(qd, kd) && !grouped)
            return conflict(c, k->name,
                            i == r - 3 ? "head count of k neither equals q's nor divides it"
                                       : "batch dimensions of q and k differ",
                            qd, kd);
        if (!dim_eq(kd, v->shape.d[i]))
            return conflict(c, v->name, "batch dimensions of k and v differ", kd, v->shape.d[i]);
    }
    if (!dim_eq(q->shape.d[r - 1], k->shape.d[r - 1]))
        return conflict(c, k->name, "head dimension of k differs from q", k->shape.d[r - 1],
                        q->shape.d[r - 1]);
    if (!dim_eq(k->shape.d[r - 2], v->shape.d[r - 2]))
        return conflict(c, v->name, "sequence length of v differs from k", v->shape.d[r - 2],
                        k->shape.d[r - 2]);
    if (n->attrs.has_scale && (!isfinite(n->attrs.scale) || n->attrs.scale <= 0))
        return fail(c, OPS_RULE_ATTR, out->name, "scale must be positive and finite, got %g",
                    n->attrs.scale);
    out->dtype = q->dtype;
    out->shape = q->shape;
    out->shape.d[r - 1] = v->shape.d[r - 1];
    return 0;
}

static int check_perm(vctx *c, const ops_attrs *a, const ops_tensor *x, const char *out)
{
    if (a->n_perm != x->shape.rank)
        return fail(c, OPS_RULE_ATTR, out, "perm has %d entries but '%s' has rank %d", a->n_perm,
                    x->name, x->shape.rank);
    unsigned seen = 0;
    for (int i = 0; i < a->n_perm; i++) {
        int p = a->perm[i];
        if (p < 0 || p >= x->shape.rank || (seen & (1u << p)))
            return fail(c, OPS_RULE_ATTR, out, "perm is not a permutation of 0..%d",
                        x->shape.rank - 1);
        seen |= 1u << p;
    }
    return 0;
}

/* Symbolic element count: a constant times a multiset of symbols (counts per symbol). */
typedef struct symcount {
    int64_t konst;
    bool overflow;
    int *n; /* per symbol, g->n_syms entries */
} symcount;

static void symcount_add(symcount *s, ops_dim dm)
{
    if (dm.sym >= 0)
        s->n[dm.sym]++;
    else if (__builtin_mul_overflow(s->konst, dm.size, &s->konst))
        s->overflow = true;
}

static int infer_reshape(vctx *c, const ops_node *n, ops_tensor *out)
{
    ops_graph *g = c->g;
    const ops_tensor *x = operand(g, n, 0);
    const ops_shape *t = &n->attrs.shape;
    if (t->rank < 0 || t->rank > OPS_MAX_RANK)
        return fail(c, OPS_RULE_ATTR, out->name, "shape has rank %d; at most %d", t->rank,
                    OPS_MAX_RANK);
    int infer = -1;
    for (int i = 0; i < t->rank; i++) {
        ops_dim dm = t->d[i];
        if (dm.sym >= g->n_syms || dm.sym < OPS_NO_SYM)
            return fail(c, OPS_RULE_ATTR, out->name, "shape dimension %d names no symbol", i);
        if (dm.sym >= 0) {
            if (!sym_used_by_inputs(g, dm.sym))
                return fail(c, OPS_RULE_UNBOUND_DIM, out->name,
                            "shape names symbol %s, which no graph input uses", g->syms[dm.sym]);
            continue;
        }
        if (dm.size == -1) {
            if (infer >= 0)
                return fail(c, OPS_RULE_ATTR, out->name, "shape has more than one -1");
            infer = i;
        } else if (dm.size < 1 || dm.size > OPS_MAX_DIM) {
            return fail(c, OPS_RULE_ATTR, out->name,
                        "shape dimension %d is %" PRId64 "; dimensions are positive or -1", i,
                        dm.size);
        }
    }
    int *counts = calloc((size_t)g->n_syms * 2 + 1, sizeof(int));
    if (!counts)
        return -ENOMEM;
    symcount si = {.konst = 1, .n = counts}, st = {.konst = 1, .n = counts + g->n_syms};
    for (int i = 0; i < x->shape.rank; i++)
        symcount_add(&si, x->shape.d[i]);
    for (int i = 0; i < t->rank; i++)
        if (i != infer)
            symcount_add(&st, t->d[i]);
    ops_shape res = *t;
    bool ok = !si.overflow && !st.overflow;
    bool sym_subset = ok, sym_equal = ok;
    int rem_sym = -1, n_rem = 0;
    for (int s = 0; s < g->n_syms && ok; s++) {
        if (st.n[s] > si.n[s])
            sym_subset = false;
        if (st.n[s] != si.n[s])
            sym_equal = false;
        if (si.n[s] > st.n[s]) {
            n_rem += si.n[s] - st.n[s];
            rem_sym = s;
        }
    }
    free(counts);
    /* Take a symbol's bound value from the input, where binding put it. */
    for (int i = 0; i < res.rank; i++)
        for (int j = 0; j < x->shape.rank; j++)
            if (res.d[i].sym >= 0 && res.d[i].sym == x->shape.d[j].sym)
                res.d[i].size = x->shape.d[j].size;
    int64_t nin = numel_checked(&x->shape);
    if (infer < 0) {
        if (ok && sym_equal && si.konst == st.konst)
            goto done;
        if (nin >= 0 && numel_checked(&res) == nin)
            goto done;
    } else {
        if (ok && sym_subset && st.konst > 0 && si.konst % st.konst == 0) {
            int64_t q = si.konst / st.konst;
            if (n_rem == 0) {
                res.d[infer] = (ops_dim){.size = q, .sym = OPS_NO_SYM};
                goto done;
            }
            if (n_rem == 1 && q == 1) {
                res.d[infer] = (ops_dim){.size = -1, .sym = rem_sym};
                for (int j = 0; j < x->shape.rank; j++)
                    if (x->shape.d[j].sym == rem_sym)
                        res.d[infer].size = x->shape.d[j].size;
                goto done;
            }
        }
        res.d[infer] = (ops_dim){.size = 1, .sym = OPS_NO_SYM};
        int64_t rest = numel_checked(&res);
        if (nin >= 0 && rest > 0 && nin % rest == 0) {
            res.d[infer].size = nin / rest;
            goto done;
        }
    }
    char xs[256], ts[256];
    shape_str(g, &x->shape, xs, sizeof(xs));
    shape_str(g, t, ts, sizeof(ts));
    if (infer >= 0 && ts[0])
        return fail(c, OPS_RULE_SHAPE, x->name,
                    "cannot reshape '%s' %s to %s: the -1 is not a whole dimension (bind the "
                    "symbols, or name them in the target)",
                    x->name, xs, ts);
    return fail(c, OPS_RULE_SHAPE, x->name,
                "cannot reshape '%s' %s to %s: element counts differ (or cannot be proven equal)",
                x->name, xs, ts);
done:
    out->dtype = x->dtype;
    out->shape = res;
    return 0;
}

/* slice: per axis, out[i] = x[start + i * step] for i < size (-1: x's size, with start 0 and
 * step 1). Every index read must be inside x unless a fill is given; an axis whose size is not
 * bound yet is checked once it is. */
static int infer_slice(vctx *c, const ops_node *n, ops_tensor *out)
{
    const ops_tensor *x = operand(c->g, n, 0);
    const ops_attrs *a = &n->attrs;
    int r = x->shape.rank;
    if (a->shape.rank != r)
        return fail(c, OPS_RULE_ATTR, out->name, "slice shape has %d entries but '%s' has rank %d",
                    a->shape.rank, x->name, r);
    if ((a->n_start && a->n_start != r) || (a->n_step && a->n_step != r))
        return fail(c, OPS_RULE_ATTR, out->name,
                    "slice start and step need an entry per axis of '%s' (rank %d)", x->name, r);
    if (a->has_fill && isnan(a->fill))
        return fail(c, OPS_RULE_ATTR, out->name, "slice fill is NaN");
    out->dtype = x->dtype;
    out->shape.rank = r;
    for (int i = 0; i < r; i++) {
        ops_dim want = a->shape.d[i], have = x->shape.d[i];
        int start = a->start[i], step = a->step[i];
        if (step == 0)
            return fail(c, OPS_RULE_ATTR, out->name, "slice step of axis %d is 0", i);
        if (want.sym >= 0 || want.size == 0 || want.size < -1)
            return fail(c, OPS_RULE_ATTR, out->name,
                        "slice size of axis %d must be a positive integer, or -1 to keep '%s''s",
                        i, x->name);
        if (want.size == -1) {
            if (start != 0 || step != 1)
                return fail(c, OPS_RULE_ATTR, out->name,
                            "slice size -1 (keep) of axis %d needs start 0 and step 1", i);
            out->shape.d[i] = have;
            continue;
        }
        out->shape.d[i] = (ops_dim){.size = want.size, .sym = OPS_NO_SYM};
        int64_t first = start, last;
        if (__builtin_mul_overflow(want.size - 1, (int64_t)step, &last) ||
            __builtin_add_overflow(last, first, &last))
            return fail(c, OPS_RULE_ATTR, out->name, "slice of axis %d reaches past 2^63", i);
        if (have.size >= 0 && !a->has_fill &&
            (first < 0 || first >= have.size || last < 0 || last >= have.size))
            return fail(c, OPS_RULE_SHAPE, out->name,
                        "slice of axis %d reads indices %lld..%lld of '%s' (size %lld); give a "
                        "fill to read past its edges",
                        i, (long long)first, (long long)last, x->name, (long long)have.size);
    }
    return 0;
}

static int infer_layout(vctx *c, const ops_node *n, ops_tensor *out)
{
    const ops_tensor *x = operand(c->g, n, 0);
    const ops_attrs *a = &n->attrs;
    if (n->op == OPS_RESHAPE)
        return infer_reshape(c, n, out);
    if (n->op == OPS_SLICE)
        return infer_slice(c, n, out);
    int perm[OPS_MAX_RANK], r = x->shape.rank;
    if (n->op == OPS_TRANSPOSE && a->n_perm == 0) {
        int rc = check_rank(c, x, 2, OPS_MAX_RANK, "transpose operand");
        if (rc < 0)
            return rc;
        for (int i = 0; i < r; i++)
            perm[i] = i;
        perm[r - 2] = r - 1;
        perm[r - 1] = r - 2;
    } else {
        int rc = check_perm(c, a, x, out->name);
        if (rc < 0)
            return rc;
        memcpy(perm, a->perm, sizeof(perm));
    }
    out->dtype = x->dtype;
    out->shape.rank = r;
    for (int i = 0; i < r; i++)
        out->shape.d[i] = x->shape.d[perm[i]];
    return 0;
}

static int infer_node(vctx *c, int ni)
{
    ops_graph *g = c->g;
    ops_node *n = &g->nodes[ni];
    ops_tensor *out = &g->tensors[n->out];
    c->node = ni;
    out->dtype = OPS_DT_NONE;
    memset(&out->shape, 0, sizeof(out->shape));
    int rc;
    switch (ops_op_info_get(n->op)->kind) {
    case OPS_KIND_UNARY:
        rc = infer_unary(c, n, out);
        break;
    case OPS_KIND_BINARY:
        rc = infer_binary(c, n, out);
        break;
    case OPS_KIND_REDUCE:
        rc = infer_reduce(c, n, out);
        break;
    case OPS_KIND_COMPOSITE:
        rc = infer_composite(c, n, out);
        break;
    case OPS_KIND_MATMUL:
        rc = infer_matmul(c, n, out);
        break;
    case OPS_KIND_CONV:
        rc = infer_conv(c, n, out);
        break;
    case OPS_KIND_ATTENTION:
        rc = infer_attention(c, n, out);
        break;
    case OPS_KIND_LAYOUT:
        rc = infer_layout(c, n, out);
        break;
    case OPS_KIND_SCAN:
        rc = infer_scan(c, n, out);
        break;
    default:
        rc = fail(c, OPS_RULE_UNKNOWN_OP, out->name, "op has no inference rule");
        break;
    }
    if (rc == 0 && numel_checked(&out->shape) == -2)
        rc = fail(c, OPS_RULE_SHAPE, out->name, "'%s' has too many elements", out->name);
    return rc;
}

int ops_graph_validate(ops_graph *g, ops_diag *d)
{
    vctx c = {.g = g, .d = d, .node = -1};
    g->validated = false;
    int rc = check_structure(&c);
    if (rc < 0)
        return rc;
    int32_t *order = calloc((size_t)g->n_nodes + 1, sizeof(int32_t));
    if (!order)
        return -ENOMEM;
    rc = ops_graph_topo_order(g, order, d);
    if (rc == 0)
        rc = check_reachability(&c, order);
    for (int k = 0; rc == 0 && k < g->n_nodes; k++)
        rc = infer_node(&c, order[k]);
    free(order);
    if (rc == 0)
        g->validated = true;
    return rc;
}

/* ---- binding ---- */

int ops_graph_bind(const ops_graph *g, const ops_binding *b, int n, ops_graph **out, ops_diag *d)
{
    *out = NULL;
    int rc = -ENOMEM;
    int64_t *val = calloc((size_t)g->n_syms + 1, sizeof(int64_t));
    ops_graph *c = ops_graph_clone(g);
    if (!val || !c)
        goto fail;
    for (int s = 0; s < g->n_syms; s++)
        val[s] = -1;
    /* Symbols the graph already has bound count as earlier bindings. */
    for (int t = 0; t < c->n_tensors; t++)
        for (int i = 0; c->tensors[t].producer < 0 && i < c->tensors[t].shape.rank; i++) {
            ops_dim dm = c->tensors[t].shape.d[i];
            if (dm.sym >= 0 && dm.sym < c->n_syms && dm.size >= 0)
                val[dm.sym] = dm.size;
        }
    for (int i = 0; i < n; i++) {
        const char *name = b[i].name ? b[i].name : "";
        int s = 0;
        while (s < c->n_syms && strcmp(c->syms[s], name) != 0)
            s++;
        if (s == c->n_syms) {
            char list[300] = "";
            size_t used = 0;
            for (int k = 0; k < c->n_syms && used < sizeof(list); k++)
                used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", k ? ", " : "",
                                         c->syms[k]);
            rc = ops_diag_set(d, c, OPS_RULE_CONFLICT_DIM, -1, NULL,
                              "cannot bind %s: the graph has no symbol of that name (%s%s)",
                              KT_ESC(name), c->n_syms ? "symbols: " : "it has no symbols", list);
            goto fail;
        }
        if (b[i].value < 1 || b[i].value > OPS_MAX_DIM) {
            rc = ops_diag_set(d, c, OPS_RULE_ATTR, -1, NULL,
                              "cannot bind %s=%" PRId64 ": sizes are positive (at most 2^40)", name,
                              b[i].value);
            goto fail;
        }
        if (val[s] >= 0 && val[s] != b[i].value) {
            rc = ops_diag_set(d, c, OPS_RULE_CONFLICT_DIM, -1, NULL,
                              "%s is bound twice, to %" PRId64 " and %" PRId64, name, val[s],
                              b[i].value);
            goto fail;
        }
        val[s] = b[i].value;
    }
    for (int t = 0; t < c->n_tensors; t++) {
        ops_shape *s = &c->tensors[t].shape;
        for (int i = 0; i < s->rank && i < OPS_MAX_RANK; i++)
            if (s->d[i].sym >= 0 && s->d[i].sym < c->n_syms)
                s->d[i].size = val[s->d[i].sym];
    }
    for (int k = 0; k < c->n_nodes; k++) {
        ops_shape *s = &c->nodes[k].attrs.shape;
        for (int i = 0; c->nodes[k].op == OPS_RESHAPE && i < s->rank && i < OPS_MAX_RANK; i++)
            if (s->d[i].sym >= 0 && s->d[i].sym < c->n_syms)
                s->d[i].size = val[s->d[i].sym];
    }
    rc = ops_graph_validate(c, d);
    if (rc < 0)
        goto fail;
    free(val);
    *out = c;
    return 0;
fail:
    if (rc == -ENOMEM && d)
        ops_diag_set(d, NULL, OPS_RULE_NONE, -1, NULL, "out of memory binding the graph");
    free(val);
    ops_graph_free(c);
    return rc;
}

int ops_binding_parse(char *arg, ops_binding *b, kt_err *err)
{
    char *eq = arg ? strchr(arg, '=') : NULL;
    if (!eq || eq == arg)
        return kt_err_set(err, -EINVAL, "expected NAME=VALUE, got '%s'", arg ? arg : "");
    for (const char *p = arg; p < eq; p++) {
        bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                  (p > arg && *p >= '0' && *p <= '9');
        if (!ok)
            return kt_err_set(err, -EINVAL, "'%.*s' is not a symbol name (letters, digits, _)",
                              (int)(eq - arg), arg);
    }
    const char *num = eq + 1;
    char *end = NULL;
    errno = 0;
    long long v = (*num >= '0' && *num <= '9') ? strtoll(num, &end, 10) : 0;
    if (!end || *end != '\0' || errno == ERANGE || v < 1 || v > OPS_MAX_DIM)
        return kt_err_set(err, -EINVAL, "'%s': the value must be a positive integer (at most 2^40)",
                          arg);
    *eq = '\0';
    b->name = arg;
    b->value = v;
    return 0;
}

const char *ops_graph_first_unbound(const ops_graph *g)
{
    for (int t = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].producer >= 0)
            continue;
        const ops_shape *s = &g->tensors[t].shape;
        for (int i = 0; i < s->rank && i < OPS_MAX_RANK; i++)
            if (s->d[i].sym >= 0 && s->d[i].sym < g->n_syms && s->d[i].size < 0)
                return g->syms[s->d[i].sym];
    }
    for (int k = 0; k < g->n_nodes; k++) {
        const ops_shape *s = &g->nodes[k].attrs.shape;
        for (int i = 0; g->nodes[k].op == OPS_RESHAPE && i < s->rank && i < OPS_MAX_RANK; i++)
            if (s->d[i].sym >= 0 && s->d[i].sym < g->n_syms && s->d[i].size < 0)
                return g->syms[s->d[i].sym];
    }
    return NULL;
}
