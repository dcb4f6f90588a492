/* row family: the reductions: accumulators (sum, max, min, online max-sum, Welford), their update
 * and merge, the warp shuffle tree and the shared-memory combine across a row's threads
 * (ops/row/row.h lists the files). */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int row_level_accs(const rw_info *in, int level, rw_acc *accs)
{
    int n = 0;
    for (int u = 0; u < in->n_slots; u++) {
        const ops_node *nd = row_slot_node(in, u);
        if (!nd || !row_is_reduce(nd->op) || in->level[u] != level || in->kind[u] == RK_TAIL)
            continue;
        accs[n++] = (rw_acc){.slot = u, .kind = in->kind[u], .tail = in->pair[u]};
    }
    return n;
}

void row_acc_decl(kt_buf *b, const rw_acc *a)
{
    int u = a->slot;
    switch (a->kind) {
    case RK_SUM:
        kt_buf_line(b, "float a%d = 0.0f;", u);
        break;
    case RK_MAX:
        kt_buf_line(b, "float a%d = " NEG_INF ";", u);
        break;
    case RK_MIN:
        kt_buf_line(b, "float a%d = " POS_INF ";", u);
        break;
    case RK_ONLINE:
        kt_buf_line(b, "float a%d = " NEG_INF ", a%d_s = 0.0f; /* running max, sum */", u, u);
        break;
    case RK_WELFORD:
        kt_buf_line(b, "float a%d_n = 0.0f, a%d = 0.0f, a%d_m2 = 0.0f; /* Welford */", u, u, u);
        break;
    case RK_TAIL:
        break;
    }
}

/* Folds value `v` into accumulator a. */
void row_acc_update(kt_buf *b, const rw_acc *a, const char *v)
{
    int u = a->slot;
    switch (a->kind) {
    case RK_SUM:
        kt_buf_line(b, "a%d += %s;", u, v);
        break;
    case RK_MAX:
        kt_buf_line(b, "a%d = kt_max(a%d, %s);", u, u, v);
        break;
    case RK_MIN:
        kt_buf_line(b, "a%d = kt_min(a%d, %s);", u, u, v);
        break;
    case RK_ONLINE:
        kt_buf_line(b, "{");
        b->indent += 4;
        kt_buf_line(b, "const float mn = kt_max(a%d, %s);", u, v);
        kt_buf_line(b, "a%d_s = a%d_s * (a%d == mn ? 1.0f : expf(a%d - mn)) + expf(%s - mn);", u, u,
                    u, u, v);
        kt_buf_line(b, "a%d = mn;", u);
        b->indent -= 4;
        kt_buf_line(b, "}");
        break;
    case RK_WELFORD:
        kt_buf_line(b, "{");
        b->indent += 4;
        kt_buf_line(b, "a%d_n += 1.0f;", u);
        kt_buf_line(b, "const float d = %s - a%d;", v, u);
        kt_buf_line(b, "a%d += d / a%d_n;", u, u);
        kt_buf_line(b, "a%d_m2 += d * (%s - a%d);", u, v, u);
        b->indent -= 4;
        kt_buf_line(b, "}");
        break;
    case RK_TAIL:
        break;
    }
}

/* Component names of accumulator a with a prefix/suffix form: comp(a, i, "o_") etc. */
void row_acc_comp(char *out, size_t len, const rw_acc *a, int i, const char *prefix)
{
    static const char *const online[] = {"", "_s"};
    static const char *const welford[] = {"_n", "", "_m2"};
    const char *suf = a->kind == RK_ONLINE ? online[i] : a->kind == RK_WELFORD ? welford[i] : "";
    snprintf(out, len, "%sa%d%s", prefix, a->slot, suf);
}

/* Merges the components named with prefix `other` into a (symmetric: merge(x, y) and
 * merge(y, x) give bitwise equal results, so every lane of a shuffle tree agrees). */
void row_acc_merge(kt_buf *b, const rw_acc *a, const char *other)
{
    int u = a->slot;
    switch (a->kind) {
    case RK_SUM:
        kt_buf_line(b, "a%d = a%d + %sa%d;", u, u, other, u);
        break;
    case RK_MAX:
        kt_buf_line(b, "a%d = kt_max(a%d, %sa%d);", u, u, other, u);
        break;
    case RK_MIN:
        kt_buf_line(b, "a%d = kt_min(a%d, %sa%d);", u, u, other, u);
        break;
    case RK_ONLINE:
        kt_buf_line(b, "{");
        b->indent += 4;
        kt_buf_line(b, "const float mn = kt_max(a%d, %sa%d);", u, other, u);
        kt_buf_line(b, "a%d_s = a%d_s * (a%d == mn ? 1.0f : expf(a%d - mn)) +", u, u, u, u);
        kt_buf_line(b, "        %sa%d_s * (%sa%d == mn ? 1.0f : expf(%sa%d - mn));", other, u,
                    other, u, other, u);
        kt_buf_line(b, "a%d = mn;", u);
        b->indent -= 4;
        kt_buf_line(b, "}");
        break;
    case RK_WELFORD:
        kt_buf_line(b, "{");
        b->indent += 4;
        kt_buf_line(b, "const float n = a%d_n + %sa%d_n;", u, other, u);
        kt_buf_line(b, "const float d = %sa%d - a%d;", other, u, u);
        kt_buf_line(b, "const float mean = n > 0.0f ? (a%d_n * a%d + %sa%d_n * %sa%d) / n : 0.0f;",
                    u, u, other, u, other, u);
        kt_buf_line(b,
                    "a%d_m2 = (a%d_m2 + %sa%d_m2) + (n > 0.0f ? d * d * (a%d_n * %sa%d_n / n) : "
                    "0.0f);",
                    u, u, other, u, u, other, u);
        kt_buf_line(b, "a%d = mean;", u);
        kt_buf_line(b, "a%d_n = n;", u);
        b->indent -= 4;
        kt_buf_line(b, "}");
        break;
    case RK_TAIL:
        break;
    }
}

/* Where partial c0 (a component of an accumulator) of part w of a row lies in shared memory:
 * part 0's (first) and part w's, the loop variable; into out. */
typedef void (*rw_part_ref)(char *out, size_t len, int c0, bool first, const rw_plan *p);

/* Every thread folds the n_parts partials of its row in part order (so all hold bitwise-equal
 * results): its accumulators take part 0's, then merge parts 1, 2, ... */
static void emit_fold_partials(kt_buf *b, const rw_plan *p, const rw_acc *accs, int n_acc,
                               int n_parts, rw_part_ref ref)
{
    char at[64];
    int c0 = 0;
    for (int i = 0; i < n_acc; i++)
        for (int c = 0; c < row_kind_components(accs[i].kind); c++, c0++) {
            char own[32];
            row_acc_comp(own, sizeof(own), &accs[i], c, "");
            ref(at, sizeof(at), c0, true, p);
            kt_buf_line(b, "%s = %s;", own, at);
        }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int w = 1; w < %d; w++) {", n_parts);
    b->indent += 4;
    c0 = 0;
    for (int i = 0; i < n_acc; i++)
        for (int c = 0; c < row_kind_components(accs[i].kind); c++, c0++) {
            char oth[32];
            row_acc_comp(oth, sizeof(oth), &accs[i], c, "o_");
            ref(at, sizeof(at), c0, false, p);
            kt_buf_line(b, "const float %s = %s;", oth, at);
        }
    for (int i = 0; i < n_acc; i++)
        row_acc_merge(b, &accs[i], "o_");
    b->indent -= 4;
    kt_buf_line(b, "}");
}

/* lane_per_row's partials: kt_red[component][t][g] */
static void lane_part_ref(char *out, size_t len, int c0, bool first, const rw_plan *p)
{
    if (first)
        snprintf(out, len, "kt_red[%d + g]", c0 * p->tpr * p->G);
    else
        snprintf(out, len, "kt_red[(%d + w) * %d + g]", c0 * p->tpr, p->G);
}

/* The warps' partials of a row above a warp: red[warp][component] */
static void warp_part_ref(char *out, size_t len, int c0, bool first, const rw_plan *p)
{
    if (first)
        snprintf(out, len, "red[%d]", c0);
    else
        snprintf(out, len, "red[w * %d + %d]", p->red_floats, c0);
}

/* lane_per_row: the tpr partials of row g (thread t of the row is warp t's lane g) meet in
 * kt_red laid out [component][t][g], so a warp's writes and reads hit 32 consecutive words;
 * every thread of the row folds them in order t = 0, 1, ..., so all hold bitwise-equal results. */
static void emit_lane_reduce(kt_buf *b, const rw_plan *p, const rw_acc *accs, int n_acc)
{
    int G = p->G, np = p->tpr;
    int c0 = 0;
    for (int i = 0; i < n_acc; i++)
        for (int c = 0; c < row_kind_components(accs[i].kind); c++, c0++) {
            char own[32];
            row_acc_comp(own, sizeof(own), &accs[i], c, "");
            kt_buf_line(b, "kt_red[(%d + t) * %d + g] = %s;", c0 * np, G, own);
        }
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "{");
    b->indent += 4;
    emit_fold_partials(b, p, accs, n_acc, np, lane_part_ref);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads(); /* kt_red is reused by the next reduction */");
}

/* Combines the accumulators across the tpr threads of a row: shuffles within a warp (or a
 * sub-warp group), then, above a warp, through kt_red in shared memory. */
void row_emit_group_reduce(rw_gen *s, kt_buf *b, const rw_acc *accs, int n_acc)
{
    const rw_plan *p = s->p;
    if (row_lanes(p)) {
        emit_lane_reduce(b, p, accs, n_acc);
        return;
    }
    int width = p->tpr < 32 ? p->tpr : 32;
    if (width == 32 && n_acc == 1 && accs[0].kind == RK_SUM) {
        /* one sum over whole warps: the device library's butterfly (ktune/reduce.cuh), the
         * same order of additions as the loop below */
        kt_buf_line(b, "a%d = kt_warp_sum(a%d);", accs[0].slot, accs[0].slot);
        s->use_warp_sum = true;
    } else if (width > 1) {
        /* several accumulators, or components merged together (online max-sum, Welford), or
         * the prelude's NaN-propagating kt_max / kt_min: one shuffle tree for all of them */
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int off = %d; off > 0; off >>= 1) {", width / 2);
        b->indent += 4;
        for (int i = 0; i < n_acc; i++)
            for (int c = 0; c < row_kind_components(accs[i].kind); c++) {
                char own[32], oth[32];
                row_acc_comp(own, sizeof(own), &accs[i], c, "");
                row_acc_comp(oth, sizeof(oth), &accs[i], c, "o_");
                kt_buf_line(b, "const float %s = __shfl_xor_sync(0xffffffffu, %s, off);", oth, own);
            }
        for (int i = 0; i < n_acc; i++)
            row_acc_merge(b, &accs[i], "o_");
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
    if (p->tpr <= 32)
        return;
    int nw = p->tpr / 32;
    int nc = p->red_floats;
    kt_buf_line(b, "if (lane == 0) {");
    b->indent += 4;
    int c0 = 0;
    for (int i = 0; i < n_acc; i++)
        for (int c = 0; c < row_kind_components(accs[i].kind); c++, c0++) {
            char own[32];
            row_acc_comp(own, sizeof(own), &accs[i], c, "");
            if (p->G > 1)
                kt_buf_line(b, "kt_red[(g * %d + warp) * %d + %d] = %s;", nw, nc, c0, own);
            else
                kt_buf_line(b, "kt_red[warp * %d + %d] = %s;", nc, c0, own);
        }
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads();");
    /* Every thread folds the warps' partials in the same order. */
    kt_buf_line(b, "{");
    b->indent += 4;
    if (p->G > 1)
        kt_buf_line(b, "const float *red = kt_red + g * %d;", nw * nc);
    else
        kt_buf_line(b, "const float *red = kt_red;");
    emit_fold_partials(b, p, accs, n_acc, nw, warp_part_ref);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads(); /* kt_red is reused by the next reduction */");
}
