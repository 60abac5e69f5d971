/* gen.h: the generations of one HTTP request: a job of n engine requests
 * (choices) whose events the engine's callback copies into a queue, for the
 * request's thread to take. The callback runs on the engine's scheduler
 * thread and only locks, appends and signals.
 *
 * Lifetime: a job is reference-counted. The HTTP side holds one reference
 * (more with gen_job_retain, e.g. a streamed reply's), and every submitted
 * choice holds one until its DONE event, the last call the engine makes for
 * it; the job is freed when the count reaches zero, on whichever thread
 * drops it last. No lock of ours is held while calling the engine, since the
 * engine calls back under its own. */
#ifndef TELA_SERVER_GEN_H
#define TELA_SERVER_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "tela/tela.h"

#define GEN_MAX_TOP 20

/* One engine event, copied. */
typedef struct gen_event {
    struct gen_event *next;
    int choice;
    tela_engine_event_kind kind;
    /* TOKEN */
    int32_t token;
    char *text;                        /* NUL-terminated copy of the final text (may be "") */
    size_t text_len;
    float logprob;
    int32_t n_top;
    tela_top_logprob top[GEN_MAX_TOP];
    /* DONE */
    tela_stop_reason stop_reason;
    tela_status status;
    char *error;                       /* NULL when status is TELA_OK */
    tela_request_usage usage;          /* so far (TOKEN), final (DONE) */
} gen_event;

typedef struct gen_registry gen_registry;
typedef struct gen_job gen_job;

/* Every live job, so that shutdown can cancel what is still running. */
gen_registry *gen_registry_create(void);
/* Frees it; jobs must all be gone (after tela_engine_free). */
void gen_registry_free(gen_registry *reg);
void gen_registry_cancel_all(gen_registry *reg);
int gen_registry_count(gen_registry *reg);

/* A job for n_choices requests, holding the caller's reference. NULL when
 * out of memory. */
gen_job *gen_job_create(gen_registry *reg, tela_engine *engine, int n_choices);
void gen_job_retain(gen_job *job);
void gen_job_release(gen_job *job);
/* Submits choice (0 <= choice < n_choices) with params (callback and user
 * are set here). On failure nothing was queued: the status and
 * tela_last_error() say why. */
tela_status gen_job_submit(gen_job *job, int choice, const int32_t *prompt, int32_t n_prompt,
                           const tela_request_params *params);
/* Cancels every submitted choice not yet done (their DONE events follow). */
void gen_job_cancel(gen_job *job);
/* Waits up to timeout_ms for events and takes all that are queued (oldest
 * first) into *out. Returns 1 with events, 0 when the wait timed out, -1
 * when every submitted choice is done and nothing is left. */
int gen_job_wait(gen_job *job, int timeout_ms, gen_event **out);
/* 1 when some event could not be copied (out of memory): the job's output
 * is incomplete. */
int gen_job_lost_events(gen_job *job);
void gen_event_free(gen_event *ev);  /* one event */
void gen_events_free(gen_event *ev); /* a list */

#endif
