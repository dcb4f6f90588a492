/*
 * ktune kernel — family conv
 * schedule: conv algo=implicit_gemm math=ffma bm=64 bn=16 bk=16 warps=2 stages=2 tk=1 tq=1 filter=shared
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

/* Implicit GEMM: block tile BM pixels x BN channels, BK-deep reduction steps. */
constexpr int BM = 64, BN = 16, BK = 16, THREADS = 64, STAGES = 2;
constexpr int KTILES = (GEMM_K + BK - 1) / BK;
constexpr int TM = 4, TN = 4;          /* outputs per thread */
constexpr int LDA = BM + 1, LDB = BN + 1; /* padded k-major rows */
constexpr int A_PER = BM * BK / THREADS, B_PER = BN * BK / THREADS; /* elements per thread */
constexpr int A_ROWS = THREADS >= BM ? 1 : BM / THREADS; /* distinct pixels among them */

/* Reduction index -> (offset of x from the receptive field's origin, packed filter offsets). */
__constant__ int2 kt_kk[32] = {
    {0, 0}, {1, 1}, {2, 2}, {32, 65536}, {33, 65537}, {34, 65538}, {64, 131072}, {65, 131073},
    {66, 131074}, {1024, 0}, {1025, 1}, {1026, 2}, {1056, 65536}, {1057, 65537}, {1058, 65538}, {1088, 131072},
    {1089, 131073}, {1090, 131074}, {2048, 0}, {2049, 1}, {2050, 2}, {2080, 65536}, {2081, 65537}, {2082, 65538},
    {2112, 131072}, {2113, 131073}, {2114, 131074}, {0, 1073676288}, {0, 1073676288}, {0, 1073676288}, {0, 1073676288}, {0, 1073676288}
};

extern "C" __global__ void __launch_bounds__(THREADS, 1)
ktune_conv_igemm_ffma(const float *__restrict__ x, const float *__restrict__ w,
                      const float *__restrict__ bias, float *__restrict__ y)
{
    extern __shared__ __align__(128) unsigned char kt_smem[];
    float *As = (float *)kt_smem;         /* [STAGES][BK][LDA] */
    float *Bs = As + STAGES * BK * LDA;   /* [STAGES][BK][LDB] */
    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * BM;  /* first output pixel of the tile */
    const int n0 = blockIdx.y * BN;  /* first output channel within the group */
    const int grp = blockIdx.z;      /* conv group */
    /* Gathered rows (output pixels): receptive-field origin; rows past GEMM_M get a height
     * no load accepts. */
    idx_t a_base[A_ROWS];
    int a_h[A_ROWS], a_w[A_ROWS];
    #pragma unroll
    for (int i = 0; i < A_ROWS; i++) {
        const int m = m0 + (tid + i * THREADS) % BM;
        const int q = m % Q, p = (m / Q) % P, n = m / (Q * P);
        a_base[i] = ((idx_t)n * C + grp * CG) * H * W;
        a_h[i] = m < GEMM_M ? p * STR_H - PAD_H : -(1 << 24);
        a_w[i] = q * STR_W - PAD_W;
    }
    float a_reg[A_PER], b_reg[B_PER];
    /* Gathers tile kt of the implicit im2col matrix and of the filter into registers;
     * consecutive threads take consecutive pixels (A) and reduction indices (B), so reads coalesce. */
    auto load_tile = [&](int kt) {
        #pragma unroll
        for (int e = 0; e < A_PER; e++) {
            const int kk = kt * BK + (tid + e * THREADS) / BM;
            const int2 t = kt_kk[kk]; /* warp-uniform: a constant-cache broadcast */
            const int h = a_h[e % A_ROWS] + (t.y >> 16), ww = a_w[e % A_ROWS] + (t.y & 0xffff);
            const bool ok = (unsigned)h < (unsigned)H && (unsigned)ww < (unsigned)W;
            a_reg[e] = ok ? x[a_base[e % A_ROWS] + (long long)a_h[e % A_ROWS] * W + a_w[e % A_ROWS] + t.x] : 0.0f;
        }
        #pragma unroll
        for (int e = 0; e < B_PER; e++) {
            const int idx = tid + e * THREADS;
            const int kk = kt * BK + idx % BK, col = n0 + idx / BK;
            const bool ok = kk < GEMM_K && col < GEMM_N;
            b_reg[e] = ok ? w[(idx_t)(grp * KG + col) * GEMM_K + kk] : 0.0f;
        }
    };
    auto store_tile = [&](int stage) {
        float *as = As + stage * BK * LDA, *bs = Bs + stage * BK * LDB;
        #pragma unroll
        for (int e = 0; e < A_PER; e++) {
            const int idx = tid + e * THREADS;
            as[(idx / BM) * LDA + idx % BM] = a_reg[e];
        }
        #pragma unroll
        for (int e = 0; e < B_PER; e++) {
            const int idx = tid + e * THREADS;
            bs[(idx % BK) * LDB + idx / BK] = b_reg[e];
        }
    };
    const int row0 = tid % (BM / TM), col0 = tid / (BM / TM);
    /* Thread tile: rows row0 + i * (BM / TM), columns col0 + j * (BN / TN). */
    float acc[TM][TN] = {};
    auto compute_tile = [&](int stage) {
        const float *as = As + stage * BK * LDA, *bs = Bs + stage * BK * LDB;
        #pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float a[TM], bv[TN];
            #pragma unroll
            for (int i = 0; i < TM; i++)
                a[i] = as[kk * LDA + row0 + i * (BM / TM)];
            #pragma unroll
            for (int j = 0; j < TN; j++)
                bv[j] = bs[kk * LDB + col0 + j * (BN / TN)];
            #pragma unroll
            for (int i = 0; i < TM; i++) {
                #pragma unroll
                for (int j = 0; j < TN; j++)
                    acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
            }
        }
    };

    /* Double buffer: tile kt + 1 is loaded into registers while tile kt is multiplied. */
    load_tile(0);
    store_tile(0);
    __syncthreads();
    for (int kt = 0; kt < KTILES; kt++) {
        if (kt + 1 < KTILES)
            load_tile(kt + 1);
        compute_tile(kt % 2);
        if (kt + 1 < KTILES)
            store_tile((kt + 1) % 2);
        __syncthreads();
    }

    /* Epilogue: each accumulator is one output element (masked at the edges). */
    #pragma unroll
    for (int i = 0; i < TM; i++) {
        const int m = m0 + row0 + i * (BM / TM);
        if (m >= GEMM_M)
            continue;
        const int q = m % Q, p = (m / Q) % P, n = m / (Q * P);
        #pragma unroll
        for (int j = 0; j < TN; j++) {
            const int col = n0 + col0 + j * (BN / TN);
            if (col < GEMM_N)
                kt_conv_store(acc[i][j], n, grp * KG + col, p, q, x, w, bias, y);
        }
    }
}
