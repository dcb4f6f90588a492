/*
 * ktune kernel — family conv
 * schedule: conv algo=depthwise math=ffma bm=32 bn=16 bk=8 warps=4 stages=1 tk=2 tq=2 filter=shared
 * graph: conv_dw_ragged
 *   t = conv2d(X, W, b)  f16 [3, 24, 30, 41]
 *   Y = relu(t)  f16 [3, 24, 30, 41]
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
constexpr int BATCH = 3, C = 24, H = 61, W = 83;
constexpr int K = 24, R = 7, S = 7;
constexpr int P = 30, Q = 41;
constexpr int STR_H = 2, STR_W = 2, PAD_H = 5, PAD_W = 5;
constexpr int DIL_H = 2, DIL_W = 2;
constexpr int GROUPS = 24, CG = 1, KG = 1; /* channels per group */
/* GEMM view: rows are output pixels, columns output channels of a group,
 * the reduction runs over (c, r, s) in the filter's memory order. */
constexpr int GEMM_M = BATCH * P * Q, GEMM_N = KG, GEMM_K = CG * R * S;

/* Bias, epilogue and store of output element (n, k, p, q). */
__device__ __forceinline__ void kt_conv_store(float acc, idx_t n, idx_t k, idx_t p, idx_t q,
                                              const kt_f16 *__restrict__ x,
                                              const kt_f16 *__restrict__ w,
                                              const kt_f16 *__restrict__ bias,
                                              kt_f16 *__restrict__ y)
{
    const float v0 = acc + kt_f16_to_f32(bias[k]); /* t = conv2d */
    const float v1 = kt_max(v0, 0.0f); /* Y = relu */
    y[((n * K + k) * P + p) * Q + q] = kt_f32_to_f16(v1);
}

/* Depthwise convolution: a block per (image, channel) plane and output tile of TILE_P x TILE_Q;
 * the patch it reads and the channel's filter staged in shared memory once, then each lane
 * computes TK rows x TQ columns 32 apart (a warp's stores are contiguous). */
constexpr int TK = 2, TQ = 2, THREADS = 128;
constexpr int TILE_P = 8, TILE_Q = 64; /* output rows, columns of a block */
constexpr int IN_H = 27, IN_W = 139;   /* the input patch they read */
constexpr int TILES_Q = 1;

extern "C" __global__ void __launch_bounds__(THREADS, 1)
ktune_conv_depthwise(const kt_f16 *__restrict__ x, const kt_f16 *__restrict__ w,
                     const kt_f16 *__restrict__ bias, kt_f16 *__restrict__ y)
{
    extern __shared__ __align__(128) unsigned char kt_smem[];
    float *const xs = reinterpret_cast<float *>(kt_smem); /* [IN_H][IN_W] */
    float *const fs = xs + IN_H * IN_W;                   /* [R][S] */
    const int plane = blockIdx.y; /* n * C + c */
    const int n = plane / C, c = plane % C;
    const int p0 = (blockIdx.x / TILES_Q) * TILE_P, q0 = (blockIdx.x % TILES_Q) * TILE_Q;
    const int h0 = p0 * STR_H - PAD_H, w0 = q0 * STR_W - PAD_W;
    const kt_f16 *xc = x + (idx_t)plane * H * W;
    for (int i = threadIdx.x; i < IN_H * IN_W; i += THREADS) {
        const int h = h0 + i / IN_W, ww = w0 + i % IN_W;
        xs[i] = (unsigned)h < (unsigned)H && (unsigned)ww < (unsigned)W ? kt_f16_to_f32(xc[(idx_t)h * W + ww]) : 0.0f;
    }
    for (int i = threadIdx.x; i < R * S; i += THREADS)
        fs[i] = kt_f16_to_f32(w[(idx_t)c * R * S + i]);
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float acc[TK][TQ] = {};
    #pragma unroll
    for (int r = 0; r < R; r++) {
        #pragma unroll
        for (int s = 0; s < S; s++) {
            const float wgt = fs[r * S + s]; /* the same word for every lane */
            #pragma unroll
            for (int j = 0; j < TK; j++) {
                const float *xr = xs + ((warp * TK + j) * STR_H + r * DIL_H) * IN_W + lane * STR_W + s * DIL_W;
                #pragma unroll
                for (int i = 0; i < TQ; i++)
                    acc[j][i] = fmaf(xr[i * 32 * STR_W], wgt, acc[j][i]);
            }
        }
    }
    #pragma unroll
    for (int j = 0; j < TK; j++)
        #pragma unroll
        for (int i = 0; i < TQ; i++) {
            const int p = p0 + warp * TK + j, q = q0 + lane + i * 32;
            if (p < P && q < Q)
                kt_conv_store(acc[j][i], n, c, p, q, x, w, bias, y);
        }
}
