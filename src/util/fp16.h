/* fp16.h: IEEE half and bfloat16 conversions (exact, round-to-nearest-even). */
#ifndef TELA_UTIL_FP16_H
#define TELA_UTIL_FP16_H

#include <stdint.h>
#include <string.h>

static inline float tela_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t tela_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float tela_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0) return tela_bits_to_f32(sign);
        /* subnormal: mant * 2^-24 */
        float f = (float)mant * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    if (exp == 31) return tela_bits_to_f32(sign | 0x7f800000u | (mant << 13));
    return tela_bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t tela_f32_to_f16(float f) {
    uint32_t x = tela_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (ax < 0x38800000u) { /* subnormal or zero in half */
        float a = tela_bits_to_f32(ax);
        /* a * 2^24 rounded to nearest even integer = half mantissa */
        float r = a * 16777216.0f;
        uint32_t m = (uint32_t)r;
        float frac = r - (float)m;
        if (frac > 0.5f || (frac == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t mant = ax & 0x7fffff;
    uint32_t exp = (ax >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static inline float tela_bf16_to_f32(uint16_t b) { return tela_bits_to_f32((uint32_t)b << 16); }

static inline uint16_t tela_f32_to_bf16(float f) {
    uint32_t x = tela_f32_to_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

#endif
