/*
 * ktune kernel — family attention
 * schedule: attention bq=128 bkv=64 warps=8 stages=2 math=f16 smem=swizzle q=regs exp=exp2 mma=sync grid=tiles splits=1 pingpong=0
 * graph: causal_attention
 *   O = attention(Q, K, V)  f16 [B=4, H=48, S=2048, 64]
 */
/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */
#include "ktune/cp_async.cuh"
#include "ktune/math.cuh"
#include "ktune/ldmatrix.cuh"
#include "ktune/mma.cuh"
#include "ktune/swizzle.cuh"
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
/* Element offset of (row, col) in a shared tile of STRIDE-element rows: the 16-byte chunk index is XORed with row %% 8, so the 8 rows an ldmatrix reads land in distinct banks. */
template <int STRIDE> __device__ __forceinline__ int kt_off(int row, int col)
{
    return kt_swizzle_rows_b16<STRIDE>(row, col);
}
/* ---- end of attention helpers ---- */

extern "C" __global__ void __launch_bounds__(256, 1)
ktune_attention_f16_q128_kv64_w8_s2(
    const kt_f16 *__restrict__ in0, /* Q */
    const kt_f16 *__restrict__ in1, /* K */
    const kt_f16 *__restrict__ in2, /* V */
    kt_f16 *__restrict__ out0) /* O */
{
    constexpr int BQ = 128, BKV = 64, D = 64, DV = 64;
    constexpr int SQ = 2048, SKV = 2048;
    constexpr int QS = 64, KS = 64, VS = 64; /* shared row strides */
    constexpr int MT = 1; /* 16-row m tiles per warp */
    /* scores are scaled by 0.180336878f (scale * log2(e): softmax in base 2) */
    constexpr float SCALE = 0.180336878f;
    extern __shared__ __align__(128) unsigned char kt_smem[];
    kt_f16 *sQ = reinterpret_cast<kt_f16 *>(kt_smem);
    kt_f16 *sK = sQ + BQ * QS; /* 2 stages of BKV x KS */
    kt_f16 *sV = sK + 2 * BKV * KS;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3; /* mma fragment row group, column pair */
    const int lm = lane >> 3, lr = lane & 7; /* ldmatrix: matrix and row this lane addresses */
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* longest tiles first */
    const int bidx = blockIdx.y;
    const int wq0 = q0 + warp * MT * 16; /* this warp's first query */
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
            kt_cp_async16(sQ + kt_off<64>(r, ch * 8),
                          gQ + (size_t)(ok ? q0 + r : 0) * 64 + ch * 8, ok ? 16 : 0);
        }
    }
    /* K tile 0: 64 rows x 8 16-byte chunks, rows past 2048 zero-filled */
    #pragma unroll
    for (int it = 0; it < 2; it++) {
        const int c = it * 256 + tid;
        {
            const int r = c / 8, ch = c % 8;
            const bool ok = 0 + r < 2048;
            kt_cp_async16(sK + kt_off<64>(r, ch * 8),
                          gK + (size_t)(ok ? 0 + r : 0) * 64 + ch * 8, ok ? 16 : 0);
        }
    }
    /* V tile 0: 64 rows x 8 16-byte chunks, rows past 2048 zero-filled */
    #pragma unroll
    for (int it = 0; it < 2; it++) {
        const int c = it * 256 + tid;
        {
            const int r = c / 8, ch = c % 8;
            const bool ok = 0 + r < 2048;
            kt_cp_async16(sV + kt_off<64>(r, ch * 8),
                          gV + (size_t)(ok ? 0 + r : 0) * 64 + ch * 8, ok ? 16 : 0);
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
    unsigned qf[MT][D / 16][4]; /* Q as mma A fragments, loaded once */

    for (int tile = 0; tile < n_tiles; tile++) {
        const int kv0 = tile * BKV;
        const kt_f16 *cK = sK + (tile & 1) * BKV * KS;
        const kt_f16 *cV = sV + (tile & 1) * BKV * VS;
        if (tile + 1 < n_tiles) {
            /* prefetch the next tile into the other buffer */
            const int nkv0 = kv0 + BKV;
            kt_f16 *nK = sK + ((tile + 1) & 1) * BKV * KS;
            kt_f16 *nV = sV + ((tile + 1) & 1) * BKV * VS;
            /* next K: 64 rows x 8 16-byte chunks, rows past 2048 zero-filled */
            #pragma unroll
            for (int it = 0; it < 2; it++) {
                const int c = it * 256 + tid;
                {
                    const int r = c / 8, ch = c % 8;
                    const bool ok = nkv0 + r < 2048;
                    kt_cp_async16(nK + kt_off<64>(r, ch * 8),
                                  gK + (size_t)(ok ? nkv0 + r : 0) * 64 + ch * 8, ok ? 16 : 0);
                }
            }
            /* next V: 64 rows x 8 16-byte chunks, rows past 2048 zero-filled */
            #pragma unroll
            for (int it = 0; it < 2; it++) {
                const int c = it * 256 + tid;
                {
                    const int r = c / 8, ch = c % 8;
                    const bool ok = nkv0 + r < 2048;
                    kt_cp_async16(nV + kt_off<64>(r, ch * 8),
                                  gV + (size_t)(ok ? nkv0 + r : 0) * 64 + ch * 8, ok ? 16 : 0);
                }
            }
            kt_cp_async_commit();
            kt_cp_async_wait<1>(); /* this tile landed, the next is in flight */
        } else {
            kt_cp_async_wait<0>();
        }
        __syncthreads();
        if (tile == 0) {
            #pragma unroll
            for (int i = 0; i < MT; i++)
                #pragma unroll
                for (int ks = 0; ks < D / 16; ks++)
                    kt_ldmatrix_x4(qf[i][ks][0], qf[i][ks][1], qf[i][ks][2], qf[i][ks][3],
                                   sQ + kt_off<QS>(warp * MT * 16 + i * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
        }
        /* causal: a warp whose rows all precede the tile skips it */
        const bool active = kv0 <= wq0 + MT * 16 - 1;
        float s[MT][BKV / 8][4]; /* scores, mma C layout */
        if (active) {
            /* S = Q K^T */
            #pragma unroll
            for (int i = 0; i < MT; i++)
                #pragma unroll
                for (int j = 0; j < BKV / 8; j++)
                    s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;
            #pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                #pragma unroll
                for (int n16 = 0; n16 < BKV / 16; n16++) {
                    unsigned kb[2][2]; /* B fragments of key n-tiles 2 n16 and 2 n16 + 1 */
                    kt_ldmatrix_x4(kb[0][0], kb[0][1], kb[1][0], kb[1][1],
                                   cK + kt_off<KS>(n16 * 16 + (lm >> 1) * 8 + lr, ks * 16 + (lm & 1) * 8));
                    #pragma unroll
                    for (int i = 0; i < MT; i++) {
                        kt_mma_m16n8k16_f16(s[i][2 * n16], qf[i][ks], kb[0]);
                        kt_mma_m16n8k16_f16(s[i][2 * n16 + 1], qf[i][ks], kb[1]);
                    }
                }
            }
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
                    #pragma unroll
                    for (int j = 0; j < DV / 8; j++) {
                        o[i][j][2 * h] *= alpha;
                        o[i][j][2 * h + 1] *= alpha;
                    }
                }
            }
        }
        if (active) {
            /* O += P V: P repacked to f16 A fragments in registers */
            #pragma unroll
            for (int ks = 0; ks < BKV / 16; ks++) {
                unsigned pa[MT][4];
                #pragma unroll
                for (int i = 0; i < MT; i++) {
                    pa[i][0] = kt_pack_f16x2(s[i][2 * ks][0], s[i][2 * ks][1]);
                    pa[i][1] = kt_pack_f16x2(s[i][2 * ks][2], s[i][2 * ks][3]);
                    pa[i][2] = kt_pack_f16x2(s[i][2 * ks + 1][0], s[i][2 * ks + 1][1]);
                    pa[i][3] = kt_pack_f16x2(s[i][2 * ks + 1][2], s[i][2 * ks + 1][3]);
                }
                #pragma unroll
                for (int n16 = 0; n16 < DV / 16; n16++) {
                    unsigned vb[2][2]; /* B fragments of output n-tiles 2 n16 and 2 n16 + 1 */
                    kt_ldmatrix_x4_trans(vb[0][0], vb[0][1], vb[1][0], vb[1][1],
                                         cV + kt_off<VS>(ks * 16 + (lm & 1) * 8 + lr, n16 * 16 + (lm >> 1) * 8));
                    #pragma unroll
                    for (int i = 0; i < MT; i++) {
                        kt_mma_m16n8k16_f16(o[i][2 * n16], pa[i], vb[0]);
                        kt_mma_m16n8k16_f16(o[i][2 * n16 + 1], pa[i], vb[1]);
                    }
                }
            }
        }
        __syncthreads(); /* every warp is done with this tile's buffers */
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
