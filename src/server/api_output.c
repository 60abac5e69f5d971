/* api_output.c: generations of chat completions and completions from
 * their prompt tokens to the reply (see api_output.h): context checks,
 * sampling parameters, submitting the choices, then either gathering every
 * event into one JSON object or writing each as a server-sent event chunk
 * from the stream's pull function. The OpenAI shapes of choices, deltas,
 * log-probabilities and usage are written here. */
#include "server/api_output.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define WAIT_MS 100  /* how often a waiting request checks that its client is still there */

/* ------------------------------------------------------------- helpers */

uint64_t api_random64(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
        static _Atomic uint64_t counter;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ (++counter * 0x9e3779b97f4a7c15ull);
    }
    return v;
}

tela_status api_tokenize_text(const app *a, const char *text, size_t len, int add_special, int parse_special,
                              int32_t **out, size_t *n) {
    size_t cap = len + 8; /* a guess: a token takes at least one byte, plus specials */
    *out = NULL;
    *n = 0;
    for (int pass = 0; pass < 2; pass++) {
        int32_t *buf = malloc((cap + 1) * sizeof *buf);
        if (!buf) return TELA_ERR_NOMEM;
        size_t got = 0;
        tela_status st = tela_tokenize(a->model, text, len, add_special, parse_special, buf, cap, &got);
        if (st == TELA_OK) {
            *out = buf;
            *n = got;
            return TELA_OK;
        }
        free(buf);
        if (st != TELA_ERR_ARG || got <= cap) return st;
        cap = got;
    }
    return TELA_ERR_INTERNAL;
}

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static size_t utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static cJSON *bytes_json(const char *s, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)s[i]));
    return a;
}

static const char *piece(const app *a, int32_t token, size_t *len) {
    if (token < 0 || token >= a->n_vocab || !a->pieces || !a->pieces[token]) {
        *len = 0;
        return "";
    }
    *len = a->piece_lens[token];
    return a->pieces[token];
}

/* ------------------------------------------------------------ the call */

typedef struct lp_entry {
    int32_t token;
    float logprob;
    int32_t n_top;
    tela_top_logprob top[GEN_MAX_TOP];
} lp_entry;

typedef struct choice_state {
    int prompt;
    sbuf text;                   /* gathered replies */
    lp_entry *lps;               /* gathered log-probabilities */
    size_t n_lps, cap_lps;
    size_t chars;                /* code points so far (completions' text_offset) */
    int32_t *gen;                /* the generated tokens but end-of-generation ones (remembered chats) */
    size_t n_gen, cap_gen;
    int done;
    tela_stop_reason stop;
    tela_status status;
    char *error;
    tela_request_usage usage;
} choice_state;

typedef struct call {
    app *a;
    http_request *req;           /* used only on the request's thread, while it is live */
    api_kind kind;
    char id[48];
    long long created;
    int n_prompts, n_per_prompt, n_choices;
    size_t *prompt_lens;
    int32_t logprobs;            /* -1: none */
    int include_usage;
    int predicted;               /* the request gave a prediction (usage then counts its tokens) */
    gen_job *job;
    choice_state *ch;
    char *rendered;              /* a single chat reply to remember (api_generate), else NULL */
    int32_t *prompt0;            /* its prompt tokens */
    int lost_oom;                /* a chunk could not be written */
    /* streaming */
    sbuf out;
    size_t out_off;
    int finished;                /* all that will be sent is in out */
} call;

static void call_free(call *c) {
    if (!c) return;
    gen_job_release(c->job);
    for (int i = 0; c->ch && i < c->n_choices; i++) {
        free(c->ch[i].text.s);
        free(c->ch[i].lps);
        free(c->ch[i].error);
        free(c->ch[i].gen);
    }
    free(c->rendered);
    free(c->prompt0);
    free(c->ch);
    free(c->prompt_lens);
    free(c->out.s);
    free(c);
}

static call *call_create(app *a, http_request *req, api_kind kind, const api_gen *g, const api_tokens *prompts,
                         size_t n_prompts, const char *rendered) {
    call *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->a = a;
    c->req = req;
    c->kind = kind;
    snprintf(c->id, sizeof c->id, "%s-%016llx%08llx", kind == API_KIND_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)api_random64(), (unsigned long long)(http_request_id(req) & 0xffffffffu));
    c->created = (long long)time(NULL);
    c->n_prompts = (int)n_prompts;
    c->n_per_prompt = g->n;
    c->n_choices = (int)n_prompts * g->n;
    c->logprobs = g->logprobs;
    c->include_usage = g->include_usage;
    c->predicted = g->prediction != NULL;
    c->prompt_lens = calloc(n_prompts, sizeof *c->prompt_lens);
    c->ch = calloc((size_t)c->n_choices, sizeof *c->ch);
    c->job = gen_job_create(a->jobs, a->engine, c->n_choices);
    if (!c->prompt_lens || !c->ch || !c->job) {
        call_free(c);
        return NULL;
    }
    for (size_t i = 0; i < n_prompts; i++) c->prompt_lens[i] = prompts[i].n;
    if (rendered && c->n_choices == 1 && a->replies) { /* best effort: without memory, nothing is remembered */
        c->rendered = strdup(rendered);
        c->prompt0 = malloc(prompts[0].n * sizeof *c->prompt0);
        if (c->prompt0) memcpy(c->prompt0, prompts[0].ids, prompts[0].n * sizeof *c->prompt0);
    }
    for (int i = 0; i < c->n_choices; i++) c->ch[i].prompt = i / g->n;
    return c;
}

static tela_request_params request_params(const app *a, const api_gen *g, int k) {
    tela_request_params p = tela_request_default_params();
    if (a->spec.method != TELA_SPEC_NONE) p.spec = &a->spec;
    p.sampler = tela_sampler_default_params();
    p.sampler.temperature = (float)g->temperature;
    p.sampler.top_k = g->top_k;
    p.sampler.top_p = (float)g->top_p;
    p.sampler.min_p = (float)g->min_p;
    p.sampler.repeat_penalty = 1.0f;
    p.sampler.frequency_penalty = (float)g->frequency_penalty;
    p.sampler.presence_penalty = (float)g->presence_penalty;
    p.sampler.seed = g->has_seed ? g->seed + (uint64_t)k : api_random64();
    p.sampler.logit_bias = g->logit_bias;
    p.sampler.n_logit_bias = g->n_logit_bias;
    p.max_tokens = g->max_tokens;
    p.stop_strings = g->n_stop ? (const char *const *)g->stop : NULL;
    p.ignore_eos = g->ignore_eos;
    p.top_logprobs = g->logprobs;
    return p;
}

static const char *finish_reason(tela_stop_reason r) {
    switch (r) {
    case TELA_STOP_EOS:
    case TELA_STOP_STRING: return "stop";
    case TELA_STOP_MAX_TOKENS:
    case TELA_STOP_CONTEXT: return "length";
    default: return NULL;
    }
}

/* A choice that ended without a result: failed, or cancelled by shutdown. */
static int choice_failed(const choice_state *s) { return s->status != TELA_OK || !finish_reason(s->stop); }

static void choice_error(const choice_state *s, api_error *e) {
    if (s->status != TELA_OK || s->stop == TELA_STOP_ERROR)
        api_fail(e, 500, "server_error", "generation_failed", NULL, "generation failed: %s",
                 s->error ? s->error : tela_status_name(s->status));
    else
        api_fail(e, 503, "server_error", "shutting_down", NULL, "the request was cancelled: the server is shutting down");
}

/* Sums for usage and the log line. cached: per prompt, what all its
 * choices took from the prefix cache (the least of them). */
static void totals(const call *c, int32_t *prompt, int32_t *cached, int32_t *generated, double *first, double *tps) {
    *prompt = *cached = *generated = 0;
    *first = -1;
    double decode = 0;
    for (int p = 0; p < c->n_prompts; p++) {
        *prompt += (int32_t)c->prompt_lens[p];
        int32_t least = INT32_MAX;
        for (int k = 0; k < c->n_per_prompt; k++) {
            const tela_request_usage *u = &c->ch[p * c->n_per_prompt + k].usage;
            if (u->cached_tokens < least) least = u->cached_tokens;
        }
        *cached += least == INT32_MAX ? 0 : least;
    }
    for (int i = 0; i < c->n_choices; i++) {
        const tela_request_usage *u = &c->ch[i].usage;
        *generated += u->generated_tokens;
        if (u->generated_tokens > 0 && (*first < 0 || u->first_token_seconds < *first)) *first = u->first_token_seconds;
        double d = u->total_seconds - u->first_token_seconds;
        if (u->generated_tokens > 1 && d > decode) decode = d;
    }
    *tps = decode > 0 ? (*generated - c->n_choices) / decode : 0;
    if (*tps < 0) *tps = 0;
}

static void update_log(call *c, const char *note) {
    http_log_info li = {.has_tokens = 1, .note = note};
    totals(c, &li.prompt_tokens, &li.cached_tokens, &li.generated_tokens, &li.first_token_seconds,
           &li.tokens_per_second);
    http_set_log_info(c->req, &li);
}

static cJSON *usage_json(const call *c) {
    int32_t prompt, cached, generated;
    double first, tps;
    totals(c, &prompt, &cached, &generated, &first, &tps);
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", generated);
    cJSON_AddNumberToObject(u, "total_tokens", (double)prompt + generated);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    if (d) cJSON_AddNumberToObject(d, "cached_tokens", cached);
    if (c->a->spec.method != TELA_SPEC_NONE || c->predicted) { /* OpenAI's names, from its predicted outputs */
        int32_t drafted = 0, accepted = 0;
        for (int i = 0; i < c->n_choices; i++) {
            drafted += c->ch[i].usage.draft_tokens;
            accepted += c->ch[i].usage.accepted_tokens;
        }
        cJSON *cd = cJSON_AddObjectToObject(u, "completion_tokens_details");
        if (cd) {
            cJSON_AddNumberToObject(cd, "accepted_prediction_tokens", accepted);
            cJSON_AddNumberToObject(cd, "rejected_prediction_tokens", (double)drafted - accepted);
        }
    }
    return u;
}

static cJSON *base_json(const call *c, int chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", c->id);
    cJSON_AddStringToObject(o, "object",
                            c->kind == API_KIND_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                     : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)c->created);
    cJSON_AddStringToObject(o, "model", c->a->model_id);
    cJSON_AddStringToObject(o, "system_fingerprint", "tela-" TELA_VERSION);
    return o;
}

/* ---------------------------------------------- log-probabilities */

/* {"token", "logprob", "bytes"} of one token (chat's shape). */
static cJSON *chat_token_lp(const app *a, int32_t token, float logprob) {
    size_t n;
    const char *s = piece(a, token, &n);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "token", api_json_text(s, n));
    cJSON_AddNumberToObject(o, "logprob", (double)logprob);
    cJSON_AddItemToObject(o, "bytes", bytes_json(s, n));
    return o;
}

/* The entries of chat's logprobs.content. */
static cJSON *chat_logprobs(const app *a, const lp_entry *e, size_t n) {
    cJSON *lp = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(lp, "content");
    for (size_t i = 0; content && i < n; i++) {
        cJSON *o = chat_token_lp(a, e[i].token, e[i].logprob);
        cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int32_t k = 0; top && k < e[i].n_top; k++)
            cJSON_AddItemToArray(top, chat_token_lp(a, e[i].top[k].token, e[i].top[k].logprob));
        cJSON_AddItemToArray(content, o);
    }
    cJSON_AddNullToObject(lp, "refusal");
    return lp;
}

/* The legacy completions shape: tokens, token_logprobs, top_logprobs (an
 * object per token: the alternatives and the chosen token, piece ->
 * logprob) and text_offset (code points before each token). */
static cJSON *completion_logprobs(const app *a, const lp_entry *e, size_t n, size_t *chars) {
    cJSON *lp = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(lp, "tokens"), *lps = cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(lp, "top_logprobs"), *offs = cJSON_AddArrayToObject(lp, "text_offset");
    if (!toks || !lps || !tops || !offs) return lp;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = piece(a, e[i].token, &len);
        cJSON_AddItemToArray(toks, api_json_text(s, len));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber((double)e[i].logprob));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*chars));
        *chars += utf8_chars(s, len);
        cJSON *top = cJSON_CreateObject();
        for (int32_t k = 0; top && k <= e[i].n_top; k++) {
            int32_t t = k < e[i].n_top ? e[i].top[k].token : e[i].token;
            float v = k < e[i].n_top ? e[i].top[k].logprob : e[i].logprob;
            const char *ps = piece(a, t, &len);
            cJSON *key = api_json_text(ps, len);
            if (key && !cJSON_GetObjectItemCaseSensitive(top, key->valuestring))
                cJSON_AddNumberToObject(top, key->valuestring, (double)v);
            cJSON_Delete(key);
        }
        cJSON_AddItemToArray(tops, top);
    }
    return lp;
}

static void lp_from_event(lp_entry *l, const gen_event *e) {
    l->token = e->token;
    l->logprob = e->logprob;
    l->n_top = e->n_top;
    memcpy(l->top, e->top, (size_t)e->n_top * sizeof *l->top);
}

/* Whether a token's log-probability is reported: not an end-of-generation
 * token's (its text is not part of the reply either). */
static int reports_lp(const call *c, const gen_event *e) {
    return c->logprobs >= 0 && !tela_token_is_eog(c->a->model, e->token);
}

/* --------------------------------------------- remembered chat replies */

/* A TOKEN event of a chat reply to remember: its token (unless it ends the
 * generation) and, when streaming (gathering keeps the text anyway), its
 * text. */
static void remember_token(call *c, choice_state *s, const gen_event *e, int streaming) {
    if (!c->rendered || !c->prompt0) return;
    if (streaming) sb_add(&s->text, e->text, e->text_len);
    if (tela_token_is_eog(c->a->model, e->token)) return;
    if (s->n_gen == s->cap_gen) {
        size_t cap = s->cap_gen ? 2 * s->cap_gen : 64;
        int32_t *ng = realloc(s->gen, cap * sizeof *ng);
        if (!ng) {
            free(c->rendered); /* give up remembering this one */
            c->rendered = NULL;
            return;
        }
        s->gen = ng;
        s->cap_gen = cap;
    }
    s->gen[s->n_gen++] = e->token;
}

/* At the end of a chat reply to remember: only one that the model ended
 * (end of generation) or max_tokens cut, so that its text is exactly what
 * its tokens spell (a stop string hides some of it). */
static void remember_reply(call *c) {
    const choice_state *s = &c->ch[0];
    if (!c->rendered || !c->prompt0 || s->text.oom || s->status != TELA_OK ||
        (s->stop != TELA_STOP_EOS && s->stop != TELA_STOP_MAX_TOKENS))
        return;
    reply_memory_add(c->a->replies, c->rendered, strlen(c->rendered), c->prompt0, c->prompt_lens[0],
                     s->text.s ? s->text.s : "", s->text.len, s->gen, s->n_gen);
}

/* -------------------------------------------------------- gathering */

static void gather_event(call *c, gen_event *e) {
    choice_state *s = &c->ch[e->choice];
    s->usage = e->usage;
    if (e->kind == TELA_EVENT_TOKEN) {
        sb_add(&s->text, e->text, e->text_len);
        remember_token(c, s, e, 0);
        if (reports_lp(c, e)) {
            if (s->n_lps == s->cap_lps) {
                size_t cap = s->cap_lps ? 2 * s->cap_lps : 64;
                lp_entry *nl = realloc(s->lps, cap * sizeof *nl);
                if (!nl) {
                    c->lost_oom = 1;
                    return;
                }
                s->lps = nl;
                s->cap_lps = cap;
            }
            lp_from_event(&s->lps[s->n_lps++], e);
        }
    } else {
        s->done = 1;
        s->stop = e->stop_reason;
        s->status = e->status;
        s->error = e->error;
        e->error = NULL;
    }
}

static void reply_gathered(call *c) {
    api_error err;
    for (int i = 0; i < c->n_choices; i++) {
        if (c->ch[i].text.oom) c->lost_oom = 1;
        if (choice_failed(&c->ch[i])) {
            choice_error(&c->ch[i], &err);
            http_reply_error(c->req, &err);
            return;
        }
    }
    if (c->lost_oom || gen_job_lost_events(c->job)) {
        api_fail(&err, 500, "server_error", NULL, NULL, "out of memory while gathering the reply");
        http_reply_error(c->req, &err);
        return;
    }
    remember_reply(c);
    cJSON *root = base_json(c, 0);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    for (int i = 0; choices && i < c->n_choices; i++) {
        choice_state *s = &c->ch[i];
        cJSON *ch = cJSON_CreateObject();
        const char *txt = s->text.s ? s->text.s : "";
        if (c->kind == API_KIND_CHAT) {
            cJSON_AddNumberToObject(ch, "index", i);
            cJSON *msg = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddItemToObject(msg, "content", api_json_text(txt, s->text.len));
            cJSON_AddNullToObject(msg, "refusal");
            if (c->logprobs >= 0) cJSON_AddItemToObject(ch, "logprobs", chat_logprobs(c->a, s->lps, s->n_lps));
            else cJSON_AddNullToObject(ch, "logprobs");
        } else {
            cJSON_AddItemToObject(ch, "text", api_json_text(txt, s->text.len));
            cJSON_AddNumberToObject(ch, "index", i);
            size_t chars = 0;
            if (c->logprobs >= 0)
                cJSON_AddItemToObject(ch, "logprobs", completion_logprobs(c->a, s->lps, s->n_lps, &chars));
            else cJSON_AddNullToObject(ch, "logprobs");
        }
        cJSON_AddStringToObject(ch, "finish_reason", finish_reason(s->stop));
        cJSON_AddItemToArray(choices, ch);
    }
    cJSON_AddItemToObject(root, "usage", usage_json(c));
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    http_reply_json_text(c->req, 200, text);
}

/* Waits for every choice, checking between events that the client is
 * still there (if not: cancel, and no reply). */
static void gather(call *c) {
    for (;;) {
        gen_event *ev;
        int r = gen_job_wait(c->job, WAIT_MS, &ev);
        if (r < 0) break;
        if (r == 0) {
            if (http_client_gone(c->req)) {
                gen_job_cancel(c->job);
                update_log(c, "client gone, cancelled");
                return;
            }
            continue;
        }
        for (gen_event *e = ev; e; e = e->next) gather_event(c, e);
        gen_events_free(ev);
    }
    update_log(c, NULL);
    reply_gathered(c);
}

/* -------------------------------------------------------- streaming */

static void sse(call *c, cJSON *obj) {
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!text) {
        c->lost_oom = 1;
        return;
    }
    sb_add(&c->out, "data: ", 6);
    sb_add(&c->out, text, strlen(text));
    sb_add(&c->out, "\n\n", 2);
    free(text);
}

/* A chunk with one choice (ch, which it takes over). */
static cJSON *chunk(const call *c, cJSON *ch) {
    cJSON *o = base_json(c, 1);
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    if (arr) cJSON_AddItemToArray(arr, ch);
    else cJSON_Delete(ch);
    if (c->include_usage) cJSON_AddNullToObject(o, "usage");
    return o;
}

static cJSON *chat_choice(int index, const char *role, const char *text, size_t len, cJSON *logprobs,
                          const char *finish) {
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", index);
    cJSON *d = cJSON_AddObjectToObject(ch, "delta");
    if (role) cJSON_AddStringToObject(d, "role", role);
    if (text) cJSON_AddItemToObject(d, "content", api_json_text(text, len));
    if (logprobs) cJSON_AddItemToObject(ch, "logprobs", logprobs);
    else cJSON_AddNullToObject(ch, "logprobs");
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    return ch;
}

static cJSON *completion_choice(int index, const char *text, size_t len, cJSON *logprobs, const char *finish) {
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddItemToObject(ch, "text", api_json_text(text, len));
    cJSON_AddNumberToObject(ch, "index", index);
    if (logprobs) cJSON_AddItemToObject(ch, "logprobs", logprobs);
    else cJSON_AddNullToObject(ch, "logprobs");
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    return ch;
}

static void stream_error(call *c, const api_error *e) {
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddItemToObject(err, "message", api_json_text(e->message, strlen(e->message)));
    cJSON_AddStringToObject(err, "type", e->type);
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code[0]) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    sse(c, o);
    c->finished = 1;
}

static void stream_event(call *c, gen_event *e) {
    if (c->finished) return;
    choice_state *s = &c->ch[e->choice];
    s->usage = e->usage;
    if (e->kind == TELA_EVENT_TOKEN) {
        remember_token(c, s, e, 1);
        int lp = reports_lp(c, e);
        if (!e->text_len && !lp) return;
        lp_entry l;
        if (lp) lp_from_event(&l, e);
        if (c->kind == API_KIND_CHAT) {
            cJSON *lpj = lp ? chat_logprobs(c->a, &l, 1) : NULL;
            sse(c, chunk(c, chat_choice(e->choice, NULL, e->text, e->text_len, lpj, NULL)));
        } else {
            cJSON *lpj = lp ? completion_logprobs(c->a, &l, 1, &s->chars) : NULL;
            sse(c, chunk(c, completion_choice(e->choice, e->text, e->text_len, lpj, NULL)));
        }
        return;
    }
    s->done = 1;
    s->stop = e->stop_reason;
    s->status = e->status;
    s->error = e->error;
    e->error = NULL;
    if (choice_failed(s)) {
        api_error err;
        choice_error(s, &err);
        gen_job_cancel(c->job);
        stream_error(c, &err);
        return;
    }
    const char *fin = finish_reason(s->stop);
    if (c->kind == API_KIND_CHAT) sse(c, chunk(c, chat_choice(e->choice, NULL, NULL, 0, NULL, fin)));
    else sse(c, chunk(c, completion_choice(e->choice, "", 0, NULL, fin)));
}

static void stream_end(call *c) {
    if (c->finished) return;
    if (c->lost_oom || c->out.oom || gen_job_lost_events(c->job)) {
        api_error err;
        api_fail(&err, 500, "server_error", NULL, NULL, "out of memory while streaming the reply");
        c->out.oom = 0;
        stream_error(c, &err);
        return;
    }
    remember_reply(c);
    if (c->include_usage) {
        cJSON *o = base_json(c, 1);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_json(c));
        sse(c, o);
    }
    sb_add(&c->out, "data: [DONE]\n\n", 14);
    c->finished = 1;
}

/* The stream's pull (http.h): what is written out, else the next events,
 * waiting for them while the client is there. */
static ssize_t stream_pull(void *cls, char *buf, size_t max) {
    call *c = cls;
    for (;;) {
        if (c->out_off < c->out.len) {
            size_t n = c->out.len - c->out_off;
            if (n > max) n = max;
            memcpy(buf, c->out.s + c->out_off, n);
            c->out_off += n;
            if (c->out_off == c->out.len) c->out_off = c->out.len = 0;
            return (ssize_t)n;
        }
        if (c->finished) return HTTP_PULL_END;
        if (c->out.oom) return HTTP_PULL_ABORT;
        gen_event *ev;
        int r = gen_job_wait(c->job, WAIT_MS, &ev);
        if (r == 0) {
            if (http_client_gone(c->req)) {
                gen_job_cancel(c->job);
                update_log(c, "client gone, cancelled");
                return HTTP_PULL_ABORT;
            }
            continue;
        }
        if (r > 0) {
            for (gen_event *e = ev; e; e = e->next) stream_event(c, e);
            gen_events_free(ev);
        } else {
            stream_end(c);
        }
        update_log(c, NULL);
    }
}

/* The server is done with the stream (finished, or the client went away
 * while writing): what still runs is cancelled, and the job's reference
 * dropped (its engine requests keep theirs until their DONE). */
static void stream_done(void *cls) {
    call *c = cls;
    gen_job_cancel(c->job);
    call_free(c);
}

/* ------------------------------------------------------------ submit */

static void submit_error(api_error *e, tela_status st, const char *prompt_param) {
    switch (st) {
    case TELA_ERR_BUSY:
        api_fail(e, 429, "rate_limit_error", "queue_full", NULL, "the server is busy (%s): try again later",
                 tela_last_error());
        break;
    case TELA_ERR_CONTEXT:
        api_fail(e, 400, "invalid_request_error", "context_length_exceeded", prompt_param, "%s", tela_last_error());
        break;
    case TELA_ERR_ARG:
        api_fail(e, 400, "invalid_request_error", "invalid_value", NULL, "%s", tela_last_error());
        break;
    default:
        api_fail(e, 500, "server_error", NULL, NULL, "cannot start the generation: %s", tela_last_error());
        break;
    }
}

void api_generate(app *a, http_request *req, api_kind kind, const api_gen *g, const api_tokens *prompts,
                  size_t n_prompts, const char *prompt_param, const char *rendered) {
    api_error err;
    if (atomic_load(&a->shutting_down)) {
        api_fail(&err, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        http_reply_error(req, &err);
        return;
    }
    for (size_t i = 0; i < n_prompts; i++) {
        size_t n = prompts[i].n;
        char which[40] = "";
        if (n_prompts > 1) snprintf(which, sizeof which, " %zu", i);
        if (n == 0) {
            api_fail(&err, 400, NULL, "invalid_value", prompt_param, "the prompt%s is empty: it has no tokens", which);
            http_reply_error(req, &err);
            return;
        }
        if (n >= (size_t)a->n_ctx) {
            api_fail(&err, 400, NULL, "context_length_exceeded", prompt_param,
                     "the prompt%s is %zu tokens, and the context holds %d (at least one token must be left for the "
                     "reply)", which, n, a->n_ctx);
            http_reply_error(req, &err);
            return;
        }
        /* As OpenAI does: max_tokens must fit with the prompt, not be cut. */
        if (g->max_tokens > 0 && n + (size_t)g->max_tokens > (size_t)a->n_ctx) {
            api_fail(&err, 400, NULL, "context_length_exceeded", "max_tokens",
                     "the context holds %d tokens, and you asked for %zu: %zu in the prompt%s and %d to generate "
                     "(max_tokens). Lower max_tokens or shorten the prompt", a->n_ctx, n + (size_t)g->max_tokens, n,
                     which, g->max_tokens);
            http_reply_error(req, &err);
            return;
        }
    }
    call *c = call_create(a, req, kind, g, prompts, n_prompts, rendered);
    if (!c) {
        api_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
        http_reply_error(req, &err);
        return;
    }
    int32_t *pred = NULL; /* the prediction's tokens: the engine copies them */
    size_t n_pred = 0;
    if (g->prediction && api_tokenize_text(a, g->prediction, strlen(g->prediction), 0, 0, &pred, &n_pred) != TELA_OK) {
        api_fail(&err, 400, "invalid_request_error", NULL, "prediction.content", "cannot tokenize 'prediction.content'");
        gen_job_cancel(c->job);
        call_free(c);
        http_reply_error(req, &err);
        return;
    }
    for (int i = 0; i < c->n_choices; i++) {
        const api_tokens *p = &prompts[c->ch[i].prompt];
        tela_request_params rp = request_params(a, g, i % g->n);
        rp.lookup_tokens = pred;
        rp.n_lookup_tokens = (int32_t)n_pred;
        tela_status st = gen_job_submit(c->job, i, p->ids, (int32_t)p->n, &rp);
        if (st != TELA_OK) {
            free(pred);
            submit_error(&err, st, prompt_param);
            gen_job_cancel(c->job);
            call_free(c);
            http_reply_error(req, &err);
            return;
        }
    }
    free(pred);
    if (!g->stream) {
        gather(c);
        call_free(c);
        return;
    }
    if (kind == API_KIND_CHAT)
        for (int i = 0; i < c->n_choices; i++) sse(c, chunk(c, chat_choice(i, "assistant", "", 0, NULL, NULL)));
    http_reply_stream(req, 200, "text/event-stream", stream_pull, stream_done, c);
}
