/*
 * ktune kernel — family gemm
 * schedule: gemm math=tf32x3 bm=128 bn=128 bk=32 wm=1 wn=1 stages=3 splitk=1 raster=1 smem=xor splitk_mode=parallel mma=wgmma mcast=1 store=direct
 * graph: gemm
 *   Y = matmul(A, B)  f32 [M=1000, N=1000]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/cp_async.cuh"
#include "ktune/mma.cuh"
#include "ktune/swizzle.cuh"
#include "ktune/wgmma.cuh"
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

/* ---- problem and schedule (compile-time constants) ----
 * out[bz, m, n] = epilogue(sum_k A[bz, m, k] * B[bz, k, n]); A is stored [M][K], B [K][N]. */
enum : int { M = 1000, N = 1000, K = 1000, BATCH = 1 };
enum : int { BM = 128, BN = 128, BK = 32 }; /* block tile */
enum : int { WM = 1, WN = 1, WTM = 128, WTN = 128 }; /* warp grid, warp tile */
enum : int { THREADS = 256, STAGES = 3, SPLITK = 1, RASTER = 1 };
enum : int { TILES_M = 8, TILES_N = 8, KTILES = 32, KTILES_PER_SLICE = 32 };
enum : int { FLUSH_KTILES = 2 }; /* k tiles summed inside the mmas before an FADD */
typedef int idx_t;

/* Block pid -> output tile, row by row. */
__device__ __forceinline__ void ktg_raster(int pid, int &tm, int &tn)
{
    tm = pid / TILES_N;
    tn = pid % TILES_N;
}

/* ---- wgmma: tile layout and descriptor ----
 * Tiles of 128-byte rows (32 floats of k) in the 128-byte swizzle, 1024-byte aligned
 * (kt_swizzle128_f32). Their descriptor: 8-row groups 1024 bytes apart (stride offset); the
 * leading offset is unused while a k8 step stays inside one 128-byte row. A k step of 8
 * floats adds 32 bytes (2 in the address field's 16-byte unit). */
__device__ __forceinline__ unsigned long long ktw_desc(const void *p)
{
    return kt_wgmma_desc(p, 16, 1024, KT_WGMMA_SW128);
}

/* The fused epilogue of output element (bz, m, n) in fp32; acc is Y[bz, m, n]. */
__device__ __forceinline__ float ktg_epilogue(int bz, int m, int n, float acc)
{
    return acc;
}
__device__ __forceinline__ void ktg_store(float *__restrict__ out, int bz, int m, int n, float acc)
{
    if (m >= M || n >= N)
        return;
    out[((idx_t)bz * M + m) * N + n] = ktg_epilogue(bz, m, n, acc);
}
/* Elements (m, n) and (m, n + 1); n is even. */
__device__ __forceinline__ void ktg_store2(float *__restrict__ out, int bz, int m, int n, float acc0, float acc1)
{
    if (m >= M || n >= N)
        return;
    const float y0 = ktg_epilogue(bz, m, n, acc0);
    const float y1 = ktg_epilogue(bz, m, n + 1, acc1);
    /* N is even: the pair is contiguous and 8-byte aligned */
    *reinterpret_cast<float2 *>(out + ((idx_t)bz * M + m) * N + n) = make_float2(y0, y1);
}

/* Block: a BM x BN output tile of batch bz, computed as its transpose by 2 warpgroups. */
extern "C" __global__ void __launch_bounds__(THREADS, 1) ktune_gemm_tf32x3_wgmma_128x128x32(const float *__restrict__ t0_A, const float *__restrict__ t1_B, float *__restrict__ t2_Y)
{
    constexpr int LDB = BN + 8; /* B tile row pitch (floats): fragment reads hit 32 banks */
    constexpr int A_TILE = BM * 32, B_TILE = 32 * LDB;
    extern __shared__ __align__(128) unsigned char kt_smem[];
    /* [STAGES] raw A tiles, [2] A_small tiles (1024-byte aligned for the swizzle), [STAGES] B tiles */
    float *as = reinterpret_cast<float *>((reinterpret_cast<unsigned long long>(kt_smem) + 1023) & ~1023ull);
    float *asmall = as + STAGES * A_TILE, *bs = asmall + 2 * A_TILE;
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int nw = tid / 128 * 64 + (tid / 32 & 3) * 16; /* this warp's 16 C columns (wgmma A rows) */
    int tile_m, tile_n;
    ktg_raster(blockIdx.x, tile_m, tile_n);
    const int m0 = tile_m * BM, n0 = tile_n * BN;
    const int bz = blockIdx.z;
    const float *__restrict__ ag = t0_A;
    const float *__restrict__ bg = t1_B;
    /* Copies k tile kt into stage st: A rows swizzled, B rows padded; 16 bytes a copy, zero past the edges. */
    auto load_tile = [&](int kt, int st) {
        const int k0 = kt * 32;
        float *sa = as + st * A_TILE, *sb = bs + st * B_TILE;
        #pragma unroll
        for (int i = tid; i < BM * 8; i += THREADS) {
            const int r = i >> 3, ch = i & 7, m = m0 + r, k = k0 + ch * 4;
            const bool ok = m < M && k < K;
            kt_cp_async16(sa + kt_swizzle128_f32(r, ch * 4), ag + (ok ? (idx_t)m * K + k : 0), ok ? 16 : 0);
        }
        #pragma unroll
        for (int i = tid; i < 32 * (BN / 4); i += THREADS) {
            const int r = i / (BN / 4), ch = i % (BN / 4), k = k0 + r, n = n0 + ch * 4;
            const bool ok = k < K && n < N;
            kt_cp_async16(sb + r * LDB + ch * 4, bg + (ok ? (idx_t)k * N + n : 0), ok ? 16 : 0);
        }
    };
    /* A's small halves, x - big with big = x's top 19 bits (what the tensor cores read of x) */
    auto make_small = [&](int st, int buf) {
        const float4 *raw = reinterpret_cast<const float4 *>(as + st * A_TILE);
        float4 *small = reinterpret_cast<float4 *>(asmall + buf * A_TILE);
        #pragma unroll
        for (int i = tid; i < A_TILE / 4; i += THREADS) {
            float4 v = raw[i];
            v.x = kt_tf32_trunc_rest(v.x);
            v.y = kt_tf32_trunc_rest(v.y);
            v.z = kt_tf32_trunc_rest(v.z);
            v.w = kt_tf32_trunc_rest(v.w);
            small[i] = v;
        }
        kt_fence_proxy_async();
    };
    /* This warp's B^T fragments of stage st's four k steps (k t, t + 4; columns nw + g, + 8), split */
    auto load_frags = [&](int st, unsigned (&big)[4][4], unsigned (&lo)[4][4]) {
        const float *sb = bs + st * B_TILE;
        #pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            const float *f = sb + (ks * 8 + t) * LDB + nw + g;
            kt_split_tf32(f[0], big[ks][0], lo[ks][0]);
            kt_split_tf32(f[8], big[ks][1], lo[ks][1]);
            kt_split_tf32(f[4 * LDB], big[ks][2], lo[ks][2]);
            kt_split_tf32(f[4 * LDB + 8], big[ks][3], lo[ks][3]);
        }
    };
    float acc[BM / 8][4], part[BM / 8][4];
    #pragma unroll
    for (int j = 0; j < BM / 8; j++)
        #pragma unroll
        for (int r = 0; r < 4; r++)
            acc[j][r] = part[j][r] = 0.0f;
    #pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < KTILES)
            load_tile(s, s);
        kt_cp_async_commit();
    }
    unsigned big[4][4], lo[4][4];
    kt_cp_async_wait<STAGES - 2>();
    __syncthreads();
    make_small(0, 0);
    __syncthreads();
    load_frags(0, big, lo);
    /* Tile kt's wgmmas run while the block prepares tile kt + 1: its copies land and its small
     * halves are written to the other A_small buffer. */
    for (int kt = 0; kt < KTILES; kt++) {
        const int st = kt % STAGES;
        const unsigned long long da = ktw_desc(as + st * A_TILE), ds = ktw_desc(asmall + (kt & 1) * A_TILE);
        kt_wgmma_fence();
        #pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            kt_wgmma_tf32_rs<BM>(part, lo[ks], da + 2 * ks);  /* B small x A big */
            kt_wgmma_tf32_rs<BM>(part, big[ks], ds + 2 * ks); /* B big x A small */
            kt_wgmma_tf32_rs<BM>(part, big[ks], da + 2 * ks); /* B big x A big */
        }
        kt_wgmma_commit();
        /* stage (kt - 1) % STAGES: tile kt - 1's wgmmas were waited for by every warpgroup */
        if (kt + STAGES - 1 < KTILES)
            load_tile(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
        kt_cp_async_commit();
        unsigned nbig[4][4], nlo[4][4];
        if (kt + 1 < KTILES) {
            kt_cp_async_wait<STAGES - 2>(); /* tile kt + 1 has landed */
            __syncthreads();
            make_small((kt + 1) % STAGES, (kt + 1) & 1);
            load_frags((kt + 1) % STAGES, nbig, nlo);
        }
        kt_wgmma_wait<0>();
        kt_reg_pin(big); /* the wgmmas read these registers until now */
        kt_reg_pin(lo);
        kt_reg_hold(part);
        /* the truncating sums of FLUSH_KTILES k tiles, carried into acc with round-to-nearest FADDs */
        if ((kt + 1) % FLUSH_KTILES == 0 || kt + 1 == KTILES) {
            #pragma unroll
            for (int j = 0; j < BM / 8; j++)
                #pragma unroll
                for (int r = 0; r < 4; r++) {
                    acc[j][r] += part[j][r];
                    part[j][r] = 0.0f;
                }
        }
        /* every warpgroup is done with tile kt (its stage and A_small buffer may be rewritten) and
         * tile kt + 1's small halves are complete */
        __syncthreads();
        #pragma unroll
        for (int ks = 0; ks < 4; ks++)
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                big[ks][r] = nbig[ks][r];
                lo[ks][r] = nlo[ks][r];
            }
    }
    kt_cp_async_wait<0>();
    /* acc[j][r] is C^T (n, m): n = n0 + nw + g (+ 8 for r >= 2), m = m0 + 8 j + 2 t + (r & 1) */
    #pragma unroll
    for (int j = 0; j < BM / 8; j++)
        #pragma unroll
        for (int r = 0; r < 4; r++)
            ktg_store(t2_Y, bz, m0 + 8 * j + 2 * t + (r & 1), n0 + nw + g + (r >> 1) * 8, acc[j][r]);
}
