/* test_cuda_batch.c: the batching engine's path on the CUDA backend (a
 * paged KV cache in device memory, per-step block tables):
 *  - test_batch.h's batched steps (chunked prompts and decode tokens of
 *    three sequences in shuffled blocks, a fork by block copies and slot
 *    images, a speculative verification with every row's logits and the
 *    per-slot rewind) against CUDA sessions fed the same runs, in the exact
 *    mode within 1e-4 of each row's range (a GPU's products of other token
 *    counts round otherwise, so not bit for bit);
 *  - the engine on the GPU, greedy, plain and speculative (prompt lookup on
 *    the KJV Llama, MTP on the Qwen3.5 demo), four requests at once: every
 *    token's log-probability against a CUDA session's logits of the same
 *    tokens (within 1e-3), and every token the session's greedy pick up to
 *    a near tie (within 1e-3 of the row's range).
 * Skipped (77) without CUDA or a GPU. */
#include "test_batch.h"

#include <pthread.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int32_t tokens[64];
    float logprob[64];
    int n;
    tela_status status;
    tela_request_usage usage;
} gen_result;

static int on_event(void *user, const tela_engine_event *ev) {
    gen_result *r = user;
    pthread_mutex_lock(&r->mu);
    if (ev->kind == TELA_EVENT_TOKEN && r->n < 64) {
        r->logprob[r->n] = ev->logprob;
        r->tokens[r->n++] = ev->token;
    } else if (ev->kind == TELA_EVENT_DONE) {
        r->done = true;
        r->status = ev->status;
        r->usage = ev->usage;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Four greedy requests through an engine on the GPU (spec: NULL or a
 * drafter), each checked against a CUDA session's logits of its prompt and
 * output. */
static void check_engine(const char *rel, bool mtp, tela_spec_method method, const char *label) {
    const char *src = getenv("TELA_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    tela_model_params mp = tela_model_default_params();
    mp.device = "cuda";
    mp.load_mtp = mtp;
    tela_model *m = NULL;
    if (tela_model_load(path, &mp, &m) != TELA_OK) {
        CHECK_MSG(0, "%s: %s", path, tela_last_error());
        return;
    }
    const int V = tela_model_get_info(m)->n_vocab;
    tela_engine_params ep = tela_engine_default_params();
    ep.n_ctx = 256;
    ep.n_parallel = 4;
    tela_engine *e = NULL;
    CHECK_OK(tela_engine_create(m, &ep, &e));
    if (!e) {
        tela_model_free(m);
        return;
    }
    const char *texts[4] = {"And God said, Let there be light: and there was light. And God said,",
                            "In the beginning God created the heaven and the earth.", "And Moses said unto the LORD,",
                            "Blessed are the poor in spirit: for theirs is the kingdom of heaven. Blessed are"};
    static gen_result res[4];
    int32_t prompts[4][96];
    size_t np[4];
    tela_spec_params sp = tela_spec_default_params();
    sp.method = method;
    sp.draft_max = 3;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(tela_tokenize(m, texts[i], strlen(texts[i]), 1, 0, prompts[i], 96, &np[i]));
        memset(&res[i], 0, sizeof res[i]);
        pthread_mutex_init(&res[i].mu, NULL);
        pthread_cond_init(&res[i].cv, NULL);
        tela_request_params rp = tela_request_default_params();
        rp.sampler.temperature = 0.0f;
        rp.max_tokens = 40;
        rp.ignore_eos = 1;
        rp.top_logprobs = 0;
        rp.callback = on_event;
        rp.user = &res[i];
        rp.spec = method == TELA_SPEC_NONE ? NULL : &sp;
        CHECK_OK(tela_engine_submit(e, prompts[i], (int32_t)np[i], &rp, NULL));
    }
    double worst_lp = 0;
    int ties = 0;
    long drafted = 0, accepted = 0;
    float *lg = malloc(sizeof(float) * (size_t)V * 160);
    for (int i = 0; i < 4; i++) {
        gen_result *r = &res[i];
        pthread_mutex_lock(&r->mu);
        while (!r->done) pthread_cond_wait(&r->cv, &r->mu);
        pthread_mutex_unlock(&r->mu);
        CHECK_MSG(r->status == TELA_OK && r->n == 40, "%s: request %d: status %d, %d tokens", label, i,
                  (int)r->status, r->n);
        drafted += r->usage.draft_tokens;
        accepted += r->usage.accepted_tokens;
        /* the session's logits at every position of prompt + output */
        int32_t all[160];
        const int n = (int)np[i] + r->n - 1;
        memcpy(all, prompts[i], np[i] * sizeof *all);
        memcpy(all + np[i], r->tokens, (size_t)(r->n - 1) * sizeof *all);
        tela_session *s = NULL;
        CHECK_OK(tela_session_create(m, NULL, &s));
        if (!s) continue;
        CHECK_OK(tela_session_eval(s, all, n, lg, 1));
        for (int t = 0; t < r->n; t++) {
            const float *row = lg + (size_t)(np[i] - 1 + t) * V;
            double mx = -INFINITY, mn = INFINITY, sum = 0;
            for (int v = 0; v < V; v++) {
                mx = row[v] > mx ? row[v] : mx;
                mn = row[v] < mn ? row[v] : mn;
            }
            for (int v = 0; v < V; v++) sum += exp((double)row[v] - mx);
            const double lp = (double)row[r->tokens[t]] - mx - log(sum), d = fabs(lp - r->logprob[t]);
            if (d > worst_lp) worst_lp = d;
            if (mx - row[r->tokens[t]] > 0) ties++;
            CHECK_MSG(mx - row[r->tokens[t]] <= 1e-3 * (mx - mn),
                      "%s: request %d token %d (%d) is not the session's greedy pick (%.6f below the top)", label, i, t,
                      r->tokens[t], mx - row[r->tokens[t]]);
        }
        tela_session_free(s);
    }
    CHECK_MSG(worst_lp <= 1e-3, "%s: log-probabilities differ from a session's by %.3g", label, worst_lp);
    if (method != TELA_SPEC_NONE) CHECK_MSG(accepted > 0, "%s: no draft accepted (%ld drafted)", label, drafted);
    printf("%s: engine on the GPU, 4 x 40 tokens: log-probabilities within %.2g of a session's, %d near ties, %ld of "
           "%ld drafts accepted\n",
           label, worst_lp, ties, accepted, drafted);
    free(lg);
    tela_engine_free(e);
    tela_model_free(m);
}

int main(void) {
    if (!tela_backend_cuda_built()) test_skip("built without CUDA");
    if (tela_backend_cuda_device_count() == 0) test_skip("no CUDA GPU");
    test_rng_seed(20261201);
    tela_ops_set_exact_matmul(true);
    batch_device = "cuda";
    batch_tol = 1e-4;
    if (!check_models(2)) test_skip("no model files (TELA_SOURCE_DIR?)");
    printf("batched steps on the GPU: the largest difference from a session's rows, %.3g of the range\n", batch_worst);
    check_engine("models/tela-kjv-q8_0.gguf", false, TELA_SPEC_NONE, "kjv q8_0, plain");
    check_engine("models/tela-kjv-f16.gguf", false, TELA_SPEC_NGRAM, "kjv f16, prompt lookup");
    check_engine("models/tela-kjv-qwen35-f16.gguf", true, TELA_SPEC_MTP, "qwen35 demo, MTP");
    check_engine("models/tela-kjv-qwen35-f16.gguf", false, TELA_SPEC_NONE, "qwen35 demo, plain");
    return test_finish();
}
