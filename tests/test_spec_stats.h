/* test_spec_stats.h: the statistics of the speculative-sampling tests
 * (test_spec.c on the CPU, test_cuda_spec.c on a GPU): the sampler's final
 * distribution written from tela.h's description (the independent
 * reference), Pearson's chi-square with its p-value, the exact marginals of
 * the first generated tokens by enumeration, and the test itself (many
 * seeds, histograms against those marginals). The includer defines
 * new_session(model, n_ctx) first. */
#ifndef TELA_TESTS_TEST_SPEC_STATS_H
#define TELA_TESTS_TEST_SPEC_STATS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tela/tela.h"
#include "test.h"


static const float *sort_logits;

static int by_logit_desc(const void *pa, const void *pb) {
    const int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (sort_logits[a] != sort_logits[b]) return sort_logits[a] > sort_logits[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* The sampler's final distribution, written here from tela.h's description
 * (the independent reference): bias, repetition penalty over the last
 * repeat_last_n tokens, top-k, top-p, min-p, temperature; p[V] out. */
static void ref_dist(const tela_sampler_params *sp, const float *logits_in, int32_t V, const int32_t *hist, int nh,
                     double *p) {
    float *l = malloc(sizeof(float) * (size_t)V);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)V);
    memcpy(l, logits_in, sizeof(float) * (size_t)V);
    for (size_t i = 0; i < sp->n_logit_bias; i++) l[sp->logit_bias[i].token] += sp->logit_bias[i].bias;
    if (sp->repeat_penalty != 1.0f) {
        const int from = sp->repeat_last_n >= 0 && nh > sp->repeat_last_n ? nh - sp->repeat_last_n : 0;
        char *seen = calloc((size_t)V, 1);
        for (int i = from; i < nh; i++) {
            if (seen[hist[i]]) continue;
            seen[hist[i]] = 1;
            float *x = &l[hist[i]];
            *x = *x > 0.0f ? *x / sp->repeat_penalty : *x * sp->repeat_penalty;
        }
        free(seen);
    }
    int n = 0;
    for (int32_t i = 0; i < V; i++)
        if (l[i] > -INFINITY) idx[n++] = i;
    /* sort by logit descending, id ascending */
    sort_logits = l;
    qsort(idx, (size_t)n, sizeof *idx, by_logit_desc);
    if (sp->top_k > 0 && sp->top_k < n) n = sp->top_k;
    if (sp->top_p < 1.0f) {
        double sum = 0, cum = 0;
        for (int i = 0; i < n; i++) sum += exp((double)l[idx[i]] - l[idx[0]]);
        for (int i = 0; i < n; i++) {
            cum += exp((double)l[idx[i]] - l[idx[0]]) / sum;
            if (cum >= sp->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (sp->min_p > 0.0f) {
        int kept = 0;
        for (int i = 0; i < n; i++)
            if ((double)l[idx[i]] >= (double)l[idx[0]] + log((double)sp->min_p)) idx[kept++] = idx[i];
        n = kept;
    }
    for (int32_t i = 0; i < V; i++) p[i] = 0;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp(((double)l[idx[i]] - l[idx[0]]) / sp->temperature);
    for (int i = 0; i < n; i++) p[idx[i]] = exp(((double)l[idx[i]] - l[idx[0]]) / sp->temperature) / sum;
    free(l);
    free(idx);
}

/* Q(a, x), the regularized upper incomplete gamma function (Numerical
 * Recipes' gammq: series below a + 1, continued fraction above). */
static double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    const double gln = lgamma(a);
    if (x < a + 1) {
        double ap = a, sum = 1.0 / a, del = sum;
        for (int n = 0; n < 1000; n++) {
            ap += 1;
            del *= x / ap;
            sum += del;
            if (fabs(del) < fabs(sum) * 1e-15) break;
        }
        return 1.0 - sum * exp(-x + a * log(x) - gln);
    }
    double b = x + 1 - a, c = 1.0 / 1e-300, d = 1.0 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300) c = 1e-300;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - gln) * h;
}

/* Pearson's chi-square of counts[V] (n samples) against probabilities
 * p[V]: bins of expected count below 5 pooled (with the smallest bin when
 * the pool is still below 5). The p-value. */
static double chi_square_p(const int *counts, const double *p, int32_t V, int n, int *df_out) {
    double chi = 0, pool_e = 0, pool_o = 0, small_e = INFINITY, small_o = 0;
    int bins = 0;
    for (int32_t t = 0; t < V; t++) {
        const double e = p[t] * n;
        if (e < 5) {
            pool_e += e;
            pool_o += counts[t];
            continue;
        }
        if (e < small_e) {
            small_e = e;
            small_o = counts[t];
        }
        chi += (counts[t] - e) * (counts[t] - e) / e;
        bins++;
    }
    if (pool_e > 0 || pool_o > 0) {
        if (pool_e < 5 && bins > 0) { /* merge the pool into the smallest bin */
            chi -= (small_o - small_e) * (small_o - small_e) / small_e;
            pool_e += small_e;
            pool_o += small_o;
            bins--;
        }
        if (pool_e > 0) {
            chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
            bins++;
        } else if (pool_o > 0) {
            chi = INFINITY; /* tokens of probability 0 were drawn */
        }
    }
    const int df = bins - 1;
    *df_out = df;
    if (df <= 0) return 1.0;
    return isinf(chi) ? 0.0 : gamma_q(df / 2.0, chi / 2.0);
}

#define SAMPLED_POS 4 /* generated tokens per seed: the first, then three from verification steps */
#define SAMPLED_V 4096 /* the largest vocabulary sampled (the KJV models') */

/* The exact marginals of generated tokens 2..SAMPLED_POS under model m
 * (sampler sp) after the prompt: marg[i][V] for token i + 1, by
 * enumerating the (few) likely prefixes with plain evaluations. */
static void exact_marginals(tela_model *m, const tela_sampler_params *sp, const int32_t *prompt, int np,
                            double marg[SAMPLED_POS][SAMPLED_V]) {
    const int32_t V = tela_model_get_info(m)->n_vocab;
    tela_session *s = new_session(m, 256);
    float *logits = malloc(sizeof(float) * (size_t)V);
    double *p = malloc(sizeof(double) * (size_t)V);
    int32_t hist[256];
    memcpy(hist, prompt, sizeof(int32_t) * (size_t)np);
    CHECK(V <= SAMPLED_V);
    memset(marg, 0, sizeof(double) * SAMPLED_POS * SAMPLED_V);
    /* depth-first over prefixes of probability mass; the last position's
     * distribution is added weighted by its prefix's probability */
    struct frame {
        int32_t tok[SAMPLED_POS];
        double w;
        int depth;
    };
    static struct frame stack[8192];
    int top = 0;
    stack[top++] = (struct frame){{0}, 1.0, 0};
    tela_snapshot *after_prompt = NULL;
    float *first = malloc(sizeof(float) * (size_t)V);
    CHECK_OK(tela_session_eval(s, prompt, np, first, 0));
    CHECK_OK(tela_session_snapshot(s, &after_prompt));
    while (top > 0) {
        struct frame f = stack[--top];
        CHECK_OK(tela_session_restore(s, after_prompt));
        memcpy(hist + np, f.tok, sizeof(int32_t) * (size_t)f.depth);
        if (f.depth > 0) CHECK_OK(tela_session_eval(s, hist + np, f.depth, logits, 0));
        else memcpy(logits, first, sizeof(float) * (size_t)V);
        ref_dist(sp, logits, V, hist, np + f.depth, p);
        for (int32_t t = 0; t < V; t++) {
            if (p[t] == 0) continue;
            marg[f.depth][t] += f.w * p[t];
            if (f.depth + 1 < SAMPLED_POS && top < 8192) {
                struct frame g = f;
                g.tok[f.depth] = t;
                g.w = f.w * p[t];
                g.depth = f.depth + 1;
                stack[top++] = g;
            }
        }
    }
    tela_snapshot_free(after_prompt);
    free(first);
    tela_session_free(s);
    free(logits);
    free(p);
}

/* N seeds of speculative sampling; histograms of generated tokens 2..4
 * against the exact marginals. Returns the drafted/accepted counts. */
static void sample_test(const char *label, tela_model *m, tela_model *draft, tela_spec_method method,
                        const tela_sampler_params *base,
                        const int32_t *prompt, int np, int n_seeds, double marg[SAMPLED_POS][SAMPLED_V],
                        double wrong[SAMPLED_POS][SAMPLED_V]) {
    const int32_t V = tela_model_get_info(m)->n_vocab;
    static int counts[SAMPLED_POS][SAMPLED_V];
    memset(counts, 0, sizeof counts);
    tela_session *s = new_session(m, 256), *d = draft ? new_session(draft, 256) : NULL;
    tela_snapshot *snap = NULL;
    float *logits = malloc(sizeof(float) * (size_t)V);
    CHECK_OK(tela_session_eval(s, prompt, np, logits, 0)); /* the session keeps the last logits */
    CHECK_OK(tela_session_snapshot(s, &snap));
    tela_snapshot *dsnap = NULL; /* the draft after the prompt too (else each seed evaluates it again) */
    if (d) {
        CHECK_OK(tela_session_eval(d, prompt, np, logits, 0));
        CHECK_OK(tela_session_snapshot(d, &dsnap));
    }
    tela_spec_params spec = tela_spec_default_params();
    spec.method = method;
    spec.draft_max = 3;
    spec.ngram_min = 1;
    spec.draft = d;
    tela_generate_params gp = tela_generate_default_params();
    gp.max_tokens = SAMPLED_POS;
    gp.ignore_eos = 1;
    gp.sampler = *base;
    gp.spec = &spec;
    long drafted = 0, accepted = 0, steps = 0;
    for (int i = 0; i < n_seeds; i++) {
        CHECK_OK(tela_session_restore(s, snap));
        if (d) CHECK_OK(tela_session_restore(d, dsnap));
        gp.sampler.seed = 1000003u * (uint64_t)i + 17u;
        int32_t out[SAMPLED_POS];
        tela_generate_result r;
        tela_status st = tela_generate(s, NULL, 0, &gp, out, SAMPLED_POS, &r);
        if (st != TELA_OK || r.n_generated != SAMPLED_POS) {
            CHECK_OK(st);
            break;
        }
        for (int j = 1; j < SAMPLED_POS; j++) counts[j][out[j]]++;
        drafted += r.n_drafted;
        accepted += r.n_accepted;
        steps += r.n_spec_steps;
    }
    printf("%s: %d seeds, %ld verification steps, %ld of %ld drafts accepted\n", label, n_seeds, steps, accepted,
           drafted);
    CHECK_MSG(accepted > 0 && accepted < drafted, "%s: the test must see acceptances and rejections", label);
    for (int j = 1; j < SAMPLED_POS; j++) {
        int df;
        const double pv = chi_square_p(counts[j], marg[j], V, n_seeds, &df);
        printf("  token %d: chi-square p = %.4g (%d degrees of freedom)\n", j + 1, pv, df);
        CHECK_MSG(pv >= 1e-3, "%s: token %d does not follow the model's distribution (p = %.3g)", label, j + 1, pv);
        if (wrong && j <= 2) { /* the control, on tokens 2 and 3 (4 is closer to both) */
            const double pw = chi_square_p(counts[j], wrong[j], V, n_seeds, &df);
            printf("  token %d against the draft's own distribution: p = %.4g\n", j + 1, pw);
            CHECK_MSG(pw < 1e-3, "%s: the test cannot tell the draft's distribution from the target's", label);
        }
    }
    tela_snapshot_free(snap);
    tela_snapshot_free(dsnap);
    free(logits);
    tela_session_free(d);
    tela_session_free(s);
}

#endif
