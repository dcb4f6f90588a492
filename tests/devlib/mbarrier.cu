/* ktune/mbarrier.cuh on its own (sm_90; an sm_80 build compiles the header to nothing). */
#include "ktune/mbarrier.cuh"

extern "C" __global__ void devlib_mbarrier(float *out)
{
#if KT_SM90
    __shared__ __align__(8) unsigned long long bar[2];
    if (threadIdx.x == 0) {
        kt_mbar_init(&bar[0], blockDim.x);
        kt_mbar_init(&bar[1], 1);
        kt_mbar_fence_init();
    }
    __syncthreads();
    kt_mbar_arrive(&bar[0]);
    kt_mbar_wait(&bar[0], 0);
    if (threadIdx.x == 0)
        kt_mbar_arrive_expect_tx(&bar[1], 0);
    out[threadIdx.x] = kt_mbar_test(&bar[1], 0) ? 1.0f : 0.0f;
    /* the cluster form, to this block's own barrier (rank 0 of a one-block cluster) */
    __syncthreads();
    if (threadIdx.x == 0)
        kt_mbar_arrive_cluster(&bar[1], 0);
    /* the releasing form and the acquiring wait (phase 1 of bar[0]) */
    __syncthreads();
    kt_mbar_arrive_cluster_release(&bar[0], 0);
    kt_mbar_wait_cluster(&bar[0], 1);
#else
    out[threadIdx.x] = 0.0f;
#endif
}
