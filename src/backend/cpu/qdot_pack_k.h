/* qdot_pack_k.h: the packed K-quant layout (Q4_K, Q6_K groups of 16 rows)
 * shared by its two gemms: the AVX-512 VNNI tiles (qdot_pack_k_avx512.c,
 * where the layout is described) and the AMX tiles (qdot_pack_amx.c). */
#ifndef TELA_BACKEND_CPU_QDOT_PACK_K_H
#define TELA_BACKEND_CPU_QDOT_PACK_K_H

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

/* The 6-bit levels of nsb super-blocks of a packed Q6_K group (w) as bytes,
 * 4096 a super-block: for (hh, gq) (half, 32-element quarter) 8 vectors s
 * of 64 bytes, vector s holding elements 128 hh + 32 gq + 4 s + 0..3 of
 * each row (bytes 4i..4i+3 = row i). Needs AVX-512 BW. */
void tela_pk_q6_K_unpack(const uint8_t *w, int64_t nsb, uint8_t *dst);

#endif
