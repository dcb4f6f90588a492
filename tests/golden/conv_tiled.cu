/*
 * ktune kernel — family conv
 * schedule: conv algo=tiled math=ffma bm=64 bn=96 bk=8 warps=1 stages=2 tk=8 tq=8 filter=shared
 * graph: alexnet_conv1
 *   c = conv2d(X, W, b)  f32 [100, 96, 55, 55]
 *   Y = relu(c)  f32 [100, 96, 55, 55]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/cp_async.cuh"
/* ---- ktune prelude: 16-bit storage types and math helpers ---- */
typedef unsigned short kt_f16;
typedef unsigned short kt_bf16;
__device__ __forceinline__ float kt_f16_to_f32(kt_f16 h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ kt_f16 kt_f32_to_f16(float f)
{
    kt_f16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float kt_bf16_to_f32(kt_bf16 h)
{
    return __uint_as_float(((unsigned)h) << 16);
}
__device__ __forceinline__ kt_bf16 kt_f32_to_bf16(float f)
{
    kt_bf16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float kt_gelu(float x)
{
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}
__device__ __forceinline__ float kt_gelu_tanh(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float kt_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float kt_softplus(float x)
{
    /* log1p(exp(x)) without overflow: for large x the result is x. */
    return x > 20.0f ? x : log1pf(expf(x));
}
/* max and min that return NaN when either operand is NaN, as PyTorch's maximum, minimum,
 * relu, clamp and amax do (fmaxf and fminf return the other operand). One instruction on
 * sm_80 and later, like fmaxf. */
__device__ __forceinline__ float kt_max(float a, float b)
{
#if __CUDA_ARCH__ >= 800
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return a != a || b != b ? __int_as_float(0x7fffffff) : fmaxf(a, b);
#endif
}
__device__ __forceinline__ float kt_min(float a, float b)
{
#if __CUDA_ARCH__ >= 800
    float r;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return a != a || b != b ? __int_as_float(0x7fffffff) : fminf(a, b);
#endif
}
/* ---- end of prelude ---- */

typedef int idx_t; /* element offsets */

/* Problem shape: input NCHW, filter OIHW, output NCHW. */
constexpr int BATCH = 100, C = 3, H = 224, W = 224;
constexpr int K = 96, R = 11, S = 11;
constexpr int P = 55, Q = 55;
constexpr int STR_H = 4, STR_W = 4, PAD_H = 2, PAD_W = 2;
constexpr int DIL_H = 1, DIL_W = 1;
constexpr int GROUPS = 1, CG = 3, KG = 96; /* channels per group */
/* GEMM view: rows are output pixels, columns output channels of a group,
 * the reduction runs over (c, r, s) in the filter's memory order. */
constexpr int GEMM_M = BATCH * P * Q, GEMM_N = KG, GEMM_K = CG * R * S;

/* Bias, epilogue and store of output element (n, k, p, q). */
__device__ __forceinline__ void kt_conv_store(float acc, idx_t n, idx_t k, idx_t p, idx_t q,
                                              const float *__restrict__ x,
                                              const float *__restrict__ w,
                                              const float *__restrict__ bias, float *__restrict__ y)
{
    const float v0 = acc + bias[k]; /* c = conv2d */
    const float v1 = kt_max(v0, 0.0f); /* Y = relu */
    y[((n * K + k) * P + p) * Q + q] = v1;
}

struct __align__(16) float_x4 {
    float v[4];
};
/* Tiled direct convolution: a block computes BN output channels of an OH x OW output tile of
 * one image; a thread TK channels x TQ adjacent columns of one tile row. Input channels are
 * staged one at a time: the input patch under the tile (zeros outside the image) and the
 * filter slice [R * S][BNP] of that channel. */
constexpr int BM = 64, BN = 96, TK = 8, TQ = 8, THREADS = 96, NW = THREADS / 32;
constexpr int STAGES = 2, MIN_BLOCKS = 2;
constexpr int OH = 8, OW = 8;              /* output tile: OH * OW == BM */
constexpr int CGN = OW / TQ, PT = OH * CGN; /* column groups, threads per channel group */
constexpr int TILES_P = (P + OH - 1) / OH, TILES_Q = (Q + OW - 1) / OW;
constexpr int KBLOCKS = (K + BN - 1) / BN;
/* The input patch: IH x IW, stored phase-split by the stride in both directions: row y at
 * stored row (y % STR_H) * RIDX + y / STR_H, column x at word (x % STR_W) * PL + x / STR_W. */
constexpr int IH = (OH - 1) * STR_H + R, IW = (OW - 1) * STR_W + S;
constexpr int RIDX = (IH + STR_H - 1) / STR_H; /* stored rows per row phase */
constexpr int PL = 12;  /* words per column phase (what the windows reach) */
constexpr int RP = 52; /* row pitch: STR_W * PL, padded against bank conflicts */
constexpr int BNP = 100; /* filter row pitch: BN rounded to 16 bytes, off 32 banks */
constexpr int XS = STR_H * RIDX * RP, WS = R * S * BNP, STAGE = XS + WS; /* words */
constexpr int WV = (TQ + (S - 1) / STR_W + 3) / 4; /* 16-byte loads of the widest window */
constexpr int MS = (S + STR_W - 1) / STR_W;        /* filter columns per phase, at most */
/* The copies of a channel: a warp takes patch rows y = warp + NW * t (t < XT) and filter
 * channels j = warp + NW * t (t < FT), its lanes patch columns x = lane + 32 * i (i < XI) and
 * filter taps rs = lane + 32 * i (i < FI): reads coalesce, and every offset but the channel's
 * and the thread's is a constant. Words the windows reach past IW are never multiplied:
 * not copied. */
constexpr int XT = (IH + NW - 1) / NW, XI = (IW + 31) / 32;
constexpr int FT = (BN + NW - 1) / NW, FI = (R * S + 31) / 32;

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
ktune_conv_tiled(const float *__restrict__ x, const float *__restrict__ w,
                 const float *__restrict__ bias, float *__restrict__ y)
{
    extern __shared__ __align__(128) unsigned char kt_smem[];
    float *const smem = reinterpret_cast<float *>(kt_smem); /* [STAGES][STAGE], then the output tile */
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    /* Channel blocks of one tile are neighbours in launch order: they read the same patch. */
    const int kb = blockIdx.x % KBLOCKS, tile = blockIdx.x / KBLOCKS;
    const int n = blockIdx.y;
    const int k0 = kb * BN, p0 = (tile / TILES_Q) * OH, q0 = (tile % TILES_Q) * OW;
    const int h0 = p0 * STR_H - PAD_H, w0 = q0 * STR_W - PAD_W; /* patch origin */
    const float *xn = x + (idx_t)n * C * H * W;
    const unsigned smem0 = kt_smem_u32(kt_smem);

    /* Filter channel j = warp + NW * t is copied while NW * t < jn (inside BN and K). */
    const int jn = (K - k0 < BN ? K - k0 : BN) - warp;
    const bool tap_last = lane < R * S - 32 * (FI - 1);
    const float *wt = w + (idx_t)(k0 + warp) * GEMM_K + lane;
    const unsigned wd = smem0 + 4 * (XS + lane * BNP + warp);

    /* Issues the copies of input channel c into stage `stage`. */
    auto load_chunk = [&](int c, int stage) {
        const unsigned so = 4 * stage * STAGE;
        const float *xc = xn + (idx_t)c * H * W;
        /* Patch column x = lane + 32 * i: its stored word and whether it lies in the image (else
         * zero-filled: a copy of 0 bytes reads nothing). Recomputed per channel: the lane id comes
         * from a volatile read, so none of this is hoisted to hold registers during the multiplies. */
        const unsigned ln = kt_lane_id();
        unsigned xdst[XI];
        bool xin[XI];
        #pragma unroll
        for (int i = 0; i < XI; i++) {
            const unsigned xx = ln + 32 * i;
            /* With STR_W dividing 32 the offsets of i > 0 are constants. */
            xdst[i] = smem0 + so +
                      4 * (32 % STR_W == 0 ? (ln % STR_W) * PL + ln / STR_W + 32 * i / STR_W
                                           : (xx % STR_W) * PL + xx / STR_W);
            xin[i] = (unsigned)(w0 + (int)xx) < (unsigned)W;
        }
        const bool x_last = (int)ln < IW - 32 * (XI - 1); /* the last column group is partial */
        #pragma unroll 
        for (int t = 0; t < XT; t++) {
            const int y = warp + NW * t;
            if (t < XT - 1 || IH % NW == 0 || y < IH) {
                const int h = h0 + y;
                const bool in = (unsigned)h < (unsigned)H;
                const float *xr = xc + ((idx_t)h * W + w0 + (int)ln);
                const unsigned d = 4 * RP * ((y % STR_H) * RIDX + y / STR_H);
                #pragma unroll
                for (int i = 0; i < XI; i++)
                    if (i < XI - 1 || x_last)
                        kt_cp_async4_u32(xdst[i] + d, xr + 32 * i, in && xin[i] ? 4 : 0);
            }
        }
        const float *wc = wt + c * R * S;
        #pragma unroll 
        for (int t = 0; t < FT; t++)
            if ((NW * (t + 1) <= BN && K % BN == 0) || NW * t < jn) {
                #pragma unroll
                for (int i = 0; i < FI; i++)
                    if (i < FI - 1 || tap_last)
                        kt_cp_async4_u32_all(wd + so + 4 * (32 * i * BNP + NW * t),
                                             wc + NW * t * GEMM_K + 32 * i);
            }
    };

    /* Thread tile: channels k0 + kg * TK + j, row p0 + pr, columns q0 + cg * TQ + i. The lanes of
     * a warp differ in pixels (window loads spread over banks) and mostly share kg (filter
     * loads broadcast). */
    const int kg = tid / PT, pt = tid % PT, pr = pt / CGN, cg = pt % CGN;
    float acc[TK][TQ] = {};
    auto compute_chunk = [&](int stage) {
        const float *xs = smem + stage * STAGE + pr * RP + cg * TQ;
        const float *ws = smem + stage * STAGE + XS + kg * TK;
        #pragma unroll 1
        for (int r = 0; r < R; r++) {
            /* Input row pr * STR_H + r of the patch, filter row r. */
            const float *xr = xs + ((r % STR_H) * RIDX + r / STR_H) * RP;
            const float *wr = ws + r * S * BNP;
            #pragma unroll
            for (int ph = 0; ph < STR_W && ph < S; ph++) {
                /* Filter columns s = ph + m * STR_W read words m .. m + TQ - 1 of this window. */
                float xv[4 * WV];
                #pragma unroll
                for (int v = 0; v < WV; v++)
                    if (4 * v < TQ + (S - 1 - ph) / STR_W) {
                        const float_x4 t = *(const float_x4 *)(xr + ph * PL + 4 * v);
                        #pragma unroll
                        for (int u = 0; u < 4; u++)
                            xv[4 * v + u] = t.v[u];
                    }
                #pragma unroll
                for (int m = 0; m < MS; m++) {
                    const int s = ph + m * STR_W;
                    if (s >= S)
                        break;
                    float wv[TK]; /* filter (r, s) of the thread's channels: a broadcast */
                    #pragma unroll
                    for (int j = 0; j < TK; j += 4) {
                        const float_x4 t = *(const float_x4 *)(wr + s * BNP + j);
                        #pragma unroll
                        for (int u = 0; u < 4; u++)
                            wv[j + u] = t.v[u];
                    }
                    #pragma unroll
                    for (int j = 0; j < TK; j++) {
                        #pragma unroll
                        for (int i = 0; i < TQ; i++)
                            acc[j][i] = fmaf(xv[i + m], wv[j], acc[j][i]);
                    }
                }
            }
        }
    };

    /* STAGES - 1 channels in flight while one is computed. */
    #pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < C)
            load_chunk(st, st);
        kt_cp_async_commit();
    }
    #pragma unroll 1
    for (int c = 0; c < C; c++) {
        kt_cp_async_wait<STAGES - 2>(); /* channel c has landed */
        __syncthreads();                /* ... for every thread; stage (c - 1) is free */
        if (c + STAGES - 1 < C)
            load_chunk(c + STAGES - 1, (c + STAGES - 1) % STAGES);
        kt_cp_async_commit();
        compute_chunk(c % STAGES);
    }
    kt_cp_async_wait<0>();
    __syncthreads(); /* every stage is free: the output tile reuses them */

    /* Epilogue: the tile goes through shared memory ([BN][OH][OW]) so that consecutive threads
     * store consecutive columns of a row (masked at the edges). */
    float *os = smem;
    #pragma unroll
    for (int j = 0; j < TK; j++)
        #pragma unroll
        for (int i = 0; i < TQ; i += 4) {
            float_x4 t;
            #pragma unroll
            for (int u = 0; u < 4; u++)
                t.v[u] = acc[j][i + u];
            *(float_x4 *)(os + (kg * TK + j) * BM + pr * OW + cg * TQ + i) = t;
        }
    __syncthreads();
    /* Element e = tid + THREADS * u of the tile (TK * TQ per thread): channel e / BM, pixel
     * e % BM, the same pixel for every u when THREADS is a multiple of BM. */
    if constexpr (THREADS % BM == 0) {
        const int pix = tid % BM, p = p0 + pix / OW, q = q0 + pix % OW;
        if (p < P && q < Q) {
            #pragma unroll
            for (int u = 0; u < TK * TQ; u++) {
                const int j = tid / BM + u * (THREADS / BM);
                if (K % BN == 0 || k0 + j < K)
                    kt_conv_store(os[j * BM + pix], n, k0 + j, p, q, x, w, bias, y);
            }
        }
    } else {
        #pragma unroll
        for (int u = 0; u < TK * TQ; u++) {
            const int e = tid + THREADS * u, j = e / BM, pix = e % BM;
            const int p = p0 + pix / OW, q = q0 + pix % OW;
            if ((K % BN == 0 || k0 + j < K) && p < P && q < Q)
                kt_conv_store(os[e], n, k0 + j, p, q, x, w, bias, y);
        }
    }
}
