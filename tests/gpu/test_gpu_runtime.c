/* GPU test of the deploy-time runtime (ktune_lookup, ktune_launch) against the CPU fp64
 * reference (ops_ref_run):
 *   1. srch_tune with the real ktune-worker writes a cache (gemm_bias_relu M=200, softmax
 *      M=100 N=1000: ragged shapes); ktune_lookup must find each winner as an EXACT match (the
 *      runtime's fingerprint equals the worker's) and ktune_launch on a stream must reproduce the
 *      reference within the record's tolerance, with outputs and workspace poisoned first;
 *   2. a serial split-K gemm record (emitted and compiled here: its kernel needs its workspace
 *      zeroed before each launch) launched twice on a poisoned workspace;
 *   3. a library record (one cuBLASLt call rebuilt from the graph and the schedule);
 *   4. the tuned gemm record under another driver version in a second cache: a COMPATIBLE
 *      match, correct too; and the memo: the same kernel for the same key and context;
 *   5. what the runtime refuses before the driver sees it: the split-K record of 2. with one
 *      argument more than its kernel's parameters (cuFuncGetParamInfo), and with its cubin one
 *      byte short, each refused by ktune_lookup (-EBADMSG); and a launch whose output buffer
 *      overlaps an input or the workspace, refused by ktune_launch (-EINVAL), naming both;
 *   6. declared order (issue 17): out = sub(b, a) over two same-shaped inputs declared (a, b),
 *      whose canonical order is (b, a), tuned, then launched with buffers in declared order and
 *      compared with the reference (b - a). Every launch here passes buffers in declared order;
 *   7. on sm_90: a hand-made record whose kernel (tests/gpu/tmap_copy.cu) reads its ragged f16
 *      input through a TMA tensor map the runtime encodes at each launch, compared with the
 *      reference (y = 2x, and row sums over whole boxes: the box past x must read as zeros).
 * The worker is $KTUNE_WORKER (else the supervisor's lookup). Exit: 0 passed, 1 failed, 77 no
 * GPU (skipped). */
#include "search/compile.h"
#include "search/cudrv.h"
#include "search/tune.h"

#include "client/ktune.h"
#include "client/libktune_internal.h"
#include "ops/library.h"
#include "ops/ops.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SKIP   77
#define SUB_BA "tests/gpu/sub_ba.json" /* out = sub(b, a), declared (a, b) */

static int failures;
static char tmp_root[256];
static srch_cuda cu;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("  FAIL %s:%d: ", __FILE__, __LINE__);                                          \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static uint64_t rng_state;
static double rng_uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* examples/<file>, or <file> under the source root when it names a directory */
static const char *example(const char *file, char *buf, size_t cap)
{
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    snprintf(buf, cap, "%s/%s%s", root ? root : ".", strchr(file, '/') ? "" : "examples/", file);
    return buf;
}

static int parse_shapes(const char *text, ops_binding *b, ktune_shape *s, char *keep, size_t cap)
{
    snprintf(keep, cap, "%s", text);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(keep, ",", &save); tok && n < 8;
         tok = strtok_r(NULL, ",", &save)) {
        ops_binding_parse(tok, &b[n], NULL);
        s[n] = (ktune_shape){b[n].name, b[n].value};
        n++;
    }
    return n;
}

/* ---- 1. tuning into a cache ---- */

static int tune(srch_worker *w, const char *dir, const char *file, const char *shapes,
                double budget_s)
{
    char path[1024], keep[128];
    ops_binding b[8];
    ktune_shape s[8];
    int n = parse_shapes(shapes, b, s, keep, sizeof(keep));
    ops_graph *g = NULL;
    ops_diag d = {0};
    if (ops_graph_from_json_file(example(file, path, sizeof(path)), &g, &d) < 0 ||
        ops_graph_validate(g, &d) < 0) {
        printf("  FAIL %s: %s\n", file, d.msg);
        failures++;
        ops_graph_free(g);
        return -1;
    }
    cache_env *cache = NULL;
    kt_err err = {0};
    if (cache_open(dir, 0, NULL, &cache, &err) < 0) {
        printf("  FAIL cache_open %s: %s\n", dir, err.msg);
        failures++;
        ops_graph_free(g);
        return -1;
    }
    char store[400];
    snprintf(store, sizeof(store), "%s/cubins", tmp_root);
    srch_tune_opts o = {
        .precision = OPS_PREC_EXACT, .budget_s = budget_s, .worker = w, .store_dir = store};
    static srch_tune_result r;
    int rc = srch_tune(g, b, n, cache, &o, &r, &err);
    cache_close(cache);
    ops_graph_free(g);
    if (rc < 0 || !r.found) {
        printf("  FAIL tune %s %s: %s\n", file, shapes, rc < 0 ? err.msg : "no winner");
        failures++;
        return -1;
    }
    printf("  tuned %s %s: %d group(s), %.2f us, %d trials, %.1f s\n", file, shapes, r.n_picks,
           r.time_ns / 1e3, r.trials, r.seconds);
    return 0;
}

/* ---- records made here: split-K and library ---- */

typedef struct pick_ctx {
    int splitk, mode; /* knob indices */
    int serial;       /* the value labelled "serial" */
    ops_schedule s;
    bool found;
} pick_ctx;

static int knob_index(const ops_family *f, const char *name)
{
    for (int k = 0; k < f->n_knobs; k++)
        if (strcmp(f->knobs[k].name, name) == 0)
            return k;
    return -1;
}

static int pick_splitk(const ops_schedule *s, void *ctx)
{
    pick_ctx *p = ctx;
    /* serial split-K (semaphores in the workspace) */
    if (s->v[p->splitk] > 1 && s->v[p->mode] == p->serial) {
        p->s = *s;
        p->found = true;
        return 1;
    }
    return 0;
}

static cache_arg map_tensor(const ops_graph *canon, const int *in_rank, const int *out_rank,
                            int32_t t)
{
    cache_arg a = {0};
    if (canon->tensors[t].producer < 0) {
        a.kind = CACHE_ARG_INPUT;
        a.index = in_rank[t];
        return a;
    }
    a.kind = CACHE_ARG_OUTPUT;
    for (int j = 0; j < canon->n_outputs; j++)
        if (canon->outputs[j] == t)
            a.index = out_rank[j];
    return a;
}

/* How make_record damages a split-K record before storing it (the checksum stays sound: only
 * the deploy-time runtime's own checks stand between such a record and the driver). */
typedef enum mangle {
    MANGLE_NONE = 0,
    MANGLE_EXTRA_ARG, /* one more argument than the kernel's parameters (cuFuncGetParamInfo) */
    MANGLE_TRUNCATED, /* the cubin's last byte cut (cuModuleLoadData takes no length) */
} mangle;

/* Builds, compiles (split-K) or describes (library) one gemm_bias_relu record at M=m for gpu
 * and stores it in dir. */
static int make_record(const char *dir, const ktune_graph *kg, const ops_device *dev,
                       const cache_gpu *gpu, int64_t m, bool library, mangle how)
{
    ops_binding b = {"M", m};
    ops_graph *bound = NULL, *canon = NULL;
    ops_diag d = {0};
    ops_group grp;
    int in_rank[8] = {0}, out_rank[8] = {0};
    ops_emitted em = {0};
    srch_compile_result cr = {0};
    cache_record r;
    cache_record_init(&r);
    int rc = -1;
    if (ops_graph_bind(kg->g, &b, 1, &bound, &d) < 0 ||
        ops_graph_canonicalize(bound, &canon, &d) < 0 ||
        ops_group_init(&grp, canon, (1ull << canon->n_nodes) - 1, &d) < 0 ||
        ops_graph_canonical_io(canon, in_rank, out_rank, &d) < 0) {
        printf("  FAIL record M=%lld: %s\n", (long long)m, d.msg);
        goto out;
    }
    grp.precision = OPS_PREC_EXACT;
    r.key.gpu = *gpu;
    memcpy(r.key.sig, kg->sig, OPS_SIG_BYTES);
    r.key.n_shapes = 1;
    snprintf(r.key.shapes[0].name, sizeof(r.key.shapes[0].name), "M");
    r.key.shapes[0].value = m;
    r.key.precision = OPS_PREC_EXACT;
    kt_err perr = {0};
    if (cache_record_set_problem(&r, canon, &perr) < 0) {
        printf("  FAIL record M=%lld: %s\n", (long long)m, perr.msg);
        goto out;
    }
    r.graph_name = strdup("gemm_bias_relu");
    r.n_kernels = 1;
    r.kernels = calloc(1, sizeof(*r.kernels));
    r.verified = true; /* checked against the reference by this test */
    r.time_ns = 1000;
    r.time_p10_ns = r.time_p90_ns = 1000;
    r.reps = 1;
    r.tolerance = 3e-3;
    r.created = 1700000000;
    char sched[256];
    if (library) {
        ops_schedule s = {.family = OPS_FAM_LIBRARY, .v = {0}};
        ops_lt_desc lt;
        if (ops_library_describe(&grp, &s, &lt, &d) < 0) {
            printf("  FAIL library describe: %s\n", d.msg);
            goto out;
        }
        ops_schedule_format(&s, sched, sizeof(sched));
        r.family = strdup("library");
        r.source = strdup("/* cuBLASLt: cublasLtMatmul, heuristic result 0 */\n");
        r.source_len = strlen(r.source);
        r.workspace_bytes = (uint64_t)(lt.workspace_bytes + 255) / 256 * 256;
        cache_kernel *k = &r.kernels[0];
        k->entry = strdup("cublasLtMatmul");
        k->args = calloc(4, sizeof(cache_arg));
        int32_t ts[4] = {lt.a_tensor, lt.b_tensor, lt.c_tensor, lt.bias_tensor};
        for (int j = 0; j < 4; j++)
            if (ts[j] >= 0)
                k->args[k->n_args++] = map_tensor(canon, in_rank, out_rank, ts[j]);
    } else {
        const ops_family *f = ops_family_get(OPS_FAM_GEMM);
        pick_ctx p = {.splitk = knob_index(f, "splitk"), .mode = knob_index(f, "splitk_mode")};
        p.serial = -1;
        for (int i = 0; p.mode >= 0 && f->knobs[p.mode].labels && i < f->knobs[p.mode].n_values;
             i++)
            if (strcmp(f->knobs[p.mode].labels[i], "serial") == 0)
                p.serial = f->knobs[p.mode].values[i];
        if (p.splitk < 0 || p.mode < 0 || p.serial < 0 || !f->matches(&grp)) {
            printf("  FAIL gemm family: no split-K knobs or no match\n");
            goto out;
        }
        ops_family_enumerate(f, &grp, dev, pick_splitk, &p, NULL);
        if (!p.found) {
            printf("  FAIL no serial split-K schedule for M=%lld\n", (long long)m);
            goto out;
        }
        if (f->emit(&grp, &p.s, dev, &em, &d) < 0) {
            printf("  FAIL emit: %s\n", d.msg);
            goto out;
        }
        if (srch_nvrtc_compile(em.source, dev->arch, &cr) < 0 || cr.status != SRCH_COMPILE_OK) {
            printf("  FAIL compile split-K: %.300s\n", cr.log ? cr.log : "");
            goto out;
        }
        ops_schedule_format(&p.s, sched, sizeof(sched));
        r.family = strdup("gemm");
        r.source = em.source;
        em.source = NULL;
        r.source_len = strlen(r.source);
        r.cubin = cr.cubin;
        r.cubin_len = cr.cubin_len;
        cr.cubin = NULL;
        r.workspace_bytes = (uint64_t)em.workspace_bytes;
        free(r.kernels);
        r.n_kernels = em.n_kernels;
        r.kernels = calloc((size_t)em.n_kernels, sizeof(*r.kernels));
        bool zeroes = false;
        for (int i = 0; i < em.n_kernels; i++) {
            const ops_kernel_launch *l = &em.kernels[i];
            cache_kernel *k = &r.kernels[i];
            k->entry = strdup(l->entry);
            memcpy(k->grid, l->grid, sizeof(k->grid));
            memcpy(k->block, l->block, sizeof(k->block));
            k->smem_bytes = l->smem_bytes;
            if (l->zero_workspace) {
                k->zero_offset = 0;
                k->zero_bytes = (uint64_t)em.workspace_bytes;
                zeroes = true;
            }
            k->args = calloc((size_t)l->n_args + 1, sizeof(cache_arg));
            for (int j = 0; j < l->n_args; j++) {
                if (l->args[j].kind == OPS_ARG_WORKSPACE)
                    k->args[j] =
                        (cache_arg){.kind = CACHE_ARG_WORKSPACE,
                                    .offset = (uint64_t)l->args[j].offset,
                                    .bytes = (uint64_t)(em.workspace_bytes - l->args[j].offset)};
                else
                    k->args[j] = map_tensor(canon, in_rank, out_rank, l->args[j].tensor);
                k->n_args++;
            }
        }
        CHECK(zeroes && em.workspace_bytes > 0, "split-K schedule %s clears no workspace", sched);
        if (how == MANGLE_EXTRA_ARG) {
            cache_kernel *k = &r.kernels[0];
            k->args[k->n_args++] =
                (cache_arg){.kind = CACHE_ARG_SCALAR, .scalar = CACHE_SCALAR_I32, .ival = 1};
        } else if (how == MANGLE_TRUNCATED) {
            r.cubin_len--;
        }
    }
    r.schedule = strdup(sched);
    cache_env *env = NULL;
    kt_err err = {0};
    if (cache_open(dir, 0, NULL, &env, &err) < 0 || cache_put(env, &r, NULL, &err) < 0) {
        printf("  FAIL storing %s: %s\n", sched, err.msg);
        cache_close(env);
        goto out;
    }
    cache_close(env);
    printf("  record M=%lld: %s\n", (long long)m, sched);
    rc = 0;
out:
    if (rc < 0)
        failures++;
    cache_record_free(&r);
    srch_compile_result_release(&cr);
    ops_emitted_free(&em);
    ops_graph_free(canon);
    ops_graph_free(bound);
    return rc;
}

/* 7: a record whose kernel reads its input through a TMA tensor map (tests/gpu/tmap_copy.cu at
 * M = 100: y = 2 x, s = row sums over whole boxes, so the box past x must read as zeros): the
 * runtime encodes the map over the caller's buffer at each ktune_launch. */
static int make_tmap_record(const char *dir, const cache_gpu *gpu)
{
    char path[1024];
    ktune_graph *kg = NULL;
    ktune_error kerr = {0};
    ops_binding b = {"M", 100};
    ops_graph *bound = NULL, *canon = NULL;
    ops_diag d = {0};
    int in_rank[8] = {0}, out_rank[8] = {0};
    srch_compile_result cr = {0};
    char *src = NULL;
    kt_err err = {0};
    cache_record r;
    cache_record_init(&r);
    int rc = -1;
    snprintf(path, sizeof(path), "%s/tests/gpu/tmap_copy.cu",
             getenv("KTUNE_SOURCE_ROOT") ? getenv("KTUNE_SOURCE_ROOT") : ".");
    if (kt_read_file(path, 1 << 20, &src, NULL, &err) < 0 ||
        srch_nvrtc_compile(src, "sm_90a", &cr) < 0 || cr.status != SRCH_COMPILE_OK) {
        printf("  FAIL tmap_copy.cu: %s %.300s\n", err.msg, cr.log ? cr.log : "");
        goto out;
    }
    if (ktune_graph_load(example("tests/gpu/tmap_copy.json", path, sizeof(path)), &kg, &kerr) < 0 ||
        ops_graph_bind(kg->g, &b, 1, &bound, &d) < 0 ||
        ops_graph_canonicalize(bound, &canon, &d) < 0 ||
        ops_graph_canonical_io(canon, in_rank, out_rank, &d) < 0) {
        printf("  FAIL tmap record: %s%s\n", kerr.msg, d.msg);
        goto out;
    }
    int x = ops_graph_find_tensor(canon, "x"), y = ops_graph_find_tensor(canon, "y"),
        s = ops_graph_find_tensor(canon, "s");
    if (x < 0 || y < 0 || s < 0) {
        printf("  FAIL tmap record: x, y or s not in the canonical graph\n");
        goto out;
    }
    r.key.gpu = *gpu;
    memcpy(r.key.sig, kg->sig, OPS_SIG_BYTES);
    r.key.n_shapes = 1;
    snprintf(r.key.shapes[0].name, sizeof(r.key.shapes[0].name), "M");
    r.key.shapes[0].value = 100;
    r.key.precision = OPS_PREC_EXACT;
    if (cache_record_set_problem(&r, canon, &err) < 0) {
        printf("  FAIL tmap record: %s\n", err.msg);
        goto out;
    }
    r.graph_name = strdup("tmap_copy");
    r.family = strdup("pointwise");
    r.schedule = strdup("pointwise tmap_copy.cu");
    r.source = src;
    r.source_len = strlen(src);
    src = NULL;
    r.cubin = cr.cubin;
    r.cubin_len = cr.cubin_len;
    cr.cubin = NULL;
    r.verified = true; /* checked against the reference by this test */
    r.time_ns = r.time_p10_ns = r.time_p90_ns = 1000;
    r.reps = 1;
    r.tolerance = 1e-2;
    r.created = 1700000000;
    r.n_kernels = 1;
    r.kernels = calloc(1, sizeof(*r.kernels));
    cache_kernel *k = &r.kernels[0];
    k->entry = strdup("tmap_copy");
    k->grid[0] = (100 + 15) / 16;
    k->grid[1] = k->grid[2] = 1;
    k->block[0] = 128;
    k->block[1] = k->block[2] = 1;
    k->args = calloc(3, sizeof(cache_arg));
    k->n_args = 3;
    k->args[0] = map_tensor(canon, in_rank, out_rank, x);
    k->args[0].has_tmap = true;
    k->args[0].tmap = (ops_tensor_map){.rank = 2,
                                       .dtype = OPS_DT_F16,
                                       .dims = {200, 100},
                                       .strides = {400},
                                       .box = {64, 16},
                                       .elem_strides = {1, 1}};
    k->args[1] = map_tensor(canon, in_rank, out_rank, y);
    k->args[2] = map_tensor(canon, in_rank, out_rank, s);
    cache_env *env = NULL;
    if (cache_open(dir, 0, NULL, &env, &err) < 0 || cache_put(env, &r, NULL, &err) < 0) {
        printf("  FAIL storing the tmap record: %s\n", err.msg);
        cache_close(env);
        goto out;
    }
    cache_close(env);
    printf("  record tmap_copy M=100 (a tensor-map argument)\n");
    rc = 0;
out:
    if (rc < 0)
        failures++;
    cache_record_free(&r);
    srch_compile_result_release(&cr);
    free(src);
    ops_graph_free(canon);
    ops_graph_free(bound);
    ktune_graph_free(kg);
    return rc;
}

/* ---- lookup, launch, compare ---- */

/* Looks up file at shapes in rt, launches it `launches` times on a stream (outputs and
 * workspace poisoned first), compares with ops_ref_run. Returns the kernel (or NULL). */
static ktune_kernel *run_one(ktune_runtime *rt, const char *file, const char *shapes,
                             ktune_match want, const char *want_family, int launches)
{
    char path[1024], keep[128];
    ops_binding b[8];
    ktune_shape s[8];
    int n = parse_shapes(shapes, b, s, keep, sizeof(keep));
    ktune_graph *kg = NULL;
    ktune_error err = {0};
    ktune_kernel *k = NULL;
    ops_graph *bound = NULL;
    ops_diag d = {0};
    double *in[8] = {0}, *ref[4] = {0}, *got = NULL;
    CUdeviceptr din[8] = {0}, dout[4] = {0}, ws = 0;
    CUstream stream = NULL;
    void *in_ptr[8] = {0}, *out_ptr[4] = {0};
    uint8_t *host = NULL;
    int n_in = 0;
    printf("== %s %s\n", file, shapes);
    if (ktune_graph_load(example(file, path, sizeof(path)), &kg, &err) < 0) {
        CHECK(0, "%s", err.msg);
        goto out;
    }
    ktune_match match = (ktune_match)-1;
    int rc = ktune_lookup(rt, kg, s, n, "exact", -1, &k, &match, &err);
    CHECK(rc == 0, "ktune_lookup: %s", err.msg);
    if (rc < 0) {
        k = NULL;
        goto out;
    }
    ktune_kernel_info info;
    ktune_kernel_get_info(k, &info);
    printf("  %s match: %s [%s], %d launch(es), workspace %llu, tuned %.2f us on %s (driver %d)\n",
           match == KTUNE_MATCH_EXACT ? "exact" : "compatible", info.family, info.schedule,
           info.n_launches, (unsigned long long)info.workspace_bytes, info.time_ns / 1e3, info.gpu,
           info.driver_version);
    CHECK(match == want, "match %d, want %d", (int)match, (int)want);
    CHECK(info.match == match, "info.match %d", (int)info.match);
    if (want_family)
        CHECK(strcmp(info.family, want_family) == 0, "family %s, want %s", info.family,
              want_family);
    ktune_kernel *again = NULL;
    CHECK(ktune_lookup(rt, kg, s, n, NULL, 0, &again, NULL, &err) == 0 && again == k,
          "a second lookup (device 0, the current context) gave another kernel: %s", err.msg);

    if (ops_graph_bind(kg->g, b, n, &bound, &d) < 0) {
        CHECK(0, "bind: %s", d.msg);
        goto out;
    }
    /* buffers in the graph's declared order (ktune.h): tensor order for inputs, the listed
     * order for outputs; the reference takes them so too */
    rng_state = 0x1234567ull;
    for (int t = 0; t < bound->n_tensors && bound->tensors[t].producer < 0; t++, n_in++) {
        const ops_tensor *x = &bound->tensors[t];
        int64_t ne = ops_shape_numel(&x->shape);
        size_t es = ops_dtype_size(x->dtype);
        in[t] = malloc((size_t)ne * sizeof(double));
        host = realloc(host, (size_t)ne * es);
        for (int64_t i = 0; i < ne; i++) {
            ops_dtype_store(x->dtype, rng_uniform() * ((i % 7) == 3 ? 4.0 : 1.0), host + i * es);
            in[t][i] = ops_dtype_load(x->dtype, host + i * es);
        }
        if (srch_cuda_check(&cu, cu.p_cuMemAlloc(&din[t], (size_t)ne * es), "alloc", NULL) < 0 ||
            srch_cuda_check(&cu, cu.p_cuMemcpyHtoD(din[t], host, (size_t)ne * es), "upload", NULL) <
                0) {
            CHECK(0, "input upload");
            goto out;
        }
        in_ptr[t] = (void *)(uintptr_t)din[t];
    }
    for (int j = 0; j < bound->n_outputs; j++) {
        const ops_tensor *x = &bound->tensors[bound->outputs[j]];
        int64_t ne = ops_shape_numel(&x->shape);
        ref[j] = malloc((size_t)ne * sizeof(double));
        size_t bytes = (size_t)ne * ops_dtype_size(x->dtype);
        /* 0xff bytes: NaN in f32, f16 and bf16, so an unwritten element fails */
        if (srch_cuda_check(&cu, cu.p_cuMemAlloc(&dout[j], bytes), "alloc", NULL) < 0 ||
            srch_cuda_check(&cu, cu.p_cuMemsetD8(dout[j], 0xff, bytes), "poison", NULL) < 0) {
            CHECK(0, "output alloc");
            goto out;
        }
        out_ptr[j] = (void *)(uintptr_t)dout[j];
    }
    if (ops_ref_run(bound, (const double *const *)in, ref, &d) < 0) {
        CHECK(0, "reference: %s", d.msg);
        goto out;
    }
    uint64_t wsb = ktune_kernel_workspace_size(k);
    if (wsb && (srch_cuda_check(&cu, cu.p_cuMemAlloc(&ws, wsb), "alloc ws", NULL) < 0 ||
                srch_cuda_check(&cu, cu.p_cuMemsetD8(ws, 0xff, wsb), "poison ws", NULL) < 0)) {
        CHECK(0, "workspace alloc");
        goto out;
    }
    if (srch_cuda_check(&cu, cu.p_cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "stream", NULL) <
        0) {
        CHECK(0, "stream");
        goto out;
    }
    CHECK(ktune_kernel_workspace_size(k) == info.workspace_bytes, "workspace size");
    for (int i = 0; i < n_in; i++)
        CHECK(ktune_prepack_size(k, i) == 0, "input %d wants packing", i);
    for (int l = 0; l < launches; l++) {
        rc = ktune_launch(k, in_ptr, out_ptr, (void *)(uintptr_t)ws, stream, &err);
        CHECK(rc == 0, "ktune_launch %d: %s", l, err.msg);
        kt_err e = {0};
        CHECK(srch_cuda_check(&cu, cu.p_cuStreamSynchronize(stream), "sync", &e) == 0,
              "after launch %d: %s", l, e.msg);
        if (rc < 0)
            goto out;
        for (int j = 0; j < bound->n_outputs; j++) {
            const ops_tensor *x = &bound->tensors[bound->outputs[j]];
            int64_t ne = ops_shape_numel(&x->shape);
            size_t es = ops_dtype_size(x->dtype);
            host = realloc(host, (size_t)ne * es);
            got = realloc(got, (size_t)ne * sizeof(double));
            if (srch_cuda_check(&cu, cu.p_cuMemcpyDtoH(host, dout[j], (size_t)ne * es), "download",
                                NULL) < 0) {
                CHECK(0, "download");
                goto out;
            }
            double num = 0, den = 0;
            int64_t nan = 0;
            for (int64_t i = 0; i < ne; i++) {
                got[i] = ops_dtype_load(x->dtype, host + i * es);
                if (!isfinite(got[i]) && isfinite(ref[j][i]))
                    nan++;
                num += (got[i] - ref[j][i]) * (got[i] - ref[j][i]);
                den += ref[j][i] * ref[j][i];
            }
            double e_norm = sqrt(num) / (den > 0 ? sqrt(den) : 1);
            double tol = info.tolerance > 0 ? info.tolerance : 3e-3;
            printf("  launch %d output %d: normwise error %.3g (tolerance %.3g), %lld non-finite\n",
                   l, j, e_norm, tol, (long long)nan);
            CHECK(nan == 0 && e_norm <= tol, "output %d: error %.3g > %.3g or %lld NaN", j, e_norm,
                  tol, (long long)nan);
            /* poison again: the next launch must write everything once more */
            cu.p_cuMemsetD8(dout[j], 0xff, (size_t)ne * es);
        }
    }
out:
    if (stream)
        cu.p_cuStreamDestroy(stream);
    for (int i = 0; i < 8; i++) {
        free(in[i]);
        if (din[i])
            cu.p_cuMemFree(din[i]);
    }
    for (int j = 0; j < 4; j++) {
        free(ref[j]);
        if (dout[j])
            cu.p_cuMemFree(dout[j]);
    }
    if (ws)
        cu.p_cuMemFree(ws);
    free(host);
    free(got);
    ops_graph_free(bound);
    ktune_graph_free(kg);
    return k;
}

/* ---- 6. declared order, where the canonical one differs ---- */

/* out = sub(b, a), a and b of one shape and dtype, declared (a, b): ktune's canonical order is
 * (b, a), so a launch following it with buffers in declared order would compute a - b without
 * any error. run_one passes the buffers in declared order and compares with the fp64 reference
 * of the graph as declared: b - a. */
static void expect_declared_order(ktune_runtime *rt)
{
    char path[1024];
    ops_graph *g = NULL, *bound = NULL;
    ops_diag d = {0};
    ops_binding b = {"M", 200};
    int in_rank[2] = {0, 0};
    if (ops_graph_from_json_file(example(SUB_BA, path, sizeof(path)), &g, &d) < 0 ||
        ops_graph_validate(g, &d) < 0 || ops_graph_bind(g, &b, 1, &bound, &d) < 0 ||
        ops_graph_canonical_io(bound, in_rank, NULL, &d) < 0)
        CHECK(0, "%s: %s", SUB_BA, d.msg);
    else
        CHECK(in_rank[0] == 1 && in_rank[1] == 0,
              "%s: canonical ranks of (a, b) are (%d, %d): the test needs them swapped", SUB_BA,
              in_rank[0], in_rank[1]);
    ops_graph_free(bound);
    ops_graph_free(g);
    run_one(rt, SUB_BA, "M=200", KTUNE_MATCH_EXACT, NULL, 2);
}

/* ---- 5. what the runtime refuses before the driver sees it ---- */

/* A record damaged by make_record is refused by ktune_lookup when it loads it, with -EBADMSG
 * and a line containing want. */
static void expect_refused_at_load(const char *dir, const char *want)
{
    char path[1024];
    printf("== refused at load (%s): %s\n", want, dir);
    ktune_runtime *rt = NULL;
    ktune_graph *kg = NULL;
    ktune_error err = {0};
    if (ktune_runtime_open(dir, &rt, &err) < 0 ||
        ktune_graph_load(example("gemm_bias_relu.json", path, sizeof(path)), &kg, &err) < 0) {
        CHECK(0, "%s", err.msg);
        goto out;
    }
    ktune_shape s[1] = {{"M", 136}};
    ktune_kernel *k = NULL;
    int rc = ktune_lookup(rt, kg, s, 1, NULL, -1, &k, NULL, &err);
    printf("  ktune_lookup: %d %s\n", rc, err.msg);
    CHECK(rc == -EBADMSG && k == NULL, "ktune_lookup returned %d, want -EBADMSG", rc);
    CHECK(strstr(err.msg, want) != NULL, "message '%s' lacks '%s'", err.msg, want);
    CHECK(strchr(err.msg, '\n') == NULL, "message of several lines");
out:
    ktune_graph_free(kg);
    ktune_runtime_close(rt);
}

/* ktune_launch refuses an output buffer overlapping an input (the kernels declare their
 * pointers __restrict__) or the workspace, and launches the same kernel on separate ones. */
static void expect_aliasing_refused(ktune_runtime *rt)
{
    char path[1024];
    printf("== aliased launch buffers refused\n");
    ktune_graph *kg = NULL;
    ktune_error err = {0};
    ktune_kernel *k = NULL;
    ops_graph *bound = NULL;
    ops_diag d = {0};
    CUdeviceptr din[8] = {0}, dout[4] = {0}, ws = 0;
    void *in_ptr[8] = {0}, *out_ptr[4] = {0};
    ops_binding b = {"M", 200};
    ktune_shape s[1] = {{"M", 200}};
    if (ktune_graph_load(example("gemm_bias_relu.json", path, sizeof(path)), &kg, &err) < 0 ||
        ktune_lookup(rt, kg, s, 1, NULL, -1, &k, NULL, &err) < 0) {
        CHECK(0, "%s", err.msg);
        goto out;
    }
    if (ops_graph_bind(kg->g, &b, 1, &bound, &d) < 0) {
        CHECK(0, "%s", d.msg);
        goto out;
    }
    int n_in = 0;
    for (int t = 0; t < bound->n_tensors; t++) {
        const ops_tensor *x = &bound->tensors[t];
        size_t bytes = (size_t)ops_shape_numel(&x->shape) * ops_dtype_size(x->dtype);
        CUdeviceptr *p = NULL;
        if (x->producer < 0 && n_in < 8)
            p = &din[n_in++];
        else if (x->is_output)
            p = &dout[0]; /* the graph's one output */
        else
            continue;
        if (srch_cuda_check(&cu, cu.p_cuMemAlloc(p, bytes), "alloc", NULL) < 0 ||
            srch_cuda_check(&cu, cu.p_cuMemsetD8(*p, 0, bytes), "clear", NULL) < 0) {
            CHECK(0, "alloc");
            goto out;
        }
    }
    for (int i = 0; i < n_in; i++) /* declared order: A, W, bias */
        in_ptr[i] = (void *)(uintptr_t)din[i];
    out_ptr[0] = (void *)(uintptr_t)dout[0];
    uint64_t wsb = ktune_kernel_workspace_size(k);
    if (wsb && srch_cuda_check(&cu, cu.p_cuMemAlloc(&ws, wsb), "alloc ws", NULL) < 0) {
        CHECK(0, "workspace alloc");
        goto out;
    }
    void *wsp = (void *)(uintptr_t)ws;
    out_ptr[0] = in_ptr[0]; /* in place */
    int rc = ktune_launch(k, in_ptr, out_ptr, wsp, NULL, &err);
    printf("  in place: %d %s\n", rc, err.msg);
    CHECK(rc == -EINVAL && strstr(err.msg, "output 0 'Y' (") &&
              strstr(err.msg, "overlaps input 0 'A' ("),
          "in place: %d %s", rc, err.msg);
    out_ptr[0] = (char *)in_ptr[0] + 2; /* partly over input 0 */
    rc = ktune_launch(k, in_ptr, out_ptr, wsp, NULL, &err);
    CHECK(rc == -EINVAL && strstr(err.msg, "overlaps input 0"), "partial: %d %s", rc, err.msg);
    out_ptr[0] = (void *)(uintptr_t)dout[0];
    if (wsb) {
        rc = ktune_launch(k, in_ptr, out_ptr, out_ptr[0], NULL, &err);
        CHECK(rc == -EINVAL && strstr(err.msg, "overlaps the workspace"), "workspace: %d %s", rc,
              err.msg);
    }
    rc = ktune_launch(k, in_ptr, out_ptr, wsp, NULL, &err);
    kt_err e = {0};
    CHECK(rc == 0, "separate buffers: %s", err.msg);
    CHECK(srch_cuda_check(&cu, cu.p_cuCtxSynchronize(), "sync", &e) == 0, "%s", e.msg);
out:
    for (int i = 0; i < 8; i++)
        if (din[i])
            cu.p_cuMemFree(din[i]);
    if (dout[0])
        cu.p_cuMemFree(dout[0]);
    if (ws)
        cu.p_cuMemFree(ws);
    ops_graph_free(bound);
    ktune_graph_free(kg);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The memoised ktune_lookup on a GPU (context query, key, table probe): 20000 calls, printed,
 * and each must return the same kernel. */
static void time_hot_lookup(ktune_runtime *rt, ktune_kernel *want)
{
    char path[1024];
    ktune_graph *kg = NULL;
    ktune_error err = {0};
    if (ktune_graph_load(example("softmax.json", path, sizeof(path)), &kg, &err) < 0)
        return;
    ktune_shape s[2] = {{"M", 100}, {"N", 1000}};
    enum { N = 20000 };
    static double t[N];
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        struct timespec a, b;
        ktune_kernel *k = NULL;
        clock_gettime(CLOCK_MONOTONIC, &a);
        int rc = ktune_lookup(rt, kg, s, 2, NULL, -1, &k, NULL, &err);
        clock_gettime(CLOCK_MONOTONIC, &b);
        t[i] = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
        wrong += rc != 0 || k != want;
    }
    qsort(t, N, sizeof(t[0]), cmp_double);
    printf("  memoised ktune_lookup: p50 %.0f ns, p99 %.0f ns over %d calls (CLOCK_MONOTONIC)\n",
           t[N / 2], t[N * 99 / 100], N);
    CHECK(wrong == 0, "%d memoised lookups returned another kernel or failed", wrong);
    ktune_graph_free(kg);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    srch_worker_opts wo = {.exe = NULL, .gpu = 0};
    srch_worker *w = NULL;
    ops_device dev;
    cache_gpu gpu;
    kt_err kerr = {0};
    int rc = srch_worker_start(&wo, &w, &dev, &gpu, &kerr);
    if (rc == -ENODEV || (rc < 0 && (strstr(kerr.msg, "libcuda") || strstr(kerr.msg, "driver") ||
                                     strstr(kerr.msg, "cuInit")))) {
        printf("skip: no GPU: %s\n", kerr.msg);
        return SKIP;
    }
    if (rc < 0) {
        printf("FAIL srch_worker_start: %s\n", kerr.msg);
        return 1;
    }
    printf("== worker: %s (%s, %d SMs), driver %d, CUDA %d\n", gpu.name, dev.arch, dev.sm_count,
           gpu.driver_version, gpu.cuda_version);
    snprintf(tmp_root, sizeof(tmp_root), "/tmp/ktune-test-gpu-runtime-XXXXXX");
    if (!mkdtemp(tmp_root)) {
        printf("FAIL mkdtemp\n");
        srch_worker_stop(w);
        return 1;
    }
    char dir_a[300], dir_b[300], dir_arity[300], dir_cut[300], path[1024];
    snprintf(dir_a, sizeof(dir_a), "%s/cache", tmp_root);
    snprintf(dir_b, sizeof(dir_b), "%s/cache-other-driver", tmp_root);
    snprintf(dir_arity, sizeof(dir_arity), "%s/cache-extra-arg", tmp_root);
    snprintf(dir_cut, sizeof(dir_cut), "%s/cache-truncated", tmp_root);

    /* 1-3: the cache */
    tune(w, dir_a, "gemm_bias_relu.json", "M=200", 20);
    tune(w, dir_a, "softmax.json", "M=100,N=1000", 15);
    tune(w, dir_a, SUB_BA, "M=200", 10);
    srch_worker_stop(w);
    ktune_graph *kg = NULL;
    ktune_error err = {0};
    if (ktune_graph_load(example("gemm_bias_relu.json", path, sizeof(path)), &kg, &err) < 0) {
        printf("FAIL %s\n", err.msg);
        return 1;
    }
    make_record(dir_a, kg, &dev, &gpu, 136, false, MANGLE_NONE);
    make_record(dir_a, kg, &dev, &gpu, 72, true, MANGLE_NONE);
    if (dev.sm_major >= 9)
        make_tmap_record(dir_a, &gpu);
    /* 5: the same split-K record damaged, each in a cache of its own */
    make_record(dir_arity, kg, &dev, &gpu, 136, false, MANGLE_EXTRA_ARG);
    make_record(dir_cut, kg, &dev, &gpu, 136, false, MANGLE_TRUNCATED);
    /* 4: the tuned gemm record under another driver, in a second cache */
    {
        cache_env *a = NULL, *b = NULL;
        cache_record r;
        cache_record_init(&r);
        cache_key k;
        memset(&k, 0, sizeof(k));
        k.gpu = gpu;
        memcpy(k.sig, kg->sig, OPS_SIG_BYTES);
        k.n_shapes = 1;
        snprintf(k.shapes[0].name, sizeof(k.shapes[0].name), "M");
        k.shapes[0].value = 200;
        ops_binding b200 = {"M", 200};
        ops_graph *bound = NULL;
        ops_diag pd = {0};
        if (ops_graph_bind(kg->g, &b200, 1, &bound, &pd) < 0 ||
            ops_graph_problem(bound, k.problem, NULL, NULL, &pd) < 0)
            CHECK(0, "the problem of M=200: %s", pd.msg);
        ops_graph_free(bound);
        if (cache_open(dir_a, CACHE_RDONLY, NULL, &a, &kerr) < 0 ||
            cache_get(a, &k, 0, &r, &kerr) < 0 || cache_open(dir_b, 0, NULL, &b, &kerr) < 0) {
            CHECK(0, "copying the gemm record: %s", kerr.msg);
        } else {
            r.key.gpu.driver_version += 10;
            CHECK(cache_put(b, &r, NULL, &kerr) == 0, "cache_put: %s", kerr.msg);
        }
        cache_record_free(&r);
        cache_close(a);
        cache_close(b);
    }
    ktune_graph_free(kg);

    /* the test's own context: device 0's primary, current in this thread */
    if (srch_cuda_open(&cu, 0, &kerr) < 0) {
        printf("FAIL srch_cuda_open: %s\n", kerr.msg);
        return 1;
    }
    ktune_runtime *rt = NULL;
    if (ktune_runtime_open(dir_a, &rt, &err) < 0) {
        printf("FAIL ktune_runtime_open: %s\n", err.msg);
        return 1;
    }
    run_one(rt, "gemm_bias_relu.json", "M=200", KTUNE_MATCH_EXACT, NULL, 2);
    ktune_kernel *soft = run_one(rt, "softmax.json", "M=100,N=1000", KTUNE_MATCH_EXACT, NULL, 2);
    if (soft)
        time_hot_lookup(rt, soft);
    ktune_kernel *sk = run_one(rt, "gemm_bias_relu.json", "M=136", KTUNE_MATCH_EXACT, "gemm", 3);
    if (sk) {
        ktune_kernel_info info;
        ktune_kernel_get_info(sk, &info);
        CHECK(strstr(info.schedule, "splitk_mode=serial") != NULL, "schedule %s", info.schedule);
    }
    run_one(rt, "gemm_bias_relu.json", "M=72", KTUNE_MATCH_EXACT, "library", 2);
    if (dev.sm_major >= 9) { /* 7: TMA tensor maps (sm_90) */
        ktune_kernel *tk =
            run_one(rt, "tests/gpu/tmap_copy.json", "M=100", KTUNE_MATCH_EXACT, "pointwise", 2);
        CHECK(tk != NULL, "the tensor-map record was not served");
    }
    expect_declared_order(rt);
    expect_aliasing_refused(rt);
    ktune_runtime_close(rt);
    expect_refused_at_load(dir_arity, "parameters; the record passes");
    expect_refused_at_load(dir_cut, "past its");

    ktune_runtime *rt2 = NULL;
    if (ktune_runtime_open(dir_b, &rt2, &err) < 0) {
        CHECK(0, "ktune_runtime_open %s: %s", dir_b, err.msg);
    } else {
        run_one(rt2, "gemm_bias_relu.json", "M=200", KTUNE_MATCH_COMPATIBLE, NULL, 1);
        ktune_runtime_close(rt2);
    }
    srch_cuda_close(&cu);

    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0)
        printf("  note: could not remove %s\n", tmp_root);
    printf("\n%s (%d failures)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
