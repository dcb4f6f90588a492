/* gemm family: one pipeline stage on FFMA (ops/gemm/gemm.h lists the files). */
#include "gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gemm_emit_ffma_stage(const gemm_emit *e)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    const char *sty = ops_emit_ctype(c->sdt);
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* One BK-deep stage on FFMA: the thread at (am, bn) of its warp tile owns "
                   "rows am + i * LY and");
    kt_buf_line(b, " * columns bn + j * LX (strided, so a warp's shared loads hit distinct banks "
                   "or broadcast). */");
    kt_buf_line(b,
                "__device__ __forceinline__ void ktg_stage(const %s *as, const %s *bs, int am, int "
                "bn, float (&acc)[TM][TN])",
                sty, sty);
    kt_buf_line(b, "{");
    b->indent = 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int k = 0; k < BK; k++) {");
    b->indent = 8;
    kt_buf_line(b, "float a[TM], b[TN];");
    for (int k = 0; k < 2; k++) {
        char X = k ? 'b' : 'a';
        const char *v = k ? "bn + j * LX" : "am + i * LY";
        char idx[96], el[128];
        if (c->op[k].row_is_k)
            snprintf(idx, sizeof(idx), "%cs[ktg_%c_slot(k, %s)]", X, X, v);
        else
            snprintf(idx, sizeof(idx), "%cs[ktg_%c_slot(%s, k)]", X, X, v);
        kt_buf f = {0};
        ops_emit_to_float(&f, c->sdt, idx);
        snprintf(el, sizeof(el), "%s", f.data ? f.data : "");
        kt_buf_free(&f);
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int %c = 0; %c < %s; %c++)", k ? 'j' : 'i', k ? 'j' : 'i',
                    k ? "TN" : "TM", k ? 'j' : 'i');
        kt_buf_line(b, "    %c[%c] = %s;", X, k ? 'j' : 'i', el);
    }
    ops_emit_fma_tile(b, "i", "TM", "j", "TN", "a[i]", "b[j]");
    b->indent = 4;
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_line(b, "}");
}
