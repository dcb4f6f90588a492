/* ktune/wgmma.cuh with ktune/swizzle.cuh: a tf32 k8 step of each width the GEMM uses, and the
 * f16 / bf16 k16 steps attention uses (both operands in shared memory; A in registers with an
 * N-major B) at both widths, and the GEMM's m64n256 steps with M-major and N-major operands
 * (sm_90a; other builds compile the header to nothing). */
#include "ktune/swizzle.cuh"
#include "ktune/wgmma.cuh"

extern "C" __global__ void __launch_bounds__(128) devlib_wgmma(const float *g, float *out)
{
#if KT_SM90A
    extern __shared__ __align__(1024) float b[]; /* 128 rows of 32 floats, 128-byte swizzle */
    for (int i = threadIdx.x; i < 128 * 32; i += 128)
        b[kt_swizzle128_f32(i / 32, i % 32)] = g[i];
    kt_fence_proxy_async();
    __syncthreads();
    const unsigned a[4] = {__float_as_uint(g[threadIdx.x]), 0u, 0u, 0u};
    const unsigned long long db = kt_wgmma_desc(b, 16, 1024, KT_WGMMA_SW128);
    float d64[8][4] = {}, d128[16][4] = {};
    kt_wgmma_fence();
    kt_wgmma_tf32_rs<64>(d64, a, db);
    kt_wgmma_tf32_rs<128>(d128, a, db + 2);
    kt_wgmma_commit();
    /* 16-bit operands: the same tile read as 64 x 64 halves, K-major and N-major */
    const unsigned long long dk = kt_wgmma_desc(b, 16, 1024, KT_WGMMA_SW128);
    const unsigned long long dn = kt_wgmma_desc(b, 1024, 1024, KT_WGMMA_SW128);
    kt_wgmma_fence();
    kt_wgmma_f16_ss<64, 0>(d64, dk, dk + 2, 0);
    kt_wgmma_bf16_ss<128, 0>(d128, dk, dk + 2, 1);
    kt_wgmma_f16_rs<64, 1>(d64, a, dn, 1);
    kt_wgmma_bf16_rs<128, 1>(d128, a, dn, threadIdx.x & 1);
    kt_wgmma_commit();
    /* m64n256: the GEMM's widest step, B N-major (64-column blocks 8192 bytes apart, the leading
     * offset) and A K-major or M-major */
    float d256[32][4] = {};
    const unsigned long long dw = kt_wgmma_desc(b, 8192, 1024, KT_WGMMA_SW128);
    kt_wgmma_fence();
    kt_wgmma_f16_ss<256, 1>(d256, dk, dw, 0);
    kt_wgmma_bf16_ss<256, 1, 1>(d256, dn, dw + 128, 1);
    kt_wgmma_f16_ss<64, 1, 1>(d64, dn, dn, 1);
    kt_wgmma_commit();
    kt_wgmma_wait<1>();
    kt_wgmma_wait<0>();
    kt_reg_hold(d256);
    kt_reg_hold(d64);
    kt_reg_hold(d128);
    float s = 0.0f;
    for (int j = 0; j < 8; j++)
        s += d64[j][0] + d128[2 * j][3] + d256[4 * j][1];
    out[threadIdx.x] = s;
#else
    out[threadIdx.x] = g[threadIdx.x];
#endif
}
