/* ktuned under load: 100 clients at once, each on its own connection, submit a mix of example
 * graphs and shapes (with the fake worker on two GPUs), follow their job (half with watch, half
 * by polling status), and look the result up. Every submit gets a job id, duplicates join one job,
 * every job reaches done with a record, every lookup after done finds it, and a fresh client's
 * hello is answered promptly all along. */
#include "daemon_harness.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define N_CLIENTS  100
#define N_COMBOS   6
#define JOB_WAIT_S (240.0 * dh_scale())

typedef struct combo {
    const char *example;
    dh_shape shapes[2];
    int n_shapes;
    void *mp;
    size_t len;
} combo;

static combo combos[N_COMBOS] = {
    {"gelu_tanh_chain", {{"M", 256}, {"N", 512}}, 2, NULL, 0},
    {"gelu_tanh_chain", {{"M", 512}, {"N", 512}}, 2, NULL, 0},
    {"softmax", {{"M", 128}, {"N", 1024}}, 2, NULL, 0},
    {"sum_lastaxis", {{"M", 64}, {"N", 2048}}, 2, NULL, 0},
    {"layernorm", {{"M", 64}}, 1, NULL, 0},
    {"rmsnorm", {{"M", 128}}, 1, NULL, 0},
};

typedef struct client {
    int idx;
    pthread_t thread;
    int combo;
    uint64_t job;
    bool joined, rejoined;
    uint64_t rejoin_job;
    char state[16];
    bool record, found;
    int gpu;
    int events;
    char family[32];
    char err[400]; /* "" when everything went as expected */
} client;

static dh_daemon daemon_;
static client clients[N_CLIENTS];
static pthread_barrier_t start_line;

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < N_COMBOS; i++)
        if (dh_example_graph(combos[i].example, &combos[i].mp, &combos[i].len) < 0)
            return -1;
    if (dh_init(&daemon_, "load") < 0)
        return -1;
    dh_opts o = {.gpus = "0,1", .delay_ms = 2};
    return dh_start(&daemon_, &o, 30.0);
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N_COMBOS; i++)
        free(combos[i].mp);
    dh_cleanup(&daemon_);
    return 0;
}

#define CLIENT_FAIL(cl, ...)                                                                       \
    do {                                                                                           \
        snprintf((cl)->err, sizeof((cl)->err), __VA_ARGS__);                                       \
        goto out;                                                                                  \
    } while (0)

/* watch: the Job now, progress events, one end event. */
static int follow_by_watch(client *cl, dh_conn *c, dh_job *job)
{
    dh_req r;
    dh_req_begin(&r, c, "watch", 1);
    dh_req_int(&r, "job", (int64_t)cl->job);
    uint64_t wid = r.id;
    const msgpack_object *rep;
    int rc = dh_call(c, &r, 10.0, &rep);
    if (rc < 0 || !dh_ok(rep)) {
        snprintf(cl->err, sizeof(cl->err), "watch: no ok reply (%d)", rc);
        return -1;
    }
    if (dh_job_parse(dh_get(rep, "job"), job) < 0 || job->id != cl->job) {
        snprintf(cl->err, sizeof(cl->err), "watch: the reply holds no Job %llu",
                 (unsigned long long)cl->job);
        return -1;
    }
    double t_end = dh_now() + JOB_WAIT_S;
    for (;;) {
        rc = dh_recv(c, t_end - dh_now(), &rep);
        if (rc < 0) {
            snprintf(cl->err, sizeof(cl->err), "watch: no end event (%d)", rc);
            return -1;
        }
        if ((uint64_t)dh_int(rep, "id", 0) != wid || !dh_get(rep, "event")) {
            char d[200];
            dh_describe(rep, d, sizeof(d));
            snprintf(cl->err, sizeof(cl->err), "watch: unexpected message %s", d);
            return -1;
        }
        cl->events++;
        if (dh_job_parse(dh_get(rep, "job"), job) < 0 || job->id != cl->job) {
            snprintf(cl->err, sizeof(cl->err), "watch: an event without Job %llu",
                     (unsigned long long)cl->job);
            return -1;
        }
        if (dh_is_str(rep, "event", "end")) {
            if (!dh_job_final(job)) {
                snprintf(cl->err, sizeof(cl->err), "watch: end event with state %s", job->state);
                return -1;
            }
            return 0;
        }
        if (!dh_is_str(rep, "event", "progress")) {
            snprintf(cl->err, sizeof(cl->err), "watch: unknown event");
            return -1;
        }
    }
}

static void *client_main(void *arg)
{
    client *cl = arg;
    combo *cb = &combos[cl->combo];
    dh_conn c = {.fd = -1};
    dh_job job;
    int rc = -1;
    pthread_barrier_wait(&start_line);
    for (int attempt = 0; attempt < 50 && rc < 0; attempt++) {
        rc = dh_connect(&c, daemon_.sock);
        if (rc < 0)
            usleep(20 * 1000); /* listen backlog full: try again */
    }
    if (rc < 0)
        CLIENT_FAIL(cl, "connect: %d", rc);
    if ((rc = dh_hello(&c, 20.0, NULL)) < 0)
        CLIENT_FAIL(cl, "hello: %d", rc);
    dh_submit_args a = {.graph = cb->mp,
                        .graph_len = cb->len,
                        .shapes = cb->shapes,
                        .n_shapes = cb->n_shapes,
                        /* room for the whole (small) space: on a loaded 2-core CI runner
                         * under TSan a 20 s budget ended a job before its first partition
                         * was measured; jobs end sooner when their space runs out */
                        .budget_s = 5.0 * dh_scale(),
                        .priority = cl->idx % 3,
                        .gpu = -1};
    if ((rc = dh_submit(&c, &a, 20.0, &job, &cl->joined)) < 0)
        CLIENT_FAIL(cl, "submit: %d", rc);
    if (job.id == 0)
        CLIENT_FAIL(cl, "submit: job id 0");
    cl->job = job.id;
    if (cl->idx % 2 == 0) {
        if (follow_by_watch(cl, &c, &job) < 0)
            goto out;
    } else {
        rc = dh_wait_job(&c, cl->job, NULL, JOB_WAIT_S, 0.2, &job);
        if (rc < 0)
            CLIENT_FAIL(cl, "status: job %llu not final (%d, state %s)",
                        (unsigned long long)cl->job, rc, job.state);
    }
    snprintf(cl->state, sizeof(cl->state), "%s", job.state);
    cl->record = job.record;
    cl->gpu = job.gpu;
    if (strcmp(job.state, "done") != 0)
        CLIENT_FAIL(cl, "job %llu ended %s: %s", (unsigned long long)cl->job, job.state, job.error);
    if ((rc = dh_lookup(&c, cb->mp, cb->len, cb->shapes, cb->n_shapes, 20.0, &cl->found,
                        cl->family)) < 0)
        CLIENT_FAIL(cl, "lookup: %d", rc);
    /* a duplicate of a done job joins it */
    a.priority = 0;
    dh_job again;
    if ((rc = dh_submit(&c, &a, 20.0, &again, &cl->rejoined)) < 0)
        CLIENT_FAIL(cl, "submit again: %d", rc);
    cl->rejoin_job = again.id;
out:
    dh_close(&c);
    return NULL;
}

static void test_hundred_clients(void **state)
{
    (void)state;
    assert_int_equal(pthread_barrier_init(&start_line, NULL, N_CLIENTS + 1), 0);
    for (int i = 0; i < N_CLIENTS; i++) {
        clients[i].idx = i;
        clients[i].combo = (i * 7) % N_COMBOS;
        clients[i].gpu = -2;
        assert_int_equal(pthread_create(&clients[i].thread, NULL, client_main, &clients[i]), 0);
    }
    pthread_barrier_wait(&start_line);
    double t0 = dh_now();

    /* While they run: a fresh client's hello (connect included), every 0.25 s. */
    double worst = 0, sum = 0;
    int probes = 0, busy_probes = 0;
    for (;;) {
        dh_conn c;
        double p0 = dh_now();
        int rc = dh_connect(&c, daemon_.sock);
        if (rc == 0)
            rc = dh_hello(&c, 10.0, NULL);
        double dt = dh_now() - p0;
        if (rc < 0) {
            dh_dump_log(&daemon_, 4000);
            fail_msg("a fresh hello during the load failed (%d) after %.2f s", rc, dt);
        }
        /* is anything still running? */
        dh_req r;
        dh_req_begin(&r, &c, "stats", 0);
        const msgpack_object *rep;
        rc = dh_call(&c, &r, 10.0, &rep);
        assert_int_equal(rc, 0);
        assert_true(dh_ok(rep));
        int64_t active = dh_int(rep, "jobs.queued", 0) + dh_int(rep, "jobs.running", 0);
        dh_close(&c);
        probes++;
        sum += dt;
        if (dt > worst)
            worst = dt;
        if (active > 0)
            busy_probes++;
        if (active == 0 && dh_now() - t0 > 1.0)
            break;
        if (dh_now() - t0 > JOB_WAIT_S + 30)
            fail_msg("jobs still active after %.0f s", dh_now() - t0);
        usleep(250 * 1000);
    }
    for (int i = 0; i < N_CLIENTS; i++)
        pthread_join(clients[i].thread, NULL);
    double total = dh_now() - t0;
    pthread_barrier_destroy(&start_line);
    print_message("100 clients, %d distinct jobs on 2 fake GPUs: %.1f s; fresh hello during the "
                  "load: %d probes (%d with jobs active), mean %.1f ms, worst %.1f ms\n",
                  N_COMBOS, total, probes, busy_probes, 1e3 * sum / probes, 1e3 * worst);

    int failed = 0;
    for (int i = 0; i < N_CLIENTS; i++)
        if (clients[i].err[0]) {
            print_error("client %d (combo %d): %s\n", i, clients[i].combo, clients[i].err);
            failed++;
        }
    if (failed) {
        dh_dump_log(&daemon_, 3000);
        fail_msg("%d of %d clients failed", failed, N_CLIENTS);
    }

    /* one job per combo; exactly one submitter of each did not join */
    uint64_t job_of[N_COMBOS] = {0};
    int fresh[N_COMBOS] = {0}, events = 0;
    bool gpu_used[2] = {false, false};
    for (int i = 0; i < N_CLIENTS; i++) {
        client *cl = &clients[i];
        if (!job_of[cl->combo])
            job_of[cl->combo] = cl->job;
        if (cl->job != job_of[cl->combo])
            fail_msg("combo %d got jobs %llu and %llu", cl->combo,
                     (unsigned long long)job_of[cl->combo], (unsigned long long)cl->job);
        fresh[cl->combo] += !cl->joined;
        assert_string_equal(cl->state, "done");
        if (!cl->record)
            fail_msg("job %llu is done without a record (KTUNE_TEST_TIME_SCALE for slow builds)",
                     (unsigned long long)cl->job);
        if (!cl->found)
            fail_msg("client %d: lookup after done found nothing for job %llu", i,
                     (unsigned long long)cl->job);
        if (!cl->family[0])
            fail_msg("client %d: the record has no family", i);
        if (!cl->rejoined || cl->rejoin_job != cl->job)
            fail_msg("client %d: a duplicate of done job %llu did not join it (got %llu)", i,
                     (unsigned long long)cl->job, (unsigned long long)cl->rejoin_job);
        if (cl->gpu == 0 || cl->gpu == 1)
            gpu_used[cl->gpu] = true;
        else
            fail_msg("job %llu ran on GPU %d", (unsigned long long)cl->job, cl->gpu);
        events += cl->events;
    }
    for (int k = 0; k < N_COMBOS; k++) {
        if (fresh[k] != 1)
            fail_msg("combo %d: %d submissions made a new job, expected 1", k, fresh[k]);
        for (int j = 0; j < k; j++)
            if (job_of[j] == job_of[k])
                fail_msg("combos %d and %d share job %llu", j, k, (unsigned long long)job_of[k]);
    }
    assert_true(gpu_used[0] && gpu_used[1]);
    assert_true(events >= N_CLIENTS / 2); /* at least every end event */

    /* the daemon's own view: 6 jobs, all done, newest first; 2 GPUs */
    dh_conn c;
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    dh_req r;
    dh_req_begin(&r, &c, "jobs", 0);
    const msgpack_object *rep;
    assert_int_equal(dh_call(&c, &r, 10.0, &rep), 0);
    const msgpack_object *jobs = dh_get(rep, "jobs");
    assert_non_null(jobs);
    assert_int_equal(jobs->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(jobs->via.array.size, N_COMBOS);
    uint64_t prev = UINT64_MAX;
    for (uint32_t i = 0; i < jobs->via.array.size; i++) {
        dh_job j;
        assert_int_equal(dh_job_parse(&jobs->via.array.ptr[i], &j), 0);
        assert_string_equal(j.state, "done");
        assert_true(j.id < prev);
        assert_true(j.started >= j.submitted && j.finished >= j.started && j.submitted > 0);
        prev = j.id;
    }
    dh_req_begin(&r, &c, "stats", 0);
    assert_int_equal(dh_call(&c, &r, 10.0, &rep), 0);
    assert_int_equal(dh_int(rep, "jobs.done", -1), N_COMBOS);
    assert_int_equal(dh_int(rep, "gpus", -1), 2);
    assert_true(dh_int(rep, "requests", 0) >= 4 * N_CLIENTS);
    assert_true(dh_int(rep, "cache.records", 0) >= N_COMBOS);
    dh_req_begin(&r, &c, "gpus", 0);
    assert_int_equal(dh_call(&c, &r, 10.0, &rep), 0);
    const msgpack_object *gpus = dh_get(rep, "gpus");
    assert_non_null(gpus);
    assert_int_equal(gpus->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(gpus->via.array.size, 2);
    for (uint32_t i = 0; i < 2; i++) {
        assert_int_equal(dh_int(&gpus->via.array.ptr[i], "index", -1), (int64_t)i);
        assert_true(dh_is_str(&gpus->via.array.ptr[i], "state", "idle"));
    }
    dh_close(&c);
    if (worst > dh_scale())
        fail_msg("a fresh hello took %.2f s during the load (limit %.0f s)", worst, dh_scale());
    assert_true(dh_alive(&daemon_));
}

/* A client that pipelines lookups with source (kilobytes per reply) and never reads: ktuned must
 * keep serving others, and bound what it queues for that client (docs/protocol.md: 64 MiB of
 * unwritten replies closes the connection; a daemon that stops reading from it is fine too). */
static void test_client_that_never_reads(void **state)
{
    (void)state;
    combo *cb = &combos[0];
    dh_conn slow, probe;
    assert_int_equal(dh_connect(&slow, daemon_.sock), 0);
    assert_int_equal(dh_connect(&probe, daemon_.sock), 0);
    int64_t rss0 = dh_rss_bytes(daemon_.pid), peak = rss0;
    msgpack_sbuffer batch;
    msgpack_sbuffer_init(&batch);
    for (int i = 0; i < 500; i++) {
        dh_req r;
        dh_req_begin(&r, &slow, "lookup", 4);
        dh_req_raw(&r, "graph", cb->mp, cb->len);
        dh_req_key(&r, "shapes");
        dh_req_shapes(&r, cb->shapes, cb->n_shapes);
        dh_req_str(&r, "precision", "exact");
        dh_req_bool(&r, "source", true);
        msgpack_sbuffer_write(&batch, r.sb.data, r.sb.size);
        dh_req_free(&r);
    }
    /* up to 40 000 requests (several MiB of source each 1000): stop when the daemon closes the
     * connection or stops reading */
    int sent = 0, rc = 0;
    double worst = 0;
    while (sent < 40000) {
        rc = dh_send_for(&slow, batch.data, batch.size, 3.0);
        if (rc < 0)
            break;
        sent += 500;
        double t0 = dh_now();
        if (dh_hello(&probe, 5.0, NULL) < 0)
            fail_msg("hello on another connection failed while a client does not read");
        double dt = dh_now() - t0;
        worst = dt > worst ? dt : worst;
        int64_t r = dh_rss_bytes(daemon_.pid);
        peak = r > peak ? r : peak;
    }
    msgpack_sbuffer_destroy(&batch);
    /* has the daemon closed it? (POLLRDHUP without reading the replies) */
    struct pollfd pfd = {.fd = slow.fd, .events = POLLRDHUP};
    bool closed = rc == -EPIPE || rc == -ECONNRESET ||
                  (poll(&pfd, 1, 3000) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP)));
    int64_t r = dh_rss_bytes(daemon_.pid);
    peak = r > peak ? r : peak;
    print_message("a client that never reads: %d lookups sent, then %s; ktuned VmRSS %.1f -> peak "
                  "%.1f MiB; hello elsewhere at worst %.1f ms\n",
                  sent,
                  closed             ? "the daemon closed the connection"
                  : rc == -ETIMEDOUT ? "the daemon stopped reading (connection kept)"
                                     : "all were accepted",
                  (double)rss0 / 1048576.0, (double)peak / 1048576.0, 1e3 * worst);
    dh_close(&slow);
    if (!closed && rc != -ETIMEDOUT)
        fail_msg("40 000 lookups with source went unread and ktuned neither closed the connection "
                 "nor stopped reading");
    /* 64 MiB of replies plus allocator slack (sanitizer builds need more than twice that) */
    if ((double)(peak - rss0) > 256.0 * 1048576.0 * dh_scale())
        fail_msg("ktuned's VmRSS grew by %.0f MiB for a client that never reads",
                 (double)(peak - rss0) / 1048576.0);
    if (worst > dh_scale())
        fail_msg("hello took %.2f s while a client did not read", worst);
    assert_int_equal(dh_hello(&probe, 5.0, NULL), 0);
    dh_close(&probe);
    assert_true(dh_alive(&daemon_));
}

/* Last: SIGTERM with nothing running exits 0 (under a sanitizer build: no leak report). */
static void test_clean_exit(void **state)
{
    (void)state;
    int st = -1;
    if (dh_stop(&daemon_, SIGTERM, 10.0, &st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        dh_dump_log(&daemon_, 4000);
        fail_msg("ktuned did not exit 0 on SIGTERM after the load (wait status 0x%x)", st);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hundred_clients),
        cmocka_unit_test(test_client_that_never_reads),
        cmocka_unit_test(test_clean_exit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
