/* ktune/ldmatrix.cuh on its own: x1, x2, x4, plain and transposed. */
#include "ktune/ldmatrix.cuh"

extern "C" __global__ void devlib_ldmatrix(const unsigned short *g, unsigned *out)
{
    __shared__ __align__(16) unsigned short s[32 * 8];
    for (int i = threadIdx.x; i < 32 * 8; i += 32)
        s[i] = g[i];
    __syncthreads();
    const unsigned short *p = s + threadIdx.x * 8;
    unsigned r[12];
    kt_ldmatrix_x1(r[0], p);
    kt_ldmatrix_x2(r[1], r[2], p);
    kt_ldmatrix_x4(r[3], r[4], r[5], r[6], p);
    kt_ldmatrix_x2_trans(r[7], r[8], p);
    kt_ldmatrix_x4_trans(r[9], r[10], r[11], r[0], p);
    unsigned x = 0;
    for (int i = 0; i < 12; i++)
        x ^= r[i];
    out[threadIdx.x] = x;
}
