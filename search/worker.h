/* The GPU worker (`ktune-worker`) and its protocol.
 *
 * One worker process per GPU (CUDA_VISIBLE_DEVICES pins it) owns the CUDA context: it loads
 * candidates, verifies them against the fp64 reference and times them. A faulting kernel
 * poisons the context and a hung one runs until its process dies, so the search talks to the
 * worker across a process boundary and kills/respawns it (search/supervisor.h).
 *
 * Protocol: a stream of msgpack maps, requests on the worker's stdin, replies on its stdout, one
 * reply per request, in order (stderr is the worker's log). Every request has "op"; every reply
 * has "ok" (bool) and, on failure, "error" {"code": "EINVAL", "msg": "..."}.
 *
 *   {"op": "hello"}
 *     -> {"ok": true, "gpu": {name, sm_major, sm_minor, sm_count, mem_bytes, driver_version,
 *         cuda_version, sm_clock_khz, l2_bytes, smem_per_block_optin, regs_per_sm},
 *         "cupti": true, "cublaslt": true, "selftest": "ok"}
 *     The self-test runs a known kernel, verifies it and times it once.
 *   {"op": "eval", ...srch_eval_req...}  -> {"ok": true, ...srch_eval_result...}
 *     Verifies (unless "verify": false) and times (unless "time": false) one candidate. The
 *     candidate stays loaded under its id for "retime" until "forget" or until the worker
 *     holds more than 64 (the oldest goes); one with "record": true (an assembled cache record,
 *     srch_eval_req_for_graph) is released after its reply.
 *   {"op": "retime", "ids": [...], "rounds": N, "cold": bool}
 *     -> {"ok": true, "times": [{"id", "median_ns", "p10_ns", "p90_ns", "reps"}, ...]}
 *   {"op": "forget", "ids": [...]} -> {"ok": true}
 *   {"op": "reference", "sub", "bindings", "seed0", "seeds", optional "full"} (as in eval)
 *     -> {"ok": true, "inputs": [[bin per input] per seed], "outputs": [[bin per output] per
 *         seed]}: the generated inputs (stored dtype) and the fp64 GPU reference (doubles), so
 *         tests can check both against ops_ref_run.
 *   {"op": "quit"} -> {"ok": true}, then exit 0.
 *
 * Encoding of srch_eval_req and srch_eval_result: search/worker_proto.c, documented there; the
 * group travels as its subgraph (ops_graph_pack) plus its bindings and, optionally, the whole
 * graph ("full") whose reference gives the subgraph's inputs that are intermediates. */
#pragma once

#include "ops/family.h"
#include "ops/library.h"
#include "timing.h"

#include <msgpack.h>

typedef enum srch_status {
    SRCH_OK = 0,
    SRCH_WRONG,       /* over tolerance, NaN/Inf unlike the reference's, or nothing compared */
    SRCH_RACE,        /* two runs on the same inputs differ bitwise */
    SRCH_FAULT,       /* the kernel faulted (the worker died or its context is poisoned) */
    SRCH_HANG,        /* the kernel ran past its deadline and the worker was killed */
    SRCH_LOAD_ERROR,  /* the cubin did not load or launch (resources, bad image) */
    SRCH_UNAVAILABLE, /* a library candidate whose algorithm the heuristic did not return */
    SRCH_COMPILE_ERROR,
    SRCH_STATUS_COUNT
} srch_status;
const char *srch_status_str(srch_status s); /* "ok", "wrong", "race", "fault", "hang", ... */

/* The verification inputs: random values of graph input i of some graph for seed s (seed0 + s),
 * rounded to t's dtype (even seeds uniform in [-1, 1), odd seeds mixed magnitudes; with
 * positive, their magnitudes: an input of log or sqrt, ops_graph_needs_positive); a malloc'd
 * array of t's numel elements, or NULL. The same arguments give the same bytes, however many
 * threads the machine has. */
uint8_t *srch_random_input(const ops_tensor *t, uint64_t seed0, int s, int i, bool positive);

#define SRCH_MAX_BINDINGS 16
/* Kernels one request may launch: as many as a cache record holds (CACHE_MAX_KERNELS), so that
 * every record search/tune_record.c assembles can be evaluated as it will be served. A group
 * candidate has at most OPS_MAX_KERNELS. */
#define SRCH_REQ_MAX_KERNELS 64

typedef struct srch_binding {
    char name[48];
    int64_t value;
} srch_binding;

typedef struct srch_eval_req {
    uint64_t id;
    ops_graph *sub; /* the group as a graph (ops_group_subgraph): inputs first, then nodes */
    int n_bindings;
    srch_binding bindings[SRCH_MAX_BINDINGS]; /* the bound symbols of sub (msgpack: symbolic) */
    /* Optional (NULL: none): the whole canonical bound graph sub was cut from. With it, the
     * worker draws random values for full's graph inputs, runs full's fp64 reference, and feeds
     * each input of sub the value of the tensor of full with the same name (graph inputs: the
     * drawn values; intermediates: the reference's, rounded to their dtype), so a group is
     * verified on inputs from the domain its producers give it. Every input of sub must be a
     * tensor of full with the same dtype and sizes. */
    ops_graph *full;
    int n_full_bindings;
    srch_binding full_bindings[SRCH_MAX_BINDINGS];
    ops_precision precision;
    double
        tolerance;  /* normwise; <= 0 means docs/evaluation.md's default for dtype and precision */
    int seeds;      /* verification input sets, >= 2; each also run twice for races */
    uint64_t seed0; /* first seed: the same candidate gets the same inputs every time */
    bool verify, time;
    srch_time_opts timing;
    /* An assembled cache record over the whole graph (srch_eval_req_for_graph), not a group
     * candidate: the worker releases it after the reply instead of keeping it for "retime". */
    bool record;
    /* The candidate: a cubin with kernels, or a cuBLASLt call. Kernel arguments and the
     * lt tensor fields index sub->tensors. */
    bool library;
    void *cubin;
    size_t cubin_len;
    int n_kernels;
    ops_kernel_launch kernels[SRCH_REQ_MAX_KERNELS];
    /* With kernels[k].zero_workspace: the workspace bytes [zero_offset[k], zero_offset[k] +
     * zero_bytes[k]) are cleared before kernel k; zero_bytes[k] == 0 clears the whole workspace.
     * A group candidate's workspace is its own (0: all of it); a record's also holds the
     * intermediates other groups wrote, so its kernels clear only their group's slot
     * (cache_kernel's zero_offset and zero_bytes). */
    int64_t zero_offset[SRCH_REQ_MAX_KERNELS], zero_bytes[SRCH_REQ_MAX_KERNELS];
    int64_t workspace_bytes;
    ops_lt_desc lt;
} srch_eval_req;

typedef struct srch_eval_result {
    uint64_t id;
    srch_status status;
    char msg[256];   /* why, for anything but ok */
    double err_norm; /* ||out - ref|| / ||ref|| over all outputs, worst seed (over the elements
                        compared by value; Inf when NaN/Inf differ or none was compared) */
    double err_max;  /* max over elements of |out - ref| / (atol + rtol |ref|) (<= 1 passes) */
    srch_time_stats time;
} srch_eval_result;

/* Message encoding (search/worker_proto.c). Packers write one map; unpackers read one map and
 * fill the struct (the request's sub, cubin are malloc'd: release with srch_eval_req_free).
 * -EPROTO with detail in err for a malformed message. */
int srch_eval_req_pack(msgpack_packer *pk, const srch_eval_req *r);
int srch_eval_req_unpack(const msgpack_object *o, srch_eval_req *r, kt_err *err);
void srch_eval_req_free(srch_eval_req *r);
int srch_eval_result_pack(msgpack_packer *pk, const srch_eval_result *r);
int srch_eval_result_unpack(const msgpack_object *o, srch_eval_result *r, kt_err *err);

/* Building requests (search/worker_req.c). */

/* Builds the request for a candidate of a space group: extracts the subgraph, maps the emitted
 * launch arguments (graph tensors) onto it, records the bindings, and derives seed0 from the
 * subgraph (every candidate of a group gets the same inputs, so the worker computes their
 * reference once). cubin is copied; release out with srch_eval_req_free. A library candidate
 * (e->n_kernels == 0, cubin NULL) is completed by srch_eval_req_set_lt. */
int srch_eval_req_for_group(const ops_group *grp, const ops_emitted *e, const void *cubin,
                            size_t cubin_len, srch_eval_req *out, ops_diag *d);
/* Builds the request that evaluates a whole graph's candidate (an assembled cache record): sub
 * is a copy of g (validated, canonical, fully bound; its tensors keep g's numbering, which is
 * also the one the worker rebuilds: inputs, then node outputs in node order), the bindings are
 * g's bound symbols, seed0 derives from g (as srch_eval_req_set_full's), "record" is set, and
 * the request verifies without timing. The caller adds the candidate: cubin, kernels (tensor
 * arguments index g's inputs and outputs, workspace offsets) and workspace, or lt. Release with
 * srch_eval_req_free. */
int srch_eval_req_for_graph(const ops_graph *g, srch_eval_req *out, ops_diag *d);
/* True when an input of grp is produced by a node of grp->g (an intermediate of the graph):
 * random inputs could lie outside the domain its producers give it. */
bool srch_group_reads_intermediates(const ops_group *grp);
/* Seconds a worker may spend making r's data set before it runs the candidate, on top of the
 * candidate's own deadline: drawing the inputs (full's graph inputs when r has full), fetching
 * the intermediates r reads and computing r's fp64 reference, for every seed. Generous (10 ns an
 * element), so that a job over gigabytes (KernelBench's) is not taken for a hanging kernel. */
double srch_eval_req_data_seconds(const srch_eval_req *r);
/* Attaches full (a copy) and its bindings to r, and derives r->seed0 from full instead of the
 * subgraph, so every group of one graph draws the same graph inputs. full must be validated,
 * canonical and fully bound, and hold every input of r->sub by name (ops_group_subgraph keeps
 * names). */
int srch_eval_req_set_full(srch_eval_req *r, const ops_graph *full, ops_diag *d);
/* Makes r (from srch_eval_req_for_group of the same group) a library candidate running lt
 * (ops_library_describe of the group: tensors of grp->g, mapped here onto r->sub). */
int srch_eval_req_set_lt(srch_eval_req *r, const ops_group *grp, const ops_lt_desc *lt,
                         ops_diag *d);

/* The worker's main loop (search/worker.c), run by the ktune-worker executable: reads requests
 * from in_fd, writes replies to out_fd, until "quit" or end of input. Returns the exit status. */
int srch_worker_main(int in_fd, int out_fd);
