/* chat_session.h: multi-turn chat on one session without re-evaluating the
 * conversation every turn.
 *
 * Two layers:
 *  - tela_prefix_cache, the token-level half: a session plus a few
 *    snapshots of it, each with the tokens it holds. Given the tokens of a
 *    new prompt, it brings the session to the longest state that is a
 *    prefix of them (the live state, or a restored snapshot, or an empty
 *    session), so only the rest needs evaluating. Snapshots rather than
 *    rewinding n_past, because recurrent state (Qwen3.5's Gated DeltaNet)
 *    cannot be rewound.
 *  - tela_chat_session, the conversation: messages rendered with the
 *    model's chat template (add_generation_prompt), tokenized, evaluated
 *    through the prefix cache (a snapshot after each turn's prompt and
 *    after each reply), then a streamed reply that joins the conversation.
 *
 * Why both snapshots: the template re-renders the assistant's reply from
 * its text, which need not give back the sampled tokens (an end-of-turn
 * token the sampler chose but tela_generate did not evaluate, trimmed
 * whitespace, thinking removed, or text that tokenizes differently). When
 * the after-reply snapshot is no prefix of the new rendering, the
 * after-prompt one still is. */
#ifndef TELA_RUNTIME_CHAT_SESSION_H
#define TELA_RUNTIME_CHAT_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tela/tela.h"

/* ------------------------------------------------------- prefix cache */

#define TELA_PREFIX_CACHE_DEFAULT_SNAPSHOTS 4

typedef struct tela_prefix_cache tela_prefix_cache;

/* A cache over session (not owned; it must outlive the cache) keeping at
 * most max_snapshots snapshots (0 = the default), the oldest dropped first. */
tela_status tela_prefix_cache_create(tela_session *session, int max_snapshots, tela_prefix_cache **out);
void tela_prefix_cache_free(tela_prefix_cache *cache);

/* Brings the session to the longest known state whose tokens are a prefix
 * of tokens[0..n): the live state (kept as it is), else a snapshot
 * (restored), else nothing (the session is reset). *n_reused receives its
 * length; the caller evaluates tokens[*n_reused..n). A state holding all n
 * tokens counts only when it also holds the logits after them, so
 * generation can follow. Fails with TELA_ERR_CONTEXT, changing nothing,
 * when n exceeds the session's context. */
tela_status tela_prefix_cache_prepare(tela_prefix_cache *cache, const int32_t *tokens, int32_t n,
                                      int32_t *n_reused);

/* Snapshots the session as it is now (skipped when an equal snapshot is
 * already kept). */
tela_status tela_prefix_cache_save(tela_prefix_cache *cache);

/* Drops every snapshot. */
void tela_prefix_cache_clear(tela_prefix_cache *cache);
int tela_prefix_cache_count(const tela_prefix_cache *cache);

/* ------------------------------------------------------- chat session */

typedef struct tela_chat_session tela_chat_session;

typedef struct tela_chat_session_params {
    const char *system;        /* system prompt, or NULL / "" for none */
    const char *template_src;  /* a Jinja chat template replacing the model's, or NULL */
    bool no_reuse;             /* evaluate each turn's whole rendering in an empty session */
    int max_snapshots;         /* for the prefix cache; 0 = 2: the latest turn's after-prompt
                                * and after-reply states, which is what the next turn can use
                                * (each snapshot holds a copy of the KV cache) */
    /* Called in each turn with the rendered conversation before the reply
     * is generated (for showing or logging it), or NULL. */
    void (*on_rendered)(void *user, const char *text, int32_t n_tokens, int32_t n_reused);
    void *user;
} tela_chat_session_params;

/* Starts a conversation on session (not owned). Fails with
 * TELA_ERR_NOT_FOUND when the model has no chat template and none is given,
 * TELA_ERR_UNSUPPORTED when it has no tokenizer. */
tela_status tela_chat_session_create(tela_session *session, const tela_chat_session_params *params,
                                     tela_chat_session **out);
void tela_chat_session_free(tela_chat_session *chat);

/* Forgets the conversation but keeps the system prompt (and the snapshots,
 * which are still valid states of the session). */
void tela_chat_session_reset(tela_chat_session *chat);
/* Messages so far, the system prompt included. */
size_t tela_chat_session_n_messages(const tela_chat_session *chat);

typedef struct tela_chat_turn_result {
    int32_t n_tokens;          /* tokens of the whole rendered conversation */
    int32_t n_reused;          /* of them, already in the session's state */
    int32_t n_new;             /* of them, evaluated in this turn (n_tokens - n_reused) */
    double prompt_seconds;     /* restoring and evaluating the new tokens */
    tela_generate_result gen;  /* the reply (gen.n_prompt is 0) */
    const char *reply;         /* the reply's text; valid until the next call on chat */
    const char *prompt;        /* the rendered conversation; valid until the next call on chat */
} tela_chat_turn_result;

/* One turn: adds the user message, renders the conversation, evaluates what
 * the session does not hold yet, and generates the reply with params (its
 * on_token callback streams it; generated tokens are not returned). The
 * reply joins the conversation. When the rendered conversation does not
 * fit in the context (TELA_ERR_CONTEXT) or anything else fails before the
 * reply, the user message is dropped again, so the conversation is as
 * before the call. */
tela_status tela_chat_session_turn(tela_chat_session *chat, const char *user, const tela_generate_params *params,
                                   tela_chat_turn_result *result);

/* ---------------------------------------------------------- one-shot */

/* Renders [system,] user with add_generation_prompt through template_src
 * (NULL: the model's template) and tokenizes it as tela_chat_session does:
 * special tokens in the text are parsed, and BOS is added only when the
 * vocabulary adds one and the template has not written it. *tokens is
 * malloc'd (caller frees). */
tela_status tela_chat_prompt_tokens(const tela_model *model, const char *template_src, const char *system,
                                    const char *user, int32_t **tokens, size_t *n_tokens);

/* Tokenizes a rendered chat prompt the same way. */
tela_status tela_chat_tokenize_rendered(const tela_model *model, const char *text, int32_t **tokens,
                                        size_t *n_tokens);

#endif
