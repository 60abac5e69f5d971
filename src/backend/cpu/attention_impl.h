/* attention_impl.h: the CPU backend's causal grouped-query attention
 * (tela_op_attention, ops.h), compiled twice as cpu_variant.h describes:
 * attention.c as the build's flags have it (generic: baseline x86-64 or
 * whatever -march=native gives) and attention_avx512.c with AVX-512
 * F/BW/DQ/VL, FMA and F16C. Where the target has AVX-512 the code takes
 * its AVX-512 paths (intrinsic FMAs, F16C loads, the decoding kernel
 * attention_few_rows), elsewhere the 64-byte vectors are lowered to what
 * there is. The entry point of the including file's variant is
 * TELA_VARIANT(tela_op_attention) (tela_op_attention_generic, ..._avx512);
 * everything else here is static. Not a header to include anywhere else. */
#ifndef TELA_VARIANT
#error "attention_impl.h: include backend/cpu/cpu_variant.h first (see attention.c)"
#endif

#include "backend/cpu/ops.h"
#include "backend/cpu/vec16.h"
#include "quant/quant.h"
#include "util/fp16.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

TELA_VARIANT_DECLARE(void, tela_op_attention, (tela_threadpool *pool, const tela_attn_args *args, int n_args));

/* The rows of one KV head's queries (the query heads sharing it, for every
 * token of the batch) are taken 16 at a time, one row per vector lane, so
 * that every step is a vector operation over independent rows:
 *   1. scores: S[p][l] = (q_l . k_p) * scale for the keys p of the block
 *      (16 keys in 16 accumulators, the query rows transposed once so that
 *      each key element is a broadcast), -inf past row l's causal limit;
 *   2. softmax per lane: the max over p is an element-wise max, then
 *      e = exp(S - max) (a vectorized exp), sum over p element-wise;
 *   3. values: o_l = sum_p e[p][l] v_p / sum_l, 4 rows x 64 value dims at a
 *      time in registers while the value rows stream past.
 * Each row's arithmetic (every sum in order over d or p) is its own lane's,
 * whatever rows share the vector, so results do not depend on the batch
 * split, the thread count, or whether a token was prefilled or decoded. */

#define ATT_LANES 16

/* Macros, not functions: without AVX-512 a 64-byte vector passed by value
 * changes the ABI (gcc warns). fma1 is FMA16 on one lane. */
#if defined(__AVX512F__)
#define FMA16(a, b, c) ((tela_v16f)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define SPLAT16(x) ((tela_v16f)_mm512_set1_ps(x))
static inline float fma1(float a, float b, float c) { return fmaf(a, b, c); }
#else
#define FMA16(a, b, c) ((a) * (b) + (c))
#define SPLAT16(x) ((tela_v16f){0} + (x))
static inline float fma1(float a, float b, float c) { return a * b + c; }
#endif

/* Full unrolling keeps the small accumulator arrays below in registers. */
#if defined(__clang__)
#define ATT_UNROLL _Pragma("clang loop unroll(full)")
#else
#define ATT_UNROLL _Pragma("GCC unroll 16")
#endif

/* Rows per block: up to ATT_MAX_ROWS (4 vectors of lanes) when the
 * per-thread scratch holds their scores, which lets the score kernel load
 * each key element once for 4 row vectors. */
#define ATT_MAX_ROWS 64

/* One sequence's share of the dispatch: its rows are cut into blocks of
 * qb * ATT_LANES rows per KV head; chunks [chunk0, chunk0 + n_blocks *
 * n_kv_head) are its. */
typedef struct {
    const tela_attn_args *a;
    int group;          /* query heads per KV head */
    int qb;             /* vectors of ATT_LANES rows per block (1, 2 or 4) */
    long long n_rows;   /* rows per KV head: n_tok * group */
    long long n_blocks; /* blocks of qb * ATT_LANES rows per KV head */
    int chunk0;
} attn_part;

typedef struct {
    tela_threadpool *pool;
    const attn_part *parts;
    int n_parts;
} attn_job;

/* The cache row of position p (see tela_attn_args). */
static inline int64_t attn_row(const tela_attn_args *a, int64_t p) {
    return a->blocks ? (int64_t)a->blocks[p / a->block_size] * a->block_size + p % a->block_size : p;
}

/* Sixteen f16 values as floats (F16C where the build has AVX-512);
 * written through a pointer: without AVX-512 a 64-byte vector returned by
 * value changes the ABI (gcc warns). */
static inline void load16_f16(tela_v16f *out, const uint16_t *p) {
#if defined(__AVX512F__)
    *out = (tela_v16f)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#else
    for (int i = 0; i < 16; i++) (*out)[i] = tela_f16_to_f32(p[i]);
#endif
}

/* The Q8_0 block holding element i of a cache array, and its scale. */
static inline const unsigned char *q8_block(const void *base, int64_t i) {
    return (const unsigned char *)base + ((uint64_t)i / TELA_QK8_0) * sizeof(tela_block_q8_0);
}
static inline float q8_scale(const unsigned char *blk) {
    uint16_t d;
    memcpy(&d, blk, sizeof d);
#if defined(__F16C__)
    return _cvtsh_ss(d); /* the same exact conversion in one instruction */
#else
    return tela_f16_to_f32(d);
#endif
}

/* Sixteen Q8_0 values from element i (a multiple of 16) as floats:
 * int8 x scale, tela_dequantize_row's arithmetic. */
static inline void load16_q8(tela_v16f *out, const void *base, int64_t i) {
    const unsigned char *blk = q8_block(base, i);
    const int8_t *qs = (const int8_t *)(blk + 2) + (uint64_t)i % TELA_QK8_0;
    const float d = q8_scale(blk);
#if defined(__AVX512F__)
    *out = (tela_v16f)_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)qs))),
                                    _mm512_set1_ps(d));
#else
    for (int j = 0; j < 16; j++) (*out)[j] = (float)qs[j] * d;
#endif
}

/* Element i of a cache array of any precision. */
static inline float kv_at(const tela_attn_args *a, const void *base, int64_t i) {
    if (a->kv_q8) {
        const unsigned char *blk = q8_block(base, i);
        return (float)((const int8_t *)(blk + 2))[i % TELA_QK8_0] * q8_scale(blk);
    }
    return a->kv_f16 ? tela_f16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

/* Sixteen elements of a cache array from element i (a multiple of 16). */
static inline void load16_at(const tela_attn_args *a, tela_v16f *out, const void *base, int64_t i) {
    if (a->kv_q8)
        load16_q8(out, base, i);
    else if (a->kv_f16)
        load16_f16(out, (const uint16_t *)base + i);
    else
        *out = *(const tela_v16f *)((const float *)base + i);
}

/* n elements of an f16 or Q8_0 row (from element i of base) as floats. */
static inline void kv_row_f32(const tela_attn_args *a, float *dst, const void *base, int64_t i, int n) {
    int j = 0;
    if (i % 16 == 0)
        for (; j + 16 <= n; j += 16) load16_at(a, (tela_v16f *)(dst + j), base, i + j);
    for (; j < n; j++) dst[j] = kv_at(a, base, i + j);
}

/* The address of element i of a cache array (whole Q8_0 blocks). */
static inline const void *kv_elem(const tela_attn_args *a, const void *base, int64_t i) {
    if (a->kv_q8) return q8_block(base, i);
    return (const char *)base + i * (a->kv_f16 ? 2 : 4);
}

/* Scores of 16 / QB keys starting at p0 against QB vectors of transposed
 * queries (qt[d][row], R = QB * 16 rows); keys past n_keys repeat the last
 * one (the causal mask removes them). st[p][row], mx[b] per row vector. */
static inline __attribute__((always_inline)) void attn_scores(const int QB, float *st, const float *qt,
                                                              const tela_attn_args *a, const void *kbase,
                                                              int64_t k_stride, int k_dim, int64_t p0,
                                                              int64_t n_keys, float scale, const tela_v16i *limit,
                                                              tela_v16f *mx, float *kconv) {
    const int KB = ATT_LANES / QB, R = QB * ATT_LANES;
    const float *kp[ATT_LANES];
    ATT_UNROLL for (int j = 0; j < KB; j++) {
        const int64_t off = attn_row(a, p0 + j < n_keys ? p0 + j : n_keys - 1) * k_stride;
        if (a->kv_f16 || a->kv_q8) { /* the f16 or Q8_0 rows converted once for the block's rows */
            kv_row_f32(a, kconv + (size_t)j * (size_t)k_dim, kbase, off, k_dim);
            kp[j] = kconv + (size_t)j * (size_t)k_dim;
        } else {
            kp[j] = (const float *)kbase + off;
        }
    }
    tela_v16f acc[ATT_LANES];
    ATT_UNROLL for (int i = 0; i < ATT_LANES; i++) acc[i] = (tela_v16f){0};
    for (int d = 0; d < k_dim; d++) {
        tela_v16f q[4];
        ATT_UNROLL for (int b = 0; b < QB; b++) q[b] = *(const tela_v16f *)(qt + d * R + b * ATT_LANES);
        ATT_UNROLL for (int j = 0; j < KB; j++) {
            const tela_v16f kv = SPLAT16(kp[j][d]);
            ATT_UNROLL for (int b = 0; b < QB; b++) acc[b * KB + j] = FMA16(q[b], kv, acc[b * KB + j]);
        }
    }
    const tela_v16f ninf = (tela_v16f){0} - __builtin_inff();
    ATT_UNROLL for (int j = 0; j < KB; j++) {
        if (p0 + j >= n_keys) break;
        ATT_UNROLL for (int b = 0; b < QB; b++) {
            const tela_v16i masked = (tela_v16i){0} + (int32_t)(p0 + j) > limit[b];
            tela_v16f v = acc[b * KB + j] * scale;
            v = (tela_v16f)(((tela_v16i)v & ~masked) | ((tela_v16i)ninf & masked));
            const tela_v16i gt = v > mx[b];
            mx[b] = (tela_v16f)(((tela_v16i)mx[b] & ~gt) | ((tela_v16i)v & gt));
            *(tela_v16f *)(st + (p0 + j) * R + b * ATT_LANES) = v;
        }
    }
}

/* o[r][d0..d0+63] (4 rows) += sum_p e[p][row_r] v_p over keys [p_begin,
 * p_end), e = st with R floats per key, the sums continuing from what o
 * holds (zero before the first keys): a block's rows take the keys tile
 * by tile, so that the tile's value rows stay in cache for all its rows,
 * and each sum still runs over p in order. The keys are walked in runs of
 * consecutive cache rows (a paged cache's blocks). */
static inline void attn_values_4x64(float *const *o, const int *row, const float *st, int R,
                                    const tela_attn_args *a, const void *vbase, int64_t v_stride, int64_t p_begin,
                                    int64_t p_end, int d0) {
    tela_v16f acc[4][4];
    ATT_UNROLL for (int r = 0; r < 4; r++)
        ATT_UNROLL for (int i = 0; i < 4; i++) acc[r][i] = *(const tela_v16f *)(o[r] + d0 + 16 * i);
    const int64_t run = a->blocks ? a->block_size : p_end;
    for (int64_t p = p_begin; p < p_end;) {
        const int64_t end = p - p % run + run < p_end ? p - p % run + run : p_end;
        int64_t off = attn_row(a, p) * v_stride + d0;
        for (; p < end; p++, off += v_stride) {
            tela_v16f v0, v1, v2, v3;
            load16_at(a, &v0, vbase, off), load16_at(a, &v1, vbase, off + 16), load16_at(a, &v2, vbase, off + 32),
                load16_at(a, &v3, vbase, off + 48);
            const float *e = st + p * R;
            ATT_UNROLL for (int r = 0; r < 4; r++) {
                const tela_v16f w = SPLAT16(e[row[r]]);
                acc[r][0] = FMA16(w, v0, acc[r][0]);
                acc[r][1] = FMA16(w, v1, acc[r][1]);
                acc[r][2] = FMA16(w, v2, acc[r][2]);
                acc[r][3] = FMA16(w, v3, acc[r][3]);
            }
        }
    }
    ATT_UNROLL for (int r = 0; r < 4; r++)
        ATT_UNROLL for (int i = 0; i < 4; i++) *(tela_v16f *)(o[r] + d0 + 16 * i) = acc[r][i];
}

#if defined(__AVX512F__)
/* In-place transpose of 16 vectors of 16 floats: r[i][j] -> r[j][i]. The
 * loops unrolled in full, or gcc keeps r and t in memory and every stage
 * goes through the stack. */
static inline __attribute__((always_inline)) void transpose16x16(__m512 *r) {
    __m512 t[16];
    ATT_UNROLL for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    ATT_UNROLL for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    /* rows now hold 4-element pieces: combine 128-bit lanes across groups */
    ATT_UNROLL for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    ATT_UNROLL for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
    }
}
#endif

#if defined(__AVX512F__)
/* Keys ahead of the score pass that it prefetches. */
#define KEY_PREFETCH 32
/* Value rows ahead of the value pass that it prefetches. On the AMD EPYC
 * VM this was no faster (session 22); on an Ice Lake Xeon the whole call
 * at 8,192 positions went from 35.9-38.5 to 32.2-34.3 ms a token on one
 * thread and 18.6-19.0 to 16.4-18.4 on two (Llama-3.2-1B shape, f16
 * cache; docs/PERF-NOTES.md, "CPU, batched decode round 4"). */
#define VALUE_PREFETCH 16

/* load16_at as an __m512. */
static inline __m512 load16_kv(const tela_attn_args *a, const void *base, int64_t off) {
    tela_v16f v;
    load16_at(a, &v, base, off);
    return (__m512)v;
}

/* Rows of an attention block of at most 4 rows (a decoding token's query
 * heads of one KV head): keys in the vector lanes instead of rows, so no
 * lane is idle. The arithmetic of each score, exp, sum and value sum is
 * the row path's, in the same order (the keys of 16 positions transposed
 * so that the sum over d stays one FMA chain per score; the softmax sum a
 * scalar chain over p), so a decoded token gets the bits a prefilled one
 * does. Needs k_dim % 16 == 0 and v_dim % 64 == 0; s holds 4 rows of
 * n_keys rounded up to 16 scores. */
static inline __attribute__((always_inline)) void attention_few_rows(const int n_rows, const tela_attn_args *a,
                                                                     const float *const *q, float *const *o,
                                                                     const int32_t *limit, int64_t n_keys,
                                                                     const void *kbase, const void *vbase, float *s) {
    const int64_t n_pad = (n_keys + 15) / 16 * 16;
    const int kd = a->k_dim;
    __m512 mx[4];
    for (int r = 0; r < 4; r++) mx[r] = _mm512_set1_ps(-__builtin_inff());
    /* 1. scores, 16 keys at a time */
    for (int64_t p0 = 0; p0 < n_keys; p0 += 16) {
        int64_t off[16];
        for (int j = 0; j < 16; j++) off[j] = attn_row(a, p0 + j < n_keys ? p0 + j : n_keys - 1) * a->k_stride;
        if (p0 + KEY_PREFETCH + 16 <= n_keys) /* the rows read in column order defeat the hardware prefetcher */
            for (int j = 0; j < 16; j++) {
                const int64_t e = attn_row(a, p0 + KEY_PREFETCH + j) * a->k_stride;
                const char *row = kv_elem(a, kbase, e), *end = kv_elem(a, kbase, e + kd);
                for (; row < end; row += 64) _mm_prefetch(row, _MM_HINT_T0);
            }
        __m512 acc[4];
        for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
        for (int d0 = 0; d0 < kd; d0 += 16) {
            __m512 kt[16];
            ATT_UNROLL for (int j = 0; j < 16; j++) kt[j] = load16_kv(a, kbase, off[j] + d0);
            transpose16x16(kt);
            ATT_UNROLL for (int dd = 0; dd < 16; dd++)
                ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d0 + dd]), kt[dd], acc[r]);
        }
        const __m512i pos = _mm512_add_epi32(_mm512_set1_epi32((int32_t)p0),
                                             _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
        ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) {
            const __mmask16 masked = _mm512_cmpgt_epi32_mask(pos, _mm512_set1_epi32(limit[r]));
            const __m512 v = _mm512_mask_mov_ps(_mm512_mul_ps(acc[r], _mm512_set1_ps(a->scale)), masked,
                                                _mm512_set1_ps(-__builtin_inff()));
            mx[r] = _mm512_max_ps(mx[r], v);
            _mm512_storeu_ps(s + r * n_pad + p0, v);
        }
    }
    /* 2. exp and the sums, each a chain over p in order */
    float sum[4] = {0, 0, 0, 0};
    ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) {
        const tela_v16f m = SPLAT16(_mm512_reduce_max_ps(mx[r]));
        float *sr = s + r * n_pad;
        for (int64_t p = 0; p < n_keys; p += 16) {
            tela_v16f e = *(tela_v16f *)(sr + p) - m;
            exp_v16(&e);
            *(tela_v16f *)(sr + p) = e;
        }
    }
    /* 3. weighted values, 64 dimensions of every row at a time, the value
     * rows walked in runs of consecutive cache rows; the first 64 also add
     * up the sums (the same chains over p in order, hidden under the FMAs
     * instead of a pass of their own) */
    const int64_t run = a->blocks ? a->block_size : n_keys;
    for (int d0 = 0; d0 < a->v_dim; d0 += 64) {
        __m512 acc[4][4];
        for (int r = 0; r < 4; r++)
            for (int i = 0; i < 4; i++) acc[r][i] = _mm512_setzero_ps();
        for (int64_t p = 0; p < n_keys;) {
            const int64_t end = p - p % run + run < n_keys ? p - p % run + run : n_keys;
            int64_t off = attn_row(a, p) * a->v_stride + d0;
            for (; p < end; p++, off += a->v_stride) {
                if (p + VALUE_PREFETCH < end) { /* the same 64 values of a row VALUE_PREFETCH ahead */
                    const int64_t e = off + VALUE_PREFETCH * a->v_stride;
                    const char *row = kv_elem(a, vbase, e), *row_end = kv_elem(a, vbase, e + 64);
                    for (; row < row_end; row += 64) _mm_prefetch(row, _MM_HINT_T0);
                }
                const __m512 v0 = load16_kv(a, vbase, off), v1 = load16_kv(a, vbase, off + 16),
                             v2 = load16_kv(a, vbase, off + 32), v3 = load16_kv(a, vbase, off + 48);
                if (d0 == 0) ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) sum[r] += s[r * n_pad + p];
                ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) {
                    const __m512 w = _mm512_set1_ps(s[r * n_pad + p]);
                    acc[r][0] = _mm512_fmadd_ps(w, v0, acc[r][0]);
                    acc[r][1] = _mm512_fmadd_ps(w, v1, acc[r][1]);
                    acc[r][2] = _mm512_fmadd_ps(w, v2, acc[r][2]);
                    acc[r][3] = _mm512_fmadd_ps(w, v3, acc[r][3]);
                }
            }
        }
        ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows)
            for (int i = 0; i < 4; i++) _mm512_storeu_ps(o[r] + d0 + 16 * i, acc[r][i]);
    }
    ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) {
        const float inv = 1.0f / sum[r];
        for (int d = 0; d < a->v_dim; d++) o[r][d] *= inv;
    }
}

/* attention_few_rows for a run-time row count (the loops over rows
 * unrolled for each). */
static void attention_few_rows_n(int n_rows, const tela_attn_args *a, const float *const *q, float *const *o,
                                 const int32_t *limit, int64_t n_keys, const void *kbase, const void *vbase, float *s) {
    switch (n_rows) {
    case 1: attention_few_rows(1, a, q, o, limit, n_keys, kbase, vbase, s); break;
    case 2: attention_few_rows(2, a, q, o, limit, n_keys, kbase, vbase, s); break;
    case 3: attention_few_rows(3, a, q, o, limit, n_keys, kbase, vbase, s); break;
    default: attention_few_rows(4, a, q, o, limit, n_keys, kbase, vbase, s); break;
    }
}
#endif

/* Keys per tile of the values pass: 128 value rows of up to 256 floats
 * (128 KiB) stay in L2 while every row group of the block takes them. */
#define ATT_KEY_TILE 128

/* Block `chunk` of rows: the part whose chunks hold it, then KV head
 * c / n_blocks of that part, rows (t, head in group) numbered
 * t * group + j. */
static void attention_block(void *arg, int chunk, int ith) {
    const attn_job *jobs = arg;
    int pi = 0;
    while (pi + 1 < jobs->n_parts && chunk >= jobs->parts[pi + 1].chunk0) pi++;
    const attn_part *job = &jobs->parts[pi];
    chunk -= job->chunk0;
    const tela_attn_args *a = job->a;
    const int QB = job->qb, R = QB * ATT_LANES;
    const int kvh = (int)(chunk / job->n_blocks);
    const long long r0 = (chunk % job->n_blocks) * R;
    const int n_rows = (int)(job->n_rows - r0 < R ? job->n_rows - r0 : R);
    float *scratch = tela_threadpool_scratch(jobs->pool, ith);
    float *qt = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *st = qt + (size_t)R * (a->k_dim + 4);
    int tok[ATT_MAX_ROWS], head[ATT_MAX_ROWS];
    tela_v16i limit[4];
    int64_t n_keys = 0;
    for (int l = 0; l < R; l++) {
        const long long r = r0 + (l < n_rows ? l : n_rows - 1);
        tok[l] = (int)(r / job->group);
        head[l] = kvh * job->group + (int)(r % job->group);
        limit[l / ATT_LANES][l % ATT_LANES] = l < n_rows ? a->pos0 + tok[l] : -1;
        if (l < n_rows && a->pos0 + tok[l] + 1 > n_keys) n_keys = a->pos0 + tok[l] + 1;
    }
    const void *kbase = kv_elem(a, a->k, (int64_t)kvh * (a->k_head_stride ? a->k_head_stride : a->k_dim));
    const void *vbase = kv_elem(a, a->v, (int64_t)kvh * (a->v_head_stride ? a->v_head_stride : a->v_dim));
#if defined(__AVX512F__)
    if (n_rows <= 4 && a->k_dim % 16 == 0 && a->v_dim % 64 == 0) { /* a decoding token's rows */
        const float *qr[4];
        float *orow[4];
        int32_t lim[4];
        for (int l = 0; l < n_rows; l++) {
            qr[l] = a->q + tok[l] * a->q_stride + (int64_t)head[l] * a->k_dim;
            orow[l] = a->out + tok[l] * a->out_stride + (int64_t)head[l] * a->v_dim;
            lim[l] = a->pos0 + tok[l];
        }
        attention_few_rows_n(n_rows, a, qr, orow, lim, n_keys, kbase, vbase, qt);
        return;
    }
#endif
    for (int l = 0; l < R; l++) {
        const float *q = a->q + tok[l] * a->q_stride + (int64_t)head[l] * a->k_dim;
        for (int d = 0; d < a->k_dim; d++) qt[d * R + l] = q[d];
    }
    /* 1. scores and their row maxima */
    tela_v16f mx[4];
    for (int b = 0; b < 4; b++) mx[b] = (tela_v16f){0} - __builtin_inff();
    float *kconv = st + (size_t)R * (size_t)n_keys; /* f16 keys as floats, ATT_LANES rows */
    kconv = (float *)(((uintptr_t)kconv + 63) & ~(uintptr_t)63);
    const int kb = ATT_LANES / QB;
    for (int64_t p0 = 0; p0 < n_keys; p0 += kb) {
        if (QB == 4)
            attn_scores(4, st, qt, a, kbase, a->k_stride, a->k_dim, p0, n_keys, a->scale, limit, mx, kconv);
        else if (QB == 2)
            attn_scores(2, st, qt, a, kbase, a->k_stride, a->k_dim, p0, n_keys, a->scale, limit, mx, kconv);
        else
            attn_scores(1, st, qt, a, kbase, a->k_stride, a->k_dim, p0, n_keys, a->scale, limit, mx, kconv);
    }
    /* 2. exp and sums (masked scores are -inf: exp gives 0) */
    tela_v16f sum[4] = {{0}, {0}, {0}, {0}};
    for (int64_t p = 0; p < n_keys; p++)
        for (int b = 0; b < QB; b++) {
            tela_v16f e = *(tela_v16f *)(st + p * R + b * ATT_LANES) - mx[b];
            exp_v16(&e);
            *(tela_v16f *)(st + p * R + b * ATT_LANES) = e;
            sum[b] += e;
        }
    /* 3. weighted values: tile by tile of keys, 4 rows x 64 dimensions at a
     * time (the full groups of 4 rows, the multiples of 64 dimensions), then
     * the rest one element at a time, then the normalization */
    const int n_full = n_rows / 4 * 4, d_full = a->v_dim / 64 * 64;
    float *o_of[ATT_MAX_ROWS];
    for (int l = 0; l < n_rows; l++) o_of[l] = a->out + tok[l] * a->out_stride + (int64_t)head[l] * a->v_dim;
    if (d_full > 0)
        for (int l = 0; l < n_full; l++) memset(o_of[l], 0, sizeof(float) * (size_t)d_full);
    if (d_full > 0)
        for (int64_t kt = 0; kt < n_keys; kt += ATT_KEY_TILE) {
            const int64_t kend = kt + ATT_KEY_TILE < n_keys ? kt + ATT_KEY_TILE : n_keys;
            for (int l0 = 0; l0 < n_full; l0 += 4) {
                const int row[4] = {l0, l0 + 1, l0 + 2, l0 + 3};
                float *o[4] = {o_of[l0], o_of[l0 + 1], o_of[l0 + 2], o_of[l0 + 3]};
                for (int d0 = 0; d0 < d_full; d0 += 64) attn_values_4x64(o, row, st, R, a, vbase, a->v_stride, kt, kend, d0);
            }
        }
    for (int l = 0; l < n_rows; l++) {
        float *o = o_of[l];
        for (int d = l < n_full ? d_full : 0; d < a->v_dim; d++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < n_keys; p++) acc = fma1(st[p * R + l], kv_at(a, vbase, attn_row(a, p) * a->v_stride + d), acc);
            o[d] = acc;
        }
        const float inv = 1.0f / sum[l / ATT_LANES][l % ATT_LANES];
        for (int d = 0; d < a->v_dim; d++) o[d] *= inv;
    }
}

/* tela_op_attention (ops.h) in this file's variant; attention.c picks one. */
void TELA_VARIANT(tela_op_attention)(tela_threadpool *pool, const tela_attn_args *args, int n_args) {
    attn_part stack[16], *parts = n_args <= 16 ? stack : malloc((size_t)n_args * sizeof *parts);
    if (!parts) { /* no memory for the table: one dispatch each */
        for (int i = 0; i < n_args; i++) TELA_VARIANT(tela_op_attention)(pool, args + i, 1);
        return;
    }
    int chunks = 0;
    for (int i = 0; i < n_args; i++) {
        const tela_attn_args *a = &args[i];
        attn_part *job = &parts[i];
        *job = (attn_part){a, a->n_head / a->n_kv_head, 1, 0, 0, chunks};
        job->n_rows = (long long)a->n_tok * job->group;
        /* as many row vectors per block as there are rows and scratch for */
        const size_t per_row = (size_t)a->pos0 + (size_t)a->n_tok + (size_t)a->k_dim + 4;
        const size_t kconv = ATT_LANES * (size_t)a->k_dim + 32;
        while (job->qb < 4 && job->n_rows > (long long)job->qb * ATT_LANES &&
               tela_threadpool_scratch_size(pool) >= (size_t)(2 * job->qb * ATT_LANES) * per_row + 16 + kconv)
            job->qb *= 2;
        job->n_blocks = (job->n_rows + job->qb * ATT_LANES - 1) / (job->qb * ATT_LANES);
        chunks += (int)(job->n_blocks * a->n_kv_head);
    }
    attn_job job = {pool, parts, n_args};
    tela_threadpool_run_chunks(pool, attention_block, &job, chunks);
    if (parts != stack) free(parts);
}
