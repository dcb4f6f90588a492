/* attention family: the split-KV decode kernels (ops/attention/attention.h lists the files).
 *
 * For a few query rows against many keys (decode: Sq of 1 to a few, Skv in the thousands) the
 * tiled kernels waste their tile's rows and run one block per query head. Here a block owns
 * one k/v head of one batch entry and one of SPLITS slices of its keys, and every query row that
 * reads that head: R = group x Sq rows (the grouped-query heads packed together, so K and V are
 * read once for all of them). Each warp walks 32-key chunks of the slice (chunk c of the slice
 * to warp c % W): in 8 rounds, each 8-lane group reads one key's row of K (coalesced) and scores
 * it against the R query rows (Q in shared memory, fp32), the sum going to lane j for key j; the
 * rows' running max and sum are updated (max across the warp by shuffles, sums kept per lane),
 * and O += P V reads V's rows of the chunk with each lane owning DV / 32 output columns. The
 * warps' unnormalised partials (O, max, sum) meet in shared memory and the block merges them in
 * warp order. With one slice (SPLITS 1: as many blocks as k/v heads, enough when they fill the
 * SMs) the block normalises and stores the output: one launch, no workspace. Otherwise it writes
 * the slice's partial to the workspace and a second kernel, one thread per output element,
 * combines the SPLITS partials in slice order (deterministic) and normalises.
 * Scores are in base 2 (log2(e) folded into the scale). With stages 2 or 3 a warp reads its chunks
 * from a ring of that many chunks in dynamic shared memory, filled by cp.async stages - 1 chunks
 * ahead (keys past the slice zero-filled), instead of loading each chunk when it scores it. */
#include "attention.h"

#include <stdio.h>
#include <string.h>

/* Floats of one partial (a warp's in shared memory, a slice's in the workspace): O (R x DV),
 * then the rows' max and sum. */
int64_t attn_splitkv_part_floats(const attn_info *a)
{
    int64_t r = a->group * a->sq;
    return r * (a->dv + 2);
}

int64_t attn_splitkv_workspace(const attn_info *a, const attn_geom *m)
{
    if (m->splits == 1)
        return 0; /* the block stores the output */
    return a->batch / a->group * m->splits * attn_splitkv_part_floats(a) * 4;
}

/* keys per slice: SKV / SPLITS rounded up to whole 32-key chunks */
static int64_t slice_keys(const attn_info *a, const attn_geom *m)
{
    int64_t k = (a->skv + m->splits - 1) / m->splits;
    return (k + 31) / 32 * 32;
}

/* The element of a packed pair of 16-bit values as float: low half or high half of u. */
static void emit_unpack_fns(kt_buf *b, const attn_info *a)
{
    const char *t = ops_emit_ctype(a->dt);
    kt_buf lo = {0}, hi = {0};
    char elo[64], ehi[64];
    snprintf(elo, sizeof(elo), "(%s)(u & 0xffffu)", t);
    snprintf(ehi, sizeof(ehi), "(%s)(u >> 16)", t);
    ops_emit_to_float(&lo, a->dt, elo);
    ops_emit_to_float(&hi, a->dt, ehi);
    kt_buf_line(b, "/* the low and the high 16-bit element of a packed pair, as float */");
    kt_buf_line(b, "__device__ __forceinline__ float ktd_lo(unsigned u)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    return %s;", lo.data);
    kt_buf_line(b, "}");
    kt_buf_line(b, "__device__ __forceinline__ float ktd_hi(unsigned u)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    return %s;", hi.data);
    kt_buf_line(b, "}");
    kt_buf_free(&lo);
    kt_buf_free(&hi);
}

/* The problem's constants both kernels read (the first kernel also D and SKV, the combine
 * PARTS). */
static void emit_constants(kt_buf *b, const attn_info *a, const attn_geom *m, bool combine)
{
    if (combine)
        kt_buf_line(b, "constexpr int DV = %lld, SQ = %lld;", (long long)a->dv, (long long)a->sq);
    else
        kt_buf_line(b, "constexpr int D = %lld, DV = %lld, SQ = %lld, SKV = %lld;", (long long)a->d,
                    (long long)a->dv, (long long)a->sq, (long long)a->skv);
    kt_buf_line(b,
                "constexpr int HQ = %lld, GROUP = %lld, HKV = HQ / GROUP; /* query heads, per "
                "k/v head, k/v heads */",
                (long long)a->hq, (long long)a->group);
    kt_buf_line(b, "constexpr int R = GROUP * SQ; /* query rows of a k/v head */");
    if (combine) /* one partial a slice: the warps merged theirs in the first kernel */
        kt_buf_line(b, "constexpr int PARTS = %d; /* partials a k/v head: a slice's each */",
                    m->splits);
    else
        kt_buf_line(b, "constexpr int W = %d, SPLITS = %d; /* warps a block, key slices */",
                    m->warps, m->splits);
    kt_buf_line(b,
                "constexpr int PART = R * (DV + 2); /* floats of a partial: O, then max, sum */");
}

/* The ring of stages > 1 (both kernels): each warp's STAGES 32-key chunks of K's rows, then V's,
 * in dynamic shared memory at row strides KSTR and VSTR, the fetch lambda, and the first
 * STAGES - 1 chunks in flight. */
static void emit_ring_setup(kt_buf *b, const attn_geom *m, const char *ty)
{
    kt_buf_line(b, "/* Each warp's ring of STAGES 32-key chunks (K's rows, then V's) in shared "
                   "memory, filled by cp.async");
    kt_buf_line(b, " * STAGES - 1 chunks ahead of the one it scores: a warp's own loads "
                   "would leave one chunk in");
    kt_buf_line(b, " * flight, too few bytes to stream HBM. Keys past the slice read as "
                   "zeros (zero-size copies). */");
    if (m->tc)
        kt_buf_line(b, "constexpr int KSTR = D + 8, VSTR = DV + 8; /* rows padded by 16 bytes: "
                       "ldmatrix's 8 rows hit distinct banks */");
    else
        kt_buf_line(b, "constexpr int KSTR = D, VSTR = DV; /* row strides */");
    kt_buf_line(b,
                "constexpr int STAGES = %d, CHUNK = 32 * (KSTR + VSTR); /* elements of a stage */",
                m->stages);
    kt_buf_line(b, "%s *ring = reinterpret_cast<%s *>(kt_smem) + (size_t)warp * STAGES * CHUNK;",
                ty, ty);
    kt_buf_line(b, "auto fetch = [&](int st, int c0) {");
    kt_buf_line(b, "    %s *sk = ring + st * CHUNK, *sv = sk + 32 * KSTR;", ty);
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = lane; i < 32 * D / 8; i += 32) {");
    kt_buf_line(b, "        const int row = i / (D / 8), key = c0 + row;");
    kt_buf_line(b, "        const bool in = key < k_end;");
    kt_buf_line(b,
                "        kt_cp_async16_pf(sk + row * KSTR + i %% (D / 8) * 8, gK + (size_t)(in ? "
                "key : 0) * D + i %% (D / 8) * 8, in ? 16 : 0);");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int i = lane; i < 32 * DV / 8; i += 32) {");
    kt_buf_line(b, "        const int row = i / (DV / 8), key = c0 + row;");
    kt_buf_line(b, "        const bool in = key < k_end;");
    kt_buf_line(b,
                "        kt_cp_async16_pf(sv + row * VSTR + i %% (DV / 8) * 8, gV + (size_t)(in ? "
                "key : 0) * DV + i %% (DV / 8) * 8, in ? 16 : 0);");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "    kt_cp_async_commit(); /* a group per chunk, empty past the slice */");
    kt_buf_line(b, "};");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int st = 0; st < STAGES - 1; st++)");
    kt_buf_line(b, "    fetch(st, split * SLICE + warp * 32 + st * W * 32);");
    kt_buf_line(b, "int stage = 0;");
}

/* The top of a chunk's iteration with the ring: refill, wait, the chunk's K and V (sK, sV). */
static void emit_ring_step(kt_buf *b, const char *ty)
{
    kt_buf_line(b, "/* the slot scored last time gets the chunk STAGES - 1 ahead; this one's "
                   "copies land */");
    kt_buf_line(b, "fetch(stage == 0 ? STAGES - 1 : stage - 1, kv0 + (STAGES - 1) * W * 32);");
    kt_buf_line(b, "kt_cp_async_wait<STAGES - 1>();");
    kt_buf_line(b, "__syncwarp();");
    kt_buf_line(b, "const %s *sK = ring + stage * CHUNK, *sV = sK + 32 * KSTR;", ty);
}

/* The end of a chunk's iteration with the ring. */
static void emit_ring_advance(kt_buf *b)
{
    kt_buf_line(b, "__syncwarp(); /* every lane done with the slot before it is refilled */");
    kt_buf_line(b, "stage = stage + 1 == STAGES ? 0 : stage + 1;");
}

/* After the key loop: every warp's partial gets a slot in shared memory (over the rings, once
 * their copies, zero-fills included, have landed and every warp is done reading them). */
static void emit_partial_slot(kt_buf *b, const attn_geom *m)
{
    if (m->stages > 1)
        kt_buf_line(b, "kt_cp_async_wait<0>(); /* the rings' last copies (zero-fills) land before "
                       "their space is reused */");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "float *part = reinterpret_cast<float *>(kt_smem) + warp * PART; /* this warp's "
                   "slot */");
}

/* The block's W partials merged in warp order: the output normalised (one slice) or the
 * slice's partial to the workspace. */
static void emit_block_merge(kt_buf *b, const attn_info *a, const attn_geom *m)
{
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "/* the W partials merged in warp order, a thread an element of O: rescaled to "
                   "their common max */");
    kt_buf_line(b, "const float *parts = reinterpret_cast<const float *>(kt_smem);");
    if (m->splits > 1)
        kt_buf_line(b, "float *slice = workspace + ((size_t)kvb * SPLITS + split) * PART;");
    kt_buf_line(b, "for (int i = threadIdx.x; i < R * DV; i += W * 32) {");
    b->indent += 4;
    kt_buf_line(b, "const int r = i / DV, c = i %% DV;");
    kt_buf_line(b, "float mx = KT_NEG_INF;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int w = 0; w < W; w++)");
    kt_buf_line(b, "    mx = kt_max(mx, parts[w * PART + R * DV + r]);");
    kt_buf_line(b, "const float base = mx == KT_NEG_INF ? 0.0f : mx;");
    kt_buf_line(b, "float sum = 0.0f, acc = 0.0f;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int w = 0; w < W; w++) {");
    kt_buf_line(b, "    const float f = kt_exp2(parts[w * PART + R * DV + r] - base);");
    kt_buf_line(b, "    sum = fmaf(parts[w * PART + R * DV + R + r], f, sum);");
    kt_buf_line(b, "    acc = fmaf(parts[w * PART + r * DV + c], f, acc);");
    kt_buf_line(b, "}");
    if (m->splits == 1) {
        kt_buf y = {0};
        ops_emit_from_float(&y, a->out_dt, "acc / sum");
        kt_buf_line(b, "/* row r: query r %% SQ of query head (kvb %% HKV) * GROUP + r / SQ of "
                       "batch entry kvb / HKV */");
        kt_buf_line(b, "const size_t qb = (size_t)(kvb / HKV) * HQ + kvb %% HKV * GROUP + r / SQ;");
        kt_buf_line(b, "out0[(qb * SQ + r %% SQ) * DV + c] = %s;", y.data);
        kt_buf_free(&y);
    } else {
        kt_buf_line(b, "slice[r * DV + c] = acc;");
        kt_buf_line(b, "if (c == 0) {");
        kt_buf_line(b, "    slice[R * DV + r] = mx;");
        kt_buf_line(b, "    slice[R * DV + R + r] = sum;");
        kt_buf_line(b, "}");
    }
    attn_emit_close(b, 1);
}

/* The first kernel's signature and the constants both forms read: a block per k/v batch entry
 * (blockIdx.y) and key slice (blockIdx.x); the output (one slice) or the slice's partial to the
 * workspace; the dynamic shared memory (the rings, then the warps' partials). */
static void emit_kernel_open(kt_buf *b, const ops_group *grp, const attn_info *a,
                             const attn_geom *m, const char *entry)
{
    const char *ty = ops_emit_ctype(a->dt);
    char scale[64];
    kt_buf_line(b,
                "/* Block: k/v batch entry blockIdx.y (batch x k/v head), key slice blockIdx.x; "
                "%s */",
                m->splits == 1 ? "the output" : "the slice's partial to the workspace");
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(%d)", m->threads);
    kt_buf_line(b, "%s(", entry);
    for (int i = 0; i < grp->n_in; i++)
        kt_buf_line(b, "    const %s *__restrict__ in%d,", ty, i);
    if (m->splits == 1)
        kt_buf_line(b, "    %s *__restrict__ out0)", ops_emit_ctype(a->out_dt));
    else
        kt_buf_line(b, "    float *__restrict__ workspace)");
    kt_buf_line(b, "{");
    b->indent += 4;
    kt_buf_line(b, OPS_DYNAMIC_SMEM " /* %s */",
                m->stages > 1 ? "the warps' rings, then their partials" : "the warps' partials");
    emit_constants(b, a, m, false);
    double s2 = a->scale * 1.4426950408889634;
    snprintf(scale, sizeof(scale), "%.9g", (double)(float)s2);
    kt_buf_line(b, "constexpr float SCALE = %s%sf; /* scale * log2(e): softmax in base 2 */", scale,
                strpbrk(scale, ".e") ? "" : ".0");
    kt_buf_line(b, "constexpr int SLICE = %lld; /* keys a slice: whole 32-key chunks */",
                (long long)slice_keys(a, m));
    kt_buf_line(b, "const int split = blockIdx.x, kvb = blockIdx.y, warp = threadIdx.x >> 5, lane "
                   "= threadIdx.x & 31;");
}

/* The first kernel, FFMA (mma=splitkv). */
static void emit_ffma_kernel(kt_buf *b, const ops_group *grp, const attn_info *a,
                             const attn_geom *m, const char *entry)
{
    const char *ty = ops_emit_ctype(a->dt);
    int iq = attn_input_index(grp, a->q), ik = attn_input_index(grp, a->k),
        iv = attn_input_index(grp, a->v);
    int cv = (int)a->dv / 32;
    const char *vword = cv == 2 ? "unsigned" : cv == 4 ? "uint2" : "uint4";
    const bool ring = m->stages > 1;
    emit_unpack_fns(b, a);
    kt_buf_printf(b, "\n");
    emit_kernel_open(b, grp, a, m, entry);
    kt_buf_line(b, "constexpr int DP = D / 64, CV = DV / 32; /* 16-byte pieces of a K row a lane "
                   "reads; O columns a lane owns */");
    kt_buf_line(b, "__shared__ float sq[R][D];");
    kt_buf_line(b, "/* row r: query r %% SQ of query head (kvb %% HKV) * GROUP + r / SQ of batch "
                   "entry kvb / HKV */");
    kt_buf_line(b, "for (int i = threadIdx.x; i < R * D; i += blockDim.x) {");
    kt_buf_line(b, "    const int r = i / D, d = i %% D;");
    kt_buf_line(b, "    const size_t qb = (size_t)(kvb / HKV) * HQ + kvb %% HKV * GROUP + r / SQ;");
    kt_buf lq = {0};
    char qexpr[96];
    snprintf(qexpr, sizeof(qexpr), "in%d[(qb * SQ + r %% SQ) * D + d]", iq);
    ops_emit_to_float(&lq, a->dt, qexpr);
    kt_buf_line(b, "    sq[r][d] = %s;", lq.data);
    kt_buf_free(&lq);
    kt_buf_line(b, "}");
    kt_buf_line(b, "__syncthreads();");
    kt_buf_line(b, "const %s *gK = in%d + (size_t)kvb * SKV * D;", ty, ik);
    kt_buf_line(b, "const %s *gV = in%d + (size_t)kvb * SKV * DV;", ty, iv);
    kt_buf_line(b, "float m[R], l[R], o[R][CV]; /* running max (base 2), this lane's share of the "
                   "sum, its O columns */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    kt_buf_line(b, "    m[r] = KT_NEG_INF;");
    kt_buf_line(b, "    l[r] = 0.0f;");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int c = 0; c < CV; c++)");
    kt_buf_line(b, "        o[r][c] = 0.0f;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "const int k_end = min(SKV, (split + 1) * SLICE);");
    if (ring)
        emit_ring_setup(b, m, ty);
    kt_buf_line(b, "for (int kv0 = split * SLICE + warp * 32; kv0 < k_end; kv0 += W * 32) {");
    b->indent += 4;
    if (ring)
        emit_ring_step(b, ty);
    kt_buf_line(b, "const int key = kv0 + lane; /* the key whose scores this lane keeps */");
    kt_buf_line(b, "const bool live = key < k_end;");
    kt_buf_line(b, "float s[R];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++)");
    kt_buf_line(b, "    s[r] = 0.0f;");
    kt_buf_line(b, "/* Q K^T in 8 rounds of 4 keys, a key to each 8-lane group (its row read "
                   "coalesced: lane i of the group");
    kt_buf_line(b, " * takes 16-byte pieces i, i + 8, ...), the group's sums added by shuffles, "
                   "then handed to the key's lane */");
    if (ring)
        kt_buf_line(b, "#pragma unroll 2");
    else
        kt_buf_line(b, "#pragma unroll 2 /* the loads of two rounds in flight: more spilled */");
    kt_buf_line(b, "for (int t = 0; t < 8; t++) {");
    b->indent += 4;
    kt_buf_line(b, "uint4 kr[DP];");
    if (ring) {
        kt_buf_line(b, "const uint4 *row = reinterpret_cast<const uint4 *>(sK + (t * 4 + (lane >> "
                       "3)) * KSTR);");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int p = 0; p < DP; p++)");
        kt_buf_line(b, "    kr[p] = row[p * 8 + (lane & 7)];");
    } else {
        kt_buf_line(b, "const int kt = kv0 + t * 4 + (lane >> 3);");
        kt_buf_line(b, "#pragma unroll");
        kt_buf_line(b, "for (int p = 0; p < DP; p++)");
        kt_buf_line(b, "    kr[p] = kt < k_end ? reinterpret_cast<const uint4 *>(gK + (size_t)kt * "
                       "D)[p * 8 + (lane & 7)] : make_uint4(0u, 0u, 0u, 0u);");
    }
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    kt_buf_line(b, "    float acc = 0.0f, acc1 = 0.0f; /* two chains */");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int p = 0; p < DP; p++) {");
    kt_buf_line(b, "        const float *q = &sq[r][(p * 8 + (lane & 7)) * 8];");
    kt_buf_line(b, "        acc = fmaf(q[0], ktd_lo(kr[p].x), fmaf(q[1], ktd_hi(kr[p].x), acc));");
    kt_buf_line(b,
                "        acc1 = fmaf(q[2], ktd_lo(kr[p].y), fmaf(q[3], ktd_hi(kr[p].y), acc1));");
    kt_buf_line(b, "        acc = fmaf(q[4], ktd_lo(kr[p].z), fmaf(q[5], ktd_hi(kr[p].z), acc));");
    kt_buf_line(b,
                "        acc1 = fmaf(q[6], ktd_lo(kr[p].w), fmaf(q[7], ktd_hi(kr[p].w), acc1));");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "    acc += acc1;");
    kt_buf_line(b, "    acc += __shfl_xor_sync(0xffffffffu, acc, 1);");
    kt_buf_line(b, "    acc += __shfl_xor_sync(0xffffffffu, acc, 2);");
    kt_buf_line(b, "    acc += __shfl_xor_sync(0xffffffffu, acc, 4);");
    kt_buf_line(b, "    /* key kv0 + 4 t + g's sum is in group g: lane 4 t + g takes it */");
    kt_buf_line(b, "    const float mine = __shfl_sync(0xffffffffu, acc, (lane & 3) * 8);");
    kt_buf_line(b, "    if (lane >> 2 == t)");
    kt_buf_line(b, "        s[r] = mine;");
    kt_buf_line(b, "}");
    attn_emit_close(b, 1);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    kt_buf_line(b, "    s[r] *= SCALE;");
    kt_buf_line(b, "    if (!live%s)", a->causal ? " || key > r % SQ" : "");
    kt_buf_line(b, "        s[r] = KT_NEG_INF;%s",
                a->causal ? " /* causal: keys after the query */" : "");
    kt_buf_line(b, "}");
    kt_buf_line(b, "/* online softmax over the chunk: the rows' max across the warp; p = 2^(s - "
                   "max) */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    kt_buf_line(b, "    float mx = s[r];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int x = 16; x > 0; x >>= 1)");
    kt_buf_line(b, "        mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, x));");
    kt_buf_line(b, "    mx = kt_max(mx, m[r]);");
    kt_buf_line(b, "    const float base = mx == KT_NEG_INF ? 0.0f : mx; /* nothing live yet: p = "
                   "0, no NaN */");
    kt_buf_line(b, "    const float alpha = kt_exp2(m[r] - base);");
    kt_buf_line(b, "    s[r] = kt_exp2(s[r] - base);");
    kt_buf_line(b, "    l[r] = l[r] * alpha + s[r];");
    kt_buf_line(b, "    m[r] = mx;");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int c = 0; c < CV; c++)");
    kt_buf_line(b, "        o[r][c] *= alpha;");
    kt_buf_line(b, "}");
    kt_buf_line(b, "/* O += P V: V's rows of the chunk, this lane's columns; key j's p from lane j "
                   "*/");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < 32; j++) {");
    b->indent += 4;
    if (ring)
        kt_buf_line(b, "const %s vw = reinterpret_cast<const %s *>(sV + j * VSTR)[lane];", vword,
                    vword);
    else
        kt_buf_line(b,
                    "const %s vw = kv0 + j < k_end ? reinterpret_cast<const %s *>(gV + "
                    "(size_t)(kv0 + j) * DV)[lane] : %s;",
                    vword, vword,
                    cv == 2   ? "0u"
                    : cv == 4 ? "make_uint2(0u, 0u)"
                              : "make_uint4(0u, 0u, 0u, 0u)");
    if (cv == 2)
        kt_buf_line(b, "const float v[CV] = {ktd_lo(vw), ktd_hi(vw)};");
    else if (cv == 4)
        kt_buf_line(b, "const float v[CV] = {ktd_lo(vw.x), ktd_hi(vw.x), ktd_lo(vw.y), "
                       "ktd_hi(vw.y)};");
    else
        kt_buf_line(b, "const float v[CV] = {ktd_lo(vw.x), ktd_hi(vw.x), ktd_lo(vw.y), "
                       "ktd_hi(vw.y), ktd_lo(vw.z), ktd_hi(vw.z), ktd_lo(vw.w), ktd_hi(vw.w)};");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    kt_buf_line(b, "    const float p = __shfl_sync(0xffffffffu, s[r], j);");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int c = 0; c < CV; c++)");
    kt_buf_line(b, "        o[r][c] = fmaf(p, v[c], o[r][c]);");
    kt_buf_line(b, "}");
    attn_emit_close(b, 1);
    if (ring)
        emit_ring_advance(b);
    attn_emit_close(b, 1);
    kt_buf_line(b, "/* the warp's partial to shared memory: O unnormalised, the max, the sum over "
                   "its lanes */");
    emit_partial_slot(b, m);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int r = 0; r < R; r++) {");
    kt_buf_line(b, "    float sum = l[r];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int x = 16; x > 0; x >>= 1)");
    kt_buf_line(b, "        sum += __shfl_xor_sync(0xffffffffu, sum, x);");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int c = 0; c < CV; c++)");
    kt_buf_line(b, "        part[r * DV + lane * CV + c] = o[r][c];");
    kt_buf_line(b, "    if (lane == 0) {");
    kt_buf_line(b, "        part[R * DV + r] = m[r];");
    kt_buf_line(b, "        part[R * DV + R + r] = sum;");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    emit_block_merge(b, a, m);
    attn_emit_close(b, 1);
    kt_buf_printf(b, "\n");
}

/* The first kernel on the tensor cores (mma=splitkv_tc): the R packed rows are one m16 tile (rows
 * past R zero, never stored), Q's A fragments in registers for the whole slice. Per 32-key chunk
 * of the ring: S = Q K^T over D / 16 k steps and four 8-key n tiles (K's B fragments by
 * ldmatrix from the padded rows), the online softmax on the accumulators (lane (g, t4) holds
 * rows g and g + 8, keys 8 j + 2 t4 and + 1), P repacked as A fragments, O += P V with V's B
 * fragments by ldmatrix.trans. The partial is stored as the FFMA kernel stores it. */
static void emit_tc_kernel(kt_buf *b, const ops_group *grp, const attn_info *a, const attn_geom *m,
                           const char *entry)
{
    const char *ty = ops_emit_ctype(a->dt), *t = attn_math_labels[m->math];
    int iq = attn_input_index(grp, a->q), ik = attn_input_index(grp, a->k),
        iv = attn_input_index(grp, a->v);
    emit_kernel_open(b, grp, a, m, entry);
    kt_buf_line(b, "const int g = lane >> 2, t4 = lane & 3; /* mma fragment row group, column "
                   "pair */");
    kt_buf_line(b, "const int lm = lane >> 3, lr = lane & 7; /* ldmatrix: matrix and row this "
                   "lane addresses */");
    kt_buf_line(b, "const %s *gK = in%d + (size_t)kvb * SKV * D;", ty, ik);
    kt_buf_line(b, "const %s *gV = in%d + (size_t)kvb * SKV * DV;", ty, iv);
    kt_buf_line(b, "/* Q's A fragments: rows g and g + 8 (row r: query r %% SQ of query head "
                   "(kvb %% HKV) * GROUP + r / SQ");
    kt_buf_line(b, " * of batch entry kvb / HKV), k 2 t4 (+ 8) of each k16 step */");
    kt_buf_line(b, "unsigned qf[D / 16][4];");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int h = 0; h < 2; h++) {");
    kt_buf_line(b, "    const int r = g + 8 * h;");
    kt_buf_line(b, "    const size_t qb = (size_t)(kvb / HKV) * HQ + kvb %% HKV * GROUP + r / SQ;");
    kt_buf_line(b,
                "    const unsigned *qrow = reinterpret_cast<const unsigned *>(in%d + (qb * SQ + "
                "r %% SQ) * D);",
                iq);
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int ks = 0; ks < D / 16; ks++) {");
    kt_buf_line(b, "        qf[ks][h] = r < R ? qrow[ks * 8 + t4] : 0u;");
    kt_buf_line(b, "        qf[ks][2 + h] = r < R ? qrow[ks * 8 + 4 + t4] : 0u;");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    kt_buf_line(b, "float o[DV / 8][4]; /* O, C layout: rows g (0, 1) and g + 8 (2, 3) */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int n = 0; n < DV / 8; n++)");
    kt_buf_line(b, "    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;");
    kt_buf_line(b, "float mrow[2] = {KT_NEG_INF, KT_NEG_INF}, lrow[2] = {0.0f, 0.0f}; /* rows g, "
                   "g + 8: max (base 2), this lane's share of the sum */");
    kt_buf_line(b, "const int k_end = min(SKV, (split + 1) * SLICE);");
    emit_ring_setup(b, m, ty);
    kt_buf_line(b, "for (int kv0 = split * SLICE + warp * 32; kv0 < k_end; kv0 += W * 32) {");
    b->indent += 4;
    emit_ring_step(b, ty);
    kt_buf_line(b, "float s[4][4]; /* S, C layout, n tile j: keys kv0 + 8 j + 2 t4 (+ 1) */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < 4; j++)");
    kt_buf_line(b, "    s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int ks = 0; ks < D / 16; ks++) {");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int n16 = 0; n16 < 2; n16++) {");
    kt_buf_line(b,
                "        unsigned kb[2][2]; /* B fragments of key n tiles 2 n16 and 2 n16 + 1 */");
    kt_buf_line(b, "        kt_ldmatrix_x4(kb[0][0], kb[0][1], kb[1][0], kb[1][1],");
    kt_buf_line(b, "                       sK + (n16 * 16 + (lm >> 1) * 8 + lr) * KSTR + ks * 16 + "
                   "(lm & 1) * 8);");
    kt_buf_line(b, "        kt_mma_m16n8k16_%s(s[2 * n16], qf[ks], kb[0]);", t);
    kt_buf_line(b, "        kt_mma_m16n8k16_%s(s[2 * n16 + 1], qf[ks], kb[1]);", t);
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    kt_buf_line(b, "/* scale (base 2); keys past the slice%s score -inf */",
                a->causal ? " or after their query" : "");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int j = 0; j < 4; j++)");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int e = 0; e < 4; e++) {");
    kt_buf_line(b, "        const int key = kv0 + 8 * j + 2 * t4 + (e & 1);");
    if (a->causal)
        kt_buf_line(b, "        const int r = g + 8 * (e >> 1);");
    kt_buf_line(b, "        s[j][e] = key < k_end%s ? s[j][e] * SCALE : KT_NEG_INF;",
                a->causal ? " && key <= r % SQ" : "");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "/* online softmax per row: the max over the row's 4 lanes; p = 2^(s - max) */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int h = 0; h < 2; h++) {");
    kt_buf_line(b, "    float mx = mrow[h];");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < 4; j++)");
    kt_buf_line(b, "        mx = kt_max(mx, kt_max(s[j][2 * h], s[j][2 * h + 1]));");
    kt_buf_line(b, "    mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, 1));");
    kt_buf_line(b, "    mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, 2));");
    kt_buf_line(b, "    const float base = mx == KT_NEG_INF ? 0.0f : mx; /* nothing live yet: p = "
                   "0, no NaN */");
    kt_buf_line(b, "    const float alpha = kt_exp2(mrow[h] - base);");
    kt_buf_line(b, "    mrow[h] = mx;");
    kt_buf_line(b, "    float sum = 0.0f;");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int j = 0; j < 4; j++) {");
    kt_buf_line(b, "        s[j][2 * h] = kt_exp2(s[j][2 * h] - base);");
    kt_buf_line(b, "        s[j][2 * h + 1] = kt_exp2(s[j][2 * h + 1] - base);");
    kt_buf_line(b, "        sum += s[j][2 * h] + s[j][2 * h + 1];");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "    lrow[h] = lrow[h] * alpha + sum;");
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int n = 0; n < DV / 8; n++) {");
    kt_buf_line(b, "        o[n][2 * h] *= alpha;");
    kt_buf_line(b, "        o[n][2 * h + 1] *= alpha;");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    kt_buf_line(b,
                "/* O += P V: P's A fragments from S (keys 16 kk .. 16 kk + 15), V's B fragments "
                "by ldmatrix.trans */");
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int kk = 0; kk < 2; kk++) {");
    kt_buf_line(b,
                "    const unsigned pa[4] = {kt_pack_%sx2(s[2 * kk][0], s[2 * kk][1]), "
                "kt_pack_%sx2(s[2 * kk][2], s[2 * kk][3]),",
                t, t);
    kt_buf_line(b,
                "                            kt_pack_%sx2(s[2 * kk + 1][0], s[2 * kk + 1][1]), "
                "kt_pack_%sx2(s[2 * kk + 1][2], s[2 * kk + 1][3])};",
                t, t);
    kt_buf_line(b, "    #pragma unroll");
    kt_buf_line(b, "    for (int n16 = 0; n16 < DV / 16; n16++) {");
    kt_buf_line(b,
                "        unsigned vb[2][2]; /* B fragments of output n tiles 2 n16 and 2 n16 + 1 "
                "*/");
    kt_buf_line(b, "        kt_ldmatrix_x4_trans(vb[0][0], vb[0][1], vb[1][0], vb[1][1],");
    kt_buf_line(b, "                             sV + (kk * 16 + (lm & 1) * 8 + lr) * VSTR + n16 * "
                   "16 + (lm >> 1) * 8);");
    kt_buf_line(b, "        kt_mma_m16n8k16_%s(o[2 * n16], pa, vb[0]);", t);
    kt_buf_line(b, "        kt_mma_m16n8k16_%s(o[2 * n16 + 1], pa, vb[1]);", t);
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    emit_ring_advance(b);
    attn_emit_close(b, 1);
    kt_buf_line(b,
                "/* the warp's partial (rows below R) to shared memory: O unnormalised, the max, "
                "the sum over the row's 4 lanes */");
    emit_partial_slot(b, m);
    kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int h = 0; h < 2; h++) {");
    kt_buf_line(b, "    const int r = g + 8 * h;");
    kt_buf_line(b, "    float sum = lrow[h];");
    kt_buf_line(b, "    sum += __shfl_xor_sync(0xffffffffu, sum, 1);");
    kt_buf_line(b, "    sum += __shfl_xor_sync(0xffffffffu, sum, 2);");
    kt_buf_line(b, "    if (r < R) {");
    kt_buf_line(b, "        #pragma unroll");
    kt_buf_line(b, "        for (int n = 0; n < DV / 8; n++) {");
    kt_buf_line(b, "            part[r * DV + 8 * n + 2 * t4] = o[n][2 * h];");
    kt_buf_line(b, "            part[r * DV + 8 * n + 2 * t4 + 1] = o[n][2 * h + 1];");
    kt_buf_line(b, "        }");
    kt_buf_line(b, "        if (t4 == 0) {");
    kt_buf_line(b, "            part[R * DV + r] = mrow[h];");
    kt_buf_line(b, "            part[R * DV + R + r] = sum;");
    kt_buf_line(b, "        }");
    kt_buf_line(b, "    }");
    kt_buf_line(b, "}");
    emit_block_merge(b, a, m);
    attn_emit_close(b, 1);
    kt_buf_printf(b, "\n");
}

/* The second kernel: the partials combined. */
static void emit_combine(kt_buf *b, const attn_info *a, const attn_geom *m, const char *entry)
{
    const char *oty = ops_emit_ctype(a->out_dt);
    kt_buf_line(b, "/* One thread per output element: the PARTS partials of its k/v head combined "
                   "in order, normalised */");
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(256)");
    kt_buf_line(b, "%s_combine(const float *__restrict__ workspace, %s *__restrict__ out0)", entry,
                oty);
    kt_buf_line(b, "{");
    b->indent += 4;
    emit_constants(b, a, m, true);
    kt_buf_line(b, "constexpr long long TOTAL = %lldLL; /* output elements */",
                (long long)(a->batch * a->sq * a->dv));
    kt_buf_line(b, "const long long i = (long long)blockIdx.x * 256 + threadIdx.x;");
    kt_buf_line(b, "if (i >= TOTAL)");
    kt_buf_line(b, "    return;");
    kt_buf_line(b, "const int c = (int)(i %% DV);");
    kt_buf_line(b, "const long long row = i / DV, bidx = row / SQ; /* the query row, its batch "
                   "entry (query head) */");
    kt_buf_line(b, "const long long kvb = bidx / HQ * HKV + bidx %% HQ / GROUP;");
    kt_buf_line(b, "const int r = (int)(bidx %% HQ %% GROUP) * SQ + (int)(row %% SQ);");
    kt_buf_line(b, "const float *p0 = workspace + (size_t)kvb * PARTS * PART;");
    kt_buf_line(b, "float mx = KT_NEG_INF;");
    kt_buf_line(b, "for (int p = 0; p < PARTS; p++)");
    kt_buf_line(b, "    mx = kt_max(mx, p0[(size_t)p * PART + R * DV + r]);");
    kt_buf_line(b, "const float base = mx == KT_NEG_INF ? 0.0f : mx;");
    kt_buf_line(b, "float sum = 0.0f, acc = 0.0f;");
    kt_buf_line(b, "for (int p = 0; p < PARTS; p++) {");
    kt_buf_line(b, "    const float *w = p0 + (size_t)p * PART;");
    kt_buf_line(b, "    const float f = kt_exp2(w[R * DV + r] - base);");
    kt_buf_line(b, "    sum = fmaf(w[R * DV + R + r], f, sum);");
    kt_buf_line(b, "    acc = fmaf(w[r * DV + c], f, acc);");
    kt_buf_line(b, "}");
    kt_buf y = {0};
    ops_emit_from_float(&y, a->out_dt, "acc / sum");
    kt_buf_line(b, "out0[i] = %s;", y.data);
    kt_buf_free(&y);
    attn_emit_close(b, 1);
}

void attn_emit_splitkv_kernels(kt_buf *b, const ops_group *grp, const attn_info *a,
                               const attn_geom *m, const char *entry)
{
    if (m->tc)
        emit_tc_kernel(b, grp, a, m, entry);
    else
        emit_ffma_kernel(b, grp, a, m, entry);
    if (m->splits > 1)
        emit_combine(b, a, m, entry);
}

void attn_splitkv_launches(const ops_group *grp, const attn_info *a, const attn_geom *m,
                           const char *entry, ops_emitted *out)
{
    out->n_kernels = m->splits > 1 ? 2 : 1;
    out->workspace_bytes = attn_splitkv_workspace(a, m);
    ops_kernel_launch *k = &out->kernels[0];
    snprintf(k->entry, sizeof(k->entry), "%s", entry);
    k->grid[0] = (uint32_t)m->splits;
    k->grid[1] = (uint32_t)(a->batch / a->group);
    k->grid[2] = 1;
    k->block[0] = (uint32_t)m->threads;
    k->block[1] = k->block[2] = 1;
    k->smem_bytes = (uint32_t)m->smem; /* rings, partials (FFMA: Q's rows are a static array) */
    for (int i = 0; i < grp->n_in; i++)
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->in[i]};
    if (m->splits == 1) {
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->out[0]};
        return;
    }
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 0};
    k = &out->kernels[1];
    snprintf(k->entry, sizeof(k->entry), "%s_combine", entry);
    int64_t total = a->batch * a->sq * a->dv;
    k->grid[0] = (uint32_t)((total + 255) / 256);
    k->grid[1] = k->grid[2] = 1;
    k->block[0] = 256;
    k->block[1] = k->block[2] = 1;
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 0};
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->out[0]};
}
