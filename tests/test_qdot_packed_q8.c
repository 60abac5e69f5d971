/* test_qdot_packed_q8.c: the packed-layout kernels for Q8_0 and Q4_0
 * weights (backend/cpu/qdot.h, "Packed weights"; AVX-512 VNNI), against
 * a scalar model written here from the block formats (quant/quant.h) and
 * the numerical contract in qdot.h: per output (r, c) and block b in order,
 *   isum_b = exact integer dot product of the block's levels,
 *   acc = fmaf((float)isum_b, d_w(r, b) * d_x(c, b), acc), from acc = 0.
 * Checks:
 *  - bitwise equality with the model over edge shapes: row counts that are
 *    not multiples of the 16-row group (and 1, 2, 3 groups for the 2-group
 *    tiles), column counts around multiples of the 6-column tile, block
 *    counts below and above the 8-block step of the activation table, odd
 *    weight/activation strides, misaligned source rows, output strides
 *    with sentinels in between, group sub-ranges [g0, g1) (only their rows
 *    are written), extreme levels (-128, 127, all 15 nibbles);
 *  - larger shapes: several column panels, heap-allocated tables, Q4_0
 *    nibbles unpacked per panel, very long rows (panels of 3 columns);
 *  - the model against the dot product of the quant layer's dequantized
 *    weights and activations in double, within float rounding;
 *  - packing in pieces gives the same bytes as packing at once;
 *  - where the AMX tiles run (AMX, TELA_AMX=1), the edge and large shapes twice: gemms of 16+
 *    columns on the AMX tiles (qdot_pack_amx.c), then on the VNNI tiles;
 *  - tela_op_matmul with packed weights on pools of 1, 2 and 3 threads:
 *    identical outputs, equal to the model on the quantized activations,
 *    and close to the unpacked kernels. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/qdot.h"
#include "util/threadpool.h"
#include "quant/quant.h"
#include "test.h"
#include "test_matmul_ways.h"
#include "util/fp16.h"


typedef struct {
    tela_type type;
    int q4;        /* Q4_0 (nibbles) rather than Q8_0 */
    size_t bsize;  /* bytes per 32-element block */
    const char *name;
} wkind;

static const wkind k_kinds[] = {
    {TELA_TYPE_Q8_0, 0, sizeof(tela_block_q8_0), "q8_0"},
    {TELA_TYPE_Q4_0, 1, sizeof(tela_block_q4_0), "q4_0"},
};

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* A random fp16 block scale: mostly moderate, sometimes 0 or subnormal. */
static uint16_t rand_scale(void) {
    const uint64_t k = test_rnd() % 50;
    if (k == 0) return 0;
    if (k == 1) return (uint16_t)(test_rnd() % 0x3ff + 1); /* subnormal */
    return tela_f32_to_f16((float)(0.0005 + 0.05 * test_unif()) * (test_rnd() & 1 ? 1.0f : -1.0f));
}

/* Random blocks of a row of n elements (bsize bytes per block): random
 * level bytes (every byte is a valid level), with some blocks at the
 * extremes (all -128 / all 127 for 8-bit, all 0 / all 15 nibbles). */
static void rand_row(uint8_t *dst, int64_t n, size_t bsize) {
    for (int64_t b = 0; b < n / 32; b++) {
        uint8_t *blk = dst + (size_t)b * bsize;
        const uint64_t k = test_rnd() % 16;
        for (size_t i = 2; i < bsize; i++) blk[i] = k == 0 ? 0x80 : k == 1 ? 0x7f : k == 2 ? 0xff : (uint8_t)test_rnd();
        put16(blk, rand_scale());
    }
}

/* Q8_0 activation rows: either quantized gaussians (what matmul feeds
 * the kernels) or random bytes (levels down to -128). */
static void rand_x(uint8_t *dst, int64_t n, int quantized) {
    if (!quantized) {
        rand_row(dst, n, sizeof(tela_block_q8_0));
        return;
    }
    float *f = malloc((size_t)n * sizeof *f);
    if (!f) abort();
    const float s = (float)(0.1 + 3.0 * test_unif());
    for (int64_t i = 0; i < n; i++) f[i] = s * test_gauss() * (test_rnd() % 50 == 0 ? 10.0f : 1.0f);
    if (tela_quantize_row(TELA_TYPE_Q8_0, f, dst, n) != TELA_OK) abort();
    free(f);
}

/* Level k (0..31) of a weight block, from the block format in quant.h. */
static int w_level(const uint8_t *blk, int k, int q4) {
    if (!q4) return (int8_t)blk[2 + k];
    const uint8_t byte = blk[2 + (k & 15)];
    return (k < 16 ? byte & 15 : byte >> 4) - 8;
}

/* The contract: one output from the original (unpacked) blocks. */
static float model_dot_mag(const uint8_t *w, const uint8_t *x, int64_t n, const wkind *kd, double *mag) {
    float acc = 0.0f;
    double m = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *wb = w + (size_t)b * kd->bsize, *xb = x + (size_t)b * sizeof(tela_block_q8_0);
        int32_t isum = 0;
        for (int k = 0; k < 32; k++) isum += w_level(wb, k, kd->q4) * (int8_t)xb[2 + k];
        const float d = tela_f16_to_f32(get16(wb)) * tela_f16_to_f32(get16(xb));
        acc = fmaf((float)isum, d, acc);
        m += fabs((double)isum * d);
    }
    if (mag) *mag = m;
    return acc;
}
static float model_dot(const uint8_t *w, const uint8_t *x, int64_t n, const wkind *kd) {
    return model_dot_mag(w, x, n, kd, NULL);
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }
static const uint32_t k_sentinel = 0x7fc0dead; /* a NaN no kernel produces */
static float sentinel(void) { float f; memcpy(&f, &k_sentinel, 4); return f; }

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) abort();
    return p;
}

/* Packs a matrix (all groups, in two pieces when split) into a new buffer. */
static uint8_t *pack_all(const tela_qdot_packing *pk, const uint8_t *w, size_t ws, int64_t n_rows, int64_t n,
                         int split) {
    const int64_t groups = (n_rows + 15) / 16;
    const size_t gb = pk->group_bytes(n);
    uint8_t *p = xalloc(gb * (size_t)groups);
    memset(p, 0xAB, gb * (size_t)groups); /* packing must overwrite every byte */
    if (split && groups > 1) {
        pk->pack(w, ws, n_rows, n, groups / 2, groups, p);
        pk->pack(w, ws, n_rows, n, 0, groups / 2, p);
    } else {
        pk->pack(w, ws, n_rows, n, 0, groups, p);
    }
    return p;
}

/* One shape: random weights and activations at odd strides and
 * misaligned addresses, packed; gemm over [g0, g1) for a few sub-ranges;
 * every output of those groups' rows bitwise equal to the model, every
 * other slot of out untouched. Returns the number of mismatches. */
static int run_case(const wkind *kd, const tela_qdot_packing *pk, int64_t n_rows, int64_t n_cols, int64_t n,
                    int quantized_x) {
    const size_t wrb = (size_t)(n / 32) * kd->bsize, xrb = (size_t)(n / 32) * sizeof(tela_block_q8_0);
    const size_t ws = wrb + (size_t)(test_rnd() % 3) * 7, xs = xrb + (size_t)(test_rnd() % 3) * 5;
    const size_t wbytes = ws * (size_t)(n_rows - 1) + wrb, xbytes = xs * (size_t)(n_cols - 1) + xrb;
    /* exact-size buffers at odd offsets: ASan catches any read past them */
    uint8_t *wbuf = malloc(wbytes + 1), *xbuf = malloc(xbytes + 3);
    if (!wbuf || !xbuf) abort();
    uint8_t *w = wbuf + 1, *x = xbuf + 3;
    memset(wbuf, 0x5A, wbytes + 1);
    for (int64_t r = 0; r < n_rows; r++) rand_row(w + (size_t)r * ws, n, kd->bsize);
    for (int64_t c = 0; c < n_cols; c++) rand_x(x + (size_t)c * xs, n, quantized_x);
    uint8_t *packed = pack_all(pk, w, ws, n_rows, n, (int)(test_rnd() & 1));
    const int64_t groups = (n_rows + 15) / 16;
    const int64_t os = groups * 16 + (int64_t)(test_rnd() % 3);
    float *out = malloc((size_t)(os * n_cols) * sizeof *out), *want = malloc((size_t)(n_rows * n_cols) * sizeof *want);
    if (!out || !want) abort();
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t c = 0; c < n_cols; c++)
            want[r * n_cols + c] = model_dot(w + (size_t)r * ws, x + (size_t)c * xs, n, kd);
    int bad = 0;
    const int64_t ranges[4][2] = {{0, groups}, {groups / 2, groups}, {0, (groups + 1) / 2}, {groups - 1, groups}};
    for (int k = 0; k < 4; k++) {
        const int64_t g0 = ranges[k][0], g1 = ranges[k][1];
        if (k > 0 && groups == 1) break;
        for (int64_t i = 0; i < os * n_cols; i++) out[i] = sentinel();
        pk->gemm(packed, n_rows, g0, g1, x, xs, n_cols, n, out, os);
        for (int64_t c = 0; c < n_cols; c++)
            for (int64_t r = 0; r < os; r++) {
                const float got = out[c * os + r];
                const int written = r < n_rows && r >= g0 * 16 && r < g1 * 16;
                if (written ? !same_bits(got, want[r * n_cols + c]) : !same_bits(got, sentinel())) {
                    if (bad++ < 5)
                        fprintf(stderr,
                                "%s rows %lld cols %lld n %lld groups [%lld, %lld): "
                                "out[%lld][%lld] = %.9g, want %.9g\n",
                                kd->name, (long long)n_rows, (long long)n_cols, (long long)n, (long long)g0,
                                (long long)g1, (long long)c, (long long)r, got,
                                written ? want[r * n_cols + c] : sentinel());
                }
            }
    }
    free(packed);
    free(out);
    free(want);
    free(wbuf);
    free(xbuf);
    return bad;
}

static void test_edge_shapes(const wkind *kd, const tela_qdot_packing *pk) {
    static const int64_t rows[] = {1, 5, 15, 16, 17, 31, 32, 33, 40};
    static const int64_t cols[] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 23, 24, 25, 30};
    static const int64_t ns[] = {32, 64, 96, 288, 800};
    int bad = 0, cases = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            for (size_t j = 0; j < sizeof cols / sizeof cols[0]; j++, cases++)
                bad += run_case(kd, pk, rows[i], cols[j], ns[a], (int)(cases & 1));
    static const int64_t rows2[] = {1, 17, 40}, cols2[] = {1, 11, 12, 13, 30};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 5; j++, cases++) bad += run_case(kd, pk, rows2[i], cols2[j], 2048, (int)(cases & 1));
    CHECK_MSG(bad == 0, "%s: %d outputs differ from the model over %d shapes", kd->name, bad, cases);
}

/* Larger shapes: several groups; 70 columns = tiles of 6 and a tail; n =
 * 16384 makes the column panel narrower than 70 (two panels, the table on
 * the heap); n = 262176 (8193 blocks): a 64 KB table per column, panels of
 * 3 columns. */
static void test_large(const wkind *kd, const tela_qdot_packing *pk) {
    int bad = run_case(kd, pk, 100, 70, 2048, 1);
    bad += run_case(kd, pk, 17, 70, 16384, 1);
    bad += run_case(kd, pk, 3, 130, 8192, 0);
    bad += run_case(kd, pk, 18, 7, 262176, 1);
    CHECK_MSG(bad == 0, "%s: %d outputs differ from the model in the large shapes", kd->name, bad);
}

/* The model (hence the kernels) against the exact dot product of the
 * quant layer's dequantized rows: every block's integer sum is exact, the
 * scale product and each fused add round once (relative 2^-24 each), so
 * |model - exact| <= (nb + 2) * 2^-23 * sum_b |d_w d_x isum_b|. */
static void test_vs_dequantized(const wkind *kd, const tela_qdot_packing *pk) {
    const int64_t n_rows = 37, n_cols = 13, n = 1024, nb = n / 32;
    const size_t wrb = (size_t)nb * kd->bsize, xrb = (size_t)nb * sizeof(tela_block_q8_0);
    uint8_t *w = malloc(wrb * (size_t)n_rows), *x = malloc(xrb * (size_t)n_cols);
    float *wf = malloc((size_t)(n * n_rows) * sizeof *wf), *xf = malloc((size_t)(n * n_cols) * sizeof *xf);
    float *out = malloc((size_t)(n_rows * n_cols) * sizeof *out);
    if (!w || !x || !wf || !xf || !out) abort();
    for (int64_t r = 0; r < n_rows; r++) {
        rand_row(w + (size_t)r * wrb, n, kd->bsize);
        CHECK_OK(tela_dequantize_row(kd->type, w + (size_t)r * wrb, wf + r * n, n));
    }
    for (int64_t c = 0; c < n_cols; c++) {
        rand_x(x + (size_t)c * xrb, n, 1);
        CHECK_OK(tela_dequantize_row(TELA_TYPE_Q8_0, x + (size_t)c * xrb, xf + c * n, n));
    }
    uint8_t *packed = pack_all(pk, w, wrb, n_rows, n, 0);
    pk->gemm(packed, n_rows, 0, (n_rows + 15) / 16, x, xrb, n_cols, n, out, n_rows);
    int bad = 0;
    double worst = 0;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t c = 0; c < n_cols; c++) {
            double exact = 0, mag = 0;
            for (int64_t b = 0; b < nb; b++) {
                double blk = 0;
                for (int k = 0; k < 32; k++) blk += (double)wf[r * n + 32 * b + k] * xf[c * n + 32 * b + k];
                exact += blk;
                mag += fabs(blk);
            }
            const double err = fabs(out[c * n_rows + r] - exact), tol = (double)(nb + 2) * ldexp(1.0, -23) * mag;
            if (mag > 0 && err / mag > worst) worst = err / mag;
            if (!(err <= tol)) bad++;
        }
    CHECK_MSG(bad == 0, "%s: %d outputs off the dequantized dot product (worst relative error %g)", kd->name, bad,
              worst);
    free(packed);
    free(w);
    free(x);
    free(wf);
    free(xf);
    free(out);
}

/* Packing pieces [g0, g1) in any order gives the bytes of one call, and
 * every byte of the buffer is written. */
static void test_pack_pieces(const wkind *kd, const tela_qdot_packing *pk) {
    const int64_t n_rows = 53, n = 160, groups = 4;
    const size_t rb = (size_t)(n / 32) * kd->bsize, gb = pk->group_bytes(n);
    CHECK(gb % 64 == 0);
    CHECK(gb >= 16 * rb);
    uint8_t *w = malloc(rb * (size_t)n_rows);
    if (!w) abort();
    for (int64_t r = 0; r < n_rows; r++) rand_row(w + (size_t)r * rb, n, kd->bsize);
    uint8_t *a = xalloc(gb * groups), *b = xalloc(gb * groups);
    memset(a, 0x11, gb * groups);
    memset(b, 0x77, gb * groups);
    pk->pack(w, rb, n_rows, n, 0, groups, a);
    pk->pack(w, rb, n_rows, n, 3, 4, b);
    pk->pack(w, rb, n_rows, n, 1, 3, b);
    pk->pack(w, rb, n_rows, n, 0, 1, b);
    CHECK(memcmp(a, b, gb * groups) == 0);
    free(w);
    free(a);
    free(b);
}

/* tela_op_matmul on packed weights: the same outputs for 1, 2 and 3
 * threads (chunks of different sizes), equal to the model applied to the
 * activations quantized by the kernels' own from_float, and close to the
 * unpacked path. */
static void test_matmul(const wkind *kd) {
    const tela_qdot_traits *q = tela_qdot_get(kd->type);
    if (!q || q->packing.pack_rows == 0) return;
    tela_ops_set_exact_matmul(false);
    const int64_t n_rows = 203, n = 512;
    const int n_tok = 29;
    const size_t rb = (size_t)(n / 32) * kd->bsize, xrb = (size_t)(n / 32) * sizeof(tela_block_q8_0);
    uint8_t *w = malloc(rb * (size_t)n_rows), *xq = malloc(xrb * n_tok);
    float *x = malloc(sizeof(float) * (size_t)(n * n_tok)), *y[4];
    if (!w || !x || !xq) abort();
    for (int64_t r = 0; r < n_rows; r++) rand_row(w + (size_t)r * rb, n, kd->bsize);
    for (int64_t i = 0; i < n * n_tok; i++) x[i] = test_gauss();
    tela_mat m = {.type = kd->type, .data = w, .n_rows = n_rows, .n_cols = n, .row_bytes = rb};
    const size_t pbytes = tela_op_pack_bytes(&m);
    if (pbytes == 0) {
        printf("note: %s: packing is off (TELA_PACK=0?), tela_op_matmul not tested packed\n", kd->name);
        free(w);
        free(x);
        free(xq);
        return;
    }
    CHECK(pbytes == q->packing.group_bytes(n) * (size_t)((n_rows + 15) / 16));
    void *pbuf = xalloc(pbytes);
    matmul_four_ways(&m, pbuf, x, n, n_rows, n_tok, y);
    int bad = 0, far = 0;
    for (int t = 0; t < n_tok; t++) {
        q->from_float(x + t * n, xq + (size_t)t * xrb, n);
        for (int64_t r = 0; r < n_rows; r++) {
            double mag;
            const float want = model_dot_mag(w + (size_t)r * rb, xq + (size_t)t * xrb, n, kd, &mag);
            bad += !same_bits(y[0][t * n_rows + r], want);
            /* the unpacked kernels round in another order: both within
             * (nb + 2) 2^-23 mag of the exact sum */
            const double tol = (double)(n / 32 + 2) * ldexp(1.0, -22) * mag;
            far += !(fabs((double)y[0][t * n_rows + r] - y[3][t * n_rows + r]) <= tol);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d matmul outputs differ from the model", kd->name, bad);
    CHECK_MSG(far == 0, "%s: %d matmul outputs far from the unpacked kernels'", kd->name, far);
    for (int k = 0; k < 4; k++) free(y[k]);
    free(pbuf);
    free(w);
    free(x);
    free(xq);
}

int main(void) {
    test_rng_seed(0x2545f4914f6cdd1dull);
    int ran = 0;
    for (size_t i = 0; i < sizeof k_kinds / sizeof k_kinds[0]; i++) {
        const wkind *kd = &k_kinds[i];
        const tela_qdot_traits *q = tela_qdot_get_isa(kd->type, TELA_ISA_AVX512);
        if (!q || q->packing.pack_rows == 0) continue;
        CHECK_EQ_INT(q->packing.pack_rows, 16);
        test_pack_pieces(kd, &q->packing);
        test_edge_shapes(kd, &q->packing);
        test_large(kd, &q->packing);
        if (tela_qdot_amx_q8_active()) { /* those ran on the AMX tiles (16+ columns): now the VNNI tiles */
            tela_qdot_amx_allow(false);
            test_edge_shapes(kd, &q->packing);
            test_large(kd, &q->packing);
            tela_qdot_amx_allow(true);
        }
        test_vs_dequantized(kd, &q->packing);
        test_matmul(kd);
        ran++;
    }
    if (!ran) test_skip("no packed Q8_0/Q4_0 kernels on this CPU");
    printf("AMX tiles %s\n", tela_qdot_amx_q8_active() ? "on: shapes of 16+ columns checked on them and on the VNNI tiles"
                                                         : "not in use (no AMX, or TELA_AMX not 1): the VNNI tiles checked");
    return test_finish();
}
