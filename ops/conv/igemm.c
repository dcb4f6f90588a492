/* conv family: the implicit-GEMM kernel: tile constants, the k loop's pipeline and the stores;
 * the loaders and each math path's stage are in files of their own (ops/conv/conv.h lists the
 * files). */
#include "conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void conv_emit_igemm(kt_buf *b, const conv_info *ci, const ig_plan *pl, const conv_names *nm)
{
    kt_buf_line(b, "/* Implicit GEMM: block tile BM pixels x BN channels, BK-deep reduction "
                   "steps. */");
    kt_buf_line(b, "constexpr int BM = %d, BN = %d, BK = %d, THREADS = %d, STAGES = %d;", pl->bm,
                pl->bn, pl->bk, pl->threads, pl->stages);
    kt_buf_line(b, "constexpr int KTILES = (GEMM_K + BK - 1) / BK;");
    if (pl->tc) {
        kt_buf_line(b, "constexpr int WARPS_M = %d, WARPS_N = %d;          /* warp grid */",
                    pl->warps_m, pl->warps_n);
        kt_buf_line(b, "constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N; /* warp tile */");
        kt_buf_line(b, "constexpr int MI = WTM / 16, NI = WTN / 8;           /* mma tiles per "
                       "warp */");
        if (pl->mma)
            kt_buf_line(b, "constexpr int LDS = BK + 8; /* row pitch: the 16-byte pad makes "
                           "ldmatrix conflict-free */");
        else
            kt_buf_line(b, "constexpr int LDS = BK + 4; /* row pitch (floats): the pad makes "
                           "fragment reads conflict-free */");
    } else {
        kt_buf_line(b, "constexpr int TM = %d, TN = %d;          /* outputs per thread */", pl->tm,
                    pl->tn);
        kt_buf_line(b, "constexpr int LDA = BM + 1, LDB = BN + 1; /* padded k-major rows */");
    }
    if (pl->cp_async) {
        kt_buf_line(b, "constexpr int CPR = BK / %d; /* 16-byte chunks per tile row */", pl->vec);
        kt_buf_line(b, "constexpr int A_CHUNKS = BM * CPR / THREADS, B_CHUNKS = BN * CPR / "
                       "THREADS;");
    } else {
        kt_buf_line(b, "constexpr int A_PER = BM * BK / THREADS, B_PER = BN * BK / THREADS; /* "
                       "elements per thread */");
        kt_buf_line(b, "constexpr int A_ROWS = THREADS >= BM ? 1 : BM / THREADS; /* distinct "
                       "pixels among them */");
    }
    kt_buf_printf(b, "\n");
    if (!pl->cp_async && conv_kk_table_ok(ci))
        conv_emit_kk_table(b, ci, pl->bk);
    char name[32];
    snprintf(name, sizeof(name), "igemm_%s", conv_math_labels[pl->math]);
    conv_emit_kernel_head(b, "1", name, nm);
    kt_buf_line(b, OPS_DYNAMIC_SMEM);
    if (pl->mma) {
        kt_buf_line(b, "unsigned short *As = (unsigned short *)kt_smem; /* [STAGES][BM][LDS] "
                       "pixels x reduction */");
        kt_buf_line(b, "unsigned short *Bs = As + STAGES * BM * LDS;     /* [STAGES][BN][LDS] "
                       "channels x reduction */");
    } else if (pl->tf32) {
        kt_buf_line(b, "float *As = (float *)kt_smem;     /* [STAGES][BM][LDS] pixels x "
                       "reduction, raw floats */");
        kt_buf_line(b, "float *Bs = As + STAGES * BM * LDS; /* [STAGES][BN][LDS] channels x "
                       "reduction */");
    } else {
        kt_buf_line(b, "float *As = (float *)kt_smem;         /* [STAGES][BK][LDA] */");
        kt_buf_line(b, "float *Bs = As + STAGES * BK * LDA;   /* [STAGES][BK][LDB] */");
    }
    kt_buf_line(b, "const int tid = threadIdx.x;");
    kt_buf_line(b, "const int m0 = blockIdx.x * BM;  /* first output pixel of the tile */");
    kt_buf_line(b, "const int n0 = blockIdx.y * BN;  /* first output channel within the group */");
    kt_buf_line(b, "const int grp = blockIdx.z;      /* conv group */");
    if (pl->cp_async) {
        conv_emit_row_setup(b, ci, "A_CHUNKS", "(tid + i * THREADS) / CPR");
        conv_emit_cp_async_loader(b, ci, pl);
    } else {
        conv_emit_row_setup(b, ci, "A_ROWS", "(tid + i * THREADS) % BM");
        conv_emit_plain_loader(b, ci, pl);
    }
    if (pl->mma)
        conv_emit_compute_mma(b, pl);
    else if (pl->tf32)
        conv_emit_compute_tf32(b, pl);
    else
        conv_emit_compute_ffma(b, ci);
    kt_buf_printf(b, "\n");
    if (pl->cp_async) {
        kt_buf_line(b, "/* Multi-stage pipeline: STAGES - 1 tiles in flight while one is "
                       "multiplied. */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int st = 0; st < STAGES - 1; st++) {");
        kt_buf_line(b, "    if (st < KTILES)");
        kt_buf_line(b, "        load_tile(st, st);");
        kt_buf_line(b, "    kt_cp_async_commit();");
        kt_buf_line(b, "}");
        kt_buf_line(b, "for (int kt = 0; kt < KTILES; kt++) {");
        kt_buf_line(b, "    kt_cp_async_wait<STAGES - 2>(); /* tile kt has landed */");
        kt_buf_line(b, "    __syncthreads();                /* ... for every thread; stage "
                       "(kt - 1) is free */");
        kt_buf_line(b, "    if (kt + STAGES - 1 < KTILES)");
        kt_buf_line(b, "        load_tile(kt + STAGES - 1, (kt + STAGES - 1) %% STAGES);");
        kt_buf_line(b, "    kt_cp_async_commit();");
        kt_buf_line(b, "    compute_tile(kt %% STAGES);");
        kt_buf_line(b, "}");
        kt_buf_line(b, "kt_cp_async_wait<0>();");
    } else if (pl->stages == 2) {
        kt_buf_line(b, "/* Double buffer: tile kt + 1 is loaded into registers while tile kt is "
                       "multiplied. */");
        kt_buf_line(b, "load_tile(0);");
        kt_buf_line(b, "store_tile(0);");
        kt_buf_line(b, "__syncthreads();");
        kt_buf_line(b, "for (int kt = 0; kt < KTILES; kt++) {");
        kt_buf_line(b, "    if (kt + 1 < KTILES)");
        kt_buf_line(b, "        load_tile(kt + 1);");
        kt_buf_line(b, "    compute_tile(kt %% 2);");
        kt_buf_line(b, "    if (kt + 1 < KTILES)");
        kt_buf_line(b, "        store_tile((kt + 1) %% 2);");
        kt_buf_line(b, "    __syncthreads();");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "for (int kt = 0; kt < KTILES; kt++) {");
        kt_buf_line(b, "    load_tile(kt);");
        kt_buf_line(b, "    store_tile(0);");
        kt_buf_line(b, "    __syncthreads();");
        kt_buf_line(b, "    compute_tile(0);");
        kt_buf_line(b, "    __syncthreads();");
        kt_buf_line(b, "}");
    }
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Epilogue: each accumulator is one output element (masked at the edges). */");
    if (pl->tc) {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int mi = 0; mi < MI; mi++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int ni = 0; ni < NI; ni++)");
        kt_buf_line(b, "        #pragma unroll");
        kt_buf_line(b, "        for (int v = 0; v < 4; v++) {");
        kt_buf_line(b, "            const int m = m0 + wm0 + mi * 16 + lane / 4 + (v / 2) * 8;");
        kt_buf_line(b, "            const int col = n0 + wn0 + ni * 8 + (lane %% 4) * 2 + v %% 2;");
        kt_buf_line(b, "            if (m < GEMM_M && col < GEMM_N)");
        kt_buf_line(b, "                kt_conv_store(acc[mi][ni][v], m / (Q * P), grp * KG + "
                       "col, (m / Q) %% P, m %% Q,");
        kt_buf_line(b, "                              %s);", nm->call);
        kt_buf_line(b, "        }");
    } else {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < TM; i++) {");
        kt_buf_line(b, "    const int m = m0 + row0 + i * (BM / TM);");
        kt_buf_line(b, "    if (m >= GEMM_M)");
        kt_buf_line(b, "        continue;");
        kt_buf_line(b, "    const int q = m %% Q, p = (m / Q) %% P, n = m / (Q * P);");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < TN; j++) {");
        kt_buf_line(b, "        const int col = n0 + col0 + j * (BN / TN);");
        kt_buf_line(b, "        if (col < GEMM_N)");
        kt_buf_line(b, "            kt_conv_store(acc[i][j], n, grp * KG + col, p, q, %s);",
                    nm->call);
        kt_buf_line(b, "    }");
        kt_buf_line(b, "}");
    }
    b->indent = 0;
    kt_buf_line(b, "}");
}
