/* test_engine.c: the batching engine against tela_generate on a session
 * (the reference: the same prompt, sampler and seed must give the same
 * tokens and text, since the engine samples at the same step indices):
 *  - one request alone, greedy and sampled, with stop strings;
 *  - eight at once with different prompts and seeds (batched steps,
 *    chunked prompts, decodes mixed in), with and without the prefix
 *    cache: each equals its own tela_generate run;
 *  - a KV pool too small for all of them: preemptions happen, outputs
 *    unchanged;
 *  - the prefix cache: a second prompt sharing 200 tokens reuses exactly
 *    200 (Llama); on Qwen3.5 a branch resumes from the last checkpoint
 *    within the shared part and its first token's log-probabilities match
 *    a session's to 1e-4, and the same prompt again reuses everything
 *    (end-of-prompt checkpoint with logits) with identical tokens;
 *  - log-probabilities against a log-softmax of a session's logits;
 *  - cancel (by call and by callback), errors (prompt too long, bad ids,
 *    queue full), and no blocks held at the end;
 *  - speculative decoding inside the batched steps, by prompt lookup and
 *    (the Qwen3.5 demo) its MTP block: six requests, greedy and sampled,
 *    k = 1..4, four at a time: each equals tela_generate with the same
 *    drafter and seed, greedy ones also plain greedy decoding (with the
 *    same log-probabilities, bit for bit), with drafts accepted and
 *    rejected (rolled back) on the demo models, and on Qwen3.5 the
 *    recurrent state rewound per sequence; again with a KV pool too small
 *    for four sequences (preemptions under way; greedy outputs compared);
 *  - predicted outputs (lookup_tokens): drafted from, output unchanged. */
#include "tela/tela.h"
#include "test.h"

#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#define MAX_OUT 512

typedef struct result {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int32_t tokens[MAX_OUT];
    int n;
    char text[8192];
    size_t text_len;
    float logprob[MAX_OUT];
    tela_top_logprob top[MAX_OUT][4];
    int n_top[MAX_OUT];
    tela_stop_reason reason;
    tela_status status;
    tela_request_usage usage;
    int cancel_after;   /* > 0: the callback asks to stop after this many tokens */
} result;

static void result_init(result *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
}

static int on_event(void *user, const tela_engine_event *ev) {
    result *r = user;
    pthread_mutex_lock(&r->mu);
    int stop = 0;
    if (ev->kind == TELA_EVENT_TOKEN) {
        if (r->n < MAX_OUT) {
            r->logprob[r->n] = ev->logprob;
            r->n_top[r->n] = ev->n_top < 4 ? ev->n_top : 4;
            for (int i = 0; i < r->n_top[r->n]; i++) r->top[r->n][i] = ev->top[i];
            r->tokens[r->n++] = ev->token;
        }
        if (r->text_len + ev->text_len < sizeof r->text) {
            memcpy(r->text + r->text_len, ev->text, ev->text_len);
            r->text_len += ev->text_len;
        }
        stop = r->cancel_after > 0 && r->n >= r->cancel_after;
    } else {
        r->done = true;
        r->reason = ev->stop_reason;
        r->status = ev->status;
        r->usage = ev->usage;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return stop;
}

static void result_wait(result *r) {
    pthread_mutex_lock(&r->mu);
    while (!r->done) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

static tela_request_params req_params(result *r, int max_tokens, float temp, uint64_t seed) {
    tela_request_params p = tela_request_default_params();
    p.max_tokens = max_tokens;
    p.sampler.temperature = temp;
    p.sampler.seed = seed;
    p.callback = on_event;
    p.user = r;
    return p;
}

/* The reference: tela_generate on a fresh session with the same settings. */
typedef struct reference {
    int32_t tokens[MAX_OUT];
    int n;
    char text[8192];
    size_t text_len;
    tela_stop_reason reason;
} reference;

static int ref_on_token(void *user, int32_t tok, const char *piece, size_t len) {
    (void)tok;
    reference *r = user;
    if (r->text_len + len < sizeof r->text) {
        memcpy(r->text + r->text_len, piece, len);
        r->text_len += len;
    }
    return 0;
}

/* The draft model the engines of check_spec are started with (NULL: none). */
static tela_model *g_draft;

static void reference_run(tela_model *m, const int32_t *prompt, int n, const tela_request_params *p, reference *out,
                          int n_ctx) {
    memset(out, 0, sizeof *out);
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = 2;
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    if (!s) return;
    tela_generate_params g = tela_generate_default_params();
    g.max_tokens = p->max_tokens;
    g.sampler = p->sampler;
    g.stop_strings = p->stop_strings;
    g.on_token = ref_on_token;
    g.user = out;
    g.spec = p->spec;
    tela_spec_params with_draft;
    tela_session *ds = NULL; /* a draft model's fresh session, as the engine's draft starts from nothing */
    if (p->spec && p->spec->method == TELA_SPEC_DRAFT && g_draft) {
        CHECK_OK(tela_session_create(g_draft, &sp, &ds));
        with_draft = *p->spec;
        with_draft.draft = ds;
        g.spec = &with_draft;
    }
    tela_generate_result res;
    CHECK_OK(tela_generate(s, prompt, n, &g, out->tokens, MAX_OUT, &res));
    out->n = res.n_generated < MAX_OUT ? res.n_generated : MAX_OUT;
    out->reason = res.stop_reason;
    tela_session_free(ds);
    tela_session_free(s);
}

static void check_same(const result *r, const reference *ref, const char *label) {
    CHECK_MSG(r->status == TELA_OK, "%s: status %d", label, (int)r->status);
    CHECK_MSG(r->n == ref->n, "%s: %d tokens, the reference %d", label, r->n, ref->n);
    int first = -1;
    for (int i = 0; i < r->n && i < ref->n; i++)
        if (r->tokens[i] != ref->tokens[i]) {
            first = i;
            break;
        }
    CHECK_MSG(first < 0, "%s: token %d differs (%d vs %d)", label, first, first >= 0 ? r->tokens[first] : 0,
              first >= 0 ? ref->tokens[first] : 0);
    CHECK_MSG(r->text_len == ref->text_len && !memcmp(r->text, ref->text, r->text_len), "%s: text differs", label);
    CHECK_MSG(r->reason == ref->reason, "%s: stop reason %d vs %d", label, (int)r->reason, (int)ref->reason);
}

static void random_prompt(int32_t *p, int n, int V, uint64_t seed) {
    test_rng_seed(seed);
    for (int i = 0; i < n; i++) p[i] = (int32_t)(test_rnd() % (uint64_t)V);
}

static tela_engine *new_engine(tela_model *m, int n_parallel, int32_t kv_tokens, int prefix_cache, int n_ctx) {
    tela_engine_params ep = tela_engine_default_params();
    ep.n_ctx = n_ctx;
    ep.n_parallel = n_parallel;
    ep.kv_tokens = kv_tokens;
    ep.prefix_cache = prefix_cache;
    ep.n_threads = 2;
    ep.checkpoint_interval = 128;
    ep.draft_model = g_draft;
    tela_engine *e = NULL;
    CHECK_OK(tela_engine_create(m, &ep, &e));
    return e;
}

static void check_idle(tela_engine *e, const char *label) {
    tela_engine_stats st;
    for (int i = 0; i < 200; i++) { /* the scheduler publishes after its step */
        tela_engine_get_stats(e, &st);
        if (st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0) break;
        usleep(5000);
    }
    CHECK_MSG(st.running == 0 && st.waiting == 0, "%s: %d running, %d waiting", label, st.running, st.waiting);
    CHECK_MSG(st.kv_blocks_used == 0, "%s: %d KV blocks still held", label, st.kv_blocks_used);
}

/* Eight requests at once (different prompts, lengths, seeds, sampling or
 * greedy), each against its own reference. */
static void check_concurrent(tela_model *m, tela_engine *e, int V, int n_ctx, const char *label) {
    enum { N = 8 };
    static result res[N];
    reference ref;
    int32_t prompts[N][300];
    int lens[N];
    tela_request_params ps[N];
    for (int i = 0; i < N; i++) {
        lens[i] = 5 + 37 * i; /* 5 .. 264: some prompts take several chunks */
        random_prompt(prompts[i], lens[i], V, 100 + (uint64_t)i);
        result_init(&res[i]);
        ps[i] = req_params(&res[i], 24 + 3 * i, i % 3 == 0 ? 0.0f : 0.9f, 7 + (uint64_t)i);
        CHECK_OK(tela_engine_submit(e, prompts[i], lens[i], &ps[i], NULL));
    }
    for (int i = 0; i < N; i++) {
        result_wait(&res[i]);
        reference_run(m, prompts[i], lens[i], &ps[i], &ref, n_ctx);
        char lb[128];
        snprintf(lb, sizeof lb, "%s: concurrent request %d", label, i);
        check_same(&res[i], &ref, lb);
    }
    check_idle(e, label);
}

static void check_long_prefix(tela_model *m, int hybrid, const char *label);

/* Speculative decoding by prompt lookup in the engine (see the top). */
static void check_spec(tela_model *m, tela_spec_method method, const int32_t *prompt, int np, int n_ctx,
                       int32_t kv_tokens, const char *label) {
    enum { N = 6 };
    tela_engine *e = new_engine(m, 4, kv_tokens, 1, n_ctx);
    if (!e) return;
    static result res[N], plain;
    reference ref;
    tela_spec_params sp[N];
    tela_request_params ps[N];
    for (int i = 0; i < N; i++) {
        sp[i] = tela_spec_default_params();
        sp[i].method = method;
        sp[i].draft_max = 1 + i % 4;
        sp[i].ngram_min = i == 5 ? 1 : 0;
        result_init(&res[i]);
        ps[i] = req_params(&res[i], 48 + 4 * i, i % 2 ? 0.9f : 0.0f, 11 + (uint64_t)i);
        ps[i].ignore_eos = 1;
        ps[i].top_logprobs = i == 0 ? 2 : -1;
        ps[i].spec = &sp[i];
        CHECK_OK(tela_engine_submit(e, prompt, np - i, &ps[i], NULL)); /* prompts of np .. np-5 tokens */
    }
    long drafted = 0, accepted = 0;
    for (int i = 0; i < N; i++) {
        char lb[160];
        result_wait(&res[i]);
        reference_run(m, prompt, np - i, &ps[i], &ref, n_ctx);
        snprintf(lb, sizeof lb, "%s: request %d (k = %d, %s) against tela_generate with the same drafter", label, i,
                 sp[i].draft_max, i % 2 ? "sampled" : "greedy");
        /* (with a small pool a sequence drafts fewer tokens when blocks run
         * short, and a set-back hybrid recomputes in other chunks: sampled
         * draws then differ from tela_generate's, though not their
         * distribution; greedy output stays plain greedy's) */
        if (kv_tokens == 0 || i % 2 == 0) check_same(&res[i], &ref, lb);
        else CHECK_MSG(res[i].status == TELA_OK && res[i].n == ps[i].max_tokens, "%s: %d tokens", lb, res[i].n);
        if (i % 2 == 0) { /* greedy: plain greedy's tokens */
            tela_request_params q = ps[i];
            q.spec = NULL;
            reference_run(m, prompt, np - i, &q, &ref, n_ctx);
            snprintf(lb, sizeof lb, "%s: request %d (k = %d, greedy) against plain greedy", label, i, sp[i].draft_max);
            check_same(&res[i], &ref, lb);
        }
        CHECK(res[i].usage.accepted_tokens <= res[i].usage.draft_tokens);
        drafted += res[i].usage.draft_tokens;
        accepted += res[i].usage.accepted_tokens;
    }
    /* the log-probabilities of request 0 are those of plain decoding */
    result_init(&plain);
    tela_request_params q = ps[0];
    q.spec = NULL;
    q.user = &plain;
    CHECK_OK(tela_engine_submit(e, prompt, np, &q, NULL));
    result_wait(&plain);
    CHECK_EQ_INT(plain.n, res[0].n);
    int same_lp = 1;
    for (int t = 0; t < plain.n && t < res[0].n; t++)
        same_lp &= plain.logprob[t] == res[0].logprob[t] && plain.n_top[t] == res[0].n_top[t] &&
                   plain.top[t][1].token == res[0].top[t][1].token && plain.top[t][1].logprob == res[0].top[t][1].logprob;
    CHECK_MSG(same_lp, "%s: log-probabilities with speculation differ from plain decoding's", label);
    CHECK_MSG(plain.usage.draft_tokens == 0, "%s: a request without speculation drafted", label);
    CHECK_MSG(drafted > 0 && accepted > 0 && accepted < drafted,
              "%s: %ld drafts, %ld accepted: expected both acceptances and rejections", label, drafted, accepted);
    check_idle(e, label);
    tela_engine_stats st;
    tela_engine_get_stats(e, &st);
    if (kv_tokens > 0) /* a pool too small for four sequences: some were set back, drafts and all */
        CHECK_MSG(st.preemptions > 0, "%s: no preemption with a KV pool of %d positions", label, kv_tokens);
    CHECK_MSG(st.draft_tokens == (uint64_t)drafted && st.accepted_tokens == (uint64_t)accepted,
              "%s: the engine counts %llu drafts, %llu accepted; the requests %ld, %ld", label,
              (unsigned long long)st.draft_tokens, (unsigned long long)st.accepted_tokens, drafted, accepted);
    printf("%s: speculative decoding in the engine: %ld of %ld drafts accepted, %s outputs as tela_generate's\n",
           label, accepted, drafted, kv_tokens ? "greedy" : "all");
    /* what the engine does not draft with */
    tela_spec_params bad = tela_spec_default_params();
    bad.method = TELA_SPEC_DRAFT;
    q.spec = &bad;
    if (!g_draft) CHECK(tela_engine_submit(e, prompt, np, &q, NULL) == TELA_ERR_UNSUPPORTED);
    bad.method = TELA_SPEC_MTP;
    if (tela_model_get_info(m)->n_mtp_layers == 0)
        CHECK(tela_engine_submit(e, prompt, np, &q, NULL) == TELA_ERR_UNSUPPORTED);
    bad.method = TELA_SPEC_NGRAM;
    bad.draft_max = TELA_SPEC_MAX_DRAFT + 1;
    CHECK(tela_engine_submit(e, prompt, np, &q, NULL) == TELA_ERR_ARG);
    tela_engine_free(e);
}

/* Predicted outputs (tela_request_params.lookup_tokens): the plain greedy
 * reply given as the prediction is drafted from (most of it accepted), the
 * output unchanged; a prediction of other tokens changes nothing either;
 * ids outside the vocabulary are refused. */
static void check_lookup(tela_model *m, const int32_t *prompt, int np, const char *label) {
    tela_engine *e = new_engine(m, 2, 0, 1, 512);
    if (!e) return;
    static result plain, pred, other;
    result_init(&plain);
    tela_request_params p = req_params(&plain, 40, 0.0f, 1);
    p.ignore_eos = 1;
    CHECK_OK(tela_engine_submit(e, prompt, np, &p, NULL));
    result_wait(&plain);
    result_init(&pred);
    p.user = &pred;
    p.lookup_tokens = plain.tokens;
    p.n_lookup_tokens = plain.n;
    CHECK_OK(tela_engine_submit(e, prompt, np, &p, NULL));
    result_wait(&pred);
    CHECK_MSG(pred.n == plain.n && !memcmp(pred.tokens, plain.tokens, sizeof(int32_t) * (size_t)plain.n),
              "%s: a prediction changed the greedy output", label);
    CHECK_MSG(pred.usage.accepted_tokens >= plain.n / 2, "%s: %d of %d predicted drafts accepted", label,
              pred.usage.accepted_tokens, pred.usage.draft_tokens);
    int32_t junk[8];
    for (int i = 0; i < 8; i++) junk[i] = (plain.tokens[0] + 1 + i) % tela_model_get_info(m)->n_vocab;
    result_init(&other);
    p.user = &other;
    p.lookup_tokens = junk;
    p.n_lookup_tokens = 8;
    CHECK_OK(tela_engine_submit(e, prompt, np, &p, NULL));
    result_wait(&other);
    CHECK_MSG(other.n == plain.n && !memcmp(other.tokens, plain.tokens, sizeof(int32_t) * (size_t)plain.n),
              "%s: an unrelated prediction changed the greedy output", label);
    junk[3] = -1;
    CHECK(tela_engine_submit(e, prompt, np, &p, NULL) == TELA_ERR_ARG);
    printf("%s: a prediction of the reply: %d of %d drafts accepted, output unchanged\n", label,
           pred.usage.accepted_tokens, pred.usage.draft_tokens);
    check_idle(e, label);
    tela_engine_free(e);
}

/* A prompt whose text repeats (the demo models): prompt lookup finds it. */
static int repeated_prompt(tela_model *m, int32_t *out, int cap) {
    const char *verse = "And God said, Let there be light: and there was light. And God saw the light, that it was "
                        "good: and God divided the light from the darkness. ";
    char text[1024];
    snprintf(text, sizeof text, "%s%s%s", verse, verse, "And God said,");
    size_t n = 0;
    CHECK_OK(tela_tokenize(m, text, strlen(text), 1, 0, out, (size_t)cap, &n));
    return (int)n;
}

static void test_llama(const char *path) {
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = 2;
    tela_model *m = NULL;
    CHECK_OK(tela_model_load(path, &mp, &m));
    if (!m) return;
    const int V = tela_model_get_info(m)->n_vocab, CTX = 512;
    tela_engine *e = new_engine(m, 4, 0, 1, CTX);
    if (!e) return;
    CHECK_EQ_INT(tela_engine_n_ctx(e), CTX);

    /* one request, greedy with stop strings, then sampled */
    int32_t prompt[600];
    size_t n_prompt = 0;
    CHECK_OK(tela_tokenize(m, "And God said, Let there be light", 32, 1, 0, prompt, 600, &n_prompt));
    const char *stops[] = {"and", "waters", NULL};
    result r;
    reference ref;
    for (int k = 0; k < 2; k++) {
        result_init(&r);
        tela_request_params p = req_params(&r, 60, k ? 0.8f : 0.0f, 42);
        p.stop_strings = stops;
        CHECK_OK(tela_engine_submit(e, prompt, (int32_t)n_prompt, &p, NULL));
        result_wait(&r);
        reference_run(m, prompt, (int)n_prompt, &p, &ref, CTX);
        check_same(&r, &ref, k ? "llama: sampled alone" : "llama: greedy alone");
        CHECK(r.usage.prompt_tokens == (int32_t)n_prompt && r.usage.generated_tokens == r.n);
    }
    CHECK_MSG(r.text_len > 0, "llama: no text");

    /* log-probabilities: the first token's against a session's logits */
    {
        result_init(&r);
        tela_request_params p = req_params(&r, 1, 0.0f, 1);
        p.top_logprobs = 3;
        CHECK_OK(tela_engine_submit(e, prompt, (int32_t)n_prompt, &p, NULL));
        result_wait(&r);
        tela_session *s = NULL;
        CHECK_OK(tela_session_create(m, NULL, &s));
        float *lg = malloc(sizeof(float) * (size_t)V);
        CHECK_OK(tela_session_eval(s, prompt, (int32_t)n_prompt, lg, 0));
        double mx = -1e30, sum = 0;
        int best = 0;
        for (int i = 0; i < V; i++)
            if (lg[i] > mx) mx = lg[best = i];
        for (int i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
        const double lse = mx + log(sum);
        CHECK_EQ_INT(r.tokens[0], best);
        CHECK_NEAR(r.logprob[0], lg[best] - lse, 1e-5);
        CHECK_EQ_INT(r.n_top[0], 3);
        CHECK_EQ_INT(r.top[0][0].token, best);
        CHECK_NEAR(r.top[0][0].logprob, r.logprob[0], 1e-6);
        CHECK(r.top[0][1].logprob <= r.top[0][0].logprob && r.top[0][2].logprob <= r.top[0][1].logprob);
        CHECK_NEAR(r.top[0][1].logprob, lg[r.top[0][1].token] - lse, 1e-5);
        free(lg);
        tela_session_free(s);
    }

    check_concurrent(m, e, V, CTX, "llama, prefix cache");

    /* the prefix cache: 300 tokens, then 200 of them and a new tail */
    {
        int32_t a[300], b[260];
        random_prompt(a, 300, V, 555);
        memcpy(b, a, 200 * sizeof *b);
        random_prompt(b + 200, 60, V, 556);
        result_init(&r);
        tela_request_params p = req_params(&r, 4, 0.0f, 1);
        CHECK_OK(tela_engine_submit(e, a, 300, &p, NULL));
        result_wait(&r);
        result_init(&r);
        CHECK_OK(tela_engine_submit(e, b, 260, &p, NULL));
        result_wait(&r);
        CHECK_EQ_INT(r.usage.cached_tokens, 200);
        reference_run(m, b, 260, &p, &ref, CTX);
        check_same(&r, &ref, "llama: after a shared prefix");
        /* the same prompt again: everything but the last token */
        result_init(&r);
        CHECK_OK(tela_engine_submit(e, b, 260, &p, NULL));
        result_wait(&r);
        CHECK_EQ_INT(r.usage.cached_tokens, 259);
        check_same(&r, &ref, "llama: the same prompt again");
    }

    /* cancel by call and by callback */
    {
        result_init(&r);
        tela_request_params p = req_params(&r, 400, 0.8f, 3);
        uint64_t id = 0;
        CHECK_OK(tela_engine_submit(e, prompt, (int32_t)n_prompt, &p, &id));
        CHECK(id != 0);
        tela_engine_cancel(e, id);
        result_wait(&r);
        CHECK_EQ_INT(r.reason, TELA_STOP_CANCELLED);
        CHECK(r.n < 400);
        result_init(&r);
        r.cancel_after = 3;
        CHECK_OK(tela_engine_submit(e, prompt, (int32_t)n_prompt, &p, NULL));
        result_wait(&r);
        CHECK_EQ_INT(r.reason, TELA_STOP_CANCELLED);
        CHECK_EQ_INT(r.n, 3);
        tela_engine_cancel(e, 987654); /* unknown: ignored */
    }

    /* errors */
    {
        int32_t *big = calloc(CTX + 1, sizeof *big);
        tela_request_params p = req_params(&r, 4, 0.0f, 1);
        CHECK(tela_engine_submit(e, big, CTX + 1, &p, NULL) == TELA_ERR_CONTEXT);
        CHECK_MSG(strstr(tela_last_error(), "513") && strstr(tela_last_error(), "512"), "message: %s",
                  tela_last_error());
        big[3] = V;
        CHECK(tela_engine_submit(e, big, 10, &p, NULL) == TELA_ERR_ARG);
        CHECK(tela_engine_submit(e, big, 0, &p, NULL) == TELA_ERR_ARG);
        p.top_logprobs = 21;
        CHECK(tela_engine_submit(e, prompt, 3, &p, NULL) == TELA_ERR_ARG);
        free(big);
    }
    check_idle(e, "llama");
    tela_engine_stats st;
    tela_engine_get_stats(e, &st);
    CHECK(st.prefix_hits >= 2 && st.cached_tokens >= 459);
    CHECK(st.requests_cancelled >= 2 && st.steps > 0);
    printf("llama: %llu requests, %llu steps, %llu prompt tokens of which %llu cached, %llu generated\n",
           (unsigned long long)st.requests_finished, (unsigned long long)st.steps,
           (unsigned long long)st.prompt_tokens, (unsigned long long)st.cached_tokens,
           (unsigned long long)st.generated_tokens);
    tela_engine_free(e);

    /* without the prefix cache */
    e = new_engine(m, 8, 0, 0, CTX);
    if (e) {
        check_concurrent(m, e, V, CTX, "llama, no prefix cache");
        tela_engine_free(e);
    }

    /* a pool too small for everyone: 8 sequences, 1.2 contexts of KV */
    e = new_engine(m, 8, 360, 1, 300);
    if (e) {
        check_concurrent(m, e, V, 300, "llama, small KV pool");
        tela_engine_get_stats(e, &st);
        CHECK_MSG(st.preemptions > 0, "no preemption with a small pool");
        printf("small pool: %llu preemptions, %llu steps\n", (unsigned long long)st.preemptions,
               (unsigned long long)st.steps);
        tela_engine_free(e);
    }

    /* a full queue */
    e = NULL;
    tela_engine_params ep = tela_engine_default_params();
    ep.n_parallel = 1;
    ep.max_waiting = 2;
    ep.n_threads = 2;
    CHECK_OK(tela_engine_create(m, &ep, &e));
    if (e) {
        static result q[8];
        int busy = 0;
        for (int i = 0; i < 8; i++) {
            result_init(&q[i]);
            tela_request_params p = req_params(&q[i], 200, 0.8f, (uint64_t)i);
            tela_status s = tela_engine_submit(e, prompt, (int32_t)n_prompt, &p, NULL);
            if (s == TELA_ERR_BUSY) {
                busy++;
                q[i].done = true;
            } else {
                CHECK_OK(s);
            }
        }
        CHECK_MSG(busy >= 4, "%d of 8 refused with a queue of 2", busy);
        tela_engine_free(e); /* cancels the rest: each gets its DONE */
        for (int i = 0; i < 8; i++) result_wait(&q[i]);
    }
    check_long_prefix(m, 0, "llama, issue sizes");
    int32_t rp[128];
    const int nrp = repeated_prompt(m, rp, 128);
    check_spec(m, TELA_SPEC_NGRAM, rp, nrp, CTX, 0, "llama demo");
    check_spec(m, TELA_SPEC_NGRAM, rp, nrp, 192, 192, "llama demo, a small KV pool");
    check_lookup(m, rp, 12, "llama demo");
    tela_model_free(m);
}

/* Qwen3.5: per-sequence recurrent state and checkpoints. */
static void test_qwen35(const char *path) {
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = 2;
    tela_model *m = NULL;
    CHECK_OK(tela_model_load(path, &mp, &m));
    if (!m) return;
    const int V = tela_model_get_info(m)->n_vocab, CTX = 640;
    tela_engine *e = new_engine(m, 8, 0, 0, CTX);
    if (e) {
        check_concurrent(m, e, V, CTX, "qwen35, no prefix cache");
        tela_engine_free(e);
    }
    e = new_engine(m, 4, 0, 1, CTX);
    if (!e) return;
    int32_t a[500], b[420];
    random_prompt(a, 500, V, 777);
    memcpy(b, a, 300 * sizeof *b);
    random_prompt(b + 300, 120, V, 778);
    result r;
    reference ref;
    tela_request_params p = req_params(&r, 6, 0.0f, 1);
    p.top_logprobs = 0;
    result_init(&r);
    CHECK_OK(tela_engine_submit(e, a, 500, &p, NULL));
    result_wait(&r);
    reference_run(m, a, 500, &p, &ref, CTX);
    check_same(&r, &ref, "qwen35: first request");
    /* a branch after 300 shared tokens resumes from the checkpoint at 256
     * (interval 128) */
    result_init(&r);
    CHECK_OK(tela_engine_submit(e, b, 420, &p, NULL));
    result_wait(&r);
    CHECK_EQ_INT(r.usage.cached_tokens, 256);
    {
        tela_session *s = NULL;
        CHECK_OK(tela_session_create(m, NULL, &s));
        float *lg = malloc(sizeof(float) * (size_t)V);
        CHECK_OK(tela_session_eval(s, b, 420, lg, 0));
        double mx = -1e30, sum = 0;
        for (int i = 0; i < V; i++)
            if (lg[i] > mx) mx = lg[i];
        for (int i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
        CHECK_NEAR(r.logprob[0], lg[r.tokens[0]] - (mx + log(sum)), 1e-4);
        free(lg);
        tela_session_free(s);
    }
    /* the same prompt as the first: every token reused, identical output */
    result_init(&r);
    CHECK_OK(tela_engine_submit(e, a, 500, &p, NULL));
    result_wait(&r);
    CHECK_EQ_INT(r.usage.cached_tokens, 500);
    check_same(&r, &ref, "qwen35: the same prompt again");
    check_idle(e, "qwen35");
    tela_engine_stats st;
    tela_engine_get_stats(e, &st);
    CHECK(st.checkpoints > 0 && st.checkpoint_bytes > 0);
    printf("qwen35: %llu checkpoints (%llu bytes), %llu prompt tokens of which %llu cached\n",
           (unsigned long long)st.checkpoints, (unsigned long long)st.checkpoint_bytes,
           (unsigned long long)st.prompt_tokens, (unsigned long long)st.cached_tokens);
    tela_engine_free(e);
    check_long_prefix(m, 1, "qwen35, issue sizes");
    tela_model_free(m);
}

/* At the sizes, default checkpoint interval (256): a second
 * request that extends a 2,000-token first one computes only its suffix;
 * on a hybrid model a branch after 1,000 shared tokens resumes from the
 * checkpoint at 768; with KV room for one context the prefix cache is
 * evicted by a different prompt and the answers stay right. */
static void check_long_prefix(tela_model *m, int hybrid, const char *label) {
    enum { A = 2000, B = 2100, C = 1200, CTX = 2304 };
    const int V = tela_model_get_info(m)->n_vocab;
    static int32_t a[A], b[B], c[C], d[A];
    random_prompt(a, A, V, 901);
    memcpy(b, a, sizeof a);
    random_prompt(b + A, B - A, V, 902);
    memcpy(c, a, 1000 * sizeof *c);
    random_prompt(c + 1000, C - 1000, V, 903);
    random_prompt(d, A, V, 904);
    for (int pass = 0; pass < 2; pass++) {
        tela_engine_params ep = tela_engine_default_params();
        ep.n_ctx = CTX;
        ep.n_parallel = 2;
        ep.kv_tokens = pass ? CTX : 0; /* pass 1: room for one context only */
        ep.n_threads = 2;
        tela_engine *e = NULL;
        CHECK_OK(tela_engine_create(m, &ep, &e));
        if (!e) return;
        result r;
        reference ref;
        tela_request_params p = req_params(&r, 3, 0.0f, 1);
        p.top_logprobs = 0;
        char lb[160];
        result_init(&r);
        CHECK_OK(tela_engine_submit(e, a, A, &p, NULL));
        result_wait(&r);
        if (pass == 1) { /* a different prompt of the same size evicts a's blocks */
            result_init(&r);
            CHECK_OK(tela_engine_submit(e, d, A, &p, NULL));
            result_wait(&r);
        }
        result_init(&r);
        CHECK_OK(tela_engine_submit(e, b, B, &p, NULL));
        result_wait(&r);
        if (pass == 0)
            CHECK_MSG(r.usage.cached_tokens == A, "%s: %d of %d prompt tokens cached, expected %d", label,
                      r.usage.cached_tokens, B, A);
        else
            CHECK_MSG(r.usage.cached_tokens < A, "%s: %d tokens cached after an eviction", label, r.usage.cached_tokens);
        reference_run(m, b, B, &p, &ref, CTX);
        snprintf(lb, sizeof lb, "%s: a 2,000-token prefix extended%s", label, pass ? ", after an eviction" : "");
        check_same(&r, &ref, lb);
        if (hybrid && pass == 0) {
            result_init(&r);
            CHECK_OK(tela_engine_submit(e, c, C, &p, NULL));
            result_wait(&r);
            CHECK_MSG(r.usage.cached_tokens == 768, "%s: a branch after 1,000 shared tokens: %d cached, expected 768",
                      label, r.usage.cached_tokens);
            reference_run(m, c, C, &p, &ref, CTX);
            snprintf(lb, sizeof lb, "%s: a branch after 1,000 shared tokens", label);
            check_same(&r, &ref, lb);
        }
        check_idle(e, label);
        tela_engine_free(e);
    }
}

/* What an engine with a draft model refuses: the model as its own draft, a
 * model of another vocabulary and a recurrent state (the hybrid fixture); without one, draft
 * requests. */
static void check_draft_refusals(tela_model *m) {
    tela_engine_params ep = tela_engine_default_params();
    tela_engine *e = NULL;
    ep.draft_model = m;
    CHECK(tela_engine_create(m, &ep, &e) == TELA_ERR_ARG && !e);
    const char *src = getenv("TELA_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/qwen35/qwen35-asym-f32.gguf", src ? src : ".");
    tela_model_params mp = tela_model_default_params();
    tela_model *other = NULL;
    if (access(path, R_OK) == 0 && tela_model_load(path, &mp, &other) == TELA_OK) {
        ep.draft_model = other;
        CHECK(tela_engine_create(m, &ep, &e) != TELA_OK && !e);
        tela_model_free(other);
    }
    ep.draft_model = NULL;
    ep.n_threads = 2;
    CHECK_OK(tela_engine_create(m, &ep, &e));
    if (e) {
        int32_t p[4] = {1, 2, 3, 4};
        tela_spec_params sp = tela_spec_default_params();
        sp.method = TELA_SPEC_DRAFT;
        tela_request_params rq = tela_request_default_params();
        rq.spec = &sp;
        CHECK(tela_engine_submit(e, p, 4, &rq, NULL) == TELA_ERR_UNSUPPORTED);
        tela_engine_free(e);
    }
}

int main(void) {
    const char *src = getenv("TELA_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tela-kjv-q8_0.gguf", src ? src : ".");
    if (access(path, R_OK) != 0) test_skip("the demo model is not there (TELA_SOURCE_DIR?)");
    test_llama(path);
    /* a draft model in the engine: the 8-bit demo drafting for the f16 one
     * (the same weights rounded, so most drafts are accepted, not all) */
    char fpath[1024];
    snprintf(fpath, sizeof fpath, "%s/models/tela-kjv-f16.gguf", src ? src : ".");
    tela_model_params dp = tela_model_default_params();
    dp.n_threads = 2;
    tela_model *draft = NULL, *kjv16 = NULL;
    CHECK_OK(tela_model_load(path, &dp, &draft));
    if (access(fpath, R_OK) == 0) CHECK_OK(tela_model_load(fpath, &dp, &kjv16));
    if (draft && kjv16) {
        int32_t rp[128];
        const int np = repeated_prompt(kjv16, rp, 128);
        g_draft = draft;
        check_spec(kjv16, TELA_SPEC_DRAFT, rp, np, 512, 0, "llama demo f16, draft model q8_0");
        check_spec(kjv16, TELA_SPEC_DRAFT, rp, np, 192, 192, "llama demo f16, draft model q8_0, a small KV pool");
        g_draft = NULL;
        check_draft_refusals(kjv16);
    }
    tela_model_free(kjv16);
    snprintf(path, sizeof path, "%s/tests/fixtures/qwen35/qwen35-asym-f32.gguf", src ? src : ".");
    if (access(path, R_OK) == 0) test_qwen35(path);
    snprintf(path, sizeof path, "%s/models/tela-kjv-qwen35-f16.gguf", src ? src : ".");
    if (access(path, R_OK) == 0) {
        tela_model_params mp = tela_model_default_params();
        mp.n_threads = 2;
        mp.load_mtp = 1;
        tela_model *m = NULL;
        CHECK_OK(tela_model_load(path, &mp, &m));
        if (m) {
            int32_t rp[128];
            const int np = repeated_prompt(m, rp, 128);
            check_spec(m, TELA_SPEC_NGRAM, rp, np, 512, 0, "qwen35 demo, prompt lookup");
            check_spec(m, TELA_SPEC_MTP, rp, np, 512, 0, "qwen35 demo, MTP");
            check_spec(m, TELA_SPEC_MTP, rp, np, 192, 192, "qwen35 demo, MTP, a small KV pool");
            check_lookup(m, rp, 12, "qwen35 demo");
            if (draft) { /* a hybrid verified, an attention-only model drafting */
                g_draft = draft;
                check_spec(m, TELA_SPEC_DRAFT, rp, np, 512, 0, "qwen35 demo, draft model kjv q8_0");
                g_draft = NULL;
                tela_engine_params ep = tela_engine_default_params(); /* and not the other way round */
                ep.draft_model = m;
                tela_engine *e = NULL;
                CHECK(tela_engine_create(draft, &ep, &e) == TELA_ERR_UNSUPPORTED && !e);
            }
            tela_model_free(m);
        }
        /* a rank per exec (tensor parallelism, "cpu,cpu"): the engine's
         * batched steps and MTP drafts against sessions of the same model */
        mp.device = "cpu,cpu";
        m = NULL;
        CHECK_OK(tela_model_load(path, &mp, &m));
        if (m) {
            int32_t rp[128];
            const int np = repeated_prompt(m, rp, 128);
            check_spec(m, TELA_SPEC_MTP, rp, np, 512, 0, "qwen35 demo, 2 ranks an exec each, MTP");
            tela_model_free(m);
        }
    }
    tela_model_free(draft);
    return test_finish();
}
