#include "graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ops_op_info op_table[OPS_OP_COUNT] = {
    [OPS_NEG] = {"neg", OPS_KIND_UNARY, 1, 1},
    [OPS_ABS] = {"abs", OPS_KIND_UNARY, 1, 1},
    [OPS_RELU] = {"relu", OPS_KIND_UNARY, 1, 1},
    [OPS_GELU] = {"gelu", OPS_KIND_UNARY, 1, 1},
    [OPS_GELU_TANH] = {"gelu_tanh", OPS_KIND_UNARY, 1, 1},
    [OPS_SILU] = {"silu", OPS_KIND_UNARY, 1, 1},
    [OPS_SIGMOID] = {"sigmoid", OPS_KIND_UNARY, 1, 1},
    [OPS_TANH] = {"tanh", OPS_KIND_UNARY, 1, 1},
    [OPS_EXP] = {"exp", OPS_KIND_UNARY, 1, 1},
    [OPS_LOG] = {"log", OPS_KIND_UNARY, 1, 1},
    [OPS_SQRT] = {"sqrt", OPS_KIND_UNARY, 1, 1},
    [OPS_RSQRT] = {"rsqrt", OPS_KIND_UNARY, 1, 1},
    [OPS_SQUARE] = {"square", OPS_KIND_UNARY, 1, 1},
    [OPS_RECIP] = {"recip", OPS_KIND_UNARY, 1, 1},
    [OPS_MISH] = {"mish", OPS_KIND_UNARY, 1, 1},
    [OPS_SOFTPLUS] = {"softplus", OPS_KIND_UNARY, 1, 1},
    [OPS_HARDTANH] = {"hardtanh", OPS_KIND_UNARY, 1, 1},
    [OPS_LEAKY_RELU] = {"leaky_relu", OPS_KIND_UNARY, 1, 1},
    [OPS_CLAMP] = {"clamp", OPS_KIND_UNARY, 1, 1},
    [OPS_CAST] = {"cast", OPS_KIND_UNARY, 1, 1},
    [OPS_ADD] = {"add", OPS_KIND_BINARY, 2, 2},
    [OPS_SUB] = {"sub", OPS_KIND_BINARY, 2, 2},
    [OPS_MUL] = {"mul", OPS_KIND_BINARY, 2, 2},
    [OPS_DIV] = {"div", OPS_KIND_BINARY, 2, 2},
    [OPS_MAX] = {"max", OPS_KIND_BINARY, 2, 2},
    [OPS_MIN] = {"min", OPS_KIND_BINARY, 2, 2},
    [OPS_POW] = {"pow", OPS_KIND_BINARY, 2, 2},
    [OPS_REDUCE_SUM] = {"sum", OPS_KIND_REDUCE, 1, 1},
    [OPS_REDUCE_MEAN] = {"mean", OPS_KIND_REDUCE, 1, 1},
    [OPS_REDUCE_MAX] = {"max", OPS_KIND_REDUCE, 1, 1},
    [OPS_REDUCE_MIN] = {"min", OPS_KIND_REDUCE, 1, 1},
    [OPS_SOFTMAX] = {"softmax", OPS_KIND_COMPOSITE, 1, 1},
    [OPS_LOG_SOFTMAX] = {"log_softmax", OPS_KIND_COMPOSITE, 1, 1},
    [OPS_LOGSUMEXP] = {"logsumexp", OPS_KIND_COMPOSITE, 1, 1},
    [OPS_LAYERNORM] = {"layernorm", OPS_KIND_COMPOSITE, 1, 3},
    [OPS_RMSNORM] = {"rmsnorm", OPS_KIND_COMPOSITE, 1, 2},
    [OPS_MATMUL] = {"matmul", OPS_KIND_MATMUL, 2, 2},
    [OPS_CONV2D] = {"conv2d", OPS_KIND_CONV, 2, 3},
    [OPS_ATTENTION] = {"attention", OPS_KIND_ATTENTION, 3, 3},
    [OPS_TRANSPOSE] = {"transpose", OPS_KIND_LAYOUT, 1, 1},
    [OPS_PERMUTE] = {"permute", OPS_KIND_LAYOUT, 1, 1},
    [OPS_RESHAPE] = {"reshape", OPS_KIND_LAYOUT, 1, 1},
    [OPS_CONV3D] = {"conv3d", OPS_KIND_CONV, 2, 3},
    [OPS_SLICE] = {"slice", OPS_KIND_LAYOUT, 1, 1},
    [OPS_CUMSUM] = {"cumsum", OPS_KIND_SCAN, 1, 1},
    [OPS_CUMPROD] = {"cumprod", OPS_KIND_SCAN, 1, 1},
};

static const char *rule_names[OPS_RULE_COUNT] = {
    [OPS_RULE_NONE] = "no error",
    [OPS_RULE_SYNTAX] = "syntax error",
    [OPS_RULE_SCHEMA] = "schema error",
    [OPS_RULE_UNKNOWN_OP] = "unknown op",
    [OPS_RULE_ARITY] = "wrong arity",
    [OPS_RULE_DTYPE] = "dtype mismatch",
    [OPS_RULE_BROADCAST] = "bad broadcast",
    [OPS_RULE_SHAPE] = "bad shape",
    [OPS_RULE_UNBOUND_DIM] = "unbound dimension",
    [OPS_RULE_CONFLICT_DIM] = "conflicting dimension",
    [OPS_RULE_CYCLE] = "cycle",
    [OPS_RULE_UNDEFINED] = "undefined tensor",
    [OPS_RULE_DUPLICATE] = "duplicate tensor",
    [OPS_RULE_UNUSED] = "unused tensor",
    [OPS_RULE_ATTR] = "bad attribute",
};

const ops_op_info *ops_op_info_get(ops_op op)
{
    KT_REQUIRE(op > OPS_OP_INVALID && op < OPS_OP_COUNT);
    return &op_table[op];
}

ops_op ops_op_from_name(const char *name, int n_in)
{
    ops_op found = OPS_OP_INVALID;
    for (int op = 1; op < OPS_OP_COUNT; op++) {
        if (strcmp(op_table[op].name, name) != 0)
            continue;
        /* "max"/"min" name both a reduction (one operand) and a binary op (two). */
        if (n_in >= op_table[op].min_in && n_in <= op_table[op].max_in)
            return (ops_op)op;
        if (found == OPS_OP_INVALID)
            found = (ops_op)op;
    }
    return found;
}

const char *ops_rule_name(ops_rule rule)
{
    return rule > OPS_RULE_NONE && rule < OPS_RULE_COUNT ? rule_names[rule] : "no error";
}

void ops__diag_tensor(ops_diag *d, const char *tensor)
{
    size_t n = tensor ? strlen(tensor) : 0;
    kt_escape(d->tensor, sizeof(d->tensor), tensor, n,
              kt_text_clean(tensor, n) ? KT_ESC_KEEP_BACKSLASH : 0);
}

int ops_diag_set(ops_diag *d, const ops_graph *g, ops_rule rule, int node, const char *tensor,
                 const char *fmt, ...)
{
    if (!d)
        return -EINVAL;
    d->rule = rule;
    d->node = node;
    ops__diag_tensor(d, tensor);
    char detail[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (g && node >= 0 && node < g->n_nodes) {
        const ops_node *n = &g->nodes[node];
        const char *op =
            n->op > OPS_OP_INVALID && n->op < OPS_OP_COUNT ? op_table[n->op].name : "?";
        const char *out = n->out >= 0 && n->out < g->n_tensors ? g->tensors[n->out].name : "?";
        snprintf(d->msg, sizeof(d->msg), "node %d (%s -> %s): %s: %s", node, op, out,
                 ops_rule_name(rule), detail);
    } else {
        snprintf(d->msg, sizeof(d->msg), "%s: %s", ops_rule_name(rule), detail);
    }
    return -EINVAL;
}

const char *ops_dtype_name(ops_dtype dt)
{
    switch (dt) {
    case OPS_DT_F32:
        return "f32";
    case OPS_DT_F16:
        return "f16";
    case OPS_DT_BF16:
        return "bf16";
    case OPS_DT_F64:
        return "f64";
    case OPS_DT_NONE:
        break;
    }
    return "none";
}

int ops_dtype_from_name(const char *name, ops_dtype *out)
{
    static const ops_dtype all[] = {OPS_DT_F32, OPS_DT_F16, OPS_DT_BF16, OPS_DT_F64};
    for (size_t i = 0; i < KT_ARRAY_LEN(all); i++) {
        if (strcmp(name, ops_dtype_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    }
    return -EINVAL;
}

const char *ops_precision_name(ops_precision p)
{
    switch (p) {
    case OPS_PREC_EXACT:
        return "exact";
    case OPS_PREC_TF32:
        return "tf32";
    case OPS_PREC_REDUCED:
        return "reduced";
    }
    return "?";
}

int ops_precision_from_name(const char *name, ops_precision *out)
{
    for (int p = OPS_PREC_EXACT; p <= OPS_PREC_REDUCED; p++) {
        if (strcmp(name, ops_precision_name((ops_precision)p)) == 0) {
            *out = (ops_precision)p;
            return 0;
        }
    }
    return -EINVAL;
}

size_t ops_dtype_size(ops_dtype dt)
{
    switch (dt) {
    case OPS_DT_F32:
        return 4;
    case OPS_DT_F16:
    case OPS_DT_BF16:
        return 2;
    case OPS_DT_F64:
        return 8;
    case OPS_DT_NONE:
        break;
    }
    return 0;
}

void ops_attrs_default(ops_op op, ops_attrs *a)
{
    memset(a, 0, sizeof(*a));
    a->axis = -1;
    switch (op) {
    case OPS_LEAKY_RELU:
        a->alpha = 0.01;
        break;
    case OPS_HARDTANH:
        a->lo = -1.0;
        a->hi = 1.0;
        break;
    case OPS_CLAMP:
        a->lo = -INFINITY;
        a->hi = INFINITY;
        break;
    case OPS_LAYERNORM:
        a->eps = 1e-5;
        break;
    case OPS_RMSNORM:
        a->eps = 1e-6;
        break;
    case OPS_CONV2D:
    case OPS_CONV3D:
        for (int i = 0; i < 3; i++)
            a->stride[i] = a->dilation[i] = a->input_dilation[i] = 1;
        a->groups = 1;
        break;
    case OPS_SLICE:
        for (int i = 0; i < OPS_MAX_RANK; i++)
            a->step[i] = 1;
        break;
    default:
        break;
    }
}

int ops_conv_spatial(ops_op op)
{
    return op == OPS_CONV3D ? 3 : 2;
}

void ops_conv_geom_make(ops_op op, const ops_attrs *a, const int64_t *x, const int64_t *w,
                        const int64_t *o, ops_conv_geom *cg)
{
    int nd = ops_conv_spatial(op), lead = 3 - nd;
    memset(cg, 0, sizeof(*cg));
    cg->nhwc = a->layout == OPS_LAYOUT_NHWC;
    int sp0 = cg->nhwc ? 1 : 2; /* the first spatial axis */
    cg->n = x[0];
    cg->c = x[cg->nhwc ? nd + 1 : 1];
    cg->k = w[0];
    cg->cg = w[cg->nhwc ? nd + 1 : 1];
    cg->groups = a->groups > 0 ? a->groups : 1;
    cg->kg = cg->k / cg->groups;
    for (int i = 0; i < 3; i++) {
        bool real = i >= lead;
        int j = i - lead;
        cg->in[i] = real ? x[sp0 + j] : 1;
        cg->ker[i] = real ? w[sp0 + j] : 1;
        cg->out[i] = real ? o[sp0 + j] : 1;
        cg->stride[i] = real ? a->stride[j] : 1;
        cg->pad[i] = real ? a->padding[j] : 0;
        cg->dil[i] = real ? a->dilation[j] : 1;
        cg->idil[i] = real ? a->input_dilation[j] : 1;
    }
}

void ops_conv_geom_of(const ops_graph *g, const ops_node *n, ops_conv_geom *cg)
{
    int64_t d[3][OPS_MAX_RANK] = {{0}};
    const ops_shape *s[3] = {&g->tensors[n->in[0].tensor].shape, &g->tensors[n->in[1].tensor].shape,
                             &g->tensors[n->out].shape};
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < s[t]->rank; i++)
            d[t][i] = s[t]->d[i].size;
    ops_conv_geom_make(n->op, &n->attrs, d[0], d[1], d[2], cg);
}

ops_graph *ops_graph_new(const char *name)
{
    ops_graph *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->name = strdup(name ? name : "");
    if (!g->name) {
        free(g);
        return NULL;
    }
    return g;
}

/* ---- name indexes: tensor and symbol names to their index ----
 * A table is built once a graph has NAME_INDEX_MIN names and extended by the writer that adds
 * one; readers use it only while it covers every name (idx->n equal to the count), else scan, so
 * concurrent readers never write. */

#define NAME_INDEX_MIN 16

static const char *tensor_name(const ops_graph *g, int i)
{
    return g->tensors[i].name;
}

static const char *sym_name(const ops_graph *g, int i)
{
    return g->syms[i];
}

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* The index of name, or -1; idx must cover all count names. */
static int index_find(const ops_graph *g, const ops_name_index *idx,
                      const char *(*name_at)(const ops_graph *, int), const char *name)
{
    uint32_t mask = idx->cap - 1;
    for (uint32_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
        int32_t at = idx->slot[i];
        if (at < 0 || strcmp(name_at(g, at), name) == 0)
            return at;
    }
}

static void index_put(const ops_graph *g, ops_name_index *idx,
                      const char *(*name_at)(const ops_graph *, int), int at)
{
    uint32_t mask = idx->cap - 1;
    for (uint32_t i = name_hash(name_at(g, at)) & mask;; i = (i + 1) & mask) {
        if (idx->slot[i] < 0) {
            idx->slot[i] = at;
            return;
        }
        if (strcmp(name_at(g, idx->slot[i]), name_at(g, at)) == 0)
            return; /* a repeated name keeps its first index, as a scan finds it */
    }
}

/* Brings idx up to count names (writers only), rebuilding at twice the load. Out of memory
 * leaves it unused (lookups scan): never an error. */
static void index_update(const ops_graph *g, ops_name_index *idx,
                         const char *(*name_at)(const ops_graph *, int), int count)
{
    if (count < NAME_INDEX_MIN)
        return;
    if (idx->n < 0 || idx->n > count || (uint64_t)count * 2 > idx->cap) {
        uint32_t cap = 64;
        while (cap < (uint64_t)count * 4)
            cap *= 2;
        int32_t *slot = malloc(cap * sizeof(int32_t));
        if (!slot) {
            idx->n = -1;
            return;
        }
        free(idx->slot);
        idx->slot = slot;
        idx->cap = cap;
        idx->n = 0;
        memset(slot, 0xff, cap * sizeof(int32_t)); /* every slot -1 */
    }
    for (; idx->n < count; idx->n++)
        index_put(g, idx, name_at, idx->n);
}

int ops_graph_sym(ops_graph *g, const char *name)
{
    if (g->sym_index.n == g->n_syms && g->n_syms >= NAME_INDEX_MIN) {
        int at = index_find(g, &g->sym_index, sym_name, name);
        if (at >= 0)
            return at;
    } else {
        for (int i = 0; i < g->n_syms; i++)
            if (strcmp(g->syms[i], name) == 0)
                return i;
    }
    if (kt_grow(&g->syms, &g->syms_cap, (size_t)g->n_syms + 1, sizeof(char *)) < 0)
        return -ENOMEM;
    char *copy = strdup(name);
    if (!copy)
        return -ENOMEM;
    g->syms[g->n_syms] = copy;
    g->n_syms++;
    index_update(g, &g->sym_index, sym_name, g->n_syms);
    return g->n_syms - 1;
}

int ops_graph_find_tensor(const ops_graph *g, const char *name)
{
    if (g->tensor_index.n == g->n_tensors && g->n_tensors >= NAME_INDEX_MIN)
        return index_find(g, &g->tensor_index, tensor_name, name);
    for (int i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0)
            return i;
    return -1;
}

static int add_tensor(ops_graph *g, const char *name)
{
    if (ops_graph_find_tensor(g, name) >= 0)
        return -EEXIST;
    if (kt_grow(&g->tensors, &g->tensors_cap, (size_t)g->n_tensors + 1, sizeof(ops_tensor)) < 0)
        return -ENOMEM;
    ops_tensor *t = &g->tensors[g->n_tensors];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (!t->name)
        return -ENOMEM;
    t->producer = -1;
    g->n_tensors++;
    index_update(g, &g->tensor_index, tensor_name, g->n_tensors);
    return g->n_tensors - 1;
}

int ops_graph_add_input(ops_graph *g, const char *name, ops_dtype dt, const ops_shape *shape,
                        bool is_const)
{
    int t = add_tensor(g, name);
    if (t < 0)
        return t;
    g->tensors[t].dtype = dt;
    g->tensors[t].shape = *shape;
    g->tensors[t].is_const = is_const;
    g->validated = false;
    return t;
}

int ops_graph_add_node(ops_graph *g, ops_op op, const char *out_name, const ops_attrs *attrs)
{
    if (kt_grow(&g->nodes, &g->nodes_cap, (size_t)g->n_nodes + 1, sizeof(ops_node)) < 0)
        return -ENOMEM;
    int t = add_tensor(g, out_name);
    if (t < 0)
        return t;
    ops_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof(*n));
    n->op = op;
    n->out = t;
    if (attrs)
        n->attrs = *attrs;
    else
        ops_attrs_default(op, &n->attrs);
    g->tensors[t].producer = g->n_nodes;
    g->validated = false;
    return g->n_nodes++;
}

int ops_graph_mark_output(ops_graph *g, int tensor)
{
    KT_REQUIRE(tensor >= 0 && tensor < g->n_tensors);
    if (g->tensors[tensor].is_output)
        return -EEXIST;
    if (kt_grow(&g->outputs, &g->outputs_cap, (size_t)g->n_outputs + 1, sizeof(int32_t)) < 0)
        return -ENOMEM;
    g->tensors[tensor].is_output = true;
    g->outputs[g->n_outputs++] = tensor;
    g->validated = false;
    return 0;
}

bool ops_graph_needs_positive(const ops_graph *g, int t)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const ops_node *n = &g->nodes[i];
        if (n->op == OPS_LOG || n->op == OPS_SQRT || n->op == OPS_RSQRT)
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k].tensor == t)
                    return true;
    }
    return false;
}

int64_t ops_shape_numel(const ops_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->d[i].size < 0)
            return -1;
        n *= s->d[i].size;
    }
    return n;
}

bool ops_shape_same_sizes(const ops_shape *a, const ops_shape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->d[i].size != b->d[i].size)
            return false;
    return true;
}

void ops_shape_format(const ops_graph *g, const ops_shape *s, char *buf, size_t len)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < s->rank && used < len; i++) {
        const ops_dim *d = &s->d[i];
        const char *sep = i ? ", " : "";
        if (d->sym >= 0 && g && d->sym < g->n_syms) {
            if (d->size >= 0)
                used += (size_t)snprintf(buf + used, len - used, "%s%s=%lld", sep, g->syms[d->sym],
                                         (long long)d->size);
            else
                used += (size_t)snprintf(buf + used, len - used, "%s%s", sep, g->syms[d->sym]);
        } else {
            used += (size_t)snprintf(buf + used, len - used, "%s%lld", sep, (long long)d->size);
        }
    }
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

void ops_graph_free(ops_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_syms; i++)
        free(g->syms[i]);
    for (int i = 0; i < g->n_tensors; i++)
        free(g->tensors[i].name);
    free(g->syms);
    free(g->tensors);
    free(g->nodes);
    free(g->outputs);
    free(g->name);
    free(g->tensor_index.slot);
    free(g->sym_index.slot);
    free(g);
}

ops_graph *ops_graph_clone(const ops_graph *g)
{
    ops_graph *c = ops_graph_new(g->name);
    if (!c)
        return NULL;
    for (int i = 0; i < g->n_syms; i++)
        if (ops_graph_sym(c, g->syms[i]) < 0)
            goto fail;
    if (kt_grow(&c->tensors, &c->tensors_cap, (size_t)g->n_tensors, sizeof(ops_tensor)) < 0 ||
        kt_grow(&c->nodes, &c->nodes_cap, (size_t)g->n_nodes, sizeof(ops_node)) < 0 ||
        kt_grow(&c->outputs, &c->outputs_cap, (size_t)g->n_outputs, sizeof(int32_t)) < 0)
        goto fail;
    for (int i = 0; i < g->n_tensors; i++) {
        c->tensors[i] = g->tensors[i];
        c->tensors[i].name = strdup(g->tensors[i].name);
        if (!c->tensors[i].name)
            goto fail;
        c->n_tensors = i + 1;
    }
    if (g->n_nodes)
        memcpy(c->nodes, g->nodes, (size_t)g->n_nodes * sizeof(ops_node));
    c->n_nodes = g->n_nodes;
    if (g->n_outputs)
        memcpy(c->outputs, g->outputs, (size_t)g->n_outputs * sizeof(int32_t));
    c->n_outputs = g->n_outputs;
    c->validated = g->validated;
    index_update(c, &c->tensor_index, tensor_name, c->n_tensors);
    return c;
fail:
    ops_graph_free(c);
    return NULL;
}

static bool shape_equal(const ops_shape *a, const ops_shape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->d[i].size != b->d[i].size || a->d[i].sym != b->d[i].sym)
            return false;
    return true;
}

/* Compares attributes field by field (not memcmp: padding bytes are unspecified). */
static bool attrs_equal(const ops_attrs *a, const ops_attrs *b)
{
    if (a->alpha != b->alpha || a->lo != b->lo || a->hi != b->hi || a->to != b->to ||
        a->n_axes != b->n_axes || a->keepdim != b->keepdim || a->axis != b->axis ||
        a->eps != b->eps || a->transpose_a != b->transpose_a || a->transpose_b != b->transpose_b ||
        a->groups != b->groups || a->layout != b->layout || a->has_scale != b->has_scale ||
        a->scale != b->scale || a->causal != b->causal || a->n_perm != b->n_perm ||
        !shape_equal(&a->shape, &b->shape))
        return false;
    for (int i = 0; i < 3; i++)
        if (a->stride[i] != b->stride[i] || a->padding[i] != b->padding[i] ||
            a->dilation[i] != b->dilation[i] || a->input_dilation[i] != b->input_dilation[i] ||
            a->end_padding[i] != b->end_padding[i])
            return false;
    for (int i = 0; i < a->n_axes; i++)
        if (a->axes[i] != b->axes[i])
            return false;
    for (int i = 0; i < a->n_perm; i++)
        if (a->perm[i] != b->perm[i])
            return false;
    if (a->has_fill != b->has_fill || (a->has_fill && a->fill != b->fill))
        return false;
    for (int i = 0; i < OPS_MAX_RANK; i++)
        if (a->start[i] != b->start[i] || a->step[i] != b->step[i])
            return false;
    return true;
}

bool ops_graph_equal(const ops_graph *a, const ops_graph *b)
{
    if (strcmp(a->name, b->name) != 0 || a->n_syms != b->n_syms || a->n_tensors != b->n_tensors ||
        a->n_nodes != b->n_nodes || a->n_outputs != b->n_outputs || a->validated != b->validated)
        return false;
    for (int i = 0; i < a->n_syms; i++)
        if (strcmp(a->syms[i], b->syms[i]) != 0)
            return false;
    for (int i = 0; i < a->n_tensors; i++) {
        const ops_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->name, y->name) != 0 || x->dtype != y->dtype ||
            !shape_equal(&x->shape, &y->shape) || x->producer != y->producer ||
            x->is_const != y->is_const || x->is_output != y->is_output)
            return false;
    }
    for (int i = 0; i < a->n_nodes; i++) {
        const ops_node *x = &a->nodes[i], *y = &b->nodes[i];
        if (x->op != y->op || x->out != y->out || x->n_in != y->n_in ||
            !attrs_equal(&x->attrs, &y->attrs))
            return false;
        for (int k = 0; k < x->n_in; k++)
            if (x->in[k].tensor != y->in[k].tensor ||
                (x->in[k].tensor == OPS_SCALAR && x->in[k].scalar != y->in[k].scalar))
                return false;
    }
    for (int i = 0; i < a->n_outputs; i++)
        if (a->outputs[i] != b->outputs[i])
            return false;
    return true;
}

static uint16_t f32_to_f16_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
    if (exp == 0xff) /* inf or NaN (keep NaN quiet and non-zero) */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u); /* overflow to infinity */
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign; /* underflow to signed zero */
        /* subnormal: shift the full mantissa (with its implicit 1) into place, round to even */
        man |= 0x800000u;
        int shift = 14 - e;
        uint32_t half = man >> shift, rest = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | (uint32_t)e << 10 | man >> 13, rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1)))
        half++; /* a carry into the exponent is the correct rounding, up to infinity */
    return (uint16_t)half;
}

static float f16_bits_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0x1f) {
        x = sign | 0x7f800000u | man << 13;
    } else if (exp == 0) {
        if (!man) {
            x = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            x = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
        }
    } else {
        x = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f32_to_bf16_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1);           /* round to nearest even */
    return (uint16_t)(x >> 16);
}

void ops_dtype_store(ops_dtype dt, double v, void *dst)
{
    switch (dt) {
    case OPS_DT_F32: {
        float f = (float)v;
        memcpy(dst, &f, 4);
        break;
    }
    case OPS_DT_F16: {
        uint16_t h = f32_to_f16_bits((float)v);
        memcpy(dst, &h, 2);
        break;
    }
    case OPS_DT_BF16: {
        uint16_t h = f32_to_bf16_bits((float)v);
        memcpy(dst, &h, 2);
        break;
    }
    case OPS_DT_F64:
        memcpy(dst, &v, 8);
        break;
    case OPS_DT_NONE:
        KT_REQUIRE(!"store of an untyped element");
    }
}

double ops_dtype_load(ops_dtype dt, const void *src)
{
    switch (dt) {
    case OPS_DT_F32: {
        float f;
        memcpy(&f, src, 4);
        return f;
    }
    case OPS_DT_F16: {
        uint16_t h;
        memcpy(&h, src, 2);
        return f16_bits_to_f32(h);
    }
    case OPS_DT_BF16: {
        uint16_t h;
        memcpy(&h, src, 2);
        uint32_t x = (uint32_t)h << 16;
        float f;
        memcpy(&f, &x, 4);
        return f;
    }
    case OPS_DT_F64: {
        double d;
        memcpy(&d, src, 8);
        return d;
    }
    case OPS_DT_NONE:
        break;
    }
    KT_REQUIRE(!"load of an untyped element");
    return 0;
}
