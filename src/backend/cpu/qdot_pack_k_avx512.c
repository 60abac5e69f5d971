/* qdot_pack_k_avx512.c: packed-layout kernels for the K-quants Q4_K and
 * Q6_K with AVX-512 VNNI (the packed interface is described in qdot.h).
 *
 * Why a packed layout: in the row-major GGUF layout a SIMD register holds
 * 64 consecutive levels of ONE weight row, so every output needs a
 * horizontal sum, and the 6-bit sub-block scales have to be applied inside
 * the product (VPMADDUBSW + VPDPWSSD: 2 instructions per 64 products). Here
 * a group of 16 rows is interleaved so that a register holds 4 consecutive
 * levels of all 16 rows (lane r = row r). One VPDPBUSD with 4 activation
 * bytes broadcast from memory then does 64 useful products into 16
 * independent per-row sums, reused for up to 8 activation columns; the
 * sub-block scale is applied once per 32 (Q4_K) or 16 (Q6_K) elements by an
 * integer multiply of the per-row sums, and the super-block's float step is
 * done on 16 rows at once. No horizontal sums at all.
 *
 * Results are bit-identical to the scalar vec_dot (qdot.c): each
 * super-block's isum and msum are exact integers whatever the order they
 * are summed in, and the float step is the scalar k_step, lane by lane.
 *
 * A group holds, per 256-element super-block (SB bytes), the 16 rows'
 *   Q4_K: d[16], dmin[16] (f16), scale[8][16], min[8][16] (u8, unpacked from
 *         the 6-bit fields), then the nibbles: vector (c, s) for c < 4,
 *         s < 8 holds bytes qs[32c + 4s .. 32c + 4s + 3] of each row, whose
 *         low nibbles are elements 64c + 4s + 0..3 and high nibbles
 *         64c + 32 + 4s + 0..3 (2368 bytes vs 16 x 144 in the file).
 *   Q6_K: scale pairs [8][16][2] (int8: scales 2q, 2q + 1 of each row),
 *         d[16] (f32), then for each (h, s), h < 2, s < 8, three vectors:
 *         ql[64h + 4s .. +3], ql[64h + 32 + 4s .. +3] and qh[32h + 4s .. +3]
 *         of each row (3392 bytes vs 16 x 210). The three vectors that make
 *         the levels of step (h, s) are adjacent, so a decode tile reads
 *         each group as one forward stream.
 * The levels stay unsigned (Q4_K 0..15, Q6_K 0..63), the unsigned operand
 * of VPDPBUSD; Q6_K's -32 offset is removed per super-block with the
 * activation block sums (bsums) that Q8_K rows carry. */
#include "backend/cpu/qdot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/qdot_pack_k.h"
#include "quant/quant.h"
#include "util/fp16.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")))
#define INL static inline __attribute__((always_inline)) TGT
/* clang reads "GCC unroll N" as a count it may ignore: ask it for full
 * unrolling, which is what keeps the accumulator arrays in registers. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

#define PR TELA_PK_ROWS  /* rows per group */
/* Activation columns per tile: 12 independent accumulator chains per
 * sub-block, enough to keep two VPDPBUSD a cycle busy through their
 * 5-cycle latency (8 chains measured ~15% slower). */
#define MAX_COLS 12

static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline float rd_f32(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }

/* A zeroed register by the xor idiom, which the CPU executes at register
 * renaming; left to itself the compiler copies one shared zero register
 * instead, an extra vector instruction per accumulator and sub-block. */
INL __m512i zero_idiom(void) {
    __m512i z;
    __asm__ volatile("vpxord %0, %0, %0" : "=v"(z));
    return z;
}

/* Broadcast of 4 activation bytes (the compilers fold it into VPDPBUSD's
 * {1to16} memory operand). */
INL __m512i bcast4(const uint8_t *p) { return _mm512_set1_epi32((int)rd32(p)); }

/* acc + VPDPBUSD(w, the 4 activation bytes at p broadcast), the broadcast
 * as the instruction's {1to16} memory operand: GCC 12 keeps it a separate
 * VPBROADCASTD (one more instruction for every product of a decode tile). */
INL __m512i dpbusd_bcast(__m512i acc, __m512i w, const uint8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const uint32_t *)(const void *)p));
    return acc;
}

/* acc + VPDPBUSD(w, x at p broadcast) in a tile of C columns: with the
 * broadcast folded into the instruction for one column (decode: +12-16% on
 * the Q6_K head and FFN on the AMD EPYC VM, docs/PERF-NOTES.md), as a
 * separate broadcast for several (the folded form measured 5-10% slower
 * in prefill there). */
INL __m512i dot_x(__m512i acc, __m512i w, const uint8_t *p, const int C) {
    return C == 1 ? dpbusd_bcast(acc, w, p) : _mm512_dpbusd_epi32(acc, w, bcast4(p));
}

/* The same for VPDPWSSD (int16 pairs). */
INL __m512i dpwssd_bcast(__m512i acc, __m512i w, const uint8_t *p) {
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const uint32_t *)(const void *)p));
    return acc;
}

/* dot_x for VPDPWSSD (the mins' and offsets' int16 pairs). */
INL __m512i dot_pairs_x(__m512i acc, __m512i w, const uint8_t *p, const int C) {
    return C == 1 ? dpwssd_bcast(acc, w, p) : _mm512_dpwssd_epi32(acc, w, bcast4(p));
}

/* Stores a group's 16 results for one column, only rows < valid. */
INL void store_rows(float *out, __m512 v, int valid) {
    if (valid >= PR)
        _mm512_storeu_ps(out, v);
    else
        _mm512_mask_storeu_ps(out, (__mmask16)((1u << valid) - 1), v);
}

/* Activation columns per panel: the panel's rows (Q8_K, x_row bytes each)
 * should stay in L2 (2 MB on the target cores; leave room for the weights)
 * while every group passes over them. A multiple of MAX_COLS. */
static int64_t panel_cols(size_t x_row) {
    int64_t c = (int64_t)((1u << 20) / (x_row ? x_row : 1));
    c = c / MAX_COLS * MAX_COLS;
    return c < MAX_COLS ? MAX_COLS : c;
}

/* Prefetch distance, in super-blocks, of every tile. With several columns
 * each weight line is used by C products, ~C cycles a vector, which leaves
 * the hardware prefetchers behind (perf: the 8-column Q4_K tile stalled on
 * its weight loads, compute and memory in series). Decoding (one column)
 * streams faster with it too: on the AMD EPYC (Zen 5) VM, 2 threads, 1B
 * Q4_K_M tg64 went from 53-61 to 60-70 tok/s, the Q6_K head from ~40 to
 * ~60 GB/s (docs/PERF-NOTES.md). 0: off. */
#ifndef PF_SB
#define PF_SB 2
#endif
/* ... into L1 (a build-time knob, as PF_SB, for experiments) */
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0
#endif

/* 1: the tiles prefetch the level vectors of the super-block PF_SB ahead
 * one at a time as they go (with each weight vector they load), 0: all its
 * lines at the start of each super-block. A burst of 37-53 prefetches
 * holds the L1's fill buffers while the tile computes; spread, the 8-column
 * tiles' stream overlaps their products: on the lent machines' host Xeons
 * (2 threads), 8 sequences of the 1B Q4_K_M 98-143 tok/s against 83-115
 * with the burst, six pairs, each faster; the 2B 62-72 against 54-60
 * (docs/PERF-NOTES.md, "CPU, batched decode round 3"). A build-time knob,
 * as PF_SB. */
#ifndef PF_SPREAD
#define PF_SPREAD 1
#endif

/* Prefetches bytes [0, n) of p, a line at a time. */
INL void prefetch_lines(const uint8_t *p, int n) {
    for (int o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + o), PF_HINT);
}

/* ------------------------------------------------------------------ Q4_K */

static size_t q4_K_group_bytes(int64_t n) { return (size_t)(n / 256) * Q4K_SB; }

static void q4_K_pack(const void *vw, size_t ws, int64_t n_rows, int64_t n, int64_t g0, int64_t g1, void *packed) {
    const int64_t nsb = n / 256;
    for (int64_t g = g0; g < g1; g++) {
        for (int64_t b = 0; b < nsb; b++) {
            uint8_t *dst = (uint8_t *)packed + (size_t)(g * nsb + b) * Q4K_SB;
            memset(dst, 0, Q4K_SB);
            for (int i = 0; i < PR; i++) {
                const int64_t r = g * PR + i;
                if (r >= n_rows) break;
                const uint8_t *blk = (const uint8_t *)vw + (size_t)r * ws + (size_t)b * sizeof(tela_block_q4_K);
                memcpy(dst + Q4K_D + 2 * i, blk + offsetof(tela_block_q4_K, d), 2);
                memcpy(dst + Q4K_DMIN + 2 * i, blk + offsetof(tela_block_q4_K, dmin), 2);
                for (int j = 0; j < 8; j++)
                    tela_k4_unpack_scale_min(blk + offsetof(tela_block_q4_K, scales), j, dst + Q4K_SC + 16 * j + i,
                                             dst + Q4K_M + 16 * j + i);
                const uint8_t *qs = blk + offsetof(tela_block_q4_K, qs);
                for (int c = 0; c < 4; c++)
                    for (int s = 0; s < 8; s++) memcpy(dst + Q4K_Q + (c * 8 + s) * 64 + 4 * i, qs + 32 * c + 4 * s, 4);
            }
        }
    }
}

/* One group x C columns over all super-blocks: f[c] returns the 16 rows'
 * results of column c. lv: unused (the nibbles are unpacked in the loop;
 * unpacking them once per panel measured no faster). */
INL void q4_K_tile(const uint8_t *w, const uint8_t *x, size_t xs, const int C, int64_t nsb, __m512 *f,
                   const uint8_t *lv) {
    (void)lv;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    UNROLL for (int c = 0; c < C; c++) f[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *wb = w + (size_t)b * Q4K_SB, *xb = x + (size_t)b * X_BYTES;
        if (PF_SB) prefetch_lines(wb + PF_SB * Q4K_SB, PF_SPREAD ? Q4K_Q : Q4K_SB);
        __m512i tot[MAX_COLS], acc[MAX_COLS];
        UNROLL for (int c = 0; c < C; c++) tot[c] = _mm512_setzero_si512();
        for (int c4 = 0; c4 < 4; c4++) {
            UNROLL for (int hi = 0; hi < 2; hi++) {
                UNROLL for (int c = 0; c < C; c++) acc[c] = zero_idiom();
                UNROLL for (int s = 0; s < 8; s++) {
                    if (PF_SB && PF_SPREAD && !hi) prefetch_lines(wb + PF_SB * Q4K_SB + Q4K_Q + (c4 * 8 + s) * 64, 64);
                    const __m512i v = _mm512_loadu_si512(wb + Q4K_Q + (c4 * 8 + s) * 64);
                    const __m512i wv = _mm512_and_si512(hi ? _mm512_srli_epi16(v, 4) : v, m4);
                    UNROLL for (int c = 0; c < C; c++)
                        acc[c] = dot_x(acc[c], wv, xb + c * xs + X_QS + 64 * c4 + 32 * hi + 4 * s, C);
                }
                const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(wb + Q4K_SC + 16 * (2 * c4 + hi))));
                UNROLL for (int c = 0; c < C; c++) tot[c] = _mm512_add_epi32(tot[c], _mm512_mullo_epi32(acc[c], sc));
            }
        }
        /* msum = sum_j min_j * (bsums[2j] + bsums[2j + 1]), one VPDPWSSD per
         * sub-block with each row's min in both int16 halves of its lane. */
        UNROLL for (int c = 0; c < C; c++) acc[c] = zero_idiom();
        UNROLL for (int j = 0; j < 8; j++) {
            const __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(wb + Q4K_M + 16 * j)));
            const __m512i mv = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
            UNROLL for (int c = 0; c < C; c++) acc[c] = dot_pairs_x(acc[c], mv, xb + c * xs + X_BSUMS + 4 * j, C);
        }
        /* The scalar k_step, 16 rows at a time. */
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wb + Q4K_D)));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wb + Q4K_DMIN)));
        UNROLL for (int c = 0; c < C; c++) {
            const __m512 dx = _mm512_set1_ps(rd_f32(xb + c * xs));
            __m512 a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[c]), _mm512_mul_ps(d, dx), f[c]);
            f[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(acc[c]), _mm512_mul_ps(dmin, dx), a);
        }
    }
}

/* ------------------------------------------------------------------ Q6_K */

static size_t q6_K_group_bytes(int64_t n) { return (size_t)(n / 256) * Q6K_SB; }

static void q6_K_pack(const void *vw, size_t ws, int64_t n_rows, int64_t n, int64_t g0, int64_t g1, void *packed) {
    const int64_t nsb = n / 256;
    for (int64_t g = g0; g < g1; g++) {
        for (int64_t b = 0; b < nsb; b++) {
            uint8_t *dst = (uint8_t *)packed + (size_t)(g * nsb + b) * Q6K_SB;
            memset(dst, 0, Q6K_SB);
            for (int i = 0; i < PR; i++) {
                const int64_t r = g * PR + i;
                if (r >= n_rows) break;
                const uint8_t *blk = (const uint8_t *)vw + (size_t)r * ws + (size_t)b * sizeof(tela_block_q6_K);
                const uint8_t *ql = blk + offsetof(tela_block_q6_K, ql), *qh = blk + offsetof(tela_block_q6_K, qh);
                const uint8_t *sc = blk + offsetof(tela_block_q6_K, scales);
                for (int q = 0; q < 8; q++) memcpy(dst + Q6K_SC + (q * 16 + i) * 2, sc + 2 * q, 2);
                uint16_t h;
                memcpy(&h, blk + offsetof(tela_block_q6_K, d), 2);
                const float d = tela_f16_to_f32(h);
                memcpy(dst + Q6K_D + 4 * i, &d, 4);
                for (int hh = 0; hh < 2; hh++)
                    for (int s = 0; s < 8; s++) {
                        for (int half = 0; half < 2; half++)
                            memcpy(dst + Q6K_VEC(hh, s, half) + 4 * i, ql + 64 * hh + 32 * half + 4 * s, 4);
                        memcpy(dst + Q6K_VEC(hh, s, 2) + 4 * i, qh + 32 * hh + 4 * s, 4);
                    }
            }
        }
    }
}

/* One group, one column (decode): the super-block's vectors in the order
 * they are stored, all four 32-element groups gq of a step (hh, s) from its
 * three vectors, so the group is read as one forward stream. Reading it gq
 * by gq, as the tiles below do, streamed 36 GB/s from DRAM against 41 for
 * this order (2 threads, the AMD EPYC VM). */
INL void q6_K_dec(const uint8_t *w, const uint8_t *x, int64_t nsb, __m512 *f) {
    const __m512i m0f = _mm512_set1_epi8(0x0F), m3f = _mm512_set1_epi8(0x3F);
    __m512 out = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *wb = w + (size_t)b * Q6K_SB, *xb = x + (size_t)b * X_BYTES;
        __m512i tot = _mm512_setzero_si512();
        /* the super-block PF_SB ahead: its scales now, its level vectors
         * step by step below */
        if (PF_SB) prefetch_lines(wb + PF_SB * Q6K_SB, Q6K_Q);
        UNROLL for (int hh = 0; hh < 2; hh++) {
            __m512i pair[4];
            UNROLL for (int gq = 0; gq < 4; gq++)
                pair[gq] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(wb + Q6K_SC + (4 * hh + gq) * 32)));
            UNROLL for (int half = 0; half < 2; half++) {
                __m512i acc[4];
                UNROLL for (int gq = 0; gq < 4; gq++) acc[gq] = zero_idiom();
                UNROLL for (int s4 = 0; s4 < 4; s4++) {
                    const int s = 4 * half + s4;
                    if (PF_SB) prefetch_lines(wb + PF_SB * Q6K_SB + Q6K_VEC(hh, s, 0), 3 * 64); /* the step's 3 vectors */
                    const __m512i l0 = _mm512_loadu_si512(wb + Q6K_VEC(hh, s, 0));
                    const __m512i l1 = _mm512_loadu_si512(wb + Q6K_VEC(hh, s, 1));
                    const __m512i h = _mm512_loadu_si512(wb + Q6K_VEC(hh, s, 2));
                    /* (a & 0x0F) | (h' & 0x30): a where m0f is set, else h', then bits 6-7 dropped */
                    const __m512i lv[4] = {
                        _mm512_and_si512(_mm512_ternarylogic_epi32(l0, _mm512_slli_epi16(h, 4), m0f, 0xE4), m3f),
                        _mm512_and_si512(_mm512_ternarylogic_epi32(l1, _mm512_slli_epi16(h, 2), m0f, 0xE4), m3f),
                        _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srli_epi16(l0, 4), h, m0f, 0xE4), m3f),
                        _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srli_epi16(l1, 4), _mm512_srli_epi16(h, 2), m0f, 0xE4),
                                         m3f)};
                    UNROLL for (int gq = 0; gq < 4; gq++)
                        acc[gq] = dpbusd_bcast(acc[gq], lv[gq], xb + X_QS + 128 * hh + 32 * gq + 4 * s);
                }
                UNROLL for (int gq = 0; gq < 4; gq++) {
                    const __m512i sc = half ? _mm512_srai_epi32(pair[gq], 16)
                                            : _mm512_srai_epi32(_mm512_slli_epi32(pair[gq], 16), 16);
                    tot = _mm512_add_epi32(tot, _mm512_mullo_epi32(acc[gq], sc));
                }
            }
        }
        __m512i off = zero_idiom();
        UNROLL for (int q = 0; q < 8; q++) {
            const __m512i pair = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(wb + Q6K_SC + q * 32)));
            off = dpwssd_bcast(off, pair, xb + X_BSUMS + 4 * q);
        }
        const __m512 d = _mm512_loadu_ps((const float *)(const void *)(wb + Q6K_D));
        const __m512i isum = _mm512_sub_epi32(tot, _mm512_slli_epi32(off, 5));
        out = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, _mm512_set1_ps(rd_f32(xb))), out);
    }
    f[0] = out;
}

/* One group x C columns; lv: the group's unpacked levels
 * (tela_pk_q6_K_unpack) or NULL to unpack from the packed group as it goes. */
INL void q6_K_tile(const uint8_t *w, const uint8_t *x, size_t xs, const int C, int64_t nsb, __m512 *f,
                   const uint8_t *lv) {
    if (C == 1 && !lv) {
        q6_K_dec(w, x, nsb, f);
        return;
    }
    const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    UNROLL for (int c = 0; c < C; c++) f[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *wb = w + (size_t)b * Q6K_SB, *xb = x + (size_t)b * X_BYTES;
        if (PF_SB && !lv) prefetch_lines(wb + PF_SB * Q6K_SB, PF_SPREAD ? Q6K_Q : Q6K_SB); /* (one column: q6_K_dec) */
        __m512i tot[MAX_COLS], acc[MAX_COLS];
        UNROLL for (int c = 0; c < C; c++) tot[c] = _mm512_setzero_si512();
        for (int hh = 0; hh < 2; hh++) {
            UNROLL for (int gq = 0; gq < 4; gq++) {
                const __m512i pair = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(wb + Q6K_SC + (4 * hh + gq) * 32)));
                UNROLL for (int half = 0; half < 2; half++) {
                    UNROLL for (int c = 0; c < C; c++) acc[c] = zero_idiom();
                    UNROLL for (int s4 = 0; s4 < 4; s4++) {
                        const int s = 4 * half + s4;
                        if (PF_SB && PF_SPREAD && !lv && gq == 0) /* the step's 3 vectors */
                            prefetch_lines(wb + PF_SB * Q6K_SB + Q6K_VEC(hh, s, 0), 3 * 64);
                        const __m512i wv = lv ? _mm512_load_si512(lv + ((b * 2 + hh) * 4 + gq) * 512 + s * 64)
                                              : tela_pk_q6_levels(wb, hh, gq, s, m0f, m30);
                        UNROLL for (int c = 0; c < C; c++)
                            acc[c] = _mm512_dpbusd_epi32(acc[c], wv, bcast4(xb + c * xs + X_QS + 128 * hh + 32 * gq + 4 * s));
                    }
                    /* this sub-block's scale: the low or high int16 of each lane, sign-extended */
                    const __m512i sc = half ? _mm512_srai_epi32(pair, 16) : _mm512_srai_epi32(_mm512_slli_epi32(pair, 16), 16);
                    UNROLL for (int c = 0; c < C; c++) tot[c] = _mm512_add_epi32(tot[c], _mm512_mullo_epi32(acc[c], sc));
                }
            }
        }
        /* The -32 offset: isum = tot - 32 * sum_k scale_k * bsums[k]. */
        UNROLL for (int c = 0; c < C; c++) acc[c] = zero_idiom();
        UNROLL for (int q = 0; q < 8; q++) {
            const __m512i pair = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(wb + Q6K_SC + q * 32)));
            UNROLL for (int c = 0; c < C; c++) acc[c] = _mm512_dpwssd_epi32(acc[c], pair, bcast4(xb + c * xs + X_BSUMS + 4 * q));
        }
        /* The scalar k_step with msum = 0 (adding -0 * 0 changes nothing). */
        const __m512 d = _mm512_loadu_ps((const float *)(const void *)(wb + Q6K_D));
        UNROLL for (int c = 0; c < C; c++) {
            const __m512 dx = _mm512_set1_ps(rd_f32(xb + c * xs));
            const __m512i isum = _mm512_sub_epi32(tot[c], _mm512_slli_epi32(acc[c], 5));
            f[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dx), f[c]);
        }
    }
}

/* ------------------------------------------------------------ the gemms */

/* One tile: group g x columns [c0, c0 + C). */
#define TILE_FN(NAME, C)                                                                                              \
    static TGT void NAME##_t##C(const uint8_t *pw, size_t gb, int64_t n_rows, int64_t g, const uint8_t *x, size_t xs, \
                                int64_t c0, int64_t nsb, float *out, int64_t os, const uint8_t *lv) {                 \
        __m512 f[C];                                                                                                  \
        NAME##_tile(pw + (size_t)g * gb, x + (size_t)c0 * xs, xs, C, nsb, f, lv);                                     \
        for (int c = 0; c < C; c++) store_rows(out + (c0 + c) * os + g * PR, f[c], (int)(n_rows - g * PR));          \
    }

typedef void (*tile_fn)(const uint8_t *pw, size_t gb, int64_t n_rows, int64_t g, const uint8_t *x, size_t xs,
                        int64_t c0, int64_t nsb, float *out, int64_t os, const uint8_t *lv);

/* Unpacks a group's levels for reuse by every column tile of a panel. */
typedef void (*unpack_fn)(const uint8_t *w, int64_t nsb, uint8_t *dst);

/* Walks groups [g0, g1) x all columns. Decoding (one column) takes the
 * groups one after another, so each thread reads its rows as one forward
 * stream: four groups at a time (four streams a group apart, for more
 * loads in flight) measured 12-16% slower from DRAM on the AMD EPYC VM.
 * Otherwise column panels that stay in L2, each group sweeping the panel
 * MAX_COLS columns at a time (narrower tiles at the end). cols[C] is the
 * tile of C columns. */
static void run_packed(const void *packed, size_t gb, int64_t n_rows, int64_t g0, int64_t g1, const void *vx,
                       size_t xs, int64_t n_cols, int64_t nsb, float *out, int64_t os, tile_fn const cols[MAX_COLS + 1],
                       unpack_fn unpack, size_t unpacked_sb) {
    const uint8_t *pw = packed, *x = vx;
    if (n_cols == 1) {
        for (int64_t g = g0; g < g1; g++) cols[1](pw, gb, n_rows, g, x, xs, 0, nsb, out, os, NULL);
        return;
    }
    /* unpacked levels pay when at least two column tiles reuse them */
    uint8_t *lv = unpack && n_cols > MAX_COLS ? aligned_alloc(64, unpacked_sb * (size_t)nsb) : NULL;
    const int64_t pc = panel_cols(xs);
    for (int64_t p0 = 0; p0 < n_cols; p0 += pc) {
        const int64_t p1 = p0 + pc < n_cols ? p0 + pc : n_cols;
        for (int64_t g = g0; g < g1; g++) {
            if (lv) unpack(pw + (size_t)g * gb, nsb, lv);
            for (int64_t c0 = p0; c0 < p1; c0 += MAX_COLS) {
                const int64_t c = p1 - c0 < MAX_COLS ? p1 - c0 : MAX_COLS;
                cols[c](pw, gb, n_rows, g, x, xs, c0, nsb, out, os, lv);
            }
        }
    }
    free(lv);
}

#define PACKED_GEMM(NAME, UNPACK, UNPACKED_SB)                                                                        \
    TILE_FN(NAME, 1)                                                                                                  \
    TILE_FN(NAME, 2)                                                                                                  \
    TILE_FN(NAME, 3)                                                                                                  \
    TILE_FN(NAME, 4)                                                                                                  \
    TILE_FN(NAME, 5)                                                                                                  \
    TILE_FN(NAME, 6)                                                                                                  \
    TILE_FN(NAME, 7)                                                                                                  \
    TILE_FN(NAME, 8)                                                                                                  \
    TILE_FN(NAME, 9)                                                                                                  \
    TILE_FN(NAME, 10)                                                                                                 \
    TILE_FN(NAME, 11)                                                                                                 \
    TILE_FN(NAME, 12)                                                                                                 \
    static void NAME##_gemm_packed(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x,        \
                                   size_t xs, int64_t n_cols, int64_t n, float *out, int64_t os) {                    \
        if (tela_qdot_amx_gemm_##NAME(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os)) return; /* same bits */   \
        static tile_fn const cols[MAX_COLS + 1] = {NULL,      NAME##_t1, NAME##_t2, NAME##_t3,  NAME##_t4,            \
                                                   NAME##_t5, NAME##_t6, NAME##_t7, NAME##_t8,  NAME##_t9,            \
                                                   NAME##_t10, NAME##_t11, NAME##_t12};                               \
        run_packed(packed, NAME##_group_bytes(n), n_rows, g0, g1, x, xs, n_cols, n / 256, out, os, cols, UNPACK,      \
                   UNPACKED_SB);                                                                                      \
    }

PACKED_GEMM(q4_K, NULL, 0)
PACKED_GEMM(q6_K, tela_pk_q6_K_unpack, 4096)

void tela_qdot_fill_packed_k_avx512(tela_qdot_isa_table *t) {
    t->packing[TELA_TYPE_Q4_K] = (tela_qdot_packing){PR, q4_K_group_bytes, q4_K_pack, q4_K_gemm_packed};
    t->packing[TELA_TYPE_Q6_K] = (tela_qdot_packing){PR, q6_K_group_bytes, q6_K_pack, q6_K_gemm_packed};
}

#endif /* __x86_64__ */
