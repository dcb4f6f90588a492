/* The search strategy: tunes one graph at one binding of its shapes on one GPU, and writes the
 * outcome to the cache. A library (no event loop, no threads): `ktune tune --local` calls it
 * directly; the daemon will run the same function in a job.
 *
 * Strategy (docs/evaluation.md "The search and the cache", docs/search.md for the space):
 *   1. Space: srch_space_build with the device description the worker read; candidates ranked
 *      by the cost model.
 *   2. Screen, round A: every group of the 16 cheapest partitions gets its cost-model pick (plus
 *      every library candidate: cuBLASLt competes and is the baseline), so partitions get
 *      measured sums early; a group whose pick failed gets the next ones (up to 5 more).
 *      Round B: the groups of the best measured partitions, and those of the model's first
 *      partition when its sum measured behind the best but within twice it, get the top of
 *      their list plus a spread over their families (srch_spread).
 *   3. Refine: neighbours (one knob one step along its value list) of the best few of each
 *      group of the leading partition, repeated around a new best until a round improves
 *      nothing (converged) or the budget is spent.
 *   4. Finalists (the best few of each winning group) are re-timed interleaved in the worker;
 *      the pick is then made among them, by their re-timed medians.
 * Measurement: screening and refining use a cheap measurement (opts.timing, with the fields left
 * <= 0 taking SRCH_SCREEN_*: 10 ms warm-up, 0.1 s budget, at least 5 reps, stop at 1% spread of
 * the median), enough to rank candidates whose times differ by more than a few percent. The
 * finalists' interleaved re-timing follows docs/evaluation.md in full (25 ms warm-up, A B A B ...)
 * and decides the winner: unless retime_rounds is set, it runs enough rounds for
 * SRCH_RETIME_BUDGET_S at the finalists' screening medians (SRCH_RETIME_MIN_ROUNDS to
 * SRCH_RETIME_MAX_ROUNDS), so the median's relative spread falls well below 1% for any kernel
 * longer than a few microseconds.
 *   5. The partition with the smallest measured sum (+ the model's 2 us launch gap per extra
 *      kernel) wins; its record, with runner-ups, goes to the cache.
 * Tie rule: two medians closer than max(0.5% for re-timed finalists or 3% for screening
 * measurements, 2 x the larger relative spread of the median, 64 ns: two steps of the CUPTI
 * clock) are equal; among the candidates within that distance of the
 * fastest, the one the cost model ranked first (list order: estimate, then family and knob values)
 * wins. Fixed inputs, so every run over the same measurements picks the same winner. Compilation is
 * streamed: a batch is submitted to the NVRTC pool at once and candidates are measured in priority
 * order as their cubins arrive, so compiling the rest overlaps measuring.
 *
 * Trial log: every outcome is appended under the job's cache key and the candidate id
 * (srch_candidate_id); an id found there is not evaluated again, so a rerun of a job resumes and
 * re-measures nothing, and takes the same decisions. The entry's five statuses are coarser than
 * srch_status, so its detail carries the rest: failures as "<srch_status>: <reason>" (race,
 * load_error and unavailable are stored as wrong / compile_error), verified ones as
 * "p10=.. p90=.. reps=.. max=.. rel=.. kpr=.. hot|cold[ rt=median,p10,p90,reps]" (rt: the
 * re-timing). A logged ok whose error exceeds this job's tolerance counts as wrong.
 *
 * Records: a one-group winner is stored as emitted (runner-ups: the next verified schedules of
 * that group); a several-group winner as one module (the prelude once, each group's code in a
 * namespace, entries renamed "<entry>_g<k>", compiled again) with intermediates in 256-byte
 * aligned workspace slots, family "partition". A cuBLASLt winner is stored with family
 * "library", its description as source, no cubin, and one pseudo-launch "cublasLtMatmul" whose
 * arguments are A, B, C and the bias: the runtime rebuilds the call with ops_library_describe
 * from the graph and the schedule.
 * Every record is evaluated as assembled before it is put: the worker runs exactly its cubin
 * and launches (or its cuBLASLt call, rebuilt as the runtime rebuilds it), with its argument map
 * and workspace, as one candidate over the whole canonical bound graph (srch_eval_req_for_graph,
 * "record": true), verified against the whole graph's fp64 reference and not timed. Only a
 * record that passes is put, with verified = true and err_norm / err_max from that evaluation;
 * its time stays the sum of its groups' measured times plus the gaps. The outcome is logged in
 * the trial log under "record <hash of what it runs>", so a rerun does not evaluate it again.
 * When the pick's record cannot be built or fails, the pick is set aside (a several-group
 * partition, or a one-group candidate) and the next best pick is tried, up to 3 picks. */
#pragma once

#include "cache/cache.h"
#include "compile.h"
#include "space.h"
#include "supervisor.h"

#include <stdatomic.h>

#define SRCH_SCREEN_WARMUP_S   0.01
#define SRCH_SCREEN_BUDGET_S   0.1
#define SRCH_SCREEN_MIN_REPS   5
#define SRCH_RETIME_BUDGET_S   0.3
#define SRCH_RETIME_RESERVE_S  2.0  /* budget kept back for re-timing the finalists */
#define SRCH_DEFAULT_BUDGET_S  60.0 /* a job that names no budget */
#define SRCH_RETIME_MIN_ROUNDS 10
#define SRCH_RETIME_MAX_ROUNDS 2000

typedef struct srch_tune_progress {
    const char *phase; /* "screen", "refine", "explore", "retime", "record" */
    int trials;        /* candidates with an outcome (measured now or found in the trial log) */
    int measured;      /* of which evaluated on the GPU by this call */
    int resumed;       /* of which taken from the trial log */
    int failures[SRCH_STATUS_COUNT];
    double best_ns;     /* best measured partition so far, 0 when none */
    double baseline_ns; /* cuBLASLt baseline so far, 0 when none */
    double elapsed_s;
    double compile_s; /* NVRTC seconds of the compiles this job consumed (store hits: 0); the
                       * pool compiles in parallel, so this may exceed elapsed_s */
    double measure_s; /* wall seconds inside srch_worker_eval and srch_worker_retime */
    double floor_ns;  /* the bound graph's roofline floor on the worker's GPU (ops_graph_roofline) */
} srch_tune_progress;

typedef struct srch_tune_opts {
    ops_precision precision;
    double tolerance; /* normwise; <= 0: docs/evaluation.md's default for the dtype and precision */
    double
        budget_s; /* wall clock for the job, space building included; <= 0: SRCH_DEFAULT_BUDGET_S */
    /* worker */
    const char *worker_exe; /* NULL: srch_worker_opts' lookup */
    int gpu;
    double deadline_s; /* per candidate evaluation (<= 0: 30 s), plus srch_eval_req_data_seconds */
    int seeds;         /* verification input sets; <= 0: 3 */
    srch_time_opts timing; /* screening; fields <= 0: SRCH_SCREEN_* (see above) */
    /* compile pool (arch comes from the worker's device) */
    int compile_jobs;      /* <= 0: one per CPU */
    const char *store_dir; /* cubin store, or NULL */
    /* An ablation: only the candidates whose schedule text ("gemm math=bf16 bm=128 ...") holds
     * every '&'-separated part of this pattern are tried; NULL: all. The record written is the
     * best of those (a faster one cached before stays first). */
    const char *only;
    /* Trial log entries logged before this instant (unix milliseconds) are measured again, not
     * read back: a job that remeasures (after an upgrade, on a changed machine). 0: all are
     * read back, so a rerun or a retune measures only what was not measured before. */
    int64_t trials_since_ms;
    /* strategy sizes; <= 0 takes the default in brackets */
    int screen_top;    /* per group, the cost model's first N [4] */
    int screen_spread; /* per group, plus a spread of N over its families [6] */
    int screen_parts;  /* round B covers the groups of this many best partitions [3] */
    int refine_best;   /* neighbours of the best N per group [2] */
    int refine_rounds; /* local-search rounds [4] */
    int finalists;     /* per group, re-timed interleaved [4] */
    int retime_rounds; /* [enough for SRCH_RETIME_BUDGET_S, 10 to 2000] */
    /* Shared resources of a long-running caller (the daemon), borrowed; NULL: srch_tune starts
     * and stops its own. worker must be started (srch_worker_start); pool must compile for the
     * worker's device (srch_worker_device). srch_tune leaves both running. */
    srch_worker *worker;
    srch_pool *pool;
    /* Set from another thread to stop: the candidate in flight finishes and is logged, nothing
     * more is measured, no record is written, and srch_tune returns -ECANCELED (the trial log
     * lets a later call resume). NULL: never cancelled. */
    const atomic_bool *cancel;
    /* Called after every trial and at each phase change; may be NULL. */
    void (*progress)(const srch_tune_progress *p, void *ctx);
    void *progress_ctx;
} srch_tune_opts;

/* One group of the winning partition, and its best candidate. */
typedef struct srch_tune_pick {
    int group;       /* index into the space's groups */
    char nodes[160]; /* "h = add(x, bias); g = gelu_tanh(h)" (cut to fit) */
    ops_family_id family;
    char schedule[256];
    char cand[CACHE_CAND_MAX];
    srch_time_stats time;
    double err_norm, err_max;
    bool retimed;
    double baseline_ns; /* the group's best library candidate, 0 when it has none */
    double own_ns;      /* the group's best generated (non-library) candidate, 0 when none */
    bool own_retimed;   /* own_ns is a re-timed finalist's, comparable with baseline_ns */
    char own_schedule[256];
} srch_tune_pick;

typedef struct srch_tune_result {
    bool found; /* a verified winner exists */
    int n_picks;
    srch_tune_pick picks[OPS_GROUP_MAX_NODES]; /* the winning partition, in launch order */
    double time_ns, p10_ns, p90_ns;            /* the winner: its groups' sums plus launch gaps */
    double err_norm;    /* its stored record's, measured as assembled; without a record, the worst
                         * over its groups */
    double baseline_ns; /* best partition with cuBLASLt for every matmul group, 0 when none */
    double speedup;     /* baseline_ns / time_ns, 0 without a baseline */
    ops_roofline roofline; /* the bound graph's on the worker's GPU; floor_ns 0 when unknown */
    int trials, measured, resumed, restarts;
    int reloads; /* finalists loaded into the worker again to be re-timed (evicted or lost to a
                  * restart since their evaluation) */
    int failures[SRCH_STATUS_COUNT];
    char failure_example[SRCH_STATUS_COUNT][256]; /* "schedule: reason" of the first one */
    int rank;              /* the winner's rank in the cache after the put, -1 when not stored */
    int records;           /* records put (winner and runner-ups) */
    char record_note[256]; /* why no record was written, "" otherwise */
    /* Records evaluated as assembled before being put ("Records" above): on the worker by this
     * call, read back from the trial log, and of both those that failed (never put). */
    int assembled, assembled_resumed, assembled_failed;
    char record_fallback[256]; /* a record was put, but faster picks' records failed: why */
    bool budget_hit;           /* stopped by the budget rather than by convergence */
    double seconds;
    double compile_s; /* as srch_tune_progress's: the tuning cost, split */
    double measure_s;
    cache_gpu gpu;
    uint8_t sig[OPS_SIG_BYTES];
    uint8_t problem[OPS_SIG_BYTES]; /* the key's problem digest (ops_graph_problem) */
} srch_tune_result;

/* Tunes g (validated, may be symbolic) bound with the n bindings b. cache must be open
 * read-write. out is filled also when no candidate verified (found = false; that is not an
 * error). Returns 0, or a negative errno with detail in err: -EINVAL (graph or bindings),
 * -ENODEV (the worker found no GPU), -ENOENT (no worker executable), -ECANCELED (opts->cancel
 * was set; out holds the progress so far), another errno from the cache or the compile pool. */
int srch_tune(const ops_graph *g, const ops_binding *b, int n, cache_env *cache,
              const srch_tune_opts *opts, srch_tune_result *out, kt_err *err);

/* The trial-log id of a candidate: "m<group mask hex> <schedule as ops_schedule_format prints
 * it>", e.g. "m7 pointwise threads=256 items=8 vec=1 unroll=4"; when that exceeds
 * CACHE_CAND_MAX - 1 bytes it is cut and ends in "#" and 16 hex digits of its SHA-256. */
void srch_candidate_id(uint64_t mask, const ops_schedule *s, char out[CACHE_CAND_MAX]);
