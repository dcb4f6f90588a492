/* Drill (issue 16, item 12): a job's budget holds across crashes. One job whose search would
 * run far longer than its budget (the fake worker takes DELAY_MS per evaluation), and ktuned
 * SIGKILLed N_KILLS times while it runs, each KILL_EVERY_S after the restart: sooner than the
 * journal's save period, so before the fix the journal never saw the job's progress and every
 * restart started its budget again. Each attempt is one worker process, so the fake worker's
 * eval log (pid, CLOCK_REALTIME ms per evaluation) tells how long each attempt evaluated. At the
 * end:
 *   - the job is done (the budget stopped it, not convergence);
 *   - its elapsed_s covers the evaluations of every attempt (the span of each worker's evals,
 *     from the first start to the last, the one in flight at a kill): the time logged before
 *     each crash was counted;
 *   - the evaluations of all attempts together took at most the budget plus a margin
 *     (MARGIN_S, and MARGIN_PER_KILL_S per kill for the evaluation in flight and the restart):
 *     the restarts did not buy the job more time. */
#include "daemon_harness.h"

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

#define DELAY_MS          100
#define BUDGET_S          10.0
#define N_KILLS           7
#define KILL_EVERY_S      0.8 /* < KD_SAVE_PERIOD_S (daemon/kd.h) */
#define MARGIN_S          1.5
#define MARGIN_PER_KILL_S 0.15

static dh_daemon daemon_;
static void *graph_mp;
static size_t graph_len;

static int setup(void **state)
{
    (void)state;
    if (dh_example_graph("gelu_tanh_chain", &graph_mp, &graph_len) < 0)
        return -1;
    if (dh_init(&daemon_, "crashbudget") < 0)
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

static size_t count_evals(void)
{
    dh_eval *ev = NULL;
    size_t n = 0;
    assert_int_equal(dh_read_evals(daemon_.fake_log, &ev, &n), 0);
    free(ev);
    return n;
}

/* The evaluations of one attempt (one worker pid): first and last start, count. */
typedef struct attempt {
    long pid;
    int64_t first_ms, last_ms;
    int n;
} attempt;

static void test_crash_budget(void **state)
{
    (void)state;
    double scale = dh_scale();
    dh_conn c;
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    dh_shape s[2] = {{"M", 512}, {"N", 256}};
    dh_submit_args a = {.graph = graph_mp,
                        .graph_len = graph_len,
                        .shapes = s,
                        .n_shapes = 2,
                        .budget_s = BUDGET_S * scale,
                        .gpu = -1};
    dh_job j;
    assert_int_equal(dh_submit(&c, &a, 10.0, &j, NULL), 0);
    uint64_t id = j.id;
    dh_close(&c);

    double t0 = dh_now(), started = t0;
    size_t base = 0;
    for (int k = 0; k < N_KILLS; k++) {
        /* KILL_EVERY_S after the (re)start, once the attempt has evaluated something */
        double t_end = dh_now() + 20.0 * scale;
        while (count_evals() <= base && dh_now() < t_end)
            usleep(5000);
        if (count_evals() <= base)
            fail_msg("attempt %d evaluated nothing in %.0f s", k + 1, 20.0 * scale);
        double wait = started + KILL_EVERY_S * scale - dh_now();
        if (wait > 0)
            usleep((useconds_t)(wait * 1e6));
        int st = 0;
        assert_int_equal(dh_stop(&daemon_, SIGKILL, 5.0, &st), 0);
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        usleep(30 * 1000); /* the killed worker writes nothing more */
        base = count_evals();
        dh_opts o = daemon_.opts;
        if (dh_start(&daemon_, &o, 30.0) < 0)
            fail_msg("ktuned did not restart after kill %d", k + 1);
        started = dh_now();
    }
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    if (dh_wait_job(&c, id, NULL, (BUDGET_S + 30.0) * scale, 0.05, &j) < 0) {
        dh_dump_log(&daemon_, 3000);
        fail_msg("job %llu did not finish (%s, %.1f s elapsed)", (unsigned long long)id, j.state,
                 j.elapsed_s);
    }
    dh_close(&c);
    double total_s = dh_now() - t0;
    if (strcmp(j.state, "done") != 0)
        fail_msg("job %llu ended %s: %s", (unsigned long long)id, j.state, j.error);

    /* the attempts, by worker pid, in log order */
    dh_eval *ev = NULL;
    size_t n = 0;
    assert_int_equal(dh_read_evals(daemon_.fake_log, &ev, &n), 0);
    attempt at[N_KILLS + 8];
    int n_at = 0;
    for (size_t i = 0; i < n; i++) {
        if (n_at == 0 || at[n_at - 1].pid != ev[i].pid) {
            if (n_at == (int)sizeof(at) / sizeof(at[0]))
                fail_msg("more than %d worker processes evaluated the job", n_at);
            at[n_at++] = (attempt){ev[i].pid, ev[i].ms, ev[i].ms, 0};
        }
        at[n_at - 1].last_ms = ev[i].ms;
        at[n_at - 1].n++;
    }
    free(ev);
    if (n_at != N_KILLS + 1)
        fail_msg("%d worker processes evaluated, expected one per attempt (%d)", n_at, N_KILLS + 1);
    /* before each kill: the evaluations that completed (the last one was in flight); the last
     * attempt ran to the end, its last evaluation included */
    double spans_s = 0, all_s = 0;
    for (int i = 0; i < n_at; i++) {
        double span = (double)(at[i].last_ms - at[i].first_ms) / 1000.0;
        print_message("attempt %d: pid %ld, %d evaluations over %.2f s\n", i + 1, at[i].pid,
                      at[i].n, span);
        spans_s += span;
        all_s += span + DELAY_MS / 1000.0;
    }
    double limit = BUDGET_S * scale + MARGIN_S + N_KILLS * MARGIN_PER_KILL_S;
    print_message("crash budget: budget %.1f s, elapsed_s %.2f, evaluation spans %.2f s, "
                  "evaluations in all %.2f s (limit %.2f s), %d trials, %.1f s wall in all\n",
                  BUDGET_S * scale, j.elapsed_s, spans_s, all_s, limit, j.trials, total_s);
    /* an attempt's time runs from its start (before its first evaluation) to its last trial
     * (the end of the evaluation before the one in flight); a little slack per attempt for the
     * trial's append before the next evaluation starts */
    if (j.elapsed_s < spans_s - n_at * 0.05)
        fail_msg("elapsed_s %.2f s is less than the %.2f s the attempts spent evaluating: time "
                 "before the crashes was not counted",
                 j.elapsed_s, spans_s);
    if (all_s > limit)
        fail_msg("the job evaluated for %.2f s in all, over its budget of %.1f s (limit %.2f s): "
                 "the restarts gave it more time",
                 all_s, BUDGET_S * scale, limit);
    int st = 0;
    if (dh_stop(&daemon_, SIGTERM, 10.0, &st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("ktuned did not exit 0 on SIGTERM after the drill (0x%x)", st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crash_budget),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
