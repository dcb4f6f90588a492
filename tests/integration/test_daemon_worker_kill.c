/* Drill (issue 7): the GPU worker SIGKILLed from outside, by pid, while it times a candidate.
 * The fake worker's 4th evaluation sleeps 3 s after logging it (FAKE_SLOW_NTH, once per test:
 * FAKE_SLOW_ONCE), standing for a long timing; the test reads the worker's pid from the eval
 * log and kills it in the middle. Then:
 *   - the job goes on with a respawned worker (later evaluations come from another pid) and
 *     ends done with a record;
 *   - the candidate in flight is recorded as a fault: the Job's failures say fault 1, the trial
 *     log holds exactly one fault trial, and it is never evaluated again;
 *   - it is not cached: no stored record launches its kernel;
 *   - the GPU's worker restart count is 1.
 * The same drill against the real ktune-worker on a GPU: tests/gpu/test_gpu_worker_kill.c. */
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

#define SLOW_NTH 4

static const char relu_json[] =
    "{\"name\": \"drill_relu\", \"inputs\": {\"X\": {\"dtype\": \"f32\", \"shape\": [\"M\", 256]}},"
    " \"nodes\": [{\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"X\"]}], \"outputs\": [\"Y\"]}";

static dh_daemon daemon_;
static char env_once[400];

static int setup(void **state)
{
    (void)state;
    if (dh_init(&daemon_, "wkill") < 0)
        return -1;
    snprintf(env_once, sizeof(env_once), "FAKE_SLOW_ONCE=%s/slow.once", daemon_.root);
    dh_opts o = {.gpus = "0",
                 .delay_ms = 5,
                 .log_evals = true,
                 .env = {"FAKE_SLOW_NTH=4", "FAKE_SLOW_MS=3000", env_once, NULL}};
    return dh_start(&daemon_, &o, 30.0);
}

static int teardown(void **state)
{
    (void)state;
    dh_cleanup(&daemon_);
    return 0;
}

typedef struct find_ctx {
    const char *entry; /* the killed candidate's kernel */
    int hits, records;
} find_ctx;

static int find_entry(const cache_record *rec, int rank, void *ctx)
{
    (void)rank;
    find_ctx *f = ctx;
    f->records++;
    size_t n = strlen(f->entry);
    for (int k = 0; k < rec->n_kernels; k++) {
        const char *e = rec->kernels[k].entry;
        /* a partition's kernels carry a "_g<group>" suffix */
        if (e && strncmp(e, f->entry, n) == 0 && (e[n] == '\0' || strncmp(e + n, "_g", 2) == 0))
            f->hits++;
    }
    return 0;
}

static void test_worker_sigkill_while_timing(void **state)
{
    (void)state;
    void *mp = NULL;
    size_t len = 0;
    assert_int_equal(drill_graph_msgpack(relu_json, &mp, &len), 0);
    dh_conn c;
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    dh_shape s[1] = {{"M", 4096}};
    dh_submit_args a = {
        .graph = mp, .graph_len = len, .shapes = s, .n_shapes = 1, .budget_s = 60, .gpu = -1};
    dh_job j;
    assert_int_equal(dh_submit(&c, &a, 10.0, &j, NULL), 0);
    free(mp);

    /* the slow evaluation has started: its line is in the log */
    dh_eval *ev = NULL;
    size_t n = 0;
    double t_end = dh_now() + 60 * dh_scale();
    for (;;) {
        free(ev);
        ev = NULL;
        assert_int_equal(dh_read_evals(daemon_.fake_log, &ev, &n), 0);
        if (n >= SLOW_NTH)
            break;
        if (dh_now() > t_end)
            fail_msg("the fake worker never reached its evaluation %d", SLOW_NTH);
        usleep(2000);
    }
    dh_eval victim = ev[SLOW_NTH - 1];
    assert_int_equal(victim.pid, ev[0].pid);
    free(ev);
    usleep(300 * 1000); /* well inside its 3 s */
    if (kill((pid_t)victim.pid, 0) != 0)
        fail_msg("the worker %ld is gone before the kill", victim.pid);
    assert_int_equal(kill((pid_t)victim.pid, SIGKILL), 0);
    double t_kill = dh_now();

    if (dh_wait_job(&c, j.id, NULL, 60 * dh_scale(), 0.05, &j) < 0 || strcmp(j.state, "done") ||
        !j.record) {
        dh_dump_log(&daemon_, 3000);
        fail_msg("after the worker's kill the job ended %s (record %d): %s", j.state, j.record,
                 j.error);
    }
    double t_done = dh_now() - t_kill;
    /* the Job's failures: the candidate in flight, as a fault */
    dh_req r;
    dh_req_begin(&r, &c, "status", 1);
    dh_req_int(&r, "job", (int64_t)j.id);
    const msgpack_object *rep;
    assert_int_equal(dh_call(&c, &r, 10.0, &rep), 0);
    assert_true(dh_ok(rep));
    int64_t faults = dh_int(rep, "job.failures.fault", 0);
    if (faults != 1) {
        char d[400];
        dh_describe(rep, d, sizeof(d));
        fail_msg("the Job counts %lld faults, expected the 1 in flight at the kill: %s",
                 (long long)faults, d);
    }
    /* the GPU's worker was respawned once */
    dh_req_begin(&r, &c, "gpus", 0);
    assert_int_equal(dh_call(&c, &r, 10.0, &rep), 0);
    const msgpack_object *gpus = dh_get(rep, "gpus");
    assert_non_null(gpus);
    assert_int_equal(gpus->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(gpus->via.array.size, 1);
    int64_t restarts = dh_int(&gpus->via.array.ptr[0], "restarts", -1);
    dh_close(&c);
    int st = 0;
    if (dh_stop(&daemon_, SIGTERM, 10.0, &st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("ktuned did not exit 0 on SIGTERM (0x%x)", st);

    /* later evaluations come from a respawned worker; the victim is never evaluated again */
    assert_int_equal(dh_read_evals(daemon_.fake_log, &ev, &n), 0);
    size_t after = 0, again = 0;
    for (size_t i = SLOW_NTH; i < n; i++) {
        after += ev[i].pid != victim.pid;
        again += strcmp(ev[i].key, victim.key) == 0 && strcmp(ev[i].sub, victim.sub) == 0;
        if (ev[i].pid == victim.pid)
            fail_msg("eval %zu came from the killed worker %ld", i + 1, victim.pid);
    }
    free(ev);
    assert_true(after > 0);
    assert_int_equal(again, 0);

    /* the trial log: exactly one fault; no record launches the victim's kernel */
    drill_cache_report cr;
    assert_int_equal(drill_cache_check(daemon_.cache, &cr), 0);
    assert_int_equal(cr.trials_by_status[CACHE_TRIAL_FAULT], 1);
    assert_int_equal(cr.records_bad + cr.trials_bad + cr.jobs_bad, 0);
    char entry[256];
    snprintf(entry, sizeof(entry), "%.*s", (int)strcspn(victim.key, "@"), victim.key);
    cache_env *env = NULL;
    kt_err err = {0};
    assert_int_equal(cache_open(daemon_.cache, CACHE_RDONLY, NULL, &env, &err), 0);
    find_ctx f = {.entry = entry};
    assert_int_equal(cache_list(env, NULL, 0, false, find_entry, &f, NULL, &err), 0);
    cache_close(env);
    assert_true(f.records > 0);
    if (f.hits)
        fail_msg("the killed candidate %s is in %d cached records", entry, f.hits);
    if (restarts != 1)
        fail_msg("the GPU reports %lld worker restarts, expected 1", (long long)restarts);
    print_message("worker %ld SIGKILLed 0.3 s into evaluating %s: the job finished %.2f s later "
                  "(%d trials, %zu evaluations by the respawned worker), 1 fault trial, %d "
                  "records, none of them the victim's, %lld restart\n",
                  victim.pid, victim.key, t_done, j.trials, after, f.records, (long long)restarts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_sigkill_while_timing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
