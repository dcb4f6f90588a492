/* Drill (issue 7): a full disk. The test enters a private mount namespace (unshare(2): as root
 * CLONE_NEWNS; otherwise a user namespace too, as `unshare -rm` does), mounts a 16 MiB tmpfs and
 * puts ktuned's cache on it (socket and logs stay outside). With a job running it fills the
 * disk, then:
 *   - the running job ends failed, its error naming the full disk (or, if every write it still
 *     had to do fit in pages LMDB had free, done);
 *   - a submission whose journal entry needs new pages (64 adds, names of 255 bytes) is refused
 * ENOSPC with a message naming the full disk, and the daemon logs it;
 *   - the daemon keeps running and answers hello, stats and status;
 *   - after the filler is removed, the same job submitted again finishes with a record,
 *     resuming from the trials logged before the disk filled;
 *   - every stored value passes its checksum and decodes, and LMDB opens read-write.
 * And (issue 16) caches opened on a disk that is already full, with the real programs: creating a
 * new cache (ktuned, `ktune tune --local`, `ktune cache merge`) fails with "No space left on
 * device" (it was a SIGBUS: LMDB stores into its sparse lock file through a map) and leaves no
 * half-made file behind; a sound cache lacking only lock.mdb is read (`cache ls`, `cache check`
 * say ok) and refused by writers with the same words, never called damaged, its bytes unchanged.
 * Exit 77 when no mount namespace can be made (not root and no user namespaces). */
#include "daemon_harness.h"
#include "drill_util.h"

#include "cache/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

/* room, once the filler goes, for the rest of a job whose 60 s budget buys a long exploration */
#define DISK_BYTES "16m"
#define BIG_NODES  64

static dh_daemon daemon_;
static char disk[260], filler[280];
static void *graph_mp;
static size_t graph_len;

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, text, strlen(text));
    int e = errno;
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -e;
}

/* A private mount namespace for this process and its children; -errno when none can be made. */
static int enter_mount_ns(void)
{
    if (unshare(CLONE_NEWNS) < 0) {
        uid_t uid = geteuid();
        gid_t gid = getegid();
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
            return -errno;
        char map[64];
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
        if (write_file("/proc/self/setgroups", "deny") < 0 ||
            write_file("/proc/self/uid_map", map) < 0)
            return -EPERM;
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
        if (write_file("/proc/self/gid_map", map) < 0)
            return -EPERM;
    }
    if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return -errno;
    return 0;
}

/* The test's directory with the small tmpfs mounted at disk/. */
static int mount_disk(const char *tag)
{
    if (dh_init(&daemon_, tag) < 0)
        return -1;
    snprintf(disk, sizeof(disk), "%.250s/disk", daemon_.root);
    if (mkdir(disk, 0755) < 0 ||
        mount("none", disk, "tmpfs", MS_NOSUID | MS_NODEV, "size=" DISK_BYTES) < 0) {
        fprintf(stderr, "cannot mount a tmpfs on %s: %s\n", disk, strerror(errno));
        return -1;
    }
    snprintf(filler, sizeof(filler), "%s/filler", disk);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    if (dh_example_graph("gelu_tanh_chain", &graph_mp, &graph_len) < 0 || mount_disk("disk") < 0)
        return -1;
    snprintf(daemon_.cache, sizeof(daemon_.cache), "%s/cache", disk);
    dh_opts o = {.gpus = "0", .delay_ms = 20, .log_evals = true};
    return dh_start(&daemon_, &o, 30.0);
}

/* The disk without a daemon (test_full_disk_at_open starts the programs itself). */
static int setup_bare(void **state)
{
    (void)state;
    return mount_disk("disk-open");
}

static int teardown(void **state)
{
    (void)state;
    if (daemon_.pid > 0)
        dh_stop(&daemon_, SIGKILL, 5.0, NULL);
    if (disk[0])
        umount2(disk, MNT_DETACH);
    dh_cleanup(&daemon_);
    free(graph_mp);
    graph_mp = NULL;
    return 0;
}

/* Writes the filler until the disk refuses a single byte; its size. */
static size_t fill_disk(void)
{
    int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    static char block[65536];
    size_t total = 0;
    for (size_t chunk = sizeof(block); chunk >= 1; chunk /= 2) {
        for (;;) {
            ssize_t n = write(fd, block, chunk);
            if (n <= 0) {
                assert_int_equal(errno, ENOSPC);
                break;
            }
            total += (size_t)n;
        }
    }
    close(fd);
    return total;
}

static size_t count_evals(void)
{
    dh_eval *ev = NULL;
    size_t n = 0;
    assert_int_equal(dh_read_evals(daemon_.fake_log, &ev, &n), 0);
    free(ev);
    return n;
}

static dh_job submit_m(dh_conn *c, int64_t m)
{
    dh_shape s[2] = {{"M", m}, {"N", 256}};
    dh_submit_args a = {.graph = graph_mp,
                        .graph_len = graph_len,
                        .shapes = s,
                        .n_shapes = 2,
                        .budget_s = 60,
                        .gpu = -1};
    dh_job j;
    if (dh_submit(c, &a, 10.0, &j, NULL) < 0)
        fail_msg("submit M=%lld failed", (long long)m);
    return j;
}

/* A large graph the search still takes (ktuned refuses more than 64 canonical nodes before it
 * writes anything): n adds in a chain, each adding an input of its own, every name as long as a
 * name may be (255 bytes), so its journal entry spans many pages. */
static char *big_graph_json(int n)
{
    char pad[241];
    memset(pad, 'p', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    size_t cap = (size_t)n * 1200 + 1024, off = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    off += (size_t)snprintf(s + off, cap - off, "{\"name\": \"drill_long_names\", \"inputs\": {");
    for (int i = 0; i <= n; i++)
        off += (size_t)snprintf(s + off, cap - off,
                                "%s\"in_%s_%05d\": {\"dtype\": \"f32\", \"shape\": [\"M\", 64]}",
                                i ? ", " : "", pad, i);
    off += (size_t)snprintf(s + off, cap - off, "}, \"nodes\": [");
    for (int i = 0; i < n; i++) {
        char prev[300];
        if (i)
            snprintf(prev, sizeof(prev), "sum_%s_%05d", pad, i - 1);
        else
            snprintf(prev, sizeof(prev), "in_%s_%05d", pad, n);
        off += (size_t)snprintf(s + off, cap - off,
                                "%s{\"out\": \"sum_%s_%05d\", \"op\": \"add\", "
                                "\"in\": [\"%s\", \"in_%s_%05d\"]}",
                                i ? ", " : "", pad, i, prev, pad, i);
    }
    off += (size_t)snprintf(s + off, cap - off, "], \"outputs\": [\"sum_%s_%05d\"]}", pad, n - 1);
    assert_true(off < cap);
    return s;
}

static bool names_full_disk(const char *msg)
{
    return strstr(msg, "No space left on device") || strstr(msg, "ENOSPC");
}

static bool log_has(const char *what)
{
    char *text = NULL;
    size_t len = 0;
    if (kt_read_file(daemon_.log, (size_t)1 << 30, &text, &len, NULL) < 0)
        return false;
    bool found = strstr(text, what) != NULL;
    free(text);
    return found;
}

static void test_full_disk(void **state)
{
    (void)state;
    dh_conn c;
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    dh_job a = submit_m(&c, 64);
    double t_end = dh_now() + 60 * dh_scale();
    while (count_evals() < 5) {
        if (dh_now() > t_end)
            fail_msg("the job never got going");
        usleep(5000);
    }
    size_t filled = fill_disk();
    size_t evals_at_fill = count_evals();

    /* the running job: failed naming the full disk, or done if its writes fit in free pages */
    if (dh_wait_job(&c, a.id, NULL, 60 * dh_scale(), 0.05, &a) < 0)
        fail_msg("the job did not end after the disk filled (%s)", a.state);
    if (strcmp(a.state, "failed") == 0) {
        if (!names_full_disk(a.error))
            fail_msg("the job failed on a full disk, but its error does not say so: %s", a.error);
    } else if (strcmp(a.state, "done") != 0) {
        fail_msg("the job ended %s: %s", a.state, a.error);
    }

    /* a submission needing new pages: ENOSPC, named */
    char *json = big_graph_json(BIG_NODES);
    void *big = NULL;
    size_t big_len = 0;
    assert_int_equal(drill_graph_msgpack(json, &big, &big_len), 0);
    free(json);
    dh_shape s[1] = {{"M", 64}};
    dh_req r;
    dh_req_begin(&r, &c, "submit", 3);
    dh_req_raw(&r, "graph", big, big_len);
    dh_req_key(&r, "shapes");
    dh_req_shapes(&r, s, 1);
    dh_req_num(&r, "budget_s", 5);
    const msgpack_object *rep;
    assert_int_equal(dh_call(&c, &r, 30.0, &rep), 0);
    free(big);
    char code[32], msg[400];
    dh_str(rep, "error.code", code, sizeof(code));
    dh_str(rep, "error.msg", msg, sizeof(msg));
    if (dh_ok(rep) || strcmp(code, "ENOSPC") != 0 || !names_full_disk(msg)) {
        char d[400];
        dh_describe(rep, d, sizeof(d));
        fail_msg("a submission on a full disk got %s, expected ENOSPC naming the full disk", d);
    }
    if (strchr(msg, '\n'))
        fail_msg("the error is more than one line: %s", msg);
    print_message("disk full (%zu bytes of filler): the running job %s%s%s; submit: %s: %s\n",
                  filled, a.state, a.error[0] ? ": " : "", a.error, code, msg);

    /* still serving */
    assert_true(dh_alive(&daemon_));
    assert_int_equal(dh_hello(&c, 5.0, NULL), 0);
    dh_req_begin(&r, &c, "stats", 0);
    assert_int_equal(dh_call(&c, &r, 5.0, &rep), 0);
    assert_true(dh_ok(rep));
    dh_job st;
    assert_int_equal(dh_status(&c, a.id, 5.0, &st), 0);
    if (!log_has("No space left on device"))
        fail_msg("the daemon's log does not mention the full disk");

    /* space again: the job finishes, resuming from what was logged before the disk filled */
    assert_int_equal(unlink(filler), 0);
    dh_job a2 = strcmp(a.state, "done") == 0 ? a : submit_m(&c, 64);
    if (dh_wait_job(&c, a2.id, NULL, 60 * dh_scale(), 0.05, &a2) < 0 ||
        strcmp(a2.state, "done") != 0 || !a2.record)
        fail_msg("after space was freed the job ended %s (record %d): %s", a2.state, a2.record,
                 a2.error);
    dh_close(&c);
    int wst = 0;
    if (dh_stop(&daemon_, SIGTERM, 10.0, &wst) < 0 || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
        fail_msg("ktuned did not exit 0 on SIGTERM (0x%x)", wst);

    drill_cache_report cr;
    assert_int_equal(drill_cache_check(daemon_.cache, &cr), 0);
    char desc[400];
    drill_cache_describe(&cr, desc, sizeof(desc));
    print_message(
        "space freed: job %llu done (%d trials, %d resumed from the log; %zu evals before "
        "the disk filled); cache: %s\n",
        (unsigned long long)a2.id, a2.trials, a2.resumed, evals_at_fill, desc);
    assert_int_equal(cr.records_bad + cr.trials_bad + cr.jobs_bad + cr.listed_corrupt, 0);
    assert_true(cr.listed > 0);
    if (a2.id != a.id && a2.resumed <= 0)
        fail_msg("the resubmitted job resumed nothing from the trial log");
}

/* Runs argv; fails the test unless it exited (no signal) with status want and, when want is not
 * 0, said "No space left on device" and not "damaged" in one line. */
static void expect_run(char *const argv[], int want, const char *what)
{
    int st = 0;
    char out[4096];
    assert_int_equal(drill_run(argv, -1, -1, 30.0 * dh_scale(), &st, out, sizeof(out)), 0);
    if (!WIFEXITED(st))
        fail_msg("%s: killed by signal %d (%s); said: %s", what, WTERMSIG(st),
                 strsignal(WTERMSIG(st)), out);
    if (WEXITSTATUS(st) != want)
        fail_msg("%s: exit %d, expected %d; said: %s", what, WEXITSTATUS(st), want, out);
    if (want != 0 && (!names_full_disk(out) || strstr(out, "damaged")))
        fail_msg("%s: expected a line naming the full disk (and no 'damaged'); said: %s", what,
                 out);
    print_message("%s: exit %d: %s", what, WEXITSTATUS(st), want ? out : "\n");
}

static char *read_all(const char *path, size_t *len)
{
    char *text = NULL;
    assert_int_equal(kt_read_file(path, (size_t)64 << 20, &text, len, NULL), 0);
    return text;
}

static void test_full_disk_at_open(void **state)
{
    (void)state;
    const char *ktune = getenv("KTUNE_BIN"), *ktuned = getenv("KTUNED_BIN");
    const char *fake = getenv("KTUNE_FAKE_WORKER"), *root = getenv("KTUNE_SOURCE_ROOT");
    if (!ktune || !ktuned || !fake || !root)
        fail_msg("KTUNE_BIN, KTUNED_BIN, KTUNE_FAKE_WORKER and KTUNE_SOURCE_ROOT must be set");
    setenv("KTUNE_WORKER", fake, 1); /* for tune --local */
    char src[300], sound[300], fresh[300], sock[300], graph[600], data[320], lock[320];
    snprintf(src, sizeof(src), "%.250s/src", daemon_.root);
    snprintf(sound, sizeof(sound), "%.250s/sound", disk);
    snprintf(fresh, sizeof(fresh), "%.250s/new", disk);
    snprintf(sock, sizeof(sock), "%.250s/k.sock", daemon_.root);
    snprintf(graph, sizeof(graph), "%.500s/examples/gelu_tanh_chain.json", root);
    snprintf(data, sizeof(data), "%s/data.mdb", sound);
    snprintf(lock, sizeof(lock), "%s/lock.mdb", sound);
    /* a sound cache outside the disk (a merge source) and one on it, whose lock file goes */
    cache_env *env = NULL;
    kt_err e = {0};
    assert_int_equal(cache_open(src, 0, NULL, &env, &e), 0);
    cache_close(env);
    assert_int_equal(cache_open(sound, 0, NULL, &env, &e), 0);
    cache_close(env);
    assert_int_equal(unlink(lock), 0);
    size_t len0 = 0, len1 = 0;
    char *before = read_all(data, &len0);
    size_t filled = fill_disk();
    print_message("disk full (%zu bytes of filler)\n", filled);

    /* a new cache: every writer says so and leaves nothing half made */
    char *merge_new[] = {(char *)ktune, "cache", "merge", src, "--cache", fresh, NULL};
    expect_run(merge_new, 1, "ktune cache merge into a new cache");
    char *daemon_new[] = {(char *)ktuned, "--socket",  sock,     "--cache", fresh,
                          "--config",     "/dev/null", "--gpus", "0",       NULL};
    expect_run(daemon_new, 1, "ktuned on a new cache");
    char *tune_new[] = {(char *)ktune, "tune", "--local", graph, "--shape", "M=64,N=256",
                        "--budget",    "5s",   "--cache", fresh, NULL};
    expect_run(tune_new, 1, "ktune tune --local into a new cache");
    char fresh_data[320];
    snprintf(fresh_data, sizeof(fresh_data), "%s/data.mdb", fresh);
    assert_int_equal(access(fresh_data, F_OK), -1);

    /* a sound cache lacking only lock.mdb: readable, refused by writers, never "damaged" */
    char *ls[] = {(char *)ktune, "cache", "ls", "--cache", sound, NULL};
    expect_run(ls, 0, "ktune cache ls");
    char *check[] = {(char *)ktune, "cache", "check", "--cache", sound, NULL};
    expect_run(check, 0, "ktune cache check");
    char *merge_sound[] = {(char *)ktune, "cache", "merge", src, "--cache", sound, NULL};
    expect_run(merge_sound, 1, "ktune cache merge into it");
    char *daemon_sound[] = {(char *)ktuned, "--socket",  sock,     "--cache", sound,
                            "--config",     "/dev/null", "--gpus", "0",       NULL};
    expect_run(daemon_sound, 1, "ktuned on it");
    char *after = read_all(data, &len1);
    assert_true(len0 == len1 && memcmp(before, after, len0) == 0);
    free(before);
    free(after);

    /* space again: both work */
    assert_int_equal(unlink(filler), 0);
    expect_run(merge_new, 0, "ktune cache merge into a new cache, with space");
    expect_run(merge_sound, 0, "ktune cache merge into the sound cache, with space");
    drill_cache_report cr;
    assert_int_equal(drill_cache_check(sound, &cr), 0);
    assert_int_equal(drill_cache_check(fresh, &cr), 0);
}

int main(void)
{
    int rc = enter_mount_ns();
    if (rc < 0) {
        printf("skipped: no private mount namespace (%s): the full-disk drill needs root or user "
               "namespaces\n",
               strerror(-rc));
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_disk_at_open, setup_bare, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
