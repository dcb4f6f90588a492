/*
 * ktune kernel — family scan
 * schedule: scan threads=256 items=4
 * graph: c
 *   y = cumsum(x)  f32 [M=5, N=40001]
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

constexpr long long LEN = 40001; /* elements a line */
constexpr int THREADS = 256, ITEMS = 4, WARPS = THREADS / 32;
constexpr int TILE = THREADS * ITEMS;
#define KT_OP(a, b) ((a) + (b))
#define KT_ID 0.0f /* the identity of the operation */

/* Line blockIdx.x, tile by tile: see the family's comment (ops/emit_scan.c). */
extern "C" __global__ void __launch_bounds__(THREADS) ktune_scan_sum_t256_i4(
    const float *__restrict__ x, float *__restrict__ y)
{
    __shared__ float warp_total[WARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long row = (long long)blockIdx.x * LEN;
    float carry = KT_ID; /* the tiles before this one, accumulated */
    for (long long base = 0; base < LEN; base += TILE) {
        const long long first = base + (long long)tid * ITEMS;
        float v[ITEMS];
        #pragma unroll
        for (int j = 0; j < ITEMS; j++) {
            v[j] = first + j < LEN ? x[row + first + j] : KT_ID;
            if (j > 0)
                v[j] = KT_OP(v[j - 1], v[j]); /* the thread's elements, in order */
        }
        /* the warp's inclusive scan of its threads' totals */
        float t = v[ITEMS - 1];
        #pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float u = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= o)
                t = KT_OP(u, t);
        }
        float before = __shfl_up_sync(0xffffffffu, t, 1); /* the threads before, in the warp */
        if (lane == 0)
            before = KT_ID;
        if (lane == 31)
            warp_total[warp] = t;
        __syncthreads();
        if (warp == 0) { /* the warps' totals scanned, inclusive */
            float w = lane < WARPS ? warp_total[lane] : KT_ID;
            #pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float u = __shfl_up_sync(0xffffffffu, w, o);
                if (lane >= o)
                    w = KT_OP(u, w);
            }
            if (lane < WARPS)
                warp_total[lane] = w;
        }
        __syncthreads();
        float prefix = warp > 0 ? KT_OP(carry, warp_total[warp - 1]) : carry;
        prefix = KT_OP(prefix, before);
        #pragma unroll
        for (int j = 0; j < ITEMS; j++)
            if (first + j < LEN)
                y[row + first + j] = KT_OP(prefix, v[j]);
        carry = KT_OP(carry, warp_total[WARPS - 1]);
        __syncthreads(); /* warp_total is read before the next tile writes it */
    }
}
#undef KT_OP
#undef KT_ID
