/* ktuned's job life cycle under drills, with the fake worker (one or two GPUs) and its eval log
 * (FAKE_LOG_DETAIL: one line per evaluation naming the candidate, its group and the job's
 * shapes):
 *   - SIGKILL in the middle of a batch on two GPUs, restart on the same cache: every job
 *     completes, and no candidate is evaluated twice for one job except the one in flight at
 *     the kill (at most one per GPU);
 *   - SIGTERM with a running job: exit status 0 within 10 s; after a restart the job is queued
 *     again, resumes from its trial log and completes;
 *   - cancel (queued: at once; running: after its candidate in flight), priorities (a
 *     high-priority job submitted last runs before earlier ones), joining raises the priority,
 *     watch events, and a resubmitted cancelled job re-measures nothing. */
#include "daemon_harness.h"

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

#define N_BATCH 8
#define N_COLS  256

static dh_daemon daemon_;
static void *graph_mp;
static size_t graph_len;

static int setup(void **state)
{
    (void)state;
    return dh_example_graph("gelu_tanh_chain", &graph_mp, &graph_len);
}

static int teardown(void **state)
{
    (void)state;
    free(graph_mp);
    return 0;
}

static int start_fresh(void **state, const char *tag, const char *gpus, int delay_ms)
{
    (void)state;
    if (dh_init(&daemon_, tag) < 0)
        return -1;
    dh_opts o = {.gpus = gpus, .delay_ms = delay_ms, .log_evals = true};
    return dh_start(&daemon_, &o, 30.0);
}

/* Ends each test with a SIGTERM that must exit 0 (under a sanitizer build: no leak report). */
static int stop_test(void **state)
{
    (void)state;
    int rc = 0, st = 0;
    if (daemon_.pid > 0 &&
        (dh_stop(&daemon_, SIGTERM, 10.0, &st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)) {
        dh_dump_log(&daemon_, 4000);
        fprintf(stderr, "ktuned did not exit 0 on SIGTERM at the end of the test (0x%x)\n", st);
        rc = -1;
    }
    dh_cleanup(&daemon_);
    return rc;
}

static int setup_kill(void **state)
{
    return start_fresh(state, "kill", "0,1", 40);
}
static int setup_term(void **state)
{
    return start_fresh(state, "term", "0", 40);
}
static int setup_cancel(void **state)
{
    return start_fresh(state, "cancel", "0", 100);
}

static void connect_or_fail(dh_conn *c)
{
    int rc = dh_connect(c, daemon_.sock);
    if (rc < 0)
        fail_msg("connect %s: %d", daemon_.sock, rc);
}

/* gelu_tanh_chain at M x N_COLS: jobs differ in M, so the eval log tells them apart. */
static dh_job submit_m(dh_conn *c, int64_t m, double budget_s, int priority, bool *joined)
{
    dh_shape s[2] = {{"M", m}, {"N", N_COLS}};
    budget_s *= dh_scale();
    dh_submit_args a = {.graph = graph_mp,
                        .graph_len = graph_len,
                        .shapes = s,
                        .n_shapes = 2,
                        .budget_s = budget_s,
                        .priority = priority,
                        .gpu = -1};
    dh_job j;
    bool jn = false;
    int rc = dh_submit(c, &a, 10.0, &j, &jn);
    if (rc < 0) {
        dh_dump_log(&daemon_, 3000);
        fail_msg("submit M=%lld: %d", (long long)m, rc);
    }
    if (joined)
        *joined = jn;
    return j;
}

static dh_job status_or_fail(dh_conn *c, uint64_t id)
{
    dh_job j;
    int rc = dh_status(c, id, 10.0, &j);
    if (rc < 0)
        fail_msg("status %llu: %d", (unsigned long long)id, rc);
    return j;
}

static dh_job wait_final(dh_conn *c, uint64_t id, double timeout_s)
{
    dh_job j;
    int rc = dh_wait_job(c, id, NULL, timeout_s * dh_scale(), 0.1, &j);
    if (rc < 0) {
        dh_dump_log(&daemon_, 3000);
        fail_msg("job %llu did not finish within %.0f s (%d, last state %s)",
                 (unsigned long long)id, timeout_s, rc, j.state);
    }
    return j;
}

/* True when the eval's bindings hold M=m. */
static bool eval_is_m(const dh_eval *e, int64_t m)
{
    char want[32], buf[128];
    snprintf(want, sizeof(want), "M=%lld", (long long)m);
    snprintf(buf, sizeof(buf), "%s", e->bindings);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (strcmp(t, want) == 0)
            return true;
    return false;
}

static size_t count_m(int64_t m, size_t *first)
{
    dh_eval *ev = NULL;
    size_t n = 0, count = 0;
    assert_int_equal(dh_read_evals(daemon_.fake_log, &ev, &n), 0);
    if (first)
        *first = SIZE_MAX;
    for (size_t i = 0; i < n; i++)
        if (eval_is_m(&ev[i], m)) {
            if (first && *first == SIZE_MAX)
                *first = i;
            count++;
        }
    free(ev);
    return count;
}

/* Evals of job M=m among the first `upto` lines of the fake worker's log. */
static size_t count_m_before(int64_t m, size_t upto)
{
    dh_eval *ev = NULL;
    size_t n = 0, count = 0;
    assert_int_equal(dh_read_evals(daemon_.fake_log, &ev, &n), 0);
    for (size_t i = 0; i < n && i < upto; i++)
        count += eval_is_m(&ev[i], m);
    free(ev);
    return count;
}

static size_t count_lines(void)
{
    dh_eval *ev = NULL;
    size_t n = 0;
    assert_int_equal(dh_read_evals(daemon_.fake_log, &ev, &n), 0);
    free(ev);
    return n;
}

/* Waits until the fake worker has received at least n evals of job M=m. */
static void wait_evals(int64_t m, size_t n, double timeout_s)
{
    double t_end = dh_now() + timeout_s * dh_scale();
    while (count_m(m, NULL) < n) {
        if (dh_now() > t_end) {
            dh_dump_log(&daemon_, 3000);
            fail_msg("the job M=%lld did not reach %zu evals within %.0f s", (long long)m, n,
                     timeout_s);
        }
        usleep(20 * 1000);
    }
}

/* Duplicate evaluations (same candidate, same group, same job) in the eval log. Each must be the
 * candidate in flight at the stop: of a job with inflight[k] set (running at the stop), first
 * seen before line `cut` and again after it, and at most one per job. Every line must belong to
 * one of the n_jobs jobs ms. Returns how many there are. */
static int check_duplicates(const int64_t *ms, int n_jobs, size_t cut, const bool *inflight)
{
    dh_eval *ev = NULL;
    size_t n = 0;
    assert_int_equal(dh_read_evals(daemon_.fake_log, &ev, &n), 0);
    int *job = calloc(n ? n : 1, sizeof(int));
    assert_non_null(job);
    for (size_t i = 0; i < n; i++) {
        job[i] = -1;
        for (int k = 0; k < n_jobs; k++)
            if (eval_is_m(&ev[i], ms[k]))
                job[i] = k;
        if (job[i] < 0)
            fail_msg("eval log line %zu (%s, %s) belongs to no job", i + 1, ev[i].key,
                     ev[i].bindings);
    }
    int dups = 0, *per_job = calloc((size_t)n_jobs, sizeof(int));
    assert_non_null(per_job);
    for (size_t i = 0; i < n; i++)
        for (size_t k = i + 1; k < n; k++) {
            /* a finalist loaded again to be re-timed is not measured again */
            if (ev[i].load || ev[k].load || job[i] != job[k] || strcmp(ev[i].key, ev[k].key) != 0 ||
                strcmp(ev[i].sub, ev[k].sub) != 0)
                continue;
            dups++;
            per_job[job[i]]++;
            print_message("evaluated twice: %s (group %s) of job M=%lld, log lines %zu and %zu "
                          "(workers %ld, %ld), the stop after line %zu\n",
                          ev[i].key, ev[i].sub, (long long)ms[job[i]], i + 1, k + 1, ev[i].pid,
                          ev[k].pid, cut);
            if (!inflight || !inflight[job[i]] || i >= cut || k < cut || per_job[job[i]] > 1)
                fail_msg("a candidate of job M=%lld was evaluated twice, and not as the one in "
                         "flight at the stop",
                         (long long)ms[job[i]]);
        }
    free(per_job);
    free(job);
    free(ev);
    return dups;
}

/* ---- SIGKILL in the middle of a batch ---- */

static void test_sigkill_mid_batch(void **state)
{
    (void)state;
    /* count_m below reads the log of both workers: lines are written whole (one write each) */
    dh_conn c;
    connect_or_fail(&c);
    int64_t ms[N_BATCH];
    uint64_t ids[N_BATCH];
    for (int i = 0; i < N_BATCH; i++) {
        ms[i] = 64 * (i + 1);
        dh_job j = submit_m(&c, ms[i], 2.0, 0, NULL);
        ids[i] = j.id;
        if (i > 0 && ids[i] <= ids[i - 1])
            fail_msg("job ids are not increasing: %llu after %llu", (unsigned long long)ids[i],
                     (unsigned long long)ids[i - 1]);
    }
    /* two GPUs: jobs 1 and 2 start together; kill while job 2 runs, a few candidates in */
    wait_evals(ms[1], 3, 120.0);
    assert_string_equal(status_or_fail(&c, ids[1]).state, "running");
    dh_close(&c);
    int st = 0;
    assert_int_equal(dh_stop(&daemon_, SIGKILL, 5.0, &st), 0);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    usleep(100 * 1000); /* the killed worker writes nothing more */
    size_t cut = count_lines();

    dh_opts o = daemon_.opts;
    if (dh_start(&daemon_, &o, 30.0) < 0)
        fail_msg("ktuned did not restart on the cache of a SIGKILLed one");
    /* Every job not done was queued or running at the kill and is queued (or running) again;
     * those with evals before the kill were the running ones: at most one per GPU. */
    connect_or_fail(&c);
    bool was_running[N_BATCH];
    int n_running = 0;
    for (int i = 0; i < N_BATCH; i++) {
        dh_job j = status_or_fail(&c, ids[i]);
        bool done = strcmp(j.state, "done") == 0;
        if (!done && strcmp(j.state, "queued") != 0 && strcmp(j.state, "running") != 0)
            fail_msg("after the restart job %llu is %s, expected done, queued or running",
                     (unsigned long long)ids[i], j.state);
        was_running[i] = !done && count_m(ms[i], NULL) > 0;
        n_running += was_running[i];
    }
    assert_true(was_running[1]);
    if (n_running > 2)
        fail_msg("%d jobs had started and not finished at the kill, with 2 GPUs", n_running);
    double t0 = dh_now();
    int resumed = 0;
    for (int i = 0; i < N_BATCH; i++) {
        dh_job j = wait_final(&c, ids[i], 180.0 - (dh_now() - t0) / dh_scale());
        if (strcmp(j.state, "done") != 0 || !j.record)
            fail_msg("job %llu ended %s (record %d): %s", (unsigned long long)ids[i], j.state,
                     j.record, j.error);
        /* Only a job with an evaluation besides the one in flight at the kill (never logged)
         * has something to resume (under TSan on a loaded machine a job can be killed during
         * its first evaluation). */
        size_t before = count_m_before(ms[i], cut);
        if (was_running[i] && before > 1 && j.resumed <= 0)
            fail_msg("job %llu, killed while running after %zu evaluations, resumed nothing "
                     "from its trial log",
                     (unsigned long long)ids[i], before);
        if (i == 1)
            resumed = j.resumed;
    }
    dh_close(&c);
    int dups = check_duplicates(ms, N_BATCH, cut, was_running);
    assert_true(dups <= n_running); /* at most one candidate in flight per GPU */
    for (int i = 0; i < N_BATCH; i++)
        assert_true(count_m(ms[i], NULL) > 0);
    print_message("SIGKILL mid-batch on 2 GPUs: %zu evals before the kill, %zu in all, %d jobs "
                  "running at the kill, %d candidates evaluated again; job 2 resumed %d trials\n",
                  cut, count_lines(), n_running, dups, resumed);
}

/* ---- SIGTERM with a running job ---- */

static void test_sigterm_running_job(void **state)
{
    (void)state;
    dh_conn c;
    connect_or_fail(&c);
    int64_t m = 320;
    dh_job j = submit_m(&c, m, 3.0, 0, NULL);
    wait_evals(m, 3, 120.0);
    assert_string_equal(status_or_fail(&c, j.id).state, "running");
    dh_close(&c);
    double t0 = dh_now();
    int st = -1;
    int rc = dh_stop(&daemon_, SIGTERM, 10.0, &st);
    double dt = dh_now() - t0;
    if (rc < 0) {
        dh_dump_log(&daemon_, 3000);
        fail_msg("ktuned did not exit within 10 s of SIGTERM");
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        dh_dump_log(&daemon_, 3000);
        fail_msg("ktuned exited with wait status 0x%x after SIGTERM, expected exit 0", st);
    }
    usleep(100 * 1000);
    size_t cut = count_lines();
    dh_opts o = daemon_.opts;
    if (dh_start(&daemon_, &o, 30.0) < 0)
        fail_msg("ktuned did not restart after SIGTERM");
    connect_or_fail(&c);
    dh_job after = status_or_fail(&c, j.id);
    if (strcmp(after.state, "queued") != 0 && strcmp(after.state, "running") != 0)
        fail_msg("after SIGTERM and a restart the running job is %s (%s), expected queued again",
                 after.state, after.error);
    dh_job fin = wait_final(&c, j.id, 120.0);
    if (strcmp(fin.state, "done") != 0 || !fin.record)
        fail_msg("the job ended %s (record %d): %s", fin.state, fin.record, fin.error);
    if (fin.resumed <= 0)
        fail_msg("the job resumed nothing from its trial log after the restart");
    dh_close(&c);
    bool running[1] = {true};
    int dups = check_duplicates(&m, 1, cut, running);
    assert_true(dups <= 1);
    print_message("SIGTERM: exit 0 after %.2f s; %zu evals before, the job resumed %d trials, %d "
                  "evaluated again\n",
                  dt, cut, fin.resumed, dups);
}

/* ---- cancel, priorities, joins, watch ---- */

typedef struct watcher {
    pthread_t thread;
    dh_conn conn;
    uint64_t job;
    int n;
    double at[512];
    char state[512][16];
    int measured[512];
    bool end;
    char first_state[16];
    char err[300];
} watcher;

static void *watch_main(void *arg)
{
    watcher *w = arg;
    dh_req r;
    dh_req_begin(&r, &w->conn, "watch", 1);
    dh_req_int(&r, "job", (int64_t)w->job);
    uint64_t wid = r.id;
    const msgpack_object *rep;
    int rc = dh_call(&w->conn, &r, 10.0, &rep);
    if (rc < 0 || !dh_ok(rep)) {
        snprintf(w->err, sizeof(w->err), "watch: no ok reply (%d)", rc);
        return NULL;
    }
    dh_job j;
    if (dh_job_parse(dh_get(rep, "job"), &j) < 0 || j.id != w->job) {
        snprintf(w->err, sizeof(w->err), "watch: the reply holds no Job");
        return NULL;
    }
    snprintf(w->first_state, sizeof(w->first_state), "%s", j.state);
    while (!w->end && w->n < 512) {
        rc = dh_recv(&w->conn, 120.0, &rep);
        if (rc < 0) {
            snprintf(w->err, sizeof(w->err), "watch: no end event (%d)", rc);
            return NULL;
        }
        if ((uint64_t)dh_int(rep, "id", 0) != wid || dh_job_parse(dh_get(rep, "job"), &j) < 0 ||
            j.id != w->job) {
            snprintf(w->err, sizeof(w->err), "watch: an event without the id or the Job");
            return NULL;
        }
        w->at[w->n] = dh_now();
        snprintf(w->state[w->n], sizeof(w->state[0]), "%s", j.state);
        w->measured[w->n] = j.measured;
        w->n++;
        if (dh_is_str(rep, "event", "end"))
            w->end = true;
        else if (!dh_is_str(rep, "event", "progress")) {
            snprintf(w->err, sizeof(w->err), "watch: an event that is neither progress nor end");
            return NULL;
        }
    }
    return NULL;
}

static size_t jobs_in_state(dh_conn *c, const char *state, uint64_t *ids, size_t max)
{
    dh_req r;
    dh_req_begin(&r, c, "jobs", 1);
    dh_req_key(&r, "state");
    msgpack_pack_array(&r.pk, 1);
    msgpack_pack_str_with_body(&r.pk, state, strlen(state));
    const msgpack_object *rep;
    assert_int_equal(dh_call(c, &r, 10.0, &rep), 0);
    assert_true(dh_ok(rep));
    const msgpack_object *jobs = dh_get(rep, "jobs");
    assert_non_null(jobs);
    assert_int_equal(jobs->type, MSGPACK_OBJECT_ARRAY);
    size_t n = jobs->via.array.size;
    for (size_t i = 0; i < n && i < max; i++) {
        dh_job j;
        assert_int_equal(dh_job_parse(&jobs->via.array.ptr[i], &j), 0);
        assert_string_equal(j.state, state);
        ids[i] = j.id;
    }
    return n;
}

static void test_cancel_and_priorities(void **state)
{
    (void)state;
    dh_conn c;
    connect_or_fail(&c);
    const int64_t ma = 64, mb = 128, mc = 192, md = 256;
    /* A runs a long search */
    dh_job a = submit_m(&c, ma, 60.0, 0, NULL);
    wait_evals(ma, 2, 120.0);
    assert_string_equal(status_or_fail(&c, a.id).state, "running");
    /* B and C (priority 0), then D (priority 50) wait behind it */
    dh_job b = submit_m(&c, mb, 2.0, 0, NULL);
    dh_job cj = submit_m(&c, mc, 2.0, 0, NULL);
    dh_job d = submit_m(&c, md, 2.0, 50, NULL);
    assert_string_equal(b.state, "queued");
    assert_string_equal(cj.state, "queued");
    assert_string_equal(d.state, "queued");
    assert_int_equal(d.priority, 50);
    assert_int_equal(b.gpu, -1);

    watcher *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    connect_or_fail(&w->conn);
    w->job = b.id;
    assert_int_equal(pthread_create(&w->thread, NULL, watch_main, w), 0);

    /* a duplicate of queued B with priority 10 joins it and raises its priority */
    bool joined = false;
    dh_job b2 = submit_m(&c, mb, 2.0, 10, &joined);
    assert_true(joined);
    assert_int_equal(b2.id, b.id);
    assert_int_equal(b2.priority, 10);
    assert_int_equal(status_or_fail(&c, b.id).priority, 10);

    /* cancelling queued C takes effect at once */
    dh_job x;
    char code[16];
    assert_int_equal(dh_cancel(&c, cj.id, 10.0, &x, code), 0);
    if (code[0])
        fail_msg("cancel of queued job %llu: %s", (unsigned long long)cj.id, code);
    assert_string_equal(x.state, "cancelled");
    x = status_or_fail(&c, cj.id);
    assert_string_equal(x.state, "cancelled");
    assert_true(x.finished > 0);

    /* cancelling running A: cancelled after the candidate in flight, nothing evaluated after */
    size_t n0 = count_m(ma, NULL);
    double t0 = dh_now();
    assert_int_equal(dh_cancel(&c, a.id, 10.0, &x, code), 0);
    if (code[0])
        fail_msg("cancel of running job %llu: %s", (unsigned long long)a.id, code);
    if (strcmp(x.state, "running") != 0 && strcmp(x.state, "cancelled") != 0)
        fail_msg("cancel of a running job answered state %s", x.state);
    x = wait_final(&c, a.id, 10.0);
    double dt = dh_now() - t0;
    assert_string_equal(x.state, "cancelled");
    if (!x.error[0])
        fail_msg("cancelled job %llu says nothing in error", (unsigned long long)a.id);
    size_t n1 = count_m(ma, NULL);
    if (n1 > n0 + 1)
        fail_msg("job A got %zu more evals after its cancel (at most the one in flight)", n1 - n0);
    if (dt > 5.0 * dh_scale())
        fail_msg("the running job took %.2f s to be cancelled", dt);
    /* A cancelled job stays cancelled and cancelling it again is EINVAL */
    assert_int_equal(dh_cancel(&c, a.id, 10.0, &x, code), 0);
    assert_string_equal(code, "EINVAL");

    /* D (priority 50, submitted last) runs before B (priority 10) */
    dh_job dfin = wait_final(&c, d.id, 120.0);
    dh_job bfin = wait_final(&c, b.id, 120.0);
    assert_string_equal(dfin.state, "done");
    assert_string_equal(bfin.state, "done");
    assert_true(dfin.record && bfin.record);
    size_t first_b, first_d;
    assert_true(count_m(mb, &first_b) > 0);
    assert_true(count_m(md, &first_d) > 0);
    assert_int_equal(count_m(mc, NULL), 0);
    if (first_d > first_b)
        fail_msg("B (priority 10) was evaluated before D (priority 50): log lines %zu and %zu",
                 first_b + 1, first_d + 1);
    assert_true(dfin.started <= bfin.started);
    /* cancelling a finished job is EINVAL; an unknown one ENOENT */
    assert_int_equal(dh_cancel(&c, d.id, 10.0, &x, code), 0);
    assert_string_equal(code, "EINVAL");
    assert_int_equal(dh_cancel(&c, 424242, 10.0, &x, code), 0);
    assert_string_equal(code, "ENOENT");

    /* the watch of B: queued at first, progress while it ran, at most one per 0.25 s (0.15 s
     * allowed for delivery jitter), measured never going back, then one end event, done */
    pthread_join(w->thread, NULL);
    dh_close(&w->conn);
    if (w->err[0])
        fail_msg("%s", w->err);
    assert_true(w->end);
    assert_string_equal(w->first_state, "queued");
    assert_string_equal(w->state[w->n - 1], "done");
    int running = 0;
    for (int i = 0; i + 1 < w->n; i++) {
        running += strcmp(w->state[i], "running") == 0;
        if (i > 0 && w->at[i] - w->at[i - 1] < 0.15)
            fail_msg("watch: progress events %d and %d came %.3f s apart", i - 1, i,
                     w->at[i] - w->at[i - 1]);
        if (i > 0 && w->measured[i] < w->measured[i - 1])
            fail_msg("watch: measured went from %d to %d", w->measured[i - 1], w->measured[i]);
    }
    if (running == 0)
        fail_msg("watch: no progress event while B was running (%d events)", w->n);
    int n_events = w->n;
    free(w);

    /* jobs by state */
    uint64_t ids[8];
    size_t n = jobs_in_state(&c, "cancelled", ids, 8);
    assert_int_equal(n, 2);
    assert_true(ids[0] == cj.id && ids[1] == a.id); /* newest first */

    /* a duplicate of cancelled A is a new job, and it re-measures nothing A measured */
    dh_job a2 = submit_m(&c, ma, 2.0, 0, &joined);
    assert_false(joined);
    assert_true(a2.id != a.id);
    x = wait_final(&c, a2.id, 120.0);
    assert_string_equal(x.state, "done");
    if (x.resumed <= 0)
        fail_msg("the resubmitted job resumed nothing from the cancelled one's trial log");
    int64_t all[4] = {ma, mb, mc, md};
    assert_int_equal(check_duplicates(all, 4, SIZE_MAX, NULL), 0);
    dh_close(&c);
    print_message("cancel of a running job took %.2f s (%zu evals after); watch of B: %d events; "
                  "resubmitted A resumed %d trials\n",
                  dt, n1 - n0, n_events, x.resumed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sigkill_mid_batch, setup_kill, stop_test),
        cmocka_unit_test_setup_teardown(test_sigterm_running_job, setup_term, stop_test),
        cmocka_unit_test_setup_teardown(test_cancel_and_priorities, setup_cancel, stop_test),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
