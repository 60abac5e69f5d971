/* app.h: what the API handlers share (the model, the engine, the live
 * jobs, the metrics) and the handlers themselves, which server.c routes to:
 * api_basic.c (health, models, metrics, tokenize, detokenize, the chat
 * page), api_chat.c, api_completions.c, over api_output.c (submitting,
 * gathering and writing out generations). */
#ifndef TELA_SERVER_APP_H
#define TELA_SERVER_APP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "server/gen.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/replies.h"
#include "tela/tela.h"

typedef struct app {
    tela_model *model;
    tela_model *draft;           /* the draft model of --spec draft (NULL: none) */
    const tela_model_info *info;
    tela_engine *engine;
    char model_id[256];          /* the name clients use: the model file's name */
    int32_t n_ctx;               /* tokens one request may hold */
    int32_t n_vocab;
    tela_spec_params spec;       /* what every request drafts with (method NONE: nothing) */
    int adds_bos;                /* the tokenizer puts BOS in front of a text */
    char **pieces;               /* each token's bytes alone (tela_detokenize of its id), for logprobs */
    size_t *piece_lens;
    long long created;           /* Unix time the server started ("created" of /v1/models) */
    double t_start;              /* monotonic seconds at start */
    gen_registry *jobs;
    metrics *metrics;
    reply_memory *replies;       /* recent chat replies as tokens (replies.h) */
    atomic_int shutting_down;    /* set by a signal: new requests get 503 */
} app;

void api_health(void *app, http_request *req);
void api_models(void *app, http_request *req);
void api_model(void *app, http_request *req); /* GET /v1/models/ID */
void api_metrics(void *app, http_request *req);
void api_tokenize(void *app, http_request *req);
void api_detokenize(void *app, http_request *req);
void api_chat_page(void *app, http_request *req);
void api_chat_completions(void *app, http_request *req);
void api_completions(void *app, http_request *req);

/* The chat page (chat.html), compiled in by CMake (chat_page.c). */
extern const unsigned char tela_chat_page[];
extern const size_t tela_chat_page_len;

#endif
