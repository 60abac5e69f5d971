/* test_chat_session.c: the multi-turn reuse logic of runtime/chat_session.
 *
 * Part 1 (always; tests/fixtures/llama and qwen35, random tiny models with
 * transformers reference logits): the prefix cache picks the right state
 * for a new prompt (live state, a restored snapshot, or nothing), counts
 * what it reuses correctly (the expected counts follow from how the token
 * sequences are built), needs logits to reuse a whole prompt, drops the
 * oldest snapshot, refuses prompts longer than the context; and what is
 * evaluated on top of a restored state gives transformers' logits (1e-4 of
 * the logit range, the fixtures' rule for F32 files). For the hybrid Qwen3.5
 * model this is the test that recurrent state is never "rewound" wrongly.
 *
 * Part 2 (when ../shared is there; llama-d1 and qwen35-d1 have the real
 * Llama 3 / Qwen3 tokenizers and templates): the rendered conversation is
 * exactly the template format written out by hand here, special tokens
 * become the tokenizers' known ids, BOS appears once, turn 2 reuses turn 1's
 * state and its greedy reply equals a from-scratch evaluation of the whole
 * rendered conversation through the public API, and a conversation that
 * outgrows the context fails cleanly and leaves the conversation as it was. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/chat_session.h"
#include "tela/tela.h"
#include "test.h"

static char *read_file(const char *path, size_t *len) {
    return test_read_file(path, len);
}

/* max |a - b| relative to the range of the reference row b. */
static double rel_diff(const float *a, const float *b, int32_t n) {
    double mx = -INFINITY, mn = INFINITY, d = 0;
    for (int32_t i = 0; i < n; i++) {
        if (b[i] > mx) mx = b[i];
        if (b[i] < mn) mn = b[i];
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = isnan(e) ? INFINITY : e;
    }
    return d / (mx - mn);
}

/* ------------------------------------------------ part 1: prefix cache */

static void test_prefix_cache(const char *src, const char *name) {
    char path[1024], jpath[1024], lpath[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s-f32.gguf", src, name);
    snprintf(jpath, sizeof jpath, "%s/tests/fixtures/%s.json", src, name);
    char *js = read_file(jpath, NULL);
    CHECK_MSG(js != NULL, "cannot read %s", jpath);
    if (!js) return;
    cJSON *ref = cJSON_Parse(js);
    free(js);
    const cJSON *prompt = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 2);
    const cJSON *ids = cJSON_GetObjectItem(prompt, "ids");
    const int32_t V = (int32_t)cJSON_GetObjectItem(ref, "n_vocab")->valuedouble;
    const int n = cJSON_GetArraySize(ids);
    CHECK_EQ_INT(n, 33);
    int32_t P[33];
    for (int i = 0; i < n && i < 33; i++) P[i] = (int32_t)cJSON_GetArrayItem(ids, i)->valuedouble;
    const char *slash = strchr(name, '/'); /* "llama/llama-gqa": the file is in tests/fixtures/llama */
    snprintf(lpath, sizeof lpath, "%s/tests/fixtures/%.*s/%s", src, (int)(slash ? slash - name : 0), name,
             cJSON_GetObjectItem(ref, "logits_file")->valuestring);
    size_t lbytes = 0;
    char *lraw = read_file(lpath, &lbytes);
    size_t off = (size_t)cJSON_GetObjectItem(prompt, "logits_offset_bytes")->valuedouble;
    CHECK(lraw && lbytes >= off + (size_t)n * V * sizeof(float));
    if (!lraw || lbytes < off + (size_t)n * V * sizeof(float)) {
        free(lraw);
        cJSON_Delete(ref);
        return;
    }
    float *R = malloc((size_t)n * V * sizeof(float)); /* R + p*V: logits after token p */
    memcpy(R, lraw + off, (size_t)n * V * sizeof(float));
    free(lraw);
    const cJSON *argmax = cJSON_GetObjectItem(prompt, "argmax");
    const cJSON *margin = cJSON_GetObjectItem(prompt, "top2_margin");

    tela_model *m = NULL;
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = 1;
    CHECK_OK(tela_model_load(path, &mp, &m));
    if (!m) {
        free(R);
        cJSON_Delete(ref);
        return;
    }
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = 64;
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    tela_prefix_cache *c = NULL;
    CHECK_OK(tela_prefix_cache_create(s, 3, &c));
    float *L = malloc((size_t)n * V * sizeof(float));
    int32_t reused = -1;

    /* empty cache, empty session: nothing to reuse */
    CHECK_OK(tela_prefix_cache_prepare(c, P, 12, &reused));
    CHECK_EQ_INT(reused, 0);
    CHECK_OK(tela_session_eval(s, P, 12, L, 0));
    CHECK_MSG(rel_diff(L, R + 11 * V, V) < 1e-4, "%s: logits after 12 tokens", name);
    CHECK_OK(tela_prefix_cache_save(c)); /* S1: P[0..12) with logits */
    CHECK_OK(tela_prefix_cache_save(c)); /* the same state again: not kept twice */
    CHECK_EQ_INT(tela_prefix_cache_count(c), 1);

    /* a detour: P[0..12) + 5 other tokens */
    int32_t X[5];
    for (int i = 0; i < 5; i++) X[i] = (P[12 + i] + 1 + i) % V;
    CHECK_OK(tela_session_eval(s, X, 5, L, 0));
    CHECK_OK(tela_prefix_cache_save(c)); /* S2: 17 tokens, diverging at 12 */
    CHECK_EQ_INT(tela_prefix_cache_count(c), 2);

    /* the whole prompt: the live detour is no prefix, S1 is */
    CHECK_OK(tela_prefix_cache_prepare(c, P, n, &reused));
    CHECK_EQ_INT(reused, 12);
    CHECK_EQ_INT(tela_session_n_past(s), 12);
    CHECK_OK(tela_session_eval(s, P + 12, n - 12, L, 1));
    double worst = 0;
    for (int p = 12; p < n; p++) {
        double d = rel_diff(L + (size_t)(p - 12) * V, R + (size_t)p * V, V);
        if (d > worst) worst = d;
    }
    CHECK_MSG(worst < 1e-4, "%s: logits on top of a restored snapshot differ from transformers by %g of the range",
              name, worst);
    CHECK_OK(tela_prefix_cache_save(c)); /* S3: all 33 with logits */

    /* exactly S1's tokens: reusable as a whole, since S1 has the logits */
    CHECK_OK(tela_prefix_cache_prepare(c, P, 12, &reused));
    CHECK_EQ_INT(reused, 12);
    tela_generate_params gp = tela_generate_default_params();
    gp.max_tokens = 1;
    gp.sampler.temperature = 0;
    int32_t tok = -1;
    tela_generate_result gr;
    CHECK_OK(tela_generate(s, NULL, 0, &gp, &tok, 1, &gr));
    if (cJSON_GetArrayItem(margin, 11)->valuedouble > 1e-3)
        CHECK_EQ_INT(tok, (int32_t)cJSON_GetArrayItem(argmax, 11)->valuedouble);

    /* the live state (P[0..12), its logits used up by sampling) is a prefix of 20 */
    CHECK_OK(tela_prefix_cache_prepare(c, P, 20, &reused));
    CHECK_EQ_INT(reused, 12);
    CHECK_OK(tela_session_eval(s, P + 12, 8, L, 0));
    CHECK_MSG(rel_diff(L, R + 19 * V, V) < 1e-4, "%s: logits after continuing the live state", name);

    /* a state of P[0..17) without logits: S4, which pushes S1 out (max 3) */
    tela_session_reset(s);
    CHECK_OK(tela_session_eval(s, P, 17, NULL, 0));
    CHECK_OK(tela_prefix_cache_save(c));
    CHECK_EQ_INT(tela_prefix_cache_count(c), 3);
    /* a prompt of exactly those 17: neither the live state nor S4 has the
     * logits to start generating, S1 is gone, S2 diverges, S3 is longer */
    CHECK_OK(tela_prefix_cache_prepare(c, P, 17, &reused));
    CHECK_EQ_INT(reused, 0);
    CHECK_EQ_INT(tela_session_n_past(s), 0);
    /* one more token: S4 serves */
    CHECK_OK(tela_prefix_cache_prepare(c, P, 18, &reused));
    CHECK_EQ_INT(reused, 17);
    CHECK_OK(tela_session_eval(s, P + 17, 1, L, 0));
    CHECK_MSG(rel_diff(L, R + 17 * V, V) < 1e-4, "%s: logits after restoring a snapshot without logits", name);

    /* a prompt sharing nothing */
    int32_t Q[4] = {(P[0] + 1) % V, P[1], P[2], P[3]};
    CHECK_OK(tela_prefix_cache_prepare(c, Q, 4, &reused));
    CHECK_EQ_INT(reused, 0);
    CHECK_EQ_INT(tela_session_n_past(s), 0);

    /* longer than the context: refused, nothing changed */
    CHECK_OK(tela_session_eval(s, P, 5, NULL, 0));
    int32_t *big = calloc(65, sizeof *big);
    CHECK(tela_prefix_cache_prepare(c, big, 65, &reused) == TELA_ERR_CONTEXT);
    CHECK_EQ_INT(tela_session_n_past(s), 5);
    free(big);

    tela_prefix_cache_clear(c);
    CHECK_EQ_INT(tela_prefix_cache_count(c), 0);
    tela_prefix_cache_free(c);
    free(L);
    free(R);
    tela_session_free(s);
    tela_model_free(m);
    cJSON_Delete(ref);
}

/* --------------------------------------- part 2: conversations (shared) */

typedef struct {
    char buf[8192];
    size_t len;
} text;

static int collect(void *user, int32_t token, const char *piece, size_t len) {
    (void)token;
    text *t = user;
    if (t->len + len < sizeof t->buf) {
        memcpy(t->buf + t->len, piece, len);
        t->len += len;
        t->buf[t->len] = '\0';
    }
    return 0;
}

/* Python's str.strip() for ASCII whitespace (Jinja's trim filter). */
static void strip(const char *s, char *out, size_t cap) {
    size_t a = 0, b = strlen(s);
    while (a < b && strchr(" \t\n\r\v\f", s[a])) a++;
    while (b > a && strchr(" \t\n\r\v\f", s[b - 1])) b--;
    snprintf(out, cap, "%.*s", (int)(b - a), s + a);
}

/* The conversation of the test, rendered by hand per the template format. */
static void expected_rendering(int is_llama, const char *sys, const char *u1, const char *a1, const char *u2,
                               char *out, size_t cap) {
    if (is_llama) {
        char t[4096];
        int n = snprintf(out, cap,
                         "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n%s<|eot_id|>"
                         "<|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|>",
                         sys, u1);
        if (a1) {
            strip(a1, t, sizeof t);
            n += snprintf(out + n, cap - (size_t)n,
                          "<|start_header_id|>assistant<|end_header_id|>\n\n%s<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|>",
                          t, u2);
        }
        snprintf(out + n, cap - (size_t)n, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else {
        int n = snprintf(out, cap, "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n", sys, u1);
        if (a1)
            n += snprintf(out + n, cap - (size_t)n, "<|im_start|>assistant\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n",
                          a1, u2);
        snprintf(out + n, cap - (size_t)n, "<|im_start|>assistant\n");
    }
}

static void test_conversation(const char *shared, const char *name, int is_llama) {
    char path[1024];
    snprintf(path, sizeof path, "%s/reference/fixtures/%s.gguf", shared, name);
    tela_model *m = NULL;
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = 1;
    CHECK_OK(tela_model_load(path, &mp, &m));
    if (!m) return;
    const char *sys = "You answer briefly.", *u1 = "Hello, who are you?", *u2 = "Tell me more.";
    static char want[16384];

    /* one-shot prompt tokens: template markers are the tokenizers' special ids */
    int32_t *toks = NULL;
    size_t nt = 0;
    CHECK_OK(tela_chat_prompt_tokens(m, NULL, sys, u1, &toks, &nt));
    CHECK(nt > 8);
    if (nt > 8) {
        if (is_llama) {
            CHECK_EQ_INT(toks[0], 128000); /* <|begin_of_text|>, once */
            CHECK_EQ_INT(toks[1], 128006); /* <|start_header_id|> */
            CHECK_EQ_INT(toks[nt - 1], 271); /* "\n\n" */
            CHECK_EQ_INT(toks[nt - 2], 128007); /* <|end_header_id|> */
        } else {
            CHECK_EQ_INT(toks[0], 151644); /* <|im_start|>, no BOS in front */
            CHECK_EQ_INT(toks[nt - 1], 198); /* "\n" */
            CHECK_EQ_INT(toks[nt - 3], 151644);
        }
    }

    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = 256;
    tela_session *s = NULL, *fresh = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    CHECK_OK(tela_session_create(m, &sp, &fresh));
    tela_chat_session_params cp;
    memset(&cp, 0, sizeof cp);
    cp.system = sys;
    tela_chat_session *chat = NULL;
    CHECK_OK(tela_chat_session_create(s, &cp, &chat));
    if (!chat || !s || !fresh) goto out;

    text r1 = {0}, r2 = {0}, rf = {0};
    tela_generate_params gp = tela_generate_default_params();
    gp.max_tokens = 12;
    gp.sampler.temperature = 0;
    gp.on_token = collect;
    gp.user = &r1;
    tela_chat_turn_result tr;
    CHECK_OK(tela_chat_session_turn(chat, u1, &gp, &tr));
    CHECK_EQ_INT(tr.n_reused, 0);
    CHECK_EQ_INT(tr.n_new, (int32_t)nt);
    CHECK_EQ_INT(tr.n_tokens, (int32_t)nt);
    CHECK_EQ_INT(tr.gen.n_generated, 12);
    CHECK(!strcmp(tr.reply, r1.buf));
    expected_rendering(is_llama, sys, u1, NULL, NULL, want, sizeof want);
    CHECK_MSG(!strcmp(tr.prompt, want), "%s: turn 1 rendered as\n%s\nexpected\n%s", name, tr.prompt, want);
    CHECK_EQ_INT(tela_chat_session_n_messages(chat), 3);

    gp.user = &r2;
    CHECK_OK(tela_chat_session_turn(chat, u2, &gp, &tr));
    expected_rendering(is_llama, sys, u1, r1.buf, u2, want, sizeof want);
    CHECK_MSG(!strcmp(tr.prompt, want), "%s: turn 2 rendered as\n%s\nexpected\n%s", name, tr.prompt, want);
    CHECK_MSG(tr.n_reused >= (int32_t)nt, "%s: turn 2 reused %d tokens (turn 1's prompt had %zu)", name, tr.n_reused,
              nt);
    CHECK_EQ_INT(tr.n_new, tr.n_tokens - tr.n_reused);

    /* the same conversation from scratch, through the public API */
    size_t cap = strlen(want) + 16, nf = 0;
    int32_t *all = malloc(cap * sizeof *all);
    CHECK_OK(tela_tokenize(m, want, strlen(want), 0, 1, all, cap, &nf));
    CHECK_EQ_INT((int32_t)nf, tr.n_tokens);
    gp.user = &rf;
    tela_generate_result gr;
    CHECK_OK(tela_generate(fresh, all, (int32_t)nf, &gp, NULL, 0, &gr));
    CHECK_MSG(!strcmp(r2.buf, rf.buf), "%s: turn 2 reply with reuse\n%s\ndiffers from scratch\n%s", name, r2.buf,
              rf.buf);
    free(all);

    /* /reset keeps the system prompt */
    tela_chat_session_reset(chat);
    CHECK_EQ_INT(tela_chat_session_n_messages(chat), 1);
    text r3 = {0};
    gp.user = &r3;
    CHECK_OK(tela_chat_session_turn(chat, u1, &gp, &tr));
    CHECK_EQ_INT(tr.n_tokens, (int32_t)nt);
    CHECK_MSG(!strcmp(r3.buf, r1.buf), "%s: after reset the first reply differs", name);
    tela_chat_session_free(chat);
    chat = NULL;

    /* a context that fills up: a clean TELA_ERR_CONTEXT, the conversation unchanged */
    tela_session_free(s);
    sp.n_ctx = (int32_t)nt + 20;
    s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    CHECK_OK(tela_chat_session_create(s, &cp, &chat));
    if (!chat) goto out;
    tela_status st = TELA_OK;
    int turns = 0;
    text junk = {0};
    gp.user = &junk;
    while (st == TELA_OK && turns < 10) {
        junk.len = 0;
        st = tela_chat_session_turn(chat, u2, &gp, &tr);
        turns++;
    }
    CHECK_MSG(st == TELA_ERR_CONTEXT, "%s: expected a context error, got %s after %d turns", name, tela_status_name(st),
              turns);
    CHECK_EQ_INT(tela_chat_session_n_messages(chat), (size_t)(1 + 2 * (turns - 1)));
    tela_chat_session_reset(chat);
    CHECK_OK(tela_chat_session_turn(chat, u1, &gp, &tr));

out:
    tela_chat_session_free(chat);
    free(toks);
    tela_session_free(s);
    tela_session_free(fresh);
    tela_model_free(m);
}

int main(void) {
    const char *src = getenv("TELA_SOURCE_DIR");
    if (!src) test_skip("TELA_SOURCE_DIR is not set");
    test_prefix_cache(src, "llama/llama-gqa");
    test_prefix_cache(src, "qwen35/qwen35-sym");

    const char *shared = getenv("TELA_SHARED_DIR");
    char probe[1024];
    FILE *f = NULL;
    if (shared) {
        snprintf(probe, sizeof probe, "%s/reference/fixtures/llama-d1.gguf", shared);
        f = fopen(probe, "rb");
    }
    if (f) {
        fclose(f);
        test_conversation(shared, "llama-d1", 1);
        test_conversation(shared, "qwen35-d1", 0);
    } else {
        printf("note: no ../shared: the conversation tests are skipped\n");
    }
    return test_finish();
}
