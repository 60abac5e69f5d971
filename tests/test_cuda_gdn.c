/* test_cuda_gdn.c: the CUDA backend's Gated DeltaNet operations (Qwen3.5's
 * linear-attention layers) and the attention output gate, through
 * backend.h, each against a float64 model computed here on the host from
 * the formulas of backend/cpu/gdn.h, on random inputs, with the outputs
 * poisoned (NaN) before each call:
 *   - the delta rule with its gated output norm at the head shapes of the
 *     fixtures (dk = dv = 16, 2 key / 4 value heads), of Qwen3.5-2B
 *     (128 x 128, as many key as value heads) and of the 27B (128 x 128,
 *     three value heads per key head, both value-head orders), plus dk 32,
 *     64 and 256; decode steps of 1 to 4 tokens (the fused step kernel),
 *     prefills of lengths that are not multiples of anything (the scan), a
 *     run split in two (the state carried), one sequence of 8192 tokens;
 *     inputs already gated or raw with the gates applied by the op; the
 *     final state checked too; again with decode steps through the scan
 *     (TELA_CUDA_GDN_STEP=0) and with 4 lanes a column (TELA_CUDA_GDN_LANES=4);
 *   - conv1d + SiLU with its rolling state, fed in pieces of 1, 3 and 37
 *     tokens (both kernels);
 *   - the gates (L2 norm of the q/k heads, sigmoid, softplus decay) and the
 *     sigmoid output gate with strided rows;
 *   - a DeltaNet layer's decode chain as the model queues it (a one-token
 *     F16 product, the conv on its outputs, the rule on the conv's), where
 *     the conv and the rule read their states before their PDL waits:
 *     each stage against float64 on the inputs the GPU gave it, and the
 *     same bits as an exec that reads them after (TELA_CUDA_EARLY_STATE=0).
 * Fewer heads than the real models have: each head is computed alone, so
 * the per-head shape and the key/value head ratio are what matter.
 * Skipped (77) without CUDA or a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "util/fp16.h"
#include "test.h"
#include "test_cuda_mem.h"

static void *dcopy(const float *h, size_t n) {
    void *d = dmalloc(n * sizeof(float));
    up(d, h, n * sizeof(float));
    return d;
}

static void downf(float *h, const void *d, size_t n) { down(h, d, n * sizeof(float)); }

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu_d(double x) { return x / (1.0 + exp(-x)); }

/* ------------------------------------------------------------ delta rule */

typedef struct gdn_case {
    int nk, nv, dk, dv;
    bool v_tiled;
    int n1, n2;                  /* tokens of the first call, then of a second (0: none) */
    bool gates;                  /* raw inputs, the gates applied by the op */
    bool keep;                   /* the first call keeps the state after each token (tela_gdn_args.states) */
} gdn_case;

/* The float64 model of one value head over n tokens: state S (dk x dv,
 * row-major) updated in place, raw outputs o (before the norm). */
static void ref_head(const double *qkv, int64_t qs, int kh, int h, const gdn_case *c, const double *beta,
                     const double *g, int n, double *S, double *o, int64_t os) {
    const int dk = c->dk, dv = c->dv;
    const double scale = 1.0 / sqrt((double)dk);
    double *ks = malloc(sizeof(double) * (size_t)dv);
    for (int t = 0; t < n; t++) {
        const double *row = qkv + (int64_t)t * qs;
        const double *q = row + (size_t)kh * dk, *k = row + (size_t)(c->nk + kh) * dk;
        const double *v = row + (size_t)2 * c->nk * dk + (size_t)h * dv;
        const double eg = exp(g[(size_t)t * c->nv + h]), b = beta[(size_t)t * c->nv + h];
        for (int j = 0; j < dv; j++) ks[j] = 0;
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) {
                S[(size_t)i * dv + j] *= eg;
                ks[j] += k[i] * S[(size_t)i * dv + j];
            }
        for (int j = 0; j < dv; j++) ks[j] = b * (v[j] - ks[j]);
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) S[(size_t)i * dv + j] += k[i] * ks[j];
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += q[i] * scale * S[(size_t)i * dv + j];
            o[(int64_t)t * os + (size_t)h * dv + j] = s;
        }
    }
    free(ks);
}

static void check_delta(const gdn_case *c) {
    const int n = c->n1 + c->n2, nk = c->nk, nv = c->nv, dk = c->dk, dv = c->dv;
    const int64_t qs = (int64_t)2 * nk * dk + (int64_t)nv * dv, vd = (int64_t)nv * dv;
    const size_t state_n = (size_t)nv * dk * dv;
    /* without gates: q and k L2-normalized (as the gates leave them), beta
     * in (0, 1), log decays g in about (-3, 0); with them: the raw
     * projections, which the reference gates in double (a = -exp(A_log)) */
    const float l2_eps = 1e-6f;
    float *qkv = rand_floats((size_t)n * qs, 1.0f);
    double *qkv_d = malloc(sizeof(double) * (size_t)n * qs);
    for (size_t i = 0; i < (size_t)n * qs; i++) qkv_d[i] = qkv[i];
    for (int t = 0; t < n; t++)
        for (int hh = 0; hh < 2 * nk; hh++) {
            float *x = qkv + (size_t)t * qs + (size_t)hh * dk;
            double *xd = qkv_d + (size_t)t * qs + (size_t)hh * dk;
            double ss = 0;
            for (int i = 0; i < dk; i++) ss += (double)x[i] * x[i];
            for (int i = 0; i < dk; i++) {
                if (!c->gates) x[i] = (float)(x[i] / sqrt(ss + l2_eps));
                xd[i] = c->gates ? x[i] / sqrt(ss + l2_eps) : x[i];
            }
        }
    float *beta = malloc(sizeof(float) * (size_t)n * nv), *g = malloc(sizeof(float) * (size_t)n * nv);
    double *beta_d = malloc(sizeof(double) * (size_t)n * nv), *g_d = malloc(sizeof(double) * (size_t)n * nv);
    float *ga = rand_floats((size_t)nv, 1.0f), *gdt = rand_floats((size_t)nv, 1.0f);
    for (int h = 0; h < nv; h++) ga[h] = -expf(ga[h]);
    for (size_t i = 0; i < (size_t)n * nv; i++) {
        const int h = (int)(i % (size_t)nv);
        if (c->gates) {
            beta[i] = test_gauss() * 2.0f;
            g[i] = test_gauss() * 2.0f;
            const double xg = (double)g[i] + gdt[h];
            beta_d[i] = sigmoid_d(beta[i]);
            g_d[i] = ga[h] * (xg > 20 ? xg : log1p(exp(xg)));
        } else {
            beta[i] = (float)sigmoid_d(test_gauss());
            g[i] = (float)(-0.5 * log1p(exp(test_gauss() * 2.0)));
            beta_d[i] = beta[i];
            g_d[i] = g[i];
        }
    }
    float *z = rand_floats((size_t)n * vd, 1.0f), *nw = rand_floats((size_t)dv, 0.5f);
    float *s0 = rand_floats(state_n, 0.3f);
    for (int j = 0; j < dv; j++) nw[j] += 1.0f;

    /* reference */
    double *S = malloc(sizeof(double) * state_n), *o = malloc(sizeof(double) * (size_t)n * vd);
    for (size_t i = 0; i < state_n; i++) S[i] = s0[i];
    const int group = nv / nk;
    for (int h = 0; h < nv; h++) {
        const int kh = c->v_tiled ? h % nk : h / group;
        ref_head(qkv_d, qs, kh, h, c, beta_d, g_d, n, S + (size_t)h * dk * dv, o, vd);
    }
    const float eps = 1e-6f;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nv; h++) {
            double *x = o + (size_t)t * vd + (size_t)h * dv;
            double ss = 0;
            for (int j = 0; j < dv; j++) ss += x[j] * x[j];
            const double inv = 1.0 / sqrt(ss / dv + eps);
            for (int j = 0; j < dv; j++) x[j] = nw[j] * x[j] * inv * silu_d(z[(size_t)t * vd + (size_t)h * dv + j]);
        }

    /* the GPU, in one or two calls */
    float *d_qkv = dcopy(qkv, (size_t)n * qs), *d_beta = dcopy(beta, (size_t)n * nv), *d_g = dcopy(g, (size_t)n * nv);
    float *d_z = dcopy(z, (size_t)n * vd), *d_nw = dcopy(nw, (size_t)dv), *d_s = dcopy(s0, state_n);
    float *d_out = dmalloc(sizeof(float) * (size_t)n * vd), *d_ga = dcopy(ga, (size_t)nv), *d_gdt = dcopy(gdt, (size_t)nv);
    float *d_keep = c->keep ? dmalloc(sizeof(float) * state_n * (size_t)c->n1) : NULL;
    poison(d_out, (size_t)n * vd);
    const tela_gdn_gates_in gates = {d_ga, d_gdt, l2_eps};
    int t0 = 0;
    for (int part = 0; part < 2; part++) {
        const int nt = part ? c->n2 : c->n1;
        if (nt == 0) continue;
        const tela_gdn_args a = {
            .qkv = d_qkv + (size_t)t0 * qs, .qkv_stride = qs, .nk = nk, .nv = nv, .dk = dk, .dv = dv,
            .v_tiled = c->v_tiled, .q_scale = (float)(1.0 / sqrt((double)dk)), .beta = d_beta + (size_t)t0 * nv,
            .g = d_g + (size_t)t0 * nv, .z = d_z + (size_t)t0 * vd, .norm_w = d_nw, .eps = eps, .state = d_s,
            .out = d_out + (size_t)t0 * vd, .n_tok = nt, .gates = c->gates ? &gates : NULL,
            .states = part == 0 ? d_keep : NULL,
        };
        tela_exec_gdn_delta(gx, &a);
        t0 += nt;
    }
    float *got = malloc(sizeof(float) * (size_t)n * vd), *got_s = malloc(sizeof(float) * state_n);
    downf(got, d_out, (size_t)n * vd);
    downf(got_s, d_s, state_n);
    const double e_out = rel_err(got, o, (size_t)n * vd), e_state = rel_err(got_s, S, state_n);
    /* f32 sums of 16..256 products per step, errors that the decay keeps
     * from growing over the sequence */
    const double tol = 2e-5;
    printf("delta rule%s nk %d nv %d dk %d dv %d %s, %d+%d tokens: outputs %.2e, state %.2e\n",
           c->gates ? " with gates" : "", nk, nv, dk, dv, c->v_tiled ? "tiled" : "grouped", c->n1, c->n2, e_out, e_state);
    CHECK_MSG(e_out <= tol && e_state <= tol,
              "delta rule (nk %d, nv %d, dk %d, dv %d, %d+%d tokens): outputs off by %g, state by %g (bound %g)", nk,
              nv, dk, dv, c->n1, c->n2, e_out, e_state, tol);
    if (c->keep) { /* each kept state against the reference's after that token */
        double *Sk = malloc(sizeof(double) * state_n), *ok = malloc(sizeof(double) * (size_t)vd);
        float *kept = malloc(sizeof(float) * state_n * (size_t)c->n1);
        downf(kept, d_keep, state_n * (size_t)c->n1);
        for (size_t i = 0; i < state_n; i++) Sk[i] = s0[i];
        double worst = 0;
        for (int t = 0; t < c->n1; t++) {
            for (int h = 0; h < nv; h++)
                ref_head(qkv_d + (size_t)t * qs, qs, c->v_tiled ? h % nk : h / group, h, c, beta_d + (size_t)t * nv,
                         g_d + (size_t)t * nv, 1, Sk + (size_t)h * dk * dv, ok, vd);
            const double e = rel_err(kept + (size_t)t * state_n, Sk, state_n);
            worst = e > worst ? e : worst;
        }
        printf("  kept states of %d tokens: %.2e\n", c->n1, worst);
        CHECK_MSG(worst <= tol, "delta rule (dk %d, %d tokens): kept states off by %g (bound %g)", dk, c->n1, worst, tol);
        /* the last kept state is the state the call left (before a second call) */
        if (c->n2 == 0) CHECK(!memcmp(kept + (size_t)(c->n1 - 1) * state_n, got_s, sizeof(float) * state_n));
        free(Sk), free(ok), free(kept);
        tela_backend_free_mem(gpu, d_keep);
    }
    void *bufs[] = {d_qkv, d_beta, d_g, d_z, d_nw, d_s, d_out, d_ga, d_gdt};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tela_backend_free_mem(gpu, bufs[i]);
    free(qkv), free(beta), free(g), free(z), free(nw), free(s0), free(S), free(o), free(got), free(got_s);
    free(qkv_d), free(beta_d), free(g_d), free(ga), free(gdt);
}

/* Decode steps (1 to 4 tokens: the fused step kernel, which takes dk up
 * to 128), prefills (the scan), with and without the gates in the op. */
static void test_delta(bool long_run) {
    const gdn_case cases[] = {
        {2, 4, 16, 16, false, 1, 0, false, false},    {2, 4, 16, 16, true, 7, 1, true, false},
        {2, 4, 16, 16, false, 100, 37, false, false}, {2, 4, 16, 16, false, 1, 3, true, false},
        {2, 2, 128, 128, false, 1, 0, false, false},  {2, 2, 128, 128, false, 1, 1, true, false},
        {2, 2, 128, 128, false, 4, 0, true, false},   {2, 2, 128, 128, false, 64, 0, false, false},
        {2, 2, 128, 128, false, 300, 5, true, false}, {2, 6, 128, 128, true, 1, 0, true, false},
        {2, 6, 128, 128, true, 513, 0, false, false}, {2, 6, 128, 128, false, 77, 1, true, false},
        {2, 6, 128, 128, false, 2, 1, false, false},  {1, 2, 64, 64, false, 33, 2, true, false},
        {1, 1, 256, 128, false, 45, 1, false, false}, {1, 1, 256, 128, false, 1, 0, true, false},
        {1, 2, 32, 32, true, 3, 1, true, false},      {1, 2, 128, 128, false, 8192, 0, false, false},
        /* the states after each token kept (a speculative step's rollback):
         * the step kernel (<= 4 tokens), the staged scan, the register scans */
        {2, 4, 16, 16, false, 4, 0, false, true}, {2, 6, 128, 128, true, 3, 0, true, true},
        {2, 2, 128, 128, false, 16, 0, false, true}, {1, 2, 64, 64, false, 7, 1, true, true},
        {1, 1, 256, 128, false, 5, 0, false, true}, {1, 2, 32, 32, true, 6, 0, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (long_run || cases[i].n1 + cases[i].n2 < 1000) check_delta(&cases[i]);
}

/* test_delta again on an exec with a variant setting (NAME=VALUE). */
static void test_delta_variant(const char *name, const char *value) {
    printf("the delta rule with %s=%s:\n", name, value);
    setenv(name, value, 1);
    tela_exec *def = gx;
    CHECK_OK(tela_exec_create(gpu, 0, &gx));
    unsetenv(name);
    if (gx) {
        test_delta(false);
        tela_exec_free(gx);
    }
    gx = def;
}

/* -------------------------------------------------------------- conv1d */

/* float64 causal conv + SiLU over n tokens of C channels (x rows xs
 * apart), K taps a channel, the K - 1 state rows before the first token. */
static void ref_conv(const float *w, int K, const float *st, const float *x, int64_t xs, int n, int C, double *ref) {
    const int hist = K - 1;
    for (int t = 0; t < n; t++)
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                const int s = t - hist + k;
                acc += (double)w[c * K + k] * (s < 0 ? st[(s + hist) * C + c] : x[(size_t)s * xs + c]);
            }
            ref[(size_t)t * C + c] = silu_d(acc);
        }
}

static void test_conv(void) {
    const int C = 200, K = 4, hist = K - 1, pieces[] = {1, 3, 37, 1, 20};
    int n = 0;
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) n += pieces[i];
    const int xs = C + 8, os = C + 4;
    float *x = rand_floats((size_t)n * xs, 1.0f), *w = rand_floats((size_t)C * K, 0.5f);
    float *st = rand_floats((size_t)hist * C, 1.0f);
    /* reference: the whole sequence after the initial state rows */
    double *ref = malloc(sizeof(double) * (size_t)n * C);
    ref_conv(w, K, st, x, xs, n, C, ref);
    float *d_x = dcopy(x, (size_t)n * xs), *d_w = dcopy(w, (size_t)C * K), *d_st = dcopy(st, (size_t)hist * C);
    float *d_o = dmalloc(sizeof(float) * (size_t)n * os);
    poison(d_o, (size_t)n * os);
    int t0 = 0;
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        tela_exec_conv1d_silu(gx, d_x + (size_t)t0 * xs, xs, pieces[i], C, K, d_w, d_st, d_o + (size_t)t0 * os, os);
        t0 += pieces[i];
    }
    float *o = malloc(sizeof(float) * (size_t)n * os), *got = malloc(sizeof(float) * (size_t)n * C);
    float *got_st = malloc(sizeof(float) * (size_t)hist * C);
    double *ref_st = malloc(sizeof(double) * (size_t)hist * C);
    downf(o, d_o, (size_t)n * os);
    downf(got_st, d_st, (size_t)hist * C);
    for (int t = 0; t < n; t++) memcpy(got + (size_t)t * C, o + (size_t)t * os, sizeof(float) * C);
    for (int r = 0; r < hist; r++)
        for (int c = 0; c < C; c++) ref_st[r * C + c] = x[(size_t)(n - hist + r) * xs + c];
    const double e = rel_err(got, ref, (size_t)n * C), es = rel_err(got_st, ref_st, (size_t)hist * C);
    printf("conv1d: outputs %.2e, state %.2e\n", e, es);
    CHECK_MSG(e <= 1e-6 && es == 0, "conv1d: outputs off by %g, final state by %g", e, es);
    void *bufs[] = {d_x, d_w, d_st, d_o};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tela_backend_free_mem(gpu, bufs[i]);
    free(x), free(w), free(st), free(ref), free(o), free(got), free(got_st), free(ref_st);
}

/* ------------------------------------------------------ gates and gate */

static void test_gates(void) {
    const int nt = 5, nk = 3, dk = 128, nv = 6, qs = 2 * nk * dk + nv * dk + 4;
    const float eps = 1e-6f;
    float *qkv = rand_floats((size_t)nt * qs, 2.0f), *beta = rand_floats((size_t)nt * nv, 3.0f);
    float *g = rand_floats((size_t)nt * nv, 10.0f), *a = rand_floats(nv, 1.0f), *dt = rand_floats(nv, 1.0f);
    g[3] = 30.0f; /* softplus above its threshold: the identity */
    for (int i = 0; i < nv; i++) a[i] = -expf(a[i]);
    double *rq = malloc(sizeof(double) * (size_t)nt * qs), *rb = malloc(sizeof(double) * (size_t)nt * nv);
    double *rg = malloc(sizeof(double) * (size_t)nt * nv);
    for (int t = 0; t < nt; t++) {
        for (int i = 0; i < qs; i++) rq[(size_t)t * qs + i] = qkv[(size_t)t * qs + i];
        for (int h = 0; h < 2 * nk; h++) {
            double ss = 0, *x = rq + (size_t)t * qs + (size_t)h * dk;
            for (int i = 0; i < dk; i++) ss += x[i] * x[i];
            for (int i = 0; i < dk; i++) x[i] /= sqrt(ss + eps);
        }
        for (int h = 0; h < nv; h++) {
            const size_t i = (size_t)t * nv + h;
            const double xg = (double)g[i] + dt[h];
            rb[i] = sigmoid_d(beta[i]);
            rg[i] = a[h] * (xg > 20 ? xg : log1p(exp(xg)));
        }
    }
    float *d_qkv = dcopy(qkv, (size_t)nt * qs), *d_b = dcopy(beta, (size_t)nt * nv), *d_g = dcopy(g, (size_t)nt * nv);
    float *d_a = dcopy(a, nv), *d_dt = dcopy(dt, nv);
    tela_exec_gdn_gates(gx, d_qkv, qs, 2 * nk, dk, d_b, d_g, nv, nt, d_a, d_dt, eps);
    downf(qkv, d_qkv, (size_t)nt * qs);
    downf(beta, d_b, (size_t)nt * nv);
    downf(g, d_g, (size_t)nt * nv);
    const double eq = rel_err(qkv, rq, (size_t)nt * qs), eb = rel_err(beta, rb, (size_t)nt * nv);
    const double eg = rel_err(g, rg, (size_t)nt * nv);
    printf("gates: q/k %.2e, beta %.2e, g %.2e\n", eq, eb, eg);
    CHECK_MSG(eq <= 1e-6 && eb <= 1e-6 && eg <= 1e-6, "gates: q/k off by %g, beta by %g, g by %g", eq, eb, eg);

    /* the output gate: rows of 2 * 24 floats, gates in the second half */
    const int rows = 9, n = 24;
    float *o = rand_floats((size_t)rows * 2 * n, 1.0f), *r = malloc(sizeof(float) * (size_t)rows * 2 * n);
    double *ro = malloc(sizeof(double) * (size_t)rows * 2 * n);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < 2 * n; j++)
            ro[(size_t)i * 2 * n + j] =
                j < n ? o[(size_t)i * 2 * n + j] * sigmoid_d(o[(size_t)i * 2 * n + n + j]) : o[(size_t)i * 2 * n + j];
    float *d_o = dcopy(o, (size_t)rows * 2 * n);
    tela_exec_sigmoid_gate(gx, d_o, 2 * n, d_o + n, 2 * n, rows, n);
    downf(r, d_o, (size_t)rows * 2 * n);
    const double e = rel_err(r, ro, (size_t)rows * 2 * n);
    CHECK_MSG(e <= 1e-6, "sigmoid gate: off by %g", e);
    void *bufs[] = {d_qkv, d_b, d_g, d_a, d_dt, d_o};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tela_backend_free_mem(gpu, bufs[i]);
    free(qkv), free(beta), free(g), free(a), free(dt), free(rq), free(rb), free(rg), free(o), free(r), free(ro);
}

/* ------------------------------------------------ a layer's decode chain */

enum { CH_E = 256, CH_NK = 2, CH_NV = 4, CH_D = 128, CH_K = 4, CH_T = 5 };
#define CH_C (2 * CH_NK * CH_D + CH_NV * CH_D)
#define CH_VD (CH_NV * CH_D)

typedef struct chain_bufs {
    float *x, *y, *qkv, *cw, *cst, *beta, *g, *z, *nw, *s, *out, *ga, *gdt;
} chain_bufs;

/* CH_T decode steps of one DeltaNet layer on exec ex, nothing queued
 * between a step's product, conv and rule (the model's order). */
static void run_chain(tela_exec *ex, const tela_mat *w, const chain_bufs *b) {
    const tela_gdn_gates_in gates = {b->ga, b->gdt, 1e-6f};
    for (int t = 0; t < CH_T; t++) {
        tela_exec_matmul(ex, w, b->x + (size_t)t * CH_E, CH_E, b->y + (size_t)t * CH_C, CH_C, 1, false);
        tela_exec_conv1d_silu(ex, b->y + (size_t)t * CH_C, CH_C, 1, CH_C, CH_K, b->cw, b->cst, b->qkv + (size_t)t * CH_C,
                              CH_C);
        const tela_gdn_args a = {
            .qkv = b->qkv + (size_t)t * CH_C, .qkv_stride = CH_C, .nk = CH_NK, .nv = CH_NV, .dk = CH_D, .dv = CH_D,
            .q_scale = (float)(1.0 / sqrt((double)CH_D)), .beta = b->beta + (size_t)t * CH_NV,
            .g = b->g + (size_t)t * CH_NV, .z = b->z + (size_t)t * CH_VD, .norm_w = b->nw, .eps = 1e-6f, .state = b->s,
            .out = b->out + (size_t)t * CH_VD, .n_tok = 1, .gates = &gates,
        };
        tela_exec_gdn_delta(ex, &a);
    }
}

static void test_chain(void) {
    const int T = CH_T, C = CH_C, E = CH_E, hist = CH_K - 1, D = CH_D, vd = CH_VD;
    const size_t sn = (size_t)CH_NV * D * D;
    /* the product's weights, f16 (their values the reference uses) */
    uint16_t *wh = malloc(sizeof(uint16_t) * (size_t)C * E);
    double *wd = malloc(sizeof(double) * (size_t)C * E);
    for (size_t i = 0; i < (size_t)C * E; i++) {
        wh[i] = tela_f32_to_f16(test_gauss() * 0.15f);
        wd[i] = tela_f16_to_f32(wh[i]);
    }
    tela_mat w = {.name = "chain.w", .type = TELA_TYPE_F16, .data = wh, .n_rows = C, .n_cols = E,
                  .row_bytes = (size_t)E * 2};
    tela_mat *list[1] = {&w};
    tela_mat_use uses[1] = {TELA_MAT_MATMUL};
    CHECK_OK(tela_backend_prepare_mats(gpu, list, uses, 1, 0));
    float *x = rand_floats((size_t)T * E, 1.0f), *cw = rand_floats((size_t)C * CH_K, 0.5f);
    float *cst = rand_floats((size_t)hist * C, 1.0f), *s0 = rand_floats(sn, 0.3f);
    float *beta = rand_floats((size_t)T * CH_NV, 2.0f), *g = rand_floats((size_t)T * CH_NV, 2.0f);
    float *z = rand_floats((size_t)T * vd, 1.0f), *nw = rand_floats((size_t)D, 0.5f);
    float *ga = rand_floats(CH_NV, 1.0f), *gdt = rand_floats(CH_NV, 1.0f);
    for (int h = 0; h < CH_NV; h++) ga[h] = -expf(ga[h]);
    for (int j = 0; j < D; j++) nw[j] += 1.0f;
    chain_bufs b = {
        .x = dcopy(x, (size_t)T * E), .y = dmalloc(sizeof(float) * (size_t)T * C),
        .qkv = dmalloc(sizeof(float) * (size_t)T * C), .cw = dcopy(cw, (size_t)C * CH_K),
        .cst = dcopy(cst, (size_t)hist * C), .beta = dcopy(beta, (size_t)T * CH_NV), .g = dcopy(g, (size_t)T * CH_NV),
        .z = dcopy(z, (size_t)T * vd), .nw = dcopy(nw, (size_t)D), .s = dcopy(s0, sn),
        .out = dmalloc(sizeof(float) * (size_t)T * vd), .ga = dcopy(ga, CH_NV), .gdt = dcopy(gdt, CH_NV),
    };
    poison(b.y, (size_t)T * C);
    poison(b.qkv, (size_t)T * C);
    poison(b.out, (size_t)T * vd);
    run_chain(gx, &w, &b);
    float *y = malloc(sizeof(float) * (size_t)T * C), *qkv = malloc(sizeof(float) * (size_t)T * C);
    float *out = malloc(sizeof(float) * (size_t)T * vd), *st = malloc(sizeof(float) * sn);
    float *cst_got = malloc(sizeof(float) * (size_t)hist * C);
    downf(y, b.y, (size_t)T * C);
    downf(qkv, b.qkv, (size_t)T * C);
    downf(out, b.out, (size_t)T * vd);
    downf(st, b.s, sn);
    downf(cst_got, b.cst, (size_t)hist * C);

    /* the product */
    double *ry = malloc(sizeof(double) * (size_t)T * C);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double a = 0;
            for (int e = 0; e < E; e++) a += wd[(size_t)c * E + e] * x[(size_t)t * E + e];
            ry[(size_t)t * C + c] = a;
        }
    const double e_y = rel_err(y, ry, (size_t)T * C);
    /* the conv on the GPU's product */
    double *rq = malloc(sizeof(double) * (size_t)T * C), *rcs = malloc(sizeof(double) * (size_t)hist * C);
    ref_conv(cw, CH_K, cst, y, C, T, C, rq);
    for (int r = 0; r < hist; r++)
        for (int c = 0; c < C; c++) rcs[(size_t)r * C + c] = y[(size_t)(T - hist + r) * C + c];
    const double e_q = rel_err(qkv, rq, (size_t)T * C), e_cs = rel_err(cst_got, rcs, (size_t)hist * C);
    /* the rule on the GPU's conv outputs: gated and normalized here */
    const gdn_case gc = {CH_NK, CH_NV, D, D, false, T, 0, true, false};
    double *qd = malloc(sizeof(double) * (size_t)T * C), *bd = malloc(sizeof(double) * (size_t)T * CH_NV);
    double *gd = malloc(sizeof(double) * (size_t)T * CH_NV), *S = malloc(sizeof(double) * sn);
    double *o = malloc(sizeof(double) * (size_t)T * vd);
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < C; c++) qd[(size_t)t * C + c] = qkv[(size_t)t * C + c];
        for (int hh = 0; hh < 2 * CH_NK; hh++) {
            double *v = qd + (size_t)t * C + (size_t)hh * D, ss = 0;
            for (int i = 0; i < D; i++) ss += v[i] * v[i];
            for (int i = 0; i < D; i++) v[i] /= sqrt(ss + 1e-6);
        }
        for (int h = 0; h < CH_NV; h++) {
            const size_t i = (size_t)t * CH_NV + h;
            const double xg = (double)g[i] + gdt[h];
            bd[i] = sigmoid_d(beta[i]);
            gd[i] = ga[h] * (xg > 20 ? xg : log1p(exp(xg)));
        }
    }
    for (size_t i = 0; i < sn; i++) S[i] = s0[i];
    for (int h = 0; h < CH_NV; h++) ref_head(qd, C, h / (CH_NV / CH_NK), h, &gc, bd, gd, T, S + (size_t)h * D * D, o, vd);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < CH_NV; h++) {
            double *v = o + (size_t)t * vd + (size_t)h * D, ss = 0;
            for (int j = 0; j < D; j++) ss += v[j] * v[j];
            const double inv = 1.0 / sqrt(ss / D + 1e-6);
            for (int j = 0; j < D; j++) v[j] = nw[j] * v[j] * inv * silu_d(z[(size_t)t * vd + (size_t)h * D + j]);
        }
    const double e_o = rel_err(out, o, (size_t)T * vd), e_s = rel_err(st, S, sn);
    printf("decode chain, %d steps: product %.2e, conv %.2e (state %.2e), rule %.2e (state %.2e)\n", T, e_y, e_q, e_cs,
           e_o, e_s);
    CHECK_MSG(e_y <= 1e-5 && e_q <= 1e-6 && e_cs == 0 && e_o <= 2e-5 && e_s <= 2e-5,
              "decode chain: product %g, conv %g (state %g), rule %g (state %g)", e_y, e_q, e_cs, e_o, e_s);

    /* the same bits with the states read after the waits */
    setenv("TELA_CUDA_EARLY_STATE", "0", 1);
    tela_exec *late = NULL;
    CHECK_OK(tela_exec_create(gpu, 0, &late));
    unsetenv("TELA_CUDA_EARLY_STATE");
    if (late) {
        up(b.cst, cst, sizeof(float) * (size_t)hist * C);
        up(b.s, s0, sizeof(float) * sn);
        poison(b.out, (size_t)T * vd);
        CHECK_OK(tela_exec_sync(gx));
        run_chain(late, &w, &b);
        CHECK_OK(tela_exec_sync(late));
        float *out2 = malloc(sizeof(float) * (size_t)T * vd), *st2 = malloc(sizeof(float) * sn);
        downf(out2, b.out, (size_t)T * vd);
        downf(st2, b.s, sn);
        CHECK_MSG(!memcmp(out, out2, sizeof(float) * (size_t)T * vd) && !memcmp(st, st2, sizeof(float) * sn),
                  "decode chain: the states read after the waits give other bits");
        free(out2), free(st2);
        tela_exec_free(late);
    }
    void *bufs[] = {b.x, b.y, b.qkv, b.cw, b.cst, b.beta, b.g, b.z, b.nw, b.s, b.out, b.ga, b.gdt};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tela_backend_free_mem(gpu, bufs[i]);
    free(wh), free(wd), free(x), free(cw), free(cst), free(s0), free(beta), free(g), free(z), free(nw), free(ga), free(gdt);
    free(y), free(qkv), free(out), free(st), free(cst_got), free(ry), free(rq), free(rcs), free(qd), free(bd), free(gd);
    free(S), free(o);
}

int main(void) {
    if (!tela_backend_cuda_built()) test_skip("built without CUDA");
    if (tela_backend_cuda_device_count() == 0) test_skip("no CUDA GPU");
    test_rng_seed(20261202);
    if (tela_backend_create("cuda", 0, &gpu) != TELA_OK) {
        fprintf(stderr, "%s\n", tela_last_error());
        return 1;
    }
    CHECK_OK(tela_exec_create(gpu, 0, &gx));
    printf("device: %s\n", tela_backend_description(gpu));
    test_gates();
    test_conv();
    test_chain();
    test_delta(true);
    test_delta_variant("TELA_CUDA_GDN_STEP", "0"); /* decode steps through the scan */
    test_delta_variant("TELA_CUDA_GDN_LANES", "4");
    CHECK_OK(tela_exec_sync(gx));
    tela_exec_free(gx);
    tela_backend_free(gpu);
    return test_finish();
}
