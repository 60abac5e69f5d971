/* server.h: tela serve, an OpenAI-compatible HTTP server over the batching
 * engine, as the CLI starts it (src/cli/cmd_serve.c). */
#ifndef TELA_SERVER_SERVER_H
#define TELA_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "tela/tela.h"

typedef struct tela_serve_params {
    const char *model_path;
    const char *host;            /* default 127.0.0.1 */
    int port;                    /* default 8080; 0: any free port */
    const char *api_key;         /* NULL: none */
    const char *device;          /* NULL: the default */
    int n_threads;               /* 0: all cores */
    int tensor_parallel;         /* ranks each layer is split across (tela_model_params; 0: none) */
    tela_engine_params engine;   /* n_ctx, n_parallel, kv_tokens, max_waiting, prefix_cache, checkpoint_interval, ... */
    tela_spec_params spec;       /* speculative decoding of every request (method NONE: off; NGRAM, MTP, DRAFT) */
    const char *draft_path;      /* the draft model of TELA_SPEC_DRAFT */
    int32_t mtp_draft_vocab;     /* MTP: draft among the first N token ids (0: all; tela_model_params) */
    size_t max_body;             /* request body limit in bytes */
    double shutdown_grace;       /* seconds in-flight requests get after SIGINT/SIGTERM before they are cancelled */
} tela_serve_params;

void tela_serve_default_params(tela_serve_params *p);
/* Loads the model, starts the engine and the HTTP server, prints the
 * startup line on stdout and serves until SIGINT or SIGTERM; then stops
 * accepting, lets requests under way finish (up to shutdown_grace seconds,
 * then cancels them) and frees everything. Returns the process's exit
 * status: 0 after a clean stop, 1 when it could not start. */
int tela_serve(const tela_serve_params *p);

#endif
