/* The `ktune` commands that go through ktuned (tune, batch, jobs, status, watch, cancel, gpus,
 * stats), run as a user runs them: argv in, stdout/stderr/exit status out.
 *
 * Without a daemon: argument errors, batch-file errors (FILE:LINE, nothing submitted) and the
 * one-line "cannot reach ktuned" message. With KTUNED_BIN and KTUNE_FAKE_WORKER set (meson sets
 * them once daemon/ builds ktuned): ktuned is started on a temporary socket and cache with the
 * fake worker, and tune --wait, batch (twice: the rerun joins everything and measures nothing),
 * gpus, jobs --json and cancel are checked end to end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_run.h"

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void expect_in(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("expected \"%s\" in:\n%s", needle, hay);
}

static json_t *parse_json(const run_result *r)
{
    json_error_t e;
    json_t *v = json_loads(r->out, 0, &e);
    if (!v)
        fail_msg("ktune printed invalid JSON (%s): %s\nstderr: %s", e.text, r->out, r->err);
    return v;
}

static char tmpdir[64];

static int setup_tmp(void **state)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/ktune-cli-daemon-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(const char *name)
{
    static char path[8][512];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* ---- no daemon ---- */

static void test_unreachable(void **state)
{
    const char *sock = tmp_path("nobody.sock");
    static const char *const subs[][3] = {{"jobs", NULL, NULL}, {"status", "3", NULL},
                                          {"watch", "3", NULL}, {"cancel", "3", NULL},
                                          {"gpus", NULL, NULL}, {"stats", NULL, NULL}};
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        run_result *r = subs[i][1] ? RUN(subs[i][0], subs[i][1], "--socket", sock)
                                   : RUN(subs[i][0], "--socket", sock);
        assert_int_equal(r->status, 1);
        assert_int_equal(count_lines(r->err), 1);
        char want[1024];
        snprintf(want, sizeof(want),
                 "ktune: cannot reach ktuned at %s: No such file or directory "
                 "(start it with `ktuned`, or use `ktune tune --local`)\n",
                 sock);
        assert_string_equal(r->err, want);
        assert_string_equal(r->out, "");
        free(r);
    }
    run_result *r = RUN("tune", example("softmax.json"), "--shape", "M=64,N=128", "--socket", sock);
    assert_int_equal(r->status, 1);
    assert_int_equal(count_lines(r->err), 1);
    expect_in(r->err, "cannot reach ktuned at");
    free(r);
    /* $KTUNE_SOCKET is the default. */
    setenv("KTUNE_SOCKET", sock, 1);
    r = RUN("jobs");
    unsetenv("KTUNE_SOCKET");
    assert_int_equal(r->status, 1);
    expect_in(r->err, sock);
    free(r);
}

static void test_tune_usage(void **state)
{
    static const struct {
        const char *args[8];
        int status;
        const char *msg;
    } cases[] = {
        {{"tune", "@softmax", "--shape", "M", NULL}, 2, "--shape"},
        {{"tune", "@softmax", "--shape", "M=64", NULL}, 2, "dimension 'N' needs a value"},
        {{"tune", "@softmax", "--shape", "X=3", NULL}, 1, "no symbol of that name"},
        {{"tune", "@softmax", "--shape", "M=64,N=8", "--cache", "/tmp", NULL},
         2,
         "--cache only applies with --local"},
        {{"tune", "@softmax", "--shape", "M=64,N=8", "--priority", "500", NULL}, 2, "-100..100"},
        {{"tune", "@softmax", "--shape", "M=64,N=8", "--local", "--priority", "5", NULL},
         2,
         "--priority only applies through ktuned"},
        {{"tune", "@softmax", "--shape", "M=64,N=8", "--budget", "soon", NULL}, 2, "--budget"},
        {{"tune", "@softmax", "--shape", "M=64,N=8", "--budget", "25h", NULL}, 2, "at most 24h"},
        /* decimal only; under 1 ms (or under ktuned's 1 s) is a usage error, not a daemon's */
        {{"tune", "@softmax", "--shape", "M=64,N=8", "--budget", "0x10", NULL}, 2, "'0x10'"},
        {{"tune", "@softmax", "--shape", "M=64,N=8", "--budget", "0.0001", NULL}, 2, "'0.0001'"},
        {{"tune", "@softmax", "--shape", "M=64,N=8", "--budget", "inf", NULL}, 2, "'inf'"},
        {{"tune", "@softmax", "--shape", "M=64,N=8", "--budget", "0.5", NULL}, 2, "at least 1s"},
        {{"batch", "x.jsonl", "--budget-total", "0x10", NULL}, 2, "'0x10'"},
        {{"tune", "@softmax", "--shape", "M=64,N=8", "--socket", NULL}, 2, "--socket needs"},
        {{"tune", "/nonexistent.json", "--shape", "M=64", NULL}, 1, "/nonexistent.json"},
        {{"status", "abc", NULL}, 2, "'abc' is not a job id"},
        {{"status", NULL}, 2, "missing JOB"},
        {{"cancel", "3", "4", NULL}, 2, "unexpected argument '4'"},
        {{"jobs", "--state", "sleeping", NULL}, 2, "'sleeping'"},
        {{"jobs", "--frobnicate", NULL}, 2, "unknown option '--frobnicate'"},
        /* what the user typed is quoted escaped: one line, nothing that drives the terminal */
        {{"jobs", "--state", "done\n<0>emerg\x1b[2J", NULL}, 2, "'done\\x0a<0>emerg\\x1b[2J'"},
        {{"status", "1\n<0>x", NULL}, 2, "'1\\x0a<0>x' is not a job id"},
        {{"tune", "@softmax", "--shape", "M\x1b=64,N=8", NULL}, 2, "'M\\x1b' is not a symbol"},
        {{"batch", NULL}, 2, "missing FILE.jsonl"},
        {{"batch", "x.jsonl", "--shard", "2/2", NULL}, 2, "--shard takes I/N"},
        {{"batch", "x.jsonl", "--shard", "1", NULL}, 2, "--shard takes I/N"},
        {{"batch", "x.jsonl", "--budget-total", "-3h", NULL}, 2, "--budget-total"},
        {{"batch", "/nonexistent.jsonl", NULL}, 1, "/nonexistent.jsonl"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *args[10] = {0};
        int n = 0;
        bool has_socket = false;
        for (; cases[i].args[n]; n++) {
            args[n] = strcmp(cases[i].args[n], "@softmax") == 0 ? example("softmax.json")
                                                                : cases[i].args[n];
            has_socket |= strcmp(args[n], "--socket") == 0;
        }
        if (!has_socket) /* never reached on these errors */
            args[n++] = "--socket=/nonexistent/ktuned->sock";
        args[n] = NULL;
        run_result *r = run_argv(args);
        if (r->status != cases[i].status || !strstr(r->err, cases[i].msg) ||
            count_lines(r->err) != 1)
            fail_msg("case %zu (%s %s): status %d, stderr: %s", i, args[0], args[1] ? args[1] : "",
                     r->status, r->err);
        free(r);
    }
    /* --help of every command: exit 0, the usage on stdout. */
    static const char *const subs[] = {"tune",  "batch",  "jobs", "status",
                                       "watch", "cancel", "gpus", "stats"};
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        run_result *r = RUN(subs[i], "--help");
        assert_int_equal(r->status, 0);
        char want[64];
        snprintf(want, sizeof(want), "usage: ktune %s", subs[i]);
        expect_in(r->out, want);
        free(r);
    }
}

static void test_batch_bad_lines(void **state)
{
    char text[4096];
    snprintf(text, sizeof(text),
             "# a comment, then a good line\n"
             "{\"graph\": \"%s\", \"shapes\": {\"M\": 64, \"N\": 128}}\n"
             "\n"
             "{\"graph\": \"%s\", \"shapes\": {\"M\": 64}}\n"
             "not json\n"
             "{\"graph\": \"missing.json\"}\n"
             "{\"graph\": \"%s\", \"shapes\": {\"M\": 0}}\n"
             "{\"graph\": \"%s\", \"shapes\": {\"M\": 8}, \"colour\": 1}\n"
             "{\"graph\": \"%s\", \"shapes\": {\"M\": 8}, \"priority\": 500}\n"
             "{\"graph\": {\"name\": \"x\", \"inputs\": {}, \"nodes\": [], \"outputs\": []}}\n"
             "{\"graph\": \"%s\", \"shapes\": {\"M\": 8}, \"precision\": \"fast\"}\n",
             example("softmax.json"), example("softmax.json"), example("gemm_bias_relu.json"),
             example("gemm_bias_relu.json"), example("gemm_bias_relu.json"),
             example("gemm_bias_relu.json"));
    const char *file = tmp_path("bad.jsonl");
    write_file(file, text);
    /* The socket is unreachable: a bad file must fail before any connection is tried. */
    run_result *r = RUN("batch", file, "--socket", tmp_path("nobody.sock"));
    assert_int_equal(r->status, 1);
    assert_null(strstr(r->err, "cannot reach"));
    static const struct {
        int line;
        const char *msg;
    } want[] = {{4, "dimension 'N' needs a value"},
                {5, "not JSON"},
                {6, "missing.json"},
                {7, "'shapes.M' must be a positive integer"},
                {8, "unknown key 'colour'"},
                {9, "'priority'"},
                {10, "inline graph"},
                {11, "'precision'"}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        char prefix[600];
        snprintf(prefix, sizeof(prefix), "%s:%d: ", file, want[i].line);
        const char *at = strstr(r->err, prefix);
        if (!at)
            fail_msg("no error for line %d in:\n%s", want[i].line, r->err);
        const char *eol = strchr(at, '\n');
        char line[1024];
        snprintf(line, sizeof(line), "%.*s", (int)(eol - at), at);
        expect_in(line, want[i].msg);
    }
    assert_null(strstr(r->err, ":2: ")); /* the good line has none */
    expect_in(r->err, "8 bad lines: nothing submitted");
    assert_int_equal(count_lines(r->err), 9);
    free(r);

    /* Relative graph paths resolve against the file's directory; a good file gets as far as
     * connecting. */
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", example("softmax.json"), tmp_path("sm.json"));
    assert_int_equal(system(cmd), 0);
    write_file(tmp_path("good.jsonl"),
               "{\"graph\": \"sm.json\", \"shapes\": {\"M\": 64, \"N\": 8}}\n"
               "{\"graph\": \"sm.json\", \"shapes\": {\"M\": 8, \"N\": 8}}\n");
    r = RUN("batch", tmp_path("good.jsonl"), "--socket", tmp_path("nobody.sock"));
    assert_int_equal(r->status, 1);
    expect_in(r->err, "cannot reach ktuned");
    assert_int_equal(count_lines(r->err), 1);
    free(r);
    /* A shard with no lines is done without a daemon. */
    r = RUN("batch", tmp_path("good.jsonl"), "--shard", "2/3", "--socket", tmp_path("nobody.sock"));
    assert_int_equal(r->status, 0);
    expect_in(r->out, "no jobs in shard 2/3");
    free(r);
    /* An empty file is an error. */
    write_file(tmp_path("empty.jsonl"), "\n# nothing\n");
    r = RUN("batch", tmp_path("empty.jsonl"));
    assert_int_equal(r->status, 1);
    expect_in(r->err, "no jobs");
    free(r);
}

/* ---- with ktuned ---- */

typedef struct daemon_proc {
    pid_t pid;
    char sock[512], cache[512], log[512];
} daemon_proc;

/* The one ktuned a test runs: static, so the teardown stops it when an assertion ends the test
 * early (a live daemon would hold the test's output open until meson's timeout). */
static daemon_proc the_daemon;

/* $KTUNE_TEST_TIME_SCALE (default 1; scripts/test-sanitizers sets it): job budgets are
 * multiplied by it for slow builds. */
static int time_scale(void)
{
    const char *v = getenv("KTUNE_TEST_TIME_SCALE");
    int x = v ? atoi(v) : 1;
    return x >= 1 && x <= 100 ? x : 1;
}

static bool can_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    assert_true(len < sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, len + 1);
    bool ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

/* Starts ktuned with the fake worker; extra_env "NAME=VALUE" or NULL. Skips the test when
 * ktuned is not built. */
static daemon_proc *daemon_start(const char *tag, const char *extra_env)
{
    daemon_proc *d = &the_daemon;
    const char *bin = getenv("KTUNED_BIN"), *worker = getenv("KTUNE_FAKE_WORKER");
    if (!bin || !worker || access(bin, X_OK) != 0) {
        skip();
    }
    snprintf(d->sock, sizeof(d->sock), "%s/%s.sock", tmpdir, tag);
    snprintf(d->cache, sizeof(d->cache), "%s/%s-cache", tmpdir, tag);
    snprintf(d->log, sizeof(d->log), "%s/%s.log", tmpdir, tag);
    d->pid = fork();
    assert_true(d->pid >= 0);
    if (d->pid == 0) {
        FILE *f = freopen(d->log, "w", stderr);
        f = f ? freopen("/dev/null", "w", stdout) : NULL;
        (void)f;
        if (extra_env)
            putenv((char *)extra_env);
        execl(bin, bin, "--worker", worker, "--gpus", "0", "--socket", d->sock, "--cache", d->cache,
              "--compile-jobs", "2", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 300; i++) { /* up to 15 s */
        if (can_connect(d->sock))
            return d;
        int ws;
        if (waitpid(d->pid, &ws, WNOHANG) == d->pid) {
            d->pid = 0;
            fail_msg("ktuned exited at start (see %s)", d->log);
        }
        usleep(50000);
    }
    fail_msg("ktuned did not listen on %s within 15 s (see %s)", d->sock, d->log);
    return d;
}

static void daemon_stop(daemon_proc *d)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, SIGTERM);
    for (int i = 0; i < 200; i++) {
        int ws;
        if (waitpid(d->pid, &ws, WNOHANG) == d->pid) {
            d->pid = 0;
            return;
        }
        usleep(50000);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
}

/* a and b within tol (relative to b's size when b is large) */
static void expect_near(double a, double b, double tol)
{
    double scale = fabs(b) > 1.0 ? fabs(b) : 1.0;
    if (!(fabs(a - b) <= tol * scale))
        fail_msg("%.17g, expected %.17g (within %g)", a, b, tol);
}

static void test_end_to_end(void **state)
{
    daemon_proc *d = daemon_start("e2e", NULL);
    char budget[16], budget_total[16];
    snprintf(budget, sizeof(budget), "%d", 5 * time_scale());
    snprintf(budget_total, sizeof(budget_total), "%ds", 20 * time_scale());

    /* gpus: the fake worker's H100. */
    run_result *r = RUN("gpus", "--socket", d->sock);
    if (r->status != 0)
        fail_msg("gpus: %s", r->err);
    expect_in(r->out, "H100");
    free(r);

    /* tune --wait: a verified winner, the result table, exit 0. */
    r = RUN("tune", example("softmax.json"), "--shape", "M=64,N=128", "--budget", budget, "--wait",
            "--socket", d->sock);
    if (r->status != 0)
        fail_msg("tune --wait: status %d\nstdout: %s\nstderr: %s", r->status, r->out, r->err);
    expect_in(r->out, "state      done");
    expect_in(r->out, "winner");
    expect_in(r->out, "cached     yes");
    expect_in(r->out, "% of the floor 22 ns"); /* the roofline, below */
    free(r);
    /* The same job again: joined, nothing to do. */
    r = RUN("tune", example("softmax.json"), "--shape", "M=64,N=128", "--json", "--socket",
            d->sock);
    assert_int_equal(r->status, 0);
    json_t *v = parse_json(r);
    assert_true(json_is_true(json_object_get(v, "joined")));
    assert_string_equal(json_string_value(json_object_get(v, "state")), "done");
    json_int_t tune_id = json_integer_value(json_object_get(v, "job"));
    json_int_t tune_trials = json_integer_value(json_object_get(v, "trials"));
    /* The roofline floor on the fake worker's H100: 64 x 128 f32 read and written, 65 536
     * bytes at 3.0 TB/s, 21.8 ns; the winner's fraction of it is the floor over its time. */
    double floor_ns = json_real_value(json_object_get(v, "floor_ns"));
    if (fabs(floor_ns - 65536 / 3.0e12 * 1e9) > 1e-9)
        fail_msg("floor_ns %.17g, expected 65536 bytes at 3.0 TB/s", floor_ns);
    expect_near(json_real_value(json_object_get(v, "roofline_fraction")),
                        floor_ns / json_real_value(json_object_get(v, "best_ns")), 1e-12);
    json_decref(v);
    free(r);
    /* lookup (no GPU here: every GPU's records) carries each record's roofline */
    r = RUN("lookup", example("softmax.json"), "--shape", "M=64,N=128", "--cache", d->cache,
            "--json");
    if (r->status != 0)
        fail_msg("lookup: status %d\nstderr: %s", r->status, r->err);
    v = parse_json(r);
    json_t *rec = json_array_get(json_object_get(v, "records"), 0);
    json_t *roof = json_object_get(rec, "roofline");
    expect_near(json_real_value(json_object_get(roof, "floor_ns")), floor_ns, 1e-9);
    assert_string_equal(json_string_value(json_object_get(roof, "bound")), "memory");
    expect_near(json_real_value(json_object_get(roof, "bytes")), 65536, 0);
    expect_near(json_real_value(json_object_get(roof, "fraction")),
                        floor_ns / json_real_value(json_object_get(rec, "time_ns")), 1e-12);
    json_decref(v);
    free(r);
    /* trials: the job's trial log from the cache, no daemon: as many entries as the job's
     * trials, the verified ones fastest first */
    r = RUN("trials", example("softmax.json"), "--shape", "M=64,N=128", "--cache", d->cache,
            "--json");
    if (r->status != 0)
        fail_msg("trials: status %d\nstderr: %s", r->status, r->err);
    v = parse_json(r);
    json_t *trials = json_object_get(v, "trials");
    assert_true(tune_trials > 0);
    json_int_t candidates = 0; /* the entries besides the assembled records' checks */
    double last = 0;
    bool timed = true;
    for (size_t i = 0; i < json_array_size(trials); i++) {
        json_t *t = json_array_get(trials, i);
        bool assembled =
            strncmp(json_string_value(json_object_get(t, "detail")), "assembled", 9) == 0;
        candidates += !assembled;
        double ns = json_real_value(json_object_get(t, "time_ns"));
        if (strcmp(json_string_value(json_object_get(t, "status")), "ok") != 0 || ns <= 0) {
            timed = false;
            continue;
        }
        assert_true(timed && ns >= last); /* the timed ones first, fastest first */
        last = ns;
    }
    assert_int_equal(candidates, tune_trials);
    assert_true(last > 0); /* at least one verified */
    expect_in(json_string_value(
                  json_object_get(json_object_get(json_array_get(trials, 0), "gpu"), "name")),
              "H100");
    json_decref(v);
    free(r);
    r = RUN("trials", example("softmax.json"), "--shape", "M=64,N=128", "--cache", d->cache);
    assert_int_equal(r->status, 0);
    expect_in(r->out, "STATUS");
    expect_in(r->out, " ok ");
    /* the same log by job id, from the journal in the cache */
    char id_text[32];
    snprintf(id_text, sizeof(id_text), "%lld", (long long)tune_id);
    run_result *rj = RUN("trials", id_text, "--cache", d->cache);
    if (rj->status != 0)
        fail_msg("trials JOB: status %d\nstderr: %s", rj->status, rj->err);
    const char *by_graph = strchr(r->out, '\n'), *by_job = strchr(rj->out, '\n');
    assert_non_null(by_graph);
    assert_non_null(by_job);
    assert_string_equal(by_job, by_graph); /* every row alike; the first line names the job */
    expect_in(rj->out, "job ");
    free(rj);
    free(r);
    r = RUN("trials", "999", "--cache", d->cache);
    assert_int_equal(r->status, 1);
    expect_in(r->err, "no job 999 in the journal");
    free(r);
    r = RUN("trials", example("softmax.json"), "--shape", "M=65,N=128", "--cache", d->cache);
    assert_int_equal(r->status, 1); /* never tuned at these shapes */
    expect_in(r->err, "no trials in");
    free(r);

    /* batch of two lines, twice: the second run joins both and measures nothing. */
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"graph\": \"%s\", \"shapes\": {\"M\": 32, \"N\": 64}, \"budget\": %s}\n"
             "{\"graph\": \"%s\", \"shapes\": {\"M\": 16}, \"name\": \"gemm16\"}\n",
             example("softmax.json"), budget, example("gemm_bias_relu.json"));
    write_file(tmp_path("two.jsonl"), text);
    r = RUN("batch", tmp_path("two.jsonl"), "--budget-total", budget_total, "--json", "--socket",
            d->sock);
    if (r->status != 0)
        fail_msg("batch: status %d\nstdout: %s\nstderr: %s", r->status, r->out, r->err);
    v = parse_json(r);
    assert_int_equal(json_integer_value(json_object_get(v, "total")), 2);
    assert_int_equal(json_integer_value(json_object_get(v, "done")), 2);
    json_t *jobs = json_object_get(v, "jobs");
    json_int_t ids[2], measured[2];
    for (size_t i = 0; i < 2; i++) {
        json_t *j = json_array_get(jobs, i);
        ids[i] = json_integer_value(json_object_get(j, "job"));
        measured[i] = json_integer_value(json_object_get(j, "measured"));
        assert_false(json_is_true(json_object_get(j, "joined")));
        assert_true(json_is_true(json_object_get(j, "record")));
        assert_int_equal(json_integer_value(json_object_get(j, "line")), (json_int_t)i + 1);
    }
    assert_string_equal(json_string_value(json_object_get(json_array_get(jobs, 1), "name")),
                        "gemm16");
    json_decref(v);
    free(r);
    time_t t0 = time(NULL);
    r = RUN("batch", tmp_path("two.jsonl"), "--json", "--socket", d->sock);
    assert_int_equal(r->status, 0);
    assert_true(time(NULL) - t0 < 5);
    v = parse_json(r);
    jobs = json_object_get(v, "jobs");
    for (size_t i = 0; i < 2; i++) {
        json_t *j = json_array_get(jobs, i);
        assert_true(json_is_true(json_object_get(j, "joined")));
        assert_int_equal(json_integer_value(json_object_get(j, "job")), ids[i]);
        assert_int_equal(json_integer_value(json_object_get(j, "measured")), measured[i]);
        assert_string_equal(json_string_value(json_object_get(j, "state")), "done");
    }
    json_decref(v);
    free(r);
    /* --shard 1/2 takes the second line only. */
    r = RUN("batch", tmp_path("two.jsonl"), "--shard=1/2", "--json", "--socket", d->sock);
    assert_int_equal(r->status, 0);
    v = parse_json(r);
    assert_int_equal(json_integer_value(json_object_get(v, "total")), 1);
    json_t *only = json_array_get(json_object_get(v, "jobs"), 0);
    assert_int_equal(json_integer_value(json_object_get(only, "line")), 2);
    assert_int_equal(json_integer_value(json_object_get(only, "job")), ids[1]);
    assert_true(json_is_true(json_object_get(only, "joined")));
    json_decref(v);
    free(r);
    /* The table form of the rerun. */
    r = RUN("batch", tmp_path("two.jsonl"), "--socket", d->sock);
    assert_int_equal(r->status, 0);
    expect_in(r->out, "gemm16");
    expect_in(r->err, "2 joined");
    free(r);

    /* jobs --json: all three jobs, newest first. */
    r = RUN("jobs", "--json", "--socket", d->sock);
    assert_int_equal(r->status, 0);
    v = parse_json(r);
    assert_true(json_is_array(v));
    assert_int_equal(json_array_size(v), 3);
    assert_true(json_integer_value(json_object_get(json_array_get(v, 0), "job")) >
                json_integer_value(json_object_get(json_array_get(v, 2), "job")));
    bool seen = false;
    for (size_t i = 0; i < json_array_size(v); i++)
        seen |= json_integer_value(json_object_get(json_array_get(v, i), "job")) == tune_id;
    assert_true(seen);
    json_decref(v);
    free(r);

    /* status, watch of a finished job, cancel of a finished job (an error), stats. */
    char id[32];
    snprintf(id, sizeof(id), "%lld", (long long)tune_id);
    r = RUN("status", id, "--socket", d->sock);
    assert_int_equal(r->status, 0);
    expect_in(r->out, "state      done");
    expect_in(r->out, "roofline   ");
    free(r);
    r = RUN("watch", id, "--socket", d->sock);
    assert_int_equal(r->status, 0);
    free(r);
    r = RUN("cancel", id, "--socket", d->sock);
    assert_int_equal(r->status, 1);
    assert_int_equal(count_lines(r->err), 1);
    free(r);
    r = RUN("status", "999999", "--socket", d->sock);
    assert_int_equal(r->status, 1);
    assert_int_equal(count_lines(r->err), 1);
    free(r);
    r = RUN("stats", "--json", "--socket", d->sock);
    assert_int_equal(r->status, 0);
    v = parse_json(r);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "jobs"), "done")), 3);
    json_decref(v);
    free(r);

    /* A queued job cancelled at once: a long job first occupies the only GPU. */
    r = RUN("tune", example("layernorm.json"), "--shape", "M=8", "--budget", "60", "--json",
            "--socket", d->sock);
    assert_int_equal(r->status, 0);
    free(r);
    r = RUN("tune", example("rmsnorm.json"), "--shape", "M=8", "--json", "--socket", d->sock);
    assert_int_equal(r->status, 0);
    v = parse_json(r);
    snprintf(id, sizeof(id), "%lld", (long long)json_integer_value(json_object_get(v, "job")));
    bool queued = strcmp(json_string_value(json_object_get(v, "state")), "queued") == 0;
    json_decref(v);
    free(r);
    if (queued) {
        r = RUN("cancel", id, "--socket", d->sock);
        assert_int_equal(r->status, 0);
        expect_in(r->out, "cancelled");
        free(r);
    }
    daemon_stop(d);
}

/* Ctrl-C on `tune --wait` stops the following, not the job: one message says so and how to go
 * on, the exit status is 130, and the job is still there to cancel. */
static void test_interrupt_wait(void **state)
{
    (void)state;
    daemon_proc *d = daemon_start("interrupt", "FAKE_DELAY_MS=400");
    run_result *r = run_argv_limited(
        (const char *const[]){"tune", example("softmax.json"), "--shape", "M=64,N=128", "--budget",
                              "60", "--wait", "--socket", d->sock, NULL},
        (run_limits){.interrupt_ms = 1500});
    if (r->status != 130)
        fail_msg("tune --wait, interrupted: status %d\nstderr: %s", r->status, r->err);
    expect_in(r->err, "goes on in ktuned");
    const char *cancel = strstr(r->err, "`ktune cancel ");
    assert_non_null(cancel);
    char id[32];
    snprintf(id, sizeof(id), "%llu", strtoull(cancel + 14, NULL, 10));
    assert_non_null(strstr(r->err, "`ktune watch "));
    free(r);
    r = RUN("cancel", id, "--socket", d->sock);
    if (r->status != 0)
        fail_msg("cancel %s after the interrupt: %s", id, r->err);
    free(r);
}

static void test_no_gpu(void **state)
{
    daemon_proc *d = daemon_start("nogpu", "FAKE_NODEV=1");
    /* Give the daemon a moment to hear from its worker. */
    run_result *r = NULL;
    for (int i = 0; i < 50; i++) {
        free(r);
        r = RUN("gpus", "--socket", d->sock);
        if (strncmp(r->out, "no GPU: ", 8) == 0 && strlen(r->out) > 9)
            break;
        usleep(100000);
    }
    assert_int_equal(r->status, 0);
    assert_int_equal(count_lines(r->out), 1);
    expect_in(r->out, "no GPU: ");
    assert_string_equal(r->err, "");
    free(r);
    daemon_stop(d);
}

/* `tune --local --only PATTERN`, an ablation: every trial and the winner hold the pattern's
 * parts; a pattern no schedule holds is one line and exit 1; through ktuned it is a usage error. */
static void test_tune_only(void **state)
{
    const char *worker = getenv("KTUNE_FAKE_WORKER");
    if (!worker)
        skip();
    const char *pattern = "row strategy=warp_per_row&vec=2";
    char budget[16]; /* scaled for sanitizer builds */
    snprintf(budget, sizeof(budget), "%d", 3 * time_scale());
    run_result *r = RUN("tune", example("softmax.json"), "--shape", "M=64,N=128", "--local",
                        "--json", "--budget", budget, "--only", pattern, "--worker", worker,
                        "--cache", tmp_path("only-cache"));
    if (r->status != 0)
        fail_msg("tune --local --only: status %d\nstdout: %s\nstderr: %s", r->status, r->out,
                 r->err);
    json_t *v = parse_json(r);
    const char *won = json_string_value(json_object_get(json_object_get(v, "winner"), "schedule"));
    assert_non_null(won);
    expect_in(won, "row strategy=warp_per_row");
    expect_in(won, "vec=2");
    json_decref(v);
    free(r);
    r = RUN("trials", example("softmax.json"), "--shape", "M=64,N=128", "--cache",
            tmp_path("only-cache"), "--json");
    assert_int_equal(r->status, 0);
    v = parse_json(r);
    json_t *trials = json_object_get(v, "trials");
    assert_true(json_array_size(trials) > 0);
    for (size_t i = 0; i < json_array_size(trials); i++) {
        json_t *t = json_array_get(trials, i);
        if (strncmp(json_string_value(json_object_get(t, "detail")), "assembled", 9) == 0)
            continue;
        const char *cand = json_string_value(json_object_get(t, "candidate"));
        expect_in(cand, "row strategy=warp_per_row");
        expect_in(cand, "vec=2");
    }
    json_decref(v);
    free(r);
    /* a whole schedule of 130 bytes as the pattern (a part of any length): that schedule is the
     * winner (in each group holding the matmul: a trial each) */
    const char *whole = "gemm math=f16 bm=16 bn=128 bk=16 wm=1 wn=4 stages=4 splitk=8 raster=1 "
                        "smem=xor splitk_mode=parallel mma=sync mcast=1 store=direct";
    assert_true(strlen(whole) > 128);
    r = RUN("tune", example("gemm_bias_relu.json"), "--shape", "M=16", "--local", "--json",
            "--budget", budget, "--only", whole, "--worker", worker, "--cache",
            tmp_path("only-cache-2"));
    if (r->status != 0)
        fail_msg("tune --only WHOLE: status %d\nstdout: %s\nstderr: %s", r->status, r->out, r->err);
    v = parse_json(r);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(v, "winner"), "schedule")), whole);
    assert_true(json_integer_value(json_object_get(v, "trials")) <= 3); /* a group each */
    json_decref(v);
    free(r);
    r = RUN("tune", example("softmax.json"), "--shape", "M=64,N=128", "--local", "--only",
            "nothing=1", "--worker", worker, "--cache", tmp_path("only-cache"));
    assert_int_equal(r->status, 1);
    expect_in(r->err, "no candidate's schedule matches 'nothing=1'");
    assert_int_equal(count_lines(r->err), 1);
    free(r);
    r = RUN("tune", example("softmax.json"), "--shape", "M=64,N=128", "--only", "vec=2");
    assert_int_equal(r->status, 2);
    expect_in(r->err, "--only only applies with --local");
    free(r);
}

/* Every record fails its whole-graph evaluation (FAKE_WRONG "record:", tests/fake_worker):
 * nothing is cached, and the reason reaches `ktune tune --local --json` and, through ktuned, the
 * job (record false, its error). */
static void test_record_fails_as_assembled(void **state)
{
    const char *worker = getenv("KTUNE_FAKE_WORKER");
    if (!worker)
        skip();
    setenv("FAKE_WRONG", "record:", 1); /* read by the worker --local starts */
    run_result *r = RUN("tune", example("gelu_tanh_chain.json"), "--shape", "M=64,N=128", "--local",
                        "--json", "--worker", worker, "--cache", tmp_path("record-fails-cache"));
    unsetenv("FAKE_WRONG");
    if (r->status != 0)
        fail_msg("tune --local: status %d\nstdout: %s\nstderr: %s", r->status, r->out, r->err);
    json_t *v = parse_json(r);
    assert_non_null(json_object_get(v, "winner"));
    assert_int_equal(json_integer_value(json_object_get(v, "records")), 0);
    assert_int_equal(json_integer_value(json_object_get(v, "cache_rank")), -1);
    const char *note = json_string_value(json_object_get(v, "record_note"));
    assert_non_null(note);
    expect_in(note, "failed its whole-graph evaluation");
    expect_in(note, "over tolerance (fake)");
    json_t *as = json_object_get(v, "assembled");
    assert_int_equal(json_integer_value(json_object_get(as, "failed")), 3);
    json_decref(v);
    free(r);
    /* nothing to look up */
    r = RUN("lookup", example("gelu_tanh_chain.json"), "--shape", "M=64,N=128", "--cache",
            tmp_path("record-fails-cache"));
    assert_int_equal(r->status, 1); /* nothing cached for that key */
    free(r);

    daemon_proc *d = daemon_start("recfail", "FAKE_WRONG=record:");
    char budget[16];
    snprintf(budget, sizeof(budget), "%d", 20 * time_scale());
    r = RUN("tune", example("gelu_tanh_chain.json"), "--shape", "M=64,N=128", "--budget", budget,
            "--wait", "--json", "--socket", d->sock);
    v = parse_json(r);
    assert_string_equal(json_string_value(json_object_get(v, "state")), "done");
    assert_false(json_is_true(json_object_get(v, "record")));
    expect_in(json_string_value(json_object_get(v, "error")), "failed its whole-graph evaluation");
    json_decref(v);
    free(r);
    daemon_stop(d);
}

/* The measured (not re-timed) evaluations of the fake worker's FAKE_LOG_DETAIL log from line
 * `from` on, as "candidate\tgroup" strings; *n_lines receives the log's line count. */
static char **measured_since(const char *log, int from, int *n, int *n_lines)
{
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char **out = NULL, line[2048];
    int cap = 0, i = 0;
    *n = 0;
    for (; fgets(line, sizeof(line), f); i++) {
        line[strcspn(line, "\n")] = '\0';
        char *fields[6] = {0};
        char *save = NULL, *p = strtok_r(line, "\t", &save);
        for (int k = 0; p && k < 6; k++, p = strtok_r(NULL, "\t", &save))
            fields[k] = p;
        if (i < from || !fields[1] || (fields[5] && strcmp(fields[5], "load") == 0))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            out = realloc(out, sizeof(char *) * (size_t)cap);
            assert_non_null(out);
        }
        size_t len = strlen(fields[0]) + strlen(fields[1]) + 2;
        out[*n] = malloc(len);
        snprintf(out[(*n)++], len, "%s\t%s", fields[0], fields[1]);
    }
    fclose(f);
    *n_lines = i;
    return out;
}

static int overlap(char **a, int na, char **b, int nb)
{
    int k = 0;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (strcmp(a[i], b[j]) == 0) {
                k++;
                break;
            }
    return k;
}

static void free_strs(char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static json_t *tune_wait(daemon_proc *d, const char *budget, const char *flag)
{
    /* softmax: its kernels' names spell their whole schedule, so the fake worker's log tells
     * candidates apart (a GEMM's do not: two schedules may share a name) */
    run_result *r = flag ? RUN("tune", example("softmax.json"), "--shape", "M=64,N=4096", "--budget",
                               budget, "--wait", "--json", "--quiet", "--socket", d->sock, flag)
                         : RUN("tune", example("softmax.json"), "--shape", "M=64,N=4096", "--budget",
                               budget, "--wait", "--json", "--quiet", "--socket", d->sock);
    if (r->status != 0)
        fail_msg("tune %s: status %d\nstdout: %s\nstderr: %s", flag ? flag : "", r->status, r->out,
                 r->err);
    json_t *v = parse_json(r);
    free(r);
    assert_string_equal(json_string_value(json_object_get(v, "state")), "done");
    return v;
}

/* Issue 24: a finished job retuned with more budget is a new job that measures only candidates
 * the first did not (the trial log read back; finalists re-timed are loads, not measurements);
 * without --retune the submission joins the finished job; --remeasure measures again. */
static void test_retune(void **state)
{
    const char *log = tmp_path("retune-fake.log");
    setenv("FAKE_LOG", log, 1);
    setenv("FAKE_LOG_DETAIL", "1", 1);
    setenv("FAKE_DELAY_MS", "60", 1); /* the space outlasts the budgets */
    daemon_proc *d = daemon_start("retune", NULL);
    unsetenv("FAKE_LOG");
    unsetenv("FAKE_LOG_DETAIL");
    unsetenv("FAKE_DELAY_MS");
    char b1[16], b2[16];
    snprintf(b1, sizeof(b1), "%d", 2 * time_scale());
    snprintf(b2, sizeof(b2), "%d", 5 * time_scale());
    json_t *first = tune_wait(d, b1, NULL);
    json_int_t id1 = json_integer_value(json_object_get(first, "job"));
    int n1, lines1;
    char **m1 = measured_since(log, 0, &n1, &lines1);
    assert_true(n1 > 0);

    json_t *again = tune_wait(d, b2, NULL); /* joins the done job */
    assert_int_equal(json_integer_value(json_object_get(again, "job")), id1);
    assert_true(json_is_true(json_object_get(again, "joined")));

    json_t *re = tune_wait(d, b2, "--retune");
    json_int_t id2 = json_integer_value(json_object_get(re, "job"));
    assert_true(id2 != id1);
    assert_false(json_is_true(json_object_get(re, "joined")));
    assert_true(json_integer_value(json_object_get(re, "resumed")) > 0);
    int n2, lines2;
    char **m2 = measured_since(log, lines1, &n2, &lines2);
    assert_true(n2 > 0); /* more budget: new candidates */
    int twice = overlap(m2, n2, m1, n1);
    for (int i = 0; twice && i < n2; i++)
        for (int j = 0; j < n1; j++)
            if (strcmp(m2[i], m1[j]) == 0)
                print_message("measured again: %s\n", m2[i]);
    if (twice)
        fail_msg("the retune measured %d of the first job's %d candidates again", twice, n1);

    json_t *rm = tune_wait(d, b1, "--remeasure");
    assert_true(json_integer_value(json_object_get(rm, "job")) != id2);
    int n3, lines3;
    char **m3 = measured_since(log, lines2, &n3, &lines3);
    assert_true(overlap(m3, n3, m1, n1) + overlap(m3, n3, m2, n2) > 0);
    print_message("retune: first job %d measured, the retune %d new (%" JSON_INTEGER_FORMAT
                  " read back), the remeasure %d\n",
                  n1, n2, json_integer_value(json_object_get(re, "resumed")), n3);
    free_strs(m1, n1);
    free_strs(m2, n2);
    free_strs(m3, n3);
    json_decref(first);
    json_decref(again);
    json_decref(re);
    json_decref(rm);
    daemon_stop(d);
}

/* Issue 24: `ktune report JOB --html FILE` from the cache alone (the daemon stopped): the page
 * holds the plot, the winner's highlighted source, no script and no remote resource; where
 * Chromium is installed (scripts/install-deps), it renders the page headless to a screenshot
 * with no console message. */
static void test_report(void **state)
{
    setenv("FAKE_DELAY_MS", "10", 1);
    daemon_proc *d = daemon_start("report", NULL);
    unsetenv("FAKE_DELAY_MS");
    char budget[16];
    snprintf(budget, sizeof(budget), "%d", 2 * time_scale());
    json_t *v = tune_wait(d, budget, NULL);
    char job[32];
    snprintf(job, sizeof(job), "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(v, "job")));
    json_decref(v);
    daemon_stop(d);
    const char *html = tmp_path("report.html");
    run_result *r = RUN("report", job, "--html", html, "--cache", d->cache);
    if (r->status != 0)
        fail_msg("report: status %d\nstdout: %s\nstderr: %s", r->status, r->out, r->err);
    expect_in(r->out, "wrote");
    free(r);
    FILE *f = fopen(html, "r");
    assert_non_null(f);
    static char page[1 << 20];
    size_t n = fread(page, 1, sizeof(page) - 1, f);
    fclose(f);
    page[n] = '\0';
    expect_in(page, "<!DOCTYPE html>");
    expect_in(page, "<svg");
    expect_in(page, "<circle");
    expect_in(page, "stroke='#000'"); /* the winner's trials ringed */
    expect_in(page, "roofline floor");
    expect_in(page, "<span class=k>__global__</span>");
    assert_null(strstr(page, "<script"));
    assert_null(strstr(page, "http://")); /* the SVG namespace is https-free too */
    assert_null(strstr(page, "src="));
    r = RUN("report", "999", "--html", html, "--cache", d->cache);
    assert_int_equal(r->status, 1);
    expect_in(r->err, "no job 999");
    free(r);
    if (system("command -v chromium >/dev/null 2>&1") != 0) {
        print_message("report: no chromium here: the page was not rendered\n");
        return;
    }
    char cmd[2048];
    const char *png = tmp_path("report.png"), *log = tmp_path("chromium.log");
    snprintf(cmd, sizeof(cmd),
             "timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
             "--window-size=1100,1500 --screenshot='%s' --enable-logging=stderr --v=0 "
             "'file://%s' 2>'%s' >/dev/null",
             png, html, log);
    int rc = system(cmd);
    struct stat st;
    if (rc != 0 || stat(png, &st) != 0 || st.st_size < 10000)
        fail_msg("chromium did not render %s (exit %d; see %s)", html, rc, log);
    snprintf(cmd, sizeof(cmd), "grep -q 'CONSOLE' '%s'", log);
    if (system(cmd) == 0)
        fail_msg("the page logged to the console in chromium (see %s)", log);
    print_message("report: rendered to %s (%lld bytes)\n", png, (long long)st.st_size);
}

/* Issue 15's findings 1-3 end to end, with the fake worker: keys tell problems apart whatever
 * the symbols are called, the trial log and the job journal too, and a job's own tolerance keys
 * its records apart. X[M,N] and X[N,M] summed over axis 1 share a signature; bound M=1024,N=64
 * they are 1024 rows of 64 and 64 rows of 1024. */
static const char *gpu_graph(const char *name)
{
    static char path[4][1024];
    static int slot;
    char *p = path[slot++ % 4];
    snprintf(p, 1024, "%s/tests/gpu/%s", getenv("KTUNE_SOURCE_ROOT"), name);
    return p;
}

static json_t *tune_local_json(const char *worker, const char *graph, const char *shapes,
                               const char *cache, const char *tolerance)
{
    run_result *r = tolerance
                        ? RUN("tune", graph, "--shape", shapes, "--local", "--json", "--budget",
                              "3s", "--worker", worker, "--cache", cache, "--tolerance", tolerance)
                        : RUN("tune", graph, "--shape", shapes, "--local", "--json", "--budget",
                              "3s", "--worker", worker, "--cache", cache);
    if (r->status != 0)
        fail_msg("tune --local %s: status %d\nstdout: %s\nstderr: %s", graph, r->status, r->out,
                 r->err);
    json_t *v = parse_json(r);
    free(r);
    return v;
}

static void test_keys_are_problems(void **state)
{
    const char *worker = getenv("KTUNE_FAKE_WORKER");
    if (!worker)
        skip();
    const char *cache = tmp_path("problems-cache");
    json_t *v = tune_local_json(worker, gpu_graph("rowsum_mn.json"), "M=1024,N=64", cache, NULL);
    assert_int_equal(json_integer_value(json_object_get(v, "records")) > 0, 1);
    json_decref(v);
    /* the other problem: nothing to look up, and none of the first job's trials resumed */
    run_result *r =
        RUN("lookup", gpu_graph("rowsum_nm.json"), "--shape", "M=1024,N=64", "--cache", cache);
    assert_int_equal(r->status, 1);
    free(r);
    v = tune_local_json(worker, gpu_graph("rowsum_nm.json"), "M=1024,N=64", cache, NULL);
    assert_int_equal(json_integer_value(json_object_get(v, "resumed")), 0);
    json_decref(v);
    /* the first problem under other names: its record, its trials */
    r = RUN("lookup", gpu_graph("rowsum_pq.json"), "--shape", "P=1024,Q=64", "--cache", cache);
    if (r->status != 0)
        fail_msg("lookup of the renamed graph: %s", r->err);
    free(r);
    v = tune_local_json(worker, gpu_graph("rowsum_pq.json"), "P=1024,Q=64", cache, NULL);
    assert_true(json_integer_value(json_object_get(v, "resumed")) > 0);
    json_decref(v);
    /* ktune check shows the problem digest: equal for mn and pq, different for nm */
    const char *const graphs[3][2] = {{"rowsum_mn.json", "M=1024,N=64"},
                                      {"rowsum_pq.json", "P=1024,Q=64"},
                                      {"rowsum_nm.json", "M=1024,N=64"}};
    char problem[3][65];
    for (int i = 0; i < 3; i++) {
        r = RUN("check", gpu_graph(graphs[i][0]), "--shape", graphs[i][1], "--json");
        v = parse_json(r);
        snprintf(problem[i], sizeof(problem[i]), "%s",
                 json_string_value(json_object_get(v, "problem")));
        json_decref(v);
        free(r);
    }
    assert_string_equal(problem[0], problem[1]);
    assert_string_not_equal(problem[0], problem[2]);

    /* a record verified within a job's own tolerance is served only when asked for */
    const char *loose = tmp_path("loose-cache");
    v = tune_local_json(worker, gpu_graph("rowsum_mn.json"), "M=1024,N=64", loose, "1000");
    json_decref(v);
    r = RUN("lookup", gpu_graph("rowsum_mn.json"), "--shape", "M=1024,N=64", "--cache", loose);
    assert_int_equal(r->status, 1);
    free(r);
    r = RUN("lookup", gpu_graph("rowsum_mn.json"), "--shape", "M=1024,N=64", "--cache", loose,
            "--tolerance", "1000", "--json");
    if (r->status != 0)
        fail_msg("lookup --tolerance 1000: %s", r->err);
    free(r);

    /* through ktuned: submissions join by problem (the first one done, the others only
     * submitted); a tolerance past the cap is refused */
    daemon_proc *d = daemon_start("problems", NULL);
    char budget[16];
    snprintf(budget, sizeof(budget), "%d", 2 * time_scale());
    const char *const order[3][3] = {{"rowsum_mn.json", "M=1024,N=64", "false"},
                                     {"rowsum_nm.json", "M=1024,N=64", "false"},
                                     {"rowsum_pq.json", "P=1024,Q=64", "true"}};
    for (int i = 0; i < 3; i++) {
        r = i == 0 ? RUN("tune", gpu_graph(order[i][0]), "--shape", order[i][1], "--budget", budget,
                         "--wait", "--json", "--socket", d->sock)
                   : RUN("tune", gpu_graph(order[i][0]), "--shape", order[i][1], "--budget", budget,
                         "--json", "--socket", d->sock);
        if (r->status != 0)
            fail_msg("tune %s: %s", order[i][0], r->err);
        v = parse_json(r);
        assert_int_equal(json_is_true(json_object_get(v, "joined")),
                         strcmp(order[i][2], "true") == 0);
        json_decref(v);
        free(r);
    }
    r = RUN("tune", gpu_graph("rowsum_mn.json"), "--shape", "M=1024,N=64", "--tolerance", "1",
            "--socket", d->sock);
    assert_int_not_equal(r->status, 0);
    expect_in(r->err, "tolerance-max-factor");
    assert_int_equal(count_lines(r->err), 1);
    free(r);
    daemon_stop(d);
}

static int stop_daemon(void **state)
{
    (void)state;
    daemon_stop(&the_daemon);
    return 0;
}

/* Issue 17 item 1: `ktune lookup` says which order a kernel takes its tensors in: the graph's
 * declared one, as the file lists them. out = sub(b, a) declared (a, b) has the canonical order
 * (b, a), which no caller sees any more. */
static void test_lookup_names_declared_order(void **state)
{
    (void)state;
    const char *worker = getenv("KTUNE_FAKE_WORKER");
    if (!worker)
        skip();
    const char *cache = tmp_path("names-cache");
    json_t *v = tune_local_json(worker, gpu_graph("sub_ba.json"), "M=64", cache, NULL);
    assert_true(json_integer_value(json_object_get(v, "records")) > 0);
    json_decref(v);
    run_result *r =
        RUN("lookup", gpu_graph("sub_ba.json"), "--shape", "M=64", "--cache", cache, "--json");
    if (r->status != 0)
        fail_msg("lookup --json: status %d\nstdout: %s\nstderr: %s", r->status, r->out, r->err);
    v = parse_json(r);
    free(r);
    json_t *in = json_object_get(v, "inputs"), *out = json_object_get(v, "outputs");
    assert_int_equal(json_array_size(in), 2);
    assert_string_equal(json_string_value(json_array_get(in, 0)), "a");
    assert_string_equal(json_string_value(json_array_get(in, 1)), "b");
    assert_int_equal(json_array_size(out), 1);
    assert_string_equal(json_string_value(json_array_get(out, 0)), "out");
    json_decref(v);
    r = RUN("lookup", gpu_graph("sub_ba.json"), "--shape", "M=64", "--cache", cache);
    if (r->status != 0)
        fail_msg("lookup: status %d\nstdout: %s\nstderr: %s", r->status, r->out, r->err);
    expect_in(r->out, "inputs     a, b (declared order");
    expect_in(r->out, "outputs    out\n");
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_tune_usage),
        cmocka_unit_test(test_batch_bad_lines),
        cmocka_unit_test_teardown(test_end_to_end, stop_daemon),
        cmocka_unit_test_teardown(test_interrupt_wait, stop_daemon),
        cmocka_unit_test_teardown(test_no_gpu, stop_daemon),
        cmocka_unit_test_teardown(test_record_fails_as_assembled, stop_daemon),
        cmocka_unit_test(test_tune_only),
        cmocka_unit_test_teardown(test_keys_are_problems, stop_daemon),
        cmocka_unit_test_teardown(test_retune, stop_daemon),
        cmocka_unit_test_teardown(test_report, stop_daemon),
        cmocka_unit_test(test_lookup_names_declared_order),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
