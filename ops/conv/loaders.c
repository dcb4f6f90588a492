/* conv family, implicit GEMM: the im2col gather and the tile loaders (ops/conv/conv.h lists the
 * files). */
#include "conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The (c, r, s) of reduction index kk, in the filter's memory order; the general gather's
 * (c, tz, r, s), tz the depth tap. */
static void emit_kk_split(kt_buf *b, const conv_info *ci, const char *kk)
{
    if (ci->general && ci->nhwc)
        kt_buf_line(b,
                    "const int c = %s %% CG, s = (%s / CG) %% S, r = (%s / (S * CG)) %% R, "
                    "tz = %s / (R * S * CG);",
                    kk, kk, kk, kk);
    else if (ci->general)
        kt_buf_line(b,
                    "const int c = %s / (T * R * S), tz = (%s / (R * S)) %% T, r = (%s / S) %% R, "
                    "s = %s %% S;",
                    kk, kk, kk, kk);
    else if (ci->nhwc)
        kt_buf_line(b, "const int c = %s %% CG, r = %s / (S * CG), s = (%s / CG) %% S;", kk, kk,
                    kk);
    else
        kt_buf_line(b, "const int c = %s / (R * S), r = (%s / S) %% R, s = %s %% S;", kk, kk, kk);
}

/* Whether the plain loader reads the split of each reduction index from a table (kk_table):
 * it must fit constant memory (8 bytes an entry, with room left for other constants) and the
 * packed (r, s) offsets 15 bits. */
bool conv_kk_table_ok(const conv_info *ci)
{
    return !ci->general && ci->gk <= 6144 && (ci->r - 1) * ci->dh < 16384 &&
           (ci->s - 1) * ci->dw < 32768 && ci->h < 16384;
}

/* kt_kk[kk] for every reduction index kk (padded to a whole number of BK tiles): .x the offset of
 * x at (c, r, s) from the receptive field's origin, .y (r * DIL_H) << 16 | s * DIL_W; padding
 * entries get r * DIL_H = 16383, a height no load accepts. The loader's kk is the same for the 32
 * lanes of a warp (BM is a multiple of 32), so each lookup is one broadcast read of constant
 * memory instead of two divisions and a remainder per gathered element. */
void conv_emit_kk_table(kt_buf *b, const conv_info *ci, int bk)
{
    int64_t n = (ci->gk + bk - 1) / bk * bk;
    kt_buf_line(b, "/* Reduction index -> (offset of x from the receptive field's origin, packed "
                   "filter offsets). */");
    kt_buf_printf(b, "__constant__ int2 kt_kk[%lld] = {", (long long)n);
    for (int64_t kk = 0; kk < n; kk++) {
        long long off = 0, rdh = 16383, sdw = 0;
        if (kk < ci->gk) {
            int64_t c, r, sv;
            if (ci->nhwc) {
                c = kk % ci->cg;
                r = kk / (ci->s * ci->cg);
                sv = (kk / ci->cg) % ci->s;
            } else {
                c = kk / (ci->r * ci->s);
                r = (kk / ci->s) % ci->r;
                sv = kk % ci->s;
            }
            rdh = r * ci->dh;
            sdw = sv * ci->dw;
            off = ci->nhwc ? (rdh * ci->wd + sdw) * ci->c + c : (c * ci->h + rdh) * ci->wd + sdw;
        }
        kt_buf_printf(b, "%s{%lld, %lld}", kk % 8 ? ", " : (kk ? ",\n    " : "\n    "), off,
                      rdh << 16 | sdw);
    }
    kt_buf_printf(b, "\n};\n\n");
}

/* Per gathered row (output pixel): where its receptive field starts. Rows past the end get an
 * out-of-range height (the general gather: depth, its output depth folded into p = od * OH + oh)
 * so each of their loads is masked. */
void conv_emit_row_setup(kt_buf *b, const conv_info *ci, const char *count, const char *mexpr)
{
    const bool gen = ci->general;
    if (gen) {
        kt_buf_line(b, "/* Gathered rows (output pixels): receptive-field origin in the input with "
                       "its zeros");
        kt_buf_line(b, " * between elements; rows past GEMM_M get a depth no load accepts. */");
    } else {
        kt_buf_line(b, "/* Gathered rows (output pixels): receptive-field origin; rows past GEMM_M "
                       "get a height");
        kt_buf_line(b, " * no load accepts. */");
    }
    kt_buf_line(b, "idx_t a_base[%s];", count);
    if (gen)
        kt_buf_line(b, "int a_d[%s], a_h[%s], a_w[%s];", count, count, count);
    else
        kt_buf_line(b, "int a_h[%s], a_w[%s];", count, count);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %s; i++) {", count);
    kt_buf_line(b, "    const int m = m0 + %s;", mexpr);
    kt_buf_line(b, "    const int q = m %% Q, p = (m / Q) %% P, n = m / (Q * P);");
    const char *sp = gen ? "DEPTH * H * W" : "H * W"; /* input elements a channel */
    if (ci->nhwc)
        kt_buf_line(b, "    a_base[i] = (idx_t)n * %s * C + grp * CG;", sp);
    else
        kt_buf_line(b, "    a_base[i] = ((idx_t)n * C + grp * CG) * %s;", sp);
    if (gen) {
        kt_buf_line(b, "    a_d[i] = m < GEMM_M ? p / OH * STR_D - PAD_D : -(1 << 24);");
        kt_buf_line(b, "    a_h[i] = p %% OH * STR_H - PAD_H;");
    } else {
        kt_buf_line(b, "    a_h[i] = m < GEMM_M ? p * STR_H - PAD_H : -(1 << 24);");
    }
    kt_buf_line(b, "    a_w[i] = q * STR_W - PAD_W;");
    kt_buf_line(b, "}");
}

/* The offset of x at gathered row slot `slot`, channel c, input position (h, ww). */
static void x_offset(char *buf, size_t len, const conv_info *ci, const char *slot)
{
    if (ci->nhwc)
        snprintf(buf, len, "a_base[%s] + ((idx_t)h * W + ww) * C + c", slot);
    else
        snprintf(buf, len, "a_base[%s] + ((idx_t)c * H + h) * W + ww", slot);
}

/* The shared-memory value of stored element `ref`: float for ffma and the tf32 paths (f32 data;
 * tf32 rounding happens when fragments are read), the 16-bit mma type for mma (f32 data under
 * "reduced" rounds to bf16 here). */
static const char *tile_value(char *buf, size_t len, const conv_info *ci, const ig_plan *pl,
                              const char *ref)
{
    if (!pl->mma)
        return conv_to_f(buf, len, ci->dt, ref);
    if (ci->dt == OPS_DT_F32)
        snprintf(buf, len, "kt_f32_to_bf16(%s)", ref);
    else
        snprintf(buf, len, "%s", ref);
    return buf;
}

/* Plain predicated loads of tile kt into a_reg/b_reg, and their store into shared memory. */
void conv_emit_plain_loader(kt_buf *b, const conv_info *ci, const ig_plan *pl)
{
    const char *st = pl->mma ? "unsigned short" : "float";
    const char *zero = pl->mma ? "(unsigned short)0" : "0.0f";
    /* Tensor-core paths store [BM][LDS] / [BN][LDS] (reduction contiguous), ffma [BK][LDA/LDB]. */
    char off[160], ref[200], val[240];
    kt_buf_line(b, "%s a_reg[A_PER], b_reg[B_PER];", st);
    kt_buf_line(b, "/* Gathers tile kt of the implicit im2col matrix and of the filter into "
                   "registers;");
    kt_buf_line(b, " * consecutive threads take consecutive pixels (A) and reduction indices (B), "
                   "so reads coalesce. */");
    kt_buf_line(b, "auto load_tile = [&](int kt) {");
    b->indent += 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int e = 0; e < A_PER; e++) {");
    b->indent += 4;
    kt_buf_line(b, "const int kk = kt * BK + (tid + e * THREADS) / BM;");
    if (ci->general) {
        emit_kk_split(b, ci, "kk");
        /* coordinates in the input with its zeros between elements (input dilation) */
        kt_buf_line(b, "const int vz = a_d[e %% A_ROWS] + tz * DIL_D, vh = a_h[e %% A_ROWS] + r * "
                       "DIL_H,");
        kt_buf_line(b, "          vw = a_w[e %% A_ROWS] + s * DIL_W;");
        kt_buf_line(b, "const int z = vz / IDIL_D, h = vh / IDIL_H, ww = vw / IDIL_W;");
        kt_buf_line(b, "const bool ok = kk < GEMM_K && vz >= 0 && vh >= 0 && vw >= 0 && vz %% "
                       "IDIL_D == 0 &&");
        kt_buf_line(b, "                vh %% IDIL_H == 0 && vw %% IDIL_W == 0 && z < DEPTH && h < "
                       "H && ww < W;");
        snprintf(off, sizeof(off),
                 ci->nhwc ? "a_base[e %% A_ROWS] + (((idx_t)z * H + h) * W + ww) * C + c"
                          : "a_base[e %% A_ROWS] + (((idx_t)c * DEPTH + z) * H + h) * W + ww");
    } else if (conv_kk_table_ok(ci)) {
        kt_buf_line(b, "const int2 t = kt_kk[kk]; /* warp-uniform: a constant-cache broadcast */");
        kt_buf_line(b, "const int h = a_h[e %% A_ROWS] + (t.y >> 16), ww = a_w[e %% A_ROWS] + "
                       "(t.y & 0xffff);");
        kt_buf_line(b, "const bool ok = (unsigned)h < (unsigned)H && (unsigned)ww < (unsigned)W;");
        snprintf(off, sizeof(off), "a_base[e %% A_ROWS] + %s + t.x",
                 /* 64-bit: rows past GEMM_M carry a sentinel height whose product would
                  * overflow an int (their loads are masked) */
                 ci->nhwc ? "((long long)a_h[e % A_ROWS] * W + a_w[e % A_ROWS]) * C"
                          : "(long long)a_h[e % A_ROWS] * W + a_w[e % A_ROWS]");
    } else {
        emit_kk_split(b, ci, "kk");
        kt_buf_line(b, "const int h = a_h[e %% A_ROWS] + r * DIL_H, ww = a_w[e %% A_ROWS] + s * "
                       "DIL_W;");
        kt_buf_line(b, "const bool ok = kk < GEMM_K && (unsigned)h < (unsigned)H && (unsigned)ww "
                       "< (unsigned)W;");
        x_offset(off, sizeof(off), ci, "e % A_ROWS");
    }
    snprintf(ref, sizeof(ref), "x[%s]", off);
    kt_buf_line(b, "a_reg[e] = ok ? %s : %s;", tile_value(val, sizeof(val), ci, pl, ref), zero);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int e = 0; e < B_PER; e++) {");
    b->indent += 4;
    kt_buf_line(b, "const int idx = tid + e * THREADS;");
    kt_buf_line(b, "const int kk = kt * BK + idx %% BK, col = n0 + idx / BK;");
    kt_buf_line(b, "const bool ok = kk < GEMM_K && col < GEMM_N;");
    snprintf(ref, sizeof(ref), "w[(idx_t)(grp * KG + col) * GEMM_K + kk]");
    kt_buf_line(b, "b_reg[e] = ok ? %s : %s;", tile_value(val, sizeof(val), ci, pl, ref), zero);
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "};");
    kt_buf_line(b, "auto store_tile = [&](int stage) {");
    b->indent += 4;
    if (pl->tc) {
        kt_buf_line(b, "%s *as = As + stage * BM * LDS, *bs = Bs + stage * BN * LDS;", st);
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < A_PER; e++) {");
        kt_buf_line(b, "    const int idx = tid + e * THREADS;");
        kt_buf_line(b, "    as[(idx %% BM) * LDS + idx / BM] = a_reg[e];");
        kt_buf_line(b, "}");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < B_PER; e++) {");
        kt_buf_line(b, "    const int idx = tid + e * THREADS;");
        kt_buf_line(b, "    bs[(idx / BK) * LDS + idx %% BK] = b_reg[e];");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "float *as = As + stage * BK * LDA, *bs = Bs + stage * BK * LDB;");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < A_PER; e++) {");
        kt_buf_line(b, "    const int idx = tid + e * THREADS;");
        kt_buf_line(b, "    as[(idx / BM) * LDA + idx %% BM] = a_reg[e];");
        kt_buf_line(b, "}");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int e = 0; e < B_PER; e++) {");
        kt_buf_line(b, "    const int idx = tid + e * THREADS;");
        kt_buf_line(b, "    bs[(idx %% BK) * LDB + idx / BK] = b_reg[e];");
        kt_buf_line(b, "}");
    }
    b->indent -= 4;
    kt_buf_line(b, "};");
}

void conv_emit_cp_async_loader(kt_buf *b, const conv_info *ci, const ig_plan *pl)
{
    char off[160];
    const char *st = pl->mma ? "unsigned short" : "float";
    kt_buf_line(b, "/* Issues the 16-byte copies of tile kt into stage `stage`: each thread copies "
                   "A_CHUNKS");
    kt_buf_line(b,
                " * %d-channel runs of pixels and B_CHUNKS %d-element runs of filter rows, all at "
                "one reduction",
                pl->vec, pl->vec);
    kt_buf_line(b, " * column, so (c, r, s) is split once per tile. */");
    kt_buf_line(b, "auto load_tile = [&](int kt, int stage) {");
    b->indent += 4;
    kt_buf_line(b, "%s *as = As + stage * BM * LDS, *bs = Bs + stage * BN * LDS;", st);
    kt_buf_line(b, "const int kk = kt * BK + (tid %% CPR) * %d;", pl->vec);
    emit_kk_split(b, ci, "kk");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int e = 0; e < A_CHUNKS; e++) {");
    b->indent += 4;
    kt_buf_line(b, "const int h = a_h[e] + r * DIL_H, ww = a_w[e] + s * DIL_W;");
    kt_buf_line(b, "const bool ok = kk < GEMM_K && (unsigned)h < (unsigned)H && (unsigned)ww < "
                   "(unsigned)W;");
    x_offset(off, sizeof(off), ci, "e");
    kt_buf_line(b, "kt_cp_async16(as + ((tid + e * THREADS) / CPR) * LDS + (tid %% CPR) * %d,",
                pl->vec);
    kt_buf_line(b, "              ok ? x + %s : x, ok ? 16 : 0);", off);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int e = 0; e < B_CHUNKS; e++) {");
    b->indent += 4;
    kt_buf_line(b, "const int col = n0 + (tid + e * THREADS) / CPR;");
    kt_buf_line(b, "const bool ok = kk < GEMM_K && col < GEMM_N;");
    kt_buf_line(b, "kt_cp_async16(bs + ((tid + e * THREADS) / CPR) * LDS + (tid %% CPR) * %d,",
                pl->vec);
    kt_buf_line(b,
                "              ok ? w + (idx_t)(grp * KG + col) * GEMM_K + kk : w, ok ? 16 : 0);");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "};");
}
