/* cpu_variant.h: the CPU backend's code that is compiled twice from one
 * source, and the run-time choice between the two builds.
 *
 * An implementation header (attention_impl.h, vecops_impl.h) is included
 * by two files: FOO.c, compiled with the build's flags (the generic
 * variant: baseline x86-64 in a portable build, TELA_NATIVE=OFF; whatever
 * -march=native gives in a native one), which also holds the entry points
 * that choose, and FOO_avx512.c, which CMakeLists.txt compiles with
 * AVX-512 F/BW/DQ/VL, FMA and F16C (TELA_AVX512_FLAGS) where the compiler
 * can target them (x86-64 with gcc or clang, the configure check
 * TELA_CC_AVX512, which then defines TELA_CPU_AVX512_VARIANTS for the
 * library). FOO_avx512.c defines TELA_CPU_VARIANT_AVX512 before including
 * this header, and includes the implementation only where
 * TELA_CPU_HAVE_AVX512_VARIANT is 1: elsewhere (other machines, other
 * compilers) it compiles to nothing and only the generic variant runs.
 *
 * The implementation names its entry points TELA_VARIANT(name)
 * (name_generic or name_avx512) and declares both builds with
 * TELA_VARIANT_DECLARE; the entry points in FOO.c call
 * TELA_VARIANT_CALL(name, (args)), which runs the AVX-512 build where the
 * qdot kernels run AVX-512
 * (tela_qdot_best_isa: AVX-512 F/BW/VL/DQ, VNNI, FMA, F16C, BMI2, after
 * the TELA_CPU cap), so TELA_CPU=avx2 or scalar takes the generic one.
 *
 * Both builds are the same C: gcc in ISO C mode does not contract a * b +
 * c into an FMA, and FMAs written as intrinsics sit in AVX-512 paths that
 * a native build on an AVX-512 machine compiles into both, so a portable
 * and a native build give the same bits there. */
#ifndef TELA_BACKEND_CPU_CPU_VARIANT_H
#define TELA_BACKEND_CPU_CPU_VARIANT_H

#include "backend/cpu/qdot.h"

#if defined(TELA_CPU_AVX512_VARIANTS) && defined(__x86_64__)
#define TELA_CPU_HAVE_AVX512_VARIANT 1
#else
#define TELA_CPU_HAVE_AVX512_VARIANT 0
#endif

/* Declares name's two builds, ret name_generic params and name_avx512. */
#define TELA_VARIANT_DECLARE(ret, name, params) \
    ret name##_generic params;                  \
    ret name##_avx512 params

#if TELA_CPU_HAVE_AVX512_VARIANT
/* name_avx512 args where the qdot kernels run AVX-512, else name_generic
 * args (an expression of the function's type). */
#define TELA_VARIANT_CALL(name, args) \
    (tela_qdot_best_isa() == TELA_ISA_AVX512 ? name##_avx512 args : name##_generic args)
#else
#define TELA_VARIANT_CALL(name, args) (name##_generic args)
#endif

/* The including file's variant: the name of its build of an entry point,
 * and, in an AVX-512 file, a check that it got the flags. */
#if defined(TELA_CPU_VARIANT_AVX512)
#if TELA_CPU_HAVE_AVX512_VARIANT && (!defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || \
                                     !defined(__AVX512VL__) || !defined(__FMA__) || !defined(__F16C__))
#error "an *_avx512.c variant file needs the AVX-512 flags CMakeLists.txt gives it (TELA_AVX512_FLAGS)"
#endif
#define TELA_VARIANT(name) name##_avx512
#else
#define TELA_VARIANT(name) name##_generic
#endif

#endif
