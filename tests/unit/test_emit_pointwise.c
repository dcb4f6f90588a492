/* The pointwise family: matching, pruning counts, NVRTC compiles of a spread of kept
 * schedules (sm_90a and sm_80, zero spills), ragged shapes, a golden source, cost ordering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "emit_test_util.h"

extern const ops_family ops_family_pointwise;
#define PW (&ops_family_pointwise)

static const char gelu_json[] =
    "{\"name\": \"bias_gelu_tanh_scale\","
    " \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"N\"]},"
    "            \"bias\": {\"dtype\": \"f32\", \"shape\": [\"N\"], \"const\": true}},"
    " \"nodes\": [{\"out\": \"h\", \"op\": \"add\", \"in\": [\"x\", \"bias\"]},"
    "           {\"out\": \"g\", \"op\": \"gelu_tanh\", \"in\": [\"h\"]},"
    "           {\"out\": \"y\", \"op\": \"mul\", \"in\": [\"g\", 0.5]}],"
    " \"outputs\": [\"y\"]}";

/* f16 residual add with a per-row scale broadcast along the innermost axis, two outputs. */
static const char f16_json[] =
    "{\"name\": \"res_scale\","
    " \"inputs\": {\"a\": {\"dtype\": \"f16\", \"shape\": [\"M\", \"N\"]},"
    "            \"b\": {\"dtype\": \"f16\", \"shape\": [\"M\", \"N\"]},"
    "            \"s\": {\"dtype\": \"f16\", \"shape\": [\"M\", 1]}},"
    " \"nodes\": [{\"out\": \"r\", \"op\": \"add\", \"in\": [\"a\", \"b\"]},"
    "           {\"out\": \"t\", \"op\": \"mul\", \"in\": [\"r\", \"s\"]},"
    "           {\"out\": \"y\", \"op\": \"silu\", \"in\": [\"t\"]}],"
    " \"outputs\": [\"r\", \"y\"]}";

static const char transpose_json[] =
    "{\"name\": \"transpose\","
    " \"inputs\": {\"x\": {\"dtype\": \"bf16\", \"shape\": [\"M\", \"N\"]}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"transpose\", \"in\": [\"x\"]}],"
    " \"outputs\": [\"y\"]}";

/* A permute inside an elementwise DAG: y = relu(permute(x) + b) for x [B, S, H], perm 0 2 1. */
static const char permute_dag_json[] =
    "{\"name\": \"permute_add\","
    " \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"B\", \"S\", \"H\"]},"
    "            \"b\": {\"dtype\": \"f32\", \"shape\": [\"S\"]}},"
    " \"nodes\": [{\"out\": \"p\", \"op\": \"permute\", \"in\": [\"x\"], \"perm\": [0, 2, 1]},"
    "           {\"out\": \"q\", \"op\": \"add\", \"in\": [\"p\", \"b\"]},"
    "           {\"out\": \"y\", \"op\": \"relu\", \"in\": [\"q\"]}],"
    " \"outputs\": [\"y\"]}";

/* A reshape inside the DAG: [M, N] viewed as [N, M] (no data movement) times a column. */
static const char reshape_json[] =
    "{\"name\": \"reshape_mul\","
    " \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"N\"]},"
    "            \"c\": {\"dtype\": \"f32\", \"shape\": [\"N\", 1]}},"
    " \"nodes\": [{\"out\": \"v\", \"op\": \"reshape\", \"in\": [\"x\"], \"shape\": [\"N\", "
    "\"M\"]},"
    "           {\"out\": \"y\", \"op\": \"mul\", \"in\": [\"v\", \"c\"]}],"
    " \"outputs\": [\"y\"]}";

static const char cast_json[] =
    "{\"name\": \"cast_clamp\","
    " \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"N\"]}},"
    " \"nodes\": [{\"out\": \"c\", \"op\": \"clamp\", \"in\": [\"x\"], \"min\": -2.0, \"max\": "
    "3.0},"
    "           {\"out\": \"y\", \"op\": \"cast\", \"in\": [\"c\"], \"dtype\": \"bf16\"}],"
    " \"outputs\": [\"y\"]}";

static const char softmax_json[] =
    "{\"name\": \"softmax\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"N\"]}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"softmax\", \"in\": [\"x\"], \"axis\": -1}],"
    " \"outputs\": [\"y\"]}";

static const char gemm_json[] =
    "{\"name\": \"mm\", \"inputs\": {\"A\": {\"dtype\": \"f16\", \"shape\": [\"M\", 64]},"
    "                             \"B\": {\"dtype\": \"f16\", \"shape\": [64, 32]}},"
    " \"nodes\": [{\"out\": \"Y\", \"op\": \"matmul\", \"in\": [\"A\", \"B\"]}],"
    " \"outputs\": [\"Y\"]}";

/* Every op whose float form could drop NaN: relu, max, min, clamp with two bounds and with
 * one, hardtanh. */
static const char nan_ops_json[] =
    "{\"name\": \"nan_ops\","
    " \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"N\"]},"
    "            \"z\": {\"dtype\": \"f32\", \"shape\": [\"N\"]}},"
    " \"nodes\": [{\"out\": \"r\", \"op\": \"relu\", \"in\": [\"x\"]},"
    "           {\"out\": \"m\", \"op\": \"max\", \"in\": [\"r\", \"z\"]},"
    "           {\"out\": \"n\", \"op\": \"min\", \"in\": [\"m\", \"x\"]},"
    "           {\"out\": \"c\", \"op\": \"clamp\", \"in\": [\"n\"], \"min\": -2.0, \"max\": 3.0},"
    "           {\"out\": \"d\", \"op\": \"clamp\", \"in\": [\"c\"], \"min\": -1.5},"
    "           {\"out\": \"y\", \"op\": \"hardtanh\", \"in\": [\"d\"]}],"
    " \"outputs\": [\"y\"]}";

static int64_t kept_count(const ops_group *grp, emit_test_list *c)
{
    ops_device dev;
    ops_device_h100(&dev);
    ops_prune_counts counts;
    assert_true(PW->matches(grp));
    assert_int_equal(ops_family_enumerate(PW, grp, &dev, emit_test_collect, c, &counts), 0);
    return counts.kept;
}

static char *emit_one(const ops_group *grp, const ops_schedule *s, ops_emitted *e)
{
    ops_device dev;
    ops_device_h100(&dev);
    ops_diag d = {0};
    if (PW->emit(grp, s, &dev, e, &d) < 0)
        fail_msg("emit: %s", d.msg);
    assert_int_equal(e->n_kernels, 1);
    assert_int_equal(e->kernels[0].n_args, grp->n_in + grp->n_out);
    return e->source;
}

static void emit_for_compile(const ops_group *grp, const ops_schedule *s, ops_emitted *e)
{
    emit_one(grp, s, e);
}

static void test_matches(void **state)
{
    (void)state;
    const struct {
        const char *json, *shapes;
        bool want;
    } cases[] = {
        {gelu_json, "M=64,N=128", true},    {f16_json, "M=33,N=64", true},
        {transpose_json, "M=8,N=16", true}, {permute_dag_json, "B=2,S=5,H=8", true},
        {reshape_json, "M=4,N=6", true},    {cast_json, "N=100", true},
        {softmax_json, "M=4,N=8", false},   {gemm_json, "M=16", false},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        ops_group grp;
        ops_graph *g = emit_test_make(cases[i].json, cases[i].shapes, &grp);
        if (PW->matches(&grp) != cases[i].want)
            fail_msg("case %zu (%s): matches() != %d", i, g->name, cases[i].want);
        ops_graph_free(g);
    }
    /* Outputs of different shapes (an intermediate [N] and the [M, N] result) do not match. */
    static const char two_shapes[] =
        "{\"name\": \"two\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [4, 8]},"
        " \"b\": {\"dtype\": \"f32\", \"shape\": [8]}},"
        " \"nodes\": [{\"out\": \"c\", \"op\": \"exp\", \"in\": [\"b\"]},"
        "           {\"out\": \"y\", \"op\": \"add\", \"in\": [\"x\", \"c\"]}],"
        " \"outputs\": [\"c\", \"y\"]}";
    ops_group grp;
    ops_graph *g = emit_test_make(two_shapes, "", &grp);
    assert_false(PW->matches(&grp));
    ops_graph_free(g);
}

static void test_counts(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = emit_test_make(gelu_json, "M=2000,N=2000", &grp);
    emit_test_list c = {0};
    int64_t kept = kept_count(&grp, &c);
    print_message("gelu_tanh_chain M=N=2000: %lld kept\n", (long long)kept);
    assert_true(kept >= 30);
    /* vec 8 of f32 is 32 bytes: never kept. */
    for (int i = 0; i < c.n; i++)
        assert_true(c.s[i].v[2] <= 4);
    free(c.s);
    ops_graph_free(g);

    /* N = 1002 is not a multiple of 4: f16 keeps vec 1 and 2 only; odd N keeps vec 1. */
    g = emit_test_make(f16_json, "M=333,N=1002", &grp);
    c = (emit_test_list){0};
    kept_count(&grp, &c);
    for (int i = 0; i < c.n; i++)
        assert_true(c.s[i].v[2] <= 2);
    free(c.s);
    ops_graph_free(g);
    g = emit_test_make(gelu_json, "M=333,N=777", &grp);
    c = (emit_test_list){0};
    kept_count(&grp, &c);
    assert_true(c.n > 0);
    for (int i = 0; i < c.n; i++)
        assert_int_equal(c.s[i].v[2], 1);
    free(c.s);
    ops_graph_free(g);
}

static void test_compile_spread(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = emit_test_make(gelu_json, "M=2000,N=2000", &grp);
    emit_test_list c = {0};
    kept_count(&grp, &c);
    int n = emit_test_compile_spread(&grp, &c, 40, "sm_90a", emit_for_compile);
    free(c.s);
    ops_graph_free(g);

    g = emit_test_make(f16_json, "M=1024,N=4096", &grp);
    c = (emit_test_list){0};
    kept_count(&grp, &c);
    n += emit_test_compile_spread(&grp, &c, 16, "sm_90a", emit_for_compile);
    n += emit_test_compile_spread(&grp, &c, 4, "sm_80", emit_for_compile);
    free(c.s);
    ops_graph_free(g);
    print_message("compiled %d pointwise candidates\n", n);
    assert_true(n >= 50);
}

/* Ragged and layout cases: every kept schedule of a small spread compiles. */
static void test_ragged(void **state)
{
    (void)state;
    const struct {
        const char *json, *shapes;
    } cases[] = {
        {gelu_json, "M=333,N=777"},
        {f16_json, "M=333,N=1000"},
        {transpose_json, "M=333,N=777"},
        {transpose_json, "M=64,N=128"},
        {permute_dag_json, "B=3,S=7,H=12"},
        {reshape_json, "M=6,N=10"},
        {cast_json, "N=1001"},
        {cast_json, "N=1"},
    };
    int n = 0;
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        ops_group grp;
        ops_graph *g = emit_test_make(cases[i].json, cases[i].shapes, &grp);
        emit_test_list c = {0};
        kept_count(&grp, &c);
        assert_true(c.n > 0);
        n += emit_test_compile_spread(&grp, &c, 3, "sm_90a", emit_for_compile);
        free(c.s);
        ops_graph_free(g);
    }
    assert_true(n >= 16);
}

/* The emitted indexing on small shapes: vector loads only where aligned, scalars where
 * broadcast, gathers for a transpose. */
static void test_source_shape(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = emit_test_make(f16_json, "M=64,N=64", &grp);
    ops_schedule s = {.family = OPS_FAM_POINTWISE, .v = {128, 1, 8, 1}};
    ops_emitted e = {0};
    const char *src = emit_one(&grp, &s, &e);
    assert_non_null(strstr(src, "struct __align__(16) kt_f16_x8"));
    assert_non_null(strstr(src, "in2_s[i0]")); /* the [M, 1] scale: one scalar per chunk */
    assert_non_null(strstr(src, "__launch_bounds__(128)"));
    ops_emitted_free(&e);
    ops_graph_free(g);

    g = emit_test_make(transpose_json, "M=8,N=16", &grp);
    s = (ops_schedule){.family = OPS_FAM_POINTWISE, .v = {64, 1, 4, 1}};
    src = emit_one(&grp, &s, &e);
    assert_non_null(strstr(src, "in0_x[i0 + (i1 + l) * 16]")); /* gathered per lane */
    emit_test_compile(src, "sm_90a");
    ops_emitted_free(&e);
    ops_graph_free(g);
}

static void test_golden(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = emit_test_make(gelu_json, "M=333,N=776", &grp);
    ops_schedule s = {.family = OPS_FAM_POINTWISE, .v = {256, 2, 4, 2}};
    ops_emitted e = {0};
    const char *src = emit_one(&grp, &s, &e);
    emit_test_golden("pointwise_gelu_tanh_chain.cu", src);
    emit_test_compile(src, "sm_90a");
    assert_int_equal(e.kernels[0].block[0], 256);
    /* 333 * 776 / 4 chunks over 512 per block */
    assert_int_equal(e.kernels[0].grid[0], (333 * 776 / 4 + 511) / 512);
    ops_emitted_free(&e);
    ops_graph_free(g);
}

/* relu, max, min, clamp and hardtanh go through the prelude's NaN-propagating kt_max / kt_min
 * (fmaxf(NaN, -1) is -1: clamp(log(x), -1, 1) turned NaN into -1); the fallback for archs
 * before sm_80 compiles too. */
static void test_nan_propagating(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = emit_test_make(nan_ops_json, "N=1000", &grp);
    ops_schedule s = {.family = OPS_FAM_POINTWISE, .v = {128, 1, 1, 1}};
    ops_emitted e = {0};
    const char *src = emit_one(&grp, &s, &e);
    const char *body = emit_test_body(src);
    emit_test_nan_safe(src);
    int n_max = 0, n_min = 0;
    for (const char *p = body; (p = strstr(p, "kt_max(")); p++)
        n_max++;
    for (const char *p = body; (p = strstr(p, "kt_min(")); p++)
        n_min++;
    /* relu, maximum, clamp's and the one-sided clamp's lower bound, hardtanh's: five maxima;
     * minimum, clamp's and hardtanh's upper bounds: three minima */
    if (n_max != 5 || n_min != 3)
        fail_msg("%d kt_max and %d kt_min, want 5 and 3:\n%s", n_max, n_min, src);
    emit_test_compile(src, "sm_90a");
    emit_test_compile(src, "sm_80");
    emit_test_compile(src, "sm_75");
    ops_emitted_free(&e);
    ops_graph_free(g);
}

static void test_estimate(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    ops_graph *g = emit_test_make(gelu_json, "M=8192,N=8192", &grp);
    ops_schedule scalar = {.family = OPS_FAM_POINTWISE, .v = {256, 1, 1, 1}};
    ops_schedule vector = {.family = OPS_FAM_POINTWISE, .v = {256, 1, 4, 1}};
    ops_estimate es, ev;
    PW->estimate(&grp, &scalar, &dev, &es);
    PW->estimate(&grp, &vector, &dev, &ev);
    assert_true(es.seconds > 0 && ev.seconds > 0);
    assert_true(ev.seconds < es.seconds);
    /* Near the roofline: 512 MiB moved at 3 TB/s is ~180 us. */
    assert_true(ev.seconds > 0.9 * ev.bytes / dev.dram_bytes_per_s);
    assert_true(ev.seconds < 2.0 * ev.bytes / dev.dram_bytes_per_s);
    ops_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches),        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_source_shape),   cmocka_unit_test(test_golden),
        cmocka_unit_test(test_estimate),       cmocka_unit_test(test_ragged),
        cmocka_unit_test(test_compile_spread), cmocka_unit_test(test_nan_propagating),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
