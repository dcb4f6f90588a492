/* ktune_graph_describe: a graph's inputs and outputs with their shapes bound, in declared order
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
    ops_binding *b = calloc((size_t)n_shapes + 1, sizeof(*b));
    if (!b) {
        rc = ktune_err_from(err, -ENOMEM, "ktune_graph_describe: out of memory");
        goto out;
    }
    for (int i = 0; i < n_shapes; i++)
        b[i] = (ops_binding){.name = shapes[i].name, .value = shapes[i].value};
    if ((rc = ops_graph_bind(g->g, b, n_shapes, &bound, &d)) < 0) {
        rc = ktune_err_from(err, rc, "%s", d.msg);
        goto out;
    }
    int k = 0; /* graph inputs are the tensors without a producer, in tensor order */
    for (int t = 0; t < bound->n_tensors; t++) {
        if (bound->tensors[t].producer >= 0)
            continue;
        KT_REQUIRE(k < g->n_in);
        if (inputs)
            describe_tensor(g->g, bound, t, &inputs[k]);
        k++;
    }
    KT_REQUIRE(k == g->n_in && bound->n_outputs == g->n_out);
    for (int j = 0; outputs && j < bound->n_outputs; j++)
        describe_tensor(g->g, bound, bound->outputs[j], &outputs[j]);
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
out:
    ops_graph_free(bound);
    free(b);
    return rc;
}
