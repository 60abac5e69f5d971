/* attention_avx512.c: the CPU attention (attention_impl.h) compiled for
 * AVX-512 F/BW/DQ/VL with FMA and F16C, whatever the rest of the build
 * targets: CMakeLists.txt gives this file those flags (x86-64, gcc or
 * clang) and defines TELA_ATTENTION_AVX512; attention.c calls it when the
 * CPU has AVX-512. Elsewhere the file compiles to nothing. */
#if defined(TELA_ATTENTION_AVX512) && defined(__x86_64__)

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || !defined(__AVX512VL__) || \
    !defined(__FMA__) || !defined(__F16C__)
#error "attention_avx512.c needs the AVX-512 flags CMakeLists.txt gives it"
#endif

#define ATT_NAME(name) name##_avx512
#include "backend/cpu/attention_impl.h"

#else
typedef int tela_attention_avx512_unused; /* ISO C wants a declaration in every file */
#endif
