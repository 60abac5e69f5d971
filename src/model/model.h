/* model.h: the model layer. A loaded model is its source file(s) (a GGUF or
 * a Hugging Face checkpoint, memory-mapped), its tokenizer, and an
 * architecture: a table of functions (tela_arch) that reads the
 * hyperparameters and weights, owns the per-session state (KV cache,
 * recurrent state, ...) and runs the forward pass.
 *
 * Adding an architecture:
 *   1. write src/model/NAME.c defining `const tela_arch tela_arch_NAME`;
 *   2. declare it at the bottom of this file and add it to the table in
 *      model.c (tela_archs[]).
 * The architecture's load() reads from m->gguf or m->ckpt with the helpers
 * below, allocates its private data (m->impl) and fills the hyperparameter
 * fields of m->info (n_vocab, n_embd, n_layer, n_ctx_train). model.c does
 * the rest (format detection, tokenizer, counts, file type, errors).
 *
 * Session state belongs to the architecture: the runtime only ever handles
 * it as an opaque pointer and a byte image (for snapshots). */
#ifndef TELA_MODEL_MODEL_H
#define TELA_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "backend/cpu/ops.h"
#include "backend/cpu/threadpool.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "tokenizer/tokenizer.h"

typedef struct tela_arch tela_arch;

struct tela_model {
    const tela_arch *arch;
    void *impl;                 /* the architecture's hyperparameters and weights */
    tela_model_info info;       /* returned by tela_model_get_info */
    char *path;
    /* The source: exactly one of gguf / ckpt is set. */
    tela_gguf *gguf;
    tela_checkpoint *ckpt;
    const void *hf_config;      /* the checkpoint's config.json (a cJSON *), or NULL */
    tela_vocab *vocab;          /* NULL when there is no (usable) tokenizer */
    char *no_vocab_reason;      /* why vocab is NULL, for error messages */
    int n_threads;              /* default threads for sessions (>= 1) */
    int verbose;
    int load_mtp;
    /* The packed weights (tela_model_pack_mats), from tela_big_alloc. */
    void *packed;
    size_t packed_bytes;
    /* Allocations freed with the model (tela_model_alloc). */
    void **allocs;
    size_t n_allocs, cap_allocs;
    /* Storage for info strings. */
    char arch_name[32];
    char name_buf[256];
};

/* Per-session state of an architecture, created for a context of n_ctx
 * tokens. All functions but forward are cheap bookkeeping. */
struct tela_arch {
    const char *name;                   /* GGUF general.architecture, e.g. "llama" */
    const char *const *hf_model_types;  /* config.json model_type values, NULL-terminated */

    /* Reads hyperparameters and weights (shapes and types checked) from the
     * model's source. On failure the model is freed by the caller, which
     * calls free() below if load set m->impl. */
    tela_status (*load)(tela_model *m);
    void (*free)(tela_model *m);

    /* Creates the state of a session of n_ctx tokens. pool is the session's
     * thread pool; reserve the per-thread scratch forward() needs on it. */
    tela_status (*state_create)(const tela_model *m, int32_t n_ctx, tela_threadpool *pool, void **out);
    void (*state_free)(void *state);
    /* Forget everything (the next token is at position 0). */
    void (*state_reset)(const tela_model *m, void *state);
    /* Snapshot image of the state holding positions [0, n_past): size, save
     * into dst (state_size bytes), load from such an image. */
    size_t (*state_size)(const tela_model *m, const void *state, int32_t n_past);
    void (*state_save)(const tela_model *m, const void *state, int32_t n_past, void *dst);
    void (*state_load)(const tela_model *m, void *state, int32_t n_past, const void *src);

    /* Runs the model over tokens[0..n) at positions n_past..n_past+n-1.
     * The caller guarantees 0 < n, n_past + n <= n_ctx and valid ids.
     * logits: NULL, or the last position's n_vocab logits, or every
     * position's (n * n_vocab) when all_logits. Same inputs and thread count
     * must give bit-identical results. */
    tela_status (*forward)(const tela_model *m, void *state, tela_threadpool *pool, const int32_t *tokens,
                           int32_t n, int32_t n_past, float *logits, int all_logits);

    /* Optional test oracle: the logits at every position of tokens[0..n)
     * (n * n_vocab floats) computed the plain way, without a cache or any
     * session state, single-threaded. NULL if not provided. */
    tela_status (*forward_naive)(const tela_model *m, const int32_t *tokens, int32_t n, float *logits);
};

/* ---- helpers for architectures' load() ---- */

/* A stored tensor by name (GGUF or checkpoint), or NULL when absent. */
const tela_tensor *tela_model_find_tensor(const tela_model *m, const char *name);

/* A 2-D weight of n_rows x n_cols (ggml order: ne[0] = n_cols): checks it
 * exists, has that shape and a type matmul can use, and returns its view.
 * When optional and absent: out->data = NULL and TELA_OK. Errors name the
 * tensor and the expected and found shapes. */
tela_status tela_model_get_mat(const tela_model *m, const char *name, int64_t n_rows, int64_t n_cols, bool optional,
                               tela_mat *out);

/* A 1-D tensor of n elements converted to f32 (norm weights, rope factors),
 * owned by the model. When optional and absent: *out = NULL and TELA_OK. */
tela_status tela_model_get_vec(tela_model *m, const char *name, int64_t n, bool optional, float **out);

/* The output head of a batch of nt hidden states x (rows of n_embd):
 * logits = W_output rmsnorm(x) * norm, for every row when all, else for the
 * last row only. xb is scratch of nt rows. Shared by the architectures. */
void tela_model_output_head(tela_threadpool *pool, const tela_mat *output, const float *norm, float eps,
                            const float *x, float *xb, int n_embd, int n_vocab, int nt, int all, float *logits);

/* Packs the matrices the forward pass multiplies by (not the embedding
 * table, which is only read by rows) into the CPU kernels' layout
 * (tela_op_pack), using the model's threads, with memory owned by the model.
 * A matrix whose type has no packed kernels is left as it is. Called by an
 * architecture at the end of its load. */
tela_status tela_model_pack_mats(tela_model *m, tela_mat *const *mats, size_t n);

/* Zeroed memory freed with the model. NULL (with an error set) on failure. */
void *tela_model_alloc(tela_model *m, size_t bytes);

/* GGUF metadata "<arch>.<suffix>" (e.g. suffix "block_count"). When
 * optional and absent, *out is left unchanged and TELA_OK returned. */
tela_status tela_model_gguf_u32(const tela_model *m, const char *suffix, bool optional, uint32_t *out);
tela_status tela_model_gguf_f32(const tela_model *m, const char *suffix, bool optional, float *out);

/* config.json values of a cJSON object (m->hf_config, or a nested object
 * such as text_config). When optional and absent (or null), *out is left
 * unchanged. Errors name the key and the file. */
tela_status tela_model_json_int(const tela_model *m, const void *obj, const char *key, bool optional, int64_t *out);
tela_status tela_model_json_float(const tela_model *m, const void *obj, const char *key, bool optional,
                                  double *out);
tela_status tela_model_json_bool(const tela_model *m, const void *obj, const char *key, bool optional, bool *out);
/* A member object of obj, or NULL. */
const void *tela_model_json_object(const void *obj, const char *key);

/* Inverse RoPE frequencies inv_freq[i] = base^(-2i/n_rot) / factor[i] for
 * i < n_rot/2 (factors NULL = all 1), in double. */
void tela_rope_inv_freq(double *inv_freq, int n_rot, double base, const float *factors);

/* Llama-3 rope scaling as transformers' _compute_llama3_parameters does it,
 * expressed as per-frequency divisors (the GGUF rope_freqs.weight values):
 * factors[i] = inv_freq[i] / scaled_inv_freq[i]. */
void tela_rope_llama3_factors(float *factors, int n_rot, double base, double factor, double low_freq_factor,
                              double high_freq_factor, double original_max_pos);

/* ---- the architectures ---- */
extern const tela_arch tela_arch_llama;
extern const tela_arch tela_arch_qwen35;

#endif
