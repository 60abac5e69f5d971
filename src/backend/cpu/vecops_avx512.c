/* vecops_avx512.c: RMSNorm and SwiGLU (vecops_impl.h) compiled for
 * AVX-512 whatever the rest of the build targets; vecops.c calls them
 * where the CPU has it. Empty where the compiler cannot target AVX-512
 * (cpu_variant.h). */
#define TELA_CPU_VARIANT_AVX512
#include "backend/cpu/cpu_variant.h"

#if TELA_CPU_HAVE_AVX512_VARIANT
#include "backend/cpu/vecops_impl.h"
#endif
