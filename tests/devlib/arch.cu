/* ktune/arch.cuh and ktune/regs.cuh on their own. */
#include "ktune/arch.cuh"
#include "ktune/regs.cuh"

extern "C" __global__ void devlib_arch(unsigned *out, float *f)
{
    __shared__ float s[64];
    s[threadIdx.x % 64] = f[threadIdx.x];
    float d[2][4];
    unsigned a[2][4];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) {
            d[i][j] = s[i * 4 + j];
            a[i][j] = __float_as_uint(d[i][j]);
        }
    kt_reg_pin(a);
    kt_reg_hold(d);
    out[threadIdx.x] =
        kt_smem_u32(s + threadIdx.x % 64) + KT_SM90 + 2 * KT_SM90A + a[1][3] + kt_lane_id();
    f[threadIdx.x] = d[1][2];
}

/* The test program defines KT_EXPECT_SM90A to what it compiles for: the guard must agree. */
#if defined(__CUDA_ARCH__) && defined(KT_EXPECT_SM90A) && KT_EXPECT_SM90A != KT_SM90A
#error "KT_SM90A disagrees with the target"
#endif
