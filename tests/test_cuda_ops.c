/* test_cuda_ops.c: the CUDA backend's operations through backend.h, each
 * against an independent reference computed on the host in double
 * precision (weights dequantized by quant/dequant.c, the oracle of the
 * CPU kernels), on fresh random data, with the outputs poisoned (NaN)
 * before every call so that an element left unwritten fails:
 *   - matmul of every GPU weight type: the decode kernels (1..8 tokens,
 *     activations quantized to 8 bits; float ones on the tensor cores),
 *     the prefill path (dequantized panels through cuBLAS), the exact
 *     mode, accumulation, and the fused SwiGLU pair, for both variants of
 *     the decode kernels (TELA_CUDA_GEMV=2); a product of 2-8 tokens
 *     gives each token the bits of a one-token product (quantized and F32
 *     weights; F16/BF16 with TELA_CUDA_GEMV_FM=1);
 *   - a chain of one-token quantized products, each reading the one
 *     before's output with no download in between;
 *   - embedding rows, RMSNorm, RoPE (both pair conventions), add, argmax
 *     (ties go to the lower index);
 *   - attention over f16 and f32 caches: decode steps at short and long
 *     contexts (several splits), short prefills, and the flash kernel
 *     (head_dim 64 and 128), against the CPU backend's f32 attention;
 *   - KV cache snapshot images: save, clear, load, same results;
 *   - kernels that quantize their output for the product after them
 *     (tela_exec_next_input_of): the same bits as the product's own
 *     quantization, in one launch fewer.
 * Skipped (77) without CUDA or a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "quant/quant.h"
#include "test.h"
#include "test_cuda_mem.h"
#include "util/fp16.h"

static tela_backend *cpu;
static tela_exec *cx;

/* A random matrix of a type: stored bytes (host) and its dequantized
 * values (the reference). */
typedef struct {
    tela_mat m;
    void *data;
    float *deq;
} test_mat;

static void make_mat(test_mat *t, tela_type type, int64_t rows, int64_t cols, int idx) {
    const tela_type_traits *tr = tela_type_get_traits(type);
    size_t rb = tela_type_row_bytes(type, cols);
    t->data = malloc(rb * (size_t)rows);
    t->deq = malloc(sizeof(float) * (size_t)(rows * cols));
    float *src = rand_floats((size_t)cols, 1.0f);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) src[c] = test_gauss() * (0.5f + (float)(r % 7) * 0.1f);
        unsigned char *dst = (unsigned char *)t->data + (size_t)r * rb;
        if (type == TELA_TYPE_F32) memcpy(dst, src, (size_t)cols * 4);
        else if (type == TELA_TYPE_F16)
            for (int64_t c = 0; c < cols; c++) ((uint16_t *)dst)[c] = tela_f32_to_f16(src[c]);
        else if (type == TELA_TYPE_BF16)
            for (int64_t c = 0; c < cols; c++) ((uint16_t *)dst)[c] = tela_f32_to_bf16(src[c]);
        else CHECK_OK(tela_quantize_row(type, src, dst, cols));
        CHECK_OK(tela_dequantize_row(type, dst, t->deq + (size_t)r * cols, cols));
    }
    free(src);
    static char names[16][64];
    snprintf(names[idx % 16], sizeof names[0], "test.%s.%d", tr ? tr->name : "?", idx);
    t->m = (tela_mat){.name = names[idx % 16], .type = type, .data = t->data, .n_rows = rows, .n_cols = cols,
                      .row_bytes = rb};
}

static void free_mat(test_mat *t) {
    free(t->data);
    free(t->deq);
}

static void ref_matmul(const test_mat *w, const float *x, int n_tok, double *y) {
    const int64_t R = w->m.n_rows, K = w->m.n_cols;
    for (int t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < R; r++) {
            double s = 0;
            for (int64_t c = 0; c < K; c++) s += (double)w->deq[r * K + c] * x[(size_t)t * K + c];
            y[(size_t)t * R + r] = s;
        }
}

static const tela_type gpu_types[] = {TELA_TYPE_F32, TELA_TYPE_F16, TELA_TYPE_BF16, TELA_TYPE_Q8_0,
                                      TELA_TYPE_Q4_0, TELA_TYPE_Q4_K, TELA_TYPE_Q5_K, TELA_TYPE_Q6_K};

/* The bound for a path: the exact mode computes in f32; the decode kernels
 * quantize activations to 8 bits per 32 for quantized weights (about
 * 0.3% of each product); the prefill path rounds activations and weights
 * to f16 (bf16: 8 bits of mantissa). */
/* Float products of up to 8 tokens take the decode kernels (f32
 * activations, or their hi + lo parts on the tensor cores); with
 * TELA_CUDA_GEMV_FM=0, cuBLAS (f16/bf16 activations) from
 * TELA_CUDA_FLOAT_GEMM tokens on (3) for matrices of at least
 * TELA_CUDA_FLOAT_GEMM_BYTES (4 MiB: none of this file's, unless the
 * variant sets 0). */
static bool float_gemm(tela_type type, int n_tok) {
    const char *t = getenv("TELA_CUDA_FLOAT_GEMM"), *b = getenv("TELA_CUDA_FLOAT_GEMM_BYTES"),
               *fm = getenv("TELA_CUDA_GEMV_FM");
    if (!(fm && !strcmp(fm, "0"))) return false; /* the tensor-core kernel takes F16/BF16 up to 8 tokens */
    const int min = t && t[0] >= '2' && t[0] <= '9' && !t[1] ? t[0] - '0' : 3;
    const long long bytes = b && b[0] >= '0' && b[0] <= '9' ? atoll(b) : 4ll << 20;
    return (type == TELA_TYPE_F16 || type == TELA_TYPE_BF16) && n_tok >= min && 299ll * 1024 * 2 >= bytes;
}

/* Whether a product of several tokens must give each token a one-token
 * product's bits: the quantized and F32 decode kernels; F16/BF16 with
 * TELA_CUDA_GEMV_FM=1, where one token takes the tensor-core kernel of
 * 2-8 tokens (by default it takes the faster early-load kernel, which
 * rounds otherwise), and single matrices (not the SwiGLU pair) with
 * TELA_CUDA_GEMV_ROWS=4, where one token takes the 4-rows-a-warp kernel
 * and several take its several-token form (the output heads' route). */
static bool same_bits_expected(tela_type type, bool swiglu) {
    const char *fm = getenv("TELA_CUDA_GEMV_FM"), *rows = getenv("TELA_CUDA_GEMV_ROWS");
    const char *gb = getenv("TELA_CUDA_FLOAT_GEMM_BYTES");
    /* an opt-in setting where one token takes another kernel than several:
     * cuBLAS for several F32 tokens */
    if (type == TELA_TYPE_F32 && gb && !strcmp(gb, "0")) return false;
    if (type != TELA_TYPE_F16 && type != TELA_TYPE_BF16) return true;
    if (fm && !strcmp(fm, "1")) return true;
    return !swiglu && rows && !strcmp(rows, "4") && !(fm && !strcmp(fm, "0"));
}

static int gemv_variant = 1; /* the decode products under test (2: TELA_CUDA_GEMV=2) */

static double bound(tela_type type, int n_tok, bool exact) {
    if (exact || type == TELA_TYPE_F32) return 2e-5;
    if (n_tok <= 8 && !float_gemm(type, n_tok))
        return type == TELA_TYPE_F16 || type == TELA_TYPE_BF16 ? 2e-5 : 1.5e-2;
    return type == TELA_TYPE_BF16 ? 1e-2 : 2e-3;
}

/* silu(W x) * (W2 x): the two products' errors compound, and rows where
 * the product cancels weigh more in the relative error. With 8-bit
 * activations (the fast mode's quantized products) a draw of 45 rows
 * reaches 3.5%: the CPU backend's VNNI products (another implementation of
 * the same rounding) give 0.0348 on the data the GPU gave 0.0346 for (the
 * second variant's 45 x 4352 Q8_0, one token), against 0.5-1.3% elsewhere. */
static double swiglu_bound(tela_type type, int n_tok, bool exact) {
    const bool act8 = !exact && n_tok <= 8 && type != TELA_TYPE_F32 && type != TELA_TYPE_F16 && type != TELA_TYPE_BF16;
    return (act8 ? 3 : 2) * bound(type, n_tok, exact);
}

/* R x K matrices of every type (of the quantized ones with quant_only)
 * against the float64 reference, for each token count of toks[0..n_toks). */
static void test_matmul_shape(int64_t R, int64_t K, const int *toks, size_t n_toks, bool quant_only) {
    for (size_t ti = 0; ti < sizeof gpu_types / sizeof gpu_types[0]; ti++) {
        tela_type type = gpu_types[ti];
        if (quant_only && (type == TELA_TYPE_F32 || type == TELA_TYPE_F16 || type == TELA_TYPE_BF16)) continue;
        test_mat w, w2;
        make_mat(&w, type, R, K, (int)ti);
        make_mat(&w2, type, R, K, (int)ti + 8);
        tela_mat *list[2] = {&w.m, &w2.m};
        tela_mat_use uses[2] = {TELA_MAT_MATMUL, TELA_MAT_MATMUL};
        CHECK_OK(tela_backend_prepare_mats(gpu, list, uses, 2, 0));
        for (size_t k = 0; k < n_toks; k++) {
            for (int exact = 0; exact < 2; exact++) {
                const int nt = toks[k];
                if (exact && nt > 17) continue;
                tela_ops_set_exact_matmul(exact);
                float *x = rand_floats((size_t)nt * K, 1.0f);
                double *ref = malloc(sizeof(double) * (size_t)nt * R), *ref2 = malloc(sizeof(double) * (size_t)nt * R);
                ref_matmul(&w, x, nt, ref);
                ref_matmul(&w2, x, nt, ref2);
                float *dx = dmalloc((size_t)nt * K * 4), *dy = dmalloc((size_t)nt * R * 4);
                float *y = malloc((size_t)nt * R * 4);
                up(dx, x, (size_t)nt * K * 4);
                /* plain */
                poison(dy, (size_t)nt * R);
                tela_exec_matmul(gx, &w.m, dx, K, dy, R, nt, false);
                down(y, dy, (size_t)nt * R * 4);
                double e = rel_err(y, ref, (size_t)nt * R);
                CHECK_MSG(e <= bound(type, nt, exact), "matmul %s n_tok %d exact %d: rel err %.3g",
                          tela_type_name(type), nt, exact, e);
                /* a product of several tokens gives each token the bits of a
                 * decode step of that token alone (speculative decoding's
                 * greedy identity rests on it) */
                if (!exact && nt > 1 && nt <= 8 && same_bits_expected(type, false)) {
                    float *y1 = malloc((size_t)R * 4);
                    int same = 1;
                    for (int t = 0; t < nt; t++) {
                        poison(dy, (size_t)R);
                        tela_exec_matmul(gx, &w.m, dx + (size_t)t * K, K, dy, R, 1, false);
                        down(y1, dy, (size_t)R * 4);
                        same = same && !memcmp(y1, y + (size_t)t * R, (size_t)R * 4);
                    }
                    CHECK_MSG(same, "matmul %s: a product of %d tokens differs in bits from one-token products",
                              tela_type_name(type), nt);
                    free(y1);
                    poison(dy, (size_t)nt * R);
                    tela_exec_matmul(gx, &w.m, dx, K, dy, R, nt, false);
                }
                /* accumulate: y += W2 x on top of W x */
                tela_exec_matmul(gx, &w2.m, dx, K, dy, R, nt, true);
                down(y, dy, (size_t)nt * R * 4);
                for (size_t i = 0; i < (size_t)nt * R; i++) ref2[i] += ref[i];
                e = rel_err(y, ref2, (size_t)nt * R);
                CHECK_MSG(e <= bound(type, nt, exact), "matmul accumulate %s n_tok %d exact %d: rel err %.3g",
                          tela_type_name(type), nt, exact, e);
                /* SwiGLU pair: silu(W x) * (W2 x) */
                ref_matmul(&w2, x, nt, ref2);
                for (size_t i = 0; i < (size_t)nt * R; i++) ref2[i] = ref[i] / (1.0 + exp(-ref[i])) * ref2[i];
                poison(dy, (size_t)nt * R);
                tela_exec_matmul_swiglu(gx, &w.m, &w2.m, dx, K, dy, R, nt);
                down(y, dy, (size_t)nt * R * 4);
                e = rel_err(y, ref2, (size_t)nt * R);
                CHECK_MSG(e <= swiglu_bound(type, nt, exact), "swiglu %s n_tok %d exact %d: rel err %.3g",
                          tela_type_name(type), nt, exact, e);
                /* with an RMSNorm in front: both matrices in one call */
                {
                    float *nw = rand_floats((size_t)K, 1.0f), *h = malloc((size_t)nt * K * 4);
                    for (int t = 0; t < nt; t++) {
                        double ss = 0;
                        for (int64_t c = 0; c < K; c++) ss += (double)x[t * K + c] * x[t * K + c];
                        const double sc = 1.0 / sqrt(ss / K + 1e-5);
                        for (int64_t c = 0; c < K; c++) h[t * K + c] = (float)(x[t * K + c] * sc * nw[c]);
                    }
                    ref_matmul(&w, h, nt, ref);
                    ref_matmul(&w2, h, nt, ref2);
                    float *dn = dmalloc((size_t)K * 4), *dxn = dmalloc((size_t)nt * K * 4);
                    float *dy2 = dmalloc((size_t)nt * R * 4), *y2 = malloc((size_t)nt * R * 4);
                    up(dn, nw, (size_t)K * 4);
                    poison(dy, (size_t)nt * R);
                    poison(dy2, (size_t)nt * R);
                    const tela_norm_in norm = {dn, 1e-5f, dxn};
                    const tela_matmul_target tg[2] = {{&w.m, dy, R}, {&w2.m, dy2, R}};
                    tela_exec_norm_matmul_many(gx, &norm, tg, 2, dx, K, nt);
                    down(y, dy, (size_t)nt * R * 4);
                    down(y2, dy2, (size_t)nt * R * 4);
                    double e1 = rel_err(y, ref, (size_t)nt * R), e2 = rel_err(y2, ref2, (size_t)nt * R);
                    CHECK_MSG(e1 <= bound(type, nt, exact) && e2 <= bound(type, nt, exact),
                              "norm + matmul of two %s n_tok %d exact %d: rel err %.3g, %.3g", tela_type_name(type), nt,
                              exact, e1, e2);
                    /* four targets in one call (a Gated DeltaNet layer's input projections) */
                    {
                        float *dy3 = dmalloc((size_t)nt * R * 4), *dy4 = dmalloc((size_t)nt * R * 4);
                        float *yy[4] = {dy, dy2, dy3, dy4};
                        for (int i = 0; i < 4; i++) poison(yy[i], (size_t)nt * R);
                        const tela_matmul_target t4[4] = {{&w.m, dy, R}, {&w2.m, dy2, R}, {&w2.m, dy3, R},
                                                          {&w.m, dy4, R}};
                        tela_exec_norm_matmul_many(gx, &norm, t4, 4, dx, K, nt);
                        double e4 = 0;
                        for (int i = 0; i < 4; i++) {
                            down(y, yy[i], (size_t)nt * R * 4);
                            const double ei = rel_err(y, i == 0 || i == 3 ? ref : ref2, (size_t)nt * R);
                            if (!(ei <= e4)) e4 = ei;
                        }
                        CHECK_MSG(e4 <= bound(type, nt, exact), "norm + matmul of four %s n_tok %d exact %d: rel err %.3g",
                                  tela_type_name(type), nt, exact, e4);
                        tela_backend_free_mem(gpu, dy3);
                        tela_backend_free_mem(gpu, dy4);
                    }
                    for (size_t i = 0; i < (size_t)nt * R; i++) ref2[i] = ref[i] / (1.0 + exp(-ref[i])) * ref2[i];
                    poison(dy, (size_t)nt * R);
                    tela_exec_norm_matmul_swiglu(gx, &norm, &w.m, &w2.m, dx, K, dy, R, nt);
                    down(y, dy, (size_t)nt * R * 4);
                    if (!exact && nt > 1 && nt <= 8 && same_bits_expected(type, true)) { /* the bits of one-token steps, as above */
                        int same = 1;
                        for (int t = 0; t < nt; t++) {
                            poison(dy2, (size_t)R);
                            tela_exec_norm_matmul_swiglu(gx, &norm, &w.m, &w2.m, dx + (size_t)t * K, K, dy2, R, 1);
                            down(y2, dy2, (size_t)R * 4);
                            same = same && !memcmp(y2, y + (size_t)t * R, (size_t)R * 4);
                        }
                        CHECK_MSG(same, "norm + swiglu %s: a product of %d tokens differs in bits from one-token products",
                                  tela_type_name(type), nt);
                    }
                    e1 = rel_err(y, ref2, (size_t)nt * R);
                    if (getenv("TELA_TEST_VERBOSE"))
                        printf("note: norm + swiglu %s %lld x %lld n_tok %d exact %d%s: rel err %.4g\n",
                               tela_type_name(type), (long long)R, (long long)K, nt, exact,
                               gemv_variant == 2 ? " (GEMV=2)" : "", e1);
                    CHECK_MSG(e1 <= swiglu_bound(type, nt, exact), "norm + swiglu %s %lld x %lld n_tok %d exact %d%s: rel err %.3g",
                              tela_type_name(type), (long long)R, (long long)K, nt, exact,
                              gemv_variant == 2 ? " (GEMV=2)" : "", e1);
                    tela_backend_free_mem(gpu, dn);
                    tela_backend_free_mem(gpu, dxn);
                    tela_backend_free_mem(gpu, dy2);
                    free(nw);
                    free(h);
                    free(y2);
                }
                tela_backend_free_mem(gpu, dx);
                tela_backend_free_mem(gpu, dy);
                free(x);
                free(y);
                free(ref);
                free(ref2);
            }
        }
        /* embedding rows */
        int32_t ids[4] = {0, (int32_t)R - 1, 17, 17};
        int32_t *dids = dmalloc(sizeof ids);
        up(dids, ids, sizeof ids);
        float *drows = dmalloc(4 * K * 4), *rows = malloc(4 * K * 4);
        poison(drows, 4 * K);
        tela_exec_get_rows(gx, &w.m, dids, 4, drows, K);
        down(rows, drows, 4 * K * 4);
        double maxd = 0;
        for (int t = 0; t < 4; t++)
            for (int64_t c = 0; c < K; c++) {
                double d = fabs((double)rows[t * K + c] - w.deq[ids[t] * K + c]);
                if (!(d <= maxd)) maxd = isfinite(d) ? d : INFINITY;
            }
        CHECK_MSG(maxd <= 1e-6, "get_rows %s: max diff %.3g", tela_type_name(type), maxd);
        /* the table split by vocabulary (rows [0, 9) and [9, R), each a
         * matrix of its own): the first part writes its rows and zeros,
         * the second adds its rows: every id's row, every element written */
        {
            tela_mat lo = w.m, hi = w.m;
            lo.n_rows = 9;
            hi.n_rows = R - 9;
            hi.data = (const unsigned char *)w.m.data + 9 * w.m.row_bytes;
            lo.dev = hi.dev = NULL;
            lo.packed = hi.packed = NULL;
            tela_mat *parts[2] = {&lo, &hi};
            tela_mat_use rows_use[2] = {TELA_MAT_ROWS, TELA_MAT_ROWS};
            CHECK_OK(tela_backend_prepare_mats(gpu, parts, rows_use, 2, 0));
            poison(drows, 4 * K);
            tela_exec_get_rows_part(gx, &lo, 0, dids, 4, drows, K, false);
            tela_exec_get_rows_part(gx, &hi, 9, dids, 4, drows, K, true);
            down(rows, drows, 4 * K * 4);
            maxd = 0;
            for (int t = 0; t < 4; t++)
                for (int64_t c = 0; c < K; c++) {
                    double d = fabs((double)rows[t * K + c] - w.deq[ids[t] * K + c]);
                    if (!(d <= maxd)) maxd = isfinite(d) ? d : INFINITY;
                }
            CHECK_MSG(maxd <= 1e-6, "get_rows_part %s: max diff %.3g", tela_type_name(type), maxd);
        }
        tela_backend_free_mem(gpu, dids);
        tela_backend_free_mem(gpu, drows);
        free(rows);
        free_mat(&w);
        free_mat(&w2);
    }
    tela_ops_set_exact_matmul(false);
}

/* A decode step's chain of one-token quantized products, each reading the
 * one before's output, queued without a download in between (so that each
 * may start, under programmatic dependent launch, while the one before it
 * finishes, and a backend may fuse work across the boundary): a = W1 x; b = W2
 * rmsnorm(a); c = x + W1 b (accumulating, as wo into the residual); d =
 * silu(W1 c) * (W2 c); e = W1 rmsnorm(d). Each stage is checked against
 * the float64 product of the GPU's own previous output, so the bound is
 * one product's. */
static void test_matmul_chain(void) {
    const int64_t K = 1024;
    const tela_type types[] = {TELA_TYPE_Q8_0, TELA_TYPE_Q4_0, TELA_TYPE_Q4_K, TELA_TYPE_Q5_K, TELA_TYPE_Q6_K};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        test_mat w1, w2;
        make_mat(&w1, types[ti], K, K, 100 + (int)ti);
        make_mat(&w2, types[ti], K, K, 108 + (int)ti);
        tela_mat *list[2] = {&w1.m, &w2.m};
        tela_mat_use uses[2] = {TELA_MAT_MATMUL, TELA_MAT_MATMUL};
        CHECK_OK(tela_backend_prepare_mats(gpu, list, uses, 2, 0));
        float *x = rand_floats((size_t)K, 1.0f), *nw = rand_floats((size_t)K, 1.0f);
        float *dx = dmalloc((size_t)K * 4), *dn = dmalloc((size_t)K * 4), *dxn = dmalloc((size_t)K * 4);
        float *st[5];
        for (int i = 0; i < 5; i++) {
            st[i] = dmalloc((size_t)K * 4);
            poison(st[i], (size_t)K);
        }
        up(dx, x, (size_t)K * 4);
        up(dn, nw, (size_t)K * 4);
        /* c starts as a copy of x, for the accumulating stage */
        up(st[2], x, (size_t)K * 4);
        const tela_norm_in norm = {dn, 1e-5f, dxn};
        tela_exec_matmul(gx, &w1.m, dx, K, st[0], K, 1, false);                   /* a = W1 x */
        const tela_matmul_target tb = {&w2.m, st[1], K};
        tela_exec_norm_matmul_many(gx, &norm, &tb, 1, st[0], K, 1);               /* b = W2 rmsnorm(a) */
        tela_exec_matmul(gx, &w1.m, st[1], K, st[2], K, 1, true);                 /* c = x + W1 b */
        tela_exec_matmul_swiglu(gx, &w1.m, &w2.m, st[2], K, st[3], K, 1);         /* d = silu(W1 c) * W2 c */
        const tela_matmul_target te = {&w1.m, st[4], K};
        tela_exec_norm_matmul_many(gx, &norm, &te, 1, st[3], K, 1);               /* e = W1 rmsnorm(d) */
        float *h[6];
        h[0] = x;
        for (int i = 0; i < 5; i++) {
            h[i + 1] = malloc((size_t)K * 4);
            down(h[i + 1], st[i], (size_t)K * 4);
        }
        double *ref = malloc(sizeof(double) * (size_t)K), *ref2 = malloc(sizeof(double) * (size_t)K);
        float *xn = malloc((size_t)K * 4);
        static const char *stage[5] = {"W1 x", "W2 rmsnorm(a)", "x + W1 b", "swiglu(c)", "W1 rmsnorm(d)"};
        for (int i = 0; i < 5; i++) {
            const float *in = h[i];
            if (i == 1 || i == 4) { /* the RMSNorm in front, in double */
                double ss = 0;
                for (int64_t c = 0; c < K; c++) ss += (double)in[c] * in[c];
                const double sc = 1.0 / sqrt(ss / (double)K + 1e-5);
                for (int64_t c = 0; c < K; c++) xn[c] = (float)(in[c] * sc * nw[c]);
                in = xn;
            }
            ref_matmul(i == 1 ? &w2 : &w1, in, 1, ref);
            if (i == 2)
                for (int64_t c = 0; c < K; c++) ref[c] += x[c];
            if (i == 3) {
                ref_matmul(&w2, in, 1, ref2);
                for (int64_t c = 0; c < K; c++) ref[c] = ref[c] / (1.0 + exp(-ref[c])) * ref2[c];
            }
            const double e = rel_err(h[i + 1], ref, (size_t)K);
            CHECK_MSG(e <= (i == 3 ? 2 : 1) * bound(types[ti], 1, false), "chain of %s products, stage %d (%s): rel err %.3g",
                      tela_type_name(types[ti]), i, stage[i], e);
        }
        for (int i = 0; i < 5; i++) {
            free(h[i + 1]);
            tela_backend_free_mem(gpu, st[i]);
        }
        tela_backend_free_mem(gpu, dx);
        tela_backend_free_mem(gpu, dn);
        tela_backend_free_mem(gpu, dxn);
        free(x);
        free(nw);
        free(xn);
        free(ref);
        free(ref2);
        free_mat(&w1);
        free_mat(&w2);
    }
}

static void test_matmul(void) {
    /* rows not a multiple of the kernels' 2, 4 or 16 */
    const int toks[] = {1, 2, 3, 5, 8, 17, 70};
    test_matmul_shape(299, 1024, toks, sizeof toks / sizeof toks[0], false);
    /* a wide row: the float decode kernel splits it over warps, the
     * quantized ones take several rounds of units, the last one partial */
    const int few[] = {1, 3};
    test_matmul_shape(45, 4352, few, sizeof few / sizeof few[0], false);
    /* one token on a taller matrix, whose last block of rows is partial */
    const int one[] = {1};
    test_matmul_shape(1000, 2048, one, 1, false);
    /* more rows than a wave of warps holds on a 132-SM GPU (3,168): the
     * quantized products of one token split each row over two warps and
     * take 2.1 waves of them, or rows in turns (TELA_CUDA_GEMV_PERSIST=1:
     * three turns of 1,100 slots), and must give the bits of a product of
     * several tokens (the quantized types: the kernels in question) */
    const int tall[] = {1, 3};
    test_matmul_shape(3300, 4096, tall, sizeof tall / sizeof tall[0], true);
    test_matmul_chain();
}

static void test_small_ops(void) {
    /* rmsnorm with strides (rows 70 floats apart, 64 used) */
    const int n = 64, rows = 9, xs = 70;
    float *x = rand_floats((size_t)rows * xs, 3.0f), *w = rand_floats(n, 1.0f), *o = malloc((size_t)rows * xs * 4);
    float *dx = dmalloc((size_t)rows * xs * 4), *dw = dmalloc(n * 4), *dout = dmalloc((size_t)rows * xs * 4);
    up(dx, x, (size_t)rows * xs * 4);
    up(dw, w, n * 4);
    poison(dout, (size_t)rows * xs);
    tela_exec_rmsnorm(gx, dout, xs, dx, xs, dw, n, rows, 1e-5f);
    down(o, dout, (size_t)rows * xs * 4);
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[r * xs + i] * x[r * xs + i];
        double sc = 1.0 / sqrt(ss / n + 1e-5);
        for (int i = 0; i < n; i++) {
            double ref = x[r * xs + i] * sc * w[i], d = fabs(o[r * xs + i] - ref) / (fabs(ref) + 1e-3);
            if (!(d <= worst)) worst = isfinite(d) ? d : INFINITY;
        }
    }
    CHECK_MSG(worst <= 1e-5, "rmsnorm: worst relative error %.3g", worst);

    /* add */
    float *y = rand_floats(1000, 1.0f), *a = rand_floats(1000, 1.0f), *r = malloc(4000);
    float *dy = dmalloc(4000), *da = dmalloc(4000);
    up(dy, y, 4000);
    up(da, a, 4000);
    tela_exec_add(gx, dy, da, 1000);
    down(r, dy, 4000);
    int bad = 0;
    for (int i = 0; i < 1000; i++) bad += r[i] != y[i] + a[i];
    CHECK_EQ_INT(bad, 0);

    /* argmax: ties go to the lower index */
    float *v = rand_floats(100000, 1.0f);
    v[70001] = 50.0f;
    v[50002] = 50.0f;
    float *dv = dmalloc(400000);
    int32_t *dp = dmalloc(4), pick = -1;
    up(dv, v, 400000);
    tela_exec_argmax(gx, dv, 100000, dp);
    down(&pick, dp, 4);
    CHECK_EQ_INT(pick, 50002);

    /* RoPE, both conventions: positions with gaps, two heads of 16, 12 rotated */
    const int nt = 5, heads = 2, hd = 16, n_rot = 12;
    int32_t pos[5] = {0, 1, 7, 300, 4095};
    double inv[6];
    for (int i = 0; i < n_rot / 2; i++) inv[i] = pow(10000.0, -2.0 * i / n_rot);
    const double *dinv = NULL;
    CHECK_OK(tela_backend_const(gpu, inv, sizeof inv, (const void **)&dinv));
    for (int mode = 0; mode < 2; mode++) {
        float *q = rand_floats((size_t)nt * heads * hd, 1.0f), *qo = malloc((size_t)nt * heads * hd * 4);
        float *dq = dmalloc((size_t)nt * heads * hd * 4), *dcs = dmalloc((size_t)nt * n_rot * 4);
        int32_t *dpos = dmalloc(sizeof pos), *dtok = dmalloc(sizeof pos);
        tela_batch b;
        CHECK_OK(tela_exec_set_batch(gx, &b, dtok, dpos, pos, nt, 0));
        up(dpos, pos, sizeof pos); /* positions with gaps, not pos0 + t */
        up(dq, q, (size_t)nt * heads * hd * 4);
        tela_exec_rope_table(gx, dcs, &b, dinv, n_rot);
        tela_exec_rope(gx, dq, heads * hd, nt, heads, hd, n_rot, dcs, (tela_rope_mode)mode);
        down(qo, dq, (size_t)nt * heads * hd * 4);
        double md = 0;
        for (int t = 0; t < nt; t++)
            for (int h = 0; h < heads; h++) {
                const float *src = q + (t * heads + h) * hd;
                const float *got = qo + (t * heads + h) * hd;
                double ref[16];
                for (int i = 0; i < hd; i++) ref[i] = src[i];
                for (int i = 0; i < n_rot / 2; i++) {
                    int i0 = mode == 0 ? 2 * i : i, i1 = mode == 0 ? 2 * i + 1 : i + n_rot / 2;
                    double th = pos[t] * inv[i];
                    ref[i0] = src[i0] * cos(th) - src[i1] * sin(th);
                    ref[i1] = src[i0] * sin(th) + src[i1] * cos(th);
                }
                for (int i = 0; i < hd; i++) {
                    double d = fabs(got[i] - ref[i]);
                    if (!(d <= md)) md = isfinite(d) ? d : INFINITY;
                }
            }
        CHECK_MSG(md <= 2e-6, "rope mode %d: max diff %.3g", mode, md);
        tela_backend_free_mem(gpu, dq);
        tela_backend_free_mem(gpu, dcs);
        tela_backend_free_mem(gpu, dpos);
        tela_backend_free_mem(gpu, dtok);
        free(q);
        free(qo);
    }
    float *bufs[] = {dx, dw, dout, dy, da, dv};
    for (size_t i = 0; i < 6; i++) tela_backend_free_mem(gpu, bufs[i]);
    tela_backend_free_mem(gpu, dp);
    free(x);
    free(w);
    free(o);
    free(y);
    free(a);
    free(r);
    free(v);
}

/* Attention: the same keys, values and queries through the GPU (cache of
 * dtype) and the CPU backend (f32), n_tok queries at positions
 * pos0..pos0+n_tok-1 after pos0 cached positions. */
static void check_attention(int n_head, int n_kv_head, int hd, int32_t pos0, int nt, tela_kv_dtype dtype) {
    const int32_t n_ctx = pos0 + nt + 3;
    const tela_kv_shape shape = {2, n_ctx, n_kv_head, hd, hd, dtype, 0, n_ctx};
    tela_kv_cache *gk = NULL, *ck = NULL;
    CHECK_OK(tela_kv_create(gx, &shape, &gk));
    CHECK_OK(tela_kv_create(cx, &shape, &ck));
    if (!gk || !ck) return;
    const int64_t kvd = (int64_t)n_kv_head * hd, qd = (int64_t)n_head * hd;
    const int32_t total = pos0 + nt;
    float *k = rand_floats((size_t)total * kvd, 1.0f), *v = rand_floats((size_t)total * kvd, 1.0f);
    float *q = rand_floats((size_t)nt * qd, 1.0f);
    int32_t *ids = calloc((size_t)total, sizeof(int32_t));
    /* CPU: store all positions at once, attend the last nt */
    int32_t *cpos = malloc(sizeof(int32_t) * (size_t)total), *ctok = malloc(sizeof(int32_t) * (size_t)total);
    tela_batch cb;
    CHECK_OK(tela_exec_set_batch(cx, &cb, ctok, cpos, ids, total, 0));
    tela_exec_kv_store(cx, ck, 1, k, kvd, v, kvd, &cb);
    CHECK_OK(tela_exec_set_batch(cx, &cb, ctok, cpos, ids, nt, pos0));
    float *ref = malloc(sizeof(float) * (size_t)nt * qd);
    const float scale = 1.0f / sqrtf((float)hd);
    tela_exec_attention(cx, ck, 1, q, qd, ref, qd, &cb, n_head, scale);
    CHECK_OK(tela_exec_sync(cx));
    /* GPU: store the history in chunks (as prefill steps do), then attend */
    float *dk = dmalloc((size_t)total * kvd * 4), *dv = dmalloc((size_t)total * kvd * 4);
    float *dq = dmalloc((size_t)nt * qd * 4), *dout = dmalloc((size_t)nt * qd * 4);
    int32_t *dpos = dmalloc(sizeof(int32_t) * (size_t)total), *dtok = dmalloc(sizeof(int32_t) * (size_t)total);
    up(dk, k, (size_t)total * kvd * 4);
    up(dv, v, (size_t)total * kvd * 4);
    up(dq, q, (size_t)nt * qd * 4);
    tela_batch gb;
    for (int32_t done = 0; done < total;) {
        int32_t c = total - done < 1000 ? total - done : 1000;
        CHECK_OK(tela_exec_set_batch(gx, &gb, dtok, dpos, ids, c, done));
        tela_exec_kv_store(gx, gk, 1, dk + (size_t)done * kvd, kvd, dv + (size_t)done * kvd, kvd, &gb);
        done += c;
    }
    CHECK_OK(tela_exec_set_batch(gx, &gb, dtok, dpos, ids, nt, pos0));
    poison(dout, (size_t)nt * qd);
    tela_exec_attention(gx, gk, 1, dq, qd, dout, qd, &gb, n_head, scale);
    float *got = malloc(sizeof(float) * (size_t)nt * qd);
    down(got, dout, (size_t)nt * qd * 4);
    double *refd = malloc(sizeof(double) * (size_t)nt * qd);
    for (size_t i = 0; i < (size_t)nt * qd; i++) refd[i] = ref[i];
    double e = rel_err(got, refd, (size_t)nt * qd);
    const double tol = dtype == TELA_KV_DTYPE_F16 ? 3e-3 : 1e-5;
    CHECK_MSG(e <= tol, "attention heads %d/%d dim %d pos0 %d n_tok %d %s: rel err %.3g", n_head, n_kv_head, hd, pos0,
              nt, dtype == TELA_KV_DTYPE_F16 ? "f16" : "f32", e);
    /* snapshot image round trip on the GPU: save, overwrite, load, same output */
    size_t ib = tela_kv_image_bytes(gk, total);
    void *img = malloc(ib);
    CHECK_OK(tela_kv_save(gx, gk, total, img));
    float *junk = rand_floats((size_t)total * kvd, 1.0f);
    up(dk, junk, (size_t)total * kvd * 4);
    CHECK_OK(tela_exec_set_batch(gx, &gb, dtok, dpos, ids, total < 1000 ? total : 1000, 0));
    tela_exec_kv_store(gx, gk, 1, dk, kvd, dk, kvd, &gb);
    CHECK_OK(tela_kv_load(gx, gk, total, img));
    CHECK_OK(tela_exec_set_batch(gx, &gb, dtok, dpos, ids, nt, pos0));
    poison(dout, (size_t)nt * qd);
    tela_exec_attention(gx, gk, 1, dq, qd, dout, qd, &gb, n_head, scale);
    float *again = malloc(sizeof(float) * (size_t)nt * qd);
    down(again, dout, (size_t)nt * qd * 4);
    CHECK_MSG(!memcmp(again, got, sizeof(float) * (size_t)nt * qd), "attention after a KV image round trip differs");
    free(junk);
    free(img);
    free(again);
    float *bufs[] = {dk, dv, dq, dout};
    for (size_t i = 0; i < 4; i++) tela_backend_free_mem(gpu, bufs[i]);
    tela_backend_free_mem(gpu, dpos);
    tela_backend_free_mem(gpu, dtok);
    tela_kv_free(gk);
    tela_kv_free(ck);
    free(k);
    free(v);
    free(q);
    free(ids);
    free(cpos);
    free(ctok);
    free(ref);
    free(refd);
    free(got);
}

static void test_attention(void) {
    for (int dt = 0; dt < 2; dt++) {
        tela_kv_dtype d = dt ? TELA_KV_DTYPE_F16 : TELA_KV_DTYPE_F32;
        check_attention(4, 2, 24, 0, 1, d);      /* odd head dim, first token */
        check_attention(4, 2, 24, 40, 3, d);     /* a short multi-token step */
        check_attention(32, 8, 64, 700, 1, d);   /* decode, several splits */
        check_attention(32, 8, 128, 5000, 1, d); /* a long context */
        check_attention(2, 1, 256, 300, 1, d);   /* Qwen3.5's head size */
        check_attention(8, 2, 64, 0, 1, d);      /* one key (a 16-key tile with 15 masked) */
        check_attention(32, 8, 128, 5000, 4, d); /* a verification step at a long context */
        check_attention(16, 2, 64, 333, 2, d);   /* eight heads a group */
        check_attention(24, 2, 128, 900, 1, d);  /* twelve heads a group: two sets of eight and four */
        check_attention(12, 4, 64, 0, 100, d);   /* prefill: the flash kernel with f16 */
        check_attention(8, 8, 128, 64, 200, d);  /* prefill after cached positions */
        check_attention(4, 1, 16, 10, 37, d);    /* prefill at a head size the flash kernel leaves alone */
    }
}

/* RoPE and store in one call (GPU) against the CPU backend's rope + store:
 * the rotated queries, and the attention over what was stored. Partial
 * rotation (n_rot < head_dim), both pair conventions, a prefill then a
 * decode step; with Qwen3.5's head norms first (tela_exec_norm_rope_store:
 * the queries read from every other head-sized block of a wider row, as
 * the model's q+gate rows), where the CPU runs its rmsnorm op then the
 * same rope + store. */
static void test_rope_store(void) {
    const int H = 4, KH = 2, hd = 32, n_rot = 16, N = 6;
    const int64_t qd = (int64_t)H * hd, kd = (int64_t)KH * hd;
    double inv[8];
    for (int i = 0; i < n_rot / 2; i++) inv[i] = pow(10000.0, -2.0 * i / n_rot);
    const double *dinv = NULL;
    CHECK_OK(tela_backend_const(gpu, inv, sizeof inv, (const void **)&dinv));
    float *src = rand_floats((size_t)N * 2 * qd, 1.0f), *qw = rand_floats((size_t)hd, 0.3f), *kw = rand_floats((size_t)hd, 0.3f);
    for (int i = 0; i < hd; i++) qw[i] += 1.0f, kw[i] += 1.0f;
    float *dsrc = dmalloc((size_t)N * 2 * qd * 4), *dqw = dmalloc((size_t)hd * 4), *dkw = dmalloc((size_t)hd * 4);
    up(dsrc, src, (size_t)N * 2 * qd * 4);
    up(dqw, qw, (size_t)hd * 4);
    up(dkw, kw, (size_t)hd * 4);
    for (int variant = 0; variant < 4; variant++) {
        const int mode = variant % 2;
        const bool normed = variant >= 2;
        const tela_kv_shape shape = {1, 16, KH, hd, hd, TELA_KV_DTYPE_F32, 0, 16};
        tela_kv_cache *gk = NULL, *ck = NULL;
        CHECK_OK(tela_kv_create(gx, &shape, &gk));
        CHECK_OK(tela_kv_create(cx, &shape, &ck));
        float *q = rand_floats((size_t)N * qd, 1.0f), *k = rand_floats((size_t)N * kd, 1.0f);
        float *v = rand_floats((size_t)N * kd, 1.0f);
        float *cq = malloc((size_t)N * qd * 4), *ckk = malloc((size_t)N * kd * 4), *ccs = malloc((size_t)N * n_rot * 4);
        float *cout = malloc((size_t)N * qd * 4), *gq = malloc((size_t)N * qd * 4), *gout = malloc((size_t)N * qd * 4);
        memcpy(cq, q, (size_t)N * qd * 4);
        memcpy(ckk, k, (size_t)N * kd * 4);
        float *dq = dmalloc((size_t)N * qd * 4), *dk = dmalloc((size_t)N * kd * 4), *dv = dmalloc((size_t)N * kd * 4);
        float *dcs = dmalloc((size_t)N * n_rot * 4), *dout = dmalloc((size_t)N * qd * 4);
        int32_t *dpos = dmalloc(N * 4), *dtok = dmalloc(N * 4), cpos[6], ctok[6], ids[6] = {0};
        up(dq, q, (size_t)N * qd * 4);
        up(dk, k, (size_t)N * kd * 4);
        up(dv, v, (size_t)N * kd * 4);
        const int steps[2][2] = {{0, 5}, {5, 1}}; /* (pos0, n): a prefill, then a decode step */
        for (int st = 0; st < 2; st++) {
            const int p0 = steps[st][0], n = steps[st][1];
            tela_batch cb, gb;
            CHECK_OK(tela_exec_set_batch(cx, &cb, ctok, cpos, ids, n, p0));
            CHECK_OK(tela_exec_set_batch(gx, &gb, dtok, dpos, ids, n, p0));
            tela_exec_rope_table(cx, ccs, &cb, inv, n_rot);
            const tela_head_norms cn = {src + p0 * 2 * qd, 2 * qd, 2 * hd, qw, kw, 1e-6f};
            const tela_head_norms gn = {dsrc + p0 * 2 * qd, 2 * qd, 2 * hd, dqw, dkw, 1e-6f};
            if (normed)
                tela_exec_norm_rope_store(cx, &cn, ck, 0, cq + p0 * qd, qd, H, ckk + p0 * kd, kd, v + p0 * kd, kd, &cb,
                                          ccs, n_rot, (tela_rope_mode)mode);
            else
                tela_exec_rope_store(cx, ck, 0, cq + p0 * qd, qd, H, ckk + p0 * kd, kd, v + p0 * kd, kd, &cb, ccs, n_rot,
                                     (tela_rope_mode)mode);
            tela_exec_attention(cx, ck, 0, cq + p0 * qd, qd, cout + p0 * qd, qd, &cb, H, 0.25f);
            tela_exec_rope_table(gx, dcs, &gb, dinv, n_rot);
            if (normed) {
                poison(dq + p0 * qd, (size_t)n * qd);
                tela_exec_norm_rope_store(gx, &gn, gk, 0, dq + p0 * qd, qd, H, dk + p0 * kd, kd, dv + p0 * kd, kd, &gb,
                                          dcs, n_rot, (tela_rope_mode)mode);
            } else {
                tela_exec_rope_store(gx, gk, 0, dq + p0 * qd, qd, H, dk + p0 * kd, kd, dv + p0 * kd, kd, &gb, dcs,
                                     n_rot, (tela_rope_mode)mode);
            }
            poison(dout + p0 * qd, (size_t)n * qd);
            tela_exec_attention(gx, gk, 0, dq + p0 * qd, qd, dout + p0 * qd, qd, &gb, H, 0.25f);
        }
        CHECK_OK(tela_exec_sync(cx));
        down(gq, dq, (size_t)N * qd * 4);
        down(gout, dout, (size_t)N * qd * 4);
        double *r1 = malloc((size_t)N * qd * 8), *r2 = malloc((size_t)N * qd * 8);
        for (size_t i = 0; i < (size_t)N * qd; i++) r1[i] = cq[i], r2[i] = cout[i];
        double e1 = rel_err(gq, r1, (size_t)N * qd), e2 = rel_err(gout, r2, (size_t)N * qd);
        CHECK_MSG(e1 <= 1e-6 && e2 <= 1e-5, "rope_store mode %d%s: queries %.3g, attention %.3g", mode,
                  normed ? " with head norms" : "", e1, e2);
        free(r1);
        free(r2);
        float *bufs[] = {dq, dk, dv, dcs, dout};
        for (size_t i = 0; i < 5; i++) tela_backend_free_mem(gpu, bufs[i]);
        tela_backend_free_mem(gpu, dpos);
        tela_backend_free_mem(gpu, dtok);
        tela_kv_free(gk);
        tela_kv_free(ck);
        free(q);
        free(k);
        free(v);
        free(cq);
        free(ckk);
        free(ccs);
        free(cout);
        free(gq);
        free(gout);
    }
    tela_backend_free_mem(gpu, dsrc);
    tela_backend_free_mem(gpu, dqw);
    tela_backend_free_mem(gpu, dkw);
    free(src);
    free(qw);
    free(kw);
}

/* Kernels that quantize their own output for the product after them
 * (tela_exec_next_input_of): the attention (head sizes 64 and 128: the
 * tensor-core decode kernel; 256: the second variant), the output gate
 * and the Gated DeltaNet step, each followed by a one-token product of
 * every quantized type. With the hint the product must give the same
 * bits as without it, in one launch fewer (its quantize_act); a copy
 * into the input between the two voids what the producer quantized. */
static int preq_run(int which, bool hint, const tela_mat *w, tela_kv_cache *const *kv, const tela_batch *b, float *dq,
                    float *dx, const float *x0, float *dgate, float *dstate, const float *state0, float *dgdn,
                    float *dy, int64_t K, float *y) {
    const int64_t R = w->n_rows;
    if (which == 3) up(dstate, state0, 512 * 128 * 4); /* the delta rule's state, as each run starts */
    if (which == 3 || which == 4) up(dx, x0, (size_t)K * 4); /* the gate's rows, in place */
    poison(dy, (size_t)R);
    const uint64_t n0 = tela_exec_kernel_launches(gx);
    if (hint) tela_exec_next_input_of(gx, w);
    if (which <= 2) { /* 8 query heads over 2 KV heads of 64, 128, 256 */
        const int hd = 64 << which;
        tela_exec_attention(gx, kv[which], 0, dq, 8 * hd, dx, 8 * hd, b, 8, 1.0f / sqrtf((float)hd));
    } else if (which == 4) { /* 8 heads of 256 */
        tela_exec_sigmoid_gate(gx, dx, 256, dgate, 256, 8, 256);
    } else { /* 4 key / 4 value heads of 128 */
        const tela_gdn_args a = {.qkv = dgdn, .qkv_stride = 3 * 512, .nk = 4, .nv = 4, .dk = 128, .dv = 128,
                                 .q_scale = 1.0f / sqrtf(128.0f), .beta = dgate, .g = dgate + 4, .z = dgate + 8,
                                 .norm_w = dgate + 8, .eps = 1e-6f, .state = dstate, .out = dx, .n_tok = 1};
        tela_exec_gdn_delta(gx, &a);
    }
    tela_exec_matmul(gx, w, dx, K, dy, R, 1, false);
    const int launches = (int)(tela_exec_kernel_launches(gx) - n0);
    down(y, dy, (size_t)R * 4);
    return launches;
}

static void test_preq_on(void) {
    static const tela_type types[] = {TELA_TYPE_Q4_K, TELA_TYPE_Q5_K, TELA_TYPE_Q6_K, TELA_TYPE_Q8_0, TELA_TYPE_Q4_0};
    static const char *const names[] = {"attention (head 64)", "attention (head 128)", "attention (head 256)",
                                        "Gated DeltaNet step", "output gate"};
    const int32_t n_kv = 41, R = 48;
    tela_kv_cache *kv[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        const tela_kv_shape shape = {1, 64, 2, 64 << i, 64 << i, TELA_KV_DTYPE_F16, 0, 64};
        CHECK_OK(tela_kv_create(gx, &shape, &kv[i]));
        if (!kv[i]) return;
    }
    float *dq = dmalloc(2048 * 4), *dx = dmalloc(2048 * 4), *dgate = dmalloc(2048 * 4), *dy = dmalloc(R * 4);
    float *dstate = dmalloc(512 * 128 * 4), *dgdn = dmalloc(3 * 512 * 4), *dk = dmalloc((size_t)n_kv * 512 * 4);
    int32_t *dpos = dmalloc(sizeof(int32_t) * n_kv), *dtok = dmalloc(sizeof(int32_t) * n_kv);
    int32_t ids[41] = {0};
    float *q = rand_floats(2048, 1.0f), *x0 = rand_floats(2048, 1.0f), *gate = rand_floats(2048, 1.0f);
    float *state0 = rand_floats(512 * 128, 0.3f), *qkv = rand_floats(3 * 512, 1.0f);
    float *kvv = rand_floats((size_t)n_kv * 512, 1.0f);
    /* the delta rule's beta (0.5) and log decays (-0.5) for its 4 heads */
    for (int i = 0; i < 8; i++) gate[i] = i < 4 ? 0.5f : -0.5f;
    for (int i = 0; i < 8; i++) { /* its q and k heads L2-normalized, as its gates leave them */
        float *v = qkv + (size_t)i * 128, ss = 0;
        for (int j = 0; j < 128; j++) ss += v[j] * v[j];
        for (int j = 0; j < 128; j++) v[j] /= sqrtf(ss);
    }
    up(dq, q, 2048 * 4), up(dgate, gate, 2048 * 4), up(dgdn, qkv, 3 * 512 * 4), up(dk, kvv, (size_t)n_kv * 512 * 4);
    tela_batch b;
    CHECK_OK(tela_exec_set_batch(gx, &b, dtok, dpos, ids, n_kv, 0));
    for (int i = 0; i < 3; i++) /* keys = values: what is checked is bits, not sense */
        tela_exec_kv_store(gx, kv[i], 0, dk, 2 * (64 << i), dk, 2 * (64 << i), &b);
    CHECK_OK(tela_exec_set_batch(gx, &b, dtok, dpos, ids, 1, n_kv - 1));
    float *y1 = malloc(R * 4), *y2 = malloc(R * 4), *y3 = malloc(R * 4);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int which = 0; which < 5; which++) {
            const int64_t K = which <= 2 ? 8 * (64 << which) : which == 3 ? 512 : 2048;
            test_mat w;
            make_mat(&w, types[ti], R, K, 40 + (int)ti);
            tela_mat *list[1] = {&w.m};
            tela_mat_use uses[1] = {TELA_MAT_MATMUL};
            CHECK_OK(tela_backend_prepare_mats(gpu, list, uses, 1, 0));
            /* launches saved: none where the first decode attention takes
             * over (TELA_CUDA_ATTN=1: it does not quantize its output) */
            const char *av = getenv("TELA_CUDA_ATTN");
            const int saved = which <= 2 && av && !strcmp(av, "1") ? 0 : 1;
            const int n1 = preq_run(which, false, &w.m, kv, &b, dq, dx, x0, dgate, dstate, state0, dgdn, dy, K, y1);
            const int n2 = preq_run(which, true, &w.m, kv, &b, dq, dx, x0, dgate, dstate, state0, dgdn, dy, K, y2);
            CHECK_MSG(!memcmp(y1, y2, (size_t)R * 4), "%s, then a %s product: other bits when it quantizes its output",
                      names[which], tela_type_name(types[ti]));
            CHECK_MSG(n2 == n1 - saved, "%s, then a %s product: %d kernels with the hint, %d without", names[which],
                      tela_type_name(types[ti]), n2, n1);
            { /* and the hinted product against float64 on the producer's f32 output */
                float *xh = malloc((size_t)K * 4);
                double *ref = malloc(sizeof(double) * R);
                down(xh, dx, (size_t)K * 4);
                ref_matmul(&w, xh, 1, ref);
                const double e = rel_err(y2, ref, (size_t)R);
                CHECK_MSG(e <= bound(types[ti], 1, false), "%s, then a %s product: rel err %.3g", names[which],
                          tela_type_name(types[ti]), e);
                free(xh), free(ref);
            }
            if (which == 4) { /* a copy into x after the producer: the product reads the copy */
                float *junk = rand_floats((size_t)K, 1.0f);
                poison(dy, (size_t)R);
                tela_exec_next_input_of(gx, &w.m);
                tela_exec_sigmoid_gate(gx, dx, 256, dgate, 256, 8, 256);
                up(dx, junk, (size_t)K * 4);
                tela_exec_matmul(gx, &w.m, dx, K, dy, R, 1, false);
                down(y3, dy, (size_t)R * 4);
                poison(dy, (size_t)R);
                tela_exec_matmul(gx, &w.m, dx, K, dy, R, 1, false);
                down(y2, dy, (size_t)R * 4);
                CHECK_MSG(!memcmp(y2, y3, (size_t)R * 4), "a %s product read what the output gate quantized before "
                          "a copy overwrote its input", tela_type_name(types[ti]));
                free(junk);
            }
            free_mat(&w);
        }
    void *bufs[] = {dq, dx, dgate, dy, dstate, dgdn, dk, dpos, dtok};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tela_backend_free_mem(gpu, bufs[i]);
    for (int i = 0; i < 3; i++) tela_kv_free(kv[i]);
    free(q), free(x0), free(gate), free(state0), free(qkv), free(kvv), free(y1), free(y2), free(y3);
}

static void test_preq(void) {
    /* every producer on, whatever the default (TELA_CUDA_PREQ) */
    setenv("TELA_CUDA_PREQ", "2", 1);
    tela_exec *def = gx;
    CHECK_OK(tela_exec_create(gpu, 0, &gx));
    unsetenv("TELA_CUDA_PREQ");
    if (!gx) {
        gx = def;
        return;
    }
    test_preq_on();
    tela_exec_free(gx);
    gx = def;
}

int main(void) {
    if (!tela_backend_cuda_built()) test_skip("built without CUDA");
    if (tela_backend_cuda_device_count() == 0) test_skip("no CUDA GPU");
    test_rng_seed(20261201);
    if (tela_backend_create("cuda", 0, &gpu) != TELA_OK || tela_backend_create("cpu", 2, &cpu) != TELA_OK) {
        fprintf(stderr, "%s\n", tela_last_error());
        return 1;
    }
    CHECK_OK(tela_exec_create(gpu, 0, &gx));
    CHECK_OK(tela_exec_create(cpu, 2, &cx));
    printf("device: %s\n", tela_backend_description(gpu));
    test_matmul();
    /* the decode products' second variant (TELA_CUDA_GEMV=2, an experiment)
     * against the same references */
    setenv("TELA_CUDA_GEMV", "2", 1);
    tela_exec *v1 = gx;
    CHECK_OK(tela_exec_create(gpu, 0, &gx));
    unsetenv("TELA_CUDA_GEMV");
    if (gx) {
        printf("the decode products' second variant:\n");
        gemv_variant = 2;
        test_matmul();
        gemv_variant = 1;
        tela_exec_free(gx);
    }
    gx = v1;
    test_small_ops();
    test_rope_store();
    test_attention();
    test_preq();
    tela_exec_free(gx);
    tela_exec_free(cx);
    tela_backend_free(gpu);
    tela_backend_free(cpu);
    return test_finish();
}
