/* ktune/math.cuh on its own: ex2.approx and the -inf constant. */
#include "ktune/math.cuh"

extern "C" __global__ void devlib_math(const float *x, float *out)
{
    const float v = x[threadIdx.x];
    out[threadIdx.x] = v == KT_NEG_INF ? 0.0f : kt_exp2(v);
}
