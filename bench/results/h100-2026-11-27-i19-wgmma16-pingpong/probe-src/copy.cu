#include "ktune/mbarrier.cuh"
#include "ktune/tma.cuh"
extern "C" __global__ void copyk(const __grid_constant__ kt_tensor_map map, unsigned short *out, int b0, int b1)
{
    extern __shared__ unsigned char raw[];
    unsigned short *t = (unsigned short *)(((unsigned long long)raw + 1023) & ~1023ull);
    __shared__ unsigned long long bar;
    if (threadIdx.x == 0) { kt_mbar_init(&bar, 1); kt_mbar_fence_init(); }
    __syncthreads();
    if (threadIdx.x == 0) {
        kt_mbar_arrive_expect_tx(&bar, b0 * b1 * 2);
        kt_tma_load_2d(t, &map, &bar, 0, 0);
    }
    kt_mbar_wait(&bar, 0);
    for (int i = threadIdx.x; i < b0 * b1; i += blockDim.x) out[i] = t[i];
}
