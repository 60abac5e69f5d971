/* http.h: the HTTP plumbing of tela serve over libmicrohttpd: a listening
 * socket, one thread per connection, routes (exact paths with a method),
 * the API key, body limits, replies (whole, or pulled piece by piece for
 * server-sent events), the check that a client has gone, the request log
 * line and the per-endpoint request counts. It knows nothing of models or
 * of the API's JSON beyond the error object. */
#ifndef TELA_SERVER_HTTP_H
#define TELA_SERVER_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/api_parse.h"
#include "server/metrics.h"

typedef struct http_server http_server;
typedef struct http_request http_request;

/* A route's handler runs on the connection's thread once the whole body is
 * in; it must reply (http_reply*) unless the client has gone, in which case
 * returning without a reply closes the connection. */
typedef void (*http_handler)(void *app, http_request *req);

typedef struct http_route {
    const char *method;    /* "GET" (HEAD is answered too) or "POST" */
    const char *path;      /* exact */
    http_handler fn;
    int open;              /* answered without the API key (/health, the chat page) */
    int json_body;         /* a JSON body is expected: other content types get 415 */
    int long_running;      /* may take long: no idle timeout while it runs */
} http_route;

typedef struct http_params {
    const char *host;      /* address to listen on, "127.0.0.1" when NULL */
    int port;              /* 0: any free port (http_port says which) */
    const char *api_key;   /* NULL or "": no key needed */
    size_t max_body;       /* bytes; more gets 413 */
    const http_route *routes;
    size_t n_routes;
    void *app;             /* passed to handlers */
    metrics *metrics;      /* request counts by route and status (may be NULL) */
} http_params;

/* Binds and starts serving: 0, or -1 with the reason in err. */
int http_start(const http_params *p, http_server **out, char *err, size_t errcap);
int http_port(const http_server *s);
/* Stops accepting connections (the listening socket is closed); requests
 * under way go on, and replies from now on close their connection. */
void http_stop_accepting(http_server *s);
/* Requests received and not yet completed. */
int http_active(http_server *s);
/* Closes every connection and frees the server (after the requests end). */
void http_free(http_server *s);

/* ---- for handlers */
const char *http_body(const http_request *r, size_t *len);  /* NUL-terminated */
const char *http_header(const http_request *r, const char *name);
/* The whole reply (data copied). */
void http_reply(http_request *r, int status, const char *content_type, const void *data, size_t len);
/* A JSON reply: the text of cJSON_PrintUnformatted, taken over (freed). */
void http_reply_json_text(http_request *r, int status, char *json);
void http_reply_error(http_request *r, const api_error *e);

/* A reply pulled in pieces (server-sent events): pull fills buf with up to
 * max bytes and returns how many (> 0), HTTP_PULL_END at the end, or
 * HTTP_PULL_ABORT to cut the connection. It runs on the connection's
 * thread and may block (http_client_gone says when to stop waiting).
 * done is called once, when the server no longer needs cls. */
#define HTTP_PULL_END ((ssize_t)-1)
#define HTTP_PULL_ABORT ((ssize_t)-2)
typedef ssize_t (*http_pull_fn)(void *cls, char *buf, size_t max);
void http_reply_stream(http_request *r, int status, const char *content_type, http_pull_fn pull, void (*done)(void *),
                       void *cls);

/* 1 when the client has closed its side of the connection (or it broke). */
int http_client_gone(http_request *r);

/* What the request's log line reports beyond method, path, status, time. */
typedef struct http_log_info {
    int has_tokens;
    int32_t prompt_tokens, cached_tokens, generated_tokens;
    double first_token_seconds;  /* < 0: none */
    double tokens_per_second;    /* generation speed */
    const char *note;            /* a static string: "client gone", ... */
} http_log_info;
void http_set_log_info(http_request *r, const http_log_info *info);
/* The request's number in the log. */
uint64_t http_request_id(const http_request *r);

#endif
