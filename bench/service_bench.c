/* The service benchmark: lookups per second and lookup latency through ktuned, and the daemon's
 * resident memory. Not a test: it prints figures.
 *
 *   service_bench [--clients N] [--seconds S] [--budget S] [--miss]
 *
 * It starts ktuned (KTUNED_BIN) on a temporary socket and cache with the fake GPU worker
 * (KTUNE_FAKE_WORKER), runs one tuning job so the cache holds a record, then
 *   1. one client doing `lookup` back to back for S seconds (latency without contention);
 *   2. N clients (default 64), each on its own connection, doing `lookup` back to back for S
 *      seconds (throughput and latency under load);
 * (--miss: every lookup sends the graph under a name never sent before, so ktuned's lookup memo
 * cannot answer it and each lookup decodes, validates and signs the graph and reads and checks
 * the record: the cost of a first lookup), and reads VmRSS from /proc/PID/status: after start-up
 * (idle), after the job, at its peak during the load, and after the load (idle again). Prints a
 * table and one JSON line with the machine, the command and the protocol version. meson: `meson
 * test -C BUILD --benchmark service`. */
#include "daemon_harness.h"

#include "ops/ops.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

typedef struct lat_buf {
    double *v;
    size_t n, cap;
} lat_buf;

static int lat_push(lat_buf *b, double x)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        double *v = realloc(b->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = x;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const lat_buf *b, double p)
{
    if (!b->n)
        return 0;
    size_t i = (size_t)(p * (double)(b->n - 1) + 0.5);
    return b->v[i < b->n ? i : b->n - 1];
}

typedef struct run_stats {
    size_t lookups, errors, not_found;
    double seconds, per_s, p50_us, p99_us, max_us;
    double daemon_cpu_s; /* ktuned's user + system CPU time during the run */
} run_stats;

/* User + system CPU seconds of pid (/proc/PID/stat fields 14 and 15), or -1. */
static double cpu_seconds(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p)
        return -1;
    unsigned long long ut = 0, st = 0;
    /* after ") ": state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
     * utime(14) stime(15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* --miss: the graph is sent renamed "bench-" + 12 hex digits, a new name for every lookup */
#define MISS_PREFIX "bench-"
#define MISS_DIGITS 12

typedef struct bench_client {
    pthread_t thread;
    const char *sock;
    const void *graph;
    size_t graph_len;
    uint8_t *renamed; /* --miss: graph renamed; its name's digits at renamed + digits_at */
    size_t renamed_len, digits_at;
    uint64_t serial; /* --miss: the client's first name number */
    const dh_shape *shapes;
    int n_shapes;
    double seconds;
    pthread_barrier_t *start;
    lat_buf lat;
    size_t errors, not_found;
    char err[200];
} bench_client;

static void *client_main(void *arg)
{
    bench_client *bc = arg;
    dh_conn c = {.fd = -1};
    int rc = -1;
    for (int attempt = 0; attempt < 100 && rc < 0; attempt++)
        if ((rc = dh_connect(&c, bc->sock)) < 0)
            usleep(10 * 1000);
    pthread_barrier_wait(bc->start);
    if (rc < 0) {
        snprintf(bc->err, sizeof(bc->err), "connect: %s", strerror(-rc));
        return NULL;
    }
    double t_end = dh_now() + bc->seconds;
    for (size_t k = 0; dh_now() < t_end; k++) {
        bool found = false;
        const void *g = bc->graph;
        size_t g_len = bc->graph_len;
        if (bc->renamed) {
            char digits[MISS_DIGITS + 1];
            snprintf(digits, sizeof(digits), "%0*llx", MISS_DIGITS,
                     (unsigned long long)(bc->serial + k));
            memcpy(bc->renamed + bc->digits_at, digits, MISS_DIGITS);
            g = bc->renamed;
            g_len = bc->renamed_len;
        }
        double t0 = dh_now();
        rc = dh_lookup(&c, g, g_len, bc->shapes, bc->n_shapes, 10.0, &found, NULL);
        double dt = dh_now() - t0;
        if (rc < 0) {
            bc->errors++;
            if (rc != -EREMOTEIO) {
                snprintf(bc->err, sizeof(bc->err), "lookup: %s", strerror(-rc));
                break;
            }
            continue;
        }
        bc->not_found += !found;
        if (lat_push(&bc->lat, dt) < 0)
            break;
    }
    dh_close(&c);
    return NULL;
}

typedef struct rss_sampler {
    pthread_t thread;
    pid_t pid;
    volatile bool stop;
    int64_t peak;
} rss_sampler;

static void *sampler_main(void *arg)
{
    rss_sampler *s = arg;
    while (!s->stop) {
        int64_t r = dh_rss_bytes(s->pid);
        if (r > s->peak)
            s->peak = r;
        usleep(50 * 1000);
    }
    return NULL;
}

/* graph renamed MISS_PREFIX + MISS_DIGITS zeros: the same signature (names take no part in it),
 * and bytes that differ from lookup to lookup once the digits are rewritten. *out is malloc'd;
 * *digits_at is where the digits are. */
static int make_renamed(const void *graph, size_t graph_len, uint8_t **out, size_t *len,
                        size_t *digits_at)
{
    ops_graph *g = NULL;
    ops_diag diag = {0};
    if (ops_graph_from_msgpack(graph, graph_len, &g, &diag) < 0) {
        fprintf(stderr, "service_bench: graph: %s\n", diag.msg);
        return -EINVAL;
    }
    char name[64];
    snprintf(name, sizeof(name), "%s%0*d", MISS_PREFIX, MISS_DIGITS, 0);
    free(g->name);
    void *buf = NULL;
    int rc = (g->name = strdup(name)) && ops_graph_to_msgpack(g, &buf, len) == 0 ? 0 : -ENOMEM;
    ops_graph_free(g);
    if (rc < 0)
        return rc;
    const uint8_t *at = memmem(buf, *len, name, strlen(name));
    if (!at) {
        free(buf);
        fprintf(stderr, "service_bench: the graph's name is not in its msgpack form\n");
        return -EINVAL;
    }
    *out = buf;
    *digits_at = (size_t)(at - (const uint8_t *)buf) + strlen(MISS_PREFIX);
    return 0;
}

static int run_lookups(const dh_daemon *d, int n_clients, double seconds, const void *graph,
                       size_t graph_len, const dh_shape *shapes, int n_shapes, bool miss,
                       run_stats *out, int64_t *rss_peak)
{
    bench_client *cl = calloc((size_t)n_clients, sizeof(*cl));
    if (!cl)
        return -ENOMEM;
    static uint64_t serial; /* names never repeat within a run of the benchmark */
    for (int i = 0; miss && i < n_clients; i++) {
        if (make_renamed(graph, graph_len, &cl[i].renamed, &cl[i].renamed_len, &cl[i].digits_at) <
            0) {
            for (int k = 0; k < i; k++)
                free(cl[k].renamed);
            free(cl);
            return -ENOMEM;
        }
        cl[i].serial = serial;
        serial += 1ull << 32;
    }
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n_clients + 1);
    for (int i = 0; i < n_clients; i++) {
        bench_client keep = cl[i];
        cl[i] = (bench_client){.sock = d->sock,
                               .renamed = keep.renamed,
                               .renamed_len = keep.renamed_len,
                               .digits_at = keep.digits_at,
                               .serial = keep.serial,
                               .graph = graph,
                               .graph_len = graph_len,
                               .shapes = shapes,
                               .n_shapes = n_shapes,
                               .seconds = seconds,
                               .start = &start};
        pthread_create(&cl[i].thread, NULL, client_main, &cl[i]);
    }
    rss_sampler s = {.pid = d->pid, .peak = dh_rss_bytes(d->pid)};
    pthread_create(&s.thread, NULL, sampler_main, &s);
    pthread_barrier_wait(&start);
    double t0 = dh_now(), cpu0 = cpu_seconds(d->pid);
    for (int i = 0; i < n_clients; i++)
        pthread_join(cl[i].thread, NULL);
    double elapsed = dh_now() - t0, cpu1 = cpu_seconds(d->pid);
    s.stop = true;
    pthread_join(s.thread, NULL);
    pthread_barrier_destroy(&start);
    if (rss_peak)
        *rss_peak = s.peak;

    lat_buf all = {0};
    memset(out, 0, sizeof(*out));
    int rc = 0;
    for (int i = 0; i < n_clients; i++) {
        if (cl[i].err[0]) {
            fprintf(stderr, "service_bench: client %d: %s\n", i, cl[i].err);
            rc = -EIO;
        }
        out->errors += cl[i].errors;
        out->not_found += cl[i].not_found;
        for (size_t k = 0; k < cl[i].lat.n; k++)
            if (lat_push(&all, cl[i].lat.v[k]) < 0)
                rc = -ENOMEM;
        free(cl[i].lat.v);
        free(cl[i].renamed);
    }
    free(cl);
    qsort(all.v, all.n, sizeof(double), cmp_double);
    out->lookups = all.n;
    out->seconds = elapsed;
    out->daemon_cpu_s = cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : 0;
    out->per_s = (double)all.n / elapsed;
    out->p50_us = 1e6 * pct(&all, 0.50);
    out->p99_us = 1e6 * pct(&all, 0.99);
    out->max_us = all.n ? 1e6 * all.v[all.n - 1] : 0;
    free(all.v);
    return rc;
}

static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ')
                    p++;
                p[strcspn(p, "\n")] = '\0';
                snprintf(buf, len, "%s", p);
            }
            break;
        }
    fclose(f);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static const char usage[] =
    "usage: service_bench [--clients N] [--seconds S] [--budget S] [--miss]\n";

int main(int argc, char **argv)
{
    int n_clients = 64;
    double seconds = 5.0, budget = 2.0;
    bool miss = false;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--clients") == 0)
            n_clients = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--budget") == 0)
            budget = atof(argv[++i]);
        else if (strcmp(argv[i], "--miss") == 0)
            miss = true;
        else {
            fputs(usage, stderr);
            return 2;
        }
    }
    if (n_clients < 1 || n_clients > 4096 || !(seconds > 0) || !(budget >= 1)) {
        fprintf(stderr, "service_bench: --clients 1..4096, --seconds > 0, --budget >= 1\n");
        return 2;
    }

    int status = 1;
    dh_daemon d;
    void *graph = NULL;
    size_t graph_len = 0;
    dh_conn c = {.fd = -1};
    const dh_shape shapes[2] = {{"M", 256}, {"N", 512}};
    if (dh_example_graph("gelu_tanh_chain", &graph, &graph_len) < 0)
        return 1;
    if (dh_init(&d, "bench") < 0)
        goto out_graph;
    dh_opts o = {.gpus = "0"};
    if (dh_start(&d, &o, 30.0) < 0)
        goto out_daemon;
    usleep(500 * 1000);
    int64_t rss_start = dh_rss_bytes(d.pid);

    /* hello: the daemon's version */
    char version[64] = "";
    if (dh_connect(&c, d.sock) < 0)
        goto out_daemon;
    dh_req r;
    dh_req_begin(&r, &c, "hello", 0);
    const msgpack_object *rep;
    if (dh_call(&c, &r, 10.0, &rep) < 0 || !dh_ok(rep))
        goto out_daemon;
    dh_str(rep, "version", version, sizeof(version));

    /* one job so the lookups find a record */
    dh_submit_args a = {.graph = graph,
                        .graph_len = graph_len,
                        .shapes = shapes,
                        .n_shapes = 2,
                        .budget_s = budget,
                        .gpu = -1};
    dh_job job;
    double t_job = dh_now();
    if (dh_submit(&c, &a, 10.0, &job, NULL) < 0 ||
        dh_wait_job(&c, job.id, NULL, 300.0, 0.1, &job) < 0 || strcmp(job.state, "done") != 0 ||
        !job.record) {
        fprintf(stderr, "service_bench: the tuning job did not finish with a record (%s: %s)\n",
                job.state, job.error);
        goto out_daemon;
    }
    t_job = dh_now() - t_job;
    dh_close(&c);
    usleep(500 * 1000);
    int64_t rss_job = dh_rss_bytes(d.pid);

    run_stats one, many;
    int64_t peak_one = 0, peak_many = 0;
    if (run_lookups(&d, 1, seconds, graph, graph_len, shapes, 2, miss, &one, &peak_one) < 0 ||
        run_lookups(&d, n_clients, seconds, graph, graph_len, shapes, 2, miss, &many, &peak_many) <
            0)
        goto out_daemon;
    usleep(500 * 1000);
    int64_t rss_after = dh_rss_bytes(d.pid);
    if (one.not_found || many.not_found || one.errors || many.errors) {
        fprintf(stderr, "service_bench: %zu lookups found nothing, %zu failed\n",
                one.not_found + many.not_found, one.errors + many.errors);
        goto out_daemon;
    }

    struct utsname u;
    uname(&u);
    char cpu[256];
    cpu_model(cpu, sizeof(cpu));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char cmd[1024] = "";
    size_t off = 0;
    for (int i = 0; i < argc && off < sizeof(cmd); i++)
        off += (size_t)snprintf(cmd + off, sizeof(cmd) - off, "%s%s", i ? " " : "", argv[i]);

    printf("ktuned service benchmark (ktune %s, protocol 1, fake GPU worker)\n", version);
    printf("machine: %s, %ld cores, %s %s\n", cpu, cores, u.sysname, u.release);
    printf("tuning job (gelu_tanh_chain M=256 N=512, budget %.0f s): %.1f s\n\n", budget, t_job);
    printf("%-28s %10s %12s %10s %10s %10s %14s\n", miss ? "lookup (--miss)" : "lookup", "lookups",
           "lookups/s", "p50 us", "p99 us", "max us", "ktuned CPU us");
    printf("%-28s %10zu %12.0f %10.1f %10.1f %10.1f %14.1f\n", "1 client, back to back",
           one.lookups, one.per_s, one.p50_us, one.p99_us, one.max_us,
           1e6 * one.daemon_cpu_s / (double)one.lookups);
    char label[64];
    snprintf(label, sizeof(label), "%d clients, back to back", n_clients);
    printf("%-28s %10zu %12.0f %10.1f %10.1f %10.1f %14.1f\n", label, many.lookups, many.per_s,
           many.p50_us, many.p99_us, many.max_us, 1e6 * many.daemon_cpu_s / (double)many.lookups);
    printf("(ktuned CPU us: the daemon's user + system CPU time per lookup)\n\n");
    printf("%-28s %10s\n", "ktuned VmRSS", "MiB");
    printf("%-28s %10.1f\n", "idle after start", (double)rss_start / 1048576.0);
    printf("%-28s %10.1f\n", "idle after the job", (double)rss_job / 1048576.0);
    printf("%-28s %10.1f\n", "peak during the load", (double)peak_many / 1048576.0);
    printf("%-28s %10.1f\n\n", "idle after the load", (double)rss_after / 1048576.0);

    printf("{\"bench\": \"service\", \"machine\": {\"cpu\": ");
    json_str(stdout, cpu);
    printf(", \"cores\": %ld, \"kernel\": ", cores);
    json_str(stdout, u.release);
    printf(", \"gpu\": \"fake worker\"}, \"command\": ");
    json_str(stdout, cmd);
    printf(", \"protocol\": 1, \"ktune_version\": ");
    json_str(stdout, version);
    printf(", \"miss\": %s, \"clients\": %d, \"seconds\": %.1f, "
           "\"single\": {\"lookups_per_s\": %.0f, \"p50_us\": %.1f, \"p99_us\": %.1f, "
           "\"daemon_cpu_us_per_lookup\": %.1f}, "
           "\"concurrent\": {\"lookups_per_s\": %.0f, \"p50_us\": %.1f, \"p99_us\": %.1f, "
           "\"daemon_cpu_us_per_lookup\": %.1f}, "
           "\"rss_bytes\": {\"idle_start\": %lld, \"after_job\": %lld, \"peak_load\": %lld, "
           "\"idle_after_load\": %lld}}\n",
           miss ? "true" : "false", n_clients, seconds, one.per_s, one.p50_us, one.p99_us,
           1e6 * one.daemon_cpu_s / (double)one.lookups, many.per_s, many.p50_us, many.p99_us,
           1e6 * many.daemon_cpu_s / (double)many.lookups, (long long)rss_start, (long long)rss_job,
           (long long)peak_many, (long long)rss_after);
    (void)peak_one;
    status = 0;
out_daemon:
    dh_close(&c);
    if (status != 0 && d.pid > 0)
        dh_dump_log(&d, 3000);
    dh_cleanup(&d);
out_graph:
    free(graph);
    return status;
}
