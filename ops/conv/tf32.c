/* conv family, implicit GEMM: one stage on mma.sync m16n8k8 tf32, plain or error-compensated
 * (tf32x3) (ops/conv/conv.h lists the files). */
#include "conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tf32 / tf32x3: fragments read element-wise from the float tiles (PTX ISA m16n8k8 .tf32
 * layout, g = lane / 4, t = lane % 4): A a0 (g, t), a1 (g + 8, t), a2 (g, t + 4),
 * a3 (g + 8, t + 4); B b0 (k = t, n = g), b1 (k = t + 4, n = g). */
void conv_emit_compute_tf32(kt_buf *b, const ig_plan *pl)
{
    bool x3 = pl->math == MATH_TF32X3;
    kt_buf_line(b, "const int lane = tid %% 32, warp = tid / 32;");
    kt_buf_line(b, "const int g = lane / 4, t = lane %% 4; /* fragment row and column within an "
                   "mma tile */");
    kt_buf_line(b, "const int wm0 = (warp %% WARPS_M) * WTM, wn0 = (warp / WARPS_M) * WTN;");
    kt_buf_line(b, "float acc[MI][NI][4] = {};");
    if (x3) {
        kt_buf_line(b, "/* One stage: BK / 8 steps of 3 x MI x NI mma tiles per warp. Each float "
                       "is split into");
        kt_buf_line(b, " * its tf32 big and small parts as its fragment is read.");
    } else {
        kt_buf_line(b, "/* One stage: BK / 8 steps of MI x NI mma tiles per warp. Each float is "
                       "rounded to tf32");
        kt_buf_line(b, " * as its fragment is read.");
    }
    kt_buf_line(b, " * Lane (g, t) reads row g, column t: with the 4-float row pad the 32 lanes "
                   "of a read hit");
    kt_buf_line(b, " * 32 distinct banks. */");
    kt_buf_line(b, "auto compute_tile = [&](int stage) {");
    b->indent += 4;
    kt_buf_line(b, "const float *as = As + stage * BM * LDS, *bs = Bs + stage * BN * LDS;");
    if (x3)
        kt_buf_line(b, "float part[MI][NI][4] = {}; /* this stage's products, added to acc at "
                       "its end */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int k8 = 0; k8 < BK; k8 += 8) {");
    b->indent += 4;
    if (x3)
        kt_buf_line(b, "unsigned a_big[MI][4], a_small[MI][4], b_big[NI][2], b_small[NI][2];");
    else
        kt_buf_line(b, "unsigned af[MI][4], bf[NI][2];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int mi = 0; mi < MI; mi++) {");
    b->indent += 4;
    kt_buf_line(b, "const float *ap = as + (wm0 + mi * 16 + g) * LDS + k8 + t;");
    static const char *const a_off[4] = {"0", "8 * LDS", "4", "8 * LDS + 4"};
    static const char *const a_pos[4] = {"(g, t)", "(g + 8, t)", "(g, t + 4)", "(g + 8, t + 4)"};
    for (int r = 0; r < 4; r++) {
        char call[96];
        if (x3)
            snprintf(call, sizeof(call),
                     "kt_split_tf32_rna(ap[%s], a_big[mi][%d], a_small[mi][%d]);", a_off[r], r, r);
        else
            snprintf(call, sizeof(call), "af[mi][%d] = kt_tf32(ap[%s]);", r, a_off[r]);
        kt_buf_line(b, "%-*s /* %s */", x3 ? 66 : 36, call, a_pos[r]);
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ni = 0; ni < NI; ni++) {");
    b->indent += 4;
    kt_buf_line(b, "const float *bp = bs + (wn0 + ni * 8 + g) * LDS + k8 + t;");
    if (x3) {
        kt_buf_line(b,
                    "kt_split_tf32_rna(bp[0], b_big[ni][0], b_small[ni][0]); /* (k = t, n = g) */");
        kt_buf_line(b, "kt_split_tf32_rna(bp[4], b_big[ni][1], b_small[ni][1]); /* (k = t + 4, n = "
                       "g) */");
    } else {
        kt_buf_line(b, "bf[ni][0] = kt_tf32(bp[0]); /* (k = t, n = g) */");
        kt_buf_line(b, "bf[ni][1] = kt_tf32(bp[4]); /* (k = t + 4, n = g) */");
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
    if (x3) {
        /* The tensor cores add into their fp32 accumulator by truncation, so a whole reduction
         * accumulated inside the mmas errs in proportion to K (measured on the H100 for the
         * gemm family: 7e-6 normwise at K = 1024); summing each k step apart and adding it
         * with a round-to-nearest FADD keeps the growth that of fp32. */
        kt_buf_line(b, "/* Small terms first; one pass over the tiles per term keeps MI x NI "
                       "independent mmas");
        kt_buf_line(b, " * in flight. */");
        static const char *const terms[3][2] = {
            {"a_small", "b_big"}, {"a_big", "b_small"}, {"a_big", "b_big"}};
        for (int k = 0; k < 3; k++)
            conv_emit_mma_tiles(b, "kt_mma_m16n8k8_tf32", "part", terms[k][0], terms[k][1]);
    } else {
        conv_emit_mma_tiles(b, "kt_mma_m16n8k8_tf32", "acc", "af", "bf");
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
    if (x3) {
        kt_buf_line(b, "/* The tensor cores add into their accumulator by truncation, whose error "
                       "grows with the");
        kt_buf_line(b, " * reduction length: the mmas sum only this stage's BK columns; "
                       "round-to-nearest FADDs carry");
        kt_buf_line(b, " * them into acc. */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int mi = 0; mi < MI; mi++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int ni = 0; ni < NI; ni++)");
        kt_buf_line(b, "        #pragma unroll");
        kt_buf_line(b, "        for (int v = 0; v < 4; v++)");
        kt_buf_line(b, "            acc[mi][ni][v] += part[mi][ni][v];");
    }
    b->indent -= 4;
    kt_buf_line(b, "};");
}
