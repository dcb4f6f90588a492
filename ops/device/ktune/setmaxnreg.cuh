/* setmaxnreg (sm_90a): warp-specialised kernels move registers between warpgroups, producers
 * giving theirs up (dec) and consumers taking them (inc). N is a multiple of 8 in 24..256; every
 * warp of the warpgroup executes the same one. Compiled only where KT_SM90A. */
#pragma once

#include "ktune/arch.cuh"

#if KT_SM90A

template <int N> __device__ __forceinline__ void kt_setmaxnreg_inc()
{
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in 24..256");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void kt_setmaxnreg_dec()
{
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in 24..256");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

#endif /* KT_SM90A */
