/* ktune/memory.cuh on its own: .cg loads and stores, acquire / release, the turn semaphore. */
#include "ktune/memory.cuh"

extern "C" __global__ void devlib_memory(float *ws, int *sem, float *out)
{
    const int slice = blockIdx.x;
    if (slice > 0)
        kt_sem_wait(sem, slice);
    float4 v = kt_ld_cg4(ws + 4 * threadIdx.x);
    float s = kt_ld_cg(ws + threadIdx.x) + v.x + v.y + v.z + v.w;
    kt_st_cg(ws + threadIdx.x, s);
    kt_st_cg4(ws + 4 * threadIdx.x, s, v.y, v.z, v.w);
    out[threadIdx.x] = s + (float)kt_ld_acquire_gpu(sem);
    kt_sem_pass(sem, slice + 1);
    if (threadIdx.x == 1)
        kt_st_release_gpu(sem + 1, slice);
}
