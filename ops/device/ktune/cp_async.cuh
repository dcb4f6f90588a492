/* cp.async (sm_80): asynchronous global -> shared copies, their commit groups and waits.
 * The 4- and 8-byte copies go through L1 (.ca); the 16-byte one bypasses it (.cg). */
#pragma once

#include "ktune/arch.cuh"

/* Copies 4, 8 or 16 bytes from global src to shared dst asynchronously; the bytes past
 * src_bytes (0 or the full size) are zero-filled, so an out-of-bounds element costs a 0-byte
 * copy from any valid address. dst and src are aligned to the copy's size.
 * The 4-byte copy's wrapper takes dst as a 32-bit shared-state-space address (kt_smem_u32), the
 * instruction's own operand, for kernels that keep shared addresses in 32-bit registers (the
 * tiled conv precomputes them per lane); kt_cp_async4 is the pointer form over it. The _all
 * form copies all 4 bytes (no src-size operand, no zero fill). */
__device__ __forceinline__ void kt_cp_async4_u32(unsigned dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void kt_cp_async4_u32_all(unsigned dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void kt_cp_async4(void *dst, const void *src, int src_bytes)
{
    kt_cp_async4_u32(kt_smem_u32(dst), src, src_bytes);
}
__device__ __forceinline__ void kt_cp_async8(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(kt_smem_u32(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void kt_cp_async16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(kt_smem_u32(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}

/* kt_cp_async16 for data read in long runs (a stream of K and V rows): the L2 fetches 256-byte
 * blocks from DRAM for it instead of the 32-byte sectors asked for (as memory.cuh's
 * kt_ld_nc_pf). */
__device__ __forceinline__ void kt_cp_async16_pf(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(kt_smem_u32(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}

/* Closes the copies issued since the last commit into one group. */
__device__ __forceinline__ void kt_cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N committed groups are still in flight (the pipeline's younger stages). */
template <int N> __device__ __forceinline__ void kt_cp_async_wait()
{
    static_assert(N >= 0 && N <= 7, "cp.async.wait_group takes 0..7");
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
