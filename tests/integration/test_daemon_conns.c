/* Drill (issue 7): 1000 connections at once, most of them sending slow partial frames (a few
 * bytes at a time of a request that never completes), while a fresh client connects and gets
 * its hello and stats answers within 100 ms (each of 20 tries; KTUNE_TEST_TIME_SCALE scales
 * the limit). Then ktuned's own descriptor limit: lowered (prlimit) to what it holds, so every
 * accept fails with EMFILE; new clients are turned away (closed) rather than left hanging, the
 * daemon does not spin (CPU time over an idle second afterwards) and does not crash, and once
 * the limit is back a fresh client is served again. */
#include "daemon_harness.h"
#include "drill_util.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define N_CONNS  1000
#define N_SLOW   800
#define N_TRIES  20
#define LIMIT_MS 100.0

static dh_daemon daemon_;

static int setup(void **state)
{
    (void)state;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < N_CONNS + 200) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < N_CONNS + 200) {
            fprintf(stderr, "cannot raise RLIMIT_NOFILE to %d\n", N_CONNS + 200);
            return -1;
        }
    }
    if (dh_init(&daemon_, "conns") < 0)
        return -1;
    dh_opts o = {.gpus = "0"};
    return dh_start(&daemon_, &o, 30.0);
}

static int teardown(void **state)
{
    (void)state;
    dh_cleanup(&daemon_);
    return 0;
}

static int raw_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, n + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/* The dribbler: the start of {"v": 1, "id": 1, "op": <a 1 MiB string>}, then the string's bytes
 * a few at a time, round robin over the slow connections, never finishing it. */
typedef struct dribbler {
    pthread_t thread;
    int *fds;
    int n;
    atomic_bool stop;
    long sent;
} dribbler;

static void *dribble_main(void *arg)
{
    dribbler *d = arg;
    static const unsigned char head[] = {0x83, 0xa1, 'v', 0x01, 0xa2, 'i',  'd',  0x01,
                                         0xa2, 'o',  'p', 0xdb, 0x00, 0x10, 0x00, 0x00};
    size_t *pos = calloc((size_t)d->n, sizeof(size_t));
    unsigned seed = 7;
    while (!atomic_load(&d->stop)) {
        for (int i = 0; i < d->n && !atomic_load(&d->stop); i++) {
            seed = seed * 1103515245u + 12345u;
            size_t k = 1 + (seed >> 16) % 3; /* 1 to 3 bytes */
            unsigned char buf[4];
            for (size_t b = 0; b < k; b++)
                buf[b] = pos[i] + b < sizeof(head) ? head[pos[i] + b] : 'x';
            ssize_t w = send(d->fds[i], buf, k, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                pos[i] += (size_t)w;
                d->sent += w;
            }
            if (i % 50 == 49)
                usleep(1000); /* ~50 partial writes per ms */
        }
    }
    free(pos);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* connect + hello + stats from a fresh client; the latency of each in ms. */
static int fresh_client(double *hello_ms, double *stats_ms, int64_t *clients)
{
    dh_conn c;
    double t0 = dh_now();
    int rc = dh_connect(&c, daemon_.sock);
    if (rc < 0)
        return rc;
    rc = dh_hello(&c, 5.0, NULL);
    *hello_ms = (dh_now() - t0) * 1e3;
    if (rc == 0) {
        double t1 = dh_now();
        dh_req r;
        dh_req_begin(&r, &c, "stats", 0);
        const msgpack_object *rep;
        rc = dh_call(&c, &r, 5.0, &rep);
        *stats_ms = (dh_now() - t1) * 1e3;
        if (rc == 0 && !dh_ok(rep))
            rc = -EREMOTEIO;
        if (rc == 0)
            *clients = dh_int(rep, "clients", -1);
    }
    dh_close(&c);
    return rc;
}

static void test_thousand_connections(void **state)
{
    (void)state;
    int *fds = calloc(N_CONNS, sizeof(int));
    assert_non_null(fds);
    double t0 = dh_now();
    for (int i = 0; i < N_CONNS; i++) {
        fds[i] = raw_connect(daemon_.sock);
        if (fds[i] < 0)
            fail_msg("connection %d of %d: %s", i + 1, N_CONNS, strerror(-fds[i]));
    }
    double t_open = dh_now() - t0;
    dribbler d = {.fds = fds, .n = N_SLOW};
    atomic_init(&d.stop, false);
    assert_int_equal(pthread_create(&d.thread, NULL, dribble_main, &d), 0);
    usleep(300 * 1000); /* every slow connection has sent a partial frame */
    double cpu0 = drill_cpu_seconds(daemon_.pid), w0 = dh_now();

    double hello[N_TRIES], stats[N_TRIES];
    int64_t clients = 0;
    for (int i = 0; i < N_TRIES; i++) {
        int rc = fresh_client(&hello[i], &stats[i], &clients);
        if (rc < 0) {
            dh_dump_log(&daemon_, 2000);
            fail_msg("fresh client %d: %d", i + 1, rc);
        }
        usleep(20 * 1000);
    }
    double cpu = drill_cpu_seconds(daemon_.pid) - cpu0, wall = dh_now() - w0;
    atomic_store(&d.stop, true);
    pthread_join(d.thread, NULL);
    double hs[N_TRIES], ss[N_TRIES];
    memcpy(hs, hello, sizeof(hs));
    memcpy(ss, stats, sizeof(ss));
    qsort(hs, N_TRIES, sizeof(double), cmp_double);
    qsort(ss, N_TRIES, sizeof(double), cmp_double);
    print_message("%d connections opened in %.2f s, %d of them dribbling (%ld bytes sent); a fresh "
                  "client's connect+hello: median %.2f ms, max %.2f ms; stats: median %.2f ms, max "
                  "%.2f ms; %lld clients counted; ktuned used %.0f%% of a core meanwhile\n",
                  N_CONNS, t_open, N_SLOW, d.sent, hs[N_TRIES / 2], hs[N_TRIES - 1],
                  ss[N_TRIES / 2], ss[N_TRIES - 1], (long long)clients, 100 * cpu / wall);
    double limit = LIMIT_MS * dh_scale();
    for (int i = 0; i < N_TRIES; i++)
        if (hello[i] + stats[i] > limit)
            fail_msg("fresh client %d: hello %.1f ms + stats %.1f ms, over %.0f ms", i + 1,
                     hello[i], stats[i], limit);
    assert_true(clients > N_CONNS);
    assert_true(dh_alive(&daemon_));

    /* ---- ktuned at its own descriptor limit ---- */
    int held = drill_count_fds(daemon_.pid);
    assert_true(held > N_CONNS);
    struct rlimit old, low = {.rlim_cur = (rlim_t)held, .rlim_max = 0};
    assert_int_equal(prlimit(daemon_.pid, RLIMIT_NOFILE, NULL, &old), 0);
    low.rlim_max = old.rlim_max;
    assert_int_equal(prlimit(daemon_.pid, RLIMIT_NOFILE, &low, NULL), 0);
    int refused = 0, served = 0;
    for (int i = 0; i < 20; i++) {
        dh_conn c;
        if (dh_connect(&c, daemon_.sock) < 0) {
            refused++;
            continue;
        }
        int rc = dh_hello(&c, 2.0, NULL);
        if (rc == 0)
            served++;
        else if (rc == -ECONNRESET || rc == -EPIPE)
            refused++;
        else
            fail_msg("at the descriptor limit a client got neither an answer nor a close: %d", rc);
        dh_close(&c);
    }
    double c0 = drill_cpu_seconds(daemon_.pid);
    usleep(1000 * 1000);
    double idle_cpu = drill_cpu_seconds(daemon_.pid) - c0;
    assert_true(dh_alive(&daemon_));
    print_message("at its descriptor limit (%d): %d of 20 new clients turned away, %d served; "
                  "%.3f s of CPU over the next idle second\n",
                  held, refused, served, idle_cpu);
    if (idle_cpu > 0.2)
        fail_msg("ktuned used %.2f s of CPU in an idle second at its descriptor limit (a spin)",
                 idle_cpu);
    assert_int_equal(prlimit(daemon_.pid, RLIMIT_NOFILE, &old, NULL), 0);

    for (int i = 0; i < N_CONNS; i++)
        close(fds[i]);
    free(fds);
    double h = 0, s = 0;
    if (fresh_client(&h, &s, &clients) < 0)
        fail_msg("no answer after the descriptor limit was raised again");
    int st = 0;
    if (dh_stop(&daemon_, SIGTERM, 10.0, &st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("ktuned did not exit 0 on SIGTERM (0x%x)", st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_thousand_connections, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
