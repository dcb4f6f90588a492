/* Fuzz target: the JSON graph parser and validator. ops_graph_from_json, ops_graph_validate and,
 * for a valid graph, its signature and canonical io order. Invariants: a failure comes with a
 * diagnostic; a valid graph has a signature, its canonical io order is a permutation, and its
 * JSON form parses back to a graph with the same signature. */
#include "fuzz.h"

#include "ops/graph.h"
#include "ops/ops.h"

#include <string.h>

static void check_permutation(const int *rank, int n)
{
    uint8_t seen[4096] = {0};
    FUZZ_CHECK(n <= (int)sizeof(seen));
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(rank[i] >= 0 && rank[i] < n);
        FUZZ_CHECK(!seen[rank[i]]);
        seen[rank[i]] = 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ops_graph *g = NULL, *back = NULL;
    int *in_rank = NULL, *out_rank = NULL;
    char *json = NULL;
    ops_diag d = {0};
    int rc = ops_graph_from_json((const char *)data, size, &g, &d);
    if (rc < 0) {
        FUZZ_CHECK(!g && d.msg[0]);
        return 0;
    }
    FUZZ_CHECK(g);
    if (ops_graph_validate(g, &d) < 0) {
        FUZZ_CHECK(d.msg[0]);
        goto out;
    }
    uint8_t sig[OPS_SIG_BYTES];
    if (ops_graph_signature(g, sig, &d) < 0) {
        /* a validated graph that cannot be canonicalised must say why */
        FUZZ_CHECK(d.msg[0]);
        goto out;
    }
    int n_in = 0;
    for (int i = 0; i < g->n_tensors; i++)
        n_in += g->tensors[i].producer < 0;
    in_rank = malloc(sizeof(int) * (size_t)(n_in ? n_in : 1));
    out_rank = malloc(sizeof(int) * (size_t)(g->n_outputs ? g->n_outputs : 1));
    FUZZ_CHECK(in_rank && out_rank);
    FUZZ_CHECK(ops_graph_canonical_io(g, in_rank, out_rank, &d) == 0);
    check_permutation(in_rank, n_in);
    check_permutation(out_rank, g->n_outputs);

    /* the writer's output reads back as the same graph */
    FUZZ_CHECK(ops_graph_to_json(g, &json) == 0);
    FUZZ_CHECK(ops_graph_from_json(json, strlen(json), &back, &d) == 0);
    FUZZ_CHECK(ops_graph_validate(back, &d) == 0);
    uint8_t sig2[OPS_SIG_BYTES];
    FUZZ_CHECK(ops_graph_signature(back, sig2, &d) == 0);
    FUZZ_CHECK(memcmp(sig, sig2, sizeof(sig)) == 0);
out:
    free(json);
    free(in_rank);
    free(out_rank);
    ops_graph_free(back);
    ops_graph_free(g);
    return 0;
}
