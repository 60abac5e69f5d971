/* cpu_features.h: what the CPU running tela can do (SIMD instruction sets),
 * detected once at run time, so kernels built for several instruction sets
 * can be chosen per machine by one binary.
 *
 * The environment variable TELA_CPU caps what is reported, for testing and
 * benchmarking the slower paths on a fast machine: "scalar" hides every SIMD
 * set, "avx2" hides AVX-512 (and AVX-VNNI), "avx512" hides AMX, "native" or
 * unset reports what the CPU has. It is read once, at the first call.
 *
 * AMX (Intel's tile registers) counts when the CPU has it and the OS
 * enables its state in XCR0; a process must then still be granted the tile
 * data permission (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM)) before its first
 * tile instruction: tela_cpu_request_amx. */
#ifndef TELA_UTIL_CPU_FEATURES_H
#define TELA_UTIL_CPU_FEATURES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tela_cpu_features {
    /* x86-64 (each also means the OS saves the registers it needs) */
    bool avx2;
    bool fma;
    bool f16c;
    bool bmi2;
    bool avx_vnni;
    bool avx512f;
    bool avx512bw;
    bool avx512dq;
    bool avx512vl;
    bool avx512vnni;
    bool avx512bf16;
    bool amx_int8;  /* AMX tiles with the int8 products (TDPB*D), once permitted (below) */
    bool amx_bf16;  /* ... and the bf16 products (TDPBF16PS) */
    /* AArch64 */
    bool neon;
    bool dotprod;   /* SDOT/UDOT */
} tela_cpu_features;

/* The features of this CPU (after the TELA_CPU cap). Thread-safe; the
 * pointer stays valid for the life of the process. */
const tela_cpu_features *tela_cpu_get_features(void);

/* Asks the kernel, once, for the AMX tile data permission; true if AMX is
 * there (after the TELA_CPU cap) and granted. Thread-safe. */
bool tela_cpu_request_amx(void);

/* The detected features as a line for a person ("avx2 fma f16c avx512f ...",
 * or "none"); returns buf. */
const char *tela_cpu_features_string(char *buf, size_t cap);

#endif
