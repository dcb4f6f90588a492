/* The search strategy of search/tune.h: screen, refine, re-time, pick, then record
 * (tune_record.c). This file is the job: bookkeeping, ranking, evaluation, the phases and
 * srch_tune (candidate ids and the trial log: tune_trials.c); search/tune_internal.h says what
 * each file owns. */
#include "tune_internal.h"

#include "ops/library.h"
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG "tune"

/* Candidates the worker keeps loaded for "retime" (worker.h). */
#define WORKER_LOADED 64
/* Round A covers the groups of up to this many partitions (cheapest estimates first), in steps
 * of ROUND_A_STEP partitions; a step starts only while round A has used less than
 * ROUND_A_SHARE of the screening budget. Every new group costs a data set and an fp64
 * reference run (a fraction of a second on 64 MiB inputs), so with a short budget the groups
 * of the partitions the model ranks first get the rest of it (screen, refine) instead of
 * one candidate each for 32 partitions. */
#define ROUND_A_PARTS 16
#define ROUND_A_STEP  4
#define ROUND_A_SHARE 0.35
/* Further candidates tried, one at a time, for a group whose round-A pick failed. */
#define ROUND_A_RETRIES 5
/* Ties: two medians closer than this relative distance (or twice the larger relative spread of
 * the median) are equal, and the cost model's order decides. */
#define TIE_REL 0.005
/* CUPTI timestamps on the H100 come in 32 ns steps: two steps are within the noise whatever the
 * spread of the reps says (a 1.8 us kernel's median moves by a step between runs). */
#define TIE_ABS_NS 64.0
/* Screening measurements (0.1 s) move by a few percent between runs, more than their own
 * spread says: within this band the cost model's order decides, so which candidates get refined
 * and re-timed does not depend on that run-to-run noise. */
#define TIE_REL_SCREEN 0.03
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int srch_tn_defint(int v, int def)
{
    return v > 0 ? v : def;
}

/* ---- bookkeeping ---- */

void srch_tn_report(tune *t, const char *phase)
{
    if (phase)
        t->prog.phase = phase;
    t->prog.elapsed_s = now_s() - t->t0;
    if (t->o->progress)
        t->o->progress(&t->prog, t->o->progress_ctx);
}

/* The tuning cost: a compile result this job uses, and time spent measuring. */
void srch_tn_add_compile(tune *t, const srch_compile_result *cr)
{
    t->r->compile_s += cr->seconds;
    t->prog.compile_s += cr->seconds;
}

static void add_measure(tune *t, double since)
{
    double d = now_s() - since;
    t->r->measure_s += d;
    t->prog.measure_s += d;
}

static void settle(tune *t, int64_t i)
{
    cand *c = &t->c[i];
    c->done = true;
    c->queued = false;
    t->r->trials++;
    t->prog.trials++;
    if (c->from_log) {
        t->r->resumed++;
        t->prog.resumed++;
    } else if (c->measured) {
        t->r->measured++;
        t->prog.measured++;
    }
    if (c->status != SRCH_OK) {
        t->r->failures[c->status]++;
        t->prog.failures[c->status]++;
        char *ex = t->r->failure_example[c->status];
        if (!ex[0]) {
            char sched[200];
            ops_schedule_format(&t->list[i].schedule, sched, sizeof(sched));
            snprintf(ex, sizeof(t->r->failure_example[0]), "%.100s: %.150s", sched, c->msg);
        }
    }
    int part;
    t->prog.best_ns = srch_tn_best_partition(t, &part, false);
    t->prog.baseline_ns = srch_tn_best_partition(t, &part, true);
    srch_tn_report(t, NULL);
}

bool srch_tn_cancelled(const tune *t)
{
    return t->o->cancel && atomic_load(t->o->cancel);
}

static bool over_budget(tune *t)
{
    if (srch_tn_cancelled(t))
        return true;
    if (!t->out_of_budget && now_s() >= t->end) {
        t->out_of_budget = true;
        t->r->budget_hit = true;
        /* compiles not started yet would only be dropped: free the pool's processes now */
        if (t->pool)
            srch_pool_discard(t->pool);
    }
    return t->out_of_budget;
}

/* ---- ranking ---- */

static bool verified(const cand *c)
{
    return c->done && c->status == SRCH_OK && c->time.median_ns > 0 && !c->set_aside;
}

/* The stats a comparison uses: the re-timed ones once picking, for re-timed finalists. */
const srch_time_stats *srch_tn_tm(const tune *t, int64_t i)
{
    return t->final && t->c[i].retimed ? &t->c[i].rtime : &t->c[i].time;
}

/* Is a faster than b? Medians within the noise tie, and a tie goes to the earlier candidate in
 * the cost model's order (list index), so the same measurements always pick the same one. */
static bool better(const tune *t, int64_t a, int64_t b)
{
    const srch_time_stats *x = srch_tn_tm(t, a), *y = srch_tn_tm(t, b);
    double lo = fmin(x->median_ns, y->median_ns);
    bool retimed = x == &t->c[a].rtime && y == &t->c[b].rtime;
    double noise = fmax(retimed ? TIE_REL : TIE_REL_SCREEN, 2 * fmax(x->rel_spread, y->rel_spread));
    if (fabs(x->median_ns - y->median_ns) <= fmax(lo * noise, TIE_ABS_NS))
        return a < b;
    return x->median_ns < y->median_ns;
}

/* Best verified candidate of group g (optionally only library ones, or only non-library), or -1.
 * Within-noise ties are resolved against the fastest: the earliest candidate within the noise
 * of the fastest wins, which keeps the rule independent of the order candidates were seen. */
int64_t srch_tn_group_best(const tune *t, int g, int lib)
{
    /* Once finalists were re-timed against each other, the winner is one of them: their
     * interleaved times are comparable with each other, not with screening times. */
    bool only_retimed = false;
    for (int64_t i = t->gstart[g]; i < t->gend[g]; i++) {
        bool is_lib = t->list[i].schedule.family == OPS_FAM_LIBRARY;
        only_retimed |= t->final && verified(&t->c[i]) && t->c[i].retimed &&
                        !(lib == 1 && !is_lib) && !(lib == 0 && is_lib);
    }
    int64_t fast = -1;
    for (int64_t i = t->gstart[g]; i < t->gend[g]; i++) {
        bool is_lib = t->list[i].schedule.family == OPS_FAM_LIBRARY;
        if (!verified(&t->c[i]) || (lib == 1 && !is_lib) || (lib == 0 && is_lib) ||
            (only_retimed && !t->c[i].retimed))
            continue;
        if (fast < 0 || srch_tn_tm(t, i)->median_ns < srch_tn_tm(t, fast)->median_ns)
            fast = i;
    }
    if (fast < 0)
        return -1;
    for (int64_t i = t->gstart[g]; i < fast; i++) {
        bool is_lib = t->list[i].schedule.family == OPS_FAM_LIBRARY;
        if (verified(&t->c[i]) && !(lib == 1 && !is_lib) && !(lib == 0 && is_lib) &&
            !(only_retimed && !t->c[i].retimed) && better(t, i, fast))
            return i;
    }
    return fast;
}

int64_t srch_tn_part_pick(const tune *t, const srch_partition *part, int k)
{
    return srch_tn_group_best(t, part->groups[k], part->n_groups > 1 ? 0 : -1);
}

/* Up to max verified candidates of group g in winning order (only re-timed ones with
 * retimed_only). Returns the count. */
int srch_tn_group_ranked(const tune *t, int g, bool retimed_only, int64_t *out, int max)
{
    int n = 0;
    for (int64_t i = t->gstart[g]; i < t->gend[g]; i++) {
        if (!verified(&t->c[i]) || (retimed_only && !t->c[i].retimed))
            continue;
        /* insertion into the sorted prefix */
        int pos = n < max ? n : max;
        while (pos > 0 && better(t, i, out[pos - 1]))
            pos--;
        if (pos >= max)
            continue;
        int last = n < max ? n : max - 1;
        for (int k = last; k > pos; k--)
            out[k] = out[k - 1];
        out[pos] = i;
        if (n < max)
            n++;
    }
    return n;
}

static bool group_has_library(const tune *t, int g)
{
    for (int64_t i = t->gstart[g]; i < t->gend[g]; i++)
        if (t->list[i].schedule.family == OPS_FAM_LIBRARY)
            return true;
    return false;
}

/* Measured time of partition p: each group's best (with library_baseline, cuBLASLt's best for
 * groups it can do), plus the gaps. 0 when a group has no verified candidate, or (baseline)
 * when no group of it has a library candidate. */
static double partition_time(const tune *t, int p, bool library_baseline)
{
    const srch_partition *part = &t->s->partitions[p];
    double sum = 0;
    bool any_lib = false;
    if (t->part_set_aside && t->part_set_aside[p])
        return 0;
    for (int k = 0; k < part->n_groups; k++) {
        int g = part->groups[k];
        int64_t b = -1;
        if (library_baseline && group_has_library(t, g)) {
            b = srch_tn_group_best(t, g, 1);
            any_lib = true;
        } else {
            b = srch_tn_part_pick(t, part, k);
        }
        if (b < 0)
            return 0;
        sum += srch_tn_tm(t, b)->median_ns;
    }
    if (library_baseline && !any_lib)
        return 0;
    return sum + TN_GAP_NS * (part->n_groups - 1);
}

/* Is time a faster than b beyond the noise (the tie rule of better(), on sums)? Partitions and
 * refinement rounds compare by this, so ties go to the cost model's order and a gain within the
 * noise does not steer the search: the same job takes the same path on every run. */
static bool clearly_less(const tune *t, double a, double b)
{
    double band = fmax(fmin(a, b) * (t->final ? TIE_REL : TIE_REL_SCREEN), TIE_ABS_NS);
    return a < b - band;
}

double srch_tn_best_partition(const tune *t, int *which, bool library_baseline)
{
    double best = 0;
    *which = -1;
    for (int p = 0; p < t->s->n_partitions; p++) {
        double v = partition_time(t, p, library_baseline);
        /* partitions come in estimate order: within the noise the earlier one wins */
        if (v > 0 && (best == 0 || clearly_less(t, v, best))) {
            best = v;
            *which = p;
        }
    }
    return best;
}

/* ---- evaluation ---- */

void srch_tn_first_error_line(const char *log, char *buf, size_t len)
{
    const char *e = strstr(log, "error");
    const char *start = e ? e : log;
    while (e && start > log && start[-1] != '\n')
        start--;
    size_t n = strcspn(start, "\n");
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), start);
}

static int fail_cand(tune *t, int64_t i, srch_status st, const char *fmt, ...) KT_PRINTF(4, 5);

static int log_trial(tune *t, int64_t i, kt_err *err)
{
    kt_err local = {0};
    if (!err) /* the cause still reaches the log */
        err = &local;
    cache_trial tr;
    srch_tn_trial_from(&t->c[i], &tr);
    int rc = cache_trial_append(t->cache, &t->key, &tr, err);
    if (rc < 0)
        kt_log_err(TAG, "cannot log trial %s: %s", tr.cand, err->msg);
    settle(t, i);
    return rc;
}

static int fail_cand(tune *t, int64_t i, srch_status st, const char *fmt, ...)
{
    cand *c = &t->c[i];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
    va_end(ap);
    c->status = st;
    ops_emitted_free(&c->em);
    return log_trial(t, i, NULL);
}

/* The screening measurement (tune.h): the job's timing options, with the fields it leaves
 * <= 0 taking the cheap screening defaults instead of timing.h's. */
static srch_time_opts screen_timing(const srch_time_opts *o)
{
    srch_time_opts s = *o;
    if (s.warmup_s <= 0)
        s.warmup_s = SRCH_SCREEN_WARMUP_S;
    if (s.budget_s <= 0)
        s.budget_s = SRCH_SCREEN_BUDGET_S;
    if (s.min_reps <= 0)
        s.min_reps = SRCH_SCREEN_MIN_REPS;
    return s;
}

/* The worker's request for candidate i (emitted into its em): SRCH_OK, or the status to fail it
 * with (detail in d). */
static srch_status eval_request(tune *t, int64_t i, const void *cubin, size_t cubin_len,
                                srch_eval_req *req, ops_diag *d)
{
    const srch_candidate *sc = &t->list[i];
    const ops_group *grp = &t->s->groups[sc->group].group;
    memset(req, 0, sizeof(*req));
    if (srch_eval_req_for_group(grp, &t->c[i].em, cubin, cubin_len, req, d) < 0)
        return SRCH_LOAD_ERROR;
    /* A group that reads an intermediate of the graph is verified on the values the graph
     * gives it (the worker runs the whole graph's reference from random graph inputs); one
     * that reads only graph inputs keeps fresh random inputs and its cheaper data set. */
    if (srch_group_reads_intermediates(grp) && srch_eval_req_set_full(req, t->s->g, d) < 0) {
        srch_eval_req_free(req);
        return SRCH_LOAD_ERROR;
    }
    if (req->library) {
        ops_lt_desc lt;
        if (ops_library_describe(grp, &sc->schedule, &lt, d) < 0 ||
            srch_eval_req_set_lt(req, grp, &lt, d) < 0) {
            srch_eval_req_free(req);
            return SRCH_UNAVAILABLE;
        }
    }
    req->id = (uint64_t)i;
    req->precision = t->o->precision;
    req->tolerance = t->o->tolerance;
    req->seeds = srch_tn_defint(t->o->seeds, 3);
    req->verify = true;
    req->time = true;
    req->timing = screen_timing(&t->o->timing);
    return SRCH_OK;
}

/* Sends req (freed here) to the worker: 0 with res, or a negative errno when the worker cannot
 * be restarted. *restarted: the worker was restarted meanwhile (what it held is gone). */
int srch_tn_worker_eval(tune *t, srch_eval_req *req, srch_eval_result *res, bool *restarted,
                        kt_err *err)
{
    int before = srch_worker_restarts(t->w);
    double m0 = now_s();
    double deadline =
        (t->o->deadline_s > 0 ? t->o->deadline_s : 30) + srch_eval_req_data_seconds(req);
    int rc = srch_worker_eval(t->w, req, deadline, res, err);
    add_measure(t, m0);
    srch_eval_req_free(req);
    *restarted = srch_worker_restarts(t->w) != before;
    return rc;
}

/* c was just sent to the worker: it holds it now (see loaded()), unless it restarted. */
static void note_loaded(tune *t, cand *c, bool restarted)
{
    c->seq = ++t->seq;
    c->restarts_at = srch_worker_restarts(t->w);
    if (restarted)
        c->seq = 0; /* not loaded in the (new) worker: it cannot be re-timed */
}

static int evaluate(tune *t, int64_t i, const void *cubin, size_t cubin_len, kt_err *err)
{
    cand *c = &t->c[i];
    srch_eval_req req;
    ops_diag d = {0};
    srch_status st = eval_request(t, i, cubin, cubin_len, &req, &d);
    if (st != SRCH_OK)
        return fail_cand(t, i, st, st == SRCH_UNAVAILABLE ? "%s" : "cannot build the request: %s",
                         d.msg);
    srch_eval_result res;
    bool restarted;
    int rc = srch_tn_worker_eval(t, &req, &res, &restarted, err);
    if (rc < 0)
        return rc; /* the worker cannot be restarted: the job cannot go on */
    if (srch_tn_cancelled(t) && (res.status == SRCH_FAULT || res.status == SRCH_HANG)) {
        c->queued = false;
        return 0;
    } /* above: abandoned at shutdown (srch_worker_abort): not logged, a resumed job measures
       * it again */
    c->measured = true;
    note_loaded(t, c, restarted);
    t->r->restarts = srch_worker_restarts(t->w);
    c->status = res.status;
    c->time = res.time;
    c->err_norm = res.err_norm;
    c->err_max = res.err_max;
    snprintf(c->msg, sizeof(c->msg), "%s", res.msg);
    if (res.status == SRCH_OK && cubin_len) {
        if ((c->cubin = malloc(cubin_len))) {
            memcpy(c->cubin, cubin, cubin_len);
            c->cubin_len = cubin_len;
        }
    }
    ops_emitted_free(&c->em);
    return log_trial(t, i, err); /* e.g. a full disk: the job's error names it */
}

/* Moves one finished compile from the pool to its candidate (results for candidates no longer
 * waiting, e.g. left from a batch the budget cut short, are dropped). */
static int collect_compile(tune *t, kt_err *err)
{
    srch_compile_result *cr = calloc(1, sizeof(*cr));
    kt_err perr = {0};
    if (!cr)
        return kt_err_set(err, -ENOMEM, "out of memory");
    int rc = srch_pool_next(t->pool, cr, &perr);
    if (rc < 0) {
        free(cr);
        return rc == -EAGAIN ? rc : kt_err_set(err, rc, "compile pool: %s", perr.msg);
    }
    int64_t i = (int64_t)cr->tag;
    if (i < 0 || i >= t->n || t->c[i].done || !t->c[i].queued || t->c[i].ready) {
        srch_compile_result_release(cr);
        free(cr);
        return 0;
    }
    srch_tn_add_compile(t, cr);
    t->c[i].ready = cr;
    return 0;
}

/* Evaluates candidate i once its compile is in (waiting for it: the pool keeps compiling the
 * rest of the batch meanwhile). */
static int finish(tune *t, int64_t i, kt_err *err)
{
    cand *c = &t->c[i];
    int rc = 0;
    /* Spent budget: no waiting for a compile still running (slow compiles must not stretch the
     * job past its budget); its result is dropped when it arrives. */
    if (!c->ready && over_budget(t)) {
        c->queued = false;
        ops_emitted_free(&c->em);
        return 0;
    }
    while (!c->ready && srch_pool_pending(t->pool) > 0)
        if ((rc = collect_compile(t, err)) < 0)
            return rc == -EAGAIN ? 0 : rc;
    srch_compile_result *cr = c->ready;
    c->ready = NULL;
    if (!cr || over_budget(t)) {
        /* Not measured: it stays untried, so a rerun with more budget picks it up. */
        c->queued = false;
        ops_emitted_free(&c->em);
    } else if (cr->status != SRCH_COMPILE_OK) {
        char line[240];
        srch_tn_first_error_line(cr->log ? cr->log : "", line, sizeof(line));
        rc = fail_cand(t, i, SRCH_COMPILE_ERROR, "%s: %s", srch_status_name(cr->status), line);
    } else {
        rc = evaluate(t, i, cr->cubin, cr->cubin_len, err);
    }
    if (cr) {
        srch_compile_result_release(cr);
        free(cr);
    }
    return rc;
}

/* Evaluates the candidates idx[0..n): those in the trial log are read back, the others emitted
 * and submitted to the compile pool at once, then measured in batch order (the caller's
 * priority) as their cubins arrive, so compiling the rest overlaps measuring. */
static int run_batch(tune *t, const int64_t *idx, int64_t n, kt_err *err)
{
    int rc = 0;
    for (int64_t k = 0; k < n && rc >= 0; k++) {
        int64_t i = idx[k];
        cand *c = &t->c[i];
        if (c->done || c->queued)
            continue;
        cache_trial tr;
        if (srch_tn_trial_get(t, c->id, &tr) == 0) {
            srch_tn_cand_from_trial(c, &tr, t->o->tolerance);
            settle(t, i);
            continue;
        }
        if (over_budget(t))
            break;
        const srch_candidate *sc = &t->list[i];
        const ops_family *f = ops_family_get(sc->schedule.family);
        ops_diag d = {0};
        if (f->emit(&t->s->groups[sc->group].group, &sc->schedule, &t->dev, &c->em, &d) < 0) {
            rc = fail_cand(t, i, SRCH_COMPILE_ERROR, "emit: %s", d.msg);
            continue;
        }
        if (c->em.n_kernels == 0) {
            /* A library candidate: nothing to compile. Measure it now, while the pool
             * compiles what was submitted before it. */
            rc = evaluate(t, i, NULL, 0, err);
            continue;
        }
        if (srch_pool_submit(t->pool, c->em.source, (uint64_t)i) < 0)
            return kt_err_set(err, -ENOMEM, "out of memory queueing a compile");
        c->queued = true;
    }
    for (int64_t k = 0; k < n && rc >= 0; k++)
        if (t->c[idx[k]].queued)
            rc = finish(t, idx[k], err);
    return rc < 0 ? rc : 0;
}

/* ---- phases ---- */

typedef struct batch {
    int64_t *idx;
    int64_t n;
    size_t cap;
} batch;

static int batch_add(batch *b, int64_t i)
{
    for (int64_t k = 0; k < b->n; k++)
        if (b->idx[k] == i)
            return 0;
    if (kt_grow(&b->idx, &b->cap, (size_t)b->n + 1, sizeof(int64_t)) < 0)
        return -ENOMEM;
    b->idx[b->n++] = i;
    return 0;
}

/* Round A for group g: the cost model's pick and every library candidate. */
static int add_first(tune *t, batch *b, int g)
{
    int rc = 0;
    if (t->gstart[g] < t->gend[g])
        rc = batch_add(b, t->gstart[g]);
    for (int64_t i = t->gstart[g]; i < t->gend[g] && rc == 0; i++)
        if (t->list[i].schedule.family == OPS_FAM_LIBRARY)
            rc = batch_add(b, i);
    return rc;
}

/* Round B for group g: the top of its list and a spread over its families. */
static int add_screen(tune *t, batch *b, int g)
{
    int64_t n = t->gend[g] - t->gstart[g];
    int top = srch_tn_defint(t->o->screen_top, 4), spread = srch_tn_defint(t->o->screen_spread, 6);
    int rc = 0;
    for (int64_t k = 0; k < n && k < top && rc == 0; k++)
        rc = batch_add(b, t->gstart[g] + k);
    int64_t *pick = malloc((size_t)spread * sizeof(int64_t));
    if (!pick)
        return -ENOMEM;
    int64_t np = srch_spread(t->list + t->gstart[g], n, t->s, spread, pick);
    for (int64_t k = 0; k < np && rc == 0; k++)
        rc = batch_add(b, t->gstart[g] + pick[k]);
    free(pick);
    return rc;
}

/* The list index of schedule s in group g, or -1 when it is not a kept candidate. */
static int64_t find_schedule(const tune *t, int g, const ops_schedule *s)
{
    int nk = ops_family_get(s->family)->n_knobs;
    for (int64_t i = t->gstart[g]; i < t->gend[g]; i++) {
        const ops_schedule *x = &t->list[i].schedule;
        if (x->family == s->family && memcmp(x->v, s->v, (size_t)nk * sizeof(int)) == 0)
            return i;
    }
    return -1;
}

/* Whether the schedule's text holds every '&'-separated part of pattern (of any length). */
static bool schedule_matches(const ops_schedule *s, const char *pattern)
{
    char text[512];
    ops_schedule_format(s, text, sizeof(text));
    for (const char *p = pattern;; p++) {
        size_t len = strcspn(p, "&");
        if (!memmem(text, strlen(text), p, len))
            return false;
        p += len;
        if (!*p)
            return true;
    }
}

/* Drops the candidates whose schedule does not match `only` (srch_tune_opts.only). */
static int keep_only(tune *t, const char *only, kt_err *err)
{
    int64_t kept = 0;
    for (int64_t i = 0; i < t->n; i++)
        if (schedule_matches(&t->list[i].schedule, only))
            t->list[kept++] = t->list[i];
    if (kept == 0)
        return kt_err_set(err, -ENOENT, "no candidate's schedule matches '%s' (of %lld)", only,
                          (long long)t->n);
    t->n = kept;
    return 0;
}

/* Neighbours of candidate i: one knob moved one step along its value list. */
static int add_neighbours(tune *t, batch *b, int64_t i)
{
    const srch_candidate *sc = &t->list[i];
    const ops_family *f = ops_family_get(sc->schedule.family);
    for (int k = 0; k < f->n_knobs; k++) {
        const ops_knob *kn = &f->knobs[k];
        int at = -1;
        for (int v = 0; v < kn->n_values; v++)
            if (kn->values[v] == sc->schedule.v[k])
                at = v;
        for (int step = -1; step <= 1 && at >= 0; step += 2) {
            int v = at + step;
            if (v < 0 || v >= kn->n_values)
                continue;
            ops_schedule s = sc->schedule;
            s.v[k] = kn->values[v];
            int64_t j = find_schedule(t, sc->group, &s);
            if (j >= 0 && !t->c[j].done && batch_add(b, j) < 0)
                return -ENOMEM;
        }
    }
    return 0;
}

/* Queues the next untried candidate of partition part's group k, unless the group has one
 * the partition can serve (srch_tn_part_pick) verified already. */
static int add_next_untried(tune *t, batch *b, const srch_partition *part, int k)
{
    int g = part->groups[k];
    if (srch_tn_part_pick(t, part, k) >= 0)
        return 0;
    for (int64_t i = t->gstart[g]; i < t->gend[g]; i++)
        if (!t->c[i].done &&
            !(part->n_groups > 1 && t->list[i].schedule.family == OPS_FAM_LIBRARY))
            return batch_add(b, i);
    return 0;
}

static int screen(tune *t, kt_err *err)
{
    batch b = {0};
    int rc = 0;
    srch_tn_report(t, "screen");
    int max_parts = t->s->n_partitions < ROUND_A_PARTS ? t->s->n_partitions : ROUND_A_PARTS;
    double round_a_end = t->t0 + (t->end - t->t0) * ROUND_A_SHARE;
    int parts = 0;
    while (parts < max_parts && rc == 0 && !over_budget(t) &&
           (parts == 0 || now_s() < round_a_end)) {
        b.n = 0;
        for (int p = parts; p < parts + ROUND_A_STEP && p < max_parts && rc == 0; p++)
            for (int k = 0; k < t->s->partitions[p].n_groups && rc == 0; k++)
                rc = add_first(t, &b, t->s->partitions[p].groups[k]);
        parts = parts + ROUND_A_STEP < max_parts ? parts + ROUND_A_STEP : max_parts;
        if (rc == 0)
            rc = run_batch(t, b.idx, b.n, err);
    }
    /* A group whose pick failed gets the next of its list, a few times, so that one bad
     * candidate (a fault, a wrong kernel) does not take its partitions out of the race. */
    for (int retry = 0; retry < ROUND_A_RETRIES && rc == 0 && !over_budget(t); retry++) {
        b.n = 0;
        for (int p = 0; p < parts && rc == 0; p++)
            for (int k = 0; k < t->s->partitions[p].n_groups && rc == 0; k++)
                rc = add_next_untried(t, &b, &t->s->partitions[p], k);
        if (b.n == 0)
            break;
        if (rc == 0)
            rc = run_batch(t, b.idx, b.n, err);
    }
    b.n = 0;
    /* Round B: the groups of the best measured partitions (by estimate where none measured),
     * and those of the model's first partition (the cheapest estimate, as a rule the most
     * fused) when its measured sum is behind the best but within twice it: one pick is a thin
     * sample of a group of hundreds of schedules, and a latency-bound first pick (RMSNorm over
     * 2048 x 8192 bf16: 37 us, where the group's best is about half that) would otherwise drop
     * the partition behind every two-kernel one. */
    int want = srch_tn_defint(t->o->screen_parts, 3), taken = 0;
    bool *used = calloc((size_t)t->s->n_partitions, sizeof(bool));
    if (!used)
        rc = -ENOMEM;
    double first = rc == 0 && t->s->n_partitions > 0 ? partition_time(t, 0, false) : 0;
    double fastest = 0;
    for (int p = 0; first > 0 && p < t->s->n_partitions; p++) {
        double v = partition_time(t, p, false);
        if (v > 0 && (fastest == 0 || v < fastest))
            fastest = v;
    }
    if (first > 0 && clearly_less(t, fastest, first) && first <= 2 * fastest) {
        used[0] = true;
        for (int k = 0; k < t->s->partitions[0].n_groups && rc == 0; k++)
            rc = add_screen(t, &b, t->s->partitions[0].groups[k]);
    }
    while (rc == 0 && taken < want && taken < t->s->n_partitions) {
        int pick = -1;
        double best = 0;
        for (int p = 0; p < t->s->n_partitions; p++) {
            double v = used[p] ? 0 : partition_time(t, p, false);
            if (v > 0 && (pick < 0 || clearly_less(t, v, best))) {
                pick = p;
                best = v;
            }
        }
        for (int p = 0; pick < 0 && p < t->s->n_partitions; p++)
            if (!used[p])
                pick = p;
        if (pick < 0)
            break;
        used[pick] = true;
        taken++;
        for (int k = 0; k < t->s->partitions[pick].n_groups && rc == 0; k++)
            rc = add_screen(t, &b, t->s->partitions[pick].groups[k]);
    }
    free(used);
    if (rc == 0)
        rc = run_batch(t, b.idx, b.n, err);
    else if (rc == -ENOMEM)
        kt_err_set(err, rc, "out of memory planning the screen");
    free(b.idx);
    return rc;
}

/* One round of a search phase: the candidates add_group plans for each group of the leading
 * partition, measured. *none: it planned none (every one already tried). */
static int search_round(tune *t, int (*add_group)(tune *t, batch *b, int g), const char *phase,
                        bool *none, kt_err *err)
{
    int p;
    *none = true;
    if (srch_tn_best_partition(t, &p, false) <= 0)
        return 0;
    batch b = {0};
    int rc = 0;
    const srch_partition *part = &t->s->partitions[p];
    for (int k = 0; k < part->n_groups && rc == 0; k++)
        rc = add_group(t, &b, part->groups[k]);
    if (rc == -ENOMEM)
        rc = kt_err_set(err, rc, "out of memory planning the %s", phase);
    *none = b.n == 0;
    if (rc == 0 && b.n > 0)
        rc = run_batch(t, b.idx, b.n, err);
    free(b.idx);
    return rc;
}

/* Refinement's plan for group g: the neighbours of its best few generated candidates. */
static int add_refinement(tune *t, batch *b, int g)
{
    int nbest = srch_tn_defint(t->o->refine_best, 2), rc = 0;
    int64_t top[8];
    int n = srch_tn_group_ranked(t, g, false, top, nbest < 8 ? nbest : 8);
    for (int j = 0; j < n && rc == 0; j++)
        if (t->list[top[j]].schedule.family != OPS_FAM_LIBRARY)
            rc = add_neighbours(t, b, top[j]);
    return rc;
}

/* Local search around the best candidates of the leading partition's groups, until a round
 * improves nothing (converged) or the budget is spent. */
static int refine(tune *t, kt_err *err)
{
    int rounds = srch_tn_defint(t->o->refine_rounds, 4);
    srch_tn_report(t, "refine");
    int rc = 0;
    for (int round = 0; round < rounds && rc == 0 && !over_budget(t); round++) {
        int p;
        bool none;
        double before = srch_tn_best_partition(t, &p, false);
        if ((rc = search_round(t, add_refinement, "refinement", &none, err)) < 0 || none)
            break; /* every neighbour already tried: converged */
        if (!clearly_less(t, srch_tn_best_partition(t, &p, false), before))
            break; /* nothing better beyond the noise: converged */
    }
    return rc;
}

/* Exploration, once refinement has converged with budget left: per group of the leading
 * partition, the next EXPLORE_TOP untried candidates in the cost model's order and EXPLORE_SPREAD
 * more strided over the rest of its untried list, then refinement around whatever they beat.
 * It ends after EXPLORE_PATIENCE rounds in a row that find nothing clearly faster, plus one more
 * per EXPLORE_ROUND_S of the job's budget (a longer budget buys a wider look: with 3 rounds, a
 * 15 s job stopped at 4 s in one of two basins 20% apart, which of them by timing noise), or on
 * the budget. Its choices depend only on the budget and measured outcomes, so a rerun replays
 * them from the trial log and measures nothing new. */
#define EXPLORE_TOP      4
#define EXPLORE_SPREAD   8
#define EXPLORE_PATIENCE 3
#define EXPLORE_ROUND_S  5.0

static int add_unexplored(tune *t, batch *b, int g)
{
    int64_t untried = 0;
    for (int64_t i = t->gstart[g]; i < t->gend[g]; i++)
        untried += !t->c[i].done;
    int64_t stride =
        untried > EXPLORE_TOP + EXPLORE_SPREAD ? (untried - EXPLORE_TOP) / EXPLORE_SPREAD : 1;
    int64_t k = 0;
    int rc = 0;
    for (int64_t i = t->gstart[g]; i < t->gend[g] && rc == 0; i++) {
        if (t->c[i].done)
            continue;
        if (k < EXPLORE_TOP || (k - EXPLORE_TOP) % stride == 0)
            rc = batch_add(b, i);
        k++;
    }
    return rc;
}

static int explore(tune *t, kt_err *err)
{
    int rc = 0;
    srch_tn_report(t, "explore");
    double budget = t->o->budget_s > 0 ? t->o->budget_s : SRCH_DEFAULT_BUDGET_S;
    int patience = EXPLORE_PATIENCE + (int)(budget / EXPLORE_ROUND_S);
    for (int quiet = 0; quiet < patience && rc == 0 && !over_budget(t);) {
        int p;
        bool none;
        double before = srch_tn_best_partition(t, &p, false);
        if ((rc = search_round(t, add_unexplored, "exploration", &none, err)) < 0 || none)
            break; /* every candidate of the leading partition's groups tried */
        if ((rc = refine(t, err)) < 0)
            break;
        quiet = clearly_less(t, srch_tn_best_partition(t, &p, false), before) ? 0 : quiet + 1;
    }
    return rc;
}

/* Is candidate i among those the current worker holds (evaluated or loaded since its last
 * restart, among its last WORKER_LOADED)? */
static bool loaded(const tune *t, int64_t i)
{
    const cand *c = &t->c[i];
    return c->seq && c->restarts_at == srch_worker_restarts(t->w) &&
           t->seq - c->seq < WORKER_LOADED;
}

/* Loads verified candidate i into the worker again, neither verified nor timed (it was, in this
 * run), so that it can be re-timed: a finalist found early is evicted by the WORKER_LOADED
 * evaluations after it, or lost to a restart. *ok is false when it cannot be (a candidate of the
 * trial log has no cubin here; the worker refused it or restarted). Returns 0, or a negative
 * errno when the worker cannot be restarted (the job cannot go on). */
static int reload(tune *t, int64_t i, bool *ok, kt_err *err)
{
    cand *c = &t->c[i];
    const srch_candidate *sc = &t->list[i];
    *ok = false;
    if (!c->measured || (!c->cubin && sc->schedule.family != OPS_FAM_LIBRARY))
        return 0;
    ops_diag d = {0};
    if (ops_family_get(sc->schedule.family)
            ->emit(&t->s->groups[sc->group].group, &sc->schedule, &t->dev, &c->em, &d) < 0)
        return 0;
    srch_eval_req req;
    srch_status st = eval_request(t, i, c->cubin, c->cubin_len, &req, &d);
    ops_emitted_free(&c->em);
    if (st != SRCH_OK)
        return 0;
    req.verify = req.time = false;
    srch_eval_result res;
    bool restarted;
    int rc = srch_tn_worker_eval(t, &req, &res, &restarted, err);
    if (rc < 0)
        return rc;
    if (res.status != SRCH_OK || restarted) {
        kt_log_warn(TAG, "candidate %s: reloading it to re-time it failed (%s: %s)", c->id,
                    srch_status_str(res.status), res.msg);
        return 0;
    }
    note_loaded(t, c, false);
    *ok = true;
    return 0;
}

/* The finalists top[0..n) (of at most max) with the group's fastest generated kernel and its
 * fastest library call among them, each taking the place of the slowest other finalist: whether
 * ktune's own kernel or cuBLASLt serves the group is decided on interleaved times, never by
 * screening ties, which go to the earlier candidate (library calls come first). */
static int with_own_and_library(const tune *t, int g, int64_t *top, int n, int max)
{
    int64_t must[2] = {srch_tn_group_best(t, g, 1), srch_tn_group_best(t, g, 0)};
    for (int q = 0; q < 2 && max >= 2; q++) {
        bool in = must[q] < 0;
        for (int j = 0; j < n && !in; j++)
            in = top[j] == must[q];
        if (in)
            continue;
        if (n < max) {
            top[n++] = must[q];
            continue;
        }
        for (int j = n - 1; j >= 0; j--)
            if (top[j] != must[1 - q]) {
                top[j] = must[q];
                break;
            }
    }
    return n;
}

/* Past its budget with no partition verified whole, a job would end with nothing to serve: on
 * groups over gigabytes each new group's data set and fp64 reference take seconds, and round
 * A's first batch spans several partitions. The job then goes on, one budget more at most (or
 * one evaluation's deadline, if longer), with the partition nearest to whole (fewest groups
 * without a verified candidate, then the cost model's order): each such group tries its next
 * untried candidate until one verifies. */
static int complete(tune *t, kt_err *err)
{
    int p;
    if (!t->r->budget_hit || srch_tn_best_partition(t, &p, false) > 0)
        return 0;
    double budget = t->o->budget_s > 0 ? t->o->budget_s : SRCH_DEFAULT_BUDGET_S;
    double more = fmax(budget, t->o->deadline_s > 0 ? t->o->deadline_s : 30);
    double end = t->end;
    t->end = now_s() + more;
    t->out_of_budget = false;
    srch_tn_report(t, "complete");
    kt_log_info(TAG,
                "no partition verified whole within the budget: completing one (%.0f s more "
                "at most)",
                more);
    batch b = {0};
    int rc = 0;
    while (rc == 0 && !over_budget(t)) {
        int pick = -1, pick_missing = 0;
        for (int q = 0; q < t->s->n_partitions; q++) {
            const srch_partition *part = &t->s->partitions[q];
            int missing = 0;
            bool open = !(t->part_set_aside && t->part_set_aside[q]);
            for (int k = 0; k < part->n_groups && open; k++) {
                int g = part->groups[k];
                if (srch_tn_part_pick(t, part, k) >= 0)
                    continue;
                missing++;
                open = false; /* until an untried candidate is found */
                for (int64_t i = t->gstart[g]; i < t->gend[g] && !open; i++)
                    open = !t->c[i].done && !(part->n_groups > 1 &&
                                              t->list[i].schedule.family == OPS_FAM_LIBRARY);
            }
            if (open && (pick < 0 || missing < pick_missing)) {
                pick = q;
                pick_missing = missing;
            }
        }
        if (pick < 0 || pick_missing == 0)
            break;
        b.n = 0;
        const srch_partition *part = &t->s->partitions[pick];
        for (int k = 0; k < part->n_groups && rc == 0; k++)
            rc = add_next_untried(t, &b, part, k);
        if (rc == 0)
            rc = run_batch(t, b.idx, b.n, err);
        int64_t settled = 0;
        for (int64_t k = 0; k < b.n; k++)
            settled += t->c[b.idx[k]].done;
        if (settled == 0)
            break; /* nothing came of it (the budget, a compile lost): no progress to wait for */
    }
    free(b.idx);
    t->end = end; /* passed: over_budget() says so again */
    t->out_of_budget = false;
    return rc;
}

/* Re-times the finalists of each group of the leading partition against each other, reloading
 * those the worker no longer holds. A finalist that cannot be reloaded keeps its screening
 * time, and the pick is among the re-timed ones. */
static int retime(tune *t, kt_err *err)
{
    int p;
    if (srch_tn_best_partition(t, &p, false) <= 0)
        return 0;
    srch_tn_report(t, "retime");
    t->end = t->full_end; /* the reserve is for this phase */
    t->out_of_budget = false;
    int nfin = srch_tn_defint(t->o->finalists, 4);
    if (nfin > 16)
        nfin = 16;
    const srch_partition *part = &t->s->partitions[p];
    for (int k = 0; k < part->n_groups && !over_budget(t); k++) {
        int64_t top[16], ids_i[16];
        uint64_t ids[16];
        int n = srch_tn_group_ranked(t, part->groups[k], false, top, nfin), m = 0, reloaded = 0;
        n = with_own_and_library(t, part->groups[k], top, n, nfin);
        for (int j = 0; j < n && !over_budget(t); j++) {
            bool ok = loaded(t, top[j]);
            if (!ok) {
                int rc = reload(t, top[j], &ok, err);
                if (rc < 0)
                    return rc;
                reloaded += ok;
                t->r->reloads += ok;
            }
            if (ok)
                ids_i[m++] = top[j];
        }
        /* a reload may have evicted (or a restart lost) a finalist counted before it */
        int kept = 0;
        for (int j = 0; j < m; j++)
            if (loaded(t, ids_i[j])) {
                ids_i[kept] = ids_i[j];
                ids[kept++] = (uint64_t)ids_i[j];
            }
        m = kept;
        if (reloaded)
            kt_log_debug(TAG, "group %d: %d of its %d finalists reloaded to be re-timed",
                         part->groups[k], reloaded, m);
        if (m < 2)
            continue;
        /* Rounds: as set, else enough for SRCH_RETIME_BUDGET_S at the screening medians. */
        int rounds = t->o->retime_rounds;
        if (rounds <= 0) {
            double sum_ns = 0;
            for (int j = 0; j < m; j++)
                sum_ns += t->c[ids_i[j]].time.median_ns;
            double r = sum_ns > 0 ? SRCH_RETIME_BUDGET_S * 1e9 / sum_ns : SRCH_RETIME_MAX_ROUNDS;
            rounds = r < SRCH_RETIME_MIN_ROUNDS   ? SRCH_RETIME_MIN_ROUNDS
                     : r > SRCH_RETIME_MAX_ROUNDS ? SRCH_RETIME_MAX_ROUNDS
                                                  : (int)r;
        }
        srch_time_stats st[16];
        kt_err rerr = {0};
        double deadline = (t->o->deadline_s > 0 ? t->o->deadline_s : 30) * m;
        double m0 = now_s();
        int restarts = srch_worker_restarts(t->w);
        int rc = srch_worker_retime(t->w, ids, m, rounds, t->o->timing.cold, deadline, st, &rerr);
        add_measure(t, m0);
        if (rc < 0) {
            kt_log_warn(TAG, "re-timing the finalists failed (%s); keeping screening times",
                        rerr.msg);
            if (srch_worker_restarts(t->w) != restarts && rerr.code != -ETIMEDOUT &&
                rerr.code != -EIO)
                return kt_err_set(err, rc, "%s", rerr.msg);
            return 0;
        }
        for (int j = 0; j < m; j++) {
            cand *c = &t->c[ids_i[j]];
            c->rtime = st[j];
            c->rtime.kernels_per_rep = c->time.kernels_per_rep;
            if (c->rtime.reps > 0 && c->rtime.median_ns > 0)
                c->rtime.rel_spread =
                    (c->rtime.p90_ns - c->rtime.p10_ns) / c->rtime.median_ns / sqrt(c->rtime.reps);
            c->retimed = true;
            cache_trial tr;
            srch_tn_trial_from(c, &tr);
            if (cache_trial_append(t->cache, &t->key, &tr, err) < 0)
                return err ? err->code : -EIO;
        }
    }
    return 0;
}

/* ---- the job ---- */

static void fill_result(tune *t)
{
    srch_tune_result *r = t->r;
    int p;
    double best = srch_tn_best_partition(t, &p, false);
    r->baseline_ns = srch_tn_best_partition(t, &(int){0}, true);
    if (best <= 0)
        return;
    const srch_partition *part = &t->s->partitions[p];
    r->found = true;
    r->n_picks = part->n_groups;
    double gaps = TN_GAP_NS * (part->n_groups - 1);
    r->time_ns = best;
    r->p10_ns = r->p90_ns = gaps;
    for (int k = 0; k < part->n_groups; k++) {
        srch_tune_pick *pk = &r->picks[k];
        int g = part->groups[k];
        int64_t i = srch_tn_part_pick(t, part, k), lib = srch_tn_group_best(t, g, 1),
                own = srch_tn_group_best(t, g, 0);
        const cand *c = &t->c[i];
        pk->group = g;
        srch_tn_group_text(&t->s->groups[g].group, pk->nodes, sizeof(pk->nodes));
        pk->family = t->list[i].schedule.family;
        ops_schedule_format(&t->list[i].schedule, pk->schedule, sizeof(pk->schedule));
        snprintf(pk->cand, sizeof(pk->cand), "%s", c->id);
        pk->time = *srch_tn_tm(t, i);
        pk->err_norm = c->err_norm;
        pk->err_max = c->err_max;
        pk->retimed = c->retimed;
        pk->baseline_ns = lib >= 0 ? srch_tn_tm(t, lib)->median_ns : 0;
        pk->own_ns = own >= 0 ? srch_tn_tm(t, own)->median_ns : 0;
        pk->own_retimed = own >= 0 && t->c[own].retimed;
        if (own >= 0)
            ops_schedule_format(&t->list[own].schedule, pk->own_schedule, sizeof(pk->own_schedule));
        r->p10_ns += pk->time.p10_ns;
        r->p90_ns += pk->time.p90_ns;
        r->err_norm = fmax(r->err_norm, c->err_norm);
    }
    r->speedup = r->baseline_ns > 0 ? r->baseline_ns / r->time_ns : 0;
}

/* Bytes of the graph's inputs and outputs. */
static double io_bytes(const ops_graph *g)
{
    double bytes = 0;
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].producer < 0 || g->tensors[t].is_output)
            bytes += (double)ops_shape_numel(&g->tensors[t].shape) *
                     (double)ops_dtype_size(g->tensors[t].dtype);
    return bytes;
}

/* The job's key: the graph's signature, the bound problem's digest (so equal keys mean equal
 * problems whatever the symbols are called), the precision and the tolerance (0 when it is the
 * default, so a job that names the default shares the default's records). */
static int make_key(const ops_graph *g, const ops_graph *bound, const ops_binding *b, int n,
                    const srch_tune_opts *o, cache_key *key, kt_err *err)
{
    memset(key, 0, sizeof(*key));
    ops_diag d = {0};
    if (ops_graph_signature(g, key->sig, &d) < 0 ||
        ops_graph_problem(bound, key->problem, NULL, NULL, &d) < 0)
        return kt_err_set(err, -EINVAL, "%s", d.msg);
    if (n > CACHE_MAX_SHAPES)
        return kt_err_set(err, -EINVAL, "more than %d bound shapes", CACHE_MAX_SHAPES);
    for (int i = 0; i < n; i++) {
        if (strlen(b[i].name) >= CACHE_SYM_NAME_MAX)
            return kt_err_set(err, -EINVAL, "symbol name %s too long", b[i].name);
        snprintf(key->shapes[i].name, sizeof(key->shapes[i].name), "%s", b[i].name);
        key->shapes[i].value = b[i].value;
    }
    key->n_shapes = n;
    key->precision = o->precision;
    double def = ops_default_tolerance(bound, o->precision);
    key->tolerance = o->tolerance > 0 && o->tolerance != def ? o->tolerance : 0;
    return 0;
}

int srch_tune(const ops_graph *g, const ops_binding *b, int n, cache_env *cache,
              const srch_tune_opts *opts, srch_tune_result *out, kt_err *err)
{
    if (!g || (n && !b) || !cache || !opts || !out)
        return kt_err_set(err, -EINVAL, "srch_tune: bad arguments");
    memset(out, 0, sizeof(*out));
    out->rank = -1;
    tune t = {.o = opts, .r = out, .cache = cache};
    t.t0 = now_s();
    /* Screening and refinement stop early enough to leave the finalists' re-timing, which
     * decides the winner, its share: 10% of the budget, at most SRCH_RETIME_RESERVE_S. */
    double budget = opts->budget_s > 0 ? opts->budget_s : SRCH_DEFAULT_BUDGET_S;
    double reserve = budget * 0.1 < SRCH_RETIME_RESERVE_S ? budget * 0.1 : SRCH_RETIME_RESERVE_S;
    t.full_end = t.t0 + budget;
    t.end = t.full_end - reserve;
    ops_graph *bound = NULL;
    ops_diag d = {0};
    int rc = 0;
    if ((rc = ops_graph_bind(g, b, n, &bound, &d)) < 0) {
        rc = kt_err_set(err, rc, "%s", d.msg);
        goto out;
    }
    const char *unbound = ops_graph_first_unbound(bound);
    if (unbound) {
        rc = kt_err_set(err, -EINVAL, "dimension %s is not bound: pass --shape %s=VALUE", unbound,
                        unbound);
        goto out;
    }
    /* before a worker starts: a graph the search cannot take is refused at once */
    if ((rc = srch_graph_admit(bound, &d)) < 0) {
        rc = kt_err_set(err, rc, "%s", d.msg);
        goto out;
    }
    if ((rc = make_key(g, bound, b, n, opts, &t.key, err)) < 0)
        goto out;
    memcpy(out->sig, t.key.sig, sizeof(out->sig));
    memcpy(out->problem, t.key.problem, sizeof(out->problem));
    /* The worker first: the device it reads decides the space (and the cache key's GPU). */
    if (opts->worker) {
        t.w = opts->worker;
        srch_worker_device(t.w, &t.dev, &t.key.gpu);
    } else {
        srch_worker_opts wo = {.exe = opts->worker_exe, .gpu = opts->gpu};
        if ((rc = srch_worker_start(&wo, &t.w, &t.dev, &t.key.gpu, err)) < 0)
            goto out;
    }
    out->gpu = t.key.gpu;
    /* Timing mode: a graph whose inputs and outputs fill a quarter of L2 or more is timed cold
     * (L2 scrubbed before every rep). Back to back, part of its data would still be in L2 from
     * the previous rep, which favours kernels that re-read it (measured on the H100: a
     * two-kernel rmsnorm of 64 MiB at 32 us hot, 40 us cold, beat a one-kernel one that is
     * faster cold); deployed inside a model, such data is rarely still cached. */
    srch_tune_opts o_timed = *opts;
    if (!o_timed.timing.cold && io_bytes(bound) >= (double)t.dev.l2_bytes / 4) {
        o_timed.timing.cold = true;
        t.o = &o_timed;
    }
    if ((rc = srch_space_build(bound, &t.dev, opts->precision, &t.s, &d)) < 0) {
        rc = kt_err_set(err, rc, "%s", d.msg);
        goto out;
    }
    /* What the winner is measured against in progress and results: never fatal (a graph the
     * space took has a cost). */
    if (ops_graph_roofline(bound, opts->precision, &t.dev, &out->roofline, &d) == 0)
        t.prog.floor_ns = out->roofline.floor_ns;
    if ((rc = srch_space_candidates(t.s, &t.list, &t.n)) < 0) {
        rc = kt_err_set(err, rc, "out of memory listing candidates");
        goto out;
    }
    if (opts->only && (rc = keep_only(&t, opts->only, err)) < 0)
        goto out;
    t.c = calloc((size_t)t.n + 1, sizeof(cand));
    t.gstart = calloc((size_t)t.s->n_groups + 1, sizeof(int64_t));
    t.gend = calloc((size_t)t.s->n_groups + 1, sizeof(int64_t));
    t.part_set_aside = calloc((size_t)t.s->n_partitions + 1, sizeof(bool));
    if (!t.c || !t.gstart || !t.gend || !t.part_set_aside) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (int gi = 0; gi < t.s->n_groups; gi++)
        t.gstart[gi] = t.gend[gi] = 0;
    for (int64_t i = t.n - 1; i >= 0; i--)
        t.gstart[t.list[i].group] = i;
    for (int64_t i = 0; i < t.n; i++) {
        t.gend[t.list[i].group] = i + 1;
        srch_candidate_id(t.s->groups[t.list[i].group].group.mask, &t.list[i].schedule, t.c[i].id);
    }
    srch_pool_opts po = {.arch = t.dev.arch,
                         .jobs = opts->compile_jobs,
                         .timeout_s = 60,
                         .store_dir = opts->store_dir};
    kt_err perr = {0};
    if (opts->pool)
        t.pool = opts->pool;
    else if ((rc = srch_pool_new(&po, &t.pool, &perr)) < 0) {
        rc = kt_err_set(err, rc, "compile pool: %s", perr.msg);
        goto out;
    }
    if ((rc = screen(&t, err)) < 0 || (rc = refine(&t, err)) < 0 || (rc = explore(&t, err)) < 0 ||
        (rc = complete(&t, err)) < 0 || (rc = retime(&t, err)) < 0)
        goto out;
    if (srch_tn_cancelled(&t)) {
        rc = kt_err_set(err, -ECANCELED, "cancelled after %d trials", out->trials);
        goto out;
    }
    t.final = true;
    t.prog.best_ns = srch_tn_best_partition(&t, &(int){0}, false);
    t.prog.baseline_ns = srch_tn_best_partition(&t, &(int){0}, true);
    /* The record first: a pick whose record fails as assembled is set aside, and the result
     * then describes what was stored. */
    double rec_err = -1;
    if (srch_tn_best_partition(&t, &(int){0}, false) > 0)
        rc = srch_tn_record(&t, &rec_err, err);
    fill_result(&t);
    if (rec_err >= 0)
        out->err_norm = rec_err;
    if (rc < 0)
        goto out;
    out->restarts = srch_worker_restarts(t.w);
out:
    out->seconds = now_s() - t.t0;
    if (t.pool && !opts->pool) {
        srch_pool_free(t.pool);
    } else if (t.pool) { /* a shared pool: drop what this job left compiling */
        srch_pool_discard(t.pool);
        srch_compile_result cr;
        while (srch_pool_pending(t.pool) > 0 && srch_pool_next(t.pool, &cr, NULL) == 0)
            srch_compile_result_release(&cr);
    }
    if (!opts->worker)
        srch_worker_stop(t.w);
    for (int64_t i = 0; t.c && i < t.n; i++) {
        ops_emitted_free(&t.c[i].em);
        free(t.c[i].cubin);
        if (t.c[i].ready)
            srch_compile_result_release(t.c[i].ready);
        free(t.c[i].ready);
    }
    free(t.c);
    free(t.gstart);
    free(t.gend);
    free(t.part_set_aside);
    free(t.list);
    srch_space_free(t.s);
    ops_graph_free(bound);
    return rc;
}
