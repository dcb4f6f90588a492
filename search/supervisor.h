/* The supervisor: spawns a ktune-worker per GPU, sends it requests with a deadline each, and
 * survives it: a worker that dies mid-request reports a fault, one past its deadline is killed
 * and reports a hang; either way it is respawned (hello again) and the search goes on.
 * A library (no event loop of its own): `ktune tune --local` uses it directly, the daemon will
 * drive the same calls from its loop. One thread per srch_worker. */
#pragma once

#include "cache/record.h"
#include "worker.h"

typedef struct srch_worker srch_worker;

typedef struct srch_worker_opts {
    const char *exe; /* ktune-worker path; NULL: $KTUNE_WORKER, else next to the running binary */
    int gpu;         /* CUDA_VISIBLE_DEVICES for the child */
    double hello_timeout_s; /* default 60 */
} srch_worker_opts;

/* Spawns the worker and says hello. -ENODEV when it reports no GPU; detail in err. dev and gpu
 * (optional) receive the device description and the fingerprint the worker read. */
int srch_worker_start(const srch_worker_opts *opts, srch_worker **out, ops_device *dev,
                      cache_gpu *gpu, kt_err *err);
void srch_worker_stop(srch_worker *w); /* quit, then kill after 2 s */
/* Kills the worker process now; callable from any thread (a daemon abandoning the candidate in
 * flight at shutdown). The evaluation in flight then ends as a fault and the worker is
 * respawned by the thread that owns it. */
void srch_worker_abort(srch_worker *w);
/* The device description and fingerprint the worker read at its last hello (either may be
 * NULL). */
void srch_worker_device(const srch_worker *w, ops_device *dev, cache_gpu *gpu);

/* Evaluates one candidate with a deadline (seconds). A dead worker gives res->status FAULT, a
 * deadline miss HANG; the worker is respawned in both cases before returning 0. Returns a
 * negative errno only when the worker cannot be (re)started. */
int srch_worker_eval(srch_worker *w, const srch_eval_req *req, double deadline_s,
                     srch_eval_result *res, kt_err *err);
/* Interleaved re-timing of loaded candidates (see worker.h "retime"). */
int srch_worker_retime(srch_worker *w, const uint64_t *ids, int n, int rounds, bool cold,
                       double deadline_s, srch_time_stats *out, kt_err *err);
/* How many times the worker was respawned (faults + hangs). */
int srch_worker_restarts(const srch_worker *w);
