/* Fast math on the special-function unit (MUFU) and the constants softmax-style kernels start
 * from. */
#pragma once

/* -inf as a float constant expression (no <math_constants.h> under NVRTC). */
#define KT_NEG_INF (-__int_as_float(0x7f800000))

/* 2^x on the MUFU unit alone (ex2.approx.ftz): exp2f adds a denormal-range fixup around it
 * (three more instructions a call); results in the denormal range flush to zero, which costs
 * nothing where they are rounded to 16 bits (softmax probabilities) or summed with larger ones. */
__device__ __forceinline__ float kt_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
