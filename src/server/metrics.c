/* metrics.c: request counters (by endpoint and HTTP status, under one
 * mutex) and the Prometheus text exposition of them and of the engine's
 * statistics (tela_engine_get_stats). */
#include "server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct count_row {
    const char *endpoint;
    int status;
    unsigned long long n;
} count_row;

struct metrics {
    pthread_mutex_t mu;
    count_row *rows;
    size_t n_rows, cap;
};

metrics *metrics_create(void) {
    metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void metrics_free(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m->rows);
    free(m);
}

/* Endpoints are a fixed set (the routes and "other") and statuses the few
 * the server answers with, so the rows stay few and a linear search does. */
void metrics_count_request(metrics *m, const char *endpoint, int status) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    size_t i = 0;
    while (i < m->n_rows && !(m->rows[i].status == status && !strcmp(m->rows[i].endpoint, endpoint))) i++;
    if (i == m->n_rows) {
        if (m->n_rows == m->cap) {
            size_t cap = m->cap ? 2 * m->cap : 16;
            count_row *nr = realloc(m->rows, cap * sizeof *nr);
            if (!nr) {
                pthread_mutex_unlock(&m->mu);
                return;
            }
            m->rows = nr;
            m->cap = cap;
        }
        m->rows[i] = (count_row){endpoint, status, 0};
        m->n_rows++;
    }
    m->rows[i].n++;
    pthread_mutex_unlock(&m->mu);
}

typedef struct text {
    char *s;
    size_t len, cap;
    int oom;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if (t->s && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap : 4096;
        while (cap <= t->len + (size_t)n) cap *= 2;
        char *ns = realloc(t->s, cap);
        if (!ns) {
            t->oom = 1;
            return;
        }
        t->s = ns;
        t->cap = cap;
    }
}

static void metric(text *t, const char *name, const char *type, const char *help, unsigned long long v) {
    add(t, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

char *metrics_render(metrics *m, const tela_engine_stats *st, double uptime_seconds) {
    text t = {0};
    add(&t, "# HELP tela_http_requests_total HTTP requests answered, by endpoint and status.\n"
            "# TYPE tela_http_requests_total counter\n");
    if (m) {
        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < m->n_rows; i++)
            add(&t, "tela_http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->rows[i].endpoint,
                m->rows[i].status, m->rows[i].n);
        pthread_mutex_unlock(&m->mu);
    }
    add(&t, "# HELP tela_uptime_seconds Seconds since the server started.\n# TYPE tela_uptime_seconds gauge\n"
            "tela_uptime_seconds %.3f\n", uptime_seconds);
    if (st) {
        metric(&t, "tela_prompt_tokens_total", "counter", "Prompt tokens of finished and running requests.",
               st->prompt_tokens);
        metric(&t, "tela_cached_tokens_total", "counter", "Prompt tokens taken from the prefix cache, not computed.",
               st->cached_tokens);
        metric(&t, "tela_generated_tokens_total", "counter", "Tokens generated.", st->generated_tokens);
        metric(&t, "tela_running_sequences", "gauge", "Sequences being computed.", (unsigned long long)st->running);
        metric(&t, "tela_waiting_requests", "gauge", "Requests queued for the engine.",
               (unsigned long long)st->waiting);
        metric(&t, "tela_kv_block_size", "gauge", "Positions per KV-cache block.", (unsigned long long)st->block_size);
        metric(&t, "tela_kv_blocks_total", "gauge", "KV-cache blocks.", (unsigned long long)st->kv_blocks_total);
        metric(&t, "tela_kv_blocks_used", "gauge", "KV-cache blocks held by running sequences.",
               (unsigned long long)st->kv_blocks_used);
        metric(&t, "tela_kv_blocks_cached", "gauge", "KV-cache blocks held only by the prefix cache.",
               (unsigned long long)st->kv_blocks_cached);
        metric(&t, "tela_prefix_cache_hits_total", "counter", "Requests that reused a cached prefix.",
               st->prefix_hits);
        metric(&t, "tela_preemptions_total", "counter", "Sequences set back to waiting to free KV blocks.",
               st->preemptions);
        metric(&t, "tela_engine_steps_total", "counter", "Engine steps computed.", st->steps);
        metric(&t, "tela_spec_draft_tokens_total", "counter",
               "Speculative decoding: tokens drafted (finished requests).", st->draft_tokens);
        metric(&t, "tela_spec_accepted_tokens_total", "counter", "Speculative decoding: drafted tokens accepted.",
               st->accepted_tokens);
        metric(&t, "tela_checkpoints", "gauge", "Recurrent-state checkpoints held (hybrid models).", st->checkpoints);
        metric(&t, "tela_checkpoint_bytes", "gauge", "Bytes of those checkpoints.", st->checkpoint_bytes);
        metric(&t, "tela_requests_finished_total", "counter", "Engine requests ended, whatever the reason.",
               st->requests_finished);
        metric(&t, "tela_requests_cancelled_total", "counter", "Engine requests cancelled.", st->requests_cancelled);
        metric(&t, "tela_requests_failed_total", "counter", "Engine requests that failed.", st->requests_failed);
    }
    if (t.oom) {
        free(t.s);
        return NULL;
    }
    return t.s;
}
