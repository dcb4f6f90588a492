/* ktune/tma.cuh with ktune/mbarrier.cuh (sm_90; an sm_80 build compiles the headers to nothing). */
#include "ktune/mbarrier.cuh"
#include "ktune/tma.cuh"
#include "ktune/wgmma.cuh" /* kt_fence_proxy_async (sm_90a) */

extern "C" __global__ void devlib_tma(const __grid_constant__ kt_tensor_map map,
                                      const __grid_constant__ kt_tensor_map map3, float *out)
{
#if KT_SM90
    __shared__ __align__(128) float tile[64 * 32];
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) {
        kt_tma_prefetch_map(&map);
        kt_mbar_init(&bar, 1);
        kt_mbar_fence_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        kt_mbar_arrive_expect_tx(&bar, sizeof(tile));
        kt_tma_load_2d(tile, &map, &bar, 0, (int)blockIdx.x * 64);
    }
    kt_mbar_wait(&bar, 0);
    out[threadIdx.x] = tile[threadIdx.x];
    __syncthreads();
    /* a 3-D box (matrix blockIdx.y of a batch) into the same tile, the barrier's second phase */
    if (threadIdx.x == 0) {
        kt_mbar_arrive_expect_tx(&bar, sizeof(tile));
        kt_tma_load_3d(tile, &map3, &bar, 0, (int)blockIdx.x * 64, (int)blockIdx.y);
    }
    kt_mbar_wait(&bar, 1);
    out[threadIdx.x] += tile[threadIdx.x];
    __syncthreads();
    /* the multicast forms, to this block alone (mask 1: rank 0 of a one-block cluster) */
    if (threadIdx.x == 0) {
        kt_mbar_arrive_expect_tx(&bar, sizeof(tile));
        kt_tma_load_2d_mc(tile, &map, &bar, 0, (int)blockIdx.x * 64, 1);
    }
    kt_mbar_wait(&bar, 0);
    out[threadIdx.x] += tile[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
        kt_mbar_arrive_expect_tx(&bar, sizeof(tile));
        kt_tma_load_3d_mc(tile, &map3, &bar, 0, (int)blockIdx.x * 64, (int)blockIdx.y, 1);
    }
    kt_mbar_wait(&bar, 1);
    out[threadIdx.x] += tile[threadIdx.x];
    /* the stores: the tile back through both maps, waited for before the block exits */
    tile[threadIdx.x] = out[threadIdx.x];
#if KT_SM90A
    kt_fence_proxy_async();
#endif
    __syncthreads();
    if (threadIdx.x == 0) {
        kt_tma_store_2d(&map, tile, 0, (int)blockIdx.x * 64);
        kt_tma_store_commit();
        kt_tma_store_wait_read<0>();
        kt_tma_store_3d(&map3, tile, 0, (int)blockIdx.x * 64, (int)blockIdx.y);
        kt_tma_store_commit();
        kt_tma_store_wait<0>();
    }
#else
    out[threadIdx.x] = (float)(map.opaque[0] + map3.opaque[0]);
#endif
}
