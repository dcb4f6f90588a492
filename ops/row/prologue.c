/* row family: the matmul prologue: each X element's K-long dot product (FFMA), and its call
 * (ops/row/row.h lists the files). */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The call computing matmul prologue u's element at column COL of this row. */
void row_emit_mm_call(const rw_info *in, kt_buf *b, int u, const char *col)
{
    const ops_node *n = row_slot_node(in, u);
    char pa[64], pb[64];
    row_param_of(in, row_slot_of(in, n->in[0].tensor), pa, sizeof(pa));
    row_param_of(in, row_slot_of(in, n->in[1].tensor), pb, sizeof(pb));
    kt_buf_printf(b, "kt_mm%d(%s, %s, row, %s)", u, pa, pb, col);
}

/* The dot-product function of each matmul prologue: element (row, col) of X, the K products
 * summed by FFMA into four partial sums in a fixed order (deterministic, fp32 throughout). */
void row_emit_mm_functions(const rw_info *in, kt_buf *b)
{
    const ops_graph *g = in->g;
    for (int u = 0; u < in->n_slots; u++) {
        if (!in->mm[u])
            continue;
        const ops_node *n = row_slot_node(in, u);
        const ops_tensor *ta = &g->tensors[n->in[0].tensor], *tb = &g->tensors[n->in[1].tensor];
        int64_t M = in->X.d[0].size, N = in->X.d[1].size;
        int64_t K = ta->shape.d[n->attrs.transpose_a ? 0 : 1].size;
        /* element strides of A along (row, k) and of B along (k, col) */
        int64_t ar = n->attrs.transpose_a ? 1 : K, ak = n->attrs.transpose_a ? M : 1;
        int64_t bk = n->attrs.transpose_b ? 1 : N, bc = n->attrs.transpose_b ? K : 1;
        char cx[OPS_EMIT_COMMENT_MAX], ca[OPS_EMIT_COMMENT_MAX], cb[OPS_EMIT_COMMENT_MAX];
        kt_buf_line(b,
                    "/* %s = matmul(%s, %s): one element of the row, %lld products in four "
                    "partial sums */",
                    ops_emit_comment_text(g->tensors[in->tensor[u]].name, cx, sizeof(cx)),
                    ops_emit_comment_text(ta->name, ca, sizeof(ca)),
                    ops_emit_comment_text(tb->name, cb, sizeof(cb)), (long long)K);
        kt_buf_line(b,
                    "__device__ __forceinline__ float kt_mm%d(const %s *__restrict__ a, "
                    "const %s *__restrict__ bm, long long row, long long col)",
                    u, ops_emit_ctype(ta->dtype), ops_emit_ctype(tb->dtype));
        /* Four partial sums (k mod 4, each in order, added in a fixed order) and 16 steps
         * unrolled: the operands come from L2, so loads must be in flight together. */
        int64_t K4 = K / 4 * 4;
        kt_buf_line(b, "{");
        kt_buf_line(b, "    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};");
        kt_buf_line(b, "    #pragma unroll 4");
        kt_buf_line(b, "    for (int k0 = 0; k0 < %lld; k0 += 4)", (long long)K4);
        kt_buf_line(b, "        #pragma unroll");
        kt_buf_line(b, "        for (int i = 0; i < 4; i++) {");
        kt_buf_line(b, "            const int k = k0 + i;");
        kt_buf a_ld = {0}, b_ld = {0}, ae = {0}, be = {0};
        kt_buf_printf(&a_ld, "a[row * %lld + k * %lld]", (long long)ar, (long long)ak);
        kt_buf_printf(&b_ld, "bm[k * %lld + col * %lld]", (long long)bk, (long long)bc);
        ops_emit_to_float(&ae, ta->dtype, a_ld.data ? a_ld.data : "0");
        ops_emit_to_float(&be, tb->dtype, b_ld.data ? b_ld.data : "0");
        kt_buf_line(b, "            acc[i] = fmaf(%s, %s, acc[i]);", ae.data ? ae.data : "0",
                    be.data ? be.data : "0");
        kt_buf_line(b, "        }");
        if (K4 < K) {
            kt_buf_line(b, "    for (int k = %lld; k < %lld; k++) /* the last K %% 4 */",
                        (long long)K4, (long long)K);
            kt_buf_line(b, "        acc[k - %lld] = fmaf(%s, %s, acc[k - %lld]);", (long long)K4,
                        ae.data ? ae.data : "0", be.data ? be.data : "0", (long long)K4);
        }
        if (kt_buf_status(&a_ld) < 0 || kt_buf_status(&b_ld) < 0 || kt_buf_status(&ae) < 0 ||
            kt_buf_status(&be) < 0)
            b->oom = true;
        kt_buf_free(&a_ld);
        kt_buf_free(&b_ld);
        kt_buf_free(&ae);
        kt_buf_free(&be);
        kt_buf_line(b, "    return (acc[0] + acc[1]) + (acc[2] + acc[3]);");
        kt_buf_line(b, "}");
    }
}
