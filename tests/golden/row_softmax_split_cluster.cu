/*
 * ktune kernel — family row
 * schedule: row strategy=split_cluster threads=512 rows=1 pass=one_pass storage=re_read vec=4
 * graph: softmax
 *   y.max = max(x)  f32 [M=16, 1]
 *   y.sub = sub(x, y.max)  f32 [M=16, N=16384]
 *   y.exp = exp(y.sub)  f32 [M=16, N=16384]
 *   y.sum = sum(y.exp)  f32 [M=16, 1]
 *   y = div(y.exp, y.sum)  f32 [M=16, N=16384]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/cluster.cuh"
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
struct __align__(16) float_x4 {
    float v[4];
};

/* 16 rows of 16384 elements, 8 chunks of 2048 per row, a cluster per row */
extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(512, 1) ktune_row_split_cluster_t512_one_v4(const float *__restrict__ in0_x, float *__restrict__ out0_y)
{
    __shared__ float kt_part[2]; /* this chunk's partial of every level */
    const unsigned blk = blockIdx.x;
    __shared__ float kt_red[32];
    const int t = threadIdx.x;
    const int lane = threadIdx.x % 32;
    const int warp = t / 32;
    const int row = blk / 8;
    const int sp = blk % 8; /* which chunk of the row */
    const int jbeg = (int)sp * 2048;
    const int jend = jbeg + 2048 < 16384 ? jbeg + 2048 : 16384;
    const int o = row;
    const int b0 = o * 16384; /* row start in x */
    const int b5 = o * 16384; /* row start in y */
    { /* level 1: this chunk's partial, for the cluster */
        float a1 = __int_as_float((int)0xff800000), a1_s = 0.0f; /* running max, sum */
        #pragma unroll 1
        for (int k = 0; k < 1; k++) {
            const int j = jbeg + (k * 512 + t) * 4;
            const float_x4 xv0 = *reinterpret_cast<const float_x4 *>(in0_x + b0 + j);
            #pragma unroll
            for (int l = 0; l < 4; l++) {
                const float f0 = xv0.v[l];
                {
                    const float mn = kt_max(a1, f0);
                    a1_s = a1_s * (a1 == mn ? 1.0f : expf(a1 - mn)) + expf(f0 - mn);
                    a1 = mn;
                }
            }
        }
        #pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float o_a1 = __shfl_xor_sync(0xffffffffu, a1, off);
            const float o_a1_s = __shfl_xor_sync(0xffffffffu, a1_s, off);
            {
                const float mn = kt_max(a1, o_a1);
                a1_s = a1_s * (a1 == mn ? 1.0f : expf(a1 - mn)) +
                        o_a1_s * (o_a1 == mn ? 1.0f : expf(o_a1 - mn));
                a1 = mn;
            }
        }
        if (lane == 0) {
            kt_red[warp * 2 + 0] = a1;
            kt_red[warp * 2 + 1] = a1_s;
        }
        __syncthreads();
        {
            const float *red = kt_red;
            a1 = red[0];
            a1_s = red[1];
            #pragma unroll
            for (int w = 1; w < 16; w++) {
                const float o_a1 = red[w * 2 + 0];
                const float o_a1_s = red[w * 2 + 1];
                {
                    const float mn = kt_max(a1, o_a1);
                    a1_s = a1_s * (a1 == mn ? 1.0f : expf(a1 - mn)) +
                            o_a1_s * (o_a1 == mn ? 1.0f : expf(o_a1 - mn));
                    a1 = mn;
                }
            }
        }
        __syncthreads(); /* kt_red is reused by the next reduction */
        if (threadIdx.x == 0) {
            kt_part[0] = a1;
            kt_part[1] = a1_s;
        }
    }
    kt_cluster_sync(); /* every chunk's level-1 partial is in place */
    /* level 1: combine the 8 partials */
    float a1 = __int_as_float((int)0xff800000), a1_s = 0.0f; /* running max, sum */
    for (int q = 0; q < 8; q++) {
        const unsigned part = kt_cluster_addr(kt_part + 0, q); /* block q's */
        const float o_a1 = kt_ld_cluster(part + 0);
        const float o_a1_s = kt_ld_cluster(part + 4);
        {
            const float mn = kt_max(a1, o_a1);
            a1_s = a1_s * (a1 == mn ? 1.0f : expf(a1 - mn)) +
                    o_a1_s * (o_a1 == mn ? 1.0f : expf(o_a1 - mn));
            a1 = mn;
        }
    }
    const float r1 = a1; /* y.max */
    const float r4 = a1_s; /* y.sum */
    kt_cluster_sync(); /* every block has read the partials it needs from the others: none exits before */
    /* this chunk of the outputs */
    #pragma unroll 1
    for (int k = 0; k < 1; k++) {
        const int j = jbeg + (k * 512 + t) * 4;
        const float_x4 xv0 = *reinterpret_cast<const float_x4 *>(in0_x + b0 + j);
        float_x4 o5;
        #pragma unroll
        for (int l = 0; l < 4; l++) {
            const float f0 = xv0.v[l];
            const float f2 = ((f0) - (r1)); /* y.sub */
            const float f3 = expf(f2); /* y.exp */
            const float f5 = ((f3) / (r4)); /* y */
            o5.v[l] = f5;
        }
        *reinterpret_cast<float_x4 *>(out0_y + b5 + j) = o5;
    }
}
