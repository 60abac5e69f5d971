/* importance.c: how much each decoder layer changes the hidden state, the
 * measure behind 'tela prune-plan': for each prompt, the cosine similarity
 * between the last position's hidden state entering a layer and leaving
 * it, averaged over the prompts in float64; and a pruning plan from those
 * cosines that keeps a hybrid model's balance of layer kinds. */
#include "runtime/session.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cosine_acc {
    int n_layer, n_embd;
    float *prev;                 /* the state entering the current layer */
    double *sum;                 /* [n_layer] cosines summed over prompts */
    bool have_prev;
} cosine_acc;

/* cos(a, b) in float64; 1 for two zero vectors (no change at all). */
static double cosine(const float *a, const float *b, int n) {
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    if (aa == 0.0 && bb == 0.0) return 1.0;
    if (aa == 0.0 || bb == 0.0) return 0.0;
    return ab / (sqrt(aa) * sqrt(bb));
}

static void on_layer(void *user, int32_t layer, const float *hidden, int32_t n_embd) {
    cosine_acc *c = user;
    if (layer >= 0 && layer < c->n_layer && c->have_prev) c->sum[layer] += cosine(c->prev, hidden, n_embd);
    memcpy(c->prev, hidden, sizeof(float) * (size_t)n_embd);
    c->have_prev = true;
}

tela_status tela_layer_cosines(tela_session *s, const int32_t *const *prompts, const int32_t *n_tokens,
                               int32_t n_prompts, double *mean_cosine) {
    if (!s || !prompts || !n_tokens || !mean_cosine || n_prompts <= 0)
        return tela_errorf(TELA_ERR_ARG, "tela_layer_cosines: bad arguments");
    const tela_model_info *info = &s->model->info;
    cosine_acc c = {info->n_layer, info->n_embd, malloc(sizeof(float) * (size_t)info->n_embd),
                    calloc((size_t)info->n_layer, sizeof(double)), false};
    if (!c.prev || !c.sum) {
        free(c.prev);
        free(c.sum);
        return tela_errorf(TELA_ERR_NOMEM, "tela_layer_cosines: out of memory");
    }
    tela_status st = TELA_OK;
    for (int32_t p = 0; p < n_prompts && st == TELA_OK; p++) {
        tela_session_reset(s);
        c.have_prev = false;
        st = tela_session_eval_probe(s, prompts[p], n_tokens[p], on_layer, &c);
    }
    if (st == TELA_OK)
        for (int l = 0; l < c.n_layer; l++) mean_cosine[l] = c.sum[l] / n_prompts;
    tela_session_reset(s);
    free(c.prev);
    free(c.sum);
    return st;
}

/* Layers of one kind by decreasing cosine (the least change first). */
static int pick_kind(const tela_model *m, const double *cosines, int kind, int want, const bool *taken,
                     int32_t *out) {
    const int n = m->info.n_layer;
    int got = 0;
    while (got < want) {
        int best = -1;
        for (int l = 0; l < n; l++) {
            if (taken[l] || tela_model_layer_kind(m, l) != kind || tela_model_layer_skipped(m, l)) continue;
            bool used = false;
            for (int i = 0; i < got; i++) used |= out[i] == l;
            if (used) continue;
            if (best < 0 || cosines[l] > cosines[best]) best = l;
        }
        if (best < 0) break;
        out[got++] = best;
    }
    return got;
}

static int cmp_int32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

tela_status tela_prune_plan(const tela_model *m, const double *mean_cosine, int32_t k, int32_t *out_layers,
                            int32_t *n_attention) {
    if (!m || !mean_cosine || !out_layers || k < 0 || k > m->info.n_layer)
        return tela_errorf(TELA_ERR_ARG, "tela_prune_plan: %d layers to prune of %d", k, m ? m->info.n_layer : 0);
    const int n = m->info.n_layer;
    int n_delta = 0;
    for (int l = 0; l < n; l++) n_delta += tela_model_layer_kind(m, l) == TELA_LAYER_DELTANET;
    /* a hybrid keeps its balance: one attention layer in four removed,
     * as Qwen3.5's three DeltaNet layers to one attention layer */
    int want_attn = n_delta > 0 && n_delta < n ? (int)lround(k / 4.0) : (n_delta == 0 ? k : 0);
    bool *taken = calloc((size_t)n, sizeof(bool));
    int32_t *tmp = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!taken || !tmp) {
        free(taken);
        free(tmp);
        return tela_errorf(TELA_ERR_NOMEM, "tela_prune_plan: out of memory");
    }
    int got = pick_kind(m, mean_cosine, TELA_LAYER_ATTENTION, want_attn, taken, tmp);
    for (int i = 0; i < got; i++) taken[tmp[i]] = true;
    int n_attn = got;
    int more = pick_kind(m, mean_cosine, TELA_LAYER_DELTANET, k - got, taken, tmp + got);
    for (int i = got; i < got + more; i++) taken[tmp[i]] = true;
    got += more;
    if (got < k) { /* one kind ran out: the rest from the other */
        int extra = pick_kind(m, mean_cosine, TELA_LAYER_ATTENTION, k - got, taken, tmp + got);
        n_attn += extra;
        got += extra;
    }
    qsort(tmp, (size_t)got, sizeof *tmp, cmp_int32);
    memcpy(out_layers, tmp, sizeof(int32_t) * (size_t)got);
    if (n_attention) *n_attention = n_attn;
    free(taken);
    free(tmp);
    if (got < k)
        return tela_errorf(TELA_ERR_ARG, "tela_prune_plan: only %d layers can be pruned (the others are skipped)", got);
    return TELA_OK;
}
