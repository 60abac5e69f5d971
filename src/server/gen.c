/* gen.c: jobs of engine requests with their event queues, and the registry
 * of live jobs (see gen.h for the lifetime rules). */
#include "server/gen.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct gen_registry {
    pthread_mutex_t mu;
    gen_job *head;
    int count;
};

typedef struct gen_choice {
    gen_job *job;
    int index;
    int submitted;
    int done;
    uint64_t id;
} gen_choice;

struct gen_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    int cancelled;
    int lost;                    /* an event could not be copied */
    int n_choices, n_submitted, n_done;
    gen_choice *choices;
    gen_event *head, *tail;
    tela_engine *engine;
    gen_registry *reg;
    gen_job *prev, *next;        /* in the registry */
};

gen_registry *gen_registry_create(void) {
    gen_registry *r = calloc(1, sizeof *r);
    if (r) pthread_mutex_init(&r->mu, NULL);
    return r;
}

void gen_registry_free(gen_registry *reg) {
    if (!reg) return;
    pthread_mutex_destroy(&reg->mu);
    free(reg);
}

int gen_registry_count(gen_registry *reg) {
    pthread_mutex_lock(&reg->mu);
    int n = reg->count;
    pthread_mutex_unlock(&reg->mu);
    return n;
}

/* The engine and the ids of every live, undone choice, collected under the
 * locks and cancelled after them. A job that ends meanwhile leaves a stale
 * id, which the engine ignores. */
void gen_registry_cancel_all(gen_registry *reg) {
    pthread_mutex_lock(&reg->mu);
    size_t cap = 0, n = 0;
    for (gen_job *j = reg->head; j; j = j->next) cap += (size_t)j->n_choices;
    uint64_t *ids = malloc((cap ? cap : 1) * sizeof *ids);
    tela_engine *engine = NULL;
    for (gen_job *j = reg->head; j && ids; j = j->next) {
        pthread_mutex_lock(&j->mu);
        j->cancelled = 1;
        engine = j->engine;
        for (int i = 0; i < j->n_choices; i++)
            if (j->choices[i].submitted && !j->choices[i].done) ids[n++] = j->choices[i].id;
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&reg->mu);
    for (size_t i = 0; i < n; i++) tela_engine_cancel(engine, ids[i]);
    free(ids);
}

gen_job *gen_job_create(gen_registry *reg, tela_engine *engine, int n_choices) {
    if (n_choices < 1) return NULL;
    gen_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->choices = calloc((size_t)n_choices, sizeof *j->choices);
    if (!j->choices) {
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 1;
    j->n_choices = n_choices;
    j->engine = engine;
    j->reg = reg;
    for (int i = 0; i < n_choices; i++) {
        j->choices[i].job = j;
        j->choices[i].index = i;
    }
    pthread_mutex_lock(&reg->mu);
    j->next = reg->head;
    if (reg->head) reg->head->prev = j;
    reg->head = j;
    reg->count++;
    pthread_mutex_unlock(&reg->mu);
    return j;
}

void gen_event_free(gen_event *ev) {
    if (!ev) return;
    free(ev->text);
    free(ev->error);
    free(ev);
}

void gen_events_free(gen_event *ev) {
    while (ev) {
        gen_event *next = ev->next;
        gen_event_free(ev);
        ev = next;
    }
}

static void job_destroy(gen_job *j) {
    gen_registry *reg = j->reg;
    pthread_mutex_lock(&reg->mu);
    if (j->prev) j->prev->next = j->next;
    else reg->head = j->next;
    if (j->next) j->next->prev = j->prev;
    reg->count--;
    pthread_mutex_unlock(&reg->mu);
    gen_events_free(j->head);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j->choices);
    free(j);
}

void gen_job_retain(gen_job *job) {
    pthread_mutex_lock(&job->mu);
    job->refs++;
    pthread_mutex_unlock(&job->mu);
}

void gen_job_release(gen_job *job) {
    if (!job) return;
    pthread_mutex_lock(&job->mu);
    int last = --job->refs == 0;
    pthread_mutex_unlock(&job->mu);
    if (last) job_destroy(job);
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        if (n) memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* The engine's callback (scheduler thread): copy, append, signal. A DONE
 * event drops the choice's reference, so the job may be freed here. */
static int on_engine_event(void *user, const tela_engine_event *ev) {
    gen_choice *c = user;
    gen_job *j = c->job;
    gen_event *e = calloc(1, sizeof *e);
    if (e) {
        e->choice = c->index;
        e->kind = ev->kind;
        e->usage = ev->usage;
        if (ev->kind == TELA_EVENT_TOKEN) {
            e->token = ev->token;
            e->logprob = ev->logprob;
            e->n_top = ev->top && ev->n_top > 0 ? (ev->n_top < GEN_MAX_TOP ? ev->n_top : GEN_MAX_TOP) : 0;
            if (e->n_top) memcpy(e->top, ev->top, (size_t)e->n_top * sizeof *e->top);
            e->text = dup_n(ev->text ? ev->text : "", ev->text ? ev->text_len : 0);
            e->text_len = ev->text ? ev->text_len : 0;
            if (!e->text) {
                free(e);
                e = NULL;
            }
        } else {
            e->stop_reason = ev->stop_reason;
            e->status = ev->status;
            if (ev->status != TELA_OK) {
                const char *msg = ev->error ? ev->error : tela_status_name(ev->status);
                e->error = dup_n(msg, strlen(msg));
            }
        }
    }
    pthread_mutex_lock(&j->mu);
    if (e) {
        if (j->tail) j->tail->next = e;
        else j->head = e;
        j->tail = e;
    } else {
        j->lost = 1;
    }
    int last = 0;
    if (ev->kind == TELA_EVENT_DONE) {
        c->done = 1;
        j->n_done++;
        last = --j->refs == 0;
    }
    int stop = j->cancelled;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (last) job_destroy(j);
    return stop; /* a TOKEN event of a cancelled job ends its request at once */
}

tela_status gen_job_submit(gen_job *job, int choice, const int32_t *prompt, int32_t n_prompt,
                           const tela_request_params *params) {
    if (choice < 0 || choice >= job->n_choices) return TELA_ERR_ARG;
    gen_choice *c = &job->choices[choice];
    tela_request_params p = *params;
    p.callback = on_engine_event;
    p.user = c;
    /* The choice's reference is taken before submitting: its events may
     * come before tela_engine_submit returns. */
    pthread_mutex_lock(&job->mu);
    job->refs++;
    pthread_mutex_unlock(&job->mu);
    uint64_t id = 0;
    tela_status st = tela_engine_submit(job->engine, prompt, n_prompt, &p, &id);
    pthread_mutex_lock(&job->mu);
    if (st == TELA_OK) {
        c->submitted = 1;
        c->id = id;
        job->n_submitted++;
    } else {
        job->refs--; /* never the last: the caller holds one */
    }
    int cancel_now = st == TELA_OK && job->cancelled && !c->done;
    pthread_mutex_unlock(&job->mu);
    if (cancel_now) tela_engine_cancel(job->engine, id);
    return st;
}

void gen_job_cancel(gen_job *job) {
    uint64_t stack_ids[16], *ids = stack_ids;
    pthread_mutex_lock(&job->mu);
    job->cancelled = 1;
    if (job->n_choices > 16) ids = malloc((size_t)job->n_choices * sizeof *ids);
    int n = 0;
    for (int i = 0; ids && i < job->n_choices; i++)
        if (job->choices[i].submitted && !job->choices[i].done) ids[n++] = job->choices[i].id;
    pthread_mutex_unlock(&job->mu);
    for (int i = 0; i < n; i++) tela_engine_cancel(job->engine, ids[i]);
    if (ids != stack_ids) free(ids);
}

int gen_job_wait(gen_job *job, int timeout_ms, gen_event **out) {
    *out = NULL;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&job->mu);
    while (!job->head && job->n_done < job->n_submitted)
        if (pthread_cond_timedwait(&job->cv, &job->mu, &until) == ETIMEDOUT) break;
    int r;
    if (job->head) {
        *out = job->head;
        job->head = job->tail = NULL;
        r = 1;
    } else {
        r = job->n_done < job->n_submitted ? 0 : -1;
    }
    pthread_mutex_unlock(&job->mu);
    return r;
}

int gen_job_lost_events(gen_job *job) {
    pthread_mutex_lock(&job->mu);
    int l = job->lost;
    pthread_mutex_unlock(&job->mu);
    return l;
}
