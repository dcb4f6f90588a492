/* attention family: the shared-memory tile layout of the mma.sync path and the cp.async tile
 * loaders (16-byte copies of 16-bit data, 4-byte copies of f32 data), rows past the sequence
 * zero-filled (ops/attention/attention.h lists the files). */
#include "attention.h"

/* The tile layout of the mma.sync path, kt_off<STRIDE>(row, col), as an emitted function: rows
 * padded by 16 bytes, or the library's row swizzle. */
void attn_emit_layout_fn(kt_buf *b, int layout)
{
    kt_buf_line(b, "/* Element offset of (row, col) in a shared tile of STRIDE-element rows%s. */",
                layout == LAYOUT_SWIZZLE
                    ? ": the 16-byte chunk index is XORed with row %% 8, so the 8 rows an "
                      "ldmatrix reads land in distinct banks"
                    : " (padded by 16 bytes, so the 8 rows an ldmatrix reads land in distinct "
                      "banks)");
    kt_buf_line(b, "template <int STRIDE> __device__ __forceinline__ int kt_off(int row, int col)");
    kt_buf_line(b, "{");
    if (layout == LAYOUT_SWIZZLE)
        kt_buf_line(b, "    return kt_swizzle_rows_b16<STRIDE>(row, col);");
    else
        kt_buf_line(b, "    return row * STRIDE + col;");
    kt_buf_line(b, "}");
}

/* The loop every loader shares: the block's threads walk rows x per_row copies; inside it, r is
 * the tile row, `col` the copy's index in the row and ok whether row row0 + r exists. The
 * caller writes the copy, then closes the loop with load_close. */
static void load_open(kt_buf *b, const attn_geom *m, int rows, int per_row, const char *col,
                      const char *row0, long long n_valid, int max_unroll)
{
    int total = rows * per_row;
    int iters = (total + m->threads - 1) / m->threads;
    if (max_unroll)
        kt_buf_line(b, "#pragma unroll %d", iters < max_unroll ? iters : max_unroll);
    else
        kt_buf_line(b, "#pragma unroll");
    kt_buf_line(b, "for (int it = 0; it < %d; it++) {", iters);
    b->indent += 4;
    kt_buf_line(b, "const int c = it * %d + tid;", m->threads);
    if (total % m->threads != 0)
        kt_buf_line(b, "if (c < %d) {", total);
    else
        kt_buf_line(b, "{");
    b->indent += 4;
    kt_buf_line(b, "const int r = c / %d, %s = c %% %d;", per_row, col, per_row);
    kt_buf_line(b, "const bool ok = %s + r < %lld;", row0, n_valid);
}

static void load_close(kt_buf *b)
{
    b->indent -= 4;
    kt_buf_line(b, "}");
    b->indent -= 4;
    kt_buf_line(b, "}");
}

/* Emits the loop copying a ROWS x COLS 16-bit tile (rows from row0, valid below n_valid) into
 * shared memory with 16-byte cp.async; off<off_arg>(row, col) places an element. */
void attn_emit_tile_load(kt_buf *b, const attn_geom *m, const char *what, const char *dst,
                         const char *src, int rows, int cols, const char *off, int off_arg,
                         const char *row0, long long n_valid)
{
    int chunks = cols / 8;
    kt_buf_line(b, "/* %s: %d rows x %d 16-byte chunks, rows past %lld zero-filled */", what, rows,
                chunks, n_valid);
    load_open(b, m, rows, chunks, "ch", row0, n_valid, 0);
    kt_buf_line(b, "kt_cp_async16(%s + %s<%d>(r, ch * 8),", dst, off, off_arg);
    kt_buf_line(b, "              %s + (size_t)(ok ? %s + r : 0) * %d + ch * 8, ok ? 16 : 0);", src,
                row0, cols);
    load_close(b);
}

/* The mma.sync path's tiles: kt_off<row stride>. */
void attn_emit_mma_load(kt_buf *b, const attn_geom *m, const char *what, const char *dst,
                        const char *src, int rows, int cols, int stride, const char *row0,
                        long long n_valid)
{
    attn_emit_tile_load(b, m, what, dst, src, rows, cols, "kt_off", stride, row0, n_valid);
}

/* The ffma path's tile loads: 4-byte cp.async to dst[dst_index] (K transposed into K^T by
 * "col * KS + r"). */
void attn_emit_ffma_load(kt_buf *b, const attn_geom *m, const char *what, const char *dst,
                         const char *src, int rows, int cols, const char *row0, long long n_valid,
                         const char *dst_index)
{
    kt_buf_line(b, "/* %s: %d x %d floats, rows past %lld zero-filled */", what, rows, cols,
                n_valid);
    load_open(b, m, rows, cols, "col", row0, n_valid, 8);
    kt_buf_line(b, "kt_cp_async4(%s + %s, %s + (size_t)(ok ? %s + r : 0) * %d + col, ok ? 4 : 0);",
                dst, dst_index, src, row0, cols);
    load_close(b);
}
