/* quantize.c: reference quantization from f32 (no importance matrix).
 *
 * The aim is to produce exactly the bytes that ggml's reference quantizers
 * (what llama-quantize runs without an imatrix) produce, so tela's quantized
 * files match llama.cpp's in size and error. That constrains the arithmetic:
 * every float expression below is evaluated in the same order, in float, with
 * the same round-to-nearest-even integer conversion, and without fused
 * multiply-adds (GCC does not contract in ISO C mode; clang is told below).
 *
 * The schemes, briefly:
 *  - Q4_0/Q5_0: one scale d per 32 values, d = max / -8 (or -16) where max is
 *    the value of largest magnitude, so that value lands exactly on -8 (-16).
 *  - Q4_1/Q5_1: scale and minimum from the block's range.
 *  - Q8_0/Q8_1/Q8_K: d = amax / 127 (Q8_K: sign of the extreme kept).
 *  - K-quants: each 16- or 32-value sub-block gets its own best-fit scale
 *    (and min) by a small search; the sub-block scales are then themselves
 *    quantized to 4, 6 or 8 bits against one fp16 super-block scale, and the
 *    values are requantized with the scales as stored. */
#include "quant/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "util/error.h"
#include "util/fp16.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* Below this, a group's largest magnitude counts as zero. */
#define GROUP_EPS 1e-15f

/* Round to nearest, ties to even, for |x| < 2^22. Adding 1.5 * 2^23 leaves
 * no fraction bits in the float's mantissa, so the addition itself rounds,
 * and the integer is read back from the low mantissa bits. Unlike a cast it
 * is defined for every input (garbage, but no UB, for huge or NaN values). */
static inline int nearest_int(float x) {
    const float biased = x + 12582912.0f;
    uint32_t bits;
    memcpy(&bits, &biased, sizeof bits);
    return (int)(bits & 0x7fffffu) - 0x400000;
}

static inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* trunc(v) limited to 0..hi. For the values that occur (v in [0, hi + 1.5])
 * this is exactly ggml's cast-then-MIN; unlike a bare cast it is defined for
 * any v (a tiny block scale can make 1/d infinite). */
static inline int trunc_level(float v, int hi) {
    if (!(v > 0)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* roundf(v) (halves away from zero) limited to the int8 range. */
static inline int8_t round_i8(float v) {
    const float r = roundf(v);
    if (r != r) return 0;
    if (r >= 127.0f) return 127;
    if (r <= -128.0f) return -128;
    return (int8_t)r;
}

/* ------------------------------------------------------------ plain types */

static void q_f32(const float *x, uint8_t *dst, int64_t n) { memcpy(dst, x, (size_t)n * sizeof(float)); }

static void q_f16(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = tela_f32_to_f16(x[i]);
        dst[2 * i] = (uint8_t)h;
        dst[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

static void q_bf16(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = tela_f32_to_bf16(x[i]);
        dst[2 * i] = (uint8_t)h;
        dst[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

static void q_f64(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) { const double v = x[i]; memcpy(dst + 8 * i, &v, 8); }
}

/* ------------------------------------------------- 32-element block types */

/* The value of largest magnitude in x[0..n), with its sign; the first one
 * wins a tie. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    }
    return max;
}

static void block_min_max(const float *x, int n, float *min_out, float *max_out) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    *min_out = min;
    *max_out = max;
}

static void put_u32_le(uint8_t out[4], uint32_t v) {
    for (int k = 0; k < 4; k++) out[k] = (uint8_t)(v >> (8 * k));
}

/* Q4_0: d = max / -8 puts the extreme value on level -8 (the asymmetric end
 * of -8..7); q = trunc(x/d + 8.5) is round-half-up of x/d, offset by 8. */
static void q_q4_0(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float d = signed_absmax(x, 32) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        tela_block_q4_0 b;
        b.d = tela_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            const int lo = trunc_level(x[j] * id + 8.5f, 15);
            const int hi = trunc_level(x[j + 16] * id + 8.5f, 15);
            b.qs[j] = (uint8_t)(lo | hi << 4);
        }
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

/* Q4_1: levels 0..15 spanning [min, max]. */
static void q_q4_1(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float min, max;
        block_min_max(x, 32, &min, &max);
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        tela_block_q4_1 b;
        b.d = tela_f32_to_f16(d);
        b.m = tela_f32_to_f16(min);
        for (int j = 0; j < 16; j++) {
            const int lo = trunc_level((x[j] - min) * id + 0.5f, 15);
            const int hi = trunc_level((x[j + 16] - min) * id + 0.5f, 15);
            b.qs[j] = (uint8_t)(lo | hi << 4);
        }
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

/* Q5_0: as Q4_0 with levels -16..15; the fifth bit of element j goes to bit
 * j of qh. */
static void q_q5_0(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float d = signed_absmax(x, 32) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        tela_block_q5_0 b;
        b.d = tela_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int lo = trunc_level(x[j] * id + 16.5f, 31);
            const int hi = trunc_level(x[j + 16] * id + 16.5f, 31);
            b.qs[j] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
            qh |= (uint32_t)(lo >> 4) << j | (uint32_t)(hi >> 4) << (j + 16);
        }
        put_u32_le(b.qh, qh);
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

static void q_q5_1(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float min, max;
        block_min_max(x, 32, &min, &max);
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        tela_block_q5_1 b;
        b.d = tela_f32_to_f16(d);
        b.m = tela_f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int lo = trunc_level((x[j] - min) * id + 0.5f, 31);
            const int hi = trunc_level((x[j + 16] - min) * id + 0.5f, 31);
            b.qs[j] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
            qh |= (uint32_t)(lo >> 4) << j | (uint32_t)(hi >> 4) << (j + 16);
        }
        put_u32_le(b.qh, qh);
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

static float block_absmax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    return amax;
}

/* Q8_0: d = amax / 127; roundf (halves away from zero), as ggml does. */
static void q_q8_0(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float d = block_absmax(x, 32) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        tela_block_q8_0 b;
        b.d = tela_f32_to_f16(d);
        for (int j = 0; j < 32; j++) b.qs[j] = round_i8(x[j] * id);
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

/* Q8_1: Q8_0 plus s = d * sum(qs), used by dot products with min terms. */
static void q_q8_1(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float d = block_absmax(x, 32) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        tela_block_q8_1 b;
        b.d = tela_f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            b.qs[j] = round_i8(x[j] * id);
            sum += b.qs[j];
        }
        b.s = tela_f32_to_f16((float)sum * d);
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

/* ------------------------------------------------ K-quant scale searches */

/* Best scale (returned) and non-positive offset (-*neg_min) for n values on
 * levels 0..nmax, minimizing sum w*|err| (use_mad) or sum w*err^2.
 *
 * Start from the range [min(0, min x), max x] split evenly; then try nstep+1
 * slightly different level spacings, iscale = (nmax + rmin + rdelta*k) /
 * range. For each candidate assignment of levels the best scale and offset
 * are the weighted least-squares line through (level, x), solved in closed
 * form (offset clamped to <= 0); keep it if its error is lower. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
                           float rmin, float rdelta, int nstep, bool use_mad) {
    uint8_t cand[32];  /* n <= 32 */
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.0f;
    }

    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += w[i] * diff;
    }
    if (nstep < 1) {
        *neg_min = -min;
        return scale;
    }

    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * (float)k + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
            cand[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float error = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * (float)cand[i] + this_min - x[i];
            diff = use_mad ? fabsf(diff) : diff * diff;
            error += w[i] * diff;
        }
        if (error < best_error) {
            memcpy(L, cand, (size_t)n);
            best_error = error;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

/* Best signed scale for n values on levels -nmax..nmax-1, weighting each
 * squared error by x^2 (big values matter most). The scale maps the extreme
 * value to -nmax; 18 nearby spacings (nmax +- 0.1..0.9) are also tried, each
 * scored by the least-squares optimum sum(wxl)^2 / sum(wl^2). Levels are
 * written biased by nmax (0..2nmax-1). */
static float fit_scale_symmetric(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int k = -9; k <= 9; k++) {
        if (k == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)k) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's sub-block fit: start from the extreme value on level -nmax, then up
 * to 5 passes of coordinate descent, moving one level at a time when that
 * raises the least-squares score sum(wxl)^2 / sum(wl^2), w = x^2. Levels are
 * written biased by nmax. */
static float fit_scale_q3(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (new_l == L[i]) continue;
            slx += w * x[i] * (float)new_l;
            sl2 += w * (float)new_l * (float)new_l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)new_l;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Packs 2-bit levels of 256 values as Q2_K/Q3_K store them (see dequant.c). */
static void pack_2bit(const uint8_t *L, uint8_t qs[64]) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *v = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(v[0] | v[32] << 2 | v[64] << 4 | v[96] << 6);
        }
}

/* ---------------------------------------------------------------- K-quants */

/* Q2_K: sixteen sub-blocks of 16 on levels 0..3 with a 4-bit scale and a
 * 4-bit min each; fit minimizing the |x|-weighted absolute error. */
static void q_q2_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 256) {
        uint8_t L[256];
        float scales[16], mins[16], w[16];
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }

        tela_block_q2_K b;
        memset(&b, 0, sizeof b);
        if (max_scale > 0) {
            const float iscale = 15.0f / max_scale;
            for (int j = 0; j < 16; j++) b.scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            b.d = tela_f32_to_f16(max_scale / 15.0f);
        } else {
            b.d = tela_f32_to_f16(0.0f);
        }
        if (max_min > 0) {
            const float iscale = 15.0f / max_min;
            for (int j = 0; j < 16; j++) b.scales[j] |= (uint8_t)((unsigned)nearest_int(iscale * mins[j]) << 4);
            b.dmin = tela_f32_to_f16(max_min / 15.0f);
        } else {
            b.dmin = tela_f32_to_f16(0.0f);
        }

        /* Requantize against the scales as stored; a sub-block whose scale
         * rounded to zero keeps its fitted levels. */
        for (int j = 0; j < 16; j++) {
            const float d = tela_f16_to_f32(b.d) * (float)(b.scales[j] & 0xF);
            if (d == 0) continue;
            const float dm = tela_f16_to_f32(b.dmin) * (float)(b.scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)clamp_int(nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, b.qs);
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

/* Q3_K: sixteen sub-blocks of 16 on levels -4..3 with signed 6-bit scales. */
static void q_q3_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 256) {
        int8_t L[256];
        float scales[16];
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_scale_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) { amax = fabsf(scales[j]); max_scale = scales[j]; }
        }

        tela_block_q3_K b;
        memset(&b, 0, sizeof b);
        if (max_scale != 0) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                const int l = clamp_int(nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) b.scales[j] = (uint8_t)(l & 0xF);
                else b.scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                b.scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            b.d = tela_f32_to_f16(1 / iscale);
        } else {
            b.d = tela_f32_to_f16(0.0f);
        }

        for (int j = 0; j < 16; j++) {
            const int low = j < 8 ? b.scales[j] & 0xF : b.scales[j - 8] >> 4;
            const int sc = (low | ((b.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
            const float d = tela_f16_to_f32(b.d) * (float)sc;
            if (d == 0) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clamp_int(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }

        /* Level bit 2 goes to hmask (bit e / 32 of byte e % 32), the rest
         * to qs. */
        uint8_t low2[256];
        for (int e = 0; e < 256; e++) {
            int v = L[e];
            if (v > 3) {
                b.hmask[e % 32] |= (uint8_t)(1u << (e / 32));
                v -= 4;
            }
            low2[e] = (uint8_t)v;
        }
        pack_2bit(low2, b.qs);
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

/* Packs scale and min j (6 bits each) the way tela_k4_unpack_scale_min reads
 * them; packed must start zeroed. */
static void k4_pack_scale_min(uint8_t packed[12], int j, uint8_t ls, uint8_t lm) {
    if (j < 4) {
        packed[j] = ls;
        packed[j + 4] = lm;
    } else {
        packed[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
        packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
        packed[j] |= (uint8_t)((lm >> 4) << 6);
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fits eight sub-blocks of 32
 * with weights rms(sub-block) + |x|, stores the 6-bit scales and mins, and
 * leaves the requantized levels 0..nmax in L. */
static void k4_fit_block(const float *x, int nmax, float rmin, int nstep, uint16_t *d_out, uint16_t *dmin_out,
                         uint8_t packed[12], uint8_t L[256]) {
    float scales[8], mins[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xs[l]);
        scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }

    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    memset(packed, 0, 12);
    for (int j = 0; j < 8; j++) {
        /* Truncate to 8 bits before the clamp, as ggml does. */
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        if (ls > 63) ls = 63;
        if (lm > 63) lm = 63;
        k4_pack_scale_min(packed, j, ls, lm);
    }
    *d_out = tela_f32_to_f16(max_scale / 63.0f);
    *dmin_out = tela_f32_to_f16(max_min / 63.0f);

    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        tela_k4_unpack_scale_min(packed, j, &sc, &m);
        const float d = tela_f16_to_f32(*d_out) * (float)sc;
        if (d == 0) continue;
        const float dm = tela_f16_to_f32(*dmin_out) * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clamp_int(nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

static void q_q4_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 256) {
        uint8_t L[256];
        tela_block_q4_K b;
        k4_fit_block(x, 15, -1.0f, 20, &b.d, &b.dmin, b.scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) b.qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + l + 32] << 4);
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

static void q_q5_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 256) {
        uint8_t L[256];
        tela_block_q5_K b;
        k4_fit_block(x, 31, -0.5f, 15, &b.d, &b.dmin, b.scales, L);
        memset(b.qh, 0, sizeof b.qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * c + l], hi = L[64 * c + l + 32];
                b.qs[32 * c + l] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
                b.qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
            }
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

/* Q6_K: sixteen sub-blocks of 16 on levels -32..31 with int8 scales; the
 * sub-block scale of largest magnitude maps to scale -128. */
static void q_q6_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 256) {
        int8_t L[256];
        float scales[16];
        float max_scale = 0, max_abs_scale = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_scale_symmetric(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs_scale) { max_abs_scale = fabsf(scales[j]); max_scale = scales[j]; }
        }

        tela_block_q6_K b;
        memset(&b, 0, sizeof b);
        if (max_abs_scale < GROUP_EPS) {  /* all (near) zero: an all-zero block */
            memcpy(dst + i * sizeof b, &b, sizeof b);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        b.d = tela_f32_to_f16(1 / iscale);
        for (int j = 0; j < 16; j++) b.scales[j] = (int8_t)clamp_int(nearest_int(iscale * scales[j]), -128, 127);

        for (int j = 0; j < 16; j++) {
            const float d = tela_f16_to_f32(b.d) * (float)b.scales[j];
            if (d == 0) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clamp_int(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }

        for (int h = 0; h < 2; h++) {
            uint8_t *ql = b.ql + 64 * h, *qh = b.qh + 32 * h;
            const int8_t *v = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((v[l] & 0xF) | (v[l + 64] & 0xF) << 4);
                ql[l + 32] = (uint8_t)((v[l + 32] & 0xF) | (v[l + 96] & 0xF) << 4);
                qh[l] = (uint8_t)(v[l] >> 4 | (v[l + 32] >> 4) << 2 | (v[l + 64] >> 4) << 4 | (v[l + 96] >> 4) << 6);
            }
        }
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

/* Q8_K: d = max / -127 with the sign of the extreme value, f32 scale, and
 * the sums of each 16 values for the dot-product kernels. */
static void q_q8_K(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 256) {
        tela_block_q8_K b;
        memset(&b, 0, sizeof b);
        const float max = signed_absmax(x, 256);
        if (max != 0) {
            const float iscale = -127.0f / max;
            for (int j = 0; j < 256; j++) {
                const int v = nearest_int(iscale * x[j]);
                b.qs[j] = (int8_t)clamp_int(v, -128, 127);
            }
            for (int j = 0; j < 16; j++) {
                int sum = 0;
                for (int l = 0; l < 16; l++) sum += b.qs[16 * j + l];
                b.bsums[j] = (int16_t)sum;
            }
            b.d = 1 / iscale;
        }
        memcpy(dst + i * sizeof b, &b, sizeof b);
    }
}

/* ---------------------------------------------------------------- dispatch */

typedef void (*quant_fn)(const float *src, uint8_t *dst, int64_t count);

/* Plain types take an element count, block types a block count. */
static quant_fn quant_for(tela_type type) {
    switch (type) {
    case TELA_TYPE_F32: return q_f32;
    case TELA_TYPE_F16: return q_f16;
    case TELA_TYPE_BF16: return q_bf16;
    case TELA_TYPE_F64: return q_f64;
    case TELA_TYPE_Q4_0: return q_q4_0;
    case TELA_TYPE_Q4_1: return q_q4_1;
    case TELA_TYPE_Q5_0: return q_q5_0;
    case TELA_TYPE_Q5_1: return q_q5_1;
    case TELA_TYPE_Q8_0: return q_q8_0;
    case TELA_TYPE_Q8_1: return q_q8_1;
    case TELA_TYPE_Q2_K: return q_q2_K;
    case TELA_TYPE_Q3_K: return q_q3_K;
    case TELA_TYPE_Q4_K: return q_q4_K;
    case TELA_TYPE_Q5_K: return q_q5_K;
    case TELA_TYPE_Q6_K: return q_q6_K;
    case TELA_TYPE_Q8_K: return q_q8_K;
    default: return NULL;
    }
}

tela_status tela_quantize_row(tela_type type, const float *src, void *dst, int64_t n) {
    const tela_type_traits *t = tela_type_get_traits(type);
    if (!t) return tela_errorf(TELA_ERR_UNSUPPORTED, "quantize: unknown tensor type id %d", (int)type);
    quant_fn fn = quant_for(type);
    if (!fn) return tela_errorf(TELA_ERR_UNSUPPORTED, "quantize: no quantizer to type %s", t->name);
    if (n < 0 || n % t->block_size != 0)
        return tela_errorf(TELA_ERR_ARG, "quantize to %s: %lld elements is not a whole number of %lld-element blocks",
                           t->name, (long long)n, (long long)t->block_size);
    if (n == 0) return TELA_OK;
    if (!src || !dst) return tela_errorf(TELA_ERR_ARG, "quantize to %s: NULL buffer", t->name);
    /* Scales computed from an inf or nan would poison a whole block; the
     * float types store them as they are. */
    if (t->is_quantized) {
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(src[i]))
                return tela_errorf(TELA_ERR_ARG, "quantize to %s: element %lld is not finite (%g)", t->name,
                                   (long long)i, (double)src[i]);
    }
    fn(src, (uint8_t *)dst, n / t->block_size);
    return TELA_OK;
}
