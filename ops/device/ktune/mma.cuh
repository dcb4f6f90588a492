/* mma.sync (sm_80): warp-level tensor-core products with fp32 accumulators, and the tf32 and
 * 16-bit packing conversions that feed them. Fragments (PTX ISA; g = lane / 4, t = lane % 4):
 *   m16n8k16 (f16, bf16; two 16-bit elements a register, the lower k first):
 *     A 16x16: a0 (row g, k 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..)
 *     B 16x8:  b0 (k 2t..2t+1, col g), b1 (k 2t + 8.., col g)
 *   m16n8k8 (tf32, one element a register):
 *     A 16x8: a0 (row g, k t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
 *     B 8x8:  b0 (k t, col g), b1 (k t + 4, col g)
 *   C 16x8: c0, c1 (row g, cols 2t, 2t + 1), c2, c3 (row g + 8, same cols). */
#pragma once

#include "ktune/arch.cuh"

/* d += a * b, m16n8k16, f16 inputs. */
__device__ __forceinline__ void kt_mma_m16n8k16_f16(float (&d)[4], const unsigned (&a)[4],
                                                    const unsigned (&b)[2])
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* d += a * b, m16n8k16, bf16 inputs. */
__device__ __forceinline__ void kt_mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4],
                                                     const unsigned (&b)[2])
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* d += a * b, m16n8k8, tf32 inputs (the tensor cores read the top 19 bits of each register). */
__device__ __forceinline__ void kt_mma_m16n8k8_tf32(float (&d)[4], const unsigned (&a)[4],
                                                    const unsigned (&b)[2])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Two floats rounded (to nearest even) into one register of 16-bit halves, lo in the low half:
 * the order of mma fragments, which hold the lower k (or column) first. */
__device__ __forceinline__ unsigned kt_pack_f16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ unsigned kt_pack_bf16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* fp32 -> tf32 (round to nearest, ties away), kept in a 32-bit register. */
__device__ __forceinline__ unsigned kt_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

/* x = big + small for 3xTF32: big is x rounded to tf32 (low 13 bits clear), small the exact
 * fp32 remainder, which the tensor cores read as tf32 by dropping its low 13 bits (|small| <=
 * 2^-11 |x|, so that costs at most 2^-21 |x|). a * b ~ a.small * b.big + a.big * b.small +
 * a.big * b.big: the dropped a.small * b.small and the truncation of small are about 2^-21 of
 * |a * b|, near fp32's 2^-24, while every mma runs on the tf32 tensor cores. Two instructions. */
__device__ __forceinline__ void kt_split_tf32(float x, unsigned &big, unsigned &small)
{
    big = kt_tf32(x);
    small = __float_as_uint(x - __uint_as_float(big));
}

/* x = big + small + e for 3xTF32 with both halves rounded to tf32 (cvt.rna each): big the top
 * 11 significant bits, small = tf32(x - big) the next 11 (x - big is exact in fp32), so
 * |small| <= 2^-11 |x| and |e| <= 2^-22 |x|; each tf32 x tf32 product is exact. The conv
 * family's split; one cvt more than kt_split_tf32, which leaves small's rounding to the tensor
 * cores' truncation. */
__device__ __forceinline__ void kt_split_tf32_rna(float x, unsigned &big, unsigned &small)
{
    big = kt_tf32(x);
    small = kt_tf32(x - __uint_as_float(big));
}

/* x minus its top 19 bits (what the tensor cores read of x as tf32): 3xTF32's small half when
 * the big half is x itself, truncated by the hardware. */
__device__ __forceinline__ float kt_tf32_trunc_rest(float x)
{
    return x - __uint_as_float(__float_as_uint(x) & 0xffffe000u);
}
