/* The JSON and msgpack forms of the op graph: parsing every op with its attributes and defaults,
 * exact round trips (text and structure), JSON <-> msgpack equivalence, and the errors a parser
 * must give for malformed, mistyped, truncated or hostile input. Graphs are embedded as JSON
 * written with single quotes, turned into double quotes before parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/ops.h"

/* ---- helpers ---- */

/* JSON written with ' for " (names never contain quotes). Caller frees. */
static char *dq(const char *s)
{
    char *r = strdup(s);
    assert_non_null(r);
    for (char *p = r; *p; p++)
        if (*p == '\'')
            *p = '"';
    return r;
}

static ops_graph *parse_ok(const char *json)
{
    char *text = dq(json);
    ops_graph *g = NULL;
    ops_diag d = {0};
    int rc = ops_graph_from_json(text, strlen(text), &g, &d);
    if (rc != 0)
        print_error("unexpected parse error: %s\n", d.msg);
    assert_int_equal(rc, 0);
    assert_non_null(g);
    free(text);
    return g;
}

static void parse_fails(const char *json, ops_rule rule, int node, const char *tensor,
                        const char *substr)
{
    char *text = dq(json);
    ops_graph *g = (ops_graph *)1;
    ops_diag d = {0};
    int rc = ops_graph_from_json(text, strlen(text), &g, &d);
    if (rc == 0 || d.rule != rule || d.node != node || !strstr(d.msg, substr))
        print_error("for %s\n got rc %d rule %s node %d tensor '%s': %s\n", text, rc,
                    ops_rule_name(d.rule), d.node, d.tensor, d.msg);
    assert_int_equal(rc, -EINVAL);
    assert_null(g);
    assert_int_equal(d.rule, rule);
    assert_int_equal(d.node, node);
    assert_string_equal(d.tensor, tensor);
    assert_non_null(strstr(d.msg, substr));
    free(text);
}

static int node_of(const ops_graph *g, const char *out)
{
    int t = ops_graph_find_tensor(g, out);
    assert_true(t >= 0);
    assert_true(g->tensors[t].producer >= 0);
    return g->tensors[t].producer;
}

static const ops_attrs *attrs_of(const ops_graph *g, const char *out)
{
    return &g->nodes[node_of(g, out)].attrs;
}

static char *to_json(const ops_graph *g)
{
    char *s = NULL;
    assert_int_equal(ops_graph_to_json(g, &s), 0);
    assert_non_null(s);
    return s;
}

#define GRAPH(inputs, nodes, outputs)                                                              \
    "{'name': 't', 'inputs': {" inputs "}, 'nodes': [" nodes "], 'outputs': [" outputs "]}"

static const char *design_example =
    "{'name': 'gemm_bias_relu',"
    " 'inputs': {'A': {'dtype': 'f16', 'shape': ['M', 512]},"
    "            'W': {'dtype': 'f16', 'shape': [512, 256], 'const': true},"
    "            'bias': {'dtype': 'f16', 'shape': [256], 'const': true}},"
    " 'nodes': [{'out': 't0', 'op': 'matmul', 'in': ['A', 'W']},"
    "           {'out': 't1', 'op': 'add', 'in': ['t0', 'bias']},"
    "           {'out': 'Y', 'op': 'relu', 'in': ['t1']}],"
    " 'outputs': ['Y']}";

/* Every op, most with non-default attributes; also valid for ops_graph_validate. */
static const char *all_ops =
    "{'name': 'all_ops',"
    " 'inputs': {"
    "  'x': {'dtype': 'f32', 'shape': ['B', 'S', 64]},"
    "  'w': {'dtype': 'f32', 'shape': [64, 32], 'const': true},"
    "  'g': {'dtype': 'f32', 'shape': [64], 'const': true},"
    "  'b': {'dtype': 'f32', 'shape': [64], 'const': true},"
    "  'img': {'dtype': 'f16', 'shape': ['N', 3, 16, 16]},"
    "  'k': {'dtype': 'f16', 'shape': [8, 3, 3, 3], 'const': true},"
    "  'kb': {'dtype': 'f16', 'shape': [8], 'const': true},"
    "  'vol': {'dtype': 'f32', 'shape': ['N', 4, 5, 6, 7]},"
    "  'vk': {'dtype': 'f32', 'shape': [6, 2, 3, 2, 3], 'const': true},"
    "  'q': {'dtype': 'bf16', 'shape': ['B', 4, 'S', 16]},"
    "  'kk': {'dtype': 'bf16', 'shape': ['B', 4, 'T', 16]},"
    "  'v': {'dtype': 'bf16', 'shape': ['B', 4, 'T', 8]}},"
    " 'nodes': ["
    "  {'out': 'a0', 'op': 'neg', 'in': ['x']},"
    "  {'out': 'a1', 'op': 'abs', 'in': ['a0']},"
    "  {'out': 'a2', 'op': 'relu', 'in': ['a1']},"
    "  {'out': 'a3', 'op': 'gelu', 'in': ['a2']},"
    "  {'out': 'a4', 'op': 'gelu_tanh', 'in': ['a3']},"
    "  {'out': 'a5', 'op': 'silu', 'in': ['a4']},"
    "  {'out': 'a6', 'op': 'sigmoid', 'in': ['a5']},"
    "  {'out': 'a7', 'op': 'tanh', 'in': ['a6']},"
    "  {'out': 'a8', 'op': 'exp', 'in': ['a7']},"
    "  {'out': 'a9', 'op': 'log', 'in': ['a8']},"
    "  {'out': 'a10', 'op': 'sqrt', 'in': ['a9']},"
    "  {'out': 'a11', 'op': 'rsqrt', 'in': ['a10']},"
    "  {'out': 'a12', 'op': 'square', 'in': ['a11']},"
    "  {'out': 'a13', 'op': 'recip', 'in': ['a12']},"
    "  {'out': 'a14', 'op': 'mish', 'in': ['a13']},"
    "  {'out': 'a15', 'op': 'softplus', 'in': ['a14']},"
    "  {'out': 'a16', 'op': 'hardtanh', 'in': ['a15'], 'min': -2, 'max': 2.5},"
    "  {'out': 'a17', 'op': 'leaky_relu', 'in': ['a16'], 'alpha': 0.2},"
    "  {'out': 'a18', 'op': 'clamp', 'in': ['a17'], 'min': 0},"
    "  {'out': 'a19', 'op': 'cast', 'in': ['a18'], 'dtype': 'f16'},"
    "  {'out': 'a20', 'op': 'cast', 'in': ['a19'], 'dtype': 'f32'},"
    "  {'out': 'b0', 'op': 'add', 'in': ['a20', 'g']},"
    "  {'out': 'b1', 'op': 'sub', 'in': ['b0', 1.5]},"
    "  {'out': 'b2', 'op': 'mul', 'in': [2, 'b1']},"
    "  {'out': 'b3', 'op': 'div', 'in': ['b2', 'b']},"
    "  {'out': 'b4', 'op': 'max', 'in': ['b3', 0]},"
    "  {'out': 'b5', 'op': 'min', 'in': ['b4', 'x']},"
    "  {'out': 'b6', 'op': 'pow', 'in': ['b5', 0.1]},"
    "  {'out': 'r0', 'op': 'sum', 'in': ['b6'], 'axes': [-1], 'keepdim': true},"
    "  {'out': 'r1', 'op': 'mean', 'in': ['b6'], 'axes': [1, 2]},"
    "  {'out': 'r2', 'op': 'max', 'in': ['b6'], 'axes': [0], 'keepdim': true},"
    "  {'out': 'r3', 'op': 'min', 'in': ['b6'], 'axes': [-1]},"
    "  {'out': 'c0', 'op': 'softmax', 'in': ['b6']},"
    "  {'out': 'c1', 'op': 'log_softmax', 'in': ['c0'], 'axis': 1},"
    "  {'out': 'c2', 'op': 'logsumexp', 'in': ['c1'], 'axis': -1, 'keepdim': false},"
    "  {'out': 'c3', 'op': 'layernorm', 'in': ['c1', 'g', 'b'], 'axis': -1, 'eps': 1e-5},"
    "  {'out': 'c4', 'op': 'rmsnorm', 'in': ['c3', 'g']},"
    "  {'out': 'm0', 'op': 'matmul', 'in': ['c4', 'w']},"
    "  {'out': 'm1', 'op': 'matmul', 'in': ['w', 'c4'], 'transpose_a': true,"
    "   'transpose_b': true},"
    "  {'out': 'cv', 'op': 'conv2d', 'in': ['img', 'k', 'kb'], 'stride': 2, 'padding': [1, 0],"
    "   'groups': 1, 'layout': 'NCHW'},"
    "  {'out': 'c3d', 'op': 'conv3d', 'in': ['vol', 'vk'], 'stride': [1, 2, 1], 'padding': 1,"
    "   'input_dilation': [2, 1, 3], 'end_padding': [1, 0, 0], 'groups': 2},"
    "  {'out': 'at', 'op': 'attention', 'in': ['q', 'kk', 'v'], 'scale': 0.25, 'causal': true},"
    "  {'out': 't0', 'op': 'transpose', 'in': ['m0']},"
    "  {'out': 't1', 'op': 'permute', 'in': ['at'], 'perm': [0, 2, 1, 3]},"
    "  {'out': 'rs', 'op': 'reshape', 'in': ['t1'], 'shape': ['B', 'S', -1]},"
    "  {'out': 'sl', 'op': 'slice', 'in': ['vol'], 'shape': [-1, -1, 3, 2, 4],"
    "   'start': [0, 0, 3, -1, 0], 'step': [1, 1, -1, 2, 1], 'fill': '-inf'},"
    "  {'out': 'cs', 'op': 'cumsum', 'in': ['x'], 'axis': 1},"
    "  {'out': 'cp', 'op': 'cumprod', 'in': ['cs']}],"
    " 'outputs': ['r0', 'r1', 'r2', 'r3', 'c2', 'm1', 'cv', 'c3d', 't0', 'rs', 'sl', 'cp']}";

/* ---- parsing ---- */

static void test_design_example(void **state)
{
    (void)state;
    ops_graph *g = parse_ok(design_example);
    assert_string_equal(g->name, "gemm_bias_relu");
    assert_int_equal(g->n_syms, 1);
    assert_string_equal(g->syms[0], "M");
    assert_int_equal(g->n_tensors, 6);
    assert_int_equal(g->n_nodes, 3);
    int a = ops_graph_find_tensor(g, "A"), w = ops_graph_find_tensor(g, "W");
    assert_int_equal(a, 0);
    assert_int_equal(w, 1);
    assert_int_equal(g->tensors[a].dtype, OPS_DT_F16);
    assert_int_equal(g->tensors[a].shape.rank, 2);
    assert_int_equal(g->tensors[a].shape.d[0].sym, 0);
    assert_int_equal(g->tensors[a].shape.d[0].size, -1);
    assert_int_equal(g->tensors[a].shape.d[1].sym, OPS_NO_SYM);
    assert_int_equal(g->tensors[a].shape.d[1].size, 512);
    assert_false(g->tensors[a].is_const);
    assert_true(g->tensors[w].is_const);
    assert_int_equal(g->tensors[a].producer, -1);
    assert_int_equal(g->nodes[0].op, OPS_MATMUL);
    assert_int_equal(g->nodes[1].op, OPS_ADD);
    assert_int_equal(g->nodes[2].op, OPS_RELU);
    assert_int_equal(g->nodes[1].n_in, 2);
    assert_int_equal(g->nodes[1].in[0].tensor, ops_graph_find_tensor(g, "t0"));
    assert_int_equal(g->nodes[1].in[1].tensor, ops_graph_find_tensor(g, "bias"));
    assert_int_equal(g->n_outputs, 1);
    assert_int_equal(g->outputs[0], ops_graph_find_tensor(g, "Y"));
    assert_true(g->tensors[g->outputs[0]].is_output);
    assert_false(g->validated);
    ops_graph_free(g);
}

static void test_every_op_with_attributes(void **state)
{
    (void)state;
    ops_graph *g = parse_ok(all_ops);
    assert_int_equal(g->n_nodes, 48);
    /* each op kind appears, with max/min resolved by operand count */
    bool seen[OPS_OP_COUNT] = {false};
    for (int i = 0; i < g->n_nodes; i++)
        seen[g->nodes[i].op] = true;
    for (int op = 1; op < OPS_OP_COUNT; op++)
        assert_true(seen[op]);
    assert_int_equal(g->nodes[node_of(g, "b4")].op, OPS_MAX);
    assert_int_equal(g->nodes[node_of(g, "r2")].op, OPS_REDUCE_MAX);
    assert_int_equal(g->nodes[node_of(g, "b5")].op, OPS_MIN);
    assert_int_equal(g->nodes[node_of(g, "r3")].op, OPS_REDUCE_MIN);

    assert_true(attrs_of(g, "a16")->lo == -2.0 && attrs_of(g, "a16")->hi == 2.5);
    assert_true(attrs_of(g, "a17")->alpha == 0.2);
    assert_true(attrs_of(g, "a18")->lo == 0.0 && attrs_of(g, "a18")->hi == INFINITY);
    assert_int_equal(attrs_of(g, "a19")->to, OPS_DT_F16);
    assert_int_equal(attrs_of(g, "a20")->to, OPS_DT_F32);
    const ops_attrs *r0 = attrs_of(g, "r0"), *r1 = attrs_of(g, "r1");
    assert_int_equal(r0->n_axes, 1);
    assert_int_equal(r0->axes[0], -1);
    assert_true(r0->keepdim);
    assert_int_equal(r1->n_axes, 2);
    assert_int_equal(r1->axes[1], 2);
    assert_false(r1->keepdim);
    assert_int_equal(attrs_of(g, "c1")->axis, 1);
    assert_false(attrs_of(g, "c2")->keepdim);
    assert_true(attrs_of(g, "c3")->eps == 1e-5);
    assert_true(attrs_of(g, "m1")->transpose_a && attrs_of(g, "m1")->transpose_b);
    assert_false(attrs_of(g, "m0")->transpose_a || attrs_of(g, "m0")->transpose_b);
    const ops_attrs *cv = attrs_of(g, "cv");
    assert_int_equal(cv->stride[0], 2);
    assert_int_equal(cv->stride[1], 2);
    assert_int_equal(cv->padding[0], 1);
    assert_int_equal(cv->padding[1], 0);
    assert_int_equal(cv->dilation[0], 1);
    assert_int_equal(cv->groups, 1);
    assert_int_equal(cv->layout, OPS_LAYOUT_NCHW);
    assert_int_equal(cv->input_dilation[1], 1); /* defaults */
    assert_int_equal(cv->end_padding[0], 0);
    const ops_attrs *c3 = attrs_of(g, "c3d");
    assert_int_equal(c3->stride[1], 2);
    assert_int_equal(c3->padding[2], 1);
    assert_int_equal(c3->input_dilation[2], 3);
    assert_int_equal(c3->end_padding[0], 1);
    assert_int_equal(c3->groups, 2);
    /* output extent: ((I - 1) * idil + 1 + 2 * pad + end_pad - dil * (k - 1) - 1) / stride + 1 */
    ops_graph *vg = ops_graph_clone(g);
    assert_non_null(vg);
    assert_int_equal(ops_graph_validate(vg, NULL), 0);
    const ops_shape *c3s = &vg->tensors[ops_graph_find_tensor(vg, "c3d")].shape;
    assert_int_equal(c3s->rank, 5);
    assert_int_equal(c3s->d[1].size, 6);
    assert_int_equal(c3s->d[2].size, 10); /* (4 * 2 + 1 + 2 + 1 - 3) / 1 + 1 */
    assert_int_equal(c3s->d[3].size, 4);  /* (5 * 1 + 1 + 2 + 0 - 2) / 2 + 1 */
    assert_int_equal(c3s->d[4].size, 19); /* (6 * 3 + 1 + 2 + 0 - 3) / 1 + 1 */
    /* equality sees every spatial entry of the conv attributes */
    ops_graph *other = ops_graph_clone(vg);
    assert_non_null(other);
    assert_true(ops_graph_equal(vg, other));
    other->nodes[node_of(other, "c3d")].attrs.end_padding[2] = 1;
    assert_false(ops_graph_equal(vg, other));
    other->nodes[node_of(other, "c3d")].attrs.end_padding[2] = 0;
    other->nodes[node_of(other, "c3d")].attrs.stride[2] = 2;
    assert_false(ops_graph_equal(vg, other));
    /* slice: -1 keeps the operand's size; a fill reads -inf past the edges */
    const ops_shape *sls = &vg->tensors[ops_graph_find_tensor(vg, "sl")].shape;
    assert_int_equal(sls->rank, 5);
    assert_int_equal(sls->d[1].size, 4);
    assert_int_equal(sls->d[2].size, 3);
    assert_int_equal(sls->d[3].size, 2);
    const ops_attrs *sl = attrs_of(vg, "sl");
    assert_int_equal(sl->start[3], -1);
    assert_int_equal(sl->step[2], -1);
    assert_true(sl->has_fill && sl->fill == -INFINITY);
    assert_int_equal(attrs_of(vg, "cs")->axis, 1);
    assert_int_equal(attrs_of(vg, "cp")->axis, -1); /* the default: the last axis */
    other->nodes[node_of(other, "c3d")].attrs.stride[2] = 1;
    assert_true(ops_graph_equal(vg, other));
    other->nodes[node_of(other, "sl")].attrs.start[3] = 0;
    assert_false(ops_graph_equal(vg, other));
    ops_graph_free(other);
    ops_graph_free(vg);
    assert_true(attrs_of(g, "at")->has_scale && attrs_of(g, "at")->scale == 0.25);
    assert_true(attrs_of(g, "at")->causal);
    assert_int_equal(attrs_of(g, "t0")->n_perm, 0);
    const ops_attrs *t1 = attrs_of(g, "t1");
    assert_int_equal(t1->n_perm, 4);
    assert_int_equal(t1->perm[1], 2);
    const ops_attrs *rs = attrs_of(g, "rs");
    assert_int_equal(rs->shape.rank, 3);
    assert_int_equal(rs->shape.d[0].sym, 0); /* B */
    assert_int_equal(rs->shape.d[1].sym, 1); /* S */
    assert_int_equal(rs->shape.d[2].sym, OPS_NO_SYM);
    assert_int_equal(rs->shape.d[2].size, -1);
    /* scalar operands, on either side */
    const ops_node *b1 = &g->nodes[node_of(g, "b1")], *b2 = &g->nodes[node_of(g, "b2")];
    assert_int_equal(b1->in[1].tensor, OPS_SCALAR);
    assert_true(b1->in[1].scalar == 1.5);
    assert_int_equal(b2->in[0].tensor, OPS_SCALAR);
    assert_true(b2->in[0].scalar == 2.0);
    /* symbols in order of first appearance */
    assert_int_equal(g->n_syms, 4);
    assert_string_equal(g->syms[0], "B");
    assert_string_equal(g->syms[1], "S");
    assert_string_equal(g->syms[2], "N");
    assert_string_equal(g->syms[3], "T");
    ops_diag d = {0};
    assert_int_equal(ops_graph_validate(g, &d), 0);
    ops_graph_free(g);
}

static void test_defaults_applied_and_written(void **state)
{
    (void)state;
    ops_graph *g =
        parse_ok(GRAPH("'x': {'dtype': 'f32', 'shape': [2, 8, 6, 6]}, 'w': {'dtype': 'f32', "
                       "'shape': [4, 8, 3, 3]},"
                       "'q': {'dtype': 'f32', 'shape': [2, 5, 8]}",
                       "{'out': 'l', 'op': 'leaky_relu', 'in': ['x']},"
                       "{'out': 'h', 'op': 'hardtanh', 'in': ['l']},"
                       "{'out': 's', 'op': 'softmax', 'in': ['h']},"
                       "{'out': 'ln', 'op': 'layernorm', 'in': ['s']},"
                       "{'out': 'rn', 'op': 'rmsnorm', 'in': ['ln']},"
                       "{'out': 'c', 'op': 'conv2d', 'in': ['rn', 'w']},"
                       "{'out': 'm', 'op': 'matmul', 'in': ['q', 'q'], 'transpose_b': true},"
                       "{'out': 'a', 'op': 'attention', 'in': ['q', 'q', 'q']},"
                       "{'out': 'lse', 'op': 'logsumexp', 'in': ['a']},"
                       "{'out': 'cl', 'op': 'clamp', 'in': ['lse'], 'max': 6}",
                       "'c', 'm', 'cl'"));
    assert_true(attrs_of(g, "l")->alpha == 0.01);
    assert_true(attrs_of(g, "h")->lo == -1.0 && attrs_of(g, "h")->hi == 1.0);
    assert_int_equal(attrs_of(g, "s")->axis, -1);
    assert_true(attrs_of(g, "ln")->eps == 1e-5);
    assert_int_equal(attrs_of(g, "ln")->axis, -1);
    assert_true(attrs_of(g, "rn")->eps == 1e-6);
    const ops_attrs *c = attrs_of(g, "c");
    assert_int_equal(c->stride[1], 1);
    assert_int_equal(c->padding[0], 0);
    assert_int_equal(c->dilation[1], 1);
    assert_int_equal(c->groups, 1);
    assert_int_equal(c->layout, OPS_LAYOUT_NCHW);
    assert_false(attrs_of(g, "m")->transpose_a);
    assert_false(attrs_of(g, "a")->has_scale);
    assert_false(attrs_of(g, "a")->causal);
    assert_false(attrs_of(g, "lse")->keepdim);
    assert_true(attrs_of(g, "cl")->lo == -INFINITY && attrs_of(g, "cl")->hi == 6.0);

    /* the writer spells every default out, and omits only clamp's absent side */
    char *text = to_json(g);
    assert_non_null(strstr(text, "\"op\": \"leaky_relu\", \"in\": [\"x\"], \"alpha\": 0.01}"));
    assert_non_null(strstr(text, "\"min\": -1.0, \"max\": 1.0"));
    assert_non_null(strstr(text, "\"axis\": -1, \"eps\": 1e-05}"));
    assert_non_null(strstr(text, "\"axis\": -1, \"eps\": 1e-06}"));
    assert_non_null(strstr(text, "\"stride\": [1, 1], \"padding\": [0, 0], \"dilation\": [1, 1], "
                                 "\"groups\": 1, \"layout\": \"NCHW\"}"));
    assert_non_null(strstr(text, "\"transpose_a\": false, \"transpose_b\": true}"));
    assert_non_null(strstr(text, "\"in\": [\"q\", \"q\", \"q\"], \"causal\": false}"));
    assert_non_null(strstr(text, "\"in\": [\"lse\"], \"max\": 6.0}"));
    assert_null(strstr(text, "\"scale\""));
    free(text);
    ops_graph_free(g);
}

static void test_scalar_operands(void **state)
{
    (void)state;
    ops_graph *g = parse_ok(GRAPH("'x': {'dtype': 'f16', 'shape': [4]}",
                                  "{'out': 'y', 'op': 'sub', 'in': [1, 'x']},"
                                  "{'out': 'z', 'op': 'pow', 'in': ['y', -0.5]}",
                                  "'z'"));
    assert_int_equal(g->nodes[0].in[0].tensor, OPS_SCALAR);
    assert_true(g->nodes[0].in[0].scalar == 1.0);
    assert_int_equal(g->nodes[0].in[1].tensor, 0);
    assert_true(g->nodes[1].in[1].scalar == -0.5);
    ops_diag d = {0};
    assert_int_equal(ops_graph_validate(g, &d), 0);
    assert_int_equal(g->tensors[g->outputs[0]].dtype, OPS_DT_F16);
    assert_int_equal(g->tensors[g->outputs[0]].shape.rank, 1);
    ops_graph_free(g);

    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'add', 'in': [1, 2]}", "'y'"),
                OPS_RULE_SCHEMA, 0, "y", "both operands are numbers");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'relu', 'in': [3]}", "'y'"),
                OPS_RULE_SCHEMA, 0, "y", "only binary ops take scalar constants");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'add', 'in': ['x', true]}", "'y'"),
                OPS_RULE_SCHEMA, 0, "y", "operand 1 must be a tensor name or a number");
}

static void test_symbolic_and_scalar_shapes(void **state)
{
    (void)state;
    ops_graph *g = parse_ok(GRAPH("'x': {'dtype': 'bf16', 'shape': ['batch_1', 'Seq', 'batch_1']},"
                                  "'s': {'dtype': 'bf16', 'shape': []}",
                                  "{'out': 'y', 'op': 'mul', 'in': ['x', 's']}", "'y'"));
    assert_int_equal(g->n_syms, 2);
    assert_string_equal(g->syms[0], "batch_1");
    assert_string_equal(g->syms[1], "Seq");
    const ops_shape *x = &g->tensors[0].shape;
    assert_int_equal(x->d[0].sym, 0);
    assert_int_equal(x->d[2].sym, 0);
    assert_int_equal(x->d[1].sym, 1);
    assert_int_equal(g->tensors[1].shape.rank, 0);
    char *text = to_json(g);
    assert_non_null(strstr(text, "\"shape\": [\"batch_1\", \"Seq\", \"batch_1\"]"));
    assert_non_null(strstr(text, "\"shape\": []"));
    free(text);
    ops_graph_free(g);

    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': ['1M']}",
                      "{'out': 'y', 'op': 'relu', "
                      "'in': ['x']}",
                      "'y'"),
                OPS_RULE_SCHEMA, -1, "x", "is not a symbol name");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4, 0]}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'y'"),
                OPS_RULE_SHAPE, -1, "x", "dimension 1 is 0");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [1, 1, 1, 1, 1, 1, 1, 1, 1]}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'y'"),
                OPS_RULE_SHAPE, -1, "x", "rank 9");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [2.5]}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'y'"),
                OPS_RULE_SCHEMA, -1, "x", "must be a positive integer or a symbol name");
}

/* ---- round trips ---- */

static void check_json_round_trip(const ops_graph *g)
{
    char *t1 = to_json(g);
    ops_graph *g2 = NULL;
    ops_diag d = {0};
    assert_int_equal(ops_graph_from_json(t1, strlen(t1), &g2, &d), 0);
    assert_true(ops_graph_equal(g, g2));
    char *t2 = to_json(g2);
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);
    ops_graph_free(g2);
}

static void test_json_round_trip_exact(void **state)
{
    (void)state;
    const char *graphs[] = {design_example, all_ops};
    for (size_t i = 0; i < 2; i++) {
        ops_graph *g = parse_ok(graphs[i]);
        check_json_round_trip(g);
        ops_graph_free(g);
    }
    /* the canonical layout: one input or node per line */
    ops_graph *g = parse_ok(design_example);
    char *text = to_json(g);
    assert_string_equal(text,
                        "{\n"
                        "  \"name\": \"gemm_bias_relu\",\n"
                        "  \"inputs\": {\n"
                        "    \"A\": {\"dtype\": \"f16\", \"shape\": [\"M\", 512]},\n"
                        "    \"W\": {\"dtype\": \"f16\", \"shape\": [512, 256], \"const\": true},\n"
                        "    \"bias\": {\"dtype\": \"f16\", \"shape\": [256], \"const\": true}\n"
                        "  },\n"
                        "  \"nodes\": [\n"
                        "    {\"out\": \"t0\", \"op\": \"matmul\", \"in\": [\"A\", \"W\"], "
                        "\"transpose_a\": false, \"transpose_b\": false},\n"
                        "    {\"out\": \"t1\", \"op\": \"add\", \"in\": [\"t0\", \"bias\"]},\n"
                        "    {\"out\": \"Y\", \"op\": \"relu\", \"in\": [\"t1\"]}\n"
                        "  ],\n"
                        "  \"outputs\": [\"Y\"]\n"
                        "}\n");
    free(text);
    ops_graph_free(g);
}

static void test_doubles_round_trip_exactly(void **state)
{
    (void)state;
    const double values[] = {0.1,  1.0 / 3.0, 1e-300,      6.02214076e23,
                             -2.5, 5e-324,    123456789.0, 0.30000000000000004};
    for (size_t i = 0; i < KT_ARRAY_LEN(values); i++) {
        ops_graph *g = ops_graph_new("dbl");
        assert_non_null(g);
        ops_shape s = {.rank = 1, .d = {{.size = 4, .sym = OPS_NO_SYM}}};
        assert_int_equal(ops_graph_add_input(g, "x", OPS_DT_F32, &s, false), 0);
        ops_attrs a;
        ops_attrs_default(OPS_LEAKY_RELU, &a);
        a.alpha = values[i];
        int n = ops_graph_add_node(g, OPS_LEAKY_RELU, "l", &a);
        g->nodes[n].n_in = 1;
        g->nodes[n].in[0].tensor = 0;
        n = ops_graph_add_node(g, OPS_ADD, "y", NULL);
        g->nodes[n].n_in = 2;
        g->nodes[n].in[0].tensor = 1;
        g->nodes[n].in[1] = (ops_operand){.tensor = OPS_SCALAR, .scalar = values[i]};
        assert_int_equal(ops_graph_mark_output(g, 2), 0);
        check_json_round_trip(g);
        void *buf;
        size_t len;
        assert_int_equal(ops_graph_to_msgpack(g, &buf, &len), 0);
        ops_graph *g2 = NULL;
        assert_int_equal(ops_graph_from_msgpack(buf, len, &g2, NULL), 0);
        assert_true(ops_graph_equal(g, g2));
        assert_true(g2->nodes[0].attrs.alpha == values[i]);
        free(buf);
        ops_graph_free(g2);
        ops_graph_free(g);
    }
    /* shortest spelling: 0.1 stays "0.1", not 0.10000000000000001 */
    ops_graph *g = parse_ok(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                                  "{'out': 'y', 'op': 'mul', 'in': ['x', 0.1]}", "'y'"));
    char *text = to_json(g);
    assert_non_null(strstr(text, "[\"x\", 0.1]"));
    free(text);
    ops_graph_free(g);
}

static void test_msgpack_round_trip(void **state)
{
    (void)state;
    ops_graph *g = parse_ok(all_ops);
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(ops_graph_to_msgpack(g, &buf, &len), 0);
    assert_true(len > 100);
    /* the top level is a map of the same four keys */
    assert_int_equal(((uint8_t *)buf)[0], 0x84);
    ops_graph *g2 = NULL;
    ops_diag d = {0};
    assert_int_equal(ops_graph_from_msgpack(buf, len, &g2, &d), 0);
    assert_true(ops_graph_equal(g, g2));
    void *buf2 = NULL;
    size_t len2 = 0;
    assert_int_equal(ops_graph_to_msgpack(g2, &buf2, &len2), 0);
    assert_int_equal(len, len2);
    assert_memory_equal(buf, buf2, len);

    /* from an already unpacked object, as the daemon does */
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    assert_int_equal(msgpack_unpack_next(&up, buf, len, NULL), MSGPACK_UNPACK_SUCCESS);
    ops_graph *g3 = NULL;
    assert_int_equal(ops_graph_from_msgpack_object(&up.data, &g3, &d), 0);
    assert_true(ops_graph_equal(g, g3));
    msgpack_unpacked_destroy(&up);

    /* ops_graph_pack into a caller's packer */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    assert_int_equal(ops_graph_pack(&pk, g), 0);
    assert_int_equal(sb.size, len);
    assert_memory_equal(sb.data, buf, len);
    msgpack_sbuffer_destroy(&sb);

    free(buf);
    free(buf2);
    ops_graph_free(g);
    ops_graph_free(g2);
    ops_graph_free(g3);
}

static void test_json_msgpack_equivalence(void **state)
{
    (void)state;
    /* JSON -> graph -> msgpack -> graph -> JSON is exact */
    ops_graph *g = parse_ok(all_ops);
    char *t1 = to_json(g);
    void *buf;
    size_t len;
    assert_int_equal(ops_graph_to_msgpack(g, &buf, &len), 0);
    ops_graph *g2 = NULL;
    assert_int_equal(ops_graph_from_msgpack(buf, len, &g2, NULL), 0);
    char *t2 = to_json(g2);
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);
    free(buf);
    ops_graph_free(g2);
    ops_graph_free(g);

    /* a hand-packed message (keys in another order, ints for floats, int for stride) reads the
     * same as the equivalent JSON */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
#define STR(s) (msgpack_pack_str(&pk, strlen(s)), msgpack_pack_str_body(&pk, s, strlen(s)))
    msgpack_pack_map(&pk, 3);
    STR("outputs");
    msgpack_pack_array(&pk, 1);
    STR("y");
    STR("inputs");
    msgpack_pack_map(&pk, 2);
    STR("x");
    msgpack_pack_map(&pk, 2);
    STR("shape");
    msgpack_pack_array(&pk, 4);
    STR("N");
    msgpack_pack_int(&pk, 4);
    msgpack_pack_int(&pk, 8);
    msgpack_pack_int(&pk, 8);
    STR("dtype");
    STR("f16");
    STR("w");
    msgpack_pack_map(&pk, 3);
    STR("dtype");
    STR("f16");
    STR("shape");
    msgpack_pack_array(&pk, 4);
    msgpack_pack_int(&pk, 2);
    msgpack_pack_int(&pk, 4);
    msgpack_pack_int(&pk, 3);
    msgpack_pack_int(&pk, 3);
    STR("const");
    msgpack_pack_true(&pk);
    STR("nodes");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_map(&pk, 5);
    STR("op");
    STR("conv2d");
    STR("in");
    msgpack_pack_array(&pk, 2);
    STR("x");
    STR("w");
    STR("out");
    STR("c");
    STR("stride");
    msgpack_pack_int(&pk, 2);
    STR("padding");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_int(&pk, 1);
    msgpack_pack_int(&pk, 1);
    msgpack_pack_map(&pk, 3);
    STR("out");
    STR("y");
    STR("op");
    STR("mul");
    STR("in");
    msgpack_pack_array(&pk, 2);
    STR("c");
    msgpack_pack_int(&pk, 3);
#undef STR
    ops_graph *gm = NULL;
    ops_diag d = {0};
    assert_int_equal(ops_graph_from_msgpack(sb.data, sb.size, &gm, &d), 0);
    msgpack_sbuffer_destroy(&sb);
    ops_graph *gj = parse_ok("{'inputs': {'x': {'dtype': 'f16', 'shape': ['N', 4, 8, 8]},"
                             " 'w': {'dtype': 'f16', 'shape': [2, 4, 3, 3], 'const': true}},"
                             " 'nodes': [{'out': 'c', 'op': 'conv2d', 'in': ['x', 'w'],"
                             "  'stride': [2, 2], 'padding': 1},"
                             "  {'out': 'y', 'op': 'mul', 'in': ['c', 3.0]}],"
                             " 'outputs': ['y']}");
    assert_true(ops_graph_equal(gm, gj));
    assert_int_equal(ops_graph_validate(gm, &d), 0);
    assert_int_equal(gm->tensors[gm->outputs[0]].shape.d[3].size, 4);
    ops_graph_free(gm);
    ops_graph_free(gj);
}

static void test_examples_round_trip(void **state)
{
    (void)state;
    /* The sample graphs, when present: whatever parses must round-trip exactly. */
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/examples", root ? root : ".");
    DIR *dp = opendir(dir);
    if (!dp)
        skip();
    struct dirent *e;
    int parsed = 0;
    while ((e = readdir(dp))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        ops_graph *g = NULL;
        ops_diag d = {0};
        if (ops_graph_from_json_file(path, &g, &d) != 0)
            continue;
        check_json_round_trip(g);
        ops_graph_free(g);
        parsed++;
    }
    closedir(dp);
    print_message("%d example graphs round-tripped\n", parsed);
}

static void test_from_file(void **state)
{
    (void)state;
    char path[] = "/tmp/ktune_graph_io_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char *text = dq(design_example);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    ops_graph *g = NULL;
    ops_diag d = {0};
    assert_int_equal(ops_graph_from_json_file(path, &g, &d), 0);
    assert_int_equal(g->n_nodes, 3);
    ops_graph_free(g);
    unlink(path);
    free(text);
    assert_int_equal(ops_graph_from_json_file(path, &g, &d), -ENOENT);
    assert_null(g);
    /* The caller names the path (once); the message says what is wrong with it. */
    assert_non_null(strstr(d.msg, "cannot open"));
    assert_null(strstr(d.msg, path));
    /* Not a regular file, or over the limit: refused before reading. */
    assert_int_equal(ops_graph_from_json_file("/tmp", &g, &d), -EISDIR);
    assert_non_null(strstr(d.msg, "is a directory"));
    assert_int_equal(ops_graph_from_json_file("/dev/zero", &g, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "is a device"));
    char big[] = "/tmp/ktune_graph_io_XXXXXX";
    fd = mkstemp(big);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)OPS_MAX_GRAPH_BYTES + 1), 0); /* a hole: no disk */
    close(fd);
    assert_int_equal(ops_graph_from_json_file(big, &g, &d), -EFBIG);
    assert_non_null(strstr(d.msg, "at most 16777216"));
    unlink(big);
}

/* ---- errors ---- */

static void test_syntax_errors(void **state)
{
    (void)state;
    parse_fails("{'name': 'x', 'inputs': {", OPS_RULE_SYNTAX, -1, "", "line 1, column");
    parse_fails("{'name': 'x',\n 'inputs': {'a' {}}}", OPS_RULE_SYNTAX, -1, "", "line 2");
    parse_fails("", OPS_RULE_SYNTAX, -1, "", "syntax error");
    parse_fails("{} {}", OPS_RULE_SYNTAX, -1, "", "end of file expected");
    parse_fails("{'nodes': [], 'nodes': []}", OPS_RULE_SYNTAX, -1, "", "duplicate");
    /* a truncated valid document fails at every length, never crashes */
    char *text = dq(all_ops);
    size_t len = strlen(text);
    for (size_t cut = 0; cut < len - 1; cut += 7) {
        ops_graph *g = NULL;
        ops_diag d = {0};
        assert_int_equal(ops_graph_from_json(text, cut, &g, &d), -EINVAL);
        assert_null(g);
        assert_int_equal(d.rule, OPS_RULE_SYNTAX);
    }
    free(text);
}

static void test_schema_errors(void **state)
{
    (void)state;
    const char *in = "'x': {'dtype': 'f32', 'shape': [4]}";
    const char *relu = "{'out': 'y', 'op': 'relu', 'in': ['x']}";
    char buf[1024];
    parse_fails("[1, 2]", OPS_RULE_SCHEMA, -1, "", "must be an object");
    snprintf(buf, sizeof(buf), "{'inputs': {%s}, 'outputs': ['y']}", in);
    parse_fails(buf, OPS_RULE_SCHEMA, -1, "", "\"nodes\"");
    snprintf(buf, sizeof(buf), "{'inputs': {%s}, 'nodes': [%s]}", in, relu);
    parse_fails(buf, OPS_RULE_SCHEMA, -1, "", "\"outputs\"");
    snprintf(buf, sizeof(buf), "{'nodes': [%s], 'outputs': ['y']}", relu);
    parse_fails(buf, OPS_RULE_SCHEMA, -1, "", "\"inputs\"");
    snprintf(buf, sizeof(buf), "{'inputs': {%s}, 'nodes': [%s], 'outputs': []}", in, relu);
    parse_fails(buf, OPS_RULE_SCHEMA, -1, "", "non-empty list");
    snprintf(buf, sizeof(buf), "{'inputs': {%s}, 'nodes': [%s], 'outputs': ['y'], 'extra': 1}", in,
             relu);
    parse_fails(buf, OPS_RULE_SCHEMA, -1, "", "unknown top-level key 'extra'");
    snprintf(buf, sizeof(buf), "{'name': 3, 'inputs': {%s}, 'nodes': [%s], 'outputs': ['y']}", in,
             relu);
    parse_fails(buf, OPS_RULE_SCHEMA, -1, "", "\"name\" must be a string");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': 'M'}",
                      "{'out': 'y', 'op': 'relu', "
                      "'in': ['x']}",
                      "'y'"),
                OPS_RULE_SCHEMA, -1, "x", "needs \"shape\"");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4], 'layout': 'NCHW'}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'y'"),
                OPS_RULE_SCHEMA, -1, "x", "unknown key 'layout'");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4], 'const': 1}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'y'"),
                OPS_RULE_SCHEMA, -1, "x", "\"const\" must be true or false");
    parse_fails(GRAPH("'x': {'dtype': 'f64', 'shape': [4]}",
                      "{'out': 'y', 'op': 'relu', "
                      "'in': ['x']}",
                      "'y'"),
                OPS_RULE_DTYPE, -1, "x", "f64 is the reference precision");
    parse_fails(GRAPH("'x': {'dtype': 'int8', 'shape': [4]}",
                      "{'out': 'y', 'op': 'relu', "
                      "'in': ['x']}",
                      "'y'"),
                OPS_RULE_DTYPE, -1, "x", "unsupported dtype 'int8'");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'relu', 'in': "
                      "'x'}",
                      "'y'"),
                OPS_RULE_SCHEMA, 0, "y", "\"in\"");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}", "{'op': 'relu', 'in': ['x']}", "'y'"),
                OPS_RULE_SCHEMA, 0, "", "\"out\"");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'a', 'op': 'relu', 'in': ['x']}, {'out': 'y', 'op': 'gelu2', 'in': "
                      "['a']}",
                      "'y'"),
                OPS_RULE_UNKNOWN_OP, 1, "y", "'gelu2' is not an op");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'layernorm', 'in': ['x', 'x', 'x', 'x']}", "'y'"),
                OPS_RULE_ARITY, 0, "y", "layernorm takes 1 to 3 operands, got 4");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x'], 'alpha': 1}", "'y'"),
                OPS_RULE_ATTR, 0, "y", "unknown attribute 'alpha' for relu");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'sum', 'in': ['x'], 'axes': 0}", "'y'"),
                OPS_RULE_ATTR, 0, "y", "'axes' must be a list of integers");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'sum', 'in': ['x'], 'axes': []}", "'y'"),
                OPS_RULE_ATTR, 0, "y", "'axes' must not be empty");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'sum', 'in': ['x']}", "'y'"),
                OPS_RULE_ATTR, 0, "y", "sum needs attribute 'axes'");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'clamp', 'in': ['x']}", "'y'"),
                OPS_RULE_ATTR, 0, "y", "clamp needs attribute 'min' or 'max'");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'cast', 'in': ['x'], 'dtype': 'f64'}", "'y'"),
                OPS_RULE_DTYPE, 0, "y", "f64");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'matmul', 'in': ['x', 'x'], 'transpose_a': 1}", "'y'"),
                OPS_RULE_ATTR, 0, "y", "'transpose_a' must be true or false");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'conv2d', 'in': ['x', 'x'], 'layout': 'NCWH'}", "'y'"),
                OPS_RULE_ATTR, 0, "y", "NCHW");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'conv2d', 'in': ['x', 'x'], 'stride': [1, 2, 3]}", "'y'"),
                OPS_RULE_ATTR, 0, "y", "'stride' must be an integer or [h, w]");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'conv3d', 'in': ['x', 'x'], 'padding': [1, 2]}", "'y'"),
                OPS_RULE_ATTR, 0, "y", "'padding' must be an integer or [d, h, w]");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'reshape', 'in': ['x'], 'shape': [2, 'two words']}",
                      "'y'"),
                OPS_RULE_ATTR, 0, "y", "not a symbol name");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'leaky_relu', 'in': ['x'], 'alpha': 'big'}", "'y'"),
                OPS_RULE_ATTR, 0, "y", "'alpha' must be a number");
}

static void test_reference_errors(void **state)
{
    (void)state;
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'add', 'in': ['x', 'zz']}", "'y'"),
                OPS_RULE_UNDEFINED, 0, "zz", "operand 1 'zz'");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'nope'"),
                OPS_RULE_UNDEFINED, -1, "nope", "graph output 'nope' is not defined");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x']}, {'out': 'y', 'op': 'exp', 'in': "
                      "['x']}",
                      "'y'"),
                OPS_RULE_DUPLICATE, 1, "y", "already the output of node 0");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'x', 'op': 'relu', 'in': ['x']}", "'x'"),
                OPS_RULE_DUPLICATE, 0, "x", "already a graph input");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'y', 'y'"),
                OPS_RULE_DUPLICATE, -1, "y", "listed twice");
}

/* ---- msgpack hostile input ---- */

static void test_msgpack_truncated(void **state)
{
    (void)state;
    ops_graph *g = parse_ok(all_ops);
    void *buf;
    size_t len;
    assert_int_equal(ops_graph_to_msgpack(g, &buf, &len), 0);
    for (size_t cut = 0; cut < len; cut++) {
        ops_graph *g2 = NULL;
        ops_diag d = {0};
        assert_int_equal(ops_graph_from_msgpack(buf, cut, &g2, &d), -EINVAL);
        assert_null(g2);
        assert_int_equal(d.rule, OPS_RULE_SYNTAX);
    }
    /* a trailing byte is an error too */
    uint8_t *more = malloc(len + 1);
    memcpy(more, buf, len);
    more[len] = 0xc0;
    ops_graph *g2 = NULL;
    ops_diag d = {0};
    assert_int_equal(ops_graph_from_msgpack(more, len + 1, &g2, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "trailing bytes"));
    /* flipping any single byte never crashes (and usually fails) */
    for (size_t i = 0; i < len; i++) {
        memcpy(more, buf, len);
        more[i] ^= 0xff;
        g2 = NULL;
        if (ops_graph_from_msgpack(more, len, &g2, &d) == 0)
            ops_graph_free(g2);
    }
    free(more);
    free(buf);
    ops_graph_free(g);
}

static void test_deep_nesting_rejected(void **state)
{
    (void)state;
    /* JSON: beyond jansson's own limit, and beyond ours inside an attribute */
    size_t n = 5000;
    char *deep = malloc(2 * n + 1);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    deep[2 * n] = '\0';
    ops_graph *g = NULL;
    ops_diag d = {0};
    assert_int_equal(ops_graph_from_json(deep, 2 * n, &g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SYNTAX);
    free(deep);
    char doc[2048];
    char nest[200] = "";
    for (int i = 0; i < 20; i++)
        strcat(nest, "[");
    strcat(nest, "1");
    for (int i = 0; i < 20; i++)
        strcat(nest, "]");
    snprintf(doc, sizeof(doc),
             GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                   "{'out': 'y', 'op': 'relu', 'in': ['x'], 'junk': %s}", "'y'"),
             nest);
    parse_fails(doc, OPS_RULE_SYNTAX, -1, "", "nested deeper than 16");

    /* msgpack: 40 nested arrays; then a header claiming 2^32-1 entries in 6 bytes */
    uint8_t msg[64];
    for (int i = 0; i < 40; i++)
        msg[i] = 0x91;
    msg[40] = 0x01;
    assert_int_equal(ops_graph_from_msgpack(msg, 41, &g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SYNTAX);
    assert_non_null(strstr(d.msg, "nested deeper"));
    const uint8_t huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01};
    assert_int_equal(ops_graph_from_msgpack(huge, sizeof(huge), &g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SYNTAX);
    const uint8_t hugestr[] = {0xdb, 0x7f, 0xff, 0xff, 0xff, 'a'};
    assert_int_equal(ops_graph_from_msgpack(hugestr, sizeof(hugestr), &g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SYNTAX);
    assert_int_equal(ops_graph_from_msgpack(msg, OPS_MAX_GRAPH_BYTES + (size_t)1, &g, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "at most"));

    /* an unpacked object nested too deep (the daemon path skips the byte check) */
    msgpack_object objs[40];
    for (int i = 0; i < 40; i++) {
        objs[i].type = MSGPACK_OBJECT_ARRAY;
        objs[i].via.array.size = i < 39 ? 1 : 0;
        objs[i].via.array.ptr = i < 39 ? &objs[i + 1] : NULL;
    }
    assert_int_equal(ops_graph_from_msgpack_object(&objs[0], &g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SYNTAX);
    assert_null(g);
}

static void test_msgpack_bad_values(void **state)
{
    (void)state;
    ops_graph *g = NULL;
    ops_diag d = {0};
    /* {1: 2}: a non-string key */
    const uint8_t intkey[] = {0x81, 0x01, 0x02};
    assert_int_equal(ops_graph_from_msgpack(intkey, sizeof(intkey), &g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SCHEMA);
    assert_non_null(strstr(d.msg, "keys must be strings"));
    /* {"name": bin8 "ab"} */
    const uint8_t bin[] = {0x81, 0xa4, 'n', 'a', 'm', 'e', 0xc4, 0x02, 'a', 'b'};
    assert_int_equal(ops_graph_from_msgpack(bin, sizeof(bin), &g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SCHEMA);
    /* {"name": NaN} */
    const uint8_t nan[] = {0x81, 0xa4, 'n', 'a', 'm', 'e', 0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0};
    assert_int_equal(ops_graph_from_msgpack(nan, sizeof(nan), &g, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "finite"));
    /* {"a": 1, "a": 2} */
    const uint8_t dup[] = {0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02};
    assert_int_equal(ops_graph_from_msgpack(dup, sizeof(dup), &g, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "duplicate key 'a'"));
    /* {"name": invalid UTF-8} */
    const uint8_t utf[] = {0x81, 0xa4, 'n', 'a', 'm', 'e', 0xa2, 0xc3, 0x28};
    assert_int_equal(ops_graph_from_msgpack(utf, sizeof(utf), &g, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "UTF-8"));
    /* 0xc1 is never used */
    const uint8_t never[] = {0xc1};
    assert_int_equal(ops_graph_from_msgpack(never, 1, &g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SYNTAX);
    /* an array at the top */
    const uint8_t arr[] = {0x90};
    assert_int_equal(ops_graph_from_msgpack(arr, 1, &g, &d), -EINVAL);
    assert_int_equal(d.rule, OPS_RULE_SCHEMA);
    assert_null(g);
}

/* Names are UTF-8 without control characters (docs/formats.md, part 1), refused naming the
 * field; every string a message echoes is escaped, so a message stays one line. */
static void test_names_checked(void **state)
{
    (void)state;
    ops_graph *g = NULL;
    ops_diag d = {0};
    /* JSON: an ESC, a C1 control and a newline in names, "\n" in an op */
    parse_fails(GRAPH("'x\\u001b[2J': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'y'"),
                OPS_RULE_SCHEMA, -1, "x\\x1b[2J", "graph input name 'x\\x1b[2J' has the control");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y\\u0085', 'op': 'relu', 'in': ['x']}", "'y'"),
                OPS_RULE_SCHEMA, 0, "y\\xc2\\x85", "output name 'y\\xc2\\x85' has the control");
    parse_fails("{'name': 'g\\n<0>emerg forged', 'inputs': {'x': {'dtype': 'f32', 'shape': [4]}},"
                " 'nodes': [{'out': 'y', 'op': 'relu', 'in': ['x']}], 'outputs': ['y']}",
                OPS_RULE_SCHEMA, -1, "", "\"name\" 'g\\x0a<0>emerg forged' has the control");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'bad\\nop', 'in': ['x']}", "'y'"),
                OPS_RULE_UNKNOWN_OP, 0, "y", "node 0 (bad\\x0aop -> y): unknown op: 'bad\\x0aop'");
    parse_fails(GRAPH("'x': {'dtype': 'f32\\r', 'shape': [4]}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x']}", "'y'"),
                OPS_RULE_DTYPE, -1, "x", "unsupported dtype 'f32\\x0d'");
    parse_fails(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                      "{'out': 'y', 'op': 'relu', 'in': ['x\\u001b']}", "'y'"),
                OPS_RULE_UNDEFINED, 0, "x\\x1b", "operand 0 'x\\x1b' is neither");
    /* UTF-8 names are fine and round-trip */
    ops_graph *ok =
        parse_ok(GRAPH("'gr\xc3\xb6\xc3\x9f"
                       "e': {'dtype': 'f32', 'shape': [4]}",
                       "{'out': '\xe2\x9c\x93', 'op': 'relu', 'in': ['gr\xc3\xb6\xc3\x9f"
                       "e']}",
                       "'\xe2\x9c\x93'"));
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(ops_graph_to_msgpack(ok, &buf, &len), 0);
    assert_int_equal(ops_graph_from_msgpack(buf, len, &g, &d), 0);
    ops_graph_free(g);
    g = NULL;
    free(buf);
    ops_graph_free(ok);

    /* msgpack: the same graph with bytes that are not UTF-8 in a tensor name, in the graph's name,
     * in a node's output: refused naming the field, the name escaped */
    static const struct {
        const char *json, *field, *tensor;
    } cases[] = {
        {GRAPH("'xZZ': {'dtype': 'f32', 'shape': [4]}", "{'out': 'y', 'op': 'relu', 'in': ['xZZ']}",
               "'y'"),
         "graph input name 'x\\xff\\xfe' is not valid UTF-8 (byte 1)", "x\\xff\\xfe"},
        {"{'name': 'gZZ', 'inputs': {'x': {'dtype': 'f32', 'shape': [4]}},"
         " 'nodes': [{'out': 'y', 'op': 'relu', 'in': ['x']}], 'outputs': ['y']}",
         "\"name\" 'g\\xff\\xfe' is not valid UTF-8 (byte 1)", ""},
        {GRAPH("'x': {'dtype': 'f32', 'shape': [4]}", "{'out': 'yZZ', 'op': 'relu', 'in': ['x']}",
               "'yZZ'"),
         "output name 'y\\xff\\xfe' is not valid UTF-8 (byte 1)", "y\\xff\\xfe"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ops_graph *src = parse_ok(cases[i].json);
        assert_int_equal(ops_graph_to_msgpack(src, &buf, &len), 0);
        ops_graph_free(src);
        for (size_t k = 0; k + 1 < len; k++) /* ZZ -> FF FE, same length */
            if (((char *)buf)[k] == 'Z' && ((char *)buf)[k + 1] == 'Z') {
                ((uint8_t *)buf)[k] = 0xff;
                ((uint8_t *)buf)[k + 1] = 0xfe;
            }
        memset(&d, 0, sizeof(d));
        assert_int_equal(ops_graph_from_msgpack(buf, len, &g, &d), -EINVAL);
        assert_null(g);
        if (!strstr(d.msg, cases[i].field))
            fail_msg("case %zu: '%s' does not say '%s'", i, d.msg, cases[i].field);
        assert_null(strchr(d.msg, '\n'));
        assert_true(kt_text_clean(d.msg, strlen(d.msg)));
        assert_string_equal(d.tensor, cases[i].tensor);
        free(buf);
    }
    /* a duplicate key with a newline is echoed escaped */
    const uint8_t dup[] = {0x82, 0xa2, 'a', '\n', 0x01, 0xa2, 'a', '\n', 0x02};
    assert_int_equal(ops_graph_from_msgpack(dup, sizeof(dup), &g, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "duplicate key 'a\\x0a'"));
}

static void test_writer_rejects_unwritable(void **state)
{
    (void)state;
    ops_graph *g = parse_ok(GRAPH("'x': {'dtype': 'f32', 'shape': [4]}",
                                  "{'out': 'y', 'op': 'leaky_relu', 'in': ['x']}", "'y'"));
    g->nodes[0].attrs.alpha = NAN;
    char *text = (char *)1;
    assert_int_equal(ops_graph_to_json(g, &text), -EINVAL);
    assert_null(text);
    void *buf = (void *)1;
    size_t len = 1;
    assert_int_equal(ops_graph_to_msgpack(g, &buf, &len), -EINVAL);
    assert_null(buf);
    g->nodes[0].attrs.alpha = 0.5;
    g->nodes[0].in[0].tensor = 99;
    assert_int_equal(ops_graph_to_json(g, &text), -EINVAL);
    ops_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_design_example),
        cmocka_unit_test(test_every_op_with_attributes),
        cmocka_unit_test(test_defaults_applied_and_written),
        cmocka_unit_test(test_scalar_operands),
        cmocka_unit_test(test_symbolic_and_scalar_shapes),
        cmocka_unit_test(test_json_round_trip_exact),
        cmocka_unit_test(test_doubles_round_trip_exactly),
        cmocka_unit_test(test_msgpack_round_trip),
        cmocka_unit_test(test_json_msgpack_equivalence),
        cmocka_unit_test(test_examples_round_trip),
        cmocka_unit_test(test_from_file),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_schema_errors),
        cmocka_unit_test(test_reference_errors),
        cmocka_unit_test(test_msgpack_truncated),
        cmocka_unit_test(test_deep_nesting_rejected),
        cmocka_unit_test(test_msgpack_bad_values),
        cmocka_unit_test(test_names_checked),
        cmocka_unit_test(test_writer_rejects_unwritable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
