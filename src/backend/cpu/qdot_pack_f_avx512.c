/* qdot_pack_f_avx512.c: packed-layout kernels (see qdot.h) for float
 * weights (F16, BF16, F32) on AVX-512 F/BW/VL CPUs. Every function carries
 * its own target attribute, so the file compiles without -march=native.
 * Only AVX-512 F/BW/VL/DQ, F16C and FMA are used (no AVX512-FP16, no AMX):
 * Zen 4/5 and Ice Lake or later run it.
 *
 * Layout: a group is 16 consecutive rows; for each k it holds the 16 rows'
 * k-th elements side by side (F16/BF16: 32 bytes per k, F32: 64 bytes), so
 * a group of n elements is n * 32 (or n * 64) bytes, as many bytes as the
 * rows it holds (F16/BF16 rounded up to 64 bytes when n is odd, so every
 * group starts on a cache line). Rows past n_rows are zero.
 *
 * Order of arithmetic (the contract of qdot.h): out[c][r] is
 *   acc = 0; for k = 0 .. n-1: acc = fmaf(w[r][k], x[c][k], acc)
 * one lane of one register per output, so tile shapes, blocking, column
 * count and group range do not change a single bit.
 *
 * Kernels: a tile is G groups (16 rows each, one zmm of f32 per group and
 * k) times C activation columns. Per k it loads the G weight vectors and
 * does G * C FMAs, each with x[c][k] broadcast from memory; the G * C
 * accumulators live in registers (G = 8 for C <= 2 ... 2 for C >= 7, so
 * at least 8 independent FMA chains hide the FMA latency).
 *  - Up to 12 columns (decoding, small batches) stream the weights once,
 *    converting F16/BF16 on the fly and prefetching ahead: memory-bound.
 *  - More columns (prefill) are cache-blocked: a block of 16 groups x 512
 *    elements of k is converted once to f32 into a scratch buffer (512 KB,
 *    in L2; F32 weights are used in place), then 2-group x 12-column tiles
 *    sweep the columns over it, so the inner loop is 2 loads, 12
 *    broadcasts and 24 FMAs, no conversions (on Intel cores a vcvtph2ps
 *    takes FMA ports: converting in the tiles measured 5-14% slower when
 *    the data is in cache). The accumulators go through out between k
 *    ranges (a float stored and reloaded is exact), which keeps the
 *    element order. Each thread keeps its scratch between calls. */
#include "backend/cpu/qdot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT
#define NOINL static __attribute__((noinline)) TGT
/* Full unrolling of the constant-trip loops keeps the accumulators in
 * registers. clang 14 unrolls the tile template by a runtime count before
 * inlining it (its G, C are constants only after) unless told "full", and
 * then keeps the accumulators on the stack. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

enum { PF_F32 = 0, PF_F16 = 1, PF_BF16 = 2 };

#define PF_ROWS 16 /* rows per group */
#define PF_CT 12   /* columns per prefill tile */
#define PF_GMAX 8  /* groups per tile at most */
#define PF_ACC 24  /* accumulators per tile at most */
/* Prefill blocking: PF_KC elements of k (a 12-column activation panel is
 * then 24 KB) times PF_GB groups (a 512 KB f32 scratch, in L2). */
#ifndef PF_KC
#define PF_KC 512
#endif
#ifndef PF_GB
#define PF_GB 16
#endif
/* Tiles of up to 4 columns (decoding, narrow batches: memory-bound)
 * prefetch their weight streams this far ahead. */
#ifndef PF_AHEAD
#define PF_AHEAD 1024
#endif

/* Bytes of one element of a packed type. */
INL size_t esize(const int T) { return T == PF_F32 ? 4 : 2; }

/* The 16 rows' k-th weights of a group (p points at them) as f32. */
INL __m512 load_w(const uint8_t *p, const int T) {
    if (T == PF_F32) return _mm512_loadu_ps(p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (T == PF_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Lanes of the rows that exist among the 16 from row r0 on. */
INL __mmask16 row_mask(int64_t n_rows, int64_t r0) {
    const int64_t v = n_rows - r0;
    return v >= 16 ? (__mmask16)0xFFFF : v <= 0 ? (__mmask16)0 : (__mmask16)((1u << v) - 1);
}

/* ----------------------------------------------------------------- packing */

/* A group is n * 16 elements, rounded up to 64 bytes (for odd n with F16 /
 * BF16) so that every group starts on a cache line. */
static size_t group_bytes_2(int64_t n) { return ((size_t)n * PF_ROWS * 2 + 63) / 64 * 64; }
static size_t group_bytes_4(int64_t n) { return (size_t)n * PF_ROWS * 4; }

/* Transposes 16 rows of n elements of es bytes into the group layout. The
 * rows are read PF_PK elements at a time into a small buffer (they may sit
 * at any address), then written out k by k. */
#define PF_PK 64
static void pack_group(const uint8_t *w, size_t ws, int64_t rows, int64_t n, size_t es, uint8_t *dst) {
    uint8_t buf[PF_ROWS][PF_PK * 4];
    for (int64_t k0 = 0; k0 < n; k0 += PF_PK) {
        const int64_t kn = n - k0 < PF_PK ? n - k0 : PF_PK;
        for (int j = 0; j < PF_ROWS; j++) {
            if (j < rows) memcpy(buf[j], w + (size_t)j * ws + (size_t)k0 * es, (size_t)kn * es);
            else memset(buf[j], 0, (size_t)kn * es);
        }
        uint8_t *d = dst + (size_t)k0 * PF_ROWS * es;
        if (es == 2) {
            for (int64_t k = 0; k < kn; k++)
                for (int j = 0; j < PF_ROWS; j++) memcpy(d + (k * PF_ROWS + j) * 2, buf[j] + k * 2, 2);
        } else {
            for (int64_t k = 0; k < kn; k++)
                for (int j = 0; j < PF_ROWS; j++) memcpy(d + (k * PF_ROWS + j) * 4, buf[j] + k * 4, 4);
        }
    }
}

/* A whole group (16 rows, ws * 15 within int32) by gathers: for F32 one
 * gather of the 16 rows' element k; for 16-bit types one gather of the
 * 32-bit words holding elements k and k + 1, split into two vectors of
 * 16-bit values (a scalar step for the last element of an odd n). */
static TGT void pack_group_gather(const uint8_t *w, size_t ws, int64_t n, size_t es, uint8_t *dst) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)ws));
    if (es == 4) {
        for (int64_t k = 0; k < n; k++)
            _mm512_storeu_si512(dst + k * 64, _mm512_i32gather_epi32(idx, w + k * 4, 1));
        return;
    }
    int64_t k = 0;
    for (; k + 2 <= n; k += 2) {
        const __m512i v = _mm512_i32gather_epi32(idx, w + k * 2, 1);
        _mm256_storeu_si256((__m256i *)(dst + k * 32), _mm512_cvtepi32_epi16(v));
        _mm256_storeu_si256((__m256i *)(dst + k * 32 + 32), _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
    }
    for (; k < n; k++)
        for (int j = 0; j < PF_ROWS; j++) memcpy(dst + k * 32 + j * 2, w + (size_t)j * ws + (size_t)k * 2, 2);
}

static void pack_es(const void *w, size_t ws, int64_t n_rows, int64_t n, int64_t g0, int64_t g1, void *packed,
                    size_t es) {
    const size_t gbytes = es == 2 ? group_bytes_2(n) : group_bytes_4(n);
    for (int64_t g = g0; g < g1; g++) {
        const int64_t r0 = g * PF_ROWS;
        const int64_t rows = n_rows - r0 < PF_ROWS ? n_rows - r0 : PF_ROWS;
        const uint8_t *src = (const uint8_t *)w + (size_t)r0 * ws;
        uint8_t *dst = (uint8_t *)packed + (size_t)g * gbytes;
        if (rows == PF_ROWS && ws <= INT32_MAX / PF_ROWS) pack_group_gather(src, ws, n, es, dst);
        else pack_group(src, ws, rows, n, es, dst);
        memset(dst + (size_t)n * PF_ROWS * es, 0, gbytes - (size_t)n * PF_ROWS * es); /* the padding */
    }
}

static void pack_2(const void *w, size_t ws, int64_t n_rows, int64_t n, int64_t g0, int64_t g1, void *packed) {
    pack_es(w, ws, n_rows, n, g0, g1, packed, 2);
}
static void pack_4(const void *w, size_t ws, int64_t n_rows, int64_t n, int64_t g0, int64_t g1, void *packed) {
    pack_es(w, ws, n_rows, n, g0, g1, packed, 4);
}

/* ------------------------------------------------------------------- tiles */

/* Groups per tile for C columns: G * C >= 8 independent FMA chains (the
 * FMA latency is 4 cycles, two issue per cycle), and G * C accumulators +
 * G weight vectors + a broadcast within the 32 zmm registers. */
#define PF_G_OF(C) ((C) <= 2 ? 8 : (C) == 3 ? 6 : (C) <= 6 ? 4 : 2)

/* G groups times C columns over k in [0, kn). Group g's weights for k are
 * at w + g * gs + k * 16 * esize, for g < nv; groups from nv on (past the
 * range the caller owns) reread group nv - 1 and store nothing. Column c's
 * x[k] is at x + c * xs bytes + k floats. The accumulators start at 0
 * (first) or at the partial sums left in out; they are stored back for
 * the rows below n_rows (rows counts those from the tile's first row). */
INL void tile(const uint8_t *w, size_t gs, int nv, const uint8_t *xb, size_t xs, int64_t kn, float *out,
              int64_t os, int64_t rows, int first, const int T, const int G, const int C, const int P) {
    __m512 acc[PF_ACC]; /* acc[g * C + c] */
    __mmask16 m[PF_GMAX];
    const uint8_t *wg[PF_GMAX];
    const float *x[PF_CT];
    UNROLL for (int c = 0; c < C; c++) x[c] = (const float *)(xb + (size_t)c * xs);
    UNROLL for (int g = 0; g < G; g++) {
        wg[g] = w + (size_t)(g < nv ? g : nv - 1) * gs;
        m[g] = g < nv ? row_mask(rows, 16 * g) : 0;
        UNROLL for (int c = 0; c < C; c++)
            acc[g * C + c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m[g], out + c * os + 16 * g);
    }
    const size_t step = 16 * esize(T);
    for (int64_t k = 0; k < kn; k++) {
        __m512 wv[PF_GMAX];
        if (P && (k * step) % 64 == 0)
            UNROLL for (int g = 0; g < G; g++) _mm_prefetch((const char *)wg[g] + (size_t)k * step + P, _MM_HINT_T0);
        UNROLL for (int g = 0; g < G; g++) wv[g] = load_w(wg[g] + (size_t)k * step, T);
        UNROLL for (int c = 0; c < C; c++) {
            const __m512 b = _mm512_set1_ps(x[c][k]);
            UNROLL for (int g = 0; g < G; g++) acc[g * C + c] = _mm512_fmadd_ps(wv[g], b, acc[g * C + c]);
        }
    }
    UNROLL for (int g = 0; g < G; g++)
        UNROLL for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(out + c * os + 16 * g, m[g], acc[g * C + c]);
}

typedef void (*tile_fn)(const uint8_t *w, size_t gs, int nv, const uint8_t *x, size_t xs, int64_t kn, float *out,
                        int64_t os, int64_t rows, int first);

#define TILE(T, C)                                                                                                 \
    NOINL void tile_##T##_##C(const uint8_t *w, size_t gs, int nv, const uint8_t *x, size_t xs, int64_t kn,       \
                              float *out, int64_t os, int64_t rows, int first) {                                  \
        tile(w, gs, nv, x, xs, kn, out, os, rows, first, T, PF_G_OF(C), C, C <= 4 ? PF_AHEAD : 0);                \
    }
#define TILES(T)                                                                                                   \
    TILE(T, 1) TILE(T, 2) TILE(T, 3) TILE(T, 4) TILE(T, 5) TILE(T, 6) TILE(T, 7) TILE(T, 8) TILE(T, 9) TILE(T, 10) \
    TILE(T, 11) TILE(T, 12)
#define TILES_LIST(T)                                                                                              \
    {tile_##T##_1, tile_##T##_2, tile_##T##_3, tile_##T##_4, tile_##T##_5, tile_##T##_6, tile_##T##_7,            \
     tile_##T##_8, tile_##T##_9, tile_##T##_10, tile_##T##_11, tile_##T##_12}

TILES(PF_F32)
TILES(PF_F16)
TILES(PF_BF16)
/* tiles[T][C - 1]: PF_G_OF(C) groups x C columns on weights of type T */
static const tile_fn tiles[3][PF_CT] = {TILES_LIST(PF_F32), TILES_LIST(PF_F16), TILES_LIST(PF_BF16)};

/* ------------------------------------------------------------------- gemms */

/* Groups [g0, g1) of packed (type T, gbytes per group) -> f32 scratch for k
 * in [k0, k0 + kn): group i of the block at dst + i * kn * 16. */
INL void to_f32(const uint8_t *packed, size_t gbytes, int64_t g0, int64_t g1, int64_t k0, int64_t kn, float *dst,
                const int T) {
    const size_t ksz = 16 * esize(T);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *s = packed + (size_t)g * gbytes + (size_t)k0 * ksz;
        float *d = dst + (size_t)(g - g0) * (size_t)kn * 16;
        int64_t k = 0;
        for (; k + 4 <= kn; k += 4)
            UNROLL for (int u = 0; u < 4; u++) _mm512_store_ps(d + (k + u) * 16, load_w(s + (k + u) * ksz, T));
        for (; k < kn; k++) _mm512_store_ps(d + k * 16, load_w(s + k * ksz, T));
    }
}

/* Each thread keeps its f32 scratch from call to call (freed when the
 * thread exits): a fresh 512 KB buffer per call would come back from the
 * allocator as new pages, page faults and all, many times per matmul. The
 * buffer's first 64 bytes hold its size. */
static pthread_key_t g_scratch_key;
static int g_scratch_key_ok;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static void scratch_key_init(void) { g_scratch_key_ok = pthread_key_create(&g_scratch_key, free) == 0; }

static float *thread_scratch(size_t bytes) {
    pthread_once(&g_scratch_once, scratch_key_init);
    if (!g_scratch_key_ok || bytes == 0) return NULL;
    unsigned char *p = pthread_getspecific(g_scratch_key);
    size_t have = 0;
    if (p) memcpy(&have, p, sizeof have);
    if (have < bytes) {
        unsigned char *q = aligned_alloc(64, 64 + (bytes + 63) / 64 * 64);
        if (!q) return NULL;
        memcpy(q, &bytes, sizeof bytes);
        if (pthread_setspecific(g_scratch_key, q) != 0) {
            free(q);
            return NULL;
        }
        free(p);
        p = q;
    }
    return (float *)(p + 64);
}

INL void gemm_t(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                int64_t n_cols, int64_t n, float *out, int64_t os, const int T) {
    const int64_t n_groups = (n_rows + PF_ROWS - 1) / PF_ROWS;
    if (g1 > n_groups) g1 = n_groups;
    if (g0 >= g1 || n_cols <= 0) return;
    const uint8_t *pw = packed;
    const uint8_t *px = x;
    const size_t gbytes = T == PF_F32 ? group_bytes_4(n) : group_bytes_2(n);
    /* opt-in (TELA_AMX_FLOAT=1): many columns on the AMX bf16 tiles, near
     * but not the bits of the contract above */
    if (T != PF_F32 && (T == PF_F16 ? tela_qdot_amx_gemm_f16 : tela_qdot_amx_gemm_bf16)(packed, n_rows, g0, g1, x, xs,
                                                                                        n_cols, n, out, os))
        return;
    if (n <= 0) { /* empty dot products */
        for (int64_t c = 0; c < n_cols; c++)
            for (int64_t r = g0 * PF_ROWS; r < g1 * PF_ROWS && r < n_rows; r++) out[c * os + r] = 0.0f;
        return;
    }
    float *scratch = NULL;
    if (n_cols > PF_CT && T != PF_F32)
        scratch = thread_scratch((size_t)PF_GB * (size_t)(n < PF_KC ? n : PF_KC) * 64);
    if (n_cols <= PF_CT || (T != PF_F32 && !scratch)) {
        /* Decoding and small batches (or no memory for the scratch): one
         * pass over the weights per 12 columns, converted on the fly. */
        for (int64_t c0 = 0; c0 < n_cols; c0 += PF_CT) {
            const int64_t cn = n_cols - c0 < PF_CT ? n_cols - c0 : PF_CT, gt = PF_G_OF(cn);
            for (int64_t g = g0; g < g1; g += gt)
                tiles[T][cn - 1](pw + (size_t)g * gbytes, gbytes, (int)(g1 - g < gt ? g1 - g : gt),
                                 px + (size_t)c0 * xs, xs, n, out + c0 * os + g * 16, os, n_rows - g * 16, 1);
        }
        return;
    }
    const size_t ksz = 16 * esize(T); /* bytes per k of a group */
    for (int64_t b0 = g0; b0 < g1; b0 += PF_GB) {
        const int64_t b1 = g1 - b0 < PF_GB ? g1 : b0 + PF_GB;
        for (int64_t k0 = 0; k0 < n; k0 += PF_KC) {
            const int64_t kn = n - k0 < PF_KC ? n - k0 : PF_KC;
            const uint8_t *wb = pw + (size_t)b0 * gbytes + (size_t)k0 * ksz; /* F32: in place */
            size_t gs = gbytes;
            if (T != PF_F32) {
                to_f32(pw, gbytes, b0, b1, k0, kn, scratch, T);
                wb = (const uint8_t *)scratch;
                gs = (size_t)kn * 64;
            }
            for (int64_t c0 = 0; c0 < n_cols; c0 += PF_CT) {
                const int64_t cn = n_cols - c0 < PF_CT ? n_cols - c0 : PF_CT, gt = PF_G_OF(cn);
                const uint8_t *xc = px + (size_t)c0 * xs + (size_t)k0 * 4;
                for (int64_t g = b0; g < b1; g += gt)
                    tiles[PF_F32][cn - 1](wb + (size_t)(g - b0) * gs, gs, (int)(b1 - g < gt ? b1 - g : gt), xc, xs,
                                          kn, out + c0 * os + g * 16, os, n_rows - g * 16, k0 == 0);
            }
        }
    }
}

static TGT void gemm_f16(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                         int64_t n_cols, int64_t n, float *out, int64_t os) {
    gemm_t(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os, PF_F16);
}
static TGT void gemm_bf16(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                          int64_t n_cols, int64_t n, float *out, int64_t os) {
    gemm_t(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os, PF_BF16);
}
static TGT void gemm_f32(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                         int64_t n_cols, int64_t n, float *out, int64_t os) {
    gemm_t(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os, PF_F32);
}

void tela_qdot_fill_packed_f_avx512(tela_qdot_isa_table *t) {
    t->packing[TELA_TYPE_F16] = (tela_qdot_packing){PF_ROWS, group_bytes_2, pack_2, gemm_f16};
    t->packing[TELA_TYPE_BF16] = (tela_qdot_packing){PF_ROWS, group_bytes_2, pack_2, gemm_bf16};
    t->packing[TELA_TYPE_F32] = (tela_qdot_packing){PF_ROWS, group_bytes_4, pack_4, gemm_f32};
}

#endif /* __x86_64__ */
