/* Shared-memory layouts against bank conflicts, as index functions (element offsets).
 * Swizzles permute 16-byte chunks within a row by XOR with a row-derived value, so the 8 rows
 * a warp's ldmatrix or column read touches hit 8 different bank groups. */
#pragma once

/* Float offset of (row, k) in a tile of 128-byte rows (32 floats) in the hardware's 128-byte
 * swizzle (wgmma and TMA SWIZZLE_128B): the 16-byte chunk index XORed with row % 8. The tile
 * starts 1024-byte aligned. */
__device__ __forceinline__ int kt_swizzle128_f32(int row, int k)
{
    return row * 32 + ((((k >> 2) ^ row) & 7) << 2) + (k & 3);
}

/* Element offset of (row, col) of 16-bit elements in a ROWS-row tile laid out in the 128-byte
 * swizzle: 64-column blocks of ROWS rows of 128 bytes each, the 16-byte chunk index XORed with
 * row % 8 (the tile starts 1024-byte aligned, so address bits 4-6 ^= bits 7-9). */
template <int ROWS> __device__ __forceinline__ int kt_swizzle128_b16(int row, int col)
{
    return ((col >> 6) * ROWS + row) * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

/* Element offset of (row, col) of 16-bit elements in a row-major tile of STRIDE-element rows (a
 * multiple of 64), the 16-byte chunk index XORed with row % 8: the 8 rows an ldmatrix reads at
 * one column land in 8 different bank groups without padding. */
template <int STRIDE> __device__ __forceinline__ int kt_swizzle_rows_b16(int row, int col)
{
    return row * STRIDE + ((((col >> 3) ^ (row & 7)) << 3) | (col & 7));
}
