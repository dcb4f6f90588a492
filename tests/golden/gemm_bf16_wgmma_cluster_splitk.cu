/*
 * ktune kernel — family gemm
 * schedule: gemm math=bf16 bm=128 bn=128 bk=64 wm=2 wn=1 stages=2 splitk=4 raster=1 smem=xor splitk_mode=cluster mma=wgmma mcast=1 store=direct
 * graph: gemm_bias_relu
 *   t0 = matmul(A, W)  bf16 [M=1000, 256]
 *   t1 = add(t0, bias)  bf16 [M=1000, 256]
 *   Y = relu(t1)  bf16 [M=1000, 256]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/barrier.cuh"
#include "ktune/cluster.cuh"
#include "ktune/mbarrier.cuh"
#include "ktune/setmaxnreg.cuh"
#include "ktune/tma.cuh"
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
enum : int { M = 1000, N = 256, K = 512, BATCH = 1 };
enum : int { BM = 128, BN = 128, BK = 64 }; /* block tile */
enum : int { WM = 2, WN = 1, WTM = 64, WTN = 128 }; /* warp grid, warp tile */
enum : int { THREADS = 384, STAGES = 2, SPLITK = 4, RASTER = 1 };
enum : int { TILES_M = 8, TILES_N = 2, KTILES = 8, KTILES_PER_SLICE = 2 };
typedef int idx_t;

/* Block pid -> output tile, row by row. */
__device__ __forceinline__ void ktg_raster(int pid, int &tm, int &tn)
{
    tm = pid / TILES_N;
    tn = pid % TILES_N;
}

/* ---- wgmma (16-bit): the stage ring and its descriptors ----
 * A stage is A's tile then B's, 64 halves of k a 128-byte row, as TMA writes them in the 128-byte
 * swizzle: 16-byte chunk q of row r at chunk q ^ (r % 8), each tile 1024-byte aligned (the
 * swizzle repeats every 8 rows = 1024 bytes, and the hardware takes the row from address bits 7-9).
 * K-major operand (A [M][K], B [N][K]): one row per m or n. Descriptor: 8-row groups 1024 bytes
 *   apart (stride offset), leading offset unused (a k16 step stays in its row); k16 step +32 bytes.
 * MN-major operand (A [K][M], B [K][N], transpose flag 1): 64-wide blocks of 64 k rows, one row
 *   per k. Descriptor: leading offset 8192 bytes (the next 64-wide block along m or n), stride
 *   offset 1024 (the next 8 k rows); k16 step +2048 bytes (16 rows).
 * Either way an m64 slab is 8192 bytes on from the previous one. Descriptor offsets count 16 bytes. */
enum : int { CONSUMERS = 2, MT = 1, PINGPONG = 0 }; /* consumer warpgroups; m64 slabs per consumer; each its own tile */
/* cluster split-K: clusters of SPLITK blocks walk the tiles, block rank r summing k slice r */
enum : int { MCAST = 1, UNITS = TILES_M * TILES_N * BATCH }; /* the blocks walk the tiles */
/* Tile u (of every batch) -> its first row and column and its batch. */
__device__ __forceinline__ void ktw_tile(int u, int &m0, int &n0, int &bz)
{
    int tile_m, tile_n;
    bz = u / (TILES_M * TILES_N);
    ktg_raster(u - bz * (TILES_M * TILES_N), tile_m, tile_n);
    m0 = tile_m * BM;
    n0 = tile_n * BN;
}
enum : int { NB = 1, MMA_N = NB * BN }; /* B operands; the wgmma's n */
enum : int { A_STAGE = BM * 64, B_STAGE = NB * BN * 64 }; /* halves per stage */
enum : unsigned { STAGE_BYTES = (BM + NB * BN) * 128 }; /* a stage's TMA bytes, edges included */
enum : int { TRANS_A = 0, TRANS_B = 1 }; /* wgmma transpose flags: 1 = MN-major */
enum : int { A_KSTEP = 2, B_KSTEP = 128 }; /* descriptor step of k16 */
__device__ __forceinline__ unsigned long long ktw_desc_a(const void *p)
{
    return kt_wgmma_desc(p, 16, 1024, KT_WGMMA_SW128);
}
__device__ __forceinline__ unsigned long long ktw_desc_b(const void *p)
{
    return kt_wgmma_desc(p, 8192, 1024, KT_WGMMA_SW128);
}

/* The fused epilogue of output element (bz, m, n) in fp32; acc is t0[bz, m, n]. */
__device__ __forceinline__ float ktg_epilogue(const kt_bf16 *__restrict__ t2_bias, int bz, int m, int n, float acc)
{
    const float v0 = ((acc) + (kt_bf16_to_f32(t2_bias[(n)]))); /* t1 = add */
    const float v1 = kt_max(v0, 0.0f); /* Y = relu */
    return v1;
}
__device__ __forceinline__ void ktg_store(const kt_bf16 *__restrict__ t2_bias, kt_bf16 *__restrict__ out, int bz, int m, int n, float acc)
{
    if (m >= M)
        return;
    out[((idx_t)bz * M + m) * N + n] = kt_f32_to_bf16(ktg_epilogue(t2_bias, bz, m, n, acc));
}
/* Elements (m, n) and (m, n + 1); n is even. */
__device__ __forceinline__ void ktg_store2(const kt_bf16 *__restrict__ t2_bias, kt_bf16 *__restrict__ out, int bz, int m, int n, float acc0, float acc1)
{
    if (m >= M)
        return;
    const float y0 = ktg_epilogue(t2_bias, bz, m, n, acc0);
    const float y1 = ktg_epilogue(t2_bias, bz, m, n + 1, acc1);
    /* N is even: the pair is contiguous and 4-byte aligned */
    *reinterpret_cast<unsigned *>(out + ((idx_t)bz * M + m) * N + n) = kt_f32_to_bf16(y0) | (unsigned)kt_f32_to_bf16(y1) << 16;
}

/* Block: the BM x BN output tile of batch bz; warpgroup 0 produces (TMA), warpgroups 1..CONSUMERS
 * consume (wgmma) and run the epilogue. */
extern "C" __global__ void __launch_bounds__(THREADS, 1) __cluster_dims__(SPLITK, 1, 1) ktune_gemm_bf16_wgmma_128x128x64_cluster(const __grid_constant__ kt_tensor_map tmap_a, const __grid_constant__ kt_tensor_map tmap_b, const kt_bf16 *__restrict__ t2_bias, kt_bf16 *__restrict__ t5_Y)
{
    extern __shared__ __align__(128) unsigned char kt_smem[];
    /* [STAGES] A tiles, [STAGES] B tiles (1024-byte aligned for the swizzle), [STAGES] full and [STAGES] empty barriers */
    kt_bf16 *as = reinterpret_cast<kt_bf16 *>((reinterpret_cast<unsigned long long>(kt_smem) + 1023) & ~1023ull);
    kt_bf16 *bs = as + STAGES * A_STAGE;
    float4 *red = reinterpret_cast<float4 *>(bs + STAGES * B_STAGE); /* the block's fp32 partial tile, BM x BN */
    unsigned long long *full = reinterpret_cast<unsigned long long *>(red + BM * BN / 4), *empty = full + STAGES;
    unsigned long long *ready = empty + STAGES, *freed = ready + 1; /* the cluster's partials written; read */
    const int tid = threadIdx.x, wg = tid / 128;
    if (tid == 0) {
        kt_tma_prefetch_map(&tmap_a);
        kt_tma_prefetch_map(&tmap_b);
        for (int s = 0; s < STAGES; s++) {
            kt_mbar_init(&full[s], 1); /* the producer's arrive_expect_tx; the copies' bytes complete the phase */
            kt_mbar_init(&empty[s], MCAST * (PINGPONG ? 1 : CONSUMERS) * 4); /* lane 0 of every warp of the stage's consumers, in every block it is loaded for */
        }
        kt_mbar_init(ready, SPLITK * CONSUMERS); /* a warpgroup of every slice, once its partial is written */
        kt_mbar_init(freed, SPLITK * CONSUMERS); /* the same, once it has read every slice's */
        kt_mbar_fence_init();
    }
    kt_cluster_sync(); /* the cluster's barriers are initialised before any block's copies or arrivals reach them */
    const int rank = (int)kt_cluster_rank();
    int m0, n0, bz;
    if (wg == 0) {
        kt_setmaxnreg_dec<40>(); /* the producer needs few: 40 + 2 x 232 = 3 x 168 */
        if (tid == 0) {
            int it = 0; /* the ring's k tile count, across the block's tiles */
            for (int u = blockIdx.x / SPLITK; u < UNITS; u += gridDim.x / SPLITK) {
                const int slice = rank;
                ktw_tile(u, m0, n0, bz);
                for (int kt = 0; kt < KTILES_PER_SLICE; kt++, it++) {
                    const int st = it % STAGES, k0 = (slice * KTILES_PER_SLICE + kt) * BK;
                    if (it >= STAGES) /* the stage's previous use was released */
                        kt_mbar_wait(&empty[st], (it / STAGES + 1) & 1);
                    kt_mbar_arrive_expect_tx(&full[st], STAGE_BYTES);
                    kt_tma_load_2d(as + st * A_STAGE, &tmap_a, &full[st], k0, m0); /* BM rows of 64 k */
                    for (int j = 0; j < BN / 64; j += 1) /* 64-wide blocks of 64 k rows */
                        kt_tma_load_2d(bs + st * B_STAGE + j * 4096, &tmap_b, &full[st], n0 + 64 * j, k0);
                }
            }
        }
        return;
    }
    kt_setmaxnreg_inc<232>();
    /* consumer cw: cooperative, rows cw * BM / CONSUMERS + 64 * mt .. + 63 of every tile; ping-pong, all rows of
     * the block's tiles cw, cw + 2, ... (its k tiles start cw * KTILES into the ring and skip the other's) */
    const int cw = wg - 1, lane = tid & 31, warp = tid / 32 & 3, g = lane >> 2, t = lane & 3;
    const int row0 = PINGPONG ? 0 : cw * (BM / CONSUMERS);
    const unsigned long long da0 = ktw_desc_a(as) + row0 * 8, db0 = ktw_desc_b(bs); /* row0 / 64 slabs of 512 */
    const int step = PINGPONG ? 2 : 1;
    int it = PINGPONG ? cw * KTILES_PER_SLICE : 0;
    const int units = gridDim.x / SPLITK; /* units walked at once */
    int done = 0; /* tiles whose partials this block has handed over */
    for (int i = PINGPONG ? cw : 0, u = blockIdx.x / SPLITK + i * units; u < UNITS; i += step, u += step * units) {
        ktw_tile(u, m0, n0, bz);
        float acc[MT][MMA_N / 8][4];
        #pragma unroll
        for (int mt = 0; mt < MT; mt++)
            #pragma unroll
            for (int j = 0; j < MMA_N / 8; j++)
                #pragma unroll
                for (int r = 0; r < 4; r++)
                    acc[mt][j][r] = 0.0f;
        for (int kt = 0; kt < KTILES_PER_SLICE; kt++, it++) {
            const int st = it % STAGES;
            kt_mbar_wait(&full[st], (it / STAGES) & 1); /* k tile it has landed */
            const unsigned long long da = da0 + st * (A_STAGE / 8), db = db0 + st * (B_STAGE / 8);
            kt_wgmma_fence();
            #pragma unroll
            for (int ks = 0; ks < BK / 16; ks++)
                #pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    kt_wgmma_bf16_ss<MMA_N, TRANS_B, TRANS_A>(acc[mt], da + mt * 512 + ks * A_KSTEP, db + ks * B_KSTEP, 1);
            kt_wgmma_commit();
            /* k tile it's wgmmas stay in flight; it - 1's have retired, so its stage goes back to the producer */
            kt_wgmma_wait<1>();
            if (kt > 0 && lane == 0)
                kt_mbar_arrive(&empty[(it - 1) % STAGES]);
        }
        kt_wgmma_wait<0>();
        if (lane == 0) /* the tile's last stage */
            kt_mbar_arrive(&empty[(it - 1) % STAGES]);
        #pragma unroll
        for (int mt = 0; mt < MT; mt++)
            kt_reg_hold(acc[mt]); /* the sums are read after the wait, not before */
        /* Cluster split-K: each slice's partial tile into its shared memory (register order, a float4 per
         * (mt, j) and thread), handed to the cluster on the ready barriers; slice r then sums the pieces
         * (mt, j) with (mt * BN / 8 + j) % SPLITK == r over slices 0, 1, ... in order (deterministic),
         * reading the others' shared memory, and runs the epilogue on them; the freed barriers tell a slice
         * that every slice has read its partial, so the next tile's may overwrite it. */
        float4 *const mine = red + cw * (MT * BN / 8 * 128) + (tid & 127);
        if (done > 0)
            kt_mbar_wait_cluster(freed, (done - 1) & 1);
        #pragma unroll
        for (int mt = 0; mt < MT; mt++)
            #pragma unroll
            for (int j = 0; j < BN / 8; j++)
                mine[(mt * (BN / 8) + j) * 128] = make_float4(acc[mt][j][0], acc[mt][j][1], acc[mt][j][2], acc[mt][j][3]);
        kt_fence_cluster();
        kt_bar_sync(3 + cw, 128);
        if ((tid & 127) == 0)
            for (int r = 0; r < SPLITK; r++)
                kt_mbar_arrive_cluster_release(ready, r);
        kt_mbar_wait_cluster(ready, done & 1);
        /* this slice's pieces p = q * SPLITK + rank, every slice's copy of each loaded before any is
         * summed, so the remote reads are in flight together (their latency once, not per read) */
        enum : int { SHARE = MT * (BN / 8) / SPLITK };
        float4 part[SHARE][SPLITK];
        #pragma unroll
        for (int q = 0; q < SHARE; q++)
            #pragma unroll
            for (int r = 0; r < SPLITK; r++)
                part[q][r] = kt_ld_cluster4(kt_cluster_addr(mine + (q * SPLITK + rank) * 128, r));
        /* piece p: acc[mt][j] with mt = p / (BN / 8), j = p % (BN / 8); its [r] rows 64 mt + 16 warp + g + 8 (r >> 1),
         * column 8 j + 2 t + (r & 1) of the consumer's rows */
        #pragma unroll
        for (int q = 0; q < SHARE; q++) {
            float4 sum = part[q][0];
            #pragma unroll
            for (int r = 1; r < SPLITK; r++) {
                sum.x += part[q][r].x;
                sum.y += part[q][r].y;
                sum.z += part[q][r].z;
                sum.w += part[q][r].w;
            }
            const int p = q * SPLITK + rank, mt = p / (BN / 8), j = p % (BN / 8);
            const int m = m0 + row0 + 64 * mt + 16 * warp + g, n = n0 + 8 * j + 2 * t;
            ktg_store2(t2_bias, t5_Y, bz, m, n, sum.x, sum.y);
            ktg_store2(t2_bias, t5_Y, bz, m + 8, n, sum.z, sum.w);
        }
        kt_fence_cluster();
        kt_bar_sync(3 + cw, 128);
        if ((tid & 127) == 0)
            for (int r = 0; r < SPLITK; r++)
                kt_mbar_arrive_cluster_release(freed, r);
        done++;
    }
    if (done > 0) /* the others have read this block's last partial before it exits */
        kt_mbar_wait_cluster(freed, (done - 1) & 1);
}
