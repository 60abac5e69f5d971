/* http.c: tela serve's HTTP layer over libmicrohttpd (see http.h): the
 * listening socket (bound here, so a failure names its reason and port 0
 * can report the port it got), MHD in thread-per-connection mode (a handler
 * may block until its generation ends; streamed replies block in their pull
 * function), routing, the API key, body limits, replies, disconnect
 * detection, the log line and request counts. */
#include "server/http.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IDLE_TIMEOUT_S 60               /* an idle keep-alive connection, or a stalled upload */
#define STREAM_BLOCK 16384              /* the most bytes a pull gets at once */
#define MAX_CONNECTIONS 512
#define DISCARD_LIMIT (64u << 20)       /* body bytes dropped past max_body before the connection is cut */

struct http_server {
    struct MHD_Daemon *daemon;
    int listen_fd;
    int port;
    char *api_key;
    size_t max_body;
    const http_route *routes;
    size_t n_routes;
    void *app;
    metrics *metrics;
    atomic_int active;
    atomic_int stopping;
    atomic_uint_fast64_t next_id;
};

struct http_request {
    http_server *server;
    struct MHD_Connection *conn;
    uint64_t id;
    double t0;
    char method[16];
    char path[128];              /* for the log: printable ASCII only, cut short */
    const http_route *route;
    const char *endpoint;        /* the metrics label */
    char *body;
    size_t body_len, body_cap;
    size_t discarded;            /* bytes past max_body */
    int too_large;
    int replied;
    int status;
    enum MHD_Result queued;
    int no_timeout;              /* the idle timeout was lifted for a long request */
    http_log_info log;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------- replies */

static void queue(http_request *r, int status, struct MHD_Response *resp, const char *content_type) {
    if (!resp) {
        r->replied = 1;
        r->status = status;
        r->queued = MHD_NO;
        return;
    }
    if (content_type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (atomic_load(&r->server->stopping)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 405 && r->route) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->route->method);
    r->queued = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->replied = 1;
    r->status = status;
}

void http_reply(http_request *r, int status, const char *content_type, const void *data, size_t len) {
    if (r->replied) return;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    queue(r, status, resp, content_type);
}

void http_reply_json_text(http_request *r, int status, char *json) {
    if (!json) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":null}}";
        http_reply(r, 500, "application/json", oom, sizeof oom - 1);
        return;
    }
    size_t n = strlen(json);
    if (r->replied) {
        free(json);
        return;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, json, MHD_RESPMEM_MUST_FREE);
    if (!resp) free(json);
    queue(r, status, resp, "application/json");
}

void http_reply_error(http_request *r, const api_error *e) {
    cJSON *root = cJSON_CreateObject(), *err = cJSON_CreateObject();
    if (root && err) {
        cJSON_AddItemToObject(root, "error", err);
        err = NULL;
        cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "error");
        cJSON_AddItemToObject(o, "message", api_json_text(e->message, strlen(e->message)));
        cJSON_AddStringToObject(o, "type", e->type ? e->type : "invalid_request_error");
        cJSON_AddItemToObject(o, "param", e->param[0] ? api_json_text(e->param, strlen(e->param)) : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "code", e->code[0] ? api_json_text(e->code, strlen(e->code)) : cJSON_CreateNull());
    }
    cJSON_Delete(err);
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    http_reply_json_text(r, e->status, text);
}

static void reply_errorf(http_request *r, int status, const char *code, const char *fmt, const char *a,
                         const char *b) {
    api_error e;
    api_fail(&e, status, status >= 500 ? "server_error" : "invalid_request_error", code, NULL, fmt, a, b);
    http_reply_error(r, &e);
}

typedef struct stream_box {
    http_pull_fn pull;
    void (*done)(void *);
    void *cls;
} stream_box;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_box *b = cls;
    for (;;) {
        ssize_t n = b->pull(b->cls, buf, max);
        if (n == HTTP_PULL_END) return MHD_CONTENT_READER_END_OF_STREAM;
        if (n < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (n > 0) return n;
    }
}

static void stream_free(void *cls) {
    stream_box *b = cls;
    if (b->done) b->done(b->cls);
    free(b);
}

void http_reply_stream(http_request *r, int status, const char *content_type, http_pull_fn pull, void (*done)(void *),
                       void *cls) {
    stream_box *b = r->replied ? NULL : malloc(sizeof *b);
    struct MHD_Response *resp = NULL;
    if (b) {
        *b = (stream_box){pull, done, cls};
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, b, stream_free);
        if (!resp) free(b);
    }
    if (!resp) {
        if (done) done(cls);
        reply_errorf(r, 500, NULL, "cannot start the stream%s%s", "", "");
        return;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    queue(r, status, resp, content_type);
}

int http_client_gone(http_request *r) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0) return 0;
    if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
    if (pfd.revents & POLLIN) {
        /* Readable: a pipelined request, or the end of the stream. */
        char c;
        ssize_t n = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return 0;
}

const char *http_body(const http_request *r, size_t *len) {
    *len = r->body_len;
    return r->body ? r->body : "";
}

const char *http_header(const http_request *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

void http_set_log_info(http_request *r, const http_log_info *info) { r->log = *info; }

uint64_t http_request_id(const http_request *r) { return r->id; }

/* ------------------------------------------------------------- requests */

/* The API key from "Authorization: Bearer KEY", compared in constant time
 * (for keys of the same length). */
static int authorized(const http_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h) return 0;
    while (*h == ' ') h++;
    if (strncasecmp(h, "Bearer ", 7) != 0) return 0;
    h += 7;
    while (*h == ' ') h++;
    size_t n = strlen(h), k = strlen(s->api_key);
    while (n > 0 && h[n - 1] == ' ') n--;
    unsigned char diff = n != k;
    for (size_t i = 0; i < k; i++) diff |= (unsigned char)(s->api_key[i] ^ (i < n ? h[i] : 0));
    return diff == 0;
}

static void copy_printable(char *dst, size_t cap, const char *src) {
    size_t o = 0;
    for (const char *p = src ? src : ""; *p && o + 4 < cap; p++) {
        unsigned char ch = (unsigned char)*p;
        dst[o++] = ch >= 0x21 && ch < 0x7F ? (char)ch : '?';
    }
    if (src && strlen(src) > o && o + 4 >= cap) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
}

/* Whether the Content-Type names JSON (or is absent). */
static int json_content_type(struct MHD_Connection *c) {
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct) return 1;
    while (*ct == ' ') ct++;
    size_t n = strcspn(ct, ";");
    while (n > 0 && ct[n - 1] == ' ') n--;
    return n == 16 && !strncasecmp(ct, "application/json", 16);
}

/* The first call for a request (headers in, no body yet): route, method,
 * key and declared length are checked here, so a bad request is answered
 * before its body is read. */
static void first_call(http_server *s, http_request *r, const char *url, const char *method) {
    int is_head = !strcmp(method, "HEAD");
    const http_route *path_match = NULL;
    for (size_t i = 0; i < s->n_routes; i++) {
        const http_route *rt = &s->routes[i];
        if (strcmp(rt->path, url) != 0) continue;
        path_match = rt;
        if (!strcmp(rt->method, method) || (is_head && !strcmp(rt->method, "GET"))) {
            r->route = rt;
            break;
        }
    }
    if (!r->route) {
        r->route = path_match;
        r->endpoint = path_match ? path_match->path : "other";
        if (path_match)
            reply_errorf(r, 405, "method_not_allowed", "%s is not allowed on %s", r->method, r->path);
        else
            reply_errorf(r, 404, "not_found", "no such endpoint: %s %s", r->method, r->path);
        return;
    }
    r->endpoint = r->route->path;
    if (!r->route->open && !authorized(s, r->conn)) {
        reply_errorf(r, 401, "invalid_api_key", "%s%s",
                     http_header(r, MHD_HTTP_HEADER_AUTHORIZATION) ? "incorrect API key provided"
                                                                    : "an API key is required: send the header "
                                                                      "'Authorization: Bearer KEY'",
                     "");
        return;
    }
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (!errno && end != cl && n > s->max_body) {
            char lim[64];
            snprintf(lim, sizeof lim, "%zu", s->max_body);
            reply_errorf(r, 413, "request_too_large", "the request body is %s bytes; the limit is %s bytes (--max-body)",
                         cl, lim);
            return;
        }
        if (!errno && end != cl && n > 0) {
            r->body = malloc((size_t)n + 1);
            if (r->body) r->body_cap = (size_t)n + 1;
        }
    }
    if (r->route->json_body && !json_content_type(r->conn)) {
        reply_errorf(r, 415, "unsupported_media_type", "the body must be JSON (Content-Type: application/json), not '%s'%s",
                     http_header(r, MHD_HTTP_HEADER_CONTENT_TYPE), "");
        return;
    }
}

/* Appends upload data to the body, up to max_body; past it, drops them. */
static int take_body(http_server *s, http_request *r, const char *data, size_t n) {
    if (r->too_large || r->body_len + n > s->max_body) {
        r->too_large = 1;
        r->discarded += n;
        return r->discarded <= DISCARD_LIMIT;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 4096;
        while (cap < r->body_len + n + 1) cap *= 2;
        char *nb = realloc(r->body, cap);
        if (!nb) return 0;
        r->body = nb;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return 1;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    http_server *s = cls;
    http_request *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->server = s;
        r->conn = c;
        r->t0 = now_s();
        r->id = atomic_fetch_add(&s->next_id, 1) + 1;
        r->log.first_token_seconds = -1;
        copy_printable(r->method, sizeof r->method, method);
        copy_printable(r->path, sizeof r->path, url);
        r->endpoint = "other";
        *con_cls = r;
        atomic_fetch_add(&s->active, 1);
        first_call(s, r, url ? url : "", method ? method : "");
        return r->replied ? r->queued : MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->replied) return MHD_YES;
        return take_body(s, r, upload, n) ? MHD_YES : MHD_NO;
    }
    if (r->replied) return r->queued;
    if (r->too_large) {
        char got[32], lim[32];
        snprintf(got, sizeof got, "%zu", r->body_len + r->discarded);
        snprintf(lim, sizeof lim, "%zu", s->max_body);
        reply_errorf(r, 413, "request_too_large", "the request body is %s bytes; the limit is %s bytes (--max-body)",
                     got, lim);
        return r->queued;
    }
    if (r->route->long_running) {
        /* MHD counts the time a handler blocks as idleness: lift the idle
         * timeout while this request runs (on_completed restores it). */
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        r->no_timeout = 1;
    }
    r->route->fn(s->app, r);
    if (!r->replied) {
        r->log.note = r->log.note ? r->log.note : "client gone";
        return MHD_NO;
    }
    return r->queued;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    http_server *s = cls;
    http_request *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    if (r->no_timeout && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S);
    const char *note = r->log.note;
    if (!note && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        note = toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT || toe == MHD_REQUEST_TERMINATED_READ_ERROR ? "client gone"
               : toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED                                        ? "timed out"
               : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN                                         ? "shutdown"
                                                                                                       : "cut short";
    double dt = now_s() - r->t0;
    char extra[200] = "";
    if (r->log.has_tokens) {
        int k = snprintf(extra, sizeof extra, " | prompt %d (cached %d) generated %d", r->log.prompt_tokens,
                         r->log.cached_tokens, r->log.generated_tokens);
        if (r->log.first_token_seconds >= 0 && k > 0 && (size_t)k < sizeof extra)
            k += snprintf(extra + k, sizeof extra - (size_t)k, " | first token %.3f s | %.1f tok/s",
                          r->log.first_token_seconds, r->log.tokens_per_second);
    }
    fprintf(stderr, "tela serve: #%llu %s %s %d %.3f s%s%s%s\n", (unsigned long long)r->id, r->method, r->path,
            r->replied ? r->status : 0, dt, extra, note ? " | " : "", note ? note : "");
    if (r->replied) metrics_count_request(s->metrics, r->endpoint, r->status);
    free(r->body);
    free(r);
    atomic_fetch_sub(&s->active, 1);
}

/* ---------------------------------------------------------------- server */

/* A listening socket on host:port (port 0: the kernel picks one). */
static int bind_socket(const char *host, int port, int *out_fd, int *out_port, int *ipv6, char *err, size_t cap) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int gr = getaddrinfo(host, ps, &hints, &res);
    if (gr != 0 || !res) {
        snprintf(err, cap, "cannot resolve host '%s': %s", host, gai_strerror(gr));
        return -1;
    }
    int fd = -1, e = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0) {
            *ipv6 = ai->ai_family == AF_INET6;
            break;
        }
        e = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, cap, "cannot listen on %s:%d: %s", host, port, strerror(e));
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *out_port = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *out_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                             : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *out_fd = fd;
    return 0;
}

int http_start(const http_params *p, http_server **out, char *err, size_t errcap) {
    *out = NULL;
    http_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    s->listen_fd = -1;
    s->max_body = p->max_body;
    s->routes = p->routes;
    s->n_routes = p->n_routes;
    s->app = p->app;
    s->metrics = p->metrics;
    if (p->api_key && p->api_key[0] && !(s->api_key = strdup(p->api_key))) {
        free(s);
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    int ipv6 = 0;
    if (bind_socket(p->host ? p->host : "127.0.0.1", p->port, &s->listen_fd, &s->port, &ipv6, err, errcap)) {
        free(s->api_key);
        free(s);
        return -1;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL;
    if (ipv6) flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s, MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                                 (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, errcap, "libmicrohttpd would not start on port %d", s->port);
        close(s->listen_fd);
        free(s->api_key);
        free(s);
        return -1;
    }
    s->listen_fd = -1; /* the daemon's now: MHD_quiesce_daemon hands it back, MHD_stop_daemon closes it */
    *out = s;
    return 0;
}

int http_port(const http_server *s) { return s->port; }

void http_stop_accepting(http_server *s) {
    if (!s || atomic_exchange(&s->stopping, 1)) return;
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

int http_active(http_server *s) { return s ? atomic_load(&s->active) : 0; }

void http_free(http_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->daemon);
    free(s->api_key);
    free(s);
}
