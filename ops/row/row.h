/* The row family (ops/row/, one file per part): groups with one or more reductions (sum, mean, max,
 * min) that all reduce the same axes of the same tensor shape X, with an elementwise prologue (the
 * nodes feeding the reductions) and epilogue (nodes combining reduced values, broadcast back over
 * the row, with row elements). Canonical softmax, log_softmax, logsumexp, layernorm, rmsnorm,
 * sum/mean/max over an axis and e.g. residual add + rmsnorm all have this shape.
 *
 * Rows: X = [outer dims][reduced dims (contiguous range)][inner dims]; a row is one (outer,
 * inner) pair, L elements long, element j at stride `inner` (contiguous rows when inner = 1,
 * strided rows for a middle axis). Row index = outer * inner + inner index, which is also the
 * flat index of every per-row tensor (keepdim or not).
 *
 * The generic engine classifies every tensor of the group as FULL (varies along the row), ROW
 * (one value per row) or FLAT (a per-row tensor without the reduced axes, indexed by row).
 * A reduction's level is one more than the highest level of the ROW values its input needs;
 * the kernel runs one pass over the row per level, each accumulating that level's reductions
 * (thread partials, then a warp shuffle tree and, above one warp, a shared-memory combine that
 * every thread of the row reads in the same order, so all threads hold bitwise-equal results),
 * computes the ROW nodes that became available, and finally a pass writes the FULL outputs.
 * one_pass recognises two patterns and computes the pair in a single pass: max(A) then
 * sum(exp(A - max)) (online softmax: running max, rescaled running sum) and mean(A) then
 * mean(square(A - mean)) (Welford mean and M2, merged with Chan's formula).
 *
 * Schedules (knobs below): threads per row (tpr), row groups per block (G) and rows each group
 * handles in sequence:
 *   warp_per_row    tpr 32, G = threads / 32, `rows` rows per warp in sequence
 *   block_per_row   tpr = threads, G 1, `rows` rows per block in sequence
 *   rows_per_block  G = rows groups of threads / rows threads (at least 2 warps), a row each
 *   split_row       tpr = threads; each row is cut into S chunks, one block per chunk; one
 *                   kernel per level writes fp32 partials to the workspace, every later kernel
 *                   combines them (each block the same way), the last writes the outputs
 *   thread_per_row  strided rows only: tpr 1, adjacent threads own adjacent rows (coalesced)
 *   split_cluster   split_row in one kernel (sm_90): a row's S <= 8 chunks are a thread-block
 *                   cluster; each level's partials meet in the blocks' shared memory, read by
 *                   every block of the cluster in chunk order (distributed shared memory), so
 *                   no workspace and no kernel per level
 *   lane_per_row    strided rows only: G = 32 adjacent rows, lane g of every warp on row g
 *                   (coalesced), so tpr = threads / 32 threads, one per warp, split each row;
 *                   their partials meet in shared memory (for rows too few for a thread each
 *                   to keep the memory system busy, e.g. a sum over the middle axis)
 *   split_lane      strided rows only: lane_per_row's layout with the rows cut into S chunks as
 *                   split_row cuts them, a block per (32 adjacent rows, chunk), partials through
 *                   the workspace: for row groups too few to fill the SMs (a reduction over the
 *                   first axis into a few hundred columns)
 * Row storage: inputs of shape X read in two or more passes are kept in registers (fully
 * unrolled, compile-time sized), in shared memory (each thread reads back only what it wrote,
 * so no barrier is needed), or re-read from global memory. Rows past the end are clamped to
 * the last row and their stores skipped, so barriers stay uniform.
 *
 * Matmul prologue: X may itself be a small matmul of two group inputs, A [M, K] x B [K, N] with
 * X = [M, N] reduced along N (a linear layer followed by a softmax, as in KernelBench's
 * Matmul+GELU+Softmax): each element is then its own K-long dot product (FFMA, four partial
 * sums in a fixed order), kept on chip like an input when two passes read it (else recomputed
 * per pass), so one launch replaces a GEMM kernel and a row kernel. Only for K <= MM_MAX_K,
 * where the dot products cost less than the launch saved.
 */
/* Internal to ops/row/: the types and functions its files share. Files:
 *   analyse.c   the group analysed: tensor slots, their classes (FULL, ROW, FLAT), reduction
 *               levels, the one-pass pairs (online softmax, Welford), the matmul prologue; what
 *               each pass reads
 *   plan.c      knobs; a schedule resolved against the group and pruned (row_plan_of): threads per
 *               row, rows per block, splits, storage, registers, shared memory
 *   body.c      the per-element code: kernel parameters, row offsets, loads, node expressions, the
 *               FULL value of a slot
 *   prologue.c  the matmul prologue: each X element's K-long dot product (FFMA), and its call
 *   reduce.c    the reductions: accumulators (sum, max, min, online max-sum, Welford), their update
 *               and merge, the warp shuffle tree and the shared-memory combine across a row's
 *               threads
 *   pass.c      a pass over the row: row setup, the element loop, the row cache (registers, shared
 *               memory), one pass per level and the output pass
 *   epilogue.c  after a reduction: the row values, the ROW and FLAT nodes that become known, the
 *               per-row outputs
 *   kernel.c    the one-kernel strategies (warp_per_row, block_per_row, rows_per_block,
 *               thread_per_row, lane_per_row): signature, row coordinates, the fused kernel
 *   split.c     split_row (a kernel per level, partials through the workspace) and split_cluster
 *               (one kernel, partials through distributed shared memory)
 *   emit.c      the family entry points: matches, prune, emit (the candidate assembled), the family
 *   cost.c      the cost model
 * The CUDA they write includes the device library (ops/device/ktune/) for its instruction
 * wrappers (the cluster's distributed shared memory, the warp sum); what is generated here is
 * the group-specific code. One emission style, kt_buf_line: one call per line of CUDA; kt_buf_printf
 * only writes the pieces of a line assembled from parts, which a kt_buf_line or "\n" then ends. */
#pragma once

#include "ops/family.h"

#include <stdint.h>

enum { K_STRATEGY, K_THREADS, K_ROWS, K_PASS, K_STORAGE, K_VEC, N_KNOBS };
enum { ST_WARP, ST_BLOCK, ST_ROWS, ST_SPLIT, ST_THREAD, ST_LANE, ST_CLUSTER, ST_SPLIT_LANE };
enum { PASS_MULTI, PASS_ONE };
enum { STO_REGS, STO_SHARED, STO_REREAD };

#define RW_MAX_SLOTS   (OPS_GROUP_MAX_IO + OPS_GROUP_MAX_NODES)
#define RW_MAX_GRID    2147483647LL
#define RW_MAX_SPLITS  1024
#define RW_MAX_CLUSTER 8   /* split_cluster: the portable cluster size */
#define RW_MAX_CACHED  64  /* floats per thread kept in registers */
#define MM_MAX_K       512 /* the longest dot product of a matmul prologue */

typedef enum rw_cls { CL_NONE, CL_FULL, CL_ROW, CL_FLAT } rw_cls;

/* How a reduction accumulates. A pair head carries its tail's state too. */
typedef enum rw_kind {
    RK_SUM, /* sum and mean */
    RK_MAX,
    RK_MIN,
    RK_ONLINE,  /* pair head: max(A) with tail sum(exp(A - max)) */
    RK_WELFORD, /* pair head: mean(A) with tail mean(square(A - mean)) */
    RK_TAIL,    /* computed by its head */
} rw_kind;

/* The group, analysed. Slots: group inputs [0, n_in), then the group's nodes in topological
 * order. */
typedef struct rw_info {
    const ops_group *grp;
    const ops_graph *g;
    int n_slots;
    int32_t tensor[RW_MAX_SLOTS];
    int node[RW_MAX_SLOTS]; /* graph node index, -1 for an input */
    rw_cls cls[RW_MAX_SLOTS];
    int level[RW_MAX_SLOTS];     /* ROW/FLAT: known after this level; FULL: needs levels <= */
    rw_kind kind[RW_MAX_SLOTS];  /* reductions */
    int pair[RW_MAX_SLOTS];      /* head <-> tail slot, or -1 */
    int src[RW_MAX_SLOTS];       /* reductions: the slot reduced (pairs: A) */
    bool flat_use[RW_MAX_SLOTS]; /* inputs read by FLAT nodes (at offset row) */
    bool mm[RW_MAX_SLOTS];       /* FULL slots computed by a matmul prologue */
    int64_t stride[RW_MAX_SLOTS][OPS_MAX_RANK]; /* X-aligned element strides, 0 = broadcast */
    ops_shape X;
    int rank, a0, a1; /* reduced axes [a0, a1] */
    int64_t outer, L, inner, n_rows;
    int n_levels;
    bool has_pair, full_out, wide;
    int max_bytes;
} rw_info;

/* A schedule, resolved against the group. */
typedef struct rw_plan {
    int strategy, threads, rows, pass, storage, vec;
    int tpr, G, rseq;
    int64_t rows_per_block, grid;
    int S;         /* splits per row (split_row, split_cluster, split_lane), else 1 */
    int64_t chunk; /* elements per split (L when not split) */
    int nk;        /* loop trips per thread over a row (chunk) */
    int n_cached;
    bool cached[RW_MAX_SLOTS];
    int64_t smem;   /* dynamic shared memory */
    int red_floats; /* per-pass accumulator components (max over passes) */
    int regs;
} rw_plan;

typedef struct rw_gen {
    const rw_info *in;
    const rw_plan *p;
    const char *ix;
    bool use_o, use_in;
    unsigned vec_types;
    bool split;
    bool use_warp_sum; /* a kernel calls kt_warp_sum (ktune/reduce.cuh) */
} rw_gen;

typedef struct rw_body {
    rw_gen *s;
    kt_buf *pre;  /* before the lane loop: vector loads */
    kt_buf *lane; /* per element */
    bool done[RW_MAX_SLOTS];
} rw_body;

typedef struct rw_acc {
    int slot; /* the reduction (pair head) */
    rw_kind kind;
    int tail; /* pair tail slot or -1 */
} rw_acc;

/* fp32 infinities as the emitted code writes them */
#define NEG_INF "__int_as_float((int)0xff800000)"
#define POS_INF "__int_as_float(0x7f800000)"

/* ---- knobs (plan.c) ---- */
extern const char *const row_strategy_labels[];
extern const ops_knob row_knobs[N_KNOBS];

/* ---- analyse.c ---- */
int row_slot_of(const rw_info *in, int32_t t);
const ops_node *row_slot_node(const rw_info *in, int s);
bool row_is_reduce(ops_op op);
bool row_analyse(const ops_group *grp, bool use_pairs, rw_info *in);
int row_acc_source(const rw_info *in, int s);
bool row_cacheable(const rw_info *in, int u);
void row_pass_reads(const rw_info *in, int p, bool *reads);
int row_kind_components(rw_kind k);
int row_level_components(const rw_info *in, int p);

/* ---- plan.c ---- */
bool row_lanes(const rw_plan *p);      /* lane_per_row or split_lane: lane g on row g of 32 */
bool row_split_ws(const rw_plan *p);   /* split_row or split_lane: a kernel per level */
int64_t row_smem_stride(const rw_plan *p, int64_t L);
int row_partials(const rw_plan *p);
const char *row_plan_of(const rw_info *in, const ops_schedule *s, const ops_device *dev,
                        bool force_split, rw_plan *p);

/* ---- body.c ---- */
bool row_param_of(const rw_info *in, int s, char *out, size_t len);
const char *row_vec_type(rw_gen *s, ops_dtype dt, char *buf, size_t len);
void row_line_start(kt_buf *b);
void row_emit_part(rw_gen *s, kt_buf *b, int lo, int hi, const int64_t *st, const char *var,
                   bool *used);
void row_emit_offset(rw_gen *s, kt_buf *b, int u);
void row_emit_to_float_of(kt_buf *b, ops_dtype dt, const char *fmt, ...) KT_PRINTF(3, 4);
void row_emit_node_expr(rw_gen *s, kt_buf *b, int u);
void row_body_value(rw_body *bd, int u);

/* ---- prologue.c ---- */
void row_emit_mm_call(const rw_info *in, kt_buf *b, int u, const char *col);
void row_emit_mm_functions(const rw_info *in, kt_buf *b);

/* ---- reduce.c ---- */
int row_level_accs(const rw_info *in, int level, rw_acc *accs);
void row_acc_decl(kt_buf *b, const rw_acc *a);
void row_acc_update(kt_buf *b, const rw_acc *a, const char *v);
void row_acc_comp(char *out, size_t len, const rw_acc *a, int i, const char *prefix);
void row_acc_merge(kt_buf *b, const rw_acc *a, const char *other);
void row_emit_group_reduce(rw_gen *s, kt_buf *b, const rw_acc *accs, int n_acc);

/* ---- pass.c ---- */
void row_emit_setup(rw_gen *s, kt_buf *b);
void row_emit_cache_fill(rw_gen *s, kt_buf *b);
void row_emit_pass(rw_gen *s, kt_buf *b, int level, const rw_acc *accs, int n_acc);

/* ---- epilogue.c ---- */
void row_emit_finalize(rw_gen *s, kt_buf *b, const rw_acc *accs, int n_acc);
void row_emit_nodes(rw_gen *s, kt_buf *b, int level);
void row_emit_outputs(rw_gen *s, kt_buf *b, const char *cond);

/* ---- kernel.c ---- */
void row_emit_signature(rw_gen *s, kt_buf *b, const char *entry, bool workspace,
                        ops_kernel_launch *k);
void row_emit_coords(rw_gen *s, kt_buf *b);
void row_emit_fused_kernel(rw_gen *s, kt_buf *b, const char *entry, ops_kernel_launch *k);

/* ---- split.c ---- */
int64_t row_ws_level_offset(const rw_info *in, const rw_plan *p, int level);
void row_emit_split_kernel(rw_gen *s, kt_buf *b, const char *entry, int level,
                           ops_kernel_launch *k);
void row_emit_cluster_kernel(rw_gen *s, kt_buf *b, const char *entry, ops_kernel_launch *k);

/* ---- cost.c ---- */
void row_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                  ops_estimate *e);
