/* The JSON form of the op graph, and the schema decoder/encoder (a jansson tree) that the msgpack
 * form shares. The writer formats the tree itself: one input or node per line, and each double
 * in the shortest text that reads back to the same bits, so the canonical text stays readable
 * and write(parse(write(g))) is byte-identical. */
#include "graph_io.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- decoding ---- */

typedef struct dec {
    ops_graph *g;
    ops_diag *d;
    int node;        /* node being decoded (index in "nodes"), or -1 */
    const char *op;  /* its op as written, or NULL */
    const char *out; /* its output name as written, or NULL */
} dec;

enum { SEEN_MIN = 1, SEEN_MAX = 2, SEEN_REQUIRED = 4 };

static int vdiag(ops_diag *d, ops_rule rule, int node, const char *op, const char *out,
                 const char *tensor, const char *fmt, va_list ap) KT_PRINTF(7, 0);

/* Same message layout as ops_diag_set, but usable before the node exists in the graph. */
static int vdiag(ops_diag *d, ops_rule rule, int node, const char *op, const char *out,
                 const char *tensor, const char *fmt, va_list ap)
{
    if (!d)
        return -EINVAL;
    char detail[400];
    vsnprintf(detail, sizeof(detail), fmt, ap);
    d->rule = rule;
    d->node = node;
    ops__diag_tensor(d, tensor);
    /* op and out are as written, not yet checked: escaped like every echoed string */
    if (node >= 0)
        snprintf(d->msg, sizeof(d->msg), "node %d (%s -> %s): %s: %s", node, op ? KT_ESC(op) : "?",
                 out ? KT_ESC(out) : "?", ops_rule_name(rule), detail);
    else
        snprintf(d->msg, sizeof(d->msg), "%s: %s", ops_rule_name(rule), detail);
    return -EINVAL;
}

static int fail(dec *c, ops_rule rule, const char *tensor, const char *fmt, ...) KT_PRINTF(4, 5);

static int fail(dec *c, ops_rule rule, const char *tensor, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vdiag(c->d, rule, c->node, c->op, c->out, tensor, fmt, ap);
    va_end(ap);
    return rc;
}

int ops__syntax_error(ops_diag *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vdiag(d, OPS_RULE_SYNTAX, -1, NULL, NULL, NULL, fmt, ap);
    va_end(ap);
    return rc;
}

/* A tensor or graph name (docs/formats.md, part 1): what names the field, e.g. "graph input
 * name". */
static int check_name(dec *c, const char *tensor, const char *what, const char *s)
{
    kt_err e = {0};
    if (kt_name_check(s, strlen(s), OPS_MAX_NAME_LEN, &e) == 0)
        return 0;
    return fail(c, OPS_RULE_SCHEMA, tensor,
                "%s '%s' %s (names are 1 to %d bytes of UTF-8 without control characters)", what,
                KT_ESC(s), e.msg, OPS_MAX_NAME_LEN);
}

static bool valid_symbol(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > OPS_MAX_NAME_LEN || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_'))
            return false;
    }
    return true;
}

static int tree_depth_ok(const json_t *v, int depth)
{
    if (!json_is_object(v) && !json_is_array(v))
        return 1;
    if (depth >= OPS_MAX_NESTING)
        return 0;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!tree_depth_ok(json_array_get(v, i), depth + 1))
                return 0;
        return 1;
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val) if (!tree_depth_ok(val, depth + 1)) return 0;
    return 1;
}

/* type_rule: wrong JSON type; what: "graph input 'x'" or "attribute 'cast'" for the message. */
static int decode_dtype(dec *c, const char *tensor, const char *what, ops_rule type_rule,
                        const json_t *v, ops_dtype *out)
{
    if (!json_is_string(v))
        return fail(c, type_rule, tensor, "%s: dtype must be a string", what);
    const char *s = json_string_value(v);
    if (ops_dtype_from_name(s, out) < 0)
        return fail(c, OPS_RULE_DTYPE, tensor, "%s: unsupported dtype '%s' (use f32, f16 or bf16)",
                    what, KT_ESC(s));
    if (*out == OPS_DT_F64)
        return fail(c, OPS_RULE_DTYPE, tensor,
                    "%s: f64 is the reference precision, not accepted in graphs (use f32, f16 "
                    "or bf16)",
                    what);
    return 0;
}

/* One dimension as written: a positive integer, a symbol name, or -1 when allow_infer
 * (reshape). Wrong JSON types fail with type_rule, bad values with value_rule. */
static int decode_dim(dec *c, const json_t *v, bool allow_infer, ops_rule type_rule,
                      ops_rule value_rule, const char *tensor, const char *what, size_t axis,
                      ops_dim *out)
{
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (allow_infer && x == -1) {
            *out = (ops_dim){.size = -1, .sym = OPS_NO_SYM};
            return 0;
        }
        if (x < 1 || x > OPS_MAX_DIM)
            return fail(c, value_rule, tensor,
                        "%s: dimension %zu is %lld; dimensions are positive (at most 2^40)%s", what,
                        axis, (long long)x, allow_infer ? " or -1" : "");
        *out = (ops_dim){.size = x, .sym = OPS_NO_SYM};
        return 0;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!valid_symbol(s))
            return fail(c, type_rule, tensor,
                        "%s: dimension %zu '%s' is not a symbol name (letters, digits, _)", what,
                        axis, KT_ESC(s));
        int sym = ops_graph_sym(c->g, s);
        if (sym < 0)
            return sym;
        *out = (ops_dim){.size = -1, .sym = sym};
        return 0;
    }
    return fail(c, type_rule, tensor,
                "%s: dimension %zu must be a positive integer or a symbol name", what, axis);
}

static int decode_input(dec *c, const char *name, const json_t *v)
{
    int rc = check_name(c, name, "graph input name", name);
    if (rc < 0)
        return rc;
    if (!json_is_object(v))
        return fail(c, OPS_RULE_SCHEMA, name,
                    "graph input '%s' must be an object with \"dtype\" and \"shape\"", name);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val)
    {
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 && strcmp(key, "const") != 0)
            return fail(c, OPS_RULE_SCHEMA, name,
                        "graph input '%s': unknown key '%s' (expected dtype, shape, const)", name,
                        KT_ESC(key));
    }
    char what[OPS_MAX_NAME_LEN + 32];
    snprintf(what, sizeof(what), "graph input '%s'", name);
    const json_t *jdt = json_object_get(v, "dtype");
    const json_t *jshape = json_object_get(v, "shape");
    const json_t *jconst = json_object_get(v, "const");
    if (!jdt)
        return fail(c, OPS_RULE_SCHEMA, name, "%s has no \"dtype\"", what);
    ops_dtype dt = OPS_DT_NONE;
    rc = decode_dtype(c, name, what, OPS_RULE_SCHEMA, jdt, &dt);
    if (rc < 0)
        return rc;
    if (!jshape || !json_is_array(jshape))
        return fail(c, OPS_RULE_SCHEMA, name, "%s needs \"shape\": a list of dimensions", what);
    if (json_array_size(jshape) > OPS_MAX_RANK)
        return fail(c, OPS_RULE_SHAPE, name, "%s has rank %zu; the maximum is %d", what,
                    json_array_size(jshape), OPS_MAX_RANK);
    ops_shape shape = {.rank = (int)json_array_size(jshape)};
    for (size_t i = 0; i < json_array_size(jshape); i++) {
        rc = decode_dim(c, json_array_get(jshape, i), false, OPS_RULE_SCHEMA, OPS_RULE_SHAPE, name,
                        what, i, &shape.d[i]);
        if (rc < 0)
            return rc;
    }
    if (jconst && !json_is_boolean(jconst))
        return fail(c, OPS_RULE_SCHEMA, name, "%s: \"const\" must be true or false", what);
    rc = ops_graph_add_input(c->g, name, dt, &shape, json_is_true(jconst));
    if (rc == -EEXIST)
        return fail(c, OPS_RULE_DUPLICATE, name, "graph input '%s' is declared twice", name);
    return rc < 0 ? rc : 0;
}

static int attr_int(dec *c, const char *key, const json_t *v, int *out)
{
    if (!json_is_integer(v))
        return fail(c, OPS_RULE_ATTR, c->out, "attribute '%s' must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < -(1 << 30) || x > (1 << 30))
        return fail(c, OPS_RULE_ATTR, c->out, "attribute '%s' value %lld is out of range", key,
                    (long long)x);
    *out = (int)x;
    return 0;
}

static int attr_bool(dec *c, const char *key, const json_t *v, bool *out)
{
    if (!json_is_boolean(v))
        return fail(c, OPS_RULE_ATTR, c->out, "attribute '%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static int attr_num(dec *c, const char *key, const json_t *v, double *out)
{
    if (!json_is_number(v))
        return fail(c, OPS_RULE_ATTR, c->out, "attribute '%s' must be a number", key);
    *out = json_number_value(v);
    return 0;
}

/* A list of 1 to OPS_MAX_RANK integers (axes, perm). */
static int attr_int_list(dec *c, const char *key, const json_t *v, int *vals, int *n)
{
    if (!json_is_array(v))
        return fail(c, OPS_RULE_ATTR, c->out, "attribute '%s' must be a list of integers", key);
    size_t len = json_array_size(v);
    if (len == 0)
        return fail(c, OPS_RULE_ATTR, c->out, "attribute '%s' must not be empty", key);
    if (len > OPS_MAX_RANK)
        return fail(c, OPS_RULE_ATTR, c->out, "attribute '%s' has %zu entries; at most %d", key,
                    len, OPS_MAX_RANK);
    for (size_t i = 0; i < len; i++) {
        int rc = attr_int(c, key, json_array_get(v, i), &vals[i]);
        if (rc < 0)
            return rc;
    }
    *n = (int)len;
    return 0;
}

/* conv2d stride/padding/dilation: one integer for both axes, or [h, w]. */
/* An integer (the same for every spatial dimension) or a list of n of them. */
static int attr_ints(dec *c, const char *key, const json_t *v, int *out, int n)
{
    if (json_is_integer(v)) {
        int rc = attr_int(c, key, v, &out[0]);
        for (int i = 1; i < n; i++)
            out[i] = out[0];
        return rc;
    }
    if (!json_is_array(v) || json_array_size(v) != (size_t)n)
        return fail(c, OPS_RULE_ATTR, c->out, "attribute '%s' must be an integer or %s", key,
                    n == 3 ? "[d, h, w]" : "[h, w]");
    for (int i = 0; i < n; i++) {
        int rc = attr_int(c, key, json_array_get(v, (size_t)i), &out[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* A number, or "inf" / "-inf" (which JSON cannot spell as a number): slice's fill. */
static int attr_fill(dec *c, const char *key, const json_t *v, double *out)
{
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    if (s && (strcmp(s, "inf") == 0 || strcmp(s, "-inf") == 0)) {
        *out = s[0] == '-' ? -INFINITY : INFINITY;
        return 0;
    }
    if (!json_is_number(v))
        return fail(c, OPS_RULE_ATTR, c->out,
                    "attribute '%s' must be a number, \"inf\" or \"-inf\"", key);
    *out = json_number_value(v);
    return 0;
}

static int attr_shape(dec *c, const char *key, const json_t *v, ops_shape *out)
{
    if (!json_is_array(v))
        return fail(c, OPS_RULE_ATTR, c->out, "attribute '%s' must be a list of dimensions", key);
    if (json_array_size(v) > OPS_MAX_RANK)
        return fail(c, OPS_RULE_ATTR, c->out, "attribute '%s' has rank %zu; the maximum is %d", key,
                    json_array_size(v), OPS_MAX_RANK);
    out->rank = (int)json_array_size(v);
    for (size_t i = 0; i < json_array_size(v); i++) {
        int rc = decode_dim(c, json_array_get(v, i), true, OPS_RULE_ATTR, OPS_RULE_ATTR, c->out,
                            "attribute 'shape'", i, &out->d[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int decode_attr(dec *c, ops_op op, const char *key, const json_t *v, ops_attrs *a,
                       unsigned *seen)
{
#define IS(name) (strcmp(key, name) == 0)
    switch (op) {
    case OPS_LEAKY_RELU:
        if (IS("alpha"))
            return attr_num(c, key, v, &a->alpha);
        break;
    case OPS_HARDTANH:
    case OPS_CLAMP:
        if (IS("min")) {
            *seen |= SEEN_MIN;
            return attr_num(c, key, v, &a->lo);
        }
        if (IS("max")) {
            *seen |= SEEN_MAX;
            return attr_num(c, key, v, &a->hi);
        }
        break;
    case OPS_CAST:
        if (IS("dtype")) {
            *seen |= SEEN_REQUIRED;
            return decode_dtype(c, c->out, "cast", OPS_RULE_ATTR, v, &a->to);
        }
        break;
    case OPS_REDUCE_SUM:
    case OPS_REDUCE_MEAN:
    case OPS_REDUCE_MAX:
    case OPS_REDUCE_MIN:
        if (IS("axes")) {
            *seen |= SEEN_REQUIRED;
            return attr_int_list(c, key, v, a->axes, &a->n_axes);
        }
        if (IS("keepdim"))
            return attr_bool(c, key, v, &a->keepdim);
        break;
    case OPS_LOGSUMEXP:
        if (IS("keepdim"))
            return attr_bool(c, key, v, &a->keepdim);
        /* fall through */
    case OPS_SOFTMAX:
    case OPS_LOG_SOFTMAX:
    case OPS_CUMSUM:
    case OPS_CUMPROD:
        if (IS("axis"))
            return attr_int(c, key, v, &a->axis);
        break;
    case OPS_LAYERNORM:
    case OPS_RMSNORM:
        if (IS("axis"))
            return attr_int(c, key, v, &a->axis);
        if (IS("eps"))
            return attr_num(c, key, v, &a->eps);
        break;
    case OPS_MATMUL:
        if (IS("transpose_a"))
            return attr_bool(c, key, v, &a->transpose_a);
        if (IS("transpose_b"))
            return attr_bool(c, key, v, &a->transpose_b);
        break;
    case OPS_CONV2D:
    case OPS_CONV3D:
        if (IS("stride"))
            return attr_ints(c, key, v, a->stride, ops_conv_spatial(op));
        if (IS("padding"))
            return attr_ints(c, key, v, a->padding, ops_conv_spatial(op));
        if (IS("dilation"))
            return attr_ints(c, key, v, a->dilation, ops_conv_spatial(op));
        if (IS("input_dilation"))
            return attr_ints(c, key, v, a->input_dilation, ops_conv_spatial(op));
        if (IS("end_padding"))
            return attr_ints(c, key, v, a->end_padding, ops_conv_spatial(op));
        if (IS("groups"))
            return attr_int(c, key, v, &a->groups);
        if (IS("layout")) {
            const char *s = json_is_string(v) ? json_string_value(v) : "";
            if (strcmp(s, "NCHW") == 0)
                a->layout = OPS_LAYOUT_NCHW;
            else if (strcmp(s, "NHWC") == 0)
                a->layout = OPS_LAYOUT_NHWC;
            else
                return fail(c, OPS_RULE_ATTR, c->out,
                            "attribute 'layout' must be \"NCHW\" or \"NHWC\"");
            return 0;
        }
        break;
    case OPS_ATTENTION:
        if (IS("scale")) {
            a->has_scale = true;
            return attr_num(c, key, v, &a->scale);
        }
        if (IS("causal"))
            return attr_bool(c, key, v, &a->causal);
        break;
    case OPS_TRANSPOSE:
    case OPS_PERMUTE:
        if (IS("perm")) {
            *seen |= SEEN_REQUIRED;
            return attr_int_list(c, key, v, a->perm, &a->n_perm);
        }
        break;
    case OPS_RESHAPE:
        if (IS("shape")) {
            *seen |= SEEN_REQUIRED;
            return attr_shape(c, key, v, &a->shape);
        }
        break;
    case OPS_SLICE:
        if (IS("shape")) {
            *seen |= SEEN_REQUIRED;
            return attr_shape(c, key, v, &a->shape);
        }
        if (IS("start"))
            return attr_int_list(c, key, v, a->start, &a->n_start);
        if (IS("step"))
            return attr_int_list(c, key, v, a->step, &a->n_step);
        if (IS("fill")) {
            a->has_fill = true;
            return attr_fill(c, key, v, &a->fill);
        }
        break;
    default:
        break;
    }
#undef IS
    return fail(c, OPS_RULE_ATTR, c->out, "unknown attribute '%s' for %s", KT_ESC(key), c->op);
}

static const char *required_attr(ops_op op)
{
    switch (op) {
    case OPS_CAST:
        return "dtype";
    case OPS_REDUCE_SUM:
    case OPS_REDUCE_MEAN:
    case OPS_REDUCE_MAX:
    case OPS_REDUCE_MIN:
        return "axes";
    case OPS_PERMUTE:
        return "perm";
    case OPS_RESHAPE:
    case OPS_SLICE:
        return "shape";
    default:
        return NULL;
    }
}

/* First pass over one node: op, arity, attributes, output; scalar operands are stored, tensor
 * operands are resolved by resolve_operands once every output is known. */
static int decode_node(dec *c, int i, const json_t *v)
{
    c->node = i;
    c->op = c->out = NULL;
    if (!json_is_object(v))
        return fail(c, OPS_RULE_SCHEMA, NULL, "node must be an object with out, op and in");
    const json_t *jop = json_object_get(v, "op");
    const json_t *jout = json_object_get(v, "out");
    const json_t *jin = json_object_get(v, "in");
    if (json_is_string(jop))
        c->op = json_string_value(jop);
    if (json_is_string(jout))
        c->out = json_string_value(jout);
    if (!c->op)
        return fail(c, OPS_RULE_SCHEMA, c->out, "node needs \"op\": a string");
    if (!c->out)
        return fail(c, OPS_RULE_SCHEMA, NULL, "node needs \"out\": a tensor name");
    int rc = check_name(c, c->out, "output name", c->out);
    if (rc < 0)
        return rc;
    if (!jin || !json_is_array(jin))
        return fail(c, OPS_RULE_SCHEMA, c->out, "node needs \"in\": a list of operands");
    size_t n_in = json_array_size(jin);
    ops_op op = ops_op_from_name(c->op, n_in > INT_MAX ? INT_MAX : (int)n_in);
    if (op == OPS_OP_INVALID)
        return fail(c, OPS_RULE_UNKNOWN_OP, c->out, "'%s' is not an op", KT_ESC(c->op));
    const ops_op_info *info = ops_op_info_get(op);
    if (n_in < (size_t)info->min_in || n_in > (size_t)info->max_in) {
        if (info->min_in == info->max_in)
            return fail(c, OPS_RULE_ARITY, c->out, "%s takes %d operand%s, got %zu", c->op,
                        info->min_in, info->min_in == 1 ? "" : "s", n_in);
        return fail(c, OPS_RULE_ARITY, c->out, "%s takes %d to %d operands, got %zu", c->op,
                    info->min_in, info->max_in, n_in);
    }

    ops_attrs a;
    ops_attrs_default(op, &a);
    unsigned seen = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val)
    {
        if (strcmp(key, "op") == 0 || strcmp(key, "out") == 0 || strcmp(key, "in") == 0)
            continue;
        rc = decode_attr(c, op, key, val, &a, &seen);
        if (rc < 0)
            return rc;
    }
    const char *req = required_attr(op);
    if (req && !(seen & SEEN_REQUIRED))
        return fail(c, OPS_RULE_ATTR, c->out, "%s needs attribute '%s'", c->op, req);
    if (op == OPS_CLAMP && !(seen & (SEEN_MIN | SEEN_MAX)))
        return fail(c, OPS_RULE_ATTR, c->out, "clamp needs attribute 'min' or 'max' (or both)");

    for (size_t k = 0; k < n_in; k++) {
        const json_t *o = json_array_get(jin, k);
        if (json_is_number(o) && info->kind != OPS_KIND_BINARY)
            return fail(c, OPS_RULE_SCHEMA, c->out,
                        "operand %zu is a number; only binary ops take scalar constants", k);
        if (!json_is_number(o) && !json_is_string(o))
            return fail(c, OPS_RULE_SCHEMA, c->out, "operand %zu must be a tensor name or a number",
                        k);
    }
    if (n_in == 2 && json_is_number(json_array_get(jin, 0)) &&
        json_is_number(json_array_get(jin, 1)))
        return fail(c, OPS_RULE_SCHEMA, c->out, "both operands are numbers; one must be a tensor");

    rc = ops_graph_add_node(c->g, op, c->out, &a);
    if (rc == -EEXIST) {
        int t = ops_graph_find_tensor(c->g, c->out);
        if (c->g->tensors[t].producer < 0)
            return fail(c, OPS_RULE_DUPLICATE, c->out, "'%s' is already a graph input", c->out);
        return fail(c, OPS_RULE_DUPLICATE, c->out, "'%s' is already the output of node %d", c->out,
                    c->g->tensors[t].producer);
    }
    if (rc < 0)
        return rc;
    ops_node *n = &c->g->nodes[rc];
    n->n_in = (int)n_in;
    for (size_t k = 0; k < n_in; k++) {
        const json_t *o = json_array_get(jin, k);
        n->in[k].tensor = json_is_number(o) ? OPS_SCALAR : -2; /* -2: resolved later */
        n->in[k].scalar = json_is_number(o) ? json_number_value(o) : 0.0;
    }
    return 0;
}

static int resolve_operands(dec *c, int i, const json_t *v)
{
    c->node = i;
    c->op = json_string_value(json_object_get(v, "op"));
    c->out = json_string_value(json_object_get(v, "out"));
    const json_t *jin = json_object_get(v, "in");
    ops_node *n = &c->g->nodes[i];
    for (int k = 0; k < n->n_in; k++) {
        if (n->in[k].tensor == OPS_SCALAR)
            continue;
        const char *name = json_string_value(json_array_get(jin, (size_t)k));
        int t = ops_graph_find_tensor(c->g, name);
        if (t < 0)
            return fail(c, OPS_RULE_UNDEFINED, name,
                        "operand %d '%s' is neither a graph input nor a node output", k,
                        KT_ESC(name));
        n->in[k].tensor = t;
    }
    return 0;
}

int ops__graph_from_tree(const json_t *root, ops_graph **out, ops_diag *d)
{
    *out = NULL;
    dec c = {.d = d, .node = -1};
    if (!json_is_object(root))
        return fail(&c, OPS_RULE_SCHEMA, NULL, "a graph must be an object");
    if (!tree_depth_ok(root, 0))
        return ops__syntax_error(d, "document nested deeper than %d levels", OPS_MAX_NESTING);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)root, key, val)
    {
        if (strcmp(key, "name") != 0 && strcmp(key, "inputs") != 0 && strcmp(key, "nodes") != 0 &&
            strcmp(key, "outputs") != 0)
            return fail(&c, OPS_RULE_SCHEMA, NULL,
                        "unknown top-level key '%s' (expected name, inputs, nodes, outputs)",
                        KT_ESC(key));
    }
    const json_t *jname = json_object_get(root, "name");
    const json_t *jinputs = json_object_get(root, "inputs");
    const json_t *jnodes = json_object_get(root, "nodes");
    const json_t *joutputs = json_object_get(root, "outputs");
    if (jname && !json_is_string(jname))
        return fail(&c, OPS_RULE_SCHEMA, NULL, "\"name\" must be a string of at most %d bytes",
                    OPS_MAX_NAME_LEN);
    /* the graph's name may be empty (unnamed); otherwise it is a name like any other */
    if (jname && json_string_length(jname) > 0) {
        int rc = check_name(&c, NULL, "\"name\"", json_string_value(jname));
        if (rc < 0)
            return rc;
    }
    if (!jinputs || !json_is_object(jinputs) || json_object_size(jinputs) == 0)
        return fail(&c, OPS_RULE_SCHEMA, NULL,
                    "\"inputs\" must be a non-empty object of tensor declarations");
    if (!jnodes || !json_is_array(jnodes) || json_array_size(jnodes) == 0)
        return fail(&c, OPS_RULE_SCHEMA, NULL, "\"nodes\" must be a non-empty list of nodes");
    if (!joutputs || !json_is_array(joutputs) || json_array_size(joutputs) == 0)
        return fail(&c, OPS_RULE_SCHEMA, NULL,
                    "\"outputs\" must be a non-empty list of tensor names");
    if (json_object_size(jinputs) + json_array_size(jnodes) > OPS_MAX_GRAPH_TENSORS)
        return fail(&c, OPS_RULE_SCHEMA, NULL, "graph has %zu tensors; at most %d are accepted",
                    json_object_size(jinputs) + json_array_size(jnodes), OPS_MAX_GRAPH_TENSORS);

    int rc = -ENOMEM;
    c.g = ops_graph_new(jname ? json_string_value(jname) : "");
    if (!c.g)
        goto fail;
    json_object_foreach((json_t *)jinputs, key, val)
    {
        rc = decode_input(&c, key, val);
        if (rc < 0)
            goto fail;
    }
    for (size_t i = 0; i < json_array_size(jnodes); i++) {
        rc = decode_node(&c, (int)i, json_array_get(jnodes, i));
        if (rc < 0)
            goto fail;
    }
    for (size_t i = 0; i < json_array_size(jnodes); i++) {
        rc = resolve_operands(&c, (int)i, json_array_get(jnodes, i));
        if (rc < 0)
            goto fail;
    }
    c.node = -1;
    c.op = c.out = NULL;
    for (size_t i = 0; i < json_array_size(joutputs); i++) {
        const json_t *o = json_array_get(joutputs, i);
        if (!json_is_string(o)) {
            rc = fail(&c, OPS_RULE_SCHEMA, NULL, "\"outputs\" entry %zu must be a tensor name", i);
            goto fail;
        }
        const char *name = json_string_value(o);
        int t = ops_graph_find_tensor(c.g, name);
        if (t < 0) {
            rc = fail(&c, OPS_RULE_UNDEFINED, name, "graph output '%s' is not defined",
                      KT_ESC(name));
            goto fail;
        }
        rc = ops_graph_mark_output(c.g, t);
        if (rc == -EEXIST) {
            rc = fail(&c, OPS_RULE_DUPLICATE, name, "graph output '%s' is listed twice", name);
            goto fail;
        }
        if (rc < 0)
            goto fail;
    }
    *out = c.g;
    return 0;
fail:
    if (rc == -ENOMEM && d)
        ops_diag_set(d, NULL, OPS_RULE_NONE, -1, NULL, "out of memory reading the graph");
    ops_graph_free(c.g);
    return rc;
}

/* ---- encoding ---- */

typedef struct enc {
    bool bad;   /* a value could not be written (non-finite, bad index) */
    bool nomem; /* an allocation failed */
} enc;

static void put(enc *e, json_t *obj, const char *key, json_t *v)
{
    if (!v || json_object_set_new(obj, key, v) < 0)
        e->nomem = true;
}

static void append(enc *e, json_t *arr, json_t *v)
{
    if (!v || json_array_append_new(arr, v) < 0)
        e->nomem = true;
}

static json_t *real(enc *e, double x)
{
    if (!isfinite(x)) {
        e->bad = true;
        return json_null();
    }
    return json_real(x);
}

static json_t *dim_value(enc *e, const ops_graph *g, const ops_dim *dim)
{
    if (dim->sym >= 0) {
        if (dim->sym >= g->n_syms) {
            e->bad = true;
            return json_null();
        }
        return json_string(g->syms[dim->sym]);
    }
    return json_integer(dim->size);
}

static json_t *shape_value(enc *e, const ops_graph *g, const ops_shape *s)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    if (s->rank < 0 || s->rank > OPS_MAX_RANK)
        e->bad = true;
    for (int i = 0; i < s->rank && i < OPS_MAX_RANK; i++)
        append(e, arr, dim_value(e, g, &s->d[i]));
    return arr;
}

static json_t *int_list(enc *e, const int *v, int n)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    for (int i = 0; i < n && i < OPS_MAX_RANK; i++)
        append(e, arr, json_integer(v[i]));
    return arr;
}

/* Every attribute relevant to the op, in a fixed order; see docs/formats.md (part 1). */
static void encode_attrs(enc *e, const ops_graph *g, const ops_node *n, json_t *o)
{
    const ops_attrs *a = &n->attrs;
    switch (n->op) {
    case OPS_LEAKY_RELU:
        put(e, o, "alpha", real(e, a->alpha));
        break;
    case OPS_HARDTANH:
        put(e, o, "min", real(e, a->lo));
        put(e, o, "max", real(e, a->hi));
        break;
    case OPS_CLAMP:
        /* An absent side is the matching infinity, which JSON cannot spell. */
        if (a->lo != -INFINITY)
            put(e, o, "min", real(e, a->lo));
        if (a->hi != INFINITY)
            put(e, o, "max", real(e, a->hi));
        break;
    case OPS_CAST:
        if (a->to != OPS_DT_F32 && a->to != OPS_DT_F16 && a->to != OPS_DT_BF16)
            e->bad = true;
        put(e, o, "dtype", json_string(ops_dtype_name(a->to)));
        break;
    case OPS_REDUCE_SUM:
    case OPS_REDUCE_MEAN:
    case OPS_REDUCE_MAX:
    case OPS_REDUCE_MIN:
        put(e, o, "axes", int_list(e, a->axes, a->n_axes));
        put(e, o, "keepdim", json_boolean(a->keepdim));
        break;
    case OPS_SOFTMAX:
    case OPS_LOG_SOFTMAX:
    case OPS_CUMSUM:
    case OPS_CUMPROD:
        put(e, o, "axis", json_integer(a->axis));
        break;
    case OPS_LOGSUMEXP:
        put(e, o, "axis", json_integer(a->axis));
        put(e, o, "keepdim", json_boolean(a->keepdim));
        break;
    case OPS_LAYERNORM:
    case OPS_RMSNORM:
        put(e, o, "axis", json_integer(a->axis));
        put(e, o, "eps", real(e, a->eps));
        break;
    case OPS_MATMUL:
        put(e, o, "transpose_a", json_boolean(a->transpose_a));
        put(e, o, "transpose_b", json_boolean(a->transpose_b));
        break;
    case OPS_CONV2D:
    case OPS_CONV3D: {
        int nd = ops_conv_spatial(n->op);
        bool idil = false, endpad = false;
        for (int i = 0; i < nd; i++) {
            idil |= a->input_dilation[i] != 1;
            endpad |= a->end_padding[i] != 0;
        }
        put(e, o, "stride", int_list(e, a->stride, nd));
        put(e, o, "padding", int_list(e, a->padding, nd));
        put(e, o, "dilation", int_list(e, a->dilation, nd));
        /* only when set: a graph without them reads as before */
        if (idil)
            put(e, o, "input_dilation", int_list(e, a->input_dilation, nd));
        if (endpad)
            put(e, o, "end_padding", int_list(e, a->end_padding, nd));
        put(e, o, "groups", json_integer(a->groups));
        put(e, o, "layout", json_string(a->layout == OPS_LAYOUT_NHWC ? "NHWC" : "NCHW"));
        break;
    }
    case OPS_ATTENTION:
        if (a->has_scale)
            put(e, o, "scale", real(e, a->scale));
        put(e, o, "causal", json_boolean(a->causal));
        break;
    case OPS_TRANSPOSE:
        if (a->n_perm > 0)
            put(e, o, "perm", int_list(e, a->perm, a->n_perm));
        break;
    case OPS_PERMUTE:
        put(e, o, "perm", int_list(e, a->perm, a->n_perm));
        break;
    case OPS_RESHAPE:
        put(e, o, "shape", shape_value(e, g, &a->shape));
        break;
    case OPS_SLICE:
        put(e, o, "shape", shape_value(e, g, &a->shape));
        put(e, o, "start", int_list(e, a->start, a->shape.rank));
        put(e, o, "step", int_list(e, a->step, a->shape.rank));
        if (a->has_fill)
            put(e, o, "fill", isinf(a->fill) ? json_string(a->fill < 0 ? "-inf" : "inf")
                                             : real(e, a->fill));
        break;
    default:
        break;
    }
}

static json_t *encode_node(enc *e, const ops_graph *g, const ops_node *n)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    if (n->op <= OPS_OP_INVALID || n->op >= OPS_OP_COUNT || n->out < 0 || n->out >= g->n_tensors ||
        n->n_in < 0 || n->n_in > OPS_MAX_OPERANDS) {
        e->bad = true;
        return o;
    }
    put(e, o, "out", json_string(g->tensors[n->out].name));
    put(e, o, "op", json_string(ops_op_info_get(n->op)->name));
    json_t *in = json_array();
    put(e, o, "in", in);
    for (int k = 0; in && k < n->n_in; k++) {
        int32_t t = n->in[k].tensor;
        if (t == OPS_SCALAR)
            append(e, in, real(e, n->in[k].scalar));
        else if (t >= 0 && t < g->n_tensors)
            append(e, in, json_string(g->tensors[t].name));
        else
            e->bad = true;
    }
    encode_attrs(e, g, n, o);
    return o;
}

int ops__graph_to_tree(const ops_graph *g, json_t **out)
{
    enc e = {0};
    *out = NULL;
    json_t *root = json_object();
    if (!root)
        return -ENOMEM;
    put(&e, root, "name", json_string(g->name ? g->name : ""));
    json_t *inputs = json_object();
    put(&e, root, "inputs", inputs);
    for (int i = 0; inputs && i < g->n_tensors; i++) {
        const ops_tensor *t = &g->tensors[i];
        if (t->producer >= 0)
            continue;
        json_t *decl = json_object();
        put(&e, inputs, t->name, decl);
        if (!decl)
            continue;
        if (t->dtype != OPS_DT_F32 && t->dtype != OPS_DT_F16 && t->dtype != OPS_DT_BF16)
            e.bad = true;
        put(&e, decl, "dtype", json_string(ops_dtype_name(t->dtype)));
        put(&e, decl, "shape", shape_value(&e, g, &t->shape));
        if (t->is_const)
            put(&e, decl, "const", json_true());
    }
    json_t *nodes = json_array();
    put(&e, root, "nodes", nodes);
    for (int i = 0; nodes && i < g->n_nodes; i++)
        append(&e, nodes, encode_node(&e, g, &g->nodes[i]));
    json_t *outputs = json_array();
    put(&e, root, "outputs", outputs);
    for (int i = 0; outputs && i < g->n_outputs; i++) {
        if (g->outputs[i] < 0 || g->outputs[i] >= g->n_tensors) {
            e.bad = true;
            continue;
        }
        append(&e, outputs, json_string(g->tensors[g->outputs[i]].name));
    }
    if (e.nomem || e.bad) {
        json_decref(root);
        return e.nomem ? -ENOMEM : -EINVAL;
    }
    *out = root;
    return 0;
}

/* ---- JSON text ---- */

typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool nomem;
} strbuf;

static void sb_putn(strbuf *b, const char *s, size_t n)
{
    if (b->nomem)
        return;
    if (kt_grow(&b->p, &b->cap, b->len + n + 1, 1) < 0) {
        b->nomem = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

static void sb_indent(strbuf *b, int level)
{
    for (int i = 0; i < level; i++)
        sb_puts(b, "  ");
}

static void emit_string(strbuf *b, const char *s, size_t n)
{
    sb_putn(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            sb_putn(b, esc, 2);
        } else if (ch < 0x20 || ch == 0x7f) {
            snprintf(esc, sizeof(esc), "\\u%04x", ch);
            sb_puts(b, esc);
        } else {
            sb_putn(b, (const char *)&s[i], 1);
        }
    }
    sb_putn(b, "\"", 1);
}

/* The shortest %g text that reads back to the same double, always with '.' or an exponent so
 * it reads back as a real. */
static void emit_real(strbuf *b, double x)
{
    char txt[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(txt, sizeof(txt), "%.*g", prec, x);
        if (strtod(txt, NULL) == x)
            break;
    }
    if (!strpbrk(txt, ".eEn"))
        strcat(txt, ".0");
    sb_puts(b, txt);
}

static bool has_container(const json_t *v)
{
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            const json_t *x = json_array_get(v, i);
            if (json_is_array(x) || json_is_object(x))
                return true;
        }
        return false;
    }
    const char *key;
    json_t *x;
    json_object_foreach((json_t *)v, key, x) if (json_is_array(x) || json_is_object(x)) return true;
    return false;
}

/* Containers of containers at the top two levels go one entry per line; the rest stays on one
 * line, so each input declaration and each node is one line. */
static void emit_value(strbuf *b, const json_t *v, int level)
{
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT:
    case JSON_ARRAY: {
        bool obj = json_is_object(v);
        size_t n = obj ? json_object_size(v) : json_array_size(v);
        bool multi = level < 2 && n > 0 && has_container(v);
        sb_puts(b, obj ? "{" : "[");
        size_t i = 0;
        void *it = obj ? json_object_iter((json_t *)v) : NULL;
        for (; i < n; i++) {
            if (i)
                sb_puts(b, ",");
            if (multi) {
                sb_puts(b, "\n");
                sb_indent(b, level + 1);
            } else if (i) {
                sb_puts(b, " ");
            }
            const json_t *x;
            if (obj) {
                const char *key = json_object_iter_key(it);
                emit_string(b, key, strlen(key));
                sb_puts(b, ": ");
                x = json_object_iter_value(it);
                it = json_object_iter_next((json_t *)v, it);
            } else {
                x = json_array_get(v, i);
            }
            emit_value(b, x, level + 1);
        }
        if (multi) {
            sb_puts(b, "\n");
            sb_indent(b, level);
        }
        sb_puts(b, obj ? "}" : "]");
        break;
    }
    case JSON_STRING:
        emit_string(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
        sb_puts(b, num);
        break;
    case JSON_REAL:
        emit_real(b, json_real_value(v));
        break;
    case JSON_TRUE:
        sb_puts(b, "true");
        break;
    case JSON_FALSE:
        sb_puts(b, "false");
        break;
    case JSON_NULL:
        sb_puts(b, "null");
        break;
    }
}

int ops_graph_to_json(const ops_graph *g, char **out)
{
    *out = NULL;
    json_t *root;
    int rc = ops__graph_to_tree(g, &root);
    if (rc < 0)
        return rc;
    strbuf b = {0};
    emit_value(&b, root, 0);
    sb_puts(&b, "\n");
    json_decref(root);
    if (b.nomem) {
        free(b.p);
        return -ENOMEM;
    }
    *out = b.p;
    return 0;
}

int ops_graph_from_json(const char *text, size_t len, ops_graph **out, ops_diag *d)
{
    *out = NULL;
    if (len > OPS_MAX_GRAPH_BYTES)
        return ops__syntax_error(d, "graph text is %zu bytes; at most %u are accepted", len,
                                 OPS_MAX_GRAPH_BYTES);
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return ops__syntax_error(d, "line %d, column %d: %s", err.line, err.column, err.text);
    int rc = ops__graph_from_tree(root, out, d);
    json_decref(root);
    return rc;
}

int ops_graph_from_json_file(const char *path, ops_graph **out, ops_diag *d)
{
    *out = NULL;
    kt_err err = {0};
    char *text = NULL;
    size_t len = 0;
    int rc = kt_read_file(path, OPS_MAX_GRAPH_BYTES, &text, &len, &err);
    if (rc < 0) {
        if (d) {
            ops_diag_set(d, NULL, OPS_RULE_NONE, -1, NULL, "%s", err.msg);
            snprintf(d->msg, sizeof(d->msg), "%s", err.msg);
        }
        return rc;
    }
    rc = ops_graph_from_json(text, len, out, d);
    free(text);
    return rc;
}
