/*
 * ktune kernel — family attention
 * schedule: attention bq=128 bkv=128 warps=8 stages=2 math=f16 smem=swizzle q=smem exp=exp2 mma=wgmma
 * graph: causal_attention
 *   O = attention(Q, K, V)  f16 [B=4, H=48, S=2048, 64]
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
/* ---- attention helpers: shared addresses, cp.async, ldmatrix, mma.sync ---- */
#define KT_NEG_INF (-__int_as_float(0x7f800000))
/* 2^x on the MUFU unit alone: exp2f adds a denormal-range fixup around it (three more
   instructions per score); P is rounded to 16 bits, where such values are zero anyway. */
__device__ __forceinline__ float kt_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ unsigned kt_smem_u32(const void *p)
{
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
/* 16-byte asynchronous copy; an invalid source reads nothing and zero-fills. */
__device__ __forceinline__ void kt_cp_async16(unsigned dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void kt_cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void kt_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void kt_ldmatrix_x4(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void kt_ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
/* c += a b: m16n8k16, f16 operands, fp32 accumulators. */
__device__ __forceinline__ void kt_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* Two floats to a packed f16 pair, lo in the low half (the order of mma fragments). */
__device__ __forceinline__ unsigned kt_pack(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
/* ---- wgmma helpers: tile layout, matrix descriptors, warpgroup fences ---- */
/* Element offset of (row, col) in a ROWS-row tile laid out as the hardware's 128-byte
   swizzle: 64-column blocks of ROWS rows of 128 bytes, the 16-byte chunk index XORed with
   row % 8 (the tile starts 1024-byte aligned, so this is address bits 4-6 ^= bits 7-9). */
template <int ROWS> __device__ __forceinline__ int kt_woff(int row, int col)
{
    return ((col >> 6) * ROWS + row) * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}
/* Descriptor of a K-major operand in such a tile: 128-byte swizzle (mode 1, bits 62-63), 8-row
   groups 1024 bytes apart (stride offset, bits 32-45); the leading offset is unused when a
   k16 step stays inside one 128-byte row (conventionally 1). */
__device__ __forceinline__ unsigned long long kt_desc_k(const void *p)
{
    return (unsigned long long)((kt_smem_u32(p) & 0x3FFFF) >> 4) | 1ull << 16 |
           (1024ull >> 4) << 32 | 1ull << 62;
}
/* Descriptor of V as an N-major B operand (keys along K, 64 columns along N: one swizzle atom
   wide). A k16 step spans two 8-key groups 1024 bytes apart; both offset fields say 1024, as
   the other one (the stride between atoms along N) is never used at N = 64. */
__device__ __forceinline__ unsigned long long kt_desc_n(const void *p)
{
    return (unsigned long long)((kt_smem_u32(p) & 0x3FFFF) >> 4) | (1024ull >> 4) << 16 |
           (1024ull >> 4) << 32 | 1ull << 62;
}
/* Register writes are complete before wgmma reads them (accumulators, A fragments). */
__device__ __forceinline__ void kt_wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void kt_wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void kt_wg_wait_one()
{
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}
__device__ __forceinline__ void kt_wg_wait_all()
{
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* cp.async wrote the tiles through the generic proxy; wgmma reads them through the async
   proxy. */
__device__ __forceinline__ void kt_fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* After the wait: the accumulators are read only from here on (the compiler sees wgmma
   write them when it is issued, not when it completes). */
template <int N> __device__ __forceinline__ void kt_wg_hold(float (&d)[N][4])
{
#pragma unroll
    for (int j = 0; j < N; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+f"(d[j][e])::"memory");
}
__device__ __forceinline__ void kt_wgmma_qk(float (&d)[16][4], unsigned long long da, unsigned long long db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                    "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                    "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                    "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                    "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                    "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                    "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                    "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                    "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                    "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
                    "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
                    "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                    "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
                    "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
                    "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
                    "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void kt_wgmma_pv(float (&d)[8][4], const unsigned (&a)[4], unsigned long long db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                    "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                    "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                    "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                    "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                    "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                    "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
                    "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
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
    extern __shared__ __align__(16) unsigned char kt_smem[];
    /* tiles 1024-byte aligned: the swizzle is a function of the address */
    kt_f16 *sQ = reinterpret_cast<kt_f16 *>(kt_smem + ((1024u - (kt_smem_u32(kt_smem) & 1023u)) & 1023u));
    constexpr int NST = 2; /* ring buffers of K and of V */
    kt_f16 *sK = sQ + BQ * D; /* NST buffers of BKV x D */
    kt_f16 *sV = sK + NST * BKV * D; /* NST buffers of BKV x DV */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    const int g = lane >> 2, t4 = lane & 3; /* accumulator row group, column pair */
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ; /* longest tiles first */
    const int wq0 = q0 + warp * 16; /* this warp's first query */
    /* base descriptors: this warpgroup's Q rows, the first K and V buffers */
    const unsigned long long dq0 = kt_desc_k(sQ + wg * 64 * 64), dk0 = kt_desc_k(sK), dv0 = kt_desc_n(sV);
    const int bidx = blockIdx.y;
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
            kt_cp_async16(kt_smem_u32(sQ + kt_woff<128>(r, ch * 8)),
                          gQ + (size_t)(ok ? q0 + r : 0) * 64 + ch * 8, ok);
        }
    }
    /* K tile 0: 128 rows x 8 16-byte chunks, rows past 2048 zero-filled */
    #pragma unroll
    for (int it = 0; it < 4; it++) {
        const int c = it * 256 + tid;
        {
            const int r = c / 8, ch = c % 8;
            const bool ok = 0 + r < 2048;
            kt_cp_async16(kt_smem_u32(sK + kt_woff<128>(r, ch * 8)),
                          gK + (size_t)(ok ? 0 + r : 0) * 64 + ch * 8, ok);
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
            kt_cp_async16(kt_smem_u32(sV + kt_woff<128>(r, ch * 8)),
                          gV + (size_t)(ok ? 0 + r : 0) * 64 + ch * 8, ok);
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
                kt_cp_async16(kt_smem_u32(sK + BKV * D + kt_woff<128>(r, ch * 8)),
                              gK + (size_t)(ok ? BKV + r : 0) * 64 + ch * 8, ok);
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
        kt_wg_fence();
        #pragma unroll
        for (int ks = 0; ks < D / 16; ks++)
            kt_wgmma_qk(s[0], dq0 + (((ks >> 2) * BQ * 64 + (ks & 3) * 16) >> 3),
                        dk0 + ((0 + (ks >> 2) * BKV * 64 + (ks & 3) * 16) >> 3), ks > 0);
        kt_wg_commit();
        kt_wg_wait_all();
        kt_wg_hold(s[0]);
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
            pa[ks][0] = kt_pack(s[0][2 * ks][0], s[0][2 * ks][1]);
            pa[ks][1] = kt_pack(s[0][2 * ks][2], s[0][2 * ks][3]);
            pa[ks][2] = kt_pack(s[0][2 * ks + 1][0], s[0][2 * ks + 1][1]);
            pa[ks][3] = kt_pack(s[0][2 * ks + 1][2], s[0][2 * ks + 1][3]);
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
                    kt_cp_async16(kt_smem_u32((sK + (tile + 2) % NST * BKV * D) + kt_woff<128>(r, ch * 8)),
                                  gK + (size_t)(ok ? kv2 + r : 0) * 64 + ch * 8, ok);
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
                    kt_cp_async16(kt_smem_u32((sV + (tile + 1) % NST * BKV * DV) + kt_woff<128>(r, ch * 8)),
                                  gV + (size_t)(ok ? kv1 + r : 0) * 64 + ch * 8, ok);
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
            kt_wg_fence();
            #pragma unroll
            for (int ks = 0; ks < D / 16; ks++)
                kt_wgmma_qk(s[0], dq0 + (((ks >> 2) * BQ * 64 + (ks & 3) * 16) >> 3),
                            dk0 + (((tile + 1) % NST * BKV * D + (ks >> 2) * BKV * 64 + (ks & 3) * 16) >> 3), ks > 0);
            kt_wg_commit();
            /* O += P_tile V_tile, in flight during the softmax of S_tile+1 */
            #pragma unroll
            for (int ks = 0; ks < BKV / 16; ks++)
                kt_wgmma_pv(o[0], pa[ks], dv0 + ((voff + ks * 16 * 64) >> 3), 1);
            kt_wg_commit();
            kt_wg_wait_one(); /* S_tile+1 done; P V may still run */
            kt_wg_hold(s[0]);
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
            kt_wg_wait_all();
            kt_wg_hold(o[0]);
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
                pa[ks][0] = kt_pack(s[0][2 * ks][0], s[0][2 * ks][1]);
                pa[ks][1] = kt_pack(s[0][2 * ks][2], s[0][2 * ks][3]);
                pa[ks][2] = kt_pack(s[0][2 * ks + 1][0], s[0][2 * ks + 1][1]);
                pa[ks][3] = kt_pack(s[0][2 * ks + 1][2], s[0][2 * ks + 1][3]);
            }
        } else {
            /* the last tile: O += P V alone */
            kt_wg_fence();
            #pragma unroll
            for (int ks = 0; ks < BKV / 16; ks++)
                kt_wgmma_pv(o[0], pa[ks], dv0 + ((voff + ks * 16 * 64) >> 3), 1);
            kt_wg_commit();
            kt_wg_wait_all();
            kt_wg_hold(o[0]);
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
