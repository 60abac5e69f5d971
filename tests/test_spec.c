/* test_spec.c: speculative decoding (runtime/spec.c, generate.c) against
 * plain decoding, on the fixtures (random Llama and Qwen3.5 models of 512
 * tokens, token ids only) and the shipped KJV Llama (a trained model, where
 * drafts are accepted):
 *  - greedy: the tokens are those of non-speculative greedy decoding, token
 *    for token, for prompt lookup and draft models (same and other
 *    architecture, recurrent drafts), k = 1..15, with penalties and a logit
 *    bias too; on the KJV model drafts are actually accepted;
 *  - rollback: a draft model with other weights, rejected at every position
 *    (asserted), on a Llama and a Qwen3.5 target (KV truncation; recurrent
 *    state reloaded and the kept tokens evaluated again), output unchanged;
 *    tela_session_truncate itself: bit-identical logits to a session that
 *    only ever held the kept tokens, with and without a mark, and within
 *    an evaluation that kept every token's state (Qwen3.5 on the CPU);
 *    Qwen3.5 targets by both routes (kept states; TELA_SPEC_REPLAY=1: the
 *    mark reloaded and the kept tokens evaluated again); after sampled
 *    generation with acceptances and rejections, the session's state is a
 *    plain evaluation's of the same tokens;
 *  - sampling: many seeds (fixed, so the test is reproducible), the
 *    histograms of the 2nd, 3rd and 4th generated tokens against their exact
 *    marginal distributions under the target, computed here from plain
 *    evaluations' logits with a sampler written in this file (top-k, top-p,
 *    min-p, temperature, repetition penalty, logit bias), by a chi-square
 *    test that fails at p < 1e-3; for prompt lookup, a close draft and a far
 *    draft (both accept and reject branches taken, asserted), the MTP block
 *    of the hybrid demo (a 4096-token vocabulary), and a control showing
 *    the test rejects the far draft's own distribution;
 *  - errors: vocabulary mismatch (count; token text), draft_max and n-gram
 *    sizes out of range, a missing or shorter draft session, a logits hook. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/session.h"
#include "tela/tela.h"
#include "test.h"


static char src_dir[1024];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static tela_model *load_with(const char *rel, bool mtp) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", src_dir, rel);
    tela_model_params mp = tela_model_default_params();
    mp.load_mtp = mtp;
    mp.n_threads = 2;
    mp.device = "cpu"; /* the exactness checked is the CPU's (a GPU's prefill products round otherwise) */
    tela_model *m = NULL;
    if (tela_model_load(path, &mp, &m) != TELA_OK) {
        fprintf(stderr, "loading %s: %s\n", path, tela_last_error());
        test_failed_++;
        return NULL;
    }
    return m;
}

static tela_model *load(const char *rel) { return load_with(rel, false); }
static tela_model *load_mtp(const char *rel) { return load_with(rel, true); }

/* One thread for the fixtures (their products are too small to share),
 * two for the KJV model. */
static tela_session *new_session(tela_model *m, int n_ctx) {
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = tela_model_get_info(m)->n_vocab > 512 ? 2 : 1;
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    return s;
}

static void make_tokens(int32_t *t, int n, uint32_t seed, int32_t V) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 8) % (uint32_t)V);
    }
}

/* A prompt with repeats (for prompt lookup): 12 random tokens, then the
 * model's own greedy continuation of them, 40 tokens. */
static int make_prompt(tela_model *m, int32_t *out, uint32_t seed) {
    const int32_t V = tela_model_get_info(m)->n_vocab;
    make_tokens(out, 12, seed, V);
    tela_session *s = new_session(m, 256);
    tela_generate_params gp = tela_generate_default_params();
    gp.sampler.temperature = 0;
    gp.max_tokens = 40;
    gp.ignore_eos = 1;
    tela_generate_result r;
    CHECK_OK(tela_generate(s, out, 12, &gp, out + 12, 40, &r));
    tela_session_free(s);
    return 12 + 40;
}

typedef struct run_out {
    int32_t toks[512];
    tela_generate_result r;
    tela_status st;
} run_out;

/* tela_generate on a fresh session of m (and a fresh draft session). */
static void run(tela_model *m, tela_model *draft, const int32_t *prompt, int np, const tela_generate_params *base,
                const tela_spec_params *spec, int n_ctx, run_out *o) {
    tela_session *s = new_session(m, n_ctx), *d = draft ? new_session(draft, n_ctx) : NULL;
    tela_generate_params gp = *base;
    tela_spec_params sp;
    if (spec) {
        sp = *spec;
        sp.draft = d;
        gp.spec = &sp;
    }
    memset(o, 0, sizeof *o);
    o->st = tela_generate(s, prompt, np, &gp, o->toks, 512, &o->r);
    if (o->st != TELA_OK) fprintf(stderr, "tela_generate: %s\n", tela_last_error());
    tela_session_free(d);
    tela_session_free(s);
}

static bool same_tokens(const run_out *a, const run_out *b) {
    if (a->r.n_generated != b->r.n_generated) return false;
    return !memcmp(a->toks, b->toks, sizeof(int32_t) * (size_t)a->r.n_generated);
}

/* Greedy speculative output against plain greedy output. */
static void check_greedy(const char *label, tela_model *m, tela_model *draft, const int32_t *prompt, int np, int n_gen,
                         const tela_sampler_params *sampler, const int *ks, int n_ks, int ngram_min, int *accepted,
                         int *drafted) {
    tela_generate_params gp = tela_generate_default_params();
    gp.max_tokens = n_gen;
    gp.ignore_eos = 1;
    gp.sampler = *sampler;
    static run_out ref, got;
    run(m, NULL, prompt, np, &gp, NULL, 512, &ref);
    CHECK_OK(ref.st);
    for (int i = 0; i < n_ks; i++) {
        tela_spec_params sp = tela_spec_default_params();
        sp.method = draft ? TELA_SPEC_DRAFT : TELA_SPEC_NGRAM;
        sp.draft_max = ks[i];
        if (ngram_min) sp.ngram_min = ngram_min;
        run(m, draft, prompt, np, &gp, &sp, 512, &got);
        CHECK_OK(got.st);
        CHECK_MSG(same_tokens(&ref, &got), "%s k=%d: speculative greedy output differs from plain greedy", label,
                  ks[i]);
        CHECK_EQ_INT(got.r.n_accepted + got.r.n_spec_steps >= got.r.n_spec_tokens, 1);
        printf("%s k=%d: %d of %d drafts accepted, %d steps, %.2f tokens/step\n", label, ks[i], got.r.n_accepted,
               got.r.n_drafted, got.r.n_spec_steps,
               got.r.n_spec_steps ? (double)got.r.n_spec_tokens / got.r.n_spec_steps : 0.0);
        if (accepted) *accepted += got.r.n_accepted;
        if (drafted) *drafted += got.r.n_drafted;
    }
}

static void test_greedy_fixtures(tela_model *lg, tela_model *lq8, tela_model *lt, tela_model *qs, tela_model *qa) {
    /* under the sanitizers (unoptimized, instrumented): fewer k */
    static const int ks_all[] = {1, 2, 4, 15}, ks_quick[] = {1, 15, 4};
    const int *ks = TEST_QUICK ? ks_quick : ks_all, n_ks = TEST_QUICK ? 2 : 4;
    tela_sampler_params greedy = tela_sampler_default_params();
    greedy.temperature = 0;
    tela_sampler_params pen = greedy; /* penalties and a bias change the picks: still exact */
    pen.repeat_penalty = 1.3f;
    pen.frequency_penalty = 0.2f;
    const tela_logit_bias bias[] = {{7, 3.0f}, {11, -INFINITY}};
    pen.logit_bias = bias;
    pen.n_logit_bias = 2;
    struct {
        const char *label;
        tela_model *m, *draft;
    } cases[] = {
        {"llama-gqa ngram", lg, NULL},         {"llama-gqa-q8_0 ngram", lq8, NULL},
        {"llama-tied ngram", lt, NULL},        {"qwen35-sym ngram", qs, NULL},
        {"qwen35-asym ngram", qa, NULL},       {"llama-gqa draft q8_0", lg, lq8},
        {"qwen35-sym draft qwen35-asym", qs, qa}, {"llama-gqa draft qwen35-sym", lg, qs},
    };
    int q_acc = 0, q_dr = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t prompt[64];
        const int np = make_prompt(cases[c].m, prompt, 3 + (uint32_t)c);
        const bool qwen = cases[c].m == qs || cases[c].m == qa;
        check_greedy(cases[c].label, cases[c].m, cases[c].draft, prompt, np, 48, &greedy, ks, n_ks, 1,
                     qwen && !cases[c].draft ? &q_acc : NULL, qwen && !cases[c].draft ? &q_dr : NULL);
        if (TEST_QUICK && c % 2) continue; /* half the penalty runs under the sanitizers */
        char label[128];
        snprintf(label, sizeof label, "%s (penalties, bias)", cases[c].label);
        check_greedy(label, cases[c].m, cases[c].draft, prompt, np, 32, &pen, ks + 2, 1, 1, NULL, NULL);
    }
    /* the qwen35 prompt-lookup runs took both rollbacks: rejections, and acceptances */
    CHECK_MSG(q_acc > 0 && q_acc < q_dr, "qwen35 prompt lookup: %d of %d accepted", q_acc, q_dr);
    /* Qwen3.5's other rollback route (a mark of the state, reloaded, the
     * kept tokens evaluated again), as on a device that keeps no states */
    setenv("TELA_SPEC_REPLAY", "1", 1);
    for (size_t c = 3; c < 7; c++) {
        if (cases[c].m != qs && cases[c].m != qa) continue;
        if (TEST_QUICK && c != 6) continue; /* the draft case only */
        int32_t prompt[64];
        const int np = make_prompt(cases[c].m, prompt, 3 + (uint32_t)c);
        char label[128];
        snprintf(label, sizeof label, "%s (replayed rollback)", cases[c].label);
        check_greedy(label, cases[c].m, cases[c].draft, prompt, np, 48, &greedy, ks, n_ks, 1, NULL, NULL);
    }
    unsetenv("TELA_SPEC_REPLAY");
}

/* The KJV model, where drafts are accepted: prompt lookup and the Q8_0 file
 * drafting for the F16 one. */
static void test_greedy_kjv(tela_model *f16, tela_model *q8) {
    const char *text = "And God said, Let there be light: and there was light. And God saw the light, that it was "
                       "good: and God divided the light from the darkness. And God said";
    int32_t prompt[128];
    size_t np = 0;
    CHECK_OK(tela_tokenize(f16, text, strlen(text), 1, 0, prompt, 128, &np));
    tela_sampler_params greedy = tela_sampler_default_params();
    greedy.temperature = 0;
    static const int ks[] = {1, 2, 3, 4}, ks_quick[] = {3};
    const int n_gen = TEST_QUICK ? 32 : 96, n_ks = TEST_QUICK ? 1 : 4;
    int acc = 0, dr = 0;
    check_greedy("kjv-f16 ngram", f16, NULL, prompt, (int)np, n_gen, &greedy, TEST_QUICK ? ks_quick : ks, n_ks, 0,
                 &acc, &dr);
    CHECK_MSG(acc > dr / 4, "kjv ngram: only %d of %d drafts accepted", acc, dr);
    acc = dr = 0;
    check_greedy("kjv-f16 draft q8_0", f16, q8, prompt, (int)np, n_gen, &greedy, TEST_QUICK ? ks_quick : ks, n_ks, 0,
                 &acc, &dr);
    CHECK_MSG(acc > dr / 2, "kjv draft: only %d of %d drafts accepted", acc, dr);
}

/* A draft with other weights: every draft rejected (asserted), so every
 * step rolls back; the output is still plain greedy's. */
static void test_rollback_all_rejected(tela_model *lg, tela_model *lt, tela_model *qs, tela_model *qa) {
    tela_sampler_params greedy = tela_sampler_default_params();
    greedy.temperature = 0;
    struct {
        const char *label;
        tela_model *m, *draft;
    } cases[] = {{"llama-gqa <- llama-tied", lg, lt}, {"qwen35-sym <- qwen35-asym", qs, qa},
                 {"qwen35-asym <- llama-gqa", qa, lg}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t prompt[16];
        make_tokens(prompt, 16, 101, tela_model_get_info(cases[c].m)->n_vocab);
        tela_generate_params gp = tela_generate_default_params();
        gp.max_tokens = 40;
        gp.ignore_eos = 1;
        gp.sampler = greedy;
        static run_out ref, got;
        run(cases[c].m, NULL, prompt, 16, &gp, NULL, 512, &ref);
        tela_spec_params sp = tela_spec_default_params();
        sp.method = TELA_SPEC_DRAFT;
        sp.draft_max = 4;
        run(cases[c].m, cases[c].draft, prompt, 16, &gp, &sp, 512, &got);
        CHECK_OK(got.st);
        /* every token but the first and the last (k cut to 0) from a step */
        CHECK_MSG(got.r.n_accepted == 0 && got.r.n_spec_steps == 38, "%s: %d accepted in %d steps", cases[c].label,
                  got.r.n_accepted, got.r.n_spec_steps);
        CHECK_MSG(same_tokens(&ref, &got), "%s: output differs after rejections", cases[c].label);
        printf("rollback %s: %d steps, %d of %d accepted, output identical\n", cases[c].label, got.r.n_spec_steps,
               got.r.n_accepted, got.r.n_drafted);
    }
}

/* tela_session_truncate: the logits after truncating and going on equal
 * those of a session that only ever held the kept tokens. */
static void test_truncate(tela_model *m, const char *label) {
    const int32_t V = tela_model_get_info(m)->n_vocab;
    int32_t t[40];
    make_tokens(t, 40, 5, V);
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    tela_session *s = new_session(m, 64), *r = new_session(m, 64);
    /* the reference: 20 tokens, then 3 in one step, then one more */
    CHECK_OK(tela_session_eval(r, t, 20, NULL, 0));
    CHECK_OK(tela_session_eval(r, t + 20, 3, NULL, 0));
    CHECK_OK(tela_session_eval(r, t + 30, 1, b, 0));
    /* mark at 20, 8 more tokens (3 kept), truncate to 23 */
    CHECK_OK(tela_session_eval(s, t, 20, NULL, 0));
    CHECK_OK(tela_session_mark(s));
    CHECK_OK(tela_session_eval(s, t + 20, 8, NULL, 0));
    CHECK_OK(tela_session_truncate(s, 23));
    CHECK_EQ_INT(tela_session_n_past(s), 23);
    CHECK_OK(tela_session_eval(s, t + 30, 1, a, 0));
    CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)V), "%s: truncate to a mark: logits differ", label);
    /* below the mark (dropped): from scratch, the same as 20 + 3 evaluated anew */
    CHECK_OK(tela_session_truncate(s, 12));
    CHECK_EQ_INT(tela_session_n_past(s), 12);
    CHECK_OK(tela_session_eval(s, t + 12, 8, NULL, 0));
    tela_session_reset(r);
    CHECK_OK(tela_session_eval(r, t, 12, NULL, 0));
    CHECK_OK(tela_session_eval(r, t + 12, 8, NULL, 0));
    CHECK_OK(tela_session_eval(s, t + 30, 1, a, 0));
    CHECK_OK(tela_session_eval(r, t + 30, 1, b, 0));
    CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)V), "%s: truncate without a mark: logits differ", label);
    /* the states kept by an evaluation (Qwen3.5 on the CPU; elsewhere an
     * ordinary evaluation and a truncation), then further truncation
     * within it is refused by the kept pass's end */
    tela_session_reset(s);
    CHECK_OK(tela_session_eval(s, t, 20, NULL, 0));
    float *rows = malloc(sizeof(float) * 6 * (size_t)V);
    CHECK_OK(tela_session_eval_keep(s, t + 20, 6, rows, NULL));
    CHECK_EQ_INT(tela_session_n_past(s), 26);
    CHECK_OK(tela_session_truncate(s, 23));
    CHECK_EQ_INT(tela_session_n_past(s), 23);
    CHECK_OK(tela_session_eval(s, t + 30, 1, a, 0));
    tela_session_reset(r);
    CHECK_OK(tela_session_eval(r, t, 20, NULL, 0));
    CHECK_OK(tela_session_eval(r, t + 20, 3, NULL, 0));
    CHECK_OK(tela_session_eval(r, t + 30, 1, b, 0));
    CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)V), "%s: truncate within a kept pass: logits differ", label);
    /* and the kept pass's logits are those of single steps */
    tela_session_reset(r);
    CHECK_OK(tela_session_eval(r, t, 20, NULL, 0));
    for (int i = 0; i < 6; i++) {
        CHECK_OK(tela_session_eval(r, t + 20 + i, 1, b, 0));
        CHECK_MSG(!memcmp(rows + (size_t)i * V, b, sizeof(float) * (size_t)V), "%s: kept pass row %d", label, i);
    }
    /* every position's greedy pick, made by the backend (a GPU's
     * verification route): the argmax of each row above, ties to the lower
     * index, through both the kept pass and a plain evaluation */
    for (int route = 0; route < 2; route++) {
        tela_session_reset(r);
        CHECK_OK(tela_session_eval(r, t, 20, NULL, 0));
        int32_t picks[6];
        if (route) CHECK_OK(tela_session_eval_picks(r, t + 20, 6, picks));
        else CHECK_OK(tela_session_eval_keep(r, t + 20, 6, NULL, picks));
        CHECK_EQ_INT(tela_session_n_past(r), 26);
        for (int i = 0; i < 6; i++) {
            const float *row = rows + (size_t)i * V;
            int32_t best = 0;
            for (int32_t v = 1; v < V; v++)
                if (row[v] > row[best]) best = v;
            CHECK_MSG(picks[i] == best, "%s: pick %d of a %s pass: %d, the row's argmax %d", label, i,
                      route ? "plain" : "kept", picks[i], best);
        }
    }
    free(rows);
    printf("%s: states kept by the pass: %s\n", label, tela_session_keeps_states(s) ? "yes" : "no");
    CHECK(tela_session_truncate(s, 25) == TELA_ERR_ARG);
    CHECK(tela_session_truncate(s, -1) == TELA_ERR_ARG);
    tela_session_free(s);
    tela_session_free(r);
    free(a);
    free(b);
}

/* After sampled speculative generation (acceptances and rejections at
 * any point of a step), the session is what evaluating the same tokens
 * plainly gives: the logits after the last token agree with a fresh
 * session's (bit for bit for Llama; within f32 rounding for Qwen3.5, whose
 * fresh prefill takes other pieces), for both rollback routes. */
static void test_state_after_sampling(tela_model *m, tela_model *draft, const char *label) {
    const int32_t V = tela_model_get_info(m)->n_vocab;
    int32_t prompt[16], all[80];
    make_tokens(prompt, 16, 9, V);
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    int partial_runs = 0, runs = 0;
    const int routes = m->arch->slot_bytes(m) > 0 ? 2 : 1; /* Llama has one */
    for (int route = 0; route < routes; route++) {
        if (route) setenv("TELA_SPEC_REPLAY", "1", 1);
        for (uint64_t seed = 1; seed <= 6; seed++) {
            tela_session *s = new_session(m, 128), *d = draft ? new_session(draft, 128) : NULL;
            tela_generate_params gp = tela_generate_default_params();
            gp.max_tokens = 40;
            gp.ignore_eos = 1;
            gp.sampler.temperature = 2.5f; /* flat: the random models are sharp */
            gp.sampler.top_k = 0;
            gp.sampler.top_p = 1.0f;
            gp.sampler.min_p = 0.0f;
            gp.sampler.seed = seed;
            tela_spec_params sp = tela_spec_default_params();
            sp.method = draft ? TELA_SPEC_DRAFT : TELA_SPEC_NGRAM;
            sp.draft_max = 4;
            sp.ngram_min = 1;
            sp.draft = d;
            gp.spec = &sp;
            int32_t out[40];
            tela_generate_result r;
            CHECK_OK(tela_generate(s, prompt, 16, &gp, out, 40, &r));
            const int partial = r.n_accepted > 0 && r.n_accepted < r.n_drafted;
            partial_runs += partial;
            runs++;
            CHECK_EQ_INT(tela_session_n_past(s), 16 + 39);
            CHECK_OK(tela_session_eval(s, &out[39], 1, a, 0));
            memcpy(all, prompt, sizeof prompt);
            memcpy(all + 16, out, sizeof out);
            tela_session *f = new_session(m, 128);
            CHECK_OK(tela_session_eval(f, all, 56, b, 0));
            double worst = 0, mx = -INFINITY, mn = INFINITY;
            for (int32_t i = 0; i < V; i++) {
                const double e = fabs((double)a[i] - b[i]);
                if (e > worst) worst = e;
                if (b[i] > mx) mx = b[i];
                if (b[i] < mn) mn = b[i];
            }
            const double tol = tela_session_has_recurrent(s) ? 1e-4 * (mx - mn) : 0.0;
            CHECK_MSG(worst <= tol, "%s (%s route, seed %d): the state after generation differs from a plain "
                                    "evaluation by %g", label, route ? "replay" : "kept-state", (int)seed, worst);
            tela_session_free(f);
            tela_session_free(d);
            tela_session_free(s);
        }
        if (route) unsetenv("TELA_SPEC_REPLAY");
    }
    printf("%s: %d of %d sampled runs had both acceptances and rejections; states consistent\n", label,
           partial_runs, runs);
    CHECK(partial_runs > 0);
    free(a);
    free(b);
}

#include "test_spec_stats.h" /* the sampling statistics, over new_session above */

static void test_sampling(tela_model *lg, tela_model *lq8, tela_model *qa, tela_model *hyb) {
    tela_sampler_params sp = tela_sampler_default_params();
    sp.temperature = 1.0f;
    sp.top_k = 6;
    sp.top_p = 0.97f;
    sp.min_p = 0.02f;
    sp.repeat_penalty = 1.1f;
    const tela_logit_bias bias[] = {{3, 1.5f}};
    sp.logit_bias = bias;
    sp.n_logit_bias = 1;
    int32_t prompt[64];
    const int np = make_prompt(lg, prompt, 77);
    static double marg[SAMPLED_POS][SAMPLED_V], wrong[SAMPLED_POS][SAMPLED_V];
    exact_marginals(lg, &sp, prompt, np, marg);
    exact_marginals(qa, &sp, prompt, np, wrong);
    const int n = TEST_QUICK ? 300 : 3000;
    sample_test("sampling, prompt lookup", lg, NULL, TELA_SPEC_NGRAM, &sp, prompt, np, n, marg, NULL);
    sample_test("sampling, draft llama-gqa-q8_0", lg, lq8, TELA_SPEC_DRAFT, &sp, prompt, np, n, marg, NULL);
    sample_test("sampling, draft qwen35-asym", lg, qa, TELA_SPEC_DRAFT, &sp, prompt, np, n, marg, wrong);
    /* the MTP block of the hybrid demo, after a KJV prompt */
    size_t nh = 0;
    const char *text = "And the LORD spake unto Moses, saying, Speak unto the children of Israel";
    CHECK_OK(tela_tokenize(hyb, text, strlen(text), 1, 0, prompt, 64, &nh));
    exact_marginals(hyb, &sp, prompt, (int)nh, marg);
    sample_test("sampling, MTP of the hybrid demo", hyb, NULL, TELA_SPEC_MTP, &sp, prompt, (int)nh, n, marg, NULL);
}

/* --------------------------------------------------------------- errors */

static void no_hook(void *user, float *logits, int32_t n_vocab, uint64_t step) {
    (void)user;
    (void)logits;
    (void)n_vocab;
    (void)step;
    test_failed_++; /* never called: the combination is refused first */
}

static void test_errors(tela_model *lg, tela_model *kjv, tela_model *kjv_q8) {
    CHECK(tela_spec_check_draft(lg, kjv) == TELA_ERR_ARG);
    CHECK(strstr(tela_last_error(), "4096") && strstr(tela_last_error(), "512"));
    CHECK(tela_spec_check_draft(kjv, kjv_q8) == TELA_OK);
    CHECK(tela_spec_check_draft(NULL, kjv) == TELA_ERR_ARG);
    tela_session *s = new_session(lg, 128), *dk = new_session(kjv, 128), *short_d = new_session(lg, 64);
    int32_t prompt[8] = {1, 2, 3, 1, 2, 3, 1, 2};
    int32_t out[16];
    tela_generate_result r;
    tela_generate_params gp = tela_generate_default_params();
    gp.max_tokens = 8;
    gp.sampler.temperature = 0;
    tela_spec_params sp = tela_spec_default_params();
    gp.spec = &sp;
    sp.method = TELA_SPEC_DRAFT;
    sp.draft = dk;
    CHECK(tela_generate(s, prompt, 8, &gp, out, 16, &r) == TELA_ERR_ARG);
    CHECK(strstr(tela_last_error(), "vocabulary") != NULL);
    CHECK_EQ_INT(tela_session_n_past(s), 0); /* nothing evaluated */
    sp.draft = NULL;
    CHECK(tela_generate(s, prompt, 8, &gp, out, 16, &r) == TELA_ERR_ARG);
    sp.draft = s;
    CHECK(tela_generate(s, prompt, 8, &gp, out, 16, &r) == TELA_ERR_ARG);
    sp.draft = short_d;
    CHECK(tela_generate(s, prompt, 8, &gp, out, 16, &r) == TELA_ERR_ARG);
    CHECK(strstr(tela_last_error(), "context") != NULL);
    sp = tela_spec_default_params();
    sp.method = TELA_SPEC_NGRAM;
    const int32_t bad_k[] = {-1, TELA_SPEC_MAX_DRAFT + 1, 1000};
    for (int i = 0; i < 3; i++) {
        sp.draft_max = bad_k[i];
        CHECK(tela_generate(s, prompt, 8, &gp, out, 16, &r) == TELA_ERR_ARG);
        CHECK(strstr(tela_last_error(), "draft_max") != NULL);
    }
    sp.draft_max = 2;
    sp.ngram_min = 5;
    sp.ngram_max = 3;
    CHECK(tela_generate(s, prompt, 8, &gp, out, 16, &r) == TELA_ERR_ARG);
    sp.ngram_min = 1;
    sp.ngram_max = 65;
    CHECK(tela_generate(s, prompt, 8, &gp, out, 16, &r) == TELA_ERR_ARG);
    sp.ngram_max = 3;
    sp.method = (tela_spec_method)7;
    CHECK(tela_generate(s, prompt, 8, &gp, out, 16, &r) == TELA_ERR_ARG);
    sp.method = TELA_SPEC_NGRAM;
    gp.logits_hook = no_hook;
    CHECK(tela_generate(s, prompt, 8, &gp, out, 16, &r) == TELA_ERR_UNSUPPORTED);
    gp.logits_hook = NULL;
    CHECK_EQ_INT(tela_session_n_past(s), 0);
    /* and a good one, near the end of the context: drafts are cut to fit */
    tela_session_free(short_d);
    short_d = new_session(lg, 12);
    gp.max_tokens = 0;
    sp.draft_max = 15;
    CHECK_OK(tela_generate(short_d, prompt, 8, &gp, out, 16, &r));
    CHECK(r.stop_reason == TELA_STOP_CONTEXT && r.n_generated == 5);
    tela_session_free(short_d);
    tela_session_free(dk);
    tela_session_free(s);
}

/* A copy of the KJV Q8_0 file with one token's text changed (same length):
 * the check names that token. */
static void test_token_text_mismatch(tela_model *kjv) {
    char path[1400], out_path[] = "/tmp/tela-test-spec-XXXXXX";
    snprintf(path, sizeof path, "%s/models/tela-kjv-q8_0.gguf", src_dir);
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    const bool ok = buf && fread(buf, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    if (!ok) {
        free(buf);
        return;
    }
    /* the token text "Egypt" (as a GGUF string: its 8-byte length, then the bytes) */
    const char *word = "\xc4\xa0" "Egypt";
    const size_t wl = strlen(word);
    long at = -1;
    for (long i = 8; i + (long)wl < n; i++)
        if (buf[i - 8] == wl && !buf[i - 7] && !memcmp(buf + i, word, wl)) {
            at = i;
            break;
        }
    CHECK(at > 0);
    if (at > 0) {
        buf[at + wl - 1] = 'q'; /* "Egypq" */
        int fd = mkstemp(out_path);
        FILE *o = fd >= 0 ? fdopen(fd, "wb") : NULL;
        CHECK(o != NULL);
        if (o) {
            fwrite(buf, 1, (size_t)n, o);
            fclose(o);
            tela_model *bad = NULL;
            tela_model_params mp = tela_model_default_params();
            mp.device = "cpu";
            if (tela_model_load(out_path, &mp, &bad) == TELA_OK) {
                CHECK(tela_spec_check_draft(kjv, bad) == TELA_ERR_ARG);
                CHECK_MSG(strstr(tela_last_error(), "Egypq") != NULL, "%s", tela_last_error());
                tela_model_free(bad);
            } else {
                printf("the altered vocabulary does not load (%s): the token-text check is not exercised\n",
                       tela_last_error());
            }
            remove(out_path);
        }
    }
    free(buf);
}

int main(void) {
    const char *src = getenv("TELA_SOURCE_DIR");
    if (!src) test_skip("TELA_SOURCE_DIR is not set");
    snprintf(src_dir, sizeof src_dir, "%s", src);
    tela_model *lg = load("tests/fixtures/llama/llama-gqa-f32.gguf");
    tela_model *lq8 = load("tests/fixtures/llama/llama-gqa-q8_0.gguf");
    tela_model *lt = load("tests/fixtures/llama/llama-tied-f16.gguf");
    tela_model *qs = load("tests/fixtures/qwen35/qwen35-sym-f32.gguf");
    tela_model *qa = load("tests/fixtures/qwen35/qwen35-asym-f16.gguf");
    tela_model *kf = load("models/tela-kjv-f16.gguf");
    tela_model *kq = load("models/tela-kjv-q8_0.gguf");
    if (!lg || !lq8 || !lt || !qs || !qa || !kf || !kq) return test_finish();

    double t = now();
    test_truncate(lg, "llama-gqa");
    test_truncate(qs, "qwen35-sym");
    test_greedy_fixtures(lg, lq8, lt, qs, qa);
    printf("[greedy on the fixtures: %.2f s]\n", now() - t);
    t = now();
    test_greedy_kjv(kf, kq);
    printf("[greedy on the KJV model: %.2f s]\n", now() - t);
    t = now();
    test_rollback_all_rejected(lg, lt, qs, qa);
    tela_model *qs16 = load("tests/fixtures/qwen35/qwen35-sym-f16.gguf");
    tela_model *qa32 = load("tests/fixtures/qwen35/qwen35-asym-f32.gguf");
    if (qs16 && qa32) {
        test_state_after_sampling(qs, qa32, "qwen35-sym <- qwen35-asym-f32, sampled");
        if (!TEST_QUICK) test_state_after_sampling(qa, qs16, "qwen35-asym <- qwen35-sym-f16, sampled");
        if (!TEST_QUICK) test_state_after_sampling(lg, lq8, "llama-gqa <- llama-gqa-q8_0, sampled");
    }
    tela_model_free(qs16);
    tela_model_free(qa32);
    tela_model *hyb = load_mtp("models/tela-kjv-qwen35-f16.gguf");
    if (hyb) test_sampling(lg, lq8, qa, hyb);
    tela_model_free(hyb);
    printf("[rollback and sampling: %.2f s]\n", now() - t);
    test_errors(lg, kf, kq);
    test_token_text_mismatch(kf);

    tela_model_free(lg);
    tela_model_free(lq8);
    tela_model_free(lt);
    tela_model_free(qs);
    tela_model_free(qa);
    tela_model_free(kf);
    tela_model_free(kq);
    return test_finish();
}
