/* ktuned's configuration (daemon/config.c): defaults, the file (comments, quoting, errors with
 * their line), the command line winning over the file, and bad values. */
#include "daemon/config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static char conf_path[64];

static void write_conf(const char *text)
{
    FILE *f = fopen(conf_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(conf_path, sizeof(conf_path), "/tmp/ktuned-conf-test-XXXXXX");
    int fd = mkstemp(conf_path);
    if (fd < 0)
        return -1;
    close(fd);
    unsetenv("KTUNE_SOCKET");
    unsetenv("KTUNE_CACHE");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(conf_path);
    return 0;
}

static int load(kd_config *c, kt_err *err, int argc, ...)
{
    char *argv[16] = {"ktuned"};
    va_list ap;
    va_start(ap, argc);
    for (int i = 1; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    return kd_config_load(c, argc, argv, err);
}

static void test_defaults_and_env(void **state)
{
    (void)state;
    kd_config c;
    kt_err err = {0};
    setenv("KTUNE_SOCKET", "/tmp/k.sock", 1);
    setenv("KTUNE_CACHE", "/tmp/kcache", 1);
    /* an explicit empty config file keeps every default */
    write_conf("");
    assert_int_equal(load(&c, &err, 3, "--config", conf_path), KD_CONFIG_RUN);
    assert_string_equal(c.socket, "/tmp/k.sock");
    assert_string_equal(c.cache, "/tmp/kcache");
    assert_true(c.gpus_auto);
    assert_int_equal(c.max_clients, KD_DEFAULT_MAX_CLIENTS);
    assert_int_equal(c.log_level, KT_LOG_INFO);
    assert_int_equal(c.compile_jobs, 0);
    assert_true(c.budget_max_s == KD_DEFAULT_BUDGET_MAX);
    unsetenv("KTUNE_SOCKET");
    unsetenv("KTUNE_CACHE");
}

static void test_file_then_command_line(void **state)
{
    (void)state;
    write_conf("# ktuned.conf\n"
               "\n"
               "socket = /run/x/ktuned.sock   # trailing comment\n"
               "cache=\"/var/lib/k#1\"\n"
               "gpus = 0, 2,3\n"
               "compile-jobs = 6\n"
               "  max-clients = 100\n"
               "log-level = debug\n"
               "budget-max = 2h\n"
               "worker = /bin/true\n");
    kd_config c;
    kt_err err = {0};
    int rc = load(&c, &err, 5, "--config", conf_path, "--max-clients=7", "--gpus=auto");
    if (rc < 0)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, KD_CONFIG_RUN);
    assert_string_equal(c.config, conf_path);
    assert_string_equal(c.socket, "/run/x/ktuned.sock");
    assert_string_equal(c.cache, "/var/lib/k#1"); /* '#' inside a value is not a comment */
    assert_true(c.gpus_auto);                     /* the command line won */
    assert_int_equal(c.compile_jobs, 6);
    assert_int_equal(c.max_clients, 7);
    assert_int_equal(c.log_level, KT_LOG_DEBUG);
    assert_true(c.budget_max_s == 7200);
    assert_string_equal(c.worker, "/bin/true");
    assert_int_equal(load(&c, &err, 3, "--config", conf_path), KD_CONFIG_RUN);
    assert_false(c.gpus_auto);
    assert_int_equal(c.n_gpus, 3);
    assert_int_equal(c.gpus[0], 0);
    assert_int_equal(c.gpus[1], 2);
    assert_int_equal(c.gpus[2], 3);
}

static void expect_file_error(const char *text, const char *what)
{
    write_conf(text);
    kd_config c;
    kt_err err = {0};
    assert_int_equal(load(&c, &err, 3, "--config", conf_path), -EINVAL);
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "%s:2: ", conf_path);
    if (strncmp(err.msg, prefix, strlen(prefix)) != 0 || !strstr(err.msg, what))
        fail_msg("for %s got '%s'", what, err.msg);
}

static void test_file_errors(void **state)
{
    (void)state;
    expect_file_error("socket = /tmp/s\nsockets = /tmp/s\n", "unknown key 'sockets'");
    expect_file_error("\nmax-clients = lots\n", "max-clients");
    expect_file_error("\ngpus = 0,0\n", "twice");
    expect_file_error("\ngpus = 1,x\n", "not a GPU index");
    expect_file_error("\nlog-level = loud\n", "log-level");
    expect_file_error("\nbudget-max = 3d\n", "budget-max");
    expect_file_error("\njust some words\n", "key = value");
    expect_file_error("\nworker = /nonexistent/ktune-worker\n", "not an executable");
    expect_file_error("\ncompile-jobs = 0\n", "compile-jobs");
}

static void test_command_line_errors(void **state)
{
    (void)state;
    kd_config c;
    kt_err err = {0};
    assert_int_equal(load(&c, &err, 3, "--config", "/nonexistent/ktuned.conf"), -EINVAL);
    assert_non_null(strstr(err.msg, "/nonexistent/ktuned.conf"));
    write_conf("");
    assert_int_equal(load(&c, &err, 4, "--config", conf_path, "--frobnicate"), -EINVAL);
    assert_non_null(strstr(err.msg, "--frobnicate"));
    assert_int_equal(load(&c, &err, 4, "--config", conf_path, "--socket"), -EINVAL);
    assert_non_null(strstr(err.msg, "needs a value"));
    assert_int_equal(load(&c, &err, 4, "--config", conf_path, "stray"), -EINVAL);
    assert_int_equal(load(&c, &err, 5, "--config", conf_path, "--max-clients", "0"), -EINVAL);
    assert_non_null(strstr(err.msg, "--max-clients"));
    assert_int_equal(load(&c, &err, 5, "--config", conf_path, "--gpus", ""), -EINVAL);
}

/* The connection and memory limits (issue 16): defaults, units, and the values refused. */
static void test_limits(void **state)
{
    (void)state;
    kd_config c;
    kt_err err = {0};
    write_conf("");
    assert_int_equal(load(&c, &err, 3, "--config", conf_path), KD_CONFIG_RUN);
    assert_int_equal(c.max_clients_per_uid, KD_DEFAULT_PER_UID);
    assert_int_equal(c.root_reserved, KD_DEFAULT_ROOT_RESERVED);
    assert_true(c.idle_timeout_s == KD_DEFAULT_IDLE_TIMEOUT);
    assert_true(c.max_buffered == KD_DEFAULT_MAX_BUFFERED);
    write_conf("max-clients-per-uid = 5\nroot-reserved-clients = 0\nidle-timeout = 1.5m\n"
               "max-buffered = 1G\n");
    assert_int_equal(load(&c, &err, 3, "--config", conf_path), KD_CONFIG_RUN);
    assert_int_equal(c.max_clients_per_uid, 5);
    assert_int_equal(c.root_reserved, 0);
    assert_true(c.idle_timeout_s == 90);
    assert_true(c.max_buffered == (size_t)1 << 30);
    assert_int_equal(load(&c, &err, 9, "--config", conf_path, "--idle-timeout", "off",
                          "--max-buffered", "268435456", "--max-buffered", "64MiB"),
                     KD_CONFIG_RUN);
    assert_true(c.idle_timeout_s == 0);
    assert_true(c.max_buffered == (size_t)64 << 20);
    /* a small max-clients keeps at most half for root unless told otherwise */
    write_conf("");
    assert_int_equal(load(&c, &err, 5, "--config", conf_path, "--max-clients", "5"), KD_CONFIG_RUN);
    assert_int_equal(c.root_reserved, 2);

    static const struct {
        const char *opt, *value, *what;
    } bad[] = {
        {"--max-buffered", "1M", "at least 8M"},
        {"--max-buffered", "-1G", "max-buffered"},
        {"--max-buffered", "12X", "max-buffered"},
        {"--max-buffered", "", "max-buffered"},
        {"--idle-timeout", "0", "idle-timeout"},
        {"--idle-timeout", "never", "idle-timeout"},
        {"--max-clients-per-uid", "0", "1..1000000"},
        {"--root-reserved-clients", "-1", "0..1000000"},
        {"--root-reserved-clients", "4096", "below max-clients"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = load(&c, &err, 5, "--config", conf_path, bad[i].opt, bad[i].value);
        if (rc != -EINVAL || !strstr(err.msg, bad[i].what))
            fail_msg("%s '%s': %d '%s', expected -EINVAL saying '%s'", bad[i].opt, bad[i].value, rc,
                     err.msg, bad[i].what);
    }
}

static void test_duration(void **state)
{
    (void)state;
    assert_true(kd_parse_duration("90") == 90);
    assert_true(kd_parse_duration("1.5m") == 90);
    assert_true(kd_parse_duration("2h") == 7200);
    assert_true(kd_parse_duration("0") < 0);
    assert_true(kd_parse_duration("10x") < 0);
    assert_true(kd_parse_duration("") < 0);
    /* Decimal only, and at least a millisecond (issue 16). */
    assert_true(kd_parse_duration(".5") == 0.5);
    assert_true(kd_parse_duration("5.") == 5);
    assert_true(kd_parse_duration("0.001") == 0.001);
    static const char *const bad[] = {"0x10", "0x10s", "inf", "nan",    "1e3",   "-5", "+5",
                                      " 5",   "5 ",    ".",   "0.0001", "1.5.m", "2hh"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (kd_parse_duration(bad[i]) >= 0)
            fail_msg("'%s' parsed as %g s", bad[i], kd_parse_duration(bad[i]));
}

/* gpus = auto: a fake /proc/driver/nvidia/gpus of four; CUDA_VISIBLE_DEVICES (a Slurm
 * allocation) narrows it, in CUDA's numbering. */
static void test_auto_gpus(void **state)
{
    (void)state;
    char dir[] = "/tmp/ktune-gpus-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p[64];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof(p), "%s/0000:%02x:00.0", dir, i + 1);
        assert_int_equal(mkdir(p, 0755), 0);
    }
    int out[16];
    assert_int_equal(kd_auto_gpus(dir, NULL, out, 16), 4);
    assert_int_equal(out[3], 3);
    assert_int_equal(kd_auto_gpus(dir, "2,3", out, 16), 2); /* Slurm gave this task two */
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 1);
    assert_int_equal(kd_auto_gpus(dir, "GPU-8a1b,GPU-77c2,GPU-19ee", out, 16), 3);
    assert_int_equal(kd_auto_gpus(dir, "0,1,-1,2", out, 16), 2); /* CUDA stops at -1 */
    assert_int_equal(kd_auto_gpus(dir, "0,1,2,3,4,5", out, 16), 4); /* no more than listed */
    assert_int_equal(kd_auto_gpus(dir, "-1", out, 16), 1); /* none: GPU 0's worker says so */
    assert_int_equal(out[0], 0);
    assert_int_equal(kd_auto_gpus(dir, NULL, out, 2), 2);
    assert_int_equal(kd_auto_gpus("/nonexistent/ktune", NULL, out, 16), 1);
    assert_int_equal(kd_auto_gpus("/nonexistent/ktune", "0,1", out, 16), 2);
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof(p), "%s/0000:%02x:00.0", dir, i + 1);
        rmdir(p);
    }
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_env), cmocka_unit_test(test_file_then_command_line),
        cmocka_unit_test(test_file_errors),      cmocka_unit_test(test_command_line_errors),
        cmocka_unit_test(test_limits),           cmocka_unit_test(test_duration),
        cmocka_unit_test(test_auto_gpus),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
