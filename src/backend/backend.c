/* backend.c: choosing a backend from a device string, and the calls of
 * backend.h, each handed to the backend that owns the object. */
#include "backend/backend_impl.h"
#include "quant/quant.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool tela_backend_cuda_built(void) {
#ifdef TELA_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int tela_backend_cuda_device_count(void) {
#ifdef TELA_HAVE_CUDA
    return tela_backend_cuda_count();
#else
    return 0;
#endif
}

/* A type the reference dequantizer knows (every backend computes on a
 * subset; tela_backend_type_supported says which). */
static bool mat_type_known(tela_type type) {
    if (type == TELA_TYPE_F32 || type == TELA_TYPE_F16 || type == TELA_TYPE_BF16) return true;
    const tela_type_traits *tr = tela_type_get_traits(type);
    return tr && tr->can_dequantize;
}

/* Row bytes for the plain float types without the quant layer (which also
 * handles them; this keeps those paths independent of it). */
static size_t row_bytes(tela_type type, int64_t n) {
    switch (type) {
    case TELA_TYPE_F32: return (size_t)n * 4;
    case TELA_TYPE_F16:
    case TELA_TYPE_BF16: return (size_t)n * 2;
    default: return tela_type_row_bytes(type, n);
    }
}

tela_status tela_mat_from_tensor(const tela_tensor *t, tela_mat *out) {
    memset(out, 0, sizeof *out);
    if (!mat_type_known(t->type)) {
        const tela_type_traits *tr = tela_type_get_traits(t->type);
        return tela_errorf(TELA_ERR_UNSUPPORTED, "tensor '%s': type %s (%d) cannot be computed on", t->name,
                           tr ? tr->name : "unknown", (int)t->type);
    }
    if (t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] <= 0 || t->ne[1] <= 0)
        return tela_errorf(TELA_ERR_FORMAT, "tensor '%s': expected a 2-D matrix, found shape [%lld, %lld, %lld, %lld]",
                           t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                           (long long)t->ne[3]);
    size_t rb = row_bytes(t->type, t->ne[0]);
    if (rb == 0)
        return tela_errorf(TELA_ERR_FORMAT, "tensor '%s': a row of %lld elements is not a whole number of blocks",
                           t->name, (long long)t->ne[0]);
    if ((uint64_t)t->ne[1] > SIZE_MAX / rb || rb * (size_t)t->ne[1] != t->nbytes || !t->data)
        return tela_errorf(TELA_ERR_FORMAT, "tensor '%s': %zu bytes of data for %lld rows of %zu bytes", t->name,
                           t->nbytes, (long long)t->ne[1], rb);
    out->name = t->name;
    out->type = t->type;
    out->data = t->data;
    out->n_rows = t->ne[1];
    out->n_cols = t->ne[0];
    out->row_bytes = rb;
    return TELA_OK;
}

/* "cuda" -> 0, "cuda:3" -> 3; -1 when the string is not of that form. */
static int cuda_index(const char *device) {
    if (strncmp(device, "cuda", 4) != 0) return -1;
    if (device[4] == '\0') return 0;
    if (device[4] != ':' || device[5] < '0' || device[5] > '9') return -1;
    char *end = NULL;
    long v = strtol(device + 5, &end, 10);
    if (*end != '\0' || v < 0 || v > 1024) return -1;
    return (int)v;
}

/* The exec this thread last issued to. A backend whose execs may be on
 * different devices (several GPUs driven by one thread: tensor
 * parallelism) makes an exec's device current when a thread moves to it;
 * the backend-level calls (allocations, uploads of weights) may change the
 * current device, so they forget it. */
static _Thread_local const tela_exec *active_exec;

static inline void activate(tela_exec *ex) {
    if (ex != active_exec) {
        active_exec = ex;
        if (ex->ops->activate) ex->ops->activate(ex);
    }
}

static inline void forget_active(void) { active_exec = NULL; }

/* An operation, timed when the exec is profiled (one pointer test when not). */
#define PROF_OP(ex, call, op, mm, wt, by, fl)                            \
    do {                                                                 \
        activate(ex);                                                    \
        const int pm_ = (ex)->prof ? tela_prof_begin(ex) : -1;          \
        call;                                                            \
        if (pm_ >= 0) tela_prof_end(ex, pm_, op, mm, wt, by, fl);        \
    } while (0)

/* Weight bytes and FLOPs of products with n_tok rows. */
static double mat_bytes(const tela_mat *w) { return (double)w->n_rows * (double)w->row_bytes; }
static double mat_flops(const tela_mat *w, int n_tok) { return 2.0 * (double)w->n_rows * (double)w->n_cols * n_tok; }

tela_status tela_backend_create(const char *device, int n_threads, tela_backend **out) {
    *out = NULL;
    if (!device || !device[0] || !strcmp(device, "auto")) {
        if (tela_backend_cuda_device_count() > 0) {
#ifdef TELA_HAVE_CUDA
            return tela_backend_cuda_create(0, n_threads, out);
#endif
        }
        return tela_backend_cpu_create(n_threads, out);
    }
    if (!strcmp(device, "cpu")) return tela_backend_cpu_create(n_threads, out);
    int idx = cuda_index(device);
    if (idx < 0)
        return tela_errorf(TELA_ERR_ARG, "device '%s' is not one of cpu, cuda, cuda:N", device);
    if (!tela_backend_cuda_built())
        return tela_errorf(TELA_ERR_UNSUPPORTED,
                           "device '%s': this tela was built without CUDA (configure with -DTELA_CUDA=ON on a "
                           "machine with the CUDA toolkit), so only the CPU is available",
                           device);
    int count = tela_backend_cuda_device_count();
    if (count == 0)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "device '%s': no CUDA GPU is available (no driver or no device)",
                           device);
    if (idx >= count)
        return tela_errorf(TELA_ERR_ARG, "device '%s': there %s only %d CUDA GPU%s (cuda:0%s)", device,
                           count == 1 ? "is" : "are", count, count == 1 ? "" : "s", count == 1 ? "" : " ..");
#ifdef TELA_HAVE_CUDA
    return tela_backend_cuda_create(idx, n_threads, out);
#else
    return TELA_ERR_INTERNAL;
#endif
}

void tela_backend_free(tela_backend *be) {
    if (be) be->ops->destroy(be);
}

tela_backend_kind tela_backend_get_kind(const tela_backend *be) { return be->kind; }
const char *tela_backend_description(const tela_backend *be) { return be->description; }
int tela_backend_preferred_batch(const tela_backend *be) { return be->preferred_batch; }

tela_status tela_backend_mem_info(tela_backend *be, size_t *free_bytes, size_t *total_bytes) {
    forget_active();
    return be->ops->mem_info(be, free_bytes, total_bytes);
}

bool tela_backend_type_supported(const tela_backend *be, tela_type type) { return be->ops->type_supported(be, type); }

tela_status tela_backend_prepare_mats(tela_backend *be, tela_mat *const *mats, const tela_mat_use *uses, size_t n,
                                      int verbose) {
    forget_active();
    return be->ops->prepare_mats(be, mats, uses, n, verbose);
}

size_t tela_backend_mats_bytes(const tela_backend *be, tela_mat *const *mats, size_t n) {
    return be->ops->mats_bytes(be, mats, n);
}

tela_status tela_backend_alloc(tela_backend *be, size_t bytes, const char *what, void **out) {
    forget_active();
    return be->ops->alloc(be, bytes, what, out);
}

void tela_backend_free_mem(tela_backend *be, void *p) {
    forget_active();
    if (p) be->ops->free_mem(be, p);
}

void *tela_backend_host_alloc(tela_backend *be, size_t bytes) {
    if (!be->ops->host_alloc) return calloc(1, bytes ? bytes : 1);
    return be->ops->host_alloc(be, bytes);
}

void tela_backend_host_free(tela_backend *be, void *p) {
    if (!p) return;
    if (!be->ops->host_free) free(p);
    else be->ops->host_free(be, p);
}

tela_status tela_backend_const(tela_backend *be, const void *host, size_t bytes, const void **out) {
    *out = NULL;
    if (!host) return TELA_OK;
    forget_active();
    return be->ops->make_const(be, host, bytes, out);
}

tela_status tela_exec_create(tela_backend *be, int n_threads, tela_exec **out) {
    forget_active();
    return be->ops->exec_create(be, n_threads, out);
}

void tela_exec_free(tela_exec *ex) {
    if (!ex) return;
    tela_exec_profile_stop(ex);
    forget_active();
    ex->ops->exec_free(ex);
}

tela_backend *tela_exec_backend(const tela_exec *ex) { return ex->be; }
bool tela_exec_host_visible(const tela_exec *ex) { return ex->be->host_visible; }
int tela_exec_preferred_batch(const tela_exec *ex) { return ex->ops->preferred_batch(ex); }
tela_status tela_exec_sync(tela_exec *ex) {
    activate(ex);
    tela_status s = ex->ops->sync(ex);
    if (ex->prof) tela_prof_resolve(ex);
    return s;
}

tela_status tela_exec_upload(tela_exec *ex, void *dst, const void *host_src, size_t bytes) {
    activate(ex);
    return bytes ? ex->ops->upload(ex, dst, host_src, bytes) : TELA_OK;
}

tela_status tela_exec_download(tela_exec *ex, void *host_dst, const void *src, size_t bytes) {
    activate(ex);
    tela_status s = ex->ops->download(ex, host_dst, src, bytes);
    if (ex->prof) tela_prof_resolve(ex);
    return s;
}

bool tela_exec_graph_begin(tela_exec *ex, uint64_t key) {
    activate(ex);
    return ex->ops->graph_begin(ex, key);
}

tela_status tela_exec_graph_end(tela_exec *ex) {
    activate(ex);
    return ex->ops->graph_end(ex);
}

uint32_t tela_exec_length_bucket(const tela_exec *ex, int32_t n_kv) { return ex->ops->length_bucket(ex, n_kv); }
void tela_exec_next_input_of(tela_exec *ex, const tela_mat *w) {
    if (ex->ops->next_input_of) ex->ops->next_input_of(ex, w);
}

uint64_t tela_exec_kernel_launches(const tela_exec *ex) {
    return ex->ops->kernel_launches ? ex->ops->kernel_launches(ex) : 0;
}

void tela_exec_graphs_drop(tela_exec *ex) {
    activate(ex);
    if (ex->ops->graphs_drop) ex->ops->graphs_drop(ex);
}

tela_status tela_exec_set_batch(tela_exec *ex, tela_batch *batch, int32_t *tok_mem, int32_t *pos_mem,
                                const int32_t *tokens, int n, int32_t pos0) {
    int32_t buf[256];
    if (!pos_mem && n <= 128) { /* ids then positions in tok_mem: a decode step's inputs in one copy */
        memcpy(buf, tokens, (size_t)n * sizeof(int32_t));
        for (int i = 0; i < n; i++) buf[n + i] = pos0 + i;
        TELA_TRY(tela_exec_upload(ex, tok_mem, buf, (size_t)2 * (size_t)n * sizeof(int32_t)));
        pos_mem = tok_mem + n;
    } else {
        if (!pos_mem) pos_mem = tok_mem + n;
        for (int done = 0; done < n;) { /* positions in chunks through the small host buffer */
            int k = n - done < 256 ? n - done : 256;
            for (int i = 0; i < k; i++) buf[i] = pos0 + done + i;
            TELA_TRY(tela_exec_upload(ex, pos_mem + done, buf, (size_t)k * sizeof(int32_t)));
            done += k;
        }
        TELA_TRY(tela_exec_upload(ex, tok_mem, tokens, (size_t)n * sizeof(int32_t)));
    }
    batch->n_tok = n;
    batch->pos0 = pos0;
    batch->tokens = tok_mem;
    batch->pos = pos_mem;
    batch->n_seq = 1;
    batch->seqs = NULL;
    batch->serial = 0;
    return TELA_OK;
}

tela_status tela_exec_set_batch_seqs(tela_exec *ex, tela_batch *batch, int32_t *tok_mem, int32_t *pos_mem,
                                     const int32_t *tokens, const tela_batch_seq *seqs, int n_seq) {
    int32_t buf[256];
    int n = 0, k = 0;
    for (int i = 0; i < n_seq; i++) {
        if (seqs[i].tok0 != n)
            return tela_errorf(TELA_ERR_INTERNAL, "batched step: sequence %d starts at token %d, not %d", i,
                               seqs[i].tok0, n);
        for (int t = 0; t < seqs[i].n_tok; t++) {
            buf[k++] = seqs[i].pos0 + t;
            if (k == 256) {
                TELA_TRY(tela_exec_upload(ex, pos_mem + n + t + 1 - k, buf, sizeof buf));
                k = 0;
            }
        }
        n += seqs[i].n_tok;
    }
    if (k) TELA_TRY(tela_exec_upload(ex, pos_mem + n - k, buf, (size_t)k * sizeof(int32_t)));
    TELA_TRY(tela_exec_upload(ex, tok_mem, tokens, (size_t)n * sizeof(int32_t)));
    batch->n_tok = n;
    batch->pos0 = n_seq > 0 ? seqs[0].pos0 : 0;
    batch->tokens = tok_mem;
    batch->pos = pos_mem;
    batch->n_seq = n_seq;
    batch->seqs = seqs;
    static _Atomic uint64_t serials;
    batch->serial = ++serials;
    return TELA_OK;
}

void tela_exec_get_rows(tela_exec *ex, const tela_mat *w, const int32_t *ids, int n, float *out, int64_t out_stride) {
    PROF_OP(ex, ex->ops->get_rows(ex, w, 0, false, ids, n, out, out_stride), "embedding", false, -1, 0, 0);
}

void tela_exec_get_rows_part(tela_exec *ex, const tela_mat *w, int64_t row0, const int32_t *ids, int n, float *out,
                             int64_t out_stride, bool accumulate) {
    PROF_OP(ex, ex->ops->get_rows(ex, w, row0, accumulate, ids, n, out, out_stride), "embedding", false, -1, 0, 0);
}

void tela_exec_rmsnorm(tela_exec *ex, float *out, int64_t out_stride, const float *x, int64_t x_stride,
                       const float *w, int64_t n, int n_rows, float eps) {
    PROF_OP(ex, ex->ops->rmsnorm(ex, out, out_stride, x, x_stride, w, n, n_rows, eps), "norm", false, -1, 0, 0);
}

void tela_exec_matmul(tela_exec *ex, const tela_mat *w, const float *x, int64_t x_stride, float *y, int64_t y_stride,
                      int n_tok, bool accumulate) {
    const tela_matmul_target t = {w, y, y_stride};
    PROF_OP(ex, ex->ops->matmul_many(ex, NULL, &t, 1, x, x_stride, n_tok, accumulate), "projections", true, w->type,
            mat_bytes(w), mat_flops(w, n_tok));
}

/* The bytes and FLOPs of several products of one input. */
static void many_cost(const tela_matmul_target *t, int n, int n_tok, double *bytes, double *flops) {
    *bytes = *flops = 0;
    for (int i = 0; i < n; i++) {
        *bytes += mat_bytes(t[i].w);
        *flops += mat_flops(t[i].w, n_tok);
    }
}

void tela_exec_matmul_many(tela_exec *ex, const tela_matmul_target *t, int n, const float *x, int64_t x_stride,
                           int n_tok) {
    double by = 0, fl = 0;
    if (ex->prof) many_cost(t, n, n_tok, &by, &fl);
    PROF_OP(ex, ex->ops->matmul_many(ex, NULL, t, n, x, x_stride, n_tok, false), "projections", true, t[0].w->type, by,
            fl);
}

void tela_exec_matmul_swiglu(tela_exec *ex, const tela_mat *w_gate, const tela_mat *w_up, const float *x,
                             int64_t x_stride, float *out, int64_t out_stride, int n_tok) {
    PROF_OP(ex, ex->ops->matmul_swiglu(ex, NULL, w_gate, w_up, x, x_stride, out, out_stride, n_tok), "projections",
            true, w_gate->type, mat_bytes(w_gate) + mat_bytes(w_up), mat_flops(w_gate, n_tok) + mat_flops(w_up, n_tok));
}

void tela_exec_norm_matmul_many(tela_exec *ex, const tela_norm_in *norm, const tela_matmul_target *t, int n,
                                const float *x, int64_t x_stride, int n_tok) {
    double by = 0, fl = 0;
    if (ex->prof) many_cost(t, n, n_tok, &by, &fl);
    PROF_OP(ex, ex->ops->matmul_many(ex, norm, t, n, x, x_stride, n_tok, false), "projections", true, t[0].w->type, by,
            fl);
}

void tela_exec_norm_matmul_swiglu(tela_exec *ex, const tela_norm_in *norm, const tela_mat *w_gate,
                                  const tela_mat *w_up, const float *x, int64_t x_stride, float *out,
                                  int64_t out_stride, int n_tok) {
    PROF_OP(ex, ex->ops->matmul_swiglu(ex, norm, w_gate, w_up, x, x_stride, out, out_stride, n_tok), "projections",
            true, w_gate->type, mat_bytes(w_gate) + mat_bytes(w_up), mat_flops(w_gate, n_tok) + mat_flops(w_up, n_tok));
}

void tela_exec_add(tela_exec *ex, float *y, const float *x, int64_t n) {
    PROF_OP(ex, ex->ops->add(ex, y, x, n), "add", false, -1, 0, 0);
}

void tela_exec_rope_table(tela_exec *ex, float *cs, const tela_batch *b, const double *inv_freq, int n_rot) {
    PROF_OP(ex, ex->ops->rope_table(ex, cs, b, inv_freq, n_rot), "RoPE", false, -1, 0, 0);
}

void tela_exec_rope(tela_exec *ex, float *x, int64_t x_stride, int n_tok, int n_heads, int head_dim, int n_rot,
                    const float *cs, tela_rope_mode mode) {
    PROF_OP(ex, ex->ops->rope(ex, x, x_stride, n_tok, n_heads, head_dim, n_rot, cs, mode), "RoPE", false, -1, 0, 0);
}

void tela_exec_copy_rows(tela_exec *ex, float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                         const int32_t *rows, int n, int64_t width) {
    if (n > 0) PROF_OP(ex, ex->ops->copy_rows(ex, dst, dst_stride, src, src_stride, rows, n, width), "row gather",
                       false, -1, 0, 0);
}

void tela_exec_copy_spans(tela_exec *ex, const tela_copy_span *spans, int n) {
    if (n > 0) PROF_OP(ex, ex->ops->copy_spans(ex, spans, n), "span copies", false, -1, 0, 0);
}

void tela_exec_argmax(tela_exec *ex, const float *x, int64_t n, int32_t *out) {
    PROF_OP(ex, ex->ops->argmax(ex, x, n, 1, out), "sampling (greedy, on the device)", false, -1, 0, 0);
}

void tela_exec_argmax_rows(tela_exec *ex, const float *x, int64_t n, int n_rows, int32_t *out) {
    if (n_rows <= 0) return;
    PROF_OP(ex, ex->ops->argmax(ex, x, n, n_rows, out), "sampling (greedy, on the device)", false, -1, 0, 0);
}

tela_status tela_kv_create(tela_exec *ex, const tela_kv_shape *shape, tela_kv_cache **out) {
    *out = NULL;
    if (shape->block_size > 0) {
        if (!ex->ops->kv_copy_rows)
            return tela_errorf(TELA_ERR_UNSUPPORTED,
                               "%s: this backend has no paged KV cache yet (batched serving runs on the CPU)",
                               ex->be->description);
        if ((shape->block_size & (shape->block_size - 1)) != 0)
            return tela_errorf(TELA_ERR_INTERNAL, "paged KV cache: blocks of %d positions (a power of two is needed)",
                               shape->block_size);
        if (shape->n_ctx % shape->block_size != 0 || shape->max_seq_len <= 0)
            return tela_errorf(TELA_ERR_INTERNAL, "paged KV cache: %d rows are not blocks of %d", shape->n_ctx,
                               shape->block_size);
    }
    forget_active();
    return ex->ops->kv_create(ex, shape, out);
}

tela_status tela_kv_copy_rows(tela_exec *ex, tela_kv_cache *kv, int32_t dst, int32_t src, int32_t n) {
    if (!kv->ops->kv_copy_rows || kv->shape.block_size <= 0)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "KV row copies need a paged cache");
    if (n <= 0) return TELA_OK;
    if (dst < 0 || src < 0 || dst > kv->shape.n_ctx - n || src > kv->shape.n_ctx - n)
        return tela_errorf(TELA_ERR_INTERNAL, "KV row copy [%d, +%d) -> %d outside %d rows", src, n, dst,
                           kv->shape.n_ctx);
    activate(ex);
    return kv->ops->kv_copy_rows(ex, kv, dst, src, n);
}

void tela_kv_free(tela_kv_cache *kv) {
    forget_active();
    if (kv) kv->ops->kv_free(kv);
}

const tela_kv_shape *tela_kv_get_shape(const tela_kv_cache *kv) { return &kv->shape; }
void tela_kv_clear(tela_exec *ex, tela_kv_cache *kv) {
    activate(ex);
    kv->ops->kv_clear(ex, kv);
}

size_t tela_kv_image_bytes(const tela_kv_cache *kv, int32_t n_past) { return kv->ops->kv_image_bytes(kv, n_past); }

tela_status tela_kv_save(tela_exec *ex, const tela_kv_cache *kv, int32_t n_past, void *host_dst) {
    activate(ex);
    return kv->ops->kv_save(ex, kv, n_past, host_dst);
}

tela_status tela_kv_load(tela_exec *ex, tela_kv_cache *kv, int32_t n_past, const void *host_src) {
    activate(ex);
    return kv->ops->kv_load(ex, kv, n_past, host_src);
}

void tela_exec_kv_store(tela_exec *ex, tela_kv_cache *kv, int layer, const float *k, int64_t k_stride, const float *v,
                        int64_t v_stride, const tela_batch *b) {
    PROF_OP(ex, kv->ops->kv_store(ex, kv, layer, k, k_stride, v, v_stride, b), "KV store", false, -1, 0, 0);
}

void tela_exec_rope_store(tela_exec *ex, tela_kv_cache *kv, int layer, float *q, int64_t q_stride, int n_head, float *k,
                          int64_t k_stride, const float *v, int64_t v_stride, const tela_batch *b, const float *cs,
                          int n_rot, tela_rope_mode mode) {
    PROF_OP(ex, kv->ops->rope_store(ex, kv, layer, q, q_stride, n_head, k, k_stride, v, v_stride, b, cs, n_rot, mode,
                                    NULL),
            "RoPE + KV store", false, -1, 0, 0);
}

void tela_exec_norm_rope_store(tela_exec *ex, const tela_head_norms *norms, tela_kv_cache *kv, int layer, float *q,
                               int64_t q_stride, int n_head, float *k, int64_t k_stride, const float *v,
                               int64_t v_stride, const tela_batch *b, const float *cs, int n_rot, tela_rope_mode mode) {
    PROF_OP(ex, kv->ops->rope_store(ex, kv, layer, q, q_stride, n_head, k, k_stride, v, v_stride, b, cs, n_rot, mode,
                                    norms),
            "head norms + RoPE + KV store", false, -1, 0, 0);
}

void tela_exec_attention(tela_exec *ex, const tela_kv_cache *kv, int layer, const float *q, int64_t q_stride,
                         float *out, int64_t out_stride, const tela_batch *b, int n_head, float scale) {
    PROF_OP(ex, kv->ops->attention(ex, kv, layer, q, q_stride, out, out_stride, b, n_head, scale),
            b->n_tok > 1 ? "attention (prefill)" : "attention (decode)", false, -1, 0, 0);
}

void tela_exec_zero(tela_exec *ex, void *p, size_t bytes) {
    if (bytes) PROF_OP(ex, ex->ops->zero(ex, p, bytes), "state clear", false, -1, 0, 0);
}

void tela_exec_sigmoid_gate(tela_exec *ex, float *out, int64_t out_stride, const float *gate, int64_t gate_stride,
                            int n_rows, int n) {
    PROF_OP(ex, ex->ops->sigmoid_gate(ex, out, out_stride, gate, gate_stride, n_rows, n), "attention output gate", false,
            -1, 0, 0);
}

void tela_exec_conv1d_silu(tela_exec *ex, const float *x, int64_t x_stride, int n_tok, int channels, int kernel,
                           const float *w, float *state, float *out, int64_t out_stride) {
    PROF_OP(ex, ex->ops->conv1d_silu(ex, x, x_stride, n_tok, channels, kernel, w, state, out, out_stride),
            "DeltaNet conv1d", false, -1, 0, 0);
}

void tela_exec_gdn_gates(tela_exec *ex, float *qkv, int64_t qkv_stride, int n_qk_heads, int dk, float *beta, float *g,
                         int nv, int n_tok, const float *a, const float *dt_bias, float eps) {
    PROF_OP(ex, ex->ops->gdn_gates(ex, qkv, qkv_stride, n_qk_heads, dk, beta, g, nv, n_tok, a, dt_bias, eps),
            "DeltaNet gates", false, -1, 0, 0);
}

void tela_exec_gdn_delta(tela_exec *ex, const tela_gdn_args *a) {
    PROF_OP(ex, ex->ops->gdn_delta(ex, a), a->n_tok > 1 ? "DeltaNet chunked prefill" : "DeltaNet recurrence", false, -1,
            0, 0);
}

/* ------------------------------------------------------- several execs */

void tela_exec_wait_for(tela_exec *ex, tela_exec *other) {
    if (ex == other || !ex->ops->wait_for) return;
    activate(ex);
    ex->ops->wait_for(ex, other);
    active_exec = NULL; /* (it may have visited other's device) */
}

void tela_exec_copy_from(tela_exec *ex, void *dst, size_t dst_pitch, tela_exec *other, const void *src,
                         size_t src_pitch, size_t width, size_t rows) {
    if (!width || !rows) return;
    PROF_OP(ex, ex->ops->copy_from(ex, dst, dst_pitch, other, src, src_pitch, width, rows), "copies between ranks",
            false, -1, 0, 0);
}

struct tela_exec_group {
    int n;
    tela_exec **ex;
    void *comm;              /* the backend's collective, or NULL: copies and adds on rank 0 */
    const char *transport;
    float *stage;            /* rank 0's memory: another rank's buffer, to add */
    int64_t max_floats;
};

void tela_exec_group_free(tela_exec_group *g) {
    if (!g) return;
    if (g->comm && g->ex[0]->ops->comm_free) g->ex[0]->ops->comm_free(g->comm, g->n);
    if (g->stage) tela_backend_free_mem(g->ex[0]->be, g->stage);
    free(g->ex);
    free(g);
}

tela_status tela_exec_group_create(tela_exec *const *execs, int n, int64_t max_floats, tela_exec_group **out) {
    *out = NULL;
    if (n < 1 || max_floats < 0) return tela_errorf(TELA_ERR_ARG, "exec group: %d ranks of %lld floats", n,
                                                    (long long)max_floats);
    for (int r = 1; r < n; r++)
        if (execs[r]->ops != execs[0]->ops)
            return tela_errorf(TELA_ERR_UNSUPPORTED, "tensor parallelism: rank %d is on %s, rank 0 on %s (the ranks "
                               "must be devices of one kind)", r, execs[r]->be->description, execs[0]->be->description);
    tela_exec_group *g = calloc(1, sizeof *g);
    if (!g || !(g->ex = malloc((size_t)n * sizeof *g->ex))) {
        free(g);
        return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    }
    memcpy(g->ex, execs, (size_t)n * sizeof *g->ex);
    g->n = n;
    g->max_floats = max_floats;
    g->transport = "copies";
    tela_status s = TELA_OK;
    if (n > 1 && execs[0]->ops->comm_create) {
        forget_active();
        s = execs[0]->ops->comm_create(execs, n, &g->comm, &g->transport);
        if (!g->comm) g->transport = "copies";
    }
    if (s == TELA_OK && n > 1 && !g->comm && max_floats == 0)
        s = tela_errorf(TELA_ERR_ARG, "exec group: %d ranks without a buffer to add through", n);
    if (s == TELA_OK && n > 1 && !g->comm)
        s = tela_backend_alloc(execs[0]->be, (size_t)max_floats * sizeof(float), "all-reduce buffer", (void **)&g->stage);
    if (s != TELA_OK) {
        tela_exec_group_free(g);
        return s;
    }
    *out = g;
    return TELA_OK;
}

const char *tela_exec_group_transport(const tela_exec_group *g) { return g->transport; }

void tela_exec_allreduce_sum(tela_exec_group *g, float *const *bufs, int64_t n) {
    if (g->n < 2 || n <= 0) return;
    tela_exec *ex0 = g->ex[0];
    if (g->comm) {
        PROF_OP(ex0, ex0->ops->comm_allreduce(g->comm, g->ex, bufs, n), "all-reduce", false, -1, 0, 0);
        active_exec = NULL;
        return;
    }
    /* rank 0 adds the others' buffers in rank order (the bits of the ranks
     * summed one after another on one exec), a stage at a time, and the
     * ranks copy the sum back; rank 0 then waits for their copies, so that
     * it does not write bufs[0] again before they have read it */
    for (int64_t off = 0; off < n; off += g->max_floats) {
        const int64_t k = n - off < g->max_floats ? n - off : g->max_floats;
        const size_t bytes = (size_t)k * sizeof(float);
        for (int r = 1; r < g->n; r++) {
            tela_exec_wait_for(ex0, g->ex[r]);
            tela_exec_copy_from(ex0, g->stage, bytes, g->ex[r], bufs[r] + off, bytes, bytes, 1);
            tela_exec_add(ex0, bufs[0] + off, g->stage, k);
        }
        for (int r = 1; r < g->n; r++) {
            tela_exec_wait_for(g->ex[r], ex0);
            tela_exec_copy_from(g->ex[r], bufs[r] + off, bytes, ex0, bufs[0] + off, bytes, bytes, 1);
        }
        for (int r = 1; r < g->n; r++) tela_exec_wait_for(ex0, g->ex[r]);
    }
}
