/* ops.c: the CPU backend's operations (matrix products over stored weight
 * types through the qdot kernels, with an exact dequantizing reference path;
 * RoPE, softmax; RMSNorm and SwiGLU split over the pool, their rows in
 * vecops.c; the attention is in attention.c). */
#include "backend/cpu/ops.h"
#include "backend/cpu/qdot.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/fp16.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef __F16C__
#include <immintrin.h>
#endif

bool tela_op_type_supported(tela_type type) {
    if (type == TELA_TYPE_F32 || type == TELA_TYPE_F16 || type == TELA_TYPE_BF16) return true;
    const tela_type_traits *tr = tela_type_get_traits(type);
    return tr && tr->can_dequantize;
}

size_t tela_op_matmul_scratch(int64_t n_cols) { return (size_t)n_cols; }

/* Row r of W as f32: a pointer into the weight for (aligned) F32, else
 * converted into buf (n_cols floats). Loads go through memcpy because a
 * safetensors tensor (or a GGUF with general.alignment 1) may start at any
 * byte offset. */
static const float *mat_row_f32(const tela_mat *w, int64_t r, float *buf) {
    const unsigned char *src = (const unsigned char *)w->data + (size_t)r * w->row_bytes;
    int64_t n = w->n_cols;
    uint16_t h;
    switch (w->type) {
    case TELA_TYPE_F32:
        if (((uintptr_t)src & (sizeof(float) - 1)) == 0) return (const float *)src;
        memcpy(buf, src, (size_t)n * sizeof(float));
        return buf;
    case TELA_TYPE_F16: {
        int64_t i = 0;
#ifdef __F16C__
        /* The hardware conversion is exact, like tela_f16_to_f32. */
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(buf + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i))));
#endif
        for (; i < n; i++) {
            memcpy(&h, src + 2 * i, 2);
            buf[i] = tela_f16_to_f32(h);
        }
        return buf;
    }
    case TELA_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            memcpy(&h, src + 2 * i, 2);
            buf[i] = tela_bf16_to_f32(h);
        }
        return buf;
    default:
        /* The type was checked when the view was made, so this cannot fail. */
        (void)tela_dequantize_row(w->type, src, buf, n);
        return buf;
    }
}

/* Eight lanes of floats (GCC/Clang vector extension), loadable from any
 * float address. Lane j accumulates elements j, j+8, j+16, ... */
typedef float tela_v8f __attribute__((vector_size(32), aligned(4), may_alias));

float tela_dot_f32(const float *a, const float *b, int64_t n) {
    tela_v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc += *(const tela_v8f *)(a + i) * *(const tela_v8f *)(b + i);
    for (int j = 0; i < n; i++, j++) acc[j] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

typedef struct {
    const tela_mat *w;
    const float *x;
    int64_t x_stride;
    float *y;
    int64_t y_stride;
    int n_tok;
    tela_threadpool *pool;
    const tela_qdot_traits *q; /* the qdot kernels, or NULL for the exact path */
    bool packed;               /* use q->packing on w->packed (chunks of whole groups) */
    const void *xq;            /* activation rows in q's vec_dot type */
    size_t xq_stride;          /* bytes between them */
    long long chunk_rows;      /* rows per chunk (a multiple of tile_rows) */
    int tok_per_chunk;         /* for the activation quantization */
} matmul_job;

/* One chunk of weight rows against all tokens. Chunks are fixed by the
 * shape, and the kernels' results do not depend on the tiling, so the
 * output does not depend on which thread ran which chunk. */
static void matmul_chunk(void *arg, int chunk, int ith) {
    const matmul_job *job = arg;
    const tela_mat *w = job->w;
    long long r0 = (long long)chunk * job->chunk_rows;
    long long r1 = r0 + job->chunk_rows < w->n_rows ? r0 + job->chunk_rows : w->n_rows;
    if (job->packed) {
        const int64_t pr = job->q->packing.pack_rows;
        job->q->packing.gemm(w->packed, w->n_rows, r0 / pr, (r1 + pr - 1) / pr, job->xq, job->xq_stride, job->n_tok,
                             w->n_cols, job->y, job->y_stride);
        return;
    }
    if (job->q) {
        job->q->gemm((const unsigned char *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, r1 - r0, job->xq,
                     job->xq_stride, job->n_tok, w->n_cols, job->y + r0, job->y_stride);
        return;
    }
    float *buf = tela_threadpool_scratch(job->pool, ith);
    for (long long r = r0; r < r1; r++) {
        const float *row = mat_row_f32(w, r, buf);
        for (int t = 0; t < job->n_tok; t++)
            job->y[t * job->y_stride + r] = tela_dot_f32(row, job->x + t * job->x_stride, w->n_cols);
    }
}

/* Activation rows of one chunk of tokens -> the vec_dot type. */
static void quantize_chunk(void *arg, int chunk, int ith) {
    const matmul_job *job = arg;
    (void)ith;
    int t0 = chunk * job->tok_per_chunk;
    int t1 = t0 + job->tok_per_chunk < job->n_tok ? t0 + job->tok_per_chunk : job->n_tok;
    for (int t = t0; t < t1; t++)
        job->q->from_float(job->x + t * job->x_stride, (unsigned char *)job->xq + (size_t)t * job->xq_stride,
                           job->w->n_cols);
}

/* Every weight type goes to the qdot kernels. Float weights (F32, F16,
 * BF16) take the f32 activations as they are; quantized ones take them
 * quantized once per op to Q8_0 / Q8_K (as llama.cpp does), so the dot
 * products run in int8 (VNNI): faster, at the cost of the activations'
 * 8-bit rounding. The exact path (tela_ops_set_exact_matmul) dequantizes
 * each weight row and dots it in f32, for parity tests. Rows are handed
 * out in chunks (a multiple of the kernel's tile rows, about 8 per thread)
 * to whichever thread is free. */
/* Up to this many matrices go in one dispatch of tela_op_matmul_many. */
#define MATMUL_MANY_MAX 8

/* The chunks of several matmuls as one list: chunk c belongs to the job j
 * with first[j] <= c < first[j + 1]. */
typedef struct {
    matmul_job *jobs;
    int n;
    int first[MATMUL_MANY_MAX + 1];
} matmul_many_job;

static void matmul_many_chunk(void *arg, int chunk, int ith) {
    matmul_many_job *m = arg;
    int j = 0;
    while (chunk >= m->first[j + 1]) j++;
    matmul_chunk(&m->jobs[j], chunk - m->first[j], ith);
}

/* Whether W's matmul quantizes the activations, and to which type. */
static const tela_qdot_traits *quantizing_traits(const tela_mat *w) {
    const tela_qdot_traits *q = tela_qdot_get(w->type);
    if (!q || w->n_cols % q->block_size != 0 || q->vec_dot_type == TELA_TYPE_F32 || tela_ops_exact_matmul())
        return NULL;
    return q;
}

void tela_op_matmul_many(tela_threadpool *pool, const tela_matmul_target *t, int n, const float *x, int64_t x_stride,
                         int n_tok) {
    if (n_tok <= 0 || n <= 0) return;
    if (n > MATMUL_MANY_MAX) {
        tela_op_matmul_many(pool, t, MATMUL_MANY_MAX, x, x_stride, n_tok);
        tela_op_matmul_many(pool, t + MATMUL_MANY_MAX, n - MATMUL_MANY_MAX, x, x_stride, n_tok);
        return;
    }
    /* One quantization of x serves every matrix that wants the same
     * activation type and length; otherwise one dispatch per matrix. */
    const tela_qdot_traits *qz = NULL;
    for (int i = 0; i < n; i++) {
        const tela_qdot_traits *q = quantizing_traits(t[i].w);
        if (!q) continue;
        if (qz && (q->vec_dot_type != qz->vec_dot_type || t[i].w->n_cols != t[0].w->n_cols)) {
            for (int k = 0; k < n; k++) tela_op_matmul_many(pool, &t[k], 1, x, x_stride, n_tok);
            return;
        }
        if (!qz) qz = q;
    }
    matmul_job jobs[MATMUL_MANY_MAX];
    const void *xq = NULL;
    size_t xq_stride = 0;
    if (qz) {
        const int64_t n_cols = t[0].w->n_cols;
        size_t rb = tela_type_row_bytes(qz->vec_dot_type, n_cols);
        size_t bytes = rb > 0 && (size_t)n_tok <= SIZE_MAX / rb ? rb * (size_t)n_tok : 0;
        void *buf = bytes ? tela_threadpool_shared(pool, bytes) : NULL;
        if (buf) { /* else: out of memory, take the exact path */
            matmul_job qj = {t[0].w, x, x_stride, NULL, 0, n_tok, pool, qz, false, buf, rb, 0, 1};
            for (int i = 0; i < n; i++)
                if (quantizing_traits(t[i].w)) qj.w = t[i].w;
            int nth = tela_threadpool_n_threads(pool);
            int n_qchunks = n_tok < 4 * nth ? n_tok : 4 * nth;
            qj.tok_per_chunk = (n_tok + n_qchunks - 1) / n_qchunks;
            n_qchunks = (n_tok + qj.tok_per_chunk - 1) / qj.tok_per_chunk;
            tela_threadpool_run_chunks(pool, quantize_chunk, &qj, n_qchunks);
            xq = buf;
            xq_stride = rb;
        }
    }
    matmul_many_job m = {jobs, n, {0}};
    for (int i = 0; i < n; i++) {
        const tela_mat *w = t[i].w;
        matmul_job *job = &jobs[i];
        *job = (matmul_job){w, x, x_stride, t[i].y, t[i].y_stride, n_tok, pool, NULL, false, x,
                            (size_t)x_stride * sizeof(float), 0, 1};
        const tela_qdot_traits *q = tela_qdot_get(w->type);
        if (q && w->n_cols % q->block_size == 0) {
            if (q->vec_dot_type == TELA_TYPE_F32) {
                job->q = q;
            } else if (xq && quantizing_traits(w)) {
                job->q = q;
                job->xq = xq;
                job->xq_stride = xq_stride;
            }
        }
        job->packed = job->q && w->packed && job->q->packing.pack_rows > 0;
        long long tr = job->packed ? job->q->packing.pack_rows : job->q && job->q->tile_rows > 0 ? job->q->tile_rows : 1;
        long long per = w->n_rows / (8LL * tela_threadpool_n_threads(pool));
        per = (per + tr - 1) / tr * tr;
        if (per < tr) per = tr;
        if (per < 4 && !job->q) per = 4;
        job->chunk_rows = per;
        m.first[i + 1] = m.first[i] + (int)((w->n_rows + per - 1) / per);
    }
    tela_threadpool_run_chunks(pool, matmul_many_chunk, &m, m.first[n]);
}

void tela_op_matmul(tela_threadpool *pool, const tela_mat *w, const float *x, int64_t x_stride, float *y,
                    int64_t y_stride, int n_tok) {
    const tela_matmul_target t = {w, y, y_stride};
    tela_op_matmul_many(pool, &t, 1, x, x_stride, n_tok);
}

/* The packing of W's type on this CPU, or NULL (see tela_op_pack_bytes). */
static const tela_qdot_packing *mat_packing(const tela_mat *w) {
    const tela_qdot_traits *q = tela_qdot_get(w->type);
    if (!q || q->packing.pack_rows <= 0 || w->n_cols % q->block_size != 0) return NULL;
    if (q->vec_dot_type != TELA_TYPE_F32 && tela_ops_exact_matmul()) return NULL;
    const char *e = getenv("TELA_PACK");
    if (e && !strcmp(e, "0")) return NULL;
    return &q->packing;
}

size_t tela_op_pack_bytes(const tela_mat *w) {
    const tela_qdot_packing *p = mat_packing(w);
    if (!p) return 0;
    int64_t groups = (w->n_rows + p->pack_rows - 1) / p->pack_rows;
    size_t gb = p->group_bytes(w->n_cols);
    if (gb == 0 || (uint64_t)groups > SIZE_MAX / gb) return 0;
    return gb * (size_t)groups;
}

typedef struct {
    const tela_mat *w;
    const tela_qdot_packing *p;
    void *buf;
    int64_t groups_per_chunk, n_groups;
} pack_job;

static void pack_chunk(void *arg, int chunk, int ith) {
    const pack_job *job = arg;
    (void)ith;
    int64_t g0 = chunk * job->groups_per_chunk;
    int64_t g1 = g0 + job->groups_per_chunk < job->n_groups ? g0 + job->groups_per_chunk : job->n_groups;
    job->p->pack(job->w->data, job->w->row_bytes, job->w->n_rows, job->w->n_cols, g0, g1, job->buf);
}

void tela_op_pack(tela_threadpool *pool, tela_mat *w, void *buf) {
    const tela_qdot_packing *p = mat_packing(w);
    if (!p || !buf) return;
    pack_job job = {w, p, buf, 0, (w->n_rows + p->pack_rows - 1) / p->pack_rows};
    job.groups_per_chunk = job.n_groups / (16LL * tela_threadpool_n_threads(pool));
    if (job.groups_per_chunk < 1) job.groups_per_chunk = 1;
    tela_threadpool_run_chunks(pool, pack_chunk, &job,
                               (int)((job.n_groups + job.groups_per_chunk - 1) / job.groups_per_chunk));
    w->packed = buf;
}

void tela_op_get_rows(const tela_mat *w, const int32_t *ids, int n, float *out, int64_t out_stride) {
    for (int t = 0; t < n; t++) {
        float *dst = out + t * out_stride;
        const float *row = mat_row_f32(w, ids[t], dst);
        if (row != dst) memcpy(dst, row, (size_t)w->n_cols * sizeof(float));
    }
}

void tela_op_get_rows_part(const tela_mat *w, int64_t row0, bool accumulate, const int32_t *ids, int n, float *out,
                           int64_t out_stride, float *scratch) {
    for (int t = 0; t < n; t++) {
        float *dst = out + t * out_stride;
        const int64_t id = (int64_t)ids[t] - row0;
        if (id < 0 || id >= w->n_rows) {
            if (!accumulate) memset(dst, 0, (size_t)w->n_cols * sizeof(float));
            continue;
        }
        const float *row = mat_row_f32(w, (int32_t)id, accumulate ? scratch : dst);
        if (!accumulate) {
            if (row != dst) memcpy(dst, row, (size_t)w->n_cols * sizeof(float));
            continue;
        }
        for (int64_t c = 0; c < w->n_cols; c++) dst[c] += row[c];
    }
}

typedef struct {
    float *out;
    int64_t out_stride;
    const float *x;
    int64_t x_stride;
    const float *w;
    int64_t n;
    int n_tok, per;
    float eps;
} rmsnorm_job;

static void rmsnorm_chunk(void *arg, int chunk, int ith) {
    const rmsnorm_job *j = arg;
    (void)ith;
    const int t0 = chunk * j->per, t1 = t0 + j->per < j->n_tok ? t0 + j->per : j->n_tok;
    tela_op_rmsnorm(j->out + t0 * j->out_stride, j->out_stride, j->x + t0 * j->x_stride, j->x_stride, j->w, j->n,
                    t1 - t0, j->eps);
}

void tela_op_rmsnorm_pool(tela_threadpool *pool, float *out, int64_t out_stride, const float *x, int64_t x_stride,
                          const float *w, int64_t n, int n_tok, float eps) {
    const int per = (int)(16384 / (n > 0 ? n : 1)) + 1; /* ~16K elements a chunk */
    if (!pool || n_tok <= per) {
        tela_op_rmsnorm(out, out_stride, x, x_stride, w, n, n_tok, eps);
        return;
    }
    rmsnorm_job j = {out, out_stride, x, x_stride, w, n, n_tok, per, eps};
    tela_threadpool_run_chunks(pool, rmsnorm_chunk, &j, (n_tok + per - 1) / per);
}

void tela_rope_table(float *cs, const int32_t *pos, int n_tok, const double *inv_freq, int n_rot) {
    int half = n_rot / 2;
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < half; i++) {
            double theta = (double)pos[t] * inv_freq[i];
            cs[((size_t)t * half + i) * 2] = (float)cos(theta);
            cs[((size_t)t * half + i) * 2 + 1] = (float)sin(theta);
        }
    }
}

void tela_op_rope(float *x, int64_t x_stride, int n_tok, int n_heads, int head_dim, int n_rot, const float *cs,
                  tela_rope_mode mode) {
    int half = n_rot / 2;
    for (int t = 0; t < n_tok; t++) {
        const float *c = cs + (size_t)t * half * 2;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + t * x_stride + (int64_t)h * head_dim;
            for (int i = 0; i < half; i++) {
                int i0 = mode == TELA_ROPE_ADJACENT ? 2 * i : i;
                int i1 = mode == TELA_ROPE_ADJACENT ? 2 * i + 1 : i + half;
                float co = c[2 * i], si = c[2 * i + 1];
                float x0 = v[i0], x1 = v[i1];
                v[i0] = x0 * co - x1 * si;
                v[i1] = x0 * si + x1 * co;
            }
        }
    }
}

void tela_op_softmax(float *x, int64_t n) {
    if (n <= 0) return;
    float mx = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

typedef struct {
    float *gate;
    const float *up;
    int64_t n, per;
} swiglu_job;

static void swiglu_chunk(void *arg, int chunk, int ith) {
    const swiglu_job *j = arg;
    (void)ith;
    const int64_t i0 = chunk * j->per, i1 = i0 + j->per < j->n ? i0 + j->per : j->n;
    tela_op_swiglu(j->gate + i0, j->up + i0, i1 - i0);
}

void tela_op_swiglu_pool(tela_threadpool *pool, float *gate, const float *up, int64_t n) {
    /* a multiple of 16, so chunk borders do not change any element's steps;
     * below a few of them (one token's worth when decoding) a dispatch to
     * the pool costs more than it saves */
    const int64_t per = 8192;
    if (!pool || n <= 4 * per) {
        tela_op_swiglu(gate, up, n);
        return;
    }
    swiglu_job j = {gate, up, n, per};
    tela_threadpool_run_chunks(pool, swiglu_chunk, &j, (int)((n + per - 1) / per));
}

void tela_op_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}
