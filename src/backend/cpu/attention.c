/* attention.c: the CPU attention (attention_impl.h) compiled as the build
 * has it, its scratch size, and tela_op_attention, which runs the AVX-512
 * build (attention_avx512.c) where the CPU has AVX-512 and this one
 * otherwise (cpu_variant.h). A native build on an AVX-512 machine
 * compiles both from the same code for the same target; a portable one
 * (TELA_NATIVE=OFF) gets AVX-512 only in the other file. */
#include "backend/cpu/cpu_variant.h"
#include "backend/cpu/attention_impl.h"

/* The same for both variants: a block's transposed queries and scores
 * (ATT_MAX_ROWS rows, or ATT_LANES past 16384 keys) and its converted key
 * rows, as attention_block lays them out. */
size_t tela_op_attention_scratch(int n_ctx, int k_dim) {
    const size_t rows = n_ctx <= 16384 ? ATT_MAX_ROWS : ATT_LANES;
    /* queries and scores, then ATT_LANES f16 key rows as floats */
    return rows * ((size_t)n_ctx + (size_t)k_dim + 4) + 16 + ATT_LANES * (size_t)k_dim + 16;
}

void tela_op_attention(tela_threadpool *pool, const tela_attn_args *args, int n_args) {
    TELA_VARIANT_CALL(tela_op_attention, (pool, args, n_args));
}
