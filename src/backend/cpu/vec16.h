/* vec16.h: 16-lane float and int32 vectors (GCC/Clang vector extension,
 * loadable from any float address) and the vectorized exp over them,
 * shared by SwiGLU (vecops_impl.h) and the attention (attention_impl.h).
 * Static inline, so each file compiles them for its own target (the
 * AVX-512 variants included). */
#ifndef TELA_BACKEND_CPU_VEC16_H
#define TELA_BACKEND_CPU_VEC16_H

#include <stdint.h>

typedef float tela_v16f __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t tela_v16i __attribute__((vector_size(64), aligned(4), may_alias));

/* exp(x) for 16 lanes, any finite x or -inf: x = k ln2 + r with |r| <=
 * ln2/2 (Cody-Waite), exp(r) by its Taylor polynomial to r^7 (truncation
 * below 6e-9 relative, a few ulp with rounding), times 2^k built in the
 * exponent bits. x is clamped to [-87, 88] so 2^k stays a normal float:
 * results saturate at exp(88) = 1.7e38 above and at 1.6e-38 below, or 0
 * from x < -104 (where expf underflows too). */
static inline void exp_v16(tela_v16f *xp) {
    tela_v16f x = *xp;
    const tela_v16i dead = x < -104.0f;
    const tela_v16i lo = x < -87.0f, hi = x > 88.0f;
    x = (tela_v16f)(((tela_v16i)x & ~(lo | hi)) | ((tela_v16i)((tela_v16f){0} - 87.0f) & lo) |
                    ((tela_v16i)((tela_v16f){0} + 88.0f) & hi));
    const float rnd = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    tela_v16f kf = (x * 1.44269504088896341f + rnd) - rnd;
    tela_v16f r = x - kf * 0.693145751953125f;
    r = r - kf * 1.42860682030941723212e-6f;
    tela_v16f p = r * (1.0f / 5040) + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    tela_v16i k = __builtin_convertvector(kf, tela_v16i);
    tela_v16i scale = (k + 127) << 23;
    *xp = (tela_v16f)((tela_v16i)(p * (tela_v16f)scale) & ~dead);
}

#endif
