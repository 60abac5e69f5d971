/* test_qdot_packed_f.c: the packed-layout kernels for float weights (F16,
 * BF16, F32; backend/cpu/qdot.h, "Packed weights"; AVX-512), against a
 * scalar model written here from the numerical contract in qdot.h: per
 * output (r, c),
 *   acc = 0; for i = 0 .. n-1: acc = fmaf(w[r][i], x[c][i], acc)
 * with w[r][i] the stored weight converted exactly to float (util/fp16.h).
 * Checks:
 *  - the packed bytes follow the documented layout (group g, element k,
 *    row j at g * group_bytes + k * 16 * esize + j * esize; rows past
 *    n_rows zero), and packing in pieces gives the bytes of one call;
 *  - bitwise equality with the model over edge shapes: row counts around
 *    the 16-row group (1..40), column counts around the 12-column tile
 *    (1..30), n in {1, 7, 16, 64, 300}, odd weight/activation strides,
 *    misaligned source rows, output strides with sentinels in between,
 *    group sub-ranges [g0, g1) (only their rows are written), decoding
 *    (one column) over more groups than its 8-group tile;
 *  - larger shapes crossing the kernels' k blocks (512) and group blocks
 *    (16 groups), with a column tail;
 *  - the model against the dot product in double, within the rounding
 *    bound of n fused adds (so the order model is a correct dot product);
 *  - tela_op_matmul with packed weights on pools of 1, 2 and 3 threads:
 *    identical outputs, equal to the model, close to the unpacked kernels. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/qdot.h"
#include "util/threadpool.h"
#include "test.h"
#include "test_matmul_ways.h"
#include "util/fp16.h"


typedef struct {
    tela_type type;
    size_t esize; /* bytes per element */
    const char *name;
} wkind;

static const wkind k_kinds[] = {
    {TELA_TYPE_F16, 2, "f16"},
    {TELA_TYPE_BF16, 2, "bf16"},
    {TELA_TYPE_F32, 4, "f32"},
};

/* Element i of a stored row as float (exact conversions). */
static float w_at(const uint8_t *row, int64_t i, const wkind *kd) {
    if (kd->esize == 4) {
        float f;
        memcpy(&f, row + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + 2 * i, 2);
    return kd->type == TELA_TYPE_F16 ? tela_f16_to_f32(h) : tela_bf16_to_f32(h);
}

/* A random weight stored in the type: mostly gaussian, sometimes zero, -0,
 * tiny (f16 subnormal) or large. */
static void rand_w(uint8_t *dst, const wkind *kd) {
    const uint64_t k = test_rnd() % 64;
    float f = k == 0 ? 0.0f : k == 1 ? -0.0f : k == 2 ? 3e-6f * test_gauss() : k == 3 ? 300.0f * test_gauss() : 0.05f * test_gauss();
    if (kd->esize == 4) {
        memcpy(dst, &f, 4);
        return;
    }
    const uint16_t h = kd->type == TELA_TYPE_F16 ? tela_f32_to_f16(f) : tela_f32_to_bf16(f);
    memcpy(dst, &h, 2);
}

static float rand_x(void) { return test_gauss() * (test_rnd() % 50 == 0 ? 30.0f : 1.0f); }

/* The contract: one output from the original rows (and sum |w x| in mag). */
static float model_dot_mag(const uint8_t *w, const float *x, int64_t n, const wkind *kd, double *mag) {
    float acc = 0.0f;
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        const float wi = w_at(w, i, kd);
        acc = fmaf(wi, x[i], acc);
        m += fabs((double)wi * x[i]);
    }
    if (mag) *mag = m;
    return acc;
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
/* 0: outputs must be the contract's bits; else (the opt-in AMX bf16 tiles)
 * within g_tol * sum |w x| of the dot product in double. */
static double g_tol;

static int run_case(const wkind *kd, const tela_qdot_packing *pk, int64_t n_rows, int64_t n_cols, int64_t n) {
    const size_t es = kd->esize, wrb = (size_t)n * es;
    /* F16/BF16 rows only 2-byte aligned (odd element offsets), F32 rows 4 */
    const size_t ws = wrb + (size_t)(test_rnd() % 3) * es;
    const int64_t xs = n + (int64_t)(test_rnd() % 3); /* floats */
    const size_t wbytes = ws * (size_t)(n_rows - 1) + wrb;
    const size_t xcount = (size_t)(xs * (n_cols - 1) + n);
    /* exact-size buffers at odd element offsets: ASan catches any read past them */
    uint8_t *wbuf = malloc(wbytes + es);
    float *xbuf = malloc((xcount + 1) * sizeof *xbuf);
    if (!wbuf || !xbuf) abort();
    uint8_t *w = wbuf + es;
    const float *x = xbuf + 1;
    memset(wbuf, 0x5A, wbytes + es);
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) rand_w(w + (size_t)r * ws + (size_t)i * es, kd);
    for (size_t i = 0; i <= xcount; i++) xbuf[i] = rand_x();
    uint8_t *packed = pack_all(pk, w, ws, n_rows, n, (int)(test_rnd() & 1));
    const int64_t groups = (n_rows + 15) / 16;
    const int64_t os = groups * 16 + (int64_t)(test_rnd() % 3);
    float *out = malloc((size_t)(os * n_cols) * sizeof *out), *want = malloc((size_t)(n_rows * n_cols) * sizeof *want);
    double *exact = malloc((size_t)(n_rows * n_cols) * sizeof *exact), *mag = malloc((size_t)(n_rows * n_cols) * sizeof *mag);
    if (!out || !want || !exact || !mag) abort();
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t c = 0; c < n_cols; c++) {
            want[r * n_cols + c] = model_dot_mag(w + (size_t)r * ws, x + c * xs, n, kd, &mag[r * n_cols + c]);
            double e = 0;
            for (int64_t i = 0; i < n; i++) e += (double)w_at(w + (size_t)r * ws, i, kd) * x[c * xs + i];
            exact[r * n_cols + c] = e;
        }
    int bad = 0;
    const int64_t ranges[4][2] = {{0, groups}, {groups / 2, groups}, {0, (groups + 1) / 2}, {1, groups - 1}};
    for (int k = 0; k < 4; k++) {
        const int64_t g0 = ranges[k][0], g1 = ranges[k][1];
        if (g0 >= g1 || (k > 0 && groups == 1)) continue;
        for (int64_t i = 0; i < os * n_cols; i++) out[i] = sentinel();
        pk->gemm(packed, n_rows, g0, g1, x, (size_t)xs * sizeof(float), n_cols, n, out, os);
        for (int64_t c = 0; c < n_cols; c++)
            for (int64_t r = 0; r < os; r++) {
                const float got = out[c * os + r];
                const int written = r < n_rows && r >= g0 * 16 && r < g1 * 16;
                const int ok = !written           ? same_bits(got, sentinel())
                               : g_tol == 0       ? same_bits(got, want[r * n_cols + c])
                                                  : fabs(got - exact[r * n_cols + c]) <= g_tol * mag[r * n_cols + c] + 1e-30;
                if (!ok) {
                    if (bad++ < 5)
                        fprintf(stderr,
                                "%s rows %lld cols %lld n %lld groups [%lld, %lld): out[%lld][%lld] = %.9g, want %.9g\n",
                                kd->name, (long long)n_rows, (long long)n_cols, (long long)n, (long long)g0,
                                (long long)g1, (long long)c, (long long)r, got,
                                written ? want[r * n_cols + c] : sentinel());
                }
            }
    }
    free(packed);
    free(out);
    free(want);
    free(exact);
    free(mag);
    free(wbuf);
    free(xbuf);
    return bad;
}

static void test_edge_shapes(const wkind *kd, const tela_qdot_packing *pk) {
    static const int64_t rows[] = {1, 2, 7, 15, 16, 17, 31, 32, 33, 40};
    static const int64_t cols[] = {1, 2, 3, 5, 8, 11, 12, 13, 23, 24, 25, 30};
    static const int64_t ns[] = {1, 7, 16, 64, 300};
    int bad = 0, cases = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            for (size_t j = 0; j < sizeof cols / sizeof cols[0]; j++, cases++)
                bad += run_case(kd, pk, rows[i], cols[j], ns[a]);
    /* decoding and narrow batches over more groups than the 8-group tile */
    static const int64_t rows2[] = {129, 200, 263}, cols2[] = {1, 2, 3};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 3; j++, cases++) bad += run_case(kd, pk, rows2[i], cols2[j], 33 + 64 * (int64_t)i);
    CHECK_MSG(bad == 0, "%s: %d outputs differ from the model over %d shapes", kd->name, bad, cases);
}

/* Larger shapes: k blocks of 512 with a tail, group blocks of 16 with a
 * tail, 70 columns = tiles of 12 and a tail of 10. */
static void test_large(const wkind *kd, const tela_qdot_packing *pk) {
    int bad = run_case(kd, pk, 100, 70, 2048);
    bad += run_case(kd, pk, 290, 27, 1100);
    bad += run_case(kd, pk, 33, 1, 5000);
    CHECK_MSG(bad == 0, "%s: %d outputs differ from the model in the large shapes", kd->name, bad);
}

/* The packed bytes: group g, element k, row j at g * group_bytes + (k * 16
 * + j) * esize, the stored bytes of row 16 g + j (zero past n_rows). */
static void test_layout(const wkind *kd, const tela_qdot_packing *pk) {
    const int64_t n_rows = 37, n = 21, groups = 3;
    const size_t es = kd->esize, ws = (size_t)n * es + es, gb = pk->group_bytes(n);
    CHECK(gb >= (size_t)n * 16 * es);
    CHECK(gb % 64 == 0);
    uint8_t *w = malloc(ws * (size_t)n_rows);
    if (!w) abort();
    for (size_t i = 0; i < ws * (size_t)n_rows; i++) w[i] = (uint8_t)test_rnd();
    uint8_t *p = pack_all(pk, w, ws, n_rows, n, 0), *q = xalloc(gb * groups);
    int bad = 0;
    for (int64_t g = 0; g < groups; g++)
        for (int64_t k = 0; k < n; k++)
            for (int64_t j = 0; j < 16; j++) {
                const uint8_t *got = p + (size_t)g * gb + (size_t)(k * 16 + j) * es;
                const int64_t r = g * 16 + j;
                for (size_t b = 0; b < es; b++)
                    bad += got[b] != (r < n_rows ? w[(size_t)r * ws + (size_t)k * es + b] : 0);
            }
    CHECK_MSG(bad == 0, "%s: %d packed bytes off the documented layout", kd->name, bad);
    /* pieces in any order give the same bytes */
    memset(q, 0x77, gb * groups);
    pk->pack(w, ws, n_rows, n, 2, 3, q);
    pk->pack(w, ws, n_rows, n, 0, 1, q);
    pk->pack(w, ws, n_rows, n, 1, 2, q);
    CHECK(memcmp(p, q, gb * groups) == 0);
    free(w);
    free(p);
    free(q);
}

/* The model (hence the kernels) against the dot product in double: n fused
 * adds each round once (relative 2^-24), so |model - exact| <= n 2^-24 *
 * (1 + n 2^-24) * sum |w x|; the kernels reach the model bit for bit. */
static void test_vs_double(const wkind *kd, const tela_qdot_packing *pk) {
    const int64_t n_rows = 37, n_cols = 13, n = 1537;
    const size_t ws = (size_t)n * kd->esize;
    uint8_t *w = malloc(ws * (size_t)n_rows);
    float *x = malloc((size_t)(n * n_cols) * sizeof *x), *out = malloc((size_t)(n_rows * n_cols) * sizeof *out);
    if (!w || !x || !out) abort();
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) rand_w(w + (size_t)r * ws + (size_t)i * kd->esize, kd);
    for (int64_t i = 0; i < n * n_cols; i++) x[i] = rand_x();
    uint8_t *packed = pack_all(pk, w, ws, n_rows, n, 0);
    pk->gemm(packed, n_rows, 0, (n_rows + 15) / 16, x, (size_t)n * sizeof(float), n_cols, n, out, n_rows);
    int bad = 0;
    double worst = 0;
    const double u = ldexp(1.0, -24);
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t c = 0; c < n_cols; c++) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                const double p = (double)w_at(w + (size_t)r * ws, i, kd) * x[c * n + i];
                exact += p;
                mag += fabs(p);
            }
            const double err = fabs(out[c * n_rows + r] - exact), tol = (double)n * u * (1 + (double)n * u) * mag;
            if (mag > 0 && err / mag > worst) worst = err / mag;
            if (!(err <= tol)) bad++;
        }
    CHECK_MSG(bad == 0, "%s: %d outputs off the double dot product (worst relative error %g)", kd->name, bad, worst);
    free(packed);
    free(w);
    free(x);
    free(out);
}

/* tela_op_matmul on packed weights: the same outputs for 1, 2 and 3
 * threads (chunks of different sizes), equal to the model, and close to
 * the unpacked kernels (another summation order). */
static void test_matmul(const wkind *kd) {
    const tela_qdot_traits *q = tela_qdot_get(kd->type);
    if (!q || q->packing.pack_rows == 0) return;
    const int64_t n_rows = 203, n = 520;
    const int n_tok = 29;
    const size_t rb = (size_t)n * kd->esize;
    uint8_t *w = malloc(rb * (size_t)n_rows);
    float *x = malloc(sizeof(float) * (size_t)(n * n_tok)), *y[4];
    if (!w || !x) abort();
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) rand_w(w + (size_t)r * rb + (size_t)i * kd->esize, kd);
    for (int64_t i = 0; i < n * n_tok; i++) x[i] = rand_x();
    tela_mat m = {.type = kd->type, .data = w, .n_rows = n_rows, .n_cols = n, .row_bytes = rb};
    const size_t pbytes = tela_op_pack_bytes(&m);
    if (pbytes == 0) {
        printf("note: %s: packing is off (TELA_PACK=0?), tela_op_matmul not tested packed\n", kd->name);
        free(w);
        free(x);
        return;
    }
    CHECK(pbytes == q->packing.group_bytes(n) * (size_t)((n_rows + 15) / 16));
    void *pbuf = xalloc(pbytes);
    matmul_four_ways(&m, pbuf, x, n, n_rows, n_tok, y);
    int bad = 0, far = 0;
    for (int t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < n_rows; r++) {
            double mag;
            const float want = model_dot_mag(w + (size_t)r * rb, x + t * n, n, kd, &mag);
            bad += !same_bits(y[0][t * n_rows + r], want);
            /* both orders within n 2^-24 mag of the exact sum */
            const double diff = fabs((double)y[0][t * n_rows + r] - y[3][t * n_rows + r]);
            far += !(diff <= 2.0 * (double)n * ldexp(1.0, -24) * mag);
        }
    CHECK_MSG(bad == 0, "%s: %d matmul outputs differ from the model", kd->name, bad);
    CHECK_MSG(far == 0, "%s: %d matmul outputs far from the unpacked kernels'", kd->name, far);
    for (int k = 0; k < 4; k++) free(y[k]);
    free(pbuf);
    free(w);
    free(x);
}

int main(void) {
    test_rng_seed(0x853c49e6748fea9bull);
    /* the contract's bits first; the opt-in AMX bf16 tiles (TELA_AMX_FLOAT=1
     * on a CPU with AMX) after, within their bound */
    const bool amx_float = tela_qdot_amx_float_active();
    tela_qdot_amx_float_allow(false);
    int ran = 0;
    for (size_t i = 0; i < sizeof k_kinds / sizeof k_kinds[0]; i++) {
        const wkind *kd = &k_kinds[i];
        const tela_qdot_traits *q = tela_qdot_get_isa(kd->type, TELA_ISA_AVX512);
        if (!q || q->packing.pack_rows == 0) continue;
        CHECK_EQ_INT(q->packing.pack_rows, 16);
        test_layout(kd, &q->packing);
        test_edge_shapes(kd, &q->packing);
        test_large(kd, &q->packing);
        test_vs_double(kd, &q->packing);
        test_matmul(kd);
        ran++;
        /* the opt-in AMX bf16 tiles (16+ columns): within 2^-14 of sum |w x|
         * (their dropped terms are below 2^-16 of each product) */
        if (kd->type != TELA_TYPE_F32 && amx_float) {
            tela_qdot_amx_float_allow(true);
            g_tol = 1.0 / 16384;
            static const int64_t rows[] = {1, 16, 17, 40}, cols[] = {16, 17, 33, 64, 65, 130};
            static const int64_t ns[] = {1, 31, 64, 300, 2048};
            int bad = 0;
            for (size_t a = 0; a < 5; a++)
                for (size_t r = 0; r < 4; r++)
                    for (size_t c = 0; c < 6; c++) bad += run_case(kd, &q->packing, rows[r], cols[c], ns[a]);
            CHECK_MSG(bad == 0, "%s: %d outputs of the AMX bf16 tiles outside the bound", kd->name, bad);
            g_tol = 0;
            tela_qdot_amx_float_allow(false);
            printf("%s: AMX bf16 tiles checked against double\n", kd->name);
        }
    }
    if (!ran) test_skip("no packed float kernels on this CPU");
    return test_finish();
}
