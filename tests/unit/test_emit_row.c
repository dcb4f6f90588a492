/* The row family: matching, pruning counts, NVRTC compiles of a spread of kept schedules
 * (sm_90a and sm_80, zero spills), ragged and strided shapes, split_row's kernels and
 * workspace, a golden source, cost ordering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "emit_test_util.h"

extern const ops_family ops_family_row;
#define ROW (&ops_family_row)

enum { K_STRATEGY, K_THREADS, K_ROWS, K_PASS, K_STORAGE, K_VEC };
enum { ST_WARP, ST_BLOCK, ST_ROWS, ST_SPLIT, ST_THREAD, ST_LANE, ST_CLUSTER, ST_SPLIT_LANE };
enum { PASS_MULTI, PASS_ONE };
enum { STO_REGS, STO_SHARED, STO_REREAD };

static const char softmax_json[] =
    "{\"name\": \"softmax\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"N\"]}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"softmax\", \"in\": [\"x\"], \"axis\": -1}],"
    " \"outputs\": [\"y\"]}";

/* a linear layer into a softmax: the matmul becomes the row's prologue (K = "K", N = 10) */
static const char linear_softmax_json[] =
    "{\"name\": \"linear_softmax\","
    " \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"K\"]},"
    "            \"W\": {\"dtype\": \"f32\", \"shape\": [10, \"K\"], \"const\": true}},"
    " \"nodes\": [{\"out\": \"t\", \"op\": \"matmul\", \"in\": [\"x\", \"W\"], \"transpose_b\": "
    "true},"
    "            {\"out\": \"y\", \"op\": \"softmax\", \"in\": [\"t\"], \"axis\": -1}],"
    " \"outputs\": [\"y\"]}";

/* the same with the matmul's operand also read by the softmax's input: no prologue */
static const char linear_softmax_shared_json[] =
    "{\"name\": \"linear_softmax_shared\","
    " \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", 10]},"
    "            \"W\": {\"dtype\": \"f32\", \"shape\": [10, 10]}},"
    " \"nodes\": [{\"out\": \"t\", \"op\": \"matmul\", \"in\": [\"x\", \"W\"]},"
    "            {\"out\": \"u\", \"op\": \"add\", \"in\": [\"t\", \"x\"]},"
    "            {\"out\": \"y\", \"op\": \"softmax\", \"in\": [\"u\"], \"axis\": -1}],"
    " \"outputs\": [\"y\"]}";

static const char layernorm_json[] =
    "{\"name\": \"layernorm\","
    " \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", 4096]},"
    "            \"weight\": {\"dtype\": \"f32\", \"shape\": [4096], \"const\": true},"
    "            \"bias\": {\"dtype\": \"f32\", \"shape\": [4096], \"const\": true}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"layernorm\", \"in\": [\"x\", \"weight\", \"bias\"],"
    "            \"axis\": -1, \"eps\": 1e-5}],"
    " \"outputs\": [\"y\"]}";

/* layernorm over a ragged odd row length, f16 */
static const char layernorm_odd_json[] =
    "{\"name\": \"layernorm_odd\","
    " \"inputs\": {\"x\": {\"dtype\": \"f16\", \"shape\": [\"M\", \"N\"]},"
    "            \"weight\": {\"dtype\": \"f16\", \"shape\": [\"N\"]},"
    "            \"bias\": {\"dtype\": \"f16\", \"shape\": [\"N\"]}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"layernorm\", \"in\": [\"x\", \"weight\", \"bias\"]}],"
    " \"outputs\": [\"y\"]}";

static const char rmsnorm_json[] =
    "{\"name\": \"rmsnorm\","
    " \"inputs\": {\"x\": {\"dtype\": \"bf16\", \"shape\": [\"M\", 4096]},"
    "            \"weight\": {\"dtype\": \"bf16\", \"shape\": [4096], \"const\": true}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"rmsnorm\", \"in\": [\"x\", \"weight\"], \"eps\": "
    "1e-6}],"
    " \"outputs\": [\"y\"]}";

/* residual add + rmsnorm: two outputs (the sum and the normalised sum) */
static const char add_rmsnorm_json[] =
    "{\"name\": \"add_rmsnorm\","
    " \"inputs\": {\"x\": {\"dtype\": \"bf16\", \"shape\": [\"M\", \"N\"]},"
    "            \"r\": {\"dtype\": \"bf16\", \"shape\": [\"M\", \"N\"]},"
    "            \"weight\": {\"dtype\": \"bf16\", \"shape\": [\"N\"]}},"
    " \"nodes\": [{\"out\": \"h\", \"op\": \"add\", \"in\": [\"x\", \"r\"]},"
    "           {\"out\": \"y\", \"op\": \"rmsnorm\", \"in\": [\"h\", \"weight\"]}],"
    " \"outputs\": [\"h\", \"y\"]}";

static const char sum_json[] =
    "{\"name\": \"sum_last_axis\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", "
    "\"N\"]}},"
    " \"nodes\": [{\"out\": \"s\", \"op\": \"sum\", \"in\": [\"x\"], \"axes\": [-1]}],"
    " \"outputs\": [\"s\"]}";

static const char sum_mid_json[] =
    "{\"name\": \"sum_mid\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"A\", \"B\", "
    "\"C\"]}},"
    " \"nodes\": [{\"out\": \"s\", \"op\": \"sum\", \"in\": [\"x\"], \"axes\": [1]}],"
    " \"outputs\": [\"s\"]}";

/* softmax over the middle axis (strided rows) */
static const char softmax_mid_json[] =
    "{\"name\": \"softmax_mid\", \"inputs\": {\"x\": {\"dtype\": \"f16\", \"shape\": [\"A\", "
    "\"B\", \"C\"]}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"softmax\", \"in\": [\"x\"], \"axis\": 1}],"
    " \"outputs\": [\"y\"]}";

static const char log_softmax_json[] =
    "{\"name\": \"log_softmax\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", "
    "\"N\"]}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"log_softmax\", \"in\": [\"x\"]}],"
    " \"outputs\": [\"y\"]}";

/* logsumexp without keepdim: a reshape of the per-row result */
static const char lse_json[] =
    "{\"name\": \"lse\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"N\"]}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"logsumexp\", \"in\": [\"x\"]}],"
    " \"outputs\": [\"y\"]}";

/* mean and max over the last axis of a scaled input, a per-row scale, both outputs */
static const char stats_json[] =
    "{\"name\": \"stats\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"N\"]},"
    "                                \"s\": {\"dtype\": \"f32\", \"shape\": [\"M\", 1]}},"
    " \"nodes\": [{\"out\": \"t\", \"op\": \"mul\", \"in\": [\"x\", \"s\"]},"
    "           {\"out\": \"mu\", \"op\": \"mean\", \"in\": [\"t\"], \"axes\": [1]},"
    "           {\"out\": \"mx\", \"op\": \"max\", \"in\": [\"t\"], \"axes\": [1], \"keepdim\": "
    "true},"
    "           {\"out\": \"d\", \"op\": \"sub\", \"in\": [\"mx\", 2]}],"
    " \"outputs\": [\"mu\", \"d\"]}";

static const char pointwise_json[] =
    "{\"name\": \"relu\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"N\"]}},"
    " \"nodes\": [{\"out\": \"y\", \"op\": \"relu\", \"in\": [\"x\"]}],"
    " \"outputs\": [\"y\"]}";

/* two reductions over different axes */
static const char two_axes_json[] =
    "{\"name\": \"two_axes\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"N\"]}},"
    " \"nodes\": [{\"out\": \"a\", \"op\": \"sum\", \"in\": [\"x\"], \"axes\": [0]},"
    "           {\"out\": \"b\", \"op\": \"sum\", \"in\": [\"x\"], \"axes\": [1]}],"
    " \"outputs\": [\"a\", \"b\"]}";

/* amax and amin of the same rows, two outputs */
static const char minmax_json[] =
    "{\"name\": \"minmax\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", \"N\"]}},"
    " \"nodes\": [{\"out\": \"hi\", \"op\": \"max\", \"in\": [\"x\"], \"axes\": [-1]},"
    "           {\"out\": \"lo\", \"op\": \"min\", \"in\": [\"x\"], \"axes\": [-1]}],"
    " \"outputs\": [\"hi\", \"lo\"]}";

static int64_t kept_count(const ops_group *grp, emit_test_list *c)
{
    ops_device dev;
    ops_device_h100(&dev);
    ops_prune_counts counts;
    assert_true(ROW->matches(grp));
    assert_int_equal(ops_family_enumerate(ROW, grp, &dev, emit_test_collect, c, &counts), 0);
    return counts.kept;
}

static void emit_one(const ops_group *grp, const ops_schedule *s, ops_emitted *e)
{
    ops_device dev;
    ops_device_h100(&dev);
    ops_diag d = {0};
    if (ROW->emit(grp, s, &dev, e, &d) < 0)
        fail_msg("emit: %s", d.msg);
    assert_true(e->n_kernels >= 1);
    for (int k = 0; k < e->n_kernels; k++) {
        const ops_kernel_launch *l = &e->kernels[k];
        int want = grp->n_in + grp->n_out + (e->workspace_bytes > 0);
        assert_int_equal(l->n_args, want);
        assert_non_null(strstr(e->source, l->entry));
        assert_true(l->grid[0] >= 1 && l->block[0] >= 32);
        assert_true(l->smem_bytes <= (uint32_t)dev.smem_per_block_optin);
    }
}

static void test_matches(void **state)
{
    (void)state;
    const struct {
        const char *json, *shapes;
        bool want;
    } cases[] = {
        {softmax_json, "M=4,N=8", true},
        {layernorm_json, "M=4", true},
        {rmsnorm_json, "M=4", true},
        {add_rmsnorm_json, "M=3,N=10", true},
        {sum_json, "M=16,N=256", true},
        {sum_mid_json, "A=16,B=256,C=256", true},
        {softmax_mid_json, "A=2,B=5,C=7", true},
        {log_softmax_json, "M=3,N=9", true},
        {lse_json, "M=3,N=9", true},
        {stats_json, "M=5,N=7", true},
        {pointwise_json, "M=4,N=8", false},
        {linear_softmax_json, "M=128,K=100", true},
        {linear_softmax_json, "M=128,K=513", false}, /* dot products too long */
        {linear_softmax_shared_json, "M=8", false},
        {two_axes_json, "M=4,N=8", false},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        ops_group grp;
        ops_graph *g = emit_test_make(cases[i].json, cases[i].shapes, &grp);
        if (ROW->matches(&grp) != cases[i].want)
            fail_msg("case %zu (%s): matches() != %d", i, g->name, cases[i].want);
        ops_graph_free(g);
    } /* The prologue's dot products are in the kernel: one function, called per element. */
    ops_group grp;
    ops_graph *g = emit_test_make(linear_softmax_json, "M=77,K=100", &grp);
    emit_test_list c = {0};
    kept_count(&grp, &c);
    assert_true(c.n > 0);
    ops_emitted e;
    emit_one(&grp, &c.s[0], &e);
    assert_int_equal(e.n_kernels, 1);
    assert_non_null(strstr(e.source, "__device__ __forceinline__ float kt_mm"));
    assert_non_null(strstr(e.source, "for (int k0 = 0; k0 < 100; k0 += 4)"));
    ops_emitted_free(&e);
    free(c.s);
    ops_graph_free(g);
}

static bool any_with(const emit_test_list *c, int knob, int value)
{
    for (int i = 0; i < c->n; i++)
        if (c->s[i].v[knob] == value)
            return true;
    return false;
}

static void test_counts(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = emit_test_make(softmax_json, "M=4096,N=8192", &grp);
    emit_test_list c = {0};
    int64_t kept = kept_count(&grp, &c);
    print_message("softmax 4096x8192: %lld kept\n", (long long)kept);
    assert_true(kept >= 50);
    assert_true(any_with(&c, K_PASS, PASS_ONE));
    assert_false(any_with(&c, K_STRATEGY, ST_SPLIT));  /* 4096 rows fill the GPU */
    assert_false(any_with(&c, K_STRATEGY, ST_THREAD)); /* contiguous rows */
    free(c.s);
    ops_graph_free(g);

    g = emit_test_make(layernorm_json, "M=4096", &grp);
    c = (emit_test_list){0};
    kept = kept_count(&grp, &c);
    print_message("layernorm 4096x4096: %lld kept\n", (long long)kept);
    assert_true(kept >= 50);
    assert_true(any_with(&c, K_PASS, PASS_ONE)); /* Welford */
    assert_true(any_with(&c, K_STORAGE, STO_SHARED));
    free(c.s);
    ops_graph_free(g);

    /* Few long rows: split_row is kept. */
    g = emit_test_make(softmax_json, "M=16,N=16384", &grp);
    c = (emit_test_list){0};
    kept_count(&grp, &c);
    assert_true(any_with(&c, K_STRATEGY, ST_SPLIT));
    free(c.s);
    ops_graph_free(g);

    /* One reduction, read once: no one_pass, no row storage. */
    g = emit_test_make(sum_json, "M=16,N=256", &grp);
    c = (emit_test_list){0};
    kept = kept_count(&grp, &c);
    assert_true(kept > 0);
    assert_false(any_with(&c, K_PASS, PASS_ONE));
    assert_false(any_with(&c, K_STORAGE, STO_REGS));
    free(c.s);
    ops_graph_free(g);

    /* rmsnorm: one reduction, but x is read twice (the sum of squares and the output). */
    g = emit_test_make(rmsnorm_json, "M=8192", &grp);
    c = (emit_test_list){0};
    kept_count(&grp, &c);
    assert_false(any_with(&c, K_PASS, PASS_ONE));
    assert_true(any_with(&c, K_STORAGE, STO_REGS));
    free(c.s);
    ops_graph_free(g);

    /* Strided rows: thread_per_row and lane_per_row kept, vectors not. */
    g = emit_test_make(sum_mid_json, "A=16,B=256,C=256", &grp);
    c = (emit_test_list){0};
    kept_count(&grp, &c);
    assert_true(any_with(&c, K_STRATEGY, ST_THREAD));
    assert_true(any_with(&c, K_STRATEGY, ST_LANE));
    assert_false(any_with(&c, K_VEC, 2));
    free(c.s);
    ops_graph_free(g);
}

static void test_compile_spread(void **state)
{
    (void)state;
    int n = 0;
    const struct {
        const char *json, *shapes;
        int n90, n80;
    } cases[] = {
        {softmax_json, "M=4096,N=8192", 24, 3},
        {layernorm_json, "M=4096", 24, 3},
        {rmsnorm_json, "M=8192", 8, 2},
        {softmax_json, "M=16,N=16384", 8, 1},
        {linear_softmax_json, "M=77,K=100", 8, 1},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        ops_group grp;
        ops_graph *g = emit_test_make(cases[i].json, cases[i].shapes, &grp);
        emit_test_list c = {0};
        kept_count(&grp, &c);
        n += emit_test_compile_spread(&grp, &c, cases[i].n90, "sm_90a", emit_one);
        n += emit_test_compile_spread(&grp, &c, cases[i].n80, "sm_80", emit_one);
        free(c.s);
        ops_graph_free(g);
    }
    print_message("compiled %d row candidates\n", n);
    assert_true(n >= 50);
}

/* Ragged, strided and multi-output groups: a spread of each compiles. */
static void test_ragged(void **state)
{
    (void)state;
    const struct {
        const char *json, *shapes;
        int max;
    } cases[] = {
        {softmax_json, "M=333,N=777", 6},
        {softmax_json, "M=1000,N=1000", 4},
        {layernorm_odd_json, "M=333,N=777", 6},
        {add_rmsnorm_json, "M=7,N=1000", 6},
        {sum_json, "M=16,N=256", 4},
        {sum_mid_json, "A=16,B=256,C=256", 6},
        {softmax_mid_json, "A=3,B=333,C=7", 6},
        {log_softmax_json, "M=5,N=4099", 4},
        {lse_json, "M=5,N=100", 4},
        {stats_json, "M=33,N=65", 4},
        {sum_json, "M=1,N=1", 2},
    };
    int n = 0;
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        ops_group grp;
        ops_graph *g = emit_test_make(cases[i].json, cases[i].shapes, &grp);
        emit_test_list c = {0};
        kept_count(&grp, &c);
        if (c.n == 0)
            fail_msg("%s %s: nothing kept", g->name, cases[i].shapes);
        n += emit_test_compile_spread(&grp, &c, cases[i].max, "sm_90a", emit_one);
        free(c.s);
        ops_graph_free(g);
    }
    assert_true(n >= 30);
}

/* Every strategy, storage and pass of softmax on a ragged shape, one of each. */
static void test_each_strategy(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    ops_graph *g = emit_test_make(softmax_json, "M=37,N=3000", &grp);
    emit_test_list c = {0};
    kept_count(&grp, &c);
    emit_test_list pick = {0};
    bool seen[7][2][3] = {{{false}}};
    for (int i = 0; i < c.n; i++) {
        const int *v = c.s[i].v;
        if (seen[v[K_STRATEGY]][v[K_PASS]][v[K_STORAGE]])
            continue;
        seen[v[K_STRATEGY]][v[K_PASS]][v[K_STORAGE]] = true;
        emit_test_collect(&c.s[i], &pick);
    }
    assert_true(pick.n >= 12);
    emit_test_compile_spread(&grp, &pick, pick.n, "sm_90a", emit_one);
    free(pick.s);
    free(c.s);
    ops_graph_free(g);
}

/* Emits like emit_one and requires the NaN-propagating max (and min, when `min`) of the prelude
 * in the kernels: amax over a row with a NaN is NaN, as in PyTorch. */
static void emit_nan_max(const ops_group *grp, const ops_schedule *s, ops_emitted *e)
{
    emit_one(grp, s, e);
    emit_test_nan_safe(e->source);
    if (!strstr(emit_test_body(e->source), "kt_max("))
        fail_msg("no kt_max in:\n%s", e->source);
}

static void emit_nan_minmax(const ops_group *grp, const ops_schedule *s, ops_emitted *e)
{
    emit_nan_max(grp, s, e);
    if (!strstr(emit_test_body(e->source), "kt_min("))
        fail_msg("no kt_min in:\n%s", e->source);
}

/* Max/min reductions and softmax's row max (the online pair and the two-pass form) in every
 * strategy use kt_max / kt_min, never fmaxf / fminf. */
static void test_nan_reductions(void **state)
{
    (void)state;
    static const struct {
        const char *json, *shapes;
        void (*emit)(const ops_group *, const ops_schedule *, ops_emitted *);
    } cases[] = {
        {minmax_json, "M=37,N=3000", emit_nan_minmax},
        {softmax_json, "M=37,N=3000", emit_nan_max},
        {softmax_mid_json, "A=3,B=333,C=7", emit_nan_max},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        ops_group grp;
        ops_graph *g = emit_test_make(cases[i].json, cases[i].shapes, &grp);
        emit_test_list c = {0}, pick = {0};
        kept_count(&grp, &c);
        bool seen[7][2][3] = {{{false}}};
        for (int k = 0; k < c.n; k++) {
            const int *v = c.s[k].v;
            if (seen[v[K_STRATEGY]][v[K_PASS]][v[K_STORAGE]])
                continue;
            seen[v[K_STRATEGY]][v[K_PASS]][v[K_STORAGE]] = true;
            emit_test_collect(&c.s[k], &pick);
        }
        assert_true(pick.n >= 2);
        /* emitting checks every pick; a few compile */
        for (int k = 0; k < pick.n; k++) {
            ops_emitted e = {0};
            cases[i].emit(&grp, &pick.s[k], &e);
            ops_emitted_free(&e);
        }
        emit_test_compile_spread(&grp, &pick, 4, "sm_90a", cases[i].emit);
        free(pick.s);
        free(c.s);
        ops_graph_free(g);
    }
}

static void test_split_launch(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = emit_test_make(softmax_json, "M=16,N=16384", &grp);
    ops_schedule s = {.family = OPS_FAM_ROW, .v = {ST_SPLIT, 256, 1, PASS_MULTI, STO_REREAD, 4}};
    ops_emitted e = {0};
    emit_one(&grp, &s, &e);
    assert_int_equal(e.n_kernels, 3); /* max partials, sum partials, outputs */
    assert_true(e.workspace_bytes > 0);
    for (int k = 0; k < e.n_kernels; k++) {
        assert_int_equal(e.kernels[k].args[e.kernels[k].n_args - 1].kind, OPS_ARG_WORKSPACE);
        assert_false(e.kernels[k].zero_workspace);
    }
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);

    s.v[K_PASS] = PASS_ONE;
    emit_one(&grp, &s, &e);
    assert_int_equal(e.n_kernels, 2); /* online partials, outputs */
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    ops_graph_free(g);
}

/* lane_per_row: where it is legal, its launch (32 rows per block), every pass and storage of a
 * ragged strided softmax compiled, and a golden source. */
static void test_lane_per_row(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    ops_graph *g = emit_test_make(softmax_json, "M=64,N=1024", &grp);
    ops_schedule s = {.family = OPS_FAM_ROW, .v = {ST_LANE, 256, 1, PASS_MULTI, STO_REREAD, 1}};
    assert_string_equal(ROW->prune(&grp, &s, &dev), "shape"); /* contiguous rows */
    ops_graph_free(g);

    g = emit_test_make(softmax_mid_json, "A=3,B=333,C=7", &grp);
    assert_null(ROW->prune(&grp, &s, &dev));
    s.v[K_ROWS] = 2;
    assert_string_equal(ROW->prune(&grp, &s, &dev), "redundant");
    s.v[K_ROWS] = 1;
    s.v[K_THREADS] = 32;
    assert_string_equal(ROW->prune(&grp, &s, &dev), "redundant"); /* thread_per_row */
    s.v[K_THREADS] = 256;
    s.v[K_VEC] = 2;
    assert_string_equal(ROW->prune(&grp, &s, &dev), "shape");
    s.v[K_VEC] = 1;
    /* every pass and storage: 21 rows, so one block with 11 rows masked */
    emit_test_list pick = {0};
    for (int pass = PASS_MULTI; pass <= PASS_ONE; pass++)
        for (int sto = STO_REGS; sto <= STO_REREAD; sto++) {
            s.v[K_PASS] = pass;
            s.v[K_STORAGE] = sto;
            if (!ROW->prune(&grp, &s, &dev))
                emit_test_collect(&s, &pick);
        }
    assert_int_equal(pick.n, 6);
    emit_test_compile_spread(&grp, &pick, pick.n, "sm_90a", emit_one);
    ops_emitted e = {0};
    emit_one(&grp, &pick.s[0], &e);
    assert_int_equal(e.kernels[0].grid[0], 1);
    assert_int_equal(e.kernels[0].block[0], 256);
    ops_emitted_free(&e);
    free(pick.s);
    ops_graph_free(g);

    g = emit_test_make(sum_mid_json, "A=16,B=256,C=256", &grp);
    s = (ops_schedule){.family = OPS_FAM_ROW, .v = {ST_LANE, 256, 1, PASS_MULTI, STO_REREAD, 1}};
    emit_one(&grp, &s, &e);
    assert_int_equal(e.kernels[0].grid[0], 16 * 256 / 32);
    assert_non_null(strstr(e.source, "const int g = threadIdx.x % 32;"));
    emit_test_golden("row_sum_mid_lane.cu", e.source);
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    ops_graph_free(g);
}

/* split_lane: strided rows only, lane_per_row's layout cut into chunks across blocks (a sum over
 * the first axis into few columns fills the SMs); its launch, a ragged softmax over a middle
 * axis in both passes (rows past the end clamped, outputs guarded) compiled, and a golden. */
static void test_split_lane(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    ops_graph *g = emit_test_make(softmax_json, "M=16,N=16384", &grp);
    ops_schedule s = {.family = OPS_FAM_ROW,
                      .v = {ST_SPLIT_LANE, 256, 1, PASS_MULTI, STO_REREAD, 1}};
    assert_string_equal(ROW->prune(&grp, &s, &dev), "shape"); /* contiguous rows: split_row */
    ops_graph_free(g);

    /* A = 1: a sum over [1, 65536, 64]'s middle axis is a reduction over the first axis of
     * [65536, 64] into 64 columns: two groups of 32 columns, each cut into chunks. */
    g = emit_test_make(sum_mid_json, "A=1,B=65536,C=64", &grp);
    assert_null(ROW->prune(&grp, &s, &dev));
    s.v[K_STORAGE] = STO_REGS;
    assert_string_equal(ROW->prune(&grp, &s, &dev), "redundant");
    s.v[K_STORAGE] = STO_REREAD;
    s.v[K_ROWS] = 2;
    assert_string_equal(ROW->prune(&grp, &s, &dev), "redundant");
    s.v[K_ROWS] = 1;
    ops_emitted e = {0};
    emit_one(&grp, &s, &e);
    assert_int_equal(e.n_kernels, 2); /* partials, then combine and outputs */
    assert_true(e.workspace_bytes > 0);
    /* 2 groups, a wave of 256-thread blocks wanted (8 a SM, 1056): 528 chunks a group, of 125
     * (65536 / 528, rounded up), so 525 */
    assert_int_equal(e.kernels[0].grid[0], 2 * 525);
    assert_int_equal(e.kernels[1].grid[0], 2 * 525);
    assert_int_equal(e.workspace_bytes, 64 * 525 * 4);
    assert_non_null(strstr(e.source, "const int row_raw = (int)(blk / 525) * 32 + g;"));
    /* the second kernel walks the grid backwards (the first one's last chunks are in L2) and
     * its threads fold the partials in parallel */
    assert_non_null(strstr(e.source, "const unsigned blk = gridDim.x - 1 - blockIdx.x"));
    assert_non_null(strstr(e.source, "for (int q = t; q < 525; q += 8) {"));
    assert_non_null(strstr(e.source, "if (t == 0 && row_ok) {"));
    emit_test_golden("row_sum_first_split_lane.cu", e.source);
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    /* Its estimate beats every one-kernel strategy: lane_per_row fills 2 SMs. */
    ops_estimate split_est, lane_est;
    ROW->estimate(&grp, &s, &dev, &split_est);
    s.v[K_STRATEGY] = ST_LANE;
    s.v[K_THREADS] = 1024;
    ROW->estimate(&grp, &s, &dev, &lane_est);
    assert_true(split_est.seconds * 3 < lane_est.seconds);
    ops_graph_free(g);

    /* 21 rows of 333 (a partial group of 32, clamped), both passes, f16: compiled. */
    g = emit_test_make(softmax_mid_json, "A=3,B=333,C=7", &grp);
    emit_test_list pick = {0};
    for (int pass = PASS_MULTI; pass <= PASS_ONE; pass++)
        for (int threads = 64; threads <= 256; threads *= 4) {
            s = (ops_schedule){.family = OPS_FAM_ROW,
                               .v = {ST_SPLIT_LANE, threads, 1, pass, STO_REREAD, 1}};
            if (!ROW->prune(&grp, &s, &dev))
                emit_test_collect(&s, &pick);
        }
    assert_int_equal(pick.n, 4);
    emit_test_compile_spread(&grp, &pick, pick.n, "sm_90a", emit_one);
    emit_one(&grp, &pick.s[0], &e);
    assert_int_equal(e.n_kernels, 3); /* max partials, sum partials, outputs */
    assert_non_null(strstr(e.source, "if (row_ok)"));
    ops_emitted_free(&e);
    free(pick.s);
    ops_graph_free(g);
}

/* rows_per_block with fewer threads than a warp on a row (several rows a warp, reduced by
 * shuffles within aligned groups of tpr lanes): only for short contiguous rows; every pass and
 * storage of a ragged softmax (1001 rows of 64: the last block's rows clamped) and of a
 * layernorm (Welford) compiled, and a golden. */
static void test_sub_warp_rows(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    /* 32 threads, 8 rows: 4 threads a row */
    ops_schedule s = {.family = OPS_FAM_ROW, .v = {ST_ROWS, 32, 8, PASS_MULTI, STO_REREAD, 4}};
    ops_graph *g = emit_test_make(softmax_json, "M=1001,N=4096", &grp);
    assert_string_equal(ROW->prune(&grp, &s, &dev), "threads"); /* a warp a row has work */
    ops_graph_free(g);
    g = emit_test_make(sum_mid_json, "A=16,B=64,C=256", &grp);
    s.v[K_VEC] = 1;
    assert_string_equal(ROW->prune(&grp, &s, &dev), "threads"); /* strided rows */
    ops_graph_free(g);

    g = emit_test_make(softmax_json, "M=1001,N=64", &grp);
    s.v[K_VEC] = 4;
    assert_null(ROW->prune(&grp, &s, &dev));
    emit_test_list pick = {0};
    for (int threads = 32; threads <= 64; threads *= 2)
        for (int pass = PASS_MULTI; pass <= PASS_ONE; pass++)
            for (int sto = STO_REGS; sto <= STO_REREAD; sto++) {
                s = (ops_schedule){.family = OPS_FAM_ROW, .v = {ST_ROWS, threads, 8, pass, sto, 4}};
                if (!ROW->prune(&grp, &s, &dev))
                    emit_test_collect(&s, &pick);
            }
    assert_int_equal(pick.n, 12);
    emit_test_compile_spread(&grp, &pick, pick.n, "sm_90a", emit_one);
    ops_emitted e = {0};
    s = (ops_schedule){.family = OPS_FAM_ROW, .v = {ST_ROWS, 64, 8, PASS_ONE, STO_REGS, 4}};
    emit_one(&grp, &s, &e);
    assert_int_equal(e.kernels[0].grid[0], (1001 + 7) / 8);
    assert_non_null(strstr(e.source, "const int t = threadIdx.x % 8; /* thread in the row */"));
    assert_non_null(strstr(e.source, "for (int off = 4; off > 0; off >>= 1) {"));
    assert_non_null(strstr(e.source, "if (row_ok)")); /* the clamped rows' stores skipped */
    emit_test_golden("row_softmax_short_rows.cu", e.source);
    ops_emitted_free(&e);
    free(pick.s);
    /* the estimate: a warp a row keeps too few bytes in flight on rows of 64 */
    ops_estimate sub, warp;
    ROW->estimate(&grp, &s, &dev, &sub);
    s = (ops_schedule){.family = OPS_FAM_ROW, .v = {ST_WARP, 64, 1, PASS_ONE, STO_REGS, 2}};
    ROW->estimate(&grp, &s, &dev, &warp);
    assert_true(sub.seconds < warp.seconds);
    ops_graph_free(g);

    g = emit_test_make(layernorm_odd_json, "M=333,N=96", &grp);
    pick = (emit_test_list){0};
    for (int pass = PASS_MULTI; pass <= PASS_ONE; pass++) {
        s = (ops_schedule){.family = OPS_FAM_ROW, .v = {ST_ROWS, 64, 4, pass, STO_SHARED, 8}};
        if (!ROW->prune(&grp, &s, &dev))
            emit_test_collect(&s, &pick);
    }
    assert_int_equal(pick.n, 2);
    emit_test_compile_spread(&grp, &pick, pick.n, "sm_90a", emit_one);
    free(pick.s);
    ops_graph_free(g);
}

/* split_cluster: sm_90 only, one kernel without workspace, at most 8 chunks (a portable
 * cluster) per row, and each level's partials combined through the cluster. */
static void test_split_cluster(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    ops_graph *g = emit_test_make(softmax_json, "M=16,N=16384", &grp);
    ops_schedule s = {.family = OPS_FAM_ROW, .v = {ST_CLUSTER, 512, 1, PASS_ONE, STO_REREAD, 4}};
    assert_null(ROW->prune(&grp, &s, &dev));
    ops_device a100 = dev;
    a100.sm_major = 8;
    snprintf(a100.arch, sizeof(a100.arch), "sm_80");
    assert_string_equal(ROW->prune(&grp, &s, &a100), "shape");
    s.v[K_STORAGE] = STO_REGS;
    assert_string_equal(ROW->prune(&grp, &s, &dev), "redundant");
    s.v[K_STORAGE] = STO_REREAD;
    ops_emitted e = {0};
    emit_one(&grp, &s, &e);
    assert_int_equal(e.n_kernels, 1);
    assert_int_equal(e.workspace_bytes, 0);
    assert_int_equal(e.kernels[0].grid[0], 16 * 8); /* 8 chunks of 2048 per row */
    assert_non_null(strstr(e.source, "__cluster_dims__(8, 1, 1)"));
    assert_non_null(strstr(e.source, "kt_ld_cluster(part"));
    /* the cluster helpers come from the device library, not pasted text */
    assert_non_null(strstr(e.source, "#include \"ktune/cluster.cuh\""));
    assert_null(strstr(e.source, "mapa.shared::cluster"));
    assert_true(emit_test_has(e.source, "mapa.shared::cluster.u32"));
    emit_test_golden("row_softmax_split_cluster.cu", e.source);
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    ops_graph_free(g);

    /* Long rows still get 8 chunks at most; two levels (layernorm's mean, then variance) each
     * meet in the cluster; ragged chunks compile. */
    g = emit_test_make(layernorm_odd_json, "M=3,N=100001", &grp);
    s = (ops_schedule){.family = OPS_FAM_ROW, .v = {ST_CLUSTER, 256, 1, PASS_MULTI, STO_REREAD, 1}};
    assert_null(ROW->prune(&grp, &s, &dev));
    emit_one(&grp, &s, &e);
    assert_int_equal(e.kernels[0].grid[0], 3 * 8);
    assert_non_null(strstr(e.source, "level 2: combine the 8 partials"));
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    ops_graph_free(g);
}

static void test_golden(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = emit_test_make(layernorm_json, "M=333", &grp);
    ops_schedule s = {.family = OPS_FAM_ROW, .v = {ST_ROWS, 512, 2, PASS_ONE, STO_REGS, 4}};
    ops_emitted e = {0};
    emit_one(&grp, &s, &e);
    emit_test_golden("row_layernorm.cu", e.source);
    emit_test_compile(e.source, "sm_90a");
    assert_int_equal(e.kernels[0].grid[0], (333 + 1) / 2);
    assert_int_equal(e.kernels[0].block[0], 512);
    ops_emitted_free(&e);
    ops_graph_free(g);

    /* One sum over whole warps (rmsnorm, warp_per_row) is the device library's kt_warp_sum,
     * not a pasted shuffle loop; a max keeps the shuffle tree (kt_max propagates NaN). */
    ops_device dev;
    ops_device_h100(&dev);
    g = emit_test_make(rmsnorm_json, "M=8192", &grp);
    s = (ops_schedule){.family = OPS_FAM_ROW, .v = {ST_WARP, 64, 8, PASS_MULTI, STO_SHARED, 8}};
    assert_null(ROW->prune(&grp, &s, &dev));
    emit_one(&grp, &s, &e);
    emit_test_golden("row_rmsnorm_warp.cu", e.source);
    assert_non_null(strstr(e.source, "#include \"ktune/reduce.cuh\""));
    assert_non_null(strstr(emit_test_body(e.source), " = kt_warp_sum(a"));
    assert_null(strstr(emit_test_body(e.source), "__shfl_xor_sync"));
    assert_true(emit_test_has(e.source, "__shfl_xor_sync(0xffffffffu, v, o, WIDTH)"));
    emit_test_compile(e.source, "sm_90a");
    emit_test_compile(e.source, "sm_80");
    ops_emitted_free(&e);
    ops_graph_free(g);
    g = emit_test_make(minmax_json, "M=37,N=3000", &grp);
    s = (ops_schedule){.family = OPS_FAM_ROW, .v = {ST_WARP, 256, 1, PASS_MULTI, STO_REREAD, 4}};
    assert_null(ROW->prune(&grp, &s, &dev));
    emit_one(&grp, &s, &e);
    assert_null(strstr(e.source, "ktune/reduce.cuh"));
    assert_non_null(strstr(emit_test_body(e.source), "__shfl_xor_sync"));
    ops_emitted_free(&e);
    ops_graph_free(g);
}

static double est(const ops_group *grp, int strategy, int threads, int pass, int storage, int vec)
{
    ops_device dev;
    ops_device_h100(&dev);
    ops_schedule s = {.family = OPS_FAM_ROW, .v = {strategy, threads, 1, pass, storage, vec}};
    ops_estimate e;
    ROW->estimate(grp, &s, &dev, &e);
    assert_true(e.seconds > 0);
    return e.seconds;
}

static void test_estimate(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = emit_test_make(softmax_json, "M=16,N=16384", &grp);
    double split = est(&grp, ST_SPLIT, 256, PASS_ONE, STO_REREAD, 4);
    double block = est(&grp, ST_BLOCK, 1024, PASS_ONE, STO_REGS, 4);
    double block_rr = est(&grp, ST_BLOCK, 1024, PASS_ONE, STO_REREAD, 4);
    print_message("16x16384: split %.2f us, block_per_row %.2f / %.2f us\n", split * 1e6,
                  block * 1e6, block_rr * 1e6);
    assert_true(split < block);
    assert_true(split < block_rr);
    ops_graph_free(g);

    g = emit_test_make(softmax_json, "M=4096,N=8192", &grp);
    split = est(&grp, ST_SPLIT, 256, PASS_ONE, STO_REREAD, 4);
    block = est(&grp, ST_BLOCK, 256, PASS_ONE, STO_REGS, 4);
    double scalar = est(&grp, ST_BLOCK, 256, PASS_ONE, STO_REGS, 1);
    double multi = est(&grp, ST_BLOCK, 256, PASS_MULTI, STO_REREAD, 4);
    print_message("4096x8192: split %.2f us, block_per_row %.2f us (vec 1: %.2f, multi re-read "
                  "%.2f)\n",
                  split * 1e6, block * 1e6, scalar * 1e6, multi * 1e6);
    assert_true(block < split);
    assert_true(block <= scalar);
    assert_true(block < multi);
    /* about the roofline: 2 x 128 MiB in and out at 3 TB/s is ~90 us */
    assert_true(block > 85e-6 && block < 200e-6);
    ops_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches),        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_estimate),       cmocka_unit_test(test_golden),
        cmocka_unit_test(test_lane_per_row),   cmocka_unit_test(test_split_cluster),
        cmocka_unit_test(test_split_lane),
        cmocka_unit_test(test_sub_warp_rows),
        cmocka_unit_test(test_split_launch),   cmocka_unit_test(test_each_strategy),
        cmocka_unit_test(test_ragged),         cmocka_unit_test(test_compile_spread),
        cmocka_unit_test(test_nan_reductions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
