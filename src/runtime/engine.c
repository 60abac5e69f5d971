/* engine.c: the batching engine (tela.h, "engine").
 *
 * Threads. Callers submit and cancel under the engine's mutex; one
 * scheduler thread owns everything else (the queue of waiting requests,
 * the running sequences, the KV pool, the model state) and calls the
 * callbacks without holding the mutex.
 *
 * A step (step()):
 *   1. every decoding sequence contributes its next token, then sequences
 *      with prompt left contribute chunks, in the order they were
 *      admitted, while the step's token budget lasts; a chunk that does not
 *      finish its prompt is cut at a multiple of TELA_MODEL_STEP_ALIGN
 *      tokens and, for hybrid models, at the next checkpoint position, so
 *      the cuts of a sequence never depend on what else runs;
 *   2. KV blocks are taken from the pool for the positions the step writes
 *      (when none is left, the most recently admitted sequence is set back
 *      to waiting: preemption by recompute, with its blocks left in the
 *      prefix cache and, for hybrid models, a checkpoint of its state);
 *   3. one batched forward pass (tela_arch.forward_batch);
 *   4. full blocks join the prefix cache; hybrid models keep checkpoints
 *      at checkpoint positions and at the end of prompts;
 *   5. sequences that got logits sample their next token (tela_sample with
 *      the step index = the token's position, as tela_generate does, so a
 *      seed gives the same tokens here and there; the rows drawn on several
 *      threads, plain greedy ones on a GPU picked there), and the events go
 *      out.
 *
 * Speculative decoding (a request's spec): a decoding sequence brings
 * drafts (prompt lookup over its own tokens, or the MTP block's, drafted
 * for all such sequences together, a batch of the block per draft) to its
 * run, which gets every token's logits; the drafts are accepted by
 * tela_generate's rule (tela_spec_accept, the same step indices and
 * streams, so a seed gives the same tokens here and in tela_generate with
 * the same drafter), the sequence keeps the pending token and the accepted
 * drafts, and a hybrid model's slot is rewound to the state after them (the
 * verification kept every token's state). Rejected drafts' KV rows lie past
 * n_computed, where nothing reads them before they are written again;
 * checkpoints are taken only at kept positions.
 *
 * Admission. A waiting request gets a state slot and reuses the longest
 * cached prefix of its tokens: full blocks are shared, the rows of a
 * partly matching block are copied into a block of its own; a hybrid
 * model resumes from the latest checkpoint within the reused prefix (and
 * at an exact checkpoint with logits needs no computation at all). */
#include "runtime/kv_pool.h"
#include "runtime/session.h"
#include "runtime/spec.h"
#include "runtime/text_stream.h"
#include "util/error.h"
#include "util/threadpool.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ENGINE_BLOCK 16
#define ENGINE_MAX_TOP 20

typedef struct eng_req {
    uint64_t id;
    tela_request_params params;  /* stop_strings and logit_bias point at the copies below */
    char **stops;
    tela_logit_bias *bias;
    int32_t *tokens;             /* [n_ctx + 1]: the prompt, then the sampled tokens */
    int32_t n_prompt, n_tokens;
    int32_t n_computed;          /* positions whose KV rows and state are computed */
    int32_t n_cached;            /* prompt tokens reused from the prefix cache */
    int32_t n_generated;
    int32_t *blocks;             /* the block table */
    int32_t n_blocks;
    uint64_t *hashes;            /* chain hashes: hashes[k] after k whole blocks of tokens */
    int32_t n_hashed;            /* hashes[0..n_hashed] are valid */
    int32_t n_registered;        /* full blocks offered to the prefix cache */
    int32_t last_ckpt;           /* position of the last checkpoint taken */
    int slot;                    /* -1 unless running */
    tela_text_stream *text;
    float *ready;                /* logits from a checkpoint: sample without computing */
    float *raw;                  /* a copy of the logits for log-probabilities */
    bool admitted_once;
    tela_spec_params spec;       /* method TELA_SPEC_NONE: no speculation */
    int32_t *lookup;             /* predicted tokens prompt lookup drafts from first (or NULL) */
    int32_t n_lookup, lookup_from;
    int32_t n_draft;             /* drafts in this step's run (after the pending token) */
    tela_token_prob *qdist[TELA_SPEC_MAX_DRAFT]; /* MTP or draft-model drafts drawn when sampling: their
                                                    distributions */
    size_t n_qdist[TELA_SPEC_MAX_DRAFT];
    int32_t n_drafted, n_accepted;
    int32_t d_computed;          /* a draft model's positions computed in its own cache (same blocks) */
    double t_submit, t_start, t_first;
    struct eng_req *next;
} eng_req;

struct tela_engine {
    tela_model *model;
    const tela_arch *arch;
    tela_exec *ex;
    void *state;
    tela_kv_pool *pool;
    int32_t n_ctx, n_parallel, step_tokens, max_waiting, ckpt_interval, n_vocab;
    bool prefix_cache;
    size_t image_bytes;
    void *image;                 /* a slot's state, for checkpoints */
    float *logits;               /* [logit_rows][n_vocab]: a step's logits rows */
    int32_t *picks;              /* [logit_rows]: their greedy picks, made on the device */
    int32_t logit_rows;
    bool device_picks;           /* the logits live on a device: plain greedy sequences take only their picks */
    int sample_threads;          /* threads that sample a step's rows on the host (1: the scheduler alone) */
    tela_threadpool *sample_pool; /* those threads, kept across steps, each with its sampler's candidates
                                     (scratch); NULL until a step samples */
    bool sample_pool_failed;     /* (then the scheduler samples alone, the sampler allocating its candidates) */
    struct sample_job *jobs;     /* [n_parallel] */
    bool rewinds;                /* the model rolls back by slot_rewind (recurrent state) */
    bool mtp;                    /* the model's MTP block is loaded: MTP drafting, and no block shared up to
                                    the position before a reused prefix's end (its MTP row is rewritten) */
    tela_mtp_query *mtp_q;       /* [n_parallel] a batched draft step's sequences */
    eng_req **mtp_req;
    float *mtp_logits;           /* [n_parallel][n_vocab] */
    int32_t *mtp_picks;          /* [n_parallel] */
    /* a draft model (tela_engine_params.draft_model): its own paged cache in
     * the same block ids as the model's, one slot a sequence, on its own
     * device */
    tela_model *draft;
    tela_exec *d_ex;             /* its own exec on a GPU (its own stream, scratch and graphs); NULL on the CPU,
                                    where it runs on the model's exec (one thread pool: a second one's workers
                                    would spin while the first works) */
    bool d_device_picks;         /* its logits live on a device */
    void *d_state;
    tela_seq_run *d_runs;        /* [n_parallel] */
    eng_req **d_req;             /* [n_parallel] the drafting sequences of a step */
    int *d_map;                  /* [n_parallel] d_runs[i] is d_req[d_map[i]]'s */
    float *d_logits;             /* [n_parallel][n_vocab] */
    int32_t *d_picks;            /* [n_parallel] */
    tela_spec_verifier ver;      /* speculative decoding's acceptance rule */
    int *free_slots;
    int n_free_slots;
    eng_req **running;           /* in admission order */
    int n_running;
    eng_req *wait_head, *wait_tail;
    int32_t n_wait;
    tela_seq_run *runs;
    eng_req **run_req;
    /* shared with the callers (mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    eng_req *in_head, *in_tail;
    int32_t n_in;
    uint64_t *cancels;
    int n_cancels, cap_cancels;
    uint64_t next_id;
    bool stopping;
    tela_engine_stats stats;
    pthread_t thread;
    bool thread_started;
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

tela_engine_params tela_engine_default_params(void) {
    tela_engine_params p;
    memset(&p, 0, sizeof p);
    p.prefix_cache = 1;
    return p;
}

tela_request_params tela_request_default_params(void) {
    tela_request_params p;
    memset(&p, 0, sizeof p);
    p.sampler = tela_sampler_default_params();
    p.top_logprobs = -1;
    return p;
}

/* ------------------------------------------------------------ requests */

static void req_free(eng_req *r) {
    if (!r) return;
    if (r->stops)
        for (char **s = r->stops; *s; s++) free(*s);
    free(r->stops);
    free(r->bias);
    free(r->tokens);
    free(r->blocks);
    free(r->hashes);
    free(r->ready);
    free(r->raw);
    free(r->lookup);
    for (int i = 0; i < TELA_SPEC_MAX_DRAFT; i++) free(r->qdist[i]);
    tela_text_stream_free(r->text);
    free(r);
}

static int32_t blocks_for(int32_t positions) { return (positions + ENGINE_BLOCK - 1) / ENGINE_BLOCK; }

/* The chain hashes of r's whole blocks up to position n. */
static void req_hash(eng_req *r, int32_t n) {
    for (int32_t k = r->n_hashed; k < n / ENGINE_BLOCK; k++)
        r->hashes[k + 1] = tela_kv_chain_hash(r->hashes[k], r->tokens + (size_t)k * ENGINE_BLOCK, ENGINE_BLOCK);
    if (n / ENGINE_BLOCK > r->n_hashed) r->n_hashed = n / ENGINE_BLOCK;
}

/* Offers r's newly full blocks to the prefix cache. */
static void req_register_full(tela_engine *e, eng_req *r) {
    if (!e->prefix_cache) return;
    const int32_t full = r->n_computed / ENGINE_BLOCK;
    req_hash(r, r->n_computed);
    for (int32_t k = r->n_registered; k < full && k < r->n_blocks; k++)
        tela_kv_pool_register(e->pool, r->blocks[k], r->hashes[k], r->tokens + (size_t)k * ENGINE_BLOCK, ENGINE_BLOCK);
    if (full > r->n_registered) r->n_registered = full;
}

/* A checkpoint of r's state at n_computed (hybrid models), with logits when
 * they are the ones after it. */
static void req_checkpoint(tela_engine *e, eng_req *r, const float *logits) {
    if (!e->prefix_cache || !e->image_bytes || r->n_computed <= 0 || r->slot < 0) return;
    if (r->last_ckpt == r->n_computed && !logits) return;
    if (e->arch->slot_save(e->model, e->state, r->slot, e->image) != TELA_OK) return;
    req_hash(r, r->n_computed);
    if (tela_kv_pool_ckpt_put(e->pool, r->tokens, r->n_computed, r->hashes, e->image, logits))
        r->last_ckpt = r->n_computed;
}

/* Gives up r's blocks and slot (its full blocks, and the partial last one,
 * stay in the prefix cache). */
static void req_release(tela_engine *e, eng_req *r) {
    if (r->slot < 0) return;
    req_register_full(e, r);
    const int32_t full = r->n_computed / ENGINE_BLOCK, tail = r->n_computed - full * ENGINE_BLOCK;
    if (e->prefix_cache && tail > 0 && full < r->n_blocks)
        tela_kv_pool_register(e->pool, r->blocks[full], r->hashes[full], r->tokens + (size_t)full * ENGINE_BLOCK,
                              tail);
    for (int32_t i = 0; i < r->n_blocks; i++) tela_kv_pool_release(e->pool, r->blocks[i]);
    r->n_blocks = 0;
    e->free_slots[e->n_free_slots++] = r->slot;
    r->slot = -1;
    for (int i = 0; i < e->n_running; i++)
        if (e->running[i] == r) {
            memmove(e->running + i, e->running + i + 1, (size_t)(e->n_running - i - 1) * sizeof *e->running);
            e->n_running--;
            break;
        }
}

static void fill_usage(const eng_req *r, tela_request_usage *u, double now) {
    u->prompt_tokens = r->n_prompt;
    u->cached_tokens = r->n_cached;
    u->generated_tokens = r->n_generated;
    u->draft_tokens = r->n_drafted;
    u->accepted_tokens = r->n_accepted;
    u->queue_seconds = r->admitted_once ? r->t_start - r->t_submit : now - r->t_submit;
    u->first_token_seconds = r->t_first > 0 ? r->t_first - r->t_submit : 0.0;
    u->total_seconds = now - r->t_submit;
}

/* Ends r: the DONE event, the statistics, and the memory. r must be out of
 * the waiting list; a running r gives its blocks and slot back. */
static void req_finish(tela_engine *e, eng_req *r, tela_stop_reason reason, tela_status status, const char *error) {
    if (r->slot >= 0) {
        req_checkpoint(e, r, NULL);
        req_release(e, r);
    }
    tela_engine_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = TELA_EVENT_DONE;
    ev.id = r->id;
    ev.token = -1;
    ev.text = "";
    ev.stop_reason = reason;
    ev.status = status;
    ev.error = error;
    fill_usage(r, &ev.usage, now_seconds());
    if (r->params.callback) r->params.callback(r->params.user, &ev);
    pthread_mutex_lock(&e->mu);
    e->stats.requests_finished++;
    if (reason == TELA_STOP_CANCELLED) e->stats.requests_cancelled++;
    if (status != TELA_OK) e->stats.requests_failed++;
    e->stats.prompt_tokens += (uint64_t)r->n_prompt;
    e->stats.cached_tokens += (uint64_t)r->n_cached;
    e->stats.generated_tokens += (uint64_t)r->n_generated;
    e->stats.draft_tokens += (uint64_t)r->n_drafted;
    e->stats.accepted_tokens += (uint64_t)r->n_accepted;
    if (r->n_cached > 0) e->stats.prefix_hits++;
    pthread_mutex_unlock(&e->mu);
    req_free(r);
}

/* --------------------------------------------------------- the queues */

static void wait_push_back(tela_engine *e, eng_req *r) {
    r->next = NULL;
    if (e->wait_tail) e->wait_tail->next = r;
    else e->wait_head = r;
    e->wait_tail = r;
    e->n_wait++;
}

static void wait_push_front(tela_engine *e, eng_req *r) {
    r->next = e->wait_head;
    e->wait_head = r;
    if (!e->wait_tail) e->wait_tail = r;
    e->n_wait++;
}

static eng_req *wait_pop(tela_engine *e) {
    eng_req *r = e->wait_head;
    if (!r) return NULL;
    e->wait_head = r->next;
    if (!e->wait_head) e->wait_tail = NULL;
    r->next = NULL;
    e->n_wait--;
    return r;
}

/* Takes the request with this id out of the waiting list (or NULL). */
static eng_req *wait_take(tela_engine *e, uint64_t id) {
    for (eng_req **link = &e->wait_head, *prev = NULL; *link; prev = *link, link = &(*link)->next) {
        eng_req *r = *link;
        if (r->id != id) continue;
        *link = r->next;
        if (e->wait_tail == r) e->wait_tail = prev;
        r->next = NULL;
        e->n_wait--;
        return r;
    }
    return NULL;
}

/* -------------------------------------------------------------- admission */

/* Sets a preempted or new request back to nothing computed. */
static void req_reset(eng_req *r) {
    r->n_computed = 0;
    r->n_blocks = 0;
    r->n_registered = 0;
    r->last_ckpt = 0;
    r->d_computed = 0;
    free(r->ready);
    r->ready = NULL;
}

/* Starts r in a free slot with the longest reusable prefix. Returns false
 * (changing nothing) when the pool lacks the blocks for its tokens. */
static bool req_start(tela_engine *e, eng_req *r) {
    const int32_t n = r->n_tokens;
    int32_t reuse = 0, found_full = 0, tail_block = -1, tail_len = 0;
    const void *image = NULL;
    const float *ck_logits = NULL;
    req_hash(r, n);
    if (e->prefix_cache) {
        const int32_t found = tela_kv_pool_match(e->pool, r->tokens, n, r->hashes, r->blocks, &tail_block, &tail_len);
        found_full = (found - tail_len) / ENGINE_BLOCK;
        if (e->image_bytes) {
            /* a sequence set back after it had generated resumes before its
             * last token (decoded again: see step) */
            const int32_t lim = r->n_generated > 0 && found > n - 1 ? n - 1 : found;
            const int32_t c = tela_kv_pool_ckpt_find(e->pool, r->tokens, n, lim, r->hashes, &image, &ck_logits);
            reuse = c > 0 ? c : 0;
            if (c <= 0) image = NULL;
        } else {
            reuse = found < n ? found : n - 1; /* the last token is computed again for its logits */
        }
    }
    int32_t shared = reuse / ENGINE_BLOCK, part = reuse - shared * ENGINE_BLOCK;
    if (e->mtp && part == 0 && shared > 0) { /* the block of position reuse - 1 is copied, not shared */
        shared--;
        part = ENGINE_BLOCK;
    }
    /* the part of the block after the shared ones: from a matched full block,
     * or the tail block */
    const int32_t src = part == 0 ? -1 : shared < found_full ? r->blocks[shared] : tail_block;
    for (int32_t i = 0; i < shared; i++) tela_kv_pool_retain(e->pool, r->blocks[i]);
    if (src >= 0) tela_kv_pool_retain(e->pool, src);
    const int32_t need = blocks_for(n + 1) - shared;
    if (tela_kv_pool_available(e->pool) < need) {
        for (int32_t i = 0; i < shared; i++) tela_kv_pool_release(e->pool, r->blocks[i]);
        if (src >= 0) tela_kv_pool_release(e->pool, src);
        return false;
    }
    r->n_blocks = shared;
    if (src >= 0) {
        const int32_t own = tela_kv_pool_alloc(e->pool);
        r->blocks[r->n_blocks++] = own;
        e->arch->kv_copy_rows(e->model, e->state, own * ENGINE_BLOCK, src * ENGINE_BLOCK, part);
        tela_kv_pool_release(e->pool, src);
    }
    r->slot = e->free_slots[--e->n_free_slots];
    if (image) e->arch->slot_load(e->model, e->state, r->slot, image);
    else e->arch->slot_reset(e->model, e->state, r->slot);
    r->n_computed = reuse;
    r->d_computed = 0; /* the draft's rows of shared or copied blocks may be another's or none: all again */
    r->n_registered = shared;
    r->last_ckpt = image ? reuse : 0;
    if (!r->admitted_once) {
        r->n_cached = reuse < r->n_prompt ? reuse : r->n_prompt;
        r->t_start = now_seconds();
        r->admitted_once = true;
    }
    if (ck_logits && reuse == n) {
        r->ready = malloc((size_t)e->n_vocab * sizeof(float));
        if (r->ready) memcpy(r->ready, ck_logits, (size_t)e->n_vocab * sizeof(float));
        else { /* no memory to keep them: compute the last token again */
            r->n_computed = 0;
            e->arch->slot_reset(e->model, e->state, r->slot);
            for (int32_t i = 0; i < r->n_blocks; i++) tela_kv_pool_release(e->pool, r->blocks[i]);
            r->n_blocks = 0;
            r->n_registered = 0;
        }
    }
    e->running[e->n_running++] = r;
    return true;
}

static void admit(tela_engine *e) {
    while (e->wait_head && e->n_running < e->n_parallel && e->n_free_slots > 0) {
        if (!req_start(e, e->wait_head)) break;
        (void)wait_pop(e);
    }
}

/* ------------------------------------------------------------------ steps */

/* Sets the most recently admitted running sequence other than `keep` (and
 * not yet in this step's runs) back to waiting, its blocks released. */
static bool preempt_one(tela_engine *e, const eng_req *keep, int n_runs) {
    for (int i = e->n_running - 1; i >= 0; i--) {
        eng_req *v = e->running[i];
        if (v == keep) continue;
        bool scheduled = false;
        for (int j = 0; j < n_runs; j++)
            if (e->run_req[j] == v) scheduled = true;
        if (scheduled) continue;
        req_checkpoint(e, v, NULL);
        req_release(e, v);
        req_reset(v);
        wait_push_front(e, v);
        pthread_mutex_lock(&e->mu);
        e->stats.preemptions++;
        pthread_mutex_unlock(&e->mu);
        return true;
    }
    return false;
}

/* Blocks for r's positions [0, end); false when the pool cannot give them
 * even after preempting others. */
static bool ensure_blocks(tela_engine *e, eng_req *r, int32_t end, int n_runs) {
    while (r->n_blocks < blocks_for(end)) {
        int32_t b = tela_kv_pool_alloc(e->pool);
        while (b < 0 && preempt_one(e, r, n_runs)) b = tela_kv_pool_alloc(e->pool);
        if (b < 0) return false;
        r->blocks[r->n_blocks++] = b;
    }
    return true;
}

/* Log-probabilities of a logits row before the sampler touches it: the log
 * of the softmax normalizer (in double) and the k likeliest tokens. */
static double log_normalizer(const float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (!isfinite(mx)) return (double)mx;
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return (double)mx + log(s);
}

static int top_k_of(const float *x, int n, int k, tela_top_logprob *out, double lse) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m == k && x[i] <= x[out[m - 1].token]) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && x[out[j - 1].token] < x[i]) {
            out[j] = out[j - 1];
            j--;
        }
        out[j].token = i;
    }
    for (int i = 0; i < m; i++) out[i].logprob = (float)((double)x[out[i].token] - lse);
    return m;
}

/* What a TOKEN event says of log-probabilities, from the logits row its
 * token was sampled from, taken before the sampler edits the row (the row
 * itself kept in r->raw, for the token's own). */
typedef struct row_logprobs {
    double lse;
    tela_top_logprob top[ENGINE_MAX_TOP];
    int n_top;
} row_logprobs;

static void logprobs_take(tela_engine *e, eng_req *r, const float *row, row_logprobs *lp) {
    const int V = e->n_vocab, want = r->params.top_logprobs;
    lp->lse = 0.0;
    lp->n_top = 0;
    if (want < 0) return;
    lp->lse = log_normalizer(row, V);
    if (want > 0) lp->n_top = top_k_of(row, V, want, lp->top, lp->lse);
    if (!r->raw) r->raw = malloc((size_t)V * sizeof(float));
    if (r->raw) memcpy(r->raw, row, (size_t)V * sizeof(float));
}

/* Appends tok (sampled for position r->n_tokens) to r and sends its
 * event; true when r ends with it (*reason, and *st when it failed). The
 * caller finishes r then. */
static bool req_emit(tela_engine *e, eng_req *r, int32_t tok, const row_logprobs *lp, tela_stop_reason *reason,
                     tela_status *st) {
    const tela_model *m = e->model;
    const int32_t pos = r->n_tokens;
    r->tokens[r->n_tokens++] = tok;
    r->n_generated++;
    if (r->t_first == 0) r->t_first = now_seconds();
    const tela_request_params *p = &r->params;
    const bool is_eog = !p->ignore_eos && (m->vocab ? tela_vocab_is_eog(m->vocab, tok) : tok == m->info.eos_token);
    *reason = TELA_STOP_MAX_TOKENS;
    *st = TELA_OK;
    bool final = true;
    if (is_eog) *reason = TELA_STOP_EOS;
    else if (p->max_tokens > 0 && r->n_generated >= p->max_tokens) *reason = TELA_STOP_MAX_TOKENS;
    else if (pos >= e->n_ctx) *reason = TELA_STOP_CONTEXT;
    else final = false;
    const char *text;
    size_t len;
    bool stopped;
    if (!tela_text_stream_push(r->text, tok, is_eog, final, &text, &len, &stopped)) {
        *reason = TELA_STOP_ERROR;
        *st = TELA_ERR_NOMEM;
        return true;
    }
    if (stopped) {
        final = true;
        *reason = TELA_STOP_STRING;
    }
    tela_engine_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = TELA_EVENT_TOKEN;
    ev.id = r->id;
    ev.token = tok;
    ev.text = text;
    ev.text_len = len;
    ev.logprob = p->top_logprobs >= 0 && r->raw ? (float)((double)r->raw[tok] - lp->lse) : 0.0f;
    ev.top = lp->n_top ? lp->top : NULL;
    ev.n_top = lp->n_top;
    fill_usage(r, &ev.usage, now_seconds());
    if (p->callback && p->callback(p->user, &ev) && !final) {
        final = true;
        *reason = TELA_STOP_CANCELLED;
    }
    return final;
}

static void req_end(tela_engine *e, eng_req *r, tela_stop_reason reason, tela_status st) {
    req_finish(e, r, reason, st, st == TELA_OK ? NULL : st == TELA_ERR_NOMEM ? "out of memory" : tela_last_error());
}

/* Whether r's tokens are the device's picks (plain greedy,
 * tela_sampler_plain_greedy, and no log-probabilities): then its logits
 * need not come back. */
static bool plain_greedy(const eng_req *r) {
    return tela_sampler_plain_greedy(&r->params.sampler) && r->params.top_logprobs < 0;
}

/* One sequence's token drawn on the host from its logits row: what the
 * draw needs and gives (made on any thread: nothing shared is written). */
typedef struct sample_job {
    tela_engine *e;
    eng_req *r;
    float *row;
    void *scratch;               /* the sampler's candidates (NULL: allocated by it) */
    row_logprobs lp;
    int32_t tok;
    tela_status st;
    char error[256];
} sample_job;

static void sample_job_run(sample_job *j) {
    eng_req *r = j->r;
    logprobs_take(j->e, r, j->row, &j->lp);
    j->st = tela_sample_scratch(&r->params.sampler, j->row, j->e->n_vocab, r->tokens, (size_t)r->n_tokens,
                                (uint64_t)r->n_tokens, j->scratch, &j->tok);
    if (j->st != TELA_OK) snprintf(j->error, sizeof j->error, "%s", tela_last_error());
}

/* Sends the event of a sampled token (job done) and ends r when it stops. */
static void sample_job_emit(sample_job *j) {
    if (j->st != TELA_OK) {
        req_finish(j->e, j->r, TELA_STOP_ERROR, j->st, j->error);
        return;
    }
    tela_stop_reason reason;
    tela_status st;
    if (req_emit(j->e, j->r, j->tok, &j->lp, &reason, &st)) req_end(j->e, j->r, reason, st);
}

/* Samples r's next token from a logits row (edited in place), or takes
 * the device's pick (>= 0, plain greedy), and sends its event; ends r when
 * it stops. */
static void req_sample(tela_engine *e, eng_req *r, float *row, int32_t pick) {
    sample_job j;
    memset(&j, 0, sizeof j);
    j.e = e;
    j.r = r;
    j.row = row;
    j.tok = pick;
    if (pick < 0) sample_job_run(&j);
    sample_job_emit(&j);
}

typedef struct sample_step {
    sample_job *jobs;
    tela_threadpool *pool;       /* NULL: no pool, no scratch */
} sample_step;

static void sample_chunk(void *arg, int i, int ith) {
    const sample_step *st = arg;
    st->jobs[i].scratch = st->pool ? tela_threadpool_scratch(st->pool, ith) : NULL;
    sample_job_run(&st->jobs[i]);
}

/* Runs jobs[0..n) on up to e->sample_threads threads (the scheduler one
 * of them): a vocabulary's softmax and draw cost a host core about a
 * millisecond a row (128k tokens), so a step of many sampled sequences
 * would otherwise wait on one core. The threads are made once, at the
 * first such step, and sleep between steps (no spinning: on the CPU a
 * forward pass needs the cores). */
static void sample_jobs_run(tela_engine *e, sample_job *jobs, int n) {
    enum { MAX_THREADS = 32 };
    if (!e->sample_pool && !e->sample_pool_failed) {
        const int nt = e->sample_threads < 1 ? 1 : e->sample_threads > MAX_THREADS ? MAX_THREADS : e->sample_threads;
        const size_t floats = (tela_sampler_scratch_bytes(e->n_vocab) + sizeof(float) - 1) / sizeof(float);
        if (tela_threadpool_create(nt, &e->sample_pool) == TELA_OK) {
            tela_threadpool_set_spin(e->sample_pool, 0);
            if (tela_threadpool_reserve(e->sample_pool, floats) != TELA_OK) {
                tela_threadpool_free(e->sample_pool);
                e->sample_pool = NULL;
            }
        }
        e->sample_pool_failed = !e->sample_pool;
    }
    sample_step st = {jobs, e->sample_pool};
    if (e->sample_pool) tela_threadpool_run_chunks(e->sample_pool, sample_chunk, &st, n);
    else
        for (int i = 0; i < n; i++) sample_chunk(&st, i, 0);
}

/* Up to how many drafts r brings to this step (prompt lookup over its
 * tokens, written after them into r->tokens): within its draft_max, the
 * context, max_tokens, the step's tokens left (room) and the KV blocks it
 * holds or can take without preempting anyone. */
static int32_t req_propose(tela_engine *e, eng_req *r, int32_t room) {
    /* (the first token after the prompt is sampled plainly, as tela_generate
     * does, also when the prompt's last token is all that is computed) */
    if (r->spec.method == TELA_SPEC_NONE || r->n_generated == 0 || r->n_computed < 1) return 0;
    int32_t k = r->spec.draft_max;
    if (k > e->n_ctx - r->n_tokens) k = e->n_ctx - r->n_tokens;
    if (r->params.max_tokens > 0 && k > r->params.max_tokens - r->n_generated - 1)
        k = r->params.max_tokens - r->n_generated - 1;
    if (k > room) k = room;
    const int64_t fit = ((int64_t)r->n_blocks + tela_kv_pool_available(e->pool)) * ENGINE_BLOCK - r->n_tokens;
    if (k > fit) k = (int32_t)(fit > 0 ? fit : 0);
    if (k <= 0) return 0;
    if (r->spec.method == TELA_SPEC_MTP || r->spec.method == TELA_SPEC_DRAFT)
        return k; /* drafted below, with the others' (mtp_drafts, model_drafts) */
    if (r->n_lookup > 0) { /* the predicted text first, from one token on, where the last drafts ended */
        int32_t end = 0;
        const int32_t m = tela_spec_ngram_in(r->tokens, r->n_tokens, r->lookup, r->n_lookup, r->lookup_from, k, 1,
                                             r->spec.ngram_max, r->tokens + r->n_tokens, &end);
        if (m > 0) {
            r->lookup_from = end - m;
            return m;
        }
    }
    return tela_spec_ngram(r->tokens, r->n_tokens, k, r->spec.ngram_min, r->spec.ngram_max, r->tokens + r->n_tokens);
}

/* Draft i of r from a drafter's logits row (or its device pick, `picked`),
 * as tela_generate's drafters take it: the penalties see the first n_hist
 * of r's tokens (MTP: the sequence's; a draft model: those and the drafts
 * before), a sampled draft is drawn from its final distribution on the
 * draft stream. Written after r's tokens. */
static tela_status draft_take(tela_engine *e, eng_req *r, int32_t i, float *row, bool picked, int32_t pick,
                              int32_t n_hist) {
    const int V = e->n_vocab;
    const tela_sampler_params *sp = &r->params.sampler;
    const uint64_t step = (uint64_t)r->n_tokens + (uint64_t)i;
    int32_t tok = 0;
    if (picked) {
        tok = pick;
    } else if (sp->temperature > 0.0f) {
        if (!r->qdist[i] && !(r->qdist[i] = malloc((size_t)V * sizeof *r->qdist[i])))
            return tela_errorf(TELA_ERR_NOMEM, "out of memory for the draft distributions");
        TELA_TRY(tela_sampler_dist(sp, row, V, r->tokens, (size_t)n_hist, r->qdist[i], &r->n_qdist[i]));
        tok = tela_sampler_draw(r->qdist[i], r->n_qdist[i], tela_sampler_uniform(sp->seed, step, TELA_SPEC_STREAM_DRAFT));
        if (tok < 0) return tela_errorf(TELA_ERR_INTERNAL, "an empty draft distribution");
    } else {
        TELA_TRY(tela_sample(sp, row, V, r->tokens, (size_t)n_hist, step, &tok));
    }
    r->tokens[r->n_tokens + i] = tok;
    return TELA_OK;
}

/* A drafter failed: this step's runs drafting by `method` go without drafts
 * (plain decoding steps); a draft model's cache starts again from nothing,
 * since the failed batch may have left it part-written. */
static void drop_drafts(tela_engine *e, int n_runs, tela_spec_method method) {
    for (int j = 0; j < n_runs; j++) {
        eng_req *r = e->run_req[j];
        if (r->spec.method != method || r->n_draft <= 0) continue;
        r->n_draft = 0;
        r->d_computed = 0;
        e->runs[j].n = 1;
        e->runs[j].all_logits = e->runs[j].keep_states = false;
    }
}

/* The MTP block's drafts for this step's MTP runs (runs[0..n_runs)), all
 * of them together: draft i of every run that wants more than i, as one
 * batch of the block, picked or drawn as tela_generate's MTP drafter does
 * (the penalties see the sequence's tokens, not the drafts before). On
 * failure the runs go without drafts. */
static void mtp_drafts(tela_engine *e, int n_runs) {
    const int V = e->n_vocab;
    int kmax = 0;
    for (int j = 0; j < n_runs; j++)
        if (e->run_req[j]->spec.method == TELA_SPEC_MTP && e->run_req[j]->n_draft > kmax) kmax = e->run_req[j]->n_draft;
    tela_status st = TELA_OK;
    for (int i = 0; i < kmax && st == TELA_OK; i++) {
        int n = 0;
        for (int j = 0; j < n_runs; j++) {
            eng_req *r = e->run_req[j];
            if (r->spec.method != TELA_SPEC_MTP || r->n_draft <= i) continue;
            const int32_t P = r->n_computed;
            e->mtp_q[n] = (tela_mtp_query){r->slot, r->tokens[P + i], P - 1 + i, r->blocks};
            e->mtp_req[n++] = r;
        }
        bool need_logits = !e->device_picks;
        for (int q = 0; q < n; q++) need_logits |= !plain_greedy(e->mtp_req[q]);
        st = e->arch->mtp_draft_batch(e->model, e->state, e->mtp_q, n, i > 0, need_logits ? e->mtp_logits : NULL,
                                      e->device_picks ? e->mtp_picks : NULL);
        for (int q = 0; q < n && st == TELA_OK; q++) {
            eng_req *r = e->mtp_req[q];
            st = draft_take(e, r, i, e->mtp_logits + (size_t)q * V, e->device_picks && plain_greedy(r),
                            e->device_picks ? e->mtp_picks[q] : 0, r->n_tokens);
        }
    }
    if (st != TELA_OK) drop_drafts(e, n_runs, TELA_SPEC_MTP);
}

/* One batch of the draft model over d_runs[0..nr), then the draft taken
 * for each run that asked for logits (draft `i` of its sequence, or the
 * first, i = 0, when the run ends a catch-up). */
static tela_status model_draft_batch(tela_engine *e, int nr, int32_t i) {
    TELA_TRY(e->draft->arch->forward_batch(e->draft, e->d_state, e->d_runs, nr, e->d_logits,
                                           e->d_device_picks ? e->d_picks : NULL));
    int row = 0;
    for (int j = 0; j < nr; j++) {
        eng_req *r = e->d_req[e->d_map[j]];
        r->d_computed += e->d_runs[j].n;
        if (!e->d_runs[j].logits) continue;
        TELA_TRY(draft_take(e, r, i, e->d_logits + (size_t)row * e->n_vocab, e->d_device_picks && plain_greedy(r),
                            e->d_device_picks ? e->d_picks[row] : 0, r->n_tokens + i));
        row++;
    }
    return TELA_OK;
}

/* The draft model's drafts for this step's draft-model runs: each
 * sequence's tokens the draft has not seen (its pending token at least; at
 * its first drafting step all of them) go through the draft's cache in
 * batches of at most a step's tokens, the last one's logits giving the
 * first draft; then one batch a draft for the rest. On failure the runs go
 * without drafts. */
static void model_drafts(tela_engine *e, int n_runs) {
    int n = 0, kmax = 0;
    for (int j = 0; j < n_runs; j++) {
        eng_req *r = e->run_req[j];
        if (r->spec.method != TELA_SPEC_DRAFT || r->n_draft <= 0) continue;
        e->d_req[n++] = r;
        kmax = r->n_draft > kmax ? r->n_draft : kmax;
    }
    tela_status st = TELA_OK;
    for (bool more = n > 0; more && st == TELA_OK;) { /* the catch-ups */
        int nr = 0;
        int32_t budget = e->step_tokens;
        more = false;
        for (int q = 0; q < n; q++) {
            eng_req *r = e->d_req[q];
            const int32_t left = r->n_tokens - r->d_computed;
            if (left <= 0) continue;
            int32_t take = left < budget ? left : budget;
            if (take < left) take -= take % TELA_MODEL_STEP_ALIGN;
            if (take <= 0) {
                more = true;
                continue;
            }
            e->d_runs[nr] = (tela_seq_run){r->slot, r->tokens + r->d_computed, take, r->d_computed, r->blocks,
                                           take == left, false, false, e->d_device_picks && plain_greedy(r)};
            e->d_map[nr++] = q;
            budget -= take;
            more |= take < left;
        }
        if (nr > 0) st = model_draft_batch(e, nr, 0);
    }
    for (int32_t i = 1; i < kmax && st == TELA_OK; i++) { /* draft i from draft i - 1 */
        int nr = 0;
        for (int q = 0; q < n; q++) {
            eng_req *r = e->d_req[q];
            if (r->n_draft <= i) continue;
            const int32_t at = r->n_tokens + i - 1;
            e->d_runs[nr] = (tela_seq_run){r->slot, r->tokens + at, 1, at, r->blocks, true, false, false,
                                           e->d_device_picks && plain_greedy(r)};
            e->d_map[nr++] = q;
        }
        if (nr > 0) st = model_draft_batch(e, nr, i);
    }
    if (st != TELA_OK) drop_drafts(e, n_runs, TELA_SPEC_DRAFT);
}

/* A verification run's outcome: r's pending token and n_draft drafts went
 * through the model with every position's logits (rows); accepts drafts
 * and emits tokens as tela_generate does, keeps the pending token and the
 * accepted drafts (the hybrid state rewound to them), then checkpoints and
 * ends r as a plain step would. */
static void req_verify(tela_engine *e, eng_req *r, float *rows, const int32_t *picks) {
    const int V = e->n_vocab;
    const int32_t P = r->n_computed, nd = r->n_draft; /* the pending token at P, drafts at P+1 .. P+nd */
    int32_t drafts[TELA_SPEC_MAX_DRAFT];
    memcpy(drafts, r->tokens + P + 1, (size_t)nd * sizeof *drafts);
    r->n_draft = 0;
    r->n_drafted += nd;
    int32_t m = 0, n_acc = 0; /* tokens emitted, drafts accepted */
    bool final = false;
    tela_stop_reason reason = TELA_STOP_MAX_TOKENS;
    tela_status st = TELA_OK;
    for (int32_t i = 0; i <= nd && !final; i++) {
        float *row = rows + (size_t)i * V;
        row_logprobs lp = {0};
        const uint64_t step = (uint64_t)P + 1 + (uint64_t)i;
        int32_t tok = 0;
        bool accepted = false;
        const bool drawn = (r->spec.method == TELA_SPEC_MTP || r->spec.method == TELA_SPEC_DRAFT) &&
                           r->params.sampler.temperature > 0.0f;
        if (!picks) logprobs_take(e, r, row, &lp);
        if (picks) { /* plain greedy, picked on the device */
            tok = picks[i];
            accepted = i < nd && tok == drafts[i];
        } else if (i < nd)
            st = tela_spec_accept(&e->ver, &r->params.sampler, row, r->tokens, (size_t)(P + 1 + i), step, drafts[i],
                                  drawn ? r->qdist[i] : NULL, drawn ? r->n_qdist[i] : 0, &accepted, &tok);
        else
            st = tela_sample(&r->params.sampler, row, V, r->tokens, (size_t)(P + 1 + i), step, &tok);
        if (st != TELA_OK) {
            final = true;
            reason = TELA_STOP_ERROR;
            break;
        }
        r->n_accepted += accepted;
        n_acc += accepted && i < nd;
        m++;
        final = req_emit(e, r, tok, &lp, &reason, &st);
        if (!accepted) break;
    }
    const int32_t keep = m > 0 ? m : 1; /* (an error at the first row: the pending token's state, r ends) */
    r->n_computed = P + keep;
    /* the draft model's cache holds the tokens up to the first rejected draft */
    if (r->d_computed > P + 1 + n_acc) r->d_computed = P + 1 + n_acc;
    if (e->rewinds && keep < nd + 1) {
        const tela_status rs = e->arch->slot_rewind(e->model, e->state, r->slot, keep);
        if (rs != TELA_OK) { /* the state is not that of the kept tokens: this sequence cannot go on */
            req_reset(r);
            e->arch->slot_reset(e->model, e->state, r->slot);
            req_finish(e, r, TELA_STOP_ERROR, rs, tela_last_error());
            return;
        }
    }
    req_register_full(e, r);
    if (e->image_bytes && e->prefix_cache && P / e->ckpt_interval != r->n_computed / e->ckpt_interval)
        req_checkpoint(e, r, NULL);
    if (final) req_end(e, r, reason, st);
}

/* The next checkpoint position after `from` (hybrid models with the prefix
 * cache), or INT32_MAX. */
static int32_t next_ckpt(const tela_engine *e, int32_t from) {
    if (!e->prefix_cache || !e->image_bytes) return INT32_MAX;
    return (from / e->ckpt_interval + 1) * e->ckpt_interval;
}

static void step(tela_engine *e) {
    int n_runs = 0;
    int32_t budget = e->step_tokens;
    /* sequences with logits from a checkpoint sample at once */
    for (int i = 0; i < e->n_running;) {
        eng_req *r = e->running[i];
        if (!r->ready) {
            i++;
            continue;
        }
        float *row = r->ready;
        r->ready = NULL;
        const int before = e->n_running;
        req_sample(e, r, row, -1);
        free(row);
        if (e->n_running == before) i++;
    }
    /* 1. decoding sequences: one token each, and their drafts */
    int32_t rows = 0;
    for (int i = 0; i < e->n_running && budget > 0; i++) {
        eng_req *r = e->running[i];
        if (r->n_computed != r->n_tokens - 1) continue;
        const int32_t nd = req_propose(e, r, budget - 1);
        if (!ensure_blocks(e, r, r->n_computed + 1 + nd, n_runs)) continue;
        r->n_draft = nd;
        e->runs[n_runs] = (tela_seq_run){r->slot,       r->tokens + r->n_computed, 1 + nd, r->n_computed, r->blocks, true,
                                         nd > 0,        nd > 0 && e->rewinds,     e->device_picks && plain_greedy(r)};
        e->run_req[n_runs++] = r;
        budget -= 1 + nd;
        rows += 1 + nd;
    }
    if (e->mtp && n_runs > 0) mtp_drafts(e, n_runs);
    if (e->draft && n_runs > 0) model_drafts(e, n_runs);
    /* 2. prompt chunks: the prompt, or for a sequence set back after it had
     * generated, its tokens but the last (which goes again as a decoding
     * token, drafts and all, as if it had never stopped) */
    for (int i = 0; i < e->n_running && budget > 0; i++) {
        eng_req *r = e->running[i];
        const int32_t end = r->n_generated > 0 ? r->n_tokens - 1 : r->n_tokens;
        const int32_t left = end - r->n_computed;
        if (left <= 1 && r->n_computed == r->n_tokens - 1) continue; /* decoding (or done above) */
        if (left <= 0) continue;
        int32_t n = left < budget ? left : budget;
        const int32_t ck = next_ckpt(e, r->n_computed);
        if (r->n_computed + n > ck && ck < r->n_tokens) n = ck - r->n_computed;
        else if (n < left) n -= n % TELA_MODEL_STEP_ALIGN;
        if (n <= 0) continue;
        if (!ensure_blocks(e, r, r->n_computed + n, n_runs)) continue;
        e->runs[n_runs] = (tela_seq_run){r->slot, r->tokens + r->n_computed, n, r->n_computed, r->blocks,
                                         r->n_computed + n == r->n_tokens, false, false, false};
        e->run_req[n_runs++] = r;
        rows += e->runs[n_runs - 1].logits;
        budget -= n;
    }
    if (n_runs == 0) return;
    if (rows > e->logit_rows) { /* verification runs want a row per token */
        /* (host memory the device's copies reach directly: page-locked on a GPU) */
        float *l = tela_backend_host_alloc(e->model->be, (size_t)rows * (size_t)e->n_vocab * sizeof(float));
        int32_t *pk = l ? realloc(e->picks, (size_t)rows * sizeof *pk) : NULL;
        if (l) {
            tela_backend_host_free(e->model->be, e->logits);
            e->logits = l;
        }
        if (pk) e->picks = pk;
        if (!l || !pk) {
            for (int j = 0; j < n_runs; j++) {
                e->run_req[j]->n_draft = 0;
                req_finish(e, e->run_req[j], TELA_STOP_ERROR, TELA_ERR_NOMEM, "out of memory for the logits");
            }
            return;
        }
        e->logit_rows = rows;
    }
    const tela_status st =
        e->arch->forward_batch(e->model, e->state, e->runs, n_runs, e->logits, e->device_picks ? e->picks : NULL);
    pthread_mutex_lock(&e->mu);
    e->stats.steps++;
    pthread_mutex_unlock(&e->mu);
    if (st != TELA_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tela_last_error());
        for (int j = 0; j < n_runs; j++) req_finish(e, e->run_req[j], TELA_STOP_ERROR, st, msg);
        return;
    }
    int row = 0;
    for (int j = 0; j < n_runs; j++) {
        eng_req *r = e->run_req[j];
        float *lrow = e->runs[j].logits ? e->logits + (size_t)row * e->n_vocab : NULL;
        row += e->runs[j].logits ? (e->runs[j].all_logits ? e->runs[j].n : 1) : 0;
        if (r->n_draft > 0) continue; /* a verification: req_verify below */
        r->n_computed += e->runs[j].n;
        req_register_full(e, r);
        if (e->image_bytes && e->prefix_cache &&
            (r->n_computed % e->ckpt_interval == 0 || (lrow && r->n_generated == 0)))
            req_checkpoint(e, r, lrow && !e->runs[j].pick_only && r->n_computed == r->n_tokens ? lrow : NULL);
    }
    /* the tokens drawn on the host, all rows at once, then the events in order */
    int n_jobs = 0;
    row = 0;
    for (int j = 0; j < n_runs; j++) {
        if (!e->runs[j].logits) continue;
        float *lrow = e->logits + (size_t)row * e->n_vocab;
        row += e->runs[j].all_logits ? e->runs[j].n : 1;
        if (e->run_req[j]->n_draft > 0 || e->runs[j].pick_only) continue;
        e->jobs[n_jobs++] = (sample_job){.e = e, .r = e->run_req[j], .row = lrow};
    }
    sample_jobs_run(e, e->jobs, n_jobs);
    row = 0;
    for (int j = 0, k = 0; j < n_runs; j++) {
        if (!e->runs[j].logits) continue;
        float *lrow = e->logits + (size_t)row * e->n_vocab;
        const int32_t *pk = e->runs[j].pick_only ? e->picks + row : NULL;
        row += e->runs[j].all_logits ? e->runs[j].n : 1;
        if (e->run_req[j]->n_draft > 0) req_verify(e, e->run_req[j], lrow, pk);
        else if (pk) req_sample(e, e->run_req[j], lrow, pk[0]);
        else sample_job_emit(&e->jobs[k++]);
    }
}

/* Applies the cancellations asked for since the last step. */
static void apply_cancels(tela_engine *e, const uint64_t *ids, int n) {
    for (int k = 0; k < n; k++) {
        eng_req *r = wait_take(e, ids[k]);
        if (!r)
            for (int i = 0; i < e->n_running; i++)
                if (e->running[i]->id == ids[k]) r = e->running[i];
        if (r) req_finish(e, r, TELA_STOP_CANCELLED, TELA_OK, NULL);
    }
}

static void publish_stats(tela_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->stats.running = e->n_running;
    e->stats.waiting = e->n_wait;
    e->stats.kv_blocks_used = tela_kv_pool_held(e->pool);
    e->stats.kv_blocks_cached = tela_kv_pool_cached_idle(e->pool);
    e->stats.checkpoints = tela_kv_pool_ckpt_count(e->pool);
    e->stats.checkpoint_bytes = tela_kv_pool_ckpt_bytes(e->pool);
    pthread_mutex_unlock(&e->mu);
}

static void *scheduler(void *arg) {
    tela_engine *e = arg;
    uint64_t *ids = NULL;
    int cap = 0;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && !e->in_head && e->n_cancels == 0 && e->n_running == 0 &&
               !(e->wait_head && e->n_free_slots > 0))
            pthread_cond_wait(&e->cv, &e->mu);
        eng_req *in = e->in_head;
        e->in_head = e->in_tail = NULL;
        e->n_in = 0;
        int n_ids = e->n_cancels;
        if (n_ids > cap) {
            uint64_t *ni = realloc(ids, (size_t)n_ids * sizeof *ids);
            if (ni) {
                ids = ni;
                cap = n_ids;
            } else {
                n_ids = cap;
            }
        }
        if (n_ids) {
            memcpy(ids, e->cancels, (size_t)n_ids * sizeof *ids);
            memmove(e->cancels, e->cancels + n_ids, (size_t)(e->n_cancels - n_ids) * sizeof *ids);
            e->n_cancels -= n_ids;
        }
        const bool stopping = e->stopping;
        pthread_mutex_unlock(&e->mu);
        while (in) {
            eng_req *next = in->next;
            wait_push_back(e, in);
            in = next;
        }
        apply_cancels(e, ids, n_ids);
        if (stopping) {
            while (e->n_running) req_finish(e, e->running[e->n_running - 1], TELA_STOP_CANCELLED, TELA_OK, NULL);
            for (eng_req *r; (r = wait_pop(e));) req_finish(e, r, TELA_STOP_CANCELLED, TELA_OK, NULL);
            publish_stats(e);
            break;
        }
        admit(e);
        step(e);
        publish_stats(e);
    }
    free(ids);
    return NULL;
}

/* ------------------------------------------------------------- the API */

void tela_engine_free(tela_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stopping = true;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    for (eng_req *r = e->in_head; r;) { /* submitted after the thread stopped: never started */
        eng_req *next = r->next;
        req_free(r);
        r = next;
    }
    if (e->state) e->arch->state_free(e->state);
    if (e->d_state) e->draft->arch->state_free(e->d_state);
    if (e->d_ex) tela_exec_free(e->d_ex);
    free(e->d_runs);
    free(e->d_req);
    free(e->d_map);
    free(e->d_logits);
    free(e->d_picks);
    if (e->ex) tela_exec_free(e->ex);
    tela_kv_pool_free(e->pool);
    free(e->image);
    tela_backend_host_free(e->model->be, e->logits);
    free(e->picks);
    free(e->jobs);
    tela_threadpool_free(e->sample_pool);
    free(e->mtp_picks);
    tela_spec_verifier_free(&e->ver);
    free(e->mtp_q);
    free(e->mtp_req);
    free(e->mtp_logits);
    free(e->free_slots);
    free(e->running);
    free(e->runs);
    free(e->run_req);
    free(e->cancels);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* Whether `draft` can draft for `model` in the engine: the same vocabulary
 * (tela_spec_check_draft), a batched forward pass, and no per-sequence
 * recurrent state (a draft's rejected tokens are undone by its position
 * alone). Its cache's precision in dsp. */
static tela_status engine_draft_check(const tela_model *model, const tela_model *draft, tela_kv_type kv_type,
                                      tela_state_params *dsp) {
    TELA_TRY(tela_spec_check_draft(model, draft));
    const char *path = draft->path ? draft->path : "the draft model";
    if (draft == model) return tela_errorf(TELA_ERR_ARG, "engine: the draft model is the model itself");
    if (!draft->arch->forward_batch)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "engine: the draft model %s (%s) has no batched forward pass", path,
                           draft->arch->name);
    if (draft->arch->slot_bytes(draft) > 0)
        return tela_errorf(TELA_ERR_UNSUPPORTED,
                           "engine: the draft model %s (%s) keeps a recurrent state; the engine drafts with "
                           "attention-only models (a Llama), or use --spec mtp or ngram",
                           path, draft->arch->name);
    return tela_runtime_kv_dtype(draft, kv_type, &dsp->kv_dtype);
}

tela_status tela_engine_create(tela_model *model, const tela_engine_params *params, tela_engine **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "tela_engine_create: out is NULL");
    *out = NULL;
    if (!model) return tela_errorf(TELA_ERR_ARG, "tela_engine_create: model is NULL");
    const tela_engine_params p = params ? *params : tela_engine_default_params();
    const tela_arch *arch = model->arch;
    if (!arch->forward_batch)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "engine: the %s architecture has no batched forward pass", arch->name);
    if (p.n_ctx < 0 || p.n_parallel < 0 || p.kv_tokens < 0 || p.step_tokens < 0 || p.max_waiting < 0 ||
        p.checkpoint_interval < 0)
        return tela_errorf(TELA_ERR_ARG, "engine: negative sizes in the parameters");
    const int32_t n_ctx = tela_runtime_ctx(model, p.n_ctx);
    if (n_ctx < 2 || n_ctx > (1 << 24))
        return tela_errorf(TELA_ERR_ARG, "engine: context length %d is out of range (2..%d)", n_ctx, 1 << 24);
    const int32_t n_parallel = p.n_parallel ? p.n_parallel : 8;
    if (n_parallel > 4096) return tela_errorf(TELA_ERR_ARG, "engine: %d parallel sequences is too many", n_parallel);
    int64_t kv_tokens = p.kv_tokens ? p.kv_tokens : (int64_t)n_parallel * n_ctx;
    if (kv_tokens < n_ctx)
        return tela_errorf(TELA_ERR_ARG, "engine: a KV cache of %lld tokens cannot hold one context of %d",
                           (long long)kv_tokens, n_ctx);
    const int64_t n_blocks = (kv_tokens + ENGINE_BLOCK - 1) / ENGINE_BLOCK + 1;
    if (n_blocks * ENGINE_BLOCK > INT32_MAX / 2)
        return tela_errorf(TELA_ERR_ARG, "engine: a KV cache of %lld tokens is too large", (long long)kv_tokens);
    /* a step's tokens: 256 on the CPU; a GPU's prefill wants long steps
     * (its preferred batch, 4096 for CUDA), 2048 of them keep the decoding
     * sequences' steps short while prompts are processed */
    const int pref = tela_backend_preferred_batch(model->be);
    int32_t step_tokens = p.step_tokens ? p.step_tokens : pref > 2048 ? 2048 : 256;
    if (step_tokens < n_parallel) step_tokens = n_parallel;
    if (step_tokens < TELA_MODEL_STEP_ALIGN) step_tokens = TELA_MODEL_STEP_ALIGN;
    int32_t interval = p.checkpoint_interval ? p.checkpoint_interval : 256;
    interval = (interval + TELA_MODEL_STEP_ALIGN - 1) / TELA_MODEL_STEP_ALIGN * TELA_MODEL_STEP_ALIGN;

    tela_engine *e = calloc(1, sizeof *e);
    if (!e) return tela_errorf(TELA_ERR_NOMEM, "engine: out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->model = model;
    e->arch = arch;
    e->n_ctx = n_ctx;
    e->n_parallel = n_parallel;
    e->step_tokens = step_tokens;
    e->max_waiting = p.max_waiting ? p.max_waiting : 64;
    e->ckpt_interval = interval;
    e->prefix_cache = p.prefix_cache != 0;
    e->n_vocab = model->info.n_vocab;
    e->image_bytes = arch->slot_bytes(model);
    e->rewinds = e->image_bytes > 0 && arch->slot_rewind;
    e->mtp = arch->mtp_layers && arch->mtp_draft_batch && arch->mtp_layers(model) > 0;
    e->next_id = 1;
    tela_status st = TELA_OK;
    tela_state_params sp = {n_ctx, TELA_KV_DTYPE_F32, n_parallel, ENGINE_BLOCK, (int32_t)(n_blocks * ENGINE_BLOCK),
                            step_tokens};
    st = tela_runtime_kv_dtype(model, p.kv_type, &sp.kv_dtype);
    tela_state_params dsp = sp;
    if (st == TELA_OK && p.draft_model) st = engine_draft_check(model, p.draft_model, p.kv_type, &dsp);
    if (st == TELA_OK) {
        const uint64_t need = arch->state_bytes(model, &sp, step_tokens) +
                              (p.draft_model ? p.draft_model->arch->state_bytes(p.draft_model, &dsp, step_tokens) : 0) +
                              (uint64_t)n_parallel * (uint64_t)e->n_vocab * sizeof(float) * (p.draft_model ? 2 : 1);
        st = tela_runtime_check_memory(model, p.mem_budget, need, "engine", n_ctx, sp.kv_dtype);
    }
    const int n_threads = p.n_threads > 0 ? p.n_threads : model->n_threads;
    if (st == TELA_OK) st = tela_exec_create(model->be, n_threads, &e->ex);
    if (st == TELA_OK) e->device_picks = !tela_exec_host_visible(e->ex);
    /* (0 threads: the backend's default, all cores on the CPU; a GPU's host
     * draws with all of its cores too) */
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    e->sample_threads = n_threads > 0 ? n_threads : cores > 0 ? (int)cores : 1;
    const char *sth = getenv("TELA_ENGINE_SAMPLE_THREADS"); /* to measure: 1 = the scheduler alone */
    if (sth && atoi(sth) > 0) e->sample_threads = atoi(sth);
    if (st == TELA_OK) st = arch->state_create(model, e->ex, &sp, &e->state);
    if (st == TELA_OK && p.draft_model) {
        e->draft = p.draft_model;
        const bool cpus = tela_backend_get_kind(model->be) == TELA_BACKEND_CPU &&
                          tela_backend_get_kind(e->draft->be) == TELA_BACKEND_CPU;
        if (!cpus) st = tela_exec_create(e->draft->be, n_threads, &e->d_ex);
        tela_exec *dx = cpus ? e->ex : e->d_ex;
        if (st == TELA_OK) e->d_device_picks = !tela_exec_host_visible(dx);
        if (st == TELA_OK) st = e->draft->arch->state_create(e->draft, dx, &dsp, &e->d_state);
        e->d_runs = malloc((size_t)n_parallel * sizeof *e->d_runs);
        e->d_req = malloc((size_t)n_parallel * sizeof *e->d_req);
        e->d_map = malloc((size_t)n_parallel * sizeof *e->d_map);
        e->d_logits = malloc((size_t)n_parallel * (size_t)e->n_vocab * sizeof(float));
        e->d_picks = malloc((size_t)n_parallel * sizeof *e->d_picks);
        if (st == TELA_OK && (!e->d_runs || !e->d_req || !e->d_map || !e->d_logits || !e->d_picks))
            st = tela_errorf(TELA_ERR_NOMEM, "engine: out of memory for the draft model");
    }
    const uint64_t ckpt_budget = p.checkpoint_bytes ? p.checkpoint_bytes : (uint64_t)1 << 30;
    if (st == TELA_OK) {
        e->pool = tela_kv_pool_create((int32_t)n_blocks, ENGINE_BLOCK, e->image_bytes, e->n_vocab, ckpt_budget);
        e->image = e->image_bytes ? malloc(e->image_bytes) : NULL;
        e->logits = tela_backend_host_alloc(e->model->be, (size_t)n_parallel * (size_t)e->n_vocab * sizeof(float));
        e->picks = malloc((size_t)n_parallel * sizeof *e->picks);
        e->jobs = malloc((size_t)n_parallel * sizeof *e->jobs);
        e->logit_rows = n_parallel;
        e->free_slots = malloc((size_t)n_parallel * sizeof *e->free_slots);
        e->running = calloc((size_t)n_parallel, sizeof *e->running);
        e->runs = calloc((size_t)n_parallel, sizeof *e->runs);
        e->run_req = calloc((size_t)n_parallel, sizeof *e->run_req);
        if (!e->pool || (e->image_bytes && !e->image) || !e->logits || !e->picks || !e->jobs || !e->free_slots ||
            !e->running || !e->runs || !e->run_req)
            st = tela_errorf(TELA_ERR_NOMEM, "engine: out of memory");
        else
            st = tela_spec_verifier_init(&e->ver, e->n_vocab);
        if (st == TELA_OK && e->mtp) {
            e->mtp_q = malloc((size_t)n_parallel * sizeof *e->mtp_q);
            e->mtp_req = malloc((size_t)n_parallel * sizeof *e->mtp_req);
            e->mtp_logits = malloc((size_t)n_parallel * (size_t)e->n_vocab * sizeof(float));
            e->mtp_picks = malloc((size_t)n_parallel * sizeof *e->mtp_picks);
            if (!e->mtp_q || !e->mtp_req || !e->mtp_logits || !e->mtp_picks)
                st = tela_errorf(TELA_ERR_NOMEM, "engine: out of memory");
        }
    }
    if (st == TELA_OK) {
        for (int i = 0; i < n_parallel; i++) e->free_slots[i] = n_parallel - 1 - i;
        e->n_free_slots = n_parallel;
        e->stats.block_size = ENGINE_BLOCK;
        e->stats.kv_blocks_total = (int32_t)n_blocks;
        if (pthread_create(&e->thread, NULL, scheduler, e) != 0)
            st = tela_errorf(TELA_ERR_NOMEM, "engine: cannot start the scheduler thread");
        else
            e->thread_started = true;
    }
    if (st != TELA_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tela_last_error());
        tela_engine_free(e);
        return tela_errorf(st, "%s", msg);
    }
    *out = e;
    return TELA_OK;
}

int32_t tela_engine_n_ctx(const tela_engine *e) { return e ? e->n_ctx : 0; }

static char *dup_str(const char *s) {
    const size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

tela_status tela_engine_submit(tela_engine *e, const int32_t *prompt, int32_t n_prompt, const tela_request_params *params,
                               uint64_t *id) {
    if (id) *id = 0;
    if (!e || !params || (n_prompt > 0 && !prompt)) return tela_errorf(TELA_ERR_ARG, "tela_engine_submit: bad arguments");
    if (n_prompt <= 0) return tela_errorf(TELA_ERR_ARG, "tela_engine_submit: the prompt is empty");
    if (n_prompt > e->n_ctx)
        return tela_errorf(TELA_ERR_CONTEXT, "the prompt has %d tokens, more than the context of %d", n_prompt,
                           e->n_ctx);
    const tela_model *m = e->model;
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->n_vocab)
            return tela_errorf(TELA_ERR_ARG, "prompt token %d (at %d) is not in the vocabulary of %d", prompt[i], i,
                               e->n_vocab);
    if (params->top_logprobs > ENGINE_MAX_TOP)
        return tela_errorf(TELA_ERR_ARG, "top_logprobs %d: at most %d", params->top_logprobs, ENGINE_MAX_TOP);
    if (params->stop_strings && params->stop_strings[0] && !m->vocab)
        return tela_errorf(TELA_ERR_ARG, "stop strings need a tokenizer, and this model has none");
    for (size_t i = 0; i < params->sampler.n_logit_bias; i++)
        if (params->sampler.logit_bias[i].token < 0 || params->sampler.logit_bias[i].token >= e->n_vocab)
            return tela_errorf(TELA_ERR_ARG, "logit_bias: token %d is not in the vocabulary of %d",
                               params->sampler.logit_bias[i].token, e->n_vocab);
    if (params->n_lookup_tokens < 0 || (params->n_lookup_tokens > 0 && !params->lookup_tokens))
        return tela_errorf(TELA_ERR_ARG, "tela_engine_submit: bad lookup tokens");
    for (int32_t i = 0; i < params->n_lookup_tokens; i++)
        if (params->lookup_tokens[i] < 0 || params->lookup_tokens[i] >= e->n_vocab)
            return tela_errorf(TELA_ERR_ARG, "predicted token %d (at %d) is not in the vocabulary of %d",
                               params->lookup_tokens[i], i, e->n_vocab);
    tela_spec_params spec = tela_spec_default_params();
    if (params->n_lookup_tokens > 0 && !(params->spec && params->spec->method != TELA_SPEC_NONE)) {
        spec.method = TELA_SPEC_NGRAM; /* predicted outputs: prompt lookup in them, long drafts */
        spec.draft_max = 8;
        TELA_TRY(tela_spec_params_check(&spec));
    }
    if (params->spec && params->spec->method != TELA_SPEC_NONE) {
        spec = *params->spec;
        if (spec.method == TELA_SPEC_DRAFT && !e->draft)
            return tela_errorf(TELA_ERR_UNSUPPORTED,
                               "speculative decoding with a draft model needs the engine started with one "
                               "(tela_engine_params.draft_model; tela serve --draft FILE)");
        if (spec.method == TELA_SPEC_MTP && !e->mtp)
            return tela_errorf(TELA_ERR_UNSUPPORTED,
                               "MTP drafting needs a model with a multi-token-prediction block, loaded (load_mtp): %s "
                               "has %s",
                               m->path ? m->path : "the model",
                               m->arch->mtp_layers ? "none loaded" : "no MTP support in its architecture");
        if (spec.method != TELA_SPEC_NGRAM && spec.method != TELA_SPEC_MTP && spec.method != TELA_SPEC_DRAFT)
            return tela_errorf(TELA_ERR_ARG, "speculative decoding: unknown method %d", (int)spec.method);
        TELA_TRY(tela_spec_params_check(&spec));
        spec.draft = NULL;
    }
    eng_req *r = calloc(1, sizeof *r);
    if (!r) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    r->params = *params;
    r->params.spec = NULL;
    r->spec = spec;
    r->params.lookup_tokens = NULL;
    if (params->n_lookup_tokens > 0 && spec.method == TELA_SPEC_NGRAM) {
        r->lookup = malloc((size_t)params->n_lookup_tokens * sizeof *r->lookup);
        if (!r->lookup) {
            free(r);
            return tela_errorf(TELA_ERR_NOMEM, "out of memory");
        }
        memcpy(r->lookup, params->lookup_tokens, (size_t)params->n_lookup_tokens * sizeof *r->lookup);
        r->n_lookup = params->n_lookup_tokens;
    }
    r->slot = -1;
    r->n_prompt = r->n_tokens = n_prompt;
    r->tokens = malloc(((size_t)e->n_ctx + 1) * sizeof *r->tokens);
    r->blocks = malloc((size_t)(blocks_for(e->n_ctx + 1) + 1) * sizeof *r->blocks);
    r->hashes = malloc((size_t)(e->n_ctx / ENGINE_BLOCK + 2) * sizeof *r->hashes);
    bool ok = r->tokens && r->blocks && r->hashes;
    size_t n_stops = 0;
    for (const char *const *s = params->stop_strings; s && *s; s++) n_stops++;
    if (ok && n_stops) {
        r->stops = calloc(n_stops + 1, sizeof *r->stops);
        ok = r->stops != NULL;
        for (size_t i = 0; ok && i < n_stops; i++) ok = (r->stops[i] = dup_str(params->stop_strings[i])) != NULL;
    }
    if (ok && params->sampler.n_logit_bias) {
        r->bias = malloc(params->sampler.n_logit_bias * sizeof *r->bias);
        ok = r->bias != NULL;
        if (ok) memcpy(r->bias, params->sampler.logit_bias, params->sampler.n_logit_bias * sizeof *r->bias);
    }
    r->params.stop_strings = (const char *const *)r->stops;
    r->params.sampler.logit_bias = r->bias;
    if (ok) ok = (r->text = tela_text_stream_create(m->vocab, r->params.stop_strings)) != NULL;
    if (!ok) {
        req_free(r);
        return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    }
    memcpy(r->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    r->hashes[0] = TELA_KV_CHAIN_ROOT;
    r->t_submit = now_seconds();
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        req_free(r);
        return tela_errorf(TELA_ERR_BUSY, "the engine is shutting down");
    }
    if (e->stats.waiting + e->n_in >= e->max_waiting) { /* queued: the scheduler's list (as of its last step) and ours */
        const int32_t w = e->stats.waiting + e->n_in;
        pthread_mutex_unlock(&e->mu);
        req_free(r);
        return tela_errorf(TELA_ERR_BUSY, "%d requests are already waiting (the limit is %d)", w, e->max_waiting);
    }
    r->id = e->next_id++;
    if (e->in_tail) e->in_tail->next = r;
    else e->in_head = r;
    e->in_tail = r;
    e->n_in++;
    if (id) *id = r->id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return TELA_OK;
}

void tela_engine_cancel(tela_engine *e, uint64_t id) {
    if (!e || id == 0) return;
    pthread_mutex_lock(&e->mu);
    if (e->n_cancels == e->cap_cancels) {
        const int cap = e->cap_cancels ? 2 * e->cap_cancels : 16;
        uint64_t *c = realloc(e->cancels, (size_t)cap * sizeof *c);
        if (!c) {
            pthread_mutex_unlock(&e->mu);
            return;
        }
        e->cancels = c;
        e->cap_cancels = cap;
    }
    e->cancels[e->n_cancels++] = id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void tela_engine_get_stats(tela_engine *e, tela_engine_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    out->waiting += e->n_in;
    pthread_mutex_unlock(&e->mu);
}
