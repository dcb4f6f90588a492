/* gemm family: the Hopper 16-bit kernel, TMA loads and warp-specialised wgmma (ops/gemm/gemm.h
 * lists the files). */
#include "gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- mma=wgmma and mma=wgmma_pingpong on f16/bf16 data ----
 *
 * A persistent kernel: one block per SM (at most) walks the output tiles blockIdx.x, + gridDim.x,
 * ... (each tile BM x BN of one batch, ordered by ktg_raster), with 1 + CONSUMERS warpgroups:
 *   - warpgroup 0, the producer, gives its registers away (setmaxnreg.dec) and one of its threads
 *     walks the block's tiles and their k loops issuing TMA copies (cp.async.bulk.tensor) of the
 *     A and B tiles of each k tile into the next stage of a ring in shared memory, 64 halves of
 *     k (128 bytes) a row, in the hardware's 128-byte swizzle, completing on the stage's full
 *     barrier; the ring runs on across tiles, so the next tile's first stages load while the
 *     consumers finish the last one;
 *   - the consumer warpgroups take the registers (setmaxnreg.inc) and issue m64nBNk16 wgmmas with
 *     both operands read from shared memory through descriptors. Cooperative (mma=wgmma): the wm
 *     consumers split every tile's rows, consumer c owning rows c * BM / CONSUMERS .. + BM /
 *     CONSUMERS as MT m64 slabs. Ping-pong (mma=wgmma_pingpong): two consumers, each a whole
 *     tile (MT = BM / 64 slabs), taking the block's tiles in turn; a named barrier hands the
 *     tensor cores from one to the other when its k loop ends, so one runs its epilogue while
 *     the other computes. Once a stage's wgmmas have retired, its consumer warps arrive on the
 *     stage's empty barrier, which hands the stage back to the producer;
 *   - the epilogue (gemm_emit_epilogue's chain) runs on the consumer's fp32 sums in registers and
 *     stores to global memory with edge masks.
 * Ragged M, N and K need no special loads: TMA reads elements past the tensor's edges as zeros (and
 * still counts their bytes on the barrier). Operand orientation costs nothing: an operand whose
 * rows run along K (A [M][K], B [N][K]) is K-major, one whose rows run along M or N (A [K][M], B
 * [K][N]) is MN-major, told to the wgmma by its transpose flag; neither is copied.
 *
 * Barrier phases: the ring's k tiles are numbered across the block's tiles (it); k tile it uses
 * stage it % STAGES for the (it / STAGES)-th time, so its full phase has parity (it / STAGES) & 1
 * and the release of the stage's previous use completes the empty phase of parity
 * (it / STAGES - 1) & 1. A parity names the current phase or the one before, so every waiter
 * must have seen the stage's previous use complete: true of the producer and of cooperative
 * consumers (each walks every k tile), and of ping-pong consumers because each starts its k loop
 * only after the other's has ended (the named barrier).
 *
 * mcast = 2: clusters of two blocks walk pairs of vertically adjacent tiles, which share their B
 * tile; each block loads its own A and half of B, multicast to both (B's L2 reads halved). A
 * stage is then refilled only once both blocks' consumers released it (each releases it in
 * both: the empty barriers count both), and a producer stays until every release aimed at its
 * block has arrived.
 *
 * store=tma: each consumer stages its epilogue's tile in shared memory (128-byte swizzle) and one
 * thread stores it by TMA, which overlaps the next tile's k loop.
 *
 * Split-K (for shapes with fewer tiles than SMs), each slice an equal run of k tiles, results
 * deterministic either way. Parallel mode: every tile is SPLITK units; a unit's consumers store
 * their fp32 sums into the slice's plane of the workspace, and the reduction kernel (splitk.c)
 * adds the planes in slice order and applies the epilogue. Cluster mode: a tile's slices are a
 * cluster of SPLITK blocks (rank = slice) that hand their partial tiles over in shared memory on
 * release/acquire mbarriers (ready, freed); each block sums its share of the pieces over the
 * ranks in order and runs the epilogue on it. */

/* The 16-bit path's schedule: whether an operand (0 A, 1 B) is K-major in shared memory. */
static bool kmajor(const gemm_problem *p, int k)
{
    return k == 0 ? !p->trans[0] : p->trans[1];
}

/* The operand's batch dims hold one matrix per output batch index (flat index bz), or one for
 * all (a 2-D tensor map); anything else (a partial broadcast) is not addressed by bz. */
static int batch_mode(const gemm_problem *p, int k)
{
    int64_t n = ops_shape_numel(&p->opb[k]);
    return n == 1 ? 1 : n == p->batch ? 2 : 0; /* 1: one matrix, 2: one per bz, 0: neither */
}

/* The prune rules of the knobs up to wn (see gemm_prune_prefix): they hold for both schedules
 * (ping-pong reads wm = 1 only). */
const char *gemm_wgmma16_prefix_why(const gemm_problem *p, const gemm_cfg *c, const ops_device *dev)
{
    if (dev->sm_major < 9)
        return "shape"; /* wgmma and setmaxnreg are sm_90a */
    if (p->dt != OPS_DT_F16 && p->dt != OPS_DT_BF16)
        return "shape"; /* 16-bit data: TMA copies it as stored */
    if (c->math != (p->dt == OPS_DT_F16 ? MATH_F16 : MATH_BF16))
        return "shape";
    /* TMA copies the stored bytes: no prologue conversion */
    for (int k = 0; k < 2; k++)
        if (p->src_dt[k] != p->dt || !gemm_cast_is_identity(p, k) || !batch_mode(p, k))
            return "shape";
    /* (tensor-map rows, the contiguous dimension, must be multiples of 16 bytes: an operand
     * whose rows are not is copied into padded rows first, gemm_wgmma16_configure) */
    if (c->bk != 64) /* one 128-byte swizzle row of k */
        return "shape";
    if (c->bm < 64 || c->bn < 64 || c->wm > 2 || c->bm / c->wm < 64 || c->bm / c->wm > 128)
        return "shape"; /* m64 slabs, one or two per consumer warpgroup; n64..256 wgmmas */
    if (c->wn != 1)
        return "redundant"; /* a knob this kernel does not read */
    if (c->bm / c->wm / 64 * c->bn * p->nb > 256)
        return "regs"; /* over 128 fp32 sums a consumer thread (a dual group's wgmma is 2 BN wide)
                        */
    if ((c->bm > 64 && c->bm / 2 >= p->M) || (c->bn > 64 && c->bn / 2 >= p->N))
        return "shape"; /* a tile at least twice the matrix: the smaller one covers it */
    return NULL;
}

void gemm_wgmma16_configure(const gemm_problem *p, const ops_schedule *s, const ops_device *dev,
                            gemm_cfg *c)
{
    c->wg16 = true;
    c->pingpong = s->v[KN_MMA] == MMA_WGMMA_PINGPONG;
    c->mcast = s->v[KN_MCAST];
    c->consumers = c->pingpong ? 2 : c->wm;
    c->tma_store = s->v[KN_STORE] == STORE_TMA;
    int rows = c->pingpong ? c->bm : c->bm / c->wm; /* a consumer's rows of a tile */
    int64_t osize = (int64_t)ops_dtype_size(p->g->tensors[p->out].dtype);
    c->mt = rows / 64 > 0 ? rows / 64 : 1;
    c->threads = 128 * (1 + c->consumers);
    c->wtm = rows;
    c->wtn = c->bn;
    c->op[0].vb = c->op[1].vb = 16; /* no register-path loads (the cost model reads vb) */
    for (int k = 0; k < 1 + p->nb; k++) {
        int64_t mn = k == 0 ? p->M : p->N;
        int64_t inner = kmajor(p, k) ? p->K : mn, outer = kmajor(p, k) ? mn : p->K;
        c->pad[k] = inner % 8 != 0;
        c->pad_stride[k] = (inner + 7) / 8 * 8;
        c->pad_rows[k] = outer * (batch_mode(p, k) == 2 ? p->batch : 1);
    }
    int64_t per16 = 16 / osize; /* output elements in 16 bytes */
    c->pad_out = c->tma_store && p->N % per16 != 0;
    c->pad_out_stride = (p->N + per16 - 1) / per16 * per16;
    /* the ring's stages, each consumer's output tile (store=tma), 1024 bytes of alignment slack,
     * a full and an empty barrier per stage */
    c->smem_bytes = (int64_t)c->stages * (c->bm + p->nb * c->bn) * 128 +
                    (c->tma_store ? c->consumers * rows * c->bn * osize : 0) + 1024 +
                    16 * c->stages;
    if (c->cluster) /* the fp32 partial tile the cluster's slices sum, two more barriers */
        c->smem_bytes += (int64_t)c->bm * c->bn * 4 + 16;
    /* the consumer's fp32 sums and ~48 for addresses, descriptors and the epilogue; with two
     * consumers the block starts at 65536 / 384 = 168 and setmaxnreg moves them (40 / 232) */
    c->regs = c->consumers == 2 ? 168 : c->mt * c->bn * p->nb / 2 + 48;
    int64_t tiles = c->tiles_m * c->tiles_n * p->batch;
    /* stream-K: units (tiles, or multicast pairs) and the clusters walking them; the units past
     * the whole waves are shared out (all of them when there are fewer than clusters). Only
     * those: sharing out a whole wave more (CUTLASS's hybrid) spreads the clusters' concurrent
     * k positions over twice the units, a working set past L2 at bf16 4096^3 (measured on the
     * H200 there: 11% slower than data-parallel, bench/results/h200-2026-11-28-i19-streamk/) */
    int64_t units = gemm_cdiv(c->tiles_m, c->mcast) * c->tiles_n * p->batch;
    int64_t slots = dev->sm_count / c->mcast;
    if (c->stream) {
        c->sk_units = units < slots ? units : units % slots;
        c->sk_blocks = slots * c->mcast;
    }
    const char *prefix_why = gemm_wgmma16_prefix_why(p, c, dev);
    if (prefix_why)
        c->why = prefix_why;
    else if (s->v[KN_MMA] == MMA_WGMMA_SPLIT)
        c->why = "shape"; /* wgmma_split is tf32x3's */
    else if (c->splitk != 1 && (p->nb == 2 || c->serial))
        c->why = "shape"; /* split-K here is the parallel or the cluster mode; a dual group's two
                             sums have no reduction */
    else if (c->stream && (c->splitk != 1 || c->pingpong))
        c->why = c->pingpong ? "shape" : "redundant"; /* stream-K sets each unit's split; its
                                                          consumers share every unit */
    else if (c->stream && units % slots == 0)
        c->why = "redundant"; /* whole waves: nothing to even out */
    else if (c->stream &&
             (c->sk_units * c->ktiles < 2 * slots || c->sk_units * c->ktiles >= ((int64_t)1 << 31)))
        c->why = "shape"; /* under two k tiles a block */
    else if (c->cluster && (c->pingpong || c->mcast != 1))
        c->why = "shape"; /* cluster split-K: cooperative consumers, the cluster its slices */
    else if (c->splitk != 1 &&
             (c->ktiles % c->splitk || c->kps < 2 || (c->cluster && c->mt * c->bn / 8 % c->splitk)))
        c->why = "divisibility"; /* every slice the same k loop, of two k tiles at least (and
                                    with a cluster the same share of the tile) */
    else if (c->splitk != 1 && tiles * (c->splitk / 2) >= dev->sm_count)
        c->why = "redundant"; /* half as many slices already fill the GPU */
    else if (c->splitk != 1 && c->tma_store)
        c->why = "redundant"; /* the partial sums are stored directly */
    else if (c->smem != SMEM_XOR ||
             (c->splitk == 1 && !c->stream && s->v[KN_SPLITK_MODE] != SPLITK_PARALLEL) ||
             (c->pingpong && c->wm != 1))
        c->why = "redundant"; /* knobs this kernel does not read */
    else if (c->pingpong && tiles * c->splitk <= dev->sm_count)
        c->why = "redundant"; /* a tile per block: the second consumer would idle */
    else if (c->mcast == 2 && (c->tiles_m < 2 || dev->sm_count % 2))
        c->why = "redundant"; /* one tile row: no block to share B with */
    else if (c->smem_bytes > dev->smem_per_block_optin)
        c->why = "smem";
    else if (c->stages > 2 && c->stages > c->kps)
        c->why = "redundant"; /* a ring deeper than the k loop */
    else if (gemm_raster_redundant(c, dev))
        c->why = "redundant";
    else if (tiles >= ((int64_t)1 << 31))
        c->why = "shape";
}

/* The tensor map of operand k: its global matrix (batch of them) and the box one copy moves, 64
 * halves of the contiguous dimension (128 bytes, the swizzle's row) by the tile's other extent
 * (K-major: BM or BN rows of k) or by 64 k rows (MN-major: one 64-wide block a copy). */
static void tensor_map(const gemm_problem *p, const gemm_cfg *c, int k, ops_tensor_map *m)
{
    int64_t mn = k == 0 ? p->M : p->N;
    bool km = kmajor(p, k);
    /* a multicast B is loaded half by each block of the cluster: half the K-major rows */
    uint32_t rows = km ? (uint32_t)(k == 0 ? c->bm : c->bn / c->mcast) : 64;
    ops_tensor_map_swizzled(m, p->dt, (uint64_t)(km ? p->K : mn), (uint64_t)(km ? mn : p->K),
                            batch_mode(p, k) == 2 ? p->batch : 1, 64, rows);
    if (c->pad[k]) { /* the padded copy: the same dims (zeros past them), wider rows */
        m->strides[0] = (uint64_t)c->pad_stride[k] * 2;
        if (m->rank == 3)
            m->strides[1] = m->strides[0] * (uint64_t)(km ? mn : p->K);
    }
}

int64_t gemm_wgmma16_pad_layout(const gemm_problem *p, gemm_cfg *c, int64_t base)
{
    int64_t end = base;
    for (int k = 0; k < 1 + p->nb; k++) {
        if (!c->pad[k])
            continue;
        c->pad_off[k] = (end + 255) / 256 * 256;
        end = c->pad_off[k] + c->pad_rows[k] * c->pad_stride[k] * 2;
    }
    if (c->pad_out) {
        c->pad_out_off = (end + 255) / 256 * 256;
        end = c->pad_out_off + p->batch * p->M * c->pad_out_stride *
                                   (int64_t)ops_dtype_size(p->g->tensors[p->out].dtype);
    }
    return end;
}

/* The frame of the padding and unpadding copies: a comment, the entry (the group's parameters,
 * so one launch plan serves all its kernels), then a grid-stride loop over 16-byte words (i). */
static void copy_kernel_open(const gemm_emit *e, const char *what, const char *entry)
{
    kt_buf *b = e->b;
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* %s */", what);
    kt_buf_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) ktune_gemm_%s%s",
                  PAD_THREADS, entry, e->p->grp->entry_suffix);
    gemm_emit_kernel_params(e, true);
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "{");
    b->indent = 4;
}

static void copy_kernel_loop(kt_buf *b, int64_t words)
{
    kt_buf_line(b, "for (long long i = (long long)blockIdx.x * %d + threadIdx.x; i < %lldLL; "
                   "i += (long long)gridDim.x * %d) {",
                PAD_THREADS, (long long)words, PAD_THREADS);
    b->indent = 8;
}

static void copy_kernel_close(kt_buf *b)
{
    b->indent = 4;
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_line(b, "}");
}

/* The padded output rows (store=tma, c->pad_out) copied into the output, by the output's own
 * 16-byte words: a thread gathers the word's elements from the padded rows (scalar loads, the
 * warp's together contiguous but at row ends, so L1 serves them) and stores the word whole. The
 * other way round, a 16-byte load and an element-wise store each, cost every element its own
 * partial-sector write to L2: slower than storing the output directly from the GEMM at 4093^2.
 * The last word, past the end of the tensor, goes element by element. */
void gemm_emit_unpad_kernel(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    int osize = ops_dtype_size(p->g->tensors[p->out].dtype);
    int per16 = 16 / osize;
    const char *word = osize == 2 ? "unsigned short" : "unsigned int";
    int64_t rows = p->batch * p->M, total = rows * p->N;
    char what[160];
    snprintf(what, sizeof(what),
             "The output's %lld rows of %lld elements, stored by TMA %lld apart in the "
             "workspace, copied into place.",
             (long long)rows, (long long)p->N, (long long)c->pad_out_stride);
    copy_kernel_open(e, what, "unpad_c");
    kt_buf_line(b, "const %s *__restrict__ src = reinterpret_cast<const %s *>(static_cast<const "
                   "char *>(workspace) + %lld);",
                word, word, (long long)c->pad_out_off);
    kt_buf_line(b, "%s *__restrict__ dst = reinterpret_cast<%s *>(%s);", word, word,
                e->names[p->grp->n_in]);
    copy_kernel_loop(b, (total + per16 - 1) / per16);
    kt_buf_line(b, "const long long e0 = i * %d; /* the word's first element */", per16);
    kt_buf_line(b, "long long r = e0 / %lld, col = e0 - r * %lld;", (long long)p->N,
                (long long)p->N);
    kt_buf_line(b, "%s w[%d];", word, per16);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int q = 0; q < %d; q++) {", per16);
    kt_buf_line(b, "    w[q] = e0 + q < %lldLL ? src[r * %lld + col] : 0;", (long long)total,
                (long long)c->pad_out_stride);
    kt_buf_line(b, "    if (++col == %lld) {", (long long)p->N);
    kt_buf_line(b, "        col = 0;");
    kt_buf_line(b, "        r++;");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    kt_buf_line(b, "if (e0 + %d <= %lldLL) {", per16, (long long)total);
    if (osize == 2)
        kt_buf_line(b, "    reinterpret_cast<uint4 *>(dst)[i] = make_uint4(w[0] | (unsigned)w[1] << "
                       "16, w[2] | (unsigned)w[3] << 16, w[4] | (unsigned)w[5] << 16, w[6] | "
                       "(unsigned)w[7] << 16);");
    else
        kt_buf_line(b, "    reinterpret_cast<uint4 *>(dst)[i] = make_uint4(w[0], w[1], w[2], w[3]);");
    kt_buf_line(b, "} else { /* unrolled, so that w stays in registers */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "    for (int q = 0; q < %d; q++)", per16);
    kt_buf_line(b, "        if (e0 + q < %lldLL)", (long long)total);
    kt_buf_line(b, "            dst[e0 + q] = w[q];");
    kt_buf_line(b, "}");
    copy_kernel_close(b);
}

/* Operand k's rows re-strided: element j of row r to r * PADDED + j, a thread a 16-byte store of
 * 8 elements of a padded row (past the row's end zeros, which the tensor map never reads: its
 * dims stop there). The source rows start only 2-byte aligned, so the thread reads the two
 * aligned 16-byte words around its 8 elements and shifts them into place (the warp's loads are
 * then whole, coalesced lines); the last few elements of the tensor, where the second word would
 * pass its end, go element by element. 16-bit elements moved as raw bits. */
void gemm_emit_pad_kernel(const gemm_emit *e, int k)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    int64_t inner = kmajor(p, k) ? p->K : (k == 0 ? p->M : p->N);
    int64_t vecs = c->pad_stride[k] / 8; /* 16-byte stores a padded row */
    int64_t total = c->pad_rows[k] * inner * 2;
    char what[160];
    snprintf(what, sizeof(what),
             "%s's %lld rows of %lld elements, not a 16-byte multiple, copied %lld apart for its "
             "tensor map.",
             k == 0 ? "A" : k == 1 ? "B" : "B2", (long long)c->pad_rows[k], (long long)inner,
             (long long)c->pad_stride[k]);
    copy_kernel_open(e, what, k == 0 ? "pad_a" : k == 1 ? "pad_b" : "pad_b2");
    kt_buf_line(b, "const unsigned char *__restrict__ src = reinterpret_cast<const unsigned char "
                   "*>(%s);",
                gemm_in_name(e, p->src[k]));
    kt_buf_line(b, "uint4 *__restrict__ dst = reinterpret_cast<uint4 *>(static_cast<char "
                   "*>(workspace) + %lld);",
                (long long)c->pad_off[k]);
    copy_kernel_loop(b, c->pad_rows[k] * vecs);
    kt_buf_line(b, "const long long r = i / %lld, j = (i - r * %lld) * 8;", (long long)vecs,
                (long long)vecs);
    kt_buf_line(b, "const long long at = (r * %lld + j) * 2; /* the first element's byte */",
                (long long)inner);
    kt_buf_line(b, "const long long base = at & ~15LL;");
    kt_buf_line(b, "unsigned int o0, o1, o2, o3;");
    kt_buf_line(b, "if (base + 32 <= %lldLL) {", (long long)total);
    b->indent = 12;
    kt_buf_line(b, "const uint4 lo = __ldg(reinterpret_cast<const uint4 *>(src + base));");
    kt_buf_line(b, "const uint4 hi = __ldg(reinterpret_cast<const uint4 *>(src + base + 16));");
    kt_buf_line(b, "unsigned int w0 = lo.x, w1 = lo.y, w2 = lo.z, w3 = lo.w, w4 = hi.x, w5 = hi.y, "
                   "w6 = hi.z, w7 = hi.w;");
    kt_buf_line(b, "const int words = (int)(at & 15) >> 2; /* whole words to skip, then maybe a "
                   "half */");
    kt_buf_line(b, "if (words & 2) {");
    kt_buf_line(b, "    w0 = w2; w1 = w3; w2 = w4; w3 = w5; w4 = w6; w5 = w7;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "if (words & 1) {");
    kt_buf_line(b, "    w0 = w1; w1 = w2; w2 = w3; w3 = w4; w4 = w5;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "const bool half = (at & 2) != 0;");
    kt_buf_line(b, "o0 = half ? __funnelshift_r(w0, w1, 16) : w0;");
    kt_buf_line(b, "o1 = half ? __funnelshift_r(w1, w2, 16) : w1;");
    kt_buf_line(b, "o2 = half ? __funnelshift_r(w2, w3, 16) : w2;");
    kt_buf_line(b, "o3 = half ? __funnelshift_r(w3, w4, 16) : w3;");
    b->indent = 8;
    kt_buf_line(b, "} else { /* the tensor's end: element by element */");
    b->indent = 12;
    kt_buf_line(b, "const unsigned short *s = reinterpret_cast<const unsigned short *>(src + at);");
    kt_buf_line(b, "unsigned int h[8];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int q = 0; q < 8; q++)");
    kt_buf_line(b, "    h[q] = j + q < %lld ? s[q] : 0u;", (long long)inner);
    kt_buf_line(b, "o0 = h[0] | h[1] << 16;");
    kt_buf_line(b, "o1 = h[2] | h[3] << 16;");
    kt_buf_line(b, "o2 = h[4] | h[5] << 16;");
    kt_buf_line(b, "o3 = h[6] | h[7] << 16;");
    b->indent = 8;
    kt_buf_line(b, "}");
    kt_buf_line(b, "if (j + 8 > %lld) { /* the row's last vector: zeros past its end (the next "
                   "row's elements) */",
                (long long)inner);
    b->indent = 12;
    kt_buf_line(b, "const int keep = (int)(%lld - j); /* 1..7 elements */", (long long)inner);
    kt_buf_line(b, "o0 = keep >= 2 ? o0 : o0 & 0xffffu;");
    kt_buf_line(b, "o1 = keep >= 4 ? o1 : keep == 3 ? o1 & 0xffffu : 0u;");
    kt_buf_line(b, "o2 = keep >= 6 ? o2 : keep == 5 ? o2 & 0xffffu : 0u;");
    kt_buf_line(b, "o3 = keep == 7 ? o3 & 0xffffu : 0u;");
    b->indent = 8;
    kt_buf_line(b, "}");
    kt_buf_line(b, "dst[i] = make_uint4(o0, o1, o2, o3);");
    copy_kernel_close(b);
}

void gemm_pad_launch(const gemm_problem *p, const gemm_cfg *c, int k, const ops_device *dev,
                     ops_kernel_launch *l)
{
    memset(l, 0, sizeof(*l));
    snprintf(l->entry, sizeof(l->entry), "ktune_gemm_%s%s",
             k == 0 ? "pad_a" : k == 1 ? "pad_b" : k == 2 ? "pad_b2" : "unpad_c",
             p->grp->entry_suffix);
    int64_t per16 = 16 / ops_dtype_size(p->g->tensors[p->out].dtype);
    int64_t blocks = k == 3 ? gemm_cdiv(gemm_cdiv(p->batch * p->M * p->N, per16), PAD_THREADS)
                            : gemm_cdiv(c->pad_rows[k] * c->pad_stride[k] / 8, PAD_THREADS);
    l->grid[0] = (uint32_t)(blocks < 16 * dev->sm_count ? blocks : 16 * dev->sm_count);
    l->grid[1] = l->grid[2] = 1;
    l->block[0] = PAD_THREADS;
    l->block[1] = l->block[2] = 1;
    for (int i = 0; i < p->grp->n_in; i++)
        l->args[l->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = p->grp->in[i]};
    l->args[l->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = p->out};
    l->args[l->n_args++] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 0};
}

void gemm_wgmma16_fill_args(const gemm_problem *p, const gemm_cfg *c, ops_kernel_launch *k)
{
    k->n_args = 0;
    for (int op = 0; op < 1 + p->nb; op++) { /* A, B (and B2) */
        ops_arg *a = &k->args[k->n_args++];
        memset(a, 0, sizeof(*a));
        a->kind = OPS_ARG_TENSOR_MAP;
        a->tensor = c->pad[op] ? -1 : p->src[op]; /* the padded copy in the workspace */
        a->offset = c->pad[op] ? c->pad_off[op] : 0;
        tensor_map(p, c, op, &a->tmap);
    }
    /* then the kernel's pointer parameters: what the epilogue reads, the output */
    for (int i = 0; i < p->grp->n_in; i++)
        if (gemm_epi_reads(p, p->grp->in[i]))
            k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = p->grp->in[i]};
    if (!c->tma_store) {
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = p->out};
        if (c->parallel || c->stream) /* the slices' partial sums (stream-K: and flags) */
            k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 0};
        return;
    }
    /* store=tma: the output [batch][M][N] as boxes of 128 bytes of n by a consumer's rows, in
     * the 128-byte swizzle its tile in shared memory is written in */
    ops_arg *a = &k->args[k->n_args++];
    memset(a, 0, sizeof(*a));
    a->kind = OPS_ARG_TENSOR_MAP;
    a->tensor = p->out;
    ops_dtype odt = p->g->tensors[p->out].dtype;
    ops_tensor_map_swizzled(&a->tmap, odt, (uint64_t)p->N, (uint64_t)p->M, p->batch,
                            (uint32_t)(128 / ops_dtype_size(odt)),
                            (uint32_t)(c->pingpong ? c->bm : c->bm / c->wm));
    if (c->pad_out) { /* padded rows of the workspace (the map stops at N: no writes past it) */
        a->tensor = -1;
        a->offset = c->pad_out_off;
        a->tmap.strides[0] = (uint64_t)(c->pad_out_stride * ops_dtype_size(odt));
        if (a->tmap.rank == 3)
            a->tmap.strides[1] = a->tmap.strides[0] * (uint64_t)p->M;
    }
    if (c->stream)
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 0};
}

/* Stream-K's workspace: an int flag per block and consumer, padded to 256 bytes (the part cleared
 * before each launch), then a consumer's fp32 partial tile per block and consumer. */
int64_t gemm_stream_flag_bytes(const gemm_cfg *c)
{
    return gemm_cdiv(c->sk_blocks * c->consumers * 4, 256) * 256;
}

int64_t gemm_stream_workspace_bytes(const gemm_problem *p, const gemm_cfg *c)
{
    return gemm_stream_flag_bytes(c) + c->sk_blocks * c->bm * c->bn * p->nb * 4;
}

/* Stream-K's walk: the k tiles of the first SK_UNITS units, in unit order, shared out evenly over
 * the SK_CLUSTERS clusters (blocks, without multicast); then the whole units after them, a
 * cluster each in turn. A cluster's share of the shared k tiles is a run of segments, each one
 * unit's k tiles [kb, ke): only its first can start inside a unit and only its last can end inside
 * one. */
static void emit_stream_walk(const gemm_emit *e)
{
    kt_buf *b = e->b;
    const gemm_cfg *c = e->c;
    kt_buf_line(b, "/* stream-K: the first SK_UNITS units' k tiles shared out evenly, cluster ci "
                   "(of SK_CLUSTERS) taking");
    kt_buf_line(b, " * [ktw_sk_start(ci), ktw_sk_start(ci + 1)) as segments of units, then units "
                   "SK_UNITS + ci, + SK_CLUSTERS, ...");
    kt_buf_line(b, " * whole. A segment that starts inside its unit hands its partial sums to the "
                   "cluster whose segment");
    kt_buf_line(b, " * starts the unit (kb = 0), which adds them and runs the epilogue. */");
    kt_buf_line(b,
                "enum : int { SK_UNITS = %lld, SK_CLUSTERS = %lld, SK_ITERS = SK_UNITS * KTILES };",
                (long long)c->sk_units, (long long)(c->sk_blocks / c->mcast));
    kt_buf_line(b, "__device__ __forceinline__ int ktw_sk_start(int ci)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    return (int)((long long)SK_ITERS * ci / SK_CLUSTERS);");
    kt_buf_line(b, "}");
    kt_buf_line(b, "struct ktw_walk {");
    kt_buf_line(b, "    int s, e, u; /* the shared k tiles left [s, e); the next whole unit */");
    kt_buf_line(b, "};");
    kt_buf_line(b, "__device__ __forceinline__ ktw_walk ktw_walk_start(int ci)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    return ktw_walk{ktw_sk_start(ci), ktw_sk_start(ci + 1), SK_UNITS + ci};");
    kt_buf_line(b, "}");
    kt_buf_line(b, "/* The walk's next segment: unit u, its k tiles [kb, ke); false once done. */");
    kt_buf_line(b,
                "__device__ __forceinline__ bool ktw_next(ktw_walk &w, int &u, int &kb, int &ke)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    if (w.s < w.e) {");
    kt_buf_line(b, "        u = w.s / KTILES;");
    kt_buf_line(b, "        kb = w.s - u * KTILES;");
    kt_buf_line(b, "        ke = w.e - w.s < KTILES - kb ? kb + (w.e - w.s) : KTILES;");
    kt_buf_line(b, "        w.s += ke - kb;");
    kt_buf_line(b, "        return true;");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "    if (w.u >= UNITS)");
    kt_buf_line(b, "        return false;");
    kt_buf_line(b, "    u = w.u;");
    kt_buf_line(b, "    kb = 0;");
    kt_buf_line(b, "    ke = KTILES;");
    kt_buf_line(b, "    w.u += SK_CLUSTERS;");
    kt_buf_line(b, "    return true;");
    kt_buf_line(b, "}");
}

void gemm_emit_wgmma16_helpers(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    bool ka = kmajor(p, 0), kb = kmajor(p, 1);
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* ---- wgmma (16-bit): the stage ring and its descriptors ----");
    kt_buf_line(b, " * A stage is A's tile then B's, 64 halves of k a 128-byte row, as TMA writes "
                   "them in the 128-byte");
    kt_buf_line(b, " * swizzle: 16-byte chunk q of row r at chunk q ^ (r %% 8), each tile "
                   "1024-byte aligned (the");
    kt_buf_line(b, " * swizzle repeats every 8 rows = 1024 bytes, and the hardware takes the row "
                   "from address bits 7-9).");
    kt_buf_line(b, " * K-major operand (A [M][K], B [N][K]): one row per m or n. Descriptor: "
                   "8-row groups 1024 bytes");
    kt_buf_line(b, " *   apart (stride offset), leading offset unused (a k16 step stays in its "
                   "row); k16 step +32 bytes.");
    kt_buf_line(b, " * MN-major operand (A [K][M], B [K][N], transpose flag 1): 64-wide blocks of "
                   "64 k rows, one row");
    kt_buf_line(b, " *   per k. Descriptor: leading offset 8192 bytes (the next 64-wide block "
                   "along m or n), stride");
    kt_buf_line(b, " *   offset 1024 (the next 8 k rows); k16 step +2048 bytes (16 rows).");
    kt_buf_line(b, " * Either way an m64 slab is 8192 bytes on from the previous one. "
                   "Descriptor offsets count 16 bytes. */");
    kt_buf_line(b,
                "enum : int { CONSUMERS = %d, MT = %d, PINGPONG = %d }; /* consumer warpgroups; "
                "m64 slabs per consumer; each its own tile */",
                c->consumers, c->mt, c->pingpong ? 1 : 0);
    /* split-K: every tile (pair) is SPLITK units, unit u its k slice u % SPLITK */
    const char *split = c->parallel ? " * SPLITK" : "";
    if (c->parallel)
        kt_buf_line(b,
                    "/* split-K: the blocks walk (tile, k slice) units, unit u slice u %% SPLITK "
                    "of tile u / SPLITK */");
    if (c->cluster)
        kt_buf_line(b, "/* cluster split-K: clusters of SPLITK blocks walk the tiles, block rank r "
                       "summing k slice r */");
    if (c->mcast == 1) {
        kt_buf_line(b,
                    "enum : int { MCAST = 1, UNITS = TILES_M * TILES_N * BATCH%s }; /* the "
                    "blocks walk the tiles */",
                    split);
        kt_buf_line(b, "/* Tile u (of every batch) -> its first row and column and its batch. */");
        kt_buf_line(b,
                    "__device__ __forceinline__ void ktw_tile(int u, int &m0, int &n0, int &bz)");
        kt_buf_line(b, "{");
        kt_buf_line(b, "    int tile_m, tile_n;");
        kt_buf_line(b, "    bz = u / (TILES_M * TILES_N);");
        kt_buf_line(b, "    ktg_raster(u - bz * (TILES_M * TILES_N), tile_m, tile_n);");
        kt_buf_line(b, "    m0 = tile_m * BM;");
        kt_buf_line(b, "    n0 = tile_n * BN;");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "/* 2-block clusters walk pairs of vertically adjacent tiles (the last pair "
                       "of a ragged column");
        kt_buf_line(b, " * reads zeros past M and stores nothing there), sharing their B tile */");
        kt_buf_line(b,
                    "enum : int { MCAST = 2, PAIRS_M = (TILES_M + 1) / 2, UNITS = PAIRS_M * "
                    "TILES_N * BATCH%s };",
                    split);
        kt_buf_line(b, "/* Pair u (of every batch) -> the first row and column of block rank's "
                       "tile of it and its batch;");
        kt_buf_line(b, " * pairs are rastered like tiles (groups of RASTER pair rows, column by "
                       "column). */");
        kt_buf_line(b, "__device__ __forceinline__ void ktw_tile(int u, int &m0, int &n0, int &bz, "
                       "int rank)");
        kt_buf_line(b, "{");
        kt_buf_line(b, "    bz = u / (PAIRS_M * TILES_N);");
        kt_buf_line(b, "    const int pid = u - bz * (PAIRS_M * TILES_N), per_group = RASTER * "
                       "TILES_N;");
        kt_buf_line(b, "    const int first = pid / per_group * RASTER;");
        kt_buf_line(b, "    const int rows = PAIRS_M - first < RASTER ? PAIRS_M - first : RASTER;");
        kt_buf_line(b, "    m0 = (2 * (first + pid %% per_group %% rows) + rank) * BM;");
        kt_buf_line(b, "    n0 = pid %% per_group / rows * BN;");
        kt_buf_line(b, "}");
    }
    if (c->stream)
        emit_stream_walk(e);
    if (p->nb == 2) {
        kt_buf_line(b, "/* Dual: B2's tile follows B's in a stage, so one wgmma 2 BN wide reads "
                       "both (rows, or 64-wide");
        kt_buf_line(b, " * blocks, BN.. of the B operand): the GEMM over [B | B2], packed by the "
                       "loads; sums j < BN / 8 are");
        kt_buf_line(b, " * the first matmul's, BN / 8 + j the second's of the same element. */");
    }
    kt_buf_line(b, "enum : int { NB = %d, MMA_N = NB * BN }; /* B operands; the wgmma's n */",
                p->nb);
    if (c->stream)
        kt_buf_line(
            b,
            "enum : int { SK_FLAG_FLOATS = %lld, SK_PART = MT * 64 * MMA_N }; /* workspace: "
            "a flag per block and consumer, then a partial slot each */",
            (long long)(gemm_stream_flag_bytes(c) / 4));
    kt_buf_line(b, "enum : int { A_STAGE = BM * 64, B_STAGE = NB * BN * 64 }; /* halves per "
                   "stage */");
    kt_buf_line(b, "enum : unsigned { STAGE_BYTES = (BM + NB * BN) * 128 }; /* a stage's TMA "
                   "bytes, edges included */");
    if (c->tma_store) {
        int osize = (int)ops_dtype_size(p->g->tensors[p->out].dtype);
        kt_buf_line(b, "/* store=tma: each consumer's output tile, C_ROWS x BN, in shared memory "
                       "as BN / C_BOX boxes of C_ROWS");
        kt_buf_line(b, " * rows of 128 bytes (C_BOX columns) in the 128-byte swizzle, stored by "
                       "TMA */");
        kt_buf_line(b,
                    "enum : int { C_ROWS = %d, C_BOX = %d, C_BOX_BYTES = C_ROWS * 128, C_BYTES = "
                    "BN / C_BOX * C_BOX_BYTES };",
                    c->pingpong ? c->bm : c->bm / c->wm, 128 / osize);
    }
    kt_buf_line(b,
                "enum : int { TRANS_A = %d, TRANS_B = %d }; /* wgmma transpose flags: 1 = "
                "MN-major */",
                ka ? 0 : 1, kb ? 0 : 1);
    kt_buf_line(b, "enum : int { A_KSTEP = %d, B_KSTEP = %d }; /* descriptor step of k16 */",
                ka ? 2 : 128, kb ? 2 : 128);
    kt_buf_line(b, "__device__ __forceinline__ unsigned long long ktw_desc_a(const void *p)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    return kt_wgmma_desc(p, %d, 1024, KT_WGMMA_SW128);", ka ? 16 : 8192);
    kt_buf_line(b, "}");
    kt_buf_line(b, "__device__ __forceinline__ unsigned long long ktw_desc_b(const void *p)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    return kt_wgmma_desc(p, %d, 1024, KT_WGMMA_SW128);", kb ? 16 : 8192);
    kt_buf_line(b, "}");
}

/* The producer's copies of operand k (0 A, 1 B, 2 B2) of k tile kt into stage st. With a 2-block
 * cluster, B (and B2) is common to both blocks: each loads half of it (K-major: half the n rows;
 * MN-major: every other 64-wide block) and multicasts it to both. */
static void emit_copies(const gemm_emit *e, int k)
{
    const gemm_problem *p = e->p;
    kt_buf *b = e->b;
    static const char *const maps[] = {"tmap_a", "tmap_b", "tmap_b2"}, *const dsts[] = {"as", "bs",
                                                                                        "bs2"};
    const char *map = maps[k], *dst = dsts[k];
    const char *stage = k == 0 ? "A_STAGE" : "B_STAGE", *mn0 = k == 0 ? "m0" : "n0";
    const char *ext = k == 0 ? "BM" : "BN";
    bool mc = k >= 1 && e->c->mcast == 2;
    char z[16] = "";
    if (batch_mode(p, k) == 2)
        snprintf(z, sizeof(z), ", bz");
    const char *fn = z[0] ? (mc ? "kt_tma_load_3d_mc" : "kt_tma_load_3d")
                          : (mc ? "kt_tma_load_2d_mc" : "kt_tma_load_2d");
    const char *mask = mc ? ", 3" : "";
    if (kmajor(p, k) && mc) {
        kt_buf_line(b,
                    "%s(%s + st * %s + rank * (%s / 2) * 64, &%s, &full[st], k0, %s + rank * (%s / "
                    "2)%s%s); /* half the %s rows, to both blocks */",
                    fn, dst, stage, ext, map, mn0, ext, z, mask, ext);
    } else if (kmajor(p, k)) {
        kt_buf_line(b, "%s(%s + st * %s, &%s, &full[st], k0, %s%s); /* %s rows of 64 k */", fn, dst,
                    stage, map, mn0, z, ext);
    } else {
        kt_buf_line(b, "for (int j = %s; j < %s / 64; j += %s) /* 64-wide blocks of 64 k rows%s */",
                    mc ? "rank" : "0", ext, mc ? "2" : "1",
                    mc ? ", every other one, to both blocks" : "");
        kt_buf_line(b, "    %s(%s + st * %s + j * 4096, &%s, &full[st], %s + 64 * j, k0%s%s);", fn,
                    dst, stage, map, mn0, z, mask);
    }
}

/* Stream-K, after a segment's k loop (in the consumer's loop over segments): a segment that
 * starts inside its unit stores its sums to this block's slot and sets its flag, and goes on to
 * its next segment; one that starts its unit but ends inside it adds the partials of the later
 * clusters whose share starts inside the unit, in cluster order (deterministic), then runs the
 * epilogue. A block hands over one partial at most (only its first segment can start inside a
 * unit), so a slot per block and consumer; the flags are cleared before every launch. The waits
 * go to higher clusters only, which post their partial first thing: no cycle, and the grid (a
 * block per SM) is resident at once. */
static void emit_stream_fixup(const gemm_emit *e)
{
    kt_buf *b = e->b;
    const char *rank = e->c->mcast == 2 ? " + rank" : "";
    kt_buf_line(b, "/* stream-K: hand the partial over, or add the later clusters' (see "
                   "SK_UNITS); partial slot s: SK_PART");
    kt_buf_line(b, " * floats, a float4 per (mt, j) and thread; flag s set once it is written */");
    kt_buf_line(b, "if (kb > 0 || ke < KTILES) {");
    b->indent = 12;
    kt_buf_line(b, "int *const flags = reinterpret_cast<int *>(workspace);");
    kt_buf_line(b, "float *const parts = workspace + SK_FLAG_FLOATS + (tid & 127) * 4;");
    kt_buf_line(b, "if (kb > 0) {");
    kt_buf_line(b, "    const int slot = blockIdx.x * CONSUMERS + cw;");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int mt = 0; mt < MT; mt++)");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int j = 0; j < MMA_N / 8; j++)");
    kt_buf_line(b, "            kt_st_cg4(parts + slot * SK_PART + (mt * (MMA_N / 8) + j) * 512, "
                   "acc[mt][j][0], acc[mt][j][1],");
    kt_buf_line(b, "                      acc[mt][j][2], acc[mt][j][3]);");
    kt_buf_line(b, "    __threadfence();");
    kt_buf_line(b, "    kt_bar_sync(3 + cw, 128); /* the consumer's 128 threads have stored */");
    kt_buf_line(b, "    if ((tid & 127) == 0)");
    kt_buf_line(b, "        kt_st_release_gpu(&flags[slot], 1);");
    kt_buf_line(b, "    continue;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "for (int ci = blockIdx.x / MCAST + 1; ci < SK_CLUSTERS && ktw_sk_start(ci) < "
                   "(u + 1) * KTILES; ci++) {");
    kt_buf_line(b, "    const int slot = (ci * MCAST%s) * CONSUMERS + cw;", rank);
    kt_buf_line(b, "    if ((tid & 127) == 0)");
    kt_buf_line(b, "        kt_spin_until(&flags[slot], 1);");
    kt_buf_line(b, "    kt_bar_sync(3 + cw, 128); /* the acquire, handed to the consumer's "
                   "threads */");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int mt = 0; mt < MT; mt++)");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int j = 0; j < MMA_N / 8; j++) {");
    kt_buf_line(b, "            const float4 v = kt_ld_cg4(parts + slot * SK_PART + (mt * (MMA_N "
                   "/ 8) + j) * 512);");
    kt_buf_line(b, "            acc[mt][j][0] += v.x;");
    kt_buf_line(b, "            acc[mt][j][1] += v.y;");
    kt_buf_line(b, "            acc[mt][j][2] += v.z;");
    kt_buf_line(b, "            acc[mt][j][3] += v.w;");
    kt_buf_line(b, "        }");
    kt_buf_line(b, "}");
    b->indent = 8;
    kt_buf_line(b, "}");
}

void gemm_emit_wgmma16_kernel(const gemm_emit *e, const char *entry)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    const char *ty = ops_emit_ctype(p->dt);
    const char *mma = p->dt == OPS_DT_F16 ? "kt_wgmma_f16_ss" : "kt_wgmma_bf16_ss";
    const char *rank_arg = c->mcast == 2 ? ", rank" : "";
    /* split-K: a unit is a tile's k slice, KTILES_PER_SLICE long */
    const char *tile_of = c->parallel ? "u / SPLITK" : "u";
    /* blocks a unit: a multicast pair, or a cluster's k slices */
    const char *per = c->cluster ? "SPLITK" : "MCAST";
    bool in_cluster = c->mcast == 2 || c->cluster;
    /* the k loop of a unit: a slice's with split-K, stream-K's segment [kb, ke) */
    const char *kloop = c->splitk > 1 ? "KTILES_PER_SLICE" : c->stream ? "ke" : "KTILES";
    const char *kfirst = c->stream ? "kb" : "0";
    /* a stage's release: with a cluster, to both blocks (each loaded half of its B for both) */
    const char *release = c->mcast == 2 ? "kt_mbar_arrive_cluster(&empty[(it - 1) % STAGES], 0), "
                                          "kt_mbar_arrive_cluster(&empty[(it - 1) % STAGES], 1)"
                                        : "kt_mbar_arrive(&empty[(it - 1) % STAGES])";
    bool dual = p->nb == 2;
    if (c->tma_store) {
        ops_dtype odt = p->g->tensors[p->out].dtype;
        kt_buf epi = {0};
        gemm_emit tmp = *e;
        tmp.b = &epi;
        gemm_emit_epi_list(&tmp, false);
        const char *el = epi.data ? epi.data : "";
        kt_buf_printf(b, "\n");
        kt_buf_line(b, "/* store=tma: the epilogue of elements (m, n) and (m, n + 1), row r and "
                       "column cn of the consumer's tile,");
        kt_buf_line(b, " * into its shared copy at address cs: box cn / C_BOX, 16-byte chunk q of "
                       "row r at chunk q ^ (r %% 8);");
        kt_buf_line(b, " * sw is r %% 8, the same for every row a thread holds (g). 32-bit shared "
                       "addresses, and sw passed");
        kt_buf_line(b,
                    " * rather than computed from r: otherwise ptxas spilled (200 bytes at 128 x "
                    "256). Elements past M or N");
        kt_buf_line(b, " * are not computed (the TMA store clips them). */");
        kt_buf_printf(b, "__device__ __forceinline__ void ktw_stage2(");
        gemm_emit_epi_list(e, true);
        kt_buf_line(b,
                    "unsigned cs, int bz, int m, int n, int r, int sw, int cn, float acc0, "
                    "float acc1%s)",
                    dual ? ", float acc2_0, float acc2_1" : "");
        kt_buf_line(b, "{");
        kt_buf_line(b,
                    "    const float y0 = m < M && n < N ? ktg_epilogue(%sbz, m, n, acc0%s) : "
                    "0.0f;",
                    el, dual ? ", acc2_0" : "");
        kt_buf_line(b,
                    "    const float y1 = m < M && n + 1 < N ? ktg_epilogue(%sbz, m, n + 1, "
                    "acc1%s) : 0.0f;",
                    el, dual ? ", acc2_1" : "");
        kt_buf_line(b, "    const int byte = cn %% C_BOX * %d;", (int)ops_dtype_size(odt));
        kt_buf_line(b, "    const unsigned at = cs + cn / C_BOX * C_BOX_BYTES + r * 128 + (((byte "
                       ">> 4) ^ sw) << 4) + (byte & 15);");
        if (odt == OPS_DT_F32) {
            kt_buf_line(b, "    kt_st_shared_f32x2(at, y0, y1);");
        } else {
            kt_buf lo = {0}, hi = {0};
            ops_emit_from_float(&lo, odt, "y0");
            ops_emit_from_float(&hi, odt, "y1");
            kt_buf_line(b, "    kt_st_shared_u32(at, %s | (unsigned)%s << 16);",
                        lo.data ? lo.data : "", hi.data ? hi.data : "");
            kt_buf_free(&lo);
            kt_buf_free(&hi);
        }
        kt_buf_line(b, "}");
        kt_buf_free(&epi);
    }
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Block: the BM x BN output tile of batch bz; warpgroup 0 produces (TMA), "
                   "warpgroups 1..CONSUMERS");
    kt_buf_line(b, " * consume (wgmma) and run the epilogue. */");
    kt_buf_printf(b,
                  "extern \"C\" __global__ void __launch_bounds__(THREADS, 1) %s%s(const "
                  "__grid_constant__ kt_tensor_map tmap_a, const __grid_constant__ kt_tensor_map "
                  "tmap_b, %s",
                  c->mcast == 2 ? "__cluster_dims__(2, 1, 1) "
                  : c->cluster  ? "__cluster_dims__(SPLITK, 1, 1) "
                                : "",
                  entry, p->nb == 2 ? "const __grid_constant__ kt_tensor_map tmap_b2, " : "");
    gemm_emit_epi_list(e, true);
    const char *ws = c->parallel || c->stream ? ", float *__restrict__ workspace" : "";
    if (c->tma_store)
        kt_buf_printf(b, "const __grid_constant__ kt_tensor_map tmap_c%s)\n", ws);
    else
        kt_buf_printf(b, "%s *__restrict__ %s%s)\n", ops_emit_ctype(p->g->tensors[p->out].dtype),
                      e->names[p->grp->n_in], ws);
    kt_buf_line(b, "{");
    b->indent = 4;
    kt_buf_line(b, OPS_DYNAMIC_SMEM);
    kt_buf_line(b, "/* [STAGES] A tiles, [STAGES] B tiles (1024-byte aligned for the swizzle), "
                   "[STAGES] full and [STAGES] empty barriers */");
    kt_buf_line(b,
                "%s *as = reinterpret_cast<%s *>((reinterpret_cast<unsigned long "
                "long>(kt_smem) + 1023) & ~1023ull);",
                ty, ty);
    kt_buf_line(b, "%s *bs = as + STAGES * A_STAGE;", ty);
    if (p->nb == 2)
        kt_buf_line(b, "%s *bs2 = bs + BN * 64; /* B2's tile, after B's in every stage */", ty);
    if (c->tma_store) {
        kt_buf_line(b, "unsigned char *cs0 = reinterpret_cast<unsigned char *>(bs + STAGES * "
                       "B_STAGE); /* [CONSUMERS] output tiles */");
        kt_buf_line(b, "unsigned long long *full = reinterpret_cast<unsigned long long *>(cs0 + "
                       "CONSUMERS * C_BYTES), *empty = full + STAGES;");
    } else if (c->cluster) {
        kt_buf_line(b, "float4 *red = reinterpret_cast<float4 *>(bs + STAGES * B_STAGE); /* the "
                       "block's fp32 partial tile, BM x BN */");
        kt_buf_line(b, "unsigned long long *full = reinterpret_cast<unsigned long long *>(red + BM "
                       "* BN / 4), *empty = full + STAGES;");
        kt_buf_line(b, "unsigned long long *ready = empty + STAGES, *freed = ready + 1; /* the "
                       "cluster's partials written; read */");
    } else {
        kt_buf_line(b, "unsigned long long *full = reinterpret_cast<unsigned long long *>(bs + "
                       "STAGES * B_STAGE), *empty = full + STAGES;");
    }
    kt_buf_line(b, "const int tid = threadIdx.x, wg = tid / 128;");
    kt_buf_line(b, "if (tid == 0) {");
    kt_buf_line(b, "    kt_tma_prefetch_map(&tmap_a);");
    kt_buf_line(b, "    kt_tma_prefetch_map(&tmap_b);");
    if (p->nb == 2)
        kt_buf_line(b, "    kt_tma_prefetch_map(&tmap_b2);");
    kt_buf_line(b, "    for (int s = 0; s < STAGES; s++) {");
    kt_buf_line(b, "        kt_mbar_init(&full[s], 1); /* the producer's arrive_expect_tx; the "
                   "copies' bytes complete the phase */");
    kt_buf_line(b,
                "        kt_mbar_init(&empty[s], MCAST * (PINGPONG ? 1 : CONSUMERS) * 4); /* lane "
                "0 of every warp of the stage's consumers, in every block it is loaded for */");
    kt_buf_line(b, "    }");
    if (c->cluster) {
        kt_buf_line(b, "    kt_mbar_init(ready, SPLITK * CONSUMERS); /* a warpgroup of every "
                       "slice, once its partial is written */");
        kt_buf_line(b, "    kt_mbar_init(freed, SPLITK * CONSUMERS); /* the same, once it has "
                       "read every slice's */");
    }
    kt_buf_line(b, "    kt_mbar_fence_init();");
    kt_buf_line(b, "}");
    if (in_cluster) {
        kt_buf_line(b, "kt_cluster_sync(); /* the cluster's barriers are initialised before any "
                       "block's copies or arrivals reach them */");
        kt_buf_line(b, "const int rank = (int)kt_cluster_rank();");
    } else {
        kt_buf_line(b, "__syncthreads();");
    }
    kt_buf_line(b, "int m0, n0, bz;");
    kt_buf_line(b, "if (wg == 0) {");
    b->indent = 8;
    if (c->consumers == 2)
        kt_buf_line(b, "kt_setmaxnreg_dec<40>(); /* the producer needs few: 40 + 2 x 232 = 3 x 168 "
                       "*/");
    else
        kt_buf_line(b, "/* one consumer: 65536 / 256 registers a thread cover it, nothing to "
                       "move (setmaxnreg) */");
    kt_buf_line(b, "if (tid == 0) {");
    kt_buf_line(b, "    int it = 0; /* the ring's k tile count, across the block's tiles */");
    if (c->stream) {
        kt_buf_line(b, "    ktw_walk w = ktw_walk_start(blockIdx.x / MCAST);");
        kt_buf_line(b, "    for (int u, kb, ke; ktw_next(w, u, kb, ke);) {");
    } else {
        kt_buf_line(b, "    for (int u = blockIdx.x / %s; u < UNITS; u += gridDim.x / %s) {", per,
                    per);
    }
    if (c->splitk > 1)
        kt_buf_line(b, "        const int slice = %s;", c->cluster ? "rank" : "u % SPLITK");
    kt_buf_line(b, "        ktw_tile(%s, m0, n0, bz%s);", tile_of, rank_arg);
    kt_buf_line(b, "        for (int kt = %s; kt < %s; kt++, it++) {", kfirst, kloop);
    kt_buf_line(b, "            const int st = it %% STAGES, k0 = %s * BK;",
                c->splitk > 1 ? "(slice * KTILES_PER_SLICE + kt)" : "kt");
    kt_buf_line(b, "            if (it >= STAGES) /* the stage's previous use was released */");
    kt_buf_line(b, "                kt_mbar_wait(&empty[st], (it / STAGES + 1) & 1);");
    kt_buf_line(b, "            kt_mbar_arrive_expect_tx(&full[st], STAGE_BYTES);");
    b->indent = 20;
    for (int k = 0; k < 1 + p->nb; k++)
        emit_copies(e, k);
    b->indent = 8;
    kt_buf_line(b, "        }");
    kt_buf_line(b, "    }");
    if (c->mcast == 2) {
        kt_buf_line(b, "    /* stay until both blocks' consumers released every stage: their "
                       "arrivals target this block */");
        kt_buf_line(b, "    for (int s = 0; s < STAGES; s++, it++)");
        kt_buf_line(b, "        if (it >= STAGES)");
        kt_buf_line(b, "            kt_mbar_wait(&empty[it %% STAGES], (it / STAGES + 1) & 1);");
    }
    kt_buf_line(b, "}");
    kt_buf_line(b, "return;");
    b->indent = 4;
    kt_buf_line(b, "}");
    if (c->consumers == 2)
        kt_buf_line(b, "kt_setmaxnreg_inc<232>();");
    kt_buf_line(b,
                "/* consumer cw: cooperative, rows cw * BM / CONSUMERS + 64 * mt .. + 63 of every "
                "tile; ping-pong, all rows of");
    kt_buf_line(b, " * the block's tiles cw, cw + 2, ... (its k tiles start cw * KTILES into the "
                   "ring and skip the other's) */");
    kt_buf_line(b, "const int cw = wg - 1, lane = tid & 31, warp = tid / 32 & 3, g = lane >> 2, t "
                   "= lane & 3;");
    kt_buf_line(b, "const int row0 = PINGPONG ? 0 : cw * (BM / CONSUMERS);");
    kt_buf_line(b, "const unsigned long long da0 = ktw_desc_a(as) + row0 * 8, db0 = "
                   "ktw_desc_b(bs); /* row0 / 64 slabs of 512 */");
    if (!c->stream)
        kt_buf_line(b, "const int step = PINGPONG ? 2 : 1;");
    if (c->tma_store) {
        kt_buf_line(b, "unsigned char *cs = cs0 + cw * C_BYTES; /* this consumer's output tile */");
        kt_buf_line(b, "const unsigned cs_at = kt_smem_u32(cs); /* its shared address */");
    }
    if (c->stream) {
        kt_buf_line(b, "int it = 0;");
        kt_buf_line(b, "ktw_walk w = ktw_walk_start(blockIdx.x / MCAST);");
        kt_buf_line(b, "for (int u, kb, ke; ktw_next(w, u, kb, ke);) {");
    } else {
        kt_buf_line(b, "int it = PINGPONG ? cw * %s : 0;", kloop);
        kt_buf_line(b, "const int units = gridDim.x / %s; /* units walked at once */", per);
        if (c->cluster)
            kt_buf_line(b, "int done = 0; /* tiles whose partials this block has handed over */");
        kt_buf_line(b,
                    "for (int i = PINGPONG ? cw : 0, u = blockIdx.x / %s + i * units; u < "
                    "UNITS; i += step, u += step * units) {",
                    per);
    }
    b->indent = 8;
    kt_buf_line(b, "ktw_tile(%s, m0, n0, bz%s);", tile_of, rank_arg);
    if (c->pingpong) {
        kt_buf_line(b, "if (i > 0) /* the other consumer's k loop over the previous tile has "
                       "ended */");
        kt_buf_line(b, "    kt_bar_sync(1 + cw, 256);");
    }
    kt_buf_line(b, "float acc[MT][MMA_N / 8][4];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int mt = 0; mt < MT; mt++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < MMA_N / 8; j++)");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int r = 0; r < 4; r++)");
    kt_buf_line(b, "            acc[mt][j][r] = 0.0f;");
    kt_buf_line(b, "for (int kt = %s; kt < %s; kt++, it++) {", kfirst, kloop);
    b->indent = 12;
    kt_buf_line(b, "const int st = it %% STAGES;");
    kt_buf_line(b, "kt_mbar_wait(&full[st], (it / STAGES) & 1); /* k tile it has landed */");
    kt_buf_line(b, "const unsigned long long da = da0 + st * (A_STAGE / 8), db = db0 + st * "
                   "(B_STAGE / 8);");
    kt_buf_line(b, "kt_wgmma_fence();");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < BK / 16; ks++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int mt = 0; mt < MT; mt++)");
    kt_buf_line(
        b,
        "        %s<MMA_N, TRANS_B, TRANS_A>(acc[mt], da + mt * 512 + ks * A_KSTEP, db + ks "
        "* B_KSTEP, 1);",
        mma);
    kt_buf_line(b, "kt_wgmma_commit();");
    kt_buf_line(b, "/* k tile it's wgmmas stay in flight; it - 1's have retired, so its stage goes "
                   "back to the producer */");
    kt_buf_line(b, "kt_wgmma_wait<1>();");
    kt_buf_line(b, "if (kt > %s && lane == 0)", kfirst);
    kt_buf_line(b, "    %s;", release);
    b->indent = 8;
    kt_buf_line(b, "}");
    kt_buf_line(b, "kt_wgmma_wait<0>();");
    kt_buf_line(b, "if (lane == 0) /* the tile's last stage */");
    kt_buf_line(b, "    %s;", release);
    if (c->pingpong) {
        kt_buf_line(b, "if (u + units < UNITS) /* the other consumer's next tile: its k loop may "
                       "start */");
        kt_buf_line(b, "    kt_bar_arrive(2 - cw, 256);");
        kt_buf_line(b, "it += %s; /* the other consumer's tile */", kloop);
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int mt = 0; mt < MT; mt++)");
    kt_buf_line(b, "    kt_reg_hold(acc[mt]); /* the sums are read after the wait, not before */");
    if (c->stream)
        emit_stream_fixup(e);
    /* the sums of an element pair handed to the epilogue, rows g and g + 8 (a dual group's second
     * matmul's BN / 8 columns on) */
    const char *const sums[2] = {
        dual ? "acc[mt][j][0], acc[mt][j][1], acc[mt][BN / 8 + j][0], acc[mt][BN / 8 + j][1]"
             : "acc[mt][j][0], acc[mt][j][1]",
        dual ? "acc[mt][j][2], acc[mt][j][3], acc[mt][BN / 8 + j][2], acc[mt][BN / 8 + j][3]"
             : "acc[mt][j][2], acc[mt][j][3]"};
    kt_buf args = {0};
    if (c->tma_store) {
        gemm_emit tmp = *e;
        tmp.b = &args;
        gemm_emit_epi_list(&tmp, false);
        const char *el = args.data ? args.data : "";
        kt_buf_line(b, "if ((tid & 127) == 0) /* the previous tile's store has read cs */");
        kt_buf_line(b, "    kt_tma_store_wait_read<0>();");
        kt_buf_line(b, "kt_bar_sync(3 + cw, 128);");
        kt_buf_line(b, "/* acc[mt][j][r]: row 64 mt + 16 warp + g + 8 (r >> 1) of the consumer's "
                       "rows, column 8 j + 2 t + (r & 1) */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int mt = 0; mt < MT; mt++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < BN / 8; j++) {");
        kt_buf_line(b,
                    "        const int r = 64 * mt + 16 * warp + g, cn = 8 * j + 2 * t, m = m0 + "
                    "row0 + r, n = n0 + cn;");
        kt_buf_line(b, "        ktw_stage2(%scs_at, bz, m, n, r, g, cn, %s);", el, sums[0]);
        kt_buf_line(b, "        ktw_stage2(%scs_at, bz, m + 8, n, r + 8, g, cn, %s);", el, sums[1]);
        kt_buf_line(b, "    }");
        kt_buf_line(b,
                    "kt_fence_proxy_async(); /* the tile's writes, visible to the TMA's reads */");
        kt_buf_line(b, "kt_bar_sync(3 + cw, 128);");
        kt_buf_line(b, "if ((tid & 127) == 0) {");
        kt_buf_line(b, "    for (int bx = 0; bx < BN / C_BOX; bx++)");
        if (p->batch > 1)
            kt_buf_line(b, "        kt_tma_store_3d(&tmap_c, cs + bx * C_BOX_BYTES, n0 + bx * "
                           "C_BOX, m0 + row0, bz);");
        else
            kt_buf_line(b, "        kt_tma_store_2d(&tmap_c, cs + bx * C_BOX_BYTES, n0 + bx * "
                           "C_BOX, m0 + row0);");
        kt_buf_line(b, "    kt_tma_store_commit();");
        kt_buf_line(b, "}");
        kt_buf_free(&args);
        b->indent = 4;
        kt_buf_line(b, "}");
        kt_buf_line(b, "if ((tid & 127) == 0) /* the last store done before the block exits */");
        kt_buf_line(b, "    kt_tma_store_wait<0>();");
        b->indent = 0;
        kt_buf_line(b, "}");
        return;
    }
    gemm_emit_store_args(e, &args);
    if (c->cluster) {
        const char *a = args.data ? args.data : "";
        kt_buf_line(b, "/* Cluster split-K: each slice's partial tile into its shared memory "
                       "(register order, a float4 per");
        kt_buf_line(b, " * (mt, j) and thread), handed to the cluster on the ready barriers; "
                       "slice r then sums the pieces");
        kt_buf_line(b, " * (mt, j) with (mt * BN / 8 + j) %% SPLITK == r over slices 0, 1, ... "
                       "in order (deterministic),");
        kt_buf_line(b, " * reading the others' shared memory, and runs the epilogue on them; the "
                       "freed barriers tell a slice");
        kt_buf_line(b, " * that every slice has read its partial, so the next tile's may "
                       "overwrite it. */");
        kt_buf_line(b, "float4 *const mine = red + cw * (MT * BN / 8 * 128) + (tid & 127);");
        kt_buf_line(b, "if (done > 0)");
        kt_buf_line(b, "    kt_mbar_wait_cluster(freed, (done - 1) & 1);");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int mt = 0; mt < MT; mt++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < BN / 8; j++)");
        kt_buf_line(b, "        mine[(mt * (BN / 8) + j) * 128] = make_float4(acc[mt][j][0], "
                       "acc[mt][j][1], acc[mt][j][2], acc[mt][j][3]);");
        kt_buf_line(b, "kt_fence_cluster();");
        kt_buf_line(b, "kt_bar_sync(3 + cw, 128);");
        kt_buf_line(b, "if ((tid & 127) == 0)");
        kt_buf_line(b, "    for (int r = 0; r < SPLITK; r++)");
        kt_buf_line(b, "        kt_mbar_arrive_cluster_release(ready, r);");
        kt_buf_line(b, "kt_mbar_wait_cluster(ready, done & 1);");
        kt_buf_line(b, "/* this slice's pieces p = q * SPLITK + rank, every slice's copy of each "
                       "loaded before any is");
        kt_buf_line(b, " * summed, so the remote reads are in flight together (their latency once, "
                       "not per read) */");
        kt_buf_line(b, "enum : int { SHARE = MT * (BN / 8) / SPLITK };");
        kt_buf_line(b, "float4 part[SHARE][SPLITK];");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int q = 0; q < SHARE; q++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int r = 0; r < SPLITK; r++)");
        kt_buf_line(b, "        part[q][r] = kt_ld_cluster4(kt_cluster_addr(mine + (q * SPLITK + "
                       "rank) * 128, r));");
        kt_buf_line(b, "/* piece p: acc[mt][j] with mt = p / (BN / 8), j = p %% (BN / 8); its [r] "
                       "rows 64 mt + 16 warp + g + 8 (r >> 1),");
        kt_buf_line(b, " * column 8 j + 2 t + (r & 1) of the consumer's rows */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int q = 0; q < SHARE; q++) {");
        b->indent = 12;
        kt_buf_line(b, "float4 sum = part[q][0];");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int r = 1; r < SPLITK; r++) {");
        kt_buf_line(b, "    sum.x += part[q][r].x;");
        kt_buf_line(b, "    sum.y += part[q][r].y;");
        kt_buf_line(b, "    sum.z += part[q][r].z;");
        kt_buf_line(b, "    sum.w += part[q][r].w;");
        kt_buf_line(b, "}");
        kt_buf_line(b, "const int p = q * SPLITK + rank, mt = p / (BN / 8), j = p %% (BN / 8);");
        kt_buf_line(b, "const int m = m0 + row0 + 64 * mt + 16 * warp + g, n = n0 + 8 * j + 2 * "
                       "t;");
        kt_buf_line(b, "ktg_store2(%s, bz, m, n, sum.x, sum.y);", a);
        kt_buf_line(b, "ktg_store2(%s, bz, m + 8, n, sum.z, sum.w);", a);
        b->indent = 8;
        kt_buf_line(b, "}");
        kt_buf_line(b, "kt_fence_cluster();");
        kt_buf_line(b, "kt_bar_sync(3 + cw, 128);");
        kt_buf_line(b, "if ((tid & 127) == 0)");
        kt_buf_line(b, "    for (int r = 0; r < SPLITK; r++)");
        kt_buf_line(b, "        kt_mbar_arrive_cluster_release(freed, r);");
        kt_buf_line(b, "done++;");
        kt_buf_free(&args);
        b->indent = 4;
        kt_buf_line(b, "}");
        kt_buf_line(b, "if (done > 0) /* the others have read this block's last partial before "
                       "it exits */");
        kt_buf_line(b, "    kt_mbar_wait_cluster(freed, (done - 1) & 1);");
        b->indent = 0;
        kt_buf_line(b, "}");
        return;
    }
    /* store=direct: the element pairs through the epilogue; parallel split-K: their fp32 sums
     * into the slice's plane of the workspace instead (the reduction kernel applies the
     * epilogue) */
    char store[512];
    if (c->parallel) {
        kt_buf_line(b, "const int slice = u %% SPLITK;");
        snprintf(store, sizeof(store), "ktg_partial2(workspace, slice, bz");
    } else {
        snprintf(store, sizeof(store), "ktg_store2(%s, bz", args.data ? args.data : "");
    }
    kt_buf_line(b, "/* acc[mt][j][r]: row 64 mt + 16 warp + g + 8 (r >> 1) of the consumer's "
                   "rows, column 8 j + 2 t + (r & 1) */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int mt = 0; mt < MT; mt++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < BN / 8; j++) {");
    kt_buf_line(b, "        const int m = m0 + row0 + 64 * mt + 16 * warp + g, n = n0 + 8 * j + 2 "
                   "* t;");
    kt_buf_line(b, "        %s, m, n, %s);", store, sums[0]);
    kt_buf_line(b, "        %s, m + 8, n, %s);", store, sums[1]);
    kt_buf_line(b, "    }");
    kt_buf_free(&args);
    b->indent = 4;
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_line(b, "}");
}
