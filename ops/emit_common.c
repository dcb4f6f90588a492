/* Helpers shared by every family emitter: header comment, prelude, dtype conversions, the
 * elementwise expression of a node, broadcast offsets. */
#include "family.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char prelude[] =
    "/* ---- ktune prelude: 16-bit storage types and math helpers ---- */\n"
    "typedef unsigned short kt_f16;\n"
    "typedef unsigned short kt_bf16;\n"
    "__device__ __forceinline__ float kt_f16_to_f32(kt_f16 h)\n"
    "{\n"
    "    float f;\n"
    "    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n"
    "    return f;\n"
    "}\n"
    "__device__ __forceinline__ kt_f16 kt_f32_to_f16(float f)\n"
    "{\n"
    "    kt_f16 h;\n"
    "    asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
    "    return h;\n"
    "}\n"
    "__device__ __forceinline__ float kt_bf16_to_f32(kt_bf16 h)\n"
    "{\n"
    "    return __uint_as_float(((unsigned)h) << 16);\n"
    "}\n"
    "__device__ __forceinline__ kt_bf16 kt_f32_to_bf16(float f)\n"
    "{\n"
    "    kt_bf16 h;\n"
    "    asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
    "    return h;\n"
    "}\n"
    "__device__ __forceinline__ float kt_gelu(float x)\n"
    "{\n"
    "    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));\n"
    "}\n"
    "__device__ __forceinline__ float kt_gelu_tanh(float x)\n"
    "{\n"
    "    return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));\n"
    "}\n"
    "__device__ __forceinline__ float kt_sigmoid(float x)\n"
    "{\n"
    "    return 1.0f / (1.0f + expf(-x));\n"
    "}\n"
    "__device__ __forceinline__ float kt_softplus(float x)\n"
    "{\n"
    "    /* log1p(exp(x)) without overflow: for large x the result is x. */\n"
    "    return x > 20.0f ? x : log1pf(expf(x));\n"
    "}\n"
    "/* max and min that return NaN when either operand is NaN, as PyTorch's maximum, minimum,\n"
    " * relu, clamp and amax do (fmaxf and fminf return the other operand). One instruction on\n"
    " * sm_80 and later, like fmaxf. */\n"
    "__device__ __forceinline__ float kt_max(float a, float b)\n"
    "{\n"
    "#if __CUDA_ARCH__ >= 800\n"
    "    float r;\n"
    "    asm(\"max.NaN.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b));\n"
    "    return r;\n"
    "#else\n"
    "    return a != a || b != b ? __int_as_float(0x7fffffff) : fmaxf(a, b);\n"
    "#endif\n"
    "}\n"
    "__device__ __forceinline__ float kt_min(float a, float b)\n"
    "{\n"
    "#if __CUDA_ARCH__ >= 800\n"
    "    float r;\n"
    "    asm(\"min.NaN.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b));\n"
    "    return r;\n"
    "#else\n"
    "    return a != a || b != b ? __int_as_float(0x7fffffff) : fminf(a, b);\n"
    "#endif\n"
    "}\n"
    "/* ---- end of prelude ---- */\n";

void ops_emit_prelude(kt_buf *b)
{
    kt_buf_printf(b, "%s", prelude);
}

const char *ops_emit_ctype(ops_dtype dt)
{
    switch (dt) {
    case OPS_DT_F16:
        return "kt_f16";
    case OPS_DT_BF16:
        return "kt_bf16";
    case OPS_DT_F64:
        return "double";
    case OPS_DT_F32:
    case OPS_DT_NONE:
        break;
    }
    return "float";
}

void ops_emit_to_float(kt_buf *b, ops_dtype dt, const char *expr)
{
    switch (dt) {
    case OPS_DT_F16:
        kt_buf_printf(b, "kt_f16_to_f32(%s)", expr);
        break;
    case OPS_DT_BF16:
        kt_buf_printf(b, "kt_bf16_to_f32(%s)", expr);
        break;
    case OPS_DT_F64:
        kt_buf_printf(b, "(float)(%s)", expr);
        break;
    default:
        kt_buf_printf(b, "%s", expr);
    }
}

void ops_emit_from_float(kt_buf *b, ops_dtype dt, const char *expr)
{
    switch (dt) {
    case OPS_DT_F16:
        kt_buf_printf(b, "kt_f32_to_f16(%s)", expr);
        break;
    case OPS_DT_BF16:
        kt_buf_printf(b, "kt_f32_to_bf16(%s)", expr);
        break;
    case OPS_DT_F64:
        kt_buf_printf(b, "(double)(%s)", expr);
        break;
    default:
        kt_buf_printf(b, "%s", expr);
    }
}

/* A float literal that CUDA C parses back to the same float value (infinities and NaN spelled
 * through their bit patterns). */
void ops_emit_float_literal(kt_buf *b, double v)
{
    float f = (float)v;
    if (isnan(f))
        kt_buf_printf(b, "__int_as_float(0x7fc00000)");
    else if (isinf(f))
        kt_buf_printf(b, "__int_as_float(%s)", f > 0 ? "0x7f800000" : "(int)0xff800000");
    else {
        /* "2f" is not a float literal in C++ (it reads as a user-defined literal): make sure
         * the digits have a point or an exponent before the suffix. */
        char digits[32];
        snprintf(digits, sizeof(digits), "%.9g", (double)f);
        kt_buf_printf(b, "%s%sf", digits, strpbrk(digits, ".e") ? "" : ".0");
    }
}

int ops_ilog2(int v)
{
    int l = 0;
    while ((1 << l) < v)
        l++;
    return l;
}

/* Printable ASCII that can neither open or close a comment ('*', '/'), splice lines (a
 * backslash, or the trigraph "??/"), nor be confused with an escape ('%'). */
static bool comment_keeps(unsigned char ch)
{
    return ch >= 0x20 && ch <= 0x7e && !strchr("*/\\?%", ch);
}

const char *ops_emit_comment_text(const char *s, char *out, size_t len)
{
    KT_REQUIRE(len >= 4);
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *text = (const unsigned char *)(s ? s : "");
    size_t total = 0, n = 0;
    for (const unsigned char *p = text; *p; p++)
        total += comment_keeps(*p) ? 1 : 3;
    for (const unsigned char *p = text; *p; p++) {
        bool keep = comment_keeps(*p);
        size_t w = keep ? 1 : 3;
        /* when it does not all fit: room for this byte's text and "..." after it */
        if (total >= len && n + w + 3 >= len) {
            memcpy(out + n, "...", 3);
            n += 3;
            break;
        }
        if (keep) {
            out[n++] = (char)*p;
        } else {
            out[n++] = '%';
            out[n++] = hex[*p >> 4];
            out[n++] = hex[*p & 15];
        }
    }
    out[n] = '\0';
    return out;
}

void ops_emit_identifier(const char *name, char *out, size_t len)
{
    size_t n = 0;
    for (const char *p = name; *p && n + 1 < len && n < 40; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        out[n++] = ok ? ch : '_';
    }
    out[n] = '\0';
}

void ops_emit_vec_type_name(ops_dtype dt, int vec, char *out, size_t len)
{
    snprintf(out, len, "%s_x%d", ops_emit_ctype(dt), vec);
}

void ops_emit_fma_tile(kt_buf *b, const char *i, const char *ni, const char *j, const char *nj,
                       const char *x, const char *y)
{
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int %s = 0; %s < %s; %s++) {", i, i, ni, i);
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int %s = 0; %s < %s; %s++)", j, j, nj, j);
    kt_buf_line(b, "        acc[%s][%s] = fmaf(%s, %s, acc[%s][%s]);", i, j, x, y, i, j);
    kt_buf_line(b, "}");
}

void ops_emit_vec_types(kt_buf *b, unsigned types)
{
    static const ops_dtype dts[] = {OPS_DT_F32, OPS_DT_F16, OPS_DT_BF16};
    for (size_t i = 0; i < KT_ARRAY_LEN(dts); i++)
        for (int lv = 1; lv <= 3; lv++) {
            if (!(types >> (dts[i] * 4 + lv) & 1))
                continue;
            int vec = 1 << lv;
            char vt[32];
            ops_emit_vec_type_name(dts[i], vec, vt, sizeof(vt));
            kt_buf_printf(b, "struct __align__(%d) %s {\n    %s v[%d];\n};\n",
                          vec * (int)ops_dtype_size(dts[i]), vt, ops_emit_ctype(dts[i]), vec);
        }
}

bool ops_is_elementwise(ops_op op)
{
    if (op <= OPS_OP_INVALID || op >= OPS_OP_COUNT)
        return false;
    ops_op_kind k = ops_op_info_get(op)->kind;
    return k == OPS_KIND_UNARY || k == OPS_KIND_BINARY;
}

/* Operand k as an expression: the caller's for tensors, a literal for scalars. */
static void emit_operand(kt_buf *b, const ops_node *n, int k, const char *const *operands)
{
    if (n->in[k].tensor == OPS_SCALAR)
        ops_emit_float_literal(b, n->in[k].scalar);
    else
        kt_buf_printf(b, "(%s)", operands[k]);
}

int ops_emit_elementwise(kt_buf *b, const ops_node *n, const char *const *operands)
{
    if (!ops_is_elementwise(n->op))
        return -EINVAL;
    const ops_attrs *a = &n->attrs;
    if (n->op == OPS_POW && n->in[0].tensor != OPS_SCALAR && n->in[1].tensor == OPS_SCALAR &&
        (n->in[1].scalar == 2.0 || n->in[1].scalar == 3.0)) {
        /* x^2, x^3 as products: powf costs tens of instructions per element (a chain like
         * MinGPT's GELU spends most of its time there); the products are within an ulp or two
         * of powf, and verification holds them to the job's tolerance like any kernel. */
        kt_buf_printf(b, "(");
        for (int i = 0; i < (int)n->in[1].scalar; i++) {
            kt_buf_printf(b, "%s", i ? " * " : "");
            emit_operand(b, n, 0, operands);
        }
        kt_buf_printf(b, ")");
        return 0;
    }
    if (ops_op_info_get(n->op)->kind == OPS_KIND_BINARY) {
        static const struct {
            ops_op op;
            const char *infix, *fn;
        } bin[] = {
            {OPS_ADD, " + ", NULL},  {OPS_SUB, " - ", NULL},    {OPS_MUL, " * ", NULL},
            {OPS_DIV, " / ", NULL},  {OPS_MAX, NULL, "kt_max"}, {OPS_MIN, NULL, "kt_min"},
            {OPS_POW, NULL, "powf"},
        };
        for (size_t i = 0; i < KT_ARRAY_LEN(bin); i++) {
            if (bin[i].op != n->op)
                continue;
            kt_buf_printf(b, "%s(", bin[i].fn ? bin[i].fn : "");
            emit_operand(b, n, 0, operands);
            kt_buf_printf(b, "%s", bin[i].infix ? bin[i].infix : ", ");
            emit_operand(b, n, 1, operands);
            kt_buf_printf(b, ")");
            return 0;
        }
        return -EINVAL;
    }
    const char *x = operands[0];
    switch (n->op) {
    case OPS_NEG:
        kt_buf_printf(b, "(-(%s))", x);
        break;
    case OPS_ABS:
        kt_buf_printf(b, "fabsf(%s)", x);
        break;
    case OPS_RELU:
        kt_buf_printf(b, "kt_max(%s, 0.0f)", x); /* relu(NaN) = NaN */
        break;
    case OPS_GELU:
        kt_buf_printf(b, "kt_gelu(%s)", x);
        break;
    case OPS_GELU_TANH:
        kt_buf_printf(b, "kt_gelu_tanh(%s)", x);
        break;
    case OPS_SILU:
        kt_buf_printf(b, "((%s) * kt_sigmoid(%s))", x, x);
        break;
    case OPS_SIGMOID:
        kt_buf_printf(b, "kt_sigmoid(%s)", x);
        break;
    case OPS_TANH:
        kt_buf_printf(b, "tanhf(%s)", x);
        break;
    case OPS_EXP:
        kt_buf_printf(b, "expf(%s)", x);
        break;
    case OPS_LOG:
        kt_buf_printf(b, "logf(%s)", x);
        break;
    case OPS_SQRT:
        kt_buf_printf(b, "sqrtf(%s)", x);
        break;
    case OPS_RSQRT:
        kt_buf_printf(b, "rsqrtf(%s)", x);
        break;
    case OPS_SQUARE:
        kt_buf_printf(b, "((%s) * (%s))", x, x);
        break;
    case OPS_RECIP:
        kt_buf_printf(b, "(1.0f / (%s))", x);
        break;
    case OPS_MISH:
        kt_buf_printf(b, "((%s) * tanhf(kt_softplus(%s)))", x, x);
        break;
    case OPS_SOFTPLUS:
        kt_buf_printf(b, "kt_softplus(%s)", x);
        break;
    case OPS_LEAKY_RELU:
        kt_buf_printf(b, "((%s) > 0.0f ? (%s) : ", x, x);
        ops_emit_float_literal(b, a->alpha);
        kt_buf_printf(b, " * (%s))", x);
        break;
    case OPS_HARDTANH:
    case OPS_CLAMP: {
        /* An infinite bound (clamp with one side) emits no instruction for that side; NaN
         * stays NaN. */
        bool lo = isfinite(a->lo), hi = isfinite(a->hi);
        kt_buf_printf(b, "%s%s(%s)", hi ? "kt_min(" : "", lo ? "kt_max(" : "", x);
        if (lo) {
            kt_buf_printf(b, ", ");
            ops_emit_float_literal(b, a->lo);
            kt_buf_printf(b, ")");
        }
        if (hi) {
            kt_buf_printf(b, ", ");
            ops_emit_float_literal(b, a->hi);
            kt_buf_printf(b, ")");
        }
        break;
    }
    case OPS_CAST:
        /* Math is in float; a cast to a 16-bit type rounds there, as storing it would. */
        if (a->to == OPS_DT_F16)
            kt_buf_printf(b, "kt_f16_to_f32(kt_f32_to_f16(%s))", x);
        else if (a->to == OPS_DT_BF16)
            kt_buf_printf(b, "kt_bf16_to_f32(kt_f32_to_bf16(%s))", x);
        else
            kt_buf_printf(b, "(%s)", x);
        break;
    default:
        return -EINVAL;
    }
    return 0;
}

void ops_emit_bcast_offset(kt_buf *b, const ops_shape *in, const ops_shape *out,
                           const char *const *out_idx)
{
    int shift = out->rank - in->rank;
    int64_t stride = 1;
    bool any = false;
    kt_buf_printf(b, "(");
    for (int i = in->rank - 1; i >= 0; i--) {
        int64_t dim = in->d[i].size;
        int64_t out_dim = out->d[i + shift].size;
        if (!(dim == 1 && out_dim != 1)) {
            if (any)
                kt_buf_printf(b, " + ");
            if (stride == 1)
                kt_buf_printf(b, "%s", out_idx[i + shift]);
            else
                kt_buf_printf(b, "%s * %lld", out_idx[i + shift], (long long)stride);
            any = true;
        }
        stride *= dim;
    }
    kt_buf_printf(b, "%s)", any ? "" : "0");
}

void ops_emit_header(kt_buf *b, const ops_group *grp, const ops_schedule *s)
{
    const ops_graph *g = grp->g;
    char sched[256], shape[256], c[OPS_EMIT_COMMENT_MAX], cs[3 * sizeof(shape)];
    ops_schedule_format(s, sched, sizeof(sched));
    kt_buf_printf(b, "/*\n * ktune kernel — family %s\n * schedule: %s\n * graph: %s\n",
                  ops_family_get(s->family)->name, sched,
                  ops_emit_comment_text(g->name, c, sizeof(c)));
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        const ops_tensor *t = &g->tensors[n->out];
        /* the shape holds symbol names */
        ops_shape_format(g, &t->shape, shape, sizeof(shape));
        kt_buf_printf(b, " *   %s = %s(", ops_emit_comment_text(t->name, c, sizeof(c)),
                      ops_op_info_get(n->op)->name);
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k].tensor == OPS_SCALAR)
                kt_buf_printf(b, "%s%g", k ? ", " : "", n->in[k].scalar);
            else
                kt_buf_printf(
                    b, "%s%s", k ? ", " : "",
                    ops_emit_comment_text(g->tensors[n->in[k].tensor].name, c, sizeof(c)));
        }
        kt_buf_printf(b, ")  %s %s\n", ops_dtype_name(t->dtype),
                      ops_emit_comment_text(shape, cs, sizeof(cs)));
    }
    kt_buf_printf(b, " */\n");
}

void ops_emit_shared_prelude(kt_buf *b, ops_emitted *out)
{
    out->prelude_at = b->len;
    ops_emit_prelude(b);
    out->code_at = b->len;
}
