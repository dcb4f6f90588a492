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

#endif /* KT_SM90 */
