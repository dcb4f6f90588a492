/* The gemm family: which groups it matches, how many schedules survive pruning, that a spread of
 * kept candidates compiles for sm_90a (and sm_80) without spills, ragged shapes, the golden
 * source of one schedule, the cost model's ordering, and the index math the kernels rely on
 * (raster bijection, shared-memory swizzle, ldmatrix/mma fragment maps), all without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/unit/emit_test_util.h"

#include <math.h>

/* Index math exported by ops/gemm/plan.c for these tests. */
#include "ops/emit_gemm.h"

extern const ops_family ops_family_gemm;

/* Knob order of the family (values, not indices). */
enum { MATH, BM, BN, BK, WM, WN, STAGES, SPLITK, RASTER, SMEM, SPLITK_MODE, MMA, MCAST, STORE };
enum { DIRECT = 0, TMA = 1 };
enum { FFMA = 0, TF32 = 1, F16 = 2, BF16 = 3, TF32X3 = 4 };
enum { PAD = 0, XOR = 1 };
enum { PARALLEL = 0, SERIAL = 1, CLUSTER = 2, STREAM = 3 };
enum { SYNC = 0, WGMMA = 1, WGMMA_SPLIT = 2, PINGPONG = 3 };

static const char gemm_bias_relu[] =
    "{\"name\": \"gemm_bias_relu\", \"inputs\": {"
    "\"A\": {\"dtype\": \"f16\", \"shape\": [\"M\", 512]},"
    "\"W\": {\"dtype\": \"f16\", \"shape\": [512, 256], \"const\": true},"
    "\"bias\": {\"dtype\": \"f16\", \"shape\": [256], \"const\": true}},"
    "\"nodes\": [{\"out\": \"t0\", \"op\": \"matmul\", \"in\": [\"A\", \"W\"]},"
    "{\"out\": \"t1\", \"op\": \"add\", \"in\": [\"t0\", \"bias\"]},"
    "{\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"t1\"]}],"
    "\"outputs\": [\"Y\"]}";

/* A plain matmul of dtype DT, [M, K] x [K, N]. */
static char *plain_gemm(const char *dt)
{
    char *s = NULL;
    int n = asprintf(&s,
                     "{\"name\": \"gemm\", \"inputs\": {"
                     "\"A\": {\"dtype\": \"%s\", \"shape\": [\"M\", \"K\"]},"
                     "\"B\": {\"dtype\": \"%s\", \"shape\": [\"K\", \"N\"]}},"
                     "\"nodes\": [{\"out\": \"Y\", \"op\": \"matmul\", \"in\": [\"A\", \"B\"]}],"
                     "\"outputs\": [\"Y\"]}",
                     dt, dt);
    assert_true(n > 0);
    return s;
}

/* A dual group, SwiGLU's up-projection: silu(x Wg) * (x Wu) (+ bias on the first when bias),
 * the weights [N][K] (transpose_b, as nn.Linear stores them) when tb, else [K][N]; x is batched
 * [2] when batched. */
static char *swiglu16(const char *dt, bool tb, bool bias, bool batched)
{
    char *s = NULL;
    const char *w = tb ? "\"N\", \"K\"" : "\"K\", \"N\"";
    int n = asprintf(
        &s,
        "{\"name\": \"swiglu\", \"inputs\": {"
        "\"x\": {\"dtype\": \"%s\", \"shape\": [%s\"M\", \"K\"]},"
        "\"Wg\": {\"dtype\": \"%s\", \"shape\": [%s], \"const\": true},"
        "\"Wu\": {\"dtype\": \"%s\", \"shape\": [%s], \"const\": true}%s%s%s},"
        "\"nodes\": [{\"out\": \"g\", \"op\": \"matmul\", \"in\": [\"x\", \"Wg\"], "
        "\"transpose_b\": %s},"
        "{\"out\": \"u\", \"op\": \"matmul\", \"in\": [\"x\", \"Wu\"], \"transpose_b\": %s},"
        "{\"out\": \"gb\", \"op\": \"%s\", \"in\": [\"g\", %s]},"
        "{\"out\": \"s\", \"op\": \"silu\", \"in\": [\"gb\"]},"
        "{\"out\": \"Y\", \"op\": \"mul\", \"in\": [\"s\", \"u\"]}],"
        "\"outputs\": [\"Y\"]}",
        dt, batched ? "2, " : "", dt, w, dt, w, bias ? ", \"bg\": {\"dtype\": \"" : "",
        bias ? dt : "", bias ? "\", \"shape\": [\"N\"], \"const\": true}" : "",
        tb ? "true" : "false", tb ? "true" : "false", bias ? "add" : "mul",
        bias ? "\"bg\"" : "1.0");
    assert_true(n > 0);
    return s;
}

/* A rich group: f32 A cast to DT (prologue), B (transposed when tb), batched with a broadcast
 * batch dim on B, bias, gelu, residual add, scale, cast to f32. */
static char *rich_gemm(const char *dt, bool ta, bool tb)
{
    char *s = NULL;
    int n = asprintf(
        &s,
        "{\"name\": \"rich\", \"inputs\": {"
        "\"A\": {\"dtype\": \"f32\", \"shape\": [2, %s]},"
        "\"B\": {\"dtype\": \"%s\", \"shape\": [1, %s]},"
        "\"bias\": {\"dtype\": \"%s\", \"shape\": [\"N\"]},"
        "\"R\": {\"dtype\": \"%s\", \"shape\": [2, \"M\", \"N\"]}},"
        "\"nodes\": [{\"out\": \"a16\", \"op\": \"cast\", \"in\": [\"A\"], \"dtype\": \"%s\"},"
        "{\"out\": \"t0\", \"op\": \"matmul\", \"in\": [\"a16\", \"B\"], \"transpose_a\": %s, "
        "\"transpose_b\": %s},"
        "{\"out\": \"t1\", \"op\": \"add\", \"in\": [\"t0\", \"bias\"]},"
        "{\"out\": \"t2\", \"op\": \"gelu\", \"in\": [\"t1\"]},"
        "{\"out\": \"t3\", \"op\": \"add\", \"in\": [\"t2\", \"R\"]},"
        "{\"out\": \"t4\", \"op\": \"mul\", \"in\": [\"t3\", 0.5]},"
        "{\"out\": \"Y\", \"op\": \"cast\", \"in\": [\"t4\"], \"dtype\": \"f32\"}],"
        "\"outputs\": [\"Y\"]}",
        ta ? "\"K\", \"M\"" : "\"M\", \"K\"", dt, tb ? "\"N\", \"K\"" : "\"K\", \"N\"", dt, dt, dt,
        ta ? "true" : "false", tb ? "true" : "false");
    assert_true(n > 0);
    return s;
}

static void group_of(const ops_graph *g, uint64_t mask, ops_group *grp)
{
    ops_diag d = {0};
    if (ops_group_init(grp, g, mask, &d) < 0)
        fail_msg("group: %s", d.msg);
}

static ops_schedule sched(int math, int bm, int bn, int bk, int wm, int wn, int stages, int splitk,
                          int raster, int smem)
{
    ops_schedule s = {.family = OPS_FAM_GEMM};
    int v[] = {math, bm, bn, bk, wm, wn, stages, splitk, raster, smem, PARALLEL, SYNC, 1};
    memcpy(s.v, v, sizeof(v));
    return s;
}

/* The same with serial split-K. */
static ops_schedule serial(ops_schedule s)
{
    s.v[SPLITK_MODE] = SERIAL;
    return s;
}

/* ---- matches ---- */

static bool matches_json(const char *json, const char *shapes, uint64_t mask)
{
    ops_graph *g = emit_test_graph(json, shapes);
    ops_group grp;
    group_of(g, mask ? mask : (1ull << g->n_nodes) - 1, &grp);
    bool m = ops_family_gemm.matches(&grp);
    ops_graph_free(g);
    return m;
}

static void test_matches(void **state)
{
    (void)state;
    /* node order in gemm_bias_relu: 0 matmul, 1 add, 2 relu */
    assert_true(matches_json(gemm_bias_relu, "M=1024", 0x7));
    assert_true(matches_json(gemm_bias_relu, "M=1024", 0x1));
    assert_true(matches_json(gemm_bias_relu, "M=1024", 0x3));
    assert_false(matches_json(gemm_bias_relu, "M=1024", 0x6)); /* no matmul */
    assert_false(matches_json(gemm_bias_relu, "M=1024", 0x4));
    assert_false(matches_json(gemm_bias_relu, "M=1024", 0x5)); /* t0 and Y both leave the group */

    char *rich = rich_gemm("f16", false, true);
    assert_true(matches_json(rich, "M=64,N=48,K=32", 0));
    assert_false(matches_json(rich, "M=64,N=48,K=32", 0x1)); /* the cast alone */
    assert_true(matches_json(rich, "M=64,N=48,K=32", 0x3));  /* cast + matmul */
    assert_true(matches_json(rich, "M=64,N=48,K=32", 0x2));  /* matmul reading the cast */
    free(rich);

    /* An epilogue reading the prologue cast's output is not a gemm epilogue. */
    static const char reads_cast[] =
        "{\"name\": \"x\", \"inputs\": {"
        "\"A\": {\"dtype\": \"f32\", \"shape\": [16, 16]},"
        "\"B\": {\"dtype\": \"f16\", \"shape\": [16, 16]}},"
        "\"nodes\": [{\"out\": \"a\", \"op\": \"cast\", \"in\": [\"A\"], \"dtype\": \"f16\"},"
        "{\"out\": \"t\", \"op\": \"matmul\", \"in\": [\"a\", \"B\"]},"
        "{\"out\": \"Y\", \"op\": \"add\", \"in\": [\"t\", \"a\"]}],"
        "\"outputs\": [\"Y\"]}";
    assert_false(matches_json(reads_cast, "", 0));
    assert_true(matches_json(reads_cast, "", 0x2));

    /* A reduction after the matmul, two matmuls, an epilogue changing the shape. */
    static const char reduce_after[] =
        "{\"name\": \"x\", \"inputs\": {"
        "\"A\": {\"dtype\": \"f16\", \"shape\": [16, 16]},"
        "\"B\": {\"dtype\": \"f16\", \"shape\": [16, 16]}},"
        "\"nodes\": [{\"out\": \"t\", \"op\": \"matmul\", \"in\": [\"A\", \"B\"]},"
        "{\"out\": \"Y\", \"op\": \"sum\", \"in\": [\"t\"], \"axes\": [1]}],"
        "\"outputs\": [\"Y\"]}";
    assert_false(matches_json(reduce_after, "", 0));
    static const char two_mm[] =
        "{\"name\": \"x\", \"inputs\": {"
        "\"A\": {\"dtype\": \"f16\", \"shape\": [16, 16]},"
        "\"B\": {\"dtype\": \"f16\", \"shape\": [16, 16]}},"
        "\"nodes\": [{\"out\": \"t\", \"op\": \"matmul\", \"in\": [\"A\", \"B\"]},"
        "{\"out\": \"Y\", \"op\": \"matmul\", \"in\": [\"t\", \"B\"]}],"
        "\"outputs\": [\"Y\"]}";
    assert_false(matches_json(two_mm, "", 0));
    assert_true(matches_json(two_mm, "", 0x1));
    /* Two matmuls of one A whose results meet (a dual group, SwiGLU): nodes 0 g, 1 u, 2 gb,
     * 3 s, 4 Y. */
    char *sw = swiglu16("bf16", true, true, false);
    assert_true(matches_json(sw, "M=64,N=48,K=32", 0x1f));
    assert_true(matches_json(sw, "M=64,N=48,K=32", 0x0d));  /* g, gb, s: one matmul's chain */
    assert_false(matches_json(sw, "M=64,N=48,K=32", 0x03)); /* the pair alone: two outputs */
    assert_false(matches_json(sw, "M=64,N=48,K=32", 0x1b)); /* Y without s's silu */
    free(sw);
    /* different A, or B2 not of B's shape: no dual */
    static const char two_a[] =
        "{\"name\": \"x\", \"inputs\": {"
        "\"A\": {\"dtype\": \"f16\", \"shape\": [16, 16]},"
        "\"A2\": {\"dtype\": \"f16\", \"shape\": [16, 16]},"
        "\"B\": {\"dtype\": \"f16\", \"shape\": [16, 16]}},"
        "\"nodes\": [{\"out\": \"t\", \"op\": \"matmul\", \"in\": [\"A\", \"B\"]},"
        "{\"out\": \"u\", \"op\": \"matmul\", \"in\": [\"A2\", \"B\"]},"
        "{\"out\": \"Y\", \"op\": \"mul\", \"in\": [\"t\", \"u\"]}],"
        "\"outputs\": [\"Y\"]}";
    assert_false(matches_json(two_a, "", 0));
    static const char two_b[] =
        "{\"name\": \"x\", \"inputs\": {"
        "\"A\": {\"dtype\": \"f16\", \"shape\": [16, 16]},"
        "\"B\": {\"dtype\": \"f16\", \"shape\": [16, 16]},"
        "\"B2\": {\"dtype\": \"f16\", \"shape\": [16, 1]}},"
        "\"nodes\": [{\"out\": \"t\", \"op\": \"matmul\", \"in\": [\"A\", \"B\"]},"
        "{\"out\": \"u\", \"op\": \"matmul\", \"in\": [\"A\", \"B2\"]},"
        "{\"out\": \"Y\", \"op\": \"mul\", \"in\": [\"t\", \"u\"]}],"
        "\"outputs\": [\"Y\"]}";
    assert_false(matches_json(two_b, "", 0));
    static const char bcast_up[] =
        "{\"name\": \"x\", \"inputs\": {"
        "\"A\": {\"dtype\": \"f16\", \"shape\": [16, 16]},"
        "\"B\": {\"dtype\": \"f16\", \"shape\": [16, 16]},"
        "\"C\": {\"dtype\": \"f16\", \"shape\": [3, 16, 16]}},"
        "\"nodes\": [{\"out\": \"t\", \"op\": \"matmul\", \"in\": [\"A\", \"B\"]},"
        "{\"out\": \"Y\", \"op\": \"add\", \"in\": [\"t\", \"C\"]}],"
        "\"outputs\": [\"Y\"]}";
    assert_false(matches_json(bcast_up, "", 0)); /* the add grows the output */
}

/* ---- counts ---- */

static int count_cb(const ops_schedule *s, void *ctx)
{
    (void)s;
    (*(int *)ctx)++;
    return 0;
}

static int64_t kept(const ops_graph *g, uint64_t mask, ops_precision prec)
{
    ops_group grp;
    group_of(g, mask, &grp);
    grp.precision = prec;
    ops_device dev;
    ops_device_h100(&dev);
    assert_true(ops_family_gemm.matches(&grp));
    ops_prune_counts pc;
    int n = 0;
    assert_int_equal(ops_family_enumerate(&ops_family_gemm, &grp, &dev, count_cb, &n, &pc), 0);
    assert_int_equal(pc.kept, n);
    return pc.kept;
}

typedef struct math_tally {
    int per_math[5];
} math_tally;

static int tally_cb(const ops_schedule *s, void *ctx)
{
    ((math_tally *)ctx)->per_math[s->v[MATH]]++;
    return 0;
}

static math_tally tally(const ops_graph *g, ops_precision prec)
{
    ops_group grp;
    emit_test_whole_group(g, &grp);
    grp.precision = prec;
    ops_device dev;
    ops_device_h100(&dev);
    math_tally t = {{0}};
    assert_int_equal(ops_family_enumerate(&ops_family_gemm, &grp, &dev, tally_cb, &t, NULL), 0);
    return t;
}

static void test_counts(void **state)
{
    (void)state;
    ops_graph *g = emit_test_graph(gemm_bias_relu, "M=1024");
    int64_t fused = kept(g, 0x7, OPS_PREC_EXACT);
    int64_t mm = kept(g, 0x1, OPS_PREC_EXACT);
    int64_t mm_add = kept(g, 0x3, OPS_PREC_EXACT);
    print_message("gemm_bias_relu M=1024: fused %lld, matmul %lld, matmul+add %lld\n",
                  (long long)fused, (long long)mm, (long long)mm_add);
    assert_true(fused >= 250);
    assert_true(fused + mm + mm_add >= 500);
    math_tally t = tally(g, OPS_PREC_EXACT);
    assert_int_equal(t.per_math[F16], fused); /* f16 data: f16 tensor cores only */
    assert_int_equal(t.per_math[TF32X3], 0);
    ops_graph_free(g);

    char *json = plain_gemm("bf16");
    g = emit_test_graph(json, "M=4096,N=4096,K=4096");
    t = tally(g, OPS_PREC_EXACT);
    print_message("bf16 4096^3: bf16 %d\n", t.per_math[BF16]);
    assert_true(t.per_math[BF16] >= 250);
    assert_int_equal(t.per_math[FFMA] + t.per_math[TF32] + t.per_math[F16] + t.per_math[TF32X3], 0);
    ops_graph_free(g);
    free(json);

    json = plain_gemm("f32");
    g = emit_test_graph(json, "M=1024,N=1024,K=1024");
    t = tally(g, OPS_PREC_EXACT);
    print_message("f32 1024^3 exact: ffma %d tf32x3 %d\n", t.per_math[FFMA], t.per_math[TF32X3]);
    assert_true(t.per_math[FFMA] >= 50);
    /* the error-compensated tf32 path keeps fp32-level accuracy: searched under exact too */
    assert_true(t.per_math[TF32X3] >= 50);
    assert_int_equal(t.per_math[TF32] + t.per_math[F16] + t.per_math[BF16], 0);
    t = tally(g, OPS_PREC_TF32);
    print_message("f32 1024^3 tf32: ffma %d tf32 %d\n", t.per_math[FFMA], t.per_math[TF32]);
    assert_true(t.per_math[FFMA] >= 50 && t.per_math[TF32] >= 50);
    assert_int_equal(t.per_math[F16] + t.per_math[BF16], 0);
    t = tally(g, OPS_PREC_REDUCED);
    assert_true(t.per_math[F16] > 0 && t.per_math[BF16] > 0);
    ops_graph_free(g);
    free(json);
}

/* ---- the prefix skip: enumeration equals prune() over the whole product ---- */

/* Every schedule of the product, in enumeration order, judged by prune() alone. */
static void brute_force(const ops_group *grp, const ops_device *dev, emit_test_list *l,
                        int64_t *total)
{
    const ops_family *f = &ops_family_gemm;
    int idx[OPS_MAX_KNOBS] = {0};
    *total = 0;
    for (;;) {
        ops_schedule s = {.family = f->id};
        for (int k = 0; k < f->n_knobs; k++)
            s.v[k] = f->knobs[k].values[idx[k]];
        ++*total;
        if (!f->prune(grp, &s, dev))
            emit_test_collect(&s, l);
        int k = f->n_knobs - 1;
        while (k >= 0 && ++idx[k] == f->knobs[k].n_values)
            idx[k--] = 0;
        if (k < 0)
            return;
    }
}

static void check_prefix_skip(const char *json, const char *shapes, ops_precision prec,
                              const ops_device *dev)
{
    ops_graph *g = emit_test_graph(json, shapes);
    ops_group grp;
    emit_test_whole_group(g, &grp);
    grp.precision = prec;
    emit_test_list fast = {0}, slow = {0};
    ops_prune_counts pc;
    int64_t total;
    assert_int_equal(
        ops_family_enumerate(&ops_family_gemm, &grp, dev, emit_test_collect, &fast, &pc), 0);
    brute_force(&grp, dev, &slow, &total);
    int64_t counted = pc.kept;
    for (int i = 0; i < pc.n_reasons; i++)
        counted += pc.reasons[i].count;
    print_message("%s %s (%s, sm_%d%d): %d kept of %lld\n", g->name, shapes,
                  ops_precision_name(prec), dev->sm_major, dev->sm_minor, fast.n, (long long)total);
    assert_int_equal(counted, total);
    assert_int_equal(fast.n, slow.n);
    assert_int_equal(pc.kept, slow.n);
    assert_memory_equal(fast.s, slow.s, (size_t)fast.n * sizeof(*fast.s));
    free(fast.s);
    free(slow.s);
    ops_graph_free(g);
}

static void test_prefix_skip(void **state)
{
    (void)state;
    ops_device h100, a100;
    ops_device_h100(&h100);
    a100 = h100;
    a100.sm_major = 8;
    char *f32 = plain_gemm("f32"), *f16 = plain_gemm("f16"), *rich = rich_gemm("bf16", true, true);
    check_prefix_skip(gemm_bias_relu, "M=16", OPS_PREC_EXACT, &h100);
    check_prefix_skip(f32, "M=2048,N=2048,K=2048", OPS_PREC_EXACT, &h100); /* wgmma too */
    check_prefix_skip(f32, "M=300,N=72,K=4096", OPS_PREC_EXACT, &a100);
    check_prefix_skip(f16, "M=1760,N=128,K=1760", OPS_PREC_EXACT, &h100);
    check_prefix_skip(rich, "M=96,N=256,K=64", OPS_PREC_REDUCED, &h100);
    free(f32);
    free(f16);
    free(rich);
}

/* ---- compiling ---- */

/* Emits `want` schedules spread evenly over the kept list of grp and submits them to pool;
 * returns how many were submitted. */
static int submit_spread(srch_pool *pool, const ops_group *grp, int want, uint64_t tag0,
                         char **sources)
{
    ops_device dev;
    ops_device_h100(&dev);
    emit_test_list l = {0};
    assert_int_equal(ops_family_enumerate(&ops_family_gemm, grp, &dev, emit_test_collect, &l, NULL),
                     0);
    assert_true(l.n > 0);
    int n = want < l.n ? want : l.n;
    for (int i = 0; i < n; i++) {
        const ops_schedule *s = &l.s[(int64_t)i * l.n / n];
        ops_emitted em;
        ops_diag d = {0};
        if (ops_family_gemm.emit(grp, s, &dev, &em, &d) < 0)
            fail_msg("emit: %s", d.msg);
        assert_int_equal(srch_pool_submit(pool, em.source, tag0 + (uint64_t)i), 0);
        sources[tag0 + (uint64_t)i] = em.source;
        em.source = NULL;
        ops_emitted_free(&em);
    }
    free(l.s);
    return n;
}

/* Waits for n results; fails on any compile error or spill. */
static void drain(srch_pool *pool, int n, char **sources)
{
    for (int i = 0; i < n; i++) {
        srch_compile_result r = {0};
        kt_err err = {0};
        assert_int_equal(srch_pool_next(pool, &r, &err), 0);
        if (r.status != SRCH_COMPILE_OK)
            fail_msg("candidate %llu: %s\n%s\n---- source ----\n%s", (unsigned long long)r.tag,
                     srch_status_name(r.status), r.log, sources[r.tag]);
        for (int k = 0; k < r.n_kernels; k++)
            if (r.kernels[k].spill_store_bytes || r.kernels[k].spill_load_bytes)
                fail_msg("candidate %llu: %s spills %d/%d bytes (%d registers)\n%s",
                         (unsigned long long)r.tag, r.kernels[k].name,
                         r.kernels[k].spill_store_bytes, r.kernels[k].spill_load_bytes,
                         r.kernels[k].registers, sources[r.tag]);
        srch_compile_result_release(&r);
    }
}

#define MAX_SOURCES 512

static void test_compile_spread_sm90(void **state)
{
    (void)state;
    srch_pool *pool = NULL;
    srch_pool_opts o = {.arch = "sm_90a", .jobs = 2, .timeout_s = 120};
    kt_err err = {0};
    assert_int_equal(srch_pool_new(&o, &pool, &err), 0);
    char **sources = calloc(MAX_SOURCES, sizeof(char *));
    int n = 0;

    ops_graph *g1 = emit_test_graph(gemm_bias_relu, "M=1024");
    ops_group grp;
    emit_test_whole_group(g1, &grp);
    n += submit_spread(pool, &grp, 24, (uint64_t)n, sources);

    char *json = plain_gemm("bf16");
    ops_graph *g2 = emit_test_graph(json, "M=4096,N=4096,K=4096");
    free(json);
    emit_test_whole_group(g2, &grp);
    n += submit_spread(pool, &grp, 12, (uint64_t)n, sources);

    json = plain_gemm("f32");
    ops_graph *g3 = emit_test_graph(json, "M=1024,N=1024,K=1024");
    free(json);
    emit_test_whole_group(g3, &grp);
    n += submit_spread(pool, &grp, 8, (uint64_t)n, sources);
    grp.precision = OPS_PREC_TF32;
    ops_device dev;
    ops_device_h100(&dev);
    /* the tf32 share of the space */
    emit_test_list l = {0};
    assert_int_equal(
        ops_family_enumerate(&ops_family_gemm, &grp, &dev, emit_test_collect, &l, NULL), 0);
    int tf = 0, x3 = 0; /* up to 5 of each tf32 path */
    for (int i = 0; i < l.n && tf + x3 < 10; i += 7) {
        int m = l.s[i].v[MATH];
        if (!(m == TF32 && tf < 5) && !(m == TF32X3 && x3 < 5))
            continue;
        x3 += m == TF32X3;
        tf += m == TF32;
        ops_emitted em;
        ops_diag d = {0};
        if (ops_family_gemm.emit(&grp, &l.s[i], &dev, &em, &d) < 0)
            fail_msg("emit: %s", d.msg);
        assert_int_equal(srch_pool_submit(pool, em.source, (uint64_t)n), 0);
        sources[n++] = em.source;
        em.source = NULL;
        ops_emitted_free(&em);
    }
    free(l.s);

    print_message("compiling %d gemm candidates for sm_90a\n", n);
    assert_true(n >= 50);
    drain(pool, n, sources);
    srch_pool_free(pool);
    for (int i = 0; i < n; i++)
        free(sources[i]);
    free(sources);
    ops_graph_free(g1);
    ops_graph_free(g2);
    ops_graph_free(g3);
}

static void emit_compile(const ops_graph *g, ops_precision prec, ops_schedule s, const char *arch)
{
    ops_group grp;
    emit_test_whole_group(g, &grp);
    grp.precision = prec;
    ops_device dev;
    ops_device_h100(&dev);
    const char *why = ops_family_gemm.prune(&grp, &s, &dev);
    char buf[256];
    ops_schedule_format(&s, buf, sizeof(buf));
    if (why)
        fail_msg("%s pruned (%s)", buf, why);
    ops_emitted em;
    ops_diag d = {0};
    if (ops_family_gemm.emit(&grp, &s, &dev, &em, &d) < 0)
        fail_msg("emit %s: %s", buf, d.msg);
    emit_test_compile(em.source, arch);
    ops_emitted_free(&em);
}

/* Ragged shapes, transposes, prologue casts, broadcast batches and odd leading dimensions. */
static void test_compile_ragged(void **state)
{
    (void)state;
    srch_pool *pool = NULL;
    srch_pool_opts o = {.arch = "sm_90a", .jobs = 2, .timeout_s = 120};
    kt_err err = {0};
    assert_int_equal(srch_pool_new(&o, &pool, &err), 0);
    char **sources = calloc(MAX_SOURCES, sizeof(char *));
    int n = 0;
    ops_device dev;
    ops_device_h100(&dev);
    struct {
        char *json;
        const char *shape;
        ops_precision prec;
        ops_schedule s;
    } cases[] = {
        {plain_gemm("f16"), "M=1000,N=1000,K=1000", OPS_PREC_EXACT,
         sched(F16, 64, 64, 32, 2, 2, 3, 1, 4, XOR)},
        {plain_gemm("f16"), "M=1000,N=1000,K=100", OPS_PREC_EXACT,
         sched(F16, 64, 128, 64, 2, 2, 2, 1, 1, PAD)},
        {plain_gemm("f16"), "M=333,N=777,K=1000", OPS_PREC_EXACT, /* N odd: 2-byte rows of B */
         sched(F16, 64, 64, 32, 2, 4, 3, 1, 1, XOR)},
        {plain_gemm("f16"), "M=333,N=778,K=999", OPS_PREC_EXACT, /* K odd: A rows misaligned */
         sched(F16, 64, 64, 32, 2, 4, 3, 2, 1, PAD)},
        {plain_gemm("f32"), "M=1000,N=1000,K=1000", OPS_PREC_EXACT,
         sched(FFMA, 64, 64, 16, 2, 2, 3, 1, 4, PAD)},
        {plain_gemm("f32"), "M=1000,N=1000,K=1000", OPS_PREC_TF32,
         sched(TF32, 128, 128, 16, 2, 2, 3, 1, 1, XOR)},
        {plain_gemm("f32"), "M=333,N=777,K=1001", OPS_PREC_TF32,
         sched(TF32, 64, 64, 16, 2, 2, 3, 1, 1, PAD)},
        {plain_gemm("f32"), "M=333,N=777,K=1001", OPS_PREC_EXACT,
         sched(FFMA, 64, 64, 8, 2, 2, 2, 1, 1, PAD)},
        {plain_gemm("f32"), "M=1000,N=1000,K=1000", OPS_PREC_REDUCED,
         sched(BF16, 128, 64, 32, 2, 2, 3, 1, 1, XOR)},
        {plain_gemm("bf16"), "M=1000,N=1000,K=1000", OPS_PREC_EXACT,
         sched(BF16, 128, 256, 32, 2, 4, 3, 1, 1, XOR)},
        {rich_gemm("f16", false, false), "M=333,N=200,K=96", OPS_PREC_EXACT,
         sched(F16, 64, 64, 32, 2, 2, 3, 1, 1, XOR)},
        {rich_gemm("f16", true, true), "M=333,N=200,K=96", OPS_PREC_EXACT,
         sched(F16, 64, 64, 32, 2, 4, 3, 1, 1, PAD)},
        {rich_gemm("bf16", true, false), "M=100,N=72,K=40", OPS_PREC_EXACT,
         sched(BF16, 32, 32, 16, 1, 2, 2, 1, 1, XOR)},
        {rich_gemm("f32", true, true), "M=100,N=72,K=40", OPS_PREC_TF32,
         sched(TF32, 32, 32, 16, 2, 1, 2, 1, 1, PAD)},
        {rich_gemm("f32", false, true), "M=100,N=72,K=40", OPS_PREC_EXACT,
         sched(FFMA, 32, 64, 8, 1, 2, 2, 1, 1, PAD)},
        {rich_gemm("f32", true, false), "M=100,N=72,K=41", OPS_PREC_EXACT,
         sched(FFMA, 32, 32, 8, 1, 1, 2, 1, 1, PAD)},
        /* serial split-K: ragged tiles, odd N, batches, FFMA */
        {plain_gemm("f16"), "M=100,N=201,K=3000", OPS_PREC_EXACT,
         serial(sched(F16, 64, 64, 32, 2, 4, 3, 4, 1, XOR))},
        {rich_gemm("f16", true, true), "M=100,N=72,K=1000", OPS_PREC_EXACT,
         serial(sched(F16, 32, 32, 32, 1, 2, 3, 4, 1, PAD))},
        {plain_gemm("f32"), "M=33,N=77,K=2001", OPS_PREC_EXACT,
         serial(sched(FFMA, 32, 64, 8, 1, 2, 3, 8, 1, PAD))},
        {rich_gemm("f32", false, true), "M=100,N=72,K=999", OPS_PREC_TF32,
         serial(sched(TF32, 32, 32, 16, 2, 1, 2, 2, 1, PAD))},
        /* tf32x3 under exact: both fragment paths (ldmatrix and element-wise), ragged edges */
        {plain_gemm("f32"), "M=333,N=777,K=1001", OPS_PREC_EXACT,
         sched(TF32X3, 64, 64, 16, 2, 2, 3, 1, 1, PAD)},
        {rich_gemm("f32", true, true), "M=100,N=72,K=40", OPS_PREC_EXACT,
         sched(TF32X3, 32, 32, 16, 2, 1, 2, 1, 1, PAD)},
        {rich_gemm("f32", false, true), "M=100,N=72,K=999", OPS_PREC_EXACT,
         serial(sched(TF32X3, 32, 32, 16, 2, 1, 2, 2, 1, XOR))},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(cases); i++) {
        ops_graph *g = emit_test_graph(cases[i].json, cases[i].shape);
        ops_group grp;
        emit_test_whole_group(g, &grp);
        grp.precision = cases[i].prec;
        char buf[256];
        ops_schedule_format(&cases[i].s, buf, sizeof(buf));
        const char *why = ops_family_gemm.prune(&grp, &cases[i].s, &dev);
        if (why)
            fail_msg("case %zu (%s): %s pruned (%s)", i, cases[i].shape, buf, why);
        ops_emitted em;
        ops_diag d = {0};
        if (ops_family_gemm.emit(&grp, &cases[i].s, &dev, &em, &d) < 0)
            fail_msg("emit %s: %s", buf, d.msg);
        assert_int_equal(srch_pool_submit(pool, em.source, (uint64_t)n), 0);
        sources[n++] = em.source;
        em.source = NULL;
        ops_emitted_free(&em);
        ops_graph_free(g);
        free(cases[i].json);
    }
    drain(pool, n, sources);
    srch_pool_free(pool);
    for (int i = 0; i < n; i++)
        free(sources[i]);
    free(sources);
}

static void test_compile_sm80(void **state)
{
    (void)state;
    ops_graph *g = emit_test_graph(gemm_bias_relu, "M=1000");
    emit_compile(g, OPS_PREC_EXACT, sched(F16, 128, 128, 32, 2, 2, 3, 1, 1, XOR), "sm_80");
    emit_compile(g, OPS_PREC_EXACT, sched(F16, 64, 64, 64, 2, 2, 4, 2, 1, PAD), "sm_80");
    ops_graph_free(g);
    char *json = plain_gemm("f32");
    g = emit_test_graph(json, "M=1000,N=1000,K=1000");
    emit_compile(g, OPS_PREC_TF32, sched(TF32, 128, 64, 32, 2, 2, 3, 1, 1, PAD), "sm_80");
    emit_compile(g, OPS_PREC_EXACT, sched(FFMA, 64, 64, 16, 2, 2, 3, 1, 4, PAD), "sm_80");
    ops_graph_free(g);
    free(json);
    json = plain_gemm("f16");
    g = emit_test_graph(json, "M=64,N=256,K=8192");
    emit_compile(g, OPS_PREC_EXACT, serial(sched(F16, 64, 64, 64, 2, 2, 3, 4, 1, XOR)), "sm_80");
    emit_compile(g, OPS_PREC_EXACT, serial(sched(F16, 32, 64, 32, 1, 2, 4, 8, 1, PAD)), "sm_80");
    ops_graph_free(g);
    free(json);
}

/* ---- serial split-K ---- */

static double est(const ops_graph *g, ops_precision prec, ops_schedule s);

typedef struct serial_tally {
    int serial, serial_one_slice, parallel_split;
} serial_tally;

static int serial_cb(const ops_schedule *s, void *ctx)
{
    serial_tally *t = ctx;
    if (s->v[SPLITK_MODE] == SERIAL) {
        t->serial++;
        t->serial_one_slice += s->v[SPLITK] == 1;
    } else if (s->v[SPLITK] > 1) {
        t->parallel_split++;
    }
    return 0;
}

static void test_serial_splitk(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    char *json = plain_gemm("f16");
    ops_graph *g = emit_test_graph(json, "M=64,N=256,K=8192"); /* small M, large K */
    ops_group grp;
    emit_test_whole_group(g, &grp);

    /* The space has serial candidates, never with one slice. */
    serial_tally t = {0};
    assert_int_equal(ops_family_enumerate(&ops_family_gemm, &grp, &dev, serial_cb, &t, NULL), 0);
    print_message("64x256x8192 f16: serial %d, parallel split %d\n", t.serial, t.parallel_split);
    assert_true(t.serial > 0 && t.parallel_split > 0);
    assert_int_equal(t.serial_one_slice, 0);
    ops_schedule one = serial(sched(F16, 64, 64, 64, 2, 2, 3, 1, 1, XOR));
    assert_string_equal(ops_family_gemm.prune(&grp, &one, &dev), "redundant");

    /* One kernel; the workspace holds 4 tile semaphores (padded to 256 bytes) and 4 fp32 tiles. */
    ops_schedule s = serial(sched(F16, 64, 64, 64, 2, 2, 3, 4, 1, XOR));
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    ops_emitted em;
    ops_diag d = {0};
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 1);
    const ops_kernel_launch *k = &em.kernels[0];
    assert_string_equal(k->entry, "ktune_gemm_f16_64x64x64_serial");
    assert_true(k->zero_workspace);
    assert_int_equal(em.workspace_bytes, 256 + 4 * 64 * 64 * 4);
    assert_int_equal(k->grid[0], 4 * 4); /* tiles x slices, slice fastest */
    assert_int_equal(k->grid[1], 1);
    assert_int_equal(k->grid[2], 1);
    assert_int_equal(k->n_args, 4); /* A, B, Y, workspace */
    assert_int_equal(k->args[3].kind, OPS_ARG_WORKSPACE);
    assert_int_equal(k->args[3].offset, 0);
    assert_non_null(strstr(em.source, "splitk_mode=serial"));
    assert_non_null(strstr(em.source, "kt_sem_wait(sem, slice);"));
    assert_non_null(strstr(em.source, "kt_sem_pass(sem, slice + 1);"));
    assert_true(emit_test_has(em.source, "ld.acquire.gpu.global.b32"));
    assert_true(emit_test_has(em.source, "st.release.gpu.global.b32"));
    assert_true(emit_test_has(em.source, "__threadfence();"));
    assert_non_null(strstr(em.source, "const int pid = blockIdx.x / SPLITK, slice = blockIdx.x % "
                                      "SPLITK;"));
    assert_non_null(strstr(em.source, "enum : int { ACC_OFFSET = 256 };"));
    assert_null(strstr(em.source, "ktune_gemm_splitk_reduce"));
    emit_test_compile(em.source, "sm_90a");
    int64_t serial_ws = em.workspace_bytes;
    ops_emitted_free(&em);

    /* Parallel split-K of the same tiles needs a slice of partials per slice. */
    ops_schedule par = sched(F16, 64, 64, 64, 2, 2, 3, 4, 1, XOR);
    assert_int_equal(ops_family_gemm.emit(&grp, &par, &dev, &em, &d), 0);
    assert_false(em.kernels[0].zero_workspace);
    assert_true(serial_ws < em.workspace_bytes);
    ops_emitted_free(&em);

    /* A 16-row tile and FFMA serial candidates compile too, without spills. */
    ops_graph *gf = emit_test_graph(json, "M=64,N=256,K=8192");
    emit_compile(gf, OPS_PREC_EXACT, serial(sched(F16, 16, 64, 64, 1, 2, 4, 8, 1, PAD)), "sm_90a");
    ops_graph_free(gf);
    free(json);
    json = plain_gemm("f32");
    gf = emit_test_graph(json, "M=64,N=256,K=8192");
    emit_compile(gf, OPS_PREC_EXACT, serial(sched(FFMA, 64, 64, 16, 2, 2, 3, 4, 1, PAD)), "sm_90a");
    emit_compile(gf, OPS_PREC_EXACT, serial(sched(FFMA, 64, 64, 16, 2, 2, 3, 4, 1, PAD)), "sm_80");
    ops_graph_free(gf);
    free(json);

    /* A grid beyond one block per SM is pruned: 32 tiles x 8 slices > 132 SMs. */
    ops_graph *gb = emit_test_graph(gemm_bias_relu, "M=512");
    ops_group gbg;
    emit_test_whole_group(gb, &gbg);
    ops_schedule wide = sched(F16, 64, 64, 32, 2, 2, 2, 8, 1, XOR);
    assert_null(ops_family_gemm.prune(&gbg, &wide, &dev)); /* parallel: fine */
    wide = serial(wide);
    assert_string_equal(ops_family_gemm.prune(&gbg, &wide, &dev), "shape");
    ops_graph_free(gb);

    /* Cost model: serial saves the reduction kernel for few slices of small tiles, a long
     * hand-off chain of big tiles loses to parallel, and any split beats 4 lone blocks. */
    double ser2 = est(g, OPS_PREC_EXACT, serial(sched(F16, 32, 64, 64, 1, 2, 3, 2, 1, XOR)));
    double par2 = est(g, OPS_PREC_EXACT, sched(F16, 32, 64, 64, 1, 2, 3, 2, 1, XOR));
    assert_true(ser2 < par2);
    double ser8 = est(g, OPS_PREC_EXACT, serial(sched(F16, 64, 128, 64, 2, 2, 3, 8, 1, XOR)));
    double par8 = est(g, OPS_PREC_EXACT, sched(F16, 64, 128, 64, 2, 2, 3, 8, 1, XOR));
    assert_true(par8 < ser8);
    double none = est(g, OPS_PREC_EXACT, sched(F16, 64, 64, 64, 2, 2, 3, 1, 1, XOR));
    double ser4 = est(g, OPS_PREC_EXACT, serial(sched(F16, 64, 64, 64, 2, 2, 3, 4, 1, XOR)));
    assert_true(ser2 < none && ser4 < none);
    ops_graph_free(g);
}

/* ---- cluster split-K ---- */

static void test_cluster_splitk(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    char *json = plain_gemm("f32");
    ops_graph *g = emit_test_graph(json, "M=128,N=512,K=1024"); /* KernelBench level 2's shape */
    ops_group grp;
    emit_test_whole_group(g, &grp);
    grp.precision = OPS_PREC_EXACT;
    ops_schedule s = sched(TF32X3, 32, 64, 64, 2, 2, 3, 8, 1, PAD);
    s.v[SPLITK_MODE] = CLUSTER;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    /* clusters are sm_90's */
    ops_device a100 = dev;
    a100.sm_major = 8;
    snprintf(a100.arch, sizeof(a100.arch), "sm_80");
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &a100), "shape");

    /* One kernel, no workspace; the slices of a tile adjacent along x (the cluster) */
    ops_emitted em;
    ops_diag d = {0};
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 1);
    const ops_kernel_launch *k = &em.kernels[0];
    assert_string_equal(k->entry, "ktune_gemm_tf32x3_32x64x64_cluster");
    assert_int_equal(em.workspace_bytes, 0);
    assert_false(k->zero_workspace);
    assert_int_equal(k->grid[0], 4 * 8 * 8); /* tiles x slices, slice fastest */
    assert_int_equal(k->grid[2], 1);
    assert_int_equal(k->n_args, 3); /* A, B, Y */
    assert_non_null(strstr(em.source, "__cluster_dims__(SPLITK, 1, 1)"));
    assert_non_null(strstr(em.source, "kt_cluster_sync();"));
    assert_true(emit_test_has(em.source, "mapa.shared::cluster.u32"));
    assert_true(emit_test_has(em.source, "barrier.cluster.wait.acquire.aligned"));
    emit_test_golden("gemm_tf32x3_cluster_splitk.cu", em.source);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);

    /* shared memory holds at least the block's fp32 partial tile: a 2-stage 64 x 64 x 16 f16
     * pipeline (8 KiB) grows to 16 KiB */
    ops_graph *gh = emit_test_graph(gemm_bias_relu, "M=512");
    ops_group ghg;
    emit_test_whole_group(gh, &ghg);
    ops_schedule h = sched(F16, 64, 64, 16, 2, 2, 2, 2, 1, PAD);
    h.v[SPLITK_MODE] = CLUSTER;
    if (!ops_family_gemm.prune(&ghg, &h, &dev)) {
        assert_int_equal(ops_family_gemm.emit(&ghg, &h, &dev, &em, &d), 0);
        assert_int_equal(em.kernels[0].smem_bytes, 64 * 64 * 4);
        emit_test_compile(em.source, "sm_90a");
        ops_emitted_free(&em);
    }
    ops_graph_free(gh);

    /* FFMA and f16 compile too, without spills */
    emit_compile(g, OPS_PREC_EXACT,
                 (ops_schedule){.family = OPS_FAM_GEMM,
                                .v = {FFMA, 32, 32, 16, 2, 4, 4, 4, 1, PAD, CLUSTER, SYNC, 1}},
                 "sm_90a");
    ops_graph_free(g);
    free(json);
    json = plain_gemm("f16");
    g = emit_test_graph(json, "M=1760,N=128,K=1760");
    emit_compile(g, OPS_PREC_EXACT,
                 (ops_schedule){.family = OPS_FAM_GEMM,
                                .v = {F16, 32, 128, 64, 1, 4, 4, 4, 1, XOR, CLUSTER, SYNC, 1}},
                 "sm_90a");
    ops_graph_free(g);
    free(json);
}

/* ---- launch description and golden source ---- */

/* ---- the Hopper (wgmma) path: tf32x3 on fp32 data ---- */

static ops_schedule wgmma(int bm, int bn, int stages)
{
    ops_schedule s = sched(TF32X3, bm, bn, 32, 1, 1, stages, 1, 1, XOR);
    s.v[MMA] = WGMMA;
    return s;
}

static void test_wgmma(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_emitted em;
    ops_diag d = {0};
    /* B as stored [K][N] (fragments from a padded tile) and [N][K] (a swizzled one), ragged
     * edges, the rich group's prologue (an identity cast), batch broadcast and epilogue. */
    char *json[] = {plain_gemm("f32"), rich_gemm("f32", false, true)};
    const char *shapes[] = {"M=1000,N=1000,K=1000", "M=333,N=250,K=516"};
    for (int c = 0; c < 2; c++) {
        ops_graph *g = emit_test_graph(json[c], shapes[c]);
        ops_group grp;
        emit_test_whole_group(g, &grp);
        ops_schedule s = wgmma(128, 128, 3);
        assert_null(ops_family_gemm.prune(&grp, &s, &dev));
        assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
        const ops_kernel_launch *k = &em.kernels[0];
        assert_int_equal(em.n_kernels, 1);
        assert_string_equal(k->entry, "ktune_gemm_tf32x3_wgmma_128x128x32");
        assert_int_equal(k->block[0], 256); /* two warpgroups of 64 columns */
        assert_non_null(strstr(em.source, "kt_wgmma_tf32_rs<BM>(part"));
        assert_non_null(strstr(em.source, "enum : int { BM = 128,"));
        assert_true(
            emit_test_has(em.source, "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32"));
        assert_true(emit_test_has(em.source, "fence.proxy.async.shared::cta"));
        if (c == 0)
            emit_test_golden("gemm_tf32x3_wgmma.cu", em.source);
        emit_test_compile(em.source, "sm_90a");
        ops_emitted_free(&em);
        /* the kernel's fixed shape: bk 32, one warp per warp grid, no split-K, XOR knob */
        ops_schedule bad[] = {sched(TF32X3, 128, 128, 16, 1, 1, 3, 1, 1, XOR),
                              sched(TF32X3, 128, 128, 32, 2, 1, 3, 1, 1, XOR),
                              sched(TF32X3, 128, 128, 32, 1, 1, 3, 2, 1, XOR),
                              sched(TF32X3, 256, 128, 32, 1, 1, 3, 1, 1, XOR),
                              sched(TF32X3, 128, 128, 32, 1, 1, 3, 1, 1, PAD)};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            bad[i].v[MMA] = WGMMA;
            assert_non_null(ops_family_gemm.prune(&grp, &bad[i], &dev));
        }
        /* wgmma_split: A's small halves from a first kernel into the workspace */
        s.v[MMA] = WGMMA_SPLIT;
        if (c == 0) {
            assert_null(ops_family_gemm.prune(&grp, &s, &dev));
            assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
            assert_int_equal(em.n_kernels, 2);
            assert_string_equal(em.kernels[0].entry, "ktune_gemm_split_a");
            assert_string_equal(em.kernels[1].entry, "ktune_gemm_tf32x3_wgmma_split_128x128x32");
            assert_int_equal(em.workspace_bytes, 1000LL * 1000 * 4);
            for (int kn = 0; kn < 2; kn++) {
                assert_int_equal(em.kernels[kn].n_args, 4); /* A, B, Y and ... */
                assert_int_equal(em.kernels[kn].args[em.kernels[kn].n_args - 1].kind,
                                 OPS_ARG_WORKSPACE); /* ... and the workspace */
            }
            assert_null(strstr(em.source, "make_small"));
            emit_test_compile(em.source, "sm_90a");
            ops_emitted_free(&em);
        } else {
            assert_non_null(ops_family_gemm.prune(&grp, &s, &dev)); /* batched A */
        }
        ops_graph_free(g);
        free(json[c]);
    }
    /* only tf32x3 on fp32 data, A stored [M][K], Hopper */
    char *f16 = plain_gemm("f16"), *ta = rich_gemm("f32", true, false);
    const char *jsons[] = {f16, ta};
    for (int c = 0; c < 2; c++) {
        ops_graph *g = emit_test_graph(jsons[c], "M=1024,N=1024,K=1024");
        ops_group grp;
        emit_test_whole_group(g, &grp);
        ops_schedule s = wgmma(128, 128, 3);
        assert_non_null(ops_family_gemm.prune(&grp, &s, &dev));
        ops_graph_free(g);
    }
    char *f32 = plain_gemm("f32");
    ops_graph *g = emit_test_graph(f32, "M=1024,N=1024,K=1024");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_schedule s = wgmma(128, 128, 3);
    dev.sm_major = 8;
    assert_non_null(ops_family_gemm.prune(&grp, &s, &dev));
    ops_graph_free(g);
    free(f32);
    free(f16);
    free(ta);
}

/* ---- the Hopper 16-bit path: TMA loads, warp-specialised wgmma ---- */

static ops_schedule wg16(int math, int bm, int bn, int wgs, int stages)
{
    ops_schedule s = sched(math, bm, bn, 64, wgs, 1, stages, 1, 1, XOR);
    s.v[MMA] = WGMMA;
    return s;
}

/* A 16-bit group with every epilogue kind: A (transposed when ta) batched [2], B (transposed
 * when tb) with a broadcast batch dim, bias, gelu, residual add, scale, cast to f32. */
static char *rich16(const char *dt, bool ta, bool tb)
{
    char *s = NULL;
    int n =
        asprintf(&s,
                 "{\"name\": \"rich16\", \"inputs\": {"
                 "\"A\": {\"dtype\": \"%s\", \"shape\": [2, %s]},"
                 "\"B\": {\"dtype\": \"%s\", \"shape\": [1, %s]},"
                 "\"bias\": {\"dtype\": \"%s\", \"shape\": [\"N\"]},"
                 "\"R\": {\"dtype\": \"%s\", \"shape\": [2, \"M\", \"N\"]}},"
                 "\"nodes\": [{\"out\": \"t0\", \"op\": \"matmul\", \"in\": [\"A\", \"B\"], "
                 "\"transpose_a\": %s, \"transpose_b\": %s},"
                 "{\"out\": \"t1\", \"op\": \"add\", \"in\": [\"t0\", \"bias\"]},"
                 "{\"out\": \"t2\", \"op\": \"gelu\", \"in\": [\"t1\"]},"
                 "{\"out\": \"t3\", \"op\": \"add\", \"in\": [\"t2\", \"R\"]},"
                 "{\"out\": \"t4\", \"op\": \"mul\", \"in\": [\"t3\", 0.5]},"
                 "{\"out\": \"Y\", \"op\": \"cast\", \"in\": [\"t4\"], \"dtype\": \"f32\"}],"
                 "\"outputs\": [\"Y\"]}",
                 dt, ta ? "\"K\", \"M\"" : "\"M\", \"K\"", dt, tb ? "\"N\", \"K\"" : "\"K\", \"N\"",
                 dt, dt, ta ? "true" : "false", tb ? "true" : "false");
    assert_true(n > 0);
    return s;
}

static const char gemm_bf16_bias_relu[] =
    "{\"name\": \"gemm_bias_relu\", \"inputs\": {"
    "\"A\": {\"dtype\": \"bf16\", \"shape\": [\"M\", 512]},"
    "\"W\": {\"dtype\": \"bf16\", \"shape\": [512, 256], \"const\": true},"
    "\"bias\": {\"dtype\": \"bf16\", \"shape\": [256], \"const\": true}},"
    "\"nodes\": [{\"out\": \"t0\", \"op\": \"matmul\", \"in\": [\"A\", \"W\"]},"
    "{\"out\": \"t1\", \"op\": \"add\", \"in\": [\"t0\", \"bias\"]},"
    "{\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"t1\"]}],"
    "\"outputs\": [\"Y\"]}";

/* Every tensor-map argument of a launch passes the driver's encoding rules (ops_tensor_map_check)
 * and lies within its tensor, or within the workspace of workspace_bytes (tensor < 0) past its
 * offset, which is 16-byte aligned. */
static void check_tmaps_ws(const ops_group *grp, const ops_kernel_launch *k, int64_t workspace_bytes)
{
    for (int i = 0; i < k->n_args; i++) {
        const ops_arg *a = &k->args[i];
        if (a->kind != OPS_ARG_TENSOR_MAP)
            continue;
        ops_diag d = {0};
        if (ops_tensor_map_check(&a->tmap, &d) < 0)
            fail_msg("%s argument %d: %s", k->entry, i, d.msg);
        uint64_t bytes;
        if (a->tensor < 0) {
            assert_int_equal(a->offset % 16, 0);
            bytes = (uint64_t)(workspace_bytes - a->offset);
        } else {
            const ops_tensor *t = &grp->g->tensors[a->tensor];
            bytes = (uint64_t)ops_shape_numel(&t->shape) * ops_dtype_size(t->dtype);
        }
        if (ops_tensor_map_span(&a->tmap) > bytes)
            fail_msg("%s argument %d: the map spans %llu bytes of a %llu-byte tensor", k->entry, i,
                     (unsigned long long)ops_tensor_map_span(&a->tmap), (unsigned long long)bytes);
    }
}

static void check_tmaps(const ops_group *grp, const ops_kernel_launch *k)
{
    check_tmaps_ws(grp, k, 0);
}

static void test_wgmma16(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_emitted em;
    ops_diag d = {0};
    ops_graph *g = emit_test_graph(gemm_bf16_bias_relu, "M=1000");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_schedule s = wg16(BF16, 128, 256, 2, 4);
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 1);
    const ops_kernel_launch *k = &em.kernels[0];
    assert_string_equal(k->entry, "ktune_gemm_bf16_wgmma_128x256x64");
    assert_int_equal(k->block[0], 384); /* a producer and two consumer warpgroups */
    assert_int_equal(k->grid[0], 8);    /* 1000 / 128 rounded up, one tile column */
    assert_int_equal(k->smem_bytes, 4 * (128 + 256) * 128 + 1024 + 64);
    /* A and B as tensor maps, then the bias and the output as pointers */
    assert_int_equal(k->n_args, 4);
    const ops_tensor_map *ma = &k->args[0].tmap, *mb = &k->args[1].tmap;
    assert_int_equal(k->args[0].kind, OPS_ARG_TENSOR_MAP);
    assert_int_equal(k->args[1].kind, OPS_ARG_TENSOR_MAP);
    assert_int_equal(k->args[2].kind, OPS_ARG_TENSOR);
    assert_int_equal(k->args[3].kind, OPS_ARG_TENSOR);
    assert_int_equal(k->args[3].tensor, grp.out[0]);
    /* A [M][K] is K-major: boxes of 64 k x BM rows; B [K][N] N-major: 64 n x 64 k */
    assert_int_equal(ma->rank, 2);
    assert_int_equal(ma->dtype, OPS_DT_BF16);
    assert_true(ma->dims[0] == 512 && ma->dims[1] == 1000 && ma->strides[0] == 1024);
    assert_true(ma->box[0] == 64 && ma->box[1] == 128 && ma->swizzle == 128);
    assert_true(mb->dims[0] == 256 && mb->dims[1] == 512 && mb->strides[0] == 512);
    assert_true(mb->box[0] == 64 && mb->box[1] == 64 && mb->swizzle == 128 && !mb->oob_nan);
    assert_true(ma->elem_strides[0] == 1 && ma->elem_strides[1] == 1);
    check_tmaps(&grp, k);
    assert_non_null(strstr(em.source, "kt_wgmma_bf16_ss<MMA_N, TRANS_B, TRANS_A>"));
    assert_non_null(strstr(em.source, "enum : int { NB = 1, MMA_N = NB * BN };"));
    assert_non_null(strstr(em.source, "kt_setmaxnreg_dec<40>()"));
    assert_non_null(strstr(em.source, "enum : int { TRANS_A = 0, TRANS_B = 1 };"));
    assert_true(emit_test_has(em.source, "wgmma.mma_async.sync.aligned.m64n\" #N \"k16"));
    assert_true(emit_test_has(em.source, "cp.async.bulk.tensor.2d"));
    emit_test_golden("gemm_bf16_wgmma.cu", em.source);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);

    /* the kernel's fixed points: bk 64, wn 1, one or two consumers of 64 or 128 rows, 128 sums a
     * thread, parallel split-K only, the XOR knob, Hopper, wgmma (not wgmma_split) */
    ops_schedule bad[] = {
        wg16(BF16, 128, 256, 2, 4), wg16(BF16, 128, 256, 4, 4), wg16(BF16, 256, 256, 2, 3),
        wg16(BF16, 256, 128, 1, 3), wg16(BF16, 128, 128, 2, 3), wg16(BF16, 128, 128, 2, 3),
        wg16(BF16, 128, 128, 2, 3), wg16(F16, 128, 128, 2, 3),  wg16(BF16, 128, 128, 2, 3)};
    bad[0].v[BK] = 32;
    bad[4].v[WN] = 2;
    bad[5].v[SPLITK] = 2;
    bad[5].v[SPLITK_MODE] = SERIAL;
    bad[6].v[SMEM] = PAD;
    bad[8].v[MMA] = WGMMA_SPLIT;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (!ops_family_gemm.prune(&grp, &bad[i], &dev))
            fail_msg("bad schedule %zu kept", i);
    assert_string_equal(ops_family_gemm.prune(&grp, &bad[2], &dev), "regs");
    assert_string_equal(ops_family_gemm.prune(&grp, &bad[4], &dev), "redundant");
    /* ping-pong at M = 1000: 16 tiles, a block each, the second consumer would idle */
    s = wg16(BF16, 128, 128, 1, 4);
    s.v[MMA] = PINGPONG;
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "redundant");
    s = wg16(BF16, 128, 128, 2, 3);
    dev.sm_major = 8;
    assert_non_null(ops_family_gemm.prune(&grp, &s, &dev));
    ops_device_h100(&dev);
    /* deeper rings for small tiles: 8 stages of 64 x 64 (16 KB each), 6 of 64 x 128 ping-pong
     * with store=tma; the cp.async kernels stay at 2-4 */
    s = wg16(BF16, 64, 64, 1, 8);
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.kernels[0].smem_bytes, 8 * (64 + 64) * 128 + 1024 + 16 * 8);
    assert_non_null(strstr(em.source, "STAGES = 8,"));
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    s = sched(BF16, 128, 128, 32, 2, 2, 6, 1, 1, XOR);
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "redundant");
    /* shared memory: 4 stages of 256 x 128 tiles fit (193 KB), the budget is checked */
    s = wg16(BF16, 256, 128, 2, 4);
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    dev.smem_per_block_optin = 4 * (256 + 128) * 128;
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "smem");
    ops_device_h100(&dev);
    ops_graph_free(g);

    /* ping-pong: with more tiles than SMs each persistent block takes several, its two
     * consumers a tile each in turn (142 tiles of 128 x 128 at M = 9000) */
    g = emit_test_graph(gemm_bf16_bias_relu, "M=9000");
    emit_test_whole_group(g, &grp);
    s = wg16(BF16, 64, 128, 1, 6);
    s.v[MMA] = PINGPONG;
    s.v[STORE] = TMA;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    s = wg16(BF16, 128, 128, 1, 4);
    s.v[MMA] = PINGPONG;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    k = &em.kernels[0];
    assert_string_equal(k->entry, "ktune_gemm_bf16_wgmma_pingpong_128x128x64");
    assert_int_equal(k->block[0], 384);         /* a producer, two consumers */
    assert_int_equal(k->grid[0], dev.sm_count); /* persistent: a block per SM */
    assert_int_equal(k->grid[2], 1);
    assert_non_null(strstr(em.source, "PINGPONG = 1 };"));
    assert_non_null(strstr(em.source, "enum : int { CONSUMERS = 2, MT = 2,"));
    assert_non_null(strstr(em.source, "kt_bar_sync(1 + cw, 256);"));
    assert_non_null(strstr(em.source, "kt_bar_arrive(2 - cw, 256);"));
    assert_true(emit_test_has(em.source, "bar.arrive"));
    check_tmaps(&grp, k);
    emit_test_golden("gemm_bf16_wgmma_pingpong.cu", em.source);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    s.v[WM] = 2; /* the consumers split no tile: wm is not read */
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "redundant");
    s = wg16(BF16, 128, 128, 2, 4);
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.kernels[0].grid[0], dev.sm_count); /* cooperative: persistent too */
    assert_null(strstr(em.source, "__cluster_dims__"));
    assert_non_null(strstr(em.source, "PINGPONG = 0 };"));
    assert_null(strstr(em.source, "kt_bar_sync"));
    ops_emitted_free(&em);
    /* mcast 2: 2-block clusters on pairs of tiles (36 pairs of tile rows x 2 columns = 72 pairs
     * for 66 clusters), B [K][N] split by 64-wide blocks between the two, multicast */
    s.v[MCAST] = 2;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    k = &em.kernels[0];
    assert_int_equal(k->grid[0], dev.sm_count);
    assert_non_null(
        strstr(em.source, "__cluster_dims__(2, 1, 1) ktune_gemm_bf16_wgmma_128x128x64("));
    assert_non_null(strstr(em.source, "enum : int { MCAST = 2, PAIRS_M = (TILES_M + 1) / 2,"));
    assert_non_null(strstr(em.source, "for (int j = rank; j < BN / 64; j += 2)"));
    assert_non_null(strstr(em.source, "kt_tma_load_2d_mc(bs + st * B_STAGE + j * 4096"));
    assert_non_null(strstr(em.source, "kt_tma_load_2d(as + st * A_STAGE"));
    assert_non_null(strstr(em.source, "kt_mbar_arrive_cluster(&empty[(it - 1) % STAGES], 1)"));
    assert_true(emit_test_has(em.source, ".multicast::cluster"));
    assert_int_equal(k->args[1].tmap.box[1], 64); /* N-major B: whole 64 x 64 blocks */
    check_tmaps(&grp, k);
    emit_test_golden("gemm_bf16_wgmma_mcast.cu", em.source);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    s = sched(BF16, 128, 128, 32, 2, 2, 3, 1, 1, XOR); /* mma.sync: the knobs are not its */
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    s.v[MCAST] = 2;
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "redundant");
    s.v[MCAST] = 1;
    s.v[STORE] = TMA;
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "redundant");
    /* store=tma: each consumer's 64 x 256 tile staged in shared memory (64 KB for two), the
     * output a tensor map of 64-column (128-byte) boxes of 64 rows; four stages no longer fit */
    s = wg16(BF16, 128, 256, 2, 3);
    s.v[STORE] = TMA;
    s.v[MCAST] = 2;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    k = &em.kernels[0];
    assert_int_equal(k->smem_bytes, 3 * (128 + 256) * 128 + 2 * 64 * 256 * 2 + 1024 + 48);
    assert_int_equal(k->args[k->n_args - 1].kind, OPS_ARG_TENSOR_MAP);
    assert_int_equal(k->args[k->n_args - 1].tensor, grp.out[0]);
    const ops_tensor_map *cmap = &k->args[k->n_args - 1].tmap;
    assert_true(cmap->dims[0] == 256 && cmap->dims[1] == 9000 && cmap->strides[0] == 512);
    assert_true(cmap->box[0] == 64 && cmap->box[1] == 64 && cmap->swizzle == 128 &&
                cmap->rank == 2);
    check_tmaps(&grp, k);
    assert_non_null(strstr(em.source, "enum : int { C_ROWS = 64, C_BOX = 64,"));
    assert_non_null(strstr(em.source, "const __grid_constant__ kt_tensor_map tmap_c)"));
    assert_non_null(strstr(em.source, "kt_tma_store_2d(&tmap_c, cs + bx * C_BOX_BYTES"));
    assert_non_null(strstr(em.source, "kt_tma_store_wait_read<0>();"));
    assert_non_null(strstr(em.source, "kt_fence_proxy_async();"));
    assert_true(emit_test_has(em.source, "cp.async.bulk.tensor.2d.global.shared::cta"));
    emit_test_golden("gemm_bf16_wgmma_tma_store.cu", em.source);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    s.v[STAGES] = 4;
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "smem");
    ops_graph_free(g);
    /* M = 384: three tile rows, so the last pair's second tile lies wholly past M although
     * M % BM == 0; its stores are masked on m */
    g = emit_test_graph(gemm_bf16_bias_relu, "M=384");
    emit_test_whole_group(g, &grp);
    s = wg16(BF16, 128, 128, 2, 4);
    s.v[MCAST] = 2;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_non_null(strstr(em.source, "float acc1)\n{\n    if (m >= M)\n        return;"));
    ops_emitted_free(&em);
    s.v[MCAST] = 1; /* two tile rows a column: no tile past M */
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_null(strstr(em.source, "if (m >= M)"));
    ops_emitted_free(&em);
    ops_graph_free(g);
    /* a single tile row leaves no block to share B with */
    g = emit_test_graph(gemm_bf16_bias_relu, "M=100");
    emit_test_whole_group(g, &grp);
    s = wg16(BF16, 128, 128, 2, 4);
    s.v[MCAST] = 2;
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "redundant");
    ops_graph_free(g);

    /* rows of tensor maps are 16-byte multiples: operands whose rows are not (K % 8 for A
     * [M][K], N % 8 for B [K][N]) are copied into padded rows of the workspace first, each by a
     * kernel of its own, and mapped there (tensor -1, the copy's offset, the padded stride);
     * the output's odd rows take the masked single stores */
    char *plain = plain_gemm("f16");
    g = emit_test_graph(plain, "M=300,N=203,K=201");
    emit_test_whole_group(g, &grp);
    s = wg16(F16, 128, 128, 2, 3);
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 3);
    assert_string_equal(em.kernels[0].entry, "ktune_gemm_pad_a");
    assert_string_equal(em.kernels[1].entry, "ktune_gemm_pad_b");
    /* A: 300 rows of 201 -> 208 apart (124800 bytes); B at the next 256 bytes, 201 rows of 203
     * -> 208 */
    assert_int_equal(em.workspace_bytes, 124928 + 201 * 208 * 2);
    assert_int_equal(em.kernels[0].block[0], 256);
    assert_int_equal(em.kernels[0].grid[0], (300 * 26 + 255) / 256);
    assert_int_equal(em.kernels[0].args[em.kernels[0].n_args - 1].kind, OPS_ARG_WORKSPACE);
    k = &em.kernels[2];
    assert_int_equal(k->args[0].tensor, -1);
    assert_int_equal(k->args[0].offset, 0);
    assert_true(k->args[0].tmap.dims[0] == 201 && k->args[0].tmap.strides[0] == 416);
    assert_int_equal(k->args[1].tensor, -1);
    assert_int_equal(k->args[1].offset, 124928);
    assert_true(k->args[1].tmap.dims[0] == 203 && k->args[1].tmap.strides[0] == 416);
    check_tmaps_ws(&grp, k, em.workspace_bytes);
    assert_non_null(strstr(em.source, "const long long r = i / 26, j = (i - r * 26) * 8;"));
    assert_non_null(strstr(em.source, "static_cast<char *>(workspace) + 124928);"));
    ops_emitted_free(&em); /* compiled below, with store=tma: the same copies */
    /* store=tma: the output's rows (203 halves) have no tensor map either, so the TMA stores go
     * to padded rows of the workspace (after B's copy) and a last kernel copies them out */
    s.v[STORE] = TMA;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 4);
    assert_string_equal(em.kernels[3].entry, "ktune_gemm_unpad_c");
    /* the unpadding copy walks the output's 16-byte words: (300 * 203 + 7) / 8 of them */
    assert_int_equal(em.kernels[3].grid[0], ((300 * 203 + 7) / 8 + 255) / 256);
    k = &em.kernels[2];
    const ops_arg *omap = &k->args[k->n_args - 1];
    assert_int_equal(omap->kind, OPS_ARG_TENSOR_MAP);
    assert_int_equal(omap->tensor, -1);
    assert_int_equal(omap->offset, 208640); /* 124928 + 83616, to 256 bytes */
    assert_true(omap->tmap.dims[0] == 203 && omap->tmap.strides[0] == 416);
    assert_int_equal(em.workspace_bytes, 208640 + 300 * 208 * 2);
    check_tmaps_ws(&grp, k, em.workspace_bytes);
    assert_non_null(strstr(em.source, "w[q] = e0 + q < 60900LL ? src[r * 208 + col] : 0;"));
    assert_non_null(strstr(em.source, "reinterpret_cast<uint4 *>(dst)[i] = make_uint4("));
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    ops_graph_free(g);
    /* aligned rows: no copy */
    g = emit_test_graph(plain, "M=300,N=208,K=200");
    emit_test_whole_group(g, &grp);
    s = wg16(F16, 128, 128, 2, 3);
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 1);
    assert_int_equal(em.workspace_bytes, 0);
    ops_emitted_free(&em);
    ops_graph_free(g);
    free(plain);
    char *cast = rich_gemm("bf16", false, false);
    g = emit_test_graph(cast, "M=512,N=512,K=512");
    emit_test_whole_group(g, &grp);
    s = wg16(BF16, 128, 128, 2, 3);
    assert_non_null(ops_family_gemm.prune(&grp, &s, &dev));
    ops_graph_free(g);
    free(cast);

    /* transposed operands flip the descriptors, not the data; batched A gets a 3-D map */
    for (int c = 0; c < 4; c++) {
        bool ta = c & 1, tb = c >> 1;
        char *json = rich16(c & 1 ? "f16" : "bf16", ta, tb);
        g = emit_test_graph(json, "M=336,N=264,K=520");
        emit_test_whole_group(g, &grp);
        s = wg16(c & 1 ? F16 : BF16, 128, 128, 2, 3);
        assert_null(ops_family_gemm.prune(&grp, &s, &dev));
        assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
        k = &em.kernels[0];
        char want[64];
        snprintf(want, sizeof(want), "enum : int { TRANS_A = %d, TRANS_B = %d };", ta, !tb);
        assert_non_null(strstr(em.source, want));
        if (tb) { /* multicast: each block of the pair loads half of K-major B's n rows */
            ops_emitted mc;
            ops_schedule sm = s;
            sm.v[MCAST] = 2;
            assert_null(ops_family_gemm.prune(&grp, &sm, &dev));
            assert_int_equal(ops_family_gemm.emit(&grp, &sm, &dev, &mc, &d), 0);
            assert_int_equal(mc.kernels[0].args[1].tmap.box[1], 64);
            assert_non_null(strstr(mc.source, "bs + st * B_STAGE + rank * (BN / 2) * 64"));
            check_tmaps(&grp, &mc.kernels[0]);
            ops_emitted_free(&mc);
        }
        { /* store=tma on the batched f32 output (a cast): boxes of 32 columns, a 3-D map */
            ops_emitted ts;
            ops_schedule st = s;
            st.v[STORE] = TMA;
            assert_null(ops_family_gemm.prune(&grp, &st, &dev));
            assert_int_equal(ops_family_gemm.emit(&grp, &st, &dev, &ts, &d), 0);
            const ops_kernel_launch *kt = &ts.kernels[0];
            assert_int_equal(kt->args[kt->n_args - 1].tmap.rank, 3);
            assert_int_equal(kt->args[kt->n_args - 1].tmap.box[0], 32);
            assert_non_null(strstr(ts.source, "kt_tma_store_3d(&tmap_c"));
            assert_non_null(strstr(ts.source, "kt_st_shared_f32x2(at, y0, y1);"));
            check_tmaps(&grp, kt);
            ops_emitted_free(&ts);
        }
        assert_int_equal(k->args[0].tmap.rank, 3); /* A [2, ...] */
        assert_int_equal(k->args[0].tmap.dims[2], 2);
        assert_int_equal(k->args[1].tmap.rank, 2); /* B [1, ...], broadcast */
        assert_int_equal(k->args[0].tmap.box[1], ta ? 64 : 128);
        assert_int_equal(k->args[1].tmap.box[1], tb ? 128 : 64);
        assert_int_equal(k->args[0].tmap.dims[0], ta ? 336 : 520);
        assert_non_null(strstr(em.source, "kt_tma_load_3d(as"));
        check_tmaps(&grp, k);
        ops_emitted_free(&em);
        ops_graph_free(g);
        free(json);
    }
}

/* Split-K on the 16-bit wgmma kernel (parallel mode): (tile, k slice) units walked by the
 * persistent blocks, each slice's fp32 sums into its plane of the workspace, the reduction kernel
 * applying the epilogue; the prune rules around it. */
static void test_wgmma16_splitk(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_emitted em;
    ops_diag d = {0};
    /* M = 1000, N = 256, K = 512: 8 x 2 tiles of 128 x 128 and 8 k tiles, split 4 ways */
    ops_graph *g = emit_test_graph(gemm_bf16_bias_relu, "M=1000");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_schedule s = wg16(BF16, 128, 128, 2, 2);
    s.v[SPLITK] = 4;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 2);
    const ops_kernel_launch *k = &em.kernels[0];
    assert_string_equal(k->entry, "ktune_gemm_bf16_wgmma_128x128x64_partial");
    assert_int_equal(k->grid[0], 64); /* 16 tiles x 4 slices, a block each */
    assert_int_equal(k->args[k->n_args - 1].kind, OPS_ARG_WORKSPACE);
    assert_int_equal(k->args[k->n_args - 2].tensor, grp.out[0]);
    check_tmaps(&grp, k);
    assert_string_equal(em.kernels[1].entry, "ktune_gemm_splitk_reduce");
    assert_int_equal(em.workspace_bytes, 4 * 1000 * 256 * 4);
    assert_non_null(strstr(em.source, "UNITS = TILES_M * TILES_N * BATCH * SPLITK };"));
    assert_non_null(strstr(em.source, "ktw_tile(u / SPLITK, m0, n0, bz);"));
    assert_non_null(strstr(em.source, "k0 = (slice * KTILES_PER_SLICE + kt) * BK;"));
    assert_non_null(strstr(em.source, "for (int kt = 0; kt < KTILES_PER_SLICE; kt++, it++)"));
    assert_non_null(
        strstr(em.source, "ktg_partial2(workspace, slice, bz, m + 8, n, acc[mt][j][2]"));
    assert_null(strstr(em.source, "ktg_store2(Y, bz, m, n, acc")); /* the reduction stores */
    emit_test_golden("gemm_bf16_wgmma_splitk.cu", em.source);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);

    ops_schedule bad = s;
    bad.v[SPLITK] = 8; /* slices of one k tile */
    assert_string_equal(ops_family_gemm.prune(&grp, &bad, &dev), "divisibility");
    bad = s;
    bad.v[SPLITK_MODE] = SERIAL; /* not this kernel's */
    assert_string_equal(ops_family_gemm.prune(&grp, &bad, &dev), "shape");

    /* cluster split-K: clusters of 4 blocks walk the tiles, block rank r summing k slice r; the
     * partial tiles meet in shared memory, each slice reducing a share and storing it through
     * the epilogue; one kernel, no workspace */
    s.v[SPLITK_MODE] = CLUSTER;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 1);
    k = &em.kernels[0];
    assert_string_equal(k->entry, "ktune_gemm_bf16_wgmma_128x128x64_cluster");
    assert_int_equal(k->grid[0], 64); /* 16 tiles, a 4-block cluster each */
    assert_int_equal(k->smem_bytes, 2 * (128 + 128) * 128 + 1024 + 32 + 128 * 128 * 4 + 16);
    assert_int_equal(em.workspace_bytes, 0);
    assert_non_null(strstr(em.source, "__cluster_dims__(SPLITK, 1, 1) ktune_gemm_bf16_wgmma_"));
    assert_non_null(strstr(em.source, "UNITS = TILES_M * TILES_N * BATCH };"));
    assert_non_null(strstr(em.source, "u < UNITS; u += gridDim.x / SPLITK) {"));
    assert_non_null(strstr(em.source, "const int slice = rank;"));
    assert_non_null(strstr(em.source, "kt_mbar_arrive_cluster_release(ready, r);"));
    assert_non_null(strstr(em.source, "kt_mbar_wait_cluster(freed, (done - 1) & 1);"));
    assert_non_null(strstr(em.source, "ktg_store2(t2_bias, t5_Y, bz, m + 8, n, sum.z, sum.w);"));
    assert_true(emit_test_has(em.source, "fence.acq_rel.cluster"));
    emit_test_golden("gemm_bf16_wgmma_cluster_splitk.cu", em.source);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    /* a spread of cluster shapes compiles without spills: 2, 4 and 8 slices, one and two
     * consumers, the widest share (128 x 256: 16 pieces of 4 sums a thread, loaded at once) */
    {
        char *pl = plain_gemm("bf16");
        ops_graph *g2 = emit_test_graph(pl, "M=200,N=1024,K=4096");
        free(pl);
        ops_group grp2;
        emit_test_whole_group(g2, &grp2);
        /* bm, bn, consumers, slices, stages (128 x 256: the 128 KB partial tile leaves two) */
        const int spread[][5] = {
            {128, 256, 2, 2, 2}, {64, 256, 1, 8, 3}, {256, 128, 2, 4, 2}, {64, 64, 1, 2, 4}};
        for (size_t i = 0; i < sizeof(spread) / sizeof(spread[0]); i++) {
            ops_schedule sc = wg16(BF16, spread[i][0], spread[i][1], spread[i][2], spread[i][4]);
            sc.v[SPLITK] = spread[i][3];
            sc.v[SPLITK_MODE] = CLUSTER;
            const char *why = ops_family_gemm.prune(&grp2, &sc, &dev);
            if (why)
                fail_msg("cluster spread %zu pruned: %s", i, why);
            assert_int_equal(ops_family_gemm.emit(&grp2, &sc, &dev, &em, &d), 0);
            emit_test_compile(em.source, "sm_90a");
            ops_emitted_free(&em);
        }
        ops_graph_free(g2);
    }
    bad = s;
    bad.v[MCAST] = 2; /* the cluster is the slices' */
    assert_string_equal(ops_family_gemm.prune(&grp, &bad, &dev), "shape");
    bad = wg16(BF16, 64, 128, 1, 2);
    bad.v[MMA] = PINGPONG;
    bad.v[SPLITK] = 4;
    bad.v[SPLITK_MODE] = CLUSTER; /* cooperative consumers only */
    assert_string_equal(ops_family_gemm.prune(&grp, &bad, &dev), "shape");
    bad = s;
    bad.v[STORE] = TMA; /* the partials are stored directly */
    assert_string_equal(ops_family_gemm.prune(&grp, &bad, &dev), "redundant");
    ops_graph_free(g);
    /* ragged K of 9 k tiles splits no way; 142 tiles need no split */
    char *plain = plain_gemm("bf16");
    g = emit_test_graph(plain, "M=1000,N=1000,K=520");
    emit_test_whole_group(g, &grp);
    s = wg16(BF16, 128, 128, 2, 2);
    s.v[SPLITK] = 2;
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "divisibility");
    ops_graph_free(g);
    g = emit_test_graph(gemm_bf16_bias_relu, "M=9000");
    emit_test_whole_group(g, &grp);
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "redundant");
    ops_graph_free(g);

    /* batched, B [N][K] of an odd N (scalar partial stores), every epilogue kind in the
     * reduction, ping-pong consumers and 2-block clusters walking slices of tile pairs */
    char *rich = rich16("bf16", false, true);
    g = emit_test_graph(rich, "M=256,N=1001,K=4096");
    free(rich);
    emit_test_whole_group(g, &grp);
    s = wg16(BF16, 64, 128, 1, 4);
    s.v[MMA] = PINGPONG;
    s.v[SPLITK] = 4;
    s.v[MCAST] = 2;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.kernels[0].grid[0], dev.sm_count);
    assert_non_null(strstr(em.source, "UNITS = PAIRS_M * TILES_N * BATCH * SPLITK };"));
    assert_non_null(strstr(em.source, "ktw_tile(u / SPLITK, m0, n0, bz, rank);"));
    assert_non_null(strstr(em.source, "int it = PINGPONG ? cw * KTILES_PER_SLICE : 0;"));
    assert_non_null(strstr(em.source, "        ktg_partial(ws, slice, bz, m, n + 1, acc1);"));
    check_tmaps(&grp, &em.kernels[0]);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    ops_graph_free(g);
    free(plain);

    /* a dual group's two sums have no reduction kernel */
    char *json = swiglu16("bf16", true, true, false);
    g = emit_test_graph(json, "M=1000,N=1000,K=1024");
    free(json);
    emit_test_whole_group(g, &grp);
    s = wg16(BF16, 128, 128, 2, 3);
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    s.v[SPLITK] = 2;
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "shape");
    ops_graph_free(g);
}

/* Stream-K on the 16-bit wgmma kernel: the last whole wave and the remainder of the units shared
 * out by k tile over a block per SM, partial sums handed to the block that starts each unit
 * through flags (cleared before the launch) and a slot per block in the workspace. */
static void test_wgmma16_streamk(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_emitted em;
    ops_diag d = {0};
    /* 4096^3 on 128 x 256 tiles: 512 units on 132 SMs, 3.9 waves; the 116 past the three whole
     * waves (of 64 k tiles each) are shared out */
    char *plain = plain_gemm("bf16");
    ops_graph *g = emit_test_graph(plain, "M=4096,N=4096,K=4096");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_schedule s = wg16(BF16, 128, 256, 2, 4);
    s.v[SPLITK_MODE] = STREAM;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 1);
    const ops_kernel_launch *k = &em.kernels[0];
    assert_string_equal(k->entry, "ktune_gemm_bf16_wgmma_128x256x64_streamk");
    assert_int_equal(k->grid[0], dev.sm_count);
    assert_true(k->zero_workspace);
    assert_int_equal(k->zero_prefix, 1280); /* 132 blocks x 2 consumers, padded to 256 bytes */
    assert_int_equal(em.workspace_bytes, 1280 + 132 * 128 * 256 * 4);
    assert_int_equal(k->args[k->n_args - 1].kind, OPS_ARG_WORKSPACE);
    assert_non_null(strstr(em.source, "SK_UNITS = 116, SK_CLUSTERS = 132,"));
    assert_non_null(strstr(em.source, "for (int u, kb, ke; ktw_next(w, u, kb, ke);) {"));
    assert_non_null(strstr(em.source, "for (int kt = kb; kt < ke; kt++, it++) {"));
    assert_non_null(strstr(em.source, "kt_spin_until(&flags[slot], 1);"));
    emit_test_golden("gemm_bf16_wgmma_streamk.cu", em.source);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);

    /* the cost model against the data-parallel twin, as measured (docs/search.md): behind it at
     * 4096^3 (3.9 waves: its overhead outweighs the last wave's idle SMs), ahead at 3072 x 3072
     * x 4096 on 128 x 128 pairs (4.4 waves) */
    {
        ops_schedule sk = wg16(BF16, 128, 256, 2, 3), dp;
        sk.v[RASTER] = 8;
        sk.v[MCAST] = 2;
        sk.v[STORE] = TMA;
        sk.v[SPLITK_MODE] = STREAM;
        dp = sk;
        dp.v[SPLITK_MODE] = PARALLEL;
        ops_estimate e_sk, e_dp;
        ops_family_gemm.estimate(&grp, &sk, &dev, &e_sk);
        ops_family_gemm.estimate(&grp, &dp, &dev, &e_dp);
        assert_true(e_sk.seconds > e_dp.seconds);
        ops_graph *g3 = emit_test_graph(plain, "M=3072,N=3072,K=4096");
        ops_group grp3;
        emit_test_whole_group(g3, &grp3);
        sk.v[BN] = dp.v[BN] = 128;
        sk.v[STAGES] = dp.v[STAGES] = 4;
        ops_family_gemm.estimate(&grp3, &sk, &dev, &e_sk);
        ops_family_gemm.estimate(&grp3, &dp, &dev, &e_dp);
        assert_true(e_sk.seconds < e_dp.seconds);
        ops_graph_free(g3);
    }

    ops_schedule bad = s;
    bad.v[MMA] = PINGPONG; /* ping-pong consumers take whole units in turn */
    bad.v[WM] = 1;
    bad.v[BM] = 64;
    assert_string_equal(ops_family_gemm.prune(&grp, &bad, &dev), "shape");
    bad = s;
    bad.v[SPLITK] = 2; /* stream-K sets each unit's split itself */
    assert_string_equal(ops_family_gemm.prune(&grp, &bad, &dev), "redundant");
    bad = sched(BF16, 64, 64, 32, 2, 2, 3, 1, 1, XOR);
    bad.v[SPLITK_MODE] = STREAM; /* the mma.sync kernel has none */
    assert_string_equal(ops_family_gemm.prune(&grp, &bad, &dev), "shape");
    ops_graph_free(g);
    /* whole waves (132 units) leave nothing to even out; a 128^3 GEMM has one k tile to share */
    g = emit_test_graph(plain, "M=16896,N=256,K=4096");
    emit_test_whole_group(g, &grp);
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "redundant");
    ops_graph_free(g);
    g = emit_test_graph(plain, "M=128,N=128,K=64");
    emit_test_whole_group(g, &grp);
    s = wg16(BF16, 128, 128, 2, 2);
    s.v[SPLITK_MODE] = STREAM;
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "shape");
    ops_graph_free(g);
    free(plain);

    /* few units (DeepBench's 1760 x 128 x 1760: 14 tiles of 28 k tiles): all shared out, each
     * unit split about ten ways */
    char *f16 = plain_gemm("f16");
    g = emit_test_graph(f16, "M=1760,N=128,K=1760");
    free(f16);
    emit_test_whole_group(g, &grp);
    s = wg16(F16, 128, 128, 2, 4);
    s.v[SPLITK_MODE] = STREAM;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_non_null(strstr(em.source, "SK_UNITS = 14, SK_CLUSTERS = 132,"));
    ops_emitted_free(&em);
    ops_graph_free(g);

    /* batched, transposed A, every epilogue kind, 2-block clusters (units are tile pairs, slots
     * per cluster rank) and the TMA store; and a dual group (SwiGLU: both sums handed over) */
    char *rich = rich16("f16", true, false);
    g = emit_test_graph(rich, "M=1000,N=1000,K=1000");
    free(rich);
    emit_test_whole_group(g, &grp);
    s = wg16(F16, 128, 128, 2, 4);
    s.v[SPLITK_MODE] = STREAM;
    s.v[MCAST] = 2;
    s.v[STORE] = TMA;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.kernels[0].grid[0], dev.sm_count);
    assert_non_null(strstr(em.source, "SK_UNITS = 64, SK_CLUSTERS = 66,"));
    assert_non_null(strstr(em.source, "const int slot = (ci * MCAST + rank) * CONSUMERS + cw;"));
    check_tmaps(&grp, &em.kernels[0]);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    ops_graph_free(g);
    char *json = swiglu16("bf16", true, true, false);
    g = emit_test_graph(json, "M=1000,N=1000,K=1024");
    free(json);
    emit_test_whole_group(g, &grp);
    s = wg16(BF16, 128, 128, 2, 3);
    s.v[SPLITK_MODE] = STREAM;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.workspace_bytes, 1280 + 132 * 128 * 256 * 4); /* both sums a slot */
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    ops_graph_free(g);
}

/* A dual group (SwiGLU) on the 16-bit wgmma kernel: A, B and B2 as tensor maps, B2's tile after
 * B's in each stage, one wgmma 2 BN wide, both sums handed to the epilogue; no other kernel takes
 * it, and the accumulators count double against the register rule. */
static void test_wgmma16_dual(void **state)
{
    (void)state;
    ops_device dev;
    ops_device_h100(&dev);
    ops_emitted em;
    ops_diag d = {0};
    char *json = swiglu16("bf16", true, true, false);
    ops_graph *g = emit_test_graph(json, "M=1000,N=1000,K=1000");
    free(json);
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_schedule s = wg16(BF16, 128, 128, 2, 4);
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 1);
    const ops_kernel_launch *k = &em.kernels[0];
    assert_string_equal(k->entry, "ktune_gemm_bf16_wgmma_128x128x64");
    assert_int_equal(k->smem_bytes, 4 * (128 + 2 * 128) * 128 + 1024 + 64);
    /* x, Wg, Wu as tensor maps (K-major, BN rows of 64 k), then the bias and the output */
    assert_int_equal(k->n_args, 5);
    for (int i = 0; i < 3; i++)
        assert_int_equal(k->args[i].kind, OPS_ARG_TENSOR_MAP);
    const ops_graph *gg = grp.g;
    assert_string_equal(gg->tensors[k->args[1].tensor].name, "Wg");
    assert_string_equal(gg->tensors[k->args[2].tensor].name, "Wu");
    assert_int_equal(k->args[2].tmap.box[1], 128);
    assert_true(k->args[2].tmap.dims[0] == 1000 && k->args[2].tmap.dims[1] == 1000);
    assert_string_equal(gg->tensors[k->args[3].tensor].name, "bg");
    assert_int_equal(k->args[4].tensor, grp.out[0]);
    check_tmaps(&grp, k);
    assert_non_null(strstr(em.source, "enum : int { NB = 2, MMA_N = NB * BN };"));
    assert_non_null(strstr(em.source, "const __grid_constant__ kt_tensor_map tmap_b2, "));
    assert_non_null(strstr(em.source, "kt_tma_load_2d(bs2 + st * B_STAGE, &tmap_b2"));
    assert_non_null(strstr(em.source, "kt_wgmma_bf16_ss<MMA_N, TRANS_B, TRANS_A>"));
    assert_non_null(strstr(em.source, "float acc[MT][MMA_N / 8][4];"));
    assert_non_null(strstr(em.source, "int bz, int m, int n, float acc, float acc2)"));
    assert_non_null(strstr(em.source, "acc[mt][BN / 8 + j][0]"));
    assert_true(emit_test_has(em.source, "silu"));
    emit_test_golden("gemm_bf16_wgmma_swiglu.cu", em.source);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);

    /* 2 x 128 sums a thread at bn 256 (one consumer of 128 rows at bn 128 too): registers */
    s = wg16(BF16, 128, 256, 2, 3);
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "regs");
    s = wg16(BF16, 128, 128, 1, 3);
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "regs");
    /* the other kernels do not take a dual group */
    s = sched(BF16, 128, 128, 32, 2, 2, 3, 1, 1, XOR);
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "shape");
    s = sched(FFMA, 64, 64, 16, 2, 2, 3, 1, 1, PAD);
    assert_string_equal(ops_family_gemm.prune(&grp, &s, &dev), "shape");
    s = wg16(BF16, 128, 128, 2, 3);
    dev.sm_major = 8;
    assert_non_null(ops_family_gemm.prune(&grp, &s, &dev));
    ops_device_h100(&dev);
    /* the cost model counts both GEMMs' flops */
    ops_estimate est;
    ops_family_gemm.estimate(&grp, &s, &dev, &est);
    assert_true(est.flops == 2.0 * 2 * 1000.0 * 1000 * 1000);
    /* mcast 2: each block loads half of B's and half of B2's rows for both */
    s.v[MCAST] = 2;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_non_null(strstr(em.source, "bs2 + st * B_STAGE + rank * (BN / 2) * 64, &tmap_b2"));
    assert_int_equal(em.kernels[0].args[2].tmap.box[1], 64);
    check_tmaps(&grp, &em.kernels[0]);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    ops_graph_free(g);

    /* weights [K][N] (MN-major): B2's 64-wide blocks follow B's; batched x, ping-pong (64-row
     * tiles: each consumer a 64 x 2 BN wgmma) */
    json = swiglu16("f16", false, false, true);
    g = emit_test_graph(json, "M=3000,N=264,K=520");
    free(json);
    emit_test_whole_group(g, &grp);
    s = wg16(F16, 64, 128, 1, 4);
    s.v[MMA] = PINGPONG;
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_non_null(strstr(em.source, "enum : int { TRANS_A = 0, TRANS_B = 1 };"));
    assert_non_null(strstr(em.source, "kt_tma_load_2d(bs2 + st * B_STAGE + j * 4096, &tmap_b2"));
    assert_int_equal(em.kernels[0].args[0].tmap.rank, 3); /* x [2, M, K] */
    assert_int_equal(em.kernels[0].n_args, 4);            /* no bias read */
    check_tmaps(&grp, &em.kernels[0]);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);
    ops_graph_free(g);
}

/* A spread of the 16-bit wgmma schedules (tile shapes x stages x consumers x f16/bf16 x operand
 * orientations x the epilogue kinds) compiled for sm_90a: no spills, and the dynamic shared
 * memory plus what ptxas reports fits the opt-in budget. */
static void test_compile_wgmma16(void **state)
{
    (void)state;
    srch_pool *pool = NULL;
    srch_pool_opts o = {.arch = "sm_90a", .jobs = 2, .timeout_s = 120};
    kt_err err = {0};
    assert_int_equal(srch_pool_new(&o, &pool, &err), 0);
    ops_device dev;
    ops_device_h100(&dev);
    char **sources = calloc(MAX_SOURCES, sizeof(char *));
    uint32_t *smem = calloc(MAX_SOURCES, sizeof(uint32_t));
    int n = 0;
    /* bm, bn, consumers (1, 2 cooperative; ping-pong), mcast, store */
    int shapes_seen[3][3][3][2][2] = {{{{{0}}}}};
    for (int c = 0; c < 7; c++) {
        char *json = c < 4    ? rich16(c & 1 ? "f16" : "bf16", c & 1, c >> 1)
                     : c == 4 ? plain_gemm("bf16")
                              : swiglu16(c == 5 ? "bf16" : "f16", c == 5, c == 5, false);
        ops_graph *g =
            emit_test_graph(json, c == 4 ? "M=4096,N=4096,K=4096" : "M=1000,N=1000,K=1000");
        free(json);
        ops_group grp;
        emit_test_whole_group(g, &grp);
        emit_test_list l = {0};
        assert_int_equal(
            ops_family_enumerate(&ops_family_gemm, &grp, &dev, emit_test_collect, &l, NULL), 0);
        int took = 0;
        for (int i = 0; i < l.n && n < MAX_SOURCES; i++) {
            const ops_schedule *s = &l.s[i];
            if ((s->v[MMA] != WGMMA && s->v[MMA] != PINGPONG) ||
                (s->v[MATH] != F16 && s->v[MATH] != BF16))
                continue;
            /* every (bm, bn, consumers) once per group, and a stage count that varies */
            int bi = s->v[BM] == 64 ? 0 : s->v[BM] == 128 ? 1 : 2;
            int ni = s->v[BN] == 64 ? 0 : s->v[BN] == 128 ? 1 : 2;
            int *seen = &shapes_seen[bi][ni][s->v[MMA] == PINGPONG ? 2 : s->v[WM] - 1]
                                    [s->v[MCAST] - 1][s->v[STORE]];
            if (*seen > c || s->v[STAGES] != 2 + (took + c) % 3)
                continue;
            *seen = c + 1;
            took++;
            ops_emitted em;
            ops_diag d = {0};
            if (ops_family_gemm.emit(&grp, s, &dev, &em, &d) < 0)
                fail_msg("emit: %s", d.msg);
            assert_true(em.kernels[0].smem_bytes <= (uint32_t)dev.smem_per_block_optin);
            check_tmaps(&grp, &em.kernels[0]);
            smem[n] = em.kernels[0].smem_bytes;
            assert_int_equal(srch_pool_submit(pool, em.source, (uint64_t)n), 0);
            sources[n++] = em.source;
            em.source = NULL;
            ops_emitted_free(&em);
        }
        assert_true(took >= 4);
        free(l.s);
        ops_graph_free(g);
    }
    print_message("compiling %d 16-bit wgmma candidates for sm_90a\n", n);
    assert_true(n >= 25);
    for (int i = 0; i < n; i++) {
        srch_compile_result r = {0};
        assert_int_equal(srch_pool_next(pool, &r, &err), 0);
        if (r.status != SRCH_COMPILE_OK)
            fail_msg("candidate %llu: %s\n%s\n---- source ----\n%s", (unsigned long long)r.tag,
                     srch_status_name(r.status), r.log, sources[r.tag]);
        for (int k = 0; k < r.n_kernels; k++) {
            if (r.kernels[k].spill_store_bytes || r.kernels[k].spill_load_bytes ||
                r.kernels[k].stack_bytes)
                fail_msg("candidate %llu: %s spills %d/%d bytes (%d registers)\n%s",
                         (unsigned long long)r.tag, r.kernels[k].name,
                         r.kernels[k].spill_store_bytes, r.kernels[k].spill_load_bytes,
                         r.kernels[k].registers, sources[r.tag]);
            if ((int64_t)r.kernels[k].smem_bytes + smem[r.tag] > dev.smem_per_block_optin)
                fail_msg("candidate %llu: shared memory %d + %u over the budget",
                         (unsigned long long)r.tag, r.kernels[k].smem_bytes, smem[r.tag]);
            /* ptxas serialises wgmmas it cannot keep asynchronous (accumulators moved between
             * them): correct, and silently slow */
            if (r.log && strstr(r.log, "serialized"))
                fail_msg("candidate %llu: %s\n%s", (unsigned long long)r.tag, r.log,
                         sources[r.tag]);
            if (getenv("KTUNE_TEST_VERBOSE"))
                print_message("%s: %d registers, %d/%d spill bytes, %u + %d smem\n",
                              r.kernels[k].name, r.kernels[k].registers,
                              r.kernels[k].spill_store_bytes, r.kernels[k].spill_load_bytes,
                              smem[r.tag], r.kernels[k].smem_bytes);
        }
        srch_compile_result_release(&r);
    }
    srch_pool_free(pool);
    for (int i = 0; i < n; i++)
        free(sources[i]);
    free(sources);
    free(smem);
}

static void test_launch_and_golden(void **state)
{
    (void)state;
    ops_graph *g = emit_test_graph(gemm_bias_relu, "M=1024");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_device dev;
    ops_device_h100(&dev);
    ops_schedule s = sched(F16, 64, 64, 32, 2, 2, 3, 1, 1, XOR);
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    ops_emitted em;
    ops_diag d = {0};
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 1);
    assert_int_equal(em.workspace_bytes, 0);
    const ops_kernel_launch *k = &em.kernels[0];
    assert_string_equal(k->entry, "ktune_gemm_f16_64x64x32");
    assert_int_equal(k->grid[0], 16 * 4);
    assert_int_equal(k->grid[2], 1);
    assert_int_equal(k->block[0], 128);
    assert_int_equal(k->smem_bytes, 3 * (64 * 32 + 32 * 64) * 2);
    assert_int_equal(k->n_args, 4); /* A, W, bias, Y */
    for (int i = 0; i < 3; i++)
        assert_int_equal(k->args[i].tensor, grp.in[i]);
    assert_int_equal(k->args[3].tensor, grp.out[0]);
    assert_non_null(strstr(em.source, "kt_mma_m16n8k16_f16(acc[i][j], a[i], b[j]);"));
    assert_non_null(strstr(em.source, "kt_ldmatrix_x4_trans("));
    assert_true(emit_test_has(em.source, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
    assert_true(emit_test_has(em.source, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
    assert_true(emit_test_has(em.source, "cp.async.cg.shared.global"));
    assert_non_null(strstr(em.source, "__launch_bounds__(THREADS, 1)"));
    emit_test_golden("gemm_f16_bias_relu.cu", em.source);
    emit_test_compile(em.source, "sm_90a");
    ops_emitted_free(&em);

    /* split-K: a partial kernel with workspace, then the reduction. */
    s = sched(F16, 128, 128, 32, 2, 2, 3, 4, 1, PAD);
    assert_null(ops_family_gemm.prune(&grp, &s, &dev));
    assert_int_equal(ops_family_gemm.emit(&grp, &s, &dev, &em, &d), 0);
    assert_int_equal(em.n_kernels, 2);
    assert_int_equal(em.workspace_bytes, 4LL * 1024 * 256 * 4);
    assert_int_equal(em.kernels[0].grid[2], 4);
    assert_int_equal(em.kernels[0].n_args, 5);
    assert_int_equal(em.kernels[0].args[4].kind, OPS_ARG_WORKSPACE);
    assert_string_equal(em.kernels[1].entry, "ktune_gemm_splitk_reduce");
    assert_int_equal(em.kernels[1].n_args, 5);
    assert_int_equal((int64_t)em.kernels[1].grid[0] * em.kernels[1].block[0] * 2, 1024 * 256);
    ops_emitted_free(&em);
    ops_graph_free(g);
}

/* ---- cost model ---- */

static double est(const ops_graph *g, ops_precision prec, ops_schedule s)
{
    ops_group grp;
    emit_test_whole_group(g, &grp);
    grp.precision = prec;
    ops_device dev;
    ops_device_h100(&dev);
    ops_estimate e;
    ops_family_gemm.estimate(&grp, &s, &dev, &e);
    assert_true(e.seconds > 0 && isfinite(e.seconds));
    assert_true(e.flops > 0 && e.bytes > 0);
    assert_true(e.occupancy > 0 && e.occupancy <= 1);
    return e.seconds;
}

static void test_estimate(void **state)
{
    (void)state;
    char *json = plain_gemm("f16");
    ops_graph *g = emit_test_graph(json, "M=4096,N=4096,K=4096");
    double tc = est(g, OPS_PREC_EXACT, sched(F16, 128, 128, 32, 2, 2, 3, 1, 8, XOR));
    double ffma = est(g, OPS_PREC_EXACT, sched(FFMA, 128, 128, 16, 2, 2, 3, 1, 8, PAD));
    assert_true(tc * 5 < ffma);
    /* 4096^3 at 2 * 4096^3 flops: between the f16 peak and ten times it */
    assert_true(tc > 2.0 * 4096.0 * 4096 * 4096 / 745e12 &&
                tc < 10 * 2.0 * 4096.0 * 4096 * 4096 / 745e12);
    ops_graph_free(g);

    /* 1024 x 1024 x 4096: 256 x 128 tiles give 32 blocks, 64 x 64 give 256. */
    g = emit_test_graph(json, "M=1024,N=1024,K=4096");
    double tiny = est(g, OPS_PREC_EXACT, sched(F16, 256, 128, 32, 4, 2, 3, 1, 1, XOR));
    double full = est(g, OPS_PREC_EXACT, sched(F16, 64, 64, 32, 2, 2, 3, 1, 1, XOR));
    double split = est(g, OPS_PREC_EXACT, sched(F16, 256, 128, 32, 4, 2, 3, 4, 1, XOR));
    assert_true(full < tiny);
    assert_true(split < tiny);
    /* deeper pipelines are no slower */
    double s2 = est(g, OPS_PREC_EXACT, sched(F16, 64, 64, 32, 2, 2, 2, 1, 1, XOR));
    assert_true(full <= s2);
    ops_graph_free(g);
    free(json);

    /* tf32 beats FFMA on f32 when allowed */
    json = plain_gemm("f32");
    g = emit_test_graph(json, "M=4096,N=4096,K=4096");
    double t32 = est(g, OPS_PREC_TF32, sched(TF32, 128, 128, 32, 2, 2, 3, 1, 8, XOR));
    double f32 = est(g, OPS_PREC_TF32, sched(FFMA, 128, 128, 16, 2, 2, 3, 1, 8, PAD));
    assert_true(t32 < f32);
    ops_graph_free(g);
    free(json);
}

/* ---- index math ---- */

static void test_raster_bijection(void **state)
{
    (void)state;
    static const int dims[][2] = {{1, 1},  {1, 7},  {7, 1},   {8, 8},
                                  {13, 5}, {5, 13}, {32, 32}, {33, 17}};
    static const int groups[] = {1, 2, 4, 8, 16};
    for (size_t d = 0; d < KT_ARRAY_LEN(dims); d++) {
        int tm_n = dims[d][0], tn_n = dims[d][1];
        for (size_t gi = 0; gi < KT_ARRAY_LEN(groups); gi++) {
            char *seen = calloc((size_t)tm_n * tn_n, 1);
            for (int pid = 0; pid < tm_n * tn_n; pid++) {
                int tm, tn;
                ops_gemm_raster(pid, tm_n, tn_n, groups[gi], &tm, &tn);
                assert_true(tm >= 0 && tm < tm_n && tn >= 0 && tn < tn_n);
                assert_int_equal(seen[tm * tn_n + tn], 0);
                seen[tm * tn_n + tn] = 1;
            }
            free(seen);
        }
    }
    /* group 1 is row-major; a group of 4 walks 4 rows down a column first */
    int tm, tn;
    ops_gemm_raster(5, 8, 8, 1, &tm, &tn);
    assert_true(tm == 0 && tn == 5);
    ops_gemm_raster(5, 8, 8, 4, &tm, &tn);
    assert_true(tm == 1 && tn == 1);
}

/* The 128-byte phase of 8 rows at one 16-byte column: distinct bank groups. */
static void check_ldsm_phase(int layout, int cols, int esize, int pad)
{
    int e16 = 16 / esize;
    for (int r0 = 0; r0 < 64; r0 += 8)
        for (int c = 0; c < cols; c += e16) {
            int used = 0;
            for (int r = r0; r < r0 + 8; r++) {
                int byte = ops_gemm_smem_slot(layout, cols, esize, pad, r, c) * esize;
                assert_int_equal(byte % 16, 0); /* ldmatrix rows and cp.async need 16 bytes */
                int group = byte / 16 % 8;
                assert_int_equal(used >> group & 1, 0);
                used |= 1 << group;
            }
        }
}

static void test_smem_swizzle(void **state)
{
    (void)state;
    static const int col_bytes[] = {16, 32, 64, 128, 256, 512};
    for (int layout = PAD; layout <= XOR; layout++)
        for (int esize = 2; esize <= 4; esize += 2)
            for (size_t ci = 0; ci < KT_ARRAY_LEN(col_bytes); ci++) {
                int cols = col_bytes[ci] / esize, rows = 64;
                int pad = layout == PAD ? 16 / esize : 0;
                int slots = rows * (cols + pad);
                char *seen = calloc((size_t)slots, 1);
                for (int r = 0; r < rows; r++)
                    for (int c = 0; c < cols; c++) {
                        int s = ops_gemm_smem_slot(layout, cols, esize, pad, r, c);
                        assert_true(s >= 0 && s < slots);
                        assert_int_equal(seen[s], 0);
                        seen[s] = 1;
                        /* 16-byte chunks stay contiguous (vector copies, ldmatrix rows) */
                        if (c % (16 / esize))
                            assert_int_equal(
                                s, ops_gemm_smem_slot(layout, cols, esize, pad, r, c - 1) + 1);
                    }
                free(seen);
                if (col_bytes[ci] >= 32 && (layout == XOR || (col_bytes[ci] / 16) % 2 == 0))
                    check_ldsm_phase(layout, cols, esize, pad);
            }
}

/* ldmatrix model: with row addresses from ops_gemm_ldsm_lane, which stored (row, col) lands in
 * (lane, register j, half h)? 32-bit elements (tf32) are pairs of 16-bit halves. */
static void ldsm_model(int kind, bool trans, bool b32, int lane, int j, int h, int *row, int *col)
{
    int src = 8 * j; /* lanes 8j..8j+7 address matrix j's rows */
    if (!trans) {
        int mr = lane / 4, half = 2 * (lane % 4) + h;
        int r, c;
        ops_gemm_ldsm_lane(kind, src + mr, &r, &c);
        *row = r;
        *col = b32 ? c + half / 2 : c + half;
    } else {
        int mr = 2 * (lane % 4) + h;
        int r, c;
        ops_gemm_ldsm_lane(kind, src + mr, &r, &c);
        *row = r;
        *col = c + lane / 4;
    }
}

static void test_fragment_maps(void **state)
{
    (void)state;
    enum { A_K, A_M, B_N, B_K, A_K_TF32, B_K_TF32 };
    for (int lane = 0; lane < 32; lane++) {
        int g = lane / 4, t = lane % 4;
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++) {
                /* mma m16n8k16 A: reg j half h at row g (+8 for j odd), k 2t + h (+8 for j >= 2) */
                int am = g + (j & 1) * 8, ak = 2 * t + h + (j >> 1) * 8;
                int r, c;
                ldsm_model(A_K, false, false, lane, j, h, &r, &c);
                assert_true(r == am && c == ak); /* stored [m][k] */
                ldsm_model(A_M, true, false, lane, j, h, &r, &c);
                assert_true(r == ak && c == am); /* stored [k][m] */
                /* B: x4 register j is b[j >> 1][j & 1]: k 2t + h (+8 for j odd), n g (+8 for
                 * j >= 2) */
                int bk = 2 * t + h + (j & 1) * 8, bn = g + (j >> 1) * 8;
                ldsm_model(B_N, true, false, lane, j, h, &r, &c);
                assert_true(r == bk && c == bn); /* stored [k][n] */
                ldsm_model(B_K, false, false, lane, j, h, &r, &c);
                assert_true(r == bn && c == bk); /* stored [n][k] */
            }
        for (int j = 0; j < 4; j++) {
            /* mma m16n8k8 tf32 A: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4) */
            int r, c;
            ldsm_model(A_K_TF32, false, true, lane, j, 0, &r, &c);
            assert_true(r == g + (j & 1) * 8 && c == t + (j >> 1) * 4);
            /* B: b[j >> 1][j & 1] = (k t (+4 for j odd), n g (+8 for j >= 2)), stored [n][k] */
            ldsm_model(B_K_TF32, false, true, lane, j, 0, &r, &c);
            assert_true(r == g + (j >> 1) * 8 && c == t + (j & 1) * 4);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches),         cmocka_unit_test(test_counts),
        cmocka_unit_test(test_prefix_skip),     cmocka_unit_test(test_raster_bijection),
        cmocka_unit_test(test_smem_swizzle),    cmocka_unit_test(test_fragment_maps),
        cmocka_unit_test(test_estimate),        cmocka_unit_test(test_launch_and_golden),
        cmocka_unit_test(test_wgmma),           cmocka_unit_test(test_compile_ragged),
        cmocka_unit_test(test_compile_sm80),    cmocka_unit_test(test_serial_splitk),
        cmocka_unit_test(test_cluster_splitk),  cmocka_unit_test(test_compile_spread_sm90),
        cmocka_unit_test(test_wgmma16),         cmocka_unit_test(test_wgmma16_dual),
        cmocka_unit_test(test_wgmma16_splitk),  cmocka_unit_test(test_wgmma16_streamk),
        cmocka_unit_test(test_compile_wgmma16),
    };
    return cmocka_run_group_tests_name("emit gemm", tests, NULL, NULL);
}
