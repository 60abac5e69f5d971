/* gdn.c: Gated DeltaNet kernels (see gdn.h for the math and the layouts).
 *
 * The chunked form follows transformers' torch_chunk_gated_delta_rule,
 * regrouped to save work. Within a chunk of L tokens, with c_i the running
 * sum of the log decays g and s the q scale:
 *     A[i][j] = beta_i (k_i . k_j) exp(c_i - c_j)            (j < i)
 *     P[i][j] = s (q_i . k_j) exp(c_i - c_j)                 (j <= i)
 *     (I + A) V' = R,  R_i = beta_i (v_i - exp(c_i) k_i S)   (forward substitution)
 *     o_i = s exp(c_i) q_i S + sum_j P[i][j] V'_j
 *     S  <- exp(c_L) S + sum_i k_i (exp(c_L - c_i) V'_i)^T
 * (transformers solves for U = T beta V and W = T beta exp(c) K with
 * T = (I + A)^-1 and forms U - W S; substituting R directly gives the same
 * V' without the L x L x dk product for W.) Every step but the substitution
 * inside a 16-row block is a matrix product C = beta C + A B, done by one
 * register-blocked kernel (gdn_gemm). Per 64-token chunk and 128 x 128 head
 * that is about 4.4 M multiply-adds: K S and Q S 2 x 1.05 M, the state
 * update 1.05 M, A and P 2 x 0.33 M and P V' 0.33 M (16-row blocks of the
 * lower triangles), the substitution 0.26 M; 38 us at 2 x 16-lane FMAs per
 * cycle and 3.6 GHz. Measured on one Sapphire Rapids core: 47 us with the
 * inputs in L2 (80% of that), 57 us when they stream from L3.
 *
 * Two builds of the same steps: AVX-512 (x86-64, chosen at run time from
 * util/cpu_features.h, each function with its own target attribute so the
 * file needs no -march flag) and plain C for every other machine. The
 * chunk's step list is written once (gdn_chunk_body) and instantiated for
 * each; the recurrent step, the conv1d and the norms have a version each.
 *
 * Both builds flush denormals to zero (MXCSR FTZ/DAZ, restored on return)
 * while the delta rule runs: strong decays make exp(c_i - c_j) and the
 * products with it denormal, which costs a microcode assist per operation on
 * x86 (4x slower chunks in measurements) and contributes below 1e-38. */
#include "backend/cpu/gdn.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "util/cpu_features.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GDN_X86 1
#include <immintrin.h>
#else
#define GDN_X86 0
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline float gdn_silu(float x) { return x / (1.0f + expf(-x)); }

/* The plain-C helpers work in blocks of GDN_VEC floats with a fixed-length
 * inner loop, which compilers turn into SIMD instructions at -O2 (a loop of
 * unknown length is not vectorized by gcc's default cost model there), plus
 * a scalar tail. */
#define GDN_VEC 16

/* Rows of the chunk handled together by the triangular steps. */
#define GDN_BLK 16

#if TELA_GDN_CHUNK % GDN_BLK != 0
#error "TELA_GDN_CHUNK must be a multiple of GDN_BLK"
#endif

/* ------------------------------------------------------ denormals off */

#if GDN_X86
typedef unsigned gdn_fpmode;
static inline gdn_fpmode gdn_ftz_on(void) {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
    return csr;
}
static inline void gdn_ftz_restore(gdn_fpmode csr) { _mm_setcsr(csr); }
#else
typedef int gdn_fpmode;
static inline gdn_fpmode gdn_ftz_on(void) { return 0; }
static inline void gdn_ftz_restore(gdn_fpmode m) { (void)m; }
#endif

/* 1 when the AVX-512 kernels can run here. */
static int gdn_isa(void) {
#if GDN_X86
    const tela_cpu_features *f = tela_cpu_get_features();
    return f->avx512f && f->avx512dq && f->avx512vl && f->avx512bw && f->avx2 && f->fma;
#else
    return 0;
#endif
}

/* ------------------------------------------------------- plain C kernels */

/* Cout[M x N] = beta Cin + A B, where A[m][k] = A[m * ars + k * aks] (so
 * A can be read transposed in place), B and the C's row-major with row
 * strides ldb, ldci, ldco. beta == 0 does not read Cin (which may then be
 * NULL); Cin may be Cout. B must not overlap the rows and columns written. */
static void gemm_c(int M, int N, int K, const float *A, int64_t ars, int64_t aks, const float *B, int64_t ldb,
                   const float *Cin, int64_t ldci, float beta, float *Cout, int64_t ldco) {
    for (int m0 = 0; m0 < M; m0 += 4) {
        const int mr = M - m0 < 4 ? M - m0 : 4;
        for (int n0 = 0; n0 < N; n0 += GDN_VEC) {
            const int nn = N - n0 < GDN_VEC ? N - n0 : GDN_VEC;
            float acc[4][GDN_VEC];
            memset(acc, 0, sizeof acc);
            if (mr == 4 && nn == GDN_VEC) {
                /* the common case as one fixed-size block, which compilers
                 * vectorize */
                const float *a = A + (int64_t)m0 * ars;
                for (int k = 0; k < K; k++) {
                    const float *b = B + (int64_t)k * ldb + n0;
                    const float a0 = a[0], a1 = a[ars], a2 = a[2 * ars], a3 = a[3 * ars];
                    for (int j = 0; j < GDN_VEC; j++) {
                        acc[0][j] += a0 * b[j];
                        acc[1][j] += a1 * b[j];
                        acc[2][j] += a2 * b[j];
                        acc[3][j] += a3 * b[j];
                    }
                    a += aks;
                }
            } else {
                for (int k = 0; k < K; k++) {
                    const float *b = B + (int64_t)k * ldb + n0;
                    for (int r = 0; r < mr; r++) {
                        const float a = A[(int64_t)(m0 + r) * ars + (int64_t)k * aks];
                        for (int j = 0; j < nn; j++) acc[r][j] += a * b[j];
                    }
                }
            }
            for (int r = 0; r < mr; r++) {
                float *co = Cout + (int64_t)(m0 + r) * ldco + n0;
                if (beta != 0.0f) {
                    const float *ci = Cin + (int64_t)(m0 + r) * ldci + n0;
                    for (int j = 0; j < nn; j++) co[j] = beta * ci[j] + acc[r][j];
                } else {
                    for (int j = 0; j < nn; j++) co[j] = acc[r][j];
                }
            }
        }
    }
}

static void exp_c(const float *x, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = expf(x[i]);
}

/* dst[c][r] = src[r][c] for r < rows, c < cols (dst row stride ldd). */
static void transpose_c(const float *src, int64_t lds, int rows, int cols, float *dst, int64_t ldd) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(int64_t)c * ldd + r] = src[(int64_t)r * lds + c];
}

/* The triangle of one block of the substitution, in place: for each row i
 * in (r0, r1), X_i += sum_{r0 <= j < i} A[i][j] X_j over N columns (A holds
 * -A of the rule, so this solves (I + A) X = X by forward substitution). */
static void trisolve_c(const float *A, int64_t lda, float *X, int64_t ldx, int r0, int r1, int N) {
    for (int i = r0 + 1; i < r1; i++)
        gemm_c(1, N, i - r0, A + (int64_t)i * lda + r0, lda, 1, X + (int64_t)r0 * ldx, ldx, X + (int64_t)i * ldx,
               ldx, 1.0f, X + (int64_t)i * ldx, ldx);
}

/* ----------------------------------------------------- AVX-512 kernels */

#if GDN_X86
#define TGT __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")))
#define INL static inline __attribute__((always_inline)) TGT
/* clang reads "GCC unroll N" as a count it may ignore: ask it for full
 * unrolling, which is what keeps the accumulator arrays in registers. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

/* exp(x) for 16 floats: x = n ln2 + r with n = round(x / ln2), |r| <=
 * ln2/2 (ln2 split in two so n ln2 is exact), e^r by its Taylor polynomial
 * of degree 7 (truncation error below 5.2e-9 relative, under 0.1 ulp), then
 * scaled by 2^n with VSCALEFPS, which rounds once into the denormal range
 * and overflows to +inf. Inputs are clamped to [-104, 89] first (exp is 0
 * below -103.98 and +inf above 88.73 in float); NaN stays NaN. Against a
 * double-precision exp over every float in [-104, 89]: at most 0.94 ulp
 * for normal results, 0.85 ulp for denormal ones (tests/test_gdn.c checks
 * a sample of them and the edges). */
INL __m512 gdn_exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x); /* MAXPS returns the second operand on NaN */
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* x / (1 + exp(-x)) for 16 floats (-0 for very negative x, like the scalar). */
INL __m512 gdn_silu512(__m512 x) {
    const __m512 e = gdn_exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

INL __mmask16 gdn_mask(int n) { return (__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1u); }

TGT static void exp_avx512(const float *x, float *y, int n) {
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = gdn_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, gdn_exp512(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* One tile of gemm_avx512: mr rows x nv vectors of 16 columns, the last
 * vector masked by lm. The mr x nv accumulators stay in registers over the
 * whole k loop; each k step loads nv vectors of B and broadcasts mr values
 * of A (6 x 4: 24 FMAs for 10 loads). */
INL void gemm_tile512(int K, const float *A, int64_t ars, int64_t aks, const float *B, int64_t ldb, const float *Ci,
                      int64_t ldci, float beta, float *Co, int64_t ldco, __mmask16 lm, const int mr, const int nv) {
    __m512 c[8][8];
    UNROLL for (int r = 0; r < mr; r++)
        UNROLL for (int v = 0; v < nv; v++) c[r][v] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        const float *b = B + (int64_t)k * ldb;
        const float *a = A + (int64_t)k * aks;
        __m512 bv[8];
        UNROLL for (int v = 0; v < nv; v++)
            bv[v] = v == nv - 1 ? _mm512_maskz_loadu_ps(lm, b + 16 * v) : _mm512_loadu_ps(b + 16 * v);
        UNROLL for (int r = 0; r < mr; r++) {
            const __m512 av = _mm512_set1_ps(a[(int64_t)r * ars]);
            UNROLL for (int v = 0; v < nv; v++) c[r][v] = _mm512_fmadd_ps(av, bv[v], c[r][v]);
        }
    }
    /* whole vectors are stored unmasked: a masked store is not forwarded
     * to a load that follows soon (the decay step reads A and P at once) */
    const int whole = lm == 0xffff;
    UNROLL for (int r = 0; r < mr; r++) {
        UNROLL for (int v = 0; v < nv; v++) {
            const int part = v == nv - 1 && !whole;
            float *co = Co + (int64_t)r * ldco + 16 * v;
            __m512 x = c[r][v];
            if (beta != 0.0f) {
                const float *ci = Ci + (int64_t)r * ldci + 16 * v;
                const __m512 cv = part ? _mm512_maskz_loadu_ps(lm, ci) : _mm512_loadu_ps(ci);
                x = _mm512_fmadd_ps(_mm512_set1_ps(beta), cv, x);
            }
            if (part)
                _mm512_mask_storeu_ps(co, lm, x);
            else
                _mm512_storeu_ps(co, x);
        }
    }
}

/* Rows of A per tile for nv vectors of B: as many as keep the
 * accumulators, the B vectors and a broadcast within 32 registers. */
#define GDN_MR(nv) ((nv) == 4 ? 6 : 8)

/* gemm_c's contract. Column panels of 64 outer, then blocks of GDN_KB
 * rows of B, then row tiles, so a block of B (16 KiB) stays in L1 while
 * every row tile of A streams past it. (A whole 128 x 64 panel of a
 * 128-wide matrix would be 32 KiB in only half of L1's sets, the rows
 * being 512 bytes apart.) A single row takes panels of 128 columns
 * instead: 8 independent accumulators hide the FMA latency where 4 would
 * not. */
#define GDN_KB 64
TGT static void gemm_avx512(int M, int N, int K, const float *A, int64_t ars, int64_t aks, const float *B,
                            int64_t ldb, const float *Cin, int64_t ldci, float beta, float *Cout, int64_t ldco) {
    const int pw = M == 1 ? 128 : 64;
    for (int n0 = 0; n0 < N; n0 += pw) {
        const int nn = N - n0 < pw ? N - n0 : pw;
        const int nv = (nn + 15) / 16;
        const int MR = M == 1 ? 1 : GDN_MR(nv);
        const __mmask16 lm = gdn_mask(nn - 16 * (nv - 1));
        for (int k0 = 0; k0 < K || k0 == 0; k0 += GDN_KB) {
            const int kb = K - k0 < GDN_KB ? K - k0 : GDN_KB;
            /* later blocks of k add to what the first wrote */
            const float *ci = k0 == 0 ? Cin : Cout;
            const int64_t ldi = k0 == 0 ? ldci : ldco;
            const float bk = k0 == 0 ? beta : 1.0f;
            const float *b = B + (int64_t)k0 * ldb + n0;
            for (int m0 = 0; m0 < M; m0 += MR) {
                const int mr = M - m0 < MR ? M - m0 : MR;
                const float *a = A + (int64_t)m0 * ars + (int64_t)k0 * aks;
                const float *cim = bk != 0.0f ? ci + (int64_t)m0 * ldi + n0 : NULL;
                float *co = Cout + (int64_t)m0 * ldco + n0;
#define GDN_TILE(R, V) \
    case V * 16 + R: gemm_tile512(kb, a, ars, aks, b, ldb, cim, ldi, bk, co, ldco, lm, R, V); break
                switch (nv * 16 + mr) {
                    GDN_TILE(1, 1); GDN_TILE(2, 1); GDN_TILE(3, 1); GDN_TILE(4, 1);
                    GDN_TILE(5, 1); GDN_TILE(6, 1); GDN_TILE(7, 1); GDN_TILE(8, 1);
                    GDN_TILE(1, 2); GDN_TILE(2, 2); GDN_TILE(3, 2); GDN_TILE(4, 2);
                    GDN_TILE(5, 2); GDN_TILE(6, 2); GDN_TILE(7, 2); GDN_TILE(8, 2);
                    GDN_TILE(1, 3); GDN_TILE(2, 3); GDN_TILE(3, 3); GDN_TILE(4, 3);
                    GDN_TILE(5, 3); GDN_TILE(6, 3); GDN_TILE(7, 3); GDN_TILE(8, 3);
                    GDN_TILE(1, 4); GDN_TILE(2, 4); GDN_TILE(3, 4); GDN_TILE(4, 4);
                    GDN_TILE(5, 4); GDN_TILE(6, 4);
                    GDN_TILE(1, 5); GDN_TILE(1, 6); GDN_TILE(1, 7); GDN_TILE(1, 8);
                    default: break;
                }
#undef GDN_TILE
            }
        }
    }
}

/* transpose_c's contract, in 16 x 16 blocks through registers: 32-bit then
 * 64-bit interleaves within 128-bit lanes, then two rounds of 128-bit lane
 * shuffles. Rows past `rows` are read as zeros; every block writes whole
 * 16-float rows of dst, so dst needs room for rows rounded up to 16. */
TGT static void transpose_avx512(const float *src, int64_t lds, int rows, int cols, float *dst, int64_t ldd) {
    for (int r0 = 0; r0 < rows; r0 += 16) {
        for (int c0 = 0; c0 < cols; c0 += 16) {
            const __mmask16 m = gdn_mask(cols - c0);
            __m512 a[16], t[16];
            UNROLL for (int i = 0; i < 16; i++)
                a[i] = r0 + i < rows ? _mm512_maskz_loadu_ps(m, src + (int64_t)(r0 + i) * lds + c0)
                                     : _mm512_setzero_ps();
            UNROLL for (int i = 0; i < 16; i += 2) {
                t[i] = _mm512_unpacklo_ps(a[i], a[i + 1]);
                t[i + 1] = _mm512_unpackhi_ps(a[i], a[i + 1]);
            }
            /* a[4g + s]: rows 4g..4g+3 of columns s, s+4, s+8, s+12 (one per lane) */
            UNROLL for (int g = 0; g < 4; g++) {
                const __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
                const __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
                a[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
                a[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
                a[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
                a[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
            }
            UNROLL for (int s = 0; s < 4; s++) {
                const __m512 v0 = _mm512_shuffle_f32x4(a[s], a[4 + s], 0x88);
                const __m512 v1 = _mm512_shuffle_f32x4(a[s], a[4 + s], 0xdd);
                const __m512 v2 = _mm512_shuffle_f32x4(a[8 + s], a[12 + s], 0x88);
                const __m512 v3 = _mm512_shuffle_f32x4(a[8 + s], a[12 + s], 0xdd);
                const int col[4] = {s, s + 8, s + 4, s + 12};
                const __m512 o[4] = {_mm512_shuffle_f32x4(v0, v2, 0x88), _mm512_shuffle_f32x4(v0, v2, 0xdd),
                                     _mm512_shuffle_f32x4(v1, v3, 0x88), _mm512_shuffle_f32x4(v1, v3, 0xdd)};
                UNROLL for (int u = 0; u < 4; u++)
                    if (c0 + col[u] < cols) _mm512_storeu_ps(dst + (int64_t)(c0 + col[u]) * ldd + r0, o[u]);
            }
        }
    }
}
/* One row of trisolve_avx512 over a panel of up to 128 columns. Full
 * panels use plain loads and stores: the next row reads this one at once,
 * and a masked store is not forwarded to a later load. */
INL void trisolve_row512(const float *a, float *X, int64_t ldx, int r0, int i, const __mmask16 *m, const int full) {
    float *xi = X + (int64_t)i * ldx;
    __m512 e[8], o[8];
    UNROLL for (int u = 0; u < 8; u++) {
        e[u] = full ? _mm512_loadu_ps(xi + 16 * u) : _mm512_maskz_loadu_ps(m[u], xi + 16 * u);
        o[u] = _mm512_setzero_ps();
    }
    int j = r0;
    for (; j + 1 < i; j += 2) {
        const float *x0 = X + (int64_t)j * ldx, *x1 = x0 + ldx;
        const __m512 a0 = _mm512_set1_ps(a[j]), a1 = _mm512_set1_ps(a[j + 1]);
        UNROLL for (int u = 0; u < 8; u++) {
            const __m512 v0 = full ? _mm512_loadu_ps(x0 + 16 * u) : _mm512_maskz_loadu_ps(m[u], x0 + 16 * u);
            const __m512 v1 = full ? _mm512_loadu_ps(x1 + 16 * u) : _mm512_maskz_loadu_ps(m[u], x1 + 16 * u);
            e[u] = _mm512_fmadd_ps(a0, v0, e[u]);
            o[u] = _mm512_fmadd_ps(a1, v1, o[u]);
        }
    }
    if (j < i) {
        const float *x0 = X + (int64_t)j * ldx;
        const __m512 a0 = _mm512_set1_ps(a[j]);
        UNROLL for (int u = 0; u < 8; u++) {
            const __m512 v0 = full ? _mm512_loadu_ps(x0 + 16 * u) : _mm512_maskz_loadu_ps(m[u], x0 + 16 * u);
            e[u] = _mm512_fmadd_ps(a0, v0, e[u]);
        }
    }
    UNROLL for (int u = 0; u < 8; u++) {
        if (full)
            _mm512_storeu_ps(xi + 16 * u, _mm512_add_ps(e[u], o[u]));
        else
            _mm512_mask_storeu_ps(xi + 16 * u, m[u], _mm512_add_ps(e[u], o[u]));
    }
}

/* trisolve_c's contract: a row of X at a time in panels of 128 columns,
 * even and odd j into separate accumulators (16 chains of FMAs, half as
 * long as one set would make them). */
TGT static void trisolve_avx512(const float *A, int64_t lda, float *X, int64_t ldx, int r0, int r1, int N) {
    for (int n0 = 0; n0 < N; n0 += 128) {
        __mmask16 m[8];
        for (int u = 0; u < 8; u++) m[u] = n0 + 16 * u < N ? gdn_mask(N - n0 - 16 * u) : 0;
        for (int i = r0 + 1; i < r1; i++) {
            if (N - n0 >= 128)
                trisolve_row512(A + (int64_t)i * lda, X + n0, ldx, r0, i, m, 1);
            else
                trisolve_row512(A + (int64_t)i * lda, X + n0, ldx, r0, i, m, 0);
        }
    }
}
#endif /* GDN_X86 */

/* ---------------------------------------------- the chunk, written once */

ALWAYS_INLINE void gdn_gemm(const int isa, int M, int N, int K, const float *A, int64_t ars, int64_t aks,
                            const float *B, int64_t ldb, const float *Cin, int64_t ldci, float beta, float *Cout,
                            int64_t ldco) {
    if (M <= 0 || N <= 0) return;
#if GDN_X86
    if (isa) {
        gemm_avx512(M, N, K, A, ars, aks, B, ldb, Cin, ldci, beta, Cout, ldco);
        return;
    }
#endif
    gemm_c(M, N, K, A, ars, aks, B, ldb, Cin, ldci, beta, Cout, ldco);
}

ALWAYS_INLINE void gdn_exp(const int isa, const float *x, float *y, int n) {
#if GDN_X86
    if (isa) {
        exp_avx512(x, y, n);
        return;
    }
#endif
    exp_c(x, y, n);
}

ALWAYS_INLINE void gdn_transpose(const int isa, const float *src, int64_t lds, int rows, int cols, float *dst,
                                 int64_t ldd) {
#if GDN_X86
    if (isa) {
        transpose_avx512(src, lds, rows, cols, dst, ldd);
        return;
    }
#endif
    transpose_c(src, lds, rows, cols, dst, ldd);
}

ALWAYS_INLINE void gdn_trisolve(const int isa, const float *A, int64_t lda, float *X, int64_t ldx, int r0, int r1,
                                int N) {
#if GDN_X86
    if (isa) {
        trisolve_avx512(A, lda, X, ldx, r0, r1, N);
        return;
    }
#endif
    trisolve_c(A, lda, X, ldx, r0, r1, N);
}

/* y = s * y over n floats */
ALWAYS_INLINE void gdn_scale(float *restrict y, float s, int n) {
    int i = 0;
    for (; i + GDN_VEC <= n; i += GDN_VEC)
        for (int u = 0; u < GDN_VEC; u++) y[i + u] *= s;
    for (; i < n; i++) y[i] *= s;
}

/* y = s * x over n floats */
ALWAYS_INLINE void gdn_scale_to(float *restrict y, const float *restrict x, float s, int n) {
    int i = 0;
    for (; i + GDN_VEC <= n; i += GDN_VEC)
        for (int u = 0; u < GDN_VEC; u++) y[i + u] = s * x[i + u];
    for (; i < n; i++) y[i] = s * x[i];
}

/* y = b * (v - e * x) over n floats */
ALWAYS_INLINE void gdn_resid(float *restrict y, const float *restrict v, const float *restrict x, float b, float e,
                             int n) {
    int i = 0;
    for (; i + GDN_VEC <= n; i += GDN_VEC)
        for (int u = 0; u < GDN_VEC; u++) y[i + u] = b * (v[i + u] - e * x[i + u]);
    for (; i < n; i++) y[i] = b * (v[i] - e * x[i]);
}

/* Rows [r0, r1) of A and P (row stride ld) from the raw dot products over
 * columns [0, r1): with d = exp(c_i - c_j), a[j] = -beta_i d a[j] for
 * j < i and p[j] = d p[j] for j <= i, zeros elsewhere (where d may be
 * +inf). */
static void decay_c(float *Am, float *Pm, int ld, const float *cum, const float *bt, int r0, int r1) {
    for (int i = r0; i < r1; i++) {
        float *a = Am + (size_t)i * ld, *p = Pm + (size_t)i * ld;
        for (int j = 0; j < r1; j++) {
            const float e = j <= i ? expf(cum[i] - cum[j]) : 0.0f;
            a[j] = j < i ? -bt[i] * e * a[j] : 0.0f;
            p[j] = j <= i ? e * p[j] : 0.0f;
        }
    }
}

#if GDN_X86
TGT static void decay_avx512(float *Am, float *Pm, int ld, const float *cum, const float *bt, int r0, int r1) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int i = r0; i < r1; i++) {
        float *a = Am + (size_t)i * ld, *p = Pm + (size_t)i * ld;
        const __m512 ci = _mm512_set1_ps(cum[i]), sa = _mm512_set1_ps(-bt[i]);
        for (int j = 0; j < r1; j += 16) {
            const __mmask16 m = gdn_mask(r1 - j);
            const __m512i col = _mm512_add_epi32(lane, _mm512_set1_epi32(j));
            const __mmask16 le = _mm512_cmple_epi32_mask(col, _mm512_set1_epi32(i)) & m;
            const __mmask16 lt = _mm512_cmplt_epi32_mask(col, _mm512_set1_epi32(i)) & m;
            const __m512 e = gdn_exp512(_mm512_sub_ps(ci, _mm512_maskz_loadu_ps(le, cum + j)));
            const __m512 av = _mm512_mul_ps(_mm512_mul_ps(sa, e), _mm512_maskz_loadu_ps(lt, a + j));
            const __m512 pv = _mm512_mul_ps(e, _mm512_maskz_loadu_ps(le, p + j));
            _mm512_mask_storeu_ps(a + j, m, _mm512_maskz_mov_ps(lt, av));
            _mm512_mask_storeu_ps(p + j, m, _mm512_maskz_mov_ps(le, pv));
        }
    }
}
#endif

ALWAYS_INLINE void gdn_decay(const int isa, float *Am, float *Pm, int ld, const float *cum, const float *bt, int r0,
                             int r1) {
#if GDN_X86
    if (isa) {
        decay_avx512(Am, Pm, ld, cum, bt, r0, r1);
        return;
    }
#endif
    decay_c(Am, Pm, ld, cum, bt, r0, r1);
}

size_t tela_gdn_chunked_work_floats(int dk, int dv) {
    const size_t c = TELA_GDN_CHUNK;
    /* 5 vectors, [K; Q] (2c x dk), K^T (dk x c), A and P (c x c each),
     * [K S; Q S] (2c x dv), V' (c x dv), plus room to align the start to
     * 64 bytes */
    return 5 * c + 3 * c * (size_t)dk + 2 * c * c + 3 * c * (size_t)dv + 16;
}

/* One chunk of L <= TELA_GDN_CHUNK tokens starting at token t0; w is
 * 64-byte aligned. k and q (times q_scale) are first copied to one block of
 * rows: the caller's rows are a multiple of 4 KiB apart, so products that
 * walk down them would keep hitting one L1 set. */
ALWAYS_INLINE void gdn_chunk_body(const tela_gdn_io *io, int64_t t0, int L, float *S, float *w, const int isa) {
    const int dk = io->dk, dv = io->dv, C = TELA_GDN_CHUNK;
    const int64_t qs = io->qk_stride, vs = io->v_stride, os = io->out_stride, gs = io->gb_stride;
    const float *Vin = io->v + t0 * vs;
    float *out = io->out + t0 * os;
    float *cum = w;                          /* C: running sums c_i */
    float *ec = cum + C;                     /* C: exp(c_i) */
    float *kd = ec + C;                      /* C: exp(c_L - c_i) */
    float *bt = kd + C;                      /* C: beta_i */
    float *d = bt + C;                       /* C: scratch */
    float *Kc = d + C;                       /* L x dk: K, then L x dk: Q * q_scale */
    float *Qc = Kc + (size_t)L * dk;
    float *Kt = Kc + (size_t)2 * C * dk;     /* dk x C: K transposed */
    float *Am = Kt + (size_t)dk * C;         /* C x C: -A */
    float *Pm = Am + (size_t)C * C;          /* C x C: P */
    float *KS = Pm + (size_t)C * C;          /* L x dv: K S, then L x dv: Q S */
    float *QS = KS + (size_t)L * dv;
    float *X = KS + (size_t)2 * C * dv;      /* C x dv: R, then V' */

    float acc = 0.0f;
    for (int i = 0; i < L; i++) {
        acc += io->g[(t0 + i) * gs];
        cum[i] = acc;
        bt[i] = io->beta[(t0 + i) * gs];
        memcpy(Kc + (size_t)i * dk, io->k + (t0 + i) * qs, (size_t)dk * sizeof *Kc);
        gdn_scale_to(Qc + (size_t)i * dk, io->q + (t0 + i) * qs, io->q_scale, dk);
    }
    const float last = cum[L - 1];
    gdn_exp(isa, cum, ec, L);
    for (int i = 0; i < L; i++) d[i] = last - cum[i];
    gdn_exp(isa, d, kd, L);

    /* A and P, 16-row block by block: the raw dot products against K^T over
     * the columns up to the block's last row, then weights and masks */
    gdn_transpose(isa, Kc, dk, L, dk, Kt, C);
    for (int r0 = 0; r0 < L; r0 += GDN_BLK) {
        const int r1 = L - r0 < GDN_BLK ? L : r0 + GDN_BLK;
        gdn_gemm(isa, r1 - r0, r1, dk, Kc + (size_t)r0 * dk, dk, 1, Kt, C, NULL, 0, 0.0f,
                 Am + (size_t)r0 * C, C);
        gdn_gemm(isa, r1 - r0, r1, dk, Qc + (size_t)r0 * dk, dk, 1, Kt, C, NULL, 0, 0.0f,
                 Pm + (size_t)r0 * C, C);
        gdn_decay(isa, Am, Pm, C, cum, bt, r0, r1);
    }

    /* what the old state predicts, [K S; Q S] in one product: R from K S,
     * and Q S weighted by exp(c_i) for the output */
    gdn_gemm(isa, 2 * L, dv, dk, Kc, dk, 1, S, dv, NULL, 0, 0.0f, KS, dv);
    for (int i = 0; i < L; i++) {
        gdn_resid(X + (size_t)i * dv, Vin + i * vs, KS + (size_t)i * dv, bt[i], ec[i], dv);
        gdn_scale(QS + (size_t)i * dv, ec[i], dv);
    }

    /* (I + A) V' = R: each block takes the finished rows above it in one
     * product, then solves its own triangle row by row */
    for (int r0 = 0; r0 < L; r0 += GDN_BLK) {
        const int r1 = L - r0 < GDN_BLK ? L : r0 + GDN_BLK;
        gdn_gemm(isa, r1 - r0, dv, r0, Am + (size_t)r0 * C, C, 1, X, dv, X + (size_t)r0 * dv, dv, 1.0f,
                 X + (size_t)r0 * dv, dv);
        gdn_trisolve(isa, Am, C, X, dv, r0, r1, dv);
    }

    /* o = exp(c_i) Q S + P V' (P is zero above its diagonal), written to
     * the caller's rows once */
    for (int r0 = 0; r0 < L; r0 += GDN_BLK) {
        const int r1 = L - r0 < GDN_BLK ? L : r0 + GDN_BLK;
        gdn_gemm(isa, r1 - r0, dv, r1, Pm + (size_t)r0 * C, C, 1, X, dv, QS + (size_t)r0 * dv, dv, 1.0f,
                 out + r0 * os, os);
    }

    /* S <- exp(c_L) S + K^T (exp(c_L - c_i) V'_i) */
    for (int i = 0; i < L; i++) gdn_scale(X + (size_t)i * dv, kd[i], dv);
    gdn_gemm(isa, dk, dv, L, Kt, C, 1, X, dv, S, dv, ec[L - 1], S, dv);
}

static void gdn_chunk_c(const tela_gdn_io *io, int64_t t0, int L, float *S, float *w) {
    gdn_chunk_body(io, t0, L, S, w, 0);
}

#if GDN_X86
TGT static void gdn_chunk_avx512(const tela_gdn_io *io, int64_t t0, int L, float *S, float *w) {
    gdn_chunk_body(io, t0, L, S, w, 1);
}
#endif

void tela_gdn_chunked(const tela_gdn_io *io, int64_t n, float *state, float *work) {
    float *w = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    const int isa = gdn_isa();
    const gdn_fpmode fp = gdn_ftz_on();
    for (int64_t t0 = 0; t0 < n; t0 += TELA_GDN_CHUNK) {
        const int L = n - t0 < TELA_GDN_CHUNK ? (int)(n - t0) : TELA_GDN_CHUNK;
        if (L <= TELA_GDN_RECURRENT_MAX) {
            /* a short chunk runs the recurrence, token by token: a chunk of
             * one token is then a decode step whether it came alone or at
             * the end of a longer call (batched steps cut prompts at
             * multiples of the chunk), and a run of a few tokens (the
             * verification of a speculative draft) gives the very bits of
             * as many decode steps, so speculation changes no result */
            tela_gdn_io one = *io;
            one.q += t0 * io->qk_stride;
            one.k += t0 * io->qk_stride;
            one.v += t0 * io->v_stride;
            one.g += t0 * io->gb_stride;
            one.beta += t0 * io->gb_stride;
            one.out += t0 * io->out_stride;
            tela_gdn_recurrent(&one, L, state);
            continue;
        }
#if GDN_X86
        if (isa) {
            gdn_chunk_avx512(io, t0, L, state, w);
            continue;
        }
#endif
        gdn_chunk_c(io, t0, L, state, w);
    }
    gdn_ftz_restore(fp);
    (void)isa;
}

/* ------------------------------------------------------ the recurrence */

/* Columns j of S evolve independently (each reads k, q, g, beta and its own
 * column), so the value dimension is processed in blocks that keep the
 * temporary S^T k on the stack whatever dv is. */
#define GDN_COL_BLOCK 128

/* y += a * x over n floats */
static inline void gdn_axpy(float *restrict y, float a, const float *restrict x, int n) {
    int i = 0;
    for (; i + GDN_VEC <= n; i += GDN_VEC)
        for (int k = 0; k < GDN_VEC; k++) y[i + k] += a * x[i + k];
    for (; i < n; i++) y[i] += a * x[i];
}

static void recurrent_c(const tela_gdn_io *io, int64_t n, float *state) {
    const int dk = io->dk, dv = io->dv;
    float delta[GDN_COL_BLOCK];
    for (int64_t t = 0; t < n; t++) {
        const float *q = io->q + t * io->qk_stride;
        const float *k = io->k + t * io->qk_stride;
        const float *v = io->v + t * io->v_stride;
        const float decay = expf(io->g[t * io->gb_stride]);
        const float beta = io->beta[t * io->gb_stride];
        float *out = io->out + t * io->out_stride;

        for (int j0 = 0; j0 < dv; j0 += GDN_COL_BLOCK) {
            const int nb = dv - j0 < GDN_COL_BLOCK ? dv - j0 : GDN_COL_BLOCK;
            /* decay the state and read what it predicts for k: S^T k */
            memset(delta, 0, sizeof delta);
            for (int i = 0; i < dk; i++) {
                float *row = state + (size_t)i * dv + j0;
                gdn_scale(row, decay, nb);
                gdn_axpy(delta, k[i], row, nb);
            }
            /* delta = beta (v - S^T k) */
            for (int j = 0; j < nb; j++) delta[j] = beta * (v[j0 + j] - delta[j]);
            /* S += k delta^T, then o = S^T (q * q_scale) */
            float *o = out + j0;
            memset(o, 0, (size_t)nb * sizeof *o);
            for (int i = 0; i < dk; i++) {
                float *row = state + (size_t)i * dv + j0;
                gdn_axpy(row, k[i], delta, nb);
                gdn_axpy(o, q[i] * io->q_scale, row, nb);
            }
        }
    }
}

#if GDN_X86
/* Per token, per block of 64 columns (32 KiB of state for dk = 128, which
 * stays in L1 between the two passes): one read pass for the prediction
 * decay * S^T k (two accumulator sets, even and odd rows, to keep the FMA
 * chains short), then one read-write pass S = decay S + k delta^T that also
 * accumulates o = S^T q. */
TGT static void recurrent_avx512(const tela_gdn_io *io, int64_t n, float *S) {
    const int dk = io->dk, dv = io->dv;
    for (int64_t t = 0; t < n; t++) {
        const float *q = io->q + t * io->qk_stride;
        const float *k = io->k + t * io->qk_stride;
        const float *v = io->v + t * io->v_stride;
        const __m512 decay = _mm512_set1_ps(expf(io->g[t * io->gb_stride]));
        const __m512 beta = _mm512_set1_ps(io->beta[t * io->gb_stride]);
        float *out = io->out + t * io->out_stride;
        for (int j0 = 0; j0 < dv; j0 += 64) {
            __mmask16 m[4];
            for (int u = 0; u < 4; u++) m[u] = j0 + 16 * u < dv ? gdn_mask(dv - j0 - 16 * u) : 0;
            __m512 p0[4], p1[4];
            UNROLL for (int u = 0; u < 4; u++) p0[u] = p1[u] = _mm512_setzero_ps();
            int i = 0;
            for (; i + 2 <= dk; i += 2) {
                const float *s0 = S + (size_t)i * dv + j0, *s1 = s0 + dv;
                const __m512 k0 = _mm512_set1_ps(k[i]), k1 = _mm512_set1_ps(k[i + 1]);
                UNROLL for (int u = 0; u < 4; u++) {
                    p0[u] = _mm512_fmadd_ps(k0, _mm512_maskz_loadu_ps(m[u], s0 + 16 * u), p0[u]);
                    p1[u] = _mm512_fmadd_ps(k1, _mm512_maskz_loadu_ps(m[u], s1 + 16 * u), p1[u]);
                }
            }
            if (i < dk) {
                const float *s0 = S + (size_t)i * dv + j0;
                const __m512 k0 = _mm512_set1_ps(k[i]);
                UNROLL for (int u = 0; u < 4; u++)
                    p0[u] = _mm512_fmadd_ps(k0, _mm512_maskz_loadu_ps(m[u], s0 + 16 * u), p0[u]);
            }
            /* delta = beta (v - decay S^T k) */
            __m512 dl[4], o[4];
            UNROLL for (int u = 0; u < 4; u++) {
                const __m512 pred = _mm512_mul_ps(decay, _mm512_add_ps(p0[u], p1[u]));
                dl[u] = _mm512_mul_ps(beta, _mm512_sub_ps(_mm512_maskz_loadu_ps(m[u], v + j0 + 16 * u), pred));
                o[u] = _mm512_setzero_ps();
            }
            for (i = 0; i < dk; i++) {
                float *s = S + (size_t)i * dv + j0;
                const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i] * io->q_scale);
                UNROLL for (int u = 0; u < 4; u++) {
                    __m512 x = _mm512_mul_ps(decay, _mm512_maskz_loadu_ps(m[u], s + 16 * u));
                    x = _mm512_fmadd_ps(ki, dl[u], x);
                    _mm512_mask_storeu_ps(s + 16 * u, m[u], x);
                    o[u] = _mm512_fmadd_ps(qi, x, o[u]);
                }
            }
            UNROLL for (int u = 0; u < 4; u++) _mm512_mask_storeu_ps(out + j0 + 16 * u, m[u], o[u]);
        }
    }
}
#endif

void tela_gdn_recurrent(const tela_gdn_io *io, int64_t n, float *state) {
    const gdn_fpmode fp = gdn_ftz_on();
#if GDN_X86
    if (gdn_isa())
        recurrent_avx512(io, n, state);
    else
#endif
        recurrent_c(io, n, state);
    gdn_ftz_restore(fp);
}

/* --------------------------------------------------- conv1d and norms */

static void conv1d_silu_c(const float *x, int64_t x_stride, int64_t n, int channels, int kernel, const float *w,
                          const float *state, float *out, int64_t out_stride) {
    const int hist = kernel - 1;
    for (int64_t t = 0; t < n; t++) {
        float *o = out + t * out_stride;
        const float *xt = x + t * x_stride;
        for (int c = 0; c < channels; c++) o[c] = w[(size_t)c * kernel + hist] * xt[c];
        for (int k = 0; k < hist; k++) {
            /* tap k reads the input kernel-1-k steps back */
            const int64_t s = t - hist + k;
            const float *src = s < 0 ? state + (size_t)(s + hist) * channels : x + s * x_stride;
            for (int c = 0; c < channels; c++) o[c] += w[(size_t)c * kernel + k] * src[c];
        }
        for (int c = 0; c < channels; c++) o[c] = gdn_silu(o[c]);
    }
}

#if GDN_X86
/* Groups of GDN_CONV_G channels: their taps are transposed once into
 * wt[k][c] (on the stack), then the tokens are walked in order, each row
 * read contiguously (a walk down one 16-channel column would step 4 KiB
 * multiples, which the hardware prefetchers do not follow). Older inputs
 * come from the state rows for the first kernel-1 tokens. The taps are
 * summed in the scalar code's order: newest first, then oldest to newest. */
#define GDN_CONV_G 256
TGT static void conv1d_silu_avx512(const float *x, int64_t x_stride, int64_t n, int channels, int kernel,
                                   const float *w, const float *state, float *out, int64_t out_stride) {
    const int hist = kernel - 1;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i step = _mm512_mullo_epi32(lane, _mm512_set1_epi32(kernel)); /* lane c: channel c's taps */
    float wt[8][GDN_CONV_G];
    for (int g0 = 0; g0 < channels; g0 += GDN_CONV_G) {
        const int gn = channels - g0 < GDN_CONV_G ? channels - g0 : GDN_CONV_G;
        for (int c = 0; c < gn; c += 16) {
            const __mmask16 m = gdn_mask(gn - c);
            for (int k = 0; k < kernel; k++)
                _mm512_storeu_ps(wt[k] + c, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, step,
                                                                     w + (size_t)(g0 + c) * kernel + k, 4));
        }
        for (int64_t t = 0; t < n; t++) {
            const float *src[8];
            for (int k = 0; k < hist; k++) {
                const int64_t s = t - hist + k;
                src[k] = (s < 0 ? state + (size_t)(s + hist) * channels : x + s * x_stride) + g0;
            }
            const float *xt = x + t * x_stride + g0;
            float *o = out + t * out_stride + g0;
            for (int c = 0; c < gn; c += 16) {
                const __mmask16 m = gdn_mask(gn - c);
                __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(wt[hist] + c), _mm512_maskz_loadu_ps(m, xt + c));
                for (int k = 0; k < hist; k++)
                    acc = _mm512_fmadd_ps(_mm512_loadu_ps(wt[k] + c), _mm512_maskz_loadu_ps(m, src[k] + c), acc);
                _mm512_mask_storeu_ps(o + c, m, gdn_silu512(acc));
            }
        }
    }
}
#endif

void tela_gdn_conv1d_silu(const float *x, int64_t x_stride, int64_t n, int channels, int kernel,
                          const float *w, float *state, float *out, int64_t out_stride) {
#if GDN_X86
    if (kernel >= 1 && kernel <= 8 && gdn_isa())
        conv1d_silu_avx512(x, x_stride, n, channels, kernel, w, state, out, out_stride);
    else
#endif
        conv1d_silu_c(x, x_stride, n, channels, kernel, w, state, out, out_stride);
    /* keep the last kernel-1 inputs; rows move towards the front only, so the
     * ascending loop reads each old row before it is overwritten */
    const int hist = kernel - 1;
    for (int r = 0; r < hist; r++) {
        const int64_t s = n - hist + r;
        const float *src = s < 0 ? state + (size_t)(s + hist) * channels : x + s * x_stride;
        float *dst = state + (size_t)r * channels;
        if (src != dst) memmove(dst, src, (size_t)channels * sizeof *dst);
    }
}

#if GDN_X86
/* sum of x[i]^2 over n floats, 16 lanes then a fixed-order reduction */
INL float gdn_sumsq512(const float *x, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        s0 = _mm512_fmadd_ps(a, a, s0);
        s1 = _mm512_fmadd_ps(b, b, s1);
    }
    for (; i < n; i += 16) {
        const __m512 a = _mm512_maskz_loadu_ps(gdn_mask(n - i), x + i);
        s0 = _mm512_fmadd_ps(a, a, s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

TGT static void l2_norm_avx512(float *x, int n, float eps) {
    const __m512 inv = _mm512_set1_ps(1.0f / sqrtf(gdn_sumsq512(x, n) + eps));
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = gdn_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
}

TGT static void gated_rms_norm_avx512(float *x, const float *z, const float *w, int n, float eps) {
    const __m512 inv = _mm512_set1_ps(1.0f / sqrtf(gdn_sumsq512(x, n) / (float)n + eps));
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = gdn_mask(n - i);
        const __m512 xv = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv);
        const __m512 g = gdn_silu512(_mm512_maskz_loadu_ps(m, z + i));
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), xv), g));
    }
}
#endif

void tela_gdn_l2_norm(float *x, int n, float eps) {
#if GDN_X86
    if (gdn_isa()) {
        l2_norm_avx512(x, n, eps);
        return;
    }
#endif
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const float inv = 1.0f / sqrtf(ss + eps);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void tela_gdn_gated_rms_norm(float *x, const float *z, const float *w, int n, float eps) {
#if GDN_X86
    if (gdn_isa()) {
        gated_rms_norm_avx512(x, z, w, n, eps);
        return;
    }
#endif
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) x[i] = (w[i] * (x[i] * inv)) * gdn_silu(z[i]);
}

void tela_gdn_exp(const float *x, float *y, int64_t n) {
    const int isa = gdn_isa();
    for (int64_t i = 0; i < n; i += 1 << 20) {
        const int len = n - i < (1 << 20) ? (int)(n - i) : 1 << 20;
#if GDN_X86
        if (isa) {
            exp_avx512(x + i, y + i, len);
            continue;
        }
#endif
        exp_c(x + i, y + i, len);
    }
    (void)isa;
}
