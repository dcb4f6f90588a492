/*
 * ktune fp64 reference — graph gemm_bias_relu, 3 kernels in topological order
 * (inputs, outputs and intermediates are double; intermediates live in the workspace)
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
/* ---- fp64 reference helpers (the semantics of ops/reference.c) ---- */
__device__ __forceinline__ double kt_ref_sigmoid(double x)
{
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    const double e = exp(x);
    return e / (1.0 + e);
}
/* log(1 + exp(x)) without overflow or cancellation */
__device__ __forceinline__ double kt_ref_softplus(double x)
{
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}
/* NaN-propagating max and min (NumPy maximum/minimum) */
__device__ __forceinline__ double kt_ref_nan_max(double a, double b)
{
    return isnan(a) || a > b ? a : b;
}
__device__ __forceinline__ double kt_ref_nan_min(double a, double b)
{
    return isnan(a) || a < b ? a : b;
}
__device__ __forceinline__ double kt_ref_max(double x, double y)
{
    return isnan(y) ? y : kt_ref_nan_max(x, y);
}
__device__ __forceinline__ double kt_ref_min(double x, double y)
{
    return isnan(y) ? y : kt_ref_nan_min(x, y);
}
/* sum over c < n of a[c] b[c], by a whole warp: lane adds columns lane, lane + 32, ..., the
 * butterfly then leaves the same total in every lane */
__device__ __forceinline__ double kt_ref_row_dot(const double *a, const double *b, long long n,
                                                 int lane)
{
    double acc = 0.0;
    for (long long c = lane; c < n; c += 32)
        acc += a[c] * b[c];
    for (int w = 16; w > 0; w >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, w);
    return acc;
}
/* ---- end of reference helpers ---- */

/* t0 = matmul(A, W)  [M=100, 256], fp64, one thread per output element */
extern "C" __global__ void __launch_bounds__(256)
ktune_ref_0_matmul(
    const double *__restrict__ in0, /* A */
    const double *__restrict__ in1, /* W */
    double *__restrict__ out0) /* t0 */
{
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 25600LL)
        return;
    long long o_rem = i;
    const long long o1 = o_rem % 256LL;
    o_rem /= 256LL;
    const long long o0 = o_rem;
    const double *pa = in0 + (0) * 51200LL;
    const double *pb = in1 + (0) * 131072LL;
    const long long m = o0, n = o1;
    double acc = 0.0;
    for (long long k = 0; k < 512LL; k++)
        acc += pa[m * 512LL + k * 1LL] * pb[k * 256LL + n * 1LL];
    out0[i] = acc;
}

/* t1 = add(t0, bias)  [M=100, 256], fp64, one thread per output element */
extern "C" __global__ void __launch_bounds__(256)
ktune_ref_1_add(
    const double *__restrict__ in0, /* t0 */
    const double *__restrict__ in1, /* bias */
    double *__restrict__ out0) /* t1 */
{
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 25600LL)
        return;
    long long o_rem = i;
    const long long o1 = o_rem % 256LL;
    o_rem /= 256LL;
    const long long o0 = o_rem;
    const double x0 = in0[(o1 + o0 * 256)];
    const double x1 = in1[(o1)];
    out0[i] = ((x0) + (x1));
}

/* Y = relu(t1)  [M=100, 256], fp64, one thread per output element */
extern "C" __global__ void __launch_bounds__(256)
ktune_ref_2_relu(
    const double *__restrict__ in0, /* t1 */
    double *__restrict__ out0) /* Y */
{
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= 25600LL)
        return;
    const double x0 = in0[i];
    out0[i] = ((x0) < 0.0 ? 0.0 : (x0));
}
