/* gemm family: one pipeline stage on mma.sync (f16, bf16, tf32, tf32x3) (ops/gemm/gemm.h lists the
 * files). */
#include "gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- emitted helpers: the math of one pipeline stage ---- */

/* The library's mma.sync wrapper of the math path. */
static const char *mma_fn(int math)
{
    return gemm_is_tf32(math)  ? "kt_mma_m16n8k8_tf32"
           : math == MATH_BF16 ? "kt_mma_m16n8k16_bf16"
                               : "kt_mma_m16n8k16_f16";
}

void gemm_emit_mma_stage(const gemm_emit *e)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    const char *sty = ops_emit_ctype(c->sdt);
    bool tf32 = gemm_is_tf32(c->math), x3 = c->math == MATH_TF32X3;
    /* tf32x3 keeps the raw fp32 bits in the fragments and splits them after loading. */
    const char *cv = x3 ? "__float_as_uint" : "kt_tf32";
    if (tf32) {
        kt_buf_printf(b, "\n");
        kt_buf_line(b, "/* One BK-deep stage: the warp at (wm0, wn0) of the block tile multiplies "
                       "its WTM x WTN sub-tile,");
        kt_buf_line(b,
                    " * MI x NI mma.sync.m16n8k8 (tf32%s) per 8-deep k step. Fragments (PTX ISA; g "
                    "= lane / 4, t = lane %% 4):",
                    x3 ? "; three per product, on the big/small split of each operand" : "");
        kt_buf_line(
            b, " *   A 16x8: a0 (row g, k t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)");
        kt_buf_line(b, " *   B 8x8:  b0 (k t, col g), b1 (k t + 4, col g)");
        kt_buf_line(
            b, " *   C 16x8: c0, c1 (row g, cols 2t, 2t + 1), c2, c3 (row g + 8, same cols) */");
    } else {
        kt_buf_printf(b, "\n");
        kt_buf_line(b, "/* One BK-deep stage: the warp at (wm0, wn0) of the block tile multiplies "
                       "its WTM x WTN sub-tile,");
        kt_buf_line(b, " * MI x NI mma.sync.m16n8k16 per 16-deep k step. Fragments (PTX ISA; g = "
                       "lane / 4, t = lane %% 4;");
        kt_buf_line(b, " * each register holds two 16-bit elements, the lower k first):");
        kt_buf_line(b, " *   A 16x16: a0 (row g, k 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t + 8..), "
                       "a3 (g + 8, 2t + 8..)");
        kt_buf_line(b, " *   B 16x8:  b0 (k 2t..2t+1, col g), b1 (k 2t + 8.., col g)");
        kt_buf_line(
            b, " *   C 16x8:  c0, c1 (row g, cols 2t, 2t + 1), c2, c3 (row g + 8, same cols) */");
    }
    kt_buf_line(b,
                "__device__ __forceinline__ void ktg_stage(const %s *as, const %s *bs, int wm0, "
                "int wn0, int lane, float (&acc)[MI][NI][4])",
                sty, sty);
    kt_buf_line(b, "{");
    b->indent = 4;
    /* Lane addresses of the ldmatrix rows, from the kind tables shared with the tests. */
    int ka = -1, kb = -1;
    const gemm_operand *oa = &c->op[0], *ob = &c->op[1];
    if (tf32) {
        ka = oa->scalar_frag ? -1 : LDSM_A_K_TF32;
        kb = ob->scalar_frag ? -1 : LDSM_B_K_TF32;
    } else {
        ka = oa->row_is_k ? LDSM_A_M : LDSM_A_K;
        kb = ob->row_is_k ? LDSM_B_N : LDSM_B_K;
    }
    if (ka >= 0 || kb >= 0)
        kt_buf_line(b, "const int lr = lane & 7, lj = lane >> 3;");
    if (ka < 0 || kb < 0)
        kt_buf_line(b, "const int g = lane >> 2, t = lane & 3;");
    int kinds[2] = {ka, kb};
    for (int k = 0; k < 2; k++) {
        if (kinds[k] < 0)
            continue;
        bool hi = ldsm_kinds[kinds[k]].row_hi;
        kt_buf_line(b, "/* %s */", ldsm_kinds[kinds[k]].what);
        kt_buf_line(b, "const int %c_r = (%s) * 8 + lr, %c_c = (%s) * %d;", k ? 'b' : 'a',
                    hi ? "lj >> 1" : "lj & 1", k ? 'b' : 'a', hi ? "lj & 1" : "lj >> 1",
                    ldsm_kinds[kinds[k]].cw);
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int kk = 0; kk < BK; kk += %d) {", c->kstep);
    b->indent = 8;
    kt_buf_line(b, "unsigned a[MI][4], b[NI][2];");
    /* A fragments */
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < MI; i++) {");
    b->indent = 12;
    if (tf32 && oa->scalar_frag) {
        kt_buf_line(b, "/* A stored [k][m]: element by element */");
        kt_buf_line(b, "const int m = wm0 + i * 16 + g;");
        kt_buf_line(b, "a[i][0] = %s(as[ktg_a_slot(kk + t, m)]);", cv);
        kt_buf_line(b, "a[i][1] = %s(as[ktg_a_slot(kk + t, m + 8)]);", cv);
        kt_buf_line(b, "a[i][2] = %s(as[ktg_a_slot(kk + t + 4, m)]);", cv);
        kt_buf_line(b, "a[i][3] = %s(as[ktg_a_slot(kk + t + 4, m + 8)]);", cv);
    } else if (tf32) {
        kt_buf_line(b,
                    "kt_ldmatrix_x4(a[i][0], a[i][1], a[i][2], a[i][3], as + ktg_a_slot(wm0 + i * "
                    "16 + a_r, kk + a_c));");
        if (!x3) {
            kt_buf_line(b, "#pragma unroll");
            kt_buf_line(b, "for (int r = 0; r < 4; r++)");
            kt_buf_line(b, "    a[i][r] = kt_tf32(__uint_as_float(a[i][r]));");
        }
    } else if (oa->row_is_k) {
        kt_buf_line(b,
                    "kt_ldmatrix_x4_trans(a[i][0], a[i][1], a[i][2], a[i][3], as + ktg_a_slot(kk + "
                    "a_r, wm0 + i * 16 + a_c));");
    } else {
        kt_buf_line(b,
                    "kt_ldmatrix_x4(a[i][0], a[i][1], a[i][2], a[i][3], as + ktg_a_slot(wm0 + i * "
                    "16 + a_r, kk + a_c));");
    }
    b->indent = 8;
    kt_buf_line(b, "}");
    /* B fragments */
    kt_buf_line(b, "#pragma unroll");
    if (tf32 && ob->scalar_frag) {
        kt_buf_line(b, "for (int j = 0; j < NI; j++) {");
        b->indent = 12;
        kt_buf_line(b, "/* B stored [k][n]: element by element */");
        kt_buf_line(b, "const int n = wn0 + j * 8 + g;");
        kt_buf_line(b, "b[j][0] = %s(bs[ktg_b_slot(kk + t, n)]);", cv);
        kt_buf_line(b, "b[j][1] = %s(bs[ktg_b_slot(kk + t + 4, n)]);", cv);
    } else {
        kt_buf_line(b, "for (int j = 0; j < NI; j += 2) {");
        b->indent = 12;
        kt_buf_line(b, "/* one x4 load: b[j] from matrices 0 and 1, b[j + 1] from 2 and 3 */");
        if (x3) {
            kt_buf_line(b, "kt_ldmatrix_x4(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], bs + "
                           "ktg_b_slot(wn0 + j * 8 + b_r, kk + b_c));");
        } else if (tf32) {
            kt_buf_line(b, "kt_ldmatrix_x4(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], bs + "
                           "ktg_b_slot(wn0 + j * 8 + b_r, kk + b_c));");
            kt_buf_line(b, "#pragma unroll");
            kt_buf_line(b, "for (int r = 0; r < 2; r++) {");
            kt_buf_line(b, "    b[j][r] = kt_tf32(__uint_as_float(b[j][r]));");
            kt_buf_line(b, "    b[j + 1][r] = kt_tf32(__uint_as_float(b[j + 1][r]));");
            kt_buf_line(b, "}");
        } else if (ob->row_is_k) {
            kt_buf_line(b, "kt_ldmatrix_x4_trans(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], bs + "
                           "ktg_b_slot(kk + b_r, wn0 + j * 8 + b_c));");
        } else {
            kt_buf_line(b, "kt_ldmatrix_x4(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], bs + "
                           "ktg_b_slot(wn0 + j * 8 + b_r, kk + b_c));");
        }
    }
    b->indent = 8;
    kt_buf_line(b, "}");
    if (x3) {
        kt_buf_line(
            b, "/* split: a and b keep the big halves, a_lo and b_lo receive the small ones */");
        kt_buf_line(b, "unsigned a_lo[MI][4], b_lo[NI][2];");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MI; i++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int r = 0; r < 4; r++)");
        kt_buf_line(b, "        kt_split_tf32(__uint_as_float(a[i][r]), a[i][r], a_lo[i][r]);");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int j = 0; j < NI; j++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int r = 0; r < 2; r++)");
        kt_buf_line(b, "        kt_split_tf32(__uint_as_float(b[j][r]), b[j][r], b_lo[j][r]);");
    }
    if (x3) {
        /* acc is the chunk's running sum here (see gemm_emit_main_kernel). Small terms first; one
         * pass over the tiles per term puts MI x NI independent mmas between dependent ones. */
        kt_buf_line(b, "/* small terms first, one pass over the tiles per term */");
        static const char *const terms[3][2] = {{"a_lo", "b"}, {"a", "b_lo"}, {"a", "b"}};
        for (int k = 0; k < 3; k++) {
            kt_buf_line(b, "#pragma unroll");
            kt_buf_line(b, "for (int i = 0; i < MI; i++)");
            kt_buf_line(b, "    #pragma unroll");
            kt_buf_line(b, "    for (int j = 0; j < NI; j++)");
            kt_buf_line(b, "        %s(acc[i][j], %s[i], %s[j]);", mma_fn(c->math), terms[k][0],
                        terms[k][1]);
        }
    } else {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MI; i++) {");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < NI; j++)");
        kt_buf_line(b, "        %s(acc[i][j], a[i], b[j]);", mma_fn(c->math));
        kt_buf_line(b, "}");
    }
    b->indent = 4;
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_line(b, "}");
    if (x3) {
        kt_buf_printf(b, "\n");
        kt_buf_line(b, "/* The tensor cores add into their fp32 accumulator by truncation, whose "
                       "error grows with the");
        kt_buf_line(b, " * number of adds (measured on the H100: 7e-6 normwise over K = 1024 "
                       "summed in the mmas).");
        kt_buf_line(b,
                    " * The mmas therefore sum FLUSH_KTILES k tiles (%d columns) into part, which "
                    "a round-to-nearest",
                    c->flush_ktiles * c->bk);
        kt_buf_line(b, " * FADD carries into acc; part restarts at zero. */");
        kt_buf_line(b, "__device__ __forceinline__ void ktg_flush(float (&acc)[MI][NI][4], float "
                       "(&part)[MI][NI][4])");
        kt_buf_line(b, "{");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "    for (int i = 0; i < MI; i++)");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "        for (int j = 0; j < NI; j++)");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "            for (int r = 0; r < 4; r++) {");
        kt_buf_line(b, "                acc[i][j][r] += part[i][j][r];");
        kt_buf_line(b, "                part[i][j][r] = 0.0f;");
        kt_buf_line(b, "            }");
        kt_buf_line(b, "}");
    }
}
