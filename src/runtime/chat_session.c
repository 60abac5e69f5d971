/* chat_session.c: multi-turn chat that keeps the evaluated state between
 * turns: the prefix cache (live state + snapshots, matched against a new
 * prompt's tokens) and the conversation (messages, template rendering,
 * tokenization, one turn = evaluate the new tail + generate). See
 * chat_session.h for the reasons behind the design. */
#include "runtime/chat_session.h"
#include "runtime/session.h"
#include "tokenizer/chat.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------- prefix cache */

struct tela_prefix_cache {
    tela_session *session;
    tela_snapshot **snaps;  /* oldest first */
    int n_snaps, max_snaps;
};

tela_status tela_prefix_cache_create(tela_session *session, int max_snapshots, tela_prefix_cache **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "prefix cache: out is NULL");
    *out = NULL;
    if (!session || max_snapshots < 0) return tela_errorf(TELA_ERR_ARG, "prefix cache: bad arguments");
    tela_prefix_cache *c = calloc(1, sizeof *c);
    if (!c) return tela_errorf(TELA_ERR_NOMEM, "prefix cache: out of memory");
    c->session = session;
    c->max_snaps = max_snapshots ? max_snapshots : TELA_PREFIX_CACHE_DEFAULT_SNAPSHOTS;
    c->snaps = calloc((size_t)c->max_snaps, sizeof *c->snaps);
    if (!c->snaps) {
        free(c);
        return tela_errorf(TELA_ERR_NOMEM, "prefix cache: out of memory");
    }
    *out = c;
    return TELA_OK;
}

void tela_prefix_cache_clear(tela_prefix_cache *cache) {
    if (!cache) return;
    for (int i = 0; i < cache->n_snaps; i++) tela_snapshot_free(cache->snaps[i]);
    cache->n_snaps = 0;
}

void tela_prefix_cache_free(tela_prefix_cache *cache) {
    if (!cache) return;
    tela_prefix_cache_clear(cache);
    free(cache->snaps);
    free(cache);
}

int tela_prefix_cache_count(const tela_prefix_cache *cache) { return cache ? cache->n_snaps : 0; }

/* Whether a state holding have[0..n_have) (with logits after it or not)
 * can serve a prompt of tokens[0..n): it must be a prefix, and when it is
 * the whole prompt, generation needs its logits. */
static bool usable_prefix(const int32_t *have, int32_t n_have, bool has_logits, const int32_t *tokens, int32_t n) {
    if (n_have > n || (n_have == n && !has_logits)) return false;
    return n_have == 0 || !memcmp(have, tokens, (size_t)n_have * sizeof *tokens);
}

tela_status tela_prefix_cache_prepare(tela_prefix_cache *cache, const int32_t *tokens, int32_t n,
                                      int32_t *n_reused) {
    if (!cache || !n_reused || n < 0 || (n > 0 && !tokens))
        return tela_errorf(TELA_ERR_ARG, "prefix cache: bad arguments");
    *n_reused = 0;
    tela_session *s = cache->session;
    if (n > s->n_ctx)
        return tela_errorf(TELA_ERR_CONTEXT, "%d tokens do not fit in the context of %d", n, s->n_ctx);
    /* The live state wins ties: it needs no copy. Among snapshots the
     * newest wins ties (it is the likeliest to be followed by more). */
    int32_t best = -1;
    const tela_snapshot *best_snap = NULL;
    if (usable_prefix(s->tokens, s->n_past, s->has_logits, tokens, n)) best = s->n_past;
    for (int i = cache->n_snaps - 1; i >= 0; i--) {
        const tela_snapshot *sn = cache->snaps[i];
        if (sn->n_past > best && usable_prefix(sn->tokens, sn->n_past, sn->logits != NULL, tokens, n)) {
            best = sn->n_past;
            best_snap = sn;
        }
    }
    if (best_snap) {
        TELA_TRY(tela_session_restore(s, best_snap));
    } else if (best < 0) {
        tela_session_reset(s);
        best = 0;
    }
    *n_reused = best;
    return TELA_OK;
}

tela_status tela_prefix_cache_save(tela_prefix_cache *cache) {
    if (!cache) return tela_errorf(TELA_ERR_ARG, "prefix cache: NULL");
    const tela_session *s = cache->session;
    for (int i = 0; i < cache->n_snaps; i++) {
        tela_snapshot *sn = cache->snaps[i];
        if (sn->n_past == s->n_past && (sn->logits != NULL || !s->has_logits) &&
            !memcmp(sn->tokens, s->tokens, (size_t)s->n_past * sizeof *s->tokens))
            return TELA_OK; /* already kept, and as useful */
    }
    tela_snapshot *snap;
    TELA_TRY(tela_session_snapshot(s, &snap));
    if (cache->n_snaps == cache->max_snaps) {
        tela_snapshot_free(cache->snaps[0]);
        memmove(cache->snaps, cache->snaps + 1, (size_t)(cache->n_snaps - 1) * sizeof *cache->snaps);
        cache->n_snaps--;
    }
    cache->snaps[cache->n_snaps++] = snap;
    return TELA_OK;
}

/* ---------------------------------------------------- tokenizing a chat */

tela_status tela_chat_tokenize_rendered(const tela_model *model, const char *text, int32_t **tokens,
                                        size_t *n_tokens) {
    if (!tokens || !n_tokens) return tela_errorf(TELA_ERR_ARG, "chat: bad arguments");
    *tokens = NULL;
    *n_tokens = 0;
    if (!model || !text) return tela_errorf(TELA_ERR_ARG, "chat: bad arguments");
    const tela_vocab *v = model->vocab;
    if (!v) return tela_errorf(TELA_ERR_UNSUPPORTED, "chat: the model %s has no tokenizer", model->path);
    size_t len = strlen(text);
    /* One slot for a BOS in front; a second pass when the guess is short. */
    size_t cap = len + 8, n = 0;
    int32_t *buf = NULL;
    for (int pass = 0; pass < 2; pass++) {
        buf = malloc((cap + 1) * sizeof *buf);
        if (!buf) return tela_errorf(TELA_ERR_NOMEM, "chat: out of memory tokenizing %zu bytes", len);
        tela_status st = tela_vocab_tokenize(v, text, len, false, true, buf + 1, cap, &n);
        if (st == TELA_OK) break;
        free(buf);
        buf = NULL;
        if (st != TELA_ERR_ARG || n <= cap || pass == 1) return st;
        cap = n;
    }
    int32_t bos = tela_vocab_bos(v);
    bool add_bos = tela_vocab_adds_bos(v) && bos >= 0 && (n == 0 || buf[1] != bos);
    if (add_bos) buf[0] = bos;
    else memmove(buf, buf + 1, n * sizeof *buf);
    *tokens = buf;
    *n_tokens = n + (add_bos ? 1 : 0);
    return TELA_OK;
}

/* A special token's text ("<|begin_of_text|>"), malloc'd; NULL when there
 * is none (the template then sees it undefined). */
static char *special_text(const tela_vocab *v, int32_t token) {
    if (token < 0) return NULL;
    size_t n = tela_vocab_token_bytes(v, token, false, NULL, 0);
    char *buf = malloc(n + 1);
    if (!buf) return NULL;
    size_t got = tela_vocab_token_bytes(v, token, false, buf, n);
    buf[got < n ? got : n] = '\0';
    return buf;
}

/* Renders messages (a cJSON array) with add_generation_prompt. */
static tela_status render(const tela_model *model, const char *tmpl, const cJSON *messages, char **out) {
    *out = NULL;
    if (!model->vocab) return tela_errorf(TELA_ERR_UNSUPPORTED, "chat: the model %s has no tokenizer", model->path);
    if (!tmpl) tmpl = tela_vocab_chat_template(model->vocab);
    if (!tmpl) return tela_errorf(TELA_ERR_NOT_FOUND, "chat: the model %s has no chat template", model->path);
    tela_chat_params p;
    memset(&p, 0, sizeof p);
    p.messages = messages;
    p.add_generation_prompt = true;
    char *bos = special_text(model->vocab, tela_vocab_bos(model->vocab));
    char *eos = special_text(model->vocab, tela_vocab_eos(model->vocab));
    p.bos_token = bos;
    p.eos_token = eos;
    tela_status st = tela_chat_render_json(tmpl, &p, out);
    free(bos);
    free(eos);
    return st;
}

static tela_status add_message(cJSON *messages, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) || !cJSON_AddStringToObject(m, "content", content)) {
        cJSON_Delete(m);
        return tela_errorf(TELA_ERR_NOMEM, "chat: out of memory");
    }
    cJSON_AddItemToArray(messages, m);
    return TELA_OK;
}

tela_status tela_chat_prompt_tokens(const tela_model *model, const char *template_src, const char *system,
                                    const char *user, int32_t **tokens, size_t *n_tokens) {
    if (!tokens || !n_tokens) return tela_errorf(TELA_ERR_ARG, "chat: bad arguments");
    *tokens = NULL;
    *n_tokens = 0;
    if (!model || !user) return tela_errorf(TELA_ERR_ARG, "chat: bad arguments");
    cJSON *msgs = cJSON_CreateArray();
    if (!msgs) return tela_errorf(TELA_ERR_NOMEM, "chat: out of memory");
    tela_status st = TELA_OK;
    if (system && system[0]) st = add_message(msgs, "system", system);
    if (st == TELA_OK) st = add_message(msgs, "user", user);
    char *text = NULL;
    if (st == TELA_OK) st = render(model, template_src, msgs, &text);
    if (st == TELA_OK) st = tela_chat_tokenize_rendered(model, text, tokens, n_tokens);
    free(text);
    cJSON_Delete(msgs);
    return st;
}

/* ------------------------------------------------------- chat session */

struct tela_chat_session {
    tela_session *session;
    tela_prefix_cache *cache;
    char *template_src;     /* NULL: the model's */
    bool no_reuse;
    bool has_system;
    void (*on_rendered)(void *user, const char *text, int32_t n_tokens, int32_t n_reused);
    void *user;
    cJSON *messages;
    char *reply;            /* the last reply's text */
    size_t reply_len, reply_cap;
    char *prompt;           /* the last rendered conversation */
    bool reply_oom;
    const tela_generate_params *user_params; /* during a turn */
};

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

tela_status tela_chat_session_create(tela_session *session, const tela_chat_session_params *params,
                                     tela_chat_session **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "chat: out is NULL");
    *out = NULL;
    if (!session) return tela_errorf(TELA_ERR_ARG, "chat: session is NULL");
    tela_chat_session_params p;
    memset(&p, 0, sizeof p);
    if (params) p = *params;
    const tela_model *m = session->model;
    if (!m->vocab)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "chat: the model %s has no tokenizer%s%s", m->path,
                           m->no_vocab_reason ? ": " : "", m->no_vocab_reason ? m->no_vocab_reason : "");
    if (!p.template_src && !tela_vocab_chat_template(m->vocab))
        return tela_errorf(TELA_ERR_NOT_FOUND, "chat: the model %s has no chat template", m->path);

    tela_chat_session *c = calloc(1, sizeof *c);
    if (!c) return tela_errorf(TELA_ERR_NOMEM, "chat: out of memory");
    c->session = session;
    c->no_reuse = p.no_reuse;
    c->on_rendered = p.on_rendered;
    c->user = p.user;
    tela_status st = TELA_OK;
    c->messages = cJSON_CreateArray();
    if (p.template_src) c->template_src = dup_str(p.template_src);
    if (!c->messages || (p.template_src && !c->template_src))
        st = tela_errorf(TELA_ERR_NOMEM, "chat: out of memory");
    if (st == TELA_OK && p.system && p.system[0]) {
        st = add_message(c->messages, "system", p.system);
        c->has_system = true;
    }
    if (st == TELA_OK && !p.no_reuse)
        st = tela_prefix_cache_create(session, p.max_snapshots ? p.max_snapshots : 2, &c->cache);
    if (st != TELA_OK) {
        tela_chat_session_free(c);
        return st;
    }
    *out = c;
    return TELA_OK;
}

void tela_chat_session_free(tela_chat_session *chat) {
    if (!chat) return;
    tela_prefix_cache_free(chat->cache);
    cJSON_Delete(chat->messages);
    free(chat->template_src);
    free(chat->reply);
    free(chat->prompt);
    free(chat);
}

void tela_chat_session_reset(tela_chat_session *chat) {
    if (!chat) return;
    int keep = chat->has_system ? 1 : 0;
    while (cJSON_GetArraySize(chat->messages) > keep)
        cJSON_DeleteItemFromArray(chat->messages, cJSON_GetArraySize(chat->messages) - 1);
}

size_t tela_chat_session_n_messages(const tela_chat_session *chat) {
    return chat ? (size_t)cJSON_GetArraySize(chat->messages) : 0;
}

/* Collects the reply's text on its way to the caller's callback. */
static int collect_piece(void *user, int32_t token, const char *piece, size_t len) {
    tela_chat_session *c = user;
    if (len && !c->reply_oom) {
        if (c->reply_len + len + 1 > c->reply_cap) {
            size_t cap = c->reply_cap ? c->reply_cap : 256;
            while (cap < c->reply_len + len + 1) cap *= 2;
            char *nb = realloc(c->reply, cap);
            if (!nb) {
                c->reply_oom = true;
                return 1;
            }
            c->reply = nb;
            c->reply_cap = cap;
        }
        memcpy(c->reply + c->reply_len, piece, len);
        c->reply_len += len;
        c->reply[c->reply_len] = '\0';
    }
    const tela_generate_params *up = c->user_params;
    return up->on_token ? up->on_token(up->user, token, piece, len) : 0;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

tela_status tela_chat_session_turn(tela_chat_session *chat, const char *user, const tela_generate_params *params,
                                   tela_chat_turn_result *result) {
    if (!chat || !user || !params || !result) return tela_errorf(TELA_ERR_ARG, "chat: bad arguments");
    memset(result, 0, sizeof *result);
    tela_session *s = chat->session;
    const tela_model *m = s->model;
    TELA_TRY(add_message(chat->messages, "user", user));

    free(chat->prompt);
    chat->prompt = NULL;
    int32_t *toks = NULL;
    size_t n = 0;
    tela_status st = render(m, chat->template_src, chat->messages, &chat->prompt);
    if (st == TELA_OK) st = tela_chat_tokenize_rendered(m, chat->prompt, &toks, &n);
    /* At least one position must be left for the reply. */
    if (st == TELA_OK && n >= (size_t)s->n_ctx)
        st = tela_errorf(TELA_ERR_CONTEXT, "the conversation is %zu tokens and the context holds %d", n, s->n_ctx);
    if (st == TELA_OK && n == 0) st = tela_errorf(TELA_ERR_ARG, "chat: the template rendered nothing");

    double t0 = now_seconds();
    int32_t reused = 0;
    if (st == TELA_OK) {
        if (chat->no_reuse) tela_session_reset(s);
        else st = tela_prefix_cache_prepare(chat->cache, toks, (int32_t)n, &reused);
    }
    if (st == TELA_OK && (int32_t)n > reused)
        st = tela_session_eval_internal(s, toks + reused, (int32_t)n - reused, NULL, 0, true);
    if (st == TELA_OK && !chat->no_reuse) st = tela_prefix_cache_save(chat->cache);
    free(toks);
    if (st != TELA_OK) {
        cJSON_DeleteItemFromArray(chat->messages, cJSON_GetArraySize(chat->messages) - 1);
        return st;
    }
    result->n_tokens = (int32_t)n;
    result->n_reused = reused;
    result->n_new = (int32_t)n - reused;
    result->prompt_seconds = now_seconds() - t0;
    result->prompt = chat->prompt;
    if (chat->on_rendered) chat->on_rendered(chat->user, chat->prompt, result->n_tokens, reused);

    tela_generate_params gp = *params;
    gp.on_token = collect_piece;
    gp.user = chat;
    chat->user_params = params;
    chat->reply_len = 0;
    chat->reply_oom = false;
    if (chat->reply) chat->reply[0] = '\0';
    st = tela_generate(s, NULL, 0, &gp, NULL, 0, &result->gen);
    chat->user_params = NULL;
    if (st == TELA_OK && chat->reply_oom) st = tela_errorf(TELA_ERR_NOMEM, "chat: out of memory for the reply");
    if (st == TELA_OK && !chat->no_reuse) st = tela_prefix_cache_save(chat->cache);
    /* The reply joins the conversation even when generation stopped early,
     * so the next rendering shows what the user saw. */
    tela_status st2 = add_message(chat->messages, "assistant", chat->reply ? chat->reply : "");
    if (st == TELA_OK) st = st2;
    result->reply = chat->reply ? chat->reply : "";
    return st;
}
