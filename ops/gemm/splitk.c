/* gemm family: split-K: serial and cluster hand-offs, the parallel mode's reduction kernel
 * (ops/gemm/gemm.h lists the files). */
#include "gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Serial split-K: the hand-off between the slices of one tile. Progress: slice s waits only for
 * slices 0 .. s - 1 of its tile, and those have lower linear block indices (slice is the fastest
 * part of blockIdx.x). The lowest-indexed unfinished block therefore never waits on an unfinished
 * block, so some block always makes progress as long as blocks are resident in index order; and
 * pruning keeps the whole grid within one block per SM, so every block is resident at once
 * whatever order the hardware starts them in. */
void gemm_emit_serial_helpers(const gemm_emit *e)
{
    kt_buf *b = e->b;
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* ---- serial split-K hand-off ----");
    kt_buf_line(b, " * The SPLITK blocks of a tile (adjacent blockIdx.x, slice fastest) each sum "
                   "their k slice, then take");
    kt_buf_line(b, " * turns in slice order on the tile's semaphore: slice s waits until sem == s, "
                   "adds the running sum");
    kt_buf_line(b, " * (slice 0 has none), and either stores it and sets sem = s + 1 or, being the "
                   "last, applies the");
    kt_buf_line(b, " * epilogue. The sum order is fixed, so results are deterministic. No "
                   "deadlock: a slice waits only");
    kt_buf_line(b, " * for lower slices, which have lower block indices and so are started first, "
                   "and the whole grid");
    kt_buf_line(b, " * fits on the GPU at one block per SM. Running sums bypass L1 (.cg): another "
                   "SM wrote them");
    kt_buf_line(b, " * (ktune/memory.cuh: kt_ld_cg, kt_st_cg, the semaphore's kt_sem_wait and "
                   "kt_sem_pass). */");
}

void gemm_emit_cluster_helpers(const gemm_emit *e)
{
    kt_buf_printf(e->b, "\n");
    kt_buf_line(e->b, "/* ---- cluster split-K ----");
    kt_buf_line(e->b, " * The SPLITK blocks of a tile (adjacent blockIdx.x, slice fastest) are one "
                      "thread-block cluster");
    kt_buf_line(e->b, " * (__cluster_dims__), so block rank = slice. Each writes its fp32 partial "
                      "tile into its shared memory");
    kt_buf_line(e->b, " * in register order; after a cluster barrier, slice r sums the partials of "
                      "the mma tiles (i, j) with");
    kt_buf_line(e->b, " * (i * NI + j) %% SPLITK == r over slices 0, 1, ... in order "
                      "(deterministic), reading the others'");
    kt_buf_line(e->b, " * shared memory, and stores them through the epilogue. A second barrier "
                      "keeps every block's shared");
    kt_buf_line(e->b, " * memory alive until the others have read it. */");
}

/* A loop over the thread's accumulator tiles running `tc` (mma paths: acc[i][j][0..3]) or `ffma`
 * (acc[i][j]) for each: the split-K modes keep partial tiles in this register order. */
static void emit_acc_copy(const gemm_emit *e, const char *tc, const char *ffma)
{
    kt_buf *b = e->b;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %s; i++)", e->c->tc ? "MI" : "TM");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < %s; j++)", e->c->tc ? "NI" : "TN");
    kt_buf_line(b, "        %s", e->c->tc ? tc : ffma);
}

/* Serial split-K, after the k loop: wait for this slice's turn, add the running sum of the
 * lower slices to the accumulators, then either store the sum and pass the turn on (returning)
 * or, in the last slice, fall through to the epilogue. */
void gemm_emit_serial_epilogue(const gemm_emit *e)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    const char *ni = c->tc ? "NI" : "TN";
    kt_buf_line(b, "/* Serial split-K: add the lower slices' running sum in slice order. */");
    kt_buf_line(b, "unsigned char *wsb = static_cast<unsigned char *>(workspace);");
    kt_buf_line(b, "int *sem = reinterpret_cast<int *>(wsb) + bz * (TILES_M * TILES_N) + pid;");
    kt_buf_line(b,
                "float *run = reinterpret_cast<float *>(wsb + ACC_OFFSET) + ((idx_t)bz * (TILES_M "
                "* TILES_N) + pid) * (BM * BN) + threadIdx.x%s;",
                c->tc ? " * 4" : "");
    kt_buf_line(b, "if (slice > 0) {");
    b->indent = 8;
    kt_buf_line(b, "kt_sem_wait(sem, slice);");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %s; i++) {", c->tc ? "MI" : "TM");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < %s; j++) {", ni);
    b->indent = 16;
    if (c->tc) {
        kt_buf_line(b, "const float4 v = kt_ld_cg4(run + (i * NI + j) * THREADS * 4);");
        kt_buf_line(b, "acc[i][j][0] += v.x;");
        kt_buf_line(b, "acc[i][j][1] += v.y;");
        kt_buf_line(b, "acc[i][j][2] += v.z;");
        kt_buf_line(b, "acc[i][j][3] += v.w;");
    } else {
        kt_buf_line(b, "acc[i][j] += kt_ld_cg(run + (i * TN + j) * THREADS);");
    }
    b->indent = 8;
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "if (slice < SPLITK - 1) {");
    b->indent = 8;
    emit_acc_copy(e,
                  "kt_st_cg4(run + (i * NI + j) * THREADS * 4, acc[i][j][0], acc[i][j][1], "
                  "acc[i][j][2], acc[i][j][3]);",
                  "kt_st_cg(run + (i * TN + j) * THREADS, acc[i][j]);");
    kt_buf_line(b, "kt_sem_pass(sem, slice + 1);");
    kt_buf_line(b, "return;");
    b->indent = 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "/* The last slice holds the full sum: the epilogue. */");
}

/* Cluster split-K, after the k loop: every slice's partial tile into its shared memory, then
 * each slice sums its share of the mma (or thread) tiles over the cluster, in slice order, into
 * its accumulators; the store loop that follows stores that share only. */
void gemm_emit_cluster_epilogue(const gemm_emit *e)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    const char *ni = c->tc ? "NI" : "TN";
    kt_buf_line(b, "/* Cluster split-K: sum the slices' partial tiles through shared memory. */");
    kt_buf_line(b, "__syncthreads(); /* every warp is done with the pipeline's tiles */");
    kt_buf_line(b, "float *part_s = reinterpret_cast<float *>(kt_smem) + threadIdx.x%s;",
                c->tc ? " * 4" : "");
    emit_acc_copy(e,
                  "*reinterpret_cast<float4 *>(part_s + (i * NI + j) * THREADS * 4) = "
                  "make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]);",
                  "part_s[(i * TN + j) * THREADS] = acc[i][j];");
    kt_buf_line(b, "kt_cluster_sync(); /* every slice's partial is in place */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %s; i++) {", c->tc ? "MI" : "TM");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < %s; j++) {", ni);
    b->indent = 12;
    kt_buf_line(b, "if ((i * %s + j) %% SPLITK != slice)", ni);
    kt_buf_line(b, "    continue;");
    if (c->tc) {
        kt_buf_line(b, "float *const at = part_s + (i * NI + j) * THREADS * 4;");
        kt_buf_line(b, "float4 sum = kt_ld_cluster4(kt_cluster_addr(at, 0));");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int r = 1; r < SPLITK; r++) {");
        kt_buf_line(b, "    const float4 v = kt_ld_cluster4(kt_cluster_addr(at, r));");
        kt_buf_line(b, "    sum.x += v.x;");
        kt_buf_line(b, "    sum.y += v.y;");
        kt_buf_line(b, "    sum.z += v.z;");
        kt_buf_line(b, "    sum.w += v.w;");
        kt_buf_line(b, "}");
        kt_buf_line(b, "acc[i][j][0] = sum.x;");
        kt_buf_line(b, "acc[i][j][1] = sum.y;");
        kt_buf_line(b, "acc[i][j][2] = sum.z;");
        kt_buf_line(b, "acc[i][j][3] = sum.w;");
    } else {
        kt_buf_line(b, "float *const at = part_s + (i * TN + j) * THREADS;");
        kt_buf_line(b, "float sum = kt_ld_cluster(kt_cluster_addr(at, 0));");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int r = 1; r < SPLITK; r++)");
        kt_buf_line(b, "    sum += kt_ld_cluster(kt_cluster_addr(at, r));");
        kt_buf_line(b, "acc[i][j] = sum;");
    }
    b->indent = 4;
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    kt_buf_line(b, "kt_cluster_sync(); /* the other slices are done reading this one */");
}

int64_t gemm_reduce_items(const gemm_problem *p)
{
    int64_t total = p->batch * p->M * p->N;
    return p->N % 2 == 0 ? total / 2 : total;
}

void gemm_emit_reduce_kernel(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    kt_buf *b = e->b;
    bool pair = p->N % 2 == 0;
    kt_buf args = {0};
    gemm_emit_store_args(e, &args);
    kt_buf_printf(b, "\n");
    kt_buf_line(
        b,
        "/* Split-K reduction: sums the SPLITK fp32 partials of %s in slice order (deterministic),",
        pair ? "two adjacent elements" : "one element");
    kt_buf_line(b, " * then applies the epilogue. */");
    kt_buf_printf(b,
                  "extern \"C\" __global__ void __launch_bounds__(%d) ktune_gemm_splitk_reduce%s",
                  REDUCE_THREADS, e->p->grp->entry_suffix);
    gemm_emit_kernel_params(e, true);
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "{");
    b->indent = 4;
    kt_buf_line(b, "const float *__restrict__ ws = static_cast<const float *>(workspace);");
    kt_buf_line(b, "constexpr idx_t TOTAL = (idx_t)BATCH * M * N;");
    kt_buf_line(b, "const idx_t e = ((idx_t)blockIdx.x * %d + threadIdx.x)%s;", REDUCE_THREADS,
                pair ? " * 2" : "");
    kt_buf_line(b, "if (e >= TOTAL)");
    kt_buf_line(b, "    return;");
    if (pair) {
        kt_buf_line(b, "float s0 = 0.0f, s1 = 0.0f;");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int s = 0; s < SPLITK; s++) {");
        kt_buf_line(b,
                    "    const float2 v = *reinterpret_cast<const float2 *>(ws + s * TOTAL + e);");
        kt_buf_line(b, "    s0 += v.x;");
        kt_buf_line(b, "    s1 += v.y;");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "float s0 = 0.0f;");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int s = 0; s < SPLITK; s++)");
        kt_buf_line(b, "    s0 += ws[s * TOTAL + e];");
    }
    kt_buf_line(b, "const int n = (int)(e %% N), m = (int)(e / N %% M), bz = (int)(e / ((idx_t)M "
                   "* N));");
    if (pair)
        kt_buf_line(b, "ktg_store2(%s, bz, m, n, s0, s1);", args.data ? args.data : "");
    else
        kt_buf_line(b, "ktg_store(%s, bz, m, n, s0);", args.data ? args.data : "");
    kt_buf_free(&args);
    b->indent = 0;
    kt_buf_line(b, "}");
}
