/* gemm family: shared-memory layouts and the cp.async tile loaders (ops/gemm/gemm.h lists the
 * files). */
#include "gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gemm_emit_slot_fn(const gemm_emit *e, int k)
{
    const gemm_cfg *c = e->c;
    const gemm_operand *o = &c->op[k];
    kt_buf *b = e->b;
    char X = k ? 'b' : 'a';
    const char *rn = o->row_is_k ? "k" : (k ? "n" : "m");
    const char *cn = o->row_is_k ? (k ? "n" : "m") : "k";
    if (c->smem == SMEM_PAD) {
        kt_buf_line(b,
                    "/* %c tile in shared memory: [%d %s][%d %s], rows padded by %d elements (%d "
                    "bytes) against bank conflicts. */",
                    k ? 'B' : 'A', o->R, rn, o->C, cn, o->pad, o->pad * c->esize);
        kt_buf_line(b, "__device__ __forceinline__ int ktg_%c_slot(int r, int c)", X);
        kt_buf_line(b, "{");
        kt_buf_line(b, "    return r * %d + c;", o->stride);
        kt_buf_line(b, "}");
        return;
    }
    int e16 = 16 / c->esize, cpr = o->C / e16, rpl = cpr >= 8 ? 1 : 8 / cpr;
    char rpl_s[32];
    snprintf(rpl_s, sizeof(rpl_s), rpl == 1 ? "r" : "(r / %d)", rpl);
    kt_buf_line(b,
                "/* %c tile in shared memory: [%d %s][%d %s], 16-byte chunk q = r * %d + c / %d "
                "XOR-swizzled with",
                k ? 'B' : 'A', o->R, rn, o->C, cn, cpr, e16);
    kt_buf_line(b,
                " * %s %% 8, so 8 consecutive rows at one column hit 8 different bank groups. */",
                rpl_s);
    kt_buf_line(b, "__device__ __forceinline__ int ktg_%c_slot(int r, int c)", X);
    kt_buf_line(b, "{");
    kt_buf_printf(b, "    return ((r * %d + (c >> %d)) ^ (", cpr, gemm_ilog2(e16));
    if (rpl == 1)
        kt_buf_printf(b, "r & 7");
    else
        kt_buf_printf(b, "(r >> %d) & 7", gemm_ilog2(rpl));
    kt_buf_line(b, ")) * %d + (c & %d);", e16, e16 - 1);
    kt_buf_line(b, "}");
}

void gemm_emit_loader(const gemm_emit *e, int k)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    const gemm_operand *o = &c->op[k];
    kt_buf *b = e->b;
    char X = k ? 'b' : 'a';
    const char *rdim = o->row_is_k ? "K" : (k ? "N" : "M");
    const char *cdim = o->row_is_k ? (k ? "N" : "M") : "K";
    const char *sty = ops_emit_ctype(c->sdt), *gty = ops_emit_ctype(p->src_dt[k]);
    int chunks = o->R * o->C / o->ve, cpr = o->C / o->ve;
    bool rowchk = o->rows % o->R != 0, colchk = o->cols % o->C != 0;
    bool guard = chunks % c->threads != 0;

    kt_buf_printf(b, "/* Loads the %c tile at (r0, c0) of the [%s][%s] matrix g: ", k ? 'B' : 'A',
                  rdim, cdim);
    if (o->vb)
        kt_buf_printf(b, "%d-byte cp.async copies", o->vb);
    else
        kt_buf_printf(b, "%d-element loads through registers%s", o->ve,
                      p->cast[k] >= 0 && !gemm_cast_is_identity(p, k) ? " (the prologue cast)"
                      : p->src_dt[k] != c->sdt ? " (converted to the math type)"
                                               : " (rows are not 4-byte aligned)");
    kt_buf_line(b, ",");
    kt_buf_line(b, " * %d per thread; elements past the matrix are zero-filled. */", o->iters);
    kt_buf_line(b,
                "__device__ __forceinline__ void ktg_load_%c(%s *s, const %s *__restrict__ g, int "
                "r0, int c0)",
                X, sty, gty);
    kt_buf_line(b, "{");
    b->indent = 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %d; i++) {", o->iters);
    b->indent = 8;
    if (c->threads % cpr == 0) {
        /* Each pass covers THREADS / cpr whole rows: the row advances by a constant, so the
         * addresses of all passes derive from one base. */
        if (guard) {
            kt_buf_line(b, "if (threadIdx.x + i * THREADS < %d) {", chunks);
            b->indent += 4;
        }
        kt_buf_line(b, "const int r = threadIdx.x / %d + i * %d, c = threadIdx.x %% %d * %d;", cpr,
                    c->threads / cpr, cpr, o->ve);
    } else {
        kt_buf_line(b, "const int q = threadIdx.x + i * THREADS;");
        if (guard) {
            kt_buf_line(b, "if (q < %d) {", chunks);
            b->indent += 4;
        }
        kt_buf_line(b, "const int r = q / %d, c = q %% %d * %d;", cpr, cpr, o->ve);
    }
    kt_buf_line(b, "const int gr = r0 + r, gc = c0 + c;");
    if (rowchk && colchk)
        kt_buf_line(b, "const bool ok = gr < %s && gc < %s;", rdim, cdim);
    else if (rowchk)
        kt_buf_line(b, "const bool ok = gr < %s;", rdim);
    else if (colchk)
        kt_buf_line(b, "const bool ok = gc < %s;", cdim);
    else if (!o->vb)
        kt_buf_line(b, "const bool ok = true; /* %s and %s are multiples of the tile */", rdim,
                    cdim);
    if (o->vb && !rowchk && !colchk) {
        kt_buf_line(b, "kt_cp_async%d(s + ktg_%c_slot(r, c), g + (idx_t)gr * %s + gc, %d);", o->vb,
                    X, cdim, o->vb);
    } else if (o->vb) {
        kt_buf_line(b, "/* out of bounds: a 0-byte copy (zero fill) from a valid address */");
        kt_buf_line(b,
                    "kt_cp_async%d(s + ktg_%c_slot(r, c), ok ? g + (idx_t)gr * %s + gc : g, ok ? "
                    "%d : 0);",
                    o->vb, X, cdim, o->vb);
    } else if (o->ve == 1) {
        kt_buf v = {0};
        char src[96];
        snprintf(src, sizeof(src), "g[(idx_t)gr * %s + gc]", cdim);
        gemm_emit_load_value(e, k, src, &v);
        kt_buf_line(b, "s[ktg_%c_slot(r, c)] = ok ? %s : (%s)0;", X, v.data ? v.data : "", sty);
        kt_buf_free(&v);
    } else {
        bool g32 = p->src_dt[k] == OPS_DT_F32;
        if (g32)
            kt_buf_line(b,
                        "const float4 v = ok ? *reinterpret_cast<const float4 *>(g + (idx_t)gr * "
                        "%s + gc) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);",
                        cdim);
        else
            kt_buf_line(b,
                        "const uint2 v = ok ? *reinterpret_cast<const uint2 *>(g + (idx_t)gr * %s "
                        "+ gc) : make_uint2(0u, 0u);",
                        cdim);
        static const char *const f32_parts[4] = {"v.x", "v.y", "v.z", "v.w"};
        static const char *const h_parts[4] = {"v.x & 0xffffu", "v.x >> 16", "v.y & 0xffffu",
                                               "v.y >> 16"};
        for (int i = 0; i < 4; i++) {
            char raw[64];
            if (g32)
                snprintf(raw, sizeof(raw), "%s", f32_parts[i]);
            else
                snprintf(raw, sizeof(raw), "(%s)(%s)", gty, h_parts[i]);
            kt_buf v = {0};
            gemm_emit_load_value(e, k, raw, &v);
            kt_buf_line(b, "const %s x%d = %s;", sty, i, v.data ? v.data : "");
            kt_buf_free(&v);
        }
        if (c->sdt == OPS_DT_F32)
            kt_buf_line(b,
                        "*reinterpret_cast<float4 *>(s + ktg_%c_slot(r, c)) = make_float4(x0, "
                        "x1, x2, x3);",
                        X);
        else
            kt_buf_line(b,
                        "*reinterpret_cast<uint2 *>(s + ktg_%c_slot(r, c)) = make_uint2(x0 | "
                        "(unsigned)x1 << 16, x2 | (unsigned)x3 << 16);",
                        X);
    }
    if (guard) {
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
    b->indent = 4;
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_line(b, "}");
}

/* Arguments (r0, c0) of the A or B loader for block origin (m0, n0) and k offset k0. */
static void loader_origin(const gemm_cfg *c, int k, const char **r0, const char **c0)
{
    const char *mn = k ? "n0" : "m0";
    *r0 = c->op[k].row_is_k ? "k0" : mn;
    *c0 = c->op[k].row_is_k ? mn : "k0";
}

void gemm_emit_load_tiles(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    const char *sty = ops_emit_ctype(c->sdt);
    const char *ra, *ca, *rb, *cb;
    loader_origin(c, 0, &ra, &ca);
    loader_origin(c, 1, &rb, &cb);
    kt_buf_line(
        e->b,
        "/* Starts the loads of the A and B tiles of k offset k0 into one pipeline stage. */");
    kt_buf_line(e->b,
                "__device__ __forceinline__ void ktg_load_tiles(%s *as, %s *bs, const %s "
                "*__restrict__ ag, const %s *__restrict__ bg, int m0, int n0, int k0)",
                sty, sty, ops_emit_ctype(p->src_dt[0]), ops_emit_ctype(p->src_dt[1]));
    kt_buf_line(e->b, "{");
    kt_buf_line(e->b, "    ktg_load_a(as, ag, %s, %s);", ra, ca);
    kt_buf_line(e->b, "    ktg_load_b(bs, bg, %s, %s);", rb, cb);
    kt_buf_line(e->b, "}");
}
