/* test_sampler.c: tela_sample against hand-computed results: greedy and its
 * tie rule, logit bias, the llama.cpp repeat penalty, OpenAI frequency and
 * presence penalties, the penalty window, and the distributions left by
 * temperature, top-k, top-p and min-p on a 4-token vocabulary with
 * probabilities 0.5 / 0.3 / 0.15 / 0.05 (frequencies over many steps);
 * and on a 5,000-token vocabulary, the candidates and probabilities that
 * top-k / top-p leave (tela_sampler_dist) against a full sort and a
 * softmax in double computed here. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "runtime/sampler.h"
#include "tela/tela.h"
#include "test.h"

#include <stdlib.h>

static tela_sampler_params plain(void) {
    tela_sampler_params p = tela_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = 1234;
    return p;
}

static int32_t sample1(const tela_sampler_params *p, const float *logits, int n, const int32_t *hist, size_t nh,
                       uint64_t step) {
    float buf[16];
    memcpy(buf, logits, sizeof(float) * (size_t)n);
    int32_t tok = -1;
    tela_status st = tela_sample(p, buf, n, hist, nh, step, &tok);
    if (st != TELA_OK) CHECK_OK(st); /* counted only when it fails: this runs 10^5 times */
    return tok;
}

static void test_defaults(void) {
    tela_sampler_params d = tela_sampler_default_params();
    CHECK_NEAR(d.temperature, 0.8, 1e-7);
    CHECK_EQ_INT(d.top_k, 40);
    CHECK_NEAR(d.top_p, 0.95, 1e-7);
    CHECK_NEAR(d.min_p, 0.05, 1e-7);
    CHECK_NEAR(d.repeat_penalty, 1.0, 0);
}

static void test_greedy_bias_penalties(void) {
    tela_sampler_params p = plain();
    p.temperature = 0.0f;
    float l[4] = {2.0f, -1.0f, 0.5f, 3.0f};
    CHECK_EQ_INT(sample1(&p, l, 4, NULL, 0, 0), 3);
    float tie[4] = {1.0f, 5.0f, 5.0f, 0.0f};
    CHECK_EQ_INT(sample1(&p, tie, 4, NULL, 0, 0), 1); /* lowest id wins a tie */

    /* bias: banning 3 leaves 0; +2.6 on 2 makes it 3.1 > 3 */
    tela_logit_bias ban = {3, -INFINITY};
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    CHECK_EQ_INT(sample1(&p, l, 4, NULL, 0, 0), 0);
    tela_logit_bias up = {2, 2.6f};
    p.logit_bias = &up;
    CHECK_EQ_INT(sample1(&p, l, 4, NULL, 0, 0), 2);
    tela_logit_bias out = {4, 1.0f};
    p.logit_bias = &out;
    int32_t tok;
    float buf[4];
    memcpy(buf, l, sizeof l);
    CHECK(tela_sample(&p, buf, 4, NULL, 0, 0, &tok) == TELA_ERR_ARG);
    p.logit_bias = NULL;
    p.n_logit_bias = 0;

    /* repeat penalty 2 on history {0, 3, 3}: 2 -> 1, 3 -> 1.5 (positive:
     * divided); a negative logit is multiplied: -1 -> -2. */
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = -1;
    int32_t hist[3] = {0, 3, 3};
    memcpy(buf, l, sizeof l);
    CHECK_OK(tela_sample(&p, buf, 4, hist, 3, 0, &tok));
    CHECK_NEAR(buf[0], 1.0, 1e-7);
    CHECK_NEAR(buf[1], -1.0, 1e-7);
    CHECK_NEAR(buf[2], 0.5, 1e-7);
    CHECK_NEAR(buf[3], 1.5, 1e-7);
    CHECK_EQ_INT(tok, 3);
    int32_t hist2[2] = {1, 3};
    memcpy(buf, l, sizeof l);
    CHECK_OK(tela_sample(&p, buf, 4, hist2, 2, 0, &tok));
    CHECK_NEAR(buf[1], -2.0, 1e-7);
    CHECK_EQ_INT(tok, 0); /* 2.0 > 1.5 */

    /* window: only the last token (0) is penalized */
    p.repeat_last_n = 1;
    int32_t hist3[3] = {3, 3, 0};
    memcpy(buf, l, sizeof l);
    CHECK_OK(tela_sample(&p, buf, 4, hist3, 3, 0, &tok));
    CHECK_NEAR(buf[0], 1.0, 1e-7);
    CHECK_NEAR(buf[3], 3.0, 1e-7);

    /* frequency 0.5 and presence 0.25 on history {2, 2, 3, 2}:
     * 2: 0.5 - 3*0.5 - 0.25 = -1.25; 3: 3 - 0.5 - 0.25 = 2.25 */
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = -1;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    int32_t hist4[4] = {2, 2, 3, 2};
    memcpy(buf, l, sizeof l);
    CHECK_OK(tela_sample(&p, buf, 4, hist4, 4, 0, &tok));
    CHECK_NEAR(buf[0], 2.0, 1e-7);
    CHECK_NEAR(buf[2], -1.25, 1e-7);
    CHECK_NEAR(buf[3], 2.25, 1e-7);
    CHECK_EQ_INT(tok, 3);

    /* everything banned: an error, not a token */
    p = plain();
    float banned[3] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK(tela_sample(&p, banned, 3, NULL, 0, 0, &tok) == TELA_ERR_ARG);
    p.temperature = 0.0f;
    float banned2[3] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK(tela_sample(&p, banned2, 3, NULL, 0, 0, &tok) == TELA_ERR_ARG);
}

/* Frequencies of each token over N steps. */
static void frequencies(const tela_sampler_params *p, double *freq, int n_steps) {
    const float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    int counts[4] = {0, 0, 0, 0};
    for (int s = 0; s < n_steps; s++) {
        int32_t t = sample1(p, l, 4, NULL, 0, (uint64_t)s);
        if (t >= 0 && t < 4) counts[t]++;
    }
    for (int i = 0; i < 4; i++) freq[i] = (double)counts[i] / n_steps;
}

static void check_freq(const char *what, const double *freq, const double *expect) {
    for (int i = 0; i < 4; i++)
        CHECK_MSG(fabs(freq[i] - expect[i]) < 0.015, "%s: token %d frequency %.4f, expected %.4f", what, i, freq[i],
                  expect[i]);
}

static void test_distributions(void) {
    const int N = 20000;
    double f[4];
    tela_sampler_params p = plain();

    frequencies(&p, f, N);
    check_freq("plain", f, (double[]){0.5, 0.3, 0.15, 0.05});

    /* temperature 0.5 squares the probabilities: 0.25, 0.09, 0.0225, 0.0025 */
    p.temperature = 0.5f;
    frequencies(&p, f, N);
    double z = 0.25 + 0.09 + 0.0225 + 0.0025;
    check_freq("temp 0.5", f, (double[]){0.25 / z, 0.09 / z, 0.0225 / z, 0.0025 / z});
    p.temperature = 1.0f;

    /* top-k 2: 0.5 and 0.3 renormalized */
    p.top_k = 2;
    frequencies(&p, f, N);
    check_freq("top-k 2", f, (double[]){0.625, 0.375, 0, 0});
    p.top_k = 0;

    /* top-p 0.75: 0.5 < 0.75 <= 0.8, so two tokens */
    p.top_p = 0.75f;
    frequencies(&p, f, N);
    check_freq("top-p 0.75", f, (double[]){0.625, 0.375, 0, 0});
    /* top-p 0.85: three tokens (0.8 < 0.85 <= 0.95) */
    p.top_p = 0.85f;
    frequencies(&p, f, N);
    check_freq("top-p 0.85", f, (double[]){0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});
    p.top_p = 1.0f;

    /* min-p 0.25: keep p >= 0.125 (0.5, 0.3, 0.15); min-p 0.35: keep >= 0.175 */
    p.min_p = 0.25f;
    frequencies(&p, f, N);
    check_freq("min-p 0.25", f, (double[]){0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});
    p.min_p = 0.35f;
    frequencies(&p, f, N);
    check_freq("min-p 0.35", f, (double[]){0.625, 0.375, 0, 0});

    /* min-p acts before temperature (llama.cpp's order): with min-p 0.35 and
     * temperature 2 the two survivors get sqrt-weights sqrt(.5):sqrt(.3) */
    p.temperature = 2.0f;
    frequencies(&p, f, N);
    double a = sqrt(0.5), b = sqrt(0.3);
    check_freq("min-p 0.35, temp 2", f, (double[]){a / (a + b), b / (a + b), 0, 0});

    /* top-k 1 is greedy whatever the temperature */
    p = plain();
    p.top_k = 1;
    p.temperature = 5.0f;
    frequencies(&p, f, 500);
    check_freq("top-k 1", f, (double[]){1, 0, 0, 0});
}

static void test_reproducible(void) {
    tela_sampler_params p = plain();
    const float l[6] = {0.1f, 0.2f, 0.3f, 0.2f, 0.1f, 0.0f};
    /* the draw for a step does not depend on what was drawn before */
    int32_t fwd[50], rev[50];
    for (int s = 0; s < 50; s++) fwd[s] = sample1(&p, l, 6, NULL, 0, (uint64_t)s);
    for (int s = 49; s >= 0; s--) rev[s] = sample1(&p, l, 6, NULL, 0, (uint64_t)s);
    CHECK(!memcmp(fwd, rev, sizeof fwd));
    /* another seed gives another sequence */
    p.seed = 99;
    int same = 0;
    for (int s = 0; s < 50; s++) same += sample1(&p, l, 6, NULL, 0, (uint64_t)s) == fwd[s];
    CHECK(same < 50);
}

/* A reference order for the large-vocabulary test: logit descending, id ascending. */
static const float *ref_logits;
static int ref_cmp(const void *pa, const void *pb) {
    const int a = *(const int *)pa, b = *(const int *)pb;
    if (ref_logits[a] != ref_logits[b]) return ref_logits[a] > ref_logits[b] ? -1 : 1;
    return (a > b) - (a < b);
}

static void test_large_vocab(void) {
    enum { V = 5000 };
    static float logits[V], buf[V];
    static int order[V];
    static tela_token_prob out[V];
    uint64_t z = 88172645463325252ull;
    for (int i = 0; i < V; i++) { /* a long flat tail, a few hundred likelier tokens, some exact ties */
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        const double u = (double)(z >> 11) / 9007199254740992.0;
        logits[i] = (float)(u * 6.0 - 3.0) + (i % 17 == 0 ? 4.0f : 0.0f) + (i % 251 == 0 ? 6.0f : 0.0f);
        if (i % 1000 == 999) logits[i] = logits[i - 1];
    }
    for (int i = 0; i < V; i++) order[i] = i;
    ref_logits = logits;
    qsort(order, V, sizeof order[0], ref_cmp);
    const struct { int top_k; float top_p, temp; } cases[] = {
        {0, 0.3f, 0.7f}, {0, 0.9f, 1.0f}, {0, 0.999f, 1.3f}, {100, 0.9f, 0.7f}, {0, 1.0f, 0.5f}, {300, 1.0f, 1.0f}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        tela_sampler_params p = plain();
        p.top_k = cases[ci].top_k;
        p.top_p = cases[ci].top_p;
        p.temperature = cases[ci].temp;
        memcpy(buf, logits, sizeof logits);
        size_t n = 0;
        CHECK_OK(tela_sampler_dist(&p, buf, V, NULL, 0, out, &n));
        /* the reference: the top k, then the shortest prefix whose softmax
         * (temperature 1, over those k) reaches top_p */
        int m = p.top_k > 0 ? p.top_k : V;
        if (p.top_p < 1.0f) {
            double sum = 0.0, cum = 0.0;
            const double mx = logits[order[0]];
            for (int i = 0; i < m; i++) sum += exp((double)logits[order[i]] - mx);
            for (int i = 0; i < m; i++) {
                cum += exp((double)logits[order[i]] - mx) / sum;
                if (cum >= p.top_p) {
                    m = i + 1;
                    break;
                }
            }
        }
        CHECK_MSG((int)n == m, "case %zu: %zu candidates, expected %d", ci, n, m);
        if ((int)n != m) continue;
        double sum = 0.0, worst = 0.0;
        const double mx = logits[order[0]] / (double)p.temperature;
        for (int i = 0; i < m; i++) sum += exp((double)logits[order[i]] / (double)p.temperature - mx);
        int same_set = 1;
        static char in_set[V];
        memset(in_set, 0, sizeof in_set);
        for (int i = 0; i < m; i++) in_set[order[i]] = 1;
        for (size_t i = 0; i < n; i++) {
            const int id = out[i].id;
            if (id < 0 || id >= V || !in_set[id]) {
                same_set = 0;
                break;
            }
            const double ref = exp((double)logits[id] / (double)p.temperature - mx) / sum;
            const double e = fabs(out[i].p - ref) / ref;
            if (!(e <= worst)) worst = e;
        }
        CHECK_MSG(same_set, "case %zu: a candidate outside the reference's set", ci);
        /* the draw's weights are float: the scaled logit's rounding (|x| 2^-24
         * for arguments down to -40 here) and ~2 ulp of exp: at most 1.0e-6
         * measured on these inputs */
        CHECK_MSG(worst < 2e-6, "case %zu: probabilities off by %.3g (relative)", ci, worst);
    }
    /* a temperature so small that 1 / T overflows a float: the best token */
    tela_sampler_params p = plain();
    p.temperature = 1e-40f;
    for (uint64_t step = 0; step < 4; step++) {
        memcpy(buf, logits, sizeof logits);
        int32_t tok = -1;
        CHECK_OK(tela_sample(&p, buf, V, NULL, 0, step, &tok));
        CHECK_EQ_INT(tok, order[0]);
    }
}

int main(void) {
    test_defaults();
    test_greedy_bias_penalties();
    test_distributions();
    test_reproducible();
    test_large_vocab();
    return test_finish();
}
