/* qdot.c: the portable (scalar) dot-product kernels of every weight type
 * and the choice of kernels by CPU features: it fills its tables from the
 * SIMD files (qdot_avx2.c, qdot_avx512.c, qdot_neon.c), which stand below it
 * and share the gemm tiling loop of qdot_tiles.c.
 *
 * The scalar kernels define the arithmetic; the SIMD kernels of the types
 * they implement reproduce it bit for bit (the tests check that):
 *  - K-quants: the integer levels' products are summed exactly in int32 per
 *    256-element super-block (isum = sum over sub-blocks of scale * (levels
 *    . activations), msum = sum of min * activation sums), then
 *        acc = fma(isum, d * dx, acc);  acc = fma(-msum, dmin * dx, acc).
 *  - Q4_0, Q8_0: sixteen float lanes, as a 512-bit register holds them: two
 *    blocks a step, lane l taking the exact int sum of elements 4(l%8)..+3
 *    of block l/8, times (d * dx), fused-added to that lane; the lanes are
 *    summed pairwise at the end.
 *  - F32, F16, BF16: sixteen lanes, lane j fused-adds the products of
 *    elements j, j+16, ...; summed pairwise at the end.
 * fmaf is one rounding on every conforming libm, so these are portable.
 * The other types (scalar only) use a plain float sum per block. */
#include "backend/cpu/qdot.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "quant/quant.h"
#include "util/cpu_features.h"
#include "util/fp16.h"

/* No contraction of a*b + c into fma beyond the explicit fmaf calls: the
 * arithmetic above must not depend on the compiler (GCC does not contract
 * in ISO C mode; clang is told here). */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* Block fields are read through memcpy: rows may sit at any address. */
static inline uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline float rd_f16(const uint8_t *p) { return tela_f16_to_f32(rd16(p)); }
static inline float rd_f32(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }
static inline int16_t rd_i16(const uint8_t *p) { int16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

#define OFF(type, field) offsetof(type, field)
#define Q8_0_QS_OFF OFF(tela_block_q8_0, qs)

/* ------------------------------------------------- activation conversion */

/* The quantizers follow the quant layer's reference ones operation for
 * operation, so for finite input they give exactly its bytes (the tests
 * check this); unlike it they accept any input (a kernel cannot fail per
 * token), with NaN and infinities going through the same arithmetic, which
 * the SIMD versions reproduce. */

/* Round to nearest, ties to even, via the float adder (1.5 * 2^23 leaves no
 * fraction bits): defined for every input, as in quant/quantize.c. */
static inline int nearest_int(float x) {
    const float biased = x + 12582912.0f;
    uint32_t bits;
    memcpy(&bits, &biased, sizeof bits);
    return (int)(bits & 0x7fffffu) - 0x400000;
}

/* roundf (halves away from zero) limited to int8; NaN -> 0. */
static inline int8_t round_i8(float v) {
    const float r = roundf(v);
    if (r != r) return 0;
    if (r >= 127.0f) return 127;
    if (r <= -128.0f) return -128;
    return (int8_t)r;
}

static void q8_0_from_float_scalar(const float *x, void *vy, int64_t n) {
    uint8_t *y = vy;
    for (int64_t b = 0; b < n / 32; b++, x += 32, y += sizeof(tela_block_q8_0)) {
        float amax = 0.0f; /* a NaN never compares greater */
        for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = tela_f32_to_f16(d);
        memcpy(y, &dh, 2);
        for (int j = 0; j < 32; j++) y[Q8_0_QS_OFF + j] = (uint8_t)round_i8(x[j] * id);
    }
}

/* Q8_K: scale from the signed value of largest magnitude (the first on a
 * tie), levels on -127..127 (-128 only by rounding), and the sums of each
 * 16 levels. */
static void q8_K_from_float_scalar(const float *x, void *vy, int64_t n) {
    uint8_t *y = vy;
    for (int64_t b = 0; b < n / 256; b++, x += 256, y += sizeof(tela_block_q8_K)) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 256; j++)
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        tela_block_q8_K blk;
        memset(&blk, 0, sizeof blk);
        if (max != 0.0f) {
            const float iscale = -127.0f / max;
            for (int j = 0; j < 256; j++) {
                int v = nearest_int(iscale * x[j]);
                blk.qs[j] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
            }
            for (int k = 0; k < 16; k++) {
                int sum = 0;
                for (int l = 0; l < 16; l++) sum += blk.qs[16 * k + l];
                blk.bsums[k] = (int16_t)sum;
            }
            blk.d = 1 / iscale;
        }
        memcpy(y, &blk, sizeof blk);
    }
}

static void f32_from_float(const float *x, void *y, int64_t n) {
    if (n > 0 && (const void *)x != y) memmove(y, x, (size_t)n * sizeof(float));
}

/* ------------------------------------ 32-element blocks x Q8_0 activations */

#define Q8_0_BYTES sizeof(tela_block_q8_0)
#define Q8_0_QS OFF(tela_block_q8_0, qs)

/* Sum of 16 lane partial sums, pairwise: lanes j and j+8, then j and j+4,
 * ... (the order the SIMD kernels reduce a register in). */
static inline float sum16(float p[16]) {
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) p[j] += p[j + w];
    return p[0];
}

/* Block b's eight lanes (see the top of the file): lane_sum[l] is the int
 * sum over elements 4l..4l+3. */
static inline void lanes_add(float acc[16], int64_t b, const int32_t lane_sum[8], float scale) {
    float *a = acc + (b & 1) * 8;
    for (int l = 0; l < 8; l++) a[l] = fmaf((float)lane_sum[l], scale, a[l]);
}

static float vec_dot_q8_0_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc[16] = {0};
    for (int64_t b = 0; b < n / 32; b++, w += Q8_0_BYTES, x += Q8_0_BYTES) {
        const int8_t *qw = (const int8_t *)(w + Q8_0_QS), *qx = (const int8_t *)(x + Q8_0_QS);
        int32_t lane[8] = {0};
        for (int j = 0; j < 32; j++) lane[j / 4] += qw[j] * qx[j];
        lanes_add(acc, b, lane, rd_f16(w) * rd_f16(x));
    }
    return sum16(acc);
}

static float vec_dot_q4_0_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc[16] = {0};
    for (int64_t b = 0; b < n / 32; b++, w += sizeof(tela_block_q4_0), x += Q8_0_BYTES) {
        const uint8_t *qs = w + OFF(tela_block_q4_0, qs);
        const int8_t *qx = (const int8_t *)(x + Q8_0_QS);
        int32_t lane[8] = {0};
        for (int j = 0; j < 16; j++) {
            lane[j / 4] += ((qs[j] & 0xF) - 8) * qx[j];
            lane[(j + 16) / 4] += ((qs[j] >> 4) - 8) * qx[j + 16];
        }
        lanes_add(acc, b, lane, rd_f16(w) * rd_f16(x));
    }
    return sum16(acc);
}

/* Q4_1 values are d*q + m, so a block contributes d*dx*sum(q*qx) +
 * m*dx*sum(qx). */
static float vec_dot_q4_1_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 32; b++, w += sizeof(tela_block_q4_1), x += Q8_0_BYTES) {
        const uint8_t *qs = w + OFF(tela_block_q4_1, qs);
        const int8_t *qx = (const int8_t *)(x + Q8_0_QS);
        int32_t isum = 0, xsum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (qs[j] & 0xF) * qx[j] + (qs[j] >> 4) * qx[j + 16];
            xsum += qx[j] + qx[j + 16];
        }
        const float dx = rd_f16(x);
        acc += (float)isum * (rd_f16(w) * dx) + (float)xsum * (rd_f16(w + 2) * dx);
    }
    return acc;
}

static float vec_dot_q5_0_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 32; b++, w += sizeof(tela_block_q5_0), x += Q8_0_BYTES) {
        const uint8_t *qs = w + OFF(tela_block_q5_0, qs);
        const uint32_t qh = rd_u32(w + OFF(tela_block_q5_0, qh));
        const int8_t *qx = (const int8_t *)(x + Q8_0_QS);
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            isum += (lo - 16) * qx[j] + (hi - 16) * qx[j + 16];
        }
        acc += (float)isum * (rd_f16(w) * rd_f16(x));
    }
    return acc;
}

static float vec_dot_q5_1_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 32; b++, w += sizeof(tela_block_q5_1), x += Q8_0_BYTES) {
        const uint8_t *qs = w + OFF(tela_block_q5_1, qs);
        const uint32_t qh = rd_u32(w + OFF(tela_block_q5_1, qh));
        const int8_t *qx = (const int8_t *)(x + Q8_0_QS);
        int32_t isum = 0, xsum = 0;
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            isum += lo * qx[j] + hi * qx[j + 16];
            xsum += qx[j] + qx[j + 16];
        }
        const float dx = rd_f16(x);
        acc += (float)isum * (rd_f16(w) * dx) + (float)xsum * (rd_f16(w + 2) * dx);
    }
    return acc;
}

static float vec_dot_iq4_nl_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 32; b++, w += sizeof(tela_block_iq4_nl), x += Q8_0_BYTES) {
        const uint8_t *qs = w + OFF(tela_block_iq4_nl, qs);
        const int8_t *qx = (const int8_t *)(x + Q8_0_QS);
        int32_t isum = 0;
        for (int j = 0; j < 16; j++)
            isum += tela_iq4nl_values[qs[j] & 0xF] * qx[j] + tela_iq4nl_values[qs[j] >> 4] * qx[j + 16];
        acc += (float)isum * (rd_f16(w) * rd_f16(x));
    }
    return acc;
}

/* ----------------------------------------- K-quants x Q8_K activations */

#define Q8K_BYTES sizeof(tela_block_q8_K)
#define Q8K_QS OFF(tela_block_q8_K, qs)
#define Q8K_BSUMS OFF(tela_block_q8_K, bsums)

/* One super-block's float step (see the top of the file). */
static inline float k_step(float acc, int32_t isum, float d, int32_t msum, float dmin, float dx) {
    acc = fmaf((float)isum, d * dx, acc);
    return fmaf(-(float)msum, dmin * dx, acc);
}

static float vec_dot_q2_K_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 256; b++, w += sizeof(tela_block_q2_K), x += Q8K_BYTES) {
        const uint8_t *scales = w + OFF(tela_block_q2_K, scales), *qs = w + OFF(tela_block_q2_K, qs);
        const int8_t *qx = (const int8_t *)(x + Q8K_QS);
        int32_t isum = 0, msum = 0;
        for (int k = 0; k < 16; k++) msum += (scales[k] >> 4) * rd_i16(x + Q8K_BSUMS + 2 * k);
        /* element 128h + 32g + l is bits 2g..2g+1 of qs[32h + l]; the 16
         * elements of sub-block k = 8h + 2g + s share scales[k] */
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 4; g++)
                for (int s = 0; s < 2; s++) {
                    const int k = 8 * h + 2 * g + s;
                    int32_t sum = 0;
                    for (int l = 16 * s; l < 16 * s + 16; l++)
                        sum += ((qs[32 * h + l] >> (2 * g)) & 3) * qx[128 * h + 32 * g + l];
                    isum += (scales[k] & 0xF) * sum;
                }
        acc = k_step(acc, isum, rd_f16(w + OFF(tela_block_q2_K, d)), msum, rd_f16(w + OFF(tela_block_q2_K, dmin)),
                     rd_f32(x));
    }
    return acc;
}

/* Q3_K's sixteen 6-bit scales (format in quant/dequant.c), unbiased. */
static void q3_K_scales(const uint8_t p[12], int sc[16]) {
    for (int j = 0; j < 16; j++) {
        const int low = j < 8 ? p[j] & 0xF : p[j - 8] >> 4;
        const int high = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (low | high << 4) - 32;
    }
}

static float vec_dot_q3_K_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 256; b++, w += sizeof(tela_block_q3_K), x += Q8K_BYTES) {
        const uint8_t *hmask = w + OFF(tela_block_q3_K, hmask), *qs = w + OFF(tela_block_q3_K, qs);
        const int8_t *qx = (const int8_t *)(x + Q8K_QS);
        int sc[16];
        q3_K_scales(w + OFF(tela_block_q3_K, scales), sc);
        int32_t isum = 0;
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 4; g++) {
                const uint8_t mask = (uint8_t)(1u << (4 * h + g));
                for (int s = 0; s < 2; s++) {
                    int32_t sum = 0;
                    for (int l = 16 * s; l < 16 * s + 16; l++) {
                        const int v = ((qs[32 * h + l] >> (2 * g)) & 3) - ((hmask[l] & mask) ? 0 : 4);
                        sum += v * qx[128 * h + 32 * g + l];
                    }
                    isum += sc[8 * h + 2 * g + s] * sum;
                }
            }
        acc = k_step(acc, isum, rd_f16(w + OFF(tela_block_q3_K, d)), 0, 0.0f, rd_f32(x));
    }
    return acc;
}

/* B_j: the activation sum of 32-element sub-block j. */
static inline int32_t q8K_sum32(const uint8_t *x, int j) {
    return rd_i16(x + Q8K_BSUMS + 4 * j) + rd_i16(x + Q8K_BSUMS + 4 * j + 2);
}

static float vec_dot_q4_K_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 256; b++, w += sizeof(tela_block_q4_K), x += Q8K_BYTES) {
        const uint8_t *qs = w + OFF(tela_block_q4_K, qs);
        const int8_t *qx = (const int8_t *)(x + Q8K_QS);
        int32_t isum = 0, msum = 0;
        for (int c = 0; c < 4; c++) {
            uint8_t sc_lo, m_lo, sc_hi, m_hi;
            tela_k4_unpack_scale_min(w + OFF(tela_block_q4_K, scales), 2 * c, &sc_lo, &m_lo);
            tela_k4_unpack_scale_min(w + OFF(tela_block_q4_K, scales), 2 * c + 1, &sc_hi, &m_hi);
            int32_t s_lo = 0, s_hi = 0;
            for (int l = 0; l < 32; l++) {
                s_lo += (qs[32 * c + l] & 0xF) * qx[64 * c + l];
                s_hi += (qs[32 * c + l] >> 4) * qx[64 * c + 32 + l];
            }
            isum += sc_lo * s_lo + sc_hi * s_hi;
            msum += m_lo * q8K_sum32(x, 2 * c) + m_hi * q8K_sum32(x, 2 * c + 1);
        }
        acc = k_step(acc, isum, rd_f16(w), msum, rd_f16(w + 2), rd_f32(x));
    }
    return acc;
}

static float vec_dot_q5_K_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 256; b++, w += sizeof(tela_block_q5_K), x += Q8K_BYTES) {
        const uint8_t *qs = w + OFF(tela_block_q5_K, qs), *qh = w + OFF(tela_block_q5_K, qh);
        const int8_t *qx = (const int8_t *)(x + Q8K_QS);
        int32_t isum = 0, msum = 0;
        for (int c = 0; c < 4; c++) {
            uint8_t sc_lo, m_lo, sc_hi, m_hi;
            tela_k4_unpack_scale_min(w + OFF(tela_block_q5_K, scales), 2 * c, &sc_lo, &m_lo);
            tela_k4_unpack_scale_min(w + OFF(tela_block_q5_K, scales), 2 * c + 1, &sc_hi, &m_hi);
            int32_t s_lo = 0, s_hi = 0;
            for (int l = 0; l < 32; l++) {
                const int lo = (qs[32 * c + l] & 0xF) | ((qh[l] >> (2 * c)) & 1) << 4;
                const int hi = (qs[32 * c + l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4;
                s_lo += lo * qx[64 * c + l];
                s_hi += hi * qx[64 * c + 32 + l];
            }
            isum += sc_lo * s_lo + sc_hi * s_hi;
            msum += m_lo * q8K_sum32(x, 2 * c) + m_hi * q8K_sum32(x, 2 * c + 1);
        }
        acc = k_step(acc, isum, rd_f16(w), msum, rd_f16(w + 2), rd_f32(x));
    }
    return acc;
}

static float vec_dot_q6_K_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 256; b++, w += sizeof(tela_block_q6_K), x += Q8K_BYTES) {
        const int8_t *qx = (const int8_t *)(x + Q8K_QS);
        const int8_t *scales = (const int8_t *)(w + OFF(tela_block_q6_K, scales));
        int32_t isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + OFF(tela_block_q6_K, ql) + 64 * h, *qh = w + OFF(tela_block_q6_K, qh) + 32 * h;
            /* sums per 16-element sub-block k = 2g + s of this half: group g
             * of 32 takes the low (g < 2) or high nibbles of ql[32(g%2) + l]
             * and bits 2g..2g+1 of qh[l] */
            int32_t sum[8];
            for (int k = 0; k < 8; k++) {
                const int g = k / 2, l0 = 16 * (k % 2);
                const uint8_t *qlg = ql + 32 * (g % 2);
                const int8_t *xg = qx + 128 * h + 32 * g;
                int32_t t = 0;
                for (int l = l0; l < l0 + 16; l++) {
                    const int lo4 = g < 2 ? qlg[l] & 0xF : qlg[l] >> 4;
                    t += ((lo4 | ((qh[l] >> (2 * g)) & 3) << 4) - 32) * xg[l];
                }
                sum[k] = t;
            }
            for (int k = 0; k < 8; k++) isum += scales[8 * h + k] * sum[k];
        }
        acc = k_step(acc, isum, rd_f16(w + OFF(tela_block_q6_K, d)), 0, 0.0f, rd_f32(x));
    }
    return acc;
}

static float vec_dot_iq4_xs_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw, *x = vx;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 256; b++, w += sizeof(tela_block_iq4_xs), x += Q8K_BYTES) {
        const int8_t *qx = (const int8_t *)(x + Q8K_QS);
        const uint16_t scales_h = rd16(w + OFF(tela_block_iq4_xs, scales_h));
        const uint8_t *scales_l = w + OFF(tela_block_iq4_xs, scales_l);
        int32_t isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | ((scales_h >> (2 * ib)) & 3) << 4;
            const uint8_t *q = w + OFF(tela_block_iq4_xs, qs) + 16 * ib;
            int32_t sum = 0;
            for (int j = 0; j < 16; j++)
                sum += tela_iq4nl_values[q[j] & 0xF] * qx[32 * ib + j] +
                       tela_iq4nl_values[q[j] >> 4] * qx[32 * ib + j + 16];
            isum += (ls - 32) * sum;
        }
        acc = k_step(acc, isum, rd_f16(w), 0, 0.0f, rd_f32(x));
    }
    return acc;
}

/* ------------------------------------------------ float weights x f32 */

static float vec_dot_f32_scalar(const void *vw, const void *vx, int64_t n) {
    const float *w = vw, *x = vx;
    float p[16] = {0};
    for (int64_t i = 0; i < n; i++) p[i & 15] = fmaf(w[i], x[i], p[i & 15]);
    return sum16(p);
}

static float vec_dot_f16_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw;
    const float *x = vx;
    float p[16] = {0};
    for (int64_t i = 0; i < n; i++) p[i & 15] = fmaf(rd_f16(w + 2 * i), x[i], p[i & 15]);
    return sum16(p);
}

static float vec_dot_bf16_scalar(const void *vw, const void *vx, int64_t n) {
    const uint8_t *w = vw;
    const float *x = vx;
    float p[16] = {0};
    for (int64_t i = 0; i < n; i++) p[i & 15] = fmaf(tela_bf16_to_f32(rd16(w + 2 * i)), x[i], p[i & 15]);
    return sum16(p);
}

/* The scalar gemm: vec_dot per output (so trivially bit-identical to it).
 * One function per type, generated, since the gemm signature carries no
 * type. */
#define SCALAR_GEMM(name, dot)                                                                                     \
    static void name(const void *w, size_t w_stride, int64_t n_rows, const void *x, size_t x_stride,            \
                     int64_t n_cols, int64_t n, float *out, int64_t out_stride) {                               \
        for (int64_t c = 0; c < n_cols; c++)                                                                     \
            for (int64_t r = 0; r < n_rows; r++)                                                                 \
                out[c * out_stride + r] = dot((const uint8_t *)w + (size_t)r * w_stride,                          \
                                              (const uint8_t *)x + (size_t)c * x_stride, n);                      \
    }

SCALAR_GEMM(gemm_f32_scalar, vec_dot_f32_scalar)
SCALAR_GEMM(gemm_f16_scalar, vec_dot_f16_scalar)
SCALAR_GEMM(gemm_bf16_scalar, vec_dot_bf16_scalar)
SCALAR_GEMM(gemm_q4_0_scalar, vec_dot_q4_0_scalar)
SCALAR_GEMM(gemm_q4_1_scalar, vec_dot_q4_1_scalar)
SCALAR_GEMM(gemm_q5_0_scalar, vec_dot_q5_0_scalar)
SCALAR_GEMM(gemm_q5_1_scalar, vec_dot_q5_1_scalar)
SCALAR_GEMM(gemm_q8_0_scalar, vec_dot_q8_0_scalar)
SCALAR_GEMM(gemm_iq4_nl_scalar, vec_dot_iq4_nl_scalar)
SCALAR_GEMM(gemm_q2_K_scalar, vec_dot_q2_K_scalar)
SCALAR_GEMM(gemm_q3_K_scalar, vec_dot_q3_K_scalar)
SCALAR_GEMM(gemm_q4_K_scalar, vec_dot_q4_K_scalar)
SCALAR_GEMM(gemm_q5_K_scalar, vec_dot_q5_K_scalar)
SCALAR_GEMM(gemm_q6_K_scalar, vec_dot_q6_K_scalar)
SCALAR_GEMM(gemm_iq4_xs_scalar, vec_dot_iq4_xs_scalar)

/* ------------------------------------------------------------ dispatch */

typedef struct {
    tela_type type, vec_dot_type;
    int64_t block_size;
    tela_qdot_vec_dot_fn vec_dot;
    tela_qdot_gemm_fn gemm;
} scalar_entry;

static const scalar_entry g_scalar[] = {
    {TELA_TYPE_F32, TELA_TYPE_F32, 1, vec_dot_f32_scalar, gemm_f32_scalar},
    {TELA_TYPE_F16, TELA_TYPE_F32, 1, vec_dot_f16_scalar, gemm_f16_scalar},
    {TELA_TYPE_BF16, TELA_TYPE_F32, 1, vec_dot_bf16_scalar, gemm_bf16_scalar},
    {TELA_TYPE_Q4_0, TELA_TYPE_Q8_0, 32, vec_dot_q4_0_scalar, gemm_q4_0_scalar},
    {TELA_TYPE_Q4_1, TELA_TYPE_Q8_0, 32, vec_dot_q4_1_scalar, gemm_q4_1_scalar},
    {TELA_TYPE_Q5_0, TELA_TYPE_Q8_0, 32, vec_dot_q5_0_scalar, gemm_q5_0_scalar},
    {TELA_TYPE_Q5_1, TELA_TYPE_Q8_0, 32, vec_dot_q5_1_scalar, gemm_q5_1_scalar},
    {TELA_TYPE_Q8_0, TELA_TYPE_Q8_0, 32, vec_dot_q8_0_scalar, gemm_q8_0_scalar},
    {TELA_TYPE_IQ4_NL, TELA_TYPE_Q8_0, 32, vec_dot_iq4_nl_scalar, gemm_iq4_nl_scalar},
    {TELA_TYPE_Q2_K, TELA_TYPE_Q8_K, 256, vec_dot_q2_K_scalar, gemm_q2_K_scalar},
    {TELA_TYPE_Q3_K, TELA_TYPE_Q8_K, 256, vec_dot_q3_K_scalar, gemm_q3_K_scalar},
    {TELA_TYPE_Q4_K, TELA_TYPE_Q8_K, 256, vec_dot_q4_K_scalar, gemm_q4_K_scalar},
    {TELA_TYPE_Q5_K, TELA_TYPE_Q8_K, 256, vec_dot_q5_K_scalar, gemm_q5_K_scalar},
    {TELA_TYPE_Q6_K, TELA_TYPE_Q8_K, 256, vec_dot_q6_K_scalar, gemm_q6_K_scalar},
    {TELA_TYPE_IQ4_XS, TELA_TYPE_Q8_K, 256, vec_dot_iq4_xs_scalar, gemm_iq4_xs_scalar},
};

static tela_qdot_traits g_tables[TELA_ISA_COUNT][TELA_TYPE_COUNT];
static bool g_isa_ready[TELA_ISA_COUNT];
static tela_isa g_best = TELA_ISA_SCALAR;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Builds one ISA's table: the scalar kernels, overridden by the entries the
 * ISA's file fills in. */
static void build_table(tela_isa isa, void (*fill)(tela_qdot_isa_table *)) {
    static tela_qdot_isa_table t; /* only touched inside pthread_once */
    memset(&t, 0, sizeof t);
    if (fill) fill(&t);
    for (size_t i = 0; i < sizeof g_scalar / sizeof g_scalar[0]; i++) {
        const scalar_entry *e = &g_scalar[i];
        tela_qdot_traits *q = &g_tables[isa][e->type];
        const tela_qdot_fns *f = &t.fns[e->type];
        q->type = e->type;
        q->vec_dot_type = e->vec_dot_type;
        q->block_size = e->block_size;
        if (e->vec_dot_type == TELA_TYPE_Q8_0)
            q->from_float = t.q8_0_from_float ? t.q8_0_from_float : q8_0_from_float_scalar;
        else if (e->vec_dot_type == TELA_TYPE_Q8_K)
            q->from_float = t.q8_K_from_float ? t.q8_K_from_float : q8_K_from_float_scalar;
        else
            q->from_float = t.f32_from_float ? t.f32_from_float : f32_from_float;
        q->packing = t.packing[e->type];
        if (f->vec_dot && f->gemm) {
            q->vec_dot = f->vec_dot;
            q->gemm = f->gemm;
            q->tile_rows = f->tile_rows;
            q->tile_cols = f->tile_cols;
            q->isa = isa;
        } else {
            q->vec_dot = e->vec_dot;
            q->gemm = e->gemm;
            q->tile_rows = 1;
            q->tile_cols = 1;
            q->isa = TELA_ISA_SCALAR;
        }
    }
    g_isa_ready[isa] = true;
}

static void init_tables(void) {
    const tela_cpu_features *cpu = tela_cpu_get_features();
    (void)cpu;
    build_table(TELA_ISA_SCALAR, NULL);
    g_best = TELA_ISA_SCALAR;
#if defined(__x86_64__)
    if (cpu->avx2 && cpu->fma && cpu->f16c && cpu->bmi2) {
        build_table(TELA_ISA_AVX2, tela_qdot_fill_avx2);
        g_best = TELA_ISA_AVX2;
    }
    if (cpu->avx512f && cpu->avx512bw && cpu->avx512vl && cpu->avx512dq && cpu->avx512vnni && cpu->avx2 &&
        cpu->fma && cpu->f16c && cpu->bmi2) {
        build_table(TELA_ISA_AVX512, tela_qdot_fill_avx512);
        g_best = TELA_ISA_AVX512;
    }
#elif defined(__aarch64__)
    if (cpu->neon) {
        build_table(TELA_ISA_NEON, tela_qdot_fill_neon);
        g_best = TELA_ISA_NEON;
    }
#endif
}

const tela_qdot_traits *tela_qdot_get_isa(tela_type type, tela_isa isa) {
    pthread_once(&g_once, init_tables);
    if ((unsigned)isa >= TELA_ISA_COUNT || !g_isa_ready[isa] || (unsigned)type >= TELA_TYPE_COUNT) return NULL;
    const tela_qdot_traits *q = &g_tables[isa][type];
    return q->vec_dot ? q : NULL;
}

const tela_qdot_traits *tela_qdot_get(tela_type type) { return tela_qdot_get_isa(type, tela_qdot_best_isa()); }

const char *tela_qdot_kernels_label(void) {
    const tela_isa isa = tela_qdot_best_isa();
    return isa == TELA_ISA_AVX512 && tela_qdot_amx_active() ? "avx512+amx" : tela_isa_name(isa);
}

tela_isa tela_qdot_best_isa(void) {
    pthread_once(&g_once, init_tables);
    return g_best;
}

const char *tela_isa_name(tela_isa isa) {
    switch (isa) {
    case TELA_ISA_SCALAR: return "scalar";
    case TELA_ISA_AVX2: return "avx2";
    case TELA_ISA_AVX512: return "avx512";
    case TELA_ISA_NEON: return "neon";
    default: return "unknown";
    }
}
