/* row family: the group analysed: tensor slots, their classes (FULL, ROW, FLAT), reduction levels,
 * the one-pass pairs (online softmax, Welford), the matmul prologue; what each pass reads
 * (ops/row/row.h lists the files). */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int row_slot_of(const rw_info *in, int32_t t)
{
    for (int i = 0; i < in->n_slots; i++)
        if (in->tensor[i] == t)
            return i;
    return -1;
}

/* Fills stride[] for a tensor of shape sh aligned (NumPy, trailing) to X; false when it does
 * not broadcast into X. */
static bool x_strides(const rw_info *in, const ops_shape *sh, int64_t *stride)
{
    if (sh->rank > in->rank)
        return false;
    int shift = in->rank - sh->rank;
    int64_t s = 1;
    for (int k = in->rank - 1; k >= 0; k--) {
        int kk = k - shift;
        if (kk < 0) {
            stride[k] = 0;
            continue;
        }
        int64_t d = sh->d[kk].size;
        if (d != 1 && d != in->X.d[k].size)
            return false;
        stride[k] = d == 1 ? 0 : s;
        s *= d;
    }
    return true;
}

static bool varies_along_row(const rw_info *in, const int64_t *stride)
{
    for (int k = in->a0; k <= in->a1; k++)
        if (stride[k] && in->X.d[k].size > 1)
            return true;
    return false;
}

const ops_node *row_slot_node(const rw_info *in, int s)
{
    return in->node[s] >= 0 ? &in->g->nodes[in->node[s]] : NULL;
}

bool row_is_reduce(ops_op op)
{
    return op == OPS_REDUCE_SUM || op == OPS_REDUCE_MEAN || op == OPS_REDUCE_MAX ||
           op == OPS_REDUCE_MIN;
}

/* The producer slot of node-slot s's operand k when it is a group node of op `op`, else -1. */
static int operand_node(const rw_info *in, int s, int k, ops_op op)
{
    const ops_node *n = row_slot_node(in, s);
    if (!n || k >= n->n_in || n->in[k].tensor == OPS_SCALAR)
        return -1;
    int u = row_slot_of(in, n->in[k].tensor);
    const ops_node *m = u >= 0 ? row_slot_node(in, u) : NULL;
    return m && m->op == op ? u : -1;
}

/* Recognises the one-pass pairs: tail t reduces exp(A - max(A)) or square(A - mean(A)).
 * Sets has_pair; with apply, also pairs them up (one_pass schedules). */
static void find_pairs(rw_info *in, bool apply)
{
    for (int t = 0; t < in->n_slots; t++) {
        const ops_node *n = row_slot_node(in, t);
        if (!n || !row_is_reduce(n->op))
            continue;
        bool softmax = n->op == OPS_REDUCE_SUM;
        if (!softmax && n->op != OPS_REDUCE_MEAN)
            continue;
        int e = operand_node(in, t, 0, softmax ? OPS_EXP : OPS_SQUARE);
        int d = e >= 0 ? operand_node(in, e, 0, OPS_SUB) : -1;
        int h = d >= 0 ? operand_node(in, d, 1, softmax ? OPS_REDUCE_MAX : OPS_REDUCE_MEAN) : -1;
        if (h < 0 || in->pair[h] >= 0 || in->pair[t] >= 0)
            continue;
        const ops_node *dn = row_slot_node(in, d), *hn = row_slot_node(in, h);
        if (dn->in[0].tensor == OPS_SCALAR || dn->in[0].tensor != hn->in[0].tensor)
            continue;
        if (!hn->attrs.keepdim)
            continue;
        in->has_pair = true;
        if (!apply)
            continue;
        in->pair[h] = t;
        in->pair[t] = h;
        in->kind[h] = softmax ? RK_ONLINE : RK_WELFORD;
        in->kind[t] = RK_TAIL;
    }
}

/* Levels: reductions one above the row values their input needs (a tail with its head when
 * pairs are used); everything else the max of its operands. */
static void compute_levels(rw_info *in, bool use_pairs)
{
    in->n_levels = 0;
    for (int s = 0; s < in->n_slots; s++) {
        const ops_node *n = row_slot_node(in, s);
        in->level[s] = 0;
        if (!n)
            continue;
        if (row_is_reduce(n->op)) {
            int h = in->pair[s];
            if (use_pairs && h >= 0 && in->kind[s] == RK_TAIL)
                in->level[s] = in->level[h];
            else
                in->level[s] = in->level[in->src[s]] + 1;
            in->n_levels = in->level[s] > in->n_levels ? in->level[s] : in->n_levels;
            continue;
        }
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k].tensor == OPS_SCALAR)
                continue;
            int u = row_slot_of(in, n->in[k].tensor);
            in->level[s] = in->level[u] > in->level[s] ? in->level[u] : in->level[s];
        }
    }
}

/* True when matmul node n (output shape xs) can be X's matmul prologue: unbatched, X = [M, N]
 * reduced along N, both operands group inputs of rank 2 that no other node reads, K short. */
static bool mm_prologue_ok(const rw_info *in, const ops_node *n, const ops_shape *xs)
{
    const ops_graph *g = in->g;
    if (in->rank != 2 || in->a0 != 1 || in->a1 != 1 || !ops_shape_same_sizes(xs, &in->X))
        return false;
    for (int k = 0; k < 2; k++) {
        int u = row_slot_of(in, n->in[k].tensor);
        if (u < 0 || in->node[u] >= 0 || g->tensors[n->in[k].tensor].shape.rank != 2)
            return false;
        for (int v = in->grp->n_in; v < in->n_slots; v++) {
            const ops_node *o = row_slot_node(in, v);
            if (o == n)
                continue;
            for (int j = 0; j < o->n_in; j++)
                if (o->in[j].tensor == n->in[k].tensor)
                    return false;
        }
    }
    const ops_shape *as = &g->tensors[n->in[0].tensor].shape;
    int64_t K = as->d[n->attrs.transpose_a ? 0 : 1].size;
    return K >= 1 && K <= MM_MAX_K;
}

bool row_analyse(const ops_group *grp, bool use_pairs, rw_info *in)
{
    const ops_graph *g = grp->g;
    memset(in, 0, sizeof(*in));
    in->grp = grp;
    in->g = g;
    for (int i = 0; i < grp->n_in; i++) {
        in->tensor[in->n_slots] = grp->in[i];
        in->node[in->n_slots++] = -1;
    }
    for (int i = 0; i < grp->n_nodes; i++) {
        in->tensor[in->n_slots] = g->nodes[grp->nodes[i]].out;
        in->node[in->n_slots++] = grp->nodes[i];
    }
    for (int s = 0; s < in->n_slots; s++)
        in->pair[s] = in->src[s] = -1;

    /* X and the reduced axes, from the first reduction; every other must agree. */
    bool found = false;
    for (int s = grp->n_in; s < in->n_slots; s++) {
        const ops_node *n = row_slot_node(in, s);
        if (!row_is_reduce(n->op))
            continue;
        const ops_shape *xs = &g->tensors[n->in[0].tensor].shape;
        int lo = 0, hi = xs->rank - 1;
        if (n->attrs.n_axes > 0) {
            lo = n->attrs.axes[0];
            hi = n->attrs.axes[n->attrs.n_axes - 1];
            if (hi - lo + 1 != n->attrs.n_axes)
                return false; /* not a contiguous range */
        }
        if (xs->rank == 0 || lo < 0 || hi >= xs->rank)
            return false;
        if (!found) {
            in->X = *xs;
            in->rank = xs->rank;
            in->a0 = lo;
            in->a1 = hi;
            found = true;
        } else if (!ops_shape_same_sizes(xs, &in->X) || lo != in->a0 || hi != in->a1) {
            return false;
        }
    }
    if (!found)
        return false;
    in->outer = in->L = in->inner = 1;
    for (int k = 0; k < in->rank; k++) {
        int64_t d = in->X.d[k].size;
        if (k < in->a0)
            in->outer *= d;
        else if (k <= in->a1)
            in->L *= d;
        else
            in->inner *= d;
    }
    in->n_rows = in->outer * in->inner;
    if (in->L <= 0 || in->n_rows <= 0)
        return false;

    /* Classes. */
    for (int s = 0; s < in->n_slots; s++) {
        const ops_tensor *t = &g->tensors[in->tensor[s]];
        const ops_node *n = row_slot_node(in, s);
        int b = (int)ops_dtype_size(t->dtype);
        in->max_bytes = b > in->max_bytes ? b : in->max_bytes;
        in->wide |= ops_shape_numel(&t->shape) > 2000000000LL;
        if (!n) {
            if (ops_shape_same_sizes(&t->shape, &in->X)) {
                x_strides(in, &t->shape, in->stride[s]);
                in->cls[s] = CL_FULL; /* even when every row is one element long */
            } else if (ops_shape_numel(&t->shape) == 1) {
                in->cls[s] = CL_ROW; /* offset 0 however it is read */
            } else if (x_strides(in, &t->shape, in->stride[s])) {
                in->cls[s] = varies_along_row(in, in->stride[s]) ? CL_FULL : CL_ROW;
            } else {
                in->cls[s] = CL_NONE; /* only readable by FLAT nodes */
            }
            continue;
        }
        if (row_is_reduce(n->op)) {
            int u = row_slot_of(in, n->in[0].tensor);
            if (u < 0 || in->cls[u] != CL_FULL ||
                !ops_shape_same_sizes(&g->tensors[in->tensor[u]].shape, &in->X))
                return false;
            in->src[s] = u;
            in->kind[s] = n->op == OPS_REDUCE_MAX   ? RK_MAX
                          : n->op == OPS_REDUCE_MIN ? RK_MIN
                                                    : RK_SUM;
            in->cls[s] = n->attrs.keepdim ? CL_ROW : CL_FLAT;
            if (in->cls[s] == CL_ROW)
                x_strides(in, &t->shape, in->stride[s]);
            continue;
        }
        if (n->op == OPS_RESHAPE) {
            int u = row_slot_of(in, n->in[0].tensor);
            rw_cls c = in->cls[u];
            bool per_row =
                c == CL_FLAT ||
                (c == CL_ROW && ops_shape_numel(&g->tensors[in->tensor[u]].shape) == in->n_rows);
            if (!per_row || in->node[u] < 0)
                return false;
            in->cls[s] = CL_FLAT;
            if (x_strides(in, &t->shape, in->stride[s]) && !varies_along_row(in, in->stride[s]) &&
                ops_shape_numel(&t->shape) == in->n_rows)
                in->cls[s] = CL_ROW;
            continue;
        }
        if (n->op == OPS_MATMUL) {
            if (!mm_prologue_ok(in, n, &t->shape))
                return false;
            x_strides(in, &t->shape, in->stride[s]);
            in->cls[s] = CL_FULL;
            in->mm[s] = true;
            continue;
        }
        if (!ops_is_elementwise(n->op))
            return false;
        bool any_flat = false, any_full = false;
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k].tensor == OPS_SCALAR)
                continue;
            int u = row_slot_of(in, n->in[k].tensor);
            any_flat |= in->cls[u] == CL_FLAT;
            any_full |= in->cls[u] == CL_FULL;
        }
        if (any_flat) {
            /* Per-row tensors without the reduced axes: operands of the node's own shape. */
            for (int k = 0; k < n->n_in; k++) {
                if (n->in[k].tensor == OPS_SCALAR)
                    continue;
                int u = row_slot_of(in, n->in[k].tensor);
                const ops_shape *us = &g->tensors[in->tensor[u]].shape;
                if (ops_shape_numel(us) == 1 && in->node[u] < 0)
                    continue;
                if (!ops_shape_same_sizes(us, &t->shape))
                    return false;
                if (in->node[u] < 0)
                    in->flat_use[u] = true;
                else if (in->cls[u] != CL_FLAT)
                    return false;
            }
            if (ops_shape_numel(&t->shape) != in->n_rows)
                return false;
            in->cls[s] = CL_FLAT;
            continue;
        }
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k].tensor != OPS_SCALAR &&
                in->cls[row_slot_of(in, n->in[k].tensor)] == CL_NONE)
                return false;
        if (!x_strides(in, &t->shape, in->stride[s]))
            return false;
        in->cls[s] = any_full || ops_shape_same_sizes(&t->shape, &in->X) ? CL_FULL : CL_ROW;
    }
    /* An input read both per row (X-aligned) and by FLAT nodes would need two readings. */
    for (int s = 0; s < grp->n_in; s++) {
        if (!in->flat_use[s])
            continue;
        for (int u = grp->n_in; u < in->n_slots; u++) {
            const ops_node *n = row_slot_node(in, u);
            if (in->cls[u] == CL_FLAT)
                continue;
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k].tensor == in->tensor[s])
                    return false;
        }
    }
    /* Outputs: FULL ones are X itself, per-row ones one value per row (no two rows share). */
    for (int i = 0; i < grp->n_out; i++) {
        int s = row_slot_of(in, grp->out[i]);
        const ops_shape *sh = &g->tensors[grp->out[i]].shape;
        if (in->cls[s] == CL_FULL) {
            if (!ops_shape_same_sizes(sh, &in->X))
                return false;
            in->full_out = true;
        } else if (ops_shape_numel(sh) != in->n_rows) {
            return false;
        }
    }
    find_pairs(in, use_pairs);
    compute_levels(in, use_pairs);
    return true;
}

/* Marks in `reads` the FULL input slots the value of slot s reads along the row. */
static void full_reads(const rw_info *in, int s, bool *reads)
{
    if (in->cls[s] != CL_FULL)
        return;
    const ops_node *n = row_slot_node(in, s);
    if (!n || in->mm[s]) { /* an input, or a matmul prologue (not its operands: not rows) */
        reads[s] = true;
        return;
    }
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k].tensor != OPS_SCALAR)
            full_reads(in, row_slot_of(in, n->in[k].tensor), reads);
}

/* The slot whose value a reduction accumulates in its pass (a pair head reads A). */
int row_acc_source(const rw_info *in, int s)
{
    return in->src[s];
}

/* Slots a row can keep on chip: FULL inputs and matmul prologues (computed once, not per
 * pass). */
bool row_cacheable(const rw_info *in, int u)
{
    return u < in->grp->n_in || in->mm[u];
}

/* Which FULL inputs (and matmul prologues) pass p reads (p = n_levels + 1: the output pass). */
void row_pass_reads(const rw_info *in, int p, bool *reads)
{
    memset(reads, 0, sizeof(bool) * RW_MAX_SLOTS);
    for (int s = 0; s < in->n_slots; s++) {
        const ops_node *n = row_slot_node(in, s);
        if (p <= in->n_levels) {
            if (n && row_is_reduce(n->op) && in->level[s] == p && in->kind[s] != RK_TAIL)
                full_reads(in, row_acc_source(in, s), reads);
        } else {
            for (int i = 0; i < in->grp->n_out; i++)
                if (in->grp->out[i] == in->tensor[s])
                    full_reads(in, s, reads);
        }
    }
}

/* Accumulator components of a reduction kind. */
int row_kind_components(rw_kind k)
{
    return k == RK_ONLINE ? 2 : k == RK_WELFORD ? 3 : k == RK_TAIL ? 0 : 1;
}

int row_level_components(const rw_info *in, int p)
{
    int c = 0;
    for (int s = 0; s < in->n_slots; s++) {
        const ops_node *n = row_slot_node(in, s);
        if (n && row_is_reduce(n->op) && in->level[s] == p)
            c += row_kind_components(in->kind[s]);
    }
    return c;
}
