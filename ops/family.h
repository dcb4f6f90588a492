/* Kernel families: a group of nodes of a canonical, fully bound graph; the knobs each family
 * declares; and the emitter that turns (group, schedule) into readable CUDA C plus the launch
 * description the GPU worker and the deploy-time runtime use.
 *
 * Emitted kernels include nothing from the CUDA toolkit: f16/bf16 are carried as 16-bit integers
 * (kt_f16, kt_bf16) converted through inline PTX by the prelude of ops_emit_prelude, so NVRTC
 * needs no include path and compiles fast. Instruction wrappers come from the device library
 * (#include "ktune/<family>.cuh", ops/devlib.h), which NVRTC gets in memory and records get
 * inlined. Shapes are compile-time constants: every kernel is
 * specialised to the bound shapes of its group. */
#pragma once

#include "ops.h"
#include "tmap.h"

#define OPS_GROUP_MAX_NODES 64 /* node sets are uint64_t masks over the graph's nodes */
#define OPS_GROUP_MAX_IO    16
#define OPS_MAX_KNOBS       16
#define OPS_KNOB_MAX_VALUES 16
#define OPS_MAX_KERNELS     4 /* kernels in one candidate (e.g. split-K partials + reduction) */
#define OPS_MAX_ARGS        (2 * OPS_GROUP_MAX_IO + 2)

typedef enum ops_family_id {
    OPS_FAM_POINTWISE = 0,
    OPS_FAM_ROW,
    OPS_FAM_GEMM,
    OPS_FAM_CONV,
    OPS_FAM_ATTENTION,
    OPS_FAM_LIBRARY,
    OPS_FAM_REFERENCE,
    OPS_FAM_GEMV, /* after the others: family ids are stored in trial logs and records */
    OPS_FAM_SCAN,
    OPS_FAM_COUNT
} ops_family_id;

/* A kernel group: some nodes of g (which must be canonical, validated and fully bound). */
typedef struct ops_group {
    const ops_graph *g;
    ops_precision precision; /* the job's policy (ops_group_init sets exact; search overrides) */
    uint64_t mask;           /* bit i set: node i is in the group */
    int n_nodes;
    int32_t nodes[OPS_GROUP_MAX_NODES]; /* topological order */
    int n_in;
    int32_t in[OPS_GROUP_MAX_IO]; /* tensors read but not produced here, in first-use order */
    int n_out;
    int32_t out[OPS_GROUP_MAX_IO]; /* tensors produced here that a graph output is, or that a
                                      node outside the group reads; in node order */
    /* Appended to every kernel entry name the emitter writes, in the source and in
     * ops_emitted.kernels[].entry alike: search/tune_record.c emits the k-th group of a partition
     * linked into one module with "_g<k>" so that its kernels cannot collide with another
     * group's; "" (ops_group_init) otherwise. Letters, digits and '_' only. */
    char entry_suffix[8];
} ops_group;

/* Fills grp for the nodes in mask. -EINVAL (detail in d) when g is not validated and bound,
 * has more than 64 nodes, or the group has more than OPS_GROUP_MAX_IO inputs or outputs. */
int ops_group_init(ops_group *grp, const ops_graph *g, uint64_t mask, ops_diag *d);

typedef struct ops_knob {
    const char *name;
    int n_values;
    int values[OPS_KNOB_MAX_VALUES];
    const char *const *labels; /* labels[i] names values[i] for enumerated knobs, or NULL */
} ops_knob;

/* One point of a family's space: the chosen value (not index) of every knob, in knob order. */
typedef struct ops_schedule {
    ops_family_id family;
    int v[OPS_MAX_KNOBS];
} ops_schedule;

/* What the pruner knows about the target GPU. */
typedef struct ops_device {
    char name[64];
    char arch[16]; /* NVRTC target, e.g. "sm_90a" */
    int sm_major, sm_minor;
    int sm_count;
    int warp_size;
    int max_threads_per_block;
    int max_threads_per_sm;
    int max_blocks_per_sm;
    int regs_per_sm;
    int max_regs_per_thread;
    int smem_per_block;       /* without opt-in */
    int smem_per_block_optin; /* with cudaFuncAttributeMaxDynamicSharedMemorySize */
    int smem_per_sm;
    int64_t l2_bytes;
    double dram_bytes_per_s;
    double fp32_flops_per_s; /* FFMA */
    double tf32_flops_per_s; /* tensor cores */
    double f16_flops_per_s;  /* f16/bf16 tensor cores */
} ops_device;

/* The lent H100 (docs/search.md) (sm_90a, 132 SMs, 227 KiB opt-in shared memory per block). */
void ops_device_h100(ops_device *dev);
/* The lent H200: the H100's compute with HBM3e (4.19 TB/s measured copy bandwidth). */
void ops_device_h200(ops_device *dev);
/* Bytes a SM keeps in flight from DRAM to draw its share of the bandwidth (Little's law), for
 * the memory-bound families' cost models: 32 KiB measured on the H100, and enough on the H200 too
 * (a pointwise chain with one 16-byte load a thread in 2048 resident threads ran at 1.05x its
 * best schedule there, 4.1 TB/s: bench/results/h200-2026-11-29-i22-sweep/README.md). */
#define OPS_INFLIGHT_BYTES_PER_SM 32768.0
/* The device table: the entry whose name is exactly name (cuDeviceGetName's), 0; for a name not
 * in it (or NULL), the table's fastest entry by memory bandwidth and -ENOENT. */
int ops_device_find(const char *name, ops_device *dev);

/* The roofline floor of a bound graph on dev: its compulsory traffic (ops_graph_cost's bytes:
 * every input read once, every output written once) at the device's measured copy bandwidth,
 * or its arithmetic at the peak of the fastest unit the precision lets it use (f16/bf16 tensor
 * cores for a graph with 16-bit inputs or under "reduced", tf32 tensor cores under "tf32",
 * else fp32 FFMA), whichever takes longer. A kernel timed hot (its data partly in L2) may beat
 * it. What `ktune tune`, `status`, `lookup --json` and `report` show as the winner's fraction
 * of its floor (docs/search.md, "Roofline"). */
typedef struct ops_roofline {
    double bytes, flops;
    double bytes_per_s, flops_per_s; /* the rates used */
    const char *unit;                /* the unit whose peak flops_per_s is */
    double mem_ns, math_ns;
    double floor_ns; /* the larger of both */
    bool memory_bound;
} ops_roofline;
int ops_graph_roofline(const ops_graph *bound, ops_precision p, const ops_device *dev,
                       ops_roofline *out, ops_diag *d);

typedef enum ops_arg_kind {
    OPS_ARG_TENSOR,     /* a graph tensor's device pointer */
    OPS_ARG_WORKSPACE,  /* workspace base + offset */
    OPS_ARG_TENSOR_MAP, /* a CUtensorMap over a graph tensor (tensor >= 0) or the workspace
                           (tensor < 0: base + offset), encoded at launch, passed by value */
} ops_arg_kind;

/* ops_tensor_map (ops/tmap.h): what a TMA copy needs besides the base address. */

typedef struct ops_arg {
    ops_arg_kind kind;
    int32_t tensor;      /* OPS_ARG_TENSOR / _TENSOR_MAP: index into g->tensors, or -1 */
    int64_t offset;      /* OPS_ARG_WORKSPACE / _TENSOR_MAP on the workspace: byte offset */
    ops_tensor_map tmap; /* OPS_ARG_TENSOR_MAP only */
} ops_arg;

typedef struct ops_kernel_launch {
    char entry[64];
    uint32_t grid[3], block[3];
    uint32_t smem_bytes; /* dynamic shared memory; above device smem_per_block needs opt-in */
    int n_args;
    ops_arg args[OPS_MAX_ARGS]; /* kernel parameters in order: pointers, or 128-byte
                                   tensor maps (OPS_ARG_TENSOR_MAP) by value */
    bool zero_workspace;        /* memset the workspace to 0 before this kernel */
    int64_t zero_prefix;        /* with zero_workspace: only the workspace's first zero_prefix
                                   bytes (0: all of it), e.g. flags before big scratch */
} ops_kernel_launch;

typedef struct ops_emitted {
    char *source; /* malloc'd CUDA C holding every kernel of the candidate */
    /* Where source's pieces lie (ops_emit_shared_prelude records them), so that search/link.c
     * links the groups of a partition into one module without reading the code: [0, prelude_at)
     * the file-scope header (comment, #include lines), [prelude_at, code_at) the shared prelude
     * (the same text in every candidate), [code_at, end) the group's own code, which defines
     * exactly the kernels below. code_at 0: the emitter marked no pieces (a cuBLASLt call). */
    size_t prelude_at, code_at;
    int n_kernels;
    ops_kernel_launch kernels[OPS_MAX_KERNELS]; /* launched in order on one stream */
    int64_t workspace_bytes;
} ops_emitted;
void ops_emitted_free(ops_emitted *e);

/* The cost model's view of one candidate (see docs/search.md). */
typedef struct ops_estimate {
    double seconds;   /* predicted kernel time */
    double flops;     /* arithmetic executed, including recomputation */
    double bytes;     /* DRAM traffic, including re-reads and workspace */
    double occupancy; /* resident warps per SM / max, 0..1 */
} ops_estimate;

typedef struct ops_family {
    ops_family_id id;
    const char *name; /* "pointwise", "row", "gemm", "conv", "attention", "library", "reference" */
    int n_knobs;
    const ops_knob *knobs;
    /* True when some schedule of this family can implement the group. */
    bool (*matches)(const ops_group *grp);
    /* NULL when the schedule is legal for grp on dev; otherwise the reason class it is pruned
     * for: "threads", "smem", "regs", "align", "divisibility", "shape", "precision" (the job's
     * precision policy forbids the math path) or "redundant". */
    const char *(*prune)(const ops_group *grp, const ops_schedule *s, const ops_device *dev);
    /* Optional, to skip whole subtrees of a large space: the reason prune() rejects every
     * schedule that shares s's first prefix_knobs knob values (whatever the others hold), or
     * NULL when some may be legal. NULL is always a correct answer; a reason where one
     * completion is legal loses that schedule. */
    int prefix_knobs;
    const char *(*prune_prefix)(const ops_group *grp, const ops_schedule *s, const ops_device *dev);
    /* Emits the candidate. 0, or -EINVAL/-ENOMEM with detail in d. */
    int (*emit)(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                ops_emitted *out, ops_diag *d);
    void (*estimate)(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                     ops_estimate *e);
} ops_family;

const ops_family *ops_family_get(ops_family_id id);
/* "gemm math=f16 bm=128 ..." — one line, used in headers, logs and records. */
void ops_schedule_format(const ops_schedule *s, char *buf, size_t len);

/* ---- helpers shared by the emitters (ops/emit_common.c) ---- */

/* The header comment: family, schedule, graph, nodes of the group, bound shapes. */
void ops_emit_header(kt_buf *b, const ops_group *grp, const ops_schedule *s);
/* Appends the shared prelude (ops_emit_prelude) to the candidate's source b and records in out
 * where it lies (prelude_at, code_at): what b holds before it is the file-scope header (the
 * comment of ops_emit_header, #include lines), what the emitter appends after it the group's own
 * code; b's text becomes out->source. */
void ops_emit_shared_prelude(kt_buf *b, ops_emitted *out);

/* The dynamic shared memory, declared the same way by every family that takes it, each using a
 * typed view of it: kernels of several families are linked into one module (search/link.c), and
 * block-scope declarations in extern "C" kernels have C linkage, so every declaration of the
 * name, in whichever group's namespace, is one entity and must agree in type and alignment. */
#define OPS_DYNAMIC_SMEM "extern __shared__ __align__(128) unsigned char kt_smem[];"
/* Type definitions, f16/bf16 conversions and the math helpers (kt_gelu, kt_gelu_tanh, ...)
 * every elementwise expression may use. */
void ops_emit_prelude(kt_buf *b);
/* The register-tile FFMA product of the FFMA math paths (gemm and conv): for i < ni, j < nj,
 * acc[i][j] = fmaf(x, y, acc[i][j]), x and y expressions in the loop variables named i and j;
 * six lines of CUDA at b's indent. */
void ops_emit_fma_tile(kt_buf *b, const char *i, const char *ni, const char *j, const char *nj,
                       const char *x, const char *y);
/* "float", "kt_f16", "kt_bf16" (or "double" for OPS_DT_F64). */
const char *ops_emit_ctype(ops_dtype dt);
/* Appends an expression converting the stored value `expr` of dtype dt to float, or a float
 * expression to dtype dt. */
void ops_emit_to_float(kt_buf *b, ops_dtype dt, const char *expr);
/* A float literal CUDA C parses back to the same float (infinities and NaN by bit pattern). */
void ops_emit_float_literal(kt_buf *b, double v);
void ops_emit_from_float(kt_buf *b, ops_dtype dt, const char *expr);
/* Appends the float expression computing elementwise node n from its operand expressions
 * (operands[k] for tensor operands; scalar operands are taken from n). -EINVAL when n is not
 * elementwise (unary or binary). */
int ops_emit_elementwise(kt_buf *b, const ops_node *n, const char *const *operands);
/* Appends the flat element offset into a tensor of shape `in` that NumPy-broadcasts against
 * `out`, given the names of the variables holding the out index per axis (out->rank names). */
void ops_emit_bcast_offset(kt_buf *b, const ops_shape *in, const ops_shape *out,
                           const char *const *out_idx);
/* True for unary and binary ops (the ones ops_emit_elementwise handles). */
bool ops_is_elementwise(ops_op op);
/* A C identifier made from a tensor name ("y.max" -> "y_max"), at most 40 characters. Every
 * name that becomes (part of) an identifier goes through here. */
void ops_emit_identifier(const char *name, char *out, size_t len);
/* Names are untrusted (a client's graph, tensor and symbol names) and must never reach emitted
 * source as they are: a name holding star-slash ends its comment and the rest becomes code.
 * Every string of the graph written into a comment goes through here. Writes s (NULL as "") to
 * out as printable ASCII without '*', '/', a backslash or '?', so it can neither close nor open
 * a comment, splice lines or form a trigraph; each other byte (and '%') becomes "%XX" (hex), so
 * distinct names stay distinct. Text longer than len - 1 ends in "...". Returns out. len >= 4.
 * See docs/formats.md, "Names". */
#define OPS_EMIT_COMMENT_MAX 160
const char *ops_emit_comment_text(const char *s, char *out, size_t len);
/* Vector types of the emitted kernels: "<ctype>_x<vec>", a struct of vec elements aligned to its
 * size. A set of them is a bitmask with bit OPS_VEC_BIT(dt, vec) per type used. */
#define OPS_VEC_BIT(dt, vec) (1u << ((dt)*4 + ops_ilog2(vec)))
int ops_ilog2(int v); /* the smallest l with 2^l >= v */
void ops_emit_vec_type_name(ops_dtype dt, int vec, char *out, size_t len);
/* Appends the definitions of the vector types in the set (f32, f16, bf16; 2, 4 or 8 wide). */
void ops_emit_vec_types(kt_buf *b, unsigned types);

/* Pruning tallies by reason class (the strings family prune() functions return). */
typedef struct ops_prune_counts {
    int64_t kept;
    int n_reasons;
    struct {
        const char *reason;
        int64_t count;
    } reasons[16];
} ops_prune_counts;

/* Walks the product of f's knob values in a fixed order (last knob fastest), calls prune() on
 * each schedule and cb() on each legal one; stops early when cb returns non-zero (and returns
 * that value). With prune_prefix, a rejected prefix skips its subtree (counted under that
 * reason). counts (optional) receives kept/pruned tallies. Requires f->matches(grp). */
int ops_family_enumerate(const ops_family *f, const ops_group *grp, const ops_device *dev,
                         int (*cb)(const ops_schedule *s, void *ctx), void *ctx,
                         ops_prune_counts *counts);

/* The group as a graph of its own: its inputs become graph inputs (same names, dtypes, bound
 * shapes, const flags), its outputs graph outputs, its nodes copied in topological order.
 * Validated on return. Used to verify a group on its own (fresh inputs, its own reference). */
int ops_group_subgraph(const ops_group *grp, ops_graph **out, ops_diag *d);
