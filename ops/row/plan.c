/* row family: knobs; a schedule resolved against the group and pruned (row_plan_of): threads per
 * row, rows per block, splits, storage, registers, shared memory (ops/row/row.h lists the files).
 */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const row_strategy_labels[] = {"warp_per_row", "block_per_row",  "rows_per_block",
                                           "split_row",    "thread_per_row", "lane_per_row",
                                           "split_cluster", "split_lane"};
static const char *const pass_labels[] = {"multi_pass", "one_pass"};
static const char *const storage_labels[] = {"registers", "shared", "re_read"};

const ops_knob row_knobs[N_KNOBS] = {
    [K_STRATEGY] = {"strategy",
                    8,
                    {ST_WARP, ST_BLOCK, ST_ROWS, ST_SPLIT, ST_THREAD, ST_LANE, ST_CLUSTER,
                     ST_SPLIT_LANE},
                    row_strategy_labels},
    [K_THREADS] = {"threads", 6, {32, 64, 128, 256, 512, 1024}, NULL},
    [K_ROWS] = {"rows", 4, {1, 2, 4, 8}, NULL},
    [K_PASS] = {"pass", 2, {PASS_MULTI, PASS_ONE}, pass_labels},
    [K_STORAGE] = {"storage", 3, {STO_REGS, STO_SHARED, STO_REREAD}, storage_labels},
    [K_VEC] = {"vec", 4, {1, 2, 4, 8}, NULL}, /* 8: 16-byte accesses of 16-bit data */
};

bool row_lanes(const rw_plan *p)
{
    return p->strategy == ST_LANE || p->strategy == ST_SPLIT_LANE;
}

bool row_split_ws(const rw_plan *p)
{
    return p->strategy == ST_SPLIT || p->strategy == ST_SPLIT_LANE;
}

/* Floats between the rows kept in shared memory: odd for lane_per_row, whose lanes read 32
 * different rows at the same element (an even stride would put them on few banks). */
int64_t row_smem_stride(const rw_plan *p, int64_t L)
{
    return p->strategy == ST_LANE ? L | 1 : L;
}

/* Per-row partials that meet in shared memory (kt_red): one per warp of a row above a warp
 * (after the shuffles), one per thread of a row for lane_per_row (no shuffles: a warp's lanes
 * hold different rows), none otherwise. */
int row_partials(const rw_plan *p)
{
    if (row_lanes(p))
        return p->tpr;
    return p->tpr > 32 ? p->tpr / 32 : 0;
}

static int reg_limit(const ops_device *dev, int threads)
{
    int lim = dev->regs_per_sm / threads;
    lim = lim > dev->max_regs_per_thread ? dev->max_regs_per_thread : lim;
    return lim & ~7;
}

/* Chunks a row is cut into so that blocks (groups of them before the cut) fill the SMs: about a
 * wave of `threads`-thread blocks at full occupancy, at least two blocks a SM (a long row is
 * read at the copy bandwidth only with that much in flight), each chunk at least span elements
 * (a trip of the row's threads). The later kernels fold the chunks' partials in parallel (ops/row/split.c),
 * so a thousand cost a few loads a thread. */
static int splits_for(const rw_info *in, const ops_device *dev, int64_t groups, int threads,
                      int64_t span, int vec, int64_t *chunk)
{
    int per_sm = dev->max_threads_per_sm / threads;
    per_sm = per_sm < dev->max_blocks_per_sm ? per_sm : dev->max_blocks_per_sm;
    int64_t twice = (2LL * dev->sm_count + groups - 1) / groups; /* the old rule's floor */
    int64_t S = (int64_t)dev->sm_count * per_sm / groups; /* rounded down: no part-empty wave */
    S = S > twice ? S : twice;
    int64_t most = in->L / span;
    S = S > most ? most : S;
    S = S > RW_MAX_SPLITS ? RW_MAX_SPLITS : S;
    S = S < 1 ? 1 : S;
    int64_t c = (in->L + S - 1) / S;
    c = (c + vec - 1) / vec * vec;
    *chunk = c;
    return (int)((in->L + c - 1) / c);
}

/* Resolves s against the group; returns NULL or the prune reason. */
const char *row_plan_of(const rw_info *in, const ops_schedule *s, const ops_device *dev,
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
        /* Fewer threads than a warp on a row (several rows a warp, reduced by shuffles within
         * each aligned group of tpr lanes): for contiguous rows too short to give a warp four
         * trips of 16-byte loads, where a warp a row keeps too few bytes in flight (1M rows of
         * 64 bf16: 2 bytes a thread). */
        if (p->tpr < dev->warp_size &&
            (p->tpr < 4 || in->inner != 1 || in->L >= 4LL * dev->warp_size * (16 / in->max_bytes)))
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
    case ST_SPLIT_LANE:
        if (in->inner == 1)
            return "shape"; /* contiguous rows: split_row */
        if (p->rows != 1 || p->storage != STO_REREAD)
            return "redundant";
        p->tpr = p->threads / dev->warp_size; /* 32 threads: a lane a row, one block per chunk */
        if (p->tpr < 1)
            return "threads";
        p->G = dev->warp_size;
        p->rseq = 1;
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
    if (p->strategy == ST_SPLIT || p->strategy == ST_CLUSTER || p->strategy == ST_SPLIT_LANE) {
        int64_t groups = p->strategy == ST_SPLIT_LANE ? (in->n_rows + p->G - 1) / p->G : in->n_rows;
        p->S = splits_for(in, dev, groups, p->threads, (int64_t)p->tpr * p->vec, p->vec,
                          &p->chunk);
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
        if (row_split_ws(p) && in->n_levels + 1 > OPS_MAX_KERNELS)
            return "shape";
        if (p->strategy == ST_SPLIT_LANE && p->tpr > 1 && p->tpr / 2 >= p->chunk)
            return "shape"; /* more than half the warps idle */
    }
    /* More than half the threads of a row idle. */
    if (p->tpr > dev->warp_size && (int64_t)(p->tpr / 2) * p->vec >= p->chunk)
        return "shape";
    p->nk = (int)((p->chunk + (int64_t)p->tpr * p->vec - 1) / ((int64_t)p->tpr * p->vec));
    p->rows_per_block = (int64_t)p->G * p->rseq;
    p->grid = p->strategy == ST_SPLIT || p->strategy == ST_CLUSTER
                  ? in->n_rows * p->S
                  : (in->n_rows + p->rows_per_block - 1) / p->rows_per_block *
                        (p->strategy == ST_SPLIT_LANE ? p->S : 1);
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
        row_pass_reads(in, pp, reads);
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
        int c = row_level_components(in, q);
        p->red_floats = c > p->red_floats ? c : p->red_floats;
    }
    if (p->storage == STO_SHARED)
        p->smem = (int64_t)p->G * p->n_cached * row_smem_stride(p, in->L) * 4;
    int64_t static_smem = (int64_t)p->G * row_partials(p) * p->red_floats * 4;
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
