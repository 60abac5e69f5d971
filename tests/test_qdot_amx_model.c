/* test_qdot_amx_model.c: the AMX tiles of qdot_pack_amx.c run on a scalar
 * model of the tile instructions, so that their data layout, offsets,
 * tails and float steps are checked on every AVX-512 machine, with AMX or
 * without (the AVX-512 parts of the file run for real; only the tile
 * instructions are modeled). Checks, against references independent of
 * the AMX file:
 *  - Q4_K, Q6_K: bitwise equal to the scalar vec_dot, and to the packed
 *    VNNI gemm, over rows around the 16-row group, column counts around
 *    the 16-column tile, super-block counts 1 to 8 and 32, group
 *    sub-ranges, and blocks at the extremes (the exactness bound);
 *  - Q8_0, Q4_0: bitwise equal to the packed VNNI gemm (itself checked
 *    against a scalar model of the block formats in test_qdot_packed_q8),
 *    block counts 1 to 9 (the tail of the four-block step);
 *  - F16, BF16 on the bf16 tiles: within 2^-14 of sum |w x| of the dot
 *    product in double.
 * The model follows the instructions' descriptions (Intel SDM, AMX):
 * LDTILECFG's palette 1 layout (rows and bytes per row of tmm0-7),
 * TILELOADD / TILESTORED row by row with a byte stride, TILEZERO,
 * TDPBSUD / TDPBSSD (C[m][n] += sum over k of A[m][4k + i] * B[k][4n + i],
 * i < 4, A signed bytes, B unsigned or signed, int32 wrapping), TDPBF16PS
 * (C[m][n] += A[m][2k] B[k][2n] + A[m][2k + 1] B[k][2n + 1], in f32).
 * Whether a real CPU agrees with the model is for the AMX runs of
 * test_qdot_packed_k/q8/f (TELA_AMX=1, TELA_AMX_FLOAT=1 on such a CPU). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/qdot.h"
#include "quant/quant.h"
#include "test.h"
#include "util/cpu_features.h"
#include "util/fp16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

/* ------------------------------------------------- the model of the tiles */

static struct {
    uint8_t data[8][16][64];
    int rows[8], colsb[8];
} g_tmm;

static void model_config(const void *cfg) {
    const uint8_t *c = cfg;
    CHECK_EQ_INT(c[0], 1); /* palette 1 */
    for (int t = 0; t < 8; t++) {
        uint16_t cb;
        memcpy(&cb, c + 16 + 2 * t, 2);
        g_tmm.colsb[t] = cb;
        g_tmm.rows[t] = c[48 + t];
        CHECK(cb <= 64 && c[48 + t] <= 16);
    }
    memset(g_tmm.data, 0, sizeof g_tmm.data);
}

static void model_zero(int t) { memset(g_tmm.data[t], 0, sizeof g_tmm.data[t]); }

static void model_load(int t, const void *p, long stride) {
    model_zero(t);
    for (int r = 0; r < g_tmm.rows[t]; r++) memcpy(g_tmm.data[t][r], (const uint8_t *)p + r * stride, (size_t)g_tmm.colsb[t]);
}

static void model_store(int t, void *p, long stride) {
    for (int r = 0; r < g_tmm.rows[t]; r++) memcpy((uint8_t *)p + r * stride, g_tmm.data[t][r], (size_t)g_tmm.colsb[t]);
}

/* The configuration's rules for a product: C rows = A rows, C bytes = B
 * bytes, A bytes / 4 = B rows. */
static void check_dims(int c, int a, int b) {
    CHECK(g_tmm.rows[c] == g_tmm.rows[a] && g_tmm.colsb[c] == g_tmm.colsb[b] && g_tmm.colsb[a] / 4 == g_tmm.rows[b]);
}

static void model_dp(int c, int a, int b, int b_signed) {
    check_dims(c, a, b);
    for (int m = 0; m < g_tmm.rows[c]; m++)
        for (int n = 0; n < g_tmm.colsb[c] / 4; n++) {
            int32_t acc;
            memcpy(&acc, &g_tmm.data[c][m][4 * n], 4);
            uint32_t u = (uint32_t)acc;
            for (int k = 0; k < g_tmm.colsb[a] / 4; k++)
                for (int i = 0; i < 4; i++) {
                    const int av = (int8_t)g_tmm.data[a][m][4 * k + i];
                    const int bv = b_signed ? (int8_t)g_tmm.data[b][k][4 * n + i] : g_tmm.data[b][k][4 * n + i];
                    u += (uint32_t)(av * bv);
                }
            memcpy(&g_tmm.data[c][m][4 * n], &u, 4);
        }
}

static float bf16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return tela_bf16_to_f32(h);
}

static void model_dpbf16(int c, int a, int b) {
    check_dims(c, a, b);
    for (int m = 0; m < g_tmm.rows[c]; m++)
        for (int n = 0; n < g_tmm.colsb[c] / 4; n++) {
            float acc;
            memcpy(&acc, &g_tmm.data[c][m][4 * n], 4);
            for (int k = 0; k < g_tmm.colsb[a] / 4; k++)
                for (int i = 0; i < 2; i++)
                    acc += bf16_at(&g_tmm.data[a][m][4 * k + 2 * i]) * bf16_at(&g_tmm.data[b][k][4 * n + 2 * i]);
            memcpy(&g_tmm.data[c][m][4 * n], &acc, 4);
        }
}

#define TELA_AMX_MODEL 1
#define AMX_LOAD_CONFIG(cfg) model_config(cfg)
#define AMX_RELEASE() ((void)0)
#define AMX_ZERO(t) model_zero(t)
#define AMX_LOAD(t, p, stride) model_load(t, (p), (long)(stride))
#define AMX_STORE(t, p, stride) model_store(t, (p), (long)(stride))
#define AMX_DPBSUD(c, a, b) model_dp(c, a, b, 0)
#define AMX_DPBSSD(c, a, b) model_dp(c, a, b, 1)
#define AMX_DPBF16PS(c, a, b) model_dpbf16(c, a, b)

/* The file's functions under other names (the library holds the real ones),
 * and a CPU that reports AMX. */
#define tela_qdot_amx_allow model_amx_allow
#define tela_qdot_amx_active model_amx_active
#define tela_qdot_amx_q8_active model_amx_q8_active
#define tela_qdot_amx_float_allow model_amx_float_allow
#define tela_qdot_amx_float_active model_amx_float_active
#define tela_qdot_amx_gemm_q4_K model_gemm_q4_K
#define tela_qdot_amx_gemm_q6_K model_gemm_q6_K
#define tela_qdot_amx_gemm_q8_0 model_gemm_q8_0
#define tela_qdot_amx_gemm_q4_0 model_gemm_q4_0
#define tela_qdot_amx_gemm_f16 model_gemm_f16
#define tela_qdot_amx_gemm_bf16 model_gemm_bf16
#define tela_cpu_get_features model_cpu_features
#define tela_cpu_request_amx model_request_amx

const tela_cpu_features *model_cpu_features(void);
bool model_request_amx(void);
bool model_request_amx(void) { return true; }

#include "../src/backend/cpu/qdot_pack_amx.c"

const tela_cpu_features *model_cpu_features(void) {
    static tela_cpu_features f = {.amx_int8 = true, .amx_bf16 = true};
    return &f;
}

/* ------------------------------------------------------------ the checks */

typedef bool (*amx_gemm_fn)(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                            int64_t n_cols, int64_t n, float *out, int64_t os);

static float next_float(float scale) { return (float)(2.0 * test_unif() - 1.0) * scale; }
static void *aligned64(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64 + 64); }

/* Random weights of a quantized type, through the reference quantizer
 * (rows of several dynamic ranges), or at the extremes: every byte 0xFF
 * (levels, scales and mins at their maxima) with sane d fields. */
static void make_weights(tela_type type, uint8_t *w, size_t ws, int64_t rows, int64_t n, int extreme) {
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = w + (size_t)r * ws;
        if (!extreme) {
            const float amp = r % 3 == 0 ? 4.0f : 0.05f;
            for (int64_t i = 0; i < n; i++) f[i] = next_float(amp) * (i % 37 == 0 ? 10.0f : 1.0f) + (r % 5 == 1 ? 0.3f : 0);
            CHECK_OK(tela_quantize_row(type, f, row, n));
            continue;
        }
        memset(row, 0xFF, tela_type_row_bytes(type, n));
        /* (rows at odd addresses: fields written through memcpy) */
        const uint16_t one = 0x3C00, half = 0x3800;
        if (type == TELA_TYPE_Q4_K) {
            for (int64_t b = 0; b < n / 256; b++) {
                uint8_t *k = row + (size_t)b * sizeof(tela_block_q4_K);
                memcpy(k + offsetof(tela_block_q4_K, d), &one, 2);
                memcpy(k + offsetof(tela_block_q4_K, dmin), &half, 2);
            }
        } else if (type == TELA_TYPE_Q6_K) {
            for (int64_t b = 0; b < n / 256; b++) {
                uint8_t *k = row + (size_t)b * sizeof(tela_block_q6_K);
                memset(k + offsetof(tela_block_q6_K, scales), r % 2 ? 0x80 : 0x7F, 16);
                memcpy(k + offsetof(tela_block_q6_K, d), &one, 2);
            }
        } else { /* Q8_0 (levels -1 as 0xFF: set them to -128 / 127) and Q4_0 (nibbles 15) */
            const size_t bs = type == TELA_TYPE_Q8_0 ? 34 : 18;
            for (int64_t b = 0; b < n / 32; b++) {
                uint8_t *blk = row + (size_t)b * bs;
                memcpy(blk, &one, 2);
                if (type == TELA_TYPE_Q8_0) memset(blk + 2, r % 2 ? 0x80 : 0x7F, 32);
            }
        }
    }
    free(f);
}

/* Activations in the weight type's vec_dot type (from_float of random
 * rows), or all levels 127 / -127 (extreme). */
static void make_x(const tela_qdot_traits *sc, uint8_t *xq, size_t xs, int64_t nc, int64_t n, int extreme) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t c = 0; c < nc; c++) {
        for (int64_t i = 0; i < n; i++) x[i] = extreme ? (c % 2 ? -1.0f : 1.0f) : next_float(2.0f);
        sc->from_float(x, xq + (size_t)c * xs, n);
    }
    free(x);
}

/* One shape of an int8 type: the model's AMX gemm against the packed VNNI
 * gemm (bitwise) and, for the K-quants, the scalar vec_dot (bitwise). */
static int check_int8(tela_type type, amx_gemm_fn amx, int64_t rows, int64_t n, int64_t nc, int64_t g0, int64_t g1,
                      int extreme) {
    const tela_qdot_traits *q = tela_qdot_get_isa(type, TELA_ISA_AVX512), *sc = tela_qdot_get_isa(type, TELA_ISA_SCALAR);
    const tela_qdot_packing *p = &q->packing;
    const tela_type xt = sc->vec_dot_type;
    const size_t wrb = tela_type_row_bytes(type, n), xrb = tela_type_row_bytes(xt, n);
    const size_t ws = wrb + 2, xs = xrb + 6; /* odd strides, as in a mapped file */
    uint8_t *wbuf = malloc(ws * (size_t)rows + 1), *w = wbuf + 1, *xq = malloc(xs * (size_t)nc);
    make_weights(type, w, ws, rows, n, extreme);
    make_x(sc, xq, xs, nc, n, extreme);
    const int64_t groups = (rows + 15) / 16;
    uint8_t *packed = aligned64(p->group_bytes(n) * (size_t)groups);
    p->pack(w, ws, rows, n, 0, groups, packed);
    const int64_t os = rows + 3;
    float *a = malloc(sizeof(float) * (size_t)(os * nc)), *v = malloc(sizeof(float) * (size_t)(os * nc));
    for (int64_t i = 0; i < os * nc; i++) a[i] = v[i] = -777.0f;
    CHECK(amx(packed, rows, g0, g1, xq, xs, nc, n, a, os));
    p->gemm(packed, rows, g0, g1, xq, xs, nc, n, v, os); /* the VNNI tiles (no real AMX in use) */
    const int kq = type == TELA_TYPE_Q4_K || type == TELA_TYPE_Q6_K;
    int bad = 0;
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < os; r++) {
            const float got = a[c * os + r];
            const int in = r < rows && r >= g0 * 16 && r < g1 * 16;
            float want = v[c * os + r];
            if (in && kq) {
                const float d = sc->vec_dot(w + (size_t)r * ws, xq + (size_t)c * xs, n);
                if (memcmp(&d, &want, 4) != 0 && bad++ < 3) fprintf(stderr, "VNNI tiles differ from vec_dot?\n");
                want = d;
            }
            if ((in ? memcmp(&got, &want, 4) != 0 : got != -777.0f) && bad++ < 3)
                fprintf(stderr, "%s rows %lld n %lld cols %lld [%lld,%lld)%s: out[%lld][%lld] = %.9g, want %.9g\n",
                        tela_type_name(type), (long long)rows, (long long)n, (long long)nc, (long long)g0, (long long)g1,
                        extreme ? " extreme" : "", (long long)c, (long long)r, got, want);
        }
    free(wbuf);
    free(xq);
    free(packed);
    free(a);
    free(v);
    return bad;
}

static void check_int8_type(tela_type type, amx_gemm_fn amx, int64_t blk) {
    int bad = 0, cases = 0;
    static const int64_t rows_l[] = {16, 17, 40}, cols_l[] = {16, 17, 31, 33, 48};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 5; j++)
            for (int64_t nb = 1; nb <= (blk == 256 ? 3 : 9); nb++, cases++) {
                const int64_t g = (rows_l[i] + 15) / 16;
                bad += check_int8(type, amx, rows_l[i], nb * blk, cols_l[j], 0, g, 0);
            }
    bad += check_int8(type, amx, 100, 8 * blk, 40, 2, 5, 0);        /* a sub-range of groups */
    bad += check_int8(type, amx, 33, 32 * blk, 150, 0, 3, 0);      /* long rows: several panels */
    bad += check_int8(type, amx, 32, 2 * blk, 19, 0, 2, 1);        /* extremes */
    bad += check_int8(type, amx, 17, 4 * blk, 64, 0, 2, 1);
    cases += 4;
    CHECK_MSG(bad == 0, "%s: %d outputs of the AMX tiles (model) wrong over %d shapes", tela_type_name(type), bad, cases);
}

/* F16 / BF16 on the bf16 tiles: against the double dot product. */
static void check_float(tela_type type, amx_gemm_fn amx) {
    const tela_qdot_traits *q = tela_qdot_get_isa(type, TELA_ISA_AVX512);
    const tela_qdot_packing *p = &q->packing;
    static const int64_t rows_l[] = {1, 16, 17, 40}, cols_l[] = {16, 17, 65, 130}, ns[] = {1, 31, 64, 300, 2048};
    int bad = 0;
    for (size_t a = 0; a < 5; a++)
        for (size_t i = 0; i < 4; i++)
            for (size_t j = 0; j < 4; j++) {
                const int64_t rows = rows_l[i], nc = cols_l[j], n = ns[a], groups = (rows + 15) / 16;
                uint16_t *w = malloc(2 * (size_t)(rows * n));
                float *x = malloc(sizeof(float) * (size_t)(nc * n)), *out = malloc(sizeof(float) * (size_t)(rows * nc));
                for (int64_t e = 0; e < rows * n; e++) {
                    const float f = next_float(e % 11 == 0 ? 300.0f : 1.0f);
                    w[e] = type == TELA_TYPE_F16 ? tela_f32_to_f16(f) : tela_f32_to_bf16(f);
                }
                for (int64_t e = 0; e < nc * n; e++) x[e] = next_float(e % 7 == 0 ? 30.0f : 1.0f);
                uint8_t *packed = aligned64(p->group_bytes(n) * (size_t)groups);
                p->pack(w, 2 * (size_t)n, rows, n, 0, groups, packed);
                CHECK(amx(packed, rows, 0, groups, x, sizeof(float) * (size_t)n, nc, n, out, rows));
                for (int64_t c = 0; c < nc; c++)
                    for (int64_t r = 0; r < rows; r++) {
                        double e = 0, mag = 0;
                        for (int64_t k = 0; k < n; k++) {
                            const double wk = type == TELA_TYPE_F16 ? tela_f16_to_f32(w[r * n + k]) : tela_bf16_to_f32(w[r * n + k]);
                            e += wk * x[c * n + k];
                            mag += fabs(wk * x[c * n + k]);
                        }
                        const float got = out[c * rows + r];
                        if (!(fabs(got - e) <= mag / 16384 + 1e-30) && bad++ < 3)
                            fprintf(stderr, "%s rows %lld n %lld cols %lld: out[%lld][%lld] = %.9g, double %.9g (sum |wx| %.3g)\n",
                                    tela_type_name(type), (long long)rows, (long long)n, (long long)nc, (long long)c,
                                    (long long)r, got, e, mag);
                    }
                free(w);
                free(x);
                free(out);
                free(packed);
            }
    CHECK_MSG(bad == 0, "%s: %d outputs of the bf16 tiles (model) outside the bound", tela_type_name(type), bad);
}

int main(void) {
    const tela_qdot_traits *q = tela_qdot_get_isa(TELA_TYPE_Q4_K, TELA_ISA_AVX512);
    if (!q || q->packing.pack_rows == 0) test_skip("no packed AVX-512 kernels on this CPU (the tiles use them)");
    model_amx_allow(true);
    model_amx_float_allow(true);
    CHECK(model_amx_active() && model_amx_q8_active() && model_amx_float_active());
    /* below 16 columns the tiles decline */
    CHECK(!model_gemm_q4_K(NULL, 16, 0, 1, NULL, 0, 15, 256, NULL, 16));
    check_int8_type(TELA_TYPE_Q4_K, model_gemm_q4_K, 256);
    check_int8_type(TELA_TYPE_Q6_K, model_gemm_q6_K, 256);
    check_int8_type(TELA_TYPE_Q8_0, model_gemm_q8_0, 32);
    check_int8_type(TELA_TYPE_Q4_0, model_gemm_q4_0, 32);
    check_float(TELA_TYPE_F16, model_gemm_f16);
    check_float(TELA_TYPE_BF16, model_gemm_bf16);
    return test_finish();
}
#else
int main(void) { test_skip("the AMX tiles are x86-64 code"); }
#endif
