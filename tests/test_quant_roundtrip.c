/* test_quant_roundtrip.c: quantize -> dequantize on pseudo-random data
 * (fixed seed). Checks error bounds derived from each format's definition,
 * exact round trips of values already on a type's grid, and the handling of
 * bad arguments (non-finite input, partial blocks, types without a
 * quantizer). */
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"
#include "test.h"
#include "util/fp16.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double uniform01(void) {  /* 53-bit uniform in (0, 1) from an LCG */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) { return (float)(sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01())); }

#define N (64 * 256)
static float x[N], y[N];
static uint8_t q[N * 8];  /* room for f64 */

static double rel_rmse(tela_type type) {
    CHECK_OK(tela_quantize_row(type, x, q, N));
    CHECK_OK(tela_dequantize_row(type, q, y, N));
    double err = 0, ref = 0;
    for (int i = 0; i < N; i++) {
        err += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        ref += (double)x[i] * x[i];
    }
    return sqrt(err / ref);
}

/* Relative RMSE on N(0,1) data. For a uniform grid of step s the RMSE is
 * about s / sqrt(12); Q8_0's step is amax/127 with amax of 32 gaussians
 * ~2.3, so ~0.0052; 4-bit types have 16 levels, ~0.07-0.09. K-quants' fitted
 * scales and mins must beat the plain min/max types of the same width. */
static void test_error_bounds(void) {
    for (int i = 0; i < N; i++) x[i] = gauss();
    const struct { tela_type type; double bound; } cases[] = {
        {TELA_TYPE_Q8_0, 0.006}, {TELA_TYPE_Q8_1, 0.006}, {TELA_TYPE_Q8_K, 0.008},
        {TELA_TYPE_Q6_K, 0.025}, {TELA_TYPE_Q5_K, 0.05},  {TELA_TYPE_Q4_K, 0.1},
        {TELA_TYPE_Q3_K, 0.2},   {TELA_TYPE_Q2_K, 0.4},   {TELA_TYPE_Q5_0, 0.05},
        {TELA_TYPE_Q5_1, 0.05},  {TELA_TYPE_Q4_0, 0.1},   {TELA_TYPE_Q4_1, 0.1},
        {TELA_TYPE_F16, 0.0005}, {TELA_TYPE_BF16, 0.004}, {TELA_TYPE_F32, 0.0},
        {TELA_TYPE_F64, 0.0},
    };
    double e[TELA_TYPE_COUNT] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        e[cases[i].type] = rel_rmse(cases[i].type);
        CHECK_MSG(e[cases[i].type] <= cases[i].bound, "%s relative RMSE %.5f > %.5f", tela_type_name(cases[i].type),
                  e[cases[i].type], cases[i].bound);
    }
    /* More bits, less error; fitted K-quant scales beat plain min/max. */
    CHECK(e[TELA_TYPE_Q2_K] > e[TELA_TYPE_Q3_K]);
    CHECK(e[TELA_TYPE_Q3_K] > e[TELA_TYPE_Q4_K]);
    CHECK(e[TELA_TYPE_Q4_K] > e[TELA_TYPE_Q5_K]);
    CHECK(e[TELA_TYPE_Q5_K] > e[TELA_TYPE_Q6_K]);
    CHECK(e[TELA_TYPE_Q6_K] > e[TELA_TYPE_Q8_0]);
    CHECK(e[TELA_TYPE_Q4_K] < e[TELA_TYPE_Q4_1]);
    CHECK(e[TELA_TYPE_Q5_K] < e[TELA_TYPE_Q5_1]);
    /* Sizes: bits per weight as the formats define them. */
    CHECK_EQ_INT(tela_type_row_bytes(TELA_TYPE_Q4_K, 256) * 8, 256 * 4.5);
    CHECK_EQ_INT(tela_type_row_bytes(TELA_TYPE_Q6_K, 256) * 8, 256 * 6.5625);
}

/* Q8_0, per element: with d = amax/127 (f32) and q = round(x/d), |x - q*d|
 * <= d/2; the stored d is d rounded to fp16, which moves a value by at most
 * |q| * |d - d16| <= 127 * |d - d16|. */
static void test_q8_0_per_element(void) {
    for (int i = 0; i < N; i++) x[i] = gauss() * (float)(i / 256 + 1) * 0.01f;
    CHECK_OK(tela_quantize_row(TELA_TYPE_Q8_0, x, q, N));
    CHECK_OK(tela_dequantize_row(TELA_TYPE_Q8_0, q, y, N));
    int bad = 0;
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        const double d = amax / 127.0f;
        const double d16 = tela_f16_to_f32((uint16_t)(q[34 * b] | q[34 * b + 1] << 8));
        CHECK_MSG(fabs(d16 - d) <= d * 0x1p-11, "block %d: stored d %.9g is not d = %.9g in fp16", b, d16, d);
        for (int j = 0; j < 32; j++)
            if (fabs((double)x[32 * b + j] - y[32 * b + j]) > 0.5 * d * (1 + 1e-6) + 127 * fabs(d - d16)) bad++;
    }
    CHECK_MSG(bad == 0, "q8_0: %d elements beyond d/2", bad);
}

/* Q4_0, per element: d = max/-8 (max = the value of largest magnitude), so
 * x/d lies in [-8, 8]; values with x/d <= 7.5 round to a level within d/2
 * (+ 8 |d - d16| for d's fp16 rounding); those above 7.5 clamp to level 7. */
static void test_q4_0_per_element(void) {
    for (int i = 0; i < N; i++) x[i] = gauss();
    CHECK_OK(tela_quantize_row(TELA_TYPE_Q4_0, x, q, N));
    CHECK_OK(tela_dequantize_row(TELA_TYPE_Q4_0, q, y, N));
    int bad = 0, clamped = 0;
    for (int b = 0; b < N / 32; b++) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[32 * b + j]) > amax) { amax = fabsf(x[32 * b + j]); max = x[32 * b + j]; }
        const double d = max / -8.0f;
        const double d16 = tela_f16_to_f32((uint16_t)(q[18 * b] | q[18 * b + 1] << 8));
        for (int j = 0; j < 32; j++) {
            const double v = x[32 * b + j], got = y[32 * b + j];
            if (v / d > 7.5) {
                clamped++;
                if (got != (float)(7 * d16)) bad++;
            } else if (fabs(v - got) > 0.5 * fabs(d) * (1 + 1e-6) + 8 * fabs(d - d16)) {
                bad++;
            }
        }
    }
    CHECK_MSG(bad == 0, "q4_0: %d elements off", bad);
    CHECK(clamped > 0);  /* the data does reach the clamp */
}

/* Values already on a type's grid come back exactly. */
static void test_exact_grids(void) {
    /* every finite f16 -> f32 -> f16 -> f32 */
    static float h[65536];
    int n = 0;
    for (uint32_t b = 0; b < 65536; b++)
        if ((b & 0x7c00) != 0x7c00) h[n++] = tela_f16_to_f32((uint16_t)b);
    n -= n % 2;
    CHECK_OK(tela_quantize_row(TELA_TYPE_F16, h, q, n));
    static float back[65536];
    CHECK_OK(tela_dequantize_row(TELA_TYPE_F16, q, back, n));
    CHECK(memcmp(h, back, (size_t)n * sizeof(float)) == 0);

    /* bf16: any float whose low 16 bits are zero */
    for (int i = 0; i < 4096; i++) x[i] = tela_bits_to_f32((uint32_t)(rng = rng * 6364136223846793005ull + 1) & 0xbfff0000u);
    CHECK_OK(tela_quantize_row(TELA_TYPE_BF16, x, q, 4096));
    CHECK_OK(tela_dequantize_row(TELA_TYPE_BF16, q, y, 4096));
    CHECK(memcmp(x, y, 4096 * sizeof(float)) == 0);

    /* Q8_0: integers k * 2^-5 with |k| <= 127 and one |k| = 127 per block:
     * d = 127 * 2^-5 / 127 = 2^-5 exactly, q = k. */
    for (int i = 0; i < 1024; i++) {
        int k = (int)(uniform01() * 255) - 127;
        if (i % 32 == 7) k = (i / 32) % 2 ? 127 : -127;
        x[i] = (float)k * 0x1p-5f;
    }
    CHECK_OK(tela_quantize_row(TELA_TYPE_Q8_0, x, q, 1024));
    CHECK_OK(tela_dequantize_row(TELA_TYPE_Q8_0, q, y, 1024));
    CHECK(memcmp(x, y, 1024 * sizeof(float)) == 0);
    CHECK_OK(tela_quantize_row(TELA_TYPE_Q8_K, x, q, 1024));  /* d = +-2^-5 too */
    CHECK_OK(tela_dequantize_row(TELA_TYPE_Q8_K, q, y, 1024));
    CHECK(memcmp(x, y, 1024 * sizeof(float)) == 0);

    /* Q4_0: levels (l - 8) * 2^-3 with level 0 (-1.0) the largest magnitude
     * in each block: d = -1 / -8 = 2^-3. Q5_0 likewise with -16 * 2^-4. */
    for (int i = 0; i < 1024; i++) x[i] = (float)((int)(uniform01() * 16) - 8) * 0.125f;
    for (int b = 0; b < 32; b++) x[32 * b + (b % 32)] = -1.0f;
    CHECK_OK(tela_quantize_row(TELA_TYPE_Q4_0, x, q, 1024));
    CHECK_OK(tela_dequantize_row(TELA_TYPE_Q4_0, q, y, 1024));
    CHECK(memcmp(x, y, 1024 * sizeof(float)) == 0);
    for (int i = 0; i < 1024; i++) x[i] = (float)((int)(uniform01() * 32) - 16) * 0.0625f;
    for (int b = 0; b < 32; b++) x[32 * b + 31 - b] = -1.0f;
    CHECK_OK(tela_quantize_row(TELA_TYPE_Q5_0, x, q, 1024));
    CHECK_OK(tela_dequantize_row(TELA_TYPE_Q5_0, q, y, 1024));
    CHECK(memcmp(x, y, 1024 * sizeof(float)) == 0);

    /* Q6_K: k * 2^-3, k in -32..31, each 16-value group reaching -32: the
     * fitted group scale is 2^-3, the block scale d = 2^-3 / -128 = -2^-10
     * (exact in fp16) with group scales -128, so q = k again. */
    for (int i = 0; i < 1024; i++) {
        x[i] = (float)((int)(uniform01() * 64) - 32) * 0.125f;
        if (i % 16 == 5) x[i] = -4.0f;
    }
    CHECK_OK(tela_quantize_row(TELA_TYPE_Q6_K, x, q, 1024));
    CHECK_OK(tela_dequantize_row(TELA_TYPE_Q6_K, q, y, 1024));
    CHECK(memcmp(x, y, 1024 * sizeof(float)) == 0);

    /* Q4_K / Q5_K: levels 0..nmax with step 2^-3 and offset -1 in every
     * 32-value group (both ends present). The fit recovers step 1/8 and min
     * 1 with zero error; the 6-bit scales become 63 against d = (1/8)/63,
     * which fp16 cannot hold exactly, so values come back within a tiny
     * multiple of fp16's precision, far below half a step (1/16). */
    for (int nmax = 15; nmax <= 31; nmax += 16) {
        for (int i = 0; i < 1024; i++) {
            int l = (int)(uniform01() * (nmax + 1));
            if (i % 32 == 3) l = 0;
            if (i % 32 == 20) l = nmax;
            x[i] = (float)l * 0.125f - 1.0f;
        }
        const tela_type t = nmax == 15 ? TELA_TYPE_Q4_K : TELA_TYPE_Q5_K;
        CHECK_OK(tela_quantize_row(t, x, q, 1024));
        CHECK_OK(tela_dequantize_row(t, q, y, 1024));
        double worst = 0;
        for (int i = 0; i < 1024; i++) worst = fmax(worst, fabs((double)x[i] - y[i]));
        CHECK_MSG(worst < 0.01, "%s grid values: max error %g", tela_type_name(t), worst);
    }

    /* All zeros: every type gives zeros back. */
    memset(x, 0, 1024 * sizeof(float));
    for (int t = 0; t < TELA_TYPE_COUNT; t++) {
        const tela_type_traits *tr = tela_type_get_traits((tela_type)t);
        if (!tr || !tr->can_quantize) continue;
        memset(y, 0xFF, 1024 * sizeof(float));
        CHECK_OK(tela_quantize_row((tela_type)t, x, q, 1024));
        CHECK_OK(tela_dequantize_row((tela_type)t, q, y, 1024));
        int nonzero = 0;
        for (int i = 0; i < 1024; i++) nonzero += y[i] != 0.0f;
        CHECK_MSG(nonzero == 0, "%s: zeros came back as %d non-zeros", tr->name, nonzero);
    }
}

/* A tensor row in a file has no alignment guarantee: quantize into and
 * dequantize from an odd address. */
static void test_unaligned(void) {
    for (int i = 0; i < 512; i++) x[i] = gauss();
    static uint8_t aligned[2 * 210], odd[2 * 210 + 1];
    CHECK_OK(tela_quantize_row(TELA_TYPE_Q6_K, x, aligned, 512));
    CHECK_OK(tela_quantize_row(TELA_TYPE_Q6_K, x, odd + 1, 512));
    CHECK(memcmp(aligned, odd + 1, sizeof aligned) == 0);
    CHECK_OK(tela_dequantize_row(TELA_TYPE_Q6_K, odd + 1, y, 512));
}

static void test_errors(void) {
    float v[256];
    for (int i = 0; i < 256; i++) v[i] = 1.0f;
    v[77] = NAN;
    CHECK(tela_quantize_row(TELA_TYPE_Q4_K, v, q, 256) == TELA_ERR_ARG);
    CHECK(strstr(tela_last_error(), "77") != NULL);
    v[77] = INFINITY;
    CHECK(tela_quantize_row(TELA_TYPE_Q8_0, v, q, 256) == TELA_ERR_ARG);
    /* float types store inf as inf */
    CHECK_OK(tela_quantize_row(TELA_TYPE_F16, v, q, 256));
    CHECK(q[2 * 77] == 0x00 && q[2 * 77 + 1] == 0x7C);
    v[77] = 1.0f;
    CHECK(tela_quantize_row(TELA_TYPE_Q4_0, v, q, 48) == TELA_ERR_ARG);  /* 1.5 blocks */
    CHECK(tela_quantize_row(TELA_TYPE_Q6_K, v, q, -256) == TELA_ERR_ARG);
    CHECK(tela_quantize_row(TELA_TYPE_IQ4_NL, v, q, 32) == TELA_ERR_UNSUPPORTED);
    CHECK(strstr(tela_last_error(), "iq4_nl") != NULL);
    CHECK(tela_quantize_row(TELA_TYPE_I32, v, q, 32) == TELA_ERR_UNSUPPORTED);
    CHECK(tela_quantize_row((tela_type)5, v, q, 32) == TELA_ERR_UNSUPPORTED);
    CHECK(tela_quantize_row(TELA_TYPE_Q8_0, NULL, q, 32) == TELA_ERR_ARG);
    /* tiny but finite values (far below fp16's range) must not misbehave */
    for (int i = 0; i < 256; i++) v[i] = (i % 3 - 1) * 1e-40f;
    for (int t = 0; t < TELA_TYPE_COUNT; t++) {
        const tela_type_traits *tr = tela_type_get_traits((tela_type)t);
        if (!tr || !tr->can_quantize) continue;
        CHECK_OK(tela_quantize_row((tela_type)t, v, q, 256));
        CHECK_OK(tela_dequantize_row((tela_type)t, q, y, 256));
        for (int i = 0; i < 256; i++) CHECK(isfinite(y[i]) && fabsf(y[i]) < 1e-30f);
    }
    /* huge finite values: no crash (scales overflow fp16 to inf, as in ggml) */
    for (int i = 0; i < 256; i++) v[i] = (i % 2 ? 1 : -1) * (FLT_MAX / 7) * (float)(i % 7);
    for (int t = 0; t < TELA_TYPE_COUNT; t++) {
        const tela_type_traits *tr = tela_type_get_traits((tela_type)t);
        if (!tr || !tr->can_quantize) continue;
        CHECK_OK(tela_quantize_row((tela_type)t, v, q, 256));
        CHECK_OK(tela_dequantize_row((tela_type)t, q, y, 256));
    }
}

int main(void) {
    test_error_bounds();
    test_q8_0_per_element();
    test_q4_0_per_element();
    test_exact_grids();
    test_unaligned();
    test_errors();
    return test_finish();
}
