/*
 * ktune kernel — family conv
 * schedule: conv algo=direct math=ffma bm=32 bn=16 bk=8 warps=4 stages=1 tk=4 tq=4 filter=shared
 * graph: conv2d_bias_relu
 *   c = conv2d(X, W, bias)  f32 [N=128, 16, 32, 32]
 *   Y = relu(c)  f32 [N=128, 16, 32, 32]
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

typedef int idx_t; /* element offsets */

/* Problem shape: input NCHW, filter OIHW, output NCHW. */
constexpr int BATCH = 128, C = 3, H = 32, W = 32;
constexpr int K = 16, R = 3, S = 3;
constexpr int P = 32, Q = 32;
constexpr int STR_H = 1, STR_W = 1, PAD_H = 1, PAD_W = 1;
constexpr int DIL_H = 1, DIL_W = 1;
constexpr int GROUPS = 1, CG = 3, KG = 16; /* channels per group */
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

/* Direct convolution: each thread computes TK output channels x TQ adjacent output columns
 * of one output row; a block shares its TK channels, so filter reads are warp-uniform. */
constexpr int TK = 4, TQ = 4, THREADS = 128;
constexpr int QT = (Q + TQ - 1) / TQ;   /* column tiles per output row */
constexpr int SPATIAL = BATCH * P * QT; /* thread tiles per channel block */
constexpr int WIN = (TQ - 1) * STR_W + (S - 1) * DIL_W + 1; /* input columns a thread reads per filter row */

extern "C" __global__ void __launch_bounds__(THREADS, 1)
ktune_conv_direct(const float *__restrict__ x, const float *__restrict__ w,
                  const float *__restrict__ bias, float *__restrict__ y)
{
    const int k0 = blockIdx.y * TK;  /* first output channel of this block */
    const int grp = k0 / KG;         /* its group: all TK channels share it */
    /* The block's filter slice [TK][GEMM_K], staged once. */
    extern __shared__ __align__(128) unsigned char kt_smem[];
    float *const ws = reinterpret_cast<float *>(kt_smem);
    for (int i = threadIdx.x; i < TK * GEMM_K; i += THREADS)
        ws[i] = (k0 + i / GEMM_K < K) ? w[(idx_t)k0 * GEMM_K + i] : 0.0f;
    __syncthreads();
    const int t = blockIdx.x * THREADS + threadIdx.x;
    if (t >= SPATIAL)
        return; /* after the only barrier */
    const int qt = t % QT, p = (t / QT) % P, n = t / (QT * P);
    const int q0 = qt * TQ;
    const int h0 = p * STR_H - PAD_H, w0 = q0 * STR_W - PAD_W;
    float acc[TK][TQ] = {};
    #pragma unroll
    for (int c = 0; c < CG; c++) {
        const float *xc = x + ((idx_t)n * C + grp * CG + c) * H * W;
        #pragma unroll
        for (int r = 0; r < R; r++) {
            const int h = h0 + r * DIL_H;
            if ((unsigned)h >= (unsigned)H)
                continue;
            const float *xr = xc + (idx_t)h * W;
            float xv[WIN]; /* the input row segment under this thread's outputs */
            #pragma unroll
            for (int i = 0; i < WIN; i++) {
                const int ww = w0 + i;
                xv[i] = (unsigned)ww < (unsigned)W ? xr[ww] : 0.0f;
            }
            #pragma unroll
            for (int s = 0; s < S; s++)
                #pragma unroll
                for (int j = 0; j < TK; j++) {
                    const float wgt = ws[j * GEMM_K + (c * R + r) * S + s];
                    #pragma unroll
                    for (int i = 0; i < TQ; i++)
                        acc[j][i] = fmaf(xv[i * STR_W + s * DIL_W], wgt, acc[j][i]);
                }
        }
    }
    #pragma unroll
    for (int j = 0; j < TK; j++)
        #pragma unroll
        for (int i = 0; i < TQ; i++)
            if (k0 + j < K && q0 + i < Q)
                kt_conv_store(acc[j][i], n, k0 + j, p, q0 + i, x, w, bias, y);
}
