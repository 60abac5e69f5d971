/* api_output.h: what chat completions and completions share once their
 * prompts are tokens: the checks against the context, submitting one engine
 * request per choice, and the reply, gathered (one JSON object) or streamed
 * (server-sent events of chunks, then "data: [DONE]"). */
#ifndef TELA_SERVER_API_OUTPUT_H
#define TELA_SERVER_API_OUTPUT_H

#include <stddef.h>
#include <stdint.h>

#include "server/api_parse.h"
#include "server/app.h"
#include "server/http.h"

typedef enum api_kind { API_KIND_CHAT, API_KIND_COMPLETION } api_kind;

/* One prompt, as tokens. */
typedef struct api_tokens {
    int32_t *ids;
    size_t n;
} api_tokens;

/* Runs n_prompts x g->n generations (choice i*n + k is prompt i's k-th)
 * and replies: the errors (prompt too long for the context, queue full,
 * ...), the whole result, or its stream. prompt_param names the field the
 * prompt came from, for errors. rendered: a chat's rendered conversation
 * (else NULL): a single reply that ends at an end-of-generation token or
 * at max_tokens is then remembered with it (replies.h). */
void api_generate(app *a, http_request *req, api_kind kind, const api_gen *g, const api_tokens *prompts,
                  size_t n_prompts, const char *prompt_param, const char *rendered);

/* tela_tokenize into a malloc'd buffer grown as needed, with room for one
 * more id after the n written. */
tela_status api_tokenize_text(const app *a, const char *text, size_t len, int add_special, int parse_special,
                              int32_t **out, size_t *n);

/* A 64-bit random number (for seeds and response ids). */
uint64_t api_random64(void);

#endif
