/* attention family: the Hopper kernel and its wgmma main loop (ops/attention/attention.h lists
 * the files). Each warpgroup owns 64 query rows: S = Q K^T by wgmma with both operands in
 * shared memory (128-byte swizzled tiles, read through matrix descriptors), O += P V by wgmma
 * with P in registers (the S accumulators repacked) and V an N-major shared operand; the
 * softmax update and the store are the mma.sync path's (softmax.c, epilogue.c). */
#include "attention.h"

#include <stdio.h>
#include <string.h>

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

/* Once P_tile V_tile has landed: O joins S_tile+1's max (the deferred rescale), P_tile+1 packed. */
static void emit_rescale_and_pack(kt_buf *b, const attn_geom *m)
{
    kt_buf_line(b, "/* O joins S_tile+1's max; P_tile+1 is next */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < DV / 8; j++) {");
    kt_buf_line(b, "    o[0][j][0] *= alpha_o[0][0];");
    kt_buf_line(b, "    o[0][j][1] *= alpha_o[0][0];");
    kt_buf_line(b, "    o[0][j][2] *= alpha_o[0][1];");
    kt_buf_line(b, "    o[0][j][3] *= alpha_o[0][1];");
    kt_buf_line(b, "}");
    emit_wgmma_pack(b, m);
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
    kt_buf_line(b, OPS_DYNAMIC_SMEM);
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
    attn_emit_block_setup(b, grp, a, "q0 + warp * 16", NULL);
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
    emit_rescale_and_pack(b, m);
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

/* The tensor maps of q, k and v (kernel parameters tmap_q, tmap_k, tmap_v, ahead of the
 * pointers): [batch][S][D] matrices (k and v: batch / group of them), boxes of 64 columns (128
 * bytes, the swizzle's row) by a tile's rows, landing in the 128-byte swizzle wgmma reads. */
void attn_fill_tma_args(const ops_group *grp, const attn_info *a, const attn_geom *m,
                        ops_kernel_launch *k)
{
    const int32_t tensors[3] = {a->q, a->k, a->v};
    const int64_t rows[3] = {a->sq, a->skv, a->skv}, cols[3] = {a->d, a->d, a->dv};
    const int64_t batch[3] = {a->batch, a->batch / a->group, a->batch / a->group};
    const uint32_t box[3] = {(uint32_t)m->bq, (uint32_t)m->bkv, (uint32_t)m->bkv};
    (void)grp;
    for (int i = 0; i < 3; i++) {
        ops_arg *arg = &k->args[k->n_args++];
        memset(arg, 0, sizeof(*arg));
        arg->kind = OPS_ARG_TENSOR_MAP;
        arg->tensor = tensors[i];
        ops_tensor_map_swizzled(&arg->tmap, a->dt, (uint64_t)cols[i], (uint64_t)rows[i], batch[i],
                                64, box[i]);
    }
}

/* The producer's copies of one tile: operand op's cols / 64 column blocks of box rows each,
 * block c at dst + c * rows * 64, from rows row0.. of batch entry bidx (a 2-D map when the
 * operand has one matrix). */
static void emit_tma_tile(kt_buf *b, const char *map, bool rank3, const char *dst, const char *rows,
                          const char *cols, const char *bar, const char *row0, const char *bidx)
{
    kt_buf_line(b, "for (int c = 0; c < %s / 64; c++)", cols);
    if (rank3)
        kt_buf_line(b, "    kt_tma_load_3d(%s + c * %s * 64, &%s, %s, c * 64, %s, %s);", dst, rows,
                    map, bar, row0, bidx);
    else
        kt_buf_line(b, "    kt_tma_load_2d(%s + c * %s * 64, &%s, %s, c * 64, %s);", dst, rows, map,
                    bar, row0);
}

/* pingpong: a consumer's turn at the tensor cores begins when the one before it ended its turn
 * (named barrier 1 + cw: its own 128 threads and the arrivals of the previous consumer's), and
 * ends by opening the next one's. */
static void emit_turn_begin(kt_buf *b, const attn_geom *m)
{
    if (m->pingpong)
        kt_buf_line(b, "kt_bar_sync(1 + cw, 256); /* our turn: the previous consumer issued */");
}
static void emit_turn_end(kt_buf *b, const attn_geom *m)
{
    if (m->pingpong)
        kt_buf_line(b, "kt_bar_arrive(1 + (cw + 1) %% CONSUMERS, 256); /* the next consumer's turn "
                       "*/");
}

/* The loop over a block's work items (grid=persistent), or its one item (grid=tiles: straight
 * code, no loop for ptxas to keep its state across). */
static void emit_items_open(kt_buf *b, const attn_geom *m)
{
    if (m->persistent)
        kt_buf_line(b, "for (int item = 0, w = blockIdx.x; w < ITEMS; item++, w += gridDim.x) {");
    else
        kt_buf_line(b, "{ /* grid=tiles: the block's one item */");
    b->indent += 4;
    if (!m->persistent)
        kt_buf_line(b, "const int item = 0, w = blockIdx.x;");
}

/* The warp-specialised Hopper kernel (attention.h: mma=wgmma_ws). A block walks work items (a q
 * tile of a batch entry) w = blockIdx.x, + gridDim.x, ... (grid=tiles: one). Warpgroup 0
 * produces: its thread 0 loads an item's Q once the consumers released the last one's, then its
 * K and V tiles into the rings (position it counts tiles across items), each after the buffer's
 * previous tile was released, so the next item's Q and first tiles load while the consumers
 * finish and store this one. Warpgroups 1..CONSUMERS consume, each pipelined as the plain wgmma
 * kernel is (S_t+1 = Q K_t+1^T issued, then O += P_t V_t, the softmax of S_t+1 under the P V),
 * releasing K_t+1 once S_t+1 is read and V_t once P_t V_t is: no block barrier in the key loop,
 * each warpgroup at its own pace. */
void attn_emit_wgmma_ws_kernel(kt_buf *b, const ops_group *grp, const attn_info *a,
                               const attn_geom *m, const ops_device *dev, const char *entry)
{
    /* a chunk: enough batch entries for a block on every SM, whole grouped-query groups */
    int64_t chunk = (dev->sm_count + m->q_tiles - 1) / m->q_tiles;
    chunk = (chunk + a->group - 1) / a->group * a->group;
    if (chunk > a->batch)
        chunk = a->batch;
    const char *ty = ops_emit_ctype(a->dt);
    bool q3 = a->batch > 1, kv3 = a->batch / a->group > 1;
    char scale[64];
    const char *ex = attn_emit_kernel_open(b, grp, a, m, entry, scale, sizeof(scale));
    kt_buf_line(b, "constexpr int MT = 1; /* a warp owns 16 of its warpgroup's 64 rows */");
    kt_buf_line(b, "constexpr int CONSUMERS = %d; /* warpgroups computing, after the producer */",
                m->consumers);
    kt_buf_line(b,
                "constexpr int Q_TILES = %lld, BATCH = %lld, ITEMS = Q_TILES * BATCH; /* work "
                "items: a q tile of a batch entry */",
                (long long)m->q_tiles, (long long)a->batch);
    kt_buf_line(b,
                "constexpr int CHUNK = %lld; /* batch entries ordered together: their K and V "
                "stay in L2 */",
                (long long)chunk);
    kt_buf_line(b, "/* scores are scaled by %s%s */", scale,
                m->exp2 ? " (scale * log2(e): softmax in base 2)" : "");
    kt_buf_line(b, "constexpr float SCALE = %s;", scale);
    kt_buf_line(b, "constexpr int NST = %d; /* ring buffers of K and of V */", m->stages);
    kt_buf_line(b, OPS_DYNAMIC_SMEM);
    kt_buf_line(b, "/* tiles 1024-byte aligned (the swizzle is a function of the address), each "
                   "64-column block of rows x 128 bytes */");
    kt_buf_line(b,
                "%s *sQ = reinterpret_cast<%s *>(kt_smem + ((1024u - (kt_smem_u32(kt_smem) & "
                "1023u)) & 1023u));",
                ty, ty);
    kt_buf_line(b, "%s *sK = sQ + BQ * D; /* NST buffers of BKV x D */", ty);
    kt_buf_line(b, "%s *sV = sK + NST * BKV * D; /* NST buffers of BKV x DV */", ty);
    kt_buf_line(b, "unsigned long long *q_full = reinterpret_cast<unsigned long long *>(sV + NST * "
                   "BKV * DV), *q_empty = q_full + 1;");
    kt_buf_line(b, "unsigned long long *k_full = q_empty + 1, *k_empty = k_full + NST, *v_full = "
                   "k_empty + NST, *v_empty = v_full + NST;");
    kt_buf_line(b, "const int tid = threadIdx.x, wg = tid >> 7;");
    kt_buf_line(b, "if (tid == 0) {");
    kt_buf_line(b, "    kt_tma_prefetch_map(&tmap_q);");
    kt_buf_line(b, "    kt_tma_prefetch_map(&tmap_k);");
    kt_buf_line(b, "    kt_tma_prefetch_map(&tmap_v);");
    kt_buf_line(b, "    /* full: the producer's arrive_expect_tx, the copies' bytes complete a "
                   "phase; empty: lane 0 of every consumer warp */");
    kt_buf_line(b, "    kt_mbar_init(q_full, 1);");
    kt_buf_line(b, "    kt_mbar_init(q_empty, CONSUMERS * 4);");
    kt_buf_line(b, "    for (int s = 0; s < NST; s++) {");
    kt_buf_line(b, "        kt_mbar_init(&k_full[s], 1);");
    kt_buf_line(b, "        kt_mbar_init(&v_full[s], 1);");
    kt_buf_line(b, "        kt_mbar_init(&k_empty[s], CONSUMERS * 4);");
    kt_buf_line(b, "        kt_mbar_init(&v_empty[s], CONSUMERS * 4);");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "    kt_mbar_fence_init();");
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads(); /* the only block barrier: the mbarriers are initialised */");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "if (wg == 0) { /* the producer */");
    b->indent += 4;
    if (m->consumer_regs)
        kt_buf_line(b, "kt_setmaxnreg_dec<24>(); /* 24 + %d x %d a thread of the 65536 */",
                    m->consumers, m->consumer_regs);
    else
        kt_buf_line(b, "/* one consumer: 65536 / 256 registers a thread cover it, nothing to move "
                       "(setmaxnreg) */");
    kt_buf_line(b, "if (tid == 0) {");
    b->indent += 4;
    kt_buf_line(b, "int it = 0; /* ring position: tiles loaded so far */");
    emit_items_open(b, m);
    attn_emit_block_setup(b, grp, a, NULL, "w");
    kt_buf_line(b, "if (item > 0) /* the consumers are done with the last item's Q */");
    kt_buf_line(b, "    kt_mbar_wait(q_empty, (item - 1) & 1);");
    kt_buf_line(b, "kt_mbar_arrive_expect_tx(q_full, BQ * D * 2);");
    emit_tma_tile(b, "tmap_q", q3, "sQ", "BQ", "D", "q_full", "q0", "bidx");
    kt_buf_line(b, "for (int t = 0; t < n_tiles; t++, it++) {");
    b->indent += 4;
    kt_buf_line(b, "const int st = it %% NST, kv0 = t * BKV;");
    kt_buf_line(b, "if (it >= NST) /* the tile NST back in the ring released by every consumer "
                   "warp */");
    kt_buf_line(b, "    kt_mbar_wait(&k_empty[st], (it / NST + 1) & 1);");
    kt_buf_line(b, "kt_mbar_arrive_expect_tx(&k_full[st], BKV * D * 2);");
    emit_tma_tile(b, "tmap_k", kv3, "(sK + st * BKV * D)", "BKV", "D", "&k_full[st]", "kv0",
                  "kvidx");
    kt_buf_line(b, "if (it >= NST)");
    kt_buf_line(b, "    kt_mbar_wait(&v_empty[st], (it / NST + 1) & 1);");
    kt_buf_line(b, "kt_mbar_arrive_expect_tx(&v_full[st], BKV * DV * 2);");
    emit_tma_tile(b, "tmap_v", kv3, "(sV + st * BKV * DV)", "BKV", "DV", "&v_full[st]", "kv0",
                  "kvidx");
    attn_emit_close(b, 3);
    kt_buf_line(b, "return;");
    attn_emit_close(b, 1);
    if (m->consumer_regs)
        kt_buf_line(b, "kt_setmaxnreg_inc<%d>();", m->consumer_regs);
    kt_buf_line(b, "const int cw = wg - 1, warp = tid >> 5 & 3, lane = tid & 31; /* consumer, its "
                   "warp */");
    kt_buf_line(b, "const int g = lane >> 2, t4 = lane & 3; /* accumulator row group, column "
                   "pair */");
    kt_buf_line(b, "/* base descriptors: this warpgroup's Q rows, the first K and V buffers (V: "
                   "N-major, its 64-column blocks BKV x 128 bytes apart) */");
    kt_buf_line(b, "const unsigned long long dq0 = kt_wgmma_desc(sQ + cw * 64 * 64, 16, 1024, "
                   "KT_WGMMA_SW128),");
    kt_buf_line(b, "                         dk0 = kt_wgmma_desc(sK, 16, 1024, KT_WGMMA_SW128),");
    kt_buf_line(b, "                         dv0 = kt_wgmma_desc(sV, BKV * 128, 1024, "
                   "KT_WGMMA_SW128);");
    if (m->pingpong) {
        kt_buf_line(b, "if (cw == CONSUMERS - 1) /* consumer 0 takes the first turn */");
        kt_buf_line(b, "    kt_bar_arrive(1, 256);");
    }
    kt_buf_line(b, "%sint it0 = 0; /* ring position of the item's first tile */",
                m->persistent ? "" : "const ");
    emit_items_open(b, m);
    attn_emit_block_setup(b, grp, a, "q0 + cw * 64 + warp * 16", "w");
    if (a->causal && !m->pingpong) {
        kt_buf_line(b, "/* causal: this warpgroup's key tiles end at its own last query */");
        kt_buf_line(b, "const int n_own = (min(SKV, min(q0 + cw * 64 + 64, SQ)) + BKV - 1) / BKV;");
    } else if (a->causal) {
        kt_buf_line(b, "const int n_own = n_tiles; /* pingpong: as many turns as the other "
                       "consumers (masked past our diagonal) */");
    } else {
        kt_buf_line(b, "const int n_own = n_tiles;");
    }
    attn_emit_acc_init(b);
    kt_buf_line(b, "float alpha_o[MT][2]; /* O's rescale, applied once P V has landed */");
    kt_buf_line(b, "float s[MT][BKV / 8][4]; /* scores: wgmma m64nBKV accumulators */");
    kt_buf_line(b, "unsigned pa[BKV / 16][4]; /* P of the tile whose P V is next */");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* S_0 and its softmax */");
    kt_buf_line(b, "kt_mbar_wait(q_full, item & 1);");
    kt_buf_line(b, "kt_mbar_wait(&k_full[it0 %% NST], it0 / NST & 1);");
    kt_buf_line(b, "{");
    b->indent += 4;
    emit_turn_begin(b, m);
    emit_wgmma_qk_issue(b, m, "0", "", "it0 % NST * BKV * D");
    emit_turn_end(b, m);
    kt_buf_line(b, "kt_wgmma_wait<0>();");
    kt_buf_line(b, "kt_reg_hold(s[0]);");
    kt_buf_line(b, "if (lane == 0)");
    kt_buf_line(b, "    kt_mbar_arrive(&k_empty[it0 %% NST]);");
    attn_emit_mma_softmax(b, a, m, ex, true);
    emit_wgmma_pack(b, m);
    attn_emit_close(b, 1);
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "for (int tile = 0; tile < n_own; tile++) {");
    b->indent += 4;
    kt_buf_line(b, "const int st = (it0 + tile) %% NST, voff = st * BKV * DV; /* V_tile's buffer "
                   "*/");
    kt_buf_line(b, "if (tile + 1 < n_own) {");
    b->indent += 4;
    kt_buf_line(b, "const int st1 = (it0 + tile + 1) %% NST;");
    kt_buf_line(b, "/* both waits before the wgmmas: a wait loop between them made ptxas fence "
                   "the P V (C7519) */");
    emit_turn_begin(b, m);
    kt_buf_line(b, "kt_mbar_wait(&k_full[st1], (it0 + tile + 1) / NST & 1);");
    kt_buf_line(b, "kt_mbar_wait(&v_full[st], (it0 + tile) / NST & 1);");
    emit_wgmma_qk_issue(b, m, "(tile + 1) * BKV", " /* the keys of S_tile+1 */", "st1 * BKV * D");
    kt_buf_line(b, "/* O += P_tile V_tile, in flight during the softmax of S_tile+1 */");
    emit_wgmma_pv_issue(b, m);
    emit_turn_end(b, m);
    kt_buf_line(b, "kt_wgmma_wait<1>(); /* S_tile+1 done; P V may still run */");
    kt_buf_line(b, "kt_reg_hold(s[0]);");
    kt_buf_line(b, "if (lane == 0)");
    kt_buf_line(b, "    kt_mbar_arrive(&k_empty[st1]);");
    attn_emit_mma_softmax(b, a, m, ex, true);
    kt_buf_line(b, "kt_wgmma_wait<0>();");
    kt_buf_line(b, "kt_reg_hold(o[0]);");
    kt_buf_line(b, "if (lane == 0)");
    kt_buf_line(b, "    kt_mbar_arrive(&v_empty[st]);");
    emit_rescale_and_pack(b, m);
    b->indent -= 4;
    kt_buf_line(b, "} else {");
    b->indent += 4;
    kt_buf_line(b, "/* the last tile: O += P V alone; Q is no longer read, the next item's may "
                   "load */");
    kt_buf_line(b, "if (lane == 0)");
    kt_buf_line(b, "    kt_mbar_arrive(q_empty);");
    emit_turn_begin(b, m);
    kt_buf_line(b, "kt_mbar_wait(&v_full[st], (it0 + tile) / NST & 1);");
    kt_buf_line(b, "kt_wgmma_fence();");
    emit_wgmma_pv_issue(b, m);
    emit_turn_end(b, m);
    kt_buf_line(b, "kt_wgmma_wait<0>();");
    kt_buf_line(b, "kt_reg_hold(o[0]);");
    kt_buf_line(b, "if (lane == 0)");
    kt_buf_line(b, "    kt_mbar_arrive(&v_empty[st]);");
    attn_emit_close(b, 2);
    if (a->causal && !m->pingpong) {
        kt_buf_line(b, "/* the item's tiles past this warpgroup's diagonal: released unread, each "
                       "after it landed (an");
        kt_buf_line(b, " * arrival belongs to the buffer's current phase, so none may run ahead of "
                       "the producer) */");
        kt_buf_line(b, "for (int tile = n_own; tile < n_tiles; tile++) {");
        kt_buf_line(b, "    const int st = (it0 + tile) %% NST, ph = (it0 + tile) / NST & 1;");
        kt_buf_line(b, "    kt_mbar_wait(&k_full[st], ph);");
        kt_buf_line(b, "    kt_mbar_wait(&v_full[st], ph);");
        kt_buf_line(b, "    if (lane == 0) {");
        kt_buf_line(b, "        kt_mbar_arrive(&k_empty[st]);");
        kt_buf_line(b, "        kt_mbar_arrive(&v_empty[st]);");
        kt_buf_line(b, "    }");
        kt_buf_line(b, "}");
    }
    if (m->persistent)
        kt_buf_line(b, "it0 += n_tiles;");
    kt_buf_printf(b, "\n");
    attn_emit_mma_store(b, grp, a);
    attn_emit_close(b, 2);
}
