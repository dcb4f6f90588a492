/*
 * ktune kernel — family attention
 * schedule: attention bq=128 bkv=128 warps=8 stages=2 math=f16 smem=swizzle q=smem exp=exp2 mma=wgmma grid=tiles splits=1 pingpong=0
 * graph: causal_attention
 *   O = attention(Q, K, V)  f16 [B=4, H=48, S=2048, 64]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/cp_async.cuh"
#include "ktune/math.cuh"
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
/* ---- end of attention helpers ---- */

extern "C" __global__ void __launch_bounds__(256, 1)
ktune_attention_f16_wgmma_q128_kv128_w8_s2(
    const kt_f16 *__restrict__ in0, /* Q */
    const kt_f16 *__restrict__ in1, /* K */
    const kt_f16 *__restrict__ in2, /* V */
    kt_f16 *__restrict__ out0) /* O */
{
    constexpr int BQ = 128, BKV = 128, D = 64, DV = 64;
    constexpr int SQ = 2048, SKV = 2048;
    constexpr int MT = 1; /* a warp owns 16 of its warpgroup's 64 rows */
    /* scores are scaled by 0.180336878f (scale * log2(e): softmax in base 2) */
    constexpr float SCALE = 0.180336878f;
    extern __shared__ __align__(128) unsigned char kt_smem[];
    /* tiles 1024-byte aligned: the swizzle is a function of the address */
    kt_f16 *sQ = reinterpret_cast<kt_f16 *>(kt_smem + ((1024u - (kt_smem_u32(kt_smem) & 1023u)) & 1023u));
    constexpr int NST = 2; /* ring buffers of K and of V */
    kt_f16 *sK = sQ + BQ * D; /* NST buffers of BKV x D */
    kt_f16 *sV = sK + NST * BKV * D; /* NST buffers of BKV x DV */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    const int g = lane >> 2, t4 = lane & 3; /* accumulator row group, column pair */
    /* base descriptors: this warpgroup's Q rows, the first K and V buffers */
    const unsigned long long dq0 = kt_wgmma_desc(sQ + wg * 64 * 64, 16, 1024, KT_WGMMA_SW128),
                             dk0 = kt_wgmma_desc(sK, 16, 1024, KT_WGMMA_SW128),
                             dv0 = kt_wgmma_desc(sV, 1024, 1024, KT_WGMMA_SW128);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* longest tiles first */
    const int bidx = blockIdx.y;
    const int wq0 = q0 + warp * 16; /* this warp's first query */
    const kt_f16 *gQ = in0 + (size_t)bidx * SQ * D;
    const kt_f16 *gK = in1 + (size_t)bidx * SKV * D;
    const kt_f16 *gV = in2 + (size_t)bidx * SKV * DV;
    kt_f16 *gO = out0 + (size_t)bidx * SQ * DV;
    /* causal: keys past the block's last query are never needed */
    const int kv_end = min(SKV, min(q0 + BQ, SQ));
    const int n_tiles = (kv_end + BKV - 1) / BKV;

    /* Q tile: 128 rows x 8 16-byte chunks, rows past 2048 zero-filled */
    #pragma unroll
    for (int it = 0; it < 4; it++) {
        const int c = it * 256 + tid;
        {
            const int r = c / 8, ch = c % 8;
            const bool ok = q0 + r < 2048;
            kt_cp_async16(sQ + kt_swizzle128_b16<128>(r, ch * 8),
                          gQ + (size_t)(ok ? q0 + r : 0) * 64 + ch * 8, ok ? 16 : 0);
        }
    }
    /* K tile 0: 128 rows x 8 16-byte chunks, rows past 2048 zero-filled */
    #pragma unroll
    for (int it = 0; it < 4; it++) {
        const int c = it * 256 + tid;
        {
            const int r = c / 8, ch = c % 8;
            const bool ok = 0 + r < 2048;
            kt_cp_async16(sK + kt_swizzle128_b16<128>(r, ch * 8),
                          gK + (size_t)(ok ? 0 + r : 0) * 64 + ch * 8, ok ? 16 : 0);
        }
    }
    kt_cp_async_commit();
    /* V tile 0: 128 rows x 8 16-byte chunks, rows past 2048 zero-filled */
    #pragma unroll
    for (int it = 0; it < 4; it++) {
        const int c = it * 256 + tid;
        {
            const int r = c / 8, ch = c % 8;
            const bool ok = 0 + r < 2048;
            kt_cp_async16(sV + kt_swizzle128_b16<128>(r, ch * 8),
                          gV + (size_t)(ok ? 0 + r : 0) * 64 + ch * 8, ok ? 16 : 0);
        }
    }
    if (n_tiles > 1) {
        /* K tile 1: 128 rows x 8 16-byte chunks, rows past 2048 zero-filled */
        #pragma unroll
        for (int it = 0; it < 4; it++) {
            const int c = it * 256 + tid;
            {
                const int r = c / 8, ch = c % 8;
                const bool ok = BKV + r < 2048;
                kt_cp_async16(sK + BKV * D + kt_swizzle128_b16<128>(r, ch * 8),
                              gK + (size_t)(ok ? BKV + r : 0) * 64 + ch * 8, ok ? 16 : 0);
            }
        }
    }
    kt_cp_async_commit();

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

    /* S_0 and its softmax (every warpgroup needs key tile 0) */
    kt_cp_async_wait<1>(); /* Q and K_0 landed */
    kt_fence_proxy_async();
    __syncthreads();
    {
        const int kv0 = 0;
        kt_wgmma_fence();
        #pragma unroll
        for (int ks = 0; ks < D / 16; ks++)
            kt_wgmma_f16_ss<BKV, 0>(s[0], dq0 + (((ks >> 2) * BQ * 64 + (ks & 3) * 16) >> 3),
                                  dk0 + ((0 + (ks >> 2) * BKV * 64 + (ks & 3) * 16) >> 3),
                                  ks > 0);
        kt_wgmma_commit();
        kt_wgmma_wait<0>();
        kt_reg_hold(s[0]);
        /* mask keys after their query (causal) */
        if (kv0 + BKV - 1 > wq0) {
            #pragma unroll
            for (int i = 0; i < MT; i++)
                #pragma unroll
                for (int j = 0; j < BKV / 8; j++)
                    #pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int key = kv0 + j * 8 + 2 * t4 + (e & 1);
                        const int qi = wq0 + i * 16 + g + (e >> 1) * 8;
                        if (key > qi)
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

    /* Every warpgroup runs every step, also on tiles its causal mask hides (P = 0 there):
       a data-dependent wgmma group count would make ptxas serialize the MMAs. */
    for (int tile = 0; tile < n_tiles; tile++) {
        __syncthreads(); /* every warpgroup is done with K_tile and V_tile-1 */
        if (tile + 2 < n_tiles) {
            const int kv2 = (tile + 2) * BKV;
            /* K tile + 2: 128 rows x 8 16-byte chunks, rows past 2048 zero-filled */
            #pragma unroll
            for (int it = 0; it < 4; it++) {
                const int c = it * 256 + tid;
                {
                    const int r = c / 8, ch = c % 8;
                    const bool ok = kv2 + r < 2048;
                    kt_cp_async16((sK + (tile + 2) % NST * BKV * D) + kt_swizzle128_b16<128>(r, ch * 8),
                                  gK + (size_t)(ok ? kv2 + r : 0) * 64 + ch * 8, ok ? 16 : 0);
                }
            }
        }
        if (tile + 1 < n_tiles) {
            const int kv1 = (tile + 1) * BKV;
            /* V tile + 1: 128 rows x 8 16-byte chunks, rows past 2048 zero-filled */
            #pragma unroll
            for (int it = 0; it < 4; it++) {
                const int c = it * 256 + tid;
                {
                    const int r = c / 8, ch = c % 8;
                    const bool ok = kv1 + r < 2048;
                    kt_cp_async16((sV + (tile + 1) % NST * BKV * DV) + kt_swizzle128_b16<128>(r, ch * 8),
                                  gV + (size_t)(ok ? kv1 + r : 0) * 64 + ch * 8, ok ? 16 : 0);
                }
            }
        }
        kt_cp_async_commit();
        kt_cp_async_wait<1>(); /* V_tile and K_tile+1 landed */
        kt_fence_proxy_async();
        __syncthreads();
        const int voff = tile % NST * BKV * DV; /* V_tile's buffer */
        if (tile + 1 < n_tiles) {
            const int kv0 = (tile + 1) * BKV; /* the keys of S_tile+1 */
            kt_wgmma_fence();
            #pragma unroll
            for (int ks = 0; ks < D / 16; ks++)
                kt_wgmma_f16_ss<BKV, 0>(s[0], dq0 + (((ks >> 2) * BQ * 64 + (ks & 3) * 16) >> 3),
                                      dk0 + (((tile + 1) % NST * BKV * D + (ks >> 2) * BKV * 64 + (ks & 3) * 16) >> 3),
                                      ks > 0);
            kt_wgmma_commit();
            /* O += P_tile V_tile, in flight during the softmax of S_tile+1 */
            #pragma unroll
            for (int ks = 0; ks < BKV / 16; ks++)
                kt_wgmma_f16_rs<DV, 1>(o[0], pa[ks], dv0 + ((voff + ks * 16 * 64) >> 3), 1);
            kt_wgmma_commit();
            kt_wgmma_wait<1>(); /* S_tile+1 done; P V may still run */
            kt_reg_hold(s[0]);
            /* mask keys after their query (causal) */
            if (kv0 + BKV - 1 > wq0) {
                #pragma unroll
                for (int i = 0; i < MT; i++)
                    #pragma unroll
                    for (int j = 0; j < BKV / 8; j++)
                        #pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int key = kv0 + j * 8 + 2 * t4 + (e & 1);
                            const int qi = wq0 + i * 16 + g + (e >> 1) * 8;
                            if (key > qi)
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
            /* the last tile: O += P V alone */
            kt_wgmma_fence();
            #pragma unroll
            for (int ks = 0; ks < BKV / 16; ks++)
                kt_wgmma_f16_rs<DV, 1>(o[0], pa[ks], dv0 + ((voff + ks * 16 * 64) >> 3), 1);
            kt_wgmma_commit();
            kt_wgmma_wait<0>();
            kt_reg_hold(o[0]);
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
