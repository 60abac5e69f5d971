/* test_cuda_spec.c: speculative decoding on the CUDA backend, on the
 * shipped demo models (trained, so drafts are accepted):
 *  - greedy: the tokens of plain greedy decoding on the GPU, for prompt
 *    lookup and a draft model on the KJV Llama, and for MTP, prompt lookup
 *    and the Llama as a draft on the Qwen3.5 hybrid, k = 1, 2, 3, the
 *    hybrid by both rollback routes (the pass keeping every token's state;
 *    TELA_SPEC_REPLAY=1: the mark reloaded and the kept tokens evaluated
 *    again). In the exact mode a GPU's multi-token products agree with its
 *    decode steps to rounding (1.6e-7 of the range, test_cuda_qwen35), not
 *    bit for bit, so the tokens are compared up to the first step whose
 *    top-2 margin in the plain run is below 1e-3 (a hundred times that
 *    rounding), which must be at least half of the run; drafts are
 *    accepted;
 *  - the MTP block against the PyTorch model (test_mtp_ref.h) on the GPU,
 *    exact mode, within 1e-3 of the range (as on the CPU: F16 weights);
 *  - sampling with MTP drafts: histograms of the first generated tokens
 *    over many seeds against their exact marginals under the model, from
 *    the GPU's own logits (test_spec_stats.h), chi-square at p < 1e-3;
 *  - the hybrid split over two ranks with an exec each on the GPU
 *    ("cuda:0,cuda:0"): the MTP reference and greedy MTP speculation.
 * Skipped (77) without CUDA or a GPU; TELA_TEST_DEVICE=cpu runs it on the
 * CPU instead (a check of the test itself). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "runtime/session.h"
#include "tela/tela.h"
#include "test.h"

static char src_dir[1024];
static const char *device = "cuda";

static tela_model *load_cuda(const char *rel, bool mtp) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", src_dir, rel);
    tela_model_params mp = tela_model_default_params();
    mp.device = device;
    mp.load_mtp = mtp;
    tela_model *m = NULL;
    if (tela_model_load(path, &mp, &m) != TELA_OK) {
        fprintf(stderr, "loading %s: %s\n", path, tela_last_error());
        test_failed_++;
        return NULL;
    }
    return m;
}

static tela_session *new_session(tela_model *m, int n_ctx) {
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = n_ctx;
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    return s;
}

#include "test_mtp_ref.h"
#include "test_spec_stats.h" /* over new_session above */

#define N_GEN 96

/* Plain greedy decoding, one token a step with the logits on the host: the
 * tokens and each step's top-2 margin. */
static void plain_greedy(tela_model *m, const int32_t *prompt, int np, int32_t *toks, float *margin) {
    const int V = tela_model_get_info(m)->n_vocab;
    float *l = malloc(sizeof *l * (size_t)V);
    tela_session *s = new_session(m, 512);
    CHECK_OK(tela_session_eval(s, prompt, np, l, 0));
    for (int i = 0; i < N_GEN; i++) {
        int a = 0, b = -1;
        for (int t = 1; t < V; t++) {
            if (l[t] > l[a]) b = a, a = t;
            else if (b < 0 || l[t] > l[b]) b = t;
        }
        toks[i] = a;
        margin[i] = l[a] - l[b];
        if (i + 1 < N_GEN) CHECK_OK(tela_session_eval(s, &toks[i], 1, l, 0));
    }
    tela_session_free(s);
    free(l);
}

static void check_greedy(const char *label, tela_model *m, tela_model *draft, tela_spec_method method,
                         const int32_t *prompt, int np) {
    int32_t ref[N_GEN];
    float margin[N_GEN];
    plain_greedy(m, prompt, np, ref, margin);
    int sure = 0; /* steps before the first near tie */
    while (sure < N_GEN && margin[sure] >= 1e-3f) sure++;
    CHECK_MSG(sure >= N_GEN / 2, "%s: a near tie at step %d of the plain run: the test needs a clearer prompt", label,
              sure);
    for (int route = 0; route < 2; route++) {
        if (route) setenv("TELA_SPEC_REPLAY", "1", 1);
        for (int k = 1; k <= 3; k++) {
            tela_session *s = new_session(m, 512), *d = draft ? new_session(draft, 512) : NULL;
            tela_generate_params gp = tela_generate_default_params();
            gp.max_tokens = N_GEN;
            gp.ignore_eos = 1;
            gp.sampler.temperature = 0;
            tela_spec_params sp = tela_spec_default_params();
            sp.method = method;
            sp.draft_max = k;
            sp.draft = d;
            gp.spec = &sp;
            int32_t got[N_GEN];
            tela_generate_result r;
            CHECK_OK(tela_generate(s, prompt, np, &gp, got, N_GEN, &r));
            int same = 0;
            while (same < r.n_generated && got[same] == ref[same]) same++;
            CHECK_MSG(same >= sure, "%s k=%d%s: token %d differs from plain greedy (%d), %d steps before a near tie",
                      label, k, route ? " (replay)" : "", same, ref[same < N_GEN ? same : 0], sure);
            CHECK_MSG(r.n_accepted > 0, "%s k=%d: no draft accepted", label, k);
            printf("%s k=%d%s: %d of %d drafts accepted (%.1f%%), %.2f tokens/step; identical for %d tokens "
                   "(%d before the first near tie)\n",
                   label, k, route ? " replay" : "", r.n_accepted, r.n_drafted,
                   100.0 * r.n_accepted / (r.n_drafted ? r.n_drafted : 1),
                   r.n_spec_steps ? (double)r.n_spec_tokens / r.n_spec_steps : 0.0, same, sure);
            tela_session_free(d);
            tela_session_free(s);
        }
        if (route) unsetenv("TELA_SPEC_REPLAY");
    }
}

static int tokenize(tela_model *m, const char *text, int32_t *out, int cap) {
    size_t n = 0;
    CHECK_OK(tela_tokenize(m, text, strlen(text), 1, 0, out, (size_t)cap, &n));
    return (int)n;
}

int main(void) {
    const char *dev = getenv("TELA_TEST_DEVICE");
    if (dev && !strcmp(dev, "cpu")) device = "cpu";
    else if (!tela_backend_cuda_built()) test_skip("built without CUDA");
    else if (tela_backend_cuda_device_count() == 0) test_skip("no CUDA GPU");
    const char *src = getenv("TELA_SOURCE_DIR");
    if (!src) test_skip("TELA_SOURCE_DIR is not set");
    snprintf(src_dir, sizeof src_dir, "%s", src);
    tela_ops_set_exact_matmul(true);
    tela_model *hyb = load_cuda("models/tela-kjv-qwen35-f16.gguf", true);
    tela_model *kjv = load_cuda("models/tela-kjv-f16.gguf", false);
    tela_model *kjv8 = load_cuda("models/tela-kjv-q8_0.gguf", false);
    if (!hyb || !kjv || !kjv8) return test_finish();

    check_mtp_reference(hyb, src_dir, 1e-3, TELA_KV_DEFAULT);

    int32_t prompt[128];
    const int np = tokenize(hyb, "And God said, Let there be light: and there was light.", prompt, 128);
    check_greedy("hybrid, MTP", hyb, NULL, TELA_SPEC_MTP, prompt, np);
    check_greedy("hybrid, prompt lookup", hyb, NULL, TELA_SPEC_NGRAM, prompt, np);
    check_greedy("hybrid, draft kjv-q8_0", hyb, kjv8, TELA_SPEC_DRAFT, prompt, np);
    check_greedy("kjv, draft kjv-q8_0", kjv, kjv8, TELA_SPEC_DRAFT, prompt, np);
    check_greedy("kjv, prompt lookup", kjv, NULL, TELA_SPEC_NGRAM, prompt, np);

    tela_sampler_params sp = tela_sampler_default_params();
    sp.temperature = 1.0f;
    sp.top_k = 6;
    sp.top_p = 0.97f;
    sp.min_p = 0.02f;
    sp.repeat_penalty = 1.1f;
    const char *text = "And the LORD spake unto Moses, saying, Speak unto the children of Israel";
    const int nh = tokenize(hyb, text, prompt, 128);
    static double marg[SAMPLED_POS][SAMPLED_V];
    exact_marginals(hyb, &sp, prompt, nh, marg);
    sample_test("GPU sampling, MTP of the hybrid demo", hyb, NULL, TELA_SPEC_MTP, &sp, prompt, nh, 2000, marg, NULL);

    tela_model_free(hyb);
    tela_model_free(kjv);
    tela_model_free(kjv8);

    /* the hybrid split over two ranks, an exec each on the one GPU
     * (tensor parallelism; its MTP block too): the reference, and MTP
     * speculation gives the plain greedy tokens */
    if (!strcmp(device, "cuda")) {
        device = "cuda:0,cuda:0";
        hyb = load_cuda("models/tela-kjv-qwen35-f16.gguf", true);
        if (hyb) {
            check_mtp_reference(hyb, src_dir, 1e-3, TELA_KV_DEFAULT);
            const int n2 = tokenize(hyb, "And God said, Let there be light: and there was light.", prompt, 128);
            check_greedy("hybrid on 2 ranks, an exec each, MTP", hyb, NULL, TELA_SPEC_MTP, prompt, n2);
            tela_model_free(hyb);
        }
        device = "cuda";
    }
    return test_finish();
}
