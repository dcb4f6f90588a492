/*
 * ktune kernel — family gemv
 * schedule: gemv threads=256 tpr=32 rows=2 vec=8 load=stream math=mma ksplit=2 depth=2
 * graph: linear_decode
 *   t0 = matmul(X, W)  bf16 [T=16, N=4096]
 *   t1 = add(t0, bias)  bf16 [T=16, N=4096]
 *   t2 = silu(t1)  bf16 [T=16, N=4096]
 *   Y = add(t2, R)  bf16 [T=16, N=4096]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/memory.cuh"
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

constexpr int M = 4096, K = 4096, T = 16; /* rows of A, tokens */
constexpr int THREADS = 256, R = 2; /* R: blocks of 16 rows a warp */

/* Epilogue and store of output element (t, m). */
__device__ __forceinline__ void kt_gemv_store(float acc, int m, int t, const kt_bf16 *__restrict__ x, const kt_bf16 *__restrict__ a, const kt_bf16 *__restrict__ in2, const kt_bf16 *__restrict__ in3, kt_bf16 *__restrict__ y)
{
    const float v0 = ((acc) + (kt_bf16_to_f32(in2[(m)]))); /* t1 = add */
    const float v1 = ((v0) * kt_sigmoid(v0)); /* t2 = silu */
    const float v2 = ((v1) + (kt_bf16_to_f32(in3[(m + t * 4096)]))); /* Y = add */
    y[(long long)t * M + m] = kt_f32_to_bf16(v2);
}

constexpr int WARPS = THREADS / 32, KSPLIT = 2; /* warps sharing a row block's k */
constexpr int NT = 2; /* 8-token tiles */
constexpr int CHUNKS = (K + 31) / 32; /* steps of 32 elements of k */

/* A warp owns R blocks of 16 rows of A and every KSPLIT-th step of k; lane (g, q) = (lane / 4,
 * lane % 4) loads 16 bytes at k 32 c + 8 q of rows g and g + 8 of each block and of token g of
 * each tile, which feed two m16n8k16 products (k permuted alike for A and x). */
extern "C" __global__ void __launch_bounds__(THREADS)
ktune_gemv_mma_t256_r2_k2_d2_ls(const kt_bf16 *__restrict__ x, const kt_bf16 *__restrict__ a, const kt_bf16 *__restrict__ in2, const kt_bf16 *__restrict__ in3, kt_bf16 *__restrict__ y)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3, ks = warp % KSPLIT;
    const int m0 = (blockIdx.x * (WARPS / KSPLIT) + warp / KSPLIT) * 16 * R;
    /* rows past M and tokens past T read the last one (in bounds), never stored */
    const uint4 *ra[R], *rb[R], *xr[NT];
    #pragma unroll
    for (int r = 0; r < R; r++) {
        const int ma = m0 + 16 * r + g, mb = ma + 8;
        ra[r] = (const uint4 *)(a + (long long)(ma < M ? ma : M - 1) * K) + q;
        rb[r] = (const uint4 *)(a + (long long)(mb < M ? mb : M - 1) * K) + q;
    }
    #pragma unroll
    for (int j = 0; j < NT; j++) {
        const int t = 8 * j + g;
        xr[j] = (const uint4 *)(x + (long long)(t < T ? t : T - 1) * K) + q;
    }
    float acc[R][NT][4] = {};
    /* A is read once: evict it first from L2 */
    const unsigned long long policy = kt_policy_evict_first();
    /* A ring of DEPTH steps in registers: a lane keeps the loads of its next DEPTH steps in flight
     * (DRAM wants megabytes in flight; a warp's few steps would otherwise wait out a round trip
     * each). K is a multiple of 8: a lane's 8 elements are all in k or all past it (zeros, which
     * add nothing, so the last pass needs no guard). */
    constexpr int DEPTH = 2;
    uint4 wa[DEPTH][R], wb[DEPTH][R], xw[DEPTH][NT];
    auto load = [&](int d, int c) {
        const bool in_k = 32 * c + 8 * q < K; /* false past the last step too */
        #pragma unroll
        for (int r = 0; r < R; r++) {
            wa[d][r] = in_k ? kt_ld_nc_stream(ra[r] + 4 * c, policy) : make_uint4(0u, 0u, 0u, 0u);
            wb[d][r] = in_k ? kt_ld_nc_stream(rb[r] + 4 * c, policy) : make_uint4(0u, 0u, 0u, 0u);
        }
        #pragma unroll
        for (int j = 0; j < NT; j++)
            xw[d][j] = in_k ? __ldg(xr[j] + 4 * c) : make_uint4(0u, 0u, 0u, 0u);
    };
    #pragma unroll
    for (int d = 0; d < DEPTH; d++)
        load(d, ks + d * KSPLIT);
    for (int c0 = ks; c0 < CHUNKS; c0 += DEPTH * KSPLIT) {
        #pragma unroll
        for (int d = 0; d < DEPTH; d++) {
            #pragma unroll
            for (int j = 0; j < NT; j++) {
                const unsigned b0[2] = {xw[d][j].x, xw[d][j].y}, b1[2] = {xw[d][j].z, xw[d][j].w};
                #pragma unroll
                for (int r = 0; r < R; r++) {
                    /* k 8q .. 8q + 3 of rows g, g + 8 into slots 2q, 2q + 1, 2q + 8, 2q + 9; then 8q + 4 .. */
                    const unsigned a0[4] = {wa[d][r].x, wb[d][r].x, wa[d][r].y, wb[d][r].y};
                    const unsigned a1[4] = {wa[d][r].z, wb[d][r].z, wa[d][r].w, wb[d][r].w};
                    kt_mma_m16n8k16_bf16(acc[r][j], a0, b0);
                    kt_mma_m16n8k16_bf16(acc[r][j], a1, b1);
                }
            }
            load(d, c0 + (d + DEPTH) * KSPLIT); /* the slot's step DEPTH ahead */
        }
    }
    /* The row block's KSPLIT warps (consecutive) add up in warp order; the first goes on. */
    __shared__ float part[WARPS][R * NT * 4][32];
    #pragma unroll
    for (int e = 0; e < R * NT * 4; e++)
        part[warp][e][lane] = (&acc[0][0][0])[e];
    __syncthreads();
    if (ks != 0)
        return;
    #pragma unroll
    for (int e = 0; e < R * NT * 4; e++) {
        float sum = part[warp][e][lane];
        #pragma unroll
        for (int k = 1; k < KSPLIT; k++)
            sum += part[warp + k][e][lane];
        (&acc[0][0][0])[e] = sum;
    }
    /* lane (g, q) holds rows g (sums 0, 1) and g + 8 (2, 3), tokens 2q and 2q + 1 of each tile */
    #pragma unroll
    for (int r = 0; r < R; r++)
        #pragma unroll
        for (int j = 0; j < NT; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int m = m0 + 16 * r + g + (e >> 1) * 8, t = 8 * j + 2 * q + (e & 1);
                if (m < M && t < T)
                    kt_gemv_store(acc[r][j][e], m, t, x, a, in2, in3, y);
            }
}
