/* dequant.c: reference dequantization of every tensor type to f32.
 *
 * Each type has one function that converts nb whole blocks; the public entry
 * point dispatches once per call, so inner loops hold no type branches. The
 * arithmetic follows ggml's reference dequantizers operation for operation
 * (e.g. (d * scale) * q, not d * (scale * q)), so results are bit-identical.
 *
 * Source data may sit at any address (a tensor in a memory-mapped file), so a
 * block is first copied into an aligned local struct; the copy is small next
 * to the work per block. Multi-byte fields are little-endian, as on x86-64
 * and AArch64, the only hosts tela targets. */
#include "quant/quant.h"

#include <string.h>

#include "util/error.h"
#include "util/fp16.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tela reads GGUF block data in place and needs a little-endian host"
#endif

/* No fused multiply-adds (clang would contract d * q - m), to stay
 * bit-identical with ggml's reference; GCC does not contract in ISO C mode. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* The 16 levels of IQ4_NL and IQ4_XS: a non-uniform 4-bit grid, denser near
 * zero where weights cluster. Values from the format definition. */
const int8_t tela_iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* ------------------------------------------------------------ plain types */

static void dq_f32(const uint8_t *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

static void dq_f16(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = tela_f16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
}

static void dq_bf16(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = tela_bf16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
}

static void dq_f64(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) { double v; memcpy(&v, src + 8 * i, 8); dst[i] = (float)v; }
}

static void dq_i8(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = (float)(int8_t)src[i];
}

static void dq_i16(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) { int16_t v; memcpy(&v, src + 2 * i, 2); dst[i] = (float)v; }
}

static void dq_i32(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) { int32_t v; memcpy(&v, src + 4 * i, 4); dst[i] = (float)v; }
}

static void dq_i64(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) { int64_t v; memcpy(&v, src + 8 * i, 8); dst[i] = (float)v; }
}

/* ------------------------------------------------- 32-element block types */

/* In all 32-element types byte j of qs holds element j in its low nibble and
 * element j + 16 in its high nibble. */

static void dq_q4_0(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        tela_block_q4_0 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b.qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((b.qs[j] >> 4) - 8) * d;
        }
    }
}

static void dq_q4_1(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        tela_block_q4_1 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d), m = tela_f16_to_f32(b.m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b.qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(b.qs[j] >> 4) * d + m;
        }
    }
}

/* Q5: the fifth bit of element j is bit j of the little-endian word qh. */
static void dq_q5_0(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        tela_block_q5_0 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d);
        const uint32_t qh = (uint32_t)b.qh[0] | (uint32_t)b.qh[1] << 8 | (uint32_t)b.qh[2] << 16 | (uint32_t)b.qh[3] << 24;
        for (int j = 0; j < 16; j++) {
            const int lo = (b.qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int hi = (b.qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void dq_q5_1(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        tela_block_q5_1 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d), m = tela_f16_to_f32(b.m);
        const uint32_t qh = (uint32_t)b.qh[0] | (uint32_t)b.qh[1] << 8 | (uint32_t)b.qh[2] << 16 | (uint32_t)b.qh[3] << 24;
        for (int j = 0; j < 16; j++) {
            const int lo = (b.qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int hi = (b.qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)lo * d + m;
            y[j + 16] = (float)hi * d + m;
        }
    }
}

static void dq_q8_0(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        tela_block_q8_0 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d);
        for (int j = 0; j < 32; j++) y[j] = (float)b.qs[j] * d;
    }
}

/* Q8_1's s (d times the sum of qs) only speeds up dot products; the values
 * are qs * d as in Q8_0. */
static void dq_q8_1(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        tela_block_q8_1 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d);
        for (int j = 0; j < 32; j++) y[j] = (float)b.qs[j] * d;
    }
}

static void dq_iq4_nl(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        tela_block_iq4_nl b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)tela_iq4nl_values[b.qs[j] & 0xF];
            y[j + 16] = d * (float)tela_iq4nl_values[b.qs[j] >> 4];
        }
    }
}

/* --------------------------------------------------- 256-element K-quants */

/* Q2_K and Q3_K store 2-bit values four to a byte: the 256 elements form two
 * halves of 128; in half h, element 32*g + l (g = 0..3, l = 0..31) is bits
 * 2g..2g+1 of qs[32*h + l]. Each group of 16 elements has its own scale. */

static void dq_q2_K(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tela_block_q2_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d), dmin = tela_f16_to_f32(b.dmin);
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = b.qs + 32 * h;
            for (int g = 0; g < 4; g++) {
                const int shift = 2 * g;
                for (int s = 0; s < 2; s++) {  /* two scale groups of 16 per 32 */
                    const uint8_t sc = b.scales[8 * h + 2 * g + s];
                    const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                    for (int l = 16 * s; l < 16 * s + 16; l++) *y++ = dl * (float)((q[l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K's sixteen 6-bit scales, biased by 32: scale j's low 4 bits are the low
 * (j < 8) or high (j >= 8) nibble of byte j % 8; its top 2 bits are bits
 * 2*(j/4)..+1 of byte 8 + j % 4. */
static void q3_K_unpack_scales(const uint8_t packed[12], int sc[16]) {
    for (int j = 0; j < 16; j++) {
        const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
        const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (low | high << 4) - 32;
    }
}

/* The third bit of element e (0..255) is bit e / 32 of hmask[e % 32]; a set
 * bit means the value is q, a clear one q - 4, so levels run -4..3. */
static void dq_q3_K(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tela_block_q3_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d);
        int sc[16];
        q3_K_unpack_scales(b.scales, sc);
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = b.qs + 32 * h;
            for (int g = 0; g < 4; g++) {
                const int shift = 2 * g;
                const uint8_t mask = (uint8_t)(1u << (4 * h + g));
                for (int s = 0; s < 2; s++) {
                    const float dl = d * (float)sc[8 * h + 2 * g + s];
                    for (int l = 16 * s; l < 16 * s + 16; l++) {
                        const int v = ((q[l] >> shift) & 3) - ((b.hmask[l] & mask) ? 0 : 4);
                        *y++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

/* Q4_K and Q5_K pack eight 6-bit scales and eight 6-bit mins into 12 bytes:
 * for j < 4, scale j and min j are the low 6 bits of bytes j and j + 4; for
 * j >= 4 their low 4 bits are the low and high nibble of byte j + 4 and their
 * top 2 bits the top 2 bits of bytes j - 4 (scale) and j (min). */
void tela_k4_unpack_scale_min(const uint8_t packed[12], int j, uint8_t *scale, uint8_t *min) {
    if (j < 4) {
        *scale = packed[j] & 63;
        *min = packed[j + 4] & 63;
    } else {
        *scale = (uint8_t)((packed[j + 4] & 0xF) | (packed[j - 4] >> 6) << 4);
        *min = (uint8_t)((packed[j + 4] >> 4) | (packed[j] >> 6) << 4);
    }
}

/* Q4_K: eight sub-blocks of 32 with value d*scale*q - dmin*min. Chunk c of
 * 64 elements uses qs[32c..32c+31]: low nibbles are sub-block 2c, high
 * nibbles sub-block 2c+1. */
static void dq_q4_K(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tela_block_q4_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d), dmin = tela_f16_to_f32(b.dmin);
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = b.qs + 32 * c;
            uint8_t sc, m;
            tela_k4_unpack_scale_min(b.scales, 2 * c, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            tela_k4_unpack_scale_min(b.scales, 2 * c + 1, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: as Q4_K, plus a fifth bit per element: bit 2c of qh[l] for the low
 * nibble of chunk c, bit 2c+1 for its high nibble. */
static void dq_q5_K(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tela_block_q5_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d), dmin = tela_f16_to_f32(b.dmin);
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = b.qs + 32 * c;
            uint8_t sc, m;
            tela_k4_unpack_scale_min(b.scales, 2 * c, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            tela_k4_unpack_scale_min(b.scales, 2 * c + 1, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((q[l] & 0xF) | ((b.qh[l] >> (2 * c)) & 1) << 4) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((q[l] >> 4) | ((b.qh[l] >> (2 * c + 1)) & 1) << 4) - m2;
        }
    }
}

/* Q6_K: 6-bit values biased by 32, sixteen int8 scales of 16 elements. In
 * half h (128 elements) with ql = ql + 64h and qh = qh + 32h, element
 * 32g + l takes its low 4 bits from ql[l] (g = 0), ql[l+32] (g = 1), or their
 * high nibbles (g = 2, 3), and its top 2 bits from bits 2g..2g+1 of qh[l]. */
static void dq_q6_K(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tela_block_q6_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d);
        for (int h = 0; h < 2; h++, y += 128) {
            const uint8_t *ql = b.ql + 64 * h, *qh = b.qh + 32 * h;
            const int8_t *sc = b.scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int s = l / 16;
                const int q0 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q1 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q2 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * (float)sc[s] * (float)q0;
                y[l + 32] = d * (float)sc[s + 2] * (float)q1;
                y[l + 64] = d * (float)sc[s + 4] * (float)q2;
                y[l + 96] = d * (float)sc[s + 6] * (float)q3;
            }
        }
    }
}

/* Q8_K (the activation format of K-quant dot products): an f32 scale and
 * 256 int8 values; bsums are partial sums for the dot products. */
static void dq_q8_K(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 256) {
        tela_block_q8_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        for (int j = 0; j < 256; j++) y[j] = b.d * (float)b.qs[j];
    }
}

/* IQ4_XS: eight sub-blocks of 32 on the IQ4_NL grid, each with a 6-bit scale
 * biased by 32: low 4 bits in nibble ib % 2 of scales_l[ib / 2], top 2 bits
 * at bits 2ib..2ib+1 of scales_h. Nibble layout within a sub-block as Q4_0. */
static void dq_iq4_xs(const uint8_t *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tela_block_iq4_xs b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tela_f16_to_f32(b.d);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | ((b.scales_h >> (2 * ib)) & 3) << 4;
            const float dl = d * (float)(ls - 32);
            const uint8_t *q = b.qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)tela_iq4nl_values[q[j] & 0xF];
                y[j + 16] = dl * (float)tela_iq4nl_values[q[j] >> 4];
            }
        }
    }
}

/* ---------------------------------------------------------------- dispatch */

typedef void (*dequant_fn)(const uint8_t *src, float *dst, int64_t count);

/* Plain types take an element count, block types a block count. */
static dequant_fn dequant_for(tela_type type) {
    switch (type) {
    case TELA_TYPE_F32: return dq_f32;
    case TELA_TYPE_F16: return dq_f16;
    case TELA_TYPE_BF16: return dq_bf16;
    case TELA_TYPE_F64: return dq_f64;
    case TELA_TYPE_I8: return dq_i8;
    case TELA_TYPE_I16: return dq_i16;
    case TELA_TYPE_I32: return dq_i32;
    case TELA_TYPE_I64: return dq_i64;
    case TELA_TYPE_Q4_0: return dq_q4_0;
    case TELA_TYPE_Q4_1: return dq_q4_1;
    case TELA_TYPE_Q5_0: return dq_q5_0;
    case TELA_TYPE_Q5_1: return dq_q5_1;
    case TELA_TYPE_Q8_0: return dq_q8_0;
    case TELA_TYPE_Q8_1: return dq_q8_1;
    case TELA_TYPE_Q2_K: return dq_q2_K;
    case TELA_TYPE_Q3_K: return dq_q3_K;
    case TELA_TYPE_Q4_K: return dq_q4_K;
    case TELA_TYPE_Q5_K: return dq_q5_K;
    case TELA_TYPE_Q6_K: return dq_q6_K;
    case TELA_TYPE_Q8_K: return dq_q8_K;
    case TELA_TYPE_IQ4_NL: return dq_iq4_nl;
    case TELA_TYPE_IQ4_XS: return dq_iq4_xs;
    default: return NULL;
    }
}

tela_status tela_dequantize_row(tela_type type, const void *src, float *dst, int64_t n) {
    const tela_type_traits *t = tela_type_get_traits(type);
    if (!t) return tela_errorf(TELA_ERR_UNSUPPORTED, "dequantize: unknown tensor type id %d", (int)type);
    dequant_fn fn = dequant_for(type);
    if (!fn) return tela_errorf(TELA_ERR_UNSUPPORTED, "dequantize: no dequantizer for type %s", t->name);
    if (n < 0 || n % t->block_size != 0)
        return tela_errorf(TELA_ERR_ARG, "dequantize %s: %lld elements is not a whole number of %lld-element blocks",
                           t->name, (long long)n, (long long)t->block_size);
    if (n == 0) return TELA_OK;
    if (!src || !dst) return tela_errorf(TELA_ERR_ARG, "dequantize %s: NULL buffer", t->name);
    fn((const uint8_t *)src, dst, n / t->block_size);
    return TELA_OK;
}
