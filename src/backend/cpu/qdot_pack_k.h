/* qdot_pack_k.h: the packed K-quant layout (Q4_K, Q6_K groups of 16 rows)
 * and the unpacking of its Q6_K levels, shared by its two gemms: the
 * AVX-512 VNNI tiles (qdot_pack_k_avx512.c, where the layout is described)
 * and the AMX tiles (qdot_pack_amx.c). */
#ifndef TELA_BACKEND_CPU_QDOT_PACK_K_H
#define TELA_BACKEND_CPU_QDOT_PACK_K_H

#include <stddef.h>
#include <stdint.h>

#define TELA_PK_ROWS 16 /* rows per group */

/* Byte offsets inside one packed super-block of a Q4_K group. */
enum { Q4K_D = 0, Q4K_DMIN = 32, Q4K_SC = 64, Q4K_M = 192, Q4K_Q = 320, Q4K_SB = 2368 };
/* ... of a Q6_K group; step (hh, s)'s vector v (0, 1: ql halves; 2: qh). */
enum { Q6K_SC = 0, Q6K_D = 256, Q6K_Q = 320, Q6K_SB = 3392 };
#define Q6K_VEC(hh, s, v) (Q6K_Q + (((hh) * 8 + (s)) * 3 + (v)) * 64)

/* Q8_K activation rows: d (f32), qs[256], bsums[16] (int16). */
#define X_QS 4
#define X_BSUMS 260
#define X_BYTES 292

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define TELA_PK_TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#if defined(__clang__)
#define TELA_PK_UNROLL _Pragma("clang loop unroll(full)")
#else
#define TELA_PK_UNROLL _Pragma("GCC unroll 16")
#endif

/* The 6-bit levels of 32-element group gq (0..3) of half hh, step s of a
 * packed Q6_K super-block (wb): the low nibble from ql (high nibbles for
 * gq >= 2), bits 2gq..2gq+1 of qh moved to bits 4..5. */
static inline __attribute__((always_inline)) TELA_PK_TGT __m512i tela_pk_q6_levels(const uint8_t *wb, int hh, int gq,
                                                                                     int s, __m512i m0f, __m512i m30) {
    __m512i a = _mm512_loadu_si512(wb + Q6K_VEC(hh, s, gq & 1));
    if (gq >= 2) a = _mm512_srli_epi16(a, 4);
    __m512i h = _mm512_loadu_si512(wb + Q6K_VEC(hh, s, 2));
    h = gq == 0 ? _mm512_slli_epi16(h, 4) : gq == 1 ? _mm512_slli_epi16(h, 2) : gq == 2 ? h : _mm512_srli_epi16(h, 2);
    /* (a & 0x0F) | (h & 0x30): select a where m0f is set, then drop bits 6-7 */
    return _mm512_and_si512(_mm512_ternarylogic_epi32(a, h, m0f, 0xE4), _mm512_or_si512(m0f, m30));
}

/* The levels of nsb super-blocks of a packed Q6_K group (w) as bytes, 4096
 * a super-block: for (hh, gq) 8 vectors s of 64 bytes, vector s holding
 * elements 128 hh + 32 gq + 4 s + 0..3 of each row (bytes 4i..4i+3 = row
 * i); dst 64-byte aligned. For the tiles of many columns, which reuse them. */
static inline TELA_PK_TGT void tela_pk_q6_K_unpack(const uint8_t *w, int64_t nsb, uint8_t *dst) {
    const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    for (int64_t b = 0; b < nsb; b++)
        for (int hh = 0; hh < 2; hh++)
            TELA_PK_UNROLL for (int gq = 0; gq < 4; gq++)
                TELA_PK_UNROLL for (int s = 0; s < 8; s++)
                    _mm512_store_si512(dst + ((b * 2 + hh) * 4 + gq) * 512 + s * 64,
                                       tela_pk_q6_levels(w + (size_t)b * Q6K_SB, hh, gq, s, m0f, m30));
}
#endif

#endif
