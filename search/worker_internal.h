/* The GPU worker's modules and the state they share (ktune-worker: search/worker.h is its
 * protocol). One process, one thread; every function here is called from the request loop.
 *
 *   worker.c            the process: start-up, the request loop, the request handlers, "eval"
 *                       (load, verify, time), the self-test and "hello"
 *   worker_data.c       data sets: inputs drawn per seed, their device copies, output buffers
 *                       and the fp64 reference outputs, kept for the candidates of one group
 *   worker_reference.c  the fp64 reference program: emitted, compiled (its cubins cached) and run
 *   worker_verify.c     verification: tolerances, the comparison kernels (worker_verify.cu,
 *                       embedded at build time) and the race check
 *   worker_load.c       candidates: loading a cubin or planning a cuBLASLt call, argument
 *                       binding, the slots that keep them for "retime", one run
 *
 * Ownership: the wk owns its data sets (data[]), candidate slots (cands[]), the comparison
 * module (cmp) and the reference cubin cache (ref_cubins); a candidate points at its data set
 * (users counts them), so a data set in use is never freed. */
#pragma once

#include "compile.h"
#include "worker.h"

#include "cublaslt.h"
#include "ops/reference_gpu.h"

#include <time.h>

#define WK_TAG           "worker"
#define WK_MAX_CANDS     64
#define WK_MAX_DATA      4  /* unused data sets kept for later candidates of the same group */
#define WK_REF_CUBINS    16 /* compiled reference programs kept, by SHA-256 of their source */
#define WK_DEFAULT_SEEDS 3

/* Inputs and outputs of a data set: a group has at most OPS_GROUP_MAX_IO of each, but an
 * assembled record is evaluated over its whole graph, which may have more. */
#define WK_MAX_IO 64

/* Inputs, device buffers and references of one distinct (subgraph, bindings, seeds). */
typedef struct wk_data {
    uint8_t key[32];
    uint64_t last_use;
    int users; /* loaded candidates that point here */
    ops_graph *g;
    int n_in, n_out;
    size_t in_bytes[WK_MAX_IO], out_bytes[WK_MAX_IO];
    int64_t out_numel[WK_MAX_IO];
    CUdeviceptr d_in[WK_MAX_IO], d_out[WK_MAX_IO];
    int seeds;
    uint64_t seed0;
    uint8_t **h_in;         /* [seed * n_in + i]: typed inputs */
    CUdeviceptr *d_seed_in; /* [seed * n_in + i]: the same on the device (copied into d_in) */
    CUdeviceptr *d_ref;     /* [seed * n_out + j]: fp64 reference outputs (device) */
    /* [seed * n_out + j]: sum of squares and count of the reference values that are finite and
     * representable in the output's dtype (the ones compared by value) */
    double *ref_sumsq;
    int64_t *ref_cmp;
    CUdeviceptr d_prev[WK_MAX_IO]; /* the first run's outputs, for the race check */
    bool have_ref;
    int cur_seed; /* whose inputs d_in holds, -1 none */
    /* What the tolerances need (srch_wk_tolerance_inputs) */
    int64_t red_len;
    bool contraction;
    double p_round; /* unit roundoff of an attention's 16-bit operands (P is rounded to it), 0 */
} wk_data;

typedef struct wk wk;

/* One block's partial result of a comparison kernel (kt_part in worker_verify.cu). */
typedef struct wk_part {
    double num, den, worst;
    long long worst_at;  /* WK_NONE: none */
    long long bad;       /* elements whose NaN/Inf class differs from the reference's */
    long long first_bad; /* WK_NONE: none */
    long long n_cmp;     /* elements compared by value (finite, representable reference) */
} wk_part;
#define WK_NONE 0x7fffffffffffffffLL

/* One loaded candidate. */
typedef struct wk_cand {
    bool used;
    uint64_t id, seq;
    wk *w;
    wk_data *data;
    CUmodule mod;
    int n_kernels;
    CUfunction fn[SRCH_REQ_MAX_KERNELS];
    ops_kernel_launch launch[SRCH_REQ_MAX_KERNELS];
    int64_t zero_offset[SRCH_REQ_MAX_KERNELS], zero_bytes[SRCH_REQ_MAX_KERNELS]; /* 0: all of ws */
    CUdeviceptr ptrs[SRCH_REQ_MAX_KERNELS][OPS_MAX_ARGS];
    void *params[SRCH_REQ_MAX_KERNELS][OPS_MAX_ARGS];
    /* The encoded tensor maps of OPS_ARG_TENSOR_MAP parameters, n_tmaps of them (aligned_alloc'd,
     * 128 bytes each, freed with the slot): params[k][a] points at one of them. */
    CUtensorMap *tmaps;
    int n_tmaps;
    CUdeviceptr ws;
    int64_t ws_bytes;
    bool library;
    srch_lt_plan *plan;
    CUdeviceptr lt_a, lt_b, lt_c, lt_bias;
} wk_cand;

/* The comparison module (worker_verify.cu), compiled on first use (srch_wk_cmp_init). */
typedef struct wk_cmp {
    bool ready;
    CUmodule mod;
    CUfunction f_cmp[OPS_DT_F64 + 1];      /* by output dtype */
    CUfunction f_refstats[OPS_DT_F64 + 1]; /* by output dtype */
    CUfunction f_copy;
    CUfunction f_widen[OPS_DT_F64]; /* by dtype: f32, f16, bf16 */
    CUfunction f_diff[4];           /* by word size 1, 2, 4, 8 */
    CUdeviceptr d_part, d_res;
    wk_part *h_part;
} wk_cmp;

struct wk {
    int in_fd, out_fd;
    int init_rc;
    kt_err init_err;
    srch_cuda cu;
    bool have_cu;
    srch_timer *timer;
    kt_err timer_err;
    srch_lt *lt;
    kt_err lt_err;
    char arch[16]; /* NVRTC target of the reference and self-test kernels, "sm_90" */
    char name[128];
    int attr_major, attr_minor, sm_count, clock_khz, l2_bytes, smem_optin, regs_per_sm;
    int max_threads_block, max_threads_sm, max_blocks_sm, smem_block, smem_sm, warp_size;
    int max_regs_block;
    size_t mem_bytes;
    int cuda_version;
    bool dead; /* a sticky error was seen */
    bool selftest_done;
    char selftest[300];
    uint64_t seq;
    wk_cmp cmp;
    wk_cand cands[WK_MAX_CANDS];
    int n_data;
    wk_data *data[WK_MAX_CANDS + WK_MAX_DATA + 1];
    /* Reference cubins: the full graph's reference is compiled again for every group that
     * reads intermediates, and NVRTC takes about 0.5 s for it on the H100. */
    struct {
        uint8_t key[32];
        void *cubin; /* NULL: empty slot */
        size_t len;
        uint64_t last_use;
    } ref_cubins[WK_REF_CUBINS];
    uint64_t ref_clock;
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

/* Every CUDA call of the worker goes through here: srch_cuda_check translates, and a sticky
 * error marks the context dead. */
static inline int wk_cu(wk *w, CUresult rc, const char *what, kt_err *err)
{
    if (rc != CUDA_SUCCESS && srch_cuda_sticky(rc))
        w->dead = true;
    return srch_cuda_check(&w->cu, rc, what, err);
}

/* After a failure in code that called CUDA indirectly (timing, cuBLASLt): is the context
 * dead? Sticky errors repeat on every later call, so one synchronise tells. */
static inline bool wk_probe_dead(wk *w)
{
    if (!w->dead && w->have_cu) {
        CUresult rc = w->cu.p_cuCtxSynchronize();
        if (rc != CUDA_SUCCESS && srch_cuda_sticky(rc))
            w->dead = true;
    }
    return w->dead;
}

static inline double wk_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- worker_data.c ---- */

/* The data set of req (its subgraph, bindings, seeds, "full"), made on first use: inputs drawn,
 * uploaded, output buffers allocated (no reference yet). *out stays owned by w. */
int srch_wk_data_get(wk *w, const srch_eval_req *req, wk_data **out, kt_err *err);
/* Frees unused data sets beyond keep, least recently used first. */
void srch_wk_data_trim(wk *w, int keep);
void srch_wk_data_free(wk *w, wk_data *D);
/* The device buffer of graph tensor t of D (an input or an output), 0 for any other. */
CUdeviceptr srch_wk_data_ptr(const wk_data *D, int32_t t);
/* Copies seed s's inputs into the input buffers the candidates read (nothing when they hold
 * them already). */
int srch_wk_data_upload(wk *w, wk_data *D, int s, kt_err *err);
/* Runs the fp64 reference of D->g for every seed, once; keeps the outputs and their sums. */
int srch_wk_data_reference(wk *w, wk_data *D, kt_err *err);

/* ---- worker_reference.c ---- */

/* A compiled and loaded reference program (ops_emit_reference_graph) with its workspace. */
typedef struct wk_ref {
    ops_ref_program prog;
    srch_compile_result cr;
    CUmodule mod;
    CUfunction *fn;
    CUdeviceptr ws;
} wk_ref;

/* Emits, compiles (NVRTC, or a cubin of w->ref_cubins) and loads the reference of g into *r
 * and allocates its workspace; *r is released with srch_wk_ref_free, also after a failure. */
int srch_wk_ref_load(wk *w, const ops_graph *g, wk_ref *r, kt_err *err);
/* Runs every kernel of r once and waits. buf[t] is the double buffer of graph tensor t (every
 * graph input and output of the graph r was emitted for). */
int srch_wk_ref_launch(wk *w, const wk_ref *r, const CUdeviceptr *buf, int n_tensors, kt_err *err);
void srch_wk_ref_free(wk *w, wk_ref *r);

/* ---- worker_verify.c ---- */

/* Sets what the tolerances of D's outputs depend on (the longest reduction, whether a
 * contraction is in the graph, the attention operands' roundoff) from D->g. */
void srch_wk_tolerance_inputs(wk_data *D);
/* Compiles and loads the comparison module and allocates the partials; once per process. */
int srch_wk_cmp_init(wk *w, kt_err *err);
void srch_wk_cmp_free(wk *w);
/* Runs a kernel that writes one wk_part per block, and adds the partials in block order. */
int srch_wk_cmp_reduce(wk *w, CUfunction f, void **params, int64_t n, wk_part *out, kt_err *err);
/* dst = src (bytes), on the device. */
int srch_wk_cmp_copy(wk *w, CUdeviceptr dst, CUdeviceptr src, size_t bytes, kt_err *err);
/* dst (numel doubles) = the numel values of dtype dt at src, widened on the device. */
int srch_wk_cmp_widen(wk *w, ops_dtype dt, CUdeviceptr src, CUdeviceptr dst, int64_t numel,
                      kt_err *err);
/* Verifies a loaded candidate; fills res (status, err_norm, err_max, msg). Returns 0 when the
 * verification ran (pass or not), a negative errno when it could not. */
int srch_wk_verify(wk_cand *c, const srch_eval_req *req, srch_eval_result *res);

/* ---- worker_load.c ---- */

/* Loads the cubin (or plans the cuBLASLt call) of req into c, whose data set is set, and binds
 * every argument. On failure res says why and the slot stays with the caller to release. */
int srch_wk_cand_load(wk *w, wk_cand *c, const srch_eval_req *req, srch_eval_result *res);
/* The loaded candidate with this id, or NULL. */
wk_cand *srch_wk_cand_find(wk *w, uint64_t id);
/* A free slot; the oldest candidate goes when all WK_MAX_CANDS are taken. */
wk_cand *srch_wk_cand_slot(wk *w);
void srch_wk_cand_release(wk *w, wk_cand *c);
/* Device memory for a data set or a reference that did not fit: releases every unused data set
 * and, when there was none, the least recently loaded candidate other than keep (its data set
 * goes at the next call once unused). False when nothing could be released. The candidates the
 * search holds for re-timing are a cache: one released here is re-timed from its screening. */
bool srch_wk_make_room(wk *w, const wk_cand *keep);
/* One run of the candidate: every kernel in order (or the cuBLASLt call) on the default
 * stream. The srch_launch_fn of the timer (ctx: the wk_cand). */
int srch_wk_cand_launch(void *ctx, kt_err *err);
/* Poisons outputs and workspace and runs once; the outputs stay on the device. */
int srch_wk_cand_run_once(wk_cand *c, kt_err *err);
/* SRCH_FAULT when the context is dead, otherwise otherwise. */
srch_status srch_wk_fail_status(wk *w, srch_status otherwise);
