/* session.h: the runtime's view of a session (shared by session.c and
 * generate.c): the model, the architecture's state, the backend exec, the
 * tokens at each position and the last computed logits. */
#ifndef TELA_RUNTIME_SESSION_H
#define TELA_RUNTIME_SESSION_H

#include <stdbool.h>
#include "model/model.h"

struct tela_session {
    tela_model *model;
    void *state;             /* owned by model->arch */
    tela_exec *ex;           /* where the forward passes run */
    int32_t n_ctx;
    int32_t n_past;
    int32_t *tokens;         /* [n_ctx]: the token at each position < n_past */
    float *logits;           /* [n_vocab]: logits after the last token, when has_logits */
    bool has_logits;
    /* A mark for rolling back (tela_session_mark): the recurrent state
     * (the architecture's slot image, none for attention-only models) as
     * it was after position mark_pos; -1 when there is none. */
    int32_t mark_pos;
    void *mark_state;
    size_t mark_bytes;
    /* The last evaluation kept every token's recurrent state
     * (tela_session_eval_keep): it covered positions keep_pos ..
     * keep_pos + keep_n - 1; keep_pos -1 when not. */
    int32_t keep_pos;
    int32_t keep_n;
};

struct tela_snapshot {
    const tela_model *model;
    int32_t n_ctx;
    int32_t n_past;
    int32_t *tokens;         /* [n_past] */
    size_t state_bytes;
    void *state;             /* the architecture's image of its state */
    float *logits;           /* [n_vocab] the session's last logits, or NULL */
};

/* tela_session_eval, also storing the last position's logits in the
 * session (s->logits) when store_last is set. */
tela_status tela_session_eval_internal(tela_session *s, const int32_t *tokens, int32_t n, float *logits,
                                       int all_logits, bool store_last);

/* Evaluates tokens like tela_session_eval and returns the greedy pick of
 * the last position's logits, chosen where they were computed (on a GPU
 * only the token comes back); the session then holds no host logits. */
tela_status tela_session_eval_greedy(tela_session *s, const int32_t *tokens, int32_t n, int32_t *pick);
/* ... and every position's greedy pick (picks[0..n)): a speculative
 * verification on a GPU, where the logits then stay on the device. */
tela_status tela_session_eval_picks(tela_session *s, const int32_t *tokens, int32_t n, int32_t *picks);

/* Rolling back (speculative decoding): tela_session_mark remembers the
 * state at n_past (for models with recurrent state, a copy of it: the
 * attention KV rows need no copy, positions are only ever overwritten);
 * tela_session_truncate(s, n) makes the session as it was after its first
 * n tokens (n <= n_past): attention-only models just forget the positions
 * past n; others reload the mark (when it is at or before n) and evaluate
 * the tokens from the mark to n again, or, with no usable mark, start over
 * from position 0 (or, right after tela_session_eval_keep, copy the state
 * it kept). The result is bit-identical to having evaluated only those n
 * tokens in the same pieces. The session holds no logits after a
 * truncation that changed anything. A truncation below the mark, a reset
 * or a restore drops the mark. */
tela_status tela_session_mark(tela_session *s);
tela_status tela_session_truncate(tela_session *s, int32_t n);
/* Whether truncating costs an evaluation (the model has recurrent state). */
bool tela_session_has_recurrent(const tela_session *s);
/* Models with recurrent state whose forward pass can keep the state after
 * each token (Qwen3.5 sessions): tela_session_eval_keep evaluates like
 * tela_session_eval with every position's logits (or, with logits NULL,
 * every position's greedy pick into picks) and keeps them, so that a
 * truncation to a position within that evaluation (before any other) is a
 * copy of the kept state, with no mark and no evaluation again. */
bool tela_session_keeps_states(const tela_session *s);
tela_status tela_session_eval_keep(tela_session *s, const int32_t *tokens, int32_t n, float *logits,
                                   int32_t *picks);

/* Multi-token prediction (the model's own drafter, when its MTP block is
 * loaded): the blocks loaded (0: none), and one draft step
 * (tela_arch.mtp_draft): at pos = n_past - 1 from the last position's
 * hidden state, or with chain at the positions after from the previous
 * step's output; tok the token that follows; logits (host) and/or the
 * greedy pick of the guess at the token after tok. The positions it writes
 * past n_past - 1 are the next evaluation's to overwrite. */
int tela_session_mtp_layers(const tela_session *s);
tela_status tela_session_mtp_draft(tela_session *s, int32_t tok, int32_t pos, bool chain, float *logits,
                                   int32_t *pick);

/* Shared with the engine: the KV precision a kv_type means on the model's
 * device (f16 only on a GPU); the context length n_ctx (0: the default)
 * means; and the memory check (need bytes against the budget, or what the
 * device has free), failing with the numbers and what to change. */
tela_status tela_runtime_kv_dtype(const tela_model *model, tela_kv_type type, tela_kv_dtype *out);
int32_t tela_runtime_ctx(const tela_model *model, int32_t n_ctx);
tela_status tela_runtime_check_memory(const tela_model *model, uint64_t mem_budget, uint64_t need, const char *who,
                                      int32_t n_ctx, tela_kv_dtype kv);

#endif
