/* attention family: the mma.sync kernel and its main loop over key/value tiles
 * (ops/attention/attention.h lists the files). Per tile: S = Q K^T with m16n8k16 mma.sync (Q and
 * K fragments by ldmatrix), the online softmax in registers (softmax.c), O += P V with P
 * repacked from the S accumulators as A fragments and V read by ldmatrix.trans. K and V arrive
 * by cp.async into one buffer (K of the next tile loads while P V runs) or two (the whole next
 * tile loads while this one is used). */
#include "attention.h"

#include <stdio.h>

/* Q's A fragments of m tile i, k16 step ks, into frag[4] by one ldmatrix.x4 (pad: the text
 * before the call, the loop nesting the caller is in). */
static void emit_q_ldmatrix(kt_buf *b, const char *pad, const char *frag)
{
    kt_buf_line(b, "%skt_ldmatrix_x4(%s[0], %s[1], %s[2], %s[3],", pad, frag, frag, frag, frag);
    kt_buf_line(b,
                "%s               sQ + kt_off<QS>(warp * MT * 16 + i * 16 + (lane & 15), ks * "
                "16 + (lane >> 4) * 8));",
                pad);
}

/* One k16 step of acc[i][n] += A B over the n-tiles of a tile: per pair of 8-column n-tiles
 * (n16 < n16s), their B fragments by one ldmatrix.x4 (.trans for V, stored k-major) at addr, then
 * an mma per m tile i with A fragment a. */
static void emit_mma_n16(kt_buf *b, const attn_geom *m, const char *n16s, const char *frag,
                         const char *what, const char *addr, bool trans, const char *acc,
                         const char *a)
{
    const char *t = attn_math_labels[m->math];
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int n16 = 0; n16 < %s; n16++) {", n16s);
    b->indent += 4;
    kt_buf_line(b, "unsigned %s[2][2]; /* B fragments of %s n-tiles 2 n16 and 2 n16 + 1 */", frag,
                what);
    kt_buf_line(b, "kt_ldmatrix_x4%s(%s[0][0], %s[0][1], %s[1][0], %s[1][1],",
                trans ? "_trans" : "", frag, frag, frag, frag);
    kt_buf_line(b, "               %s%s);", trans ? "      " : "", addr);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < MT; i++) {");
    kt_buf_line(b, "    kt_mma_m16n8k16_%s(%s[i][2 * n16], %s, %s[0]);", t, acc, a, frag);
    kt_buf_line(b, "    kt_mma_m16n8k16_%s(%s[i][2 * n16 + 1], %s, %s[1]);", t, acc, a, frag);
    kt_buf_line(b, "}");
    attn_emit_close(b, 1);
}

/* The one-buffer ring: operand op of the next tile (if any) into its buffer dst, committed as
 * a group of its own (empty on the last tile, so the waits count alike). */
static void emit_next_load(kt_buf *b, const attn_info *a, const attn_geom *m, attn_operand op,
                           const char *what, const char *dst)
{
    kt_buf_line(b, "if (tile + 1 < n_tiles) {");
    b->indent += 4;
    kt_buf_line(b, "const int nkv0 = kv0 + BKV;");
    attn_emit_mma_load(b, a, m, op, what, dst, "nkv0");
    attn_emit_close(b, 1);
    kt_buf_line(b, "kt_cp_async_commit();");
}

void attn_emit_mma_kernel(kt_buf *b, const ops_group *grp, const attn_info *a, const attn_geom *m,
                          const char *entry)
{
    const char *ty = ops_emit_ctype(a->dt);
    int mt = m->mt;
    char scale[64];
    const char *ex = attn_emit_kernel_open(b, grp, a, m, entry, scale, sizeof(scale));
    kt_buf_line(b, "constexpr int QS = %d, KS = %d, VS = %d; /* shared row strides */", m->qs,
                m->ks, m->vs);
    kt_buf_line(b, "constexpr int MT = %d; /* 16-row m tiles per warp */", mt);
    kt_buf_line(b, "/* scores are scaled by %s%s */", scale,
                m->exp2 ? " (scale * log2(e): softmax in base 2)" : "");
    kt_buf_line(b, "constexpr float SCALE = %s;", scale);
    kt_buf_line(b, OPS_DYNAMIC_SMEM);
    kt_buf_line(b, "%s *sQ = reinterpret_cast<%s *>(kt_smem);", ty, ty);
    kt_buf_line(b, "%s *sK = sQ + BQ * QS; /* %d stage%s of BKV x KS */", ty, m->stages,
                m->stages > 1 ? "s" : "");
    kt_buf_line(b, "%s *sV = sK + %d * BKV * KS;", ty, m->stages);
    kt_buf_line(b, "const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;");
    kt_buf_line(b, "const int g = lane >> 2, t4 = lane & 3; /* mma fragment row group, column "
                   "pair */");
    kt_buf_line(b, "const int lm = lane >> 3, lr = lane & 7; /* ldmatrix: matrix and row this "
                   "lane addresses */");
    attn_emit_block_setup(b, grp, a, "q0 + warp * MT * 16", NULL);
    kt_buf_printf(b, "\n");
    attn_emit_mma_load(b, a, m, ATTN_Q, "Q tile", "sQ", "q0");
    attn_emit_mma_load(b, a, m, ATTN_K, "K tile 0", "sK", "0");
    if (m->stages == 1)
        kt_buf_line(b, "kt_cp_async_commit(); /* group: Q and K0 */");
    attn_emit_mma_load(b, a, m, ATTN_V, "V tile 0", "sV", "0");
    kt_buf_line(b, "kt_cp_async_commit();");
    kt_buf_printf(b, "\n");
    attn_emit_acc_init(b);
    if (m->qfrag == QFRAG_REGS)
        kt_buf_line(b, "unsigned qf[MT][D / 16][4]; /* Q as mma A fragments, loaded once */");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "for (int tile = 0; tile < n_tiles; tile++) {");
    b->indent += 4;
    kt_buf_line(b, "const int kv0 = tile * BKV;");
    if (m->stages == 2) {
        attn_emit_two_buffers(b, a, m, attn_emit_mma_load, ty, "sK", "BKV * KS", "BKV * VS", true);
    } else {
        kt_buf_line(b, "const %s *cK = sK;", ty);
        kt_buf_line(b, "const %s *cV = sV;", ty);
        kt_buf_line(b, "kt_cp_async_wait<1>(); /* K of this tile landed; V may be in flight */");
    }
    kt_buf_line(b, "__syncthreads();");
    if (m->qfrag == QFRAG_REGS) {
        kt_buf_line(b, "if (tile == 0) {");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int i = 0; i < MT; i++)");
        kt_buf_line(b, "        #pragma unroll");
        kt_buf_line(b, "        for (int ks = 0; ks < D / 16; ks++)");
        emit_q_ldmatrix(b, "            ", "qf[i][ks]");
        kt_buf_line(b, "}");
    }
    if (a->causal) {
        kt_buf_line(b, "/* causal: a warp whose rows all precede the tile skips it */");
        kt_buf_line(b, "const bool active = kv0 <= wq0 + MT * 16 - 1;");
    } else {
        kt_buf_line(b, "const bool active = true;");
    }
    kt_buf_line(b, "float s[MT][BKV / 8][4]; /* scores, mma C layout */");
    kt_buf_line(b, "if (active) {");
    b->indent += 4;
    kt_buf_line(b, "/* S = Q K^T */");
    attn_emit_loop2(b, "MT", "BKV / 8",
                    "s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;");
    attn_emit_for_open(b, "ks", "D / 16");
    if (m->qfrag == QFRAG_SMEM) {
        kt_buf_line(b, "unsigned qa[MT][4];");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MT; i++)");
        emit_q_ldmatrix(b, "    ", "qa[i]");
    }
    emit_mma_n16(b, m, "BKV / 16", "kb", "key",
                 "cK + kt_off<KS>(n16 * 16 + (lm >> 1) * 8 + lr, ks * 16 + (lm & 1) * 8)", false,
                 "s", m->qfrag == QFRAG_REGS ? "qf[i][ks]" : "qa[i]");
    attn_emit_close(b, 1);
    attn_emit_mma_softmax(b, a, m, ex, false);
    attn_emit_close(b, 1);
    if (m->stages == 1) {
        kt_buf_line(b, "__syncthreads(); /* every warp is done with K */");
        emit_next_load(b, a, m, ATTN_K, "next K", "sK");
        kt_buf_line(b, "kt_cp_async_wait<1>(); /* V of this tile landed */");
        kt_buf_line(b, "__syncthreads();");
    }
    kt_buf_line(b, "if (active) {");
    b->indent += 4;
    kt_buf_line(b, "/* O += P V: P repacked to %s A fragments in registers */",
                attn_math_labels[m->math]);
    attn_emit_for_open(b, "ks", "BKV / 16");
    kt_buf_line(b, "unsigned pa[MT][4];");
    attn_emit_for_open(b, "i", "MT");
    attn_emit_pack_p(b, m, "pa[i]", "s[i]");
    attn_emit_close(b, 1);
    emit_mma_n16(b, m, "DV / 16", "vb", "output",
                 "cV + kt_off<VS>(ks * 16 + (lm & 1) * 8 + lr, n16 * 16 + (lm >> 1) * 8)", true,
                 "o", "pa[i]");
    attn_emit_close(b, 2);
    kt_buf_line(b, "__syncthreads(); /* every warp is done with this tile's buffers */");
    if (m->stages == 1) {
        emit_next_load(b, a, m, ATTN_V, "next V", "sV");
    }
    attn_emit_close(b, 1);
    attn_emit_mma_store(b, grp, a);
    attn_emit_close(b, 1);
}
