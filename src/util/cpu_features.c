/* cpu_features.c: run-time detection of SIMD instruction sets: CPUID and
 * XGETBV on x86-64, the auxiliary vector on AArch64/Linux. */
#include "util/cpu_features.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

static tela_cpu_features g_features;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* XCR0: which register files the OS saves on a context switch. An
 * instruction set is usable only if the CPU has it AND the OS saves its
 * registers (YMM for AVX; opmask and both ZMM halves for AVX-512). */
static unsigned long long read_xcr0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

static void detect(tela_cpu_features *f) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) return;
    const unsigned long long xcr0 = read_xcr0();
    const bool ymm_ok = (xcr0 & 0x6) == 0x6;
    const bool zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0;
    if (!ymm_ok) return;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;

    unsigned int max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned int max_sub7 = a;
    f->avx2 = (b >> 5) & 1;
    f->bmi2 = (b >> 8) & 1;
    if (zmm_ok) {
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512vnni = (c >> 11) & 1;
    }
    /* AMX: CPUID.7.0:EDX bit 24 (tiles), 25 (int8), 22 (bf16); XCR0 bits
     * 17-18 (tile configuration and data). The per-process permission is
     * asked for later, by its first user (tela_cpu_request_amx). */
    const bool amx_tile = (d >> 24) & 1, amx_int8 = (d >> 25) & 1, amx_bf16 = (d >> 22) & 1;
    if (max_sub7 >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        f->avx_vnni = (a >> 4) & 1;
        if (zmm_ok) f->avx512bf16 = (a >> 5) & 1;
    }
    if (zmm_ok && amx_tile && (amx_int8 || amx_bf16) && (xcr0 & 0x60000) == 0x60000) {
        f->amx_int8 = amx_int8;
        f->amx_bf16 = amx_bf16;
    }
}
#elif defined(__aarch64__)
static void detect(tela_cpu_features *f) {
    f->neon = true; /* Advanced SIMD is mandatory on AArch64 */
#if defined(__linux__) && defined(HWCAP_ASIMDDP)
    f->dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
}
#else
static void detect(tela_cpu_features *f) { (void)f; }
#endif

/* Applies the TELA_CPU cap (see the header). An unknown value is reported
 * once on stderr and ignored, so a typo does not silently change speed. */
static void apply_cap(tela_cpu_features *f) {
    const char *cap = getenv("TELA_CPU");
    if (!cap || !*cap || !strcmp(cap, "native")) return;
    if (!strcmp(cap, "avx512")) {
        f->amx_int8 = f->amx_bf16 = false;
    } else if (!strcmp(cap, "scalar")) {
        memset(f, 0, sizeof *f);
    } else if (!strcmp(cap, "avx2")) {
        f->avx_vnni = f->avx512f = f->avx512bw = f->avx512dq = false;
        f->avx512vl = f->avx512vnni = f->avx512bf16 = false;
        f->amx_int8 = f->amx_bf16 = false;
    } else {
        fprintf(stderr, "tela: ignoring TELA_CPU=%s (expected scalar, avx2, avx512 or native)\n", cap);
    }
}

static void init_features(void) {
    tela_cpu_features f;
    memset(&f, 0, sizeof f);
    detect(&f);
    apply_cap(&f);
    g_features = f;
}

const tela_cpu_features *tela_cpu_get_features(void) {
    pthread_once(&g_once, init_features);
    return &g_features;
}

/* Asks Linux for the AMX tile data permission (XFEATURE_XTILEDATA = 18)
 * for the whole process; granted once, it stays. Asked only by a user of
 * the tiles: the permission makes every signal frame of the process
 * larger (by the 8 KB of tile data), which a small alternate signal stack
 * set up later could not hold. */
static bool g_amx_granted;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

static void request_amx(void) {
#if defined(__x86_64__) && defined(__linux__) && defined(SYS_arch_prctl)
    const tela_cpu_features *f = tela_cpu_get_features();
    if (f->amx_int8 || f->amx_bf16) g_amx_granted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18) == 0;
#endif
}

bool tela_cpu_request_amx(void) {
    pthread_once(&g_amx_once, request_amx);
    return g_amx_granted;
}

const char *tela_cpu_features_string(char *buf, size_t cap) {
    const tela_cpu_features *f = tela_cpu_get_features();
    static const struct { const char *name; size_t off; } names[] = {
        {"avx2", offsetof(tela_cpu_features, avx2)},
        {"fma", offsetof(tela_cpu_features, fma)},
        {"f16c", offsetof(tela_cpu_features, f16c)},
        {"bmi2", offsetof(tela_cpu_features, bmi2)},
        {"avx_vnni", offsetof(tela_cpu_features, avx_vnni)},
        {"avx512f", offsetof(tela_cpu_features, avx512f)},
        {"avx512bw", offsetof(tela_cpu_features, avx512bw)},
        {"avx512dq", offsetof(tela_cpu_features, avx512dq)},
        {"avx512vl", offsetof(tela_cpu_features, avx512vl)},
        {"avx512vnni", offsetof(tela_cpu_features, avx512vnni)},
        {"avx512bf16", offsetof(tela_cpu_features, avx512bf16)},
        {"amx_int8", offsetof(tela_cpu_features, amx_int8)},
        {"amx_bf16", offsetof(tela_cpu_features, amx_bf16)},
        {"neon", offsetof(tela_cpu_features, neon)},
        {"dotprod", offsetof(tela_cpu_features, dotprod)},
    };
    if (cap == 0) return buf;
    buf[0] = '\0';
    size_t len = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        bool on;
        memcpy(&on, (const char *)f + names[i].off, sizeof on);
        if (!on) continue;
        int w = snprintf(buf + len, cap - len, "%s%s", len ? " " : "", names[i].name);
        if (w < 0 || (size_t)w >= cap - len) break;
        len += (size_t)w;
    }
    if (len == 0) snprintf(buf, cap, "none");
    return buf;
}
