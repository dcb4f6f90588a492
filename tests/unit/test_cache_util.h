/* Helpers shared by the cache tests: temporary directories, records with every field filled, and
 * raw LMDB access for corrupting stored bytes. Header-only; each test program includes it once. */
#pragma once

#include "cache/cache.h"
#include "ops/ops.h"

#include <ftw.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static KT_UNUSED char *tmpdir_new(void)
{
    char tmpl[] = "/tmp/ktune-cache-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static KT_UNUSED void tmpdir_free(char *dir)
{
    if (dir)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

static KT_UNUSED void test_gpu(cache_gpu *g, const char *name)
{
    memset(g, 0, sizeof(*g));
    snprintf(g->name, sizeof(g->name), "%s", name);
    g->sm_major = 9;
    g->sm_minor = 0;
    g->sm_count = 132;
    g->mem_bytes = 85520809984ull;
    g->driver_version = 12040;
    g->cuda_version = 12040;
}

static KT_UNUSED void test_key(cache_key *k, const char *gpu, uint8_t sig_byte, int64_t m)
{
    memset(k, 0, sizeof(*k));
    test_gpu(&k->gpu, gpu);
    memset(k->sig, sig_byte, sizeof(k->sig));
    k->sig[31] = 0x5a;
    k->n_shapes = 2;
    snprintf(k->shapes[0].name, sizeof(k->shapes[0].name), "N");
    k->shapes[0].value = 256;
    snprintf(k->shapes[1].name, sizeof(k->shapes[1].name), "M");
    k->shapes[1].value = m;
    k->precision = OPS_PREC_EXACT;
    /* The problem digest stands for the shapes in the encoded key: one per (signature, m). */
    memcpy(k->problem, k->sig, sizeof(k->problem));
    for (int i = 0; i < 8; i++)
        k->problem[i] = (uint8_t)((uint64_t)m >> (56 - 8 * i));
}

/* Fills r with every field set: two kernels, every argument kind, a layout, a cubin of
 * cubin_len bytes derived from seed. */
static KT_UNUSED void test_record(cache_record *r, const cache_key *k, const char *schedule,
                                  double time_ns, size_t cubin_len, uint8_t seed)
{
    cache_record_init(r);
    r->key = *k;
    r->graph_name = strdup("gemm_bias_relu");
    r->source = strdup("extern \"C\" __global__ void k0(float *a) { a[threadIdx.x] = 0.f; }\n");
    r->source_len = strlen(r->source);
    r->cubin_len = cubin_len;
    r->cubin = malloc(cubin_len ? cubin_len : 1);
    for (size_t i = 0; i < cubin_len; i++)
        r->cubin[i] = (uint8_t)(seed + i * 31 + (i >> 8));
    r->n_kernels = 2;
    r->kernels = calloc(2, sizeof(*r->kernels));
    for (int i = 0; i < 2; i++) {
        cache_kernel *kk = &r->kernels[i];
        kk->entry = strdup(i == 0 ? "ktune_gemm_main" : "ktune_gemm_reduce");
        kk->grid[0] = 128 + (uint32_t)i;
        kk->grid[1] = 2;
        kk->grid[2] = 1;
        kk->block[0] = 256;
        kk->block[1] = 1;
        kk->block[2] = 1;
        kk->smem_bytes = 49152u + (uint32_t)i;
        kk->n_args = 6;
        kk->args = calloc(6, sizeof(*kk->args));
        kk->args[0] = (cache_arg){.kind = CACHE_ARG_INPUT, .index = 0};
        kk->args[1] = (cache_arg){.kind = CACHE_ARG_INPUT, .index = 2};
        kk->args[2] = (cache_arg){.kind = CACHE_ARG_OUTPUT, .index = 0};
        kk->args[3] = (cache_arg){.kind = CACHE_ARG_WORKSPACE, .offset = 4096, .bytes = 4096};
        kk->args[4] = (cache_arg){
            .kind = CACHE_ARG_SCALAR, .scalar = CACHE_SCALAR_I64, .ival = -1234567890123ll};
        kk->args[5] =
            (cache_arg){.kind = CACHE_ARG_SCALAR, .scalar = CACHE_SCALAR_F32, .fval = 0.125};
    }
    r->n_inputs = 3;
    r->n_outputs = 1;
    r->slots = calloc(4, sizeof(*r->slots));
    for (int i = 0; i < 4; i++)
        r->slots[i] =
            (cache_slot){.dtype = OPS_DT_F16, .rank = 2, .dims = {k->shapes[1].value, 256}};
    r->workspace_bytes = 1u << 20;
    r->n_layouts = 1;
    r->layouts = calloc(1, sizeof(*r->layouts));
    r->layouts[0].input = 1;
    r->layouts[0].layout = strdup("k_major_tile32x8");
    r->family = strdup("gemm");
    r->schedule = strdup(schedule);
    r->time_ns = time_ns;
    r->time_p10_ns = time_ns * 0.95;
    r->time_p90_ns = time_ns * 1.1;
    r->timing = CACHE_TIMING_COLD;
    r->reps = 200;
    r->verified = true;
    r->err_norm = 1.5e-4;
    r->err_max = 3.25e-3;
    r->tolerance = 1e-2;
    r->cublaslt_ns = 9000.5;
    r->naive_ns = 250000;
    r->ktune_version = strdup("0.1.0-test");
    r->nvrtc_version = 12040;
    r->created = 1700000000 + seed;
}

/* Opens the cache directory with raw LMDB, read-write, for a test that tampers with it. */
static KT_UNUSED int raw_open(const char *dir, MDB_env **env, MDB_txn **txn, MDB_dbi *dbi,
                              const char *db)
{
    int rc = mdb_env_create(env);
    if (rc)
        return rc;
    mdb_env_set_maxdbs(*env, 4);
    if ((rc = mdb_env_open(*env, dir, 0, 0664)) || (rc = mdb_txn_begin(*env, NULL, 0, txn)) ||
        (rc = mdb_dbi_open(*txn, db, 0, dbi)))
        return rc;
    return 0;
}

static KT_UNUSED bool file_read(const char *path, uint8_t **buf, size_t *len)
{
    char *b = NULL;
    if (kt_read_file(path, (size_t)1 << 30, &b, len, NULL) < 0)
        return false;
    *buf = (uint8_t *)b;
    return true;
}

static KT_UNUSED bool file_write(const char *path, const uint8_t *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(buf, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

/* Asserts that every field of a and b is equal (cmocka must be included before this header). */
static KT_UNUSED void assert_record_equal(const cache_record *a, const cache_record *b)
{
    uint8_t ka[CACHE_KEY_MAX], kb[CACHE_KEY_MAX];
    size_t la = 0, lb = 0;
    assert_int_equal(cache_key_encode(&a->key, ka, sizeof(ka), &la, NULL), 0);
    assert_int_equal(cache_key_encode(&b->key, kb, sizeof(kb), &lb, NULL), 0);
    assert_int_equal(la, lb);
    assert_memory_equal(ka, kb, la);
    assert_string_equal(a->key.gpu.name, b->key.gpu.name);
    assert_int_equal(a->key.gpu.sm_major, b->key.gpu.sm_major);
    assert_int_equal(a->key.gpu.sm_minor, b->key.gpu.sm_minor);
    assert_int_equal(a->key.gpu.sm_count, b->key.gpu.sm_count);
    assert_true(a->key.gpu.mem_bytes == b->key.gpu.mem_bytes);
    assert_int_equal(a->key.gpu.driver_version, b->key.gpu.driver_version);
    assert_int_equal(a->key.gpu.cuda_version, b->key.gpu.cuda_version);
    assert_string_equal(a->graph_name, b->graph_name);
    assert_memory_equal(a->key.problem, b->key.problem, OPS_SIG_BYTES);
    assert_true(a->key.tolerance == b->key.tolerance);
    assert_int_equal(a->n_inputs, b->n_inputs);
    assert_int_equal(a->n_outputs, b->n_outputs);
    for (int i = 0; i < a->n_inputs + a->n_outputs; i++) {
        assert_int_equal(a->slots[i].dtype, b->slots[i].dtype);
        assert_int_equal(a->slots[i].rank, b->slots[i].rank);
        assert_memory_equal(a->slots[i].dims, b->slots[i].dims,
                            sizeof(a->slots[i].dims[0]) * (size_t)a->slots[i].rank);
    }
    assert_int_equal(a->source_len, b->source_len);
    assert_memory_equal(a->source, b->source, a->source_len);
    assert_int_equal(a->cubin_len, b->cubin_len);
    if (a->cubin_len)
        assert_memory_equal(a->cubin, b->cubin, a->cubin_len);
    assert_int_equal(a->n_kernels, b->n_kernels);
    for (int i = 0; i < a->n_kernels; i++) {
        const cache_kernel *x = &a->kernels[i], *y = &b->kernels[i];
        assert_string_equal(x->entry, y->entry);
        assert_memory_equal(x->grid, y->grid, sizeof(x->grid));
        assert_memory_equal(x->block, y->block, sizeof(x->block));
        assert_int_equal(x->smem_bytes, y->smem_bytes);
        assert_int_equal(x->n_args, y->n_args);
        for (int j = 0; j < x->n_args; j++) {
            assert_int_equal(x->args[j].kind, y->args[j].kind);
            assert_int_equal(x->args[j].index, y->args[j].index);
            assert_true(x->args[j].offset == y->args[j].offset);
            assert_int_equal(x->args[j].scalar, y->args[j].scalar);
            assert_true(x->args[j].ival == y->args[j].ival);
            assert_true(x->args[j].fval == y->args[j].fval);
            assert_int_equal(x->args[j].has_tmap, y->args[j].has_tmap);
            if (x->args[j].has_tmap)
                assert_true(ops_tensor_map_equal(&x->args[j].tmap, &y->args[j].tmap));
        }
    }
    assert_true(a->workspace_bytes == b->workspace_bytes);
    assert_int_equal(a->n_layouts, b->n_layouts);
    for (int i = 0; i < a->n_layouts; i++) {
        assert_int_equal(a->layouts[i].input, b->layouts[i].input);
        assert_string_equal(a->layouts[i].layout, b->layouts[i].layout);
    }
    assert_string_equal(a->family, b->family);
    assert_string_equal(a->schedule, b->schedule);
    assert_true(a->time_ns == b->time_ns);
    assert_true(a->time_p10_ns == b->time_p10_ns);
    assert_true(a->time_p90_ns == b->time_p90_ns);
    assert_int_equal(a->timing, b->timing);
    assert_int_equal(a->reps, b->reps);
    assert_int_equal(a->verified, b->verified);
    assert_true(a->err_norm == b->err_norm);
    assert_true(a->err_max == b->err_max);
    assert_true(a->tolerance == b->tolerance);
    assert_true(a->cublaslt_ns == b->cublaslt_ns);
    assert_true(a->naive_ns == b->naive_ns);
    assert_string_equal(a->ktune_version, b->ktune_version);
    assert_int_equal(a->nvrtc_version, b->nvrtc_version);
    assert_true(a->created == b->created);
}
