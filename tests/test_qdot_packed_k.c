/* test_qdot_packed_k.c: the packed K-quant kernels (qdot_pack_k_avx512.c)
 * against the scalar vec_dot, bitwise (the packed layout promises the very
 * same results), over edge shapes: rows that are not a multiple of the
 * 16-row group, every column-tile width, group sub-ranges, decode (one
 * column, several groups at a time) and several column panels; then through
 * tela_op_matmul with 1, 2 and 3 threads. The scalar vec_dot itself is
 * checked against dequantized dot products in test_qdot.c. Where the CPU
 * has AMX (and TELA_AMX is not 0), gemms of 16 columns or more run on its tiles (qdot_pack_amx.c):
 * every shape of 16+ columns is then checked twice, AMX tiles and VNNI
 * tiles, against the same vec_dot, plus blocks of extreme levels, scales
 * and activations (the AMX tiles' exactness bound). Skipped where the CPU
 * has no packed K-quant kernels (no AVX-512 VNNI). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/qdot.h"
#include "quant/quant.h"
#include "test.h"

/* uniform in [-scale, scale) */
static float next_float(float scale) { return (float)(2.0 * test_unif() - 1.0) * scale; }

/* Weight rows from the reference quantizer of random floats (some rows
 * with a large dynamic range, so scales and mins take many values). */
static void make_weights(tela_type type, uint8_t *w, size_t ws, int64_t rows, int64_t n) {
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t r = 0; r < rows; r++) {
        float amp = (r % 3 == 0) ? 4.0f : 0.05f;
        for (int64_t i = 0; i < n; i++) f[i] = next_float(amp) * (i % 37 == 0 ? 10.0f : 1.0f) + (r % 5 == 1 ? 0.3f : 0);
        CHECK_OK(tela_quantize_row(type, f, w + (size_t)r * ws, n));
    }
    free(f);
}

static void *aligned64(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64 + 64); }

/* Packs rows x n, runs the packed gemm on group range [g0, g1) for nc
 * columns, and compares with vec_dot; outputs outside the range must stay
 * untouched. */
static void check_shape(tela_type type, int64_t rows, int64_t n, int64_t nc, int64_t g0, int64_t g1) {
    const tela_qdot_traits *q = tela_qdot_get(type), *sc = tela_qdot_get_isa(type, TELA_ISA_SCALAR);
    const tela_qdot_packing *p = &q->packing;
    const size_t wrb = tela_type_row_bytes(type, n), xrb = tela_type_row_bytes(TELA_TYPE_Q8_K, n);
    const size_t ws = wrb + 2, xs = xrb + 12; /* unaligned strides, as in a mapped file */
    uint8_t *w = malloc(ws * (size_t)rows + 1) + 1, *xq = malloc(xs * (size_t)nc);
    make_weights(type, w, ws, rows, n);
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t c = 0; c < nc; c++) {
        for (int64_t i = 0; i < n; i++) x[i] = next_float(2.0f);
        sc->from_float(x, xq + (size_t)c * xs, n);
    }
    const int64_t groups = (rows + p->pack_rows - 1) / p->pack_rows;
    uint8_t *packed = aligned64(p->group_bytes(n) * (size_t)groups);
    p->pack(w, ws, rows, n, 0, groups / 2, packed); /* in two pieces, as threads do */
    p->pack(w, ws, rows, n, groups / 2, groups, packed);
    const int64_t os = rows + 5;
    float *out = malloc(sizeof(float) * (size_t)(os * nc));
    for (int64_t i = 0; i < os * nc; i++) out[i] = -777.0f;
    p->gemm(packed, rows, g0, g1, xq, xs, nc, n, out, os);
    int bad = 0;
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < os; r++) {
            const float v = out[c * os + r];
            const int in_range = r < rows && r >= g0 * p->pack_rows && r < g1 * p->pack_rows;
            if (in_range) {
                const float want = sc->vec_dot(w + (size_t)r * ws, xq + (size_t)c * xs, n);
                if (memcmp(&v, &want, sizeof v) != 0 && bad++ < 3)
                    fprintf(stderr, "%s rows %lld n %lld cols %lld groups [%lld,%lld): out[%lld][%lld] = %.9g, vec_dot %.9g\n",
                            tela_type_name(type), (long long)rows, (long long)n, (long long)nc, (long long)g0,
                            (long long)g1, (long long)c, (long long)r, v, want);
            } else if (v != -777.0f && bad++ < 3) {
                fprintf(stderr, "%s: wrote outside its rows at [%lld][%lld]\n", tela_type_name(type), (long long)c,
                        (long long)r);
            }
        }
    CHECK_MSG(bad == 0, "%s rows %lld n %lld cols %lld: %d outputs wrong", tela_type_name(type), (long long)rows,
              (long long)n, (long long)nc, bad);
    free(w - 1);
    free(xq);
    free(x);
    free(packed);
    free(out);
}

/* Through the ops layer: the packed matmul equals the unpacked one (same
 * kernels' results) bitwise, for 1, 2 and 3 threads. */
static void check_matmul(tela_type type, int64_t rows, int64_t n, int n_tok) {
    const size_t wrb = tela_type_row_bytes(type, n);
    uint8_t *w = malloc(wrb * (size_t)rows);
    make_weights(type, w, wrb, rows, n);
    float *x = malloc(sizeof(float) * (size_t)(n * n_tok)), *y0 = malloc(sizeof(float) * (size_t)(rows * n_tok)),
          *y1 = malloc(sizeof(float) * (size_t)(rows * n_tok));
    for (int64_t i = 0; i < n * n_tok; i++) x[i] = next_float(1.5f);
    tela_mat m = {.type = type, .data = w, .n_rows = rows, .n_cols = n, .row_bytes = wrb};
    const size_t pb = tela_op_pack_bytes(&m);
    CHECK(pb > 0);
    void *buf = aligned64(pb);
    for (int nth = 1; nth <= 3; nth++) {
        tela_threadpool *pool = NULL;
        CHECK_OK(tela_threadpool_create(nth, &pool));
        if (!pool) break;
        tela_mat plain = m;
        tela_op_matmul(pool, &plain, x, n, y0, rows, n_tok);
        tela_mat packed = m;
        tela_op_pack(pool, &packed, buf);
        CHECK(packed.packed == buf);
        tela_op_matmul(pool, &packed, x, n, y1, rows, n_tok);
        CHECK_MSG(memcmp(y0, y1, sizeof(float) * (size_t)(rows * n_tok)) == 0,
                  "%s %lldx%lld, %d tokens, %d threads: packed matmul differs from the unpacked one",
                  tela_type_name(type), (long long)rows, (long long)n, n_tok, nth);
        tela_threadpool_free(pool);
    }
    free(buf);
    free(w);
    free(x);
    free(y0);
    free(y1);
}

/* Blocks at the extremes: every level at its maximum, every scale and min
 * at 63 (Q4_K) or every scale at -128 / 127 (Q6_K), activations all 127 or
 * all -127: the largest sums the tiles meet, where an inexact step would
 * show. Compared bitwise with vec_dot. */
static void check_extreme(tela_type type, int64_t rows, int64_t n, int64_t nc) {
    const tela_qdot_traits *q = tela_qdot_get(type), *sc = tela_qdot_get_isa(type, TELA_ISA_SCALAR);
    const tela_qdot_packing *p = &q->packing;
    const size_t wrb = tela_type_row_bytes(type, n), xrb = tela_type_row_bytes(TELA_TYPE_Q8_K, n);
    uint8_t *w = malloc(wrb * (size_t)rows), *xq = malloc(xrb * (size_t)nc);
    memset(w, 0xFF, wrb * (size_t)rows);
    const int64_t nsb = n / 256;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < nsb; b++) {
            uint8_t *blk = w + (size_t)r * wrb;
            if (type == TELA_TYPE_Q4_K) {
                tela_block_q4_K *k = (tela_block_q4_K *)(void *)blk + b;
                k->d = 0x3C00;    /* 1.0 */
                k->dmin = 0x3800; /* 0.5 */
            } else {
                tela_block_q6_K *k = (tela_block_q6_K *)(void *)blk + b;
                memset(k->scales, r % 2 ? 0x80 : 0x7F, sizeof k->scales); /* -128 or 127 */
                k->d = 0x3C00;
            }
        }
    for (int64_t c = 0; c < nc; c++)
        for (int64_t b = 0; b < nsb; b++) {
            uint8_t *xb = xq + (size_t)c * xrb + (size_t)b * 292;
            const float d = 0.25f;
            const int8_t v = c % 2 ? -127 : 127;
            memcpy(xb, &d, 4);
            memset(xb + 4, (uint8_t)v, 256);
            for (int i = 0; i < 16; i++) {
                const int16_t bs = (int16_t)(16 * v);
                memcpy(xb + 260 + 2 * i, &bs, 2);
            }
        }
    const int64_t groups = (rows + 15) / 16;
    uint8_t *packed = aligned64(p->group_bytes(n) * (size_t)groups);
    p->pack(w, wrb, rows, n, 0, groups, packed);
    float *out = malloc(sizeof(float) * (size_t)(rows * nc));
    p->gemm(packed, rows, 0, groups, xq, xrb, nc, n, out, rows);
    int bad = 0;
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < rows; r++) {
            const float want = sc->vec_dot(w + (size_t)r * wrb, xq + (size_t)c * xrb, n);
            if (memcmp(&out[c * rows + r], &want, sizeof want) != 0 && bad++ < 3)
                fprintf(stderr, "%s extreme blocks: out[%lld][%lld] = %.9g, vec_dot %.9g\n", tela_type_name(type),
                        (long long)c, (long long)r, out[c * rows + r], want);
        }
    CHECK_MSG(bad == 0, "%s extreme blocks, %lld columns: %d outputs wrong", tela_type_name(type), (long long)nc, bad);
    free(w);
    free(xq);
    free(packed);
    free(out);
}

/* The shapes of 16+ columns (the AMX tiles' range; else the VNNI tiles). */
static void check_many_columns(tela_type type) {
    const int64_t cols[] = {16, 17, 31, 32, 33, 48, 61};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        check_shape(type, 40, 512, cols[i], 0, 3);
        check_shape(type, 16, 256, cols[i], 0, 1);
    }
    check_shape(type, 100, 768, 40, 2, 5);
    check_shape(type, 33, 8192, 150, 0, 3); /* long rows: panels of 112 columns */
    check_extreme(type, 32, 512, 19);
    check_extreme(type, 32, 512, 3);
    check_matmul(type, 70, 1024, 37);
}

int main(void) {
    const tela_type types[] = {TELA_TYPE_Q4_K, TELA_TYPE_Q6_K};
    const tela_qdot_traits *q = tela_qdot_get(TELA_TYPE_Q4_K);
    if (!q || q->packing.pack_rows == 0) test_skip("no packed K-quant kernels on this CPU");
    if (getenv("TELA_PACK") && !strcmp(getenv("TELA_PACK"), "0")) test_skip("TELA_PACK=0");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const tela_type type = types[t];
        CHECK_EQ_INT(tela_qdot_get(type)->packing.pack_rows, 16);
        /* every column-tile width and decode, rows around the group size */
        const int64_t rows_list[] = {1, 15, 16, 17, 40, 64};
        for (size_t i = 0; i < sizeof rows_list / sizeof rows_list[0]; i++) {
            const int64_t rows = rows_list[i], groups = (rows + 15) / 16;
            for (int64_t nc = 1; nc <= 19; nc++) check_shape(type, rows, 512, nc, 0, groups);
        }
        /* decode over several group counts, and sub-ranges */
        for (int64_t rows = 16; rows <= 16 * 9; rows += 16) check_shape(type, rows - 3, 256, 1, 0, (rows + 15) / 16);
        check_shape(type, 100, 256, 1, 1, 6);
        check_shape(type, 100, 256, 9, 2, 5);
        check_shape(type, 100, 768, 3, 6, 7);
        /* several column panels (x rows of 8 super-blocks: ~450 columns a panel) */
        check_shape(type, 33, 2048, 470, 0, 3);
        check_matmul(type, 70, 1024, 1);
        check_matmul(type, 70, 1024, 21);
        /* the AMX tiles where they run (a CPU with AMX, TELA_AMX not 0), then
         * the VNNI tiles */
        const bool amx = tela_qdot_amx_active();
        if (amx) {
            check_many_columns(type);
            tela_qdot_amx_allow(false);
        }
        check_many_columns(type);
        tela_qdot_amx_allow(amx);
    }
    printf("AMX tiles %s\n", tela_qdot_amx_active() ? "on: checked against vec_dot, as were the VNNI tiles"
                                                      : "not in use (no AMX, or TELA_AMX=0): the VNNI tiles checked");
    return test_finish();
}
