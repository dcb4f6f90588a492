/* The large-graph load generator: another client's request latency while one client submits
 * the largest graphs the parsers accept, in a loop (issue 16 item 5; docs/RELIABILITY.md has the
 * figure). Not a test: it prints figures (tests/integration/test_daemon_large.c asserts a looser
 * bound).
 *
 *   large_graph_load [--seconds S] [--depth D] [--nodes N] [--branches K]
 *
 * It starts ktuned (KTUNED_BIN) on a temporary socket and cache with the fake GPU worker
 * (KTUNE_FAKE_WORKER), then, for S seconds each (default 5):
 *   idle      the bystander alone: `lookup` of examples/gemm_bias_relu.json (M=1024) back to
 *             back with 2 ms pauses, on its own connection;
 *   chain     the same while a loader keeps D (default 16) `submit`s of a chain of N relus
 *             (default 4 095, the most a graph may hold) in flight on another connection;
 *   branches  the same while the loader submits K (default 64) relus of one input side by side
 *             instead: taken by the search, and the costliest signature of a graph it takes.
 * For each phase it prints the bystander's latency (p50, p99, max) and the loader's replies per
 * second, then one JSON line with the machine and the command. meson: `meson test -C BUILD
 * --benchmark large_graphs`. */
#include "daemon_harness.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

typedef struct load {
    const char *sock;
    const void *graph;
    size_t len;
    int depth;
    atomic_int stop;
    int sent, replies, refused, err;
} load;

static const dh_shape load_shapes[1] = {{"M", 256}};

static int send_submit(dh_conn *c, load *l)
{
    dh_req r;
    dh_req_begin(&r, c, "submit", 3);
    dh_req_raw(&r, "graph", l->graph, l->len);
    dh_req_key(&r, "shapes");
    dh_req_shapes(&r, load_shapes, 1);
    dh_req_num(&r, "budget_s", 1);
    int rc = dh_send(c, r.sb.data, r.sb.size);
    dh_req_free(&r);
    l->sent++;
    return rc;
}

static void *load_main(void *arg)
{
    load *l = arg;
    dh_conn c;
    if ((l->err = dh_connect(&c, l->sock)) < 0)
        return NULL;
    for (int i = 0; i < l->depth && l->err == 0; i++)
        l->err = send_submit(&c, l);
    while (l->err == 0 && l->replies < l->sent) {
        const msgpack_object *m;
        if ((l->err = dh_recv(&c, 600.0, &m)) < 0)
            break;
        if (!dh_get(m, "ok")) /* an event */
            continue;
        l->replies++;
        l->refused += !dh_ok(m);
        if (!l->stop)
            l->err = send_submit(&c, l);
    }
    dh_close(&c);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct phase {
    const char *name;
    int n;
    double p50, p99, max;
    double load_rate; /* loader replies per second */
    int refused;
} phase;

/* The bystander's lookups for seconds, with the loader l running when non-NULL. */
static int run_phase(dh_daemon *d, const void *graph, size_t len, load *l, double seconds,
                     phase *out)
{
    static const dh_shape shapes[1] = {{"M", 1024}};
    size_t cap = 1 << 20;
    double *lat = malloc(cap * sizeof(double));
    if (!lat)
        return -ENOMEM;
    dh_conn c;
    int rc = dh_connect(&c, d->sock);
    if (rc < 0) {
        free(lat);
        return rc;
    }
    pthread_t th;
    if (l && pthread_create(&th, NULL, load_main, l) != 0) {
        dh_close(&c);
        free(lat);
        return -EAGAIN;
    }
    double t0 = dh_now(), t_end = t0 + seconds;
    size_t n = 0;
    while (dh_now() < t_end && n < cap) {
        double a = dh_now();
        bool found;
        if ((rc = dh_lookup(&c, graph, len, shapes, 1, 600.0, &found, NULL)) < 0)
            break;
        lat[n++] = dh_now() - a;
        usleep(2000);
    }
    double took = dh_now() - t0;
    if (l) {
        l->stop = 1;
        pthread_join(th, NULL);
        if (l->err < 0 && rc == 0)
            rc = l->err;
        out->load_rate = l->replies / took;
        out->refused = l->refused;
    }
    dh_close(&c);
    if (rc == 0 && n == 0)
        rc = -EIO;
    if (rc == 0) {
        qsort(lat, n, sizeof(double), cmp_double);
        out->n = (int)n;
        out->p50 = lat[n / 2];
        out->p99 = lat[(n * 99) / 100];
        out->max = lat[n - 1];
    }
    free(lat);
    return rc;
}

int main(int argc, char **argv)
{
    double seconds = 5;
    int depth = 16, nodes = 4095, branches = 64;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--depth") == 0)
            depth = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--nodes") == 0)
            nodes = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--branches") == 0)
            branches = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: large_graph_load [--seconds S] [--depth D] [--nodes N] "
                            "[--branches K]\n");
            return 2;
        }
    }
    if (seconds <= 0 || depth < 1 || nodes < 1 || branches < 1) {
        fprintf(stderr, "large_graph_load: --seconds, --depth, --nodes and --branches are "
                        "positive\n");
        return 2;
    }
    void *small = NULL, *chain = NULL, *wide = NULL;
    size_t small_len = 0, chain_len = 0, wide_len = 0;
    dh_daemon d;
    int rc = 0;
    if (dh_example_graph("gemm_bias_relu", &small, &small_len) < 0 ||
        dh_chain_graph("relu", nodes, &chain, &chain_len) < 0 ||
        dh_branches_graph(branches, &wide, &wide_len) < 0 || dh_init(&d, "large-load") < 0) {
        fprintf(stderr, "large_graph_load: cannot build the graphs or the temporary directory\n");
        return 1;
    }
    dh_opts o = {.gpus = "0"};
    if ((rc = dh_start(&d, &o, 60.0)) < 0) {
        fprintf(stderr, "large_graph_load: ktuned did not start (%d)\n", rc);
        dh_cleanup(&d);
        return 1;
    }
    dh_conn w;
    if ((rc = dh_connect(&w, d.sock)) == 0) {
        rc = dh_wait_gpus_started(&w, 60.0);
        dh_close(&w);
    }
    phase ph[3] = {{.name = "idle"}, {.name = "chain"}, {.name = "branches"}};
    load lc = {.sock = d.sock, .graph = chain, .len = chain_len, .depth = depth};
    load lw = {.sock = d.sock, .graph = wide, .len = wide_len, .depth = depth};
    load *loads[3] = {NULL, &lc, &lw};
    for (int i = 0; i < 3 && rc == 0; i++)
        if ((rc = run_phase(&d, small, small_len, loads[i], seconds, &ph[i])) < 0)
            fprintf(stderr, "large_graph_load: phase %s failed (%d)\n", ph[i].name, rc);
    if (rc < 0)
        dh_dump_log(&d, 3000);
    dh_stop(&d, 15, 10.0, NULL);
    dh_cleanup(&d);
    free(small);
    free(chain);
    free(wide);
    if (rc < 0)
        return 1;
    printf("bystander lookup latency while another client submits large graphs (%d in flight)\n",
           depth);
    printf("%-9s %8s %10s %10s %10s %14s\n", "phase", "lookups", "p50 ms", "p99 ms", "max ms",
           "loader rep/s");
    for (int i = 0; i < 3; i++)
        printf("%-9s %8d %10.2f %10.2f %10.2f %14.1f\n", ph[i].name, ph[i].n, ph[i].p50 * 1e3,
               ph[i].p99 * 1e3, ph[i].max * 1e3, ph[i].load_rate);
    struct utsname u;
    uname(&u);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    printf("{\"bench\": \"large_graph_load\", \"machine\": \"%s %s, %ld CPUs\", \"seconds\": %g, "
           "\"depth\": %d, \"nodes\": %d, \"branches\": %d",
           u.nodename, u.machine, cpus, seconds, depth, nodes, branches);
    for (int i = 0; i < 3; i++)
        printf(", \"%s\": {\"lookups\": %d, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f, "
               "\"loader_replies_per_s\": %.2f, \"loader_refused\": %d}",
               ph[i].name, ph[i].n, ph[i].p50 * 1e3, ph[i].p99 * 1e3, ph[i].max * 1e3,
               ph[i].load_rate, ph[i].refused);
    printf("}\n");
    return 0;
}
