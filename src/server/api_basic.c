/* api_basic.c: the endpoints that generate nothing: GET /health, GET
 * /v1/models (and /v1/models/ID), GET /metrics, POST /tokenize, POST
 * /detokenize (llama-server's shapes) and the chat page at GET /. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api_output.h"
#include "server/app.h"

static void reply_json(http_request *req, int status, cJSON *obj) {
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    http_reply_json_text(req, status, text);
}

static void reply_oom(http_request *req) {
    api_error e;
    api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
    http_reply_error(req, &e);
}

void api_health(void *ap, http_request *req) {
    app *a = ap;
    if (atomic_load(&a->shutting_down)) {
        static const char body[] = "{\"status\":\"shutting down\"}";
        http_reply(req, 503, "application/json", body, sizeof body - 1);
        return;
    }
    static const char body[] = "{\"status\":\"ok\"}";
    http_reply(req, 200, "application/json", body, sizeof body - 1);
}

static cJSON *model_object(const app *a) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", a->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)a->created);
    cJSON_AddStringToObject(m, "owned_by", "tela");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    if (meta) {
        cJSON_AddStringToObject(meta, "arch", a->info->arch ? a->info->arch : "");
        cJSON_AddStringToObject(meta, "name", a->info->name ? a->info->name : "");
        cJSON_AddNumberToObject(meta, "n_ctx", a->n_ctx);
        cJSON_AddNumberToObject(meta, "n_ctx_train", a->info->n_ctx_train);
        cJSON_AddNumberToObject(meta, "n_vocab", a->n_vocab);
        cJSON_AddNumberToObject(meta, "n_params", (double)a->info->n_params);
        cJSON_AddStringToObject(meta, "file_type", a->info->file_type ? a->info->file_type : "");
        cJSON_AddStringToObject(meta, "device", a->info->device ? a->info->device : "");
    }
    return m;
}

void api_models(void *ap, http_request *req) {
    app *a = ap;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    if (data) cJSON_AddItemToArray(data, model_object(a));
    reply_json(req, 200, root);
}

void api_model(void *ap, http_request *req) { reply_json(req, 200, model_object(ap)); }

static double uptime(const app *a) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9 - a->t_start;
}

void api_metrics(void *ap, http_request *req) {
    app *a = ap;
    tela_engine_stats st;
    memset(&st, 0, sizeof st);
    tela_engine_get_stats(a->engine, &st);
    char *text = metrics_render(a->metrics, &st, uptime(a));
    if (!text) {
        reply_oom(req);
        return;
    }
    http_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, strlen(text));
    free(text);
}

void api_tokenize(void *ap, http_request *req) {
    app *a = ap;
    size_t len;
    const char *body = http_body(req, &len);
    api_tokenize_request r;
    api_error err;
    if (api_parse_tokenize(body, len, &r, &err)) {
        http_reply_error(req, &err);
        return;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (api_tokenize_text(a, r.content, r.content_len, r.add_special, r.parse_special, &ids, &n) != TELA_OK) {
        api_fail(&err, 500, "server_error", NULL, NULL, "cannot tokenize: %s", tela_last_error());
        http_reply_error(req, &err);
        api_tokenize_request_free(&r);
        return;
    }
    cJSON *root = cJSON_CreateObject(), *toks = cJSON_AddArrayToObject(root, "tokens");
    for (size_t i = 0; toks && i < n; i++) {
        if (!r.with_pieces) {
            cJSON_AddItemToArray(toks, cJSON_CreateNumber(ids[i]));
            continue;
        }
        /* llama-server's shape: the piece as a string, or as its bytes
         * when it is not valid UTF-8 on its own. */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", ids[i]);
        const char *p = ids[i] < a->n_vocab ? a->pieces[ids[i]] : NULL;
        size_t pl = p ? a->piece_lens[ids[i]] : 0;
        if (api_utf8_check(p ? p : "", pl) == pl) {
            cJSON_AddItemToObject(o, "piece", api_json_text(p ? p : "", pl));
        } else {
            cJSON *b = cJSON_AddArrayToObject(o, "piece");
            for (size_t k = 0; b && k < pl; k++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)p[k]));
        }
        cJSON_AddItemToArray(toks, o);
    }
    free(ids);
    api_tokenize_request_free(&r);
    reply_json(req, 200, root);
}

void api_detokenize(void *ap, http_request *req) {
    app *a = ap;
    size_t len;
    const char *body = http_body(req, &len);
    api_detokenize_request r;
    api_error err;
    if (api_parse_detokenize(body, len, a->n_vocab, &r, &err)) {
        http_reply_error(req, &err);
        return;
    }
    char *text = NULL;
    if (tela_detokenize(a->model, r.tokens, r.n_tokens, 0, &text) != TELA_OK) {
        api_fail(&err, 400, NULL, "invalid_value", "tokens", "cannot detokenize: %s", tela_last_error());
        http_reply_error(req, &err);
        api_detokenize_request_free(&r);
        return;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "content", api_json_text(text, strlen(text)));
    free(text);
    api_detokenize_request_free(&r);
    reply_json(req, 200, root);
}

void api_chat_page(void *ap, http_request *req) {
    (void)ap;
    http_reply(req, 200, "text/html; charset=utf-8", tela_chat_page, tela_chat_page_len);
}
