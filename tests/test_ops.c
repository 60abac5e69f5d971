/* test_ops.c: the CPU backend's ops and thread pool against naive
 * double-precision implementations written here from the definitions:
 * matmul over F32/F16/BF16/Q8_0 weights (Q8_0 blocks built by hand; for
 * Q8_0 both the fast path, against the Q8_0 activations computed here from
 * the format's definition and within the activation-rounding bound of the
 * f32 product, and the exact path), row
 * lookup, RMSNorm, both RoPE layouts (and the row permutation that relates
 * them), softmax, SwiGLU, causal GQA attention; bit-identical results for
 * any thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/ops.h"
#include "util/threadpool.h"
#include "quant/quant.h"
#include "test.h"
#include "util/fp16.h"

static uint64_t rng_state = 88172645463325252ULL;

static double rnd(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static void fill(float *x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(rnd() * scale);
}

/* ---------------------------------------------------------- thread pool */

typedef struct {
    int calls[8];
    long long sum;
} count_job;

static void count_task(void *p, int ith, int nth) {
    count_job *j = p;
    (void)nth;
    j->calls[ith]++;
    long long b, e;
    tela_split_range(1000, ith, nth, &b, &e);
    long long s = 0;
    for (long long i = b; i < e; i++) s += i;
    __atomic_fetch_add(&j->sum, s, __ATOMIC_RELAXED);
}

static void count_chunk(void *p, int chunk, int ith) {
    int *hits = p;
    (void)ith;
    __atomic_fetch_add(&hits[chunk], 1, __ATOMIC_RELAXED);
}

/* A pool whose workers sleep at once after each job (spin 0, the engine's
 * sampling pool): every chunk still runs exactly once a job, also when
 * the workers are asleep as a job starts. */
static void check_pool_asleep(tela_threadpool *pool) {
    enum { JOBS = 40, CHUNKS = 37 };
    int hits[CHUNKS] = {0};
    tela_threadpool_set_spin(pool, 0);
    for (int r = 0; r < JOBS; r++) {
        tela_threadpool_run_chunks(pool, count_chunk, hits, CHUNKS);
        if (r % 4 == 0) usleep(300); /* long enough for the workers to be on the condition variable */
    }
    int ok = 1;
    for (int c = 0; c < CHUNKS; c++) ok &= hits[c] == JOBS;
    CHECK_MSG(ok, "a pool that does not spin ran some chunk other than %d times", JOBS);
}

static void test_threadpool(void) {
    for (int nt = 1; nt <= 4; nt++) {
        tela_threadpool *pool;
        CHECK_OK(tela_threadpool_create(nt, &pool));
        CHECK_EQ_INT(tela_threadpool_n_threads(pool), nt);
        count_job job;
        memset(&job, 0, sizeof job);
        int ok = 1;
        for (int r = 0; r < 300; r++) {
            job.sum = 0;
            tela_threadpool_run(pool, count_task, &job);
            if (job.sum != 999 * 1000 / 2) ok = 0;
        }
        CHECK(ok);
        for (int i = 0; i < nt; i++) CHECK_EQ_INT(job.calls[i], 300);
        CHECK_OK(tela_threadpool_reserve(pool, 1000));
        CHECK(tela_threadpool_scratch_size(pool) >= 1000);
        for (int i = 0; i < nt; i++) {
            float *s = tela_threadpool_scratch(pool, i);
            s[0] = 1.0f;
            s[999] = 2.0f;
            CHECK(((uintptr_t)s & 63) == 0);
        }
        check_pool_asleep(pool);
        tela_threadpool_free(pool);
    }
}

/* --------------------------------------------------------------- matmul */

/* A weight in a stored type plus its exact element values in double. */
typedef struct {
    tela_mat m;
    void *data;
    double *w; /* [rows][cols] exact values */
} test_weight;

static void make_weight(test_weight *tw, tela_type type, int rows, int cols) {
    tw->w = malloc(sizeof(double) * rows * cols);
    size_t rb = 0;
    if (type == TELA_TYPE_F32) rb = (size_t)cols * 4;
    if (type == TELA_TYPE_F16 || type == TELA_TYPE_BF16) rb = (size_t)cols * 2;
    if (type == TELA_TYPE_Q8_0) rb = (size_t)cols / 32 * sizeof(tela_block_q8_0);
    tw->data = malloc(rb * rows);
    for (int r = 0; r < rows; r++) {
        unsigned char *row = (unsigned char *)tw->data + rb * r;
        if (type == TELA_TYPE_Q8_0) {
            tela_block_q8_0 *b = (tela_block_q8_0 *)row;
            for (int k = 0; k < cols / 32; k++) {
                float d = (float)(0.001 + 0.01 * fabs(rnd()));
                b[k].d = tela_f32_to_f16(d);
                double dd = tela_f16_to_f32(b[k].d);
                for (int i = 0; i < 32; i++) {
                    int q = (int)floor(rnd() * 127.0);
                    b[k].qs[i] = (int8_t)q;
                    tw->w[(size_t)r * cols + k * 32 + i] = dd * q;
                }
            }
            continue;
        }
        for (int i = 0; i < cols; i++) {
            float v = (float)rnd();
            if (type == TELA_TYPE_F32) {
                memcpy(row + 4 * i, &v, 4);
                tw->w[(size_t)r * cols + i] = v;
            } else if (type == TELA_TYPE_F16) {
                uint16_t h = tela_f32_to_f16(v);
                memcpy(row + 2 * i, &h, 2);
                tw->w[(size_t)r * cols + i] = tela_f16_to_f32(h);
            } else {
                uint16_t h = tela_f32_to_bf16(v);
                memcpy(row + 2 * i, &h, 2);
                tw->w[(size_t)r * cols + i] = tela_bf16_to_f32(h);
            }
        }
    }
    tela_tensor t = {"test.weight", type, 2, {cols, rows, 1, 1}, tw->data, rb * rows};
    CHECK_OK(tela_mat_from_tensor(&t, &tw->m));
}

static void free_weight(test_weight *tw) {
    free(tw->w);
    free(tw->data);
}

static void test_matmul_type(tela_type type) {
    const int rows = 37, cols = 96, n_tok = 5, xs = 100, ys = 41;
    test_weight tw;
    make_weight(&tw, type, rows, cols);
    float *x = calloc((size_t)n_tok * xs, sizeof(float));
    fill(x, (size_t)n_tok * xs, 1.0);
    float *y[4];
    for (int nt = 1; nt <= 4; nt++) {
        tela_threadpool *pool;
        CHECK_OK(tela_threadpool_create(nt, &pool));
        CHECK_OK(tela_threadpool_reserve(pool, tela_op_matmul_scratch(cols)));
        y[nt - 1] = calloc((size_t)n_tok * ys, sizeof(float));
        for (int i = 0; i < n_tok * ys; i++) y[nt - 1][i] = 12345.0f; /* padding must stay */
        tela_op_matmul(pool, &tw.m, x, xs, y[nt - 1], ys, n_tok);
        tela_threadpool_free(pool);
    }
    /* Quantized weights take 8-bit activations unless in exact mode. */
    int quantized = type == TELA_TYPE_Q8_0 && !tela_ops_exact_matmul();
    int bad = 0, pad_bad = 0, thread_diff = 0, bound_bad = 0;
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + t * xs;
        for (int o = 0; o < rows; o++) {
            const double *wo = tw.w + (size_t)o * cols;
            double ref = 0.0, mag = 0.0, exact = 0.0, bound = 0.0;
            if (quantized) {
                /* Q8_0 by its definition: per 32 values d = amax / 127
                 * stored as f16, q = round(x / d); the dot product is then
                 * sum over blocks of d_x * sum(w * q). */
                for (int k = 0; k < cols; k += 32) {
                    double amax = 0.0, wsum = 0.0;
                    for (int i = k; i < k + 32; i++)
                        if (fabs(xt[i]) > amax) amax = fabs(xt[i]);
                    float d = (float)(amax / 127.0);
                    double dh = tela_f16_to_f32(tela_f32_to_f16(d));
                    for (int i = k; i < k + 32; i++) {
                        double q = d > 0 ? round(xt[i] / d) : 0.0;
                        ref += wo[i] * q * dh;
                        mag += fabs(wo[i] * q * dh);
                        exact += wo[i] * xt[i];
                        wsum += fabs(wo[i]);
                    }
                    /* |x - q d_h| <= d/2 (rounding) + 127 |d - d_h| (f16 scale, relative error <= 2^-11) */
                    bound += wsum * (0.5 * d + 127.0 * d / 2048.0);
                }
                if (fabs(y[0][t * ys + o] - exact) > bound * 1.0001 + 1e-6 * mag) bound_bad++;
            } else {
                for (int i = 0; i < cols; i++) {
                    ref += wo[i] * xt[i];
                    mag += fabs(wo[i] * xt[i]);
                }
            }
            if (fabs(y[0][t * ys + o] - ref) > 2e-6 * mag + 1e-30) bad++;
        }
        for (int o = rows; o < ys; o++)
            if (y[0][t * ys + o] != 12345.0f) pad_bad++;
    }
    for (int nt = 2; nt <= 4; nt++)
        if (memcmp(y[0], y[nt - 1], sizeof(float) * n_tok * ys)) thread_diff++;
    CHECK_MSG(bad == 0, "type %d%s: %d outputs off", (int)type, quantized ? " (8-bit activations)" : "", bad);
    CHECK_MSG(bound_bad == 0, "type %d: %d outputs beyond the activation-quantization bound", (int)type, bound_bad);
    CHECK_EQ_INT(pad_bad, 0);
    CHECK_MSG(thread_diff == 0, "type %d: results differ between thread counts", (int)type);
    for (int nt = 0; nt < 4; nt++) free(y[nt]);
    free(x);
    free_weight(&tw);
}

static void test_mat_view_errors(void) {
    float data[64];
    tela_mat m;
    tela_tensor t = {"bad.weight", TELA_TYPE_F32, 2, {16, 4, 1, 1}, data, sizeof data - 4};
    CHECK(tela_mat_from_tensor(&t, &m) == TELA_ERR_FORMAT);
    CHECK(strstr(tela_last_error(), "bad.weight") != NULL);
    tela_tensor q = {"q.weight", TELA_TYPE_Q8_0, 2, {48, 1, 1, 1}, data, 64}; /* 48 not a multiple of 32 */
    CHECK(tela_mat_from_tensor(&q, &m) != TELA_OK);
    tela_tensor i32 = {"i.weight", (tela_type)4 /* removed from ggml */, 2, {16, 1, 1, 1}, data, 64};
    CHECK(tela_mat_from_tensor(&i32, &m) == TELA_ERR_UNSUPPORTED);
}

/* Weights at an odd address (safetensors offsets need not be aligned) give
 * the same results. */
static void test_misaligned(void) {
    const tela_type types[2] = {TELA_TYPE_F32, TELA_TYPE_F16};
    for (int k = 0; k < 2; k++) {
        test_weight tw;
        make_weight(&tw, types[k], 9, 40);
        unsigned char *odd = malloc(tw.m.row_bytes * 9 + 1);
        memcpy(odd + 1, tw.data, tw.m.row_bytes * 9);
        tela_mat m2 = tw.m;
        m2.data = odd + 1;
        float x[40], y1[9], y2[9];
        fill(x, 40, 1.0);
        tela_threadpool *pool;
        CHECK_OK(tela_threadpool_create(1, &pool));
        CHECK_OK(tela_threadpool_reserve(pool, 40));
        tela_op_matmul(pool, &tw.m, x, 40, y1, 9, 1);
        tela_op_matmul(pool, &m2, x, 40, y2, 9, 1);
        CHECK(!memcmp(y1, y2, sizeof y1));
        int32_t id = 4;
        tela_op_get_rows(&m2, &id, 1, x, 40);
        CHECK((double)x[7] == tw.w[4 * 40 + 7]);
        tela_threadpool_free(pool);
        free(odd);
        free_weight(&tw);
    }
}

static void test_get_rows(void) {
    test_weight tw;
    make_weight(&tw, TELA_TYPE_Q8_0, 10, 64);
    int32_t ids[3] = {7, 0, 7};
    float out[3 * 70];
    tela_op_get_rows(&tw.m, ids, 3, out, 70);
    int bad = 0;
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 64; i++)
            if ((double)out[t * 70 + i] != tw.w[ids[t] * 64 + i]) bad++;
    CHECK_EQ_INT(bad, 0);
    free_weight(&tw);
}

/* An embedding split by vocabulary in two parts (rows 0-3 and 4-9 of a
 * Q8_0 table): the first part writes its rows and zeros, the second adds
 * its rows; together the whole table's rows, exactly. A part with
 * accumulate leaves the rows of other parts' ids as they were. */
static void test_get_rows_part(void) {
    test_weight tw;
    make_weight(&tw, TELA_TYPE_Q8_0, 10, 64);
    tela_mat lo = tw.m, hi = tw.m;
    lo.n_rows = 4;
    hi.n_rows = 6;
    hi.data = (const unsigned char *)tw.m.data + 4 * tw.m.row_bytes;
    int32_t ids[5] = {7, 0, 3, 9, 4};
    float out[5 * 70], scratch[64];
    for (int i = 0; i < 5 * 70; i++) out[i] = 1e30f; /* poison */
    tela_op_get_rows_part(&lo, 0, false, ids, 5, out, 70, NULL);
    int bad = 0;
    for (int t = 0; t < 5; t++)
        for (int i = 0; i < 64; i++)
            if ((double)out[t * 70 + i] != (ids[t] < 4 ? tw.w[ids[t] * 64 + i] : 0.0)) bad++;
    CHECK_EQ_INT(bad, 0);
    tela_op_get_rows_part(&hi, 4, true, ids, 5, out, 70, scratch);
    bad = 0;
    for (int t = 0; t < 5; t++)
        for (int i = 0; i < 64; i++)
            if ((double)out[t * 70 + i] != tw.w[ids[t] * 64 + i]) bad++;
    CHECK_EQ_INT(bad, 0);
    /* accumulate into other values: rows of its ids added, the rest kept */
    for (int i = 0; i < 5 * 70; i++) out[i] = 0.5f;
    tela_op_get_rows_part(&hi, 4, true, ids, 5, out, 70, scratch);
    bad = 0;
    for (int t = 0; t < 5; t++)
        for (int i = 0; i < 64; i++)
            if (out[t * 70 + i] != (ids[t] >= 4 ? (float)(0.5 + tw.w[ids[t] * 64 + i]) : 0.5f)) bad++;
    CHECK_EQ_INT(bad, 0);
    free_weight(&tw);
}

/* ---------------------------------------------------------- elementwise */

static void test_rmsnorm(void) {
    const int n = 50, nt = 3;
    float x[3 * 50], w[50], out[3 * 50];
    fill(x, sizeof x / sizeof x[0], 3.0);
    fill(w, 50, 1.0);
    tela_op_rmsnorm(out, n, x, n, w, n, nt, 1e-5f);
    for (int t = 0; t < nt; t++) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[t * n + i] * x[t * n + i];
        double s = 1.0 / sqrt(ss / n + 1e-5);
        for (int i = 0; i < n; i++) CHECK_NEAR(out[t * n + i], x[t * n + i] * s * w[i], 1e-6);
    }
    /* in place, no weight */
    float y[4] = {3, 4, 0, 0};
    tela_op_rmsnorm(y, 4, y, 4, NULL, 4, 1, 0.0f);
    CHECK_NEAR(y[0], 3.0 / sqrt(25.0 / 4), 1e-6);
    CHECK_NEAR(y[1], 4.0 / sqrt(25.0 / 4), 1e-6);
}

static void test_rope(void) {
    enum { HD = 12, NH = 3, NROT = 8, NT = 2 };
    double inv_freq[NROT / 2];
    for (int i = 0; i < NROT / 2; i++) inv_freq[i] = pow(10000.0, -2.0 * i / NROT) / (1.0 + i);
    int32_t pos[NT] = {5, 300};
    float cs[NT * NROT];
    tela_rope_table(cs, pos, NT, inv_freq, NROT);
    float x[NT * NH * HD], a[NT * NH * HD], b[NT * NH * HD];
    fill(x, sizeof x / sizeof x[0], 1.0);
    memcpy(a, x, sizeof x);
    memcpy(b, x, sizeof x);
    tela_op_rope(a, NH * HD, NT, NH, HD, NROT, cs, TELA_ROPE_ADJACENT);
    tela_op_rope(b, NH * HD, NT, NH, HD, NROT, cs, TELA_ROPE_HALVES);
    int bad = 0;
    for (int t = 0; t < NT; t++)
        for (int h = 0; h < NH; h++) {
            const float *v = x + t * NH * HD + h * HD;
            const float *va = a + t * NH * HD + h * HD, *vb = b + t * NH * HD + h * HD;
            for (int i = 0; i < NROT / 2; i++) {
                double th = pos[t] * inv_freq[i], c = cos(th), s = sin(th);
                /* adjacent pairs */
                if (fabs(va[2 * i] - (v[2 * i] * c - v[2 * i + 1] * s)) > 1e-5) bad++;
                if (fabs(va[2 * i + 1] - (v[2 * i] * s + v[2 * i + 1] * c)) > 1e-5) bad++;
                /* halves: HF's q*cos + rotate_half(q)*sin */
                if (fabs(vb[i] - (v[i] * c - v[i + NROT / 2] * s)) > 1e-5) bad++;
                if (fabs(vb[i + NROT / 2] - (v[i + NROT / 2] * c + v[i] * s)) > 1e-5) bad++;
            }
            for (int i = NROT; i < HD; i++) /* beyond n_rot: untouched */
                if (va[i] != v[i] || vb[i] != v[i]) bad++;
        }
    CHECK_EQ_INT(bad, 0);

    /* llama.cpp's converter permutes each head's rows so that row 2i holds
     * HF row i and row 2i+1 holds HF row i + d/2; adjacent-pair RoPE on the
     * permuted vector is the same rotation as halves RoPE on the original. */
    float hf[HD], gg[HD];
    fill(hf, HD, 1.0);
    for (int i = 0; i < HD / 2; i++) {
        gg[2 * i] = hf[i];
        gg[2 * i + 1] = hf[i + HD / 2];
    }
    double inv2[HD / 2];
    for (int i = 0; i < HD / 2; i++) inv2[i] = pow(500000.0, -2.0 * i / HD);
    int32_t p1 = 77;
    float cs2[HD];
    tela_rope_table(cs2, &p1, 1, inv2, HD);
    tela_op_rope(hf, HD, 1, 1, HD, HD, cs2, TELA_ROPE_HALVES);
    tela_op_rope(gg, HD, 1, 1, HD, HD, cs2, TELA_ROPE_ADJACENT);
    bad = 0;
    for (int i = 0; i < HD / 2; i++)
        if (gg[2 * i] != hf[i] || gg[2 * i + 1] != hf[i + HD / 2]) bad++;
    CHECK_EQ_INT(bad, 0);
}

static void test_softmax_swiglu_add(void) {
    float x[5] = {1.0f, 2.0f, 3.0f, -1000.0f, 2.0f};
    tela_op_softmax(x, 5);
    double z = exp(1) + 2 * exp(2) + exp(3);
    CHECK_NEAR(x[0], exp(1) / z, 1e-7);
    CHECK_NEAR(x[1], exp(2) / z, 1e-7);
    CHECK_NEAR(x[2], exp(3) / z, 1e-7);
    CHECK_NEAR(x[3], 0.0, 1e-30);
    CHECK(x[1] == x[4]);
    float big[2] = {1000.0f, 1000.0f}; /* no overflow */
    tela_op_softmax(big, 2);
    CHECK_NEAR(big[0], 0.5, 1e-7);

    float g[4] = {-2.0f, 0.0f, 0.5f, 3.0f}, u[4] = {1.0f, 5.0f, -2.0f, 0.25f};
    float g0[4];
    memcpy(g0, g, sizeof g);
    tela_op_swiglu(g, u, 4);
    for (int i = 0; i < 4; i++) CHECK_NEAR(g[i], g0[i] / (1.0 + exp(-(double)g0[i])) * u[i], 1e-6);

    /* the vectorized exp inside SwiGLU against double precision over the
     * whole float range of gates (tails of 16 included), and the pooled
     * version gives the same bits for any split */
    enum { NS = 100003 };
    float *gs = malloc(sizeof(float) * NS), *us = malloc(sizeof(float) * NS), *g2 = malloc(sizeof(float) * NS);
    for (int i = 0; i < NS; i++) {
        gs[i] = (float)(-120.0 + 240.0 * i / (NS - 1));
        us[i] = 1.0f + (float)(i % 7) * 0.25f;
    }
    memcpy(g2, gs, sizeof(float) * NS);
    tela_op_swiglu(gs, us, NS);
    int bad_silu = 0;
    for (int i = 0; i < NS; i++) {
        const double gd = g2[i], want = gd / (1.0 + exp(-gd)) * us[i];
        if (fabs(gs[i] - want) > 4e-7 * fabs(want) + 1e-30 && bad_silu++ < 3)
            fprintf(stderr, "swiglu(%.9g) = %.9g, want %.9g\n", gd, gs[i], want);
    }
    CHECK_EQ_INT(bad_silu, 0);
    tela_threadpool *sp;
    CHECK_OK(tela_threadpool_create(3, &sp));
    tela_op_swiglu_pool(sp, g2, us, NS);
    CHECK(!memcmp(gs, g2, sizeof(float) * NS));
    /* rmsnorm: pooled == serial */
    tela_op_rmsnorm(g2, 1000, us, 1000, NULL, 1000, 100, 1e-6f);
    tela_op_rmsnorm_pool(sp, gs, 1000, us, 1000, NULL, 1000, 100, 1e-6f);
    CHECK(!memcmp(gs, g2, sizeof(float) * 100000));
    tela_threadpool_free(sp);
    free(gs);
    free(us);
    free(g2);

    float a[3] = {1, 2, 3}, b[3] = {0.5f, -2, 4};
    tela_op_add(a, b, 3);
    CHECK(a[0] == 1.5f && a[1] == 0.0f && a[2] == 7.0f);
    CHECK_NEAR(tela_dot_f32(b, b, 3), 0.25 + 4 + 16, 1e-6);
}

/* ------------------------------------------------------------ attention */

/* Causal GQA attention against a double-precision reference, for head
 * shapes that take the vector paths (64 dims) and the scalar tails, key
 * counts around the 16-key blocks; identical bits for 1..3 threads and
 * whether the tokens come in one batch or one at a time (as prefill and
 * decode do). */
/* Runs the n_tok tokens of `batch` one at a time (as decode does): token t
 * with its query row and output row, at position pos0 + t. */
static void attention_by_token(tela_threadpool *pool, const tela_attn_args *batch) {
    for (int t = 0; t < batch->n_tok; t++) {
        tela_attn_args one = *batch;
        one.q = batch->q + t * batch->q_stride;
        one.out = batch->out + t * batch->out_stride;
        one.n_tok = 1;
        one.pos0 = batch->pos0 + t;
        tela_op_attention(pool, &one, 1);
    }
}

static void check_attention(int NH, int NKV, int KD, int VD, int POS0, int NT) {
    const int n_ctx = POS0 + NT;
    const int ks = NKV * KD + 3, vs = NKV * VD + 1; /* padded strides */
    const size_t on = (size_t)NT * NH * VD;
    float *q = calloc((size_t)NT * NH * KD, sizeof(float)), *k = calloc((size_t)n_ctx * ks, sizeof(float));
    float *v = calloc((size_t)n_ctx * vs, sizeof(float));
    fill(q, (size_t)NT * NH * KD, 2.0);
    fill(k, (size_t)n_ctx * ks, 2.0);
    fill(v, (size_t)n_ctx * vs, 1.0);
    float *out[4];
    for (int nt = 1; nt <= 4; nt++) {
        tela_threadpool *pool;
        CHECK_OK(tela_threadpool_create(nt < 4 ? nt : 2, &pool));
        CHECK_OK(tela_threadpool_reserve(pool, tela_op_attention_scratch(n_ctx, KD)));
        out[nt - 1] = calloc(on, sizeof(float));
        if (nt < 4) {
            tela_attn_args a = {q, NH * KD, k, ks, v, vs, out[nt - 1], NH * VD, NT, POS0, NH, NKV, KD, VD, 0.3f,
                                NULL, 0, 0, 0, 0, 0};
            tela_op_attention(pool, &a, 1);
        } else {
            const tela_attn_args a = {q, NH * KD, k, ks, v, vs, out[3], NH * VD, NT, POS0, NH, NKV, KD, VD, 0.3f,
                                      NULL, 0, 0, 0, 0, 0};
            attention_by_token(pool, &a);
        }
        tela_threadpool_free(pool);
    }
    /* float rounding of the scores grows with the key length (each score
     * is a sum of KD products of a few units) */
    const double tol = 1e-6 * (1.0 + KD / 16.0);
    int bad = 0;
    for (int t = 0; t < NT; t++)
        for (int h = 0; h < NH; h++) {
            int kvh = h / (NH / NKV);
            int n = POS0 + t + 1;
            double *sc = malloc(sizeof(double) * (size_t)n), mx = -1e300, sum = 0;
            for (int p = 0; p < n; p++) {
                double d = 0;
                for (int i = 0; i < KD; i++) d += (double)q[(t * NH + h) * KD + i] * k[p * ks + kvh * KD + i];
                sc[p] = d * 0.3;
                if (sc[p] > mx) mx = sc[p];
            }
            for (int p = 0; p < n; p++) sum += (sc[p] = exp(sc[p] - mx));
            for (int i = 0; i < VD; i++) {
                double o = 0;
                for (int p = 0; p < n; p++) o += sc[p] / sum * v[p * vs + kvh * VD + i];
                if (fabs(out[0][(t * NH + h) * VD + i] - o) > tol && bad++ < 3)
                    fprintf(stderr, "attention %d/%d heads %dx%d pos0 %d: t %d h %d d %d: %.9g vs %.9g\n", NH, NKV, KD,
                            VD, POS0, t, h, i, out[0][(t * NH + h) * VD + i], o);
            }
            free(sc);
        }
    CHECK_MSG(bad == 0, "attention %d/%d heads of %d/%d, pos0 %d, %d tokens: %d outputs off", NH, NKV, KD, VD, POS0, NT,
              bad);
    CHECK(!memcmp(out[0], out[1], sizeof(float) * on));
    CHECK(!memcmp(out[0], out[2], sizeof(float) * on));
    CHECK_MSG(!memcmp(out[0], out[3], sizeof(float) * on), "attention %d/%d heads, pos0 %d: batch != token by token",
              NH, NKV, POS0);
    /* A paged cache: the same keys and values in blocks of 5 rows, in
     * reverse order after two blocks of garbage, read through a block table;
     * and, in the same dispatch, a second sequence (the last token alone,
     * contiguous): both bit-identical to the contiguous run. */
    {
        const int bs = 5, nblk = (n_ctx + bs - 1) / bs, rows = (nblk + 2) * bs;
        float *pk = malloc(sizeof(float) * (size_t)rows * ks), *pv = malloc(sizeof(float) * (size_t)rows * vs);
        int32_t *table = malloc(sizeof(int32_t) * (size_t)nblk);
        fill(pk, (size_t)rows * ks, 50.0);
        fill(pv, (size_t)rows * vs, 50.0);
        for (int b = 0; b < nblk; b++) table[b] = 2 + (nblk - 1 - b);
        for (int p = 0; p < n_ctx; p++) {
            const size_t r = (size_t)table[p / bs] * bs + (size_t)(p % bs);
            memcpy(pk + r * ks, k + (size_t)p * ks, sizeof(float) * (size_t)ks);
            memcpy(pv + r * vs, v + (size_t)p * vs, sizeof(float) * (size_t)vs);
        }
        float *po = calloc(on, sizeof(float)), *last = calloc((size_t)NH * VD, sizeof(float));
        tela_threadpool *pool;
        CHECK_OK(tela_threadpool_create(2, &pool));
        CHECK_OK(tela_threadpool_reserve(pool, tela_op_attention_scratch(n_ctx, KD)));
        const tela_attn_args two[2] = {
            {q, NH * KD, pk, ks, pv, vs, po, NH * VD, NT, POS0, NH, NKV, KD, VD, 0.3f, table, bs, 0, 0, 0, 0},
            {q + (NT - 1) * NH * KD, NH * KD, k, ks, v, vs, last, NH * VD, 1, POS0 + NT - 1, NH, NKV, KD, VD, 0.3f,
             NULL, 0, 0, 0, 0, 0},
        };
        tela_op_attention(pool, two, 2);
        tela_threadpool_free(pool);
        CHECK_MSG(!memcmp(out[0], po, sizeof(float) * on), "attention %d/%d heads, pos0 %d: paged != contiguous", NH,
                  NKV, POS0);
        CHECK_MSG(!memcmp(out[0] + (size_t)(NT - 1) * NH * VD, last, sizeof(float) * (size_t)NH * VD),
                  "attention %d/%d heads, pos0 %d: second sequence of a dispatch differs", NH, NKV, POS0);
        free(pk);
        free(pv);
        free(table);
        free(po);
        free(last);
    }
    /* An f16 cache (paged too): bit-identical to an f32 cache holding the
     * same rounded values (the f32 run itself is checked above). */
    {
        const size_t nk = (size_t)n_ctx * ks, nv = (size_t)n_ctx * vs;
        uint16_t *hk = malloc(nk * 2), *hv = malloc(nv * 2);
        float *rk = malloc(nk * 4), *rv = malloc(nv * 4);
        for (size_t i = 0; i < nk; i++) rk[i] = tela_f16_to_f32(hk[i] = tela_f32_to_f16(k[i]));
        for (size_t i = 0; i < nv; i++) rv[i] = tela_f16_to_f32(hv[i] = tela_f32_to_f16(v[i]));
        float *o32 = calloc(on, sizeof(float)), *o16 = calloc(on, sizeof(float)), *o16p = calloc(on, sizeof(float));
        const int bs = 7, nblk = (n_ctx + bs - 1) / bs;
        uint16_t *pk = calloc((size_t)nblk * bs * ks, 2), *pv = calloc((size_t)nblk * bs * vs, 2);
        int32_t *table = malloc(sizeof(int32_t) * (size_t)nblk);
        for (int b = 0; b < nblk; b++) table[b] = nblk - 1 - b;
        for (int p = 0; p < n_ctx; p++) {
            const size_t r = (size_t)table[p / bs] * bs + (size_t)(p % bs);
            memcpy(pk + r * ks, hk + (size_t)p * ks, 2 * (size_t)ks);
            memcpy(pv + r * vs, hv + (size_t)p * vs, 2 * (size_t)vs);
        }
        tela_threadpool *pool;
        CHECK_OK(tela_threadpool_create(2, &pool));
        CHECK_OK(tela_threadpool_reserve(pool, tela_op_attention_scratch(n_ctx, KD)));
        const tela_attn_args f32 = {q, NH * KD, rk, ks, rv, vs, o32, NH * VD, NT, POS0, NH, NKV, KD, VD, 0.3f, NULL, 0, 0, 0, 0, 0};
        const tela_attn_args f16[2] = {
            {q, NH * KD, hk, ks, hv, vs, o16, NH * VD, NT, POS0, NH, NKV, KD, VD, 0.3f, NULL, 0, 1, 0, 0, 0},
            {q, NH * KD, pk, ks, pv, vs, o16p, NH * VD, NT, POS0, NH, NKV, KD, VD, 0.3f, table, bs, 1, 0, 0, 0},
        };
        tela_op_attention(pool, &f32, 1);
        tela_op_attention(pool, f16, 2);
        /* and decoded token by token from the paged f16 cache (a decoding
         * token's few rows take their own kernel: the same bits) */
        float *o16t = calloc(on, sizeof(float));
        const tela_attn_args f16t = {q, NH * KD, pk, ks, pv, vs, o16t, NH * VD, NT, POS0, NH, NKV, KD, VD, 0.3f, table, bs, 1, 0, 0, 0};
        attention_by_token(pool, &f16t);
        tela_threadpool_free(pool);
        CHECK_MSG(!memcmp(o32, o16t, sizeof(float) * on), "attention %d/%d heads, pos0 %d: f16 decode != f16 prefill",
                  NH, NKV, POS0);
        free(o16t);
        CHECK_MSG(!memcmp(o32, o16, sizeof(float) * on), "attention %d/%d heads, pos0 %d: f16 cache != f32 of its values",
                  NH, NKV, POS0);
        CHECK_MSG(!memcmp(o32, o16p, sizeof(float) * on), "attention %d/%d heads, pos0 %d: paged f16 cache differs", NH,
                  NKV, POS0);
        free(hk);
        free(hv);
        free(rk);
        free(rv);
        free(o32);
        free(o16);
        free(o16p);
        free(pk);
        free(pv);
        free(table);
    }
    /* A Q8_0 cache (rows of whole blocks): bit-identical to an f32 cache
     * holding the dequantized values, in one batch and token by token
     * through a block table. */
    if (KD % 32 == 0 && VD % 32 == 0) {
        const int kr = NKV * KD, vr = NKV * VD;
        const size_t kbr = tela_type_row_bytes(TELA_TYPE_Q8_0, kr), vbr = tela_type_row_bytes(TELA_TYPE_Q8_0, vr);
        unsigned char *qk = malloc((size_t)n_ctx * kbr), *qv = malloc((size_t)n_ctx * vbr);
        float *rk = malloc(sizeof(float) * (size_t)n_ctx * kr), *rv = malloc(sizeof(float) * (size_t)n_ctx * vr);
        const int bs = 3, nblk = (n_ctx + bs - 1) / bs;
        unsigned char *pk = calloc((size_t)nblk * bs, kbr), *pv = calloc((size_t)nblk * bs, vbr);
        int32_t *table = malloc(sizeof(int32_t) * (size_t)nblk);
        for (int b = 0; b < nblk; b++) table[b] = nblk - 1 - b;
        for (int p = 0; p < n_ctx; p++) {
            CHECK_OK(tela_quantize_row(TELA_TYPE_Q8_0, k + (size_t)p * ks, qk + (size_t)p * kbr, kr));
            CHECK_OK(tela_quantize_row(TELA_TYPE_Q8_0, v + (size_t)p * vs, qv + (size_t)p * vbr, vr));
            CHECK_OK(tela_dequantize_row(TELA_TYPE_Q8_0, qk + (size_t)p * kbr, rk + (size_t)p * kr, kr));
            CHECK_OK(tela_dequantize_row(TELA_TYPE_Q8_0, qv + (size_t)p * vbr, rv + (size_t)p * vr, vr));
            const size_t r = (size_t)table[p / bs] * bs + (size_t)(p % bs);
            memcpy(pk + r * kbr, qk + (size_t)p * kbr, kbr);
            memcpy(pv + r * vbr, qv + (size_t)p * vbr, vbr);
        }
        float *o32 = calloc(on, sizeof(float)), *o8 = calloc(on, sizeof(float)), *o8t = calloc(on, sizeof(float));
        tela_threadpool *pool;
        CHECK_OK(tela_threadpool_create(2, &pool));
        CHECK_OK(tela_threadpool_reserve(pool, tela_op_attention_scratch(n_ctx, KD)));
        const tela_attn_args f32 = {q, NH * KD, rk, kr, rv, vr, o32, NH * VD, NT, POS0, NH, NKV, KD, VD, 0.3f, NULL, 0, 0, 0, 0, 0};
        const tela_attn_args q8 = {q, NH * KD, qk, kr, qv, vr, o8, NH * VD, NT, POS0, NH, NKV, KD, VD, 0.3f, NULL, 0, 0, 0, 0, 1};
        tela_op_attention(pool, &f32, 1);
        tela_op_attention(pool, &q8, 1);
        const tela_attn_args q8t = {q, NH * KD, pk, kr, pv, vr, o8t, NH * VD, NT, POS0, NH, NKV, KD, VD, 0.3f, table, bs, 0, 0, 0, 1};
        attention_by_token(pool, &q8t);
        tela_threadpool_free(pool);
        CHECK_MSG(!memcmp(o32, o8, sizeof(float) * on), "attention %d/%d heads, pos0 %d: q8_0 cache != f32 of its values",
                  NH, NKV, POS0);
        CHECK_MSG(!memcmp(o32, o8t, sizeof(float) * on), "attention %d/%d heads, pos0 %d: paged q8_0 decode differs", NH,
                  NKV, POS0);
        free(qk);
        free(qv);
        free(rk);
        free(rv);
        free(pk);
        free(pv);
        free(table);
        free(o32);
        free(o8);
        free(o8t);
    }
    for (int i = 0; i < 4; i++) free(out[i]);
    free(q);
    free(k);
    free(v);
}

static void test_attention(void) {
    check_attention(6, 2, 8, 4, 9, 4);    /* scalar value tails */
    check_attention(8, 2, 64, 64, 0, 21); /* vector paths, group of 4 */
    check_attention(8, 2, 64, 64, 37, 5);
    check_attention(6, 2, 64, 128, 3, 7); /* group of 3: partial row blocks */
    check_attention(4, 4, 32, 80, 15, 2); /* no grouping, 64 + 16 value dims */
    check_attention(2, 1, 256, 256, 40, 3);
    check_attention(16, 16, 64, 64, 33, 3); /* no grouping: one row per KV head */
    check_attention(8, 2, 128, 128, 300, 2); /* longer: keys past prefetch distance, 2 value chunks */
}

int main(void) {
    test_threadpool();
    test_matmul_type(TELA_TYPE_F32);
    test_matmul_type(TELA_TYPE_F16);
    test_matmul_type(TELA_TYPE_BF16);
    test_matmul_type(TELA_TYPE_Q8_0); /* fast: 8-bit activations */
    tela_ops_set_exact_matmul(true);
    test_matmul_type(TELA_TYPE_Q8_0); /* exact: dequantized rows, f32 activations */
    tela_ops_set_exact_matmul(false);
    test_mat_view_errors();
    test_get_rows();
    test_get_rows_part();
    test_misaligned();
    test_rmsnorm();
    test_rope();
    test_softmax_swiglu_add();
    test_attention();
    return test_finish();
}
