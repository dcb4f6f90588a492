/* bench/lookup_latency: how long the deploy-time runtime takes to find a kernel, without a GPU.
 *
 * Builds a cache of N synthetic but valid, verified records of one graph (gemm_bias_relu at
 * M = 1..N: distinct keys, one GPU fingerprint, a few KB of source and a cubin-sized blob each),
 * then times, per call, with CLOCK_MONOTONIC:
 *   cold_get      cache_get: LMDB get + SHA-256 checksum + msgpack decode of one record;
 *   cold_resolve  ktune_rt_resolve without the memo: what a first ktune_lookup of a key does
 *                 before loading the module (key encoding, binding check, the read above, the
 *                 record checked against the graph);
 *   hot           ktune_rt_resolve through the memo: what every later ktune_lookup of the same
 *                 key does (key encoding, hash, read-locked table probe; no LMDB);
 *   compat_first  the first lookup that misses its exact key: a walk over the whole cache for
 *                 the GPU fingerprints it holds, then a compatible GPU's record;
 *   compat        later such lookups (random keys, same model under another driver): one read
 *                 per compatible GPU;
 *   miss          lookups of keys nothing is cached for (-ENOENT), after that walk;
 *   first_lookup  ktune_runtime_open (its structural check of the file, in a spawned process)
 *                 and the first resolve: what a process's first ktune_lookup costs; with
 *                 --hold-gib G measured while the process holds G GiB of touched memory and 8
 *                 idle threads (a PyTorch process: what a fork would have to copy).
 * Keys are drawn uniformly at random (fixed seed). The LMDB file is in the OS page cache (it was
 * just written): "cold" means not memoised, not "read from disk".
 *
 *   lookup_latency [--records N] [--lookups L] [--hot-keys K] [--source-bytes B]
 *                  [--cubin-bytes B] [--dir DIR] [--no-scan]
 *                  [--hold-gib G]
 * Prints a table, then one JSON line with the machine, the command and the protocol. */
#include "cache/cache.h"
#include "client/ktune.h"
#include "client/libktune_internal.h"
#include "client/runtime_internal.h"
#include "ops/ops.h"

#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static const char graph_json[] =
    "{\"name\": \"gemm_bias_relu\", \"inputs\": {"
    "\"A\": {\"dtype\": \"f16\", \"shape\": [\"M\", 512]},"
    "\"W\": {\"dtype\": \"f16\", \"shape\": [512, 256], \"const\": true},"
    "\"bias\": {\"dtype\": \"f16\", \"shape\": [256], \"const\": true}},"
    "\"nodes\": [{\"out\": \"t0\", \"op\": \"matmul\", \"in\": [\"A\", \"W\"]},"
    "{\"out\": \"t1\", \"op\": \"add\", \"in\": [\"t0\", \"bias\"]},"
    "{\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"t1\"]}], \"outputs\": [\"Y\"]}";

typedef struct opts {
    long records, lookups, hot_keys;
    long source_bytes, cubin_bytes;
    const char *dir;
    bool scan;
    long hold_gib;
} opts;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct stats {
    double p50, p99, mean, min;
} stats;

static stats summarise(double *v, size_t n)
{
    stats s = {0};
    if (!n)
        return s;
    qsort(v, n, sizeof(*v), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    s.p50 = v[n / 2];
    s.p99 = v[(size_t)((double)(n - 1) * 0.99)];
    s.mean = sum / (double)n;
    s.min = v[0];
    return s;
}

static void fingerprint(cache_gpu *g)
{
    memset(g, 0, sizeof(*g));
    snprintf(g->name, sizeof(g->name), "NVIDIA H100 80GB HBM3");
    g->sm_major = 9;
    g->sm_count = 132;
    g->mem_bytes = 85045493760ull;
    g->driver_version = 13000;
    g->cuda_version = 13000;
}

/* A readable source of about `bytes` bytes, like an emitted gemm kernel. */
static char *make_source(long m, long bytes)
{
    kt_buf b = {0};
    kt_buf_printf(&b,
                  "/*\n * ktune: family gemm, schedule gemm math=f16 bm=128 bn=128 bk=32 wm=64 "
                  "wn=64 stages=3 splitk=1 swizzle=8\n * graph gemm_bias_relu, M=%ld\n */\n",
                  m);
    for (int i = 0; b.len < (size_t)bytes; i++)
        kt_buf_printf(&b,
                      "    acc[%d] = __hfma2(a_frag[%d], b_frag[%d], acc[%d]); /* k-step %d */\n",
                      i % 64, i % 8, i % 16, i % 64, i);
    return kt_buf_take(&b);
}

/* The record's problem digest and slots for the graph bound at M = m. */
static void set_problem(cache_record *r, const ops_graph *g, long m)
{
    ops_binding b = {"M", m};
    ops_graph *bound = NULL;
    ops_diag d = {0};
    kt_err e = {0};
    if (ops_graph_bind(g, &b, 1, &bound, &d) < 0 || cache_record_set_problem(r, bound, &e) < 0) {
        fprintf(stderr, "lookup_latency: binding M=%ld: %s%s\n", m, d.msg, e.msg);
        exit(1);
    }
    ops_graph_free(bound);
}

/* A valid, verified record of the graph at M = m, in the shape srch_tune writes. */
static void make_record(cache_record *r, const cache_gpu *gpu, const ktune_graph *g, long m,
                        const opts *o, const uint8_t *cubin)
{
    cache_record_init(r);
    r->key.gpu = *gpu;
    memcpy(r->key.sig, g->sig, OPS_SIG_BYTES);
    set_problem(r, g->g, m);
    r->key.n_shapes = 1;
    snprintf(r->key.shapes[0].name, sizeof(r->key.shapes[0].name), "M");
    r->key.shapes[0].value = m;
    r->key.precision = OPS_PREC_EXACT;
    r->graph_name = strdup("gemm_bias_relu");
    r->source = make_source(m, o->source_bytes);
    r->source_len = strlen(r->source);
    r->cubin_len = (size_t)o->cubin_bytes;
    r->cubin = malloc(r->cubin_len);
    memcpy(r->cubin, cubin, r->cubin_len);
    r->cubin[0] = (uint8_t)m; /* distinct blobs */
    r->n_kernels = 1;
    r->kernels = calloc(1, sizeof(*r->kernels));
    cache_kernel *k = &r->kernels[0];
    k->entry = strdup("ktune_gemm_f16_128x128x32");
    k->grid[0] = 2;
    k->grid[1] = (uint32_t)((m + 127) / 128);
    k->grid[2] = 1;
    k->block[0] = 128;
    k->block[1] = k->block[2] = 1;
    k->smem_bytes = 49152;
    k->n_args = 4;
    k->args = calloc(4, sizeof(*k->args));
    k->args[0] = (cache_arg){.kind = CACHE_ARG_INPUT, .index = 0};
    k->args[1] = (cache_arg){.kind = CACHE_ARG_INPUT, .index = 1};
    k->args[2] = (cache_arg){.kind = CACHE_ARG_INPUT, .index = 2};
    k->args[3] = (cache_arg){.kind = CACHE_ARG_OUTPUT, .index = 0};
    r->family = strdup("gemm");
    r->schedule = strdup("gemm math=f16 bm=128 bn=128 bk=32 wm=64 wn=64 stages=3 splitk=1 "
                         "swizzle=8");
    r->time_ns = 5000 + (double)m;
    r->time_p10_ns = r->time_ns * 0.98;
    r->time_p90_ns = r->time_ns * 1.03;
    r->reps = 200;
    r->verified = true;
    r->err_norm = 4e-4;
    r->err_max = 2e-3;
    r->tolerance = 3e-3;
    r->cublaslt_ns = r->time_ns * 1.1;
    r->ktune_version = strdup("bench");
    r->nvrtc_version = 13000;
    r->created = 1700000000 + m;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static atomic_bool idle_stop;

static void *idle_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&idle_stop))
        usleep(1000);
    return NULL;
}

static int usage(void)
{
    fprintf(stderr, "usage: lookup_latency [--records N] [--lookups L] [--hot-keys K] "
                    "[--source-bytes B] [--cubin-bytes B] [--dir DIR] [--no-scan] "
                    "[--hold-gib G]\n");
    return 2;
}

static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "?");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *c = strchr(line, ':');
            if (c) {
                c += 1 + (c[1] == ' ');
                snprintf(out, cap, "%.*s", (int)strcspn(c, "\n"), c);
            }
            break;
        }
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    opts o = {.records = 100000,
              .lookups = 20000,
              .hot_keys = 10000,
              .source_bytes = 3072,
              .cubin_bytes = 12288,
              .scan = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long *dst = strcmp(a, "--records") == 0        ? &o.records
                    : strcmp(a, "--lookups") == 0      ? &o.lookups
                    : strcmp(a, "--hot-keys") == 0     ? &o.hot_keys
                    : strcmp(a, "--source-bytes") == 0 ? &o.source_bytes
                    : strcmp(a, "--cubin-bytes") == 0  ? &o.cubin_bytes
                    : strcmp(a, "--hold-gib") == 0     ? &o.hold_gib
                                                       : NULL;
        if (dst) {
            char *end = NULL;
            *dst = v ? strtol(v, &end, 10) : 0;
            if (!v || *end || *dst <= 0) {
                fprintf(stderr, "lookup_latency: %s takes a positive integer\n", a);
                return usage();
            }
            i++;
        } else if (strcmp(a, "--dir") == 0 && v) {
            o.dir = v;
            i++;
        } else if (strcmp(a, "--no-scan") == 0) {
            o.scan = false;
        } else {
            fprintf(stderr, "lookup_latency: unknown argument '%s'\n", a);
            return usage();
        }
    }
    if (o.hot_keys > o.records)
        o.hot_keys = o.records;

    char dir[512];
    if (o.dir)
        snprintf(dir, sizeof(dir), "%s", o.dir);
    else
        snprintf(dir, sizeof(dir), "%s/ktune-lookup-bench-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!o.dir && !mkdtemp(dir)) {
        perror("lookup_latency: mkdtemp");
        return 1;
    }
    int status = 1;
    ktune_graph *g = NULL;
    ktune_runtime *rt = NULL;
    ktune_error kerr = {0};
    kt_err err = {0};
    double *t = NULL;
    uint8_t *cubin = NULL;
    if (ktune_graph_parse(graph_json, 0, &g, &kerr) < 0) {
        fprintf(stderr, "lookup_latency: graph: %s\n", kerr.msg);
        goto out;
    }
    cache_gpu gpu;
    fingerprint(&gpu);

    /* 1. the cache */
    cubin = malloc((size_t)o.cubin_bytes);
    for (long i = 0; cubin && i < o.cubin_bytes; i++)
        cubin[i] = (uint8_t)rng();
    cache_env *w = NULL;
    if (!cubin || cache_open(dir, 0, NULL, &w, &err) < 0) {
        fprintf(stderr, "lookup_latency: %s\n", cubin ? err.msg : "out of memory");
        goto out;
    }
    double t0 = now_ns();
    for (long m = 1; m <= o.records; m++) {
        cache_record r;
        make_record(&r, &gpu, g, m, &o, cubin);
        int rc = cache_put(w, &r, NULL, &err);
        cache_record_free(&r);
        if (rc < 0) {
            fprintf(stderr, "lookup_latency: cache_put M=%ld: %s\n", m, err.msg);
            cache_close(w);
            goto out;
        }
    }
    double build_s = (now_ns() - t0) / 1e9;
    cache_stats st;
    cache_stat(w, &st, &err);
    cache_close(w);

    /* the first lookup, from a process holding hold_gib GiB (touched: resident) and threads */
    uint8_t *held = NULL;
    size_t held_bytes = (size_t)o.hold_gib << 30;
    pthread_t idle[8];
    int n_idle = 0;
    if (held_bytes) {
        held = malloc(held_bytes);
        if (!held) {
            fprintf(stderr, "lookup_latency: cannot hold %ld GiB\n", o.hold_gib);
            goto out;
        }
        for (size_t i = 0; i < held_bytes; i += 4096)
            held[i] = (uint8_t)i | 1;
        for (; n_idle < 8 && pthread_create(&idle[n_idle], NULL, idle_main, NULL) == 0; n_idle++)
            ;
    }
    double f0 = now_ns();
    if (ktune_runtime_open(dir, &rt, &kerr) < 0) {
        fprintf(stderr, "lookup_latency: %s\n", kerr.msg);
        goto out;
    }
    double open_ns = now_ns() - f0;
    {
        ktune_shape s[1] = {{"M", 1}};
        ktune_kernel *k = NULL;
        if (ktune_rt_resolve(rt, g, s, 1, NULL, 0, &gpu, 0, KTUNE_RT_NO_MEMO, &k, NULL, &kerr) <
            0) {
            fprintf(stderr, "lookup_latency: first lookup: %s\n", kerr.msg);
            goto out;
        }
    }
    double first_ns = now_ns() - f0;
    atomic_store(&idle_stop, true);
    for (int i = 0; i < n_idle; i++)
        pthread_join(idle[i], NULL);
    free(held);
    cache_env *env = ktune_rt_cache(rt);
    size_t n = (size_t)(o.lookups > 100000 ? o.lookups : 100000);
    t = calloc(n, sizeof(*t));
    if (!t) {
        fprintf(stderr, "lookup_latency: out of memory\n");
        goto out;
    }

    /* 2a. cache_get: LMDB get + checksum + decode */
    for (long i = 0; i < o.lookups; i++) {
        cache_key k;
        memset(&k, 0, sizeof(k));
        k.gpu = gpu;
        memcpy(k.sig, g->sig, OPS_SIG_BYTES);
        k.n_shapes = 1;
        snprintf(k.shapes[0].name, sizeof(k.shapes[0].name), "M");
        k.shapes[0].value = (int64_t)(rng() % (uint64_t)o.records) + 1;
        cache_record r;
        cache_record_init(&r); /* the key's problem digest, computed outside the timing */
        set_problem(&r, g->g, (long)k.shapes[0].value);
        memcpy(k.problem, r.key.problem, OPS_SIG_BYTES);
        cache_record_free(&r);
        double a = now_ns();
        int rc = cache_get(env, &k, 0, &r, &err);
        t[i] = now_ns() - a;
        cache_record_free(&r);
        if (rc < 0) {
            fprintf(stderr, "lookup_latency: cache_get: %s\n", err.msg);
            goto out;
        }
    }
    stats cold_get = summarise(t, (size_t)o.lookups);

    /* 2b. the runtime's cold path, without the memo */
    for (long i = 0; i < o.lookups; i++) {
        ktune_shape s[1] = {{"M", (int64_t)(rng() % (uint64_t)o.records) + 1}};
        ktune_kernel *k = NULL;
        double a = now_ns();
        int rc = ktune_rt_resolve(rt, g, s, 1, NULL, 0, &gpu, 0, KTUNE_RT_NO_MEMO, &k, NULL, &kerr);
        t[i] = now_ns() - a;
        ktune_rt_kernel_free(k);
        if (rc < 0) {
            fprintf(stderr, "lookup_latency: resolve: %s\n", kerr.msg);
            goto out;
        }
    }
    stats cold = summarise(t, (size_t)o.lookups);

    /* 3. the memoised hot path: K keys memoised, then 100000 lookups among them */
    for (long m = 1; m <= o.hot_keys; m++) {
        ktune_shape s[1] = {{"M", m}};
        ktune_kernel *k = NULL;
        if (ktune_rt_resolve(rt, g, s, 1, NULL, 0, &gpu, 0, 0, &k, NULL, &kerr) < 0) {
            fprintf(stderr, "lookup_latency: resolve: %s\n", kerr.msg);
            goto out;
        }
    }
    size_t n_hot = 100000;
    for (size_t i = 0; i < n_hot; i++) {
        ktune_shape s[1] = {{"M", (int64_t)(rng() % (uint64_t)o.hot_keys) + 1}};
        ktune_kernel *k = NULL;
        double a = now_ns();
        int rc = ktune_rt_resolve(rt, g, s, 1, NULL, 0, &gpu, 0, 0, &k, NULL, NULL);
        t[i] = now_ns() - a;
        if (rc < 0) {
            fprintf(stderr, "lookup_latency: hot resolve failed (%d)\n", rc);
            goto out;
        }
    }
    stats hot = summarise(t, n_hot);
    /* the timer's own cost, for reading the hot figures */
    for (size_t i = 0; i < n_hot; i++) {
        double a = now_ns();
        t[i] = now_ns() - a;
    }
    stats timer = summarise(t, n_hot);

    /* 4. the miss path: the first lookup that misses its exact key walks the whole cache for
     * the GPUs it holds; later ones read one key per compatible GPU */
    double scan_s = -1;
    stats compat = {0}, miss = {0};
    size_t n_miss = 2000;
    if (o.scan) {
        cache_gpu other = gpu;
        other.driver_version = 13010; /* same model, another driver: compatible */
        ktune_shape s[1] = {{"M", o.records / 2 + 1}};
        ktune_kernel *k = NULL;
        ktune_match match = KTUNE_MATCH_EXACT;
        double a = now_ns();
        int rc =
            ktune_rt_resolve(rt, g, s, 1, NULL, 0, &other, 0, KTUNE_RT_NO_MEMO, &k, &match, &kerr);
        scan_s = (now_ns() - a) / 1e9;
        ktune_rt_kernel_free(k);
        if (rc < 0 || match != KTUNE_MATCH_COMPATIBLE) {
            fprintf(stderr, "lookup_latency: compatible lookup: %s\n", kerr.msg);
            goto out;
        }
        for (size_t i = 0; i < n_miss; i++) {
            s[0].value = (int64_t)(rng() % (uint64_t)o.records) + 1;
            a = now_ns();
            rc = ktune_rt_resolve(rt, g, s, 1, NULL, 0, &other, 0, KTUNE_RT_NO_MEMO, &k, &match,
                                  &kerr);
            t[i] = now_ns() - a;
            ktune_rt_kernel_free(k);
            if (rc < 0 || match != KTUNE_MATCH_COMPATIBLE) {
                fprintf(stderr, "lookup_latency: compatible lookup: %s\n", kerr.msg);
                goto out;
            }
        }
        compat = summarise(t, n_miss);
        for (size_t i = 0; i < n_miss; i++) {
            s[0].value = o.records + 1 + (int64_t)i; /* never cached */
            a = now_ns();
            rc = ktune_rt_resolve(rt, g, s, 1, NULL, 0, &gpu, 0, KTUNE_RT_NO_MEMO, &k, NULL, NULL);
            t[i] = now_ns() - a;
            if (rc != -ENOENT) {
                fprintf(stderr, "lookup_latency: an uncached key gave %d\n", rc);
                goto out;
            }
        }
        miss = summarise(t, n_miss);
    }

    /* report */
    char host[256] = "?", cpu[160];
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(host, sizeof(host), "%s %s %s", u.nodename, u.sysname, u.release);
    cpu_model(cpu, sizeof(cpu));
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("lookup latency, %ld records (%ld B source + %ld B cubin each, %.0f MiB of map), "
           "built in %.1f s\n",
           o.records, o.source_bytes, o.cubin_bytes, (double)st.map_used / 1048576.0, build_s);
    printf("machine: %s; %s; %ld CPUs (no GPU used)\n", host, cpu, ncpu);
    printf("%-13s %8s %10s %10s %10s %10s\n", "path", "calls", "p50 ns", "p99 ns", "mean ns",
           "min ns");
    printf("%-13s %8ld %10.0f %10.0f %10.0f %10.0f\n", "cold_get", o.lookups, cold_get.p50,
           cold_get.p99, cold_get.mean, cold_get.min);
    printf("%-13s %8ld %10.0f %10.0f %10.0f %10.0f\n", "cold_resolve", o.lookups, cold.p50,
           cold.p99, cold.mean, cold.min);
    printf("%-13s %8zu %10.0f %10.0f %10.0f %10.0f\n", "hot", n_hot, hot.p50, hot.p99, hot.mean,
           hot.min);
    printf("%-13s %8zu %10.0f %10.0f %10.0f %10.0f\n", "(timer)", n_hot, timer.p50, timer.p99,
           timer.mean, timer.min);
    printf("first_lookup: runtime open (structural check) %.2f ms, with the first resolve %.2f ms, "
           "holding %ld GiB resident and %d threads\n",
           open_ns / 1e6, first_ns / 1e6, o.hold_gib, n_idle);
    if (scan_s >= 0) {
        printf("%-13s %8zu %10.0f %10.0f %10.0f %10.0f\n", "compat", n_miss, compat.p50, compat.p99,
               compat.mean, compat.min);
        printf("%-13s %8zu %10.0f %10.0f %10.0f %10.0f\n", "miss", n_miss, miss.p50, miss.p99,
               miss.mean, miss.min);
        printf("compat_first: the first lookup missing its exact key (walks %ld records for the "
               "cache's GPUs): %.3f s\n",
               o.records, scan_s);
    }
    char cmd[1024];
    size_t cl = 0;
    cmd[0] = '\0';
    for (int i = 0; i < argc && cl < sizeof(cmd); i++)
        cl += (size_t)snprintf(cmd + cl, sizeof(cmd) - cl, "%s%s", i ? " " : "", argv[i]);
    printf("{\"bench\": \"lookup_latency\", \"machine\": {\"host\": \"%s\", \"cpu\": \"%s\", "
           "\"cpus\": %ld, \"gpu\": null}, \"command\": \"%s\", \"protocol\": \"cache of %ld "
           "verified records (one GPU fingerprint, gemm_bias_relu at M=1..%ld) in %s, LMDB file "
           "in the page cache; per-call CLOCK_MONOTONIC; cold = %ld uniformly random keys "
           "without the memo; hot = %zu random lookups among %ld memoised keys; compat and miss "
           "= 2000 lookups each, after the first miss's walk; one thread\", "
           "\"records\": %ld, \"source_bytes\": %ld, \"cubin_bytes\": %ld, \"map_bytes\": %zu, "
           "\"build_s\": %.3f, "
           "\"cold_get_ns\": {\"p50\": %.0f, \"p99\": %.0f, \"mean\": %.0f}, "
           "\"cold_resolve_ns\": {\"p50\": %.0f, \"p99\": %.0f, \"mean\": %.0f}, "
           "\"hot_ns\": {\"p50\": %.0f, \"p99\": %.0f, \"mean\": %.0f}, "
           "\"timer_ns\": {\"p50\": %.0f}, \"compat_first_s\": %.4f, "
           "\"compat_ns\": {\"p50\": %.0f, \"p99\": %.0f}, "
           "\"miss_ns\": {\"p50\": %.0f, \"p99\": %.0f}, \"hold_gib\": %ld, "
           "\"open_ms\": %.3f, \"first_lookup_ms\": %.3f}\n",
           host, cpu, ncpu, cmd, o.records, o.records,
           strncmp(dir, "/dev/shm", 8) == 0 ? "tmpfs" : "a directory", o.lookups, n_hot, o.hot_keys,
           o.records, o.source_bytes, o.cubin_bytes, st.map_used, build_s, cold_get.p50,
           cold_get.p99, cold_get.mean, cold.p50, cold.p99, cold.mean, hot.p50, hot.p99, hot.mean,
           timer.p50, scan_s, compat.p50, compat.p99, miss.p50, miss.p99, o.hold_gib, open_ns / 1e6,
           first_ns / 1e6);
    status = 0;
out:
    ktune_runtime_close(rt);
    ktune_graph_free(g);
    free(t);
    free(cubin);
    if (!o.dir)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return status;
}
