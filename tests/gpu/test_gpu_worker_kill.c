/* GPU drill (issue 7): the real ktune-worker SIGKILLed from outside, by pid, while it times a
 * candidate. srch_tune runs softmax M=4096,N=4096 f32 with a long screening measurement (0.3 s
 * warm-up, 2 s of reps), so an evaluation is mostly timing; a second thread waits for the first
 * trial to be logged (the progress callback), lets the next evaluation run 1.2 s -- past its
 * load and verification, inside its timing -- and SIGKILLs the worker process it finds among
 * this process's children. Then:
 *   - srch_tune goes on with a respawned worker and returns a verified winner;
 *   - exactly one worker restart and one "fault" failure (the candidate in flight);
 *   - that candidate is in the trial log as a fault, and it is not the winner of any group
 *     (not cached);
 *   - the killed pid is gone and the worker now running has another pid.
 * The worker is $KTUNE_WORKER (else the supervisor's lookup). Exit: 0 passed, 1 failed, 77 no
 * GPU. The CI variant with the fake worker: tests/integration/test_daemon_worker_kill.c. */
#include "search/tune.h"

#include "cache/cache.h"
#include "ops/ops.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define SKIP 77

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("  FAIL %s:%d: ", __FILE__, __LINE__);                                          \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* The pid of this process's child named ktune-worker (any thread's child), or -1. */
static pid_t worker_pid(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    pid_t found = -1;
    for (struct dirent *e; found < 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], buf[4096];
        snprintf(path, sizeof(path), "/proc/self/task/%s/children", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        for (char *save = NULL, *t = strtok_r(buf, " \n", &save); t && found < 0;
             t = strtok_r(NULL, " \n", &save)) {
            char comm[64] = "";
            snprintf(path, sizeof(path), "/proc/%s/comm", t);
            FILE *c = fopen(path, "r");
            if (!c)
                continue;
            if (fgets(comm, sizeof(comm), c) && strncmp(comm, "ktune-worker", 12) == 0)
                found = (pid_t)atoi(t);
            fclose(c);
        }
    }
    closedir(d);
    return found;
}

typedef struct killer {
    pthread_t thread;
    atomic_int measured; /* set by the progress callback */
    atomic_bool stop;
    pid_t victim;
    double killed_at, first_trial_at;
    int measured_at_kill;
} killer;

static void on_progress(const srch_tune_progress *p, void *ctx)
{
    killer *k = ctx;
    atomic_store(&k->measured, p->measured);
}

static void *killer_main(void *arg)
{
    killer *k = arg;
    while (!atomic_load(&k->stop) && atomic_load(&k->measured) < 1)
        usleep(1000);
    if (atomic_load(&k->stop))
        return NULL;
    k->first_trial_at = now_s();
    k->measured_at_kill = atomic_load(&k->measured);
    usleep(1200 * 1000); /* the next evaluation: load, verify, then 2.3 s of timing */
    if (atomic_load(&k->measured) != k->measured_at_kill)
        return NULL; /* that evaluation already ended: the test reports it */
    k->victim = worker_pid();
    if (k->victim > 0 && kill(k->victim, SIGKILL) == 0)
        k->killed_at = now_s();
    return NULL;
}

typedef struct trial_scan {
    int faults;
    char fault_cand[CACHE_CAND_MAX];
} trial_scan;

static int scan_trial(const cache_trial *t, void *ctx)
{
    trial_scan *s = ctx;
    if (t->status == CACHE_TRIAL_FAULT) {
        s->faults++;
        snprintf(s->fault_cand, sizeof(s->fault_cand), "%s", t->cand);
    }
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    srch_worker_opts wo = {.exe = NULL, .gpu = 0};
    srch_worker *w = NULL;
    ops_device dev;
    cache_gpu gpu;
    kt_err err = {0};
    int rc = srch_worker_start(&wo, &w, &dev, &gpu, &err);
    if (rc < 0) {
        bool nodriver = rc == -ENODEV || strstr(err.msg, "libcuda") ||
                        strstr(err.msg, "CUDA driver") || strstr(err.msg, "cuInit");
        printf("%s: srch_worker_start: %s (%s)\n", nodriver ? "skip: no GPU" : "FAIL",
               strerror(-rc), err.msg);
        return nodriver ? SKIP : 1;
    }
    printf("== worker SIGKILL while timing: %s, %s\n", gpu.name, dev.arch);

    char dir[] = "/tmp/ktune-test-gpu-worker-kill-XXXXXX";
    if (!mkdtemp(dir)) {
        printf("FAIL mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    char path[1024], store[100];
    snprintf(path, sizeof(path), "%s/examples/softmax.json",
             getenv("KTUNE_SOURCE_ROOT") ? getenv("KTUNE_SOURCE_ROOT") : ".");
    snprintf(store, sizeof(store), "%s/cubins", dir);
    ops_graph *g = NULL;
    ops_diag d = {0};
    if (ops_graph_from_json_file(path, &g, &d) < 0) {
        printf("FAIL %s: %s\n", path, d.msg);
        return 1;
    }
    ops_binding b[2];
    static char m_arg[] = "M=4096", n_arg[] = "N=4096"; /* parsed in place */
    if (ops_binding_parse(m_arg, &b[0], NULL) < 0 || ops_binding_parse(n_arg, &b[1], NULL) < 0) {
        printf("FAIL: bindings\n");
        return 1;
    }
    cache_env *cache = NULL;
    if (cache_open(dir, 0, NULL, &cache, &err) < 0) {
        printf("FAIL cache_open: %s\n", err.msg);
        return 1;
    }
    killer k = {0};
    atomic_init(&k.measured, 0);
    atomic_init(&k.stop, false);
    srch_tune_opts o = {
        .precision = OPS_PREC_EXACT,
        .budget_s = 90,
        .store_dir = store,
        .timing = {.warmup_s = 0.3,
                   .budget_s = 2.0,
                   .min_reps = 100000,
                   .max_reps = 1000000,
                   .target_rel = 1e-9},
        .screen_top = 2,
        .screen_spread = 1,
        .screen_parts = 1,
        .refine_best = 1,
        .refine_rounds = 1,
        .finalists = 2,
        .worker = w,
        .progress = on_progress,
        .progress_ctx = &k,
    };
    pthread_create(&k.thread, NULL, killer_main, &k);
    static srch_tune_result r;
    double t0 = now_s();
    rc = srch_tune(g, b, 2, cache, &o, &r, &err);
    atomic_store(&k.stop, true);
    pthread_join(k.thread, NULL);
    printf("  srch_tune: %s in %.1f s: %d trials, %d restarts, %d faults%s%s\n",
           rc < 0 ? strerror(-rc) : (r.found ? "found" : "NOT FOUND"), now_s() - t0, r.trials,
           r.restarts, r.failures[SRCH_FAULT], r.failures[SRCH_FAULT] ? ": " : "",
           r.failure_example[SRCH_FAULT]);
    CHECK(k.killed_at > 0,
          "the worker was not killed (victim %d; an evaluation ended within "
          "1.2 s: lengthen the timing)",
          (int)k.victim);
    if (k.killed_at > 0)
        printf("  killed worker %d %.2f s after trial %d was logged\n", (int)k.victim,
               k.killed_at - k.first_trial_at, k.measured_at_kill);
    CHECK(rc == 0 && r.found, "no verified winner after the kill: %s", err.msg);
    CHECK(r.restarts == 1, "%d worker restarts, want 1", r.restarts);
    CHECK(r.failures[SRCH_FAULT] == 1, "%d faults, want 1 (the candidate in flight)",
          r.failures[SRCH_FAULT]);
    CHECK(k.victim <= 0 || kill(k.victim, 0) != 0, "the killed worker %d still exists",
          (int)k.victim);
    pid_t now_pid = worker_pid();
    CHECK(now_pid > 0 && now_pid != k.victim, "the running worker is %d (killed: %d)", (int)now_pid,
          (int)k.victim);

    /* the trial log holds the fault; it is no group's winner */
    cache_key key = {0};
    key.gpu = r.gpu;
    memcpy(key.sig, r.sig, sizeof(key.sig));
    memcpy(key.problem, r.problem, sizeof(key.problem));
    key.precision = OPS_PREC_EXACT;
    key.n_shapes = 2;
    for (int i = 0; i < 2; i++) {
        snprintf(key.shapes[i].name, sizeof(key.shapes[i].name), "%s", b[i].name);
        key.shapes[i].value = b[i].value;
    }
    trial_scan s = {0};
    rc = cache_trial_foreach(cache, &key, scan_trial, &s, &err);
    CHECK(rc == 0, "cache_trial_foreach: %s", err.msg);
    CHECK(s.faults == 1, "%d fault trials in the log, want 1", s.faults);
    for (int i = 0; i < r.n_picks; i++)
        CHECK(strcmp(r.picks[i].cand, s.fault_cand) != 0, "the faulted candidate %s won group %d",
              s.fault_cand, r.picks[i].group);
    printf("  fault trial: %s\n", s.fault_cand);
    cache_close(cache);
    srch_worker_stop(w);
    ops_graph_free(g);
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("  note: could not remove %s\n", dir);
    printf("\n%s (%d failures)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
