/*
 * tela.h: the public C API of tela, an inference engine for decoder-only
 * language models (GGUF files and Hugging Face safetensors checkpoints).
 *
 * Conventions
 *  - Every call that can fail returns a tela_status. TELA_OK is 0. On failure
 *    tela_last_error() returns a message for a person, naming the file,
 *    tensor, key or byte offset at fault. The message is per thread and stays
 *    valid until the next failing call on the same thread.
 *  - Handles are opaque. A tela_model is read-only after loading and may be
 *    shared by many sessions (and threads); a tela_session is used by one
 *    thread at a time.
 *  - Tokens are int32_t ids. Logits are float32, n_vocab per position.
 */
#ifndef TELA_TELA_H
#define TELA_TELA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TELA_API __attribute__((visibility("default")))

/* ---------------------------------------------------------------- status */

typedef enum tela_status {
    TELA_OK = 0,
    TELA_ERR_ARG = 1,          /* a bad argument from the caller */
    TELA_ERR_IO = 2,           /* open/read/write/mmap failed */
    TELA_ERR_FORMAT = 3,       /* malformed, truncated or corrupt input */
    TELA_ERR_UNSUPPORTED = 4,  /* valid input tela cannot handle (yet) */
    TELA_ERR_NOMEM = 5,        /* allocation failed */
    TELA_ERR_CONTEXT = 6,      /* tokens would not fit in the session's context */
    TELA_ERR_NOT_FOUND = 7,    /* a key, tensor or file that must exist does not */
    TELA_ERR_INTERNAL = 8,     /* a bug in tela */
    TELA_ERR_BUSY = 9          /* too much work queued: try again later */
} tela_status;

TELA_API const char *tela_last_error(void);
TELA_API const char *tela_status_name(tela_status status);
TELA_API const char *tela_version(void);
/* The devices this build of tela can compute on, one per line ("cpu (avx512,
 * 2 threads)", "cuda:0 (NVIDIA H200, 139.8 GiB, sm_90, 132 SMs)"), and why
 * there is no GPU when there is none. malloc'd; the caller frees it. */
TELA_API char *tela_devices(void);

/* ---------------------------------------------------------- tensor types */

/* Numbering follows ggml, so a GGUF tensor's type field maps directly. */
typedef enum tela_type {
    TELA_TYPE_F32 = 0,
    TELA_TYPE_F16 = 1,
    TELA_TYPE_Q4_0 = 2,
    TELA_TYPE_Q4_1 = 3,
    TELA_TYPE_Q5_0 = 6,
    TELA_TYPE_Q5_1 = 7,
    TELA_TYPE_Q8_0 = 8,
    TELA_TYPE_Q8_1 = 9,
    TELA_TYPE_Q2_K = 10,
    TELA_TYPE_Q3_K = 11,
    TELA_TYPE_Q4_K = 12,
    TELA_TYPE_Q5_K = 13,
    TELA_TYPE_Q6_K = 14,
    TELA_TYPE_Q8_K = 15,
    TELA_TYPE_IQ4_NL = 20,
    TELA_TYPE_I8 = 24,
    TELA_TYPE_I16 = 25,
    TELA_TYPE_I32 = 26,
    TELA_TYPE_I64 = 27,
    TELA_TYPE_F64 = 28,
    TELA_TYPE_IQ4_XS = 23,
    TELA_TYPE_BF16 = 30,
    TELA_TYPE_COUNT = 40
} tela_type;

/* Name as llama.cpp prints it ("q4_K", "f16"), or NULL for an unknown id. */
TELA_API const char *tela_type_name(tela_type type);

/* ----------------------------------------------------------------- model */

typedef struct tela_model tela_model;

typedef struct tela_model_params {
    int n_threads;       /* threads for computation; 0 = all cores */
    int load_mtp;        /* also load multi-token-prediction (nextn) tensors */
    int verbose;         /* progress and load summary on stderr */
    const char *device;  /* where to run: "cpu", "cuda", "cuda:N"; NULL or "auto" = $TELA_DEVICE, else a
                            GPU when tela was built with CUDA and one is present (and the architecture
                            runs there), else the CPU. A list ("cuda:0,cuda:1") puts a rank of tensor
                            parallelism on each device (Llama, Qwen3.5) */
    const int32_t *skip_layers;  /* layers to bypass (the residual stream passes them unchanged; they get
                                    no KV cache or state), or NULL */
    size_t n_skip_layers;
    int32_t mtp_draft_vocab;     /* with load_mtp: MTP drafts only among the first N token ids (a head of N
                                    rows, prepared beside the full one); 0 = the whole vocabulary */
    int tensor_parallel;         /* ranks each layer is split across, Megatron-style (docs/MULTI-GPU.md);
                                    0 or 1 = none (or the length of a device list). Llama and Qwen3.5.
                                    The ranks run a GPU each when the device is automatic or "cuda" and
                                    there are that many GPUs (their sums through NCCL), or on the devices
                                    listed; otherwise they take turns on the one device (a check of the
                                    split computation, no faster) */
} tela_model_params;

TELA_API tela_model_params tela_model_default_params(void);

/* Loads a GGUF file, a .safetensors file or a Hugging Face checkpoint
 * directory (config.json + *.safetensors [+ tokenizer.json]). Weights are
 * memory-mapped and used in their stored type: packed for the CPU's
 * kernels, or uploaded once to the GPU (failing, with the numbers, when
 * they do not fit in its free memory). */
TELA_API tela_status tela_model_load(const char *path, const tela_model_params *params,
                                     tela_model **out);
TELA_API void tela_model_free(tela_model *model);

typedef struct tela_model_info {
    const char *arch;        /* "llama", "qwen35" */
    const char *name;        /* general.name, or "" */
    int32_t n_vocab;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_ctx_train;
    int64_t n_params;
    uint64_t n_bytes;        /* bytes of weight data */
    const char *file_type;   /* dominant weight type, e.g. "q4_K", "f16" */
    int32_t bos_token;       /* -1 if none */
    int32_t eos_token;       /* -1 if none */
    int has_tokenizer;
    int has_chat_template;
    const char *device;      /* where it runs: "cpu (avx512, 2 threads)", "cuda:0 (NVIDIA H200, ...)" */
    int32_t n_mtp_layers;    /* multi-token-prediction blocks loaded (load_mtp), for --spec mtp */
} tela_model_info;

TELA_API const tela_model_info *tela_model_get_info(const tela_model *model);

/* What a decoder layer is, and whether it is skipped (params.skip_layers):
 * -1 for a layer that does not exist. */
typedef enum tela_layer_kind { TELA_LAYER_ATTENTION = 0, TELA_LAYER_DELTANET = 1 } tela_layer_kind;
TELA_API int tela_model_layer_kind(const tela_model *model, int32_t layer);
/* Free and total bytes of the memory of the model's device (with a rank
 * per device: of the one with the least free memory) (MemAvailable and
 * MemTotal on the CPU). */
TELA_API tela_status tela_model_device_memory(const tela_model *model, uint64_t *free_bytes, uint64_t *total_bytes);
TELA_API int tela_model_layer_skipped(const tela_model *model, int32_t layer);

/* ------------------------------------------------------------- tokenizer */

/* Text to tokens. add_special: add BOS/EOS as the model's metadata says.
 * parse_special: recognize special/added tokens written in the text.
 * Writes at most cap ids to out and the full count to *n_out; if the count
 * exceeds cap, returns TELA_ERR_ARG after filling *n_out, so callers can
 * retry with a larger buffer. */
TELA_API tela_status tela_tokenize(const tela_model *model, const char *text, size_t len,
                                   int add_special, int parse_special,
                                   int32_t *out, size_t cap, size_t *n_out);

/* Tokens to text (bytes, UTF-8 as the model wrote it). Writes a NUL-terminated
 * string into a malloc'd buffer at *out (caller frees). */
TELA_API tela_status tela_detokenize(const tela_model *model, const int32_t *tokens, size_t n,
                                     int skip_special, char **out);

/* 1 if the token ends generation (EOS, EOT, or any end-of-generation id in
 * the metadata). */
TELA_API int tela_token_is_eog(const tela_model *model, int32_t token);

/* Renders a conversation with the model's own chat template. roles[i] and
 * contents[i] are NUL-terminated; *out is malloc'd (caller frees). */
TELA_API tela_status tela_chat_render(const tela_model *model, const char *const *roles,
                                      const char *const *contents, size_t n_messages,
                                      int add_generation_prompt, char **out);

/* --------------------------------------------------------------- session */

typedef struct tela_session tela_session;

/* Precision of a session's KV cache. */
typedef enum tela_kv_type {
    TELA_KV_DEFAULT = 0,  /* f16 on a GPU (f32 in the exact mode, TELA_EXACT_MATMUL=1); f32 on the CPU */
    TELA_KV_F32 = 1,
    TELA_KV_F16 = 2,      /* half the bytes: long contexts decode faster (the CPU's default is f32) */
    TELA_KV_Q8_0 = 3      /* llama.cpp's Q8_0 blocks, 1.06 bytes a value: the CPU only */
} tela_kv_type;

typedef struct tela_session_params {
    int32_t n_ctx;       /* context length in tokens; 0 = min(train ctx, 4096) */
    int n_threads;       /* 0 = the model's */
    tela_kv_type kv_type;
    uint64_t mem_budget; /* bytes the session's KV cache, state and work buffers may take; 0 = the memory
                            available on its device (MemAvailable, or the GPU's free memory) */
} tela_session_params;

TELA_API tela_session_params tela_session_default_params(void);
/* Fails with TELA_ERR_NOMEM, naming the numbers and what to change, when
 * the session would take more memory than params.mem_budget allows. */
TELA_API tela_status tela_session_create(tela_model *model, const tela_session_params *params,
                                         tela_session **out);
/* The bytes a session of these parameters takes on the model's device (KV
 * cache, recurrent state, work buffers): what tela_session_create checks. */
TELA_API tela_status tela_session_memory(tela_model *model, const tela_session_params *params, uint64_t *bytes);
TELA_API void tela_session_free(tela_session *session);
TELA_API int32_t tela_session_n_ctx(const tela_session *session);
/* Tokens processed so far (the position of the next token). */
TELA_API int32_t tela_session_n_past(const tela_session *session);
/* Forget everything: the next token is at position 0. */
TELA_API void tela_session_reset(tela_session *session);

/* Runs the model over n tokens appended to the session (prefill when n > 1,
 * a decode step when n == 1). If logits is not NULL it receives the last
 * position's logits (n_vocab floats), or every position's (n * n_vocab) when
 * all_logits is set; the session also keeps the last position's logits, so
 * tela_generate() may follow with no prompt tokens. With logits NULL the
 * output layer is skipped. Fails with TELA_ERR_CONTEXT, changing nothing,
 * when the tokens would not fit in the context (n_past + n > n_ctx), and
 * with TELA_ERR_ARG for ids outside the vocabulary. The same inputs and
 * thread count give bit-identical logits. */
TELA_API tela_status tela_session_eval(tela_session *session, const int32_t *tokens, int32_t n,
                                       float *logits, int all_logits);

/* tela_session_eval that leaves the last position's logits where the
 * session keeps them instead of copying them out: *logits points at them
 * (n_vocab floats of host memory, page-locked on a GPU so that the copy
 * from the device is the only one) until the session's next call. With
 * n == 0, the logits the session holds (NULL when it holds none). */
TELA_API tela_status tela_session_eval_view(tela_session *session, const int32_t *tokens, int32_t n,
                                            const float **logits);

/* Called with the hidden state of the last position of an evaluation (n_embd
 * floats, host memory, valid during the call): after the token embedding
 * (layer -1) and after each decoder layer (a skipped layer passes it on
 * unchanged). */
typedef void (*tela_layer_probe)(void *user, int32_t layer, const float *hidden, int32_t n_embd);

/* tela_session_eval without logits, calling probe as the layers run (for
 * layer-importance measurements: tela prune-plan). */
TELA_API tela_status tela_session_eval_probe(tela_session *session, const int32_t *tokens, int32_t n,
                                             tela_layer_probe probe, void *user);

/* Profiling (--profile): from start on, every operation of the session is
 * timed on its device (host clocks on the CPU; CUDA events on a GPU, whose
 * decode steps then run without graphs) and summed per kind and weight
 * type, with sampling and detokenization timed on the host. The report
 * (malloc'd; a table for a person or, with json, one JSON object) gives
 * each phase's calls, time, share of the wall time since start, and for
 * products GB/s and GFLOP/s, and what the phases leave out. Off by default,
 * costing one pointer test an operation. */
TELA_API void tela_session_profile_start(tela_session *session);
TELA_API char *tela_session_profile_report(tela_session *session, int json);
TELA_API void tela_session_profile_stop(tela_session *session);
/* Adds host work of the caller's own (scoring, say) to a profiled session's
 * report as a phase of that name. */
TELA_API void tela_session_profile_add(tela_session *session, const char *phase, double seconds);

/* Snapshots of a session's whole state (KV cache, recurrent and conv state,
 * position) at a token boundary. Restoring into the session it was taken from
 * (or another session of the same model and n_ctx) makes it continue exactly
 * as it would have from that point. */
typedef struct tela_snapshot tela_snapshot;
TELA_API tela_status tela_session_snapshot(const tela_session *session, tela_snapshot **out);
TELA_API tela_status tela_session_restore(tela_session *session, const tela_snapshot *snapshot);
TELA_API void tela_snapshot_free(tela_snapshot *snapshot);

/* ------------------------------------------------------ layer importance */

/* For each decoder layer, the cosine similarity between the hidden state
 * entering it and the one leaving it at the last position of each prompt,
 * averaged over the prompts (accumulated in float64): mean_cosine[n_layer].
 * A layer with a high cosine changes the state least: the safest to remove.
 * The session is reset before each prompt and after the last. */
TELA_API tela_status tela_layer_cosines(tela_session *session, const int32_t *const *prompts,
                                        const int32_t *n_tokens, int32_t n_prompts, double *mean_cosine);

/* The k layers to remove, from the cosines of tela_layer_cosines: the
 * highest of each kind, one attention layer in four for a hybrid model
 * (Qwen3.5's three DeltaNet layers to one attention layer), sorted by
 * index into out_layers[k]; *n_attention (may be NULL) gets how many are
 * attention layers. Layers already skipped are not chosen. */
TELA_API tela_status tela_prune_plan(const tela_model *model, const double *mean_cosine, int32_t k,
                                     int32_t *out_layers, int32_t *n_attention);

/* -------------------------------------------------------------- sampling */

typedef struct tela_logit_bias {
    int32_t token;
    float bias;      /* added to the logit; -INFINITY bans the token */
} tela_logit_bias;

/* The sampler's stages, in order (llama.cpp's order):
 *   logit bias -> penalties (repeat, frequency, presence) -> [greedy when
 *   temperature <= 0] -> top-k -> top-p -> min-p -> temperature -> draw.
 * top-p and min-p see the probabilities at temperature 1. Defaults
 * (tela_sampler_default_params): temperature 0.8, top_k 40, top_p 0.95,
 * min_p 0.05, repeat_penalty 1 (off), repeat_last_n 64, frequency and
 * presence 0, seed 0. */
typedef struct tela_sampler_params {
    float temperature;        /* <= 0: greedy */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* >= 1: off */
    float min_p;              /* <= 0: off */
    float repeat_penalty;     /* 1: off (llama.cpp semantics) */
    int32_t repeat_last_n;    /* tokens considered by the penalties; -1 = whole context */
    float frequency_penalty;  /* 0: off (OpenAI semantics) */
    float presence_penalty;   /* 0: off */
    uint64_t seed;
    const tela_logit_bias *logit_bias;
    size_t n_logit_bias;
} tela_sampler_params;

TELA_API tela_sampler_params tela_sampler_default_params(void);

/* Picks the next token from one position's logits (modified in place), given
 * the tokens so far (for the penalties) and the step index (the random draw is
 * a pure function of seed and step, so any batching of steps gives the same
 * tokens). Ties between equal logits go to the lower id. Fails with
 * TELA_ERR_ARG when every token is banned (-inf). */
TELA_API tela_status tela_sample(const tela_sampler_params *params, float *logits, int32_t n_vocab,
                                 const int32_t *history, size_t n_history, uint64_t step,
                                 int32_t *out_token);

/* ------------------------------------------------------------ generation */

/* Called for each generated token with its text piece (complete UTF-8 only;
 * may be empty while bytes are held back). Return non-zero to stop. */
typedef int (*tela_token_callback)(void *user, int32_t token, const char *piece, size_t len);

/* Called with the logits of each step before sampling; may edit them. */
typedef void (*tela_logits_hook)(void *user, float *logits, int32_t n_vocab, uint64_t step);

/* Speculative decoding (runtime/spec.c): a cheap drafter proposes up to
 * draft_max tokens, the model verifies them all in one forward pass (the
 * last accepted token and the drafts), and the session is rolled back to
 * the last accepted token. The output is the model's own: greedy output is
 * token for token the output without speculation (on the CPU the
 * verification computes the very bits of single steps; a GPU's multi-token
 * products round otherwise than its decode steps, so there a near tie may
 * go the other way: not measured there yet), and with sampling
 * each draft is accepted with probability min(1, p(x)/q(x)) and a rejected
 * one replaced by a draw from norm(max(0, p - q)) (standard speculative
 * rejection sampling), p being the distribution the sampler would draw from
 * (bias, penalties, top-k/top-p/min-p, temperature), so the tokens follow
 * the model's distribution exactly (the draws differ from the
 * non-speculative ones of the same seed; they are a pure function of the
 * seed and positions). Drafters:
 *  - NGRAM (prompt lookup): the continuation of the latest earlier
 *    occurrence of the context's last n tokens (n from ngram_max down to
 *    ngram_min), in the prompt and what was generated; q is a point mass.
 *  - DRAFT: a second model with the same vocabulary, on its own session
 *    (`draft`, of a context at least the target's), proposing greedily, or
 *    with sampling by drawing from its own distribution under the same
 *    sampler settings. Its session is kept in step with the target's (and
 *    rolled back too); the caller creates and frees it.
 *  - MTP: the model's own multi-token-prediction block (Qwen3.5's nextn;
 *    the model loaded with load_mtp): from the last position's hidden state
 *    and the token sampled after it, a guess at the next token, then
 *    chained from its own output for the drafts after (greedy, or drawn
 *    from its distribution when sampling, as DRAFT). The session keeps what
 *    the block needs as it evaluates (its KV cache runs one position behind
 *    the model's), which costs one attention block per token. */
typedef enum tela_spec_method {
    TELA_SPEC_NONE = 0,
    TELA_SPEC_NGRAM = 1,
    TELA_SPEC_DRAFT = 2,
    TELA_SPEC_MTP = 3
} tela_spec_method;

/* The most tokens a verification step proposes. */
#define TELA_SPEC_MAX_DRAFT 15

typedef struct tela_spec_params {
    tela_spec_method method;
    int32_t draft_max;          /* k, 1..TELA_SPEC_MAX_DRAFT (default 3) */
    int32_t ngram_min;          /* NGRAM: the shortest n-gram matched (default 2) */
    int32_t ngram_max;          /* NGRAM: the longest, tried first (default 4; at most 64) */
    tela_session *draft;        /* DRAFT: a session on the draft model */
} tela_spec_params;

TELA_API tela_spec_params tela_spec_default_params(void);
/* Whether draft can draft for target: the same number of tokens and, when
 * they have tokenizers, the same token texts and special tokens (BOS,
 * EOS); the message names the first difference. */
TELA_API tela_status tela_spec_check_draft(const tela_model *target, const tela_model *draft);

typedef struct tela_generate_params {
    int32_t max_tokens;              /* <= 0: until EOS or the context is full */
    tela_sampler_params sampler;
    const char *const *stop_strings; /* NULL-terminated list, or NULL */
    int ignore_eos;
    tela_token_callback on_token;
    void *user;
    tela_logits_hook logits_hook;    /* not with speculative decoding (TELA_ERR_UNSUPPORTED) */
    void *hook_user;
    const tela_spec_params *spec;    /* speculative decoding, or NULL (off) */
} tela_generate_params;

typedef enum tela_stop_reason {
    TELA_STOP_MAX_TOKENS = 0,
    TELA_STOP_EOS = 1,
    TELA_STOP_STRING = 2,
    TELA_STOP_CALLBACK = 3,
    TELA_STOP_CONTEXT = 4,
    TELA_STOP_CANCELLED = 5,  /* tela_engine_cancel, a callback's request, or the engine freed */
    TELA_STOP_ERROR = 6       /* the computation failed (the event says why) */
} tela_stop_reason;

typedef struct tela_generate_result {
    int32_t n_prompt;        /* prompt tokens evaluated in this call */
    int32_t n_generated;
    double prompt_seconds;
    double generate_seconds;
    tela_stop_reason stop_reason;
    /* speculative decoding (zero without it) */
    int32_t n_spec_steps;    /* verification passes */
    int32_t n_drafted;       /* tokens proposed to them */
    int32_t n_accepted;      /* of those, accepted */
    int32_t n_spec_tokens;   /* tokens the verification passes produced (accepted + one each, unless stopped) */
} tela_generate_result;

TELA_API tela_generate_params tela_generate_default_params(void);

/* Evaluates the prompt tokens (appended to what the session holds), then
 * samples and evaluates up to max_tokens new tokens. Generated ids are
 * written to out_tokens (up to cap) when it is not NULL.
 *  - n_prompt may be 0 when the session holds logits from its last
 *    evaluation (tela_session_eval with a logits buffer, or a snapshot of
 *    such a session).
 *  - The step index given to the sampler for a token is its position in
 *    the session, so the same seed gives the same tokens whether they are
 *    generated in one call or several.
 *  - The last sampled token is not evaluated (it is in out_tokens): to
 *    continue, pass it as the prompt of the next call.
 *  - on_token is called once per sampled token with the text that is now
 *    final; text that may be the start of a stop string is held back until
 *    it is known not to be one. A stop string ends generation and is not
 *    passed on (nor is anything after it). An end-of-generation token's own
 *    text is not passed on either; held-back text is flushed with it.
 *  - Generation also stops when the context is full (TELA_STOP_CONTEXT);
 *    a prompt that does not fit fails with TELA_ERR_CONTEXT.
 * Defaults (tela_generate_default_params): max_tokens 0 (no limit), the
 * sampler defaults, no stop strings, no callbacks. */
TELA_API tela_status tela_generate(tela_session *session, const int32_t *prompt, int32_t n_prompt,
                                   const tela_generate_params *params, int32_t *out_tokens,
                                   size_t cap, tela_generate_result *result);


/* ---------------------------------------------------------------- engine */

/* A batching engine (runtime/engine.c): requests are submitted from any
 * thread; one scheduler thread runs steps that compute every running
 * sequence together (the next token of each decoding sequence plus chunks
 * of prompts, under a per-step token budget, so a long prompt never stalls
 * the others), in a shared paged KV cache, with a prefix cache that lets a
 * request reuse what an earlier one computed (KV blocks; for hybrid models
 * also checkpoints of the recurrent state). Results reach the caller
 * through a callback, called on the scheduler thread.
 *
 * Determinism: on the CPU a request's tokens are bit-identical whether it
 * runs alone or batched with others, for a given thread count, as long as
 * the prefix cache holds the same entries (a prefix resumed from a cache
 * entry is computed in other pieces, which for hybrid models can differ in
 * the last bits).
 *
 * Speculative decoding (tela_request_params.spec: prompt lookup or the MTP block):
 * each decoding sequence verifies its own drafts inside the batched step,
 * by tela_generate's rules (greedy output unchanged; sampled tokens those
 * of tela_generate with the same drafter and seed while the KV pool has
 * room for every draft: short of blocks a sequence drafts fewer, which
 * changes its draws but not their distribution), and is rolled back on
 * its own. */
typedef struct tela_engine tela_engine;

typedef struct tela_engine_params {
    int32_t n_ctx;               /* the most tokens one request holds (prompt + generated); 0 = min(train ctx,
                                    4096) */
    int32_t n_parallel;          /* the most sequences computed together; 0 = 8 */
    int32_t kv_tokens;           /* positions in the shared KV cache (in blocks of 16); 0 = n_parallel * n_ctx */
    int32_t step_tokens;         /* tokens per step (decodes plus prompt chunks); 0 = 256 (a GPU: 2048) */
    int32_t max_waiting;         /* requests queued before submit says TELA_ERR_BUSY; 0 = 64 */
    int prefix_cache;            /* reuse computed prefixes across requests (default 1) */
    int32_t checkpoint_interval; /* hybrid models: a recurrent-state checkpoint every N prompt tokens; 0 = 256 */
    uint64_t checkpoint_bytes;   /* host memory for those checkpoints; 0 = 1 GiB */
    int n_threads;               /* 0 = the model's */
    tela_kv_type kv_type;
    uint64_t mem_budget;         /* as tela_session_params.mem_budget */
    tela_model *draft_model;     /* NULL, or a model requests may draft with (TELA_SPEC_DRAFT): the same
                                    vocabulary and device, attention only; it must outlive the engine */
} tela_engine_params;

TELA_API tela_engine_params tela_engine_default_params(void);

typedef struct tela_top_logprob {
    int32_t token;
    float logprob;
} tela_top_logprob;

typedef enum tela_engine_event_kind {
    TELA_EVENT_TOKEN = 0,  /* a sampled token */
    TELA_EVENT_DONE = 1    /* the request ended; the last event it gets */
} tela_engine_event_kind;

typedef struct tela_request_usage {
    int32_t prompt_tokens;
    int32_t cached_tokens;      /* prompt tokens taken from the prefix cache, not computed */
    int32_t generated_tokens;
    double queue_seconds;       /* submit to the first step that computed it */
    double first_token_seconds; /* submit to the first sampled token */
    double total_seconds;       /* submit to the end */
    int32_t draft_tokens;       /* speculative decoding: tokens drafted, */
    int32_t accepted_tokens;    /* and of those, accepted */
} tela_request_usage;

typedef struct tela_engine_event {
    tela_engine_event_kind kind;
    uint64_t id;
    /* TOKEN */
    int32_t token;
    const char *text;           /* the text now final, as tela_generate's callback gets it (may be empty) */
    size_t text_len;
    float logprob;              /* the token's log-probability under the model (top_logprobs >= 0) */
    const tela_top_logprob *top;  /* the n_top likeliest tokens, likeliest first */
    int32_t n_top;
    /* DONE */
    tela_stop_reason stop_reason;
    tela_status status;         /* TELA_OK, or why it failed (stop_reason TELA_STOP_ERROR) */
    const char *error;          /* the message when status != TELA_OK */
    tela_request_usage usage;   /* also filled for TOKEN events, so far */
} tela_engine_event;

/* Called on the scheduler thread, with data valid during the call; it must
 * be quick (hand the data to another thread) and may call submit and
 * cancel, but not tela_engine_free. Returning non-zero from a TOKEN event
 * cancels the request (its DONE follows). */
typedef int (*tela_engine_callback)(void *user, const tela_engine_event *event);

typedef struct tela_request_params {
    tela_sampler_params sampler;     /* the seed makes a request reproducible */
    int32_t max_tokens;              /* <= 0: until the end of generation or of the context */
    const char *const *stop_strings; /* NULL-terminated, or NULL; copied */
    int ignore_eos;
    int32_t top_logprobs;            /* -1: no log-probabilities; 0: the token's; k <= 20: also the k likeliest */
    tela_engine_callback callback;
    void *user;
    const tela_spec_params *spec;    /* speculative decoding (TELA_SPEC_NGRAM or _MTP), or NULL; copied */
    /* Tokens the output is likely to repeat (OpenAI's predicted outputs),
     * copied: prompt lookup drafts from them first (turned on, k = 8, when
     * spec is NULL). */
    const int32_t *lookup_tokens;
    int32_t n_lookup_tokens;
} tela_request_params;

TELA_API tela_request_params tela_request_default_params(void);

/* Starts the scheduler thread. Fails like tela_session_create when the KV
 * cache and work buffers do not fit. */
TELA_API tela_status tela_engine_create(tela_model *model, const tela_engine_params *params, tela_engine **out);
/* Cancels what is left (each request gets its DONE event), stops the
 * thread, frees everything. */
TELA_API void tela_engine_free(tela_engine *engine);
/* Queues a request for the prompt tokens (copied, as are the parameters'
 * arrays). Fails, with no event, with TELA_ERR_CONTEXT when the prompt does
 * not leave room for a token in n_ctx (the message has both numbers),
 * TELA_ERR_BUSY when max_waiting requests are already waiting, TELA_ERR_ARG
 * for bad ids or parameters. *id (may be NULL) identifies it in events. */
TELA_API tela_status tela_engine_submit(tela_engine *engine, const int32_t *prompt, int32_t n_prompt,
                                        const tela_request_params *params, uint64_t *id);
/* Ends a request early (its DONE event says TELA_STOP_CANCELLED, within one
 * step). Unknown or finished ids are ignored. */
TELA_API void tela_engine_cancel(tela_engine *engine, uint64_t id);
TELA_API int32_t tela_engine_n_ctx(const tela_engine *engine);

typedef struct tela_engine_stats {
    int32_t running;             /* sequences being computed */
    int32_t waiting;             /* requests queued */
    int32_t block_size;          /* positions per KV block */
    int32_t kv_blocks_total;
    int32_t kv_blocks_used;      /* held by running sequences */
    int32_t kv_blocks_cached;    /* held only by the prefix cache (reusable, evicted when needed) */
    uint64_t requests_finished;  /* ended, whatever the reason */
    uint64_t requests_cancelled;
    uint64_t requests_failed;
    uint64_t prompt_tokens;
    uint64_t cached_tokens;      /* prompt tokens taken from the prefix cache */
    uint64_t generated_tokens;
    uint64_t draft_tokens;       /* speculative decoding: drafted (finished requests) */
    uint64_t accepted_tokens;    /* and accepted */
    uint64_t prefix_hits;        /* requests that reused a prefix */
    uint64_t preemptions;        /* sequences set back to waiting to free KV blocks */
    uint64_t steps;
    uint64_t checkpoints;        /* recurrent-state checkpoints held (hybrid models) */
    uint64_t checkpoint_bytes;
} tela_engine_stats;

TELA_API void tela_engine_get_stats(tela_engine *engine, tela_engine_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* TELA_TELA_H */
