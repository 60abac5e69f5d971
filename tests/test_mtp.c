/* test_mtp.c: Qwen3.5's multi-token-prediction block (model/qwen35.c) and
 * MTP drafting (runtime/spec.c), on the shipped hybrid demo
 * (models/tela-kjv-qwen35-f16.gguf, trained with its MTP block):
 *  - the block against the PyTorch model it was trained as
 *    (tests/fixtures/demo/qwen35-mtp-reference.*, written by
 *    tools/train/train.py from the same f16 weights): at several positions
 *    of a KJV excerpt, the main logits, the MTP step-1 logits (from the
 *    position's hidden state and the next token, after the block's cache
 *    has been filled by the evaluation) and the chained step-2 logits (from
 *    step 1's output and the token after), within 1e-3 of the logit range
 *    (the tolerance of the F16 fixtures in test_qwen35: the CPU's F16
 *    products take f16 activations), and the same greedy picks;
 *  - greedy speculative decoding with MTP drafts gives the plain greedy
 *    tokens, k = 1..4 and 15, by both rollback routes (kept states, and
 *    TELA_SPEC_REPLAY=1: the mark reloaded and the kept tokens evaluated
 *    again), with penalties (the host's pick) and without (the device's),
 *    and drafts are accepted (a trained block: over 40% at k <= 3);
 *  - after speculative generation (accepts and rejects), the session and its
 *    MTP block are as after a plain evaluation of the same tokens: the
 *    model's logits and a draft step's logits agree bit for bit;
 *  - a draft vocabulary (the head's first rows): the draft logits are the
 *    full head's there, bit for bit, -inf past them; greedy output is
 *    unchanged;
 *  - snapshots carry the block's state; errors: MTP without the block loaded,
 *    on a model without one, a chained step before any;
 *  - the same with the model and its block split over two ranks (tensor
 *    parallelism, the ranks on the CPU), the draft vocabulary also cut
 *    inside the second rank's part of the head; and with an exec a rank
 *    ("cpu,cpu").
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/session.h"
#include "tela/tela.h"
#include "test.h"
#include "test_mtp_ref.h"

static char src_dir[1024];
static int load_tp; /* the models' tensor_parallel (0: none) */
static const char *load_device = "cpu"; /* "cpu,cpu": a rank per exec */

static tela_model *load_vocab(const char *rel, bool mtp, int32_t draft_vocab) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", src_dir, rel);
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = 2;
    mp.device = load_device;
    mp.load_mtp = mtp;
    mp.mtp_draft_vocab = draft_vocab;
    mp.tensor_parallel = load_tp;
    tela_model *m = NULL;
    if (tela_model_load(path, &mp, &m) != TELA_OK) {
        fprintf(stderr, "loading %s: %s\n", path, tela_last_error());
        test_failed_++;
        return NULL;
    }
    return m;
}

static tela_model *load(const char *rel, bool mtp) { return load_vocab(rel, mtp, 0); }

static tela_session *new_session(tela_model *m, int n_ctx) {
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = 2;
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    return s;
}

typedef struct gen_out {
    int32_t toks[256];
    tela_generate_result r;
} gen_out;

static void generate(tela_model *m, const int32_t *prompt, int np, const tela_sampler_params *sampler, int n_gen,
                     int k, gen_out *o, tela_session **keep) {
    tela_session *s = new_session(m, 512);
    tela_generate_params gp = tela_generate_default_params();
    gp.max_tokens = n_gen;
    gp.ignore_eos = 1;
    gp.sampler = *sampler;
    tela_spec_params sp = tela_spec_default_params();
    sp.method = TELA_SPEC_MTP;
    sp.draft_max = k;
    if (k > 0) gp.spec = &sp;
    memset(o, 0, sizeof *o);
    CHECK_OK(tela_generate(s, prompt, np, &gp, o->toks, 256, &o->r));
    if (keep) *keep = s;
    else tela_session_free(s);
}

static int tokenize(tela_model *m, const char *text, int32_t *out, int cap) {
    size_t n = 0;
    CHECK_OK(tela_tokenize(m, text, strlen(text), 1, 0, out, (size_t)cap, &n));
    return (int)n;
}

static const char *const prompts[] = {
    "And God said, Let there be light: and there was light.",
    "The LORD is my shepherd; I shall not want.",
    "<|im_start|>user\nIn the beginning God created the heaven and the earth.<|im_end|>\n<|im_start|>assistant\n",
};

static void test_greedy(tela_model *m) {
    /* under the sanitizers (unoptimized, instrumented): one k, shorter runs */
    static const int ks_all[] = {1, 2, 3, 4, 15}, ks_quick[] = {3};
    const int *ks = TEST_QUICK ? ks_quick : ks_all, n_ks = TEST_QUICK ? 1 : 5, n_gen = TEST_QUICK ? 48 : 96;
    tela_sampler_params greedy = tela_sampler_default_params(), pen = greedy;
    greedy.temperature = 0;
    pen.temperature = 0;
    pen.repeat_penalty = 1.15f;
    for (int route = 0; route < 2; route++) {
        if (route) setenv("TELA_SPEC_REPLAY", "1", 1);
        for (size_t p = 0; p < sizeof prompts / sizeof prompts[0]; p++) {
            int32_t prompt[128];
            const int np = tokenize(m, prompts[p], prompt, 128);
            for (int withpen = 0; withpen < 2; withpen++) {
                if (withpen && (route || p)) continue; /* penalties: one case is enough */
                const tela_sampler_params *sp = withpen ? &pen : &greedy;
                static gen_out ref, got;
                generate(m, prompt, np, sp, n_gen, 0, &ref, NULL);
                for (int i = 0; i < n_ks; i++) {
                    generate(m, prompt, np, sp, n_gen, ks[i], &got, NULL);
                    const bool same = got.r.n_generated == ref.r.n_generated &&
                                      !memcmp(got.toks, ref.toks, sizeof(int32_t) * (size_t)ref.r.n_generated);
                    CHECK_MSG(same, "prompt %zu k=%d%s%s: MTP greedy output differs from plain greedy", p, ks[i],
                              route ? " (replay)" : "", withpen ? " (penalties)" : "");
                    printf("prompt %zu%s%s k=%d: %d of %d drafts accepted (%.1f%%), %.2f tokens/step\n", p,
                           route ? " replay" : "", withpen ? " penalties" : "", ks[i], got.r.n_accepted,
                           got.r.n_drafted, 100.0 * got.r.n_accepted / (got.r.n_drafted ? got.r.n_drafted : 1),
                           got.r.n_spec_steps ? (double)got.r.n_spec_tokens / got.r.n_spec_steps : 0.0);
                    if (ks[i] <= 3 && !withpen) /* a trained block: most drafts accepted at small k */
                        CHECK_MSG(5 * got.r.n_accepted > 2 * got.r.n_drafted,
                                  "prompt %zu k=%d: only %d of %d MTP drafts accepted", p, ks[i], got.r.n_accepted,
                                  got.r.n_drafted);
                }
            }
        }
        if (route) unsetenv("TELA_SPEC_REPLAY");
    }
}

/* A draft vocabulary (params.mtp_draft_vocab = V / 4 x quarters): a draft step's
 * logits are the full head's for those first ids, bit for bit, and
 * -inf past them, its pick their argmax; greedy MTP speculation still gives
 * the plain greedy tokens, and drafts are accepted. */
static void test_draft_vocab(tela_model *full, int quarters) {
    const int32_t V = tela_model_get_info(full)->n_vocab, N = V / 4 * quarters;
    tela_model *cut = load_vocab("models/tela-kjv-qwen35-f16.gguf", true, N);
    if (!cut) return;
    float *lf = malloc(sizeof(float) * (size_t)V), *lc = malloc(sizeof(float) * (size_t)V);
    for (size_t p = 0; p < sizeof prompts / sizeof prompts[0]; p++) {
        int32_t prompt[128];
        const int np = tokenize(full, prompts[p], prompt, 128);
        tela_session *sf = new_session(full, 512), *sc = new_session(cut, 512);
        CHECK_OK(tela_session_eval(sf, prompt, np - 1, NULL, 0));
        CHECK_OK(tela_session_eval(sc, prompt, np - 1, NULL, 0));
        int32_t pick = -1;
        CHECK_OK(tela_session_mtp_draft(sf, prompt[np - 1], np - 2, false, lf, NULL));
        CHECK_OK(tela_session_mtp_draft(sc, prompt[np - 1], np - 2, false, lc, &pick));
        CHECK_MSG(!memcmp(lf, lc, sizeof(float) * (size_t)N), "prompt %zu: the draft head's first %d logits differ", p, N);
        int32_t tail_ok = 1, best = 0;
        for (int32_t v = N; v < V; v++) tail_ok = tail_ok && lc[v] == -INFINITY;
        for (int32_t v = 1; v < N; v++)
            if (lf[v] > lf[best]) best = v;
        CHECK_MSG(tail_ok, "prompt %zu: logits past the draft vocabulary are not -inf", p);
        CHECK_MSG(pick == best, "prompt %zu: the cut head drafts %d, the argmax of its rows is %d", p, pick, best);
        tela_session_free(sf);
        tela_session_free(sc);
        tela_sampler_params greedy = tela_sampler_default_params();
        greedy.temperature = 0;
        static gen_out ref, got;
        const int n_gen = TEST_QUICK ? 32 : 64;
        generate(full, prompt, np, &greedy, n_gen, 0, &ref, NULL);
        generate(cut, prompt, np, &greedy, n_gen, 3, &got, NULL);
        CHECK_MSG(got.r.n_generated == ref.r.n_generated &&
                      !memcmp(got.toks, ref.toks, sizeof(int32_t) * (size_t)ref.r.n_generated),
                  "prompt %zu: MTP greedy with a draft vocabulary of %d differs from plain greedy", p, N);
        CHECK_MSG(got.r.n_accepted > 0, "prompt %zu: no draft accepted with a draft vocabulary of %d", p, N);
        printf("draft vocabulary %d of %d, prompt %zu: %d of %d drafts accepted\n", N, V, p, got.r.n_accepted,
               got.r.n_drafted);
    }
    free(lf);
    free(lc);
    tela_model_free(cut);
}

/* After speculative sampling (accepts and rejects), the session holds what
 * a plain evaluation of its tokens holds, the MTP block's part included. */
static void test_state_after(tela_model *m) {
    tela_sampler_params sp = tela_sampler_default_params();
    sp.temperature = 0.9f;
    sp.top_k = 20;
    int32_t prompt[128];
    const int np = tokenize(m, prompts[1], prompt, 128);
    const int V = tela_model_get_info(m)->n_vocab;
    float *a = malloc(sizeof *a * (size_t)V), *b = malloc(sizeof *b * (size_t)V);
    for (int route = 0; route < 2; route++) {
        if (route) setenv("TELA_SPEC_REPLAY", "1", 1);
        for (uint64_t seed = 1; seed <= (TEST_QUICK ? 2u : 3u); seed++) {
            sp.seed = seed;
            gen_out o;
            tela_session *s = NULL;
            generate(m, prompt, np, &sp, 40, 3, &o, &s);
            CHECK_MSG(o.r.n_accepted > 0 && o.r.n_accepted < o.r.n_drafted, "seed %llu: %d of %d accepted",
                      (unsigned long long)seed, o.r.n_accepted, o.r.n_drafted);
            /* the plain session: prompt and the generated tokens but the last (not evaluated) */
            const int32_t n = tela_session_n_past(s);
            CHECK_EQ_INT(n, np + o.r.n_generated - 1);
            tela_session *p = new_session(m, 512);
            int32_t all[512];
            memcpy(all, prompt, sizeof(int32_t) * (size_t)np);
            memcpy(all + np, o.toks, sizeof(int32_t) * (size_t)(o.r.n_generated - 1));
            /* in the pieces of single steps (the verification passes compute
             * their very bits; a long prefill's chunks round otherwise) */
            CHECK_OK(tela_session_eval(p, all, np, NULL, 0));
            for (int32_t i = np; i < n; i++) CHECK_OK(tela_session_eval(p, all + i, 1, NULL, 0));
            const int32_t last = o.toks[o.r.n_generated - 1];
            /* the MTP block's next draft, then the model's logits after the pending token */
            CHECK_OK(tela_session_mtp_draft(s, last, n - 1, false, a, NULL));
            CHECK_OK(tela_session_mtp_draft(p, last, n - 1, false, b, NULL));
            CHECK_MSG(!memcmp(a, b, sizeof *a * (size_t)V), "seed %llu%s: MTP logits after speculation differ",
                      (unsigned long long)seed, route ? " (replay)" : "");
            CHECK_OK(tela_session_eval(s, &last, 1, a, 0));
            CHECK_OK(tela_session_eval(p, &last, 1, b, 0));
            CHECK_MSG(!memcmp(a, b, sizeof *a * (size_t)V), "seed %llu%s: logits after speculation differ",
                      (unsigned long long)seed, route ? " (replay)" : "");
            tela_session_free(p);
            tela_session_free(s);
        }
        if (route) unsetenv("TELA_SPEC_REPLAY");
    }
    free(a);
    free(b);
}

/* A snapshot restored into another session continues the MTP block too. */
static void test_snapshot(tela_model *m) {
    int32_t prompt[128];
    const int np = tokenize(m, prompts[0], prompt, 128);
    const int V = tela_model_get_info(m)->n_vocab;
    float *a = malloc(sizeof *a * (size_t)V), *b = malloc(sizeof *b * (size_t)V);
    tela_session *s = new_session(m, 256), *t = new_session(m, 256);
    CHECK_OK(tela_session_eval(s, prompt, np - 1, NULL, 0));
    tela_snapshot *snap = NULL;
    CHECK_OK(tela_session_snapshot(s, &snap));
    CHECK_OK(tela_session_eval(t, prompt, 3, NULL, 0)); /* something else first */
    CHECK_OK(tela_session_restore(t, snap));
    CHECK_OK(tela_session_eval(s, prompt + np - 1, 1, NULL, 0));
    CHECK_OK(tela_session_eval(t, prompt + np - 1, 1, NULL, 0));
    CHECK_OK(tela_session_mtp_draft(s, prompt[2], np - 1, false, a, NULL));
    CHECK_OK(tela_session_mtp_draft(t, prompt[2], np - 1, false, b, NULL));
    CHECK_MSG(!memcmp(a, b, sizeof *a * (size_t)V), "MTP logits after a snapshot's restore differ");
    tela_snapshot_free(snap);
    tela_session_free(s);
    tela_session_free(t);
    free(a);
    free(b);
}

static void test_errors(tela_model *with, tela_model *without, tela_model *llama) {
    tela_generate_params gp = tela_generate_default_params();
    gp.max_tokens = 4;
    tela_spec_params sp = tela_spec_default_params();
    sp.method = TELA_SPEC_MTP;
    gp.spec = &sp;
    const int32_t prompt[] = {0, 100, 200};
    int32_t out[8];
    tela_model *ms[] = {without, llama};
    const char *expect[] = {"none loaded", "no MTP support"};
    for (int i = 0; i < 2; i++) {
        tela_session *s = new_session(ms[i], 64);
        const tela_status st = tela_generate(s, prompt, 3, &gp, out, 8, NULL);
        CHECK_EQ_INT(st, TELA_ERR_UNSUPPORTED);
        CHECK_MSG(strstr(tela_last_error(), expect[i]) != NULL, "error: %s", tela_last_error());
        tela_session_free(s);
    }
    tela_session *s = new_session(with, 64);
    float *l = malloc(sizeof *l * 4096);
    CHECK(tela_session_mtp_draft(s, 5, 0, false, l, NULL) == TELA_ERR_ARG); /* nothing evaluated yet */
    CHECK_OK(tela_session_eval(s, prompt, 3, NULL, 0));
    CHECK(tela_session_mtp_draft(s, 5, 1, false, l, NULL) == TELA_ERR_ARG); /* not the last position */
    CHECK(tela_session_mtp_draft(s, 5, 64, true, l, NULL) == TELA_ERR_ARG); /* past the context */
    CHECK(tela_session_mtp_draft(s, 4096, 2, false, l, NULL) == TELA_ERR_ARG); /* no such token */
    CHECK_OK(tela_session_mtp_draft(s, 5, 2, false, l, NULL));
    free(l);
    tela_session_free(s);
}

int main(void) {
    const char *src = getenv("TELA_SOURCE_DIR");
    if (!src) test_skip("TELA_SOURCE_DIR is not set");
    snprintf(src_dir, sizeof src_dir, "%s", src);
    tela_model *m = load("models/tela-kjv-qwen35-f16.gguf", true);
    tela_model *plain = load("models/tela-kjv-qwen35-f16.gguf", false);
    tela_model *llama = load("models/tela-kjv-q8_0.gguf", true);
    if (!m || !plain || !llama) return test_finish();
    check_mtp_reference(m, src_dir, 1e-3, TELA_KV_DEFAULT);
    /* 8-bit keys and values (llama.cpp's Q8_0 blocks): a looser bound */
    check_mtp_reference(m, src_dir, 4e-3, TELA_KV_Q8_0);
    test_greedy(m);
    test_draft_vocab(m, 1);
    test_state_after(m);
    test_snapshot(m);
    test_errors(m, plain, llama);
    tela_model_free(m);
    tela_model_free(plain);
    tela_model_free(llama);

    /* the model and its MTP block split over two ranks (tensor
     * parallelism, on the CPU: each rank its heads of the block and its KV
     * cache, the drafts over the head's parts): the same reference and
     * bound, greedy speculation gives plain greedy output with most drafts
     * accepted, the state after speculation and snapshots as above */
    load_tp = 2;
    m = load("models/tela-kjv-qwen35-f16.gguf", true);
    if (m) {
        check_mtp_reference(m, src_dir, 1e-3, TELA_KV_DEFAULT);
        test_greedy(m);
        /* draft vocabularies of a quarter (all in rank 0's part of the
         * head) and three quarters (rank 0's part whole, rank 1's cut) */
        test_draft_vocab(m, 1);
        test_draft_vocab(m, 3);
        test_state_after(m);
        test_snapshot(m);
        tela_model_free(m);
    }
    /* the same with a rank per exec ("cpu,cpu": each rank its exec, its
     * KV caches and its copy of the block's whole parts; the sums
     * all-reduced, the draft head's columns gathered on rank 0) */
    load_device = "cpu,cpu";
    m = load("models/tela-kjv-qwen35-f16.gguf", true);
    if (m) {
        check_mtp_reference(m, src_dir, 1e-3, TELA_KV_DEFAULT);
        test_greedy(m);
        test_draft_vocab(m, 3);
        test_state_after(m);
        test_snapshot(m);
        tela_model_free(m);
    }
    load_device = "cpu";
    load_tp = 0;
    return test_finish();
}
