/* test_session.c: sessions on small random Llama models written by the
 * test (F32 untied with rope factors, Q8_0 tied): cached prefill and decode
 * against the architecture's naive full-recompute oracle (1e-5 of the logit
 * range), prefill == token-by-token decode, bit-identical results for the
 * same thread count and close ones across counts, the context limit,
 * snapshots, independent sessions on one model, and generation: the same
 * seed gives the same tokens in one call or several, max tokens, context
 * stop, logits hook, callback stop. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/ops.h"
#include "model/model.h"
#include "tela/tela.h"
#include "test.h"
#include "test_llama_tiny.h"

static int32_t V;

/* max |a - b| over n, relative to the range of b. */
static double rel_diff(const float *a, const float *b, size_t n) {
    double mx = -INFINITY, mn = INFINITY, d = 0;
    for (size_t i = 0; i < n; i++) {
        if (b[i] > mx) mx = b[i];
        if (b[i] < mn) mn = b[i];
        double e = fabs((double)a[i] - b[i]);
        if (e > d || isnan(e)) d = isnan(e) ? INFINITY : e;
    }
    return d / (mx - mn);
}

static void make_tokens(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 8) % (uint32_t)V);
    }
}

static tela_session *new_session(tela_model *m, int n_ctx, int n_threads) {
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = n_threads;
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    return s;
}

/* Cached computation against the oracle: a 300-token prefill (more than one
 * internal batch) with all logits, then 20 single-token decode steps. */
static void test_against_naive(tela_model *m, const char *label) {
    enum { NP = 300, ND = 20 };
    int32_t toks[NP + ND];
    make_tokens(toks, NP + ND, 7);
    float *naive = malloc(sizeof(float) * (NP + ND) * V);
    CHECK_OK(m->arch->forward_naive(m, toks, NP + ND, naive));

    tela_session *s = new_session(m, 512, 2);
    float *got = malloc(sizeof(float) * NP * V);
    CHECK_OK(tela_session_eval(s, toks, NP, got, 1));
    double worst = 0;
    for (int t = 0; t < NP; t++) {
        double r = rel_diff(got + (size_t)t * V, naive + (size_t)t * V, (size_t)V);
        if (r > worst) worst = r;
    }
    CHECK_MSG(worst < 1e-5, "%s: prefill vs naive: %g of the range", label, worst);
    worst = 0;
    for (int t = NP; t < NP + ND; t++) {
        CHECK_OK(tela_session_eval(s, &toks[t], 1, got, 0));
        double r = rel_diff(got, naive + (size_t)t * V, (size_t)V);
        if (r > worst) worst = r;
    }
    CHECK_MSG(worst < 1e-5, "%s: decode vs naive: %g of the range", label, worst);
    CHECK_EQ_INT(tela_session_n_past(s), NP + ND);
    tela_session_free(s);
    free(got);
    free(naive);
}

/* Prefill of n tokens == n decode steps; same thread count => same bits;
 * other thread counts => within tolerance. */
static void test_batching_and_threads(tela_model *m) {
    enum { N = 40 };
    int32_t toks[N];
    make_tokens(toks, N, 11);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V), *c = malloc(sizeof(float) * V);

    tela_session *s1 = new_session(m, 64, 2);
    CHECK_OK(tela_session_eval(s1, toks, N, a, 0));
    tela_session *s2 = new_session(m, 64, 2);
    for (int i = 0; i < N; i++) CHECK_OK(tela_session_eval(s2, &toks[i], 1, b, 0));
    CHECK(rel_diff(b, a, (size_t)V) < 1e-6);
    /* split prefills 17 + 23 */
    tela_session_reset(s2);
    CHECK_EQ_INT(tela_session_n_past(s2), 0);
    CHECK_OK(tela_session_eval(s2, toks, 17, NULL, 0));
    CHECK_OK(tela_session_eval(s2, toks + 17, N - 17, b, 0));
    CHECK(rel_diff(b, a, (size_t)V) < 1e-6);

    /* same thread count, again: identical bits */
    tela_session_reset(s1);
    CHECK_OK(tela_session_eval(s1, toks, N, c, 0));
    CHECK(!memcmp(a, c, sizeof(float) * V));
    for (int nt = 1; nt <= 3; nt++) {
        tela_session *s = new_session(m, 64, nt);
        CHECK_OK(tela_session_eval(s, toks, N, c, 0));
        CHECK_MSG(rel_diff(c, a, (size_t)V) < 1e-6, "%d threads", nt);
        tela_session_reset(s);
        CHECK_OK(tela_session_eval(s, toks, N, b, 0));
        CHECK(!memcmp(b, c, sizeof(float) * V));
        tela_session_free(s);
    }
    tela_session_free(s1);
    tela_session_free(s2);
    free(a);
    free(b);
    free(c);
}

static void test_context_and_snapshots(tela_model *m) {
    enum { CTX = 64 };
    int32_t toks[CTX + 10];
    make_tokens(toks, CTX + 10, 5);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    float *naive = malloc(sizeof(float) * CTX * V);

    tela_session *s = new_session(m, CTX, 2);
    CHECK_EQ_INT(tela_session_n_ctx(s), CTX);
    CHECK_OK(tela_session_eval(s, toks, 60, NULL, 0));
    CHECK(tela_session_eval(s, toks + 60, 10, a, 0) == TELA_ERR_CONTEXT);
    CHECK(strstr(tela_last_error(), "context") != NULL);
    CHECK_EQ_INT(tela_session_n_past(s), 60);
    /* still usable: the next 4 tokens fill it exactly */
    CHECK_OK(tela_session_eval(s, toks + 60, 4, a, 0));
    CHECK_OK(m->arch->forward_naive(m, toks, CTX, naive));
    CHECK(rel_diff(a, naive + (size_t)(CTX - 1) * V, (size_t)V) < 1e-5);
    CHECK(tela_session_eval(s, toks, 1, a, 0) == TELA_ERR_CONTEXT);
    /* bad token ids are refused, nothing changes */
    int32_t bad = V;
    tela_session_reset(s);
    CHECK(tela_session_eval(s, &bad, 1, a, 0) == TELA_ERR_ARG);
    bad = -1;
    CHECK(tela_session_eval(s, &bad, 1, a, 0) == TELA_ERR_ARG);
    CHECK_EQ_INT(tela_session_n_past(s), 0);

    /* snapshot at 30 -> 10 more -> restore -> the same 10 again */
    CHECK_OK(tela_session_eval(s, toks, 30, NULL, 0));
    tela_snapshot *snap = NULL;
    CHECK_OK(tela_session_snapshot(s, &snap));
    CHECK_OK(tela_session_eval(s, toks + 30, 10, a, 0));
    CHECK_OK(tela_session_eval(s, toks + 40, 3, NULL, 0)); /* overwrite cache rows past 30 */
    CHECK_OK(tela_session_restore(s, snap));
    CHECK_EQ_INT(tela_session_n_past(s), 30);
    CHECK_OK(tela_session_eval(s, toks + 30, 10, b, 0));
    CHECK(!memcmp(a, b, sizeof(float) * V));
    /* into another session of the same model and context */
    tela_session *s2 = new_session(m, CTX, 2);
    CHECK_OK(tela_session_restore(s2, snap));
    CHECK_OK(tela_session_eval(s2, toks + 30, 10, b, 0));
    CHECK(!memcmp(a, b, sizeof(float) * V));
    tela_session *s3 = new_session(m, CTX + 1, 2);
    CHECK(tela_session_restore(s3, snap) == TELA_ERR_ARG);
    tela_snapshot_free(snap);
    tela_session_free(s3);

    /* two sessions interleaved on one model == each alone */
    tela_session_reset(s);
    tela_session_reset(s2);
    for (int i = 0; i < 20; i++) {
        CHECK_OK(tela_session_eval(s, &toks[i], 1, a, 0));
        CHECK_OK(tela_session_eval(s2, &toks[i + 20], 1, b, 0));
    }
    CHECK_OK(m->arch->forward_naive(m, toks + 20, 20, naive));
    CHECK(rel_diff(b, naive + (size_t)19 * V, (size_t)V) < 1e-5);
    CHECK_OK(m->arch->forward_naive(m, toks, 20, naive));
    CHECK(rel_diff(a, naive + (size_t)19 * V, (size_t)V) < 1e-5);

    tela_session_free(s);
    tela_session_free(s2);
    free(a);
    free(b);
    free(naive);
}

typedef struct {
    int n_calls;
    int stop_at;
    int32_t seen[64];
} cb_state;

static int on_token(void *user, int32_t token, const char *piece, size_t len) {
    cb_state *st = user;
    (void)piece;
    (void)len;
    if (st->n_calls < 64) st->seen[st->n_calls] = token;
    st->n_calls++;
    return st->stop_at && st->n_calls >= st->stop_at;
}

static void only_token_5(void *user, float *logits, int32_t n_vocab, uint64_t step) {
    (void)user;
    (void)step;
    for (int32_t i = 0; i < n_vocab; i++)
        if (i != 5) logits[i] = -INFINITY;
}

static void test_generate(tela_model *m) {
    enum { NP = 12, NG = 20 };
    int32_t prompt[NP];
    make_tokens(prompt, NP, 3);
    tela_generate_params gp = tela_generate_default_params();
    gp.sampler.temperature = 1.5f; /* spread the choices on random weights */
    gp.sampler.top_k = 0;
    gp.sampler.top_p = 1.0f;
    gp.sampler.min_p = 0.0f;
    gp.sampler.seed = 42;
    gp.max_tokens = NG;

    int32_t one[NG], split[NG], other[NG];
    tela_generate_result r;
    tela_session *s = new_session(m, 128, 2);
    cb_state cb = {0, 0, {0}};
    gp.on_token = on_token;
    gp.user = &cb;
    CHECK_OK(tela_generate(s, prompt, NP, &gp, one, NG, &r));
    CHECK_EQ_INT(r.n_prompt, NP);
    CHECK_EQ_INT(r.n_generated, NG);
    CHECK_EQ_INT(r.stop_reason, TELA_STOP_MAX_TOKENS);
    CHECK_EQ_INT(cb.n_calls, NG);
    CHECK(!memcmp(cb.seen, one, sizeof one));
    /* the last token is not evaluated */
    CHECK_EQ_INT(tela_session_n_past(s), NP + NG - 1);

    /* the same, in three calls of 5, 7 and 8 tokens (each continuing with
     * the previous call's last token as its prompt) */
    tela_session_reset(s);
    gp.on_token = NULL;
    gp.max_tokens = 5;
    CHECK_OK(tela_generate(s, prompt, NP, &gp, split, 5, &r));
    gp.max_tokens = 7;
    CHECK_OK(tela_generate(s, &split[4], 1, &gp, split + 5, 7, &r));
    gp.max_tokens = 8;
    CHECK_OK(tela_generate(s, &split[11], 1, &gp, split + 12, 8, &r));
    CHECK(!memcmp(one, split, sizeof one));

    /* another seed, other tokens */
    tela_session_reset(s);
    gp.sampler.seed = 43;
    gp.max_tokens = NG;
    CHECK_OK(tela_generate(s, prompt, NP, &gp, other, NG, &r));
    CHECK(memcmp(one, other, sizeof one) != 0);

    /* a session that already holds the prompt: n_prompt = 0 samples from the
     * stored logits */
    tela_session_reset(s);
    gp.sampler.seed = 42;
    CHECK_OK(tela_session_eval(s, prompt, NP, NULL, 0));
    CHECK(tela_generate(s, NULL, 0, &gp, other, NG, &r) == TELA_ERR_ARG); /* no logits kept */
    tela_session_reset(s);
    float *lg = malloc(sizeof(float) * V);
    CHECK_OK(tela_session_eval(s, prompt, NP, lg, 0));
    CHECK_OK(tela_generate(s, NULL, 0, &gp, other, NG, &r));
    CHECK(!memcmp(one, other, sizeof one));
    free(lg);

    /* logits hook and callback stop */
    tela_session_reset(s);
    gp.logits_hook = only_token_5;
    cb = (cb_state){0, 3, {0}};
    gp.on_token = on_token;
    CHECK_OK(tela_generate(s, prompt, NP, &gp, other, NG, &r));
    CHECK_EQ_INT(r.stop_reason, TELA_STOP_CALLBACK);
    CHECK_EQ_INT(r.n_generated, 3);
    CHECK(other[0] == 5 && other[1] == 5 && other[2] == 5);
    gp.logits_hook = NULL;
    gp.on_token = NULL;

    /* context full: prompt of n_ctx - 5 tokens, unlimited generation ->
     * 6 tokens (the last one cannot be evaluated) */
    tela_session *small = new_session(m, NP + 5, 1);
    gp.max_tokens = 0;
    CHECK_OK(tela_generate(small, prompt, NP, &gp, other, NG, &r));
    CHECK_EQ_INT(r.stop_reason, TELA_STOP_CONTEXT);
    CHECK_EQ_INT(r.n_generated, 6);
    CHECK_EQ_INT(tela_session_n_past(small), NP + 5);
    /* a prompt that does not fit: an error, nothing evaluated */
    tela_session_reset(small);
    int32_t longp[NP + 6];
    make_tokens(longp, NP + 6, 9);
    CHECK(tela_generate(small, longp, NP + 6, &gp, other, NG, &r) == TELA_ERR_CONTEXT);
    CHECK_EQ_INT(tela_session_n_past(small), 0);
    /* stop strings need a tokenizer */
    const char *stops[] = {"x", NULL};
    gp.stop_strings = stops;
    if (!tela_model_get_info(m)->has_tokenizer)
        CHECK(tela_generate(small, prompt, NP, &gp, other, NG, &r) == TELA_ERR_ARG);
    tela_session_free(small);
    tela_session_free(s);
}

int main(void) {
    tela_ops_set_exact_matmul(true); /* compares Q8_0 with the naive f32 forward at 1e-5 */
    const char *dir = tiny_tmpdir();
    if (!dir) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);

    tiny_cfg c = tiny_default();
    V = c.n_vocab;
    CHECK_OK(tiny_write(path, &c, 1));
    tela_model *m = NULL;
    CHECK_OK(tela_model_load(path, NULL, &m));
    if (!m) return test_finish();
    const tela_model_info *info = tela_model_get_info(m);
    CHECK(!strcmp(info->arch, "llama"));
    CHECK_EQ_INT(info->n_vocab, c.n_vocab);
    CHECK_EQ_INT(info->n_embd, c.n_embd);
    CHECK_EQ_INT(info->n_layer, c.n_layer);
    CHECK_EQ_INT(info->n_ctx_train, c.n_ctx_train);
    CHECK(!strcmp(info->file_type, "f32"));
    CHECK_EQ_INT(info->has_tokenizer, 0);
    test_against_naive(m, "f32 untied");
    test_batching_and_threads(m);
    test_context_and_snapshots(m);
    test_generate(m);
    tela_model_free(m);

    /* Q8_0 matrices, tied output, no rope factors */
    c.type = TELA_TYPE_Q8_0;
    c.n_embd = 64;
    c.n_ff = 96;
    c.head_dim = 32;
    c.tied = true;
    c.rope_freqs = false;
    c.rope_base = 500000.0f;
    CHECK_OK(tiny_write(path, &c, 2));
    CHECK_OK(tela_model_load(path, NULL, &m));
    if (m) {
        CHECK(!strcmp(tela_model_get_info(m)->file_type, "q8_0"));
        test_against_naive(m, "q8_0 tied");
        tela_model_free(m);
    }
    unlink(path);
    rmdir(dir);
    return test_finish();
}
