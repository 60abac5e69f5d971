/* server.c: tela serve from start to stop: signals, the model, the engine,
 * the state handlers share (app.h), the route table, the HTTP server, and
 * the orderly shutdown on SIGINT/SIGTERM. */
#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/app.h"
#include "server/gen.h"
#include "server/http.h"
#include "server/metrics.h"

#define DEFAULT_MAX_BODY (8u << 20)
#define CANCEL_WAIT_S 10.0   /* after cancelling, how long requests get to end */

void tela_serve_default_params(tela_serve_params *p) {
    memset(p, 0, sizeof *p);
    p->host = "127.0.0.1";
    p->port = 8080;
    p->engine = tela_engine_default_params();
    p->spec = tela_spec_default_params();
    p->max_body = DEFAULT_MAX_BODY;
    p->shutdown_grace = 30.0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The name clients give as "model": the file's (or directory's) name. */
static void model_id_of(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t start = n;
    while (start > 0 && path[start - 1] != '/') start--;
    snprintf(out, cap, "%.*s", (int)(n - start), path + start);
}

/* Every token's text alone, for log-probabilities (computed once: the
 * tokenizer is then not called per token and per alternative). */
static int make_pieces(app *a) {
    a->pieces = calloc((size_t)a->n_vocab, sizeof *a->pieces);
    a->piece_lens = calloc((size_t)a->n_vocab, sizeof *a->piece_lens);
    if (!a->pieces || !a->piece_lens) return -1;
    for (int32_t t = 0; t < a->n_vocab; t++) {
        char *s = NULL;
        if (tela_detokenize(a->model, &t, 1, 0, &s) == TELA_OK && s) {
            a->pieces[t] = s;
            a->piece_lens[t] = strlen(s);
        } else {
            free(s);
        }
    }
    return 0;
}

static void free_pieces(app *a) {
    for (int32_t t = 0; a->pieces && t < a->n_vocab; t++) free(a->pieces[t]);
    free(a->pieces);
    free(a->piece_lens);
}

/* Whether the tokenizer puts BOS in front of a text (tela.h has no call
 * for it; an empty text with add_special shows it). */
static int tokenizer_adds_bos(const tela_model *m, int32_t bos) {
    int32_t ids[4];
    size_t n = 0;
    if (bos < 0 || tela_tokenize(m, "", 0, 1, 0, ids, 4, &n) != TELA_OK) return 0;
    return n >= 1 && ids[0] == bos;
}

/* Waits until no request is in flight or the deadline passes; 1 when a
 * second signal asked to stop at once. */
static int wait_idle(http_server *h, const sigset_t *set, double seconds) {
    double until = now_s() + seconds;
    while (http_active(h) > 0 && now_s() < until) {
        struct timespec ts = {0, 50 * 1000000L};
        int sig = sigtimedwait(set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) return 1;
    }
    return 0;
}

int tela_serve(const tela_serve_params *p) {
    /* Signals go to this thread's sigwait, never to a handler: blocked
     * before any thread starts, so every thread inherits the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    app a;
    memset(&a, 0, sizeof a);
    http_server *h = NULL;
    http_route *routes = NULL;
    char *model_route = NULL;

    tela_model_params mp = tela_model_default_params();
    mp.n_threads = p->n_threads;
    mp.device = p->device;
    mp.tensor_parallel = p->tensor_parallel;
    mp.verbose = 1;
    mp.load_mtp = p->spec.method == TELA_SPEC_MTP;
    mp.mtp_draft_vocab = p->mtp_draft_vocab;
    if (tela_model_load(p->model_path, &mp, &a.model) != TELA_OK) {
        fprintf(stderr, "tela serve: %s\n", tela_last_error());
        goto done;
    }
    a.info = tela_model_get_info(a.model);
    if (!a.info->has_tokenizer) {
        fprintf(stderr, "tela serve: the model %s has no tokenizer; the server needs one\n", p->model_path);
        goto done;
    }
    if (p->spec.method == TELA_SPEC_MTP && a.info->n_mtp_layers == 0) {
        fprintf(stderr, "tela serve: --spec mtp: %s has no multi-token-prediction (nextn) block; --spec ngram drafts "
                        "with any model\n", p->model_path);
        goto done;
    }
    if (p->spec.method == TELA_SPEC_DRAFT) {
        tela_model_params dp = tela_model_default_params();
        dp.n_threads = p->n_threads;
        dp.device = p->device;
        dp.verbose = 1;
        if (!p->draft_path || tela_model_load(p->draft_path, &dp, &a.draft) != TELA_OK) {
            fprintf(stderr, "tela serve: --draft: %s\n", p->draft_path ? tela_last_error() : "a draft model is needed");
            goto done;
        }
    }
    tela_engine_params ep = p->engine;
    if (!ep.n_threads) ep.n_threads = p->n_threads;
    ep.draft_model = a.draft;
    if (tela_engine_create(a.model, &ep, &a.engine) != TELA_OK) {
        fprintf(stderr, "tela serve: cannot start the engine: %s\n", tela_last_error());
        goto done;
    }
    model_id_of(p->model_path, a.model_id, sizeof a.model_id);
    a.n_ctx = tela_engine_n_ctx(a.engine);
    a.n_vocab = a.info->n_vocab;
    a.spec = p->spec;
    a.adds_bos = tokenizer_adds_bos(a.model, a.info->bos_token);
    a.created = (long long)time(NULL);
    a.t_start = now_s();
    a.jobs = gen_registry_create();
    a.metrics = metrics_create();
    a.replies = reply_memory_create(64);
    if (!a.jobs || !a.metrics || make_pieces(&a)) {
        fprintf(stderr, "tela serve: out of memory\n");
        goto done;
    }

    size_t mr_len = strlen("/v1/models/") + strlen(a.model_id) + 1;
    model_route = malloc(mr_len);
    if (!model_route) goto done;
    snprintf(model_route, mr_len, "/v1/models/%s", a.model_id);
    const http_route table[] = {
        {"GET", "/", api_chat_page, 1, 0, 0},
        {"GET", "/health", api_health, 1, 0, 0},
        {"GET", "/v1/models", api_models, 0, 0, 0},
        {"GET", model_route, api_model, 0, 0, 0},
        {"GET", "/metrics", api_metrics, 0, 0, 0},
        {"POST", "/v1/chat/completions", api_chat_completions, 0, 1, 1},
        {"POST", "/v1/completions", api_completions, 0, 1, 1},
        {"POST", "/tokenize", api_tokenize, 0, 1, 0},
        {"POST", "/detokenize", api_detokenize, 0, 1, 0},
    };
    routes = malloc(sizeof table);
    if (!routes) goto done;
    memcpy(routes, table, sizeof table);

    http_params hp = {
        .host = p->host,
        .port = p->port,
        .api_key = p->api_key,
        .max_body = p->max_body,
        .routes = routes,
        .n_routes = sizeof table / sizeof table[0],
        .app = &a,
        .metrics = a.metrics,
    };
    char err[256];
    if (http_start(&hp, &h, err, sizeof err)) {
        fprintf(stderr, "tela serve: %s\n", err);
        goto done;
    }
    const char *host = p->host ? p->host : "127.0.0.1";
    int v6 = strchr(host, ':') != NULL;
    char spec[1100] = "";
    if (p->spec.method != TELA_SPEC_NONE)
        snprintf(spec, sizeof spec, " | speculative: %s%s, up to %d drafts",
                 p->spec.method == TELA_SPEC_MTP ? "MTP" : p->spec.method == TELA_SPEC_DRAFT ? "draft model " : "prompt lookup",
                 p->spec.method == TELA_SPEC_DRAFT && p->draft_path ? p->draft_path : "", p->spec.draft_max);
    printf("tela serve: listening on http://%s%s%s:%d/ | model %s (%s) | %s | parallel %d | ctx %d%s%s\n",
           v6 ? "[" : "", host, v6 ? "]" : "", http_port(h), a.model_id, a.info->arch,
           a.info->device ? a.info->device : "?", ep.n_parallel > 0 ? ep.n_parallel : 8, a.n_ctx, spec,
           p->api_key && p->api_key[0] ? " | API key required" : "");
    fflush(stdout);

    int sig = 0;
    while (sigwait(&set, &sig) != 0 || (sig != SIGINT && sig != SIGTERM)) {
    }
    fprintf(stderr, "tela serve: %s: stopping; %d request%s under way\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            http_active(h), http_active(h) == 1 ? "" : "s");
    atomic_store(&a.shutting_down, 1);
    http_stop_accepting(h);
    int now = wait_idle(h, &set, p->shutdown_grace);
    if (http_active(h) > 0) {
        fprintf(stderr, "tela serve: cancelling %d request%s%s\n", http_active(h), http_active(h) == 1 ? "" : "s",
                now ? " (second signal)" : " (grace period over)");
        gen_registry_cancel_all(a.jobs);
        wait_idle(h, &set, CANCEL_WAIT_S);
    }
    rc = 0;
done:
    http_free(h);              /* closes the connections; their threads end */
    if (a.engine) tela_engine_free(a.engine); /* the last DONE events free the last jobs */
    free(routes);
    free(model_route);
    free_pieces(&a);
    gen_registry_free(a.jobs);
    metrics_free(a.metrics);
    reply_memory_free(a.replies);
    if (a.model) tela_model_free(a.model);
    if (a.draft) tela_model_free(a.draft);
    if (rc == 0) fprintf(stderr, "tela serve: stopped\n");
    return rc;
}
