/* qdot_neon.c: dot-product kernels for AArch64 Advanced SIMD (NEON, part of
 * every AArch64 CPU). They follow the float steps of the scalar kernels in
 * qdot.c exactly, so results are bit-identical to them (and to the x86
 * kernels): the 16-lane float partial sums are four 128-bit registers, and
 * the K-quants' integer sums are exact whatever the grouping.
 *
 * Integer products: SDOT (four int8 products summed per int32 lane) when
 * the compiler targets the dot-product extension (e.g. -march=native on an
 * ARMv8.2+ core), otherwise widening multiplies and pairwise adds, which
 * give the same int32 lanes. Tiles are 4 weight rows x 1 column. */
#include "backend/cpu/qdot.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <stddef.h>
#include <string.h>

#include "quant/quant.h"
#include "util/fp16.h"

#define INL static inline __attribute__((always_inline))
/* clang reads "GCC unroll N" as a count it may ignore: ask it for full
 * unrolling, which is what keeps the accumulator arrays in registers. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

static inline uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
INL float f16(const uint8_t *p) { return tela_f16_to_f32(rd16(p)); }

/* 16 lanes in a[0..3] (lanes 4i..4i+3 in a[i]) summed in the scalar
 * kernels' order: j + 8, then j + 4, j + 2, j + 1. */
INL float hsum16(const float32x4_t a[4]) {
    const float32x4_t t = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[1], a[3]));
    const float32x2_t u = vadd_f32(vget_low_f32(t), vget_high_f32(t));
    return vget_lane_f32(u, 0) + vget_lane_f32(u, 1);
}

/* Lane i = sum of the products of elements 4i..4i+3 of a and b. */
INL int32x4_t dot4(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    const int16x8_t hi = vmull_high_s8(a, b);
    return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
#endif
}

/* ------------------------------------------------------- float weights */

INL void ld_f32(const uint8_t *p, float32x4_t v[4]) {
    for (int k = 0; k < 4; k++) {
        float t[4];
        memcpy(t, p + 16 * k, 16);
        v[k] = vld1q_f32(t);
    }
}
INL void ld_f16(const uint8_t *p, float32x4_t v[4]) {
    for (int k = 0; k < 4; k++) {
        uint16_t t[4];
        memcpy(t, p + 8 * k, 8);
        v[k] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(t)));
    }
}
INL void ld_bf16(const uint8_t *p, float32x4_t v[4]) {
    for (int k = 0; k < 4; k++) {
        uint16_t t[4];
        memcpy(t, p + 8 * k, 8);
        v[k] = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(t), 16));
    }
}

/* 16 elements a step; a partial last step on zero-padded copies. */
#define FLOAT_TILE(NAME, LOAD, ESIZE)                                                                            \
    INL void NAME##_tile(const uint8_t *w, size_t ws, const uint8_t *x, int64_t n, float *out, const int R) {  \
        float32x4_t acc[4][4];                                                                                     \
        UNROLL for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = vdupq_n_f32(0.0f);    \
        int64_t i = 0;                                                                                             \
        for (; i < n; i += 16) {                                                                                   \
            uint8_t wt[16 * (ESIZE)];                                                                              \
            float xt[16] = {0};                                                                                    \
            const int full = n - i >= 16;                                                                          \
            const uint8_t *xp = x + 4 * i;                                                                         \
            if (!full) {                                                                                           \
                memcpy(xt, xp, (size_t)(n - i) * 4);                                                               \
                xp = (const uint8_t *)xt;                                                                          \
            }                                                                                                      \
            float32x4_t xv[4];                                                                                     \
            ld_f32(xp, xv);                                                                                        \
            UNROLL for (int r = 0; r < R; r++) {                                                                   \
                const uint8_t *wp = w + r * ws + i * (ESIZE);                                                      \
                if (!full) {                                                                                       \
                    memset(wt, 0, sizeof wt);                                                                      \
                    memcpy(wt, wp, (size_t)(n - i) * (ESIZE));                                                     \
                    wp = wt;                                                                                       \
                }                                                                                                  \
                float32x4_t wv[4];                                                                                 \
                LOAD(wp, wv);                                                                                      \
                for (int k = 0; k < 4; k++) acc[r][k] = vfmaq_f32(acc[r][k], wv[k], xv[k]);                        \
            }                                                                                                      \
        }                                                                                                          \
        UNROLL for (int r = 0; r < R; r++) out[r] = hsum16(acc[r]);                                              \
    }

FLOAT_TILE(f32, ld_f32, 4)
FLOAT_TILE(f16, ld_f16, 2)
FLOAT_TILE(bf16, ld_bf16, 2)

/* ------------------------------------ 32-element blocks x Q8_0 activations */

#define Q8_0_SIZE 34
#define Q4_0_SIZE 18

/* Block b of up to four rows against one activation block: the int32 lanes
 * (sums of four products) go to lanes 8*(b%2)..+7 of each output's 16,
 * times (d * dx) -- the scalar kernels' lanes_add. */
INL void b32_block(const uint8_t *w, size_t ws, const uint8_t *x, int64_t b, float32x4_t (*acc)[4], const int R,
                   const int q4) {
    const uint8_t *xb = x + b * Q8_0_SIZE;
    const int8x16_t x0 = vld1q_s8((const int8_t *)(xb + 2)), x1 = vld1q_s8((const int8_t *)(xb + 18));
    const float dx = f16(xb);
    const size_t wsize = q4 ? Q4_0_SIZE : Q8_0_SIZE;
    const int h = (int)(b & 1) * 2;
    UNROLL for (int r = 0; r < R; r++) {
        const uint8_t *p = w + r * ws + b * wsize;
        int8x16_t w0, w1;
        if (q4) {
            const uint8x16_t q = vld1q_u8(p + 2);
            w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
            w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
        } else {
            w0 = vld1q_s8((const int8_t *)(p + 2));
            w1 = vld1q_s8((const int8_t *)(p + 18));
        }
        const float32x4_t scale = vdupq_n_f32(f16(p) * dx);
        const int32x4_t s0 = dot4(vdupq_n_s32(0), w0, x0), s1 = dot4(vdupq_n_s32(0), w1, x1);
        acc[r][h] = vfmaq_f32(acc[r][h], vcvtq_f32_s32(s0), scale);
        acc[r][h + 1] = vfmaq_f32(acc[r][h + 1], vcvtq_f32_s32(s1), scale);
    }
}

#define BLOCK32_TILE(NAME, Q4)                                                                                   \
    INL void NAME##_tile(const uint8_t *w, size_t ws, const uint8_t *x, int64_t n, float *out, const int R) {  \
        float32x4_t acc[4][4];                                                                                     \
        UNROLL for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = vdupq_n_f32(0.0f);    \
        for (int64_t b = 0; b < n / 32; b++) b32_block(w, ws, x, b, acc, R, Q4);                                 \
        UNROLL for (int r = 0; r < R; r++) out[r] = hsum16(acc[r]);                                              \
    }

BLOCK32_TILE(q8_0, 0)
BLOCK32_TILE(q4_0, 1)

/* ----------------------------------------- K-quants x Q8_K activations */

#define Q8K_SIZE 292
#define Q8K_QS 4
#define Q8K_BSUMS 260

/* The float step of qdot.c (vfma is one rounding). */
INL float k_step(float acc, int32_t isum, float d, int32_t msum, float dmin, float dx) {
    acc = vget_lane_f32(vfma_f32(vdup_n_f32(acc), vdup_n_f32((float)isum), vdup_n_f32(d * dx)), 0);
    return vget_lane_f32(vfma_f32(vdup_n_f32(acc), vdup_n_f32(-(float)msum), vdup_n_f32(dmin * dx)), 0);
}

/* Sum of 32 products of levels (0..63, as int8) and activations. */
INL int32_t dot32(uint8x16_t q0, uint8x16_t q1, const int8_t *x) {
    int32x4_t s = dot4(vdupq_n_s32(0), vreinterpretq_s8_u8(q0), vld1q_s8(x));
    s = dot4(s, vreinterpretq_s8_u8(q1), vld1q_s8(x + 16));
    return vaddvq_s32(s);
}

INL void k4_scales_mins(const uint8_t *p, uint8_t sc[8], uint8_t mn[8]) {
    const uint32_t u0 = rd32(p), u1 = rd32(p + 4), u2 = rd32(p + 8);
    const uint32_t s[2] = {u0 & 0x3f3f3f3fu, (u2 & 0x0f0f0f0fu) | ((u0 >> 6) & 0x03030303u) << 4};
    const uint32_t m[2] = {u1 & 0x3f3f3f3fu, ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 6) & 0x03030303u) << 4};
    memcpy(sc, s, 8);
    memcpy(mn, m, 8);
}

#define Q4K_SIZE 144
#define Q5K_SIZE 176

INL void q45_K_tile(const uint8_t *w, size_t ws, const uint8_t *x, int64_t n, float *out, const int R,
                    const int five) {
    const size_t bsize = five ? Q5K_SIZE : Q4K_SIZE, qs_off = five ? 48 : 16;
    float acc[4] = {0, 0, 0, 0};
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *xb = x + b * Q8K_SIZE;
        const int8_t *xq = (const int8_t *)(xb + Q8K_QS);
        float dx;
        memcpy(&dx, xb, 4);
        int16_t bs[16];
        memcpy(bs, xb + Q8K_BSUMS, 32);
        UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *p = w + r * ws + b * bsize;
            uint8_t sc[8], mn[8];
            k4_scales_mins(p + 4, sc, mn);
            int32_t msum = 0, isum = 0;
            for (int j = 0; j < 8; j++) msum += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
            const uint8x16_t h0 = five ? vld1q_u8(p + 16) : vdupq_n_u8(0), h1 = five ? vld1q_u8(p + 32) : vdupq_n_u8(0);
            UNROLL for (int c = 0; c < 4; c++) {
                const uint8x16_t q0 = vld1q_u8(p + qs_off + 32 * c), q1 = vld1q_u8(p + qs_off + 32 * c + 16);
                uint8x16_t l0 = vandq_u8(q0, m4), l1 = vandq_u8(q1, m4), u0 = vshrq_n_u8(q0, 4), u1 = vshrq_n_u8(q1, 4);
                if (five) {
                    const uint8x16_t bl = vdupq_n_u8((uint8_t)(1u << (2 * c))), bh = vdupq_n_u8((uint8_t)(1u << (2 * c + 1)));
                    const uint8x16_t s16 = vdupq_n_u8(16);
                    l0 = vorrq_u8(l0, vandq_u8(vtstq_u8(h0, bl), s16));
                    l1 = vorrq_u8(l1, vandq_u8(vtstq_u8(h1, bl), s16));
                    u0 = vorrq_u8(u0, vandq_u8(vtstq_u8(h0, bh), s16));
                    u1 = vorrq_u8(u1, vandq_u8(vtstq_u8(h1, bh), s16));
                }
                isum += sc[2 * c] * dot32(l0, l1, xq + 64 * c) + sc[2 * c + 1] * dot32(u0, u1, xq + 64 * c + 32);
            }
            acc[r] = k_step(acc[r], isum, f16(p), msum, f16(p + 2), dx);
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

/* Q6_K: levels q - 32 in -32..31 fit int8, so they are formed directly. */
INL void q6_K_tile(const uint8_t *w, size_t ws, const uint8_t *x, int64_t n, float *out, const int R) {
    float acc[4] = {0, 0, 0, 0};
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(0x03);
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *xb = x + b * Q8K_SIZE;
        const int8_t *xq = (const int8_t *)(xb + Q8K_QS);
        float dx;
        memcpy(&dx, xb, 4);
        UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *p = w + r * ws + b * Q6K_SIZE;
            const int8_t *sc = (const int8_t *)(p + 192);
            int32_t isum = 0;
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = p + 64 * h, *qh = p + 128 + 32 * h;
                for (int g = 0; g < 4; g++) {
                    for (int s = 0; s < 2; s++) {
                        const uint8x16_t l = vld1q_u8(ql + 32 * (g % 2) + 16 * s);
                        const uint8x16_t nib = g < 2 ? vandq_u8(l, m4) : vshrq_n_u8(l, 4);
                        const uint8x16_t hb = vandq_u8(vshlq_u8(vld1q_u8(qh + 16 * s), vdupq_n_s8((int8_t)(-2 * g))), m3);
                        const int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(nib, vshlq_n_u8(hb, 4))), vdupq_n_s8(32));
                        const int32x4_t d = dot4(vdupq_n_s32(0), q, vld1q_s8(xq + 128 * h + 32 * g + 16 * s));
                        isum += sc[8 * h + 2 * g + s] * vaddvq_s32(d);
                    }
                }
            }
            acc[r] = k_step(acc[r], isum, f16(p + 208), 0, 0.0f, dx);
        }
    }
    UNROLL for (int r = 0; r < R; r++) out[r] = acc[r];
}

/* ------------------------------------------------------------ instances */

#define INSTANCES(NAME)                                                                                            \
    static void NAME##_4x1(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out,     \
                           int64_t os) {                                                                          \
        (void)xs;                                                                                                  \
        (void)os;                                                                                                  \
        NAME##_tile(w, ws, x, n, out, 4);                                                                         \
    }                                                                                                              \
    static void NAME##_1x1(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int64_t n, float *out,     \
                           int64_t os) {                                                                          \
        (void)xs;                                                                                                  \
        (void)os;                                                                                                  \
        NAME##_tile(w, ws, x, n, out, 1);                                                                         \
    }                                                                                                              \
    static float NAME##_vec_dot(const void *w, const void *x, int64_t n) {                                       \
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

void tela_qdot_fill_neon(tela_qdot_isa_table *t) {
    SET(TELA_TYPE_F32, f32);
    SET(TELA_TYPE_F16, f16);
    SET(TELA_TYPE_BF16, bf16);
    SET(TELA_TYPE_Q8_0, q8_0);
    SET(TELA_TYPE_Q4_0, q4_0);
    SET(TELA_TYPE_Q4_K, q4_K);
    SET(TELA_TYPE_Q5_K, q5_K);
    SET(TELA_TYPE_Q6_K, q6_K);
}

#endif /* __aarch64__ */
