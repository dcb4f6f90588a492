/*
 * ktune kernel — family row
 * schedule: row strategy=split_lane threads=256 rows=1 pass=multi_pass storage=re_read vec=1
 * graph: sum_mid
 *   s = sum(x)  f32 [A=1, C=64]
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

/* kernel 1 of 2: 64 rows of 65536 elements (strided: a lane a row, 32 rows a block), 525 chunks of 125 per row; partial reductions into the workspace */
extern "C" __global__ void __launch_bounds__(256, 1) ktune_row_split_lane_t256_multi_v1_k1(const float *__restrict__ in0_x, float *__restrict__ out0_s, void *__restrict__ workspace)
{
    float *const ws = static_cast<float *>(workspace);
    const unsigned blk = blockIdx.x;
    __shared__ float kt_red[256];
    const int g = threadIdx.x % 32; /* row group: the lane */
    const int t = threadIdx.x / 32; /* thread in the row: the warp */
    const int row_raw = (int)(blk / 525) * 32 + g;
    const bool row_ok = row_raw < 64;
    const int row = row_ok ? row_raw : 63; /* clamped: barriers stay uniform */
    const int sp = blk % 525; /* which chunk of the row */
    const int jbeg = (int)sp * 125;
    const int jend = jbeg + 125 < 65536 ? jbeg + 125 : 65536;
    const int in = row % 64;
    const int b0 = in; /* row start in x */
    /* level 1: this chunk's partial */
    float a1 = 0.0f;
    #pragma unroll 4
    for (int k = 0; k < 16; k++) {
        const int j = jbeg + (k * 8 + t);
        if (j < jend) {
            const float f0 = in0_x[b0 + j * 64];
            a1 += f0;
        }
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
    if (t == 0 && row_ok) {
        float *part = ws + 0 + (row * 525 + sp) * 1;
        part[0] = a1;
    }
}

/* kernel 2 of 2: 64 rows of 65536 elements (strided: a lane a row, 32 rows a block), 525 chunks of 125 per row; combine and write the outputs */
extern "C" __global__ void __launch_bounds__(256, 1) ktune_row_split_lane_t256_multi_v1_k2(const float *__restrict__ in0_x, float *__restrict__ out0_s, void *__restrict__ workspace)
{
    float *const ws = static_cast<float *>(workspace);
    const unsigned blk = gridDim.x - 1 - blockIdx.x; /* backwards: the kernel before read these chunks last */
    __shared__ float kt_red[256];
    const int g = threadIdx.x % 32; /* row group: the lane */
    const int t = threadIdx.x / 32; /* thread in the row: the warp */
    const int row_raw = (int)(blk / 525) * 32 + g;
    const bool row_ok = row_raw < 64;
    const int row = row_ok ? row_raw : 63; /* clamped: barriers stay uniform */
    const int sp = blk % 525; /* which chunk of the row */
    const int jbeg = (int)sp * 125;
    const int jend = jbeg + 125 < 65536 ? jbeg + 125 : 65536;
    const int in = row % 64;
    if (sp != 0) return; /* only chunk 0's block writes the row's outputs */
    const int b0 = in; /* row start in x */
    /* level 1: combine the 525 partials */
    float a1 = 0.0f;
    for (int q = t; q < 525; q += 8) {
        const float *part = ws + 0 + (row * 525 + q) * 1;
        const float o_a1 = part[0];
        a1 = a1 + o_a1;
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
    if (sp == 0 && t == 0 && row_ok) {
        out0_s[row] = r1;
    }
}
