/* Named barriers: the CTA's 16 hardware barriers (0 is __syncthreads') used by a subset of its
 * threads, counted in whole warps. One side arrives without waiting, the other waits for it:
 * warp-specialised kernels order their warpgroups this way (the ping-pong GEMM hands the tensor
 * cores from one consumer warpgroup to the other). */
#pragma once

/* Waits until `threads` threads (this one included) have reached barrier `id`. */
__device__ __forceinline__ void kt_bar_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
/* Counts this thread towards barrier `id`'s `threads` without waiting for the others. */
__device__ __forceinline__ void kt_bar_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
