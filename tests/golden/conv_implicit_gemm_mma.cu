/*
 * ktune kernel — family conv
 * schedule: conv algo=implicit_gemm math=mma bm=128 bn=64 bk=32 warps=4 stages=3 tk=1 tq=1 filter=shared
 * graph: conv_nhwc_res
 *   c = conv2d(X, W, b)  f16 [16, 56, 56, 64]
 *   t = add(c, Z)  f16 [16, 56, 56, 64]
 *   Y = relu(t)  f16 [16, 56, 56, 64]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/cp_async.cuh"
#include "ktune/ldmatrix.cuh"
#include "ktune/mma.cuh"
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

/* Problem shape: input NHWC, filter OHWI, output NHWC. */
constexpr int BATCH = 16, C = 64, H = 56, W = 56;
constexpr int K = 64, R = 3, S = 3;
constexpr int P = 56, Q = 56;
constexpr int STR_H = 1, STR_W = 1, PAD_H = 1, PAD_W = 1;
constexpr int DIL_H = 1, DIL_W = 1;
constexpr int GROUPS = 1, CG = 64, KG = 64; /* channels per group */
/* GEMM view: rows are output pixels, columns output channels of a group,
 * the reduction runs over (c, r, s) in the filter's memory order. */
constexpr int GEMM_M = BATCH * P * Q, GEMM_N = KG, GEMM_K = CG * R * S;

/* Bias, epilogue and store of output element (n, k, p, q). */
__device__ __forceinline__ void kt_conv_store(float acc, idx_t n, idx_t k, idx_t p, idx_t q,
                                              const kt_f16 *__restrict__ x,
                                              const kt_f16 *__restrict__ w,
                                              const kt_f16 *__restrict__ bias,
                                              const kt_f16 *__restrict__ in3, kt_f16 *__restrict__ y)
{
    const float v0 = acc + kt_f16_to_f32(bias[k]); /* c = conv2d */
    const float v1 = ((v0) + (kt_f16_to_f32(in3[(k + q * 64 + p * 3584 + n * 200704)]))); /* t = add */
    const float v2 = kt_max(v1, 0.0f); /* Y = relu */
    y[((n * P + p) * Q + q) * K + k] = kt_f32_to_f16(v2);
}

/* Implicit GEMM: block tile BM pixels x BN channels, BK-deep reduction steps. */
constexpr int BM = 128, BN = 64, BK = 32, THREADS = 128, STAGES = 3;
constexpr int KTILES = (GEMM_K + BK - 1) / BK;
constexpr int WARPS_M = 2, WARPS_N = 2;          /* warp grid */
constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N; /* warp tile */
constexpr int MI = WTM / 16, NI = WTN / 8;           /* mma tiles per warp */
constexpr int LDS = BK + 8; /* row pitch: the 16-byte pad makes ldmatrix conflict-free */
constexpr int CPR = BK / 8; /* 16-byte chunks per tile row */
constexpr int A_CHUNKS = BM * CPR / THREADS, B_CHUNKS = BN * CPR / THREADS;

extern "C" __global__ void __launch_bounds__(THREADS, 1)
ktune_conv_igemm_mma(const kt_f16 *__restrict__ x, const kt_f16 *__restrict__ w,
                     const kt_f16 *__restrict__ bias, const kt_f16 *__restrict__ in3,
                     kt_f16 *__restrict__ y)
{
    extern __shared__ __align__(128) unsigned char kt_smem[];
    unsigned short *As = (unsigned short *)kt_smem; /* [STAGES][BM][LDS] pixels x reduction */
    unsigned short *Bs = As + STAGES * BM * LDS;     /* [STAGES][BN][LDS] channels x reduction */
    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * BM;  /* first output pixel of the tile */
    const int n0 = blockIdx.y * BN;  /* first output channel within the group */
    const int grp = blockIdx.z;      /* conv group */
    /* Gathered rows (output pixels): receptive-field origin; rows past GEMM_M get a height
     * no load accepts. */
    idx_t a_base[A_CHUNKS];
    int a_h[A_CHUNKS], a_w[A_CHUNKS];
    #pragma unroll
    for (int i = 0; i < A_CHUNKS; i++) {
        const int m = m0 + (tid + i * THREADS) / CPR;
        const int q = m % Q, p = (m / Q) % P, n = m / (Q * P);
        a_base[i] = (idx_t)n * H * W * C + grp * CG;
        a_h[i] = m < GEMM_M ? p * STR_H - PAD_H : -(1 << 24);
        a_w[i] = q * STR_W - PAD_W;
    }
    /* Issues the 16-byte copies of tile kt into stage `stage`: each thread copies A_CHUNKS
     * 8-channel runs of pixels and B_CHUNKS 8-element runs of filter rows, all at one reduction
     * column, so (c, r, s) is split once per tile. */
    auto load_tile = [&](int kt, int stage) {
        unsigned short *as = As + stage * BM * LDS, *bs = Bs + stage * BN * LDS;
        const int kk = kt * BK + (tid % CPR) * 8;
        const int c = kk % CG, r = kk / (S * CG), s = (kk / CG) % S;
        #pragma unroll
        for (int e = 0; e < A_CHUNKS; e++) {
            const int h = a_h[e] + r * DIL_H, ww = a_w[e] + s * DIL_W;
            const bool ok = kk < GEMM_K && (unsigned)h < (unsigned)H && (unsigned)ww < (unsigned)W;
            kt_cp_async16(as + ((tid + e * THREADS) / CPR) * LDS + (tid % CPR) * 8,
                          ok ? x + a_base[e] + ((idx_t)h * W + ww) * C + c : x, ok ? 16 : 0);
        }
        #pragma unroll
        for (int e = 0; e < B_CHUNKS; e++) {
            const int col = n0 + (tid + e * THREADS) / CPR;
            const bool ok = kk < GEMM_K && col < GEMM_N;
            kt_cp_async16(bs + ((tid + e * THREADS) / CPR) * LDS + (tid % CPR) * 8,
                          ok ? w + (idx_t)(grp * KG + col) * GEMM_K + kk : w, ok ? 16 : 0);
        }
    };
    const int lane = tid % 32, warp = tid / 32;
    const int wm0 = (warp % WARPS_M) * WTM, wn0 = (warp / WARPS_M) * WTN;
    float acc[MI][NI][4] = {};
    /* One stage: BK / 16 steps of MI x NI mma tiles per warp, fragments by ldmatrix. */
    auto compute_tile = [&](int stage) {
        const unsigned short *as = As + stage * BM * LDS, *bs = Bs + stage * BN * LDS;
        #pragma unroll
        for (int k16 = 0; k16 < BK; k16 += 16) {
            unsigned af[MI][4], bf[NI][2];
            #pragma unroll
            for (int mi = 0; mi < MI; mi++)
                kt_ldmatrix_x4(af[mi][0], af[mi][1], af[mi][2], af[mi][3],
                               as + (wm0 + mi * 16 + lane % 16) * LDS + k16 + (lane / 16) * 8);
            #pragma unroll
            for (int ni = 0; ni + 1 < NI; ni += 2) {
                unsigned t[4];
                kt_ldmatrix_x4(t[0], t[1], t[2], t[3],
                               bs + (wn0 + ni * 8 + lane % 8 + (lane / 16) * 8) * LDS + k16 +
                                   ((lane / 8) % 2) * 8);
                bf[ni][0] = t[0];
                bf[ni][1] = t[1];
                bf[ni + 1][0] = t[2];
                bf[ni + 1][1] = t[3];
            }
            if (NI % 2)
                kt_ldmatrix_x2(bf[NI - 1][0], bf[NI - 1][1],
                               bs + (wn0 + (NI - 1) * 8 + lane % 8) * LDS + k16 +
                                   ((lane / 8) % 2) * 8);
            #pragma unroll
            for (int mi = 0; mi < MI; mi++)
                #pragma unroll
                for (int ni = 0; ni < NI; ni++)
                    kt_mma_m16n8k16_f16(acc[mi][ni], af[mi], bf[ni]);
        }
    };

    /* Multi-stage pipeline: STAGES - 1 tiles in flight while one is multiplied. */
    #pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < KTILES)
            load_tile(st, st);
        kt_cp_async_commit();
    }
    for (int kt = 0; kt < KTILES; kt++) {
        kt_cp_async_wait<STAGES - 2>(); /* tile kt has landed */
        __syncthreads();                /* ... for every thread; stage (kt - 1) is free */
        if (kt + STAGES - 1 < KTILES)
            load_tile(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
        kt_cp_async_commit();
        compute_tile(kt % STAGES);
    }
    kt_cp_async_wait<0>();

    /* Epilogue: each accumulator is one output element (masked at the edges). */
    #pragma unroll
    for (int mi = 0; mi < MI; mi++)
        #pragma unroll
        for (int ni = 0; ni < NI; ni++)
            #pragma unroll
            for (int v = 0; v < 4; v++) {
                const int m = m0 + wm0 + mi * 16 + lane / 4 + (v / 2) * 8;
                const int col = n0 + wn0 + ni * 8 + (lane % 4) * 2 + v % 2;
                if (m < GEMM_M && col < GEMM_N)
                    kt_conv_store(acc[mi][ni][v], m / (Q * P), grp * KG + col, (m / Q) % P, m % Q,
                                  x, w, bias, in3, y);
            }
}
