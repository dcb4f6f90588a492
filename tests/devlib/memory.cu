/* ktune/memory.cuh on its own: .cg loads and stores, read-only loads with prefetch and cache
 * policy (every width), acquire / release, the turn semaphore, shared stores by address. */
#include "ktune/arch.cuh"
#include "ktune/memory.cuh"

extern "C" __global__ void devlib_memory(float *ws, int *sem, float *out, const uint4 *ro)
{
    const int slice = blockIdx.x;
    if (slice > 0)
        kt_sem_wait(sem, slice);
    float4 v = kt_ld_cg4(ws + 4 * threadIdx.x);
    float s = kt_ld_cg(ws + threadIdx.x) + v.x + v.y + v.z + v.w;
    kt_st_cg(ws + threadIdx.x, s);
    kt_st_cg4(ws + 4 * threadIdx.x, s, v.y, v.z, v.w);
    const unsigned long long policy = kt_policy_evict_first();
    const uint4 a = kt_ld_nc_pf(ro + threadIdx.x), b = kt_ld_nc_stream(ro + threadIdx.x, policy);
    const uint2 c = kt_ld_nc_pf((const uint2 *)ro + threadIdx.x);
    const uint2 d = kt_ld_nc_stream((const uint2 *)ro + threadIdx.x, policy);
    const unsigned e = kt_ld_nc_pf((const unsigned *)ro + threadIdx.x) +
                       kt_ld_nc_stream((const unsigned *)ro + threadIdx.x, policy);
    const unsigned short f = kt_ld_nc_pf((const unsigned short *)ro + threadIdx.x) +
                             kt_ld_nc_stream((const unsigned short *)ro + threadIdx.x, policy);
    s += (float)(a.x + b.w + c.y + d.x + e + f);
    __shared__ __align__(8) float staged[2 * 256];
    kt_st_shared_f32x2(kt_smem_u32(staged + 2 * (threadIdx.x & 255)), s, s);
    kt_st_shared_u32(kt_smem_u32(staged + 2 * (threadIdx.x & 255)), __float_as_uint(s));
    __syncthreads();
    s += staged[(threadIdx.x + 1) & 511];
    out[threadIdx.x] = s + (float)kt_ld_acquire_gpu(sem);
    kt_sem_pass(sem, slice + 1);
    if (threadIdx.x == 1)
        kt_st_release_gpu(sem + 1, slice);
}
