/* qdot_avx512.c: dot-product and gemm-tile kernels for x86-64 CPUs with
 * AVX-512 F/BW/VL/DQ and VNNI (Zen 4/5, Ice Lake and later). Every function
 * carries its own target attribute, so the file compiles without
 * -march=native and the dispatcher (qdot.c) picks it by CPUID.
 *
 * Integer products of Q4_0/Q8_0 use VPDPBUSD (u8 x s8, four products
 * summed into each int32 lane), which needs one unsigned operand: Q4_0's
 * nibbles are unsigned (w + 8) and signed Q8_0 weights are shifted to
 * unsigned (w + 128, a sign-bit flip); the offset is removed by starting
 * the accumulator at -offset * sum(x), computed once per activation block.
 * The K-quants' levels (at most 6 bits) go through VPMADDUBSW (u8 x s8
 * pairs summed to int16, which cannot saturate: 2 * 63 * 128 < 2^15), then
 * VPDPWSSD multiplies those by the sub-block scales and accumulates in
 * int32; both write a fresh register, so no accumulator needs zeroing.
 *
 * A tile kernel computes R weight rows x C activation rows (R, C in {1, 4})
 * from one always-inline template, so each output of a 4x4 tile goes
 * through exactly the float operations of the 1x1 vec_dot, which are the
 * scalar kernels' (qdot.c):
 *  - 32-element block types and float types keep a 16-lane float
 *    accumulator per output, summed in a fixed order at the end;
 *  - K-quants sum each super-block's integer result across lanes exactly,
 *    then do the scalar float step (one lane per output).
 * Decoding (C = 1) prefetches the weight rows; gemms with several columns
 * prepare each 4-row tile once per column panel (b32_gemm, k_gemm). */
#include "backend/cpu/qdot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "util/fp16.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")))
#define INL static inline __attribute__((always_inline)) TGT

/* GCC and clang both honor this for the constant-trip inner loops below;
 * full unrolling is what keeps the per-output accumulators in registers. */
/* clang reads "GCC unroll N" as a count it may ignore: ask it for full
 * unrolling, which is what keeps the accumulator arrays in registers. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

static inline uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* Sum of 16 floats in a fixed order (halves, then quarters, ...). */
INL float hsum_ps(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* Writes a tile's results: lane p = r * C + c of v is out[c][r]. */
INL void store_tile(__m512 v, float *out, int64_t os, const int R, const int C) {
    float t[16];
    _mm512_storeu_ps(t, v);
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int c = 0; c < C; c++) out[c * os + r] = t[r * C + c];
}

/* Decoding (one activation column) streams the weights from memory, with
 * little work per byte: ask for each row's bytes ~1 KB ahead of use, on top
 * of the hardware prefetchers (worth ~15% measured on a loaded Xeon). With
 * several columns the tile is compute-bound and the rows stay in cache. */
#ifndef TELA_QDOT_PREFETCH
#define TELA_QDOT_PREFETCH 1024
#endif
INL void prefetch_rows(const uint8_t *p, size_t ws, size_t bytes, const int R, const int C) {
    if (C != 1 || TELA_QDOT_PREFETCH == 0) return;
    UNROLL for (int r = 0; r < R; r++)
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + r * ws + TELA_QDOT_PREFETCH + o, _MM_HINT_T0);
}

/* v with its 128-bit block pos replaced by x (pos a constant once inlined;
 * a switch keeps the immediate operand constant in unoptimized builds). */
INL __m512i insert128(__m512i v, __m128i x, int pos) {
    switch (pos) {
    case 0: return _mm512_inserti32x4(v, x, 0);
    case 1: return _mm512_inserti32x4(v, x, 1);
    case 2: return _mm512_inserti32x4(v, x, 2);
    default: return _mm512_inserti32x4(v, x, 3);
    }
}

/* Lane p -> per-row value index (p / C) and per-column index (p % C). */
INL __m512i row_index(const int C) {
    return _mm512_setr_epi32(0 / C, 1 / C, 2 / C, 3 / C, 4 / C, 5 / C, 6 / C, 7 / C, 8 / C, 9 / C, 10 / C, 11 / C,
                             12 / C, 13 / C, 14 / C, 15 / C);
}
INL __m512i col_index(const int C) {
    return _mm512_setr_epi32(0 % C, 1 % C, 2 % C, 3 % C, 4 % C, 5 % C, 6 % C, 7 % C, 8 % C, 9 % C, 10 % C, 11 % C,
                             12 % C, 13 % C, 14 % C, 15 % C);
}

/* ------------------------------------------------ activation quantizers */

/* roundf (halves away from zero), clamped to [-128, 127], NaN -> 0: the
 * reference quantizer's round_i8, lane-wise. trunc(v) and v - trunc(v) are
 * exact, so the half test is exact too. */
INL __m512i round_i8(__m512 v) {
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_andnot_ps(sign, _mm512_sub_ps(v, t));
    const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 one = _mm512_or_ps(_mm512_and_ps(v, sign), _mm512_set1_ps(1.0f));
    t = _mm512_mask_add_ps(t, up, t, one);
    t = _mm512_min_ps(t, _mm512_set1_ps(127.0f));
    t = _mm512_max_ps(t, _mm512_set1_ps(-128.0f));
    t = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), t);
    return _mm512_cvttps_epi32(t);
}

static TGT void q8_0_from_float(const float *x, void *vy, int64_t n) {
    uint8_t *y = vy;
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    for (int64_t b = 0; b < n / 32; b++, x += 32, y += sizeof(tela_block_q8_0)) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        /* MAXPS returns its second operand when either is NaN, so a NaN
         * never becomes the maximum (as in the reference). */
        __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_setzero_ps());
        m = _mm512_max_ps(_mm512_andnot_ps(sign, v1), m);
        const float amax = _mm512_reduce_max_ps(m);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = tela_f32_to_f16(d);
        memcpy(y, &dh, 2);
        const __m512 vid = _mm512_set1_ps(id);
        _mm_storeu_si128((__m128i *)(y + 2), _mm512_cvtepi32_epi8(round_i8(_mm512_mul_ps(v0, vid))));
        _mm_storeu_si128((__m128i *)(y + 18), _mm512_cvtepi32_epi8(round_i8(_mm512_mul_ps(v1, vid))));
    }
}

/* Q8_K: scale from the signed value of largest magnitude (the first one on
 * a tie), levels by the reference's nearest_int (add 1.5 * 2^23, read the
 * mantissa bits), which is defined for every input, NaN included. */
static TGT void q8_K_from_float(const float *x, void *vy, int64_t n) {
    uint8_t *y = vy;
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    for (int64_t b = 0; b < n / 256; b++, x += 256, y += sizeof(tela_block_q8_K)) {
        __m512 m = _mm512_setzero_ps();
        for (int k = 0; k < 16; k++) m = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * k)), m);
        const float amax = _mm512_reduce_max_ps(m);
        if (amax == 0.0f) {
            memset(y, 0, sizeof(tela_block_q8_K));
            continue;
        }
        float max = 0.0f;
        const __m512 vamax = _mm512_set1_ps(amax);
        for (int k = 0; k < 16; k++) {
            const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * k)), vamax, _CMP_EQ_OQ);
            if (hit) {
                max = x[16 * k + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        int16_t bsums[16];
        for (int k = 0; k < 16; k++) {
            const __m512 biased = _mm512_add_ps(_mm512_mul_ps(vs, _mm512_loadu_ps(x + 16 * k)), _mm512_set1_ps(12582912.0f));
            __m512i q = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(biased), _mm512_set1_epi32(0x7fffff)),
                                         _mm512_set1_epi32(0x400000));
            q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-128)), _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(y + 4 + 16 * k), _mm512_cvtepi32_epi8(q));
            bsums[k] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        const float d = 1 / iscale;
        memcpy(y, &d, 4);
        memcpy(y + offsetof(tela_block_q8_K, bsums), bsums, sizeof bsums);
    }
}

/* ------------------------------------------------------- float weights */

/* Loads 16 weights of each float type as f32; m masks a partial tail. */
INL __m512 ld_f32(const uint8_t *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
INL __m512 ld_f16(const uint8_t *p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
INL __m512 ld_bf16(const uint8_t *p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

/* One 16-lane FMA chain per output; 16 elements a step. */
#define FLOAT_TILE(NAME, LOAD, ESIZE)                                                                            \
    INL void NAME##_tile(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out,      \
                         int64_t os, const int R, const int C) {                                                  \
        __m512 acc[16];                                                                                            \
        UNROLL for (int p = 0; p < R * C; p++) acc[p] = _mm512_setzero_ps();                                     \
        int64_t i = 0;                                                                                             \
        for (; i < n; i += 16) {                                                                                   \
            const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);              \
            __m512 wv[4];                                                                                          \
            UNROLL for (int r = 0; r < R; r++) wv[r] = LOAD(w + r * ws + i * (ESIZE), m);                         \
            UNROLL for (int c = 0; c < C; c++) {                                                                   \
                const __m512 xv = _mm512_maskz_loadu_ps(m, x + c * xs + i * 4);                                    \
                UNROLL for (int r = 0; r < R; r++) acc[r * C + c] = _mm512_fmadd_ps(wv[r], xv, acc[r * C + c]);  \
            }                                                                                                      \
        }                                                                                                          \
        UNROLL for (int r = 0; r < R; r++)                                                                         \
            UNROLL for (int c = 0; c < C; c++) out[c * os + r] = hsum_ps(acc[r * C + c]);                        \
    }

FLOAT_TILE(f32, ld_f32, 4)
FLOAT_TILE(f16, ld_f16, 2)
FLOAT_TILE(bf16, ld_bf16, 2)

/* ------------------------------------ 32-element blocks x Q8_0 activations */

#define Q8_0_SIZE 34 /* sizeof(tela_block_q8_0): fp16 d, then 32 int8 */
#define Q4_0_SIZE 18 /* fp16 d, then 16 bytes of nibbles */

/* Activation blocks b and b+1 (b+1 only if two) of a Q8_0 row: the 64
 * int8 levels (upper half zero for one block). */
INL __m512i q8_0_levels(const uint8_t *p, int two) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)(p + 2));
    if (!two) return _mm512_zextsi256_si512(lo);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)(p + Q8_0_SIZE + 2)), 1);
}

/* Q4_0 weights: two blocks' nibbles in element order, lanes 0-31 block b. */
INL __m512i q4_0_levels(const uint8_t *p, int two) {
    const __m128i q0 = _mm_loadu_si128((const __m128i *)(p + 2));
    const __m128i q1 = two ? _mm_loadu_si128((const __m128i *)(p + Q4_0_SIZE + 2)) : _mm_setzero_si128();
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
    z = _mm512_and_si512(z, _mm512_set1_epi8(0x0F)); /* q0 lo, q1 lo, q0 hi, q1 hi */
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

/* The fp16 scales of blocks b, b+1 of up to four rows of bsize-byte blocks
 * (scale first) as floats, block-major: lane 4 * blk + i. */
INL __m256 gather_scales(const uint8_t *p, size_t stride, size_t bsize, int two, const int N) {
    /* pairs of 16-bit scales in 32-bit words: the cheapest way into a
     * vector from scalar loads (16-bit inserts are slower) */
    uint32_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    UNROLL for (int i = 0; i < N; i++) {
        h[i] = rd16(p + i * stride);
        if (two) h[4 + i] = rd16(p + i * stride + bsize);
    }
    return _mm256_cvtph_ps(_mm_setr_epi32((int)(h[0] | h[1] << 16), (int)(h[2] | h[3] << 16), (int)(h[4] | h[5] << 16),
                                          (int)(h[6] | h[7] << 16)));
}

/* Element i's two scales spread over 16 lanes: 8 of block b, 8 of b+1. */
INL __m512 spread_scales(__m256 s, int i) {
    const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(i),
                                         _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4));
    return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(s));
}

/* Q8_0 and Q4_0 weights (q4 = 1), two blocks a step. Weight levels are
 * made unsigned (Q8_0: w + 128 by flipping the sign bit; Q4_0: the stored
 * nibble, i.e. w + 8), so dpbusd(-off * sum(x), u, x) = sum(w * x) per
 * lane, the start -off * sum(x) being computed once per column. */
INL void b32_step(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t b, int two, __m512 *acc,
                  const int R, const int C, const int q4) {
    const size_t wsize = q4 ? Q4_0_SIZE : Q8_0_SIZE;
    const __m512i off = _mm512_set1_epi8(q4 ? 8 : (char)0x80);
    if (q4 ? (b & 3) == 0 : 1) prefetch_rows(w + b * wsize, ws, (q4 ? 4 : 2) * wsize, R, C);
    const __m256 wd_all = gather_scales(w + b * wsize, ws, wsize, two, R);
    __m512i wq[4];
    __m512 wd[4];
    UNROLL for (int r = 0; r < R; r++) {
        const uint8_t *p = w + r * ws + b * wsize;
        wq[r] = q4 ? q4_0_levels(p, two) : _mm512_xor_si512(q8_0_levels(p, two), off);
        wd[r] = spread_scales(wd_all, r);
    }
    const __m256 xd_all = gather_scales(x + b * Q8_0_SIZE, xs, Q8_0_SIZE, two, C);
    UNROLL for (int c = 0; c < C; c++) {
        const __m512i xq = q8_0_levels(x + c * xs + b * Q8_0_SIZE, two);
        const __m512i xneg =
            _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, xq));
        const __m512 xd = spread_scales(xd_all, c);
        UNROLL for (int r = 0; r < R; r++) {
            const __m512i s = _mm512_dpbusd_epi32(xneg, wq[r], xq);
            acc[r * C + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd[r], xd), acc[r * C + c]);
        }
    }
}

/* Two blocks a step; an odd last block runs as a half step whose upper
 * lanes are all zero (and add exactly 0 to each lane). */
INL void b32_tile(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out, int64_t os,
                  const int R, const int C, const int q4) {
    __m512 acc[16];
    UNROLL for (int p = 0; p < R * C; p++) acc[p] = _mm512_setzero_ps();
    const int64_t nb = n / 32;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) b32_step(w, ws, x, xs, b, 1, acc, R, C, q4);
    if (b < nb) b32_step(w, ws, x, xs, b, 0, acc, R, C, q4);
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int c = 0; c < C; c++) out[c * os + r] = hsum_ps(acc[r * C + c]);
}

INL void q8_0_tile(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out, int64_t os,
                   const int R, const int C) {
    b32_tile(w, ws, x, xs, n, out, os, R, C, 0);
}
INL void q4_0_tile(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out, int64_t os,
                   const int R, const int C) {
    b32_tile(w, ws, x, xs, n, out, os, R, C, 1);
}

/* Converts the scales of blocks 0..nb-1 of four rows (stride apart) to
 * floats at sc[4b + i], then four zeros. */
static TGT void convert_scales(const uint8_t *p, size_t stride, size_t bsize, int64_t nb, float *sc) {
    for (int64_t b = 0; b < nb; b++)
        for (int i = 0; i < 4; i++) sc[4 * b + i] = _cvtsh_ss(rd16(p + i * stride + b * bsize));
    for (int i = 0; i < 4; i++) sc[4 * nb + i] = 0.0f;
}

/* The prepared gemm path swaps the roles of the operands for the unsigned
 * side of dpbusd: activation levels become unsigned (x + 128, once per
 * column panel) and weight levels stay signed, so
 *   dpbusd(-128 * sum(w), x + 128, w) = sum(w * x)
 * per lane, with the correction -128 * sum(w) computed once per row tile
 * and panel instead of once per column and tile (the plain kernels' -off *
 * sum(x)). Integer sums are exact, so each lane holds the same value as in
 * b32_step and the float steps after it are the same. */
typedef struct {
    __m512i wq[4];   /* signed levels of two blocks of row r (upper half zero in a half step) */
    __m512i corr[4]; /* -128 * (sum of each lane's four levels) */
} b32_wprep;

/* Signed levels of blocks b, b+1 (b+1 only if two) of a weight row. */
INL __m512i b32_signed_levels(const uint8_t *p, int two, const int q4) {
    if (!q4) return q8_0_levels(p, two);
    const __mmask64 m = two ? ~(__mmask64)0 : (__mmask64)0xFFFFFFFFu;
    return _mm512_maskz_sub_epi8(m, q4_0_levels(p, two), _mm512_set1_epi8(8));
}

static TGT void b32_prepare_rows(const uint8_t *w, size_t ws, int64_t nb, size_t wsize, int q4, b32_wprep *out) {
    const __m512i u128 = _mm512_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 2 <= nb;
        for (int r = 0; r < 4; r++) {
            const __m512i q = b32_signed_levels(w + r * ws + b * wsize, two, q4);
            out[b / 2].wq[r] = q;
            out[b / 2].corr[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), u128, q));
        }
    }
}

/* Activation levels of column x as unsigned (x + 128), two blocks per
 * vector; the upper half of a half step meets zero weights. */
static TGT void b32_prepare_col(const uint8_t *x, int64_t nb, __m512i *out) {
    for (int64_t b = 0; b < nb; b += 2)
        out[b / 2] = _mm512_xor_si512(q8_0_levels(x + b * Q8_0_SIZE, b + 2 <= nb), _mm512_set1_epi8((char)0x80));
}

/* A full 4x4 tile from prepared rows (wp), columns (xu, ns vectors per
 * column) and scales (wsc, xsc: convert_scales of the row and column tiles).
 * Same float steps as b32_step. */
static TGT void b32_4x4_prep(const b32_wprep *wp, const __m512i *xu, int64_t ns, const float *wsc, const float *xsc,
                             float *out, int64_t os) {
    __m512 acc[16];
    UNROLL for (int p = 0; p < 16; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t s = 0; s < ns; s++) {
        const __m256 wd_all = _mm256_loadu_ps(wsc + 8 * s), xd_all = _mm256_loadu_ps(xsc + 8 * s);
        __m512 wd[4];
        UNROLL for (int r = 0; r < 4; r++) wd[r] = spread_scales(wd_all, r);
        UNROLL for (int c = 0; c < 4; c++) {
            const __m512i xq = _mm512_load_si512(xu + c * ns + s);
            const __m512 xd = spread_scales(xd_all, c);
            UNROLL for (int r = 0; r < 4; r++) {
                const __m512i v = _mm512_dpbusd_epi32(wp[s].corr[r], xq, wp[s].wq[r]);
                acc[r * 4 + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(wd[r], xd), acc[r * 4 + c]);
            }
        }
    }
    UNROLL for (int r = 0; r < 4; r++)
        UNROLL for (int c = 0; c < 4; c++) out[c * os + r] = hsum_ps(acc[r * 4 + c]);
}

typedef void (*tile_fn)(const uint8_t *, size_t, const uint8_t *, size_t, int64_t, float *, int64_t);

/* The prepared path: column panels walked by every row tile, as in
 * tela_qdot_run_tiles, with the panel's activations made unsigned and
 * their scales converted once per panel, and each row tile's levels,
 * corrections and scales prepared once per panel; every 4x4 tile then
 * only loads. One heap buffer (the panel is capped to keep it near
 * 400 KB); edges use the plain kernels; all compute the same per-output
 * float steps. Without the buffer the plain kernels do everything. */
/* Activation bytes per panel: 1 MB measured ~5% faster than 384 KB for
 * pp512 (fewer preparations per row tile; L2 is 2 MB here). */
#define PANEL_BUDGET ((size_t)1024 * 1024)
/* Columns per panel for the prepared gemms: at most about budget bytes of
 * activations (to stay in L2 while every row tile sweeps them), split
 * evenly (and at most cap columns), since each panel costs a full preparation of every row tile and
 * a small remainder panel would pay it for a few columns. A multiple of 4. */
static int64_t even_panel(int64_t nc, size_t xs, size_t budget, int64_t cap) {
    int64_t max = (int64_t)(budget / (xs ? xs : 1));
    if (max > cap) max = cap;
    max -= max % 4;
    if (max < 4) max = 4;
    const int64_t count = (nc + max - 1) / max;
    const int64_t p = (nc + count - 1) / count;
    return (p + 3) / 4 * 4;
}

/* The rows from r on of a column panel [c0, c1) that make no whole 4-row
 * tile, for the prepared gemms: 1x4 tiles, then 1x1 at the panel's edge. */
static void panel_edge_rows(const uint8_t *w, size_t ws, int64_t r, int64_t nr, const uint8_t *x, size_t xs,
                            int64_t c0, int64_t c1, int64_t n, float *out, int64_t os, tile_fn cols_only,
                            tile_fn single) {
    for (; r < nr; r++) {
        const uint8_t *wr = w + (size_t)r * ws;
        int64_t c = c0;
        for (; c + 4 <= c1; c += 4) cols_only(wr, ws, x + (size_t)c * xs, xs, n, out + c * os + r, os);
        for (; c < c1; c++) single(wr, ws, x + (size_t)c * xs, xs, n, out + c * os + r, os);
    }
}

#define B32_SC 32768
static void b32_gemm(const void *vw, size_t ws, int64_t nr, const void *vx, size_t xs, int64_t nc, int64_t n,
                     float *out, int64_t os, size_t wsize, int q4, tile_fn full_plain, tile_fn rows_only,
                     tile_fn cols_only, tile_fn single) {
    const uint8_t *w = vw, *x = vx;
    const int64_t nb = n / 32, ns = (nb + 1) / 2, per_tile = 4 * (nb + 1);
    const int64_t panel = even_panel(nc, xs, PANEL_BUDGET, B32_SC / per_tile * 4);
    void *buf = NULL;
    if (nr >= 4 && nc >= 4 && nb > 0 && per_tile <= B32_SC / 4) {
        /* xu (panel x ns vectors), wp (ns), then wsc and xsc */
        const size_t bytes = (size_t)(panel * ns) * 64 + (size_t)ns * sizeof(b32_wprep) +
                             sizeof(float) * (size_t)(per_tile + B32_SC);
        buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
    }
    if (!buf) {
        tela_qdot_run_tiles(vw, ws, nr, vx, xs, nc, n, out, os, 4, 4, full_plain, rows_only, cols_only, single);
        return;
    }
    __m512i *xu = buf;
    b32_wprep *wp = (b32_wprep *)(xu + panel * ns);
    float *wsc = (float *)(wp + ns), *xsc = wsc + per_tile;
    for (int64_t c0 = 0; c0 < nc; c0 += panel) {
        const int64_t c1 = c0 + panel < nc ? c0 + panel : nc, tiles = (c1 - c0) / 4;
        for (int64_t t = 0; t < tiles; t++) convert_scales(x + (size_t)(c0 + 4 * t) * xs, xs, Q8_0_SIZE, nb, xsc + t * per_tile);
        for (int64_t c = 0; c < 4 * tiles; c++) b32_prepare_col(x + (size_t)(c0 + c) * xs, nb, xu + c * ns);
        int64_t r = 0;
        for (; r + 4 <= nr; r += 4) {
            const uint8_t *wr = w + (size_t)r * ws;
            convert_scales(wr, ws, wsize, nb, wsc);
            b32_prepare_rows(wr, ws, nb, wsize, q4, wp);
            for (int64_t t = 0; t < tiles; t++) {
                const int64_t c = c0 + 4 * t;
                b32_4x4_prep(wp, xu + 4 * t * ns, ns, wsc, xsc + t * per_tile, out + c * os + r, os);
            }
            for (int64_t c = c0 + 4 * tiles; c < c1; c++) rows_only(wr, ws, x + (size_t)c * xs, xs, n, out + c * os + r, os);
        }
        panel_edge_rows(w, ws, r, nr, x, xs, c0, c1, n, out, os, cols_only, single);
    }
    free(buf);
}

/* ----------------------------------------- K-quants x Q8_K activations */

#define Q8K_SIZE 292 /* float d, 256 int8, 16 int16 bsums */
#define Q8K_QS 4
#define Q8K_BSUMS 260

/* Sums each of P int32 vectors across its lanes; lane p of the result is
 * the sum of v[p]. Integer, so exact whatever the grouping. */
INL __m512i reduce_lanes(const __m512i *v, const int P) {
    if (P == 1) return _mm512_castsi128_si512(_mm_cvtsi32_si128(_mm512_reduce_add_epi32(v[0])));
    /* 4 -> 1 per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], then 64-bit
     * pairs give lane j of each 128-bit block = that block's sum of v[j]. */
    __m512i q[4];
    UNROLL for (int g = 0; g < P / 4; g++) {
        const __m512i *a = v + 4 * g;
        const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
        const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
        q[g] = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    }
    if (P == 4) {
        const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(q[0]), _mm512_extracti64x4_epi64(q[0], 1));
        const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        return _mm512_castsi128_si512(s);
    }
    /* P == 16: add the four 128-bit blocks of each q[g], keeping g apart. */
    const __m512i r01 = _mm512_add_epi32(_mm512_shuffle_i32x4(q[0], q[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                         _mm512_shuffle_i32x4(q[0], q[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i r23 = _mm512_add_epi32(_mm512_shuffle_i32x4(q[2], q[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                         _mm512_shuffle_i32x4(q[2], q[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(r01, r23, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(r01, r23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* 128-bit block pos of v copied to all four (pos constant once inlined). */
INL __m512i bcast128(__m512i v, int pos) {
    switch (pos) {
    case 0: return _mm512_shuffle_i32x4(v, v, 0x00);
    case 1: return _mm512_shuffle_i32x4(v, v, 0x55);
    case 2: return _mm512_shuffle_i32x4(v, v, 0xAA);
    default: return _mm512_shuffle_i32x4(v, v, 0xFF);
    }
}

/* The fp16 scale(s) of each row's super-block b as floats: lane 2r = the
 * one at offset off, lane 2r+1 = the next one if two (Q4_K/Q5_K d, dmin). */
INL __m256 rows_scales(const uint8_t *w, size_t ws, int64_t b, size_t bsize, size_t off, int two, const int R) {
    int u[4] = {0, 0, 0, 0};
    UNROLL for (int r = 0; r < R; r++) {
        const uint8_t *p = w + r * ws + b * bsize + off;
        u[r] = (int)(two ? rd32(p) : rd16(p));
    }
    return _mm256_cvtph_ps(_mm_setr_epi32(u[0], u[1], u[2], u[3]));
}

/* Each column's Q8_K scale for block b, lane c. */
INL __m128 cols_scales(const uint8_t *x, size_t xs, int64_t b, const int C) {
    float f[4] = {0, 0, 0, 0};
    UNROLL for (int c = 0; c < C; c++) memcpy(&f[c], x + c * xs + b * Q8K_SIZE, 4);
    return _mm_setr_ps(f[0], f[1], f[2], f[3]);
}

/* B_j (sums of the 32-element sub-blocks j = 0..7) of a Q8_K block as 8
 * int16, i.e. four int32 lanes (B_2k, B_2k+1). */
INL __m128i q8K_sums32(const uint8_t *p) {
    const __m256i b16 = _mm256_loadu_si256((const __m256i *)(p + Q8K_BSUMS));
    const __m256i b32 = _mm256_madd_epi16(b16, _mm256_set1_epi16(1));
    const __m256i packed = _mm256_packs_epi32(b32, b32);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)));
}

/* sum_j m_j(r) * B_j(c) for every lane p = r * C + c: rows' (m_2k, m_2k+1)
 * int16 pairs sit at lanes 4r + k of mall, columns' (B_2k, B_2k+1) at
 * lanes 4c + k of ball; permute them into place and multiply-add pairs. */
INL __m512i k_min_sums(__m512i mall, __m512i ball, const int C) {
    const __m512i ri = _mm512_slli_epi32(row_index(C), 2), ci = _mm512_slli_epi32(col_index(C), 2);
    __m512i s = _mm512_setzero_si512();
    UNROLL for (int k = 0; k < 4; k++) {
        const __m512i kk = _mm512_set1_epi32(k);
        s = _mm512_dpwssd_epi32(s, _mm512_permutexvar_epi32(_mm512_add_epi32(ri, kk), mall),
                                _mm512_permutexvar_epi32(_mm512_add_epi32(ci, kk), ball));
    }
    return s;
}

/* The float step of qdot.c for every lane p = r * C + c:
 * acc = fma(isum, d*dx, acc), then acc = acc - msum * (dmin*dx), each
 * rounded once. d and dmin of row r are lanes 2r, 2r+1 of dd. */
INL __m512 k_float_step(__m512 acc, __m512i isum, __m512i msum, __m256 dd, __m128 dx, int has_min, const int C) {
    const __m512i ri = _mm512_slli_epi32(row_index(C), 1);
    const __m512 dd5 = _mm512_castps256_ps512(dd);
    const __m512 dxv = _mm512_permutexvar_ps(col_index(C), _mm512_castps128_ps512(dx));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(_mm512_permutexvar_ps(ri, dd5), dxv), acc);
    if (has_min) {
        const __m512 dmv = _mm512_permutexvar_ps(_mm512_add_epi32(ri, _mm512_set1_epi32(1)), dd5);
        acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmv, dxv), acc);
    }
    return acc;
}

/* The packed 6-bit scales and mins of Q4_K/Q5_K (layout in
 * quant/dequant.c), unpacked for up to four rows at once: row r's 12 bytes
 * in 128-bit block r of sb as words u0, u1, u2; out, per block, bytes 0-7
 * the scales, 8-15 the mins. For j < 4: scale u0 & 63, min u1 & 63; for
 * j >= 4: low 4 bits from u2's low / high nibbles, top 2 bits from the top
 * bits of u0 / u1. */
INL __m512i k4_unpack(__m512i sb) {
    const __m512i lo = _mm512_and_si512(sb, _mm512_set1_epi8(0x3f));          /* sc_lo, m_lo, -, - */
    const __m512i u2 = _mm512_shuffle_epi32(sb, _MM_SHUFFLE(2, 2, 2, 2));
    const __m512i nib = _mm512_srlv_epi32(u2, _mm512_setr_epi32(0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0));
    const __m512i top = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sb, 6), _mm512_set1_epi8(0x03)), 4);
    const __m512i hi = _mm512_or_si512(_mm512_and_si512(nib, _mm512_set1_epi8(0x0f)), top); /* sc_hi, m_hi */
    return _mm512_unpacklo_epi32(lo, hi);
}

/* pshufb control giving, in every int32 lane, scale byte a (lanes 0-7) or
 * b (lanes 8-15) in both int16 halves, zero-extended. */
INL __m512i k_scale_ctrl(int a, int b) {
    const int ea = (int)(0x80008000u | (unsigned)a | (unsigned)a << 16);
    const int eb = (int)(0x80008000u | (unsigned)b | (unsigned)b << 16);
    return _mm512_inserti64x4(_mm512_set1_epi32(ea), _mm256_set1_epi32(eb), 1);
}

#define Q4K_SIZE 144 /* fp16 d, dmin; 12 bytes scales; 128 bytes nibbles */
#define Q5K_SIZE 176 /* fp16 d, dmin; 12 bytes scales; 32 bytes qh; 128 bytes nibbles */
#define Q6K_SIZE 210 /* ql[128], qh[64], int8 scales[16], fp16 d */

/* The three K-quant kernels share one template; kind is a constant. */
enum { KQ4 = 0, KQ5 = 1, KQ6 = 2 };

INL size_t k_block_size(const int kind) { return kind == KQ4 ? Q4K_SIZE : kind == KQ5 ? Q5K_SIZE : Q6K_SIZE; }

/* Per super-block and output, four 64-level vectors k = 0..3 of the weight
 * row meet four 64-level activation vectors: maddubs, then dpwssd with the
 * scales of the sub-blocks each lane belongs to.
 *  - Q4_K/Q5_K: vector k holds the low (k even) or high (k odd) nibbles of
 *    qs[64(k/2)..+63] (+ the fifth bit from qh for Q5_K), i.e. sub-blocks
 *    (0|2), (1|3), (4|6), (5|7) of 32; the activation halves are
 *    rearranged to match. The mins' part sum_j m_j * B_j is computed apart.
 *  - Q6_K: vector v holds elements 64v..64v+63 (sub-blocks 4v..4v+3 of 16)
 *    in natural order; the -32 offset's part, -32 * sum_k scale_k * bsum_k,
 *    starts the int32 accumulator. */

/* What the row side of a super-block needs besides the level vectors. */
typedef struct {
    __m256 dd;          /* d (and dmin) of row r in lanes 2r (2r+1) */
    __m512i mall;       /* Q4_K/Q5_K: row r's mins as int16 in 128-bit block r */
    __m512i sc[4];      /* Q4_K/Q5_K: row r's scales/mins in every 128-bit block;
                         * Q6_K: row r's 16 scales as (s, s) int16 pairs */
    __m256i scneg[4];   /* Q6_K: -32 * row r's scales as int16 */
} k_rowinfo;

INL void k_row_info(const uint8_t *w, size_t ws, int64_t b, k_rowinfo *ri, const int R, const int kind) {
    const size_t bsize = k_block_size(kind);
    /* (the fields a kind does not use are zeroed, which costs nothing once
     * inlined, so no path reads an unset one) */
    ri->mall = _mm512_setzero_si512();
    for (int r = 0; r < 4; r++) {
        ri->sc[r] = _mm512_setzero_si512();
        ri->scneg[r] = _mm256_setzero_si256();
    }
    if (kind == KQ6) {
        ri->dd = rows_scales(w, ws, b, Q6K_SIZE, 208, 0, R);
        UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *p = w + r * ws + b * Q6K_SIZE;
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 192)));
            ri->scneg[r] = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32));
            const __m512i sc = _mm512_cvtepu16_epi32(sc16);
            ri->sc[r] = _mm512_or_si512(sc, _mm512_slli_epi32(sc, 16));
        }
        return;
    }
    const __m512i mins_ctrl = _mm512_broadcast_i32x4(
        _mm_setr_epi8(8, (char)0x80, 9, (char)0x80, 10, (char)0x80, 11, (char)0x80, 12, (char)0x80, 13, (char)0x80,
                      14, (char)0x80, 15, (char)0x80));
    ri->dd = rows_scales(w, ws, b, bsize, 0, 1, R);
    __m512i sb = _mm512_setzero_si512();
    UNROLL for (int r = 0; r < R; r++) sb = insert128(sb, _mm_loadu_si128((const __m128i *)(w + r * ws + b * bsize + 4)), r);
    const __m512i sm = k4_unpack(sb);
    ri->mall = _mm512_shuffle_epi8(sm, mins_ctrl);
    UNROLL for (int r = 0; r < R; r++) ri->sc[r] = bcast128(sm, r);
}

/* Level vector k of the super-block at p, and its scale vector. */
INL void k_row_vec(const uint8_t *p, const __m512i sc, int k, __m512i *wq, __m512i *sk, const int kind) {
    if (kind == KQ6) {
        const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
        const int h = k / 2;
        const __m512i l = _mm512_loadu_si512(p + 64 * h);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h));
        if (k % 2 == 0) {
            /* elements 0-31: low nibbles of ql[l], bits 0-1 of qh; 32-63:
             * low nibbles of ql[l+32], bits 2-3 */
            const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_slli_epi16(qh, 4)), _mm256_slli_epi16(qh, 2), 1);
            *wq = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(hh, m30));
        } else {
            /* high nibbles; bits 4-5 and 6-7 */
            const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            *wq = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(hh, m30));
        }
        const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(4 * k),
                                             _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
        *sk = _mm512_permutexvar_epi32(idx, sc);
        return;
    }
    const size_t qs_off = kind == KQ5 ? 48 : 16;
    const int a = (k / 2) * 4 + (k % 2);
    __m512i z = _mm512_loadu_si512(p + qs_off + 64 * (k / 2));
    if (k % 2) z = _mm512_srli_epi16(z, 4);
    *wq = _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
    if (kind == KQ5) {
        /* fifth bits: bit 2c of qh[l] for the low nibbles of chunk c, bit
         * 2c+1 for the high ones */
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 16)));
        const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << a)), _mm256_set1_epi8((char)(1 << (a + 2))), 1);
        *wq = _mm512_mask_add_epi8(*wq, _mm512_test_epi8_mask(qh, sel), *wq, _mm512_set1_epi8(16));
    }
    *sk = _mm512_shuffle_epi8(sc, k_scale_ctrl(a, a + 2));
}

/* Activation vector k of a Q8_K block's levels q, matched to k_row_vec
 * (kind KQ6: elements 64k..64k+63, the natural order). */
INL __m512i k_col_vec(const uint8_t *q, int k, const int kind) {
    if (kind == KQ6) return _mm512_loadu_si512(q + 64 * k);
    const __m512i x0 = _mm512_loadu_si512(q + 128 * (k / 2)), x1 = _mm512_loadu_si512(q + 128 * (k / 2) + 64);
    return (k % 2) ? _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(3, 2, 3, 2)) : _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(1, 0, 1, 0));
}

/* A super-block of four rows prepared once (k_prepare) for the 4x4 tiles
 * of a whole column panel: what k_row_info and k_row_vec compute, with
 * the Q4_K/Q5_K vectors in the activation's natural order, and the row
 * side of the per-super-block tail already permuted into tile lanes. */
typedef struct {
    __m512i wq[4][4]; /* [vector][row] */
    __m512i sk[4][4];
    __m512i mall;
    __m256i scneg[4];
    __m256 dd;
    /* the row side of the per-super-block tail, in the lanes p = 4r + c of
     * k_min_sums and k_float_step: mins pairs permuted for each k (Q4_K/Q5_K),
     * d and dmin of row p / 4 */
    __m512i mrow[4];
    __m512 dv, dmv;
} k_prep;

/* The column side of that tail for a 4-column tile, once per panel:
 * each lane's column scale and (B_2k, B_2k+1) pairs permuted for each k. */
typedef struct {
    __m512i bcol[4];
    __m512 dxv;
} k_cprep;

static TGT void k_prepare_cols(const uint8_t *x, size_t xs, int64_t nb, k_cprep *out) {
    const __m512i ci = _mm512_slli_epi32(col_index(4), 2);
    for (int64_t b = 0; b < nb; b++) {
        __m512i ball = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) ball = insert128(ball, q8K_sums32(x + c * xs + b * Q8K_SIZE), c);
        for (int k = 0; k < 4; k++) out[b].bcol[k] = _mm512_permutexvar_epi32(_mm512_add_epi32(ci, _mm512_set1_epi32(k)), ball);
        out[b].dxv = _mm512_permutexvar_ps(col_index(4), _mm512_castps128_ps512(cols_scales(x, xs, b, 4)));
    }
}

static TGT void k_prepare(const uint8_t *w, size_t ws, int64_t nb, k_prep *out, const int kind) {
    for (int64_t b = 0; b < nb; b++) {
        k_rowinfo ri;
        k_row_info(w, ws, b, &ri, 4, kind);
        for (int k = 0; k < 4; k++)
            for (int r = 0; r < 4; r++) k_row_vec(w + r * ws + b * k_block_size(kind), ri.sc[r], k, &out[b].wq[k][r], &out[b].sk[k][r], kind);
        if (kind != KQ6) {
            /* rearranged to the activation's order, sub-blocks (2k | 2k+1),
             * so the tiles need not shuffle the activations */
            for (int r = 0; r < 4; r++)
                for (int h = 0; h < 2; h++) {
                    const __m512i w0 = out[b].wq[2 * h][r], w1 = out[b].wq[2 * h + 1][r];
                    const __m512i s0 = out[b].sk[2 * h][r], s1 = out[b].sk[2 * h + 1][r];
                    out[b].wq[2 * h][r] = _mm512_shuffle_i64x2(w0, w1, _MM_SHUFFLE(1, 0, 1, 0));
                    out[b].wq[2 * h + 1][r] = _mm512_shuffle_i64x2(w0, w1, _MM_SHUFFLE(3, 2, 3, 2));
                    out[b].sk[2 * h][r] = _mm512_shuffle_i64x2(s0, s1, _MM_SHUFFLE(1, 0, 1, 0));
                    out[b].sk[2 * h + 1][r] = _mm512_shuffle_i64x2(s0, s1, _MM_SHUFFLE(3, 2, 3, 2));
                }
        }
        out[b].mall = ri.mall;
        for (int r = 0; r < 4; r++) out[b].scneg[r] = ri.scneg[r];
        out[b].dd = ri.dd;
        const __m512i rowi = _mm512_slli_epi32(row_index(4), 2), rowi2 = _mm512_slli_epi32(row_index(4), 1);
        for (int k = 0; k < 4; k++)
            out[b].mrow[k] = _mm512_permutexvar_epi32(_mm512_add_epi32(rowi, _mm512_set1_epi32(k)), ri.mall);
        const __m512 dd5 = _mm512_castps256_ps512(ri.dd);
        out[b].dv = _mm512_permutexvar_ps(rowi2, dd5);
        out[b].dmv = _mm512_permutexvar_ps(_mm512_add_epi32(rowi2, _mm512_set1_epi32(1)), dd5);
    }
}

/* R rows x C columns, straight from the blocks (k_tile_pre is the prepared
 * 4x4 tile). */
INL void k_tile(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out, int64_t os,
                const int R, const int C, const int kind) {
    const size_t bsize = k_block_size(kind);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        k_rowinfo ri;
        prefetch_rows(w + b * bsize, ws, bsize, R, C);
        k_row_info(w, ws, b, &ri, R, kind);
        const __m128 dx = cols_scales(x, xs, b, C);
        __m512i isum[16], ball = _mm512_setzero_si512();
        if (kind == KQ6) {
            UNROLL for (int c = 0; c < C; c++) {
                const __m256i bsums = _mm256_loadu_si256((const __m256i *)(x + c * xs + b * Q8K_SIZE + Q8K_BSUMS));
                UNROLL for (int r = 0; r < R; r++)
                    isum[r * C + c] = _mm512_zextsi256_si512(_mm256_madd_epi16(ri.scneg[r], bsums));
            }
        } else {
            UNROLL for (int c = 0; c < C; c++) ball = insert128(ball, q8K_sums32(x + c * xs + b * Q8K_SIZE), c);
        }
        UNROLL for (int k = 0; k < 4; k++) {
            __m512i wq[4], sk[4];
            UNROLL for (int r = 0; r < R; r++) k_row_vec(w + r * ws + b * bsize, ri.sc[r], k, &wq[r], &sk[r], kind);
            UNROLL for (int c = 0; c < C; c++) {
                const __m512i xk = k_col_vec(x + c * xs + b * Q8K_SIZE + Q8K_QS, k, kind);
                UNROLL for (int r = 0; r < R; r++) {
                    const __m512i d = _mm512_maddubs_epi16(wq[r], xk);
                    isum[r * C + c] = kind != KQ6 && k == 0 ? _mm512_madd_epi16(d, sk[r])
                                                            : _mm512_dpwssd_epi32(isum[r * C + c], d, sk[r]);
                }
            }
        }
        const __m512i msum = kind == KQ6 ? _mm512_setzero_si512() : k_min_sums(ri.mall, ball, C);
        acc = k_float_step(acc, reduce_lanes(isum, R * C), msum, ri.dd, dx, kind != KQ6, C);
    }
    store_tile(acc, out, os, R, C);
}

/* A full 4x4 tile from a prepared row tile and column tile: the integer
 * work of k_tile, then the same float steps as k_float_step (the same
 * products, rounded in the same order) with every permutation done at
 * preparation time. */
INL void k_tile_pre(const k_prep *prep, const k_cprep *cp, const uint8_t *x, size_t xs, int64_t n, float *out,
                    int64_t os, const int kind) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        __m512i isum[16];
        if (kind == KQ6) {
            UNROLL for (int c = 0; c < 4; c++) {
                const __m256i bsums = _mm256_loadu_si256((const __m256i *)(x + c * xs + b * Q8K_SIZE + Q8K_BSUMS));
                UNROLL for (int r = 0; r < 4; r++)
                    isum[r * 4 + c] = _mm512_zextsi256_si512(_mm256_madd_epi16(prep[b].scneg[r], bsums));
            }
        }
        UNROLL for (int k = 0; k < 4; k++) {
            UNROLL for (int c = 0; c < 4; c++) {
                const __m512i xk = _mm512_loadu_si512(x + c * xs + b * Q8K_SIZE + Q8K_QS + 64 * k);
                UNROLL for (int r = 0; r < 4; r++) {
                    const __m512i d = _mm512_maddubs_epi16(prep[b].wq[k][r], xk);
                    isum[r * 4 + c] = kind != KQ6 && k == 0 ? _mm512_madd_epi16(d, prep[b].sk[k][r])
                                                            : _mm512_dpwssd_epi32(isum[r * 4 + c], d, prep[b].sk[k][r]);
                }
            }
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce_lanes(isum, 16)), _mm512_mul_ps(prep[b].dv, cp[b].dxv), acc);
        if (kind != KQ6) {
            __m512i msum = _mm512_setzero_si512();
            UNROLL for (int k = 0; k < 4; k++) msum = _mm512_dpwssd_epi32(msum, prep[b].mrow[k], cp[b].bcol[k]);
            acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(prep[b].dmv, cp[b].dxv), acc);
        }
    }
    store_tile(acc, out, os, 4, 4);
}

INL void q4_K_tile(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out, int64_t os,
                   const int R, const int C) {
    k_tile(w, ws, x, xs, n, out, os, R, C, KQ4);
}
INL void q5_K_tile(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out, int64_t os,
                   const int R, const int C) {
    k_tile(w, ws, x, xs, n, out, os, R, C, KQ5);
}
INL void q6_K_tile(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out, int64_t os,
                   const int R, const int C) {
    k_tile(w, ws, x, xs, n, out, os, R, C, KQ6);
}

typedef void (*kpre_fn)(const k_prep *, const k_cprep *, const uint8_t *, size_t, int64_t, float *, int64_t);
static TGT void q4_K_4x4_pre(const k_prep *prep, const k_cprep *cp, const uint8_t *x, size_t xs, int64_t n,
                             float *out, int64_t os) {
    k_tile_pre(prep, cp, x, xs, n, out, os, KQ4);
}
static TGT void q5_K_4x4_pre(const k_prep *prep, const k_cprep *cp, const uint8_t *x, size_t xs, int64_t n,
                             float *out, int64_t os) {
    k_tile_pre(prep, cp, x, xs, n, out, os, KQ5);
}
static TGT void q6_K_4x4_pre(const k_prep *prep, const k_cprep *cp, const uint8_t *x, size_t xs, int64_t n,
                             float *out, int64_t os) {
    k_tile_pre(prep, cp, x, xs, n, out, os, KQ6);
}
static TGT void q4_K_prepare(const uint8_t *w, size_t ws, int64_t nb, k_prep *out) { k_prepare(w, ws, nb, out, KQ4); }
static TGT void q5_K_prepare(const uint8_t *w, size_t ws, int64_t nb, k_prep *out) { k_prepare(w, ws, nb, out, KQ5); }
static TGT void q6_K_prepare(const uint8_t *w, size_t ws, int64_t nb, k_prep *out) { k_prepare(w, ws, nb, out, KQ6); }

/* ------------------------------------------------------------ instances */

/* One R x C tile kernel of a type (NAME_RxC) with the tile_fn signature. */
#define TILE(NAME, R, C)                                                                                       \
    static TGT void NAME##_##R##x##C(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n,      \
                                     float *out, int64_t os) {                                                \
        NAME##_tile(w, ws, x, xs, n, out, os, R, C);                                                          \
    }

#define TILES(NAME)                                                                                            \
    TILE(NAME, 4, 4)                                                                                           \
    TILE(NAME, 4, 1)                                                                                           \
    TILE(NAME, 1, 4)                                                                                           \
    TILE(NAME, 1, 1)                                                                                           \
    static TGT float NAME##_vec_dot(const void *w, const void *x, int64_t n) {                                   \
        float r;                                                                                                   \
        NAME##_tile((const uint8_t *)w, 0, (const uint8_t *)x, 0, n, &r, 0, 1, 1);                                \
        return r;                                                                                                  \
    }

#define INSTANCES(NAME)                                                                                            \
    TILES(NAME)                                                                                                    \
    static void NAME##_gemm(const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,          \
                            int64_t n, float *out, int64_t os) {                                                  \
        tela_qdot_run_tiles(w, ws, nr, x, xs, nc, n, out, os, 4, 4, NAME##_4x4, NAME##_4x1, NAME##_1x4,           \
                            NAME##_1x1);                                                                          \
    }

INSTANCES(f32)
INSTANCES(f16)
INSTANCES(bf16)
TILES(q8_0)
TILES(q4_0)

static void q8_0_gemm(const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc, int64_t n,
                      float *out, int64_t os) {
    b32_gemm(w, ws, nr, x, xs, nc, n, out, os, Q8_0_SIZE, 0, q8_0_4x4, q8_0_4x1, q8_0_1x4, q8_0_1x1);
}
static void q4_0_gemm(const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc, int64_t n,
                      float *out, int64_t os) {
    b32_gemm(w, ws, nr, x, xs, nc, n, out, os, Q4_0_SIZE, 1, q4_0_4x4, q4_0_4x1, q4_0_1x4, q4_0_1x1);
}
TILES(q4_K)
TILES(q5_K)
TILES(q6_K)

/* K-quant gemm with several columns: each 4-row tile is prepared
 * (k_prepare: levels split out, scale vectors built) once per column
 * panel into a buffer, then every 4x4 tile of the panel reads it instead
 * of unpacking the blocks again. The buffer is ~2.3 KB per super-block;
 * without it (or for few columns, or edges) the direct kernels run. Both
 * compute the same integers and float steps. */
static void k_gemm(const void *vw, size_t ws, int64_t nr, const void *vx, size_t xs, int64_t nc, int64_t n,
                   float *out, int64_t os, void (*prepare)(const uint8_t *, size_t, int64_t, k_prep *), kpre_fn full_pre,
                   tile_fn full, tile_fn rows_only, tile_fn cols_only, tile_fn single) {
    const uint8_t *w = vw, *x = vx;
    const int64_t nb = n / 256;
    const int64_t panel = even_panel(nc, xs, PANEL_BUDGET, nc);
    k_prep *prep = NULL;
    if (nr >= 4 && nc >= 8 && nb > 0)
        prep = aligned_alloc(64, sizeof(k_prep) * (size_t)nb + sizeof(k_cprep) * (size_t)(panel / 4 * nb));
    if (!prep) {
        tela_qdot_run_tiles(vw, ws, nr, vx, xs, nc, n, out, os, 4, 4, full, rows_only, cols_only, single);
        return;
    }
    k_cprep *cprep = (k_cprep *)(prep + nb);
    for (int64_t c0 = 0; c0 < nc; c0 += panel) {
        const int64_t c1 = c0 + panel < nc ? c0 + panel : nc;
        for (int64_t c = c0; c + 4 <= c1; c += 4) k_prepare_cols(x + (size_t)c * xs, xs, nb, cprep + (c - c0) / 4 * nb);
        int64_t r = 0;
        for (; r + 4 <= nr; r += 4) {
            const uint8_t *wr = w + (size_t)r * ws;
            prepare(wr, ws, nb, prep);
            int64_t c = c0;
            for (; c + 4 <= c1; c += 4) full_pre(prep, cprep + (c - c0) / 4 * nb, x + (size_t)c * xs, xs, n, out + c * os + r, os);
            for (; c < c1; c++) rows_only(wr, ws, x + (size_t)c * xs, xs, n, out + c * os + r, os);
        }
        panel_edge_rows(w, ws, r, nr, x, xs, c0, c1, n, out, os, cols_only, single);
    }
    free(prep);
}

#define K_GEMM(NAME)                                                                                               \
    static void NAME##_gemm(const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,          \
                            int64_t n, float *out, int64_t os) {                                                  \
        k_gemm(w, ws, nr, x, xs, nc, n, out, os, NAME##_prepare, NAME##_4x4_pre, NAME##_4x4, NAME##_4x1,          \
               NAME##_1x4, NAME##_1x1);                                                                           \
    }
K_GEMM(q4_K)
K_GEMM(q5_K)
K_GEMM(q6_K)

#define SET(TYPE, NAME) t->fns[TYPE] = (tela_qdot_fns){NAME##_vec_dot, NAME##_gemm, 4, 4}

void tela_qdot_fill_avx512(tela_qdot_isa_table *t) {
    t->q8_0_from_float = q8_0_from_float;
    t->q8_K_from_float = q8_K_from_float;
    SET(TELA_TYPE_F32, f32);
    SET(TELA_TYPE_F16, f16);
    SET(TELA_TYPE_BF16, bf16);
    SET(TELA_TYPE_Q8_0, q8_0);
    SET(TELA_TYPE_Q4_0, q4_0);
    SET(TELA_TYPE_Q4_K, q4_K);
    SET(TELA_TYPE_Q5_K, q5_K);
    SET(TELA_TYPE_Q6_K, q6_K);
    tela_qdot_fill_packed_k_avx512(t);
    tela_qdot_fill_packed_q8_avx512(t);
    tela_qdot_fill_packed_f_avx512(t);
}

#endif /* __x86_64__ */
