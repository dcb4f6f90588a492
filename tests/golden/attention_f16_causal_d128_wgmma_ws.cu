/*
 * ktune kernel — family attention
 * schedule: attention bq=128 bkv=128 warps=8 stages=2 math=f16 smem=swizzle q=smem exp=exp2 mma=wgmma_ws grid=tiles splits=1 pingpong=0
 * graph: d128
 *   o = attention(q, k, v)  f16 [4, 333, 128]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/cp_async.cuh"
#include "ktune/math.cuh"
#include "ktune/mma.cuh"
#include "ktune/swizzle.cuh"
#include "ktune/wgmma.cuh"
#include "ktune/barrier.cuh"
#include "ktune/mbarrier.cuh"
#include "ktune/setmaxnreg.cuh"
#include "ktune/tma.cuh"
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
/* ---- end of attention helpers ---- */

extern "C" __global__ void __launch_bounds__(384, 1)
ktune_attention_f16_ws_q128_kv128_w8_s2(
    const __grid_constant__ kt_tensor_map tmap_q, const __grid_constant__ kt_tensor_map tmap_k, const __grid_constant__ kt_tensor_map tmap_v,
    const kt_f16 *__restrict__ in0, /* q */
    const kt_f16 *__restrict__ in1, /* k */
    const kt_f16 *__restrict__ in2, /* v */
    kt_f16 *__restrict__ out0) /* o */
{
    constexpr int BQ = 128, BKV = 128, D = 128, DV = 128;
    constexpr int SQ = 333, SKV = 333;
    constexpr int MT = 1; /* a warp owns 16 of its warpgroup's 64 rows */
    constexpr int CONSUMERS = 2; /* warpgroups computing, after the producer */
    constexpr int Q_TILES = 3, BATCH = 4, ITEMS = Q_TILES * BATCH; /* work items: a q tile of a batch entry */
    constexpr int CHUNK = 4; /* batch entries ordered together: their K and V stay in L2 */
    /* scores are scaled by 0.127517432f (scale * log2(e): softmax in base 2) */
    constexpr float SCALE = 0.127517432f;
    constexpr int NST = 2; /* ring buffers of K and of V */
    extern __shared__ __align__(128) unsigned char kt_smem[];
    /* tiles 1024-byte aligned (the swizzle is a function of the address), each 64-column block of rows x 128 bytes */
    kt_f16 *sQ = reinterpret_cast<kt_f16 *>(kt_smem + ((1024u - (kt_smem_u32(kt_smem) & 1023u)) & 1023u));
    kt_f16 *sK = sQ + BQ * D; /* NST buffers of BKV x D */
    kt_f16 *sV = sK + NST * BKV * D; /* NST buffers of BKV x DV */
    unsigned long long *q_full = reinterpret_cast<unsigned long long *>(sV + NST * BKV * DV), *q_empty = q_full + 1;
    unsigned long long *k_full = q_empty + 1, *k_empty = k_full + NST, *v_full = k_empty + NST, *v_empty = v_full + NST;
    const int tid = threadIdx.x, wg = tid >> 7;
    if (tid == 0) {
        kt_tma_prefetch_map(&tmap_q);
        kt_tma_prefetch_map(&tmap_k);
        kt_tma_prefetch_map(&tmap_v);
        /* full: the producer's arrive_expect_tx, the copies' bytes complete a phase; empty: lane 0 of every consumer warp */
        kt_mbar_init(q_full, 1);
        kt_mbar_init(q_empty, CONSUMERS * 4);
        for (int s = 0; s < NST; s++) {
            kt_mbar_init(&k_full[s], 1);
            kt_mbar_init(&v_full[s], 1);
            kt_mbar_init(&k_empty[s], CONSUMERS * 4);
            kt_mbar_init(&v_empty[s], CONSUMERS * 4);
        }
        kt_mbar_fence_init();
    }
    __syncthreads(); /* the only block barrier: the mbarriers are initialised */

    if (wg == 0) { /* the producer */
        kt_setmaxnreg_dec<24>(); /* 24 + 2 x 240 a thread of the 65536 */
        if (tid == 0) {
            int it = 0; /* ring position: tiles loaded so far */
            { /* grid=tiles: the block's one item */
                const int item = 0, w = blockIdx.x;
                const int c0 = w / (CHUNK * Q_TILES) * CHUNK, nc = min(CHUNK, BATCH - c0); /* the item's chunk: its first batch entry, their count */
                const int r = w - c0 * Q_TILES; /* the item's rank in the chunk */
                const int q0 = (Q_TILES - 1 - r / nc) * BQ, bidx = c0 + r % nc; /* longest first */
                const int kvidx = bidx; /* k and v have q's heads */
                /* causal: keys past the block's last query are never needed */
                const int kv_end = min(SKV, min(q0 + BQ, SQ));
                const int n_tiles = (kv_end + BKV - 1) / BKV;
                if (item > 0) /* the consumers are done with the last item's Q */
                    kt_mbar_wait(q_empty, (item - 1) & 1);
                kt_mbar_arrive_expect_tx(q_full, BQ * D * 2);
                for (int c = 0; c < D / 64; c++)
                    kt_tma_load_3d(sQ + c * BQ * 64, &tmap_q, q_full, c * 64, q0, bidx);
                for (int t = 0; t < n_tiles; t++, it++) {
                    const int st = it % NST, kv0 = t * BKV;
                    if (it >= NST) /* the tile NST back in the ring released by every consumer warp */
                        kt_mbar_wait(&k_empty[st], (it / NST + 1) & 1);
                    kt_mbar_arrive_expect_tx(&k_full[st], BKV * D * 2);
                    for (int c = 0; c < D / 64; c++)
                        kt_tma_load_3d((sK + st * BKV * D) + c * BKV * 64, &tmap_k, &k_full[st], c * 64, kv0, kvidx);
                    if (it >= NST)
                        kt_mbar_wait(&v_empty[st], (it / NST + 1) & 1);
                    kt_mbar_arrive_expect_tx(&v_full[st], BKV * DV * 2);
                    for (int c = 0; c < DV / 64; c++)
                        kt_tma_load_3d((sV + st * BKV * DV) + c * BKV * 64, &tmap_v, &v_full[st], c * 64, kv0, kvidx);
                }
            }
        }
        return;
    }
    kt_setmaxnreg_inc<240>();
    const int cw = wg - 1, warp = tid >> 5 & 3, lane = tid & 31; /* consumer, its warp */
    const int g = lane >> 2, t4 = lane & 3; /* accumulator row group, column pair */
    /* base descriptors: this warpgroup's Q rows, the first K and V buffers (V: N-major, its 64-column blocks BKV x 128 bytes apart) */
    const unsigned long long dq0 = kt_wgmma_desc(sQ + cw * 64 * 64, 16, 1024, KT_WGMMA_SW128),
                             dk0 = kt_wgmma_desc(sK, 16, 1024, KT_WGMMA_SW128),
                             dv0 = kt_wgmma_desc(sV, BKV * 128, 1024, KT_WGMMA_SW128);
    const int it0 = 0; /* ring position of the item's first tile */
    { /* grid=tiles: the block's one item */
        const int item = 0, w = blockIdx.x;
        const int c0 = w / (CHUNK * Q_TILES) * CHUNK, nc = min(CHUNK, BATCH - c0); /* the item's chunk: its first batch entry, their count */
        const int r = w - c0 * Q_TILES; /* the item's rank in the chunk */
        const int q0 = (Q_TILES - 1 - r / nc) * BQ, bidx = c0 + r % nc; /* longest first */
        const int wq0 = q0 + cw * 64 + warp * 16; /* this warp's first query */
        kt_f16 *gO = out0 + (size_t)bidx * SQ * DV;
        /* causal: keys past the block's last query are never needed */
        const int kv_end = min(SKV, min(q0 + BQ, SQ));
        const int n_tiles = (kv_end + BKV - 1) / BKV;
        /* causal: this warpgroup's key tiles end at its own last query */
        const int n_own = (min(SKV, min(q0 + cw * 64 + 64, SQ)) + BKV - 1) / BKV;
        float o[MT][DV / 8][4]; /* output accumulators, m16n8 C layout */
        float row_m[MT][2], row_l[MT][2]; /* rows g and g + 8 of each m tile */
        #pragma unroll
        for (int i = 0; i < MT; i++) {
            #pragma unroll
            for (int j = 0; j < DV / 8; j++)
                o[i][j][0] = o[i][j][1] = o[i][j][2] = o[i][j][3] = 0.0f;
            row_m[i][0] = row_m[i][1] = KT_NEG_INF;
            row_l[i][0] = row_l[i][1] = 0.0f;
        }
        float alpha_o[MT][2]; /* O's rescale, applied once P V has landed */
        float s[MT][BKV / 8][4]; /* scores: wgmma m64nBKV accumulators */
        unsigned pa[BKV / 16][4]; /* P of the tile whose P V is next */

        /* S_0 and its softmax */
        kt_mbar_wait(q_full, item & 1);
        kt_mbar_wait(&k_full[it0 % NST], it0 / NST & 1);
        {
            const int kv0 = 0;
            kt_wgmma_fence();
            #pragma unroll
            for (int ks = 0; ks < D / 16; ks++)
                kt_wgmma_f16_ss<BKV, 0>(s[0], dq0 + (((ks >> 2) * BQ * 64 + (ks & 3) * 16) >> 3),
                                      dk0 + ((it0 % NST * BKV * D + (ks >> 2) * BKV * 64 + (ks & 3) * 16) >> 3),
                                      ks > 0);
            kt_wgmma_commit();
            kt_wgmma_wait<0>();
            kt_reg_hold(s[0]);
            if (lane == 0)
                kt_mbar_arrive(&k_empty[it0 % NST]);
            /* mask keys past SKV and keys after their query (causal) */
            if (kv0 + BKV > SKV || kv0 + BKV - 1 > wq0) {
                #pragma unroll
                for (int i = 0; i < MT; i++)
                    #pragma unroll
                    for (int j = 0; j < BKV / 8; j++)
                        #pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int key = kv0 + j * 8 + 2 * t4 + (e & 1);
                            const int qi = wq0 + i * 16 + g + (e >> 1) * 8;
                            if (key >= SKV || key > qi)
                                s[i][j][e] = KT_NEG_INF;
                        }
            }
            /* online softmax: new row max (over the 4 lanes sharing a row; raw scores, row_m too), rescale, P = kt_exp2(S * SCALE - max) */
            #pragma unroll
            for (int i = 0; i < MT; i++) {
                #pragma unroll
                for (int h = 0; h < 2; h++) {
                    /* two independent chains (even and odd column tiles) halve the latency */
                    float mx = row_m[i][h], mx1 = KT_NEG_INF;
                    #pragma unroll
                    for (int j = 0; j < BKV / 8; j += 2) {
                        mx = kt_max(mx, kt_max(s[i][j][2 * h], s[i][j][2 * h + 1]));
                        mx1 = kt_max(mx1, kt_max(s[i][j + 1][2 * h], s[i][j + 1][2 * h + 1]));
                    }
                    mx = kt_max(mx, mx1);
                    mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    /* a row with every key masked so far keeps p = 0 and no NaN */
                    const float base = mx == KT_NEG_INF ? 0.0f : mx * SCALE;
                    const float alpha = kt_exp2(fmaf(row_m[i][h], SCALE, -base));
                    row_m[i][h] = mx;
                    float sum = 0.0f, sum1 = 0.0f;
                    #pragma unroll
                    for (int j = 0; j < BKV / 8; j++) {
                        s[i][j][2 * h] = kt_exp2(fmaf(s[i][j][2 * h], SCALE, -base));
                        s[i][j][2 * h + 1] = kt_exp2(fmaf(s[i][j][2 * h + 1], SCALE, -base));
                        if (j & 1)
                            sum1 += s[i][j][2 * h] + s[i][j][2 * h + 1];
                        else
                            sum += s[i][j][2 * h] + s[i][j][2 * h + 1];
                    }
                    sum += sum1;
                    /* per-lane partial sums; the 4 lanes of a row are added at the end */
                    row_l[i][h] = row_l[i][h] * alpha + sum;
                    alpha_o[i][h] = alpha;
                }
            }
            #pragma unroll
            for (int ks = 0; ks < BKV / 16; ks++) {
                pa[ks][0] = kt_pack_f16x2(s[0][2 * ks][0], s[0][2 * ks][1]);
                pa[ks][1] = kt_pack_f16x2(s[0][2 * ks][2], s[0][2 * ks][3]);
                pa[ks][2] = kt_pack_f16x2(s[0][2 * ks + 1][0], s[0][2 * ks + 1][1]);
                pa[ks][3] = kt_pack_f16x2(s[0][2 * ks + 1][2], s[0][2 * ks + 1][3]);
            }
        }

        for (int tile = 0; tile < n_own; tile++) {
            const int st = (it0 + tile) % NST, voff = st * BKV * DV; /* V_tile's buffer */
            if (tile + 1 < n_own) {
                const int st1 = (it0 + tile + 1) % NST;
                /* both waits before the wgmmas: a wait loop between them made ptxas fence the P V (C7519) */
                kt_mbar_wait(&k_full[st1], (it0 + tile + 1) / NST & 1);
                kt_mbar_wait(&v_full[st], (it0 + tile) / NST & 1);
                const int kv0 = (tile + 1) * BKV; /* the keys of S_tile+1 */
                kt_wgmma_fence();
                #pragma unroll
                for (int ks = 0; ks < D / 16; ks++)
                    kt_wgmma_f16_ss<BKV, 0>(s[0], dq0 + (((ks >> 2) * BQ * 64 + (ks & 3) * 16) >> 3),
                                          dk0 + ((st1 * BKV * D + (ks >> 2) * BKV * 64 + (ks & 3) * 16) >> 3),
                                          ks > 0);
                kt_wgmma_commit();
                /* O += P_tile V_tile, in flight during the softmax of S_tile+1 */
                #pragma unroll
                for (int ks = 0; ks < BKV / 16; ks++)
                    kt_wgmma_f16_rs<DV, 1>(o[0], pa[ks], dv0 + ((voff + ks * 16 * 64) >> 3), 1);
                kt_wgmma_commit();
                kt_wgmma_wait<1>(); /* S_tile+1 done; P V may still run */
                kt_reg_hold(s[0]);
                if (lane == 0)
                    kt_mbar_arrive(&k_empty[st1]);
                /* mask keys past SKV and keys after their query (causal) */
                if (kv0 + BKV > SKV || kv0 + BKV - 1 > wq0) {
                    #pragma unroll
                    for (int i = 0; i < MT; i++)
                        #pragma unroll
                        for (int j = 0; j < BKV / 8; j++)
                            #pragma unroll
                            for (int e = 0; e < 4; e++) {
                                const int key = kv0 + j * 8 + 2 * t4 + (e & 1);
                                const int qi = wq0 + i * 16 + g + (e >> 1) * 8;
                                if (key >= SKV || key > qi)
                                    s[i][j][e] = KT_NEG_INF;
                            }
                }
                /* online softmax: new row max (over the 4 lanes sharing a row; raw scores, row_m too), rescale, P = kt_exp2(S * SCALE - max) */
                #pragma unroll
                for (int i = 0; i < MT; i++) {
                    #pragma unroll
                    for (int h = 0; h < 2; h++) {
                        /* two independent chains (even and odd column tiles) halve the latency */
                        float mx = row_m[i][h], mx1 = KT_NEG_INF;
                        #pragma unroll
                        for (int j = 0; j < BKV / 8; j += 2) {
                            mx = kt_max(mx, kt_max(s[i][j][2 * h], s[i][j][2 * h + 1]));
                            mx1 = kt_max(mx1, kt_max(s[i][j + 1][2 * h], s[i][j + 1][2 * h + 1]));
                        }
                        mx = kt_max(mx, mx1);
                        mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                        mx = kt_max(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                        /* a row with every key masked so far keeps p = 0 and no NaN */
                        const float base = mx == KT_NEG_INF ? 0.0f : mx * SCALE;
                        const float alpha = kt_exp2(fmaf(row_m[i][h], SCALE, -base));
                        row_m[i][h] = mx;
                        float sum = 0.0f, sum1 = 0.0f;
                        #pragma unroll
                        for (int j = 0; j < BKV / 8; j++) {
                            s[i][j][2 * h] = kt_exp2(fmaf(s[i][j][2 * h], SCALE, -base));
                            s[i][j][2 * h + 1] = kt_exp2(fmaf(s[i][j][2 * h + 1], SCALE, -base));
                            if (j & 1)
                                sum1 += s[i][j][2 * h] + s[i][j][2 * h + 1];
                            else
                                sum += s[i][j][2 * h] + s[i][j][2 * h + 1];
                        }
                        sum += sum1;
                        /* per-lane partial sums; the 4 lanes of a row are added at the end */
                        row_l[i][h] = row_l[i][h] * alpha + sum;
                        alpha_o[i][h] = alpha;
                    }
                }
                kt_wgmma_wait<0>();
                kt_reg_hold(o[0]);
                if (lane == 0)
                    kt_mbar_arrive(&v_empty[st]);
                /* O joins S_tile+1's max; P_tile+1 is next */
                #pragma unroll
                for (int j = 0; j < DV / 8; j++) {
                    o[0][j][0] *= alpha_o[0][0];
                    o[0][j][1] *= alpha_o[0][0];
                    o[0][j][2] *= alpha_o[0][1];
                    o[0][j][3] *= alpha_o[0][1];
                }
                #pragma unroll
                for (int ks = 0; ks < BKV / 16; ks++) {
                    pa[ks][0] = kt_pack_f16x2(s[0][2 * ks][0], s[0][2 * ks][1]);
                    pa[ks][1] = kt_pack_f16x2(s[0][2 * ks][2], s[0][2 * ks][3]);
                    pa[ks][2] = kt_pack_f16x2(s[0][2 * ks + 1][0], s[0][2 * ks + 1][1]);
                    pa[ks][3] = kt_pack_f16x2(s[0][2 * ks + 1][2], s[0][2 * ks + 1][3]);
                }
            } else {
                /* the last tile: O += P V alone; Q is no longer read, the next item's may load */
                if (lane == 0)
                    kt_mbar_arrive(q_empty);
                kt_mbar_wait(&v_full[st], (it0 + tile) / NST & 1);
                kt_wgmma_fence();
                #pragma unroll
                for (int ks = 0; ks < BKV / 16; ks++)
                    kt_wgmma_f16_rs<DV, 1>(o[0], pa[ks], dv0 + ((voff + ks * 16 * 64) >> 3), 1);
                kt_wgmma_commit();
                kt_wgmma_wait<0>();
                kt_reg_hold(o[0]);
                if (lane == 0)
                    kt_mbar_arrive(&v_empty[st]);
            }
        }
        /* the item's tiles past this warpgroup's diagonal: released unread, each after it landed (an
         * arrival belongs to the buffer's current phase, so none may run ahead of the producer) */
        for (int tile = n_own; tile < n_tiles; tile++) {
            const int st = (it0 + tile) % NST, ph = (it0 + tile) / NST & 1;
            kt_mbar_wait(&k_full[st], ph);
            kt_mbar_wait(&v_full[st], ph);
            if (lane == 0) {
                kt_mbar_arrive(&k_empty[st]);
                kt_mbar_arrive(&v_empty[st]);
            }
        }


        /* O / l, the epilogue, and the store (rows past SQ are not written) */
        #pragma unroll
        for (int i = 0; i < MT; i++) {
            #pragma unroll
            for (int h = 0; h < 2; h++) {
                float l = row_l[i][h];
                l += __shfl_xor_sync(0xffffffffu, l, 1);
                l += __shfl_xor_sync(0xffffffffu, l, 2);
                const float inv = l > 0.0f ? 1.0f / l : 0.0f;
                const int row = wq0 + i * 16 + g + h * 8;
                if (row < SQ) {
                    #pragma unroll
                    for (int j = 0; j < DV / 8; j++) {
                        const int col = j * 8 + 2 * t4;
                        const float y0 = o[i][j][2 * h] * inv;
                        const float y1 = o[i][j][2 * h + 1] * inv;
                        *reinterpret_cast<unsigned *>(gO + row * DV + col) =
                            (unsigned)kt_f32_to_f16(y0) | ((unsigned)kt_f32_to_f16(y1) << 16);
                    }
                }
            }
        }
    }
}
