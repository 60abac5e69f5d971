/* attention.c: the CPU attention (attention_impl.h) compiled as the build
 * has it, its scratch size, and tela_op_attention, which runs the AVX-512
 * variant (attention_avx512.c) where the qdot kernels run AVX-512 (the CPU
 * has it, TELA_CPU does not cap it) and this variant otherwise. A native
 * build on an AVX-512 machine compiles both from the same code for the
 * same target; a portable one (TELA_NATIVE=OFF) gets AVX-512 only in the
 * other file. */
#define ATT_NAME(name) name##_generic
#include "backend/cpu/attention_impl.h"

#include "backend/cpu/qdot.h"

/* CMakeLists.txt defines TELA_ATTENTION_AVX512 where it compiles
 * attention_avx512.c with the AVX-512 flags (x86-64 with gcc or clang). */
#if defined(TELA_ATTENTION_AVX512) && defined(__x86_64__)
#define ATT_HAVE_AVX512 1
void tela_op_attention_avx512(tela_threadpool *pool, const tela_attn_args *args, int n_args);
#else
#define ATT_HAVE_AVX512 0
#endif

/* The same for both variants: a block's transposed queries and scores
 * (ATT_MAX_ROWS rows, or ATT_LANES past 16384 keys) and its converted key
 * rows, as attention_block lays them out. */
size_t tela_op_attention_scratch(int n_ctx, int k_dim) {
    const size_t rows = n_ctx <= 16384 ? ATT_MAX_ROWS : ATT_LANES;
    /* queries and scores, then ATT_LANES f16 key rows as floats */
    return rows * ((size_t)n_ctx + (size_t)k_dim + 4) + 16 + ATT_LANES * (size_t)k_dim + 16;
}

void tela_op_attention(tela_threadpool *pool, const tela_attn_args *args, int n_args) {
#if ATT_HAVE_AVX512
    /* the qdot dispatch's choice (qdot.c: AVX-512 F/BW/VL/DQ, VNNI, FMA,
     * F16C, BMI2, after the TELA_CPU cap), so that TELA_CPU=avx2 or scalar
     * takes this file's variant for the attention too */
    if (tela_qdot_best_isa() == TELA_ISA_AVX512) {
        tela_op_attention_avx512(pool, args, n_args);
        return;
    }
#endif
    tela_op_attention_generic(pool, args, n_args);
}
