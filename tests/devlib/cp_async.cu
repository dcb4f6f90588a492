/* ktune/cp_async.cuh on its own: every copy size (the 4-byte copy also to a 32-bit shared address,
 * with and without zero fill), commit and wait. */
#include "ktune/cp_async.cuh"

extern "C" __global__ void devlib_cp_async(const float *g, float *out, int n)
{
    __shared__ __align__(16) float s[3][128];
    const int i = threadIdx.x;
    kt_cp_async4(&s[0][i], g + i, i < n ? 4 : 0);
    kt_cp_async4_u32(kt_smem_u32(&s[0][i]), g + i, i < n ? 4 : 0);
    kt_cp_async4_u32_all(kt_smem_u32(&s[0][i]), g + i);
    kt_cp_async8(&s[1][2 * (i % 64)], g + 2 * (i % 64), 8);
    kt_cp_async_commit();
    kt_cp_async16(&s[2][4 * (i % 32)], g + 4 * (i % 32), 16);
    kt_cp_async_commit();
    kt_cp_async_wait<1>();
    kt_cp_async_wait<0>();
    __syncthreads();
    out[i] = s[0][i] + s[1][i] + s[2][i];
}
