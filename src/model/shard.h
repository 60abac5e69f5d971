/* shard.h: the tensor-parallel shard plan (issue 16, docs/MULTI-GPU.md):
 * which rows or columns of each weight tensor rank r of N holds, for the
 * Llama and Qwen3.5 architectures, Megatron-style. Attention is split by
 * KV head (a rank's query heads are those that read its KV heads; with
 * more ranks than KV heads each KV head is copied to several), the
 * FFN by its inner dimension, Qwen3.5's Gated DeltaNet by key head (with
 * the value heads that use them), embeddings and the output head by
 * vocabulary; the products whose inputs are split (wo, ffn_down, the
 * DeltaNet's out_proj) are split by columns, and an all-reduce sums their
 * partial outputs. Norm weights are replicated. Only the plan lives here
 * (plain arithmetic, tested on the CPU); the loader and the backends use
 * it when tensor parallelism is built. */
#ifndef TELA_MODEL_SHARD_H
#define TELA_MODEL_SHARD_H

#include <stdint.h>

#include "tela/tela.h"

/* The dimensions a plan depends on (filled from a model's hyperparameters). */
typedef struct {
    int64_t n_embd, n_ff, n_vocab;
    int n_head, n_kv_head, head_dim;
    int q_gate;      /* Qwen3.5: wq holds each head's query then its gate (2 * head_dim rows a head) */
    int gdn_nk, gdn_nv, gdn_dk, gdn_dv; /* Qwen3.5's Gated DeltaNet heads and head sizes; 0: none */
    int gdn_tiled;   /* value head j uses key head j % nk (a GGUF from llama.cpp's converter), not j / (nv / nk) (HF) */
} tela_shard_dims;

/* What a weight tensor is, for the plan. */
typedef enum {
    TELA_ROLE_REPLICATED = 0, /* norms and anything else every rank holds whole */
    TELA_ROLE_TOKEN_EMBD,     /* [n_vocab][n_embd]: rows by vocabulary */
    TELA_ROLE_OUTPUT,         /* [n_vocab][n_embd]: rows by vocabulary */
    TELA_ROLE_WQ,             /* rows: query heads (x2 with q_gate) */
    TELA_ROLE_WK,             /* rows: KV heads */
    TELA_ROLE_WV,
    TELA_ROLE_WO,             /* columns: query heads */
    TELA_ROLE_FFN_GATE,       /* rows: the inner dimension */
    TELA_ROLE_FFN_UP,
    TELA_ROLE_FFN_DOWN,       /* columns: the inner dimension */
    TELA_ROLE_GDN_QKV,        /* rows: q (nk * dk) | k (nk * dk) | v (nv * dv) */
    TELA_ROLE_GDN_CONV,       /* the conv1d weight: rows (channels) as GDN_QKV */
    TELA_ROLE_GDN_Z,          /* rows: value heads x dv */
    TELA_ROLE_GDN_HEAD,       /* one row (or element) a value head: beta, alpha, ssm_a, dt_bias */
    TELA_ROLE_GDN_OUT,        /* columns: value heads x dv */
    TELA_ROLE_COUNT
} tela_shard_role;

typedef enum { TELA_SHARD_WHOLE = 0, TELA_SHARD_ROWS, TELA_SHARD_COLS } tela_shard_axis;

#define TELA_SHARD_MAX_RANGES 16

/* Rank r's part of a tensor: ranges of rows (or columns) of the whole
 * tensor, in order; the rank's tensor is their concatenation. */
typedef struct {
    tela_shard_axis axis;
    int n_ranges;
    int64_t begin[TELA_SHARD_MAX_RANGES], count[TELA_SHARD_MAX_RANGES];
} tela_shard;

/* Whether the model splits over `world` ranks: the KV heads must divide
 * by it (or, with more ranks than KV heads, it by them and the query heads
 * by it), the FFN's inner dimension and the DeltaNet's key heads too (an
 * error naming the count otherwise); world 1 always does. */
tela_status tela_shard_plan_check(const tela_shard_dims *d, int world);

/* The KV heads each rank holds: n_kv_head / world, or 1 when there are
 * more ranks than KV heads (each KV head is then copied to world /
 * n_kv_head ranks, which split its query heads; vLLM does the same). */
int tela_shard_kv_heads(const tela_shard_dims *d, int world);

/* Rank `rank`'s part of a tensor of this role (the plan must have passed
 * tela_shard_plan_check). World 1, and replicated roles: the whole
 * tensor (axis TELA_SHARD_WHOLE, no ranges). */
void tela_shard_of(const tela_shard_dims *d, tela_shard_role role, int rank, int world, tela_shard *out);

/* The role of a GGUF tensor of a layer or of the model, by its name
 * without the "blk.N." prefix ("attn_q.weight", "token_embd.weight");
 * TELA_ROLE_REPLICATED for names the plan does not split. */
tela_shard_role tela_shard_role_of(const char *name);

/* Whether a shard of a tensor of this type can be cut from the stored
 * rows: column ranges must fall on the type's block boundaries (an error
 * naming the tensor, the type and the column otherwise). */
tela_status tela_shard_check_type(const tela_shard *s, tela_type type, const char *tensor);

/* Bytes of a rank's part of a tensor of n_rows rows of n_cols elements
 * of this type; 0 when a column range splits a block. */
size_t tela_shard_bytes(const tela_shard *s, tela_type type, int64_t n_rows, int64_t n_cols);

/* Copies a rank's part of a tensor stored row-major at src (n_rows rows of
 * n_cols elements of this type, as in a GGUF file) into dst
 * (tela_shard_bytes of it): the shard's rows in order, or of every row the
 * shard's columns in order; the whole tensor for TELA_SHARD_WHOLE. What a
 * loader uploads to each GPU, read straight from the mapped file. */
tela_status tela_shard_extract(const tela_shard *s, tela_type type, int64_t n_rows, int64_t n_cols, const void *src,
                               void *dst);

#endif
