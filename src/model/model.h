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
#include "backend/backend.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/shard.h"
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
    int n_threads;              /* threads for sessions; 0: the backend's default (all cores) */
    int verbose;
    int load_mtp;
    int32_t mtp_draft_vocab;     /* tela_model_params.mtp_draft_vocab */
    int tp_world;               /* tela_model_params.tensor_parallel (1: none) */
    tela_backend *be;           /* where the weights are and the forward pass runs (rank 0's) */
    int n_dev;                  /* backends the ranks run on: 1 (every rank on be, one after another) or
                                   tp_world (rank r on devs[r], with its own exec: tensor parallelism over
                                   devices) */
    tela_backend **devs;        /* [n_dev]; devs[0] == be */
    const char *device_req;     /* params.device during the load */
    int32_t *skip_req;          /* params.skip_layers (a copy) */
    size_t n_skip_req;
    bool *skip;                 /* [n_layer]: layers bypassed, or NULL for none (tela_model_skip_mask) */
    char device_buf[192];       /* info.device */
    /* Allocations freed with the model (tela_model_alloc). */
    void **allocs;
    size_t n_allocs, cap_allocs;
    /* Storage for info strings. */
    char arch_name[32];
    char name_buf[256];
};

/* What a session, or the batching engine, asks of its state. A session:
 * one sequence of up to n_ctx tokens (n_seq 1, kv_block_size 0). The
 * engine: n_seq state slots (recurrent state) for sequences of up to n_ctx
 * tokens whose KV rows are kv_rows rows in blocks of kv_block_size, and
 * steps of up to n_batch tokens (0: the backend's preference). */
typedef struct tela_state_params {
    int32_t n_ctx;
    tela_kv_dtype kv_dtype;
    int32_t n_seq;
    int32_t kv_block_size;
    int32_t kv_rows;
    int32_t n_batch;
} tela_state_params;

/* Batched steps cut a sequence's tokens (past where it started computing)
 * at multiples of this, except at the end of its prompt: chunked
 * computations (Qwen3.5's Gated DeltaNet works in chunks of 64 tokens)
 * then see the same chunks whatever else shares the step, so a sequence's
 * results do not depend on its neighbours. */
#define TELA_MODEL_STEP_ALIGN 64

/* One sequence's share of a batched forward pass (tela_arch.forward_batch):
 * n tokens at positions n_past.., its recurrent state in `slot`, its KV
 * blocks covering positions [0, n_past + n); with `logits`, its last
 * token's logits are wanted, with all_logits too every token's (n rows: a
 * speculative verification), with pick_only only their greedy picks (the
 * rows stay on the device); with keep_states, the recurrent state after
 * each token is kept for slot_rewind (where keeps_states). Host memory. */
typedef struct tela_seq_run {
    int32_t slot;
    const int32_t *tokens;
    int32_t n;
    int32_t n_past;
    const int32_t *blocks;
    bool logits;
    bool all_logits;
    bool keep_states;
    bool pick_only;
} tela_seq_run;

/* A sequence's draft step of an MTP block in the engine: the token tok at
 * position pos of the sequence in slot `slot`, whose KV blocks are
 * `blocks` (host memory). */
typedef struct tela_mtp_query {
    int32_t slot, tok, pos;
    const int32_t *blocks;
} tela_mtp_query;

/* Bytes per KV element of a precision. */
static inline uint64_t tela_kv_dtype_bytes(tela_kv_dtype t, uint64_t n) {
    return t == TELA_KV_DTYPE_Q8_0 ? (n + 31) / 32 * 34 : t == TELA_KV_DTYPE_F16 ? 2 * n : 4 * n;
}

/* What a forward pass returns (host memory). */
typedef struct tela_forward_out {
    float *logits;       /* NULL, the last position's n_vocab logits, or every position's when all_logits */
    int all_logits;
    int32_t *greedy;     /* NULL, or the argmax of the last position's logits, picked where they are; with
                            all_logits and no logits, every position's (n of them) */
    tela_layer_probe probe;  /* NULL, or called with the last position's hidden state after each layer */
    void *probe_user;
    int keep_states;     /* keep the recurrent state after each token, for state_rewind (when keeps_states) */
} tela_forward_out;

/* Per-session state of an architecture, created for a context of n_ctx
 * tokens on an exec of the model's backend. All functions but forward are
 * cheap bookkeeping (or copies, for snapshots). */
struct tela_arch {
    const char *name;                   /* GGUF general.architecture, e.g. "llama" */
    const char *const *hf_model_types;  /* config.json model_type values, NULL-terminated */
    unsigned backends;                  /* bit 1 << kind for each backend kind the forward pass runs on */
    bool tensor_parallel;               /* load() splits the layers over m->tp_world ranks (else it must be 1) */
    bool rank_devices;                  /* ... and runs them on m->devs, a rank a device (else n_dev must be 1) */

    /* Reads hyperparameters and weights (shapes and types checked) from the
     * model's source and gives the backend its copies (tela_model_const,
     * tela_model_prepare_mats). On failure the model is freed by the
     * caller, which calls free() below if load set m->impl. */
    tela_status (*load)(tela_model *m);
    void (*free)(tela_model *m);

    tela_status (*state_create)(const tela_model *m, tela_exec *ex, const tela_state_params *p, void **out);
    /* The bytes state_create will take with n_batch-token steps (KV cache,
     * recurrent state, activations), for the memory check. */
    uint64_t (*state_bytes)(const tela_model *m, const tela_state_params *p, int n_batch);
    void (*state_free)(void *state);
    /* Forget everything (the next token is at position 0). */
    void (*state_reset)(const tela_model *m, void *state);
    /* Snapshot image of the state holding positions [0, n_past): size, save
     * into dst (state_size bytes, host memory), load from such an image. */
    size_t (*state_size)(const tela_model *m, const void *state, int32_t n_past);
    tela_status (*state_save)(const tela_model *m, const void *state, int32_t n_past, void *dst);
    tela_status (*state_load)(const tela_model *m, void *state, int32_t n_past, const void *src);

    /* Runs the model over tokens[0..n) at positions n_past..n_past+n-1.
     * The caller guarantees 0 < n, n_past + n <= n_ctx and valid ids. Same
     * inputs and thread count must give bit-identical results. */
    tela_status (*forward)(const tela_model *m, void *state, const int32_t *tokens, int32_t n, int32_t n_past,
                           const tela_forward_out *out);

    /* Batched steps (the engine; the state made with n_seq slots and a paged
     * KV cache): runs[0..n_runs) over at most n_batch tokens in all; logits
     * (host) gets one row of n_vocab per run that wants them (n rows for
     * one with all_logits), in order (pick_only runs' rows left as they
     * were), and picks (host, NULL: none) each row's greedy pick, made where
     * the logits are.
     * Results for each sequence are bit-identical to running it alone
     * (given the same cuts of its tokens into steps). */
    tela_status (*forward_batch)(const tela_model *m, void *state, const tela_seq_run *runs, int n_runs,
                                 float *logits, int32_t *picks);
    /* A slot's recurrent state (0 bytes for attention-only models): its
     * size, zeroing it (a new sequence), and copies to and from host memory
     * (prefix-cache checkpoints). */
    size_t (*slot_bytes)(const tela_model *m);
    void (*slot_reset)(const tela_model *m, void *state, int slot);
    tela_status (*slot_save)(const tela_model *m, void *state, int slot, void *dst);
    tela_status (*slot_load)(const tela_model *m, void *state, int slot, const void *src);
    /* Copies KV rows of the paged cache (tela_kv_copy_rows). */
    tela_status (*kv_copy_rows)(const tela_model *m, void *state, int32_t dst, int32_t src, int32_t n);

    /* Rolling back within the last forward pass (speculative decoding),
     * for models with recurrent state; NULL for others (their KV rows need
     * no rollback). keeps_states: whether a forward with keep_states (a
     * batched run's) keeps every token's state on this state's device;
     * slot_rewind: the slot's recurrent state as after the first n_keep
     * (1..n) tokens of its last forward pass, which kept its states
     * (TELA_ERR_ARG otherwise; a session's state is slot 0). */
    bool (*keeps_states)(const tela_model *m, const void *state);
    tela_status (*slot_rewind)(const tela_model *m, void *state, int slot, int32_t n_keep);

    /* Multi-token prediction (speculative decoding's drafter from the model
     * itself); NULL for architectures without it. mtp_layers: the MTP
     * blocks loaded (0: none, or not loaded). A state of such a model keeps
     * what its MTP block needs as the forward passes go (its own KV cache,
     * the last position's hidden state). mtp_draft: one draft step of the
     * block at position pos: from the hidden state after position pos (the
     * last evaluated one: pos = n_past - 1) or, with chain, from the
     * previous draft step's output, and the token tok that followed; writes
     * its KV row at pos and returns its logits (host, n_vocab floats, when
     * logits) and/or their greedy pick (when pick), a guess at the token
     * after tok. */
    int (*mtp_layers)(const tela_model *m);
    tela_status (*mtp_draft)(const tela_model *m, void *state, int32_t tok, int32_t pos, bool chain, float *logits,
                             int32_t *pick);
    /* The engine's drafts (a paged state): one draft step for each of
     * qs[0..n) (distinct slots) in one batch of the block, as mtp_draft
     * does for a session (chain: from the slot's previous draft step), the
     * n rows of logits into logits (host; NULL: not wanted) and/or their
     * greedy picks, made where the logits are, into picks (host, or NULL). */
    tela_status (*mtp_draft_batch)(const tela_model *m, void *state, const tela_mtp_query *qs, int n, bool chain,
                                   float *logits, int32_t *picks);

    /* The kind of decoder layer l (tela_layer_kind). */
    int (*layer_kind)(const tela_model *m, int layer);

    /* Optional test oracle: the logits at every position of tokens[0..n)
     * (n * n_vocab floats) computed the plain way on the host, without a
     * cache or any session state, single-threaded. NULL if not provided. */
    tela_status (*forward_naive)(const tela_model *m, const int32_t *tokens, int32_t n, float *logits);
};

/* ---- helpers for architectures' load() (weights.c) ---- */

/* A stored tensor by name (GGUF or checkpoint), or NULL when absent. */
const tela_tensor *tela_model_find_tensor(const tela_model *m, const char *name);

/* A 2-D weight of n_rows x n_cols (ggml order: ne[0] = n_cols): checks it
 * exists, has that shape and a type matmul can use, and returns its view.
 * When optional and absent: out->data = NULL and TELA_OK. Errors name the
 * tensor and the expected and found shapes. */
tela_status tela_model_get_mat(const tela_model *m, const char *name, int64_t n_rows, int64_t n_cols, bool optional,
                               tela_mat *out);

/* Rank's part of a 2-D weight (tela_model_get_mat, then the rows or
 * columns of `shard`: one run of rows is a view into the file's mapping,
 * several runs or columns are copied into memory the model owns; the view
 * itself for TELA_SHARD_WHOLE). Errors name the tensor, e.g. a column
 * split that falls inside a quantized block. */
tela_status tela_model_get_mat_shard(tela_model *m, const char *name, int64_t n_rows, int64_t n_cols,
                                     const tela_shard *shard, tela_mat *out);

/* A table of n_vocab rows of n_embd (the token embedding, the output head)
 * split by vocabulary over m->tp_world ranks: *out = m->tp_world matrices
 * in the model's memory, rank r's rows of the plan (the vocabulary's rows
 * in order). */
tela_status tela_model_get_vocab_parts(tela_model *m, const char *name, int64_t n_vocab, int64_t n_embd,
                                       tela_mat **out);

/* A 1-D tensor of n elements converted to f32 (norm weights, rope factors),
 * owned by the model. When optional and absent: *out = NULL and TELA_OK. */
tela_status tela_model_get_vec(tela_model *m, const char *name, int64_t n, bool optional, float **out);

/* The backend's copy of host data the forward pass reads (norm weights,
 * RoPE frequencies): tela_backend_const on the model's backend. */
tela_status tela_model_const(tela_model *m, const void *host, size_t bytes, const void **out);

/* Prepares the matrices for the model's backend (tela_backend_prepare_mats:
 * packed for the CPU kernels, uploaded to a GPU). Called by an
 * architecture at the end of its load. */
tela_status tela_model_prepare_mats(tela_model *m, tela_mat *const *mats, const tela_mat_use *uses, size_t n);

/* With a rank per device (m->n_dev > 1): rank r's backend, and its copies
 * of constants and matrices (the model's backend for every rank
 * otherwise). */
tela_backend *tela_model_rank_backend(const tela_model *m, int rank);
tela_status tela_model_const_rank(tela_model *m, int rank, const void *host, size_t bytes, const void **out);
tela_status tela_model_prepare_mats_rank(tela_model *m, int rank, tela_mat *const *mats, const tela_mat_use *uses,
                                         size_t n);
/* Room for the lists of up to cap matrices and their uses that an
 * architecture hands to tela_model_prepare_mats_rank (the caller frees
 * both; nothing is left allocated on failure). */
tela_status tela_model_mat_lists(const tela_model *m, size_t cap, tela_mat ***list, tela_mat_use **uses);
/* *out = m->tp_world pointers, rank r's copy of host data the forward pass
 * reads (tela_model_const_rank; the one copy for every rank at one device),
 * in memory the model owns. */
tela_status tela_model_const_ranks(tela_model *m, const void *host, size_t bytes, const void ***out);

/* ---- helpers for architectures' forward passes (forward.c) ---- */

/* A session's input and output buffers in backend memory: the tokens and
 * positions of the current step (batch), the logits, the greedy pick. */
typedef struct tela_model_io {
    tela_exec *ex;
    int n_vocab, n_embd, n_batch;
    int32_t *tok, *pos;          /* [n_batch] each, one block (pos = tok + n_batch) */
    tela_batch batch;
    float *logits1;              /* [n_vocab]: one row, at a fixed address (captured decode steps) */
    float *logits;               /* [logit_rows][n_vocab] for all-logits steps, grown as needed */
    float *logits_small;         /* [TELA_GRAPH_MAX_TOK][n_vocab]: those of steps that may be captured */
    int logit_rows;
    int32_t *pick;               /* [1] */
    int32_t *picks;              /* [n_batch]: a batched step's greedy picks (allocated when first asked for) */
    /* [n_batch] or NULL: each step's positions minus one, for a model part
     * that runs one position behind (Qwen3.5's MTP block); turned on by
     * tela_model_io_prev_positions. */
    int32_t *pos_prev;
    int32_t *pos_prev_host;
    tela_layer_probe probe;      /* set during the last step of a probed evaluation */
    void *probe_user;
    float *probe_buf;            /* host: the downloaded hidden state */
    tela_status probe_status;
    /* batched steps (host): the tokens, the sequences, the rows with logits */
    int32_t *run_tok;
    tela_batch_seq *run_seqs;
    int32_t *run_rows;
    int run_cap;
} tela_model_io;

tela_status tela_model_io_init(tela_model_io *io, tela_exec *ex, int n_vocab, int n_embd, int n_batch);
/* From now on every step also uploads its positions minus one (io->pos_prev). */
tela_status tela_model_io_prev_positions(tela_model_io *io);
void tela_model_io_free(tela_model_io *io);

/* What one step computes at its end: the logits of `rows` hidden-state rows
 * (0, 1: the last, or n_tok: all) into `logits` (backend memory), and
 * with `pick` the greedy token of the last row into io->pick. */
typedef struct tela_model_step {
    int n_tok;
    int rows;
    float *logits;
    bool pick;
    const int32_t *row_idx;  /* NULL, or which rows (host, `rows` of them): a batched step's */
} tela_model_step;

/* Runs one step: the layers over io->batch, then the output head as step
 * says (tela_model_output_head). */
typedef void (*tela_model_step_fn)(const tela_model *m, void *state, const tela_model_step *step);

/* The per-step loop of a forward pass, shared by the architectures: splits
 * tokens[0..n) into steps of at most io->n_batch tokens, uploads each
 * step's tokens and positions, runs it (a decode step through the exec's
 * graph capture), and returns the logits and pick that out asks for. */
tela_status tela_model_run_steps(const tela_model *m, void *state, tela_model_step_fn fn, tela_model_io *io,
                                 const int32_t *tokens, int32_t n, int32_t n_past, const tela_forward_out *out);

/* The loop of a batched forward pass (tela_arch.forward_batch): uploads
 * the runs' tokens and positions as one step (io->batch, with a sequence
 * per run), runs it, and returns the logits of the runs that want them. */
tela_status tela_model_run_batch(const tela_model *m, void *state, tela_model_step_fn fn, tela_model_io *io,
                                 const tela_seq_run *runs, int n_runs, float *logits, int32_t *picks);

/* The most ranks tensor parallelism splits a model over
 * (tela_model_params.tensor_parallel). */
#define TELA_MODEL_MAX_RANKS 64

/* The output head of a step of step->n_tok hidden states x (rows of
 * n_embd): logits = W_output rmsnorm(x) * norm for the rows step asks for,
 * and the greedy pick. W_output is n_parts matrices, the vocabulary's rows
 * in order (tensor parallelism splits it by vocabulary; 1 otherwise), each
 * filling its columns of the logits. xb is scratch of n_tok rows. */
void tela_model_output_head(tela_exec *ex, const tela_mat *parts, int n_parts, const float *norm, float eps,
                            const float *x, float *xb, int n_embd, const tela_model_step *step, tela_model_io *io);

/* The token embeddings of a step's n_tok tokens (ids in backend memory)
 * into x (rows of n_embd): rows of a table held as n_parts matrices, the
 * vocabulary's rows in order (tensor parallelism splits it by vocabulary;
 * 1 otherwise), each giving the rows it holds (tela_exec_get_rows_part). */
void tela_model_embed(tela_exec *ex, const tela_mat *parts, int n_parts, const int32_t *ids, int n_tok, float *x,
                      int n_embd);

/* Hands the last of n_tok hidden-state rows (backend memory) to the probe
 * of a probed evaluation, as the state after `layer` (-1: the embedding). */
void tela_model_probe(tela_model_io *io, int layer, const float *x, int n_tok, int n_embd);

/* A state's ranks with a rank per device (m->n_dev > 1: tensor
 * parallelism over devices, docs/MULTI-GPU.md). Rank 0 runs on the
 * session's exec, rank r > 0 on an exec of its own on m->devs[r]; one
 * thread issues every rank's work, and the sums of the ranks' partial
 * results are all-reduces (tela_exec_allreduce_sum). With one device
 * (n 1) every rank's work runs on the session's exec, one rank after
 * another, and the ranks' partial sums add up in one buffer. */
typedef struct tela_model_rank {
    tela_exec *ex;
    int32_t *tok, *pos;          /* r > 0: the step's tokens and positions, copied from rank 0 */
    tela_batch batch;            /* the step as this rank sees it (its own tokens and positions) */
    float *logits;               /* r > 0: its columns of the logits, head_rows rows at a time */
    int32_t *pos_prev;           /* r > 0, when asked for: the step's positions minus one (the MTP block) */
} tela_model_rank;

typedef struct tela_model_ranks {
    int n;                       /* execs: 1, or m->n_dev */
    tela_model_rank *rk;         /* [n] */
    tela_exec_group *group;      /* the all-reduce (n > 1) */
    int head_rows;
} tela_model_ranks;

/* The ranks of a new state whose steps have at most n_batch tokens, whose
 * sums are at most max_floats floats, and whose output head is split as
 * heads[r] (rows of the vocabulary). */
tela_status tela_model_ranks_init(const tela_model *m, tela_model_ranks *R, tela_exec *ex0, int n_batch,
                                  int64_t max_floats, const tela_mat *heads);
void tela_model_ranks_free(tela_model_ranks *R);
/* A step's start: every rank waits for rank 0 (tela_model_ranks_fork)
 * and takes a copy of the step's tokens and positions (b: rank 0's;
 * R->rk[r].batch: rank r's), and of pos_prev (rank 0's positions minus
 * one, or NULL) into its own (made by tela_model_ranks_prev_positions);
 * its end: rank 0 waits for every rank (so that a captured decode step
 * holds all their work). Work a step's ranks read must come from rank 0
 * this way inside the step: a captured step replays after rank 0's
 * earlier work only. */
tela_status tela_model_ranks_prev_positions(const tela_model *m, tela_model_ranks *R, int n_batch);
void tela_model_ranks_fork(tela_model_ranks *R);
void tela_model_ranks_begin(tela_model_ranks *R, const tela_batch *b, const int32_t *pos_prev);
void tela_model_ranks_end(tela_model_ranks *R);
/* Waits for the ranks other than rank 0 and reports a failure of theirs
 * (rank 0's: the session's sync); after a forward pass. */
tela_status tela_model_ranks_sync(tela_model_ranks *R);
/* bufs[r] = the sum over the ranks of bufs[r] (n floats each); nothing
 * with one exec. */
void tela_model_ranks_sum(tela_model_ranks *R, float *const *bufs, int64_t n);
/* tela_model_embed and tela_model_output_head with a rank per device:
 * ids[r], x[r], xb[r], norm[r] are rank r's; the embedding's parts summed
 * into every rank's x, the logits (and pick) on rank 0. */
void tela_model_embed_ranks(tela_model_ranks *R, const tela_mat *parts, const int32_t *const *ids, int n_tok,
                            float *const *x, int n_embd);
/* A head split by vocabulary with a rank per device: out (rank 0's
 * memory, rows out_stride apart) = each rank's part times its x[r]
 * (n_rows rows of n_embd; with norm, rmsnorm(x) * norm[r].w), each part
 * filling its columns. */
void tela_model_head_ranks(tela_model_ranks *R, const tela_mat *parts, const tela_norm_in *norm, const float *const *x,
                           int n_rows, int n_embd, float *out, int64_t out_stride);
void tela_model_output_head_ranks(tela_model_ranks *R, const tela_mat *parts, const float *const *norm, float eps,
                                  float *const *x, float *const *xb, int n_embd, const tela_model_step *step,
                                  tela_model_io *io);

/* A step's start over the ranks' execs (one, or a rank's each): each its
 * copy of the step (tela_model_ranks_begin), its RoPE table (cs[e] from
 * inv_freq[e]) and the step's token embeddings in x[e] (the table as the
 * ranks hold it: n_parts parts). And a step's output head over them
 * (tela_model_output_head at one exec, else tela_model_output_head_ranks). */
void tela_model_ranks_step_begin(tela_model_ranks *R, const tela_batch *b, const int32_t *pos_prev,
                                 const tela_mat *parts, int n_parts, const double *const *inv_freq, int n_rot,
                                 float *const *cs, float *const *x, int n_embd);
void tela_model_ranks_output_head(tela_model_ranks *R, const tela_mat *parts, int n_parts, const float *const *norm,
                                  float eps, float *const *x, float *const *xb, int n_embd, const tela_model_step *step,
                                  tela_model_io *io);

/* A SwiGLU feed-forward block, as Llama and Qwen3.5 have it:
 *     out (+)= W_down (silu(W_gate h) * W_up h),   h = rmsnorm(x) * norm
 * over n_tok rows of n_embd: out is x itself (the residual add, with
 * accumulate) or, for a rank's part of a split layer, the ranks' partial
 * sum (the first rank writes, the others add). xb (n_tok rows of n_embd)
 * and gate (n_tok rows of W_gate.n_rows) are scratch. norm: backend memory. */
typedef struct tela_model_ffn {
    const float *norm;
    tela_mat w_gate, w_up, w_down;
} tela_model_ffn;

void tela_model_ffn_swiglu(tela_exec *ex, const tela_model_ffn *f, const float *x, float *xb, float *gate, float *out,
                           bool accumulate, int n_embd, int n_tok, float eps);

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
/* The mask of layers to skip (params.skip_layers) for a model of n_layer
 * layers, owned by the model; NULL when none are skipped. Errors name a
 * layer that does not exist. */
tela_status tela_model_skip_mask(tela_model *m, int n_layer, const bool **out);

/* A member string of obj, or NULL. */
const char *tela_model_json_str(const void *obj, const char *key);
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
