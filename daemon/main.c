/* ktuned: start-up (configuration, file-descriptor limit, cache, journal, socket, GPU threads,
 * READY=1), the loop, and the shutdown sequence:
 *   SIGTERM/SIGINT -> STOPPING=1, stop accepting, every running job's cancel flag with the
 *   "shutting down" reason (its journal entry goes back to queued), GPU threads told to quit;
 *   after KD_ABORT_AFTER_S the workers of GPUs still busy are killed (the candidate in flight is
 *   abandoned, not logged); once every GPU thread has exited (or after KD_GIVE_UP_AFTER_S) every
 *   handle is closed, the loop ends, uv_loop_close succeeds, and the process exits 0. */
#include "kd.h"

#include "ktune_config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#define FD_RESERVE 256 /* descriptors kept for the cache, workers, compile pools, logs */

/* Static storage: a GPU thread that did not stop in time may still post to the event queue
 * while the process exits. */
static kd_daemon daemon_state;

double kd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int64_t kd_wall(void)
{
    return (int64_t)time(NULL);
}

int64_t kd_wall_ms(void)
{
    return kt_wall_ms();
}

void kd_daemon_changed(kd_daemon *d)
{
    kd_notify_status(d);
}

/* ---- shutdown ---- */

static void close_handle(uv_handle_t *h)
{
    if (h->loop && !uv_is_closing(h))
        uv_close(h, NULL);
}

/* Closes every handle; the loop then runs out. */
static void close_all(kd_daemon *d)
{
    d->finishing = true;
    kd_server_stop_listening(d);
    kd_server_close_all(d);
    close_handle((uv_handle_t *)&d->sig_term);
    close_handle((uv_handle_t *)&d->sig_int);
    close_handle((uv_handle_t *)&d->sig_hup);
    close_handle((uv_handle_t *)&d->tick);
    close_handle((uv_handle_t *)&d->stop_timer);
    if (d->ev.async.loop)
        kd_events_close(d);
}

static void finish(kd_daemon *d)
{
    int counts[CACHE_JOB_STATE_COUNT];
    kd_jobs_count(d, counts);
    kt_log_info(KD_LOG_MAIN, "stopped in %.1f s: %d jobs queued for the next start",
                kd_now() - d->stop_t0, counts[CACHE_JOB_QUEUED] + counts[CACHE_JOB_RUNNING]);
    close_all(d);
}

void kd_daemon_check_stopped(kd_daemon *d)
{
    if (d->stopping && !d->finishing && kd_gpus_exited(d))
        finish(d);
}

static void on_stop_timer(uv_timer_t *t)
{
    kd_daemon *d = t->data;
    double waited = kd_now() - d->stop_t0;
    if (!d->aborted && waited >= KD_ABORT_AFTER_S) {
        d->aborted = true;
        kd_gpus_abort(d);
    }
    if (waited >= KD_GIVE_UP_AFTER_S && !d->finishing) {
        kt_log_err(KD_LOG_MAIN, "GPU threads still busy after %.1f s; exiting without them",
                   waited);
        finish(d);
    }
}

void kd_daemon_stop(kd_daemon *d, const char *why)
{
    if (d->stopping) {
        kt_log_info(KD_LOG_MAIN, "%s: already stopping", why);
        return;
    }
    d->stopping = true;
    d->stop_t0 = kd_now();
    kd_notify_stopping();
    int counts[CACHE_JOB_STATE_COUNT];
    kd_jobs_count(d, counts);
    kt_log_info(KD_LOG_MAIN, "%s: stopping; %d running jobs go back to the queue", why,
                counts[CACHE_JOB_RUNNING]);
    kd_server_stop_listening(d);
    kd_jobs_stop_all(d);
    kd_gpus_quit(d);
    uv_timer_start(&d->stop_timer, on_stop_timer, 100, 100);
    kd_daemon_changed(d);
    kd_daemon_check_stopped(d);
}

static void on_signal(uv_signal_t *s, int signum)
{
    kd_daemon *d = s->data;
    if (signum == SIGHUP) {
        kt_log_info(KD_LOG_MAIN, "SIGHUP ignored: restart ktuned to apply a new configuration");
        return;
    }
    kd_daemon_stop(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_tick(uv_timer_t *t)
{
    kd_daemon *d = t->data;
    kd_jobs_tick(d);
    kd_server_tick(d);
    kd_notify_status(d);
}

/* ---- start-up ---- */

/* Raises RLIMIT_NOFILE to fit max-clients; lowers max-clients when the hard limit is lower. */
static void fit_nofile(kd_config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    rlim_t want = (rlim_t)cfg->max_clients + FD_RESERVE;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rlim_t target = want;
        if (rl.rlim_max != RLIM_INFINITY && target > rl.rlim_max)
            target = rl.rlim_max;
        rl.rlim_cur = target;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        int fit = rl.rlim_cur > FD_RESERVE + 1 ? (int)(rl.rlim_cur - FD_RESERVE) : 1;
        kt_log_warn(KD_LOG_MAIN,
                    "file descriptor limit %llu is too low for %d clients: serving at most %d "
                    "(raise LimitNOFILE)",
                    (unsigned long long)rl.rlim_cur, cfg->max_clients, fit);
        cfg->max_clients = fit;
        if (cfg->root_reserved > fit / 2)
            cfg->root_reserved = fit / 2;
    }
}

static void log_open_handle(uv_handle_t *h, void *arg)
{
    kt_log_err(KD_LOG_MAIN, "handle still open at exit: %s%s", uv_handle_type_name(h->type),
               uv_is_closing(h) ? " (closing)" : "");
}

/* ---- the cache's structural check before the first write (docs/operations.md, "A damaged
 * cache"): LMDB trusts its pages, and a writer working on a damaged B-tree or free list spreads
 * the damage, so ktuned refuses such a cache. KTUNE_CACHE_CHECK=0 skips the check. ---- */
static int check_cache(const char *dir, kt_err *err)
{
    const char *off = getenv("KTUNE_CACHE_CHECK");
    if (off && strcmp(off, "0") == 0) {
        kt_log_warn(KD_LOG_MAIN, "cache %s: structural check skipped (KTUNE_CACHE_CHECK=0)", dir);
        return 0;
    }
    cache_check_report rep;
    kt_err e = {0};
    int rc = cache_check(dir, 0, 0, &rep, &e);
    if (rc == -ENOENT)
        return 0; /* a new cache: cache_open creates it */
    if (rc < 0)
        return kt_err_set(
            err, rc, "cannot check the cache: %s (KTUNE_CACHE_CHECK=0 skips the check)", e.msg);
    if (!cache_check_writable(&rep))
        return kt_err_set(
            err, -EBADMSG,
            "cache %.200s is damaged (%.150s): not written to; run `ktune cache check "
            "--cache %.80s`, then restore or rebuild it (docs/operations.md)",
            dir, rep.what, dir);
    kt_log_info(KD_LOG_MAIN, "cache %s: structure sound (%zu pages, checked in %.3f s)", dir,
                rep.pages_used, rep.seconds);
    return 0;
}

/* The job journal (names, graphs, shapes) is for the socket's group only: a cache made before
 * ktuned created it 0750/0640 (cache_open) loses its "other" bits, the directory first (which
 * alone keeps others out), then its files. docs/operations.md, "Permissions". */
static void restrict_cache(const char *dir)
{
    static const char *const names[] = {"", "/data.mdb", "/lock.mdb"};
    for (size_t i = 0; i < KT_ARRAY_LEN(names); i++) {
        char path[KD_PATH_MAX + 16];
        struct stat st;
        snprintf(path, sizeof(path), "%s%s", dir, names[i]);
        if (stat(path, &st) < 0 || !(st.st_mode & 0007))
            continue;
        mode_t mode = st.st_mode & 07770;
        if (chmod(path, mode) < 0)
            kt_log_warn(KD_LOG_MAIN, "%s is readable by every user and chmod %04o failed: %s", path,
                        (unsigned)mode, strerror(errno));
        else
            kt_log_info(KD_LOG_MAIN, "%s: mode %04o -> %04o (not readable by other users)", path,
                        (unsigned)(st.st_mode & 07777), (unsigned)mode);
    }
}

static int start(kd_daemon *d, kt_err *err)
{
    int rc;
    if ((rc = check_cache(d->cfg->cache, err)) < 0)
        return rc;
    if ((rc = cache_open(d->cfg->cache, 0, NULL, &d->cache, err)) < 0)
        return rc;
    restrict_cache(d->cfg->cache);
    if ((rc = kd_jobs_load(d, err)) < 0 || (rc = kd_events_init(d, err)) < 0)
        return rc;
    if ((rc = kd_memo_new(KD_MEMO_ENTRIES, KD_MEMO_BYTES, &d->memo)) < 0)
        kt_log_warn(KD_LOG_MAIN, "no lookup memo (%s): every lookup reads the cache",
                    strerror(-rc));
    uv_signal_t *sigs[] = {&d->sig_term, &d->sig_int, &d->sig_hup};
    const int nums[] = {SIGTERM, SIGINT, SIGHUP};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(&d->loop, sigs[i]);
        sigs[i]->data = d;
        if ((rc = uv_signal_start(sigs[i], on_signal, nums[i])) < 0)
            return kt_err_set(err, -EIO, "uv_signal_start: %s", uv_strerror(rc));
    }
    uv_timer_init(&d->loop, &d->tick);
    uv_timer_init(&d->loop, &d->stop_timer);
    d->tick.data = d->stop_timer.data = d;
    uint64_t period = (uint64_t)(KD_TICK_S * 1000);
    uv_timer_start(&d->tick, on_tick, period, period);
    if ((rc = kd_server_listen(d, err)) < 0)
        return rc;
    return kd_gpus_start(d, err);
}

static int run(kd_config *cfg)
{
    kd_daemon *d = &daemon_state;
    d->cfg = cfg;
    d->t0 = kd_now();
    kt_err err = {0};
    int rc = uv_loop_init(&d->loop);
    if (rc < 0) {
        kt_log_err(KD_LOG_MAIN, "uv_loop_init: %s", uv_strerror(rc));
        return 1;
    }
    int status = 0;
    if ((rc = start(d, &err)) < 0) {
        kt_log_err(KD_LOG_MAIN, "cannot start: %s", err.msg);
        status = 1;
        d->stopping = true;
        kd_jobs_stop_all(d);
        kd_gpus_quit(d);
        close_all(d);
    } else {
        kt_log_info(KD_LOG_MAIN, "ktuned %s ready: cache %s, %zu jobs in the journal, %d GPU%s",
                    KTUNE_VERSION, cfg->cache, d->n_jobs, d->n_gpus, d->n_gpus == 1 ? "" : "s");
        kd_notify_ready();
        kd_daemon_changed(d);
    }
    uv_run(&d->loop, UV_RUN_DEFAULT);
    if ((rc = uv_loop_close(&d->loop)) != 0) {
        kt_log_err(KD_LOG_MAIN, "uv_loop_close: %s", uv_strerror(rc));
        uv_walk(&d->loop, log_open_handle, NULL);
        status = 1;
    }
    bool stuck = !kd_gpus_exited(d);
    kd_gpus_free(d);
    kd_jobs_free(d);
    if (d->memo) {
        kd_memo_stats ms;
        kd_memo_stat(d->memo, &ms);
        kt_log_info(KD_LOG_MAIN,
                    "lookup memo: %llu hits, %llu misses, %llu stale, %llu evicted; %zu entries, "
                    "%zu bytes",
                    (unsigned long long)ms.hits, (unsigned long long)ms.misses,
                    (unsigned long long)ms.stale, (unsigned long long)ms.evictions, ms.entries,
                    ms.bytes);
    }
    kd_memo_free(d->memo);
    d->memo = NULL;
    if (!stuck) /* a GPU thread still running may write trials: leave the cache to the exit */
        cache_close(d->cache);
    return status;
}

int main(int argc, char **argv)
{
    static kd_config cfg;
    kt_err err = {0};
    int rc = kd_config_load(&cfg, argc, argv, &err);
    if (rc < 0) {
        fprintf(stderr, "ktuned: %s\n", err.msg);
        return 2;
    }
    if (rc == KD_CONFIG_EXIT)
        return 0;
    kt_log_threshold = cfg.log_level;
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-reply is an EPIPE, not a death */
    fit_nofile(&cfg);
    if (cfg.config[0])
        kt_log_info(KD_LOG_MAIN, "configuration from %s", cfg.config);
    return run(&cfg);
}
