/* Thread-block clusters and distributed shared memory (sm_90). A kernel declares its cluster
 * shape with __cluster_dims__; its blocks can then read each other's shared memory through
 * addresses mapped with kt_cluster_addr. Compiled only where KT_SM90. */
#pragma once

#include "ktune/arch.cuh"

#if KT_SM90

/* The cluster barrier, release / acquire: shared-memory writes before it are visible to the
 * cluster's blocks after it. Every thread of every block of the cluster calls it. */
__device__ __forceinline__ void kt_cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::
                     : "memory");
}
/* Orders this thread's prior memory accesses before its later ones at cluster scope (shared
 * memory another block of the cluster will read, or has read). */
__device__ __forceinline__ void kt_fence_cluster()
{
    asm volatile("fence.acq_rel.cluster;" ::: "memory");
}
/* This block's rank in its cluster. */
__device__ __forceinline__ unsigned kt_cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
/* The shared::cluster address of the variable p (in this block's shared memory) in block
 * rank's shared memory. */
__device__ __forceinline__ unsigned kt_cluster_addr(const void *p, unsigned rank)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p), r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}
__device__ __forceinline__ float kt_ld_cluster(unsigned addr)
{
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ float4 kt_ld_cluster4(unsigned addr)
{
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

#endif /* KT_SM90 */
