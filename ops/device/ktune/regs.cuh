/* Register fences: empty asm statements that tell the compiler a value is read (pin) or
 * rewritten (hold) at this point. Asynchronous instructions (wgmma) read their register
 * operands and write their accumulators after issue, which the compiler cannot see: pin the
 * operands until the wait, hold the accumulators after it. No instruction is emitted. */
#pragma once

template <int R, int C> __device__ __forceinline__ void kt_reg_pin(const unsigned (&a)[R][C])
{
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < C; j++)
            asm volatile("" ::"r"(a[i][j]) : "memory");
}

template <int R, int C> __device__ __forceinline__ void kt_reg_hold(float (&d)[R][C])
{
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < C; j++)
            asm volatile("" : "+f"(d[i][j])::"memory");
}
