#include "space.h"

#include <stdlib.h>
#include <string.h>

/* Launch gap charged per kernel beyond the first: back-to-back launches on one stream leave
 * ~1-2 us between kernels on the H100 (measured on the lent H100: 5-7 us for a lone host launch).
 */
#define SRCH_KERNEL_GAP_S 2e-6

/* ---- graph structure: edges and reachability over nodes ---- */

typedef struct node_graph {
    int n;
    int n_edges;
    int src[OPS_GROUP_MAX_NODES * OPS_MAX_OPERANDS], dst[OPS_GROUP_MAX_NODES * OPS_MAX_OPERANDS];
    uint64_t succ[OPS_GROUP_MAX_NODES]; /* direct consumers */
    uint64_t desc[OPS_GROUP_MAX_NODES]; /* all descendants */
} node_graph;

int srch_graph_admit(const ops_graph *g, ops_diag *d)
{
    int n = ops_graph_canonical_nodes(g);
    if (n > OPS_GROUP_MAX_NODES)
        return ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "",
                            "graph has %d nodes after canonicalisation; the search handles %d", n,
                            OPS_GROUP_MAX_NODES);
    return 0;
}

static int node_graph_init(const ops_graph *g, node_graph *ng, ops_diag *d)
{
    memset(ng, 0, sizeof(*ng));
    int rc = srch_graph_admit(g, d);
    if (rc < 0)
        return rc;
    ng->n = g->n_nodes;
    for (int c = 0; c < g->n_nodes; c++) {
        for (int k = 0; k < g->nodes[c].n_in; k++) {
            int t = g->nodes[c].in[k].tensor;
            if (t == OPS_SCALAR || g->tensors[t].producer < 0)
                continue;
            int p = g->tensors[t].producer;
            if (ng->succ[p] >> c & 1)
                continue; /* the same producer feeding two operands is one edge */
            ng->succ[p] |= 1ull << c;
            ng->src[ng->n_edges] = p;
            ng->dst[ng->n_edges++] = c;
        }
    }
    int32_t order[OPS_GROUP_MAX_NODES];
    if ((rc = ops_graph_topo_order(g, order, d)) < 0)
        return rc;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        int v = order[i];
        uint64_t dsc = ng->succ[v];
        for (int c = 0; c < g->n_nodes; c++)
            if (ng->succ[v] >> c & 1)
                dsc |= ng->desc[c];
        ng->desc[v] = dsc;
    }
    return 0;
}

/* A node set is convex when no path leaves it and comes back: such a group can run as one
 * kernel without waiting on another kernel that itself waits on this one. */
static bool is_convex(const node_graph *ng, uint64_t mask)
{
    uint64_t out = 0;
    for (int v = 0; v < ng->n; v++)
        if (mask >> v & 1)
            out |= ng->desc[v];
    out &= ~mask;
    for (int u = 0; u < ng->n; u++)
        if ((out >> u & 1) && (ng->desc[u] & mask))
            return false;
    return true;
}

/* Orders the groups of a partition topologically; false when the groups depend on each other
 * in a cycle (possible even when every group is convex). */
static bool order_groups(const node_graph *ng, uint64_t *groups, int n)
{
    uint64_t done = 0;
    for (int placed = 0; placed < n; placed++) {
        int pick = -1;
        for (int i = placed; i < n && pick < 0; i++) {
            /* ready: every producer of a node in the group is done or inside the group */
            bool ready = true;
            for (int e = 0; e < ng->n_edges && ready; e++)
                if ((groups[i] >> ng->dst[e] & 1) && !(groups[i] >> ng->src[e] & 1) &&
                    !(done >> ng->src[e] & 1))
                    ready = false;
            if (ready)
                pick = i;
        }
        if (pick < 0)
            return false;
        uint64_t tmp = groups[placed];
        groups[placed] = groups[pick];
        groups[pick] = tmp;
        done |= groups[placed];
    }
    return true;
}

/* ---- partition enumeration ---- */

typedef struct part_set {
    uint64_t *masks; /* partitions, each a run of group masks ended by 0 */
    int used, max, count;
} part_set;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Adds a partition (groups in any order) unless an equal one is present. */
static int part_add(part_set *ps, const node_graph *ng, uint64_t *groups, int n)
{
    uint64_t sorted[OPS_GROUP_MAX_NODES];
    memcpy(sorted, groups, (size_t)n * sizeof(uint64_t));
    qsort(sorted, (size_t)n, sizeof(uint64_t), cmp_u64);
    for (int at = 0; at < ps->used;) {
        int len = 0;
        while (ps->masks[at + len])
            len++;
        if (len == n) {
            uint64_t other[OPS_GROUP_MAX_NODES];
            memcpy(other, ps->masks + at, (size_t)n * sizeof(uint64_t));
            qsort(other, (size_t)n, sizeof(uint64_t), cmp_u64);
            if (memcmp(other, sorted, (size_t)n * sizeof(uint64_t)) == 0)
                return 0;
        }
        at += len + 1;
    }
    if (!order_groups(ng, groups, n))
        return 0;
    if (ps->used + n + 1 > ps->max)
        return -ENOSPC;
    memcpy(ps->masks + ps->used, groups, (size_t)n * sizeof(uint64_t));
    ps->used += n;
    ps->masks[ps->used++] = 0;
    ps->count++;
    return 0;
}

/* The groups formed by fusing the edges in `fused`: connected components (union-find). */
static int components(const node_graph *ng, uint64_t fused, uint64_t *groups)
{
    int parent[OPS_GROUP_MAX_NODES];
    for (int v = 0; v < ng->n; v++)
        parent[v] = v;
    for (int e = 0; e < ng->n_edges; e++) {
        if (!(fused >> e & 1))
            continue;
        int a = ng->src[e], b = ng->dst[e];
        while (parent[a] != a)
            a = parent[a] = parent[parent[a]];
        while (parent[b] != b)
            b = parent[b] = parent[parent[b]];
        if (a != b)
            parent[a < b ? b : a] = a < b ? a : b;
    }
    int n = 0;
    int root_group[OPS_GROUP_MAX_NODES];
    for (int v = 0; v < ng->n; v++) {
        int r = v;
        while (parent[r] != r)
            r = parent[r];
        if (r == v) {
            root_group[v] = n;
            groups[n++] = 0;
        }
    }
    for (int v = 0; v < ng->n; v++) {
        int r = v;
        while (parent[r] != r)
            r = parent[r];
        groups[root_group[r]] |= 1ull << v;
    }
    return n;
}

static bool group_ok(const node_graph *ng, uint64_t mask, bool (*legal)(uint64_t, void *),
                     void *ctx)
{
    return is_convex(ng, mask) && legal(mask, ctx);
}

/* Rule-based partitions for graphs with too many fusions to try every one: one kernel per
 * op, the whole graph as one kernel, and greedy fusion along edges in topological order. */
static int rule_partitions(const node_graph *ng, bool (*legal)(uint64_t, void *), void *ctx,
                           part_set *ps)
{
    uint64_t groups[OPS_GROUP_MAX_NODES];
    int n = 0;
    bool ok = true;
    for (int v = 0; v < ng->n; v++) {
        groups[n++] = 1ull << v;
        ok &= legal(1ull << v, ctx);
    }
    int rc;
    if (ok && (rc = part_add(ps, ng, groups, n)) < 0)
        return rc;
    uint64_t all = ng->n == 64 ? ~0ull : (1ull << ng->n) - 1;
    if (group_ok(ng, all, legal, ctx)) {
        groups[0] = all;
        if ((rc = part_add(ps, ng, groups, 1)) < 0)
            return rc;
    }
    /* Greedy: start from singletons, fuse an edge whenever the merged group stays legal. */
    uint64_t fused = 0;
    for (int e = 0; e < ng->n_edges; e++) {
        uint64_t trial = fused | 1ull << e;
        int m = components(ng, trial, groups);
        bool all_ok = true;
        for (int i = 0; i < m && all_ok; i++)
            if (groups[i] >> ng->src[e] & 1)
                all_ok = group_ok(ng, groups[i], legal, ctx);
        if (all_ok)
            fused = trial;
    }
    n = components(ng, fused, groups);
    ok = true;
    for (int i = 0; i < n; i++)
        ok &= group_ok(ng, groups[i], legal, ctx);
    if (ok && (rc = part_add(ps, ng, groups, n)) < 0)
        return rc;
    return 0;
}

int srch_enumerate_partitions(const ops_graph *g, bool (*legal)(uint64_t mask, void *ctx),
                              void *ctx, uint64_t *masks, int max, bool *exhaustive)
{
    node_graph ng;
    int rc = node_graph_init(g, &ng, NULL);
    if (rc < 0)
        return rc;
    part_set ps = {.masks = masks, .max = max};
    *exhaustive = ng.n_edges <= SRCH_EXHAUSTIVE_EDGES;
    if (!*exhaustive) {
        rc = rule_partitions(&ng, legal, ctx, &ps);
        return rc < 0 ? rc : ps.count;
    }
    uint64_t groups[OPS_GROUP_MAX_NODES];
    for (uint64_t fused = 0; fused < (1ull << ng.n_edges); fused++) {
        int n = components(&ng, fused, groups);
        /* Fusing an edge inside an already merged group changes nothing: only count the
         * partition once, from the fused set that is exactly the edges inside its groups. */
        uint64_t inside = 0;
        for (int e = 0; e < ng.n_edges; e++)
            for (int i = 0; i < n; i++)
                if ((groups[i] >> ng.src[e] & 1) && (groups[i] >> ng.dst[e] & 1))
                    inside |= 1ull << e;
        if (inside != fused)
            continue;
        bool ok = true;
        for (int i = 0; i < n && ok; i++)
            ok = group_ok(&ng, groups[i], legal, ctx);
        if (ok && (rc = part_add(&ps, &ng, groups, n)) < 0 && rc != -ENOSPC)
            return rc;
        if (rc == -ENOSPC || ps.count > SRCH_MAX_PARTITIONS) {
            /* Few edges, but nearly every fusion legal (a tree of pointwise ops: max pooling
             * as the maximum of its windows' slices): too many to try, so the rules'. */
            ps.count = ps.used = 0;
            *exhaustive = false;
            rc = rule_partitions(&ng, legal, ctx, &ps);
            return rc < 0 ? rc : ps.count;
        }
    }
    return ps.count;
}

/* ---- the space ---- */

typedef struct build_ctx {
    srch_space *s;
    ops_diag *d;
    int rc;
    /* memo of node sets already judged: mask -> group index, or -1 when illegal */
    uint64_t *memo_mask;
    int32_t *memo_group;
    size_t memo_cap, memo_used;
} build_ctx;

static int32_t *memo_slot(build_ctx *b, uint64_t mask, bool *found)
{
    size_t h = (size_t)((mask * 0x9E3779B97F4A7C15ull) >> 7) & (b->memo_cap - 1);
    while (b->memo_mask[h] && b->memo_mask[h] != mask)
        h = (h + 1) & (b->memo_cap - 1);
    *found = b->memo_mask[h] == mask;
    b->memo_mask[h] = mask;
    return &b->memo_group[h];
}

static bool family_counts(ops_family_id id)
{
    return id != OPS_FAM_REFERENCE;
}

typedef struct best_ctx {
    const ops_family *f;
    const srch_group_space *gs;
    const srch_space *s;
    srch_family_space *fs;
    bool any;
} best_ctx;

static int track_best(const ops_schedule *sch, void *ctx)
{
    best_ctx *b = ctx;
    ops_estimate e = {0};
    b->f->estimate(&b->gs->group, sch, &b->s->dev, &e);
    if (!b->any || e.seconds < b->fs->best_est.seconds) {
        b->fs->best = *sch;
        b->fs->best_est = e;
        b->any = true;
    }
    return 0;
}

static int ignore_schedule(const ops_schedule *sch, void *ctx)
{
    (void)sch;
    (void)ctx;
    return 0;
}

/* Judges a node set: a legal group when some family (other than the reference) matches. */
static bool legal_group(uint64_t mask, void *ctx)
{
    build_ctx *b = ctx;
    if (b->rc < 0)
        return false;
    bool found;
    if (b->memo_used * 2 >= b->memo_cap) {
        b->rc = ops_diag_set(b->d, b->s->g, OPS_RULE_SHAPE, -1, "",
                             "too many distinct kernel groups to consider");
        return false;
    }
    int32_t *slot = memo_slot(b, mask, &found);
    if (found)
        return *slot >= 0;
    b->memo_used++;
    *slot = -1;
    srch_space *s = b->s;
    ops_group grp;
    if (ops_group_init(&grp, s->g, mask, NULL) < 0)
        return false;
    grp.precision = s->precision;
    srch_group_space gs = {.group = grp, .best_family = -1};
    for (int id = 0; id < OPS_FAM_COUNT; id++) {
        const ops_family *f = ops_family_get((ops_family_id)id);
        if (!family_counts((ops_family_id)id) || !f->matches(&grp))
            continue;
        srch_family_space *fs = &gs.fam[gs.n_families++];
        fs->family = (ops_family_id)id;
        best_ctx bc = {.f = f, .gs = &gs, .s = s, .fs = fs};
        ops_family_enumerate(f, &grp, &s->dev, f->estimate ? track_best : ignore_schedule, &bc,
                             &fs->counts);
        gs.candidates += fs->counts.kept;
        if (fs->counts.kept &&
            (gs.best_family < 0 || fs->best_est.seconds < gs.fam[gs.best_family].best_est.seconds))
            gs.best_family = gs.n_families - 1;
    }
    if (gs.candidates == 0)
        return false;
    size_t cap = (size_t)s->n_groups;
    if (kt_grow(&s->groups, &cap, (size_t)s->n_groups + 1, sizeof(*s->groups)) < 0) {
        b->rc = ops_diag_set(b->d, s->g, OPS_RULE_SHAPE, -1, "", "out of memory");
        return false;
    }
    s->groups[s->n_groups] = gs;
    *slot = s->n_groups++;
    return true;
}

static int find_group(build_ctx *b, uint64_t mask)
{
    bool found;
    int32_t *slot = memo_slot(b, mask, &found);
    KT_REQUIRE(found && *slot >= 0);
    return *slot;
}

static int cmp_partition(const void *a, const void *b)
{
    const srch_partition *x = a, *y = b;
    if (x->est_seconds != y->est_seconds)
        return x->est_seconds < y->est_seconds ? -1 : 1;
    return x->n_groups - y->n_groups;
}

int srch_space_build(const ops_graph *bound, const ops_device *dev, ops_precision precision,
                     srch_space **out, ops_diag *d)
{
    const char *unbound = ops_graph_first_unbound(bound);
    if (unbound)
        return ops_diag_set(d, bound, OPS_RULE_UNBOUND_DIM, -1, unbound,
                            "the search needs every dimension bound; bind %s with --shape %s=N",
                            unbound, unbound);
    srch_space *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->dev = *dev;
    s->precision = precision;
    uint64_t *masks = NULL;
    build_ctx b = {.s = s, .d = d, .memo_cap = 1 << 16};
    int rc = ops_graph_canonicalize(bound, &s->g, d);
    if (rc < 0)
        goto fail;
    b.memo_mask = calloc(b.memo_cap, sizeof(uint64_t));
    b.memo_group = calloc(b.memo_cap, sizeof(int32_t));
    int max = SRCH_MAX_PARTITIONS * (OPS_GROUP_MAX_NODES + 1);
    masks = malloc((size_t)max * sizeof(uint64_t));
    if (!b.memo_mask || !b.memo_group || !masks) {
        rc = -ENOMEM;
        goto fail;
    }
    node_graph ng;
    if ((rc = node_graph_init(s->g, &ng, d)) < 0)
        goto fail;
    int n_parts = srch_enumerate_partitions(s->g, legal_group, &b, masks, max, &s->exhaustive);
    if (b.rc < 0) {
        rc = b.rc;
        goto fail;
    }
    if (n_parts < 0) {
        rc = ops_diag_set(d, s->g, OPS_RULE_SHAPE, -1, "", "more than %d fusion partitions",
                          SRCH_MAX_PARTITIONS);
        goto fail;
    }
    if (n_parts == 0) {
        /* Name the first node no family can take on its own. */
        for (int v = 0; v < s->g->n_nodes; v++) {
            if (!legal_group(1ull << v, &b)) {
                rc =
                    ops_diag_set(d, s->g, OPS_RULE_SHAPE, v, s->g->tensors[s->g->nodes[v].out].name,
                                 "no kernel family implements this node for these shapes");
                goto fail;
            }
        }
        rc = ops_diag_set(d, s->g, OPS_RULE_SHAPE, -1, "", "no legal fusion partition");
        goto fail;
    }
    s->partitions = calloc((size_t)n_parts, sizeof(*s->partitions));
    if (!s->partitions) {
        rc = -ENOMEM;
        goto fail;
    }
    for (int at = 0, p = 0; p < n_parts; p++) {
        srch_partition *part = &s->partitions[s->n_partitions++];
        for (; masks[at]; at++) {
            int gi = find_group(&b, masks[at]);
            const srch_group_space *gs = &s->groups[gi];
            part->groups[part->n_groups++] = gi;
            part->est_seconds +=
                gs->best_family >= 0 ? gs->fam[gs->best_family].best_est.seconds : 0;
            for (int o = 0; o < gs->group.n_out; o++) {
                int t = gs->group.out[o];
                if (s->g->tensors[t].is_output)
                    continue;
                const ops_tensor *x = &s->g->tensors[t];
                int64_t bytes = ops_shape_numel(&x->shape) * (int64_t)ops_dtype_size(x->dtype);
                part->intermediates[part->n_intermediates++] = t;
                part->workspace_bytes += (bytes + 255) / 256 * 256;
            }
        }
        at++;
        part->est_seconds += SRCH_KERNEL_GAP_S * (part->n_groups - 1);
    }
    qsort(s->partitions, (size_t)s->n_partitions, sizeof(*s->partitions), cmp_partition);
    /* Count candidates over the groups some partition uses (judged-but-unused sets excluded). */
    for (int p = 0; p < s->n_partitions; p++)
        for (int i = 0; i < s->partitions[p].n_groups; i++)
            s->groups[s->partitions[p].groups[i]].in_partition = true;
    for (int gi = 0; gi < s->n_groups; gi++) {
        if (!s->groups[gi].in_partition)
            continue;
        s->candidates += s->groups[gi].candidates;
        for (int f = 0; f < s->groups[gi].n_families; f++)
            for (int r = 0; r < s->groups[gi].fam[f].counts.n_reasons; r++)
                s->pruned += s->groups[gi].fam[f].counts.reasons[r].count;
    }
    free(masks);
    free(b.memo_mask);
    free(b.memo_group);
    *out = s;
    return 0;
fail:
    free(masks);
    free(b.memo_mask);
    free(b.memo_group);
    srch_space_free(s);
    if (rc == -ENOMEM)
        ops_diag_set(d, NULL, OPS_RULE_SHAPE, -1, "", "out of memory building the search space");
    return rc;
}

void srch_space_free(srch_space *s)
{
    if (!s)
        return;
    ops_graph_free(s->g);
    free(s->groups);
    free(s->partitions);
    free(s);
}

/* ---- candidate lists ---- */

typedef struct collect_ctx {
    const srch_space *s;
    const ops_family *f;
    int group;
    srch_candidate *items;
    size_t n, cap;
    int rc;
} collect_ctx;

static int collect(const ops_schedule *sch, void *ctx)
{
    collect_ctx *c = ctx;
    if (kt_grow(&c->items, &c->cap, c->n + 1, sizeof(*c->items)) < 0)
        return c->rc = -ENOMEM;
    srch_candidate *x = &c->items[c->n++];
    memset(x, 0, sizeof(*x));
    x->group = c->group;
    x->schedule = *sch;
    if (c->f->estimate)
        c->f->estimate(&c->s->groups[c->group].group, sch, &c->s->dev, &x->est);
    return 0;
}

/* Group, then estimate, then family and knob values: a total order, so the list is the same on
 * every run whatever qsort does with equal keys. */
static int cmp_candidate(const void *a, const void *b)
{
    const srch_candidate *x = a, *y = b;
    if (x->group != y->group)
        return x->group - y->group;
    if (x->est.seconds != y->est.seconds)
        return x->est.seconds < y->est.seconds ? -1 : 1;
    if (x->schedule.family != y->schedule.family)
        return (int)x->schedule.family - (int)y->schedule.family;
    for (int k = 0; k < OPS_MAX_KNOBS; k++)
        if (x->schedule.v[k] != y->schedule.v[k])
            return x->schedule.v[k] < y->schedule.v[k] ? -1 : 1;
    return 0;
}

int srch_space_candidates(const srch_space *s, srch_candidate **out, int64_t *n)
{
    collect_ctx c = {.s = s};
    for (int gi = 0; gi < s->n_groups && c.rc == 0; gi++) {
        if (!s->groups[gi].in_partition)
            continue;
        for (int f = 0; f < s->groups[gi].n_families && c.rc == 0; f++) {
            c.f = ops_family_get(s->groups[gi].fam[f].family);
            c.group = gi;
            ops_family_enumerate(c.f, &s->groups[gi].group, &s->dev, collect, &c, NULL);
        }
    }
    if (c.rc < 0) {
        free(c.items);
        return c.rc;
    }
    qsort(c.items, c.n, sizeof(*c.items), cmp_candidate);
    *out = c.items;
    *n = (int64_t)c.n;
    return 0;
}

int64_t srch_spread(const srch_candidate *c, int64_t n, const srch_space *s, int64_t limit,
                    int64_t *idx)
{
    int64_t per_family[OPS_FAM_COUNT] = {0};
    for (int64_t i = 0; i < n; i++)
        per_family[c[i].schedule.family]++;
    int64_t budget[OPS_FAM_COUNT] = {0};
    int64_t left = limit < n ? limit : n;
    /* Round-robin one slot at a time over families that still have candidates. */
    while (left > 0) {
        bool gave = false;
        for (int f = 0; f < OPS_FAM_COUNT && left > 0; f++) {
            if (budget[f] < per_family[f]) {
                budget[f]++;
                left--;
                gave = true;
            }
        }
        if (!gave)
            break;
    }
    int64_t out = 0;
    for (int f = 0; f < OPS_FAM_COUNT; f++) {
        if (!budget[f])
            continue;
        /* The family's candidates in list order (group, then cost); take evenly spaced ranks. */
        int64_t seen = 0, next_pick = 0, taken = 0;
        for (int64_t i = 0; i < n && taken < budget[f]; i++) {
            if (c[i].schedule.family != (ops_family_id)f)
                continue;
            int64_t target = next_pick * per_family[f] / budget[f];
            if (seen == target) {
                idx[out++] = i;
                taken++;
                next_pick++;
            }
            seen++;
        }
    }
    (void)s;
    return out;
}
