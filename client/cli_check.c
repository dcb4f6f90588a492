/* ktune check: validate a graph, bind its symbolic dimensions, print the canonical signature,
 * the inferred outputs, FLOPs and minimum bytes. Needs neither a GPU nor the daemon. */
#include "cli.h"
#include "ops/ops.h"

#include <stdlib.h>
#include <string.h>

static const char check_help[] =
    "usage: ktune check GRAPH.json [--shape NAME=VALUE ...] [--json]\n"
    "\n"
    "Validates an op graph (shape inference, broadcasting, dtypes, attributes), binds symbolic\n"
    "dimensions, and prints the canonical signature, every output's dtype and shape, and the\n"
    "graph's FLOPs and minimum bytes moved; once every dimension is bound, also the problem\n"
    "digest that keys the cache (equal for two graphs exactly when they pose the same problem,\n"
    "whatever their tensors and symbols are called or the order they are declared in).\n"
    "\n"
    "options:\n"
    "  --shape NAME=VALUE  bind a symbolic dimension; repeat, or separate with commas\n"
    "                      (--shape M=1024,N=4096)\n"
    "  --json              print one JSON object: name, signature, problem, bindings,\n"
    "                      unbound, inputs, outputs, flops, bytes (problem, flops and bytes\n"
    "                      are null while a dimension is unbound)\n"
    "  -h, --help          show this help\n"
    "\n"
    "An invalid graph exits 1 with one line on stderr naming the node, tensor and rule.\n";

static json_t *shape_json(const ops_graph *g, const ops_shape *s)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < s->rank; i++) {
        const ops_dim *d = &s->d[i];
        if (d->sym >= 0 && d->size < 0)
            json_array_append_new(arr, json_string(g->syms[d->sym]));
        else
            json_array_append_new(arr, json_integer(d->size));
    }
    return arr;
}

static json_t *tensor_json(const ops_graph *g, int t)
{
    const ops_tensor *x = &g->tensors[t];
    return json_pack("{s:s, s:s, s:o}", "name", x->name, "dtype", ops_dtype_name(x->dtype), "shape",
                     shape_json(g, &x->shape));
}

static int print_json(const ops_graph *g, const char *sig_hex, const char *problem_hex,
                      const ops_cost *cost, const cli_graph_args *a)
{
    json_t *inputs = json_array(), *outputs = json_array(), *bound = json_object(),
           *unbound = json_array();
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].producer < 0)
            json_array_append_new(inputs, tensor_json(g, t));
    for (int i = 0; i < g->n_outputs; i++)
        json_array_append_new(outputs, tensor_json(g, g->outputs[i]));
    for (int i = 0; i < a->n_bindings; i++)
        json_object_set_new(bound, a->bindings[i].name, json_integer(a->bindings[i].value));
    for (int s = 0; s < g->n_syms; s++) {
        bool is_bound = false;
        for (int i = 0; i < a->n_bindings; i++)
            is_bound |= strcmp(a->bindings[i].name, g->syms[s]) == 0;
        if (!is_bound)
            json_array_append_new(unbound, json_string(g->syms[s]));
    }
    return cli_print_json(
        json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "name", g->name, "signature",
                  sig_hex, "problem", problem_hex ? json_string(problem_hex) : json_null(),
                  "bindings", bound, "unbound", unbound, "inputs", inputs, "outputs", outputs,
                  "flops", cost ? json_real(cost->flops) : json_null(), "bytes",
                  cost ? json_real(cost->bytes) : json_null()));
}

static void print_text(const ops_graph *g, const char *sig_hex, const char *problem_hex,
                       const ops_cost *cost)
{
    char shape[256];
    printf("graph      %s\n", g->name);
    printf("signature  %s\n", sig_hex);
    if (problem_hex)
        printf("problem    %s\n", problem_hex);
    for (int t = 0; t < g->n_tensors; t++) {
        const ops_tensor *x = &g->tensors[t];
        if (x->producer >= 0)
            continue;
        ops_shape_format(g, &x->shape, shape, sizeof(shape));
        printf("input      %s %s %s%s\n", x->name, ops_dtype_name(x->dtype), shape,
               x->is_const ? " const" : "");
    }
    for (int i = 0; i < g->n_outputs; i++) {
        const ops_tensor *x = &g->tensors[g->outputs[i]];
        ops_shape_format(g, &x->shape, shape, sizeof(shape));
        printf("output     %s %s %s\n", x->name, ops_dtype_name(x->dtype), shape);
    }
    if (cost) {
        printf("flops      %.6g\n", cost->flops);
        printf("bytes      %.6g\n", cost->bytes);
    } else {
        const char *sym = ops_graph_first_unbound(g);
        printf("flops      (bind %s with --shape %s=VALUE)\n", sym, sym);
        printf("bytes      (bind %s with --shape %s=VALUE)\n", sym, sym);
    }
}

int cli_check(int argc, char **argv)
{
    cli_graph_args a = {.sub = "check", .help = check_help};
    int rc = cli_parse_graph_args(argc, argv, &a, NULL, NULL);
    if (rc != CLI_OK)
        return rc;

    ops_graph *g = NULL, *bound = NULL;
    ops_diag d = {0};
    if ((rc = cli_load_graph(&a, &g, &bound)) != CLI_OK)
        return rc;
    /* The signature is of the symbolic graph: bound shapes are a separate part of the key. */
    uint8_t sig[OPS_SIG_BYTES];
    char sig_hex[2 * OPS_SIG_BYTES + 1];
    if (ops_graph_signature(g, sig, &d) < 0) {
        rc = cli_error("%s: %s", a.path, d.msg);
        goto out;
    }
    kt_hex(sig, sizeof(sig), sig_hex);

    ops_cost cost, *costp = NULL;
    uint8_t problem[OPS_SIG_BYTES];
    char problem_hex[2 * OPS_SIG_BYTES + 1], *problemp = NULL;
    if (!ops_graph_first_unbound(bound)) {
        if (ops_graph_cost(bound, &cost, &d) < 0 ||
            ops_graph_problem(bound, problem, NULL, NULL, &d) < 0) {
            rc = cli_error("%s: %s", a.path, d.msg);
            goto out;
        }
        costp = &cost;
        kt_hex(problem, sizeof(problem), problem_hex);
        problemp = problem_hex;
    }
    if (a.json) {
        rc = print_json(bound, sig_hex, problemp, costp, &a);
    } else {
        print_text(bound, sig_hex, problemp, costp);
        rc = CLI_OK;
    }
out:
    ops_graph_free(bound);
    ops_graph_free(g);
    return rc;
}
