/* mbarrier (sm_90 forms): shared-memory barriers that count arrivals and transaction bytes,
 * the completion signal of TMA copies and of producer / consumer pipelines. A barrier is a
 * 64-bit word in shared memory; each completed phase flips its parity, which waiters name.
 * Compiled only where KT_SM90. */
#pragma once

#include "ktune/arch.cuh"

#if KT_SM90

/* One thread initialises the barrier for `count` arrivals per phase; fence it (kt_mbar_fence_init)
 * and synchronise the block before others use it. */
__device__ __forceinline__ void kt_mbar_init(unsigned long long *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(kt_smem_u32(bar)), "r"(count)
                 : "memory");
}
/* Makes initialised barriers visible to the async proxy and the cluster. */
__device__ __forceinline__ void kt_mbar_fence_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* Arrives once. */
__device__ __forceinline__ void kt_mbar_arrive(unsigned long long *bar)
{
    asm volatile(
        "{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(kt_smem_u32(bar))
        : "memory");
}
/* Arrives once on the barrier at bar's offset in the shared memory of cluster block `rank`
 * (this block's own rank included). The default .release.cta semantics: a .release.cluster
 * arrive fences every prior memory access at cluster scope (a MEMBAR; measured on the H100, a
 * 2-block multicast GEMM spent half its warp cycles there and ran 2.1x slower), and what it
 * orders here, the wgmma reads of a stage, is already complete (wgmma.wait_group). */
__device__ __forceinline__ void kt_mbar_arrive_cluster(unsigned long long *bar, unsigned rank)
{
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(remote)
                 : "r"(kt_smem_u32(bar)), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
/* kt_mbar_arrive_cluster with .release.cluster semantics: hands shared memory this block wrote
 * (fenced by its writers with kt_fence_cluster and gathered by a block barrier) to the blocks
 * that wait on the barrier with kt_mbar_wait_cluster and then read it. */
__device__ __forceinline__ void kt_mbar_arrive_cluster_release(unsigned long long *bar,
                                                               unsigned rank)
{
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(remote)
                 : "r"(kt_smem_u32(bar)), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote)
                 : "memory");
}
/* Arrives once and expects `bytes` more transaction bytes in this phase (a TMA copy's size). */
__device__ __forceinline__ void kt_mbar_arrive_expect_tx(unsigned long long *bar, unsigned bytes)
{
    asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(
                     kt_smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}
/* True once the phase of parity `parity` has completed (non-blocking). */
__device__ __forceinline__ bool kt_mbar_test(unsigned long long *bar, unsigned parity)
{
    unsigned done;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                 "selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(kt_smem_u32(bar)), "r"(parity)
                 : "memory");
    return done != 0;
}
/* Blocks until the phase of parity `parity` has completed. */
__device__ __forceinline__ void kt_mbar_wait(unsigned long long *bar, unsigned parity)
{
    while (!kt_mbar_test(bar, parity))
        ;
}

/* kt_mbar_wait with .acquire.cluster semantics: what other blocks of the cluster wrote before
 * their releasing arrivals (kt_mbar_arrive_cluster_release) is visible after it. */
__device__ __forceinline__ void kt_mbar_wait_cluster(unsigned long long *bar, unsigned parity)
{
    unsigned done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, "
                     "[%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(kt_smem_u32(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}

#endif /* KT_SM90 */
