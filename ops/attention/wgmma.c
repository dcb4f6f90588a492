/* attention family: the Hopper kernel and its wgmma main loop (ops/attention/attention.h lists
 * the files). Each warpgroup owns 64 query rows: S = Q K^T by wgmma with both operands in
 * shared memory (128-byte swizzled tiles, read through matrix descriptors), O += P V by wgmma
 * with P in registers (the S accumulators repacked) and V an N-major shared operand; the
 * softmax update and the store are the mma.sync path's (softmax.c, epilogue.c). */
#include "attention.h"

#include <stdio.h>

/* Emits kv0 (the tile's first key, with a comment) and the S = Q K^T wgmmas of the K
 * tile KOFF elements into sK into s (the first k step
 * overwrites it), committed as one group; the caller waits. Descriptors are the base ones plus
 * the byte offset / 16 (the address field's unit). */
static void emit_wgmma_qk_issue(kt_buf *b, const attn_geom *m, const char *kv0, const char *comment,
                                const char *koff)
{
    kt_buf_line(b, "const int kv0 = %s;%s", kv0, comment);
    kt_buf_line(b, "kt_wgmma_fence();");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < D / 16; ks++)");
    kt_buf_line(
        b, "    kt_wgmma_%s_ss<BKV, 0>(s[0], dq0 + (((ks >> 2) * BQ * 64 + (ks & 3) * 16) >> 3),",
        attn_math_labels[m->math]);
    kt_buf_line(
        b, "                          dk0 + ((%s + (ks >> 2) * BKV * 64 + (ks & 3) * 16) >> 3),",
        koff);
    kt_buf_line(b, "                          ks > 0);");
    kt_buf_line(b, "kt_wgmma_commit();");
}

/* P (the softmaxed scores) repacked to 16-bit A fragments: k16 step ks covers keys 16 ks ... */
static void emit_wgmma_pack(kt_buf *b, const attn_geom *m)
{
    attn_emit_for_open(b, "ks", "BKV / 16");
    attn_emit_pack_p(b, m, "pa[ks]", "s[0]");
    attn_emit_close(b, 1);
}

/* Waits for all but the youngest cp.async group (what landed: the comment), makes the copies
 * visible to wgmma's async proxy and to every warpgroup. */
static void emit_landed(kt_buf *b, const char *what)
{
    kt_buf_line(b, "kt_cp_async_wait<1>(); /* %s landed */", what);
    kt_buf_line(b, "kt_fence_proxy_async();");
    kt_buf_line(b, "__syncthreads();");
}

/* The O += P V wgmmas of V_tile (at voff in sV), P from registers, committed as one group. */
static void emit_wgmma_pv_issue(kt_buf *b, const attn_geom *m)
{
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < BKV / 16; ks++)");
    kt_buf_line(b,
                "    kt_wgmma_%s_rs<DV, 1>(o[0], pa[ks], dv0 + ((voff + ks * 16 * 64) >> 3), 1);",
                attn_math_labels[m->math]);
    kt_buf_line(b, "kt_wgmma_commit();");
}

/* The Hopper kernel, software-pipelined inside each warpgroup: while the tensor cores run
 * O += P_j V_j, the warpgroup's threads compute the softmax of S_j+1 = Q K_j+1^T (issued just
 * before), so the exponentials (the MUFU unit: as much time as the MMAs at D = 64) overlap the
 * MMAs. O's rescale for S_j+1's new max waits for P_j V_j. Tiles: K two tiles ahead and V one
 * tile ahead of the MMAs, in rings of NST buffers, one cp.async group per step. */
void attn_emit_wgmma_kernel(kt_buf *b, const ops_group *grp, const attn_info *a, const attn_geom *m,
                            const char *entry)
{
    const char *ty = ops_emit_ctype(a->dt);
    char scale[64];
    const char *ex = attn_emit_kernel_open(b, grp, a, m, entry, scale, sizeof(scale));
    kt_buf_line(b, "constexpr int MT = 1; /* a warp owns 16 of its warpgroup's 64 rows */");
    kt_buf_line(b, "/* scores are scaled by %s%s */", scale,
                m->exp2 ? " (scale * log2(e): softmax in base 2)" : "");
    kt_buf_line(b, "constexpr float SCALE = %s;", scale);
    kt_buf_line(b, "extern __shared__ __align__(16) unsigned char kt_smem[];");
    kt_buf_line(b, "/* tiles 1024-byte aligned: the swizzle is a function of the address */");
    kt_buf_line(b,
                "%s *sQ = reinterpret_cast<%s *>(kt_smem + ((1024u - (kt_smem_u32(kt_smem) & "
                "1023u)) & 1023u));",
                ty, ty);
    kt_buf_line(b, "constexpr int NST = %d; /* ring buffers of K and of V */", m->stages);
    kt_buf_line(b, "%s *sK = sQ + BQ * D; /* NST buffers of BKV x D */", ty);
    kt_buf_line(b, "%s *sV = sK + NST * BKV * D; /* NST buffers of BKV x DV */", ty);
    kt_buf_line(b,
                "const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;");
    kt_buf_line(b, "const int g = lane >> 2, t4 = lane & 3; /* accumulator row group, column "
                   "pair */");
    kt_buf_line(b, "/* base descriptors: this warpgroup's Q rows, the first K and V buffers */");
    kt_buf_line(b, "const unsigned long long dq0 = kt_wgmma_desc(sQ + wg * 64 * 64, 16, 1024, "
                   "KT_WGMMA_SW128),");
    kt_buf_line(b, "                         dk0 = kt_wgmma_desc(sK, 16, 1024, KT_WGMMA_SW128),");
    kt_buf_line(b, "                         dv0 = kt_wgmma_desc(sV, 1024, 1024, KT_WGMMA_SW128);");
    attn_emit_block_setup(b, grp, a, "q0 + warp * 16");
    kt_buf_printf(b, "\n");
    attn_emit_wgmma_load(b, a, m, ATTN_Q, "Q tile", "sQ", "q0");
    attn_emit_wgmma_load(b, a, m, ATTN_K, "K tile 0", "sK", "0");
    kt_buf_line(b, "kt_cp_async_commit();");
    attn_emit_wgmma_load(b, a, m, ATTN_V, "V tile 0", "sV", "0");
    kt_buf_line(b, "if (n_tiles > 1) {");
    b->indent += 4;
    attn_emit_wgmma_load(b, a, m, ATTN_K, "K tile 1", "sK + BKV * D", "BKV");
    attn_emit_close(b, 1);
    kt_buf_line(b, "kt_cp_async_commit();");
    kt_buf_printf(b, "\n");
    attn_emit_acc_init(b);
    kt_buf_line(b, "float alpha_o[MT][2]; /* O's rescale, applied once P V has landed */");
    kt_buf_line(b, "float s[MT][BKV / 8][4]; /* scores: wgmma m64nBKV accumulators */");
    kt_buf_line(b, "unsigned pa[BKV / 16][4]; /* P of the tile whose P V is next */");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* S_0 and its softmax (every warpgroup needs key tile 0) */");
    emit_landed(b, "Q and K_0");
    kt_buf_line(b, "{");
    b->indent += 4;
    emit_wgmma_qk_issue(b, m, "0", "", "0");
    kt_buf_line(b, "kt_wgmma_wait<0>();");
    kt_buf_line(b, "kt_reg_hold(s[0]);");
    attn_emit_mma_softmax(b, a, m, ex, true);
    emit_wgmma_pack(b, m);
    attn_emit_close(b, 1);
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Every warpgroup runs every step, also on tiles its causal mask hides (P = 0 "
                   "there):");
    kt_buf_line(b, "   a data-dependent wgmma group count would make ptxas serialize the MMAs. */");
    kt_buf_line(b, "for (int tile = 0; tile < n_tiles; tile++) {");
    b->indent += 4;
    if (m->stages == 2)
        kt_buf_line(b, "__syncthreads(); /* every warpgroup is done with K_tile and V_tile-1 */");
    else
        kt_buf_line(b, "/* K_tile+2 and V_tile+1 go where K_tile-1 and V_tile-2 were: every "
                       "warpgroup passed the last barrier, so it is done with them */");
    kt_buf_line(b, "if (tile + 2 < n_tiles) {");
    b->indent += 4;
    kt_buf_line(b, "const int kv2 = (tile + 2) * BKV;");
    attn_emit_wgmma_load(b, a, m, ATTN_K, "K tile + 2", "(sK + (tile + 2) % NST * BKV * D)", "kv2");
    attn_emit_close(b, 1);
    kt_buf_line(b, "if (tile + 1 < n_tiles) {");
    b->indent += 4;
    kt_buf_line(b, "const int kv1 = (tile + 1) * BKV;");
    attn_emit_wgmma_load(b, a, m, ATTN_V, "V tile + 1", "(sV + (tile + 1) % NST * BKV * DV)",
                         "kv1");
    attn_emit_close(b, 1);
    kt_buf_line(b, "kt_cp_async_commit();");
    emit_landed(b, "V_tile and K_tile+1");
    kt_buf_line(b, "const int voff = tile %% NST * BKV * DV; /* V_tile's buffer */");
    kt_buf_line(b, "if (tile + 1 < n_tiles) {");
    b->indent += 4;
    emit_wgmma_qk_issue(b, m, "(tile + 1) * BKV", " /* the keys of S_tile+1 */",
                        "(tile + 1) % NST * BKV * D");
    kt_buf_line(b, "/* O += P_tile V_tile, in flight during the softmax of S_tile+1 */");
    emit_wgmma_pv_issue(b, m);
    kt_buf_line(b, "kt_wgmma_wait<1>(); /* S_tile+1 done; P V may still run */");
    kt_buf_line(b, "kt_reg_hold(s[0]);");
    attn_emit_mma_softmax(b, a, m, ex, true);
    kt_buf_line(b, "kt_wgmma_wait<0>();");
    kt_buf_line(b, "kt_reg_hold(o[0]);");
    kt_buf_line(b, "/* O joins S_tile+1's max; P_tile+1 is next */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < DV / 8; j++) {");
    kt_buf_line(b, "    o[0][j][0] *= alpha_o[0][0];");
    kt_buf_line(b, "    o[0][j][1] *= alpha_o[0][0];");
    kt_buf_line(b, "    o[0][j][2] *= alpha_o[0][1];");
    kt_buf_line(b, "    o[0][j][3] *= alpha_o[0][1];");
    kt_buf_line(b, "}");
    emit_wgmma_pack(b, m);
    b->indent -= 4;
    kt_buf_line(b, "} else {");
    b->indent += 4;
    kt_buf_line(b, "/* the last tile: O += P V alone */");
    kt_buf_line(b, "kt_wgmma_fence();");
    emit_wgmma_pv_issue(b, m);
    kt_buf_line(b, "kt_wgmma_wait<0>();");
    kt_buf_line(b, "kt_reg_hold(o[0]);");
    attn_emit_close(b, 2);
    kt_buf_printf(b, "\n");
    attn_emit_mma_store(b, grp, a);
    attn_emit_close(b, 1);
}
