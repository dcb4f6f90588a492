/* conv family, implicit GEMM: one stage on mma.sync m16n8k16 (f16, bf16), fragments by ldmatrix
 * (ops/conv/conv.h lists the files). */
#include "conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The MI x NI mma tiles of a warp for one k step: mma(d[mi][ni], a[mi], b[ni]) for each (the
 * tensor-core paths' one product loop; tf32x3 runs it once per term). */
void conv_emit_mma_tiles(kt_buf *b, const char *mma, const char *d, const char *a,
                         const char *bfrag)
{
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int mi = 0; mi < MI; mi++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int ni = 0; ni < NI; ni++)");
    kt_buf_line(b, "        %s(%s[mi][ni], %s[mi], %s[ni]);", mma, d, a, bfrag);
}

void conv_emit_compute_mma(kt_buf *b, const ig_plan *pl)
{
    const char *mma = pl->mt == OPS_DT_BF16 ? "kt_mma_m16n8k16_bf16" : "kt_mma_m16n8k16_f16";
    kt_buf_line(b, "const int lane = tid %% 32, warp = tid / 32;");
    kt_buf_line(b, "const int wm0 = (warp %% WARPS_M) * WTM, wn0 = (warp / WARPS_M) * WTN;");
    kt_buf_line(b, "float acc[MI][NI][4] = {};");
    kt_buf_line(b, "/* One stage: BK / 16 steps of MI x NI mma tiles per warp, fragments by "
                   "ldmatrix. */");
    kt_buf_line(b, "auto compute_tile = [&](int stage) {");
    b->indent += 4;
    kt_buf_line(b, "const unsigned short *as = As + stage * BM * LDS, *bs = Bs + stage * BN * "
                   "LDS;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int k16 = 0; k16 < BK; k16 += 16) {");
    b->indent += 4;
    kt_buf_line(b, "unsigned af[MI][4], bf[NI][2];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int mi = 0; mi < MI; mi++)");
    kt_buf_line(b, "    kt_ldmatrix_x4(af[mi][0], af[mi][1], af[mi][2], af[mi][3],");
    kt_buf_line(b, "                   as + (wm0 + mi * 16 + lane %% 16) * LDS + k16 + "
                   "(lane / 16) * 8);");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ni = 0; ni + 1 < NI; ni += 2) {");
    kt_buf_line(b, "    unsigned t[4];");
    kt_buf_line(b, "    kt_ldmatrix_x4(t[0], t[1], t[2], t[3],");
    kt_buf_line(
        b, "                   bs + (wn0 + ni * 8 + lane %% 8 + (lane / 16) * 8) * LDS + k16 +");
    kt_buf_line(b, "                       ((lane / 8) %% 2) * 8);");
    kt_buf_line(b, "    bf[ni][0] = t[0];");
    kt_buf_line(b, "    bf[ni][1] = t[1];");
    kt_buf_line(b, "    bf[ni + 1][0] = t[2];");
    kt_buf_line(b, "    bf[ni + 1][1] = t[3];");
    kt_buf_line(b, "}");
    kt_buf_line(b, "if (NI %% 2)");
    kt_buf_line(b, "    kt_ldmatrix_x2(bf[NI - 1][0], bf[NI - 1][1],");
    kt_buf_line(b, "                   bs + (wn0 + (NI - 1) * 8 + lane %% 8) * LDS + k16 +");
    kt_buf_line(b, "                       ((lane / 8) %% 2) * 8);");
    conv_emit_mma_tiles(b, mma, "acc", "af", "bf");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "};");
}
