/* spec.h: the drafters of speculative decoding (spec.c), as the generation
 * loop (generate.c) and the batching engine (engine.c) use them: checked
 * parameters, proposals continuing the context, for a draft model that
 * samples the distribution each of its proposals was drawn from, and the
 * acceptance rule of a verification pass. */
#ifndef TELA_RUNTIME_SPEC_H
#define TELA_RUNTIME_SPEC_H

#include <stdbool.h>
#include "runtime/sampler.h"
#include "runtime/session.h"

/* The uniform streams of speculative sampling (tela_sampler_uniform):
 * stream 0 is the sampler's own draw. */
enum { TELA_SPEC_STREAM_ACCEPT = 1, TELA_SPEC_STREAM_RESIDUAL = 2, TELA_SPEC_STREAM_DRAFT = 3 };

typedef struct tela_spec tela_spec;

/* Fills in p's defaults and checks its numbers (draft_max, the n-gram
 * sizes); the method's needs (a draft session, an MTP block) are checked
 * where they are used. */
tela_status tela_spec_params_check(tela_spec_params *p);

/* Prompt lookup: for n-gram sizes from ngram_max down to ngram_min, the
 * latest earlier place where ctx's last n tokens occur, and up to k of the
 * tokens that followed them there (all before the end of ctx) into
 * drafts[]; returns how many (0: no match). */
int32_t tela_spec_ngram(const int32_t *ctx, int32_t n, int32_t k, int32_t ngram_min, int32_t ngram_max,
                        int32_t *drafts);

/* Prompt lookup in another text: for n-gram sizes from ngram_max down to
 * ngram_min, the first occurrence at or after corpus position `from` (else
 * the latest before it) of ctx's last n tokens in corpus[0..n_corpus), and
 * up to k of the tokens that follow it there into drafts[]; returns how
 * many, and where they end in the corpus (*end, for the next `from`). */
int32_t tela_spec_ngram_in(const int32_t *ctx, int32_t n, const int32_t *corpus, int32_t n_corpus, int32_t from,
                           int32_t k, int32_t ngram_min, int32_t ngram_max, int32_t *drafts, int32_t *end);

/* The acceptance rule's scratch for a vocabulary of n_vocab tokens. */
typedef struct tela_spec_verifier {
    int32_t n_vocab;
    tela_token_prob *dist;  /* [n_vocab]: the target's final distribution at a position */
    double *q;              /* [n_vocab]: a draft distribution by id (zero elsewhere) */
} tela_spec_verifier;

tela_status tela_spec_verifier_init(tela_spec_verifier *v, int32_t n_vocab);
void tela_spec_verifier_free(tela_spec_verifier *v);

/* Whether to accept draft x at the position whose logits are row (edited
 * in place; history: the tokens before the position, step: its index), and
 * the token emitted there (*out: x, or what replaces it). Greedy: accepted
 * when x is the sampler's pick. Sampling: with p the sampler's final
 * distribution and q the draft's (qd[0..nq), a point mass at x when qd is
 * NULL), accepted with probability min(1, p(x)/q(x)), else *out drawn from
 * norm(max(0, p - q)), with the streams TELA_SPEC_STREAM_ACCEPT and
 * _RESIDUAL. */
tela_status tela_spec_accept(tela_spec_verifier *v, const tela_sampler_params *sp, float *row, const int32_t *history,
                             size_t n_history, uint64_t step, int32_t x, const tela_token_prob *qd, size_t nq,
                             bool *accepted, int32_t *out);

/* Checks p against the target session and the sampler settings and makes
 * the drafter's state for one generation call (defaults filled in). */
tela_status tela_spec_begin(const tela_spec_params *p, tela_session *target, const tela_sampler_params *sampler,
                            tela_spec **out);
void tela_spec_end(tela_spec *sp);
/* k (draft_max) after defaults. */
int32_t tela_spec_draft_max(const tela_spec *sp);

/* Proposes up to k (<= draft_max) tokens continuing ctx[0..n) (the
 * target's tokens and the one sampled but not yet evaluated) into
 * drafts[], *n_draft of them (0: nothing to propose). For a draft model the
 * tokens ctx[0..n) are what its session is brought to first (rolling back
 * what differs). */
tela_status tela_spec_propose(tela_spec *sp, const int32_t *ctx, int32_t n, int32_t k, int32_t *drafts,
                              int32_t *n_draft);
/* The distribution draft i of the last proposal was drawn from, when a
 * draft model sampled it (*n entries); NULL when the proposal was a point
 * mass (greedy drafting, n-grams). */
const tela_token_prob *tela_spec_draft_dist(const tela_spec *sp, int32_t i, size_t *n);

#endif
