/*
 * ktune kernel — family row
 * schedule: row strategy=lane_per_row threads=256 rows=1 pass=multi_pass storage=re_read vec=1
 * graph: sum_mid
 *   s = sum(x)  f32 [A=16, C=256]
 */
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

/* 4096 rows of 256 elements (stride 256); 32 rows per block, 8 threads per row */
extern "C" __global__ void __launch_bounds__(256, 1) ktune_row_lane_per_row_t256_r1_multi_reread_v1(const float *__restrict__ in0_x, float *__restrict__ out0_s)
{
    __shared__ float kt_red[256];
    const int g = threadIdx.x % 32; /* row group: the lane */
    const int t = threadIdx.x / 32; /* thread in the row: the warp */
    const int row_raw = (int)blockIdx.x * 32 + g;
    const int row = row_raw;
    const int o = row / 256;
    const int in = row % 256;
    const int b0 = o * 65536 + in; /* row start in x */
    /* pass 1: reduction */
    float a1 = 0.0f;
    #pragma unroll 4
    for (int k = 0; k < 32; k++) {
        const int j = (k * 8 + t);
        const float f0 = in0_x[b0 + j * 256];
        a1 += f0;
    }
    kt_red[(0 + t) * 32 + g] = a1;
    __syncthreads();
    {
        a1 = kt_red[0 + g];
        #pragma unroll
        for (int w = 1; w < 8; w++) {
            const float o_a1 = kt_red[(0 + w) * 32 + g];
            a1 = a1 + o_a1;
        }
    }
    __syncthreads(); /* kt_red is reused by the next reduction */
    const float r1 = a1; /* s */
    if (t == 0) {
        out0_s[row] = r1;
    }
}
