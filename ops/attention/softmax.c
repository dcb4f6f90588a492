/* attention family: the online softmax (ops/attention/attention.h lists the files). Per key
 * tile: scores masked (ragged keys; causal), the new row max, P = ex(S * SCALE - max), the row
 * sum and the rescale exp(m_old - m_new) of l and O. The tensor-core paths keep S in the m16n8
 * accumulator layout in registers (mma.sync and, per warp, wgmma); the FFMA path works on S in
 * shared memory, a warp per row. */
#include "attention.h"

/* The loop headers over every score s[i][j][e] (i < MT, j < BKV / 8, e < 4); the caller writes
 * the body 4 deeper than the indent it leaves (+8: the caller takes it back), the last loop
 * opened with a brace when brace. */
static void emit_for_scores(kt_buf *b, bool brace)
{
    attn_emit_for2(b, "MT", "BKV / 8", false);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int e = 0; e < 4; e++)%s", brace ? " {" : "");
}

/* Scores masked (ragged keys; causal) and the online-softmax update of row max, row sum and O;
 * the scores become P = ex(S * SCALE - max). Works on s[MT][BKV / 8][4] in the m16n8 C layout
 * (wgmma accumulators share it), rows wq0 + i * 16 + g (+ 8), keys from kv0. With a positive
 * scale the max is taken on raw scores and the scale folded into one FFMA per exponent. When
 * defer_alpha, O (still being accumulated by an asynchronous wgmma) is not rescaled here: each
 * row's factor goes to alpha_o[MT][2] for the caller. */
void attn_emit_mma_softmax(kt_buf *b, const attn_info *a, const attn_geom *m, const char *ex,
                           bool defer_alpha)
{
    bool fold = a->scale > 0;
    if (!fold) {
        emit_for_scores(b, false);
        kt_buf_line(b, "    s[i][j][e] *= SCALE;");
        b->indent -= 8;
    }
    /* Masking: keys past SKV (ragged last tile) and, when causal, keys after the query. */
    bool ragged = a->skv % m->bkv != 0;
    if (ragged || a->causal) {
        kt_buf_line(b, "/* mask %s%s%s */", ragged ? "keys past SKV" : "",
                    ragged && a->causal ? " and " : "",
                    a->causal ? "keys after their query (causal)" : "");
        const char *c1 = ragged ? "kv0 + BKV > SKV" : "";
        const char *c2 = a->causal ? "kv0 + BKV - 1 > wq0" : "";
        kt_buf_line(b, "if (%s%s%s) {", c1, ragged && a->causal ? " || " : "", c2);
        b->indent += 4;
        emit_for_scores(b, true);
        kt_buf_line(b, "    const int key = kv0 + j * 8 + 2 * t4 + (e & 1);");
        if (a->causal)
            kt_buf_line(b, "    const int qi = wq0 + i * 16 + g + (e >> 1) * 8;");
        kt_buf_line(b, "    if (%s%s%s)", ragged ? "key >= SKV" : "",
                    ragged && a->causal ? " || " : "", a->causal ? "key > qi" : "");
        kt_buf_line(b, "        s[i][j][e] = KT_NEG_INF;");
        kt_buf_line(b, "}");
        b->indent -= 8;
        attn_emit_close(b, 1);
    }
    kt_buf_line(b,
                "/* online softmax: new row max (over the 4 lanes sharing a row%s), rescale, "
                "P = %s(S * SCALE - max) */",
                fold ? "; raw scores, row_m too" : "", ex);
    attn_emit_for_open(b, "i", "MT");
    attn_emit_for_open(b, "h", "2");
    kt_buf_line(b, "/* two independent chains (even and odd column tiles) halve the latency */");
    kt_buf_line(b, "float mx = row_m[i][h], mx1 = KT_NEG_INF;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < BKV / 8; j += 2) {");
    kt_buf_line(b, "    mx = kt_max(mx, kt_max(s[i][j][2 * h], s[i][j][2 * h + 1]));");
    kt_buf_line(b, "    mx1 = kt_max(mx1, kt_max(s[i][j + 1][2 * h], s[i][j + 1][2 * h + 1]));");
    kt_buf_line(b, "}");
    kt_buf_line(b, "mx = kt_max(mx, mx1);");
    kt_buf_line(b, "mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, 1));");
    kt_buf_line(b, "mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, 2));");
    kt_buf_line(b, "/* a row with every key masked so far keeps p = 0 and no NaN */");
    if (fold) {
        kt_buf_line(b, "const float base = mx == KT_NEG_INF ? 0.0f : mx * SCALE;");
        kt_buf_line(b, "const float alpha = %s(fmaf(row_m[i][h], SCALE, -base));", ex);
    } else {
        kt_buf_line(b, "const float base = mx == KT_NEG_INF ? 0.0f : mx;");
        kt_buf_line(b, "const float alpha = %s(row_m[i][h] - base);", ex);
    }
    kt_buf_line(b, "row_m[i][h] = mx;");
    kt_buf_line(b, "float sum = 0.0f, sum1 = 0.0f;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < BKV / 8; j++) {");
    if (fold) {
        kt_buf_line(b, "    s[i][j][2 * h] = %s(fmaf(s[i][j][2 * h], SCALE, -base));", ex);
        kt_buf_line(b, "    s[i][j][2 * h + 1] = %s(fmaf(s[i][j][2 * h + 1], SCALE, -base));", ex);
    } else {
        kt_buf_line(b, "    s[i][j][2 * h] = %s(s[i][j][2 * h] - base);", ex);
        kt_buf_line(b, "    s[i][j][2 * h + 1] = %s(s[i][j][2 * h + 1] - base);", ex);
    }
    kt_buf_line(b, "    if (j & 1)");
    kt_buf_line(b, "        sum1 += s[i][j][2 * h] + s[i][j][2 * h + 1];");
    kt_buf_line(b, "    else");
    kt_buf_line(b, "        sum += s[i][j][2 * h] + s[i][j][2 * h + 1];");
    kt_buf_line(b, "}");
    kt_buf_line(b, "sum += sum1;");
    kt_buf_line(b, "/* per-lane partial sums; the 4 lanes of a row are added at the end */");
    kt_buf_line(b, "row_l[i][h] = row_l[i][h] * alpha + sum;");
    if (defer_alpha) {
        kt_buf_line(b, "alpha_o[i][h] = alpha;");
    } else {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int j = 0; j < DV / 8; j++) {");
        kt_buf_line(b, "    o[i][j][2 * h] *= alpha;");
        kt_buf_line(b, "    o[i][j][2 * h + 1] *= alpha;");
        kt_buf_line(b, "}");
    }
    attn_emit_close(b, 2);
}

/* The FFMA path's softmax update (phase 2 of its tile loop): a warp per row of sP (scores,
 * already scaled and masked) takes the new row max, turns the scores into P = ex(S - max) in
 * place, and records the row sum and O's rescale factor in sL and sA. */
void attn_emit_ffma_softmax(kt_buf *b, const char *ex)
{
    kt_buf_line(b,
                "/* phase 2: a warp per row: new max, P = %s(S - max), row sum, rescale factor "
                "*/",
                ex);
    kt_buf_line(b, "for (int r = warp; r < BQ; r += NT / 32) {");
    b->indent += 4;
    kt_buf_line(b, "float mx = sM[r];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = lane; j < BKV; j += 32)");
    kt_buf_line(b, "    mx = kt_max(mx, sP[r * PS + j]);");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int w = 16; w > 0; w >>= 1)");
    kt_buf_line(b, "    mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, w));");
    kt_buf_line(b, "const float base = mx == KT_NEG_INF ? 0.0f : mx; /* all masked: p = 0 */");
    kt_buf_line(b, "float sum = 0.0f;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = lane; j < BKV; j += 32) {");
    kt_buf_line(b, "    const float p = %s(sP[r * PS + j] - base);", ex);
    kt_buf_line(b, "    sP[r * PS + j] = p;");
    kt_buf_line(b, "    sum += p;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "sum = kt_warp_sum(sum);");
    kt_buf_line(b, "if (lane == 0) {");
    kt_buf_line(b, "    const float alpha = %s(sM[r] - base);", ex);
    kt_buf_line(b, "    sA[r] = alpha;");
    kt_buf_line(b, "    sL[r] = sL[r] * alpha + sum;");
    kt_buf_line(b, "    sM[r] = mx;");
    kt_buf_line(b, "}");
    attn_emit_close(b, 1);
}
