/* Eval requests built from what the search has (search/worker.h): a group of the space with its
 * emitted kernels and cubin (srch_eval_req_for_group), made a cuBLASLt call
 * (srch_eval_req_set_lt) or given the whole graph whose reference yields its intermediates
 * (srch_eval_req_set_full), and an assembled record over its whole graph
 * (srch_eval_req_for_graph). Their encoding on the wire: search/worker_proto.c. */
#include "worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int add_binding(srch_binding *b, int *n, const ops_graph *g, const ops_dim *dim, ops_diag *d)
{
    if (dim->sym < 0 || dim->sym >= g->n_syms)
        return 0;
    const char *name = g->syms[dim->sym];
    for (int i = 0; i < *n; i++)
        if (strcmp(b[i].name, name) == 0)
            return 0;
    if (*n == SRCH_MAX_BINDINGS || strlen(name) >= sizeof(b[0].name))
        return ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "",
                            "graph has more than %d bound symbols or a symbol name over %zu bytes",
                            SRCH_MAX_BINDINGS, sizeof(b[0].name) - 1);
    if (dim->size < 1)
        return ops_diag_set(d, g, OPS_RULE_UNBOUND_DIM, -1, "", "symbol '%s' is not bound", name);
    snprintf(b[*n].name, sizeof(b[0].name), "%s", name);
    b[*n].value = dim->size;
    (*n)++;
    return 0;
}

/* The bound symbols of g: every tensor dimension and reshape target. */
static int graph_bindings(const ops_graph *g, srch_binding *b, int *n, ops_diag *d)
{
    int rc = 0;
    *n = 0;
    for (int t = 0; t < g->n_tensors && rc == 0; t++)
        for (int k = 0; k < g->tensors[t].shape.rank && rc == 0; k++)
            rc = add_binding(b, n, g, &g->tensors[t].shape.d[k], d);
    for (int i = 0; i < g->n_nodes && rc == 0; i++)
        if (g->nodes[i].op == OPS_RESHAPE)
            for (int k = 0; k < g->nodes[i].attrs.shape.rank && rc == 0; k++)
                rc = add_binding(b, n, g, &g->nodes[i].attrs.shape.d[k], d);
    return rc;
}

/* The sub tensor that graph tensor t of grp->g became (same name), when it is an input or
 * output of sub. */
static int map_tensor(const ops_group *grp, const ops_graph *sub, int32_t t, int32_t *out,
                      ops_diag *d)
{
    const ops_graph *g = grp->g;
    if (t < 0 || t >= g->n_tensors)
        return ops_diag_set(d, g, OPS_RULE_UNDEFINED, -1, "", "argument tensor %d out of range", t);
    int idx = ops_graph_find_tensor(sub, g->tensors[t].name);
    if (idx < 0 || (sub->tensors[idx].producer >= 0 && !sub->tensors[idx].is_output))
        return ops_diag_set(d, g, OPS_RULE_UNDEFINED, -1, g->tensors[t].name,
                            "argument '%s' is neither an input nor an output of the group",
                            g->tensors[t].name);
    *out = idx;
    return 0;
}

int srch_eval_req_for_group(const ops_group *grp, const ops_emitted *e, const void *cubin,
                            size_t cubin_len, srch_eval_req *out, ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    if (e->n_kernels < 0 || e->n_kernels > OPS_MAX_KERNELS || (e->n_kernels > 0 && !cubin))
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "", "bad candidate: %d kernels%s",
                            e->n_kernels, cubin ? "" : " and no cubin");
    ops_graph *sub = NULL;
    int rc = ops_group_subgraph(grp, &sub, d);
    if (rc < 0)
        return rc;
    out->sub = sub;
    out->precision = grp->precision;
    out->seeds = 3;
    out->verify = out->time = true;
    out->workspace_bytes = e->workspace_bytes;
    rc = graph_bindings(sub, out->bindings, &out->n_bindings, d);
    if (rc < 0)
        goto fail;
    out->n_kernels = e->n_kernels;
    for (int k = 0; k < e->n_kernels; k++) {
        out->kernels[k] = e->kernels[k];
        out->zero_bytes[k] = e->kernels[k].zero_prefix; /* 0: all of the workspace */
        for (int a = 0; a < e->kernels[k].n_args; a++) {
            ops_arg *arg = &out->kernels[k].args[a];
            bool on_tensor = arg->kind == OPS_ARG_TENSOR ||
                             (arg->kind == OPS_ARG_TENSOR_MAP && arg->tensor >= 0);
            if (on_tensor &&
                (rc = map_tensor(grp, sub, e->kernels[k].args[a].tensor, &arg->tensor, d)) < 0)
                goto fail;
        }
    }
    /* The same inputs for every candidate of the group (and so one reference for them all in
     * the worker): the seed comes from the subgraph's bytes. */
    void *buf = NULL;
    size_t len = 0;
    if ((rc = ops_graph_to_msgpack(sub, &buf, &len)) < 0) {
        ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "", "cannot encode the group's subgraph");
        goto fail;
    }
    uint8_t h[32];
    ops_sha256(buf, len, h);
    free(buf);
    memcpy(&out->seed0, h, sizeof(out->seed0));
    if (e->n_kernels > 0) {
        out->cubin = malloc(cubin_len);
        if (!out->cubin) {
            ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "", "out of memory copying a cubin");
            rc = -ENOMEM;
            goto fail;
        }
        memcpy(out->cubin, cubin, cubin_len);
        out->cubin_len = cubin_len;
    } else {
        out->library = true; /* completed by srch_eval_req_set_lt */
    }
    return 0;
fail:
    srch_eval_req_free(out);
    return rc;
}

int srch_eval_req_set_lt(srch_eval_req *r, const ops_group *grp, const ops_lt_desc *lt, ops_diag *d)
{
    if (!r->sub || r->n_kernels)
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "a library candidate's request has no kernels");
    ops_lt_desc m = *lt;
    int rc;
    if ((rc = map_tensor(grp, r->sub, lt->a_tensor, &m.a_tensor, d)) < 0 ||
        (rc = map_tensor(grp, r->sub, lt->b_tensor, &m.b_tensor, d)) < 0 ||
        (rc = map_tensor(grp, r->sub, lt->c_tensor, &m.c_tensor, d)) < 0)
        return rc;
    if (lt->bias_tensor >= 0 &&
        (rc = map_tensor(grp, r->sub, lt->bias_tensor, &m.bias_tensor, d)) < 0)
        return rc;
    r->library = true;
    r->lt = m;
    r->workspace_bytes = lt->workspace_bytes;
    return 0;
}

bool srch_group_reads_intermediates(const ops_group *grp)
{
    for (int i = 0; i < grp->n_in; i++)
        if (grp->in[i] >= 0 && grp->in[i] < grp->g->n_tensors &&
            grp->g->tensors[grp->in[i]].producer >= 0)
            return true;
    return false;
}

double srch_eval_req_data_seconds(const srch_eval_req *r)
{
    double elems = 0;
    const ops_graph *sub = r->sub;
    if (!sub)
        return 0;
    for (int i = 0; i < sub->n_tensors; i++) /* inputs and outputs: drawn or fetched, checked */
        if (sub->tensors[i].producer < 0 || sub->tensors[i].is_output)
            elems += (double)ops_shape_numel(&sub->tensors[i].shape);
    for (int i = 0; r->full && i < r->full->n_tensors; i++) /* full's inputs, drawn */
        if (r->full->tensors[i].producer < 0)
            elems += (double)ops_shape_numel(&r->full->tensors[i].shape);
    return elems * (r->seeds > 0 ? r->seeds : 3) * 10e-9;
}

/* The first seed of a request whose inputs are g's graph inputs drawn at random: from g's bytes,
 * so every group verified through "full" and the assembled record draw the same graph inputs. */
static int graph_seed(const ops_graph *g, uint64_t *seed0, ops_diag *d)
{
    void *buf = NULL;
    size_t len = 0;
    if (ops_graph_to_msgpack(g, &buf, &len) < 0)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "", "cannot encode the graph");
    uint8_t h[32];
    ops_sha256(buf, len, h);
    free(buf);
    memcpy(seed0, h, sizeof(*seed0));
    return 0;
}

int srch_eval_req_set_full(srch_eval_req *r, const ops_graph *full, ops_diag *d)
{
    if (!r->sub)
        return ops_diag_set(d, full, OPS_RULE_SHAPE, -1, "", "request without a subgraph");
    for (int i = 0; i < r->sub->n_tensors && r->sub->tensors[i].producer < 0; i++)
        if (ops_graph_find_tensor(full, r->sub->tensors[i].name) < 0)
            return ops_diag_set(d, full, OPS_RULE_UNDEFINED, -1, r->sub->tensors[i].name,
                                "the graph has no tensor '%s' (an input of the group)",
                                r->sub->tensors[i].name);
    srch_binding b[SRCH_MAX_BINDINGS];
    int n = 0;
    uint64_t seed0 = 0;
    int rc = graph_bindings(full, b, &n, d);
    if (rc < 0 || (rc = graph_seed(full, &seed0, d)) < 0)
        return rc;
    ops_graph *copy = ops_graph_clone(full);
    if (!copy) {
        ops_diag_set(d, full, OPS_RULE_SHAPE, -1, "", "out of memory copying the graph");
        return -ENOMEM;
    }
    ops_graph_free(r->full);
    r->full = copy;
    r->n_full_bindings = n;
    memcpy(r->full_bindings, b, sizeof(b));
    r->seed0 = seed0;
    return 0;
}

int srch_eval_req_for_graph(const ops_graph *g, srch_eval_req *out, ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    int rc = graph_bindings(g, out->bindings, &out->n_bindings, d);
    if (rc < 0 || (rc = graph_seed(g, &out->seed0, d)) < 0)
        return rc;
    if (!(out->sub = ops_graph_clone(g))) {
        ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "", "out of memory copying the graph");
        return -ENOMEM;
    }
    out->precision = OPS_PREC_EXACT;
    out->seeds = 3;
    out->record = true;
    out->verify = true;
    out->time = false;
    return 0;
}
