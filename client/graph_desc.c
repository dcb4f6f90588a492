/* ktune_graph_describe: a graph's inputs and outputs with their shapes bound, in canonical order
 * (what ktune_launch takes). The Python binding checks and allocates tensors with it. */
#include "client/libktune_internal.h"
#include "client/ktune.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(OPS_MAX_RANK == 8, "ktune_tensor_desc.shape holds OPS_MAX_RANK dimensions");

static void describe_tensor(const ops_graph *symbolic, const ops_graph *bound, int t,
                            ktune_tensor_desc *out)
{
    const ops_tensor *x = &bound->tensors[t];
    memset(out, 0, sizeof(*out));
    out->name = symbolic->tensors[t].name; /* the clone keeps tensor order; this one outlives it */
    snprintf(out->dtype, sizeof(out->dtype), "%s", ops_dtype_name(x->dtype));
    out->is_const = x->is_const;
    out->rank = x->shape.rank;
    for (int i = 0; i < x->shape.rank; i++)
        out->shape[i] = x->shape.d[i].size; /* -1 while a symbol is unbound */
}

KTUNE_EXPORT int ktune_graph_describe(const ktune_graph *g, const ktune_shape *shapes,
                                      int n_shapes, ktune_tensor_desc *inputs,
                                      ktune_tensor_desc *outputs, ktune_error *err)
{
    if (!g)
        return ktune_err_from(err, -EINVAL, "ktune_graph_describe: graph is NULL");
    if (n_shapes < 0 || (n_shapes > 0 && !shapes))
        return ktune_err_from(err, -EINVAL, "ktune_graph_describe: %d shapes at %p", n_shapes,
                              (const void *)shapes);
    for (int i = 0; i < n_shapes; i++)
        if (!shapes[i].name)
            return ktune_err_from(err, -EINVAL, "ktune_graph_describe: shape %d has no name", i);

    int rc = 0;
    ops_diag d = {0};
    ops_graph *bound = NULL;
    int *in_rank = NULL, *out_rank = NULL;
    ops_binding *b = calloc((size_t)n_shapes + 1, sizeof(*b));
    in_rank = calloc((size_t)g->n_in + 1, sizeof(*in_rank));
    out_rank = calloc((size_t)g->n_out + 1, sizeof(*out_rank));
    if (!b || !in_rank || !out_rank) {
        rc = ktune_err_from(err, -ENOMEM, "ktune_graph_describe: out of memory");
        goto out;
    }
    for (int i = 0; i < n_shapes; i++)
        b[i] = (ops_binding){.name = shapes[i].name, .value = shapes[i].value};
    if ((rc = ops_graph_bind(g->g, b, n_shapes, &bound, &d)) < 0) {
        rc = ktune_err_from(err, rc, "%s", d.msg);
        goto out;
    }
    if ((rc = ops_graph_canonical_io(bound, in_rank, out_rank, &d)) < 0) {
        rc = ktune_err_from(err, rc, "%s", d.msg);
        goto out;
    }
    int k = 0; /* graph inputs are the tensors without a producer, in tensor order */
    for (int t = 0; t < bound->n_tensors; t++) {
        if (bound->tensors[t].producer >= 0)
            continue;
        KT_REQUIRE(k < g->n_in && in_rank[k] >= 0 && in_rank[k] < g->n_in);
        if (inputs)
            describe_tensor(g->g, bound, t, &inputs[in_rank[k]]);
        k++;
    }
    KT_REQUIRE(k == g->n_in && bound->n_outputs == g->n_out);
    for (int j = 0; outputs && j < bound->n_outputs; j++) {
        KT_REQUIRE(out_rank[j] >= 0 && out_rank[j] < g->n_out);
        describe_tensor(g->g, bound, bound->outputs[j], &outputs[out_rank[j]]);
    }
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
out:
    ops_graph_free(bound);
    free(out_rank);
    free(in_rank);
    free(b);
    return rc;
}
