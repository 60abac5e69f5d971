/* test_gdn.c: the Gated DeltaNet kernels against naive double-precision loops
 * written straight from the math (transformers' torch_recurrent_gated_delta_rule):
 * per value head and token, S <- exp(g) S; delta = beta (v - S^T k);
 * S <- S + k delta^T; o = S^T q / sqrt(dk). The recurrent and the chunked
 * kernels must both match it (lengths around the chunk size, state carried
 * across calls, odd head sizes that exercise the vector tails, decays weak
 * and strong enough to underflow); the conv1d must match its definition
 * and give the same output fed whole or in pieces; the norms are checked on
 * hand-computed values and against double precision; the vectorized exp
 * against a double-precision exp and expf.
 *
 * The program runs every check twice: once on the kernels this CPU gets
 * (AVX-512 where it has it), then, re-executed with TELA_CPU=scalar, on the
 * plain C kernels. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "backend/cpu/gdn.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double rnd(void) { /* uniform in [0, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static double rnd_sym(void) { return 2.0 * rnd() - 1.0; }

static double silu_d(double x) { return x / (1.0 + exp(-x)); }

/* Inputs for nh value heads over n tokens, laid out the way the model lays
 * them out: a per-token row [q (nh*dk) | k (nh*dk) | v (nh*dv)], one row of
 * g and beta per token, one output row. */
typedef struct {
    int n, nh, dk, dv, row;
    float *qkv, *g, *beta, *out;
} inputs;

static void make_inputs(inputs *in, int n, int nh, int dk, int dv, double g_min) {
    in->n = n; in->nh = nh; in->dk = dk; in->dv = dv;
    in->row = nh * (2 * dk + dv);
    in->qkv = malloc(sizeof(float) * (size_t)n * in->row);
    in->g = malloc(sizeof(float) * (size_t)n * nh);
    in->beta = malloc(sizeof(float) * (size_t)n * nh);
    in->out = calloc((size_t)n * nh * dv, sizeof(float));
    for (int t = 0; t < n; t++) {
        float *r = in->qkv + (size_t)t * in->row;
        for (int i = 0; i < in->row; i++) r[i] = (float)rnd_sym();
        /* q and k are L2-normalized in the model before the rule */
        for (int h = 0; h < 2 * nh; h++) {
            float *x = r + (size_t)h * dk;
            double ss = 0;
            for (int i = 0; i < dk; i++) ss += (double)x[i] * x[i];
            for (int i = 0; i < dk; i++) x[i] = (float)(x[i] / sqrt(ss));
        }
        for (int h = 0; h < nh; h++) {
            in->g[t * nh + h] = (float)(g_min * rnd());
            in->beta[t * nh + h] = (float)rnd();
        }
    }
}

static void free_inputs(inputs *in) {
    free(in->qkv); free(in->g); free(in->beta); free(in->out);
}

static tela_gdn_io head_io(const inputs *in, int h, int64_t t0) {
    tela_gdn_io io;
    io.dk = in->dk; io.dv = in->dv;
    io.q_scale = (float)(1.0 / sqrt((double)in->dk));
    io.q = in->qkv + t0 * in->row + (size_t)h * in->dk;
    io.k = in->qkv + t0 * in->row + (size_t)(in->nh + h) * in->dk;
    io.qk_stride = in->row;
    io.v = in->qkv + t0 * in->row + (size_t)2 * in->nh * in->dk + (size_t)h * in->dv;
    io.v_stride = in->row;
    io.g = in->g + t0 * in->nh + h;
    io.beta = in->beta + t0 * in->nh + h;
    io.gb_stride = in->nh;
    io.out = in->out + t0 * in->nh * in->dv + (size_t)h * in->dv;
    io.out_stride = (int64_t)in->nh * in->dv;
    return io;
}

/* The reference: double precision, one head, tokens [0, n), state S (dk*dv). */
static void naive_rule(const inputs *in, int h, double *S, double *out /* n*dv */) {
    const int dk = in->dk, dv = in->dv;
    double *kv = malloc(sizeof(double) * dv);
    for (int t = 0; t < in->n; t++) {
        const float *r = in->qkv + (size_t)t * in->row;
        const float *q = r + (size_t)h * dk, *k = r + (size_t)(in->nh + h) * dk;
        const float *v = r + (size_t)2 * in->nh * dk + (size_t)h * dv;
        double decay = exp((double)in->g[t * in->nh + h]);
        double beta = in->beta[t * in->nh + h];
        for (int i = 0; i < dk * dv; i++) S[i] *= decay;
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += S[i * dv + j] * k[i];
            kv[j] = beta * (v[j] - s);
        }
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) S[i * dv + j] += k[i] * kv[j];
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += S[i * dv + j] * q[i];
            out[(size_t)t * dv + j] = s / sqrt((double)dk);
        }
    }
    free(kv);
}

/* Compares in->out and the final states with the reference; returns the
 * largest absolute difference seen. */
static double compare(const inputs *in, float *const *states) {
    double worst = 0;
    for (int h = 0; h < in->nh; h++) {
        double *S = calloc((size_t)in->dk * in->dv, sizeof(double));
        double *ref = malloc(sizeof(double) * (size_t)in->n * in->dv);
        naive_rule(in, h, S, ref);
        for (int t = 0; t < in->n; t++)
            for (int j = 0; j < in->dv; j++) {
                double d = fabs(ref[(size_t)t * in->dv + j] -
                                in->out[(size_t)t * in->nh * in->dv + (size_t)h * in->dv + j]);
                if (d > worst) worst = d;
            }
        for (int i = 0; i < in->dk * in->dv; i++) {
            double d = fabs(S[i] - states[h][i]);
            if (d > worst) worst = d;
        }
        free(S); free(ref);
    }
    return worst;
}

enum { MODE_RECURRENT, MODE_CHUNKED, MODE_SPLIT };

/* Runs the kernel(s) over all heads. MODE_SPLIT feeds the sequence as a
 * chunked prefill of part of it, then single recurrent steps, then another
 * chunked piece: the state must carry over between the two forms. */
static void run_kernels(inputs *in, int mode, float **states) {
    float *work = malloc(sizeof(float) * tela_gdn_chunked_work_floats(in->dk, in->dv));
    for (int h = 0; h < in->nh; h++) {
        memset(states[h], 0, sizeof(float) * (size_t)in->dk * in->dv);
        if (mode == MODE_RECURRENT) {
            tela_gdn_io io = head_io(in, h, 0);
            tela_gdn_recurrent(&io, in->n, states[h]);
        } else if (mode == MODE_CHUNKED) {
            tela_gdn_io io = head_io(in, h, 0);
            tela_gdn_chunked(&io, in->n, states[h], work);
        } else {
            int a = in->n * 2 / 5, b = a + (in->n - a) / 3;
            tela_gdn_io io = head_io(in, h, 0);
            tela_gdn_chunked(&io, a, states[h], work);
            for (int t = a; t < b; t++) {
                io = head_io(in, h, t);
                tela_gdn_recurrent(&io, 1, states[h]);
            }
            io = head_io(in, h, b);
            tela_gdn_chunked(&io, in->n - b, states[h], work);
        }
    }
    free(work);
}

static void test_rule(int n, int nh, int dk, int dv, double g_min) {
    inputs in;
    make_inputs(&in, n, nh, dk, dv, g_min);
    float **states = malloc(sizeof(float *) * nh);
    for (int h = 0; h < nh; h++) states[h] = malloc(sizeof(float) * (size_t)dk * dv);
    static const char *names[] = {"recurrent", "chunked", "chunked+recurrent+chunked"};
    for (int mode = MODE_RECURRENT; mode <= MODE_SPLIT; mode++) {
        memset(in.out, 0, sizeof(float) * (size_t)n * nh * dv);
        run_kernels(&in, mode, states);
        double worst = compare(&in, states);
        CHECK_MSG(worst < 5e-6, "%s n=%d heads=%d dk=%d dv=%d g_min=%g: max |diff| %.3g",
                  names[mode], n, nh, dk, dv, g_min, worst);
    }
    for (int h = 0; h < nh; h++) free(states[h]);
    free(states);
    free_inputs(&in);
}

/* A case worked by hand: dk = dv = 1 reduces the rule to scalars.
 * S0 = 0; t0: k=1, v=2, beta=0.5, g=0 -> delta = 0.5*(2-0) = 1, S = 1, o = q*S = 1 (q=1, scale 1).
 * t1: g=ln(0.5): S = 0.5; delta = 0.5*(4 - 0.5*1) = 1.75; S = 0.5 + 1.75 = 2.25; o = 2.25. */
static void test_scalar_by_hand(void) {
    float q[2] = {1, 1}, k[2] = {1, 1}, v[2] = {2, 4};
    float g[2] = {0, (float)log(0.5)}, beta[2] = {0.5f, 0.5f}, out[2];
    tela_gdn_io io = {1, 1, 1.0f, q, k, 1, v, 1, g, beta, 1, out, 1};
    float S = 0, *work = malloc(sizeof(float) * tela_gdn_chunked_work_floats(1, 1));
    tela_gdn_recurrent(&io, 2, &S);
    CHECK_NEAR(out[0], 1.0, 1e-6);
    CHECK_NEAR(out[1], 2.25, 1e-6);
    CHECK_NEAR(S, 2.25, 1e-6);
    S = 0; out[0] = out[1] = 0;
    tela_gdn_chunked(&io, 2, &S, work);
    CHECK_NEAR(out[0], 1.0, 1e-6);
    CHECK_NEAR(out[1], 2.25, 1e-6);
    CHECK_NEAR(S, 2.25, 1e-6);
    free(work);
}

/* conv1d: the naive definition with zero history, and the same output when
 * the sequence is fed in pieces (1, 2, 5, rest tokens) through the state. */
static void test_conv(void) {
    enum { N = 37, C = 11, K = 4 };
    float x[N * C], w[C * K], out_whole[N * C], out_split[N * C];
    float state[(K - 1) * C];
    for (int i = 0; i < N * C; i++) x[i] = (float)rnd_sym() * 2;
    for (int i = 0; i < C * K; i++) w[i] = (float)rnd_sym();
    memset(state, 0, sizeof state);
    tela_gdn_conv1d_silu(x, C, N, C, K, w, state, out_whole, C);
    double worst = 0;
    for (int t = 0; t < N; t++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                int src = t - (K - 1) + k;
                if (src >= 0) s += (double)w[c * K + k] * x[src * C + c];
            }
            double d = fabs(silu_d(s) - out_whole[t * C + c]);
            if (d > worst) worst = d;
        }
    CHECK_MSG(worst < 1e-5, "conv vs naive: %g", worst);
    /* the state now holds the last K-1 inputs */
    for (int r = 0; r < K - 1; r++)
        for (int c = 0; c < C; c++) CHECK(state[r * C + c] == x[(N - (K - 1) + r) * C + c]);

    memset(state, 0, sizeof state);
    const int pieces[] = {1, 2, 5, N - 8};
    int t0 = 0;
    for (int p = 0; p < 4; p++) {
        tela_gdn_conv1d_silu(x + t0 * C, C, pieces[p], C, K, w, state, out_split + t0 * C, C);
        t0 += pieces[p];
    }
    CHECK_EQ_INT(t0, N);
    worst = 0;
    for (int i = 0; i < N * C; i++) {
        double d = fabs((double)out_whole[i] - out_split[i]);
        if (d > worst) worst = d;
    }
    CHECK_MSG(worst < 1e-6, "conv split vs whole: %g", worst);

    /* by hand, one channel: w = [1, 10, 100, 1000], x = 1, 2, 3 from zero
     * history: pre-activations 1000, 2100, 3210; silu(x) ~= x here */
    float w1[4] = {1, 10, 100, 1000}, x1[3] = {1, 2, 3}, st1[3] = {0, 0, 0}, o1[3];
    tela_gdn_conv1d_silu(x1, 1, 3, 1, 4, w1, st1, o1, 1);
    CHECK_NEAR(o1[0], 1000.0, 1e-3);
    CHECK_NEAR(o1[1], 2100.0, 1e-3);
    CHECK_NEAR(o1[2], 3210.0, 1e-3);
    CHECK(st1[0] == 1 && st1[1] == 2 && st1[2] == 3);
    /* one more token x = 4 continues from that history: 1*1 + 10*2 + 100*3 + 1000*4 */
    float x2 = 4, o2;
    tela_gdn_conv1d_silu(&x2, 1, 1, 1, 4, w1, st1, &o2, 1);
    CHECK_NEAR(o2, 4321.0, 1e-3);
    CHECK(st1[0] == 2 && st1[1] == 3 && st1[2] == 4);
    /* a negative pre-activation goes through silu: w = [0,0,0,1], x = -1 */
    float w2[4] = {0, 0, 0, 1}, x3 = -1, st2[3] = {0, 0, 0}, o3;
    tela_gdn_conv1d_silu(&x3, 1, 1, 1, 4, w2, st2, &o3, 1);
    CHECK_NEAR(o3, -1.0 / (1.0 + exp(1.0)), 1e-7);
}

static void test_norms(void) {
    /* l2: [3, 4] / sqrt(25 + 1e-6) */
    float a[2] = {3, 4};
    tela_gdn_l2_norm(a, 2, 1e-6f);
    CHECK_NEAR(a[0], 3.0 / sqrt(25.000001), 1e-7);
    CHECK_NEAR(a[1], 4.0 / sqrt(25.000001), 1e-7);
    /* all zeros stay zero (eps keeps the division finite) */
    float zero[3] = {0, 0, 0};
    tela_gdn_l2_norm(zero, 3, 1e-6f);
    CHECK(zero[0] == 0 && zero[1] == 0 && zero[2] == 0);

    /* gated RMSNorm: x = [1, -1, 2, -2], mean(x^2) = 2.5 */
    float x[4] = {1, -1, 2, -2}, z[4] = {0, 1, -2, 3}, w[4] = {1, 2, 0.5f, 1};
    tela_gdn_gated_rms_norm(x, z, w, 4, 1e-6f);
    const double inv = 1.0 / sqrt(2.5 + 1e-6);
    const double xs[4] = {1, -1, 2, -2}, zs[4] = {0, 1, -2, 3}, ws[4] = {1, 2, 0.5, 1};
    for (int i = 0; i < 4; i++) CHECK_NEAR(x[i], xs[i] * inv * ws[i] * silu_d(zs[i]), 1e-6);
    CHECK(x[0] == 0); /* silu(0) = 0 */
}

/* conv1d against the definition for other kernel sizes and channel counts
 * (tails of the 16- and 256-channel groups), fed whole and in pieces. */
static void test_conv_shapes(int n, int channels, int kernel) {
    const int hist = kernel - 1;
    float *x = malloc(sizeof(float) * (size_t)n * channels);
    float *w = malloc(sizeof(float) * (size_t)channels * kernel);
    float *o1 = malloc(sizeof(float) * (size_t)n * channels), *o2 = malloc(sizeof(float) * (size_t)n * channels);
    float *st = calloc((size_t)(hist > 0 ? hist : 1) * channels, sizeof(float));
    for (int i = 0; i < n * channels; i++) x[i] = (float)(3 * rnd_sym());
    for (int i = 0; i < channels * kernel; i++) w[i] = (float)rnd_sym();
    tela_gdn_conv1d_silu(x, channels, n, channels, kernel, w, st, o1, channels);
    double worst = 0;
    for (int t = 0; t < n; t++)
        for (int c = 0; c < channels; c++) {
            double s = 0;
            for (int k = 0; k < kernel; k++) {
                int src = t - hist + k;
                if (src >= 0) s += (double)w[c * kernel + k] * x[src * channels + c];
            }
            double d = fabs(silu_d(s) - o1[t * channels + c]) / (1.0 + fabs(s));
            if (d > worst) worst = d;
        }
    CHECK_MSG(worst < 2e-6, "conv n=%d channels=%d kernel=%d vs definition: %g", n, channels, kernel, worst);
    for (int r = 0; r < hist; r++) {
        int same = 1;
        for (int c = 0; c < channels; c++) same &= st[r * channels + c] == x[(n - hist + r) * channels + c];
        CHECK_MSG(same, "conv kernel=%d: state row %d holds the last inputs", kernel, r);
    }
    memset(st, 0, sizeof(float) * (size_t)(hist > 0 ? hist : 1) * channels);
    int t0 = 0;
    const int pieces[] = {1, 2, 1, n};
    for (int p = 0; p < 4 && t0 < n; p++) {
        int len = pieces[p] < n - t0 ? pieces[p] : n - t0;
        tela_gdn_conv1d_silu(x + (size_t)t0 * channels, channels, len, channels, kernel, w, st,
                             o2 + (size_t)t0 * channels, channels);
        t0 += len;
    }
    CHECK(memcmp(o1, o2, sizeof(float) * (size_t)n * channels) == 0);
    free(x); free(w); free(o1); free(o2); free(st);
}

/* Both norms against double precision, over sizes with vector tails and
 * gates far into silu's tails. */
static void test_norms_wide(int n) {
    float *x = malloc(sizeof(float) * n), *z = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
    double *xd = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) {
        xd[i] = 4 * rnd_sym();
        x[i] = (float)xd[i];
        z[i] = (float)(i % 5 == 0 ? 120 * rnd_sym() : 6 * rnd_sym());
        w[i] = (float)(0.5 + rnd());
    }
    double ss = 0;
    for (int i = 0; i < n; i++) ss += xd[i] * xd[i];
    tela_gdn_l2_norm(x, n, 1e-6f);
    double worst = 0;
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(x[i] - xd[i] / sqrt(ss + 1e-6)));
    CHECK_MSG(worst < 1e-6, "l2 norm n=%d: %g", n, worst);

    for (int i = 0; i < n; i++) x[i] = (float)xd[i];
    tela_gdn_gated_rms_norm(x, z, w, n, 1e-6f);
    const double inv = 1.0 / sqrt(ss / n + 1e-6);
    worst = 0;
    for (int i = 0; i < n; i++) {
        double ref = xd[i] * inv * w[i] * silu_d(z[i]);
        worst = fmax(worst, fabs(x[i] - ref) / (1.0 + fabs(ref)));
    }
    CHECK_MSG(worst < 2e-6, "gated rms norm n=%d: %g", n, worst);
    free(x); free(z); free(w); free(xd);
}

/* ulps between a float result and the exact value (in the spacing of
 * floats near the exact value, denormal spacing at the bottom) */
static double ulps(float got, double exact) {
    int e;
    frexp(exact, &e);
    double ulp = ldexp(1.0, (e - 24 < -149 ? -149 : e - 24));
    return fabs((double)got - exact) / ulp;
}

/* The vectorized exp: every 997th float bit pattern over [-110, 90] (about
 * 2.2 million inputs, in blocks of odd length so the vector tails are used),
 * against a double-precision exp and expf; then the edges. */
static void test_exp(void) {
    enum { N = 4099 };
    static float x[N], y[N];
    double worst = 0, worst_expf = 0, worst_den = 0;
    float worst_x = 0;
    int n = 0, checked = 0;
    for (int side = 0; side < 2; side++) {
        /* side 0: [0, 90]; side 1: [-110, 0) by the bit patterns of |x| */
        uint32_t hi;
        float lim = side ? 110.0f : 90.0f;
        memcpy(&hi, &lim, 4);
        for (uint32_t b = 0; b <= hi; b += 997) {
            float v;
            memcpy(&v, &b, 4);
            x[n++] = side ? -v : v;
            if (n == N || b + 997 > hi) {
                tela_gdn_exp(x, y, n);
                for (int i = 0; i < n; i++) {
                    double ex = exp((double)x[i]);
                    checked++;
                    if (ex > 3.4028234663852886e38) {
                        CHECK_MSG(isinf(y[i]) && y[i] > 0, "exp(%g) = %g, want +inf", x[i], y[i]);
                        continue;
                    }
                    double u = ulps(y[i], ex);
                    if (ex >= 1.1754943508222875e-38) {
                        if (u > worst) { worst = u; worst_x = x[i]; }
                        worst_expf = fmax(worst_expf, fabs((double)y[i] - expf(x[i])) / (ex * 1.1920928955078125e-7));
                    } else {
                        worst_den = fmax(worst_den, u);
                    }
                }
                n = 0;
            }
        }
    }
    CHECK(checked > 200000);
    /* an exhaustive run over every float in [-104, 89] found at most 0.939
     * ulp (normal results) and 0.849 ulp (denormal results) */
    CHECK_MSG(worst <= 1.0, "exp: %.3g ulp at x = %.9g", worst, worst_x);
    CHECK_MSG(worst_expf <= 2.0, "exp vs expf: %.3g ulp", worst_expf);
    CHECK_MSG(worst_den <= 1.0, "exp into the denormals: %.3g ulp", worst_den);
    fprintf(stderr, "exp: max %.3f ulp (normal results), %.3f ulp vs expf, %.3f ulp (denormal results)\n", worst,
            worst_expf, worst_den);

    /* edges: exact points, overflow, underflow, infinities, NaN; the array
     * is 19 long so the last vector is partial */
    float e[19] = {0.0f, -0.0f, 1.0f, -1.0f, 88.7f, 88.73f, 89.0f, 1000.0f, -87.3f, -103.9f, -104.0f,
                   -1000.0f, (float)INFINITY, -(float)INFINITY, (float)NAN, 0.5f, -0.5f, 1e-10f, -1e-10f};
    float r[19];
    tela_gdn_exp(e, r, 19);
    CHECK(r[0] == 1.0f && r[1] == 1.0f);
    CHECK(ulps(r[2], exp(1.0)) <= 1.0 && ulps(r[3], exp(-1.0)) <= 1.0);
    CHECK(isfinite(r[4]) && ulps(r[4], exp((double)e[4])) <= 2.0);
    CHECK(isinf(r[5]) && isinf(r[6]) && isinf(r[7]));
    CHECK(r[8] > 0 && ulps(r[8], exp((double)e[8])) <= 2.0);
    CHECK(r[9] >= 0 && r[9] <= 2.9e-45f); /* exp(-103.9) = 8e-46: 0 or the smallest denormal */
    CHECK(r[10] == 0.0f && r[11] == 0.0f && r[13] == 0.0f);
    CHECK(isinf(r[12]) && r[12] > 0);
    CHECK(isnan(r[14]));
    CHECK(ulps(r[15], exp(0.5)) <= 1.0 && ulps(r[16], exp(-0.5)) <= 1.0);
    CHECK(r[17] == 1.0f && r[18] == 1.0f);
}

int main(int argc, char **argv) {
    (void)argc;
    test_scalar_by_hand();
    static const int lengths[] = {1, 63, 64, 65, 200};
    for (int i = 0; i < 5; i++) test_rule(lengths[i], 2, 16, 16, -1.0);
    /* unequal dk/dv, a dv above the recurrent kernel's column block, and
     * strong decays (exp of the running sum underflows within a chunk) */
    test_rule(130, 1, 32, 160, -0.5);
    test_rule(150, 2, 8, 24, -12.0);
    /* the model's head size; odd sizes (partial vectors, dk past one block
     * of 64 rows of B, dv past a 64- and a 128-column panel); weak decays
     * over a long run; decays so strong that exp(c) is 0 and exp(-c) inf */
    test_rule(130, 1, 128, 128, -0.3);
    test_rule(65, 1, 7, 13, -0.7);
    test_rule(100, 1, 100, 130, -0.3);
    test_rule(40, 1, 1, 1, -1.0);
    test_rule(300, 1, 24, 40, -0.02);
    test_rule(70, 1, 16, 16, -100.0);
    test_conv();
    test_conv_shapes(37, 300, 4);
    test_conv_shapes(9, 40, 2);
    test_conv_shapes(9, 17, 3);
    test_conv_shapes(12, 33, 5);
    test_conv_shapes(5, 16, 1);
    test_conv_shapes(11, 20, 9);
    test_norms();
    test_norms_wide(128);
    test_norms_wide(37);
    test_norms_wide(1);
    test_exp();
#if defined(__linux__)
    /* the same checks on the plain C kernels, in a fresh process (the CPU
     * cap is read once per process) */
    if (!getenv("TELA_CPU")) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("TELA_CPU", "scalar", 1);
            execv("/proc/self/exe", argv);
            _exit(127);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the TELA_CPU=scalar run failed (status %d)",
                  status);
    }
#endif
    return test_finish();
}
