/*
 * ktune kernel — family row
 * schedule: row strategy=warp_per_row threads=64 rows=8 pass=multi_pass storage=shared vec=8
 * graph: rmsnorm
 *   y.sq = square(x)  bf16 [M=8192, 4096]
 *   y.ms = mean(y.sq)  bf16 [M=8192, 1]
 *   y.eps = add(y.ms, 1e-06)  bf16 [M=8192, 1]
 *   y.rstd = rsqrt(y.eps)  bf16 [M=8192, 1]
 *   y.norm = mul(x, y.rstd)  bf16 [M=8192, 4096]
 *   y = mul(y.norm, weight)  bf16 [M=8192, 4096]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
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
struct __align__(32) float_x8 {
    float v[8];
};
struct __align__(16) kt_bf16_x8 {
    kt_bf16 v[8];
};

/* 8192 rows of 4096 elements (stride 1); 16 rows per block, 32 threads per row */
extern "C" __global__ void __launch_bounds__(64, 1) ktune_row_warp_per_row_t64_r8_multi_smem_v8(const kt_bf16 *__restrict__ in0_x, const kt_bf16 *__restrict__ in1_weight, kt_bf16 *__restrict__ out0_y)
{
    extern __shared__ __align__(128) unsigned char kt_smem[]; /* 32768 bytes */
    const int g = threadIdx.x / 32; /* row group */
    const int t = threadIdx.x % 32; /* thread in the row */
    float *const s0 = reinterpret_cast<float *>(kt_smem) + (g * 1 + 0) * 4096;
#pragma unroll 1
    for (int rs = 0; rs < 8; rs++) {
        const int row_raw = (int)blockIdx.x * 16 + rs * 2 + g;
        const int row = row_raw;
        const bool row_ok = true;
        const int o = row;
        const int b0 = o * 4096; /* row start in x */
        const int b1 = 0; /* row start in weight */
        const int b7 = o * 4096; /* row start in y */
        /* keep this row of the input in shared memory */
        #pragma unroll 4
        for (int k = 0; k < 16; k++) {
            const int j = (k * 32 + t) * 8;
            {
                const kt_bf16_x8 v = *reinterpret_cast<const kt_bf16_x8 *>(in0_x + b0 + j);
                float_x8 w;
                #pragma unroll
                for (int l = 0; l < 8; l++)
                    w.v[l] = kt_bf16_to_f32(v.v[l]);
                *reinterpret_cast<float_x8 *>(s0 + j) = w;
            }
        }
        /* pass 1: reduction */
        float a3 = 0.0f;
        #pragma unroll 4
        for (int k = 0; k < 16; k++) {
            const int j = (k * 32 + t) * 8;
            const float_x8 sv0 = *reinterpret_cast<const float_x8 *>(s0 + j);
            #pragma unroll
            for (int l = 0; l < 8; l++) {
                const float f0 = sv0.v[l];
                const float f2 = ((f0) * (f0)); /* y.sq */
                a3 += f2;
            }
        }
        a3 = kt_warp_sum(a3);
        const float r3 = a3 / 4096.0f; /* y.ms */
        const float r4 = ((r3) + 9.99999997e-07f); /* y.eps */
        const float r5 = rsqrtf(r4); /* y.rstd */
        /* pass 2: outputs */
        #pragma unroll 4
        for (int k = 0; k < 16; k++) {
            const int j = (k * 32 + t) * 8;
            const float_x8 sv0 = *reinterpret_cast<const float_x8 *>(s0 + j);
            const kt_bf16_x8 xv1 = *reinterpret_cast<const kt_bf16_x8 *>(in1_weight + b1 + j);
            kt_bf16_x8 o7;
            #pragma unroll
            for (int l = 0; l < 8; l++) {
                const float f0 = sv0.v[l];
                const float f6 = ((f0) * (r5)); /* y.norm */
                const float f1 = kt_bf16_to_f32(xv1.v[l]);
                const float f7 = ((f6) * (f1)); /* y */
                o7.v[l] = kt_f32_to_bf16(f7);
            }
            if (row_ok)
                *reinterpret_cast<kt_bf16_x8 *>(out0_y + b7 + j) = o7;
        }
    }
}
