/* ktune device library: architecture guards and the shared-memory address every wrapper uses.
 *
 * The library is a set of headers generated kernels include ("ktune/<family>.cuh"); each wraps
 * one PTX instruction (or one fixed sequence) per function, under one name and one signature.
 * Every header compiles on its own for sm_80 and sm_90a (tests/devlib/); the Hopper-only
 * families define their functions only where KT_SM90 (cluster, mbarrier, tma) or KT_SM90A
 * (wgmma, setmaxnreg) is 1, so an sm_80 build that includes them gets nothing rather than an error.
 * docs/decisions.md ("device library") says how records and NVRTC see these files. */
#pragma once

/* KT_SM90: 1 while compiling device code for sm_90 or later (clusters, mbarrier transaction
 * counts, TMA); KT_SM90A: 1 for sm_90a, whose "a" features wgmma and setmaxnreg need. Both 0 on
 * the host pass and for older targets. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KT_SM90 1
#else
#define KT_SM90 0
#endif
#if KT_SM90 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KT_SM90A 1
#else
#define KT_SM90A 0
#endif

/* The 32-bit shared-state-space address of a generic pointer into shared memory, the form
 * cp.async, ldmatrix, mbarrier and the wgmma descriptors take. Through the compiler's builtin,
 * not an asm block: NVVM sees the conversion, so a pointer derived from a __shared__ array
 * becomes 32-bit shared arithmetic (an opaque cvta.to.shared forces 64-bit generic addresses
 * first: sm_90a SASS of the conv mma golden 4% longer, of the gemm goldens 8-11%). */
__device__ __forceinline__ unsigned kt_smem_u32(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

/* The lane's index in its warp (%laneid). A volatile read: the compiler neither hoists nor
 * reuses it, so what is derived from it is recomputed where it is used instead of held in
 * registers (the tiled conv's loader relies on that). */
__device__ __forceinline__ unsigned kt_lane_id()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
    return r;
}
