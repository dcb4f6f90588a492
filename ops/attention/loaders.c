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

/* Where operand op's tile comes from: its global base, the tile's rows and columns, the rows
 * that exist. */
static void operand_tile(const attn_info *a, const attn_geom *m, attn_operand op, const char **src,
                         int *rows, int *cols, long long *n_valid)
{
    *src = op == ATTN_Q ? "gQ" : op == ATTN_K ? "gK" : "gV";
    *rows = op == ATTN_Q ? m->bq : m->bkv;
    *cols = (int)(op == ATTN_V ? a->dv : a->d);
    *n_valid = (long long)(op == ATTN_Q ? a->sq : a->skv);
}

/* Emits the loop copying operand op's ROWS x COLS 16-bit tile (rows from row0) into shared
 * memory at dst with 16-byte cp.async; off<off_arg>(row, col) places an element. */
static void emit_tile_load(kt_buf *b, const attn_info *a, const attn_geom *m, attn_operand op,
                           const char *what, const char *dst, const char *row0, const char *off,
                           int off_arg)
{
    const char *src;
    int rows, cols;
    long long n_valid;
    operand_tile(a, m, op, &src, &rows, &cols, &n_valid);
    int chunks = cols / 8;
    kt_buf_line(b, "/* %s: %d rows x %d 16-byte chunks, rows past %lld zero-filled */", what, rows,
                chunks, n_valid);
    load_open(b, m, rows, chunks, "ch", row0, n_valid, 0);
    kt_buf_line(b, "kt_cp_async16(%s + %s<%d>(r, ch * 8),", dst, off, off_arg);
    kt_buf_line(b, "              %s + (size_t)(ok ? %s + r : 0) * %d + ch * 8, ok ? 16 : 0);", src,
                row0, cols);
    attn_emit_close(b, 2);
}

/* The mma.sync path's tiles: kt_off<the operand's row stride>. */
void attn_emit_mma_load(kt_buf *b, const attn_info *a, const attn_geom *m, attn_operand op,
                        const char *what, const char *dst, const char *row0)
{
    int stride = op == ATTN_Q ? m->qs : op == ATTN_K ? m->ks : m->vs;
    emit_tile_load(b, a, m, op, what, dst, row0, "kt_off", stride);
}

/* The wgmma path's tiles: the hardware's 128-byte swizzle, kt_swizzle128_b16<tile rows>. */
void attn_emit_wgmma_load(kt_buf *b, const attn_info *a, const attn_geom *m, attn_operand op,
                          const char *what, const char *dst, const char *row0)
{
    emit_tile_load(b, a, m, op, what, dst, row0, "kt_swizzle128_b16",
                   op == ATTN_Q ? m->bq : m->bkv);
}

/* The ffma path's tile loads: 4-byte cp.async, Q and V row by row, K transposed into K^T. */
void attn_emit_ffma_load(kt_buf *b, const attn_info *a, const attn_geom *m, attn_operand op,
                         const char *what, const char *dst, const char *row0)
{
    const char *src;
    int rows, cols;
    long long n_valid;
    operand_tile(a, m, op, &src, &rows, &cols, &n_valid);
    const char *dst_index = op == ATTN_Q   ? "r * QS + col"
                            : op == ATTN_K ? "col * KS + r"
                                           : "r * DV + col";
    kt_buf_line(b, "/* %s: %d x %d floats, rows past %lld zero-filled */", what, rows, cols,
                n_valid);
    load_open(b, m, rows, cols, "col", row0, n_valid, 8);
    kt_buf_line(b, "kt_cp_async4(%s + %s, %s + (size_t)(ok ? %s + r : 0) * %d + col, ok ? 4 : 0);",
                dst, dst_index, src, row0, cols);
    attn_emit_close(b, 2);
}

/* The two-buffer ring of the mma.sync and FFMA kernels, at the top of the tile loop: cK and cV
 * name this tile's buffers (k_buf / sV plus (tile & 1) times k_size / v_size elements), the
 * next tile loads into the other pair by load (the path's loader), and the wait leaves it in
 * flight; the last tile waits for everything. comments: the mma.sync path's comment lines. */
void attn_emit_two_buffers(kt_buf *b, const attn_info *a, const attn_geom *m, attn_load_fn load,
                           const char *ty, const char *k_buf, const char *k_size,
                           const char *v_size, bool comments)
{
    kt_buf_line(b, "const %s *cK = %s + (tile & 1) * %s;", ty, k_buf, k_size);
    kt_buf_line(b, "const %s *cV = sV + (tile & 1) * %s;", ty, v_size);
    kt_buf_line(b, "if (tile + 1 < n_tiles) {");
    b->indent += 4;
    if (comments)
        kt_buf_line(b, "/* prefetch the next tile into the other buffer */");
    kt_buf_line(b, "const int nkv0 = kv0 + BKV;");
    kt_buf_line(b, "%s *nK = %s + ((tile + 1) & 1) * %s;", ty, k_buf, k_size);
    kt_buf_line(b, "%s *nV = sV + ((tile + 1) & 1) * %s;", ty, v_size);
    load(b, a, m, ATTN_K, "next K", "nK", "nkv0");
    load(b, a, m, ATTN_V, "next V", "nV", "nkv0");
    kt_buf_line(b, "kt_cp_async_commit();");
    kt_buf_line(b, "kt_cp_async_wait<1>();%s",
                comments ? " /* this tile landed, the next is in flight */" : "");
    b->indent -= 4;
    kt_buf_line(b, "} else {");
    kt_buf_line(b, "    kt_cp_async_wait<0>();");
    kt_buf_line(b, "}");
}
