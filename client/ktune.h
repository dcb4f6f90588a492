/* libktune: the public C API of ktune.
 *
 * Two halves:
 *   - the client: talks to the `ktuned` daemon over its Unix socket (docs/protocol.md) to submit
 *     tuning jobs, follow them, cancel them and query the daemon;
 *   - the deploy-time runtime: opens a kernel cache read-only, looks a tuned kernel up by graph,
 *     shapes and the GPU it runs on, loads it and launches it on a stream with your device
 *     pointers. No daemon is needed, and libcuda is loaded at run time (a program linked with
 *     libktune starts on a machine without a driver; only the runtime calls then fail).
 *
 * Errors: every function returning int returns 0 on success or a negative errno (-EINVAL,
 * -ENOENT, -ENOMEM, -ECONNREFUSED, -EPROTO, -ENODEV, ...) and, when err is non-NULL, a one-line
 * message in err->msg naming what was wrong. A function that fails calls no callback.
 *
 * Threads: every handle here may be used from several threads at once (calls on one
 * ktune_client serialise on its lock; ktune_runtime and ktune_kernel lookups and launches run
 * concurrently). Returned pointers stay valid as documented at each function.
 *
 * Python binding: client/python/ktune (ctypes over this header). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KTUNE_BUILDING_LIB)
#define KTUNE_EXPORT __attribute__((visibility("default")))
#else
#define KTUNE_EXPORT
#endif

/* 2: tensors are passed in the graph's declared order (ktune_launch, ktune_graph_describe,
 *    ktune_graph_input_name, ktune_prepack); 1 took them in ktune's canonical order. A program
 *    written for 1 that passes pointers in ktune_graph_describe's order keeps working; one that
 *    computed the canonical order itself must pass declared order now. The shared library's
 *    soname follows this number (libktune.so.2), so a binary linked against 1 does not load. */
#define KTUNE_API_VERSION 2

typedef struct ktune_error {
    int code;      /* the negative errno also returned */
    char msg[512]; /* one line, "" on success */
} ktune_error;

/* The library's version string, e.g. "0.1.0". Static storage. */
KTUNE_EXPORT const char *ktune_version(void);

/* ---- graphs and shapes ---- */

/* An op graph (the JSON schema of docs/formats.md), validated. Immutable once loaded; share it
 * between threads freely. Its canonical signature is computed once, at load. */
typedef struct ktune_graph ktune_graph;

/* Loads a graph from a JSON file or from JSON text (len bytes; len 0: NUL-terminated). Invalid
 * graphs fail with -EINVAL and a message naming the node and rule. */
KTUNE_EXPORT int ktune_graph_load(const char *path, ktune_graph **out, ktune_error *err);
KTUNE_EXPORT int ktune_graph_parse(const char *json, size_t len, ktune_graph **out,
                                   ktune_error *err);
KTUNE_EXPORT void ktune_graph_free(ktune_graph *g); /* NULL is a no-op */
/* The graph's name and its signature as 64 hex digits; valid until ktune_graph_free. */
KTUNE_EXPORT const char *ktune_graph_name(const ktune_graph *g);
KTUNE_EXPORT const char *ktune_graph_signature(const ktune_graph *g);
/* Inputs and outputs in the graph's declared order (inputs as the "inputs" object lists them,
 * outputs as "outputs" does), with their names as written in the graph; i out of range gives
 * NULL. This is the order ktune_launch takes pointers in, whatever the shapes: the order a cached
 * kernel takes its arguments in (ktune's canonical one, docs/formats.md) is internal, mapped at
 * lookup. */
KTUNE_EXPORT int ktune_graph_n_inputs(const ktune_graph *g);
KTUNE_EXPORT int ktune_graph_n_outputs(const ktune_graph *g);
KTUNE_EXPORT const char *ktune_graph_input_name(const ktune_graph *g, int i);
KTUNE_EXPORT const char *ktune_graph_output_name(const ktune_graph *g, int i);

/* One bound symbolic dimension, e.g. {"M", 1024}. */
typedef struct ktune_shape {
    const char *name;
    int64_t value;
} ktune_shape;

/* A graph input or output with its dimensions bound: the buffer ktune_launch expects there
 * (dense, row-major). Plain data, except name (valid until ktune_graph_free). */
typedef struct ktune_tensor_desc {
    const char *name;
    char dtype[8];    /* "f32", "f16", "bf16" */
    bool is_const;    /* a weight (ktune_prepack may ask for another layout) */
    int rank;         /* 0..8; 0: a scalar tensor */
    int64_t shape[8]; /* -1: a symbolic dimension that shapes leaves unbound */
} ktune_tensor_desc;
/* Binds shapes (as ktune_submit and ktune_lookup do) and describes every input and output in
 * declared order: inputs[ktune_graph_n_inputs(g)], outputs[ktune_graph_n_outputs(g)] (either
 * may be NULL). -EINVAL with the binding error (unknown symbol, bad value) in err. */
KTUNE_EXPORT int ktune_graph_describe(const ktune_graph *g, const ktune_shape *shapes, int n_shapes,
                                      ktune_tensor_desc *inputs, ktune_tensor_desc *outputs,
                                      ktune_error *err);

/* The fp64 reference of g on the CPU: what verification compares every kernel with (docs/
 * formats.md, "fp64 reference interpreter"). Binds shapes (every symbolic dimension must be
 * bound: -EINVAL naming the first that is not) and evaluates the graph in double precision;
 * `cast` is the identity there. inputs[ktune_graph_n_inputs(g)] and
 * outputs[ktune_graph_n_outputs(g)] are dense row-major doubles in the graph's DECLARED order
 * (inputs as the document's "inputs" object lists them, outputs as its "outputs" list does),
 * each of the element count of its bound shape (ktune_graph_describe gives the shapes);
 * the caller owns them all, and nothing is kept after the call returns. Outputs are written
 * only on success. Reentrant: several threads may run it at once, on one graph too. Time and
 * memory grow with the problem (the interpreter is a plain loop nest; intermediates are freed
 * after their last use). -EINVAL for a binding error, -ENOMEM when out of memory. */
KTUNE_EXPORT int ktune_graph_reference(const ktune_graph *g, const ktune_shape *shapes,
                                       int n_shapes, const double *const *inputs,
                                       double *const *outputs, ktune_error *err);

/* ---- the client (through ktuned) ---- */

typedef struct ktune_client ktune_client;

/* The socket path used when none is given: $KTUNE_SOCKET, else "/run/ktune/ktuned.sock". */
KTUNE_EXPORT const char *ktune_default_socket(void);

/* Connects and says hello. socket_path NULL: ktune_default_socket(). -ENOENT / -ECONNREFUSED
 * when no daemon listens there, -EACCES when the socket's mode refuses this user; -EUSERS when
 * ktuned refused the connection (too many connections: its max-clients, max-clients-per-uid);
 * -ESHUTDOWN when it is shutting down. Run as root (effective uid 0), it trusts only a socket
 * file owned by root or the service user ($KTUNE_SERVICE_USER, else "ktune") and a listening
 * process running as one of them: anything else is -EPERM, nothing having been sent (a socket
 * someone else bound first). A connection ktuned closed for being idle (its idle-timeout) is
 * made again, once, before the next request: callers keep one client for as long as they like. */
KTUNE_EXPORT int ktune_connect(const char *socket_path, ktune_client **out, ktune_error *err);
KTUNE_EXPORT void ktune_disconnect(ktune_client *c); /* NULL is a no-op */
/* Reply timeout for every request after connect (default 30 s; a watch waits without limit for
 * events but not for its first reply). */
KTUNE_EXPORT void ktune_client_set_timeout(ktune_client *c, double seconds);

typedef enum ktune_job_state {
    KTUNE_JOB_QUEUED = 0,
    KTUNE_JOB_RUNNING,
    KTUNE_JOB_DONE,
    KTUNE_JOB_FAILED,
    KTUNE_JOB_CANCELLED,
} ktune_job_state;
/* "queued", "running", ...; static storage. */
KTUNE_EXPORT const char *ktune_job_state_name(ktune_job_state s);

/* A job as the daemon reports it (docs/protocol.md, "Job"). Plain data. */
typedef struct ktune_job {
    uint64_t id;
    ktune_job_state state;
    char name[64];
    int priority;
    int gpu; /* -1: not placed yet */
    char signature[65];
    char shapes[256]; /* "M=1024;N=512" */
    char precision[16];
    double budget_s, tolerance;
    int64_t submitted, started, finished; /* unix seconds, 0: not yet */
    char phase[16]; /* "screen", "refine", "explore", "retime", "record", "" */
    int trials, measured, resumed;
    double elapsed_s;
    double best_ns, baseline_ns, err_norm; /* 0: none yet */
    char family[32];
    char schedule[256];
    bool record; /* a verified winner was cached */
    char error[256];
    /* The tuning cost (appended: the fields above keep their offsets). Rejected candidates by
     * class ("compile_error", "wrong", "fault", "hang", ...; the first 8 the daemon sent, counts
     * > 0), then NVRTC seconds of the compiles used (summed over the parallel compile pool, so
     * it may exceed elapsed_s) and seconds spent measuring on the GPU; both over all attempts,
     * 0 for a job from before the daemon kept them. */
    int n_failures;
    struct ktune_job_failure {
        char name[16];
        int count;
    } failures[8];
    double compile_s, measure_s;
    /* The uid that submitted the job (appended likewise): only it, root and ktuned's admin group
     * may cancel it. -1 from a daemon that does not say. */
    int64_t owner;
    /* The roofline floor of the job's bound graph on the GPU it runs on (appended likewise):
     * its compulsory bytes at the GPU's measured copy bandwidth or its FLOPs at the peak of the
     * unit its precision allows, whichever is longer; floor_ns / best_ns is how close the
     * winner is to the limit. 0: not known yet (queued), or from an older daemon. */
    double floor_ns;
} ktune_job;

typedef struct ktune_submit_opts {
    const char *precision; /* "exact" (NULL), "tf32", "reduced" */
    double budget_s;       /* <= 0: 60 */
    double tolerance;      /* <= 0: the default for the dtype and precision */
    int priority;          /* -100..100, higher first; default 0 */
    int gpu;               /* -1: any (use KTUNE_SUBMIT_OPTS_INIT) */
    const char *name;      /* NULL: the graph's name */
} ktune_submit_opts;
#define KTUNE_SUBMIT_OPTS_INIT                                                                     \
    {                                                                                              \
        NULL, 0, 0, 0, -1, NULL                                                                    \
    }

/* Submits a job. *joined (may be NULL) tells whether it joined an identical queued, running or
 * done job instead of starting a new one. */
KTUNE_EXPORT int ktune_submit(ktune_client *c, const ktune_graph *g, const ktune_shape *shapes,
                              int n_shapes, const ktune_submit_opts *opts, ktune_job *out,
                              bool *joined, ktune_error *err);

/* ktune_submit2's flags. RETUNE: a new job even when an identical done one exists (a queued or
 * running one is still joined), with opts' budget; it reads the trial log of the jobs before
 * it back, so only candidates not measured before are measured: a finished job given more
 * budget, or tuned again after a ktune upgrade brought new candidates. REMEASURE: a retune
 * that also measures again what the trial log holds from before it (a changed machine,
 * driver or clocks). */
enum { KTUNE_SUBMIT_RETUNE = 1u << 0, KTUNE_SUBMIT_REMEASURE = 1u << 1 };
/* ktune_submit with flags (0: the same as ktune_submit). -EINVAL for an unknown flag. */
KTUNE_EXPORT int ktune_submit2(ktune_client *c, const ktune_graph *g, const ktune_shape *shapes,
                               int n_shapes, const ktune_submit_opts *opts, unsigned flags,
                               ktune_job *out, bool *joined, ktune_error *err);
KTUNE_EXPORT int ktune_status(ktune_client *c, uint64_t job, ktune_job *out, ktune_error *err);
KTUNE_EXPORT int ktune_cancel(ktune_client *c, uint64_t job, ktune_job *out, ktune_error *err);

/* Follows a job: cb gets the job at once, then at each progress event, and last when it ends
 * (done, failed or cancelled). Blocks until then or until cb returns non-zero (then returns 0
 * and the job goes on). *final (may be NULL) receives the last state seen. cb runs on the
 * calling thread with c's lock held: a call on c from inside cb fails with -EDEADLK (use
 * another ktune_client). */
typedef int (*ktune_watch_cb)(const ktune_job *job, void *ctx);
KTUNE_EXPORT int ktune_watch(ktune_client *c, uint64_t job, ktune_watch_cb cb, void *ctx,
                             ktune_job *final, ktune_error *err);

/* Lists jobs, newest first. state_mask: bits (1 << ktune_job_state), 0: all. *out is malloc'd
 * (free() it), *n its length. */
KTUNE_EXPORT int ktune_jobs(ktune_client *c, unsigned state_mask, int limit, ktune_job **out,
                            size_t *n, ktune_error *err);

typedef struct ktune_gpu {
    int index;
    char name[128];
    int sm_major, sm_minor, sm_count;
    uint64_t mem_bytes;
    int driver_version, cuda_version;
    char state[16]; /* "starting", "idle", "busy", "down" */
    uint64_t job;   /* running job, 0: none */
    int restarts;   /* worker respawns */
    char error[256];
} ktune_gpu;
/* The daemon's GPUs. *out malloc'd (free() it). With none, *n is 0 and note (256 bytes, may be
 * NULL) says why in one line. */
KTUNE_EXPORT int ktune_gpus(ktune_client *c, ktune_gpu **out, size_t *n, char *note,
                            ktune_error *err);

typedef struct ktune_stats {
    double uptime_s;
    int clients;
    uint64_t requests;
    int jobs[5]; /* by ktune_job_state */
    int gpus;
    uint64_t rss_bytes;
    char cache_path[256];
    uint64_t cache_records, cache_keys, cache_trials, cache_map_size, cache_map_used;
} ktune_stats;
KTUNE_EXPORT int ktune_stats_get(ktune_client *c, ktune_stats *out, ktune_error *err);

/* The cached winner's summary, through the daemon (the deploy-time runtime below needs none). */
typedef struct ktune_record_info {
    char family[32];
    char schedule[256];
    double time_ns, p10_ns, p90_ns, err_norm, tolerance, cublaslt_ns;
    uint64_t workspace_bytes;
    int n_kernels;
    int64_t created;
    char gpu[128];
} ktune_record_info;
/* *found false (and 0 returned) when the cache has nothing for that key. source (may be NULL)
 * receives the CUDA source, malloc'd (free() it). gpu: the daemon's GPU index. */
KTUNE_EXPORT int ktune_lookup_remote(ktune_client *c, const ktune_graph *g,
                                     const ktune_shape *shapes, int n_shapes, const char *precision,
                                     int gpu, bool *found, ktune_record_info *out, char **source,
                                     ktune_error *err);

/* ---- the deploy-time runtime ---- */

typedef struct ktune_runtime ktune_runtime;

/* Opens the cache in cache_dir (NULL: $KTUNE_CACHE, else /var/lib/ktune/cache) read-only.
 * Needs only read access to the directory: without write access to its lock file, readers run
 * lock-free and every record's checksum still guards what is served. libcuda is loaded on the
 * first lookup, not here.
 * The first open of a cache file in a process checks the file's LMDB structure in a child process
 * (its pages: a damaged page would otherwise crash this process in a later lookup; about 60 ms
 * for 100 000 records, docs/RELIABILITY.md) and refuses a damaged cache with -EBADMSG and a line
 * naming the damage and the repair (docs/operations.md, "A damaged cache"). The child is the
 * program ktune-cache-check, started with posix_spawn (this process is not forked: its threads,
 * locks and memory stay out of it; found beside libktune or the program, in the libexec
 * directory, or at $KTUNE_CACHE_CHECKER); the caller must not reap children it did not start. Set
 * KTUNE_CACHE_CHECK=0 in the environment to skip the check (a process that must not start
 * processes); when the check cannot run (no helper, spawn fails), the cache is opened unchecked
 * with a warning. */
KTUNE_EXPORT int ktune_runtime_open(const char *cache_dir, ktune_runtime **out, ktune_error *err);
/* Unloads every module and closes the cache. Kernels from this runtime become invalid. */
KTUNE_EXPORT void ktune_runtime_close(ktune_runtime *rt);

typedef enum ktune_match {
    KTUNE_MATCH_EXACT = 0,  /* tuned on this GPU model, driver and toolkit */
    KTUNE_MATCH_COMPATIBLE, /* same GPU model (name, sm, SM count, memory), other driver or
                             * toolkit version: correct, possibly not the fastest here */
} ktune_match;

/* A loaded kernel (one cached record, its module loaded in one CUDA context). Owned by the
 * runtime: valid until ktune_runtime_close; never freed by the caller. */
typedef struct ktune_kernel ktune_kernel;

/* Looks up the best verified record for (g, shapes, precision) on CUDA device `device` (-1: the
 * device of the calling thread's current context, else device 0) and loads it into that
 * context (the device's primary context when none is current: the one PyTorch uses). Only
 * records verified within the default tolerance of the graph's dtypes and precision, and tuned
 * for this very problem (the bound graph's problem digest and, slot by slot, its input and
 * output shapes: docs/formats.md, Part 2) are served. Exact fingerprint first; then a compatible
 * record (see ktune_match), flagged in *match (may be NULL). A record whose checksum or
 * verification field is wrong is never served, nor one that does not fit the graph (an argument or
 * output slot it lacks, a workspace range past its size). Loading checks the cubin's ELF tables
 * against its stored length and each launch's arguments against the kernel's parameters (count and
 * sizes): -EBADMSG when they disagree. -ENOENT when there is nothing for that key; -ENODEV when
 * there is no driver or device. Repeated lookups of the same key and context return the same kernel
 * from memory. */
KTUNE_EXPORT int ktune_lookup(ktune_runtime *rt, const ktune_graph *g, const ktune_shape *shapes,
                              int n_shapes, const char *precision, int device, ktune_kernel **out,
                              ktune_match *match, ktune_error *err);

/* ktune_lookup for records verified within a tolerance other than the default: tolerance is the
 * normwise bound the tuning job was given (ktune_job_opts.tolerance, `ktune tune --tolerance`),
 * 0 for the default of the graph's dtypes and precision. Records verified within another
 * tolerance, looser or tighter, are never served: each tolerance is its own key. */
KTUNE_EXPORT int ktune_lookup_within(ktune_runtime *rt, const ktune_graph *g,
                                     const ktune_shape *shapes, int n_shapes, const char *precision,
                                     double tolerance, int device, ktune_kernel **out,
                                     ktune_match *match, ktune_error *err);

typedef struct ktune_kernel_info {
    ktune_match match;
    const char *family, *schedule, *source; /* valid while the kernel is */
    double time_ns, err_norm, tolerance, cublaslt_ns;
    uint64_t workspace_bytes;
    int n_launches;
    int n_inputs, n_outputs; /* the graph's (ktune_graph_n_inputs, ktune_graph_n_outputs) */
    char gpu[128];
    int driver_version, cuda_version;
} ktune_kernel_info;
KTUNE_EXPORT void ktune_kernel_get_info(const ktune_kernel *k, ktune_kernel_info *out);

/* Bytes of device workspace a launch needs (0: pass NULL). */
KTUNE_EXPORT uint64_t ktune_kernel_workspace_size(const ktune_kernel *k);

/* Const inputs the kernel wants in another layout: ktune_prepack_size gives the bytes of the
 * packed form of input `input` (declared index), 0 when it needs no packing (pass the tensor as
 * it is); ktune_prepack writes it into dst (device memory of that size) on stream. Pack once at
 * load time, then pass dst as that input to every launch. */
KTUNE_EXPORT uint64_t ktune_prepack_size(const ktune_kernel *k, int input);
KTUNE_EXPORT int ktune_prepack(ktune_kernel *k, int input, const void *src, void *dst, void *stream,
                               ktune_error *err);

/* Launches the kernel (all of its launches, in order) on stream (a CUstream / cudaStream_t;
 * NULL: the legacy default stream) with device pointers: inputs[n_inputs] and
 * outputs[n_outputs] in the declared order of the graph the kernel was looked up with (the
 * order of ktune_graph_input_name and ktune_graph_describe: for examples/gemm_bias_relu.json,
 * A, W, bias), workspace of ktune_kernel_workspace_size bytes (NULL when 0). The kernel's own
 * argument order is mapped onto it once, at lookup, so two inputs of one shape and dtype (the
 * operands of sub, attention's K and V) cannot be swapped silently by following another order.
 * Asynchronous like any kernel launch; the pointers must stay valid until the stream reaches it.
 * An output must not overlap an input, another output or the workspace, nor the workspace an
 * input (the kernels assume their buffers do not alias, and some re-read an input after writing
 * an output): -EINVAL naming both (index and declared name), nothing launched. Inputs may
 * overlap. */
KTUNE_EXPORT int ktune_launch(ktune_kernel *k, void *const *inputs, void *const *outputs,
                              void *workspace, void *stream, ktune_error *err);

#ifdef __cplusplus
}
#endif
