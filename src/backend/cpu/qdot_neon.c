/* qdot_neon.c: dot-product kernels for AArch64 Advanced SIMD. */
#include "backend/cpu/qdot.h"

#if defined(__aarch64__)
void tela_qdot_fill_neon(tela_qdot_isa_table *t) { (void)t; }
#endif
