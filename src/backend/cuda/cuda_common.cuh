/* cuda_common.cuh: what the CUDA backend's files share: the backend, exec
 * and KV cache structs, error checks, the GPU weight layouts, and the
 * host-side launchers of the kernels (each .cu file holds one family of
 * kernels and its launchers). Only src/backend/cuda/ includes it.
 *
 * GPU weight layouts (made once at upload, tela_mat.dev points at them):
 *   F32, F16, BF16, Q4_K, Q5_K: the stored rows, as in the file.
 *   Q8_0: all rows' int8 quants [n_rows][n_cols], then the f16 scales
 *         [n_rows][n_cols / 32], each array 256-byte aligned.
 *   Q4_0: the nibbles [n_rows][n_cols / 2] (each 32-block's 16 bytes as
 *         stored), then the f16 scales [n_rows][n_cols / 32].
 *   Q6_K: per 256-block the 128 ql bytes and 64 qh bytes [n_rows][nb][192],
 *         then the int8 scales [n_rows][nb][16], then d [n_rows][nb] (f16).
 * Splitting the blocks whose sizes are not multiples of 16 bytes gives
 * every lane 16-byte aligned loads. */
#ifndef TELA_BACKEND_CUDA_COMMON_CUH
#define TELA_BACKEND_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/backend_impl.h"

/* Byte offset of the second (and third) array of a split layout. */
static inline __host__ __device__ size_t tela_cuda_align(size_t n) { return (n + 255) & ~(size_t)255; }

/* The RoPE rotation of a pair (x0, x1) by cos c and sin s. The products
 * are rounded explicitly, so every kernel that rotates (the RoPE, the RoPE
 * and store, with or without the head norms) gives the same bits whatever
 * the compiler would contract. tela_rope_elem: element d of
 * a head x rotated by a token's table cs (cos and sin of each pair; the
 * first n_rot elements rotate, the rest are as they are). */
static __device__ __forceinline__ float2 tela_rope_pair(float x0, float x1, float c, float s) {
    return make_float2(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)), __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c)));
}

static __device__ __forceinline__ float tela_rope_elem(const float *x, int d, const float *cs, int n_rot, int adjacent) {
    if (d >= n_rot) return x[d];
    const int half = n_rot / 2, f = adjacent ? d / 2 : d % half;
    const int i0 = adjacent ? 2 * f : f, i1 = adjacent ? 2 * f + 1 : f + half;
    const float c = cs[2 * f], s = cs[2 * f + 1];
    const float2 r = tela_rope_pair(x[i0], x[i1], c, s);
    return d == i0 ? r.x : r.y;
}

/* The GPU layout's total bytes for a matrix (0: type not supported). */
size_t tela_cuda_layout_bytes(tela_type type, int64_t n_rows, int64_t n_cols);
/* Rearranges rows [r0, r0 + nr) of the stored matrix src (host) into the
 * GPU layout's host image dst (tela_cuda_layout_bytes of the full matrix):
 * the three arrays of split layouts are at their full-matrix offsets. */
void tela_cuda_layout_rows(tela_type type, int64_t n_rows, int64_t n_cols, const void *src, size_t row_bytes,
                           int64_t r0, int64_t nr, void *dst);
bool tela_cuda_type_ok(tela_type type);

typedef struct cuda_backend {
    tela_backend head;
    int device;
    int sm_count;
    int cc_major, cc_minor;
    size_t smem_optin;           /* largest dynamic shared memory a block may ask for */
    /* device memory owned by the backend (weights, constants), freed at destroy */
    void **allocs;
    size_t n_allocs, cap_allocs;
    size_t weight_bytes;
} cuda_backend;

#define TELA_CUDA_MAX_GRAPHS 48

typedef struct cuda_graph_slot {
    uint64_t key;
    int seen;                    /* times run eagerly */
    cudaGraphExec_t exec;
} cuda_graph_slot;

/* A batched step's addressing of a paged KV cache (built once per step by
 * cuda_backend.cu): each token's row of its own position (the stores), and
 * for attention the block tables of the sequences, one after the other in
 * flat, token t's at flat + tok_tbl[t]; position j of a sequence is row
 * (table[j >> shift] << shift) | (j & (block - 1)). */
typedef struct cuda_paging {
    const int32_t *rows;         /* device [n_tok] */
    const int32_t *tok_tbl;      /* device [n_tok] */
    const int32_t *flat;         /* device */
    int shift;
    int n_seq;
    const tela_batch_seq *seqs;  /* host, the step's */
    const int32_t *seq_tbl;      /* host [n_seq]: each sequence's table's offset in flat */
} cuda_paging;

typedef struct cuda_exec {
    tela_exec head;
    cuda_backend *be;
    cudaStream_t stream;
    cublasHandle_t cublas;
    void *cublas_ws;
    /* scratch, grown outside graph capture: converted activations,
     * dequantized weight panels, quantized activations, attention partials */
    void *scratch;
    size_t scratch_bytes;
    void *aux;
    size_t aux_bytes;
    void *act;                   /* quantized activations (TELA_CUDA_GEMV=2) */
    size_t act_bytes;
    bool gemv_v2;                /* the quantized decode products' second variant (default; TELA_CUDA_GEMV=1: the first) */
    int gemv_q_rows;             /* TELA_CUDA_GEMV_QROWS: rows a warp of the quantized ones (variant 2), -1 auto */
    int attn_variant;            /* decode attention: 3 tensor cores (default), TELA_CUDA_ATTN=2|1 the earlier kernels */
    int attn_short;              /* decode attention unsplit up to this length bucket (256; TELA_CUDA_ATTN_SHORT) */
    int gemv_f_rows;             /* TELA_CUDA_GEMV_ROWS: rows a warp of the float decode products, -1 auto */
    int gemv_early;              /* decode products with early loads (default; TELA_CUDA_GEMV_EARLY=0: not) */
    bool gemv_early_nt;          /* ... the quantized ones of 2-8 tokens too (default; TELA_CUDA_GEMV_EARLY_NT=0: not) */
    bool gemv_split_sw;          /* the SwiGLU pair's rows of two or more rounds over two warps
                                    (TELA_CUDA_GEMV_SPLIT_SW=1; cuda_matvec.cu gemv3_split) */
    bool gemv_split_waves;       /* TELA_CUDA_GEMV_SPLIT_WAVES=1: the products' split by round 11's count of waves */
    bool gemv_persist;           /* TELA_CUDA_GEMV_PERSIST=1: one-token products of more rows than a wave holds
                                    in resident warps that take rows in turns (gemv3p_q_kernel) */
    int gemv_order;              /* TELA_CUDA_GEMV_ORDER: early loads' order against the PDL wait (cuda_matvec.cu) */
    int gemv_depth;              /* TELA_CUDA_GEMV_DEPTH=1|2: rounds of loads in flight of the quantized ones, 0 auto */
    int gemv_d4;                 /* four rounds of loads in flight where a warp's row takes 3 or more (gemv3_depth):
                                    1 where the grid fits one wave (default), TELA_CUDA_GEMV_D4=2 wherever, =0 never */
    int gemv_split;              /* TELA_CUDA_GEMV_SPLIT=1|2: warps a row of the quantized ones with early loads, 0 auto */
    int gemv_wpr;                /* TELA_CUDA_GEMV_WPR=1|2|4: warps a row of gemv_fs_kernel (TELA_CUDA_GEMV_FX=0), 0 auto */
    int gemv_fx_nw, gemv_fx_wpr, gemv_fx_u; /* one-token float products with x staged in shared memory
                                    (gemv_fx_kernel): 0 its shape by rule (default), -1 not (TELA_CUDA_GEMV_FX=0: the
                                    kernel before it), else TELA_CUDA_GEMV_FX=NW:WPR:U */
    bool gemv_fm;                /* float decode products of 2-8 tokens on the tensor cores (default on sm_80 and newer;
                                    TELA_CUDA_GEMV_FM=0: the earlier kernels, and cuBLAS from 3 tokens) */
    bool gemv_fm_one;            /* ... of one token too (TELA_CUDA_GEMV_FM=1: every step's bits those of a verification
                                    pass, one-token products ~35% slower on the H200) */
    bool gemv_frn;               /* float products of 2-8 tokens with the heads' 4-rows-a-warp kernel, the bits of its
                                    one-token form (default; TELA_CUDA_GEMV_FRN=0: the tensor-core kernel) */
    int fm_slices, fm_rb;        /* TELA_CUDA_FM_SLICES=1|2|4|8, TELA_CUDA_FM_RB=1|2|4: their shape, 0 auto */
    int gdn_lanes;               /* TELA_CUDA_GDN_LANES=4|8: lanes a column of the delta-rule scan, 0 auto */
    bool pdl;                    /* programmatic dependent launches (sm_90 and newer; TELA_CUDA_PDL=0: off) */
    bool after_copy;             /* the last operation queued was a copy or a memset, not a kernel */
    bool gdn_step;               /* fused decode steps of the delta rule (default; TELA_CUDA_GDN_STEP=0: off) */
    /* Activations quantized by the kernel that writes them, for the one-token
     * quantized product right after it (tela_exec_next_input_of; cuda_act.cuh):
     * the hint until the next launch, then what the producer quantized until
     * the launch after it. preq: which kernels do (TELA_CUDA_PREQ): 0 none
     * (each product quantizes), 1 the decode attention, 2 also the output
     * gate and the delta rule's step. */
    int preq;
    const tela_mat *preq_hint;
    const float *preq_x;
    int64_t preq_k;
    int preq_type;
    uint64_t launches;           /* kernels launched (tela_exec_kernel_launches) */
    uint64_t ordered_at;         /* launches after the last launch of an ordered kernel (tela_cuda_after_ordered) */
    bool norm_rope;              /* Qwen3.5's q/k head norms inside the RoPE and store (default; TELA_CUDA_NORM_ROPE=0:
                                    two rmsnorm launches before it) */
    bool early_state;            /* the conv and the delta rule's step read their states before their PDL wait where
                                    that is safe (default; TELA_CUDA_EARLY_STATE=0: not) */
    int float_gemm_min;          /* float weights: cuBLAS from this many tokens on (3; TELA_CUDA_FLOAT_GEMM=N, 9: never below the prefill's) */
    int64_t float_gemm_bytes;    /* ... for matrices of at least this many bytes (4 MiB; TELA_CUDA_FLOAT_GEMM_BYTES) */
    void *pinned;                /* host staging for downloads */
    size_t pinned_bytes;
    void *ring;                  /* pinned staging for small uploads */
    size_t ring_used;
    bool debug;                  /* TELA_CUDA_DEBUG=1: say what is captured */
    cudaEvent_t *ev;             /* profiling marks */
    int n_ev, cap_ev;
    bool graphs_before;          /* graphs setting while profiling (off) */
    tela_status failed;          /* first failure of a void operation */
    bool graphs;                 /* capture decode steps (TELA_CUDA_GRAPHS=0 turns it off) */
    cuda_graph_slot slots[TELA_CUDA_MAX_GRAPHS];
    int n_slots;
    int cur;                     /* the slot of the step between graph_begin and graph_end, or -1 */
    int mode;                    /* of that step: 0 eager, 1 capturing, 2 replay */
    /* the paging of the last batched step (pg_serial: its tela_batch.serial) */
    cuda_paging pg;
    uint64_t pg_serial;
    int32_t *pg_dev, *pg_host;   /* [rows][tok_tbl][flat] */
    size_t pg_dev_cap, pg_host_cap;
    int32_t *pg_seq_tbl;
    int pg_seq_cap;
    cudaEvent_t join_ev;         /* recorded where another exec waits for this one (cuda_ranks.cu) */
} cuda_exec;

typedef struct cuda_kv {
    tela_kv_cache head;
    size_t elt;                  /* bytes per element (4 or 2) */
    /* layer l, head h, position (or paged row) p, dim i at k + ((l * n_kv_head + h) * n_ctx + p) * k_dim + i */
    void *k, *v;
} cuda_kv;

/* Programmatic dependent launch (Hopper and newer): every kernel is
 * launched allowed to start while the kernel before it in the stream is
 * still running (the launch and block scheduling of one overlap the tail
 * of the other, which in a decode step of a few hundred short kernels is
 * a large part of the time). So every kernel begins with TELA_PDL_ENTRY:
 * it lets the next kernel launch, then waits until the one before has
 * finished and its writes are visible, before touching any memory. On
 * older GPUs, or launched without the attribute, both are no-ops.
 * TELA_CUDA_PDL=0 launches without it. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TELA_PDL_ENTRY() asm volatile("griddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;" ::: "memory")
#define TELA_PDL_WAIT_THEN_LAUNCH() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#define TELA_PDL_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define TELA_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define TELA_PDL_LAUNCH() ((void)0)
#define TELA_PDL_WAIT() ((void)0)
#define TELA_PDL_ENTRY() ((void)0)
#define TELA_PDL_WAIT_THEN_LAUNCH() ((void)0)
#endif
/* The decode products (cuda_matvec.cu, "early loads") instead issue their
 * first weight loads, which no kernel writes, into registers before the
 * wait, so the fetch from memory overlaps the end of the kernel before;
 * they let the next kernel launch only after their own wait, so that
 * launches run at most one product ahead (a cascade of early launches,
 * each fetching, is what made the L2 prefetch of session 5 slower). */

/* Records the first failure on the exec (a CUDA error naming what failed)
 * and returns false; true when err is cudaSuccess. */
bool tela_cuda_check(cuda_exec *ex, cudaError_t err, const char *what);
/* The same for the launch just made (cudaGetLastError). */
bool tela_cuda_launched(cuda_exec *ex, const char *what);
/* At least `bytes` of scratch (256-byte aligned), NULL after recording a
 * failure (also when it would have to grow while a graph is captured).
 * aux: a second buffer, for results that must outlive the operations
 * using the scratch. (cuda_util.cu) */
void *tela_cuda_scratch(cuda_exec *ex, size_t bytes);
void *tela_cuda_aux(cuda_exec *ex, size_t bytes);
void *tela_cuda_act(cuda_exec *ex, size_t bytes);
/* Several execs, one a rank (cuda_ranks.cu): backend.h "Several execs". */
void tela_cuda_activate(tela_exec *ex);
void tela_cuda_wait_for(tela_exec *ex, tela_exec *other);
void tela_cuda_copy_from(tela_exec *ex, void *dst, size_t dst_pitch, tela_exec *other, const void *src,
                         size_t src_pitch, size_t width, size_t rows);
tela_status tela_cuda_comm_create(tela_exec *const *ex, int n, void **comm, const char **transport);
void tela_cuda_comm_free(void *comm, int n);
void tela_cuda_comm_allreduce(void *comm, tela_exec *const *ex, float *const *bufs, int64_t n);

/* Destroys the captured graphs (they are captured again on next use). */
void tela_cuda_drop_graphs(cuda_exec *ex);

/* Launches kernel<<<grid, block, smem, ex->stream>>>(args...), with the
 * programmatic-dependent-launch attribute when the exec uses it (ex->pdl).
 * Errors are read by tela_cuda_launched, as for <<<>>>. */
template <typename... P, typename... A>
static inline void tela_cuda_launch(cuda_exec *ex, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                    A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ex->stream;
    cudaLaunchAttribute attr[1];
    /* a kernel right after a copy is launched in plain stream order: the
     * early start is meant against the kernel before (test_cuda_gdn read a
     * state that a pageable upload had not yet written, 2 times in 11 runs
     * on fresh H200 machines, when its kernel took the attribute) */
    if (ex->pdl && !ex->after_copy) {
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<A &&>(args)...);
    ex->after_copy = false;
    ex->launches++;
    ex->preq_hint = NULL; /* a hint is for the next launch only, and quantized activations are */
    ex->preq_x = NULL;    /* read by the launch after their producer's (cuda_act.cuh) */
}

/* Ordered kernels. A kernel that lets the next one launch only after its
 * own PDL wait (the decode products with early loads, order 1) is
 * "ordered": when the kernel after it starts, every kernel queued before
 * the ordered one has finished. So that next kernel may read before its
 * own wait whatever only those earlier kernels write (the conv and
 * recurrent states, which no product writes), overlapping the fetch with
 * the ordered kernel's work. The launcher of an ordered kernel marks it
 * right after its launch; the launcher of the next asks whether the
 * operation queued last was one (a copy, a cuBLAS call or another launch
 * in between says no). */
static inline void tela_cuda_mark_ordered(cuda_exec *ex) { ex->ordered_at = ex->launches; }
static inline bool tela_cuda_after_ordered(const cuda_exec *ex) {
    return ex->early_state && ex->launches > 0 && ex->ordered_at == ex->launches && !ex->after_copy;
}

/* One token's activations quantized for a product (cuda_act.cuh): xq NULL
 * when none are asked for; lt the product's weight type (their layout), K
 * their count. */
typedef struct preq_out {
    int8_t *xq;
    float *xd, *xs;
    int lt, K;
} preq_out;

/* ---- launchers (cuda_matvec.cu) ---- */

/* Products y[t] (+)= W x[t] for t < n_tok, n_tok <= TELA_CUDA_GEMV_MAX_TOK,
 * weights in the GPU layout; x is quantized to 8 bits per 32 (quantized
 * types) inside the kernel. With w_up: y[t] = silu(W x[t]) * (W_up x[t])
 * (same type and shape). */
#define TELA_CUDA_GEMV_MAX_TOK 8
/* captured steps take the decode attention (sized by the length bucket) */
static_assert(TELA_GRAPH_MAX_TOK <= TELA_CUDA_GEMV_MAX_TOK, "captured steps must not take the flash prefill path");
#define TELA_CUDA_GEMV_MAX_W 4
/* y[i] (+)= W[i] x for n_w <= TELA_CUDA_GEMV_MAX_W matrices of one type
 * and width in one launch (a Gated DeltaNet layer's four input
 * projections); norm_w != NULL: of rmsnorm(x) * norm_w instead (the norm done in
 * each block). gemv_ok: whether a kernel takes this type and width. */
bool tela_cuda_gemv_ok(cuda_exec *ex, const tela_mat *w, int n_tok);
void tela_cuda_gemv(cuda_exec *ex, const tela_mat *const *w, float *const *y, const int64_t *y_stride, int n_w,
                    const tela_mat *w_up, const float *x, int64_t x_stride, int n_tok, bool accumulate,
                    const float *norm_w, float eps);
/* Where a producer kernel writes one token's quantized activations for the
 * product the hint names (cuda_act.cuh): fills *o and returns true when the
 * hint is a quantized matrix of width K that the decode products take;
 * false (o->xq NULL) otherwise. After its launch the producer calls
 * tela_cuda_preq_done with the activations' f32 address. */
bool tela_cuda_preq_begin(cuda_exec *ex, int level, int64_t K, preq_out *o);
void tela_cuda_preq_done(cuda_exec *ex, const float *x, const preq_out *o);
/* The exact mode: f32 activations and accumulation, any n_tok. */
void tela_cuda_matmul_exact(cuda_exec *ex, const tela_mat *w, const float *x, int64_t x_stride, float *y,
                            int64_t y_stride, int n_tok, bool accumulate);
/* Large batches: dequantize W to f16 (bf16 for BF16 weights) panel by panel,
 * x to the same type, and multiply with cuBLAS (f32 accumulation). */
void tela_cuda_matmul_gemm(cuda_exec *ex, const tela_mat *w, const float *x, int64_t x_stride, float *y,
                           int64_t y_stride, int n_tok, bool accumulate, const void *xh);
/* x converted once for the gemms of several matrices of one class (f16,
 * bf16; f32 takes x as it is) into the start of the scratch, with room
 * after it for their dequantized panels; NULL after recording a failure.
 * Pass it as xh to tela_cuda_matmul_gemm (NULL there: converted inside). */
const void *tela_cuda_gemm_input(cuda_exec *ex, const tela_mat *const *w, int n_w, const float *x, int64_t x_stride,
                                 int n_tok);
void tela_cuda_get_rows(cuda_exec *ex, const tela_mat *w, int64_t row0, bool accumulate, const int32_t *ids, int n,
                        float *out, int64_t out_stride);

/* ---- launchers (cuda_elementwise.cu) ---- */
void tela_cuda_rmsnorm(cuda_exec *ex, float *out, int64_t out_stride, const float *x, int64_t x_stride, const float *w,
                       int64_t n, int n_rows, float eps);
void tela_cuda_add(cuda_exec *ex, float *y, const float *x, int64_t n);
void tela_cuda_swiglu(cuda_exec *ex, float *gate, int64_t gate_stride, const float *up, int64_t up_stride,
                      int64_t n, int n_rows);
void tela_cuda_rope_table(cuda_exec *ex, float *cs, const int32_t *pos, int n_tok, const double *inv_freq, int n_rot);
void tela_cuda_rope(cuda_exec *ex, float *x, int64_t x_stride, int n_tok, int n_heads, int head_dim, int n_rot,
                    const float *cs, tela_rope_mode mode);
void tela_cuda_argmax(cuda_exec *ex, const float *x, int64_t n, int n_rows, int32_t *out);
/* tela_exec_copy_spans: one kernel for up to 64 spans a launch. */
void tela_cuda_copy_spans(cuda_exec *ex, const tela_copy_span *spans, int n);
void tela_cuda_kv_store(cuda_exec *ex, cuda_kv *kv, int layer, const float *k, int64_t k_stride, const float *v,
                        int64_t v_stride, const int32_t *pos, int n_tok);
/* RoPE on q in place, RoPE on k into the cache, v into the cache: one
 * kernel; with norms (Qwen3.5's head norms) q's and k's heads normalized
 * first, in the same kernel where the head size allows. */
void tela_cuda_rope_store(cuda_exec *ex, cuda_kv *kv, int layer, float *q, int64_t q_stride, int n_head,
                          float *k, int64_t k_stride, const float *v, int64_t v_stride, const int32_t *pos,
                          int n_tok, const float *cs, int n_rot, tela_rope_mode mode, const tela_head_norms *norms);

/* ---- launchers (cuda_gdn.cu): backend.h's Gated DeltaNet operations ---- */
void tela_cuda_sigmoid_gate(cuda_exec *ex, float *out, int64_t out_stride, const float *gate, int64_t gate_stride,
                            int n_rows, int n);
void tela_cuda_conv1d_silu(cuda_exec *ex, const float *x, int64_t x_stride, int n_tok, int channels, int kernel,
                           const float *w, float *state, float *out, int64_t out_stride);
void tela_cuda_gdn_gates(cuda_exec *ex, float *qkv, int64_t qkv_stride, int n_qk_heads, int dk, float *beta, float *g,
                         int nv, int n_tok, const float *a, const float *dt_bias, float eps);
void tela_cuda_gdn_delta(cuda_exec *ex, const tela_gdn_args *a);

/* ---- launchers (cuda_attention.cu) ---- */
/* bucket_len: the upper bound of the context length this launch may see
 * (the decode graphs' length bucket), which fixes the split count. */
/* pg: NULL, or the batched step's paging of a paged cache. */
void tela_cuda_attention(cuda_exec *ex, const cuda_kv *kv, int layer, const float *q, int64_t q_stride, float *out,
                         int64_t out_stride, const int32_t *pos, int n_tok, int32_t pos0, int n_head, float scale,
                         int32_t bucket_len, const cuda_paging *pg);
/* The decode graphs' length buckets: steps with n_kv in one bucket share
 * one captured graph (tela_exec_length_bucket). */
uint32_t tela_cuda_length_bucket(int32_t n_kv);
int32_t tela_cuda_bucket_len(uint32_t bucket);

#endif
