/* Kernel records and trial entries of the ktune cache: the plain structs, and their stored form
 * (a msgpack map followed by a SHA-256 checksum of the map's bytes). docs/formats.md (part 3)
 * describes every field and the byte layout.
 *
 * A cache_record owns every pointer in it (strings, blobs, arrays): fill one by hand or with
 * cache_record_decode, release it with cache_record_free. Records are plain data: no locking, one
 * thread at a time per record. */
#pragma once

#include "ops/graph.h"
#include "ops/tmap.h"

#include <stddef.h>
#include <stdint.h>

/* the "v" field of a stored kernel record (2: kernel.zero; 3: problem digest, key tolerance and
 * the bound shape of every input and output; 4: tensor-map arguments, arg.tmap). A record
 * without a tensor map is still written as 3, byte for byte as before, so builds that predate
 * tensor maps read it; one with a tensor map is 4, which they refuse instead of passing a
 * pointer where the kernel takes a map. Both decode. */
#define CACHE_RECORD_VERSION      4
#define CACHE_RECORD_VERSION_BASE 3 /* what a record without tensor maps is written as */

#define CACHE_TRIAL_VERSION  1  /* the "v" field of a stored trial entry */
#define CACHE_CHECKSUM_BYTES 32 /* SHA-256 appended to every stored value */
#define CACHE_GPU_ID_BYTES   16 /* leading bytes of SHA-256(canonical fingerprint) */
#define CACHE_GPU_NAME_MAX   128
#define CACHE_MAX_SHAPES     16  /* bound symbols in one key */
#define CACHE_SYM_NAME_MAX   48  /* bytes of a symbol name including the NUL */
#define CACHE_CAND_MAX       200 /* bytes of a trial's candidate id including the NUL */
#define CACHE_MAX_KERNELS    64  /* kernels in one record (multi-kernel candidates) */
#define CACHE_MAX_ARGS       256 /* arguments of one kernel */
#define CACHE_MAX_TMAPS      16  /* tensor-map arguments of one kernel */

/* The GPU fingerprint. Every field takes part in the key (see cache_gpu_id): a record tuned on one
 * GPU model, memory size, driver or CUDA version is not served to another. */
typedef struct cache_gpu {
    char name[CACHE_GPU_NAME_MAX]; /* e.g. "NVIDIA H100 80GB HBM3" */
    int32_t sm_major, sm_minor;    /* compute capability */
    int32_t sm_count;              /* multiprocessors */
    uint64_t mem_bytes;            /* total device memory */
    int32_t driver_version;        /* cuDriverGetVersion() form: 12040 is 12.4 */
    int32_t cuda_version;          /* toolkit the kernels were built with, same form */
} cache_gpu;

/* One bound symbolic dimension, NAME=VALUE. Names are [A-Za-z0-9_]+, values >= 1. */
typedef struct cache_bound {
    char name[CACHE_SYM_NAME_MAX];
    int64_t value;
} cache_bound;

/* The parts of a cache key: the GPU, the graph (signature, with dimensions symbolic), the bound
 * problem (ops_graph_problem's digest, which sees the bound sizes of every canonical symbol), the
 * precision policy and the tolerance a record was verified within (0: the default of the graph's
 * dtypes and precision; a job's looser or tighter tolerance keys its records apart, so they
 * are served only to lookups that ask for that tolerance). The shapes say, in the names of
 * whoever tuned it, what the problem was bound to: they are kept in the record for people, and
 * are not part of the encoded key. Shapes may be given in any order: encoders sort them by name
 * (byte order) and refuse duplicate names. */
typedef struct cache_key {
    cache_gpu gpu;
    uint8_t sig[OPS_SIG_BYTES];     /* ops_graph_signature() */
    uint8_t problem[OPS_SIG_BYTES]; /* ops_graph_problem() of the bound graph */
    int n_shapes;
    cache_bound shapes[CACHE_MAX_SHAPES];
    ops_precision precision;
    double tolerance; /* normwise tolerance verified within; 0: the default */
} cache_key;

/* One kernel argument, in launch order. */
typedef enum cache_arg_kind {
    CACHE_ARG_INPUT = 0, /* pointer to graph input `index` (canonical input order) */
    CACHE_ARG_OUTPUT,    /* pointer to graph output `index` (canonical output order) */
    CACHE_ARG_WORKSPACE, /* pointer to workspace base + `offset`; the kernel uses `bytes` there */
    CACHE_ARG_SCALAR,    /* a by-value scalar of type `scalar` */
    CACHE_ARG_KIND_COUNT
} cache_arg_kind;

typedef enum cache_scalar {
    CACHE_SCALAR_I32 = 0,
    CACHE_SCALAR_I64,
    CACHE_SCALAR_F32,
    CACHE_SCALAR_F64,
    CACHE_SCALAR_COUNT
} cache_scalar;

typedef struct cache_arg {
    cache_arg_kind kind;
    int32_t index;       /* INPUT, OUTPUT */
    uint64_t offset;     /* WORKSPACE */
    uint64_t bytes;      /* WORKSPACE: the range [offset, offset + bytes) the kernel may touch */
    cache_scalar scalar; /* SCALAR: the C type passed to the kernel */
    int64_t ival;        /* SCALAR I32/I64 */
    double fval;         /* SCALAR F32/F64 */
    /* INPUT, OUTPUT, WORKSPACE: the kernel takes a TMA tensor map over that buffer (encoded at
     * launch with the buffer's address as its base, passed by value: 128 bytes) instead of the
     * pointer. The map may not reach past the buffer (ops_tensor_map_span). */
    bool has_tmap;
    ops_tensor_map tmap;
} cache_arg;

/* One kernel launch of a candidate; a multi-kernel candidate runs them in array order. */
typedef struct cache_kernel {
    char *entry; /* entry-point symbol in the cubin */
    uint32_t grid[3], block[3];
    uint32_t smem_bytes; /* dynamic shared memory */
    /* Before this launch, set workspace bytes [zero_offset, zero_offset + zero_bytes) to 0
     * (split-K semaphores and accumulators); zero_bytes 0: nothing to clear. */
    uint64_t zero_offset, zero_bytes;
    int n_args;
    cache_arg *args;
} cache_kernel;

/* A const input the kernels expect pre-packed in a layout other than the graph's. */
typedef struct cache_layout {
    int32_t input; /* canonical input index */
    char *layout;  /* family-defined layout name, e.g. "k_major_tile32x8" */
} cache_layout;

typedef enum cache_timing { CACHE_TIMING_COLD = 0, CACHE_TIMING_HOT } cache_timing;

/* The bound shape of one graph input or output, in canonical order: what the record was tuned
 * and verified for. A lookup checks the caller's bound graph against it slot by slot. */
typedef struct cache_slot {
    ops_dtype dtype;
    int rank;
    int64_t dims[OPS_MAX_RANK];
} cache_slot;

typedef struct cache_record {
    cache_key key; /* fingerprint, signature, problem, shapes, precision, tolerance */
    char *graph_name;
    int n_inputs, n_outputs; /* the graph's inputs and outputs */
    cache_slot *slots;       /* n_inputs + n_outputs: inputs, then outputs, in canonical order */
    char *source;            /* CUDA C, NUL-terminated; source_len excludes the NUL */
    size_t source_len;
    uint8_t *cubin;
    size_t cubin_len;
    int n_kernels;
    cache_kernel *kernels;
    uint64_t workspace_bytes;
    int n_layouts;
    cache_layout *layouts;
    char *family;   /* "gemm", "row", ... */
    char *schedule; /* the family's schedule, as its emitter prints it */
    /* measured time in ns: median and 10th/90th percentiles over `reps` repetitions */
    double time_ns, time_p10_ns, time_p90_ns;
    cache_timing timing;
    uint32_t reps;
    /* verification against the fp64 reference */
    bool verified;
    double err_norm, err_max, tolerance;
    /* baselines measured with the candidate, 0 when absent */
    double cublaslt_ns, naive_ns;
    char *ktune_version;   /* NULL encodes the running build's KTUNE_VERSION */
    int32_t nvrtc_version; /* nvrtcVersion() as major * 1000 + minor * 10 */
    int64_t created;       /* unix seconds */
    /* Provenance of a record that came from a bundle (docs/formats.md, part 3): "ed25519:ID"
     * (signed by that trusted key; ID: the first 8 bytes of its public key in hex), "untrusted
     * ed25519:ID" or "unsigned" (accepted with --trust-unsigned); NULL for a record tuned here.
     * Optional in the stored form: written only when set. */
    char *signer;
} cache_record;

/* Zeroes *r (an empty, freeable record). */
void cache_record_init(cache_record *r);
/* Frees everything *r owns and zeroes it. NULL is a no-op. */
void cache_record_free(cache_record *r);

/* Checks that every output slot of r is written by some launch: each index in [0, n_out) is an
 * output argument of some kernel, and no argument names one outside it (n_out >= 1: the record's
 * own n_outputs, or its graph's). An output argument counts as written: the record does not say
 * which pointers a kernel writes. r's kernels and arguments must be well-formed (counts in
 * range, args non-NULL). Returns 0 or -EINVAL with the first unwritten slot in err. */
int cache_record_check_outputs(const cache_record *r, int n_out, kt_err *err);

/* Encodes r into its stored form: the msgpack map, then CACHE_CHECKSUM_BYTES of SHA-256 over the
 * map. The encoding is canonical (fixed key order, shapes sorted, smallest integer forms), so
 * encode(decode(v)) == v for every v this function produced. *out is malloc'd; caller frees.
 * Returns 0, -EINVAL (a field out of range: detail in err) or -ENOMEM. */
int cache_record_encode(const cache_record *r, uint8_t **out, size_t *len, kt_err *err);

/* Verifies the checksum of a stored value and decodes it into *out (which the caller frees with
 * cache_record_free, also after a failure). buf is only read during the call. Returns 0,
 * -EBADMSG (checksum mismatch, malformed or unsupported record: detail in err) or -ENOMEM. */
int cache_record_decode(const void *buf, size_t len, cache_record *out, kt_err *err);

/* Sets r's key problem digest and slots (replacing any) from the bound graph g, in g's
 * canonical order. Returns 0, -EINVAL (g not fully bound, with detail) or -ENOMEM. */
int cache_record_set_problem(cache_record *r, const ops_graph *g, kt_err *err);
/* Whether the bound graph g poses r's problem: the same digest, and slot by slot the same dtype
 * and shape in g's canonical order. -EINVAL with the first difference ("input 1: [64, 1024] f32,
 * the record was tuned for [1024, 64] f32") when not; -ENOMEM. */
int cache_record_check_problem(const cache_record *r, const ops_graph *g, kt_err *err);

/* The physical floor of r (cache/floor.c): the least median time its bound problem can take on
 * its GPU, from the device table (ops_device_find; a GPU not in the table gets the table's
 * fastest entry): the compulsory DRAM traffic, each input read once and each output written once
 * (the bytes of r's slots) less what twice the L2 can hold, at the memory bandwidth, and, when
 * the bound graph g is at hand (may be NULL), its FLOPs (ops_graph_cost) at the fastest
 * arithmetic rate, the larger of both, times CACHE_FLOOR_FACTOR. docs/formats.md (part 3)
 * says why each term is a lower bound. */
#define CACHE_FLOOR_FACTOR 0.5
double cache_record_floor_ns(const cache_record *r, const ops_graph *g);
/* 0, or -ERANGE when r's median time is below its floor (with both times and the GPU in err):
 * the record is implausible and refused wherever it would enter a cache. */
int cache_record_check_floor(const cache_record *r, const ops_graph *g, kt_err *err);

/* True when the trailing checksum of a stored value matches its body. */
bool cache_value_check(const void *buf, size_t len);

/* ---- trial entries (the `trials` database) ---- */

typedef enum cache_trial_status {
    CACHE_TRIAL_OK = 0,
    CACHE_TRIAL_WRONG,         /* ran, failed verification */
    CACHE_TRIAL_FAULT,         /* illegal address or another sticky CUDA error */
    CACHE_TRIAL_HANG,          /* killed on its deadline */
    CACHE_TRIAL_COMPILE_ERROR, /* NVRTC refused it */
    CACHE_TRIAL_STATUS_COUNT
} cache_trial_status;

/* "ok", "wrong", "fault", "hang", "compile_error"; NULL for an unknown value. */
const char *cache_trial_status_name(cache_trial_status s);
int cache_trial_status_from_name(const char *name, cache_trial_status *out); /* 0 or -EINVAL */

/* One measured (or failed) candidate. Self-contained: no pointers. */
typedef struct cache_trial {
    char cand[CACHE_CAND_MAX]; /* candidate id, unique within a cache key */
    cache_trial_status status;
    double time_ns;   /* median time, 0 unless status is ok or wrong */
    double error;     /* normwise error against the reference, 0 when not verified */
    char detail[256]; /* one line: compiler message, fault name, ... ("" when none) */
    int64_t ts;       /* unix seconds */
    int64_t ts_ms;    /* the same instant in unix milliseconds; 0 in entries written before it */
} cache_trial;

/* Stored form of a trial: msgpack map + SHA-256, as for records. *out is malloc'd. */
int cache_trial_encode(const cache_trial *t, uint8_t **out, size_t *len, kt_err *err);
/* Returns 0, -EBADMSG or -ENOMEM. */
int cache_trial_decode(const void *buf, size_t len, cache_trial *out, kt_err *err);
