/* backend_cpu.c: the CPU backend behind backend.h: the operations of
 * ops.h on a thread pool per exec, weights packed for the AVX-512 kernels
 * at load, KV caches of f32 rows in host memory. Backend memory is host
 * memory, so nothing is copied and nothing runs asynchronously. */
#include "backend/backend_impl.h"
#include "backend/cpu/backend_cpu.h"
#include "backend/cpu/gdn.h"
#include "backend/cpu/ops.h"
#include "util/fp16.h"
#include "backend/cpu/qdot.h"
#include "util/threadpool.h"
#include "quant/quant.h"
#include "util/bigalloc.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Tokens per step of a long prefill: bounds a session's activation buffers
 * while keeping the gemm kernels' panels full. */
#define CPU_PREFERRED_BATCH 256

typedef struct cpu_backend {
    tela_backend head;
    /* packed weights (prepare_mats), one block per call, from tela_big_alloc */
    void **packed;
    size_t *packed_bytes;
    size_t n_packed;
} cpu_backend;

typedef struct cpu_exec {
    tela_exec head;
    tela_threadpool *pool;
    /* scratch for the fused operations (accumulating matmuls, the up half
     * of SwiGLU), grown as needed */
    float *tmp;
    size_t tmp_floats;
    tela_status failed;      /* first failure of a void operation, reported by sync */
    double *marks;           /* profiling marks: host clock readings */
    int n_marks, cap_marks;
} cpu_exec;

/* Head-major: layer l, KV head h, row r, element i at
 * k + ((l * n_kv_head + h) * n_ctx + r) * k_dim + i, so the attention of
 * one KV head streams its rows from one contiguous range (rows that hold
 * every head were a stride apart: 2.4x slower to read at 8k positions,
 * docs/PERF-NOTES.md). */
typedef struct cpu_kv {
    tela_kv_cache head;
    size_t k_row, v_row;     /* elements per position, all heads */
    size_t elt;              /* bytes per element: 4 (f32) or 2 (f16); 0: Q8_0 blocks */
    unsigned char *k, *v;
} cpu_kv;

/* Bytes of n cache elements (n a multiple of 32 for Q8_0: whole blocks of
 * an f16 scale and 32 int8 values). */
static inline size_t kv_bytes(const cpu_kv *c, size_t n) {
    return c->elt ? n * c->elt : n / TELA_QK8_0 * sizeof(tela_block_q8_0);
}

/* Layer l's first K (V) element. */
static inline unsigned char *kv_k(const cpu_kv *c, int l) {
    return c->k + kv_bytes(c, (size_t)l * (size_t)c->head.shape.n_ctx * c->k_row);
}
static inline unsigned char *kv_v(const cpu_kv *c, int l) {
    return c->v + kv_bytes(c, (size_t)l * (size_t)c->head.shape.n_ctx * c->v_row);
}
/* Bytes from one head's rows to the next's, and of one head's row. */
static inline size_t kv_k_head(const cpu_kv *c) { return kv_bytes(c, (size_t)c->head.shape.n_ctx * (size_t)c->head.shape.k_dim); }
static inline size_t kv_v_head(const cpu_kv *c) { return kv_bytes(c, (size_t)c->head.shape.n_ctx * (size_t)c->head.shape.v_dim); }

/* n values into a cache row of the cache's precision. */
static void kv_put(const cpu_kv *c, unsigned char *dst, const float *src, size_t n) {
    if (c->elt == 4) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    if (c->elt == 0) { /* llama.cpp's Q8_0 rounding (cannot fail: n is whole blocks) */
        (void)tela_quantize_row(TELA_TYPE_Q8_0, src, dst, (int64_t)n);
        return;
    }
    uint16_t *h = (uint16_t *)dst;
    for (size_t i = 0; i < n; i++) h[i] = tela_f32_to_f16(src[i]);
}

/* A position's keys and values (every head, as the projections write
 * them) into cache row r of layer l. */
static void kv_put_row(const cpu_kv *c, int l, size_t r, const float *k, const float *v) {
    const int kd = c->head.shape.k_dim, vd = c->head.shape.v_dim;
    unsigned char *kl = kv_k(c, l) + kv_bytes(c, r * (size_t)kd), *vl = kv_v(c, l) + kv_bytes(c, r * (size_t)vd);
    for (int h = 0; h < c->head.shape.n_kv_head; h++) {
        kv_put(c, kl + (size_t)h * kv_k_head(c), k + (size_t)h * kd, (size_t)kd);
        kv_put(c, vl + (size_t)h * kv_v_head(c), v + (size_t)h * vd, (size_t)vd);
    }
}

static cpu_exec *as_cpu(tela_exec *ex) { return (cpu_exec *)ex; }

tela_threadpool *tela_exec_cpu_pool(tela_exec *ex) { return as_cpu(ex)->pool; }

/* ------------------------------------------------------------ backend */

static void cpu_destroy(tela_backend *be) {
    cpu_backend *b = (cpu_backend *)be;
    for (size_t i = 0; i < b->n_packed; i++) tela_big_free(b->packed[i], b->packed_bytes[i]);
    free(b->packed);
    free(b->packed_bytes);
    free(b);
}

/* The host's memory: the kernel's MemAvailable (free plus what the page
 * cache can give back) as the free bytes, else the free pages. */
static tela_status cpu_mem_info(tela_backend *be, size_t *free_bytes, size_t *total_bytes) {
    (void)be;
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    *total_bytes = pages > 0 && psize > 0 ? (size_t)pages * (size_t)psize : 0;
    *free_bytes = avail > 0 && psize > 0 ? (size_t)avail * (size_t)psize : 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                *free_bytes = (size_t)kb * 1024;
                break;
            }
        fclose(f);
    }
    return TELA_OK;
}

static bool cpu_type_supported(const tela_backend *be, tela_type type) {
    (void)be;
    return tela_op_type_supported(type);
}

/* Packs the matrices that are multiplied by into the kernels' layout, in
 * one 2 MB-aligned block. */
static tela_status cpu_prepare_mats(tela_backend *be, tela_mat *const *mats, const tela_mat_use *uses, size_t n,
                                    int verbose) {
    cpu_backend *b = (cpu_backend *)be;
    size_t total = 0, n_mats = 0;
    for (size_t i = 0; i < n; i++) {
        if (uses[i] != TELA_MAT_MATMUL) continue;
        size_t sz = mats[i]->data && !mats[i]->packed ? tela_op_pack_bytes(mats[i]) : 0;
        if (sz > SIZE_MAX - total - 64 * (n + 1)) return tela_errorf(TELA_ERR_NOMEM, "weights too large to pack");
        total += sz ? (sz + 63) / 64 * 64 : 0;
        n_mats += sz != 0;
    }
    if (total == 0) return TELA_OK;
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    void **np = realloc(b->packed, (b->n_packed + 1) * sizeof *np);
    if (!np) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    b->packed = np;
    size_t *nb = realloc(b->packed_bytes, (b->n_packed + 1) * sizeof *nb);
    if (!nb) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    b->packed_bytes = nb;
    unsigned char *buf = tela_big_alloc(total);
    if (!buf) return tela_errorf(TELA_ERR_NOMEM, "out of memory for %zu MiB of packed weights", total >> 20);
    b->packed[b->n_packed] = buf;
    b->packed_bytes[b->n_packed] = total;
    b->n_packed++;
    tela_threadpool *pool = NULL;
    TELA_TRY(tela_threadpool_create(be->n_threads, &pool));
    for (size_t i = 0; i < n; i++) {
        if (uses[i] != TELA_MAT_MATMUL) continue;
        size_t sz = mats[i]->data && !mats[i]->packed ? tela_op_pack_bytes(mats[i]) : 0;
        if (!sz) continue;
        tela_op_pack(pool, mats[i], buf);
        buf += (sz + 63) / 64 * 64;
    }
    tela_threadpool_free(pool);
    if (verbose)
        fprintf(stderr, "tela: packed %zu weight matrices (%.1f MiB) for the CPU kernels in %.2f s of CPU time\n",
                n_mats, (double)total / (1 << 20), (double)clock() / CLOCKS_PER_SEC - t0);
    return TELA_OK;
}

static size_t cpu_mats_bytes(const tela_backend *be, tela_mat *const *mats, size_t n) {
    (void)be;
    (void)mats;
    (void)n;
    return 0;
}

static tela_status cpu_alloc(tela_backend *be, size_t bytes, const char *what, void **out) {
    (void)be;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return tela_errorf(TELA_ERR_NOMEM, "out of memory for %s (%.1f MiB)", what, (double)bytes / (1 << 20));
    memset(p, 0, bytes);
    *out = p;
    return TELA_OK;
}

static void cpu_free_mem(tela_backend *be, void *p) {
    (void)be;
    free(p);
}

static tela_status cpu_make_const(tela_backend *be, const void *host, size_t bytes, const void **out) {
    (void)be;
    (void)bytes;
    *out = host;
    return TELA_OK;
}

/* --------------------------------------------------------------- exec */

static tela_status cpu_exec_create(tela_backend *be, int n_threads, tela_exec **out);

static void cpu_exec_free(tela_exec *ex) {
    cpu_exec *c = as_cpu(ex);
    tela_threadpool_free(c->pool);
    free(c->tmp);
    free(c->marks);
    free(c);
}

static int cpu_preferred_batch(const tela_exec *ex) {
    (void)ex;
    return CPU_PREFERRED_BATCH;
}

static tela_status cpu_sync(tela_exec *ex) {
    cpu_exec *c = as_cpu(ex);
    tela_status s = c->failed;
    c->failed = TELA_OK;
    return s;
}

static tela_status cpu_copy(tela_exec *ex, void *dst, const void *src, size_t bytes) {
    if (dst != src && bytes) memmove(dst, src, bytes);
    return cpu_sync(ex);
}

static bool cpu_graph_begin(tela_exec *ex, uint64_t key) {
    (void)ex;
    (void)key;
    return true;
}

static tela_status cpu_graph_end(tela_exec *ex) { return cpu_sync(ex); }

static uint32_t cpu_length_bucket(const tela_exec *ex, int32_t n_kv) {
    (void)ex;
    (void)n_kv;
    return 0;
}

/* The exec's scratch of at least n floats, or NULL after recording a
 * failure. */
static float *cpu_tmp(cpu_exec *c, size_t n) {
    if (c->tmp_floats < n) {
        free(c->tmp);
        c->tmp = NULL;
        c->tmp_floats = 0;
        if (posix_memalign((void **)&c->tmp, 64, n * sizeof(float)) != 0) {
            c->tmp = NULL;
            if (c->failed == TELA_OK)
                c->failed = tela_errorf(TELA_ERR_NOMEM, "out of memory for %.1f MiB of scratch",
                                        (double)n * sizeof(float) / (1 << 20));
            return NULL;
        }
        c->tmp_floats = n;
    }
    return c->tmp;
}

/* --------------------------------------------------------- operations */

/* The matmul kernels' per-thread scratch for rows of n_cols (a no-op once
 * reserved). */
static bool reserve_matmul(cpu_exec *c, int64_t n_cols) {
    tela_status s = tela_threadpool_reserve(c->pool, tela_op_matmul_scratch(n_cols));
    if (s != TELA_OK && c->failed == TELA_OK) c->failed = s;
    return s == TELA_OK;
}

static void cpu_get_rows(tela_exec *ex, const tela_mat *w, int64_t row0, bool accumulate, const int32_t *ids, int n,
                         float *out, int64_t out_stride) {
    float *scratch = accumulate ? cpu_tmp(as_cpu(ex), (size_t)w->n_cols) : NULL;
    if (scratch || !accumulate) tela_op_get_rows_part(w, row0, accumulate, ids, n, out, out_stride, scratch);
}

static void cpu_rmsnorm(tela_exec *ex, float *out, int64_t out_stride, const float *x, int64_t x_stride,
                        const float *w, int64_t n, int n_rows, float eps) {
    tela_op_rmsnorm_pool(as_cpu(ex)->pool, out, out_stride, x, x_stride, w, n, n_rows, eps);
}

/* The RMSNorm in front of products: normalized rows into norm->xn, which
 * the products then read (the order of arithmetic of an rmsnorm op
 * followed by the products). */
static const float *apply_norm(cpu_exec *c, const tela_norm_in *norm, const float *x, int64_t x_stride, int64_t n,
                               int n_tok) {
    if (!norm) return x;
    tela_op_rmsnorm_pool(c->pool, norm->xn, x_stride, x, x_stride, norm->w, n, n_tok, norm->eps);
    return norm->xn;
}

static void cpu_matmul_many(tela_exec *ex, const tela_norm_in *norm, const tela_matmul_target *t, int n,
                            const float *x, int64_t x_stride, int n_tok, bool accumulate) {
    cpu_exec *c = as_cpu(ex);
    if (!reserve_matmul(c, t[0].w->n_cols)) return;
    x = apply_norm(c, norm, x, x_stride, t[0].w->n_cols, n_tok);
    if (!accumulate) {
        if (n == 1)
            tela_op_matmul(c->pool, t[0].w, x, x_stride, t[0].y, t[0].y_stride, n_tok);
        else
            tela_op_matmul_many(c->pool, t, n, x, x_stride, n_tok);
        return;
    }
    /* y += W x: the product into scratch, then added (the order of the
     * arithmetic of a matmul followed by tela_op_add). */
    for (int i = 0; i < n; i++) {
        const int64_t rows = t[i].w->n_rows;
        float *tmp = cpu_tmp(c, (size_t)rows * (size_t)n_tok);
        if (!tmp) return;
        tela_op_matmul(c->pool, t[i].w, x, x_stride, tmp, rows, n_tok);
        for (int r = 0; r < n_tok; r++) tela_op_add(t[i].y + (size_t)r * t[i].y_stride, tmp + (size_t)r * rows, rows);
    }
}

static void cpu_matmul_swiglu(tela_exec *ex, const tela_norm_in *norm, const tela_mat *w_gate, const tela_mat *w_up,
                              const float *x, int64_t x_stride, float *out, int64_t out_stride, int n_tok) {
    cpu_exec *c = as_cpu(ex);
    if (!reserve_matmul(c, w_gate->n_cols)) return;
    x = apply_norm(c, norm, x, x_stride, w_gate->n_cols, n_tok);
    const int64_t n_ff = w_gate->n_rows;
    float *up = cpu_tmp(c, (size_t)n_ff * (size_t)n_tok);
    if (!up) return;
    const tela_matmul_target gate_up[2] = {{w_gate, out, out_stride}, {w_up, up, n_ff}};
    tela_op_matmul_many(c->pool, gate_up, 2, x, x_stride, n_tok);
    if (out_stride == n_ff) {
        tela_op_swiglu_pool(c->pool, out, up, (int64_t)n_tok * n_ff);
    } else {
        for (int t = 0; t < n_tok; t++)
            tela_op_swiglu_pool(c->pool, out + (size_t)t * out_stride, up + (size_t)t * n_ff, n_ff);
    }
}

static void cpu_add(tela_exec *ex, float *y, const float *x, int64_t n) {
    (void)ex;
    tela_op_add(y, x, n);
}

static void cpu_rope_table(tela_exec *ex, float *cs, const tela_batch *b, const double *inv_freq, int n_rot) {
    (void)ex;
    tela_rope_table(cs, b->pos, b->n_tok, inv_freq, n_rot);
}

static void cpu_rope(tela_exec *ex, float *x, int64_t x_stride, int n_tok, int n_heads, int head_dim, int n_rot,
                     const float *cs, tela_rope_mode mode) {
    (void)ex;
    tela_op_rope(x, x_stride, n_tok, n_heads, head_dim, n_rot, cs, mode);
}

static void cpu_argmax(tela_exec *ex, const float *x, int64_t n, int n_rows, int32_t *out) {
    (void)ex;
    for (int r = 0; r < n_rows; r++, x += n) {
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (x[i] > x[best]) best = i;
        out[r] = (int32_t)best;
    }
}

/* ----------------------------------------------------------- KV cache */

static tela_status cpu_kv_create(tela_exec *ex, const tela_kv_shape *shape, tela_kv_cache **out);

static void cpu_kv_free(tela_kv_cache *kv) {
    cpu_kv *c = (cpu_kv *)kv;
    free(c->k);
    free(c->v);
    free(c);
}

/* Rows past a sequence's length are never read before they are written:
 * nothing to clear. */
static void cpu_kv_clear(tela_exec *ex, tela_kv_cache *kv) {
    (void)ex;
    (void)kv;
}

static size_t cpu_kv_image_bytes(const tela_kv_cache *kv, int32_t n_past) {
    const cpu_kv *c = (const cpu_kv *)kv;
    return (size_t)kv->shape.n_layer * kv_bytes(c, (size_t)n_past * (c->k_row + c->v_row));
}

/* The image: for each layer, K rows [0, n_past), then V rows. */
static tela_status cpu_kv_save(tela_exec *ex, const tela_kv_cache *kv, int32_t n_past, void *dst) {
    (void)ex;
    const cpu_kv *c = (const cpu_kv *)kv;
    unsigned char *p = dst;
    const int H = kv->shape.n_kv_head;
    const size_t kb = kv_bytes(c, (size_t)n_past * (size_t)kv->shape.k_dim),
                 vb = kv_bytes(c, (size_t)n_past * (size_t)kv->shape.v_dim);
    for (int l = 0; l < kv->shape.n_layer; l++) {
        for (int h = 0; h < H; h++, p += kb) memcpy(p, kv_k(c, l) + (size_t)h * kv_k_head(c), kb);
        for (int h = 0; h < H; h++, p += vb) memcpy(p, kv_v(c, l) + (size_t)h * kv_v_head(c), vb);
    }
    return TELA_OK;
}

static tela_status cpu_kv_load(tela_exec *ex, tela_kv_cache *kv, int32_t n_past, const void *src) {
    (void)ex;
    cpu_kv *c = (cpu_kv *)kv;
    const unsigned char *p = src;
    const int H = kv->shape.n_kv_head;
    const size_t kb = kv_bytes(c, (size_t)n_past * (size_t)kv->shape.k_dim),
                 vb = kv_bytes(c, (size_t)n_past * (size_t)kv->shape.v_dim);
    for (int l = 0; l < kv->shape.n_layer; l++) {
        for (int h = 0; h < H; h++, p += kb) memcpy(kv_k(c, l) + (size_t)h * kv_k_head(c), p, kb);
        for (int h = 0; h < H; h++, p += vb) memcpy(kv_v(c, l) + (size_t)h * kv_v_head(c), p, vb);
    }
    return TELA_OK;
}

/* The cache row of position p of a sequence with block table `blocks`
 * (NULL: a session's cache, row p). */
static inline size_t kv_row(const int32_t *blocks, int32_t block_size, int32_t p) {
    return blocks ? (size_t)blocks[p / block_size] * (size_t)block_size + (size_t)(p % block_size) : (size_t)p;
}

static void cpu_kv_store(tela_exec *ex, tela_kv_cache *kv, int layer, const float *k, int64_t k_stride,
                         const float *v, int64_t v_stride, const tela_batch *b) {
    (void)ex;
    cpu_kv *c = (cpu_kv *)kv;
    const int32_t bs = kv->shape.block_size;
    for (int i = 0; i < (b->seqs ? b->n_seq : 1); i++) {
        const tela_batch_seq *q = b->seqs ? &b->seqs[i] : NULL;
        const int t0 = q ? q->tok0 : 0, t1 = q ? q->tok0 + q->n_tok : b->n_tok;
        for (int t = t0; t < t1; t++)
            kv_put_row(c, layer, q ? kv_row(q->blocks, bs, b->pos[t]) : (size_t)b->pos[t], k + (size_t)t * k_stride,
                       v + (size_t)t * v_stride);
    }
}

static tela_status cpu_kv_copy_rows(tela_exec *ex, tela_kv_cache *kv, int32_t dst, int32_t src, int32_t n) {
    (void)ex;
    cpu_kv *c = (cpu_kv *)kv;
    const size_t kb = kv_bytes(c, (size_t)kv->shape.k_dim), vb = kv_bytes(c, (size_t)kv->shape.v_dim);
    for (int l = 0; l < kv->shape.n_layer; l++)
        for (int h = 0; h < kv->shape.n_kv_head; h++) {
            unsigned char *kl = kv_k(c, l) + (size_t)h * kv_k_head(c), *vl = kv_v(c, l) + (size_t)h * kv_v_head(c);
            memmove(kl + (size_t)dst * kb, kl + (size_t)src * kb, (size_t)n * kb);
            memmove(vl + (size_t)dst * vb, vl + (size_t)src * vb, (size_t)n * vb);
        }
    return TELA_OK;
}

/* Rows of n heads of hd floats a token (token t's head h at x + t *
 * x_stride + h * x_head), RMS-normalized into out (rows out_stride, heads
 * hd apart): one call where the heads lie evenly spaced across tokens,
 * else one a token. */
static void cpu_head_norms(cpu_exec *c, float *out, int64_t out_stride, const float *x, int64_t x_stride,
                           int64_t x_head, const float *w, int n, int hd, int n_tok, float eps) {
    if (x_stride == n * x_head && out_stride == (int64_t)n * hd) {
        tela_op_rmsnorm_pool(c->pool, out, hd, x, x_head, w, hd, n_tok * n, eps);
        return;
    }
    for (int t = 0; t < n_tok; t++)
        tela_op_rmsnorm_pool(c->pool, out + (size_t)t * out_stride, hd, x + (size_t)t * x_stride, x_head, w, hd, n, eps);
}

static void cpu_rope_store(tela_exec *ex, tela_kv_cache *kv, int layer, float *q, int64_t q_stride, int n_head,
                           float *k, int64_t k_stride, const float *v, int64_t v_stride, const tela_batch *b,
                           const float *cs, int n_rot, tela_rope_mode mode, const tela_head_norms *norms) {
    const tela_kv_shape *sh = &kv->shape;
    if (norms) {
        cpu_head_norms(as_cpu(ex), q, q_stride, norms->src, norms->src_stride, norms->src_head, norms->q_w, n_head,
                       sh->k_dim, b->n_tok, norms->eps);
        cpu_head_norms(as_cpu(ex), k, k_stride, k, k_stride, sh->k_dim, norms->k_w, sh->n_kv_head, sh->k_dim, b->n_tok,
                       norms->eps);
    }
    tela_op_rope(q, q_stride, b->n_tok, n_head, sh->k_dim, n_rot, cs, mode);
    tela_op_rope(k, k_stride, b->n_tok, sh->n_kv_head, sh->k_dim, n_rot, cs, mode);
    cpu_kv_store(ex, kv, layer, k, k_stride, v, v_stride, b);
}

/* One tela_op_attention call for all the batch's sequences (each with its
 * queries' rows, positions and block table), so a step of many decoding
 * sequences is one dispatch to the pool. */
static void cpu_attention(tela_exec *ex, const tela_kv_cache *kv, int layer, const float *q, int64_t q_stride,
                          float *out, int64_t out_stride, const tela_batch *b, int n_head, float scale) {
    cpu_exec *ce = as_cpu(ex);
    const cpu_kv *c = (const cpu_kv *)kv;
    const tela_attn_args base = {
        .q = q, .q_stride = q_stride,
        .k = kv_k(c, layer), .k_stride = kv->shape.k_dim,
        .v = kv_v(c, layer), .v_stride = kv->shape.v_dim, .kv_f16 = c->elt == 2, .kv_q8 = c->elt == 0,
        .k_head_stride = (int64_t)kv->shape.n_ctx * kv->shape.k_dim,
        .v_head_stride = (int64_t)kv->shape.n_ctx * kv->shape.v_dim,
        .out = out, .out_stride = out_stride, .n_tok = b->n_tok, .pos0 = b->pos0, .n_head = n_head,
        .n_kv_head = kv->shape.n_kv_head, .k_dim = kv->shape.k_dim, .v_dim = kv->shape.v_dim, .scale = scale,
        .blocks = NULL, .block_size = kv->shape.block_size,
    };
    if (!b->seqs) {
        tela_op_attention(ce->pool, &base, 1);
        return;
    }
    tela_attn_args stack[16] = {{0}};
    tela_attn_args *args = b->n_seq <= 16 ? stack : malloc((size_t)b->n_seq * sizeof *args);
    if (!args) {
        if (ce->failed == TELA_OK) ce->failed = tela_errorf(TELA_ERR_NOMEM, "attention: out of memory");
        return;
    }
    for (int i = 0; i < b->n_seq; i++) {
        const tela_batch_seq *sq = &b->seqs[i];
        args[i] = base;
        args[i].q = q + (size_t)sq->tok0 * q_stride;
        args[i].out = out + (size_t)sq->tok0 * out_stride;
        args[i].n_tok = sq->n_tok;
        args[i].pos0 = sq->pos0;
        args[i].blocks = sq->blocks;
    }
    tela_op_attention(ce->pool, args, b->n_seq);
    if (args != stack) free(args);
}

static void cpu_copy_rows(tela_exec *ex, float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                          const int32_t *rows, int n, int64_t width) {
    (void)ex;
    for (int i = 0; i < n; i++)
        memmove(dst + (size_t)i * dst_stride, src + (size_t)rows[i] * src_stride, (size_t)width * sizeof(float));
}

static void cpu_copy_spans(tela_exec *ex, const tela_copy_span *spans, int n) {
    (void)ex;
    for (int i = 0; i < n; i++) memcpy(spans[i].dst, spans[i].src, (size_t)spans[i].n * sizeof(float));
}


/* ------------------------------------------------ Gated DeltaNet layers */

static void cpu_zero(tela_exec *ex, void *p, size_t bytes) {
    (void)ex;
    memset(p, 0, bytes);
}

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* torch.nn.functional.softplus (beta 1, threshold 20). */
static inline float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static void cpu_sigmoid_gate(tela_exec *ex, float *out, int64_t out_stride, const float *gate, int64_t gate_stride,
                             int n_rows, int n) {
    (void)ex;
    for (int r = 0; r < n_rows; r++) {
        float *o = out + (size_t)r * out_stride;
        const float *g = gate + (size_t)r * gate_stride;
        for (int i = 0; i < n; i++) o[i] *= sigmoidf_(g[i]);
    }
}

static void cpu_conv1d_silu(tela_exec *ex, const float *x, int64_t x_stride, int n_tok, int channels, int kernel,
                            const float *w, float *state, float *out, int64_t out_stride) {
    (void)ex;
    tela_gdn_conv1d_silu(x, x_stride, n_tok, channels, kernel, w, state, out, out_stride);
}

static void cpu_gdn_gates(tela_exec *ex, float *qkv, int64_t qkv_stride, int n_qk_heads, int dk, float *beta,
                          float *g, int nv, int n_tok, const float *a, const float *dt_bias, float eps) {
    (void)ex;
    for (int t = 0; t < n_tok; t++) {
        float *row = qkv + (size_t)t * qkv_stride;
        for (int h = 0; h < n_qk_heads; h++) tela_gdn_l2_norm(row + (size_t)h * dk, dk, eps);
        float *b = beta + (size_t)t * nv, *gg = g + (size_t)t * nv;
        for (int h = 0; h < nv; h++) {
            b[h] = sigmoidf_(b[h]);
            gg[h] = a[h] * softplusf_(gg[h] + dt_bias[h]);
        }
    }
}

/* The delta rule split across the pool's threads by value head. */
typedef struct gdn_job {
    const tela_gdn_args *a;
    tela_threadpool *pool;
} gdn_job;

static void gdn_heads_task(void *arg, int ith, int nth) {
    const gdn_job *job = arg;
    const tela_gdn_args *a = job->a;
    const int64_t vd = (int64_t)a->nv * a->dv;
    const int group = a->nv / a->nk;
    long long h0, h1;
    tela_split_range(a->nv, ith, nth, &h0, &h1);
    for (long long h = h0; h < h1; h++) {
        const int kh = a->v_tiled ? (int)(h % a->nk) : (int)(h / group);
        tela_gdn_io io = {
            .dk = a->dk, .dv = a->dv, .q_scale = a->q_scale,
            .q = a->qkv + (size_t)kh * a->dk,
            .k = a->qkv + (size_t)(a->nk + kh) * a->dk,
            .qk_stride = a->qkv_stride,
            .v = a->qkv + (size_t)2 * a->nk * a->dk + (size_t)h * a->dv,
            .v_stride = a->qkv_stride,
            .g = a->g + h, .beta = a->beta + h, .gb_stride = a->nv,
            .out = a->out + (size_t)h * a->dv, .out_stride = vd,
        };
        float *S = a->state + (size_t)h * a->dk * a->dv;
        if (a->states) { /* the state after every token kept: token by token, copied as it goes */
            const size_t sz = (size_t)a->dk * a->dv;
            for (int t = 0; t < a->n_tok; t++) {
                tela_gdn_io one = io;
                one.q += t * io.qk_stride;
                one.k += t * io.qk_stride;
                one.v += t * io.v_stride;
                one.g += t * io.gb_stride;
                one.beta += t * io.gb_stride;
                one.out += t * io.out_stride;
                tela_gdn_recurrent(&one, 1, S);
                memcpy(a->states + (size_t)t * a->nv * sz + (size_t)h * sz, S, sz * sizeof(float));
            }
        } else if (a->n_tok == 1)
            tela_gdn_recurrent(&io, 1, S);
        else
            tela_gdn_chunked(&io, a->n_tok, S, tela_threadpool_scratch(job->pool, ith));
        /* the gated RMSNorm of this head's outputs */
        for (int t = 0; t < a->n_tok; t++)
            tela_gdn_gated_rms_norm(a->out + (size_t)t * vd + (size_t)h * a->dv, a->z + (size_t)t * vd + (size_t)h * a->dv,
                                    a->norm_w, a->dv, a->eps);
    }
}

static void cpu_gdn_delta(tela_exec *ex, const tela_gdn_args *a) {
    cpu_exec *c = as_cpu(ex);
    if (a->gates)
        cpu_gdn_gates(ex, a->qkv, a->qkv_stride, 2 * a->nk, a->dk, a->beta, a->g, a->nv, a->n_tok, a->gates->a,
                      a->gates->dt_bias, a->gates->eps);
    tela_status s = tela_threadpool_reserve(c->pool, tela_gdn_chunked_work_floats(a->dk, a->dv));
    if (s != TELA_OK) {
        if (c->failed == TELA_OK) c->failed = s;
        return;
    }
    gdn_job job = {a, c->pool};
    tela_threadpool_run(c->pool, gdn_heads_task, &job);
}

/* ------------------------------------------------------------ profiling */

static int cpu_prof_mark(tela_exec *ex) {
    cpu_exec *c = as_cpu(ex);
    if (c->n_marks == c->cap_marks) {
        int cap = c->cap_marks ? 2 * c->cap_marks : 1024;
        double *m = realloc(c->marks, (size_t)cap * sizeof *m);
        if (!m) return -1;
        c->marks = m;
        c->cap_marks = cap;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    c->marks[c->n_marks] = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    return c->n_marks++;
}

static double cpu_prof_seconds(tela_exec *ex, int a, int b) {
    const cpu_exec *c = as_cpu(ex);
    return a >= 0 && b >= 0 && a < c->n_marks && b < c->n_marks ? c->marks[b] - c->marks[a] : 0.0;
}

static void cpu_prof_clear(tela_exec *ex) { as_cpu(ex)->n_marks = 0; }

static void cpu_prof_mode(tela_exec *ex, bool on) {
    (void)ex;
    (void)on;
}

/* Several CPU execs (tensor parallelism's ranks in tests): host memory,
 * and every operation complete when its call returns. */
static void cpu_copy_from(tela_exec *ex, void *dst, size_t dst_pitch, tela_exec *other, const void *src,
                          size_t src_pitch, size_t width, size_t rows) {
    (void)ex;
    (void)other;
    for (size_t i = 0; i < rows; i++) memmove((char *)dst + i * dst_pitch, (const char *)src + i * src_pitch, width);
}

static const tela_backend_ops cpu_ops = {
    .destroy = cpu_destroy,
    .mem_info = cpu_mem_info,
    .type_supported = cpu_type_supported,
    .prepare_mats = cpu_prepare_mats,
    .mats_bytes = cpu_mats_bytes,
    .alloc = cpu_alloc,
    .free_mem = cpu_free_mem,
    .make_const = cpu_make_const,
    .exec_create = cpu_exec_create,
    .exec_free = cpu_exec_free,
    .preferred_batch = cpu_preferred_batch,
    .sync = cpu_sync,
    .upload = cpu_copy,
    .download = cpu_copy,
    .graph_begin = cpu_graph_begin,
    .graph_end = cpu_graph_end,
    .length_bucket = cpu_length_bucket,
    .get_rows = cpu_get_rows,
    .rmsnorm = cpu_rmsnorm,
    .matmul_many = cpu_matmul_many,
    .matmul_swiglu = cpu_matmul_swiglu,
    .add = cpu_add,
    .rope_table = cpu_rope_table,
    .rope = cpu_rope,
    .argmax = cpu_argmax,
    .copy_rows = cpu_copy_rows,
    .copy_spans = cpu_copy_spans,
    .kv_create = cpu_kv_create,
    .kv_free = cpu_kv_free,
    .kv_clear = cpu_kv_clear,
    .kv_image_bytes = cpu_kv_image_bytes,
    .kv_save = cpu_kv_save,
    .kv_load = cpu_kv_load,
    .kv_copy_rows = cpu_kv_copy_rows,
    .kv_store = cpu_kv_store,
    .rope_store = cpu_rope_store,
    .attention = cpu_attention,
    .zero = cpu_zero,
    .sigmoid_gate = cpu_sigmoid_gate,
    .conv1d_silu = cpu_conv1d_silu,
    .gdn_gates = cpu_gdn_gates,
    .gdn_delta = cpu_gdn_delta,
    .prof_mark = cpu_prof_mark,
    .prof_seconds = cpu_prof_seconds,
    .prof_clear = cpu_prof_clear,
    .prof_mode = cpu_prof_mode,
    .copy_from = cpu_copy_from,
};

static tela_status cpu_exec_create(tela_backend *be, int n_threads, tela_exec **out) {
    *out = NULL;
    cpu_exec *c = calloc(1, sizeof *c);
    if (!c) return tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    c->head.ops = &cpu_ops;
    c->head.be = be;
    tela_status s = tela_threadpool_create(n_threads > 0 ? n_threads : be->n_threads, &c->pool);
    if (s != TELA_OK) {
        free(c);
        return s;
    }
    *out = &c->head;
    return TELA_OK;
}

/* The attention op's per-thread scratch depends on the context and head
 * size: reserved here, where both are known. */
static tela_status cpu_kv_create(tela_exec *ex, const tela_kv_shape *shape, tela_kv_cache **out) {
    *out = NULL;
    const size_t k_row = (size_t)shape->n_kv_head * (size_t)shape->k_dim;
    const size_t v_row = (size_t)shape->n_kv_head * (size_t)shape->v_dim;
    const bool q8 = shape->dtype == TELA_KV_DTYPE_Q8_0;
    if (q8 && (shape->k_dim % TELA_QK8_0 || shape->v_dim % TELA_QK8_0))
        return tela_errorf(TELA_ERR_UNSUPPORTED,
                           "session: a q8_0 KV cache needs head sizes that are multiples of %d (keys %d, values %d); "
                           "use --kv-type f16", TELA_QK8_0, shape->k_dim, shape->v_dim);
    const size_t elt = q8 ? 0 : shape->dtype == TELA_KV_DTYPE_F16 ? 2 : 4;
    const double per_elt = q8 ? (double)sizeof(tela_block_q8_0) / TELA_QK8_0 : (double)elt;
    double bytes = (double)shape->n_layer * (double)shape->n_ctx * (double)(k_row + v_row) * per_elt;
    if (bytes > (double)SIZE_MAX / 2)
        return tela_errorf(TELA_ERR_NOMEM, "session: a KV cache of %.0f bytes is too large", bytes);
    cpu_kv *c = calloc(1, sizeof *c);
    if (!c) return tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    c->head.ops = &cpu_ops;
    c->head.shape = *shape;
    c->head.shape.dtype = q8 ? TELA_KV_DTYPE_Q8_0 : elt == 2 ? TELA_KV_DTYPE_F16 : TELA_KV_DTYPE_F32;
    c->k_row = k_row;
    c->v_row = v_row;
    c->elt = elt;
    const size_t per_layer = (size_t)shape->n_ctx;
    /* 64 bytes more: the kernels may read a whole vector at a row's end */
    c->k = calloc(kv_bytes(c, per_layer * k_row * (size_t)shape->n_layer) + 64, 1);
    c->v = calloc(kv_bytes(c, per_layer * v_row * (size_t)shape->n_layer) + 64, 1);
    if (!c->k || !c->v) {
        cpu_kv_free(&c->head);
        return tela_errorf(TELA_ERR_NOMEM, "session: out of memory for a KV cache of %d tokens (%.1f MiB)",
                           shape->n_ctx, bytes / (1024.0 * 1024.0));
    }
    const int32_t longest = shape->block_size > 0 ? shape->max_seq_len : shape->n_ctx;
    tela_status s = tela_threadpool_reserve(as_cpu(ex)->pool, tela_op_attention_scratch(longest, shape->k_dim));
    if (s != TELA_OK) {
        cpu_kv_free(&c->head);
        return s;
    }
    *out = &c->head;
    return TELA_OK;
}

tela_status tela_backend_cpu_create(int n_threads, tela_backend **out) {
    *out = NULL;
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    b->head.ops = &cpu_ops;
    b->head.kind = TELA_BACKEND_CPU;
    b->head.host_visible = true;
    b->head.preferred_batch = CPU_PREFERRED_BATCH;
    b->head.n_threads = n_threads > 0 ? n_threads : tela_cpu_count();
    snprintf(b->head.description, sizeof b->head.description, "cpu (%s, %d thread%s)", tela_qdot_kernels_label(),
             b->head.n_threads, b->head.n_threads == 1 ? "" : "s");
    *out = &b->head;
    return TELA_OK;
}
