/* The job table (in memory, by id), its journal (cache_job_*: every state change is written
 * before it is acknowledged), duplicate joining, placement on idle GPUs, and watches.
 * docs/protocol.md, "Job", "Duplicate submissions", "Journal and restart". Loop thread only. */
#include "kd.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool kd_job_finished(const kd_job *j)
{
    return j->j.state == CACHE_JOB_DONE || j->j.state == CACHE_JOB_FAILED ||
           j->j.state == CACHE_JOB_CANCELLED;
}

kd_job *kd_jobs_find(kd_daemon *d, uint64_t id)
{
    size_t lo = 0, hi = d->n_jobs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t m = d->jobs[mid]->j.id;
        if (m == id)
            return d->jobs[mid];
        if (m < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static void job_free(kd_job *kj)
{
    if (!kj)
        return;
    cache_job_free(&kj->j);
    free(kj->watches);
    free(kj);
}

/* Appends kj (its id is larger than every id in the table). */
static int add_job(kd_daemon *d, kd_job *kj)
{
    KT_REQUIRE(d->n_jobs == 0 || d->jobs[d->n_jobs - 1]->j.id < kj->j.id);
    if (kt_grow(&d->jobs, &d->cap_jobs, d->n_jobs + 1, sizeof(*d->jobs)) < 0)
        return -ENOMEM;
    d->jobs[d->n_jobs++] = kj;
    return 0;
}

/* ---- the journal ---- */

static void failures_to_journal(kd_job *kj)
{
    cache_job *j = &kj->j;
    j->n_failures = 0;
    for (int s = 1; s < SRCH_STATUS_COUNT && j->n_failures < CACHE_JOB_FAILURE_KINDS; s++) {
        if (kj->failures[s] <= 0)
            continue;
        struct cache_job_failure *f = &j->failures[j->n_failures++];
        snprintf(f->name, sizeof(f->name), "%s", srch_status_str((srch_status)s));
        f->count = kj->failures[s];
    }
}

static void failures_from_journal(kd_job *kj)
{
    for (int i = 0; i < kj->j.n_failures; i++)
        for (int s = 1; s < SRCH_STATUS_COUNT; s++)
            if (strcmp(kj->j.failures[i].name, srch_status_str((srch_status)s)) == 0)
                kj->failures[s] = kj->j.failures[i].count;
}

/* A running job's elapsed_s by the daemon's clock: at least the time since its attempt began
 * (progress reports come from the search's own clock, which starts a little later). */
static void bring_elapsed_up(kd_job *kj)
{
    double e = kj->elapsed0 + (kd_now() - kj->run_t0);
    if (e > kj->j.elapsed_s)
        kj->j.elapsed_s = e;
}

/* Writes kj to the journal. A failure is logged here; the job goes on in memory. A running
 * job's elapsed_s is written with the wall time it is as of (elapsed_at_ms), so a restart after
 * a crash can add what its trial log shows since (resumed_time). */
static int save(kd_daemon *d, kd_job *kj)
{
    if (kj->j.state == CACHE_JOB_RUNNING && kj->slot >= 0) {
        bring_elapsed_up(kj);
        kj->j.elapsed_at_ms = kd_wall_ms();
    }
    failures_to_journal(kj);
    kt_err err = {0};
    int rc = cache_job_put(d->cache, &kj->j, &err);
    if (rc < 0)
        kt_log_err(KD_LOG_JOBS, "job %" PRIu64 ": cannot write the journal: %s", kj->j.id, err.msg);
    kj->saved_at = kd_now();
    return rc;
}

typedef struct load_ctx {
    kd_daemon *d;
    int rc;
} load_ctx;

static int load_cb(const cache_job *j, void *ctx)
{
    load_ctx *l = ctx;
    kd_job *kj = calloc(1, sizeof(*kj));
    if (!kj)
        return l->rc = -ENOMEM;
    kj->j = *j;
    kj->j.graph = NULL;
    if (j->graph_len) {
        kj->j.graph = malloc(j->graph_len);
        if (!kj->j.graph) {
            free(kj);
            return l->rc = -ENOMEM;
        }
        memcpy(kj->j.graph, j->graph, j->graph_len);
    }
    kj->slot = kj->ran_on = -1;
    failures_from_journal(kj);
    if (add_job(l->d, kj) < 0) {
        job_free(kj);
        return l->rc = -ENOMEM;
    }
    return 0;
}

int kd_jobs_load(kd_daemon *d, kt_err *err)
{
    load_ctx l = {d, 0};
    size_t corrupt = 0;
    int rc = cache_job_foreach(d->cache, load_cb, &l, &corrupt, err);
    if (l.rc < 0)
        return kt_err_set(err, l.rc, "out of memory loading the job journal");
    if (rc < 0)
        return rc;
    if ((rc = cache_job_next_id(d->cache, &d->next_id, err)) < 0)
        return rc;
    /* A job running when the daemon stopped (however it stopped) is queued again. */
    int resumed = 0, counts[CACHE_JOB_STATE_COUNT] = {0};
    for (size_t i = 0; i < d->n_jobs; i++) {
        kd_job *kj = d->jobs[i];
        if (kj->j.state == CACHE_JOB_RUNNING) {
            kj->j.state = CACHE_JOB_QUEUED;
            kj->crashed = true; /* its time since the last save is in its trial log */
            save(d, kj);
            resumed++;
        }
        counts[kj->j.state]++;
    }
    kt_log_info(KD_LOG_JOBS,
                "journal: %zu jobs (%d queued of which %d were running and resume, %d done, %d "
                "failed, %d cancelled)%s",
                d->n_jobs, counts[CACHE_JOB_QUEUED], resumed, counts[CACHE_JOB_DONE],
                counts[CACHE_JOB_FAILED], counts[CACHE_JOB_CANCELLED],
                corrupt ? "; corrupt entries skipped" : "");
    return 0;
}

void kd_jobs_free(kd_daemon *d)
{
    for (size_t i = 0; i < d->n_jobs; i++)
        job_free(d->jobs[i]);
    free(d->jobs);
    d->jobs = NULL;
    d->n_jobs = d->cap_jobs = 0;
}

void kd_jobs_count(const kd_daemon *d, int counts[CACHE_JOB_STATE_COUNT])
{
    memset(counts, 0, sizeof(int) * CACHE_JOB_STATE_COUNT);
    for (size_t i = 0; i < d->n_jobs; i++)
        counts[d->jobs[i]->j.state]++;
}

/* ---- watches ---- */

int kd_jobs_watch(kd_job *kj, kd_conn *c, uint64_t id)
{
    if (kt_grow(&kj->watches, &kj->cap_watches, kj->n_watches + 1, sizeof(*kj->watches)) < 0)
        return -ENOMEM;
    kj->watches[kj->n_watches++] = (kd_watch){c, id};
    c->n_watches++;
    return 0;
}

void kd_jobs_forget_conn(kd_daemon *d, kd_conn *c)
{
    for (size_t i = 0; i < d->n_jobs && c->n_watches > 0; i++) {
        kd_job *kj = d->jobs[i];
        size_t k = 0;
        for (size_t w = 0; w < kj->n_watches; w++) {
            if (kj->watches[w].c == c)
                c->n_watches--;
            else
                kj->watches[k++] = kj->watches[w];
        }
        kj->n_watches = k;
    }
}

static void send_progress(kd_job *kj)
{
    for (size_t w = 0; w < kj->n_watches; w++)
        kd_send_event(kj->watches[w].c, kj->watches[w].id, "progress", kj);
    kj->progressed = false;
}

/* The job reached a final state: the "end" event to every watcher, which then stops. */
static void send_end(kd_job *kj)
{
    for (size_t w = 0; w < kj->n_watches; w++) {
        kd_send_event(kj->watches[w].c, kj->watches[w].id, "end", kj);
        kj->watches[w].c->n_watches--;
    }
    kj->n_watches = 0;
    free(kj->watches);
    kj->watches = NULL;
    kj->cap_watches = 0;
}

void kd_jobs_tick(kd_daemon *d)
{
    double now = kd_now();
    for (int s = 0; s < d->n_gpus; s++) {
        kd_job *kj = d->gpus[s].job ? kd_jobs_find(d, d->gpus[s].job) : NULL;
        if (!kj || kj->j.state != CACHE_JOB_RUNNING)
            continue;
        if (kj->progressed)
            send_progress(kj);
        if (now - kj->saved_at >= KD_SAVE_PERIOD_S)
            save(d, kj);
    }
}

/* ---- submission, cancel ---- */

/* The same problem (whatever its symbols are called), precision, tolerance and GPU: a job of
 * the journal written before problem digests (all zero) is never joined. */
static bool same_job(const cache_job *j, const kd_submit *s)
{
    return memcmp(j->sig, s->sig, OPS_SIG_BYTES) == 0 &&
           memcmp(j->problem, s->problem, OPS_SIG_BYTES) == 0 && j->precision == s->precision &&
           j->tolerance == s->tolerance && j->gpu == s->gpu;
}

/* May c act on kj as its owner (cancel it, change its priority)? */
static bool may_manage(const kd_job *kj, const kd_conn *c)
{
    return c->admin || c->uid == kj->j.owner;
}

int kd_jobs_submit(kd_daemon *d, const kd_submit *s, kd_job **out, bool *joined, kt_err *err)
{
    for (size_t i = d->n_jobs; i-- > 0;) {
        kd_job *kj = d->jobs[i];
        cache_job_state st = kj->j.state;
        if (st == CACHE_JOB_FAILED || st == CACHE_JOB_CANCELLED || !same_job(&kj->j, s))
            continue;
        if ((s->retune || s->remeasure) && st == CACHE_JOB_DONE)
            continue;
        if (s->remeasure && kj->j.trials_since_ms == 0)
            continue;
        /* joining raises the priority only for the owner or an admin: another user's
         * duplicate must not reorder the queue through someone else's job */
        if (s->priority > kj->j.priority && st != CACHE_JOB_DONE && may_manage(kj, s->by)) {
            kt_log_info(KD_LOG_JOBS, "job %" PRIu64 ": priority %d -> %d by uid %u", kj->j.id,
                        (int)kj->j.priority, s->priority, (unsigned)s->by->uid);
            kj->j.priority = s->priority;
            save(d, kj);
        }
        kt_log_info(KD_LOG_JOBS,
                    "submission of %s by uid %u joins job %" PRIu64 " (%s, owner uid %u)",
                    KT_ESC(s->name), (unsigned)s->by->uid, kj->j.id, cache_job_state_name(st),
                    (unsigned)kj->j.owner);
        *out = kj;
        *joined = true;
        return 0;
    }
    kd_job *kj = calloc(1, sizeof(*kj));
    if (!kj)
        return kt_err_set(err, -ENOMEM, "submit: out of memory");
    kj->slot = kj->ran_on = -1;
    cache_job *j = &kj->j;
    j->id = d->next_id;
    j->state = CACHE_JOB_QUEUED;
    j->priority = s->priority;
    j->gpu = s->gpu;
    snprintf(j->name, sizeof(j->name), "%s", s->name);
    memcpy(j->sig, s->sig, OPS_SIG_BYTES);
    memcpy(j->problem, s->problem, OPS_SIG_BYTES);
    j->n_shapes = s->n_shapes;
    memcpy(j->shapes, s->shapes, sizeof(cache_bound) * (size_t)s->n_shapes);
    j->precision = s->precision;
    j->tolerance = s->tolerance;
    j->budget_s = s->budget_s;
    j->submitted = kd_wall();
    j->trials_since_ms = s->remeasure ? kd_wall_ms() : 0;
    j->owner = (uint32_t)s->by->uid;
    void *graph = NULL;
    int rc = ops_graph_to_msgpack(s->graph, &graph, &j->graph_len);
    j->graph = graph;
    if (rc < 0) {
        job_free(kj);
        return kt_err_set(err, rc, "submit: cannot encode the graph");
    }
    failures_to_journal(kj);
    if ((rc = cache_job_put(d->cache, j, err)) < 0) {
        job_free(kj);
        return rc;
    }
    if (add_job(d, kj) < 0) {
        /* in the journal but not in memory: the next start picks it up */
        job_free(kj);
        return kt_err_set(err, -ENOMEM, "submit: out of memory");
    }
    d->next_id++;
    kt_log_info(KD_LOG_JOBS, "job %" PRIu64 " %s queued for uid %u (priority %d, budget %.0f s%s)",
                j->id, KT_ESC(j->name), (unsigned)j->owner, (int)j->priority, j->budget_s,
                s->remeasure ? ", remeasuring" : s->retune ? ", a retune" : "");
    *out = kj;
    *joined = false;
    kd_jobs_schedule(d);
    kd_daemon_changed(d);
    return 0;
}

/* Final state: journal, end events. */
static void finish(kd_daemon *d, kd_job *kj, cache_job_state st)
{
    kj->j.state = st;
    kj->j.finished = kd_wall();
    kj->phase[0] = '\0';
    save(d, kj);
    send_end(kj);
}

int kd_jobs_cancel(kd_daemon *d, kd_job *kj, const kd_conn *c, kt_err *err)
{
    unsigned uid = (unsigned)c->uid, owner = (unsigned)kj->j.owner;
    if (!may_manage(kj, c)) {
        kt_log_warn(KD_LOG_JOBS, "uid %u may not cancel job %" PRIu64 " of uid %u", uid, kj->j.id,
                    owner);
        return kt_err_set(err, -EPERM,
                          "cancel: job %" PRIu64 " belongs to uid %u; only its owner, root or "
                          "the admin group may cancel it (uid %u)",
                          kj->j.id, owner, uid);
    }
    if (kd_job_finished(kj))
        return kt_err_set(err, -EINVAL, "cancel: job %" PRIu64 " is already %s", kj->j.id,
                          cache_job_state_name(kj->j.state));
    if (kj->j.state == CACHE_JOB_QUEUED) {
        snprintf(kj->j.error, sizeof(kj->j.error), "cancelled while queued by uid %u", uid);
        finish(d, kj, CACHE_JOB_CANCELLED);
        kt_log_info(KD_LOG_JOBS, "job %" PRIu64 " of uid %u cancelled while queued by uid %u",
                    kj->j.id, owner, uid);
        kd_daemon_changed(d);
        return 0;
    }
    kj->stop = KD_STOP_CANCEL;
    kj->cancel_by = c->uid;
    if (kj->slot >= 0)
        kd_gpu_cancel(d, kj->slot);
    kt_log_info(KD_LOG_JOBS,
                "job %" PRIu64 " of uid %u cancelling after its candidate in flight (by uid %u)",
                kj->j.id, owner, uid);
    return 0;
}

void kd_jobs_stop_all(kd_daemon *d)
{
    for (int s = 0; s < d->n_gpus; s++) {
        kd_job *kj = d->gpus[s].job ? kd_jobs_find(d, d->gpus[s].job) : NULL;
        if (!kj)
            continue;
        if (kj->stop != KD_STOP_CANCEL)
            kj->stop = KD_STOP_SHUTDOWN;
        kd_gpu_cancel(d, s);
    }
}

/* ---- placement ---- */

typedef struct last_trial {
    int64_t after_ms, last_ms;
} last_trial;

static int last_trial_cb(const cache_trial *t, void *ctx)
{
    last_trial *l = ctx;
    int64_t ms = t->ts_ms > 0 ? t->ts_ms : t->ts * 1000; /* entries from before ts_ms */
    if (ms > l->last_ms)
        l->last_ms = ms;
    return 0;
}

/* A job that was running when the daemon died (SIGKILL, crash, power loss) lost the time since
 * its journal entry was last written (KD_SAVE_PERIOD_S, and more when the daemon was killed
 * sooner than that after a restart: a crash loop lost nearly all of it). Its trial log is
 * written as each candidate ends, so the latest trial logged after the entry's elapsed_at_ms
 * marks how long that attempt ran at least: that span is added. The time the daemon was down
 * is not the job's and is not counted. Trials are read under the fingerprint of every GPU up
 * now (the job may have run on another model before the restart). */
static void resumed_time(kd_daemon *d, kd_job *kj)
{
    cache_job *j = &kj->j;
    if (j->elapsed_at_ms <= 0) /* journaled before elapsed_at_ms existed */
        return;
    cache_key k;
    memset(&k, 0, sizeof(k));
    memcpy(k.sig, j->sig, OPS_SIG_BYTES);
    memcpy(k.problem, j->problem, OPS_SIG_BYTES);
    k.n_shapes = j->n_shapes;
    memcpy(k.shapes, j->shapes, sizeof(cache_bound) * (size_t)j->n_shapes);
    k.precision = j->precision;
    k.tolerance = j->tolerance;
    last_trial l = {j->elapsed_at_ms, j->elapsed_at_ms};
    for (int s = 0; s < d->n_gpus; s++) {
        kd_gpu_state st = d->gpus[s].state;
        bool seen = st != KD_GPU_IDLE && st != KD_GPU_BUSY; /* fingerprint unknown */
        for (int t = 0; t < s && !seen; t++)
            seen = memcmp(&d->gpus[t].fp, &d->gpus[s].fp, sizeof(cache_gpu)) == 0;
        if (seen)
            continue;
        k.gpu = d->gpus[s].fp;
        kt_err err = {0};
        if (cache_trial_foreach(d->cache, &k, last_trial_cb, &l, &err) < 0)
            kt_log_warn(KD_LOG_JOBS, "job %" PRIu64 ": cannot read its trial log: %s", j->id,
                        err.msg);
    }
    double lost = (double)(l.last_ms - l.after_ms) / 1000.0;
    if (lost <= 0)
        return;
    kt_log_info(KD_LOG_JOBS,
                "job %" PRIu64 ": %.1f s of trials logged after its last journal save, counted "
                "(elapsed %.1f -> %.1f s of %.0f s)",
                j->id, lost, j->elapsed_s, j->elapsed_s + lost, j->budget_s);
    j->elapsed_s += lost;
    j->elapsed_at_ms = l.last_ms;
}

static bool better(const kd_job *a, const kd_job *b)
{
    if (!b)
        return true;
    if (a->j.priority != b->j.priority)
        return a->j.priority > b->j.priority;
    return a->j.id < b->j.id;
}

void kd_jobs_schedule(kd_daemon *d)
{
    if (d->stopping)
        return;
    for (int s = 0; s < d->n_gpus; s++) {
        kd_gpu *g = &d->gpus[s];
        if (g->state != KD_GPU_IDLE)
            continue;
        kd_job *best = NULL;
        for (size_t i = 0; i < d->n_jobs; i++) {
            kd_job *kj = d->jobs[i];
            if (kj->j.state == CACHE_JOB_QUEUED && (kj->j.gpu < 0 || kj->j.gpu == g->index) &&
                better(kj, best))
                best = kj;
        }
        if (!best)
            continue;
        /* running in the journal before the thread sees it: a crash from here on resumes it */
        best->j.state = CACHE_JOB_RUNNING;
        if (!best->j.started)
            best->j.started = kd_wall();
        if (best->crashed) {
            resumed_time(d, best);
            best->crashed = false;
        }
        best->slot = s;
        best->ran_on = g->index;
        best->run_t0 = kd_now();
        best->elapsed0 = best->j.elapsed_s;
        best->compile0 = best->j.compile_s;
        best->measure0 = best->j.measure_s;
        best->stop = KD_STOP_NONE;
        snprintf(best->phase, sizeof(best->phase), "start");
        best->j.error[0] = '\0';
        save(d, best);
        kt_err err = {0};
        if (kd_gpu_assign(d, s, best, &err) < 0) {
            kt_log_err(KD_LOG_JOBS, "job %" PRIu64 ": cannot start on GPU %d: %s", best->j.id,
                       g->index, err.msg);
            best->j.state = CACHE_JOB_QUEUED;
            best->slot = best->ran_on = -1;
            best->phase[0] = '\0';
            save(d, best);
            break;
        }
        kt_log_info(KD_LOG_JOBS, "job %" PRIu64 " %s running on GPU %d (priority %d%s)", best->j.id,
                    KT_ESC(best->j.name), g->index, (int)best->j.priority,
                    best->j.elapsed_s > 0 ? ", resumed" : "");
        best->progressed = true;
    }
    kd_daemon_changed(d);
}

/* ---- results from the GPU threads ---- */

void kd_jobs_on_progress(kd_daemon *d, int slot, uint64_t job, const srch_tune_progress *p,
                         const char *phase)
{
    kd_job *kj = kd_jobs_find(d, job);
    if (!kj || kj->slot != slot)
        return;
    kj->j.trials = p->trials;
    kj->j.measured = p->measured;
    kj->j.resumed = p->resumed;
    kj->j.best_ns = p->best_ns > 0 ? p->best_ns : 0;
    kj->j.baseline_ns = p->baseline_ns > 0 ? p->baseline_ns : 0;
    kj->j.floor_ns = p->floor_ns > 0 ? p->floor_ns : 0;
    double e = kj->elapsed0 + (p->elapsed_s > 0 ? p->elapsed_s : 0);
    if (e > kj->j.elapsed_s) /* save() may have counted from the attempt's start already */
        kj->j.elapsed_s = e;
    kj->j.compile_s = kj->compile0 + (p->compile_s > 0 ? p->compile_s : 0);
    kj->j.measure_s = kj->measure0 + (p->measure_s > 0 ? p->measure_s : 0);
    memcpy(kj->failures, p->failures, sizeof(kj->failures));
    snprintf(kj->phase, sizeof(kj->phase), "%s", phase);
    kj->progressed = true;
}

static void describe_failures(const int *failures, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int s = 1; s < SRCH_STATUS_COUNT && off < len; s++)
        if (failures[s] > 0)
            off += (size_t)snprintf(buf + off, len - off, "%s%s %d", off ? ", " : "",
                                    srch_status_str((srch_status)s), failures[s]);
}

/* The winner's summary into the job. */
static void take_result(kd_job *kj, const srch_tune_result *r)
{
    cache_job *j = &kj->j;
    j->trials = r->trials;
    j->measured = r->measured;
    j->resumed = r->resumed;
    j->floor_ns = r->roofline.floor_ns;
    memcpy(kj->failures, r->failures, sizeof(kj->failures));
    if (!r->found) {
        char f[200];
        describe_failures(r->failures, f, sizeof(f));
        /* and one reason, of the most frequent failure: what an operator acts on */
        int top = 0;
        for (int s = 1; s < SRCH_STATUS_COUNT; s++)
            if (r->failures[s] > (top ? r->failures[top] : 0))
                top = s;
        const char *why = top ? r->failure_example[top] : "";
        snprintf(j->error, sizeof(j->error), "no candidate verified in %d trials%s%s%s%s%s",
                 r->trials, f[0] ? " (" : "", f, f[0] ? ")" : "", why[0] ? "; e.g. " : "", why);
        return;
    }
    j->best_ns = r->time_ns;
    j->baseline_ns = r->baseline_ns;
    j->err_norm = r->err_norm;
    if (r->n_picks == 1) {
        snprintf(j->family, sizeof(j->family), "%s", ops_family_get(r->picks[0].family)->name);
        snprintf(j->schedule, sizeof(j->schedule), "%s", r->picks[0].schedule);
    } else {
        snprintf(j->family, sizeof(j->family), "partition");
        size_t off = 0;
        j->schedule[0] = '\0';
        for (int k = 0; k < r->n_picks && off < sizeof(j->schedule); k++)
            off += (size_t)snprintf(j->schedule + off, sizeof(j->schedule) - off, "%s%s",
                                    k ? " | " : "", r->picks[k].schedule);
    }
    j->record = r->record_note[0] == '\0';
    if (!j->record)
        snprintf(j->error, sizeof(j->error), "%s", r->record_note);
}

void kd_jobs_on_finish(kd_daemon *d, int slot, uint64_t job, int rc, const char *msg,
                       const srch_tune_result *res)
{
    kd_job *kj = kd_jobs_find(d, job);
    if (!kj || kj->slot != slot)
        return;
    kj->slot = -1;
    kj->phase[0] = '\0';
    if (res) {
        bring_elapsed_up(kj);
        if (kj->elapsed0 + res->seconds > kj->j.elapsed_s)
            kj->j.elapsed_s = kj->elapsed0 + res->seconds;
        kj->j.compile_s = kj->compile0 + (res->compile_s > 0 ? res->compile_s : 0);
        kj->j.measure_s = kj->measure0 + (res->measure_s > 0 ? res->measure_s : 0);
        if (rc == 0 || res->trials > 0)
            take_result(kj, res);
    }
    kd_stop stop = kj->stop;
    kj->stop = KD_STOP_NONE;
    uint64_t id = kj->j.id;
    if (rc == 0) {
        finish(d, kj, CACHE_JOB_DONE);
        kt_log_info(KD_LOG_JOBS, "job %" PRIu64 " done: %s in %d trials, %.1f s%s%s", id,
                    kj->j.record ? "record cached" : "no record", kj->j.trials, kj->j.elapsed_s,
                    kj->j.error[0] ? ": " : "", kj->j.error);
    } else if (rc == -ECANCELED && stop == KD_STOP_CANCEL) {
        snprintf(kj->j.error, sizeof(kj->j.error), "cancelled after %d trials by uid %u",
                 kj->j.trials, (unsigned)kj->cancel_by);
        finish(d, kj, CACHE_JOB_CANCELLED);
        kt_log_info(KD_LOG_JOBS, "job %" PRIu64 " of uid %u cancelled after %d trials by uid %u",
                    id, (unsigned)kj->j.owner, kj->j.trials, (unsigned)kj->cancel_by);
    } else if ((rc == -ECANCELED && stop == KD_STOP_SHUTDOWN) || rc == -ENODEV) {
        /* back to the queue: the next start (or another GPU) resumes it from its trial log */
        kj->j.state = CACHE_JOB_QUEUED;
        kj->j.error[0] = '\0';
        save(d, kj);
        kt_log_info(KD_LOG_JOBS, "job %" PRIu64 " queued again after %d trials (%s)", id,
                    kj->j.trials, rc == -ENODEV ? msg : "shutting down");
    } else {
        /* srch_tune can fail without a message (a trial it could not log, e.g. on a full
         * disk): then the errno names the cause */
        const char *name = strerrorname_np(-rc);
        if (msg[0])
            snprintf(kj->j.error, sizeof(kj->j.error), "%s", msg);
        else
            snprintf(kj->j.error, sizeof(kj->j.error), "failed: %s (%s)", strerror(-rc),
                     name ? name : "EIO");
        finish(d, kj, CACHE_JOB_FAILED);
        kt_log_warn(KD_LOG_JOBS, "job %" PRIu64 " failed: %s", id, kj->j.error);
    }
    kd_jobs_schedule(d);
    kd_daemon_changed(d);
}
