/* attention family: the FFMA kernel (f32 data) and its main loop (ops/attention/attention.h
 * lists the files). Per key tile, three block-wide phases: S = Q K^T micro-tiles per thread
 * into shared memory (scaled, masked), the softmax update a warp per row (softmax.c), then
 * O = O * alpha + P V with O micro-tiles in registers. K is stored transposed (K^T) so both
 * products walk shared rows. */
#include "attention.h"

#include <stdio.h>

/* One micro-tile product over n steps k: acc[i][j] += a[i] b[j] with a[i] = a_expr and
 * b[j] = b_expr (i < RQ, j < nb) read from shared memory per step. */
static void emit_product(kt_buf *b, const char *n, const char *va, const char *vb, const char *nb,
                         const char *a_expr, const char *b_expr, const char *acc)
{
    kt_buf_line(b, "#pragma unroll 4");
    kt_buf_line(b, "for (int k = 0; k < %s; k++) {", n);
    b->indent += 4;
    kt_buf_line(b, "float %s[RQ], %s[%s];", va, vb, nb);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < RQ; i++)");
    kt_buf_line(b, "    %s[i] = %s;", va, a_expr);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < %s; j++)", nb);
    kt_buf_line(b, "    %s[j] = %s;", vb, b_expr);
    attn_emit_for2(b, "RQ", nb, false);
    kt_buf_line(b, "%s[i][j] = fmaf(%s[i], %s[j], %s[i][j]);", acc, va, vb, acc);
    b->indent -= 12;
    kt_buf_line(b, "}");
}

void attn_emit_ffma_kernel(kt_buf *b, const ops_group *grp, const attn_info *a, const attn_geom *m,
                           const char *entry)
{
    char scale[64];
    const char *ex = attn_emit_kernel_open(b, grp, a, m, entry, scale, sizeof(scale));
    kt_buf_line(b,
                "constexpr int NT = %d, TX = %d, TY = %d; /* threads as TY rows x TX columns "
                "*/",
                m->threads, m->tx, m->ty);
    kt_buf_line(b, "constexpr int RQ = BQ / TY, RK = BKV / TX, RD = DV / TX; /* per-thread "
                   "micro-tiles */");
    kt_buf_line(b, "constexpr int QS = D + 1, KS = BKV + 1, PS = BKV + 1; /* padded against bank "
                   "conflicts */");
    kt_buf_line(b, "constexpr float SCALE = %s;%s", scale,
                m->exp2 ? " /* scale * log2(e): softmax in base 2 */" : "");
    kt_buf_line(b, OPS_DYNAMIC_SMEM);
    kt_buf_line(b, "float *sQ = reinterpret_cast<float *>(kt_smem); /* [BQ][QS] */");
    kt_buf_line(b,
                "float *sKt = sQ + BQ * QS;                       /* %d x [D][KS]: K "
                "transposed */",
                m->stages);
    kt_buf_line(b, "float *sV = sKt + %d * D * KS;                    /* %d x [BKV][DV] */",
                m->stages, m->stages);
    kt_buf_line(b, "float *sP = sV + %d * BKV * DV;                   /* [BQ][PS]: S, then P */",
                m->stages);
    kt_buf_line(b, "float *sM = sP + BQ * PS, *sL = sM + BQ, *sA = sL + BQ; /* row max, sum, "
                   "rescale */");
    kt_buf_line(b, "const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;");
    kt_buf_line(b, "const int tx = tid %% TX, ty = tid / TX;");
    attn_emit_block_setup(b, grp, a, NULL, NULL);
    kt_buf_line(b, "for (int r = tid; r < BQ; r += NT) {");
    kt_buf_line(b, "    sM[r] = KT_NEG_INF;");
    kt_buf_line(b, "    sL[r] = 0.0f;");
    kt_buf_line(b, "}");
    attn_emit_ffma_load(b, a, m, ATTN_Q, "Q tile", "sQ", "q0");
    attn_emit_ffma_load(b, a, m, ATTN_K, "K tile 0", "sKt", "0");
    attn_emit_ffma_load(b, a, m, ATTN_V, "V tile 0", "sV", "0");
    kt_buf_line(b, "kt_cp_async_commit();");
    kt_buf_line(b, "float o[RQ][RD]; /* rows ty + TY i, columns tx + TX j */");
    attn_emit_loop2(b, "RQ", "RD", "o[i][j] = 0.0f;");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "for (int tile = 0; tile < n_tiles; tile++) {");
    b->indent += 4;
    kt_buf_line(b, "const int kv0 = tile * BKV;");
    if (m->stages == 2) {
        attn_emit_two_buffers(b, a, m, attn_emit_ffma_load, "float", "sKt", "D * KS", "BKV * DV",
                              false);
    } else {
        kt_buf_line(b, "const float *cK = sKt, *cV = sV;");
        kt_buf_line(b, "kt_cp_async_wait<0>();");
    }
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "/* phase 1: S = Q K^T * SCALE, masked, into sP */");
    kt_buf_line(b, "{");
    b->indent += 4;
    kt_buf_line(b, "float acc[RQ][RK];");
    attn_emit_loop2(b, "RQ", "RK", "acc[i][j] = 0.0f;");
    emit_product(b, "D", "qa", "kb", "RK", "sQ[(ty + TY * i) * QS + k]", "cK[k * KS + tx + TX * j]",
                 "acc");
    attn_emit_for2(b, "RQ", "RK", true);
    kt_buf_line(b, "const int key = kv0 + tx + TX * j;");
    if (a->causal)
        kt_buf_line(b, "const bool masked = key >= SKV || key > q0 + ty + TY * i;");
    else
        kt_buf_line(b, "const bool masked = key >= SKV;");
    kt_buf_line(b,
                "sP[(ty + TY * i) * PS + tx + TX * j] = masked ? KT_NEG_INF : acc[i][j] * SCALE;");
    attn_emit_close(b, 1);
    b->indent -= 8;
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads();");
    attn_emit_ffma_softmax(b, ex);
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "/* phase 3: O = O * alpha + P V */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < RQ; i++) {");
    kt_buf_line(b, "    const float alpha = sA[ty + TY * i];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < RD; j++)");
    kt_buf_line(b, "        o[i][j] *= alpha;");
    kt_buf_line(b, "}");
    emit_product(b, "BKV", "pa", "vb", "RD", "sP[(ty + TY * i) * PS + k]",
                 "cV[k * DV + tx + TX * j]", "o");
    kt_buf_line(b, "__syncthreads(); /* every thread is done with this tile's buffers */");
    if (m->stages == 1) {
        kt_buf_line(b, "if (tile + 1 < n_tiles) {");
        b->indent += 4;
        kt_buf_line(b, "const int nkv0 = kv0 + BKV;");
        attn_emit_ffma_load(b, a, m, ATTN_K, "next K", "sKt", "nkv0");
        attn_emit_ffma_load(b, a, m, ATTN_V, "next V", "sV", "nkv0");
        kt_buf_line(b, "kt_cp_async_commit();");
        attn_emit_close(b, 1);
    }
    attn_emit_close(b, 1);
    attn_emit_ffma_store(b, grp, a);
    attn_emit_close(b, 1);
}
