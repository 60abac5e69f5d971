/* qdot_pack_f_avx512.c: packed-layout kernels (see qdot.h) for float
 * weights (F16, BF16, F32) on AVX-512 F/BW/VL CPUs. Every function carries
 * its own target attribute, so the file compiles without -march=native.
 * Only AVX-512 F/BW/VL/DQ, F16C and FMA are used (no AVX512-FP16, no AMX):
 * Zen 4/5 and Ice Lake or later run it.
 *
 * Layout: a group is 16 consecutive rows; for each k it holds the 16 rows'
 * k-th elements side by side (F16/BF16: 32 bytes per k, F32: 64 bytes), so
 * a group of n elements is n * 32 (or n * 64) bytes, as many bytes as the
 * rows it holds. Rows past n_rows are zero.
 *
 * Order of arithmetic (the contract of qdot.h): out[c][r] is
 *   acc = 0; for k = 0 .. n-1: acc = fmaf(w[r][k], x[c][k], acc)
 * one lane of one register per output, so tile shapes, blocking, column
 * count and group range do not change a single bit.
 *
 * Kernels: a tile is G groups (16 rows each, one zmm of f32 per group and
 * k) times C activation columns. Per k it loads the G weight vectors and
 * does G * C FMAs, each with x[c][k] broadcast straight from memory
 * (vfmadd231ps m32{1to16}); the G * C accumulators live in registers.
 *  - Decoding (one column) streams the weights once, converting F16/BF16 on
 *    the fly, eight groups at a time so that eight independent FMA chains
 *    hide the FMA latency (the loop is memory-bound).
 *  - Several columns (prefill) are cache-blocked: a block of groups x a
 *    range of k is converted once to f32 into a scratch buffer in L2 (F32
 *    weights are used in place), then 2-group x 12-column tiles sweep the
 *    columns over it, so the inner loop is loads and FMAs only. The
 *    accumulators go through out between k ranges (a float stored and
 *    reloaded is exact), which keeps the element order. */
#include "backend/cpu/qdot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT
#define NOINL static __attribute__((noinline)) TGT
/* Full unrolling of the constant-trip loops keeps the accumulators in
 * registers (GCC and clang both honor it). */
#define UNROLL _Pragma("GCC unroll 16")

enum { PF_F32 = 0, PF_F16 = 1, PF_BF16 = 2 };

#define PF_ROWS 16 /* rows per group */
#define PF_CT 12   /* columns per prefill tile */
#define PF_GT 2    /* groups per prefill tile */
#define PF_GD 8    /* groups per decoding tile */
/* Prefill blocking: PF_KC elements of k (a 12-column activation panel is
 * then 24 KB, in L1) times PF_GB groups (a 512 KB f32 scratch, in L2). */
#ifndef PF_KC
#define PF_KC 512
#endif
#ifndef PF_GB
#define PF_GB 16
#endif

/* Bytes of one element of a packed type. */
INL size_t esize(const int T) { return T == PF_F32 ? 4 : 2; }

/* The 16 rows' k-th weights of a group (p points at them) as f32. */
INL __m512 load_w(const uint8_t *p, const int T) {
    if (T == PF_F32) return _mm512_loadu_ps(p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (T == PF_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Lanes of the rows that exist among the 16 from row r0 on. */
INL __mmask16 row_mask(int64_t n_rows, int64_t r0) {
    const int64_t v = n_rows - r0;
    return v >= 16 ? (__mmask16)0xFFFF : v <= 0 ? (__mmask16)0 : (__mmask16)((1u << v) - 1);
}

/* ----------------------------------------------------------------- packing */

/* A group is n * 16 elements, rounded up to 64 bytes (for odd n with F16 /
 * BF16) so that every group starts on a cache line. */
static size_t group_bytes_2(int64_t n) { return ((size_t)n * PF_ROWS * 2 + 63) / 64 * 64; }
static size_t group_bytes_4(int64_t n) { return (size_t)n * PF_ROWS * 4; }

/* Transposes 16 rows of n elements of es bytes into the group layout. The
 * rows are read PF_PK elements at a time into a small buffer (they may sit
 * at any address), then written out k by k. */
#define PF_PK 64
static void pack_group(const uint8_t *w, size_t ws, int64_t rows, int64_t n, size_t es, uint8_t *dst) {
    uint8_t buf[PF_ROWS][PF_PK * 4];
    for (int64_t k0 = 0; k0 < n; k0 += PF_PK) {
        const int64_t kn = n - k0 < PF_PK ? n - k0 : PF_PK;
        for (int j = 0; j < PF_ROWS; j++) {
            if (j < rows) memcpy(buf[j], w + (size_t)j * ws + (size_t)k0 * es, (size_t)kn * es);
            else memset(buf[j], 0, (size_t)kn * es);
        }
        uint8_t *d = dst + (size_t)k0 * PF_ROWS * es;
        if (es == 2) {
            for (int64_t k = 0; k < kn; k++)
                for (int j = 0; j < PF_ROWS; j++) memcpy(d + (k * PF_ROWS + j) * 2, buf[j] + k * 2, 2);
        } else {
            for (int64_t k = 0; k < kn; k++)
                for (int j = 0; j < PF_ROWS; j++) memcpy(d + (k * PF_ROWS + j) * 4, buf[j] + k * 4, 4);
        }
    }
}

static void pack_es(const void *w, size_t ws, int64_t n_rows, int64_t n, int64_t g0, int64_t g1, void *packed,
                    size_t es) {
    const size_t gbytes = es == 2 ? group_bytes_2(n) : group_bytes_4(n);
    for (int64_t g = g0; g < g1; g++) {
        const int64_t r0 = g * PF_ROWS;
        const int64_t rows = n_rows - r0 < PF_ROWS ? n_rows - r0 : PF_ROWS;
        uint8_t *dst = (uint8_t *)packed + (size_t)g * gbytes;
        pack_group((const uint8_t *)w + (size_t)r0 * ws, ws, rows, n, es, dst);
        memset(dst + (size_t)n * PF_ROWS * es, 0, gbytes - (size_t)n * PF_ROWS * es); /* the padding */
    }
}

static void pack_2(const void *w, size_t ws, int64_t n_rows, int64_t n, int64_t g0, int64_t g1, void *packed) {
    pack_es(w, ws, n_rows, n, g0, g1, packed, 2);
}
static void pack_4(const void *w, size_t ws, int64_t n_rows, int64_t n, int64_t g0, int64_t g1, void *packed) {
    pack_es(w, ws, n_rows, n, g0, g1, packed, 4);
}

/* ------------------------------------------------------------------- tiles */

/* G groups (group g's weights for k at w + g * gs + k * 16 * esize) times
 * C columns (column c's x[k] at x + c * xs bytes + k floats), k in [0, kn).
 * The accumulators start at 0 (first) or at the partial sums left in out;
 * they are stored back for the rows below n_rows (rows counts those from
 * the tile's first row). */
INL void tile(const uint8_t *w, size_t gs, const uint8_t *xb, size_t xs, int64_t kn, float *out, int64_t os,
              int64_t rows, int first, const int T, const int G, const int C) {
    __m512 acc[PF_GD][PF_CT];
    __mmask16 m[PF_GD];
    const float *x[PF_CT];
    UNROLL for (int c = 0; c < C; c++) x[c] = (const float *)(xb + (size_t)c * xs);
    UNROLL for (int g = 0; g < G; g++) {
        m[g] = row_mask(rows, 16 * g);
        UNROLL for (int c = 0; c < C; c++)
            acc[g][c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m[g], out + c * os + 16 * g);
    }
    const size_t step = 16 * esize(T);
    for (int64_t k = 0; k < kn; k++, w += step) {
        __m512 wv[PF_GD];
        UNROLL for (int g = 0; g < G; g++) wv[g] = load_w(w + g * gs, T);
        UNROLL for (int c = 0; c < C; c++) {
            const __m512 b = _mm512_set1_ps(x[c][k]);
            UNROLL for (int g = 0; g < G; g++) acc[g][c] = _mm512_fmadd_ps(wv[g], b, acc[g][c]);
        }
    }
    UNROLL for (int g = 0; g < G; g++)
        UNROLL for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(out + c * os + 16 * g, m[g], acc[g][c]);
}

typedef void (*tile_fn)(const uint8_t *w, size_t gs, const uint8_t *x, size_t xs, int64_t kn, float *out,
                        int64_t os, int64_t rows, int first);

#define TILE(T, G, C)                                                                                              \
    NOINL void tile_##T##_##G##_##C(const uint8_t *w, size_t gs, const uint8_t *x, size_t xs, int64_t kn,         \
                                    float *out, int64_t os, int64_t rows, int first) {                           \
        tile(w, gs, x, xs, kn, out, os, rows, first, T, G, C);                                                   \
    }
#define TILES_C(T, G)                                                                                              \
    TILE(T, G, 1) TILE(T, G, 2) TILE(T, G, 3) TILE(T, G, 4) TILE(T, G, 5) TILE(T, G, 6) TILE(T, G, 7)         \
    TILE(T, G, 8) TILE(T, G, 9) TILE(T, G, 10) TILE(T, G, 11) TILE(T, G, 12)
#define TILES_LIST(T, G)                                                                                           \
    {tile_##T##_##G##_1, tile_##T##_##G##_2, tile_##T##_##G##_3, tile_##T##_##G##_4, tile_##T##_##G##_5,          \
     tile_##T##_##G##_6, tile_##T##_##G##_7, tile_##T##_##G##_8, tile_##T##_##G##_9, tile_##T##_##G##_10,         \
     tile_##T##_##G##_11, tile_##T##_##G##_12}

/* Prefill tiles run on f32 (scratch or F32 weights): 2 or 1 groups x C. */
TILES_C(PF_F32, 2)
TILES_C(PF_F32, 1)
static const tile_fn tiles_f32[2][PF_CT] = {TILES_LIST(PF_F32, 1), TILES_LIST(PF_F32, 2)};

/* Decoding tiles, on the packed type: 8 or 1 groups x 1 column. */
TILE(PF_F32, 8, 1)
TILE(PF_F16, 8, 1)
TILE(PF_F16, 1, 1)
TILE(PF_BF16, 8, 1)
TILE(PF_BF16, 1, 1)
static const tile_fn tiles_dec[3][2] = {{tile_PF_F32_1_1, tile_PF_F32_8_1},
                                        {tile_PF_F16_1_1, tile_PF_F16_8_1},
                                        {tile_PF_BF16_1_1, tile_PF_BF16_8_1}};

/* ------------------------------------------------------------------- gemms */

/* Groups [g0, g1) of packed (type T, gbytes per group) -> f32 scratch for k
 * in [k0, k0 + kn): group i of the block at dst + i * kn * 16. */
INL void to_f32(const uint8_t *packed, size_t gbytes, int64_t g0, int64_t g1, int64_t k0, int64_t kn, float *dst,
                const int T) {
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *s = packed + (size_t)g * gbytes + (size_t)k0 * 16 * esize(T);
        float *d = dst + (size_t)(g - g0) * (size_t)kn * 16;
        int64_t k = 0;
        for (; k + 4 <= kn; k += 4) {
            UNROLL for (int u = 0; u < 4; u++) _mm512_store_ps(d + (k + u) * 16, load_w(s + (k + u) * 16 * esize(T), T));
        }
        for (; k < kn; k++) _mm512_store_ps(d + k * 16, load_w(s + k * 16 * esize(T), T));
    }
}

INL void gemm_t(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                int64_t n_cols, int64_t n, float *out, int64_t os, const int T) {
    const int64_t n_groups = (n_rows + PF_ROWS - 1) / PF_ROWS;
    if (g1 > n_groups) g1 = n_groups;
    if (g0 >= g1 || n_cols <= 0) return;
    const uint8_t *pw = packed;
    const uint8_t *px = x;
    const size_t gbytes = T == PF_F32 ? group_bytes_4(n) : group_bytes_2(n);
    if (n <= 0) { /* empty dot products */
        for (int64_t c = 0; c < n_cols; c++)
            for (int64_t r = g0 * PF_ROWS; r < g1 * PF_ROWS && r < n_rows; r++) out[c * os + r] = 0.0f;
        return;
    }
    float *scratch = NULL;
    if (T != PF_F32 && n_cols > 1) {
        const int64_t kc = n < PF_KC ? n : PF_KC;
        scratch = aligned_alloc(64, (size_t)PF_GB * (size_t)kc * 64);
    }
    if (n_cols == 1 || (T != PF_F32 && !scratch)) {
        /* Decoding (or no memory for the scratch): the weights once per
         * column, straight from the packed buffer. */
        for (int64_t c = 0; c < n_cols; c++) {
            int64_t g = g0;
            for (; g + PF_GD <= g1; g += PF_GD)
                tiles_dec[T][1](pw + (size_t)g * gbytes, gbytes, px + (size_t)c * xs, xs, n, out + c * os + g * 16,
                                os, n_rows - g * 16, 1);
            for (; g < g1; g++)
                tiles_dec[T][0](pw + (size_t)g * gbytes, gbytes, px + (size_t)c * xs, xs, n, out + c * os + g * 16,
                                os, n_rows - g * 16, 1);
        }
        return;
    }
    for (int64_t b0 = g0; b0 < g1; b0 += PF_GB) {
        const int64_t b1 = g1 - b0 < PF_GB ? g1 : b0 + PF_GB;
        for (int64_t k0 = 0; k0 < n; k0 += PF_KC) {
            const int64_t kn = n - k0 < PF_KC ? n - k0 : PF_KC;
            const uint8_t *wb;
            size_t gs;
            if (T == PF_F32) {
                wb = pw + (size_t)b0 * gbytes + (size_t)k0 * 64;
                gs = gbytes;
            } else {
                to_f32(pw, gbytes, b0, b1, k0, kn, scratch, T);
                wb = (const uint8_t *)scratch;
                gs = (size_t)kn * 64;
            }
            for (int64_t c0 = 0; c0 < n_cols; c0 += PF_CT) {
                const int64_t cn = n_cols - c0 < PF_CT ? n_cols - c0 : PF_CT;
                const uint8_t *xc = px + (size_t)c0 * xs + (size_t)k0 * 4;
                float *oc = out + c0 * os;
                int64_t g = b0;
                for (; g + PF_GT <= b1; g += PF_GT)
                    tiles_f32[1][cn - 1](wb + (size_t)(g - b0) * gs, gs, xc, xs, kn, oc + g * 16, os,
                                         n_rows - g * 16, k0 == 0);
                for (; g < b1; g++)
                    tiles_f32[0][cn - 1](wb + (size_t)(g - b0) * gs, gs, xc, xs, kn, oc + g * 16, os,
                                         n_rows - g * 16, k0 == 0);
            }
        }
    }
    free(scratch);
}

static TGT void gemm_f16(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                         int64_t n_cols, int64_t n, float *out, int64_t os) {
    gemm_t(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os, PF_F16);
}
static TGT void gemm_bf16(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                          int64_t n_cols, int64_t n, float *out, int64_t os) {
    gemm_t(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os, PF_BF16);
}
static TGT void gemm_f32(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                         int64_t n_cols, int64_t n, float *out, int64_t os) {
    gemm_t(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os, PF_F32);
}

void tela_qdot_fill_packed_f_avx512(tela_qdot_isa_table *t) {
    t->packing[TELA_TYPE_F16] = (tela_qdot_packing){PF_ROWS, group_bytes_2, pack_2, gemm_f16};
    t->packing[TELA_TYPE_BF16] = (tela_qdot_packing){PF_ROWS, group_bytes_2, pack_2, gemm_bf16};
    t->packing[TELA_TYPE_F32] = (tela_qdot_packing){PF_ROWS, group_bytes_4, pack_4, gemm_f32};
}

#endif /* __x86_64__ */
