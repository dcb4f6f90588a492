/* Kernel timing with CUPTI's activity API (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), following
 * docs/evaluation.md: warm-up of at least 25 ms, cold reps with L2 scrubbed (a write over 2x L2
 * between reps) or hot reps back to back, median with p10/p90, stop when the median's relative
 * spread is below the target or the budget is spent; interleaved re-timing of finalists.
 *
 * A candidate's time per rep is the sum of its kernels' durations plus the gaps between them
 * (end of its last kernel minus start of its first, as CUPTI records them).
 *
 * Process rules: srch_timer_open must run before the CUDA context exists (before
 * srch_cuda_open), once per process. Single-threaded. */
#pragma once

#include "cudrv.h"

typedef struct srch_timer srch_timer;

/* Enqueues one run of a candidate (all its kernels, in order) on the default stream. Returns 0
 * or a negative errno with detail in err. */
typedef int (*srch_launch_fn)(void *ctx, kt_err *err);

typedef struct srch_time_opts {
    bool cold;         /* scrub L2 between reps (default hot: back to back) */
    double warmup_s;   /* at least this long of warm-up runs; <= 0 means 25 ms */
    double budget_s;   /* wall-clock budget for the measured reps; <= 0 means 0.5 s */
    int min_reps;      /* <= 0 means 10 */
    int max_reps;      /* <= 0 means 2000 */
    double target_rel; /* stop when the median's relative spread is below; <= 0 means 0.01 */
} srch_time_opts;

typedef struct srch_time_stats {
    double median_ns, p10_ns, p90_ns;
    double rel_spread; /* (p90 - p10) / median / sqrt(reps): the spread of the median estimate */
    int reps;
    int kernels_per_rep;
    bool cold;
    uint32_t sm_clock_khz_before, sm_clock_khz_after; /* read through NVML (dlopen'ed with the
                                                         driver); 0 when not readable */
} srch_time_stats;

/* Subscribes CUPTI and enables CONCURRENT_KERNEL activity records; checks cuptiGetVersion
 * against the headers. -ENODEV (no CUPTI) or -EIO with detail in err. */
int srch_timer_open(srch_timer **out, kt_err *err);
/* Before srch_cuda_close: it frees the scrub buffer in that context. */
void srch_timer_close(srch_timer *t);

/* Times launch(ctx) per opts. kernels_per_rep is how many kernels one launch() enqueues (the
 * records are grouped by that count); <= 0 means "run once alone and count the records" (a
 * cuBLASLt call may launch more than one kernel). The scrub buffer is allocated lazily on cu's
 * device. Returns 0, -EIO when records were dropped or do not match, or a CUDA error (sticky errors
 * poison the context: the caller must stop using it). */
int srch_time(srch_timer *t, srch_cuda *cu, srch_launch_fn launch, void *ctx, int kernels_per_rep,
              const srch_time_opts *opts, srch_time_stats *out, kt_err *err);

/* Re-times n candidates interleaved (A B C A B C ...) for `rounds` rounds so clock drift hits
 * all alike; out[i] gets candidate i's stats. */
int srch_time_interleaved(srch_timer *t, srch_cuda *cu, int n, srch_launch_fn *launch, void **ctx,
                          const int *kernels_per_rep, int rounds, bool cold, srch_time_stats *out,
                          kt_err *err);

/* The same measurement by CUDA events around each rep (for cross-checking CUPTI in tests). */
int srch_time_events(srch_cuda *cu, srch_launch_fn launch, void *ctx, int reps, double *median_ns,
                     kt_err *err);
