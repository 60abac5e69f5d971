/* ops.c: the CPU backend's operations (matrix products over stored weight
 * types through the qdot kernels, with an exact dequantizing reference path;
 * RMSNorm, RoPE, softmax, SwiGLU, causal grouped-query attention). */
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

typedef double tela_v8d __attribute__((vector_size(64)));

void tela_op_rmsnorm(float *out, int64_t out_stride, const float *x, int64_t x_stride, const float *w, int64_t n,
                     int n_tok, float eps) {
    for (int t = 0; t < n_tok; t++) {
        const float *xr = x + t * x_stride;
        float *o = out + t * out_stride;
        /* sum of squares in double, 8 lanes (element i in lane i % 8) */
        tela_v8d acc = {0};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const tela_v8f v = *(const tela_v8f *)(xr + i);
            const tela_v8d d = __builtin_convertvector(v, tela_v8d);
            acc += d * d;
        }
        for (int j = 0; i < n; i++, j++) acc[j] += (double)xr[i] * xr[i];
        const double ss = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
        for (i = 0; i < n; i++) o[i] = w ? xr[i] * scale * w[i] : xr[i] * scale;
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

typedef float tela_v16f __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t tela_v16i __attribute__((vector_size(64), aligned(4), may_alias));

/* exp(x) for 16 lanes, any finite x or -inf: x = k ln2 + r with |r| <=
 * ln2/2 (Cody-Waite), exp(r) by its Taylor polynomial to r^7 (truncation
 * below 6e-9 relative, a few ulp with rounding), times 2^k built in the
 * exponent bits. x is clamped to [-87, 88] so 2^k stays a normal float:
 * results saturate at exp(88) = 1.7e38 above and at 1.6e-38 below, or 0
 * from x < -104 (where expf underflows too). */
static inline void exp_v16(tela_v16f *xp) {
    tela_v16f x = *xp;
    const tela_v16i dead = x < -104.0f;
    const tela_v16i lo = x < -87.0f, hi = x > 88.0f;
    x = (tela_v16f)(((tela_v16i)x & ~(lo | hi)) | ((tela_v16i)((tela_v16f){0} - 87.0f) & lo) |
                    ((tela_v16i)((tela_v16f){0} + 88.0f) & hi));
    const float rnd = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    tela_v16f kf = (x * 1.44269504088896341f + rnd) - rnd;
    tela_v16f r = x - kf * 0.693145751953125f;
    r = r - kf * 1.42860682030941723212e-6f;
    tela_v16f p = r * (1.0f / 5040) + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    tela_v16i k = __builtin_convertvector(kf, tela_v16i);
    tela_v16i scale = (k + 127) << 23;
    *xp = (tela_v16f)((tela_v16i)(p * (tela_v16f)scale) & ~dead);
}

/* silu(g) * u = g / (1 + exp(-g)) * u, 16 at a time (the tail through a
 * padded vector, so every element takes the same steps). */
void tela_op_swiglu(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i < n; i += 16) {
        tela_v16f g = {0}, u = {0};
        const int64_t m = n - i < 16 ? n - i : 16;
        if (m == 16) {
            g = *(const tela_v16f *)(gate + i);
            u = *(const tela_v16f *)(up + i);
        } else {
            for (int64_t j = 0; j < m; j++) g[j] = gate[i + j], u[j] = up[i + j];
        }
        tela_v16f e = -g;
        exp_v16(&e);
        const tela_v16f y = g / (1.0f + e) * u;
        if (m == 16)
            *(tela_v16f *)(gate + i) = y;
        else
            for (int64_t j = 0; j < m; j++) gate[i + j] = y[j];
    }
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

/* ---------------------------------------------------------- attention
 *
 * The rows of one KV head's queries (the query heads sharing it, for every
 * token of the batch) are taken 16 at a time, one row per vector lane, so
 * that every step is a vector operation over independent rows:
 *   1. scores: S[p][l] = (q_l . k_p) * scale for the keys p of the block
 *      (16 keys in 16 accumulators, the query rows transposed once so that
 *      each key element is a broadcast), -inf past row l's causal limit;
 *   2. softmax per lane: the max over p is an element-wise max, then
 *      e = exp(S - max) (a vectorized exp), sum over p element-wise;
 *   3. values: o_l = sum_p e[p][l] v_p / sum_l, 4 rows x 64 value dims at a
 *      time in registers while the value rows stream past.
 * Each row's arithmetic (every sum in order over d or p) is its own lane's,
 * whatever rows share the vector, so results do not depend on the batch
 * split, the thread count, or whether a token was prefilled or decoded. */

#define ATT_LANES 16

/* Macros, not functions: without AVX-512 a 64-byte vector passed by value
 * changes the ABI (gcc warns). fma1 is FMA16 on one lane. */
#if defined(__AVX512F__)
#define FMA16(a, b, c) ((tela_v16f)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define SPLAT16(x) ((tela_v16f)_mm512_set1_ps(x))
static inline float fma1(float a, float b, float c) { return fmaf(a, b, c); }
#else
#define FMA16(a, b, c) ((a) * (b) + (c))
#define SPLAT16(x) ((tela_v16f){0} + (x))
static inline float fma1(float a, float b, float c) { return a * b + c; }
#endif

/* Full unrolling keeps the small accumulator arrays below in registers. */
#if defined(__clang__)
#define ATT_UNROLL _Pragma("clang loop unroll(full)")
#else
#define ATT_UNROLL _Pragma("GCC unroll 16")
#endif

/* Rows per block: up to ATT_MAX_ROWS (4 vectors of lanes) when the
 * per-thread scratch holds their scores, which lets the score kernel load
 * each key element once for 4 row vectors. */
#define ATT_MAX_ROWS 64

size_t tela_op_attention_scratch(int n_ctx, int k_dim) {
    const size_t rows = n_ctx <= 16384 ? ATT_MAX_ROWS : ATT_LANES;
    /* queries and scores, then ATT_LANES f16 key rows as floats */
    return rows * ((size_t)n_ctx + (size_t)k_dim + 4) + 16 + ATT_LANES * (size_t)k_dim + 16;
}

/* One sequence's share of the dispatch: its rows are cut into blocks of
 * qb * ATT_LANES rows per KV head; chunks [chunk0, chunk0 + n_blocks *
 * n_kv_head) are its. */
typedef struct {
    const tela_attn_args *a;
    int group;          /* query heads per KV head */
    int qb;             /* vectors of ATT_LANES rows per block (1, 2 or 4) */
    long long n_rows;   /* rows per KV head: n_tok * group */
    long long n_blocks; /* blocks of qb * ATT_LANES rows per KV head */
    int chunk0;
} attn_part;

typedef struct {
    tela_threadpool *pool;
    const attn_part *parts;
    int n_parts;
} attn_job;

/* The cache row of position p (see tela_attn_args). */
static inline int64_t attn_row(const tela_attn_args *a, int64_t p) {
    return a->blocks ? (int64_t)a->blocks[p / a->block_size] * a->block_size + p % a->block_size : p;
}

/* Sixteen f16 values as floats (F16C where the build has AVX-512);
 * written through a pointer: without AVX-512 a 64-byte vector returned by
 * value changes the ABI (gcc warns). */
static inline void load16_f16(tela_v16f *out, const uint16_t *p) {
#if defined(__AVX512F__)
    *out = (tela_v16f)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#else
    for (int i = 0; i < 16; i++) (*out)[i] = tela_f16_to_f32(p[i]);
#endif
}

/* The Q8_0 block holding element i of a cache array, and its scale. */
static inline const unsigned char *q8_block(const void *base, int64_t i) {
    return (const unsigned char *)base + ((uint64_t)i / TELA_QK8_0) * sizeof(tela_block_q8_0);
}
static inline float q8_scale(const unsigned char *blk) {
    uint16_t d;
    memcpy(&d, blk, sizeof d);
#if defined(__F16C__)
    return _cvtsh_ss(d); /* the same exact conversion in one instruction */
#else
    return tela_f16_to_f32(d);
#endif
}

/* Sixteen Q8_0 values from element i (a multiple of 16) as floats:
 * int8 x scale, tela_dequantize_row's arithmetic. */
static inline void load16_q8(tela_v16f *out, const void *base, int64_t i) {
    const unsigned char *blk = q8_block(base, i);
    const int8_t *qs = (const int8_t *)(blk + 2) + (uint64_t)i % TELA_QK8_0;
    const float d = q8_scale(blk);
#if defined(__AVX512F__)
    *out = (tela_v16f)_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)qs))),
                                    _mm512_set1_ps(d));
#else
    for (int j = 0; j < 16; j++) (*out)[j] = (float)qs[j] * d;
#endif
}

/* Element i of a cache array of any precision. */
static inline float kv_at(const tela_attn_args *a, const void *base, int64_t i) {
    if (a->kv_q8) {
        const unsigned char *blk = q8_block(base, i);
        return (float)((const int8_t *)(blk + 2))[i % TELA_QK8_0] * q8_scale(blk);
    }
    return a->kv_f16 ? tela_f16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

/* Sixteen elements of a cache array from element i (a multiple of 16). */
static inline void load16_at(const tela_attn_args *a, tela_v16f *out, const void *base, int64_t i) {
    if (a->kv_q8)
        load16_q8(out, base, i);
    else if (a->kv_f16)
        load16_f16(out, (const uint16_t *)base + i);
    else
        *out = *(const tela_v16f *)((const float *)base + i);
}

/* n elements of an f16 or Q8_0 row (from element i of base) as floats. */
static inline void kv_row_f32(const tela_attn_args *a, float *dst, const void *base, int64_t i, int n) {
    int j = 0;
    if (i % 16 == 0)
        for (; j + 16 <= n; j += 16) load16_at(a, (tela_v16f *)(dst + j), base, i + j);
    for (; j < n; j++) dst[j] = kv_at(a, base, i + j);
}

/* The address of element i of a cache array (whole Q8_0 blocks). */
static inline const void *kv_elem(const tela_attn_args *a, const void *base, int64_t i) {
    if (a->kv_q8) return q8_block(base, i);
    return (const char *)base + i * (a->kv_f16 ? 2 : 4);
}

/* Scores of 16 / QB keys starting at p0 against QB vectors of transposed
 * queries (qt[d][row], R = QB * 16 rows); keys past n_keys repeat the last
 * one (the causal mask removes them). st[p][row], mx[b] per row vector. */
static inline __attribute__((always_inline)) void attn_scores(const int QB, float *st, const float *qt,
                                                              const tela_attn_args *a, const void *kbase,
                                                              int64_t k_stride, int k_dim, int64_t p0,
                                                              int64_t n_keys, float scale, const tela_v16i *limit,
                                                              tela_v16f *mx, float *kconv) {
    const int KB = ATT_LANES / QB, R = QB * ATT_LANES;
    const float *kp[ATT_LANES];
    ATT_UNROLL for (int j = 0; j < KB; j++) {
        const int64_t off = attn_row(a, p0 + j < n_keys ? p0 + j : n_keys - 1) * k_stride;
        if (a->kv_f16 || a->kv_q8) { /* the f16 or Q8_0 rows converted once for the block's rows */
            kv_row_f32(a, kconv + (size_t)j * (size_t)k_dim, kbase, off, k_dim);
            kp[j] = kconv + (size_t)j * (size_t)k_dim;
        } else {
            kp[j] = (const float *)kbase + off;
        }
    }
    tela_v16f acc[ATT_LANES];
    ATT_UNROLL for (int i = 0; i < ATT_LANES; i++) acc[i] = (tela_v16f){0};
    for (int d = 0; d < k_dim; d++) {
        tela_v16f q[4];
        ATT_UNROLL for (int b = 0; b < QB; b++) q[b] = *(const tela_v16f *)(qt + d * R + b * ATT_LANES);
        ATT_UNROLL for (int j = 0; j < KB; j++) {
            const tela_v16f kv = SPLAT16(kp[j][d]);
            ATT_UNROLL for (int b = 0; b < QB; b++) acc[b * KB + j] = FMA16(q[b], kv, acc[b * KB + j]);
        }
    }
    const tela_v16f ninf = (tela_v16f){0} - __builtin_inff();
    ATT_UNROLL for (int j = 0; j < KB; j++) {
        if (p0 + j >= n_keys) break;
        ATT_UNROLL for (int b = 0; b < QB; b++) {
            const tela_v16i masked = (tela_v16i){0} + (int32_t)(p0 + j) > limit[b];
            tela_v16f v = acc[b * KB + j] * scale;
            v = (tela_v16f)(((tela_v16i)v & ~masked) | ((tela_v16i)ninf & masked));
            const tela_v16i gt = v > mx[b];
            mx[b] = (tela_v16f)(((tela_v16i)mx[b] & ~gt) | ((tela_v16i)v & gt));
            *(tela_v16f *)(st + (p0 + j) * R + b * ATT_LANES) = v;
        }
    }
}

/* o[r][d0..d0+63] (4 rows) += sum_p e[p][row_r] v_p over keys [p_begin,
 * p_end), e = st with R floats per key, the sums continuing from what o
 * holds (zero before the first keys): a block's rows take the keys tile
 * by tile, so that the tile's value rows stay in cache for all its rows,
 * and each sum still runs over p in order. The keys are walked in runs of
 * consecutive cache rows (a paged cache's blocks). */
static inline void attn_values_4x64(float *const *o, const int *row, const float *st, int R,
                                    const tela_attn_args *a, const void *vbase, int64_t v_stride, int64_t p_begin,
                                    int64_t p_end, int d0) {
    tela_v16f acc[4][4];
    ATT_UNROLL for (int r = 0; r < 4; r++)
        ATT_UNROLL for (int i = 0; i < 4; i++) acc[r][i] = *(const tela_v16f *)(o[r] + d0 + 16 * i);
    const int64_t run = a->blocks ? a->block_size : p_end;
    for (int64_t p = p_begin; p < p_end;) {
        const int64_t end = p - p % run + run < p_end ? p - p % run + run : p_end;
        int64_t off = attn_row(a, p) * v_stride + d0;
        for (; p < end; p++, off += v_stride) {
            tela_v16f v0, v1, v2, v3;
            load16_at(a, &v0, vbase, off), load16_at(a, &v1, vbase, off + 16), load16_at(a, &v2, vbase, off + 32),
                load16_at(a, &v3, vbase, off + 48);
            const float *e = st + p * R;
            ATT_UNROLL for (int r = 0; r < 4; r++) {
                const tela_v16f w = SPLAT16(e[row[r]]);
                acc[r][0] = FMA16(w, v0, acc[r][0]);
                acc[r][1] = FMA16(w, v1, acc[r][1]);
                acc[r][2] = FMA16(w, v2, acc[r][2]);
                acc[r][3] = FMA16(w, v3, acc[r][3]);
            }
        }
    }
    ATT_UNROLL for (int r = 0; r < 4; r++)
        ATT_UNROLL for (int i = 0; i < 4; i++) *(tela_v16f *)(o[r] + d0 + 16 * i) = acc[r][i];
}

#if defined(__AVX512F__)
/* In-place transpose of 16 vectors of 16 floats: r[i][j] -> r[j][i]. The
 * loops unrolled in full, or gcc keeps r and t in memory and every stage
 * goes through the stack. */
static inline __attribute__((always_inline)) void transpose16x16(__m512 *r) {
    __m512 t[16];
    ATT_UNROLL for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    ATT_UNROLL for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    /* rows now hold 4-element pieces: combine 128-bit lanes across groups */
    ATT_UNROLL for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    ATT_UNROLL for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
    }
}
#endif

#if defined(__AVX512F__)
/* Keys ahead of the score pass that it prefetches. */
#define KEY_PREFETCH 32

/* load16_at as an __m512. */
static inline __m512 load16_kv(const tela_attn_args *a, const void *base, int64_t off) {
    tela_v16f v;
    load16_at(a, &v, base, off);
    return (__m512)v;
}

/* Rows of an attention block of at most 4 rows (a decoding token's query
 * heads of one KV head): keys in the vector lanes instead of rows, so no
 * lane is idle. The arithmetic of each score, exp, sum and value sum is
 * the row path's, in the same order (the keys of 16 positions transposed
 * so that the sum over d stays one FMA chain per score; the softmax sum a
 * scalar chain over p), so a decoded token gets the bits a prefilled one
 * does. Needs k_dim % 16 == 0 and v_dim % 64 == 0; s holds 4 rows of
 * n_keys rounded up to 16 scores. */
static inline __attribute__((always_inline)) void attention_few_rows(const int n_rows, const tela_attn_args *a,
                                                                     const float *const *q, float *const *o,
                                                                     const int32_t *limit, int64_t n_keys,
                                                                     const void *kbase, const void *vbase, float *s) {
    const int64_t n_pad = (n_keys + 15) / 16 * 16;
    const int kd = a->k_dim;
    __m512 mx[4];
    for (int r = 0; r < 4; r++) mx[r] = _mm512_set1_ps(-__builtin_inff());
    /* 1. scores, 16 keys at a time */
    for (int64_t p0 = 0; p0 < n_keys; p0 += 16) {
        int64_t off[16];
        for (int j = 0; j < 16; j++) off[j] = attn_row(a, p0 + j < n_keys ? p0 + j : n_keys - 1) * a->k_stride;
        if (p0 + KEY_PREFETCH + 16 <= n_keys) /* the rows read in column order defeat the hardware prefetcher */
            for (int j = 0; j < 16; j++) {
                const int64_t e = attn_row(a, p0 + KEY_PREFETCH + j) * a->k_stride;
                const char *row = kv_elem(a, kbase, e), *end = kv_elem(a, kbase, e + kd);
                for (; row < end; row += 64) _mm_prefetch(row, _MM_HINT_T0);
            }
        __m512 acc[4];
        for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
        for (int d0 = 0; d0 < kd; d0 += 16) {
            __m512 kt[16];
            ATT_UNROLL for (int j = 0; j < 16; j++) kt[j] = load16_kv(a, kbase, off[j] + d0);
            transpose16x16(kt);
            ATT_UNROLL for (int dd = 0; dd < 16; dd++)
                ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d0 + dd]), kt[dd], acc[r]);
        }
        const __m512i pos = _mm512_add_epi32(_mm512_set1_epi32((int32_t)p0),
                                             _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
        ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) {
            const __mmask16 masked = _mm512_cmpgt_epi32_mask(pos, _mm512_set1_epi32(limit[r]));
            const __m512 v = _mm512_mask_mov_ps(_mm512_mul_ps(acc[r], _mm512_set1_ps(a->scale)), masked,
                                                _mm512_set1_ps(-__builtin_inff()));
            mx[r] = _mm512_max_ps(mx[r], v);
            _mm512_storeu_ps(s + r * n_pad + p0, v);
        }
    }
    /* 2. exp and the sums, each a chain over p in order */
    float sum[4] = {0, 0, 0, 0};
    ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) {
        const tela_v16f m = SPLAT16(_mm512_reduce_max_ps(mx[r]));
        float *sr = s + r * n_pad;
        for (int64_t p = 0; p < n_keys; p += 16) {
            tela_v16f e = *(tela_v16f *)(sr + p) - m;
            exp_v16(&e);
            *(tela_v16f *)(sr + p) = e;
        }
    }
    /* 3. weighted values, 64 dimensions of every row at a time, the value
     * rows walked in runs of consecutive cache rows; the first 64 also add
     * up the sums (the same chains over p in order, hidden under the FMAs
     * instead of a pass of their own) */
    const int64_t run = a->blocks ? a->block_size : n_keys;
    for (int d0 = 0; d0 < a->v_dim; d0 += 64) {
        __m512 acc[4][4];
        for (int r = 0; r < 4; r++)
            for (int i = 0; i < 4; i++) acc[r][i] = _mm512_setzero_ps();
        for (int64_t p = 0; p < n_keys;) {
            const int64_t end = p - p % run + run < n_keys ? p - p % run + run : n_keys;
            int64_t off = attn_row(a, p) * a->v_stride + d0;
            for (; p < end; p++, off += a->v_stride) {
                const __m512 v0 = load16_kv(a, vbase, off), v1 = load16_kv(a, vbase, off + 16),
                             v2 = load16_kv(a, vbase, off + 32), v3 = load16_kv(a, vbase, off + 48);
                if (d0 == 0) ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) sum[r] += s[r * n_pad + p];
                ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) {
                    const __m512 w = _mm512_set1_ps(s[r * n_pad + p]);
                    acc[r][0] = _mm512_fmadd_ps(w, v0, acc[r][0]);
                    acc[r][1] = _mm512_fmadd_ps(w, v1, acc[r][1]);
                    acc[r][2] = _mm512_fmadd_ps(w, v2, acc[r][2]);
                    acc[r][3] = _mm512_fmadd_ps(w, v3, acc[r][3]);
                }
            }
        }
        ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows)
            for (int i = 0; i < 4; i++) _mm512_storeu_ps(o[r] + d0 + 16 * i, acc[r][i]);
    }
    ATT_UNROLL for (int r = 0; r < 4; r++) if (r < n_rows) {
        const float inv = 1.0f / sum[r];
        for (int d = 0; d < a->v_dim; d++) o[r][d] *= inv;
    }
}

/* attention_few_rows for a run-time row count (the loops over rows
 * unrolled for each). */
static void attention_few_rows_n(int n_rows, const tela_attn_args *a, const float *const *q, float *const *o,
                                 const int32_t *limit, int64_t n_keys, const void *kbase, const void *vbase, float *s) {
    switch (n_rows) {
    case 1: attention_few_rows(1, a, q, o, limit, n_keys, kbase, vbase, s); break;
    case 2: attention_few_rows(2, a, q, o, limit, n_keys, kbase, vbase, s); break;
    case 3: attention_few_rows(3, a, q, o, limit, n_keys, kbase, vbase, s); break;
    default: attention_few_rows(4, a, q, o, limit, n_keys, kbase, vbase, s); break;
    }
}
#endif

/* Keys per tile of the values pass: 128 value rows of up to 256 floats
 * (128 KiB) stay in L2 while every row group of the block takes them. */
#define ATT_KEY_TILE 128

/* Block `chunk` of rows: the part whose chunks hold it, then KV head
 * c / n_blocks of that part, rows (t, head in group) numbered
 * t * group + j. */
static void attention_block(void *arg, int chunk, int ith) {
    const attn_job *jobs = arg;
    int pi = 0;
    while (pi + 1 < jobs->n_parts && chunk >= jobs->parts[pi + 1].chunk0) pi++;
    const attn_part *job = &jobs->parts[pi];
    chunk -= job->chunk0;
    const tela_attn_args *a = job->a;
    const int QB = job->qb, R = QB * ATT_LANES;
    const int kvh = (int)(chunk / job->n_blocks);
    const long long r0 = (chunk % job->n_blocks) * R;
    const int n_rows = (int)(job->n_rows - r0 < R ? job->n_rows - r0 : R);
    float *scratch = tela_threadpool_scratch(jobs->pool, ith);
    float *qt = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *st = qt + (size_t)R * (a->k_dim + 4);
    int tok[ATT_MAX_ROWS], head[ATT_MAX_ROWS];
    tela_v16i limit[4];
    int64_t n_keys = 0;
    for (int l = 0; l < R; l++) {
        const long long r = r0 + (l < n_rows ? l : n_rows - 1);
        tok[l] = (int)(r / job->group);
        head[l] = kvh * job->group + (int)(r % job->group);
        limit[l / ATT_LANES][l % ATT_LANES] = l < n_rows ? a->pos0 + tok[l] : -1;
        if (l < n_rows && a->pos0 + tok[l] + 1 > n_keys) n_keys = a->pos0 + tok[l] + 1;
    }
    const void *kbase = kv_elem(a, a->k, (int64_t)kvh * (a->k_head_stride ? a->k_head_stride : a->k_dim));
    const void *vbase = kv_elem(a, a->v, (int64_t)kvh * (a->v_head_stride ? a->v_head_stride : a->v_dim));
#if defined(__AVX512F__)
    if (n_rows <= 4 && a->k_dim % 16 == 0 && a->v_dim % 64 == 0) { /* a decoding token's rows */
        const float *qr[4];
        float *orow[4];
        int32_t lim[4];
        for (int l = 0; l < n_rows; l++) {
            qr[l] = a->q + tok[l] * a->q_stride + (int64_t)head[l] * a->k_dim;
            orow[l] = a->out + tok[l] * a->out_stride + (int64_t)head[l] * a->v_dim;
            lim[l] = a->pos0 + tok[l];
        }
        attention_few_rows_n(n_rows, a, qr, orow, lim, n_keys, kbase, vbase, qt);
        return;
    }
#endif
    for (int l = 0; l < R; l++) {
        const float *q = a->q + tok[l] * a->q_stride + (int64_t)head[l] * a->k_dim;
        for (int d = 0; d < a->k_dim; d++) qt[d * R + l] = q[d];
    }
    /* 1. scores and their row maxima */
    tela_v16f mx[4];
    for (int b = 0; b < 4; b++) mx[b] = (tela_v16f){0} - __builtin_inff();
    float *kconv = st + (size_t)R * (size_t)n_keys; /* f16 keys as floats, ATT_LANES rows */
    kconv = (float *)(((uintptr_t)kconv + 63) & ~(uintptr_t)63);
    const int kb = ATT_LANES / QB;
    for (int64_t p0 = 0; p0 < n_keys; p0 += kb) {
        if (QB == 4)
            attn_scores(4, st, qt, a, kbase, a->k_stride, a->k_dim, p0, n_keys, a->scale, limit, mx, kconv);
        else if (QB == 2)
            attn_scores(2, st, qt, a, kbase, a->k_stride, a->k_dim, p0, n_keys, a->scale, limit, mx, kconv);
        else
            attn_scores(1, st, qt, a, kbase, a->k_stride, a->k_dim, p0, n_keys, a->scale, limit, mx, kconv);
    }
    /* 2. exp and sums (masked scores are -inf: exp gives 0) */
    tela_v16f sum[4] = {{0}, {0}, {0}, {0}};
    for (int64_t p = 0; p < n_keys; p++)
        for (int b = 0; b < QB; b++) {
            tela_v16f e = *(tela_v16f *)(st + p * R + b * ATT_LANES) - mx[b];
            exp_v16(&e);
            *(tela_v16f *)(st + p * R + b * ATT_LANES) = e;
            sum[b] += e;
        }
    /* 3. weighted values: tile by tile of keys, 4 rows x 64 dimensions at a
     * time (the full groups of 4 rows, the multiples of 64 dimensions), then
     * the rest one element at a time, then the normalization */
    const int n_full = n_rows / 4 * 4, d_full = a->v_dim / 64 * 64;
    float *o_of[ATT_MAX_ROWS];
    for (int l = 0; l < n_rows; l++) o_of[l] = a->out + tok[l] * a->out_stride + (int64_t)head[l] * a->v_dim;
    if (d_full > 0)
        for (int l = 0; l < n_full; l++) memset(o_of[l], 0, sizeof(float) * (size_t)d_full);
    if (d_full > 0)
        for (int64_t kt = 0; kt < n_keys; kt += ATT_KEY_TILE) {
            const int64_t kend = kt + ATT_KEY_TILE < n_keys ? kt + ATT_KEY_TILE : n_keys;
            for (int l0 = 0; l0 < n_full; l0 += 4) {
                const int row[4] = {l0, l0 + 1, l0 + 2, l0 + 3};
                float *o[4] = {o_of[l0], o_of[l0 + 1], o_of[l0 + 2], o_of[l0 + 3]};
                for (int d0 = 0; d0 < d_full; d0 += 64) attn_values_4x64(o, row, st, R, a, vbase, a->v_stride, kt, kend, d0);
            }
        }
    for (int l = 0; l < n_rows; l++) {
        float *o = o_of[l];
        for (int d = l < n_full ? d_full : 0; d < a->v_dim; d++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < n_keys; p++) acc = fma1(st[p * R + l], kv_at(a, vbase, attn_row(a, p) * a->v_stride + d), acc);
            o[d] = acc;
        }
        const float inv = 1.0f / sum[l / ATT_LANES][l % ATT_LANES];
        for (int d = 0; d < a->v_dim; d++) o[d] *= inv;
    }
}

void tela_op_attention(tela_threadpool *pool, const tela_attn_args *args, int n_args) {
    attn_part stack[16], *parts = n_args <= 16 ? stack : malloc((size_t)n_args * sizeof *parts);
    if (!parts) { /* no memory for the table: one dispatch each */
        for (int i = 0; i < n_args; i++) tela_op_attention(pool, args + i, 1);
        return;
    }
    int chunks = 0;
    for (int i = 0; i < n_args; i++) {
        const tela_attn_args *a = &args[i];
        attn_part *job = &parts[i];
        *job = (attn_part){a, a->n_head / a->n_kv_head, 1, 0, 0, chunks};
        job->n_rows = (long long)a->n_tok * job->group;
        /* as many row vectors per block as there are rows and scratch for */
        const size_t per_row = (size_t)a->pos0 + (size_t)a->n_tok + (size_t)a->k_dim + 4;
        const size_t kconv = ATT_LANES * (size_t)a->k_dim + 32;
        while (job->qb < 4 && job->n_rows > (long long)job->qb * ATT_LANES &&
               tela_threadpool_scratch_size(pool) >= (size_t)(2 * job->qb * ATT_LANES) * per_row + 16 + kconv)
            job->qb *= 2;
        job->n_blocks = (job->n_rows + job->qb * ATT_LANES - 1) / (job->qb * ATT_LANES);
        chunks += (int)(job->n_blocks * a->n_kv_head);
    }
    attn_job job = {pool, parts, n_args};
    tela_threadpool_run_chunks(pool, attention_block, &job, chunks);
    if (parts != stack) free(parts);
}
