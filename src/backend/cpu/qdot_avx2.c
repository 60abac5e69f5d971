/* qdot_avx2.c: dot-product kernels for x86-64 CPUs with AVX2 + FMA + F16C
 * but no AVX-512 (Zen 1-3, Haswell..Alder Lake), chosen at run time; every
 * function carries its own target attribute.
 *
 * They follow the float steps of the scalar kernels in qdot.c exactly, so
 * results are bit-identical to them (and to the AVX-512 kernels): the
 * 16-lane partial sums are two 256-bit registers (lanes 0-7, 8-15), the
 * K-quants' integer sums are exact whatever the grouping.
 *
 * Integer products use VPMADDUBSW (u8 x s8 pairs -> int16) then VPMADDWD:
 *  - 4- and 6-bit weight levels are unsigned already;
 *  - signed Q8_0 weights use |w| times x with w's sign, which cannot
 *    saturate because activation levels from the quantizers lie in
 *    [-127, 127]: 2 * 128 * 127 < 2^15.
 * Tiles are 4 weight rows x 1 activation column (16 registers do not hold
 * a 4 x 4 tile's accumulators). */
#include "backend/cpu/qdot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "quant/quant.h"

#define TGT __attribute__((target("avx2,fma,f16c,bmi2")))
#define INL static inline __attribute__((always_inline)) TGT
/* clang reads "GCC unroll N" as a count it may ignore: ask it for full
 * unrolling, which is what keeps the accumulator arrays in registers. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

static inline uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
INL float f16(const uint8_t *p) { return _cvtsh_ss(rd16(p)); }

/* The 16 lanes (a = 0-7, b = 8-15) summed in the scalar kernels' order:
 * j + 8, then j + 4, j + 2, j + 1. */
INL float hsum16(__m256 a, __m256 b) {
    const __m256 s8 = _mm256_add_ps(a, b);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INL int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* Pairs of int16 summed to int32: lane i of the result is the sum of
 * elements 4i..4i+3 when v came from maddubs. */
INL __m256i sum_pairs(__m256i v) { return _mm256_madd_epi16(v, _mm256_set1_epi16(1)); }

/* Same prefetch policy as the AVX-512 file: decoding streams weights. */
#define PREFETCH_AHEAD 1024

/* ------------------------------------------------------- float weights */

INL void ld_f32(const uint8_t *p, __m256 *lo, __m256 *hi) {
    *lo = _mm256_loadu_ps((const float *)(const void *)p);
    *hi = _mm256_loadu_ps((const float *)(const void *)(p + 32));
}
INL void ld_f16(const uint8_t *p, __m256 *lo, __m256 *hi) {
    *lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    *hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)));
}
INL void ld_bf16(const uint8_t *p, __m256 *lo, __m256 *hi) {
    *lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    *hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 16))), 16));
}

/* 16 elements a step, lane j of the pair (lo, hi) taking element j; a
 * partial last step runs on zero-padded copies (zero products add 0). */
#define FLOAT_TILE(NAME, LOAD, ESIZE)                                                                            \
    INL void NAME##_tile(const uint8_t *w, size_t ws, const uint8_t *x, int64_t n, float *out, const int R) {  \
        __m256 lo[4], hi[4];                                                                                       \
        UNROLL for (int r = 0; r < R; r++) lo[r] = hi[r] = _mm256_setzero_ps();                                  \
        int64_t i = 0;                                                                                             \
        for (; i + 16 <= n; i += 16) {                                                                             \
            if (R > 1 && (i & 63) == 0) {                                                                          \
                UNROLL for (int r = 0; r < R; r++)                                                                 \
                    _mm_prefetch((const char *)w + r * ws + i * (ESIZE) + PREFETCH_AHEAD, _MM_HINT_T0);            \
            }                                                                                                      \
            const __m256 x0 = _mm256_loadu_ps((const float *)(const void *)(x + 4 * i));                           \
            const __m256 x1 = _mm256_loadu_ps((const float *)(const void *)(x + 4 * i + 32));                      \
            UNROLL for (int r = 0; r < R; r++) {                                                                   \
                __m256 a, b;                                                                                       \
                LOAD(w + r * ws + i * (ESIZE), &a, &b);                                                            \
                lo[r] = _mm256_fmadd_ps(a, x0, lo[r]);                                                             \
                hi[r] = _mm256_fmadd_ps(b, x1, hi[r]);                                                             \
            }                                                                                                      \
        }                                                                                                          \
        if (i < n) {                                                                                               \
            uint8_t wt[16 * (ESIZE)];                                                                              \
            float xt[16] = {0};                                                                                    \
            memcpy(xt, x + 4 * i, (size_t)(n - i) * 4);                                                            \
            const __m256 x0 = _mm256_loadu_ps(xt), x1 = _mm256_loadu_ps(xt + 8);                                   \
            UNROLL for (int r = 0; r < R; r++) {                                                                   \
                memset(wt, 0, sizeof wt);                                                                          \
                memcpy(wt, w + r * ws + i * (ESIZE), (size_t)(n - i) * (ESIZE));                                   \
                __m256 a, b;                                                                                       \
                LOAD(wt, &a, &b);                                                                                  \
                lo[r] = _mm256_fmadd_ps(a, x0, lo[r]);                                                             \
                hi[r] = _mm256_fmadd_ps(b, x1, hi[r]);                                                             \
            }                                                                                                      \
        }                                                                                                          \
        UNROLL for (int r = 0; r < R; r++) out[r] = hsum16(lo[r], hi[r]);                                        \
    }

FLOAT_TILE(f32, ld_f32, 4)
FLOAT_TILE(f16, ld_f16, 2)
FLOAT_TILE(bf16, ld_bf16, 2)

/* ------------------------------------ 32-element blocks x Q8_0 activations */

#define Q8_0_SIZE 34
#define Q4_0_SIZE 18

/* One block each of up to four rows against one activation block: the
 * int32 lanes (sums of four products) go to lanes 8*(b%2).. of each
 * output's 16, times (d * dx) -- the scalar kernels' lanes_add. */
INL void b32_block(const uint8_t *w, size_t ws, const uint8_t *x, int64_t b, __m256 *lo, __m256 *hi, const int R,
                   const int q4) {
    const uint8_t *xb = x + b * Q8_0_SIZE;
    const __m256i xq = _mm256_loadu_si256((const __m256i *)(xb + 2));
    const float dx = f16(xb);
    const size_t wsize = q4 ? Q4_0_SIZE : Q8_0_SIZE;
    __m256i xneg8 = _mm256_setzero_si256();
    if (q4) xneg8 = sum_pairs(_mm256_maddubs_epi16(_mm256_set1_epi8(8), xq)); /* 8 * sum of each 4 x */
    UNROLL for (int r = 0; r < R; r++) {
        const uint8_t *p = w + r * ws + b * wsize;
        if (R > 1 && (b & 3) == 0) _mm_prefetch((const char *)p + PREFETCH_AHEAD, _MM_HINT_T0);
        __m256i s;
        if (q4) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(p + 2));
            const __m256i nib = _mm256_and_si256(
                _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1), _mm256_set1_epi8(0x0F));
            s = _mm256_sub_epi32(sum_pairs(_mm256_maddubs_epi16(nib, xq)), xneg8);
        } else {
            const __m256i wq = _mm256_loadu_si256((const __m256i *)(p + 2));
            s = sum_pairs(_mm256_maddubs_epi16(_mm256_abs_epi8(wq), _mm256_sign_epi8(xq, wq)));
        }
        const __m256 scale = _mm256_set1_ps(f16(p) * dx);
        if (b & 1) hi[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, hi[r]);
        else lo[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, lo[r]);
    }
}

#define BLOCK32_TILE(NAME, Q4)                                                                                   \
    INL void NAME##_tile(const uint8_t *w, size_t ws, const uint8_t *x, int64_t n, float *out, const int R) {  \
        __m256 lo[4], hi[4];                                                                                       \
        UNROLL for (int r = 0; r < R; r++) lo[r] = hi[r] = _mm256_setzero_ps();                                  \
        for (int64_t b = 0; b < n / 32; b++) b32_block(w, ws, x, b, lo, hi, R, Q4);                              \
        UNROLL for (int r = 0; r < R; r++) out[r] = hsum16(lo[r], hi[r]);                                        \
    }

BLOCK32_TILE(q8_0, 0)
BLOCK32_TILE(q4_0, 1)

/* ----------------------------------------- K-quants x Q8_K activations */

#define Q8K_SIZE 292
#define Q8K_QS 4
#define Q8K_BSUMS 260

/* The float step of qdot.c: acc = fma(isum, d*dx, acc), then
 * acc = fma(-msum, dmin*dx, acc). */
INL float k_step(float acc, int32_t isum, float d, int32_t msum, float dmin, float dx) {
    __m128 a = _mm_set_ss(acc);
    a = _mm_fmadd_ss(_mm_set_ss((float)isum), _mm_set_ss(d * dx), a);
    a = _mm_fmadd_ss(_mm_set_ss(-(float)msum), _mm_set_ss(dmin * dx), a);
    return _mm_cvtss_f32(a);
}

/* Q4_K/Q5_K scales and mins (packing in quant/dequant.c) as bytes. */
INL void k4_scales_mins(const uint8_t *p, uint8_t sc[8], uint8_t mn[8]) {
    const uint32_t u0 = rd32(p), u1 = rd32(p + 4), u2 = rd32(p + 8);
    const uint32_t s[2] = {u0 & 0x3f3f3f3fu, (u2 & 0x0f0f0f0fu) | ((u0 >> 6) & 0x03030303u) << 4};
    const uint32_t m[2] = {u1 & 0x3f3f3f3fu, ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 6) & 0x03030303u) << 4};
    memcpy(sc, s, 8);
    memcpy(mn, m, 8);
}

#define Q4K_SIZE 144
#define Q5K_SIZE 176

/* Q4_K/Q5_K: chunk c of 64 elements is qs[32c..+31], low nibbles sub-block
 * 2c, high 2c+1 (plus bits 2c, 2c+1 of qh[l] for Q5_K), in the activation's
 * order. */
INL void q45_K_tile(const uint8_t *w, size_t ws, const uint8_t *x, int64_t n, float *out, const int R,
                    const int five) {
    const size_t bsize = five ? Q5K_SIZE : Q4K_SIZE, qs_off = five ? 48 : 16;
    float acc[4] = {0, 0, 0, 0};
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *xb = x + b * Q8K_SIZE;
        float dx;
        memcpy(&dx, xb, 4);
        int16_t bs[16];
        memcpy(bs, xb + Q8K_BSUMS, 32);
        UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *p = w + r * ws + b * bsize;
            if (R > 1) {
                _mm_prefetch((const char *)p + PREFETCH_AHEAD, _MM_HINT_T0);
                _mm_prefetch((const char *)p + PREFETCH_AHEAD + 64, _MM_HINT_T0);
                _mm_prefetch((const char *)p + PREFETCH_AHEAD + 128, _MM_HINT_T0);
            }
            uint8_t sc[8], mn[8];
            k4_scales_mins(p + 4, sc, mn);
            int32_t msum = 0;
            for (int j = 0; j < 8; j++) msum += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
            const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(p + 16)) : _mm256_setzero_si256();
            __m256i isum = _mm256_setzero_si256();
            UNROLL for (int c = 0; c < 4; c++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(p + qs_off + 32 * c));
                __m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
                if (five) {
                    const __m256i bl = _mm256_set1_epi8((char)(1 << (2 * c))), bh = _mm256_set1_epi8((char)(1 << (2 * c + 1)));
                    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bl), bl), _mm256_set1_epi8(16)));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bh), bh), _mm256_set1_epi8(16)));
                }
                const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xb + Q8K_QS + 64 * c));
                const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xb + Q8K_QS + 64 * c + 32));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_set1_epi16(sc[2 * c])));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), _mm256_set1_epi16(sc[2 * c + 1])));
            }
            acc[r] = k_step(acc[r], hsum_epi32(isum), f16(p), msum, f16(p + 2), dx);
        }
    }
    UNROLL for (int r = 0; r < R; r++) out[r] = acc[r];
}

INL void q4_K_tile(const uint8_t *w, size_t ws, const uint8_t *x, int64_t n, float *out, const int R) {
    q45_K_tile(w, ws, x, n, out, R, 0);
}
INL void q5_K_tile(const uint8_t *w, size_t ws, const uint8_t *x, int64_t n, float *out, const int R) {
    q45_K_tile(w, ws, x, n, out, R, 1);
}

#define Q6K_SIZE 210

/* Q6_K: in half h, group g of 32 elements takes low (g < 2) or high nibbles
 * of ql[32(g%2)..], and bits 2g..2g+1 of qh[l]; its two 16-element
 * sub-blocks have scales 8h + 2g, 8h + 2g + 1. The -32 offset is
 * -32 * sum_k scale_k * bsum_k. */
INL void q6_K_tile(const uint8_t *w, size_t ws, const uint8_t *x, int64_t n, float *out, const int R) {
    float acc[4] = {0, 0, 0, 0};
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03);
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *xb = x + b * Q8K_SIZE;
        float dx;
        memcpy(&dx, xb, 4);
        const __m256i bsums = _mm256_loadu_si256((const __m256i *)(xb + Q8K_BSUMS));
        UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *p = w + r * ws + b * Q6K_SIZE;
            if (R > 1)
                for (int o = 0; o < Q6K_SIZE; o += 64) _mm_prefetch((const char *)p + PREFETCH_AHEAD + o, _MM_HINT_T0);
            const __m128i sc8 = _mm_loadu_si128((const __m128i *)(p + 192));
            const __m256i scneg = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_set1_epi16(-32));
            __m256i isum = _mm256_madd_epi16(scneg, bsums);
            int8_t sc[16];
            memcpy(sc, p + 192, 16);
            UNROLL for (int h = 0; h < 2; h++) {
                const __m256i l0 = _mm256_loadu_si256((const __m256i *)(p + 64 * h));
                const __m256i l1 = _mm256_loadu_si256((const __m256i *)(p + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h));
                UNROLL for (int g = 0; g < 4; g++) {
                    const __m256i l = g % 2 ? l1 : l0;
                    const __m256i nib = g < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
                    const __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m3), 4);
                    const __m256i q = _mm256_or_si256(nib, top);
                    const __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + Q8K_QS + 128 * h + 32 * g));
                    const __m256i s = _mm256_setr_m128i(_mm_set1_epi16(sc[8 * h + 2 * g]), _mm_set1_epi16(sc[8 * h + 2 * g + 1]));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), s));
                }
            }
            acc[r] = k_step(acc[r], hsum_epi32(isum), f16(p + 208), 0, 0.0f, dx);
        }
    }
    UNROLL for (int r = 0; r < R; r++) out[r] = acc[r];
}

/* ------------------------------------------------------------ instances */

#define INSTANCES(NAME)                                                                                            \
    static TGT void NAME##_4x1(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out, \
                               int64_t os) {                                                                      \
        (void)xs;                                                                                                  \
        (void)os;                                                                                                  \
        NAME##_tile(w, ws, x, n, out, 4);                                                                         \
    }                                                                                                              \
    static TGT void NAME##_1x1(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out, \
                               int64_t os) {                                                                      \
        (void)xs;                                                                                                  \
        (void)os;                                                                                                  \
        NAME##_tile(w, ws, x, n, out, 1);                                                                         \
    }                                                                                                              \
    static TGT float NAME##_vec_dot(const void *w, const void *x, int64_t n) {                                   \
        float r;                                                                                                   \
        NAME##_tile((const uint8_t *)w, 0, (const uint8_t *)x, n, &r, 1);                                         \
        return r;                                                                                                  \
    }                                                                                                              \
    static void NAME##_gemm(const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,          \
                            int64_t n, float *out, int64_t os) {                                                  \
        tela_qdot_run_tiles(w, ws, nr, x, xs, nc, n, out, os, 4, 1, NAME##_4x1, NAME##_4x1, NAME##_1x1,           \
                            NAME##_1x1);                                                                          \
    }

INSTANCES(f32)
INSTANCES(f16)
INSTANCES(bf16)
INSTANCES(q8_0)
INSTANCES(q4_0)
INSTANCES(q4_K)
INSTANCES(q5_K)
INSTANCES(q6_K)

#define SET(TYPE, NAME) t->fns[TYPE] = (tela_qdot_fns){NAME##_vec_dot, NAME##_gemm, 4, 1}

void tela_qdot_fill_avx2(tela_qdot_isa_table *t) {
    SET(TELA_TYPE_F32, f32);
    SET(TELA_TYPE_F16, f16);
    SET(TELA_TYPE_BF16, bf16);
    SET(TELA_TYPE_Q8_0, q8_0);
    SET(TELA_TYPE_Q4_0, q4_0);
    SET(TELA_TYPE_Q4_K, q4_K);
    SET(TELA_TYPE_Q5_K, q5_K);
    SET(TELA_TYPE_Q6_K, q6_K);
}

#endif /* __x86_64__ */
