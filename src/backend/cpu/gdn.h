/* gdn.h: Gated DeltaNet kernels for the linear-attention layers of Qwen3.5
 * (and Qwen3-Next) on the CPU: the gated delta rule as a token-by-token
 * recurrence (decode) and in its chunked parallel form (prefill), the causal
 * depthwise conv1d with a rolling state, L2 norm and gated RMSNorm.
 *
 * All kernels work on float32. The recurrent state of one value head is a
 * dk x dv matrix S stored row-major (S[i*dv + j], i over the key dimension),
 * the layout transformers uses ([.., k_head_dim, v_head_dim]).
 *
 * The math, per value head and token t (q, k already L2-normalized):
 *     S     <- exp(g_t) * S
 *     delta  = beta_t * (v_t - S^T k_t)
 *     S     <- S + k_t delta^T
 *     o_t    = S^T (q_t * q_scale)          (q_scale = 1/sqrt(dk) in Qwen3.5)
 * The chunked form computes the same outputs and final state, up to float
 * rounding, in blocks of TELA_GDN_CHUNK tokens (blocks of up to
 * TELA_GDN_RECURRENT_MAX tokens by the recurrence). */
#ifndef TELA_BACKEND_CPU_GDN_H
#define TELA_BACKEND_CPU_GDN_H

#include <stddef.h>
#include <stdint.h>

#define TELA_GDN_CHUNK 64

/* Chunks of at most this many tokens (a call's last chunk, or all of a
 * short call) run the recurrence instead of the chunked form: for a few
 * tokens it costs no more, and it gives bit-identical results to as many
 * single-token steps (speculative decoding verifies drafts of up to this
 * many tokens, minus one, with the bits plain decoding would get). */
#ifndef TELA_GDN_RECURRENT_MAX /* a build may set it (1: every chunk of 2+ tokens chunked), to compare */
#define TELA_GDN_RECURRENT_MAX 16
#endif

/* Views of one value head's inputs and outputs over a run of tokens. Each
 * pointer addresses token 0; the strides (in floats) step to the next token,
 * so the vectors can live inside wider per-token rows (q|k|v after the conv,
 * one g/beta per value head, the output row of all heads). */
typedef struct tela_gdn_io {
    int dk, dv;                 /* key and value head dimensions */
    float q_scale;              /* multiplies q (1/sqrt(dk)) */
    const float *q, *k;         /* dk floats per token */
    int64_t qk_stride;
    const float *v;             /* dv floats per token */
    int64_t v_stride;
    const float *g, *beta;      /* one float per token: log decay (<= 0), beta */
    int64_t gb_stride;
    float *out;                 /* dv floats per token */
    int64_t out_stride;
} tela_gdn_io;

/* Runs n tokens through the recurrence, updating state (dk*dv floats). */
void tela_gdn_recurrent(const tela_gdn_io *io, int64_t n, float *state);

/* Floats of scratch memory tela_gdn_chunked needs for heads of these sizes. */
size_t tela_gdn_chunked_work_floats(int dk, int dv);

/* Same result as tela_gdn_recurrent, computed in chunks of TELA_GDN_CHUNK
 * tokens as small matrix products (a chunk of up to TELA_GDN_RECURRENT_MAX
 * tokens by the recurrence itself). work: tela_gdn_chunked_work_floats()
 * floats, not shared with another thread. */
void tela_gdn_chunked(const tela_gdn_io *io, int64_t n, float *state, float *work);

/* Causal depthwise conv1d over n tokens followed by SiLU.
 * x, out: n rows of `channels` floats (row stride x_stride / out_stride);
 * out must not overlap x. w: channels rows of `kernel` taps, oldest input
 * first (the layout of HF's conv1d.weight [C,1,K] and GGUF ssm_conv1d
 * ne = {K, C}). state: the previous kernel-1 input rows, oldest first
 * ((kernel-1) * channels floats, zeros at the start of a sequence); it is
 * updated to hold the last kernel-1 inputs, so a sequence can be fed in
 * pieces. */
void tela_gdn_conv1d_silu(const float *x, int64_t x_stride, int64_t n, int channels, int kernel,
                          const float *w, float *state, float *out, int64_t out_stride);

/* x <- x / sqrt(sum(x^2) + eps), in place (transformers' l2norm; eps 1e-6). */
void tela_gdn_l2_norm(float *x, int n, float eps);

/* x <- (x / sqrt(mean(x^2) + eps)) * w * silu(z), in place: the output norm of
 * a GDN head (plain weight, no +1), gated by the z projection. */
void tela_gdn_gated_rms_norm(float *x, const float *z, const float *w, int n, float eps);

/* y[i] = exp(x[i]) for n floats with the exp the kernels above use (the
 * vectorized one where the CPU runs the AVX-512 kernels, within ~1 ulp of
 * the true value; expf elsewhere); x and y may be the same array. Exposed
 * for the tests. */
void tela_gdn_exp(const float *x, float *y, int64_t n);

#endif
