/* ktune_graph_reference: the fp64 CPU reference that verification compares kernels with
 * (ops_ref_run, docs/formats.md Part 2), for programs and the Python binding
 * (ktune.Graph.reference), so a graph can be checked against another framework without a GPU. */
#include "client/libktune_internal.h"
#include "client/ktune.h"

#include <errno.h>
#include <stdlib.h>

KTUNE_EXPORT int ktune_graph_reference(const ktune_graph *g, const ktune_shape *shapes,
                                       int n_shapes, const double *const *inputs,
                                       double *const *outputs, ktune_error *err)
{
    if (err)
        *err = (ktune_error){0};
    if (!g || !inputs || !outputs)
        return ktune_err_from(err, -EINVAL, "ktune_graph_reference: %s is NULL",
                              !g        ? "graph"
                              : !inputs ? "inputs"
                                        : "outputs");
    if (n_shapes < 0 || (n_shapes > 0 && !shapes))
        return ktune_err_from(err, -EINVAL, "ktune_graph_reference: %d shapes at %p", n_shapes,
                              (const void *)shapes);
    for (int i = 0; i < n_shapes; i++)
        if (!shapes[i].name)
            return ktune_err_from(err, -EINVAL, "ktune_graph_reference: shape %d has no name", i);

    int rc = 0;
    ops_diag d = {0};
    ops_graph *bound = NULL;
    ops_binding *b = calloc((size_t)n_shapes + 1, sizeof(*b));
    if (!b)
        return ktune_err_from(err, -ENOMEM, "ktune_graph_reference: out of memory");
    for (int i = 0; i < n_shapes; i++)
        b[i] = (ops_binding){.name = shapes[i].name, .value = shapes[i].value};
    if ((rc = ops_graph_bind(g->g, b, n_shapes, &bound, &d)) < 0) {
        rc = ktune_err_from(err, rc, "ktune_graph_reference: %s", d.msg);
        goto out;
    }
    /* Checked here, so that the message names the symbol to bind rather than a tensor. */
    const char *unbound = ops_graph_first_unbound(bound);
    if (unbound) {
        rc = ktune_err_from(err, -EINVAL,
                            "ktune_graph_reference: dimension %s is unbound; give its size "
                            "(e.g. %s=...)",
                            unbound, unbound);
        goto out;
    }
    /* The bound copy keeps the declared tensor order: graph inputs in the order the document
     * declares them, outputs in the order of its "outputs", as ops_ref_run takes them. */
    for (int i = 0; i < g->n_in; i++)
        if (!inputs[i]) {
            rc = ktune_err_from(err, -EINVAL, "ktune_graph_reference: input %d is NULL", i);
            goto out;
        }
    for (int j = 0; j < g->n_out; j++)
        if (!outputs[j]) {
            rc = ktune_err_from(err, -EINVAL, "ktune_graph_reference: output %d is NULL", j);
            goto out;
        }
    if ((rc = ops_ref_run(bound, inputs, outputs, &d)) < 0) {
        rc = rc == -ENOMEM ? ktune_err_from(err, rc, "ktune_graph_reference: out of memory")
                           : ktune_err_from(err, rc, "ktune_graph_reference: %s", d.msg);
        goto out;
    }
out:
    ops_graph_free(bound);
    free(b);
    return rc;
}
