/* test_qdot.c: the dot-product kernels of backend/cpu/qdot.h, every weight
 * type, on every instruction set this machine runs (scalar, AVX2, AVX-512,
 * NEON), against references built from the quant layer (written and tested
 * separately, against ggml's bytes):
 *  - activation quantizers give exactly the bytes of tela_quantize_row,
 *    including NaN, infinities, subnormals, ties and rounding halves;
 *  - (a) each dot product equals the sum over elements of the reference-
 *    dequantized weight times the reference-dequantized activation,
 *    computed in double, within float rounding: 1e-5 of sum |w*x| for the
 *    block types (each block's integer sum is exact; the float steps are
 *    n/256..n/32 roundings), and the classic bound (n/16 + 8) * 2^-23 of
 *    sum |w*x| for the float types (16 lanes of n/16 fused adds + a tree);
 *  - (b) it is within the activation quantization error of the f32 dot of
 *    the dequantized weights with the original activations: by the triangle
 *    inequality |result - sum w*x| <= (a)'s bound + sum |w| * |x - x_deq|;
 *  - every SIMD kernel gives bit-identical results to the scalar kernel of
 *    its type (they are specified to follow the same float steps), and gemm
 *    gives bit-identical results to vec_dot for every output, whatever the
 *    tile shapes, edges, strides and panel splits (so no result depends on
 *    thread count or batching);
 *  - sizes of one block, odd block counts, many blocks, odd float lengths,
 *    rows at unaligned addresses.
 * `test_qdot` runs in CI; the throughput benchmark is tests/bench_qdot.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/qdot.h"
#include "quant/quant.h"
#include "test.h"
#include "util/cpu_features.h"
#include "util/fp16.h"


/* Activations or weights: gaussian with a scale that varies per 64
 * elements, plus rare outliers (as real activations have). */
static void fill_floats(float *x, int64_t n, float scale) {
    float s = scale;
    for (int64_t i = 0; i < n; i++) {
        if (i % 64 == 0) s = scale * (float)(0.2 + 2.0 * test_unif());
        x[i] = s * test_gauss();
        if (test_rnd() % 97 == 0) x[i] *= 8.0f;
    }
}

static const tela_type k_types[] = {
    TELA_TYPE_F32, TELA_TYPE_F16, TELA_TYPE_BF16, TELA_TYPE_Q4_0, TELA_TYPE_Q4_1, TELA_TYPE_Q5_0, TELA_TYPE_Q5_1,
    TELA_TYPE_Q8_0, TELA_TYPE_IQ4_NL, TELA_TYPE_Q2_K, TELA_TYPE_Q3_K, TELA_TYPE_Q4_K, TELA_TYPE_Q5_K,
    TELA_TYPE_Q6_K, TELA_TYPE_IQ4_XS,
};
#define N_TYPES (int)(sizeof k_types / sizeof k_types[0])

static int is_float_type(tela_type t) { return t == TELA_TYPE_F32 || t == TELA_TYPE_F16 || t == TELA_TYPE_BF16; }

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint16_t rand_scale_f16(void) { return tela_f32_to_f16((float)(0.001 + 0.05 * test_unif()) * (test_rnd() & 1 ? 1.0f : -1.0f)); }

/* Random valid blocks: every bit pattern of the levels and packed scales is
 * valid; only the fp16 scales must be finite. Reaches the extremes (-128
 * levels, 6-bit scales of 63, all-ones high bits) that quantizing gaussian
 * data rarely produces. */
static void random_blocks(tela_type type, uint8_t *dst, int64_t n) {
    const size_t bytes = tela_type_row_bytes(type, n);
    for (size_t i = 0; i < bytes; i++) dst[i] = (uint8_t)test_rnd();
    const tela_type_traits *tt = tela_type_get_traits(type);
    const int64_t nb = n / tt->block_size;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = dst + (size_t)b * tt->block_bytes;
        switch (type) {
        case TELA_TYPE_Q4_0: case TELA_TYPE_Q5_0: case TELA_TYPE_Q8_0: case TELA_TYPE_IQ4_NL: case TELA_TYPE_IQ4_XS:
            put16(p, rand_scale_f16());
            break;
        case TELA_TYPE_Q4_1: case TELA_TYPE_Q5_1: case TELA_TYPE_Q4_K: case TELA_TYPE_Q5_K:
            put16(p, rand_scale_f16());
            put16(p + 2, rand_scale_f16());
            break;
        case TELA_TYPE_Q2_K:
            put16(p + offsetof(tela_block_q2_K, d), rand_scale_f16());
            put16(p + offsetof(tela_block_q2_K, dmin), rand_scale_f16());
            break;
        case TELA_TYPE_Q3_K: put16(p + offsetof(tela_block_q3_K, d), rand_scale_f16()); break;
        case TELA_TYPE_Q6_K: put16(p + offsetof(tela_block_q6_K, d), rand_scale_f16()); break;
        default: break;
        }
    }
    if (type == TELA_TYPE_F32) {
        for (int64_t i = 0; i < n; i++) { float v = test_gauss(); memcpy(dst + 4 * i, &v, 4); }
    } else if (type == TELA_TYPE_F16) {
        for (int64_t i = 0; i < n; i++) put16(dst + 2 * i, tela_f32_to_f16(test_gauss()));
    } else if (type == TELA_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) put16(dst + 2 * i, tela_f32_to_bf16(test_gauss()));
    }
}

/* One weight row: quantized from gaussian data by the reference quantizer
 * when the type has one (mode 0), else random valid blocks. */
static void make_weight_row(tela_type type, uint8_t *dst, int64_t n, int mode) {
    const tela_type_traits *tt = tela_type_get_traits(type);
    if (mode == 0 && tt->can_quantize) {
        float *f = malloc(sizeof(float) * (size_t)n);
        fill_floats(f, n, 0.05f);
        CHECK_OK(tela_quantize_row(type, f, dst, n));
        free(f);
    } else {
        random_blocks(type, dst, n);
    }
}

/* ------------------------------------------------ activation quantizers */

/* Finite input: exactly the reference quantizer's bytes. Any input (NaN,
 * infinities): every ISA gives the scalar kernel's bytes. */
static void check_quantizer_bytes(tela_isa isa, tela_type act_type, tela_type weight_type) {
    const tela_qdot_traits *q = tela_qdot_get_isa(weight_type, isa);
    const tela_qdot_traits *sc = tela_qdot_get_isa(weight_type, TELA_ISA_SCALAR);
    if (!q) return;
    CHECK_EQ_INT(q->vec_dot_type, act_type);
    const int64_t n = 256 * 6;
    const size_t rb = tela_type_row_bytes(act_type, n);
    float *x = malloc(sizeof(float) * n);
    uint8_t *ref = malloc(rb), *got = malloc(rb + 1);
    for (int trial = 0; trial < 12; trial++) {
        fill_floats(x, n, trial < 6 ? 1.0f : 1e-3f);
        int finite = 1;
        switch (trial) {
        case 1: /* ties of magnitude with both signs, first one negative */
            for (int i = 0; i < 64; i++) x[i] = (i % 3 == 0) ? -2.0f : (i % 3 == 1 ? 2.0f : 0.5f);
            break;
        case 2: /* values on rounding halves: with max 127, x*id = x */
            for (int64_t i = 0; i < n; i++) x[i] = (float)((int)(test_rnd() % 254) - 127) + 0.5f;
            for (int64_t i = 0; i < n; i += 32) x[i] = 127.0f;
            break;
        case 3: /* zeros, negative zeros, a zero super-block */
            for (int i = 0; i < 300; i++) x[i] = (i & 1) ? -0.0f : 0.0f;
            break;
        case 4: /* NaN and infinities */
            x[5] = NAN; x[40] = -NAN; x[300] = INFINITY; x[333] = -INFINITY; x[700] = INFINITY; x[701] = NAN;
            finite = 0;
            break;
        case 5: /* subnormals, huge values */
            for (int i = 0; i < 64; i++) x[i] = 1e-40f * (float)(i - 30);
            for (int i = 512; i < 540; i++) x[i] = 3e38f * (i & 1 ? 1.0f : -1.0f);
            x[1024] = 1e-42f;
            break;
        default: break;
        }
        if (finite) CHECK_OK(tela_quantize_row(act_type, x, ref, n));
        else sc->from_float(x, ref, n);
        memset(got, 0xAB, rb + 1);
        q->from_float(x, got + (trial & 1), n); /* also at an odd address */
        if (memcmp(ref, got + (trial & 1), rb) != 0) {
            size_t i = 0;
            while (ref[i] == got[(trial & 1) + i]) i++;
            CHECK_MSG(0, "%s from_float to %s, trial %d: byte %zu differs (%02x vs %s %02x)", tela_isa_name(isa),
                      tela_type_name(act_type), trial, i, got[(trial & 1) + i], finite ? "reference" : "scalar", ref[i]);
        } else {
            test_passed_++;
        }
    }
    free(x);
    free(ref);
    free(got);
}

/* ------------------------------------------------------- dot products */

typedef struct {
    double dot_deq;     /* sum w_deq * x_deq in double */
    double abs_deq;     /* sum |w_deq * x_deq| */
    double dot_orig;    /* sum w_deq * x in double */
    double act_err;     /* sum |w_deq| * |x - x_deq| */
} reference;

static reference make_reference(tela_type type, tela_type act_type, const uint8_t *w, const float *x,
                                const uint8_t *xq, int64_t n) {
    float *wd = malloc(sizeof(float) * n), *xd = malloc(sizeof(float) * n);
    CHECK_OK(tela_dequantize_row(type, w, wd, n));
    if (act_type == TELA_TYPE_F32) memcpy(xd, x, sizeof(float) * n);
    else CHECK_OK(tela_dequantize_row(act_type, xq, xd, n));
    reference r = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        r.dot_deq += (double)wd[i] * xd[i];
        r.abs_deq += fabs((double)wd[i] * xd[i]);
        r.dot_orig += (double)wd[i] * x[i];
        r.act_err += fabs((double)wd[i]) * fabs((double)x[i] - xd[i]);
    }
    free(wd);
    free(xd);
    return r;
}

/* (a)'s bound, see the top of the file. */
static double rounding_bound(tela_type type, int64_t n, double abs_sum) {
    if (is_float_type(type)) return ((double)n / 16 + 8) * ldexp(1.0, -23) * abs_sum + 1e-30;
    return 1e-5 * abs_sum + 1e-30;
}

/* Checks vec_dot of every ISA for nr weight rows x nc activation columns of
 * length n, rows placed `misalign` bytes off malloc's alignment, plus gemm
 * bit-identity with vec_dot. */
static void check_type(tela_type type, int64_t n, int mode, int misalign) {
    const tela_qdot_traits *sc = tela_qdot_get_isa(type, TELA_ISA_SCALAR);
    CHECK_MSG(sc != NULL, "no scalar kernel for %s", tela_type_name(type));
    if (!sc) return;
    const tela_type act = sc->vec_dot_type;
    enum { NR = 6, NC = 5 };
    const size_t wrb = tela_type_row_bytes(type, n), xrb = tela_type_row_bytes(act, n);
    const size_t ws = wrb + 32, xs = xrb + 64; /* strides larger than a row */
    /* the last row ends where the allocation does, so an over-read of a
     * kernel shows under AddressSanitizer */
    uint8_t *wbuf = malloc(misalign + ws * (NR - 1) + wrb), *xbuf = malloc(misalign + xs * (NC - 1) + xrb);
    uint8_t *w = wbuf + misalign, *xq = xbuf + misalign;
    float *x = malloc(sizeof(float) * n * NC);
    for (int r = 0; r < NR; r++) make_weight_row(type, w + r * ws, n, mode);
    for (int c = 0; c < NC; c++) {
        fill_floats(x + c * n, n, 1.0f);
        sc->from_float(x + c * n, xq + c * xs, n);
    }

    /* scalar kernel vs the references */
    float got_scalar[NR][NC];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) {
            const reference ref = make_reference(type, act, w + r * ws, x + c * n, xq + c * xs, n);
            const float v = sc->vec_dot(w + r * ws, xq + c * xs, n);
            got_scalar[r][c] = v;
            const double tol = rounding_bound(type, n, ref.abs_deq);
            CHECK_MSG(fabs(v - ref.dot_deq) <= tol, "%s n=%lld mode %d: %.9g vs exact %.9g (tol %.3g)",
                      tela_type_name(type), (long long)n, mode, v, ref.dot_deq, tol);
            const double tol_b = tol + ref.act_err * (1 + 1e-6) + 1e-30;
            CHECK_MSG(fabs(v - ref.dot_orig) <= tol_b, "%s n=%lld: %.9g vs f32 activations %.9g (tol %.3g)",
                      tela_type_name(type), (long long)n, v, ref.dot_orig, tol_b);
        }

    for (int isa = 0; isa < TELA_ISA_COUNT; isa++) {
        const tela_qdot_traits *q = tela_qdot_get_isa(type, (tela_isa)isa);
        if (!q) continue;
        CHECK_EQ_INT(q->vec_dot_type, act);
        CHECK_EQ_INT(q->block_size, sc->block_size);
        int bad = 0;
        for (int r = 0; r < NR; r++)
            for (int c = 0; c < NC; c++) {
                const float v = q->vec_dot(w + r * ws, xq + c * xs, n);
                if (memcmp(&v, &got_scalar[r][c], sizeof v) != 0 && bad++ < 3)
                    fprintf(stderr, "%s %s n=%lld misalign %d row %d col %d: %.9g, scalar %.9g\n",
                            tela_isa_name((tela_isa)isa), tela_type_name(type), (long long)n, misalign, r, c, v,
                            got_scalar[r][c]);
            }
        CHECK_MSG(bad == 0, "%s %s: %d vec_dot results differ from the scalar kernel's", tela_isa_name((tela_isa)isa),
                  tela_type_name(type), bad);

        /* gemm over every sub-rectangle shape (edges of every kind) */
        const int64_t os = NR + 3;
        float *out = malloc(sizeof(float) * os * NC);
        bad = 0;
        for (int nr = 1; nr <= NR; nr++)
            for (int nc = 1; nc <= NC; nc++) {
                for (int i = 0; i < os * NC; i++) out[i] = -12345.0f;
                q->gemm(w, ws, nr, xq, xs, nc, n, out, os);
                for (int c = 0; c < NC; c++)
                    for (int r = 0; r < os; r++) {
                        const float v = out[c * os + r];
                        if (r < nr && c < nc) {
                            if (memcmp(&v, &got_scalar[r][c], sizeof v) != 0 && bad++ < 3)
                                fprintf(stderr, "%s %s gemm %dx%d: out[%d][%d] = %.9g, vec_dot %.9g\n",
                                        tela_isa_name((tela_isa)isa), tela_type_name(type), nr, nc, c, r, v,
                                        got_scalar[r][c]);
                        } else if (v != -12345.0f && bad++ < 3) {
                            fprintf(stderr, "%s %s gemm %dx%d wrote outside its outputs at [%d][%d]\n",
                                    tela_isa_name((tela_isa)isa), tela_type_name(type), nr, nc, c, r);
                        }
                    }
            }
        CHECK_MSG(bad == 0, "%s %s n=%lld: %d gemm outputs wrong", tela_isa_name((tela_isa)isa), tela_type_name(type),
                  (long long)n, bad);
        free(out);
    }
    free(wbuf);
    free(xbuf);
    free(x);
}

/* A bigger gemm (several tiles and column panels) against vec_dot. */
static void check_big_gemm(tela_type type, tela_isa isa) {
    const tela_qdot_traits *q = tela_qdot_get_isa(type, isa);
    if (!q) return;
    const int64_t n = 4096, nr = 11, nc = 170; /* panels of ~384 KB: 4096 q8 cols ~ 4.3 KB each */
    const size_t wrb = tela_type_row_bytes(type, n), xrb = tela_type_row_bytes(q->vec_dot_type, n);
    uint8_t *w = malloc(wrb * nr), *xq = malloc(xrb * nc);
    float *x = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * nr * nc);
    for (int r = 0; r < nr; r++) make_weight_row(type, w + r * wrb, n, 1);
    for (int c = 0; c < nc; c++) {
        fill_floats(x, n, 1.0f);
        q->from_float(x, xq + c * xrb, n);
    }
    q->gemm(w, wrb, nr, xq, xrb, nc, n, out, nr);
    int bad = 0;
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++) {
            const float v = q->vec_dot(w + r * wrb, xq + c * xrb, n);
            if (memcmp(&v, &out[c * nr + r], sizeof v) != 0) bad++;
        }
    CHECK_MSG(bad == 0, "%s %s big gemm: %d outputs differ from vec_dot", tela_isa_name(isa), tela_type_name(type), bad);
    free(w);
    free(xq);
    free(x);
    free(out);
}

int main(void) {
    test_rng_seed(0x9e3779b97f4a7c15ull);
    char feat[256];
    printf("cpu: %s; best ISA %s\n", tela_cpu_features_string(feat, sizeof feat), tela_isa_name(tela_qdot_best_isa()));
    CHECK(tela_qdot_get(TELA_TYPE_Q4_K) != NULL);
    CHECK(tela_qdot_get(TELA_TYPE_I32) == NULL);
    CHECK(tela_qdot_get((tela_type)-1) == NULL);
    CHECK(tela_qdot_get_isa(TELA_TYPE_Q4_K, TELA_ISA_COUNT) == NULL);

    for (int isa = 0; isa < TELA_ISA_COUNT; isa++) {
        if (!tela_qdot_get_isa(TELA_TYPE_F32, (tela_isa)isa)) continue;
        printf("checking %s\n", tela_isa_name((tela_isa)isa));
        check_quantizer_bytes((tela_isa)isa, TELA_TYPE_Q8_0, TELA_TYPE_Q4_0);
        check_quantizer_bytes((tela_isa)isa, TELA_TYPE_Q8_K, TELA_TYPE_Q4_K);
    }

    for (int t = 0; t < N_TYPES; t++) {
        const tela_type type = k_types[t];
        const tela_qdot_traits *q = tela_qdot_get(type);
        CHECK_MSG(q != NULL, "no kernel for %s", tela_type_name(type));
        if (!q) continue;
        const int64_t bs = q->block_size;
        if (is_float_type(type)) {
            const int64_t sizes[] = {1, 7, 16, 17, 33, 255, 1000, 2048};
            for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) check_type(type, sizes[i], (int)(i & 1), 4 * (int)(i % 3));
        } else {
            const int64_t blocks[] = {1, 2, 3, 5, 8, 16};
            for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
                for (int mode = 0; mode < 2; mode++) check_type(type, blocks[i] * bs, mode, (int)(i % 4) * 3 + mode);
        }
        for (int isa = 0; isa < TELA_ISA_COUNT; isa++) check_big_gemm(type, (tela_isa)isa);
    }
    return test_finish();
}
