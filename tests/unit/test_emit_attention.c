/* The attention family: matching, the pruned space of the acceptance examples, a deterministic
 * spread of candidates compiled for sm_90a (and a few for sm_80) without spills, the launch
 * description, one golden source, and the cost model's sanity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ops/ops.h"
#include "tests/unit/emit_test_util.h"

static const char *const causal_json =
    "{\"name\":\"causal_attention\",\"inputs\":{"
    "\"Q\":{\"dtype\":\"f16\",\"shape\":[\"B\",\"H\",\"S\",64]},"
    "\"K\":{\"dtype\":\"f16\",\"shape\":[\"B\",\"H\",\"S\",64]},"
    "\"V\":{\"dtype\":\"f16\",\"shape\":[\"B\",\"H\",\"S\",64]}},"
    "\"nodes\":[{\"out\":\"O\",\"op\":\"attention\",\"in\":[\"Q\",\"K\",\"V\"],\"causal\":%s}],"
    "\"outputs\":[\"O\"]}";

#define EX_SHAPES "B=4,H=48,S=2048"

/* bf16, head dim 128, ragged sequence lengths (Sq != Skv, neither a multiple of a tile). */
static const char *const ragged128_json =
    "{\"name\":\"ragged128\",\"inputs\":{"
    "\"q\":{\"dtype\":\"bf16\",\"shape\":[2,3,333,128]},"
    "\"k\":{\"dtype\":\"bf16\",\"shape\":[2,3,777,128]},"
    "\"v\":{\"dtype\":\"bf16\",\"shape\":[2,3,777,128]}},"
    "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"],\"causal\":%s}],"
    "\"outputs\":[\"o\"]}";

/* An elementwise epilogue: relu(o + bias) + residual, Dv = 96, an explicit scale. */
static const char *const epilogue_json =
    "{\"name\":\"attn_epilogue\",\"inputs\":{"
    "\"q\":{\"dtype\":\"%s\",\"shape\":[\"B\",333,64]},"
    "\"k\":{\"dtype\":\"%s\",\"shape\":[\"B\",777,64]},"
    "\"v\":{\"dtype\":\"%s\",\"shape\":[\"B\",777,96]},"
    "\"bias\":{\"dtype\":\"%s\",\"shape\":[96]},"
    "\"r\":{\"dtype\":\"%s\",\"shape\":[\"B\",333,96]}},"
    "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"],\"causal\":true,"
    "\"scale\":0.3},"
    "{\"out\":\"a\",\"op\":\"add\",\"in\":[\"o\",\"bias\"]},"
    "{\"out\":\"h\",\"op\":\"relu\",\"in\":[\"a\"]},"
    "{\"out\":\"y\",\"op\":\"add\",\"in\":[\"h\",\"r\"]}],"
    "\"outputs\":[\"y\"]}";

/* The acceptance example (B=4, H=48, S=2048, D=64), causal or not. */
static ops_graph *example_graph(bool causal)
{
    char json[4096];
    snprintf(json, sizeof(json), causal_json, causal ? "true" : "false");
    return emit_test_graph(json, EX_SHAPES);
}

static ops_graph *ragged_graph(bool causal)
{
    char json[4096];
    snprintf(json, sizeof(json), ragged128_json, causal ? "true" : "false");
    return emit_test_graph(json, "");
}

static ops_graph *epilogue_graph(const char *dt)
{
    char json[4096];
    snprintf(json, sizeof(json), epilogue_json, dt, dt, dt, dt, dt);
    return emit_test_graph(json, "B=3");
}

typedef struct sched_list {
    int n;
    ops_schedule s[1024];
} sched_list;

static int collect(const ops_schedule *s, void *ctx)
{
    sched_list *l = ctx;
    if (l->n < (int)KT_ARRAY_LEN(l->s))
        l->s[l->n++] = *s;
    return 0;
}

static int64_t enumerate(const ops_graph *g, ops_group *grp, sched_list *l)
{
    emit_test_whole_group(g, grp);
    const ops_family *f = ops_family_get(OPS_FAM_ATTENTION);
    assert_true(f->matches(grp));
    ops_device dev;
    ops_device_h100(&dev);
    ops_prune_counts pc;
    l->n = 0;
    assert_int_equal(ops_family_enumerate(f, grp, &dev, collect, l, &pc), 0);
    return pc.kept;
}

static bool group_matches(const char *json, const char *shapes)
{
    ops_graph *g = emit_test_graph(json, shapes);
    ops_group grp;
    emit_test_whole_group(g, &grp);
    bool m = ops_family_get(OPS_FAM_ATTENTION)->matches(&grp);
    ops_graph_free(g);
    return m;
}

static void test_matches(void **state)
{
    (void)state;
    char json[4096];
    snprintf(json, sizeof(json), causal_json, "true");
    assert_true(group_matches(json, EX_SHAPES));
    snprintf(json, sizeof(json), epilogue_json, "f16", "f16", "f16", "f16", "f16");
    assert_true(group_matches(json, "B=2"));
    /* a reduction after the attention is not an elementwise epilogue */
    assert_false(group_matches(
        "{\"name\":\"x\",\"inputs\":{\"q\":{\"dtype\":\"f16\",\"shape\":[4,64]},"
        "\"k\":{\"dtype\":\"f16\",\"shape\":[4,64]},\"v\":{\"dtype\":\"f16\",\"shape\":[4,64]}},"
        "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"]},"
        "{\"out\":\"y\",\"op\":\"sum\",\"in\":[\"o\"],\"axes\":[-1]}],\"outputs\":[\"y\"]}",
        ""));
    /* the attention output is also needed outside the group: two outputs */
    assert_false(group_matches(
        "{\"name\":\"x\",\"inputs\":{\"q\":{\"dtype\":\"f16\",\"shape\":[4,64]},"
        "\"k\":{\"dtype\":\"f16\",\"shape\":[4,64]},\"v\":{\"dtype\":\"f16\",\"shape\":[4,64]}},"
        "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"]},"
        "{\"out\":\"y\",\"op\":\"relu\",\"in\":[\"o\"]}],\"outputs\":[\"y\",\"o\"]}",
        ""));
    /* a node computing q inside the group (the family has no prologue) */
    assert_false(group_matches(
        "{\"name\":\"x\",\"inputs\":{\"q\":{\"dtype\":\"f16\",\"shape\":[4,64]},"
        "\"k\":{\"dtype\":\"f16\",\"shape\":[4,64]},\"v\":{\"dtype\":\"f16\",\"shape\":[4,64]}},"
        "\"nodes\":[{\"out\":\"qs\",\"op\":\"mul\",\"in\":[\"q\",2.0]},"
        "{\"out\":\"y\",\"op\":\"attention\",\"in\":[\"qs\",\"k\",\"v\"]}],\"outputs\":[\"y\"]}",
        ""));
    /* no attention */
    assert_false(group_matches(
        "{\"name\":\"x\",\"inputs\":{\"a\":{\"dtype\":\"f16\",\"shape\":[4,64]},"
        "\"b\":{\"dtype\":\"f16\",\"shape\":[64,8]}},"
        "\"nodes\":[{\"out\":\"y\",\"op\":\"matmul\",\"in\":[\"a\",\"b\"]}],\"outputs\":[\"y\"]}",
        ""));
}

static void test_counts(void **state)
{
    (void)state;
    static sched_list l;
    ops_group grp;
    for (int causal = 0; causal < 2; causal++) {
        ops_graph *g = example_graph(causal);
        int64_t kept = enumerate(g, &grp, &l);
        print_message("attention.json causal=%d: %lld candidates\n", causal, (long long)kept);
        assert_true(kept >= 50);
        ops_graph_free(g);
    }
    ops_graph *g = ragged_graph(true);
    assert_true(enumerate(g, &grp, &l) >= 20);
    ops_graph_free(g);
    g = epilogue_graph("f32");
    assert_true(enumerate(g, &grp, &l) >= 8);
    for (int i = 0; i < l.n; i++)
        assert_int_equal(l.s[i].v[4], 0); /* f32 data: the ffma path only */
    ops_graph_free(g);
    /* a head dim the mma path cannot tile is pruned as "shape" */
    g = emit_test_graph(
        "{\"name\":\"x\",\"inputs\":{\"q\":{\"dtype\":\"f16\",\"shape\":[40,72]},"
        "\"k\":{\"dtype\":\"f16\",\"shape\":[40,72]},\"v\":{\"dtype\":\"f16\",\"shape\":[40,72]}},"
        "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"]}],"
        "\"outputs\":[\"o\"]}",
        "");
    assert_int_equal(enumerate(g, &grp, &l), 0);
    ops_schedule s = {.family = OPS_FAM_ATTENTION, .v = {64, 64, 4, 2, 1, 0, 0, 1, 0, 0, 1}};
    ops_device dev;
    ops_device_h100(&dev);
    assert_string_equal(ops_family_get(OPS_FAM_ATTENTION)->prune(&grp, &s, &dev), "shape");
    ops_emitted e;
    ops_diag d = {0};
    assert_int_equal(ops_family_get(OPS_FAM_ATTENTION)->emit(&grp, &s, &dev, &e, &d), -EINVAL);
    ops_graph_free(g);
}

/* Emits n schedules spread evenly over l and queues them; checks each launch description. */
static int submit_spread(srch_pool *pool, const ops_group *grp, const sched_list *l, int n,
                         int tag0)
{
    ops_device dev;
    ops_device_h100(&dev);
    const ops_family *f = ops_family_get(OPS_FAM_ATTENTION);
    int step = l->n > n ? l->n / n : 1, sent = 0;
    for (int i = 0; i < l->n && sent < n; i += step) {
        ops_emitted e;
        ops_diag d = {0};
        if (f->emit(grp, &l->s[i], &dev, &e, &d) < 0)
            fail_msg("emit: %s", d.msg);
        assert_int_equal(e.n_kernels, 1);
        const ops_kernel_launch *k = &e.kernels[0];
        bool ws = l->s[i].v[8] == 2; /* mma=wgmma_ws: 3 tensor maps, a producer warpgroup */
        assert_int_equal(k->n_args, grp->n_in + 1 + (ws ? 3 : 0));
        assert_int_equal(k->block[0], (uint32_t)l->s[i].v[2] * 32 + (ws ? 128 : 0));
        assert_true(k->smem_bytes <= (uint32_t)dev.smem_per_block_optin);
        assert_true(k->grid[0] >= 1 && k->grid[1] >= 1);
        if (ws) /* one dimension of work items; grid=persistent: at most a block per SM */
            assert_true(k->grid[1] == 1 &&
                        (l->s[i].v[9] == 0 || k->grid[0] <= (uint32_t)dev.sm_count));
        assert_non_null(strstr(e.source, "__launch_bounds__"));
        assert_int_equal(srch_pool_submit(pool, e.source, (uint64_t)(tag0 + sent)), 0);
        ops_emitted_free(&e);
        sent++;
    }
    return sent;
}

static void drain(srch_pool *pool, int expect)
{
    kt_err err = {0};
    srch_compile_result r;
    int done = 0;
    while (srch_pool_next(pool, &r, &err) == 0) {
        if (r.status != SRCH_COMPILE_OK)
            fail_msg("candidate %llu failed to compile:\n%s", (unsigned long long)r.tag, r.log);
        for (int k = 0; k < r.n_kernels; k++)
            if (r.kernels[k].spill_store_bytes || r.kernels[k].spill_load_bytes)
                fail_msg("candidate %llu spills: %s (%d regs)", (unsigned long long)r.tag,
                         r.kernels[k].name, r.kernels[k].registers);
        done++;
        srch_compile_result_release(&r);
    }
    assert_int_equal(done, expect);
}

static void test_compile_spread(void **state)
{
    (void)state;
    kt_err err = {0};
    srch_pool *pool;
    srch_pool_opts o = {.arch = "sm_90a", .jobs = 2, .timeout_s = 120};
    if (srch_pool_new(&o, &pool, &err) < 0)
        fail_msg("pool: %s", err.msg);
    static sched_list l;
    ops_group grp;
    int sent = 0;
    ops_graph *g1 = example_graph(true);
    enumerate(g1, &grp, &l);
    sent += submit_spread(pool, &grp, &l, 24, sent);
    ops_graph *g2 = ragged_graph(false);
    enumerate(g2, &grp, &l);
    sent += submit_spread(pool, &grp, &l, 12, sent);
    ops_graph *g3 = epilogue_graph("f16");
    enumerate(g3, &grp, &l);
    sent += submit_spread(pool, &grp, &l, 8, sent);
    ops_graph *g4 = epilogue_graph("f32");
    enumerate(g4, &grp, &l);
    sent += submit_spread(pool, &grp, &l, 8, sent);
    assert_true(sent >= 50);
    drain(pool, sent);
    srch_pool_free(pool);

    /* a few for sm_80 (mma.sync, ldmatrix and cp.async exist there too) */
    o.arch = "sm_80";
    if (srch_pool_new(&o, &pool, &err) < 0)
        fail_msg("pool: %s", err.msg);
    enumerate(g1, &grp, &l);
    sent = submit_spread(pool, &grp, &l, 2, 0);
    enumerate(g2, &grp, &l);
    sent += submit_spread(pool, &grp, &l, 1, sent);
    enumerate(g4, &grp, &l);
    sent += submit_spread(pool, &grp, &l, 1, sent);
    drain(pool, sent);
    srch_pool_free(pool);
    ops_graph_free(g1);
    ops_graph_free(g2);
    ops_graph_free(g3);
    ops_graph_free(g4);
}

static void test_golden_and_launch(void **state)
{
    (void)state;
    ops_graph *g = example_graph(true);
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_device dev;
    ops_device_h100(&dev);
    /* bq=128 bkv=64 warps=8 stages=2 math=f16 smem=swizzle q=regs exp=exp2 */
    ops_schedule s = {.family = OPS_FAM_ATTENTION, .v = {128, 64, 8, 2, 1, 1, 1, 1, 0, 0, 1}};
    const ops_family *f = ops_family_get(OPS_FAM_ATTENTION);
    assert_null(f->prune(&grp, &s, &dev));
    ops_emitted e;
    ops_diag d = {0};
    assert_int_equal(f->emit(&grp, &s, &dev, &e, &d), 0);
    const ops_kernel_launch *k = &e.kernels[0];
    assert_int_equal(k->grid[0], 2048 / 128);
    assert_int_equal(k->grid[1], 4 * 48);
    assert_int_equal(k->grid[2], 1);
    assert_int_equal(k->block[0], 256);
    /* Q tile + two stages of K and V, 16-bit, unpadded (swizzled) */
    assert_int_equal(k->smem_bytes, 2 * (128 * 64 + 2 * 64 * (64 + 64)));
    assert_int_equal(k->n_args, 4);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(k->args[i].kind, OPS_ARG_TENSOR);
        assert_int_equal(k->args[i].tensor, grp.in[i]);
    }
    assert_int_equal(k->args[3].tensor, ops_graph_find_tensor(g, "O"));
    assert_int_equal(e.workspace_bytes, 0);
    /* the instruction wrappers are the device library's */
    assert_non_null(strstr(e.source, "kt_mma_m16n8k16_f16(s[i][2 * n16], qf[i][ks], kb[0]);"));
    assert_non_null(strstr(e.source, "kt_ldmatrix_x4_trans(vb[0][0], "));
    assert_non_null(strstr(e.source, "= kt_pack_f16x2(s[i][2 * ks][0], s[i][2 * ks][1]);"));
    assert_true(emit_test_has(e.source, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
    assert_true(emit_test_has(e.source, "ex2.approx.ftz.f32"));
    assert_true(emit_test_has(e.source, "cvt.rn.f16x2.f32"));
    assert_null(strstr(emit_test_body(e.source), "asm"));
    emit_test_golden("attention_f16_causal.cu", e.source);
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    ops_graph_free(g);
}

/* The Hopper path: where it is legal, and one kernel's source, launch and compile. */
static void test_wgmma(void **state)
{
    (void)state;
    ops_graph *g = example_graph(true);
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_device dev;
    ops_device_h100(&dev);
    const ops_family *f = ops_family_get(OPS_FAM_ATTENTION);
    /* bq=128 bkv=128 warps=8 stages=2 math=f16 smem=swizzle q=smem exp=exp2 mma=wgmma */
    ops_schedule s = {.family = OPS_FAM_ATTENTION, .v = {128, 128, 8, 2, 1, 1, 0, 1, 1, 0, 1}};
    assert_null(f->prune(&grp, &s, &dev));
    /* a warpgroup per 64 rows */
    s.v[2] = 4;
    assert_string_equal(f->prune(&grp, &s, &dev), "divisibility");
    s.v[2] = 8;
    /* the layout is the hardware's swizzle; Q is read by descriptor; two stages */
    s.v[5] = 0;
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s.v[5] = 1;
    s.v[6] = 1;
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s.v[6] = 0;
    s.v[3] = 1;
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s.v[3] = 2;
    /* Hopper only */
    ops_device a100 = dev;
    a100.sm_major = 8;
    snprintf(a100.arch, sizeof(a100.arch), "sm_80");
    assert_string_equal(f->prune(&grp, &s, &a100), "shape");
    /* three warpgroups: wgmma only */
    ops_schedule s3 = s;
    s3.v[0] = 192;
    s3.v[2] = 12;
    assert_null(f->prune(&grp, &s3, &dev));
    s3.v[8] = 0;
    assert_string_equal(f->prune(&grp, &s3, &dev), "redundant");
    /* rings of three buffers: wgmma only */
    ops_schedule r3 = s;
    r3.v[3] = 3;
    assert_null(f->prune(&grp, &r3, &dev));
    r3.v[8] = 0;
    assert_string_equal(f->prune(&grp, &r3, &dev), "redundant");

    ops_emitted e;
    ops_diag d = {0};
    assert_int_equal(f->emit(&grp, &s, &dev, &e, &d), 0);
    const ops_kernel_launch *k = &e.kernels[0];
    assert_int_equal(k->grid[0], 2048 / 128);
    assert_int_equal(k->block[0], 256);
    /* Q + two stages of K and V, 16-bit, plus the 1 KiB alignment slack */
    assert_int_equal(k->smem_bytes, 2 * (128 * 64 + 2 * 128 * (64 + 64)) + 1024);
    /* the products are the device library's: S = Q K^T from shared memory, O += P V with P
     * in registers */
    assert_non_null(strstr(e.source, "#include \"ktune/wgmma.cuh\""));
    assert_non_null(strstr(e.source, "kt_wgmma_f16_ss<BKV, 0>(s[0], "));
    assert_non_null(strstr(e.source, "kt_wgmma_f16_rs<DV, 1>(o[0], pa[ks], "));
    assert_true(
        emit_test_has(e.source, "\"wgmma.mma_async.sync.aligned.m64n\" #N \"k16.f32.\" #T"));
    assert_true(emit_test_has(e.source, "KT_WGMMA_K16(f16)"));
    assert_null(strstr(emit_test_body(e.source), "asm"));
    emit_test_golden("attention_f16_causal_wgmma.cu", e.source);
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    ops_graph_free(g);

    /* a head dim of 128 for V has no wgmma kernel (one 64-column swizzle atom along N); the
     * TMA-fed kernel has (test_wgmma_ws) */
    g = emit_test_graph(
        "{\"name\":\"x\",\"inputs\":{\"q\":{\"dtype\":\"bf16\",\"shape\":[256,128]},"
        "\"k\":{\"dtype\":\"bf16\",\"shape\":[256,128]},\"v\":{\"dtype\":\"bf16\",\"shape\":[256,"
        "128]}},"
        "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"]}],"
        "\"outputs\":[\"o\"]}",
        "");
    emit_test_whole_group(g, &grp);
    s.v[4] = 2; /* bf16 */
    assert_string_equal(f->prune(&grp, &s, &dev), "shape");
    ops_graph_free(g);
}

/* mma=wgmma_ws, FlashAttention-3's structure, at head dim 128 (causal, f16, 4 x 333 rows: ragged):
 * the tensor maps come first among the arguments, the grid is persistent, the producer warpgroup
 * and the barriers are counted, the registers move by setmaxnreg, and no block barrier is left
 * in the key loop. */
static void test_wgmma_ws(void **state)
{
    (void)state;
    ops_graph *g = emit_test_graph(
        "{\"name\":\"d128\",\"inputs\":{\"q\":{\"dtype\":\"f16\",\"shape\":[4,333,128]},"
        "\"k\":{\"dtype\":\"f16\",\"shape\":[4,333,128]},"
        "\"v\":{\"dtype\":\"f16\",\"shape\":[4,333,128]}},"
        "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"],"
        "\"causal\":true}],\"outputs\":[\"o\"]}",
        "");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_device dev;
    ops_device_h100(&dev);
    const ops_family *f = ops_family_get(OPS_FAM_ATTENTION);
    /* bq=128 bkv=128 warps=8 stages=2 math=f16 smem=swizzle q=smem exp=exp2 mma=wgmma_ws */
    ops_schedule s = {.family = OPS_FAM_ATTENTION, .v = {128, 128, 8, 2, 1, 1, 0, 1, 2, 0, 1}};
    assert_null(f->prune(&grp, &s, &dev));
    s.v[8] = 1; /* the plain wgmma kernel takes V in one 64-column block */
    assert_string_equal(f->prune(&grp, &s, &dev), "shape");
    s.v[8] = 2;
    ops_emitted e;
    ops_diag d = {0};
    assert_int_equal(f->emit(&grp, &s, &dev, &e, &d), 0);
    const ops_kernel_launch *k = &e.kernels[0];
    /* a block per work item (3 q tiles x 4 batch entries); grid=persistent: at most one per SM */
    assert_int_equal(k->grid[0], 12);
    assert_non_null(strstr(e.source, "constexpr int CHUNK = 4;"));
    assert_int_equal(k->grid[1], 1);
    assert_int_equal(k->block[0], 256 + 128);
    /* Q, two stages of K and V, the 1 KiB alignment slack, 2 + 4 x 2 mbarriers */
    assert_int_equal(k->smem_bytes, 2 * (128 * 128 + 2 * 128 * (128 + 128)) + 1024 + 8 * 10);
    assert_int_equal(k->n_args, 3 + 4);
    for (int i = 0; i < 3; i++) {
        const ops_arg *a = &k->args[i];
        assert_int_equal(a->kind, OPS_ARG_TENSOR_MAP);
        assert_int_equal(a->tensor, grp.in[i]);
        assert_int_equal(a->tmap.rank, 3);
        assert_int_equal(a->tmap.dims[0], 128);
        assert_int_equal(a->tmap.dims[1], 333);
        assert_int_equal(a->tmap.dims[2], 4);
        assert_int_equal(a->tmap.box[0], 64);
        assert_int_equal(a->tmap.box[1], 128);
        assert_int_equal(a->tmap.swizzle, 128);
        assert_int_equal(ops_tensor_map_check(&a->tmap, &d), 0);
    }
    assert_non_null(strstr(e.source, "kt_setmaxnreg_dec<24>();"));
    assert_non_null(strstr(e.source, "kt_setmaxnreg_inc<240>();"));
    assert_non_null(strstr(e.source, "kt_wgmma_f16_rs<DV, 1>(o[0], pa[ks], "));
    /* one block barrier, after the mbarriers' initialisation */
    const char *bar = strstr(e.source, "__syncthreads();");
    assert_non_null(bar);
    assert_null(strstr(bar + 1, "__syncthreads();"));
    emit_test_golden("attention_f16_causal_d128_wgmma_ws.cu", e.source);
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    ops_graph_free(g);
}

/* mma=splitkv, decode: Llama-3's grouped-query heads (32 over 8) at one query against 1000 cached
 * keys (ragged: not whole slices): two kernels (slices, then their combine) over a workspace of
 * one partial per slice (the block merges its warps' in shared memory); one slice: one kernel
 * storing the output; the tiled kernels stay in the space; more rows than the registers hold
 * are pruned. */
static void test_splitkv(void **state)
{
    (void)state;
#define DECODE_JSON                                                                                \
    "{\"name\":\"dec\",\"inputs\":{\"q\":{\"dtype\":\"bf16\",\"shape\":[2,32,%d,128]},"            \
    "\"k\":{\"dtype\":\"bf16\",\"shape\":[2,8,%d,128]},"                                           \
    "\"v\":{\"dtype\":\"bf16\",\"shape\":[2,8,%d,128]}},"                                          \
    "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"]}],"                 \
    "\"outputs\":[\"o\"]}"
    char buf[1024];
    snprintf(buf, sizeof(buf), DECODE_JSON, 1, 1000, 1000);
    ops_graph *g = emit_test_graph(buf, "");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_device dev;
    ops_device_h100(&dev);
    const ops_family *f = ops_family_get(OPS_FAM_ATTENTION);
    /* bq=64 bkv=32 warps=4 stages=1 math=bf16 smem=pad q=smem exp=exp2 mma=splitkv grid=tiles
     * splits=8 */
    ops_schedule s = {.family = OPS_FAM_ATTENTION, .v = {64, 32, 4, 1, 2, 0, 0, 1, 3, 0, 8}};
    assert_null(f->prune(&grp, &s, &dev));
    s.v[8] = 1; /* a split count is the decode kernel's */
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s.v[8] = 3;
    s.v[10] = 8;
    s.v[1] = 64; /* the knobs it does not read at one value */
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s.v[1] = 32;
    ops_emitted e;
    ops_diag d = {0};
    assert_int_equal(f->emit(&grp, &s, &dev, &e, &d), 0);
    assert_int_equal(e.n_kernels, 2);
    assert_int_equal(e.kernels[0].grid[0], 8);  /* slices */
    assert_int_equal(e.kernels[0].grid[1], 16); /* 2 x 8 k/v heads */
    assert_int_equal(e.kernels[0].block[0], 128);
    assert_int_equal(e.kernels[0].args[3].kind, OPS_ARG_WORKSPACE);
    assert_int_equal(e.kernels[1].args[0].kind, OPS_ARG_WORKSPACE);
    assert_int_equal(e.kernels[1].grid[0], (2 * 32 * 128 + 255) / 256);
    /* a partial per slice: 4 rows (the group) x (128 + 2) floats; the warps' meet in shared
     * memory */
    assert_int_equal(e.workspace_bytes, 16 * 8 * 4 * (128 + 2) * 4);
    assert_int_equal(e.kernels[0].smem_bytes, 4 * 4 * (128 + 2) * 4);
    assert_non_null(
        strstr(e.source, "float *slice = workspace + ((size_t)kvb * SPLITS + split) * PART;"));
    assert_non_null(strstr(e.source, "constexpr int R = GROUP * SQ;"));
    assert_non_null(strstr(e.source, "constexpr int SLICE = 128;"));
    emit_test_golden("attention_bf16_gqa_decode_splitkv.cu", e.source);
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    /* one slice: the block normalises and stores the output, no workspace, no second kernel */
    s.v[10] = 1;
    assert_null(f->prune(&grp, &s, &dev));
    assert_int_equal(f->emit(&grp, &s, &dev, &e, &d), 0);
    assert_int_equal(e.n_kernels, 1);
    assert_int_equal(e.workspace_bytes, 0);
    assert_int_equal(e.kernels[0].grid[0], 1);
    assert_int_equal(e.kernels[0].args[3].kind, OPS_ARG_TENSOR);
    assert_null(strstr(e.source, "_combine("));
    assert_non_null(
        strstr(e.source, "out0[(qb * SQ + r % SQ) * DV + c] = kt_f32_to_bf16(acc / sum);"));
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    s.v[10] = 8;
    /* stages 2 and 3: each warp's ring of 32-key chunks of K and V in dynamic shared memory,
     * filled by cp.async. At 1000 keys over 8 slices a warp has one chunk: no ring. At 4000
     * keys (ragged: 500 a slice, rounded to 512) four; 8 warps x 2 stages x 32 x 256 elements
     * (bf16) is past the opt-in limit. */
    s.v[3] = 3;
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    ops_graph_free(g);
    snprintf(buf, sizeof(buf), DECODE_JSON, 1, 4000, 4000);
    g = emit_test_graph(buf, "");
    emit_test_whole_group(g, &grp);
    assert_null(f->prune(&grp, &s, &dev));
    assert_int_equal(f->emit(&grp, &s, &dev, &e, &d), 0);
    assert_int_equal(e.kernels[0].smem_bytes, 4 * 3 * 32 * 256 * 2);
    assert_non_null(strstr(e.source, "kt_cp_async_wait<STAGES - 1>();"));
    assert_non_null(strstr(e.source, "reinterpret_cast<const uint2 *>(sV + j * VSTR)[lane]"));
    assert_null(strstr(e.source, "gV + (size_t)(kv0 + j) * DV"));
    emit_test_golden("attention_bf16_gqa_decode_splitkv_ring.cu", e.source);
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    /* mma=splitkv_tc: the same ring feeding m16n8k16 mma.sync (rows padded to one m16 tile):
     * ldmatrix from rows padded by 8 elements, P repacked from the accumulators; no ring, no
     * tensor-core form */
    s.v[8] = 4;
    assert_null(f->prune(&grp, &s, &dev));
    assert_int_equal(f->emit(&grp, &s, &dev, &e, &d), 0);
    assert_int_equal(e.n_kernels, 2);
    assert_int_equal(e.kernels[0].smem_bytes, 4 * 3 * 32 * (256 + 16) * 2);
    assert_non_null(strstr(e.kernels[0].entry, "splitkv_tc_w4_x8_s3"));
    assert_non_null(strstr(e.source, "kt_mma_m16n8k16_bf16(s[2 * n16], qf[ks], kb[0]);"));
    assert_non_null(
        strstr(e.source, "kt_ldmatrix_x4_trans(vb[0][0], vb[0][1], vb[1][0], vb[1][1],"));
    assert_non_null(strstr(e.source, "constexpr int KSTR = D + 8, VSTR = DV + 8;"));
    emit_test_golden("attention_bf16_gqa_decode_splitkv_tc.cu", e.source);
    emit_test_compile(e.source, "sm_90a");
    ops_emitted_free(&e);
    s.v[3] = 1;
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s.v[3] = 3;
    s.v[8] = 3;
    s.v[2] = 8;
    s.v[3] = 2;
    assert_string_equal(f->prune(&grp, &s, &dev), "smem");
    s.v[3] = 3;
    s.v[2] = 4;
    s.v[10] = 32; /* 4000 keys over 32 slices: 128 keys, one chunk a warp */
    assert_string_equal(f->prune(&grp, &s, &dev), "redundant");
    s.v[3] = 1;
    s.v[10] = 8;
    ops_graph_free(g);
    /* 5 queries x 4 heads: 20 rows, more than the kernel keeps in registers */
    snprintf(buf, sizeof(buf), DECODE_JSON, 5, 1000, 1000);
    g = emit_test_graph(buf, "");
    emit_test_whole_group(g, &grp);
    assert_string_equal(f->prune(&grp, &s, &dev), "shape");
    ops_graph_free(g);
}

/* Grouped-query attention (Llama-3's 32 query heads over 8 k/v heads, D 64 here for the wgmma
 * kernel; ragged, causal): each block finds its k/v head from its query head, on the wgmma and
 * the mma.sync kernels alike; the others unchanged. */
static void test_gqa(void **state)
{
    (void)state;
    ops_graph *g = emit_test_graph(
        "{\"name\":\"gqa\",\"inputs\":{\"q\":{\"dtype\":\"bf16\",\"shape\":[2,32,333,64]},"
        "\"k\":{\"dtype\":\"bf16\",\"shape\":[2,8,333,64]},"
        "\"v\":{\"dtype\":\"bf16\",\"shape\":[2,8,333,64]}},"
        "\"nodes\":[{\"out\":\"o\",\"op\":\"attention\",\"in\":[\"q\",\"k\",\"v\"],"
        "\"causal\":true}],\"outputs\":[\"o\"]}",
        "");
    ops_group grp;
    emit_test_whole_group(g, &grp);
    assert_true(ops_family_get(OPS_FAM_ATTENTION)->matches(&grp));
    ops_device dev;
    ops_device_h100(&dev);
    const ops_family *f = ops_family_get(OPS_FAM_ATTENTION);
    /* wgmma (bq 128, bkv 128, 8 warps, 2 stages, bf16); mma.sync (bq 64, bkv 64, 4 warps) */
    ops_schedule ws = {.family = OPS_FAM_ATTENTION, .v = {128, 128, 8, 2, 2, 1, 0, 1, 1, 0, 1}};
    ops_schedule ms = {.family = OPS_FAM_ATTENTION, .v = {64, 64, 4, 2, 2, 1, 0, 1, 0, 0, 1}};
    const ops_schedule *both[] = {&ws, &ms};
    for (int i = 0; i < 2; i++) {
        const char *why = f->prune(&grp, both[i], &dev);
        if (why)
            fail_msg("gqa schedule %d pruned: %s", i, why);
        ops_emitted e;
        ops_diag d = {0};
        assert_int_equal(f->emit(&grp, both[i], &dev, &e, &d), 0);
        assert_int_equal(e.kernels[0].grid[1], 2 * 32); /* a block row per query head */
        assert_non_null(strstr(e.source, "const int kvidx = bidx / 32 * 8 + bidx % 32 / 4;"));
        assert_non_null(strstr(e.source, "gK = in1 + (size_t)kvidx * SKV * D;"));
        emit_test_compile(e.source, "sm_90a");
        ops_emitted_free(&e);
    }
    ops_graph_free(g);
    /* the others read their own batch entry */
    g = example_graph(false);
    emit_test_whole_group(g, &grp);
    ops_emitted e;
    ops_diag d = {0};
    ms.v[4] = 1; /* f16 */
    assert_null(f->prune(&grp, &ms, &dev));
    assert_int_equal(f->emit(&grp, &ms, &dev, &e, &d), 0);
    assert_null(strstr(e.source, "kvidx"));
    ops_emitted_free(&e);
    ops_graph_free(g);
}

static double estimate(const ops_graph *g, const int *v)
{
    ops_group grp;
    emit_test_whole_group(g, &grp);
    ops_device dev;
    ops_device_h100(&dev);
    ops_schedule s = {.family = OPS_FAM_ATTENTION};
    memcpy(s.v, v, 8 * sizeof(int));
    ops_estimate e;
    ops_family_get(OPS_FAM_ATTENTION)->estimate(&grp, &s, &dev, &e);
    assert_true(e.seconds > 0 && e.flops > 0 && e.bytes > 0);
    assert_true(e.occupancy > 0 && e.occupancy <= 1);
    return e.seconds;
}

static void test_estimate(void **state)
{
    (void)state;
    ops_graph *gc = example_graph(true);
    ops_graph *gn = example_graph(false);
    const int v[8] = {128, 64, 8, 2, 1, 1, 1, 1};
    double tc = estimate(gc, v), tn = estimate(gn, v);
    print_message("causal %.1f us, non-causal %.1f us\n", tc * 1e6, tn * 1e6);
    /* causal does about half the work */
    assert_true(tc / tn > 0.45 && tc / tn < 0.62);
    /* 4*48*2048*2048*64*4 flops at ~745 TFLOP/s peak: between 0.1 and 10 ms */
    assert_true(tn > 1e-4 && tn < 1e-2);
    /* double buffering beats one buffer, all else equal */
    const int v1[8] = {128, 64, 8, 1, 1, 1, 1, 1};
    assert_true(estimate(gn, v) < estimate(gn, v1));
    ops_graph_free(gc);
    ops_graph_free(gn);
    /* tensor cores beat FFMA: the same problem in f16 and in f32 */
    ops_graph *g16 = epilogue_graph("f16"), *g32 = epilogue_graph("f32");
    const int vm[8] = {64, 64, 4, 2, 1, 0, 0, 1}, vf[8] = {64, 64, 4, 2, 0, 0, 0, 1};
    assert_true(estimate(g16, vm) < estimate(g32, vf));
    ops_graph_free(g16);
    ops_graph_free(g32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches),
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_golden_and_launch),
        cmocka_unit_test(test_estimate),
        cmocka_unit_test(test_compile_spread),
        cmocka_unit_test(test_wgmma),
        cmocka_unit_test(test_wgmma_ws),
        cmocka_unit_test(test_splitkv),
        cmocka_unit_test(test_gqa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
