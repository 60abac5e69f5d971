/* ops.h: the CPU backend's operations, the building blocks of a model's
 * forward pass. Activations are f32, rows of a batch of tokens laid out with
 * a stride (in floats) between consecutive tokens. Weights stay in their
 * stored type (any type tela_dequantize_row handles) and are described by a
 * tela_mat view.
 *
 * Determinism: each output element is computed by one thread with a fixed
 * order of arithmetic that does not depend on the number of threads, so the
 * results are bit-identical for any thread count. */
#ifndef TELA_BACKEND_CPU_OPS_H
#define TELA_BACKEND_CPU_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "util/threadpool.h"
#include "backend/backend.h"
#include "format/tensor.h"

/* Whether matmul/get_rows can use a weight of this type. */
bool tela_op_type_supported(tela_type type);

/* Per-thread scratch (in floats) that tela_op_matmul needs for a matrix with
 * n_cols columns; reserve it on the pool first. */
size_t tela_op_matmul_scratch(int64_t n_cols);

/* y[t][o] = sum_i W[o][i] * x[t][i] for t < n_tok, o < W.n_rows.
 * x rows are x_stride floats apart, y rows y_stride floats apart. Parallel
 * over chunks of output rows. For quantized weights the activations are
 * first quantized to 8 bits (Q8_0 / Q8_K, the qdot kernels' vec_dot type)
 * unless the exact mode is on; float weights use f32 activations. */
void tela_op_matmul(tela_threadpool *pool, const tela_mat *w, const float *x, int64_t x_stride, float *y,
                    int64_t y_stride, int n_tok);

/* Several products of the same activations, y_i = W_i x (e.g. the query,
 * key and value projections): the same results as tela_op_matmul on each,
 * with x quantized once and all rows in one dispatch to the pool (fewer
 * synchronizations per token when decoding). */
void tela_op_matmul_many(tela_threadpool *pool, const tela_matmul_target *t, int n, const float *x, int64_t x_stride,
                         int n_tok);

/* Bytes of W in the packed layout of this CPU's kernels, 0 if W is not
 * worth packing: no packed kernels for its type, the exact mode is on, or
 * TELA_PACK=0 is set in the environment (to compare with the unpacked
 * kernels). */
size_t tela_op_pack_bytes(const tela_mat *w);

/* Rearranges W into buf (tela_op_pack_bytes(w) bytes, 64-byte aligned), in
 * parallel on pool, and sets w->packed = buf. Packing is done once, at
 * load; w->data stays valid for get_rows and the exact path. */
void tela_op_pack(tela_threadpool *pool, tela_mat *w, void *buf);

/* out[t] = row ids[t] of W (dequantized), e.g. the token embedding lookup.
 * The ids must be in [0, W.n_rows). */
void tela_op_get_rows(const tela_mat *w, const int32_t *ids, int n, float *out, int64_t out_stride);
/* tela_exec_get_rows_part on the host (scratch: w->n_cols floats, needed
 * with accumulate only). */
void tela_op_get_rows_part(const tela_mat *w, int64_t row0, bool accumulate, const int32_t *ids, int n, float *out,
                           int64_t out_stride, float *scratch);

/* f32 dot product with a fixed summation order (8 interleaved partial sums). */
float tela_dot_f32(const float *a, const float *b, int64_t n);

/* out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, for n_tok rows of n floats.
 * w may be NULL (no scale). out may equal x. */
void tela_op_rmsnorm(float *out, int64_t out_stride, const float *x, int64_t x_stride, const float *w, int64_t n,
                     int n_tok, float eps);

/* The same, tokens split over the pool's threads (NULL: this thread). */
void tela_op_rmsnorm_pool(tela_threadpool *pool, float *out, int64_t out_stride, const float *x, int64_t x_stride,
                          const float *w, int64_t n, int n_tok, float eps);

/* RoPE angle table for n_tok positions pos[t]: cs[t][i] = (cos, sin) of
 * pos[t] * inv_freq[i] for i < n_rot/2, computed in double. */
void tela_rope_table(float *cs, const int32_t *pos, int n_tok, const double *inv_freq, int n_rot);

/* Rotates the first n_rot dims of each of n_heads heads (head_dim floats
 * each, contiguous) of each token row, using the table from tela_rope_table. */
void tela_op_rope(float *x, int64_t x_stride, int n_tok, int n_heads, int head_dim, int n_rot, const float *cs,
                  tela_rope_mode mode);

/* In-place softmax of n floats. */
void tela_op_softmax(float *x, int64_t n);

/* gate[i] = silu(gate[i]) * up[i] (SwiGLU), for n floats. */
void tela_op_swiglu(float *gate, const float *up, int64_t n);

/* The same split in chunks over the pool's threads (NULL: this thread);
 * the results do not depend on the split. */
void tela_op_swiglu_pool(tela_threadpool *pool, float *gate, const float *up, int64_t n);

/* y[i] += x[i] for n floats. */
void tela_op_add(float *y, const float *x, int64_t n);

/* Causal multi-head attention with grouped KV heads over a cache.
 * q: n_tok rows (q_stride apart) of n_head * k_dim floats, token t at
 *   position pos0 + t.
 * k, v: cache rows for positions 0..pos0+n_tok-1, k_stride / v_stride
 *   floats apart; row p holds n_kv_head * k_dim keys / n_kv_head * v_dim
 *   values.
 * out: n_tok rows (out_stride apart) of n_head * v_dim floats.
 * Query head h reads KV head h / (n_head / n_kv_head). Scores are scaled by
 * `scale`. Needs tela_op_attention_scratch floats of per-thread scratch. */
typedef struct tela_attn_args {
    const float *q;
    int64_t q_stride;
    const void *k;               /* f32, f16 when kv_f16, Q8_0 when kv_q8 (strides in elements) */
    int64_t k_stride;
    const void *v;
    int64_t v_stride;
    float *out;
    int64_t out_stride;
    int n_tok;
    int32_t pos0;
    int n_head;
    int n_kv_head;
    int k_dim;
    int v_dim;
    float scale;
    /* A paged cache: position p's row is blocks[p / block_size] *
     * block_size + p % block_size (NULL: row p). */
    const int32_t *blocks;
    int32_t block_size;
    int kv_f16;                  /* k and v hold IEEE halves */
    /* elements from one KV head's rows to the next's: 0 for rows that hold
     * every head (head h at h * k_dim); a head-major cache's rows * k_dim */
    int64_t k_head_stride, v_head_stride;
    /* k and v hold Q8_0 blocks (32 values: an f16 scale, 32 int8; kv_f16
     * 0): strides still count values, all multiples of 32; the values
     * computed on are the dequantized ones (int8 x scale) */
    int kv_q8;
} tela_attn_args;

/* Runs n_args attentions (the sequences of a batched step) in one dispatch
 * to the pool; each result is the same as that of a call on its own. */
void tela_op_attention(tela_threadpool *pool, const tela_attn_args *args, int n_args);

/* Per-thread scratch (floats) tela_op_attention needs for a context of
 * n_ctx positions and key heads of k_dim. */
size_t tela_op_attention_scratch(int n_ctx, int k_dim);

#endif
