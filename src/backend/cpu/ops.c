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
    if (!tela_op_type_supported(t->type)) {
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
    out->type = t->type;
    out->data = t->data;
    out->n_rows = t->ne[1];
    out->n_cols = t->ne[0];
    out->row_bytes = rb;
    return TELA_OK;
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

/* The exact reference path for quantized weights: off unless
 * tela_ops_set_exact_matmul(true) or TELA_EXACT_MATMUL=1 in the environment
 * (read on first use). 0 = unset, 1 = fast, 2 = exact. */
static atomic_int exact_mode;

void tela_ops_set_exact_matmul(bool exact) { atomic_store(&exact_mode, exact ? 2 : 1); }

bool tela_ops_exact_matmul(void) {
    int m = atomic_load(&exact_mode);
    if (m == 0) {
        const char *e = getenv("TELA_EXACT_MATMUL");
        m = e && e[0] && strcmp(e, "0") != 0 ? 2 : 1;
        int expected = 0;
        if (!atomic_compare_exchange_strong(&exact_mode, &expected, m)) m = expected;
    }
    return m == 2;
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
void tela_op_matmul(tela_threadpool *pool, const tela_mat *w, const float *x, int64_t x_stride, float *y,
                    int64_t y_stride, int n_tok) {
    if (n_tok <= 0) return;
    matmul_job job = {w, x, x_stride, y, y_stride, n_tok, pool, NULL, x, (size_t)x_stride * sizeof(float), 0, 1};
    const tela_qdot_traits *q = tela_qdot_get(w->type);
    if (q && w->n_cols % q->block_size == 0) {
        if (q->vec_dot_type == TELA_TYPE_F32) {
            job.q = q;
        } else if (!tela_ops_exact_matmul()) {
            size_t rb = tela_type_row_bytes(q->vec_dot_type, w->n_cols);
            size_t bytes = rb > 0 && (size_t)n_tok <= SIZE_MAX / rb ? rb * (size_t)n_tok : 0;
            void *buf = bytes ? tela_threadpool_shared(pool, bytes) : NULL;
            if (buf) { /* else: out of memory, take the exact path */
                job.q = q;
                job.xq = buf;
                job.xq_stride = rb;
                int nth = tela_threadpool_n_threads(pool);
                int n_qchunks = n_tok < 4 * nth ? n_tok : 4 * nth;
                job.tok_per_chunk = (n_tok + n_qchunks - 1) / n_qchunks;
                n_qchunks = (n_tok + job.tok_per_chunk - 1) / job.tok_per_chunk;
                tela_threadpool_run_chunks(pool, quantize_chunk, &job, n_qchunks);
            }
        }
    }
    long long tr = job.q && job.q->tile_rows > 0 ? job.q->tile_rows : 1;
    long long per = w->n_rows / (8LL * tela_threadpool_n_threads(pool));
    per = (per + tr - 1) / tr * tr;
    if (per < tr) per = tr;
    if (per < 4 && !job.q) per = 4;
    job.chunk_rows = per;
    tela_threadpool_run_chunks(pool, matmul_chunk, &job, (int)((w->n_rows + per - 1) / per));
}

void tela_op_get_rows(const tela_mat *w, const int32_t *ids, int n, float *out, int64_t out_stride) {
    for (int t = 0; t < n; t++) {
        float *dst = out + t * out_stride;
        const float *row = mat_row_f32(w, ids[t], dst);
        if (row != dst) memcpy(dst, row, (size_t)w->n_cols * sizeof(float));
    }
}

void tela_op_rmsnorm(float *out, int64_t out_stride, const float *x, int64_t x_stride, const float *w, int64_t n,
                     int n_tok, float eps) {
    for (int t = 0; t < n_tok; t++) {
        const float *xr = x + t * x_stride;
        float *o = out + t * out_stride;
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
        for (int64_t i = 0; i < n; i++) o[i] = w ? xr[i] * scale * w[i] : xr[i] * scale;
    }
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

void tela_op_swiglu(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void tela_op_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

typedef struct {
    const tela_attn_args *a;
    tela_threadpool *pool;
} attn_job;

typedef int32_t tela_v8i __attribute__((vector_size(32)));

/* exp(x) for 8 lanes with x <= 0 (softmax after subtracting the max):
 * x = k ln2 + r with |r| <= ln2/2, exp(r) by its Taylor polynomial to r^7
 * (relative error < 2e-8 plus rounding), times 2^k built in the exponent
 * bits. x is clamped to -87 (exp = 1.6e-38: nothing next to the max's 1),
 * which keeps 2^k normal. Several times faster than calling expf per
 * element, which dominated attention at long context. */
static inline void exp_v8_nonpos(tela_v8f *xp) {
    /* in place through a pointer: a 32-byte vector passed by value changes
     * the ABI in builds without AVX (TELA_NATIVE=OFF), which gcc warns of */
    tela_v8f x = *xp;
    const tela_v8f lo = {-87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f};
    tela_v8i below = x < lo;
    x = (tela_v8f)(((tela_v8i)x & ~below) | ((tela_v8i)lo & below));
    const float rnd = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    tela_v8f kf = (x * 1.44269504088896341f + rnd) - rnd;
    tela_v8f r = x - kf * 0.693145751953125f; /* ln2 split in two (Cody-Waite) */
    r = r - kf * 1.42860682030941723212e-6f;
    tela_v8f p = r * (1.0f / 5040) + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    tela_v8i k = __builtin_convertvector(kf, tela_v8i);
    tela_v8i scale = (k + 127) << 23;
    *xp = p * (tela_v8f)scale;
}

/* Softmax of n scores in place, 8 lanes at a time (the tail through a
 * padded vector, so every element takes the same steps). */
static void softmax_v8(float *x, int64_t n) {
    float mx = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    tela_v8f sum = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        tela_v8f e = *(tela_v8f *)(x + i) - mx;
        exp_v8_nonpos(&e);
        *(tela_v8f *)(x + i) = e;
        sum += e;
    }
    if (i < n) {
        tela_v8f t = {-100.f, -100.f, -100.f, -100.f, -100.f, -100.f, -100.f, -100.f};
        for (int64_t j = i; j < n; j++) t[j - i] = x[j] - mx;
        exp_v8_nonpos(&t);
        for (int64_t j = i; j < n; j++) {
            x[j] = t[j - i];
            sum[j - i] += t[j - i];
        }
    }
    float inv = 1.0f / (((sum[0] + sum[4]) + (sum[1] + sum[5])) + ((sum[2] + sum[6]) + (sum[3] + sum[7])));
    for (i = 0; i + 8 <= n; i += 8) *(tela_v8f *)(x + i) *= inv;
    for (; i < n; i++) x[i] *= inv;
}

/* o[d] = sum_p s[p] * v[p][d]: 32 output dims at a time held in registers
 * while the keys stream past (each o[d] sums over p in order). */
static void weighted_sum(float *o, const float *s, const float *v, int64_t v_stride, int64_t n_keys, int v_dim) {
    int d = 0;
    for (; d + 32 <= v_dim; d += 32) {
        tela_v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int64_t p = 0; p < n_keys; p++) {
            const float *vp = v + p * v_stride + d;
            float sp = s[p];
            a0 += sp * *(const tela_v8f *)vp;
            a1 += sp * *(const tela_v8f *)(vp + 8);
            a2 += sp * *(const tela_v8f *)(vp + 16);
            a3 += sp * *(const tela_v8f *)(vp + 24);
        }
        *(tela_v8f *)(o + d) = a0;
        *(tela_v8f *)(o + d + 8) = a1;
        *(tela_v8f *)(o + d + 16) = a2;
        *(tela_v8f *)(o + d + 24) = a3;
    }
    for (; d < v_dim; d++) {
        float acc = 0.0f;
        for (int64_t p = 0; p < n_keys; p++) acc += s[p] * v[p * v_stride + d];
        o[d] = acc;
    }
}

/* s[p] = dot(q, k[p]) * scale for n_keys keys (k_stride floats apart),
 * four keys at a time so that four independent accumulator chains hide
 * the FMA latency (one key at a time waits on a single chain). Each score
 * takes exactly tela_dot_f32's steps, so the result is the same. */
static void qk_scores(float *s, const float *q, const float *k, int64_t k_stride, int64_t n_keys, int k_dim,
                      float scale) {
    int64_t p = 0;
    if (k_dim % 8 == 0) {
        for (; p + 4 <= n_keys; p += 4) {
            const float *k0 = k + p * k_stride, *k1 = k0 + k_stride, *k2 = k1 + k_stride, *k3 = k2 + k_stride;
            tela_v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int i = 0; i < k_dim; i += 8) {
                tela_v8f qi = *(const tela_v8f *)(q + i);
                a0 += qi * *(const tela_v8f *)(k0 + i);
                a1 += qi * *(const tela_v8f *)(k1 + i);
                a2 += qi * *(const tela_v8f *)(k2 + i);
                a3 += qi * *(const tela_v8f *)(k3 + i);
            }
            s[p] = (((a0[0] + a0[4]) + (a0[1] + a0[5])) + ((a0[2] + a0[6]) + (a0[3] + a0[7]))) * scale;
            s[p + 1] = (((a1[0] + a1[4]) + (a1[1] + a1[5])) + ((a1[2] + a1[6]) + (a1[3] + a1[7]))) * scale;
            s[p + 2] = (((a2[0] + a2[4]) + (a2[1] + a2[5])) + ((a2[2] + a2[6]) + (a2[3] + a2[7]))) * scale;
            s[p + 3] = (((a3[0] + a3[4]) + (a3[1] + a3[5])) + ((a3[2] + a3[6]) + (a3[3] + a3[7]))) * scale;
        }
    }
    for (; p < n_keys; p++) s[p] = tela_dot_f32(q, k + p * k_stride, k_dim) * scale;
}

static void attention_task(void *arg, int ith, int nth) {
    const attn_job *job = arg;
    const tela_attn_args *a = job->a;
    long long n_items = (long long)a->n_tok * a->n_head;
    long long i0, i1;
    tela_split_range(n_items, ith, nth, &i0, &i1);
    float *scores = tela_threadpool_scratch(job->pool, ith);
    int group = a->n_head / a->n_kv_head;
    for (long long item = i0; item < i1; item++) {
        int t = (int)(item / a->n_head);
        int h = (int)(item % a->n_head);
        int kvh = h / group;
        const float *q = a->q + t * a->q_stride + (int64_t)h * a->k_dim;
        int64_t n_keys = (int64_t)a->pos0 + t + 1;
        qk_scores(scores, q, a->k + (int64_t)kvh * a->k_dim, a->k_stride, n_keys, a->k_dim, a->scale);
        softmax_v8(scores, n_keys);
        weighted_sum(a->out + t * a->out_stride + (int64_t)h * a->v_dim, scores, a->v + (int64_t)kvh * a->v_dim,
                     a->v_stride, n_keys, a->v_dim);
    }
}

void tela_op_attention(tela_threadpool *pool, const tela_attn_args *args) {
    attn_job job = {args, pool};
    tela_threadpool_run(pool, attention_task, &job);
}
