/* qdot_pack_amx.c: Intel AMX int8 tile products for the packed gemms of
 * Q4_K, Q6_K (the layout of qdot_pack_k.h), Q8_0 and Q4_0 (that of
 * qdot_pack_q8_avx512.c), used for gemms of many activation columns:
 * prompt evaluation.
 *
 * An AMX tile product TDPBSUD C += A B takes A as 16 rows of signed bytes
 * (here: 16 activation columns, 64 of their Q8 levels each) and B as 16
 * rows of 16 x 4 unsigned bytes (here: 4 consecutive weight levels of each
 * of the group's 16 rows, the packed layout's vectors), and adds to C, 16 x
 * 16 int32, every column's dot product with every row: 16 x 16 x 64
 * multiply-adds in one instruction, where VPDPBUSD does 16 x 4.
 *
 * K-quants ("Q4_K and Q6_K" below): the sub-block scales are multiplied
 * into B (low and high bytes of level x scale as two B operands), so a
 * super-block's products run at full depth into C and one C pair gives its
 * exact integer dot product; Q4_K's mins are a third product. Q8_0/Q4_0:
 * one product per 32-element block (made signed when unpacked: TDPBSSD),
 * four blocks at a time, their float step per block as in the VNNI tiles.
 * F16/BF16 weights have their own, opt-in route on the bf16 tiles (near
 * f32, not the same bits: "F16, BF16" below).
 *
 * Results are the VNNI tiles' (and so the scalar vec_dot's) bit for bit:
 * every integer sum is exact in int32 and the float steps are the VNNI
 * tiles' expressions, lane for lane.
 *
 * Work is a loop over column panels (kept in L2), the thread's groups, and
 * tiles of 16 columns; each group's weights are unpacked into tile-ready
 * bytes once per panel (the K-quants a super-block at a time, kept in L1).
 * The instructions are written as inline assembly (binutils knows them; no
 * compiler flag or intrinsic header needed). */
#include "backend/cpu/qdot.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "util/cpu_features.h"

/* Which types take the tiles, where the CPU and OS allow them: by default
 * the K-quants (Q4_K, Q6_K), whose tiles ran the one-thread gemm at
 * 1.1-1.8x the VNNI tiles' rate on a Xeon with AMX, and the Llama-1B
 * Q4_K_M pp512 at 1.4-1.6x (docs/BENCHMARKS.md, 2026-12-06); Q8_0 and
 * Q4_0 stay on the VNNI tiles, which their tiles did not beat there.
 * TELA_AMX=1 puts every type on the tiles, TELA_AMX=0 none;
 * tela_qdot_amx_allow sets all or none (tests, benchmarks). Every route
 * gives the same bits. 0: TELA_AMX not read yet, 1: none, 2: all, 3: the
 * K-quants. */
static atomic_int g_amx_state;

static int amx_state(void) {
    int v = atomic_load(&g_amx_state);
    if (!v) {
        const char *e = getenv("TELA_AMX");
        v = e && e[0] == '1' ? 2 : e && e[0] == '0' ? 1 : 3;
        atomic_store(&g_amx_state, v);
    }
    return v;
}

/* TELA_AMX_FLOAT's switch (opt-in: 0 unread, 1 off, 2 on). */
static bool env_on(atomic_int *state, const char *name) {
    int v = atomic_load(state);
    if (!v) {
        const char *e = getenv(name);
        v = e && e[0] == '1' ? 2 : 1;
        atomic_store(state, v);
    }
    return v == 2;
}

void tela_qdot_amx_allow(bool allow) { atomic_store(&g_amx_state, allow ? 2 : 1); }

static bool amx_usable(void) { return tela_cpu_get_features()->amx_int8 && tela_cpu_request_amx(); }

bool tela_qdot_amx_active(void) { return amx_state() != 1 && amx_usable(); }

bool tela_qdot_amx_q8_active(void) { return amx_state() == 2 && amx_usable(); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <string.h>

#include "backend/cpu/qdot_pack_k.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

/* The tile configuration (palette 1): bytes per row and rows of tmm0-7. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* The instructions (tests/test_qdot_amx_model.c defines TELA_AMX_MODEL and
 * a scalar model of each instead). */
#ifndef TELA_AMX_MODEL
#define AMX_LOAD_CONFIG(cfg) __asm__ volatile("ldtilecfg %0" ::"m"(*(cfg)) : "memory")
#define AMX_RELEASE() __asm__ volatile("tilerelease" ::: "memory")
#define AMX_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define AMX_LOAD(t, p, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"((const void *)(p)), "r"((long)(stride)) : "memory")
#define AMX_STORE(t, p, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"((void *)(p)), "r"((long)(stride)) : "memory")
/* tmm c += tmm a (signed bytes) . tmm b (unsigned bytes, or signed) */
#define AMX_DPBSUD(c, a, b) __asm__ volatile("tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define AMX_DPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#endif

/* C tiles of m columns x 16 rows (int32), A of m columns x k bytes, B of
 * k / 4 rows x 64 bytes. */
static void amx_configure(int m, int k) {
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) cfg.rows[t] = (uint8_t)m, cfg.colsb[t] = 64;
    for (int t = 4; t < 6; t++) cfg.rows[t] = (uint8_t)m, cfg.colsb[t] = (uint16_t)k;
    for (int t = 6; t < 8; t++) cfg.rows[t] = (uint8_t)(k / 4), cfg.colsb[t] = 64;
    AMX_LOAD_CONFIG(&cfg);
}

static inline float rd_f32(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }

/* Four products (OP: AMX_DPBSUD or AMX_DPBSSD) into tmm0-3, sub-blocks at A
 * offsets a0 + i * astep and B offsets b0 + i * bstep, then tmm0-3 stored
 * to c[0..3] (16 x 16 int32 each, rows past m not written). */
#define AMX_FOUR(OP, xa, xs, a0, astep, ub, b0, bstep, c)                              \
    do {                                                                                \
        AMX_ZERO(0);                                                                    \
        AMX_ZERO(1);                                                                    \
        AMX_ZERO(2);                                                                    \
        AMX_ZERO(3);                                                                    \
        AMX_LOAD(4, (xa) + (a0), xs);                                                   \
        AMX_LOAD(6, (ub) + (b0), 64);                                                   \
        OP(0, 4, 6);                                                                    \
        AMX_LOAD(5, (xa) + (a0) + (astep), xs);                                         \
        AMX_LOAD(7, (ub) + (b0) + (bstep), 64);                                         \
        OP(1, 5, 7);                                                                    \
        AMX_LOAD(4, (xa) + (a0) + 2 * (astep), xs);                                     \
        AMX_LOAD(6, (ub) + (b0) + 2 * (bstep), 64);                                     \
        OP(2, 4, 6);                                                                    \
        AMX_LOAD(5, (xa) + (a0) + 3 * (astep), xs);                                     \
        AMX_LOAD(7, (ub) + (b0) + 3 * (bstep), 64);                                     \
        OP(3, 5, 7);                                                                    \
        AMX_STORE(0, (c)[0], 64);                                                       \
        AMX_STORE(1, (c)[1], 64);                                                       \
        AMX_STORE(2, (c)[2], 64);                                                       \
        AMX_STORE(3, (c)[3], 64);                                                       \
    } while (0)

/* Stores a group's 16 results for one column, only rows < valid. */
static inline TGT void store_rows(float *out, __m512 v, int64_t valid) {
    if (valid >= TELA_PK_ROWS)
        _mm512_storeu_ps(out, v);
    else
        _mm512_mask_storeu_ps(out, (__mmask16)((1u << valid) - 1), v);
}

/* Columns per panel: about 1 MB of Q8_K rows (they stay in L2 while the
 * thread's groups pass over them), a multiple of 16. */
static int64_t panel_cols(size_t xs) {
    int64_t c = (int64_t)(((size_t)1 << 20) / (xs ? xs : 1)) / 16 * 16;
    return c < 16 ? 16 : c;
}

/* --------------------------------------------------------- Q4_K and Q6_K */

/* The K-quants' sub-blocks (32 elements for Q4_K, 16 for Q6_K) each have a
 * scale per row, so a product over one sub-block at a time would leave a
 * C tile per sub-block for the vector units to scale and add (the first
 * form of these tiles: 8 or 16 tile stores and ~45 vector instructions a
 * column and super-block, no faster than the VNNI tiles on a Xeon). Here
 * the scales go into B instead: each weight level times its sub-block's
 * scale (Q4_K: q * sc <= 63 * 15 = 945; Q6_K: (q - 32) * sc, |.| <= 4096)
 * is split into a low byte (unsigned) and a high byte (unsigned for Q4_K,
 * signed for Q6_K), two B operands over the same 64 activation bytes. A
 * super-block's products then add up in int32 C tiles over all of its 256
 * elements, 64 at a time (the full depth of a product), and its integer
 * dot product is C_lo + 256 C_hi: sum_k a_k sc_k q_k exactly, the integer
 * the VNNI tiles form (|a| <= 127: below 2^31). Q4_K's mins term sum_j
 * m_j sum_{k in j} a_k is a third product, with B = each element's
 * sub-block min, in place of the activations' block sums. The float step
 * per super-block is then the VNNI tile's, so the bits are the same.
 *
 * Loop order (amx_k_gemm): for each group, super-block by super-block,
 * the super-block is unpacked once per panel (12 KB, kept in L1) and every
 * 16-column tile of the panel takes its products against it, adding its
 * float step into the column's 16 row sums, kept in a panel buffer. */

/* One unpacked Q4_K super-block: for K step p (elements 64 p ..), B's 16
 * rows of 64 bytes (row r: elements 64 p + 4 r .. + 3 of the 16 weight
 * rows, 4 bytes a row) at 1024 p in each of LO, HI, MN; d and dmin as
 * floats. */
enum { U4_LO = 0, U4_HI = 4096, U4_MN = 8192, U4_D = 12288, U4_DMIN = 12352, U4_SB = 12416 };

/* Levels l (bytes, 4 of a row in each 32-bit lane) times the row's scale s
 * (in both 16-bit halves of its lane): the products' low bytes to lo, their
 * high bytes to hi. Even and odd bytes are multiplied as 16-bit words. */
static inline TGT void scaled_levels(__m512i l, __m512i s, uint8_t *lo, uint8_t *hi) {
    const __m512i m8 = _mm512_set1_epi16(0x00FF);
    const __m512i pe = _mm512_mullo_epi16(_mm512_and_si512(l, m8), s);
    const __m512i po = _mm512_mullo_epi16(_mm512_srli_epi16(l, 8), s);
    _mm512_store_si512(lo, _mm512_or_si512(_mm512_and_si512(pe, m8), _mm512_slli_epi16(po, 8)));
    _mm512_store_si512(hi, _mm512_or_si512(_mm512_srli_epi16(pe, 8), _mm512_andnot_si512(m8, po)));
}

/* 16 bytes (one a row) -> each row's value in both 16-bit halves of its lane */
static inline TGT __m512i row_words(const uint8_t *p) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm512_or_si512(v, _mm512_slli_epi32(v, 16));
}

static TGT void q4_K_unpack_sb(const uint8_t *w, uint8_t *ub) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    UNROLL for (int c4 = 0; c4 < 4; c4++) {
        /* sub-blocks 2 c4 (low nibbles) and 2 c4 + 1 (high nibbles) */
        const __m512i s0 = row_words(w + Q4K_SC + 16 * (2 * c4)), s1 = row_words(w + Q4K_SC + 16 * (2 * c4 + 1));
        const __m512i m0 = _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(w + Q4K_M + 32 * c4))),
                                              _mm512_set1_epi32(0x01010101));
        const __m512i m1 = _mm512_mullo_epi32(
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(w + Q4K_M + 32 * c4 + 16))), _mm512_set1_epi32(0x01010101));
        UNROLL for (int s = 0; s < 8; s++) {
            const __m512i v = _mm512_loadu_si512(w + Q4K_Q + (c4 * 8 + s) * 64);
            const size_t o0 = (size_t)(2 * c4) * 512 + (size_t)s * 64, o1 = o0 + 512;
            scaled_levels(_mm512_and_si512(v, m4), s0, ub + U4_LO + o0, ub + U4_HI + o0);
            scaled_levels(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), s1, ub + U4_LO + o1, ub + U4_HI + o1);
            _mm512_store_si512(ub + U4_MN + o0, m0);
            _mm512_store_si512(ub + U4_MN + o1, m1);
        }
    }
    _mm512_store_ps(ub + U4_D, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + Q4K_D))));
    _mm512_store_ps(ub + U4_DMIN, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + Q4K_DMIN))));
}

/* The tiles: C in tmm0-2 (Q4_K: lo, hi, mins; Q6_K: lo, hi), A in tmm3-4
 * (alternating between K steps), B in tmm5-7. */
static void amx_k_configure(int m) {
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 5; t++) cfg.rows[t] = (uint8_t)m, cfg.colsb[t] = 64;
    for (int t = 5; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    AMX_LOAD_CONFIG(&cfg);
}

/* K step p of one super-block: A (tmm3 or tmm4) from the columns' bytes
 * 64 p .., the B operands from ub + 1024 p, the products into tmm0-2. */
#define Q4K_STEP(A, p)                                     \
    do {                                                   \
        AMX_LOAD(A, xa + 64 * (p), xs);                    \
        AMX_LOAD(5, ub + U4_LO + 1024 * (p), 64);          \
        AMX_LOAD(6, ub + U4_HI + 1024 * (p), 64);          \
        AMX_LOAD(7, ub + U4_MN + 1024 * (p), 64);          \
        AMX_DPBSUD(0, A, 5);                               \
        AMX_DPBSUD(1, A, 6);                               \
        AMX_DPBSUD(2, A, 7);                               \
    } while (0)

/* m (<= 16) columns at x (their super-block, xs apart) against one
 * unpacked super-block: f (16 row sums a column) += the float step. */
static TGT void q4_K_amx_sb(const uint8_t *ub, const uint8_t *x, size_t xs, int m, float *f) {
    _Alignas(64) int32_t c[3][16][16];
    const uint8_t *xa = x + X_QS;
    AMX_ZERO(0);
    AMX_ZERO(1);
    AMX_ZERO(2);
    Q4K_STEP(3, 0);
    Q4K_STEP(4, 1);
    Q4K_STEP(3, 2);
    Q4K_STEP(4, 3);
    AMX_STORE(0, c[0], 64);
    AMX_STORE(1, c[1], 64);
    AMX_STORE(2, c[2], 64);
    const __m512 d = _mm512_load_ps(ub + U4_D), dmin = _mm512_load_ps(ub + U4_DMIN);
    for (int i = 0; i < m; i++) {
        const __m512i tot = _mm512_add_epi32(_mm512_load_si512(c[0][i]), _mm512_slli_epi32(_mm512_load_si512(c[1][i]), 8));
        /* the VNNI tile's float step */
        const __m512 dx = _mm512_set1_ps(rd_f32(x + (size_t)i * xs));
        const __m512 a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(d, dx), _mm512_load_ps(f + 16 * i));
        _mm512_store_ps(f + 16 * i, _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[2][i])), _mm512_mul_ps(dmin, dx), a));
    }
}

/* One unpacked Q6_K super-block: B operands as for Q4_K (LO unsigned, HI
 * signed bytes of (q - 32) sc), d as floats. */
enum { U6_LO = 0, U6_HI = 4096, U6_D = 8192, U6_SB = 8256 };

static TGT void q6_K_unpack_sb(const uint8_t *w, uint8_t *ub) {
    const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i m8 = _mm512_set1_epi16(0x00FF), k32 = _mm512_set1_epi16(32);
    __m512i sc[16];
    UNROLL for (int q = 0; q < 8; q++) {
        /* sub-blocks 2 q and 2 q + 1: a 16-bit pair a row */
        const __m512i pair = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w + Q6K_SC + q * 32)));
        const __m512i e = _mm512_slli_epi32(pair, 16), o = _mm512_srli_epi32(pair, 16);
        sc[2 * q] = _mm512_or_si512(e, _mm512_srli_epi32(e, 16));
        sc[2 * q + 1] = _mm512_or_si512(o, _mm512_slli_epi32(o, 16));
    }
    for (int hh = 0; hh < 2; hh++)
        UNROLL for (int gq = 0; gq < 4; gq++) UNROLL for (int s = 0; s < 8; s++) {
            /* elements 128 hh + 32 gq + 4 s ..: sub-block 8 hh + 2 gq + s / 4 */
            const __m512i l = tela_pk_q6_levels(w, hh, gq, s, m0f, m30), s16 = sc[8 * hh + 2 * gq + s / 4];
            const __m512i pe = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_and_si512(l, m8), k32), s16);
            const __m512i po = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_srli_epi16(l, 8), k32), s16);
            const size_t o = (size_t)(hh * 4 + gq) * 512 + (size_t)s * 64;
            _mm512_store_si512(ub + U6_LO + o, _mm512_or_si512(_mm512_and_si512(pe, m8), _mm512_slli_epi16(po, 8)));
            _mm512_store_si512(ub + U6_HI + o, _mm512_or_si512(_mm512_srli_epi16(pe, 8), _mm512_andnot_si512(m8, po)));
        }
    _mm512_store_si512(ub + U6_D, _mm512_loadu_si512(w + Q6K_D));
}

#define Q6K_STEP(A, p)                                     \
    do {                                                   \
        AMX_LOAD(A, xa + 64 * (p), xs);                    \
        AMX_LOAD(5, ub + U6_LO + 1024 * (p), 64);          \
        AMX_LOAD(6, ub + U6_HI + 1024 * (p), 64);          \
        AMX_DPBSUD(0, A, 5);                               \
        AMX_DPBSSD(1, A, 6);                               \
    } while (0)

static TGT void q6_K_amx_sb(const uint8_t *ub, const uint8_t *x, size_t xs, int m, float *f) {
    _Alignas(64) int32_t c[2][16][16];
    const uint8_t *xa = x + X_QS;
    AMX_ZERO(0);
    AMX_ZERO(1);
    Q6K_STEP(3, 0);
    Q6K_STEP(4, 1);
    Q6K_STEP(3, 2);
    Q6K_STEP(4, 3);
    AMX_STORE(0, c[0], 64);
    AMX_STORE(1, c[1], 64);
    const __m512 d = _mm512_load_ps(ub + U6_D);
    for (int i = 0; i < m; i++) {
        const __m512i isum = _mm512_add_epi32(_mm512_load_si512(c[0][i]), _mm512_slli_epi32(_mm512_load_si512(c[1][i]), 8));
        /* the VNNI tile's float step */
        const __m512 dx = _mm512_set1_ps(rd_f32(x + (size_t)i * xs));
        _mm512_store_ps(f + 16 * i, _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dx), _mm512_load_ps(f + 16 * i)));
    }
}

typedef struct {
    size_t sb_bytes; /* a packed super-block of a group */
    void (*unpack_sb)(const uint8_t *w, uint8_t *ub);
    void (*sb)(const uint8_t *ub, const uint8_t *x, size_t xs, int m, float *f);
} amx_k_kind;

/* Groups [g0, g1) x all columns of a K-quant (n / 256 super-blocks). */
static TGT bool amx_k_gemm(const amx_k_kind *kd, const void *packed, int64_t n_rows, int64_t g0, int64_t g1,
                           const void *vx, size_t xs, int64_t n_cols, int64_t n, float *out, int64_t os) {
    if (n_cols < TELA_AMX_MIN_COLS || g1 <= g0 || n < 256 || !tela_qdot_amx_active()) return false;
    const int64_t nsb = n / 256;
    int64_t pc = panel_cols(xs);
    if (pc > n_cols) pc = n_cols;
    uint8_t *ub = aligned_alloc(64, U4_SB);
    float *f = aligned_alloc(64, sizeof(float) * 16 * (size_t)((pc + 15) / 16 * 16));
    if (!ub || !f) {
        free(ub);
        free(f);
        return false;
    }
    const uint8_t *pw = packed, *x = vx;
    int cur = 16;
    amx_k_configure(cur);
    for (int64_t p0 = 0; p0 < n_cols; p0 += pc) {
        const int64_t p1 = p0 + pc < n_cols ? p0 + pc : n_cols;
        for (int64_t g = g0; g < g1; g++) {
            const uint8_t *grp = pw + (size_t)g * (size_t)nsb * kd->sb_bytes;
            memset(f, 0, sizeof(float) * 16 * (size_t)(p1 - p0));
            for (int64_t b = 0; b < nsb; b++) {
                kd->unpack_sb(grp + (size_t)b * kd->sb_bytes, ub);
                for (int64_t c0 = p0; c0 < p1; c0 += 16) {
                    const int m = p1 - c0 < 16 ? (int)(p1 - c0) : 16;
                    if (m != cur) amx_k_configure(cur = m);
                    kd->sb(ub, x + (size_t)c0 * xs + (size_t)b * X_BYTES, xs, m, f + 16 * (c0 - p0));
                }
            }
            for (int64_t c = p0; c < p1; c++)
                store_rows(out + c * os + g * TELA_PK_ROWS, _mm512_load_ps(f + 16 * (c - p0)), n_rows - g * TELA_PK_ROWS);
        }
    }
    AMX_RELEASE();
    free(ub);
    free(f);
    return true;
}

/* ------------------------------------------------------------ Q8_0, Q4_0 */

/* The packed Q8_0/Q4_0 group (qdot_pack_q8_avx512.c): [16 fp16 scales a
 * block, 32 bytes, the area padded to 64][levels: Q8_0 512 bytes a block,
 * w + 128; Q4_0 256, nibbles w + 8]. Unpacked for the tiles, a block is
 * its levels as signed bytes in B's 8 rows (elements 4 s .. 4 s + 3 of
 * every row in row s) and its 16 row scales as floats. The activations
 * are Q8_0 blocks (fp16 d, 32 levels). */
enum { U8_LV = 0, U8_DW = 512, U8_BLK = 576 };
#define Q8_X_BLOCK 34

static TGT void q8_unpack(const uint8_t *grp, int64_t nb, int q4, uint8_t *ub) {
    const size_t sb = ((size_t)nb * 32 + 63) / 64 * 64, lb = q4 ? 256 : 512;
    const __m512i flip = _mm512_set1_epi8((char)0x80), m4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
    for (int64_t b = 0; b < nb; b++, ub += U8_BLK) {
        const uint8_t *lv = grp + sb + (size_t)b * lb;
        if (q4) {
            UNROLL for (int j = 0; j < 4; j++) {
                const __m512i v = _mm512_loadu_si512(lv + 64 * j);
                _mm512_store_si512(ub + U8_LV + 64 * j, _mm512_sub_epi8(_mm512_and_si512(v, m4), eight));
                _mm512_store_si512(ub + U8_LV + 256 + 64 * j,
                                   _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), eight));
            }
        } else {
            UNROLL for (int j = 0; j < 8; j++)
                _mm512_store_si512(ub + U8_LV + 64 * j, _mm512_xor_si512(_mm512_loadu_si512(lv + 64 * j), flip));
        }
        _mm512_store_ps(ub + U8_DW, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(grp + 32 * b))));
    }
}

/* m columns at x against one unpacked group; dx: the columns' block scales
 * as floats (column i's block b at dx[i * nb + b]). The packed tiles'
 * float steps: acc = fma((float)isum_b, d_w * d_x, acc), block by block. */
static TGT void q8_amx_tile(const uint8_t *ub, int64_t nb, const uint8_t *x, size_t xs, const float *dx, int m,
                            __m512 *f) {
    _Alignas(64) int32_t c[4][16][16];
    for (int i = 0; i < m; i++) f[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 4) {
        const uint8_t *xa = x + (size_t)b * Q8_X_BLOCK + 2, *u = ub + (size_t)b * U8_BLK;
        const int nq = nb - b < 4 ? (int)(nb - b) : 4;
        if (nq == 4) {
            AMX_FOUR(AMX_DPBSSD, xa, xs, 0, Q8_X_BLOCK, u, U8_LV, U8_BLK, c);
        } else { /* the last blocks, one product each */
            for (int j = 0; j < nq; j++) {
                AMX_ZERO(0);
                AMX_LOAD(4, xa + j * Q8_X_BLOCK, xs);
                AMX_LOAD(6, u + (size_t)j * U8_BLK + U8_LV, 64);
                AMX_DPBSSD(0, 4, 6);
                AMX_STORE(0, c[j], 64);
            }
        }
        __m512 dw[4];
        for (int j = 0; j < nq; j++) dw[j] = _mm512_load_ps(u + (size_t)j * U8_BLK + U8_DW);
        for (int i = 0; i < m; i++) {
            __m512 a = f[i];
            for (int j = 0; j < nq; j++)
                a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[j][i])),
                                    _mm512_mul_ps(dw[j], _mm512_set1_ps(dx[(size_t)i * nb + b + j])), a);
            f[i] = a;
        }
    }
}

static TGT void q8_0_unpack(const uint8_t *grp, int64_t nb, uint8_t *ub) { q8_unpack(grp, nb, 0, ub); }
static TGT void q4_0_unpack(const uint8_t *grp, int64_t nb, uint8_t *ub) { q8_unpack(grp, nb, 1, ub); }

/* ------------------------------------------- F16, BF16 (opt-in: float) */

/* Float weights on the bf16 tiles (TDPBF16PS: pairs of bf16 products added
 * into f32). Each weight is split exactly into bf16 hi + lo (an f16 has 11
 * significant bits, a bf16 8: the rest fits in lo; a bf16 weight is its own
 * hi), each activation into a rounded hi + lo (16 bits), and three
 * products are added: w_hi x_hi + w_hi x_lo + w_lo x_hi (BF16 weights:
 * two). What is dropped (w_lo x_lo, the activation's rounding) is below
 * 2^-16 of each product, so the results are near f32 products, but they
 * are not the packed float tiles' bits: the float contract of qdot.h
 * (fmaf element after element, whatever the column count) does not hold,
 * and prefill would differ from decode in the last bits. Hence opt-in:
 * TELA_AMX_FLOAT=1. */
#ifndef TELA_AMX_MODEL
#define AMX_DPBF16PS(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#endif

static atomic_int g_float_state; /* as g_amx_state, for TELA_AMX_FLOAT */

void tela_qdot_amx_float_allow(bool on) { atomic_store(&g_float_state, on ? 2 : 1); }

bool tela_qdot_amx_float_active(void) {
    return tela_cpu_get_features()->amx_bf16 && env_on(&g_float_state, "TELA_AMX_FLOAT") && tela_cpu_request_amx();
}

/* 16 lanes of f32 rounded to bf16 (to nearest, ties to even): the bf16 is
 * the high half of each lane of the result. */
static inline TGT __m512i bf16_round(__m512 f) {
    const __m512i b = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
}

/* f = hi + lo (+ lo's rounding): the bf16 bits of hi and lo in the low
 * half of each lane. */
static inline TGT void bf16_split(__m512 f, __m512i *hi, __m512i *lo) {
    const __m512i r = bf16_round(f);
    const __m512 h = _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xFFFF0000u)));
    *hi = _mm512_srli_epi32(r, 16);
    *lo = _mm512_srli_epi32(bf16_round(_mm512_sub_ps(f, h)), 16);
}

/* The 16 rows' element k of a packed F16/BF16 group as f32 (0 past n). */
static inline TGT __m512 float_w(const uint8_t *grp, int64_t k, int64_t n, int bf16) {
    if (k >= n) return _mm512_setzero_ps();
    const __m256i h = _mm256_loadu_si256((const __m256i *)(grp + (size_t)k * 32));
    return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
}

/* A packed group's B tiles: for each pair of k (k, k + 1) one 64-byte row
 * of the 16 rows' (bf16 of k, bf16 of k + 1): hi parts at ub, lo parts
 * (F16 only) at ub + n32 * 32, n32 = n rounded up to 32 (zeros past n). */
static TGT void float_unpack(const uint8_t *grp, int64_t n, int64_t n32, int bf16, uint8_t *ub) {
    uint8_t *lo = ub + (size_t)n32 * 32;
    for (int64_t k = 0; k < n32; k += 2) {
        __m512i h0, l0, h1, l1;
        bf16_split(float_w(grp, k, n, bf16), &h0, &l0);
        bf16_split(float_w(grp, k + 1, n, bf16), &h1, &l1);
        _mm512_store_si512(ub + (size_t)k * 32, _mm512_or_si512(h0, _mm512_slli_epi32(h1, 16)));
        if (!bf16) _mm512_store_si512(lo + (size_t)k * 32, _mm512_or_si512(l0, _mm512_slli_epi32(l1, 16)));
    }
}

/* Columns [c0, c0 + cn) of f32 activations (row c at x + c * xs) split into
 * bf16 hi and lo rows of n32 elements (zeros past n and for padding rows up
 * to rows): hi row i at xh + i * n32, lo at xl + i * n32. */
static TGT void float_split_x(const uint8_t *x, size_t xs, int64_t cn, int64_t rows, int64_t n, int64_t n32,
                              uint16_t *xh, uint16_t *xl) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < n32; k += 16) {
            __m512 f = _mm512_setzero_ps();
            if (i < cn && k < n) {
                const __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - k)) - 1);
                f = _mm512_maskz_loadu_ps(m, x + (size_t)i * xs + (size_t)k * 4);
            }
            __m512i h, l;
            bf16_split(f, &h, &l);
            _mm256_storeu_si256((__m256i *)(xh + i * n32 + k), _mm512_cvtepi32_epi16(h));
            _mm256_storeu_si256((__m256i *)(xl + i * n32 + k), _mm512_cvtepi32_epi16(l));
        }
}

/* Token tile t of four (C tile CT): its hi and lo A tiles at k step s, then
 * the products. */
#define AMX_FLOAT_TILE(CT, t, s)                                                 \
    do {                                                                         \
        AMX_LOAD(4, xh + ((size_t)(t) * 16 * n32 + (size_t)(s) * 32), rowb);     \
        AMX_LOAD(5, xl + ((size_t)(t) * 16 * n32 + (size_t)(s) * 32), rowb);     \
        AMX_DPBF16PS(CT, 4, 6);                                                  \
        AMX_DPBF16PS(CT, 5, 6);                                                  \
        if (!bf16) AMX_DPBF16PS(CT, 4, 7);                                       \
    } while (0)

static TGT bool amx_gemm_float(const void *packed, int bf16, int64_t n_rows, int64_t g0, int64_t g1,
                               const void *vx, size_t xs, int64_t n_cols, int64_t n, float *out, int64_t os) {
    if (n_cols < TELA_AMX_MIN_COLS || g1 <= g0 || n <= 0 || !tela_qdot_amx_float_active()) return false;
    const int64_t n32 = (n + 31) / 32 * 32;
    const size_t gb = ((size_t)n * 32 + 63) / 64 * 64, rowb = (size_t)n32 * 2;
    /* a panel: up to ~1 MB of split activations, in tiles of 4 x 16 columns */
    int64_t pc = (int64_t)(((size_t)1 << 20) / ((size_t)n32 * 4)) / 64 * 64;
    if (pc < 64) pc = 64;
    const int64_t pad = (n_cols + 63) / 64 * 64;
    if (pc > pad) pc = pad;
    uint8_t *ub = aligned_alloc(64, (size_t)n32 * 64);
    uint16_t *xh = aligned_alloc(64, (size_t)pc * n32 * 4), *xl = xh ? xh + (size_t)pc * n32 : NULL;
    if (!ub || !xh) {
        free(ub);
        free(xh);
        return false;
    }
    const uint8_t *pw = packed, *x = vx;
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    AMX_LOAD_CONFIG(&cfg);
    _Alignas(64) float cb[16][16];
    for (int64_t p0 = 0; p0 < n_cols; p0 += pc) {
        const int64_t cn = n_cols - p0 < pc ? n_cols - p0 : pc, rows = (cn + 63) / 64 * 64;
        float_split_x(x + (size_t)p0 * xs, xs, cn, rows, n, n32, xh, xl);
        for (int64_t g = g0; g < g1; g++) {
            float_unpack(pw + (size_t)g * gb, n, n32, bf16, ub);
            for (int64_t q0 = 0; q0 < cn; q0 += 64) {
                AMX_ZERO(0);
                AMX_ZERO(1);
                AMX_ZERO(2);
                AMX_ZERO(3);
                const int nt = (int)((cn - q0 + 15) / 16 < 4 ? (cn - q0 + 15) / 16 : 4);
                for (int64_t s = 0; s < n32 / 32; s++) {
                    AMX_LOAD(6, ub + (size_t)s * 1024, 64);
                    if (!bf16) AMX_LOAD(7, ub + (size_t)n32 * 32 + (size_t)s * 1024, 64);
                    const int64_t t0 = q0 / 16;
                    AMX_FLOAT_TILE(0, t0, s);
                    if (nt > 1) AMX_FLOAT_TILE(1, t0 + 1, s);
                    if (nt > 2) AMX_FLOAT_TILE(2, t0 + 2, s);
                    if (nt > 3) AMX_FLOAT_TILE(3, t0 + 3, s);
                }
                for (int t = 0; t < nt; t++) {
                    if (t == 0) AMX_STORE(0, cb, 64);
                    else if (t == 1) AMX_STORE(1, cb, 64);
                    else if (t == 2) AMX_STORE(2, cb, 64);
                    else AMX_STORE(3, cb, 64);
                    const int64_t c0 = p0 + q0 + 16 * t;
                    for (int64_t i = 0; i < 16 && c0 + i < p0 + cn; i++)
                        store_rows(out + (c0 + i) * os + g * TELA_PK_ROWS, _mm512_load_ps(cb[i]),
                                   n_rows - g * TELA_PK_ROWS);
                }
            }
        }
    }
    AMX_RELEASE();
    free(ub);
    free(xh);
    return true;
}

bool tela_qdot_amx_gemm_f16(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                            int64_t n_cols, int64_t n, float *out, int64_t os) {
    return amx_gemm_float(packed, 0, n_rows, g0, g1, x, xs, n_cols, n, out, os);
}

bool tela_qdot_amx_gemm_bf16(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                             int64_t n_cols, int64_t n, float *out, int64_t os) {
    return amx_gemm_float(packed, 1, n_rows, g0, g1, x, xs, n_cols, n, out, os);
}

/* ------------------------------------------------------------ the gemms */

/* What the driver needs of a weight type: elements per unit (a
 * super-block or a block), bytes of a packed group and of an unpacked unit,
 * A's bytes per product (the tile configuration), the unpacking and the
 * tile; block_scales: the tiles take the columns' block scales as floats
 * (Q8_0 activations carry them as fp16; Q8_K rows as f32, read in place). */
typedef struct {
    int64_t unit;
    size_t (*group_bytes)(int64_t n);
    size_t ub_unit;
    int k;
    void (*unpack)(const uint8_t *w, int64_t units, uint8_t *ub);
    void (*tile)(const uint8_t *ub, int64_t units, const uint8_t *x, size_t xs, const float *dx, int m, __m512 *f);
    bool block_scales;
} amx_kind;

/* Groups [g0, g1) x all columns: panels of columns, each group unpacked
 * once per panel, then its tiles of 16 columns (the last one narrower). */
static TGT bool amx_gemm(const amx_kind *kd, const void *packed, int64_t n_rows, int64_t g0, int64_t g1,
                         const void *vx, size_t xs, int64_t n_cols, int64_t n, float *out, int64_t os) {
    if (n_cols < TELA_AMX_MIN_COLS || g1 <= g0 || n < kd->unit || !tela_qdot_amx_q8_active()) return false;
    const int64_t units = n / kd->unit;
    const size_t gb = kd->group_bytes(n);
    int64_t pc = panel_cols(xs);
    if (pc > n_cols) pc = n_cols;
    uint8_t *ub = aligned_alloc(64, kd->ub_unit * (size_t)units);
    float *dx = kd->block_scales ? malloc(sizeof(float) * (size_t)(pc * units)) : NULL;
    if (!ub || (kd->block_scales && !dx)) {
        free(ub);
        free(dx);
        return false;
    }
    const uint8_t *pw = packed, *x = vx;
    int cur = 16;
    amx_configure(cur, kd->k);
    for (int64_t p0 = 0; p0 < n_cols; p0 += pc) {
        const int64_t p1 = p0 + pc < n_cols ? p0 + pc : n_cols;
        if (dx) /* the panel's block scales: column c's block b at dx[(c - p0) * units + b] */
            for (int64_t c = p0; c < p1; c++)
                for (int64_t b = 0; b < units; b++) {
                    uint16_t h;
                    memcpy(&h, x + (size_t)c * xs + (size_t)b * Q8_X_BLOCK, 2);
                    dx[(c - p0) * units + b] = _cvtsh_ss(h);
                }
        for (int64_t g = g0; g < g1; g++) {
            kd->unpack(pw + (size_t)g * gb, units, ub);
            for (int64_t c0 = p0; c0 < p1; c0 += 16) {
                const int m = p1 - c0 < 16 ? (int)(p1 - c0) : 16;
                if (m != cur) amx_configure(cur = m, kd->k);
                __m512 f[16];
                kd->tile(ub, units, x + (size_t)c0 * xs, xs, dx ? dx + (c0 - p0) * units : NULL, m, f);
                for (int i = 0; i < m; i++)
                    store_rows(out + (c0 + i) * os + g * TELA_PK_ROWS, f[i], n_rows - g * TELA_PK_ROWS);
            }
        }
    }
    AMX_RELEASE();
    free(ub);
    free(dx);
    return true;
}

/* the Q8_0/Q4_0 group: its scale area (32 bytes a block, padded to 64), then the levels */
static size_t q8_0_gb(int64_t n) { return ((size_t)(n / 32) * 32 + 63) / 64 * 64 + (size_t)(n / 32) * 512; }
static size_t q4_0_gb(int64_t n) { return ((size_t)(n / 32) * 32 + 63) / 64 * 64 + (size_t)(n / 32) * 256; }

static const amx_k_kind k_q4_K = {Q4K_SB, q4_K_unpack_sb, q4_K_amx_sb};
static const amx_k_kind k_q6_K = {Q6K_SB, q6_K_unpack_sb, q6_K_amx_sb};
static const amx_kind k_q8_0 = {32, q8_0_gb, U8_BLK, 32, q8_0_unpack, q8_amx_tile, true};
static const amx_kind k_q4_0 = {32, q4_0_gb, U8_BLK, 32, q4_0_unpack, q8_amx_tile, true};

bool tela_qdot_amx_gemm_q4_K(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                             int64_t n_cols, int64_t n, float *out, int64_t os) {
    return amx_k_gemm(&k_q4_K, packed, n_rows, g0, g1, x, xs, n_cols, n, out, os);
}

bool tela_qdot_amx_gemm_q6_K(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                             int64_t n_cols, int64_t n, float *out, int64_t os) {
    return amx_k_gemm(&k_q6_K, packed, n_rows, g0, g1, x, xs, n_cols, n, out, os);
}

bool tela_qdot_amx_gemm_q8_0(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                             int64_t n_cols, int64_t n, float *out, int64_t os) {
    return amx_gemm(&k_q8_0, packed, n_rows, g0, g1, x, xs, n_cols, n, out, os);
}

bool tela_qdot_amx_gemm_q4_0(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                             int64_t n_cols, int64_t n, float *out, int64_t os) {
    return amx_gemm(&k_q4_0, packed, n_rows, g0, g1, x, xs, n_cols, n, out, os);
}

#endif /* __x86_64__ */
