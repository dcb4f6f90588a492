/* The CPU fp64 reference interpreter: the trusted answer every candidate kernel is verified
 * against. Clarity over speed: each op is a direct loop nest over dense row-major doubles.
 *
 * Every op of graph.h is interpreted directly, composites included (softmax, log_softmax,
 * logsumexp, layernorm, rmsnorm), so a graph and its ops_graph_canonicalize() form can be run
 * side by side and compared. cast is the identity: the reference never rounds to the target
 * dtype (nor to the dtypes of inputs and intermediates); rounding error is what verification
 * measures against it. */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ref_dims {
    int rank;
    int64_t d[OPS_MAX_RANK];
} ref_dims;

/* One operand as a kernel sees it: data and dims (a scalar operand is a rank-0 tensor). */
typedef struct ref_arg {
    const double *p;
    ref_dims dims;
    double scalar;
} ref_arg;

static int run_node(const ops_graph *g, int ni, const ref_arg *in, double *out, const ref_dims *od,
                    ops_diag *d);
static int topo_order(const ops_graph *g, int *order, ops_diag *d);

int ops_ref_run(const ops_graph *g, const double *const *inputs, double *const *outputs,
                ops_diag *d)
{
    if (!g || !inputs || !outputs)
        return ops_diag_set(d, g, OPS_RULE_SCHEMA, -1, NULL, "reference: NULL argument");
    if (!g->validated)
        return ops_diag_set(d, g, OPS_RULE_SCHEMA, -1, NULL,
                            "reference: graph '%s' is not validated", g->name);
    for (int t = 0; t < g->n_tensors; t++)
        if (ops_shape_numel(&g->tensors[t].shape) < 0)
            return ops_diag_set(
                d, g, OPS_RULE_UNBOUND_DIM, g->tensors[t].producer, g->tensors[t].name,
                "reference: tensor '%s' has an unbound dimension", g->tensors[t].name);

    for (int j = 0; j < g->n_outputs; j++)
        if (!outputs[j])
            return ops_diag_set(d, g, OPS_RULE_SCHEMA, -1, g->tensors[g->outputs[j]].name,
                                "reference: no buffer for graph output '%s'",
                                g->tensors[g->outputs[j]].name);

    int rc = 0;
    const double **val = calloc((size_t)g->n_tensors + 1, sizeof(*val));
    double **owned = calloc((size_t)g->n_tensors + 1, sizeof(*owned));
    int *uses = calloc((size_t)g->n_tensors + 1, sizeof(*uses));
    int *order = calloc((size_t)g->n_nodes + 1, sizeof(*order));
    if (!val || !owned || !uses || !order) {
        rc = -ENOMEM;
        goto out;
    }
    for (int t = 0, k = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].producer >= 0)
            continue;
        if (!inputs[k]) {
            rc = ops_diag_set(d, g, OPS_RULE_SCHEMA, -1, g->tensors[t].name,
                              "reference: no data for graph input '%s'", g->tensors[t].name);
            goto out;
        }
        val[t] = inputs[k++];
    }
    for (int n = 0; n < g->n_nodes; n++)
        for (int k = 0; k < g->nodes[n].n_in; k++)
            if (g->nodes[n].in[k].tensor >= 0)
                uses[g->nodes[n].in[k].tensor]++;
    rc = topo_order(g, order, d);
    if (rc < 0)
        goto out;

    for (int i = 0; i < g->n_nodes; i++) {
        const ops_node *n = &g->nodes[order[i]];
        const ops_tensor *ot = &g->tensors[n->out];
        ref_dims od = {.rank = ot->shape.rank};
        for (int k = 0; k < od.rank; k++)
            od.d[k] = ot->shape.d[k].size;
        int64_t numel = ops_shape_numel(&ot->shape);
        owned[n->out] = malloc((size_t)(numel > 0 ? numel : 1) * sizeof(double));
        if (!owned[n->out]) {
            rc = -ENOMEM;
            goto out;
        }
        val[n->out] = owned[n->out];
        ref_arg args[OPS_MAX_OPERANDS];
        memset(args, 0, sizeof(args));
        for (int k = 0; k < n->n_in; k++) {
            int32_t t = n->in[k].tensor;
            if (t == OPS_SCALAR) {
                args[k].scalar = n->in[k].scalar;
                args[k].p = &args[k].scalar;
                args[k].dims.rank = 0;
                continue;
            }
            args[k].p = val[t];
            args[k].dims.rank = g->tensors[t].shape.rank;
            for (int j = 0; j < args[k].dims.rank; j++)
                args[k].dims.d[j] = g->tensors[t].shape.d[j].size;
        }
        rc = run_node(g, order[i], args, owned[n->out], &od, d);
        if (rc < 0)
            goto out;
        /* Drop intermediates as soon as their last consumer has run. */
        for (int k = 0; k < n->n_in; k++) {
            int32_t t = n->in[k].tensor;
            if (t >= 0 && --uses[t] == 0 && owned[t] && !g->tensors[t].is_output) {
                free(owned[t]);
                owned[t] = NULL;
                val[t] = NULL;
            }
        }
    }
    for (int j = 0; j < g->n_outputs; j++) {
        int32_t t = g->outputs[j];
        int64_t numel = ops_shape_numel(&g->tensors[t].shape);
        KT_REQUIRE(val[t] != NULL);
        memcpy(outputs[j], val[t], (size_t)numel * sizeof(double));
    }
out:
    if (owned)
        for (int t = 0; t < g->n_tensors; t++)
            free(owned[t]);
    free(order);
    free(uses);
    free(owned);
    free(val);
    return rc;
}

/* Kahn's algorithm over nodes; graph inputs are ready from the start. */
static int topo_order(const ops_graph *g, int *order, ops_diag *d)
{
    int n_nodes = g->n_nodes, rc = 0;
    bool *done = calloc((size_t)n_nodes + 1, sizeof(bool));
    if (!done)
        return -ENOMEM;
    int n_done = 0;
    /* Quadratic, but graphs are small and this keeps the code obvious. */
    while (n_done < n_nodes) {
        bool progress = false;
        for (int i = 0; i < n_nodes; i++) {
            if (done[i])
                continue;
            bool ready = true;
            for (int k = 0; k < g->nodes[i].n_in && ready; k++) {
                int32_t t = g->nodes[i].in[k].tensor;
                if (t >= 0 && g->tensors[t].producer >= 0 && !done[g->tensors[t].producer])
                    ready = false;
            }
            if (ready) {
                done[i] = true;
                order[n_done++] = i;
                progress = true;
            }
        }
        if (!progress) {
            rc = ops_diag_set(d, g, OPS_RULE_CYCLE, -1, NULL, "reference: graph has a cycle");
            goto out;
        }
    }
out:
    free(done);
    return rc;
}

/* ---- indexing helpers ---- */

static int64_t dims_numel(const ref_dims *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->d[i];
    return n;
}

/* Strides of operand dims `in` when broadcast (NumPy rules, right-aligned) to `out`: 0 along
 * broadcast axes. */
static void bcast_strides(const ref_dims *in, const ref_dims *out, int64_t *st)
{
    int64_t s = 1;
    for (int i = out->rank - 1; i >= 0; i--) {
        int j = i - (out->rank - in->rank);
        if (j < 0) {
            st[i] = 0;
            continue;
        }
        st[i] = in->d[j] == 1 && out->d[i] != 1 ? 0 : s;
        s *= in->d[j];
    }
}

/* Offset of output element `lin` in an operand with strides st (same rank as out). */
static int64_t offset_of(int64_t lin, const ref_dims *out, const int64_t *st)
{
    int64_t off = 0;
    for (int i = out->rank - 1; i >= 0; i--) {
        int64_t idx = lin % out->d[i];
        lin /= out->d[i];
        off += idx * st[i];
    }
    return off;
}

static int norm_axis(int axis, int rank)
{
    return axis < 0 ? axis + rank : axis;
}

static bool bcast_ok(const ref_dims *in, const ref_dims *out)
{
    if (in->rank > out->rank)
        return false;
    for (int j = 0; j < in->rank; j++) {
        int64_t a = in->d[j], b = out->d[j + out->rank - in->rank];
        if (a != b && a != 1)
            return false;
    }
    return true;
}

/* ---- pointwise ---- */

static double sigmoid(double x)
{
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

/* log(1 + exp(x)) without overflow for large x or cancellation for very negative x. */
static double softplus(double x)
{
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}

/* NaN-propagating max/min, like NumPy's maximum/minimum and torch.max. */
static double nan_max(double a, double b)
{
    return isnan(a) || a > b ? a : b;
}

static double nan_min(double a, double b)
{
    return isnan(a) || a < b ? a : b;
}

static double unary(ops_op op, const ops_attrs *a, double x)
{
    switch (op) {
    case OPS_NEG:
        return -x;
    case OPS_ABS:
        return fabs(x);
    case OPS_RELU:
        return x < 0 ? 0.0 : x;
    case OPS_GELU:
        return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case OPS_GELU_TANH: {
        const double c = sqrt(2.0 / M_PI);
        return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
    }
    case OPS_SILU:
        return x * sigmoid(x);
    case OPS_SIGMOID:
        return sigmoid(x);
    case OPS_TANH:
        return tanh(x);
    case OPS_EXP:
        return exp(x);
    case OPS_LOG:
        return log(x);
    case OPS_SQRT:
        return sqrt(x);
    case OPS_RSQRT:
        return 1.0 / sqrt(x);
    case OPS_SQUARE:
        return x * x;
    case OPS_RECIP:
        return 1.0 / x;
    case OPS_MISH:
        return x * tanh(softplus(x));
    case OPS_SOFTPLUS:
        return softplus(x);
    case OPS_HARDTANH:
    case OPS_CLAMP:
        return x < a->lo ? a->lo : x > a->hi ? a->hi : x;
    case OPS_LEAKY_RELU:
        return x < 0 ? a->alpha * x : x;
    case OPS_CAST:
        return x; /* the reference does not round to the target dtype */
    default:
        break;
    }
    KT_REQUIRE(!"not a unary op");
    return 0;
}

static double binary(ops_op op, double x, double y)
{
    switch (op) {
    case OPS_ADD:
        return x + y;
    case OPS_SUB:
        return x - y;
    case OPS_MUL:
        return x * y;
    case OPS_DIV:
        return x / y;
    case OPS_MAX:
        return isnan(y) ? y : nan_max(x, y);
    case OPS_MIN:
        return isnan(y) ? y : nan_min(x, y);
    case OPS_POW:
        return pow(x, y);
    default:
        break;
    }
    KT_REQUIRE(!"not a binary op");
    return 0;
}

static void run_binary(ops_op op, const ref_arg *x, const ref_arg *y, double *out,
                       const ref_dims *od)
{
    int64_t sx[OPS_MAX_RANK], sy[OPS_MAX_RANK], n = dims_numel(od);
    bcast_strides(&x->dims, od, sx);
    bcast_strides(&y->dims, od, sy);
    for (int64_t i = 0; i < n; i++)
        out[i] = binary(op, x->p[offset_of(i, od, sx)], y->p[offset_of(i, od, sy)]);
}

/* ---- reductions ---- */

/* Reduces x over the axes flagged in `red` into out (whose element count is the product of the
 * kept dims; keepdim does not change the layout). */
static void run_reduce(ops_op op, const ref_arg *x, const bool *red, double *out)
{
    const ref_dims *xd = &x->dims;
    /* Output strides in terms of x's index space: 0 along reduced axes. */
    int64_t st[OPS_MAX_RANK], s = 1, n_out = 1, count = 1;
    for (int i = xd->rank - 1; i >= 0; i--) {
        if (red[i]) {
            st[i] = 0;
            count *= xd->d[i];
        } else {
            st[i] = s;
            s *= xd->d[i];
            n_out *= xd->d[i];
        }
    }
    double init = op == OPS_REDUCE_MAX ? -INFINITY : op == OPS_REDUCE_MIN ? INFINITY : 0.0;
    for (int64_t i = 0; i < n_out; i++)
        out[i] = init;
    int64_t n = dims_numel(xd);
    for (int64_t i = 0; i < n; i++) {
        int64_t o = offset_of(i, xd, st);
        double v = x->p[i];
        switch (op) {
        case OPS_REDUCE_MAX:
            out[o] = isnan(out[o]) ? out[o] : nan_max(v, out[o]);
            break;
        case OPS_REDUCE_MIN:
            out[o] = isnan(out[o]) ? out[o] : nan_min(v, out[o]);
            break;
        default:
            out[o] += v;
            break;
        }
    }
    if (op == OPS_REDUCE_MEAN)
        for (int64_t i = 0; i < n_out; i++)
            out[i] /= (double)count;
}

/* The lines of x along axis: outer of them before it, inner after it (the line's stride). */
static void line_split(const ref_dims *xd, int axis, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int i = 0; i < axis; i++)
        *outer *= xd->d[i];
    for (int i = axis + 1; i < xd->rank; i++)
        *inner *= xd->d[i];
}

/* cumsum, cumprod: each line along axis accumulated in order, inclusive. */
static void run_scan(ops_op op, const ref_arg *x, int axis, double *out)
{
    int64_t outer, inner, len = x->dims.d[axis];
    line_split(&x->dims, axis, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            const double *row = x->p + o * len * inner + in;
            double *orow = out + o * len * inner + in, acc = op == OPS_CUMPROD ? 1.0 : 0.0;
            for (int64_t j = 0; j < len; j++)
                orow[j * inner] = acc = op == OPS_CUMPROD ? acc * row[j * inner]
                                                          : acc + row[j * inner];
        }
}

/* softmax, log_softmax, logsumexp along one axis: rows of length `len` with stride `inner`. */
static void run_softmax(ops_op op, const ref_arg *x, int axis, double *out)
{
    int64_t outer, inner, len = x->dims.d[axis];
    line_split(&x->dims, axis, &outer, &inner);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            const double *row = x->p + o * len * inner + in;
            double m = -INFINITY;
            for (int64_t j = 0; j < len; j++)
                m = nan_max(row[j * inner], m);
            /* A row of -inf would give exp(nan); shift by 0 instead, as PyTorch does. */
            double shift = isinf(m) ? 0.0 : m;
            double sum = 0;
            for (int64_t j = 0; j < len; j++)
                sum += exp(row[j * inner] - shift);
            double lse = shift + log(sum);
            if (op == OPS_LOGSUMEXP) {
                out[o * inner + in] = lse;
                continue;
            }
            double *orow = out + o * len * inner + in;
            for (int64_t j = 0; j < len; j++)
                orow[j * inner] =
                    op == OPS_SOFTMAX ? exp(row[j * inner] - shift) / sum : row[j * inner] - lse;
        }
    }
}

/* layernorm / rmsnorm over the trailing dims [axis, rank); optional weight and bias broadcast
 * against x. Variance is the biased (population) one, as in PyTorch. */
static void run_norm(ops_op op, const ops_attrs *a, const ref_arg *in, int n_in, double *out)
{
    const ref_arg *x = &in[0];
    const ref_dims *xd = &x->dims;
    int axis = norm_axis(a->axis, xd->rank);
    int64_t rows = 1, len = 1;
    for (int i = 0; i < xd->rank; i++) {
        if (i < axis)
            rows *= xd->d[i];
        else
            len *= xd->d[i];
    }
    int64_t sw[OPS_MAX_RANK] = {0}, sb[OPS_MAX_RANK] = {0};
    if (n_in > 1)
        bcast_strides(&in[1].dims, xd, sw);
    if (n_in > 2)
        bcast_strides(&in[2].dims, xd, sb);
    for (int64_t r = 0; r < rows; r++) {
        const double *row = x->p + r * len;
        double mean = 0, ms = 0;
        if (op == OPS_LAYERNORM) {
            for (int64_t j = 0; j < len; j++)
                mean += row[j];
            mean /= (double)len;
        }
        for (int64_t j = 0; j < len; j++)
            ms += (row[j] - mean) * (row[j] - mean);
        ms /= (double)len;
        double inv = 1.0 / sqrt(ms + a->eps);
        for (int64_t j = 0; j < len; j++) {
            int64_t lin = r * len + j;
            double y = (row[j] - mean) * inv;
            if (n_in > 1)
                y *= in[1].p[offset_of(lin, xd, sw)];
            if (n_in > 2)
                y += in[2].p[offset_of(lin, xd, sb)];
            out[lin] = y;
        }
    }
}

/* ---- contractions ---- */

/* Batched matmul with NumPy batch broadcasting. A rank-1 operand is a row (A) or a column (B)
 * vector, as in numpy.matmul; transpose flags apply to the last two dims of rank >= 2
 * operands. */
static int run_matmul(const ops_graph *g, int ni, const ops_attrs *at, const ref_arg *a,
                      const ref_arg *b, double *out, const ref_dims *od, ops_diag *d)
{
    int ra = a->dims.rank, rb = b->dims.rank;
    if (ra < 1 || rb < 1)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, ni, NULL, "reference: matmul of a scalar");
    bool ta = ra >= 2 && at->transpose_a, tb = rb >= 2 && at->transpose_b;
    int64_t M = ra >= 2 ? a->dims.d[ra - (ta ? 1 : 2)] : 1;
    int64_t Ka = ra >= 2 ? a->dims.d[ra - (ta ? 2 : 1)] : a->dims.d[0];
    int64_t Kb = rb >= 2 ? b->dims.d[rb - (tb ? 1 : 2)] : b->dims.d[0];
    int64_t N = rb >= 2 ? b->dims.d[rb - (tb ? 2 : 1)] : 1;
    if (Ka != Kb)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, ni, NULL,
                            "reference: matmul inner dims differ (%lld vs %lld)", (long long)Ka,
                            (long long)Kb);
    /* Batch dims: everything but the matrix dims, broadcast together. */
    ref_dims ba = {.rank = ra > 2 ? ra - 2 : 0}, bb = {.rank = rb > 2 ? rb - 2 : 0};
    memcpy(ba.d, a->dims.d, sizeof(int64_t) * (size_t)ba.rank);
    memcpy(bb.d, b->dims.d, sizeof(int64_t) * (size_t)bb.rank);
    ref_dims bo = {.rank = ba.rank > bb.rank ? ba.rank : bb.rank};
    for (int i = 0; i < bo.rank; i++) {
        int ia = i - (bo.rank - ba.rank), ib = i - (bo.rank - bb.rank);
        int64_t da = ia >= 0 ? ba.d[ia] : 1, db = ib >= 0 ? bb.d[ib] : 1;
        bo.d[i] = da == 1 ? db : da;
    }
    if (!bcast_ok(&ba, &bo) || !bcast_ok(&bb, &bo))
        return ops_diag_set(d, g, OPS_RULE_BROADCAST, ni, NULL,
                            "reference: matmul batch dims do not broadcast");
    int64_t nb = dims_numel(&bo);
    if (nb * M * N != dims_numel(od))
        return ops_diag_set(d, g, OPS_RULE_SHAPE, ni, NULL,
                            "reference: matmul output has %lld elements, expected %lld",
                            (long long)dims_numel(od), (long long)nb * M * N);
    int64_t sa[OPS_MAX_RANK], sb[OPS_MAX_RANK];
    bcast_strides(&ba, &bo, sa);
    bcast_strides(&bb, &bo, sb);
    /* Element strides inside one matrix of A ([M,K] or [K,M]) and of B. */
    int64_t a_m = ta ? 1 : Ka, a_k = ta ? M : 1, b_k = tb ? 1 : N, b_n = tb ? Kb : 1;
    if (ra == 1) {
        a_m = 0;
        a_k = 1;
    }
    if (rb == 1) {
        b_k = 1;
        b_n = 0;
    }
    for (int64_t bi = 0; bi < nb; bi++) {
        const double *pa = a->p + offset_of(bi, &bo, sa) * M * Ka;
        const double *pb = b->p + offset_of(bi, &bo, sb) * Kb * N;
        double *po = out + bi * M * N;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double acc = 0;
                for (int64_t k = 0; k < Ka; k++)
                    acc += pa[m * a_m + k * a_k] * pb[k * b_k + n * b_n];
                po[m * N + n] = acc;
            }
    }
    return 0;
}

/* One spatial coordinate of the input an output position o and filter tap t read, or -1 where
 * that is padding or a zero between input elements (input dilation). */
static int64_t conv_src(const ops_conv_geom *cg, int i, int64_t o, int64_t t)
{
    int64_t v = o * cg->stride[i] - cg->pad[i] + t * cg->dil[i];
    if (v < 0 || v % cg->idil[i] != 0 || v / cg->idil[i] >= cg->in[i])
        return -1;
    return v / cg->idil[i];
}

/* conv2d, conv3d (as 3-d ones, a conv2d of depth 1): NC[D]HW input with OI[D]HW weight, or
 * N[D]HWC with O[D]HWI; bias [K]. */
static int run_conv(const ops_graph *g, int ni, const ops_node *nd, const ref_arg *in, int n_in,
                    double *out, const ref_dims *od, ops_diag *d)
{
    const ref_arg *x = &in[0], *w = &in[1];
    int rank = ops_conv_spatial(nd->op) + 2;
    if (x->dims.rank != rank || w->dims.rank != rank || od->rank != rank)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, ni, NULL, "reference: %s needs rank %d",
                            ops_op_info_get(nd->op)->name, rank);
    ops_conv_geom cg;
    ops_conv_geom_make(nd->op, &nd->attrs, x->dims.d, w->dims.d, od->d, &cg);
    if (cg.c != cg.cg * cg.groups || cg.k % cg.groups != 0)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, ni, NULL,
                            "reference: conv channels %lld, weight %lld per group, %lld groups",
                            (long long)cg.c, (long long)cg.cg, (long long)cg.groups);
    const int64_t *I = cg.in, *F = cg.ker, *O = cg.out;
    const double *bias = n_in > 2 ? in[2].p : NULL;
    for (int64_t n = 0; n < cg.n; n++)
        for (int64_t k = 0; k < cg.k; k++)
            for (int64_t o0 = 0; o0 < O[0]; o0++)
                for (int64_t o1 = 0; o1 < O[1]; o1++)
                    for (int64_t o2 = 0; o2 < O[2]; o2++) {
                        int64_t grp = k / cg.kg;
                        double acc = bias ? bias[k] : 0.0;
                        for (int64_t c = 0; c < cg.cg; c++)
                            for (int64_t t0 = 0; t0 < F[0]; t0++) {
                                int64_t i0 = conv_src(&cg, 0, o0, t0);
                                for (int64_t t1 = 0; i0 >= 0 && t1 < F[1]; t1++) {
                                    int64_t i1 = conv_src(&cg, 1, o1, t1);
                                    for (int64_t t2 = 0; i1 >= 0 && t2 < F[2]; t2++) {
                                        int64_t i2 = conv_src(&cg, 2, o2, t2);
                                        if (i2 < 0)
                                            continue;
                                        int64_t ci = grp * cg.cg + c;
                                        int64_t sp = (i0 * I[1] + i1) * I[2] + i2;
                                        int64_t tap = (t0 * F[1] + t1) * F[2] + t2;
                                        int64_t xo =
                                            cg.nhwc ? (n * I[0] * I[1] * I[2] + sp) * cg.c + ci
                                                    : (n * cg.c + ci) * I[0] * I[1] * I[2] + sp;
                                        int64_t wo =
                                            cg.nhwc ? (k * F[0] * F[1] * F[2] + tap) * cg.cg + c
                                                    : (k * cg.cg + c) * F[0] * F[1] * F[2] + tap;
                                        acc += x->p[xo] * w->p[wo];
                                    }
                                }
                            }
                        int64_t osp = (o0 * O[1] + o1) * O[2] + o2, on = O[0] * O[1] * O[2];
                        out[cg.nhwc ? (n * on + osp) * cg.k + k : (n * cg.k + k) * on + osp] = acc;
                    }
    return 0;
}

/* attention: q [..., Sq, D], k [..., Skv, D], v [..., Skv, Dv], leading dims broadcast;
 * out [..., Sq, Dv] = softmax(q k^T * scale) v, with key j > query i masked when causal. */
static int run_attention(const ops_graph *g, int ni, const ops_attrs *at, const ref_arg *in,
                         double *out, const ref_dims *od, ops_diag *d)
{
    const ref_arg *q = &in[0], *k = &in[1], *v = &in[2];
    int rq = q->dims.rank, rk = k->dims.rank, rv = v->dims.rank;
    if (rq < 2 || rk < 2 || rv < 2 || od->rank < 2)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, ni, NULL,
                            "reference: attention operands need rank >= 2");
    int64_t Sq = q->dims.d[rq - 2], D = q->dims.d[rq - 1];
    int64_t Skv = k->dims.d[rk - 2], Dv = v->dims.d[rv - 1];
    if (k->dims.d[rk - 1] != D || v->dims.d[rv - 2] != Skv)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, ni, NULL,
                            "reference: attention q/k/v shapes disagree");
    ref_dims bo = {.rank = od->rank - 2}, bq = {.rank = rq - 2}, bk = {.rank = rk - 2},
             bv = {.rank = rv - 2};
    memcpy(bo.d, od->d, sizeof(int64_t) * (size_t)bo.rank);
    memcpy(bq.d, q->dims.d, sizeof(int64_t) * (size_t)bq.rank);
    memcpy(bk.d, k->dims.d, sizeof(int64_t) * (size_t)bk.rank);
    memcpy(bv.d, v->dims.d, sizeof(int64_t) * (size_t)bv.rank);
    /* grouped-query attention: k and v have hq / group heads on the last batch axis; query head
     * h reads head h / group. Counted as the output's heads for broadcasting, mapped below. */
    int64_t hq = 1, group = 1;
    if (bk.rank > 0 && bk.rank == bo.rank && bk.d[bk.rank - 1] != bo.d[bo.rank - 1] &&
        bk.d[bk.rank - 1] > 0 && bo.d[bo.rank - 1] % bk.d[bk.rank - 1] == 0 && bv.rank == bk.rank &&
        bv.d[bv.rank - 1] == bk.d[bk.rank - 1]) {
        hq = bo.d[bo.rank - 1];
        group = hq / bk.d[bk.rank - 1];
        bk.d[bk.rank - 1] = bv.d[bv.rank - 1] = hq;
    }
    if (!bcast_ok(&bq, &bo) || !bcast_ok(&bk, &bo) || !bcast_ok(&bv, &bo))
        return ops_diag_set(d, g, OPS_RULE_BROADCAST, ni, NULL,
                            "reference: attention batch dims do not broadcast");
    int64_t sq[OPS_MAX_RANK], sk[OPS_MAX_RANK], sv[OPS_MAX_RANK];
    bcast_strides(&bq, &bo, sq);
    bcast_strides(&bk, &bo, sk);
    bcast_strides(&bv, &bo, sv);
    double scale = at->has_scale ? at->scale : 1.0 / sqrt((double)D);
    double *s = malloc((size_t)(Skv > 0 ? Skv : 1) * sizeof(double));
    if (!s)
        return -ENOMEM;
    int64_t nb = dims_numel(&bo);
    for (int64_t b = 0; b < nb; b++) {
        const double *pq = q->p + offset_of(b, &bo, sq) * Sq * D;
        /* (with groups, k's and v's offsets count hq heads: back to their own) */
        int64_t ok = offset_of(b, &bo, sk), ov = offset_of(b, &bo, sv);
        if (group > 1) {
            ok = ok / hq * (hq / group) + ok % hq / group;
            ov = ov / hq * (hq / group) + ov % hq / group;
        }
        const double *pk = k->p + ok * Skv * D;
        const double *pv = v->p + ov * Skv * Dv;
        double *po = out + b * Sq * Dv;
        for (int64_t i = 0; i < Sq; i++) {
            int64_t n_keys = at->causal ? (i + 1 < Skv ? i + 1 : Skv) : Skv;
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j < n_keys; j++) {
                double acc = 0;
                for (int64_t c = 0; c < D; c++)
                    acc += pq[i * D + c] * pk[j * D + c];
                s[j] = acc * scale;
                m = nan_max(s[j], m);
            }
            for (int64_t j = 0; j < n_keys; j++) {
                s[j] = exp(s[j] - m);
                sum += s[j];
            }
            for (int64_t c = 0; c < Dv; c++) {
                double acc = 0;
                for (int64_t j = 0; j < n_keys; j++)
                    acc += s[j] * pv[j * Dv + c];
                po[i * Dv + c] = acc / sum;
            }
        }
    }
    free(s);
    return 0;
}

/* ---- layout ---- */

static int run_permute(const ops_graph *g, int ni, const ops_attrs *at, const ref_arg *x,
                       double *out, const ref_dims *od, ops_diag *d)
{
    int r = x->dims.rank, perm[OPS_MAX_RANK];
    if (at->n_perm == 0) {
        /* transpose without perm: swap the last two dims (a matrix transpose). */
        for (int i = 0; i < r; i++)
            perm[i] = i;
        if (r >= 2) {
            perm[r - 2] = r - 1;
            perm[r - 1] = r - 2;
        }
    } else {
        if (at->n_perm != r)
            return ops_diag_set(d, g, OPS_RULE_ATTR, ni, NULL,
                                "reference: perm has %d entries for rank %d", at->n_perm, r);
        for (int i = 0; i < r; i++)
            perm[i] = norm_axis(at->perm[i], r);
    }
    /* Input strides, then output dim i walks input dim perm[i]. */
    int64_t xs[OPS_MAX_RANK], s = 1, st[OPS_MAX_RANK];
    for (int i = r - 1; i >= 0; i--) {
        xs[i] = s;
        s *= x->dims.d[i];
    }
    for (int i = 0; i < r; i++) {
        if (perm[i] < 0 || perm[i] >= r || od->d[i] != x->dims.d[perm[i]])
            return ops_diag_set(d, g, OPS_RULE_ATTR, ni, NULL,
                                "reference: perm does not match the output shape");
        st[i] = xs[perm[i]];
    }
    int64_t n = dims_numel(od);
    for (int64_t i = 0; i < n; i++)
        out[i] = x->p[offset_of(i, od, st)];
    return 0;
}

/* slice: out[i] = x[start + i * step] per axis, the fill where that is outside x. */
static int run_slice(const ops_graph *g, int ni, const ops_attrs *at, const ref_arg *x,
                     double *out, const ref_dims *od, ops_diag *d)
{
    int r = x->dims.rank;
    if (od->rank != r)
        return ops_diag_set(d, g, OPS_RULE_ATTR, ni, NULL,
                            "reference: slice output rank %d for operand rank %d", od->rank, r);
    int64_t xs[OPS_MAX_RANK], s = 1;
    for (int i = r - 1; i >= 0; i--) {
        xs[i] = s;
        s *= x->dims.d[i];
    }
    int64_t n = dims_numel(od);
    for (int64_t e = 0; e < n; e++) {
        int64_t rest = e, off = 0;
        bool inside = true;
        for (int i = r - 1; i >= 0; i--) {
            int64_t oi = od->d[i] ? rest % od->d[i] : 0;
            rest = od->d[i] ? rest / od->d[i] : 0;
            int64_t xi = at->start[i] + oi * at->step[i];
            inside &= xi >= 0 && xi < x->dims.d[i];
            off += xi * xs[i];
        }
        if (!inside && !at->has_fill)
            return ops_diag_set(d, g, OPS_RULE_SHAPE, ni, NULL,
                                "reference: slice reads outside its operand without a fill");
        out[e] = inside ? x->p[off] : at->fill;
    }
    return 0;
}

static int run_node(const ops_graph *g, int ni, const ref_arg *in, double *out, const ref_dims *od,
                    ops_diag *d)
{
    const ops_node *n = &g->nodes[ni];
    const ops_attrs *a = &n->attrs;
    int64_t numel = dims_numel(od);
    switch (ops_op_info_get(n->op)->kind) {
    case OPS_KIND_UNARY: {
        if (dims_numel(&in[0].dims) != numel)
            break;
        for (int64_t i = 0; i < numel; i++)
            out[i] = unary(n->op, a, in[0].p[i]);
        return 0;
    }
    case OPS_KIND_BINARY:
        if (!bcast_ok(&in[0].dims, od) || !bcast_ok(&in[1].dims, od))
            return ops_diag_set(d, g, OPS_RULE_BROADCAST, ni, NULL,
                                "reference: operands do not broadcast to the output");
        run_binary(n->op, &in[0], &in[1], out, od);
        return 0;
    case OPS_KIND_REDUCE: {
        bool red[OPS_MAX_RANK] = {false};
        int r = in[0].dims.rank;
        for (int i = 0; i < a->n_axes; i++) {
            int ax = norm_axis(a->axes[i], r);
            if (ax < 0 || ax >= r)
                return ops_diag_set(d, g, OPS_RULE_ATTR, ni, NULL,
                                    "reference: axis %d out of range for rank %d", a->axes[i], r);
            red[ax] = true;
        }
        if (a->n_axes == 0) /* no axes: reduce over all of them */
            for (int i = 0; i < r; i++)
                red[i] = true;
        int64_t kept = 1;
        for (int i = 0; i < r; i++)
            kept *= red[i] ? 1 : in[0].dims.d[i];
        if (kept != numel)
            break;
        run_reduce(n->op, &in[0], red, out);
        return 0;
    }
    case OPS_KIND_COMPOSITE: {
        int r = in[0].dims.rank, axis = norm_axis(a->axis, r);
        if (axis < 0 || axis >= r)
            return ops_diag_set(d, g, OPS_RULE_ATTR, ni, NULL,
                                "reference: axis %d out of range for rank %d", a->axis, r);
        if (n->op == OPS_LAYERNORM || n->op == OPS_RMSNORM) {
            for (int k = 1; k < n->n_in; k++)
                if (!bcast_ok(&in[k].dims, &in[0].dims))
                    return ops_diag_set(d, g, OPS_RULE_BROADCAST, ni, NULL,
                                        "reference: weight/bias do not broadcast to x");
            run_norm(n->op, a, in, n->n_in, out);
            return 0;
        }
        int64_t expect = dims_numel(&in[0].dims);
        if (n->op == OPS_LOGSUMEXP)
            expect /= in[0].dims.d[axis] ? in[0].dims.d[axis] : 1;
        if (expect != numel && !(n->op == OPS_LOGSUMEXP && in[0].dims.d[axis] == 0))
            break;
        run_softmax(n->op, &in[0], axis, out);
        return 0;
    }
    case OPS_KIND_MATMUL:
        return run_matmul(g, ni, a, &in[0], &in[1], out, od, d);
    case OPS_KIND_CONV:
        return run_conv(g, ni, n, in, n->n_in, out, od, d);
    case OPS_KIND_ATTENTION:
        return run_attention(g, ni, a, in, out, od, d);
    case OPS_KIND_SCAN: {
        int r = in[0].dims.rank, axis = norm_axis(a->axis, r);
        if (axis < 0 || axis >= r)
            return ops_diag_set(d, g, OPS_RULE_ATTR, ni, NULL,
                                "reference: axis %d out of range for rank %d", a->axis, r);
        if (dims_numel(&in[0].dims) != numel)
            break;
        run_scan(n->op, &in[0], axis, out);
        return 0;
    }
    case OPS_KIND_LAYOUT:
        if (n->op == OPS_RESHAPE) {
            if (dims_numel(&in[0].dims) != numel)
                break;
            memcpy(out, in[0].p, (size_t)numel * sizeof(double));
            return 0;
        }
        if (n->op == OPS_SLICE)
            return run_slice(g, ni, a, &in[0], out, od, d);
        return run_permute(g, ni, a, &in[0], out, od, d);
    }
    return ops_diag_set(d, g, OPS_RULE_SHAPE, ni, NULL,
                        "reference: output shape does not match the operands");
}

double ops_default_tolerance(const ops_graph *g, ops_precision p)
{
    bool contraction = false;
    for (int n = 0; n < g->n_nodes; n++) {
        ops_op op = g->nodes[n].op;
        contraction |=
            op == OPS_MATMUL || ops_op_info_get(op)->kind == OPS_KIND_CONV || op == OPS_ATTENTION;
    }
    double tol = 1e-5;
    if (p == OPS_PREC_TF32 && contraction)
        tol = 5e-4;
    if (p == OPS_PREC_REDUCED)
        tol = 2e-2;
    for (int t = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].producer >= 0 && !g->tensors[t].is_output)
            continue;
        if (g->tensors[t].dtype == OPS_DT_F16 && tol < 3e-3)
            tol = 3e-3;
        if (g->tensors[t].dtype == OPS_DT_BF16 && tol < 2e-2)
            tol = 2e-2;
    }
    return tol;
}
