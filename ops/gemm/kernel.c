/* gemm family: the mma.sync / FFMA kernel skeleton (pipeline, k loop, stores) (ops/gemm/gemm.h
 * lists the files). */
#include "gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gemm_emit_main_kernel(const gemm_emit *e, const char *entry)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    const char *sty = ops_emit_ctype(c->sdt);
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Block: a BM x BN output tile of batch bz%s; %d warps. */",
                c->parallel  ? " over the k tiles of one split-K slice"
                : c->serial  ? " over the k tiles of one split-K slice, summed in turn"
                : c->cluster ? " over the k tiles of one split-K slice, summed in its cluster"
                             : "",
                c->wm * c->wn);
    kt_buf_printf(b, "extern \"C\" __global__ void %s__launch_bounds__(THREADS, 1) %s",
                  c->cluster ? "__cluster_dims__(SPLITK, 1, 1) " : "", entry);
    gemm_emit_kernel_params(e, c->parallel || c->serial);
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "{");
    b->indent = 4;
    kt_buf_line(b, OPS_DYNAMIC_SMEM);
    kt_buf_line(b, "%s *as = reinterpret_cast<%s *>(kt_smem); /* STAGES x A_STAGE */", sty, sty);
    kt_buf_line(b, "%s *bs = as + STAGES * A_STAGE;              /* STAGES x B_STAGE */", sty);
    kt_buf_line(b, "const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;");
    kt_buf_line(b, "const int wm0 = warp / WN * WTM, wn0 = warp %% WN * WTN;");
    kt_buf_line(b, "int tile_m, tile_n;");
    if (c->serial || c->cluster) {
        kt_buf_line(b, "/* the slices of a tile are adjacent blocks, lowest slice first */");
        kt_buf_line(b, "const int pid = blockIdx.x / SPLITK, slice = blockIdx.x %% SPLITK;");
        kt_buf_line(b, "ktg_raster(pid, tile_m, tile_n);");
    } else {
        kt_buf_line(b, "ktg_raster(blockIdx.x, tile_m, tile_n);");
    }
    kt_buf_line(b, "const int m0 = tile_m * BM, n0 = tile_n * BN;");
    if (c->serial || c->cluster) {
        kt_buf_line(b, "const int bz = blockIdx.z;");
        kt_buf_line(b, "const int kt0 = slice * KTILES_PER_SLICE;");
        kt_buf_line(b, "const int nkt = KTILES - kt0 < KTILES_PER_SLICE ? KTILES - kt0 : "
                       "KTILES_PER_SLICE;");
    } else if (c->parallel) {
        kt_buf_line(b, "const int bz = blockIdx.z / SPLITK, slice = blockIdx.z %% SPLITK;");
        kt_buf_line(b, "const int kt0 = slice * KTILES_PER_SLICE;");
        kt_buf_line(b, "const int nkt = KTILES - kt0 < KTILES_PER_SLICE ? KTILES - kt0 : "
                       "KTILES_PER_SLICE;");
    } else {
        kt_buf_line(b, "const int bz = blockIdx.z;");
        kt_buf_line(b, "const int kt0 = 0, nkt = KTILES;");
    }
    gemm_emit_operand_pointers(e);
    bool x3 = c->math == MATH_TF32X3;
    if (c->tc) {
        kt_buf_line(b, "float acc[MI][NI][4]%s;", x3 ? ", part[MI][NI][4]" : "");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MI; i++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < NI; j++)");
        kt_buf_line(b, "        acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;");
        if (x3) {
            kt_buf_line(b, "#pragma unroll");
            kt_buf_line(b, "for (int i = 0; i < MI; i++)");
            kt_buf_line(b, "    #pragma unroll");
            kt_buf_line(b, "    for (int j = 0; j < NI; j++)");
            kt_buf_line(
                b, "        part[i][j][0] = part[i][j][1] = part[i][j][2] = part[i][j][3] = 0.0f;");
        }
    } else {
        kt_buf_line(b, "const int am = wm0 + lane / LX, bn = wn0 + lane %% LX;");
        kt_buf_line(b, "float acc[TM][TN];");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < TM; i++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < TN; j++)");
        kt_buf_line(b, "        acc[i][j] = 0.0f;");
    }
    kt_buf_line(
        b, "/* Pipeline prologue: k tiles 0 .. STAGES - 2 in flight, one commit group each. */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int s = 0; s < STAGES - 1; s++) {");
    kt_buf_line(b, "    if (s < nkt)");
    kt_buf_line(b,
                "        ktg_load_tiles(as + s * A_STAGE, bs + s * B_STAGE, ag, bg, m0, n0, (kt0 "
                "+ s) * BK);");
    kt_buf_line(b, "    kt_cp_async_commit();");
    kt_buf_line(b, "}");
    kt_buf_line(b, "for (int i = 0; i < nkt; i++) {");
    b->indent = 8;
    kt_buf_line(b, "/* Tile i has landed once at most STAGES - 2 younger groups are pending; the "
                   "barrier also");
    kt_buf_line(b, " * tells every warp is done with stage (i - 1) %% STAGES, refilled next. */");
    kt_buf_line(b, "kt_cp_async_wait<STAGES - 2>();");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "const int next = i + STAGES - 1;");
    kt_buf_line(b, "if (next < nkt)");
    kt_buf_line(b,
                "    ktg_load_tiles(as + next %% STAGES * A_STAGE, bs + next %% STAGES * B_STAGE, "
                "ag, bg, m0, n0, (kt0 + next) * BK);");
    kt_buf_line(b, "kt_cp_async_commit();");
    if (c->tc && x3) {
        kt_buf_line(b, "ktg_stage(as + i %% STAGES * A_STAGE, bs + i %% STAGES * B_STAGE, wm0, "
                       "wn0, lane, part);");
        kt_buf_line(b, "if ((i + 1) %% FLUSH_KTILES == 0 || i + 1 == nkt)");
        kt_buf_line(b, "    ktg_flush(acc, part);");
    } else if (c->tc)
        kt_buf_line(b,
                    "ktg_stage(as + i %% STAGES * A_STAGE, bs + i %% STAGES * B_STAGE, wm0, wn0, "
                    "lane, acc);");
    else
        kt_buf_line(b, "ktg_stage(as + i %% STAGES * A_STAGE, bs + i %% STAGES * B_STAGE, am, bn, "
                       "acc);");
    b->indent = 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "kt_cp_async_wait<0>();");

    /* Epilogue: fused chain and store, or the fp32 partial of this slice. */
    kt_buf args = {0};
    gemm_emit_store_args(e, &args);
    const char *a = args.data ? args.data : "";
    if (c->parallel)
        kt_buf_line(b, "float *ws = static_cast<float *>(workspace);");
    if (c->serial)
        gemm_emit_serial_epilogue(e);
    if (c->cluster)
        gemm_emit_cluster_epilogue(e);
    if (c->tc) {
        kt_buf_line(b, "/* Accumulator (i, j) holds rows g, g + 8 and columns 2t, 2t + 1 of its "
                       "16 x 8 mma tile. */");
        kt_buf_line(b, "const int g = lane >> 2, t = lane & 3;");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MI; i++) {");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < NI; j++) {");
        b->indent = 12;
        if (c->cluster) {
            kt_buf_line(b, "if ((i * NI + j) %% SPLITK != slice)");
            kt_buf_line(b, "    continue; /* another slice's share */");
        }
        kt_buf_line(b, "const int m = m0 + wm0 + i * 16 + g, n = n0 + wn0 + j * 8 + 2 * t;");
        if (c->parallel) {
            kt_buf_line(b, "ktg_partial2(ws, slice, bz, m, n, acc[i][j][0], acc[i][j][1]);");
            kt_buf_line(b, "ktg_partial2(ws, slice, bz, m + 8, n, acc[i][j][2], acc[i][j][3]);");
        } else {
            kt_buf_line(b, "ktg_store2(%s, bz, m, n, acc[i][j][0], acc[i][j][1]);", a);
            kt_buf_line(b, "ktg_store2(%s, bz, m + 8, n, acc[i][j][2], acc[i][j][3]);", a);
        }
        b->indent = 4;
        kt_buf_line(b, "    }");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < TM; i++) {");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < TN; j++) {");
        b->indent = 12;
        if (c->cluster) {
            kt_buf_line(b, "if ((i * TN + j) %% SPLITK != slice)");
            kt_buf_line(b, "    continue; /* another slice's share */");
        }
        kt_buf_line(b, "const int m = m0 + am + i * LY, n = n0 + bn + j * LX;");
        if (c->parallel)
            kt_buf_line(b, "ktg_partial(ws, slice, bz, m, n, acc[i][j]);");
        else
            kt_buf_line(b, "ktg_store(%s, bz, m, n, acc[i][j]);", a);
        b->indent = 4;
        kt_buf_line(b, "    }");
        kt_buf_line(b, "}");
    }
    kt_buf_free(&args);
    b->indent = 0;
    kt_buf_line(b, "}");
}
