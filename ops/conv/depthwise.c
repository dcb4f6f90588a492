/* conv family: the depthwise kernel (ops/conv/conv.h lists the files). */
#include "conv.h"

#include <stdio.h>

void conv_emit_depthwise(kt_buf *b, const conv_info *ci, const dw_plan *pl, const conv_names *nm)
{
    char fl[200];
    kt_buf_line(b, "/* Depthwise convolution: a block per (image, channel) plane and output tile of "
                   "TILE_P x TILE_Q;");
    kt_buf_line(b, " * the patch it reads and the channel's filter staged in shared memory once, "
                   "then each lane");
    kt_buf_line(b, " * computes TK rows x TQ columns 32 apart (a warp's stores are contiguous). "
                   "*/");
    kt_buf_line(b, "constexpr int TK = %d, TQ = %d, THREADS = %d;", pl->tk, pl->tq, pl->threads);
    kt_buf_line(b, "constexpr int TILE_P = %d, TILE_Q = %d; /* output rows, columns of a block */",
                pl->tile_p, pl->tile_q);
    kt_buf_line(b, "constexpr int IN_H = %d, IN_W = %d;   /* the input patch they read */",
                pl->in_h, pl->in_w);
    kt_buf_line(b, "constexpr int TILES_Q = %lld;", (long long)pl->tiles_q);
    kt_buf_printf(b, "\n");
    conv_emit_kernel_head(b, "1", "depthwise", nm);
    kt_buf_line(b, OPS_DYNAMIC_SMEM);
    kt_buf_line(b, "float *const xs = reinterpret_cast<float *>(kt_smem); /* [IN_H][IN_W] */");
    kt_buf_line(b, "float *const fs = xs + IN_H * IN_W;                   /* [R][S] */");
    kt_buf_line(b, "const int plane = blockIdx.y; /* n * C + c */");
    kt_buf_line(b, "const int n = plane / C, c = plane %% C;");
    kt_buf_line(b, "const int p0 = (blockIdx.x / TILES_Q) * TILE_P, q0 = (blockIdx.x %% TILES_Q) "
                   "* TILE_Q;");
    kt_buf_line(b, "const int h0 = p0 * STR_H - PAD_H, w0 = q0 * STR_W - PAD_W;");
    kt_buf_line(b, "const %s *xc = x + (idx_t)plane * H * W;", ops_emit_ctype(ci->dt));
    kt_buf_line(b, "for (int i = threadIdx.x; i < IN_H * IN_W; i += THREADS) {");
    kt_buf_line(b, "    const int h = h0 + i / IN_W, ww = w0 + i %% IN_W;");
    kt_buf_line(b, "    xs[i] = (unsigned)h < (unsigned)H && (unsigned)ww < (unsigned)W ? %s : 0.0f;",
                conv_to_f(fl, sizeof(fl), ci->dt, "xc[(idx_t)h * W + ww]"));
    kt_buf_line(b, "}");
    kt_buf_line(b, "for (int i = threadIdx.x; i < R * S; i += THREADS)");
    kt_buf_line(b, "    fs[i] = %s;", conv_to_f(fl, sizeof(fl), ci->dt, "w[(idx_t)c * R * S + i]"));
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "const int lane = threadIdx.x %% 32, warp = threadIdx.x / 32;");
    kt_buf_line(b, "float acc[TK][TQ] = {};");
    bool unroll = ci->r * ci->s <= 64;
    kt_buf_line(b, "#pragma unroll%s", unroll ? "" : " 1");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int s = 0; s < S; s++) {");
    kt_buf_line(b, "        const float wgt = fs[r * S + s]; /* the same word for every lane */");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int j = 0; j < TK; j++) {");
    kt_buf_line(b, "            const float *xr = xs + ((warp * TK + j) * STR_H + r * DIL_H) * "
                   "IN_W + lane * STR_W + s * DIL_W;");
    kt_buf_line(b, "            #pragma unroll");
    kt_buf_line(b, "            for (int i = 0; i < TQ; i++)");
    kt_buf_line(b, "                acc[j][i] = fmaf(xr[i * 32 * STR_W], wgt, acc[j][i]);");
    kt_buf_line(b, "        }");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < TK; j++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < TQ; i++) {");
    kt_buf_line(b, "        const int p = p0 + warp * TK + j, q = q0 + lane + i * 32;");
    kt_buf_line(b, "        if (p < P && q < Q)");
    kt_buf_line(b, "            kt_conv_store(acc[j][i], n, c, p, q, %s);", nm->call);
    kt_buf_line(b, "    }");
    b->indent = 0;
    kt_buf_line(b, "}");
}
