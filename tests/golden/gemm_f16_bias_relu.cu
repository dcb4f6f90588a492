/*
 * ktune kernel — family gemm
 * schedule: gemm math=f16 bm=64 bn=64 bk=32 wm=2 wn=2 stages=3 splitk=1 raster=1 smem=xor splitk_mode=parallel mma=sync mcast=1 store=direct
 * graph: gemm_bias_relu
 *   t0 = matmul(A, W)  f16 [M=1024, 256]
 *   t1 = add(t0, bias)  f16 [M=1024, 256]
 *   Y = relu(t1)  f16 [M=1024, 256]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/cp_async.cuh"
#include "ktune/ldmatrix.cuh"
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

/* ---- problem and schedule (compile-time constants) ----
 * out[bz, m, n] = epilogue(sum_k A[bz, m, k] * B[bz, k, n]); A is stored [M][K], B [K][N]. */
enum : int { M = 1024, N = 256, K = 512, BATCH = 1 };
enum : int { BM = 64, BN = 64, BK = 32 }; /* block tile */
enum : int { WM = 2, WN = 2, WTM = 32, WTN = 32 }; /* warp grid, warp tile */
enum : int { MI = 2, NI = 4 }; /* m16 x n8 mma tiles per warp */
enum : int { THREADS = 128, STAGES = 3, SPLITK = 1, RASTER = 1 };
enum : int { TILES_M = 16, TILES_N = 4, KTILES = 16, KTILES_PER_SLICE = 16 };
enum : int { A_STAGE = 2048, B_STAGE = 2048 }; /* shared elements per stage */
typedef int idx_t;

/* Block pid -> output tile, row by row. */
__device__ __forceinline__ void ktg_raster(int pid, int &tm, int &tn)
{
    tm = pid / TILES_N;
    tn = pid % TILES_N;
}

/* ---- shared-memory layouts and tile loaders ---- */
/* A tile in shared memory: [64 m][32 k], 16-byte chunk q = r * 4 + c / 8 XOR-swizzled with
 * (r / 2) % 8, so 8 consecutive rows at one column hit 8 different bank groups. */
__device__ __forceinline__ int ktg_a_slot(int r, int c)
{
    return ((r * 4 + (c >> 3)) ^ ((r >> 1) & 7)) * 8 + (c & 7);
}
/* B tile in shared memory: [32 k][64 n], 16-byte chunk q = r * 8 + c / 8 XOR-swizzled with
 * r % 8, so 8 consecutive rows at one column hit 8 different bank groups. */
__device__ __forceinline__ int ktg_b_slot(int r, int c)
{
    return ((r * 8 + (c >> 3)) ^ (r & 7)) * 8 + (c & 7);
}
/* Loads the A tile at (r0, c0) of the [M][K] matrix g: 16-byte cp.async copies,
 * 2 per thread; elements past the matrix are zero-filled. */
__device__ __forceinline__ void ktg_load_a(kt_f16 *s, const kt_f16 *__restrict__ g, int r0, int c0)
{
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = threadIdx.x / 4 + i * 32, c = threadIdx.x % 4 * 8;
        const int gr = r0 + r, gc = c0 + c;
        kt_cp_async16(s + ktg_a_slot(r, c), g + (idx_t)gr * K + gc, 16);
    }
}
/* Loads the B tile at (r0, c0) of the [K][N] matrix g: 16-byte cp.async copies,
 * 2 per thread; elements past the matrix are zero-filled. */
__device__ __forceinline__ void ktg_load_b(kt_f16 *s, const kt_f16 *__restrict__ g, int r0, int c0)
{
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = threadIdx.x / 8 + i * 16, c = threadIdx.x % 8 * 8;
        const int gr = r0 + r, gc = c0 + c;
        kt_cp_async16(s + ktg_b_slot(r, c), g + (idx_t)gr * N + gc, 16);
    }
}
/* Starts the loads of the A and B tiles of k offset k0 into one pipeline stage. */
__device__ __forceinline__ void ktg_load_tiles(kt_f16 *as, kt_f16 *bs, const kt_f16 *__restrict__ ag, const kt_f16 *__restrict__ bg, int m0, int n0, int k0)
{
    ktg_load_a(as, ag, m0, k0);
    ktg_load_b(bs, bg, k0, n0);
}

/* One BK-deep stage: the warp at (wm0, wn0) of the block tile multiplies its WTM x WTN sub-tile,
 * MI x NI mma.sync.m16n8k16 per 16-deep k step. Fragments (PTX ISA; g = lane / 4, t = lane % 4;
 * each register holds two 16-bit elements, the lower k first):
 *   A 16x16: a0 (row g, k 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..)
 *   B 16x8:  b0 (k 2t..2t+1, col g), b1 (k 2t + 8.., col g)
 *   C 16x8:  c0, c1 (row g, cols 2t, 2t + 1), c2, c3 (row g + 8, same cols) */
__device__ __forceinline__ void ktg_stage(const kt_f16 *as, const kt_f16 *bs, int wm0, int wn0, int lane, float (&acc)[MI][NI][4])
{
    const int lr = lane & 7, lj = lane >> 3;
    /* A stored [m][k]: matrix j = rows (j & 1) * 8, k (j >> 1) * 8 */
    const int a_r = (lj & 1) * 8 + lr, a_c = (lj >> 1) * 8;
    /* B stored [k][n], transposed: matrix j = k (j & 1) * 8, cols (j >> 1) * 8 */
    const int b_r = (lj & 1) * 8 + lr, b_c = (lj >> 1) * 8;
    #pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
        unsigned a[MI][4], b[NI][2];
        #pragma unroll
        for (int i = 0; i < MI; i++) {
            kt_ldmatrix_x4(a[i][0], a[i][1], a[i][2], a[i][3], as + ktg_a_slot(wm0 + i * 16 + a_r, kk + a_c));
        }
        #pragma unroll
        for (int j = 0; j < NI; j += 2) {
            /* one x4 load: b[j] from matrices 0 and 1, b[j + 1] from 2 and 3 */
            kt_ldmatrix_x4_trans(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], bs + ktg_b_slot(kk + b_r, wn0 + j * 8 + b_c));
        }
        #pragma unroll
        for (int i = 0; i < MI; i++) {
            #pragma unroll
            for (int j = 0; j < NI; j++)
                kt_mma_m16n8k16_f16(acc[i][j], a[i], b[j]);
        }
    }
}

/* The fused epilogue of output element (bz, m, n) in fp32; acc is t0[bz, m, n]. */
__device__ __forceinline__ float ktg_epilogue(const kt_f16 *__restrict__ t2_bias, int bz, int m, int n, float acc)
{
    const float v0 = ((acc) + (kt_f16_to_f32(t2_bias[(n)]))); /* t1 = add */
    const float v1 = kt_max(v0, 0.0f); /* Y = relu */
    return v1;
}
__device__ __forceinline__ void ktg_store(const kt_f16 *__restrict__ t2_bias, kt_f16 *__restrict__ out, int bz, int m, int n, float acc)
{
    out[((idx_t)bz * M + m) * N + n] = kt_f32_to_f16(ktg_epilogue(t2_bias, bz, m, n, acc));
}
/* Elements (m, n) and (m, n + 1); n is even. */
__device__ __forceinline__ void ktg_store2(const kt_f16 *__restrict__ t2_bias, kt_f16 *__restrict__ out, int bz, int m, int n, float acc0, float acc1)
{
    const float y0 = ktg_epilogue(t2_bias, bz, m, n, acc0);
    const float y1 = ktg_epilogue(t2_bias, bz, m, n + 1, acc1);
    /* N is even: the pair is contiguous and 4-byte aligned */
    *reinterpret_cast<unsigned *>(out + ((idx_t)bz * M + m) * N + n) = kt_f32_to_f16(y0) | (unsigned)kt_f32_to_f16(y1) << 16;
}

/* Block: a BM x BN output tile of batch bz; 4 warps. */
extern "C" __global__ void __launch_bounds__(THREADS, 1) ktune_gemm_f16_64x64x32(const kt_f16 *__restrict__ t0_A, const kt_f16 *__restrict__ t1_W, const kt_f16 *__restrict__ t2_bias, kt_f16 *__restrict__ t5_Y)
{
    extern __shared__ __align__(128) unsigned char kt_smem[];
    kt_f16 *as = reinterpret_cast<kt_f16 *>(kt_smem); /* STAGES x A_STAGE */
    kt_f16 *bs = as + STAGES * A_STAGE;              /* STAGES x B_STAGE */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm0 = warp / WN * WTM, wn0 = warp % WN * WTN;
    int tile_m, tile_n;
    ktg_raster(blockIdx.x, tile_m, tile_n);
    const int m0 = tile_m * BM, n0 = tile_n * BN;
    const int bz = blockIdx.z;
    const int kt0 = 0, nkt = KTILES;
    const kt_f16 *__restrict__ ag = t0_A;
    const kt_f16 *__restrict__ bg = t1_W;
    float acc[MI][NI][4];
    #pragma unroll
    for (int i = 0; i < MI; i++)
        #pragma unroll
        for (int j = 0; j < NI; j++)
            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
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
        ktg_stage(as + i % STAGES * A_STAGE, bs + i % STAGES * B_STAGE, wm0, wn0, lane, acc);
    }
    kt_cp_async_wait<0>();
    /* Accumulator (i, j) holds rows g, g + 8 and columns 2t, 2t + 1 of its 16 x 8 mma tile. */
    const int g = lane >> 2, t = lane & 3;
    #pragma unroll
    for (int i = 0; i < MI; i++) {
        #pragma unroll
        for (int j = 0; j < NI; j++) {
            const int m = m0 + wm0 + i * 16 + g, n = n0 + wn0 + j * 8 + 2 * t;
            ktg_store2(t2_bias, t5_Y, bz, m, n, acc[i][j][0], acc[i][j][1]);
            ktg_store2(t2_bias, t5_Y, bz, m + 8, n, acc[i][j][2], acc[i][j][3]);
        }
    }
}
