/*
 * ktune kernel — family gemv
 * schedule: gemv threads=64 tpr=32 rows=1 vec=8 load=stream math=ffma ksplit=1 depth=2
 * graph: gemv
 *   C = matmul(A, B)  f16 [M=7680, N=1]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/memory.cuh"
#include "ktune/reduce.cuh"
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

constexpr int M = 7680, K = 2552;
constexpr int THREADS = 64, TPR = 32, R = 1, VEC = 8;
constexpr int GROUPS = THREADS / TPR; /* lane groups per block */

/* Epilogue and store of output element m. */
__device__ __forceinline__ void kt_gemv_store(float acc, int m, const kt_f16 *__restrict__ a, const kt_f16 *__restrict__ x, kt_f16 *__restrict__ y)
{
    y[m] = kt_f32_to_f16(acc);
}

/* Lane groups of TPR lanes own R rows each; each step loads VEC elements of x and of every row
 * per lane (16-byte loads of A), accumulates in fp32; the row's lanes then reduce by shuffles. */
extern "C" __global__ void __launch_bounds__(THREADS, 1)
ktune_gemv_t64_p32_r1_v8_ls(const kt_f16 *__restrict__ a, const kt_f16 *__restrict__ x, kt_f16 *__restrict__ y)
{
    const int lane = threadIdx.x % TPR;
    const int m0 = (blockIdx.x * GROUPS + threadIdx.x / TPR) * R;
    float acc[R];
    const uint4 *arow[R];
    #pragma unroll
    for (int r = 0; r < R; r++) {
        acc[r] = 0.0f;
        /* rows past M read row M - 1 (in bounds) and are never stored */
        const int m = m0 + r < M ? m0 + r : M - 1;
        arow[r] = (const uint4 *)(a + (long long)m * K);
    }
    const uint4 *xv = (const uint4 *)x;
    /* A is read once: evict it first from L2 */
    const unsigned long long policy = kt_policy_evict_first();
    #pragma unroll 10
    for (int c = lane; c < K / VEC; c += TPR) {
        const uint4 xw = __ldg(xv + c);
        float xf[VEC];
        xf[0] = kt_f16_to_f32((unsigned short)(xw.x & 0xffffu));
        xf[1] = kt_f16_to_f32((unsigned short)(xw.x >> 16));
        xf[2] = kt_f16_to_f32((unsigned short)(xw.y & 0xffffu));
        xf[3] = kt_f16_to_f32((unsigned short)(xw.y >> 16));
        xf[4] = kt_f16_to_f32((unsigned short)(xw.z & 0xffffu));
        xf[5] = kt_f16_to_f32((unsigned short)(xw.z >> 16));
        xf[6] = kt_f16_to_f32((unsigned short)(xw.w & 0xffffu));
        xf[7] = kt_f16_to_f32((unsigned short)(xw.w >> 16));
        #pragma unroll
        for (int r = 0; r < R; r++) {
            const uint4 aw = kt_ld_nc_stream(arow[r] + c, policy);
            acc[r] = fmaf(kt_f16_to_f32((unsigned short)(aw.x & 0xffffu)), xf[0], acc[r]);
            acc[r] = fmaf(kt_f16_to_f32((unsigned short)(aw.x >> 16)), xf[1], acc[r]);
            acc[r] = fmaf(kt_f16_to_f32((unsigned short)(aw.y & 0xffffu)), xf[2], acc[r]);
            acc[r] = fmaf(kt_f16_to_f32((unsigned short)(aw.y >> 16)), xf[3], acc[r]);
            acc[r] = fmaf(kt_f16_to_f32((unsigned short)(aw.z & 0xffffu)), xf[4], acc[r]);
            acc[r] = fmaf(kt_f16_to_f32((unsigned short)(aw.z >> 16)), xf[5], acc[r]);
            acc[r] = fmaf(kt_f16_to_f32((unsigned short)(aw.w & 0xffffu)), xf[6], acc[r]);
            acc[r] = fmaf(kt_f16_to_f32((unsigned short)(aw.w >> 16)), xf[7], acc[r]);
        }
    }
    /* the TPR lanes of a row add up in a fixed butterfly order */
    #pragma unroll
    for (int r = 0; r < R; r++) {
        acc[r] = kt_warp_sum<TPR>(acc[r]);
        if (lane == 0 && m0 + r < M)
            kt_gemv_store(acc[r], m0 + r, a, x, y);
    }
}
