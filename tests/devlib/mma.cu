/* ktune/mma.cuh on its own: the three mma.sync shapes, the tf32 conversions and splits and the
 * 16-bit packing. */
#include "ktune/mma.cuh"

extern "C" __global__ void devlib_mma(const unsigned *g, const float *x, float *out)
{
    const int l = threadIdx.x;
    const unsigned a[4] = {g[l], g[l + 32], g[l + 64], g[l + 96]};
    unsigned b[2] = {g[l + 128], g[l + 160]};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    kt_mma_m16n8k16_f16(d, a, b);
    kt_mma_m16n8k16_bf16(d, a, b);
    unsigned big, small;
    kt_split_tf32(x[l], big, small);
    b[0] = kt_tf32(x[l + 32]);
    b[1] = big ^ small;
    unsigned big_r, small_r;
    kt_split_tf32_rna(x[l + 64], big_r, small_r);
    b[1] ^= big_r + small_r;
    kt_mma_m16n8k8_tf32(d, a, b);
    b[0] = kt_pack_f16x2(x[l], d[0]);
    b[1] = kt_pack_bf16x2(d[1], x[l + 32]);
    kt_mma_m16n8k16_bf16(d, a, b);
    out[l] = d[0] + d[1] + d[2] + d[3] + kt_tf32_trunc_rest(x[l]);
}
