/* backend.h: the interface between the models and the compute backends.
 *
 * A model's forward pass is written once, as a sequence of the operations
 * below; each backend (backend/cpu: the host's cores, backend/cuda: an
 * NVIDIA GPU) implements them. Nothing in this header, and nothing above
 * src/backend/, knows which backend runs.
 *
 * Three objects:
 *  - tela_backend: a device. Weights are prepared for it once, at load
 *    (tela_backend_prepare_mats: packed for the CPU kernels, uploaded to GPU
 *    memory in a GPU layout), and it allocates memory ("backend memory": host
 *    memory on the CPU, device memory on a GPU).
 *  - tela_exec: where one session's operations run (the CPU's thread pool;
 *    a CUDA stream with its scratch buffers and captured graphs). Operations
 *    on one exec run in the order they are issued; on a GPU they may still
 *    be running when the call returns, until tela_exec_download or
 *    tela_exec_sync.
 *  - tela_kv_cache: the keys and values of a session's attention layers, in
 *    the backend's own layout and precision.
 *
 * Pointers passed to operations are backend memory (except where a
 * parameter says "host"); the forward pass may compute offsets into them
 * but never dereferences them. Activations are f32 rows, `stride` floats
 * apart. A step's tokens and positions are in backend memory too, so that a
 * GPU can capture a decode step once as a graph and replay it at every
 * position (tela_exec_graph_begin).
 *
 * Determinism: on the CPU, each result is bit-identical for any thread count
 * (backend/cpu/ops.h). On a GPU, a given build, device and exec give the
 * same results run after run. */
#ifndef TELA_BACKEND_BACKEND_H
#define TELA_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "format/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tela_backend_kind { TELA_BACKEND_CPU = 0, TELA_BACKEND_CUDA = 1 } tela_backend_kind;

/* A weight matrix as stored: n_rows rows of n_cols elements of `type`, row r
 * at data + r * row_bytes (host memory, usually the mapped file). y = W x
 * computes one output per row. A backend adds its own copy at load:
 * `packed` (the CPU kernels' interleaved layout, backend/cpu/qdot.h) or
 * `dev` (device memory, backend/cuda). */
typedef struct tela_mat {
    const char *name;        /* the tensor's name, for messages */
    tela_type type;
    const void *data;
    int64_t n_rows;
    int64_t n_cols;
    size_t row_bytes;
    const void *packed;
    const void *dev;
} tela_mat;

/* Views a stored 2-D tensor (ne[0] = columns, ne[1] = rows) as a matrix.
 * Fails (naming the tensor) if the type cannot be computed on or the byte
 * size does not match the shape. */
tela_status tela_mat_from_tensor(const tela_tensor *t, tela_mat *out);

/* How the forward pass uses a matrix: multiplied by (matmul), or only read
 * by rows (the token embedding). A CPU packs only the former. */
typedef enum tela_mat_use { TELA_MAT_MATMUL = 0, TELA_MAT_ROWS = 1 } tela_mat_use;

/* Precision of a KV cache. Q8_0: llama.cpp's blocks of 32 values (an f16
 * scale, 32 int8), 1.06 bytes a value; the CPU's only. */
typedef enum tela_kv_dtype { TELA_KV_DTYPE_F32 = 0, TELA_KV_DTYPE_F16 = 1, TELA_KV_DTYPE_Q8_0 = 2 } tela_kv_dtype;

/* RoPE pair conventions. */
typedef enum tela_rope_mode {
    TELA_ROPE_ADJACENT = 0,  /* rotates pairs (x[2i], x[2i+1]): ggml's normal mode, GGUF llama */
    TELA_ROPE_HALVES = 1     /* rotates pairs (x[i], x[i + n_rot/2]): HF rotate_half, ggml's neox */
} tela_rope_mode;

typedef struct tela_backend tela_backend;
typedef struct tela_exec tela_exec;
typedef struct tela_kv_cache tela_kv_cache;
typedef struct tela_backend_ops tela_backend_ops;

/* One sequence's share of a step of several (the batching engine): the
 * batch's tokens [tok0, tok0 + n_tok), at positions pos0.. of the sequence,
 * whose recurrent state is in slot `slot` and whose KV rows are paged:
 * positions [i * block_size, (i + 1) * block_size) are in block blocks[i]
 * of the cache (host memory). */
typedef struct tela_batch_seq {
    int tok0, n_tok;
    int32_t pos0;
    int slot;
    const int32_t *blocks;
} tela_batch_seq;

/* One step of tokens. A session's step is one sequence (seqs NULL): n_tok
 * tokens at consecutive positions pos0.., slot 0, KV rows at their
 * positions. A batched step has n_seq sequences (seqs, host memory), each
 * with its own positions, slot and KV blocks, their tokens one after the
 * other. pos0 is for the host's bookkeeping; the operations read the
 * positions from `pos` (backend memory), so a captured GPU graph serves
 * every position. */
typedef struct tela_batch {
    int n_tok;
    int32_t pos0;
    const int32_t *tokens;   /* backend memory [n_tok] */
    const int32_t *pos;      /* backend memory [n_tok]: each token's position in its sequence */
    int n_seq;               /* 1 when seqs is NULL */
    const tela_batch_seq *seqs;
    uint64_t serial;         /* batched steps: a number of its own (a backend's per-step tables are made once) */
} tela_batch;

/* Shapes of a KV cache: n_layer layers of n_ctx rows, each row holding
 * n_kv_head heads of k_dim keys and v_dim values. block_size 0: the rows
 * are one sequence's positions (a session). Otherwise the rows are blocks
 * of block_size positions that batched steps address through their
 * sequences' block tables (a paged cache; n_ctx a multiple of block_size),
 * for sequences of at most max_seq_len positions. */
typedef struct tela_kv_shape {
    int n_layer;
    int32_t n_ctx;
    int n_kv_head;
    int k_dim;
    int v_dim;
    tela_kv_dtype dtype;
    int32_t block_size;
    int32_t max_seq_len;     /* paged caches: the longest sequence (bounds attention scratch) */
} tela_kv_shape;

/* y_i = W_i x for several matrices of the same input (tela_exec_matmul_many). */
typedef struct tela_matmul_target {
    const tela_mat *w;
    float *y;
    int64_t y_stride;
} tela_matmul_target;

/* ----------------------------------------------------------- devices */

/* What a device string names: "cpu", "cuda", "cuda:N"; NULL or "" or
 * "auto": a GPU when tela was built with CUDA and one is present, else the
 * CPU. n_threads is for the CPU backend (and for host work of the others). */
tela_status tela_backend_create(const char *device, int n_threads, tela_backend **out);
void tela_backend_free(tela_backend *be);
tela_backend_kind tela_backend_get_kind(const tela_backend *be);
/* "cpu (AVX-512, 2 threads)", "cuda:0 (NVIDIA H200, 139.8 GiB, sm_90)". */
const char *tela_backend_description(const tela_backend *be);
/* Whether tela was built with the CUDA backend, and how many GPUs it sees
 * (0 without CUDA, driver or GPU). */
bool tela_backend_cuda_built(void);
int tela_backend_cuda_device_count(void);
/* Free and total bytes of the device's memory (the host's for the CPU). */
tela_status tela_backend_mem_info(tela_backend *be, size_t *free_bytes, size_t *total_bytes);
/* Tokens per prefill step this backend processes best (the execs' too). */
int tela_backend_preferred_batch(const tela_backend *be);
/* Whether matmul and get_rows can use a weight of this type here. */
bool tela_backend_type_supported(const tela_backend *be, tela_type type);

/* Prepares weights for the backend, once, at load: mats[i] is used as
 * uses[i] says. The CPU packs matrices for its kernels (memory owned by the
 * backend); a GPU uploads every one to device memory (matrices sharing
 * host data, such as a tied output head, share one copy). Fails, freeing
 * what it allocated, with a message naming the tensor and what is missing:
 * a type without GPU kernels, or device memory (needed and free bytes).
 * verbose: progress on stderr. */
tela_status tela_backend_prepare_mats(tela_backend *be, tela_mat *const *mats, const tela_mat_use *uses, size_t n,
                                      int verbose);
/* Bytes of device memory that prepare_mats takes for these matrices (0 on
 * the CPU, whose packed copy is in host memory). */
size_t tela_backend_mats_bytes(const tela_backend *be, tela_mat *const *mats, size_t n);

/* Backend memory: zeroed on allocation; freed with tela_backend_free_mem.
 * A failure names `what` and the bytes asked for. */
tela_status tela_backend_alloc(tela_backend *be, size_t bytes, const char *what, void **out);
void tela_backend_free_mem(tela_backend *be, void *p);
/* Host memory that downloads reach fastest (page-locked on a GPU: the
 * copy from the device lands there directly, with no staging copy; plain
 * memory on the CPU), zeroed; NULL when there is not enough. Freed with
 * tela_backend_host_free. */
void *tela_backend_host_alloc(tela_backend *be, size_t bytes);
void tela_backend_host_free(tela_backend *be, void *p);
/* A copy in backend memory of host data that the forward pass reads (norm
 * weights, RoPE frequencies); owned by the backend until it is freed. On
 * the CPU this is the host pointer itself. NULL for NULL. */
tela_status tela_backend_const(tela_backend *be, const void *host, size_t bytes, const void **out);

/* The exact mode for quantized weights: each weight row is dequantized and
 * dotted with f32 activations (slow; for parity tests), and GPU sessions
 * default to f32 KV caches. Process-wide; defaults to TELA_EXACT_MATMUL=1
 * in the environment, else off. Set it before creating sessions, not while
 * another thread computes. (backend/exact_mode.c) */
void tela_ops_set_exact_matmul(bool exact);
bool tela_ops_exact_matmul(void);

/* -------------------------------------------------------------- execs */

tela_status tela_exec_create(tela_backend *be, int n_threads, tela_exec **out);
void tela_exec_free(tela_exec *ex);
tela_backend *tela_exec_backend(const tela_exec *ex);
/* Whether backend memory is host memory (the CPU): host buffers may then be
 * passed to the operations directly. */
bool tela_exec_host_visible(const tela_exec *ex);
/* Tokens per step of a long prefill that this backend processes best (a
 * forward pass may use fewer, for its buffers). */
int tela_exec_preferred_batch(const tela_exec *ex);
/* Waits for everything issued; reports an asynchronous failure. */
tela_status tela_exec_sync(tela_exec *ex);
/* Host -> backend memory, ordered with the operations; the host buffer may
 * be reused when the call returns. */
tela_status tela_exec_upload(tela_exec *ex, void *dst, const void *host_src, size_t bytes);
/* Backend -> host memory after everything issued before it; the data is in
 * host_dst when the call returns (no copy when both are the same memory). */
tela_status tela_exec_download(tela_exec *ex, void *host_dst, const void *src, size_t bytes);

/* Graph capture of the steps that repeat (decoding): the ops issued between
 * graph_begin and graph_end form one step identified by `key` (everything
 * that changes the work but is not in backend memory: the number of tokens,
 * what is output, a length bucket). When the backend already holds the
 * step for this key, graph_begin returns false and the caller issues
 * nothing; graph_end then runs the held step. Otherwise graph_begin returns
 * true, the caller issues the ops, and graph_end runs them (and may keep
 * them). Always pair the calls. Backends without graphs return true. */
bool tela_exec_graph_begin(tela_exec *ex, uint64_t key);
tela_status tela_exec_graph_end(tela_exec *ex);
/* The length bucket a decode step at context length n_kv belongs to, for
 * graph keys: steps in one bucket must be able to share a captured graph. */
uint32_t tela_exec_length_bucket(const tela_exec *ex, int32_t n_kv);
/* Forgets the captured steps: buffers they use have moved (a forward
 * pass's own, grown). */
void tela_exec_graphs_drop(tela_exec *ex);
/* Steps of up to this many tokens may be captured like decode steps (a
 * speculative step's verification): the backends compute them, like a
 * single token, the same way at every length of a bucket. */
#define TELA_GRAPH_MAX_TOK 8

/* Fills batch with n tokens at positions pos0.., uploading the ids (host)
 * and positions into tok_mem and pos_mem (backend memory of >= n int32).
 * With pos_mem NULL the positions follow the ids in tok_mem (>= 2n int32),
 * and a step of up to 128 tokens takes one copy instead of two; its batch's
 * positions then sit at tok_mem + n (one address per step length). */
tela_status tela_exec_set_batch(tela_exec *ex, tela_batch *batch, int32_t *tok_mem, int32_t *pos_mem,
                                const int32_t *tokens, int n, int32_t pos0);

/* Fills batch with the tokens of several sequences (seqs: host memory that
 * must outlive the step; their tokens one after the other in `tokens`,
 * host), uploading the ids and each token's position in its sequence. */
tela_status tela_exec_set_batch_seqs(tela_exec *ex, tela_batch *batch, int32_t *tok_mem, int32_t *pos_mem,
                                     const int32_t *tokens, const tela_batch_seq *seqs, int n_seq);

/* --------------------------------------------------------- operations */

/* out[t] = row ids[t] of W as f32 (the token embedding lookup); ids in
 * backend memory, in [0, W.n_rows). */
void tela_exec_get_rows(tela_exec *ex, const tela_mat *w, const int32_t *ids, int n, float *out, int64_t out_stride);

/* A rank's part of an embedding split by vocabulary (tensor parallelism):
 * W holds rows [row0, row0 + W.n_rows) of the table. out[t] = row
 * ids[t] - row0 of W where ids[t] falls in it, else zeros; with
 * accumulate, out[t] += that row, and other rows are left as they are.
 * Ranks in turn (the first without accumulate) give the whole table's
 * rows exactly: one of them adds a row to zeros. */
void tela_exec_get_rows_part(tela_exec *ex, const tela_mat *w, int64_t row0, const int32_t *ids, int n, float *out,
                             int64_t out_stride, bool accumulate);

/* out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, n_rows rows of n floats; w
 * may be NULL (no scale); out may equal x. */
void tela_exec_rmsnorm(tela_exec *ex, float *out, int64_t out_stride, const float *x, int64_t x_stride,
                       const float *w, int64_t n, int n_rows, float eps);

/* y[t] = W x[t] for t < n_tok (accumulate: y[t] += W x[t]). For quantized
 * weights the activations are quantized to 8 bits, except in the exact
 * mode (tela_ops_exact_matmul), which computes with f32 activations. */
void tela_exec_matmul(tela_exec *ex, const tela_mat *w, const float *x, int64_t x_stride, float *y, int64_t y_stride,
                      int n_tok, bool accumulate);

/* A hint, for speed only: the next operation writes the input x of a
 * product with w (tela_exec_matmul) that comes right after it. A backend
 * may prepare that input for the product as it writes it (the CUDA
 * backend quantizes it for a quantized w in the attention, output-gate
 * and Gated DeltaNet kernels, which saves the product a launch); results
 * are the same either way. Backends without it, and operations that do
 * not take it, ignore it. */
void tela_exec_next_input_of(tela_exec *ex, const tela_mat *w);
/* Kernels the exec has launched so far (0 where operations launch none):
 * what tests of such fusions count. */
uint64_t tela_exec_kernel_launches(const tela_exec *ex);
/* tela_exec_matmul for each target, with the same input. */
void tela_exec_matmul_many(tela_exec *ex, const tela_matmul_target *t, int n, const float *x, int64_t x_stride,
                           int n_tok);
/* The SwiGLU feed-forward input: out[t] = silu(W_gate x[t]) * (W_up x[t]),
 * W_gate.n_rows floats per row. */
void tela_exec_matmul_swiglu(tela_exec *ex, const tela_mat *w_gate, const tela_mat *w_up, const float *x,
                             int64_t x_stride, float *out, int64_t out_stride, int n_tok);

/* An RMSNorm in front of products: the products take
 * h = rmsnorm(x) * w (eps) instead of x. xn is backend memory for the n_tok
 * normalized rows (x_stride apart), which a backend may fill (the CPU
 * does) or skip by normalizing inside the products (a GPU's decode). */
typedef struct tela_norm_in {
    const float *w;
    float eps;
    float *xn;
} tela_norm_in;

/* matmul_many and matmul_swiglu of rmsnorm(x) * norm->w. */
void tela_exec_norm_matmul_many(tela_exec *ex, const tela_norm_in *norm, const tela_matmul_target *t, int n,
                                const float *x, int64_t x_stride, int n_tok);
void tela_exec_norm_matmul_swiglu(tela_exec *ex, const tela_norm_in *norm, const tela_mat *w_gate,
                                  const tela_mat *w_up, const float *x, int64_t x_stride, float *out,
                                  int64_t out_stride, int n_tok);

/* y[i] += x[i] for n floats. */
void tela_exec_add(tela_exec *ex, float *y, const float *x, int64_t n);

/* RoPE: cs[t][i] = (cos, sin) of pos[t] * inv_freq[i], i < n_rot/2, computed
 * in double (inv_freq: backend memory, from tela_backend_const); then the
 * first n_rot dims of each of n_heads heads (head_dim floats each) of each
 * row rotated by that table. */
void tela_exec_rope_table(tela_exec *ex, float *cs, const tela_batch *b, const double *inv_freq, int n_rot);
void tela_exec_rope(tela_exec *ex, float *x, int64_t x_stride, int n_tok, int n_heads, int head_dim, int n_rot,
                    const float *cs, tela_rope_mode mode);

/* KV caches. */
tela_status tela_kv_create(tela_exec *ex, const tela_kv_shape *shape, tela_kv_cache **out);
void tela_kv_free(tela_kv_cache *kv);
const tela_kv_shape *tela_kv_get_shape(const tela_kv_cache *kv);
/* Forget the contents (the caches of recurrent layers are elsewhere). */
void tela_kv_clear(tela_exec *ex, tela_kv_cache *kv);
/* Snapshot image of positions [0, n_past): its size, and copies to/from a
 * host buffer of that size (the backend's own format: an image is restored
 * only into a cache of the same shape on the same kind of backend). */
size_t tela_kv_image_bytes(const tela_kv_cache *kv, int32_t n_past);
tela_status tela_kv_save(tela_exec *ex, const tela_kv_cache *kv, int32_t n_past, void *host_dst);
tela_status tela_kv_load(tela_exec *ex, tela_kv_cache *kv, int32_t n_past, const void *host_src);
/* Copies rows [src, src + n) of every layer to rows [dst, dst + n) (a paged
 * cache: part of a shared block into a sequence's own). Fails with
 * TELA_ERR_UNSUPPORTED on a backend without paged caches. */
tela_status tela_kv_copy_rows(tela_exec *ex, tela_kv_cache *kv, int32_t dst, int32_t src, int32_t n);
/* Stores the keys k[t] and values v[t] of the batch's tokens (n_kv_head *
 * k_dim / v_dim floats per row) at their positions in layer `layer`. */
void tela_exec_kv_store(tela_exec *ex, tela_kv_cache *kv, int layer, const float *k, int64_t k_stride, const float *v,
                        int64_t v_stride, const tela_batch *b);
/* The RoPE and store in front of attention: rotates q (n_head heads) in
 * place and k (the cache's n_kv_head heads) by the table cs (first n_rot
 * dims of each head), and stores k and v of the batch's tokens at their
 * positions in layer `layer` (tela_exec_rope on q and k, then
 * tela_exec_kv_store; a backend may do it in one pass, leaving k as it was). */
void tela_exec_rope_store(tela_exec *ex, tela_kv_cache *kv, int layer, float *q, int64_t q_stride, int n_head, float *k,
                          int64_t k_stride, const float *v, int64_t v_stride, const tela_batch *b, const float *cs,
                          int n_rot, tela_rope_mode mode);
/* Qwen3.5's RMSNorm of each query and key head (k_dim floats, the
 * cache's) in front of the RoPE and store: the query heads read from src
 * (token t's head h at src + t * src_stride + h * src_head), normalized
 * with q_w into q; the key heads normalized with k_w. */
typedef struct tela_head_norms {
    const float *src;
    int64_t src_stride, src_head;
    const float *q_w, *k_w;
    float eps;
} tela_head_norms;
/* tela_exec_rope_store after the head norms: the values of tela_exec_rmsnorm
 * on each query head (src into q) and each key head (in place), then
 * tela_exec_rope_store, in one pass where the backend has one (k's
 * contents after it are unspecified). */
void tela_exec_norm_rope_store(tela_exec *ex, const tela_head_norms *norms, tela_kv_cache *kv, int layer, float *q,
                               int64_t q_stride, int n_head, float *k, int64_t k_stride, const float *v,
                               int64_t v_stride, const tela_batch *b, const float *cs, int n_rot, tela_rope_mode mode);

/* Causal attention of the batch's queries over layer `layer` of the cache
 * (positions 0 .. pos[t] for query row t): q rows of n_head * k_dim floats,
 * out rows of n_head * v_dim. Query head h reads KV head
 * h / (n_head / n_kv_head). Scores are scaled by `scale`. */
void tela_exec_attention(tela_exec *ex, const tela_kv_cache *kv, int layer, const float *q, int64_t q_stride,
                         float *out, int64_t out_stride, const tela_batch *b, int n_head, float scale);

/* dst row i = src row rows[i] (rows: host memory), n rows of `width`
 * floats: the rows of a batched step that need logits, gathered. */
void tela_exec_copy_rows(tela_exec *ex, float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                         const int32_t *rows, int n, int64_t width);

/* dst[0..n) = src[0..n) for each of n spans (host list) of backend
 * memory, in one launch where the backend can: a rollback's states, one
 * span a layer (one device copy each costs ~10 us on a GPU). Spans must
 * not overlap. */
typedef struct tela_copy_span {
    float *dst;
    const float *src;
    int64_t n;
} tela_copy_span;
void tela_exec_copy_spans(tela_exec *ex, const tela_copy_span *spans, int n);

/* out[0] = the index of the largest of x[0..n) (the lowest index among
 * equals): the greedy pick, made where the logits are. out: backend memory. */
void tela_exec_argmax(tela_exec *ex, const float *x, int64_t n, int32_t *out);
/* out[r] = the argmax of row r of x (n_rows rows of n, one after the other). */
void tela_exec_argmax_rows(tela_exec *ex, const float *x, int64_t n, int n_rows, int32_t *out);

/* -------------------------------------------- several execs (ranks) */

/* Tensor parallelism with a rank per device (docs/MULTI-GPU.md): each rank
 * has its own exec on its own backend (a GPU each, or for tests several
 * on one device), and one host thread issues every rank's operations.
 * Execs of one group are of one backend kind. A thread may move from one
 * exec to another between any two calls (a GPU backend makes the exec's
 * device current). */

/* Operations issued on ex from now on start after everything issued on
 * other before this call (on the CPU, where an operation is complete when
 * its call returns, nothing to do). While ex is capturing a decode step
 * (tela_exec_graph_begin), other joins the capture: every rank's work of a
 * step becomes one graph, provided the step ends with ex waiting for each
 * rank it forked. */
void tela_exec_wait_for(tela_exec *ex, tela_exec *other);
/* rows rows of width bytes from src (other's memory, src_pitch bytes
 * apart) to dst (ex's memory, dst_pitch apart), ordered on ex; ex must
 * already wait for what other wrote there (tela_exec_wait_for). */
void tela_exec_copy_from(tela_exec *ex, void *dst, size_t dst_pitch, tela_exec *other, const void *src,
                         size_t src_pitch, size_t width, size_t rows);

/* The all-reduce of a group of execs, one a rank: NCCL where the ranks are
 * on distinct GPUs and tela was built with it; otherwise rank 0 adds the
 * other ranks' buffers in rank order (copied through a buffer of its own,
 * of max_floats) and copies the sum back: the sums of the ranks run one
 * after another, bit for bit. */
typedef struct tela_exec_group tela_exec_group;
tela_status tela_exec_group_create(tela_exec *const *execs, int n, int64_t max_floats, tela_exec_group **out);
void tela_exec_group_free(tela_exec_group *g);
/* "NCCL" or "copies": what the group's all-reduce goes through. */
const char *tela_exec_group_transport(const tela_exec_group *g);
/* bufs[r] (rank r's memory, n <= max_floats floats) = the sum over the
 * ranks of bufs[r], on every rank, after each rank's operations issued
 * before and before those issued after. */
void tela_exec_allreduce_sum(tela_exec_group *g, float *const *bufs, int64_t n);

/* ------------------------------------------------------- profiling */

/* Profiling an exec (--profile; backend/profile.c): from start on, each
 * operation is timed on its device (host clocks on the CPU, CUDA events on
 * a GPU, where decode steps then run without graphs) and added to a row of
 * its kind and weight type; the model may name the phase of the products
 * that follow ("FFN", "output head"; NULL: none). profile_host adds host
 * work (sampling, detokenization). The report (malloc'd, a table or one
 * JSON object) has the wall time since start and what the rows leave out.
 * Off (the default), the operations only test a pointer. */
void tela_exec_profile_start(tela_exec *ex);
void tela_exec_profile_stop(tela_exec *ex);
bool tela_exec_profiling(const tela_exec *ex);
void tela_exec_profile_phase(tela_exec *ex, const char *phase);
void tela_exec_profile_host(tela_exec *ex, const char *name, double seconds);
char *tela_exec_profile_report(tela_exec *ex, bool json);

/* ---------------------------------------- Gated DeltaNet (Qwen3.5) */

/* Clears `bytes` of backend memory (recurrent and conv states). */
void tela_exec_zero(tela_exec *ex, void *p, size_t bytes);

/* out[r][i] *= sigmoid(gate[r][i]) for n_rows rows of n (the output gate
 * of Qwen3.5's attention). */
void tela_exec_sigmoid_gate(tela_exec *ex, float *out, int64_t out_stride, const float *gate, int64_t gate_stride,
                            int n_rows, int n);

/* Causal depthwise conv1d over n_tok rows of `channels` (x_stride /
 * out_stride apart) with `kernel` taps per channel (w: [channels][kernel],
 * oldest input first), followed by SiLU; state holds the previous kernel-1
 * input rows, oldest first, and is updated (backend/cpu/gdn.h). */
void tela_exec_conv1d_silu(tela_exec *ex, const float *x, int64_t x_stride, int n_tok, int channels, int kernel,
                           const float *w, float *state, float *out, int64_t out_stride);

/* The gates of a Gated DeltaNet layer, for n_tok rows: the first n_qk_heads
 * heads of dk floats of each qkv row L2-normalized in place (eps), beta <-
 * sigmoid(beta), and g <- a * softplus(g + dt_bias) per value head (a =
 * -exp(A_log)); beta and g rows hold nv floats. */
void tela_exec_gdn_gates(tela_exec *ex, float *qkv, int64_t qkv_stride, int n_qk_heads, int dk, float *beta, float *g,
                         int nv, int n_tok, const float *a, const float *dt_bias, float eps);

/* The delta rule of a Gated DeltaNet layer over n_tok tokens: per value
 * head j (of nv, with its key head j % nk when v_tiled, else j / (nv/nk)),
 * q and k from the qkv rows (q heads first, then k heads, then nv value
 * heads of dv), beta and g per head, the state (nv x dk x dv, f32) updated;
 * then out = rmsnorm(o) * norm_w * silu(z) per head (eps). Decode steps use
 * the recurrence, longer runs the chunked form (backend/cpu/gdn.h).
 * gates non-NULL: q, k, beta and g are still the raw projections, and the
 * op first applies tela_exec_gdn_gates' transform (with gates->a,
 * dt_bias, eps), which a GPU fuses into a decode step; qkv, beta and g may
 * then be overwritten. */
typedef struct tela_gdn_gates_in {
    const float *a, *dt_bias;    /* nv floats each */
    float eps;                   /* of the q/k L2 norms */
} tela_gdn_gates_in;

typedef struct tela_gdn_args {
    float *qkv;
    int64_t qkv_stride;
    int nk, nv, dk, dv;
    bool v_tiled;
    float q_scale;
    float *beta, *g;             /* rows of nv */
    const float *z;              /* rows of nv * dv */
    const float *norm_w;         /* dv */
    float eps;
    float *state;
    float *out;                  /* rows of nv * dv */
    int n_tok;
    const tela_gdn_gates_in *gates;
    float *states;               /* NULL, or n_tok states of nv * dk * dv: the state after each token (the
                                    rollback of a speculative step; computed by the recurrence, so each is
                                    what single steps give) */
} tela_gdn_args;

void tela_exec_gdn_delta(tela_exec *ex, const tela_gdn_args *a);

#ifdef __cplusplus
}
#endif
#endif
