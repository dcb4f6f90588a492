/* gemv family: the FFMA kernels, vector and decode forms (ops/gemv/gemv.h lists the files). */
#include "gemv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The float expressions of element l of a vector load v of dtype dt (v.x, v.y, ... of a uintN). */
static void lane_expr(char *out, size_t len, ops_dtype dt, int vec, const char *v, int l)
{
    static const char *const f[] = {"x", "y", "z", "w"};
    char word[64], bits[96];
    if (ops_dtype_size(dt) == 4) {
        if (vec == 1)
            snprintf(word, sizeof(word), "%s", v);
        else
            snprintf(word, sizeof(word), "%s.%s", v, f[l]);
        snprintf(out, len, "__uint_as_float(%s)", word);
        return;
    }
    int words = vec / 2; /* 16-bit data: two elements per 32-bit word */
    if (vec == 1)
        snprintf(bits, sizeof(bits), "(unsigned short)%s", v);
    else if (words == 1)
        snprintf(bits, sizeof(bits), "(unsigned short)(%s %s)", v, l % 2 ? ">> 16" : "& 0xffffu");
    else
        snprintf(bits, sizeof(bits), "(unsigned short)(%s.%s %s)", v, f[l / 2],
                 l % 2 ? ">> 16" : "& 0xffffu");
    kt_buf t = {0};
    ops_emit_to_float(&t, dt, bits);
    snprintf(out, len, "%s", t.data ? t.data : bits);
    kt_buf_free(&t);
}

/* The unsigned type of one vector load of `bytes` bytes. */
static const char *load_type(int bytes)
{
    return bytes == 16  ? "uint4"
           : bytes == 8 ? "uint2"
           : bytes == 4 ? "unsigned"
                        : "unsigned short";
}

/* The FFMA kernels' start: the lane's rows (clamped), its sums at zero (R of them, or R x T in
 * the decode form), x as vectors, the evict-first policy of a streamed A. */
static void emit_ffma_setup(kt_buf *b, const gemv_info *in, const gemv_plan *p)
{
    const bool decode = in->decode;
    const char *at = load_type(p->vec * (int)ops_dtype_size(in->adt));
    const char *xt = load_type(p->vec * (int)ops_dtype_size(in->xdt));
    kt_buf_line(b, "const int lane = threadIdx.x %% TPR;");
    kt_buf_line(b, "const int m0 = (blockIdx.x * GROUPS + threadIdx.x / TPR) * R;");
    kt_buf_line(b, decode ? "float acc[R][T];" : "float acc[R];");
    kt_buf_line(b, "const %s *arow[R];", at);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    if (decode) {
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int t = 0; t < T; t++)");
        kt_buf_line(b, "        acc[r][t] = 0.0f;");
    } else {
        kt_buf_line(b, "    acc[r] = 0.0f;");
    }
    kt_buf_line(b, "    /* rows past M read row M - 1 (in bounds) and are never stored */");
    kt_buf_line(b, "    const int m = m0 + r < M ? m0 + r : M - 1;");
    kt_buf_line(b, "    arow[r] = (const %s *)(a + (long long)m * K);", at);
    kt_buf_line(b, "}");
    kt_buf_line(b, "const %s *xv = (const %s *)x;", xt, xt);
    if (p->load == LOAD_STREAM) {
        kt_buf_line(b, "/* A is read once: evict it first from L2 */");
        kt_buf_line(b, "const unsigned long long policy = kt_policy_evict_first();");
    }
}

/* aw: row r's VEC elements at vector c. prefetch: kt_ld_nc_pf (a 256-byte L2 prefetch); stream:
 * kt_ld_nc_stream (no L1 allocation, the evict-first policy, the prefetch). */
static void emit_a_load(kt_buf *b, const gemv_info *in, const gemv_plan *p)
{
    const char *at = load_type(p->vec * (int)ops_dtype_size(in->adt));
    if (p->load == LOAD_CACHED)
        kt_buf_line(b, "const %s aw = arow[r][c];", at);
    else if (p->load == LOAD_PREFETCH)
        kt_buf_line(b, "const %s aw = kt_ld_nc_pf(arow[r] + c);", at);
    else
        kt_buf_line(b, "const %s aw = kt_ld_nc_stream(arow[r] + c, policy);", at);
}

/* The FFMA kernels' end when a row's TPR lanes span several warps (TPR > 32): each warp's
 * butterfly sum into shared memory, then the row's first lane adds its WPR warps' sums in warp
 * order (deterministic) and applies the epilogue. With TPR > 32 rows is 1 (pruned otherwise). */
static void emit_cross_warp_sums(kt_buf *b, const gemv_info *in, const char *call)
{
    const char *tt = in->decode ? "T" : "1";
    kt_buf_line(b, "/* a row's lanes span TPR / 32 warps: each warp's butterfly sum, then the "
                   "row's first lane adds");
    kt_buf_line(b, " * them in warp order */");
    kt_buf_line(b, "__shared__ float part[THREADS / 32][%s];", tt);
    if (in->decode) {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int t = 0; t < T; t++) {");
        kt_buf_line(b, "    const float v = kt_warp_sum<32>(acc[0][t]);");
        kt_buf_line(b, "    if ((threadIdx.x & 31) == 0)");
        kt_buf_line(b, "        part[threadIdx.x >> 5][t] = v;");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "const float v = kt_warp_sum<32>(acc[0]);");
        kt_buf_line(b, "if ((threadIdx.x & 31) == 0)");
        kt_buf_line(b, "    part[threadIdx.x >> 5][0] = v;");
    }
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "if (lane != 0 || m0 >= M)");
    kt_buf_line(b, "    return;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int t = 0; t < %s; t++) {", tt);
    kt_buf_line(b, "    float sum = 0.0f;");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int w = 0; w < TPR / 32; w++)");
    kt_buf_line(b, "        sum += part[(threadIdx.x >> 5) + w][t];");
    if (in->decode)
        kt_buf_line(b, "    kt_gemv_store(sum, m0, t, %s);", call);
    else
        kt_buf_line(b, "    kt_gemv_store(sum, m0, %s);", call);
    kt_buf_line(b, "}");
}

/* The vector form's kernel (y = A x). */
void gemv_emit_ffma_vector(kt_buf *b, const gemv_info *in, const gemv_plan *p, const char *entry,
                           const char *params, const char *call)
{
    int abytes = p->vec * (int)ops_dtype_size(in->adt),
        xbytes = p->vec * (int)ops_dtype_size(in->xdt);
    kt_buf_line(b, "/* Lane groups of TPR lanes own R rows each; each step loads VEC elements of "
                   "x and of every row");
    kt_buf_line(b,
                " * per lane (%d-byte loads of A), accumulates in fp32; the row's lanes then "
                "reduce by shuffles. */",
                abytes);
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(THREADS, 1)");
    kt_buf_line(b, "%s(%s)", entry, params);
    kt_buf_line(b, "{");
    b->indent = 4;
    emit_ffma_setup(b, in, p);
    /* Every load of a row in flight at once when a lane's share is short (DRAM wants ~4 MiB in
     * flight across the GPU); deeper unrolling of long rows only costs registers. */
    int64_t lane_steps = (in->K / p->vec + p->tpr - 1) / p->tpr;
    kt_buf_line(b, "#pragma unroll %d", lane_steps <= 16 ? (int)lane_steps : 4);
    kt_buf_line(b, "for (int c = lane; c < K / VEC; c += TPR) {");
    b->indent = 8;
    kt_buf_line(b, "const %s xw = __ldg(xv + c);", load_type(xbytes));
    char ex[160], ea[160];
    kt_buf_line(b, "float xf[VEC];");
    for (int l = 0; l < p->vec; l++) {
        lane_expr(ex, sizeof(ex), in->xdt, p->vec, "xw", l);
        kt_buf_line(b, "xf[%d] = %s;", l, ex);
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    b->indent = 12;
    emit_a_load(b, in, p);
    for (int l = 0; l < p->vec; l++) {
        lane_expr(ea, sizeof(ea), in->adt, p->vec, "aw", l);
        kt_buf_line(b, "acc[r] = fmaf(%s, xf[%d], acc[r]);", ea, l);
    }
    b->indent = 8;
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "}");
    if (p->tpr > 32) {
        emit_cross_warp_sums(b, in, call);
    } else {
        kt_buf_line(b, "/* the TPR lanes of a row add up in a fixed butterfly order */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int r = 0; r < R; r++) {");
        kt_buf_line(b, "    acc[r] = kt_warp_sum<TPR>(acc[r]);");
        kt_buf_line(b, "    if (lane == 0 && m0 + r < M)");
        kt_buf_line(b, "        kt_gemv_store(acc[r], m0 + r, %s);", call);
        kt_buf_line(b, "}");
    }
    b->indent = 0;
    kt_buf_line(b, "}");
}

/* The decode form's kernel (y = X A^T): as the vector form's, but each step converts the R rows'
 * VEC elements of A to fp32 once and uses them for the T token rows of X, whose loads hit L1/L2
 * (X is T * K elements, read by every lane group); T x R sums per lane. */
void gemv_emit_ffma_decode(kt_buf *b, const gemv_info *in, const gemv_plan *p, const char *entry,
                           const char *params, const char *call)
{
    int abytes = p->vec * (int)ops_dtype_size(in->adt),
        xbytes = p->vec * (int)ops_dtype_size(in->xdt);
    kt_buf_line(b, "/* Lane groups of TPR lanes own R rows of A each; each step loads VEC elements "
                   "of every row per");
    kt_buf_line(b,
                " * lane (%d-byte loads), converts them once, and uses them for the T token rows "
                "of x; the row's",
                abytes);
    kt_buf_line(b, " * lanes then reduce each of the T x R sums by shuffles. */");
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(THREADS, 1)");
    kt_buf_line(b, "%s(%s)", entry, params);
    kt_buf_line(b, "{");
    b->indent = 4;
    emit_ffma_setup(b, in, p);
    int64_t lane_steps = (in->K / p->vec + p->tpr - 1) / p->tpr;
    kt_buf_line(b, "#pragma unroll %d", lane_steps <= 8 ? (int)lane_steps : 2);
    kt_buf_line(b, "for (int c = lane; c < K / VEC; c += TPR) {");
    b->indent = 8;
    kt_buf_line(b, "float af[R][VEC];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    b->indent = 12;
    emit_a_load(b, in, p);
    char ex[160];
    for (int l = 0; l < p->vec; l++) {
        lane_expr(ex, sizeof(ex), in->adt, p->vec, "aw", l);
        kt_buf_line(b, "af[r][%d] = %s;", l, ex);
    }
    b->indent = 8;
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int t = 0; t < T; t++) {");
    b->indent = 12;
    kt_buf_line(b, "const %s xw = __ldg(xv + (long long)t * (K / VEC) + c);", load_type(xbytes));
    for (int l = 0; l < p->vec; l++) {
        lane_expr(ex, sizeof(ex), in->xdt, p->vec, "xw", l);
        kt_buf_line(b, "const float x%d = %s;", l, ex);
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    for (int l = 0; l < p->vec; l++)
        kt_buf_line(b, "    acc[r][t] = fmaf(af[r][%d], x%d, acc[r][t]);", l, l);
    kt_buf_line(b, "}");
    b->indent = 8;
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "}");
    if (p->tpr > 32) {
        emit_cross_warp_sums(b, in, call);
    } else {
        kt_buf_line(b, "/* the TPR lanes of a row add up in a fixed butterfly order */");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int r = 0; r < R; r++) {");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int t = 0; t < T; t++) {");
        kt_buf_line(b, "        const float sum = kt_warp_sum<TPR>(acc[r][t]);");
        kt_buf_line(b, "        if (lane == 0 && m0 + r < M)");
        kt_buf_line(b, "            kt_gemv_store(sum, m0 + r, t, %s);", call);
        kt_buf_line(b, "    }");
        kt_buf_line(b, "}");
    }
    b->indent = 0;
    kt_buf_line(b, "}");
}
