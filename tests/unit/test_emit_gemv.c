/* The gemv family: which groups it takes (A [M, K] x B [K, 1], or the decode form X [T, K] x
 * W [N, K]^T with few token rows, with an elementwise epilogue),
 * its prune rules, and that its kept candidates compile with NVRTC for sm_90a without spills,
 * including ragged shapes and an epilogue with broadcast operands. Correctness on the GPU is in
 * tests/gpu/test_gpu_families.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ops/ops.h"
#include "tests/unit/emit_test_util.h"

enum { THREADS, TPR, ROWS, VEC, LOAD, MATH, KSPLIT, DEPTH };
enum { LOAD_CACHED, LOAD_PREFETCH, LOAD_STREAM };
enum { MATH_FFMA, MATH_MMA };

static const char gemv_f16[] = "{\"name\":\"gemv\",\"inputs\":{"
                               "\"A\":{\"dtype\":\"f16\",\"shape\":[\"M\",\"K\"]},"
                               "\"B\":{\"dtype\":\"f16\",\"shape\":[\"K\",\"N\"]}},"
                               "\"nodes\":[{\"out\":\"C\",\"op\":\"matmul\",\"in\":[\"A\",\"B\"]}],"
                               "\"outputs\":[\"C\"]}";

/* f32 with an epilogue reading a per-row bias and a scalar-broadcast scale. */
static const char gemv_f32_epi[] =
    "{\"name\":\"gemv_epi\",\"inputs\":{"
    "\"W\":{\"dtype\":\"f32\",\"shape\":[\"M\",\"K\"]},"
    "\"x\":{\"dtype\":\"f32\",\"shape\":[\"K\",1]},"
    "\"bias\":{\"dtype\":\"f32\",\"shape\":[\"M\",1]},"
    "\"s\":{\"dtype\":\"f32\",\"shape\":[1]}},"
    "\"nodes\":[{\"out\":\"t0\",\"op\":\"matmul\",\"in\":[\"W\",\"x\"]},"
    "{\"out\":\"t1\",\"op\":\"add\",\"in\":[\"t0\",\"bias\"]},"
    "{\"out\":\"t2\",\"op\":\"mul\",\"in\":[\"t1\",\"s\"]},"
    "{\"out\":\"y\",\"op\":\"silu\",\"in\":[\"t2\"]}],"
    "\"outputs\":[\"y\"]}";

/* The decode form as a PyTorch nn.Linear computes it (the weight [out, in]), with a per-column
 * bias and a residual of the output's shape after an activation. */
static const char decode_bf16[] =
    "{\"name\":\"linear_decode\",\"inputs\":{"
    "\"X\":{\"dtype\":\"bf16\",\"shape\":[\"T\",\"K\"]},"
    "\"W\":{\"dtype\":\"bf16\",\"shape\":[\"N\",\"K\"],\"const\":true},"
    "\"bias\":{\"dtype\":\"bf16\",\"shape\":[\"N\"],\"const\":true},"
    "\"R\":{\"dtype\":\"bf16\",\"shape\":[\"T\",\"N\"]}},"
    "\"nodes\":[{\"out\":\"t0\",\"op\":\"matmul\",\"in\":[\"X\",\"W\"],\"transpose_b\":true},"
    "{\"out\":\"t1\",\"op\":\"add\",\"in\":[\"t0\",\"bias\"]},"
    "{\"out\":\"t2\",\"op\":\"silu\",\"in\":[\"t1\"]},"
    "{\"out\":\"Y\",\"op\":\"add\",\"in\":[\"t2\",\"R\"]}],"
    "\"outputs\":[\"Y\"]}";

static const ops_family *fam(void)
{
    return ops_family_get(OPS_FAM_GEMV);
}

static bool takes(const char *json, const char *shapes)
{
    ops_group grp;
    ops_graph *g = emit_test_make(json, shapes, &grp);
    bool m = fam()->matches(&grp);
    ops_graph_free(g);
    return m;
}

static void test_matches(void **state)
{
    (void)state;
    assert_true(takes(gemv_f16, "M=7680,N=1,K=2560"));
    assert_true(takes(gemv_f32_epi, "M=100,K=33"));
    assert_false(takes(gemv_f16, "M=7680,N=2,K=2560")); /* two columns: the gemm family */
    /* the decode form: 1 to 64 token rows against an [N, K] weight */
    assert_true(takes(decode_bf16, "T=1,N=4096,K=4096"));
    assert_true(takes(decode_bf16, "T=16,N=333,K=1003"));
    assert_true(takes(decode_bf16, "T=64,N=4096,K=4096"));
    assert_false(takes(decode_bf16, "T=65,N=4096,K=4096")); /* the gemm family's tiles */
    /* 65 rows against a transposed [1, 32]: past the decode form's 64 tokens, not a vector */
    assert_false(takes("{\"name\":\"t\",\"inputs\":{"
                       "\"A\":{\"dtype\":\"f32\",\"shape\":[65,32]},"
                       "\"B\":{\"dtype\":\"f32\",\"shape\":[1,32]}},"
                       "\"nodes\":[{\"out\":\"C\",\"op\":\"matmul\",\"in\":[\"A\",\"B\"],"
                       "\"transpose_b\":true}],\"outputs\":[\"C\"]}",
                       ""));
    assert_false(takes("{\"name\":\"b\",\"inputs\":{"
                       "\"A\":{\"dtype\":\"f32\",\"shape\":[2,64,32]},"
                       "\"B\":{\"dtype\":\"f32\",\"shape\":[2,32,1]}},"
                       "\"nodes\":[{\"out\":\"C\",\"op\":\"matmul\",\"in\":[\"A\",\"B\"]}],"
                       "\"outputs\":[\"C\"]}",
                       ""));
}

static ops_schedule sched(int threads, int tpr, int rows, int vec)
{
    ops_schedule s = {.family = OPS_FAM_GEMV};
    s.v[THREADS] = threads;
    s.v[TPR] = tpr;
    s.v[ROWS] = rows;
    s.v[VEC] = vec;
    s.v[MATH] = MATH_FFMA;
    s.v[KSPLIT] = 1;
    s.v[DEPTH] = 2;
    return s;
}

static const char *why(const char *json, const char *shapes, ops_schedule s)
{
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    ops_graph *g = emit_test_make(json, shapes, &grp);
    const char *r = fam()->prune(&grp, &s, &dev);
    ops_graph_free(g);
    return r ? r : "kept";
}

static void test_prune(void **state)
{
    (void)state;
    assert_string_equal(why(gemv_f16, "M=7680,N=1,K=2560", sched(64, 32, 1, 8)), "kept");
    /* f32 rows: 8 elements would be a 32-byte load */
    assert_string_equal(why(gemv_f32_epi, "M=7680,K=2560", sched(64, 32, 1, 8)), "align");
    assert_string_equal(why(gemv_f32_epi, "M=7680,K=2560", sched(64, 32, 1, 4)), "kept");
    /* K odd: rows start unaligned, scalar loads only */
    assert_string_equal(why(gemv_f16, "M=7680,N=1,K=2561", sched(64, 32, 1, 2)), "divisibility");
    assert_string_equal(why(gemv_f16, "M=7680,N=1,K=2561", sched(64, 32, 1, 1)), "kept");
    /* short rows: half the lanes cover one in a step, so fewer lanes per row */
    assert_string_equal(why(gemv_f16, "M=7680,N=1,K=64", sched(64, 32, 1, 8)), "redundant");
    assert_string_equal(why(gemv_f16, "M=7680,N=1,K=64", sched(64, 8, 1, 8)), "kept");
    /* the decode form: T x R sums per lane count against the register budget */
    assert_string_equal(why(decode_bf16, "T=16,N=14336,K=4096", sched(64, 32, 1, 8)), "kept");
    assert_string_equal(why(decode_bf16, "T=16,N=14336,K=4096", sched(64, 32, 4, 8)), "regs");
    /* past 16 tokens only the tensor cores */
    assert_string_equal(why(decode_bf16, "T=17,N=14336,K=4096", sched(64, 32, 1, 8)), "shape");
    ops_schedule m = sched(128, 32, 1, 8);
    m.v[MATH] = MATH_MMA;
    assert_string_equal(why(decode_bf16, "T=64,N=14336,K=4096", m), "kept");
    assert_string_equal(why(gemv_f16, "M=7680,N=1,K=2560", m), "kept");
    assert_string_equal(why(gemv_f32_epi, "M=7680,K=2560", m), "shape"); /* f32: FFMA only */
    assert_string_equal(why(decode_bf16, "T=16,N=4096,K=4092", m), "divisibility");
    m.v[TPR] = 16; /* FFMA's knobs at one value */
    assert_string_equal(why(decode_bf16, "T=16,N=4096,K=4096", m), "redundant");
    m.v[TPR] = 32;
    m.v[ROWS] = 2; /* a warp's second row block shares the x loads of 2+ tiles only */
    assert_string_equal(why(decode_bf16, "T=8,N=4096,K=4096", m), "redundant");
    assert_string_equal(why(decode_bf16, "T=16,N=4096,K=4096", m), "kept");
    m.v[ROWS] = 1;
    m.v[KSPLIT] = 8; /* more warps than the block has */
    assert_string_equal(why(decode_bf16, "T=16,N=4096,K=4096", m), "redundant");
    /* the ring: deeper than a warp's steps is redundant, eight steps of 8 tiles too many
     * registers; FFMA has no ring */
    m.v[KSPLIT] = 4;
    m.v[DEPTH] = 8;
    assert_string_equal(why(decode_bf16, "T=16,N=4096,K=4096", m), "kept");
    assert_string_equal(why(decode_bf16, "T=16,N=4096,K=768", m), "redundant"); /* 6 steps */
    assert_string_equal(why(decode_bf16, "T=64,N=4096,K=4096", m), "regs");
    m.v[DEPTH] = 2;
    assert_string_equal(why(decode_bf16, "T=64,N=4096,K=4096", m), "kept");
    ops_schedule f = sched(64, 32, 1, 8);
    f.v[DEPTH] = 4;
    assert_string_equal(why(decode_bf16, "T=16,N=14336,K=4096", f), "redundant");
}

static void emit_one(const ops_group *grp, const ops_schedule *s, ops_emitted *e)
{
    ops_device dev;
    ops_device_h100(&dev);
    ops_diag d = {0};
    if (fam()->emit(grp, s, &dev, e, &d) < 0)
        fail_msg("emit: %s", d.msg);
    assert_int_equal(e->n_kernels, 1);
    assert_int_equal(e->kernels[0].block[0], (uint32_t)s->v[THREADS]);
}

/* The kept candidates of a graph and shapes (only those of math `math`, or all with -1): a spread
 * of at most max compiled for arch, no spills. Returns how many compiled. */
static int compile_kept(const char *json, const char *shapes, int math, int max, const char *arch)
{
    ops_device dev;
    ops_device_h100(&dev);
    ops_group grp;
    ops_graph *g = emit_test_make(json, shapes, &grp);
    emit_test_list l = {0}, pick = {0};
    assert_int_equal(ops_family_enumerate(fam(), &grp, &dev, emit_test_collect, &l, NULL), 0);
    for (int i = 0; i < l.n; i++)
        if (math < 0 || l.s[i].v[MATH] == math)
            emit_test_collect(&l.s[i], &pick);
    assert_true(pick.n > 0);
    int n = emit_test_compile_spread(&grp, &pick, max, arch, emit_one);
    print_message("%s %s: %d kept%s, %d compiled for %s\n", g->name, shapes, pick.n,
                  math == MATH_MMA ? " (mma)" : "", n, arch);
    free(l.s);
    free(pick.s);
    ops_graph_free(g);
    return n;
}

/* The cache-hinted loads of A: sm_80+ only, every load width (16-bit data: 16, 8, 4 and 2
 * bytes) compiles for sm_90a and sm_80, and the streamed kernel's source is pinned. */
static void test_load_hints(void **state)
{
    (void)state;
    ops_device dev, volta;
    ops_device_h100(&dev);
    volta = dev;
    volta.sm_major = 7;
    ops_group grp;
    ops_graph *g = emit_test_make(gemv_f16, "M=7680,N=1,K=2552", &grp);
    ops_schedule s = sched(64, 32, 1, 8);
    s.v[LOAD] = LOAD_STREAM;
    assert_null(fam()->prune(&grp, &s, &dev));
    assert_string_equal(fam()->prune(&grp, &s, &volta), "shape");
    s.v[LOAD] = LOAD_CACHED;
    assert_null(fam()->prune(&grp, &s, &volta));
    emit_test_list pick = {0};
    for (int load = LOAD_PREFETCH; load <= LOAD_STREAM; load++)
        for (int vec = 1; vec <= 8; vec *= 2) {
            s = sched(64, 32, 1, vec);
            s.v[LOAD] = load;
            assert_null(fam()->prune(&grp, &s, &dev));
            emit_test_collect(&s, &pick);
        }
    assert_int_equal(emit_test_compile_spread(&grp, &pick, pick.n, "sm_90a", emit_one), 8);
    assert_int_equal(emit_test_compile_spread(&grp, &pick, pick.n, "sm_80", emit_one), 8);
    free(pick.s);
    ops_emitted e = {0};
    s = sched(64, 32, 1, 8);
    s.v[LOAD] = LOAD_STREAM;
    emit_one(&grp, &s, &e);
    /* the stream hints come from the device library's wrappers, not pasted PTX */
    assert_non_null(strstr(e.source, "kt_ld_nc_stream(arow[r] + c, policy)"));
    assert_null(strstr(emit_test_body(e.source), "asm("));
    assert_true(emit_test_has(e.source, "createpolicy.fractional.L2::evict_first"));
    assert_true(emit_test_has(e.source, "ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4"));
    emit_test_golden("gemv_f16_stream.cu", e.source);
    ops_emitted_free(&e);
    ops_graph_free(g);
}

/* The decode form's kernel: A's elements converted once per step and used for every token row,
 * the output and the residual indexed by (t, m), the per-column bias by m. */
static void test_decode(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = emit_test_make(decode_bf16, "T=5,N=1000,K=1000", &grp);
    ops_schedule s = sched(64, 32, 1, 8);
    s.v[LOAD] = LOAD_STREAM;
    ops_emitted e = {0};
    emit_one(&grp, &s, &e);
    assert_non_null(strstr(e.source, "T = 5;"));
    assert_non_null(strstr(e.source, "af[r][7] = "));
    assert_non_null(strstr(e.source, "acc[r][t] = fmaf(af[r][7], x7, acc[r][t]);"));
    assert_non_null(strstr(e.source, "xv + (long long)t * (K / VEC) + c"));
    assert_non_null(strstr(e.source, "y[(long long)t * M + m] = "));
    assert_non_null(strstr(e.source, "in2[(m)]"));            /* bias [N] */
    assert_non_null(strstr(e.source, "in3[(m + t * 1000)]")); /* R [T, N] */
    /* 1000 rows of W, two lane groups of 32 a block, a row each: 500 blocks */
    assert_int_equal(e.kernels[0].grid[0], 500);
    ops_emitted_free(&e);
    ops_graph_free(g);
}

/* The tensor-core kernel: k split across warps with a fixed-order sum, two row blocks a warp,
 * both 8-token tiles fed by one x load each; ragged rows, tokens and k compile too. */
static void test_mma(void **state)
{
    (void)state;
    ops_group grp;
    ops_graph *g = emit_test_make(decode_bf16, "T=16,N=4096,K=4096", &grp);
    ops_schedule s = sched(256, 32, 2, 8);
    s.v[MATH] = MATH_MMA;
    s.v[KSPLIT] = 2;
    s.v[LOAD] = LOAD_STREAM;
    ops_device dev;
    ops_device_h100(&dev);
    assert_null(fam()->prune(&grp, &s, &dev));
    ops_emitted e = {0};
    emit_one(&grp, &s, &e);
    assert_non_null(strstr(e.source, "kt_mma_m16n8k16_bf16(acc[r][j], a1, b1);"));
    assert_non_null(strstr(e.source, "sum += part[warp + k][e][lane];"));
    assert_null(strstr(emit_test_body(e.source), "asm("));
    /* 4096 rows, 32 a warp (two blocks of 16), 4 row groups of 2 warps a block: 32 blocks */
    assert_int_equal(e.kernels[0].grid[0], 32);
    emit_test_golden("gemv_bf16_decode_mma.cu", e.source);
    ops_emitted_free(&e);
    /* the ring: DEPTH steps loaded ahead, each slot refilled right after its products */
    s.v[DEPTH] = 8;
    s.v[ROWS] = 1;
    assert_null(fam()->prune(&grp, &s, &dev));
    emit_one(&grp, &s, &e);
    assert_non_null(strstr(e.source, "constexpr int DEPTH = 8;"));
    assert_non_null(strstr(e.source, "load(d, c0 + (d + DEPTH) * KSPLIT);"));
    assert_non_null(strstr(e.kernels[0].entry, "_d8_"));
    emit_test_list deep = {0};
    emit_test_collect(&s, &deep);
    s.v[KSPLIT] = 8;
    s.v[DEPTH] = 4;
    emit_test_collect(&s, &deep);
    assert_int_equal(emit_test_compile_spread(&grp, &deep, deep.n, "sm_90a", emit_one), 2);
    free(deep.s);
    ops_emitted_free(&e);
    ops_graph_free(g);
    assert_true(compile_kept(decode_bf16, "T=16,N=4096,K=4096", MATH_MMA, 12, "sm_90a") >= 6);
    assert_true(compile_kept(decode_bf16, "T=64,N=14336,K=4096", MATH_MMA, 8, "sm_90a") >= 4);
    assert_true(compile_kept(decode_bf16, "T=5,N=1000,K=1000", MATH_MMA, 8, "sm_90a") >= 4);
    assert_true(compile_kept(gemv_f16, "M=7680,N=1,K=2552", MATH_MMA, 6, "sm_80") >= 3);
}

/* A row read by several warps (TPR > 32, as a reduction kernel reads one: a block's loads in one
 * stretch of the row): each warp's sum, then the row's first lane adds them in warp order. */
static void test_cross_warp_rows(void **state)
{
    (void)state;
    assert_string_equal(why(gemv_f16, "M=6144,N=1,K=4096", sched(256, 128, 1, 8)), "kept");
    assert_string_equal(why(gemv_f16, "M=6144,N=1,K=4096", sched(128, 256, 1, 8)), "redundant");
    assert_string_equal(why(gemv_f16, "M=6144,N=1,K=4096", sched(256, 128, 2, 8)), "redundant");
    const char *const json[] = {gemv_f16, decode_bf16};
    const char *const shapes[] = {"M=6144,N=1,K=4096", "T=3,N=6144,K=4096"};
    for (int f = 0; f < 2; f++) {
        ops_group grp;
        ops_graph *g = emit_test_make(json[f], shapes[f], &grp);
        ops_schedule s = sched(256, 128, 1, 8);
        s.v[LOAD] = LOAD_STREAM;
        ops_emitted e = {0};
        emit_one(&grp, &s, &e);
        assert_non_null(strstr(e.source, "sum += part[(threadIdx.x >> 5) + w][t];"));
        assert_non_null(strstr(e.source, "for (int c = lane; c < K / VEC; c += TPR)"));
        /* 6144 rows, 2 a block */
        assert_int_equal(e.kernels[0].grid[0], 3072);
        emit_test_list one = {0};
        emit_test_collect(&s, &one);
        s.v[TPR] = 256;
        emit_test_collect(&s, &one);
        assert_int_equal(emit_test_compile_spread(&grp, &one, one.n, "sm_90a", emit_one), 2);
        free(one.s);
        ops_emitted_free(&e);
        ops_graph_free(g);
    }
}

static void test_compile(void **state)
{
    (void)state;
    assert_true(compile_kept(decode_bf16, "T=16,N=4096,K=4096", -1, 16, "sm_90a") >= 8);
    assert_true(compile_kept(decode_bf16, "T=3,N=333,K=1003", -1, 8, "sm_90a") >=
                1); /* ragged: vec 1 */
    assert_true(compile_kept(gemv_f16, "M=7680,N=1,K=2560", -1, 24, "sm_90a") >= 12);
    assert_true(compile_kept(gemv_f16, "M=1000,N=1,K=777", -1, 8, "sm_90a") >=
                1); /* ragged: vec 1 */
    assert_true(compile_kept(gemv_f32_epi, "M=333,K=1000", -1, 12, "sm_90a") >= 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches),    cmocka_unit_test(test_prune),
        cmocka_unit_test(test_load_hints), cmocka_unit_test(test_decode),
        cmocka_unit_test(test_mma),        cmocka_unit_test(test_cross_warp_rows),
        cmocka_unit_test(test_compile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
