/* test_llama_ref.h: shared parts of the parity tests on the reference
 * model llama-d1 (test_llama_ref.c: the converter's F16 GGUF;
 * test_llama_ref_hf.c: the float32 HF checkpoint), against refs-d1.json and
 * llama-d1.logits.f32 from ../shared/reference/fixtures:
 *   - last-position logits within 1e-4 of the reference logits' range;
 *   - per-position argmax equal where the reference top-2 margin > 1e-3,
 *     logsumexp within 1e-4 relative;
 *   - 24 greedy tokens identical up to the first step whose reference
 *     margin is < 0.01.
 * The tests skip (77) without ../shared. */
#ifndef TELA_TESTS_LLAMA_REF_H
#define TELA_TESTS_LLAMA_REF_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tela/tela.h"
#include "test.h"

static char fixtures[1024];
static cJSON *refs_json;

static inline char *read_all(const char *path, size_t *len) {
    return test_read_file(path, len);
}

static inline int32_t *json_ints(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++) v[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return v;
}

static inline double json_num(const cJSON *arr, int i) { return cJSON_GetArrayItem(arr, i)->valuedouble; }

/* Reference last-position logits of a prompt. */
static inline float *ref_logits(long offset, int vocab) {
    char path[1200];
    snprintf(path, sizeof path, "%s/llama-d1.logits.f32", fixtures);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *v = malloc(sizeof(float) * (size_t)vocab);
    if (fseek(f, offset, SEEK_SET) != 0 || fread(v, sizeof(float), (size_t)vocab, f) != (size_t)vocab) {
        free(v);
        v = NULL;
    }
    fclose(f);
    return v;
}

typedef struct {
    char text[4096];
    size_t len;
    int calls;
} stream_text;

static inline int collect(void *user, int32_t token, const char *piece, size_t len) {
    stream_text *st = user;
    (void)token;
    if (st->len + len < sizeof st->text) {
        memcpy(st->text + st->len, piece, len);
        st->len += len;
        st->text[st->len] = '\0';
    }
    st->calls++;
    return 0;
}

static inline void check_prompt(tela_model *m, const cJSON *prompt, int index, const char *label) {
    const tela_model_info *info = tela_model_get_info(m);
    int n_ids, vocab = (int)cJSON_GetObjectItem(prompt, "vocab")->valuedouble;
    int32_t *ids = json_ints(cJSON_GetObjectItem(prompt, "ids"), &n_ids);
    const cJSON *argmax = cJSON_GetObjectItem(prompt, "argmax");
    const cJSON *lse = cJSON_GetObjectItem(prompt, "logsumexp");
    const cJSON *margin = cJSON_GetObjectItem(prompt, "top2_margin");
    CHECK_EQ_INT(info->n_vocab, vocab);

    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = 512;
    sp.n_threads = 1; /* thread counts are tested in test_session */
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    if (!s) return;
    float *logits = malloc(sizeof(float) * (size_t)n_ids * (size_t)vocab);
    CHECK_OK(tela_session_eval(s, ids, n_ids, logits, 1));

    /* last position against the reference logits */
    float *ref = ref_logits((long)cJSON_GetObjectItem(prompt, "last_logits_offset_bytes")->valuedouble, vocab);
    CHECK_MSG(ref != NULL, "cannot read the reference logits");
    if (ref) {
        const float *last = logits + (size_t)(n_ids - 1) * vocab;
        double mx = -INFINITY, mn = INFINITY, d = 0;
        for (int i = 0; i < vocab; i++) {
            if (ref[i] > mx) mx = ref[i];
            if (ref[i] < mn) mn = ref[i];
            double e = fabs((double)last[i] - ref[i]);
            if (!(e <= d)) d = e;
        }
        CHECK_MSG(d <= 1e-4 * (mx - mn), "%s prompt %d: last logits differ by %g (range %g)", label, index, d,
                  mx - mn);
        free(ref);
    }
    /* every position: argmax and logsumexp */
    int bad_argmax = 0, bad_lse = 0;
    for (int t = 0; t < n_ids; t++) {
        const float *row = logits + (size_t)t * vocab;
        int best = 0;
        for (int i = 1; i < vocab; i++)
            if (row[i] > row[best]) best = i;
        double sum = 0;
        for (int i = 0; i < vocab; i++) sum += exp((double)row[i] - row[best]);
        double l = row[best] + log(sum), rl = json_num(lse, t);
        if (json_num(margin, t) > 1e-3 && best != (int)json_num(argmax, t)) bad_argmax++;
        if (fabs(l - rl) > 1e-4 * fabs(rl)) bad_lse++;
    }
    CHECK_MSG(bad_argmax == 0, "%s prompt %d: %d positions with another argmax", label, index, bad_argmax);
    CHECK_MSG(bad_lse == 0, "%s prompt %d: %d positions with another logsumexp", label, index, bad_lse);

    /* greedy continuation */
    int n_greedy;
    int32_t *greedy = json_ints(cJSON_GetObjectItem(prompt, "greedy"), &n_greedy);
    const cJSON *gmargin = cJSON_GetObjectItem(prompt, "greedy_margin");
    tela_generate_params gp = tela_generate_default_params();
    gp.sampler.temperature = 0.0f;
    gp.max_tokens = n_greedy;
    gp.ignore_eos = 1;
    int32_t out[64];
    tela_generate_result r;
    tela_session_reset(s);
    CHECK_OK(tela_generate(s, ids, n_ids, &gp, out, 64, &r));
    CHECK_EQ_INT(r.n_generated, n_greedy);
    /* The reference's greedy run must start from the same logits as its
     * per-position data: in refs-d1.json, llama-d1 prompt 3's continuation
     * does not (its first token is not the argmax of the prompt's last
     * position, margin 0.23), so it came from other input ids and cannot be
     * compared. */
    if (n_greedy > 0 && json_num(margin, n_ids - 1) > 1e-3 && greedy[0] != (int32_t)json_num(argmax, n_ids - 1)) {
        printf("note: %s prompt %d: the reference greedy continuation starts with %d but the reference argmax "
               "after the prompt is %d; not comparing it\n",
               label, index, greedy[0], (int)json_num(argmax, n_ids - 1));
        n_greedy = 0;
    }
    int compared = 0, mismatch = -1;
    for (int i = 0; i < n_greedy && i < r.n_generated; i++) {
        if (out[i] != greedy[i]) {
            mismatch = i;
            break;
        }
        compared++;
        if (json_num(gmargin, i) < 0.01) break; /* later steps may legitimately differ */
    }
    CHECK_MSG(mismatch < 0, "%s prompt %d: greedy token %d is %d, reference %d", label, index, mismatch,
              mismatch >= 0 ? out[mismatch] : 0, mismatch >= 0 ? greedy[mismatch] : 0);
    CHECK(compared >= 1 || n_greedy == 0);

    /* with the tokenizer: text -> ids, and the streamed text of the greedy
     * continuation equals its detokenization */
    if (info->has_tokenizer) {
        const char *text = cJSON_GetObjectItem(prompt, "text")->valuestring;
        size_t n_tok = 0;
        int32_t *tok = malloc(sizeof(int32_t) * (strlen(text) + 8));
        CHECK_OK(tela_tokenize(m, text, strlen(text), 0, 0, tok, strlen(text) + 8, &n_tok));
        CHECK_MSG((int)n_tok == n_ids && !memcmp(tok, ids, n_tok * sizeof(int32_t)),
                  "prompt %d does not tokenize to the reference ids", index);
        free(tok);
    }
    free(greedy);
    free(logits);
    free(ids);
    tela_session_free(s);
}

/* Generation stops: EOS (forced by a hook), and a stop string cut out of
 * the streamed text. */
static int32_t forced;

static inline void force_token(void *user, float *logits, int32_t n_vocab, uint64_t step) {
    (void)user;
    (void)step;
    for (int32_t i = 0; i < n_vocab; i++)
        if (i != forced) logits[i] = -INFINITY;
}

static inline void check_stops(tela_model *m, const cJSON *prompt) {
    int n_ids;
    int32_t *ids = json_ints(cJSON_GetObjectItem(prompt, "ids"), &n_ids);
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    tela_generate_params gp = tela_generate_default_params();
    gp.sampler.temperature = 0.0f;
    gp.max_tokens = 24;
    gp.on_token = collect;
    stream_text st = {{0}, 0, 0};
    gp.user = &st;
    int32_t out[32];
    tela_generate_result r;

    /* end of generation: <|eot_id|> is an EOG token of Llama 3 */
    forced = 128009;
    CHECK(tela_token_is_eog(m, forced));
    gp.logits_hook = force_token;
    CHECK_OK(tela_generate(s, ids, n_ids, &gp, out, 32, &r));
    CHECK_EQ_INT(r.stop_reason, TELA_STOP_EOS);
    CHECK_EQ_INT(r.n_generated, 1);
    CHECK_EQ_INT(out[0], 128009);
    CHECK_EQ_INT(st.len, 0);
    gp.logits_hook = NULL;

    /* the plain greedy text, then a stop string from its middle */
    tela_session_reset(s);
    st = (stream_text){{0}, 0, 0};
    CHECK_OK(tela_generate(s, ids, n_ids, &gp, out, 32, &r));
    CHECK_EQ_INT(st.calls, 24);
    char *detok = NULL;
    CHECK_OK(tela_detokenize(m, out, 24, 1, &detok));
    CHECK_MSG(detok && strlen(detok) == st.len && !memcmp(detok, st.text, st.len),
              "streamed text differs from the detokenized tokens");
    free(detok);
    if (st.len > 12) {
        char full[4096], stop[8];
        memcpy(full, st.text, st.len + 1);
        size_t at = st.len / 2;
        while (at > 0 && ((unsigned char)full[at] & 0xC0) == 0x80) at--; /* a character boundary */
        memcpy(stop, full + at, 4);
        stop[4] = '\0';
        size_t first = (size_t)(strstr(full, stop) - full);
        const char *stops[] = {"\x01never", stop, NULL};
        gp.stop_strings = stops;
        tela_session_reset(s);
        st = (stream_text){{0}, 0, 0};
        CHECK_OK(tela_generate(s, ids, n_ids, &gp, out, 32, &r));
        CHECK_EQ_INT(r.stop_reason, TELA_STOP_STRING);
        CHECK_EQ_INT(st.len, first);
        CHECK(!memcmp(st.text, full, first));
        CHECK(r.n_generated < 24);
    }
    tela_session_free(s);
    free(ids);
}


/* Loads refs-d1.json (skips the test when ../shared is absent) and returns
 * llama-d1's prompts. */
static inline const cJSON *load_refs(void) {
    const char *shared = getenv("TELA_SHARED_DIR");
    if (!shared) test_skip("TELA_SHARED_DIR is not set");
    snprintf(fixtures, sizeof fixtures, "%s/reference/fixtures", shared);
    char path[1200];
    snprintf(path, sizeof path, "%s/refs-d1.json", fixtures);
    char *json = read_all(path, NULL);
    if (!json) test_skip("no ../shared/reference/fixtures/refs-d1.json");
    refs_json = cJSON_Parse(json);
    free(json);
    const cJSON *prompts = cJSON_GetObjectItem(cJSON_GetObjectItem(refs_json, "llama-d1"), "prompts");
    CHECK(cJSON_GetArraySize(prompts) == 5);
    return prompts;
}

#endif
