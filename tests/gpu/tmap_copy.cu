/* The tensor-map test kernel (test_gpu_worker's "tensor maps", run as the meson test gpu_tmap;
 * compiled for sm_90a without a GPU by tests/unit/test_tmap.c).
 *
 * X [M, N] f16, ragged: neither M nor N is a multiple of the BR x BC box. The worker encodes
 * x_map over X (dims {N, M}, row stride N * 2 bytes, box {BC, BR}, no swizzle, zero fill); each
 * CTA owns BR rows and walks the row with one TMA 2-D tile copy per BC columns (one thread
 * issues it, an mbarrier completes it), then plain loads from shared memory and stores back:
 *   Y = 2 X            every element went through the copy (2x is exact in f16);
 *   S[r] = sum_c X[r, c] summed over whole boxes: the box columns past N must read as 0;
 *                      and S of each tile's first row also gets the sums of the box's rows past
 *                      M, which must be 0 too.
 * The sums run in a fixed order (one thread per row), so two runs agree bit for bit. */
#include "ktune/mbarrier.cuh"
#include "ktune/tma.cuh"

#define M       100
#define N       200
#define BR      16
#define BC      64
#define THREADS 128

__device__ __forceinline__ float f16_to_f32(unsigned short h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short f32_to_f16(float f)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

extern "C" __global__ void __launch_bounds__(THREADS)
    tmap_copy(const __grid_constant__ kt_tensor_map x_map, unsigned short *y, unsigned short *s)
{
#if KT_SM90
    __shared__ __align__(128) unsigned short tile[BR * BC];
    __shared__ __align__(8) unsigned long long bar;
    __shared__ float row_sum[BR];
    const int row0 = blockIdx.x * BR;
    if (threadIdx.x == 0) {
        kt_tma_prefetch_map(&x_map);
        kt_mbar_init(&bar, 1);
        kt_mbar_fence_init();
    }
    if (threadIdx.x < BR)
        row_sum[threadIdx.x] = 0.0f;
    __syncthreads();
    unsigned phase = 0;
    for (int c0 = 0; c0 < N; c0 += BC, phase ^= 1) {
        if (threadIdx.x == 0) {
            /* the whole box lands in shared memory, its out-of-bounds part filled */
            kt_mbar_arrive_expect_tx(&bar, sizeof(tile));
            kt_tma_load_2d(tile, &x_map, &bar, c0, row0);
        }
        kt_mbar_wait(&bar, phase);
        for (int i = threadIdx.x; i < BR * BC; i += THREADS) {
            int r = i / BC, c = i % BC;
            if (row0 + r < M && c0 + c < N)
                y[(row0 + r) * N + c0 + c] = f32_to_f16(2.0f * f16_to_f32(tile[i]));
        }
        if (threadIdx.x < BR) {
            float acc = 0.0f;
            for (int c = 0; c < BC; c++)
                acc += f16_to_f32(tile[threadIdx.x * BC + c]);
            row_sum[threadIdx.x] += acc;
        }
        __syncthreads(); /* every read of this tile is done before the next copy overwrites it */
    }
    if (threadIdx.x == 0)
        for (int r = 1; r < BR; r++)
            if (row0 + r >= M)
                row_sum[0] += row_sum[r]; /* rows past M: zeros, if the fill is right */
    __syncthreads();
    if (threadIdx.x < BR && row0 + (int)threadIdx.x < M)
        s[row0 + threadIdx.x] = f32_to_f16(row_sum[threadIdx.x]);
#endif
}
