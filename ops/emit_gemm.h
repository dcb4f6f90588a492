/* Host-side copies of the index math the gemm emitter writes into its CUDA, exposed so the tests
 * can check them on the CPU (no GPU): tile rasterisation, shared-memory slots, ldmatrix lanes. */
#pragma once

/* Tile (tm, tn) computed by program pid with grouped rasterisation (group tile-rows per group). */
void ops_gemm_raster(int pid, int tiles_m, int tiles_n, int group, int *tm, int *tn);
/* Shared-memory element slot of (r, c) in a tile with `cols` columns of esize-byte elements,
 * padded by `pad` elements or XOR-swizzled, per layout. */
int ops_gemm_smem_slot(int layout, int cols, int esize, int pad, int r, int c);
/* The (row, col) a lane addresses in an ldmatrix of the given kind. */
void ops_gemm_ldsm_lane(int kind, int lane, int *row, int *col);
