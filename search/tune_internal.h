/* srch_tune's files and the state they share (search/tune.h is the interface). One job, one
 * thread: everything here runs inside one srch_tune call.
 *
 *   tune.c         the job: bookkeeping (progress, cost, budget), ranking, evaluation, the
 *                  phases (screen, refine, explore, re-time) and srch_tune itself, which ends
 *                  by recording the pick (srch_tn_record)
 *   tune_trials.c  candidate ids (srch_candidate_id) and the trial log: a candidate's outcome
 *                  as a trial entry and back
 *   tune_record.c  the record: the pick's candidates materialised (emitted, compiled) and
 *                  assembled into a cache_record (linked partitions through search/link.h), then
 *                  that record evaluated as assembled over the whole graph before it is stored
 *
 * Ownership: the tune owns its candidates' state (c[]), their emissions and kept cubins; the
 * record half reads the ranking and evaluation of tune.c through the functions below. */
#pragma once

#include "compile.h"
#include "tune.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A launch gap the model charges per kernel after the first (docs/search.md): partitions of
 * several kernels are compared by their measured kernel times plus this. */
#define TN_GAP_NS 2000.0

typedef struct cand {
    bool done;
    bool queued;   /* submitted to the compile pool, result not seen yet */
    bool from_log; /* outcome read from the trial log */
    bool retimed;  /* rtime holds its interleaved re-timing against the other finalists */
    bool measured; /* evaluated by the worker in this run */
    bool
        set_aside; /* its one-group record failed as assembled (srch_tn_record): no longer a pick */
    srch_status status;
    srch_time_stats time;  /* from its evaluation: what screening and refinement compare */
    srch_time_stats rtime; /* re-timed: what the final pick compares */
    double err_norm, err_max;
    char msg[256];
    uint64_t seq;    /* evaluation order in this run (1-based), 0 when not evaluated here */
    int restarts_at; /* srch_worker_restarts when it was evaluated */
    ops_emitted em;  /* held from emission until evaluation */
    srch_compile_result *ready; /* its compile, arrived before its turn to be measured */
    void *cubin;                /* kept for verified candidates (the record needs it) */
    size_t cubin_len;
    char id[CACHE_CAND_MAX];
} cand;

typedef struct tune {
    const srch_tune_opts *o;
    srch_tune_result *r;
    srch_space *s;
    srch_candidate *list;
    int64_t n;
    cand *c;
    int64_t *gstart, *gend; /* per space group: its slice of list */
    srch_worker *w;
    srch_pool *pool;
    cache_env *cache;
    cache_key key;
    ops_device dev;
    double t0, end;  /* end of screening and refinement */
    double full_end; /* end of the budget: the finalists' re-timing may run until then */
    uint64_t seq;
    srch_tune_progress prog;
    bool out_of_budget;
    bool final;            /* picking: re-timed finalists are compared by their re-timed stats */
    bool *part_set_aside;  /* per partition: its record failed as assembled (srch_tn_record) */
    uint64_t record_evals; /* records sent to the worker by this call (their request ids) */
} tune;

/* ---- tune_trials.c ---- */

/* The trial log: a worker status as a trial's class, the trial's wall-clock time, a candidate's
 * outcome as a trial entry, a failed trial's srch_status and reason read back from its class and
 * detail, and a candidate's outcome read back (under this job's tolerance). */
cache_trial_status srch_tn_trial_status(srch_status s);
void srch_tn_stamp(cache_trial *t);
void srch_tn_trial_from(const cand *c, cache_trial *t);
void srch_tn_failure_from_trial(const cache_trial *t, srch_status *st, char *msg, size_t len);
void srch_tn_cand_from_trial(cand *c, const cache_trial *t, double tolerance);
/* The trial log's entry for candidate id, unless logged before o->trials_since_ms (a remeasuring
 * job measures those again): 0, or -ENOENT when there is none to use. */
int srch_tn_trial_get(const tune *t, const char *id, cache_trial *out);

/* ---- tune.c ---- */

/* v, or def when v is not positive. */
int srch_tn_defint(int v, int def);

/* Bookkeeping: progress (phase NULL keeps the current one), a compile's cost, cancellation. */
void srch_tn_report(tune *t, const char *phase);
void srch_tn_add_compile(tune *t, const srch_compile_result *cr);
bool srch_tn_cancelled(const tune *t);

/* Ranking: the stats a comparison uses, a group's best verified candidate (lib: 1 only library
 * ones, 0 only non-library, -1 any) or -1, up to max of them in winning order (only re-timed
 * ones with retimed_only), and the best
 * partition's measured time (0 when none) with its index in *which. */
const srch_time_stats *srch_tn_tm(const tune *t, int64_t i);
int64_t srch_tn_group_best(const tune *t, int g, int lib);
/* The candidate partition part's group k serves: its best, or with more than one group its best
 * own kernel (a record links a partition's kernels into one module: no cuBLASLt call among
 * them). -1 when there is none. */
int64_t srch_tn_part_pick(const tune *t, const srch_partition *part, int k);
int srch_tn_group_ranked(const tune *t, int g, bool retimed_only, int64_t *out, int max);
double srch_tn_best_partition(const tune *t, int *which, bool library_baseline);

/* Evaluation: a compile log's first error line, and one request to the worker (req freed). */
void srch_tn_first_error_line(const char *log, char *buf, size_t len);
int srch_tn_worker_eval(tune *t, srch_eval_req *req, srch_eval_result *res, bool *restarted,
                        kt_err *err);

/* ---- tune_record.c ---- */

/* A group's nodes as text ("y = add(a, b); ..."), for the pick's description. */
void srch_tn_group_text(const ops_group *grp, char *buf, size_t len);

/* Stores the record of the best pick, evaluated as assembled (falling back to the next picks):
 * the rules are at its definition. *err_norm: the stored record's whole-graph error, or -1. */
int srch_tn_record(tune *t, double *err_norm, kt_err *err);
