/*
 * ktune kernel — family conv
 * schedule: conv algo=implicit_gemm math=tf32x3 bm=128 bn=96 bk=16 warps=8 stages=2 tk=1 tq=1 filter=shared
 * graph: alexnet_conv1
 *   c = conv2d(X, W, b)  f32 [100, 96, 55, 55]
 *   Y = relu(c)  f32 [100, 96, 55, 55]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/mma.cuh"
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
    const float v1 = kt_max(v0, 0.0f); /* Y = relu */
    y[((n * K + k) * P + p) * Q + q] = v1;
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

/* Reduction index -> (offset of x from the receptive field's origin, packed filter offsets). */
__constant__ int2 kt_kk[368] = {
    {0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 7},
    {8, 8}, {9, 9}, {10, 10}, {224, 65536}, {225, 65537}, {226, 65538}, {227, 65539}, {228, 65540},
    {229, 65541}, {230, 65542}, {231, 65543}, {232, 65544}, {233, 65545}, {234, 65546}, {448, 131072}, {449, 131073},
    {450, 131074}, {451, 131075}, {452, 131076}, {453, 131077}, {454, 131078}, {455, 131079}, {456, 131080}, {457, 131081},
    {458, 131082}, {672, 196608}, {673, 196609}, {674, 196610}, {675, 196611}, {676, 196612}, {677, 196613}, {678, 196614},
    {679, 196615}, {680, 196616}, {681, 196617}, {682, 196618}, {896, 262144}, {897, 262145}, {898, 262146}, {899, 262147},
    {900, 262148}, {901, 262149}, {902, 262150}, {903, 262151}, {904, 262152}, {905, 262153}, {906, 262154}, {1120, 327680},
    {1121, 327681}, {1122, 327682}, {1123, 327683}, {1124, 327684}, {1125, 327685}, {1126, 327686}, {1127, 327687}, {1128, 327688},
    {1129, 327689}, {1130, 327690}, {1344, 393216}, {1345, 393217}, {1346, 393218}, {1347, 393219}, {1348, 393220}, {1349, 393221},
    {1350, 393222}, {1351, 393223}, {1352, 393224}, {1353, 393225}, {1354, 393226}, {1568, 458752}, {1569, 458753}, {1570, 458754},
    {1571, 458755}, {1572, 458756}, {1573, 458757}, {1574, 458758}, {1575, 458759}, {1576, 458760}, {1577, 458761}, {1578, 458762},
    {1792, 524288}, {1793, 524289}, {1794, 524290}, {1795, 524291}, {1796, 524292}, {1797, 524293}, {1798, 524294}, {1799, 524295},
    {1800, 524296}, {1801, 524297}, {1802, 524298}, {2016, 589824}, {2017, 589825}, {2018, 589826}, {2019, 589827}, {2020, 589828},
    {2021, 589829}, {2022, 589830}, {2023, 589831}, {2024, 589832}, {2025, 589833}, {2026, 589834}, {2240, 655360}, {2241, 655361},
    {2242, 655362}, {2243, 655363}, {2244, 655364}, {2245, 655365}, {2246, 655366}, {2247, 655367}, {2248, 655368}, {2249, 655369},
    {2250, 655370}, {50176, 0}, {50177, 1}, {50178, 2}, {50179, 3}, {50180, 4}, {50181, 5}, {50182, 6},
    {50183, 7}, {50184, 8}, {50185, 9}, {50186, 10}, {50400, 65536}, {50401, 65537}, {50402, 65538}, {50403, 65539},
    {50404, 65540}, {50405, 65541}, {50406, 65542}, {50407, 65543}, {50408, 65544}, {50409, 65545}, {50410, 65546}, {50624, 131072},
    {50625, 131073}, {50626, 131074}, {50627, 131075}, {50628, 131076}, {50629, 131077}, {50630, 131078}, {50631, 131079}, {50632, 131080},
    {50633, 131081}, {50634, 131082}, {50848, 196608}, {50849, 196609}, {50850, 196610}, {50851, 196611}, {50852, 196612}, {50853, 196613},
    {50854, 196614}, {50855, 196615}, {50856, 196616}, {50857, 196617}, {50858, 196618}, {51072, 262144}, {51073, 262145}, {51074, 262146},
    {51075, 262147}, {51076, 262148}, {51077, 262149}, {51078, 262150}, {51079, 262151}, {51080, 262152}, {51081, 262153}, {51082, 262154},
    {51296, 327680}, {51297, 327681}, {51298, 327682}, {51299, 327683}, {51300, 327684}, {51301, 327685}, {51302, 327686}, {51303, 327687},
    {51304, 327688}, {51305, 327689}, {51306, 327690}, {51520, 393216}, {51521, 393217}, {51522, 393218}, {51523, 393219}, {51524, 393220},
    {51525, 393221}, {51526, 393222}, {51527, 393223}, {51528, 393224}, {51529, 393225}, {51530, 393226}, {51744, 458752}, {51745, 458753},
    {51746, 458754}, {51747, 458755}, {51748, 458756}, {51749, 458757}, {51750, 458758}, {51751, 458759}, {51752, 458760}, {51753, 458761},
    {51754, 458762}, {51968, 524288}, {51969, 524289}, {51970, 524290}, {51971, 524291}, {51972, 524292}, {51973, 524293}, {51974, 524294},
    {51975, 524295}, {51976, 524296}, {51977, 524297}, {51978, 524298}, {52192, 589824}, {52193, 589825}, {52194, 589826}, {52195, 589827},
    {52196, 589828}, {52197, 589829}, {52198, 589830}, {52199, 589831}, {52200, 589832}, {52201, 589833}, {52202, 589834}, {52416, 655360},
    {52417, 655361}, {52418, 655362}, {52419, 655363}, {52420, 655364}, {52421, 655365}, {52422, 655366}, {52423, 655367}, {52424, 655368},
    {52425, 655369}, {52426, 655370}, {100352, 0}, {100353, 1}, {100354, 2}, {100355, 3}, {100356, 4}, {100357, 5},
    {100358, 6}, {100359, 7}, {100360, 8}, {100361, 9}, {100362, 10}, {100576, 65536}, {100577, 65537}, {100578, 65538},
    {100579, 65539}, {100580, 65540}, {100581, 65541}, {100582, 65542}, {100583, 65543}, {100584, 65544}, {100585, 65545}, {100586, 65546},
    {100800, 131072}, {100801, 131073}, {100802, 131074}, {100803, 131075}, {100804, 131076}, {100805, 131077}, {100806, 131078}, {100807, 131079},
    {100808, 131080}, {100809, 131081}, {100810, 131082}, {101024, 196608}, {101025, 196609}, {101026, 196610}, {101027, 196611}, {101028, 196612},
    {101029, 196613}, {101030, 196614}, {101031, 196615}, {101032, 196616}, {101033, 196617}, {101034, 196618}, {101248, 262144}, {101249, 262145},
    {101250, 262146}, {101251, 262147}, {101252, 262148}, {101253, 262149}, {101254, 262150}, {101255, 262151}, {101256, 262152}, {101257, 262153},
    {101258, 262154}, {101472, 327680}, {101473, 327681}, {101474, 327682}, {101475, 327683}, {101476, 327684}, {101477, 327685}, {101478, 327686},
    {101479, 327687}, {101480, 327688}, {101481, 327689}, {101482, 327690}, {101696, 393216}, {101697, 393217}, {101698, 393218}, {101699, 393219},
    {101700, 393220}, {101701, 393221}, {101702, 393222}, {101703, 393223}, {101704, 393224}, {101705, 393225}, {101706, 393226}, {101920, 458752},
    {101921, 458753}, {101922, 458754}, {101923, 458755}, {101924, 458756}, {101925, 458757}, {101926, 458758}, {101927, 458759}, {101928, 458760},
    {101929, 458761}, {101930, 458762}, {102144, 524288}, {102145, 524289}, {102146, 524290}, {102147, 524291}, {102148, 524292}, {102149, 524293},
    {102150, 524294}, {102151, 524295}, {102152, 524296}, {102153, 524297}, {102154, 524298}, {102368, 589824}, {102369, 589825}, {102370, 589826},
    {102371, 589827}, {102372, 589828}, {102373, 589829}, {102374, 589830}, {102375, 589831}, {102376, 589832}, {102377, 589833}, {102378, 589834},
    {102592, 655360}, {102593, 655361}, {102594, 655362}, {102595, 655363}, {102596, 655364}, {102597, 655365}, {102598, 655366}, {102599, 655367},
    {102600, 655368}, {102601, 655369}, {102602, 655370}, {0, 1073676288}, {0, 1073676288}, {0, 1073676288}, {0, 1073676288}, {0, 1073676288}
};

extern "C" __global__ void __launch_bounds__(THREADS, 1)
ktune_conv_igemm_tf32x3(const float *__restrict__ x, const float *__restrict__ w,
                        const float *__restrict__ bias, float *__restrict__ y)
{
    extern __shared__ __align__(128) unsigned char kt_smem[];
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
                kt_split_tf32_rna(ap[0], a_big[mi][0], a_small[mi][0]);            /* (g, t) */
                kt_split_tf32_rna(ap[8 * LDS], a_big[mi][1], a_small[mi][1]);      /* (g + 8, t) */
                kt_split_tf32_rna(ap[4], a_big[mi][2], a_small[mi][2]);            /* (g, t + 4) */
                kt_split_tf32_rna(ap[8 * LDS + 4], a_big[mi][3], a_small[mi][3]);  /* (g + 8, t + 4) */
            }
            #pragma unroll
            for (int ni = 0; ni < NI; ni++) {
                const float *bp = bs + (wn0 + ni * 8 + g) * LDS + k8 + t;
                kt_split_tf32_rna(bp[0], b_big[ni][0], b_small[ni][0]); /* (k = t, n = g) */
                kt_split_tf32_rna(bp[4], b_big[ni][1], b_small[ni][1]); /* (k = t + 4, n = g) */
            }
            /* Small terms first; one pass over the tiles per term keeps MI x NI independent mmas
             * in flight. */
            #pragma unroll
            for (int mi = 0; mi < MI; mi++)
                #pragma unroll
                for (int ni = 0; ni < NI; ni++)
                    kt_mma_m16n8k8_tf32(part[mi][ni], a_small[mi], b_big[ni]);
            #pragma unroll
            for (int mi = 0; mi < MI; mi++)
                #pragma unroll
                for (int ni = 0; ni < NI; ni++)
                    kt_mma_m16n8k8_tf32(part[mi][ni], a_big[mi], b_small[ni]);
            #pragma unroll
            for (int mi = 0; mi < MI; mi++)
                #pragma unroll
                for (int ni = 0; ni < NI; ni++)
                    kt_mma_m16n8k8_tf32(part[mi][ni], a_big[mi], b_big[ni]);
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
