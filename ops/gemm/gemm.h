/* The gemm family (ops/gemm/, one file per part): one matmul (batched with broadcast batch dims,
 * operand transposes) with an optional cast prologue on its operands and a chain of elementwise
 * epilogue nodes (bias, activations, residual, scale, cast), as one kernel; with parallel split-K,
 * a partial-products kernel writing fp32 slices to the workspace plus a reduction kernel that
 * applies the epilogue; with serial split-K, one kernel whose slices of a tile take turns (slice 0,
 * 1, ...) on a per-tile semaphore adding into an fp32 tile in the workspace, the last applying the
 * epilogue; with cluster split-K (sm_90), one kernel whose slices of a tile form a thread-block
 * cluster and sum their partial tiles through distributed shared memory, each slice reducing and
 * storing a share of the tile (emit_cluster_epilogue).
 *
 * Every math path shares one kernel skeleton:
 *   - grid.x walks the TILES_M x TILES_N output tiles in a grouped order (RASTER tile-rows are
 *     visited column by column, so the blocks of a wave share A rows and B columns in L2);
 *     grid.z walks batch x split-K slices;
 *   - a STAGES-deep cp.async pipeline copies the A and B tiles into shared memory in the
 *     operands' global orientation, zero-filling past the matrix edges (16/8/4-byte copies as the
 *     leading dimension's alignment allows; through registers when a prologue cast or a precision
 *     change converts the data, or when rows are not 4-byte aligned);
 *   - WM x WN warps each own a WTM x WTN sub-tile: mma.sync m16n8k16 (f16, bf16) or m16n8k8
 *     (tf32) with fragments loaded by ldmatrix (.trans where the stored orientation needs it),
 *     or FFMA with a TM x TN thread tile; "tf32x3" splits each fp32 operand into a tf32 pair
 *     (big + small) and issues three tf32 mmas per product, which keeps fp32-level accuracy
 *     (see emit_mma_stage) and is therefore searched under the exact policy too;
 *   - the epilogue computes the fused chain per element in fp32 and stores with edge masks.
 * Shared-memory rows are padded (16 bytes; 32 for tf32 operands read element-wise) or
 * XOR-swizzled in 16-byte chunks against bank conflicts.
 *
 * On sm_90a two Hopper kernels replace the skeleton's main loop: tf32x3 on wgmma for fp32 data
 * (wgmma.c), and for f16/bf16 data a warp-specialised kernel, TMA loads into a ring of stages on
 * mbarriers, a producer warpgroup and one or two consumer warpgroups issuing wgmma (wgmma16.c).
 *
 * The schedule knobs, the pruning rules and the cost model are documented next to each. */
/* Internal to ops/gemm/: the types and functions its files share. Files:
 *   plan.c      knobs; the problem (gemm_analyse); the schedule resolved, pruned (gemm_configure)
 *   emit.c      shared emission helpers; the candidate assembled (the family entry points)
 *   loaders.c   shared-memory layouts and the cp.async tile loaders
 *   mma_sync.c  one pipeline stage on mma.sync (f16, bf16, tf32, tf32x3)
 *   ffma.c      one pipeline stage on FFMA
 *   kernel.c    the mma.sync / FFMA kernel: pipeline, k loop, stores
 *   wgmma.c     the Hopper kernel: the wgmma (tf32x3) main loop
 *   wgmma16.c   the Hopper 16-bit kernel: TMA loads, a producer and consumer warpgroups (wgmma)
 *   splitk.c    split-K: the serial and cluster hand-offs, the parallel reduction kernel
 *   epilogue.c  the fused epilogue and its stores
 *   cost.c      the cost model
 * The CUDA they write includes the device library (ops/device/ktune/) for every instruction
 * wrapper; what is generated here is the problem-specific code (tile layouts, loaders, stages,
 * epilogue, kernels). One emission style, kt_buf_line: one call per line of CUDA, so the C reads
 * top to bottom like the kernel it writes (the clearest of the three styles the emitters used:
 * multi-line kt_buf_printf blocks hid the line structure, static char[] blocks the parameters);
 * kt_buf_printf only writes a blank line or the pieces of a line assembled from parts
 * (parameter lists, expressions), which a kt_buf_line or "\n" then ends. */
#pragma once

#include "ops/emit_gemm.h"
#include "ops/family.h"

#include <stdint.h>

#define SPLIT_THREADS  256 /* the wgmma_split kernel's block */
#define REDUCE_THREADS 256 /* the parallel split-K reduction's block */
#define PAD_THREADS    256 /* the 16-bit wgmma kernel's operand padding copies */

/* ---- knobs ---- */

enum {
    KN_MATH,
    KN_BM,
    KN_BN,
    KN_BK,
    KN_WM,
    KN_WN,
    KN_STAGES,
    KN_SPLITK,
    KN_RASTER,
    KN_SMEM,
    KN_SPLITK_MODE, /* appended, so the other knobs keep their positions */
    KN_MMA,         /* appended */
    KN_MCAST,       /* appended */
    KN_STORE,       /* appended */
    KN_COUNT
};
enum { MATH_FFMA, MATH_TF32, MATH_F16, MATH_BF16, MATH_TF32X3 };
/* tf32x3: reduction columns the mmas sum (truncating) before a round-to-nearest FADD carries
 * them on (ktg_flush). 64 keeps the truncation's share near 5e-7 normwise, under fp32 FFMA's
 * error at K = 2048, at 4 FADDs per 24 mmas (one FADD per 3 mmas before: 366 -> 327 us on the
 * H100 for a 2048^3 f32 matmul, 64 x 128 tiles). */
#define TF32X3_FLUSH_K 64
enum { SMEM_PAD, SMEM_XOR };
enum { SPLITK_PARALLEL, SPLITK_SERIAL, SPLITK_CLUSTER, SPLITK_STREAM };
enum { MMA_SYNC, MMA_WGMMA, MMA_WGMMA_SPLIT, MMA_WGMMA_PINGPONG };
enum { STORE_DIRECT, STORE_TMA };

/* ---- the group: what matmul, which prologue and epilogue ---- */

typedef struct gemm_problem {
    const ops_group *grp;
    const ops_graph *g;
    int mm;              /* the matmul node */
    int src[3];          /* tensor read for A, B (and B2) (group inputs) */
    int cast[2];         /* prologue cast node of A and B, or -1 */
    ops_dtype src_dt[3]; /* A, B (and B2) in global memory */
    bool trans[2];
    /* A dual group: a second matmul mm2 = A x B2 of the same A, transposes and shapes, whose
     * result the epilogue chain combines with the first's (SwiGLU: silu(x Wg) * (x Wu)). Only the
     * 16-bit wgmma kernel runs it, as one GEMM over [B | B2] packed by its loads (wgmma16.c). */
    int mm2;      /* the second matmul node, or -1 */
    int nb;       /* B operands: 1, or 2 in a dual group */
    ops_dtype dt; /* matmul operand and result dtype */
    int64_t M, N, K, batch;
    ops_shape obatch, opb[3]; /* batch dims of the output, A, B (and B2) */
    ops_shape oshape;         /* the matmul output (and group output) shape */
    int out;                  /* the group's output tensor */
    int n_epi;
    int epi[OPS_GROUP_MAX_NODES]; /* epilogue nodes in topological order */
} gemm_problem;

/* ---- the schedule, resolved against the problem ---- */

typedef struct gemm_operand {
    bool row_is_k; /* the stored tile's rows run along K (A transposed, B not) */
    int R, C;      /* shared tile: R rows of C contiguous elements */
    int64_t rows;  /* global 2-D view [rows][cols], cols contiguous */
    int64_t cols;
    int vb;           /* cp.async bytes per copy (16, 8, 4); 0: loaded through registers */
    int ve;           /* elements per copy or register load */
    int pad;          /* row padding in elements (pad layout) */
    int stride;       /* elements between rows */
    int stage;        /* elements per pipeline stage */
    int iters;        /* copies per thread per tile */
    bool scalar_frag; /* tf32 fragments read element-wise (ldmatrix.trans is 16-bit only) */
} gemm_operand;

typedef struct gemm_cfg {
    int math, bm, bn, bk, wm, wn, stages, splitk, raster, smem;
    bool serial;       /* split-K slices accumulate in turn in one kernel (splitk > 1) */
    bool cluster;      /* split-K slices of a tile are a cluster, summing in shared memory */
    bool parallel;     /* split-K partials plus a reduction kernel (splitk > 1) */
    bool stream;       /* wg16 stream-K: the last units' k tiles shared out evenly over the grid */
    int64_t sk_units;  /* stream-K: the units shared out by k tile (the rest whole, before) */
    int64_t sk_blocks; /* stream-K: the grid, a block (a cluster with mcast) per SM */
    int threads, wtm, wtn;
    bool tc;
    bool lanes_ok;      /* FFMA: the warp tile splits over the 32 lanes (ffma_lanes) */
    int mi, ni, kstep;  /* tensor cores: mma tiles per warp along m and n; k per mma */
    int ly, lx, tm, tn; /* FFMA: lane grid (ly x lx) and thread tile (tm x tn) */
    ops_dtype sdt;      /* shared-memory element type */
    int esize;
    gemm_operand op[2];
    int64_t tiles_m, tiles_n, ktiles, kps; /* kps: k tiles per split-K slice */
    int64_t smem_bytes;
    bool wgmma;       /* Hopper warpgroup MMA (gemm_emit_wgmma_kernel) */
    bool presplit;    /* wgmma: A's small halves from a first kernel (mma=wgmma_split) */
    bool wg16;        /* wgmma on f16/bf16 data (gemm_emit_wgmma16_kernel) */
    bool pingpong;    /* wg16: each consumer warpgroup its own tile (mma=wgmma_pingpong) */
    int mcast;        /* wg16: blocks of a cluster along m sharing B by TMA multicast (1 or 2) */
    bool tma_store;   /* wg16: the epilogue stages its tile in shared memory for a TMA store */
    /* wg16: operands (A, B, B2) whose rows are not 16-byte multiples, which no tensor map
     * addresses: a first kernel copies each into the workspace at pad_off[k], its rows
     * pad_stride[k] elements apart (the next multiple of 8), pad_rows[k] of them */
    bool pad[3];
    int64_t pad_stride[3], pad_rows[3], pad_off[3];
    /* wg16 store=tma with output rows that are not 16-byte multiples: the TMA stores go to
     * padded rows of the workspace (pad_out_stride elements apart, at pad_out_off), and a last
     * kernel copies them into the output */
    bool pad_out;
    int64_t pad_out_stride, pad_out_off;
    int consumers;    /* wg16: consumer warpgroups (the wm knob; 2 in ping-pong) */
    int mt;           /* wg16: m64 wgmma slabs per consumer warpgroup */
    int regs;         /* estimated registers per thread */
    int flush_ktiles; /* tf32x3: k tiles summed inside the mmas before an FADD carries them */
    bool idx64;
    const char *why; /* first prune reason, or NULL */
} gemm_cfg;

/* ldmatrix lane addressing, per (stored layout, element width): lanes 8j..8j+7 give the rows of
 * 8x8 matrix j; row = (sel(j)) * 8 + lane % 8, col = (other bit of j) * cw. */
enum {
    LDSM_A_K,      /* f16/bf16 A stored [m][k] */
    LDSM_A_M,      /* f16/bf16 A stored [k][m], .trans */
    LDSM_B_N,      /* f16/bf16 B stored [k][n], .trans */
    LDSM_B_K,      /* f16/bf16 B stored [n][k] */
    LDSM_A_K_TF32, /* tf32 A stored [m][k] */
    LDSM_B_K_TF32, /* tf32 B stored [n][k] */
};
static const struct {
    bool row_hi;      /* the row block comes from bit 1 of j (else bit 0) */
    int cw;           /* column step of the other bit, in elements */
    bool trans;       /* ldmatrix .trans */
    const char *what; /* for the emitted comment */
} ldsm_kinds[] = {
    [LDSM_A_K] = {false, 8, false, "A stored [m][k]: matrix j = rows (j & 1) * 8, k (j >> 1) * 8"},
    [LDSM_A_M] = {true, 8, true,
                  "A stored [k][m], transposed: matrix j = k (j >> 1) * 8, rows (j & 1) * 8"},
    [LDSM_B_N] = {false, 8, true,
                  "B stored [k][n], transposed: matrix j = k (j & 1) * 8, cols (j >> 1) * 8"},
    [LDSM_B_K] = {true, 8, false, "B stored [n][k]: matrix j = cols (j >> 1) * 8, k (j & 1) * 8"},
    [LDSM_A_K_TF32] = {false, 4, false,
                       "A stored [m][k] (32-bit): matrix j = rows (j & 1) * 8, k (j >> 1) * 4"},
    [LDSM_B_K_TF32] = {true, 4, false,
                       "B stored [n][k] (32-bit): matrix j = cols (j >> 1) * 8, k (j & 1) * 4"},
};

/* ---- emission helpers ---- */

typedef struct gemm_emit {
    kt_buf *b;
    const gemm_problem *p;
    const gemm_cfg *c;
    char names[OPS_GROUP_MAX_IO * 2][64]; /* parameter names, group inputs then the output */
} gemm_emit;

/* ---- plan.c: the knobs, the problem (gemm_analyse), the schedule resolved and pruned
 * (gemm_configure) ---- */
extern const ops_knob gemm_knobs[KN_COUNT];
bool gemm_in_group(const ops_group *grp, int node);
int gemm_analyse(const ops_group *grp, gemm_problem *p);
int64_t gemm_cdiv(int64_t a, int64_t b);
bool gemm_is_tf32(int math);
bool gemm_cast_is_identity(const gemm_problem *p, int k);
const char *gemm_sync_prefix_why(const gemm_problem *p, const gemm_cfg *c, const ops_device *dev);
const char *gemm_wgmma_prefix_why(const gemm_problem *p, const gemm_cfg *c, const ops_device *dev);
void gemm_configure(const gemm_problem *p, const ops_schedule *s, const ops_device *dev,
                    gemm_cfg *c);
int64_t gemm_serial_acc_offset(const gemm_problem *p, const gemm_cfg *c);
int64_t gemm_serial_workspace_bytes(const gemm_problem *p, const gemm_cfg *c);
int gemm_ilog2(int v);
bool gemm_raster_redundant(const gemm_cfg *c, const ops_device *dev);
void gemm_main_entry(const gemm_cfg *c, const char *suffix, char *buf, size_t len);

/* ---- emit.c: shared emission helpers, the candidate assembled (the family entry points) ---- */
const char *gemm_in_name(const gemm_emit *e, int t);
bool gemm_epi_reads(const gemm_problem *p, int t);
void gemm_emit_kernel_params(const gemm_emit *e, bool workspace);
void gemm_emit_epi_list(const gemm_emit *e, bool decl);
extern const char *const gemm_bnames[OPS_MAX_RANK];
void gemm_emit_batch_indices(const gemm_emit *e);
bool gemm_refs_batch(const ops_shape *in, const ops_shape *out, int n_batch);
void gemm_emit_indent(kt_buf *b);
void gemm_emit_load_value(const gemm_emit *e, int k, const char *raw, kt_buf *out);
void gemm_emit_operand_pointers(const gemm_emit *e);
void gemm_emit_store_args(const gemm_emit *e, kt_buf *args);

/* ---- loaders.c: shared-memory layouts and the cp.async tile loaders ---- */
void gemm_emit_slot_fn(const gemm_emit *e, int k);
void gemm_emit_loader(const gemm_emit *e, int k);
void gemm_emit_load_tiles(const gemm_emit *e);

/* ---- mma_sync.c: one pipeline stage on mma.sync (f16, bf16, tf32, tf32x3) ---- */
void gemm_emit_mma_stage(const gemm_emit *e);

/* ---- ffma.c: one pipeline stage on FFMA ---- */
void gemm_emit_ffma_stage(const gemm_emit *e);

/* ---- epilogue.c: the fused epilogue and its stores ---- */
int gemm_emit_epilogue(const gemm_emit *e);

/* ---- splitk.c: split-K: serial and cluster hand-offs, the parallel mode's reduction kernel ----
 */
void gemm_emit_serial_helpers(const gemm_emit *e);
void gemm_emit_cluster_helpers(const gemm_emit *e);
void gemm_emit_serial_epilogue(const gemm_emit *e);
void gemm_emit_cluster_epilogue(const gemm_emit *e);
int64_t gemm_reduce_items(const gemm_problem *p);
void gemm_emit_reduce_kernel(const gemm_emit *e);

/* ---- kernel.c: the mma.sync / FFMA kernel skeleton (pipeline, k loop, stores) ---- */
void gemm_emit_main_kernel(const gemm_emit *e, const char *entry);

/* ---- wgmma.c: the Hopper wgmma (tf32x3) kernel ---- */
void gemm_emit_wgmma_helpers(const gemm_emit *e);
void gemm_emit_split_kernel(const gemm_emit *e);
void gemm_emit_wgmma_kernel(const gemm_emit *e, const char *entry);

/* ---- wgmma16.c: the Hopper 16-bit kernel (TMA, warp-specialised wgmma) ---- */
/* stream-K's workspace: its flags (cleared before each launch), then the partial slots */
int64_t gemm_stream_flag_bytes(const gemm_cfg *c);
int64_t gemm_stream_workspace_bytes(const gemm_problem *p, const gemm_cfg *c);
const char *gemm_wgmma16_prefix_why(const gemm_problem *p, const gemm_cfg *c,
                                    const ops_device *dev);
void gemm_wgmma16_configure(const gemm_problem *p, const ops_schedule *s, const ops_device *dev,
                            gemm_cfg *c);
void gemm_wgmma16_fill_args(const gemm_problem *p, const gemm_cfg *c, ops_kernel_launch *k);
/* The padded operands' copies placed in the workspace from byte `base` on (256-byte aligned);
 * returns the workspace's end. */
int64_t gemm_wgmma16_pad_layout(const gemm_problem *p, gemm_cfg *c, int64_t base);
/* The kernel that copies operand k into its padded rows (c->pad[k]), and its launch; k = 3:
 * the kernel that copies the padded output rows into the output (c->pad_out). */
void gemm_emit_pad_kernel(const gemm_emit *e, int k);
void gemm_emit_unpad_kernel(const gemm_emit *e);
void gemm_pad_launch(const gemm_problem *p, const gemm_cfg *c, int k, const ops_device *dev,
                     ops_kernel_launch *l);
void gemm_emit_wgmma16_helpers(const gemm_emit *e);
void gemm_emit_wgmma16_kernel(const gemm_emit *e, const char *entry);

/* ---- cost.c: the cost model ---- */
void gemm_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                   ops_estimate *est);
