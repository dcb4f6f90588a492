/* attention family: the candidate assembled (the family entry points) and the emission helpers
 * every kernel shares: the device library includes, the kernel opening, the block's tensors and
 * key range, the accumulators, loop headers (ops/attention/attention.h lists the files). */
#include "attention.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Parameter name of group input i ("in0"...) and output ("out0"). */
int attn_input_index(const ops_group *grp, int32_t t)
{
    for (int i = 0; i < grp->n_in; i++)
        if (grp->in[i] == t)
            return i;
    return -1;
}

/* True when tensor t is produced by a node of the group. */
bool attn_in_group(const ops_group *grp, int32_t t)
{
    int32_t p = grp->g->tensors[t].producer;
    return p >= 0 && (grp->mask >> p & 1);
}

static void emit_params(kt_buf *b, const ops_group *grp, bool tma)
{
    const ops_graph *g = grp->g;
    char c[OPS_EMIT_COMMENT_MAX];
    if (tma) /* q, k and v again, as TMA sees them (attn_fill_tma_args) */
        kt_buf_line(b, "const __grid_constant__ kt_tensor_map tmap_q, const __grid_constant__ "
                       "kt_tensor_map tmap_k, const __grid_constant__ kt_tensor_map tmap_v,");
    for (int i = 0; i < grp->n_in; i++) {
        const ops_tensor *t = &g->tensors[grp->in[i]];
        kt_buf_line(b, "const %s *__restrict__ in%d, /* %s */", ops_emit_ctype(t->dtype), i,
                    ops_emit_comment_text(t->name, c, sizeof(c)));
    }
    const ops_tensor *t = &g->tensors[grp->out[0]];
    kt_buf_line(b, "%s *__restrict__ out0) /* %s */", ops_emit_ctype(t->dtype),
                ops_emit_comment_text(t->name, c, sizeof(c)));
}

/* A float literal that parses back to the same float (v is finite: validation checks the
 * scale). "2f" is not a float literal in C++: a point or an exponent goes before the suffix. */
static void float_lit(char *buf, size_t len, double v)
{
    char digits[32];
    snprintf(digits, sizeof(digits), "%.9g", (double)(float)v);
    snprintf(buf, len, "%s%sf", digits, strpbrk(digits, ".e") ? "" : ".0");
}

/* The opening both kernels share: signature, the tile and problem constants. Writes the score
 * scale literal (log2(e) folded in for the exp2 softmax) into scale and returns the exponential
 * to use. */
const char *attn_emit_kernel_open(kt_buf *b, const ops_group *grp, const attn_info *a,
                                  const attn_geom *m, const char *entry, char *scale,
                                  size_t scale_len)
{
    float_lit(scale, scale_len, m->exp2 ? a->scale * 1.4426950408889634 : a->scale);
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(%d, 1)", m->threads);
    kt_buf_line(b, "%s(", entry);
    b->indent += 4;
    emit_params(b, grp, m->ws);
    b->indent -= 4;
    kt_buf_line(b, "{");
    b->indent += 4;
    kt_buf_line(b, "constexpr int BQ = %d, BKV = %d, D = %d, DV = %d;", m->bq, m->bkv, (int)a->d,
                (int)a->dv);
    kt_buf_line(b, "constexpr int SQ = %lld, SKV = %lld;", (long long)a->sq, (long long)a->skv);
    /* __expf (ex2.approx of x log2(e)): the accurate expf keeps a slow path that spills. */
    return m->exp2 ? (m->math == MATH_FFMA ? "exp2f" : "kt_exp2") : "__expf";
}

/* The tile's first query q0 and, when wq0 is given, the warp's (wq0); its batch entry (and its
 * k/v head's), its tensors' bases, and the key tiles it visits (causal: none past its last
 * query). A block runs one tile (grid: q tiles x batch, the q tiles longest first), or, when
 * item names a work item of the TMA kernel (ITEMS = Q_TILES x BATCH of them), that item's: items
 * go in chunks of CHUNK batch entries (their K and V stay in L2 while the chunk runs), the
 * longest q tiles of a chunk first. The TMA kernel reads q, k and v through its maps: its
 * producer (no wq0) gets the k/v head kvidx, its consumers (wq0) the output's base gO. */
void attn_emit_block_setup(kt_buf *b, const ops_group *grp, const attn_info *a, const char *wq0,
                           const char *item)
{
    const char *ty = ops_emit_ctype(a->dt);
    bool pointers = !item;
    if (!item) {
        kt_buf_line(b,
                    "const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* longest tiles first */");
        kt_buf_line(b, "const int bidx = blockIdx.y;");
    } else {
        kt_buf_line(b,
                    "const int c0 = %s / (CHUNK * Q_TILES) * CHUNK, nc = min(CHUNK, BATCH - c0); "
                    "/* the item's chunk: its first batch entry, their count */",
                    item);
        kt_buf_line(b, "const int r = %s - c0 * Q_TILES; /* the item's rank in the chunk */", item);
        kt_buf_line(b, "const int q0 = (Q_TILES - 1 - r / nc) * BQ, bidx = c0 + r %% nc;%s",
                    a->causal ? " /* longest first */" : "");
    }
    if (wq0)
        kt_buf_line(b, "const int wq0 = %s; /* this warp's first query */", wq0);
    int iq = attn_input_index(grp, a->q), ik = attn_input_index(grp, a->k),
        iv = attn_input_index(grp, a->v);
    if (pointers)
        kt_buf_line(b, "const %s *gQ = in%d + (size_t)bidx * SQ * D;", ty, iq);
    if (a->group > 1 && (pointers || !wq0)) {
        kt_buf_line(b, "/* grouped-query: query head h (bidx %% %lld) reads k/v head h / %lld */",
                    (long long)a->hq, (long long)a->group);
        kt_buf_line(b, "const int kvidx = bidx / %lld * %lld + bidx %% %lld / %lld;",
                    (long long)a->hq, (long long)(a->hq / a->group), (long long)a->hq,
                    (long long)a->group);
    }
    const char *kvi = a->group > 1 ? "kvidx" : "bidx";
    if (pointers) {
        kt_buf_line(b, "const %s *gK = in%d + (size_t)%s * SKV * D;", ty, ik, kvi);
        kt_buf_line(b, "const %s *gV = in%d + (size_t)%s * SKV * DV;", ty, iv, kvi);
    } else if (a->group == 1 && !wq0) {
        kt_buf_line(b, "const int kvidx = bidx; /* k and v have q's heads */");
    }
    if (pointers || wq0)
        kt_buf_line(b, "%s *gO = out0 + (size_t)bidx * SQ * DV;", ops_emit_ctype(a->out_dt));
    if (a->causal) {
        kt_buf_line(b, "/* causal: keys past the block's last query are never needed */");
        kt_buf_line(b, "const int kv_end = min(SKV, min(q0 + BQ, SQ));");
    } else {
        kt_buf_line(b, "const int kv_end = SKV;");
    }
    kt_buf_line(b, "const int n_tiles = (kv_end + BKV - 1) / BKV;");
}

/* The headers of two nested unrolled loops, i < ni and j < nj (the inner one opened with a
 * brace when brace); the indent is left at the inner body's (+8: the caller takes it back). */
void attn_emit_for2(kt_buf *b, const char *ni, const char *nj, bool brace)
{
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %s; i++)", ni);
    b->indent += 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < %s; j++)%s", nj, brace ? " {" : "");
    b->indent += 4;
}

/* The output accumulators (m16n8 C layout: mma.sync's and, per warp, wgmma's) and the online
 * softmax's row statistics, zeroed. */
void attn_emit_acc_init(kt_buf *b)
{
    kt_buf_line(b, "float o[MT][DV / 8][4]; /* output accumulators, m16n8 C layout */");
    kt_buf_line(b, "float row_m[MT][2], row_l[MT][2]; /* rows g and g + 8 of each m tile */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < MT; i++) {");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < DV / 8; j++)");
    kt_buf_line(b, "        o[i][j][0] = o[i][j][1] = o[i][j][2] = o[i][j][3] = 0.0f;");
    kt_buf_line(b, "    row_m[i][0] = row_m[i][1] = KT_NEG_INF;");
    kt_buf_line(b, "    row_l[i][0] = row_l[i][1] = 0.0f;");
    kt_buf_line(b, "}");
}

/* Closes n blocks: per block, the indent back by 4 and its brace. */
void attn_emit_close(kt_buf *b, int n)
{
    for (int i = 0; i < n; i++) {
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
}

/* Opens an unrolled loop "for (int var = 0; var < bound; var++) {" (attn_emit_close ends it). */
void attn_emit_for_open(kt_buf *b, const char *var, const char *bound)
{
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int %s = 0; %s < %s; %s++) {", var, var, bound, var);
    b->indent += 4;
}

/* Two nested unrolled loops (i < ni, j < nj) around one statement. */
void attn_emit_loop2(kt_buf *b, const char *ni, const char *nj, const char *stmt)
{
    attn_emit_for2(b, ni, nj, false);
    kt_buf_line(b, "%s", stmt);
    b->indent -= 8;
}

/* P (the softmaxed scores s) repacked to the 16-bit A fragment dst[4] of k16 step ks: the
 * m16n8 C layout of n-tiles 2 ks and 2 ks + 1 is the m16n8k16 A layout. */
void attn_emit_pack_p(kt_buf *b, const attn_geom *m, const char *dst, const char *s)
{
    const char *t = attn_math_labels[m->math];
    kt_buf_line(b, "%s[0] = kt_pack_%sx2(%s[2 * ks][0], %s[2 * ks][1]);", dst, t, s, s);
    kt_buf_line(b, "%s[1] = kt_pack_%sx2(%s[2 * ks][2], %s[2 * ks][3]);", dst, t, s, s);
    kt_buf_line(b, "%s[2] = kt_pack_%sx2(%s[2 * ks + 1][0], %s[2 * ks + 1][1]);", dst, t, s, s);
    kt_buf_line(b, "%s[3] = kt_pack_%sx2(%s[2 * ks + 1][2], %s[2 * ks + 1][3]);", dst, t, s, s);
}

/* Written between the header comment and the prelude: a partition's module keeps every group's
 * text before its prelude at file scope (search/link.c), where the headers belong. */
static void emit_includes(kt_buf *b, const attn_geom *m)
{
    kt_buf_line(b, "/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */");
    kt_buf_line(b, "#include \"ktune/cp_async.cuh\"");
    kt_buf_line(b, "#include \"ktune/math.cuh\"");
    if (m->math == MATH_FFMA) {
        kt_buf_line(b, "#include \"ktune/reduce.cuh\"");
        return;
    }
    if (m->splitkv && !m->tc)
        return; /* CUDA cores: math.cuh's exponential and max */
    if (!m->wgmma)
        kt_buf_line(b, "#include \"ktune/ldmatrix.cuh\"");
    kt_buf_line(b, "#include \"ktune/mma.cuh\"");
    if (m->wgmma || m->layout == LAYOUT_SWIZZLE)
        kt_buf_line(b, "#include \"ktune/swizzle.cuh\"");
    if (m->wgmma)
        kt_buf_line(b, "#include \"ktune/wgmma.cuh\"");
    if (m->ws) {
        kt_buf_line(b, "#include \"ktune/barrier.cuh\"");
        kt_buf_line(b, "#include \"ktune/mbarrier.cuh\"");
        kt_buf_line(b, "#include \"ktune/setmaxnreg.cuh\"");
        kt_buf_line(b, "#include \"ktune/tma.cuh\"");
    }
}

static int attention_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                          ops_emitted *out, ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    attn_info a;
    if (!attn_analyse(grp, &a))
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "attention: the group is not one attention node with an "
                            "elementwise epilogue");
    const char *why = attention_prune(grp, s, dev);
    if (why)
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, a.att_node, "",
                            "attention: schedule not legal for this group (%s)", why);
    attn_geom m;
    attn_geometry(&a, s, &m);
    char entry[64];
    if (m.splitkv)
        snprintf(entry, sizeof(entry), "ktune_attention_%s_splitkv%s_w%d_x%d_s%d%s",
                 attn_math_labels[m.math], m.tc ? "_tc" : "", m.warps, m.splits, m.stages,
                 grp->entry_suffix);
    else
        snprintf(entry, sizeof(entry), "ktune_attention_%s%s_q%d_kv%d_w%d_s%d%s",
                 attn_math_labels[m.math],
                 m.ws      ? "_ws"
                 : m.wgmma ? "_wgmma"
                           : "",
                 m.bq, m.bkv, m.warps, m.stages, grp->entry_suffix);

    kt_buf b = {0};
    ops_emit_header(&b, grp, s);
    emit_includes(&b, &m);
    ops_emit_shared_prelude(&b, out);
    if (m.math != MATH_FFMA && !m.wgmma) {
        kt_buf_printf(&b, "/* ---- attention helpers: the shared tile layout ---- */\n");
        attn_emit_layout_fn(&b, m.layout);
    }
    kt_buf_printf(&b, "/* ---- end of attention helpers ---- */\n\n");
    int rc = 0;
    if (a.has_epilogue) {
        rc = attn_emit_epilogue_fn(&b, grp, &a);
        if (rc < 0) {
            kt_buf_free(&b);
            return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, a.att_node, "",
                                "attention: cannot emit the epilogue");
        }
        kt_buf_printf(&b, "\n");
    }
    if (m.splitkv)
        attn_emit_splitkv_kernels(&b, grp, &a, &m, entry);
    else if (m.math == MATH_FFMA)
        attn_emit_ffma_kernel(&b, grp, &a, &m, entry);
    else if (m.ws)
        attn_emit_wgmma_ws_kernel(&b, grp, &a, &m, dev, entry);
    else if (m.wgmma)
        attn_emit_wgmma_kernel(&b, grp, &a, &m, entry);
    else
        attn_emit_mma_kernel(&b, grp, &a, &m, entry);
    if (kt_buf_status(&b) < 0) {
        kt_buf_free(&b);
        return -ENOMEM;
    }
    out->source = kt_buf_take(&b);
    if (m.splitkv) {
        attn_splitkv_launches(grp, &a, &m, entry, out);
        return 0;
    }
    out->n_kernels = 1;
    ops_kernel_launch *k = &out->kernels[0];
    snprintf(k->entry, sizeof(k->entry), "%s", entry);
    k->grid[0] = (uint32_t)m.q_tiles;
    k->grid[1] = (uint32_t)a.batch;
    if (m.ws) { /* a block per work item (a q tile of a batch entry), or per SM walking them */
        int64_t items = m.q_tiles * a.batch;
        k->grid[0] = (uint32_t)(m.persistent && items > dev->sm_count ? dev->sm_count : items);
        k->grid[1] = 1;
    }
    k->grid[2] = 1;
    k->block[0] = (uint32_t)m.threads;
    k->block[1] = k->block[2] = 1;
    k->smem_bytes = (uint32_t)m.smem;
    if (m.ws)
        attn_fill_tma_args(grp, &a, &m, k);
    for (int i = 0; i < grp->n_in; i++)
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->in[i]};
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->out[0]};
    return 0;
}

const ops_family ops_family_attention = {
    .id = OPS_FAM_ATTENTION,
    .name = "attention",
    .n_knobs = N_KNOBS,
    .knobs = attn_knobs,
    .matches = attention_matches,
    .prune = attention_prune,
    .emit = attention_emit,
    .estimate = attention_estimate,
};
