/* conv family: the direct kernel (ops/conv/conv.h lists the files). */
#include "conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void conv_emit_direct(kt_buf *b, const conv_info *ci, const direct_plan *pl, const conv_names *nm)
{
    const char *xt = ops_emit_ctype(ci->dt);
    kt_buf_line(b, "/* Direct convolution: each thread computes TK output channels x TQ adjacent "
                   "output columns");
    kt_buf_line(b, " * of one output row; a block shares its TK channels, so filter reads are "
                   "warp-uniform. */");
    kt_buf_line(b, "constexpr int TK = %d, TQ = %d, THREADS = %d;", pl->tk, pl->tq, pl->threads);
    kt_buf_line(b, "constexpr int QT = (Q + TQ - 1) / TQ;   /* column tiles per output row */");
    kt_buf_line(b, "constexpr int SPATIAL = BATCH * P * QT; /* thread tiles per channel block */");
    kt_buf_line(b, "constexpr int WIN = (TQ - 1) * STR_W + (S - 1) * DIL_W + 1; /* input columns "
                   "a thread reads per filter row */");
    kt_buf_printf(b, "\n");
    conv_emit_kernel_head(b, "1", "direct", nm);
    kt_buf_line(b, "const int k0 = blockIdx.y * TK;  /* first output channel of this block */");
    kt_buf_line(b, "const int grp = k0 / KG;         /* its group: all TK channels share it */");
    char wl[160], fl[200];
    if (pl->shared) {
        kt_buf_line(b, "/* The block's filter slice [TK][GEMM_K], staged once. */");
        kt_buf_line(b, OPS_DYNAMIC_SMEM);
        kt_buf_line(b, "float *const ws = reinterpret_cast<float *>(kt_smem);");
        kt_buf_line(b, "for (int i = threadIdx.x; i < TK * GEMM_K; i += THREADS)");
        kt_buf_line(b, "    ws[i] = (k0 + i / GEMM_K < K) ? %s : 0.0f;",
                    conv_to_f(fl, sizeof(fl), ci->dt, "w[(idx_t)k0 * GEMM_K + i]"));
        kt_buf_line(b, "__syncthreads();");
    }
    kt_buf_line(b, "const int t = blockIdx.x * THREADS + threadIdx.x;");
    kt_buf_line(b, "if (t >= SPATIAL)");
    kt_buf_line(b, "    return;%s", pl->shared ? " /* after the only barrier */" : "");
    kt_buf_line(b, "const int qt = t %% QT, p = (t / QT) %% P, n = t / (QT * P);");
    kt_buf_line(b, "const int q0 = qt * TQ;");
    kt_buf_line(b, "const int h0 = p * STR_H - PAD_H, w0 = q0 * STR_W - PAD_W;");
    kt_buf_line(b, "float acc[TK][TQ] = {};");
    bool unroll_c = ci->cg * ci->r * ci->s * pl->tk * pl->tq <= 1024;
    bool unroll_r = ci->r * ci->s * pl->tk * pl->tq <= 512;
    kt_buf_line(b, "#pragma unroll%s", unroll_c ? "" : " 1");
    kt_buf_line(b, "for (int c = 0; c < CG; c++) {");
    b->indent = 8;
    if (ci->nhwc)
        kt_buf_line(b, "const %s *xc = x + (idx_t)n * H * W * C + grp * CG + c;", xt);
    else
        kt_buf_line(b, "const %s *xc = x + ((idx_t)n * C + grp * CG + c) * H * W;", xt);
    kt_buf_line(b, "#pragma unroll%s", unroll_r ? "" : " 1");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    b->indent = 12;
    kt_buf_line(b, "const int h = h0 + r * DIL_H;");
    kt_buf_line(b, "if ((unsigned)h >= (unsigned)H)");
    kt_buf_line(b, "    continue;");
    kt_buf_line(b, "const %s *xr = xc + (idx_t)h * W%s;", xt, ci->nhwc ? " * C" : "");
    kt_buf_line(b, "float xv[WIN]; /* the input row segment under this thread's outputs */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < WIN; i++) {");
    kt_buf_line(b, "    const int ww = w0 + i;");
    snprintf(wl, sizeof(wl), "xr[ww%s]", ci->nhwc ? " * C" : "");
    kt_buf_line(b, "    xv[i] = (unsigned)ww < (unsigned)W ? %s : 0.0f;",
                conv_to_f(fl, sizeof(fl), ci->dt, wl));
    kt_buf_line(b, "}");
    const char *widx = ci->nhwc ? "(r * S + s) * CG + c" : "(c * R + r) * S + s";
    if (!pl->shared) {
        kt_buf_line(b, "float wv[TK][S]; /* this filter row of the thread's channels */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int j = 0; j < TK; j++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int s = 0; s < S; s++)");
        snprintf(wl, sizeof(wl), "w[(idx_t)(k0 + j) * GEMM_K + %s]", widx);
        kt_buf_line(b, "        wv[j][s] = k0 + j < K ? %s : 0.0f;",
                    conv_to_f(fl, sizeof(fl), ci->dt, wl));
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int s = 0; s < S; s++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < TK; j++) {");
    if (pl->shared)
        kt_buf_line(b, "        const float wgt = ws[j * GEMM_K + %s];", widx);
    else
        kt_buf_line(b, "        const float wgt = wv[j][s];");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int i = 0; i < TQ; i++)");
    kt_buf_line(b, "            acc[j][i] = fmaf(xv[i * STR_W + s * DIL_W], wgt, acc[j][i]);");
    kt_buf_line(b, "    }");
    b->indent = 8;
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < TK; j++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < TQ; i++)");
    kt_buf_line(b, "        if (k0 + j < K && q0 + i < Q)");
    kt_buf_line(b, "            kt_conv_store(acc[j][i], n, k0 + j, p, q0 + i, %s);", nm->call);
    b->indent = 0;
    kt_buf_line(b, "}");
}
