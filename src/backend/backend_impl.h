/* backend_impl.h: what a backend implements behind backend.h: the table of
 * its functions and the common head of its objects. Included only by
 * backend.c (the dispatch) and by the backends (cpu/, cuda/), never by the
 * layers above. Each backend's structs begin with the head struct below,
 * so a pointer to one is a pointer to the other. */
#ifndef TELA_BACKEND_BACKEND_IMPL_H
#define TELA_BACKEND_BACKEND_IMPL_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tela_backend_ops {
    void (*destroy)(tela_backend *be);
    tela_status (*mem_info)(tela_backend *be, size_t *free_bytes, size_t *total_bytes);
    bool (*type_supported)(const tela_backend *be, tela_type type);
    tela_status (*prepare_mats)(tela_backend *be, tela_mat *const *mats, const tela_mat_use *uses, size_t n,
                                int verbose);
    size_t (*mats_bytes)(const tela_backend *be, tela_mat *const *mats, size_t n);
    tela_status (*alloc)(tela_backend *be, size_t bytes, const char *what, void **out);
    void (*free_mem)(tela_backend *be, void *p);
    tela_status (*make_const)(tela_backend *be, const void *host, size_t bytes, const void **out);
    /* host memory for downloads (NULL, NULL: calloc and free) */
    void *(*host_alloc)(tela_backend *be, size_t bytes);
    void (*host_free)(tela_backend *be, void *p);

    tela_status (*exec_create)(tela_backend *be, int n_threads, tela_exec **out);
    void (*exec_free)(tela_exec *ex);
    int (*preferred_batch)(const tela_exec *ex);
    tela_status (*sync)(tela_exec *ex);
    tela_status (*upload)(tela_exec *ex, void *dst, const void *src, size_t bytes);
    tela_status (*download)(tela_exec *ex, void *dst, const void *src, size_t bytes);
    bool (*graph_begin)(tela_exec *ex, uint64_t key);
    tela_status (*graph_end)(tela_exec *ex);
    uint32_t (*length_bucket)(const tela_exec *ex, int32_t n_kv);
    void (*graphs_drop)(tela_exec *ex); /* NULL: no graphs */

    /* rows ids[t] - row0 of w where they fall in it; the others zero (or,
     * with accumulate, left as they are) */
    void (*get_rows)(tela_exec *ex, const tela_mat *w, int64_t row0, bool accumulate, const int32_t *ids, int n,
                     float *out, int64_t out_stride);
    void (*rmsnorm)(tela_exec *ex, float *out, int64_t out_stride, const float *x, int64_t x_stride, const float *w,
                    int64_t n, int n_rows, float eps);
    /* norm: NULL, or the RMSNorm in front (tela_norm_in) */
    void (*matmul_many)(tela_exec *ex, const tela_norm_in *norm, const tela_matmul_target *t, int n, const float *x,
                        int64_t x_stride, int n_tok, bool accumulate);
    void (*matmul_swiglu)(tela_exec *ex, const tela_norm_in *norm, const tela_mat *w_gate, const tela_mat *w_up,
                          const float *x, int64_t x_stride, float *out, int64_t out_stride, int n_tok);
    void (*add)(tela_exec *ex, float *y, const float *x, int64_t n);
    void (*rope_table)(tela_exec *ex, float *cs, const tela_batch *b, const double *inv_freq, int n_rot);
    void (*rope)(tela_exec *ex, float *x, int64_t x_stride, int n_tok, int n_heads, int head_dim, int n_rot,
                 const float *cs, tela_rope_mode mode);
    void (*argmax)(tela_exec *ex, const float *x, int64_t n, int n_rows, int32_t *out);
    void (*copy_rows)(tela_exec *ex, float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                      const int32_t *rows, int n, int64_t width);
    void (*copy_spans)(tela_exec *ex, const tela_copy_span *spans, int n);

    tela_status (*kv_create)(tela_exec *ex, const tela_kv_shape *shape, tela_kv_cache **out);
    void (*kv_free)(tela_kv_cache *kv);
    void (*kv_clear)(tela_exec *ex, tela_kv_cache *kv);
    size_t (*kv_image_bytes)(const tela_kv_cache *kv, int32_t n_past);
    tela_status (*kv_save)(tela_exec *ex, const tela_kv_cache *kv, int32_t n_past, void *dst);
    tela_status (*kv_load)(tela_exec *ex, tela_kv_cache *kv, int32_t n_past, const void *src);
    /* paged caches (block_size > 0); NULL: the backend has none */
    tela_status (*kv_copy_rows)(tela_exec *ex, tela_kv_cache *kv, int32_t dst, int32_t src, int32_t n);
    void (*kv_store)(tela_exec *ex, tela_kv_cache *kv, int layer, const float *k, int64_t k_stride, const float *v,
                     int64_t v_stride, const tela_batch *b);
    /* norms: NULL, or the head norms to apply first (tela_exec_norm_rope_store) */
    void (*rope_store)(tela_exec *ex, tela_kv_cache *kv, int layer, float *q, int64_t q_stride, int n_head, float *k,
                       int64_t k_stride, const float *v, int64_t v_stride, const tela_batch *b, const float *cs,
                       int n_rot, tela_rope_mode mode, const tela_head_norms *norms);
    void (*attention)(tela_exec *ex, const tela_kv_cache *kv, int layer, const float *q, int64_t q_stride,
                      float *out, int64_t out_stride, const tela_batch *b, int n_head, float scale);

    /* Gated DeltaNet layers (Qwen3.5) */
    void (*zero)(tela_exec *ex, void *p, size_t bytes);
    void (*sigmoid_gate)(tela_exec *ex, float *out, int64_t out_stride, const float *gate, int64_t gate_stride,
                         int n_rows, int n);
    void (*conv1d_silu)(tela_exec *ex, const float *x, int64_t x_stride, int n_tok, int channels, int kernel,
                        const float *w, float *state, float *out, int64_t out_stride);
    void (*gdn_gates)(tela_exec *ex, float *qkv, int64_t qkv_stride, int n_qk_heads, int dk, float *beta, float *g,
                      int nv, int n_tok, const float *a, const float *dt_bias, float eps);
    void (*gdn_delta)(tela_exec *ex, const tela_gdn_args *a);

    /* profiling marks (backend/profile.c): a mark now in the exec's order
     * of work (its index, or -1), the seconds between two marks once the
     * exec has synchronized, forgetting the marks, and the mode (a GPU runs
     * steps eagerly while profiling) */
    int (*prof_mark)(tela_exec *ex);
    double (*prof_seconds)(tela_exec *ex, int a, int b);
    void (*prof_clear)(tela_exec *ex);
    void (*prof_mode)(tela_exec *ex, bool on);

    /* Several execs (tensor parallelism, backend.h "Several execs").
     * activate: makes the calling thread issue to ex's device (NULL: no
     * such state); backend.c calls it when a thread moves from one exec to
     * another. wait_for: ex's later operations after other's earlier ones
     * (NULL: operations are complete when issued). copy_from: a 2-D copy
     * into ex's memory from other's. comm_create: the backend's collective
     * over these execs (NCCL), *comm NULL where it has none for them (the
     * group then sums with copy_from and add); NULL: never one. */
    void (*activate)(tela_exec *ex);
    void (*wait_for)(tela_exec *ex, tela_exec *other);
    void (*copy_from)(tela_exec *ex, void *dst, size_t dst_pitch, tela_exec *other, const void *src, size_t src_pitch,
                      size_t width, size_t rows);
    tela_status (*comm_create)(tela_exec *const *ex, int n, void **comm, const char **transport);
    void (*comm_free)(void *comm, int n);
    void (*comm_allreduce)(void *comm, tela_exec *const *ex, float *const *bufs, int64_t n);

    /* backend.h tela_exec_next_input_of (NULL: the hint is ignored) */
    void (*next_input_of)(tela_exec *ex, const tela_mat *w);
    uint64_t (*kernel_launches)(const tela_exec *ex); /* NULL: none */
};

typedef struct tela_prof tela_prof;

struct tela_backend {
    const tela_backend_ops *ops;
    tela_backend_kind kind;
    bool host_visible;
    int n_threads;
    int preferred_batch;         /* tokens per step of a long prefill */
    char description[192];
};

struct tela_exec {
    const tela_backend_ops *ops;
    tela_backend *be;
    tela_prof *prof;             /* NULL unless profiling */
};

/* The profiler's side of the operations (backend/profile.c): a mark before
 * an operation (-1 when not profiling), the row after it (op: its name;
 * matmuls take the phase's name; wtype: a tela_type or -1; bytes and flops
 * of a matmul, else 0), and the marks turned into seconds after a sync. */
int tela_prof_begin(tela_exec *ex);
void tela_prof_end(tela_exec *ex, int mark, const char *op, bool is_matmul, int wtype, double bytes, double flops);
void tela_prof_resolve(tela_exec *ex);

struct tela_kv_cache {
    const tela_backend_ops *ops;
    tela_kv_shape shape;
};

/* The backends' constructors (backend/cpu/backend_cpu.c,
 * backend/cuda/cuda_backend.cu). device: the GPU index. */
tela_status tela_backend_cpu_create(int n_threads, tela_backend **out);
#ifdef TELA_HAVE_CUDA
tela_status tela_backend_cuda_create(int device, int n_threads, tela_backend **out);
int tela_backend_cuda_count(void);
#endif

#ifdef __cplusplus
}
#endif
#endif
