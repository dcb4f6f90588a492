/*
 * ktune kernel — family conv
 * schedule: conv algo=implicit_gemm math=tf32x3 bm=128 bn=96 bk=16 warps=8 stages=2 tk=1 tq=1 filter=shared
 * graph: alexnet_conv1
 *   c = conv2d(X, W, b)  f32 [100, 96, 55, 55]
 *   Y = relu(c)  f32 [100, 96, 55, 55]
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
/* ---- end of prelude ---- */

typedef int idx_t; /* element offsets */

/* Problem shape: input NCHW, filter OIHW, output NCHW. */
constexpr int BATCH = 100, C = 3, H = 224, W = 224;
constexpr int K = 96, R = 11, S = 11;
constexpr int P = 55, Q = 55;
constexpr int STR_H = 4, STR_W = 4, PAD_H = 2, PAD_W = 2;
constexpr int DIL_H = 1, DIL_W = 1;
constexpr int GROUPS = 1, CG = 3, KG = 96; /* channels per group */
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
    const float v1 = fmaxf(v0, 0.0f); /* Y = relu */
    y[((n * K + k) * P + p) * Q + q] = v1;
}

/* ---- tf32 tensor-core primitives (inline PTX) ---- */
/* fp32 -> tf32: round to nearest (ties away) to 10 stored mantissa bits; the result is an
 * fp32 bit pattern whose low 13 bits are zero. */
__device__ __forceinline__ unsigned kt_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}
/* Error-compensated split (3xTF32): x = big + small + e with big = tf32(x), the top 11
 * significant bits, and small = tf32(x - big), the next 11 (x - big is exact in fp32), so
 * |small| <= 2^-11 |x| and |e| <= 2^-22 |x|. The kernel sums a_small*b_big + a_big*b_small +
 * a_big*b_big (small terms first, so they are not lost against the big one): each tf32 x tf32
 * product is exact (11 x 11 bits), and each k step's sum is added to the accumulator in fp32.
 * What is dropped (a_small*b_small and the split remainders) is a few 2^-22 of |a b|, close
 * to fp32's own 2^-24 rounding, where one plain tf32 mma errs by up to 2^-10. */
__device__ __forceinline__ void kt_tf32_split(float x, unsigned &big, unsigned &small)
{
    big = kt_tf32(x);
    small = kt_tf32(x - __uint_as_float(big));
}
/* d += a * b on one m16n8k8 tile, tf32 operands, fp32 accumulation. */
__device__ __forceinline__ void kt_mma_tf32(float (&d)[4], const unsigned (&a)[4],
                                            const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Implicit GEMM: block tile BM pixels x BN channels, BK-deep reduction steps. */
constexpr int BM = 128, BN = 96, BK = 16, THREADS = 256, STAGES = 2;
constexpr int KTILES = (GEMM_K + BK - 1) / BK;
constexpr int WARPS_M = 4, WARPS_N = 2;          /* warp grid */
constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N; /* warp tile */
constexpr int MI = WTM / 16, NI = WTN / 8;           /* mma tiles per warp */
constexpr int LDS = BK + 4; /* row pitch (floats): the pad makes fragment reads conflict-free */
constexpr int A_PER = BM * BK / THREADS, B_PER = BN * BK / THREADS; /* elements per thread */
constexpr int A_ROWS = THREADS >= BM ? 1 : BM / THREADS; /* distinct pixels among them */

extern "C" __global__ void __launch_bounds__(THREADS, 1)
ktune_conv_igemm_tf32x3(const float *__restrict__ x, const float *__restrict__ w,
                        const float *__restrict__ bias, float *__restrict__ y)
{
    extern __shared__ __align__(16) unsigned char kt_smem[];
    float *As = (float *)kt_smem;     /* [STAGES][BM][LDS] pixels x reduction, raw floats */
    float *Bs = As + STAGES * BM * LDS; /* [STAGES][BN][LDS] channels x reduction */
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
            const int c = kk / (R * S), r = (kk / S) % R, s = kk % S;
            const int h = a_h[e % A_ROWS] + r * DIL_H, ww = a_w[e % A_ROWS] + s * DIL_W;
            const bool ok = kk < GEMM_K && (unsigned)h < (unsigned)H && (unsigned)ww < (unsigned)W;
            a_reg[e] = ok ? x[a_base[e % A_ROWS] + ((idx_t)c * H + h) * W + ww] : 0.0f;
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
        float *as = As + stage * BM * LDS, *bs = Bs + stage * BN * LDS;
        #pragma unroll
        for (int e = 0; e < A_PER; e++) {
            const int idx = tid + e * THREADS;
            as[(idx % BM) * LDS + idx / BM] = a_reg[e];
        }
        #pragma unroll
        for (int e = 0; e < B_PER; e++) {
            const int idx = tid + e * THREADS;
            bs[(idx / BK) * LDS + idx % BK] = b_reg[e];
        }
    };
    const int lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4; /* fragment row and column within an mma tile */
    const int wm0 = (warp % WARPS_M) * WTM, wn0 = (warp / WARPS_M) * WTN;
    float acc[MI][NI][4] = {};
    /* One stage: BK / 8 steps of 3 x MI x NI mma tiles per warp. Each float is split into
     * its tf32 big and small parts as its fragment is read.
     * Lane (g, t) reads row g, column t: with the 4-float row pad the 32 lanes of a read hit
     * 32 distinct banks. */
    auto compute_tile = [&](int stage) {
        const float *as = As + stage * BM * LDS, *bs = Bs + stage * BN * LDS;
        float part[MI][NI][4] = {}; /* this stage's products, added to acc at its end */
        #pragma unroll
        for (int k8 = 0; k8 < BK; k8 += 8) {
            unsigned a_big[MI][4], a_small[MI][4], b_big[NI][2], b_small[NI][2];
            #pragma unroll
            for (int mi = 0; mi < MI; mi++) {
                const float *ap = as + (wm0 + mi * 16 + g) * LDS + k8 + t;
                kt_tf32_split(ap[0], a_big[mi][0], a_small[mi][0]);            /* (g, t) */
                kt_tf32_split(ap[8 * LDS], a_big[mi][1], a_small[mi][1]);      /* (g + 8, t) */
                kt_tf32_split(ap[4], a_big[mi][2], a_small[mi][2]);            /* (g, t + 4) */
                kt_tf32_split(ap[8 * LDS + 4], a_big[mi][3], a_small[mi][3]);  /* (g + 8, t + 4) */
            }
            #pragma unroll
            for (int ni = 0; ni < NI; ni++) {
                const float *bp = bs + (wn0 + ni * 8 + g) * LDS + k8 + t;
                kt_tf32_split(bp[0], b_big[ni][0], b_small[ni][0]); /* (k = t, n = g) */
                kt_tf32_split(bp[4], b_big[ni][1], b_small[ni][1]); /* (k = t + 4, n = g) */
            }
            /* Small terms first; one pass over the tiles per term keeps MI x NI independent mmas
             * in flight. */
            #pragma unroll
            for (int mi = 0; mi < MI; mi++)
                #pragma unroll
                for (int ni = 0; ni < NI; ni++)
                    kt_mma_tf32(part[mi][ni], a_small[mi], b_big[ni]);
            #pragma unroll
            for (int mi = 0; mi < MI; mi++)
                #pragma unroll
                for (int ni = 0; ni < NI; ni++)
                    kt_mma_tf32(part[mi][ni], a_big[mi], b_small[ni]);
            #pragma unroll
            for (int mi = 0; mi < MI; mi++)
                #pragma unroll
                for (int ni = 0; ni < NI; ni++)
                    kt_mma_tf32(part[mi][ni], a_big[mi], b_big[ni]);
        }
        /* The tensor cores add into their accumulator by truncation, whose error grows with the
         * reduction length: the mmas sum only this stage's BK columns; round-to-nearest FADDs carry
         * them into acc. */
        #pragma unroll
        for (int mi = 0; mi < MI; mi++)
            #pragma unroll
            for (int ni = 0; ni < NI; ni++)
                #pragma unroll
                for (int v = 0; v < 4; v++)
                    acc[mi][ni][v] += part[mi][ni][v];
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
    for (int mi = 0; mi < MI; mi++)
        #pragma unroll
        for (int ni = 0; ni < NI; ni++)
            #pragma unroll
            for (int v = 0; v < 4; v++) {
                const int m = m0 + wm0 + mi * 16 + lane / 4 + (v / 2) * 8;
                const int col = n0 + wn0 + ni * 8 + (lane % 4) * 2 + v % 2;
                if (m < GEMM_M && col < GEMM_N)
                    kt_conv_store(acc[mi][ni][v], m / (Q * P), grp * KG + col, (m / Q) % P, m % Q,
                                  x, w, bias, y);
            }
}
