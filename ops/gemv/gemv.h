/* The gemv family (ops/gemv/, one file per part): a matrix-vector product y[M] = A[M][K] x[K]
 * written as a matmul whose output has one column (N == 1: A [M, K] row-major, B [K, 1]), plus an
 * elementwise epilogue chain on its output, as one kernel. Decode-time LLM layers and DeepBench's
 * inference GEMMs are of this shape: every element of A is read once and used once, so the kernel
 * is bound by DRAM bandwidth and the tile machinery of the gemm family (16-wide tiles, 15 of 16
 * columns wasted, at most M / BM blocks) only gets in the way.
 *
 * The decode form too: a few token rows against a weight stored as nn.Linear stores it,
 * y[T, N] = X[T, K] W[N, K]^T (matmul with transpose_b, T <= GEMV_MAX_T). There the weight is the
 * streamed matrix A (its N rows of K), the T rows of X are the vectors, and every element of A
 * loaded is used T times from registers (converted to fp32 once), so the weight is still read
 * once; past ~16 tokens FFMA, not DRAM, would bound it, and the gemm family's tensor cores take
 * over.
 *
 * math=ffma: each row is owned by TPR consecutive lanes (a power of two, up to 256: a row read by
 * several warps, as a reduction kernel reads one); a thread group of TPR lanes
 * walks its R rows together: per step every lane loads VEC consecutive elements of x and of
 * each of the R rows (16-byte loads at VEC = 8 for 16-bit data), accumulates in fp32, and at the
 * end the TPR lanes of a row reduce by warp shuffles in a fixed order (deterministic; across
 * warps through shared memory, in warp order). The lane
 * that owns the row's first element applies the epilogue and stores. x is re-read by every
 * row group: it is small and stays in L1/L2.
 *
 * Knobs: threads per block, lanes per row (TPR), rows per thread group (R), vector width, and
 * how A is loaded (sm_80+): as cached (through L1, the default policy), with a 256-byte L2
 * prefetch hint (each DRAM request fetches the next sectors of the row with it), or streamed
 * (the prefetch, no L1 allocation, and an L2 evict-first policy so A's single use does not push
 * x out; Inductor's reductions load a GEMV's matrix with evict_first).
 *
 * math=mma (16-bit data, sm_80+): the same streaming on the tensor cores, for up to 64 token
 * rows. A warp owns 16 rows of A and one k slice of ksplit; per 32 elements of k each lane loads
 * 16 bytes of rows g and g + 8 (g = lane / 4) and of token g of every 8-token tile, at k offset
 * 8 * (lane % 4), and feeds two m16n8k16 products. That puts memory k 8q .. 8q + 3 of lane q into
 * the product's k slots 2q, 2q + 1, 2q + 8, 2q + 9 (and 8q + 4 .. 8q + 7 into the second's):
 * a permutation of k, the same for A and x, so the dot products are unchanged while every load
 * is a whole 16 bytes of a row. The ksplit warps of a row block add their sums through shared
 * memory in a fixed order (deterministic), and the first applies the epilogue. A warp may own
 * rows (1, 2, 4) blocks of 16 rows, each x load then feeding all of them: x is re-read from L2
 * once per warp, which matters past 8 tokens. A lane keeps its next depth (2, 4, 8) steps'
 * loads in flight in a ring of registers: a warp owns a short stretch of k (split by ksplit), so
 * without the ring it waits out a DRAM round trip every two steps, and the H100's HBM needs
 * about 4 MiB in flight to stream at full rate.
 *
 *   plan.c   the groups it takes (gemv_analyse), the knobs, the plans and their prune rules
 *   emit.c   a candidate: its parameters, the epilogue and store (kt_gemv_store), the launch
 *   ffma.c   the FFMA kernels of both forms
 *   mma.c    the tensor-core kernel (math=mma)
 *   cost.c   the cost model */
#pragma once

#include "../family.h"

enum { K_THREADS, K_TPR, K_ROWS, K_VEC, K_LOAD, K_MATH, K_KSPLIT, K_DEPTH, N_KNOBS };
enum { LOAD_CACHED, LOAD_PREFETCH, LOAD_STREAM };
enum { MATH_FFMA, MATH_MMA };

/* Token rows of the decode form (y = X W^T): the FFMA kernel's (its sums are registers, and past
 * ~16 FFMA, not DRAM, bounds it) and the tensor-core kernel's (8-token tiles). */
#define GEMV_MAX_T_FFMA 16
#define GEMV_MAX_T      64

typedef struct gemv_info {
    const ops_graph *g;
    int mm;   /* the matmul node */
    int a, x; /* the streamed matrix and the vector(s) (group inputs) */
    int y;    /* the group output */
    ops_dtype adt, xdt;
    int64_t M, K;
    int64_t T;   /* vectors: 1, or X's rows in the decode form */
    bool decode; /* y [T, M] = X [T, K] A [M, K]^T (A is the matmul's second operand) */
    int n_epi;
    int epi[OPS_GROUP_MAX_NODES];
} gemv_info;

typedef struct gemv_plan {
    int threads, tpr, rows, vec, load;
    int math, ksplit;
    int depth;  /* mma: k steps a lane keeps in flight */
    int regs;   /* mma: registers a thread needs (estimated) */
    int ntiles; /* mma: 8-token tiles */
    int64_t rows_per_block, grid;
} gemv_plan;

extern const ops_knob gemv_knobs[N_KNOBS];

/* plan.c: whether grp is a gemv group (filling *in), and the plan of schedule s for it: NULL, or
 * the prune reason. */
bool gemv_analyse(const ops_group *grp, gemv_info *in);
bool gemv_matches(const ops_group *grp);
const char *gemv_plan_make(const gemv_info *in, const ops_schedule *s, const ops_device *dev,
                           gemv_plan *p);
const char *gemv_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev);

/* emit.c */
int gemv_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev, ops_emitted *out,
              ops_diag *d);

/* The kernels, after the constants and kt_gemv_store: entry is the kernel's name, params its
 * parameter list, call the arguments kt_gemv_store passes on. ffma.c: the vector form (y = A x)
 * and the decode form (y = X A^T); mma.c: the tensor-core kernel of both. */
void gemv_emit_ffma_vector(kt_buf *b, const gemv_info *in, const gemv_plan *p, const char *entry,
                           const char *params, const char *call);
void gemv_emit_ffma_decode(kt_buf *b, const gemv_info *in, const gemv_plan *p, const char *entry,
                           const char *params, const char *call);
void gemv_emit_mma(kt_buf *b, const gemv_info *in, const gemv_plan *p, const char *entry,
                   const char *params, const char *call);

/* cost.c */
void gemv_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                   ops_estimate *e);
