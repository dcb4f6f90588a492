/* Global-memory accesses with explicit cache and ordering semantics: L1-bypassing (.cg) loads
 * and stores for data another SM wrote, read-only loads with L2 prefetch and cache-policy
 * hints, acquire/release flags, and a spin-wait turn semaphore built on them; and shared-memory
 * stores by 32-bit address. */
#pragma once

__device__ __forceinline__ float kt_ld_cg(const float *p)
{
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ float4 kt_ld_cg4(const float *p)
{
    float4 v;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}
__device__ __forceinline__ void kt_st_cg(float *p, float v)
{
    asm volatile("st.global.cg.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}
__device__ __forceinline__ void kt_st_cg4(float *p, float x, float y, float z, float w)
{
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(x), "f"(y), "f"(z),
                 "f"(w)
                 : "memory");
}

/* Read-only (non-coherent) loads of 2, 4, 8 or 16 bytes (one overload per width) with a
 * 256-byte L2 prefetch, for data nothing writes while the kernel runs. */
__device__ __forceinline__ unsigned short kt_ld_nc_pf(const unsigned short *p)
{
    unsigned short v;
    asm("ld.global.nc.L2::256B.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ unsigned kt_ld_nc_pf(const unsigned *p)
{
    unsigned v;
    asm("ld.global.nc.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 kt_ld_nc_pf(const uint2 *p)
{
    uint2 v;
    asm("ld.global.nc.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 kt_ld_nc_pf(const uint4 *p)
{
    uint4 v;
    asm("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

/* An L2 cache policy under which the lines a load brings in are evicted first (all of them):
 * for kt_ld_nc_stream's data, read once. */
__device__ __forceinline__ unsigned long long kt_policy_evict_first()
{
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

/* kt_ld_nc_pf's loads for data read exactly once: no L1 allocation, the L2 cache policy
 * `policy` (kt_policy_evict_first), a 256-byte L2 prefetch. */
__device__ __forceinline__ unsigned short kt_ld_nc_stream(const unsigned short *p,
                                                          unsigned long long policy)
{
    unsigned short v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.u16 %0, [%1], %2;"
        : "=h"(v)
        : "l"(p), "l"(policy));
    return v;
}
__device__ __forceinline__ unsigned kt_ld_nc_stream(const unsigned *p, unsigned long long policy)
{
    unsigned v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.u32 %0, [%1], %2;"
        : "=r"(v)
        : "l"(p), "l"(policy));
    return v;
}
__device__ __forceinline__ uint2 kt_ld_nc_stream(const uint2 *p, unsigned long long policy)
{
    uint2 v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v2.u32 {%0, %1}, [%2], %3;"
        : "=r"(v.x), "=r"(v.y)
        : "l"(p), "l"(policy));
    return v;
}
__device__ __forceinline__ uint4 kt_ld_nc_stream(const uint4 *p, unsigned long long policy)
{
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(policy));
    return v;
}

/* A GPU-scope acquire load and release store of a 32-bit flag. */
__device__ __forceinline__ int kt_ld_acquire_gpu(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void kt_st_release_gpu(int *p, int v)
{
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* Returns once the flag reads v, polling with acquire loads 64 ns apart: one thread calls it,
 * and a barrier after it hands the acquire on to the others. */
__device__ __forceinline__ void kt_spin_until(const int *flag, int v)
{
    for (;;) {
        if (kt_ld_acquire_gpu(flag) == v)
            break;
        asm volatile("nanosleep.u32 64;" ::: "memory");
    }
}

/* Blocks until the semaphore reads `turn`: thread 0 polls (kt_spin_until), the barrier holds
 * the block's other threads. Every thread of the block calls it. */
__device__ __forceinline__ void kt_sem_wait(const int *sem, int turn)
{
    if (threadIdx.x == 0)
        kt_spin_until(sem, turn);
    __syncthreads();
}

/* Sets the semaphore to `turn` once every thread's stores are visible device-wide. Every
 * thread of the block calls it. */
__device__ __forceinline__ void kt_sem_pass(int *sem, int turn)
{
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        kt_st_release_gpu(sem, turn);
}

/* Stores to shared memory at a 32-bit shared address (kt_smem_u32): one register per address
 * instead of a 64-bit generic pointer's two (with 128 fp32 sums live, generic pointers tipped
 * ptxas into spills in the 16-bit GEMM's staged epilogue). No memory clobber: other memory
 * accesses may move around them; a later fence or barrier (asm with a clobber) orders them. */
__device__ __forceinline__ void kt_st_shared_u32(unsigned addr, unsigned v)
{
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v));
}
__device__ __forceinline__ void kt_st_shared_f32x2(unsigned addr, float x, float y)
{
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(x), "f"(y));
}
