/* The gemm family: one matmul (batched with broadcast batch dims, operand transposes) with an
 * optional cast prologue on its operands and a chain of elementwise epilogue nodes (bias,
 * activations, residual, scale, cast), as one kernel; with parallel split-K, a partial-products
 * kernel writing fp32 slices to the workspace plus a reduction kernel that applies the epilogue;
 * with serial split-K, one kernel whose slices of a tile take turns (slice 0, 1, ...) on a
 * per-tile semaphore adding into an fp32 tile in the workspace, the last applying the epilogue;
 * with cluster split-K (sm_90), one kernel whose slices of a tile form a thread-block cluster
 * and sum their partial tiles through distributed shared memory, each slice reducing and
 * storing a share of the tile (emit_cluster_epilogue).
 *
 * Every math path shares one kernel skeleton:
 *   - grid.x walks the TILES_M x TILES_N output tiles in a grouped order (RASTER tile-rows are
 *     visited column by column, so the blocks of a wave share A rows and B columns in L2);
 *     grid.z walks batch x split-K slices;
 *   - a STAGES-deep cp.async pipeline copies the A and B tiles into shared memory in the
 *     operands' global orientation, zero-filling past the matrix edges (16/8/4-byte copies as the
 *     leading dimension's alignment allows; through registers when a prologue cast or a precision
 *     change converts the data, or when rows are not 4-byte aligned);
 *   - WM x WN warps each own a WTM x WTN sub-tile: mma.sync m16n8k16 (f16, bf16) or m16n8k8
 *     (tf32) with fragments loaded by ldmatrix (.trans where the stored orientation needs it),
 *     or FFMA with a TM x TN thread tile; "tf32x3" splits each fp32 operand into a tf32 pair
 *     (big + small) and issues three tf32 mmas per product, which keeps fp32-level accuracy
 *     (see emit_mma_stage) and is therefore searched under the exact policy too;
 *   - the epilogue computes the fused chain per element in fp32 and stores with edge masks.
 * Shared-memory rows are padded (16 bytes; 32 for tf32 operands read element-wise) or
 * XOR-swizzled in 16-byte chunks against bank conflicts.
 *
 * The schedule knobs, the pruning rules and the cost model are documented next to each. */
#include "emit_gemm.h"
#include "family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- knobs ---- */

enum {
    KN_MATH,
    KN_BM,
    KN_BN,
    KN_BK,
    KN_WM,
    KN_WN,
    KN_STAGES,
    KN_SPLITK,
    KN_RASTER,
    KN_SMEM,
    KN_SPLITK_MODE, /* appended, so the other knobs keep their positions */
    KN_MMA,         /* appended */
    KN_COUNT
};
enum { MATH_FFMA, MATH_TF32, MATH_F16, MATH_BF16, MATH_TF32X3 };
/* tf32x3: reduction columns the mmas sum (truncating) before a round-to-nearest FADD carries
 * them on (ktg_flush). 64 keeps the truncation's share near 5e-7 normwise, under fp32 FFMA's
 * error at K = 2048, at 4 FADDs per 24 mmas (one FADD per 3 mmas before: 366 -> 327 us on the
 * H100 for a 2048^3 f32 matmul, 64 x 128 tiles). */
#define TF32X3_FLUSH_K 64
enum { SMEM_PAD, SMEM_XOR };
enum { SPLITK_PARALLEL, SPLITK_SERIAL, SPLITK_CLUSTER };
enum { MMA_SYNC, MMA_WGMMA, MMA_WGMMA_SPLIT };

static const char *const math_labels[] = {"ffma", "tf32", "f16", "bf16", "tf32x3"};
static const char *const smem_labels[] = {"pad", "xor"};
/* by position in the knob's value list (cluster between the other two: refinement moves one
 * step, so from cluster it tries both) */
static const char *const splitk_mode_labels[] = {"parallel", "cluster", "serial"};
static const char *const mma_labels[] = {"sync", "wgmma", "wgmma_split"};

static const ops_knob gemm_knobs[KN_COUNT] = {
    [KN_MATH] = {"math", 5, {MATH_FFMA, MATH_TF32, MATH_F16, MATH_BF16, MATH_TF32X3}, math_labels},
    [KN_BM] = {"bm", 5, {16, 32, 64, 128, 256}, NULL},
    [KN_BN] = {"bn", 5, {16, 32, 64, 128, 256}, NULL},
    [KN_BK] = {"bk", 4, {8, 16, 32, 64}, NULL},
    [KN_WM] = {"wm", 3, {1, 2, 4}, NULL}, /* warps along m */
    [KN_WN] = {"wn", 3, {1, 2, 4}, NULL}, /* warps along n */
    [KN_STAGES] = {"stages", 3, {2, 3, 4}, NULL},
    [KN_SPLITK] = {"splitk", 4, {1, 2, 4, 8}, NULL}, /* split-K slices */
    [KN_RASTER] = {"raster", 3, {1, 4, 8}, NULL},    /* tile-rows per raster group */
    [KN_SMEM] = {"smem", 2, {SMEM_PAD, SMEM_XOR}, smem_labels},
    /* parallel: fp32 partials per slice + a reduction kernel; serial: one kernel, the slices of
     * a tile accumulate in turn (see emit_serial_epilogue); cluster: one kernel, the slices of
     * a tile are a cluster summing through distributed shared memory (emit_cluster_epilogue).
     * Meaningless with splitk=1. */
    [KN_SPLITK_MODE] = {"splitk_mode",
                        3,
                        {SPLITK_PARALLEL, SPLITK_CLUSTER, SPLITK_SERIAL},
                        splitk_mode_labels},
    /* tensor-core instruction: warp-level mma.sync, or Hopper's warpgroup wgmma (tf32x3 on f32
     * data only, see emit_wgmma_kernel: bm is the wgmma N, bn 64 rows per warpgroup) */
    /* wgmma_split: A's small halves computed once by a first kernel into the workspace and
     * copied by cp.async like A, instead of a pass over each A tile in the kernel */
    [KN_MMA] = {"mma", 3, {MMA_SYNC, MMA_WGMMA, MMA_WGMMA_SPLIT}, mma_labels},
};

/* ---- the group: what matmul, which prologue and epilogue ---- */

typedef struct gemm_problem {
    const ops_group *grp;
    const ops_graph *g;
    int mm;              /* the matmul node */
    int src[2];          /* tensor read for A and B (a group input) */
    int cast[2];         /* prologue cast node of A and B, or -1 */
    ops_dtype src_dt[2]; /* A and B in global memory */
    bool trans[2];
    ops_dtype dt; /* matmul operand and result dtype */
    int64_t M, N, K, batch;
    ops_shape obatch, opb[2]; /* batch dims of the output, A and B */
    ops_shape oshape;         /* the matmul output (and group output) shape */
    int out;                  /* the group's output tensor */
    int n_epi;
    int epi[OPS_GROUP_MAX_NODES]; /* epilogue nodes in topological order */
} gemm_problem;

static bool in_group(const ops_group *grp, int node)
{
    return node >= 0 && (grp->mask >> node & 1);
}

static void batch_of(const ops_shape *s, ops_shape *out)
{
    *out = *s;
    out->rank = s->rank - 2;
}

/* 0 when grp is a matmul with a cast prologue on its operands and an elementwise epilogue whose
 * every node has the matmul's output shape; -EINVAL otherwise. */
static int gemm_analyse(const ops_group *grp, gemm_problem *p)
{
    const ops_graph *g = grp->g;
    memset(p, 0, sizeof(*p));
    p->grp = grp;
    p->g = g;
    p->mm = p->cast[0] = p->cast[1] = -1;
    if (grp->n_out != 1)
        return -EINVAL;
    for (int i = 0; i < grp->n_nodes; i++) {
        if (g->nodes[grp->nodes[i]].op != OPS_MATMUL)
            continue;
        if (p->mm >= 0)
            return -EINVAL;
        p->mm = grp->nodes[i];
    }
    if (p->mm < 0)
        return -EINVAL;
    const ops_node *mm = &g->nodes[p->mm];
    const ops_tensor *mo = &g->tensors[mm->out];
    for (int k = 0; k < 2; k++) {
        int t = mm->in[k].tensor;
        if (t < 0)
            return -EINVAL;
        int prod = g->tensors[t].producer;
        if (in_group(grp, prod)) {
            const ops_node *c = &g->nodes[prod];
            int ct = c->in[0].tensor;
            if (c->op != OPS_CAST || ct < 0 || in_group(grp, g->tensors[ct].producer))
                return -EINVAL;
            p->cast[k] = prod;
            t = ct;
        }
        p->src[k] = t;
        p->src_dt[k] = g->tensors[t].dtype;
    }
    /* Every other node extends the chain of values derived from the matmul; it may also read
     * group inputs (broadcast into the output shape) and scalars, never a prologue cast. */
    uint64_t chain = 1ull << p->mm;
    for (int i = 0; i < grp->n_nodes; i++) {
        int ni = grp->nodes[i];
        if (ni == p->mm || ni == p->cast[0] || ni == p->cast[1])
            continue;
        const ops_node *n = &g->nodes[ni];
        if (!ops_is_elementwise(n->op) ||
            !ops_shape_same_sizes(&g->tensors[n->out].shape, &mo->shape))
            return -EINVAL;
        bool from_chain = false;
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k].tensor;
            if (t == OPS_SCALAR || !in_group(grp, g->tensors[t].producer))
                continue;
            if (!(chain >> g->tensors[t].producer & 1))
                return -EINVAL;
            from_chain = true;
        }
        if (!from_chain)
            return -EINVAL;
        chain |= 1ull << ni;
        p->epi[p->n_epi++] = ni;
    }
    p->out = grp->out[0];
    if (!(chain >> g->tensors[p->out].producer & 1))
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

/* ---- the schedule, resolved against the problem ---- */

typedef struct gemm_operand {
    bool row_is_k; /* the stored tile's rows run along K (A transposed, B not) */
    int R, C;      /* shared tile: R rows of C contiguous elements */
    int64_t rows;  /* global 2-D view [rows][cols], cols contiguous */
    int64_t cols;
    int vb;           /* cp.async bytes per copy (16, 8, 4); 0: loaded through registers */
    int ve;           /* elements per copy or register load */
    int pad;          /* row padding in elements (pad layout) */
    int stride;       /* elements between rows */
    int stage;        /* elements per pipeline stage */
    int iters;        /* copies per thread per tile */
    bool scalar_frag; /* tf32 fragments read element-wise (ldmatrix.trans is 16-bit only) */
} gemm_operand;

typedef struct gemm_cfg {
    int math, bm, bn, bk, wm, wn, stages, splitk, raster, smem;
    bool serial;   /* split-K slices accumulate in turn in one kernel (splitk > 1) */
    bool cluster;  /* split-K slices of a tile are a cluster, summing in shared memory */
    bool parallel; /* split-K partials plus a reduction kernel (splitk > 1) */
    int threads, wtm, wtn;
    bool tc;
    bool lanes_ok;      /* FFMA: the warp tile splits over the 32 lanes (ffma_lanes) */
    int mi, ni, kstep;  /* tensor cores: mma tiles per warp along m and n; k per mma */
    int ly, lx, tm, tn; /* FFMA: lane grid (ly x lx) and thread tile (tm x tn) */
    ops_dtype sdt;      /* shared-memory element type */
    int esize;
    gemm_operand op[2];
    int64_t tiles_m, tiles_n, ktiles, kps; /* kps: k tiles per split-K slice */
    int64_t smem_bytes;
    bool wgmma;       /* Hopper warpgroup MMA (emit_wgmma_kernel) */
    bool presplit;    /* wgmma: A's small halves from a first kernel (mma=wgmma_split) */
    int regs;         /* estimated registers per thread */
    int flush_ktiles; /* tf32x3: k tiles summed inside the mmas before an FADD carries them */
    bool idx64;
    const char *why; /* first prune reason, or NULL */
} gemm_cfg;

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Both tf32 paths: fp32 tiles in shared memory, m16n8k8 mma. */
static bool is_tf32(int math)
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
static bool cast_is_identity(const gemm_problem *p, int k)
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
    if (p->src_dt[k] == c->sdt && cast_is_identity(p, k)) {
        for (int vb = 16; vb >= 4 && !o->vb; vb /= 2)
            if (row_bytes % vb == 0 && o->C * c->esize >= vb)
                o->vb = vb;
    }
    o->ve = o->vb ? o->vb / c->esize : (o->cols % 4 == 0 ? 4 : 1);
    /* tf32 fragments come element-wise from a tile stored with K as its row axis. */
    o->scalar_frag = is_tf32(c->math) && o->row_is_k;
    o->pad = c->smem == SMEM_PAD ? (o->scalar_frag ? 32 : 16) / c->esize : 0;
    o->stride = o->C + o->pad;
    o->stage = o->R * o->stride;
    o->iters = (int)cdiv((int64_t)o->R * o->C / o->ve, c->threads);
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
static bool raster_redundant(const gemm_cfg *c, const ops_device *dev)
{
    return c->raster > 1 && (c->tiles_n == 1 || c->tiles_m * c->tiles_n <= dev->sm_count ||
                             knob_prev(KN_RASTER, c->raster) >= c->tiles_m);
}

/* The wgmma path (emit_wgmma_kernel) of a configured schedule: its shared memory and
 * registers, and its prune rules. It exists for fp32 data under tf32x3 only (where mma.sync
 * reaches half the tensor pipe at two warps per scheduler: 327 us for a 2048^3 matmul on the
 * H100), with A stored [M][K] and B [K][N] or [N][K] in 16-byte rows, one 128-byte swizzle atom of
 * k per tile (bk 32), and no split-K. */
/* The prune rules of the two kernels that read no knob after wn (see gemm_prune_prefix), the
 * mma.sync/FFMA kernel's cheapest and most telling first. */
static const char *sync_prefix_why(const gemm_problem *p, const gemm_cfg *c, const ops_device *dev)
{
    int kmin = c->tc ? c->kstep : 8;
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

static const char *wgmma_prefix_why(const gemm_problem *p, const gemm_cfg *c, const ops_device *dev)
{
    bool f32 = p->src_dt[0] == OPS_DT_F32 && p->src_dt[1] == OPS_DT_F32 && cast_is_identity(p, 0) &&
               cast_is_identity(p, 1);
    if (dev->sm_major < 9)
        return "shape"; /* wgmma is sm_90a */
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
    c->op[0].vb = c->op[1].vb = 16; /* 16-byte cp.async copies (emit_ptx_helpers) */
    c->flush_ktiles = TF32X3_FLUSH_K / 32;
    /* accumulators and chunk sums (bm / 2 floats each per thread), four k steps' fragments
     * raw, big and small, addresses */
    c->regs = c->bm + 48 + 40;
    const char *prefix_why = wgmma_prefix_why(p, c, dev);
    if (prefix_why)
        c->why = prefix_why;
    else if (c->splitk != 1)
        c->why = "shape";
    else if (c->smem != SMEM_XOR || s->v[KN_SPLITK_MODE] != SPLITK_PARALLEL)
        c->why = "redundant"; /* knobs the wgmma kernel does not read */
    else if ((c->bm > 64 && c->bm / 2 >= p->M) || (c->bn > 64 && c->bn / 2 >= p->N))
        c->why = "shape"; /* a tile at least twice the matrix: the smaller one covers it */
    else if (c->smem_bytes > dev->smem_per_block_optin)
        c->why = "smem";
    else if (c->stages - 1 > c->ktiles)
        c->why = "redundant"; /* deeper than the k loop */
    else if (raster_redundant(c, dev))
        c->why = "redundant";
    else if (p->batch > 65535 || c->tiles_m * c->tiles_n >= ((int64_t)1 << 31))
        c->why = "shape";
    else if (c->presplit && p->batch != 1)
        c->why = "shape"; /* the split kernel covers one [M][K] matrix */
}

/* Resolves schedule s for problem p on dev into c and sets c->why to the first prune reason
 * (NULL when the schedule is legal). Derived fields are filled even for pruned schedules, so the
 * cost model can rank them. */
static void gemm_configure(const gemm_problem *p, const ops_schedule *s, const ops_device *dev,
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
    c->parallel = c->splitk > 1 && !c->serial && !c->cluster;
    c->wgmma = s->v[KN_MMA] != MMA_SYNC;
    c->presplit = s->v[KN_MMA] == MMA_WGMMA_SPLIT;
    c->threads = c->wgmma ? 128 * (c->bn / 64 > 0 ? c->bn / 64 : 1) : 32 * c->wm * c->wn;
    c->wtm = c->bm / c->wm;
    c->wtn = c->bn / c->wn;
    c->tc = c->math != MATH_FFMA;
    c->kstep = is_tf32(c->math) ? 8 : c->tc ? 16 : 1;
    c->sdt = math_dtype(c->math, p->dt);
    c->esize = (int)ops_dtype_size(c->sdt);
    c->tiles_m = cdiv(p->M, c->bm);
    c->tiles_n = cdiv(p->N, c->bn);
    c->ktiles = cdiv(p->K, c->bk);
    c->kps = cdiv(c->ktiles, c->splitk);
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
        if (is_tf32(c->math))
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

    if (c->wgmma) {
        wgmma_configure(p, s, dev, c);
        return;
    }
    /* The prune rules, cheapest and most telling first. */
    int reg_cap = dev->regs_per_sm / c->threads;
    reg_cap = (reg_cap < dev->max_regs_per_thread ? reg_cap : dev->max_regs_per_thread) & ~7;
    const char *prefix_why = sync_prefix_why(p, c, dev);
    if (prefix_why)
        c->why = prefix_why;
    else if (!c->tc && (c->tm * c->tn < 4 || c->bk > 16 || c->smem == SMEM_XOR))
        c->why = "redundant"; /* FFMA: BK 16 already hides the barrier (longer unrolls only cost
                                 registers and compile time); its strided element reads are
                                 conflict-free padded, and the XOR costs integer work per read
                                 (measured 1.5x slower on the H100) */
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
                             (one block per SM always fits), see emit_serial_helpers */
    else if (c->stages > 2 && c->stages - 1 > c->kps)
        c->why = "redundant"; /* deeper than the k loop */
    else if (raster_redundant(c, dev))
        c->why = "redundant";
}

/* Serial split-K workspace: an int semaphore per (batch, tile), padded to 256 bytes, then an fp32
 * running-sum tile of BM x BN per (batch, tile). */
static int64_t serial_acc_offset(const gemm_problem *p, const gemm_cfg *c)
{
    return cdiv(p->batch * c->tiles_m * c->tiles_n * 4, 256) * 256;
}

static int64_t serial_workspace_bytes(const gemm_problem *p, const gemm_cfg *c)
{
    return serial_acc_offset(p, c) + p->batch * c->tiles_m * c->tiles_n * c->bm * c->bn * 4;
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

static int ilog2(int v)
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

/* ldmatrix lane addressing, per (stored layout, element width): lanes 8j..8j+7 give the rows of
 * 8x8 matrix j; row = (sel(j)) * 8 + lane % 8, col = (other bit of j) * cw. */
enum {
    LDSM_A_K,      /* f16/bf16 A stored [m][k] */
    LDSM_A_M,      /* f16/bf16 A stored [k][m], .trans */
    LDSM_B_N,      /* f16/bf16 B stored [k][n], .trans */
    LDSM_B_K,      /* f16/bf16 B stored [n][k] */
    LDSM_A_K_TF32, /* tf32 A stored [m][k] */
    LDSM_B_K_TF32, /* tf32 B stored [n][k] */
};
static const struct {
    bool row_hi;      /* the row block comes from bit 1 of j (else bit 0) */
    int cw;           /* column step of the other bit, in elements */
    bool trans;       /* ldmatrix .trans */
    const char *what; /* for the emitted comment */
} ldsm_kinds[] = {
    [LDSM_A_K] = {false, 8, false, "A stored [m][k]: matrix j = rows (j & 1) * 8, k (j >> 1) * 8"},
    [LDSM_A_M] = {true, 8, true,
                  "A stored [k][m], transposed: matrix j = k (j >> 1) * 8, rows (j & 1) * 8"},
    [LDSM_B_N] = {false, 8, true,
                  "B stored [k][n], transposed: matrix j = k (j & 1) * 8, cols (j >> 1) * 8"},
    [LDSM_B_K] = {true, 8, false, "B stored [n][k]: matrix j = cols (j >> 1) * 8, k (j & 1) * 8"},
    [LDSM_A_K_TF32] = {false, 4, false,
                       "A stored [m][k] (32-bit): matrix j = rows (j & 1) * 8, k (j >> 1) * 4"},
    [LDSM_B_K_TF32] = {true, 4, false,
                       "B stored [n][k] (32-bit): matrix j = cols (j >> 1) * 8, k (j & 1) * 4"},
};

void ops_gemm_ldsm_lane(int kind, int lane, int *row, int *col)
{
    int lr = lane & 7, lj = lane >> 3;
    bool hi = ldsm_kinds[kind].row_hi;
    *row = (hi ? lj >> 1 : lj & 1) * 8 + lr;
    *col = (hi ? lj & 1 : lj >> 1) * ldsm_kinds[kind].cw;
}

/* ---- emission helpers ---- */

typedef struct gemm_emit {
    kt_buf *b;
    const gemm_problem *p;
    const gemm_cfg *c;
    char names[OPS_GROUP_MAX_IO * 2][64]; /* parameter names, group inputs then the output */
} gemm_emit;

/* "t<index>_<name>", the name made an identifier by ops_emit_identifier. */
static void param_name(const ops_graph *g, int t, char *buf, size_t len)
{
    char clean[48];
    ops_emit_identifier(g->tensors[t].name, clean, sizeof(clean));
    snprintf(buf, len, "t%d_%s", t, clean);
}

static const char *in_name(const gemm_emit *e, int t)
{
    for (int i = 0; i < e->p->grp->n_in; i++)
        if (e->p->grp->in[i] == t)
            return e->names[i];
    return "?";
}

static const char *out_name(const gemm_emit *e)
{
    return e->names[e->p->grp->n_in];
}

/* True when the epilogue reads group input t. */
static bool epi_reads(const gemm_problem *p, int t)
{
    for (int i = 0; i < p->n_epi; i++) {
        const ops_node *n = &p->g->nodes[p->epi[i]];
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k].tensor == t && !in_group(p->grp, p->g->tensors[t].producer))
                return true;
    }
    return false;
}

/* The kernel parameter list of the contract: inputs, the output, [workspace]. */
static void emit_kernel_params(const gemm_emit *e, bool workspace)
{
    const gemm_problem *p = e->p;
    const ops_graph *g = p->g;
    kt_buf_printf(e->b, "(");
    for (int i = 0; i < p->grp->n_in; i++)
        kt_buf_printf(e->b, "%sconst %s *__restrict__ %s", i ? ", " : "",
                      ops_emit_ctype(g->tensors[p->grp->in[i]].dtype), e->names[i]);
    kt_buf_printf(e->b, ", %s *__restrict__ %s", ops_emit_ctype(g->tensors[p->out].dtype),
                  out_name(e));
    if (workspace)
        kt_buf_printf(e->b, ", void *__restrict__ workspace");
    kt_buf_printf(e->b, ")");
}

/* The epilogue's tensor parameters ("const T *__restrict__ x, ...") or arguments ("x, ..."),
 * each followed by ", ". */
static void emit_epi_list(const gemm_emit *e, bool decl)
{
    const gemm_problem *p = e->p;
    for (int i = 0; i < p->grp->n_in; i++) {
        int t = p->grp->in[i];
        if (!epi_reads(p, t))
            continue;
        if (decl)
            kt_buf_printf(e->b, "const %s *__restrict__ ", ops_emit_ctype(p->g->tensors[t].dtype));
        kt_buf_printf(e->b, "%s, ", e->names[i]);
    }
}

static const char *bnames[OPS_MAX_RANK] = {"b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7"};

/* const int b0 = ..., b1 = ...: the output batch indices of flat batch index bz. */
static void emit_batch_indices(const gemm_emit *e)
{
    const ops_shape *ob = &e->p->obatch;
    if (ob->rank == 0)
        return;
    kt_buf_line(e->b, "/* batch indices of bz in the output batch shape */");
    int64_t inner = 1;
    for (int i = ob->rank - 1; i >= 0; i--) {
        kt_buf *b = e->b;
        for (int s = 0; s < b->indent; s++)
            kt_buf_printf(b, " ");
        if (i == 0 && inner == 1)
            kt_buf_printf(b, "const int b0 = bz;\n");
        else if (i == 0)
            kt_buf_printf(b, "const int b0 = bz / %lld;\n", (long long)inner);
        else if (inner == 1)
            kt_buf_printf(b, "const int %s = bz %% %lld;\n", bnames[i], (long long)ob->d[i].size);
        else
            kt_buf_printf(b, "const int %s = bz / %lld %% %lld;\n", bnames[i], (long long)inner,
                          (long long)ob->d[i].size);
        inner *= ob->d[i].size;
    }
}

/* True when the flat offset of `in` broadcast against out (ops_emit_bcast_offset) reads one of
 * out's first n_batch indices. */
static bool refs_batch(const ops_shape *in, const ops_shape *out, int n_batch)
{
    int shift = out->rank - in->rank;
    for (int i = 0; i < in->rank; i++)
        if (i + shift < n_batch && !(in->d[i].size == 1 && out->d[i + shift].size != 1))
            return true;
    return false;
}

static void emit_indent(kt_buf *b)
{
    for (int s = 0; s < b->indent; s++)
        kt_buf_printf(b, " ");
}

/* The value an operand load stores to shared memory, from the raw global element `raw`: through
 * float, the prologue cast (rounding like a store would) and the shared type. */
static void emit_load_value(const gemm_emit *e, int k, const char *raw, kt_buf *out)
{
    const gemm_problem *p = e->p;
    kt_buf f = {0}, cst = {0};
    ops_emit_to_float(&f, p->src_dt[k], raw);
    const char *v = f.data ? f.data : "";
    /* A cast to the shared type itself rounds exactly like the conversion below. */
    if (p->cast[k] >= 0 && !cast_is_identity(p, k) &&
        p->g->nodes[p->cast[k]].attrs.to != e->c->sdt) {
        const char *ops[1] = {v};
        ops_emit_elementwise(&cst, &p->g->nodes[p->cast[k]], ops);
        v = cst.data ? cst.data : "";
    }
    ops_emit_from_float(out, e->c->sdt, v);
    kt_buf_free(&f);
    kt_buf_free(&cst);
}

/* ---- emitted helpers: PTX wrappers ---- */

static void emit_ptx_helpers(const gemm_emit *e)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    kt_buf_printf(b, "\n/* ---- PTX wrappers ---- */\n"
                     "__device__ __forceinline__ unsigned kt_smem_u32(const void *p)\n"
                     "{\n"
                     "    unsigned r;\n"
                     "    asm(\"{ .reg .u64 t; cvta.to.shared.u64 t, %%1; cvt.u32.u64 %%0, t; }\" "
                     ": \"=r\"(r) : \"l\"(p));\n"
                     "    return r;\n"
                     "}\n");
    bool vb[17] = {0};
    for (int k = 0; k < 2; k++)
        vb[c->op[k].vb] = true;
    for (int v = 4; v <= 16; v *= 2) {
        if (!vb[v])
            continue;
        kt_buf_printf(b,
                      "/* Copies %d bytes global -> shared asynchronously; bytes past src_bytes (0 "
                      "or %d) are zero-filled. */\n"
                      "__device__ __forceinline__ void kt_cp_async%d(void *dst, const void *src, "
                      "int src_bytes)\n"
                      "{\n"
                      "    asm volatile(\"cp.async.%s.shared.global [%%0], [%%1], %d, %%2;\\n\" ::"
                      " \"r\"(kt_smem_u32(dst)), \"l\"(src), \"r\"(src_bytes) : \"memory\");\n"
                      "}\n",
                      v, v, v, v == 16 ? "cg" : "ca", v);
    }
    kt_buf_printf(b, "__device__ __forceinline__ void kt_cp_async_commit()\n"
                     "{\n"
                     "    asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n"
                     "}\n"
                     "/* Waits until at most N committed groups are still in flight. */\n"
                     "template <int N> __device__ __forceinline__ void kt_cp_async_wait()\n"
                     "{\n"
                     "    asm volatile(\"cp.async.wait_group %%0;\\n\" :: \"n\"(N) : \"memory\");\n"
                     "}\n");
    if (!c->tc)
        return;
    bool plain = false, trans = false;
    if (is_tf32(c->math)) {
        plain = !c->op[0].scalar_frag || !c->op[1].scalar_frag;
    } else {
        plain = !c->op[0].row_is_k || !c->op[1].row_is_k;
        trans = c->op[0].row_is_k || c->op[1].row_is_k;
    }
    for (int t = 0; t < 2; t++) {
        if (!(t ? trans : plain))
            continue;
        kt_buf_printf(b,
                      "/* ldmatrix.x4%s: lanes 8j..8j+7 address the rows of 8x8 matrix j, which "
                      "lands in r<j>; lane l receives %s. */\n"
                      "__device__ __forceinline__ void kt_ldsm_x4%s(unsigned &r0, unsigned &r1, "
                      "unsigned &r2, unsigned &r3, const void *p)\n"
                      "{\n"
                      "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4%s.shared.b16 {%%0, %%1, "
                      "%%2, %%3}, [%%4];\\n\"\n"
                      "                 : \"=r\"(r0), \"=r\"(r1), \"=r\"(r2), \"=r\"(r3) : "
                      "\"r\"(kt_smem_u32(p)));\n"
                      "}\n",
                      t ? ".trans" : "",
                      t ? "elements (2(l%4), l/4) and (2(l%4)+1, l/4)"
                        : "elements (l/4, 2(l%4)) and (l/4, 2(l%4)+1)",
                      t ? "_trans" : "", t ? ".trans" : "");
    }
    if (is_tf32(c->math)) {
        kt_buf_printf(
            b, "/* fp32 -> tf32 (round to nearest, ties away), kept in a 32-bit register. */\n"
               "__device__ __forceinline__ unsigned kt_tf32(float x)\n"
               "{\n"
               "    unsigned r;\n"
               "    asm(\"cvt.rna.tf32.f32 %%0, %%1;\" : \"=r\"(r) : \"f\"(x));\n"
               "    return r;\n"
               "}\n"
               "/* d += a * b, m16n8k8, tf32 inputs, fp32 accumulators. */\n"
               "__device__ __forceinline__ void kt_mma(float (&d)[4], const unsigned "
               "(&a)[4], const unsigned (&b)[2])\n"
               "{\n"
               "    asm(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%%0, %%1, "
               "%%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, %%9}, {%%0, %%1, %%2, %%3};\\n\"\n"
               "        : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])\n"
               "        : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), "
               "\"r\"(b[0]), \"r\"(b[1]));\n"
               "}\n");
        if (c->math == MATH_TF32X3)
            kt_buf_printf(
                b, "/* x = big + small: big is x rounded to tf32 (low 13 bits clear), small the "
                   "exact fp32\n"
                   " * remainder, which the tensor cores read as tf32 by dropping its low 13 bits "
                   "(|small| <=\n"
                   " * 2^-11 |x|, so that costs at most 2^-21 |x|). a * b ~ a.small * b.big + "
                   "a.big * b.small +\n"
                   " * a.big * b.big: the dropped a.small * b.small and the truncation of small "
                   "are about 2^-21\n"
                   " * of |a * b|, near fp32's 2^-24, while every mma runs on the tf32 tensor "
                   "cores. Two\n"
                   " * instructions a split. */\n"
                   "__device__ __forceinline__ void kt_split_tf32(float x, unsigned &big, "
                   "unsigned &small)\n"
                   "{\n"
                   "    big = kt_tf32(x);\n"
                   "    small = __float_as_uint(x - __uint_as_float(big));\n"
                   "}\n");
    } else {
        const char *ty = c->math == MATH_F16 ? "f16" : "bf16";
        kt_buf_printf(b,
                      "/* d += a * b, m16n8k16, %s inputs, fp32 accumulators. */\n"
                      "__device__ __forceinline__ void kt_mma(float (&d)[4], const unsigned "
                      "(&a)[4], const unsigned (&b)[2])\n"
                      "{\n"
                      "    asm(\"mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 {%%0, %%1, %%2, "
                      "%%3}, {%%4, %%5, %%6, %%7}, {%%8, %%9}, {%%0, %%1, %%2, %%3};\\n\"\n"
                      "        : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])\n"
                      "        : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), "
                      "\"r\"(b[1]));\n"
                      "}\n",
                      ty, ty, ty);
    }
}

/* Serial split-K: the hand-off between the slices of one tile. Progress: slice s waits only for
 * slices 0 .. s - 1 of its tile, and those have lower linear block indices (slice is the fastest
 * part of blockIdx.x). The lowest-indexed unfinished block therefore never waits on an unfinished
 * block, so some block always makes progress as long as blocks are resident in index order; and
 * pruning keeps the whole grid within one block per SM, so every block is resident at once
 * whatever order the hardware starts them in. */
static void emit_serial_helpers(const gemm_emit *e)
{
    kt_buf *b = e->b;
    kt_buf_printf(
        b,
        "\n/* ---- serial split-K hand-off ----\n"
        " * The SPLITK blocks of a tile (adjacent blockIdx.x, slice fastest) each sum their k "
        "slice, then take\n"
        " * turns in slice order on the tile's semaphore: slice s waits until sem == s, adds the "
        "running sum\n"
        " * (slice 0 has none), and either stores it and sets sem = s + 1 or, being the last, "
        "applies the\n"
        " * epilogue. The sum order is fixed, so results are deterministic. No deadlock: a slice "
        "waits only\n"
        " * for lower slices, which have lower block indices and so are started first, and the "
        "whole grid\n"
        " * fits on the GPU at one block per SM. Running sums bypass L1 (.cg): another SM wrote "
        "them. */\n");
    if (e->c->tc)
        kt_buf_printf(b, "__device__ __forceinline__ float4 kt_ld_cg4(const float *p)\n"
                         "{\n"
                         "    float4 v;\n"
                         "    asm volatile(\"ld.global.cg.v4.f32 {%%0, %%1, %%2, %%3}, [%%4];\" "
                         ": \"=f\"(v.x), \"=f\"(v.y), \"=f\"(v.z), \"=f\"(v.w) : \"l\"(p) : "
                         "\"memory\");\n"
                         "    return v;\n"
                         "}\n"
                         "__device__ __forceinline__ void kt_st_cg4(float *p, float x, float y, "
                         "float z, float w)\n"
                         "{\n"
                         "    asm volatile(\"st.global.cg.v4.f32 [%%0], {%%1, %%2, %%3, %%4};\" :: "
                         "\"l\"(p), \"f\"(x), \"f\"(y), \"f\"(z), \"f\"(w) : \"memory\");\n"
                         "}\n");
    else
        kt_buf_printf(b, "__device__ __forceinline__ float kt_ld_cg(const float *p)\n"
                         "{\n"
                         "    float v;\n"
                         "    asm volatile(\"ld.global.cg.f32 %%0, [%%1];\" : \"=f\"(v) : "
                         "\"l\"(p) : \"memory\");\n"
                         "    return v;\n"
                         "}\n"
                         "__device__ __forceinline__ void kt_st_cg(float *p, float v)\n"
                         "{\n"
                         "    asm volatile(\"st.global.cg.f32 [%%0], %%1;\" :: \"l\"(p), "
                         "\"f\"(v) : \"memory\");\n"
                         "}\n");
    kt_buf_printf(
        b, "/* Blocks until the tile's semaphore reads `turn`: one thread polls with acquire "
           "loads, the barrier\n"
           " * holds the others. */\n"
           "__device__ __forceinline__ void ktg_wait_turn(const int *sem, int turn)\n"
           "{\n"
           "    if (threadIdx.x == 0) {\n"
           "        int v;\n"
           "        for (;;) {\n"
           "            asm volatile(\"ld.acquire.gpu.global.b32 %%0, [%%1];\" : \"=r\"(v) : "
           "\"l\"(sem) : \"memory\");\n"
           "            if (v == turn)\n"
           "                break;\n"
           "            asm volatile(\"nanosleep.u32 64;\" ::: \"memory\");\n"
           "        }\n"
           "    }\n"
           "    __syncthreads();\n"
           "}\n"
           "/* Gives the tile to slice `turn`: every thread's stores are made visible "
           "device-wide first. */\n"
           "__device__ __forceinline__ void ktg_pass_turn(int *sem, int turn)\n"
           "{\n"
           "    __threadfence();\n"
           "    __syncthreads();\n"
           "    if (threadIdx.x == 0)\n"
           "        asm volatile(\"st.release.gpu.global.b32 [%%0], %%1;\" :: \"l\"(sem), "
           "\"r\"(turn) : \"memory\");\n"
           "}\n");
}

static void emit_cluster_helpers(const gemm_emit *e)
{
    kt_buf_printf(
        e->b,
        "\n/* ---- cluster split-K ----\n"
        " * The SPLITK blocks of a tile (adjacent blockIdx.x, slice fastest) are one thread-block "
        "cluster\n"
        " * (__cluster_dims__), so block rank = slice. Each writes its fp32 partial tile into its "
        "shared memory\n"
        " * in register order; after a cluster barrier, slice r sums the partials of the mma tiles "
        "(i, j) with\n"
        " * (i * NI + j) %% SPLITK == r over slices 0, 1, ... in order (deterministic), reading "
        "the "
        "others'\n"
        " * shared memory, and stores them through the epilogue. A second barrier keeps every "
        "block's shared\n"
        " * memory alive until the others have read it. */\n");
    ops_emit_cluster_helpers(e->b);
}

/* ---- emitted helpers: constants, raster, layouts, loaders ---- */

static void emit_constants(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    kt_buf_printf(b,
                  "\n/* ---- problem and schedule (compile-time constants) ----\n"
                  " * out[bz, m, n] = epilogue(sum_k A[bz, m, k] * B[bz, k, n]); A is stored %s, "
                  "B %s. */\n",
                  p->trans[0] ? "[K][M] (transposed)" : "[M][K]",
                  p->trans[1] ? "[N][K] (transposed)" : "[K][N]");
    kt_buf_printf(b, "enum : int { M = %lld, N = %lld, K = %lld, BATCH = %lld };\n",
                  (long long)p->M, (long long)p->N, (long long)p->K, (long long)p->batch);
    kt_buf_printf(b, "enum : int { BM = %d, BN = %d, BK = %d }; /* block tile */\n", c->bm, c->bn,
                  c->bk);
    kt_buf_printf(b,
                  "enum : int { WM = %d, WN = %d, WTM = %d, WTN = %d }; /* warp grid, warp tile "
                  "*/\n",
                  c->wm, c->wn, c->wtm, c->wtn);
    if (!c->tc)
        kt_buf_printf(b,
                      "enum : int { LY = %d, LX = %d, TM = %d, TN = %d }; /* lane grid; thread "
                      "tile, strided by LY, LX */\n",
                      c->ly, c->lx, c->tm, c->tn);
    else if (!c->wgmma) /* the wgmma kernel lays out its tiles itself (emit_wgmma_kernel) */
        kt_buf_printf(b, "enum : int { MI = %d, NI = %d }; /* m16 x n8 mma tiles per warp */\n",
                      c->mi, c->ni);
    kt_buf_printf(b, "enum : int { THREADS = %d, STAGES = %d, SPLITK = %d, RASTER = %d };\n",
                  c->threads, c->stages, c->splitk, c->raster);
    kt_buf_printf(b,
                  "enum : int { TILES_M = %lld, TILES_N = %lld, KTILES = %lld, "
                  "KTILES_PER_SLICE = %lld };\n",
                  (long long)c->tiles_m, (long long)c->tiles_n, (long long)c->ktiles,
                  (long long)c->kps);
    if (!c->wgmma)
        kt_buf_printf(
            b, "enum : int { A_STAGE = %d, B_STAGE = %d }; /* shared elements per stage */\n",
            c->op[0].stage, c->op[1].stage);
    if (c->math == MATH_TF32X3)
        kt_buf_printf(b,
                      "enum : int { FLUSH_KTILES = %d }; /* k tiles summed inside the mmas "
                      "before an FADD */\n",
                      c->flush_ktiles);
    kt_buf_printf(b, "typedef %s idx_t;\n", c->idx64 ? "long long" : "int");
    if (c->serial)
        kt_buf_printf(b,
                      "/* Serial split-K workspace (%lld bytes, zeroed before the launch):\n"
                      " *   [0, ACC_OFFSET): int sem[BATCH][TILES_M * TILES_N], the slice whose "
                      "turn it is per tile;\n"
                      " *   [ACC_OFFSET, end): float run[BATCH][TILES_M * TILES_N][BM * BN], the "
                      "running sum of each\n"
                      " *   tile in its threads' register order (register r of thread t at r * "
                      "THREADS + t, %s). */\n"
                      "enum : int { ACC_OFFSET = %lld };\n",
                      (long long)serial_workspace_bytes(p, c),
                      c->tc ? "in float4 groups of one mma tile" : "one float each",
                      (long long)serial_acc_offset(p, c));
}

static void emit_raster(const gemm_emit *e)
{
    kt_buf *b = e->b;
    if (e->c->raster == 1) {
        kt_buf_printf(b, "\n/* Block pid -> output tile, row by row. */\n"
                         "__device__ __forceinline__ void ktg_raster(int pid, int &tm, int &tn)\n"
                         "{\n"
                         "    tm = pid / TILES_N;\n"
                         "    tn = pid %% TILES_N;\n"
                         "}\n");
        return;
    }
    kt_buf_printf(b,
                  "\n/* Block pid -> output tile: groups of RASTER tile-rows are walked column by "
                  "column, so\n"
                  " * consecutive blocks share B columns and a few A rows in L2. A bijection "
                  "onto the tiles. */\n"
                  "__device__ __forceinline__ void ktg_raster(int pid, int &tm, int &tn)\n"
                  "{\n"
                  "    const int per_group = RASTER * TILES_N;\n"
                  "    const int first_m = pid / per_group * RASTER;\n"
                  "    const int rows = TILES_M - first_m < RASTER ? TILES_M - first_m : "
                  "RASTER;\n"
                  "    tm = first_m + pid %% per_group %% rows;\n"
                  "    tn = pid %% per_group / rows;\n"
                  "}\n");
}

static void emit_slot_fn(const gemm_emit *e, int k)
{
    const gemm_cfg *c = e->c;
    const gemm_operand *o = &c->op[k];
    kt_buf *b = e->b;
    char X = k ? 'b' : 'a';
    const char *rn = o->row_is_k ? "k" : (k ? "n" : "m");
    const char *cn = o->row_is_k ? (k ? "n" : "m") : "k";
    if (c->smem == SMEM_PAD) {
        kt_buf_printf(b,
                      "/* %c tile in shared memory: [%d %s][%d %s], rows padded by %d elements (%d "
                      "bytes) against bank conflicts. */\n"
                      "__device__ __forceinline__ int ktg_%c_slot(int r, int c)\n"
                      "{\n"
                      "    return r * %d + c;\n"
                      "}\n",
                      k ? 'B' : 'A', o->R, rn, o->C, cn, o->pad, o->pad * c->esize, X, o->stride);
        return;
    }
    int e16 = 16 / c->esize, cpr = o->C / e16, rpl = cpr >= 8 ? 1 : 8 / cpr;
    char rpl_s[32];
    snprintf(rpl_s, sizeof(rpl_s), rpl == 1 ? "r" : "(r / %d)", rpl);
    kt_buf_printf(b,
                  "/* %c tile in shared memory: [%d %s][%d %s], 16-byte chunk q = r * %d + c / %d "
                  "XOR-swizzled with\n"
                  " * %s %% 8, so 8 consecutive rows at one column hit 8 different bank "
                  "groups. */\n"
                  "__device__ __forceinline__ int ktg_%c_slot(int r, int c)\n"
                  "{\n",
                  k ? 'B' : 'A', o->R, rn, o->C, cn, cpr, e16, rpl_s, X);
    kt_buf_printf(b, "    return ((r * %d + (c >> %d)) ^ (", cpr, ilog2(e16));
    if (rpl == 1)
        kt_buf_printf(b, "r & 7");
    else
        kt_buf_printf(b, "(r >> %d) & 7", ilog2(rpl));
    kt_buf_printf(b, ")) * %d + (c & %d);\n}\n", e16, e16 - 1);
}

static void emit_loader(const gemm_emit *e, int k)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    const gemm_operand *o = &c->op[k];
    kt_buf *b = e->b;
    char X = k ? 'b' : 'a';
    const char *rdim = o->row_is_k ? "K" : (k ? "N" : "M");
    const char *cdim = o->row_is_k ? (k ? "N" : "M") : "K";
    const char *sty = ops_emit_ctype(c->sdt), *gty = ops_emit_ctype(p->src_dt[k]);
    int chunks = o->R * o->C / o->ve, cpr = o->C / o->ve;
    bool rowchk = o->rows % o->R != 0, colchk = o->cols % o->C != 0;
    bool guard = chunks % c->threads != 0;

    kt_buf_printf(b, "/* Loads the %c tile at (r0, c0) of the [%s][%s] matrix g: ", k ? 'B' : 'A',
                  rdim, cdim);
    if (o->vb)
        kt_buf_printf(b, "%d-byte cp.async copies", o->vb);
    else
        kt_buf_printf(b, "%d-element loads through registers%s", o->ve,
                      p->cast[k] >= 0 && !cast_is_identity(p, k) ? " (the prologue cast)"
                      : p->src_dt[k] != c->sdt                   ? " (converted to the math type)"
                                               : " (rows are not 4-byte aligned)");
    kt_buf_printf(b, ",\n * %d per thread; elements past the matrix are zero-filled. */\n",
                  o->iters);
    kt_buf_printf(b,
                  "__device__ __forceinline__ void ktg_load_%c(%s *s, const %s *__restrict__ g, "
                  "int r0, int c0)\n{\n",
                  X, sty, gty);
    b->indent = 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %d; i++) {", o->iters);
    b->indent = 8;
    if (c->threads % cpr == 0) {
        /* Each pass covers THREADS / cpr whole rows: the row advances by a constant, so the
         * addresses of all passes derive from one base. */
        if (guard) {
            kt_buf_line(b, "if (threadIdx.x + i * THREADS < %d) {", chunks);
            b->indent += 4;
        }
        kt_buf_line(b, "const int r = threadIdx.x / %d + i * %d, c = threadIdx.x %% %d * %d;", cpr,
                    c->threads / cpr, cpr, o->ve);
    } else {
        kt_buf_line(b, "const int q = threadIdx.x + i * THREADS;");
        if (guard) {
            kt_buf_line(b, "if (q < %d) {", chunks);
            b->indent += 4;
        }
        kt_buf_line(b, "const int r = q / %d, c = q %% %d * %d;", cpr, cpr, o->ve);
    }
    kt_buf_line(b, "const int gr = r0 + r, gc = c0 + c;");
    if (rowchk && colchk)
        kt_buf_line(b, "const bool ok = gr < %s && gc < %s;", rdim, cdim);
    else if (rowchk)
        kt_buf_line(b, "const bool ok = gr < %s;", rdim);
    else if (colchk)
        kt_buf_line(b, "const bool ok = gc < %s;", cdim);
    else if (!o->vb)
        kt_buf_line(b, "const bool ok = true; /* %s and %s are multiples of the tile */", rdim,
                    cdim);
    if (o->vb && !rowchk && !colchk) {
        kt_buf_line(b, "kt_cp_async%d(s + ktg_%c_slot(r, c), g + (idx_t)gr * %s + gc, %d);", o->vb,
                    X, cdim, o->vb);
    } else if (o->vb) {
        kt_buf_line(b, "/* out of bounds: a 0-byte copy (zero fill) from a valid address */");
        kt_buf_line(b,
                    "kt_cp_async%d(s + ktg_%c_slot(r, c), ok ? g + (idx_t)gr * %s + gc : g, ok ? "
                    "%d : 0);",
                    o->vb, X, cdim, o->vb);
    } else if (o->ve == 1) {
        kt_buf v = {0};
        char src[96];
        snprintf(src, sizeof(src), "g[(idx_t)gr * %s + gc]", cdim);
        emit_load_value(e, k, src, &v);
        kt_buf_line(b, "s[ktg_%c_slot(r, c)] = ok ? %s : (%s)0;", X, v.data ? v.data : "", sty);
        kt_buf_free(&v);
    } else {
        bool g32 = p->src_dt[k] == OPS_DT_F32;
        if (g32)
            kt_buf_line(b,
                        "const float4 v = ok ? *reinterpret_cast<const float4 *>(g + (idx_t)gr * "
                        "%s + gc) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);",
                        cdim);
        else
            kt_buf_line(b,
                        "const uint2 v = ok ? *reinterpret_cast<const uint2 *>(g + (idx_t)gr * %s "
                        "+ gc) : make_uint2(0u, 0u);",
                        cdim);
        static const char *const f32_parts[4] = {"v.x", "v.y", "v.z", "v.w"};
        static const char *const h_parts[4] = {"v.x & 0xffffu", "v.x >> 16", "v.y & 0xffffu",
                                               "v.y >> 16"};
        for (int i = 0; i < 4; i++) {
            char raw[64];
            if (g32)
                snprintf(raw, sizeof(raw), "%s", f32_parts[i]);
            else
                snprintf(raw, sizeof(raw), "(%s)(%s)", gty, h_parts[i]);
            kt_buf v = {0};
            emit_load_value(e, k, raw, &v);
            kt_buf_line(b, "const %s x%d = %s;", sty, i, v.data ? v.data : "");
            kt_buf_free(&v);
        }
        if (c->sdt == OPS_DT_F32)
            kt_buf_line(b,
                        "*reinterpret_cast<float4 *>(s + ktg_%c_slot(r, c)) = make_float4(x0, "
                        "x1, x2, x3);",
                        X);
        else
            kt_buf_line(b,
                        "*reinterpret_cast<uint2 *>(s + ktg_%c_slot(r, c)) = make_uint2(x0 | "
                        "(unsigned)x1 << 16, x2 | (unsigned)x3 << 16);",
                        X);
    }
    if (guard) {
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
    b->indent = 4;
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_printf(b, "}\n");
}

/* Arguments (r0, c0) of the A or B loader for block origin (m0, n0) and k offset k0. */
static void loader_origin(const gemm_cfg *c, int k, const char **r0, const char **c0)
{
    const char *mn = k ? "n0" : "m0";
    *r0 = c->op[k].row_is_k ? "k0" : mn;
    *c0 = c->op[k].row_is_k ? mn : "k0";
}

static void emit_load_tiles(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    const char *sty = ops_emit_ctype(c->sdt);
    const char *ra, *ca, *rb, *cb;
    loader_origin(c, 0, &ra, &ca);
    loader_origin(c, 1, &rb, &cb);
    kt_buf_printf(e->b,
                  "/* Starts the loads of the A and B tiles of k offset k0 into one pipeline "
                  "stage. */\n"
                  "__device__ __forceinline__ void ktg_load_tiles(%s *as, %s *bs, const %s "
                  "*__restrict__ ag, const %s *__restrict__ bg, int m0, int n0, int k0)\n"
                  "{\n"
                  "    ktg_load_a(as, ag, %s, %s);\n"
                  "    ktg_load_b(bs, bg, %s, %s);\n"
                  "}\n",
                  sty, sty, ops_emit_ctype(p->src_dt[0]), ops_emit_ctype(p->src_dt[1]), ra, ca, rb,
                  cb);
}

/* ---- emitted helpers: the math of one pipeline stage ---- */

static void emit_mma_stage(const gemm_emit *e)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    const char *sty = ops_emit_ctype(c->sdt);
    bool tf32 = is_tf32(c->math), x3 = c->math == MATH_TF32X3;
    /* tf32x3 keeps the raw fp32 bits in the fragments and splits them after loading. */
    const char *cv = x3 ? "__float_as_uint" : "kt_tf32";
    if (tf32)
        kt_buf_printf(
            b,
            "\n/* One BK-deep stage: the warp at (wm0, wn0) of the block tile multiplies "
            "its WTM x WTN sub-tile,\n"
            " * MI x NI mma.sync.m16n8k8 (tf32%s) per 8-deep k step. Fragments (PTX ISA; g = "
            "lane / 4, t = lane %% 4):\n"
            " *   A 16x8: a0 (row g, k t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + "
            "4)\n"
            " *   B 8x8:  b0 (k t, col g), b1 (k t + 4, col g)\n"
            " *   C 16x8: c0, c1 (row g, cols 2t, 2t + 1), c2, c3 (row g + 8, same cols) "
            "*/\n",
            x3 ? "; three per product, on the big/small split of each operand" : "");
    else
        kt_buf_printf(
            b, "\n/* One BK-deep stage: the warp at (wm0, wn0) of the block tile multiplies "
               "its WTM x WTN sub-tile,\n"
               " * MI x NI mma.sync.m16n8k16 per 16-deep k step. Fragments (PTX ISA; g = "
               "lane / 4, t = lane %% 4;\n"
               " * each register holds two 16-bit elements, the lower k first):\n"
               " *   A 16x16: a0 (row g, k 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 "
               "(g + 8, 2t + 8..)\n"
               " *   B 16x8:  b0 (k 2t..2t+1, col g), b1 (k 2t + 8.., col g)\n"
               " *   C 16x8:  c0, c1 (row g, cols 2t, 2t + 1), c2, c3 (row g + 8, same cols) "
               "*/\n");
    kt_buf_printf(b,
                  "__device__ __forceinline__ void ktg_stage(const %s *as, const %s *bs, int wm0, "
                  "int wn0, int lane, float (&acc)[MI][NI][4])\n{\n",
                  sty, sty);
    b->indent = 4;
    /* Lane addresses of the ldmatrix rows, from the kind tables shared with the tests. */
    int ka = -1, kb = -1;
    const gemm_operand *oa = &c->op[0], *ob = &c->op[1];
    if (tf32) {
        ka = oa->scalar_frag ? -1 : LDSM_A_K_TF32;
        kb = ob->scalar_frag ? -1 : LDSM_B_K_TF32;
    } else {
        ka = oa->row_is_k ? LDSM_A_M : LDSM_A_K;
        kb = ob->row_is_k ? LDSM_B_N : LDSM_B_K;
    }
    if (ka >= 0 || kb >= 0)
        kt_buf_line(b, "const int lr = lane & 7, lj = lane >> 3;");
    if (ka < 0 || kb < 0)
        kt_buf_line(b, "const int g = lane >> 2, t = lane & 3;");
    int kinds[2] = {ka, kb};
    for (int k = 0; k < 2; k++) {
        if (kinds[k] < 0)
            continue;
        bool hi = ldsm_kinds[kinds[k]].row_hi;
        kt_buf_line(b, "/* %s */", ldsm_kinds[kinds[k]].what);
        kt_buf_line(b, "const int %c_r = (%s) * 8 + lr, %c_c = (%s) * %d;", k ? 'b' : 'a',
                    hi ? "lj >> 1" : "lj & 1", k ? 'b' : 'a', hi ? "lj & 1" : "lj >> 1",
                    ldsm_kinds[kinds[k]].cw);
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int kk = 0; kk < BK; kk += %d) {", c->kstep);
    b->indent = 8;
    kt_buf_line(b, "unsigned a[MI][4], b[NI][2];");
    /* A fragments */
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < MI; i++) {");
    b->indent = 12;
    if (tf32 && oa->scalar_frag) {
        kt_buf_line(b, "/* A stored [k][m]: element by element */");
        kt_buf_line(b, "const int m = wm0 + i * 16 + g;");
        kt_buf_line(b, "a[i][0] = %s(as[ktg_a_slot(kk + t, m)]);", cv);
        kt_buf_line(b, "a[i][1] = %s(as[ktg_a_slot(kk + t, m + 8)]);", cv);
        kt_buf_line(b, "a[i][2] = %s(as[ktg_a_slot(kk + t + 4, m)]);", cv);
        kt_buf_line(b, "a[i][3] = %s(as[ktg_a_slot(kk + t + 4, m + 8)]);", cv);
    } else if (tf32) {
        kt_buf_line(b, "kt_ldsm_x4(a[i][0], a[i][1], a[i][2], a[i][3], as + ktg_a_slot(wm0 + i * "
                       "16 + a_r, kk + a_c));");
        if (!x3) {
            kt_buf_line(b, "#pragma unroll");
            kt_buf_line(b, "for (int r = 0; r < 4; r++)");
            kt_buf_line(b, "    a[i][r] = kt_tf32(__uint_as_float(a[i][r]));");
        }
    } else if (oa->row_is_k) {
        kt_buf_line(b, "kt_ldsm_x4_trans(a[i][0], a[i][1], a[i][2], a[i][3], as + ktg_a_slot(kk + "
                       "a_r, wm0 + i * 16 + a_c));");
    } else {
        kt_buf_line(b, "kt_ldsm_x4(a[i][0], a[i][1], a[i][2], a[i][3], as + ktg_a_slot(wm0 + i * "
                       "16 + a_r, kk + a_c));");
    }
    b->indent = 8;
    kt_buf_line(b, "}");
    /* B fragments */
    kt_buf_line(b, "#pragma unroll");
    if (tf32 && ob->scalar_frag) {
        kt_buf_line(b, "for (int j = 0; j < NI; j++) {");
        b->indent = 12;
        kt_buf_line(b, "/* B stored [k][n]: element by element */");
        kt_buf_line(b, "const int n = wn0 + j * 8 + g;");
        kt_buf_line(b, "b[j][0] = %s(bs[ktg_b_slot(kk + t, n)]);", cv);
        kt_buf_line(b, "b[j][1] = %s(bs[ktg_b_slot(kk + t + 4, n)]);", cv);
    } else {
        kt_buf_line(b, "for (int j = 0; j < NI; j += 2) {");
        b->indent = 12;
        kt_buf_line(b, "/* one x4 load: b[j] from matrices 0 and 1, b[j + 1] from 2 and 3 */");
        if (x3) {
            kt_buf_line(b, "kt_ldsm_x4(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], bs + "
                           "ktg_b_slot(wn0 + j * 8 + b_r, kk + b_c));");
        } else if (tf32) {
            kt_buf_line(b, "kt_ldsm_x4(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], bs + "
                           "ktg_b_slot(wn0 + j * 8 + b_r, kk + b_c));");
            kt_buf_line(b, "#pragma unroll");
            kt_buf_line(b, "for (int r = 0; r < 2; r++) {");
            kt_buf_line(b, "    b[j][r] = kt_tf32(__uint_as_float(b[j][r]));");
            kt_buf_line(b, "    b[j + 1][r] = kt_tf32(__uint_as_float(b[j + 1][r]));");
            kt_buf_line(b, "}");
        } else if (ob->row_is_k) {
            kt_buf_line(b, "kt_ldsm_x4_trans(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], bs + "
                           "ktg_b_slot(kk + b_r, wn0 + j * 8 + b_c));");
        } else {
            kt_buf_line(b, "kt_ldsm_x4(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], bs + "
                           "ktg_b_slot(wn0 + j * 8 + b_r, kk + b_c));");
        }
    }
    b->indent = 8;
    kt_buf_line(b, "}");
    if (x3) {
        kt_buf_line(
            b, "/* split: a and b keep the big halves, a_lo and b_lo receive the small ones */");
        kt_buf_line(b, "unsigned a_lo[MI][4], b_lo[NI][2];");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MI; i++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int r = 0; r < 4; r++)");
        kt_buf_line(b, "        kt_split_tf32(__uint_as_float(a[i][r]), a[i][r], a_lo[i][r]);");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int j = 0; j < NI; j++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int r = 0; r < 2; r++)");
        kt_buf_line(b, "        kt_split_tf32(__uint_as_float(b[j][r]), b[j][r], b_lo[j][r]);");
    }
    if (x3) {
        /* acc is the chunk's running sum here (see emit_main_kernel). Small terms first; one
         * pass over the tiles per term puts MI x NI independent mmas between dependent ones. */
        kt_buf_line(b, "/* small terms first, one pass over the tiles per term */");
        static const char *const terms[3][2] = {{"a_lo", "b"}, {"a", "b_lo"}, {"a", "b"}};
        for (int k = 0; k < 3; k++) {
            kt_buf_line(b, "#pragma unroll");
            kt_buf_line(b, "for (int i = 0; i < MI; i++)");
            kt_buf_line(b, "    #pragma unroll");
            kt_buf_line(b, "    for (int j = 0; j < NI; j++)");
            kt_buf_line(b, "        kt_mma(acc[i][j], %s[i], %s[j]);", terms[k][0], terms[k][1]);
        }
    } else {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MI; i++) {");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < NI; j++)");
        kt_buf_line(b, "        kt_mma(acc[i][j], a[i], b[j]);");
        kt_buf_line(b, "}");
    }
    b->indent = 4;
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_printf(b, "}\n");
    if (x3)
        kt_buf_printf(
            b,
            "\n/* The tensor cores add into their fp32 accumulator by truncation, whose error "
            "grows with the\n"
            " * number of adds (measured on the H100: 7e-6 normwise over K = 1024 summed in the "
            "mmas).\n"
            " * The mmas therefore sum FLUSH_KTILES k tiles (%d columns) into part, which a "
            "round-to-nearest\n"
            " * FADD carries into acc; part restarts at zero. */\n"
            "__device__ __forceinline__ void ktg_flush(float (&acc)[MI][NI][4], float "
            "(&part)[MI][NI][4])\n"
            "{\n"
            "#pragma unroll\n"
            "    for (int i = 0; i < MI; i++)\n"
            "#pragma unroll\n"
            "        for (int j = 0; j < NI; j++)\n"
            "#pragma unroll\n"
            "            for (int r = 0; r < 4; r++) {\n"
            "                acc[i][j][r] += part[i][j][r];\n"
            "                part[i][j][r] = 0.0f;\n"
            "            }\n"
            "}\n",
            c->flush_ktiles * c->bk);
}

static void emit_ffma_stage(const gemm_emit *e)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    const char *sty = ops_emit_ctype(c->sdt);
    kt_buf_printf(b,
                  "\n/* One BK-deep stage on FFMA: the thread at (am, bn) of its warp tile owns "
                  "rows am + i * LY and\n"
                  " * columns bn + j * LX (strided, so a warp's shared loads hit distinct banks "
                  "or broadcast). */\n"
                  "__device__ __forceinline__ void ktg_stage(const %s *as, const %s *bs, int am, "
                  "int bn, float (&acc)[TM][TN])\n{\n",
                  sty, sty);
    b->indent = 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int k = 0; k < BK; k++) {");
    b->indent = 8;
    kt_buf_line(b, "float a[TM], b[TN];");
    for (int k = 0; k < 2; k++) {
        char X = k ? 'b' : 'a';
        const char *v = k ? "bn + j * LX" : "am + i * LY";
        char idx[96], el[128];
        if (c->op[k].row_is_k)
            snprintf(idx, sizeof(idx), "%cs[ktg_%c_slot(k, %s)]", X, X, v);
        else
            snprintf(idx, sizeof(idx), "%cs[ktg_%c_slot(%s, k)]", X, X, v);
        kt_buf f = {0};
        ops_emit_to_float(&f, c->sdt, idx);
        snprintf(el, sizeof(el), "%s", f.data ? f.data : "");
        kt_buf_free(&f);
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int %c = 0; %c < %s; %c++)", k ? 'j' : 'i', k ? 'j' : 'i',
                    k ? "TN" : "TM", k ? 'j' : 'i');
        kt_buf_line(b, "    %c[%c] = %s;", X, k ? 'j' : 'i', el);
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < TM; i++) {");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < TN; j++)");
    kt_buf_line(b, "        acc[i][j] = fmaf(a[i], b[j], acc[i][j]);");
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_printf(b, "}\n");
}

/* ---- emitted helpers: the epilogue ---- */

static void value_name(const gemm_problem *p, int node, char *buf, size_t len)
{
    if (node == p->mm) {
        snprintf(buf, len, "acc");
        return;
    }
    for (int i = 0; i < p->n_epi; i++)
        if (p->epi[i] == node)
            snprintf(buf, len, "v%d", i);
}

static int emit_epilogue(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    const ops_graph *g = p->g;
    kt_buf *b = e->b;
    const ops_tensor *mo = &g->tensors[g->nodes[p->mm].out];
    char cm[OPS_EMIT_COMMENT_MAX];
    kt_buf_printf(
        b,
        "\n/* The fused epilogue of output element (bz, m, n) in fp32; acc is %s[bz, m, n]. */\n"
        "__device__ __forceinline__ float ktg_epilogue(",
        ops_emit_comment_text(mo->name, cm, sizeof(cm)));
    emit_epi_list(e, true);
    kt_buf_printf(b, "int bz, int m, int n, float acc)\n{\n");
    b->indent = 4;
    bool need_b = false;
    for (int i = 0; i < p->grp->n_in; i++) {
        int t = p->grp->in[i];
        if (epi_reads(p, t))
            need_b |= refs_batch(&g->tensors[t].shape, &p->oshape, p->obatch.rank);
    }
    if (need_b)
        emit_batch_indices(e);
    const char *idx[OPS_MAX_RANK];
    int orank = p->oshape.rank;
    for (int i = 0; i < orank - 2; i++)
        idx[i] = bnames[i];
    idx[orank - 2] = "m";
    idx[orank - 1] = "n";
    int rc = 0;
    for (int i = 0; i < p->n_epi && rc == 0; i++) {
        const ops_node *n = &g->nodes[p->epi[i]];
        kt_buf opnd[OPS_MAX_OPERANDS] = {{0}};
        const char *ops[OPS_MAX_OPERANDS] = {0};
        for (int k = 0; k < n->n_in; k++) {
            int t = n->in[k].tensor;
            if (t == OPS_SCALAR) {
                ops[k] = "";
                continue;
            }
            int prod = g->tensors[t].producer;
            if (in_group(p->grp, prod)) {
                char v[16];
                value_name(p, prod, v, sizeof(v));
                kt_buf_printf(&opnd[k], "%s", v);
            } else {
                kt_buf at = {0};
                kt_buf_printf(&at, "%s[", in_name(e, t));
                if (c->idx64)
                    kt_buf_printf(&at, "(idx_t)");
                ops_emit_bcast_offset(&at, &g->tensors[t].shape, &p->oshape, idx);
                kt_buf_printf(&at, "]");
                ops_emit_to_float(&opnd[k], g->tensors[t].dtype, at.data ? at.data : "");
                kt_buf_free(&at);
            }
            ops[k] = opnd[k].data ? opnd[k].data : "";
        }
        emit_indent(b);
        kt_buf_printf(b, "const float v%d = ", i);
        rc = ops_emit_elementwise(b, n, ops);
        kt_buf_printf(b, "; /* %s = %s */\n",
                      ops_emit_comment_text(g->tensors[n->out].name, cm, sizeof(cm)),
                      ops_op_info_get(n->op)->name);
        for (int k = 0; k < n->n_in; k++)
            kt_buf_free(&opnd[k]);
    }
    char res[16];
    value_name(p, g->tensors[p->out].producer, res, sizeof(res));
    kt_buf_line(b, "return %s;", res);
    b->indent = 0;
    kt_buf_printf(b, "}\n");

    /* Stores of one element and of an (n, n + 1) pair, masked at the matrix edges. */
    ops_dtype odt = g->tensors[p->out].dtype;
    const char *oty = ops_emit_ctype(odt);
    bool mchk = p->M % c->bm != 0, nchk = p->N % c->bn != 0;
    kt_buf_printf(b, "__device__ __forceinline__ void ktg_store(");
    emit_epi_list(e, true);
    kt_buf_printf(b, "%s *__restrict__ out, int bz, int m, int n, float acc)\n{\n", oty);
    if (mchk || nchk)
        kt_buf_printf(b, "    if (%s%s%s)\n        return;\n", mchk ? "m >= M" : "",
                      mchk && nchk ? " || " : "", nchk ? "n >= N" : "");
    kt_buf_printf(b, "    out[((idx_t)bz * M + m) * N + n] = ");
    {
        kt_buf call = {0};
        kt_buf *save = e->b;
        gemm_emit tmp = *e;
        tmp.b = &call;
        kt_buf_printf(&call, "ktg_epilogue(");
        emit_epi_list(&tmp, false);
        kt_buf_printf(&call, "bz, m, n, acc)");
        ops_emit_from_float(save, odt, call.data ? call.data : "");
        kt_buf_free(&call);
    }
    kt_buf_printf(b, ";\n}\n");
    kt_buf_printf(b, "/* Elements (m, n) and (m, n + 1); n is even. */\n"
                     "__device__ __forceinline__ void ktg_store2(");
    emit_epi_list(e, true);
    kt_buf_printf(b, "%s *__restrict__ out, int bz, int m, int n, float acc0, float acc1)\n{\n",
                  oty);
    if (p->N % 2 == 0) {
        if (mchk || nchk)
            kt_buf_printf(b, "    if (%s%s%s)\n        return;\n", mchk ? "m >= M" : "",
                          mchk && nchk ? " || " : "", nchk ? "n >= N" : "");
        kt_buf_printf(b, "    const float y0 = ktg_epilogue(");
        emit_epi_list(e, false);
        kt_buf_printf(b, "bz, m, n, acc0);\n    const float y1 = ktg_epilogue(");
        emit_epi_list(e, false);
        kt_buf_printf(b, "bz, m, n + 1, acc1);\n");
        kt_buf_printf(b, "    /* N is even: the pair is contiguous and %d-byte aligned */\n",
                      2 * (int)ops_dtype_size(odt));
        if (odt == OPS_DT_F32) {
            kt_buf_printf(b, "    *reinterpret_cast<float2 *>(out + ((idx_t)bz * M + m) * N + n) = "
                             "make_float2(y0, y1);\n");
        } else {
            kt_buf lo = {0}, hi = {0};
            ops_emit_from_float(&lo, odt, "y0");
            ops_emit_from_float(&hi, odt, "y1");
            kt_buf_printf(b,
                          "    *reinterpret_cast<unsigned *>(out + ((idx_t)bz * M + m) * N + n) = "
                          "%s | (unsigned)%s << 16;\n",
                          lo.data ? lo.data : "", hi.data ? hi.data : "");
            kt_buf_free(&lo);
            kt_buf_free(&hi);
        }
    } else {
        kt_buf_printf(b, "    /* N is odd: two masked scalar stores */\n    ktg_store(");
        emit_epi_list(e, false);
        kt_buf_printf(b, "out, bz, m, n, acc0);\n    if (n + 1 < N)\n        ktg_store(");
        emit_epi_list(e, false);
        kt_buf_printf(b, "out, bz, m, n + 1, acc1);\n");
    }
    kt_buf_printf(b, "}\n");
    if (c->parallel) {
        kt_buf_printf(b,
                      "/* Split-K partial sums: fp32 slice `slice` of the workspace, "
                      "[SPLITK][BATCH][M][N]. */\n"
                      "__device__ __forceinline__ void ktg_partial(float *ws, int slice, int bz, "
                      "int m, int n, float acc)\n"
                      "{\n");
        if (mchk || nchk)
            kt_buf_printf(b, "    if (%s%s%s)\n        return;\n", mchk ? "m >= M" : "",
                          mchk && nchk ? " || " : "", nchk ? "n >= N" : "");
        kt_buf_printf(b, "    ws[(((idx_t)slice * BATCH + bz) * M + m) * N + n] = acc;\n}\n");
        kt_buf_printf(b,
                      "__device__ __forceinline__ void ktg_partial2(float *ws, int slice, int bz, "
                      "int m, int n, float acc0, float acc1)\n"
                      "{\n");
        if (p->N % 2 == 0) {
            if (mchk || nchk)
                kt_buf_printf(b, "    if (%s%s%s)\n        return;\n", mchk ? "m >= M" : "",
                              mchk && nchk ? " || " : "", nchk ? "n >= N" : "");
            kt_buf_printf(b,
                          "    *reinterpret_cast<float2 *>(ws + (((idx_t)slice * BATCH + bz) * M "
                          "+ m) * N + n) = make_float2(acc0, acc1);\n");
        } else {
            kt_buf_printf(b, "    ktg_partial(ws, slice, bz, m, n, acc0);\n"
                             "    if (n + 1 < N)\n"
                             "        ktg_partial(ws, slice, bz, m, n + 1, acc1);\n");
        }
        kt_buf_printf(b, "}\n");
    }
    return rc;
}

/* ---- the kernels ---- */

static void main_entry(const gemm_cfg *c, const char *suffix, char *buf, size_t len)
{
    snprintf(buf, len, "ktune_gemm_%s%s_%dx%dx%d%s%s", math_labels[c->math],
             c->presplit ? "_wgmma_split"
             : c->wgmma  ? "_wgmma"
                         : "",
             c->bm, c->bn, c->bk,
             c->parallel  ? "_partial"
             : c->serial  ? "_serial"
             : c->cluster ? "_cluster"
                          : "",
             suffix);
}

/* A loop over the thread's accumulator tiles running `tc` (mma paths: acc[i][j][0..3]) or `ffma`
 * (acc[i][j]) for each: the split-K modes keep partial tiles in this register order. */
static void emit_acc_copy(const gemm_emit *e, const char *tc, const char *ffma)
{
    kt_buf *b = e->b;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %s; i++)", e->c->tc ? "MI" : "TM");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < %s; j++)", e->c->tc ? "NI" : "TN");
    kt_buf_line(b, "        %s", e->c->tc ? tc : ffma);
}

/* Serial split-K, after the k loop: wait for this slice's turn, add the running sum of the
 * lower slices to the accumulators, then either store the sum and pass the turn on (returning)
 * or, in the last slice, fall through to the epilogue. */
static void emit_serial_epilogue(const gemm_emit *e)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    const char *ni = c->tc ? "NI" : "TN";
    kt_buf_line(b, "/* Serial split-K: add the lower slices' running sum in slice order. */");
    kt_buf_line(b, "unsigned char *wsb = static_cast<unsigned char *>(workspace);");
    kt_buf_line(b, "int *sem = reinterpret_cast<int *>(wsb) + bz * (TILES_M * TILES_N) + pid;");
    kt_buf_line(b,
                "float *run = reinterpret_cast<float *>(wsb + ACC_OFFSET) + ((idx_t)bz * (TILES_M "
                "* TILES_N) + pid) * (BM * BN) + threadIdx.x%s;",
                c->tc ? " * 4" : "");
    kt_buf_line(b, "if (slice > 0) {");
    b->indent = 8;
    kt_buf_line(b, "ktg_wait_turn(sem, slice);");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %s; i++) {", c->tc ? "MI" : "TM");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < %s; j++) {", ni);
    b->indent = 16;
    if (c->tc) {
        kt_buf_line(b, "const float4 v = kt_ld_cg4(run + (i * NI + j) * THREADS * 4);");
        kt_buf_line(b, "acc[i][j][0] += v.x;");
        kt_buf_line(b, "acc[i][j][1] += v.y;");
        kt_buf_line(b, "acc[i][j][2] += v.z;");
        kt_buf_line(b, "acc[i][j][3] += v.w;");
    } else {
        kt_buf_line(b, "acc[i][j] += kt_ld_cg(run + (i * TN + j) * THREADS);");
    }
    b->indent = 8;
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "if (slice < SPLITK - 1) {");
    b->indent = 8;
    emit_acc_copy(e,
                  "kt_st_cg4(run + (i * NI + j) * THREADS * 4, acc[i][j][0], acc[i][j][1], "
                  "acc[i][j][2], acc[i][j][3]);",
                  "kt_st_cg(run + (i * TN + j) * THREADS, acc[i][j]);");
    kt_buf_line(b, "ktg_pass_turn(sem, slice + 1);");
    kt_buf_line(b, "return;");
    b->indent = 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "/* The last slice holds the full sum: the epilogue. */");
}

/* Cluster split-K, after the k loop: every slice's partial tile into its shared memory, then
 * each slice sums its share of the mma (or thread) tiles over the cluster, in slice order, into
 * its accumulators; the store loop that follows stores that share only. */
static void emit_cluster_epilogue(const gemm_emit *e)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    const char *ni = c->tc ? "NI" : "TN";
    kt_buf_line(b, "/* Cluster split-K: sum the slices' partial tiles through shared memory. */");
    kt_buf_line(b, "__syncthreads(); /* every warp is done with the pipeline's tiles */");
    kt_buf_line(b, "float *part_s = reinterpret_cast<float *>(kt_smem) + threadIdx.x%s;",
                c->tc ? " * 4" : "");
    emit_acc_copy(e,
                  "*reinterpret_cast<float4 *>(part_s + (i * NI + j) * THREADS * 4) = "
                  "make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]);",
                  "part_s[(i * TN + j) * THREADS] = acc[i][j];");
    kt_buf_line(b, "kt_cluster_sync(); /* every slice's partial is in place */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < %s; i++) {", c->tc ? "MI" : "TM");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < %s; j++) {", ni);
    b->indent = 12;
    kt_buf_line(b, "if ((i * %s + j) %% SPLITK != slice)", ni);
    kt_buf_line(b, "    continue;");
    if (c->tc) {
        kt_buf_line(b, "float *const at = part_s + (i * NI + j) * THREADS * 4;");
        kt_buf_line(b, "float4 sum = kt_ld_cluster4(kt_cluster_addr(at, 0));");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int r = 1; r < SPLITK; r++) {");
        kt_buf_line(b, "    const float4 v = kt_ld_cluster4(kt_cluster_addr(at, r));");
        kt_buf_line(b, "    sum.x += v.x;");
        kt_buf_line(b, "    sum.y += v.y;");
        kt_buf_line(b, "    sum.z += v.z;");
        kt_buf_line(b, "    sum.w += v.w;");
        kt_buf_line(b, "}");
        kt_buf_line(b, "acc[i][j][0] = sum.x;");
        kt_buf_line(b, "acc[i][j][1] = sum.y;");
        kt_buf_line(b, "acc[i][j][2] = sum.z;");
        kt_buf_line(b, "acc[i][j][3] = sum.w;");
    } else {
        kt_buf_line(b, "float *const at = part_s + (i * TN + j) * THREADS;");
        kt_buf_line(b, "float sum = kt_ld_cluster(kt_cluster_addr(at, 0));");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int r = 1; r < SPLITK; r++)");
        kt_buf_line(b, "    sum += kt_ld_cluster(kt_cluster_addr(at, r));");
        kt_buf_line(b, "acc[i][j] = sum;");
    }
    b->indent = 4;
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    kt_buf_line(b, "kt_cluster_sync(); /* the other slices are done reading this one */");
}

/* ag, bg: operand A and B of batch bz (broadcast batch dims folded in). */
static void emit_operand_pointers(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    kt_buf *b = e->b;
    if (refs_batch(&p->opb[0], &p->obatch, p->obatch.rank) ||
        refs_batch(&p->opb[1], &p->obatch, p->obatch.rank))
        emit_batch_indices(e);
    const char *opname[2] = {"ag", "bg"};
    const char *mat[2] = {"(idx_t)M * K", "(idx_t)K * N"};
    const char *idx[OPS_MAX_RANK];
    for (int i = 0; i < p->obatch.rank; i++)
        idx[i] = bnames[i];
    for (int k = 0; k < 2; k++) {
        emit_indent(b);
        kt_buf_printf(b, "const %s *__restrict__ %s = %s", ops_emit_ctype(p->src_dt[k]), opname[k],
                      in_name(e, p->src[k]));
        if (refs_batch(&p->opb[k], &p->obatch, p->obatch.rank)) {
            kt_buf_printf(b, " + ");
            ops_emit_bcast_offset(b, &p->opb[k], &p->obatch, idx);
            kt_buf_printf(b, " * %s", mat[k]);
        }
        kt_buf_printf(b, ";\n");
    }
}

/* The leading arguments of the epilogue's store calls (its inputs, then the output) into
 * args. */
static void emit_store_args(const gemm_emit *e, kt_buf *args)
{
    gemm_emit tmp = *e;
    tmp.b = args;
    emit_epi_list(&tmp, false);
    kt_buf_printf(args, "%s", out_name(e));
}

/* ---- the Hopper path: tf32x3 on warpgroup MMA ----
 *
 * tf32 wgmma reads a shared-memory operand K-major only, and B is stored [K][N] (or [N][K]); so
 * the kernel computes C^T = B^T A^T: the wgmma A operand is B^T, built in registers from a
 * padded [k][n] tile (or a swizzled [n][k] one; element loads, split into big and small halves
 * there), and the wgmma B operand is A^T,
 * whose K-major form is A's own [m][k] rows, copied by cp.async straight into the hardware's
 * 128-byte swizzle (32 floats of k per row, one swizzle atom per tile: bk 32). The tensor cores
 * read that raw tile as big halves (dropping the low 13 bits: |x - big| < 2^-10 |x|) and a
 * second tile holds A's small halves, x - big, written by all threads once per k tile (for tile
 * kt + 1 while tile kt's wgmmas run, into the other of two buffers). Each
 * 8-deep k step issues three m64nBMk8 wgmmas per warpgroup (small x big, big x small, big x
 * big); warpgroup w owns C^T rows (C columns) n0 + 64 w .. + 63, all BM columns (C rows). */
static void emit_wgmma_helpers(const gemm_emit *e)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    int nd = c->bm / 2; /* accumulator floats per thread */
    kt_buf_printf(
        b,
        "\n/* ---- wgmma: tile layout, descriptor, fences ---- */\n"
        "/* Float offset of (row, k) in a tile of 128-byte rows in the 128-byte swizzle: the "
        "16-byte\n"
        " * chunk index XORed with row %% 8 (tiles start 1024-byte aligned). */\n"
        "__device__ __forceinline__ int ktw_off(int row, int k)\n"
        "{\n"
        "    return row * 32 + ((((k >> 2) ^ row) & 7) << 2) + (k & 3);\n"
        "}\n"
        "/* Descriptor of a K-major operand in such a tile: 128-byte swizzle (bits 62-63), 8-row\n"
        " * groups 1024 bytes apart (stride offset, bits 32-45); the leading offset is unused "
        "while a\n"
        " * k8 step stays inside one 128-byte row. A k step of 8 floats adds 32 bytes (2 in the\n"
        " * address field's 16-byte unit). */\n"
        "__device__ __forceinline__ unsigned long long ktw_desc(const void *p)\n"
        "{\n"
        "    return (unsigned long long)((kt_smem_u32(p) & 0x3FFFF) >> 4) | 1ull << 16 |\n"
        "           (1024ull >> 4) << 32 | 1ull << 62;\n"
        "}\n"
        "__device__ __forceinline__ void ktw_fence()\n"
        "{\n"
        "    asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n"
        "}\n"
        "__device__ __forceinline__ void ktw_commit()\n"
        "{\n"
        "    asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n"
        "}\n"
        "__device__ __forceinline__ void ktw_wait()\n"
        "{\n"
        "    asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" ::: \"memory\");\n"
        "}\n"
        "/* Shared-memory writes of the generic proxy (cp.async, the small halves) become visible "
        "to\n"
        " * wgmma's async proxy. */\n"
        "__device__ __forceinline__ void ktw_fence_proxy()\n"
        "{\n"
        "    asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n"
        "}\n"
        "/* Keeps the in-flight wgmmas' A fragments live (and their registers untouched) until\n"
        " * their wait: ptxas does not know the wgmmas read them after issue. */\n"
        "__device__ __forceinline__ void ktw_pin(const unsigned (&a)[4][4], const unsigned "
        "(&b)[4][4])\n"
        "{\n"
        "#pragma unroll\n"
        "    for (int i = 0; i < 4; i++)\n"
        "#pragma unroll\n"
        "        for (int r = 0; r < 4; r++)\n"
        "            asm volatile(\"\" ::\"r\"(a[i][r]), \"r\"(b[i][r]) : \"memory\");\n"
        "}\n"
        "/* After the wait: the sums are read only from here on (the compiler sees wgmma write "
        "them\n"
        " * when it is issued, not when it completes). */\n"
        "__device__ __forceinline__ void ktw_hold(float (&d)[BM / 8][4])\n"
        "{\n"
        "#pragma unroll\n"
        "    for (int j = 0; j < BM / 8; j++)\n"
        "#pragma unroll\n"
        "        for (int r = 0; r < 4; r++)\n"
        "            asm volatile(\"\" : \"+f\"(d[j][r])::\"memory\");\n"
        "}\n"
        "/* d += a x b: m64n%dk8, tf32 operands, fp32 sums; a is this warp's 16 x 8 fragment of "
        "the\n"
        " * warpgroup's 64 x 8 A (m16n8k8 layout), b a descriptor of the 8 x %d B. */\n"
        "__device__ __forceinline__ void ktw_mma(float (&d)[BM / 8][4], const unsigned (&a)[4], "
        "unsigned long long db)\n"
        "{\n"
        "    asm volatile(\"{\\n.reg .pred p;\\nsetp.eq.u32 p, 1, 1;\\n\"\n"
        "                 \"wgmma.mma_async.sync.aligned.m64n%dk8.f32.tf32.tf32 {",
        c->bm, c->bm, c->bm);
    for (int i = 0; i < nd; i++)
        kt_buf_printf(b, "%s%%%d", i ? "," : "", i);
    kt_buf_printf(b, "}, {%%%d,%%%d,%%%d,%%%d}, %%%d, p, 1, 1;\\n}\\n\"\n", nd, nd + 1, nd + 2,
                  nd + 3, nd + 4);
    kt_buf_printf(b, "                 : ");
    for (int i = 0; i < nd; i++)
        kt_buf_printf(b, "%s\"+f\"(d[%d][%d])%s", i ? " " : "", i / 4, i % 4,
                      i + 1 < nd ? (i % 4 == 3 ? ",\n                   " : ",") : "\n");
    kt_buf_printf(b, "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), "
                     "\"l\"(db));\n}\n");
}

#define SPLIT_THREADS 256

/* mma=wgmma_split's first kernel: A's small halves (x - big, big = x's top 19 bits) into the
 * workspace, same [M][K] layout, 16 bytes a thread per step (K % 4 == 0). */
static void emit_split_kernel(const gemm_emit *e)
{
    kt_buf *b = e->b;
    kt_buf_printf(b, "\n/* A's small halves into the workspace, read by the wgmma kernel's tile "
                     "copies. */\n");
    kt_buf_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) ktune_gemm_split_a%s",
                  SPLIT_THREADS, e->p->grp->entry_suffix);
    emit_kernel_params(e, true);
    kt_buf_printf(b, "\n{\n");
    b->indent = 4;
    kt_buf_line(b, "const float4 *__restrict__ a = reinterpret_cast<const float4 *>(%s);",
                in_name(e, e->p->src[0]));
    kt_buf_line(b, "float4 *__restrict__ small = static_cast<float4 *>(workspace);");
    kt_buf_line(b,
                "for (idx_t i = (idx_t)blockIdx.x * %d + threadIdx.x; i < (idx_t)M * K / 4; "
                "i += (idx_t)gridDim.x * %d) {",
                SPLIT_THREADS, SPLIT_THREADS);
    kt_buf_line(b, "    float4 v = a[i];");
    kt_buf_line(b, "    v.x -= __uint_as_float(__float_as_uint(v.x) & 0xffffe000u);");
    kt_buf_line(b, "    v.y -= __uint_as_float(__float_as_uint(v.y) & 0xffffe000u);");
    kt_buf_line(b, "    v.z -= __uint_as_float(__float_as_uint(v.z) & 0xffffe000u);");
    kt_buf_line(b, "    v.w -= __uint_as_float(__float_as_uint(v.w) & 0xffffe000u);");
    kt_buf_line(b, "    small[i] = v;");
    kt_buf_line(b, "}");
    b->indent = 0;
    kt_buf_printf(b, "}\n");
}

static void emit_wgmma_kernel(const gemm_emit *e, const char *entry)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    kt_buf_printf(b,
                  "\n/* Block: a BM x BN output tile of batch bz, computed as its transpose by %d "
                  "warpgroup%s. */\n",
                  c->threads / 128, c->threads > 128 ? "s" : "");
    kt_buf_printf(b, "extern \"C\" __global__ void __launch_bounds__(THREADS, 1) %s", entry);
    emit_kernel_params(e, c->presplit);
    kt_buf_printf(b, "\n{\n");
    b->indent = 4;
    bool bt = e->p->trans[1], ps = c->presplit;
    if (bt)
        kt_buf_line(b, "constexpr int A_TILE = BM * 32, B_TILE = BN * 32; /* B rows [n][k], "
                       "swizzled like A's */");
    else
        kt_buf_line(b, "constexpr int LDB = BN + 8; /* B tile row pitch (floats): fragment reads "
                       "hit 32 banks */");
    if (!bt)
        kt_buf_line(b, "constexpr int A_TILE = BM * 32, B_TILE = 32 * LDB;");
    kt_buf_line(b, "extern __shared__ unsigned char kt_smem_raw[];");
    kt_buf_line(b,
                "/* [STAGES] raw A tiles, [%s] A_small tiles (1024-byte aligned for the "
                "swizzle), [STAGES] B tiles */",
                ps ? "STAGES" : "2");
    kt_buf_line(b, "float *as = reinterpret_cast<float *>((reinterpret_cast<unsigned long "
                   "long>(kt_smem_raw) + 1023) & ~1023ull);");
    kt_buf_line(b, "float *asmall = as + STAGES * A_TILE, *bs = asmall + %s * A_TILE;",
                ps ? "STAGES" : "2");
    kt_buf_line(b, "const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;");
    kt_buf_line(b, "const int nw = tid / 128 * 64 + (tid / 32 & 3) * 16; /* this warp's 16 C "
                   "columns (wgmma A rows) */");
    kt_buf_line(b, "int tile_m, tile_n;");
    kt_buf_line(b, "ktg_raster(blockIdx.x, tile_m, tile_n);");
    kt_buf_line(b, "const int m0 = tile_m * BM, n0 = tile_n * BN;");
    kt_buf_line(b, "const int bz = blockIdx.z;");
    emit_operand_pointers(e);
    if (ps)
        kt_buf_line(b, "const float *__restrict__ asg = static_cast<const float *>(workspace); "
                       "/* A's small halves */");
    kt_buf_line(b, "/* Copies k tile kt into stage st: A rows swizzled, B rows padded; 16 bytes a "
                   "copy, zero past the edges. */");
    kt_buf_line(b, "auto load_tile = [&](int kt, int st) {");
    b->indent = 8;
    kt_buf_line(b, "const int k0 = kt * 32;");
    kt_buf_line(b, "float *sa = as + st * A_TILE, *sb = bs + st * B_TILE;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = tid; i < BM * 8; i += THREADS) {");
    kt_buf_line(b, "    const int r = i >> 3, ch = i & 7, m = m0 + r, k = k0 + ch * 4;");
    kt_buf_line(b, "    const bool ok = m < M && k < K;");
    kt_buf_line(b, "    kt_cp_async16(sa + ktw_off(r, ch * 4), ag + (ok ? (idx_t)m * K + k : 0), "
                   "ok ? 16 : 0);");
    if (ps)
        kt_buf_line(b, "    kt_cp_async16(asmall + st * A_TILE + ktw_off(r, ch * 4), asg + (ok ? "
                       "(idx_t)m * K + k : 0), ok ? 16 : 0);");
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    if (bt) {
        kt_buf_line(b, "for (int i = tid; i < BN * 8; i += THREADS) {");
        kt_buf_line(b, "    const int r = i >> 3, ch = i & 7, n = n0 + r, k = k0 + ch * 4;");
        kt_buf_line(b, "    const bool ok = n < N && k < K;");
        kt_buf_line(b,
                    "    kt_cp_async16(sb + ktw_off(r, ch * 4), bg + (ok ? (idx_t)n * K + k : 0), "
                    "ok ? 16 : 0);");
    } else {
        kt_buf_line(b, "for (int i = tid; i < 32 * (BN / 4); i += THREADS) {");
        kt_buf_line(b,
                    "    const int r = i / (BN / 4), ch = i %% (BN / 4), k = k0 + r, n = n0 + ch "
                    "* 4;");
        kt_buf_line(b, "    const bool ok = k < K && n < N;");
        kt_buf_line(b, "    kt_cp_async16(sb + r * LDB + ch * 4, bg + (ok ? (idx_t)k * N + n : 0), "
                       "ok ? 16 : 0);");
    }
    kt_buf_line(b, "}");
    b->indent = 4;
    kt_buf_line(b, "};");
    if (!ps) {
        /* The small halves of stage st's A tile into A_small buffer sb (all threads). */
        kt_buf_line(
            b, "/* A's small halves, x - big with big = x's top 19 bits (what the tensor cores "
               "read of x) */");
        kt_buf_line(b, "auto make_small = [&](int st, int buf) {");
        kt_buf_line(b,
                    "    const float4 *raw = reinterpret_cast<const float4 *>(as + st * A_TILE);");
        kt_buf_line(b, "    float4 *small = reinterpret_cast<float4 *>(asmall + buf * A_TILE);");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int i = tid; i < A_TILE / 4; i += THREADS) {");
        kt_buf_line(b, "        float4 v = raw[i];");
        kt_buf_line(b, "        v.x -= __uint_as_float(__float_as_uint(v.x) & 0xffffe000u);");
        kt_buf_line(b, "        v.y -= __uint_as_float(__float_as_uint(v.y) & 0xffffe000u);");
        kt_buf_line(b, "        v.z -= __uint_as_float(__float_as_uint(v.z) & 0xffffe000u);");
        kt_buf_line(b, "        v.w -= __uint_as_float(__float_as_uint(v.w) & 0xffffe000u);");
        kt_buf_line(b, "        small[i] = v;");
        kt_buf_line(b, "    }");
        kt_buf_line(b, "    ktw_fence_proxy();");
        kt_buf_line(b, "};");
    }

    kt_buf_line(b, "/* This warp's B^T fragments of stage st's four k steps (k t, t + 4; columns "
                   "nw + g, + 8), split */");
    kt_buf_line(b, "auto load_frags = [&](int st, unsigned (&big)[4][4], unsigned (&lo)[4][4]) {");
    kt_buf_line(b, "    const float *sb = bs + st * B_TILE;");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int ks = 0; ks < 4; ks++) {");
    if (bt) {
        kt_buf_line(b, "        const int k = ks * 8 + t, n = nw + g;");
        kt_buf_line(b, "        kt_split_tf32(sb[ktw_off(n, k)], big[ks][0], lo[ks][0]);");
        kt_buf_line(b, "        kt_split_tf32(sb[ktw_off(n + 8, k)], big[ks][1], lo[ks][1]);");
        kt_buf_line(b, "        kt_split_tf32(sb[ktw_off(n, k + 4)], big[ks][2], lo[ks][2]);");
        kt_buf_line(b, "        kt_split_tf32(sb[ktw_off(n + 8, k + 4)], big[ks][3], lo[ks][3]);");
    } else {
        kt_buf_line(b, "        const float *f = sb + (ks * 8 + t) * LDB + nw + g;");
        kt_buf_line(b, "        kt_split_tf32(f[0], big[ks][0], lo[ks][0]);");
        kt_buf_line(b, "        kt_split_tf32(f[8], big[ks][1], lo[ks][1]);");
        kt_buf_line(b, "        kt_split_tf32(f[4 * LDB], big[ks][2], lo[ks][2]);");
        kt_buf_line(b, "        kt_split_tf32(f[4 * LDB + 8], big[ks][3], lo[ks][3]);");
    }
    kt_buf_line(b, "    }");
    kt_buf_line(b, "};");
    kt_buf_line(b, "float acc[BM / 8][4], part[BM / 8][4];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < BM / 8; j++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int r = 0; r < 4; r++)");
    kt_buf_line(b, "        acc[j][r] = part[j][r] = 0.0f;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int s = 0; s < STAGES - 1; s++) {");
    kt_buf_line(b, "    if (s < KTILES)");
    kt_buf_line(b, "        load_tile(s, s);");
    kt_buf_line(b, "    kt_cp_async_commit();");
    kt_buf_line(b, "}");
    kt_buf_line(b, "unsigned big[4][4], lo[4][4];");
    kt_buf_line(b, "kt_cp_async_wait<STAGES - 2>();");
    kt_buf_line(b, "__syncthreads();");
    /* cp.async wrote the tiles through the generic proxy; wgmma reads them through the async
     * proxy (make_small ends with the same fence) */
    kt_buf_line(b, ps ? "ktw_fence_proxy();" : "make_small(0, 0);");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "load_frags(0, big, lo);");
    kt_buf_line(b, "/* Tile kt's wgmmas run while the block prepares tile kt + 1: its copies "
                   "land and its small");
    kt_buf_line(b, " * halves are written to the other A_small buffer. */");
    kt_buf_line(b, "for (int kt = 0; kt < KTILES; kt++) {");
    b->indent = 8;
    kt_buf_line(b, "const int st = kt %% STAGES;");
    kt_buf_line(b,
                "const unsigned long long da = ktw_desc(as + st * A_TILE), ds = "
                "ktw_desc(asmall + %s * A_TILE);",
                ps ? "st" : "(kt & 1)");
    kt_buf_line(b, "ktw_fence();");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < 4; ks++) {");
    kt_buf_line(b, "    ktw_mma(part, lo[ks], da + 2 * ks);  /* B small x A big */");
    kt_buf_line(b, "    ktw_mma(part, big[ks], ds + 2 * ks); /* B big x A small */");
    kt_buf_line(b, "    ktw_mma(part, big[ks], da + 2 * ks); /* B big x A big */");
    kt_buf_line(b, "}");
    kt_buf_line(b, "ktw_commit();");
    kt_buf_line(b, "/* stage (kt - 1) %% STAGES: tile kt - 1's wgmmas were waited for by every "
                   "warpgroup */");
    kt_buf_line(b, "if (kt + STAGES - 1 < KTILES)");
    kt_buf_line(b, "    load_tile(kt + STAGES - 1, (kt + STAGES - 1) %% STAGES);");
    kt_buf_line(b, "kt_cp_async_commit();");
    kt_buf_line(b, "unsigned nbig[4][4], nlo[4][4];");
    kt_buf_line(b, "if (kt + 1 < KTILES) {");
    kt_buf_line(b, "    kt_cp_async_wait<STAGES - 2>(); /* tile kt + 1 has landed */");
    kt_buf_line(b, "    __syncthreads();");
    if (ps)
        kt_buf_line(b, "    ktw_fence_proxy();");
    else
        kt_buf_line(b, "    make_small((kt + 1) %% STAGES, (kt + 1) & 1);");
    kt_buf_line(b, "    load_frags((kt + 1) %% STAGES, nbig, nlo);");
    kt_buf_line(b, "}");
    kt_buf_line(b, "ktw_wait();");
    kt_buf_line(b, "ktw_pin(big, lo); /* the wgmmas read these registers until now */");
    kt_buf_line(b, "ktw_hold(part);");
    kt_buf_line(b, "/* the truncating sums of FLUSH_KTILES k tiles, carried into acc with "
                   "round-to-nearest FADDs */");
    kt_buf_line(b, "if ((kt + 1) %% FLUSH_KTILES == 0 || kt + 1 == KTILES) {");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < BM / 8; j++)");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int r = 0; r < 4; r++) {");
    kt_buf_line(b, "            acc[j][r] += part[j][r];");
    kt_buf_line(b, "            part[j][r] = 0.0f;");
    kt_buf_line(b, "        }");
    kt_buf_line(b, "}");
    kt_buf_line(b, "/* every warpgroup is done with tile kt (its stage and A_small buffer may be "
                   "rewritten) and");
    kt_buf_line(b, " * tile kt + 1's small halves are complete */");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < 4; ks++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int r = 0; r < 4; r++) {");
    kt_buf_line(b, "        big[ks][r] = nbig[ks][r];");
    kt_buf_line(b, "        lo[ks][r] = nlo[ks][r];");
    kt_buf_line(b, "    }");
    b->indent = 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "kt_cp_async_wait<0>();");
    /* epilogue */
    kt_buf args = {0};
    emit_store_args(e, &args);
    kt_buf_line(b, "/* acc[j][r] is C^T (n, m): n = n0 + nw + g (+ 8 for r >= 2), m = m0 + 8 j + "
                   "2 t + (r & 1) */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < BM / 8; j++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int r = 0; r < 4; r++)");
    kt_buf_line(b,
                "        ktg_store(%s, bz, m0 + 8 * j + 2 * t + (r & 1), n0 + nw + g + (r >> 1) "
                "* 8, acc[j][r]);",
                args.data ? args.data : "");
    kt_buf_free(&args);
    b->indent = 0;
    kt_buf_printf(b, "}\n");
}

static void emit_main_kernel(const gemm_emit *e, const char *entry)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    const char *sty = ops_emit_ctype(c->sdt);
    kt_buf_printf(b, "\n/* Block: a BM x BN output tile of batch bz%s; %d warps. */\n",
                  c->parallel  ? " over the k tiles of one split-K slice"
                  : c->serial  ? " over the k tiles of one split-K slice, summed in turn"
                  : c->cluster ? " over the k tiles of one split-K slice, summed in its cluster"
                               : "",
                  c->wm * c->wn);
    kt_buf_printf(b, "extern \"C\" __global__ void %s__launch_bounds__(THREADS, 1) %s",
                  c->cluster ? "__cluster_dims__(SPLITK, 1, 1) " : "", entry);
    emit_kernel_params(e, c->parallel || c->serial);
    kt_buf_printf(b, "\n{\n");
    b->indent = 4;
    kt_buf_line(b, "extern __shared__ __align__(128) unsigned char kt_smem[];");
    kt_buf_line(b, "%s *as = reinterpret_cast<%s *>(kt_smem); /* STAGES x A_STAGE */", sty, sty);
    kt_buf_line(b, "%s *bs = as + STAGES * A_STAGE;              /* STAGES x B_STAGE */", sty);
    kt_buf_line(b, "const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;");
    kt_buf_line(b, "const int wm0 = warp / WN * WTM, wn0 = warp %% WN * WTN;");
    kt_buf_line(b, "int tile_m, tile_n;");
    if (c->serial || c->cluster) {
        kt_buf_line(b, "/* the slices of a tile are adjacent blocks, lowest slice first */");
        kt_buf_line(b, "const int pid = blockIdx.x / SPLITK, slice = blockIdx.x %% SPLITK;");
        kt_buf_line(b, "ktg_raster(pid, tile_m, tile_n);");
    } else {
        kt_buf_line(b, "ktg_raster(blockIdx.x, tile_m, tile_n);");
    }
    kt_buf_line(b, "const int m0 = tile_m * BM, n0 = tile_n * BN;");
    if (c->serial || c->cluster) {
        kt_buf_line(b, "const int bz = blockIdx.z;");
        kt_buf_line(b, "const int kt0 = slice * KTILES_PER_SLICE;");
        kt_buf_line(b, "const int nkt = KTILES - kt0 < KTILES_PER_SLICE ? KTILES - kt0 : "
                       "KTILES_PER_SLICE;");
    } else if (c->parallel) {
        kt_buf_line(b, "const int bz = blockIdx.z / SPLITK, slice = blockIdx.z %% SPLITK;");
        kt_buf_line(b, "const int kt0 = slice * KTILES_PER_SLICE;");
        kt_buf_line(b, "const int nkt = KTILES - kt0 < KTILES_PER_SLICE ? KTILES - kt0 : "
                       "KTILES_PER_SLICE;");
    } else {
        kt_buf_line(b, "const int bz = blockIdx.z;");
        kt_buf_line(b, "const int kt0 = 0, nkt = KTILES;");
    }
    emit_operand_pointers(e);
    bool x3 = c->math == MATH_TF32X3;
    if (c->tc) {
        kt_buf_line(b, "float acc[MI][NI][4]%s;", x3 ? ", part[MI][NI][4]" : "");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MI; i++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < NI; j++)");
        kt_buf_line(b, "        acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;");
        if (x3) {
            kt_buf_line(b, "#pragma unroll");
            kt_buf_line(b, "for (int i = 0; i < MI; i++)");
            kt_buf_line(b, "    #pragma unroll");
            kt_buf_line(b, "    for (int j = 0; j < NI; j++)");
            kt_buf_line(
                b, "        part[i][j][0] = part[i][j][1] = part[i][j][2] = part[i][j][3] = 0.0f;");
        }
    } else {
        kt_buf_line(b, "const int am = wm0 + lane / LX, bn = wn0 + lane %% LX;");
        kt_buf_line(b, "float acc[TM][TN];");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < TM; i++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < TN; j++)");
        kt_buf_line(b, "        acc[i][j] = 0.0f;");
    }
    kt_buf_line(
        b, "/* Pipeline prologue: k tiles 0 .. STAGES - 2 in flight, one commit group each. */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int s = 0; s < STAGES - 1; s++) {");
    kt_buf_line(b, "    if (s < nkt)");
    kt_buf_line(b,
                "        ktg_load_tiles(as + s * A_STAGE, bs + s * B_STAGE, ag, bg, m0, n0, (kt0 "
                "+ s) * BK);");
    kt_buf_line(b, "    kt_cp_async_commit();");
    kt_buf_line(b, "}");
    kt_buf_line(b, "for (int i = 0; i < nkt; i++) {");
    b->indent = 8;
    kt_buf_line(b, "/* Tile i has landed once at most STAGES - 2 younger groups are pending; the "
                   "barrier also");
    kt_buf_line(b, " * tells every warp is done with stage (i - 1) %% STAGES, refilled next. */");
    kt_buf_line(b, "kt_cp_async_wait<STAGES - 2>();");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "const int next = i + STAGES - 1;");
    kt_buf_line(b, "if (next < nkt)");
    kt_buf_line(b,
                "    ktg_load_tiles(as + next %% STAGES * A_STAGE, bs + next %% STAGES * B_STAGE, "
                "ag, bg, m0, n0, (kt0 + next) * BK);");
    kt_buf_line(b, "kt_cp_async_commit();");
    if (c->tc && x3) {
        kt_buf_line(b, "ktg_stage(as + i %% STAGES * A_STAGE, bs + i %% STAGES * B_STAGE, wm0, "
                       "wn0, lane, part);");
        kt_buf_line(b, "if ((i + 1) %% FLUSH_KTILES == 0 || i + 1 == nkt)");
        kt_buf_line(b, "    ktg_flush(acc, part);");
    } else if (c->tc)
        kt_buf_line(b,
                    "ktg_stage(as + i %% STAGES * A_STAGE, bs + i %% STAGES * B_STAGE, wm0, wn0, "
                    "lane, acc);");
    else
        kt_buf_line(b, "ktg_stage(as + i %% STAGES * A_STAGE, bs + i %% STAGES * B_STAGE, am, bn, "
                       "acc);");
    b->indent = 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "kt_cp_async_wait<0>();");

    /* Epilogue: fused chain and store, or the fp32 partial of this slice. */
    kt_buf args = {0};
    emit_store_args(e, &args);
    const char *a = args.data ? args.data : "";
    if (c->parallel)
        kt_buf_line(b, "float *ws = static_cast<float *>(workspace);");
    if (c->serial)
        emit_serial_epilogue(e);
    if (c->cluster)
        emit_cluster_epilogue(e);
    if (c->tc) {
        kt_buf_line(b, "/* Accumulator (i, j) holds rows g, g + 8 and columns 2t, 2t + 1 of its "
                       "16 x 8 mma tile. */");
        kt_buf_line(b, "const int g = lane >> 2, t = lane & 3;");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MI; i++) {");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < NI; j++) {");
        b->indent = 12;
        if (c->cluster) {
            kt_buf_line(b, "if ((i * NI + j) %% SPLITK != slice)");
            kt_buf_line(b, "    continue; /* another slice's share */");
        }
        kt_buf_line(b, "const int m = m0 + wm0 + i * 16 + g, n = n0 + wn0 + j * 8 + 2 * t;");
        if (c->parallel) {
            kt_buf_line(b, "ktg_partial2(ws, slice, bz, m, n, acc[i][j][0], acc[i][j][1]);");
            kt_buf_line(b, "ktg_partial2(ws, slice, bz, m + 8, n, acc[i][j][2], acc[i][j][3]);");
        } else {
            kt_buf_line(b, "ktg_store2(%s, bz, m, n, acc[i][j][0], acc[i][j][1]);", a);
            kt_buf_line(b, "ktg_store2(%s, bz, m + 8, n, acc[i][j][2], acc[i][j][3]);", a);
        }
        b->indent = 4;
        kt_buf_line(b, "    }");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < TM; i++) {");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < TN; j++) {");
        b->indent = 12;
        if (c->cluster) {
            kt_buf_line(b, "if ((i * TN + j) %% SPLITK != slice)");
            kt_buf_line(b, "    continue; /* another slice's share */");
        }
        kt_buf_line(b, "const int m = m0 + am + i * LY, n = n0 + bn + j * LX;");
        if (c->parallel)
            kt_buf_line(b, "ktg_partial(ws, slice, bz, m, n, acc[i][j]);");
        else
            kt_buf_line(b, "ktg_store(%s, bz, m, n, acc[i][j]);", a);
        b->indent = 4;
        kt_buf_line(b, "    }");
        kt_buf_line(b, "}");
    }
    kt_buf_free(&args);
    b->indent = 0;
    kt_buf_printf(b, "}\n");
}

#define REDUCE_THREADS 256

static int64_t reduce_items(const gemm_problem *p)
{
    int64_t total = p->batch * p->M * p->N;
    return p->N % 2 == 0 ? total / 2 : total;
}

static void emit_reduce_kernel(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    kt_buf *b = e->b;
    bool pair = p->N % 2 == 0;
    kt_buf args = {0};
    emit_store_args(e, &args);
    kt_buf_printf(b,
                  "\n/* Split-K reduction: sums the SPLITK fp32 partials of %s in slice order "
                  "(deterministic),\n * then applies the epilogue. */\n",
                  pair ? "two adjacent elements" : "one element");
    kt_buf_printf(b,
                  "extern \"C\" __global__ void __launch_bounds__(%d) ktune_gemm_splitk_reduce%s",
                  REDUCE_THREADS, e->p->grp->entry_suffix);
    emit_kernel_params(e, true);
    kt_buf_printf(b, "\n{\n");
    b->indent = 4;
    kt_buf_line(b, "const float *__restrict__ ws = static_cast<const float *>(workspace);");
    kt_buf_line(b, "constexpr idx_t TOTAL = (idx_t)BATCH * M * N;");
    kt_buf_line(b, "const idx_t e = ((idx_t)blockIdx.x * %d + threadIdx.x)%s;", REDUCE_THREADS,
                pair ? " * 2" : "");
    kt_buf_line(b, "if (e >= TOTAL)");
    kt_buf_line(b, "    return;");
    if (pair) {
        kt_buf_line(b, "float s0 = 0.0f, s1 = 0.0f;");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int s = 0; s < SPLITK; s++) {");
        kt_buf_line(b,
                    "    const float2 v = *reinterpret_cast<const float2 *>(ws + s * TOTAL + e);");
        kt_buf_line(b, "    s0 += v.x;");
        kt_buf_line(b, "    s1 += v.y;");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "float s0 = 0.0f;");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int s = 0; s < SPLITK; s++)");
        kt_buf_line(b, "    s0 += ws[s * TOTAL + e];");
    }
    kt_buf_line(b, "const int n = (int)(e %% N), m = (int)(e / N %% M), bz = (int)(e / ((idx_t)M "
                   "* N));");
    if (pair)
        kt_buf_line(b, "ktg_store2(%s, bz, m, n, s0, s1);", args.data ? args.data : "");
    else
        kt_buf_line(b, "ktg_store(%s, bz, m, n, s0);", args.data ? args.data : "");
    kt_buf_free(&args);
    b->indent = 0;
    kt_buf_printf(b, "}\n");
}

/* ---- family entry points ---- */

static bool gemm_matches(const ops_group *grp)
{
    gemm_problem p;
    return gemm_analyse(grp, &p) == 0;
}

static const char *gemm_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev)
{
    gemm_problem p;
    gemm_cfg c;
    if (gemm_analyse(grp, &p) < 0)
        return "shape";
    gemm_configure(&p, s, dev, &c);
    return c.why;
}

/* Schedules are enumerated math, bm, bn, bk, wm, wn first: a (math, tile, warps) both kernels
 * reject (most of the space on small problems) skips the other knobs' 648 combinations. */
static const char *gemm_prune_prefix(const ops_group *grp, const ops_schedule *s,
                                     const ops_device *dev)
{
    gemm_problem p;
    gemm_cfg c;
    if (gemm_analyse(grp, &p) < 0)
        return "shape";
    gemm_configure(&p, s, dev, &c);
    const char *why = sync_prefix_why(&p, &c, dev);
    return why && wgmma_prefix_why(&p, &c, dev) ? why : NULL;
}

static void fill_args(const gemm_problem *p, ops_kernel_launch *k, bool workspace)
{
    k->n_args = 0;
    for (int i = 0; i < p->grp->n_in; i++)
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = p->grp->in[i]};
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = p->out};
    if (workspace)
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 0};
}

static int gemm_emit_fn(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                        ops_emitted *out, ops_diag *d)
{
    gemm_problem p;
    gemm_cfg c;
    memset(out, 0, sizeof(*out));
    if (gemm_analyse(grp, &p) < 0)
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "gemm: the group is not a matmul with a cast prologue and an "
                            "elementwise epilogue");
    gemm_configure(&p, s, dev, &c);
    /* "redundant" schedules are legal, only not worth searching; emit them on request. */
    if (c.why && strcmp(c.why, "redundant") != 0) {
        char sched[256];
        ops_schedule_format(s, sched, sizeof(sched));
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "gemm: schedule '%s' is not legal here (%s)", sched, c.why);
    }
    kt_buf b = {0};
    gemm_emit e = {.b = &b, .p = &p, .c = &c};
    for (int i = 0; i < grp->n_in; i++)
        param_name(grp->g, grp->in[i], e.names[i], sizeof(e.names[i]));
    param_name(grp->g, p.out, e.names[grp->n_in], sizeof(e.names[grp->n_in]));

    char entry[64];
    main_entry(&c, grp->entry_suffix, entry, sizeof(entry));
    ops_emit_begin(&b, grp, s, out);
    emit_constants(&e);
    emit_ptx_helpers(&e);
    if (c.serial)
        emit_serial_helpers(&e);
    if (c.cluster)
        emit_cluster_helpers(&e);
    emit_raster(&e);
    if (c.wgmma) {
        emit_wgmma_helpers(&e);
    } else {
        kt_buf_printf(&b, "\n/* ---- shared-memory layouts and tile loaders ---- */\n");
        emit_slot_fn(&e, 0);
        emit_slot_fn(&e, 1);
        emit_loader(&e, 0);
        emit_loader(&e, 1);
        emit_load_tiles(&e);
        if (c.tc)
            emit_mma_stage(&e);
        else
            emit_ffma_stage(&e);
    }
    int rc = emit_epilogue(&e);
    if (rc < 0) {
        kt_buf_free(&b);
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "", "gemm: epilogue not elementwise");
    }
    if (c.presplit)
        emit_split_kernel(&e);
    if (c.wgmma)
        emit_wgmma_kernel(&e, entry);
    else
        emit_main_kernel(&e, entry);
    if (c.parallel)
        emit_reduce_kernel(&e);
    if ((rc = kt_buf_status(&b)) < 0) {
        kt_buf_free(&b);
        return rc;
    }

    out->source = kt_buf_take(&b);
    if (c.presplit) {
        ops_kernel_launch *ks = &out->kernels[out->n_kernels++];
        snprintf(ks->entry, sizeof(ks->entry), "ktune_gemm_split_a%s", grp->entry_suffix);
        int64_t blocks = cdiv(p.M * p.K / 4, SPLIT_THREADS);
        ks->grid[0] = (uint32_t)(blocks < 8 * dev->sm_count ? blocks : 8 * dev->sm_count);
        ks->grid[1] = ks->grid[2] = 1;
        ks->block[0] = SPLIT_THREADS;
        ks->block[1] = ks->block[2] = 1;
        fill_args(&p, ks, true);
        out->workspace_bytes = p.M * p.K * 4;
    }
    ops_kernel_launch *k = &out->kernels[out->n_kernels++];
    snprintf(k->entry, sizeof(k->entry), "%s", entry);
    bool slices_in_x = c.serial || c.cluster; /* a tile's slices are adjacent blocks */
    k->grid[0] = (uint32_t)(c.tiles_m * c.tiles_n * (slices_in_x ? c.splitk : 1));
    k->grid[1] = 1;
    k->grid[2] = (uint32_t)(p.batch * (slices_in_x ? 1 : c.splitk));
    k->block[0] = (uint32_t)c.threads;
    k->block[1] = k->block[2] = 1;
    k->smem_bytes = (uint32_t)c.smem_bytes;
    fill_args(&p, k, c.parallel || c.serial || c.presplit);
    if (c.serial) {
        k->zero_workspace = true; /* the semaphores start at 0 */
        out->workspace_bytes = serial_workspace_bytes(&p, &c);
    }
    if (c.parallel) {
        out->workspace_bytes = (int64_t)c.splitk * p.batch * p.M * p.N * 4;
        k = &out->kernels[out->n_kernels++];
        snprintf(k->entry, sizeof(k->entry), "ktune_gemm_splitk_reduce%s", grp->entry_suffix);
        k->grid[0] = (uint32_t)cdiv(reduce_items(&p), REDUCE_THREADS);
        k->grid[1] = k->grid[2] = 1;
        k->block[0] = REDUCE_THREADS;
        k->block[1] = k->block[2] = 1;
        fill_args(&p, k, true);
    }
    return 0;
}

/* ---- cost model ----
 * seconds = max(DRAM bytes / bandwidth, L2->SM bytes / L2 bandwidth, executed flops / (peak *
 * efficiency)) + launch latency per kernel (+ the serial split-K hand-off chain). The efficiency
 * multiplies: wave quantisation (blocks over sm_count x resident blocks per SM), the warp tile's
 * shared-memory intensity, latency hiding from resident warps and pipeline depth, the k-loop's fill
 * and drain, and for mma.sync on sm_90 a 0.6 factor (the wgmma peak is out of its reach). */

static void gemm_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                          ops_estimate *est)
{
    gemm_problem p;
    gemm_cfg c;
    memset(est, 0, sizeof(*est));
    if (gemm_analyse(grp, &p) < 0) {
        est->seconds = INFINITY;
        return;
    }
    gemm_configure(&p, s, dev, &c);
    const ops_graph *g = grp->g;
    double B = (double)p.batch, M = (double)p.M, N = (double)p.N, K = (double)p.K;
    est->flops = 2.0 * B * M * N * K;
    double exec = 2.0 * B * (double)(c.tiles_m * c.bm) * (double)(c.tiles_n * c.bn) *
                  (double)(c.ktiles * c.bk);

    /* DRAM: every input and the output once, the split-K workspace written and read back, and
     * re-reads of A and B when they do not stay in L2 (grouped rasterisation cuts those). */
    double bytes = 0;
    for (int i = 0; i < grp->n_in; i++) {
        const ops_tensor *t = &g->tensors[grp->in[i]];
        bytes += (double)ops_shape_numel(&t->shape) * (double)ops_dtype_size(t->dtype);
    }
    double obytes = B * M * N * (double)ops_dtype_size(g->tensors[p.out].dtype);
    bytes += obytes;
    double ab =
        B * K * (M * (double)ops_dtype_size(p.src_dt[0]) + N * (double)ops_dtype_size(p.src_dt[1]));
    double l2_traffic = B * (double)(c.tiles_m * c.tiles_n) * (double)(c.ktiles * c.bk) *
                        ((double)c.bm * (double)ops_dtype_size(p.src_dt[0]) +
                         (double)c.bn * (double)ops_dtype_size(p.src_dt[1]));
    if (ab > (double)dev->l2_bytes / 2)
        bytes += l2_traffic * (c.raster > 1 ? 0.05 : 0.15);
    double ws = c.parallel ? (double)c.splitk * B * M * N * 4.0 : 0;
    est->bytes = bytes + 2 * ws;
    /* Serial split-K: the workspace zeroed, and the running sums of every tile written and read
     * back once per hand-off (SPLITK - 1 of them). */
    double sws = c.serial ? (double)serial_workspace_bytes(&p, &c) : 0;
    double tile_bytes = (double)c.bm * c.bn * 4.0;
    if (c.serial)
        est->bytes += sws + 2.0 * (c.splitk - 1) * B * (double)(c.tiles_m * c.tiles_n) * tile_bytes;

    /* Residency: blocks per SM by threads, shared memory, registers. */
    int regs = c.regs < 32 ? 32 : c.regs;
    int64_t per_sm = dev->max_threads_per_sm / c.threads;
    int64_t by_smem = dev->smem_per_sm / (c.smem_bytes + 1024);
    int64_t by_regs = dev->regs_per_sm / ((int64_t)regs * c.threads);
    if (by_smem < per_sm)
        per_sm = by_smem;
    if (by_regs < per_sm)
        per_sm = by_regs;
    if (dev->max_blocks_per_sm < per_sm)
        per_sm = dev->max_blocks_per_sm;
    if (per_sm < 1)
        per_sm = 1;
    est->occupancy = (double)(per_sm * c.threads) / dev->max_threads_per_sm;
    if (est->occupancy > 1)
        est->occupancy = 1;
    double blocks = B * (double)(c.tiles_m * c.tiles_n) * c.splitk;
    double slots = (double)dev->sm_count * (double)per_sm;
    double waves = blocks / slots;
    double wave_eff = waves / ceil(waves);
    double sm_used = blocks < dev->sm_count ? blocks / dev->sm_count : 1.0;

    double peak = dev->fp32_flops_per_s, eff;
    if (c.tc) {
        peak = c.math == MATH_TF32     ? dev->tf32_flops_per_s
               : c.math == MATH_TF32X3 ? dev->tf32_flops_per_s / 3.0 /* three mmas a product */
                                       : dev->f16_flops_per_s;
        if (dev->sm_major >= 9 && !c.wgmma)
            peak *= 0.6;
        double intensity = (double)c.wtm * c.wtn / (c.wtm + c.wtn); /* flops per smem element */
        eff = fmin(1.0, sqrt(intensity / 32.0));
        if (c.op[0].scalar_frag || c.op[1].scalar_frag)
            eff *= 0.85;
        if (c.smem == SMEM_PAD)
            eff *= 0.94; /* measured on the H100 against XOR at 4096^3 */
    } else {
        double intensity = (double)c.tm * c.tn / (c.tm + c.tn);
        eff = fmin(1.0, sqrt(intensity / 4.0));
    }
    if (c.wgmma) /* measured on the H100 at 2048^3: the tensor pipe 42% busy (a wait and a
                    block barrier per k tile, two warps per scheduler); without the in-kernel
                    small-halves pass (wgmma_split) the loop ran 19% faster there */
        eff *= c.presplit ? 0.7 : 0.6;
    int block_warps = c.threads / 32;
    if (block_warps > 4) /* a barrier stalls more warps at once */
        eff /= 1.0 + 0.04 * (block_warps - 4);
    double warps = est->occupancy * dev->max_threads_per_sm / 32.0;
    eff *= 0.5 + 0.5 * fmin(1.0, warps / 8.0);
    static const double stage_eff[5] = {0, 0, 0.85, 0.95, 1.0};
    eff *= stage_eff[c.stages < 4 ? c.stages : 4];
    for (int k = 0; k < 2; k++)
        if (!c.op[k].vb)
            eff *= 0.75; /* synchronous register loads stall the pipeline */
    eff *= (double)c.kps / (double)(c.kps + 1);
    eff *= wave_eff;

    double t_math = exec / (peak * eff);
    double t_dram = bytes / (dev->dram_bytes_per_s * fmin(1.0, 2.0 * sm_used));
    double t_l2 = l2_traffic / (3.0 * dev->dram_bytes_per_s * fmin(1.0, 2.0 * sm_used));
    double t = fmax(t_math, fmax(t_dram, t_l2)) + 2e-6;
    if (c.parallel) /* the reduction kernel reads the partials and applies the epilogue */
        t += (ws + bytes - ab) / dev->dram_bytes_per_s + 2e-6;
    if (c.presplit) /* the split kernel reads A and writes its small halves, then a launch */
        t += 8.0 * (double)(p.M * p.K) / dev->dram_bytes_per_s + 2e-6;
    if (c.serial) {
        /* The slices of a tile finish their k loops together and then add up one at a time:
         * per hand-off a fence and a semaphore round trip through L2 (~0.5 us) and one block
         * reading and writing a BM x BN fp32 tile at its SM's share of L2 bandwidth; plus the
         * memset of the workspace before the launch. */
        double sm_l2 = 3.0 * dev->dram_bytes_per_s / dev->sm_count;
        t += (c.splitk - 1) * (0.5e-6 + 2.0 * tile_bytes / sm_l2);
        t += 0.5e-6 + sws / dev->dram_bytes_per_s;
    }
    if (c.cluster) {
        /* Two cluster barriers, each block reading a tile's worth of partials from the
         * cluster's shared memory, and a cluster's blocks placed together in one GPC: on the
         * H100 (KernelBench's 128 x 1024 x 512, split-K 8) the best cluster schedule ran 5%
         * slower than the best parallel one, whose reduction kernel is estimated at ~3.5 us. */
        double sm_l2 = 3.0 * dev->dram_bytes_per_s / dev->sm_count;
        t += 3.5e-6 + tile_bytes / sm_l2;
    }
    est->seconds = t;
}

const ops_family ops_family_gemm = {
    .id = OPS_FAM_GEMM,
    .name = "gemm",
    .n_knobs = KN_COUNT,
    .knobs = gemm_knobs,
    .matches = gemm_matches,
    .prune = gemm_prune,
    .prefix_knobs = KN_WN + 1,
    .prune_prefix = gemm_prune_prefix,
    .emit = gemm_emit_fn,
    .estimate = gemm_estimate,
};
