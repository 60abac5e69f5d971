/* sampler.h: the sampler's internals that speculative decoding needs
 * (sampler.c): the final distribution tela_sample draws from, a draw from
 * such a distribution, and the seeded uniform draws of further streams. */
#ifndef TELA_RUNTIME_SAMPLER_H
#define TELA_RUNTIME_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tela/tela.h"

/* One token of a distribution and its probability. */
typedef struct tela_token_prob {
    int32_t id;
    double p;
} tela_token_prob;

/* Whether the sampler picks the largest logit unchanged (greedy, no
 * penalties or bias): then the pick can be made where the logits are (a
 * device's argmax: the largest logit, the lowest id among equals). */
bool tela_sampler_plain_greedy(const tela_sampler_params *p);

/* tela_sample with the candidates in scratch (tela_sampler_scratch_bytes
 * of memory the caller keeps; NULL: allocated for the call): a caller
 * drawing many rows saves an allocation of the vocabulary's size a row,
 * whose page faults serialize threads drawing at once. */
size_t tela_sampler_scratch_bytes(int32_t n_vocab);
tela_status tela_sample_scratch(const tela_sampler_params *params, float *logits, int32_t n_vocab,
                                const int32_t *history, size_t n_history, uint64_t step, void *scratch,
                                int32_t *out_token);

/* The distribution tela_sample would draw from for these logits (modified
 * in place, as tela_sample does): after the logit bias, the penalties,
 * top-k, top-p, min-p and the temperature, out[0..*n_out) (out holds
 * n_vocab entries) with probabilities summing to 1, in the order the draw
 * walks them. With temperature <= 0 (greedy): the pick, probability 1.
 * Fails as tela_sample does. */
tela_status tela_sampler_dist(const tela_sampler_params *params, float *logits, int32_t n_vocab,
                              const int32_t *history, size_t n_history, tela_token_prob *out, size_t *n_out);

/* The token at which the cumulative probability of d[0..n) first exceeds
 * u * total (u in [0, 1)): a draw from d, which need not be normalized
 * (entries of probability 0 are never picked). -1 when the total is 0. */
int32_t tela_sampler_draw(const tela_token_prob *d, size_t n, double u);

/* A uniform draw in [0, 1), a pure function of (seed, step, stream), like
 * the sampler's own draw (stream 0 is exactly that one); other streams are
 * independent of it and of each other. */
double tela_sampler_uniform(uint64_t seed, uint64_t step, uint32_t stream);

#endif
