/* Drill (issue 7): a client without access to the socket is refused. ktuned binds its socket
 * 0660, owned by its user and group `ktune` (or its own group where `ktune` does not exist:
 * daemon/README.md, "Socket access"), so the group is the access control. As root, the test
 * runs clients as other users (setresgid/setresuid in a forked child):
 *   - uid/gid 65534 (nobody, not in the socket's group): connect(2) fails with EACCES, and
 *     `ktune jobs` exits 1 with one line naming the socket, the permission error and the group
 *     that admits clients;
 *   - uid 65534 with the socket's group as its gid: admitted (`ktune jobs` exits 0);
 *   - the owner (root) connects and is answered, before and after; the daemon keeps running.
 * Skipped (77) when not run as root: another uid cannot be taken. */
#include "daemon_harness.h"
#include "drill_util.h"

#include <errno.h>
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

#define NOBODY 65534

static dh_daemon daemon_;

static int setup(void **state)
{
    (void)state;
    if (dh_init(&daemon_, "access") < 0)
        return -1;
    /* only the socket's own mode may refuse: let every user reach the directory */
    if (chmod(daemon_.root, 0755) < 0)
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

/* connect(2) as uid/gid in a child: its exit status is the errno (0: connected). */
static int connect_as(int uid, int gid)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) < 0 ||
            setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0)
            _exit(255);
        dh_conn c;
        int rc = dh_connect(&c, daemon_.sock);
        if (rc == 0) {
            rc = dh_hello(&c, 5.0, NULL);
            dh_close(&c);
        }
        _exit(rc < 0 ? (-rc & 0xff) : 0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_not_equal(WEXITSTATUS(st), 255);
    return WEXITSTATUS(st);
}

static void owner_served(void)
{
    dh_conn c;
    assert_int_equal(dh_connect(&c, daemon_.sock), 0);
    int64_t pid = 0;
    assert_int_equal(dh_hello(&c, 5.0, &pid), 0);
    assert_int_equal(pid, daemon_.pid);
    dh_close(&c);
}

static void test_socket_access(void **state)
{
    (void)state;
    struct stat st;
    assert_int_equal(stat(daemon_.sock, &st), 0);
    if ((st.st_mode & 0777) != 0660)
        fail_msg("the socket's mode is %03o, expected 0660", st.st_mode & 0777);
    int group = (int)st.st_gid;
    if (group == NOBODY)
        skip(); /* cannot tell members from others */
    owner_served();

    /* nobody: refused by the kernel, before the daemon sees anything */
    int e = connect_as(NOBODY, NOBODY);
    if (e != EACCES)
        fail_msg("uid %d outside the socket's group: connect gave %s, expected EACCES", NOBODY,
                 e ? strerror(e) : "success");
    const char *bin = getenv("KTUNE_BIN");
    assert_non_null(bin);
    char *argv[] = {(char *)bin, "jobs", "--socket", daemon_.sock, NULL};
    char out[4096];
    int status = 0;
    assert_int_equal(drill_run(argv, NOBODY, NOBODY, 30.0, &status, out, sizeof(out)), 0);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 1 || !strstr(out, daemon_.sock) ||
        !strstr(out, "Permission denied") || !strstr(out, "group") ||
        strchr(out, '\n') != strrchr(out, '\n'))
        fail_msg("ktune jobs as uid %d: exit %d, expected 1 and one line naming the socket, the "
                 "permission error and the group: %s",
                 NOBODY, WEXITSTATUS(status), out);
    print_message("refused (uid %d, gid %d): %s", NOBODY, NOBODY, out);

    /* a member of the socket's group is admitted */
    e = connect_as(NOBODY, group);
    if (e != 0)
        fail_msg("uid %d with the socket's group %d as its gid: %s, expected to be served", NOBODY,
                 group, strerror(e));
    assert_int_equal(drill_run(argv, NOBODY, group, 30.0, &status, out, sizeof(out)), 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("ktune jobs as uid %d gid %d: exit status 0x%x: %s", NOBODY, group, status, out);
    print_message("admitted (uid %d, gid %d, the socket's group)\n", NOBODY, group);

    owner_served();
    assert_true(dh_alive(&daemon_));
    int wst = 0;
    if (dh_stop(&daemon_, SIGTERM, 10.0, &wst) < 0 || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
        fail_msg("ktuned did not exit 0 on SIGTERM (0x%x)", wst);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("skipped: the socket access drill needs root (to run clients as another uid)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_socket_access, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
