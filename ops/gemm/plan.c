/* gemm family: the knobs, the problem (gemm_analyse), the schedule resolved and pruned
 * (gemm_configure) (ops/gemm/gemm.h lists the files). */
#include "gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const math_labels[] = {"ffma", "tf32", "f16", "bf16", "tf32x3"};
static const char *const smem_labels[] = {"pad", "xor"};
/* by position in the knob's value list (cluster between the other two: refinement moves one
 * step, so from cluster it tries both; stream, splitk=1's alternative, last: the cost model
 * ranks it beside its data-parallel twin) */
static const char *const splitk_mode_labels[] = {"parallel", "cluster", "serial", "stream"};
static const char *const mma_labels[] = {"sync", "wgmma", "wgmma_split", "wgmma_pingpong"};
static const char *const store_labels[] = {"direct", "tma"};

const ops_knob gemm_knobs[KN_COUNT] = {
    [KN_MATH] = {"math", 5, {MATH_FFMA, MATH_TF32, MATH_F16, MATH_BF16, MATH_TF32X3}, math_labels},
    [KN_BM] = {"bm", 5, {16, 32, 64, 128, 256}, NULL},
    [KN_BN] = {"bn", 5, {16, 32, 64, 128, 256}, NULL},
    [KN_BK] = {"bk", 4, {8, 16, 32, 64}, NULL},
    [KN_WM] = {"wm", 3, {1, 2, 4}, NULL}, /* warps along m (16-bit wgmma: consumer warpgroups) */
    [KN_WN] = {"wn", 3, {1, 2, 4}, NULL}, /* warps along n */
    /* pipeline stages: cp.async kernels 2-4; the 16-bit TMA kernel also 6 and 8, which keep more
     * bytes in flight where few blocks stream long k loops (small tiles, few tiles) */
    [KN_STAGES] = {"stages", 5, {2, 3, 4, 6, 8}, NULL},
    [KN_SPLITK] = {"splitk", 4, {1, 2, 4, 8}, NULL}, /* split-K slices */
    [KN_RASTER] = {"raster", 3, {1, 4, 8}, NULL},    /* tile-rows per raster group */
    [KN_SMEM] = {"smem", 2, {SMEM_PAD, SMEM_XOR}, smem_labels},
    /* parallel: fp32 partials per slice + a reduction kernel; serial: one kernel, the slices of
     * a tile accumulate in turn (see gemm_emit_serial_epilogue); cluster: one kernel, the slices of
     * a tile are a cluster summing through distributed shared memory (gemm_emit_cluster_epilogue).
     * Meaningless with splitk=1, except stream (splitk=1, the 16-bit wgmma kernel): stream-K, the
     * k tiles of the last units shared out evenly over the persistent grid, whatever the split
     * of each unit (wgmma16.c). */
    [KN_SPLITK_MODE] = {"splitk_mode",
                        4,
                        {SPLITK_PARALLEL, SPLITK_CLUSTER, SPLITK_SERIAL, SPLITK_STREAM},
                        splitk_mode_labels},
    /* tensor-core instruction: warp-level mma.sync, or Hopper's warpgroup wgmma: tf32x3 on f32
     * data (gemm_emit_wgmma_kernel: bm is the wgmma N, bn 64 rows per warpgroup), f16/bf16 on
     * 16-bit data (gemm_emit_wgmma16_kernel: TMA loads, a producer warpgroup and wm consumer
     * warpgroups, bk 64) */
    /* wgmma_split: A's small halves computed once by a first kernel into the workspace and
     * copied by cp.async like A, instead of a pass over each A tile in the kernel;
     * wgmma_pingpong (16-bit data): two consumer warpgroups, each its own bm x bn tile, taking
     * turns on the tensor cores so one's epilogue overlaps the other's k loop */
    [KN_MMA] = {"mma", 4, {MMA_SYNC, MMA_WGMMA, MMA_WGMMA_SPLIT, MMA_WGMMA_PINGPONG}, mma_labels},
    /* 16-bit wgmma: 2 = a cluster of two blocks on vertically adjacent tiles, each loading half
     * of their common B tile for both (TMA multicast): B's L2 reads halved */
    [KN_MCAST] = {"mcast", 2, {1, 2}, NULL},
    /* 16-bit wgmma: direct = each thread stores its sums' results to global memory; tma = they
     * go to a tile in shared memory (the 128-byte swizzle) that one thread stores by TMA
     * (coalesced, clipped at the edges), at the cost of shared memory the ring cannot use */
    [KN_STORE] = {"store", 2, {STORE_DIRECT, STORE_TMA}, store_labels},
};

bool gemm_in_group(const ops_group *grp, int node)
{
    return node >= 0 && (grp->mask >> node & 1);
}

static void batch_of(const ops_shape *s, ops_shape *out)
{
    *out = *s;
    out->rank = s->rank - 2;
}

/* The second matmul of a dual group pairs with the first: the same A (no prologue), the same
 * transposes, B2 with B's shape and dtype, the same result shape and dtype. */
static bool dual_pairs(const ops_group *grp, const ops_node *mm, const ops_node *mm2)
{
    const ops_graph *g = grp->g;
    const ops_tensor *b = &g->tensors[mm->in[1].tensor], *b2 = &g->tensors[mm2->in[1].tensor];
    const ops_tensor *o = &g->tensors[mm->out], *o2 = &g->tensors[mm2->out];
    for (int k = 0; k < 2; k++)
        if (gemm_in_group(grp, g->tensors[mm->in[k].tensor].producer) ||
            gemm_in_group(grp, g->tensors[mm2->in[k].tensor].producer))
            return false;
    return mm->in[0].tensor == mm2->in[0].tensor &&
           mm->attrs.transpose_a == mm2->attrs.transpose_a &&
           mm->attrs.transpose_b == mm2->attrs.transpose_b && b->dtype == b2->dtype &&
           ops_shape_same_sizes(&b->shape, &b2->shape) && o->dtype == o2->dtype &&
           ops_shape_same_sizes(&o->shape, &o2->shape);
}

/* 0 when grp is a matmul with a cast prologue on its operands and an elementwise epilogue whose
 * every node has the matmul's output shape, or a dual group (two matmuls of one A whose results
 * the epilogue combines, see gemm_problem); -EINVAL otherwise. */
int gemm_analyse(const ops_group *grp, gemm_problem *p)
{
    const ops_graph *g = grp->g;
    memset(p, 0, sizeof(*p));
    p->grp = grp;
    p->g = g;
    p->mm = p->mm2 = p->cast[0] = p->cast[1] = -1;
    p->nb = 1;
    if (grp->n_out != 1)
        return -EINVAL;
    for (int i = 0; i < grp->n_nodes; i++) {
        if (g->nodes[grp->nodes[i]].op != OPS_MATMUL)
            continue;
        if (p->mm2 >= 0)
            return -EINVAL;
        if (p->mm >= 0)
            p->mm2 = grp->nodes[i];
        else
            p->mm = grp->nodes[i];
    }
    if (p->mm < 0)
        return -EINVAL;
    const ops_node *mm = &g->nodes[p->mm];
    const ops_tensor *mo = &g->tensors[mm->out];
    if (p->mm2 >= 0) {
        if (!dual_pairs(grp, mm, &g->nodes[p->mm2]))
            return -EINVAL;
        p->nb = 2;
        p->src[2] = g->nodes[p->mm2].in[1].tensor;
        p->src_dt[2] = g->tensors[p->src[2]].dtype;
    }
    for (int k = 0; k < 2; k++) {
        int t = mm->in[k].tensor;
        if (t < 0)
            return -EINVAL;
        int prod = g->tensors[t].producer;
        if (gemm_in_group(grp, prod)) {
            const ops_node *c = &g->nodes[prod];
            int ct = c->in[0].tensor;
            if (c->op != OPS_CAST || ct < 0 || gemm_in_group(grp, g->tensors[ct].producer))
                return -EINVAL;
            p->cast[k] = prod;
            t = ct;
        }
        p->src[k] = t;
        p->src_dt[k] = g->tensors[t].dtype;
    }
    /* Every other node extends the chain of values derived from the matmul(s); it may also read
     * group inputs (broadcast into the output shape) and scalars, never a prologue cast. In a
     * dual group the output derives from both matmuls (from[] marks which each value does). */
    uint64_t chain = 1ull << p->mm;
    unsigned char from[OPS_GROUP_MAX_NODES] = {0}; /* node indices are below 64 (masks) */
    from[p->mm] = 1;
    if (p->mm2 >= 0) {
        chain |= 1ull << p->mm2;
        from[p->mm2] = 2;
    }
    for (int i = 0; i < grp->n_nodes; i++) {
        int ni = grp->nodes[i];
        if (ni == p->mm || ni == p->mm2 || ni == p->cast[0] || ni == p->cast[1])
            continue;
        const ops_node *n = &g->nodes[ni];
        if (!ops_is_elementwise(n->op) ||
            !ops_shape_same_sizes(&g->tensors[n->out].shape, &mo->shape))
            return -EINVAL;
        bool from_chain = false;
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k].tensor;
            if (t == OPS_SCALAR || !gemm_in_group(grp, g->tensors[t].producer))
                continue;
            if (!(chain >> g->tensors[t].producer & 1))
                return -EINVAL;
            from[ni] |= from[g->tensors[t].producer];
            from_chain = true;
        }
        if (!from_chain)
            return -EINVAL;
        chain |= 1ull << ni;
        p->epi[p->n_epi++] = ni;
    }
    p->out = grp->out[0];
    int oprod = g->tensors[p->out].producer;
    if (!(chain >> oprod & 1) || (p->mm2 >= 0 && from[oprod] != 3))
        return -EINVAL;

    const ops_shape *as = &g->tensors[mm->in[0].tensor].shape;
    const ops_shape *bs = &g->tensors[mm->in[1].tensor].shape;
    if (as->rank < 2 || bs->rank < 2 || mo->shape.rank < 2)
        return -EINVAL;
    p->trans[0] = mm->attrs.transpose_a;
    p->trans[1] = mm->attrs.transpose_b;
    p->M = as->d[as->rank - (p->trans[0] ? 1 : 2)].size;
    p->K = as->d[as->rank - (p->trans[0] ? 2 : 1)].size;
    p->N = bs->d[bs->rank - (p->trans[1] ? 2 : 1)].size;
    p->oshape = mo->shape;
    batch_of(&mo->shape, &p->obatch);
    batch_of(as, &p->opb[0]);
    batch_of(bs, &p->opb[1]);
    p->opb[2] = p->opb[1];
    p->batch = 1;
    for (int i = 0; i < p->obatch.rank; i++)
        p->batch *= p->obatch.d[i].size;
    p->dt = mo->dtype;
    /* Degenerate or int32-overflowing matrix dims go to other families. */
    const int64_t lim = (int64_t)1 << 30;
    if (p->M <= 0 || p->N <= 0 || p->K <= 0 || p->batch <= 0 || p->M >= lim || p->N >= lim ||
        p->K >= lim)
        return -EINVAL;
    return 0;
}

int64_t gemm_cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Both tf32 paths: fp32 tiles in shared memory, m16n8k8 mma. */
bool gemm_is_tf32(int math)
{
    return math == MATH_TF32 || math == MATH_TF32X3;
}

static ops_dtype math_dtype(int math, ops_dtype dt)
{
    switch (math) {
    case MATH_F16:
        return OPS_DT_F16;
    case MATH_BF16:
        return OPS_DT_BF16;
    case MATH_TF32:
    case MATH_TF32X3:
        return OPS_DT_F32;
    default:
        return dt;
    }
}

/* Why the math path is not searched for the matmul's dtype, or NULL when it is. f16/bf16 data
 * runs on its own tensor cores ("shape" for the other 16-bit type or tf32); FFMA computes the
 * same products and sums, slower, so on 16-bit data it is kept only for skinny problems where
 * the 16-row mma tile is mostly padding ("redundant" otherwise). f32 data uses FFMA, tf32 under
 * the tf32 and reduced policies, and f16/bf16 tensor cores under reduced ("precision" when the
 * job's policy forbids the path). tf32x3 is as accurate as FFMA to within a small factor
 * (products to about 2^-22 relative, fp32 sums), so every policy may use it; the verification
 * against the fp64 reference holds it to the policy's tolerance like any other candidate. */
static const char *math_excluded(const gemm_problem *p, int math)
{
    ops_precision prec = p->grp->precision;
    if (p->dt == OPS_DT_F16 || p->dt == OPS_DT_BF16) {
        if (math == MATH_FFMA)
            return p->M < 16 || p->N < 16 ? NULL : "redundant";
        return math == (p->dt == OPS_DT_F16 ? MATH_F16 : MATH_BF16) ? NULL : "shape";
    }
    switch (math) {
    case MATH_FFMA:
    case MATH_TF32X3:
        return NULL;
    case MATH_TF32:
        return prec == OPS_PREC_TF32 || prec == OPS_PREC_REDUCED ? NULL : "precision";
    default:
        return prec == OPS_PREC_REDUCED ? NULL : "precision";
    }
}

/* A prologue cast that leaves values unchanged (to the dtype it reads). */
bool gemm_cast_is_identity(const gemm_problem *p, int k)
{
    return p->cast[k] < 0 || p->g->nodes[p->cast[k]].attrs.to == p->src_dt[k];
}

static void setup_operand(const gemm_problem *p, gemm_cfg *c, int k)
{
    gemm_operand *o = &c->op[k];
    int mn = k == 0 ? c->bm : c->bn;
    int64_t mn_size = k == 0 ? p->M : p->N;
    o->row_is_k = k == 0 ? p->trans[0] : !p->trans[1];
    o->R = o->row_is_k ? c->bk : mn;
    o->C = o->row_is_k ? mn : c->bk;
    o->rows = o->row_is_k ? p->K : mn_size;
    o->cols = o->row_is_k ? mn_size : p->K;
    int gsize = (int)ops_dtype_size(p->src_dt[k]);
    int64_t row_bytes = o->cols * gsize;
    o->vb = 0;
    if (p->src_dt[k] == c->sdt && gemm_cast_is_identity(p, k)) {
        for (int vb = 16; vb >= 4 && !o->vb; vb /= 2)
            if (row_bytes % vb == 0 && o->C * c->esize >= vb)
                o->vb = vb;
    }
    o->ve = o->vb ? o->vb / c->esize : (o->cols % 4 == 0 ? 4 : 1);
    /* tf32 fragments come element-wise from a tile stored with K as its row axis. */
    o->scalar_frag = gemm_is_tf32(c->math) && o->row_is_k;
    o->pad = c->smem == SMEM_PAD ? (o->scalar_frag ? 32 : 16) / c->esize : 0;
    o->stride = o->C + o->pad;
    o->stage = o->R * o->stride;
    o->iters = (int)gemm_cdiv((int64_t)o->R * o->C / o->ve, c->threads);
}

/* FFMA lane grid: ly x lx lanes (ly * lx = 32) covering the warp tile with the squarest thread
 * tile of at most 8 x 8. */
static bool ffma_lanes(gemm_cfg *c)
{
    int best = -1;
    for (int ly = 1; ly <= 32; ly *= 2) {
        int lx = 32 / ly;
        if (c->wtm % ly || c->wtn % lx)
            continue;
        int tm = c->wtm / ly, tn = c->wtn / lx;
        if (tm > 8 || tn > 8)
            continue;
        int score = abs(tm - tn);
        if (best < 0 || score < best) {
            best = score;
            c->ly = ly;
            c->lx = lx;
            c->tm = tm;
            c->tn = tn;
        }
    }
    return best >= 0;
}

static int knob_prev(int knob, int v)
{
    const ops_knob *kn = &gemm_knobs[knob];
    for (int i = 1; i < kn->n_values; i++)
        if (kn->values[i] == v)
            return kn->values[i - 1];
    return v;
}

/* A raster group that changes nothing: one wave, one tile column, or the same order as the
 * next smaller group. */
bool gemm_raster_redundant(const gemm_cfg *c, const ops_device *dev)
{
    return c->raster > 1 && (c->tiles_n == 1 || c->tiles_m * c->tiles_n <= dev->sm_count ||
                             knob_prev(KN_RASTER, c->raster) >= c->tiles_m);
}

/* The tf32x3 wgmma path (gemm_emit_wgmma_kernel) of a configured schedule: its shared memory
 * and registers, and its prune rules (the 16-bit one is wgmma16.c's). It exists for fp32 data
 * under tf32x3 only (where mma.sync
 * reaches half the tensor pipe at two warps per scheduler: 327 us for a 2048^3 matmul on the
 * H100), with A stored [M][K] and B [K][N] or [N][K] in 16-byte rows, one 128-byte swizzle atom of
 * k per tile (bk 32), and no split-K. */
/* The prune rules of the two kernels that read no knob after wn (see gemm_prune_prefix), the
 * mma.sync/FFMA kernel's cheapest and most telling first. */
const char *gemm_sync_prefix_why(const gemm_problem *p, const gemm_cfg *c, const ops_device *dev)
{
    int kmin = c->tc ? c->kstep : 8;
    if (p->nb == 2)
        return "shape"; /* a dual group is the 16-bit wgmma kernel's */
    if (dev->sm_major < 8)
        return "shape"; /* cp.async and mma.sync need sm_80 */
    if (math_excluded(p, c->math))
        return math_excluded(p, c->math);
    if (c->bk % kmin)
        return "divisibility";
    if ((c->bm > 16 && c->bm / 2 >= p->M) || (c->bn > 16 && c->bn / 2 >= p->N) ||
        (c->bk > kmin && c->bk / 2 >= p->K))
        return "shape"; /* a tile at least twice the matrix: the smaller one covers it */
    if (c->threads > dev->max_threads_per_block)
        return "threads";
    if (c->tc ? (c->wtm % 16 || c->wtn % 16) : !c->lanes_ok)
        return "divisibility";
    if (c->tc ? c->mi * c->ni * 4 > 128 : c->tm * c->tn > 64)
        return "regs"; /* accumulators alone would crowd out the rest */
    if (c->tc && c->wtm * c->wtn < 512)
        return "redundant"; /* a 16 x 16 warp tile re-reads shared memory for every mma */
    if (c->wtm > 4 * c->wtn || c->wtn > 4 * c->wtm)
        return "redundant"; /* a squarer warp tile of the same area reads less */
    return NULL;
}

const char *gemm_wgmma_prefix_why(const gemm_problem *p, const gemm_cfg *c, const ops_device *dev)
{
    if (c->math == MATH_F16 || c->math == MATH_BF16)
        return gemm_wgmma16_prefix_why(p, c, dev);
    bool f32 = p->src_dt[0] == OPS_DT_F32 && p->src_dt[1] == OPS_DT_F32 &&
               gemm_cast_is_identity(p, 0) && gemm_cast_is_identity(p, 1);
    if (dev->sm_major < 9 || p->nb == 2)
        return "shape"; /* wgmma is sm_90a; a dual group is the 16-bit kernel's */
    if (c->math != MATH_TF32X3 || !f32 || p->trans[0])
        return "shape";
    if (c->bk != 32 || (c->bm != 64 && c->bm != 128) || (c->bn != 64 && c->bn != 128) || p->K % 4 ||
        (!p->trans[1] && p->N % 4))
        return "shape";
    if (c->wm != 1 || c->wn != 1)
        return "redundant"; /* a knob the wgmma kernel does not read */
    return NULL;
}

static void wgmma_configure(const gemm_problem *p, const ops_schedule *s, const ops_device *dev,
                            gemm_cfg *c)
{
    int64_t a_tile = (int64_t)c->bm * 32 * 4;
    int64_t b_tile = (p->trans[1] ? (int64_t)c->bn * 32 : 32 * (int64_t)(c->bn + 8)) * 4;
    /* stages of A and B, A_small tiles (two, or one per stage when they are copied in), 1024
     * bytes of alignment slack for the swizzled tiles */
    c->smem_bytes = c->stages * (a_tile + b_tile) + (c->presplit ? c->stages : 2) * a_tile + 1024;
    c->op[0].vb = c->op[1].vb = 16; /* 16-byte cp.async copies (kt_cp_async16) */
    c->flush_ktiles = TF32X3_FLUSH_K / 32;
    /* accumulators and chunk sums (bm / 2 floats each per thread), four k steps' fragments
     * raw, big and small, addresses */
    c->regs = c->bm + 48 + 40;
    const char *prefix_why = gemm_wgmma_prefix_why(p, c, dev);
    if (prefix_why)
        c->why = prefix_why;
    else if (c->splitk != 1 || s->v[KN_MMA] == MMA_WGMMA_PINGPONG)
        c->why = "shape"; /* ping-pong is the 16-bit kernel's */
    else if (s->v[KN_MCAST] != 1 || s->v[KN_STORE] != STORE_DIRECT)
        c->why = "redundant"; /* knobs the tf32x3 kernel does not read */
    else if (c->stages > 4)
        c->why = "redundant"; /* rings past 4 stages are the 16-bit TMA kernel's */
    else if (c->smem != SMEM_XOR || s->v[KN_SPLITK_MODE] != SPLITK_PARALLEL)
        c->why = "redundant"; /* knobs the wgmma kernel does not read */
    else if ((c->bm > 64 && c->bm / 2 >= p->M) || (c->bn > 64 && c->bn / 2 >= p->N))
        c->why = "shape"; /* a tile at least twice the matrix: the smaller one covers it */
    else if (c->smem_bytes > dev->smem_per_block_optin)
        c->why = "smem";
    else if (c->stages - 1 > c->ktiles)
        c->why = "redundant"; /* deeper than the k loop */
    else if (gemm_raster_redundant(c, dev))
        c->why = "redundant";
    else if (p->batch > 65535 || c->tiles_m * c->tiles_n >= ((int64_t)1 << 31))
        c->why = "shape";
    else if (c->presplit && p->batch != 1)
        c->why = "shape"; /* the split kernel covers one [M][K] matrix */
}

/* Resolves schedule s for problem p on dev into c and sets c->why to the first prune reason
 * (NULL when the schedule is legal). Derived fields are filled even for pruned schedules, so the
 * cost model can rank them. */
void gemm_configure(const gemm_problem *p, const ops_schedule *s, const ops_device *dev,
                    gemm_cfg *c)
{
    memset(c, 0, sizeof(*c));
    c->math = s->v[KN_MATH];
    c->bm = s->v[KN_BM];
    c->bn = s->v[KN_BN];
    c->bk = s->v[KN_BK];
    c->wm = s->v[KN_WM];
    c->wn = s->v[KN_WN];
    c->stages = s->v[KN_STAGES];
    c->splitk = s->v[KN_SPLITK];
    c->raster = s->v[KN_RASTER];
    c->smem = s->v[KN_SMEM];
    c->serial = c->splitk > 1 && s->v[KN_SPLITK_MODE] == SPLITK_SERIAL;
    c->cluster = c->splitk > 1 && s->v[KN_SPLITK_MODE] == SPLITK_CLUSTER;
    c->parallel = c->splitk > 1 && s->v[KN_SPLITK_MODE] == SPLITK_PARALLEL;
    c->stream = s->v[KN_SPLITK_MODE] == SPLITK_STREAM;
    c->wgmma = s->v[KN_MMA] != MMA_SYNC;
    c->presplit = s->v[KN_MMA] == MMA_WGMMA_SPLIT;
    c->threads = c->wgmma ? 128 * (c->bn / 64 > 0 ? c->bn / 64 : 1) : 32 * c->wm * c->wn;
    c->wtm = c->bm / c->wm;
    c->wtn = c->bn / c->wn;
    c->tc = c->math != MATH_FFMA;
    c->kstep = gemm_is_tf32(c->math) ? 8 : c->tc ? 16 : 1;
    c->sdt = math_dtype(c->math, p->dt);
    c->esize = (int)ops_dtype_size(c->sdt);
    c->tiles_m = gemm_cdiv(p->M, c->bm);
    c->tiles_n = gemm_cdiv(p->N, c->bn);
    c->ktiles = gemm_cdiv(p->K, c->bk);
    c->kps = gemm_cdiv(c->ktiles, c->splitk);
    setup_operand(p, c, 0);
    setup_operand(p, c, 1);
    c->smem_bytes = (int64_t)c->stages * (c->op[0].stage + c->op[1].stage) * c->esize;
    /* cluster split-K: the pipeline's shared memory then holds the block's fp32 partial tile */
    if (c->cluster && c->smem_bytes < (int64_t)c->bm * c->bn * 4)
        c->smem_bytes = (int64_t)c->bm * c->bn * 4;
    /* Registers: accumulators, one k step's fragments (tf32 keeps raw and converted values),
     * loop state and epilogue temporaries, and per tile-load iteration an address and predicate
     * the compiler keeps live (calibrated against ptxas: it hoists them all), plus the values
     * of register-path loads in flight. */
    if (c->tc) {
        c->mi = c->wtm / 16;
        c->ni = c->wtn / 8;
        c->regs = c->mi * c->ni * 4 + c->mi * 4 + c->ni * 2 + 48;
        if (gemm_is_tf32(c->math))
            c->regs += 16;
        /* tf32x3: the small halves of the fragments and the chunk sums, which ptxas fits in
         * about what the fragments' second k step took before (measured: 193-232 registers for
         * 64 x 32 warp tiles, 151 for 32 x 32, no spill) */
        if (c->math == MATH_TF32X3) {
            c->regs += c->mi * 4 + c->ni * 2 + 12;
            c->flush_ktiles = TF32X3_FLUSH_K > c->bk ? TF32X3_FLUSH_K / c->bk : 1;
        }
    } else {
        c->lanes_ok = ffma_lanes(c);
        c->regs = c->tm * c->tn + c->tm + c->tn + 40;
    }
    /* Serial split-K: ptxas hoists the running-sum loads ahead of their adds (measured: 128
     * accumulators spill at the 255 cap), so count half the accumulators again. */
    if (c->serial)
        c->regs += (c->tc ? c->mi * c->ni * 4 : c->tm * c->tn) / 2;
    for (int k = 0; k < 2; k++) {
        c->regs += c->op[k].iters * 5 / 2;
        if (!c->op[k].vb)
            c->regs += c->op[k].iters * c->op[k].ve;
    }
    int64_t big = (int64_t)1 << 31;
    c->idx64 = p->batch * p->M * p->N * c->splitk >= big || p->batch * p->M * p->K >= big ||
               p->batch * p->K * p->N >= big;
    for (int i = 0; i < p->n_epi; i++) {
        const ops_node *n = &p->g->nodes[p->epi[i]];
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k].tensor >= 0 &&
                ops_shape_numel(&p->g->tensors[n->in[k].tensor].shape) >= big)
                c->idx64 = true;
    }

    if (c->wgmma && (c->math == MATH_F16 || c->math == MATH_BF16)) {
        gemm_wgmma16_configure(p, s, dev, c);
        return;
    }
    if (c->wgmma) {
        wgmma_configure(p, s, dev, c);
        return;
    }
    /* The prune rules, cheapest and most telling first. */
    int reg_cap = dev->regs_per_sm / c->threads;
    reg_cap = (reg_cap < dev->max_regs_per_thread ? reg_cap : dev->max_regs_per_thread) & ~7;
    const char *prefix_why = gemm_sync_prefix_why(p, c, dev);
    if (prefix_why)
        c->why = prefix_why;
    else if (!c->tc && (c->tm * c->tn < 4 || c->bk > 16 || c->smem == SMEM_XOR))
        c->why = "redundant"; /* FFMA: BK 16 already hides the barrier (longer unrolls only cost
                                 registers and compile time); its strided element reads are
                                 conflict-free padded, and the XOR costs integer work per read
                                 (measured 1.5x slower on the H100) */
    else if (s->v[KN_MCAST] != 1 || s->v[KN_STORE] != STORE_DIRECT || c->stages > 4)
        c->why = "redundant"; /* the 16-bit wgmma kernel's knobs (and rings past 4 stages: each
                                 cp.async stage costs every thread copies and registers) */
    else if (c->regs > reg_cap)
        c->why = "regs";
    else if (c->math == MATH_TF32X3 && c->wtm == 16 && c->bk == 64 && c->raster > 1)
        c->why = "regs"; /* 16-row warp tiles over 8 k steps: ptxas keeps every step's fragments
                            live (measured, 32 x 64 tiles: 255 registers at raster 1, 40 bytes
                            of spill once the grouped raster's index math joins) */
    else if (c->smem_bytes > dev->smem_per_block_optin)
        c->why = "smem";
    else if (c->op[0].iters > 8 || c->op[1].iters > 8)
        c->why = "threads"; /* too few threads for the tile: each pass's address stays live */
    else if (c->stream)
        c->why = "shape"; /* stream-K is the 16-bit wgmma kernel's */
    else if (c->splitk > 1 && (c->kps < 2 || c->kps * (c->splitk - 1) >= c->ktiles))
        c->why = "shape"; /* slices of under two k tiles, or an empty slice */
    else if (c->splitk > 1 && c->tiles_m * c->tiles_n * p->batch * (c->splitk / 2) >= dev->sm_count)
        c->why = "redundant"; /* half as many slices already fill the GPU */
    else if (p->batch * c->splitk > 65535 || c->tiles_m * c->tiles_n >= ((int64_t)1 << 31))
        c->why = "shape";
    else if (c->splitk == 1 && s->v[KN_SPLITK_MODE] != SPLITK_PARALLEL)
        c->why = "redundant"; /* one slice: the mode changes nothing */
    else if (c->cluster && dev->sm_major < 9)
        c->why = "shape"; /* thread-block clusters are sm_90's */
    else if (c->serial && p->batch * c->tiles_m * c->tiles_n * c->splitk > dev->sm_count)
        c->why = "shape"; /* serial slices wait on each other: keep every block co-resident
                             (one block per SM always fits), see gemm_emit_serial_helpers */
    else if (c->stages > 2 && c->stages - 1 > c->kps)
        c->why = "redundant"; /* deeper than the k loop */
    else if (gemm_raster_redundant(c, dev))
        c->why = "redundant";
}

/* Serial split-K workspace: an int semaphore per (batch, tile), padded to 256 bytes, then an fp32
 * running-sum tile of BM x BN per (batch, tile). */
int64_t gemm_serial_acc_offset(const gemm_problem *p, const gemm_cfg *c)
{
    return gemm_cdiv(p->batch * c->tiles_m * c->tiles_n * 4, 256) * 256;
}

int64_t gemm_serial_workspace_bytes(const gemm_problem *p, const gemm_cfg *c)
{
    return gemm_serial_acc_offset(p, c) + p->batch * c->tiles_m * c->tiles_n * c->bm * c->bn * 4;
}

/* ---- shared index math (mirrored in the emitted CUDA) ---- */

void ops_gemm_raster(int pid, int tiles_m, int tiles_n, int group, int *tm, int *tn)
{
    int per_group = group * tiles_n;
    int first_m = pid / per_group * group;
    int rows = tiles_m - first_m < group ? tiles_m - first_m : group;
    *tm = first_m + pid % per_group % rows;
    *tn = pid % per_group / rows;
}

int gemm_ilog2(int v)
{
    int r = 0;
    while ((1 << r) < v)
        r++;
    return r;
}

int ops_gemm_smem_slot(int layout, int cols, int esize, int pad, int r, int c)
{
    if (layout == SMEM_PAD)
        return r * (cols + pad) + c;
    /* 16-byte chunk q of the tile is XORed with the index of its row's 128-byte line group, so
     * 8 consecutive rows' chunks at one column land in 8 different bank groups. */
    int e16 = 16 / esize, cpr = cols / e16, rpl = cpr >= 8 ? 1 : 8 / cpr;
    int q = r * cpr + c / e16;
    int key = r / rpl & 7;
    return (q ^ key) * e16 + c % e16;
}

void ops_gemm_ldsm_lane(int kind, int lane, int *row, int *col)
{
    int lr = lane & 7, lj = lane >> 3;
    bool hi = ldsm_kinds[kind].row_hi;
    *row = (hi ? lj >> 1 : lj & 1) * 8 + lr;
    *col = (hi ? lj & 1 : lj >> 1) * ldsm_kinds[kind].cw;
}

/* ---- the candidate's entry name ---- */

void gemm_main_entry(const gemm_cfg *c, const char *suffix, char *buf, size_t len)
{
    snprintf(buf, len, "ktune_gemm_%s%s_%dx%dx%d%s%s", math_labels[c->math],
             c->presplit   ? "_wgmma_split"
             : c->pingpong ? "_wgmma_pingpong"
             : c->wgmma    ? "_wgmma"
                           : "",
             c->bm, c->bn, c->bk,
             c->parallel  ? "_partial"
             : c->serial  ? "_serial"
             : c->cluster ? "_cluster"
             : c->stream  ? "_streamk"
                          : "",
             suffix);
}
