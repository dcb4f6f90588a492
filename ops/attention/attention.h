/* The attention family: one fused flash-attention kernel per candidate.
 *
 * The group is one attention node (q [..., Sq, D], k [..., Skv, D], v [..., Skv, Dv], the batch
 * dims equal, as validation requires) plus, optionally, elementwise nodes computing the group's
 * single output from the attention output and broadcast inputs (a bias, a residual, a gate...).
 * Semantics are those of ops/reference.c: out = softmax(q k^T * scale) v, scale defaulting to
 * 1/sqrt(D), key j masked for query i when causal and j > i (top-left alignment).
 *
 * A block owns Bq consecutive queries of one batch entry and walks the key/value tiles of Bkv
 * keys with an online softmax: running row max m and row sum l in fp32, the output accumulator
 * rescaled by exp(m_old - m_new) whenever the max grows, a final division by l. Under causal
 * masking the tiles past the block's last query are never loaded and the q tiles are handed
 * out longest first (block x runs q tile gridDim.x - 1 - x).
 *
 * Two math paths:
 *   f16 / bf16  m16n8k16 mma.sync with fp32 accumulation. Each warp owns 16 (or 32) query rows;
 *               S = Q K^T lives in the accumulator registers, P is repacked to 16-bit in
 *               registers as the A operand of O += P V (ldmatrix.trans reads V). Tiles arrive
 *               through cp.async, either one buffer with K and V in separate groups (K of the
 *               next tile loads while P V runs) or two buffers (the whole next tile loads while
 *               this one is used). Shared rows are padded by 16 bytes or XOR-swizzled.
 *   ffma        f32 data under every precision (no tf32 path yet): a block-wide three-phase
 *               loop per tile, S micro-tiles per thread into shared memory, a warp per row for
 *               the softmax update, O micro-tiles in registers.
 *
 * Knob "mma" picks the tensor-core instruction of the f16 / bf16 path:
 *   sync   mma.sync as above (sm_80 and later).
 *   wgmma  Hopper's warpgroup MMA (sm_90a): each warpgroup (4 warps) owns 64 query rows, so
 *          BQ = 64 x warpgroups. S = Q K^T reads both operands from shared memory through
 *          matrix descriptors; O += P V takes P from registers (the S accumulators repacked to
 *          16 bits: wgmma's accumulator and A-fragment layouts per warp are those of m16n8k16)
 *          and V from shared memory as an N-major operand. Tiles are stored in the hardware's
 *          128-byte swizzle (64-column blocks of 128-byte rows, the 16-byte chunk index XORed
 *          with row % 8, 1024-byte aligned), filled by cp.async into rings of 2 or 3 buffers
 *          (knob "stages": three save one block barrier per tile). Each warpgroup pipelines
 *          itself (attn_emit_wgmma_kernel says how); the softmax update and the store are
 *          the mma.sync path's. Head dims: D a multiple of 64, DV 64.
 *   wgmma_ws  FlashAttention-3's structure (sm_90a): a producer warpgroup, its registers given to
 *          the consumers (setmaxnreg), whose one thread loads Q once and K and V tiles into rings
 *          of NST buffers by TMA (one bulk-tensor copy per 64-column block, the hardware writing
 *          the 128-byte swizzle), each buffer with a full mbarrier (the copies' bytes complete
 *          it) and an empty one (a lane of every consumer warp arrives when its wgmmas have read
 *          it). The consumer warpgroups (64 query rows each) pipeline themselves as wgmma does,
 *          with no block barrier in the key loop; under causal masking each stops at its own
 *          diagonal (per-warpgroup trip counts) and releases the block's later tiles unread.
 *          Head dims: D a multiple of 64, DV 64, 128 or 256. Work items (a q tile of a batch
 *          entry) are ordered in chunks of batch entries whose K and V fit in L2 together (as
 *          many as fill the SMs; whole grouped-query groups), causal ones longest first within
 *          a chunk. Knob "grid": tiles (a block per item, started in that order by the hardware
 *          as SMs free up) or persistent (a block per SM walking items blockIdx.x + k gridDim.x,
 *          the next item's Q and first K/V tiles loading while the consumers finish the last).
 *          Knob "pingpong" (two or three consumers): they take turns issuing their wgmmas, each
 *          waiting on its named barrier for the one before and releasing the next, so one's
 *          softmax runs under another's GEMMs (FlashAttention-3's inter-warpgroup overlap);
 *          every consumer then walks the block's key tiles (equal turn counts).
 *   splitkv  decode (few query rows, many keys; no epilogue): no tensor cores; a block per k/v
 *          head and key slice (knob "splits"), the query rows of the head's grouped-query heads
 *          packed (group x Sq <= 16), K and V streamed once (knob "stages" 2 or 3: through a
 *          cp.async ring of 32-key chunks per warp in shared memory); the block merges its warps'
 *          partials (O, max, sum) in shared memory, then stores the output (splits 1: one
 *          launch) or its slice's partial, which a second kernel combines in a fixed order.
 *          decode.c says how.
 *   splitkv_tc  the same on the tensor cores (sm_80+): the packed rows padded to one m16 tile,
 *          S = Q K^T and O += P V by m16n8k16 mma.sync on fragments ldmatrix reads from the
 *          ring (stages 2 or 3 only), the softmax on the accumulators.
 *
 * Internal to ops/attention/: the types and functions its files share. Files:
 *   plan.c      knobs; the problem (attn_analyse); the schedule's geometry and pruning
 *   emit.c      the candidate assembled (the family entry points); shared emission helpers:
 *               library includes, the kernel opening, block setup, accumulators, loop headers
 *   loaders.c   shared-memory tile layout and the cp.async tile loaders (16-byte, 4-byte)
 *   softmax.c   the online softmax: masking, row max and sum, rescaling (tensor-core and FFMA)
 *   mma_sync.c  the mma.sync kernel: its main loop over key/value tiles
 *   wgmma.c     the Hopper kernels: the warpgroup-pipelined wgmma main loop, and wgmma_ws
 *   decode.c    the split-KV decode kernels (mma=splitkv) and their combine
 *   ffma.c      the FFMA kernel: its three-phase main loop
 *   epilogue.c  the fused epilogue function, O / l and the stores
 *   cost.c      the cost model
 * The CUDA they write includes the device library (ops/device/ktune/) for every instruction
 * wrapper (cp.async, ldmatrix, mma.sync, wgmma, ex2, packing, swizzles); what is generated here
 * is the problem-specific code. One emission style, as ops/gemm/: kt_buf_line, one call per
 * line of CUDA; kt_buf_printf only for a blank line or a line assembled from parts. */
#pragma once

#include "ops/family.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    K_BQ,
    K_BKV,
    K_WARPS,
    K_STAGES,
    K_MATH,
    K_LAYOUT,
    K_QFRAG,
    K_EXP,
    K_MMA,
    K_GRID,
    K_SPLITS,
    K_PINGPONG,
    N_KNOBS
};
enum { MATH_FFMA = 0, MATH_F16 = 1, MATH_BF16 = 2 };
enum { LAYOUT_PAD = 0, LAYOUT_SWIZZLE = 1 };
enum { QFRAG_SMEM = 0, QFRAG_REGS = 1 };
enum { EXP_E = 0, EXP_2 = 1 };
enum { MMA_SYNC = 0, MMA_WGMMA = 1, MMA_WGMMA_WS = 2, MMA_SPLITKV = 3, MMA_SPLITKV_TC = 4 };
enum { GRID_TILES = 0, GRID_PERSISTENT = 1 };

/* Registers a thread may plan for; ptxas needs headroom for addresses and temporaries. */
#define MMA_REG_BUDGET  192
#define FFMA_REG_BUDGET 168
#define MAX_HEAD_DIM    OPS_ATTENTION_FUSED_MAX_HEAD

extern const ops_knob attn_knobs[N_KNOBS];
extern const char *const attn_math_labels[];

/* What the emitter needs to know about the group. */
typedef struct attn_info {
    const ops_graph *g;
    const ops_node *att;
    int att_node;
    int32_t q, k, v, out; /* tensor indices; out is the group's output */
    ops_dtype dt, out_dt;
    int rank;      /* of q, k, v and out */
    int64_t batch; /* product of the batch dims */
    /* grouped-query attention: k and v have hq / group heads on the last batch axis, query head
     * h reading head h / group (group 1: as many as q) */
    int64_t hq, group;
    int64_t sq, skv, d, dv;
    double scale;
    bool causal;
    bool has_epilogue;
} attn_info;

/* ---- schedule geometry, shared by prune, emit and estimate ---- */

typedef struct attn_geom {
    int bq, bkv, warps, threads, stages, math, layout, qfrag, exp2;
    int wgmma;         /* mma=wgmma or wgmma_ws: the Hopper path */
    int ws;            /* mma=wgmma_ws: a TMA producer warpgroup besides the warps */
    int consumers;     /* wgmma paths: warpgroups computing, 64 query rows each */
    int consumer_regs; /* wgmma_ws: registers a consumer thread gets (setmaxnreg), 0: no move */
    int persistent;    /* wgmma_ws: a block per SM walking the work items (grid=persistent) */
    int pingpong;      /* wgmma_ws: consumers take turns at the tensor cores (named barriers) */
    int splitkv;       /* mma=splitkv or splitkv_tc: the decode kernels (decode.c) */
    int tc;            /* splitkv_tc: its scores and P V on the tensor cores */
    int splits;        /* splitkv: key slices a k/v head */
    int mt;            /* mma: 16-row m tiles per warp (wgmma: 1, a warp's share of 64 rows) */
    int tx, ty;        /* ffma: thread grid (columns x rows) */
    int rq, rk, rd;    /* ffma: micro-tile rows, S columns, O columns per thread */
    int qs, ks, vs;    /* shared row strides in elements (ffma: ks is K^T's stride) */
    int64_t smem;      /* dynamic shared memory bytes */
    int regs;          /* planned registers per thread */
    int64_t q_tiles;   /* grid.x */
    int64_t kv_tiles;  /* key tiles visited, summed over the q tiles of one batch entry */
} attn_geom;

/* ---- plan.c ---- */
bool attn_analyse(const ops_group *grp, attn_info *a);
void attn_geometry(const attn_info *a, const ops_schedule *s, attn_geom *m);
bool attention_matches(const ops_group *grp);
const char *attention_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev);

/* ---- emit.c ---- */
int attn_input_index(const ops_group *grp, int32_t t);
bool attn_in_group(const ops_group *grp, int32_t t);
const char *attn_emit_kernel_open(kt_buf *b, const ops_group *grp, const attn_info *a,
                                  const attn_geom *m, const char *entry, char *scale,
                                  size_t scale_len);
void attn_emit_block_setup(kt_buf *b, const ops_group *grp, const attn_info *a, const char *wq0,
                           const char *item);
void attn_emit_acc_init(kt_buf *b);
void attn_emit_close(kt_buf *b, int n);
void attn_emit_for_open(kt_buf *b, const char *var, const char *bound);
void attn_emit_loop2(kt_buf *b, const char *ni, const char *nj, const char *stmt);
void attn_emit_pack_p(kt_buf *b, const attn_geom *m, const char *dst, const char *s);
void attn_emit_for2(kt_buf *b, const char *ni, const char *nj, bool brace);

/* ---- loaders.c ---- */
typedef enum { ATTN_Q, ATTN_K, ATTN_V } attn_operand;
void attn_emit_layout_fn(kt_buf *b, int layout);
void attn_emit_mma_load(kt_buf *b, const attn_info *a, const attn_geom *m, attn_operand op,
                        const char *what, const char *dst, const char *row0);
void attn_emit_wgmma_load(kt_buf *b, const attn_info *a, const attn_geom *m, attn_operand op,
                          const char *what, const char *dst, const char *row0);
void attn_emit_ffma_load(kt_buf *b, const attn_info *a, const attn_geom *m, attn_operand op,
                         const char *what, const char *dst, const char *row0);
typedef void (*attn_load_fn)(kt_buf *b, const attn_info *a, const attn_geom *m, attn_operand op,
                             const char *what, const char *dst, const char *row0);
void attn_emit_two_buffers(kt_buf *b, const attn_info *a, const attn_geom *m, attn_load_fn load,
                           const char *ty, const char *k_buf, const char *k_size,
                           const char *v_size, bool comments);

/* ---- softmax.c ---- */
void attn_emit_mma_softmax(kt_buf *b, const attn_info *a, const attn_geom *m, const char *ex,
                           bool defer_alpha);
void attn_emit_ffma_softmax(kt_buf *b, const char *ex);

/* ---- the kernels: mma_sync.c, wgmma.c, ffma.c ---- */
void attn_emit_mma_kernel(kt_buf *b, const ops_group *grp, const attn_info *a, const attn_geom *m,
                          const char *entry);
void attn_emit_wgmma_kernel(kt_buf *b, const ops_group *grp, const attn_info *a, const attn_geom *m,
                            const char *entry);
void attn_emit_wgmma_ws_kernel(kt_buf *b, const ops_group *grp, const attn_info *a,
                               const attn_geom *m, const ops_device *dev, const char *entry);
void attn_fill_tma_args(const ops_group *grp, const attn_info *a, const attn_geom *m,
                        ops_kernel_launch *k);
void attn_emit_ffma_kernel(kt_buf *b, const ops_group *grp, const attn_info *a, const attn_geom *m,
                           const char *entry);

/* ---- decode.c ---- */
void attn_emit_splitkv_kernels(kt_buf *b, const ops_group *grp, const attn_info *a,
                               const attn_geom *m, const char *entry);
void attn_splitkv_launches(const ops_group *grp, const attn_info *a, const attn_geom *m,
                           const char *entry, ops_emitted *out);
int64_t attn_splitkv_workspace(const attn_info *a, const attn_geom *m);
int64_t attn_splitkv_part_floats(const attn_info *a);

/* ---- epilogue.c ---- */
int attn_emit_epilogue_fn(kt_buf *b, const ops_group *grp, const attn_info *a);
void attn_emit_mma_store(kt_buf *b, const ops_group *grp, const attn_info *a);
void attn_emit_ffma_store(kt_buf *b, const ops_group *grp, const attn_info *a);

/* ---- cost.c ---- */
void attention_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                        ops_estimate *e);
