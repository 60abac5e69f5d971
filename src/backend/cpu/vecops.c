/* vecops.c: RMSNorm and SwiGLU (vecops_impl.h) compiled as the build has
 * them, and their entry points, which run the AVX-512 build
 * (vecops_avx512.c) where the CPU has AVX-512 and this one otherwise
 * (cpu_variant.h). ops.c splits them over the pool. */
#include "backend/cpu/cpu_variant.h"
#include "backend/cpu/vecops_impl.h"

#include "backend/cpu/ops.h"

void tela_op_rmsnorm(float *out, int64_t out_stride, const float *x, int64_t x_stride, const float *w, int64_t n,
                     int n_tok, float eps) {
    TELA_VARIANT_CALL(tela_op_rmsnorm, (out, out_stride, x, x_stride, w, n, n_tok, eps));
}

void tela_op_swiglu(float *gate, const float *up, int64_t n) { TELA_VARIANT_CALL(tela_op_swiglu, (gate, up, n)); }
