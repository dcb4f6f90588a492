/* The conv family (ops/conv/, one file per part): one conv2d or conv3d node (NCHW/OIHW or
 * NHWC/OHWI, with a depth for 3-d; stride, padding, dilation, input dilation, groups, optional
 * bias) plus an elementwise epilogue chain on its output, as one kernel.
 *
 * Three algorithms (knob "algo"):
 *   implicit_gemm  GEMM view M = N*P*Q output pixels, N = K/groups output channels,
 *                  K = (C/groups)*R*S; the im2col matrix is gathered on the fly into shared
 *                  memory. Math (knob "math"):
 *                    ffma    fp32, per-thread TM x TN register tile; every dtype and policy.
 *                    mma     mma.sync m16n8k16 f16/bf16 tensor cores fed by ldmatrix, fp32
 *                            accumulation (f32 data only under "reduced", rounded to bf16).
 *                    tf32    f32 data on m16n8k8 tf32 tensor cores, one mma per product (inputs
 *                            rounded to 11 significant bits: "tf32" and "reduced" policies only).
 *                    tf32x3  f32 data, error-compensated: each operand is split into a tf32 "big"
 *                            part and a tf32 "small" remainder and three mmas sum
 *                            a_small*b_big + a_big*b_small + a_big*b_big into a per-stage partial
 *                            that FADDs carry into the accumulators (the tensor cores accumulate
 *                            by truncation); about fp32 accuracy, so allowed under every policy,
 *                            "exact" included.
 *                  The tensor-core paths share the warp grid (m16n8 accumulator tiles) and the
 *                  epilogue; tf32 paths keep raw floats in shared memory and convert (split) them
 *                  as fragments are read. Tiles move through shared memory either by multi-stage
 *                  cp.async (when the gather is 16-byte contiguous: NHWC, C/groups % 8 == 0 for
 *                  16-bit data, % 4 == 0 for f32 data on the tf32 paths) or by predicated loads
 *                  into registers (stages 1: single buffer; 2: the next tile is loaded while the
 *                  current one is multiplied).
 *   direct         one thread computes TK output channels x TQ adjacent output columns of one
 *                  output row; the filter slice of the block is staged in shared memory
 *                  ("shared") or read per filter row into registers ("registers"). Meant for few
 *                  input channels (the 3-channel first layer of vision nets) and depthwise convs.
 *   tiled          f32 NCHW, groups 1, dilation 1, at most 16 input channels (the first layer of
 *                  vision nets): a block owns one image, an output tile of BM pixels (OH rows x
 *                  OW columns, chosen by the planner to waste the fewest pixels at the edges) and
 *                  BN output channels; a thread TK channels x TQ adjacent columns of one output
 *                  row (BM * BN / (TK * TQ) threads; the knob "warps" stays at its first value).
 *                  The reduction runs one input channel at a time: the input patch the tile needs
 *                  ((OH - 1) * stride + R rows x (OW - 1) * stride + S columns, zeros where the
 *                  patch leaves the image: the padding) and the filter slice [R * S][BN] of that
 *                  channel are staged in shared memory by 4-byte cp.async, "stages" buffers deep
 *                  (1: load, compute; 2-3: the next channels load while this one is computed).
 *                  The patch is stored phase-split by the stride in both directions (column x at
 *                  [x % STR_W][x / STR_W], row y likewise), so the TQ columns of a thread read
 *                  consecutive words for each filter column s: per filter row and column phase a
 *                  thread loads one window of TQ + (S - 1) / STR_W words (16-byte loads) and every
 *                  s of that phase uses it shifted by (s - phase) / STR_W. Filter values are
 *                  stored output-channel-contiguous and read as 16-byte warp broadcasts. Pure
 *                  fp32 FFMA in a fixed order (channel, filter row, column phase, s), so every
 *                  precision policy accepts it. The tile's outputs go back through shared memory
 *                  so that consecutive threads store consecutive columns.
 *
 *   depthwise      NCHW, groups = C = K (one filter a channel): a block per (image, channel) and
 *                  output tile of TK rows a warp x 32 * TQ columns; the input patch the tile
 *                  reads (zeros past the edges: the padding) and the channel's R x S filter are
 *                  staged in shared memory once (coalesced row loads), then each lane computes
 *                  TK x TQ outputs (its columns 32 apart, so a warp's stores are coalesced) by
 *                  FFMA over (r, s) in order: a stencil at the memory roofline, where the direct
 *                  kernel re-read the window from the caches for every output row.
 *
 * conv3d and input-dilated convolutions (transposed ones with a stride) take the implicit GEMM
 * with the plain predicated gather ("general"), which walks the depth and skips the zeros between
 * input elements; the kk table, cp.async and the other algorithms are for plain 2-d convs.
 *
 * Knobs that do not apply to the chosen algorithm must sit at their first value; the other
 * combinations are pruned as "redundant", so every kept schedule is a distinct kernel. */

/* Internal to ops/conv/: the types and functions its files share. Files:
 *   plan.c      knobs; the group (conv_analyse); each algorithm's plan, pruning (conv_prune)
 *   emit.c      shared emission pieces (constants, names, signatures); the candidate assembled
 *               (the family entry points)
 *   epilogue.c  kt_conv_store: bias, the fused elementwise chain and the store of one element
 *   direct.c    the direct kernel
 *   tiled.c     the tiled direct kernel (its own cp.async patch pipeline and FFMA loop)
 *   depthwise.c the depthwise kernel (a stencil over a patch staged in shared memory)
 *   igemm.c     the implicit-GEMM kernel: tile constants, the k loop's pipeline, the stores
 *   loaders.c   implicit GEMM: the im2col gather (reduction-index table, row setup) and the
 *               tile loaders (plain predicated loads, 16-byte cp.async)
 *   ffma.c      implicit GEMM: one stage on FFMA
 *   mma_sync.c  implicit GEMM: one stage on mma.sync m16n8k16 (f16, bf16) fed by ldmatrix
 *   tf32.c      implicit GEMM: one stage on mma.sync m16n8k8 tf32 and error-compensated tf32x3
 *   cost.c      the cost model
 * The CUDA they write includes the device library (ops/device/ktune/) for every instruction
 * wrapper; what is generated here is the problem-specific code (gathers, stages, pipelines,
 * epilogue, kernels). One emission style, kt_buf_line: one call per line of CUDA;
 * kt_buf_printf only writes a blank line or a line assembled from parts. */
#pragma once
#include "ops/family.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { K_ALGO, K_MATH, K_BM, K_BN, K_BK, K_WARPS, K_STAGES, K_TK, K_TQ, K_FILTER, N_KNOBS };
enum { ALGO_IGEMM = 0, ALGO_DIRECT = 1, ALGO_TILED = 2, ALGO_DEPTHWISE = 3 };
/* Values are stored in schedules (cache records, logs): append, never renumber. */
enum { MATH_FFMA = 0, MATH_MMA = 1, MATH_TF32 = 2, MATH_TF32X3 = 3 };
enum { FILTER_SHARED = 0, FILTER_REGS = 1 };

extern const ops_knob conv_knobs[N_KNOBS];
extern const char *const conv_math_labels[];

/* Registers a kept schedule may be estimated to need: well under the 255 ptxas allows, since
 * the estimate is coarse and a spill is a failed candidate. */
#define REG_BUDGET 192

/* What the emitters need to know about the group. */
typedef struct conv_info {
    const ops_graph *g;
    const ops_node *node; /* the conv2d */
    int conv_out;         /* its output tensor */
    int x, w, bias;       /* operand tensors; bias -1 when absent */
    int y;                /* the group output */
    ops_dtype dt;         /* dtype of x and w */
    bool nhwc;
    int64_t n, c, h, wd; /* input batch, channels, height, width */
    int64_t k, r, s;     /* filter: output channels, height, width */
    int64_t p, q;        /* output height, width */
    int sh, sw, ph, pw, dh, dw, groups;
    /* conv3d: the output depth is folded into the rows, p = OD * OH (depth-major), so stores
     * and epilogues index a 2-d output; conv2d: depth 1 */
    int nd;                 /* spatial dimensions: 2 or 3 */
    int64_t dep, t, od, oh; /* input depth, filter depth, output depth, output height */
    int sd, pd, dd;         /* depth stride, padding, dilation */
    int idd, idh, idw;      /* input dilation: zeros between input elements */
    bool general;           /* 3-d or input-dilated: the implicit GEMM's plain gather only */
    int64_t cg, kg;         /* channels per group (in, out) */
    int64_t gm, gk;         /* GEMM view: rows (output pixels), reduction length */
    bool wide;              /* some offset needs 64 bits */
    int epilogue_nodes;     /* elementwise nodes in the group */
} conv_info;

typedef struct ig_plan {
    int bm, bn, bk, threads, stages, bufs;
    int math;      /* MATH_* */
    bool mma;      /* 16-bit tensor cores (m16n8k16) */
    bool tf32;     /* tf32 or tf32x3: floats in shared memory, m16n8k8 tf32 mmas */
    bool tc;       /* any tensor-core path: warp grid of m16n8 accumulator tiles */
    bool cp_async; /* 16-byte cp.async gather */
    int kstep;     /* reduction depth of one mma: 16 (mma) or 8 (tf32) */
    int vec;       /* cp.async: elements per 16-byte chunk */
    ops_dtype mt;  /* mma operand type */
    /* ffma: per-thread register tile; thread grid (fast dimension first) */
    int tm, tn;
    /* mma: warp grid and per-warp mma tiles */
    int warps_m, warps_n, mi, ni;
    /* loads */
    int a_per, b_per, a_rows; /* plain: elements per thread; distinct gathered rows */
    int a_chunks, b_chunks;   /* cp.async: 16-byte chunks per thread */
    int smem, regs;
} ig_plan;

typedef struct direct_plan {
    int tk, tq, threads, win, smem, regs;
    bool shared;
    int64_t spatial; /* thread tiles per channel block: N * P * ceil(Q / TQ) */
} direct_plan;

/* The depthwise kernel's tile: TK output rows a warp, TQ columns a lane (32 apart). */
typedef struct dw_plan {
    int tk, tq, threads, warps;
    int tile_p, tile_q;    /* output rows and columns of a block */
    int in_h, in_w;        /* the input patch they read */
    int64_t tiles_p, tiles_q;
    int smem, regs;
} dw_plan;

/* The tiled direct kernel's geometry (see the header comment). Sizes in words (floats). */
typedef struct tiled_plan {
    int bm, bn, tk, tq, threads, stages;
    int oh, ow, cgn, pt; /* output tile rows and columns; column groups; pixel threads */
    int ih, iw, ridx;    /* input patch rows and columns; stored rows per row phase */
    int wv;              /* 16-byte loads of the widest column-phase window of a thread */
    int xt, xi, ft,
        fi;            /* a thread's copies per channel: patch rows x columns, filter rows x taps */
    int pl, rp, bnp;   /* words per column phase, patch row pitch, filter row pitch */
    int xs, ws, stage; /* patch, filter slice, one stage (patch + filter) */
    int smem, regs, min_blocks;
    int conflicts; /* extra shared-memory wavefronts of a block's window loads (planner's model) */
    int64_t tiles_p, tiles_q, kblocks;
} tiled_plan;

typedef struct conv_names {
    char in[OPS_GROUP_MAX_IO][16];        /* kernel parameter per group input */
    char param[OPS_GROUP_MAX_IO + 1][64]; /* their declarations, then the output's */
    int n_params;
    char call[512];           /* the names, comma-separated */
    const char *entry_suffix; /* the group's, for the kernel's name */
} conv_names;

/* plan.c */
bool conv_analyse(const ops_group *grp, conv_info *ci);
bool conv_matches(const ops_group *grp);
int conv_div_up(int64_t a, int64_t b);
const char *conv_ig_plan_make(const ops_group *grp, const conv_info *ci, const ops_schedule *s,
                              const ops_device *dev, ig_plan *pl);
const char *conv_direct_plan_make(const conv_info *ci, const ops_schedule *s, const ops_device *dev,
                                  direct_plan *pl);
const char *conv_tiled_plan_make(const conv_info *ci, const ops_schedule *s, const ops_device *dev,
                                 tiled_plan *pl);
const char *conv_dw_plan_make(const conv_info *ci, const ops_schedule *s, const ops_device *dev,
                              dw_plan *pl);
const char *conv_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev);

/* emit.c */
const char *conv_to_f(char *buf, size_t len, ops_dtype dt, const char *ref);
void conv_emit_signature(kt_buf *b, const char *head, const char *const *lead, int n_lead,
                         const conv_names *nm);
const char *conv_param_of(const ops_group *grp, const conv_names *nm, int tensor);
void conv_emit_kernel_head(kt_buf *b, const char *min_blocks, const char *name,
                           const conv_names *nm);

/* epilogue.c */
int conv_emit_store_fn(kt_buf *b, const ops_group *grp, const conv_info *ci, const conv_names *nm);

/* direct.c, tiled.c, igemm.c: the kernels */
void conv_emit_direct(kt_buf *b, const conv_info *ci, const direct_plan *pl, const conv_names *nm);
void conv_emit_tiled(kt_buf *b, const tiled_plan *pl, const conv_names *nm);
void conv_emit_depthwise(kt_buf *b, const conv_info *ci, const dw_plan *pl, const conv_names *nm);
void conv_emit_igemm(kt_buf *b, const conv_info *ci, const ig_plan *pl, const conv_names *nm);

/* loaders.c */
bool conv_kk_table_ok(const conv_info *ci);
void conv_emit_kk_table(kt_buf *b, const conv_info *ci, int bk);
void conv_emit_row_setup(kt_buf *b, const conv_info *ci, const char *count, const char *mexpr);
void conv_emit_plain_loader(kt_buf *b, const conv_info *ci, const ig_plan *pl);
void conv_emit_cp_async_loader(kt_buf *b, const conv_info *ci, const ig_plan *pl);

/* ffma.c, mma_sync.c, tf32.c: one stage of the implicit GEMM per math path */
void conv_emit_compute_ffma(kt_buf *b, const conv_info *ci);
void conv_emit_mma_tiles(kt_buf *b, const char *mma, const char *d, const char *a,
                         const char *bfrag);
void conv_emit_compute_mma(kt_buf *b, const ig_plan *pl);
void conv_emit_compute_tf32(kt_buf *b, const ig_plan *pl);

/* cost.c */
void conv_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                   ops_estimate *e);
