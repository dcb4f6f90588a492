/* Warp and block reductions of fp32 by butterfly shuffles: every lane (thread) gets the result.
 * The max propagates NaN (a NaN in any lane wins), as PyTorch's max does. */
#pragma once

__device__ __forceinline__ float kt_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float kt_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = (v != v || v > w) ? v : w;
    }
    return v;
}

/* Sum over the block's THREADS threads (a multiple of 32); scratch holds THREADS / 32 floats of
 * shared memory. Contains barriers: every thread calls it. */
template <int THREADS> __device__ __forceinline__ float kt_block_sum(float v, float *scratch)
{
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps");
    v = kt_warp_sum(v);
    if (THREADS == 32)
        return v;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < THREADS / 32 ? scratch[lane] : 0.0f;
    v = kt_warp_sum(v);
    __syncthreads(); /* scratch may be reused */
    return v;
}
