/* ktune/reduce.cuh on its own: warp sum and max, block sum. */
#include "ktune/reduce.cuh"

extern "C" __global__ void __launch_bounds__(256) devlib_reduce(const float *x, float *out)
{
    __shared__ float scratch[256 / 32];
    const float v = x[blockIdx.x * 256 + threadIdx.x];
    const float s = kt_block_sum<256>(v, scratch);
    if (threadIdx.x == 0)
        out[blockIdx.x] = s + kt_warp_max(v) + kt_warp_sum(v);
}
