/* ktune/cluster.cuh on its own (sm_90; an sm_80 build compiles the header to nothing). */
#include "ktune/cluster.cuh"

#if KT_SM90
extern "C" __global__ void __cluster_dims__(2, 1, 1) devlib_cluster(float *out)
{
    __shared__ __align__(16) float part[4 * 128];
    for (int i = 0; i < 4; i++)
        part[4 * threadIdx.x + i] = (float)(threadIdx.x + i);
    kt_cluster_sync();
    const unsigned other = kt_cluster_rank() ^ 1u;
    const float4 v = kt_ld_cluster4(kt_cluster_addr(part + 4 * threadIdx.x, other));
    const float w = kt_ld_cluster(kt_cluster_addr(part + threadIdx.x, other));
    kt_fence_cluster();
    kt_cluster_sync();
    out[blockIdx.x * 128 + threadIdx.x] = v.x + v.y + v.z + v.w + w;
}
#else
extern "C" __global__ void devlib_cluster(float *out)
{
    out[0] = 0.0f;
}
#endif
