/* Drill (issue 16, item 8): jobs belong to the uid that submitted them. As root, the test runs
 * clients as other users in forked children (setgroups/setresgid/setresuid), all members of the
 * socket's group: A (uid 65534) and B (65533), plain users, and C (65532), whose supplementary
 * groups hold the admin group (ADMIN_GID, ktuned --admin-group, second part only: the daemon
 * reads it with SO_PEERGROUPS). Checked:
 *   - a job's `owner` is its submitter's uid;
 *   - B may not cancel A's job (EPERM; the job goes on), A may; root and C may cancel anyone's;
 *   - priorities above the default 0 are refused to A and B (EPERM), allowed to C; B's
 *     duplicate of A's job joins it without raising its priority, A's own duplicate raises it;
 *   - the log names the uids (a refused cancel, and who cancelled);
 *   - the cache directory and its data file are not readable by users outside its group, even
 *     when they were before ktuned started (it drops their "other" bits), and stay readable by
 *     its group (deploy-time lookups).
 * Skipped (77) when not run as root. */
#include "daemon_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define USER_A    65534
#define USER_B    65533
#define USER_C    65532
#define ADMIN_GID 65531
#define DELAY_MS  300 /* per evaluation: jobs stay queued or running while the test acts */

static dh_daemon daemon_;
static void *graph_mp;
static size_t graph_len;
static gid_t sock_group;

static int setup(void **state)
{
    (void)state;
    if (dh_example_graph("gelu_tanh_chain", &graph_mp, &graph_len) < 0)
        return -1;
    if (dh_init(&daemon_, "access_jobs") < 0)
        return -1;
    /* other users reach the socket; the cache directory's own mode decides about the cache */
    if (chmod(daemon_.root, 0755) < 0)
        return -1;
    dh_opts o = {.gpus = "0", .delay_ms = DELAY_MS};
    return dh_start(&daemon_, &o, 30.0);
}

static int teardown(void **state)
{
    (void)state;
    dh_cleanup(&daemon_);
    free(graph_mp);
    return 0;
}

/* What a client did, as a child reports it. */
typedef struct outcome {
    char code[16]; /* "" when ok, else the error code */
    uint64_t job;
    int64_t owner, priority;
    char state[16];
    bool joined;
} outcome;

typedef enum { OP_SUBMIT, OP_CANCEL, OP_STATUS } op_kind;

typedef struct op {
    op_kind kind;
    int64_t m;        /* submit: the shape M (which job) */
    int64_t priority; /* submit */
    uint64_t job;     /* cancel, status */
} op;

static void run_op(dh_conn *c, const op *o, outcome *out)
{
    memset(out, 0, sizeof(*out));
    dh_req r;
    if (o->kind == OP_SUBMIT) {
        dh_req_begin(&r, c, "submit", 4);
        dh_req_raw(&r, "graph", graph_mp, graph_len);
        dh_req_key(&r, "shapes");
        dh_shape s[2] = {{"M", o->m}, {"N", 256}};
        dh_req_shapes(&r, s, 2);
        dh_req_num(&r, "budget_s", 60);
        dh_req_int(&r, "priority", o->priority);
    } else {
        dh_req_begin(&r, c, o->kind == OP_CANCEL ? "cancel" : "status", 1);
        dh_req_int(&r, "job", (int64_t)o->job);
    }
    const msgpack_object *rep = NULL;
    if (dh_call(c, &r, 10.0, &rep) < 0) {
        snprintf(out->code, sizeof(out->code), "no reply");
        return;
    }
    if (!dh_ok(rep)) {
        dh_str(rep, "error.code", out->code, sizeof(out->code));
        if (!out->code[0])
            snprintf(out->code, sizeof(out->code), "?");
        return;
    }
    out->job = (uint64_t)dh_int(rep, "job.job", 0);
    out->owner = dh_int(rep, "job.owner", -1);
    out->priority = dh_int(rep, "job.priority", -1000);
    dh_str(rep, "job.state", out->state, sizeof(out->state));
    out->joined = dh_bool(rep, "joined", false);
}

/* Runs o as uid with gid and the supplementary groups given (n of them), in a child. */
static outcome as_user(int uid, gid_t gid, const gid_t *groups, int n, const op *o)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        outcome out;
        if (setgroups((size_t)n, groups) < 0 || setresgid(gid, gid, gid) < 0 ||
            setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0)
            _exit(2);
        dh_conn c;
        if (dh_connect(&c, daemon_.sock) < 0)
            _exit(3);
        run_op(&c, o, &out);
        dh_close(&c);
        _exit(write(fds[1], &out, sizeof(out)) == (ssize_t)sizeof(out) ? 0 : 4);
    }
    close(fds[1]);
    outcome out;
    ssize_t got = read(fds[0], &out, sizeof(out));
    close(fds[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || got != (ssize_t)sizeof(out))
        fail_msg("client as uid %d: child status 0x%x", uid, st);
    return out;
}

static outcome as_member(int uid, const op *o)
{
    return as_user(uid, sock_group, NULL, 0, o);
}

static outcome as_admin(const op *o)
{
    gid_t admin = ADMIN_GID;
    return as_user(USER_C, sock_group, &admin, 1, o);
}

static outcome as_root(const op *o)
{
    dh_conn c;
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    outcome out;
    run_op(&c, o, &out);
    dh_close(&c);
    return out;
}

static void expect_ok(const outcome *r, const char *what)
{
    if (r->code[0])
        fail_msg("%s: error %s, expected to be allowed", what, r->code);
}

static void expect_eperm(const outcome *r, const char *what)
{
    if (strcmp(r->code, "EPERM") != 0)
        fail_msg("%s: %s, expected EPERM", what, r->code[0] ? r->code : "allowed");
}

static bool log_has(const char *needle)
{
    FILE *f = fopen(daemon_.log, "r");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* open(2) of path as uid/gid in a child: 0 or the errno. */
static int open_as(int uid, gid_t gid, const char *path)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 ||
            setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0)
            _exit(255);
        int fd = open(path, O_RDONLY);
        _exit(fd < 0 ? errno & 0xff : 0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 255);
    return WEXITSTATUS(st);
}

static void test_job_access(void **state)
{
    (void)state;
    struct stat st;
    assert_int_equal(stat(daemon_.sock, &st), 0);
    sock_group = st.st_gid;
    if (sock_group == USER_A || sock_group == ADMIN_GID)
        skip(); /* cannot tell members from others */
    char needle[256];

    /* ---- part 1: no admin group ---- */
    outcome a1 = as_member(USER_A, &(op){OP_SUBMIT, .m = 64});
    expect_ok(&a1, "A submits");
    if (a1.owner != USER_A)
        fail_msg("A's job %llu: owner %lld, expected %d", (unsigned long long)a1.job,
                 (long long)a1.owner, USER_A);
    outcome a2 = as_member(USER_A, &(op){OP_SUBMIT, .m = 128, .priority = -10});
    expect_ok(&a2, "A submits at priority -10");
    outcome r = as_member(USER_A, &(op){OP_SUBMIT, .m = 192, .priority = 5});
    expect_eperm(&r, "A submits at priority 5");
    r = as_member(USER_B, &(op){OP_SUBMIT, .m = 192, .priority = 1});
    expect_eperm(&r, "B submits at priority 1");

    r = as_member(USER_B, &(op){OP_CANCEL, .job = a1.job});
    expect_eperm(&r, "B cancels A's job");
    r = as_member(USER_B, &(op){OP_STATUS, .job = a1.job});
    expect_ok(&r, "B reads A's job");
    if (strcmp(r.state, "queued") != 0 && strcmp(r.state, "running") != 0)
        fail_msg("A's job is %s after B's refused cancel", r.state);
    snprintf(needle, sizeof(needle), "uid %d may not cancel job %llu of uid %d", USER_B,
             (unsigned long long)a1.job, USER_A);
    if (!log_has(needle))
        fail_msg("the log has no line '%s'", needle);

    /* duplicates: B's joins without raising A's priority; A's own raises it */
    r = as_member(USER_B, &(op){OP_SUBMIT, .m = 128, .priority = 0});
    expect_ok(&r, "B submits a duplicate of A's job");
    if (!r.joined || r.job != a2.job || r.owner != USER_A || r.priority != -10)
        fail_msg("B's duplicate: job %llu joined %d owner %lld priority %lld, expected job %llu "
                 "of uid %d still at -10",
                 (unsigned long long)r.job, r.joined, (long long)r.owner, (long long)r.priority,
                 (unsigned long long)a2.job, USER_A);
    r = as_member(USER_A, &(op){OP_SUBMIT, .m = 128, .priority = 0});
    expect_ok(&r, "A submits a duplicate of its own job");
    if (!r.joined || r.job != a2.job || r.priority != 0)
        fail_msg("A's duplicate: job %llu joined %d priority %lld, expected job %llu at 0",
                 (unsigned long long)r.job, r.joined, (long long)r.priority,
                 (unsigned long long)a2.job);

    r = as_member(USER_A, &(op){OP_CANCEL, .job = a2.job});
    expect_ok(&r, "A cancels its own job");
    outcome b1 = as_member(USER_B, &(op){OP_SUBMIT, .m = 256});
    expect_ok(&b1, "B submits");
    r = as_root(&(op){OP_CANCEL, .job = b1.job});
    expect_ok(&r, "root cancels B's job");
    snprintf(needle, sizeof(needle), "job %llu of uid %d cancel", (unsigned long long)b1.job,
             USER_B);
    if (!log_has(needle) || !log_has("by uid 0"))
        fail_msg("the log does not say that uid 0 cancelled job %llu of uid %d",
                 (unsigned long long)b1.job, USER_B);

    /* ---- part 2: the admin group, and a cache once readable by everyone ---- */
    int wst = 0;
    if (dh_stop(&daemon_, SIGTERM, 10.0, &wst) < 0 || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
        fail_msg("ktuned did not exit 0 on SIGTERM (0x%x)", wst);
    char data[400];
    snprintf(data, sizeof(data), "%s/data.mdb", daemon_.cache);
    assert_int_equal(chmod(daemon_.cache, 0755), 0);
    assert_int_equal(chmod(data, 0644), 0);
    dh_opts o = daemon_.opts;
    char admin[16];
    snprintf(admin, sizeof(admin), "%d", ADMIN_GID);
    o.args[0] = "--admin-group";
    o.args[1] = admin;
    assert_int_equal(dh_start(&daemon_, &o, 30.0), 0);

    const char *paths[] = {daemon_.cache, data};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(stat(paths[i], &st), 0);
        if (st.st_mode & 0007)
            fail_msg("%s has mode %04o: readable by users outside its group", paths[i],
                     (unsigned)(st.st_mode & 07777));
    }
    int e = open_as(USER_A, USER_A, data);
    if (e != EACCES)
        fail_msg("uid %d outside the cache's group opened %s: %s, expected EACCES", USER_A, data,
                 e ? strerror(e) : "success");
    assert_int_equal(stat(daemon_.cache, &st), 0);
    e = open_as(USER_A, st.st_gid, data);
    if (e != 0)
        fail_msg("uid %d in the cache's group %u cannot read %s: %s", USER_A, (unsigned)st.st_gid,
                 data, strerror(e));

    r = as_member(USER_B, &(op){OP_CANCEL, .job = a1.job});
    expect_eperm(&r, "B cancels A's job (admin group configured)");
    r = as_admin(&(op){OP_CANCEL, .job = a1.job});
    expect_ok(&r, "C (admin group) cancels A's job");
    snprintf(needle, sizeof(needle), "by uid %d", USER_C);
    if (!log_has(needle))
        fail_msg("the log does not name uid %d as the canceller", USER_C);
    r = as_member(USER_B, &(op){OP_SUBMIT, .m = 320, .priority = 5});
    expect_eperm(&r, "B submits at priority 5 (admin group configured)");
    outcome c1 = as_admin(&(op){OP_SUBMIT, .m = 320, .priority = 5});
    expect_ok(&c1, "C (admin group) submits at priority 5");
    if (c1.owner != USER_C || c1.priority != 5)
        fail_msg("C's job: owner %lld priority %lld", (long long)c1.owner, (long long)c1.priority);
    r = as_admin(&(op){OP_CANCEL, .job = c1.job});
    expect_ok(&r, "C cancels its job");

    assert_true(dh_alive(&daemon_));
    if (dh_stop(&daemon_, SIGTERM, 10.0, &wst) < 0 || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
        fail_msg("ktuned did not exit 0 on SIGTERM (0x%x)", wst);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("skipped: the job access drill needs root (to run clients as other uids)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_job_access, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
