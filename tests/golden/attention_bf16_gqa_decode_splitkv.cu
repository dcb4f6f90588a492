/*
 * ktune kernel — family attention
 * schedule: attention bq=64 bkv=32 warps=4 stages=1 math=bf16 smem=pad q=smem exp=exp2 mma=splitkv grid=tiles splits=8 pingpong=0
 * graph: dec
 *   o = attention(q, k, v)  bf16 [2, 32, 1, 128]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/cp_async.cuh"
#include "ktune/math.cuh"
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
/* ---- attention helpers: the shared tile layout ---- */
/* Element offset of (row, col) in a shared tile of STRIDE-element rows (padded by 16 bytes, so the 8 rows an ldmatrix reads land in distinct banks). */
template <int STRIDE> __device__ __forceinline__ int kt_off(int row, int col)
{
    return row * STRIDE + col;
}
/* ---- end of attention helpers ---- */

/* the low and the high 16-bit element of a packed pair, as float */
__device__ __forceinline__ float ktd_lo(unsigned u)
{
    return kt_bf16_to_f32((kt_bf16)(u & 0xffffu));
}
__device__ __forceinline__ float ktd_hi(unsigned u)
{
    return kt_bf16_to_f32((kt_bf16)(u >> 16));
}

/* Block: k/v batch entry blockIdx.y (batch x k/v head), key slice blockIdx.x; the slice's partial to the workspace */
extern "C" __global__ void __launch_bounds__(128)
ktune_attention_bf16_splitkv_w4_x8_s1(
    const kt_bf16 *__restrict__ in0,
    const kt_bf16 *__restrict__ in1,
    const kt_bf16 *__restrict__ in2,
    float *__restrict__ workspace)
{
    extern __shared__ __align__(128) unsigned char kt_smem[]; /* the warps' partials */
    constexpr int D = 128, DV = 128, SQ = 1, SKV = 1000;
    constexpr int HQ = 32, GROUP = 4, HKV = HQ / GROUP; /* query heads, per k/v head, k/v heads */
    constexpr int R = GROUP * SQ; /* query rows of a k/v head */
    constexpr int W = 4, SPLITS = 8; /* warps a block, key slices */
    constexpr int PART = R * (DV + 2); /* floats of a partial: O, then max, sum */
    constexpr float SCALE = 0.127517432f; /* scale * log2(e): softmax in base 2 */
    constexpr int SLICE = 128; /* keys a slice: whole 32-key chunks */
    const int split = blockIdx.x, kvb = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    constexpr int DP = D / 64, CV = DV / 32; /* 16-byte pieces of a K row a lane reads; O columns a lane owns */
    __shared__ float sq[R][D];
    /* row r: query r % SQ of query head (kvb % HKV) * GROUP + r / SQ of batch entry kvb / HKV */
    for (int i = threadIdx.x; i < R * D; i += blockDim.x) {
        const int r = i / D, d = i % D;
        const size_t qb = (size_t)(kvb / HKV) * HQ + kvb % HKV * GROUP + r / SQ;
        sq[r][d] = kt_bf16_to_f32(in0[(qb * SQ + r % SQ) * D + d]);
    }
    __syncthreads();
    const kt_bf16 *gK = in1 + (size_t)kvb * SKV * D;
    const kt_bf16 *gV = in2 + (size_t)kvb * SKV * DV;
    float m[R], l[R], o[R][CV]; /* running max (base 2), this lane's share of the sum, its O columns */
    #pragma unroll
    for (int r = 0; r < R; r++) {
        m[r] = KT_NEG_INF;
        l[r] = 0.0f;
        #pragma unroll
        for (int c = 0; c < CV; c++)
            o[r][c] = 0.0f;
    }
    const int k_end = min(SKV, (split + 1) * SLICE);
    for (int kv0 = split * SLICE + warp * 32; kv0 < k_end; kv0 += W * 32) {
        const int key = kv0 + lane; /* the key whose scores this lane keeps */
        const bool live = key < k_end;
        float s[R];
        #pragma unroll
        for (int r = 0; r < R; r++)
            s[r] = 0.0f;
        /* Q K^T in 8 rounds of 4 keys, a key to each 8-lane group (its row read coalesced: lane i of the group
         * takes 16-byte pieces i, i + 8, ...), the group's sums added by shuffles, then handed to the key's lane */
        #pragma unroll 2 /* the loads of two rounds in flight: more spilled */
        for (int t = 0; t < 8; t++) {
            uint4 kr[DP];
            const int kt = kv0 + t * 4 + (lane >> 3);
            #pragma unroll
            for (int p = 0; p < DP; p++)
                kr[p] = kt < k_end ? reinterpret_cast<const uint4 *>(gK + (size_t)kt * D)[p * 8 + (lane & 7)] : make_uint4(0u, 0u, 0u, 0u);
            #pragma unroll
            for (int r = 0; r < R; r++) {
                float acc = 0.0f, acc1 = 0.0f; /* two chains */
                #pragma unroll
                for (int p = 0; p < DP; p++) {
                    const float *q = &sq[r][(p * 8 + (lane & 7)) * 8];
                    acc = fmaf(q[0], ktd_lo(kr[p].x), fmaf(q[1], ktd_hi(kr[p].x), acc));
                    acc1 = fmaf(q[2], ktd_lo(kr[p].y), fmaf(q[3], ktd_hi(kr[p].y), acc1));
                    acc = fmaf(q[4], ktd_lo(kr[p].z), fmaf(q[5], ktd_hi(kr[p].z), acc));
                    acc1 = fmaf(q[6], ktd_lo(kr[p].w), fmaf(q[7], ktd_hi(kr[p].w), acc1));
                }
                acc += acc1;
                acc += __shfl_xor_sync(0xffffffffu, acc, 1);
                acc += __shfl_xor_sync(0xffffffffu, acc, 2);
                acc += __shfl_xor_sync(0xffffffffu, acc, 4);
                /* key kv0 + 4 t + g's sum is in group g: lane 4 t + g takes it */
                const float mine = __shfl_sync(0xffffffffu, acc, (lane & 3) * 8);
                if (lane >> 2 == t)
                    s[r] = mine;
            }
        }
        #pragma unroll
        for (int r = 0; r < R; r++) {
            s[r] *= SCALE;
            if (!live)
                s[r] = KT_NEG_INF;
        }
        /* online softmax over the chunk: the rows' max across the warp; p = 2^(s - max) */
        #pragma unroll
        for (int r = 0; r < R; r++) {
            float mx = s[r];
            #pragma unroll
            for (int x = 16; x > 0; x >>= 1)
                mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, x));
            mx = kt_max(mx, m[r]);
            const float base = mx == KT_NEG_INF ? 0.0f : mx; /* nothing live yet: p = 0, no NaN */
            const float alpha = kt_exp2(m[r] - base);
            s[r] = kt_exp2(s[r] - base);
            l[r] = l[r] * alpha + s[r];
            m[r] = mx;
            #pragma unroll
            for (int c = 0; c < CV; c++)
                o[r][c] *= alpha;
        }
        /* O += P V: V's rows of the chunk, this lane's columns; key j's p from lane j */
        #pragma unroll
        for (int j = 0; j < 32; j++) {
            const uint2 vw = kv0 + j < k_end ? reinterpret_cast<const uint2 *>(gV + (size_t)(kv0 + j) * DV)[lane] : make_uint2(0u, 0u);
            const float v[CV] = {ktd_lo(vw.x), ktd_hi(vw.x), ktd_lo(vw.y), ktd_hi(vw.y)};
            #pragma unroll
            for (int r = 0; r < R; r++) {
                const float p = __shfl_sync(0xffffffffu, s[r], j);
                #pragma unroll
                for (int c = 0; c < CV; c++)
                    o[r][c] = fmaf(p, v[c], o[r][c]);
            }
        }
    }
    /* the warp's partial to shared memory: O unnormalised, the max, the sum over its lanes */
    __syncthreads();
    float *part = reinterpret_cast<float *>(kt_smem) + warp * PART; /* this warp's slot */
    #pragma unroll
    for (int r = 0; r < R; r++) {
        float sum = l[r];
        #pragma unroll
        for (int x = 16; x > 0; x >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, x);
        #pragma unroll
        for (int c = 0; c < CV; c++)
            part[r * DV + lane * CV + c] = o[r][c];
        if (lane == 0) {
            part[R * DV + r] = m[r];
            part[R * DV + R + r] = sum;
        }
    }
    __syncthreads();
    /* the W partials merged in warp order, a thread an element of O: rescaled to their common max */
    const float *parts = reinterpret_cast<const float *>(kt_smem);
    float *slice = workspace + ((size_t)kvb * SPLITS + split) * PART;
    for (int i = threadIdx.x; i < R * DV; i += W * 32) {
        const int r = i / DV, c = i % DV;
        float mx = KT_NEG_INF;
        #pragma unroll
        for (int w = 0; w < W; w++)
            mx = kt_max(mx, parts[w * PART + R * DV + r]);
        const float base = mx == KT_NEG_INF ? 0.0f : mx;
        float sum = 0.0f, acc = 0.0f;
        #pragma unroll
        for (int w = 0; w < W; w++) {
            const float f = kt_exp2(parts[w * PART + R * DV + r] - base);
            sum = fmaf(parts[w * PART + R * DV + R + r], f, sum);
            acc = fmaf(parts[w * PART + r * DV + c], f, acc);
        }
        slice[r * DV + c] = acc;
        if (c == 0) {
            slice[R * DV + r] = mx;
            slice[R * DV + R + r] = sum;
        }
    }
}

/* One thread per output element: the PARTS partials of its k/v head combined in order, normalised */
extern "C" __global__ void __launch_bounds__(256)
ktune_attention_bf16_splitkv_w4_x8_s1_combine(const float *__restrict__ workspace, kt_bf16 *__restrict__ out0)
{
    constexpr int DV = 128, SQ = 1;
    constexpr int HQ = 32, GROUP = 4, HKV = HQ / GROUP; /* query heads, per k/v head, k/v heads */
    constexpr int R = GROUP * SQ; /* query rows of a k/v head */
    constexpr int PARTS = 8; /* partials a k/v head: a slice's each */
    constexpr int PART = R * (DV + 2); /* floats of a partial: O, then max, sum */
    constexpr long long TOTAL = 8192LL; /* output elements */
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= TOTAL)
        return;
    const int c = (int)(i % DV);
    const long long row = i / DV, bidx = row / SQ; /* the query row, its batch entry (query head) */
    const long long kvb = bidx / HQ * HKV + bidx % HQ / GROUP;
    const int r = (int)(bidx % HQ % GROUP) * SQ + (int)(row % SQ);
    const float *p0 = workspace + (size_t)kvb * PARTS * PART;
    float mx = KT_NEG_INF;
    for (int p = 0; p < PARTS; p++)
        mx = kt_max(mx, p0[(size_t)p * PART + R * DV + r]);
    const float base = mx == KT_NEG_INF ? 0.0f : mx;
    float sum = 0.0f, acc = 0.0f;
    for (int p = 0; p < PARTS; p++) {
        const float *w = p0 + (size_t)p * PART;
        const float f = kt_exp2(w[R * DV + r] - base);
        sum = fmaf(w[R * DV + R + r], f, sum);
        acc = fmaf(w[r * DV + c], f, acc);
    }
    out0[i] = kt_f32_to_bf16(acc / sum);
}
