/* ktune/swizzle.cuh on its own. */
#include "ktune/swizzle.cuh"

extern "C" __global__ void devlib_swizzle(const float *g, float *out)
{
    extern __shared__ __align__(1024) float s[];
    const int r = threadIdx.x / 8, k = threadIdx.x % 8 * 4;
    s[kt_swizzle128_f32(r, k)] = g[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = s[kt_swizzle128_f32(k % 8, r)] + (float)kt_swizzle128_b16<64>(r, k) +
                       (float)kt_swizzle_rows_b16<128>(r, k);
}
