/* vecops_impl.h: the CPU backend's row-wise operations on activations that
 * run long in a prefill (RMSNorm over rows, SwiGLU), compiled twice as
 * cpu_variant.h describes: vecops.c (the generic build, and the entry
 * points of ops.h that choose) and vecops_avx512.c. The 64-byte vectors
 * become AVX-512 instructions in the one and whatever the target has in
 * the other, with the same arithmetic. Not a header to include anywhere
 * else. */
#ifndef TELA_VARIANT
#error "vecops_impl.h: include backend/cpu/cpu_variant.h first (see vecops.c)"
#endif

#include "backend/cpu/vec16.h"

#include <math.h>
#include <stdint.h>

TELA_VARIANT_DECLARE(void, tela_op_rmsnorm, (float *out, int64_t out_stride, const float *x, int64_t x_stride,
                                             const float *w, int64_t n, int n_tok, float eps));
TELA_VARIANT_DECLARE(void, tela_op_swiglu, (float *gate, const float *up, int64_t n));

/* Eight float and double lanes (GCC/Clang vector extension), the floats
 * loadable from any float address. */
typedef float vecops_v8f __attribute__((vector_size(32), aligned(4), may_alias));
typedef double vecops_v8d __attribute__((vector_size(64)));

/* tela_op_rmsnorm (ops.h) */
void TELA_VARIANT(tela_op_rmsnorm)(float *out, int64_t out_stride, const float *x, int64_t x_stride, const float *w,
                                   int64_t n, int n_tok, float eps) {
    for (int t = 0; t < n_tok; t++) {
        const float *xr = x + t * x_stride;
        float *o = out + t * out_stride;
        /* sum of squares in double, 8 lanes (element i in lane i % 8) */
        vecops_v8d acc = {0};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const vecops_v8f v = *(const vecops_v8f *)(xr + i);
            const vecops_v8d d = __builtin_convertvector(v, vecops_v8d);
            acc += d * d;
        }
        for (int j = 0; i < n; i++, j++) acc[j] += (double)xr[i] * xr[i];
        const double ss = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
        for (i = 0; i < n; i++) o[i] = w ? xr[i] * scale * w[i] : xr[i] * scale;
    }
}

/* tela_op_swiglu (ops.h): silu(g) * u = g / (1 + exp(-g)) * u, 16 at a
 * time (the tail through a padded vector, so every element takes the same
 * steps). */
void TELA_VARIANT(tela_op_swiglu)(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i < n; i += 16) {
        tela_v16f g = {0}, u = {0};
        const int64_t m = n - i < 16 ? n - i : 16;
        if (m == 16) {
            g = *(const tela_v16f *)(gate + i);
            u = *(const tela_v16f *)(up + i);
        } else {
            for (int64_t j = 0; j < m; j++) g[j] = gate[i + j], u[j] = up[i + j];
        }
        tela_v16f e = -g;
        exp_v16(&e);
        const tela_v16f y = g / (1.0f + e) * u;
        if (m == 16)
            *(tela_v16f *)(gate + i) = y;
        else
            for (int64_t j = 0; j < m; j++) gate[i + j] = y[j];
    }
}
