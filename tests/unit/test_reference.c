/* The fp64 reference interpreter and the cost counts. Expected values were computed offline
 * (by hand or with NumPy) and are written here as literals. Graphs are built with the builder
 * API with every shape filled in by hand, so these tests check the interpreter alone; the
 * composite-vs-canonical and cost tests also go through ops_graph_validate and
 * ops_graph_canonicalize. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/family.h"
#include "ops/ops.h"

/* ---- graph building helpers ---- */

static ops_shape make_shape(const int64_t *dims, int rank)
{
    ops_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++) {
        s.d[i].size = dims[i];
        s.d[i].sym = OPS_NO_SYM;
    }
    return s;
}

#define SHAPE(...)                                                                                 \
    make_shape((const int64_t[]){__VA_ARGS__},                                                     \
               (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define SCALAR_SHAPE ((ops_shape){.rank = 0})
#define T(i)         ((ops_operand){.tensor = (i)})
#define SC(v)        ((ops_operand){.tensor = OPS_SCALAR, .scalar = (v)})

static int input(ops_graph *g, const char *name, ops_shape s)
{
    int t = ops_graph_add_input(g, name, OPS_DT_F32, &s, false);
    assert_true(t >= 0);
    return t;
}

/* Adds a node with its operands and its (hand-inferred) output shape; returns the output
 * tensor. */
static int add_node(ops_graph *g, ops_op op, const char *out, const ops_attrs *a, ops_shape s,
                    int n_in, const ops_operand *in)
{
    int n = ops_graph_add_node(g, op, out, a);
    assert_true(n >= 0);
    g->nodes[n].n_in = n_in;
    memcpy(g->nodes[n].in, in, sizeof(ops_operand) * (size_t)n_in);
    int t = g->nodes[n].out;
    g->tensors[t].dtype = a && op == OPS_CAST ? a->to : OPS_DT_F32;
    g->tensors[t].shape = s;
    return t;
}

#define NODE(g, op, out, a, s, ...)                                                                \
    add_node(g, op, out, a, s, (int)(sizeof((ops_operand[]){__VA_ARGS__}) / sizeof(ops_operand)),  \
             (ops_operand[]){__VA_ARGS__})

static ops_attrs attrs(ops_op op)
{
    ops_attrs a;
    ops_attrs_default(op, &a);
    return a;
}

/* Marks t as the single output, declares the graph validated (shapes were filled by hand) and
 * runs it. */
static void run1(ops_graph *g, int t, const double *const *in, double *out)
{
    assert_int_equal(ops_graph_mark_output(g, t), 0);
    g->validated = true;
    ops_diag d = {0};
    int rc = ops_ref_run(g, in, (double *const[]){out}, &d);
    if (rc != 0)
        fail_msg("ops_ref_run: %d: %s", rc, d.msg);
}

static void assert_close(const double *got, const double *want, int n, double tol)
{
    for (int i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]);
        double lim = tol * (1.0 + fabs(want[i]));
        if (!(err <= lim) && !(isnan(got[i]) && isnan(want[i])))
            fail_msg("element %d: got %.17g, want %.17g", i, got[i], want[i]);
    }
}

/* Runs op over a 1-D input x of n elements and compares with want. */
static void check_unary(ops_op op, const ops_attrs *a, const double *x, const double *want, int n)
{
    ops_graph *g = ops_graph_new("unary");
    int X = input(g, "X", SHAPE(n));
    int Y = NODE(g, op, "Y", a, SHAPE(n), T(X));
    double out[16];
    assert_true(n <= 16);
    run1(g, Y, (const double *[]){x}, out);
    assert_close(out, want, n, 1e-14);
    ops_graph_free(g);
}

/* ---- pointwise unary ---- */

static void test_unary_simple(void **state)
{
    (void)state;
    const double x[] = {-2.0, -0.5, 0.0, 0.75, 3.0};
    check_unary(OPS_NEG, NULL, x, (const double[]){2.0, 0.5, -0.0, -0.75, -3.0}, 5);
    check_unary(OPS_ABS, NULL, x, (const double[]){2.0, 0.5, 0.0, 0.75, 3.0}, 5);
    check_unary(OPS_RELU, NULL, x, (const double[]){0.0, 0.0, 0.0, 0.75, 3.0}, 5);
    check_unary(OPS_SQUARE, NULL, x, (const double[]){4.0, 0.25, 0.0, 0.5625, 9.0}, 5);
    const double nz[] = {-2.0, -0.5, 0.25, 4.0};
    check_unary(OPS_RECIP, NULL, nz, (const double[]){-0.5, -2.0, 4.0, 0.25}, 4);
}

static void test_unary_exp_log_sqrt(void **state)
{
    (void)state;
    const double p[] = {0.25, 1.0, 2.0, 9.0};
    check_unary(OPS_EXP, NULL, p,
                (const double[]){1.2840254166877414, 2.718281828459045, 7.38905609893065,
                                 8103.083927575384},
                4);
    check_unary(OPS_LOG, NULL, p,
                (const double[]){-1.3862943611198906, 0.0, 0.6931471805599453, 2.1972245773362196},
                4);
    check_unary(OPS_SQRT, NULL, p, (const double[]){0.5, 1.0, 1.4142135623730951, 3.0}, 4);
    check_unary(OPS_RSQRT, NULL, p,
                (const double[]){2.0, 1.0, 0.7071067811865475, 0.3333333333333333}, 4);
}

static void test_unary_activations(void **state)
{
    (void)state;
    const double x[] = {-2.0, -0.5, 0.0, 0.75, 3.0};
    check_unary(OPS_GELU, NULL, x,
                (const double[]){-0.04550026389635842, -0.15426876936299344, 0.0,
                                 0.5800294857173488, 2.99595030590511},
                5);
    check_unary(OPS_GELU_TANH, NULL, x,
                (const double[]){-0.04540230591222494, -0.15428599017485606, 0.0,
                                 0.5799605551656203, 2.996362607918227},
                5);
    check_unary(OPS_SILU, NULL, x,
                (const double[]){-0.2384058440442351, -0.1887703343990727, 0.0, 0.5093840243815447,
                                 2.8577223804673},
                5);
    check_unary(OPS_SIGMOID, NULL, x,
                (const double[]){0.11920292202211755, 0.3775406687981454, 0.5, 0.679178699175393,
                                 0.9525741268224334},
                5);
    check_unary(OPS_TANH, NULL, x,
                (const double[]){-0.9640275800758169, -0.46211715726000974, 0.0, 0.6351489523872873,
                                 0.9950547536867305},
                5);
    check_unary(OPS_MISH, NULL, x,
                (const double[]){-0.2525014826957089, -0.22074377465173, 0.0, 0.6100183352182934,
                                 2.9865350049679575},
                5);
    check_unary(OPS_SOFTPLUS, NULL, x,
                (const double[]){0.1269280110429725, 0.4740769841801067, 0.6931471805599453,
                                 1.1368710061148999, 3.048587351573742},
                5);
}

/* softplus, sigmoid and mish must not overflow or lose everything at the extremes. */
static void test_unary_stable_extremes(void **state)
{
    (void)state;
    const double x[] = {-1000.0, -40.0, 40.0, 1000.0};
    check_unary(OPS_SOFTPLUS, NULL, x, (const double[]){0.0, 4.248354255291589e-18, 40.0, 1000.0},
                4);
    check_unary(OPS_SIGMOID, NULL, x, (const double[]){0.0, 4.248354255291589e-18, 1.0, 1.0}, 4);
    check_unary(OPS_MISH, NULL, x, (const double[]){-0.0, -1.6993417021166355e-16, 40.0, 1000.0},
                4);
    check_unary(OPS_SILU, NULL, x, (const double[]){-0.0, -1.6993417021166355e-16, 40.0, 1000.0},
                4);
}

static void test_unary_clip_and_cast(void **state)
{
    (void)state;
    const double x[] = {-3.0, -0.5, 0.25, 2.0};
    check_unary(OPS_HARDTANH, NULL, x, (const double[]){-1.0, -0.5, 0.25, 1.0}, 4);
    ops_attrs a = attrs(OPS_CLAMP);
    a.lo = 0.0;
    a.hi = 1.5;
    check_unary(OPS_CLAMP, &a, x, (const double[]){0.0, 0.0, 0.25, 1.5}, 4);
    a = attrs(OPS_CLAMP); /* no bounds: identity */
    check_unary(OPS_CLAMP, &a, x, x, 4);
    check_unary(OPS_LEAKY_RELU, NULL, x, (const double[]){-0.03, -0.005, 0.25, 2.0}, 4);
    a = attrs(OPS_LEAKY_RELU);
    a.alpha = 0.2;
    check_unary(OPS_LEAKY_RELU, &a, x, (const double[]){-0.6, -0.1, 0.25, 2.0}, 4);
    /* cast is the identity: the reference does not round to f16. */
    a = attrs(OPS_CAST);
    a.to = OPS_DT_F16;
    const double fine[] = {0.1, 1.0 / 3.0, 65519.0, 1e-9};
    check_unary(OPS_CAST, &a, fine, fine, 4);
}

/* ---- pointwise binary ---- */

static void check_binary_same(ops_op op, const double *want)
{
    const double x[] = {1.0, -2.0, 3.0, 0.5}, y[] = {2.0, 4.0, -1.5, 3.0};
    ops_graph *g = ops_graph_new("binary");
    int X = input(g, "X", SHAPE(4)), Y = input(g, "Y", SHAPE(4));
    int Z = NODE(g, op, "Z", NULL, SHAPE(4), T(X), T(Y));
    double out[4];
    run1(g, Z, (const double *[]){x, y}, out);
    assert_close(out, want, 4, 1e-15);
    ops_graph_free(g);
}

static void test_binary_same_shape(void **state)
{
    (void)state;
    check_binary_same(OPS_ADD, (const double[]){3.0, 2.0, 1.5, 3.5});
    check_binary_same(OPS_SUB, (const double[]){-1.0, -6.0, 4.5, -2.5});
    check_binary_same(OPS_MUL, (const double[]){2.0, -8.0, -4.5, 1.5});
    check_binary_same(OPS_DIV, (const double[]){0.5, -0.5, -2.0, 1.0 / 6.0});
    check_binary_same(OPS_MAX, (const double[]){2.0, 4.0, 3.0, 3.0});
    check_binary_same(OPS_MIN, (const double[]){1.0, -2.0, -1.5, 0.5});
    check_binary_same(OPS_POW, (const double[]){1.0, 16.0, 0.19245008972987526, 0.125});
}

/* [2,3] + [3], [2,1] * [1,3], [3] - [2,3]. */
static void test_binary_broadcast(void **state)
{
    (void)state;
    const double a[] = {1, 2, 3, 4, 5, 6}, row[] = {10, 20, 30}, col[] = {2, -1};
    double out[6];

    ops_graph *g = ops_graph_new("bc1");
    int A = input(g, "A", SHAPE(2, 3)), R = input(g, "R", SHAPE(3));
    run1(g, NODE(g, OPS_ADD, "Z", NULL, SHAPE(2, 3), T(A), T(R)), (const double *[]){a, row}, out);
    assert_close(out, (const double[]){11, 22, 33, 14, 25, 36}, 6, 0);
    ops_graph_free(g);

    g = ops_graph_new("bc2");
    int C = input(g, "C", SHAPE(2, 1)), R2 = input(g, "R", SHAPE(1, 3));
    run1(g, NODE(g, OPS_MUL, "Z", NULL, SHAPE(2, 3), T(C), T(R2)), (const double *[]){col, row},
         out);
    assert_close(out, (const double[]){20, 40, 60, -10, -20, -30}, 6, 0);
    ops_graph_free(g);

    g = ops_graph_new("bc3");
    int R3 = input(g, "R", SHAPE(3)), A3 = input(g, "A", SHAPE(2, 3));
    run1(g, NODE(g, OPS_SUB, "Z", NULL, SHAPE(2, 3), T(R3), T(A3)), (const double *[]){row, a},
         out);
    assert_close(out, (const double[]){9, 18, 27, 6, 15, 24}, 6, 0);
    ops_graph_free(g);
}

/* A scalar operand on either side, and a rank-3 broadcast of [2,1,2] against [3,1]. */
static void test_binary_scalar_and_rank3(void **state)
{
    (void)state;
    const double x[] = {1.0, 2.0, 4.0};
    double out[12];
    ops_graph *g = ops_graph_new("scalar");
    int X = input(g, "X", SHAPE(3));
    int t0 = NODE(g, OPS_SUB, "t0", NULL, SHAPE(3), SC(10.0), T(X));
    int t1 = NODE(g, OPS_POW, "t1", NULL, SHAPE(3), T(t0), SC(2.0));
    int t2 = NODE(g, OPS_DIV, "t2", NULL, SHAPE(3), T(t1), SC(-3.0));
    run1(g, t2, (const double *[]){x}, out);
    assert_close(out, (const double[]){-27.0, -64.0 / 3.0, -12.0}, 3, 1e-15);
    ops_graph_free(g);

    const double p[] = {1, 2, 3, 4}, q[] = {10, 20, 30};
    g = ops_graph_new("rank3");
    int P = input(g, "P", SHAPE(2, 1, 2)), Q = input(g, "Q", SHAPE(3, 1));
    run1(g, NODE(g, OPS_ADD, "Z", NULL, SHAPE(2, 3, 2), T(P), T(Q)), (const double *[]){p, q}, out);
    assert_close(out, (const double[]){11, 12, 21, 22, 31, 32, 13, 14, 23, 24, 33, 34}, 12, 0);
    ops_graph_free(g);
}

/* max/min propagate NaN from either side, like torch.maximum. */
static void test_binary_nan(void **state)
{
    (void)state;
    const double x[] = {NAN, 1.0}, y[] = {1.0, NAN};
    ops_graph *g = ops_graph_new("nan");
    int X = input(g, "X", SHAPE(2)), Y = input(g, "Y", SHAPE(2));
    double out[2];
    run1(g, NODE(g, OPS_MAX, "Z", NULL, SHAPE(2), T(X), T(Y)), (const double *[]){x, y}, out);
    assert_true(isnan(out[0]) && isnan(out[1]));
    ops_graph_free(g);
}

/* NaN passes through relu, hardtanh, clamp (with one or two bounds) and leaky relu, and through
 * min from either side, as in PyTorch (C's fmax/fmin would return the other operand). */
static void test_unary_nan(void **state)
{
    (void)state;
    const double x[] = {NAN, -2.0, 0.5, 3.0};
    check_unary(OPS_RELU, NULL, x, (const double[]){NAN, 0.0, 0.5, 3.0}, 4);
    check_unary(OPS_HARDTANH, NULL, x, (const double[]){NAN, -1.0, 0.5, 1.0}, 4);
    check_unary(OPS_LEAKY_RELU, NULL, x, (const double[]){NAN, -0.02, 0.5, 3.0}, 4);
    ops_attrs a = attrs(OPS_CLAMP);
    a.lo = -1.0;
    a.hi = 1.0;
    check_unary(OPS_CLAMP, &a, x, (const double[]){NAN, -1.0, 0.5, 1.0}, 4);
    a.hi = INFINITY; /* clamp(min=-1) */
    check_unary(OPS_CLAMP, &a, x, (const double[]){NAN, -1.0, 0.5, 3.0}, 4);
    a.lo = -INFINITY; /* clamp(max=1) */
    a.hi = 1.0;
    check_unary(OPS_CLAMP, &a, x, (const double[]){NAN, -2.0, 0.5, 1.0}, 4);

    const double p[] = {NAN, 1.0, -1.0}, q[] = {1.0, NAN, 2.0};
    ops_graph *g = ops_graph_new("nan_min");
    int P = input(g, "P", SHAPE(3)), Q = input(g, "Q", SHAPE(3));
    double out[3];
    run1(g, NODE(g, OPS_MIN, "Z", NULL, SHAPE(3), T(P), T(Q)), (const double *[]){p, q}, out);
    assert_true(isnan(out[0]) && isnan(out[1]) && out[2] == -1.0);
    ops_graph_free(g);
}

/* ---- reductions ---- */

static const double r_in[24] = {-7.5, -6.5, -5.5, -4.5, -30.0, -2.5, -1.5, -0.5,
                                0.5,  1.5,  2.5,  3.5,  4.5,   5.5,  6.5,  7.5,
                                8.5,  9.5,  10.5, 11.5, 12.5,  13.5, 14.5, 40.0};

static void check_reduce(ops_op op, const int *axes, int n_axes, bool keepdim, ops_shape out_s,
                         const double *want, int n)
{
    ops_graph *g = ops_graph_new("reduce");
    int X = input(g, "X", SHAPE(2, 3, 4));
    ops_attrs a = attrs(op);
    a.n_axes = n_axes;
    memcpy(a.axes, axes, sizeof(int) * (size_t)n_axes);
    a.keepdim = keepdim;
    double out[24];
    run1(g, NODE(g, op, "Y", &a, out_s, T(X)), (const double *[]){r_in}, out);
    assert_close(out, want, n, 1e-15);
    ops_graph_free(g);
}

static void test_reduce_sum_mean(void **state)
{
    (void)state;
    check_reduce(OPS_REDUCE_SUM, (const int[]){0, 2}, 2, false, SHAPE(3),
                 (const double[]){0.0, 5.5, 88.5}, 3);
    /* keepdim changes the shape, not the values or their order */
    check_reduce(OPS_REDUCE_SUM, (const int[]){2, 0}, 2, true, SHAPE(1, 3, 1),
                 (const double[]){0.0, 5.5, 88.5}, 3);
    check_reduce(OPS_REDUCE_MEAN, (const int[]){-1}, 1, false, SHAPE(2, 3),
                 (const double[]){-6.0, -8.625, 2.0, 6.0, 10.0, 20.125}, 6);
    check_reduce(OPS_REDUCE_SUM, (const int[]){0, 1, 2}, 3, false, SCALAR_SHAPE,
                 (const double[]){94.0}, 1);
}

static void test_reduce_max_min(void **state)
{
    (void)state;
    check_reduce(OPS_REDUCE_MAX, (const int[]){1}, 1, true, SHAPE(2, 1, 4),
                 (const double[]){0.5, 1.5, 2.5, 3.5, 12.5, 13.5, 14.5, 40.0}, 8);
    check_reduce(OPS_REDUCE_MIN, (const int[]){0, -2}, 2, false, SHAPE(4),
                 (const double[]){-30.0, -6.5, -5.5, -4.5}, 4);
}

/* amax/amin over a row holding a NaN (first, middle or last) is NaN; other rows are not
 * affected. */
static void test_reduce_max_min_nan(void **state)
{
    (void)state;
    const double x[] = {NAN, 1.0, 2.0, 3.0, -4.0, NAN,  5.0, 6.0,
                        7.0, 8.0, 9.0, NAN, 1.0,  -2.0, 3.0, 0.5};
    for (int k = 0; k < 2; k++) {
        ops_op op = k ? OPS_REDUCE_MIN : OPS_REDUCE_MAX;
        ops_graph *g = ops_graph_new("reduce_nan");
        int X = input(g, "X", SHAPE(4, 4));
        ops_attrs a = attrs(op);
        a.n_axes = 1;
        a.axes[0] = 1;
        a.keepdim = false;
        double out[4];
        run1(g, NODE(g, op, "Y", &a, SHAPE(4), T(X)), (const double *[]){x}, out);
        assert_true(isnan(out[0]) && isnan(out[1]) && isnan(out[2]));
        assert_true(out[3] == (k ? -2.0 : 3.0));
        ops_graph_free(g);
    }
}

/* ---- composites ---- */

static const double sm_in[6] = {1.0, 2.0, 3.0, -1.0, 0.0, 4.0};

static void check_rowop(ops_op op, int axis, bool keepdim, ops_shape out_s, const double *want,
                        int n)
{
    ops_graph *g = ops_graph_new("rowop");
    int X = input(g, "X", SHAPE(2, 3));
    ops_attrs a = attrs(op);
    a.axis = axis;
    a.keepdim = keepdim;
    double out[6];
    run1(g, NODE(g, op, "Y", &a, out_s, T(X)), (const double *[]){sm_in}, out);
    assert_close(out, want, n, 1e-14);
    ops_graph_free(g);
}

static void test_softmax(void **state)
{
    (void)state;
    check_rowop(OPS_SOFTMAX, -1, false, SHAPE(2, 3),
                (const double[]){0.09003057317038046, 0.24472847105479764, 0.6652409557748218,
                                 0.006573263185309083, 0.0178679818703045, 0.9755587549443865},
                6);
    check_rowop(OPS_SOFTMAX, 0, false, SHAPE(2, 3),
                (const double[]){0.8807970779778823, 0.8807970779778823, 0.2689414213699951,
                                 0.11920292202211755, 0.11920292202211755, 0.7310585786300049},
                6);
}

static void test_log_softmax_logsumexp(void **state)
{
    (void)state;
    check_rowop(OPS_LOG_SOFTMAX, 1, false, SHAPE(2, 3),
                (const double[]){-2.40760596444438, -1.4076059644443804, -0.40760596444438046,
                                 -5.024744890138822, -4.024744890138823, -0.024744890138822577},
                6);
    check_rowop(OPS_LOGSUMEXP, -1, false, SHAPE(2),
                (const double[]){3.40760596444438, 4.024744890138822}, 2);
    check_rowop(OPS_LOGSUMEXP, 0, true, SHAPE(1, 3),
                (const double[]){1.1269280110429725, 2.1269280110429727, 4.313261687518223}, 3);
}

/* Large inputs must not overflow exp: softmax of [1000, 1000] is [0.5, 0.5]. */
static void test_softmax_large_values(void **state)
{
    (void)state;
    ops_graph *g = ops_graph_new("big");
    int X = input(g, "X", SHAPE(1, 2));
    ops_attrs a = attrs(OPS_SOFTMAX);
    double out[2];
    run1(g, NODE(g, OPS_SOFTMAX, "Y", &a, SHAPE(1, 2), T(X)),
         (const double *[]){(double[]){1000, 1000}}, out);
    assert_close(out, (const double[]){0.5, 0.5}, 2, 1e-15);
    ops_graph_free(g);
}

/* softmax and logsumexp of a row with a NaN are NaN throughout that row, as in PyTorch. */
static void test_softmax_nan(void **state)
{
    (void)state;
    const double x[] = {1.0, NAN, 3.0, -1.0, 0.0, 4.0};
    ops_graph *g = ops_graph_new("softmax_nan");
    int X = input(g, "X", SHAPE(2, 3));
    ops_attrs a = attrs(OPS_SOFTMAX);
    double out[6];
    run1(g, NODE(g, OPS_SOFTMAX, "Y", &a, SHAPE(2, 3), T(X)), (const double *[]){x}, out);
    assert_true(isnan(out[0]) && isnan(out[1]) && isnan(out[2]));
    assert_close(out + 3,
                 (const double[]){0.006573263185309083, 0.0178679818703045, 0.9755587549443865}, 3,
                 1e-14);
    ops_graph_free(g);
    g = ops_graph_new("logsumexp_nan");
    X = input(g, "X", SHAPE(2, 3));
    a = attrs(OPS_LOGSUMEXP);
    a.keepdim = false;
    run1(g, NODE(g, OPS_LOGSUMEXP, "Y", &a, SHAPE(2), T(X)), (const double *[]){x}, out);
    assert_true(isnan(out[0]));
    assert_close(out + 1, (const double[]){4.024744890138822}, 1, 1e-14);
    ops_graph_free(g);
}

static const double ln_in[8] = {1.0, 2.0, 4.0, 7.0, 0.0, -1.0, 1.0, 2.0};
static const double ln_w[4] = {1.0, 0.5, 2.0, -1.0}, ln_b[4] = {0.0, 0.1, -0.2, 0.3};

static void test_layernorm(void **state)
{
    (void)state;
    double out[8];
    ops_graph *g = ops_graph_new("ln");
    int X = input(g, "X", SHAPE(2, 4)), W = input(g, "W", SHAPE(4)), B = input(g, "B", SHAPE(4));
    run1(g, NODE(g, OPS_LAYERNORM, "Y", NULL, SHAPE(2, 4), T(X), T(W), T(B)),
         (const double *[]){ln_in, ln_w, ln_b}, out);
    assert_close(out,
                 (const double[]){-1.0910884120486357, -0.22732652361459074, 0.23643536481945426,
                                  -1.22752377686809, -0.447211806656309, -0.5708177099844635,
                                  0.694423613312618, -1.0416354199689268},
                 8, 1e-13);
    ops_graph_free(g);

    /* Without weight and bias, over the trailing two dims of a [2,2,2] tensor. */
    const double x3[8] = {0.0,
                          1.0,
                          2.8284271247461903,
                          5.196152422706632,
                          8.0,
                          11.180339887498949,
                          14.696938456699069,
                          18.520259177452132};
    g = ops_graph_new("ln2");
    X = input(g, "X", SHAPE(2, 2, 2));
    ops_attrs a = attrs(OPS_LAYERNORM);
    a.axis = 1;
    run1(g, NODE(g, OPS_LAYERNORM, "Y", &a, SHAPE(2, 2, 2), T(X)), (const double *[]){x3}, out);
    assert_close(out,
                 (const double[]){-1.141007739570316, -0.6352743772255343, 0.2894222203747581,
                                  1.4868598964210924, -1.299184544618123, -0.4889203793313889,
                                  0.40701335892142243, 1.3810915650280895},
                 8, 1e-13);
    ops_graph_free(g);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    double out[8];
    ops_graph *g = ops_graph_new("rms");
    int X = input(g, "X", SHAPE(2, 4)), W = input(g, "W", SHAPE(4));
    run1(g, NODE(g, OPS_RMSNORM, "Y", NULL, SHAPE(2, 4), T(X), T(W)),
         (const double *[]){ln_in, ln_w}, out);
    assert_close(out,
                 (const double[]){0.23904571503700126, 0.23904571503700126, 1.91236572029601,
                                  -1.6733200052590087, 0.0, -0.40824815438116757,
                                  1.6329926175246703, -1.6329926175246703},
                 8, 1e-13);
    ops_graph_free(g);
}

/* ---- matmul ---- */

static const double mm_a[6] = {1, 2, 3, 4, 5, 6};     /* [2,3] */
static const double mm_b[6] = {1, -1, 0, 2, 3, 0.5};  /* [3,2] */
static const double mm_at[6] = {1, 4, 2, 5, 3, 6};    /* A^T stored as [3,2] */
static const double mm_bt[6] = {1, 0, 3, -1, 2, 0.5}; /* B^T stored as [2,3] */
static const double mm_ab[4] = {10.0, 4.5, 22.0, 9.0};

static void check_matmul(const double *a, ops_shape sa, const double *b, ops_shape sb, bool ta,
                         bool tb)
{
    ops_graph *g = ops_graph_new("mm");
    int A = input(g, "A", sa), B = input(g, "B", sb);
    ops_attrs at = attrs(OPS_MATMUL);
    at.transpose_a = ta;
    at.transpose_b = tb;
    double out[4];
    run1(g, NODE(g, OPS_MATMUL, "C", &at, SHAPE(2, 2), T(A), T(B)), (const double *[]){a, b}, out);
    assert_close(out, mm_ab, 4, 1e-15);
    ops_graph_free(g);
}

static void test_matmul_transposes(void **state)
{
    (void)state;
    check_matmul(mm_a, SHAPE(2, 3), mm_b, SHAPE(3, 2), false, false);
    check_matmul(mm_at, SHAPE(3, 2), mm_b, SHAPE(3, 2), true, false);
    check_matmul(mm_a, SHAPE(2, 3), mm_bt, SHAPE(2, 3), false, true);
    check_matmul(mm_at, SHAPE(3, 2), mm_bt, SHAPE(2, 3), true, true);
}

/* [2,2,3] @ [3,2] (B broadcast over the batch), and [2,1,2,3] @ [3,3,2] -> [2,3,2,2]. */
static void test_matmul_batched(void **state)
{
    (void)state;
    const double ab[12] = {0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75};
    double out[24];
    ops_graph *g = ops_graph_new("bmm");
    int A = input(g, "A", SHAPE(2, 2, 3)), B = input(g, "B", SHAPE(3, 2));
    run1(g, NODE(g, OPS_MATMUL, "C", NULL, SHAPE(2, 2, 2), T(A), T(B)),
         (const double *[]){ab, mm_b}, out);
    assert_close(out, (const double[]){1.5, 0.75, 4.5, 1.875, 7.5, 3.0, 10.5, 4.125}, 8, 1e-15);
    ops_graph_free(g);

    double x[12], y[18];
    for (int i = 0; i < 12; i++)
        x[i] = (i - 5) / 3.0;
    for (int i = 0; i < 18; i++)
        y[i] = (i % 5) - 2;
    g = ops_graph_new("bmm2");
    int X = input(g, "X", SHAPE(2, 1, 2, 3)), Y = input(g, "Y", SHAPE(3, 3, 2));
    run1(g, NODE(g, OPS_MATMUL, "Z", NULL, SHAPE(2, 3, 2, 2), T(X), T(Y)), (const double *[]){x, y},
         out);
    assert_close(out, (const double[]){1.3333333333333335,  2.3333333333333335,
                                       1.3333333333333333,  0.3333333333333333,
                                       2.3333333333333335,  -1.6666666666666665,
                                       0.3333333333333333,  -0.6666666666666666,
                                       -1.6666666666666665, 0.9999999999999998,
                                       -0.6666666666666666, 0.0,
                                       1.3333333333333335,  -1.6666666666666667,
                                       1.3333333333333335,  -3.6666666666666665,
                                       -1.6666666666666667, 0.33333333333333326,
                                       -3.6666666666666665, 1.3333333333333335,
                                       0.33333333333333326, -1.0,
                                       1.3333333333333335,  -2.0},
                 24, 1e-14);
    ops_graph_free(g);
}

/* ---- conv2d ---- */

static void test_conv_basic(void **state)
{
    (void)state;
    /* x = 1..9 in a 3x3 image, w = [[1,0],[0,-1]]: out[i][j] = x[i][j] - x[i+1][j+1] = -4. */
    const double x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[4] = {1, 0, 0, -1};
    double out[4];
    ops_graph *g = ops_graph_new("conv");
    int X = input(g, "X", SHAPE(1, 1, 3, 3)), W = input(g, "W", SHAPE(1, 1, 2, 2));
    run1(g, NODE(g, OPS_CONV2D, "Y", NULL, SHAPE(1, 1, 2, 2), T(X), T(W)), (const double *[]){x, w},
         out);
    assert_close(out, (const double[]){-4, -4, -4, -4}, 4, 0);
    ops_graph_free(g);
}

static void test_conv_stride_padding_dilation(void **state)
{
    (void)state;
    double x[25], out[9];
    for (int i = 0; i < 25; i++)
        x[i] = i;
    const double w[9] = {1, 2, 0, 0, 1, -1, 1, 0, 1};
    ops_graph *g = ops_graph_new("conv_s2p1");
    int X = input(g, "X", SHAPE(1, 1, 4, 4)), W = input(g, "W", SHAPE(1, 1, 3, 3));
    ops_attrs a = attrs(OPS_CONV2D);
    a.stride[0] = a.stride[1] = 2;
    a.padding[0] = a.padding[1] = 1;
    run1(g, NODE(g, OPS_CONV2D, "Y", &a, SHAPE(1, 1, 2, 2), T(X), T(W)), (const double *[]){x, w},
         out);
    assert_close(out, (const double[]){4.0, 11.0, 20.0, 44.0}, 4, 0);
    ops_graph_free(g);

    const double w3[4] = {1, -1, 2, 0.5};
    g = ops_graph_new("conv_dil2");
    X = input(g, "X", SHAPE(1, 1, 5, 5));
    W = input(g, "W", SHAPE(1, 1, 2, 2));
    a = attrs(OPS_CONV2D);
    a.dilation[0] = a.dilation[1] = 2;
    run1(g, NODE(g, OPS_CONV2D, "Y", &a, SHAPE(1, 1, 3, 3), T(X), T(W)), (const double *[]){x, w3},
         out);
    assert_close(out, (const double[]){24.0, 26.5, 29.0, 36.5, 39.0, 41.5, 49.0, 51.5, 54.0}, 9, 0);
    ops_graph_free(g);
}

/* Two groups of two channels each, with bias; the same numbers in NHWC/OHWI. */
static const double g2_x[36] = {-5, 2, -2, 5,  1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5,  1, -3, 4, 0,
                                -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0,  -4, 3, -1, -5, 2, -2};
static const double g2_w[16] = {-3, 0, 3, -1, 2, -2, 1, -3, 0, 3, -1, 2, -2, 1, -3, 0};
static const double g2_b[2] = {0.5, -1.0};

static void test_conv_groups_bias(void **state)
{
    (void)state;
    double out[8];
    ops_graph *g = ops_graph_new("conv_g2");
    int X = input(g, "X", SHAPE(1, 4, 3, 3)), W = input(g, "W", SHAPE(2, 2, 2, 2)),
        B = input(g, "B", SHAPE(2));
    ops_attrs a = attrs(OPS_CONV2D);
    a.groups = 2;
    run1(g, NODE(g, OPS_CONV2D, "Y", &a, SHAPE(1, 2, 2, 2), T(X), T(W), T(B)),
         (const double *[]){g2_x, g2_w, g2_b}, out);
    assert_close(out, (const double[]){45.5, -8.5, 15.5, -27.5, 0.0, 0.0, 22.0, -11.0}, 8, 0);
    ops_graph_free(g);
}

static void test_conv_nhwc(void **state)
{
    (void)state;
    const double x[36] = {-5, 3, 0,  -3, 2, -1, -4, 4, -2, -5, 3, 0,  5, 2, -1, -4, 1, -2,
                          -5, 3, -3, 5,  2, -1, 4,  1, -2, -5, 0, -3, 5, 2, -4, 4,  1, -2};
    const double w[16] = {-3, 2, 0, -2, 3, 1, -1, -3, 0, -2, 3, 1, -1, -3, 2, 0};
    double out[8];
    ops_graph *g = ops_graph_new("conv_nhwc");
    int X = input(g, "X", SHAPE(1, 3, 3, 4)), W = input(g, "W", SHAPE(2, 2, 2, 2)),
        B = input(g, "B", SHAPE(2));
    ops_attrs a = attrs(OPS_CONV2D);
    a.groups = 2;
    a.layout = OPS_LAYOUT_NHWC;
    run1(g, NODE(g, OPS_CONV2D, "Y", &a, SHAPE(1, 2, 2, 2), T(X), T(W), T(B)),
         (const double *[]){x, w, g2_b}, out);
    assert_close(out, (const double[]){45.5, 0.0, -8.5, 0.0, 15.5, 22.0, -27.5, -11.0}, 8, 0);
    ops_graph_free(g);
}

/* conv3d over a depth of 1 with a filter depth of 1 is the conv2d of its one slice; a filter
 * depth of 2 sums the conv2ds of the two depth slices. */
static void test_conv3d_against_conv2d(void **state)
{
    (void)state;
    double x[72], w[32], y2a[8], y2b[8], y3[8];
    for (int i = 0; i < 72; i++)
        x[i] = (double)((i * 7) % 11) - 5.0;
    for (int i = 0; i < 32; i++)
        w[i] = (double)((i * 5) % 7) - 3.0;
    /* x [1, 4, 2, 3, 3] NCDHW (depth slices d = 0, 1 of each channel), w [2, 2, 2, 2, 2] */
    double xs[2][36], ws[2][16];
    for (int c = 0; c < 4; c++)
        for (int d = 0; d < 2; d++)
            for (int k = 0; k < 9; k++)
                xs[d][c * 9 + k] = x[(c * 2 + d) * 9 + k];
    for (int o = 0; o < 4; o++) /* (k, c) pairs: w[k][c][t][r][s] */
        for (int t = 0; t < 2; t++)
            for (int k = 0; k < 4; k++)
                ws[t][o * 4 + k] = w[(o * 2 + t) * 4 + k];
    ops_attrs a2 = attrs(OPS_CONV2D), a3 = attrs(OPS_CONV3D);
    a2.groups = a3.groups = 2;
    for (int d = 0; d < 2; d++) {
        ops_graph *g = ops_graph_new("c2");
        int X = input(g, "X", SHAPE(1, 4, 3, 3)), W = input(g, "W", SHAPE(2, 2, 2, 2));
        run1(g, NODE(g, OPS_CONV2D, "Y", &a2, SHAPE(1, 2, 2, 2), T(X), T(W)),
             (const double *[]){xs[d], ws[d]}, d ? y2b : y2a);
        ops_graph_free(g);
    }
    ops_graph *g = ops_graph_new("c3");
    int X = input(g, "X", SHAPE(1, 4, 2, 3, 3)), W = input(g, "W", SHAPE(2, 2, 2, 2, 2));
    run1(g, NODE(g, OPS_CONV3D, "Y", &a3, SHAPE(1, 2, 1, 2, 2), T(X), T(W)),
         (const double *[]){x, w}, y3);
    for (int i = 0; i < 8; i++)
        y2a[i] += y2b[i];
    assert_close(y3, y2a, 8, 1e-12);
    ops_graph_free(g);
}

/* input_dilation 2 is the plain convolution of the input with zeros written between its
 * elements; end_padding adds zeros after the end only. */
static void test_conv_input_dilation_end_padding(void **state)
{
    (void)state;
    /* x [3, 4] spaced by 2 is xz [5, 7]; padding [0, 1] and end_padding [1, 0] pad it to
     * [6, 9] (a zero row below, a zero column each side); a [2, 3] filter gives [5, 7]. */
    double x[12], xz[6 * 9] = {0}, w[6] = {1, -2, 0.5, 3, -1, 2}, got[35], want[35];
    for (int i = 0; i < 12; i++)
        x[i] = i - 4.5;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            xz[(2 * i) * 9 + 2 * j + 1] = x[i * 4 + j];
    for (int p = 0; p < 5; p++)
        for (int q = 0; q < 7; q++) {
            want[p * 7 + q] = 0;
            for (int r = 0; r < 2; r++)
                for (int k = 0; k < 3; k++)
                    want[p * 7 + q] += xz[(p + r) * 9 + q + k] * w[r * 3 + k];
        }
    ops_attrs a = attrs(OPS_CONV2D);
    a.input_dilation[0] = a.input_dilation[1] = 2;
    a.padding[1] = 1;
    a.end_padding[0] = 1;
    ops_graph *g = ops_graph_new("idil");
    int X = input(g, "X", SHAPE(1, 1, 3, 4)), W = input(g, "W", SHAPE(1, 1, 2, 3));
    run1(g, NODE(g, OPS_CONV2D, "Y", &a, SHAPE(1, 1, 5, 7), T(X), T(W)), (const double *[]){x, w},
         got);
    assert_close(got, want, 35, 0);
    ops_graph_free(g);
}

/* ---- attention ---- */

static const double at_q[6] = {1, 0, 0, 1, 1, 1}, at_k[6] = {1, 2, 0, -1, 0.5, 0.5},
                    at_v[9] = {1, 0, 2, 0, 1, -1, 3, 3, 0};

static void check_attention(int sq, bool causal, bool has_scale, double scale, const double *want)
{
    ops_graph *g = ops_graph_new("attn");
    int Q = input(g, "Q", SHAPE(sq, 2)), K = input(g, "K", SHAPE(3, 2)),
        V = input(g, "V", SHAPE(3, 3));
    ops_attrs a = attrs(OPS_ATTENTION);
    a.causal = causal;
    a.has_scale = has_scale;
    a.scale = scale;
    double out[9];
    run1(g, NODE(g, OPS_ATTENTION, "O", &a, SHAPE(sq, 3), T(Q), T(K), T(V)),
         (const double *[]){at_q, at_k, at_v}, out);
    assert_close(out, want, sq * 3, 1e-14);
    ops_graph_free(g);
}

static void test_attention(void **state)
{
    (void)state;
    check_attention(3, false, false, 0,
                    (const double[]){1.4151259880980005, 1.1842048412340018, 0.6864486373627979,
                                     1.390546973959539, 0.7902287825506116, 1.2823997114623762,
                                     1.327999038981211, 0.6054694657563032, 1.4904475093636105});
    check_attention(3, false, true, 1.0 / sqrt(2.0),
                    (const double[]){1.4151259880980005, 1.1842048412340018, 0.6864486373627979,
                                     1.390546973959539, 0.7902287825506116, 1.2823997114623762,
                                     1.327999038981211, 0.6054694657563032, 1.4904475093636105});
}

static void test_attention_causal(void **state)
{
    (void)state;
    check_attention(3, true, false, 0,
                    (const double[]){1.0, 0.0, 2.0, 0.8929581985348296, 0.10704180146517044,
                                     1.6788745956044888, 1.327999038981211, 0.6054694657563032,
                                     1.4904475093636105});
    check_attention(3, true, true, 0.5,
                    (const double[]){1.0, 0.0, 2.0, 0.8175744761936437, 0.18242552380635632,
                                     1.452723428580931, 1.3994263689392148, 0.8242159863347733,
                                     1.240451338379263});
    /* Sq < Skv: the mask is aligned at the top-left (query i sees keys 0..i). */
    check_attention(2, true, false, 0,
                    (const double[]){1.0, 0.0, 2.0, 0.8929581985348296, 0.10704180146517044,
                                     1.6788745956044888});
}

/* q [2,3,2] against k, v [1,3,*]: the batch of k and v broadcasts. */
static void test_attention_batched(void **state)
{
    (void)state;
    double q[12], out[18];
    for (int i = 0; i < 6; i++) {
        q[i] = at_q[i];
        q[6 + i] = -at_q[i];
    }
    ops_graph *g = ops_graph_new("attn_b");
    int Q = input(g, "Q", SHAPE(2, 3, 2)), K = input(g, "K", SHAPE(1, 3, 2)),
        V = input(g, "V", SHAPE(1, 3, 3));
    run1(g, NODE(g, OPS_ATTENTION, "O", NULL, SHAPE(2, 3, 3), T(Q), T(K), T(V)),
         (const double *[]){q, at_k, at_v}, out);
    assert_close(out,
                 (const double[]){1.4151259880980005, 1.1842048412340018, 0.6864486373627979,
                                  1.390546973959539, 0.7902287825506116, 1.2823997114623762,
                                  1.327999038981211, 0.6054694657563032, 1.4904475093636105,
                                  1.1842048412340018, 1.4151259880980005, -0.006314803229198251,
                                  0.7902287825506116, 1.390546973959539, -0.5185548627644062,
                                  0.6054694657563032, 1.327999038981211, -0.6771412103111132},
                 18, 1e-14);
    ops_graph_free(g);
}

/* Grouped-query attention: 4 query heads over 2 k/v heads equal the same attention with each
 * k/v head repeated for its 2 query heads (PyTorch's enable_gqa, repeat_interleave). */
static void test_attention_gqa(void **state)
{
    (void)state;
    enum { HQ = 4, HKV = 2, S = 3, D = 2 };
    double q[HQ * S * D], k[HKV * S * D], v[HKV * S * D], kr[HQ * S * D], vr[HQ * S * D];
    for (int i = 0; i < HQ * S * D; i++)
        q[i] = sin(0.7 * i + 0.3);
    for (int i = 0; i < HKV * S * D; i++) {
        k[i] = cos(0.9 * i);
        v[i] = 0.5 * i - 1.0;
    }
    for (int h = 0; h < HQ; h++)
        for (int i = 0; i < S * D; i++) {
            kr[h * S * D + i] = k[h / (HQ / HKV) * S * D + i];
            vr[h * S * D + i] = v[h / (HQ / HKV) * S * D + i];
        }
    double got[HQ * S * D], want[HQ * S * D];
    for (int causal = 0; causal < 2; causal++) {
        ops_attrs a = attrs(OPS_ATTENTION);
        a.causal = causal;
        ops_graph *g = ops_graph_new("gqa");
        int Q = input(g, "Q", SHAPE(1, HQ, S, D)), K = input(g, "K", SHAPE(1, HKV, S, D)),
            V = input(g, "V", SHAPE(1, HKV, S, D));
        run1(g, NODE(g, OPS_ATTENTION, "O", &a, SHAPE(1, HQ, S, D), T(Q), T(K), T(V)),
             (const double *[]){q, k, v}, got);
        ops_graph_free(g);
        g = ops_graph_new("repeated");
        Q = input(g, "Q", SHAPE(1, HQ, S, D));
        K = input(g, "K", SHAPE(1, HQ, S, D));
        V = input(g, "V", SHAPE(1, HQ, S, D));
        run1(g, NODE(g, OPS_ATTENTION, "O", &a, SHAPE(1, HQ, S, D), T(Q), T(K), T(V)),
             (const double *[]){q, kr, vr}, want);
        ops_graph_free(g);
        assert_close(got, want, HQ * S * D, 0);
    }
}

/* ---- layout ---- */

static void test_permute_transpose_reshape(void **state)
{
    (void)state;
    double x[24], out[24];
    for (int i = 0; i < 24; i++)
        x[i] = i;
    ops_graph *g = ops_graph_new("perm");
    int X = input(g, "X", SHAPE(2, 3, 4));
    ops_attrs a = attrs(OPS_PERMUTE);
    a.n_perm = 3;
    a.perm[0] = 2;
    a.perm[1] = 0;
    a.perm[2] = -2; /* negative entries count from the end */
    run1(g, NODE(g, OPS_PERMUTE, "Y", &a, SHAPE(4, 2, 3), T(X)), (const double *[]){x}, out);
    assert_close(out, (const double[]){0, 4, 8,  12, 16, 20, 1, 5, 9,  13, 17, 21,
                                       2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23},
                 24, 0);
    ops_graph_free(g);

    g = ops_graph_new("transpose");
    X = input(g, "X", SHAPE(2, 3, 4));
    a = attrs(OPS_TRANSPOSE);
    a.n_perm = 3;
    a.perm[0] = 0;
    a.perm[1] = 2;
    a.perm[2] = 1;
    int t0 = NODE(g, OPS_TRANSPOSE, "t0", &a, SHAPE(2, 4, 3), T(X));
    ops_attrs r = attrs(OPS_RESHAPE);
    r.shape = SHAPE(8, -1);
    run1(g, NODE(g, OPS_RESHAPE, "Y", &r, SHAPE(8, 3), T(t0)), (const double *[]){x}, out);
    assert_close(out, (const double[]){0,  4,  8,  1,  5,  9,  2,  6,  10, 3,  7,  11,
                                       12, 16, 20, 13, 17, 21, 14, 18, 22, 15, 19, 23},
                 24, 0);
    ops_graph_free(g);
}

/* A flip of axis 0 and a window of axis 1 read with stride 2 from index -1 (past the start:
 * the fill) to 5 (past the end of 4: the fill). */
static void test_slice(void **state)
{
    (void)state;
    double x[8] = {0, 1, 2, 3, 4, 5, 6, 7}, out[8];
    ops_graph *g = ops_graph_new("slice");
    int X = input(g, "X", SHAPE(2, 4));
    ops_attrs a = attrs(OPS_SLICE);
    a.shape = SHAPE(2, 4);
    a.start[0] = 1;
    a.step[0] = -1;
    run1(g, NODE(g, OPS_SLICE, "Y", &a, SHAPE(2, 4), T(X)), (const double *[]){x}, out);
    assert_close(out, (const double[]){4, 5, 6, 7, 0, 1, 2, 3}, 8, 0);
    ops_graph_free(g);

    g = ops_graph_new("window");
    X = input(g, "X", SHAPE(2, 4));
    a = attrs(OPS_SLICE);
    a.shape = SHAPE(-1, 4);
    a.start[1] = -1;
    a.step[1] = 2;
    a.has_fill = true;
    a.fill = -INFINITY;
    run1(g, NODE(g, OPS_SLICE, "Y", &a, SHAPE(2, 4), T(X)), (const double *[]){x}, out);
    const double want[8] = {-INFINITY, 1, 3, -INFINITY, -INFINITY, 5, 7, -INFINITY};
    for (int i = 0; i < 8; i++)
        assert_true(out[i] == want[i]);
    ops_graph_free(g);
}

/* Inclusive scans along axis 1 of [2, 3] and along the last axis by default. */
static void test_scans(void **state)
{
    (void)state;
    double x[6] = {1, 2, 3, 4, 5, 6}, out[6];
    ops_graph *g = ops_graph_new("cumsum");
    int X = input(g, "X", SHAPE(2, 3));
    ops_attrs a = attrs(OPS_CUMSUM);
    a.axis = 1;
    run1(g, NODE(g, OPS_CUMSUM, "Y", &a, SHAPE(2, 3), T(X)), (const double *[]){x}, out);
    assert_close(out, (const double[]){1, 3, 6, 4, 9, 15}, 6, 0);
    ops_graph_free(g);
    g = ops_graph_new("cumprod");
    X = input(g, "X", SHAPE(3, 2));
    a = attrs(OPS_CUMPROD);
    a.axis = 0;
    run1(g, NODE(g, OPS_CUMPROD, "Y", &a, SHAPE(3, 2), T(X)), (const double *[]){x}, out);
    assert_close(out, (const double[]){1, 2, 3, 8, 15, 48}, 6, 0);
    ops_graph_free(g);
}

/* ---- whole graphs ---- */

/* Nodes written consumers-first, two outputs, an intermediate used twice. */
static void test_graph_order_and_outputs(void **state)
{
    (void)state;
    ops_graph *g = ops_graph_new("dag");
    int X = input(g, "X", SHAPE(3));
    int n_out = ops_graph_add_node(g, OPS_MUL, "Y", NULL); /* Y = t * t, defined first */
    int n_t = ops_graph_add_node(g, OPS_ADD, "t", NULL);   /* t = X + 1 */
    int Y = g->nodes[n_out].out, t = g->nodes[n_t].out;
    g->nodes[n_t].n_in = 2;
    g->nodes[n_t].in[0] = T(X);
    g->nodes[n_t].in[1] = SC(1.0);
    g->nodes[n_out].n_in = 2;
    g->nodes[n_out].in[0] = T(t);
    g->nodes[n_out].in[1] = T(t);
    g->tensors[Y].dtype = g->tensors[t].dtype = OPS_DT_F32;
    g->tensors[Y].shape = g->tensors[t].shape = SHAPE(3);
    assert_int_equal(ops_graph_mark_output(g, Y), 0);
    assert_int_equal(ops_graph_mark_output(g, t), 0);
    g->validated = true;
    double y[3], tt[3];
    ops_diag d = {0};
    assert_int_equal(
        ops_ref_run(g, (const double *[]){(double[]){1, -1, 2}}, (double *const[]){y, tt}, &d), 0);
    assert_close(y, (const double[]){4, 0, 9}, 3, 0);
    assert_close(tt, (const double[]){2, 0, 3}, 3, 0);
    ops_graph_free(g);
}

static void test_rejects_unvalidated_and_unbound(void **state)
{
    (void)state;
    ops_graph *g = ops_graph_new("bad");
    int X = input(g, "X", SHAPE(3));
    int Y = NODE(g, OPS_RELU, "Y", NULL, SHAPE(3), T(X));
    assert_int_equal(ops_graph_mark_output(g, Y), 0);
    double x[3] = {0}, y[3];
    ops_diag d = {0};
    assert_int_equal(ops_ref_run(g, (const double *[]){x}, (double *const[]){y}, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "not validated"));

    g->tensors[X].shape.d[0].size = -1;
    g->tensors[X].shape.d[0].sym = ops_graph_sym(g, "N");
    g->validated = true;
    assert_int_equal(ops_ref_run(g, (const double *[]){x}, (double *const[]){y}, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_UNBOUND_DIM);
    ops_graph_free(g);
}

/* ---- through the parser, validator and canonicaliser ---- */

static ops_graph *parse_bound(const char *json, const char *sym, int64_t value)
{
    ops_graph *g = NULL, *b = NULL;
    ops_diag d = {0};
    if (ops_graph_from_json(json, strlen(json), &g, &d) != 0)
        fail_msg("parse: %s", d.msg);
    if (ops_graph_validate(g, &d) != 0)
        fail_msg("validate: %s", d.msg);
    if (!sym)
        return g;
    ops_binding bind = {sym, value};
    if (ops_graph_bind(g, &bind, 1, &b, &d) != 0)
        fail_msg("bind: %s", d.msg);
    ops_graph_free(g);
    return b;
}

/* Runs g and its canonical form on the same inputs; every output must agree. */
static void check_composite_vs_canonical(const char *json)
{
    ops_graph *g = parse_bound(json, NULL, 0), *c = NULL;
    ops_diag d = {0};
    if (ops_graph_canonicalize(g, &c, &d) != 0)
        fail_msg("canonicalize: %s", d.msg);
    double *in[8] = {0}, *o1[4] = {0}, *o2[4] = {0};
    int n_in = 0;
    unsigned seed = 12345;
    for (int t = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].producer >= 0)
            continue;
        int64_t n = ops_shape_numel(&g->tensors[t].shape);
        in[n_in] = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            in[n_in][i] = ((seed >> 8) % 2001) / 500.0 - 2.0;
        }
        n_in++;
    }
    for (int j = 0; j < g->n_outputs; j++) {
        int64_t n = ops_shape_numel(&g->tensors[g->outputs[j]].shape);
        o1[j] = malloc(sizeof(double) * (size_t)n);
        o2[j] = malloc(sizeof(double) * (size_t)n);
    }
    assert_int_equal(ops_ref_run(g, (const double *const *)in, o1, &d), 0);
    if (ops_ref_run(c, (const double *const *)in, o2, &d) != 0)
        fail_msg("run canonical: %s", d.msg);
    for (int j = 0; j < g->n_outputs; j++)
        assert_close(o2[j], o1[j], (int)ops_shape_numel(&g->tensors[g->outputs[j]].shape), 1e-12);
    for (int i = 0; i < n_in; i++)
        free(in[i]);
    for (int j = 0; j < g->n_outputs; j++) {
        free(o1[j]);
        free(o2[j]);
    }
    ops_graph_free(c);
    ops_graph_free(g);
}

static void test_composites_match_canonical(void **state)
{
    (void)state;
    check_composite_vs_canonical(
        "{\"name\":\"sm\",\"inputs\":{\"X\":{\"dtype\":\"f32\",\"shape\":[3,5]}},"
        "\"nodes\":[{\"out\":\"Y\",\"op\":\"softmax\",\"in\":[\"X\"]},"
        "{\"out\":\"Z\",\"op\":\"log_softmax\",\"in\":[\"X\"],\"axis\":0},"
        "{\"out\":\"L\",\"op\":\"logsumexp\",\"in\":[\"X\"],\"axis\":1,\"keepdim\":true}],"
        "\"outputs\":[\"Y\",\"Z\",\"L\"]}");
    check_composite_vs_canonical(
        "{\"name\":\"norms\",\"inputs\":{\"X\":{\"dtype\":\"f32\",\"shape\":[2,3,4]},"
        "\"W\":{\"dtype\":\"f32\",\"shape\":[4]},\"B\":{\"dtype\":\"f32\",\"shape\":[4]}},"
        "\"nodes\":[{\"out\":\"Y\",\"op\":\"layernorm\",\"in\":[\"X\",\"W\",\"B\"]},"
        "{\"out\":\"R\",\"op\":\"rmsnorm\",\"in\":[\"X\",\"W\"]},"
        "{\"out\":\"T\",\"op\":\"transpose\",\"in\":[\"X\"],\"perm\":[2,0,1]}],"
        "\"outputs\":[\"Y\",\"R\",\"T\"]}");
    /* reductions over several runs of axes (batch norm's [0, 2, 3]) become one per run */
    check_composite_vs_canonical(
        "{\"name\":\"runs\",\"inputs\":{\"X\":{\"dtype\":\"f32\",\"shape\":[3,4,2,5]}},"
        "\"nodes\":[{\"out\":\"M\",\"op\":\"mean\",\"in\":[\"X\"],\"axes\":[0,-1,2],"
        "\"keepdim\":true},"
        "{\"out\":\"S\",\"op\":\"sum\",\"in\":[\"X\"],\"axes\":[0,2]},"
        "{\"out\":\"A\",\"op\":\"max\",\"in\":[\"X\"],\"axes\":[1,3]},"
        "{\"out\":\"I\",\"op\":\"min\",\"in\":[\"X\"],\"axes\":[0,1,3],\"keepdim\":true}],"
        "\"outputs\":[\"M\",\"S\",\"A\",\"I\"]}");
    /* attention with heads wider than the fused kernels take: matmul, softmax, matmul */
    check_composite_vs_canonical(
        "{\"name\":\"wide\",\"inputs\":{\"Q\":{\"dtype\":\"f32\",\"shape\":[2,3,300]},"
        "\"K\":{\"dtype\":\"f32\",\"shape\":[2,5,300]},"
        "\"V\":{\"dtype\":\"f32\",\"shape\":[2,5,4]}},"
        "\"nodes\":[{\"out\":\"O\",\"op\":\"attention\",\"in\":[\"Q\",\"K\",\"V\"]},"
        "{\"out\":\"P\",\"op\":\"attention\",\"in\":[\"Q\",\"K\",\"V\"],\"scale\":0.01}],"
        "\"outputs\":[\"O\",\"P\"]}");
}

/* The expansions are counted as they are built, and only where they apply. */
static void test_canonical_node_counts(void **state)
{
    (void)state;
    const char *json =
        "{\"name\":\"n\",\"inputs\":{\"X\":{\"dtype\":\"f32\",\"shape\":[3,4,2,5]},"
        "\"Q\":{\"dtype\":\"f32\",\"shape\":[2,3,300]},\"C\":{\"dtype\":\"f32\",\"shape\":[2,3,64]}"
        "},"
        "\"nodes\":[{\"out\":\"M\",\"op\":\"mean\",\"in\":[\"X\"],\"axes\":[0,2,3],\"keepdim\":"
        "true},"
        "{\"out\":\"S\",\"op\":\"sum\",\"in\":[\"X\"],\"axes\":[0,2]},"
        "{\"out\":\"R\",\"op\":\"sum\",\"in\":[\"X\"],\"axes\":[1,2]},"
        "{\"out\":\"O\",\"op\":\"attention\",\"in\":[\"Q\",\"Q\",\"Q\"]},"
        "{\"out\":\"K\",\"op\":\"attention\",\"in\":[\"Q\",\"Q\",\"Q\"],\"causal\":true},"
        "{\"out\":\"F\",\"op\":\"attention\",\"in\":[\"C\",\"C\",\"C\"]}],"
        "\"outputs\":[\"M\",\"S\",\"R\",\"O\",\"K\",\"F\"]}";
    ops_graph *g = parse_bound(json, NULL, 0), *c = NULL;
    ops_diag d = {0};
    if (ops_graph_canonicalize(g, &c, &d) != 0)
        fail_msg("canonicalize: %s", d.msg);
    /* mean: 2 runs; sum [0, 2]: 2 runs and a reshape; sum [1, 2]: 1; attention: 8; causal and
     * narrow attention: 1 each (a causal mask has no op in the expansion) */
    assert_int_equal(ops_graph_canonical_nodes(g), 2 + 3 + 1 + 8 + 1 + 1);
    assert_int_equal(c->n_nodes, ops_graph_canonical_nodes(g));
    ops_graph_free(c);
    ops_graph_free(g);
}

/* ---- cost ---- */

static void check_cost(const char *json, const char *sym, int64_t value, double flops, double bytes)
{
    ops_graph *g = parse_bound(json, sym, value);
    ops_cost c = {0};
    ops_diag d = {0};
    if (ops_graph_cost(g, &c, &d) != 0)
        fail_msg("cost: %s", d.msg);
    if (c.flops != flops || c.bytes != bytes)
        fail_msg("cost: got %.17g flops %.17g bytes, want %.17g and %.17g", c.flops, c.bytes, flops,
                 bytes);
    ops_graph_free(g);
}

static void test_cost_gemm_bias_relu(void **state)
{
    (void)state;
    /* M=128: matmul 2*128*256*512, add and relu 128*256 each. Bytes (f16): A 128*512, W
     * 512*256, bias 256 read, Y 128*256 written, 2 bytes each. */
    check_cost("{\"name\":\"gemm_bias_relu\",\"inputs\":{"
               "\"A\":{\"dtype\":\"f16\",\"shape\":[\"M\",512]},"
               "\"W\":{\"dtype\":\"f16\",\"shape\":[512,256],\"const\":true},"
               "\"bias\":{\"dtype\":\"f16\",\"shape\":[256],\"const\":true}},"
               "\"nodes\":[{\"out\":\"t0\",\"op\":\"matmul\",\"in\":[\"A\",\"W\"]},"
               "{\"out\":\"t1\",\"op\":\"add\",\"in\":[\"t0\",\"bias\"]},"
               "{\"out\":\"Y\",\"op\":\"relu\",\"in\":[\"t1\"]}],\"outputs\":[\"Y\"]}",
               "M", 128, 2.0 * 128 * 256 * 512 + 2.0 * 128 * 256,
               2.0 * (128 * 512 + 512 * 256 + 256 + 128 * 256));

    /* Unbound: an error naming the dimension, not a guess. */
    ops_graph *g = NULL;
    ops_diag d = {0};
    const char *json = "{\"name\":\"u\",\"inputs\":{\"X\":{\"dtype\":\"f32\",\"shape\":[\"N\"]}},"
                       "\"nodes\":[{\"out\":\"Y\",\"op\":\"relu\",\"in\":[\"X\"]}],"
                       "\"outputs\":[\"Y\"]}";
    assert_int_equal(ops_graph_from_json(json, strlen(json), &g, &d), 0);
    ops_cost c;
    assert_int_equal(ops_graph_cost(g, &c, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_UNBOUND_DIM);
    ops_graph_free(g);
}

static void test_cost_softmax(void **state)
{
    (void)state;
    /* Counted on the canonical form max, sub, exp, sum, div: per row of n = 1000, (n-1) + n +
     * n + (n-1) + n = 4998. Bytes: f32 [R,1000] read and written. */
    const char *json = "{\"name\":\"sm\",\"inputs\":{\"X\":{\"dtype\":\"f32\","
                       "\"shape\":[\"R\",1000]}},"
                       "\"nodes\":[{\"out\":\"Y\",\"op\":\"softmax\",\"in\":[\"X\"]}],"
                       "\"outputs\":[\"Y\"]}";
    ops_cost c1, c2;
    ops_diag d = {0};
    ops_graph *g1 = parse_bound(json, "R", 8), *g2 = parse_bound(json, "R", 16);
    assert_int_equal(ops_graph_cost(g1, &c1, &d), 0);
    assert_int_equal(ops_graph_cost(g2, &c2, &d), 0);
    assert_true(c1.flops == 8.0 * 4998);
    assert_true(c1.bytes == 2.0 * 8 * 1000 * 4);
    assert_true(c2.flops == 16.0 * 4998);
    assert_true(c2.bytes == 2.0 * 16 * 1000 * 4);
    ops_graph_free(g1);
    ops_graph_free(g2);
}

static void test_cost_conv_attention(void **state)
{
    (void)state;
    /* conv: N=2, C=8, 16x16, K=4, 3x3, groups 2, stride 1, pad 1 -> P=Q=16.
     * 2*N*K*P*Q*(C/groups)*R*S + bias N*K*P*Q. */
    check_cost("{\"name\":\"conv\",\"inputs\":{"
               "\"X\":{\"dtype\":\"f32\",\"shape\":[\"N\",8,16,16]},"
               "\"W\":{\"dtype\":\"f32\",\"shape\":[4,4,3,3],\"const\":true},"
               "\"B\":{\"dtype\":\"f32\",\"shape\":[4],\"const\":true}},"
               "\"nodes\":[{\"out\":\"Y\",\"op\":\"conv2d\",\"in\":[\"X\",\"W\",\"B\"],"
               "\"padding\":[1,1],\"groups\":2}],\"outputs\":[\"Y\"]}",
               "N", 2, 2.0 * 2 * 4 * 16 * 16 * 4 * 3 * 3 + 2.0 * 4 * 16 * 16,
               4.0 * (2 * 8 * 16 * 16 + 4 * 4 * 3 * 3 + 4 + 2 * 4 * 16 * 16));
    /* causal attention, B*H = 2*4, Sq = Skv = 64, D = 32: 2*BH*pairs*(D+Dv) with
     * pairs = 64*65/2; bytes f16 q, k, v, o. */
    check_cost("{\"name\":\"attn\",\"inputs\":{"
               "\"q\":{\"dtype\":\"f16\",\"shape\":[\"B\",4,64,32]},"
               "\"k\":{\"dtype\":\"f16\",\"shape\":[\"B\",4,64,32]},"
               "\"v\":{\"dtype\":\"f16\",\"shape\":[\"B\",4,64,32]}},"
               "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"],"
               "\"causal\":true}],\"outputs\":[\"o\"]}",
               "B", 2, 2.0 * 8 * (64.0 * 65 / 2) * 64, 2.0 * 4 * (2 * 4 * 64 * 32));
}

/* The roofline floor (docs/search.md, "Roofline") on the H100: bytes at the copy bandwidth or
 * FLOPs at the peak of the unit the precision allows, whichever is longer. */
static void test_roofline(void **state)
{
    (void)state;
    ops_device h100;
    ops_device_h100(&h100);
    ops_diag d = {0};
    ops_roofline r;
    /* f32 softmax 4096 x 1000: 32.8 MB at 3.0 TB/s; 20.5 MFLOP is far below that at FFMA. */
    const char *sm = "{\"name\":\"sm\",\"inputs\":{\"X\":{\"dtype\":\"f32\","
                     "\"shape\":[\"R\",1000]}},"
                     "\"nodes\":[{\"out\":\"Y\",\"op\":\"softmax\",\"in\":[\"X\"]}],"
                     "\"outputs\":[\"Y\"]}";
    ops_graph *g = parse_bound(sm, "R", 4096);
    assert_int_equal(ops_graph_roofline(g, OPS_PREC_EXACT, &h100, &r, &d), 0);
    assert_true(r.memory_bound);
    assert_true(r.bytes == 2.0 * 4096 * 1000 * 4);
    assert_true(r.floor_ns == r.bytes / 3.0e12 * 1e9);
    ops_graph_free(g);
    /* A 4096^3 matmul: compute-bound, at the peak of the unit its dtype and precision allow. */
    static const struct {
        const char *dtype;
        ops_precision p;
        double peak;
    } cases[] = {{"f32", OPS_PREC_EXACT, 51e12},
                 {"f32", OPS_PREC_TF32, 372e12},
                 {"f32", OPS_PREC_REDUCED, 745e12},
                 {"bf16", OPS_PREC_EXACT, 745e12}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char mm[512];
        snprintf(mm, sizeof(mm),
                 "{\"name\":\"mm\",\"inputs\":{\"A\":{\"dtype\":\"%s\",\"shape\":[\"M\",4096]},"
                 "\"B\":{\"dtype\":\"%s\",\"shape\":[4096,4096]}},"
                 "\"nodes\":[{\"out\":\"C\",\"op\":\"matmul\",\"in\":[\"A\",\"B\"]}],"
                 "\"outputs\":[\"C\"]}",
                 cases[i].dtype, cases[i].dtype);
        g = parse_bound(mm, "M", 4096);
        assert_int_equal(ops_graph_roofline(g, cases[i].p, &h100, &r, &d), 0);
        assert_false(r.memory_bound);
        assert_true(r.flops == 2.0 * 4096 * 4096 * 4096);
        assert_true(r.flops_per_s == cases[i].peak);
        assert_true(r.floor_ns == r.flops / cases[i].peak * 1e9 && r.floor_ns > r.mem_ns);
        ops_graph_free(g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roofline),
        cmocka_unit_test(test_unary_simple),
        cmocka_unit_test(test_unary_exp_log_sqrt),
        cmocka_unit_test(test_unary_activations),
        cmocka_unit_test(test_unary_stable_extremes),
        cmocka_unit_test(test_unary_clip_and_cast),
        cmocka_unit_test(test_binary_same_shape),
        cmocka_unit_test(test_binary_broadcast),
        cmocka_unit_test(test_binary_scalar_and_rank3),
        cmocka_unit_test(test_binary_nan),
        cmocka_unit_test(test_unary_nan),
        cmocka_unit_test(test_reduce_max_min_nan),
        cmocka_unit_test(test_softmax_nan),
        cmocka_unit_test(test_reduce_sum_mean),
        cmocka_unit_test(test_reduce_max_min),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_log_softmax_logsumexp),
        cmocka_unit_test(test_softmax_large_values),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_matmul_transposes),
        cmocka_unit_test(test_matmul_batched),
        cmocka_unit_test(test_conv_basic),
        cmocka_unit_test(test_conv_stride_padding_dilation),
        cmocka_unit_test(test_conv_groups_bias),
        cmocka_unit_test(test_conv_nhwc),
        cmocka_unit_test(test_conv3d_against_conv2d),
        cmocka_unit_test(test_conv_input_dilation_end_padding),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_causal),
        cmocka_unit_test(test_attention_batched),
        cmocka_unit_test(test_attention_gqa),
        cmocka_unit_test(test_permute_transpose_reshape),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_scans),
        cmocka_unit_test(test_graph_order_and_outputs),
        cmocka_unit_test(test_rejects_unvalidated_and_unbound),
        cmocka_unit_test(test_composites_match_canonical),
        cmocka_unit_test(test_canonical_node_counts),
        cmocka_unit_test(test_cost_gemm_bias_relu),
        cmocka_unit_test(test_cost_softmax),
        cmocka_unit_test(test_cost_conv_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
