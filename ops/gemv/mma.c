/* gemv family: the tensor-core kernel, math=mma (ops/gemv/gemv.h lists the files). */
#include "gemv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tensor-core kernel (math=mma; see the top of the file), for both forms: the vector form is
 * its one-token case (x [K, 1] is one contiguous row). */
void gemv_emit_mma(kt_buf *b, const gemv_info *in, const gemv_plan *p, const char *entry,
                   const char *params, const char *call)
{
    const char *mma = in->adt == OPS_DT_BF16 ? "kt_mma_m16n8k16_bf16" : "kt_mma_m16n8k16_f16";
    kt_buf_line(b,
                "constexpr int WARPS = THREADS / 32, KSPLIT = %d; /* warps sharing a row "
                "block's k */",
                p->ksplit);
    kt_buf_line(b, "constexpr int NT = %d; /* 8-token tiles */", p->ntiles);
    kt_buf_line(b, "constexpr int CHUNKS = (K + 31) / 32; /* steps of 32 elements of k */");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* A warp owns R blocks of 16 rows of A and every KSPLIT-th step of k; lane "
                   "(g, q) = (lane / 4,");
    kt_buf_line(b, " * lane %% 4) loads 16 bytes at k 32 c + 8 q of rows g and g + 8 of each "
                   "block and of token g of");
    kt_buf_line(b, " * each tile, which feed two m16n8k16 products (k permuted alike for A and "
                   "x). */");
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(THREADS)");
    kt_buf_line(b, "%s(%s)", entry, params);
    kt_buf_line(b, "{");
    b->indent = 4;
    kt_buf_line(b, "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;");
    kt_buf_line(b, "const int g = lane >> 2, q = lane & 3, ks = warp %% KSPLIT;");
    kt_buf_line(b, "const int m0 = (blockIdx.x * (WARPS / KSPLIT) + warp / KSPLIT) * 16 * R;");
    kt_buf_line(b, "/* rows past M and tokens past T read the last one (in bounds), never "
                   "stored */");
    kt_buf_line(b, "const uint4 *ra[R], *rb[R], *xr[NT];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    kt_buf_line(b, "    const int ma = m0 + 16 * r + g, mb = ma + 8;");
    kt_buf_line(b, "    ra[r] = (const uint4 *)(a + (long long)(ma < M ? ma : M - 1) * K) + q;");
    kt_buf_line(b, "    rb[r] = (const uint4 *)(a + (long long)(mb < M ? mb : M - 1) * K) + q;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < NT; j++) {");
    kt_buf_line(b, "    const int t = 8 * j + g;");
    kt_buf_line(b, "    xr[j] = (const uint4 *)(x + (long long)(t < T ? t : T - 1) * K) + q;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "float acc[R][NT][4] = {};");
    if (p->load == LOAD_STREAM) {
        kt_buf_line(b, "/* A is read once: evict it first from L2 */");
        kt_buf_line(b, "const unsigned long long policy = kt_policy_evict_first();");
    }
    char lda[96], ldb[96];
    for (int w = 0; w < 2; w++) {
        const char *rows = w ? "rb" : "ra";
        char *out = w ? ldb : lda;
        if (p->load == LOAD_CACHED)
            snprintf(out, sizeof(lda), "%s[r][4 * c]", rows);
        else if (p->load == LOAD_PREFETCH)
            snprintf(out, sizeof(lda), "kt_ld_nc_pf(%s[r] + 4 * c)", rows);
        else
            snprintf(out, sizeof(lda), "kt_ld_nc_stream(%s[r] + 4 * c, policy)", rows);
    }
    kt_buf_line(b,
                "/* A ring of DEPTH steps in registers: a lane keeps the loads of its next DEPTH "
                "steps in flight");
    kt_buf_line(b, " * (DRAM wants megabytes in flight; a warp's few steps would otherwise wait "
                   "out a round trip");
    kt_buf_line(b, " * each). K is a multiple of 8: a lane's 8 elements are all in k or all past "
                   "it (zeros, which");
    kt_buf_line(b, " * add nothing, so the last pass needs no guard). */");
    kt_buf_line(b, "constexpr int DEPTH = %d;", p->depth);
    kt_buf_line(b, "uint4 wa[DEPTH][R], wb[DEPTH][R], xw[DEPTH][NT];");
    kt_buf_line(b, "auto load = [&](int d, int c) {");
    b->indent = 8;
    kt_buf_line(b, "const bool in_k = 32 * c + 8 * q < K; /* false past the last step too */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    kt_buf_line(b, "    wa[d][r] = in_k ? %s : make_uint4(0u, 0u, 0u, 0u);", lda);
    kt_buf_line(b, "    wb[d][r] = in_k ? %s : make_uint4(0u, 0u, 0u, 0u);", ldb);
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < NT; j++)");
    kt_buf_line(b, "    xw[d][j] = in_k ? __ldg(xr[j] + 4 * c) : make_uint4(0u, 0u, 0u, 0u);");
    b->indent = 4;
    kt_buf_line(b, "};");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int d = 0; d < DEPTH; d++)");
    kt_buf_line(b, "    load(d, ks + d * KSPLIT);");
    kt_buf_line(b, "for (int c0 = ks; c0 < CHUNKS; c0 += DEPTH * KSPLIT) {");
    b->indent = 8;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int d = 0; d < DEPTH; d++) {");
    b->indent = 12;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < NT; j++) {");
    kt_buf_line(b, "    const unsigned b0[2] = {xw[d][j].x, xw[d][j].y}, "
                   "b1[2] = {xw[d][j].z, xw[d][j].w};");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int r = 0; r < R; r++) {");
    kt_buf_line(b,
                "        /* k 8q .. 8q + 3 of rows g, g + 8 into slots 2q, 2q + 1, 2q + 8, 2q + 9; "
                "then 8q + 4 .. */");
    kt_buf_line(b, "        const unsigned a0[4] = {wa[d][r].x, wb[d][r].x, wa[d][r].y, "
                   "wb[d][r].y};");
    kt_buf_line(b, "        const unsigned a1[4] = {wa[d][r].z, wb[d][r].z, wa[d][r].w, "
                   "wb[d][r].w};");
    kt_buf_line(b, "        %s(acc[r][j], a0, b0);", mma);
    kt_buf_line(b, "        %s(acc[r][j], a1, b1);", mma);
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    kt_buf_line(b, "load(d, c0 + (d + DEPTH) * KSPLIT); /* the slot's step DEPTH ahead */");
    b->indent = 8;
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "}");
    if (p->ksplit > 1) {
        kt_buf_line(b, "/* The row block's KSPLIT warps (consecutive) add up in warp order; the "
                       "first goes on. */");
        kt_buf_line(b, "__shared__ float part[WARPS][R * NT * 4][32];");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < R * NT * 4; e++)");
        kt_buf_line(b, "    part[warp][e][lane] = (&acc[0][0][0])[e];");
        kt_buf_line(b, "__syncthreads();");
        kt_buf_line(b, "if (ks != 0)");
        kt_buf_line(b, "    return;");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < R * NT * 4; e++) {");
        kt_buf_line(b, "    float sum = part[warp][e][lane];");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int k = 1; k < KSPLIT; k++)");
        kt_buf_line(b, "        sum += part[warp + k][e][lane];");
        kt_buf_line(b, "    (&acc[0][0][0])[e] = sum;");
        kt_buf_line(b, "}");
    }
    kt_buf_line(b, "/* lane (g, q) holds rows g (sums 0, 1) and g + 8 (2, 3), tokens 2q and 2q + 1 "
                   "of each tile */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < NT; j++)");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int e = 0; e < 4; e++) {");
    kt_buf_line(
        b,
        "            const int m = m0 + 16 * r + g + (e >> 1) * 8, t = 8 * j + 2 * q + (e & 1);");
    kt_buf_line(b, "            if (m < M && t < T)");
    if (in->decode)
        kt_buf_line(b, "                kt_gemv_store(acc[r][j][e], m, t, %s);", call);
    else
        kt_buf_line(b, "                kt_gemv_store(acc[r][j][e], m, %s);", call);
    kt_buf_line(b, "        }");
    b->indent = 0;
    kt_buf_line(b, "}");
}
