/* ktune_graph_reference through the public API: tensors in the graph's declared order (inputs of
 * one shape that a canonical order could swap, outputs listed against their node order), values
 * computed by hand, symbols bound from shapes, and the errors (unbound or unknown symbol, NULL
 * buffers) that leave the outputs untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "client/ktune.h"

static ktune_graph *parse(const char *json)
{
    ktune_graph *g = NULL;
    ktune_error err = {0};
    int rc = ktune_graph_parse(json, 0, &g, &err);
    if (rc != 0)
        fail_msg("parse: %s", err.msg);
    return g;
}

/* y = b - a, declared (a, b): the two inputs have one shape, so only the declared order says
 * which is which. A second output z = a * 2 is listed first. */
static const char *SUB_BA =
    "{\"name\": \"sub_ba\","
    " \"inputs\": {\"a\": {\"dtype\": \"f32\", \"shape\": [\"M\", 3]},"
    "              \"b\": {\"dtype\": \"f32\", \"shape\": [\"M\", 3]}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"sub\", \"in\": [\"b\", \"a\"]},"
    "           {\"out\": \"z\", \"op\": \"mul\", \"in\": [\"a\", 2]}],"
    " \"outputs\": [\"z\", \"y\"]}";

static void test_declared_order(void **state)
{
    (void)state;
    ktune_graph *g = parse(SUB_BA);
    double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {10, 20, 30, 40, 50, 60};
    double z[6], y[6];
    const double *in[] = {a, b};
    double *out[] = {z, y};
    ktune_shape shapes[] = {{"M", 2}};
    ktune_error err = {0};
    assert_int_equal(ktune_graph_reference(g, shapes, 1, in, out, &err), 0);
    assert_string_equal(err.msg, "");
    for (int i = 0; i < 6; i++) {
        assert_true(y[i] == b[i] - a[i]);
        assert_true(z[i] == 2 * a[i]);
    }
    ktune_graph_free(g);
}

/* fp64 throughout: a matmul whose f32 evaluation would lose the 1e-12 term, and cast is the
 * identity (the reference never rounds to a dtype). */
static void test_fp64_values(void **state)
{
    (void)state;
    ktune_graph *g = parse(
        "{\"inputs\": {\"x\": {\"dtype\": \"f16\", \"shape\": [2, 2]},"
        "            \"w\": {\"dtype\": \"f16\", \"shape\": [2, 2], \"const\": true}},"
        " \"nodes\": [{\"out\": \"t\", \"op\": \"matmul\", \"in\": [\"x\", \"w\"],"
        "             \"transpose_b\": true},"
        "            {\"out\": \"y\", \"op\": \"cast\", \"in\": [\"t\"], \"dtype\": \"f32\"}],"
        " \"outputs\": [\"y\"]}");
    double x[4] = {1, 1e-12, 3, 4}, w[4] = {1, 1, 0, 2}, y[4];
    const double *in[] = {x, w};
    double *out[] = {y};
    ktune_error err = {0};
    assert_int_equal(ktune_graph_reference(g, NULL, 0, in, out, &err), 0);
    /* y = x @ w^T: w^T = [[1, 0], [1, 2]] */
    assert_true(y[0] == 1 + 1e-12);
    assert_true(y[1] == 2e-12);
    assert_true(y[2] == 7);
    assert_true(y[3] == 8);
    ktune_graph_free(g);
}

static void test_errors(void **state)
{
    (void)state;
    ktune_graph *g = parse(SUB_BA);
    double a[6] = {0}, b[6] = {0}, z[6], y[6];
    for (int i = 0; i < 6; i++)
        z[i] = y[i] = -7;
    const double *in[] = {a, b};
    double *out[] = {z, y};
    ktune_error err = {0};

    assert_int_equal(ktune_graph_reference(g, NULL, 0, in, out, &err), -EINVAL);
    assert_int_equal(err.code, -EINVAL);
    assert_non_null(strstr(err.msg, "dimension M is unbound"));

    ktune_shape unknown[] = {{"M", 2}, {"Q", 3}};
    assert_int_equal(ktune_graph_reference(g, unknown, 2, in, out, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "Q"));

    ktune_shape zero[] = {{"M", 0}};
    assert_int_equal(ktune_graph_reference(g, zero, 1, in, out, &err), -EINVAL);

    ktune_shape ok[] = {{"M", 2}};
    const double *in_null[] = {a, NULL};
    assert_int_equal(ktune_graph_reference(g, ok, 1, in_null, out, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "input 1 is NULL"));
    double *out_null[] = {z, NULL};
    assert_int_equal(ktune_graph_reference(g, ok, 1, in, out_null, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "output 1 is NULL"));
    assert_int_equal(ktune_graph_reference(NULL, ok, 1, in, out, &err), -EINVAL);
    assert_int_equal(ktune_graph_reference(g, ok, -1, in, out, &err), -EINVAL);
    assert_int_equal(ktune_graph_reference(g, ok, 1, in, out, NULL), 0); /* err is optional */
    for (int i = 0; i < 6; i++)
        assert_true(y[i] == 0 && z[i] == 0);

    /* a failed call leaves the outputs as they were */
    for (int i = 0; i < 6; i++)
        z[i] = y[i] = -7;
    assert_int_equal(ktune_graph_reference(g, NULL, 0, in, out, &err), -EINVAL);
    for (int i = 0; i < 6; i++)
        assert_true(y[i] == -7 && z[i] == -7);
    ktune_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declared_order),
        cmocka_unit_test(test_fp64_values),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
