/* fuzz_server_request.c: libFuzzer harness for tela serve's request parser
 * (src/server/api_parse.c). Every input is parsed as each kind of body
 * (chat, completions, tokenize, detokenize); what is accepted is walked
 * and checked against the parser's promises (ranges, NULL-terminated stop
 * lists, valid UTF-8 in every string, ids below the vocabulary), and what
 * is refused must carry a 400 or 500 with a message. The UTF-8 repair must
 * give valid UTF-8 of every input.
 *   cmake -S . -B build-fuzz -G Ninja -DTELA_FUZZ=ON -DCMAKE_C_COMPILER=clang
 *   ninja -C build-fuzz fuzz/fuzz_server_request
 *   build-fuzz/fuzz/fuzz_server_request -dict=fuzz/server_request.dict fuzz/corpus/server_request */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_parse.h"

#define N_VOCAB 4096

static void must(int cond) {
    if (!cond) abort();
}

static void utf8_string(const char *s) {
    must(s != NULL);
    size_t n = strlen(s);
    must(api_utf8_check(s, n) == n);
}

static void error_ok(const api_error *e) {
    must(e->status == 400 || e->status == 500);
    must(e->type != NULL);
    must(memchr(e->message, '\0', sizeof e->message) != NULL && e->message[0] != '\0');
    must(memchr(e->param, '\0', sizeof e->param) != NULL);
    /* messages quote parts of the request, cut short: repairable to UTF-8 */
    char clean[3 * sizeof e->message + 1];
    size_t n = api_utf8_sanitize(e->message, strlen(e->message), clean);
    must(api_utf8_check(clean, n) == n);
}

static void gen_ok(const api_gen *g, int chat) {
    must(g->n >= 1 && g->n <= API_MAX_N);
    must(g->temperature >= 0 && g->temperature <= 2);
    must(g->top_p >= 0 && g->top_p <= 1);
    must(g->min_p >= 0 && g->min_p <= 1);
    must(g->top_k >= 0);
    must(g->presence_penalty >= -2 && g->presence_penalty <= 2);
    must(g->frequency_penalty >= -2 && g->frequency_penalty <= 2);
    must(g->max_tokens >= 0);
    must(g->logprobs >= -1 && g->logprobs <= (chat ? API_MAX_TOP_LOGPROBS : API_MAX_LOGPROBS));
    must(!g->include_usage || g->stream);
    must(g->n_stop <= API_MAX_STOP);
    if (g->n_stop) {
        for (size_t i = 0; i < g->n_stop; i++) {
            utf8_string(g->stop[i]);
            must(g->stop[i][0] != '\0');
        }
        must(g->stop[g->n_stop] == NULL);
    }
    for (size_t i = 0; i < g->n_logit_bias; i++) {
        must(g->logit_bias[i].token >= 0 && g->logit_bias[i].token < N_VOCAB);
        must(g->logit_bias[i].bias >= -100 && g->logit_bias[i].bias <= 100);
    }
}

static void tokens_ok(const int32_t *t, size_t n) {
    for (size_t i = 0; i < n; i++) must(t[i] >= 0 && t[i] < N_VOCAB);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *body = malloc(size + 1);
    if (!body) return 0;
    memcpy(body, data, size);
    body[size] = '\0';
    api_error e;

    api_chat_request c;
    if (api_parse_chat(body, size, N_VOCAB, &c, &e) == 0) {
        gen_ok(&c.gen, 1);
        must(c.n_messages >= 1);
        for (size_t i = 0; i < c.n_messages; i++) {
            must(c.messages[i].role <= API_ROLE_ASSISTANT);
            utf8_string(c.messages[i].content);
        }
        if (c.model) utf8_string(c.model);
    } else {
        error_ok(&e);
    }
    api_chat_request_free(&c);

    api_completion_request p;
    if (api_parse_completion(body, size, N_VOCAB, &p, &e) == 0) {
        gen_ok(&p.gen, 0);
        must(p.n_prompts >= 1 && p.n_prompts * (size_t)p.gen.n <= API_MAX_N);
        for (size_t i = 0; i < p.n_prompts; i++) {
            if (p.prompts[i].text) {
                utf8_string(p.prompts[i].text);
            } else {
                must(p.prompts[i].n_tokens >= 1);
                tokens_ok(p.prompts[i].tokens, p.prompts[i].n_tokens);
            }
        }
    } else {
        error_ok(&e);
    }
    api_completion_request_free(&p);

    api_tokenize_request t;
    if (api_parse_tokenize(body, size, &t, &e) == 0) {
        utf8_string(t.content);
        must(strlen(t.content) == t.content_len);
    } else {
        error_ok(&e);
    }
    api_tokenize_request_free(&t);

    api_detokenize_request d;
    if (api_parse_detokenize(body, size, N_VOCAB, &d, &e) == 0) tokens_ok(d.tokens, d.n_tokens);
    else error_ok(&e);
    api_detokenize_request_free(&d);

    char *clean = malloc(3 * size + 1);
    if (clean) {
        size_t n = api_utf8_sanitize(body, size, clean);
        must(api_utf8_check(clean, n) == n);
        if (api_utf8_check(body, size) == size) must(n == size && !memcmp(clean, body, size));
        free(clean);
    }
    free(body);
    return 0;
}
