/* Validation and shape inference, binding, and canonicalisation. Invalid graphs come from a table
 * (one cmocka test each) that names the rule, node, tensor and a piece of the message expected;
 * positive tests check the inferred dtype and shape of every op family. Graphs are JSON written
 * with single quotes, turned into double quotes before parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

#define GRAPH(inputs, nodes, outputs)                                                              \
    "{'name': 't', 'inputs': {" inputs "}, 'nodes': [" nodes "], 'outputs': [" outputs "]}"

static char *dq(const char *s)
{
    char *r = strdup(s);
    assert_non_null(r);
    for (char *p = r; *p; p++)
        if (*p == '\'')
            *p = '"';
    return r;
}

/* Parses and validates; returns the graph or NULL with d filled. */
static ops_graph *load(const char *json, int *rc, ops_diag *d)
{
    char *text = dq(json);
    ops_graph *g = NULL;
    memset(d, 0, sizeof(*d));
    *rc = ops_graph_from_json(text, strlen(text), &g, d);
    free(text);
    if (*rc == 0) {
        *rc = ops_graph_validate(g, d);
        if (*rc != 0) {
            ops_graph_free(g);
            g = NULL;
        }
    }
    return g;
}

static ops_graph *load_ok(const char *json)
{
    int rc;
    ops_diag d;
    ops_graph *g = load(json, &rc, &d);
    if (rc != 0)
        print_error("unexpected error: %s\n", d.msg);
    assert_int_equal(rc, 0);
    assert_true(g->validated);
    return g;
}

static const ops_tensor *tensor(const ops_graph *g, const char *name)
{
    int t = ops_graph_find_tensor(g, name);
    assert_true(t >= 0);
    return &g->tensors[t];
}

/* Asserts the shape of a tensor, written like "[M, 8, 64]" (bound symbols as "M=4"). */
static void assert_shape(const ops_graph *g, const char *name, const char *want)
{
    char got[256];
    ops_shape_format(g, &tensor(g, name)->shape, got, sizeof(got));
    if (strcmp(got, want) != 0)
        print_error("%s: shape %s, expected %s\n", name, got, want);
    assert_string_equal(got, want);
}

/* ---- invalid graphs ---- */

typedef struct bad_case {
    const char *name;
    const char *json;
    ops_rule rule;
    int node;
    const char *tensor;
    const char *substr;
} bad_case;

#define X4  "'x': {'dtype': 'f32', 'shape': [4]}"
#define XMK "'x': {'dtype': 'f32', 'shape': ['M', 64]}"

static const bad_case bad_cases[] = {
    {"syntax", "{'inputs': {'x': ", OPS_RULE_SYNTAX, -1, "", "line 1"},
    {"schema_missing_outputs",
     "{'inputs': {" X4 "}, 'nodes': [{'out': 'y', 'op': 'relu', 'in': ['x']}]}", OPS_RULE_SCHEMA,
     -1, "", "\"outputs\""},
    {"output_is_input", GRAPH(X4, "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'y', 'x'"),
     OPS_RULE_SCHEMA, -1, "x", "output 'x' is a graph input: the caller already holds it"},
    {"only_output_is_input", GRAPH(X4, "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'x'"),
     OPS_RULE_SCHEMA, -1, "x", "output 'x' is a graph input"},
    {"unknown_op",
     GRAPH(X4, "{'out': 'a', 'op': 'relu', 'in': ['x']}, {'out': 'y', 'op': 'frob', 'in': ['a']}",
           "'y'"),
     OPS_RULE_UNKNOWN_OP, 1, "y", "'frob' is not an op"},
    {"arity", GRAPH(X4, "{'out': 'y', 'op': 'add', 'in': ['x']}", "'y'"), OPS_RULE_ARITY, 0, "y",
     "add takes 2 operands, got 1"},
    {"dtype_f64",
     GRAPH("'x': {'dtype': 'f64', 'shape': [4]}", "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'y'"),
     OPS_RULE_DTYPE, -1, "x", "f64"},
    {"dtype_mismatch",
     GRAPH(X4 ", 'h': {'dtype': 'f16', 'shape': [4]}",
           "{'out': 'y', 'op': 'add', 'in': ['x', 'h']}", "'y'"),
     OPS_RULE_DTYPE, 0, "h", "'h' is f16 but 'x' is f32"},
    {"broadcast_fixed",
     GRAPH("'t0': {'dtype': 'f16', 'shape': ['M', 256]}, 'bias': {'dtype': 'f16', 'shape': [255]}",
           "{'out': 't1', 'op': 'add', 'in': ['t0', 'bias']}", "'t1'"),
     OPS_RULE_BROADCAST, 0, "bias", "'bias' [255] vs 't0' [M, 256] at axis 1: 256 vs 255"},
    {"broadcast_symbolic",
     GRAPH("'a': {'dtype': 'f32', 'shape': ['M', 8]}, 'b': {'dtype': 'f32', 'shape': ['N', 8]}",
           "{'out': 'y', 'op': 'mul', 'in': ['a', 'b']}", "'y'"),
     OPS_RULE_BROADCAST, 0, "b", "cannot prove M and N equal"},
    {"broadcast_symbol_vs_fixed",
     GRAPH("'a': {'dtype': 'f32', 'shape': ['M']}, 'b': {'dtype': 'f32', 'shape': [8]}",
           "{'out': 'y', 'op': 'sub', 'in': ['a', 'b']}", "'y'"),
     OPS_RULE_BROADCAST, 0, "b", "cannot prove M and 8 equal"},
    {"matmul_rank1",
     GRAPH(XMK ", 'v': {'dtype': 'f32', 'shape': [64]}",
           "{'out': 'y', 'op': 'matmul', 'in': ['x', 'v']}", "'y'"),
     OPS_RULE_SHAPE, 0, "v", "rank >= 2"},
    {"matmul_k_fixed",
     GRAPH("'a': {'dtype': 'f16', 'shape': ['M', 512]}, 'w': {'dtype': 'f16', 'shape': [256, 64]}",
           "{'out': 'y', 'op': 'matmul', 'in': ['a', 'w']}", "'y'"),
     OPS_RULE_CONFLICT_DIM, 0, "w", "512 vs 256"},
    {"matmul_k_symbolic",
     GRAPH("'a': {'dtype': 'f16', 'shape': ['M', 'K']}, 'w': {'dtype': 'f16', 'shape': ['J', 64]}",
           "{'out': 'y', 'op': 'matmul', 'in': ['a', 'w']}", "'y'"),
     OPS_RULE_CONFLICT_DIM, 0, "w", "cannot prove K and J equal"},
    {"matmul_batch",
     GRAPH("'a': {'dtype': 'f32', 'shape': [2, 4, 8]}, 'w': {'dtype': 'f32', 'shape': [3, 8, 4]}",
           "{'out': 'y', 'op': 'matmul', 'in': ['a', 'w']}", "'y'"),
     OPS_RULE_BROADCAST, 0, "w", "2 vs 3"},
    {"softmax_axis", GRAPH(XMK, "{'out': 'y', 'op': 'softmax', 'in': ['x'], 'axis': 2}", "'y'"),
     OPS_RULE_SHAPE, 0, "x", "axis 2 is out of range for 'x' of rank 2"},
    {"conv_weight_rank",
     GRAPH(
         "'x': {'dtype': 'f32', 'shape': [1, 3, 8, 8]}, 'w': {'dtype': 'f32', 'shape': [4, 3, 3]}",
         "{'out': 'y', 'op': 'conv2d', 'in': ['x', 'w']}", "'y'"),
     OPS_RULE_SHAPE, 0, "w", "conv2d weight 'w' is [4, 3, 3]; it must have rank 4"},
    {"conv_unbound_spatial",
     GRAPH(
         "'x': {'dtype': 'f32', 'shape': ['N', 3, 'H', 8]}, 'w': {'dtype': 'f32', 'shape': [4, 3, "
         "3, 3]}",
         "{'out': 'y', 'op': 'conv2d', 'in': ['x', 'w']}", "'y'"),
     OPS_RULE_UNBOUND_DIM, 0, "x", "--shape H="},
    {"conv_channels",
     GRAPH("'x': {'dtype': 'f32', 'shape': [1, 3, 8, 8]}, 'w': {'dtype': 'f32', 'shape': [4, 5, 3, "
           "3]}",
           "{'out': 'y', 'op': 'conv2d', 'in': ['x', 'w']}", "'y'"),
     OPS_RULE_CONFLICT_DIM, 0, "w", "5 vs 3"},
    {"conv_groups",
     GRAPH("'x': {'dtype': 'f32', 'shape': [1, 6, 8, 8]}, 'w': {'dtype': 'f32', 'shape': [4, 2, 3, "
           "3]}",
           "{'out': 'y', 'op': 'conv2d', 'in': ['x', 'w'], 'groups': 4}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "groups 4 does not divide the 6 input channels"},
    {"conv_stride0",
     GRAPH("'x': {'dtype': 'f32', 'shape': [1, 3, 8, 8]}, 'w': {'dtype': 'f32', 'shape': [4, 3, 3, "
           "3]}",
           "{'out': 'y', 'op': 'conv2d', 'in': ['x', 'w'], 'stride': [1, 0]}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "stride must be >= 1, got 0"},
    {"conv_negative_padding",
     GRAPH("'x': {'dtype': 'f32', 'shape': [1, 3, 8, 8]}, 'w': {'dtype': 'f32', 'shape': [4, 3, 3, "
           "3]}",
           "{'out': 'y', 'op': 'conv2d', 'in': ['x', 'w'], 'padding': -1}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "padding must be >= 0, got -1"},
    {"conv_kernel_too_big",
     GRAPH("'x': {'dtype': 'f32', 'shape': [1, 3, 4, 4]}, 'w': {'dtype': 'f32', 'shape': [4, 3, 3, "
           "3]}",
           "{'out': 'y', 'op': 'conv2d', 'in': ['x', 'w'], 'dilation': 3}", "'y'"),
     OPS_RULE_SHAPE, 0, "x", "kernel height spans 7 but the padded input is only 4"},
    {"cycle",
     GRAPH(X4,
           "{'out': 'a', 'op': 'add', 'in': ['x', 'b']}, {'out': 'b', 'op': 'relu', 'in': ['a']}",
           "'b'"),
     OPS_RULE_CYCLE, 0, "a", "b -> a -> b"},
    {"self_loop", GRAPH(X4, "{'out': 'y', 'op': 'mul', 'in': ['x', 'y']}", "'y'"), OPS_RULE_CYCLE,
     0, "y", "y -> y"},
    {"undefined", GRAPH(X4, "{'out': 'y', 'op': 'add', 'in': ['x', 'zz']}", "'y'"),
     OPS_RULE_UNDEFINED, 0, "zz", "'zz' is neither a graph input nor a node output"},
    {"duplicate_node_output",
     GRAPH(X4, "{'out': 'y', 'op': 'relu', 'in': ['x']}, {'out': 'y', 'op': 'exp', 'in': ['x']}",
           "'y'"),
     OPS_RULE_DUPLICATE, 1, "y", "already the output of node 0"},
    {"duplicate_input_name", GRAPH(X4, "{'out': 'x', 'op': 'relu', 'in': ['x']}", "'x'"),
     OPS_RULE_DUPLICATE, 0, "x", "already a graph input"},
    {"duplicate_output", GRAPH(X4, "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'y', 'y'"),
     OPS_RULE_DUPLICATE, -1, "y", "listed twice"},
    {"unused_input",
     GRAPH(X4 ", 'z': {'dtype': 'f32', 'shape': [4]}", "{'out': 'y', 'op': 'relu', 'in': ['x']}",
           "'y'"),
     OPS_RULE_UNUSED, -1, "z", "graph input 'z' reaches no graph output"},
    {"unused_node",
     GRAPH(X4, "{'out': 'y', 'op': 'relu', 'in': ['x']}, {'out': 't', 'op': 'exp', 'in': ['x']}",
           "'y'"),
     OPS_RULE_UNUSED, 1, "t", "'t' reaches no graph output"},
    {"reduce_axis_range", GRAPH(XMK, "{'out': 'y', 'op': 'sum', 'in': ['x'], 'axes': [3]}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "axis 3 is out of range"},
    {"reduce_axis_repeated",
     GRAPH(XMK, "{'out': 'y', 'op': 'mean', 'in': ['x'], 'axes': [1, -1]}", "'y'"), OPS_RULE_ATTR,
     0, "y", "axis -1 is listed twice"},
    {"perm_not_permutation",
     GRAPH(XMK, "{'out': 'y', 'op': 'permute', 'in': ['x'], 'perm': [0, 0]}", "'y'"), OPS_RULE_ATTR,
     0, "y", "perm is not a permutation of 0..1"},
    {"perm_wrong_length",
     GRAPH(XMK, "{'out': 'y', 'op': 'transpose', 'in': ['x'], 'perm': [0, 1, 2]}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "perm has 3 entries but 'x' has rank 2"},
    {"transpose_rank1", GRAPH(X4, "{'out': 'y', 'op': 'transpose', 'in': ['x']}", "'y'"),
     OPS_RULE_SHAPE, 0, "x", "rank >= 2"},
    {"eps_zero", GRAPH(XMK, "{'out': 'y', 'op': 'layernorm', 'in': ['x'], 'eps': 0}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "eps must be positive"},
    {"clamp_min_gt_max",
     GRAPH(X4, "{'out': 'y', 'op': 'clamp', 'in': ['x'], 'min': 2, 'max': 1}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "min 2 is greater than max 1"},
    {"unknown_attribute", GRAPH(X4, "{'out': 'y', 'op': 'softmax', 'in': ['x'], 'dim': -1}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "unknown attribute 'dim' for softmax"},
    {"layernorm_weight_shape",
     GRAPH(XMK ", 'w': {'dtype': 'f32', 'shape': [32]}",
           "{'out': 'y', 'op': 'layernorm', 'in': ['x', 'w']}", "'y'"),
     OPS_RULE_CONFLICT_DIM, 0, "w", "weight 'w' is [32]; it must be x.shape[1:] = [64]"},
    {"rmsnorm_weight_rank",
     GRAPH(XMK ", 'w': {'dtype': 'f32', 'shape': ['M', 64]}",
           "{'out': 'y', 'op': 'rmsnorm', 'in': ['x', 'w']}", "'y'"),
     OPS_RULE_SHAPE, 0, "w", "must be x.shape[1:] = [64]"},
    {"attention_head_dim",
     GRAPH("'q': {'dtype': 'f16', 'shape': ['B', 'S', 64]}, 'k': {'dtype': 'f16', 'shape': ['B', "
           "'S', 32]}, 'v': {'dtype': 'f16', 'shape': ['B', 'S', 64]}",
           "{'out': 'o', 'op': 'attention', 'in': ['q', 'k', 'v']}", "'o'"),
     OPS_RULE_CONFLICT_DIM, 0, "k", "head dimension of k differs from q: 32 vs 64"},
    {"attention_batch",
     GRAPH("'q': {'dtype': 'f16', 'shape': ['B', 'S', 64]}, 'k': {'dtype': 'f16', 'shape': ['C', "
           "'S', 64]}, 'v': {'dtype': 'f16', 'shape': ['B', 'S', 64]}",
           "{'out': 'o', 'op': 'attention', 'in': ['q', 'k', 'v']}", "'o'"),
     OPS_RULE_CONFLICT_DIM, 0, "k", "cannot prove B and C equal"},
    {"attention_gqa_heads",
     GRAPH("'q': {'dtype': 'f16', 'shape': ['B', 32, 'S', 64]}, 'k': {'dtype': 'f16', 'shape': "
           "['B', 12, 'S', 64]}, 'v': {'dtype': 'f16', 'shape': ['B', 12, 'S', 64]}",
           "{'out': 'o', 'op': 'attention', 'in': ['q', 'k', 'v']}", "'o'"),
     OPS_RULE_CONFLICT_DIM, 0, "k", "head count of k neither equals q's nor divides it"},
    {"attention_gqa_kv",
     GRAPH("'q': {'dtype': 'f16', 'shape': ['B', 32, 'S', 64]}, 'k': {'dtype': 'f16', 'shape': "
           "['B', 8, 'S', 64]}, 'v': {'dtype': 'f16', 'shape': ['B', 4, 'S', 64]}",
           "{'out': 'o', 'op': 'attention', 'in': ['q', 'k', 'v']}", "'o'"),
     OPS_RULE_CONFLICT_DIM, 0, "v", "batch dimensions of k and v differ"},
    {"reshape_count",
     GRAPH(XMK, "{'out': 'y', 'op': 'reshape', 'in': ['x'], 'shape': ['M', 32]}", "'y'"),
     OPS_RULE_SHAPE, 0, "x", "element counts differ"},
    {"reshape_unknown_symbol",
     GRAPH(XMK, "{'out': 'y', 'op': 'reshape', 'in': ['x'], 'shape': ['Q', -1]}", "'y'"),
     OPS_RULE_UNBOUND_DIM, 0, "y", "symbol Q, which no graph input uses"},
    {"reshape_two_infer",
     GRAPH(XMK, "{'out': 'y', 'op': 'reshape', 'in': ['x'], 'shape': [-1, -1]}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "more than one -1"},
    {"reshape_unprovable_infer",
     GRAPH(XMK, "{'out': 'y', 'op': 'reshape', 'in': ['x'], 'shape': [-1]}", "'y'"), OPS_RULE_SHAPE,
     0, "x", "the -1 is not a whole dimension"},
    {"cast_f64", GRAPH(X4, "{'out': 'y', 'op': 'cast', 'in': ['x'], 'dtype': 'f64'}", "'y'"),
     OPS_RULE_DTYPE, 0, "y", "f64"},
    {"scalar_in_unary", GRAPH(X4, "{'out': 'y', 'op': 'exp', 'in': [1.5]}", "'y'"), OPS_RULE_SCHEMA,
     0, "y", "only binary ops take scalar constants"},
    {"permute_needs_perm", GRAPH(XMK, "{'out': 'y', 'op': 'permute', 'in': ['x']}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "permute needs attribute 'perm'"},
    {"slice_past_edge_without_fill",
     GRAPH(X4, "{'out': 'y', 'op': 'slice', 'in': ['x'], 'shape': [3], 'start': [2]}", "'y'"),
     OPS_RULE_SHAPE, 0, "y", "reads indices 2..4 of 'x' (size 4); give a fill"},
    {"slice_backwards_past_start",
     GRAPH(X4, "{'out': 'y', 'op': 'slice', 'in': ['x'], 'shape': [2], 'start': [0], "
               "'step': [-1]}",
           "'y'"),
     OPS_RULE_SHAPE, 0, "y", "reads indices 0..-1"},
    {"slice_step_zero",
     GRAPH(X4, "{'out': 'y', 'op': 'slice', 'in': ['x'], 'shape': [2], 'step': [0]}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "step of axis 0 is 0"},
    {"slice_keep_with_start",
     GRAPH(X4, "{'out': 'y', 'op': 'slice', 'in': ['x'], 'shape': [-1], 'start': [1]}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "needs start 0 and step 1"},
    {"slice_rank", GRAPH(X4, "{'out': 'y', 'op': 'slice', 'in': ['x'], 'shape': [2, 2]}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "slice shape has 2 entries but 'x' has rank 1"},
    {"slice_symbolic_size",
     GRAPH(XMK, "{'out': 'y', 'op': 'slice', 'in': ['x'], 'shape': ['M', 2]}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "must be a positive integer, or -1"},
    {"slice_needs_shape", GRAPH(X4, "{'out': 'y', 'op': 'slice', 'in': ['x']}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "slice needs attribute 'shape'"},
    {"slice_fill_word",
     GRAPH(X4, "{'out': 'y', 'op': 'slice', 'in': ['x'], 'shape': [2], 'fill': 'lots'}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "must be a number, \"inf\" or \"-inf\""},
    {"cumsum_axis_out_of_range",
     GRAPH(XMK, "{'out': 'y', 'op': 'cumsum', 'in': ['x'], 'axis': 2}", "'y'"), OPS_RULE_SHAPE,
     0, "x", "axis 2 is out of range for 'x' of rank 2"},
    {"cumprod_unknown_attr",
     GRAPH(XMK, "{'out': 'y', 'op': 'cumprod', 'in': ['x'], 'dim': 1}", "'y'"), OPS_RULE_ATTR, 0,
     "y", "unknown attribute 'dim' for cumprod"},
    {"hardtanh_inverted",
     GRAPH(X4, "{'out': 'y', 'op': 'hardtanh', 'in': ['x'], 'min': 1, 'max': -1}", "'y'"),
     OPS_RULE_ATTR, 0, "y", "greater than max"},
    {"error_names_later_node",
     GRAPH(XMK ", 'w': {'dtype': 'f32', 'shape': [64, 8]}",
           "{'out': 'h', 'op': 'matmul', 'in': ['x', 'w']}, {'out': 'r', 'op': 'relu', 'in': "
           "['h']},"
           "{'out': 'y', 'op': 'add', 'in': ['r', 'x']}",
           "'y'"),
     OPS_RULE_BROADCAST, 2, "x", "'x' [M, 64] vs 'r' [M, 8] at axis 1: 8 vs 64"},
};

static void test_bad_graph(void **state)
{
    const bad_case *c = *state;
    int rc;
    ops_diag d;
    ops_graph *g = load(c->json, &rc, &d);
    if (rc == 0 || d.rule != c->rule || d.node != c->node || strcmp(d.tensor, c->tensor) != 0 ||
        !strstr(d.msg, c->substr))
        print_error("%s: rc %d rule '%s' node %d tensor '%s' msg: %s\n", c->name, rc,
                    ops_rule_name(d.rule), d.node, d.tensor, d.msg);
    assert_null(g);
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(d.rule, c->rule);
    assert_int_equal(d.node, c->node);
    assert_string_equal(d.tensor, c->tensor);
    assert_non_null(strstr(d.msg, c->substr));
    /* the message names the node and the rule */
    if (c->node >= 0) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "node %d (", c->node);
        assert_true(strncmp(d.msg, prefix, strlen(prefix)) == 0);
    }
    assert_non_null(strstr(d.msg, ops_rule_name(c->rule)));
}

/* Rules only a graph built in code can break (JSON cannot spell them). */
static void test_bad_built_graphs(void **state)
{
    (void)state;
    ops_graph *g = ops_graph_new("built");
    ops_shape s = {.rank = 1, .d = {{.size = 4, .sym = OPS_NO_SYM}}};
    assert_int_equal(ops_graph_add_input(g, "x", OPS_DT_F32, &s, false), 0);
    ops_attrs a;
    ops_attrs_default(OPS_LEAKY_RELU, &a);
    a.alpha = INFINITY;
    int n = ops_graph_add_node(g, OPS_LEAKY_RELU, "y", &a);
    g->nodes[n].n_in = 1;
    g->nodes[n].in[0].tensor = 0;
    assert_int_equal(ops_graph_mark_output(g, 1), 0);
    ops_diag d = {0};
    assert_int_equal(ops_graph_validate(g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_ATTR);
    assert_int_equal(d.node, 0);
    assert_non_null(strstr(d.msg, "alpha must be finite"));
    assert_false(g->validated);

    g->nodes[n].attrs.alpha = 0.1;
    g->nodes[n].op = OPS_ADD;
    g->nodes[n].n_in = 2;
    g->nodes[n].in[1] = (ops_operand){.tensor = OPS_SCALAR, .scalar = NAN};
    assert_int_equal(ops_graph_validate(g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SCHEMA);
    assert_non_null(strstr(d.msg, "not finite"));

    g->nodes[n].in[1] = (ops_operand){.tensor = 7};
    assert_int_equal(ops_graph_validate(g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_UNDEFINED);

    g->nodes[n].in[1] = (ops_operand){.tensor = 0};
    g->tensors[0].dtype = OPS_DT_F64;
    assert_int_equal(ops_graph_validate(g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_DTYPE);
    assert_string_equal(d.tensor, "x");

    g->tensors[0].dtype = OPS_DT_BF16;
    assert_int_equal(ops_graph_validate(g, &d), 0);
    assert_int_equal(g->tensors[1].dtype, OPS_DT_BF16);

    /* an output listed twice (ops_graph_mark_output refuses it; the array is poked here): its
     * second slot would never be written */
    ops_attrs_default(OPS_RELU, &a);
    n = ops_graph_add_node(g, OPS_RELU, "z", &a);
    g->nodes[n].n_in = 1;
    g->nodes[n].in[0].tensor = 1;
    assert_int_equal(ops_graph_mark_output(g, 2), 0);
    assert_int_equal(ops_graph_validate(g, &d), 0);
    g->outputs[1] = 1;
    assert_int_equal(ops_graph_validate(g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_DUPLICATE);
    assert_string_equal(d.tensor, "y");
    assert_non_null(strstr(d.msg, "graph output 'y' is listed twice"));
    ops_graph_free(g);
}

/* ---- shape inference ---- */

static void test_broadcasting(void **state)
{
    (void)state;
    ops_graph *g = load_ok(GRAPH("'a': {'dtype': 'f32', 'shape': ['M', 1, 64]},"
                                 "'b': {'dtype': 'f32', 'shape': [8, 1]},"
                                 "'c': {'dtype': 'f32', 'shape': ['M', 8, 64]},"
                                 "'s': {'dtype': 'f32', 'shape': []},"
                                 "'o': {'dtype': 'f32', 'shape': [1]}",
                                 "{'out': 'ab', 'op': 'add', 'in': ['a', 'b']},"
                                 "{'out': 'abc', 'op': 'max', 'in': ['ab', 'c']},"
                                 "{'out': 'r', 'op': 'mul', 'in': ['s', 'abc']},"
                                 "{'out': 'p', 'op': 'pow', 'in': ['r', 2]},"
                                 "{'out': 'q', 'op': 'div', 'in': ['o', 'p']},"
                                 "{'out': 'so', 'op': 'sub', 'in': ['s', 'o']}",
                                 "'q', 'so'"));
    assert_shape(g, "ab", "[M, 8, 64]");
    assert_shape(g, "abc", "[M, 8, 64]");
    assert_shape(g, "r", "[M, 8, 64]");
    assert_shape(g, "p", "[M, 8, 64]");
    assert_shape(g, "q", "[M, 8, 64]");
    assert_shape(g, "so", "[1]");
    assert_int_equal(tensor(g, "ab")->shape.d[0].sym, 0);
    assert_int_equal(tensor(g, "q")->dtype, OPS_DT_F32);
    ops_graph_free(g);
}

static void test_unary_and_dtypes(void **state)
{
    (void)state;
    ops_graph *g = load_ok(GRAPH("'x': {'dtype': 'bf16', 'shape': ['B', 3]}",
                                 "{'out': 'g', 'op': 'gelu', 'in': ['x']},"
                                 "{'out': 'c', 'op': 'cast', 'in': ['g'], 'dtype': 'f32'},"
                                 "{'out': 'h', 'op': 'hardtanh', 'in': ['c']},"
                                 "{'out': 'k', 'op': 'clamp', 'in': ['h'], 'min': -0.5}",
                                 "'k'"));
    assert_int_equal(tensor(g, "g")->dtype, OPS_DT_BF16);
    assert_int_equal(tensor(g, "c")->dtype, OPS_DT_F32);
    assert_int_equal(tensor(g, "k")->dtype, OPS_DT_F32);
    assert_shape(g, "k", "[B, 3]");
    ops_graph_free(g);
}

static void test_reductions(void **state)
{
    (void)state;
    ops_graph *g = load_ok(GRAPH("'x': {'dtype': 'f16', 'shape': ['B', 'S', 64]}",
                                 "{'out': 'a', 'op': 'sum', 'in': ['x'], 'axes': [-1]},"
                                 "{'out': 'b', 'op': 'mean', 'in': ['x'], 'axes': [-1], "
                                 "'keepdim': true},"
                                 "{'out': 'c', 'op': 'max', 'in': ['x'], 'axes': [0, 2]},"
                                 "{'out': 'd', 'op': 'min', 'in': ['x'], 'axes': [2, 0, 1], "
                                 "'keepdim': true},"
                                 "{'out': 'e', 'op': 'sum', 'in': ['x'], 'axes': [0, 1, 2]}",
                                 "'a', 'b', 'c', 'd', 'e'"));
    assert_shape(g, "a", "[B, S]");
    assert_shape(g, "b", "[B, S, 1]");
    assert_shape(g, "c", "[S]");
    assert_shape(g, "d", "[1, 1, 1]");
    assert_shape(g, "e", "[]");
    assert_int_equal(tensor(g, "e")->dtype, OPS_DT_F16);
    ops_graph_free(g);
}

static void test_matmul(void **state)
{
    (void)state;
    ops_graph *g = load_ok(GRAPH("'a': {'dtype': 'f16', 'shape': ['M', 'K']},"
                                 "'w': {'dtype': 'f16', 'shape': ['K', 256]},"
                                 "'at': {'dtype': 'f16', 'shape': ['K', 'M']},"
                                 "'wt': {'dtype': 'f16', 'shape': [256, 'K']},"
                                 "'ba': {'dtype': 'f16', 'shape': [2, 1, 'M', 'K']},"
                                 "'bb': {'dtype': 'f16', 'shape': [5, 'K', 16]}",
                                 "{'out': 'p', 'op': 'matmul', 'in': ['a', 'w']},"
                                 "{'out': 'q', 'op': 'matmul', 'in': ['at', 'wt'], "
                                 "'transpose_a': true, 'transpose_b': true},"
                                 "{'out': 'r', 'op': 'matmul', 'in': ['ba', 'bb']},"
                                 "{'out': 's', 'op': 'matmul', 'in': ['a', 'wt'], "
                                 "'transpose_b': true}",
                                 "'p', 'q', 'r', 's'"));
    assert_shape(g, "p", "[M, 256]");
    assert_shape(g, "q", "[M, 256]");
    assert_shape(g, "r", "[2, 5, M, 16]");
    assert_shape(g, "s", "[M, 256]");
    assert_int_equal(tensor(g, "r")->dtype, OPS_DT_F16);
    ops_graph_free(g);
}

static void test_conv2d(void **state)
{
    (void)state;
    ops_graph *g =
        load_ok(GRAPH("'x': {'dtype': 'f32', 'shape': ['N', 3, 32, 32]},"
                      "'w': {'dtype': 'f32', 'shape': [16, 3, 3, 3]},"
                      "'b': {'dtype': 'f32', 'shape': [16]},"
                      "'xh': {'dtype': 'f32', 'shape': ['N', 32, 30, 3]},"
                      "'wh': {'dtype': 'f32', 'shape': [16, 5, 3, 3]},"
                      "'xg': {'dtype': 'f32', 'shape': [1, 8, 10, 10]},"
                      "'wg': {'dtype': 'f32', 'shape': [4, 2, 3, 3]}",
                      "{'out': 'same', 'op': 'conv2d', 'in': ['x', 'w', 'b'], "
                      "'padding': 1},"
                      "{'out': 'strided', 'op': 'conv2d', 'in': ['x', 'w'], 'stride': 2, "
                      "'padding': 1, 'dilation': 2},"
                      "{'out': 'nhwc', 'op': 'conv2d', 'in': ['xh', 'wh', 'b'], "
                      "'layout': 'NHWC', 'stride': [2, 1], 'padding': [2, 0]},"
                      "{'out': 'grouped', 'op': 'conv2d', 'in': ['xg', 'wg'], "
                      "'groups': 4}",
                      "'same', 'strided', 'nhwc', 'grouped'"));
    assert_shape(g, "same", "[N, 16, 32, 32]");
    /* (32 + 2 - 2*2 - 1) / 2 + 1 = 15 */
    assert_shape(g, "strided", "[N, 16, 15, 15]");
    /* H: (32 + 4 - 5) / 2 + 1 = 16; W: (30 - 3) / 1 + 1 = 28; channels last */
    assert_shape(g, "nhwc", "[N, 16, 28, 16]");
    assert_shape(g, "grouped", "[1, 4, 8, 8]");
    ops_graph_free(g);

    /* spatial dims bound by ops_graph_bind are enough */
    int rc;
    ops_diag d;
    g = NULL;
    char *text = dq(GRAPH("'x': {'dtype': 'f32', 'shape': ['N', 3, 'H', 'W']},"
                          "'w': {'dtype': 'f32', 'shape': [8, 3, 3, 3]}",
                          "{'out': 'y', 'op': 'conv2d', 'in': ['x', 'w'], 'padding': 1}", "'y'"));
    assert_int_equal(ops_graph_from_json(text, strlen(text), &g, &d), 0);
    free(text);
    rc = ops_graph_validate(g, &d);
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_UNBOUND_DIM);
    ops_binding b[] = {{"H", 224}, {"W", 112}};
    ops_graph *bound = NULL;
    assert_int_equal(ops_graph_bind(g, b, 2, &bound, &d), 0);
    assert_shape(bound, "y", "[N, 8, 224, 112]");
    assert_string_equal(ops_graph_first_unbound(bound), "N");
    ops_graph_free(bound);
    ops_graph_free(g);
}

static void test_attention(void **state)
{
    (void)state;
    ops_graph *g = load_ok(GRAPH("'q': {'dtype': 'bf16', 'shape': ['B', 8, 'S', 64]},"
                                 "'k': {'dtype': 'bf16', 'shape': ['B', 8, 'T', 64]},"
                                 "'v': {'dtype': 'bf16', 'shape': ['B', 8, 'T', 32]}",
                                 "{'out': 'o', 'op': 'attention', 'in': ['q', 'k', 'v'], "
                                 "'causal': true, 'scale': 0.125}",
                                 "'o'"));
    assert_shape(g, "o", "[B, 8, S, 32]");
    assert_int_equal(tensor(g, "o")->dtype, OPS_DT_BF16);
    ops_graph_free(g);
    /* grouped-query: 32 query heads over 8 k/v heads */
    g = load_ok(GRAPH("'q': {'dtype': 'bf16', 'shape': ['B', 32, 'S', 128]},"
                      "'k': {'dtype': 'bf16', 'shape': ['B', 8, 'T', 128]},"
                      "'v': {'dtype': 'bf16', 'shape': ['B', 8, 'T', 128]}",
                      "{'out': 'o', 'op': 'attention', 'in': ['q', 'k', 'v'], 'causal': true}",
                      "'o'"));
    assert_shape(g, "o", "[B, 32, S, 128]");
    ops_graph_free(g);
}

static void test_layout_ops(void **state)
{
    (void)state;
    ops_graph *g = load_ok(GRAPH("'x': {'dtype': 'f32', 'shape': ['B', 'S', 4, 8]},"
                                 "'m': {'dtype': 'f32', 'shape': ['M', 64]}",
                                 "{'out': 't', 'op': 'transpose', 'in': ['x']},"
                                 "{'out': 't2', 'op': 'transpose', 'in': ['x'], "
                                 "'perm': [1, 0, 2, 3]},"
                                 "{'out': 'p', 'op': 'permute', 'in': ['x'], 'perm': [3, 0, 2, 1]},"
                                 "{'out': 'r1', 'op': 'reshape', 'in': ['x'], "
                                 "'shape': ['B', 'S', -1]},"
                                 "{'out': 'r2', 'op': 'reshape', 'in': ['x'], "
                                 "'shape': [-1, 'S', 32]},"
                                 "{'out': 'r3', 'op': 'reshape', 'in': ['m'], "
                                 "'shape': ['M', 8, 8]},"
                                 "{'out': 'r4', 'op': 'reshape', 'in': ['m'], "
                                 "'shape': [-1, 2, 32]},"
                                 "{'out': 'r5', 'op': 'reshape', 'in': ['x'], "
                                 "'shape': ['S', 'B', 2, 16]}",
                                 "'t', 't2', 'p', 'r1', 'r2', 'r3', 'r4', 'r5'"));
    assert_shape(g, "t", "[B, S, 8, 4]");
    assert_shape(g, "t2", "[S, B, 4, 8]");
    assert_shape(g, "p", "[8, B, 4, S]");
    assert_shape(g, "r1", "[B, S, 32]");
    assert_shape(g, "r2", "[B, S, 32]");
    assert_shape(g, "r3", "[M, 8, 8]");
    assert_shape(g, "r4", "[M, 2, 32]");
    assert_shape(g, "r5", "[S, B, 2, 16]");
    ops_graph_free(g);

    /* flattening a symbol into a fixed size needs numbers: fails unbound, works bound */
    char *text = dq(GRAPH("'m': {'dtype': 'f32', 'shape': ['M', 64]}",
                          "{'out': 'f', 'op': 'reshape', 'in': ['m'], 'shape': [-1]}", "'f'"));
    ops_diag d;
    assert_int_equal(ops_graph_from_json(text, strlen(text), &g, &d), 0);
    free(text);
    assert_int_equal(ops_graph_validate(g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SHAPE);
    ops_binding b = {"M", 3};
    ops_graph *bound = NULL;
    assert_int_equal(ops_graph_bind(g, &b, 1, &bound, &d), 0);
    assert_shape(bound, "f", "[192]");
    ops_graph_free(bound);
    ops_graph_free(g);
}

static void test_slice(void **state)
{
    (void)state;
    /* a flip, a strided window past both edges with a fill, a kept symbolic axis */
    ops_graph *g = load_ok(GRAPH("'x': {'dtype': 'f32', 'shape': ['B', 6]}",
                                 "{'out': 'f', 'op': 'slice', 'in': ['x'], 'shape': [-1, 6], "
                                 "'start': [0, 5], 'step': [1, -1]},"
                                 "{'out': 'w', 'op': 'slice', 'in': ['x'], 'shape': [-1, 4], "
                                 "'start': [0, -2], 'step': [1, 3], 'fill': '-inf'}",
                                 "'f', 'w'"));
    assert_shape(g, "f", "[B, 6]");
    assert_shape(g, "w", "[B, 4]");
    ops_graph_free(g);
    /* a fixed size taken from a symbolic axis is checked once the axis is bound */
    char *text = dq(GRAPH("'m': {'dtype': 'f32', 'shape': ['M', 8]}",
                          "{'out': 's', 'op': 'slice', 'in': ['m'], 'shape': [2, -1], "
                          "'start': [3, 0]}",
                          "'s'"));
    ops_diag d;
    assert_int_equal(ops_graph_from_json(text, strlen(text), &g, &d), 0);
    free(text);
    assert_int_equal(ops_graph_validate(g, &d), 0);
    ops_graph *bound = NULL;
    ops_binding b = {"M", 5};
    assert_int_equal(ops_graph_bind(g, &b, 1, &bound, &d), 0);
    assert_shape(bound, "s", "[2, 8]");
    ops_graph_free(bound);
    b.value = 4;
    assert_int_equal(ops_graph_bind(g, &b, 1, &bound, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SHAPE);
    assert_non_null(strstr(d.msg, "reads indices 3..4 of 'm' (size 4)"));
    ops_graph_free(g);
}

static void test_composites(void **state)
{
    (void)state;
    ops_graph *g = load_ok(GRAPH("'x': {'dtype': 'f16', 'shape': ['B', 'S', 64]},"
                                 "'w': {'dtype': 'f16', 'shape': ['S', 64]},"
                                 "'b': {'dtype': 'f16', 'shape': ['S', 64]},"
                                 "'g': {'dtype': 'f16', 'shape': [64]}",
                                 "{'out': 'sm', 'op': 'softmax', 'in': ['x'], 'axis': 1},"
                                 "{'out': 'ls', 'op': 'log_softmax', 'in': ['sm']},"
                                 "{'out': 'lse', 'op': 'logsumexp', 'in': ['ls'], 'axis': 0},"
                                 "{'out': 'lsek', 'op': 'logsumexp', 'in': ['ls'], "
                                 "'keepdim': true},"
                                 "{'out': 'ln', 'op': 'layernorm', 'in': ['ls', 'w', 'b'], "
                                 "'axis': 1},"
                                 "{'out': 'rn', 'op': 'rmsnorm', 'in': ['ln', 'g'], 'eps': 1e-3}",
                                 "'lse', 'lsek', 'rn'"));
    assert_shape(g, "sm", "[B, S, 64]");
    assert_shape(g, "ls", "[B, S, 64]");
    assert_shape(g, "lse", "[S, 64]");
    assert_shape(g, "lsek", "[B, S, 1]");
    assert_shape(g, "ln", "[B, S, 64]");
    assert_shape(g, "rn", "[B, S, 64]");
    assert_int_equal(tensor(g, "rn")->dtype, OPS_DT_F16);
    ops_graph_free(g);
}

static const char *gemm = GRAPH("'A': {'dtype': 'f16', 'shape': ['M', 512]},"
                                "'W': {'dtype': 'f16', 'shape': [512, 'N'], 'const': true},"
                                "'bias': {'dtype': 'f16', 'shape': ['N'], 'const': true}",
                                "{'out': 't0', 'op': 'matmul', 'in': ['A', 'W']},"
                                "{'out': 't1', 'op': 'add', 'in': ['t0', 'bias']},"
                                "{'out': 'Y', 'op': 'relu', 'in': ['t1']}",
                                "'Y'");

static void test_validate_idempotent(void **state)
{
    (void)state;
    ops_graph *g = load_ok(gemm);
    ops_graph *c = ops_graph_clone(g);
    ops_diag d;
    assert_int_equal(ops_graph_validate(g, &d), 0);
    assert_true(ops_graph_equal(g, c));
    /* node order in the source does not matter */
    ops_graph *r = load_ok(GRAPH("'A': {'dtype': 'f16', 'shape': ['M', 512]},"
                                 "'W': {'dtype': 'f16', 'shape': [512, 'N'], 'const': true},"
                                 "'bias': {'dtype': 'f16', 'shape': ['N'], 'const': true}",
                                 "{'out': 'Y', 'op': 'relu', 'in': ['t1']},"
                                 "{'out': 't1', 'op': 'add', 'in': ['t0', 'bias']},"
                                 "{'out': 't0', 'op': 'matmul', 'in': ['A', 'W']}",
                                 "'Y'"));
    assert_shape(r, "Y", "[M, N]");
    int32_t order[3];
    assert_int_equal(ops_graph_topo_order(r, order, &d), 0);
    assert_int_equal(order[0], 2);
    assert_int_equal(order[1], 1);
    assert_int_equal(order[2], 0);
    ops_graph_free(r);
    ops_graph_free(c);
    ops_graph_free(g);
}

/* ---- binding ---- */

static void test_bind(void **state)
{
    (void)state;
    ops_graph *g = load_ok(gemm);
    assert_string_equal(ops_graph_first_unbound(g), "M");
    ops_binding b[] = {{"M", 1024}, {"N", 256}, {"M", 1024}};
    ops_graph *bound = NULL;
    ops_diag d;
    assert_int_equal(ops_graph_bind(g, b, 3, &bound, &d), 0);
    assert_true(bound->validated);
    assert_null(ops_graph_first_unbound(bound));
    assert_shape(bound, "Y", "[M=1024, N=256]");
    const ops_tensor *y = tensor(bound, "Y");
    assert_int_equal(y->shape.d[0].sym, 0); /* keeps its symbol */
    assert_int_equal(y->shape.d[0].size, 1024);
    assert_int_equal(ops_shape_numel(&y->shape), 1024 * 256);
    /* the source graph is untouched */
    assert_shape(g, "Y", "[M, N]");
    ops_graph_free(bound);

    /* partial binding */
    assert_int_equal(ops_graph_bind(g, b + 1, 1, &bound, &d), 0);
    assert_string_equal(ops_graph_first_unbound(bound), "M");
    assert_shape(bound, "t1", "[M, N=256]");
    /* binding a bound graph again: same value is fine, another conflicts */
    ops_graph *again = NULL;
    assert_int_equal(ops_graph_bind(bound, b + 1, 1, &again, &d), 0);
    ops_graph_free(again);
    ops_binding other = {"N", 128};
    assert_int_equal(ops_graph_bind(bound, &other, 1, &again, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_CONFLICT_DIM);
    assert_non_null(strstr(d.msg, "N is bound twice, to 256 and 128"));
    assert_null(again);
    ops_graph_free(bound);

    ops_binding conflict[] = {{"M", 8}, {"M", 16}};
    assert_int_equal(ops_graph_bind(g, conflict, 2, &bound, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_CONFLICT_DIM);
    assert_non_null(strstr(d.msg, "M is bound twice, to 8 and 16"));
    assert_null(bound);

    ops_binding unknown = {"K", 8};
    assert_int_equal(ops_graph_bind(g, &unknown, 1, &bound, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_CONFLICT_DIM);
    assert_non_null(strstr(d.msg, "cannot bind K: the graph has no symbol of that name "
                                  "(symbols: M, N)"));

    ops_binding zero = {"M", 0};
    assert_int_equal(ops_graph_bind(g, &zero, 1, &bound, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_ATTR);
    assert_non_null(strstr(d.msg, "M=0"));
    ops_binding neg = {"N", -4};
    assert_int_equal(ops_graph_bind(g, &neg, 1, &bound, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_ATTR);
    ops_graph_free(g);
}

static void test_binding_parse(void **state)
{
    (void)state;
    ops_binding b;
    kt_err err = {0};
    char a1[] = "M=1024";
    assert_int_equal(ops_binding_parse(a1, &b, &err), 0);
    assert_string_equal(b.name, "M");
    assert_int_equal(b.value, 1024);
    char a2[] = "seq_len=7";
    assert_int_equal(ops_binding_parse(a2, &b, &err), 0);
    assert_string_equal(b.name, "seq_len");
    assert_int_equal(b.value, 7);
    const char *bad[] = {"M",    "=4",    "M=",  "M=0", "M=-3", "M=12x", "M=99999999999999999999",
                         "1M=4", "M N=4", "M=+4"};
    for (size_t i = 0; i < KT_ARRAY_LEN(bad); i++) {
        char buf[64];
        snprintf(buf, sizeof(buf), "%s", bad[i]);
        err.code = 0;
        assert_int_equal(ops_binding_parse(buf, &b, &err), -EINVAL);
        assert_int_equal(err.code, -EINVAL);
        assert_true(strlen(err.msg) > 0);
        assert_string_equal(buf, bad[i]); /* left intact on error */
    }
}

/* ---- canonicalisation ---- */

static int count_op(const ops_graph *g, ops_op op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].op == op;
    return n;
}

static void assert_no_composites(const ops_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        ops_op_kind k = ops_op_info_get(g->nodes[i].op)->kind;
        assert_int_not_equal(k, OPS_KIND_COMPOSITE);
        assert_int_not_equal(g->nodes[i].op, OPS_TRANSPOSE);
    }
}

static ops_graph *canon_ok(const ops_graph *g)
{
    ops_graph *c = NULL;
    ops_diag d;
    int rc = ops_graph_canonicalize(g, &c, &d);
    if (rc != 0)
        print_error("canonicalize: %s\n", d.msg);
    assert_int_equal(rc, 0);
    assert_true(c->validated);
    assert_no_composites(c);
    /* the count the search's admission uses (srch_graph_admit) agrees with the expansion */
    assert_int_equal(ops_graph_canonical_nodes(g), c->n_nodes);
    /* inputs and outputs keep names, order, dtypes and shapes */
    assert_int_equal(c->n_outputs, g->n_outputs);
    for (int i = 0; i < g->n_outputs; i++) {
        const ops_tensor *a = &g->tensors[g->outputs[i]], *b = &c->tensors[c->outputs[i]];
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->dtype, b->dtype);
        char sa[128], sb[128];
        ops_shape_format(g, &a->shape, sa, sizeof(sa));
        ops_shape_format(c, &b->shape, sb, sizeof(sb));
        assert_string_equal(sa, sb);
    }
    for (int t = 0, k = 0; t < g->n_tensors; t++) {
        if (g->tensors[t].producer >= 0)
            continue;
        assert_string_equal(g->tensors[t].name, c->tensors[k].name);
        assert_int_equal(c->tensors[k].producer, -1);
        k++;
    }
    /* the canonical graph is writable and reads back equal (the written form carries no
     * bindings, so a bound graph reads back with its symbols unbound) */
    char *text = NULL;
    assert_int_equal(ops_graph_to_json(c, &text), 0);
    ops_graph *back = NULL;
    assert_int_equal(ops_graph_from_json(text, strlen(text), &back, &d), 0);
    assert_int_equal(ops_graph_validate(back, &d), 0);
    bool bound = false;
    for (int t = 0; t < c->n_tensors; t++)
        for (int i = 0; i < c->tensors[t].shape.rank; i++)
            bound |= c->tensors[t].shape.d[i].sym >= 0 && c->tensors[t].shape.d[i].size >= 0;
    assert_true(bound || ops_graph_equal(c, back));
    assert_int_equal(back->n_nodes, c->n_nodes);
    free(text);
    ops_graph_free(back);
    return c;
}

static void test_canonicalize_softmax_family(void **state)
{
    (void)state;
    ops_graph *g = load_ok(GRAPH("'x': {'dtype': 'f32', 'shape': ['B', 'S', 64]}",
                                 "{'out': 'y', 'op': 'softmax', 'in': ['x']}", "'y'"));
    ops_graph *c = canon_ok(g);
    assert_int_equal(c->n_nodes, 5);
    assert_int_equal(count_op(c, OPS_REDUCE_MAX), 1);
    assert_int_equal(count_op(c, OPS_SUB), 1);
    assert_int_equal(count_op(c, OPS_EXP), 1);
    assert_int_equal(count_op(c, OPS_REDUCE_SUM), 1);
    assert_int_equal(count_op(c, OPS_DIV), 1);
    const ops_tensor *mx = tensor(c, "y.max");
    const ops_node *mn = &c->nodes[mx->producer];
    assert_int_equal(mn->attrs.n_axes, 1);
    assert_int_equal(mn->attrs.axes[0], 2); /* normalised */
    assert_true(mn->attrs.keepdim);
    assert_shape(c, "y.max", "[B, S, 1]");
    assert_shape(c, "y", "[B, S, 64]");
    assert_int_equal(c->nodes[tensor(c, "y")->producer].op, OPS_DIV);
    ops_graph_free(c);
    ops_graph_free(g);

    g = load_ok(GRAPH("'x': {'dtype': 'f32', 'shape': ['B', 64]}",
                      "{'out': 'ls', 'op': 'log_softmax', 'in': ['x'], 'axis': 0},"
                      "{'out': 'l1', 'op': 'logsumexp', 'in': ['ls']},"
                      "{'out': 'l2', 'op': 'logsumexp', 'in': ['ls'], 'keepdim': true}",
                      "'l1', 'l2'"));
    c = canon_ok(g);
    /* log_softmax 6, logsumexp 7 (a reshape drops the kept axis), keepdim logsumexp 6 */
    assert_int_equal(c->n_nodes, 19);
    assert_int_equal(count_op(c, OPS_LOG), 3);
    assert_int_equal(count_op(c, OPS_RESHAPE), 1);
    assert_int_equal(c->nodes[tensor(c, "ls")->producer].op, OPS_SUB);
    assert_int_equal(c->nodes[tensor(c, "l1")->producer].op, OPS_RESHAPE);
    assert_int_equal(c->nodes[tensor(c, "l2")->producer].op, OPS_ADD);
    assert_shape(c, "l1", "[B]");
    assert_shape(c, "l2", "[B, 1]");
    ops_graph_free(c);
    ops_graph_free(g);
}

static void test_canonicalize_norms(void **state)
{
    (void)state;
    ops_graph *g = load_ok(GRAPH("'x': {'dtype': 'f16', 'shape': ['M', 8, 64]},"
                                 "'w': {'dtype': 'f16', 'shape': [8, 64]},"
                                 "'b': {'dtype': 'f16', 'shape': [8, 64]},"
                                 "'g': {'dtype': 'f16', 'shape': [64]}",
                                 "{'out': 'ln', 'op': 'layernorm', 'in': ['x', 'w', 'b'], "
                                 "'axis': -2, 'eps': 0.001},"
                                 "{'out': 'rn', 'op': 'rmsnorm', 'in': ['ln', 'g']},"
                                 "{'out': 'bare', 'op': 'layernorm', 'in': ['rn']}",
                                 "'bare'"));
    ops_graph *c = canon_ok(g);
    /* layernorm x,w,b: mean, xc, sq, var, eps, rstd, norm, scaled, out = 9;
     * rmsnorm x,w: sq, ms, eps, rstd, norm, out = 6; bare layernorm: 7 */
    assert_int_equal(c->n_nodes, 22);
    assert_int_equal(count_op(c, OPS_RSQRT), 3);
    assert_int_equal(count_op(c, OPS_REDUCE_MEAN), 5);
    const ops_node *mean = &c->nodes[tensor(c, "ln.mean")->producer];
    assert_int_equal(mean->attrs.n_axes, 2);
    assert_int_equal(mean->attrs.axes[0], 1);
    assert_int_equal(mean->attrs.axes[1], 2);
    assert_true(mean->attrs.keepdim);
    assert_shape(c, "ln.mean", "[M, 1, 1]");
    const ops_node *eps = &c->nodes[tensor(c, "ln.eps")->producer];
    assert_int_equal(eps->op, OPS_ADD);
    assert_int_equal(eps->in[1].tensor, OPS_SCALAR);
    assert_true(eps->in[1].scalar == 0.001);
    const ops_node *reps = &c->nodes[tensor(c, "rn.eps")->producer];
    assert_true(reps->in[1].scalar == 1e-6);
    assert_shape(c, "rn.ms", "[M, 8, 1]");
    assert_int_equal(c->nodes[tensor(c, "ln")->producer].op, OPS_ADD);
    assert_int_equal(c->nodes[tensor(c, "rn")->producer].op, OPS_MUL);
    assert_int_equal(tensor(c, "bare")->dtype, OPS_DT_F16);
    ops_graph_free(c);
    ops_graph_free(g);
}

static void test_canonicalize_layout_and_reductions(void **state)
{
    (void)state;
    ops_graph *g = load_ok(GRAPH("'x': {'dtype': 'f32', 'shape': ['B', 4, 8]}",
                                 "{'out': 't', 'op': 'transpose', 'in': ['x']},"
                                 "{'out': 'u', 'op': 'transpose', 'in': ['t'], "
                                 "'perm': [2, 0, 1]},"
                                 "{'out': 's', 'op': 'sum', 'in': ['u'], 'axes': [-1, 0]},"
                                 "{'out': 'y', 'op': 'relu', 'in': ['s']}",
                                 "'y'"));
    ops_graph *c = canon_ok(g);
    /* the sum over axes [0, 2] of two runs: [2], then [0], keeping dims, then a reshape */
    assert_int_equal(c->n_nodes, 6);
    assert_int_equal(count_op(c, OPS_PERMUTE), 2);
    assert_int_equal(count_op(c, OPS_REDUCE_SUM), 2);
    const ops_node *t = &c->nodes[tensor(c, "t")->producer];
    assert_int_equal(t->attrs.n_perm, 3);
    assert_int_equal(t->attrs.perm[0], 0);
    assert_int_equal(t->attrs.perm[1], 2);
    assert_int_equal(t->attrs.perm[2], 1);
    const ops_node *inner = &c->nodes[tensor(c, "s.part")->producer];
    assert_int_equal(inner->attrs.n_axes, 1);
    assert_int_equal(inner->attrs.axes[0], 2);
    assert_true(inner->attrs.keepdim);
    const ops_node *outer = &c->nodes[tensor(c, "s.keep")->producer];
    assert_int_equal(outer->attrs.n_axes, 1);
    assert_int_equal(outer->attrs.axes[0], 0);
    assert_shape(c, "s.keep", "[1, B, 1]");
    assert_int_equal(c->nodes[tensor(c, "s")->producer].op, OPS_RESHAPE);
    assert_shape(c, "y", "[B]");
    /* canonical forms are fixed points */
    ops_graph *cc = canon_ok(c);
    assert_int_equal(cc->n_nodes, c->n_nodes);
    for (int i = 0; i < c->n_nodes; i++)
        assert_int_equal(count_op(cc, c->nodes[i].op), count_op(c, c->nodes[i].op));
    ops_graph_free(cc);
    ops_graph_free(c);
    ops_graph_free(g);
}

static void test_canonicalize_fresh_names_and_errors(void **state)
{
    (void)state;
    /* a user tensor already called "y.max" */
    ops_graph *g = load_ok(GRAPH("'y.max': {'dtype': 'f32', 'shape': [4, 8]}",
                                 "{'out': 'y', 'op': 'softmax', 'in': ['y.max']}", "'y'"));
    ops_graph *c = canon_ok(g);
    assert_int_equal(c->nodes[tensor(c, "y.max.1")->producer].op, OPS_REDUCE_MAX);
    assert_int_equal(tensor(c, "y.max")->producer, -1);
    ops_graph_free(c);
    ops_graph_free(g);

    /* bound graphs canonicalise with their bound shapes */
    g = load_ok(GRAPH("'x': {'dtype': 'f32', 'shape': ['M', 8]}",
                      "{'out': 'y', 'op': 'logsumexp', 'in': ['x']}", "'y'"));
    ops_binding b = {"M", 5};
    ops_graph *bound = NULL;
    ops_diag d;
    assert_int_equal(ops_graph_bind(g, &b, 1, &bound, &d), 0);
    c = canon_ok(bound);
    assert_shape(c, "y", "[M=5]");
    ops_graph_free(c);
    ops_graph_free(bound);
    ops_graph_free(g);

    /* an invalid graph is reported, not canonicalised */
    int rc;
    char *text = dq(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                          "{'out': 'y', 'op': 'softmax', 'in': ['x'], 'axis': 3}", "'y'"));
    assert_int_equal(ops_graph_from_json(text, strlen(text), &g, &d), 0);
    free(text);
    c = (ops_graph *)1;
    rc = ops_graph_canonicalize(g, &c, &d);
    assert_int_equal(rc, -EINVAL);
    assert_null(c);
    assert_int_equal(d.rule, OPS_RULE_SHAPE);
    assert_int_equal(d.node, 0);
    ops_graph_free(g);
}

int main(void)
{
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_bad_built_graphs),
        cmocka_unit_test(test_broadcasting),
        cmocka_unit_test(test_unary_and_dtypes),
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_layout_ops),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_composites),
        cmocka_unit_test(test_validate_idempotent),
        cmocka_unit_test(test_bind),
        cmocka_unit_test(test_binding_parse),
        cmocka_unit_test(test_canonicalize_softmax_family),
        cmocka_unit_test(test_canonicalize_norms),
        cmocka_unit_test(test_canonicalize_layout_and_reductions),
        cmocka_unit_test(test_canonicalize_fresh_names_and_errors),
    };
    enum { N_BAD = KT_ARRAY_LEN(bad_cases), N_FIXED = KT_ARRAY_LEN(fixed) };
    struct CMUnitTest tests[N_BAD + N_FIXED];
    for (size_t i = 0; i < N_BAD; i++)
        tests[i] = (struct CMUnitTest){.name = bad_cases[i].name,
                                       .test_func = test_bad_graph,
                                       .initial_state = (void *)&bad_cases[i]};
    memcpy(tests + N_BAD, fixed, sizeof(fixed));
    return _cmocka_run_group_tests("validate", tests, N_BAD + N_FIXED, NULL, NULL);
}
