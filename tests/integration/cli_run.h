/* Running the `ktune` binary as a user would, for the integration tests (cmocka): argv in,
 * stdout, stderr and the exit status out. KTUNE_BIN names the binary, KTUNE_SOURCE_ROOT the
 * checkout (for the example graphs). Header-only: each test program includes it once. */
#pragma once

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct run_result {
    int status;     /* exit status, or 128 + the signal */
    long maxrss_kb; /* the child's peak resident memory */
    char out[262144];
    char err[65536];
} run_result;

/* Limits for the child, so that a regression in what a test checks (reading /dev/zero whole,
 * blocking on a FIFO) fails the test instead of eating the machine's memory or meson's timeout.
 * Zero: no limit. */
typedef struct run_limits {
    rlim_t address_space; /* RLIMIT_AS, bytes */
    unsigned alarm_s;     /* SIGALRM after this many seconds */
    int interrupt_ms;     /* SIGINT (a user's Ctrl-C) after this many milliseconds */
} run_limits;

static inline long long run_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Runs ktune with args (NULL-terminated), reading stdout and stderr together so neither pipe
 * can fill and stall the child; output beyond the buffers is cut (the assertions will show it).
 * The caller frees the result. */
static inline run_result *run_argv_limited(const char *const *args, run_limits lim)
{
    const char *argv[64] = {getenv("KTUNE_BIN")};
    assert_non_null(argv[0]);
    int argc = 1;
    for (; args[argc - 1]; argc++) {
        assert_true(argc < 63);
        argv[argc] = args[argc - 1];
    }
    argv[argc] = NULL;
    int op[2], ep[2];
    assert_int_equal(pipe(op), 0);
    assert_int_equal(pipe(ep), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(op[1], 1);
        dup2(ep[1], 2);
        close(op[0]);
        close(ep[0]);
        if (lim.address_space)
            setrlimit(RLIMIT_AS, &(struct rlimit){lim.address_space, lim.address_space});
        if (lim.alarm_s)
            alarm(lim.alarm_s); /* survives exec */
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(op[1]);
    close(ep[1]);
    run_result *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    size_t no = 0, ne = 0;
    struct pollfd p[2] = {{.fd = op[0], .events = POLLIN}, {.fd = ep[0], .events = POLLIN}};
    long long interrupt_at = lim.interrupt_ms ? run_now_ms() + lim.interrupt_ms : -1;
    while (p[0].fd >= 0 || p[1].fd >= 0) {
        int wait_ms = -1;
        if (interrupt_at >= 0) {
            long long left = interrupt_at - run_now_ms();
            if (left <= 0) {
                kill(pid, SIGINT);
                interrupt_at = -1;
            } else {
                wait_ms = (int)left;
            }
        }
        int ready = poll(p, 2, wait_ms);
        if ((ready < 0 && errno == EINTR) || ready == 0)
            continue;
        for (int k = 0; k < 2; k++) {
            if (p[k].fd < 0 || !p[k].revents)
                continue;
            char *buf = k ? r->err : r->out;
            size_t *n = k ? &ne : &no, cap = k ? sizeof(r->err) : sizeof(r->out);
            char tmp[4096];
            ssize_t got = read(p[k].fd, tmp, sizeof(tmp));
            if (got <= 0) {
                close(p[k].fd);
                p[k].fd = -1;
                continue;
            }
            size_t take = (size_t)got < cap - 1 - *n ? (size_t)got : cap - 1 - *n;
            memcpy(buf + *n, tmp, take);
            *n += take;
        }
    }
    int ws;
    struct rusage ru;
    assert_int_equal(wait4(pid, &ws, 0, &ru), pid);
    r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    r->maxrss_kb = ru.ru_maxrss;
    return r;
}

static inline run_result *run_argv(const char *const *args)
{
    return run_argv_limited(args, (run_limits){0});
}

#define RUN(...) run_argv((const char *const[]){__VA_ARGS__, NULL})

/* The path of examples/<name>; valid until eight more calls. */
static inline const char *example(const char *name)
{
    static char path[8][1024];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, 1024, "%s/examples/%s", getenv("KTUNE_SOURCE_ROOT"), name);
    return p;
}
