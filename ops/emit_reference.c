/* The reference family: one naive fp64 kernel per op (one thread per output element; attention a
 * warp per query row), the GPU twin of ops/reference.c, and ops_emit_reference_graph for a whole
 * graph.
 *
 * The kernels are written to be obviously correct rather than fast: every index is unravelled
 * from the linear output index, loops follow ops/reference.c's loops, and all math is in double
 * with its own expression emitter (ops_emit_elementwise emits float math). */
#include "reference_gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_THREADS, N_KNOBS };

static const ops_knob reference_knobs[N_KNOBS] = {
    [K_THREADS] = {"threads", 1, {256}, NULL},
};

#define REF_THREADS 256

static bool reference_op_ok(ops_op op)
{
    if (ops_is_elementwise(op))
        return true;
    switch (op) {
    case OPS_REDUCE_SUM:
    case OPS_REDUCE_MEAN:
    case OPS_REDUCE_MAX:
    case OPS_REDUCE_MIN:
    case OPS_MATMUL:
    case OPS_CONV2D:
    case OPS_CONV3D:
    case OPS_ATTENTION:
    case OPS_TRANSPOSE:
    case OPS_PERMUTE:
    case OPS_RESHAPE:
    case OPS_SLICE:
    case OPS_CUMSUM:
    case OPS_CUMPROD:
        return true;
    default:
        return false;
    }
}

static bool reference_matches(const ops_group *grp)
{
    if (grp->n_nodes != 1 || grp->n_out != 1)
        return false;
    const ops_node *n = &grp->g->nodes[grp->nodes[0]];
    return reference_op_ok(n->op) && grp->out[0] == n->out;
}

static const char *reference_prune(const ops_group *grp, const ops_schedule *s,
                                   const ops_device *dev)
{
    if (!reference_matches(grp))
        return "shape";
    if (s->v[K_THREADS] != REF_THREADS || REF_THREADS > dev->max_threads_per_block)
        return "threads";
    return NULL;
}

/* ---- double-precision expressions ---- */

static void double_lit(kt_buf *b, double v)
{
    if (isnan(v))
        kt_buf_printf(b, "__longlong_as_double(0x7ff8000000000000LL)");
    else if (isinf(v))
        kt_buf_printf(b, "%s__longlong_as_double(0x7ff0000000000000LL)", v < 0 ? "-" : "");
    else
        kt_buf_printf(b, "%.17g", v);
}

/* The double expression of elementwise node n over operand expressions x[k] (scalars from n);
 * identical to ops/reference.c's unary() and binary(). */
static int emit_double_elementwise(kt_buf *b, const ops_node *n, const char *const *x)
{
    const ops_attrs *a = &n->attrs;
    if (ops_op_info_get(n->op)->kind == OPS_KIND_BINARY) {
        kt_buf lhs = {0}, rhs = {0};
        kt_buf *side[2] = {&lhs, &rhs};
        for (int k = 0; k < 2; k++) {
            if (n->in[k].tensor == OPS_SCALAR) {
                kt_buf_printf(side[k], "(");
                double_lit(side[k], n->in[k].scalar);
                kt_buf_printf(side[k], ")");
            } else {
                kt_buf_printf(side[k], "(%s)", x[k]);
            }
        }
        int rc = kt_buf_status(&lhs) | kt_buf_status(&rhs) ? -ENOMEM : 0;
        const char *l = lhs.data, *r = rhs.data;
        switch (n->op) {
        case OPS_ADD:
            kt_buf_printf(b, "(%s + %s)", l, r);
            break;
        case OPS_SUB:
            kt_buf_printf(b, "(%s - %s)", l, r);
            break;
        case OPS_MUL:
            kt_buf_printf(b, "(%s * %s)", l, r);
            break;
        case OPS_DIV:
            kt_buf_printf(b, "(%s / %s)", l, r);
            break;
        case OPS_MAX:
            kt_buf_printf(b, "kt_ref_max(%s, %s)", l, r);
            break;
        case OPS_MIN:
            kt_buf_printf(b, "kt_ref_min(%s, %s)", l, r);
            break;
        case OPS_POW:
            kt_buf_printf(b, "pow(%s, %s)", l, r);
            break;
        default:
            rc = -EINVAL;
        }
        kt_buf_free(&lhs);
        kt_buf_free(&rhs);
        return rc;
    }
    const char *v = x[0];
    switch (n->op) {
    case OPS_NEG:
        kt_buf_printf(b, "(-(%s))", v);
        break;
    case OPS_ABS:
        kt_buf_printf(b, "fabs(%s)", v);
        break;
    case OPS_RELU:
        kt_buf_printf(b, "((%s) < 0.0 ? 0.0 : (%s))", v, v);
        break;
    case OPS_GELU:
        kt_buf_printf(b, "(0.5 * (%s) * (1.0 + erf((%s) / sqrt(2.0))))", v, v);
        break;
    case OPS_GELU_TANH:
        kt_buf_printf(b,
                      "(0.5 * (%s) * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * ((%s) + "
                      "0.044715 * (%s) * (%s) * (%s)))))",
                      v, v, v, v, v);
        break;
    case OPS_SILU:
        kt_buf_printf(b, "((%s) * kt_ref_sigmoid(%s))", v, v);
        break;
    case OPS_SIGMOID:
        kt_buf_printf(b, "kt_ref_sigmoid(%s)", v);
        break;
    case OPS_TANH:
        kt_buf_printf(b, "tanh(%s)", v);
        break;
    case OPS_EXP:
        kt_buf_printf(b, "exp(%s)", v);
        break;
    case OPS_LOG:
        kt_buf_printf(b, "log(%s)", v);
        break;
    case OPS_SQRT:
        kt_buf_printf(b, "sqrt(%s)", v);
        break;
    case OPS_RSQRT:
        kt_buf_printf(b, "(1.0 / sqrt(%s))", v);
        break;
    case OPS_SQUARE:
        kt_buf_printf(b, "((%s) * (%s))", v, v);
        break;
    case OPS_RECIP:
        kt_buf_printf(b, "(1.0 / (%s))", v);
        break;
    case OPS_MISH:
        kt_buf_printf(b, "((%s) * tanh(kt_ref_softplus(%s)))", v, v);
        break;
    case OPS_SOFTPLUS:
        kt_buf_printf(b, "kt_ref_softplus(%s)", v);
        break;
    case OPS_HARDTANH:
    case OPS_CLAMP:
        kt_buf_printf(b, "((%s) < ", v);
        double_lit(b, a->lo);
        kt_buf_printf(b, " ? ");
        double_lit(b, a->lo);
        kt_buf_printf(b, " : (%s) > ", v);
        double_lit(b, a->hi);
        kt_buf_printf(b, " ? ");
        double_lit(b, a->hi);
        kt_buf_printf(b, " : (%s))", v);
        break;
    case OPS_LEAKY_RELU:
        kt_buf_printf(b, "((%s) < 0.0 ? ", v);
        double_lit(b, a->alpha);
        kt_buf_printf(b, " * (%s) : (%s))", v, v);
        break;
    case OPS_CAST:
        kt_buf_printf(b, "(%s)", v); /* the reference never rounds */
        break;
    default:
        return -EINVAL;
    }
    return 0;
}

static const char ref_helpers[] =
    "/* ---- fp64 reference helpers (the semantics of ops/reference.c) ---- */\n"
    "__device__ __forceinline__ double kt_ref_sigmoid(double x)\n"
    "{\n"
    "    if (x >= 0.0)\n"
    "        return 1.0 / (1.0 + exp(-x));\n"
    "    const double e = exp(x);\n"
    "    return e / (1.0 + e);\n"
    "}\n"
    "/* log(1 + exp(x)) without overflow or cancellation */\n"
    "__device__ __forceinline__ double kt_ref_softplus(double x)\n"
    "{\n"
    "    return fmax(x, 0.0) + log1p(exp(-fabs(x)));\n"
    "}\n"
    "/* NaN-propagating max and min (NumPy maximum/minimum) */\n"
    "__device__ __forceinline__ double kt_ref_nan_max(double a, double b)\n"
    "{\n"
    "    return isnan(a) || a > b ? a : b;\n"
    "}\n"
    "__device__ __forceinline__ double kt_ref_nan_min(double a, double b)\n"
    "{\n"
    "    return isnan(a) || a < b ? a : b;\n"
    "}\n"
    "__device__ __forceinline__ double kt_ref_max(double x, double y)\n"
    "{\n"
    "    return isnan(y) ? y : kt_ref_nan_max(x, y);\n"
    "}\n"
    "__device__ __forceinline__ double kt_ref_min(double x, double y)\n"
    "{\n"
    "    return isnan(y) ? y : kt_ref_nan_min(x, y);\n"
    "}\n"
    "/* sum over c < n of a[c] b[c], by a whole warp: lane adds columns lane, lane + 32, ..., the\n"
    " * butterfly then leaves the same total in every lane */\n"
    "__device__ __forceinline__ double kt_ref_row_dot(const double *a, const double *b, long long "
    "n,\n"
    "                                                 int lane)\n"
    "{\n"
    "    double acc = 0.0;\n"
    "    for (long long c = lane; c < n; c += 32)\n"
    "        acc += a[c] * b[c];\n"
    "    for (int w = 16; w > 0; w >>= 1)\n"
    "        acc += __shfl_xor_sync(0xffffffffu, acc, w);\n"
    "    return acc;\n"
    "}\n"
    "/* ---- end of reference helpers ---- */\n";

/* ---- one kernel per node ---- */

/* The node's distinct tensor operands in first-use order (its parameters) and, per operand
 * position, the parameter index (-1 for scalars). */
typedef struct ref_params {
    int n;
    int32_t tensor[OPS_MAX_OPERANDS];
    int of[OPS_MAX_OPERANDS];
} ref_params;

static void ref_params_of(const ops_node *n, ref_params *p)
{
    memset(p, 0, sizeof(*p));
    for (int k = 0; k < n->n_in; k++) {
        int32_t t = n->in[k].tensor;
        p->of[k] = -1;
        if (t == OPS_SCALAR)
            continue;
        for (int j = 0; j < p->n; j++)
            if (p->tensor[j] == t)
                p->of[k] = j;
        if (p->of[k] < 0) {
            p->of[k] = p->n;
            p->tensor[p->n++] = t;
        }
    }
}

/* const long long <prefix>0 .. = the per-axis indices of linear index `lin` in shape s. */
static void emit_unravel(kt_buf *b, const char *lin, const ops_shape *s, const char *prefix)
{
    if (s->rank == 0)
        return;
    kt_buf_line(b, "long long %s_rem = %s;", prefix, lin);
    for (int i = s->rank - 1; i >= 0; i--) {
        if (i == 0) {
            kt_buf_line(b, "const long long %s0 = %s_rem;", prefix, prefix);
        } else {
            kt_buf_line(b, "const long long %s%d = %s_rem %% %lldLL;", prefix, i, prefix,
                        (long long)s->d[i].size);
            kt_buf_line(b, "%s_rem /= %lldLL;", prefix, (long long)s->d[i].size);
        }
    }
}

static void axis_names(char names[OPS_MAX_RANK][16], const char **ptrs, int rank,
                       const char *prefix)
{
    for (int i = 0; i < rank; i++) {
        snprintf(names[i], 16, "%s%d", prefix, i);
        ptrs[i] = names[i];
    }
}

static int64_t shape_numel(const ops_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->d[i].size;
    return n;
}

static void emit_elementwise_body(kt_buf *b, const ops_graph *g, const ops_node *n,
                                  const ref_params *p, int *rc)
{
    const ops_shape *os = &g->tensors[n->out].shape;
    char names[OPS_MAX_RANK][16], exprs[OPS_MAX_OPERANDS][640];
    const char *idx[OPS_MAX_RANK], *x[OPS_MAX_OPERANDS] = {0};
    axis_names(names, idx, os->rank, "o");
    bool unary = ops_op_info_get(n->op)->kind == OPS_KIND_UNARY;
    if (!unary)
        emit_unravel(b, "i", os, "o");
    for (int k = 0; k < n->n_in; k++) {
        x[k] = exprs[k];
        exprs[k][0] = '\0';
        if (n->in[k].tensor == OPS_SCALAR)
            continue;
        if (unary) {
            snprintf(exprs[k], sizeof(exprs[k]), "in%d[i]", p->of[k]);
            continue;
        }
        kt_buf off = {0};
        ops_emit_bcast_offset(&off, &g->tensors[n->in[k].tensor].shape, os, idx);
        if (kt_buf_status(&off) < 0)
            *rc = -ENOMEM;
        kt_buf_line(b, "const double x%d = in%d[%s];", k, p->of[k], off.data ? off.data : "0");
        snprintf(exprs[k], sizeof(exprs[k]), "x%d", k);
        kt_buf_free(&off);
    }
    if (unary) {
        kt_buf_line(b, "const double x0 = in%d[i];", p->of[0]);
        snprintf(exprs[0], sizeof(exprs[0]), "x0");
    }
    kt_buf_printf(b, "%*sout0[i] = ", b->indent, "");
    if (emit_double_elementwise(b, n, x) < 0)
        *rc = -EINVAL;
    kt_buf_printf(b, ";\n");
}

static void emit_reduce_body(kt_buf *b, const ops_graph *g, const ops_node *n)
{
    const ops_shape *xs = &g->tensors[n->in[0].tensor].shape;
    int r = xs->rank;
    bool red[OPS_MAX_RANK] = {false};
    for (int i = 0; i < n->attrs.n_axes; i++) {
        int ax = n->attrs.axes[i] < 0 ? n->attrs.axes[i] + r : n->attrs.axes[i];
        if (ax >= 0 && ax < r)
            red[ax] = true;
    }
    if (n->attrs.n_axes == 0)
        for (int i = 0; i < r; i++)
            red[i] = true;
    int64_t stride[OPS_MAX_RANK], s = 1, count = 1;
    for (int i = r - 1; i >= 0; i--) {
        stride[i] = s;
        s *= xs->d[i].size;
        if (red[i])
            count *= xs->d[i].size;
    }
    kt_buf_line(b, "/* kept axes from the output index (keepdim does not change the layout) */");
    kt_buf_line(b, "long long rem = i;");
    for (int i = r - 1; i >= 0; i--) {
        if (red[i])
            continue;
        kt_buf_line(b, "const long long x%d = rem %% %lldLL;", i, (long long)xs->d[i].size);
        kt_buf_line(b, "rem /= %lldLL;", (long long)xs->d[i].size);
    }
    const char *init = n->op == OPS_REDUCE_MAX   ? "-__longlong_as_double(0x7ff0000000000000LL)"
                       : n->op == OPS_REDUCE_MIN ? "__longlong_as_double(0x7ff0000000000000LL)"
                                                 : "0.0";
    /* A block per output: thread t takes j = t, t + REF_THREADS, ..., then a fixed tree over
     * the block's partials (a thread per output would walk a long reduction alone: a KL
     * divergence's one output over 2^28 elements took seconds). */
    kt_buf_line(b, "double acc = %s;", init);
    kt_buf_line(b, "for (long long j = threadIdx.x; j < %lldLL; j += %d) {", (long long)count,
                REF_THREADS);
    b->indent += 4;
    kt_buf_line(b, "long long jr = j;");
    for (int i = r - 1; i >= 0; i--) {
        if (!red[i])
            continue;
        kt_buf_line(b, "const long long x%d = jr %% %lldLL;", i, (long long)xs->d[i].size);
        kt_buf_line(b, "jr /= %lldLL;", (long long)xs->d[i].size);
    }
    kt_buf_printf(b, "%*sconst double v = in0[", b->indent, "");
    bool any = false;
    for (int i = 0; i < r; i++) {
        kt_buf_printf(b, "%sx%d * %lldLL", any ? " + " : "", i, (long long)stride[i]);
        any = true;
    }
    kt_buf_printf(b, "%s];\n", any ? "" : "0");
    switch (n->op) {
    case OPS_REDUCE_MAX:
        kt_buf_line(b, "acc = isnan(acc) ? acc : kt_ref_nan_max(v, acc);");
        break;
    case OPS_REDUCE_MIN:
        kt_buf_line(b, "acc = isnan(acc) ? acc : kt_ref_nan_min(v, acc);");
        break;
    default:
        kt_buf_line(b, "acc += v;");
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
    const char *merge =
        n->op == OPS_REDUCE_MAX   ? "kt_ref_max(part[threadIdx.x], part[threadIdx.x + s])"
        : n->op == OPS_REDUCE_MIN ? "kt_ref_min(part[threadIdx.x], part[threadIdx.x + s])"
                                  : "part[threadIdx.x] + part[threadIdx.x + s]";
    kt_buf_line(b, "__shared__ double part[%d];", REF_THREADS);
    kt_buf_line(b, "part[threadIdx.x] = acc;");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "for (int s = %d; s > 0; s >>= 1) {", REF_THREADS / 2);
    kt_buf_line(b, "    if (threadIdx.x < s)");
    kt_buf_line(b, "        part[threadIdx.x] = %s;", merge);
    kt_buf_line(b, "    __syncthreads();");
    kt_buf_line(b, "}");
    kt_buf_line(b, "if (threadIdx.x == 0)");
    if (n->op == OPS_REDUCE_MEAN)
        kt_buf_line(b, "    out0[i] = part[0] / (double)%lldLL;", (long long)count);
    else
        kt_buf_line(b, "    out0[i] = part[0];");
}

/* The batch dims of a shape (all but the last two). */
static ops_shape batch_of(const ops_shape *s)
{
    ops_shape r = *s;
    r.rank = s->rank > 2 ? s->rank - 2 : 0;
    return r;
}

static void emit_matmul_body(kt_buf *b, const ops_graph *g, const ops_node *n, const ref_params *p)
{
    const ops_shape *as = &g->tensors[n->in[0].tensor].shape;
    const ops_shape *bs = &g->tensors[n->in[1].tensor].shape;
    const ops_shape *os = &g->tensors[n->out].shape;
    bool ta = n->attrs.transpose_a, tb = n->attrs.transpose_b;
    int ra = as->rank, rb = bs->rank, ro = os->rank;
    long long M = as->d[ra - (ta ? 1 : 2)].size, K = as->d[ra - (ta ? 2 : 1)].size;
    long long N = bs->d[rb - (tb ? 2 : 1)].size;
    long long a_m = ta ? 1 : K, a_k = ta ? M : 1, b_k = tb ? 1 : N, b_n = tb ? K : 1;
    char names[OPS_MAX_RANK][16];
    const char *idx[OPS_MAX_RANK];
    axis_names(names, idx, ro, "o");
    emit_unravel(b, "i", os, "o");
    ops_shape ob = batch_of(os), ab = batch_of(as), bb = batch_of(bs);
    kt_buf_printf(b, "%*sconst double *pa = in%d + ", b->indent, "", p->of[0]);
    ops_emit_bcast_offset(b, &ab, &ob, idx);
    kt_buf_printf(b, " * %lldLL;\n", M * K);
    kt_buf_printf(b, "%*sconst double *pb = in%d + ", b->indent, "", p->of[1]);
    ops_emit_bcast_offset(b, &bb, &ob, idx);
    kt_buf_printf(b, " * %lldLL;\n", K * N);
    kt_buf_line(b, "const long long m = o%d, n = o%d;", ro - 2, ro - 1);
    kt_buf_line(b, "double acc = 0.0;");
    kt_buf_line(b, "for (long long k = 0; k < %lldLL; k++)", K);
    kt_buf_line(b, "    acc += pa[m * %lldLL + k * %lldLL] * pb[k * %lldLL + n * %lldLL];", a_m,
                a_k, b_k, b_n);
    kt_buf_line(b, "out0[i] = acc;");
}

/* A conv as a 3-d one (a conv2d of depth 1): one thread per output element, taps landing on
 * padding or on the zeros between input elements (input dilation) skipped. */
static void emit_conv_body(kt_buf *b, const ops_graph *g, const ops_node *n, const ref_params *p)
{
    ops_conv_geom cg;
    ops_conv_geom_of(g, n, &cg);
    const int64_t *I = cg.in, *F = cg.ker, *O = cg.out;
    long long in_sp = (long long)(I[0] * I[1] * I[2]), f_sp = (long long)(F[0] * F[1] * F[2]);
    long long o_sp = (long long)(O[0] * O[1] * O[2]);
    kt_buf_line(b, "/* %s: x %s, weight %s, %lld groups */", cg.nhwc ? "NHWC" : "NCHW",
                cg.nhwc ? "[N,D,H,W,C]" : "[N,C,D,H,W]", cg.nhwc ? "ODHWI" : "OIDHW",
                (long long)cg.groups);
    kt_buf_line(b, "long long rem = i;");
    if (cg.nhwc) {
        kt_buf_line(b, "const long long k = rem %% %lldLL;", (long long)cg.k);
        kt_buf_line(b, "rem /= %lldLL;", (long long)cg.k);
        kt_buf_line(b, "const long long osp = rem %% %lldLL, n = rem / %lldLL;", o_sp, o_sp);
    } else {
        kt_buf_line(b, "const long long osp = rem %% %lldLL;", o_sp);
        kt_buf_line(b, "rem /= %lldLL;", o_sp);
        kt_buf_line(b, "const long long k = rem %% %lldLL, n = rem / %lldLL;", (long long)cg.k,
                    (long long)cg.k);
    }
    kt_buf_line(b,
                "const long long o2 = osp %% %lldLL, o1 = (osp / %lldLL) %% %lldLL, "
                "o0 = osp / %lldLL;",
                (long long)O[2], (long long)O[2], (long long)O[1], (long long)(O[1] * O[2]));
    kt_buf_line(b, "const long long grp = k / %lldLL;", (long long)cg.kg);
    if (n->n_in > 2)
        kt_buf_line(b, "double acc = in%d[k];", p->of[2]);
    else
        kt_buf_line(b, "double acc = 0.0;");
    kt_buf_line(b, "for (long long c = 0; c < %lldLL; c++)", (long long)cg.cg);
    b->indent += 4;
    static const char *const ax[3] = {"0", "1", "2"};
    for (int i = 0; i < 3; i++) {
        kt_buf_line(b, "for (long long t%s = 0; t%s < %lldLL; t%s++) {", ax[i], ax[i],
                    (long long)F[i], ax[i]);
        b->indent += 4;
        /* the coordinate in the input with its zeros between elements */
        kt_buf_line(b, "const long long v%s = o%s * %d - %d + t%s * %d;", ax[i], ax[i],
                    cg.stride[i], cg.pad[i], ax[i], cg.dil[i]);
        kt_buf_line(b, "if (v%s < 0 || v%s %% %d != 0 || v%s / %d >= %lldLL)", ax[i], ax[i],
                    cg.idil[i], ax[i], cg.idil[i], (long long)I[i]);
        kt_buf_line(b, "    continue;");
        kt_buf_line(b, "const long long i%s = v%s / %d;", ax[i], ax[i], cg.idil[i]);
    }
    kt_buf_line(b, "const long long ci = grp * %lldLL + c;", (long long)cg.cg);
    kt_buf_line(b, "const long long sp = (i0 * %lldLL + i1) * %lldLL + i2;", (long long)I[1],
                (long long)I[2]);
    kt_buf_line(b, "const long long tap = (t0 * %lldLL + t1) * %lldLL + t2;", (long long)F[1],
                (long long)F[2]);
    if (cg.nhwc) {
        kt_buf_line(b, "const long long xo = (n * %lldLL + sp) * %lldLL + ci;", in_sp,
                    (long long)cg.c);
        kt_buf_line(b, "const long long wo = (k * %lldLL + tap) * %lldLL + c;", f_sp,
                    (long long)cg.cg);
    } else {
        kt_buf_line(b, "const long long xo = (n * %lldLL + ci) * %lldLL + sp;", (long long)cg.c,
                    in_sp);
        kt_buf_line(b, "const long long wo = (k * %lldLL + c) * %lldLL + tap;", (long long)cg.cg,
                    f_sp);
    }
    kt_buf_line(b, "acc += in%d[xo] * in%d[wo];", p->of[0], p->of[1]);
    for (int i = 2; i >= 0; i--) {
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
    b->indent -= 4;
    kt_buf_line(b, "out0[i] = acc;");
}

/* One warp per query row (lane: its lane): the row's softmax is computed once for its Dv
 * outputs, each dot product split over the lanes (columns lane, lane + 32, ...) and summed by a
 * butterfly, which leaves the same sum in every lane; lane owns outputs lane, lane + 32, ....
 * One thread per row ran a dependent chain of Skv x D additions: seconds at S = 4096, D = 128. */
static void emit_attention_body(kt_buf *b, const ops_graph *g, const ops_node *n,
                                const ref_params *p)
{
    const ops_shape *qs = &g->tensors[n->in[0].tensor].shape;
    const ops_shape *ks = &g->tensors[n->in[1].tensor].shape;
    const ops_shape *vs = &g->tensors[n->in[2].tensor].shape;
    const ops_shape *os = &g->tensors[n->out].shape;
    int r = os->rank;
    long long SQ = qs->d[r - 2].size, D = qs->d[r - 1].size;
    long long SKV = ks->d[r - 2].size, DV = vs->d[r - 1].size;
    double scale = n->attrs.has_scale ? n->attrs.scale : 1.0 / sqrt((double)D);
    ops_shape ob = batch_of(os), qb = batch_of(qs), kb = batch_of(ks), vb = batch_of(vs);
    char names[OPS_MAX_RANK][16];
    const char *idx[OPS_MAX_RANK];
    axis_names(names, idx, ob.rank, "o");
    kt_buf_line(b, "/* i is a query row: batch entry i / SQ, query i %% SQ */");
    kt_buf_line(b, "const long long bi = i / %lldLL, qi = i %% %lldLL;", SQ, SQ);
    emit_unravel(b, "bi", &ob, "o");
    kt_buf_printf(b, "%*sconst double *pq = in%d + (", b->indent, "", p->of[0]);
    ops_emit_bcast_offset(b, &qb, &ob, idx);
    kt_buf_printf(b, " * %lldLL + qi) * %lldLL;\n", SQ, D);
    /* grouped-query attention: k and v have hq / group heads on the last batch axis and query
     * head h reads head h / group: their offsets over hq heads, mapped back */
    long long hq = 1, group = 1;
    if (kb.rank > 0 && kb.rank == ob.rank && kb.d[kb.rank - 1].size != ob.d[ob.rank - 1].size &&
        kb.d[kb.rank - 1].size > 0) {
        hq = ob.d[ob.rank - 1].size;
        group = hq / kb.d[kb.rank - 1].size;
        kb.d[kb.rank - 1] = vb.d[vb.rank - 1] = ob.d[ob.rank - 1];
    }
    for (int t = 1; t <= 2; t++) {
        kt_buf_printf(b, "%*sconst double *p%c = in%d + (", b->indent, "", t == 1 ? 'k' : 'v',
                      p->of[t]);
        if (group > 1) {
            kt_buf_printf(b, "(");
            ops_emit_bcast_offset(b, t == 1 ? &kb : &vb, &ob, idx);
            kt_buf_printf(b, ") / %lldLL * %lldLL + (", hq, hq / group);
            ops_emit_bcast_offset(b, t == 1 ? &kb : &vb, &ob, idx);
            kt_buf_printf(b, ") %% %lldLL / %lldLL", hq, group);
        } else {
            ops_emit_bcast_offset(b, t == 1 ? &kb : &vb, &ob, idx);
        }
        kt_buf_printf(b, ") * %lldLL;%s\n", SKV * (t == 1 ? D : DV),
                      group > 1 ? " /* grouped-query: head h / group */" : "");
    }
    kt_buf_line(b, "double *po = out0 + i * %lldLL;", DV);
    kt_buf_printf(b, "%*sconst double scale = ", b->indent, "");
    double_lit(b, scale);
    kt_buf_printf(b, ";%s\n", n->attrs.has_scale ? "" : " /* 1 / sqrt(D) */");
    if (n->attrs.causal)
        kt_buf_line(b,
                    "const long long n_keys = qi + 1 < %lldLL ? qi + 1 : %lldLL; /* causal: "
                    "keys j <= i */",
                    SKV, SKV);
    else
        kt_buf_line(b, "const long long n_keys = %lldLL;", SKV);
    kt_buf_line(b, "double m = -__longlong_as_double(0x7ff0000000000000LL);");
    kt_buf_line(b, "for (long long j = 0; j < n_keys; j++) {");
    kt_buf_line(b, "    const double s = kt_ref_row_dot(pq, pk + j * %lldLL, %lldLL, lane);", D, D);
    kt_buf_line(b, "    m = kt_ref_nan_max(s * scale, m);");
    kt_buf_line(b, "}");
    kt_buf_line(b, "/* out = sum_j exp(s_j - m) v_j / sum_j exp(s_j - m), accumulated in out */");
    kt_buf_line(b, "for (long long c = lane; c < %lldLL; c += 32)", DV);
    kt_buf_line(b, "    po[c] = 0.0;");
    kt_buf_line(b, "double sum = 0.0;");
    kt_buf_line(b, "for (long long j = 0; j < n_keys; j++) {");
    kt_buf_line(b, "    const double s = kt_ref_row_dot(pq, pk + j * %lldLL, %lldLL, lane);", D, D);
    kt_buf_line(b, "    const double e = exp(s * scale - m);");
    kt_buf_line(b, "    sum += e;");
    kt_buf_line(b, "    for (long long c = lane; c < %lldLL; c += 32)", DV);
    kt_buf_line(b, "        po[c] += e * pv[j * %lldLL + c];", DV);
    kt_buf_line(b, "}");
    kt_buf_line(b, "for (long long c = lane; c < %lldLL; c += 32)", DV);
    kt_buf_line(b, "    po[c] /= sum;");
}

static void emit_permute_body(kt_buf *b, const ops_graph *g, const ops_node *n, const ref_params *p)
{
    const ops_shape *xs = &g->tensors[n->in[0].tensor].shape;
    const ops_shape *os = &g->tensors[n->out].shape;
    int r = xs->rank, perm[OPS_MAX_RANK];
    for (int i = 0; i < r; i++)
        perm[i] = i;
    if (n->attrs.n_perm == 0 && r >= 2) {
        perm[r - 2] = r - 1;
        perm[r - 1] = r - 2;
    } else {
        for (int i = 0; i < r && i < n->attrs.n_perm; i++)
            perm[i] = n->attrs.perm[i] < 0 ? n->attrs.perm[i] + r : n->attrs.perm[i];
    }
    int64_t xst[OPS_MAX_RANK], s = 1;
    for (int i = r - 1; i >= 0; i--) {
        xst[i] = s;
        s *= xs->d[i].size;
    }
    emit_unravel(b, "i", os, "o");
    kt_buf_printf(b, "%*sout0[i] = in%d[", b->indent, "", p->of[0]);
    for (int i = 0; i < r; i++)
        kt_buf_printf(b, "%so%d * %lldLL", i ? " + " : "", i, (long long)xst[perm[i]]);
    kt_buf_printf(b, "%s];\n", r ? "" : "0");
}

/* slice: operand index start + o * step per axis; outside the operand, the fill. */
static void emit_slice_body(kt_buf *b, const ops_graph *g, const ops_node *n, const ref_params *p)
{
    const ops_shape *xs = &g->tensors[n->in[0].tensor].shape;
    const ops_shape *os = &g->tensors[n->out].shape;
    const ops_attrs *a = &n->attrs;
    int r = xs->rank;
    int64_t xst[OPS_MAX_RANK], s = 1;
    for (int i = r - 1; i >= 0; i--) {
        xst[i] = s;
        s *= xs->d[i].size;
    }
    emit_unravel(b, "i", os, "o");
    for (int i = 0; i < r; i++)
        kt_buf_line(b, "const long long x%d = %dLL + o%d * %dLL;", i, a->start[i], i, a->step[i]);
    kt_buf_printf(b, "%*sconst bool inside = true", b->indent, "");
    for (int i = 0; i < r; i++)
        kt_buf_printf(b, " && x%d >= 0 && x%d < %lldLL", i, i, (long long)xs->d[i].size);
    kt_buf_printf(b, ";\n");
    kt_buf_printf(b, "%*sout0[i] = inside ? in%d[", b->indent, "", p->of[0]);
    for (int i = 0; i < r; i++)
        kt_buf_printf(b, "%sx%d * %lldLL", i ? " + " : "", i, (long long)xst[i]);
    kt_buf_printf(b, "%s] : ", r ? "" : "0");
    double_lit(b, a->has_fill ? a->fill : 0.0); /* validation: no fill, never outside */
    kt_buf_printf(b, ";\n");
}

/* cumsum, cumprod: thread i walks line i (outer index i / inner, inner index i % inner) along
 * the axis in order, as ops/reference.c does. */
static void emit_scan_body(kt_buf *b, const ops_graph *g, const ops_node *n, const ref_params *p)
{
    const ops_shape *xs = &g->tensors[n->in[0].tensor].shape;
    int r = xs->rank, ax = n->attrs.axis < 0 ? n->attrs.axis + r : n->attrs.axis;
    int64_t inner = 1;
    for (int i = ax + 1; i < r; i++)
        inner *= xs->d[i].size;
    long long len = (long long)xs->d[ax].size;
    bool prod = n->op == OPS_CUMPROD;
    kt_buf_line(b, "const long long base = i / %lldLL * %lldLL + i %% %lldLL;", (long long)inner,
                len * (long long)inner, (long long)inner);
    kt_buf_line(b, "double acc = %s;", prod ? "1.0" : "0.0");
    kt_buf_line(b, "for (long long j = 0; j < %lldLL; j++) {", len);
    kt_buf_line(b, "    acc = acc %s in%d[base + j * %lldLL];", prod ? "*" : "+", p->of[0],
                (long long)inner);
    kt_buf_line(b, "    out0[base + j * %lldLL] = acc;", (long long)inner);
    kt_buf_line(b, "}");
}

/* Emits the kernel of node ni named entry; fills launch (args left to the caller). */
static int emit_node_kernel(kt_buf *b, const ops_graph *g, int ni, const char *entry,
                            ops_kernel_launch *launch)
{
    const ops_node *n = &g->nodes[ni];
    const ops_tensor *ot = &g->tensors[n->out];
    ref_params p;
    ref_params_of(n, &p);
    int64_t threads = shape_numel(&ot->shape), items = threads;
    bool reduce = ops_op_info_get(n->op)->kind == OPS_KIND_REDUCE;
    if (n->op == OPS_ATTENTION) { /* a warp per query row */
        items /= ot->shape.d[ot->shape.rank - 1].size ? ot->shape.d[ot->shape.rank - 1].size : 1;
        threads = items * 32;
    } else if (reduce) { /* a block per output element */
        threads = items * REF_THREADS;
    } else if (ops_op_info_get(n->op)->kind == OPS_KIND_SCAN) { /* a thread per line */
        int ax = n->attrs.axis < 0 ? n->attrs.axis + ot->shape.rank : n->attrs.axis;
        int64_t len = ot->shape.d[ax].size;
        items = threads = len ? items / len : 0;
    }
    char shape[256], c[OPS_EMIT_COMMENT_MAX], cs[3 * sizeof(shape)];
    ops_shape_format(g, &ot->shape, shape, sizeof(shape)); /* holds symbol names */
    kt_buf_printf(b, "\n/* %s = %s(", ops_emit_comment_text(ot->name, c, sizeof(c)),
                  ops_op_info_get(n->op)->name);
    for (int k = 0; k < n->n_in; k++) {
        if (n->in[k].tensor == OPS_SCALAR)
            kt_buf_printf(b, "%s%g", k ? ", " : "", n->in[k].scalar);
        else
            kt_buf_printf(b, "%s%s", k ? ", " : "",
                          ops_emit_comment_text(g->tensors[n->in[k].tensor].name, c, sizeof(c)));
    }
    kt_buf_printf(b, ")  %s, fp64, one %s */\n", ops_emit_comment_text(shape, cs, sizeof(cs)),
                  n->op == OPS_ATTENTION                           ? "warp per query row"
                  : reduce                                         ? "block per output element"
                  : ops_op_info_get(n->op)->kind == OPS_KIND_SCAN ? "thread per line"
                                                                   : "thread per output element");
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(%d)", REF_THREADS);
    kt_buf_line(b, "%s(", entry);
    for (int j = 0; j < p.n; j++)
        kt_buf_line(b, "    const double *__restrict__ in%d, /* %s */", j,
                    ops_emit_comment_text(g->tensors[p.tensor[j]].name, c, sizeof(c)));
    kt_buf_line(b, "    double *__restrict__ out0) /* %s */",
                ops_emit_comment_text(ot->name, c, sizeof(c)));
    kt_buf_line(b, "{");
    b->indent += 4;
    if (n->op == OPS_ATTENTION) {
        kt_buf_line(b, "/* the 32 lanes of a warp share i: the return is the whole warp's */");
        kt_buf_line(b, "const long long i = ((long long)blockIdx.x * %d + threadIdx.x) / 32;",
                    REF_THREADS);
        kt_buf_line(b, "const int lane = threadIdx.x & 31;");
    } else if (reduce) {
        kt_buf_line(b, "/* the block's threads share i: the return is the whole block's */");
        kt_buf_line(b, "const long long i = blockIdx.x;");
    } else {
        kt_buf_line(b, "const long long i = (long long)blockIdx.x * %d + threadIdx.x;",
                    REF_THREADS);
    }
    kt_buf_line(b, "if (i >= %lldLL)", (long long)items);
    kt_buf_line(b, "    return;");
    int rc = 0;
    switch (ops_op_info_get(n->op)->kind) {
    case OPS_KIND_UNARY:
    case OPS_KIND_BINARY:
        emit_elementwise_body(b, g, n, &p, &rc);
        break;
    case OPS_KIND_REDUCE:
        emit_reduce_body(b, g, n);
        break;
    case OPS_KIND_MATMUL:
        emit_matmul_body(b, g, n, &p);
        break;
    case OPS_KIND_CONV:
        emit_conv_body(b, g, n, &p);
        break;
    case OPS_KIND_ATTENTION:
        emit_attention_body(b, g, n, &p);
        break;
    case OPS_KIND_SCAN:
        emit_scan_body(b, g, n, &p);
        break;
    case OPS_KIND_LAYOUT:
        if (n->op == OPS_RESHAPE)
            kt_buf_line(b, "out0[i] = in%d[i]; /* same row-major order */", p.of[0]);
        else if (n->op == OPS_SLICE)
            emit_slice_body(b, g, n, &p);
        else
            emit_permute_body(b, g, n, &p);
        break;
    default:
        rc = -EINVAL;
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
    memset(launch, 0, sizeof(*launch));
    snprintf(launch->entry, sizeof(launch->entry), "%s", entry);
    int64_t blocks = (threads + REF_THREADS - 1) / REF_THREADS;
    launch->grid[0] = (uint32_t)(blocks > 0 ? blocks : 1);
    launch->grid[1] = launch->grid[2] = 1;
    launch->block[0] = REF_THREADS;
    launch->block[1] = launch->block[2] = 1;
    if (blocks > INT32_MAX)
        rc = -EINVAL;
    return rc;
}

static int reference_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                          ops_emitted *out, ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    if (reference_prune(grp, s, dev))
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "reference: the group is not one node of the canonical op set");
    const ops_graph *g = grp->g;
    int ni = grp->nodes[0];
    kt_buf b = {0};
    ops_emit_header(&b, grp, s);
    ops_emit_shared_prelude(&b, out);
    kt_buf_printf(&b, "%s", ref_helpers);
    char entry[64];
    snprintf(entry, sizeof(entry), "ktune_reference_%s%s", ops_op_info_get(g->nodes[ni].op)->name,
             grp->entry_suffix);
    ops_kernel_launch *k = &out->kernels[0];
    int rc = emit_node_kernel(&b, g, ni, entry, k);
    if (rc == 0)
        rc = kt_buf_status(&b);
    if (rc < 0) {
        kt_buf_free(&b);
        if (rc == -ENOMEM)
            return rc;
        return ops_diag_set(d, g, OPS_RULE_SHAPE, ni, "", "reference: cannot emit this node");
    }
    /* Parameters: the node's distinct tensors in first-use order, which is grp->in's order. */
    for (int i = 0; i < grp->n_in; i++)
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->in[i]};
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->out[0]};
    out->source = kt_buf_take(&b);
    out->n_kernels = 1;
    return 0;
}

/* A naive kernel: count its flops, and its bytes as every operand read once and the output
 * written once (the estimate only has to be positive and sane; nobody races a reference). */
static void reference_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                               ops_estimate *e)
{
    memset(e, 0, sizeof(*e));
    const ops_graph *g = grp->g;
    for (int i = 0; i < grp->n_in; i++)
        e->bytes += 8.0 * (double)shape_numel(&g->tensors[grp->in[i]].shape);
    e->bytes += 8.0 * (double)shape_numel(&g->tensors[grp->out[0]].shape);
    /* Contractions and reductions: about two flops per input element per output column. */
    const ops_node *n = &g->nodes[grp->nodes[0]];
    const ops_shape *os = &g->tensors[n->out].shape;
    double outn = (double)shape_numel(os);
    e->flops = outn;
    if (n->op == OPS_MATMUL) {
        double a = (double)shape_numel(&g->tensors[n->in[0].tensor].shape);
        e->flops = 2.0 * a * (double)os->d[os->rank - 1].size;
    } else if (ops_op_info_get(n->op)->kind == OPS_KIND_CONV || n->op == OPS_ATTENTION ||
               ops_op_info_get(n->op)->kind == OPS_KIND_REDUCE) {
        e->flops = 2.0 * (double)shape_numel(&g->tensors[n->in[0].tensor].shape);
    }
    if (e->flops < outn)
        e->flops = outn;
    double fp64 = dev->fp32_flops_per_s / 2; /* H100 fp64 runs at half the fp32 rate */
    double t_math = e->flops / (fp64 * 0.1);
    double t_mem = e->bytes / (dev->dram_bytes_per_s * 0.3);
    e->seconds = (t_math > t_mem ? t_math : t_mem) + 3e-6;
    e->occupancy = 1.0;
}

/* Workspace offsets of the intermediates (ws_off[t], -1 for graph inputs and outputs), 256-byte
 * aligned slices reused once dead: in topological order each node's output takes the smallest
 * free slice that holds it (or a new one), then the operands it read last are freed. Every
 * intermediate is double: a graph of several nodes over gigabytes would otherwise need the sum
 * of them all (KernelBench's SELU, 1.6G elements, asked 77 GB). */
static int place_intermediates(const ops_graph *g, const int32_t *order, int64_t *ws_off,
                               int64_t *total)
{
    int32_t *last = malloc(((size_t)g->n_tensors + 1) * sizeof(*last));
    int64_t *slot_off = malloc(((size_t)g->n_nodes + 1) * sizeof(*slot_off));
    int64_t *slot_len = malloc(((size_t)g->n_nodes + 1) * sizeof(*slot_len));
    int32_t *slot_of = malloc(((size_t)g->n_tensors + 1) * sizeof(*slot_of));
    bool *slot_free = calloc((size_t)g->n_nodes + 1, sizeof(*slot_free));
    int rc = last && slot_off && slot_len && slot_of && slot_free ? 0 : -ENOMEM;
    int n_slots = 0;
    *total = 0;
    for (int t = 0; rc == 0 && t < g->n_tensors; t++) {
        ws_off[t] = -1;
        last[t] = -1;
        slot_of[t] = -1;
    }
    for (int i = 0; rc == 0 && i < g->n_nodes; i++) {
        const ops_node *n = &g->nodes[order[i]];
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k].tensor >= 0)
                last[n->in[k].tensor] = i;
    }
    for (int i = 0; rc == 0 && i < g->n_nodes; i++) {
        const ops_node *n = &g->nodes[order[i]];
        int32_t t = n->out;
        if (!g->tensors[t].is_output) {
            int64_t bytes = (8 * shape_numel(&g->tensors[t].shape) + 255) / 256 * 256;
            int best = -1;
            for (int s = 0; s < n_slots; s++)
                if (slot_free[s] && slot_len[s] >= bytes &&
                    (best < 0 || slot_len[s] < slot_len[best]))
                    best = s;
            if (best < 0) {
                best = n_slots++;
                slot_off[best] = *total;
                slot_len[best] = bytes;
                *total += (uint64_t)bytes;
            }
            slot_free[best] = false;
            slot_of[t] = best;
            ws_off[t] = slot_off[best];
            if (last[t] < 0) /* read by no node: dead once written */
                slot_free[best] = true;
        }
        for (int k = 0; k < n->n_in; k++) {
            int32_t u = n->in[k].tensor;
            if (u >= 0 && slot_of[u] >= 0 && last[u] == i)
                slot_free[slot_of[u]] = true;
        }
    }
    free(last);
    free(slot_off);
    free(slot_len);
    free(slot_of);
    free(slot_free);
    return rc;
}

int ops_emit_reference_graph(const ops_graph *g, ops_ref_program *out, ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    if (!g->validated || ops_graph_first_unbound(g))
        return ops_diag_set(d, g, OPS_RULE_UNBOUND_DIM, -1, "",
                            "reference: the graph must be validated with every dimension bound");
    int rc = 0;
    int32_t *order = calloc((size_t)g->n_nodes + 1, sizeof(*order));
    int64_t *ws_off = calloc((size_t)g->n_tensors + 1, sizeof(*ws_off));
    out->kernels = calloc((size_t)g->n_nodes + 1, sizeof(*out->kernels));
    kt_buf b = {0};
    if (!order || !ws_off || !out->kernels) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = ops_graph_topo_order(g, order, d);
    if (rc < 0)
        goto fail;
    for (int i = 0; i < g->n_nodes; i++) {
        const ops_node *n = &g->nodes[order[i]];
        if (!reference_op_ok(n->op)) {
            rc = ops_diag_set(d, g, OPS_RULE_UNKNOWN_OP, order[i], "",
                              "reference: op %s is not canonical (canonicalise the graph first)",
                              ops_op_info_get(n->op)->name);
            goto fail;
        }
    }
    rc = place_intermediates(g, order, ws_off, &out->workspace_bytes);
    if (rc < 0)
        goto fail;
    char c[OPS_EMIT_COMMENT_MAX];
    kt_buf_printf(&b, "/*\n * ktune fp64 reference — graph %s, %d kernel%s in topological order\n",
                  ops_emit_comment_text(g->name, c, sizeof(c)), g->n_nodes,
                  g->n_nodes == 1 ? "" : "s");
    kt_buf_printf(&b, " * (inputs, outputs and intermediates are double; intermediates live in "
                      "the workspace)\n */\n");
    ops_emit_prelude(&b);
    kt_buf_printf(&b, "%s", ref_helpers);
    for (int i = 0; i < g->n_nodes; i++) {
        const ops_node *n = &g->nodes[order[i]];
        ops_kernel_launch *k = &out->kernels[i];
        char entry[64];
        snprintf(entry, sizeof(entry), "ktune_ref_%d_%s", i, ops_op_info_get(n->op)->name);
        rc = emit_node_kernel(&b, g, order[i], entry, k);
        if (rc < 0) {
            if (rc != -ENOMEM)
                rc = ops_diag_set(d, g, OPS_RULE_SHAPE, order[i], "",
                                  "reference: cannot emit this node");
            goto fail;
        }
        ref_params p;
        ref_params_of(n, &p);
        for (int j = 0; j <= p.n; j++) {
            int32_t t = j < p.n ? p.tensor[j] : n->out;
            if (ws_off[t] >= 0)
                k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = ws_off[t]};
            else
                k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = t};
        }
        out->n_kernels++;
    }
    rc = kt_buf_status(&b);
    if (rc < 0)
        goto fail;
    out->source = kt_buf_take(&b);
    free(ws_off);
    free(order);
    return 0;
fail:
    kt_buf_free(&b);
    free(ws_off);
    free(order);
    ops_ref_program_free(out);
    return rc;
}

void ops_ref_program_free(ops_ref_program *p)
{
    free(p->source);
    free(p->kernels);
    memset(p, 0, sizeof(*p));
}

const ops_family ops_family_reference = {
    .id = OPS_FAM_REFERENCE,
    .name = "reference",
    .n_knobs = N_KNOBS,
    .knobs = reference_knobs,
    .matches = reference_matches,
    .prune = reference_prune,
    .emit = reference_emit,
    .estimate = reference_estimate,
};
