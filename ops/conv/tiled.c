/* conv family: the tiled direct kernel (ops/conv/conv.h lists the files). */
#include "conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void conv_emit_tiled(kt_buf *b, const tiled_plan *pl, const conv_names *nm)
{
    char vt[32];
    ops_emit_vec_type_name(OPS_DT_F32, 4, vt, sizeof(vt));
    ops_emit_vec_types(b, OPS_VEC_BIT(OPS_DT_F32, 4));
    kt_buf_line(b, "/* Tiled direct convolution: a block computes BN output channels of an OH x OW "
                   "output tile of");
    kt_buf_line(b, " * one image; a thread TK channels x TQ adjacent columns of one tile row. "
                   "Input channels are");
    kt_buf_line(b, " * staged one at a time: the input patch under the tile (zeros outside the "
                   "image) and the");
    kt_buf_line(b, " * filter slice [R * S][BNP] of that channel. */");
    kt_buf_line(b,
                "constexpr int BM = %d, BN = %d, TK = %d, TQ = %d, THREADS = %d, NW = THREADS "
                "/ 32;",
                pl->bm, pl->bn, pl->tk, pl->tq, pl->threads);
    kt_buf_line(b, "constexpr int STAGES = %d, MIN_BLOCKS = %d;", pl->stages, pl->min_blocks);
    kt_buf_line(b, "constexpr int OH = %d, OW = %d;              /* output tile: OH * OW == BM */",
                pl->oh, pl->ow);
    kt_buf_line(b, "constexpr int CGN = OW / TQ, PT = OH * CGN; /* column groups, threads per "
                   "channel group */");
    kt_buf_line(b, "constexpr int TILES_P = (P + OH - 1) / OH, TILES_Q = (Q + OW - 1) / OW;");
    kt_buf_line(b, "constexpr int KBLOCKS = (K + BN - 1) / BN;");
    kt_buf_line(b, "/* The input patch: IH x IW, stored phase-split by the stride in both "
                   "directions: row y at");
    kt_buf_line(b, " * stored row (y %% STR_H) * RIDX + y / STR_H, column x at word (x %% STR_W) "
                   "* PL + x / STR_W. */");
    kt_buf_line(b, "constexpr int IH = (OH - 1) * STR_H + R, IW = (OW - 1) * STR_W + S;");
    kt_buf_line(b,
                "constexpr int RIDX = (IH + STR_H - 1) / STR_H; /* stored rows per row phase */");
    kt_buf_line(b, "constexpr int PL = %d;  /* words per column phase (what the windows reach) */",
                pl->pl);
    kt_buf_line(b,
                "constexpr int RP = %d; /* row pitch: STR_W * PL, padded against bank "
                "conflicts */",
                pl->rp);
    kt_buf_line(b,
                "constexpr int BNP = %d; /* filter row pitch: BN rounded to 16 bytes, off 32 "
                "banks */",
                pl->bnp);
    kt_buf_line(b, "constexpr int XS = STR_H * RIDX * RP, WS = R * S * BNP, STAGE = XS + WS; /* "
                   "words */");
    kt_buf_line(b, "constexpr int WV = (TQ + (S - 1) / STR_W + 3) / 4; /* 16-byte loads of the "
                   "widest window */");
    kt_buf_line(b, "constexpr int MS = (S + STR_W - 1) / STR_W;        /* filter columns per "
                   "phase, at most */");
    kt_buf_line(b, "/* The copies of a channel: a warp takes patch rows y = warp + NW * t (t < XT) "
                   "and filter");
    kt_buf_line(b, " * channels j = warp + NW * t (t < FT), its lanes patch columns x = lane + 32 "
                   "* i (i < XI) and");
    kt_buf_line(b, " * filter taps rs = lane + 32 * i (i < FI): reads coalesce, and every offset "
                   "but the channel's");
    kt_buf_line(b, " * and the thread's is a constant. Words the windows reach past IW are never "
                   "multiplied:");
    kt_buf_line(b, " * not copied. */");
    kt_buf_line(b, "constexpr int XT = (IH + NW - 1) / NW, XI = (IW + 31) / 32;");
    kt_buf_line(b, "constexpr int FT = (BN + NW - 1) / NW, FI = (R * S + 31) / 32;");
    kt_buf_printf(b, "\n");
    conv_emit_kernel_head(b, "MIN_BLOCKS", "tiled", nm);
    kt_buf_line(b, OPS_DYNAMIC_SMEM);
    kt_buf_line(b, "float *const smem = reinterpret_cast<float *>(kt_smem); /* [STAGES][STAGE], "
                   "then the output tile */");
    kt_buf_line(b, "const int tid = threadIdx.x, warp = tid / 32, lane = tid %% 32;");
    kt_buf_line(b, "/* Channel blocks of one tile are neighbours in launch order: they read the "
                   "same patch. */");
    kt_buf_line(b, "const int kb = blockIdx.x %% KBLOCKS, tile = blockIdx.x / KBLOCKS;");
    kt_buf_line(b, "const int n = blockIdx.y;");
    kt_buf_line(b, "const int k0 = kb * BN, p0 = (tile / TILES_Q) * OH, q0 = (tile %% TILES_Q) * "
                   "OW;");
    kt_buf_line(b, "const int h0 = p0 * STR_H - PAD_H, w0 = q0 * STR_W - PAD_W; /* patch origin "
                   "*/");
    kt_buf_line(b, "const float *xn = x + (idx_t)n * C * H * W;");
    kt_buf_line(b, "const unsigned smem0 = kt_smem_u32(kt_smem);");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Filter channel j = warp + NW * t is copied while NW * t < jn (inside BN and "
                   "K). */");
    kt_buf_line(b, "const int jn = (K - k0 < BN ? K - k0 : BN) - warp;");
    kt_buf_line(b, "const bool tap_last = lane < R * S - 32 * (FI - 1);");
    kt_buf_line(b, "const float *wt = w + (idx_t)(k0 + warp) * GEMM_K + lane;");
    kt_buf_line(b, "const unsigned wd = smem0 + 4 * (XS + lane * BNP + warp);");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Issues the copies of input channel c into stage `stage`. */");
    kt_buf_line(b, "auto load_chunk = [&](int c, int stage) {");
    b->indent = 8;
    kt_buf_line(b, "const unsigned so = 4 * stage * STAGE;");
    kt_buf_line(b, "const float *xc = xn + (idx_t)c * H * W;");
    kt_buf_line(b, "/* Patch column x = lane + 32 * i: its stored word and whether it lies in "
                   "the image (else");
    kt_buf_line(b, " * zero-filled: a copy of 0 bytes reads nothing). Recomputed per channel: the "
                   "lane id comes");
    kt_buf_line(b, " * from a volatile read, so none of this is hoisted to hold registers during "
                   "the multiplies. */");
    kt_buf_line(b, "const unsigned ln = kt_lane_id();");
    kt_buf_line(b, "unsigned xdst[XI];");
    kt_buf_line(b, "bool xin[XI];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < XI; i++) {");
    kt_buf_line(b, "    const unsigned xx = ln + 32 * i;");
    kt_buf_line(b, "    /* With STR_W dividing 32 the offsets of i > 0 are constants. */");
    kt_buf_line(b, "    xdst[i] = smem0 + so +");
    kt_buf_line(
        b,
        "              4 * (32 %% STR_W == 0 ? (ln %% STR_W) * PL + ln / STR_W + 32 * i / STR_W");
    kt_buf_line(b, "                                   : (xx %% STR_W) * PL + xx / STR_W);");
    kt_buf_line(b, "    xin[i] = (unsigned)(w0 + (int)xx) < (unsigned)W;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "const bool x_last = (int)ln < IW - 32 * (XI - 1); /* the last column group "
                   "is partial */");
    kt_buf_line(b, "#pragma unroll %s", pl->xt * pl->xi <= 64 ? "" : "1");
    kt_buf_line(b, "for (int t = 0; t < XT; t++) {");
    kt_buf_line(b, "    const int y = warp + NW * t;");
    kt_buf_line(b, "    if (t < XT - 1 || IH %% NW == 0 || y < IH) {");
    kt_buf_line(b, "        const int h = h0 + y;");
    kt_buf_line(b, "        const bool in = (unsigned)h < (unsigned)H;");
    kt_buf_line(b, "        const float *xr = xc + ((idx_t)h * W + w0 + (int)ln);");
    kt_buf_line(b, "        const unsigned d = 4 * RP * ((y %% STR_H) * RIDX + y / STR_H);");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int i = 0; i < XI; i++)");
    kt_buf_line(b, "            if (i < XI - 1 || x_last)");
    kt_buf_line(
        b, "                kt_cp_async4_u32(xdst[i] + d, xr + 32 * i, in && xin[i] ? 4 : 0);");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    kt_buf_line(b, "const float *wc = wt + c * R * S;");
    kt_buf_line(b, "#pragma unroll %s", pl->ft * pl->fi <= 128 ? "" : "1");
    kt_buf_line(b, "for (int t = 0; t < FT; t++)");
    kt_buf_line(b, "    if ((NW * (t + 1) <= BN && K %% BN == 0) || NW * t < jn) {");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int i = 0; i < FI; i++)");
    kt_buf_line(b, "            if (i < FI - 1 || tap_last)");
    kt_buf_line(b, "                kt_cp_async4_u32_all(wd + so + 4 * (32 * i * BNP + NW * t),");
    kt_buf_line(b, "                                     wc + NW * t * GEMM_K + 32 * i);");
    kt_buf_line(b, "    }");
    b->indent = 4;
    kt_buf_line(b, "};");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Thread tile: channels k0 + kg * TK + j, row p0 + pr, columns q0 + cg * TQ + "
                   "i. The lanes of");
    kt_buf_line(b, " * a warp differ in pixels (window loads spread over banks) and mostly share "
                   "kg (filter");
    kt_buf_line(b, " * loads broadcast). */");
    kt_buf_line(b, "const int kg = tid / PT, pt = tid %% PT, pr = pt / CGN, cg = pt %% CGN;");
    kt_buf_line(b, "float acc[TK][TQ] = {};");
    kt_buf_line(b, "auto compute_chunk = [&](int stage) {");
    b->indent = 8;
    kt_buf_line(b, "const float *xs = smem + stage * STAGE + pr * RP + cg * TQ;");
    kt_buf_line(b, "const float *ws = smem + stage * STAGE + XS + kg * TK;");
    kt_buf_line(b, "#pragma unroll 1");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    b->indent = 12;
    kt_buf_line(b, "/* Input row pr * STR_H + r of the patch, filter row r. */");
    kt_buf_line(b, "const float *xr = xs + ((r %% STR_H) * RIDX + r / STR_H) * RP;");
    kt_buf_line(b, "const float *wr = ws + r * S * BNP;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ph = 0; ph < STR_W && ph < S; ph++) {");
    b->indent = 16;
    kt_buf_line(b, "/* Filter columns s = ph + m * STR_W read words m .. m + TQ - 1 of this "
                   "window. */");
    kt_buf_line(b, "float xv[4 * WV];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int v = 0; v < WV; v++)");
    kt_buf_line(b, "    if (4 * v < TQ + (S - 1 - ph) / STR_W) {");
    kt_buf_line(b, "        const %s t = *(const %s *)(xr + ph * PL + 4 * v);", vt, vt);
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int u = 0; u < 4; u++)");
    kt_buf_line(b, "            xv[4 * v + u] = t.v[u];");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int m = 0; m < MS; m++) {");
    b->indent = 20;
    kt_buf_line(b, "const int s = ph + m * STR_W;");
    kt_buf_line(b, "if (s >= S)");
    kt_buf_line(b, "    break;");
    kt_buf_line(b, "float wv[TK]; /* filter (r, s) of the thread's channels: a broadcast */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < TK; j += 4) {");
    kt_buf_line(b, "    const %s t = *(const %s *)(wr + s * BNP + j);", vt, vt);
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int u = 0; u < 4; u++)");
    kt_buf_line(b, "        wv[j + u] = t.v[u];");
    kt_buf_line(b, "}");
    ops_emit_fma_tile(b, "j", "TK", "i", "TQ", "xv[i + m]", "wv[j]");
    b->indent = 16;
    kt_buf_line(b, "}");
    b->indent = 12;
    kt_buf_line(b, "}");
    b->indent = 8;
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "};");
    kt_buf_printf(b, "\n");
    if (pl->stages == 1) {
        kt_buf_line(b, "for (int c = 0; c < C; c++) {");
        kt_buf_line(b, "    load_chunk(c, 0);");
        kt_buf_line(b, "    kt_cp_async_commit();");
        kt_buf_line(b, "    kt_cp_async_wait<0>();");
        kt_buf_line(b, "    __syncthreads();");
        kt_buf_line(b, "    compute_chunk(0);");
        kt_buf_line(b, "    __syncthreads(); /* the stage is free (and, after the last, the "
                       "output tile) */");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "/* STAGES - 1 channels in flight while one is computed. */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int st = 0; st < STAGES - 1; st++) {");
        kt_buf_line(b, "    if (st < C)");
        kt_buf_line(b, "        load_chunk(st, st);");
        kt_buf_line(b, "    kt_cp_async_commit();");
        kt_buf_line(b, "}");
        kt_buf_line(b, "#pragma unroll 1");
        kt_buf_line(b, "for (int c = 0; c < C; c++) {");
        kt_buf_line(b, "    kt_cp_async_wait<STAGES - 2>(); /* channel c has landed */");
        kt_buf_line(b, "    __syncthreads();                /* ... for every thread; stage (c - 1) "
                       "is free */");
        kt_buf_line(b, "    if (c + STAGES - 1 < C)");
        kt_buf_line(b, "        load_chunk(c + STAGES - 1, (c + STAGES - 1) %% STAGES);");
        kt_buf_line(b, "    kt_cp_async_commit();");
        kt_buf_line(b, "    compute_chunk(c %% STAGES);");
        kt_buf_line(b, "}");
        kt_buf_line(b, "kt_cp_async_wait<0>();");
        kt_buf_line(b, "__syncthreads(); /* every stage is free: the output tile reuses them */");
    }
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Epilogue: the tile goes through shared memory ([BN][OH][OW]) so that "
                   "consecutive threads");
    kt_buf_line(b, " * store consecutive columns of a row (masked at the edges). */");
    kt_buf_line(b, "float *os = smem;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < TK; j++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < TQ; i += 4) {");
    kt_buf_line(b, "        %s t;", vt);
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int u = 0; u < 4; u++)");
    kt_buf_line(b, "            t.v[u] = acc[j][i + u];");
    kt_buf_line(b, "        *(%s *)(os + (kg * TK + j) * BM + pr * OW + cg * TQ + i) = t;", vt);
    kt_buf_line(b, "    }");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "/* Element e = tid + THREADS * u of the tile (TK * TQ per thread): channel "
                   "e / BM, pixel");
    kt_buf_line(b, " * e %% BM, the same pixel for every u when THREADS is a multiple of BM. */");
    kt_buf_line(b, "if constexpr (THREADS %% BM == 0) {");
    kt_buf_line(b, "    const int pix = tid %% BM, p = p0 + pix / OW, q = q0 + pix %% OW;");
    kt_buf_line(b, "    if (p < P && q < Q) {");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int u = 0; u < TK * TQ; u++) {");
    kt_buf_line(b, "            const int j = tid / BM + u * (THREADS / BM);");
    kt_buf_line(b, "            if (K %% BN == 0 || k0 + j < K)");
    kt_buf_line(b, "                kt_conv_store(os[j * BM + pix], n, k0 + j, p, q, %s);",
                nm->call);
    kt_buf_line(b, "        }");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "} else {");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int u = 0; u < TK * TQ; u++) {");
    kt_buf_line(b, "        const int e = tid + THREADS * u, j = e / BM, pix = e %% BM;");
    kt_buf_line(b, "        const int p = p0 + pix / OW, q = q0 + pix %% OW;");
    kt_buf_line(b, "        if ((K %% BN == 0 || k0 + j < K) && p < P && q < Q)");
    kt_buf_line(b, "            kt_conv_store(os[e], n, k0 + j, p, q, %s);", nm->call);
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_line(b, "}");
}
