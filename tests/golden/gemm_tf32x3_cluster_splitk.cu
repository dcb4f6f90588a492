/*
 * ktune kernel — family gemm
 * schedule: gemm math=tf32x3 bm=32 bn=64 bk=64 wm=2 wn=2 stages=3 splitk=8 raster=1 smem=pad splitk_mode=cluster mma=sync mcast=1 store=direct
 * graph: gemm
 *   Y = matmul(A, B)  f32 [M=128, N=512]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/cp_async.cuh"
#include "ktune/ldmatrix.cuh"
#include "ktune/mma.cuh"
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

/* ---- problem and schedule (compile-time constants) ----
 * out[bz, m, n] = epilogue(sum_k A[bz, m, k] * B[bz, k, n]); A is stored [M][K], B [K][N]. */
enum : int { M = 128, N = 512, K = 1024, BATCH = 1 };
enum : int { BM = 32, BN = 64, BK = 64 }; /* block tile */
enum : int { WM = 2, WN = 2, WTM = 16, WTN = 32 }; /* warp grid, warp tile */
enum : int { MI = 1, NI = 4 }; /* m16 x n8 mma tiles per warp */
enum : int { THREADS = 128, STAGES = 3, SPLITK = 8, RASTER = 1 };
enum : int { TILES_M = 4, TILES_N = 8, KTILES = 16, KTILES_PER_SLICE = 2 };
enum : int { A_STAGE = 2176, B_STAGE = 4608 }; /* shared elements per stage */
enum : int { FLUSH_KTILES = 1 }; /* k tiles summed inside the mmas before an FADD */
typedef int idx_t;

/* ---- cluster split-K ----
 * The SPLITK blocks of a tile (adjacent blockIdx.x, slice fastest) are one thread-block cluster
 * (__cluster_dims__), so block rank = slice. Each writes its fp32 partial tile into its shared memory
 * in register order; after a cluster barrier, slice r sums the partials of the mma tiles (i, j) with
 * (i * NI + j) % SPLITK == r over slices 0, 1, ... in order (deterministic), reading the others'
 * shared memory, and stores them through the epilogue. A second barrier keeps every block's shared
 * memory alive until the others have read it. */

/* Block pid -> output tile, row by row. */
__device__ __forceinline__ void ktg_raster(int pid, int &tm, int &tn)
{
    tm = pid / TILES_N;
    tn = pid % TILES_N;
}

/* ---- shared-memory layouts and tile loaders ---- */
/* A tile in shared memory: [32 m][64 k], rows padded by 4 elements (16 bytes) against bank conflicts. */
__device__ __forceinline__ int ktg_a_slot(int r, int c)
{
    return r * 68 + c;
}
/* B tile in shared memory: [64 k][64 n], rows padded by 8 elements (32 bytes) against bank conflicts. */
__device__ __forceinline__ int ktg_b_slot(int r, int c)
{
    return r * 72 + c;
}
/* Loads the A tile at (r0, c0) of the [M][K] matrix g: 16-byte cp.async copies,
 * 4 per thread; elements past the matrix are zero-filled. */
__device__ __forceinline__ void ktg_load_a(float *s, const float *__restrict__ g, int r0, int c0)
{
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = threadIdx.x / 16 + i * 8, c = threadIdx.x % 16 * 4;
        const int gr = r0 + r, gc = c0 + c;
        kt_cp_async16(s + ktg_a_slot(r, c), g + (idx_t)gr * K + gc, 16);
    }
}
/* Loads the B tile at (r0, c0) of the [K][N] matrix g: 16-byte cp.async copies,
 * 8 per thread; elements past the matrix are zero-filled. */
__device__ __forceinline__ void ktg_load_b(float *s, const float *__restrict__ g, int r0, int c0)
{
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        const int r = threadIdx.x / 16 + i * 8, c = threadIdx.x % 16 * 4;
        const int gr = r0 + r, gc = c0 + c;
        kt_cp_async16(s + ktg_b_slot(r, c), g + (idx_t)gr * N + gc, 16);
    }
}
/* Starts the loads of the A and B tiles of k offset k0 into one pipeline stage. */
__device__ __forceinline__ void ktg_load_tiles(float *as, float *bs, const float *__restrict__ ag, const float *__restrict__ bg, int m0, int n0, int k0)
{
    ktg_load_a(as, ag, m0, k0);
    ktg_load_b(bs, bg, k0, n0);
}

/* One BK-deep stage: the warp at (wm0, wn0) of the block tile multiplies its WTM x WTN sub-tile,
 * MI x NI mma.sync.m16n8k8 (tf32; three per product, on the big/small split of each operand) per 8-deep k step. Fragments (PTX ISA; g = lane / 4, t = lane % 4):
 *   A 16x8: a0 (row g, k t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
 *   B 8x8:  b0 (k t, col g), b1 (k t + 4, col g)
 *   C 16x8: c0, c1 (row g, cols 2t, 2t + 1), c2, c3 (row g + 8, same cols) */
__device__ __forceinline__ void ktg_stage(const float *as, const float *bs, int wm0, int wn0, int lane, float (&acc)[MI][NI][4])
{
    const int lr = lane & 7, lj = lane >> 3;
    const int g = lane >> 2, t = lane & 3;
    /* A stored [m][k] (32-bit): matrix j = rows (j & 1) * 8, k (j >> 1) * 4 */
    const int a_r = (lj & 1) * 8 + lr, a_c = (lj >> 1) * 4;
    #pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
        unsigned a[MI][4], b[NI][2];
        #pragma unroll
        for (int i = 0; i < MI; i++) {
            kt_ldmatrix_x4(a[i][0], a[i][1], a[i][2], a[i][3], as + ktg_a_slot(wm0 + i * 16 + a_r, kk + a_c));
        }
        #pragma unroll
        for (int j = 0; j < NI; j++) {
            /* B stored [k][n]: element by element */
            const int n = wn0 + j * 8 + g;
            b[j][0] = __float_as_uint(bs[ktg_b_slot(kk + t, n)]);
            b[j][1] = __float_as_uint(bs[ktg_b_slot(kk + t + 4, n)]);
        }
        /* split: a and b keep the big halves, a_lo and b_lo receive the small ones */
        unsigned a_lo[MI][4], b_lo[NI][2];
        #pragma unroll
        for (int i = 0; i < MI; i++)
            #pragma unroll
            for (int r = 0; r < 4; r++)
                kt_split_tf32(__uint_as_float(a[i][r]), a[i][r], a_lo[i][r]);
        #pragma unroll
        for (int j = 0; j < NI; j++)
            #pragma unroll
            for (int r = 0; r < 2; r++)
                kt_split_tf32(__uint_as_float(b[j][r]), b[j][r], b_lo[j][r]);
        /* small terms first, one pass over the tiles per term */
        #pragma unroll
        for (int i = 0; i < MI; i++)
            #pragma unroll
            for (int j = 0; j < NI; j++)
                kt_mma_m16n8k8_tf32(acc[i][j], a_lo[i], b[j]);
        #pragma unroll
        for (int i = 0; i < MI; i++)
            #pragma unroll
            for (int j = 0; j < NI; j++)
                kt_mma_m16n8k8_tf32(acc[i][j], a[i], b_lo[j]);
        #pragma unroll
        for (int i = 0; i < MI; i++)
            #pragma unroll
            for (int j = 0; j < NI; j++)
                kt_mma_m16n8k8_tf32(acc[i][j], a[i], b[j]);
    }
}

/* The tensor cores add into their fp32 accumulator by truncation, whose error grows with the
 * number of adds (measured on the H100: 7e-6 normwise over K = 1024 summed in the mmas).
 * The mmas therefore sum FLUSH_KTILES k tiles (64 columns) into part, which a round-to-nearest
 * FADD carries into acc; part restarts at zero. */
__device__ __forceinline__ void ktg_flush(float (&acc)[MI][NI][4], float (&part)[MI][NI][4])
{
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                acc[i][j][r] += part[i][j][r];
                part[i][j][r] = 0.0f;
            }
}

/* The fused epilogue of output element (bz, m, n) in fp32; acc is Y[bz, m, n]. */
__device__ __forceinline__ float ktg_epilogue(int bz, int m, int n, float acc)
{
    return acc;
}
__device__ __forceinline__ void ktg_store(float *__restrict__ out, int bz, int m, int n, float acc)
{
    out[((idx_t)bz * M + m) * N + n] = ktg_epilogue(bz, m, n, acc);
}
/* Elements (m, n) and (m, n + 1); n is even. */
__device__ __forceinline__ void ktg_store2(float *__restrict__ out, int bz, int m, int n, float acc0, float acc1)
{
    const float y0 = ktg_epilogue(bz, m, n, acc0);
    const float y1 = ktg_epilogue(bz, m, n + 1, acc1);
    /* N is even: the pair is contiguous and 8-byte aligned */
    *reinterpret_cast<float2 *>(out + ((idx_t)bz * M + m) * N + n) = make_float2(y0, y1);
}

/* Block: a BM x BN output tile of batch bz over the k tiles of one split-K slice, summed in its cluster; 4 warps. */
extern "C" __global__ void __cluster_dims__(SPLITK, 1, 1) __launch_bounds__(THREADS, 1) ktune_gemm_tf32x3_32x64x64_cluster(const float *__restrict__ t0_A, const float *__restrict__ t1_B, float *__restrict__ t2_Y)
{
    extern __shared__ __align__(128) unsigned char kt_smem[];
    float *as = reinterpret_cast<float *>(kt_smem); /* STAGES x A_STAGE */
    float *bs = as + STAGES * A_STAGE;              /* STAGES x B_STAGE */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm0 = warp / WN * WTM, wn0 = warp % WN * WTN;
    int tile_m, tile_n;
    /* the slices of a tile are adjacent blocks, lowest slice first */
    const int pid = blockIdx.x / SPLITK, slice = blockIdx.x % SPLITK;
    ktg_raster(pid, tile_m, tile_n);
    const int m0 = tile_m * BM, n0 = tile_n * BN;
    const int bz = blockIdx.z;
    const int kt0 = slice * KTILES_PER_SLICE;
    const int nkt = KTILES - kt0 < KTILES_PER_SLICE ? KTILES - kt0 : KTILES_PER_SLICE;
    const float *__restrict__ ag = t0_A;
    const float *__restrict__ bg = t1_B;
    float acc[MI][NI][4], part[MI][NI][4];
    #pragma unroll
    for (int i = 0; i < MI; i++)
        #pragma unroll
        for (int j = 0; j < NI; j++)
            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    #pragma unroll
    for (int i = 0; i < MI; i++)
        #pragma unroll
        for (int j = 0; j < NI; j++)
            part[i][j][0] = part[i][j][1] = part[i][j][2] = part[i][j][3] = 0.0f;
    /* Pipeline prologue: k tiles 0 .. STAGES - 2 in flight, one commit group each. */
    #pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nkt)
            ktg_load_tiles(as + s * A_STAGE, bs + s * B_STAGE, ag, bg, m0, n0, (kt0 + s) * BK);
        kt_cp_async_commit();
    }
    for (int i = 0; i < nkt; i++) {
        /* Tile i has landed once at most STAGES - 2 younger groups are pending; the barrier also
         * tells every warp is done with stage (i - 1) % STAGES, refilled next. */
        kt_cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int next = i + STAGES - 1;
        if (next < nkt)
            ktg_load_tiles(as + next % STAGES * A_STAGE, bs + next % STAGES * B_STAGE, ag, bg, m0, n0, (kt0 + next) * BK);
        kt_cp_async_commit();
        ktg_stage(as + i % STAGES * A_STAGE, bs + i % STAGES * B_STAGE, wm0, wn0, lane, part);
        if ((i + 1) % FLUSH_KTILES == 0 || i + 1 == nkt)
            ktg_flush(acc, part);
    }
    kt_cp_async_wait<0>();
    /* Cluster split-K: sum the slices' partial tiles through shared memory. */
    __syncthreads(); /* every warp is done with the pipeline's tiles */
    float *part_s = reinterpret_cast<float *>(kt_smem) + threadIdx.x * 4;
    #pragma unroll
    for (int i = 0; i < MI; i++)
        #pragma unroll
        for (int j = 0; j < NI; j++)
            *reinterpret_cast<float4 *>(part_s + (i * NI + j) * THREADS * 4) = make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]);
    kt_cluster_sync(); /* every slice's partial is in place */
    #pragma unroll
    for (int i = 0; i < MI; i++) {
        #pragma unroll
        for (int j = 0; j < NI; j++) {
            if ((i * NI + j) % SPLITK != slice)
                continue;
            float *const at = part_s + (i * NI + j) * THREADS * 4;
            float4 sum = kt_ld_cluster4(kt_cluster_addr(at, 0));
            #pragma unroll
            for (int r = 1; r < SPLITK; r++) {
                const float4 v = kt_ld_cluster4(kt_cluster_addr(at, r));
                sum.x += v.x;
                sum.y += v.y;
                sum.z += v.z;
                sum.w += v.w;
            }
            acc[i][j][0] = sum.x;
            acc[i][j][1] = sum.y;
            acc[i][j][2] = sum.z;
            acc[i][j][3] = sum.w;
        }
    }
    kt_cluster_sync(); /* the other slices are done reading this one */
    /* Accumulator (i, j) holds rows g, g + 8 and columns 2t, 2t + 1 of its 16 x 8 mma tile. */
    const int g = lane >> 2, t = lane & 3;
    #pragma unroll
    for (int i = 0; i < MI; i++) {
        #pragma unroll
        for (int j = 0; j < NI; j++) {
            if ((i * NI + j) % SPLITK != slice)
                continue; /* another slice's share */
            const int m = m0 + wm0 + i * 16 + g, n = n0 + wn0 + j * 8 + 2 * t;
            ktg_store2(t2_Y, bz, m, n, acc[i][j][0], acc[i][j][1]);
            ktg_store2(t2_Y, bz, m + 8, n, acc[i][j][2], acc[i][j][3]);
        }
    }
}
