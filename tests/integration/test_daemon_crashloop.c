/* Drill (issue 7): SIGKILL of ktuned during cache writes, 20 times in a row, each time restarted
 * on the same cache, with a batch of jobs on the fake worker (FAKE_DELAY_MS per evaluation, one
 * GPU, the eval log of tests/fake_worker). The kills land at varied points of the cycle
 * "evaluate, reply, append the trial": while the candidate is in flight, just after its reply
 * (the trial write), a few milliseconds later, right after a restart (journal load and requeue),
 * and right after a job finished (its records and final journal entry). At the end:
 *   - every job is done with a record;
 *   - no candidate was evaluated twice for one job, except the one in flight at a kill: every
 *     occurrence of a (job, candidate, group) but the last is the last evaluation before a kill;
 *   - every stored value (records, trials, journal) passes its checksum and decodes, cache_list
 *     serves every record and skips none, and LMDB opens read-write without error;
 *   - every evaluated candidate is in the trial log. */
#include "daemon_harness.h"
#include "drill_util.h"

#include "cache/cache.h"

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

#define N_JOBS   4
#define N_KILLS  20
#define DELAY_MS 20

static dh_daemon daemon_;
static void *graph_mp;
static size_t graph_len;

static int setup(void **state)
{
    (void)state;
    if (dh_example_graph("gelu_tanh_chain", &graph_mp, &graph_len) < 0)
        return -1;
    if (dh_init(&daemon_, "crashloop") < 0)
        return -1;
    dh_opts o = {.gpus = "0", .delay_ms = DELAY_MS, .log_evals = true, .compile_jobs = 2};
    return dh_start(&daemon_, &o, 30.0);
}

static int teardown(void **state)
{
    (void)state;
    dh_cleanup(&daemon_);
    free(graph_mp);
    return 0;
}

static void sleep_ms(double ms)
{
    if (ms > 0)
        usleep((useconds_t)(ms * 1000));
}

static size_t count_lines(void)
{
    dh_eval *ev = NULL;
    size_t n = 0;
    assert_int_equal(dh_read_evals(daemon_.fake_log, &ev, &n), 0);
    free(ev);
    return n;
}

/* Waits (polling every 2 ms) until the eval log has more than n lines; false on timeout. */
static bool wait_lines(size_t n, double timeout_s)
{
    double t_end = dh_now() + timeout_s * dh_scale();
    while (count_lines() <= n) {
        if (dh_now() > t_end)
            return false;
        usleep(2000);
    }
    return true;
}

static int jobs_done(dh_conn *c, const uint64_t *ids)
{
    int n = 0;
    for (int i = 0; i < N_JOBS; i++) {
        dh_job j;
        if (dh_status(c, ids[i], 10.0, &j) == 0 && strcmp(j.state, "done") == 0)
            n++;
    }
    return n;
}

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

static const char *mode_name[] = {"in flight",       "after the reply",       "reply + 4 ms",
                                  "after a restart", "after a job's records", "random point"};

static void test_crashloop(void **state)
{
    (void)state;
    dh_conn c;
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    int64_t ms[N_JOBS];
    uint64_t ids[N_JOBS];
    for (int i = 0; i < N_JOBS; i++) {
        ms[i] = 64 * (i + 1);
        dh_shape s[2] = {{"M", ms[i]}, {"N", 256}};
        /* a budget the search never reaches: jobs end when they converge (~60 candidates) */
        dh_submit_args a = {.graph = graph_mp,
                            .graph_len = graph_len,
                            .shapes = s,
                            .n_shapes = 2,
                            .budget_s = 120,
                            .gpu = -1};
        dh_job j;
        if (dh_submit(&c, &a, 10.0, &j, NULL) < 0)
            fail_msg("submit M=%lld failed", (long long)ms[i]);
        ids[i] = j.id;
    }
    dh_close(&c);

    size_t cuts[N_KILLS];
    int by_mode[6] = {0}, with_running = 0;
    unsigned seed = 12345;
    double t0 = dh_now();
    for (int k = 0; k < N_KILLS; k++) {
        int mode = k % 6;
        size_t base = count_lines();
        assert_int_equal(dh_connect(&c, daemon_.sock), 0);
        int done0 = jobs_done(&c, ids);
        bool running = done0 < N_JOBS;
        switch (mode) {
        case 0: /* the worker holds the candidate (it sleeps DELAY_MS after logging it) */
            running = wait_lines(base + (size_t)(k % 3), 20.0);
            break;
        case 1: /* its reply has just come back: the trial append is under way */
            running = wait_lines(base + (size_t)(k % 3), 20.0);
            sleep_ms(DELAY_MS + 1);
            break;
        case 2:
            running = wait_lines(base + (size_t)(k % 3), 20.0);
            sleep_ms(DELAY_MS + 4);
            break;
        case 3: /* right after the restart: journal load, requeue, the job's start entry */
            sleep_ms((double)(k % 4) * 15);
            break;
        case 4: /* right after a job's end: its records and final journal entry */
            while (running && jobs_done(&c, ids) == done0 && dh_now() - t0 < 100 * dh_scale())
                usleep(2000);
            break;
        default:
            running = wait_lines(base, 20.0);
            seed = seed * 1103515245u + 12345u;
            sleep_ms((double)((seed >> 16) % (DELAY_MS + 5)));
            break;
        }
        dh_close(&c);
        int st = 0;
        assert_int_equal(dh_stop(&daemon_, SIGKILL, 5.0, &st), 0);
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        usleep(30 * 1000); /* the killed worker writes nothing more */
        cuts[k] = count_lines();
        by_mode[mode]++;
        with_running += running;
        print_message("kill %2d (%s): %zu evals so far, %d jobs done before\n", k + 1,
                      mode_name[mode], cuts[k], done0);
        dh_opts o = daemon_.opts;
        if (dh_start(&daemon_, &o, 30.0) < 0)
            fail_msg("ktuned did not restart after kill %d", k + 1);
    }

    /* every job completes */
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    for (int i = 0; i < N_JOBS; i++) {
        dh_job j;
        if (dh_wait_job(&c, ids[i], NULL, 120.0 * dh_scale(), 0.05, &j) < 0) {
            dh_dump_log(&daemon_, 3000);
            fail_msg("job %llu did not finish after the kills (%s)", (unsigned long long)ids[i],
                     j.state);
        }
        if (strcmp(j.state, "done") != 0 || !j.record)
            fail_msg("job %llu ended %s (record %d): %s", (unsigned long long)ids[i], j.state,
                     j.record, j.error);
    }
    dh_close(&c);
    double total_s = dh_now() - t0;
    int st = 0;
    if (dh_stop(&daemon_, SIGTERM, 10.0, &st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("ktuned did not exit 0 on SIGTERM after the drill (0x%x)", st);

    /* duplicates: each earlier occurrence is the last evaluation before some kill */
    dh_eval *ev = NULL;
    size_t n = 0;
    assert_int_equal(dh_read_evals(daemon_.fake_log, &ev, &n), 0);
    int *job = calloc(n + 1, sizeof(int));
    bool *counted = calloc(n + 1, sizeof(bool));
    assert_non_null(job);
    assert_non_null(counted);
    for (size_t i = 0; i < n; i++) {
        job[i] = -1;
        for (int q = 0; q < N_JOBS; q++)
            if (eval_is_m(&ev[i], ms[q]))
                job[i] = q;
        if (job[i] < 0)
            fail_msg("eval log line %zu (%s) belongs to no job", i + 1, ev[i].bindings);
    }
    int dups = 0;
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++) {
        /* a finalist loaded again to be re-timed is not measured again */
        if (counted[i] || ev[i].load)
            continue;
        distinct++;
        size_t prev = i;
        for (size_t k2 = i + 1; k2 < n; k2++) {
            if (ev[k2].load || job[k2] != job[i] || strcmp(ev[k2].key, ev[i].key) != 0 ||
                strcmp(ev[k2].sub, ev[i].sub) != 0)
                continue;
            counted[k2] = true;
            dups++;
            bool in_flight = false;
            for (int q = 0; q < N_KILLS; q++)
                in_flight |= cuts[q] == prev + 1;
            if (!in_flight)
                fail_msg("%s (group %s) of job M=%lld evaluated again at log line %zu after line "
                         "%zu, which was not the evaluation in flight at a kill",
                         ev[i].key, ev[i].sub, (long long)ms[job[i]], k2 + 1, prev + 1);
            prev = k2;
        }
    }
    free(job);
    free(counted);
    free(ev);
    if (dups > N_KILLS)
        fail_msg("%d candidates evaluated again for %d kills", dups, N_KILLS);

    /* every stored value sound, LMDB opens read-write, every evaluated candidate logged */
    drill_cache_report r;
    assert_int_equal(drill_cache_check(daemon_.cache, &r), 0);
    char desc[400];
    drill_cache_describe(&r, desc, sizeof(desc));
    print_message("cache after the drill: %s\n", desc);
    assert_int_equal(r.records_bad, 0);
    assert_int_equal(r.trials_bad, 0);
    assert_int_equal(r.jobs_bad, 0);
    assert_int_equal(r.listed_corrupt, 0);
    assert_int_equal(r.listed, r.records);
    assert_true(r.records >= N_JOBS);
    assert_int_equal(r.jobs_by_state[CACHE_JOB_DONE], N_JOBS);
    if (r.trials < distinct)
        fail_msg("%zu distinct candidates evaluated, only %zu trials logged", distinct, r.trials);
    print_message("crashloop: %d SIGKILLs (%d in flight, %d after a reply, %d reply+4ms, %d after "
                  "a restart, %d after a job's end, %d random; %d with jobs left), %zu evals, "
                  "%zu distinct, %d evaluated again, %.1f s in all\n",
                  N_KILLS, by_mode[0], by_mode[1], by_mode[2], by_mode[3], by_mode[4], by_mode[5],
                  with_running, n, distinct, dups, total_s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crashloop),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
