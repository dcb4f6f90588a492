/* Global-memory accesses with explicit cache and ordering semantics: L1-bypassing (.cg) loads
 * and stores for data another SM wrote, acquire/release flags, and a spin-wait turn semaphore
 * built on them. */
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

/* Blocks until the semaphore reads `turn`: thread 0 polls with acquire loads (64 ns apart),
 * the barrier holds the block's other threads. Every thread of the block calls it. */
__device__ __forceinline__ void kt_sem_wait(const int *sem, int turn)
{
    if (threadIdx.x == 0) {
        for (;;) {
            if (kt_ld_acquire_gpu(sem) == turn)
                break;
            asm volatile("nanosleep.u32 64;" ::: "memory");
        }
    }
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
