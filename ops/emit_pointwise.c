/* The pointwise family: any DAG of elementwise (unary/binary, NumPy-broadcasting) nodes, plus
 * permute, reshape and slice nodes handled as index remaps (a slice past its operand's edge:
 * guarded reads and its fill), whose outputs all share one shape: the iteration space. Every
 * thread evaluates the whole DAG for its elements.
 *
 * Work split: an exact grid, no grid-stride loop. The iteration space is cut into chunks of
 * `vec` consecutive elements along its innermost dimension (vec divides that dimension, so a
 * chunk never crosses a row); block b owns chunks [b * threads * items, (b + 1) * threads *
 * items), and thread t of it handles chunks b * threads * items + it * threads + t for it in
 * [0, items) (adjacent threads touch adjacent chunks: coalesced), the items loop unrolled by
 * `unroll`. Chunks past the end are masked, so every output element is written exactly once.
 *
 * Indexing: each tensor a value is read from is addressed through a "context", its coordinates
 * as functions of the iteration coordinates i0..i{R-1}: affine forms for broadcasting and
 * permutes, (affine / div) % mod for the coordinates under a reshape. An input whose flat
 * offset is i{R-1} plus a multiple of vec is loaded as one vector (16 bytes at most); one that
 * is broadcast along the innermost dimension is read once per chunk as a scalar; any other
 * (e.g. the source of a transpose) is gathered one element per lane. Values that do not depend
 * on the innermost coordinate are computed once per chunk, outside the lane loop. */
#include "family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_THREADS, K_ITEMS, K_VEC, K_UNROLL, N_KNOBS };

static const ops_knob pw_knobs[N_KNOBS] = {
    [K_THREADS] = {"threads", 5, {64, 128, 256, 512, 1024}, NULL},
    [K_ITEMS] = {"items", 4, {1, 2, 4, 8}, NULL},
    [K_VEC] = {"vec", 4, {1, 2, 4, 8}, NULL},
    [K_UNROLL] = {"unroll", 3, {1, 2, 4}, NULL},
};

#define PW_MAX_VALUES 256
#define PW_MAX_GRID   2147483647LL

/* A coordinate: ((c0 + sum_k c[k] * i_k) / div) % mod over the iteration coordinates; div 1
 * and mod 0 make it affine. */
typedef struct pw_coord {
    int64_t c[OPS_MAX_RANK];
    int64_t c0;
    int64_t div, mod;
} pw_coord;

#define PW_MAX_GUARDS 8

/* A bound on a coordinate, 0 <= x < size: a slice with a fill reads its operand only there. */
typedef struct pw_guard {
    pw_coord x;
    int64_t size;
} pw_guard;

/* Where a tensor is read: its coordinates, and under a reshape its flat offset directly;
 * under a slice with a fill, the guards that must hold for the read to happen. */
typedef struct pw_ctx {
    int rank;
    pw_coord x[OPS_MAX_RANK];
    bool has_flat;
    pw_coord flat; /* affine */
    int n_guard;
    pw_guard guard[PW_MAX_GUARDS];
} pw_ctx;

typedef struct pw_value {
    int32_t tensor;
    pw_ctx ctx;
    bool lane; /* depends on the innermost iteration coordinate */
} pw_value;

typedef struct pw_gen {
    const ops_group *grp;
    const ops_graph *g;
    ops_shape it; /* iteration space (rank >= 1) */
    int rank;
    int vec;
    const char *ix; /* index type: "int" or "long long" */
    int n_values;
    pw_value values[PW_MAX_VALUES];
    kt_buf vload, pre, lane; /* vector loads, per-chunk values, per-lane values */
    unsigned used_vars;      /* iteration coordinates referenced */
    unsigned vec_types;      /* bit dtype * 4 + log2(vec): vector struct types needed */
    int n_gather;            /* lane-dependent inputs read element by element */
    int n_vector_loads;
    const char *fail; /* why the group cannot be generated, or NULL */
} pw_gen;

/* ---- small helpers ---- */

static void param_name(const ops_group *grp, int32_t t, char *out, size_t len)
{
    char clean[48];
    ops_emit_identifier(grp->g->tensors[t].name, clean, sizeof(clean));
    for (int i = 0; i < grp->n_in; i++)
        if (grp->in[i] == t) {
            snprintf(out, len, "in%d_%s", i, clean);
            return;
        }
    for (int i = 0; i < grp->n_out; i++)
        if (grp->out[i] == t) {
            snprintf(out, len, "out%d_%s", i, clean);
            return;
        }
    snprintf(out, len, "t%d_%s", (int)t, clean);
}

static bool is_layout(ops_op op)
{
    return op == OPS_PERMUTE || op == OPS_RESHAPE || op == OPS_SLICE;
}

/* ---- contexts ---- */

static bool coord_affine(const pw_coord *c)
{
    return c->div == 1 && c->mod == 0;
}

static pw_coord coord_zero(void)
{
    pw_coord c;
    memset(&c, 0, sizeof(c));
    c.div = 1;
    return c;
}

static bool ctx_uses_inner(const pw_ctx *x, int rank)
{
    for (int k = 0; k < x->rank; k++)
        if (x->x[k].c[rank - 1])
            return true;
    for (int k = 0; k < x->n_guard; k++)
        if (x->guard[k].x.c[rank - 1])
            return true;
    return x->has_flat && x->flat.c[rank - 1];
}

static void ctx_identity(const pw_gen *s, pw_ctx *x)
{
    memset(x, 0, sizeof(*x));
    x->rank = s->grp->g->tensors[s->grp->out[0]].shape.rank;
    /* A rank-0 output iterates over a one-element space of rank 1 and reads no coordinate. */
    for (int k = 0; k < x->rank; k++) {
        x->x[k] = coord_zero();
        x->x[k].c[k] = 1;
    }
}

/* The context of an operand of shape `in` read by a node whose output `out` is at ctx. */
static void ctx_broadcast(const pw_ctx *ctx, const ops_shape *in, const ops_shape *out, pw_ctx *res)
{
    memset(res, 0, sizeof(*res));
    res->rank = in->rank;
    res->n_guard = ctx->n_guard;
    memcpy(res->guard, ctx->guard, sizeof(res->guard));
    int shift = out->rank - in->rank;
    for (int k = 0; k < in->rank; k++)
        res->x[k] = in->d[k].size == 1 ? coord_zero() : ctx->x[k + shift];
    if (ops_shape_same_sizes(in, out) && ctx->has_flat) {
        res->has_flat = true;
        res->flat = ctx->flat;
    }
}

/* The affine flat offset of a tensor of shape sh at ctx, or false when not affine. */
static bool ctx_flat(const pw_ctx *ctx, const ops_shape *sh, pw_coord *flat)
{
    if (ctx->has_flat) {
        *flat = ctx->flat;
        return true;
    }
    *flat = coord_zero();
    int64_t stride = 1;
    for (int k = sh->rank - 1; k >= 0; k--) {
        if (sh->d[k].size != 1) {
            if (!coord_affine(&ctx->x[k]))
                return false;
            for (int m = 0; m < OPS_MAX_RANK; m++)
                flat->c[m] += ctx->x[k].c[m] * stride;
            flat->c0 += ctx->x[k].c0 * stride;
        }
        stride *= sh->d[k].size;
    }
    return true;
}

/* ---- rendering ---- */

/* The affine part c0 + sum c[k] * i_k; lane: the innermost coordinate reads "(iR + l)". */
static void render_affine(pw_gen *s, kt_buf *b, const pw_coord *x, bool lane)
{
    const int64_t *c = x->c;
    bool any = false;
    for (int k = 0; k < s->rank; k++) {
        if (!c[k])
            continue;
        s->used_vars |= 1u << k;
        kt_buf_printf(b, "%s", any ? " + " : "");
        if (k == s->rank - 1 && lane && s->vec > 1)
            kt_buf_printf(b, "(i%d + l)", k);
        else
            kt_buf_printf(b, "i%d", k);
        if (c[k] != 1)
            kt_buf_printf(b, " * %lld", (long long)c[k]);
        any = true;
    }
    if (x->c0 || !any)
        kt_buf_printf(b, "%s%lld", !any ? "" : x->c0 < 0 ? " - " : " + ",
                      (long long)(any && x->c0 < 0 ? -x->c0 : x->c0));
}

static void render_coord(pw_gen *s, kt_buf *b, const pw_coord *c, bool lane)
{
    if (coord_affine(c)) {
        render_affine(s, b, c, lane);
        return;
    }
    kt_buf_printf(b, "((");
    render_affine(s, b, c, lane);
    kt_buf_printf(b, ")");
    if (c->div != 1)
        kt_buf_printf(b, " / %lld", (long long)c->div);
    if (c->mod)
        kt_buf_printf(b, " %% %lld", (long long)c->mod);
    kt_buf_printf(b, ")");
}

/* The flat element offset of tensor t read at ctx. */
static void render_offset(pw_gen *s, kt_buf *b, int32_t t, const pw_ctx *ctx, bool lane)
{
    const ops_shape *sh = &s->g->tensors[t].shape;
    pw_coord flat;
    if (ctx_flat(ctx, sh, &flat)) {
        render_affine(s, b, &flat, lane);
        return;
    }
    int64_t stride = 1;
    bool any = false;
    for (int k = sh->rank - 1; k >= 0; k--) {
        if (sh->d[k].size != 1) {
            kt_buf_printf(b, "%s", any ? " + " : "");
            render_coord(s, b, &ctx->x[k], lane);
            if (stride != 1)
                kt_buf_printf(b, " * %lld", (long long)stride);
            any = true;
        }
        stride *= sh->d[k].size;
    }
    if (!any)
        kt_buf_printf(b, "0");
}

/* ---- the DAG walk ---- */

static bool coord_equal(const pw_coord *a, const pw_coord *b)
{
    return a->div == b->div && a->mod == b->mod && a->c0 == b->c0 &&
           memcmp(a->c, b->c, sizeof(a->c)) == 0;
}

static bool ctx_equal(const pw_ctx *a, const pw_ctx *b)
{
    if (a->rank != b->rank || a->has_flat != b->has_flat)
        return false;
    if (a->has_flat && !coord_equal(&a->flat, &b->flat))
        return false;
    for (int k = 0; k < a->rank; k++)
        if (!coord_equal(&a->x[k], &b->x[k]))
            return false;
    if (a->n_guard != b->n_guard)
        return false;
    for (int k = 0; k < a->n_guard; k++)
        if (a->guard[k].size != b->guard[k].size || !coord_equal(&a->guard[k].x, &b->guard[k].x))
            return false;
    return true;
}

/* The guards [from, n_guard) of ctx as a C condition, "g0 && g1 ...": each 0 <= x < size. */
static void render_guards(pw_gen *s, kt_buf *b, const pw_ctx *ctx, int from, bool lane)
{
    for (int k = from; k < ctx->n_guard; k++) {
        kt_buf_printf(b, "%s(unsigned long long)(", k > from ? " && " : "");
        render_coord(s, b, &ctx->guard[k].x, lane);
        kt_buf_printf(b, ") < %lldull", (long long)ctx->guard[k].size);
    }
}

static int value_find(const pw_gen *s, int32_t t, const pw_ctx *ctx)
{
    for (int i = 0; i < s->n_values; i++)
        if (s->values[i].tensor == t && ctx_equal(&s->values[i].ctx, ctx))
            return i;
    return -1;
}

static int value_new(pw_gen *s, int32_t t, const pw_ctx *ctx, bool lane)
{
    if (s->n_values == PW_MAX_VALUES) {
        s->fail = "too many distinct values";
        return -1;
    }
    pw_value *v = &s->values[s->n_values];
    v->tensor = t;
    v->ctx = *ctx;
    v->lane = lane;
    return s->n_values++;
}

static int emit_value(pw_gen *s, int32_t t, const pw_ctx *ctx);

/* Reads graph input t at ctx. */
static int emit_load(pw_gen *s, int32_t t, const pw_ctx *ctx)
{
    const ops_tensor *x = &s->g->tensors[t];
    bool lane = s->vec > 1 && ctx_uses_inner(ctx, s->rank);
    int id = value_new(s, t, ctx, lane);
    if (id < 0)
        return -1;
    char p[64];
    param_name(s->grp, t, p, sizeof(p));
    pw_coord flat;
    bool affine = ctx_flat(ctx, &x->shape, &flat);
    /* a guarded read (under a slice with a fill) is gathered, each element checked */
    bool vector = lane && affine && ctx->n_guard == 0 && flat.c[s->rank - 1] == 1 &&
                  flat.c0 % s->vec == 0;
    for (int k = 0; vector && k < s->rank - 1; k++)
        vector = flat.c[k] % s->vec == 0;
    if (vector) {
        char vt[32];
        ops_emit_vec_type_name(x->dtype, s->vec, vt, sizeof(vt));
        s->vec_types |= OPS_VEC_BIT(x->dtype, s->vec);
        s->n_vector_loads++;
        kt_buf_printf(&s->vload, "%*sconst %s v%dv = *reinterpret_cast<const %s *>(%s + ",
                      s->vload.indent, "", vt, id, vt, p);
        render_offset(s, &s->vload, t, ctx, false);
        kt_buf_printf(&s->vload, ");\n");
        kt_buf_printf(&s->lane, "%*sconst float v%d = ", s->lane.indent, "", id);
        char elem[32];
        snprintf(elem, sizeof(elem), "v%dv.v[l]", id);
        ops_emit_to_float(&s->lane, x->dtype, elem);
        kt_buf_printf(&s->lane, ";\n");
        return id;
    }
    if (lane)
        s->n_gather++;
    kt_buf *b = lane ? &s->lane : &s->pre;
    kt_buf elem = {0};
    kt_buf_printf(&elem, "%s[", p);
    render_offset(s, &elem, t, ctx, lane);
    kt_buf_printf(&elem, "]");
    kt_buf_printf(b, "%*sconst float v%d = ", b->indent, "", id);
    if (ctx->n_guard) {
        kt_buf_printf(b, "(");
        render_guards(s, b, ctx, 0, lane);
        kt_buf_printf(b, ") ? ");
    }
    ops_emit_to_float(b, x->dtype, elem.data ? elem.data : "");
    kt_buf_printf(b, "%s;\n", ctx->n_guard ? " : 0.0f" : "");
    if (kt_buf_status(&elem) < 0)
        b->oom = true;
    kt_buf_free(&elem);
    return id;
}

/* The context of a slice's operand `in` read by the slice n at ctx: each coordinate start +
 * step * the output's; a guard for each axis that, with a fill, reads past the operand. */
static bool slice_ctx(pw_gen *s, const ops_node *n, const pw_ctx *ctx, const ops_shape *in,
                      const ops_shape *out, pw_ctx *sub)
{
    const ops_attrs *a = &n->attrs;
    memset(sub, 0, sizeof(*sub));
    sub->rank = in->rank;
    sub->n_guard = ctx->n_guard;
    memcpy(sub->guard, ctx->guard, sizeof(sub->guard));
    for (int j = 0; j < in->rank; j++) {
        if (!coord_affine(&ctx->x[j])) {
            s->fail = "a slice of a non-affine index";
            return false;
        }
        pw_coord x = ctx->x[j];
        for (int m = 0; m < OPS_MAX_RANK; m++)
            x.c[m] *= a->step[j];
        x.c0 = x.c0 * a->step[j] + a->start[j];
        sub->x[j] = x;
        int64_t first = a->start[j], last = first + (out->d[j].size - 1) * a->step[j];
        if (!a->has_fill || (first >= 0 && first < in->d[j].size && last >= 0 &&
                             last < in->d[j].size))
            continue;
        if (sub->n_guard == PW_MAX_GUARDS) {
            s->fail = "too many slices past an operand's edge";
            return false;
        }
        sub->guard[sub->n_guard++] = (pw_guard){.x = x, .size = in->d[j].size};
    }
    return true;
}

/* The value of slice t at ctx from its operand's value `in` (id): the fill where the guards
 * the slice added to sub (past ctx's) fail. */
static int emit_slice_fill(pw_gen *s, int32_t t, const pw_ctx *ctx, const pw_ctx *sub, int in)
{
    bool lane = s->values[in].lane;
    for (int k = ctx->n_guard; k < sub->n_guard; k++)
        lane |= s->vec > 1 && sub->guard[k].x.c[s->rank - 1] != 0;
    int id = value_new(s, t, ctx, lane);
    if (id < 0)
        return -1;
    kt_buf *b = lane ? &s->lane : &s->pre;
    kt_buf_printf(b, "%*sconst float v%d = (", b->indent, "", id);
    render_guards(s, b, sub, ctx->n_guard, lane);
    kt_buf_printf(b, ") ? v%d : ", in);
    ops_emit_float_literal(b, s->g->nodes[s->g->tensors[t].producer].attrs.fill);
    char c[OPS_EMIT_COMMENT_MAX];
    kt_buf_printf(b, "; /* %s */\n", ops_emit_comment_text(s->g->tensors[t].name, c, sizeof(c)));
    return id;
}

static int emit_node(pw_gen *s, int32_t t, const pw_ctx *ctx)
{
    const ops_graph *g = s->g;
    const ops_node *n = &g->nodes[g->tensors[t].producer];
    const ops_shape *out = &g->tensors[t].shape;
    int ids[OPS_MAX_OPERANDS] = {-1, -1, -1, -1};
    bool lane = false;
    for (int k = 0; k < n->n_in; k++) {
        int32_t u = n->in[k].tensor;
        if (u == OPS_SCALAR)
            continue;
        const ops_shape *in = &g->tensors[u].shape;
        pw_ctx sub;
        if (n->op == OPS_SLICE) {
            if (!slice_ctx(s, n, ctx, in, out, &sub))
                return -1;
            int v = emit_value(s, u, &sub);
            if (v < 0 || sub.n_guard == ctx->n_guard)
                return v; /* read inside the operand: an index remap */
            return emit_slice_fill(s, t, ctx, &sub, v);
        } else if (n->op == OPS_PERMUTE) {
            memset(&sub, 0, sizeof(sub));
            sub.rank = in->rank;
            for (int j = 0; j < out->rank; j++)
                sub.x[n->attrs.perm[j]] = ctx->x[j];
            sub.n_guard = ctx->n_guard;
            memcpy(sub.guard, ctx->guard, sizeof(sub.guard));
        } else if (n->op == OPS_RESHAPE) {
            pw_coord flat;
            if (!ctx_flat(ctx, out, &flat)) {
                s->fail = "a reshape of a non-affine index";
                return -1;
            }
            memset(&sub, 0, sizeof(sub));
            sub.rank = in->rank;
            sub.has_flat = true;
            sub.flat = flat;
            sub.n_guard = ctx->n_guard;
            memcpy(sub.guard, ctx->guard, sizeof(sub.guard));
            int64_t stride = 1;
            for (int j = in->rank - 1; j >= 0; j--) {
                sub.x[j] = coord_zero();
                if (in->d[j].size != 1) {
                    sub.x[j] = flat;
                    sub.x[j].div = stride;
                    sub.x[j].mod = j == 0 ? 0 : in->d[j].size;
                }
                stride *= in->d[j].size;
            }
        } else {
            ctx_broadcast(ctx, in, out, &sub);
        }
        ids[k] = emit_value(s, u, &sub);
        if (ids[k] < 0)
            return -1;
        lane |= s->values[ids[k]].lane;
    }
    if (is_layout(n->op))
        return ids[0]; /* an index remap: the value is the operand's */
    int id = value_new(s, t, ctx, lane);
    if (id < 0)
        return -1;
    char names[OPS_MAX_OPERANDS][16];
    const char *ops[OPS_MAX_OPERANDS];
    for (int k = 0; k < n->n_in; k++) {
        snprintf(names[k], sizeof(names[k]), "v%d", ids[k]);
        ops[k] = names[k];
    }
    kt_buf *b = lane ? &s->lane : &s->pre;
    kt_buf expr = {0};
    if (ops_emit_elementwise(&expr, n, ops) < 0) {
        kt_buf_free(&expr);
        s->fail = "a node that is not elementwise";
        return -1;
    }
    kt_buf_printf(b, "%*sconst float v%d = ", b->indent, "", id);
    kt_buf_printf(b, "%s", expr.data ? expr.data : "");
    char c[OPS_EMIT_COMMENT_MAX];
    kt_buf_printf(b, "; /* %s */\n", ops_emit_comment_text(g->tensors[t].name, c, sizeof(c)));
    if (kt_buf_status(&expr) < 0)
        b->oom = true;
    kt_buf_free(&expr);
    return id;
}

static int emit_value(pw_gen *s, int32_t t, const pw_ctx *ctx)
{
    int id = value_find(s, t, ctx);
    if (id >= 0)
        return id;
    int p = s->g->tensors[t].producer;
    if (p >= 0 && (s->grp->mask >> p & 1))
        return emit_node(s, t, ctx);
    return emit_load(s, t, ctx);
}

/* ---- group analysis ---- */

typedef struct pw_info {
    ops_shape it;
    int64_t numel;
    int max_bytes; /* widest element among inputs and outputs */
} pw_info;

static bool pw_analyse(const ops_group *grp, pw_info *info)
{
    const ops_graph *g = grp->g;
    if (grp->n_nodes == 0 || grp->n_out == 0)
        return false;
    for (int i = 0; i < grp->n_nodes; i++) {
        ops_op op = g->nodes[grp->nodes[i]].op;
        if (!ops_is_elementwise(op) && !is_layout(op))
            return false;
    }
    const ops_shape *sh = &g->tensors[grp->out[0]].shape;
    for (int i = 1; i < grp->n_out; i++)
        if (!ops_shape_same_sizes(sh, &g->tensors[grp->out[i]].shape))
            return false;
    memset(info, 0, sizeof(*info));
    info->it = *sh;
    if (info->it.rank == 0) {
        info->it.rank = 1;
        info->it.d[0] = (ops_dim){.size = 1, .sym = OPS_NO_SYM};
    }
    info->numel = ops_shape_numel(&info->it);
    if (info->numel <= 0)
        return false;
    for (int i = 0; i < grp->n_in; i++) {
        int b = (int)ops_dtype_size(g->tensors[grp->in[i]].dtype);
        info->max_bytes = b > info->max_bytes ? b : info->max_bytes;
    }
    for (int i = 0; i < grp->n_out; i++) {
        int b = (int)ops_dtype_size(g->tensors[grp->out[i]].dtype);
        info->max_bytes = b > info->max_bytes ? b : info->max_bytes;
    }
    return true;
}

/* Generates the per-chunk code of the group for vector width vec into s (all three buffers).
 * Returns false with s->fail set when the group cannot be indexed. */
static bool pw_generate(pw_gen *s, const ops_group *grp, const pw_info *info, int vec, int indent)
{
    memset(s, 0, sizeof(*s));
    s->grp = grp;
    s->g = grp->g;
    s->it = info->it;
    s->rank = info->it.rank;
    s->vec = vec;
    s->vload.indent = s->pre.indent = indent;
    s->lane.indent = vec > 1 ? indent + 4 : indent;
    pw_ctx id;
    ctx_identity(s, &id);
    for (int i = 0; i < grp->n_out; i++) {
        const ops_tensor *t = &s->g->tensors[grp->out[i]];
        int v = emit_value(s, grp->out[i], &id);
        if (v < 0)
            return false;
        char p[64];
        param_name(grp, grp->out[i], p, sizeof(p));
        kt_buf_printf(&s->lane, "%*s", s->lane.indent, "");
        char val[16];
        snprintf(val, sizeof(val), "v%d", v);
        if (vec > 1) {
            kt_buf_printf(&s->lane, "o%d.v[l] = ", i);
            s->vec_types |= OPS_VEC_BIT(t->dtype, vec);
        } else {
            kt_buf_printf(&s->lane, "%s[e] = ", p);
        }
        ops_emit_from_float(&s->lane, t->dtype, val);
        kt_buf_printf(&s->lane, ";\n");
    }
    return true;
}

static void pw_gen_free(pw_gen *s)
{
    kt_buf_free(&s->vload);
    kt_buf_free(&s->pre);
    kt_buf_free(&s->lane);
}

/* ---- family entry points ---- */

static bool pointwise_matches(const ops_group *grp)
{
    pw_info info;
    if (!pw_analyse(grp, &info))
        return false;
    pw_gen *s = malloc(sizeof(*s));
    if (!s)
        return false;
    bool ok = pw_generate(s, grp, &info, 1, 0);
    pw_gen_free(s);
    free(s);
    return ok;
}

typedef struct pw_plan {
    int threads, items, vec, unroll;
    int64_t chunks, per_block, grid;
} pw_plan;

static void pw_plan_of(const pw_info *info, const ops_schedule *s, pw_plan *p)
{
    p->threads = s->v[K_THREADS];
    p->items = s->v[K_ITEMS];
    p->vec = s->v[K_VEC];
    p->unroll = s->v[K_UNROLL];
    p->chunks = info->numel / p->vec;
    p->per_block = (int64_t)p->threads * p->items;
    p->grid = (p->chunks + p->per_block - 1) / p->per_block;
}

/* Conservative registers per thread: addresses and indices, plus the values of `unroll` items
 * in flight (vec lanes of every input and output). */
static int pw_regs_estimate(const ops_group *grp, const pw_plan *p)
{
    int io = grp->n_in + grp->n_out + grp->n_nodes / 2;
    return 32 + p->unroll * p->vec * io + 2 * (grp->n_in + grp->n_out);
}

static const char *pointwise_prune(const ops_group *grp, const ops_schedule *s,
                                   const ops_device *dev)
{
    pw_info info;
    if (!pw_analyse(grp, &info))
        return "shape";
    pw_plan p;
    pw_plan_of(&info, s, &p);
    if (p.threads > dev->max_threads_per_block)
        return "threads";
    if (p.unroll > p.items)
        return "redundant";
    if (p.vec * info.max_bytes > 16)
        return "align";
    if (info.it.d[info.it.rank - 1].size % p.vec != 0)
        return "divisibility";
    /* Inputs read along the innermost dimension at a stride of one must be vector-aligned;
     * pw_generate loads them as vectors exactly when they are, so compare with vec 1. */
    if (p.vec > 1) {
        for (int i = 0; i < grp->n_in; i++) {
            const ops_shape *sh = &grp->g->tensors[grp->in[i]].shape;
            if (sh->rank > 0 && sh->d[sh->rank - 1].size != 1 &&
                sh->d[sh->rank - 1].size % p.vec != 0)
                return "divisibility";
        }
    }
    if (p.grid > PW_MAX_GRID)
        return "shape";
    /* Blocks much larger than the whole problem: the smaller ones do the same work. */
    if (p.items > 1 && (int64_t)p.threads * (p.items / 2) >= p.chunks)
        return "redundant";
    if (p.threads > 64 && (int64_t)(p.threads / 2) >= p.chunks)
        return "redundant";
    int reg_limit = dev->regs_per_sm / p.threads;
    if (reg_limit > dev->max_regs_per_thread)
        reg_limit = dev->max_regs_per_thread;
    if (pw_regs_estimate(grp, &p) > reg_limit - 8)
        return "regs";
    return NULL;
}

static int pointwise_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                          ops_emitted *out, ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    const ops_graph *g = grp->g;
    pw_info info;
    if (!pw_analyse(grp, &info))
        return ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "",
                            "pointwise: the group is not an elementwise DAG with one output shape");
    const char *why = pointwise_prune(grp, s, dev);
    if (why)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "",
                            "pointwise: schedule is pruned for this group (%s)", why);
    pw_plan p;
    pw_plan_of(&info, s, &p);
    int64_t span = info.numel + 2 * p.per_block * p.vec;
    bool wide = span > 2147483647LL;
    for (int i = 0; i < grp->n_in; i++)
        wide |= ops_shape_numel(&g->tensors[grp->in[i]].shape) > 2147483647LL;
    const char *ix = wide ? "long long" : "int";
    const int body = 8; /* indent inside the items loop */
    pw_gen *gen = malloc(sizeof(*gen));
    if (!gen)
        return -ENOMEM;
    if (!pw_generate(gen, grp, &info, p.vec, body)) {
        int rc = ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "", "pointwise: %s", gen->fail);
        pw_gen_free(gen);
        free(gen);
        return rc;
    }
    gen->ix = ix;

    kt_buf b = {0};
    ops_emit_header(&b, grp, s);
    ops_emit_shared_prelude(&b, out);
    ops_emit_vec_types(&b, gen->vec_types);
    ops_kernel_launch *k = &out->kernels[0];
    snprintf(k->entry, sizeof(k->entry), "ktune_pointwise_t%d_i%d_v%d_u%d%s", p.threads, p.items,
             p.vec, p.unroll, grp->entry_suffix);
    kt_buf_printf(&b, "\n");
    kt_buf_line(&b,
                "/* exact grid of %lld blocks; each thread handles %d chunk%s of %d element%s */",
                (long long)p.grid, p.items, p.items > 1 ? "s" : "", p.vec, p.vec > 1 ? "s" : "");
    kt_buf_printf(&b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", p.threads,
                  k->entry);
    for (int i = 0; i < grp->n_in; i++) {
        char pn[64];
        param_name(grp, grp->in[i], pn, sizeof(pn));
        kt_buf_printf(&b, "%sconst %s *__restrict__ %s", i ? ", " : "",
                      ops_emit_ctype(g->tensors[grp->in[i]].dtype), pn);
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->in[i]};
    }
    for (int i = 0; i < grp->n_out; i++) {
        char pn[64];
        param_name(grp, grp->out[i], pn, sizeof(pn));
        kt_buf_printf(&b, "%s%s *__restrict__ %s", k->n_args ? ", " : "",
                      ops_emit_ctype(g->tensors[grp->out[i]].dtype), pn);
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->out[i]};
    }
    kt_buf_printf(&b, ")\n");
    kt_buf_line(&b, "{");
    b.indent = 4;
    kt_buf_line(&b, "const %s first = (%s)blockIdx.x * %lld + threadIdx.x;", ix, ix,
                (long long)p.per_block);
    b.indent = 0;
    if (p.unroll > 1)
        kt_buf_line(&b, "#pragma unroll %d", p.unroll);
    else
        kt_buf_line(&b, "#pragma unroll 1");
    b.indent = 4;
    kt_buf_line(&b, "for (int it = 0; it < %d; it++) {", p.items);
    b.indent = body;
    kt_buf_line(&b, "const %s c = first + it * %d; /* chunk index */", ix, p.threads);
    bool masked = p.chunks % p.per_block != 0;
    if (masked) {
        kt_buf_line(&b, "if (c >= %lld)", (long long)p.chunks);
        kt_buf_line(&b, "    break;");
    }
    kt_buf_line(&b, "const %s e = c * %d; /* first element of the chunk */", ix, p.vec);
    /* The iteration coordinates the body reads, innermost first. */
    int r = info.it.rank;
    unsigned used = gen->used_vars;
    for (int k2 = r - 1; k2 >= 0; k2--) {
        if (!(used >> k2 & 1))
            continue;
        int64_t below = 1;
        for (int m = k2 + 1; m < r; m++)
            below *= info.it.d[m].size;
        kt_buf_printf(&b, "%*sconst %s i%d = ", b.indent, "", ix, k2);
        if (below == 1)
            kt_buf_printf(&b, "e");
        else
            kt_buf_printf(&b, "e / %lld", (long long)below);
        if (k2 > 0)
            kt_buf_printf(&b, " %% %lld", (long long)info.it.d[k2].size);
        kt_buf_printf(&b, ";\n");
    }
    /* the body's pieces, generated at this indent (pw_generate) */
    if (gen->vload.data)
        kt_buf_printf(&b, "%s", gen->vload.data);
    if (gen->pre.data)
        kt_buf_printf(&b, "%s", gen->pre.data);
    if (p.vec > 1) {
        for (int i = 0; i < grp->n_out; i++) {
            char vt[32];
            ops_emit_vec_type_name(g->tensors[grp->out[i]].dtype, p.vec, vt, sizeof(vt));
            kt_buf_line(&b, "%s o%d;", vt, i);
        }
        b.indent = 0;
        kt_buf_line(&b, "#pragma unroll");
        b.indent = body;
        kt_buf_line(&b, "for (int l = 0; l < %d; l++) {", p.vec);
    }
    if (gen->lane.data)
        kt_buf_printf(&b, "%s", gen->lane.data);
    if (p.vec > 1) {
        kt_buf_line(&b, "}");
        for (int i = 0; i < grp->n_out; i++) {
            char vt[32], pn[64];
            ops_emit_vec_type_name(g->tensors[grp->out[i]].dtype, p.vec, vt, sizeof(vt));
            param_name(grp, grp->out[i], pn, sizeof(pn));
            kt_buf_line(&b, "*reinterpret_cast<%s *>(%s + e) = o%d;", vt, pn, i);
        }
    }
    b.indent = 4;
    kt_buf_line(&b, "}");
    b.indent = 0;
    kt_buf_line(&b, "}");
    int rc = kt_buf_status(&b) < 0 || kt_buf_status(&gen->vload) < 0 ||
                     kt_buf_status(&gen->pre) < 0 || kt_buf_status(&gen->lane) < 0
                 ? -ENOMEM
                 : 0;
    pw_gen_free(gen);
    free(gen);
    if (rc < 0) {
        kt_buf_free(&b);
        return ops_diag_set(d, g, OPS_RULE_NONE, -1, "", "pointwise: out of memory");
    }
    out->source = kt_buf_take(&b);
    out->n_kernels = 1;
    k->grid[0] = (uint32_t)p.grid;
    k->grid[1] = k->grid[2] = 1;
    k->block[0] = (uint32_t)p.threads;
    k->block[1] = k->block[2] = 1;
    k->smem_bytes = 0;
    out->workspace_bytes = 0;
    return 0;
}

/* FFMA-equivalent operations per element of a node (transcendentals cost several). */
static double node_flops(ops_op op)
{
    switch (op) {
    case OPS_GELU:
    case OPS_GELU_TANH:
    case OPS_MISH:
    case OPS_SOFTPLUS:
    case OPS_POW:
        return 20;
    case OPS_SILU:
    case OPS_SIGMOID:
    case OPS_TANH:
    case OPS_EXP:
    case OPS_LOG:
        return 8;
    case OPS_SQRT:
    case OPS_RSQRT:
    case OPS_RECIP:
    case OPS_DIV:
        return 4;
    case OPS_PERMUTE:
    case OPS_RESHAPE:
    case OPS_SLICE:
        return 0;
    default:
        return 1;
    }
}

/* Roofline over bytes moved and arithmetic, divided by an efficiency from the bytes each SM
 * keeps in flight from DRAM (Little's law, OPS_INFLIGHT_BYTES_PER_SM), the SMs the grid
 * occupies, and wave quantisation; plus a fixed launch cost. */
static void pointwise_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                               ops_estimate *e)
{
    memset(e, 0, sizeof(*e));
    pw_info info;
    if (!pw_analyse(grp, &info))
        return;
    const ops_graph *g = grp->g;
    pw_plan p;
    pw_plan_of(&info, s, &p);
    pw_gen *gen = malloc(sizeof(*gen));
    int n_gather = 0;
    if (gen) {
        if (pw_generate(gen, grp, &info, p.vec, 0))
            n_gather = gen->n_gather;
        pw_gen_free(gen);
        free(gen);
    }
    double bytes = 0, flops = 0, load_bytes = 0;
    for (int i = 0; i < grp->n_in; i++) {
        const ops_tensor *t = &g->tensors[grp->in[i]];
        double sz = (double)ops_shape_numel(&t->shape) * (double)ops_dtype_size(t->dtype);
        bytes += sz;
        /* A broadcast input (a bias row) is read again and again from L1 and L2, so its loads
         * keep DRAM busy only in proportion to its size. */
        double share = (double)ops_shape_numel(&t->shape) / (double)info.numel;
        load_bytes += (double)ops_dtype_size(t->dtype) * p.vec * (share < 1 ? share : 1);
    }
    for (int i = 0; i < grp->n_out; i++) {
        const ops_tensor *t = &g->tensors[grp->out[i]];
        bytes += (double)info.numel * (double)ops_dtype_size(t->dtype);
    }
    /* A gathered (strided) read wastes most of each 32-byte sector. */
    bytes *= 1.0 + 2.0 * n_gather / (grp->n_in ? grp->n_in : 1);
    for (int i = 0; i < grp->n_nodes; i++)
        flops += node_flops(g->nodes[grp->nodes[i]].op) * (double)info.numel;

    /* pw_regs_estimate is conservative, for pruning: ptxas gives the kernels of a 16K x 4K
     * scale-bias-GELU chain 12-31 registers where it says 38-72. Half of it for occupancy (with
     * the full figure, one 16-byte load a thread in 256-thread blocks looked latency-bound at
     * 2.8x its time; it ran at 1.05x the best schedule on the H200). */
    int regs = pw_regs_estimate(grp, &p) / 2;
    regs = regs > 16 ? regs : 16;
    int by_regs = dev->regs_per_sm / (regs * p.threads);
    int by_threads = dev->max_threads_per_sm / p.threads;
    int bps = by_regs < by_threads ? by_regs : by_threads;
    bps = bps < dev->max_blocks_per_sm ? bps : dev->max_blocks_per_sm;
    bps = bps < 1 ? 1 : bps;
    double sms = p.grid < dev->sm_count ? (double)p.grid : dev->sm_count;
    double resident = (double)p.grid / sms; /* blocks per busy SM */
    resident = resident < bps ? resident : bps;
    double inflight = resident * p.threads * load_bytes * p.unroll;
    double bw_eff = inflight / OPS_INFLIGHT_BYTES_PER_SM;
    bw_eff = bw_eff < 1 ? bw_eff : 1;
    double waves = (double)p.grid / ((double)bps * dev->sm_count);
    double wave_eff = waves <= 1 ? 1 : waves / (double)(int64_t)(waves + 0.999999);
    double bw = dev->dram_bytes_per_s * (sms / dev->sm_count) * bw_eff * wave_eff;
    double t_mem = bytes / (bw > 0 ? bw : 1);
    double occ = resident * p.threads * (sms / dev->sm_count) / dev->max_threads_per_sm;
    double t_math =
        flops / (dev->fp32_flops_per_s * (sms / dev->sm_count) * (occ < 0.25 ? 0.5 : 1));
    e->bytes = bytes;
    e->flops = flops;
    e->occupancy = occ > 1 ? 1 : occ;
    /* Each block's start and end on its SM: ~10 ns a block, from a 16K x 4K f32 chain on the
     * H200 (one 16-byte load a thread: 64-thread blocks 160 us, 128-thread 132, 2 loads in
     * 128-thread blocks 126, all with the bytes in flight that saturate DRAM). */
    double t_blocks = (double)p.grid / dev->sm_count * 10e-9;
    /* plus the launch, as in ops/row/cost.c */
    e->seconds = (t_mem > t_math ? t_mem : t_math) + t_blocks + 1.5e-6;
}

const ops_family ops_family_pointwise = {
    .id = OPS_FAM_POINTWISE,
    .name = "pointwise",
    .n_knobs = N_KNOBS,
    .knobs = pw_knobs,
    .matches = pointwise_matches,
    .prune = pointwise_prune,
    .emit = pointwise_emit,
    .estimate = pointwise_estimate,
};
