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
 * one instruction with a broadcast operand (4 levels of one activation
 * column) does 4 multiply-adds for each of the 16 rows:
 *   isum[r] = -off * sum(x_b) + sum_k (w[r][k] + off) * x[k] = sum_k w x,
 * off = 128 (Q8_0) or 8 (Q4_0). The start value -off * sum(x_b) of every
 * column and block is computed once per gemm call and column panel into a
 * small table, next to the column's block scale as a float. A tile is 2
 * groups x 6 activation columns: 12 int32 and 12 float accumulators of 16
 * rows stay in registers, each weight vector is loaded once for 6 columns
 * and each broadcast serves both groups. Per block, column and group that
 * is 8 VPDPBUSD + convert, multiply and FMA: 11 vector operations for 512
 * multiply-adds, so the tile can reach 8/11 of the VPDPBUSD peak (it gets
 * ~85% of that with data in L1). Q4_0 nibbles are unpacked to bytes once
 * per pair of groups and column panel (not per tile); decoding (one
 * column) runs 4 groups at a time, memory-bound; every tile prefetches.
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
#if defined(__clang__)
#define PQ_UNROLL _Pragma("clang loop unroll(full)")
#else
#define PQ_UNROLL _Pragma("GCC unroll 16")
#endif

#define PQ_ROWS 16     /* rows per group: one int32 lane each */
#define PQ_Q8_SIZE 34  /* a Q8_0 block: fp16 d, 32 int8 */
#define PQ_Q4_SIZE 18  /* a Q4_0 block: fp16 d, 16 bytes of nibbles */
/* A tile is 2 groups x 6 columns: 12 int32 and 12 float accumulators, 2
 * weight vectors and 2 scale vectors in the 32 vector registers; each
 * broadcast activation operand serves both groups (measured ~10% faster
 * than 1 x 12, 1 x 8 or 4 x 3 with gcc 12, on par with 3 x 4 with clang). */
#define PQ_TILE_COLS 6
#define PQ_TILE_GROUPS 2

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

/* The contract written out, for when there is no memory for the
 * activation table of even one column (see pq_gemm); the vector kernels
 * match it bit for bit. */
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

/* The kernels read the activation levels straight from the Q8_0 rows; the
 * start values -off * sum(levels) and the block scales (as floats) of a
 * panel of columns are computed once per gemm call into a table laid out
 * for both sides: tiles of up to 6 columns; in a tile, octets of 8 blocks;
 * in an octet, [C columns x 8 int32 start values][C columns x 8 float
 * scales]. The builder writes each column's 8 values of an octet with one
 * vector store, and the kernel reads them at constant offsets (8c, 8C + 8c)
 * from one pointer per block. The tile holding local columns [t0, t0 + C)
 * starts at entry t0 * 16 * ceil(nb / 8). */
static inline int64_t pq_octets(int64_t nb) { return (nb + 7) / 8; }

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
    /* 128-bit lanes of t0: pair sums of block 0 (lo, hi), block 1 (lo, hi),
     * each lane holding (z0's, z1's) */
    const __m512i t0 = _mm512_add_epi64(_mm512_unpacklo_epi64(z[0], z[1]), _mm512_unpackhi_epi64(z[0], z[1]));
    const __m512i t1 = _mm512_add_epi64(_mm512_unpacklo_epi64(z[2], z[3]), _mm512_unpackhi_epi64(z[2], z[3]));
    /* qwords: blocks 0, 2, 1, 3, 4, 6, 5, 7 */
    const __m512i u = _mm512_add_epi64(_mm512_shuffle_i64x2(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i64x2(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i o = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 1, 3, 4, 6, 5, 7), u);
    return _mm512_cvtepi64_epi32(o);
}

/* The fp16 scales of blocks b..b+7 (block b at p) as floats; pairs of
 * scales go into 32-bit words first (fewer vector inserts). */
PQ_INL __m256 pq_scales8(const uint8_t *p) {
    uint32_t h[4];
    PQ_UNROLL for (int i = 0; i < 4; i++)
        h[i] = (uint32_t)pq_rd16(p + 2 * i * PQ_Q8_SIZE) | (uint32_t)pq_rd16(p + (2 * i + 1) * PQ_Q8_SIZE) << 16;
    return _mm256_cvtph_ps(_mm_setr_epi32((int)h[0], (int)h[1], (int)h[2], (int)h[3]));
}

/* Fills the table (see above) of cols Q8_0 rows at x, xs bytes apart. */
static PQ_TGT void pq_build_table(const uint8_t *x, size_t xs, int64_t cols, int64_t nb, int q4, uint32_t *tab) {
    const int shift = q4 ? 3 : 7; /* off = 8 or 128 */
    const int64_t no = pq_octets(nb);
    for (int64_t c = 0; c < cols; c++) {
        const uint8_t *xc = x + (size_t)c * xs;
        const int64_t t0 = c / PQ_TILE_COLS * PQ_TILE_COLS;
        const int64_t C = cols - t0 < PQ_TILE_COLS ? cols - t0 : PQ_TILE_COLS;
        uint32_t *corr = tab + 16 * t0 * no + 8 * (c - t0), *dx = corr + 8 * C; /* octet 0's entries */
        const size_t step = 16 * (size_t)C;                                      /* between octets */
        int64_t b = 0;
        for (; b + 8 <= nb; b += 8, corr += step, dx += step) {
            const uint8_t *p = xc + (size_t)b * PQ_Q8_SIZE;
            /* -off * sum(x) = off * (32 * 128 - sum(x + 128)) */
            const __m256i cv = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(32 * 128), pq_sums8(p)), shift);
            _mm256_storeu_si256((__m256i *)corr, cv);
            _mm256_storeu_ps((float *)dx, pq_scales8(p));
        }
        for (int i = 0; b < nb; b++, i++) {
            const uint8_t *p = xc + (size_t)b * PQ_Q8_SIZE;
            int32_t sum = 0;
            for (int k = 0; k < 32; k++) sum += (int8_t)p[2 + k];
            const float d = _cvtsh_ss(pq_rd16(p));
            corr[i] = (uint32_t)(-sum * (1 << shift));
            memcpy(&dx[i], &d, 4);
        }
    }
}

/* ------------------------------------------------------------- kernels */

/* Every tile streams its weights from memory: each group's level vectors
 * are requested this many blocks ahead of use (the tiles of several
 * columns too: without it their weight loads stalled the steps of
 * batched decode, docs/PERF-NOTES.md "Batched decode"). */
#ifndef PQ_PREFETCH_BLOCKS
#define PQ_PREFETCH_BLOCKS 4
#endif

/* Where a tile's weights are: the fp16 scales of group 0 at sc (block b at
 * sc + 32 b), its level vectors at lv (block b at lv + b * level bytes),
 * group gi's at sc + gi * sstride and lv + gi * lstride. The levels are
 * the packed group's own, or (Q4_0 with several columns) a copy with the
 * nibbles unpacked to bytes (pq_unpack_q4), read like Q8_0 levels. */
typedef struct {
    const uint8_t *sc, *lv;
    size_t sstride, lstride;
    /* bytes [0, pf_len) at pf to prefetch into L2 during the tile, pf_per
     * of them with each block (the next pair of groups' slice; see
     * PQ_PF_SPREAD) */
    const uint8_t *pf;
    size_t pf_len, pf_per;
} pq_wview;

/* 1: a tile's share of the next pair of groups is prefetched into L2 a
 * few lines with each of its blocks; 0: all of it before the tile starts.
 * The burst (~540 lines for 8 columns of a 2,048-wide row) fills the
 * core's queue of L2 misses while the tile computes nothing, the pattern
 * that round 3 removed from the K-quant tiles: spread, the 8-column gemm
 * of an 8,192 x 2,048 Q8_0 matrix went from 58-66 to 76-84 GMAC/s on one
 * thread of an Ice Lake Xeon (docs/PERF-NOTES.md, "CPU, batched decode
 * round 4"). A build-time knob. */
#ifndef PQ_PF_SPREAD
#define PQ_PF_SPREAD 1
#endif
/* ... where a tile's share is at least this many bytes (a few tiles of
 * columns: batched decode). Prefill's shares are a few lines a tile and
 * stay a burst (spread, pp512 measured no better: 99-110 against 98-120
 * tok/s, the noise of the VM). */
#define PQ_PF_SPREAD_MIN 4096

/* One tile: G consecutive groups x C columns (at x, xs bytes apart; their
 * table entries at tab). nib: the levels are packed nibbles (else bytes:
 * Q8_0's, or unpacked Q4_0's). Writes the rows whose bit is set in
 * rmask[gi] of each group. */
PQ_INL void pq_tile(const pq_wview *wv, int64_t nb, const uint8_t *x, size_t xs, const uint32_t *tab, float *out,
                    int64_t os, const __mmask16 *rmask, const int G, const int C, const int nib) {
    const size_t lb = pq_level_bytes(nib), ss = wv->sstride, ls = wv->lstride;
    __m512 fa[PQ_TILE_GROUPS * PQ_TILE_COLS];
    PQ_UNROLL for (int p = 0; p < G * C; p++) fa[p] = _mm512_setzero_ps();
    const uint8_t *xc[PQ_TILE_COLS];
    PQ_UNROLL for (int c = 0; c < C; c++) xc[c] = x + (size_t)c * xs + 2;
    const uint8_t *lv = wv->lv, *sc = wv->sc;
    for (int64_t b = 0; b < nb; b++, lv += lb, sc += 32) {
        const size_t xo = (size_t)b * PQ_Q8_SIZE;
        const uint32_t *te = tab + (b >> 3) * 16 * C + (b & 7); /* this block's table entries */
        if (PQ_PF_SPREAD && wv->pf_len > (size_t)b * wv->pf_per) {
            const size_t s0 = (size_t)b * wv->pf_per, e = s0 + wv->pf_per < wv->pf_len ? s0 + wv->pf_per : wv->pf_len;
            for (size_t o = s0; o < e; o += 64) _mm_prefetch((const char *)wv->pf + o, _MM_HINT_T1);
        }
        PQ_UNROLL for (int gi = 0; gi < G; gi++)
            PQ_UNROLL for (size_t o = 0; o < lb; o += 64)
                _mm_prefetch((const char *)lv + gi * ls + PQ_PREFETCH_BLOCKS * lb + o, _MM_HINT_T0);
        __m512 dw[4];
        PQ_UNROLL for (int gi = 0; gi < G; gi++)
            dw[gi] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(sc + gi * ss)));
        __m512i ia[PQ_TILE_GROUPS * PQ_TILE_COLS];
        PQ_UNROLL for (int gi = 0; gi < G; gi++)
            PQ_UNROLL for (int c = 0; c < C; c++) ia[gi * C + c] = _mm512_set1_epi32((int)te[8 * c]);
        if (!nib) {
            PQ_UNROLL for (int j = 0; j < 8; j++) {
                PQ_UNROLL for (int gi = 0; gi < G; gi++) {
                    const __m512i w = _mm512_load_si512((const void *)(lv + gi * ls + 64 * j));
                    PQ_UNROLL for (int c = 0; c < C; c++)
                        ia[gi * C + c] = _mm512_dpbusd_epi32(ia[gi * C + c], w,
                                                             _mm512_set1_epi32((int)pq_rd32(xc[c] + xo + 4 * j)));
                }
            }
        } else {
            const __m512i m4 = _mm512_set1_epi8(0x0F);
            PQ_UNROLL for (int j = 0; j < 4; j++) {
                PQ_UNROLL for (int gi = 0; gi < G; gi++) {
                    const __m512i v = _mm512_load_si512((const void *)(lv + gi * ls + 64 * j));
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
                float d;
                memcpy(&d, te + 8 * C + 8 * c, 4);
                const __m512 s = _mm512_mul_ps(dw[gi], _mm512_set1_ps(d));
                fa[gi * C + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[gi * C + c]), s, fa[gi * C + c]);
            }
    }
    PQ_UNROLL for (int gi = 0; gi < G; gi++)
        PQ_UNROLL for (int c = 0; c < C; c++)
            _mm512_mask_storeu_ps(out + c * os + gi * PQ_ROWS, rmask[gi], fa[gi * C + c]);
}

typedef void (*pq_tile_fn)(const pq_wview *, int64_t, const uint8_t *, size_t, const uint32_t *, float *, int64_t,
                           const __mmask16 *);

#define PQ_DEF_TILE(NAME, G, C, NIB)                                                                             \
    static PQ_TGT void NAME(const pq_wview *wv, int64_t nb, const uint8_t *x, size_t xs, const uint32_t *tab,    \
                            float *out, int64_t os, const __mmask16 *rmask) {                                    \
        pq_tile(wv, nb, x, xs, tab, out, os, rmask, G, C, NIB);                                                  \
    }
#define PQ_DEF_TILES(P, NIB)                                                                                     \
    PQ_DEF_TILE(P##_4x1, 4, 1, NIB)                                                                              \
    PQ_DEF_TILE(P##_1x1, 1, 1, NIB)                                                                              \
    PQ_DEF_TILE(P##_1x2, 1, 2, NIB)                                                                              \
    PQ_DEF_TILE(P##_1x3, 1, 3, NIB)                                                                              \
    PQ_DEF_TILE(P##_1x4, 1, 4, NIB)                                                                              \
    PQ_DEF_TILE(P##_1x5, 1, 5, NIB)                                                                              \
    PQ_DEF_TILE(P##_1x6, 1, 6, NIB)                                                                              \
    PQ_DEF_TILE(P##_2x1, 2, 1, NIB)                                                                              \
    PQ_DEF_TILE(P##_2x2, 2, 2, NIB)                                                                              \
    PQ_DEF_TILE(P##_2x3, 2, 3, NIB)                                                                              \
    PQ_DEF_TILE(P##_2x4, 2, 4, NIB)                                                                              \
    PQ_DEF_TILE(P##_2x5, 2, 5, NIB)                                                                              \
    PQ_DEF_TILE(P##_2x6, 2, 6, NIB)                                                                              \
    static const pq_tile_fn P##_tiles[PQ_TILE_GROUPS + 1][PQ_TILE_COLS + 1] = {                                  \
        {NULL}, {NULL, P##_1x1, P##_1x2, P##_1x3, P##_1x4, P##_1x5, P##_1x6},                                      \
        {NULL, P##_2x1, P##_2x2, P##_2x3, P##_2x4, P##_2x5, P##_2x6}};

PQ_DEF_TILES(pq8, 0) /* byte levels */
PQ_DEF_TILES(pq4, 1) /* nibble levels */

/* Copies the nibble levels of groups [0, G) at lv (lstride apart) to bytes
 * at dst (nb * 512 bytes per group): vector j < 4 of a block = the low
 * nibbles of packed vector j (elements 4j..4j+3), j >= 4 the high nibbles
 * of vector j - 4 (elements 16 + ...), the order of the Q8_0 layout. Done
 * once per group and column panel instead of once per 6-column tile, it
 * takes three operations per vector out of the tiles. */
static PQ_TGT void pq_unpack_q4(const uint8_t *lv, size_t lstride, int G, int64_t nb, uint8_t *dst) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int gi = 0; gi < G; gi++) {
        const uint8_t *src = lv + (size_t)gi * lstride;
        for (int64_t b = 0; b < nb; b++, src += 256, dst += 512) {
            PQ_UNROLL for (int j = 0; j < 4; j++) {
                const __m512i v = _mm512_load_si512((const void *)(src + 64 * j));
                _mm512_store_si512((void *)(dst + 64 * j), _mm512_and_si512(v, m4));
                _mm512_store_si512((void *)(dst + 256 + 64 * j), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
            }
        }
    }
}

/* ---------------------------------------------------------------- gemm */

/* Columns per panel: the panel's activation rows (about PQ_PANEL_BYTES)
 * stay in L2 while every group of the call passes over them. Tables up to
 * PQ_TABLE_BYTES (decoding, small batches) go on the stack, larger ones on
 * the heap. */
#ifndef PQ_PANEL_BYTES
#define PQ_PANEL_BYTES ((size_t)1024 * 1024)
#endif
#ifndef PQ_TABLE_BYTES
#define PQ_TABLE_BYTES ((size_t)16 * 1024)
#endif

static __mmask16 pq_row_mask(int64_t n_rows, int64_t g) {
    const int64_t left = n_rows - g * PQ_ROWS;
    return left >= PQ_ROWS ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

static void pq_gemm(const void *vpacked, int64_t n_rows, int64_t g0, int64_t g1, const void *vx, size_t xs,
                    int64_t n_cols, int64_t n, float *out, int64_t os, int q4) {
    const uint8_t *packed = vpacked, *x = vx;
    const int64_t nb = n / 32;
    if (g1 <= g0 || n_cols <= 0) return;
    /* many columns: the AMX tiles where the CPU has them (the same bits) */
    if ((q4 ? tela_qdot_amx_gemm_q4_0 : tela_qdot_amx_gemm_q8_0)(vpacked, n_rows, g0, g1, vx, xs, n_cols, n, out, os))
        return;
    if (nb == 0) {
        for (int64_t g = g0; g < g1; g++)
            for (int i = 0; i < PQ_ROWS && g * PQ_ROWS + i < n_rows; i++)
                for (int64_t c = 0; c < n_cols; c++) out[c * os + g * PQ_ROWS + i] = 0.0f;
        return;
    }
    const size_t gb = pq_group_bytes(n, q4), sb = pq_scale_bytes(nb);
    /* The panel: about PQ_PANEL_BYTES of activations, a multiple of the
     * tile width where possible, the columns split evenly over the panels.
     * Its table lives on the stack if it fits, else on the heap with (for
     * Q4_0 with more than one tile of columns) a buffer for unpacking each
     * pair of groups once per panel; without that memory, a smaller panel
     * and the nibble tiles. */
    int64_t panel = (int64_t)(PQ_PANEL_BYTES / ((size_t)nb * PQ_Q8_SIZE));
    if (panel < 1) panel = 1;
    if (panel > n_cols) panel = n_cols;
    const size_t ubytes = q4 && n_cols > PQ_TILE_COLS ? (size_t)nb * 512 * PQ_TILE_GROUPS : 0;
    const size_t tbytes = (size_t)(panel * pq_octets(nb)) * 64;
    _Alignas(64) uint32_t stack_tab[PQ_TABLE_BYTES / 4];
    uint32_t *tab = stack_tab;
    uint8_t *heap = NULL, *unpacked = NULL;
    if (ubytes || tbytes > sizeof stack_tab) {
        heap = aligned_alloc(64, tbytes + ubytes);
        if (heap) {
            tab = (uint32_t *)heap;
            if (ubytes) unpacked = heap + tbytes;
        }
    }
    if (!heap) {
        const int64_t tmax = (int64_t)(sizeof stack_tab / ((size_t)pq_octets(nb) * 64));
        if (tmax < 1) { /* out of memory and n > 65536 */
            pq_gemm_scalar(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os, q4);
            return;
        }
        if (panel > tmax) panel = tmax;
    }
    if (panel < n_cols) {
        if (panel >= PQ_TILE_COLS) panel -= panel % PQ_TILE_COLS;
        const int64_t count = (n_cols + panel - 1) / panel;
        const int64_t even = ((n_cols + count - 1) / count + PQ_TILE_COLS - 1) / PQ_TILE_COLS * PQ_TILE_COLS;
        if (even <= panel) panel = even;
    }
    const pq_tile_fn(*tiles)[PQ_TILE_COLS + 1] = q4 && !unpacked ? pq4_tiles : pq8_tiles;
    for (int64_t c0 = 0; c0 < n_cols; c0 += panel) {
        const int64_t cols = n_cols - c0 < panel ? n_cols - c0 : panel;
        const uint8_t *xp = x + (size_t)c0 * xs;
        pq_build_table(xp, xs, cols, nb, q4, tab);
        int64_t g = g0;
        if (cols == 1) {
            /* decoding: four groups at a time, for more loads in flight */
            for (; g + 4 <= g1 && (g + 4) * PQ_ROWS <= n_rows; g += 4) {
                const __mmask16 m[4] = {0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF};
                const uint8_t *grp = packed + (size_t)g * gb;
                const pq_wview wv = {grp, grp + sb, gb, gb, NULL, 0, 0};
                (q4 ? pq4_4x1 : pq8_4x1)(&wv, nb, xp, xs, tab, out + c0 * os + g * PQ_ROWS, os, m);
            }
        }
        for (; g < g1; g += PQ_TILE_GROUPS) {
            const int G = g1 - g < PQ_TILE_GROUPS ? (int)(g1 - g) : PQ_TILE_GROUPS;
            __mmask16 m[PQ_TILE_GROUPS];
            for (int i = 0; i < G; i++) m[i] = pq_row_mask(n_rows, g + i);
            const uint8_t *grp = packed + (size_t)g * gb;
            pq_wview wv = {grp, grp + sb, gb, gb, NULL, 0, 0};
            if (unpacked) {
                pq_unpack_q4(grp + sb, gb, G, nb, unpacked);
                wv.lv = unpacked;
                wv.lstride = (size_t)nb * 512;
            }
            /* the next pair's bytes, a slice per tile, into L2: without
             * this the first tile of each pair waits on memory */
            const int64_t gn = g1 - g - G < PQ_TILE_GROUPS ? g1 - g - G : PQ_TILE_GROUPS;
            const uint8_t *next = grp + (size_t)G * gb;
            const size_t ntiles = (size_t)((cols + PQ_TILE_COLS - 1) / PQ_TILE_COLS);
            const size_t slice = ((size_t)gn * gb / ntiles + 63) / 64 * 64, next_end = (size_t)gn * gb;
            size_t pf = 0;
            for (int64_t t0 = 0; t0 < cols; t0 += PQ_TILE_COLS) {
                const int64_t C = cols - t0 < PQ_TILE_COLS ? cols - t0 : PQ_TILE_COLS;
                const size_t e = pf + slice < next_end ? pf + slice : next_end;
                if (PQ_PF_SPREAD && slice >= PQ_PF_SPREAD_MIN) {
                    wv.pf = next + pf;
                    wv.pf_len = e > pf ? e - pf : 0;
                    wv.pf_per = ((wv.pf_len + (size_t)nb - 1) / (size_t)nb + 63) / 64 * 64;
                    pf = e > pf ? e : pf;
                } else {
                    wv.pf_len = 0;
                    for (; pf < e; pf += 64) _mm_prefetch((const char *)next + pf, _MM_HINT_T1);
                }
                tiles[G][C](&wv, nb, xp + (size_t)t0 * xs, xs, tab + 16 * t0 * pq_octets(nb),
                            out + (c0 + t0) * os + g * PQ_ROWS, os, m);
            }
        }
    }
    free(heap);
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
