/* The deploy-time runtime without a GPU: read-only opens (also when the lock file may not be
 * written), ktune_lookup without a driver, key resolution (exact, then a compatible GPU's record)
 * through ktune_rt_resolve with a given fingerprint, records that must never be served (checksum
 * failure, unverified, inconsistent with the graph, an output slot no launch writes, an unknown
 * layout), the memo, the kernel accessors (info, workspace size, prepack), and what the runtime
 * checks before trusting a record with the driver: the cubin's ELF tables against its length,
 * the launch against the kernel's parameters, workspace ranges, and aliased launch buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "client/libktune_internal.h"
#include "client/runtime_internal.h"
#include "ktune_config.h"
#include "test_cache_util.h"

#include <elf.h>
#if KTUNE_HAVE_NVRTC
#include "search/compile.h"
#endif

#define H100 "NVIDIA H100 80GB HBM3"

typedef struct fixture {
    char *dir;
    ktune_graph *g;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    f->dir = tmpdir_new();
    char path[1024];
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    snprintf(path, sizeof(path), "%s/examples/gemm_bias_relu.json", root ? root : ".");
    ktune_error err = {0};
    if (!f->dir || ktune_graph_load(path, &f->g, &err) != 0) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ktune_graph_free(f->g);
    tmpdir_free(f->dir);
    free(f);
    return 0;
}

static void gpu_fp(cache_gpu *g, const char *name, int driver, int cuda)
{
    test_gpu(g, name);
    g->driver_version = driver;
    g->cuda_version = cuda;
}

/* Sets r's problem digest and slots as srch_tune does: from g bound with b. */
static void set_problem(cache_record *r, const ops_graph *g, const ops_binding *b, int n)
{
    ops_graph *bound = NULL;
    ops_diag d = {0};
    kt_err e = {0};
    if (ops_graph_bind(g, b, n, &bound, &d) != 0)
        fail_msg("bind: %s", d.msg);
    if (cache_record_set_problem(r, bound, &e) != 0)
        fail_msg("set_problem: %s", e.msg);
    ops_graph_free(bound);
}

/* A record of gemm_bias_relu (3 inputs, 1 output) at M=m for gpu: two launches, the second one
 * clearing part of the workspace, every argument kind. */
static void graph_record(cache_record *r, const fixture *f, const cache_gpu *gpu, int64_t m,
                         const char *schedule, double time_ns, uint8_t seed)
{
    cache_key k;
    memset(&k, 0, sizeof(k));
    k.gpu = *gpu;
    memcpy(k.sig, f->g->sig, OPS_SIG_BYTES);
    k.n_shapes = 1;
    snprintf(k.shapes[0].name, sizeof(k.shapes[0].name), "M");
    k.shapes[0].value = m;
    k.precision = OPS_PREC_EXACT;
    test_record(r, &k, schedule, time_ns, 3000, seed);
    ops_binding b = {"M", m};
    set_problem(r, f->g->g, &b, 1);
    /* test_record asks for a packed layout; the runtime knows none, so drop it */
    free(r->layouts[0].layout);
    free(r->layouts);
    r->layouts = NULL;
    r->n_layouts = 0;
    r->kernels[1].zero_offset = 4096;
    r->kernels[1].zero_bytes = 8192;
}

static void put_record(const char *dir, cache_record *r)
{
    cache_env *env = NULL;
    kt_err err = {0};
    if (cache_open(dir, 0, NULL, &env, &err) != 0)
        fail_msg("cache_open: %s", err.msg);
    if (cache_put(env, r, NULL, &err) != 0)
        fail_msg("cache_put: %s", err.msg);
    cache_close(env);
    cache_record_free(r);
}

static void put(const fixture *f, const cache_gpu *gpu, int64_t m, const char *schedule,
                double time_ns, uint8_t seed)
{
    cache_record r;
    graph_record(&r, f, gpu, m, schedule, time_ns, seed);
    put_record(f->dir, &r);
}

static ktune_runtime *rt_open(const char *dir)
{
    ktune_runtime *rt = NULL;
    ktune_error err = {0};
    if (ktune_runtime_open(dir, &rt, &err) != 0)
        fail_msg("ktune_runtime_open: %s", err.msg);
    return rt;
}

/* Resolves gemm_bias_relu at M=m for fp; returns the rc, the schedule of the record in sched. */
static int resolve(ktune_runtime *rt, const fixture *f, const cache_gpu *fp, int64_t m,
                   const char *precision, ktune_match *match, char *sched, size_t cap,
                   ktune_error *err)
{
    ktune_shape s[1] = {{"M", m}};
    ktune_kernel *k = NULL;
    int rc = ktune_rt_resolve(rt, f->g, s, 1, precision, 0, fp, 0, 0, &k, match, err);
    if (sched)
        snprintf(sched, cap, "%s", rc == 0 ? ktune_rt_kernel_record(k)->schedule : "");
    return rc;
}

static void test_open_missing(void **state)
{
    fixture *f = *state;
    char dir[1100];
    snprintf(dir, sizeof(dir), "%s/none", f->dir);
    ktune_runtime *rt = NULL;
    ktune_error err = {0};
    assert_int_equal(ktune_runtime_open(dir, &rt, &err), -ENOENT);
    assert_null(rt);
    assert_int_equal(err.code, -ENOENT);
    assert_non_null(strstr(err.msg, "none"));
    /* read-only: the directory was not created */
    struct stat st;
    assert_int_not_equal(stat(dir, &st), 0);
}

static void test_lookup_without_driver(void **state)
{
    fixture *f = *state;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
        dlclose(lib);
        skip(); /* a driver is here: the GPU suite covers this machine */
    }
    cache_gpu gpu;
    gpu_fp(&gpu, H100, 12040, 12040);
    put(f, &gpu, 1024, "gemm a", 1000, 1);
    ktune_runtime *rt = rt_open(f->dir);
    ktune_shape s[1] = {{"M", 1024}};
    ktune_kernel *k = (ktune_kernel *)&s; /* overwritten with NULL on failure */
    ktune_match m = KTUNE_MATCH_COMPATIBLE;
    ktune_error err = {0};
    assert_int_equal(ktune_lookup(rt, f->g, s, 1, NULL, -1, &k, &m, &err), -ENODEV);
    assert_null(k);
    assert_int_equal(err.code, -ENODEV);
    assert_non_null(strstr(err.msg, "libcuda"));
    assert_null(strchr(err.msg, '\n'));
    /* twice: the first outcome is kept, the message too */
    memset(&err, 0, sizeof(err));
    assert_int_equal(ktune_lookup(rt, f->g, s, 1, NULL, 0, &k, NULL, &err), -ENODEV);
    assert_non_null(strstr(err.msg, "libcuda"));
    cache_gpu here;
    assert_int_equal(ktune_rt_fingerprint(rt, 0, &here, &err), -ENODEV);
    /* bad arguments come first */
    assert_int_equal(ktune_lookup(rt, NULL, s, 1, NULL, -1, &k, NULL, &err), -EINVAL);
    assert_int_equal(ktune_lookup(rt, f->g, s, 1, NULL, -2, &k, NULL, &err), -EINVAL);
    assert_int_equal(ktune_lookup(NULL, f->g, s, 1, NULL, -1, &k, NULL, &err), -EINVAL);
    ktune_runtime_close(rt);
}

/* Opens the runtime read-only and resolves one record; run in a process that may not write
 * lock.mdb. Returns 0 when it worked. */
static int read_without_lock(const fixture *f, const cache_gpu *gpu)
{
    ktune_runtime *rt = NULL;
    ktune_error err = {0};
    if (ktune_runtime_open(f->dir, &rt, &err) != 0) {
        printf("open read-only: %s\n", err.msg);
        return 1;
    }
    char sched[64];
    ktune_match m;
    int rc = resolve(rt, f, gpu, 1024, NULL, &m, sched, sizeof(sched), &err);
    if (rc != 0 || strcmp(sched, "gemm lockfree") != 0 || m != KTUNE_MATCH_EXACT) {
        printf("resolve: %d %s [%s]\n", rc, err.msg, sched);
        rc = 1;
    }
    ktune_runtime_close(rt);
    return rc;
}

static void test_rdonly_lock_not_writable(void **state)
{
    fixture *f = *state;
    cache_gpu gpu;
    gpu_fp(&gpu, H100, 12040, 12040);
    put(f, &gpu, 1024, "gemm lockfree", 1000, 1);
    char lock[1100];
    snprintf(lock, sizeof(lock), "%s/lock.mdb", f->dir);
    assert_int_equal(chmod(lock, 0444), 0);
    if (geteuid() != 0) {
        assert_int_equal(read_without_lock(f, &gpu), 0);
        return;
    }
    /* root writes any file: read as nobody, in a child */
    assert_int_equal(chmod(f->dir, 0755), 0);
    char data[1100];
    snprintf(data, sizeof(data), "%s/data.mdb", f->dir);
    assert_int_equal(chmod(data, 0644), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(3);
        if (access(lock, W_OK) == 0) /* the premise of the test */
            _exit(4);
        _exit(read_without_lock(f, &gpu));
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_exact_then_compatible(void **state)
{
    fixture *f = *state;
    cache_gpu a, a2, a3, b;
    gpu_fp(&a, H100, 12040, 12040);  /* tuned here */
    gpu_fp(&a2, H100, 12080, 12080); /* same model, newer driver and toolkit */
    gpu_fp(&a3, H100, 12020, 12040); /* same model, older driver, slower record */
    gpu_fp(&b, "NVIDIA A100-SXM4-80GB", 12040, 12040);
    b.sm_major = 8;
    b.sm_count = 108;
    put(f, &a, 1024, "gemm exact", 1000, 1);
    put(f, &a2, 1024, "gemm newer", 900, 2);
    put(f, &a3, 1024, "gemm older", 950, 3);
    put(f, &b, 1024, "gemm a100", 500, 4);
    put(f, &a2, 2048, "gemm only-newer", 1800, 5);
    ktune_runtime *rt = rt_open(f->dir);
    ktune_error err = {0};
    ktune_match m = KTUNE_MATCH_COMPATIBLE;
    char sched[64];

    /* the exact fingerprint wins even though a compatible record is faster */
    assert_int_equal(resolve(rt, f, &a, 1024, NULL, &m, sched, sizeof(sched), &err), 0);
    assert_int_equal(m, KTUNE_MATCH_EXACT);
    assert_string_equal(sched, "gemm exact");
    assert_int_equal(resolve(rt, f, &a, 1024, "exact", &m, sched, sizeof(sched), &err), 0);
    assert_string_equal(sched, "gemm exact");

    /* another driver here: the fastest compatible record, flagged */
    cache_gpu here = a;
    here.driver_version = 13000;
    assert_int_equal(resolve(rt, f, &here, 1024, NULL, &m, sched, sizeof(sched), &err), 0);
    assert_int_equal(m, KTUNE_MATCH_COMPATIBLE);
    assert_string_equal(sched, "gemm newer");
    assert_int_equal(resolve(rt, f, &a, 2048, NULL, &m, sched, sizeof(sched), &err), 0);
    assert_int_equal(m, KTUNE_MATCH_COMPATIBLE);
    assert_string_equal(sched, "gemm only-newer");
    ktune_kernel *k = NULL;
    ktune_shape s2[1] = {{"M", 2048}};
    assert_int_equal(ktune_rt_resolve(rt, f->g, s2, 1, NULL, 0, &a, 0, 0, &k, NULL, &err), 0);
    ktune_kernel_info info;
    ktune_kernel_get_info(k, &info);
    assert_int_equal(info.match, KTUNE_MATCH_COMPATIBLE);
    assert_int_equal(info.driver_version, 12080);
    assert_string_equal(info.gpu, H100);

    /* not compatible: another memory size, another SM count, another model */
    cache_gpu other = a;
    other.mem_bytes /= 2;
    assert_int_equal(resolve(rt, f, &other, 1024, NULL, &m, NULL, 0, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "gemm_bias_relu"));
    assert_non_null(strstr(err.msg, "M=1024"));
    other = a;
    other.sm_count = 114;
    assert_int_equal(resolve(rt, f, &other, 1024, NULL, &m, NULL, 0, &err), -ENOENT);
    cache_gpu l40;
    gpu_fp(&l40, "NVIDIA L40S", 12040, 12040);
    assert_int_equal(resolve(rt, f, &l40, 1024, NULL, &m, NULL, 0, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "NVIDIA L40S"));

    /* other shapes and precisions are other keys */
    assert_int_equal(resolve(rt, f, &a, 4096, NULL, &m, NULL, 0, &err), -ENOENT);
    assert_int_equal(resolve(rt, f, &a, 1024, "tf32", &m, NULL, 0, &err), -ENOENT);
    assert_int_equal(resolve(rt, f, &a, 1024, "fast", &m, NULL, 0, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "fast"));

    /* shapes must bind the graph: unknown symbol, missing symbol, bad value */
    ktune_shape bad[2] = {{"M", 1024}, {"Q", 3}};
    assert_int_equal(ktune_rt_resolve(rt, f->g, bad, 2, NULL, 0, &a, 0, 0, &k, NULL, &err),
                     -EINVAL);
    assert_non_null(strstr(err.msg, "Q"));
    assert_int_equal(ktune_rt_resolve(rt, f->g, NULL, 0, NULL, 0, &a, 0, 0, &k, NULL, &err),
                     -EINVAL);
    assert_non_null(strstr(err.msg, "M"));
    ktune_shape neg[1] = {{"M", 0}};
    assert_int_equal(ktune_rt_resolve(rt, f->g, neg, 1, NULL, 0, &a, 0, 0, &k, NULL, &err),
                     -EINVAL);
    ktune_shape noname[1] = {{NULL, 5}};
    assert_int_equal(ktune_rt_resolve(rt, f->g, noname, 1, NULL, 0, &a, 0, 0, &k, NULL, &err),
                     -EINVAL);
    ktune_runtime_close(rt);
}

/* Replaces the stored value of (gpu, M=m) rank `rank` by bad (raw LMDB). */
static void raw_replace(const fixture *f, const cache_gpu *gpu, int64_t m, int rank,
                        const uint8_t *val, size_t len)
{
    cache_record r;
    graph_record(&r, f, gpu, m, "x", 1, 0);
    uint8_t key[CACHE_KEY_MAX + 1];
    size_t klen = 0;
    assert_int_equal(cache_key_encode(&r.key, key, sizeof(key), &klen, NULL), 0);
    cache_record_free(&r);
    key[klen++] = (uint8_t)rank;
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal(raw_open(f->dir, &env, &txn, &dbi, "kernels"), 0);
    MDB_val k = {.mv_size = klen, .mv_data = key}, v = {.mv_size = len, .mv_data = (void *)val};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/* Flips one byte inside the stored value of (gpu, M=m) rank `rank`. */
static void flip_byte(const fixture *f, const cache_gpu *gpu, int64_t m, int rank)
{
    cache_env *env = NULL;
    assert_int_equal(cache_open(f->dir, CACHE_RDONLY, NULL, &env, NULL), 0);
    cache_record r;
    graph_record(&r, f, gpu, m, "x", 1, 0);
    cache_key key = r.key;
    cache_record_free(&r);
    assert_int_equal(cache_get(env, &key, rank, &r, NULL), 0);
    uint8_t *val = NULL;
    size_t len = 0;
    assert_int_equal(cache_record_encode(&r, &val, &len, NULL), 0);
    cache_record_free(&r);
    cache_close(env);
    val[len / 2] ^= 0x40; /* inside the cubin or source: the map still parses */
    raw_replace(f, gpu, m, rank, val, len);
    free(val);
}

static void test_corrupt_never_served(void **state)
{
    fixture *f = *state;
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    put(f, &a, 1024, "gemm best", 1000, 1);
    put(f, &a, 1024, "gemm second", 2000, 2);
    flip_byte(f, &a, 1024, 0);
    ktune_runtime *rt = rt_open(f->dir);
    ktune_error err = {0};
    ktune_match m;
    char sched[64];
    /* the best fails its checksum: the runner-up of the same key is served */
    assert_int_equal(resolve(rt, f, &a, 1024, NULL, &m, sched, sizeof(sched), &err), 0);
    assert_string_equal(sched, "gemm second");
    assert_int_equal(m, KTUNE_MATCH_EXACT);
    ktune_runtime_close(rt);

    /* both corrupt: nothing is served, and the error says why */
    flip_byte(f, &a, 1024, 1);
    rt = rt_open(f->dir);
    assert_int_equal(resolve(rt, f, &a, 1024, NULL, &m, sched, sizeof(sched), &err), -EBADMSG);
    assert_string_equal(sched, "");
    assert_non_null(strstr(err.msg, "not served"));
    /* and a compatible GPU's corrupt record is not served either */
    cache_gpu here = a;
    here.driver_version = 13000;
    assert_int_equal(resolve(rt, f, &here, 1024, NULL, &m, sched, sizeof(sched), &err), -ENOENT);
    ktune_runtime_close(rt);
}

static void test_unverified_never_served(void **state)
{
    fixture *f = *state;
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    put(f, &a, 1024, "gemm verified", 1000, 1);
    /* a stored value with a sound checksum but verified = false (cache_put refuses those, so
     * write it raw) at rank 0 */
    cache_record r;
    graph_record(&r, f, &a, 1024, "gemm unverified", 10, 9);
    r.verified = false;
    uint8_t *val = NULL;
    size_t len = 0;
    assert_int_equal(cache_record_encode(&r, &val, &len, NULL), 0);
    cache_record_free(&r);
    raw_replace(f, &a, 1024, 0, val, len);
    free(val);
    ktune_runtime *rt = rt_open(f->dir);
    ktune_error err = {0};
    ktune_match m;
    char sched[64];
    assert_int_equal(resolve(rt, f, &a, 1024, NULL, &m, sched, sizeof(sched), &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "not verified"));
    ktune_runtime_close(rt);
}

static void test_record_checked_against_graph(void **state)
{
    fixture *f = *state;
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    /* an input index the graph does not have */
    cache_record r;
    graph_record(&r, f, &a, 1024, "gemm wrong-arity", 1000, 1);
    r.kernels[0].args[1].index = 3;
    /* consistent in itself (the cache refuses an index past its own slots): a fourth input */
    cache_slot *more = calloc(5, sizeof(*more));
    memcpy(more, r.slots, 3 * sizeof(*more));
    more[3] = more[0];
    more[4] = r.slots[3];
    free(r.slots);
    r.slots = more;
    r.n_inputs = 4;
    put_record(f->dir, &r);
    /* a layout this runtime cannot pack, at another shape */
    graph_record(&r, f, &a, 2048, "gemm packed", 1000, 2);
    r.n_layouts = 1;
    r.layouts = calloc(1, sizeof(*r.layouts));
    r.layouts[0].input = 1;
    r.layouts[0].layout = strdup("k_major_tile32x8");
    put_record(f->dir, &r);
    /* zeroing past the workspace */
    graph_record(&r, f, &a, 4096, "gemm zero-past", 1000, 3);
    r.kernels[1].zero_offset = r.workspace_bytes - 16;
    r.kernels[1].zero_bytes = 32;
    put_record(f->dir, &r);

    ktune_runtime *rt = rt_open(f->dir);
    ktune_error err = {0};
    ktune_match m;
    assert_int_equal(resolve(rt, f, &a, 1024, NULL, &m, NULL, 0, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "argument"));
    assert_int_equal(resolve(rt, f, &a, 2048, NULL, &m, NULL, 0, &err), -ENOTSUP);
    assert_non_null(strstr(err.msg, "k_major_tile32x8"));
    assert_int_equal(resolve(rt, f, &a, 4096, NULL, &m, NULL, 0, &err), -EBADMSG);
    assert_non_null(strstr(err.msg, "workspace"));
    ktune_runtime_close(rt);
}

/* ---- issue 15's findings 1-3: what is served is what was tuned, for this problem ---- */

static ktune_graph *parse(const char *json)
{
    ktune_graph *g = NULL;
    ktune_error err = {0};
    if (ktune_graph_parse(json, 0, &g, &err) != 0)
        fail_msg("parse: %s", err.msg);
    return g;
}

/* A one-launch record of g bound with b: input i and output j as its arguments. */
static void put_problem(const fixture *f, const cache_gpu *gpu, const ktune_graph *g,
                        const ops_binding *b, int n, double key_tolerance, const char *schedule)
{
    cache_key k;
    memset(&k, 0, sizeof(k));
    k.gpu = *gpu;
    memcpy(k.sig, g->sig, OPS_SIG_BYTES);
    k.precision = OPS_PREC_EXACT;
    k.n_shapes = n;
    for (int i = 0; i < n; i++) {
        snprintf(k.shapes[i].name, sizeof(k.shapes[i].name), "%s", b[i].name);
        k.shapes[i].value = b[i].value;
    }
    k.tolerance = key_tolerance;
    cache_record r;
    test_record(&r, &k, schedule, 1000, 3000, 1);
    free(r.layouts[0].layout);
    free(r.layouts);
    r.layouts = NULL;
    r.n_layouts = 0;
    set_problem(&r, g->g, b, n);
    for (int i = 0; i < r.n_kernels; i++)
        for (int j = 0; j < r.kernels[i].n_args; j++)
            if (r.kernels[i].args[j].kind == CACHE_ARG_INPUT)
                r.kernels[i].args[j].index %= r.n_inputs;
            else if (r.kernels[i].args[j].kind == CACHE_ARG_OUTPUT)
                r.kernels[i].args[j].index = i % r.n_outputs; /* every output written */
    put_record(f->dir, &r);
}

static int resolve_shapes(ktune_runtime *rt, const ktune_graph *g, const cache_gpu *fp,
                          const ktune_shape *s, int n, double tolerance, ktune_kernel **k,
                          ktune_error *err)
{
    return ktune_rt_resolve(rt, g, s, n, NULL, tolerance, fp, 0, KTUNE_RT_NO_MEMO, k, NULL, err);
}

/* X[M,N] and X[N,M], both bound M=1024,N=64: one is 1024 rows of 64, the other 64 rows of 1024.
 * Before, both had the key (signature, "M=1024;N=64") and the second was served the first's
 * kernel. A third graph naming its symbols otherwise but posing the first's problem shares it. */
static void test_renamed_symbols_keyed_apart(void **state)
{
    fixture *f = *state;
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    ktune_graph *mn = parse("{\"name\":\"s\",\"inputs\":{\"X\":{\"dtype\":\"f32\",\"shape\":"
                            "[\"M\",\"N\"]}},\"nodes\":[{\"out\":\"y\",\"op\":\"sum\",\"in\":"
                            "[\"X\"],\"axes\":[1]}],\"outputs\":[\"y\"]}");
    ktune_graph *nm = parse("{\"name\":\"s\",\"inputs\":{\"X\":{\"dtype\":\"f32\",\"shape\":"
                            "[\"N\",\"M\"]}},\"nodes\":[{\"out\":\"y\",\"op\":\"sum\",\"in\":"
                            "[\"X\"],\"axes\":[1]}],\"outputs\":[\"y\"]}");
    ktune_graph *pq = parse("{\"name\":\"t\",\"inputs\":{\"A\":{\"dtype\":\"f32\",\"shape\":"
                            "[\"P\",\"Q\"]}},\"nodes\":[{\"out\":\"z\",\"op\":\"sum\",\"in\":"
                            "[\"A\"],\"axes\":[1]}],\"outputs\":[\"z\"]}");
    assert_string_equal(ktune_graph_signature(mn), ktune_graph_signature(nm));
    ops_binding b[2] = {{"M", 1024}, {"N", 64}};
    put_problem(f, &a, mn, b, 2, 0, "row 1024x64");
    ktune_runtime *rt = rt_open(f->dir);
    ktune_shape s[2] = {{"M", 1024}, {"N", 64}}, t[2] = {{"P", 1024}, {"Q", 64}};
    ktune_kernel *k = NULL;
    ktune_error err = {0};
    assert_int_equal(resolve_shapes(rt, mn, &a, s, 2, 0, &k, &err), 0);
    assert_string_equal(ktune_rt_kernel_record(k)->schedule, "row 1024x64");
    ktune_rt_kernel_free(k);
    assert_int_equal(resolve_shapes(rt, nm, &a, s, 2, 0, &k, &err), -ENOENT);
    assert_int_equal(resolve_shapes(rt, pq, &a, t, 2, 0, &k, &err), 0);
    ktune_rt_kernel_free(k);
    ktune_runtime_close(rt);
    ktune_graph_free(mn);
    ktune_graph_free(nm);
    ktune_graph_free(pq);
}

/* x[M] and z[N] through two relus, declared in either order. The same problem (a 4096- and a
 * 1000-element tensor) is one key whichever way it is declared or bound, and each caller's
 * canonical order (the record's; ktune_launch maps the caller's declared order onto it with
 * ktune_rt_io_map) puts the 4096-element tensor where the record has it: before issue 15, the
 * order followed declaration alone, and the record tuned from one declaration launched its
 * 4096-element kernel on the other's 1000-element buffers. */
static void test_declaration_order_keeps_slots(void **state)
{
    fixture *f = *state;
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    const char *xz =
        "{\"name\":\"two\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[\"M\"]},"
        "\"z\":{\"dtype\":\"f32\",\"shape\":[\"N\"]}},\"nodes\":["
        "{\"out\":\"rx\",\"op\":\"relu\",\"in\":[\"x\"]},"
        "{\"out\":\"rz\",\"op\":\"relu\",\"in\":[\"z\"]}],\"outputs\":[\"rx\",\"rz\"]}";
    const char *zx =
        "{\"name\":\"two\",\"inputs\":{\"z\":{\"dtype\":\"f32\",\"shape\":[\"N\"]},"
        "\"x\":{\"dtype\":\"f32\",\"shape\":[\"M\"]}},\"nodes\":["
        "{\"out\":\"rx\",\"op\":\"relu\",\"in\":[\"x\"]},"
        "{\"out\":\"rz\",\"op\":\"relu\",\"in\":[\"z\"]}],\"outputs\":[\"rx\",\"rz\"]}";
    ktune_graph *g1 = parse(xz), *g2 = parse(zx);
    ops_binding b[2] = {{"M", 4096}, {"N", 1000}};
    put_problem(f, &a, g1, b, 2, 0, "pointwise two");
    ktune_runtime *rt = rt_open(f->dir);
    ktune_shape bindings[2][2] = {{{"M", 4096}, {"N", 1000}}, {{"M", 1000}, {"N", 4096}}};
    for (int gi = 0; gi < 2; gi++)
        for (int bi = 0; bi < 2; bi++) {
            const ktune_graph *g = gi ? g2 : g1;
            ktune_kernel *k = NULL;
            ktune_error err = {0};
            assert_int_equal(resolve_shapes(rt, g, &a, bindings[bi], 2, 0, &k, &err), 0);
            const cache_record *r = ktune_rt_kernel_record(k);
            ktune_tensor_desc in[2], out[2];
            assert_int_equal(ktune_graph_describe(g, bindings[bi], 2, in, out, &err), 0);
            /* the caller's tensor of each rank (declared order mapped as ktune_launch maps it) */
            ops_binding ob[2] = {{bindings[bi][0].name, bindings[bi][0].value},
                                 {bindings[bi][1].name, bindings[bi][1].value}};
            ops_graph *bound = NULL;
            ops_diag d = {0};
            kt_err e = {0};
            int in_of[2], out_of[2];
            assert_int_equal(ops_graph_bind(g->g, ob, 2, &bound, &d), 0);
            assert_int_equal(ktune_rt_io_map(bound, in_of, out_of, &e), 0);
            ops_graph_free(bound);
            for (int rk = 0; rk < 2; rk++) {
                assert_int_equal(in[in_of[rk]].shape[0], r->slots[rk].dims[0]);
                assert_int_equal(out[out_of[rk]].shape[0], r->slots[2 + rk].dims[0]);
            }
            ktune_rt_kernel_free(k);
        }
    ktune_runtime_close(rt);
    ktune_graph_free(g1);
    ktune_graph_free(g2);
}

/* A record of g bound M=m whose every launch takes (input rank 0, input rank 1, output rank 0), as
 * a tuner stores a two-input pointwise kernel. */
static void put_two_input_record(const fixture *f, const cache_gpu *gpu, const ktune_graph *g,
                                 int64_t m)
{
    cache_key k;
    memset(&k, 0, sizeof(k));
    k.gpu = *gpu;
    memcpy(k.sig, g->sig, OPS_SIG_BYTES);
    k.precision = OPS_PREC_EXACT;
    k.n_shapes = 1;
    snprintf(k.shapes[0].name, sizeof(k.shapes[0].name), "M");
    k.shapes[0].value = m;
    cache_record r;
    test_record(&r, &k, "pointwise sub", 1000, 3000, 1);
    free(r.layouts[0].layout);
    free(r.layouts);
    r.layouts = NULL;
    r.n_layouts = 0;
    ops_binding b = {"M", m};
    set_problem(&r, g->g, &b, 1);
    for (int i = 0; i < r.n_kernels; i++) {
        cache_kernel *kk = &r.kernels[i];
        kk->zero_bytes = 0;
        kk->n_args = 3;
        kk->args[0] = (cache_arg){.kind = CACHE_ARG_INPUT, .index = 0};
        kk->args[1] = (cache_arg){.kind = CACHE_ARG_INPUT, .index = 1};
        kk->args[2] = (cache_arg){.kind = CACHE_ARG_OUTPUT, .index = 0};
    }
    put_record(f->dir, &r);
}

static const char sub_xy[] = /* the tuner's declaration: d = x - y */
    "{\"name\":\"sub\",\"inputs\":{\"x\":{\"dtype\":\"f32\",\"shape\":[\"M\",64]},"
    "\"y\":{\"dtype\":\"f32\",\"shape\":[\"M\",64]}},\"nodes\":[{\"out\":\"d\",\"op\":\"sub\","
    "\"in\":[\"x\",\"y\"]}],\"outputs\":[\"d\"]}";
static const char sub_ba[] = /* out = b - a, declared (a, b): canonical order (b, a) */
    "{\"name\":\"sub\",\"inputs\":{\"a\":{\"dtype\":\"f32\",\"shape\":[\"M\",64]},"
    "\"b\":{\"dtype\":\"f32\",\"shape\":[\"M\",64]}},\"nodes\":[{\"out\":\"out\",\"op\":\"sub\","
    "\"in\":[\"b\",\"a\"]}],\"outputs\":[\"out\"]}";
static const char sub_ba_declared_ba[] = /* out = b - a, declared (b, a): canonical = declared */
    "{\"name\":\"sub\",\"inputs\":{\"b\":{\"dtype\":\"f32\",\"shape\":[\"M\",64]},"
    "\"a\":{\"dtype\":\"f32\",\"shape\":[\"M\",64]}},\"nodes\":[{\"out\":\"out\",\"op\":\"sub\","
    "\"in\":[\"b\",\"a\"]}],\"outputs\":[\"out\"]}";

static ops_graph *bind_m(const ktune_graph *g, int64_t m)
{
    ops_binding b = {"M", m};
    ops_graph *bound = NULL;
    ops_diag d = {0};
    if (ops_graph_bind(g->g, &b, 1, &bound, &d) != 0)
        fail_msg("bind: %s", d.msg);
    return bound;
}

/* Launch `launch` of k "run" on the CPU: the record's kernel computes the tuner's graph from the
 * buffers its arguments point at (host arrays of doubles here), taking input and output ranks as
 * the tuner's graph numbers them. The argument values are ktune_launch's own. */
static void emulate_launch(const ktune_kernel *k, const ops_graph *tuner_bound, void *const *in,
                           void *const *out)
{
    const cache_kernel *kk = &ktune_rt_kernel_record(k)->kernels[0];
    ktune_rt_param val[CACHE_MAX_ARGS];
    ktune_rt_launch_params(k, 0, in, out, NULL, val);
    int t_in_of[2], t_out_of[1];
    kt_err e = {0};
    assert_int_equal(ktune_rt_io_map(tuner_bound, t_in_of, t_out_of, &e), 0);
    const double *tin[2] = {NULL, NULL};
    double *tout[1] = {NULL};
    for (int j = 0; j < kk->n_args; j++) {
        const cache_arg *a = &kk->args[j];
        if (a->kind == CACHE_ARG_INPUT)
            tin[t_in_of[a->index]] = (const double *)(uintptr_t)val[j].ptr;
        else if (a->kind == CACHE_ARG_OUTPUT)
            tout[t_out_of[a->index]] = (double *)(uintptr_t)val[j].ptr;
    }
    assert_non_null(tin[0]);
    assert_non_null(tin[1]);
    assert_non_null(tout[0]);
    ops_diag d = {0};
    assert_int_equal(ops_ref_run(tuner_bound, tin, tout, &d), 0);
}

/* y = sub(b, a), a and b of one shape and dtype: a call that swaps them runs and is wrong, no
 * check can tell. Callers pass tensors in the graph's declared order; the record (tuned here from
 * another declaration of the same problem, d = sub(x, y)) takes them by canonical rank, which
 * puts the minuend first: (b, a) for a graph declared (a, b). The launch's argument values
 * (ktune_rt_launch_params, what ktune_launch passes cuLaunchKernel) are followed on the CPU and
 * the result compared with the fp64 reference of the caller's graph: b - a, for the declaration
 * (a, b) called (A, B) and for the declaration (b, a) called (B, A). Launch errors name the
 * declared input. */
static void test_declared_order_non_commutative(void **state)
{
    fixture *f = *state;
    cache_gpu gpu;
    gpu_fp(&gpu, H100, 12040, 12040);
    enum { M = 3, N = M * 64 };
    ktune_graph *tuner = parse(sub_xy), *ab = parse(sub_ba), *ba = parse(sub_ba_declared_ba);
    assert_string_equal(ktune_graph_signature(tuner), ktune_graph_signature(ab));
    assert_string_equal(ktune_graph_signature(tuner), ktune_graph_signature(ba));
    /* declared names, in declared order */
    assert_int_equal(ktune_graph_n_inputs(ab), 2);
    assert_string_equal(ktune_graph_input_name(ab, 0), "a");
    assert_string_equal(ktune_graph_input_name(ab, 1), "b");
    assert_string_equal(ktune_graph_input_name(ba, 0), "b");
    assert_string_equal(ktune_graph_output_name(ab, 0), "out");
    ops_graph *tb = bind_m(tuner, M), *abb = bind_m(ab, M), *bab = bind_m(ba, M);
    /* the premise: (a, b)'s canonical order is not its declared one, the tuner's is */
    int in_of[2], out_of[1];
    kt_err e = {0};
    assert_int_equal(ktune_rt_io_map(abb, in_of, out_of, &e), 0);
    assert_int_equal(in_of[0], 1); /* rank 0 (the minuend) is declared input 1, b */
    assert_int_equal(ktune_rt_io_map(tb, in_of, out_of, &e), 0);
    assert_int_equal(in_of[0], 0);
    put_two_input_record(f, &gpu, tuner, M);

    double A[N], B[N], got[N], want[N];
    for (int i = 0; i < N; i++) {
        A[i] = 0.25 * i + 1;
        B[i] = 1000.0 - 3 * i;
    }
    ktune_runtime *rt = rt_open(f->dir);
    ktune_shape s[1] = {{"M", M}};
    for (int decl = 0; decl < 2; decl++) {
        const ktune_graph *g = decl ? ba : ab;
        ops_graph *gb = decl ? bab : abb;
        ktune_kernel *k = NULL;
        ktune_error err = {0};
        assert_int_equal(ktune_rt_resolve(rt, g, s, 1, NULL, 0, &gpu, 0, 0, &k, NULL, &err), 0);
        void *in[2] = {decl ? (void *)B : (void *)A, decl ? (void *)A : (void *)B};
        void *out[1] = {got};
        for (int i = 0; i < N; i++)
            got[i] = NAN;
        emulate_launch(k, tb, in, out);
        const double *rin[2] = {in[0], in[1]};
        double *rout[1] = {want};
        ops_diag d = {0};
        assert_int_equal(ops_ref_run(gb, rin, rout, &d), 0);
        for (int i = 0; i < N; i++) {
            assert_true(want[i] == B[i] - A[i]);
            if (got[i] != want[i])
                fail_msg("declaration %s: element %d is %g, b - a is %g",
                         decl ? "(b, a)" : "(a, b)", i, got[i], want[i]);
        }
        /* a missing buffer is named as the caller declared it */
        void *missing[2] = {in[0], NULL};
        assert_int_equal(ktune_launch(k, missing, out, NULL, NULL, &err), -EINVAL);
        assert_non_null(strstr(err.msg, decl ? "input 1 'a' is NULL" : "input 1 'b' is NULL"));
    }
    ktune_runtime_close(rt);
    ops_graph_free(tb);
    ops_graph_free(abb);
    ops_graph_free(bab);
    ktune_graph_free(tuner);
    ktune_graph_free(ab);
    ktune_graph_free(ba);
}

/* A record verified within a tolerance of its job's own is served only to a lookup asking for
 * that tolerance; a default lookup (and one naming the default's value) gets the default's. */
static void test_tolerance_keyed_apart(void **state)
{
    fixture *f = *state;
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    ops_binding b = {"M", 256};
    put_problem(f, &a, f->g, &b, 1, 1000, "gemm loose");
    ktune_runtime *rt = rt_open(f->dir);
    ktune_shape s[1] = {{"M", 256}};
    ktune_kernel *k = NULL;
    ktune_error err = {0};
    assert_int_equal(resolve_shapes(rt, f->g, &a, s, 1, 0, &k, &err), -ENOENT);
    assert_int_equal(resolve_shapes(rt, f->g, &a, s, 1, 1e-2, &k, &err), -ENOENT);
    assert_int_equal(resolve_shapes(rt, f->g, &a, s, 1, 1000, &k, &err), 0);
    assert_string_equal(ktune_rt_kernel_record(k)->schedule, "gemm loose");
    ktune_rt_kernel_free(k);
    ktune_runtime_close(rt);
    put_problem(f, &a, f->g, &b, 1, 0, "gemm default");
    rt = rt_open(f->dir);
    /* gemm_bias_relu is f16: its default is 3e-3, asked by value or as 0 */
    assert_int_equal(resolve_shapes(rt, f->g, &a, s, 1, 3e-3, &k, &err), 0);
    assert_string_equal(ktune_rt_kernel_record(k)->schedule, "gemm default");
    ktune_rt_kernel_free(k);
    assert_int_equal(resolve_shapes(rt, f->g, &a, s, 1, -1, &k, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "tolerance"));
    ktune_runtime_close(rt);
}

/* A record whose slots disagree with the caller's bound graph is not served, whatever its key
 * says (a forged or damaged key). */
static void test_slots_checked(void **state)
{
    fixture *f = *state;
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    cache_record r;
    graph_record(&r, f, &a, 512, "gemm slot", 1000, 1);
    r.slots[0].dims[0] = 513; /* input 0 is [M, 512] */
    put_record(f->dir, &r);
    ktune_runtime *rt = rt_open(f->dir);
    ktune_error err = {0};
    assert_int_equal(resolve(rt, f, &a, 512, NULL, NULL, NULL, 0, &err), -EBADMSG);
    assert_non_null(
        strstr(err.msg, "input 0: [512, 512] f16, the record was tuned for [513, 512] f16"));
    ktune_runtime_close(rt);
}

static void test_memo_and_accessors(void **state)
{
    fixture *f = *state;
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    put(f, &a, 1024, "gemm memo", 1000, 1);
    ktune_runtime *rt = rt_open(f->dir);
    ktune_error err = {0};
    ktune_shape s[1] = {{"M", 1024}};
    ktune_kernel *k1 = NULL, *k2 = NULL, *k3 = NULL;
    assert_int_equal(ktune_rt_resolve(rt, f->g, s, 1, NULL, 0, &a, 0, 0, &k1, NULL, &err), 0);
    assert_int_equal(err.code, 0);
    assert_string_equal(err.msg, "");
    assert_int_equal(ktune_rt_resolve(rt, f->g, s, 1, "exact", 0, &a, 0, 0, &k2, NULL, &err), 0);
    assert_ptr_equal(k1, k2); /* memoised: the same kernel */
    assert_int_equal(
        ktune_rt_resolve(rt, f->g, s, 1, NULL, 0, &a, 0, KTUNE_RT_NO_MEMO, &k3, NULL, &err), 0);
    assert_ptr_not_equal(k1, k3);
    assert_string_equal(ktune_rt_kernel_record(k3)->schedule, "gemm memo");
    ktune_rt_kernel_free(k3);

    /* accessors */
    const cache_record *r = ktune_rt_kernel_record(k1);
    assert_true(ktune_kernel_workspace_size(k1) == r->workspace_bytes);
    assert_true(ktune_kernel_workspace_size(k1) == (1u << 20));
    assert_true(ktune_kernel_workspace_size(NULL) == 0);
    ktune_kernel_info info;
    ktune_kernel_get_info(k1, &info);
    assert_int_equal(info.match, KTUNE_MATCH_EXACT);
    assert_string_equal(info.family, "gemm");
    assert_string_equal(info.schedule, "gemm memo");
    assert_non_null(strstr(info.source, "__global__"));
    assert_true(info.time_ns == 1000);
    assert_true(info.err_norm == r->err_norm);
    assert_true(info.tolerance == r->tolerance);
    assert_true(info.cublaslt_ns == r->cublaslt_ns);
    assert_int_equal(info.n_launches, 2);
    assert_int_equal(info.n_inputs, 3);
    assert_int_equal(info.n_outputs, 1);
    assert_string_equal(info.gpu, H100);
    assert_int_equal(info.driver_version, 12040);
    assert_int_equal(info.cuda_version, 12040);
    for (int i = 0; i < 3; i++)
        assert_true(ktune_prepack_size(k1, i) == 0);
    assert_true(ktune_prepack_size(k1, 7) == 0);
    int dummy;
    assert_int_equal(ktune_prepack(k1, 1, &dummy, &dummy, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "input 1 needs no packing"));
    assert_int_equal(ktune_prepack(k1, 9, &dummy, &dummy, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "out of range"));
    /* a resolved-only kernel is not launchable; arguments are checked first (the buffers are
     * never touched: addresses 16 MiB apart, none overlapping) */
    char *base = (char *)(uintptr_t)0x7f0000000000ull;
    void *in[3] = {base, base + (16 << 20), base + (32 << 20)}, *out[1] = {base + (48 << 20)};
    void *ws = base + (64 << 20);
    assert_int_equal(ktune_launch(k1, in, out, ws, NULL, &err), -ENODEV);
    assert_int_equal(ktune_launch(k1, in, out, NULL, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "workspace"));
    in[2] = NULL;
    assert_int_equal(ktune_launch(k1, in, out, ws, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "input 2"));
    assert_int_equal(ktune_launch(NULL, in, out, ws, NULL, &err), -EINVAL);
    /* a symbol bound twice is refused, not memoised */
    ktune_shape twice[2] = {{"M", 1024}, {"M", 1024}};
    assert_int_equal(ktune_rt_resolve(rt, f->g, twice, 2, NULL, 0, &a, 0, 0, &k3, NULL, &err),
                     -EINVAL);
    assert_int_equal(ktune_rt_resolve(rt, f->g, twice, 2, NULL, 0, &a, 0, 0, &k3, NULL, &err),
                     -EINVAL);
    ktune_runtime_close(rt);
}

/* ktune_launch refuses buffers that alias (kernels declare them __restrict__), before anything
 * else is tried: checked here on a resolved-only kernel, which would otherwise fail with
 * -ENODEV. gemm_bias_relu at M=1024: inputs A, W and bias of 1 MiB, 256 KiB and 512 bytes (declared
 * order, as callers pass them: errors name them), an output of 512 KiB, 1 MiB of workspace. */
static void test_launch_refuses_aliasing(void **state)
{
    fixture *f = *state;
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    put(f, &a, 1024, "gemm alias", 1000, 1);
    ktune_runtime *rt = rt_open(f->dir);
    ktune_error err = {0};
    ktune_shape s[1] = {{"M", 1024}};
    ktune_kernel *k = NULL;
    assert_int_equal(ktune_rt_resolve(rt, f->g, s, 1, NULL, 0, &a, 0, 0, &k, NULL, &err), 0);
    char *base = (char *)(uintptr_t)0x7f0000000000ull;
    const uint64_t y_bytes = 1024 * 256 * 2;
    void *in[3] = {base, base + (16 << 20), base + (32 << 20)}, *out[1] = {base + (48 << 20)};
    void *ws = base + (64 << 20);
    assert_int_equal(ktune_launch(k, in, out, ws, NULL, &err), -ENODEV);

    out[0] = in[1]; /* in place */
    assert_int_equal(ktune_launch(k, in, out, ws, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "ktune_launch: output 0 'Y' ("));
    assert_non_null(strstr(err.msg, "overlaps input 1 'W' ("));
    assert_null(strchr(err.msg, '\n'));
    out[0] = (char *)in[2] - 100; /* its last 100 bytes are input 2's (bias, 512 bytes) first */
    assert_int_equal(ktune_launch(k, in, out, ws, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "overlaps input 2 'bias'"));
    out[0] = (char *)in[2] - y_bytes; /* ends where input 2 starts */
    assert_int_equal(ktune_launch(k, in, out, ws, NULL, &err), -ENODEV);
    out[0] = base + (48 << 20);
    assert_int_equal(ktune_launch(k, in, out, in[0], NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "the workspace ("));
    assert_non_null(strstr(err.msg, "overlaps input 0 'A'"));
    assert_int_equal(ktune_launch(k, in, out, (char *)out[0] + 64, NULL, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "output 0 'Y' ("));
    assert_non_null(strstr(err.msg, "overlaps the workspace"));
    /* inputs are only read: they may share memory */
    in[1] = in[0];
    assert_int_equal(ktune_launch(k, in, out, ws, NULL, &err), -ENODEV);
    ktune_runtime_close(rt);
}

/* A record that leaves an output slot of its graph unwritten cannot be stored (nor decoded: the
 * same check), so the runtime never meets one: the caller would get uninitialised memory. */
static void test_unwritten_output_never_served(void **state)
{
    fixture *f = *state;
    static const char two[] =
        "{\"name\": \"two\", \"inputs\": {\"x\": {\"dtype\": \"f32\", \"shape\": [\"M\", 64]}},"
        " \"nodes\": [{\"out\": \"y\", \"op\": \"relu\", \"in\": [\"x\"]},"
        " {\"out\": \"z\", \"op\": \"exp\", \"in\": [\"x\"]}], \"outputs\": [\"y\", \"z\"]}";
    ktune_graph *g2 = NULL;
    ktune_error err = {0};
    assert_int_equal(ktune_graph_parse(two, strlen(two), &g2, &err), 0);
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    cache_record r;
    graph_record(&r, f, &a, 1024, "pointwise half", 1000, 1);
    memcpy(r.key.sig, g2->sig, OPS_SIG_BYTES);
    ops_binding b = {"M", 1024};
    set_problem(&r, g2->g, &b, 1);
    for (int i = 0; i < r.n_kernels; i++)
        for (int j = 0; j < r.kernels[i].n_args; j++)
            if (r.kernels[i].args[j].kind == CACHE_ARG_INPUT)
                r.kernels[i].args[j].index = 0; /* one input; both launches write output 0 */
    cache_env *env = NULL;
    kt_err e = {0};
    assert_int_equal(cache_open(f->dir, 0, NULL, &env, &e), 0);
    assert_int_equal(cache_put(env, &r, NULL, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "no launch writes output 1 (of 2)"));
    assert_null(strchr(e.msg, '\n'));
    cache_close(env);
    cache_record_free(&r);
    ktune_graph_free(g2);
}

static void test_range_fits(void **state)
{
    (void)state;
    assert_true(ktune_rt_range_fits(0, 0, 0));
    assert_true(ktune_rt_range_fits(10, 0, 10));
    assert_false(ktune_rt_range_fits(11, 0, 10));
    assert_true(ktune_rt_range_fits(5, 5, 10));
    assert_false(ktune_rt_range_fits(5, 6, 10));
    /* offset + length wraps around: 16 + (2^64 - 8) = 8 < 4096 */
    assert_false(ktune_rt_range_fits(16, UINT64_MAX - 7, 4096));
    assert_false(ktune_rt_range_fits(UINT64_MAX, 2, UINT64_MAX));
    assert_true(ktune_rt_range_fits(UINT64_MAX - 1, 1, UINT64_MAX));
}

static void test_check_aliasing(void **state)
{
    (void)state;
    char *b = (char *)(uintptr_t)0x10000000ull;
    void *in[2] = {b, b + 1000};
    uint64_t in_bytes[2] = {1000, 500};
    void *out[2] = {b + 2000, b + 3000};
    uint64_t out_bytes[2] = {1000, 500};
    kt_err why = {0};
    /* adjacent buffers, a workspace right after them */
    assert_int_equal(
        ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, b + 4000, 64, NULL, &why), 0);
    /* identical pointers */
    out[1] = in[1];
    assert_int_equal(
        ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, NULL, 0, NULL, &why), -EINVAL);
    assert_non_null(strstr(why.msg, "output 1 ("));
    assert_non_null(strstr(why.msg, "overlaps input 1 ("));
    assert_null(strchr(why.msg, '\n'));
    /* partial overlap, from either side */
    out[1] = b + 1499; /* input 1's last byte */
    assert_int_equal(
        ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, NULL, 0, NULL, &why), -EINVAL);
    assert_non_null(strstr(why.msg, "overlaps input 1"));
    out[1] = b + 1500; /* just past it, and ending where output 0 starts */
    assert_int_equal(
        ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, NULL, 0, NULL, &why), 0);
    out[1] = b - 499; /* its last byte is input 0's first */
    assert_int_equal(
        ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, NULL, 0, NULL, &why), -EINVAL);
    assert_non_null(strstr(why.msg, "output 1 ("));
    assert_non_null(strstr(why.msg, "overlaps input 0"));
    out[1] = b - 500; /* ends where input 0 starts */
    assert_int_equal(
        ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, NULL, 0, NULL, &why), 0);
    /* two outputs */
    out[1] = b + 2999;
    assert_int_equal(
        ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, NULL, 0, NULL, &why), -EINVAL);
    assert_non_null(strstr(why.msg, "output 1 ("));
    assert_non_null(strstr(why.msg, "overlaps output 0"));
    out[1] = b + 3000;
    /* the workspace against an output and an input; NULL or empty is no buffer */
    assert_int_equal(
        ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, b + 3499, 64, NULL, &why),
        -EINVAL);
    assert_non_null(strstr(why.msg, "output 1 ("));
    assert_non_null(strstr(why.msg, "overlaps the workspace"));
    assert_int_equal(
        ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, b + 1200, 64, NULL, &why),
        -EINVAL);
    assert_non_null(strstr(why.msg, "the workspace ("));
    assert_non_null(strstr(why.msg, "overlaps input 1"));
    assert_int_equal(ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, b, 0, NULL, &why),
                     0);
    assert_int_equal(
        ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, NULL, 64, NULL, &why), 0);
    /* inputs may overlap each other */
    in[1] = b + 10;
    assert_int_equal(
        ktune_rt_check_aliasing(in, in_bytes, 2, out, out_bytes, 2, NULL, 0, NULL, &why), 0);
    /* at the top of the address space, no sum wraps */
    void *hi_in[1] = {(void *)(UINTPTR_MAX - 99)}, *hi_out[1] = {(void *)(UINTPTR_MAX - 49)};
    uint64_t hi_in_bytes[1] = {100}, hi_out_bytes[1] = {50};
    assert_int_equal(ktune_rt_check_aliasing(hi_in, hi_in_bytes, 1, hi_out, hi_out_bytes, 1, NULL,
                                             0, NULL, &why),
                     -EINVAL);
}

static void test_check_params(void **state)
{
    (void)state;
    cache_arg args[5] = {
        {.kind = CACHE_ARG_INPUT, .index = 0},
        {.kind = CACHE_ARG_OUTPUT, .index = 0},
        {.kind = CACHE_ARG_WORKSPACE, .offset = 256},
        {.kind = CACHE_ARG_SCALAR, .scalar = CACHE_SCALAR_I32, .ival = 7},
        {.kind = CACHE_ARG_SCALAR, .scalar = CACHE_SCALAR_F64, .fval = 0.5},
    };
    cache_kernel k = {.entry = "ktune_main", .n_args = 5, .args = args};
    size_t sizes[6] = {8, 8, 8, 4, 8, 8};
    kt_err why = {0};
    assert_int_equal(ktune_rt_check_params(&k, sizes, 5, &why), 0);
    assert_int_equal(ktune_rt_check_params(&k, sizes, 4, &why), -EBADMSG);
    assert_non_null(strstr(why.msg, "kernel ktune_main takes 4 parameters; the record passes 5"));
    assert_int_equal(ktune_rt_check_params(&k, sizes, 6, &why), -EBADMSG);
    assert_non_null(strstr(why.msg, "takes 6 parameters"));
    sizes[3] = 8;
    assert_int_equal(ktune_rt_check_params(&k, sizes, 5, &why), -EBADMSG);
    assert_non_null(strstr(why.msg, "parameter 3 is 8 bytes; the record passes a scalar of 4"));
    sizes[3] = 4;
    sizes[1] = 4;
    assert_int_equal(ktune_rt_check_params(&k, sizes, 5, &why), -EBADMSG);
    assert_non_null(
        strstr(why.msg, "parameter 1 is 4 bytes; the record passes an output pointer of 8"));
    sizes[1] = 8;
    /* a tensor map over input 0 is a 128-byte parameter, not a pointer */
    args[0].has_tmap = true;
    args[0].tmap = (ops_tensor_map){
        .rank = 1, .dtype = OPS_DT_F32, .dims = {64}, .box = {64}, .elem_strides = {1}};
    assert_int_equal(ktune_rt_check_params(&k, sizes, 5, &why), -EBADMSG);
    assert_non_null(
        strstr(why.msg, "parameter 0 is 8 bytes; the record passes a tensor map of 128"));
    sizes[0] = 128;
    assert_int_equal(ktune_rt_check_params(&k, sizes, 5, &why), 0);
    k.n_args = 0;
    assert_int_equal(ktune_rt_check_params(&k, sizes, 0, &why), 0);
}

#if KTUNE_HAVE_NVRTC
/* A real cubin (NVRTC to sm_90a: no GPU needed), then the same bytes damaged field by field. */
static void put_u64(uint8_t *img, size_t at, uint64_t v)
{
    memcpy(img + at, &v, sizeof(v));
}

static void put_u16(uint8_t *img, size_t at, uint16_t v)
{
    memcpy(img + at, &v, sizeof(v));
}

static void test_check_cubin(void **state)
{
    (void)state;
    static const char src[] =
        "extern \"C\" __global__ void k0(float *__restrict__ y, const float *__restrict__ x, int n)"
        " { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.f * x[i]; }\n";
    srch_compile_result cr = {0};
    assert_int_equal(srch_nvrtc_compile(src, "sm_90a", &cr), 0);
    assert_int_equal(cr.status, SRCH_COMPILE_OK);
    const size_t len = cr.cubin_len;
    kt_err why = {0};
    assert_int_equal(ktune_rt_check_cubin(cr.cubin, len, &why), 0);
    Elf64_Ehdr eh;
    memcpy(&eh, cr.cubin, sizeof(eh));
    assert_true(eh.e_shnum > 0);
    uint8_t *img = malloc(len);

    /* truncated: header only, one byte short of the section headers, one byte short overall */
    assert_int_equal(ktune_rt_check_cubin(cr.cubin, 0, &why), -EBADMSG);
    assert_int_equal(ktune_rt_check_cubin(cr.cubin, sizeof(eh) - 1, &why), -EBADMSG);
    assert_non_null(strstr(why.msg, "shorter than an ELF64 header"));
    assert_int_equal(ktune_rt_check_cubin(cr.cubin, sizeof(eh), &why), -EBADMSG);
    size_t sh_end = eh.e_shoff + (size_t)eh.e_shnum * eh.e_shentsize;
    assert_true(sh_end <= len);
    assert_int_equal(ktune_rt_check_cubin(cr.cubin, sh_end - 1, &why), -EBADMSG);
    assert_int_equal(ktune_rt_check_cubin(cr.cubin, len - 1, &why), -EBADMSG);
    assert_null(strchr(why.msg, '\n'));
    for (size_t cut = 1; cut < len; cut += 97) /* no prefix of a sound image passes */
        assert_int_equal(ktune_rt_check_cubin(cr.cubin, cut, &why), -EBADMSG);

#define DAMAGED(edit, want)                                                                        \
    do {                                                                                           \
        memcpy(img, cr.cubin, len);                                                                \
        edit;                                                                                      \
        assert_int_equal(ktune_rt_check_cubin(img, len, &why), -EBADMSG);                          \
        if (!strstr(why.msg, want))                                                                \
            fail_msg("%s: got '%s'", #edit, why.msg);                                              \
    } while (0)
    DAMAGED(img[0] = 0x7e, "bad magic");
    DAMAGED(img[EI_CLASS] = ELFCLASS32, "not a little-endian ELF64");
    DAMAGED(img[EI_DATA] = ELFDATA2MSB, "not a little-endian ELF64");
    DAMAGED(put_u16(img, offsetof(Elf64_Ehdr, e_machine), EM_X86_64), "machine 62");
    DAMAGED(put_u16(img, offsetof(Elf64_Ehdr, e_shentsize), 40), "header sizes");
    DAMAGED(put_u16(img, offsetof(Elf64_Ehdr, e_shnum), 0), "0 sections");
    DAMAGED(put_u16(img, offsetof(Elf64_Ehdr, e_shstrndx), eh.e_shnum), "string table");
    /* the section header table past the end: moved, grown, or wrapping around */
    DAMAGED(put_u64(img, offsetof(Elf64_Ehdr, e_shoff), len - 1), "section headers");
    DAMAGED(put_u16(img, offsetof(Elf64_Ehdr, e_shnum), 0xfeff), "section headers");
    DAMAGED(put_u64(img, offsetof(Elf64_Ehdr, e_shoff), UINT64_MAX - 63), "section headers");
    if (eh.e_phnum) {
        DAMAGED(put_u64(img, offsetof(Elf64_Ehdr, e_phoff), len), "program headers");
        DAMAGED(put_u64(img, offsetof(Elf64_Ehdr, e_phoff), UINT64_MAX), "program headers");
        size_t ph = eh.e_phoff; /* the first segment's bytes past the end */
        DAMAGED(put_u64(img, ph + offsetof(Elf64_Phdr, p_filesz), len), "segment 0");
    }
    /* a section's bytes past the end, or wrapping around */
    int s = 1;
    for (; s < eh.e_shnum; s++) {
        Elf64_Shdr sh;
        memcpy(&sh, cr.cubin + eh.e_shoff + (size_t)s * sizeof(sh), sizeof(sh));
        if (sh.sh_type != SHT_NOBITS && sh.sh_size > 0)
            break;
    }
    assert_true(s < eh.e_shnum);
    size_t at = eh.e_shoff + (size_t)s * sizeof(Elf64_Shdr);
    DAMAGED(put_u64(img, at + offsetof(Elf64_Shdr, sh_offset), len), "section");
    DAMAGED(put_u64(img, at + offsetof(Elf64_Shdr, sh_size), UINT64_MAX), "section");
#undef DAMAGED
    free(img);
    srch_compile_result_release(&cr);
}
#endif

/* Shapes in any order are one key: one memoised kernel. */
static void test_memo_shape_order(void **state)
{
    fixture *f = *state;
    char path[1024];
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    snprintf(path, sizeof(path), "%s/examples/softmax.json", root ? root : ".");
    ktune_graph *sg = NULL;
    ktune_error err = {0};
    assert_int_equal(ktune_graph_load(path, &sg, &err), 0);
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    cache_record r;
    graph_record(&r, f, &a, 64, "row x", 1000, 1);
    memcpy(r.key.sig, sg->sig, OPS_SIG_BYTES);
    r.key.n_shapes = 2;
    snprintf(r.key.shapes[0].name, sizeof(r.key.shapes[0].name), "N");
    r.key.shapes[0].value = 1000;
    snprintf(r.key.shapes[1].name, sizeof(r.key.shapes[1].name), "M");
    r.key.shapes[1].value = 64;
    ops_binding sb[2] = {{"M", 64}, {"N", 1000}};
    set_problem(&r, sg->g, sb, 2);
    /* softmax has one input and one output */
    for (int i = 0; i < r.n_kernels; i++)
        for (int j = 0; j < r.kernels[i].n_args; j++)
            if (r.kernels[i].args[j].kind == CACHE_ARG_INPUT)
                r.kernels[i].args[j].index = 0;
    put_record(f->dir, &r);
    ktune_runtime *rt = rt_open(f->dir);
    ktune_shape mn[2] = {{"M", 64}, {"N", 1000}}, nm[2] = {{"N", 1000}, {"M", 64}};
    ktune_kernel *k1 = NULL, *k2 = NULL;
    assert_int_equal(ktune_rt_resolve(rt, sg, mn, 2, NULL, 0, &a, 0, 0, &k1, NULL, &err), 0);
    assert_int_equal(ktune_rt_resolve(rt, sg, nm, 2, NULL, 0, &a, 0, 0, &k2, NULL, &err), 0);
    assert_ptr_equal(k1, k2);
    ktune_runtime_close(rt);
    ktune_graph_free(sg);
}

/* Many threads resolving the same and different keys get one kernel per key. */
typedef struct thr_arg {
    ktune_runtime *rt;
    const fixture *f;
    const cache_gpu *gpu;
    ktune_kernel *got[4];
    int rc;
} thr_arg;

static void *thr_main(void *p)
{
    thr_arg *t = p;
    for (int rep = 0; rep < 50; rep++)
        for (int i = 0; i < 4; i++) {
            ktune_shape s[1] = {{"M", 1024 << i}};
            ktune_kernel *k = NULL;
            int rc = ktune_rt_resolve(t->rt, t->f->g, s, 1, NULL, 0, t->gpu, 0, 0, &k, NULL, NULL);
            if (rc != 0 || (t->got[i] && t->got[i] != k))
                t->rc = rc ? rc : -1;
            t->got[i] = k;
        }
    return NULL;
}

static void test_threads(void **state)
{
    fixture *f = *state;
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    for (int i = 0; i < 4; i++)
        put(f, &a, 1024 << i, "gemm t", 1000 + i, (uint8_t)i);
    ktune_runtime *rt = rt_open(f->dir);
    thr_arg t[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        t[i] = (thr_arg){.rt = rt, .f = f, .gpu = &a};
        assert_int_equal(pthread_create(&th[i], NULL, thr_main, &t[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(t[i].rc, 0);
        for (int j = 0; j < 4; j++)
            assert_ptr_equal(t[i].got[j], t[0].got[j]);
    }
    ktune_runtime_close(rt);
}

/* The structural check at open must not fork this process (issue 16: a fork of a process full of
 * threads runs LMDB and malloc code in a child where another thread's locks stay locked; a fork of
 * a process holding gigabytes copies its page tables). pthread_atfork handlers run on every
 * fork() and never on posix_spawn: a fork at open shows in the counter. The checker that runs is
 * the helper program, reached here through $KTUNE_CACHE_CHECKER by a wrapper that leaves a mark. */
static atomic_int forks_seen;
static void count_fork(void)
{
    atomic_fetch_add(&forks_seen, 1);
}

static void test_check_spawns_no_fork(void **state)
{
    fixture *f = *state;
    cache_gpu a;
    gpu_fp(&a, H100, 12040, 12040);
    put(f, &a, 1024, "gemm spawn", 1000, 7);
    static bool registered;
    if (!registered)
        assert_int_equal(pthread_atfork(count_fork, NULL, NULL), 0);
    registered = true;

    char *real = NULL;
    kt_err e = {0};
    if (kt_find_exe(NULL, CACHE_CHECK_ENV, CACHE_CHECK_EXE, &real, &e) != 0)
        fail_msg("%s", e.msg);
    char wrapper[1200], mark[1200], text[4000];
    snprintf(wrapper, sizeof(wrapper), "%s/checker.sh", f->dir);
    snprintf(mark, sizeof(mark), "%s/checker.ran", f->dir);
    snprintf(text, sizeof(text), "#!/bin/sh\necho \"$@\" > '%s'\nexec '%s' \"$@\"\n", mark, real);
    free(real);
    FILE *fp = fopen(wrapper, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
    assert_int_equal(chmod(wrapper, 0755), 0);
    char *old = getenv(CACHE_CHECK_ENV) ? strdup(getenv(CACHE_CHECK_ENV)) : NULL;
    setenv(CACHE_CHECK_ENV, wrapper, 1);

    atomic_store(&forks_seen, 0);
    ktune_runtime *rt = rt_open(f->dir);
    assert_int_equal(atomic_load(&forks_seen), 0);
    struct stat sb;
    assert_int_equal(stat(mark, &sb), 0); /* the helper checked the file */
    ktune_error err = {0};
    ktune_match m = KTUNE_MATCH_COMPATIBLE;
    char sched[64];
    assert_int_equal(resolve(rt, f, &a, 1024, NULL, &m, sched, sizeof(sched), &err), 0);
    assert_string_equal(sched, "gemm spawn");
    ktune_runtime_close(rt);

    /* the check still tells damage from soundness through the helper: a zeroed data.mdb */
    char data[1200];
    snprintf(data, sizeof(data), "%s/data.mdb", f->dir);
    fp = fopen(data, "r+");
    assert_non_null(fp);
    static const uint8_t zeros[4096 * 4];
    fseek(fp, 4096 * 2, SEEK_SET); /* the first pages after the two meta pages */
    fwrite(zeros, 1, sizeof(zeros), fp);
    fclose(fp);
    ktune_runtime *bad = NULL;
    assert_int_equal(ktune_runtime_open(f->dir, &bad, &err), -EBADMSG);
    assert_null(bad);
    assert_int_equal(atomic_load(&forks_seen), 0);

    if (old)
        setenv(CACHE_CHECK_ENV, old, 1);
    else
        unsetenv(CACHE_CHECK_ENV);
    free(old);
}

static void test_schedule_parse(void **state)
{
    (void)state;
    ops_schedule s;
    kt_err err = {0};
    assert_int_equal(ktune_rt_schedule_parse("library heuristic=3", &s, &err), 0);
    assert_int_equal(s.family, OPS_FAM_LIBRARY);
    assert_int_equal(s.v[0], 3);
    char back[128];
    ops_schedule_format(&s, back, sizeof(back));
    assert_string_equal(back, "library heuristic=3");
    assert_int_equal(ktune_rt_schedule_parse("library heuristic=9", &s, &err), -EINVAL);
    assert_int_equal(ktune_rt_schedule_parse("library", &s, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "heuristic"));
    assert_int_equal(ktune_rt_schedule_parse("library speed=1", &s, &err), -EINVAL);
    assert_int_equal(ktune_rt_schedule_parse("warp heuristic=1", &s, &err), -EINVAL);
    assert_int_equal(ktune_rt_schedule_parse("library heuristic", &s, &err), -EINVAL);
    assert_int_equal(ktune_rt_schedule_parse(NULL, &s, &err), -EINVAL);
    /* every family's format parses back to the same schedule (labels included) */
    for (int id = 0; id < OPS_FAM_COUNT; id++) {
        const ops_family *fam = ops_family_get((ops_family_id)id);
        ops_schedule x = {.family = fam->id};
        for (int k = 0; k < fam->n_knobs; k++)
            x.v[k] = fam->knobs[k].values[fam->knobs[k].n_values - 1];
        char text[512];
        ops_schedule_format(&x, text, sizeof(text));
        ops_schedule y;
        assert_int_equal(ktune_rt_schedule_parse(text, &y, &err), 0);
        assert_memory_equal(&x, &y, sizeof(x));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lookup_without_driver, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rdonly_lock_not_writable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exact_then_compatible, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_never_served, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unverified_never_served, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_checked_against_graph, setup, teardown),
        cmocka_unit_test_setup_teardown(test_renamed_symbols_keyed_apart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_declaration_order_keeps_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_declared_order_non_commutative, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tolerance_keyed_apart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slots_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memo_and_accessors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memo_shape_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_spawns_no_fork, setup, teardown),
        cmocka_unit_test_setup_teardown(test_launch_refuses_aliasing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unwritten_output_never_served, setup, teardown),
        cmocka_unit_test(test_range_fits),
        cmocka_unit_test(test_check_aliasing),
        cmocka_unit_test(test_check_params),
#if KTUNE_HAVE_NVRTC
        cmocka_unit_test(test_check_cubin),
#endif
        cmocka_unit_test(test_schedule_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
