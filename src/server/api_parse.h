/* api_parse.h: the HTTP API's request bodies (JSON) turned into checked C
 * structs, and the error object every failure becomes. Pure functions: no
 * HTTP, no engine, no model (the vocabulary size is passed in), so the
 * fuzzer (fuzz/fuzz_server_request.c) and the unit tests
 * (tests/test_server_parse.c) call them directly.
 *
 * Rules: a body is a JSON object in valid UTF-8 (no U+0000 in strings);
 * every key must be known (an OpenAI field tela does not do is "not
 * supported", any other is "unrecognized"); a field set to null counts as
 * absent; numbers must be finite, integers integral; ranges follow the
 * OpenAI API reference. Each failure names the field ("messages[2].content")
 * in api_error.param. */
#ifndef TELA_SERVER_API_PARSE_H
#define TELA_SERVER_API_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "tela/tela.h"

#define API_MAX_STOP 16          /* stop strings per request (OpenAI: 4) */
#define API_MAX_N 128            /* choices per request (n, and n x prompts for completions) */
#define API_MAX_TOP_LOGPROBS 20  /* chat's top_logprobs */
#define API_MAX_LOGPROBS 5       /* completions' logprobs */

/* An error as the API returns it: {"error": {"message", "type", "param", "code"}}
 * with this HTTP status. Empty param or code mean null. */
typedef struct api_error {
    int status;
    const char *type;   /* "invalid_request_error", "authentication_error", "server_error", ... */
    char param[96];
    char code[48];
    char message[640];
} api_error;

/* Fills e (status, type, code may be NULL, param may be NULL) with a
 * printf-style message; returns -1 so callers can 'return api_fail(...)'. */
int api_fail(api_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* What both completion endpoints take beyond their prompt. */
typedef struct api_gen {
    int stream;
    int include_usage;          /* stream_options.include_usage */
    int32_t max_tokens;         /* 0: not given */
    int32_t n;                  /* choices per prompt, >= 1 */
    double temperature, top_p, min_p;
    int32_t top_k;              /* 0: off */
    double presence_penalty, frequency_penalty;
    int has_seed;
    uint64_t seed;
    char **stop;                /* n_stop strings, then NULL (a tela stop_strings list) */
    size_t n_stop;
    tela_logit_bias *logit_bias;
    size_t n_logit_bias;
    int32_t logprobs;           /* -1: none; else how many alternatives per token (chat: top_logprobs) */
    int ignore_eos;             /* extension: generate to max_tokens */
    char *prediction;           /* OpenAI's predicted outputs ("prediction": {"type": "content", ...}): text the
                                   reply is likely to repeat, drafted from; NULL: none */
} api_gen;

typedef enum api_role { API_ROLE_SYSTEM, API_ROLE_USER, API_ROLE_ASSISTANT } api_role;

typedef struct api_message {
    api_role role;
    char *content;              /* the text parts joined, in order, without separators */
} api_message;

typedef struct api_chat_request {
    api_gen gen;
    char *model;                /* NULL when not given */
    api_message *messages;
    size_t n_messages;
} api_chat_request;

/* One prompt of /v1/completions: text, or token ids (text NULL). */
typedef struct api_prompt {
    char *text;
    int32_t *tokens;
    size_t n_tokens;
} api_prompt;

typedef struct api_completion_request {
    api_gen gen;
    char *model;
    api_prompt *prompts;
    size_t n_prompts;
} api_completion_request;

typedef struct api_tokenize_request {
    char *content;
    size_t content_len;
    int add_special;            /* default 0 */
    int parse_special;          /* default 1 */
    int with_pieces;            /* default 0 */
} api_tokenize_request;

typedef struct api_detokenize_request {
    int32_t *tokens;
    size_t n_tokens;
} api_detokenize_request;

/* Each parser reads body[0..len) (body[len] must be '\0'). n_vocab bounds
 * token ids (prompts, logit_bias keys, detokenize); 0 leaves them unchecked.
 * Returns 0, or -1 with *err filled (the request then holds nothing to free,
 * though freeing it is harmless). */
int api_parse_chat(const char *body, size_t len, int32_t n_vocab, api_chat_request *out, api_error *err);
int api_parse_completion(const char *body, size_t len, int32_t n_vocab, api_completion_request *out, api_error *err);
int api_parse_tokenize(const char *body, size_t len, api_tokenize_request *out, api_error *err);
int api_parse_detokenize(const char *body, size_t len, int32_t n_vocab, api_detokenize_request *out, api_error *err);

void api_chat_request_free(api_chat_request *r);
void api_completion_request_free(api_completion_request *r);
void api_tokenize_request_free(api_tokenize_request *r);
void api_detokenize_request_free(api_detokenize_request *r);

/* Checks that s[0..n) is UTF-8 (shortest forms, no surrogates, at most
 * U+10FFFF). Returns the offset of the first bad byte, or n when all is well. */
size_t api_utf8_check(const char *s, size_t n);
/* Copies s[0..n) into out (cap >= 3 * n + 1), each invalid byte replaced by
 * U+FFFD, NUL-terminated; returns the length written. For text from the
 * model, which may stop in the middle of a character. */
size_t api_utf8_sanitize(const char *s, size_t n, char *out);
/* A cJSON string of s[0..n) repaired as api_utf8_sanitize does (NULL when
 * out of memory). */
struct cJSON *api_json_text(const char *s, size_t n);

#endif
