/* The reference family and ops_emit_reference_graph: every canonical op emits an fp64 kernel
 * that compiles for sm_90a without spills, every example graph's reference program compiles,
 * and the launch descriptions (grid, arguments, workspace) are right. GPU agreement with
 * ops/reference.c is the GPU suite's job. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ops/ops.h"
#include "ops/reference_gpu.h"
#include "tests/unit/emit_test_util.h"

#include <dirent.h>

/* Sources compiled together through a 2-process pool (NVRTC serialises inside a process). */
typedef struct batch {
    srch_pool *pool;
    int submitted;
} batch;

static void batch_start(batch *bt)
{
    kt_err err = {0};
    srch_pool_opts o = {.arch = "sm_90a", .jobs = 2, .timeout_s = 120};
    bt->submitted = 0;
    if (srch_pool_new(&o, &bt->pool, &err) < 0)
        fail_msg("pool: %s", err.msg);
}

static void batch_add(batch *bt, const char *src)
{
    assert_int_equal(srch_pool_submit(bt->pool, src, (uint64_t)bt->submitted), 0);
    bt->submitted++;
}

static void batch_finish(batch *bt)
{
    kt_err err = {0};
    srch_compile_result r;
    int done = 0;
    while (srch_pool_next(bt->pool, &r, &err) == 0) {
        if (r.status != SRCH_COMPILE_OK)
            fail_msg("compile %llu failed: %s", (unsigned long long)r.tag, r.log);
        for (int k = 0; k < r.n_kernels; k++)
            if (r.kernels[k].spill_store_bytes || r.kernels[k].spill_load_bytes)
                fail_msg("kernel %s spills", r.kernels[k].name);
        done++;
        srch_compile_result_release(&r);
    }
    assert_int_equal(done, bt->submitted);
    srch_pool_free(bt->pool);
}

/* Emits the reference candidate of a one-node graph and queues it. */
static void emit_one(batch *bt, const char *json, const char *shapes, const char *entry_op)
{
    ops_graph *g = emit_test_graph(json, shapes);
    ops_group grp;
    emit_test_whole_group(g, &grp);
    const ops_family *f = ops_family_get(OPS_FAM_REFERENCE);
    if (!f->matches(&grp))
        fail_msg("reference does not match %s", json);
    ops_device dev;
    ops_device_h100(&dev);
    ops_schedule s = {.family = OPS_FAM_REFERENCE, .v = {256}};
    assert_null(f->prune(&grp, &s, &dev));
    ops_emitted e;
    ops_diag d = {0};
    if (f->emit(&grp, &s, &dev, &e, &d) < 0)
        fail_msg("emit: %s", d.msg);
    assert_int_equal(e.n_kernels, 1);
    char want[64];
    snprintf(want, sizeof(want), "ktune_reference_%s", entry_op);
    assert_string_equal(e.kernels[0].entry, want);
    assert_int_equal(e.kernels[0].block[0], 256);
    assert_int_equal(e.kernels[0].n_args, grp.n_in + 1);
    for (int i = 0; i < grp.n_in; i++)
        assert_int_equal(e.kernels[0].args[i].tensor, grp.in[i]);
    assert_int_equal(e.kernels[0].args[grp.n_in].tensor, grp.out[0]);
    assert_non_null(strstr(e.source, "double"));
    /* a reduction runs a block per output element (the block's threads split the reduced
     * elements), every other op a thread (attention a warp) per output */
    int64_t outputs = ops_shape_numel(&g->tensors[grp.out[0]].shape);
    if (ops_op_info_get(g->nodes[0].op)->kind == OPS_KIND_REDUCE) {
        assert_int_equal(e.kernels[0].grid[0], outputs);
        assert_non_null(strstr(e.source, "one block per output element"));
    } else if (g->nodes[0].op != OPS_ATTENTION) {
        assert_int_equal(e.kernels[0].grid[0], (outputs + 255) / 256);
    }
    ops_estimate est;
    f->estimate(&grp, &s, &dev, &est);
    assert_true(est.seconds > 0);
    batch_add(bt, e.source);
    ops_emitted_free(&e);
    ops_graph_free(g);
}

static const char *const unary_ops[] = {
    "neg", "abs",  "relu",  "gelu",   "gelu_tanh", "silu", "sigmoid",  "tanh",     "exp",
    "log", "sqrt", "rsqrt", "square", "recip",     "mish", "softplus", "hardtanh", "leaky_relu",
};

static void test_elementwise(void **state)
{
    (void)state;
    batch bt;
    batch_start(&bt);
    char json[1024];
    for (size_t i = 0; i < KT_ARRAY_LEN(unary_ops); i++) {
        snprintf(json, sizeof(json),
                 "{\"name\":\"u\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[\"M\",33]}},"
                 "\"nodes\":[{\"out\":\"y\",\"op\":\"%s\",\"in\":[\"x\"]}],\"outputs\":[\"y\"]}",
                 unary_ops[i]);
        emit_one(&bt, json, "M=7", unary_ops[i]);
    }
    /* clamp with one side, cast */
    emit_one(&bt,
             "{\"name\":\"c\",\"inputs\":{\"x\":{\"dtype\":\"f16\",\"shape\":[5,3]}},"
             "\"nodes\":[{\"out\":\"y\",\"op\":\"clamp\",\"in\":[\"x\"],\"min\":-1.5}],"
             "\"outputs\":[\"y\"]}",
             "", "clamp");
    emit_one(&bt,
             "{\"name\":\"c\",\"inputs\":{\"x\":{\"dtype\":\"f16\",\"shape\":[5,3]}},"
             "\"nodes\":[{\"out\":\"y\",\"op\":\"cast\",\"in\":[\"x\"],\"dtype\":\"f32\"}],"
             "\"outputs\":[\"y\"]}",
             "", "cast");
    /* binary with broadcasting both ways, and with scalars on either side */
    static const char *const bin[] = {"add", "sub", "mul", "div", "max", "min", "pow"};
    for (size_t i = 0; i < KT_ARRAY_LEN(bin); i++) {
        snprintf(json, sizeof(json),
                 "{\"name\":\"b\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[4,1,6]},"
                 "\"y\":{\"dtype\":\"f32\",\"shape\":[3,1]}},"
                 "\"nodes\":[{\"out\":\"z\",\"op\":\"%s\",\"in\":[\"x\",\"y\"]}],"
                 "\"outputs\":[\"z\"]}",
                 bin[i]);
        emit_one(&bt, json, "", bin[i]);
    }
    emit_one(&bt,
             "{\"name\":\"s\",\"inputs\":{\"x\":{\"dtype\":\"bf16\",\"shape\":[9]}},"
             "\"nodes\":[{\"out\":\"z\",\"op\":\"sub\",\"in\":[2.5,\"x\"]}],\"outputs\":[\"z\"]}",
             "", "sub");
    emit_one(&bt,
             "{\"name\":\"s\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[9,2]}},"
             "\"nodes\":[{\"out\":\"z\",\"op\":\"pow\",\"in\":[\"x\",3]}],\"outputs\":[\"z\"]}",
             "", "pow");
    batch_finish(&bt);
}

static void test_reductions(void **state)
{
    (void)state;
    batch bt;
    batch_start(&bt);
    static const char *const red[] = {"sum", "mean", "max", "min"};
    char json[1024];
    for (size_t i = 0; i < KT_ARRAY_LEN(red); i++) {
        for (int keep = 0; keep < 2; keep++) {
            snprintf(json, sizeof(json),
                     "{\"name\":\"r\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[3,5,7]}},"
                     "\"nodes\":[{\"out\":\"y\",\"op\":\"%s\",\"in\":[\"x\"],\"axes\":[%s],"
                     "\"keepdim\":%s}],\"outputs\":[\"y\"]}",
                     red[i], keep ? "0, 1" : "-2", keep ? "true" : "false");
            char entry[32];
            snprintf(entry, sizeof(entry), "%s", red[i]);
            ops_graph *g = emit_test_graph(json, "");
            /* the op's registered name is what the entry is named after */
            snprintf(entry, sizeof(entry), "%s", ops_op_info_get(g->nodes[0].op)->name);
            ops_graph_free(g);
            emit_one(&bt, json, "", entry);
        }
    }
    batch_finish(&bt);
}

static void test_contractions_and_layout(void **state)
{
    (void)state;
    batch bt;
    batch_start(&bt);
    /* matmul: plain, both transposes, batched with broadcast batch dims */
    emit_one(&bt,
             "{\"name\":\"m\",\"inputs\":{\"a\":{\"dtype\":\"f16\",\"shape\":[\"M\",13]},"
             "\"b\":{\"dtype\":\"f16\",\"shape\":[13,7]}},"
             "\"nodes\":[{\"out\":\"c\",\"op\":\"matmul\",\"in\":[\"a\",\"b\"]}],"
             "\"outputs\":[\"c\"]}",
             "M=5", "matmul");
    emit_one(&bt,
             "{\"name\":\"m\",\"inputs\":{\"a\":{\"dtype\":\"f32\",\"shape\":[13,5]},"
             "\"b\":{\"dtype\":\"f32\",\"shape\":[7,13]}},"
             "\"nodes\":[{\"out\":\"c\",\"op\":\"matmul\",\"in\":[\"a\",\"b\"],"
             "\"transpose_a\":true,\"transpose_b\":true}],\"outputs\":[\"c\"]}",
             "", "matmul");
    emit_one(&bt,
             "{\"name\":\"m\",\"inputs\":{\"a\":{\"dtype\":\"f32\",\"shape\":[2,1,5,13]},"
             "\"b\":{\"dtype\":\"f32\",\"shape\":[3,13,7]}},"
             "\"nodes\":[{\"out\":\"c\",\"op\":\"matmul\",\"in\":[\"a\",\"b\"]}],"
             "\"outputs\":[\"c\"]}",
             "", "matmul");
    /* conv2d: NCHW and NHWC with stride, padding, dilation and groups */
    emit_one(&bt,
             "{\"name\":\"c\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[2,6,11,9]},"
             "\"w\":{\"dtype\":\"f32\",\"shape\":[4,3,3,2]},"
             "\"b\":{\"dtype\":\"f32\",\"shape\":[4]}},"
             "\"nodes\":[{\"out\":\"y\",\"op\":\"conv2d\",\"in\":[\"x\",\"w\",\"b\"],"
             "\"stride\":[2,1],\"padding\":[1,2],\"dilation\":[1,2],\"groups\":2,"
             "\"layout\":\"NCHW\"}],\"outputs\":[\"y\"]}",
             "", "conv2d");
    emit_one(&bt,
             "{\"name\":\"c\",\"inputs\":{\"x\":{\"dtype\":\"f16\",\"shape\":[2,11,9,6]},"
             "\"w\":{\"dtype\":\"f16\",\"shape\":[4,3,2,3]}},"
             "\"nodes\":[{\"out\":\"y\",\"op\":\"conv2d\",\"in\":[\"x\",\"w\"],"
             "\"stride\":[1,2],\"padding\":[2,0],\"dilation\":[2,1],\"groups\":2,"
             "\"layout\":\"NHWC\"}],\"outputs\":[\"y\"]}",
             "", "conv2d");
    /* attention: causal with Sq != Skv, and with an explicit scale */
    emit_one(&bt,
             "{\"name\":\"a\",\"inputs\":{\"q\":{\"dtype\":\"f16\",\"shape\":[2,3,5,8]},"
             "\"k\":{\"dtype\":\"f16\",\"shape\":[2,3,7,8]},"
             "\"v\":{\"dtype\":\"f16\",\"shape\":[2,3,7,4]}},"
             "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"],"
             "\"causal\":true}],\"outputs\":[\"o\"]}",
             "", "attention");
    emit_one(&bt,
             "{\"name\":\"a\",\"inputs\":{\"q\":{\"dtype\":\"f32\",\"shape\":[5,8]},"
             "\"k\":{\"dtype\":\"f32\",\"shape\":[7,8]},"
             "\"v\":{\"dtype\":\"f32\",\"shape\":[7,4]}},"
             "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"],"
             "\"scale\":0.25}],\"outputs\":[\"o\"]}",
             "", "attention");
    /* grouped-query: 6 query heads over 2 k/v heads */
    emit_one(&bt,
             "{\"name\":\"a\",\"inputs\":{\"q\":{\"dtype\":\"bf16\",\"shape\":[2,6,5,8]},"
             "\"k\":{\"dtype\":\"bf16\",\"shape\":[2,2,7,8]},"
             "\"v\":{\"dtype\":\"bf16\",\"shape\":[2,2,7,4]}},"
             "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"],"
             "\"causal\":true}],\"outputs\":[\"o\"]}",
             "", "attention");
    /* layout: transpose (canonicalised to permute), permute, reshape */
    emit_one(&bt,
             "{\"name\":\"p\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[2,3,5]}},"
             "\"nodes\":[{\"out\":\"y\",\"op\":\"permute\",\"in\":[\"x\"],\"perm\":[2,0,1]}],"
             "\"outputs\":[\"y\"]}",
             "", "permute");
    emit_one(&bt,
             "{\"name\":\"t\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[2,3,5]}},"
             "\"nodes\":[{\"out\":\"y\",\"op\":\"transpose\",\"in\":[\"x\"]}],"
             "\"outputs\":[\"y\"]}",
             "", "permute");
    emit_one(&bt,
             "{\"name\":\"r\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[2,3,5]}},"
             "\"nodes\":[{\"out\":\"y\",\"op\":\"reshape\",\"in\":[\"x\"],\"shape\":[6,5]}],"
             "\"outputs\":[\"y\"]}",
             "", "reshape");
    batch_finish(&bt);
}

static void test_rejects(void **state)
{
    (void)state;
    /* two nodes: not a reference group */
    ops_graph *g = emit_test_graph("{\"name\":\"x\",\"inputs\":{\"x\":{\"dtype\":\"f32\","
                                   "\"shape\":[4]}},\"nodes\":[{\"out\":\"a\",\"op\":\"exp\","
                                   "\"in\":[\"x\"]},{\"out\":\"y\",\"op\":\"neg\",\"in\":[\"a\"]}],"
                                   "\"outputs\":[\"y\"]}",
                                   "");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    assert_false(ops_family_get(OPS_FAM_REFERENCE)->matches(&grp));
    ops_graph_free(g);
}

/* Symbol bindings for each example (small shapes: the reference is naive). */
static const char *example_shapes(const char *name)
{
    static const struct {
        const char *file, *shapes;
    } ex[] = {
        {"attention.json", "B=2,H=3,S=67"},
        {"conv2d.json", "N=2"},
        {"gelu_tanh_chain.json", "M=33,N=65"},
        {"gemm_bias_relu.json", "M=100"},
        {"gemm_bf16.json", "M=33,N=65,K=47"},
        {"layernorm.json", "M=7"},
        {"rmsnorm.json", "M=7"},
        {"softmax.json", "M=9,N=129"},
        {"sum_lastaxis.json", "M=9,N=129"},
        {"gemv_bias_relu.json", "M=33,K=65"},
        {"maxpool2d.json", "N=2"},
        {"cumsum.json", "M=3,N=1000"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(ex); i++)
        if (strcmp(ex[i].file, name) == 0)
            return ex[i].shapes;
    return NULL;
}

static void test_graph_programs(void **state)
{
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/examples", getenv("KTUNE_SOURCE_ROOT"));
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    batch bt;
    batch_start(&bt);
    int n_examples = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        const char *shapes = example_shapes(de->d_name);
        if (!shapes)
            fail_msg("no shapes for example %s: add it to example_shapes()", de->d_name);
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        char *text = NULL;
        kt_err err = {0};
        assert_int_equal(kt_read_file(path, (size_t)1 << 30, &text, NULL, &err), 0);
        ops_graph *g = emit_test_graph(text, shapes);
        free(text);
        ops_ref_program p;
        ops_diag d = {0};
        if (ops_emit_reference_graph(g, &p, &d) < 0)
            fail_msg("%s: %s", de->d_name, d.msg);
        assert_int_equal(p.n_kernels, g->n_nodes);
        /* intermediates in the workspace, graph inputs and outputs as tensors */
        int64_t ws_needed = 0;
        for (int k = 0; k < p.n_kernels; k++) {
            const ops_kernel_launch *l = &p.kernels[k];
            assert_true(l->n_args >= 2);
            for (int a = 0; a < l->n_args; a++) {
                if (l->args[a].kind == OPS_ARG_WORKSPACE) {
                    assert_true(l->args[a].offset % 256 == 0);
                    assert_true(l->args[a].offset < p.workspace_bytes);
                    ws_needed = 1;
                } else {
                    const ops_tensor *t = &g->tensors[l->args[a].tensor];
                    assert_true(t->producer < 0 || t->is_output);
                }
            }
        }
        assert_int_equal(ws_needed, p.workspace_bytes > 0);
        if (strcmp(de->d_name, "gemm_bias_relu.json") == 0) {
            assert_int_equal(p.n_kernels, 3);
            assert_int_equal(p.kernels[0].args[2].kind, OPS_ARG_WORKSPACE); /* t0 */
            assert_int_equal(p.kernels[2].args[1].kind, OPS_ARG_TENSOR);    /* Y */
            emit_test_golden("reference_gemm_bias_relu.cu", p.source);
        }
        batch_add(&bt, p.source);
        ops_ref_program_free(&p);
        ops_graph_free(g);
        n_examples++;
    }
    closedir(dp);
    assert_true(n_examples >= 8);
    batch_finish(&bt);
}

/* A chain of six nodes over 1000 doubles: the intermediates take turns in two slices of the
 * workspace (not one each), and no node writes the slice it reads. */
static void test_workspace_reused(void **state)
{
    (void)state;
    ops_graph *g = emit_test_graph(
        "{\"name\": \"chain\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [1000]}},"
        " \"nodes\": ["
        "  {\"out\": \"a\", \"op\": \"exp\", \"in\": [\"x\"]},"
        "  {\"out\": \"b\", \"op\": \"neg\", \"in\": [\"a\"]},"
        "  {\"out\": \"c\", \"op\": \"tanh\", \"in\": [\"b\"]},"
        "  {\"out\": \"d\", \"op\": \"add\", \"in\": [\"c\", \"x\"]},"
        "  {\"out\": \"e\", \"op\": \"relu\", \"in\": [\"d\"]},"
        "  {\"out\": \"y\", \"op\": \"mul\", \"in\": [\"e\", \"d\"]}],"
        " \"outputs\": [\"y\"]}",
        "");
    ops_ref_program p;
    ops_diag d = {0};
    if (ops_emit_reference_graph(g, &p, &d) < 0)
        fail_msg("%s", d.msg);
    assert_int_equal(p.n_kernels, 6);
    assert_int_equal(p.workspace_bytes, 2 * 8192); /* 8000 bytes, 256-aligned: two slices */
    for (int k = 0; k < p.n_kernels; k++) {
        const ops_kernel_launch *l = &p.kernels[k];
        const ops_arg *out = &l->args[l->n_args - 1];
        for (int a = 0; a + 1 < l->n_args && out->kind == OPS_ARG_WORKSPACE; a++)
            if (l->args[a].kind == OPS_ARG_WORKSPACE)
                assert_true(l->args[a].offset != out->offset);
    }
    /* d is read by e and y: its slice is not e's */
    assert_true(p.kernels[4].args[0].offset != p.kernels[4].args[1].offset);
    ops_ref_program_free(&p);
    ops_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_contractions_and_layout),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_graph_programs),
        cmocka_unit_test(test_workspace_reused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
