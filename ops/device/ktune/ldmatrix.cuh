/* ldmatrix (sm_75+): 8x8 matrices of 16-bit elements from shared memory into the mma fragment
 * layout. In an .xN load, lanes 8j..8j+7 address the 8 rows of matrix j, which lands in r<j>.
 * Plain: lane l receives elements (l/4, 2(l%4)) and (l/4, 2(l%4)+1) of each matrix; .trans:
 * elements (2(l%4), l/4) and (2(l%4)+1, l/4). 32-bit data (tf32) is read with the plain form
 * as pairs of 16-bit halves: the lane then holds element (l/4, l%4) of an 8x4 fp32 matrix. */
#pragma once

#include "ktune/arch.cuh"

__device__ __forceinline__ void kt_ldmatrix_x1(unsigned &r0, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r0)
                 : "r"(kt_smem_u32(p)));
}
__device__ __forceinline__ void kt_ldmatrix_x2(unsigned &r0, unsigned &r1, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(kt_smem_u32(p)));
}
__device__ __forceinline__ void kt_ldmatrix_x4(unsigned &r0, unsigned &r1, unsigned &r2,
                                               unsigned &r3, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(kt_smem_u32(p)));
}
__device__ __forceinline__ void kt_ldmatrix_x2_trans(unsigned &r0, unsigned &r1, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(kt_smem_u32(p)));
}
__device__ __forceinline__ void kt_ldmatrix_x4_trans(unsigned &r0, unsigned &r1, unsigned &r2,
                                                     unsigned &r3, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(kt_smem_u32(p)));
}
