/* Drill (issue 7): a client without access to the socket is refused. ktuned binds its socket
 * 0660, owned by its user and group `ktune` (or its own group where `ktune` does not exist:
 * daemon/README.md, "Socket access"), so the group is the access control. As root, the test
 * runs clients as other users (setresgid/setresuid in a forked child):
 *   - uid/gid 65534 (nobody, not in the socket's group): connect(2) fails with EACCES, and
 *     `ktune jobs` exits 1 with one line naming the socket, the permission error and the group
 *     that admits clients;
 *   - uid 65534 with the socket's group as its gid: admitted (`ktune jobs` exits 0);
 *   - the owner (root) connects and is answered, before and after; the daemon keeps running.
 * And a socket someone else bound first (issue 16, item 10): a client running as root refuses a
 * socket file owned by uid 65534, and one owned by root on which a uid-65534 process listens,
 * with -EPERM from ktune_connect and one line from `ktune gpus` (the impostor answers hello as
 * ktuned would); it accepts the first when KTUNE_SERVICE_USER names that user, and the daemon
 * started by root.
 * Skipped (77) when not run as root: another uid cannot be taken. */
#include "daemon_harness.h"
#include "drill_util.h"

#include "client/ktune.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define NOBODY 65534

static dh_daemon daemon_;
static pid_t impostor_pid; /* killed by teardown when a check fails */

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
    if (impostor_pid > 0) {
        kill(impostor_pid, SIGKILL);
        waitpid(impostor_pid, NULL, 0);
        impostor_pid = 0;
    }
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

/* ---- a socket someone else bound first ---- */

/* Serves every connection to listening socket fd like ktuned's hello would: reads the request,
 * answers {"id": 1, "ok": true, "protocol": 1, ...}, until killed. */
static void serve_as_impostor(int fd)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 7);
    const char *keys[] = {"id", "ok", "version", "protocol", "pid", "uid", "gpus"};
    for (int i = 0; i < 7; i++) {
        msgpack_pack_str_with_body(&pk, keys[i], strlen(keys[i]));
        if (i == 1)
            msgpack_pack_true(&pk);
        else if (i == 2)
            msgpack_pack_str_with_body(&pk, "0.1.0", 5);
        else
            msgpack_pack_int(&pk, i == 4 ? (int)getpid() : i == 5 ? 0 : 1);
    }
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            continue;
        char buf[4096];
        if (read(c, buf, sizeof(buf)) > 0)
            (void)!write(c, sb.data, sb.size);
        while (read(c, buf, sizeof(buf)) > 0)
            ;
        close(c);
    }
}

static int bound_socket(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -1;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0666) < 0)
        return -1;
    return fd;
}

/* A child as uid 65534 listening on path: it binds the path itself, or listens on the socket
 * root bound (root_bound >= 0). Returns once it listens. */
static pid_t impostor(const char *path, int root_bound)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
            setresuid(NOBODY, NOBODY, NOBODY) < 0)
            _exit(2);
        int fd = root_bound >= 0 ? root_bound : bound_socket(path);
        if (fd < 0 || listen(fd, 16) < 0)
            _exit(3);
        (void)!write(ready[1], "+", 1);
        serve_as_impostor(fd);
    }
    close(ready[1]);
    impostor_pid = pid;
    char b;
    if (read(ready[0], &b, 1) != 1)
        fail_msg("the impostor did not start listening on %s", path);
    close(ready[0]);
    return pid;
}

static void stop_impostor(pid_t pid, const char *path)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    impostor_pid = 0;
    unlink(path);
}

static void refused_by_root(const char *path, const char *why)
{
    ktune_client *c = NULL;
    ktune_error err;
    int rc = ktune_connect(path, &c, &err);
    if (rc != -EPERM || !strstr(err.msg, "not trusting") || !strstr(err.msg, why)) {
        ktune_disconnect(c);
        fail_msg("root's ktune_connect to %s: %d '%s', expected -EPERM 'not trusting ... %s'", path,
                 rc, rc ? err.msg : "connected and trusted the impostor", why);
    }
    print_message("ktune_connect: %s\n", err.msg);
}

static void test_squatted_socket(void **state)
{
    (void)state;
    /* inside the daemon's temporary directory, which dh_cleanup removes with what ktuned left */
    char dir[sizeof(daemon_.root) + 16], path[sizeof(dir) + 16];
    snprintf(dir, sizeof(dir), "%s/squat", daemon_.root);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(chmod(dir, 01777), 0); /* like /tmp: anyone may bind there */
    snprintf(path, sizeof(path), "%s/kt.sock", dir);

    /* the README's old pattern: someone bound the path before root's ktuned */
    pid_t pid = impostor(path, -1);
    refused_by_root(path, "the file belongs to uid 65534");
    const char *bin = getenv("KTUNE_BIN");
    assert_non_null(bin);
    char *argv[] = {(char *)bin, "gpus", "--socket", path, NULL};
    char out[2048];
    int status = 0;
    assert_int_equal(drill_run(argv, -1, -1, 20.0, &status, out, sizeof(out)), 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1 || !strstr(out, "not trusting") ||
        strchr(out, '\n') != strrchr(out, '\n'))
        fail_msg("ktune gpus as root on the impostor's socket: status 0x%x, expected exit 1 and "
                 "one line saying it is not trusted: %s",
                 status, out);
    print_message("ktune gpus: %s", out);
    /* root's ktuned does not start there, and says who holds the path */
    char cache[sizeof(dir) + 16], needle[64];
    snprintf(cache, sizeof(cache), "%s/cache", dir);
    char *kd[] = {getenv("KTUNED_BIN"),
                  "--socket",
                  path,
                  "--cache",
                  cache,
                  "--gpus",
                  "0",
                  "--worker",
                  getenv("KTUNE_FAKE_WORKER"),
                  "--config",
                  "/dev/null",
                  NULL};
    assert_non_null(kd[0]);
    assert_non_null(kd[8]);
    assert_int_equal(drill_run(kd, -1, -1, 30.0, &status, out, sizeof(out)), 0);
    snprintf(needle, sizeof(needle), "is in use: pid %d (uid %d)", (int)pid, NOBODY);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1 || !strstr(out, needle))
        fail_msg("ktuned on the impostor's socket: status 0x%x, expected exit 1 and '%s': %s",
                 status, needle, out);
    print_message("ktuned: %s", strstr(out, "cannot start"));
    /* unless that user is the service user */
    struct passwd *pw = getpwnam("nobody");
    if (pw && pw->pw_uid == NOBODY) {
        setenv("KTUNE_SERVICE_USER", "nobody", 1);
        ktune_client *c = NULL;
        ktune_error err;
        int rc = ktune_connect(path, &c, &err);
        unsetenv("KTUNE_SERVICE_USER");
        if (rc < 0)
            fail_msg("with KTUNE_SERVICE_USER=nobody: %s", err.msg);
        ktune_disconnect(c);
    }
    stop_impostor(pid, path);

    /* a file root owns, served by someone else */
    int fd = bound_socket(path);
    assert_true(fd >= 0);
    pid = impostor(path, fd);
    close(fd);
    refused_by_root(path, "the process listening on it runs as uid 65534");
    stop_impostor(pid, path);

    /* ktuned started by root is trusted */
    ktune_client *c = NULL;
    ktune_error err;
    if (ktune_connect(daemon_.sock, &c, &err) < 0)
        fail_msg("root's ktune_connect to its own ktuned: %s", err.msg);
    ktune_disconnect(c);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("skipped: the socket access drill needs root (to run clients as another uid)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_socket_access, setup, teardown),
        cmocka_unit_test_setup_teardown(test_squatted_socket, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
