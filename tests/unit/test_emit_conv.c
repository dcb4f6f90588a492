/* The conv family: which groups it matches, how many schedules survive pruning, that a spread of
 * kept candidates compiles with NVRTC (sm_90a, a few for sm_80) without spills, golden sources
 * per algorithm and tensor-core path, and the ordering of the cost model on obvious pairs. No
 * GPU needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ops/ops.h"
#include "tests/unit/emit_test_util.h"

#include <math.h>

/* The family under test (family.h keeps the tables private to ops/family.c). */
#define FAM (*ops_family_get(OPS_FAM_CONV))

/* Values of the conv knobs "math" and "algo" (stored in schedules: appended, never renumbered). */
enum { MATH_FFMA = 0, MATH_MMA = 1, MATH_TF32 = 2, MATH_TF32X3 = 3 };
enum { ALGO_IGEMM = 0, ALGO_DIRECT = 1, ALGO_TILED = 2, ALGO_DEPTHWISE = 3 };

/* ---- graphs ---- */

/* f32 3x3, (16, 64, 56, 56) -> 64, pad 1, no bias, relu. */
static const char g_f32_56[] =
    "{\"name\": \"conv3x3_64\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f32\", \"shape\": [16, 64, 56, 56]},"
    "  \"W\": {\"dtype\": \"f32\", \"shape\": [64, 64, 3, 3], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"c\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"], \"padding\": [1, 1]},"
    "  {\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"c\"]}],"
    " \"outputs\": [\"Y\"]}";

/* AlexNet's first layer: (100, 3, 224, 224) -> 96, 11x11, stride 4, pad 2, bias. */
static const char g_alexnet[] =
    "{\"name\": \"alexnet_conv1\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f32\", \"shape\": [100, 3, 224, 224]},"
    "  \"W\": {\"dtype\": \"f32\", \"shape\": [96, 3, 11, 11], \"const\": true},"
    "  \"b\": {\"dtype\": \"f32\", \"shape\": [96], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"c\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\", \"b\"], \"stride\": [4, 4],"
    "   \"padding\": [2, 2]},"
    "  {\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"c\"]}],"
    " \"outputs\": [\"Y\"]}";

/* f16 NHWC 3x3 (16, 56, 56, 64) -> 64 with bias, residual add and relu. */
static const char g_f16_nhwc[] =
    "{\"name\": \"conv_nhwc_res\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f16\", \"shape\": [16, 56, 56, 64]},"
    "  \"W\": {\"dtype\": \"f16\", \"shape\": [64, 3, 3, 64], \"const\": true},"
    "  \"b\": {\"dtype\": \"f16\", \"shape\": [64], \"const\": true},"
    "  \"Z\": {\"dtype\": \"f16\", \"shape\": [16, 56, 56, 64]}},"
    " \"nodes\": ["
    "  {\"out\": \"c\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\", \"b\"], \"padding\": [1, 1],"
    "   \"layout\": \"NHWC\"},"
    "  {\"out\": \"t\", \"op\": \"add\", \"in\": [\"c\", \"Z\"]},"
    "  {\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"t\"]}],"
    " \"outputs\": [\"Y\"]}";

/* f32 NHWC 3x3 (8, 28, 28, 64) -> 128 with bias and relu: the tf32 paths' cp.async gather. */
static const char g_f32_nhwc[] =
    "{\"name\": \"conv_nhwc_f32\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f32\", \"shape\": [8, 28, 28, 64]},"
    "  \"W\": {\"dtype\": \"f32\", \"shape\": [128, 3, 3, 64], \"const\": true},"
    "  \"b\": {\"dtype\": \"f32\", \"shape\": [128], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"c\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\", \"b\"], \"padding\": [1, 1],"
    "   \"layout\": \"NHWC\"},"
    "  {\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"c\"]}],"
    " \"outputs\": [\"Y\"]}";

/* Ragged: C = 3, K = 7, 3x5 filter, stride (2, 1), pad (1, 2), dilation (1, 2), odd spatial. */
static const char g_ragged[] =
    "{\"name\": \"conv_ragged\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f32\", \"shape\": [3, 3, 33, 77]},"
    "  \"W\": {\"dtype\": \"f32\", \"shape\": [7, 3, 3, 5], \"const\": true},"
    "  \"b\": {\"dtype\": \"f32\", \"shape\": [7, 1, 1]}},"
    " \"nodes\": ["
    "  {\"out\": \"c\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"], \"stride\": [2, 1],"
    "   \"padding\": [1, 2], \"dilation\": [1, 2]},"
    "  {\"out\": \"t\", \"op\": \"add\", \"in\": [\"c\", \"b\"]},"
    "  {\"out\": \"Y\", \"op\": \"gelu\", \"in\": [\"t\"]}],"
    " \"outputs\": [\"Y\"]}";

/* Ragged for the tiled kernel: 37 x 41 input, 7x7 filter, stride 3, pad 1, 5 output channels
 * (no tile or channel block divides anything), bias and relu. */
static const char g_tiled_ragged[] =
    "{\"name\": \"conv_tiled_ragged\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f32\", \"shape\": [2, 3, 37, 41]},"
    "  \"W\": {\"dtype\": \"f32\", \"shape\": [5, 3, 7, 7], \"const\": true},"
    "  \"b\": {\"dtype\": \"f32\", \"shape\": [5], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"c\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\", \"b\"], \"stride\": [3, 3],"
    "   \"padding\": [1, 1]},"
    "  {\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"c\"]}],"
    " \"outputs\": [\"Y\"]}";

/* A 15x15 filter over 8 channels into 128: the tiled kernel's filter slices are large. */
static const char g_big_filter[] =
    "{\"name\": \"conv_big_filter\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f32\", \"shape\": [1, 8, 64, 64]},"
    "  \"W\": {\"dtype\": \"f32\", \"shape\": [128, 8, 15, 15], \"const\": true}},"
    " \"nodes\": [{\"out\": \"Y\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"], \"padding\": [7, "
    "7]}],"
    " \"outputs\": [\"Y\"]}";

/* Depthwise 3x3 (groups == C) with bias. */
static const char g_depthwise[] =
    "{\"name\": \"conv_dw\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f32\", \"shape\": [8, 32, 28, 28]},"
    "  \"W\": {\"dtype\": \"f32\", \"shape\": [32, 1, 3, 3], \"const\": true},"
    "  \"b\": {\"dtype\": \"f32\", \"shape\": [32], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"Y\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\", \"b\"], \"padding\": [1, 1],"
    "   \"groups\": 32}],"
    " \"outputs\": [\"Y\"]}";

/* Depthwise, ragged: f16, 7x7, stride 2, dilation 2, odd sizes, bias then relu. */
static const char g_depthwise_ragged[] =
    "{\"name\": \"conv_dw_ragged\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f16\", \"shape\": [3, 24, 61, 83]},"
    "  \"W\": {\"dtype\": \"f16\", \"shape\": [24, 1, 7, 7], \"const\": true},"
    "  \"b\": {\"dtype\": \"f16\", \"shape\": [24], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"t\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\", \"b\"], \"stride\": [2, 2],"
    "   \"padding\": [5, 5], \"dilation\": [2, 2], \"groups\": 24},"
    "  {\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"t\"]}],"
    " \"outputs\": [\"Y\"]}";

/* Grouped NHWC bf16: 64 -> 128 channels in 4 groups (16 in, 32 out each), stride 2. */
static const char g_grouped_bf16[] =
    "{\"name\": \"conv_grouped\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"bf16\", \"shape\": [4, 15, 15, 64]},"
    "  \"W\": {\"dtype\": \"bf16\", \"shape\": [128, 3, 3, 16], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"c\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"], \"stride\": [2, 2],"
    "   \"padding\": [1, 1], \"groups\": 4, \"layout\": \"NHWC\"},"
    "  {\"out\": \"Y\", \"op\": \"silu\", \"in\": [\"c\"]}],"
    " \"outputs\": [\"Y\"]}";

/* bf16 NCHW with odd channel counts: tensor cores through the plain gather. */
static const char g_bf16_odd[] =
    "{\"name\": \"conv_bf16_odd\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"bf16\", \"shape\": [2, 5, 19, 21]},"
    "  \"W\": {\"dtype\": \"bf16\", \"shape\": [9, 5, 3, 3], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"c\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"], \"padding\": [1, 1]},"
    "  {\"out\": \"Y\", \"op\": \"cast\", \"in\": [\"c\"], \"dtype\": \"f32\"}],"
    " \"outputs\": [\"Y\"]}";

/* Two convs in one group: not this family's. */
static const char g_two_convs[] =
    "{\"name\": \"two_convs\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f32\", \"shape\": [1, 4, 8, 8]},"
    "  \"W\": {\"dtype\": \"f32\", \"shape\": [4, 4, 3, 3]}},"
    " \"nodes\": ["
    "  {\"out\": \"a\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"], \"padding\": [1, 1]},"
    "  {\"out\": \"Y\", \"op\": \"conv2d\", \"in\": [\"a\", \"W\"], \"padding\": [1, 1]}],"
    " \"outputs\": [\"Y\"]}";

/* A conv followed by a reduction. */
static const char g_conv_sum[] =
    "{\"name\": \"conv_sum\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f32\", \"shape\": [1, 4, 8, 8]},"
    "  \"W\": {\"dtype\": \"f32\", \"shape\": [4, 4, 3, 3]}},"
    " \"nodes\": ["
    "  {\"out\": \"a\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"]},"
    "  {\"out\": \"Y\", \"op\": \"sum\", \"in\": [\"a\"], \"axes\": [1]}],"
    " \"outputs\": [\"Y\"]}";

/* A prologue on the conv input (relu before the conv) cannot fuse into the gather. */
static const char g_prologue[] = "{\"name\": \"relu_conv\", \"inputs\": {"
                                 "  \"X\": {\"dtype\": \"f32\", \"shape\": [1, 4, 8, 8]},"
                                 "  \"W\": {\"dtype\": \"f32\", \"shape\": [4, 4, 3, 3]}},"
                                 " \"nodes\": ["
                                 "  {\"out\": \"a\", \"op\": \"relu\", \"in\": [\"X\"]},"
                                 "  {\"out\": \"Y\", \"op\": \"conv2d\", \"in\": [\"a\", \"W\"]}],"
                                 " \"outputs\": [\"Y\"]}";

static char *example(const char *name)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/examples/%s", getenv("KTUNE_SOURCE_ROOT"), name);
    char *text = NULL;
    kt_err err = {0};
    if (kt_read_file(path, (size_t)1 << 30, &text, NULL, &err) < 0)
        fail_msg("%s: %s", path, err.msg);
    return text;
}

static ops_graph *conv2d_example(void)
{
    char *text = example("conv2d.json");
    ops_graph *g = emit_test_graph(text, "N=128");
    free(text);
    return g;
}

/* ---- helpers ---- */

typedef struct sched_list {
    int n, cap;
    ops_schedule *s;
} sched_list;

static int collect(const ops_schedule *s, void *ctx)
{
    sched_list *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->s = realloc(l->s, sizeof(*l->s) * (size_t)l->cap);
        assert_non_null(l->s);
    }
    l->s[l->n++] = *s;
    return 0;
}

static sched_list kept(const ops_group *grp, const ops_device *dev, ops_prune_counts *counts)
{
    sched_list l = {0};
    assert_true(FAM.matches(grp));
    assert_int_equal(ops_family_enumerate(&FAM, grp, dev, collect, &l, counts), 0);
    return l;
}

static int knob_index(const char *name)
{
    for (int k = 0; k < FAM.n_knobs; k++)
        if (strcmp(FAM.knobs[k].name, name) == 0)
            return k;
    fail_msg("no knob %s", name);
    return -1;
}

/* A schedule from "knob=value ..." (labels for enumerated knobs); others at their first value. */
static ops_schedule sched(const char *spec)
{
    ops_schedule s = {.family = OPS_FAM_CONV};
    for (int k = 0; k < FAM.n_knobs; k++)
        s.v[k] = FAM.knobs[k].values[0];
    char *copy = strdup(spec);
    for (char *save = NULL, *tok = strtok_r(copy, " ", &save); tok;
         tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        assert_non_null(eq);
        *eq = '\0';
        const ops_knob *knob = &FAM.knobs[knob_index(tok)];
        int v = (int)strtol(eq + 1, NULL, 10);
        for (int i = 0; knob->labels && i < knob->n_values; i++)
            if (strcmp(knob->labels[i], eq + 1) == 0)
                v = knob->values[i];
        s.v[knob_index(tok)] = v;
    }
    free(copy);
    return s;
}

static bool group_of(const ops_graph *g, uint64_t mask, ops_group *grp)
{
    ops_diag d = {0};
    assert_int_equal(ops_group_init(grp, g, mask, &d), 0);
    return FAM.matches(grp);
}

/* conv3d with bias, stride, padding, dilation and groups, and a per-channel epilogue operand
 * [K, 1, 1, 1] (the general gather: depth folded into the output rows). */
static const char g_conv3d[] =
    "{\"name\": \"conv3d\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f32\", \"shape\": [2, 6, 9, 11, 10]},"
    "  \"W\": {\"dtype\": \"f32\", \"shape\": [12, 3, 3, 2, 3], \"const\": true},"
    "  \"b\": {\"dtype\": \"f32\", \"shape\": [12], \"const\": true},"
    "  \"s\": {\"dtype\": \"f32\", \"shape\": [12, 1, 1, 1], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"c\", \"op\": \"conv3d\", \"in\": [\"X\", \"W\", \"b\"],"
    "   \"stride\": [1, 2, 1], \"padding\": [1, 0, 1], \"dilation\": [2, 1, 1], \"groups\": 2},"
    "  {\"out\": \"Y\", \"op\": \"mul\", \"in\": [\"c\", \"s\"]}],"
    " \"outputs\": [\"Y\"]}";

/* conv3d f16 channels last (NDHWC, weight ODHWI). */
static const char g_conv3d_f16_ndhwc[] =
    "{\"name\": \"conv3d_ndhwc\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"f16\", \"shape\": [2, 5, 8, 8, 16]},"
    "  \"W\": {\"dtype\": \"f16\", \"shape\": [32, 3, 3, 3, 16], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"c\", \"op\": \"conv3d\", \"in\": [\"X\", \"W\"], \"padding\": 1,"
    "   \"layout\": \"NHWC\"},"
    "  {\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"c\"]}],"
    " \"outputs\": [\"Y\"]}";

/* A transposed convolution of stride 2 as a convolution of the input spaced by 2 (input
 * dilation), with its output_padding (end padding), bf16, 2 groups. */
static const char g_transposed_bf16[] =
    "{\"name\": \"conv_transposed\", \"inputs\": {"
    "  \"X\": {\"dtype\": \"bf16\", \"shape\": [4, 32, 13, 15]},"
    "  \"W\": {\"dtype\": \"bf16\", \"shape\": [64, 16, 3, 3], \"const\": true}},"
    " \"nodes\": ["
    "  {\"out\": \"Y\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"], \"padding\": 1,"
    "   \"input_dilation\": 2, \"end_padding\": [1, 1], \"groups\": 2}],"
    " \"outputs\": [\"Y\"]}";

/* ---- matches ---- */

static void test_matches(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = conv2d_example();
    assert_true(group_of(g, 3, &grp));  /* conv + relu */
    assert_true(group_of(g, 1, &grp));  /* the conv alone: its output leaves the group */
    assert_false(group_of(g, 2, &grp)); /* relu alone */
    ops_graph_free(g);

    const char *yes[] = {g_f32_56,    g_alexnet,          g_f16_nhwc,       g_ragged,
                         g_depthwise, g_grouped_bf16,     g_bf16_odd,       g_f32_nhwc,
                         g_conv3d,    g_conv3d_f16_ndhwc, g_transposed_bf16};
    for (size_t i = 0; i < KT_ARRAY_LEN(yes); i++) {
        g = emit_test_graph(yes[i], "");
        emit_test_whole_group(g, &grp);
        assert_true(FAM.matches(&grp));
        ops_graph_free(g);
    }
    const char *no[] = {g_two_convs, g_conv_sum, g_prologue};
    for (size_t i = 0; i < KT_ARRAY_LEN(no); i++) {
        g = emit_test_graph(no[i], "");
        emit_test_whole_group(g, &grp);
        assert_false(FAM.matches(&grp));
        ops_graph_free(g);
    }
    /* Each conv of the two-conv graph on its own is fine; the reduction's conv too. */
    g = emit_test_graph(g_two_convs, "");
    assert_true(group_of(g, 1, &grp));
    assert_true(group_of(g, 2, &grp));
    ops_graph_free(g);
    g = emit_test_graph(g_conv_sum, "");
    assert_true(group_of(g, 1, &grp));
    assert_false(group_of(g, 2, &grp));
    ops_graph_free(g);
}

/* ---- counts and pruning ---- */

static void print_counts(const char *what, const ops_prune_counts *c)
{
    printf("# %s: %lld kept;", what, (long long)c->kept);
    for (int i = 0; i < c->n_reasons; i++)
        printf(" %s %lld", c->reasons[i].reason, (long long)c->reasons[i].count);
    printf("\n");
}

static int count_algo(const sched_list *l, int algo)
{
    int n = 0, k = knob_index("algo");
    for (int i = 0; i < l->n; i++)
        n += l->s[i].v[k] == algo;
    return n;
}

static void test_counts(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    ops_prune_counts counts;

    ops_graph *g = conv2d_example();
    emit_test_whole_group(g, &grp);
    sched_list l = kept(&grp, &dev, &counts);
    print_counts("conv2d.json N=128", &counts);
    assert_true(counts.kept >= 50);
    assert_int_equal(l.n, counts.kept);
    assert_true(count_algo(&l, 0) >= 20 && count_algo(&l, 1) >= 20);
    /* f32 under "exact": FFMA and the error-compensated tf32x3 only; "tf32" adds plain tf32,
     * "reduced" 16-bit tensor cores too. */
    int math = knob_index("math");
    int per_math[4] = {0};
    for (int i = 0; i < l.n; i++) {
        assert_true(l.s[i].v[math] == MATH_FFMA || l.s[i].v[math] == MATH_TF32X3);
        per_math[l.s[i].v[math]]++;
    }
    assert_true(per_math[MATH_TF32X3] > 0);
    free(l.s);
    const ops_precision precs[] = {OPS_PREC_TF32, OPS_PREC_REDUCED};
    for (size_t p = 0; p < KT_ARRAY_LEN(precs); p++) {
        grp.precision = precs[p];
        l = kept(&grp, &dev, &counts);
        memset(per_math, 0, sizeof(per_math));
        for (int i = 0; i < l.n; i++)
            per_math[l.s[i].v[math]]++;
        assert_true(per_math[MATH_TF32] > 0 && per_math[MATH_TF32X3] > 0);
        if (precs[p] == OPS_PREC_REDUCED)
            assert_true(per_math[MATH_MMA] > 0);
        else
            assert_int_equal(per_math[MATH_MMA], 0);
        free(l.s);
    }
    ops_graph_free(g);

    /* 16-bit data never takes the tf32 paths, whatever the policy. */
    g = emit_test_graph(g_f16_nhwc, "");
    emit_test_whole_group(g, &grp);
    grp.precision = OPS_PREC_REDUCED;
    l = kept(&grp, &dev, &counts);
    for (int i = 0; i < l.n; i++)
        assert_true(l.s[i].v[math] == MATH_FFMA || l.s[i].v[math] == MATH_MMA);
    free(l.s);
    ops_graph_free(g);

    const struct {
        const char *name, *json;
        int min;
    } cases[] = {
        {"f32 56x56x64", g_f32_56, 50}, {"alexnet conv1", g_alexnet, 30},
        {"f16 nhwc", g_f16_nhwc, 50},   {"ragged", g_ragged, 50},
        {"depthwise", g_depthwise, 20}, {"grouped bf16", g_grouped_bf16, 30},
        {"bf16 odd", g_bf16_odd, 30},   {"f32 nhwc", g_f32_nhwc, 50},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        g = emit_test_graph(cases[i].json, "");
        emit_test_whole_group(g, &grp);
        l = kept(&grp, &dev, &counts);
        print_counts(cases[i].name, &counts);
        assert_true(counts.kept >= cases[i].min);
        free(l.s);
        ops_graph_free(g);
    }
}

static void test_prune_reasons(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    ops_graph *g = emit_test_graph(g_f16_nhwc, "");
    emit_test_whole_group(g, &grp);
    const ops_family *f = &FAM;
    /* Knobs of the other algorithm away from their first value. */
    ops_schedule s = sched("algo=direct bm=64");
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s = sched("algo=implicit_gemm tq=4");
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    /* mma needs 16-deep reduction steps. */
    s = sched("math=mma bm=64 bn=64 bk=8 warps=4 stages=3");
    assert_string_equal(f->prune(&grp, &s, &dev), "divisibility");
    s = sched("math=mma bm=64 bn=64 bk=32 warps=4 stages=3");
    assert_null(f->prune(&grp, &s, &dev));
    /* This gather is cp.async-able, so the unpipelined variant is redundant. */
    s = sched("math=mma bm=64 bn=64 bk=32 warps=4 stages=1");
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    /* 128x64 on one warp: a 128x64 warp tile holds too many accumulators. */
    s = sched("math=mma bm=128 bn=64 bk=32 warps=1 stages=3");
    assert_string_equal(f->prune(&grp, &s, &dev), "regs");
    ops_graph_free(g);

    /* NCHW cannot feed cp.async: deep pipelines are pruned for alignment. */
    g = emit_test_graph(g_bf16_odd, "");
    emit_test_whole_group(g, &grp);
    s = sched("math=mma bm=64 bn=16 bk=16 warps=2 stages=3");
    assert_string_equal(f->prune(&grp, &s, &dev), "align");
    s = sched("math=mma bm=64 bn=16 bk=16 warps=2 stages=2");
    assert_null(f->prune(&grp, &s, &dev));
    ops_graph_free(g);

    /* Depthwise: a thread's channels must share a group. */
    g = emit_test_graph(g_depthwise, "");
    emit_test_whole_group(g, &grp);
    s = sched("algo=direct tk=2 tq=4 warps=4");
    assert_string_equal(f->prune(&grp, &s, &dev), "divisibility");
    s = sched("algo=direct tk=1 tq=4 warps=4");
    assert_null(f->prune(&grp, &s, &dev));
    ops_graph_free(g);

    /* f32 under "exact": no tensor cores. */
    g = emit_test_graph(g_f32_56, "");
    emit_test_whole_group(g, &grp);
    s = sched("math=mma bm=64 bn=64 bk=32 warps=4 stages=2");
    assert_string_equal(f->prune(&grp, &s, &dev), "shape");
    grp.precision = OPS_PREC_REDUCED;
    assert_null(f->prune(&grp, &s, &dev));
    ops_graph_free(g);
}

/* The tf32 paths: f32 data only, plain tf32 only where the policy accepts tf32 rounding,
 * tf32x3 everywhere; 8-deep reduction steps; the cp.async gather for 4-float channel runs. */
static void test_prune_tf32(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    const ops_family *f = &FAM;

    /* The knob values: math appended after the old ones, bn sorted with 96 in it. */
    const ops_knob *km = &f->knobs[knob_index("math")], *kn = &f->knobs[knob_index("bn")];
    assert_int_equal(km->n_values, 4);
    assert_string_equal(km->labels[MATH_FFMA], "ffma");
    assert_string_equal(km->labels[MATH_MMA], "mma");
    assert_string_equal(km->labels[MATH_TF32], "tf32");
    assert_string_equal(km->labels[MATH_TF32X3], "tf32x3");
    bool has96 = false;
    for (int i = 0; i < kn->n_values; i++) {
        has96 |= kn->values[i] == 96;
        if (i > 0)
            assert_true(kn->values[i] > kn->values[i - 1]);
    }
    assert_true(has96);

    /* 16-bit data: both tf32 paths are off ("shape"), under every policy. */
    ops_graph *g = emit_test_graph(g_f16_nhwc, "");
    emit_test_whole_group(g, &grp);
    const ops_precision all[] = {OPS_PREC_EXACT, OPS_PREC_TF32, OPS_PREC_REDUCED};
    for (size_t p = 0; p < KT_ARRAY_LEN(all); p++) {
        grp.precision = all[p];
        ops_schedule s = sched("math=tf32 bm=64 bn=64 bk=16 warps=4 stages=3");
        assert_string_equal(f->prune(&grp, &s, &dev), "shape");
        s = sched("math=tf32x3 bm=64 bn=64 bk=16 warps=4 stages=3");
        assert_string_equal(f->prune(&grp, &s, &dev), "shape");
    }
    ops_graph_free(g);

    /* f32 NCHW (plain gather): tf32 needs the tf32 or reduced policy, tf32x3 runs under exact. */
    g = emit_test_graph(g_f32_56, "");
    emit_test_whole_group(g, &grp);
    ops_schedule tf = sched("math=tf32 bm=64 bn=64 bk=16 warps=4 stages=2");
    ops_schedule x3 = sched("math=tf32x3 bm=64 bn=64 bk=16 warps=4 stages=2");
    grp.precision = OPS_PREC_EXACT;
    assert_string_equal(f->prune(&grp, &tf, &dev), "precision");
    assert_null(f->prune(&grp, &x3, &dev));
    grp.precision = OPS_PREC_TF32;
    assert_null(f->prune(&grp, &tf, &dev));
    assert_null(f->prune(&grp, &x3, &dev));
    grp.precision = OPS_PREC_REDUCED;
    assert_null(f->prune(&grp, &tf, &dev));
    assert_null(f->prune(&grp, &x3, &dev));
    grp.precision = OPS_PREC_EXACT;
    /* 8-deep reduction steps: bk 8 is legal (mma needs 16), bk 12 is not. */
    ops_schedule s = sched("math=tf32x3 bm=64 bn=64 bk=8 warps=4 stages=2");
    assert_null(f->prune(&grp, &s, &dev));
    s = sched("math=mma bm=64 bn=64 bk=8 warps=4 stages=2");
    grp.precision = OPS_PREC_REDUCED;
    assert_string_equal(f->prune(&grp, &s, &dev), "divisibility");
    grp.precision = OPS_PREC_EXACT;
    s = sched("math=tf32x3 bm=64 bn=64 bk=12 warps=4 stages=2");
    assert_string_equal(f->prune(&grp, &s, &dev), "divisibility");
    /* NCHW cannot feed cp.async: no deep pipelines. */
    s = sched("math=tf32x3 bm=64 bn=64 bk=16 warps=4 stages=3");
    assert_string_equal(f->prune(&grp, &s, &dev), "align");
    /* Split fragments double the fragment registers: a 64x48 warp tile does not fit. */
    s = sched("math=tf32x3 bm=128 bn=96 bk=16 warps=4 stages=2");
    assert_string_equal(f->prune(&grp, &s, &dev), "regs");
    s = sched("math=tf32x3 bm=128 bn=96 bk=16 warps=8 stages=2");
    assert_null(f->prune(&grp, &s, &dev));
    ops_graph_free(g);

    /* f32 NHWC with 64 channels: 16-byte cp.async runs, so the unpipelined variant is
     * redundant and deep pipelines are legal. */
    g = emit_test_graph(g_f32_nhwc, "");
    emit_test_whole_group(g, &grp);
    s = sched("math=tf32x3 bm=128 bn=64 bk=16 warps=4 stages=1");
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s = sched("math=tf32x3 bm=128 bn=64 bk=16 warps=4 stages=3");
    assert_null(f->prune(&grp, &s, &dev));
    ops_graph_free(g);

    /* f32 NHWC with 3 channels: no 4-float runs, back to the plain gather. */
    static const char c3[] =
        "{\"name\": \"c\", \"inputs\": {"
        "  \"X\": {\"dtype\": \"f32\", \"shape\": [2, 20, 20, 3]},"
        "  \"W\": {\"dtype\": \"f32\", \"shape\": [32, 3, 3, 3]}},"
        " \"nodes\": [{\"out\": \"Y\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"],"
        "  \"padding\": [1, 1], \"layout\": \"NHWC\"}], \"outputs\": [\"Y\"]}";
    g = emit_test_graph(c3, "");
    emit_test_whole_group(g, &grp);
    s = sched("math=tf32x3 bm=64 bn=32 bk=8 warps=2 stages=3");
    assert_string_equal(f->prune(&grp, &s, &dev), "align");
    s = sched("math=tf32x3 bm=64 bn=32 bk=8 warps=2 stages=1");
    assert_null(f->prune(&grp, &s, &dev));
    ops_graph_free(g);
}

/* The tiled direct kernel: f32 NCHW with few channels, one group, no dilation; 16-byte filter and
 * window loads; whole warps; the knobs of the other algorithms at their first value. */
static void test_prune_tiled(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    const ops_family *f = &FAM;
    assert_string_equal(f->knobs[knob_index("algo")].labels[ALGO_TILED], "tiled");

    ops_graph *g = emit_test_graph(g_alexnet, "");
    emit_test_whole_group(g, &grp);
    ops_schedule s = sched("algo=tiled bm=128 bn=96 tk=8 tq=8");
    assert_null(f->prune(&grp, &s, &dev));
    s = sched("algo=tiled bm=64 bn=32 tk=4 tq=8 stages=2");
    assert_null(f->prune(&grp, &s, &dev));
    /* Pure FFMA, and no knob of the other algorithms: the block's threads follow from the tile. */
    s = sched("algo=tiled bm=128 bn=96 tk=8 tq=8 warps=4");
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s = sched("algo=tiled math=tf32x3 bm=128 bn=96 tk=8 tq=8");
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s = sched("algo=tiled bm=128 bn=96 bk=16 tk=8 tq=8");
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s = sched("algo=tiled bm=128 bn=96 tk=8 tq=8 filter=registers");
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    /* ... and the tiled knobs stay at their first value for the others. */
    s = sched("algo=direct tk=4 tq=4 warps=4 stages=2");
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    /* 16-byte filter (tk) and window (tq) loads. */
    s = sched("algo=tiled bm=128 bn=96 tk=2 tq=8");
    assert_string_equal(f->prune(&grp, &s, &dev), "align");
    s = sched("algo=tiled bm=128 bn=96 tk=8 tq=2");
    assert_string_equal(f->prune(&grp, &s, &dev), "align");
    /* 32 x 16 / (8 x 8) = 8 threads; 64 x 96 / (4 x 4) = 384 is fine. */
    s = sched("algo=tiled bm=32 bn=16 tk=8 tq=8");
    assert_string_equal(f->prune(&grp, &s, &dev), "threads");
    s = sched("algo=tiled bm=64 bn=96 tk=4 tq=4");
    assert_null(f->prune(&grp, &s, &dev));
    /* Three input channels: a fourth buffer has nothing to hold. */
    s = sched("algo=tiled bm=128 bn=32 tk=8 tq=8 stages=3");
    assert_null(f->prune(&grp, &s, &dev));
    s = sched("algo=tiled bm=128 bn=32 tk=8 tq=8 stages=4");
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    /* Three stages of a 128-channel slice of 121 taps (with the patch) just fit 227 KiB. */
    s = sched("algo=tiled bm=128 bn=128 tk=8 tq=8 stages=3");
    assert_null(f->prune(&grp, &s, &dev));
    ops_graph_free(g);
    /* Two stages of a 128-channel slice of 15 x 15 taps do not. */
    g = emit_test_graph(g_big_filter, "");
    emit_test_whole_group(g, &grp);
    s = sched("algo=tiled bm=128 bn=128 tk=8 tq=8 stages=1");
    assert_null(f->prune(&grp, &s, &dev));
    s = sched("algo=tiled bm=128 bn=128 tk=8 tq=8 stages=2");
    assert_string_equal(f->prune(&grp, &s, &dev), "smem");
    ops_graph_free(g);

    /* Shapes it does not handle. */
    const char *no[] = {g_f16_nhwc, g_depthwise, g_f32_56, g_ragged, g_grouped_bf16, g_f32_nhwc};
    for (size_t i = 0; i < KT_ARRAY_LEN(no); i++) {
        g = emit_test_graph(no[i], "");
        emit_test_whole_group(g, &grp);
        s = sched("algo=tiled bm=64 bn=16 tk=4 tq=4");
        assert_string_equal(f->prune(&grp, &s, &dev), "shape");
        ops_graph_free(g);
    }
    /* Five output channels: a 32-channel block is mostly waste. */
    g = emit_test_graph(g_tiled_ragged, "");
    emit_test_whole_group(g, &grp);
    s = sched("algo=tiled bm=64 bn=16 tk=4 tq=4");
    assert_null(f->prune(&grp, &s, &dev));
    s = sched("algo=tiled bm=64 bn=32 tk=4 tq=4");
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    sched_list l = kept(&grp, &dev, NULL);
    assert_true(count_algo(&l, ALGO_TILED) >= 4);
    free(l.s);
    ops_graph_free(g);
}

/* ---- compiling a spread of kept candidates ---- */

typedef struct spread_case {
    const char *name, *json, *shapes;
    ops_precision prec;
    int n;            /* candidates to compile */
    int math;         /* only schedules with this math value; -1: all */
    const char *only; /* only schedules whose text contains this; NULL: all */
} spread_case;

static void compile_spread(const spread_case *cases, size_t n_cases, const char *arch,
                           int min_total, bool allow_all)
{
    ops_device dev;
    ops_device_h100(&dev);
    srch_pool *pool = NULL;
    kt_err err = {0};
    srch_pool_opts opts = {.arch = arch, .jobs = 2, .timeout_s = 120};
    assert_int_equal(srch_pool_new(&opts, &pool, &err), 0);
    char **sources = NULL;
    char(*names)[300] = NULL;
    int total = 0;
    for (size_t c = 0; c < n_cases; c++) {
        char *text = NULL;
        if (strncmp(cases[c].json, "example:", 8) == 0)
            text = example(cases[c].json + 8);
        ops_graph *g = emit_test_graph(text ? text : cases[c].json, cases[c].shapes);
        free(text);
        ops_group grp;
        emit_test_whole_group(g, &grp);
        grp.precision = cases[c].prec;
        sched_list l = kept(&grp, &dev, NULL);
        if (cases[c].math >= 0) {
            int km = knob_index("math"), m = 0;
            for (int i = 0; i < l.n; i++)
                if (l.s[i].v[km] == cases[c].math)
                    l.s[m++] = l.s[i];
            l.n = m;
            assert_true(l.n > 0);
        }
        if (cases[c].only) {
            int m = 0;
            for (int i = 0; i < l.n; i++) {
                char sc[256];
                ops_schedule_format(&l.s[i], sc, sizeof(sc));
                if (strstr(sc, cases[c].only))
                    l.s[m++] = l.s[i];
            }
            l.n = m;
            assert_true(l.n > 0);
        }
        /* KTUNE_CONV_ALL=1 compiles every kept candidate (minutes; checks the pruner). */
        const char *all = getenv("KTUNE_CONV_ALL");
        int want = allow_all && all && strcmp(all, "1") == 0 ? l.n : cases[c].n;
        int n = want < l.n ? want : l.n;
        for (int i = 0; i < n; i++) {
            /* Evenly spaced through the enumeration order, which walks every knob. */
            const ops_schedule *s = &l.s[(int64_t)i * l.n / n];
            ops_emitted e = {0};
            ops_diag d = {0};
            if (FAM.emit(&grp, s, &dev, &e, &d) < 0)
                fail_msg("%s: emit failed: %s", cases[c].name, d.msg);
            assert_int_equal(e.n_kernels, 1);
            assert_int_equal(e.kernels[0].n_args, grp.n_in + 1);
            assert_true(e.kernels[0].smem_bytes <= (uint32_t)dev.smem_per_block_optin);
            sources = realloc(sources, sizeof(*sources) * (size_t)(total + 1));
            names = realloc(names, sizeof(*names) * (size_t)(total + 1));
            char sc[256];
            ops_schedule_format(s, sc, sizeof(sc));
            snprintf(names[total], sizeof(names[total]), "%s: %s", cases[c].name, sc);
            sources[total] = e.source;
            e.source = NULL;
            assert_int_equal(srch_pool_submit(pool, sources[total], (uint64_t)total), 0);
            total++;
        }
        free(l.s);
        ops_graph_free(g);
    }
    assert_true(total >= min_total);
    int failed = 0, spilled = 0, max_regs = 0;
    for (int i = 0; i < total; i++) {
        srch_compile_result r = {0};
        assert_int_equal(srch_pool_next(pool, &r, &err), 0);
        int t = (int)r.tag;
        if (r.status != SRCH_COMPILE_OK) {
            failed++;
            printf("# FAILED %s (%s)\n%s\n%s\n", names[t], srch_status_name(r.status), r.log,
                   sources[t]);
        }
        for (int k = 0; k < r.n_kernels; k++) {
            if (r.kernels[k].spill_store_bytes || r.kernels[k].spill_load_bytes) {
                spilled++;
                printf("# SPILL %s: %d regs, %d/%d bytes\n", names[t], r.kernels[k].registers,
                       r.kernels[k].spill_store_bytes, r.kernels[k].spill_load_bytes);
            }
            if (r.kernels[k].registers > max_regs)
                max_regs = r.kernels[k].registers;
        }
        srch_compile_result_release(&r);
    }
    printf("# %s: compiled %d candidates, %d failed, %d spilled, max %d registers\n", arch, total,
           failed, spilled, max_regs);
    for (int i = 0; i < total; i++)
        free(sources[i]);
    free(sources);
    free(names);
    srch_pool_free(pool);
    assert_int_equal(failed, 0);
    assert_int_equal(spilled, 0);
}

static void test_compile_sm90a(void **state)
{
    (void)state;
    const spread_case cases[] = {
        {"conv2d.json", "example:conv2d.json", "N=128", OPS_PREC_EXACT, 16, -1, NULL},
        {"f32 56x56x64", g_f32_56, "", OPS_PREC_EXACT, 8, -1, NULL},
        {"f32 56x56x64 reduced", g_f32_56, "", OPS_PREC_REDUCED, 4, -1, NULL},
        {"alexnet conv1", g_alexnet, "", OPS_PREC_EXACT, 8, -1, NULL},
        {"f16 nhwc", g_f16_nhwc, "", OPS_PREC_EXACT, 10, -1, NULL},
        {"ragged", g_ragged, "", OPS_PREC_EXACT, 6, -1, NULL},
        {"depthwise", g_depthwise, "", OPS_PREC_EXACT, 4, -1, NULL},
        /* The depthwise kernel: ragged tiles, stride and dilation, every tile shape's corner */
        {"depthwise kernel", g_depthwise, "", OPS_PREC_EXACT, 6, -1, "algo=depthwise"},
        {"depthwise ragged", g_depthwise_ragged, "", OPS_PREC_EXACT, 8, -1, "algo=depthwise"},
        {"grouped bf16", g_grouped_bf16, "", OPS_PREC_EXACT, 4, -1, NULL},
        {"bf16 odd", g_bf16_odd, "", OPS_PREC_EXACT, 4, -1, NULL},
        /* The tf32 paths: plain gather (NCHW), cp.async gather (NHWC), ragged edges. */
        {"alexnet conv1 tf32x3", g_alexnet, "", OPS_PREC_EXACT, 8, MATH_TF32X3, NULL},
        {"alexnet conv1 tf32", g_alexnet, "", OPS_PREC_TF32, 4, MATH_TF32, NULL},
        {"f32 56x56x64 tf32x3", g_f32_56, "", OPS_PREC_EXACT, 6, MATH_TF32X3, NULL},
        {"f32 56x56x64 tf32", g_f32_56, "", OPS_PREC_TF32, 4, MATH_TF32, NULL},
        {"f32 nhwc tf32x3", g_f32_nhwc, "", OPS_PREC_EXACT, 6, MATH_TF32X3, NULL},
        {"f32 nhwc tf32", g_f32_nhwc, "", OPS_PREC_TF32, 4, MATH_TF32, NULL},
        {"ragged tf32x3", g_ragged, "", OPS_PREC_EXACT, 4, MATH_TF32X3, NULL},
        /* The tiled direct kernel: AlexNet's first layer (its best-ranked schedules first, then
         * a spread), ragged tiles, the 3x3 example. */
        {"alexnet conv1 tiled", g_alexnet, "", OPS_PREC_EXACT, 12, -1, "algo=tiled"},
        {"tiled ragged", g_tiled_ragged, "", OPS_PREC_EXACT, 6, -1, "algo=tiled"},
        {"conv2d.json tiled", "example:conv2d.json", "N=128", OPS_PREC_EXACT, 4, -1, "algo=tiled"},
        /* The general gather: 3-d (f32 on FFMA and tf32x3, f16 NDHWC on mma) and a transposed
         * convolution's input dilation (bf16 on mma). */
        {"conv3d", g_conv3d, "", OPS_PREC_EXACT, 6, -1, NULL},
        {"conv3d tf32x3", g_conv3d, "", OPS_PREC_EXACT, 4, MATH_TF32X3, NULL},
        {"conv3d f16 ndhwc", g_conv3d_f16_ndhwc, "", OPS_PREC_EXACT, 6, -1, NULL},
        {"transposed bf16", g_transposed_bf16, "", OPS_PREC_EXACT, 6, -1, NULL},
    };
    compile_spread(cases, KT_ARRAY_LEN(cases), "sm_90a", 100, true);
}

static void test_compile_sm80(void **state)
{
    (void)state;
    const spread_case cases[] = {
        {"conv2d.json", "example:conv2d.json", "N=128", OPS_PREC_EXACT, 2, -1, NULL},
        {"f16 nhwc", g_f16_nhwc, "", OPS_PREC_EXACT, 3, -1, NULL},
        {"bf16 odd", g_bf16_odd, "", OPS_PREC_EXACT, 1, -1, NULL},
        {"f32 nhwc tf32x3", g_f32_nhwc, "", OPS_PREC_EXACT, 1, MATH_TF32X3, NULL},
    };
    compile_spread(cases, KT_ARRAY_LEN(cases), "sm_80", 7, false);
}

/* The largest tiles must fit registers too: the kept schedules with the most accumulators. */
static void test_compile_extremes(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    const struct {
        const char *json, *spec;
    } cases[] = {
        {g_f16_nhwc, "math=mma bm=128 bn=64 bk=32 warps=4 stages=4"},
        {g_f16_nhwc, "math=mma bm=128 bn=32 bk=32 warps=2 stages=4"},
        {g_f32_56, "bm=128 bn=64 bk=8 warps=4 stages=2"},
        {g_alexnet, "algo=direct tk=4 tq=8 warps=4 filter=registers"},
        {g_alexnet, "algo=direct tk=8 tq=4 warps=8 filter=shared"},
        {g_alexnet, "math=tf32x3 bm=128 bn=96 bk=16 warps=8 stages=2"},
        {g_alexnet, "math=tf32x3 bm=64 bn=96 bk=16 warps=4 stages=2"},
        {g_f32_56, "math=tf32x3 bm=128 bn=64 bk=16 warps=8 stages=2"},
        {g_f32_nhwc, "math=tf32x3 bm=128 bn=128 bk=16 warps=8 stages=4"},
        {g_f32_nhwc, "math=tf32x3 bm=128 bn=64 bk=16 warps=4 stages=4"},
        /* tiled: the largest register tiles and blocks, the deepest pipeline. */
        {g_alexnet, "algo=tiled bm=128 bn=96 tk=8 tq=8 stages=1"},
        {g_alexnet, "algo=tiled bm=128 bn=128 tk=8 tq=8 stages=2"},
        {g_alexnet, "algo=tiled bm=64 bn=96 tk=8 tq=8 stages=3"},
        {g_alexnet, "algo=tiled bm=128 bn=128 tk=4 tq=4 stages=1"},
        {g_tiled_ragged, "algo=tiled bm=128 bn=16 tk=4 tq=8 stages=3"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        ops_graph *g = emit_test_graph(cases[i].json, "");
        ops_group grp;
        emit_test_whole_group(g, &grp);
        ops_schedule s = sched(cases[i].spec);
        const char *why = FAM.prune(&grp, &s, &dev);
        if (why)
            fail_msg("%s pruned (%s)", cases[i].spec, why);
        ops_emitted e = {0};
        ops_diag d = {0};
        assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), 0);
        emit_test_compile(e.source, "sm_90a");
        ops_emitted_free(&e);
        ops_graph_free(g);
    }
}

/* The tiled schedules the cost model ranks first for AlexNet's first layer (what the tuner
 * screens first) compile without spills; prints their registers and shared memory. */
static void test_compile_tiled_best(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_graph *g = emit_test_graph(g_alexnet, "");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    sched_list l = kept(&grp, &dev, NULL);
    int ka = knob_index("algo"), m = 0;
    for (int i = 0; i < l.n; i++)
        if (l.s[i].v[ka] == ALGO_TILED)
            l.s[m++] = l.s[i];
    l.n = m;
    assert_true(l.n >= 6);
    /* Selection by estimate, best first. */
    for (int i = 0; i < 6; i++) {
        ops_estimate bi, ej;
        FAM.estimate(&grp, &l.s[i], &dev, &bi);
        for (int j = i + 1; j < l.n; j++) {
            FAM.estimate(&grp, &l.s[j], &dev, &ej);
            if (ej.seconds < bi.seconds) {
                ops_schedule t = l.s[i];
                l.s[i] = l.s[j];
                l.s[j] = t;
                bi = ej;
            }
        }
        ops_emitted e = {0};
        ops_diag d = {0};
        assert_int_equal(FAM.emit(&grp, &l.s[i], &dev, &e, &d), 0);
        srch_compile_result r = {0};
        assert_int_equal(srch_nvrtc_compile(e.source, "sm_90a", &r), 0);
        assert_int_equal(r.status, SRCH_COMPILE_OK);
        char sc[256];
        ops_schedule_format(&l.s[i], sc, sizeof(sc));
        printf("# %.1f us  %s: %d registers, %d/%d spill bytes, %u bytes of shared memory, "
               "%u threads\n",
               bi.seconds * 1e6, sc, r.kernels[0].registers, r.kernels[0].spill_store_bytes,
               r.kernels[0].spill_load_bytes, e.kernels[0].smem_bytes, e.kernels[0].block[0]);
        assert_int_equal(r.kernels[0].spill_store_bytes + r.kernels[0].spill_load_bytes, 0);
        srch_compile_result_release(&r);
        ops_emitted_free(&e);
    }
    free(l.s);
    ops_graph_free(g);
}

/* ---- golden sources, one per algorithm ---- */

static int count_of(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

/* The source's #include lines are exactly `includes` (consecutive lines, each ending in a
 * newline; "" for none), under the device library banner and before the prelude. */
static void expect_includes(const char *src, const char *includes)
{
    assert_int_equal(count_of(src, "#include"), count_of(includes, "#include"));
    if (!*includes)
        return;
    const char *at = strstr(src, includes), *prelude = strstr(src, "/* ---- ktune prelude");
    assert_non_null(at);
    assert_non_null(prelude);
    assert_true(at < prelude);
    assert_non_null(strstr(src, "/* ---- ktune device library (ops/device/ktune/"));
}

/* includes: the device library headers the kernel must include, in order ("" for none). */
static void golden(const char *json, const char *shapes, const char *spec, const char *file,
                   const char *entry, const char *includes)
{
    ops_device dev;
    ops_device_h100(&dev);
    ops_graph *g = emit_test_graph(json, shapes);
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_schedule s = sched(spec);
    assert_null(FAM.prune(&grp, &s, &dev));
    ops_emitted e = {0};
    ops_diag d = {0};
    assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), 0);
    assert_string_equal(e.kernels[0].entry, entry);
    assert_non_null(strstr(e.source, "__launch_bounds__(THREADS, 1)"));
    expect_includes(e.source, includes);
    emit_test_golden(file, e.source);
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    ops_graph_free(g);
}

/* The tiled kernel on AlexNet's first layer; it asks ptxas for the blocks per SM it planned. */
static void golden_tiled(void)
{
    ops_device dev;
    ops_device_h100(&dev);
    ops_graph *g = emit_test_graph(g_alexnet, "");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_schedule s = sched("algo=tiled bm=64 bn=96 tk=8 tq=8 stages=2");
    assert_null(FAM.prune(&grp, &s, &dev));
    ops_emitted e = {0};
    ops_diag d = {0};
    assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), 0);
    assert_string_equal(e.kernels[0].entry, "ktune_conv_tiled");
    assert_non_null(strstr(e.source, "__launch_bounds__(THREADS, MIN_BLOCKS)"));
    assert_non_null(
        strstr(e.source, "kt_cp_async4_u32(xdst[i] + d, xr + 32 * i, in && xin[i] ? 4 : 0);"));
    assert_non_null(strstr(e.source, "kt_cp_async4_u32_all("));
    assert_non_null(strstr(e.source, "const unsigned ln = kt_lane_id();"));
    assert_true(emit_test_has(e.source, "cp.async.ca.shared.global [%0], [%1], 4, %2;"));
    assert_true(emit_test_has(e.source, "cp.async.ca.shared.global [%0], [%1], 4;"));
    assert_false(emit_test_has(e.source, "mma.sync"));
    expect_includes(e.source, "#include \"ktune/cp_async.cuh\"\n");
    emit_test_golden("conv_tiled.cu", e.source);
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    ops_graph_free(g);
}

static void test_golden(void **state)
{
    (void)state;
    char *text = example("conv2d.json");
    golden(text, "N=128", "algo=direct tk=4 tq=4 warps=4 filter=shared", "conv_direct.cu",
           "ktune_conv_direct", "");
    golden(text, "N=128", "bm=64 bn=16 bk=16 warps=2 stages=2", "conv_implicit_gemm_ffma.cu",
           "ktune_conv_igemm_ffma", "");
    free(text);
    golden(g_f16_nhwc, "", "math=mma bm=128 bn=64 bk=32 warps=4 stages=3",
           "conv_implicit_gemm_mma.cu", "ktune_conv_igemm_mma",
           "#include \"ktune/cp_async.cuh\"\n#include \"ktune/ldmatrix.cuh\"\n"
           "#include \"ktune/mma.cuh\"\n");
    golden(g_alexnet, "", "math=tf32x3 bm=128 bn=96 bk=16 warps=8 stages=2",
           "conv_implicit_gemm_tf32x3.cu", "ktune_conv_igemm_tf32x3",
           "#include \"ktune/mma.cuh\"\n");
    golden(g_conv3d, "", "bm=64 bn=16 bk=16 warps=2 stages=2", "conv3d_implicit_gemm_ffma.cu",
           "ktune_conv_igemm_ffma", "");
    golden_tiled();
    golden(g_depthwise_ragged, "", "algo=depthwise warps=4 tk=2 tq=2", "conv_depthwise.cu",
           "ktune_conv_depthwise", "");
}

/* The depthwise kernel: NCHW with one filter a channel only; its launch (a block per plane and
 * tile); and its estimate against the direct kernel on a large depthwise layer. */
static void test_depthwise(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    ops_graph *g = emit_test_graph(g_grouped_bf16, ""); /* 16 channels a group */
    emit_test_whole_group(g, &grp);
    ops_schedule s = sched("algo=depthwise warps=4 tk=2 tq=2");
    assert_string_equal(FAM.prune(&grp, &s, &dev), "shape");
    ops_graph_free(g);
    g = emit_test_graph(g_depthwise_ragged, "");
    emit_test_whole_group(g, &grp);
    assert_null(FAM.prune(&grp, &s, &dev));
    ops_schedule bad = sched("algo=depthwise warps=1 tk=2 tq=2");
    assert_string_equal(FAM.prune(&grp, &bad, &dev), "threads");
    bad = sched("algo=depthwise warps=4 tk=2 tq=2 bm=64"); /* a knob it does not read */
    assert_string_equal(FAM.prune(&grp, &bad, &dev), "redundant");
    bad = sched("algo=depthwise warps=4 tk=2 tq=8"); /* 256 columns for 31 */
    assert_string_equal(FAM.prune(&grp, &bad, &dev), "redundant");
    ops_emitted e = {0};
    ops_diag d = {0};
    assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), 0);
    /* output 31 x 42 (61 + 10 - 12 - 1) / 2 + 1 and (83 + 10 - 12 - 1) / 2 + 1: tiles of 8
     * rows x 64 columns, 4 x 1 a plane; 3 x 24 planes */
    const ops_kernel_launch *l = &e.kernels[0];
    assert_int_equal(l->grid[0], 4);
    assert_int_equal(l->grid[1], 3 * 24);
    assert_int_equal(l->block[0], 128);
    /* the patch: (8 - 1) * 2 + 6 * 2 + 1 rows x (64 - 1) * 2 + 6 * 2 + 1 columns, the filter */
    assert_int_equal(l->smem_bytes, (27 * 139 + 49) * 4);
    ops_emitted_free(&e);
    ops_graph_free(g);

    /* MobileNet-like 3x3 depthwise over 32 x 128 x 112 x 112 f32: the stencil from shared
     * memory beats the direct kernel's window re-read from the caches. */
    const char *big =
        "{\"name\": \"dw\", \"inputs\": {"
        "  \"X\": {\"dtype\": \"f32\", \"shape\": [32, 128, 112, 112]},"
        "  \"W\": {\"dtype\": \"f32\", \"shape\": [128, 1, 3, 3], \"const\": true}},"
        " \"nodes\": [{\"out\": \"Y\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"],"
        "   \"padding\": [1, 1], \"groups\": 128}], \"outputs\": [\"Y\"]}";
    g = emit_test_graph(big, "");
    emit_test_whole_group(g, &grp);
    ops_prune_counts counts;
    sched_list kl = kept(&grp, &dev, &counts);
    double best_dw = INFINITY, best_direct = INFINITY;
    int algo = knob_index("algo");
    for (int i = 0; i < kl.n; i++) {
        ops_estimate est;
        FAM.estimate(&grp, &kl.s[i], &dev, &est);
        double *best = kl.s[i].v[algo] == ALGO_DEPTHWISE ? &best_dw
                       : kl.s[i].v[algo] == ALGO_DIRECT  ? &best_direct
                                                         : NULL;
        if (best && est.seconds < *best)
            *best = est.seconds;
    }
    print_message("depthwise 3x3: best depthwise %.1f us, best direct %.1f us\n", best_dw * 1e6,
                  best_direct * 1e6);
    assert_true(best_dw < best_direct);
    free(kl.s);
    ops_graph_free(g);
}

/* 3-d and input-dilated convs keep only implicit-GEMM schedules, every math path, and gather
 * through the plain loader: the depth walked, the zeros between input elements skipped. */
static void test_general_gather(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    const char *graphs[] = {g_conv3d, g_conv3d_f16_ndhwc, g_transposed_bf16};
    const char *want[] = {"constexpr int DEPTH = 9, T = 3, OD = 7, OH = 5;",
                          "constexpr int DEPTH = 5, T = 3, OD = 5, OH = 8;",
                          "constexpr int IDIL_D = 1, IDIL_H = 2, IDIL_W = 2;"};
    for (size_t i = 0; i < KT_ARRAY_LEN(graphs); i++) {
        ops_graph *g = emit_test_graph(graphs[i], "");
        ops_group grp;
        emit_test_whole_group(g, &grp);
        sched_list l = kept(&grp, &dev, NULL);
        assert_true(l.n >= 20);
        assert_int_equal(count_algo(&l, 0), l.n);
        ops_emitted e = {0};
        ops_diag d = {0};
        assert_int_equal(FAM.emit(&grp, &l.s[l.n - 1], &dev, &e, &d), 0);
        assert_non_null(strstr(e.source, want[i]));
        assert_non_null(strstr(e.source, "vz % IDIL_D == 0"));
        assert_null(strstr(e.source, "kt_cp_async16("));
        assert_null(strstr(e.source, "kt_kk["));
        ops_emitted_free(&e);
        free(l.s);
        ops_graph_free(g);
    }
}

/* The launch description mirrors the kernel's parameters and covers the output. */
static void test_launch(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_graph *g = emit_test_graph(g_f16_nhwc, "");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_schedule s = sched("math=mma bm=128 bn=64 bk=32 warps=4 stages=3");
    ops_emitted e = {0};
    ops_diag d = {0};
    assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), 0);
    const ops_kernel_launch *l = &e.kernels[0];
    assert_int_equal(l->n_args, 5);
    for (int i = 0; i < grp.n_in; i++) {
        assert_int_equal(l->args[i].kind, OPS_ARG_TENSOR);
        assert_int_equal(l->args[i].tensor, grp.in[i]);
    }
    assert_int_equal(l->args[4].tensor, grp.out[0]);
    assert_int_equal(l->grid[0], (16 * 56 * 56 + 127) / 128);
    assert_int_equal(l->grid[1], 1);
    assert_int_equal(l->grid[2], 1);
    assert_int_equal(l->block[0], 128);
    assert_int_equal(l->smem_bytes, 3 * (128 + 64) * (32 + 8) * 2);
    assert_int_equal(e.workspace_bytes, 0);
    /* Parameters: group inputs in order, then the output. */
    const char *sig = strstr(e.source, "ktune_conv_igemm_mma(");
    assert_non_null(sig);
    const char *params[] = {"const kt_f16 *__restrict__ x", "const kt_f16 *__restrict__ w",
                            "const kt_f16 *__restrict__ bias", "const kt_f16 *__restrict__ in3",
                            "kt_f16 *__restrict__ y)"};
    for (size_t i = 0; i < KT_ARRAY_LEN(params); i++) {
        const char *at = strstr(sig, params[i]);
        assert_non_null(at);
        sig = at;
    }
    ops_emitted_free(&e);

    /* A pruned schedule is refused with a reason. */
    s = sched("math=mma bm=64 bn=64 bk=8 warps=4 stages=3");
    assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "divisibility"));
    ops_graph_free(g);

    /* tf32x3: fp32 tiles [BM][BK + 4] and [BN][BK + 4] per stage, one block per 128 x 96. */
    g = emit_test_graph(g_alexnet, "");
    emit_test_whole_group(g, &grp);
    s = sched("math=tf32x3 bm=128 bn=96 bk=16 warps=8 stages=2");
    assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), 0);
    l = &e.kernels[0];
    assert_string_equal(l->entry, "ktune_conv_igemm_tf32x3");
    assert_int_equal(l->grid[0], (100 * 55 * 55 + 127) / 128);
    assert_int_equal(l->grid[1], 1);
    assert_int_equal(l->block[0], 256);
    assert_int_equal(l->smem_bytes, 2 * (128 + 96) * (16 + 4) * 4);
    assert_non_null(strstr(e.source, "kt_split_tf32_rna(bp[0], b_big[ni][0], b_small[ni][0]);"));
    assert_non_null(strstr(e.source, "kt_mma_m16n8k8_tf32(part[mi][ni], a_small[mi], b_big[ni]);"));
    assert_true(emit_test_has(e.source, "cvt.rna.tf32.f32"));
    assert_true(emit_test_has(e.source, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
    ops_emitted_free(&e);
    /* Plain tf32 needs the tf32 (or reduced) policy. */
    s = sched("math=tf32 bm=128 bn=96 bk=16 warps=8 stages=2");
    assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "precision"));
    grp.precision = OPS_PREC_TF32;
    assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), 0);
    assert_string_equal(e.kernels[0].entry, "ktune_conv_igemm_tf32");
    assert_null(strstr(e.source, "kt_split_tf32_rna"));
    assert_non_null(strstr(e.source, "kt_mma_m16n8k8_tf32(acc[mi][ni], af[mi], bf[ni]);"));
    ops_emitted_free(&e);
    ops_graph_free(g);
}

/* tiled: one block per (channel block, output tile) in x, images in y; the output tile and the
 * stages share shared memory. */
static void test_launch_tiled(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_graph *g = emit_test_graph(g_alexnet, "");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    /* 64 pixels x 96 channels, 8 x 8 per thread: 96 threads; an 8 x 8 tile covers 55 x 55 in
     * 7 x 7 tiles. */
    ops_schedule s = sched("algo=tiled bm=64 bn=96 tk=8 tq=8 stages=2");
    ops_emitted e = {0};
    ops_diag d = {0};
    assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), 0);
    const ops_kernel_launch *l = &e.kernels[0];
    assert_string_equal(l->entry, "ktune_conv_tiled");
    assert_int_equal(l->grid[0], 7 * 7);
    assert_int_equal(l->grid[1], 100);
    assert_int_equal(l->grid[2], 1);
    assert_int_equal(l->block[0], 96);
    assert_int_equal(l->n_args, grp.n_in + 1);
    assert_non_null(strstr(e.source, "constexpr int OH = 8, OW = 8;"));
    /* Two stages of patch + filter slice ([121][100]: 96 rounded off 32 banks). */
    assert_true(l->smem_bytes > 2 * 121 * 100 * 4);
    assert_true(l->smem_bytes <= (uint32_t)dev.smem_per_block_optin);
    ops_emitted_free(&e);
    /* Channel blocks multiply the grid; a pruned schedule is refused with its reason. */
    s = sched("algo=tiled bm=64 bn=32 tk=4 tq=8 stages=1");
    assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), 0);
    assert_int_equal(e.kernels[0].grid[0], 3 * 7 * 7);
    assert_int_equal(e.kernels[0].block[0], 64);
    ops_emitted_free(&e);
    s = sched("algo=tiled bm=128 bn=96 tk=2 tq=8");
    assert_int_equal(FAM.emit(&grp, &s, &dev, &e, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "align"));
    ops_graph_free(g);
}

/* ---- cost model ---- */

static double best_estimate(const ops_group *grp, const ops_device *dev, int algo, int math)
{
    sched_list l = kept(grp, dev, NULL);
    int ka = knob_index("algo"), km = knob_index("math");
    double best = INFINITY;
    for (int i = 0; i < l.n; i++) {
        if (l.s[i].v[ka] != algo || (math >= 0 && l.s[i].v[km] != math))
            continue;
        ops_estimate e;
        FAM.estimate(grp, &l.s[i], dev, &e);
        assert_true(e.seconds > 0 && isfinite(e.seconds));
        assert_true(e.occupancy > 0 && e.occupancy <= 1);
        assert_true(e.flops > 0 && e.bytes > 0);
        if (e.seconds < best)
            best = e.seconds;
    }
    free(l.s);
    return best;
}

static int cmp_rank(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The rank (0-based) of the best "good" schedule among all kept schedules of the group by
 * estimate, or -1 when it is not within the first `within`. Good: with tiled false, tf32x3 with
 * bm 128, bn 64 or 96, bk 16 or 32 and 4 or 8 warps; with tiled true, algo=tiled with bm 64 (the
 * 8x8 output tile that pads AlexNet's 55x55 output least). */
static int top_good(const ops_group *grp, const ops_device *dev, int within, bool tiled)
{
    sched_list l = kept(grp, dev, NULL);
    int km = knob_index("math"), kbm = knob_index("bm"), kbn = knob_index("bn");
    int kbk = knob_index("bk"), kw = knob_index("warps");
    /* (estimate, is good) pairs, sorted by estimate. */
    double(*est)[2] = malloc(sizeof(*est) * (size_t)l.n);
    assert_non_null(est);
    for (int i = 0; i < l.n; i++) {
        const int *v = l.s[i].v;
        ops_estimate e;
        FAM.estimate(grp, &l.s[i], dev, &e);
        est[i][0] = e.seconds;
        if (tiled)
            est[i][1] = v[knob_index("algo")] == ALGO_TILED && v[kbm] == 64;
        else
            est[i][1] = v[km] == MATH_TF32X3 && v[kbm] == 128 && (v[kbn] == 64 || v[kbn] == 96) &&
                        (v[kbk] == 16 || v[kbk] == 32) && (v[kw] == 4 || v[kw] == 8);
    }
    qsort(est, (size_t)l.n, sizeof(*est), cmp_rank);
    int rank = -1;
    for (int i = 0; i < l.n && i < within && rank < 0; i++)
        if (est[i][1] != 0)
            rank = i;
    free(est);
    free(l.s);
    return rank;
}

static void test_estimate(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;

    /* Three input channels: direct beats implicit GEMM. */
    ops_graph *g = conv2d_example();
    emit_test_whole_group(g, &grp);
    double direct = best_estimate(&grp, &dev, 1, -1), igemm = best_estimate(&grp, &dev, 0, -1);
    printf("# conv2d.json: direct %.2f us, implicit_gemm %.2f us\n", direct * 1e6, igemm * 1e6);
    assert_true(direct < igemm);
    ops_graph_free(g);
    g = emit_test_graph(g_alexnet, "");
    emit_test_whole_group(g, &grp);
    direct = best_estimate(&grp, &dev, 1, -1);
    igemm = best_estimate(&grp, &dev, 0, MATH_FFMA);
    double x3 = best_estimate(&grp, &dev, 0, MATH_TF32X3);
    double tiled = best_estimate(&grp, &dev, ALGO_TILED, -1);
    printf("# alexnet conv1: direct %.2f us, implicit_gemm ffma %.2f us, tf32x3 %.2f us, tiled "
           "%.2f us\n",
           direct * 1e6, igemm * 1e6, x3 * 1e6, tiled * 1e6);
    assert_true(direct < igemm);
    /* tf32x3 tensor cores (a third of the tf32 peak, 2.4x FFMA) beat the FFMA GEMM; the tiled
     * direct kernel (measured 715 us before its copies were made cheap, tf32x3 at best 711 us)
     * beats them all. */
    assert_true(x3 < igemm);
    assert_true(tiled < x3);
    assert_true(tiled < direct);
    ops_graph_free(g);

    /* The tuner screens the top of the ranking first: for AlexNet's first layer (3 input and 96
     * output channels, 11x11 stride 4) tiled schedules with 8x8 output tiles must lead the
     * exact-policy list; for the 64-channel 3x3 conv large tf32x3 tiles (bm 128, bn 96 or 64,
     * bk 16 or 32, 4-8 warps). */
    const struct {
        const char *name, *json;
        bool tiled;
    } ranked[] = {{"alexnet conv1", g_alexnet, true}, {"f32 56x56x64", g_f32_56, false}};
    for (size_t c = 0; c < KT_ARRAY_LEN(ranked); c++) {
        g = emit_test_graph(ranked[c].json, "");
        emit_test_whole_group(g, &grp);
        int top = top_good(&grp, &dev, 3, ranked[c].tiled);
        printf("# %s: first good %s schedule at rank %d\n", ranked[c].name,
               ranked[c].tiled ? "tiled" : "tf32x3", top);
        assert_true(top >= 0);
        ops_graph_free(g);
    }

    /* Under the tf32 policy, one tf32 mma per product beats three. */
    g = emit_test_graph(g_f32_56, "");
    emit_test_whole_group(g, &grp);
    grp.precision = OPS_PREC_TF32;
    double tf = best_estimate(&grp, &dev, 0, MATH_TF32);
    x3 = best_estimate(&grp, &dev, 0, MATH_TF32X3);
    printf("# f32 56x56x64 tf32 policy: tf32 %.2f us, tf32x3 %.2f us\n", tf * 1e6, x3 * 1e6);
    assert_true(tf < x3);
    ops_graph_free(g);

    /* 64 channels in f16: tensor-core implicit GEMM beats direct and the ffma GEMM. */
    g = emit_test_graph(g_f16_nhwc, "");
    emit_test_whole_group(g, &grp);
    direct = best_estimate(&grp, &dev, 1, -1);
    double mma = best_estimate(&grp, &dev, 0, 1), ffma = best_estimate(&grp, &dev, 0, 0);
    printf("# f16 nhwc: direct %.2f us, ffma %.2f us, mma %.2f us\n", direct * 1e6, ffma * 1e6,
           mma * 1e6);
    assert_true(mma < direct);
    assert_true(mma < ffma);

    /* A pipelined cp.async schedule beats the same tiles with fewer stages. */
    ops_estimate e2, e4;
    ops_schedule s2 = sched("math=mma bm=128 bn=64 bk=32 warps=4 stages=2");
    ops_schedule s4 = sched("math=mma bm=128 bn=64 bk=32 warps=4 stages=4");
    FAM.estimate(&grp, &s2, &dev, &e2);
    FAM.estimate(&grp, &s4, &dev, &e4);
    assert_true(e4.seconds < e2.seconds);
    ops_graph_free(g);

    /* A big problem: many small blocks beat a handful of huge ones. Batch 1, 28x28 output,
     * 64 channels: bm=128 gives 7 blocks, bm=32 gives 25. */
    static const char small[] =
        "{\"name\": \"c\", \"inputs\": {"
        "  \"X\": {\"dtype\": \"f16\", \"shape\": [1, 28, 28, 256]},"
        "  \"W\": {\"dtype\": \"f16\", \"shape\": [64, 3, 3, 256]}},"
        " \"nodes\": [{\"out\": \"Y\", \"op\": \"conv2d\", \"in\": [\"X\", \"W\"],"
        "  \"padding\": [1, 1], \"layout\": \"NHWC\"}], \"outputs\": [\"Y\"]}";
    g = emit_test_graph(small, "");
    emit_test_whole_group(g, &grp);
    ops_schedule few = sched("math=mma bm=128 bn=64 bk=32 warps=8 stages=3");
    ops_schedule many = sched("math=mma bm=32 bn=16 bk=32 warps=1 stages=3");
    ops_estimate ef, em;
    assert_null(FAM.prune(&grp, &few, &dev));
    assert_null(FAM.prune(&grp, &many, &dev));
    FAM.estimate(&grp, &few, &dev, &ef);
    FAM.estimate(&grp, &many, &dev, &em);
    assert_true(em.seconds < ef.seconds);
    ops_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches),          cmocka_unit_test(test_general_gather),
        cmocka_unit_test(test_counts),           cmocka_unit_test(test_prune_reasons),
        cmocka_unit_test(test_prune_tf32),       cmocka_unit_test(test_prune_tiled),
        cmocka_unit_test(test_launch_tiled),     cmocka_unit_test(test_launch),
        cmocka_unit_test(test_estimate),         cmocka_unit_test(test_golden),
        cmocka_unit_test(test_compile_extremes), cmocka_unit_test(test_compile_sm90a),
        cmocka_unit_test(test_compile_sm80),     cmocka_unit_test(test_compile_tiled_best),
        cmocka_unit_test(test_depthwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
