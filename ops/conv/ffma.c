/* conv family, implicit GEMM: one stage on FFMA (ops/conv/conv.h lists the files). */
#include "conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void conv_emit_compute_ffma(kt_buf *b, const conv_info *ci)
{
    /* The fast thread index runs along the output's contiguous dimension so stores coalesce:
     * pixels for NCHW, channels for NHWC. Shared reads stay conflict-free or broadcast. */
    if (ci->nhwc) {
        kt_buf_line(b, "const int col0 = tid %% (BN / TN), row0 = tid / (BN / TN);");
    } else {
        kt_buf_line(b, "const int row0 = tid %% (BM / TM), col0 = tid / (BM / TM);");
    }
    kt_buf_line(b, "/* Thread tile: rows row0 + i * (BM / TM), columns col0 + j * (BN / TN). */");
    kt_buf_line(b, "float acc[TM][TN] = {};");
    kt_buf_line(b, "auto compute_tile = [&](int stage) {");
    b->indent += 4;
    kt_buf_line(b, "const float *as = As + stage * BK * LDA, *bs = Bs + stage * BK * LDB;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int kk = 0; kk < BK; kk++) {");
    kt_buf_line(b, "    float a[TM], bv[TN];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < TM; i++)");
    kt_buf_line(b, "        a[i] = as[kk * LDA + row0 + i * (BM / TM)];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < TN; j++)");
    kt_buf_line(b, "        bv[j] = bs[kk * LDB + col0 + j * (BN / TN)];");
    b->indent += 4;
    ops_emit_fma_tile(b, "i", "TM", "j", "TN", "a[i]", "bv[j]");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "};");
}
