/* TMA (sm_90): bulk tensor copies global -> shared (loads) and shared -> global (stores)
 * described by a tensor map (CUtensorMap, 128 bytes, built on the host with
 * cuTensorMapEncodeTiled and passed as a __grid_constant__ kernel parameter). One thread issues a
 * copy; a load signals an mbarrier with its byte count (kt_mbar_arrive_expect_tx before,
 * kt_mbar_wait after), stores complete in bulk groups. Compiled only where KT_SM90. */
#pragma once

#include "ktune/arch.cuh"

/* The tensor map as kernels see it: opaque, 64-byte aligned (cuda.h's CUtensorMap, which NVRTC
 * programs do not include). */
struct alignas(64) kt_tensor_map {
    unsigned long long opaque[16];
};

#if KT_SM90

/* Copies the 2-D box at coordinates (c0 innermost, c1) of the tensor `map` describes into
 * shared dst (aligned as the map's swizzle requires, 128 bytes at least), completing on bar. */
__device__ __forceinline__ void kt_tma_load_2d(void *dst, const kt_tensor_map *map,
                                               unsigned long long *bar, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];" ::"r"(kt_smem_u32(dst)),
                 "l"(map), "r"(kt_smem_u32(bar)), "r"(c0), "r"(c1)
                 : "memory");
}
/* The same for a 3-D box at (c0 innermost, c1, c2): a batch of matrices, c2 the batch index. */
__device__ __forceinline__ void kt_tma_load_3d(void *dst, const kt_tensor_map *map,
                                               unsigned long long *bar, int c0, int c1, int c2)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(kt_smem_u32(dst)),
                 "l"(map), "r"(kt_smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}
/* kt_tma_load_2d / _3d multicast: the box lands at dst's offset in the shared memory of every
 * block of the cluster whose rank is set in cta_mask, each completing on its own barrier at
 * bar's offset. Every receiving block's barrier must expect the bytes (its own arrive_expect_tx
 * may come before or after them: the phase waits for both). */
__device__ __forceinline__ void kt_tma_load_2d_mc(void *dst, const kt_tensor_map *map,
                                                  unsigned long long *bar, int c0, int c1,
                                                  unsigned short cta_mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(kt_smem_u32(dst)),
                 "l"(map), "r"(kt_smem_u32(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
                 : "memory");
}
__device__ __forceinline__ void kt_tma_load_3d_mc(void *dst, const kt_tensor_map *map,
                                                  unsigned long long *bar, int c0, int c1, int c2,
                                                  unsigned short cta_mask)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(kt_smem_u32(dst)),
                 "l"(map), "r"(kt_smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "h"(cta_mask)
                 : "memory");
}
/* Stores: the box at coordinates (c0 innermost, c1[, c2]) of `map`'s tensor from shared src
 * (laid out as the map's swizzle says), clipped at the tensor's edges. The writes to src must be
 * made visible to the async proxy first (kt_fence_proxy_async, then a barrier of the writing
 * threads); the issuing thread then commits the group (kt_tma_store_commit) and, before src is
 * written again or the block exits, waits for it (kt_tma_store_wait_read / kt_tma_store_wait). */
__device__ __forceinline__ void kt_tma_store_2d(const kt_tensor_map *map, const void *src, int c0,
                                                int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                     map),
                 "r"(kt_smem_u32(src)), "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void kt_tma_store_3d(const kt_tensor_map *map, const void *src, int c0,
                                                int c1, int c2)
{
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(map),
        "r"(kt_smem_u32(src)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}
/* Closes the group of the bulk stores this thread issued since the last commit. */
__device__ __forceinline__ void kt_tma_store_commit()
{
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
/* Waits until at most N of this thread's committed store groups still read shared memory. */
template <int N> __device__ __forceinline__ void kt_tma_store_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
/* Waits until at most N of this thread's committed store groups are still incomplete (their
 * writes to global memory done). */
template <int N> __device__ __forceinline__ void kt_tma_store_wait()
{
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
/* Starts fetching the tensor map into the descriptor cache. */
__device__ __forceinline__ void kt_tma_prefetch_map(const kt_tensor_map *map)
{
    asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

#endif /* KT_SM90 */
