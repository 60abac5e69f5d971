/* attention_avx512.c: the CPU attention (attention_impl.h) compiled for
 * AVX-512 F/BW/DQ/VL with FMA and F16C, whatever the rest of the build
 * targets; attention.c calls it where the CPU has AVX-512. Empty where the
 * compiler cannot target AVX-512 (cpu_variant.h). */
#define TELA_CPU_VARIANT_AVX512
#include "backend/cpu/cpu_variant.h"

#if TELA_CPU_HAVE_AVX512_VARIANT
#include "backend/cpu/attention_impl.h"
#endif
