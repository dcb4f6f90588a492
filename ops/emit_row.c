/* The row family: groups with one or more reductions (sum, mean, max, min) that all reduce the
 * same axes of the same tensor shape X, with an elementwise prologue (the nodes feeding the
 * reductions) and epilogue (nodes combining reduced values, broadcast back over the row, with
 * row elements). Canonical softmax, log_softmax, logsumexp, layernorm, rmsnorm, sum/mean/max
 * over an axis and e.g. residual add + rmsnorm all have this shape.
 *
 * Rows: X = [outer dims][reduced dims (contiguous range)][inner dims]; a row is one (outer,
 * inner) pair, L elements long, element j at stride `inner` (contiguous rows when inner = 1,
 * strided rows for a middle axis). Row index = outer * inner + inner index, which is also the
 * flat index of every per-row tensor (keepdim or not).
 *
 * The generic engine classifies every tensor of the group as FULL (varies along the row), ROW
 * (one value per row) or FLAT (a per-row tensor without the reduced axes, indexed by row).
 * A reduction's level is one more than the highest level of the ROW values its input needs;
 * the kernel runs one pass over the row per level, each accumulating that level's reductions
 * (thread partials, then a warp shuffle tree and, above one warp, a shared-memory combine that
 * every thread of the row reads in the same order, so all threads hold bitwise-equal results),
 * computes the ROW nodes that became available, and finally a pass writes the FULL outputs.
 * one_pass recognises two patterns and computes the pair in a single pass: max(A) then
 * sum(exp(A - max)) (online softmax: running max, rescaled running sum) and mean(A) then
 * mean(square(A - mean)) (Welford mean and M2, merged with Chan's formula).
 *
 * Schedules (knobs below): threads per row (tpr), row groups per block (G) and rows each group
 * handles in sequence:
 *   warp_per_row    tpr 32, G = threads / 32, `rows` rows per warp in sequence
 *   block_per_row   tpr = threads, G 1, `rows` rows per block in sequence
 *   rows_per_block  G = rows groups of threads / rows threads (at least 2 warps), a row each
 *   split_row       tpr = threads; each row is cut into S chunks, one block per chunk; one
 *                   kernel per level writes fp32 partials to the workspace, every later kernel
 *                   combines them (each block the same way), the last writes the outputs
 *   thread_per_row  strided rows only: tpr 1, adjacent threads own adjacent rows (coalesced)
 *   split_cluster   split_row in one kernel (sm_90): a row's S <= 8 chunks are a thread-block
 *                   cluster; each level's partials meet in the blocks' shared memory, read by
 *                   every block of the cluster in chunk order (distributed shared memory), so
 *                   no workspace and no kernel per level
 *   lane_per_row    strided rows only: G = 32 adjacent rows, lane g of every warp on row g
 *                   (coalesced), so tpr = threads / 32 threads, one per warp, split each row;
 *                   their partials meet in shared memory (for rows too few for a thread each
 *                   to keep the memory system busy, e.g. a sum over the middle axis)
 * Row storage: inputs of shape X read in two or more passes are kept in registers (fully
 * unrolled, compile-time sized), in shared memory (each thread reads back only what it wrote,
 * so no barrier is needed), or re-read from global memory. Rows past the end are clamped to
 * the last row and their stores skipped, so barriers stay uniform.
 *
 * Matmul prologue: X may itself be a small matmul of two group inputs, A [M, K] x B [K, N] with
 * X = [M, N] reduced along N (a linear layer followed by a softmax, as in KernelBench's
 * Matmul+GELU+Softmax): each element is then its own K-long dot product (FFMA, four partial
 * sums in a fixed order), kept on chip like an input when two passes read it (else recomputed
 * per pass), so one launch replaces a GEMM kernel and a row kernel. Only for K <= MM_MAX_K,
 * where the dot products cost less than the launch saved. */
#include "family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_STRATEGY, K_THREADS, K_ROWS, K_PASS, K_STORAGE, K_VEC, N_KNOBS };
enum { ST_WARP, ST_BLOCK, ST_ROWS, ST_SPLIT, ST_THREAD, ST_LANE, ST_CLUSTER };
enum { PASS_MULTI, PASS_ONE };
enum { STO_REGS, STO_SHARED, STO_REREAD };

static const char *const strategy_labels[] = {"warp_per_row", "block_per_row",  "rows_per_block",
                                              "split_row",    "thread_per_row", "lane_per_row",
                                              "split_cluster"};
static const char *const pass_labels[] = {"multi_pass", "one_pass"};
static const char *const storage_labels[] = {"registers", "shared", "re_read"};

static const ops_knob row_knobs[N_KNOBS] = {
    [K_STRATEGY] = {"strategy",
                    7,
                    {ST_WARP, ST_BLOCK, ST_ROWS, ST_SPLIT, ST_THREAD, ST_LANE, ST_CLUSTER},
                    strategy_labels},
    [K_THREADS] = {"threads", 6, {32, 64, 128, 256, 512, 1024}, NULL},
    [K_ROWS] = {"rows", 4, {1, 2, 4, 8}, NULL},
    [K_PASS] = {"pass", 2, {PASS_MULTI, PASS_ONE}, pass_labels},
    [K_STORAGE] = {"storage", 3, {STO_REGS, STO_SHARED, STO_REREAD}, storage_labels},
    [K_VEC] = {"vec", 4, {1, 2, 4, 8}, NULL}, /* 8: 16-byte accesses of 16-bit data */
};

#define RW_MAX_SLOTS   (OPS_GROUP_MAX_IO + OPS_GROUP_MAX_NODES)
#define RW_MAX_GRID    2147483647LL
#define RW_MAX_SPLITS  256
#define RW_MAX_CLUSTER 8   /* split_cluster: the portable cluster size */
#define RW_MAX_CACHED  64  /* floats per thread kept in registers */
#define MM_MAX_K       512 /* the longest dot product of a matmul prologue */

typedef enum rw_cls { CL_NONE, CL_FULL, CL_ROW, CL_FLAT } rw_cls;

/* How a reduction accumulates. A pair head carries its tail's state too. */
typedef enum rw_kind {
    RK_SUM, /* sum and mean */
    RK_MAX,
    RK_MIN,
    RK_ONLINE,  /* pair head: max(A) with tail sum(exp(A - max)) */
    RK_WELFORD, /* pair head: mean(A) with tail mean(square(A - mean)) */
    RK_TAIL,    /* computed by its head */
} rw_kind;

/* The group, analysed. Slots: group inputs [0, n_in), then the group's nodes in topological
 * order. */
typedef struct rw_info {
    const ops_group *grp;
    const ops_graph *g;
    int n_slots;
    int32_t tensor[RW_MAX_SLOTS];
    int node[RW_MAX_SLOTS]; /* graph node index, -1 for an input */
    rw_cls cls[RW_MAX_SLOTS];
    int level[RW_MAX_SLOTS];     /* ROW/FLAT: known after this level; FULL: needs levels <= */
    rw_kind kind[RW_MAX_SLOTS];  /* reductions */
    int pair[RW_MAX_SLOTS];      /* head <-> tail slot, or -1 */
    int src[RW_MAX_SLOTS];       /* reductions: the slot reduced (pairs: A) */
    bool flat_use[RW_MAX_SLOTS]; /* inputs read by FLAT nodes (at offset row) */
    bool mm[RW_MAX_SLOTS];       /* FULL slots computed by a matmul prologue */
    int64_t stride[RW_MAX_SLOTS][OPS_MAX_RANK]; /* X-aligned element strides, 0 = broadcast */
    ops_shape X;
    int rank, a0, a1; /* reduced axes [a0, a1] */
    int64_t outer, L, inner, n_rows;
    int n_levels;
    bool has_pair, full_out, wide;
    int max_bytes;
} rw_info;

/* A schedule, resolved against the group. */
typedef struct rw_plan {
    int strategy, threads, rows, pass, storage, vec;
    int tpr, G, rseq;
    int64_t rows_per_block, grid;
    int S;         /* splits per row (split_row), else 1 */
    int64_t chunk; /* elements per split (L when not split) */
    int nk;        /* loop trips per thread over a row (chunk) */
    int n_cached;
    bool cached[RW_MAX_SLOTS];
    int64_t smem;   /* dynamic shared memory */
    int red_floats; /* per-pass accumulator components (max over passes) */
    int regs;
} rw_plan;

/* Floats between the rows kept in shared memory: odd for lane_per_row, whose lanes read 32
 * different rows at the same element (an even stride would put them on few banks). */
static int64_t rw_smem_row_stride(const rw_plan *p, int64_t L)
{
    return p->strategy == ST_LANE ? L | 1 : L;
}

/* Per-row partials that meet in shared memory (kt_red): one per warp of a row above a warp
 * (after the shuffles), one per thread of a row for lane_per_row (no shuffles: a warp's lanes
 * hold different rows), none otherwise. */
static int rw_partials(const rw_plan *p)
{
    if (p->strategy == ST_LANE)
        return p->tpr;
    return p->tpr > 32 ? p->tpr / 32 : 0;
}

/* ---- analysis ---- */

static int slot_of(const rw_info *in, int32_t t)
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

static const ops_node *slot_node(const rw_info *in, int s)
{
    return in->node[s] >= 0 ? &in->g->nodes[in->node[s]] : NULL;
}

static bool is_reduce(ops_op op)
{
    return op == OPS_REDUCE_SUM || op == OPS_REDUCE_MEAN || op == OPS_REDUCE_MAX ||
           op == OPS_REDUCE_MIN;
}

/* The producer slot of node-slot s's operand k when it is a group node of op `op`, else -1. */
static int operand_node(const rw_info *in, int s, int k, ops_op op)
{
    const ops_node *n = slot_node(in, s);
    if (!n || k >= n->n_in || n->in[k].tensor == OPS_SCALAR)
        return -1;
    int u = slot_of(in, n->in[k].tensor);
    const ops_node *m = u >= 0 ? slot_node(in, u) : NULL;
    return m && m->op == op ? u : -1;
}

/* Recognises the one-pass pairs: tail t reduces exp(A - max(A)) or square(A - mean(A)).
 * Sets has_pair; with apply, also pairs them up (one_pass schedules). */
static void find_pairs(rw_info *in, bool apply)
{
    for (int t = 0; t < in->n_slots; t++) {
        const ops_node *n = slot_node(in, t);
        if (!n || !is_reduce(n->op))
            continue;
        bool softmax = n->op == OPS_REDUCE_SUM;
        if (!softmax && n->op != OPS_REDUCE_MEAN)
            continue;
        int e = operand_node(in, t, 0, softmax ? OPS_EXP : OPS_SQUARE);
        int d = e >= 0 ? operand_node(in, e, 0, OPS_SUB) : -1;
        int h = d >= 0 ? operand_node(in, d, 1, softmax ? OPS_REDUCE_MAX : OPS_REDUCE_MEAN) : -1;
        if (h < 0 || in->pair[h] >= 0 || in->pair[t] >= 0)
            continue;
        const ops_node *dn = slot_node(in, d), *hn = slot_node(in, h);
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
        const ops_node *n = slot_node(in, s);
        in->level[s] = 0;
        if (!n)
            continue;
        if (is_reduce(n->op)) {
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
            int u = slot_of(in, n->in[k].tensor);
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
        int u = slot_of(in, n->in[k].tensor);
        if (u < 0 || in->node[u] >= 0 || g->tensors[n->in[k].tensor].shape.rank != 2)
            return false;
        for (int v = in->grp->n_in; v < in->n_slots; v++) {
            const ops_node *o = slot_node(in, v);
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

static bool rw_analyse(const ops_group *grp, bool use_pairs, rw_info *in)
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
        const ops_node *n = slot_node(in, s);
        if (!is_reduce(n->op))
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
        const ops_node *n = slot_node(in, s);
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
        if (is_reduce(n->op)) {
            int u = slot_of(in, n->in[0].tensor);
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
            int u = slot_of(in, n->in[0].tensor);
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
            int u = slot_of(in, n->in[k].tensor);
            any_flat |= in->cls[u] == CL_FLAT;
            any_full |= in->cls[u] == CL_FULL;
        }
        if (any_flat) {
            /* Per-row tensors without the reduced axes: operands of the node's own shape. */
            for (int k = 0; k < n->n_in; k++) {
                if (n->in[k].tensor == OPS_SCALAR)
                    continue;
                int u = slot_of(in, n->in[k].tensor);
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
            if (n->in[k].tensor != OPS_SCALAR && in->cls[slot_of(in, n->in[k].tensor)] == CL_NONE)
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
            const ops_node *n = slot_node(in, u);
            if (in->cls[u] == CL_FLAT)
                continue;
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k].tensor == in->tensor[s])
                    return false;
        }
    }
    /* Outputs: FULL ones are X itself, per-row ones one value per row (no two rows share). */
    for (int i = 0; i < grp->n_out; i++) {
        int s = slot_of(in, grp->out[i]);
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
    const ops_node *n = slot_node(in, s);
    if (!n || in->mm[s]) { /* an input, or a matmul prologue (not its operands: not rows) */
        reads[s] = true;
        return;
    }
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k].tensor != OPS_SCALAR)
            full_reads(in, slot_of(in, n->in[k].tensor), reads);
}

/* The slot whose value a reduction accumulates in its pass (a pair head reads A). */
static int acc_source(const rw_info *in, int s)
{
    return in->src[s];
}

/* Slots a row can keep on chip: FULL inputs and matmul prologues (computed once, not per
 * pass). */
static bool row_cacheable(const rw_info *in, int u)
{
    return u < in->grp->n_in || in->mm[u];
}

/* Which FULL inputs (and matmul prologues) pass p reads (p = n_levels + 1: the output pass). */
static void pass_reads(const rw_info *in, int p, bool *reads)
{
    memset(reads, 0, sizeof(bool) * RW_MAX_SLOTS);
    for (int s = 0; s < in->n_slots; s++) {
        const ops_node *n = slot_node(in, s);
        if (p <= in->n_levels) {
            if (n && is_reduce(n->op) && in->level[s] == p && in->kind[s] != RK_TAIL)
                full_reads(in, acc_source(in, s), reads);
        } else {
            for (int i = 0; i < in->grp->n_out; i++)
                if (in->grp->out[i] == in->tensor[s])
                    full_reads(in, s, reads);
        }
    }
}

/* Accumulator components of a reduction kind. */
static int kind_components(rw_kind k)
{
    return k == RK_ONLINE ? 2 : k == RK_WELFORD ? 3 : k == RK_TAIL ? 0 : 1;
}

static int level_components(const rw_info *in, int p)
{
    int c = 0;
    for (int s = 0; s < in->n_slots; s++) {
        const ops_node *n = slot_node(in, s);
        if (n && is_reduce(n->op) && in->level[s] == p)
            c += kind_components(in->kind[s]);
    }
    return c;
}

/* ---- plan ---- */

static int reg_limit(const ops_device *dev, int threads)
{
    int lim = dev->regs_per_sm / threads;
    lim = lim > dev->max_regs_per_thread ? dev->max_regs_per_thread : lim;
    return lim & ~7;
}

static int splits_for(const rw_info *in, const ops_device *dev, int threads, int vec,
                      int64_t *chunk)
{
    int64_t target = 2LL * dev->sm_count;
    int64_t S = (target + in->n_rows - 1) / in->n_rows;
    int64_t most = in->L / ((int64_t)threads * vec);
    S = S > most ? most : S;
    S = S > RW_MAX_SPLITS ? RW_MAX_SPLITS : S;
    S = S < 1 ? 1 : S;
    int64_t c = (in->L + S - 1) / S;
    c = (c + vec - 1) / vec * vec;
    *chunk = c;
    return (int)((in->L + c - 1) / c);
}

/* Resolves s against the group; returns NULL or the prune reason. */
static const char *rw_plan_of(const rw_info *in, const ops_schedule *s, const ops_device *dev,
                              bool force_split, rw_plan *p)
{
    memset(p, 0, sizeof(*p));
    p->strategy = s->v[K_STRATEGY];
    p->threads = s->v[K_THREADS];
    p->rows = s->v[K_ROWS];
    p->pass = s->v[K_PASS];
    p->storage = s->v[K_STORAGE];
    p->vec = s->v[K_VEC];
    p->S = 1;
    p->chunk = in->L;
    if (p->threads > dev->max_threads_per_block)
        return "threads";
    switch (p->strategy) {
    case ST_WARP:
        if (p->threads < dev->warp_size)
            return "threads";
        p->tpr = dev->warp_size;
        p->G = p->threads / p->tpr;
        p->rseq = p->rows;
        break;
    case ST_BLOCK:
        if (p->threads <= dev->warp_size)
            return "redundant"; /* warp_per_row with one warp */
        p->tpr = p->threads;
        p->G = 1;
        p->rseq = p->rows;
        break;
    case ST_ROWS:
        if (p->rows == 1)
            return "redundant"; /* block_per_row */
        p->tpr = p->threads / p->rows;
        if (p->tpr < dev->warp_size)
            return "threads";
        if (p->tpr == dev->warp_size)
            return "redundant"; /* warp_per_row */
        p->G = p->rows;
        p->rseq = 1;
        break;
    case ST_SPLIT:
    case ST_CLUSTER:
        if (p->strategy == ST_CLUSTER && dev->sm_major < 9)
            return "shape"; /* thread-block clusters */
        if (p->rows != 1 || p->storage != STO_REREAD)
            return "redundant";
        p->tpr = p->threads;
        p->G = 1;
        p->rseq = 1;
        break;
    case ST_THREAD:
        if (in->inner == 1)
            return "shape"; /* contiguous rows: a thread per row would not coalesce */
        if (p->rows != 1)
            return "redundant";
        p->tpr = 1;
        p->G = p->threads;
        p->rseq = 1;
        break;
    case ST_LANE:
        if (in->inner == 1)
            return "shape"; /* contiguous rows: lanes on different rows would not coalesce */
        if (p->rows != 1)
            return "redundant";
        if (p->threads <= dev->warp_size)
            return "redundant"; /* thread_per_row */
        p->tpr = p->threads / dev->warp_size;
        p->G = dev->warp_size;
        p->rseq = 1;
        if (p->tpr / 2 >= in->L)
            return "shape"; /* more than half the warps idle */
        break;
    default:
        return "shape";
    }
    if (p->pass == PASS_ONE && !in->has_pair)
        return "shape";
    if (p->vec > 1) {
        if (in->inner != 1)
            return "shape";
        if (in->L % p->vec != 0)
            return "divisibility";
        if (p->vec * in->max_bytes > 16)
            return "align";
        /* Every FULL input read as vectors: unit stride along the row, aligned row starts. */
        for (int u = 0; u < in->grp->n_in; u++) {
            if (in->cls[u] != CL_FULL)
                continue;
            const int64_t *st = in->stride[u];
            int64_t want = 1;
            for (int k = in->a1; k >= in->a0; k--) {
                if (in->X.d[k].size > 1 && st[k] != want)
                    return "align";
                want *= in->X.d[k].size;
            }
            for (int k = 0; k < in->a0; k++)
                if (st[k] % p->vec)
                    return "align";
        }
    }
    if (p->strategy == ST_SPLIT || p->strategy == ST_CLUSTER) {
        p->S = splits_for(in, dev, p->threads, p->vec, &p->chunk);
        if (p->strategy == ST_CLUSTER && p->S > RW_MAX_CLUSTER) {
            p->chunk = (in->L + RW_MAX_CLUSTER - 1) / RW_MAX_CLUSTER;
            p->chunk = (p->chunk + p->vec - 1) / p->vec * p->vec;
            p->S = (int)((in->L + p->chunk - 1) / p->chunk);
        }
        if (p->S < 2 && force_split && in->L >= 2 * p->vec) {
            p->chunk = (in->L / 2 + p->vec - 1) / p->vec * p->vec;
            p->S = (int)((in->L + p->chunk - 1) / p->chunk);
        }
        if (p->S < 2)
            return "shape";
        if (p->strategy == ST_SPLIT && in->n_levels + 1 > OPS_MAX_KERNELS)
            return "shape";
    }
    /* More than half the threads of a row idle. */
    if (p->tpr > dev->warp_size && (int64_t)(p->tpr / 2) * p->vec >= p->chunk)
        return "shape";
    p->nk = (int)((p->chunk + (int64_t)p->tpr * p->vec - 1) / ((int64_t)p->tpr * p->vec));
    p->rows_per_block = (int64_t)p->G * p->rseq;
    p->grid = p->strategy == ST_SPLIT || p->strategy == ST_CLUSTER
                  ? in->n_rows * p->S
                  : (in->n_rows + p->rows_per_block - 1) / p->rows_per_block;
    if (p->grid > RW_MAX_GRID)
        return "shape";
    if (p->rows_per_block > 2 * in->n_rows && p->rseq > 1)
        return "redundant";

    /* Row storage: inputs of shape X that two or more passes read. */
    int passes = in->n_levels + (in->full_out ? 1 : 0);
    int count[RW_MAX_SLOTS] = {0};
    for (int q = 1; q <= passes; q++) {
        int pp = q <= in->n_levels ? q : in->n_levels + 1;
        bool reads[RW_MAX_SLOTS];
        pass_reads(in, pp, reads);
        for (int u = 0; u < in->n_slots; u++)
            count[u] += row_cacheable(in, u) && reads[u];
    }
    for (int u = 0; u < in->n_slots; u++) {
        if (row_cacheable(in, u) && count[u] >= 2 &&
            ops_shape_same_sizes(&in->g->tensors[in->tensor[u]].shape, &in->X)) {
            p->cached[u] = p->storage != STO_REREAD;
            p->n_cached += p->cached[u];
        }
    }
    if (p->storage != STO_REREAD && p->n_cached == 0)
        return "redundant";
    int cached_floats = p->storage == STO_REGS ? p->nk * p->vec * p->n_cached : 0;
    int lim = reg_limit(dev, p->threads);
    /* ptxas hoists the loads of the other inputs of a fully unrolled pass too: leave them as
     * many registers again. */
    if (p->storage == STO_REGS && (cached_floats > RW_MAX_CACHED || cached_floats > (lim - 56) / 2))
        return "regs";
    for (int q = 1; q <= in->n_levels; q++) {
        int c = level_components(in, q);
        p->red_floats = c > p->red_floats ? c : p->red_floats;
    }
    if (p->storage == STO_SHARED)
        p->smem = (int64_t)p->G * p->n_cached * rw_smem_row_stride(p, in->L) * 4;
    int64_t static_smem = (int64_t)p->G * rw_partials(p) * p->red_floats * 4;
    if (p->smem + static_smem > dev->smem_per_block_optin)
        return "smem";
    int n_full = 0;
    for (int u = 0; u < in->n_slots; u++)
        n_full += in->cls[u] == CL_FULL && in->node[u] < 0;
    p->regs = 40 + cached_floats + 4 * p->red_floats + 2 * p->vec * (n_full + in->grp->n_out) +
              2 * in->grp->n_in;
    if (p->regs > lim)
        return "regs";
    return NULL;
}

/* ---- code generation helpers ---- */

typedef struct rw_gen {
    const rw_info *in;
    const rw_plan *p;
    const char *ix;
    bool use_o, use_in;
    unsigned vec_types;
    bool split;
} rw_gen;

/* The kernel parameter holding slot s (an input or an output), or NULL. */
static bool param_of(const rw_info *in, int s, char *out, size_t len)
{
    char clean[48];
    ops_emit_identifier(in->g->tensors[in->tensor[s]].name, clean, sizeof(clean));
    for (int i = 0; i < in->grp->n_in; i++)
        if (in->grp->in[i] == in->tensor[s]) {
            snprintf(out, len, "in%d_%s", i, clean);
            return true;
        }
    for (int i = 0; i < in->grp->n_out; i++)
        if (in->grp->out[i] == in->tensor[s]) {
            snprintf(out, len, "out%d_%s", i, clean);
            return true;
        }
    return false;
}

static const char *vec_type(rw_gen *s, ops_dtype dt, char *buf, size_t len)
{
    s->vec_types |= OPS_VEC_BIT(dt, s->p->vec);
    ops_emit_vec_type_name(dt, s->p->vec, buf, len);
    return buf;
}

static void line_start(kt_buf *b)
{
    kt_buf_printf(b, "%*s", b->indent, "");
}

/* The offset contributed by X dims [lo, hi] given `var`, the flat index over those dims, for
 * element strides st (0: broadcast). */
static void emit_part(rw_gen *s, kt_buf *b, int lo, int hi, const int64_t *st, const char *var,
                      bool *used)
{
    const ops_shape *X = &s->in->X;
    int64_t below[OPS_MAX_RANK];
    int64_t acc = 1;
    for (int k = hi; k >= lo; k--) {
        below[k] = acc;
        acc *= X->d[k].size;
    }
    /* Contiguous: stride_k == base * below_k on every dimension that is not 1. */
    int64_t base = -1;
    bool any = false, contiguous = true;
    for (int k = lo; k <= hi; k++) {
        if (X->d[k].size == 1)
            continue;
        if (st[k])
            any = true;
        if (!st[k] || (base >= 0 && st[k] != base * below[k]))
            contiguous = false;
        if (st[k] && base < 0 && st[k] % below[k] == 0)
            base = st[k] / below[k];
        else if (st[k] && base < 0)
            contiguous = false;
    }
    if (!any) {
        kt_buf_printf(b, "0");
        return;
    }
    *used = true;
    if (contiguous) {
        if (base == 1)
            kt_buf_printf(b, "%s", var);
        else
            kt_buf_printf(b, "%s * %lld", var, (long long)base);
        return;
    }
    bool first = true;
    for (int k = lo; k <= hi; k++) {
        if (X->d[k].size == 1 || !st[k])
            continue;
        kt_buf_printf(b, "%s", first ? "" : " + ");
        first = false;
        bool outermost = true;
        for (int m = lo; m < k; m++)
            outermost &= X->d[m].size == 1;
        kt_buf_printf(b, "(%s", var);
        if (below[k] != 1)
            kt_buf_printf(b, " / %lld", (long long)below[k]);
        if (!outermost)
            kt_buf_printf(b, " %% %lld", (long long)X->d[k].size);
        kt_buf_printf(b, ")");
        if (st[k] != 1)
            kt_buf_printf(b, " * %lld", (long long)st[k]);
    }
}

/* The offset of slot u at this row (outer and inner dims only). */
static void emit_row_offset(rw_gen *s, kt_buf *b, int u)
{
    const rw_info *in = s->in;
    kt_buf outer = {0}, inner = {0};
    if (in->a0 > 0)
        emit_part(s, &outer, 0, in->a0 - 1, in->stride[u], "o", &s->use_o);
    if (in->a1 < in->rank - 1)
        emit_part(s, &inner, in->a1 + 1, in->rank - 1, in->stride[u], "in", &s->use_in);
    bool has_o = outer.data && strcmp(outer.data, "0") != 0;
    bool has_in = inner.data && strcmp(inner.data, "0") != 0;
    if (has_o && has_in)
        kt_buf_printf(b, "%s + %s", outer.data, inner.data);
    else
        kt_buf_printf(b, "%s", has_o ? outer.data : has_in ? inner.data : "0");
    if (kt_buf_status(&outer) < 0 || kt_buf_status(&inner) < 0)
        b->oom = true;
    kt_buf_free(&outer);
    kt_buf_free(&inner);
}

static void emit_to_float_of(kt_buf *b, ops_dtype dt, const char *fmt, ...) KT_PRINTF(3, 4);
static void emit_to_float_of(kt_buf *b, ops_dtype dt, const char *fmt, ...)
{
    char expr[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(expr, sizeof(expr), fmt, ap);
    va_end(ap);
    ops_emit_to_float(b, dt, expr);
}

/* The float expression of node slot u from its operands' variable names. */
static void emit_node_expr(rw_gen *s, kt_buf *b, int u)
{
    const rw_info *in = s->in;
    const ops_node *n = slot_node(in, u);
    char names[OPS_MAX_OPERANDS][16];
    const char *ops[OPS_MAX_OPERANDS] = {0};
    for (int k = 0; k < n->n_in; k++) {
        if (n->in[k].tensor == OPS_SCALAR) {
            ops[k] = "";
            continue;
        }
        int v = slot_of(in, n->in[k].tensor);
        char c = in->cls[v] == CL_FULL ? 'f' : in->cls[u] == CL_FLAT && in->node[v] < 0 ? 'q' : 'r';
        snprintf(names[k], sizeof(names[k]), "%c%d", c, v);
        ops[k] = names[k];
    }
    if (n->op == OPS_RESHAPE) {
        kt_buf_printf(b, "%s", ops[0]);
        return;
    }
    kt_buf e = {0};
    if (ops_emit_elementwise(&e, n, ops) < 0)
        kt_buf_printf(&e, "0.0f /* unsupported */");
    kt_buf_printf(b, "%s", e.data ? e.data : "");
    if (kt_buf_status(&e) < 0)
        b->oom = true;
    kt_buf_free(&e);
}

/* ---- a pass over the row ---- */

typedef struct rw_body {
    rw_gen *s;
    kt_buf *pre;  /* before the lane loop: vector loads */
    kt_buf *lane; /* per element */
    bool done[RW_MAX_SLOTS];
} rw_body;

/* The call computing matmul prologue u's element at column COL of this row. */
static void emit_mm_call(const rw_info *in, kt_buf *b, int u, const char *col)
{
    const ops_node *n = slot_node(in, u);
    char pa[64], pb[64];
    param_of(in, slot_of(in, n->in[0].tensor), pa, sizeof(pa));
    param_of(in, slot_of(in, n->in[1].tensor), pb, sizeof(pb));
    kt_buf_printf(b, "kt_mm%d(%s, %s, row, %s)", u, pa, pb, col);
}

/* Emits the FULL value of slot u for the current element (lane); returns nothing, the value
 * is f<u>. */
static void body_value(rw_body *bd, int u)
{
    rw_gen *s = bd->s;
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    if (in->cls[u] != CL_FULL || bd->done[u])
        return;
    bd->done[u] = true;
    const ops_tensor *t = &in->g->tensors[in->tensor[u]];
    const ops_node *n = slot_node(in, u);
    char c[OPS_EMIT_COMMENT_MAX];
    if (n && in->mm[u] && !p->cached[u]) {
        line_start(bd->lane);
        kt_buf_printf(bd->lane, "const float f%d = ", u);
        emit_mm_call(in, bd->lane, u, p->vec > 1 ? "j + l" : "j");
        kt_buf_printf(bd->lane, "; /* %s */\n", ops_emit_comment_text(t->name, c, sizeof(c)));
        return;
    }
    if (n && in->mm[u]) {
        line_start(bd->lane);
        if (p->storage == STO_REGS)
            kt_buf_printf(bd->lane, "const float f%d = c%d[k * %d%s]; /* %s */\n", u, u, p->vec,
                          p->vec > 1 ? " + l" : "", ops_emit_comment_text(t->name, c, sizeof(c)));
        else
            kt_buf_printf(bd->lane, "const float f%d = s%d[j%s]; /* %s */\n", u, u,
                          p->vec > 1 ? " + l" : "", ops_emit_comment_text(t->name, c, sizeof(c)));
        return;
    }
    if (n) {
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k].tensor != OPS_SCALAR)
                body_value(bd, slot_of(in, n->in[k].tensor));
        line_start(bd->lane);
        kt_buf_printf(bd->lane, "const float f%d = ", u);
        emit_node_expr(s, bd->lane, u);
        kt_buf_printf(bd->lane, "; /* %s */\n", ops_emit_comment_text(t->name, c, sizeof(c)));
        return;
    }
    const char *lanei = p->vec > 1 ? " + l" : "";
    line_start(bd->lane);
    kt_buf_printf(bd->lane, "const float f%d = ", u);
    if (p->cached[u] && p->storage == STO_REGS) {
        kt_buf_printf(bd->lane, "c%d[k * %d%s];\n", u, p->vec, lanei);
        return;
    }
    if (p->cached[u] && p->storage == STO_SHARED) {
        if (p->vec > 1) {
            char vt[32];
            vec_type(s, OPS_DT_F32, vt, sizeof(vt));
            line_start(bd->pre);
            kt_buf_printf(bd->pre, "const %s sv%d = *reinterpret_cast<const %s *>(s%d + j);\n", vt,
                          u, vt, u);
            kt_buf_printf(bd->lane, "sv%d.v[l];\n", u);
        } else {
            kt_buf_printf(bd->lane, "s%d[j];\n", u);
        }
        return;
    }
    char pn[64];
    param_of(in, u, pn, sizeof(pn));
    if (p->vec > 1) {
        char vt[32];
        vec_type(s, t->dtype, vt, sizeof(vt));
        line_start(bd->pre);
        kt_buf_printf(bd->pre, "const %s xv%d = *reinterpret_cast<const %s *>(%s + b%d + j);\n", vt,
                      u, vt, pn, u);
        emit_to_float_of(bd->lane, t->dtype, "xv%d.v[l]", u);
    } else {
        kt_buf jb = {0};
        bool used = false;
        emit_part(s, &jb, in->a0, in->a1, in->stride[u], "j", &used);
        emit_to_float_of(bd->lane, t->dtype, "%s[b%d + %s]", pn, u, jb.data ? jb.data : "0");
        kt_buf_free(&jb);
    }
    kt_buf_printf(bd->lane, ";\n");
}

typedef struct rw_acc {
    int slot; /* the reduction (pair head) */
    rw_kind kind;
    int tail; /* pair tail slot or -1 */
} rw_acc;

static int level_accs(const rw_info *in, int level, rw_acc *accs)
{
    int n = 0;
    for (int u = 0; u < in->n_slots; u++) {
        const ops_node *nd = slot_node(in, u);
        if (!nd || !is_reduce(nd->op) || in->level[u] != level || in->kind[u] == RK_TAIL)
            continue;
        accs[n++] = (rw_acc){.slot = u, .kind = in->kind[u], .tail = in->pair[u]};
    }
    return n;
}

#define NEG_INF "__int_as_float((int)0xff800000)"
#define POS_INF "__int_as_float(0x7f800000)"

static void acc_decl(kt_buf *b, const rw_acc *a)
{
    int u = a->slot;
    switch (a->kind) {
    case RK_SUM:
        kt_buf_line(b, "float a%d = 0.0f;", u);
        break;
    case RK_MAX:
        kt_buf_line(b, "float a%d = " NEG_INF ";", u);
        break;
    case RK_MIN:
        kt_buf_line(b, "float a%d = " POS_INF ";", u);
        break;
    case RK_ONLINE:
        kt_buf_line(b, "float a%d = " NEG_INF ", a%d_s = 0.0f; /* running max, sum */", u, u);
        break;
    case RK_WELFORD:
        kt_buf_line(b, "float a%d_n = 0.0f, a%d = 0.0f, a%d_m2 = 0.0f; /* Welford */", u, u, u);
        break;
    case RK_TAIL:
        break;
    }
}

/* Folds value `v` into accumulator a. */
static void acc_update(kt_buf *b, const rw_acc *a, const char *v)
{
    int u = a->slot;
    switch (a->kind) {
    case RK_SUM:
        kt_buf_line(b, "a%d += %s;", u, v);
        break;
    case RK_MAX:
        kt_buf_line(b, "a%d = kt_max(a%d, %s);", u, u, v);
        break;
    case RK_MIN:
        kt_buf_line(b, "a%d = kt_min(a%d, %s);", u, u, v);
        break;
    case RK_ONLINE:
        kt_buf_line(b, "{");
        b->indent += 4;
        kt_buf_line(b, "const float mn = kt_max(a%d, %s);", u, v);
        kt_buf_line(b, "a%d_s = a%d_s * (a%d == mn ? 1.0f : expf(a%d - mn)) + expf(%s - mn);", u, u,
                    u, u, v);
        kt_buf_line(b, "a%d = mn;", u);
        b->indent -= 4;
        kt_buf_line(b, "}");
        break;
    case RK_WELFORD:
        kt_buf_line(b, "{");
        b->indent += 4;
        kt_buf_line(b, "a%d_n += 1.0f;", u);
        kt_buf_line(b, "const float d = %s - a%d;", v, u);
        kt_buf_line(b, "a%d += d / a%d_n;", u, u);
        kt_buf_line(b, "a%d_m2 += d * (%s - a%d);", u, v, u);
        b->indent -= 4;
        kt_buf_line(b, "}");
        break;
    case RK_TAIL:
        break;
    }
}

/* Component names of accumulator a with a prefix/suffix form: comp(a, i, "o_") etc. */
static void acc_comp(char *out, size_t len, const rw_acc *a, int i, const char *prefix)
{
    static const char *const online[] = {"", "_s"};
    static const char *const welford[] = {"_n", "", "_m2"};
    const char *suf = a->kind == RK_ONLINE ? online[i] : a->kind == RK_WELFORD ? welford[i] : "";
    snprintf(out, len, "%sa%d%s", prefix, a->slot, suf);
}

/* Merges the components named with prefix `other` into a (symmetric: merge(x, y) and
 * merge(y, x) give bitwise equal results, so every lane of a shuffle tree agrees). */
static void acc_merge(kt_buf *b, const rw_acc *a, const char *other)
{
    int u = a->slot;
    switch (a->kind) {
    case RK_SUM:
        kt_buf_line(b, "a%d = a%d + %sa%d;", u, u, other, u);
        break;
    case RK_MAX:
        kt_buf_line(b, "a%d = kt_max(a%d, %sa%d);", u, u, other, u);
        break;
    case RK_MIN:
        kt_buf_line(b, "a%d = kt_min(a%d, %sa%d);", u, u, other, u);
        break;
    case RK_ONLINE:
        kt_buf_line(b, "{");
        b->indent += 4;
        kt_buf_line(b, "const float mn = kt_max(a%d, %sa%d);", u, other, u);
        kt_buf_line(b, "a%d_s = a%d_s * (a%d == mn ? 1.0f : expf(a%d - mn)) +", u, u, u, u);
        kt_buf_line(b, "        %sa%d_s * (%sa%d == mn ? 1.0f : expf(%sa%d - mn));", other, u,
                    other, u, other, u);
        kt_buf_line(b, "a%d = mn;", u);
        b->indent -= 4;
        kt_buf_line(b, "}");
        break;
    case RK_WELFORD:
        kt_buf_line(b, "{");
        b->indent += 4;
        kt_buf_line(b, "const float n = a%d_n + %sa%d_n;", u, other, u);
        kt_buf_line(b, "const float d = %sa%d - a%d;", other, u, u);
        kt_buf_line(b, "const float mean = n > 0.0f ? (a%d_n * a%d + %sa%d_n * %sa%d) / n : 0.0f;",
                    u, u, other, u, other, u);
        kt_buf_line(b,
                    "a%d_m2 = (a%d_m2 + %sa%d_m2) + (n > 0.0f ? d * d * (a%d_n * %sa%d_n / n) : "
                    "0.0f);",
                    u, u, other, u, u, other, u);
        kt_buf_line(b, "a%d = mean;", u);
        kt_buf_line(b, "a%d_n = n;", u);
        b->indent -= 4;
        kt_buf_line(b, "}");
        break;
    case RK_TAIL:
        break;
    }
}

/* Where partial c0 (a component of an accumulator) of part w of a row lies in shared memory:
 * part 0's (first) and part w's, the loop variable; into out. */
typedef void (*rw_part_ref)(char *out, size_t len, int c0, bool first, const rw_plan *p);

/* Every thread folds the n_parts partials of its row in part order (so all hold bitwise-equal
 * results): its accumulators take part 0's, then merge parts 1, 2, ... */
static void emit_fold_partials(kt_buf *b, const rw_plan *p, const rw_acc *accs, int n_acc,
                               int n_parts, rw_part_ref ref)
{
    char at[64];
    int c0 = 0;
    for (int i = 0; i < n_acc; i++)
        for (int c = 0; c < kind_components(accs[i].kind); c++, c0++) {
            char own[32];
            acc_comp(own, sizeof(own), &accs[i], c, "");
            ref(at, sizeof(at), c0, true, p);
            kt_buf_line(b, "%s = %s;", own, at);
        }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int w = 1; w < %d; w++) {", n_parts);
    b->indent += 4;
    c0 = 0;
    for (int i = 0; i < n_acc; i++)
        for (int c = 0; c < kind_components(accs[i].kind); c++, c0++) {
            char oth[32];
            acc_comp(oth, sizeof(oth), &accs[i], c, "o_");
            ref(at, sizeof(at), c0, false, p);
            kt_buf_line(b, "const float %s = %s;", oth, at);
        }
    for (int i = 0; i < n_acc; i++)
        acc_merge(b, &accs[i], "o_");
    b->indent -= 4;
    kt_buf_line(b, "}");
}

/* lane_per_row's partials: kt_red[component][t][g] */
static void lane_part_ref(char *out, size_t len, int c0, bool first, const rw_plan *p)
{
    if (first)
        snprintf(out, len, "kt_red[%d + g]", c0 * p->tpr * p->G);
    else
        snprintf(out, len, "kt_red[(%d + w) * %d + g]", c0 * p->tpr, p->G);
}

/* The warps' partials of a row above a warp: red[warp][component] */
static void warp_part_ref(char *out, size_t len, int c0, bool first, const rw_plan *p)
{
    if (first)
        snprintf(out, len, "red[%d]", c0);
    else
        snprintf(out, len, "red[w * %d + %d]", p->red_floats, c0);
}

/* lane_per_row: the tpr partials of row g (thread t of the row is warp t's lane g) meet in
 * kt_red laid out [component][t][g], so a warp's writes and reads hit 32 consecutive words;
 * every thread of the row folds them in order t = 0, 1, ..., so all hold bitwise-equal results. */
static void emit_lane_reduce(kt_buf *b, const rw_plan *p, const rw_acc *accs, int n_acc)
{
    int G = p->G, np = p->tpr;
    int c0 = 0;
    for (int i = 0; i < n_acc; i++)
        for (int c = 0; c < kind_components(accs[i].kind); c++, c0++) {
            char own[32];
            acc_comp(own, sizeof(own), &accs[i], c, "");
            kt_buf_line(b, "kt_red[(%d + t) * %d + g] = %s;", c0 * np, G, own);
        }
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "{");
    b->indent += 4;
    emit_fold_partials(b, p, accs, n_acc, np, lane_part_ref);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads(); /* kt_red is reused by the next reduction */");
}

/* Combines the accumulators across the tpr threads of a row: shuffles within a warp (or a
 * sub-warp group), then, above a warp, through kt_red in shared memory. */
static void emit_group_reduce(rw_gen *s, kt_buf *b, const rw_acc *accs, int n_acc)
{
    const rw_plan *p = s->p;
    if (p->strategy == ST_LANE) {
        emit_lane_reduce(b, p, accs, n_acc);
        return;
    }
    int width = p->tpr < 32 ? p->tpr : 32;
    if (width > 1) {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int off = %d; off > 0; off >>= 1) {", width / 2);
        b->indent += 4;
        for (int i = 0; i < n_acc; i++)
            for (int c = 0; c < kind_components(accs[i].kind); c++) {
                char own[32], oth[32];
                acc_comp(own, sizeof(own), &accs[i], c, "");
                acc_comp(oth, sizeof(oth), &accs[i], c, "o_");
                kt_buf_line(b, "const float %s = __shfl_xor_sync(0xffffffffu, %s, off);", oth, own);
            }
        for (int i = 0; i < n_acc; i++)
            acc_merge(b, &accs[i], "o_");
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
    if (p->tpr <= 32)
        return;
    int nw = p->tpr / 32;
    int nc = p->red_floats;
    kt_buf_line(b, "if (lane == 0) {");
    b->indent += 4;
    int c0 = 0;
    for (int i = 0; i < n_acc; i++)
        for (int c = 0; c < kind_components(accs[i].kind); c++, c0++) {
            char own[32];
            acc_comp(own, sizeof(own), &accs[i], c, "");
            if (p->G > 1)
                kt_buf_line(b, "kt_red[(g * %d + warp) * %d + %d] = %s;", nw, nc, c0, own);
            else
                kt_buf_line(b, "kt_red[warp * %d + %d] = %s;", nc, c0, own);
        }
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads();");
    /* Every thread folds the warps' partials in the same order. */
    kt_buf_line(b, "{");
    b->indent += 4;
    if (p->G > 1)
        kt_buf_line(b, "const float *red = kt_red + g * %d;", nw * nc);
    else
        kt_buf_line(b, "const float *red = kt_red;");
    emit_fold_partials(b, p, accs, n_acc, nw, warp_part_ref);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads(); /* kt_red is reused by the next reduction */");
}

/* The row values of the reductions of accs, r<slot> (and the pair tails). */
static void emit_finalize(rw_gen *s, kt_buf *b, const rw_acc *accs, int n_acc)
{
    const rw_info *in = s->in;
    for (int i = 0; i < n_acc; i++) {
        const rw_acc *a = &accs[i];
        const ops_node *n = slot_node(in, a->slot);
        char c[OPS_EMIT_COMMENT_MAX], ct[OPS_EMIT_COMMENT_MAX];
        const char *name =
            ops_emit_comment_text(in->g->tensors[in->tensor[a->slot]].name, c, sizeof(c));
        if (a->kind == RK_WELFORD) {
            kt_buf_line(b, "const float r%d = a%d; /* %s */", a->slot, a->slot, name);
            kt_buf_line(
                b, "const float r%d = a%d_m2 / %lld.0f; /* %s */", a->tail, a->slot,
                (long long)in->L,
                ops_emit_comment_text(in->g->tensors[in->tensor[a->tail]].name, ct, sizeof(ct)));
        } else if (a->kind == RK_ONLINE) {
            kt_buf_line(b, "const float r%d = a%d; /* %s */", a->slot, a->slot, name);
            kt_buf_line(
                b, "const float r%d = a%d_s; /* %s */", a->tail, a->slot,
                ops_emit_comment_text(in->g->tensors[in->tensor[a->tail]].name, ct, sizeof(ct)));
        } else if (n->op == OPS_REDUCE_MEAN) {
            kt_buf_line(b, "const float r%d = a%d / %lld.0f; /* %s */", a->slot, a->slot,
                        (long long)in->L, name);
        } else {
            kt_buf_line(b, "const float r%d = a%d; /* %s */", a->slot, a->slot, name);
        }
    }
}

/* ROW and FLAT nodes (not reductions) that become known at `level`. */
static void emit_row_nodes(rw_gen *s, kt_buf *b, int level)
{
    const rw_info *in = s->in;
    for (int u = in->grp->n_in; u < in->n_slots; u++) {
        const ops_node *n = slot_node(in, u);
        if (in->cls[u] == CL_FULL || is_reduce(n->op) || in->level[u] != level)
            continue;
        line_start(b);
        kt_buf_printf(b, "const float r%d = ", u);
        emit_node_expr(s, b, u);
        char c[OPS_EMIT_COMMENT_MAX];
        kt_buf_printf(b, "; /* %s */\n",
                      ops_emit_comment_text(in->g->tensors[in->tensor[u]].name, c, sizeof(c)));
    }
}

/* Row-level loads: per-row inputs and the row bases of the FULL inputs and outputs. */
static void emit_row_setup(rw_gen *s, kt_buf *b)
{
    const rw_info *in = s->in;
    for (int u = 0; u < in->n_slots; u++) {
        bool out_full = false;
        for (int i = 0; i < in->grp->n_out; i++)
            out_full |= in->grp->out[i] == in->tensor[u] && in->cls[u] == CL_FULL;
        bool is_in = in->node[u] < 0;
        if (!(is_in && in->cls[u] == CL_FULL) && !out_full)
            continue;
        line_start(b);
        kt_buf_printf(b, "const %s b%d = ", s->ix, u);
        emit_row_offset(s, b, u);
        char c[OPS_EMIT_COMMENT_MAX];
        kt_buf_printf(b, "; /* row start in %s */\n",
                      ops_emit_comment_text(in->g->tensors[in->tensor[u]].name, c, sizeof(c)));
    }
    for (int u = 0; u < in->grp->n_in; u++) {
        const ops_tensor *t = &in->g->tensors[in->tensor[u]];
        char pn[64];
        param_of(in, u, pn, sizeof(pn));
        if (in->flat_use[u]) {
            line_start(b);
            kt_buf_printf(b, "const float q%d = ", u);
            emit_to_float_of(b, t->dtype, "%s[%s]", pn,
                             ops_shape_numel(&t->shape) == 1 ? "0" : "row");
            kt_buf_printf(b, ";\n");
        }
        if (in->cls[u] != CL_ROW)
            continue;
        kt_buf off = {0};
        emit_row_offset(s, &off, u);
        line_start(b);
        kt_buf_printf(b, "const float r%d = ", u);
        emit_to_float_of(b, t->dtype, "%s[%s]", pn, off.data ? off.data : "0");
        kt_buf_printf(b, ";\n");
        kt_buf_free(&off);
    }
    emit_row_nodes(s, b, 0);
}

/* The loop over this thread's elements of the row (or chunk), with `body` run per element.
 * j is the element index along the row (lane 0 of a vector). */
static void emit_loop_open(rw_gen *s, kt_buf *b, bool full_unroll)
{
    const rw_plan *p = s->p;
    int64_t span = (int64_t)p->tpr * p->vec;
    if (full_unroll)
        kt_buf_line(b, "#pragma unroll");
    else
        kt_buf_line(b, "#pragma unroll %d", p->nk < 4 ? p->nk : 4);
    kt_buf_line(b, "for (int k = 0; k < %d; k++) {", p->nk);
    b->indent += 4;
    /* j = (k * tpr + t) * vec, spelled without the trivial factors */
    char idx[64];
    if (p->tpr == 1)
        snprintf(idx, sizeof(idx), "k");
    else
        snprintf(idx, sizeof(idx), "(k * %d + t)", p->tpr);
    if (p->vec > 1)
        snprintf(idx + strlen(idx), sizeof(idx) - strlen(idx), " * %d", p->vec);
    kt_buf_line(b, "const %s j = %s%s;", s->ix, s->split ? "jbeg + " : "", idx);
    bool masked =
        s->split ? (p->chunk % span != 0 || s->in->L % p->chunk != 0) : s->in->L % span != 0;
    if (masked) {
        if (s->split)
            kt_buf_line(b, "if (j < jend) {");
        else
            kt_buf_line(b, "if (j < %lld) {", (long long)s->in->L);
        b->indent += 4;
    }
}

static void emit_loop_close(rw_gen *s, kt_buf *b)
{
    const rw_plan *p = s->p;
    int64_t span = (int64_t)p->tpr * p->vec;
    bool masked =
        s->split ? (p->chunk % span != 0 || s->in->L % p->chunk != 0) : s->in->L % span != 0;
    if (masked) {
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
}

/* Fills the row cache (registers c<u>[] or shared s<u>[]) of every cached input. */
static void emit_cache_fill(rw_gen *s, kt_buf *b)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    if (!p->n_cached)
        return;
    kt_buf_line(b, "/* keep this row of %s in %s */", p->n_cached > 1 ? "the inputs" : "the input",
                p->storage == STO_REGS ? "registers" : "shared memory");
    emit_loop_open(s, b, p->storage == STO_REGS);
    for (int u = 0; u < in->n_slots; u++) {
        if (!p->cached[u])
            continue;
        const ops_tensor *t = &in->g->tensors[in->tensor[u]];
        char pn[64], vt[32], ft[32];
        if (in->mm[u]) { /* computed once per element, then kept */
            kt_buf_line(b, "#pragma unroll");
            kt_buf_line(b, "for (int l = 0; l < %d; l++)", p->vec);
            b->indent += 4;
            line_start(b);
            if (p->storage == STO_REGS)
                kt_buf_printf(b, "c%d[k * %d + l] = ", u, p->vec);
            else
                kt_buf_printf(b, "s%d[j + l] = ", u);
            emit_mm_call(in, b, u, "j + l");
            kt_buf_printf(b, ";\n");
            b->indent -= 4;
            continue;
        }
        param_of(in, u, pn, sizeof(pn));
        if (p->vec == 1) {
            line_start(b);
            if (p->storage == STO_REGS)
                kt_buf_printf(b, "c%d[k] = ", u);
            else
                kt_buf_printf(b, "s%d[j] = ", u);
            kt_buf jb = {0};
            bool used = false;
            emit_part(s, &jb, in->a0, in->a1, in->stride[u], "j", &used);
            emit_to_float_of(b, t->dtype, "%s[b%d + %s]", pn, u, jb.data ? jb.data : "0");
            kt_buf_free(&jb);
            kt_buf_printf(b, ";\n");
            continue;
        }
        vec_type(s, t->dtype, vt, sizeof(vt));
        kt_buf_line(b, "{");
        b->indent += 4;
        kt_buf_line(b, "const %s v = *reinterpret_cast<const %s *>(%s + b%d + j);", vt, vt, pn, u);
        if (p->storage == STO_SHARED) {
            vec_type(s, OPS_DT_F32, ft, sizeof(ft));
            kt_buf_line(b, "%s w;", ft);
        }
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int l = 0; l < %d; l++)", p->vec);
        b->indent += 4;
        line_start(b);
        if (p->storage == STO_REGS)
            kt_buf_printf(b, "c%d[k * %d + l] = ", u, p->vec);
        else
            kt_buf_printf(b, "w.v[l] = ");
        ops_emit_to_float(b, t->dtype, "v.v[l]");
        kt_buf_printf(b, ";\n");
        b->indent -= 4;
        if (p->storage == STO_SHARED)
            kt_buf_line(b, "*reinterpret_cast<%s *>(s%d + j) = w;", ft, u);
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
    emit_loop_close(s, b);
}

/* One pass: accumulates the reductions of `level` (level > n_levels: writes the FULL outputs
 * instead). */
static void emit_pass(rw_gen *s, kt_buf *b, int level, const rw_acc *accs, int n_acc)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    bool outputs = level > in->n_levels;
    for (int i = 0; i < n_acc; i++)
        acc_decl(b, &accs[i]);
    emit_loop_open(s, b, p->storage == STO_REGS && p->n_cached);
    kt_buf pre = {0}, lane = {0};
    pre.indent = b->indent;
    lane.indent = b->indent + (p->vec > 1 ? 4 : 0);
    rw_body bd = {.s = s, .pre = &pre, .lane = &lane};
    if (!outputs) {
        for (int i = 0; i < n_acc; i++) {
            int src = acc_source(in, accs[i].slot);
            body_value(&bd, src);
            char v[16];
            snprintf(v, sizeof(v), "f%d", src);
            acc_update(&lane, &accs[i], v);
        }
    } else {
        for (int i = 0; i < in->grp->n_out; i++) {
            int u = slot_of(in, in->grp->out[i]);
            if (in->cls[u] != CL_FULL)
                continue;
            body_value(&bd, u);
            const ops_tensor *t = &in->g->tensors[in->tensor[u]];
            char pn[64], val[16];
            param_of(in, u, pn, sizeof(pn));
            snprintf(val, sizeof(val), "f%d", u);
            line_start(&lane);
            if (p->vec > 1) {
                char vt[32];
                vec_type(s, t->dtype, vt, sizeof(vt));
                kt_buf_printf(&pre, "%*s%s o%d;\n", pre.indent, "", vt, u);
                kt_buf_printf(&lane, "o%d.v[l] = ", u);
            } else {
                kt_buf jb = {0};
                bool used = false;
                emit_part(s, &jb, in->a0, in->a1, in->stride[u], "j", &used);
                if (s->p->G * s->p->rseq > 1) {
                    kt_buf_printf(&lane, "if (row_ok)\n");
                    lane.indent += 4;
                    line_start(&lane);
                    lane.indent -= 4;
                }
                kt_buf_printf(&lane, "%s[b%d + %s] = ", pn, u, jb.data ? jb.data : "0");
                kt_buf_free(&jb);
            }
            ops_emit_from_float(&lane, t->dtype, val);
            kt_buf_printf(&lane, ";\n");
        }
    }
    if (pre.data)
        kt_buf_printf(b, "%s", pre.data);
    if (p->vec > 1) {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int l = 0; l < %d; l++) {", p->vec);
    }
    if (lane.data)
        kt_buf_printf(b, "%s", lane.data);
    if (p->vec > 1)
        kt_buf_line(b, "}");
    if (outputs && p->vec > 1) {
        for (int i = 0; i < in->grp->n_out; i++) {
            int u = slot_of(in, in->grp->out[i]);
            if (in->cls[u] != CL_FULL)
                continue;
            char pn[64], vt[32];
            param_of(in, u, pn, sizeof(pn));
            vec_type(s, in->g->tensors[in->tensor[u]].dtype, vt, sizeof(vt));
            if (p->G * p->rseq > 1) {
                kt_buf_line(b, "if (row_ok)");
                b->indent += 4;
            }
            kt_buf_line(b, "*reinterpret_cast<%s *>(%s + b%d + j) = o%d;", vt, pn, u, u);
            if (p->G * p->rseq > 1)
                b->indent -= 4;
        }
    }
    if (kt_buf_status(&pre) < 0 || kt_buf_status(&lane) < 0)
        b->oom = true;
    kt_buf_free(&pre);
    kt_buf_free(&lane);
    emit_loop_close(s, b);
}

/* Per-row outputs, written once by the row's first thread. */
static void emit_row_outputs(rw_gen *s, kt_buf *b, const char *cond)
{
    const rw_info *in = s->in;
    bool any = false;
    for (int i = 0; i < in->grp->n_out; i++)
        any |= in->cls[slot_of(in, in->grp->out[i])] != CL_FULL;
    if (!any)
        return;
    if (cond) {
        kt_buf_line(b, "if (%s) {", cond);
        b->indent += 4;
    }
    for (int i = 0; i < in->grp->n_out; i++) {
        int u = slot_of(in, in->grp->out[i]);
        if (in->cls[u] == CL_FULL)
            continue;
        char pn[64], val[16];
        param_of(in, u, pn, sizeof(pn));
        snprintf(val, sizeof(val), "r%d", u);
        line_start(b);
        kt_buf_printf(b, "%s[row] = ", pn);
        ops_emit_from_float(b, in->g->tensors[in->tensor[u]].dtype, val);
        kt_buf_printf(b, ";\n");
    }
    if (cond) {
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
}

/* ---- kernels ---- */

static void emit_signature(rw_gen *s, kt_buf *b, const char *entry, bool workspace,
                           ops_kernel_launch *k)
{
    const rw_info *in = s->in;
    char cluster[48] = "";
    if (s->p->strategy == ST_CLUSTER) /* a row's chunks are one cluster */
        snprintf(cluster, sizeof(cluster), "__cluster_dims__(%d, 1, 1) ", s->p->S);
    kt_buf_printf(b, "extern \"C\" __global__ void %s__launch_bounds__(%d, 1) %s(", cluster,
                  s->p->threads, entry);
    k->n_args = 0;
    for (int i = 0; i < in->grp->n_in; i++) {
        char pn[64];
        param_of(in, i, pn, sizeof(pn));
        kt_buf_printf(b, "%sconst %s *__restrict__ %s", i ? ", " : "",
                      ops_emit_ctype(in->g->tensors[in->grp->in[i]].dtype), pn);
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = in->grp->in[i]};
    }
    for (int i = 0; i < in->grp->n_out; i++) {
        char pn[64];
        param_of(in, slot_of(in, in->grp->out[i]), pn, sizeof(pn));
        kt_buf_printf(b, ", %s *__restrict__ %s",
                      ops_emit_ctype(in->g->tensors[in->grp->out[i]].dtype), pn);
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = in->grp->out[i]};
    }
    if (workspace) {
        kt_buf_printf(b, ", void *__restrict__ workspace");
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 0};
    }
    kt_buf_printf(b, ")\n{\n");
}

/* The row decomposition: o (outer index) and in (inner index) as the body needs them. */
static void emit_row_coords(rw_gen *s, kt_buf *b)
{
    const rw_info *in = s->in;
    if (s->use_o)
        kt_buf_line(b, in->inner > 1 ? "const %s o = row / %lld;" : "const %s o = row;", s->ix,
                    (long long)in->inner);
    if (s->use_in)
        kt_buf_line(b, "const %s in = row %% %lld;", s->ix, (long long)in->inner);
}

/* The single kernel of the non-split strategies. */
static void emit_fused_kernel(rw_gen *s, kt_buf *b, const char *entry, ops_kernel_launch *k)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    emit_signature(s, b, entry, false, k);
    /* The row's body first (it tells which coordinates it reads), then the prologue. */
    kt_buf row = {0};
    row.indent = p->rseq > 1 ? 8 : 4;
    s->use_o = s->use_in = false;
    emit_row_setup(s, &row);
    emit_cache_fill(s, &row);
    for (int lvl = 1; lvl <= in->n_levels; lvl++) {
        rw_acc accs[RW_MAX_SLOTS];
        int n = level_accs(in, lvl, accs);
        kt_buf_line(&row, "/* pass %d: %s */", lvl, n > 1 ? "reductions" : "reduction");
        emit_pass(s, &row, lvl, accs, n);
        emit_group_reduce(s, &row, accs, n);
        emit_finalize(s, &row, accs, n);
        emit_row_nodes(s, &row, lvl);
    }
    if (in->full_out) {
        kt_buf_line(&row, "/* pass %d: outputs */", in->n_levels + 1);
        emit_pass(s, &row, in->n_levels + 1, NULL, 0);
    }
    bool masked_rows = in->n_rows % p->rows_per_block != 0;
    if (p->tpr > 1)
        emit_row_outputs(s, &row, masked_rows ? "t == 0 && row_ok" : "t == 0");
    else
        emit_row_outputs(s, &row, masked_rows ? "row_ok" : NULL);

    if (rw_partials(p))
        kt_buf_line(b, "    __shared__ float kt_red[%d];",
                    p->G * rw_partials(p) * (p->red_floats ? p->red_floats : 1));
    if (p->storage == STO_SHARED && p->n_cached)
        kt_buf_line(b, "    extern __shared__ float4 kt_smem[]; /* %lld bytes */",
                    (long long)p->smem);
    if (p->strategy == ST_LANE) {
        kt_buf_line(b, "    const int g = threadIdx.x %% %d; /* row group: the lane */", p->G);
        kt_buf_line(b, "    const int t = threadIdx.x / %d; /* thread in the row: the warp */",
                    p->G);
    } else {
        if (p->G > 1 && p->tpr > 1)
            kt_buf_line(b, "    const int g = threadIdx.x / %d; /* row group */", p->tpr);
        else if (p->G > 1)
            kt_buf_line(b, "    const int g = threadIdx.x; /* row group: a row per thread */");
        if (p->tpr > 1 && p->G > 1)
            kt_buf_line(b, "    const int t = threadIdx.x %% %d; /* thread in the row */", p->tpr);
        else if (p->tpr > 1)
            kt_buf_line(b, "    const int t = threadIdx.x; /* thread in the row */");
    }
    if (p->tpr > 32) {
        kt_buf_line(b, "    const int lane = threadIdx.x %% 32;");
        kt_buf_line(b, "    const int warp = t / 32;");
    }
    if (p->storage == STO_SHARED && p->n_cached) {
        int idx = 0;
        for (int u = 0; u < in->n_slots; u++) {
            if (!p->cached[u])
                continue;
            /* Group g's region holds its row of every cached input, one after another. */
            char region[48];
            if (p->G > 1)
                snprintf(region, sizeof(region), "g * %d + %d", p->n_cached, idx);
            else
                snprintf(region, sizeof(region), "%d", idx);
            kt_buf_line(b,
                        "    float *const s%d = reinterpret_cast<float *>(kt_smem) + (%s) * %lld;",
                        u, region, (long long)rw_smem_row_stride(p, in->L));
            idx++;
        }
    }
    if (p->storage == STO_REGS && p->n_cached)
        for (int u = 0; u < in->n_slots; u++)
            if (p->cached[u]) {
                char c[OPS_EMIT_COMMENT_MAX];
                kt_buf_line(
                    b, "    float c%d[%d]; /* this thread's elements of %s */", u, p->nk * p->vec,
                    ops_emit_comment_text(in->g->tensors[in->tensor[u]].name, c, sizeof(c)));
            }
    const char *gterm = p->G > 1 ? " + g" : "";
    if (p->rseq > 1) {
        kt_buf_line(b, "#pragma unroll 1");
        kt_buf_line(b, "    for (int rs = 0; rs < %d; rs++) {", p->rseq);
        kt_buf_line(b, "        const %s row_raw = (%s)blockIdx.x * %lld + rs * %d%s;", s->ix,
                    s->ix, (long long)p->rows_per_block, p->G, gterm);
    } else {
        kt_buf_line(b, "    const %s row_raw = (%s)blockIdx.x * %lld%s;", s->ix, s->ix,
                    (long long)p->rows_per_block, gterm);
    }
    kt_buf ind = {0};
    ind.indent = row.indent;
    if (masked_rows) {
        kt_buf_line(&ind, "const bool row_ok = row_raw < %lld;", (long long)in->n_rows);
        kt_buf_line(&ind,
                    "const %s row = row_ok ? row_raw : %lld; /* clamped: barriers stay "
                    "uniform */",
                    s->ix, (long long)in->n_rows - 1);
    } else {
        kt_buf_line(&ind, "const %s row = row_raw;", s->ix);
        if (p->G * p->rseq > 1 && in->full_out)
            kt_buf_line(&ind, "const bool row_ok = true;");
    }
    emit_row_coords(s, &ind);
    if (ind.data)
        kt_buf_printf(b, "%s", ind.data);
    if (row.data)
        kt_buf_printf(b, "%s", row.data);
    if (p->rseq > 1)
        kt_buf_line(b, "    }");
    kt_buf_printf(b, "}\n");
    if (kt_buf_status(&row) < 0 || kt_buf_status(&ind) < 0)
        b->oom = true;
    kt_buf_free(&row);
    kt_buf_free(&ind);
}

/* Workspace layout of split_row: per level, [row][split][component] floats. */
static int64_t ws_level_offset(const rw_info *in, const rw_plan *p, int level)
{
    int64_t off = 0;
    for (int q = 1; q < level; q++)
        off += in->n_rows * p->S * level_components(in, q);
    return off;
}

/* split_cluster: the offset of `level`'s partial in every block's kt_part[]. */
static int cluster_part_offset(const rw_info *in, int level)
{
    int off = 0;
    for (int q = 1; q < level; q++)
        off += level_components(in, q);
    return off;
}

/* Re-reads the partials of `level` and combines them (s' = 0 .. S-1 in order, so every block
 * gets the same value): from the workspace (split_row), or from the shared memory of the
 * cluster's blocks (split_cluster). */
static void emit_combine(rw_gen *s, kt_buf *b, int level)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    bool cluster = p->strategy == ST_CLUSTER;
    rw_acc accs[RW_MAX_SLOTS];
    int n = level_accs(in, level, accs);
    int nc = level_components(in, level);
    kt_buf_line(b, "/* level %d: combine the %d partials */", level, p->S);
    for (int i = 0; i < n; i++)
        acc_decl(b, &accs[i]);
    kt_buf_line(b, "for (int q = 0; q < %d; q++) {", p->S);
    b->indent += 4;
    if (cluster)
        kt_buf_line(b, "const unsigned part = kt_cluster_addr(kt_part + %d, q); /* block q's */",
                    cluster_part_offset(in, level));
    else
        kt_buf_line(b, "const float *part = ws + %lld + (row * %d + q) * %d;",
                    (long long)ws_level_offset(in, p, level), p->S, nc);
    int c0 = 0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < kind_components(accs[i].kind); c++, c0++) {
            char oth[32];
            acc_comp(oth, sizeof(oth), &accs[i], c, "o_");
            if (cluster)
                kt_buf_line(b, "const float %s = kt_ld_cluster(part + %d);", oth, 4 * c0);
            else
                kt_buf_line(b, "const float %s = part[%d];", oth, c0);
        }
    for (int i = 0; i < n; i++)
        acc_merge(b, &accs[i], "o_");
    b->indent -= 4;
    kt_buf_line(b, "}");
    emit_finalize(s, b, accs, n);
    emit_row_nodes(s, b, level);
}

/* The rest of a split_row / split_cluster kernel: kt_red, which thread, row and chunk (for
 * split_cluster the chunk is the block's rank in its cluster), then body (freed), closing the
 * kernel. */
static void emit_chunk_kernel_end(rw_gen *s, kt_buf *b, kt_buf *body)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    if (p->tpr > 32)
        kt_buf_line(b, "    __shared__ float kt_red[%d];",
                    (p->tpr / 32) * (p->red_floats ? p->red_floats : 1));
    kt_buf_line(b, "    const int t = threadIdx.x;");
    if (p->tpr > 32) {
        kt_buf_line(b, "    const int lane = threadIdx.x %% 32;");
        kt_buf_line(b, "    const int warp = t / 32;");
    }
    kt_buf_line(b, "    const %s row = blockIdx.x / %d;", s->ix, p->S);
    kt_buf_line(b, "    const int sp = blockIdx.x %% %d; /* which chunk of the row */", p->S);
    kt_buf_line(b, "    const %s jbeg = (%s)sp * %lld;", s->ix, s->ix, (long long)p->chunk);
    kt_buf_line(b, "    const %s jend = jbeg + %lld < %lld ? jbeg + %lld : %lld;", s->ix,
                (long long)p->chunk, (long long)in->L, (long long)p->chunk, (long long)in->L);
    kt_buf ind = {0};
    ind.indent = 4;
    emit_row_coords(s, &ind);
    if (ind.data)
        kt_buf_printf(b, "%s", ind.data);
    if (body->data)
        kt_buf_printf(b, "%s", body->data);
    kt_buf_printf(b, "}\n");
    if (kt_buf_status(body) < 0 || kt_buf_status(&ind) < 0)
        b->oom = true;
    kt_buf_free(body);
    kt_buf_free(&ind);
}

/* Kernel `level` of split_row (level n_levels + 1: the output kernel). */
static void emit_split_kernel(rw_gen *s, kt_buf *b, const char *entry, int level,
                              ops_kernel_launch *k)
{
    const rw_info *in = s->in;
    const rw_plan *p = s->p;
    emit_signature(s, b, entry, true, k);
    kt_buf body = {0};
    body.indent = 4;
    s->use_o = s->use_in = false;
    emit_row_setup(s, &body);
    for (int q = 1; q < level && q <= in->n_levels; q++)
        emit_combine(s, &body, q);
    if (level <= in->n_levels) {
        rw_acc accs[RW_MAX_SLOTS];
        int n = level_accs(in, level, accs);
        kt_buf_line(&body, "/* level %d: this chunk's partial */", level);
        emit_pass(s, &body, level, accs, n);
        emit_group_reduce(s, &body, accs, n);
        kt_buf_line(&body, "if (threadIdx.x == 0) {");
        body.indent += 4;
        kt_buf_line(&body, "float *part = ws + %lld + (row * %d + sp) * %d;",
                    (long long)ws_level_offset(in, p, level), p->S, level_components(in, level));
        int c0 = 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < kind_components(accs[i].kind); c++, c0++) {
                char own[32];
                acc_comp(own, sizeof(own), &accs[i], c, "");
                kt_buf_line(&body, "part[%d] = %s;", c0, own);
            }
        body.indent -= 4;
        kt_buf_line(&body, "}");
    } else {
        if (in->full_out) {
            kt_buf_line(&body, "/* this chunk of the outputs */");
            emit_pass(s, &body, level, NULL, 0);
        }
        emit_row_outputs(s, &body, "sp == 0 && threadIdx.x == 0");
    }
    kt_buf_line(b, "    float *const ws = static_cast<float *>(workspace);");
    emit_chunk_kernel_end(s, b, &body);
}

/* The one kernel of split_cluster: per level, each block's partial of its chunk goes to its
 * kt_part[], a cluster barrier, and every block combines the S partials in chunk order; then the
 * outputs of its chunk. */
static void emit_cluster_kernel(rw_gen *s, kt_buf *b, const char *entry, ops_kernel_launch *k)
{
    const rw_info *in = s->in;
    emit_signature(s, b, entry, false, k);
    kt_buf body = {0};
    body.indent = 4;
    s->use_o = s->use_in = false;
    emit_row_setup(s, &body);
    for (int q = 1; q <= in->n_levels; q++) {
        rw_acc accs[RW_MAX_SLOTS];
        int n = level_accs(in, q, accs);
        kt_buf_line(&body, "{ /* level %d: this chunk's partial, for the cluster */", q);
        body.indent += 4;
        emit_pass(s, &body, q, accs, n);
        emit_group_reduce(s, &body, accs, n);
        kt_buf_line(&body, "if (threadIdx.x == 0) {");
        body.indent += 4;
        int c0 = 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < kind_components(accs[i].kind); c++, c0++) {
                char own[32];
                acc_comp(own, sizeof(own), &accs[i], c, "");
                kt_buf_line(&body, "kt_part[%d] = %s;", cluster_part_offset(in, q) + c0, own);
            }
        body.indent -= 4;
        kt_buf_line(&body, "}");
        body.indent -= 4;
        kt_buf_line(&body, "}");
        kt_buf_line(&body, "kt_cluster_sync(); /* every chunk's level-%d partial is in place */",
                    q);
        emit_combine(s, &body, q);
    }
    kt_buf_line(&body, "kt_cluster_sync(); /* every block has read the partials it needs from the "
                       "others: none exits before */");
    if (in->full_out) {
        kt_buf_line(&body, "/* this chunk of the outputs */");
        emit_pass(s, &body, in->n_levels + 1, NULL, 0);
    }
    emit_row_outputs(s, &body, "sp == 0 && threadIdx.x == 0");
    kt_buf_line(b, "    __shared__ float kt_part[%d]; /* this chunk's partial of every level */",
                cluster_part_offset(in, in->n_levels + 1));
    emit_chunk_kernel_end(s, b, &body);
}

/* ---- family entry points ---- */

/* The dot-product function of each matmul prologue: element (row, col) of X, the K products
 * summed by FFMA into four partial sums in a fixed order (deterministic, fp32 throughout). */
static void emit_mm_functions(const rw_info *in, kt_buf *b)
{
    const ops_graph *g = in->g;
    for (int u = 0; u < in->n_slots; u++) {
        if (!in->mm[u])
            continue;
        const ops_node *n = slot_node(in, u);
        const ops_tensor *ta = &g->tensors[n->in[0].tensor], *tb = &g->tensors[n->in[1].tensor];
        int64_t M = in->X.d[0].size, N = in->X.d[1].size;
        int64_t K = ta->shape.d[n->attrs.transpose_a ? 0 : 1].size;
        /* element strides of A along (row, k) and of B along (k, col) */
        int64_t ar = n->attrs.transpose_a ? 1 : K, ak = n->attrs.transpose_a ? M : 1;
        int64_t bk = n->attrs.transpose_b ? 1 : N, bc = n->attrs.transpose_b ? K : 1;
        char cx[OPS_EMIT_COMMENT_MAX], ca[OPS_EMIT_COMMENT_MAX], cb[OPS_EMIT_COMMENT_MAX];
        kt_buf_line(b,
                    "/* %s = matmul(%s, %s): one element of the row, %lld products in four "
                    "partial sums */",
                    ops_emit_comment_text(g->tensors[in->tensor[u]].name, cx, sizeof(cx)),
                    ops_emit_comment_text(ta->name, ca, sizeof(ca)),
                    ops_emit_comment_text(tb->name, cb, sizeof(cb)), (long long)K);
        kt_buf_line(b,
                    "__device__ __forceinline__ float kt_mm%d(const %s *__restrict__ a, "
                    "const %s *__restrict__ bm, long long row, long long col)",
                    u, ops_emit_ctype(ta->dtype), ops_emit_ctype(tb->dtype));
        /* Four partial sums (k mod 4, each in order, added in a fixed order) and 16 steps
         * unrolled: the operands come from L2, so loads must be in flight together. */
        int64_t K4 = K / 4 * 4;
        kt_buf_line(b, "{");
        kt_buf_line(b, "    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};");
        kt_buf_line(b, "    #pragma unroll 4");
        kt_buf_line(b, "    for (int k0 = 0; k0 < %lld; k0 += 4)", (long long)K4);
        kt_buf_line(b, "        #pragma unroll");
        kt_buf_line(b, "        for (int i = 0; i < 4; i++) {");
        kt_buf_line(b, "            const int k = k0 + i;");
        kt_buf a_ld = {0}, b_ld = {0}, ae = {0}, be = {0};
        kt_buf_printf(&a_ld, "a[row * %lld + k * %lld]", (long long)ar, (long long)ak);
        kt_buf_printf(&b_ld, "bm[k * %lld + col * %lld]", (long long)bk, (long long)bc);
        ops_emit_to_float(&ae, ta->dtype, a_ld.data ? a_ld.data : "0");
        ops_emit_to_float(&be, tb->dtype, b_ld.data ? b_ld.data : "0");
        kt_buf_line(b, "            acc[i] = fmaf(%s, %s, acc[i]);", ae.data ? ae.data : "0",
                    be.data ? be.data : "0");
        kt_buf_line(b, "        }");
        if (K4 < K) {
            kt_buf_line(b, "    for (int k = %lld; k < %lld; k++) /* the last K %% 4 */",
                        (long long)K4, (long long)K);
            kt_buf_line(b, "        acc[k - %lld] = fmaf(%s, %s, acc[k - %lld]);", (long long)K4,
                        ae.data ? ae.data : "0", be.data ? be.data : "0", (long long)K4);
        }
        if (kt_buf_status(&a_ld) < 0 || kt_buf_status(&b_ld) < 0 || kt_buf_status(&ae) < 0 ||
            kt_buf_status(&be) < 0)
            b->oom = true;
        kt_buf_free(&a_ld);
        kt_buf_free(&b_ld);
        kt_buf_free(&ae);
        kt_buf_free(&be);
        kt_buf_line(b, "    return (acc[0] + acc[1]) + (acc[2] + acc[3]);");
        kt_buf_line(b, "}");
    }
}

static bool row_matches(const ops_group *grp)
{
    rw_info *in = malloc(sizeof(*in));
    if (!in)
        return false;
    bool ok = rw_analyse(grp, false, in);
    free(in);
    return ok;
}

static const char *row_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev)
{
    rw_info *in = malloc(sizeof(*in));
    rw_plan *p = malloc(sizeof(*p));
    const char *why = "shape";
    if (in && p && rw_analyse(grp, s->v[K_PASS] == PASS_ONE, in))
        why = rw_plan_of(in, s, dev, false, p);
    free(in);
    free(p);
    return why;
}

static int row_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                    ops_emitted *out, ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    const ops_graph *g = grp->g;
    int rc = -ENOMEM;
    rw_info *in = malloc(sizeof(*in));
    rw_plan *p = malloc(sizeof(*p));
    kt_buf b = {0}, kern = {0};
    if (!in || !p)
        goto fail;
    rc = -EINVAL;
    if (!rw_analyse(grp, s->v[K_PASS] == PASS_ONE, in)) {
        ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "", "row: the group is not a row reduction");
        goto fail;
    }
    const char *why = rw_plan_of(in, s, dev, false, p);
    if (why) {
        ops_diag_set(d, g, OPS_RULE_SHAPE, -1, "", "row: schedule is pruned for this group (%s)",
                     why);
        goto fail;
    }
    rw_gen gen = {.in = in, .p = p, .ix = in->wide ? "long long" : "int"};
    gen.split = p->strategy == ST_SPLIT || p->strategy == ST_CLUSTER;
    char sname[16];
    snprintf(sname, sizeof(sname), "%s", strategy_labels[p->strategy]);
    if (p->strategy == ST_CLUSTER) {
        ops_kernel_launch *k = &out->kernels[0];
        snprintf(k->entry, sizeof(k->entry), "ktune_row_split_cluster_t%d_%s_v%d%s", p->threads,
                 p->pass == PASS_ONE ? "one" : "multi", p->vec, grp->entry_suffix);
        ops_emit_cluster_helpers(&kern);
        kt_buf_printf(&kern,
                      "\n/* %lld rows of %lld elements, %d chunks of %lld per row, a cluster "
                      "per row */\n",
                      (long long)in->n_rows, (long long)in->L, p->S, (long long)p->chunk);
        emit_cluster_kernel(&gen, &kern, k->entry, k);
        k->grid[0] = (uint32_t)p->grid;
        k->grid[1] = k->grid[2] = 1;
        k->block[0] = (uint32_t)p->threads;
        k->block[1] = k->block[2] = 1;
        out->n_kernels = 1;
    } else if (!gen.split) {
        ops_kernel_launch *k = &out->kernels[0];
        snprintf(k->entry, sizeof(k->entry), "ktune_row_%s_t%d_r%d_%s%s_v%d%s", sname, p->threads,
                 p->rows, p->pass == PASS_ONE ? "one" : "multi",
                 p->storage == STO_REGS     ? "_reg"
                 : p->storage == STO_SHARED ? "_smem"
                                            : "_reread",
                 p->vec, grp->entry_suffix);
        kt_buf_printf(&kern,
                      "\n/* %lld rows of %lld elements (stride %lld); %d row%s per block, "
                      "%d thread%s per row */\n",
                      (long long)in->n_rows, (long long)in->L, (long long)in->inner,
                      (int)p->rows_per_block, p->rows_per_block > 1 ? "s" : "", p->tpr,
                      p->tpr > 1 ? "s" : "");
        emit_fused_kernel(&gen, &kern, k->entry, k);
        k->grid[0] = (uint32_t)p->grid;
        k->grid[1] = k->grid[2] = 1;
        k->block[0] = (uint32_t)p->threads;
        k->block[1] = k->block[2] = 1;
        k->smem_bytes = (uint32_t)p->smem;
        out->n_kernels = 1;
    } else {
        int n_k = in->n_levels + 1;
        for (int lvl = 1; lvl <= n_k; lvl++) {
            ops_kernel_launch *k = &out->kernels[lvl - 1];
            snprintf(k->entry, sizeof(k->entry), "ktune_row_split_t%d_%s_v%d_k%d%s", p->threads,
                     p->pass == PASS_ONE ? "one" : "multi", p->vec, lvl, grp->entry_suffix);
            kt_buf_printf(&kern,
                          "\n/* kernel %d of %d: %lld rows of %lld elements, %d chunks "
                          "of %lld per row; %s */\n",
                          lvl, n_k, (long long)in->n_rows, (long long)in->L, p->S,
                          (long long)p->chunk,
                          lvl <= in->n_levels ? "partial reductions into the workspace"
                                              : "combine and write the outputs");
            emit_split_kernel(&gen, &kern, k->entry, lvl, k);
            bool rows_only = lvl > in->n_levels && !in->full_out;
            k->grid[0] = (uint32_t)(rows_only ? in->n_rows * p->S : p->grid);
            k->grid[1] = k->grid[2] = 1;
            k->block[0] = (uint32_t)p->threads;
            k->block[1] = k->block[2] = 1;
        }
        out->n_kernels = n_k;
        out->workspace_bytes = ws_level_offset(in, p, in->n_levels + 1) * 4;
    }
    ops_emit_header(&b, grp, s);
    ops_emit_shared_prelude(&b, out);
    ops_emit_vec_types(&b, gen.vec_types);
    emit_mm_functions(in, &b);
    if (kern.data)
        kt_buf_printf(&b, "%s", kern.data);
    if (kt_buf_status(&b) < 0 || kt_buf_status(&kern) < 0) {
        rc = -ENOMEM;
        goto fail;
    }
    out->source = kt_buf_take(&b);
    kt_buf_free(&kern);
    free(in);
    free(p);
    return 0;
fail:
    if (rc == -ENOMEM)
        ops_diag_set(d, g, OPS_RULE_NONE, -1, "", "row: out of memory");
    kt_buf_free(&b);
    kt_buf_free(&kern);
    free(in);
    free(p);
    memset(out, 0, sizeof(*out));
    return rc;
}

/* Roofline with an efficiency from bytes in flight per busy SM (Little's law: ~32 KiB per SM
 * saturates HBM), capped per SM (one SM draws at most about twice its share of the bandwidth),
 * against a critical path: each block walks its rows in sequence, every pass costing a memory
 * latency plus the row's bytes at the block's share of its SM. Extra passes re-read from L2
 * (counted at 30% of a DRAM read) unless the row is kept on chip; split_row's kernels each read
 * their chunk again and pay a launch each. */
static void row_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                         ops_estimate *e)
{
    memset(e, 0, sizeof(*e));
    rw_info *in = malloc(sizeof(*in));
    rw_plan *p = malloc(sizeof(*p));
    if (!in || !p || !rw_analyse(grp, s->v[K_PASS] == PASS_ONE, in))
        goto done;
    /* A split the pruner drops as pointless (many rows) is still estimated, as two chunks, so
     * that callers can compare it. */
    if (rw_plan_of(in, s, dev, true, p) != NULL && (p->nk == 0 || p->grid == 0))
        goto done;
    const ops_graph *g = grp->g;
    const double latency = 0.8e-6, launch = 1.5e-6;
    double in_bytes = 0, out_bytes = 0, row_in_bytes = 0, row_out_bytes = 0, flops = 0;
    for (int u = 0; u < grp->n_in; u++) {
        const ops_tensor *t = &g->tensors[grp->in[u]];
        in_bytes += (double)ops_shape_numel(&t->shape) * (double)ops_dtype_size(t->dtype);
        if (in->cls[u] == CL_FULL)
            row_in_bytes += (double)ops_dtype_size(t->dtype);
    }
    for (int i = 0; i < grp->n_out; i++) {
        const ops_tensor *t = &g->tensors[grp->out[i]];
        out_bytes += (double)ops_shape_numel(&t->shape) * (double)ops_dtype_size(t->dtype);
        if (in->cls[slot_of(in, grp->out[i])] == CL_FULL)
            row_out_bytes += (double)ops_dtype_size(t->dtype);
    }
    double elems = (double)in->n_rows * (double)in->L;
    for (int u = grp->n_in; u < in->n_slots; u++)
        flops += (in->cls[u] == CL_FULL || is_reduce(slot_node(in, u)->op) ? elems : in->n_rows) *
                 (slot_node(in, u)->op == OPS_EXP ? 8 : 2);
    int passes = in->n_levels + (in->full_out ? 1 : 0);
    /* A matmul prologue: its K-long dot products, computed once when the row is kept on chip
     * and by every pass otherwise; four FFMA chains fed from L2 (~2.4 ns a step, measured order
     * of magnitude) on each element a thread walks. */
    double mm_k = 0;
    for (int u = grp->n_in; u < in->n_slots; u++) {
        if (!in->mm[u])
            continue;
        const ops_node *n = slot_node(in, u);
        const ops_shape *as = &g->tensors[n->in[0].tensor].shape;
        double K = (double)as->d[n->attrs.transpose_a ? 0 : 1].size;
        int computed = p->cached[u] ? 1 : passes;
        flops += 2.0 * K * elems * computed;
        mm_k += K * computed;
    }
    bool split = p->strategy == ST_SPLIT || p->strategy == ST_CLUSTER;
    bool cluster = p->strategy == ST_CLUSTER;
    int kernels = split && !cluster ? in->n_levels + 1 : 1;
    double reread = 0;
    if (split && !cluster)
        reread = (passes - 1) * elems * row_in_bytes;
    else if (cluster) /* the chunk read again right away: mostly L2 */
        reread = 0.3 * (passes - 1) * elems * row_in_bytes;
    else if (p->n_cached == 0)
        reread = 0.3 * (passes - 1) * elems * row_in_bytes;
    double ws =
        split && !cluster ? 2.0 * (double)ws_level_offset(in, p, in->n_levels + 1) * 4 * p->S : 0;
    double bytes = in_bytes + out_bytes + reread + ws;
    /* Strided rows read by several threads along the row touch a sector per element. */
    if (in->inner > 1 && p->tpr > 1 && p->strategy != ST_LANE)
        bytes += elems * row_in_bytes * (in->inner >= 8 ? 7 : (double)in->inner - 1);

    int regs = p->regs > 0 ? p->regs : 64;
    int bps = dev->regs_per_sm / (regs * p->threads);
    int by_threads = dev->max_threads_per_sm / p->threads;
    bps = bps < by_threads ? bps : by_threads;
    if (p->smem > 0) {
        int by_smem = (int)(dev->smem_per_sm / (p->smem + 1024));
        bps = bps < by_smem ? bps : by_smem;
    }
    bps = bps < dev->max_blocks_per_sm ? bps : dev->max_blocks_per_sm;
    bps = bps < 1 ? 1 : bps;
    double sms = p->grid < dev->sm_count ? (double)p->grid : dev->sm_count;
    double resident = (double)p->grid / sms;
    resident = resident < bps ? resident : bps;
    int ilp =
        p->storage == STO_REGS && p->n_cached ? (p->nk < 8 ? p->nk : 8) : (p->nk < 4 ? p->nk : 4);
    double inflight = resident * p->threads * row_in_bytes * p->vec * ilp;
    double bw_eff = inflight / 32768.0;
    bw_eff = bw_eff < 1 ? bw_eff : 1;
    double waves = (double)p->grid / ((double)bps * dev->sm_count);
    double rounds = waves <= 1 ? 1 : (double)(int64_t)(waves + 0.999999);
    double wave_eff = waves <= 1 ? 1 : waves / rounds;
    double per_sm = 2.0 * dev->dram_bytes_per_s / dev->sm_count;
    double bw = sms * per_sm * bw_eff * wave_eff;
    bw = bw < dev->dram_bytes_per_s * wave_eff ? bw : dev->dram_bytes_per_s * wave_eff;
    double t_mem = bytes / (bw > 0 ? bw : 1);
    double t_math = flops / (dev->fp32_flops_per_s * (sms / dev->sm_count));
    /* The critical path of one block (per kernel for split_row). */
    double share = per_sm / resident;
    double t_path;
    if (split) {
        double chunk_in = (double)p->chunk * row_in_bytes;
        t_path = in->n_levels * (latency + chunk_in / share) +
                 (latency + (double)p->chunk * (row_in_bytes + row_out_bytes) / share);
        if (cluster) /* a cluster barrier and a round of DSMEM reads per level: on the H100
                        softmax 16 x 16384 took 6.6 us (CUDA events) against split_row's 9.4 */
            t_path += in->n_levels * 0.5e-6;
    } else {
        double row_bytes = (double)in->L * (row_in_bytes + row_out_bytes);
        if (p->n_cached == 0)
            row_bytes += (passes - 1) * (double)in->L * row_in_bytes * 0.3;
        double sync = rw_partials(p) ? in->n_levels * 0.1e-6 : 0;
        double mm_chain = (double)p->nk * p->vec * mm_k * 2.4e-9;
        t_path = p->rseq * (passes * latency + sync + row_bytes / share + mm_chain);
    }
    t_path *= rounds;
    double t = t_mem > t_math ? t_mem : t_math;
    t = t > t_path ? t : t_path;
    e->seconds = t + launch * kernels;
    e->bytes = bytes;
    e->flops = flops;
    double occ = resident * p->threads * (sms / dev->sm_count) / dev->max_threads_per_sm;
    e->occupancy = occ > 1 ? 1 : occ;
done:
    free(in);
    free(p);
}

const ops_family ops_family_row = {
    .id = OPS_FAM_ROW,
    .name = "row",
    .n_knobs = N_KNOBS,
    .knobs = row_knobs,
    .matches = row_matches,
    .prune = row_prune,
    .emit = row_emit,
    .estimate = row_estimate,
};
