/* spec.h: the drafters of speculative decoding (spec.c), as the generation
 * loop (generate.c) uses them: checked parameters, proposals continuing the
 * context, and for a draft model that samples, the distribution each of its
 * proposals was drawn from. The verification and the acceptance rule live
 * in generate.c. */
#ifndef TELA_RUNTIME_SPEC_H
#define TELA_RUNTIME_SPEC_H

#include <stdbool.h>
#include "runtime/sampler.h"
#include "runtime/session.h"

/* The uniform streams of speculative sampling (tela_sampler_uniform):
 * stream 0 is the sampler's own draw. */
enum { TELA_SPEC_STREAM_ACCEPT = 1, TELA_SPEC_STREAM_RESIDUAL = 2, TELA_SPEC_STREAM_DRAFT = 3 };

typedef struct tela_spec tela_spec;

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
