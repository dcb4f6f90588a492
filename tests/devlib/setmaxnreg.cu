/* ktune/setmaxnreg.cuh on its own (sm_90a; other builds compile the header to nothing). */
#include "ktune/setmaxnreg.cuh"

extern "C" __global__ void __launch_bounds__(256, 1) devlib_setmaxnreg(float *out)
{
#if KT_SM90A
    if (threadIdx.x < 128)
        kt_setmaxnreg_dec<40>();
    else
        kt_setmaxnreg_inc<232>();
#endif
    out[threadIdx.x] = (float)threadIdx.x;
}
