/* gemm family: the Hopper wgmma (tf32x3) kernel (ops/gemm/gemm.h lists the files). */
#include "gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the Hopper path: tf32x3 on warpgroup MMA ----
 *
 * tf32 wgmma reads a shared-memory operand K-major only, and B is stored [K][N] (or [N][K]); so
 * the kernel computes C^T = B^T A^T: the wgmma A operand is B^T, built in registers from a
 * padded [k][n] tile (or a swizzled [n][k] one; element loads, split into big and small halves
 * there), and the wgmma B operand is A^T,
 * whose K-major form is A's own [m][k] rows, copied by cp.async straight into the hardware's
 * 128-byte swizzle (32 floats of k per row, one swizzle atom per tile: bk 32). The tensor cores
 * read that raw tile as big halves (dropping the low 13 bits: |x - big| < 2^-10 |x|) and a
 * second tile holds A's small halves, x - big, written by all threads once per k tile (for tile
 * kt + 1 while tile kt's wgmmas run, into the other of two buffers). Each
 * 8-deep k step issues three m64nBMk8 wgmmas per warpgroup (small x big, big x small, big x
 * big); warpgroup w owns C^T rows (C columns) n0 + 64 w .. + 63, all BM columns (C rows). */
void gemm_emit_wgmma_helpers(const gemm_emit *e)
{
    kt_buf_printf(e->b, "\n");
    kt_buf_line(e->b, "/* ---- wgmma: tile layout and descriptor ----");
    kt_buf_line(
        e->b,
        " * Tiles of 128-byte rows (32 floats of k) in the 128-byte swizzle, 1024-byte aligned");
    kt_buf_line(e->b, " * (kt_swizzle128_f32). Their descriptor: 8-row groups 1024 bytes apart "
                      "(stride offset); the");
    kt_buf_line(
        e->b,
        " * leading offset is unused while a k8 step stays inside one 128-byte row. A k step of 8");
    kt_buf_line(e->b, " * floats adds 32 bytes (2 in the address field's 16-byte unit). */");
    kt_buf_line(e->b, "__device__ __forceinline__ unsigned long long ktw_desc(const void *p)");
    kt_buf_line(e->b, "{");
    kt_buf_line(e->b, "    return kt_wgmma_desc(p, 16, 1024, KT_WGMMA_SW128);");
    kt_buf_line(e->b, "}");
}

/* mma=wgmma_split's first kernel: A's small halves (x - big, big = x's top 19 bits) into the
 * workspace, same [M][K] layout, 16 bytes a thread per step (K % 4 == 0). */
void gemm_emit_split_kernel(const gemm_emit *e)
{
    kt_buf *b = e->b;
    kt_buf_printf(b, "\n");
    kt_buf_line(
        b, "/* A's small halves into the workspace, read by the wgmma kernel's tile copies. */");
    kt_buf_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) ktune_gemm_split_a%s",
                  SPLIT_THREADS, e->p->grp->entry_suffix);
    gemm_emit_kernel_params(e, true);
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "{");
    b->indent = 4;
    kt_buf_line(b, "const float4 *__restrict__ a = reinterpret_cast<const float4 *>(%s);",
                gemm_in_name(e, e->p->src[0]));
    kt_buf_line(b, "float4 *__restrict__ small = static_cast<float4 *>(workspace);");
    kt_buf_line(b,
                "for (idx_t i = (idx_t)blockIdx.x * %d + threadIdx.x; i < (idx_t)M * K / 4; "
                "i += (idx_t)gridDim.x * %d) {",
                SPLIT_THREADS, SPLIT_THREADS);
    kt_buf_line(b, "    float4 v = a[i];");
    kt_buf_line(b, "    v.x = kt_tf32_trunc_rest(v.x);");
    kt_buf_line(b, "    v.y = kt_tf32_trunc_rest(v.y);");
    kt_buf_line(b, "    v.z = kt_tf32_trunc_rest(v.z);");
    kt_buf_line(b, "    v.w = kt_tf32_trunc_rest(v.w);");
    kt_buf_line(b, "    small[i] = v;");
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_line(b, "}");
}

void gemm_emit_wgmma_kernel(const gemm_emit *e, const char *entry)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    kt_buf_printf(b, "\n");
    kt_buf_line(b,
                "/* Block: a BM x BN output tile of batch bz, computed as its transpose by %d "
                "warpgroup%s. */",
                c->threads / 128, c->threads > 128 ? "s" : "");
    kt_buf_printf(b, "extern \"C\" __global__ void __launch_bounds__(THREADS, 1) %s", entry);
    gemm_emit_kernel_params(e, c->presplit);
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "{");
    b->indent = 4;
    bool bt = e->p->trans[1], ps = c->presplit;
    if (bt)
        kt_buf_line(b, "constexpr int A_TILE = BM * 32, B_TILE = BN * 32; /* B rows [n][k], "
                       "swizzled like A's */");
    else
        kt_buf_line(b, "constexpr int LDB = BN + 8; /* B tile row pitch (floats): fragment reads "
                       "hit 32 banks */");
    if (!bt)
        kt_buf_line(b, "constexpr int A_TILE = BM * 32, B_TILE = 32 * LDB;");
    kt_buf_line(b, OPS_DYNAMIC_SMEM);
    kt_buf_line(b,
                "/* [STAGES] raw A tiles, [%s] A_small tiles (1024-byte aligned for the "
                "swizzle), [STAGES] B tiles */",
                ps ? "STAGES" : "2");
    kt_buf_line(b, "float *as = reinterpret_cast<float *>((reinterpret_cast<unsigned long "
                   "long>(kt_smem) + 1023) & ~1023ull);");
    kt_buf_line(b, "float *asmall = as + STAGES * A_TILE, *bs = asmall + %s * A_TILE;",
                ps ? "STAGES" : "2");
    kt_buf_line(b, "const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;");
    kt_buf_line(b, "const int nw = tid / 128 * 64 + (tid / 32 & 3) * 16; /* this warp's 16 C "
                   "columns (wgmma A rows) */");
    kt_buf_line(b, "int tile_m, tile_n;");
    kt_buf_line(b, "ktg_raster(blockIdx.x, tile_m, tile_n);");
    kt_buf_line(b, "const int m0 = tile_m * BM, n0 = tile_n * BN;");
    kt_buf_line(b, "const int bz = blockIdx.z;");
    gemm_emit_operand_pointers(e);
    if (ps)
        kt_buf_line(b, "const float *__restrict__ asg = static_cast<const float *>(workspace); "
                       "/* A's small halves */");
    kt_buf_line(b, "/* Copies k tile kt into stage st: A rows swizzled, B rows padded; 16 bytes a "
                   "copy, zero past the edges. */");
    kt_buf_line(b, "auto load_tile = [&](int kt, int st) {");
    b->indent = 8;
    kt_buf_line(b, "const int k0 = kt * 32;");
    kt_buf_line(b, "float *sa = as + st * A_TILE, *sb = bs + st * B_TILE;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = tid; i < BM * 8; i += THREADS) {");
    kt_buf_line(b, "    const int r = i >> 3, ch = i & 7, m = m0 + r, k = k0 + ch * 4;");
    kt_buf_line(b, "    const bool ok = m < M && k < K;");
    kt_buf_line(
        b, "    kt_cp_async16(sa + kt_swizzle128_f32(r, ch * 4), ag + (ok ? (idx_t)m * K + k : 0), "
           "ok ? 16 : 0);");
    if (ps)
        kt_buf_line(
            b, "    kt_cp_async16(asmall + st * A_TILE + kt_swizzle128_f32(r, ch * 4), asg + (ok ? "
               "(idx_t)m * K + k : 0), ok ? 16 : 0);");
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    if (bt) {
        kt_buf_line(b, "for (int i = tid; i < BN * 8; i += THREADS) {");
        kt_buf_line(b, "    const int r = i >> 3, ch = i & 7, n = n0 + r, k = k0 + ch * 4;");
        kt_buf_line(b, "    const bool ok = n < N && k < K;");
        kt_buf_line(b, "    kt_cp_async16(sb + kt_swizzle128_f32(r, ch * 4), bg + (ok ? (idx_t)n * "
                       "K + k : 0), "
                       "ok ? 16 : 0);");
    } else {
        kt_buf_line(b, "for (int i = tid; i < 32 * (BN / 4); i += THREADS) {");
        kt_buf_line(b,
                    "    const int r = i / (BN / 4), ch = i %% (BN / 4), k = k0 + r, n = n0 + ch "
                    "* 4;");
        kt_buf_line(b, "    const bool ok = k < K && n < N;");
        kt_buf_line(b, "    kt_cp_async16(sb + r * LDB + ch * 4, bg + (ok ? (idx_t)k * N + n : 0), "
                       "ok ? 16 : 0);");
    }
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "};");
    if (!ps) {
        /* The small halves of stage st's A tile into A_small buffer sb (all threads). */
        kt_buf_line(
            b, "/* A's small halves, x - big with big = x's top 19 bits (what the tensor cores "
               "read of x) */");
        kt_buf_line(b, "auto make_small = [&](int st, int buf) {");
        kt_buf_line(b,
                    "    const float4 *raw = reinterpret_cast<const float4 *>(as + st * A_TILE);");
        kt_buf_line(b, "    float4 *small = reinterpret_cast<float4 *>(asmall + buf * A_TILE);");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int i = tid; i < A_TILE / 4; i += THREADS) {");
        kt_buf_line(b, "        float4 v = raw[i];");
        kt_buf_line(b, "        v.x = kt_tf32_trunc_rest(v.x);");
        kt_buf_line(b, "        v.y = kt_tf32_trunc_rest(v.y);");
        kt_buf_line(b, "        v.z = kt_tf32_trunc_rest(v.z);");
        kt_buf_line(b, "        v.w = kt_tf32_trunc_rest(v.w);");
        kt_buf_line(b, "        small[i] = v;");
        kt_buf_line(b, "    }");
        kt_buf_line(b, "    kt_fence_proxy_async();");
        kt_buf_line(b, "};");
    }

    kt_buf_line(b, "/* This warp's B^T fragments of stage st's four k steps (k t, t + 4; columns "
                   "nw + g, + 8), split */");
    kt_buf_line(b, "auto load_frags = [&](int st, unsigned (&big)[4][4], unsigned (&lo)[4][4]) {");
    kt_buf_line(b, "    const float *sb = bs + st * B_TILE;");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int ks = 0; ks < 4; ks++) {");
    if (bt) {
        kt_buf_line(b, "        const int k = ks * 8 + t, n = nw + g;");
        kt_buf_line(b,
                    "        kt_split_tf32(sb[kt_swizzle128_f32(n, k)], big[ks][0], lo[ks][0]);");
        kt_buf_line(
            b, "        kt_split_tf32(sb[kt_swizzle128_f32(n + 8, k)], big[ks][1], lo[ks][1]);");
        kt_buf_line(
            b, "        kt_split_tf32(sb[kt_swizzle128_f32(n, k + 4)], big[ks][2], lo[ks][2]);");
        kt_buf_line(
            b,
            "        kt_split_tf32(sb[kt_swizzle128_f32(n + 8, k + 4)], big[ks][3], lo[ks][3]);");
    } else {
        kt_buf_line(b, "        const float *f = sb + (ks * 8 + t) * LDB + nw + g;");
        kt_buf_line(b, "        kt_split_tf32(f[0], big[ks][0], lo[ks][0]);");
        kt_buf_line(b, "        kt_split_tf32(f[8], big[ks][1], lo[ks][1]);");
        kt_buf_line(b, "        kt_split_tf32(f[4 * LDB], big[ks][2], lo[ks][2]);");
        kt_buf_line(b, "        kt_split_tf32(f[4 * LDB + 8], big[ks][3], lo[ks][3]);");
    }
    kt_buf_line(b, "    }");
    kt_buf_line(b, "};");
    kt_buf_line(b, "float acc[BM / 8][4], part[BM / 8][4];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < BM / 8; j++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int r = 0; r < 4; r++)");
    kt_buf_line(b, "        acc[j][r] = part[j][r] = 0.0f;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int s = 0; s < STAGES - 1; s++) {");
    kt_buf_line(b, "    if (s < KTILES)");
    kt_buf_line(b, "        load_tile(s, s);");
    kt_buf_line(b, "    kt_cp_async_commit();");
    kt_buf_line(b, "}");
    kt_buf_line(b, "unsigned big[4][4], lo[4][4];");
    kt_buf_line(b, "kt_cp_async_wait<STAGES - 2>();");
    kt_buf_line(b, "__syncthreads();");
    /* cp.async wrote the tiles through the generic proxy; wgmma reads them through the async
     * proxy (make_small ends with the same fence) */
    kt_buf_line(b, ps ? "kt_fence_proxy_async();" : "make_small(0, 0);");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "load_frags(0, big, lo);");
    kt_buf_line(b, "/* Tile kt's wgmmas run while the block prepares tile kt + 1: its copies "
                   "land and its small");
    kt_buf_line(b, " * halves are written to the other A_small buffer. */");
    kt_buf_line(b, "for (int kt = 0; kt < KTILES; kt++) {");
    b->indent = 8;
    kt_buf_line(b, "const int st = kt %% STAGES;");
    kt_buf_line(b,
                "const unsigned long long da = ktw_desc(as + st * A_TILE), ds = "
                "ktw_desc(asmall + %s * A_TILE);",
                ps ? "st" : "(kt & 1)");
    kt_buf_line(b, "kt_wgmma_fence();");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < 4; ks++) {");
    kt_buf_line(b, "    kt_wgmma_tf32_rs<BM>(part, lo[ks], da + 2 * ks);  /* B small x A big */");
    kt_buf_line(b, "    kt_wgmma_tf32_rs<BM>(part, big[ks], ds + 2 * ks); /* B big x A small */");
    kt_buf_line(b, "    kt_wgmma_tf32_rs<BM>(part, big[ks], da + 2 * ks); /* B big x A big */");
    kt_buf_line(b, "}");
    kt_buf_line(b, "kt_wgmma_commit();");
    kt_buf_line(b, "/* stage (kt - 1) %% STAGES: tile kt - 1's wgmmas were waited for by every "
                   "warpgroup */");
    kt_buf_line(b, "if (kt + STAGES - 1 < KTILES)");
    kt_buf_line(b, "    load_tile(kt + STAGES - 1, (kt + STAGES - 1) %% STAGES);");
    kt_buf_line(b, "kt_cp_async_commit();");
    kt_buf_line(b, "unsigned nbig[4][4], nlo[4][4];");
    kt_buf_line(b, "if (kt + 1 < KTILES) {");
    kt_buf_line(b, "    kt_cp_async_wait<STAGES - 2>(); /* tile kt + 1 has landed */");
    kt_buf_line(b, "    __syncthreads();");
    if (ps)
        kt_buf_line(b, "    kt_fence_proxy_async();");
    else
        kt_buf_line(b, "    make_small((kt + 1) %% STAGES, (kt + 1) & 1);");
    kt_buf_line(b, "    load_frags((kt + 1) %% STAGES, nbig, nlo);");
    kt_buf_line(b, "}");
    kt_buf_line(b, "kt_wgmma_wait<0>();");
    kt_buf_line(b, "kt_reg_pin(big); /* the wgmmas read these registers until now */");
    kt_buf_line(b, "kt_reg_pin(lo);");
    kt_buf_line(b, "kt_reg_hold(part);");
    kt_buf_line(b, "/* the truncating sums of FLUSH_KTILES k tiles, carried into acc with "
                   "round-to-nearest FADDs */");
    kt_buf_line(b, "if ((kt + 1) %% FLUSH_KTILES == 0 || kt + 1 == KTILES) {");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < BM / 8; j++)");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int r = 0; r < 4; r++) {");
    kt_buf_line(b, "            acc[j][r] += part[j][r];");
    kt_buf_line(b, "            part[j][r] = 0.0f;");
    kt_buf_line(b, "        }");
    kt_buf_line(b, "}");
    kt_buf_line(b, "/* every warpgroup is done with tile kt (its stage and A_small buffer may be "
                   "rewritten) and");
    kt_buf_line(b, " * tile kt + 1's small halves are complete */");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < 4; ks++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int r = 0; r < 4; r++) {");
    kt_buf_line(b, "        big[ks][r] = nbig[ks][r];");
    kt_buf_line(b, "        lo[ks][r] = nlo[ks][r];");
    kt_buf_line(b, "    }");
    b->indent = 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "kt_cp_async_wait<0>();");
    /* epilogue */
    kt_buf args = {0};
    gemm_emit_store_args(e, &args);
    kt_buf_line(b, "/* acc[j][r] is C^T (n, m): n = n0 + nw + g (+ 8 for r >= 2), m = m0 + 8 j + "
                   "2 t + (r & 1) */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < BM / 8; j++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int r = 0; r < 4; r++)");
    kt_buf_line(b,
                "        ktg_store(%s, bz, m0 + 8 * j + 2 * t + (r & 1), n0 + nw + g + (r >> 1) "
                "* 8, acc[j][r]);",
                args.data ? args.data : "");
    kt_buf_free(&args);
    b->indent = 0;
    kt_buf_line(b, "}");
}
