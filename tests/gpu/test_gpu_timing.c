/* GPU test of the timing and cuBLASLt layers (search/timing.h, search/cublaslt.h):
 *
 *   cupti_vs_events  CUPTI and CUDA-event medians of a ~100 us memory-bound copy agree within 5%
 *   stats            p10 <= median <= p90, reps within bounds, kernels_per_rep as launched
 *   cold_vs_hot      a copy whose data fits L2 is no faster cold (L2 scrubbed) than hot
 *   cold_clean       the scrub leaves L2 clean: that copy cold is faster than after a 256 MiB
 *                    write alone (whose dirty lines it would write back while timed)
 *   multi_kernel     a two-kernel candidate: records grouped in pairs, the count found by probing
 *   interleaved      re-timing three candidates A B C A B C ... returns every one, in order
 *   cublaslt         gemm f16 1024x256x512 + bias + relu through every heuristic algorithm,
 *                    checked against the CPU fp64 reference, and timed
 *
 * Prints one line per check with the figures, so the log is the measurement record.
 * Exit: 0 all passed, 1 a check failed, 77 no GPU (skipped). */
#include "ops/library.h"
#include "ops/ops.h"
#include "search/compile.h"
#include "search/cublaslt.h"
#include "search/cudrv.h"
#include "search/timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP 77

static int failures;

static void check(bool ok, const char *name, const char *fmt, ...) KT_PRINTF(3, 4);
static void check(bool ok, const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%-16s %s  ", name, ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (!ok)
        failures++;
}

/* Two trivially correct memory-bound kernels: each thread moves one float4. */
static const char *kernels_src =
    "extern \"C\" __global__ void copy4(const float4 *__restrict__ in,\n"
    "                                   float4 *__restrict__ out, long long n)\n"
    "{\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < n)\n"
    "        out[i] = in[i];\n"
    "}\n"
    "extern \"C\" __global__ void twice4(const float4 *__restrict__ in,\n"
    "                                    float4 *__restrict__ out, long long n)\n"
    "{\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < n) {\n"
    "        float4 v = in[i];\n"
    "        out[i] = make_float4(2 * v.x, 2 * v.y, 2 * v.z, 2 * v.w);\n"
    "    }\n"
    "}\n";

/* A candidate for srch_time: copy4 over n float4s, then (kernels == 2) twice4 back. */
typedef struct copy_cand {
    srch_cuda *cu;
    CUfunction copy, twice;
    CUdeviceptr a, b;
    long long n;
    int kernels;
    CUdeviceptr dirty; /* cold_clean: written (memset) before each copy when set */
    size_t dirty_bytes;
} copy_cand;

static int launch_one(srch_cuda *cu, CUfunction f, CUdeviceptr in, CUdeviceptr out, long long n,
                      kt_err *err)
{
    void *params[] = {&in, &out, &n};
    unsigned grid = (unsigned)((n + 255) / 256);
    return srch_cuda_check(
        cu, cu->p_cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, NULL, params, NULL), "launch", err);
}

static int launch_copy(void *ctx, kt_err *err)
{
    copy_cand *c = ctx;
    static unsigned char v;
    int rc = c->dirty ? srch_cuda_check(c->cu, c->cu->p_cuMemsetD8(c->dirty, ++v, c->dirty_bytes),
                                        "dirty L2", err)
                      : 0;
    if (rc == 0)
        rc = launch_one(c->cu, c->copy, c->a, c->b, c->n, err);
    if (rc == 0 && c->kernels == 2)
        rc = launch_one(c->cu, c->twice, c->b, c->a, c->n, err);
    return rc;
}

static int make_cand(srch_cuda *cu, CUmodule mod, size_t bytes, int kernels, copy_cand *c,
                     kt_err *err)
{
    memset(c, 0, sizeof(*c));
    c->cu = cu;
    c->n = (long long)(bytes / 16);
    c->kernels = kernels;
    int rc;
    if ((rc = srch_cuda_check(cu, cu->p_cuModuleGetFunction(&c->copy, mod, "copy4"), "copy4",
                              err)) < 0 ||
        (rc = srch_cuda_check(cu, cu->p_cuModuleGetFunction(&c->twice, mod, "twice4"), "twice4",
                              err)) < 0 ||
        (rc = srch_cuda_check(cu, cu->p_cuMemAlloc(&c->a, bytes), "alloc", err)) < 0 ||
        (rc = srch_cuda_check(cu, cu->p_cuMemAlloc(&c->b, bytes), "alloc", err)) < 0 ||
        (rc = srch_cuda_check(cu, cu->p_cuMemsetD8(c->a, 0x3c, bytes), "fill", err)) < 0)
        return rc;
    return 0;
}

static void free_cand(copy_cand *c)
{
    if (c->a)
        c->cu->p_cuMemFree(c->a);
    if (c->b)
        c->cu->p_cuMemFree(c->b);
}

static void print_stats(const char *what, const srch_time_stats *s)
{
    printf("    %-28s median %9.2f us  p10 %9.2f  p90 %9.2f  spread %.4f  reps %4d  k/rep %d  "
           "%s  clock %u -> %u kHz\n",
           what, s->median_ns / 1e3, s->p10_ns / 1e3, s->p90_ns / 1e3, s->rel_spread, s->reps,
           s->kernels_per_rep, s->cold ? "cold" : "hot", s->sm_clock_khz_before,
           s->sm_clock_khz_after);
}

static bool stats_sane(const srch_time_stats *s, int min_reps, int max_reps)
{
    return s->median_ns > 0 && s->p10_ns <= s->median_ns && s->median_ns <= s->p90_ns &&
           s->reps >= min_reps && s->reps <= max_reps;
}

static int timing_checks(srch_timer *t, srch_cuda *cu, CUmodule mod)
{
    kt_err err = {0};
    copy_cand big, small, pair;
    memset(&big, 0, sizeof(big));
    memset(&small, 0, sizeof(small));
    memset(&pair, 0, sizeof(pair));
    /* 2 x 160 MiB moved per run: about 110 us at 3 TB/s, far over L2 (50 MB). */
    int rc = make_cand(cu, mod, (size_t)160 << 20, 1, &big, &err);
    /* 4 MiB each way: everything fits L2. */
    if (rc == 0)
        rc = make_cand(cu, mod, (size_t)4 << 20, 1, &small, &err);
    if (rc == 0)
        rc = make_cand(cu, mod, (size_t)4 << 20, 2, &pair, &err);
    if (rc < 0) {
        check(false, "setup", "%s", err.msg);
        goto out;
    }

    /* cupti_vs_events and stats */
    srch_time_opts hot = {0}, cold = {.cold = true};
    srch_time_stats s_big = {0}, s_small_hot = {0}, s_small_cold = {0}, s_big_cold = {0};
    double ev_ns = 0;
    if ((rc = srch_time(t, cu, launch_copy, &big, 1, &hot, &s_big, &err)) < 0 ||
        (rc = srch_time_events(cu, launch_copy, &big, 100, &ev_ns, &err)) < 0) {
        check(false, "cupti_vs_events", "%s", err.msg);
        goto out;
    }
    print_stats("copy 160 MiB, CUPTI", &s_big);
    double diff = fabs(s_big.median_ns - ev_ns) / ev_ns;
    check(diff < 0.05 && s_big.median_ns > 30e3, "cupti_vs_events",
          "CUPTI %.2f us, events %.2f us: %.2f%% apart (limit 5%%); %.2f TB/s",
          s_big.median_ns / 1e3, ev_ns / 1e3, diff * 100,
          2.0 * (double)big.n * 16 / s_big.median_ns / 1e3);
    check(stats_sane(&s_big, 10, 2000) && s_big.kernels_per_rep == 1, "stats",
          "p10 %.2f <= median %.2f <= p90 %.2f us, %d reps, rel spread %.4f", s_big.p10_ns / 1e3,
          s_big.median_ns / 1e3, s_big.p90_ns / 1e3, s_big.reps, s_big.rel_spread);

    /* cold_vs_hot */
    if ((rc = srch_time(t, cu, launch_copy, &small, 1, &hot, &s_small_hot, &err)) < 0 ||
        (rc = srch_time(t, cu, launch_copy, &small, 1, &cold, &s_small_cold, &err)) < 0 ||
        (rc = srch_time(t, cu, launch_copy, &big, 1, &cold, &s_big_cold, &err)) < 0) {
        check(false, "cold_vs_hot", "%s", err.msg);
        goto out;
    }
    print_stats("copy 4 MiB", &s_small_hot);
    print_stats("copy 4 MiB", &s_small_cold);
    print_stats("copy 160 MiB", &s_big_cold);
    /* A tiny allowance for noise only: data that fits L2 must not get faster when evicted. */
    check(s_small_cold.median_ns >= 0.99 * s_small_hot.median_ns && s_small_cold.cold &&
              !s_small_hot.cold && stats_sane(&s_small_cold, 10, 2000),
          "cold_vs_hot", "4 MiB: cold %.2f us / hot %.2f us = %.2fx; 160 MiB: cold/hot %.3fx",
          s_small_cold.median_ns / 1e3, s_small_hot.median_ns / 1e3,
          s_small_cold.median_ns / s_small_hot.median_ns, s_big_cold.median_ns / s_big.median_ns);

    /* cold_clean: the same copy after a 256 MiB write alone (hot: no scrub of the timer's; the
     * memset is no kernel, so the copy's record is all CUPTI times) */
    copy_cand dirty = small;
    dirty.dirty_bytes = (size_t)256 << 20;
    srch_time_stats s_dirty = {0};
    if ((rc = srch_cuda_check(cu, cu->p_cuMemAlloc(&dirty.dirty, dirty.dirty_bytes), "alloc",
                              &err)) < 0 ||
        (rc = srch_time(t, cu, launch_copy, &dirty, 1, &hot, &s_dirty, &err)) < 0) {
        if (dirty.dirty)
            cu->p_cuMemFree(dirty.dirty);
        check(false, "cold_clean", "%s", err.msg);
        goto out;
    }
    cu->p_cuMemFree(dirty.dirty);
    print_stats("copy 4 MiB after a write", &s_dirty);
    check(s_small_cold.median_ns < 0.97 * s_dirty.median_ns, "cold_clean",
          "4 MiB: cold (write + read scrub) %.2f us, after a write alone %.2f us",
          s_small_cold.median_ns / 1e3, s_dirty.median_ns / 1e3);

    /* multi_kernel: declared and probed kernel counts */
    srch_time_stats s_pair = {0}, s_probe = {0};
    if ((rc = srch_time(t, cu, launch_copy, &pair, 2, &hot, &s_pair, &err)) < 0 ||
        (rc = srch_time(t, cu, launch_copy, &pair, 0, &hot, &s_probe, &err)) < 0) {
        check(false, "multi_kernel", "%s", err.msg);
        goto out;
    }
    print_stats("copy + twice 4 MiB", &s_pair);
    check(s_pair.kernels_per_rep == 2 && s_probe.kernels_per_rep == 2 &&
              stats_sane(&s_pair, 10, 2000) && s_pair.median_ns > s_small_hot.median_ns,
          "multi_kernel", "2 kernels %.2f us (one kernel %.2f us), probed %d kernels per rep",
          s_pair.median_ns / 1e3, s_small_hot.median_ns / 1e3, s_probe.kernels_per_rep);

    /* A wrong kernel count is an error, never a guess. */
    srch_time_stats s_wrong = {0};
    kt_err werr = {0};
    rc = srch_time(t, cu, launch_copy, &pair, 3, &hot, &s_wrong, &werr);
    check(rc == -EIO, "count_mismatch", "declared 3 kernels for 2: rc %d (%s)", rc, werr.msg);

    /* interleaved */
    srch_launch_fn fns[3] = {launch_copy, launch_copy, launch_copy};
    void *ctxs[3] = {&small, &big, &pair};
    int kpr[3] = {1, 1, 0};
    srch_time_stats s_il[3];
    if ((rc = srch_time_interleaved(t, cu, 3, fns, ctxs, kpr, 30, false, s_il, &err)) < 0) {
        check(false, "interleaved", "%s", err.msg);
        goto out;
    }
    for (int i = 0; i < 3; i++)
        print_stats(i == 0   ? "interleaved 4 MiB"
                    : i == 1 ? "interleaved 160 MiB"
                             : "interleaved pair",
                    &s_il[i]);
    bool il_ok = true;
    for (int i = 0; i < 3; i++)
        il_ok &= s_il[i].reps == 30 && stats_sane(&s_il[i], 30, 30);
    il_ok &= s_il[2].kernels_per_rep == 2 && s_il[1].median_ns > s_il[0].median_ns;
    /* The same candidate timed alone and interleaved agrees within 5%. */
    double il_diff = fabs(s_il[1].median_ns - s_big.median_ns) / s_big.median_ns;
    il_ok &= il_diff < 0.05;
    check(il_ok, "interleaved",
          "3 candidates x 30 rounds; 160 MiB alone %.2f vs interleaved %.2f us",
          s_big.median_ns / 1e3, s_il[1].median_ns / 1e3);
    rc = 0;
out:
    free_cand(&big);
    free_cand(&small);
    free_cand(&pair);
    return rc;
}

/* ---- cuBLASLt: gemm_bias_relu f16, M=1024 (A 1024x512, W 512x256, bias 256) ---- */

typedef struct lt_cand {
    srch_lt_plan *plan;
    CUdeviceptr a, b, c, bias, ws;
} lt_cand;

static int launch_lt(void *ctx, kt_err *err)
{
    lt_cand *l = ctx;
    return srch_lt_run(l->plan, l->a, l->b, l->c, l->bias, l->ws, err);
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static double rng_uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static ops_graph *load_graph(const char *file, const char *shape, ops_diag *d)
{
    char path[1024], spec[64];
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    snprintf(path, sizeof(path), "%s/examples/%s", root ? root : ".", file);
    snprintf(spec, sizeof(spec), "%s", shape);
    ops_graph *g = NULL, *bound = NULL, *canon = NULL;
    ops_binding b;
    if (ops_graph_from_json_file(path, &g, d) < 0 || ops_graph_validate(g, d) < 0 ||
        ops_binding_parse(spec, &b, NULL) < 0 || ops_graph_bind(g, &b, 1, &bound, d) < 0 ||
        ops_graph_canonicalize(bound, &canon, d) < 0)
        canon = NULL;
    ops_graph_free(g);
    ops_graph_free(bound);
    return canon;
}

static int cublaslt_checks(srch_timer *t, srch_cuda *cu)
{
    kt_err err = {0};
    ops_diag d = {0};
    srch_lt *lt = NULL;
    lt_cand lc = {0};
    int rc = 0, n_in = 0;
    double *in[8] = {0}, *ref = NULL;
    CUdeviceptr dev_in[8] = {0};
    uint8_t *host = NULL;
    ops_graph *g = load_graph("gemm_bias_relu.json", "M=1024", &d);
    if (!g) {
        check(false, "cublaslt", "graph: %s", d.msg);
        return -EINVAL;
    }
    ops_group grp;
    ops_lt_desc desc;
    ops_schedule sched = {.family = OPS_FAM_LIBRARY, .v = {0}};
    if (ops_group_init(&grp, g, (1ull << g->n_nodes) - 1, &d) < 0 ||
        ops_library_describe(&grp, &sched, &desc, &d) < 0) {
        check(false, "cublaslt", "describe: %s", d.msg);
        rc = -EINVAL;
        goto out;
    }
    rc = srch_lt_open(&lt, &err);
    if (rc < 0) {
        check(false, "cublaslt", "open: %s", err.msg);
        goto out;
    }
    /* Inputs: every graph input, random with mixed magnitudes, rounded to f16 as the GPU
     * sees them. */
    while (n_in < g->n_tensors && g->tensors[n_in].producer < 0)
        n_in++;
    for (int i = 0; i < n_in; i++) {
        const ops_tensor *tn = &g->tensors[i];
        int64_t n = ops_shape_numel(&tn->shape);
        size_t es = ops_dtype_size(tn->dtype);
        in[i] = malloc((size_t)n * sizeof(double));
        host = malloc((size_t)n * es);
        if (!in[i] || !host) {
            rc = -ENOMEM;
            goto out;
        }
        for (int64_t k = 0; k < n; k++) {
            double v = rng_uniform() * ((k % 7) == 3 ? 8.0 : 1.0);
            ops_dtype_store(tn->dtype, v, host + k * es);
            in[i][k] = ops_dtype_load(tn->dtype, host + k * es);
        }
        if ((rc = srch_cuda_check(cu, cu->p_cuMemAlloc(&dev_in[i], (size_t)n * es), "alloc",
                                  &err)) < 0 ||
            (rc = srch_cuda_check(cu, cu->p_cuMemcpyHtoD(dev_in[i], host, (size_t)n * es), "upload",
                                  &err)) < 0)
            goto cuda_fail;
        free(host);
        host = NULL;
    }
    const ops_tensor *yt = &g->tensors[desc.c_tensor];
    int64_t ny = ops_shape_numel(&yt->shape);
    size_t es = ops_dtype_size(yt->dtype);
    ref = malloc((size_t)ny * sizeof(double));
    host = malloc((size_t)ny * es);
    if (!ref || !host) {
        rc = -ENOMEM;
        goto out;
    }
    if (ops_ref_run(g, (const double *const *)in, &ref, &d) < 0) {
        check(false, "cublaslt", "reference: %s", d.msg);
        rc = -EINVAL;
        goto out;
    }
    lc.a = dev_in[desc.a_tensor];
    lc.b = dev_in[desc.b_tensor];
    lc.bias = desc.bias_tensor >= 0 ? dev_in[desc.bias_tensor] : 0;
    if ((rc = srch_cuda_check(cu, cu->p_cuMemAlloc(&lc.c, (size_t)ny * es), "alloc", &err)) < 0 ||
        (rc = srch_cuda_check(cu, cu->p_cuMemAlloc(&lc.ws, (size_t)desc.workspace_bytes),
                              "workspace", &err)) < 0)
        goto cuda_fail;

    int n_avail = 0, n_ok = 0;
    double worst = 0;
    for (int h = 0; h < 8; h++) {
        desc.heuristic_index = h;
        int avail = 0;
        rc = srch_lt_plan_new(lt, &desc, &lc.plan, &avail, &err);
        if (h == 0)
            n_avail = avail;
        if (rc == -ENOENT && h >= avail)
            break; /* the heuristic offers fewer than 8 for this shape */
        if (rc < 0) {
            check(false, "cublaslt", "plan %d: %s", h, err.msg);
            goto out;
        }
        /* NaN poison: an unwritten element fails. */
        if ((rc = srch_cuda_check(cu, cu->p_cuMemsetD8(lc.c, 0xff, (size_t)ny * es), "poison",
                                  &err)) < 0 ||
            (rc = launch_lt(&lc, &err)) < 0 ||
            (rc = srch_cuda_check(cu, cu->p_cuCtxSynchronize(), "run", &err)) < 0 ||
            (rc = srch_cuda_check(cu, cu->p_cuMemcpyDtoH(host, lc.c, (size_t)ny * es), "download",
                                  &err)) < 0)
            goto cuda_fail;
        double num = 0, den = 0;
        int64_t bad = 0;
        for (int64_t k = 0; k < ny; k++) {
            double got = ops_dtype_load(yt->dtype, host + k * es), want = ref[k];
            if (!isfinite(got)) {
                bad++;
                continue;
            }
            num += (got - want) * (got - want);
            den += want * want;
        }
        double e = den > 0 ? sqrt(num / den) : sqrt(num);
        bool ok = bad == 0 && e <= 3e-3;
        printf("    heuristic %d: normwise error %.2e%s\n", h, e, bad ? " with NaN" : "");
        n_ok += ok;
        if (e > worst || bad)
            worst = bad ? INFINITY : fmax(worst, e);
        if (h == 0) {
            srch_time_stats st = {0};
            srch_time_opts o = {0};
            if ((rc = srch_time(t, cu, launch_lt, &lc, 0, &o, &st, &err)) < 0) {
                check(false, "cublaslt_time", "%s", err.msg);
                goto out;
            }
            print_stats("cuBLASLt heuristic 0", &st);
            check(stats_sane(&st, 10, 2000), "cublaslt_time",
                  "gemm_bias_relu f16 1024x256x512: %.2f us hot, %d kernel(s) per call",
                  st.median_ns / 1e3, st.kernels_per_rep);
        }
        srch_lt_plan_free(lc.plan);
        lc.plan = NULL;
    }
    rc = 0;
    check(n_avail >= 1 && n_ok == (n_avail < 8 ? n_avail : 8), "cublaslt",
          "heuristic returned %d algorithms; %d verified, worst normwise error %.2e (tol 3e-3)",
          n_avail, n_ok, worst);
    goto out;
cuda_fail:
    check(false, "cublaslt", "%s", err.msg);
out:
    srch_lt_plan_free(lc.plan);
    if (lc.c)
        cu->p_cuMemFree(lc.c);
    if (lc.ws)
        cu->p_cuMemFree(lc.ws);
    for (int i = 0; i < 8; i++) {
        free(in[i]);
        if (dev_in[i])
            cu->p_cuMemFree(dev_in[i]);
    }
    free(ref);
    free(host);
    srch_lt_close(lt);
    ops_graph_free(g);
    return rc;
}

int main(void)
{
    srch_timer *t = NULL;
    srch_cuda cu;
    kt_err err = {0}, cerr = {0};
    /* CUPTI first: activity tracing must be on before the context exists. */
    int trc = srch_timer_open(&t, &err);
    int crc = srch_cuda_open(&cu, 0, &cerr);
    if (crc == -ENODEV) {
        printf("skip: %s\n", cerr.msg);
        srch_timer_close(t);
        return SKIP;
    }
    if (trc < 0 || crc < 0) {
        printf("FAIL: %s\n", trc < 0 ? err.msg : cerr.msg);
        srch_timer_close(t);
        return 1;
    }
    int major = 0, minor = 0;
    char name[128] = "", arch[16];
    cu.p_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cu.device);
    cu.p_cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cu.device);
    cu.p_cuDeviceGetName(name, (int)sizeof(name), cu.device);
    snprintf(arch, sizeof(arch), "sm_%d%d", major, minor);
    printf("device: %s (%s), driver %d\n", name, arch, cu.driver_version);

    srch_compile_result r = {0};
    CUmodule mod = NULL;
    if (srch_nvrtc_compile(kernels_src, arch, &r) < 0 || r.status != SRCH_COMPILE_OK) {
        printf("FAIL: compile: %s\n", r.log ? r.log : "NVRTC did not run");
        failures++;
    } else if (srch_cuda_check(&cu, cu.p_cuModuleLoadData(&mod, r.cubin), "load", &err) < 0) {
        printf("FAIL: %s\n", err.msg);
        failures++;
    } else {
        timing_checks(t, &cu, mod);
        cublaslt_checks(t, &cu);
        cu.p_cuModuleUnload(mod);
    }
    srch_compile_result_release(&r);
    srch_timer_close(t); /* before the context goes: it frees the scrub buffer there */
    srch_cuda_close(&cu);
    printf("\n%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
