/* Candidate ids and the trial log of search/tune.h's job: what a trial entry says about a
 * candidate's outcome, written after its evaluation and read back when a job resumes (the job's
 * state: search/tune_internal.h). */
#include "tune_internal.h"

#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- candidate ids ---- */

void srch_candidate_id(uint64_t mask, const ops_schedule *s, char out[CACHE_CAND_MAX])
{
    char sched[512], full[600];
    ops_schedule_format(s, sched, sizeof(sched));
    int n = snprintf(full, sizeof(full), "m%llx %s", (unsigned long long)mask, sched);
    if (n >= 0 && n < CACHE_CAND_MAX) {
        memcpy(out, full, (size_t)n + 1);
        return;
    }
    uint8_t dig[32];
    char hex[65];
    ops_sha256(full, strlen(full), dig);
    kt_hex(dig, 8, hex);
    int keep = CACHE_CAND_MAX - 1 - 17;
    snprintf(out, CACHE_CAND_MAX, "%.*s#%.16s", keep, full, hex);
}

/* ---- trial log ---- */

cache_trial_status srch_tn_trial_status(srch_status s)
{
    switch (s) {
    case SRCH_OK:
        return CACHE_TRIAL_OK;
    case SRCH_WRONG:
    case SRCH_RACE:
        return CACHE_TRIAL_WRONG;
    case SRCH_FAULT:
        return CACHE_TRIAL_FAULT;
    case SRCH_HANG:
        return CACHE_TRIAL_HANG;
    default:
        return CACHE_TRIAL_COMPILE_ERROR; /* compile, load and unavailable: it never ran */
    }
}

/* The trial's wall-clock time, in seconds and milliseconds: the daemon accounts a job's time
 * across crashes from the latest of these (daemon/jobs.c). */
void srch_tn_stamp(cache_trial *t)
{
    t->ts_ms = kt_wall_ms();
    t->ts = t->ts_ms / 1000;
}

/* The trial entry's status has five classes; the detail keeps ours. Failures are written as
 * "<class>: <reason>"; verified ones as "p10=... p90=... reps=... max=... rel=... kpr=...
 * hot|cold", which is what a resumed job needs to rank them and to write their record. */
void srch_tn_trial_from(const cand *c, cache_trial *t)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->cand, sizeof(t->cand), "%s", c->id);
    t->status = srch_tn_trial_status(c->status);
    t->time_ns = c->status == SRCH_OK || c->status == SRCH_WRONG ? c->time.median_ns : 0;
    t->error = isfinite(c->err_norm) ? c->err_norm : 1e300;
    srch_tn_stamp(t);
    if (c->status == SRCH_OK)
        snprintf(t->detail, sizeof(t->detail),
                 "p10=%.12g p90=%.12g reps=%d max=%.6g rel=%.6g kpr=%d %s", c->time.p10_ns,
                 c->time.p90_ns, c->time.reps, isfinite(c->err_max) ? c->err_max : 1e300,
                 c->time.rel_spread, c->time.kernels_per_rep, c->time.cold ? "cold" : "hot");
    if (c->status == SRCH_OK && c->retimed) {
        size_t off = strlen(t->detail);
        snprintf(t->detail + off, sizeof(t->detail) - off, " rt=%.17g,%.12g,%.12g,%d",
                 c->rtime.median_ns, c->rtime.p10_ns, c->rtime.p90_ns, c->rtime.reps);
    } else
        snprintf(t->detail, sizeof(t->detail), "%s: %.200s", srch_status_str(c->status), c->msg);
}

/* A failed trial's srch_status and reason, from its class and its "<srch_status>: <reason>"
 * detail (srch_tn_trial_from). */
void srch_tn_failure_from_trial(const cache_trial *t, srch_status *st, char *msg, size_t len)
{
    *st = t->status == CACHE_TRIAL_WRONG   ? SRCH_WRONG
          : t->status == CACHE_TRIAL_FAULT ? SRCH_FAULT
          : t->status == CACHE_TRIAL_HANG  ? SRCH_HANG
                                           : SRCH_COMPILE_ERROR;
    for (int s = 0; s < SRCH_STATUS_COUNT; s++) {
        const char *name = srch_status_str((srch_status)s);
        size_t n = strlen(name);
        if (strncmp(t->detail, name, n) == 0 && t->detail[n] == ':') {
            *st = (srch_status)s;
            snprintf(msg, len, "%s", t->detail + n + 2);
            return;
        }
    }
    snprintf(msg, len, "%s", t->detail);
}

int srch_tn_trial_get(const tune *t, const char *id, cache_trial *out)
{
    if (cache_trial_get(t->cache, &t->key, id, out, NULL) < 0)
        return -ENOENT;
    int64_t at_ms = out->ts_ms ? out->ts_ms : out->ts * 1000;
    return at_ms < t->o->trials_since_ms ? -ENOENT : 0;
}

void srch_tn_cand_from_trial(cand *c, const cache_trial *t, double tolerance)
{
    c->done = true;
    c->from_log = true;
    c->time.median_ns = t->time_ns;
    c->err_norm = t->error;
    if (t->status == CACHE_TRIAL_OK) {
        int reps = 0, kpr = 0;
        char mode[8] = "hot";
        double p10 = t->time_ns, p90 = t->time_ns, mx = 0, rel = 0;
        sscanf(t->detail, "p10=%lg p90=%lg reps=%d max=%lg rel=%lg kpr=%d %7s", &p10, &p90, &reps,
               &mx, &rel, &kpr, mode);
        c->time.p10_ns = p10;
        c->time.p90_ns = p90;
        c->time.reps = reps;
        c->time.rel_spread = rel;
        c->time.kernels_per_rep = kpr;
        c->time.cold = strcmp(mode, "cold") == 0;
        const char *rt = strstr(t->detail, " rt=");
        if (rt) {
            c->rtime = c->time;
            c->retimed = sscanf(rt, " rt=%lg,%lg,%lg,%d", &c->rtime.median_ns, &c->rtime.p10_ns,
                                &c->rtime.p90_ns, &c->rtime.reps) == 4;
        }
        c->err_max = mx;
        c->status = SRCH_OK;
        if (tolerance > 0 && t->error > tolerance) {
            /* Logged under a looser tolerance than this job's. */
            c->status = SRCH_WRONG;
            snprintf(c->msg, sizeof(c->msg), "error %.3g over this job's tolerance %.3g", t->error,
                     tolerance);
        }
        return;
    }
    /* Recover our class from the detail prefix. */
    srch_tn_failure_from_trial(t, &c->status, c->msg, sizeof(c->msg));
}
