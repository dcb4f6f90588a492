/* The library family: which matmul groups map onto cuBLASLt epilogues, and the cuBLASLt call
 * ops_library_describe gives (the column-major transpose trick, leading dims, batches). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ops/library.h"
#include "ops/ops.h"
#include "tests/unit/emit_test_util.h"

/* A matmul a [M?, K] x w, then the nodes in `tail` (JSON, may be empty), output "y". */
static ops_graph *graph_of(const char *inputs, const char *nodes, const char *shapes)
{
    char json[4096];
    snprintf(json, sizeof(json),
             "{\"name\":\"lib\",\"inputs\":{%s},\"nodes\":[%s],"
             "\"outputs\":[\"y\"]}",
             inputs, nodes);
    return emit_test_graph(json, shapes);
}

static bool matches(ops_graph *g)
{
    ops_group grp;
    emit_test_whole_group(g, &grp);
    bool m = ops_family_get(OPS_FAM_LIBRARY)->matches(&grp);
    ops_graph_free(g);
    return m;
}

#define IN_F16                                                                                     \
    "\"a\":{\"dtype\":\"f16\",\"shape\":[64,32]},\"w\":{\"dtype\":\"f16\",\"shape\":[32,48]}"
#define MM "{\"out\":\"t\",\"op\":\"matmul\",\"in\":[\"a\",\"w\"]}"

static void test_matches_and_rejects(void **state)
{
    (void)state;
    const char *bias = IN_F16 ",\"b\":{\"dtype\":\"f16\",\"shape\":[48]}";
    /* accepted chains */
    assert_true(
        matches(graph_of(IN_F16, "{\"out\":\"y\",\"op\":\"matmul\",\"in\":[\"a\",\"w\"]}", "")));
    assert_true(
        matches(graph_of(bias, MM ",{\"out\":\"y\",\"op\":\"add\",\"in\":[\"t\",\"b\"]}", "")));
    assert_true(
        matches(graph_of(bias, MM ",{\"out\":\"y\",\"op\":\"add\",\"in\":[\"b\",\"t\"]}", "")));
    assert_true(
        matches(graph_of(IN_F16, MM ",{\"out\":\"y\",\"op\":\"relu\",\"in\":[\"t\"]}", "")));
    assert_true(
        matches(graph_of(IN_F16, MM ",{\"out\":\"y\",\"op\":\"gelu_tanh\",\"in\":[\"t\"]}", "")));
    assert_true(matches(graph_of(bias,
                                 MM ",{\"out\":\"u\",\"op\":\"add\",\"in\":[\"t\",\"b\"]},"
                                    "{\"out\":\"y\",\"op\":\"gelu_tanh\",\"in\":[\"u\"]}",
                                 "")));
    /* rejected: erf gelu, other activations, activation before bias, column bias, full-matrix
     * add, scalar add, a second matmul */
    assert_false(
        matches(graph_of(IN_F16, MM ",{\"out\":\"y\",\"op\":\"gelu\",\"in\":[\"t\"]}", "")));
    assert_false(
        matches(graph_of(IN_F16, MM ",{\"out\":\"y\",\"op\":\"sigmoid\",\"in\":[\"t\"]}", "")));
    assert_false(matches(graph_of(bias,
                                  MM ",{\"out\":\"u\",\"op\":\"relu\",\"in\":[\"t\"]},"
                                     "{\"out\":\"y\",\"op\":\"add\",\"in\":[\"u\",\"b\"]}",
                                  "")));
    assert_false(matches(graph_of(IN_F16 ",\"b\":{\"dtype\":\"f16\",\"shape\":[64,1]}",
                                  MM ",{\"out\":\"y\",\"op\":\"add\",\"in\":[\"t\",\"b\"]}", "")));
    assert_false(matches(graph_of(IN_F16 ",\"b\":{\"dtype\":\"f16\",\"shape\":[64,48]}",
                                  MM ",{\"out\":\"y\",\"op\":\"add\",\"in\":[\"t\",\"b\"]}", "")));
    assert_false(
        matches(graph_of(IN_F16, MM ",{\"out\":\"y\",\"op\":\"add\",\"in\":[\"t\",1.0]}", "")));
    assert_false(matches(graph_of(IN_F16,
                                  MM ",{\"out\":\"u\",\"op\":\"relu\",\"in\":[\"t\"]},"
                                     "{\"out\":\"y\",\"op\":\"neg\",\"in\":[\"u\"]}",
                                  "")));
    /* batch dims cuBLASLt's single stride cannot express */
    assert_false(matches(graph_of("\"a\":{\"dtype\":\"f32\",\"shape\":[2,1,8,4]},"
                                  "\"w\":{\"dtype\":\"f32\",\"shape\":[1,3,4,5]}",
                                  "{\"out\":\"y\",\"op\":\"matmul\",\"in\":[\"a\",\"w\"]}", "")));
}

static int count_cb(const ops_schedule *s, void *ctx)
{
    (void)s;
    (*(int *)ctx)++;
    return 0;
}

static void describe(const ops_graph *g, ops_precision prec, int heuristic, ops_lt_desc *lt)
{
    ops_group grp;
    emit_test_whole_group(g, &grp);
    grp.precision = prec;
    ops_schedule s = {.family = OPS_FAM_LIBRARY, .v = {heuristic}};
    ops_diag d = {0};
    if (ops_library_describe(&grp, &s, lt, &d) < 0)
        fail_msg("describe: %s", d.msg);
}

static void test_gemm_bias_relu(void **state)
{
    (void)state;
    char *text = NULL;
    char path[1024];
    kt_err err = {0};
    snprintf(path, sizeof(path), "%s/examples/gemm_bias_relu.json", getenv("KTUNE_SOURCE_ROOT"));
    assert_int_equal(kt_read_file(path, (size_t)1 << 30, &text, NULL, &err), 0);
    ops_graph *g = emit_test_graph(text, "M=1024");
    free(text);
    ops_group grp;
    emit_test_whole_group(g, &grp);
    const ops_family *f = ops_family_get(OPS_FAM_LIBRARY);
    assert_true(f->matches(&grp));
    ops_device dev;
    ops_device_h100(&dev);
    ops_prune_counts pc;
    int n = 0;
    assert_int_equal(ops_family_enumerate(f, &grp, &dev, count_cb, &n, &pc), 0);
    assert_int_equal(pc.kept, 8);
    assert_int_equal(n, 8);

    ops_lt_desc lt;
    describe(g, OPS_PREC_EXACT, 3, &lt);
    /* Y^T (256 x 1024) = W^T (256 x 512) A^T (512 x 1024) */
    assert_int_equal(lt.m, 256);
    assert_int_equal(lt.n, 1024);
    assert_int_equal(lt.k, 512);
    assert_int_equal(lt.transa, OPS_LT_OP_N);
    assert_int_equal(lt.transb, OPS_LT_OP_N);
    assert_int_equal(lt.lda, 256);
    assert_int_equal(lt.ldb, 512);
    assert_int_equal(lt.ldc, 256);
    assert_int_equal(lt.a_rows, 256);
    assert_int_equal(lt.a_cols, 512);
    assert_int_equal(lt.b_rows, 512);
    assert_int_equal(lt.b_cols, 1024);
    assert_int_equal(lt.a_tensor, ops_graph_find_tensor(g, "W"));
    assert_int_equal(lt.b_tensor, ops_graph_find_tensor(g, "A"));
    assert_int_equal(lt.c_tensor, ops_graph_find_tensor(g, "Y"));
    assert_int_equal(lt.bias_tensor, ops_graph_find_tensor(g, "bias"));
    assert_int_equal(lt.epilogue, OPS_LT_EPILOGUE_RELU_BIAS);
    assert_int_equal(lt.epilogue, 6); /* CUBLASLT_EPILOGUE_RELU_BIAS */
    assert_int_equal(lt.a_type, OPS_LT_R_16F);
    assert_int_equal(lt.c_type, 2); /* CUDA_R_16F */
    assert_int_equal(lt.compute, OPS_LT_COMPUTE_32F);
    assert_int_equal(lt.compute, 68); /* CUBLAS_COMPUTE_32F */
    assert_int_equal(lt.scale_type, OPS_LT_R_32F);
    assert_int_equal(lt.batch_count, 1);
    assert_int_equal(lt.heuristic_index, 3);
    assert_true(lt.workspace_bytes > 0);

    /* emit: no kernel, a comment naming the call */
    ops_schedule s = {.family = OPS_FAM_LIBRARY, .v = {0}};
    ops_emitted e;
    ops_diag d = {0};
    assert_int_equal(f->emit(&grp, &s, &dev, &e, &d), 0);
    assert_int_equal(e.n_kernels, 0);
    assert_true(e.workspace_bytes > 0);
    assert_non_null(strstr(e.source, "cublasLtMatmul("));
    assert_non_null(strstr(e.source, "CUBLASLT_EPILOGUE_RELU_BIAS"));
    assert_non_null(strstr(e.source, "family library"));
    emit_test_golden("library_gemm_bias_relu.txt", e.source);
    ops_emitted_free(&e);

    /* estimate: heuristic result 0 ranks first; sane magnitude (a 1 GFLOP f16 GEMM) */
    ops_estimate e0, e7;
    f->estimate(&grp, &s, &dev, &e0);
    ops_schedule s7 = {.family = OPS_FAM_LIBRARY, .v = {7}};
    f->estimate(&grp, &s7, &dev, &e7);
    assert_true(e0.seconds > 0 && e0.seconds < e7.seconds);
    assert_true(e0.seconds > 1e-6 && e0.seconds < 1e-3);
    assert_true(e0.flops >= 2.0 * 1024 * 512 * 256);
    ops_graph_free(g);
}

static void test_transposed(void **state)
{
    (void)state;
    /* A stored [K=32, M=64] (transpose_a), W stored [N=48, K=32] (transpose_b) */
    ops_graph *g = graph_of("\"a\":{\"dtype\":\"bf16\",\"shape\":[32,64]},"
                            "\"w\":{\"dtype\":\"bf16\",\"shape\":[48,32]}",
                            "{\"out\":\"t\",\"op\":\"matmul\",\"in\":[\"a\",\"w\"],"
                            "\"transpose_a\":true,\"transpose_b\":true},"
                            "{\"out\":\"y\",\"op\":\"gelu_tanh\",\"in\":[\"t\"]}",
                            "");
    ops_lt_desc lt;
    describe(g, OPS_PREC_EXACT, 0, &lt);
    assert_int_equal(lt.m, 48);
    assert_int_equal(lt.n, 64);
    assert_int_equal(lt.k, 32);
    assert_int_equal(lt.transa, OPS_LT_OP_T);
    assert_int_equal(lt.lda, 32); /* W rows hold K */
    assert_int_equal(lt.a_rows, 32);
    assert_int_equal(lt.a_cols, 48);
    assert_int_equal(lt.transb, OPS_LT_OP_T);
    assert_int_equal(lt.ldb, 64); /* A rows hold M */
    assert_int_equal(lt.b_rows, 64);
    assert_int_equal(lt.b_cols, 32);
    assert_int_equal(lt.ldc, 48);
    assert_int_equal(lt.epilogue, OPS_LT_EPILOGUE_GELU);
    assert_int_equal(lt.bias_tensor, -1);
    assert_int_equal(lt.a_type, OPS_LT_R_16BF);
    ops_graph_free(g);
}

static void test_batched(void **state)
{
    (void)state;
    /* A [B, M, K] x W [K, N]: the weight is reused across the batch (stride 0) */
    ops_graph *g = graph_of("\"a\":{\"dtype\":\"f32\",\"shape\":[\"B\",\"M\",32]},"
                            "\"w\":{\"dtype\":\"f32\",\"shape\":[32,48]},"
                            "\"b\":{\"dtype\":\"f32\",\"shape\":[1,48]}",
                            MM ",{\"out\":\"y\",\"op\":\"add\",\"in\":[\"t\",\"b\"]}", "B=6,M=40");
    ops_lt_desc lt;
    describe(g, OPS_PREC_EXACT, 1, &lt);
    assert_int_equal(lt.batch_count, 6);
    assert_int_equal(lt.stride_a, 0);       /* W */
    assert_int_equal(lt.stride_b, 40 * 32); /* A */
    assert_int_equal(lt.stride_c, 40 * 48);
    assert_int_equal(lt.m, 48);
    assert_int_equal(lt.n, 40);
    assert_int_equal(lt.epilogue, OPS_LT_EPILOGUE_BIAS);
    assert_int_equal(lt.compute, OPS_LT_COMPUTE_32F);
    describe(g, OPS_PREC_TF32, 1, &lt);
    assert_int_equal(lt.compute, OPS_LT_COMPUTE_32F_FAST_TF32);
    ops_graph_free(g);

    /* both operands batched */
    g = graph_of("\"a\":{\"dtype\":\"f16\",\"shape\":[2,3,16,8]},"
                 "\"w\":{\"dtype\":\"f16\",\"shape\":[2,3,8,24]}",
                 "{\"out\":\"y\",\"op\":\"matmul\",\"in\":[\"a\",\"w\"]}", "");
    describe(g, OPS_PREC_EXACT, 0, &lt);
    assert_int_equal(lt.batch_count, 6);
    assert_int_equal(lt.stride_a, 8 * 24);
    assert_int_equal(lt.stride_b, 16 * 8);
    assert_int_equal(lt.stride_c, 16 * 24);
    assert_int_equal(lt.epilogue, OPS_LT_EPILOGUE_DEFAULT);
    ops_graph_free(g);
}

static void test_estimate_order(void **state)
{
    (void)state;
    /* the same big GEMM: f16 on tensor cores beats f32 FFMA */
    ops_graph *g16 = graph_of("\"a\":{\"dtype\":\"f16\",\"shape\":[4096,4096]},"
                              "\"w\":{\"dtype\":\"f16\",\"shape\":[4096,4096]}",
                              "{\"out\":\"y\",\"op\":\"matmul\",\"in\":[\"a\",\"w\"]}", "");
    ops_graph *g32 = graph_of("\"a\":{\"dtype\":\"f32\",\"shape\":[4096,4096]},"
                              "\"w\":{\"dtype\":\"f32\",\"shape\":[4096,4096]}",
                              "{\"out\":\"y\",\"op\":\"matmul\",\"in\":[\"a\",\"w\"]}", "");
    ops_device dev;
    ops_device_h100(&dev);
    ops_group a, b;
    emit_test_whole_group(g16, &a);
    emit_test_whole_group(g32, &b);
    ops_schedule s = {.family = OPS_FAM_LIBRARY, .v = {0}};
    ops_estimate e16, e32, etf;
    const ops_family *f = ops_family_get(OPS_FAM_LIBRARY);
    f->estimate(&a, &s, &dev, &e16);
    f->estimate(&b, &s, &dev, &e32);
    b.precision = OPS_PREC_TF32;
    f->estimate(&b, &s, &dev, &etf);
    assert_true(e16.seconds < etf.seconds && etf.seconds < e32.seconds);
    ops_graph_free(g16);
    ops_graph_free(g32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_and_rejects), cmocka_unit_test(test_gemm_bias_relu),
        cmocka_unit_test(test_transposed),          cmocka_unit_test(test_batched),
        cmocka_unit_test(test_estimate_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
