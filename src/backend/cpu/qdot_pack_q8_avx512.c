/* qdot_pack_q8_avx512.c: the packed layout (see qdot.h, "Packed weights")
 * and its AVX-512 VNNI gemm for Q8_0 and Q4_0 weights.
 *
 * Layout. A group holds 16 consecutive weight rows. For each 32-element
 * block b the group stores the 16 rows' levels interleaved four at a time,
 * so that one 64-byte vector holds the same four k-values of all 16 rows
 * (bytes 4i..4i+3 = row i):
 *   Q8_0: 8 vectors per block, vector j = elements 4j..4j+3, each level
 *         stored as w + 128 (the sign bit flipped: an unsigned byte);
 *   Q4_0: 4 vectors per block, vector j = bytes 4j..4j+3 of each row's
 *         nibbles as stored, i.e. elements 4j..4j+3 in the low nibbles and
 *         16+4j..16+4j+3 in the high nibbles (already unsigned: w + 8).
 * A group is [the 16 rows' fp16 scales of every block: 32 bytes per block,
 * padded to 64][the level vectors of block 0, 1, ...]: the bytes of the
 * original blocks, rearranged (plus padding). Rows past n_rows are zero
 * (scale 0, so their outputs are 0; they are never stored).
 *
 * Kernel. VPDPBUSD multiplies unsigned bytes (the weight vector) by signed
 * bytes (the activation operand: Q8_0 levels, exactly as quantized), so
 * one instruction with a broadcast memory operand (4 levels of one
 * activation column) does 4 multiply-adds for each of the 16 rows:
 *   isum[r] = -off * sum(x_b) + sum_k (w[r][k] + off) * x[k] = sum_k w x,
 * off = 128 (Q8_0) or 8 (Q4_0). The start value -off * sum(x_b) of every
 * column and block is computed once per gemm call and column panel into a
 * small table, next to the column's block scale as a float. A tile is one
 * group x up to 12 activation columns: 12 int32 and 12 float accumulators
 * of 16 rows stay in registers; each weight vector is loaded once and used
 * by all 12 columns. Per block and column that is 8 VPDPBUSD + convert,
 * multiply and FMA (11 vector operations for 512 multiply-adds).
 *
 * Float steps (the contract in qdot.h): lane r of column c does, per block
 * b in order, acc = fmaf((float)isum_b, d_w(r, b) * d_x(c, b), acc) from
 * acc = 0; isum_b is an exact integer (|isum_b| <= 2^19 converts exactly),
 * so the result of every output is independent of tiles, panels, n_cols
 * and group ranges (and bitwise equal to the scalar fallback below). */
#include "backend/cpu/qdot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/fp16.h"

#define PQ_TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define PQ_INL static inline __attribute__((always_inline)) PQ_TGT
/* Full unrolling of the constant-trip loops keeps the accumulators in
 * registers (GCC and clang both honor it). */
#define PQ_UNROLL _Pragma("GCC unroll 16")

#define PQ_ROWS 16     /* rows per group: one int32 lane each */
#define PQ_Q8_SIZE 34  /* a Q8_0 block: fp16 d, 32 int8 */
#define PQ_Q4_SIZE 18  /* a Q4_0 block: fp16 d, 16 bytes of nibbles */
#define PQ_TILE_COLS 12 /* activation columns per tile: 2 x 12 accumulators + operands fit in 32 registers */

static inline uint16_t pq_rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t pq_rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline void pq_wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* Bytes of level vectors per block in a group: Q8_0 512, Q4_0 256. */
static size_t pq_level_bytes(int q4) { return q4 ? 256 : 512; }
/* Bytes of the scale area of a group of nb blocks (a multiple of 64 so the
 * level vectors stay aligned). */
static size_t pq_scale_bytes(int64_t nb) { return ((size_t)nb * 32 + 63) / 64 * 64; }

static size_t pq_group_bytes(int64_t n, int q4) {
    const int64_t nb = n / 32;
    return pq_scale_bytes(nb) + (size_t)nb * pq_level_bytes(q4);
}
static size_t q8p_group_bytes(int64_t n) { return pq_group_bytes(n, 0); }
static size_t q4p_group_bytes(int64_t n) { return pq_group_bytes(n, 1); }

/* ------------------------------------------------------------- packing */

/* Portable C: runs once at load, and the dword copies are cheap next to
 * reading the weights from the file. */
static void pq_pack(const void *vw, size_t ws, int64_t n_rows, int64_t n, int64_t g0, int64_t g1, void *vpacked,
                    int q4) {
    const uint8_t *w = vw;
    const int64_t nb = n / 32;
    const size_t gb = pq_group_bytes(n, q4), lb = pq_level_bytes(q4), sb = pq_scale_bytes(nb);
    const size_t bsize = q4 ? PQ_Q4_SIZE : PQ_Q8_SIZE;
    const int dwords = q4 ? 4 : 8; /* level dwords per row and block */
    const uint32_t flip = q4 ? 0 : 0x80808080u;
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *grp = (uint8_t *)vpacked + (size_t)g * gb;
        memset(grp, 0, gb);
        for (int i = 0; i < PQ_ROWS; i++) {
            const int64_t r = g * PQ_ROWS + i;
            if (r >= n_rows) break;
            const uint8_t *row = w + (size_t)r * ws;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = row + (size_t)b * bsize;
                memcpy(grp + (size_t)b * 32 + 2 * i, blk, 2);
                uint8_t *lv = grp + sb + (size_t)b * lb + 4 * i;
                for (int j = 0; j < dwords; j++) pq_wr32(lv + 64 * j, pq_rd32(blk + 2 + 4 * j) ^ flip);
            }
        }
    }
}

static void q8p_pack(const void *w, size_t ws, int64_t n_rows, int64_t n, int64_t g0, int64_t g1, void *packed) {
    pq_pack(w, ws, n_rows, n, g0, g1, packed, 0);
}
static void q4p_pack(const void *w, size_t ws, int64_t n_rows, int64_t n, int64_t g0, int64_t g1, void *packed) {
    pq_pack(w, ws, n_rows, n, g0, g1, packed, 1);
}

/* ------------------------------------------------- the scalar fallback */

/* The contract written out: used when the gemm cannot get its table
 * buffer, and the model the vector kernels must match bit for bit. */
static void pq_gemm_scalar(const uint8_t *packed, int64_t n_rows, int64_t g0, int64_t g1, const uint8_t *x,
                           size_t xs, int64_t n_cols, int64_t n, float *out, int64_t os, int q4) {
    const int64_t nb = n / 32;
    const size_t gb = pq_group_bytes(n, q4), lb = pq_level_bytes(q4), sb = pq_scale_bytes(nb);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *grp = packed + (size_t)g * gb;
        for (int i = 0; i < PQ_ROWS && g * PQ_ROWS + i < n_rows; i++) {
            for (int64_t c = 0; c < n_cols; c++) {
                const uint8_t *xc = x + (size_t)c * xs;
                float acc = 0.0f;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *lv = grp + sb + (size_t)b * lb + 4 * i;
                    const int8_t *xq = (const int8_t *)(xc + (size_t)b * PQ_Q8_SIZE + 2);
                    int32_t isum = 0;
                    for (int k = 0; k < 32; k++) {
                        int wk;
                        if (q4) {
                            const uint8_t byte = lv[64 * ((k % 16) / 4) + k % 4];
                            wk = (k < 16 ? byte & 15 : byte >> 4) - 8;
                        } else {
                            wk = (int)lv[64 * (k / 4) + k % 4] - 128;
                        }
                        isum += wk * xq[k];
                    }
                    const float dw = tela_f16_to_f32(pq_rd16(grp + (size_t)b * 32 + 2 * i));
                    const float dx = tela_f16_to_f32(pq_rd16(xc + (size_t)b * PQ_Q8_SIZE));
                    acc = fmaf((float)isum, dw * dx, acc);
                }
                out[c * os + g * PQ_ROWS + i] = acc;
            }
        }
    }
}

/* ------------------------------------------------ the activation table */

/* For a panel of columns: entry (column c, block b) = {int32 -off *
 * sum(x levels of block b), float d_x of block b}, 8 bytes. Entries are
 * tile-major, the order the kernel reads them: the tile holding local
 * columns [t0, t0 + C) starts at entry t0 * nb and stores block b's C
 * entries at (t0 * nb + b * C + c - t0). */
typedef struct { int32_t corr; float dx; } pq_entry;

static inline pq_entry *pq_entry_at(pq_entry *tab, int64_t nb, int64_t cols, int64_t c, int64_t b) {
    const int64_t t0 = c / PQ_TILE_COLS * PQ_TILE_COLS;
    const int64_t C = cols - t0 < PQ_TILE_COLS ? cols - t0 : PQ_TILE_COLS;
    return tab + t0 * nb + b * C + (c - t0);
}

/* Sums of the (unsigned, +128) levels of blocks b..b+7 of a Q8_0 row at p
 * (block b at p): VPSADBW sums each 8 bytes into a 64-bit lane; an
 * unpack/shuffle tree adds the four lanes of each block. */
PQ_INL __m256i pq_sums8(const uint8_t *p) {
    const __m512i flip = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    __m512i z[4];
    PQ_UNROLL for (int i = 0; i < 4; i++) {
        const uint8_t *q = p + 2 * i * PQ_Q8_SIZE + 2;
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q)),
                                             _mm256_loadu_si256((const __m256i *)(q + PQ_Q8_SIZE)), 1);
        z[i] = _mm512_sad_epu8(_mm512_xor_si512(v, flip), zero); /* blocks 2i, 2i+1: 4 lanes each */
    }
    /* t0 128-bit lanes: (z0, z1) pair sums of block 0 lo, 0 hi, 1 lo, 1 hi
     * (z0 = blocks 0,1; z1 = blocks 2,3) */
    const __m512i t0 = _mm512_add_epi64(_mm512_unpacklo_epi64(z[0], z[1]), _mm512_unpackhi_epi64(z[0], z[1]));
    const __m512i t1 = _mm512_add_epi64(_mm512_unpacklo_epi64(z[2], z[3]), _mm512_unpackhi_epi64(z[2], z[3]));
    /* qwords: blocks 0, 2, 1, 3, 4, 6, 5, 7 */
    const __m512i u = _mm512_add_epi64(_mm512_shuffle_i64x2(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i64x2(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i o = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 1, 3, 4, 6, 5, 7), u);
    return _mm512_cvtepi64_epi32(o);
}

static PQ_TGT void pq_build_table(const uint8_t *x, size_t xs, int64_t cols, int64_t nb, int q4, pq_entry *tab) {
    const int shift = q4 ? 3 : 7; /* off = 8 or 128 */
    for (int64_t c = 0; c < cols; c++) {
        const uint8_t *xc = x + (size_t)c * xs;
        int64_t b = 0;
        for (; b + 8 <= nb; b += 8) {
            const uint8_t *p = xc + (size_t)b * PQ_Q8_SIZE;
            /* -off * sum(x) = off * (32 * 128 - sum(x + 128)) */
            const __m256i corr = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(32 * 128), pq_sums8(p)), shift);
            const __m256 dx = _mm256_cvtph_ps(_mm_setr_epi16(
                (short)pq_rd16(p), (short)pq_rd16(p + 1 * PQ_Q8_SIZE), (short)pq_rd16(p + 2 * PQ_Q8_SIZE),
                (short)pq_rd16(p + 3 * PQ_Q8_SIZE), (short)pq_rd16(p + 4 * PQ_Q8_SIZE),
                (short)pq_rd16(p + 5 * PQ_Q8_SIZE), (short)pq_rd16(p + 6 * PQ_Q8_SIZE),
                (short)pq_rd16(p + 7 * PQ_Q8_SIZE)));
            int32_t cv[8];
            float dv[8];
            _mm256_storeu_si256((__m256i *)cv, corr);
            _mm256_storeu_ps(dv, dx);
            for (int i = 0; i < 8; i++) {
                pq_entry *e = pq_entry_at(tab, nb, cols, c, b + i);
                e->corr = cv[i];
                e->dx = dv[i];
            }
        }
        for (; b < nb; b++) {
            const uint8_t *p = xc + (size_t)b * PQ_Q8_SIZE;
            int32_t s = 0;
            for (int k = 0; k < 32; k++) s += (int8_t)p[2 + k];
            pq_entry *e = pq_entry_at(tab, nb, cols, c, b);
            e->corr = -s * (1 << shift);
            e->dx = _cvtsh_ss(pq_rd16(p));
        }
    }
}

/* ------------------------------------------------------------- kernels */

/* One tile: G consecutive groups (at grp, gb bytes apart) x C columns (at
 * x, xs bytes apart; their table entries at tab). Writes rows whose bit is
 * set in rmask[gi] of each group. */
PQ_INL void pq_tile(const uint8_t *grp, size_t gb, int64_t nb, const uint8_t *x, size_t xs, const pq_entry *tab,
                    float *out, int64_t os, const __mmask16 *rmask, const int G, const int C, const int q4,
                    const int prefetch) {
    const size_t sb = pq_scale_bytes(nb), lb = pq_level_bytes(q4);
    __m512 fa[PQ_TILE_COLS];
    PQ_UNROLL for (int p = 0; p < G * C; p++) fa[p] = _mm512_setzero_ps();
    const uint8_t *xc[PQ_TILE_COLS];
    PQ_UNROLL for (int c = 0; c < C; c++) xc[c] = x + (size_t)c * xs + 2;
    const uint8_t *lv = grp + sb;
    for (int64_t b = 0; b < nb; b++, lv += lb, tab += C) {
        if (prefetch) {
            PQ_UNROLL for (int gi = 0; gi < G; gi++)
                PQ_UNROLL for (size_t o = 0; o < lb; o += 64)
                    _mm_prefetch((const char *)lv + gi * gb + 4 * lb + o, _MM_HINT_T0);
        }
        __m512 dw[4];
        PQ_UNROLL for (int gi = 0; gi < G; gi++)
            dw[gi] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(grp + gi * gb + (size_t)b * 32)));
        __m512i ia[PQ_TILE_COLS];
        PQ_UNROLL for (int gi = 0; gi < G; gi++)
            PQ_UNROLL for (int c = 0; c < C; c++) ia[gi * C + c] = _mm512_set1_epi32(tab[c].corr);
        const size_t xo = (size_t)b * PQ_Q8_SIZE;
        if (!q4) {
            PQ_UNROLL for (int j = 0; j < 8; j++) {
                PQ_UNROLL for (int gi = 0; gi < G; gi++) {
                    const __m512i wv = _mm512_load_si512((const void *)(lv + gi * gb + 64 * j));
                    PQ_UNROLL for (int c = 0; c < C; c++)
                        ia[gi * C + c] = _mm512_dpbusd_epi32(ia[gi * C + c], wv,
                                                             _mm512_set1_epi32((int)pq_rd32(xc[c] + xo + 4 * j)));
                }
            }
        } else {
            const __m512i m4 = _mm512_set1_epi8(0x0F);
            PQ_UNROLL for (int j = 0; j < 4; j++) {
                PQ_UNROLL for (int gi = 0; gi < G; gi++) {
                    const __m512i v = _mm512_load_si512((const void *)(lv + gi * gb + 64 * j));
                    const __m512i lo = _mm512_and_si512(v, m4);
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                    PQ_UNROLL for (int c = 0; c < C; c++) {
                        ia[gi * C + c] = _mm512_dpbusd_epi32(ia[gi * C + c], lo,
                                                             _mm512_set1_epi32((int)pq_rd32(xc[c] + xo + 4 * j)));
                        ia[gi * C + c] = _mm512_dpbusd_epi32(
                            ia[gi * C + c], hi, _mm512_set1_epi32((int)pq_rd32(xc[c] + xo + 16 + 4 * j)));
                    }
                }
            }
        }
        PQ_UNROLL for (int gi = 0; gi < G; gi++)
            PQ_UNROLL for (int c = 0; c < C; c++) {
                const __m512 s = _mm512_mul_ps(dw[gi], _mm512_set1_ps(tab[c].dx));
                fa[gi * C + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[gi * C + c]), s, fa[gi * C + c]);
            }
    }
    PQ_UNROLL for (int gi = 0; gi < G; gi++)
        PQ_UNROLL for (int c = 0; c < C; c++)
            _mm512_mask_storeu_ps(out + c * os + gi * PQ_ROWS, rmask[gi], fa[gi * C + c]);
}

typedef void (*pq_tile_fn)(const uint8_t *, size_t, int64_t, const uint8_t *, size_t, const pq_entry *, float *,
                           int64_t, const __mmask16 *);

#define PQ_DEF_TILE(NAME, G, C, Q4, PF)                                                                          \
    static PQ_TGT void NAME(const uint8_t *grp, size_t gb, int64_t nb, const uint8_t *x, size_t xs,             \
                            const pq_entry *tab, float *out, int64_t os, const __mmask16 *rmask) {              \
        pq_tile(grp, gb, nb, x, xs, tab, out, os, rmask, G, C, Q4, PF);                                          \
    }
#define PQ_DEF_TILES(P, Q4)                                                                                      \
    PQ_DEF_TILE(P##_1x1, 1, 1, Q4, 1)                                                                            \
    PQ_DEF_TILE(P##_4x1, 4, 1, Q4, 1)                                                                            \
    PQ_DEF_TILE(P##_1x2, 1, 2, Q4, 0)                                                                            \
    PQ_DEF_TILE(P##_1x3, 1, 3, Q4, 0)                                                                            \
    PQ_DEF_TILE(P##_1x4, 1, 4, Q4, 0)                                                                            \
    PQ_DEF_TILE(P##_1x5, 1, 5, Q4, 0)                                                                            \
    PQ_DEF_TILE(P##_1x6, 1, 6, Q4, 0)                                                                            \
    PQ_DEF_TILE(P##_1x7, 1, 7, Q4, 0)                                                                            \
    PQ_DEF_TILE(P##_1x8, 1, 8, Q4, 0)                                                                            \
    PQ_DEF_TILE(P##_1x9, 1, 9, Q4, 0)                                                                            \
    PQ_DEF_TILE(P##_1x10, 1, 10, Q4, 0)                                                                          \
    PQ_DEF_TILE(P##_1x11, 1, 11, Q4, 0)                                                                          \
    PQ_DEF_TILE(P##_1x12, 1, 12, Q4, 0)                                                                          \
    static const pq_tile_fn P##_tiles[PQ_TILE_COLS + 1] = {NULL,      P##_1x1,  P##_1x2,  P##_1x3, P##_1x4,      \
                                                           P##_1x5,   P##_1x6,  P##_1x7,  P##_1x8, P##_1x9,      \
                                                           P##_1x10,  P##_1x11, P##_1x12};

PQ_DEF_TILES(q8t, 0)
PQ_DEF_TILES(q4t, 1)

/* ---------------------------------------------------------------- gemm */

/* Activation bytes per column panel: the panel's levels stay in L2 while
 * every group of the call passes over them. */
#define PQ_PANEL_BYTES ((size_t)1024 * 1024)

static __mmask16 pq_row_mask(int64_t n_rows, int64_t g) {
    const int64_t left = n_rows - g * PQ_ROWS;
    return left >= PQ_ROWS ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

static void pq_gemm(const void *vpacked, int64_t n_rows, int64_t g0, int64_t g1, const void *vx, size_t xs,
                    int64_t n_cols, int64_t n, float *out, int64_t os, int q4) {
    const uint8_t *packed = vpacked, *x = vx;
    const int64_t nb = n / 32;
    if (g1 <= g0 || n_cols <= 0) return;
    if (nb == 0) {
        for (int64_t g = g0; g < g1; g++)
            for (int i = 0; i < PQ_ROWS && g * PQ_ROWS + i < n_rows; i++)
                for (int64_t c = 0; c < n_cols; c++) out[c * os + g * PQ_ROWS + i] = 0.0f;
        return;
    }
    const size_t gb = pq_group_bytes(n, q4);
    const pq_tile_fn *tiles = q4 ? q4t_tiles : q8t_tiles;
    const pq_tile_fn one_x4 = q4 ? q4t_4x1 : q8t_4x1;
    /* Columns per panel: about PQ_PANEL_BYTES of levels, a multiple of the
     * tile width, split evenly over the panels. */
    int64_t panel = (int64_t)(PQ_PANEL_BYTES / ((size_t)nb * PQ_Q8_SIZE));
    panel -= panel % PQ_TILE_COLS;
    if (panel < PQ_TILE_COLS) panel = PQ_TILE_COLS;
    if (panel > n_cols) panel = n_cols;
    else {
        const int64_t count = (n_cols + panel - 1) / panel;
        panel = ((n_cols + count - 1) / count + PQ_TILE_COLS - 1) / PQ_TILE_COLS * PQ_TILE_COLS;
    }
    pq_entry stack_tab[512];
    pq_entry *tab = stack_tab;
    if ((size_t)(panel * nb) > sizeof stack_tab / sizeof stack_tab[0]) {
        tab = aligned_alloc(64, ((size_t)(panel * nb) * sizeof(pq_entry) + 63) / 64 * 64);
        if (!tab) {
            pq_gemm_scalar(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os, q4);
            return;
        }
    }
    for (int64_t c0 = 0; c0 < n_cols; c0 += panel) {
        const int64_t cols = n_cols - c0 < panel ? n_cols - c0 : panel;
        const uint8_t *xp = x + (size_t)c0 * xs;
        pq_build_table(xp, xs, cols, nb, q4, tab);
        int64_t g = g0;
        if (cols == 1) {
            /* decoding: four groups at a time, for more loads in flight */
            for (; g + 4 <= g1 && (g + 4) * PQ_ROWS <= n_rows; g += 4) {
                const __mmask16 m[4] = {0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF};
                one_x4(packed + (size_t)g * gb, gb, nb, xp, xs, tab, out + c0 * os + g * PQ_ROWS, os, m);
            }
        }
        for (; g < g1; g++) {
            const __mmask16 m = pq_row_mask(n_rows, g);
            for (int64_t t0 = 0; t0 < cols; t0 += PQ_TILE_COLS) {
                const int64_t C = cols - t0 < PQ_TILE_COLS ? cols - t0 : PQ_TILE_COLS;
                tiles[C](packed + (size_t)g * gb, gb, nb, xp + (size_t)t0 * xs, xs, tab + t0 * nb,
                         out + (c0 + t0) * os + g * PQ_ROWS, os, &m);
            }
        }
    }
    if (tab != stack_tab) free(tab);
}

static void q8p_gemm(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                     int64_t n_cols, int64_t n, float *out, int64_t os) {
    pq_gemm(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os, 0);
}
static void q4p_gemm(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                     int64_t n_cols, int64_t n, float *out, int64_t os) {
    pq_gemm(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os, 1);
}

void tela_qdot_fill_packed_q8_avx512(tela_qdot_isa_table *t) {
    t->packing[TELA_TYPE_Q8_0] = (tela_qdot_packing){PQ_ROWS, q8p_group_bytes, q8p_pack, q8p_gemm};
    t->packing[TELA_TYPE_Q4_0] = (tela_qdot_packing){PQ_ROWS, q4p_group_bytes, q4p_pack, q4p_gemm};
}

#endif
