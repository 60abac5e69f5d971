/* loadgen.c: tela-loadgen, a load generator for OpenAI-compatible servers
 * (tela serve, llama-server, vLLM): C concurrent streams, each sending R
 * streamed completion requests one after another, and a report of the
 * aggregate generated tokens per second, each stream's speed and the time
 * to first token (p50, p99).
 *
 * It speaks plain HTTP/1.1 over TCP (no TLS), reads the SSE stream of
 * POST /v1/completions (or /v1/chat/completions with --chat, or
 * llama-server's /completion with --native), counts a token per chunk with
 * text (the usage of the last chunk, when the server sends it, wins) and
 * measures on a monotonic clock. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tela/tela.h"

typedef struct {
    const char *host, *port, *path, *model, *api_key;
    char *bias;    /* the requests' logit_bias member (",\"logit_bias\":...") or "" */
    int concurrency, requests, max_tokens, prompt_words, chat, native, json, ignore_eos;
    double temperature;
} options;

typedef struct {
    double ttft, seconds;
    long tokens;
    int ok;
} sample;

typedef struct {
    const options *o;
    int stream;
    sample *out; /* requests samples */
} worker;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tela-loadgen [--host H] [--port P] [-c STREAMS] [-r REQUESTS] [-n MAX_TOKENS] [-p WORDS]\n"
               "                    [--chat] [--model NAME] [--api-key KEY] [--temp T] [--ignore-eos] [--json]\n\n"
               "Sends streamed completion requests to an OpenAI-compatible server: STREAMS\n"
               "connections at once, each sending REQUESTS requests one after another, and\n"
               "reports the aggregate generated tokens/s, tokens/s per stream and the time to\n"
               "first token (p50 / p99).\n\n"
               "options:\n"
               "      --host H        server address (default 127.0.0.1)\n"
               "      --port P        server port (default 8080)\n"
               "  -c, --concurrency N streams at once (default 8)\n"
               "  -r, --requests N    requests per stream (default 4)\n"
               "  -n, --max-tokens N  tokens per request (default 128)\n"
               "  -p, --prompt-words N words in each prompt (default 32; each stream's prompt differs)\n"
               "      --chat          POST /v1/chat/completions (default: /v1/completions)\n"
               "      --native        POST /completion, llama-server's own endpoint (n_predict, ignore_eos)\n"
               "      --model NAME    the request's model field (default \"default\")\n"
               "      --api-key KEY   sent as Authorization: Bearer KEY\n"
               "      --temp T        temperature (default 0: greedy)\n"
               "      --ignore-eos    ask the server to ignore end-of-generation tokens (llama-server's and\n"
               "                      tela's extension), so every request generates MAX_TOKENS\n"
               "      --ban-invalid-utf8 MODEL\n"
               "                      send a logit_bias banning the tokens of MODEL whose text alone is not\n"
               "                      valid UTF-8 (random-weight models string them into invalid text)\n"
               "      --json          one JSON object instead of the table\n"
               "  -h, --help          this help\n");
}

static int connect_to(const char *host, const char *port) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, 0);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A growing byte buffer for what the server sends. */
typedef struct {
    char *buf;
    size_t len, cap, pos;
} rbuf;

static int rb_fill(rbuf *b, int fd) {
    if (b->pos > 0 && b->pos == b->len) b->pos = b->len = 0;
    if (b->len + 4096 > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 65536;
        char *nb = realloc(b->buf, cap);
        if (!nb) return -1;
        b->buf = nb;
        b->cap = cap;
    }
    ssize_t r;
    do r = recv(fd, b->buf + b->len, b->cap - b->len - 1, 0);
    while (r < 0 && errno == EINTR);
    if (r <= 0) return -1;
    b->len += (size_t)r;
    b->buf[b->len] = '\0';
    return 0;
}

/* The next line (without CRLF) of the raw stream, or NULL at the end. */
static char *rb_line(rbuf *b, int fd) {
    for (;;) {
        char *nl = memchr(b->buf + b->pos, '\n', b->len - b->pos);
        if (nl) {
            char *line = b->buf + b->pos;
            *nl = '\0';
            if (nl > line && nl[-1] == '\r') nl[-1] = '\0';
            b->pos = (size_t)(nl - b->buf) + 1;
            return line;
        }
        if (b->pos > 0) { /* keep the partial line at the front */
            memmove(b->buf, b->buf + b->pos, b->len - b->pos);
            b->len -= b->pos;
            b->pos = 0;
        }
        if (rb_fill(b, fd) != 0) return NULL;
    }
}

/* The body of a response as lines: raw, or decoded from HTTP/1.1 chunked
 * transfer encoding (whose chunk borders fall anywhere, also inside a
 * line). */
typedef struct {
    rbuf *raw;
    int fd;
    bool chunked;
    long left;      /* bytes left in the current chunk */
    bool end;       /* the last (empty) chunk was read */
    rbuf out;       /* decoded bytes */
} body_reader;

/* Appends up to n bytes of the raw stream (after what is buffered) to out;
 * -1 at the end. */
static int raw_take(body_reader *r, long n) {
    rbuf *b = r->raw;
    if (b->pos == b->len && rb_fill(b, r->fd) != 0) return -1;
    long avail = (long)(b->len - b->pos);
    if (avail > n) avail = n;
    rbuf *o = &r->out;
    if (o->len + (size_t)avail + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 65536;
        while (cap < o->len + (size_t)avail + 1) cap *= 2;
        char *nb = realloc(o->buf, cap);
        if (!nb) return -1;
        o->buf = nb;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, b->buf + b->pos, (size_t)avail);
    o->len += (size_t)avail;
    o->buf[o->len] = '\0';
    b->pos += (size_t)avail;
    return (int)avail;
}

static char *body_line(body_reader *r) {
    rbuf *o = &r->out;
    for (;;) {
        char *nl = o->buf ? memchr(o->buf + o->pos, '\n', o->len - o->pos) : NULL;
        if (nl) {
            char *line = o->buf + o->pos;
            *nl = '\0';
            if (nl > line && nl[-1] == '\r') nl[-1] = '\0';
            o->pos = (size_t)(nl - o->buf) + 1;
            return line;
        }
        if (o->pos > 0) {
            memmove(o->buf, o->buf + o->pos, o->len - o->pos);
            o->len -= o->pos;
            o->pos = 0;
        }
        if (!r->chunked) {
            if (raw_take(r, 1 << 20) < 0) return NULL;
            continue;
        }
        if (r->end) return NULL;
        if (r->left == 0) { /* a chunk-size line */
            char *sz = rb_line(r->raw, r->fd);
            if (sz && !*sz) sz = rb_line(r->raw, r->fd); /* the CRLF after the previous chunk */
            if (!sz) return NULL;
            r->left = strtol(sz, NULL, 16);
            if (r->left <= 0) {
                r->end = true;
                continue;
            }
        }
        const int got = raw_take(r, r->left);
        if (got < 0) return NULL;
        r->left -= got;
    }
}

/* One streamed request; fills s. */
static void one_request(const options *o, int stream, int k, sample *s) {
    memset(s, 0, sizeof s[0]);
    char prompt[8192];
    size_t pl = 0;
    static const char *words[] = {"river", "stone", "light", "garden", "city", "north", "winter", "bread",
                                  "music", "number", "paper", "window", "silver", "forest", "letter", "morning"};
    for (int i = 0; i < o->prompt_words && pl + 16 < sizeof prompt; i++)
        pl += (size_t)snprintf(prompt + pl, sizeof prompt - pl, "%s%s", i ? " " : "",
                               words[(unsigned)(stream * 7 + k * 3 + i * (stream + 5)) % 16]);
    static __thread char *body;
    static __thread size_t body_cap;
    const size_t need = strlen(o->bias) + sizeof prompt + 1024;
    if (need > body_cap) {
        free(body);
        body = malloc(need);
        body_cap = body ? need : 0;
        if (!body) return;
    }
    const size_t bcap = body_cap;
    int bl;
    if (o->native)
        bl = snprintf(body, bcap, "{\"prompt\":\"%s\",\"n_predict\":%d,\"temperature\":%g,\"stream\":true%s%s}", prompt,
                      o->max_tokens, o->temperature, o->ignore_eos ? ",\"ignore_eos\":true" : "", o->bias);
    else if (o->chat)
        bl = snprintf(body, bcap,
                      "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%d,"
                      "\"temperature\":%g,\"stream\":true,\"stream_options\":{\"include_usage\":true}%s%s}",
                      o->model, prompt, o->max_tokens, o->temperature, o->ignore_eos ? ",\"ignore_eos\":true" : "",
                      o->bias);
    else
        bl = snprintf(body, bcap,
                      "{\"model\":\"%s\",\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":%g,\"stream\":true,"
                      "\"stream_options\":{\"include_usage\":true}%s%s}",
                      o->model, prompt, o->max_tokens, o->temperature, o->ignore_eos ? ",\"ignore_eos\":true" : "",
                      o->bias);
    char head[1024];
    char auth[300] = "";
    if (o->api_key) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", o->api_key);
    int hl = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\nAccept: "
                      "text/event-stream\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n",
                      o->path, o->host, o->port, auth, bl);
    const double t0 = now();
    int fd = connect_to(o->host, o->port);
    if (fd < 0) {
        fprintf(stderr, "tela-loadgen: stream %d: cannot connect to %s:%s\n", stream, o->host, o->port);
        return;
    }
    if (send_all(fd, head, (size_t)hl) || send_all(fd, body, (size_t)bl)) {
        close(fd);
        return;
    }
    rbuf b = {0};
    char *line = rb_line(&b, fd);
    int status = 0;
    if (!line || sscanf(line, "HTTP/%*s %d", &status) != 1 || status != 200) {
        fprintf(stderr, "tela-loadgen: stream %d: %s\n", stream, line ? line : "no response");
        free(b.buf);
        close(fd);
        return;
    }
    bool chunked = false;
    while ((line = rb_line(&b, fd)) && *line) /* headers */
        if (!strncasecmp(line, "transfer-encoding:", 18) && strstr(line + 18, "chunked")) chunked = true;
    long chunks = 0, usage = -1;
    /* the body, de-chunked, split into SSE lines */
    body_reader br = {&b, fd, chunked, 0, false, {0}};
    while ((line = body_line(&br))) {
        if (strncmp(line, "data:", 5) != 0) continue;
        const char *d = line + 5;
        while (*d == ' ') d++;
        if (!strcmp(d, "[DONE]")) break;
        const char *u = strstr(d, o->native ? "\"tokens_predicted\":" : "\"completion_tokens\":");
        if (u) usage = strtol(u + (o->native ? 19 : 20), NULL, 10);
        /* a chunk with a token: llama-server's native chunks say so even when
         * its text is empty (a partial UTF-8 character) */
        const char *t = o->native ? strstr(d, "\"tokens\":[") : o->chat ? strstr(d, "\"content\":\"")
                                                                  : strstr(d, "\"text\":\"");
        const int skip = o->native ? 10 : o->chat ? 11 : 8;
        if (t && t[skip] != (o->native ? ']' : '"')) {
            if (chunks == 0) s->ttft = now() - t0;
            chunks++;
        }
        if (o->native && strstr(d, "\"stop\":true")) break;
    }
    s->seconds = now() - t0;
    s->tokens = usage >= 0 ? usage : chunks;
    s->ok = chunks > 0 || usage > 0;
    free(b.buf);
    free(br.out.buf);
    close(fd);
}

static void *run_stream(void *arg) {
    worker *w = arg;
    for (int k = 0; k < w->o->requests; k++) one_request(w->o, w->stream, k, &w->out[k]);
    return NULL;
}

/* Whether s[0..n) is complete, valid UTF-8. */
static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n || (k == 2 && c < 0xc2)) return false;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return false;
        i += k;
    }
    return true;
}

/* The logit_bias member banning every token of the model whose text is not
 * valid UTF-8 on its own (a random-weight model strings such tokens into
 * invalid text, which some servers answer with an error mid-stream). */
static char *ban_invalid_utf8(const char *model_path, int native, int *n_banned) {
    tela_model_params mp = tela_model_default_params();
    mp.device = "cpu";
    tela_model *m = NULL;
    if (tela_model_load(model_path, &mp, &m) != TELA_OK) {
        fprintf(stderr, "tela-loadgen: %s\n", tela_last_error());
        return NULL;
    }
    const int32_t V = tela_model_get_info(m)->n_vocab;
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    len = (size_t)snprintf(out, cap, native ? ",\"logit_bias\":[" : ",\"logit_bias\":{");
    *n_banned = 0;
    for (int32_t id = 0; id < V; id++) {
        char *text = NULL;
        if (tela_detokenize(m, &id, 1, 0, &text) != TELA_OK) continue;
        /* tela_detokenize replaces bytes that are not UTF-8 with U+FFFD */
        const bool ok = valid_utf8((const unsigned char *)text, strlen(text)) && !strstr(text, "\xEF\xBF\xBD");
        free(text);
        if (ok) continue;
        if (len + 32 > cap) {
            cap *= 2;
            char *nb = realloc(out, cap);
            if (!nb) return NULL;
            out = nb;
        }
        len += (size_t)snprintf(out + len, cap - len, native ? "%s[%d,false]" : "%s\"%d\":-100", *n_banned ? "," : "",
                                id);
        (*n_banned)++;
    }
    snprintf(out + len, cap - len, native ? "]" : "}");
    tela_model_free(m);
    return out;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int parse_int(const char *opt, const char *v, int lo, int hi, int *out) {
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) {
        fprintf(stderr, "tela-loadgen: %s needs a number in %d..%d\n", opt, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int main(int argc, char **argv) {
    options o = {"127.0.0.1", "8080", NULL, "default", NULL, "", 8, 4, 128, 32, 0, 0, 0, 0, 0.0};
    const char *ban_model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--host") && v) o.host = argv[++i];
        else if (!strcmp(a, "--port") && v) o.port = argv[++i];
        else if (!strcmp(a, "--model") && v) o.model = argv[++i];
        else if (!strcmp(a, "--api-key") && v) o.api_key = argv[++i];
        else if (!strcmp(a, "--ban-invalid-utf8") && v) ban_model = argv[++i];
        else if (!strcmp(a, "--temp") && v) o.temperature = atof(argv[++i]);
        else if (!strcmp(a, "-c") || !strcmp(a, "--concurrency")) r = parse_int(a, v, 1, 1024, &o.concurrency), i++;
        else if (!strcmp(a, "-r") || !strcmp(a, "--requests")) r = parse_int(a, v, 1, 100000, &o.requests), i++;
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) r = parse_int(a, v, 1, 1 << 20, &o.max_tokens), i++;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt-words")) r = parse_int(a, v, 1, 1000, &o.prompt_words), i++;
        else if (!strcmp(a, "--chat")) o.chat = 1;
        else if (!strcmp(a, "--native")) o.native = 1;
        else if (!strcmp(a, "--ignore-eos")) o.ignore_eos = 1;
        else if (!strcmp(a, "--json")) o.json = 1;
        else {
            fprintf(stderr, "tela-loadgen: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (r) return 2;
    }
    o.path = o.native ? "/completion" : o.chat ? "/v1/chat/completions" : "/v1/completions";
    if (ban_model) {
        int banned = 0;
        o.bias = ban_invalid_utf8(ban_model, o.native, &banned);
        if (!o.bias) return 1;
        fprintf(stderr, "tela-loadgen: %d tokens of %s banned (not valid UTF-8 on their own)\n", banned, ban_model);
    }
    const int n = o.concurrency * o.requests;
    sample *samples = calloc((size_t)n, sizeof *samples);
    worker *w = calloc((size_t)o.concurrency, sizeof *w);
    pthread_t *th = calloc((size_t)o.concurrency, sizeof *th);
    if (!samples || !w || !th) return 1;
    const double t0 = now();
    for (int i = 0; i < o.concurrency; i++) {
        w[i] = (worker){&o, i, samples + (size_t)i * o.requests};
        pthread_create(&th[i], NULL, run_stream, &w[i]);
    }
    for (int i = 0; i < o.concurrency; i++) pthread_join(th[i], NULL);
    const double wall = now() - t0;
    long tokens = 0;
    int ok = 0;
    double *ttft = malloc(sizeof(double) * (size_t)n), per_stream = 0;
    for (int i = 0; i < n; i++) {
        if (!samples[i].ok) continue;
        tokens += samples[i].tokens;
        ttft[ok++] = samples[i].ttft;
        const double gen = samples[i].seconds - samples[i].ttft;
        if (gen > 0 && samples[i].tokens > 1) per_stream += (samples[i].tokens - 1) / gen;
    }
    qsort(ttft, (size_t)ok, sizeof *ttft, cmp_double);
    const double p50 = ok ? ttft[ok / 2] : 0, p99 = ok ? ttft[(int)((ok - 1) * 0.99)] : 0;
    per_stream = ok ? per_stream / ok : 0;
    if (o.json)
        printf("{\"concurrency\": %d, \"requests\": %d, \"ok\": %d, \"max_tokens\": %d, \"tokens\": %ld, "
               "\"seconds\": %.3f, \"aggregate_tps\": %.2f, \"stream_tps\": %.2f, \"ttft_p50\": %.4f, "
               "\"ttft_p99\": %.4f}\n",
               o.concurrency, n, ok, o.max_tokens, tokens, wall, tokens / wall, per_stream, p50, p99);
    else
        printf("| streams | requests | ok | tokens | seconds | aggregate tok/s | tok/s per stream | TTFT p50 | TTFT "
               "p99 |\n| %d | %d | %d | %ld | %.2f | %.2f | %.2f | %.3f s | %.3f s |\n",
               o.concurrency, n, ok, tokens, wall, tokens / wall, per_stream, p50, p99);
    free(ttft);
    if (ban_model) free(o.bias);
    free(samples);
    free(w);
    free(th);
    return ok == n ? 0 : 1;
}
