/* sampler.c: picking the next token from one position's logits.
 *
 * The stages, in order (llama.cpp's order, so its users get what they
 * expect from the same settings):
 *   1. logit bias      logit[t] += bias (-INFINITY bans t)
 *   2. penalties       over the last repeat_last_n tokens of the history,
 *                      for each distinct token t seen c times:
 *                        repeat (llama.cpp): logit /= penalty if > 0,
 *                                            logit *= penalty otherwise;
 *                        frequency/presence (OpenAI):
 *                                            logit -= c * freq + presence
 *   3. greedy          when temperature <= 0: the highest logit (lowest id
 *                      on ties), done
 *   4. top-k           keep the k highest logits
 *   5. top-p           keep the smallest prefix, by descending probability
 *                      (softmax at temperature 1), whose total reaches p
 *   6. min-p           keep tokens with probability >= min_p * the highest
 *   7. temperature     logit /= temperature
 *   8. draw            softmax (weights in float: exp_nonpos) and a draw
 *                      with u = rng(seed, step), a pure function of the
 *                      seed and the step index
 * Ties in the sort by logit are broken by the lower token id, so the result
 * is fully deterministic. */
#include "runtime/sampler.h"
#include "util/error.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

tela_sampler_params tela_sampler_default_params(void) {
    tela_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    p.seed = 0;
    return p;
}

typedef struct {
    int32_t id;
    float logit;
} candidate;

/* splitmix64's finalizer: a bijective 64-bit mix. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The uniform draw in [0, 1) for (seed, step): independent of how the
 * steps are batched, since it holds no state. */
static double rng_uniform(uint64_t seed, uint64_t step) {
    uint64_t z = mix64(mix64(seed ^ 0x5DEECE66DULL) + (step + 1) * 0x9E3779B97F4A7C15ULL);
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* Descending logit, then ascending id. */
static int cand_cmp(const void *pa, const void *pb) {
    const candidate *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* "a ranks below b" in the order above. */
static int ranks_below(const candidate *a, const candidate *b) { return cand_cmp(a, b) > 0; }

/* Moves the k best of c[0..n) to c[0..k), sorted, the rest after them in
 * some order: a min-heap of the k best seen so far (root = worst), then a
 * sort. */
static void select_top_k(candidate *c, size_t n, size_t k) {
    for (size_t i = k / 2; i-- > 0;) { /* heapify c[0..k) */
        size_t j = i;
        for (;;) {
            size_t l = 2 * j + 1, r = l + 1, w = j;
            if (l < k && ranks_below(&c[l], &c[w])) w = l;
            if (r < k && ranks_below(&c[r], &c[w])) w = r;
            if (w == j) break;
            candidate t = c[j]; c[j] = c[w]; c[w] = t;
            j = w;
        }
    }
    for (size_t i = k; i < n; i++) {
        if (!ranks_below(&c[0], &c[i])) continue;
        const candidate out = c[0]; /* swapped, not dropped: c stays a permutation */
        c[0] = c[i];
        c[i] = out;
        size_t j = 0;
        for (;;) {
            size_t l = 2 * j + 1, r = l + 1, w = j;
            if (l < k && ranks_below(&c[l], &c[w])) w = l;
            if (r < k && ranks_below(&c[r], &c[w])) w = r;
            if (w == j) break;
            candidate t = c[j]; c[j] = c[w]; c[w] = t;
            j = w;
        }
    }
    qsort(c, k, sizeof *c, cand_cmp);
}

static int int32_cmp(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

static tela_status apply_penalties(const tela_sampler_params *p, float *logits, int32_t n_vocab,
                                   const int32_t *history, size_t n_history) {
    bool rep = p->repeat_penalty != 1.0f, freq = p->frequency_penalty != 0.0f, pres = p->presence_penalty != 0.0f;
    if (!(rep || freq || pres) || n_history == 0 || p->repeat_last_n == 0) return TELA_OK;
    if (rep && !(p->repeat_penalty > 0.0f))
        return tela_errorf(TELA_ERR_ARG, "sampler: repeat penalty %g must be positive", (double)p->repeat_penalty);
    size_t n = n_history;
    if (p->repeat_last_n > 0 && (size_t)p->repeat_last_n < n) n = (size_t)p->repeat_last_n;
    int32_t *w = malloc(n * sizeof *w);
    if (!w) return tela_errorf(TELA_ERR_NOMEM, "sampler: out of memory");
    memcpy(w, history + (n_history - n), n * sizeof *w);
    qsort(w, n, sizeof *w, int32_cmp);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && w[j] == w[i]) j++;
        int32_t t = w[i];
        double count = (double)(j - i);
        i = j;
        if (t < 0 || t >= n_vocab) continue;
        float l = logits[t];
        if (rep) l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= (float)(count * p->frequency_penalty + p->presence_penalty);
        logits[t] = l;
    }
    free(w);
    return TELA_OK;
}

/* The stages before the draw: the bias and penalties (in place), then
 * either the greedy pick (*greedy >= 0, c untouched) or the surviving
 * candidates c[0..*n) (c holds n_vocab), in the draw's order. */
static tela_status final_candidates(const tela_sampler_params *p, float *logits, int32_t n_vocab,
                                    const int32_t *history, size_t n_history, candidate *c, size_t *n_out,
                                    int32_t *greedy) {
    *greedy = -1;
    *n_out = 0;
    if (isnan(p->temperature) || isnan(p->top_p) || isnan(p->min_p))
        return tela_errorf(TELA_ERR_ARG, "sampler: temperature, top_p and min_p must be numbers");

    for (size_t i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias[i].token;
        if (t < 0 || t >= n_vocab)
            return tela_errorf(TELA_ERR_ARG, "sampler: logit bias for token %d, outside the vocabulary of %d", t,
                               n_vocab);
        logits[t] += p->logit_bias[i].bias;
    }
    TELA_TRY(apply_penalties(p, logits, n_vocab, history, n_history));

    if (p->temperature <= 0.0f) {
        int32_t best = -1;
        for (int32_t i = 0; i < n_vocab; i++)
            if (!isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
        if (best < 0 || logits[best] == -INFINITY)
            return tela_errorf(TELA_ERR_ARG, "sampler: every token is banned (all logits are -inf or NaN)");
        *greedy = best;
        return TELA_OK;
    }

    size_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (!isnan(logits[i]) && logits[i] > -INFINITY) c[n++] = (candidate){i, logits[i]};
    if (n == 0) return tela_errorf(TELA_ERR_ARG, "sampler: every token is banned (all logits are -inf or NaN)");

    bool sorted = false;
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        select_top_k(c, n, (size_t)p->top_k);
        n = (size_t)p->top_k;
        sorted = true;
    }
    if (p->top_p < 1.0f) {
        /* the shortest prefix of the sorted candidates reaching top_p: the
         * best 64 sorted, then 4x as many while their total falls short
         * (the prefix is the same as a full sort's; sorting a whole
         * vocabulary cost ~10 ms a row) */
        float mxl = c[0].logit;
        for (size_t i = 1; i < n; i++)
            if (c[i].logit > mxl) mxl = c[i].logit;
        const double mx = mxl;
        double sum = 0.0;
        for (size_t i = 0; i < n; i++) sum += exp((double)c[i].logit - mx);
        for (size_t k = sorted ? n : 64;; k *= 4) {
            if (!sorted) {
                if (k >= n) qsort(c, n, sizeof *c, cand_cmp);
                else select_top_k(c, n, k);
            }
            const size_t m = k < n ? k : n;
            double cum = 0.0;
            size_t cut = 0;
            for (size_t i = 0; i < m; i++) {
                cum += exp((double)c[i].logit - mx) / sum;
                if (cum >= p->top_p) {
                    cut = i + 1;
                    break;
                }
            }
            if (cut > 0 || m == n) {
                sorted = true;
                if (cut > 0) n = cut;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        float mx = c[0].logit;
        for (size_t i = 1; i < n; i++)
            if (c[i].logit > mx) mx = c[i].logit;
        double min_logit = (double)mx + log((double)p->min_p);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++)
            if ((double)c[i].logit >= min_logit) c[kept++] = c[i];
        n = kept;  /* the maximum always survives, so n >= 1 */
    }
    *n_out = n;
    return TELA_OK;
}

/* exp(x) for x <= 0 in float arithmetic (Cody and Waite's reduction by
 * ln 2 in two parts, then Cephes' degree-6 polynomial for expf; ~2 ulp),
 * 0 below -87, where float's normal range ends. Each operation is its own
 * statement, so that no compiler fuses a multiply and an add: the same
 * bits on every machine and build. The draw's weights: a vocabulary of
 * double exp() was most of a sampled token's host time (0.82 ms a row of
 * 128k on the development VM, 0.51 ms with this), and the weights'
 * relative error, ~1e-6 with the argument's rounding, is far below
 * anything a draw can show. */
static float exp_nonpos(float x0) {
    const float x = x0 > -87.0f ? x0 : -87.0f;
    const float t = x * 1.44269504f;
    const float k = floorf(t + 0.5f);
    const float a = k * 0.693359375f;
    const float b = k * -2.12194440e-4f;
    float r = x - a;
    r = r - b;
    const float z = r * r;
    float q = 1.9875691500e-4f * r;
    q = q + 1.3981999507e-3f;
    q = q * r;
    q = q + 8.3334519073e-3f;
    q = q * r;
    q = q + 4.1665795894e-2f;
    q = q * r;
    q = q + 1.6666665459e-1f;
    q = q * r;
    q = q + 5.0000001201e-1f;
    q = q * z;
    q = q + r;
    q = q + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    const float e = q * scale;
    return x0 > -87.0f ? e : 0.0f;
}

/* The draw's weights w[i] = exp((logit_i - max) / T) of the candidates:
 * the scaled difference in double, rounded once to float (so that any
 * temperature > 0 gives finite arguments, or -inf and a weight of 0). */
static void draw_weights(const candidate *c, size_t n, double temperature, float *w) {
    float mx = -INFINITY;
    for (size_t i = 0; i < n; i++) mx = c[i].logit > mx ? c[i].logit : mx;
    const double inv_t = 1.0 / temperature;
    for (size_t i = 0; i < n; i++) w[i] = (float)(((double)c[i].logit - (double)mx) * inv_t);
    for (size_t i = 0; i < n; i++) w[i] = exp_nonpos(w[i]);
}

/* The sum of w[b0..b1) in double, four partial sums in a fixed order. */
static double weights_sum(const float *w, size_t b0, size_t b1) {
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    size_t i = b0;
    for (; i + 4 <= b1; i += 4) {
        s[0] += (double)w[i];
        s[1] += (double)w[i + 1];
        s[2] += (double)w[i + 2];
        s[3] += (double)w[i + 3];
    }
    for (; i < b1; i++) s[0] += (double)w[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* The draw's blocks of weights (tela_sample): at least SAMPLE_BLOCK
 * candidates each, at most SAMPLE_MAX_BLOCKS of them. */
#define SAMPLE_BLOCK 1024
#define SAMPLE_MAX_BLOCKS 1024

/* Bytes of a sampler's scratch: the candidates, then their weights. */
static size_t scratch_bytes(int32_t n_vocab) {
    return (size_t)(n_vocab > 0 ? n_vocab : 1) * (sizeof(candidate) + sizeof(float));
}

/* final_candidates into a buffer of its own (*c, malloc'd, with room for
 * the weights after the candidates; NULL when the pick is greedy: no
 * temperature). */
static tela_status sampler_candidates(const tela_sampler_params *p, float *logits, int32_t n_vocab,
                                      const int32_t *history, size_t n_history, candidate **c, size_t *n,
                                      int32_t *greedy) {
    *c = p->temperature > 0.0f ? malloc(scratch_bytes(n_vocab)) : NULL;
    if (p->temperature > 0.0f && !*c) return tela_errorf(TELA_ERR_NOMEM, "sampler: out of memory");
    return final_candidates(p, logits, n_vocab, history, n_history, *c, n, greedy);
}

bool tela_sampler_plain_greedy(const tela_sampler_params *p) {
    return p->temperature <= 0.0f && p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f &&
           p->presence_penalty == 0.0f && p->n_logit_bias == 0;
}

size_t tela_sampler_scratch_bytes(int32_t n_vocab) { return scratch_bytes(n_vocab); }

tela_status tela_sample(const tela_sampler_params *params, float *logits, int32_t n_vocab, const int32_t *history,
                        size_t n_history, uint64_t step, int32_t *out_token) {
    return tela_sample_scratch(params, logits, n_vocab, history, n_history, step, NULL, out_token);
}

tela_status tela_sample_scratch(const tela_sampler_params *params, float *logits, int32_t n_vocab,
                                const int32_t *history, size_t n_history, uint64_t step, void *scratch,
                                int32_t *out_token) {
    if (!params || !logits || !out_token || n_vocab <= 0 || (n_history && !history))
        return tela_errorf(TELA_ERR_ARG, "tela_sample: bad arguments");
    const tela_sampler_params *p = params;
    candidate *c = NULL;
    size_t n = 0;
    int32_t greedy = -1;
    tela_status st;
    if (scratch) {
        c = scratch;
        st = final_candidates(p, logits, n_vocab, history, n_history, c, &n, &greedy);
    } else {
        st = sampler_candidates(p, logits, n_vocab, history, n_history, &c, &n, &greedy);
    }
    if (st != TELA_OK || greedy >= 0) {
        if (!scratch) free(c);
        if (st == TELA_OK) *out_token = greedy;
        return st;
    }

    /* Temperature and the draw, in the candidates' current order (sorted,
     * or by id), which is deterministic either way. The weights are summed
     * a block of SAMPLE_BLOCK at a time, and the walk to the draw skips
     * whole blocks by their sums: exp() again only inside the block the
     * draw falls in (a vocabulary's worth of exp() is most of a sampled
     * token's time). */
    float *w = (float *)(void *)(c + (size_t)n_vocab);
    draw_weights(c, n, (double)p->temperature, w);
    double block_sum[SAMPLE_MAX_BLOCKS];
    const size_t bs = (n + SAMPLE_MAX_BLOCKS - 1) / SAMPLE_MAX_BLOCKS > SAMPLE_BLOCK
                          ? (n + SAMPLE_MAX_BLOCKS - 1) / SAMPLE_MAX_BLOCKS
                          : SAMPLE_BLOCK;
    double sum = 0.0;
    for (size_t b0 = 0, k = 0; b0 < n; b0 += bs, k++) {
        block_sum[k] = weights_sum(w, b0, b0 + bs < n ? b0 + bs : n);
        sum += block_sum[k];
    }
    double target = rng_uniform(p->seed, step) * sum, cum = 0.0;
    int32_t pick = c[n - 1].id;
    for (size_t b0 = 0, k = 0; b0 < n; b0 += bs, k++) {
        if (cum + block_sum[k] <= target && b0 + bs < n) {
            cum += block_sum[k];
            continue;
        }
        size_t i = b0;
        for (; i < n && i < b0 + bs; i++) {
            cum += (double)w[i];
            if (cum > target) break;
        }
        if (i < n && i < b0 + bs) { /* else rounding kept the draw from this block: on to the next */
            pick = c[i].id;
            break;
        }
    }
    if (!scratch) free(c);
    *out_token = pick;
    return TELA_OK;
}

tela_status tela_sampler_dist(const tela_sampler_params *params, float *logits, int32_t n_vocab,
                              const int32_t *history, size_t n_history, tela_token_prob *out, size_t *n_out) {
    if (!params || !logits || !out || !n_out || n_vocab <= 0 || (n_history && !history))
        return tela_errorf(TELA_ERR_ARG, "tela_sampler_dist: bad arguments");
    *n_out = 0;
    const tela_sampler_params *p = params;
    candidate *c = NULL;
    size_t n = 0;
    int32_t greedy = -1;
    tela_status st = sampler_candidates(p, logits, n_vocab, history, n_history, &c, &n, &greedy);
    if (st != TELA_OK || greedy >= 0) {
        free(c);
        if (st == TELA_OK) {
            out[0] = (tela_token_prob){greedy, 1.0};
            *n_out = 1;
        }
        return st;
    }
    /* the weights tela_sample's draw uses, normalized */
    float *w = (float *)(void *)(c + (size_t)n_vocab);
    draw_weights(c, n, (double)p->temperature, w);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        out[i].id = c[i].id;
        out[i].p = (double)w[i];
        sum += out[i].p;
    }
    for (size_t i = 0; i < n; i++) out[i].p /= sum;
    free(c);
    *n_out = n;
    return TELA_OK;
}

int32_t tela_sampler_draw(const tela_token_prob *d, size_t n, double u) {
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += d[i].p;
    if (!(total > 0.0)) return -1;
    const double target = u * total;
    double cum = 0.0;
    int32_t last = -1;
    for (size_t i = 0; i < n; i++) {
        if (!(d[i].p > 0.0)) continue;
        cum += d[i].p;
        last = d[i].id;
        if (cum > target) return d[i].id;
    }
    return last; /* rounding: the last token with weight */
}

double tela_sampler_uniform(uint64_t seed, uint64_t step, uint32_t stream) {
    return rng_uniform(stream ? seed ^ mix64(0xA24BAED4963EE407ULL * stream) : seed, step);
}
