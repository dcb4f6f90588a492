/* The scan family (ops/emit_scan.c): what it takes (one cumsum or cumprod along the innermost
 * axis), what it prunes, its golden source, and a spread of its schedules compiled with NVRTC
 * for sm_90a without spills. Agreement with the fp64 reference is the GPU suite's
 * (tests/gpu/test_gpu_families.c, examples/cumsum.json). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ops/ops.h"
#include "tests/unit/emit_test_util.h"

static const char cumsum_rows[] =
    "{\"name\":\"c\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[\"M\",\"N\"]}},"
    "\"nodes\":[{\"out\":\"y\",\"op\":\"cumsum\",\"in\":[\"x\"],\"axis\":-1}],"
    "\"outputs\":[\"y\"]}";
static const char cumprod_bf16[] =
    "{\"name\":\"p\",\"inputs\":{\"x\":{\"dtype\":\"bf16\",\"shape\":[4, 3, \"N\"]}},"
    "\"nodes\":[{\"out\":\"y\",\"op\":\"cumprod\",\"in\":[\"x\"],\"axis\":2}],"
    "\"outputs\":[\"y\"]}";
static const char cumsum_axis0[] =
    "{\"name\":\"c0\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[\"M\",\"N\"]}},"
    "\"nodes\":[{\"out\":\"y\",\"op\":\"cumsum\",\"in\":[\"x\"],\"axis\":0}],"
    "\"outputs\":[\"y\"]}";

static void emit_one(const ops_group *grp, const ops_schedule *s, ops_emitted *e)
{
    ops_device dev;
    ops_device_h100(&dev);
    ops_diag d = {0};
    if (ops_family_get(OPS_FAM_SCAN)->emit(grp, s, &dev, e, &d) < 0)
        fail_msg("emit: %s", d.msg);
    assert_int_equal(e->n_kernels, 1);
    assert_int_equal(e->kernels[0].n_args, 2);
}

static void test_matches_innermost_lines(void **state)
{
    (void)state;
    const ops_family *f = ops_family_get(OPS_FAM_SCAN);
    ops_group grp;
    ops_graph *g = emit_test_make(cumsum_rows, "M=7,N=3001", &grp);
    assert_true(f->matches(&grp));
    ops_graph_free(g);
    g = emit_test_make(cumprod_bf16, "N=40", &grp);
    assert_true(f->matches(&grp));
    ops_graph_free(g);
    /* lines along an outer axis: no schedule (a transposed walk is not written) */
    g = emit_test_make(cumsum_axis0, "M=7,N=33", &grp);
    assert_false(f->matches(&grp));
    ops_graph_free(g);
}

static void test_prunes_tiles_past_twice_the_line(void **state)
{
    (void)state;
    const ops_family *f = ops_family_get(OPS_FAM_SCAN);
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    ops_graph *g = emit_test_make(cumsum_rows, "M=64,N=100", &grp);
    emit_test_list l = {0};
    ops_prune_counts counts = {0};
    ops_family_enumerate(f, &grp, &dev, emit_test_collect, &l, &counts);
    /* a line of 100: every tile of 200 elements or more idles half of it; 128 x 1 is kept */
    assert_int_equal(l.n, 1);
    assert_int_equal(l.s[0].v[0], 128);
    assert_int_equal(l.s[0].v[1], 1);
    free(l.s);
    ops_graph_free(g);
}

static void test_golden_and_compiles(void **state)
{
    (void)state;
    const ops_family *f = ops_family_get(OPS_FAM_SCAN);
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    /* a line longer than one tile of every schedule: the carry between tiles is exercised */
    ops_graph *g = emit_test_make(cumsum_rows, "M=5,N=40001", &grp);
    ops_schedule s = {.family = OPS_FAM_SCAN, .v = {256, 4}};
    assert_null(f->prune(&grp, &s, &dev));
    ops_emitted e = {0};
    emit_one(&grp, &s, &e);
    assert_int_equal(e.kernels[0].grid[0], 5);
    assert_int_equal(e.kernels[0].block[0], 256);
    emit_test_golden("scan_cumsum_t256_i4.cu", e.source);
    ops_emitted_free(&e);
    emit_test_list l = {0};
    ops_family_enumerate(f, &grp, &dev, emit_test_collect, &l, NULL);
    assert_int_equal(l.n, 20); /* 4 thread counts x 5 item counts, none redundant here */
    assert_int_equal(emit_test_compile_spread(&grp, &l, 5, "sm_90a", emit_one), 5);
    free(l.s);
    ops_graph_free(g);
    /* a product in bf16: converted to fp32 and back, compiles */
    g = emit_test_make(cumprod_bf16, "N=3000", &grp);
    s = (ops_schedule){.family = OPS_FAM_SCAN, .v = {512, 2}};
    emit_one(&grp, &s, &e);
    assert_true(emit_test_has(e.source, "((a) * (b))"));
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    ops_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_innermost_lines),
        cmocka_unit_test(test_prunes_tiles_past_twice_the_line),
        cmocka_unit_test(test_golden_and_compiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
