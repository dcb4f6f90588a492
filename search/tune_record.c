/* The record of search/tune.h's job: the pick's candidates materialised (emitted, compiled, or
 * the cubin kept from their evaluation) and assembled into a cache_record, a linked partition's
 * kernels through search/link.h; then that record evaluated as assembled over the whole graph
 * before it is stored, falling back to the next picks. The job's state and the ranking this
 * reads: search/tune_internal.h. */
#include "link.h"
#include "tune_internal.h"

#include "ktune_config.h"
#include "ops/devlib.h"
#include "ops/library.h"
#include "ops/ops.h"

#include <math.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG "tune"

/* Byte alignment of workspace slots (docs/search.md). */
#define SLOT_ALIGN 256

/* ---- the record ---- */

void srch_tn_group_text(const ops_group *grp, char *buf, size_t len)
{
    const ops_graph *g = grp->g;
    size_t off = 0;
    buf[0] = '\0';
    for (int k = 0; k < grp->n_nodes && off + 1 < len; k++) {
        const ops_node *nd = &g->nodes[grp->nodes[k]];
        int w = snprintf(buf + off, len - off, "%s%s = %s(", k ? "; " : "",
                         g->tensors[nd->out].name, ops_op_info_get(nd->op)->name);
        if (w < 0 || (size_t)w >= len - off)
            break;
        off += (size_t)w;
        for (int j = 0; j < nd->n_in && off + 1 < len; j++) {
            if (nd->in[j].tensor == OPS_SCALAR)
                w = snprintf(buf + off, len - off, "%s%g", j ? ", " : "", nd->in[j].scalar);
            else
                w = snprintf(buf + off, len - off, "%s%s", j ? ", " : "",
                             g->tensors[nd->in[j].tensor].name);
            if (w < 0 || (size_t)w >= len - off)
                break;
            off += (size_t)w;
        }
        if (off + 1 < len) {
            buf[off++] = ')';
            buf[off] = '\0';
        }
    }
}

/* Emits (and if need be compiles: a store hit, or the cubin kept from the evaluation) the
 * candidate for its record; as group `part` of a linked partition (part >= 0), only emits it,
 * with that group's entry suffix. */
static int materialise(tune *t, int64_t i, int part, ops_emitted *em, void **cubin,
                       size_t *cubin_len, kt_err *err)
{
    const srch_candidate *sc = &t->list[i];
    ops_diag d = {0};
    memset(em, 0, sizeof(*em));
    *cubin = NULL;
    *cubin_len = 0;
    ops_group grp = t->s->groups[sc->group].group;
    if (part >= 0)
        srch_link_suffix(part, &grp);
    if (ops_family_get(sc->schedule.family)->emit(&grp, &sc->schedule, &t->dev, em, &d) < 0)
        return kt_err_set(err, -EINVAL, "emit for the record: %s", d.msg);
    if (em->n_kernels == 0 || part >= 0) /* a linked group's cubin is the module's */
        return 0;
    if (t->c[i].cubin) {
        if (!(*cubin = malloc(t->c[i].cubin_len)))
            return kt_err_set(err, -ENOMEM, "out of memory");
        memcpy(*cubin, t->c[i].cubin, t->c[i].cubin_len);
        *cubin_len = t->c[i].cubin_len;
        return 0;
    }
    /* Resumed from the log: compile again (the pool's store makes this a lookup). Results of
     * earlier batches still in flight are drained first. */
    while (srch_pool_pending(t->pool) > 0) {
        srch_compile_result cr = {0};
        if (srch_pool_next(t->pool, &cr, NULL) < 0)
            break;
        srch_compile_result_release(&cr);
    }
    if (srch_pool_submit(t->pool, em->source, (uint64_t)i) < 0)
        return kt_err_set(err, -ENOMEM, "out of memory");
    srch_compile_result cr = {0};
    kt_err perr = {0};
    int rc = srch_pool_next(t->pool, &cr, &perr);
    if (rc < 0)
        return kt_err_set(err, rc, "compile for the record: %s", perr.msg);
    srch_tn_add_compile(t, &cr);
    if (cr.status != SRCH_COMPILE_OK) {
        srch_compile_result_release(&cr);
        return kt_err_set(err, -EIO, "compile for the record failed");
    }
    *cubin = cr.cubin;
    *cubin_len = cr.cubin_len;
    cr.cubin = NULL;
    srch_compile_result_release(&cr);
    return 0;
}

/* Where each tensor of the graph lives for the record: graph inputs and outputs by canonical
 * index, intermediates in their own 256-byte-aligned workspace slot. */
typedef struct io_map {
    int *in_rank, *out_rank;
    uint64_t *slot; /* per tensor: workspace offset of an intermediate, UINT64_MAX otherwise */
    uint64_t ws;    /* bytes of the intermediate slots */
    int n_inputs;
} io_map;

static int io_map_build(const tune *t, const srch_partition *part, io_map *m, kt_err *err)
{
    const ops_graph *g = t->s->g;
    memset(m, 0, sizeof(*m));
    while (m->n_inputs < g->n_tensors && g->tensors[m->n_inputs].producer < 0)
        m->n_inputs++;
    m->in_rank = calloc((size_t)m->n_inputs + 1, sizeof(int));
    m->out_rank = calloc((size_t)g->n_outputs + 1, sizeof(int));
    m->slot = malloc((size_t)g->n_tensors * sizeof(uint64_t));
    if (!m->in_rank || !m->out_rank || !m->slot)
        return kt_err_set(err, -ENOMEM, "out of memory");
    ops_diag d = {0};
    if (ops_graph_canonical_io(g, m->in_rank, m->out_rank, &d) < 0)
        return kt_err_set(err, -EINVAL, "canonical io: %s", d.msg);
    for (int i = 0; i < g->n_tensors; i++)
        m->slot[i] = UINT64_MAX;
    for (int k = 0; k < part->n_intermediates; k++) {
        const ops_tensor *x = &g->tensors[part->intermediates[k]];
        uint64_t bytes = (uint64_t)ops_shape_numel(&x->shape) * ops_dtype_size(x->dtype);
        m->slot[part->intermediates[k]] = m->ws;
        m->ws += (bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
    }
    return 0;
}

static void io_map_free(io_map *m)
{
    free(m->in_rank);
    free(m->out_rank);
    free(m->slot);
}

/* Maps one emitted argument onto the record's slots. A workspace argument of the group's own
 * workspace (own_ws bytes from ws_base) may use the rest of it from its offset; an intermediate
 * its tensor's bytes. */
static int map_arg(const tune *t, const io_map *m, const ops_arg *a, uint64_t ws_base,
                   uint64_t own_ws, cache_arg *out, kt_err *err)
{
    if (a->kind == OPS_ARG_TENSOR_MAP) {
        /* the map's base is mapped like a pointer argument; the map itself travels as is (its
         * dims and strides describe the tensor, not where it lives) */
        ops_arg base = {.kind = a->tensor < 0 ? OPS_ARG_WORKSPACE : OPS_ARG_TENSOR,
                        .tensor = a->tensor,
                        .offset = a->offset};
        int rc = map_arg(t, m, &base, ws_base, own_ws, out, err);
        if (rc < 0)
            return rc;
        out->has_tmap = true;
        out->tmap = a->tmap;
        return 0;
    }
    const ops_graph *g = t->s->g;
    memset(out, 0, sizeof(*out));
    if (a->kind == OPS_ARG_WORKSPACE) {
        if (a->offset < 0 || (uint64_t)a->offset >= own_ws)
            return kt_err_set(err, -EINVAL, "workspace argument at %lld of the group's %llu bytes",
                              (long long)a->offset, (unsigned long long)own_ws);
        out->kind = CACHE_ARG_WORKSPACE;
        out->offset = ws_base + (uint64_t)a->offset;
        out->bytes = own_ws - (uint64_t)a->offset;
        return 0;
    }
    if (a->tensor < 0 || a->tensor >= g->n_tensors)
        return kt_err_set(err, -EINVAL, "argument tensor %d out of range", a->tensor);
    if (a->tensor < m->n_inputs) {
        out->kind = CACHE_ARG_INPUT;
        out->index = m->in_rank[a->tensor];
        return 0;
    }
    for (int j = 0; j < g->n_outputs; j++)
        if (g->outputs[j] == a->tensor) {
            out->kind = CACHE_ARG_OUTPUT;
            out->index = m->out_rank[j];
            return 0;
        }
    if (m->slot[a->tensor] == UINT64_MAX)
        return kt_err_set(err, -EINVAL, "tensor %s is neither graph I/O nor an intermediate",
                          g->tensors[a->tensor].name);
    const ops_tensor *x = &g->tensors[a->tensor];
    out->kind = CACHE_ARG_WORKSPACE;
    out->offset = m->slot[a->tensor];
    out->bytes = (uint64_t)ops_shape_numel(&x->shape) * ops_dtype_size(x->dtype);
    return 0;
}

/* Appends the kernels of one emitted group to rec, under the entry names it was emitted with. */
static int add_kernels(const tune *t, const io_map *m, const ops_emitted *em, uint64_t ws_base,
                       const ops_lt_desc *lt, cache_record *rec, kt_err *err)
{
    int n = em->n_kernels ? em->n_kernels : 1;
    cache_kernel *k = realloc(rec->kernels, (size_t)(rec->n_kernels + n) * sizeof(*k));
    if (!k)
        return kt_err_set(err, -ENOMEM, "out of memory");
    rec->kernels = k;
    k += rec->n_kernels;
    memset(k, 0, (size_t)n * sizeof(*k));
    rec->n_kernels += n;
    if (!em->n_kernels) {
        /* A cuBLASLt call: one pseudo-launch named "cublasLtMatmul" whose arguments are A, B,
         * C (= D) and, with a bias epilogue, the bias, as graph I/O; the runtime rebuilds the
         * call from the graph and the schedule (ops_library_describe). */
        int32_t ts[4] = {lt->a_tensor, lt->b_tensor, lt->c_tensor, lt->bias_tensor};
        k->entry = kt_strdup("cublasLtMatmul");
        k->args = calloc(4, sizeof(cache_arg));
        if (!k->entry || !k->args)
            return kt_err_set(err, -ENOMEM, "out of memory");
        for (int j = 0; j < 4; j++) {
            if (ts[j] < 0)
                continue;
            ops_arg a = {.kind = OPS_ARG_TENSOR, .tensor = ts[j]};
            int rc = map_arg(t, m, &a, ws_base, 0, &k->args[k->n_args++], err);
            if (rc < 0)
                return rc;
        }
        return 0;
    }
    for (int i = 0; i < em->n_kernels; i++) {
        const ops_kernel_launch *l = &em->kernels[i];
        k[i].entry = kt_strdup(l->entry);
        k[i].args = calloc((size_t)l->n_args + 1, sizeof(cache_arg));
        if (!k[i].entry || !k[i].args)
            return kt_err_set(err, -ENOMEM, "out of memory");
        memcpy(k[i].grid, l->grid, sizeof(k[i].grid));
        memcpy(k[i].block, l->block, sizeof(k[i].block));
        k[i].smem_bytes = l->smem_bytes;
        if (l->zero_workspace) { /* this group's slot only: other slots hold live intermediates */
            k[i].zero_offset = ws_base;
            k[i].zero_bytes = (uint64_t)(l->zero_prefix ? l->zero_prefix : em->workspace_bytes);
        }
        for (int j = 0; j < l->n_args; j++) {
            int rc = map_arg(t, m, &l->args[j], ws_base, (uint64_t)em->workspace_bytes,
                             &k[i].args[j], err);
            if (rc < 0)
                return rc;
            k[i].n_args++;
        }
    }
    return 0;
}

static int nvrtc_version(void)
{
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
        return 0;
    return major * 1000 + minor * 10;
}

/* Fills rec for candidate list indices cand[0..n) forming partition part (one per group, in
 * launch order). One group: its source and cubin as they are. Several: each group emitted with
 * the entry suffix "_g<k>", linked into one module from the emitters' pieces (search/link.h),
 * compiled through the pool. */
static int build_record(tune *t, const srch_partition *part, const int64_t *ci, int n,
                        cache_record *rec, kt_err *err)
{
    io_map m;
    int rc = io_map_build(t, part, &m, err);
    ops_emitted em[OPS_GROUP_MAX_NODES];
    void *cubins[OPS_GROUP_MAX_NODES] = {0};
    size_t cubin_lens[OPS_GROUP_MAX_NODES] = {0};
    int n_em = 0;
    memset(em, 0, sizeof(em));
    if (rc < 0)
        goto out;
    for (int k = 0; k < n; k++) {
        int link_as = n > 1 ? k : -1; /* linked: emitted with group k's entry suffix */
        if ((rc = materialise(t, ci[k], link_as, &em[k], &cubins[k], &cubin_lens[k], err)) < 0)
            goto out;
        n_em++;
        if (n > 1 && em[k].n_kernels == 0) {
            rc = kt_err_set(err, -ENOTSUP,
                            "a partition mixing a cuBLASLt call with other kernels has no "
                            "single-module record yet");
            goto out;
        }
    }
    uint64_t ws = m.ws;
    for (int k = 0; k < n; k++) {
        const srch_candidate *sc = &t->list[ci[k]];
        ops_lt_desc lt = {0};
        ops_diag d = {0};
        if (em[k].n_kernels == 0 &&
            ops_library_describe(&t->s->groups[sc->group].group, &sc->schedule, &lt, &d) < 0) {
            rc = kt_err_set(err, -EINVAL, "library record: %s", d.msg);
            goto out;
        }
        if ((rc = add_kernels(t, &m, &em[k], ws, &lt, rec, err)) < 0)
            goto out;
        int64_t own = em[k].n_kernels ? em[k].workspace_bytes : lt.workspace_bytes;
        ws += (uint64_t)(own + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
    }
    rec->workspace_bytes = ws;
    /* what the stored record cannot tell: the graph's every output slot is written */
    if ((rc = cache_record_check_outputs(rec, t->s->g->n_outputs, err)) < 0)
        goto out;
    if (n == 1) {
        rec->source = em[0].source;
        em[0].source = NULL;
        rec->cubin = cubins[0];
        cubins[0] = NULL;
        rec->cubin_len = cubin_lens[0];
    } else {
        if ((rc = srch_link_partition(em, n, &rec->source, &rec->source_len, err)) < 0)
            goto out;
        if (srch_pool_submit(t->pool, rec->source, UINT64_MAX) < 0) {
            rc = kt_err_set(err, -ENOMEM, "out of memory");
            goto out;
        }
        srch_compile_result cr = {0};
        kt_err perr = {0};
        for (;;) {
            if ((rc = srch_pool_next(t->pool, &cr, &perr)) < 0) {
                kt_err_set(err, rc, "compiling the partition module: %s", perr.msg);
                goto out;
            }
            if (cr.tag == UINT64_MAX)
                break;
            srch_compile_result_release(&cr);
        }
        srch_tn_add_compile(t, &cr);
        if (cr.status != SRCH_COMPILE_OK) {
            char line[200];
            srch_tn_first_error_line(cr.log ? cr.log : "", line, sizeof(line));
            srch_compile_result_release(&cr);
            rc = kt_err_set(err, -EIO, "the partition module does not compile: %s", line);
            goto out;
        }
        rec->cubin = cr.cubin;
        rec->cubin_len = cr.cubin_len;
        cr.cubin = NULL;
        srch_compile_result_release(&cr);
    }
    if (rec->source) {
        /* A record is read where this binary's device library is not: its headers go into the
         * stored source, which then compiles on its own (docs/decisions.md, "device library"). */
        char *flat = NULL;
        if ((rc = ops_devlib_inline(rec->source, &flat, err)) < 0)
            goto out;
        free(rec->source);
        rec->source = flat;
        rec->source_len = strlen(flat);
    }
out:
    for (int k = 0; k < n_em; k++) {
        ops_emitted_free(&em[k]);
        free(cubins[k]);
    }
    io_map_free(&m);
    return rc;
}

/* The rank the cache holds a record of rec's family and schedule at, or -1. */
static int cached_rank(tune *t, const cache_record *rec)
{
    for (int rank = 0; rank <= 32; rank++) {
        cache_record x;
        cache_record_init(&x);
        int rc = cache_get(t->cache, &t->key, rank, &x, NULL);
        bool same = rc == 0 && x.family && x.schedule && strcmp(x.family, rec->family) == 0 &&
                    strcmp(x.schedule, rec->schedule) == 0;
        cache_record_free(&x);
        if (same)
            return rank;
        if (rc == -ENOENT)
            break;
    }
    return -1;
}

/* ---- the record, evaluated as assembled ---- */

/* Every record build_record can assemble fits one request. */
_Static_assert(SRCH_REQ_MAX_KERNELS >= CACHE_MAX_KERNELS, "a record the worker cannot evaluate");

/* Picks whose record srch_tn_record() tries before it gives up: each one that cannot be built or
 * fails its whole-graph evaluation sets its partition (or one-group candidate) aside, and the next
 * best is tried. Each try is one compile at most and one evaluation. */
#define RECORD_TRIES 3

/* The trial-log id of an assembled record: "record " and 32 hex digits of SHA-256 over what it
 * runs (family, schedule, cubin, launches with their argument maps, workspace), so a rerun of
 * the job finds the outcome of exactly this record and evaluates it again only if it changed. */
static int record_id(const cache_record *rec, char out[CACHE_CAND_MAX], kt_err *err)
{
    uint8_t dig[32];
    char hex[65];
    kt_buf b = {0};
    ops_sha256(rec->cubin ? (const void *)rec->cubin : "", rec->cubin_len, dig);
    kt_hex(dig, sizeof(dig), hex);
    kt_buf_printf(&b, "%s\n%s\ncubin %s %zu\nworkspace %llu\n", rec->family, rec->schedule, hex,
                  rec->cubin_len, (unsigned long long)rec->workspace_bytes);
    for (int k = 0; k < rec->n_kernels; k++) {
        const cache_kernel *kk = &rec->kernels[k];
        kt_buf_printf(&b, "%s %u,%u,%u %u,%u,%u %u zero %llu+%llu", kk->entry, kk->grid[0],
                      kk->grid[1], kk->grid[2], kk->block[0], kk->block[1], kk->block[2],
                      kk->smem_bytes, (unsigned long long)kk->zero_offset,
                      (unsigned long long)kk->zero_bytes);
        for (int j = 0; j < kk->n_args; j++) {
            const cache_arg *a = &kk->args[j];
            kt_buf_printf(&b, " %d:%d:%llu:%d:%lld:%.17g", (int)a->kind, (int)a->index,
                          (unsigned long long)a->offset, (int)a->scalar, (long long)a->ival,
                          a->fval);
            if (a->has_tmap) { /* the same pointers read through another map are another record */
                const ops_tensor_map *tm = &a->tmap;
                kt_buf_printf(&b, ":tmap%d,%d,%d,%d,%d", tm->rank, tm->dtype, tm->swizzle,
                              tm->l2_promotion, (int)tm->oob_nan);
                for (int i = 0; i < OPS_TMAP_MAX_RANK; i++)
                    kt_buf_printf(&b, ",%llu/%llu/%u/%u", (unsigned long long)tm->dims[i],
                                  i < OPS_TMAP_MAX_RANK - 1 ? (unsigned long long)tm->strides[i]
                                                            : 0ull,
                                  tm->box[i], tm->elem_strides[i]);
            }
        }
        kt_buf_printf(&b, "\n");
    }
    if (kt_buf_status(&b) < 0) {
        kt_buf_free(&b);
        return kt_err_set(err, -ENOMEM, "out of memory");
    }
    ops_sha256(b.data, b.len, dig);
    kt_buf_free(&b);
    kt_hex(dig, 16, hex);
    snprintf(out, CACHE_CAND_MAX, "record %s", hex);
    return 0;
}

/* The tensor of req->sub that a record's INPUT or OUTPUT argument a points to (canonical rank:
 * by_in[rank] is g's input tensor of that rank, by_out[rank] its output tensor). */
static int record_tensor(const srch_eval_req *req, const ops_graph *g, const int *by_in, int n_in,
                         const int *by_out, const cache_arg *a, int32_t *out, kt_err *err)
{
    int gt = -1;
    if (a->kind == CACHE_ARG_INPUT && a->index >= 0 && a->index < n_in)
        gt = by_in[a->index];
    else if (a->kind == CACHE_ARG_OUTPUT && a->index >= 0 && a->index < g->n_outputs)
        gt = by_out[a->index];
    if (gt < 0)
        return kt_err_set(err, -EINVAL,
                          "argument (kind %d, index %d) is not a graph input or output",
                          (int)a->kind, (int)a->index);
    int st = ops_graph_find_tensor(req->sub, g->tensors[gt].name);
    if (st < 0)
        return kt_err_set(err, -EINVAL, "tensor %s missing from the request", g->tensors[gt].name);
    *out = st;
    return 0;
}

/* The worker's request for rec as it will be served (runtime: client/runtime.c): the whole
 * canonical bound graph is the subgraph, rec's launches in order with its argument map turned
 * back into that graph's tensors (canonical input and output ranks), its workspace and zero
 * ranges, verified against the graph's fp64 reference, not timed. A library record's call is
 * rebuilt from the graph and candidate ci's schedule, as the runtime rebuilds it, on the
 * pointers of rec's pseudo-launch. Returns 0, -ENOTSUP (a record the worker cannot run:
 * detail in err), -EINVAL or -ENOMEM. */
static int record_request(tune *t, const cache_record *rec, int64_t ci, srch_eval_req *req,
                          kt_err *err)
{
    const ops_graph *g = t->s->g;
    ops_diag d = {0};
    int n_in = 0;
    while (n_in < g->n_tensors && g->tensors[n_in].producer < 0)
        n_in++;
    int *in_rank = calloc((size_t)n_in + 1, sizeof(int));
    int *out_rank = calloc((size_t)g->n_outputs + 1, sizeof(int));
    int *by_in = calloc((size_t)n_in + 1, sizeof(int));
    int *by_out = calloc((size_t)g->n_outputs + 1, sizeof(int));
    int rc = 0;
    memset(req, 0, sizeof(*req));
    if (!in_rank || !out_rank || !by_in || !by_out) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    if (ops_graph_canonical_io(g, in_rank, out_rank, &d) < 0) {
        rc = kt_err_set(err, -EINVAL, "canonical io: %s", d.msg);
        goto out;
    }
    for (int i = 0; i < n_in; i++)
        by_in[i] = -1;
    for (int j = 0; j < g->n_outputs; j++)
        by_out[j] = -1;
    for (int i = 0; i < n_in; i++)
        if (in_rank[i] >= 0 && in_rank[i] < n_in)
            by_in[in_rank[i]] = i;
    for (int j = 0; j < g->n_outputs; j++)
        if (out_rank[j] >= 0 && out_rank[j] < g->n_outputs)
            by_out[out_rank[j]] = g->outputs[j];
    if ((rc = srch_eval_req_for_graph(g, req, &d)) < 0) {
        rc = kt_err_set(err, rc, "%s", d.msg);
        goto out;
    }
    req->id = (uint64_t)t->n + ++t->record_evals; /* beyond every candidate's id */
    req->precision = t->o->precision;
    req->tolerance = t->o->tolerance;
    req->seeds = srch_tn_defint(t->o->seeds, 3);
    req->workspace_bytes = (int64_t)rec->workspace_bytes;
    if (rec->family && strcmp(rec->family, "library") == 0) {
        const srch_candidate *sc = &t->list[ci];
        ops_lt_desc lt;
        if (rec->n_kernels != 1 || sc->schedule.family != OPS_FAM_LIBRARY ||
            ops_library_describe(&t->s->groups[sc->group].group, &sc->schedule, &lt, &d) < 0) {
            rc = kt_err_set(err, -EINVAL, "library record: %s", d.msg[0] ? d.msg : "malformed");
            goto out;
        }
        const cache_kernel *kk = &rec->kernels[0];
        int32_t *ptr[4] = {&lt.a_tensor, &lt.b_tensor, &lt.c_tensor, &lt.bias_tensor};
        if (kk->n_args != 3 + (lt.bias_tensor >= 0)) {
            rc = kt_err_set(err, -EINVAL, "library record: %d arguments for its call", kk->n_args);
            goto out;
        }
        for (int j = 0; j < kk->n_args && rc == 0; j++)
            rc = record_tensor(req, g, by_in, n_in, by_out, &kk->args[j], ptr[j], err);
        req->library = true;
        req->lt = lt;
        goto out;
    }
    if (!rec->cubin || !rec->cubin_len || rec->n_kernels < 1 ||
        rec->n_kernels > SRCH_REQ_MAX_KERNELS) {
        rc = kt_err_set(err, -ENOTSUP, "a record of %d kernels%s: the worker runs 1 to %d",
                        rec->n_kernels, rec->cubin ? "" : " without a cubin", SRCH_REQ_MAX_KERNELS);
        goto out;
    }
    if (!(req->cubin = malloc(rec->cubin_len))) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    memcpy(req->cubin, rec->cubin, rec->cubin_len);
    req->cubin_len = rec->cubin_len;
    req->n_kernels = rec->n_kernels;
    for (int k = 0; k < rec->n_kernels && rc == 0; k++) {
        const cache_kernel *kk = &rec->kernels[k];
        ops_kernel_launch *l = &req->kernels[k];
        if (!kk->entry || strlen(kk->entry) >= sizeof(l->entry) || kk->n_args > OPS_MAX_ARGS) {
            rc = kt_err_set(err, -ENOTSUP,
                            "kernel %d: an entry name over %zu bytes or over %d "
                            "arguments",
                            k, sizeof(l->entry) - 1, OPS_MAX_ARGS);
            break;
        }
        snprintf(l->entry, sizeof(l->entry), "%s", kk->entry);
        memcpy(l->grid, kk->grid, sizeof(l->grid));
        memcpy(l->block, kk->block, sizeof(l->block));
        l->smem_bytes = kk->smem_bytes;
        l->zero_workspace = kk->zero_bytes > 0;
        req->zero_offset[k] = (int64_t)kk->zero_offset;
        req->zero_bytes[k] = (int64_t)kk->zero_bytes;
        l->n_args = kk->n_args;
        for (int j = 0; j < kk->n_args && rc == 0; j++) {
            const cache_arg *a = &kk->args[j];
            if (a->kind == CACHE_ARG_WORKSPACE) {
                l->args[j] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = (int64_t)a->offset};
                if (a->has_tmap) /* over the workspace: tensor -1, base + offset */
                    l->args[j] = (ops_arg){.kind = OPS_ARG_TENSOR_MAP,
                                           .tensor = -1,
                                           .offset = (int64_t)a->offset,
                                           .tmap = a->tmap};
            } else if (a->kind == CACHE_ARG_SCALAR) {
                rc = kt_err_set(err, -ENOTSUP, "kernel %s: a by-value argument", kk->entry);
            } else {
                l->args[j].kind = a->has_tmap ? OPS_ARG_TENSOR_MAP : OPS_ARG_TENSOR;
                if (a->has_tmap)
                    l->args[j].tmap = a->tmap;
                rc = record_tensor(req, g, by_in, n_in, by_out, a, &l->args[j].tensor, err);
            }
        }
    }
out:
    if (rc < 0)
        srch_eval_req_free(req);
    free(in_rank);
    free(out_rank);
    free(by_in);
    free(by_out);
    return rc;
}

/* The outcome of evaluating rec as assembled: on the worker (record_request), or read back from
 * the trial log where an earlier run of the job evaluated exactly this record (record_id). The
 * outcome is logged like a candidate's: its status, its normwise error, and as detail
 * "assembled max=<err_max>" or "<srch_status>: <reason>"; a logged pass whose error is over
 * rec->tolerance (this job's) counts as wrong. A record the worker cannot run is a load_error, not
 * logged. res gets status, err_norm, err_max and msg. Returns 0, or a negative errno: the
 * worker cannot be restarted, the trial log cannot be written, -ECANCELED. */
static int check_record(tune *t, const cache_record *rec, int64_t ci, srch_eval_result *res,
                        kt_err *err)
{
    char id[CACHE_CAND_MAX];
    cache_trial tr;
    memset(res, 0, sizeof(*res));
    int rc = record_id(rec, id, err);
    if (rc < 0)
        return rc;
    if (srch_tn_trial_get(t, id, &tr) == 0) {
        t->r->assembled_resumed++;
        res->err_norm = tr.error;
        if (tr.status != CACHE_TRIAL_OK) {
            srch_tn_failure_from_trial(&tr, &res->status, res->msg, sizeof(res->msg));
        } else if (sscanf(tr.detail, "assembled max=%lg", &res->err_max) != 1) {
            res->status = SRCH_WRONG;
            snprintf(res->msg, sizeof(res->msg), "unreadable trial detail '%.200s'", tr.detail);
        } else if (tr.error > rec->tolerance) {
            res->status = SRCH_WRONG;
            snprintf(res->msg, sizeof(res->msg), "error %.3g over this job's tolerance %.3g",
                     tr.error, rec->tolerance);
        }
    } else {
        srch_eval_req req;
        kt_err rerr = {0};
        bool restarted;
        if ((rc = record_request(t, rec, ci, &req, &rerr)) < 0) {
            if (rc == -ENOMEM)
                return kt_err_set(err, rc, "%s", rerr.msg);
            res->status = SRCH_LOAD_ERROR;
            snprintf(res->msg, sizeof(res->msg), "cannot build the request: %.200s", rerr.msg);
            t->r->assembled_failed++;
            return 0;
        }
        if ((rc = srch_tn_worker_eval(t, &req, res, &restarted, err)) < 0)
            return rc;
        if (srch_tn_cancelled(t) && (res->status == SRCH_FAULT || res->status == SRCH_HANG))
            return kt_err_set(err, -ECANCELED, "cancelled while evaluating the record");
        t->r->assembled++;
        memset(&tr, 0, sizeof(tr));
        snprintf(tr.cand, sizeof(tr.cand), "%s", id);
        tr.status = srch_tn_trial_status(res->status);
        tr.error = isfinite(res->err_norm) ? res->err_norm : 1e300;
        srch_tn_stamp(&tr);
        if (res->status == SRCH_OK)
            snprintf(tr.detail, sizeof(tr.detail), "assembled max=%.17g",
                     isfinite(res->err_max) ? res->err_max : 1e300);
        else
            snprintf(tr.detail, sizeof(tr.detail), "%s: %.200s", srch_status_str(res->status),
                     res->msg);
        if ((rc = cache_trial_append(t->cache, &t->key, &tr, err)) < 0)
            return rc;
    }
    if (res->status != SRCH_OK)
        t->r->assembled_failed++;
    return 0;
}

/* Builds, evaluates as assembled (check_record) and puts the records of partition p: for one
 * group its pick and the runner-ups, for several one record of the groups' picks. Only a record
 * that passed is put, as verified, with the error of that evaluation. *stored: the pick's record
 * was put (then *err_norm is its error). When the pick's record cannot be built or fails, the
 * partition (several groups) or the candidate (one group) is set aside, nothing of p is put,
 * and why says why. A runner-up that fails is left out. Returns 0 or a negative errno. */
static int record_partition(tune *t, int p, bool *stored, double *err_norm, char *why,
                            size_t why_len, kt_err *err)
{
    const srch_partition *part = &t->s->partitions[p];
    srch_tune_result *r = t->r;
    int nrec = 1;
    int64_t ranked[33];
    int64_t ci[OPS_GROUP_MAX_NODES];
    *stored = false;
    if (part->n_groups == 1) {
        /* The winner first (group_best's rule), then the others in ranking order. */
        int64_t all[2 * (1 + CACHE_RUNNER_UPS)], best = srch_tn_group_best(t, part->groups[0], -1);
        /* Runner-ups: times comparable with the winner's (re-timed with it when it was: the
         * filter comes before the cut, or faster screening times would crowd them out), and
         * none faster than it (a within-noise tie lost to the cost model's order), so the
         * cache, which ranks by time alone, keeps the winner at rank 0. */
        int m = srch_tn_group_ranked(t, part->groups[0], t->c[best].retimed, all,
                                     2 * (1 + CACHE_RUNNER_UPS));
        nrec = 0;
        ranked[nrec++] = best;
        for (int j = 0; j < m && nrec < 1 + CACHE_RUNNER_UPS; j++)
            if (all[j] != best &&
                srch_tn_tm(t, all[j])->median_ns >= srch_tn_tm(t, best)->median_ns)
                ranked[nrec++] = all[j];
    }
    for (int k = 0; k < part->n_groups; k++)
        ci[k] = srch_tn_part_pick(t, part, k);
    int rc = 0;
    for (int q = 0; q < nrec; q++) {
        if (part->n_groups == 1)
            ci[0] = ranked[q];
        cache_record rec;
        cache_record_init(&rec);
        rec.key = t->key;
        rec.graph_name = kt_strdup(t->s->g->name ? t->s->g->name : "");
        kt_err rerr = {0};
        /* The slots come from the graph the argument map was built on; its problem digest
         * must be the key's (computed from the bound graph before canonicalisation). */
        rc = cache_record_set_problem(&rec, t->s->g, &rerr);
        if (rc == 0 && memcmp(rec.key.problem, t->key.problem, OPS_SIG_BYTES) != 0)
            rc = kt_err_set(&rerr, -EINVAL, "the canonical graph poses another problem");
        if (rc == 0)
            rc = build_record(t, part, ci, part->n_groups, &rec, &rerr);
        if (rc < 0) {
            cache_record_free(&rec);
            kt_log_warn(TAG, "no cache record: %s", rerr.msg);
            if (q == 0) {
                snprintf(why, why_len, "%.250s", rerr.msg);
                goto set_aside;
            }
            rc = 0;
            continue;
        }
        double med = 0, p10 = 0, p90 = 0, base = 0;
        uint32_t reps = UINT32_MAX;
        bool cold = false;
        for (int k = 0; k < part->n_groups; k++) {
            const srch_time_stats *ts = srch_tn_tm(t, ci[k]);
            med += ts->median_ns;
            p10 += ts->p10_ns;
            p90 += ts->p90_ns;
            if ((uint32_t)ts->reps < reps)
                reps = (uint32_t)ts->reps;
            cold |= ts->cold;
            int64_t lib = srch_tn_group_best(t, part->groups[k], 1);
            base += lib >= 0 ? srch_tn_tm(t, lib)->median_ns : 0;
        }
        double gaps = TN_GAP_NS * (part->n_groups - 1);
        const srch_candidate *sc0 = &t->list[ci[0]];
        char sched[512];
        if (part->n_groups == 1) {
            ops_schedule_format(&sc0->schedule, sched, sizeof(sched));
            rec.family = kt_strdup(ops_family_get(sc0->schedule.family)->name);
        } else {
            size_t off = 0;
            sched[0] = '\0';
            for (int k = 0; k < part->n_groups && off < sizeof(sched); k++) {
                char one[256];
                ops_schedule_format(&t->list[ci[k]].schedule, one, sizeof(one));
                off +=
                    (size_t)snprintf(sched + off, sizeof(sched) - off, "%s%s", k ? " | " : "", one);
            }
            rec.family = kt_strdup("partition");
        }
        rec.schedule = kt_strdup(sched);
        /* Time: the sum of the groups' measurements and the model's gaps (the assembled record
         * is verified, not timed: see check_record). */
        rec.time_ns = med + gaps;
        rec.time_p10_ns = p10 + gaps;
        rec.time_p90_ns = p90 + gaps;
        rec.timing = cold ? CACHE_TIMING_COLD : CACHE_TIMING_HOT;
        rec.reps = reps == UINT32_MAX ? 0 : reps;
        rec.tolerance =
            t->o->tolerance > 0 ? t->o->tolerance : ops_default_tolerance(t->s->g, t->o->precision);
        rec.cublaslt_ns = base;
        rec.naive_ns = 0;
        rec.ktune_version = kt_strdup(KTUNE_VERSION);
        rec.nvrtc_version = nvrtc_version();
        rec.created = (int64_t)time(NULL);
        if (!rec.family || !rec.schedule || !rec.ktune_version || !rec.graph_name) {
            cache_record_free(&rec);
            return kt_err_set(err, -ENOMEM, "out of memory");
        }
        /* What is stored is what was verified: exactly these bytes and launches, run as one
         * whole-graph candidate against the graph's fp64 reference. */
        srch_eval_result res;
        if ((rc = check_record(t, &rec, ci[0], &res, err)) < 0) {
            cache_record_free(&rec);
            return rc;
        }
        if (res.status != SRCH_OK) {
            kt_log_warn(TAG, "record %s failed its whole-graph evaluation: %s: %s", rec.schedule,
                        srch_status_str(res.status), res.msg);
            if (q == 0)
                snprintf(why, why_len,
                         "the record of %.80s failed its whole-graph evaluation (%s: %.100s)",
                         rec.schedule, srch_status_str(res.status), res.msg);
            cache_record_free(&rec);
            if (q == 0)
                goto set_aside;
            continue;
        }
        rec.verified = true;
        rec.err_norm = res.err_norm;
        rec.err_max = res.err_max;
        /* The floor's FLOP term needs the graph, which only tuning has (cache_put checks the
         * traffic term): a time no GPU can reach is a timing fault, never a record. */
        kt_err ferr = {0};
        if (cache_record_check_floor(&rec, t->s->g, &ferr) < 0) {
            kt_log_warn(TAG, "record %s refused: %s", rec.schedule, ferr.msg);
            if (q == 0)
                snprintf(why, why_len, "the record of %.80s was refused: %.100s", rec.schedule,
                         ferr.msg);
            cache_record_free(&rec);
            if (q == 0)
                goto set_aside;
            continue;
        }
        int rank = -1;
        rc = cache_put(t->cache, &rec, &rank, err);
        if (rc == 0 && rank < 0)
            rank = cached_rank(t, &rec); /* already there from an earlier run of the job */
        cache_record_free(&rec);
        if (rc < 0)
            return rc;
        r->records++;
        if (q == 0) {
            r->rank = rank;
            *stored = true;
            *err_norm = res.err_norm;
        }
    }
    return 0;
set_aside:
    if (part->n_groups == 1)
        t->c[ci[0]].set_aside = true;
    else
        t->part_set_aside[p] = true;
    return 0;
}

/* Puts the best partition's records into the cache (record_partition), each only after it
 * passed as assembled. A pick whose record fails sets its partition or candidate aside and the
 * next best is tried, up to RECORD_TRIES picks; r->record_fallback then says why a faster pick
 * was not stored. When none passes, nothing is stored, r->record_note says why, and the set-aside
 * marks are lifted so the result describes the measured winner. *err_norm: the stored pick's
 * whole-graph error, or -1 when none was stored. */
int srch_tn_record(tune *t, double *err_norm, kt_err *err)
{
    srch_tune_result *r = t->r;
    char why[256], first[256] = "";
    int failed = 0, rc = 0;
    bool stored = false;
    *err_norm = -1;
    srch_tn_report(t, "record");
    for (int tries = 0; tries < RECORD_TRIES && !stored; tries++) {
        int p;
        if (srch_tn_best_partition(t, &p, false) <= 0)
            break;
        why[0] = '\0';
        if ((rc = record_partition(t, p, &stored, err_norm, why, sizeof(why), err)) < 0)
            return rc;
        if (!stored) {
            failed++;
            if (!first[0])
                snprintf(first, sizeof(first), "%s", why);
        }
    }
    if (stored) {
        if (failed)
            snprintf(r->record_fallback, sizeof(r->record_fallback),
                     "%d faster pick%s not stored; first: %.200s", failed, failed == 1 ? "" : "s",
                     first);
        return 0;
    }
    if (failed > 1)
        snprintf(r->record_note, sizeof(r->record_note), "%.200s; %d more picks failed too", first,
                 failed - 1);
    else
        snprintf(r->record_note, sizeof(r->record_note), "%.255s",
                 first[0] ? first : "no partition left to record");
    for (int64_t i = 0; i < t->n; i++)
        t->c[i].set_aside = false;
    memset(t->part_set_aside, 0, (size_t)t->s->n_partitions * sizeof(bool));
    return 0;
}
