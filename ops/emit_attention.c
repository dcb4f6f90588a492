/* The attention family: one fused flash-attention kernel per candidate.
 *
 * The group is one attention node (q [..., Sq, D], k [..., Skv, D], v [..., Skv, Dv], the batch
 * dims equal, as validation requires) plus, optionally, elementwise nodes computing the group's
 * single output from the attention output and broadcast inputs (a bias, a residual, a gate...).
 * Semantics are those of ops/reference.c: out = softmax(q k^T * scale) v, scale defaulting to
 * 1/sqrt(D), key j masked for query i when causal and j > i (top-left alignment).
 *
 * A block owns Bq consecutive queries of one batch entry and walks the key/value tiles of Bkv
 * keys with an online softmax: running row max m and row sum l in fp32, the output accumulator
 * rescaled by exp(m_old - m_new) whenever the max grows, a final division by l. Under causal
 * masking the tiles past the block's last query are never loaded and the q tiles are handed
 * out longest first (block x runs q tile gridDim.x - 1 - x).
 *
 * Two math paths:
 *   f16 / bf16  m16n8k16 mma.sync with fp32 accumulation. Each warp owns 16 (or 32) query rows;
 *               S = Q K^T lives in the accumulator registers, P is repacked to 16-bit in
 *               registers as the A operand of O += P V (ldmatrix.trans reads V). Tiles arrive
 *               through cp.async, either one buffer with K and V in separate groups (K of the
 *               next tile loads while P V runs) or two buffers (the whole next tile loads while
 *               this one is used). Shared rows are padded by 16 bytes or XOR-swizzled.
 *   ffma        f32 data under every precision (no tf32 path yet): a block-wide three-phase
 *               loop per tile, S micro-tiles per thread into shared memory, a warp per row for
 *               the softmax update, O micro-tiles in registers.
 *
 * Knob "mma" picks the tensor-core instruction of the f16 / bf16 path:
 *   sync   mma.sync as above (sm_80 and later).
 *   wgmma  Hopper's warpgroup MMA (sm_90a): each warpgroup (4 warps) owns 64 query rows, so
 *          BQ = 64 x warpgroups. S = Q K^T reads both operands from shared memory through
 *          matrix descriptors; O += P V takes P from registers (the S accumulators repacked to
 *          16 bits: wgmma's accumulator and A-fragment layouts per warp are those of m16n8k16)
 *          and V from shared memory as an N-major operand. Tiles are stored in the hardware's
 *          128-byte swizzle (64-column blocks of 128-byte rows, the 16-byte chunk index XORed
 *          with row % 8, 1024-byte aligned), filled by cp.async into rings of 2 or 3 buffers
 *          (knob "stages": three save one block barrier per tile). Each warpgroup pipelines
 *          itself (emit_wgmma_kernel says how); the softmax update and the store are the
 *          mma.sync path's. Head dims: D a multiple of 64, DV 64.
 */
#include "family.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { K_BQ, K_BKV, K_WARPS, K_STAGES, K_MATH, K_LAYOUT, K_QFRAG, K_EXP, K_MMA, N_KNOBS };
enum { MATH_FFMA = 0, MATH_F16 = 1, MATH_BF16 = 2 };
enum { LAYOUT_PAD = 0, LAYOUT_SWIZZLE = 1 };
enum { QFRAG_SMEM = 0, QFRAG_REGS = 1 };
enum { EXP_E = 0, EXP_2 = 1 };
enum { MMA_SYNC = 0, MMA_WGMMA = 1 };

static const char *const math_labels[] = {"ffma", "f16", "bf16"};
static const char *const layout_labels[] = {"pad", "swizzle"};
static const char *const qfrag_labels[] = {"smem", "regs"};
static const char *const exp_labels[] = {"exp", "exp2"};
static const char *const mma_labels[] = {"sync", "wgmma"};

static const ops_knob attention_knobs[N_KNOBS] = {
    [K_BQ] = {"bq", 3, {64, 128, 192}, NULL},
    [K_BKV] = {"bkv", 3, {32, 64, 128}, NULL},
    [K_WARPS] = {"warps", 3, {4, 8, 12}, NULL},
    [K_STAGES] = {"stages", 3, {1, 2, 3}, NULL},
    [K_MATH] = {"math", 3, {MATH_FFMA, MATH_F16, MATH_BF16}, math_labels},
    /* mma path only: shared-memory rows padded by 16 bytes, or 16-byte chunks XOR-swizzled */
    [K_LAYOUT] = {"smem", 2, {LAYOUT_PAD, LAYOUT_SWIZZLE}, layout_labels},
    /* mma path only: Q's A fragments re-read from shared memory per tile, or kept in registers */
    [K_QFRAG] = {"q", 2, {QFRAG_SMEM, QFRAG_REGS}, qfrag_labels},
    /* natural exp, or exp2 with log2(e) folded into the scale */
    [K_EXP] = {"exp", 2, {EXP_E, EXP_2}, exp_labels},
    /* 16-bit path only: mma.sync, or Hopper's warpgroup wgmma */
    [K_MMA] = {"mma", 2, {MMA_SYNC, MMA_WGMMA}, mma_labels},
};

/* Registers a thread may plan for; ptxas needs headroom for addresses and temporaries. */
#define MMA_REG_BUDGET  192
#define FFMA_REG_BUDGET 168
#define MAX_HEAD_DIM    256

/* What the emitter needs to know about the group. */
typedef struct attn_info {
    const ops_graph *g;
    const ops_node *att;
    int att_node;
    int32_t q, k, v, out; /* tensor indices; out is the group's output */
    ops_dtype dt, out_dt;
    int rank;      /* of q, k, v and out */
    int64_t batch; /* product of the batch dims */
    int64_t sq, skv, d, dv;
    double scale;
    bool causal;
    bool has_epilogue;
} attn_info;

static bool attn_analyse(const ops_group *grp, attn_info *a)
{
    const ops_graph *g = grp->g;
    memset(a, 0, sizeof(*a));
    a->g = g;
    a->att_node = -1;
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        if (n->op == OPS_ATTENTION) {
            if (a->att_node >= 0)
                return false;
            a->att_node = grp->nodes[i];
        } else if (!ops_is_elementwise(n->op)) {
            return false;
        }
    }
    if (a->att_node < 0 || grp->n_out != 1)
        return false;
    a->att = &g->nodes[a->att_node];
    a->q = a->att->in[0].tensor;
    a->k = a->att->in[1].tensor;
    a->v = a->att->in[2].tensor;
    a->out = grp->out[0];
    /* q, k and v come from outside: the family has no prologue. */
    for (int k = 0; k < 3; k++) {
        int32_t p = g->tensors[a->att->in[k].tensor].producer;
        if (p >= 0 && (grp->mask >> p & 1))
            return false;
    }
    const ops_tensor *ot = &g->tensors[a->att->out];
    /* Every other node computes one value per attention output element. */
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        if (grp->nodes[i] != a->att_node &&
            !ops_shape_same_sizes(&g->tensors[n->out].shape, &ot->shape))
            return false;
    }
    a->has_epilogue = grp->n_nodes > 1;
    const ops_tensor *q = &g->tensors[a->q], *k = &g->tensors[a->k], *v = &g->tensors[a->v];
    a->dt = q->dtype;
    a->out_dt = g->tensors[a->out].dtype;
    a->rank = q->shape.rank;
    if (k->shape.rank != a->rank || v->shape.rank != a->rank || ot->shape.rank != a->rank)
        return false;
    a->batch = 1;
    for (int i = 0; i < a->rank - 2; i++) {
        if (k->shape.d[i].size != q->shape.d[i].size || v->shape.d[i].size != q->shape.d[i].size)
            return false;
        a->batch *= q->shape.d[i].size;
    }
    a->sq = q->shape.d[a->rank - 2].size;
    a->d = q->shape.d[a->rank - 1].size;
    a->skv = k->shape.d[a->rank - 2].size;
    a->dv = v->shape.d[a->rank - 1].size;
    a->causal = a->att->attrs.causal;
    a->scale = a->att->attrs.has_scale ? a->att->attrs.scale : 1.0 / sqrt((double)a->d);
    return a->dt == OPS_DT_F32 || a->dt == OPS_DT_F16 || a->dt == OPS_DT_BF16;
}

static bool attention_matches(const ops_group *grp)
{
    attn_info a;
    return attn_analyse(grp, &a);
}

/* ---- schedule geometry, shared by prune, emit and estimate ---- */

typedef struct attn_geom {
    int bq, bkv, warps, threads, stages, math, layout, qfrag, exp2, wgmma;
    int mt;           /* mma: 16-row m tiles per warp (wgmma: 1, a warp's share of 64 rows) */
    int tx, ty;       /* ffma: thread grid (columns x rows) */
    int rq, rk, rd;   /* ffma: micro-tile rows, S columns, O columns per thread */
    int qs, ks, vs;   /* shared row strides in elements (ffma: ks is K^T's stride) */
    int64_t smem;     /* dynamic shared memory bytes */
    int regs;         /* planned registers per thread */
    int64_t q_tiles;  /* grid.x */
    int64_t kv_tiles; /* key tiles visited, summed over the q tiles of one batch entry */
} attn_geom;

static void attn_geometry(const attn_info *a, const ops_schedule *s, attn_geom *m)
{
    memset(m, 0, sizeof(*m));
    m->bq = s->v[K_BQ];
    m->bkv = s->v[K_BKV];
    m->warps = s->v[K_WARPS];
    m->threads = m->warps * 32;
    m->stages = s->v[K_STAGES];
    m->math = s->v[K_MATH];
    m->layout = s->v[K_LAYOUT];
    m->qfrag = s->v[K_QFRAG];
    m->exp2 = s->v[K_EXP] == EXP_2;
    m->wgmma = s->v[K_MMA] == MMA_WGMMA;
    int d = (int)a->d, dv = (int)a->dv;
    if (m->math == MATH_FFMA) {
        m->tx = 16;
        m->ty = m->threads / m->tx;
        m->rq = m->bq / m->ty;
        m->rk = m->bkv / m->tx;
        m->rd = dv / m->tx;
        /* Q rows and K^T rows padded by a word: the column walks hit distinct banks. */
        m->qs = d + 1;
        m->ks = m->bkv + 1;
        m->vs = dv;
        int64_t words = (int64_t)m->bq * m->qs + (int64_t)m->stages * d * m->ks +
                        (int64_t)m->stages * m->bkv * m->vs + (int64_t)m->bq * (m->bkv + 1) +
                        3 * (int64_t)m->bq;
        m->smem = 4 * words;
        m->regs = m->rq * m->rd + m->rq * m->rk + m->rq + m->rk + m->rd + 40;
    } else if (m->wgmma) {
        m->mt = 1;
        m->qs = m->ks = d;
        m->vs = dv;
        /* unpadded swizzled tiles, plus 1 KiB to align the first to 1024 bytes */
        m->smem = 2 * ((int64_t)m->bq * d + (int64_t)m->stages * m->bkv * (d + dv)) + 1024;
        /* S and O accumulators, P repacked (alive while the P V wgmmas run), statistics. */
        m->regs = m->bkv / 2 + dv / 2 + m->bkv / 4 + 40; /* ptxas 13.0: 110-203 */
    } else {
        m->mt = m->bq / (m->warps * 16);
        int pad = m->layout == LAYOUT_PAD ? 8 : 0;
        m->qs = d + pad;
        m->ks = d + pad;
        m->vs = dv + pad;
        m->smem = 2 * ((int64_t)m->bq * m->qs + (int64_t)m->stages * m->bkv * (m->ks + m->vs));
        /* Accumulators O and S, S counted 1.5 times (P is repacked from it while ptxas keeps
         * ldmatrix results in flight), Q fragments, row statistics, addresses. Calibrated on
         * ptxas 13.0 reports: D=128 with Bkv=128 spills, everything under the budget does not. */
        m->regs = m->mt * (dv / 8) * 4 + m->mt * (m->bkv / 8) * 6 +
                  (m->qfrag == QFRAG_REGS ? m->mt * (d / 16) * 4 : 0) + m->mt * 8 + 48;
    }
    m->q_tiles = (a->sq + m->bq - 1) / m->bq;
    for (int64_t t = 0; t < m->q_tiles; t++) {
        int64_t end = a->skv;
        if (a->causal) {
            int64_t last = (t + 1) * m->bq < a->sq ? (t + 1) * m->bq : a->sq;
            end = last < a->skv ? last : a->skv;
        }
        m->kv_tiles += (end + m->bkv - 1) / m->bkv;
    }
}

static const char *attention_prune(const ops_group *grp, const ops_schedule *s,
                                   const ops_device *dev)
{
    attn_info a;
    if (!attn_analyse(grp, &a))
        return "shape";
    attn_geom m;
    attn_geometry(&a, s, &m);
    if (a.sq < 1 || a.skv < 1 || a.batch < 1 || a.batch > 65535 || a.d > MAX_HEAD_DIM ||
        a.dv > MAX_HEAD_DIM)
        return "shape";
    if (m.math == MATH_FFMA) {
        /* f16/bf16 data always has its tensor-core path. */
        if (a.dt != OPS_DT_F32)
            return "redundant";
        if (m.layout != LAYOUT_PAD || m.qfrag != QFRAG_SMEM || m.wgmma || m.stages > 2)
            return "redundant"; /* knobs of the mma path */
        if (a.dv % m.tx != 0 || a.d < 1)
            return "shape";
        if (m.bq % m.ty != 0)
            return "divisibility";
        if (m.regs > FFMA_REG_BUDGET)
            return "regs";
    } else {
        /* The tensor-core path runs in the data's own 16-bit type (f32 data would need
         * "reduced" precision and a converting loader, which this family does not have). */
        if ((m.math == MATH_F16 && a.dt != OPS_DT_F16) ||
            (m.math == MATH_BF16 && a.dt != OPS_DT_BF16))
            return "shape";
        if (a.d % 16 != 0 || a.dv % 16 != 0)
            return "shape";
        if (m.layout == LAYOUT_SWIZZLE && (a.d % 64 != 0 || a.dv % 64 != 0))
            return "shape"; /* the swizzle permutes 8 chunks of 16 bytes */
        if (m.bq % (m.warps * 16) != 0)
            return "divisibility";
        if (dev->sm_major < 8)
            return "shape";
        if (m.wgmma) {
            /* Hopper only; the descriptors name 128-byte rows of 64-column blocks, and V's
             * single 64-column block along N */
            if (dev->sm_major != 9 || strcmp(dev->arch, "sm_90a") != 0)
                return "shape";
            if (a.d % 64 != 0 || a.dv != 64)
                return "shape";
            if (m.layout != LAYOUT_SWIZZLE || m.qfrag != QFRAG_SMEM || m.stages < 2)
                return "redundant"; /* the layout is the hardware's; Q is read by descriptor */
            if (m.bq != 16 * m.warps)
                return "divisibility"; /* a warpgroup per 64 query rows */
            if (m.bkv < 64)
                return "divisibility";
        } else if (m.warps > 8 || m.bq > 128 || m.stages > 2) {
            return "redundant"; /* 192-row tiles and 3-buffer rings are the wgmma path's */
        }
        if (m.regs > MMA_REG_BUDGET || m.regs > dev->regs_per_sm / m.threads)
            return "regs";
    }
    if (m.threads > dev->max_threads_per_block)
        return "threads";
    if (m.smem > dev->smem_per_block_optin)
        return "smem";
    return NULL;
}

/* ---- emission ---- */

/* Parameter name of group input i ("in0"...) and output ("out0"). */
static int input_index(const ops_group *grp, int32_t t)
{
    for (int i = 0; i < grp->n_in; i++)
        if (grp->in[i] == t)
            return i;
    return -1;
}

/* True when tensor t is produced by a node of the group. */
static bool in_group(const ops_group *grp, int32_t t)
{
    int32_t p = grp->g->tensors[t].producer;
    return p >= 0 && (grp->mask >> p & 1);
}

static void emit_params(kt_buf *b, const ops_group *grp)
{
    const ops_graph *g = grp->g;
    char c[OPS_EMIT_COMMENT_MAX];
    for (int i = 0; i < grp->n_in; i++) {
        const ops_tensor *t = &g->tensors[grp->in[i]];
        kt_buf_line(b, "const %s *__restrict__ in%d, /* %s */", ops_emit_ctype(t->dtype), i,
                    ops_emit_comment_text(t->name, c, sizeof(c)));
    }
    const ops_tensor *t = &g->tensors[grp->out[0]];
    kt_buf_line(b, "%s *__restrict__ out0) /* %s */", ops_emit_ctype(t->dtype),
                ops_emit_comment_text(t->name, c, sizeof(c)));
}

/* The epilogue as a device function: float value of one output element from the attention
 * output o at (batch entry bidx, row, col). */
static int emit_epilogue_fn(kt_buf *b, const ops_group *grp, const attn_info *a)
{
    const ops_graph *g = grp->g;
    /* The batch index is split into per-axis indices only when an input needs them. */
    bool need_batch = false;
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        for (int k = 0; k < n->n_in && grp->nodes[i] != a->att_node; k++) {
            int32_t t = n->in[k].tensor;
            if (t >= 0 && !in_group(grp, t) && g->tensors[t].shape.rank > 2)
                need_batch = true;
        }
    }
    kt_buf_line(b, "/* The fused epilogue: one output element from the attention output o. */");
    kt_buf_line(b, "__device__ __forceinline__ float kt_epilogue(float o, int bidx, int row, "
                   "int col,");
    b->indent += 4;
    for (int i = 0; i < grp->n_in; i++) {
        const ops_tensor *t = &g->tensors[grp->in[i]];
        kt_buf_line(b, "const %s *__restrict__ in%d%s", ops_emit_ctype(t->dtype), i,
                    i + 1 < grp->n_in ? "," : ")");
    }
    b->indent -= 4;
    kt_buf_line(b, "{");
    b->indent += 4;
    const ops_shape *os = &g->tensors[a->att->out].shape;
    char idx_names[OPS_MAX_RANK][16];
    const char *idx[OPS_MAX_RANK];
    for (int i = 0; i < os->rank; i++) {
        if (i == os->rank - 2)
            snprintf(idx_names[i], sizeof(idx_names[i]), "row");
        else if (i == os->rank - 1)
            snprintf(idx_names[i], sizeof(idx_names[i]), "col");
        else
            snprintf(idx_names[i], sizeof(idx_names[i]), "i%d", i);
        idx[i] = idx_names[i];
    }
    if (need_batch && os->rank > 2) {
        kt_buf_line(b, "int rest = bidx;");
        for (int i = os->rank - 3; i >= 0; i--) {
            if (i > 0)
                kt_buf_line(b, "const int i%d = rest %% %lld;", i, (long long)os->d[i].size);
            else
                kt_buf_line(b, "const int i0 = rest;");
            if (i > 0)
                kt_buf_line(b, "rest /= %lld;", (long long)os->d[i].size);
        }
    } else {
        kt_buf_line(b, "(void)bidx;");
    }
    for (int i = 0; i < grp->n_nodes; i++) {
        const ops_node *n = &g->nodes[grp->nodes[i]];
        if (grp->nodes[i] == a->att_node)
            continue;
        char ops[OPS_MAX_OPERANDS][512];
        const char *opp[OPS_MAX_OPERANDS] = {0};
        for (int k = 0; k < n->n_in; k++) {
            int32_t t = n->in[k].tensor;
            opp[k] = ops[k];
            if (t == OPS_SCALAR) {
                ops[k][0] = '\0';
            } else if (t == a->att->out) {
                snprintf(ops[k], sizeof(ops[k]), "o");
            } else if (in_group(grp, t)) {
                snprintf(ops[k], sizeof(ops[k]), "v%d", g->tensors[t].producer);
            } else {
                kt_buf ix = {0}, ld = {0};
                ops_emit_bcast_offset(&ix, &g->tensors[t].shape, os, idx);
                kt_buf_printf(&ld, "in%d[%s]", input_index(grp, t), ix.data ? ix.data : "0");
                kt_buf e = {0};
                ops_emit_to_float(&e, g->tensors[t].dtype, ld.data ? ld.data : "0");
                snprintf(ops[k], sizeof(ops[k]), "%s", e.data ? e.data : "0");
                int st = kt_buf_status(&ix) | kt_buf_status(&ld) | kt_buf_status(&e);
                kt_buf_free(&ix);
                kt_buf_free(&ld);
                kt_buf_free(&e);
                if (st)
                    return -ENOMEM;
            }
        }
        kt_buf_printf(b, "%*sconst float v%d = ", b->indent, "", grp->nodes[i]);
        if (ops_emit_elementwise(b, n, opp) < 0)
            return -EINVAL;
        char c[OPS_EMIT_COMMENT_MAX];
        kt_buf_printf(b, "; /* %s */\n",
                      ops_emit_comment_text(g->tensors[n->out].name, c, sizeof(c)));
    }
    kt_buf_line(b, "return v%d;", g->tensors[a->out].producer);
    b->indent -= 4;
    kt_buf_line(b, "}");
    return 0;
}

/* Arguments of the epilogue call: every group input. */
static void epilogue_args(kt_buf *b, const ops_group *grp)
{
    for (int i = 0; i < grp->n_in; i++)
        kt_buf_printf(b, ", in%d", i);
}

static const char mma_helpers[] =
    "/* ---- attention helpers: shared addresses, cp.async, ldmatrix, mma.sync ---- */\n"
    "#define KT_NEG_INF (-__int_as_float(0x7f800000))\n"
    "/* 2^x on the MUFU unit alone: exp2f adds a denormal-range fixup around it (three more\n"
    "   instructions per score); P is rounded to 16 bits, where such values are zero anyway. */\n"
    "__device__ __forceinline__ float kt_exp2(float x)\n"
    "{\n"
    "    float y;\n"
    "    asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x));\n"
    "    return y;\n"
    "}\n"
    "__device__ __forceinline__ unsigned kt_smem_u32(const void *p)\n"
    "{\n"
    "    unsigned a;\n"
    "    asm(\"{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\" : \"=r\"(a) : "
    "\"l\"(p));\n"
    "    return a;\n"
    "}\n"
    "/* 16-byte asynchronous copy; an invalid source reads nothing and zero-fills. */\n"
    "__device__ __forceinline__ void kt_cp_async16(unsigned dst, const void *src, bool valid)\n"
    "{\n"
    "    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\\n\" ::\"r\"(dst), "
    "\"l\"(src),\n"
    "                 \"r\"(valid ? 16 : 0));\n"
    "}\n"
    "__device__ __forceinline__ void kt_cp_async_commit()\n"
    "{\n"
    "    asm volatile(\"cp.async.commit_group;\\n\" ::);\n"
    "}\n"
    "template <int N> __device__ __forceinline__ void kt_cp_async_wait()\n"
    "{\n"
    "    asm volatile(\"cp.async.wait_group %0;\\n\" ::\"n\"(N) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void kt_ldmatrix_x4(unsigned (&r)[4], unsigned addr)\n"
    "{\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n\"\n"
    "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3])\n"
    "                 : \"r\"(addr));\n"
    "}\n"
    "__device__ __forceinline__ void kt_ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr)\n"
    "{\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, "
    "[%4];\\n\"\n"
    "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3])\n"
    "                 : \"r\"(addr));\n"
    "}\n";

static const char ffma_helpers[] =
    "/* ---- attention helpers: shared addresses, 4-byte cp.async ---- */\n"
    "#define KT_NEG_INF (-__int_as_float(0x7f800000))\n"
    "__device__ __forceinline__ unsigned kt_smem_u32(const void *p)\n"
    "{\n"
    "    unsigned a;\n"
    "    asm(\"{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\" : \"=r\"(a) : "
    "\"l\"(p));\n"
    "    return a;\n"
    "}\n"
    "/* 4-byte asynchronous copy; an invalid source reads nothing and zero-fills. */\n"
    "__device__ __forceinline__ void kt_cp_async4(unsigned dst, const void *src, bool valid)\n"
    "{\n"
    "    asm volatile(\"cp.async.ca.shared.global [%0], [%1], 4, %2;\\n\" ::\"r\"(dst), "
    "\"l\"(src),\n"
    "                 \"r\"(valid ? 4 : 0));\n"
    "}\n"
    "__device__ __forceinline__ void kt_cp_async_commit()\n"
    "{\n"
    "    asm volatile(\"cp.async.commit_group;\\n\" ::);\n"
    "}\n"
    "template <int N> __device__ __forceinline__ void kt_cp_async_wait()\n"
    "{\n"
    "    asm volatile(\"cp.async.wait_group %0;\\n\" ::\"n\"(N) : \"memory\");\n"
    "}\n";

/* The mma and the register repack in the data's 16-bit type. */
static void emit_mma_typed_helpers(kt_buf *b, const char *t)
{
    kt_buf_line(b, "/* c += a b: m16n8k16, %s operands, fp32 accumulators. */", t);
    kt_buf_line(b, "__device__ __forceinline__ void kt_mma(float (&c)[4], const unsigned (&a)[4], "
                   "unsigned b0, unsigned b1)");
    kt_buf_line(b, "{");
    kt_buf_line(b,
                "    asm(\"mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 {%%0, %%1, %%2, %%3}, "
                "{%%4, %%5, %%6, %%7}, {%%8, %%9}, {%%0, %%1, %%2, %%3};\\n\"",
                t, t);
    kt_buf_line(b, "        : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])");
    kt_buf_line(b, "        : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), "
                   "\"r\"(b1));");
    kt_buf_line(b, "}");
    kt_buf_line(b,
                "/* Two floats to a packed %s pair, lo in the low half (the order of mma "
                "fragments). */",
                t);
    kt_buf_line(b, "__device__ __forceinline__ unsigned kt_pack(float lo, float hi)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    unsigned r;");
    kt_buf_line(
        b, "    asm(\"cvt.rn.%sx2.f32 %%0, %%1, %%2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo));", t);
    kt_buf_line(b, "    return r;");
    kt_buf_line(b, "}");
}

/* A float literal that parses back to the same float (v is finite: validation checks the
 * scale). "2f" is not a float literal in C++: a point or an exponent goes before the suffix. */
static void float_lit(char *buf, size_t len, double v)
{
    char digits[32];
    snprintf(digits, sizeof(digits), "%.9g", (double)(float)v);
    snprintf(buf, len, "%s%sf", digits, strpbrk(digits, ".e") ? "" : ".0");
}

static void emit_mma_offset_fn(kt_buf *b, int layout)
{
    kt_buf_line(b, "/* Element offset of (row, col) in a shared tile of STRIDE-element rows%s. */",
                layout == LAYOUT_SWIZZLE
                    ? ": the 16-byte chunk index is XORed with row %% 8, so the 8 rows an "
                      "ldmatrix reads land in distinct banks"
                    : " (padded by 16 bytes, so the 8 rows an ldmatrix reads land in distinct "
                      "banks)");
    kt_buf_line(b, "template <int STRIDE> __device__ __forceinline__ int kt_off(int row, int col)");
    kt_buf_line(b, "{");
    if (layout == LAYOUT_SWIZZLE)
        kt_buf_line(b, "    return row * STRIDE + ((((col >> 3) ^ (row & 7)) << 3) | (col & 7));");
    else
        kt_buf_line(b, "    return row * STRIDE + col;");
    kt_buf_line(b, "}");
}

/* Emits the loop copying a ROWS x COLS 16-bit tile (rows from row0, valid below n_valid) into
 * shared memory with 16-byte cp.async; off<off_arg>(row, col) places an element. */
static void emit_tile_load(kt_buf *b, const attn_geom *m, const char *what, const char *dst,
                           const char *src, int rows, int cols, const char *off, int off_arg,
                           const char *row0, long long n_valid)
{
    int chunks = cols / 8, total = rows * chunks;
    int iters = (total + m->threads - 1) / m->threads;
    kt_buf_line(b, "/* %s: %d rows x %d 16-byte chunks, rows past %lld zero-filled */", what, rows,
                chunks, n_valid);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int it = 0; it < %d; it++) {", iters);
    b->indent += 4;
    kt_buf_line(b, "const int c = it * %d + tid;", m->threads);
    if (total % m->threads != 0)
        kt_buf_line(b, "if (c < %d) {", total);
    else
        kt_buf_line(b, "{");
    b->indent += 4;
    kt_buf_line(b, "const int r = c / %d, ch = c %% %d;", chunks, chunks);
    kt_buf_line(b, "const bool ok = %s + r < %lld;", row0, n_valid);
    kt_buf_line(b, "kt_cp_async16(kt_smem_u32(%s + %s<%d>(r, ch * 8)),", dst, off, off_arg);
    kt_buf_line(b, "              %s + (size_t)(ok ? %s + r : 0) * %d + ch * 8, ok);", src, row0,
                cols);
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
}

/* The mma.sync path's tiles: kt_off<row stride>. */
static void emit_mma_load(kt_buf *b, const attn_geom *m, const char *what, const char *dst,
                          const char *src, int rows, int cols, int stride, const char *row0,
                          long long n_valid)
{
    emit_tile_load(b, m, what, dst, src, rows, cols, "kt_off", stride, row0, n_valid);
}

static void emit_store_pair(kt_buf *b, const attn_info *a, const char *v0, const char *v1,
                            const char *off)
{
    if (a->out_dt == OPS_DT_F32) {
        kt_buf_line(b, "*reinterpret_cast<float2 *>(gO + %s) = make_float2(%s, %s);", off, v0, v1);
        return;
    }
    const char *cv = a->out_dt == OPS_DT_F16 ? "kt_f32_to_f16" : "kt_f32_to_bf16";
    kt_buf_line(b, "*reinterpret_cast<unsigned *>(gO + %s) =", off);
    kt_buf_line(b, "    (unsigned)%s(%s) | ((unsigned)%s(%s) << 16);", cv, v0, cv, v1);
}

/* The opening both kernels share: signature, the tile and problem constants. Writes the score
 * scale literal (log2(e) folded in for the exp2 softmax) into scale and returns the exponential
 * to use. */
static const char *emit_kernel_open(kt_buf *b, const ops_group *grp, const attn_info *a,
                                    const attn_geom *m, const char *entry, char *scale,
                                    size_t scale_len)
{
    float_lit(scale, scale_len, m->exp2 ? a->scale * 1.4426950408889634 : a->scale);
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(%d, 1)", m->threads);
    kt_buf_line(b, "%s(", entry);
    b->indent += 4;
    emit_params(b, grp);
    b->indent -= 4;
    kt_buf_line(b, "{");
    b->indent += 4;
    kt_buf_line(b, "constexpr int BQ = %d, BKV = %d, D = %d, DV = %d;", m->bq, m->bkv, (int)a->d,
                (int)a->dv);
    kt_buf_line(b, "constexpr int SQ = %lld, SKV = %lld;", (long long)a->sq, (long long)a->skv);
    /* __expf (ex2.approx of x log2(e)): the accurate expf keeps a slow path that spills. */
    return m->exp2 ? (m->math == MATH_FFMA ? "exp2f" : "kt_exp2") : "__expf";
}

/* Scores masked (ragged keys; causal) and the online-softmax update of row max, row sum and O;
 * the scores become P = ex(S * SCALE - max). Works on s[MT][BKV / 8][4] in the m16n8 C layout
 * (wgmma accumulators share it), rows wq0 + i * 16 + g (+ 8), keys from kv0. With a positive
 * scale the max is taken on raw scores and the scale folded into one FFMA per exponent. When
 * defer_alpha, O (still being accumulated by an asynchronous wgmma) is not rescaled here: each
 * row's factor goes to alpha_o[MT][2] for the caller. */
static void emit_mma_softmax(kt_buf *b, const attn_info *a, const attn_geom *m, const char *ex,
                             bool defer_alpha)
{
    bool fold = a->scale > 0;
    if (!fold) {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MT; i++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < BKV / 8; j++)");
        kt_buf_line(b, "        #pragma unroll");
        kt_buf_line(b, "        for (int e = 0; e < 4; e++)");
        kt_buf_line(b, "            s[i][j][e] *= SCALE;");
    }
    /* Masking: keys past SKV (ragged last tile) and, when causal, keys after the query. */
    bool ragged = a->skv % m->bkv != 0;
    if (ragged || a->causal) {
        kt_buf_line(b, "/* mask %s%s%s */", ragged ? "keys past SKV" : "",
                    ragged && a->causal ? " and " : "",
                    a->causal ? "keys after their query (causal)" : "");
        const char *c1 = ragged ? "kv0 + BKV > SKV" : "";
        const char *c2 = a->causal ? "kv0 + BKV - 1 > wq0" : "";
        kt_buf_line(b, "if (%s%s%s) {", c1, ragged && a->causal ? " || " : "", c2);
        b->indent += 4;
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MT; i++)");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int j = 0; j < BKV / 8; j++)");
        kt_buf_line(b, "        #pragma unroll");
        kt_buf_line(b, "        for (int e = 0; e < 4; e++) {");
        kt_buf_line(b, "            const int key = kv0 + j * 8 + 2 * t4 + (e & 1);");
        if (a->causal)
            kt_buf_line(b, "            const int qi = wq0 + i * 16 + g + (e >> 1) * 8;");
        kt_buf_line(b, "            if (%s%s%s)", ragged ? "key >= SKV" : "",
                    ragged && a->causal ? " || " : "", a->causal ? "key > qi" : "");
        kt_buf_line(b, "                s[i][j][e] = KT_NEG_INF;");
        kt_buf_line(b, "        }");
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
    kt_buf_line(b,
                "/* online softmax: new row max (over the 4 lanes sharing a row%s), rescale, "
                "P = %s(S * SCALE - max) */",
                fold ? "; raw scores, row_m too" : "", ex);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < MT; i++) {");
    b->indent += 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int h = 0; h < 2; h++) {");
    b->indent += 4;
    kt_buf_line(b, "/* two independent chains (even and odd column tiles) halve the latency */");
    kt_buf_line(b, "float mx = row_m[i][h], mx1 = KT_NEG_INF;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < BKV / 8; j += 2) {");
    kt_buf_line(b, "    mx = kt_max(mx, kt_max(s[i][j][2 * h], s[i][j][2 * h + 1]));");
    kt_buf_line(b, "    mx1 = kt_max(mx1, kt_max(s[i][j + 1][2 * h], s[i][j + 1][2 * h + 1]));");
    kt_buf_line(b, "}");
    kt_buf_line(b, "mx = kt_max(mx, mx1);");
    kt_buf_line(b, "mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, 1));");
    kt_buf_line(b, "mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, 2));");
    kt_buf_line(b, "/* a row with every key masked so far keeps p = 0 and no NaN */");
    if (fold) {
        kt_buf_line(b, "const float base = mx == KT_NEG_INF ? 0.0f : mx * SCALE;");
        kt_buf_line(b, "const float alpha = %s(fmaf(row_m[i][h], SCALE, -base));", ex);
    } else {
        kt_buf_line(b, "const float base = mx == KT_NEG_INF ? 0.0f : mx;");
        kt_buf_line(b, "const float alpha = %s(row_m[i][h] - base);", ex);
    }
    kt_buf_line(b, "row_m[i][h] = mx;");
    kt_buf_line(b, "float sum = 0.0f, sum1 = 0.0f;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < BKV / 8; j++) {");
    if (fold) {
        kt_buf_line(b, "    s[i][j][2 * h] = %s(fmaf(s[i][j][2 * h], SCALE, -base));", ex);
        kt_buf_line(b, "    s[i][j][2 * h + 1] = %s(fmaf(s[i][j][2 * h + 1], SCALE, -base));", ex);
    } else {
        kt_buf_line(b, "    s[i][j][2 * h] = %s(s[i][j][2 * h] - base);", ex);
        kt_buf_line(b, "    s[i][j][2 * h + 1] = %s(s[i][j][2 * h + 1] - base);", ex);
    }
    kt_buf_line(b, "    if (j & 1)");
    kt_buf_line(b, "        sum1 += s[i][j][2 * h] + s[i][j][2 * h + 1];");
    kt_buf_line(b, "    else");
    kt_buf_line(b, "        sum += s[i][j][2 * h] + s[i][j][2 * h + 1];");
    kt_buf_line(b, "}");
    kt_buf_line(b, "sum += sum1;");
    kt_buf_line(b, "/* per-lane partial sums; the 4 lanes of a row are added at the end */");
    kt_buf_line(b, "row_l[i][h] = row_l[i][h] * alpha + sum;");
    if (defer_alpha) {
        kt_buf_line(b, "alpha_o[i][h] = alpha;");
    } else {
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int j = 0; j < DV / 8; j++) {");
        kt_buf_line(b, "    o[i][j][2 * h] *= alpha;");
        kt_buf_line(b, "    o[i][j][2 * h + 1] *= alpha;");
        kt_buf_line(b, "}");
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
}

/* O / l, the epilogue and the store of o[MT][DV / 8][4] (m16n8 C layout, rows from wq0). */
static void emit_mma_store(kt_buf *b, const ops_group *grp, const attn_info *a)
{
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* O / l, the epilogue, and the store (rows past SQ are not written) */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < MT; i++) {");
    b->indent += 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int h = 0; h < 2; h++) {");
    b->indent += 4;
    kt_buf_line(b, "float l = row_l[i][h];");
    kt_buf_line(b, "l += __shfl_xor_sync(0xffffffffu, l, 1);");
    kt_buf_line(b, "l += __shfl_xor_sync(0xffffffffu, l, 2);");
    kt_buf_line(b, "const float inv = l > 0.0f ? 1.0f / l : 0.0f;");
    kt_buf_line(b, "const int row = wq0 + i * 16 + g + h * 8;");
    kt_buf_line(b, "if (row < SQ) {");
    b->indent += 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < DV / 8; j++) {");
    b->indent += 4;
    kt_buf_line(b, "const int col = j * 8 + 2 * t4;");
    if (a->has_epilogue) {
        kt_buf b2 = {0};
        epilogue_args(&b2, grp);
        kt_buf_line(b, "const float y0 = kt_epilogue(o[i][j][2 * h] * inv, bidx, row, col%s);",
                    b2.data);
        kt_buf_line(b,
                    "const float y1 = kt_epilogue(o[i][j][2 * h + 1] * inv, bidx, row, col + 1%s);",
                    b2.data);
        kt_buf_free(&b2);
    } else {
        kt_buf_line(b, "const float y0 = o[i][j][2 * h] * inv;");
        kt_buf_line(b, "const float y1 = o[i][j][2 * h + 1] * inv;");
    }
    emit_store_pair(b, a, "y0", "y1", "row * DV + col");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
}

/* The block's batch entry, its tensors' bases, and the key tiles it visits (causal: none past
 * its last query). Needs q0 and the type aliases of the kernel opening. */
static void emit_block_setup(kt_buf *b, const ops_group *grp, const attn_info *a)
{
    const char *ty = ops_emit_ctype(a->dt);
    kt_buf_line(b, "const int bidx = blockIdx.y;");
    int iq = input_index(grp, a->q), ik = input_index(grp, a->k), iv = input_index(grp, a->v);
    kt_buf_line(b, "const %s *gQ = in%d + (size_t)bidx * SQ * D;", ty, iq);
    kt_buf_line(b, "const %s *gK = in%d + (size_t)bidx * SKV * D;", ty, ik);
    kt_buf_line(b, "const %s *gV = in%d + (size_t)bidx * SKV * DV;", ty, iv);
    kt_buf_line(b, "%s *gO = out0 + (size_t)bidx * SQ * DV;", ops_emit_ctype(a->out_dt));
    if (a->causal) {
        kt_buf_line(b, "/* causal: keys past the block's last query are never needed */");
        kt_buf_line(b, "const int kv_end = min(SKV, min(q0 + BQ, SQ));");
    } else {
        kt_buf_line(b, "const int kv_end = SKV;");
    }
    kt_buf_line(b, "const int n_tiles = (kv_end + BKV - 1) / BKV;");
}

/* The output accumulators (m16n8 C layout: mma.sync's and, per warp, wgmma's) and the online
 * softmax's row statistics, zeroed. */
static void emit_acc_init(kt_buf *b)
{
    kt_buf_line(b, "float o[MT][DV / 8][4]; /* output accumulators, m16n8 C layout */");
    kt_buf_line(b, "float row_m[MT][2], row_l[MT][2]; /* rows g and g + 8 of each m tile */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < MT; i++) {");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < DV / 8; j++)");
    kt_buf_line(b, "        o[i][j][0] = o[i][j][1] = o[i][j][2] = o[i][j][3] = 0.0f;");
    kt_buf_line(b, "    row_m[i][0] = row_m[i][1] = KT_NEG_INF;");
    kt_buf_line(b, "    row_l[i][0] = row_l[i][1] = 0.0f;");
    kt_buf_line(b, "}");
}

static void emit_mma_kernel(kt_buf *b, const ops_group *grp, const attn_info *a, const attn_geom *m,
                            const char *entry)
{
    const char *ty = ops_emit_ctype(a->dt);
    int d = (int)a->d, dv = (int)a->dv, mt = m->mt;
    char scale[64];
    const char *ex = emit_kernel_open(b, grp, a, m, entry, scale, sizeof(scale));
    kt_buf_line(b, "constexpr int QS = %d, KS = %d, VS = %d; /* shared row strides */", m->qs,
                m->ks, m->vs);
    kt_buf_line(b, "constexpr int MT = %d; /* 16-row m tiles per warp */", mt);
    kt_buf_line(b, "/* scores are scaled by %s%s */", scale,
                m->exp2 ? " (scale * log2(e): softmax in base 2)" : "");
    kt_buf_line(b, "constexpr float SCALE = %s;", scale);
    kt_buf_line(b, "extern __shared__ __align__(16) unsigned char kt_smem[];");
    kt_buf_line(b, "%s *sQ = reinterpret_cast<%s *>(kt_smem);", ty, ty);
    kt_buf_line(b, "%s *sK = sQ + BQ * QS; /* %d stage%s of BKV x KS */", ty, m->stages,
                m->stages > 1 ? "s" : "");
    kt_buf_line(b, "%s *sV = sK + %d * BKV * KS;", ty, m->stages);
    kt_buf_line(b, "const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;");
    kt_buf_line(b, "const int g = lane >> 2, t4 = lane & 3; /* mma fragment row group, column "
                   "pair */");
    kt_buf_line(b, "const int lm = lane >> 3, lr = lane & 7; /* ldmatrix: matrix and row this "
                   "lane addresses */");
    kt_buf_line(b, "const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* longest tiles first */");
    kt_buf_line(b, "const int wq0 = q0 + warp * MT * 16; /* this warp's first query */");
    emit_block_setup(b, grp, a);
    kt_buf_printf(b, "\n");
    emit_mma_load(b, m, "Q tile", "sQ", "gQ", m->bq, d, m->qs, "q0", (long long)a->sq);
    emit_mma_load(b, m, "K tile 0", "sK", "gK", m->bkv, d, m->ks, "0", (long long)a->skv);
    if (m->stages == 1)
        kt_buf_line(b, "kt_cp_async_commit(); /* group: Q and K0 */");
    emit_mma_load(b, m, "V tile 0", "sV", "gV", m->bkv, dv, m->vs, "0", (long long)a->skv);
    kt_buf_line(b, "kt_cp_async_commit();");
    kt_buf_printf(b, "\n");
    emit_acc_init(b);
    if (m->qfrag == QFRAG_REGS)
        kt_buf_line(b, "unsigned qf[MT][D / 16][4]; /* Q as mma A fragments, loaded once */");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "for (int tile = 0; tile < n_tiles; tile++) {");
    b->indent += 4;
    kt_buf_line(b, "const int kv0 = tile * BKV;");
    if (m->stages == 2) {
        kt_buf_line(b, "const %s *cK = sK + (tile & 1) * BKV * KS;", ty);
        kt_buf_line(b, "const %s *cV = sV + (tile & 1) * BKV * VS;", ty);
        kt_buf_line(b, "if (tile + 1 < n_tiles) {");
        b->indent += 4;
        kt_buf_line(b, "/* prefetch the next tile into the other buffer */");
        kt_buf_line(b, "const int nkv0 = kv0 + BKV;");
        kt_buf_line(b, "%s *nK = sK + ((tile + 1) & 1) * BKV * KS;", ty);
        kt_buf_line(b, "%s *nV = sV + ((tile + 1) & 1) * BKV * VS;", ty);
        emit_mma_load(b, m, "next K", "nK", "gK", m->bkv, d, m->ks, "nkv0", (long long)a->skv);
        emit_mma_load(b, m, "next V", "nV", "gV", m->bkv, dv, m->vs, "nkv0", (long long)a->skv);
        kt_buf_line(b, "kt_cp_async_commit();");
        kt_buf_line(b, "kt_cp_async_wait<1>(); /* this tile landed, the next is in flight */");
        b->indent -= 4;
        kt_buf_line(b, "} else {");
        kt_buf_line(b, "    kt_cp_async_wait<0>();");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "const %s *cK = sK;", ty);
        kt_buf_line(b, "const %s *cV = sV;", ty);
        kt_buf_line(b, "kt_cp_async_wait<1>(); /* K of this tile landed; V may be in flight */");
    }
    kt_buf_line(b, "__syncthreads();");
    if (m->qfrag == QFRAG_REGS) {
        kt_buf_line(b, "if (tile == 0) {");
        kt_buf_line(b, "    #pragma unroll");
        kt_buf_line(b, "    for (int i = 0; i < MT; i++)");
        kt_buf_line(b, "        #pragma unroll");
        kt_buf_line(b, "        for (int ks = 0; ks < D / 16; ks++)");
        kt_buf_line(b, "            kt_ldmatrix_x4(qf[i][ks], kt_smem_u32(sQ + kt_off<QS>(warp * "
                       "MT * 16 + i * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8)));");
        kt_buf_line(b, "}");
    }
    if (a->causal) {
        kt_buf_line(b, "/* causal: a warp whose rows all precede the tile skips it */");
        kt_buf_line(b, "const bool active = kv0 <= wq0 + MT * 16 - 1;");
    } else {
        kt_buf_line(b, "const bool active = true;");
    }
    kt_buf_line(b, "float s[MT][BKV / 8][4]; /* scores, mma C layout */");
    kt_buf_line(b, "if (active) {");
    b->indent += 4;
    kt_buf_line(b, "/* S = Q K^T */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < MT; i++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < BKV / 8; j++)");
    kt_buf_line(b, "        s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < D / 16; ks++) {");
    b->indent += 4;
    if (m->qfrag == QFRAG_SMEM) {
        kt_buf_line(b, "unsigned qa[MT][4];");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int i = 0; i < MT; i++)");
        kt_buf_line(b, "    kt_ldmatrix_x4(qa[i], kt_smem_u32(sQ + kt_off<QS>(warp * MT * 16 + i "
                       "* 16 + (lane & 15), ks * 16 + (lane >> 4) * 8)));");
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int n16 = 0; n16 < BKV / 16; n16++) {");
    b->indent += 4;
    kt_buf_line(b, "unsigned kb[4]; /* B fragments of key n-tiles 2 n16 and 2 n16 + 1 */");
    kt_buf_line(b, "kt_ldmatrix_x4(kb, kt_smem_u32(cK + kt_off<KS>(n16 * 16 + (lm >> 1) * 8 + "
                   "lr, ks * 16 + (lm & 1) * 8)));");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < MT; i++) {");
    const char *qa = m->qfrag == QFRAG_REGS ? "qf[i][ks]" : "qa[i]";
    kt_buf_line(b, "    kt_mma(s[i][2 * n16], %s, kb[0], kb[1]);", qa);
    kt_buf_line(b, "    kt_mma(s[i][2 * n16 + 1], %s, kb[2], kb[3]);", qa);
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
    emit_mma_softmax(b, a, m, ex, false);
    b->indent -= 4;
    kt_buf_line(b, "}");
    if (m->stages == 1) {
        kt_buf_line(b, "__syncthreads(); /* every warp is done with K */");
        kt_buf_line(b, "if (tile + 1 < n_tiles) {");
        b->indent += 4;
        kt_buf_line(b, "const int nkv0 = kv0 + BKV;");
        emit_mma_load(b, m, "next K", "sK", "gK", m->bkv, d, m->ks, "nkv0", (long long)a->skv);
        b->indent -= 4;
        kt_buf_line(b, "}");
        kt_buf_line(b, "kt_cp_async_commit();");
        kt_buf_line(b, "kt_cp_async_wait<1>(); /* V of this tile landed */");
        kt_buf_line(b, "__syncthreads();");
    }
    kt_buf_line(b, "if (active) {");
    b->indent += 4;
    kt_buf_line(b, "/* O += P V: P repacked to %s A fragments in registers */",
                math_labels[m->math]);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < BKV / 16; ks++) {");
    b->indent += 4;
    kt_buf_line(b, "unsigned pa[MT][4];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < MT; i++) {");
    kt_buf_line(b, "    pa[i][0] = kt_pack(s[i][2 * ks][0], s[i][2 * ks][1]);");
    kt_buf_line(b, "    pa[i][1] = kt_pack(s[i][2 * ks][2], s[i][2 * ks][3]);");
    kt_buf_line(b, "    pa[i][2] = kt_pack(s[i][2 * ks + 1][0], s[i][2 * ks + 1][1]);");
    kt_buf_line(b, "    pa[i][3] = kt_pack(s[i][2 * ks + 1][2], s[i][2 * ks + 1][3]);");
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int n16 = 0; n16 < DV / 16; n16++) {");
    b->indent += 4;
    kt_buf_line(b, "unsigned vb[4]; /* B fragments of output n-tiles 2 n16 and 2 n16 + 1 */");
    kt_buf_line(b, "kt_ldmatrix_x4_trans(vb, kt_smem_u32(cV + kt_off<VS>(ks * 16 + (lm & 1) * 8 + "
                   "lr, n16 * 16 + (lm >> 1) * 8)));");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < MT; i++) {");
    kt_buf_line(b, "    kt_mma(o[i][2 * n16], pa[i], vb[0], vb[1]);");
    kt_buf_line(b, "    kt_mma(o[i][2 * n16 + 1], pa[i], vb[2], vb[3]);");
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads(); /* every warp is done with this tile's buffers */");
    if (m->stages == 1) {
        kt_buf_line(b, "if (tile + 1 < n_tiles) {");
        b->indent += 4;
        kt_buf_line(b, "const int nkv0 = kv0 + BKV;");
        emit_mma_load(b, m, "next V", "sV", "gV", m->bkv, dv, m->vs, "nkv0", (long long)a->skv);
        b->indent -= 4;
        kt_buf_line(b, "}");
        kt_buf_line(b, "kt_cp_async_commit();");
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
    emit_mma_store(b, grp, a);
    b->indent -= 4;
    kt_buf_line(b, "}");
}

/* The ffma path's tile loads: 4-byte cp.async, K transposed into K^T. */
static void emit_ffma_load(kt_buf *b, const attn_geom *m, const char *what, const char *dst,
                           const char *src, int rows, int cols, const char *row0, long long n_valid,
                           const char *dst_index)
{
    int total = rows * cols;
    int iters = (total + m->threads - 1) / m->threads;
    kt_buf_line(b, "/* %s: %d x %d floats, rows past %lld zero-filled */", what, rows, cols,
                n_valid);
    kt_buf_line(b, "#pragma unroll %d", iters < 8 ? iters : 8);
    kt_buf_line(b, "for (int it = 0; it < %d; it++) {", iters);
    b->indent += 4;
    kt_buf_line(b, "const int c = it * %d + tid;", m->threads);
    if (total % m->threads != 0)
        kt_buf_line(b, "if (c < %d) {", total);
    else
        kt_buf_line(b, "{");
    b->indent += 4;
    kt_buf_line(b, "const int r = c / %d, col = c %% %d;", cols, cols);
    kt_buf_line(b, "const bool ok = %s + r < %lld;", row0, n_valid);
    kt_buf_line(b,
                "kt_cp_async4(kt_smem_u32(%s + %s), %s + (size_t)(ok ? %s + r : 0) * %d + col, "
                "ok);",
                dst, dst_index, src, row0, cols);
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
}

static void emit_ffma_kernel(kt_buf *b, const ops_group *grp, const attn_info *a,
                             const attn_geom *m, const char *entry)
{
    int d = (int)a->d, dv = (int)a->dv;
    char scale[64];
    const char *ex = emit_kernel_open(b, grp, a, m, entry, scale, sizeof(scale));
    kt_buf_line(b,
                "constexpr int NT = %d, TX = %d, TY = %d; /* threads as TY rows x TX columns "
                "*/",
                m->threads, m->tx, m->ty);
    kt_buf_line(b, "constexpr int RQ = BQ / TY, RK = BKV / TX, RD = DV / TX; /* per-thread "
                   "micro-tiles */");
    kt_buf_line(b, "constexpr int QS = D + 1, KS = BKV + 1, PS = BKV + 1; /* padded against bank "
                   "conflicts */");
    kt_buf_line(b, "constexpr float SCALE = %s;%s", scale,
                m->exp2 ? " /* scale * log2(e): softmax in base 2 */" : "");
    kt_buf_line(b, "extern __shared__ __align__(16) unsigned char kt_smem[];");
    kt_buf_line(b, "float *sQ = reinterpret_cast<float *>(kt_smem); /* [BQ][QS] */");
    kt_buf_line(b,
                "float *sKt = sQ + BQ * QS;                       /* %d x [D][KS]: K "
                "transposed */",
                m->stages);
    kt_buf_line(b, "float *sV = sKt + %d * D * KS;                    /* %d x [BKV][DV] */",
                m->stages, m->stages);
    kt_buf_line(b, "float *sP = sV + %d * BKV * DV;                   /* [BQ][PS]: S, then P */",
                m->stages);
    kt_buf_line(b, "float *sM = sP + BQ * PS, *sL = sM + BQ, *sA = sL + BQ; /* row max, sum, "
                   "rescale */");
    kt_buf_line(b, "const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;");
    kt_buf_line(b, "const int tx = tid %% TX, ty = tid / TX;");
    kt_buf_line(b, "const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* longest tiles first */");
    kt_buf_line(b, "const int bidx = blockIdx.y;");
    int iq = input_index(grp, a->q), ik = input_index(grp, a->k), iv = input_index(grp, a->v);
    kt_buf_line(b, "const float *gQ = in%d + (size_t)bidx * SQ * D;", iq);
    kt_buf_line(b, "const float *gK = in%d + (size_t)bidx * SKV * D;", ik);
    kt_buf_line(b, "const float *gV = in%d + (size_t)bidx * SKV * DV;", iv);
    kt_buf_line(b, "%s *gO = out0 + (size_t)bidx * SQ * DV;", ops_emit_ctype(a->out_dt));
    if (a->causal)
        kt_buf_line(b, "const int kv_end = min(SKV, min(q0 + BQ, SQ)); /* causal */");
    else
        kt_buf_line(b, "const int kv_end = SKV;");
    kt_buf_line(b, "const int n_tiles = (kv_end + BKV - 1) / BKV;");
    kt_buf_line(b, "for (int r = tid; r < BQ; r += NT) {");
    kt_buf_line(b, "    sM[r] = KT_NEG_INF;");
    kt_buf_line(b, "    sL[r] = 0.0f;");
    kt_buf_line(b, "}");
    emit_ffma_load(b, m, "Q tile", "sQ", "gQ", m->bq, d, "q0", (long long)a->sq, "r * QS + col");
    emit_ffma_load(b, m, "K tile 0", "sKt", "gK", m->bkv, d, "0", (long long)a->skv,
                   "col * KS + r");
    emit_ffma_load(b, m, "V tile 0", "sV", "gV", m->bkv, dv, "0", (long long)a->skv,
                   "r * DV + col");
    kt_buf_line(b, "kt_cp_async_commit();");
    kt_buf_line(b, "float o[RQ][RD]; /* rows ty + TY i, columns tx + TX j */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < RQ; i++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < RD; j++)");
    kt_buf_line(b, "        o[i][j] = 0.0f;");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "for (int tile = 0; tile < n_tiles; tile++) {");
    b->indent += 4;
    kt_buf_line(b, "const int kv0 = tile * BKV;");
    if (m->stages == 2) {
        kt_buf_line(b, "const float *cK = sKt + (tile & 1) * D * KS;");
        kt_buf_line(b, "const float *cV = sV + (tile & 1) * BKV * DV;");
        kt_buf_line(b, "if (tile + 1 < n_tiles) {");
        b->indent += 4;
        kt_buf_line(b, "const int nkv0 = kv0 + BKV;");
        kt_buf_line(b, "float *nK = sKt + ((tile + 1) & 1) * D * KS;");
        kt_buf_line(b, "float *nV = sV + ((tile + 1) & 1) * BKV * DV;");
        emit_ffma_load(b, m, "next K", "nK", "gK", m->bkv, d, "nkv0", (long long)a->skv,
                       "col * KS + r");
        emit_ffma_load(b, m, "next V", "nV", "gV", m->bkv, dv, "nkv0", (long long)a->skv,
                       "r * DV + col");
        kt_buf_line(b, "kt_cp_async_commit();");
        kt_buf_line(b, "kt_cp_async_wait<1>();");
        b->indent -= 4;
        kt_buf_line(b, "} else {");
        kt_buf_line(b, "    kt_cp_async_wait<0>();");
        kt_buf_line(b, "}");
    } else {
        kt_buf_line(b, "const float *cK = sKt, *cV = sV;");
        kt_buf_line(b, "kt_cp_async_wait<0>();");
    }
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "/* phase 1: S = Q K^T * SCALE, masked, into sP */");
    kt_buf_line(b, "{");
    b->indent += 4;
    kt_buf_line(b, "float acc[RQ][RK];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < RQ; i++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < RK; j++)");
    kt_buf_line(b, "        acc[i][j] = 0.0f;");
    kt_buf_line(b, "#pragma unroll 4");
    kt_buf_line(b, "for (int k = 0; k < D; k++) {");
    kt_buf_line(b, "    float qa[RQ], kb[RK];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < RQ; i++)");
    kt_buf_line(b, "        qa[i] = sQ[(ty + TY * i) * QS + k];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < RK; j++)");
    kt_buf_line(b, "        kb[j] = cK[k * KS + tx + TX * j];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < RQ; i++)");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int j = 0; j < RK; j++)");
    kt_buf_line(b, "            acc[i][j] = fmaf(qa[i], kb[j], acc[i][j]);");
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < RQ; i++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < RK; j++) {");
    kt_buf_line(b, "        const int key = kv0 + tx + TX * j;");
    if (a->causal)
        kt_buf_line(b, "        const bool masked = key >= SKV || key > q0 + ty + TY * i;");
    else
        kt_buf_line(b, "        const bool masked = key >= SKV;");
    kt_buf_line(b, "        sP[(ty + TY * i) * PS + tx + TX * j] = masked ? KT_NEG_INF : acc[i][j] "
                   "* SCALE;");
    kt_buf_line(b, "    }");
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b,
                "/* phase 2: a warp per row: new max, P = %s(S - max), row sum, rescale factor "
                "*/",
                ex);
    kt_buf_line(b, "for (int r = warp; r < BQ; r += NT / 32) {");
    b->indent += 4;
    kt_buf_line(b, "float mx = sM[r];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = lane; j < BKV; j += 32)");
    kt_buf_line(b, "    mx = kt_max(mx, sP[r * PS + j]);");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int w = 16; w > 0; w >>= 1)");
    kt_buf_line(b, "    mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, w));");
    kt_buf_line(b, "const float base = mx == KT_NEG_INF ? 0.0f : mx; /* all masked: p = 0 */");
    kt_buf_line(b, "float sum = 0.0f;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = lane; j < BKV; j += 32) {");
    kt_buf_line(b, "    const float p = %s(sP[r * PS + j] - base);", ex);
    kt_buf_line(b, "    sP[r * PS + j] = p;");
    kt_buf_line(b, "    sum += p;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int w = 16; w > 0; w >>= 1)");
    kt_buf_line(b, "    sum += __shfl_xor_sync(0xffffffffu, sum, w);");
    kt_buf_line(b, "if (lane == 0) {");
    kt_buf_line(b, "    const float alpha = %s(sM[r] - base);", ex);
    kt_buf_line(b, "    sA[r] = alpha;");
    kt_buf_line(b, "    sL[r] = sL[r] * alpha + sum;");
    kt_buf_line(b, "    sM[r] = mx;");
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "/* phase 3: O = O * alpha + P V */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < RQ; i++) {");
    kt_buf_line(b, "    const float alpha = sA[ty + TY * i];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < RD; j++)");
    kt_buf_line(b, "        o[i][j] *= alpha;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "#pragma unroll 4");
    kt_buf_line(b, "for (int k = 0; k < BKV; k++) {");
    kt_buf_line(b, "    float pa[RQ], vb[RD];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < RQ; i++)");
    kt_buf_line(b, "        pa[i] = sP[(ty + TY * i) * PS + k];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < RD; j++)");
    kt_buf_line(b, "        vb[j] = cV[k * DV + tx + TX * j];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = 0; i < RQ; i++)");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int j = 0; j < RD; j++)");
    kt_buf_line(b, "            o[i][j] = fmaf(pa[i], vb[j], o[i][j]);");
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads(); /* every thread is done with this tile's buffers */");
    if (m->stages == 1) {
        kt_buf_line(b, "if (tile + 1 < n_tiles) {");
        b->indent += 4;
        kt_buf_line(b, "const int nkv0 = kv0 + BKV;");
        emit_ffma_load(b, m, "next K", "sKt", "gK", m->bkv, d, "nkv0", (long long)a->skv,
                       "col * KS + r");
        emit_ffma_load(b, m, "next V", "sV", "gV", m->bkv, dv, "nkv0", (long long)a->skv,
                       "r * DV + col");
        kt_buf_line(b, "kt_cp_async_commit();");
        b->indent -= 4;
        kt_buf_line(b, "}");
    }
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* O / l, the epilogue, and the store (rows past SQ are not written) */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int i = 0; i < RQ; i++) {");
    b->indent += 4;
    kt_buf_line(b, "const int row = q0 + ty + TY * i;");
    kt_buf_line(b, "const float l = sL[ty + TY * i];");
    kt_buf_line(b, "const float inv = l > 0.0f ? 1.0f / l : 0.0f;");
    kt_buf_line(b, "if (row < SQ) {");
    b->indent += 4;
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < RD; j++) {");
    b->indent += 4;
    kt_buf_line(b, "const int col = tx + TX * j;");
    if (a->has_epilogue) {
        kt_buf b2 = {0};
        epilogue_args(&b2, grp);
        kt_buf_line(b, "const float y = kt_epilogue(o[i][j] * inv, bidx, row, col%s);", b2.data);
        kt_buf_free(&b2);
    } else {
        kt_buf_line(b, "const float y = o[i][j] * inv;");
    }
    kt_buf e = {0};
    ops_emit_from_float(&e, a->out_dt, "y");
    kt_buf_line(b, "gO[row * DV + col] = %s;", e.data);
    kt_buf_free(&e);
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
}

/* ---- the Hopper (wgmma) path ---- */

static const char wgmma_helpers[] =
    "/* ---- wgmma helpers: tile layout, matrix descriptors, warpgroup fences ---- */\n"
    "/* Element offset of (row, col) in a ROWS-row tile laid out as the hardware's 128-byte\n"
    "   swizzle: 64-column blocks of ROWS rows of 128 bytes, the 16-byte chunk index XORed with\n"
    "   row % 8 (the tile starts 1024-byte aligned, so this is address bits 4-6 ^= bits 7-9). */\n"
    "template <int ROWS> __device__ __forceinline__ int kt_woff(int row, int col)\n"
    "{\n"
    "    return ((col >> 6) * ROWS + row) * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & "
    "7);\n"
    "}\n"
    "/* Descriptor of a K-major operand in such a tile: 128-byte swizzle (mode 1, bits 62-63), "
    "8-row\n"
    "   groups 1024 bytes apart (stride offset, bits 32-45); the leading offset is unused when a\n"
    "   k16 step stays inside one 128-byte row (conventionally 1). */\n"
    "__device__ __forceinline__ unsigned long long kt_desc_k(const void *p)\n"
    "{\n"
    "    return (unsigned long long)((kt_smem_u32(p) & 0x3FFFF) >> 4) | 1ull << 16 |\n"
    "           (1024ull >> 4) << 32 | 1ull << 62;\n"
    "}\n"
    "/* Descriptor of V as an N-major B operand (keys along K, 64 columns along N: one swizzle "
    "atom\n"
    "   wide). A k16 step spans two 8-key groups 1024 bytes apart; both offset fields say 1024, "
    "as\n"
    "   the other one (the stride between atoms along N) is never used at N = 64. */\n"
    "__device__ __forceinline__ unsigned long long kt_desc_n(const void *p)\n"
    "{\n"
    "    return (unsigned long long)((kt_smem_u32(p) & 0x3FFFF) >> 4) | (1024ull >> 4) << 16 |\n"
    "           (1024ull >> 4) << 32 | 1ull << 62;\n"
    "}\n"
    "/* Register writes are complete before wgmma reads them (accumulators, A fragments). */\n"
    "__device__ __forceinline__ void kt_wg_fence()\n"
    "{\n"
    "    asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void kt_wg_commit()\n"
    "{\n"
    "    asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void kt_wg_wait_one()\n"
    "{\n"
    "    asm volatile(\"wgmma.wait_group.sync.aligned 1;\\n\" ::: \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void kt_wg_wait_all()\n"
    "{\n"
    "    asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" ::: \"memory\");\n"
    "}\n"
    "/* cp.async wrote the tiles through the generic proxy; wgmma reads them through the async\n"
    "   proxy. */\n"
    "__device__ __forceinline__ void kt_fence_proxy_async()\n"
    "{\n"
    "    asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n"
    "}\n"
    "/* After the wait: the accumulators are read only from here on (the compiler sees wgmma\n"
    "   write them when it is issued, not when it completes). */\n"
    "template <int N> __device__ __forceinline__ void kt_wg_hold(float (&d)[N][4])\n"
    "{\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < N; j++)\n"
    "#pragma unroll\n"
    "        for (int e = 0; e < 4; e++)\n"
    "            asm volatile(\"\" : \"+f\"(d[j][e])::\"memory\");\n"
    "}\n";

/* Emits NAME(d, a, db, acc): d[N / 8][4] = A B (+ d when acc) for one warpgroup, m64nNk16, fp32
 * accumulators;
 * A from a shared-memory descriptor (a_regs false) or the warp's m16n8k16 A fragment in
 * registers; B from a descriptor, N-major when trans_b. */
static void emit_wgmma_fn(kt_buf *b, const char *name, int n, const char *t, bool a_regs,
                          int trans_b)
{
    int nd = n / 2; /* accumulator floats per thread */
    kt_buf_line(b,
                "__device__ __forceinline__ void %s(float (&d)[%d][4], %s, unsigned long long db, "
                "int acc)",
                name, n / 8, a_regs ? "const unsigned (&a)[4]" : "unsigned long long da");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n\"",
                nd + (a_regs ? 5 : 2));
    kt_buf_printf(b, "%*s\"wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {", b->indent + 17, "",
                  n, t, t);
    for (int i = 0; i < nd; i++)
        kt_buf_printf(b, "%s%%%d", i ? "," : "", i);
    if (a_regs)
        kt_buf_printf(b, "}, {%%%d,%%%d,%%%d,%%%d}, %%%d, p, 1, 1, %d;\\n}\\n\"\n", nd, nd + 1,
                      nd + 2, nd + 3, nd + 4, trans_b);
    else
        kt_buf_printf(b, "}, %%%d, %%%d, p, 1, 1, 0, %d;\\n}\\n\"\n", nd, nd + 1, trans_b);
    kt_buf_printf(b, "%*s: ", b->indent + 17, "");
    for (int i = 0; i < nd; i++)
        kt_buf_printf(b, "%s\"+f\"(d[%d][%d])%s", i ? " " : "", i / 4, i % 4,
                      i + 1 < nd ? (i % 4 == 3 ? ",\n                   " : ",") : "\n");
    if (a_regs)
        kt_buf_line(b, "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), "
                       "\"l\"(db), \"r\"(acc));");
    else
        kt_buf_line(b, "                 : \"l\"(da), \"l\"(db), \"r\"(acc));");
    kt_buf_line(b, "}");
}

/* Emits the S = Q K^T wgmmas of the K tile KOFF elements into sK into s (the first k step
 * overwrites it), committed as one group; the caller waits. Descriptors are the base ones plus
 * the byte offset / 16 (the address field's unit). */
static void emit_wgmma_qk_issue(kt_buf *b, const char *koff)
{
    kt_buf_line(b, "kt_wg_fence();");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < D / 16; ks++)");
    kt_buf_line(b, "    kt_wgmma_qk(s[0], dq0 + (((ks >> 2) * BQ * 64 + (ks & 3) * 16) >> 3),");
    kt_buf_line(
        b, "                dk0 + ((%s + (ks >> 2) * BKV * 64 + (ks & 3) * 16) >> 3), ks > 0);",
        koff);
    kt_buf_line(b, "kt_wg_commit();");
}

/* P (the softmaxed scores) repacked to 16-bit A fragments: k16 step ks covers keys 16 ks ... */
static void emit_wgmma_pack(kt_buf *b)
{
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < BKV / 16; ks++) {");
    kt_buf_line(b, "    pa[ks][0] = kt_pack(s[0][2 * ks][0], s[0][2 * ks][1]);");
    kt_buf_line(b, "    pa[ks][1] = kt_pack(s[0][2 * ks][2], s[0][2 * ks][3]);");
    kt_buf_line(b, "    pa[ks][2] = kt_pack(s[0][2 * ks + 1][0], s[0][2 * ks + 1][1]);");
    kt_buf_line(b, "    pa[ks][3] = kt_pack(s[0][2 * ks + 1][2], s[0][2 * ks + 1][3]);");
    kt_buf_line(b, "}");
}

/* The Hopper kernel, software-pipelined inside each warpgroup: while the tensor cores run
 * O += P_j V_j, the warpgroup's threads compute the softmax of S_j+1 = Q K_j+1^T (issued just
 * before), so the exponentials (the MUFU unit: as much time as the MMAs at D = 64) overlap the
 * MMAs. O's rescale for S_j+1's new max waits for P_j V_j. Tiles: K two tiles ahead and V one
 * tile ahead of the MMAs, in rings of NST buffers, one cp.async group per step. */
static void emit_wgmma_kernel(kt_buf *b, const ops_group *grp, const attn_info *a,
                              const attn_geom *m, const char *entry)
{
    const char *ty = ops_emit_ctype(a->dt);
    int d = (int)a->d, dv = (int)a->dv;
    char scale[64];
    const char *ex = emit_kernel_open(b, grp, a, m, entry, scale, sizeof(scale));
    kt_buf_line(b, "constexpr int MT = 1; /* a warp owns 16 of its warpgroup's 64 rows */");
    kt_buf_line(b, "/* scores are scaled by %s%s */", scale,
                m->exp2 ? " (scale * log2(e): softmax in base 2)" : "");
    kt_buf_line(b, "constexpr float SCALE = %s;", scale);
    kt_buf_line(b, "extern __shared__ __align__(16) unsigned char kt_smem[];");
    kt_buf_line(b, "/* tiles 1024-byte aligned: the swizzle is a function of the address */");
    kt_buf_line(b,
                "%s *sQ = reinterpret_cast<%s *>(kt_smem + ((1024u - (kt_smem_u32(kt_smem) & "
                "1023u)) & 1023u));",
                ty, ty);
    kt_buf_line(b, "constexpr int NST = %d; /* ring buffers of K and of V */", m->stages);
    kt_buf_line(b, "%s *sK = sQ + BQ * D; /* NST buffers of BKV x D */", ty);
    kt_buf_line(b, "%s *sV = sK + NST * BKV * D; /* NST buffers of BKV x DV */", ty);
    kt_buf_line(b,
                "const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;");
    kt_buf_line(b, "const int g = lane >> 2, t4 = lane & 3; /* accumulator row group, column "
                   "pair */");
    kt_buf_line(b, "const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* longest tiles first */");
    kt_buf_line(b, "const int wq0 = q0 + warp * 16; /* this warp's first query */");
    kt_buf_line(b, "/* base descriptors: this warpgroup's Q rows, the first K and V buffers */");
    kt_buf_line(b,
                "const unsigned long long dq0 = kt_desc_k(sQ + wg * 64 * 64), dk0 = kt_desc_k(sK), "
                "dv0 = kt_desc_n(sV);");
    emit_block_setup(b, grp, a);
    kt_buf_printf(b, "\n");
    emit_tile_load(b, m, "Q tile", "sQ", "gQ", m->bq, d, "kt_woff", m->bq, "q0", (long long)a->sq);
    emit_tile_load(b, m, "K tile 0", "sK", "gK", m->bkv, d, "kt_woff", m->bkv, "0",
                   (long long)a->skv);
    kt_buf_line(b, "kt_cp_async_commit();");
    emit_tile_load(b, m, "V tile 0", "sV", "gV", m->bkv, dv, "kt_woff", m->bkv, "0",
                   (long long)a->skv);
    kt_buf_line(b, "if (n_tiles > 1) {");
    b->indent += 4;
    emit_tile_load(b, m, "K tile 1", "sK + BKV * D", "gK", m->bkv, d, "kt_woff", m->bkv, "BKV",
                   (long long)a->skv);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "kt_cp_async_commit();");
    kt_buf_printf(b, "\n");
    emit_acc_init(b);
    kt_buf_line(b, "float alpha_o[MT][2]; /* O's rescale, applied once P V has landed */");
    kt_buf_line(b, "float s[MT][BKV / 8][4]; /* scores: wgmma m64nBKV accumulators */");
    kt_buf_line(b, "unsigned pa[BKV / 16][4]; /* P of the tile whose P V is next */");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* S_0 and its softmax (every warpgroup needs key tile 0) */");
    kt_buf_line(b, "kt_cp_async_wait<1>(); /* Q and K_0 landed */");
    kt_buf_line(b, "kt_fence_proxy_async();");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "{");
    b->indent += 4;
    kt_buf_line(b, "const int kv0 = 0;");
    emit_wgmma_qk_issue(b, "0");
    kt_buf_line(b, "kt_wg_wait_all();");
    kt_buf_line(b, "kt_wg_hold(s[0]);");
    emit_mma_softmax(b, a, m, ex, true);
    emit_wgmma_pack(b);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Every warpgroup runs every step, also on tiles its causal mask hides (P = 0 "
                   "there):");
    kt_buf_line(b, "   a data-dependent wgmma group count would make ptxas serialize the MMAs. */");
    kt_buf_line(b, "for (int tile = 0; tile < n_tiles; tile++) {");
    b->indent += 4;
    if (m->stages == 2)
        kt_buf_line(b, "__syncthreads(); /* every warpgroup is done with K_tile and V_tile-1 */");
    else
        kt_buf_line(b, "/* K_tile+2 and V_tile+1 go where K_tile-1 and V_tile-2 were: every "
                       "warpgroup passed the last barrier, so it is done with them */");
    kt_buf_line(b, "if (tile + 2 < n_tiles) {");
    b->indent += 4;
    kt_buf_line(b, "const int kv2 = (tile + 2) * BKV;");
    emit_tile_load(b, m, "K tile + 2", "(sK + (tile + 2) % NST * BKV * D)", "gK", m->bkv, d,
                   "kt_woff", m->bkv, "kv2", (long long)a->skv);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "if (tile + 1 < n_tiles) {");
    b->indent += 4;
    kt_buf_line(b, "const int kv1 = (tile + 1) * BKV;");
    emit_tile_load(b, m, "V tile + 1", "(sV + (tile + 1) % NST * BKV * DV)", "gV", m->bkv, dv,
                   "kt_woff", m->bkv, "kv1", (long long)a->skv);
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_line(b, "kt_cp_async_commit();");
    kt_buf_line(b, "kt_cp_async_wait<1>(); /* V_tile and K_tile+1 landed */");
    kt_buf_line(b, "kt_fence_proxy_async();");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "const int voff = tile %% NST * BKV * DV; /* V_tile's buffer */");
    kt_buf_line(b, "if (tile + 1 < n_tiles) {");
    b->indent += 4;
    kt_buf_line(b, "const int kv0 = (tile + 1) * BKV; /* the keys of S_tile+1 */");
    emit_wgmma_qk_issue(b, "(tile + 1) % NST * BKV * D");
    kt_buf_line(b, "/* O += P_tile V_tile, in flight during the softmax of S_tile+1 */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < BKV / 16; ks++)");
    kt_buf_line(b, "    kt_wgmma_pv(o[0], pa[ks], dv0 + ((voff + ks * 16 * 64) >> 3), 1);");
    kt_buf_line(b, "kt_wg_commit();");
    kt_buf_line(b, "kt_wg_wait_one(); /* S_tile+1 done; P V may still run */");
    kt_buf_line(b, "kt_wg_hold(s[0]);");
    emit_mma_softmax(b, a, m, ex, true);
    kt_buf_line(b, "kt_wg_wait_all();");
    kt_buf_line(b, "kt_wg_hold(o[0]);");
    kt_buf_line(b, "/* O joins S_tile+1's max; P_tile+1 is next */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < DV / 8; j++) {");
    kt_buf_line(b, "    o[0][j][0] *= alpha_o[0][0];");
    kt_buf_line(b, "    o[0][j][1] *= alpha_o[0][0];");
    kt_buf_line(b, "    o[0][j][2] *= alpha_o[0][1];");
    kt_buf_line(b, "    o[0][j][3] *= alpha_o[0][1];");
    kt_buf_line(b, "}");
    emit_wgmma_pack(b);
    b->indent -= 4;
    kt_buf_line(b, "} else {");
    b->indent += 4;
    kt_buf_line(b, "/* the last tile: O += P V alone */");
    kt_buf_line(b, "kt_wg_fence();");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < BKV / 16; ks++)");
    kt_buf_line(b, "    kt_wgmma_pv(o[0], pa[ks], dv0 + ((voff + ks * 16 * 64) >> 3), 1);");
    kt_buf_line(b, "kt_wg_commit();");
    kt_buf_line(b, "kt_wg_wait_all();");
    kt_buf_line(b, "kt_wg_hold(o[0]);");
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
    kt_buf_printf(b, "\n");
    emit_mma_store(b, grp, a);
    b->indent -= 4;
    kt_buf_line(b, "}");
}

static int attention_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                          ops_emitted *out, ops_diag *d)
{
    memset(out, 0, sizeof(*out));
    attn_info a;
    if (!attn_analyse(grp, &a))
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "attention: the group is not one attention node with an "
                            "elementwise epilogue");
    const char *why = attention_prune(grp, s, dev);
    if (why)
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, a.att_node, "",
                            "attention: schedule not legal for this group (%s)", why);
    attn_geom m;
    attn_geometry(&a, s, &m);
    char entry[64];
    snprintf(entry, sizeof(entry), "ktune_attention_%s%s_q%d_kv%d_w%d_s%d%s", math_labels[m.math],
             m.wgmma ? "_wgmma" : "", m.bq, m.bkv, m.warps, m.stages, grp->entry_suffix);

    kt_buf b = {0};
    ops_emit_header(&b, grp, s);
    ops_emit_shared_prelude(&b, out);
    if (m.math == MATH_FFMA) {
        kt_buf_printf(&b, "%s", ffma_helpers);
    } else {
        kt_buf_printf(&b, "%s", mma_helpers);
        const char *t = m.math == MATH_F16 ? "f16" : "bf16";
        emit_mma_typed_helpers(&b, t);
        if (m.wgmma) {
            kt_buf_printf(&b, "%s", wgmma_helpers);
            emit_wgmma_fn(&b, "kt_wgmma_qk", m.bkv, t, false, 0);
            emit_wgmma_fn(&b, "kt_wgmma_pv", (int)a.dv, t, true, 1);
        } else {
            emit_mma_offset_fn(&b, m.layout);
        }
    }
    kt_buf_printf(&b, "/* ---- end of attention helpers ---- */\n\n");
    int rc = 0;
    if (a.has_epilogue) {
        rc = emit_epilogue_fn(&b, grp, &a);
        if (rc < 0) {
            kt_buf_free(&b);
            return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, a.att_node, "",
                                "attention: cannot emit the epilogue");
        }
        kt_buf_printf(&b, "\n");
    }
    if (m.math == MATH_FFMA)
        emit_ffma_kernel(&b, grp, &a, &m, entry);
    else if (m.wgmma)
        emit_wgmma_kernel(&b, grp, &a, &m, entry);
    else
        emit_mma_kernel(&b, grp, &a, &m, entry);
    if (kt_buf_status(&b) < 0) {
        kt_buf_free(&b);
        return -ENOMEM;
    }
    out->source = kt_buf_take(&b);
    out->n_kernels = 1;
    ops_kernel_launch *k = &out->kernels[0];
    snprintf(k->entry, sizeof(k->entry), "%s", entry);
    k->grid[0] = (uint32_t)m.q_tiles;
    k->grid[1] = (uint32_t)a.batch;
    k->grid[2] = 1;
    k->block[0] = (uint32_t)m.threads;
    k->block[1] = k->block[2] = 1;
    k->smem_bytes = (uint32_t)m.smem;
    for (int i = 0; i < grp->n_in; i++)
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->in[i]};
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->out[0]};
    return 0;
}

/* Roofline over the tiles actually visited (causal blocks skip the tiles past their diagonal),
 * divided by an efficiency for occupancy, wave quantisation and the pipeline. */
static void attention_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                               ops_estimate *e)
{
    memset(e, 0, sizeof(*e));
    attn_info a;
    if (!attn_analyse(grp, &a))
        return;
    attn_geom m;
    attn_geometry(&a, s, &m);
    const ops_graph *g = grp->g;
    /* Work of the visited tiles: QK^T and PV on whole Bq x Bkv tiles. */
    double tile_work = (double)m.bq * m.bkv * 2.0 * (double)(a.d + a.dv);
    e->flops = tile_work * (double)m.kv_tiles * (double)a.batch;
    double bytes = 0;
    for (int i = 0; i < grp->n_in; i++) {
        const ops_tensor *t = &g->tensors[grp->in[i]];
        bytes += (double)ops_shape_numel(&t->shape) * (double)ops_dtype_size(t->dtype);
    }
    const ops_tensor *ot = &g->tensors[grp->out[0]];
    bytes += (double)ops_shape_numel(&ot->shape) * (double)ops_dtype_size(ot->dtype);
    /* K and V re-reads beyond the L2 footprint: count them once per q tile when a batch
     * entry's K and V do not fit in a slice of L2. */
    double kv_bytes = (double)a.skv * (double)(a.d + a.dv) * (double)ops_dtype_size(a.dt);
    if (kv_bytes * dev->sm_count > (double)dev->l2_bytes)
        bytes += kv_bytes * (double)a.batch * (double)(m.q_tiles - 1) * 0.25;
    e->bytes = bytes;

    double peak = m.math == MATH_FFMA ? dev->fp32_flops_per_s : dev->f16_flops_per_s;
    /* flash attention on sm_90: ffma, mma.sync, wgmma (Hopper's tensor-core rate needs wgmma) */
    double base = m.math == MATH_FFMA ? 0.45 : m.wgmma ? 0.62 : 0.40;
    /* Resident blocks per SM. */
    int regs = m.regs < 32 ? 32 : m.regs;
    int by_threads = dev->max_threads_per_sm / m.threads;
    int by_regs = dev->regs_per_sm / (regs * m.threads);
    int by_smem = (int)(dev->smem_per_sm / (m.smem + 1024));
    int per_sm = by_threads;
    if (by_regs < per_sm)
        per_sm = by_regs;
    if (by_smem < per_sm)
        per_sm = by_smem;
    if (dev->max_blocks_per_sm < per_sm)
        per_sm = dev->max_blocks_per_sm;
    if (per_sm < 1)
        per_sm = 1;
    e->occupancy = (double)(per_sm * m.threads) / dev->max_threads_per_sm;
    double occ_eff = 0.55 + e->occupancy;
    if (occ_eff > 1.0)
        occ_eff = 1.0;
    /* Wave quantisation: the last wave of blocks runs partly empty. */
    double blocks = (double)m.q_tiles * (double)a.batch;
    double slots = (double)dev->sm_count * per_sm;
    double waves = ceil(blocks / slots);
    double wave_eff = blocks / (waves * slots);
    /* Pipeline: a second buffer hides the loads; short tiles pay the per-tile overhead. */
    double pipe = m.stages == 1 ? 0.88 : 1.0;
    if (m.wgmma && m.stages == 2)
        pipe = 0.95; /* a second block barrier per tile */
    double tile = m.bkv == 32 ? 0.85 : m.bkv == 64 ? 1.0 : 0.97;
    double knobs = 1.0;
    if (m.math != MATH_FFMA) {
        knobs *= m.layout == LAYOUT_SWIZZLE ? 1.0 : 0.98;
        knobs *= m.qfrag == QFRAG_REGS ? 1.0 : 0.95;
    }
    knobs *= m.exp2 ? 1.0 : 0.96;
    double eff = base * occ_eff * wave_eff * pipe * tile * knobs;
    double t_math = e->flops / (peak * eff);
    double t_mem = e->bytes / (dev->dram_bytes_per_s * 0.85);
    e->seconds = (t_math > t_mem ? t_math : t_mem) + 3e-6;
}

const ops_family ops_family_attention = {
    .id = OPS_FAM_ATTENTION,
    .name = "attention",
    .n_knobs = N_KNOBS,
    .knobs = attention_knobs,
    .matches = attention_matches,
    .prune = attention_prune,
    .emit = attention_emit,
    .estimate = attention_estimate,
};
