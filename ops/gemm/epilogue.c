/* gemm family: the fused epilogue and its stores (ops/gemm/gemm.h lists the files). */
#include "gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- emitted helpers: the epilogue ---- */

static void value_name(const gemm_problem *p, int node, char *buf, size_t len)
{
    if (node == p->mm || node == p->mm2) {
        snprintf(buf, len, node == p->mm ? "acc" : "acc2");
        return;
    }
    for (int i = 0; i < p->n_epi; i++)
        if (p->epi[i] == node)
            snprintf(buf, len, "v%d", i);
}

/* The store helpers' early return for an element past the matrix edge, where tiles overhang. */
static void emit_edge_return(kt_buf *b, bool mchk, bool nchk)
{
    if (!mchk && !nchk)
        return;
    kt_buf_line(b, "    if (%s%s%s)", mchk ? "m >= M" : "", mchk && nchk ? " || " : "",
                nchk ? "n >= N" : "");
    kt_buf_line(b, "        return;");
}

int gemm_emit_epilogue(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    const ops_graph *g = p->g;
    kt_buf *b = e->b;
    const ops_tensor *mo = &g->tensors[g->nodes[p->mm].out];
    char cm[OPS_EMIT_COMMENT_MAX];
    kt_buf_printf(
        b, "\n/* The fused epilogue of output element (bz, m, n) in fp32; acc is %s[bz, m, n]",
        ops_emit_comment_text(mo->name, cm, sizeof(cm)));
    bool dual = p->nb == 2;
    if (dual)
        kt_buf_printf(b, ", acc2 %s[bz, m, n]",
                      ops_emit_comment_text(g->tensors[g->nodes[p->mm2].out].name, cm, sizeof(cm)));
    kt_buf_printf(b, ". */\n__device__ __forceinline__ float ktg_epilogue(");
    gemm_emit_epi_list(e, true);
    kt_buf_line(b, "int bz, int m, int n, float acc%s)", dual ? ", float acc2" : "");
    kt_buf_line(b, "{");
    b->indent = 4;
    bool need_b = false;
    for (int i = 0; i < p->grp->n_in; i++) {
        int t = p->grp->in[i];
        if (gemm_epi_reads(p, t))
            need_b |= gemm_refs_batch(&g->tensors[t].shape, &p->oshape, p->obatch.rank);
    }
    if (need_b)
        gemm_emit_batch_indices(e);
    const char *idx[OPS_MAX_RANK];
    int orank = p->oshape.rank;
    for (int i = 0; i < orank - 2; i++)
        idx[i] = gemm_bnames[i];
    idx[orank - 2] = "m";
    idx[orank - 1] = "n";
    int rc = 0;
    for (int i = 0; i < p->n_epi && rc == 0; i++) {
        const ops_node *n = &g->nodes[p->epi[i]];
        kt_buf opnd[OPS_MAX_OPERANDS] = {{0}};
        const char *ops[OPS_MAX_OPERANDS] = {0};
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k].tensor;
            if (t == OPS_SCALAR) {
                ops[k] = "";
                continue;
            }
            int prod = g->tensors[t].producer;
            if (gemm_in_group(p->grp, prod)) {
                char v[16];
                value_name(p, prod, v, sizeof(v));
                kt_buf_printf(&opnd[k], "%s", v);
            } else {
                kt_buf at = {0};
                kt_buf_printf(&at, "%s[", gemm_in_name(e, t));
                if (c->idx64)
                    kt_buf_printf(&at, "(idx_t)");
                ops_emit_bcast_offset(&at, &g->tensors[t].shape, &p->oshape, idx);
                kt_buf_printf(&at, "]");
                ops_emit_to_float(&opnd[k], g->tensors[t].dtype, at.data ? at.data : "");
                kt_buf_free(&at);
            }
            ops[k] = opnd[k].data ? opnd[k].data : "";
        }
        gemm_emit_indent(b);
        kt_buf_printf(b, "const float v%d = ", i);
        rc = ops_emit_elementwise(b, n, ops);
        kt_buf_printf(b, "; /* %s = %s */\n", /* ends the line begun above */
                      ops_emit_comment_text(g->tensors[n->out].name, cm, sizeof(cm)),
                      ops_op_info_get(n->op)->name);
        for (int k = 0; k < n->n_in; k++)
            kt_buf_free(&opnd[k]);
    }
    char res[16];
    value_name(p, g->tensors[p->out].producer, res, sizeof(res));
    kt_buf_line(b, "return %s;", res);
    b->indent = 0;
    kt_buf_line(b, "}");

    /* Stores of one element and of an (n, n + 1) pair, masked at the matrix edges. */
    ops_dtype odt = g->tensors[p->out].dtype;
    const char *oty = ops_emit_ctype(odt);
    /* (a 2-block cluster of the 16-bit wgmma kernel over an odd count of tile rows has a last
     * tile wholly past M, whatever M % BM) */
    bool mchk = p->M % c->bm != 0 || (c->wg16 && c->mcast == 2 && c->tiles_m % 2),
         nchk = p->N % c->bn != 0;
    kt_buf_printf(b, "__device__ __forceinline__ void ktg_store(");
    gemm_emit_epi_list(e, true);
    kt_buf_line(b, "%s *__restrict__ out, int bz, int m, int n, float acc%s)", oty,
                dual ? ", float acc2" : "");
    kt_buf_line(b, "{");
    emit_edge_return(b, mchk, nchk);
    kt_buf_printf(b, "    out[((idx_t)bz * M + m) * N + n] = ");
    {
        kt_buf call = {0};
        kt_buf *save = e->b;
        gemm_emit tmp = *e;
        tmp.b = &call;
        kt_buf_printf(&call, "ktg_epilogue(");
        gemm_emit_epi_list(&tmp, false);
        kt_buf_printf(&call, "bz, m, n, acc%s)", dual ? ", acc2" : "");
        ops_emit_from_float(save, odt, call.data ? call.data : "");
        kt_buf_free(&call);
    }
    kt_buf_line(b, ";");
    kt_buf_line(b, "}");
    kt_buf_printf(b, "/* Elements (m, n) and (m, n + 1); n is even. */\n"
                     "__device__ __forceinline__ void ktg_store2(");
    gemm_emit_epi_list(e, true);
    kt_buf_line(b, "%s *__restrict__ out, int bz, int m, int n, float acc0, float acc1%s)", oty,
                dual ? ", float acc2_0, float acc2_1" : "");
    kt_buf_line(b, "{");
    if (p->N % 2 == 0) {
        emit_edge_return(b, mchk, nchk);
        kt_buf_printf(b, "    const float y0 = ktg_epilogue(");
        gemm_emit_epi_list(e, false);
        kt_buf_printf(b, "bz, m, n, acc0%s);\n    const float y1 = ktg_epilogue(",
                      dual ? ", acc2_0" : "");
        gemm_emit_epi_list(e, false);
        kt_buf_line(b, "bz, m, n + 1, acc1%s);", dual ? ", acc2_1" : "");
        kt_buf_line(b, "    /* N is even: the pair is contiguous and %d-byte aligned */",
                    2 * (int)ops_dtype_size(odt));
        if (odt == OPS_DT_F32) {
            kt_buf_line(b, "    *reinterpret_cast<float2 *>(out + ((idx_t)bz * M + m) * N + n) = "
                           "make_float2(y0, y1);");
        } else {
            kt_buf lo = {0}, hi = {0};
            ops_emit_from_float(&lo, odt, "y0");
            ops_emit_from_float(&hi, odt, "y1");
            kt_buf_line(b,
                        "    *reinterpret_cast<unsigned *>(out + ((idx_t)bz * M + m) * N + n) = %s "
                        "| (unsigned)%s << 16;",
                        lo.data ? lo.data : "", hi.data ? hi.data : "");
            kt_buf_free(&lo);
            kt_buf_free(&hi);
        }
    } else {
        kt_buf_printf(b, "    /* N is odd: two masked scalar stores */\n    ktg_store(");
        gemm_emit_epi_list(e, false);
        kt_buf_printf(b, "out, bz, m, n, acc0%s);\n    if (n + 1 < N)\n        ktg_store(",
                      dual ? ", acc2_0" : "");
        gemm_emit_epi_list(e, false);
        kt_buf_line(b, "out, bz, m, n + 1, acc1%s);", dual ? ", acc2_1" : "");
    }
    kt_buf_line(b, "}");
    if (c->parallel) {
        kt_buf_line(b, "/* Split-K partial sums: fp32 slice `slice` of the workspace, "
                       "[SPLITK][BATCH][M][N]. */");
        kt_buf_line(b, "__device__ __forceinline__ void ktg_partial(float *ws, int slice, int bz, "
                       "int m, int n, float acc)");
        kt_buf_line(b, "{");
        emit_edge_return(b, mchk, nchk);
        kt_buf_line(b, "    ws[(((idx_t)slice * BATCH + bz) * M + m) * N + n] = acc;");
        kt_buf_line(b, "}");
        kt_buf_line(b, "__device__ __forceinline__ void ktg_partial2(float *ws, int slice, int bz, "
                       "int m, int n, float acc0, float acc1)");
        kt_buf_line(b, "{");
        if (p->N % 2 == 0) {
            emit_edge_return(b, mchk, nchk);
            kt_buf_line(b, "    *reinterpret_cast<float2 *>(ws + (((idx_t)slice * BATCH + bz) * M "
                           "+ m) * N + n) = make_float2(acc0, acc1);");
        } else {
            kt_buf_line(b, "    ktg_partial(ws, slice, bz, m, n, acc0);");
            kt_buf_line(b, "    if (n + 1 < N)");
            kt_buf_line(b, "        ktg_partial(ws, slice, bz, m, n + 1, acc1);");
        }
        kt_buf_line(b, "}");
    }
    return rc;
}
