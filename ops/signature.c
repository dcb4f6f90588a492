/* The canonical signature of an op graph (docs/formats.md (part 2) has the exact algorithm).
 *
 * The graph is validated and canonicalised (composites become primitives), then its tensors are
 * put in a canonical order by colour refinement (Weisfeiler-Lehman on the DAG) with
 * individualisation-refinement search for the ties refinement cannot split: every tie is tried
 * and the lexicographically smallest serialisation wins, with branches pruned by the
 * automorphisms already found. The winning serialisation is hashed with SHA-256.
 *
 * Tensors are the vertices (a node is identified with its single output tensor); symbols are
 * refined alongside them so that "M in two places" and "M and N" split early. The
 * serialisation is complete (op, attributes, dtype, const/output flags, graph-input shapes with
 * canonical symbol numbers, operands by canonical id), so two graphs share a signature exactly
 * when they are isomorphic, independently of how the search breaks ties.
 *
 * One file on purpose (~1 200 lines): refinement, the tie-breaking search, automorphism pruning
 * and the serialisation share the partition state and are one algorithm; split, each part
 * would need the others' internals. */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Bound on search leaves. Refinement plus automorphism pruning keeps real graphs to a handful;
 * past the bound the result stays deterministic for a given graph but may depend on
 * declaration order (logged). */
#define SIG_MAX_LEAVES 4096
#define SIG_MAX_GENS   256
#define SIG_MAGIC      "ktune-signature-v1"
#define PROBLEM_MAGIC  "ktune-problem-v1"

/* ---- growable byte buffer; the first failure sticks ---- */

typedef struct sig_buf {
    uint8_t *p;
    size_t len, cap;
    int err;
} sig_buf;

static void put_bytes(sig_buf *b, const void *src, size_t n)
{
    if (b->err)
        return;
    if (kt_grow(&b->p, &b->cap, b->len + n, 1) < 0) {
        b->err = -ENOMEM;
        return;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_u8(sig_buf *b, uint8_t v)
{
    put_bytes(b, &v, 1);
}

/* Integers as 8 bytes big-endian, so memcmp orders non-negative values numerically. */
static void put_i64(sig_buf *b, int64_t v)
{
    uint8_t x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (uint8_t)((uint64_t)v >> (56 - 8 * i));
    put_bytes(b, x, 8);
}

/* Doubles by their IEEE-754 bits (every NaN written as one quiet NaN). */
static void put_f64(sig_buf *b, double v)
{
    uint64_t bits;
    if (isnan(v))
        bits = 0x7ff8000000000000ull;
    else
        memcpy(&bits, &v, sizeof(bits));
    put_i64(b, (int64_t)bits);
}

/* ---- the refinement context ---- */

typedef struct sig_ctx {
    const ops_graph *g;
    int n;      /* tensors */
    int n_syms; /* g->n_syms */
    bool sizes; /* bound sizes take part (the problem digest and the canonical I/O order) */
    /* consumers of each tensor, CSR: (consumer output tensor, operand position key) */
    int *cons_off, *cons_t, *cons_pos;
    int *init;    /* initial colour from the local label */
    int *key_off; /* scratch for refinement keys */
    int64_t *keys;
    size_t keys_cap;
    int *order; /* scratch permutation */
    int *tmp;   /* scratch for merge sort */
    /* symbol slots of each tensor, CSR (slot, symbol) in for_each_sym_slot order; the tensors
     * with any; and each symbol's occurrences (tensor, slot) */
    int *slot_off, *slot_slot, *slot_sym;
    int *slotted, n_slotted;
    int *occ_off, *occ_t, *occ_slot;
    int *smark; /* symbol colours seen */
    /* refinement by cells (refine): tensor -> cell id, list links; cell id -> colour, size,
     * first member; per round: touched and moved tensors, affected cells, items (keys) */
    int *cid, *mnext, *mprev;
    int *cstart, *csize, *chead, n_ids;
    int *touched, n_touched, *moved, n_moved;
    int *tmark, *cmark, stamp;
    int *tnext, *thead, *tcount, *acells;
    int *item_t, *item_of, *rep, *rep_item;
    int *part_at, *part_size, *part_start;
    /* search state */
    long leaves;
    bool truncated;
    sig_buf best, first;
    int *best_id; /* canonical id of each tensor in the best leaf */
    int *first_id;
    bool have_best;
    int **gens; /* automorphisms found (tensor -> tensor) */
    int n_gens;
    int *prefix;     /* the current search path (individualised tensors) */
    int *first_path; /* the path to the first leaf, and to the best one */
    int *best_path;
    int first_depth, best_depth;
    int jump_to; /* after a leaf equivalent to the first or best one: unwind to this depth */
    const struct sig_buf *labels; /* initial labels, while ranking them */
    int err;
} sig_ctx;

static bool is_commutative(ops_op op)
{
    return op == OPS_ADD || op == OPS_MUL || op == OPS_MAX || op == OPS_MIN;
}

static int norm_axis(int axis, int rank)
{
    return axis < 0 ? axis + rank : axis;
}

static int operand_rank(const ops_graph *g, const ops_node *n, int k)
{
    int32_t t = n->in[k].tensor;
    return t >= 0 ? g->tensors[t].shape.rank : 0;
}

/* Writes one dimension: fixed (tag 0, size) or symbolic (tag 1, canonical symbol number, or 0
 * when sym_id is NULL, i.e. in an initial label where symbol identity is not known yet; with
 * sizes, then its bound value, -1 while unbound). A "size -1, no symbol" reshape entry
 * (inferred) gets tag 2. */
static void put_dim(sig_buf *b, const ops_dim *dim, const int *sym_id, bool sizes)
{
    if (dim->sym >= 0) {
        put_u8(b, 1);
        put_i64(b, sym_id ? sym_id[dim->sym] : 0);
        if (sizes)
            put_i64(b, dim->size);
    } else if (dim->size < 0) {
        put_u8(b, 2);
    } else {
        put_u8(b, 0);
        put_i64(b, dim->size);
    }
}

/* The attributes that mean something for op, normalised (negative axes resolved, axes sorted),
 * each introduced by a one-letter tag. */
static void put_attrs(sig_buf *b, const ops_graph *g, const ops_node *n, const int *sym_id,
                      bool sizes)
{
    const ops_attrs *a = &n->attrs;
    int r = operand_rank(g, n, 0);
    switch (n->op) {
    case OPS_LEAKY_RELU:
        put_u8(b, 'a');
        put_f64(b, a->alpha);
        break;
    case OPS_HARDTANH:
    case OPS_CLAMP:
        put_u8(b, 'l');
        put_f64(b, a->lo);
        put_f64(b, a->hi);
        break;
    case OPS_CAST:
        put_u8(b, 't');
        put_i64(b, a->to);
        break;
    case OPS_REDUCE_SUM:
    case OPS_REDUCE_MEAN:
    case OPS_REDUCE_MAX:
    case OPS_REDUCE_MIN: {
        /* As a set of non-negative axes; no axes means all of them. */
        bool red[OPS_MAX_RANK] = {false};
        for (int i = 0; i < a->n_axes; i++) {
            int ax = norm_axis(a->axes[i], r);
            if (ax >= 0 && ax < OPS_MAX_RANK)
                red[ax] = true;
        }
        put_u8(b, 'x');
        for (int i = 0; i < r; i++)
            if (red[i] || a->n_axes == 0)
                put_i64(b, i);
        put_u8(b, 'k');
        put_u8(b, a->keepdim);
        break;
    }
    case OPS_SOFTMAX:
    case OPS_LOG_SOFTMAX:
    case OPS_LOGSUMEXP:
    case OPS_LAYERNORM:
    case OPS_RMSNORM:
        /* Canonicalisation removes these; kept so a composite that survived stays distinct. */
        put_u8(b, 'x');
        put_i64(b, norm_axis(a->axis, r));
        put_u8(b, 'k');
        put_u8(b, a->keepdim);
        put_u8(b, 'e');
        put_f64(b, n->op == OPS_LAYERNORM || n->op == OPS_RMSNORM ? a->eps : 0.0);
        break;
    case OPS_MATMUL:
        put_u8(b, 'T');
        put_u8(b, a->transpose_a);
        put_u8(b, a->transpose_b);
        break;
    case OPS_CONV2D:
    case OPS_CONV3D: {
        int nd = ops_conv_spatial(n->op);
        put_u8(b, 'c');
        for (int i = 0; i < nd; i++) {
            put_i64(b, a->stride[i]);
            put_i64(b, a->padding[i]);
            put_i64(b, a->dilation[i]);
        }
        put_i64(b, a->groups);
        put_i64(b, a->layout);
        /* Appended only when set, so a conv without them keeps the signature it had. */
        bool extra = false;
        for (int i = 0; i < nd; i++)
            extra |= a->input_dilation[i] != 1 || a->end_padding[i] != 0;
        if (extra) {
            put_u8(b, 'z');
            for (int i = 0; i < nd; i++) {
                put_i64(b, a->input_dilation[i]);
                put_i64(b, a->end_padding[i]);
            }
        }
        break;
    }
    case OPS_ATTENTION:
        put_u8(b, 's');
        put_u8(b, a->has_scale);
        put_f64(b, a->has_scale ? a->scale : 0.0);
        put_u8(b, a->causal);
        break;
    case OPS_TRANSPOSE:
    case OPS_PERMUTE:
        put_u8(b, 'p');
        if (a->n_perm == 0) { /* transpose without perm swaps the last two dims */
            for (int i = 0; i < r; i++)
                put_i64(b, i < r - 2 ? i : i == r - 2 ? r - 1 : r - 2);
        } else {
            for (int i = 0; i < a->n_perm; i++)
                put_i64(b, norm_axis(a->perm[i], r));
        }
        break;
    case OPS_RESHAPE:
        put_u8(b, 'r');
        put_i64(b, a->shape.rank);
        for (int i = 0; i < a->shape.rank; i++)
            put_dim(b, &a->shape.d[i], sym_id, sizes);
        break;
    case OPS_CUMSUM:
    case OPS_CUMPROD:
        put_u8(b, 'q');
        put_i64(b, norm_axis(a->axis, r));
        break;
    case OPS_SLICE: /* sizes are integers (validation), so no symbol to number */
        put_u8(b, 'w');
        put_i64(b, a->shape.rank);
        for (int i = 0; i < a->shape.rank; i++) {
            put_i64(b, a->shape.d[i].size);
            put_i64(b, a->start[i]);
            put_i64(b, a->step[i]);
        }
        put_u8(b, a->has_fill);
        put_f64(b, a->has_fill ? a->fill : 0.0);
        break;
    default:
        break;
    }
}

/* One tensor's record. With id == NULL (initial labels) operands and symbols are anonymous;
 * with the canonical numbering they are written by canonical id. Operands of commutative ops
 * are sorted so that add(x, y) and add(y, x) agree. */
static void put_tensor(sig_buf *b, const ops_graph *g, int t, const int *id, const int *sym_id,
                       bool sizes)
{
    const ops_tensor *x = &g->tensors[t];
    put_u8(b, x->producer < 0 ? 'I' : 'N');
    put_u8(b, (uint8_t)x->dtype);
    put_u8(b, x->is_const);
    put_u8(b, x->is_output);
    if (x->producer < 0) {
        put_i64(b, x->shape.rank);
        for (int i = 0; i < x->shape.rank; i++)
            put_dim(b, &x->shape.d[i], sym_id, sizes);
        return;
    }
    /* Node outputs: shapes are derived from operands and attributes, and are left out so that
     * the signature of a bound graph equals that of its unbound form. */
    const ops_node *n = &g->nodes[x->producer];
    put_i64(b, n->op);
    put_i64(b, n->n_in);
    uint8_t rec[OPS_MAX_OPERANDS][9];
    for (int k = 0; k < n->n_in; k++) {
        sig_buf one = {.p = NULL};
        if (n->in[k].tensor == OPS_SCALAR) {
            put_u8(&one, 'S');
            put_f64(&one, n->in[k].scalar);
        } else {
            put_u8(&one, 'T');
            put_i64(&one, id ? id[n->in[k].tensor] : 0);
        }
        if (one.err || one.len != 9) {
            b->err = one.err ? one.err : -EINVAL;
            free(one.p);
            return;
        }
        memcpy(rec[k], one.p, 9);
        free(one.p);
    }
    if (is_commutative(n->op)) /* insertion sort of at most OPS_MAX_OPERANDS records */
        for (int i = 1; i < n->n_in; i++)
            for (int j = i; j > 0 && memcmp(rec[j - 1], rec[j], 9) > 0; j--) {
                uint8_t tmp[9];
                memcpy(tmp, rec[j], 9);
                memcpy(rec[j], rec[j - 1], 9);
                memcpy(rec[j - 1], tmp, 9);
            }
    for (int k = 0; k < n->n_in; k++)
        put_bytes(b, rec[k], 9);
    put_attrs(b, g, n, sym_id, sizes);
}

/* ---- sorting with a context (qsort has none, qsort_r is not portable) ---- */

typedef int (*sig_cmp)(const sig_ctx *c, int a, int b);

static void merge_sort(const sig_ctx *c, int *v, int *tmp, int n, sig_cmp cmp)
{
    if (n < 2)
        return;
    int h = n / 2;
    merge_sort(c, v, tmp, h, cmp);
    merge_sort(c, v + h, tmp, n - h, cmp);
    int i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = cmp(c, v[i], v[j]) <= 0 ? v[i++] : v[j++];
    while (i < h)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, sizeof(int) * (size_t)n);
}

static int cmp_keys(const sig_ctx *c, int a, int b)
{
    int la = c->key_off[a + 1] - c->key_off[a], lb = c->key_off[b + 1] - c->key_off[b];
    const int64_t *ka = c->keys + c->key_off[a], *kb = c->keys + c->key_off[b];
    for (int i = 0; i < la && i < lb; i++)
        if (ka[i] != kb[i])
            return ka[i] < kb[i] ? -1 : 1;
    return la < lb ? -1 : la > lb ? 1 : 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- refinement ---- */

static int key_reserve(sig_ctx *c, size_t need)
{
    if (kt_grow(&c->keys, &c->keys_cap, need, sizeof(int64_t)) < 0)
        return c->err = -ENOMEM;
    return 0;
}

/* Sorts the m items by their keys and rewrites col[] as "index of the first item of my cell in
 * sorted order". Returns the number of cells. */
static int recolour(sig_ctx *c, int m, int *col)
{
    for (int i = 0; i < m; i++)
        c->order[i] = i;
    merge_sort(c, c->order, c->tmp, m, cmp_keys);
    int cells = 0, start = 0;
    for (int i = 0; i < m; i++) {
        if (i == 0 || cmp_keys(c, c->order[i - 1], c->order[i]) != 0) {
            start = i;
            cells++;
        }
        col[c->order[i]] = start;
    }
    return cells;
}

/* Symbol key slots for tensor t: graph-input dims, then reshape target dims. */
static void for_each_sym_slot(const ops_graph *g, int t, void (*fn)(void *, int sym, int slot),
                              void *arg)
{
    const ops_tensor *x = &g->tensors[t];
    if (x->producer < 0) {
        for (int i = 0; i < x->shape.rank; i++)
            if (x->shape.d[i].sym >= 0)
                fn(arg, x->shape.d[i].sym, i);
        return;
    }
    const ops_node *n = &g->nodes[x->producer];
    if (n->op == OPS_RESHAPE)
        for (int i = 0; i < n->attrs.shape.rank; i++)
            if (n->attrs.shape.d[i].sym >= 0)
                fn(arg, n->attrs.shape.d[i].sym, OPS_MAX_RANK + i);
}

/* Refinement, round by round as docs/formats.md (step 5) defines it, but with work proportional
 * to what changes: a round recomputes the key of a tensor only when a neighbour (operand or
 * consumer) or one of its symbols changed cell in the round before. That gives the very colouring
 * of recomputing every key every round:
 *   - keys start with the tensor's own colour, so a round only splits cells, each in the order
 *     of its members' keys, and a cell's colour (the index of its first member) changes only when
 *     a cell sorting before it inside the same old cell splits off;
 *   - members of one cell had equal keys in the round before; those with no neighbour that
 *     changed cell still have equal keys (one member stands for them all), so only the touched
 *     ones are sorted, against that one;
 *   - as in Hopcroft's partition refinement, of the parts a cell splits into, the largest keeps
 *     the cell (its members are not "moved"): a neighbour of it is told apart from its cell mates
 *     by the moved parts alone, since counts towards the largest part are what is left. Each
 *     tensor is moved O(log n) times, so a chain of n nodes, which needs n rounds, costs
 *     O(n log n) instead of O(n^2 log n).
 * Cells are tracked by id (cid, cstart = its colour, csize, a member list), so a colour shift of
 * a large part costs nothing per member; col[] is written back at the end. Symbols are few and
 * refined as before, from an occurrence index, in the rounds where a tensor holding a symbol
 * moved. */

/* The colour of tensor u during refinement. */
static inline int64_t cell_colour(const sig_ctx *c, int u)
{
    return c->cstart[c->cid[u]];
}

/* Appends tensor t's key (docs/formats.md, step 5) to c->keys at *len. */
static int tensor_key(sig_ctx *c, int t, const int *scol, size_t *len)
{
    const ops_graph *g = c->g;
    const ops_tensor *x = &g->tensors[t];
    int deg = c->cons_off[t + 1] - c->cons_off[t];
    if (key_reserve(c, *len + 5 + OPS_MAX_OPERANDS + (size_t)deg + 4 * OPS_MAX_RANK) < 0)
        return c->err;
    int64_t *k = c->keys;
    size_t at = *len;
    k[at++] = cell_colour(c, t);
    if (x->producer >= 0) {
        const ops_node *n = &g->nodes[x->producer];
        size_t ops_at = at;
        for (int i = 0; i < n->n_in; i++)
            k[at++] = n->in[i].tensor >= 0 ? cell_colour(c, n->in[i].tensor) : -1;
        if (is_commutative(n->op))
            qsort(k + ops_at, (size_t)n->n_in, sizeof(int64_t), cmp_i64);
    }
    k[at++] = -2;
    size_t cons_at = at;
    for (int i = c->cons_off[t]; i < c->cons_off[t + 1]; i++)
        k[at++] = cell_colour(c, c->cons_t[i]) * 8 + c->cons_pos[i];
    qsort(k + cons_at, at - cons_at, sizeof(int64_t), cmp_i64);
    k[at++] = -3;
    for (int i = c->slot_off[t]; i < c->slot_off[t + 1]; i++) {
        k[at++] = c->slot_slot[i];
        k[at++] = scol[c->slot_sym[i]];
    }
    *len = at;
    return 0;
}

/* Cell membership lists. */
static void cell_unlink(sig_ctx *c, int t)
{
    int id = c->cid[t];
    if (c->mprev[t] >= 0)
        c->mnext[c->mprev[t]] = c->mnext[t];
    else
        c->chead[id] = c->mnext[t];
    if (c->mnext[t] >= 0)
        c->mprev[c->mnext[t]] = c->mprev[t];
}

static void cell_link(sig_ctx *c, int t, int id)
{
    c->cid[t] = id;
    c->mprev[t] = -1;
    c->mnext[t] = c->chead[id];
    if (c->chead[id] >= 0)
        c->mprev[c->chead[id]] = t;
    c->chead[id] = t;
}

/* Marks t touched for the coming round (once). */
static void touch(sig_ctx *c, int t)
{
    if (c->tmark[t] == c->stamp || c->csize[c->cid[t]] < 2)
        return; /* already, or alone in its cell: it cannot split */
    c->tmark[t] = c->stamp;
    c->touched[c->n_touched++] = t;
}

/* Splits every cell with touched members by their keys. Moved tensors go to c->moved. Returns
 * 1 when some cell split, 0 when none did, or a negative errno. */
static int tensor_round(sig_ctx *c, const int *scol)
{
    c->n_moved = 0;
    if (c->n_touched == 0)
        return 0;
    /* group the touched tensors by cell: a list per cell, the cells in c->acells */
    int n_cells = 0;
    for (int i = 0; i < c->n_touched; i++) {
        int t = c->touched[i], id = c->cid[t];
        if (c->cmark[id] != c->stamp) {
            c->cmark[id] = c->stamp;
            c->thead[id] = -1;
            c->tcount[id] = 0;
            c->acells[n_cells++] = id;
        }
        c->tnext[t] = c->thead[id];
        c->thead[id] = t;
        c->tcount[id]++;
    }
    /* every key from the colours before this round: items are the touched tensors, then per cell
     * with untouched members one of them (c->rep[id], item c->rep_item[id]) */
    size_t len = 0;
    int items = 0;
    for (int a = 0; a < n_cells; a++) {
        int id = c->acells[a];
        for (int t = c->thead[id]; t >= 0; t = c->tnext[t]) {
            c->key_off[items] = (int)len;
            c->item_of[t] = items;
            c->item_t[items++] = t;
            if (tensor_key(c, t, scol, &len) < 0)
                return c->err;
        }
        c->rep[id] = -1;
        if (c->tcount[id] < c->csize[id]) {
            int u = c->chead[id];
            while (c->tmark[u] == c->stamp)
                u = c->mnext[u];
            c->rep[id] = u;
            c->rep_item[id] = items;
            c->key_off[items] = (int)len;
            c->item_t[items++] = u;
            if (tensor_key(c, u, scol, &len) < 0)
                return c->err;
        }
    }
    c->key_off[items] = (int)len;
    int split = 0;
    for (int a = 0; a < n_cells; a++) {
        int id = c->acells[a];
        /* this cell's items, sorted by key */
        int m = 0, *v = c->order;
        for (int t = c->thead[id]; t >= 0; t = c->tnext[t])
            v[m++] = c->item_of[t];
        if (c->rep[id] >= 0)
            v[m++] = c->rep_item[id];
        merge_sort(c, v, c->tmp, m, cmp_keys);
        /* parts: runs of equal keys; the one with the representative holds every untouched
         * member */
        int untouched = c->csize[id] - c->tcount[id];
        int n_parts = 0, keep = -1, largest = -1, start = c->cstart[id];
        for (int i = 0; i < m; i++) {
            if (i == 0 || cmp_keys(c, v[i - 1], v[i]) != 0)
                c->part_at[n_parts++] = i;
        }
        if (n_parts == 1)
            continue;
        split = 1;
        c->part_at[n_parts] = m;
        for (int p = 0; p < n_parts; p++) {
            int size = c->part_at[p + 1] - c->part_at[p];
            for (int i = c->part_at[p]; i < c->part_at[p + 1]; i++)
                if (c->rep[id] >= 0 && v[i] == c->rep_item[id])
                    size += untouched - 1, keep = p;
            c->part_size[p] = size;
            c->part_start[p] = start;
            start += size;
            if (largest < 0 || size > c->part_size[largest])
                largest = p;
        }
        if (keep < 0)
            keep = largest; /* every member touched: the largest part keeps the cell id */
        for (int p = 0; p < n_parts; p++) {
            int nid = id;
            if (p != keep) {
                nid = c->n_ids++;
                c->chead[nid] = -1;
                c->csize[nid] = c->part_size[p];
                c->cstart[nid] = c->part_start[p];
            }
            for (int i = c->part_at[p]; i < c->part_at[p + 1]; i++) {
                if (c->rep[id] >= 0 && v[i] == c->rep_item[id])
                    continue; /* the untouched members stay where they are */
                int t = c->item_t[v[i]];
                if (p != keep) {
                    cell_unlink(c, t);
                    cell_link(c, t, nid);
                }
                if (p != largest)
                    c->moved[c->n_moved++] = t;
            }
        }
        c->csize[id] = c->part_size[keep];
        c->cstart[id] = c->part_start[keep];
        if (keep != largest && c->rep[id] >= 0) /* the untouched members moved too */
            for (int t = c->chead[id]; t >= 0; t = c->mnext[t])
                if (c->tmark[t] != c->stamp)
                    c->moved[c->n_moved++] = t;
    }
    return split;
}

/* Symbols: their colour plus the multiset of (tensor colour, slot) they occupy, every symbol
 * (they are few). Returns the number of symbol cells. */
static int sym_round(sig_ctx *c, int *scol)
{
    size_t len = 0;
    for (int s = 0; s < c->n_syms; s++) {
        c->key_off[s] = (int)len;
        size_t occ = (size_t)(c->occ_off[s + 1] - c->occ_off[s]);
        if (key_reserve(c, len + 1 + occ) < 0)
            return c->err;
        c->keys[len++] = scol[s];
        size_t at = len;
        for (int i = c->occ_off[s]; i < c->occ_off[s + 1]; i++)
            c->keys[len++] = cell_colour(c, c->occ_t[i]) * 64 + c->occ_slot[i];
        qsort(c->keys + at, len - at, sizeof(int64_t), cmp_i64);
    }
    c->key_off[c->n_syms] = (int)len;
    return c->n_syms ? recolour(c, c->n_syms, scol) : 0;
}

/* Refines tensor colours col[] and symbol colours scol[] until stable (docs/formats.md, step 5;
 * the comment above says how). seed < 0: col is any colouring, every key is computed in the
 * first round. seed >= 0: col is a stable colouring in which seed was just individualised (it
 * kept its cell's colour, the rest of the cell moved one up), so only seed counts as moved. */
static int refine(sig_ctx *c, int *col, int *scol, int seed)
{
    const int n = c->n;
    /* cells from col: the id of a cell is its colour to begin with */
    c->n_ids = n;
    for (int id = 0; id < n; id++) {
        c->chead[id] = -1;
        c->csize[id] = 0;
        c->cstart[id] = id;
    }
    for (int t = n - 1; t >= 0; t--) {
        cell_link(c, t, col[t]);
        c->csize[col[t]]++;
    }
    /* symbol cells now: the colours are the cells' first indices */
    int scells = 0, rc;
    for (int s = 0; s < c->n_syms; s++)
        c->smark[s] = 0;
    for (int s = 0; s < c->n_syms; s++)
        scells += !c->smark[scol[s]]++;
    bool first = true, sym_split = false;
    bool seed_slots = seed >= 0 && c->slot_off[seed + 1] > c->slot_off[seed];
    if (seed >= 0) {
        c->n_moved = 1;
        c->moved[0] = seed;
    }
    for (;;) {
        c->stamp++;
        c->n_touched = 0;
        if (first && seed < 0) {
            for (int t = 0; t < n; t++)
                touch(c, t);
        } else {
            for (int i = 0; i < c->n_moved; i++) {
                int t = c->moved[i];
                for (int j = c->cons_off[t]; j < c->cons_off[t + 1]; j++)
                    touch(c, c->cons_t[j]);
                const ops_tensor *x = &c->g->tensors[t];
                if (x->producer >= 0) {
                    const ops_node *nd = &c->g->nodes[x->producer];
                    for (int k = 0; k < nd->n_in; k++)
                        if (nd->in[k].tensor >= 0)
                            touch(c, nd->in[k].tensor);
                }
            }
            if (sym_split) /* symbol colours changed: every tensor holding one */
                for (int i = 0; i < c->n_slotted; i++)
                    touch(c, c->slotted[i]);
        }
        if ((rc = tensor_round(c, scol)) < 0)
            return rc;
        bool split = rc > 0;
        /* symbols see this round's tensor colours; after the first round their keys can only
         * change when a tensor holding one moved */
        bool redo = first && (seed < 0 || seed_slots);
        for (int i = 0; i < c->n_moved && !redo; i++)
            redo = c->slot_off[c->moved[i] + 1] > c->slot_off[c->moved[i]];
        sym_split = false;
        if (redo) {
            int ns = sym_round(c, scol);
            if (ns < 0)
                return ns;
            sym_split = ns != scells;
            scells = ns;
        }
        if (!split && !sym_split)
            break; /* the next round would change nothing either */
        first = false;
    }
    for (int t = 0; t < n; t++)
        col[t] = (int)cell_colour(c, t);
    return 0;
}

/* ---- leaves: serialise under a discrete colouring ---- */

static int sym_assign(int *sym_id, int *next, int sym)
{
    if (sym_id[sym] < 0)
        sym_id[sym] = (*next)++;
    return 0;
}

static void assign_sym_cb(void *arg, int sym, int slot)
{
    int **p = arg; /* p[0] = sym_id, p[1] = &next */
    (void)slot;
    sym_assign(p[0], p[1], sym);
}

static int serialise(sig_ctx *c, const int *id, sig_buf *out)
{
    const ops_graph *g = c->g;
    int *inv = malloc(sizeof(int) * (size_t)c->n);
    int *sym_id = malloc(sizeof(int) * (size_t)(c->n_syms + 1));
    if (!inv || !sym_id) {
        free(inv);
        free(sym_id);
        return -ENOMEM;
    }
    for (int t = 0; t < c->n; t++)
        inv[id[t]] = t;
    /* Symbols are numbered by first appearance in canonical order, so names never matter. */
    int next = 0;
    for (int s = 0; s < c->n_syms; s++)
        sym_id[s] = -1;
    for (int i = 0; i < c->n; i++) {
        int *p[2] = {sym_id, &next};
        for_each_sym_slot(g, inv[i], assign_sym_cb, p);
    }
    out->len = 0;
    out->err = 0;
    if (c->sizes)
        put_bytes(out, PROBLEM_MAGIC, sizeof(PROBLEM_MAGIC));
    else
        put_bytes(out, SIG_MAGIC, sizeof(SIG_MAGIC));
    put_i64(out, c->n);
    put_i64(out, next);
    for (int i = 0; i < c->n; i++)
        put_tensor(out, g, inv[i], id, sym_id, c->sizes);
    free(inv);
    free(sym_id);
    return out->err;
}

static int buf_cmp(const sig_buf *a, const sig_buf *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int r = memcmp(a->p, b->p, n);
    if (r)
        return r;
    return a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
}

static int cmp_labels(const sig_ctx *c, int a, int b)
{
    return buf_cmp(&c->labels[a], &c->labels[b]);
}

/* Records the automorphism that maps the tensor with canonical id L in labelling `from` to the
 * one with id L in labelling `to`. */
static void add_automorphism(sig_ctx *c, const int *from, const int *to)
{
    if (c->n_gens >= SIG_MAX_GENS)
        return;
    int *inv_to = malloc(sizeof(int) * (size_t)c->n);
    int *gen = malloc(sizeof(int) * (size_t)c->n);
    if (!inv_to || !gen) {
        free(inv_to);
        free(gen);
        return; /* pruning is an optimisation; losing a generator is harmless */
    }
    bool identity = true;
    for (int t = 0; t < c->n; t++)
        inv_to[to[t]] = t;
    for (int t = 0; t < c->n; t++) {
        gen[t] = inv_to[from[t]];
        identity &= gen[t] == t;
    }
    free(inv_to);
    if (identity) {
        free(gen);
        return;
    }
    c->gens[c->n_gens++] = gen;
}

/* Depth at which path a (of length n) first differs from path b. */
static int divergence(const int *a, const int *b, int n)
{
    int p = 0;
    while (p < n && a[p] == b[p])
        p++;
    return p;
}

static int leaf(sig_ctx *c, const int *col, int depth)
{
    sig_buf cur = {.p = NULL};
    int rc = serialise(c, col, &cur);
    if (rc < 0)
        goto out;
    c->leaves++;
    if (!c->have_best) {
        size_t sz = sizeof(int) * (size_t)c->n;
        put_bytes(&c->best, cur.p, cur.len);
        put_bytes(&c->first, cur.p, cur.len);
        if (c->best.err || c->first.err) {
            rc = -ENOMEM;
            goto out;
        }
        memcpy(c->best_id, col, sz);
        memcpy(c->first_id, col, sz);
        memcpy(c->first_path, c->prefix, sizeof(int) * (size_t)depth);
        memcpy(c->best_path, c->prefix, sizeof(int) * (size_t)depth);
        c->first_depth = c->best_depth = depth;
        c->have_best = true;
        goto out;
    }
    /* A leaf equivalent to the first (or best) one gives an automorphism that fixes the common
     * prefix and maps that leaf's subtree at the divergence point onto ours, which therefore
     * holds nothing new: unwind to the divergence depth. */
    if (buf_cmp(&cur, &c->first) == 0) {
        add_automorphism(c, c->first_id, col);
        c->jump_to =
            divergence(c->prefix, c->first_path, depth < c->first_depth ? depth : c->first_depth);
    } else {
        int r = buf_cmp(&cur, &c->best);
        if (r == 0) {
            add_automorphism(c, c->best_id, col);
            c->jump_to =
                divergence(c->prefix, c->best_path, depth < c->best_depth ? depth : c->best_depth);
        } else if (r < 0) {
            c->best.len = 0;
            put_bytes(&c->best, cur.p, cur.len);
            if (c->best.err) {
                rc = -ENOMEM;
                goto out;
            }
            memcpy(c->best_id, col, sizeof(int) * (size_t)c->n);
            memcpy(c->best_path, c->prefix, sizeof(int) * (size_t)depth);
            c->best_depth = depth;
        }
    }
out:
    free(cur.p);
    return rc;
}

static int uf_find(int *p, int x)
{
    while (p[x] != x)
        x = p[x] = p[p[x]];
    return x;
}

/* True when v lies in the orbit of an already explored sibling under the automorphisms found so
 * far that fix every vertex of the current prefix. The orbits (uf) are computed again only when
 * automorphisms were found since *uf_gens (the count they were computed with; -1: never), not
 * for every sibling: with k interchangeable branches that is k times less work per search node. */
static bool pruned(sig_ctx *c, const int *prefix, int depth, const int *explored, int n_explored,
                   int v, int *uf, int *uf_gens)
{
    if (n_explored == 0 || c->n_gens == 0)
        return false;
    if (*uf_gens != c->n_gens) {
        for (int t = 0; t < c->n; t++)
            uf[t] = t;
        for (int i = 0; i < c->n_gens; i++) {
            const int *gen = c->gens[i];
            bool fixes = true;
            for (int j = 0; j < depth && fixes; j++)
                fixes = gen[prefix[j]] == prefix[j];
            if (!fixes)
                continue;
            for (int t = 0; t < c->n; t++) {
                int a = uf_find(uf, t), b = uf_find(uf, gen[t]);
                if (a != b)
                    uf[a] = b;
            }
        }
        *uf_gens = c->n_gens;
    }
    for (int i = 0; i < n_explored; i++)
        if (uf_find(uf, explored[i]) == uf_find(uf, v))
            return true;
    return false;
}

/* The search below the colouring col in which seed was just individualised (-1: the root). */
static int search(sig_ctx *c, int *col, int *scol, int depth, int seed)
{
    int rc = refine(c, col, scol, seed);
    if (rc < 0)
        return rc;
    /* The first non-singleton cell: the smallest colour shared by two tensors. */
    int cell = -1;
    int *count = calloc((size_t)c->n, sizeof(int));
    if (!count)
        return -ENOMEM;
    for (int t = 0; t < c->n; t++)
        count[col[t]]++;
    for (int k = 0; k < c->n && cell < 0; k++)
        if (count[k] > 1)
            cell = k;
    free(count);
    if (cell < 0)
        return leaf(c, col, depth);

    int *members = NULL, *explored = NULL, *ncol = NULL, *nscol = NULL, *uf = NULL;
    members = malloc(sizeof(int) * (size_t)c->n);
    explored = malloc(sizeof(int) * (size_t)c->n);
    ncol = malloc(sizeof(int) * (size_t)c->n);
    nscol = malloc(sizeof(int) * (size_t)(c->n_syms + 1));
    uf = malloc(sizeof(int) * (size_t)c->n);
    if (!members || !explored || !ncol || !nscol || !uf) {
        rc = -ENOMEM;
        goto out;
    }
    int m = 0, n_explored = 0, uf_gens = -1;
    for (int t = 0; t < c->n; t++)
        if (col[t] == cell)
            members[m++] = t;
    for (int i = 0; i < m; i++) {
        int v = members[i];
        if (c->leaves >= SIG_MAX_LEAVES) {
            c->truncated = true;
            break;
        }
        if (pruned(c, c->prefix, depth, explored, n_explored, v, uf, &uf_gens))
            continue;
        /* Individualise v: it keeps the cell's colour, the rest of the cell moves one up. */
        memcpy(ncol, col, sizeof(int) * (size_t)c->n);
        memcpy(nscol, scol, sizeof(int) * (size_t)c->n_syms);
        for (int j = 0; j < m; j++)
            if (members[j] != v)
                ncol[members[j]] = cell + 1;
        c->prefix[depth] = v;
        rc = search(c, ncol, nscol, depth + 1, v);
        if (rc < 0)
            goto out;
        explored[n_explored++] = v;
        if (c->jump_to >= 0) {
            if (c->jump_to < depth)
                break;       /* keep unwinding */
            c->jump_to = -1; /* this is the divergence point: go on with the next child */
        }
    }
out:
    free(uf);
    free(nscol);
    free(ncol);
    free(explored);
    free(members);
    return rc;
}

static void ctx_free(sig_ctx *c)
{
    free(c->cons_off);
    free(c->cons_t);
    free(c->cons_pos);
    free(c->init);
    free(c->key_off);
    free(c->keys);
    free(c->order);
    free(c->tmp);
    int **arrays[] = {&c->slot_off, &c->slot_slot, &c->slot_sym,  &c->slotted,   &c->occ_off,
                      &c->occ_t,    &c->occ_slot,  &c->smark,     &c->cid,       &c->mnext,
                      &c->mprev,    &c->cstart,    &c->csize,     &c->chead,     &c->touched,
                      &c->moved,    &c->tmark,     &c->cmark,     &c->tnext,     &c->thead,
                      &c->tcount,   &c->acells,    &c->item_t,    &c->item_of,   &c->rep,
                      &c->rep_item, &c->part_at,   &c->part_size, &c->part_start};
    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) {
        free(*arrays[i]);
        *arrays[i] = NULL;
    }
    free(c->best.p);
    free(c->first.p);
    free(c->best_id);
    free(c->first_id);
    free(c->prefix);
    free(c->first_path);
    free(c->best_path);
    for (int i = 0; i < c->n_gens; i++)
        free(c->gens[i]);
    free(c->gens);
}

static void count_slot(void *arg, int sym, int slot)
{
    sig_ctx *c = arg;
    (void)slot;
    c->slot_off[c->n_slotted]++; /* n_slotted: the tensor being walked, while counting */
    c->occ_off[sym + 1]++;
}

static void fill_slot(void *arg, int sym, int slot)
{
    sig_ctx *c = arg;
    int t = c->n_slotted, at = c->slot_off[t + 1]++; /* slot_off[t + 1]: t's fill point */
    c->slot_slot[at] = slot;
    c->slot_sym[at] = sym;
    int o = c->occ_off[sym + 1]++;
    c->occ_t[o] = t;
    c->occ_slot[o] = slot;
}

/* The symbol slot indexes, and the scratch arrays of refine. */
static int index_slots(sig_ctx *c)
{
    size_t n = (size_t)c->n, ids = 2 * n + 1, ns = (size_t)c->n_syms + 1;
    c->slot_off = calloc(n + 2, sizeof(int));
    c->occ_off = calloc(ns + 1, sizeof(int));
    c->smark = calloc(ns, sizeof(int));
    c->slotted = calloc(n + 1, sizeof(int));
    int **per_tensor[] = {&c->cid,     &c->mnext,     &c->mprev,     &c->touched,
                          &c->moved,   &c->tmark,     &c->tnext,     &c->item_of,
                          &c->part_at, &c->part_size, &c->part_start};
    int **per_id[] = {&c->cstart, &c->csize,  &c->chead,  &c->cmark, &c->thead,
                      &c->tcount, &c->acells, &c->item_t, &c->rep,   &c->rep_item};
    for (size_t i = 0; i < KT_ARRAY_LEN(per_tensor); i++)
        *per_tensor[i] = calloc(n + 2, sizeof(int));
    for (size_t i = 0; i < KT_ARRAY_LEN(per_id); i++)
        *per_id[i] = calloc(ids + 1, sizeof(int));
    bool ok = c->slot_off && c->occ_off && c->smark && c->slotted;
    for (size_t i = 0; i < KT_ARRAY_LEN(per_tensor); i++)
        ok &= *per_tensor[i] != NULL;
    for (size_t i = 0; i < KT_ARRAY_LEN(per_id); i++)
        ok &= *per_id[i] != NULL;
    if (!ok)
        return -ENOMEM;
    /* count, per tensor (slot_off[t]) and per symbol (occ_off[s + 1]) */
    for (int t = 0; t < c->n; t++) {
        c->n_slotted = t;
        for_each_sym_slot(c->g, t, count_slot, c);
    }
    int total = 0;
    for (int t = 0; t < c->n; t++) {
        int k = c->slot_off[t];
        c->slot_off[t] = total;
        total += k;
    }
    c->slot_off[c->n] = total;
    for (int s = 0; s < c->n_syms; s++)
        c->occ_off[s + 1] += c->occ_off[s];
    c->slot_slot = calloc((size_t)total + 1, sizeof(int));
    c->slot_sym = calloc((size_t)total + 1, sizeof(int));
    c->occ_t = calloc((size_t)total + 1, sizeof(int));
    c->occ_slot = calloc((size_t)total + 1, sizeof(int));
    if (!c->slot_slot || !c->slot_sym || !c->occ_t || !c->occ_slot)
        return -ENOMEM;
    /* fill: slot_off[t + 1] and occ_off[s + 1] serve as fill points, shifted back after */
    for (int t = c->n; t > 0; t--)
        c->slot_off[t] = c->slot_off[t - 1];
    for (int s = c->n_syms; s > 0; s--)
        c->occ_off[s] = c->occ_off[s - 1];
    for (int t = 0; t < c->n; t++) {
        c->n_slotted = t;
        for_each_sym_slot(c->g, t, fill_slot, c);
    }
    c->n_slotted = 0;
    for (int t = 0; t < c->n; t++)
        if (c->slot_off[t + 1] > c->slot_off[t])
            c->slotted[c->n_slotted++] = t;
    return 0;
}

/* Builds adjacency and initial colours (from the anonymous local labels) of canonical graph g,
 * then searches for the canonical labelling: c->best holds the serialisation and c->best_id
 * the canonical id of every tensor. With sizes, bound sizes are part of every label, so ties
 * are only broken between tensors whose sizes agree too. */
static int canonical_labelling(const ops_graph *g, bool sizes, sig_ctx *c)
{
    memset(c, 0, sizeof(*c));
    c->g = g;
    c->sizes = sizes;
    c->n = g->n_tensors;
    c->n_syms = g->n_syms;
    int rc = 0, n = c->n, big = (n > c->n_syms ? n : c->n_syms) + 1;
    int *col = NULL, *scol = NULL;
    sig_buf *labels = NULL;
    c->cons_off = calloc((size_t)n + 1, sizeof(int));
    /* a refinement round has up to a key per tensor and one per cell */
    c->key_off = calloc(2 * (size_t)big + 1, sizeof(int));
    c->order = calloc(2 * (size_t)big, sizeof(int));
    c->tmp = calloc(2 * (size_t)big, sizeof(int));
    c->best_id = calloc((size_t)n + 1, sizeof(int));
    c->first_id = calloc((size_t)n + 1, sizeof(int));
    c->gens = calloc(SIG_MAX_GENS, sizeof(int *));
    col = calloc((size_t)n + 1, sizeof(int));
    scol = calloc((size_t)c->n_syms + 1, sizeof(int));
    c->prefix = calloc((size_t)n + 1, sizeof(int));
    c->first_path = calloc((size_t)n + 1, sizeof(int));
    c->best_path = calloc((size_t)n + 1, sizeof(int));
    c->jump_to = -1;
    labels = calloc((size_t)n + 1, sizeof(sig_buf));
    if (!c->cons_off || !c->key_off || !c->order || !c->tmp || !c->best_id || !c->first_id ||
        !c->gens || !col || !scol || !c->prefix || !c->first_path || !c->best_path || !labels) {
        rc = -ENOMEM;
        goto out;
    }

    /* Consumers in CSR form; the position is 0 for commutative ops, operand index + 1 else. */
    int n_edges = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k].tensor >= 0) {
                c->cons_off[g->nodes[i].in[k].tensor + 1]++;
                n_edges++;
            }
    for (int t = 0; t < n; t++)
        c->cons_off[t + 1] += c->cons_off[t];
    c->cons_t = calloc((size_t)n_edges + 1, sizeof(int));
    c->cons_pos = calloc((size_t)n_edges + 1, sizeof(int));
    int *fill = calloc((size_t)n + 1, sizeof(int));
    if (!c->cons_t || !c->cons_pos || !fill) {
        free(fill);
        rc = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const ops_node *nd = &g->nodes[i];
        for (int k = 0; k < nd->n_in; k++) {
            int32_t t = nd->in[k].tensor;
            if (t < 0)
                continue;
            int at = c->cons_off[t] + fill[t]++;
            c->cons_t[at] = nd->out;
            c->cons_pos[at] = is_commutative(nd->op) ? 0 : k + 1;
        }
    }
    free(fill);
    if ((rc = index_slots(c)) < 0)
        goto out;

    /* Initial colours: rank of each tensor's anonymous label. */
    for (int t = 0; t < n; t++) {
        put_tensor(&labels[t], g, t, NULL, NULL, c->sizes);
        if (labels[t].err) {
            rc = labels[t].err;
            goto out;
        }
    }
    c->labels = labels;
    for (int t = 0; t < n; t++)
        c->order[t] = t;
    merge_sort(c, c->order, c->tmp, n, cmp_labels);
    for (int i = 0, start = 0; i < n; i++) {
        if (i > 0 && buf_cmp(&labels[c->order[i - 1]], &labels[c->order[i]]) != 0)
            start = i;
        col[c->order[i]] = start;
    }
    c->labels = NULL;
    rc = search(c, col, scol, 0, -1);
    if (rc == 0 && c->err)
        rc = c->err;
    if (rc == 0 && c->truncated)
        kt_log_warn("ops", "signature of '%s': tie-breaking search stopped after %d leaves",
                    g->name, SIG_MAX_LEAVES);
out:
    if (labels)
        for (int t = 0; t < n; t++)
            free(labels[t].p);
    free(labels);
    free(scol);
    free(col);
    return rc;
}

/* Canonicalises g and runs the labelling on it; *canon is the caller's to free. */
static int label(const ops_graph *g, bool sizes, ops_graph **canon, sig_ctx *c, ops_diag *d)
{
    *canon = NULL;
    memset(c, 0, sizeof(*c));
    int rc = ops_graph_canonicalize(g, canon, d);
    if (rc < 0)
        return rc;
    return canonical_labelling(*canon, sizes, c);
}

int ops_graph_signature(const ops_graph *g, uint8_t sig[OPS_SIG_BYTES], ops_diag *d)
{
    if (!g || !sig)
        return -EINVAL;
    ops_graph *canon = NULL;
    sig_ctx c;
    int rc = label(g, false, &canon, &c, d);
    if (rc == 0)
        ops_sha256(c.best.p, c.best.len, sig);
    ctx_free(&c);
    ops_graph_free(canon);
    return rc;
}

int ops_graph_problem(const ops_graph *g, uint8_t problem[OPS_SIG_BYTES], int *input_rank,
                      int *output_rank, ops_diag *d)
{
    if (!g)
        return -EINVAL;
    ops_graph *canon = NULL;
    sig_ctx c;
    int rc = label(g, true, &canon, &c, d);
    if (rc < 0)
        goto out;
    if (problem)
        ops_sha256(c.best.p, c.best.len, problem);
    /* Canonicalisation keeps inputs (in tensor order) and outputs (in declaration order). */
    for (int t = 0, i = 0; t < canon->n_tensors && input_rank; t++) {
        if (canon->tensors[t].producer >= 0)
            continue;
        int rank = 0;
        for (int u = 0; u < canon->n_tensors; u++)
            if (canon->tensors[u].producer < 0 && c.best_id[u] < c.best_id[t])
                rank++;
        input_rank[i++] = rank;
    }
    for (int j = 0; j < canon->n_outputs && output_rank; j++) {
        int rank = 0;
        for (int k = 0; k < canon->n_outputs; k++)
            if (c.best_id[canon->outputs[k]] < c.best_id[canon->outputs[j]])
                rank++;
        output_rank[j] = rank;
    }
out:
    ctx_free(&c);
    ops_graph_free(canon);
    return rc;
}

int ops_graph_canonical_io(const ops_graph *g, int *input_rank, int *output_rank, ops_diag *d)
{
    return ops_graph_problem(g, NULL, input_rank, output_rank, d);
}
