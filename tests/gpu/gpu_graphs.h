/* Graphs the GPU tests build by hand (header-only; each test program includes it once). */
#pragma once

#include "ops/ops.h"

#include <stdio.h>

/* x [n] f32 -> t = 2 x -> y = t + 1 (mul, add with scalars): the graph of the planted kernels;
 * t is an intermediate. A graph that does not validate is counted in *failures. */
static inline ops_graph *gpu_affine_graph(const char *name, int64_t n, int *failures)
{
    ops_graph *g = ops_graph_new(name);
    ops_shape s = {.rank = 1, .d = {{n, OPS_NO_SYM}}};
    int x = ops_graph_add_input(g, "x", OPS_DT_F32, &s, false);
    int n0 = ops_graph_add_node(g, OPS_MUL, "t", NULL);
    g->nodes[n0].n_in = 2;
    g->nodes[n0].in[0] = (ops_operand){.tensor = x};
    g->nodes[n0].in[1] = (ops_operand){.tensor = OPS_SCALAR, .scalar = 2};
    int n1 = ops_graph_add_node(g, OPS_ADD, "y", NULL);
    g->nodes[n1].n_in = 2;
    g->nodes[n1].in[0] = (ops_operand){.tensor = g->nodes[n0].out};
    g->nodes[n1].in[1] = (ops_operand){.tensor = OPS_SCALAR, .scalar = 1};
    ops_graph_mark_output(g, g->nodes[n1].out);
    ops_diag d = {0};
    if (ops_graph_validate(g, &d) < 0) {
        printf("  FAIL %s graph: %s\n", name, d.msg);
        (*failures)++;
    }
    return g;
}
