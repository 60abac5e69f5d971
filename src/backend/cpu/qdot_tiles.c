/* qdot_tiles.c: the gemm tiling loop the kernel files share
 * (tela_qdot_run_tiles, see qdot.h): column panels of activations kept in
 * L2 while every row tile passes over them, with a kernel per tile shape.
 * It calls no kernel file, so the SIMD files (qdot_avx2.c, qdot_avx512.c,
 * qdot_neon.c) and the dispatch in qdot.c above them stand in one order. */
#include "backend/cpu/qdot.h"

#include <stddef.h>
#include <stdint.h>

/* Activations are walked in panels of about this many bytes, so a panel
 * stays in L2 while every weight row tile passes over it. */
#define PANEL_BYTES (384 * 1024)

void tela_qdot_run_tiles(const void *vw, size_t w_stride, int64_t n_rows, const void *vx, size_t x_stride,
                         int64_t n_cols, int64_t n, float *out, int64_t out_stride, int tr, int tc,
                         tela_qdot_tile_fn full, tela_qdot_tile_fn rows_only, tela_qdot_tile_fn cols_only,
                         tela_qdot_tile_fn single) {
    const uint8_t *w = vw, *x = vx;
    int64_t panel = (int64_t)(PANEL_BYTES / (x_stride ? x_stride : 1));
    panel -= panel % tc;
    if (panel < tc) panel = tc;
    for (int64_t c0 = 0; c0 < n_cols; c0 += panel) {
        const int64_t c1 = c0 + panel < n_cols ? c0 + panel : n_cols;
        int64_t r = 0;
        for (; r + tr <= n_rows; r += tr) {
            const uint8_t *wr = w + (size_t)r * w_stride;
            int64_t c = c0;
            for (; c + tc <= c1; c += tc) full(wr, w_stride, x + (size_t)c * x_stride, x_stride, n, out + c * out_stride + r, out_stride);
            for (; c < c1; c++) rows_only(wr, w_stride, x + (size_t)c * x_stride, x_stride, n, out + c * out_stride + r, out_stride);
        }
        for (; r < n_rows; r++) {
            const uint8_t *wr = w + (size_t)r * w_stride;
            int64_t c = c0;
            for (; c + tc <= c1; c += tc) cols_only(wr, w_stride, x + (size_t)c * x_stride, x_stride, n, out + c * out_stride + r, out_stride);
            for (; c < c1; c++) single(wr, w_stride, x + (size_t)c * x_stride, x_stride, n, out + c * out_stride + r, out_stride);
        }
    }
}
