/* cuda_elementwise.cu: the small kernels of a forward pass: RMSNorm (sum
 * of squares in double, as the CPU does), residual adds, SwiGLU, the RoPE
 * table (angles in double) and rotation, the greedy argmax, and stores into
 * the KV cache at the positions read from device memory. */
#include "backend/cuda/cuda_common.cuh"

#include <string.h>

/* --------------------------------------------------------------- rmsnorm */

static __global__ void rmsnorm_kernel(float *out, int64_t out_stride, const float *x, int64_t x_stride,
                                      const float *w, int64_t n, float eps) {
    TELA_PDL_ENTRY();
    const int64_t r = blockIdx.x;
    const float *xr = x + r * x_stride;
    float *orow = out + r * out_stride;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * xr[i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __shared__ double part[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        ss = lane < (int)(blockDim.x / 32) ? part[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) part[0] = ss;
    }
    __syncthreads();
    const float scale = (float)(1.0 / sqrt(part[0] / (double)n + (double)eps));
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i] * scale;
        orow[i] = w ? v * w[i] : v;
    }
}

void tela_cuda_rmsnorm(cuda_exec *ex, float *out, int64_t out_stride, const float *x, int64_t x_stride, const float *w,
                       int64_t n, int n_rows, float eps) {
    if (n_rows <= 0) return;
    const int threads = n >= 1024 ? 1024 : n >= 256 ? 256 : 64;
    tela_cuda_launch(ex, rmsnorm_kernel, (unsigned)n_rows, threads, 0, out, out_stride, x, x_stride, w, n, eps);
    tela_cuda_launched(ex, "rmsnorm");
}

/* ------------------------------------------------------ add and SwiGLU */

static __global__ void add_kernel(float *y, const float *x, int64_t n) {
    TELA_PDL_ENTRY();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

static unsigned grid_1d(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b > 4096 ? 4096 : (b < 1 ? 1 : b));
}

void tela_cuda_add(cuda_exec *ex, float *y, const float *x, int64_t n) {
    if (n <= 0) return;
    tela_cuda_launch(ex, add_kernel, grid_1d(n), 256, 0, y, x, n);
    tela_cuda_launched(ex, "add");
}

/* Span copies (tela_exec_copy_spans): blockIdx.y the span; 16-byte
 * moves where both ends are aligned, else one float at a time. */
#define COPY_SPANS_MAX 64

struct copy_spans_params {
    tela_copy_span s[COPY_SPANS_MAX];
};

static __global__ void copy_spans_kernel(const copy_spans_params p) {
    TELA_PDL_ENTRY();
    const tela_copy_span sp = p.s[blockIdx.y];
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if ((((uintptr_t)sp.dst | (uintptr_t)sp.src) & 15) == 0) {
        const int64_t n4 = sp.n / 4;
        for (int64_t i = i0; i < n4; i += stride) ((float4 *)sp.dst)[i] = ((const float4 *)sp.src)[i];
        for (int64_t i = 4 * n4 + i0; i < sp.n; i += stride) sp.dst[i] = sp.src[i];
    } else {
        for (int64_t i = i0; i < sp.n; i += stride) sp.dst[i] = sp.src[i];
    }
}

void tela_cuda_copy_spans(cuda_exec *ex, const tela_copy_span *spans, int n) {
    for (int base = 0; base < n; base += COPY_SPANS_MAX) {
        const int m = n - base < COPY_SPANS_MAX ? n - base : COPY_SPANS_MAX;
        copy_spans_params p;
        memset(&p, 0, sizeof p);
        int64_t longest = 0;
        for (int i = 0; i < m; i++) {
            p.s[i] = spans[base + i];
            longest = spans[base + i].n > longest ? spans[base + i].n : longest;
        }
        if (longest <= 0) continue;
        int64_t blocks = (longest / 4 + 255) / 256;
        blocks = blocks < 1 ? 1 : blocks > 256 ? 256 : blocks;
        tela_cuda_launch(ex, copy_spans_kernel, dim3((unsigned)blocks, (unsigned)m), 256, 0, p);
        if (!tela_cuda_launched(ex, "span copies")) return;
    }
}

static __global__ void swiglu_kernel(float *gate, int64_t gs, const float *up, int64_t us, int64_t n, int n_rows) {
    TELA_PDL_ENTRY();
    const int64_t total = n * n_rows;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / n, c = i % n;
        const float g = gate[r * gs + c];
        gate[r * gs + c] = g / (1.0f + expf(-g)) * up[r * us + c];
    }
}

void tela_cuda_swiglu(cuda_exec *ex, float *gate, int64_t gate_stride, const float *up, int64_t up_stride, int64_t n,
                      int n_rows) {
    tela_cuda_launch(ex, swiglu_kernel, grid_1d(n * n_rows), 256, 0, gate, gate_stride, up, up_stride, n, n_rows);
    tela_cuda_launched(ex, "swiglu");
}

/* ------------------------------------------------------------------ RoPE */

static __global__ void rope_table_kernel(float *cs, const int32_t *pos, int n_tok, const double *inv_freq, int half) {
    TELA_PDL_ENTRY();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_tok * half) return;
    const int t = i / half, f = i % half;
    const double a = (double)pos[t] * inv_freq[f];
    cs[(size_t)t * 2 * half + 2 * f] = (float)cos(a);
    cs[(size_t)t * 2 * half + 2 * f + 1] = (float)sin(a);
}

void tela_cuda_rope_table(cuda_exec *ex, float *cs, const int32_t *pos, int n_tok, const double *inv_freq, int n_rot) {
    const int n = n_tok * (n_rot / 2);
    if (n <= 0) return;
    tela_cuda_launch(ex, rope_table_kernel, (unsigned)((n + 127) / 128), 128, 0, cs, pos, n_tok, inv_freq, n_rot / 2);
    tela_cuda_launched(ex, "rope table");
}

static __global__ void rope_kernel(float *x, int64_t x_stride, int n_tok, int n_heads, int head_dim, int half,
                                   const float *cs, int adjacent) {
    TELA_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n_tok * n_heads * half) return;
    const int f = (int)(i % half);
    const int h = (int)((i / half) % n_heads);
    const int t = (int)(i / ((int64_t)half * n_heads));
    float *v = x + (size_t)t * x_stride + (size_t)h * head_dim;
    const float c = cs[(size_t)t * 2 * half + 2 * f], s = cs[(size_t)t * 2 * half + 2 * f + 1];
    const int i0 = adjacent ? 2 * f : f, i1 = adjacent ? 2 * f + 1 : f + half;
    const float2 r = tela_rope_pair(v[i0], v[i1], c, s);
    v[i0] = r.x;
    v[i1] = r.y;
}

void tela_cuda_rope(cuda_exec *ex, float *x, int64_t x_stride, int n_tok, int n_heads, int head_dim, int n_rot,
                    const float *cs, tela_rope_mode mode) {
    const int64_t n = (int64_t)n_tok * n_heads * (n_rot / 2);
    if (n <= 0) return;
    tela_cuda_launch(ex, rope_kernel, (unsigned)((n + 255) / 256), 256, 0, x, x_stride, n_tok, n_heads, head_dim, n_rot / 2,
                                                                      cs, mode == TELA_ROPE_ADJACENT);
    tela_cuda_launched(ex, "rope");
}

/* ---------------------------------------------------------------- argmax */

/* The largest value, the lowest index among equals; NaN never wins. */
static __device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi) {
    return v > bv || (v == bv && i < bi);
}

static __global__ void argmax_kernel(const float *x, int64_t n, int32_t *out) {
    TELA_PDL_ENTRY();
    x += (size_t)blockIdx.x * n; /* a block a row */
    out += blockIdx.x;
    float bv = -INFINITY;
    int64_t bi = n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        if (better(x[i], i, bv, bi)) bv = x[i], bi = i;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        bv = lane < (int)(blockDim.x / 32) ? sv[lane] : -INFINITY;
        bi = lane < (int)(blockDim.x / 32) ? si[lane] : n;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
        }
        if (lane == 0) out[0] = (int32_t)(bi < n ? bi : 0);
    }
}

void tela_cuda_argmax(cuda_exec *ex, const float *x, int64_t n, int n_rows, int32_t *out) {
    tela_cuda_launch(ex, argmax_kernel, (unsigned)n_rows, 1024, 0, x, n, out);
    tela_cuda_launched(ex, "argmax");
}

/* -------------------------------------------------------------- KV store */

template <typename T>
static __global__ void kv_store_kernel(T *cache, int n_ctx, int n_kv_head, int dim, const float *src,
                                       int64_t src_stride, const int32_t *pos, int n_tok) {
    TELA_PDL_ENTRY();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t row = (int64_t)n_kv_head * dim;
    if (i >= row * n_tok) return;
    const int t = (int)(i / row), h = (int)((i % row) / dim), d = (int)(i % dim);
    cache[((size_t)h * n_ctx + pos[t]) * dim + d] = (T)src[(size_t)t * src_stride + (size_t)h * dim + d];
}

void tela_cuda_kv_store(cuda_exec *ex, cuda_kv *kv, int layer, const float *k, int64_t k_stride, const float *v,
                        int64_t v_stride, const int32_t *pos, int n_tok) {
    const tela_kv_shape *s = &kv->head.shape;
    const size_t kl = (size_t)s->n_kv_head * s->n_ctx * s->k_dim, vl = (size_t)s->n_kv_head * s->n_ctx * s->v_dim;
    const int64_t nk = (int64_t)n_tok * s->n_kv_head * s->k_dim, nv = (int64_t)n_tok * s->n_kv_head * s->v_dim;
    if (s->dtype == TELA_KV_DTYPE_F16) {
        __half *kc = (__half *)kv->k + layer * kl, *vc = (__half *)kv->v + layer * vl;
        tela_cuda_launch(ex, kv_store_kernel<__half>, (unsigned)((nk + 255) / 256), 256, 0, kc, s->n_ctx, s->n_kv_head,
                                                                                       s->k_dim, k, k_stride, pos, n_tok);
        tela_cuda_launch(ex, kv_store_kernel<__half>, (unsigned)((nv + 255) / 256), 256, 0, vc, s->n_ctx, s->n_kv_head,
                                                                                       s->v_dim, v, v_stride, pos, n_tok);
    } else {
        float *kc = (float *)kv->k + layer * kl, *vc = (float *)kv->v + layer * vl;
        tela_cuda_launch(ex, kv_store_kernel<float>, (unsigned)((nk + 255) / 256), 256, 0, kc, s->n_ctx, s->n_kv_head,
                                                                                      s->k_dim, k, k_stride, pos, n_tok);
        tela_cuda_launch(ex, kv_store_kernel<float>, (unsigned)((nv + 255) / 256), 256, 0, vc, s->n_ctx, s->n_kv_head,
                                                                                      s->v_dim, v, v_stride, pos, n_tok);
    }
    tela_cuda_launched(ex, "kv store");
}

/* ------------------------------------------------------- RoPE and store */

/* One index space: the RoPE pairs of q (rotated in place), then every
 * element of k (rotated where in the first n_rot dims) and of v, written
 * into the cache at the token's position. */
template <typename T>
static __global__ void rope_store_kernel(float *q, int64_t q_stride, int n_head, const float *k, int64_t k_stride,
                                         const float *v, int64_t v_stride, T *kc, T *vc, int n_ctx, int n_kv_head,
                                         int kd, int vd, const int32_t *pos, int n_tok, const float *cs, int n_rot,
                                         int adjacent) {
    TELA_PDL_ENTRY();
    const int half = n_rot / 2;
    const int64_t nq = (int64_t)n_tok * n_head * half, nk = (int64_t)n_tok * n_kv_head * kd;
    const int64_t nv = (int64_t)n_tok * n_kv_head * vd;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nq) {
        const int f = (int)(i % half), h = (int)((i / half) % n_head), t = (int)(i / ((int64_t)half * n_head));
        float *x = q + (size_t)t * q_stride + (size_t)h * kd;
        const float c = cs[(size_t)t * n_rot + 2 * f], s = cs[(size_t)t * n_rot + 2 * f + 1];
        const int i0 = adjacent ? 2 * f : f, i1 = adjacent ? 2 * f + 1 : f + half;
        const float2 r = tela_rope_pair(x[i0], x[i1], c, s);
        x[i0] = r.x;
        x[i1] = r.y;
        return;
    }
    i -= nq;
    if (i < nk) {
        const int d = (int)(i % kd), h = (int)((i / kd) % n_kv_head), t = (int)(i / ((int64_t)kd * n_kv_head));
        const float *x = k + (size_t)t * k_stride + (size_t)h * kd;
        kc[((size_t)h * n_ctx + pos[t]) * kd + d] = (T)tela_rope_elem(x, d, cs + (size_t)t * n_rot, n_rot, adjacent);
        return;
    }
    i -= nk;
    if (i < nv) {
        const int d = (int)(i % vd), h = (int)((i / vd) % n_kv_head), t = (int)(i / ((int64_t)vd * n_kv_head));
        vc[((size_t)h * n_ctx + pos[t]) * vd + d] = (T)v[(size_t)t * v_stride + (size_t)h * vd + d];
    }
}

/* Qwen3.5's head norms, the RoPE and the store in one pass, a warp a
 * head row: token t's query heads (read from the norms' src, normalized,
 * rotated, written to q), its key heads (normalized, rotated, into the
 * cache), its value heads (into the cache). The norm is rmsnorm_kernel's
 * (a double sum, the same scale and products) and the rotation
 * rope_store_kernel's, so the values are those of the three launches it
 * replaces. Head size kd <= NORM_ROPE_MAX_HD. */
#define NORM_ROPE_MAX_HD 512
template <typename T>
static __global__ void __launch_bounds__(128)
norm_rope_store_kernel(const float *src, int64_t src_stride, int64_t src_head, const float *qw, const float *kw,
                       float eps, float *q, int64_t q_stride, int n_head, const float *k, int64_t k_stride,
                       const float *v, int64_t v_stride, T *kc, T *vc, int n_ctx, int n_kv_head, int kd, int vd,
                       const int32_t *pos, int n_tok, const float *cs, int n_rot, int adjacent) {
    TELA_PDL_ENTRY();
    __shared__ float buf[4][NORM_ROPE_MAX_HD];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, per_tok = n_head + 2 * n_kv_head;
    const int64_t item = (int64_t)blockIdx.x * 4 + warp;
    if (item >= (int64_t)n_tok * per_tok) return;
    const int t = (int)(item / per_tok), hh = (int)(item % per_tok);
    if (hh >= n_head + n_kv_head) {
        const int h = hh - n_head - n_kv_head;
        const float *x = v + (size_t)t * v_stride + (size_t)h * vd;
        T *dst = vc + ((size_t)h * n_ctx + pos[t]) * vd;
        for (int d = lane; d < vd; d += 32) dst[d] = (T)x[d];
        return;
    }
    const bool is_q = hh < n_head;
    const int h = is_q ? hh : hh - n_head;
    const float *x = is_q ? src + (size_t)t * src_stride + (size_t)h * src_head : k + (size_t)t * k_stride + (size_t)h * kd;
    const float *w = is_q ? qw : kw;
    float *b = buf[warp];
    double ss = 0.0;
    for (int d = lane; d < kd; d += 32) {
        const float e = x[d];
        b[d] = e;
        ss += (double)e * e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float scale = (float)(1.0 / sqrt(ss / (double)kd + (double)eps));
    for (int d = lane; d < kd; d += 32) b[d] = (b[d] * scale) * w[d];
    __syncwarp();
    for (int d = lane; d < kd; d += 32) {
        const float r = tela_rope_elem(b, d, cs + (size_t)t * n_rot, n_rot, adjacent);
        if (is_q) q[(size_t)t * q_stride + (size_t)h * kd + d] = r;
        else kc[((size_t)h * n_ctx + pos[t]) * kd + d] = (T)r;
    }
}

/* The head norms as rmsnorm launches (where the fused kernel does not
 * take the shape, or TELA_CUDA_NORM_ROPE=0): rows of n heads of hd floats,
 * token t's head h at x + t * x_stride + h * x_head, into out (heads hd
 * apart, rows out_stride). */
static void head_norms(cuda_exec *ex, float *out, int64_t out_stride, const float *x, int64_t x_stride, int64_t x_head,
                       const float *w, int n, int hd, int n_tok, float eps) {
    if (x_stride == n * x_head && out_stride == (int64_t)n * hd) {
        tela_cuda_rmsnorm(ex, out, hd, x, x_head, w, hd, n_tok * n, eps);
        return;
    }
    for (int t = 0; t < n_tok; t++)
        tela_cuda_rmsnorm(ex, out + (size_t)t * out_stride, hd, x + (size_t)t * x_stride, x_head, w, hd, n, eps);
}

void tela_cuda_rope_store(cuda_exec *ex, cuda_kv *kv, int layer, float *q, int64_t q_stride, int n_head,
                          float *k, int64_t k_stride, const float *v, int64_t v_stride, const int32_t *pos,
                          int n_tok, const float *cs, int n_rot, tela_rope_mode mode, const tela_head_norms *norms) {
    const tela_kv_shape *s = &kv->head.shape;
    const size_t kl = (size_t)s->n_kv_head * s->n_ctx * s->k_dim, vl = (size_t)s->n_kv_head * s->n_ctx * s->v_dim;
    if (norms && ex->norm_rope && s->k_dim <= NORM_ROPE_MAX_HD && n_rot % 2 == 0 && n_rot <= s->k_dim) {
        const int64_t items = (int64_t)n_tok * (n_head + 2 * s->n_kv_head);
        const unsigned blocks = (unsigned)((items + 3) / 4);
        const int adj = mode == TELA_ROPE_ADJACENT;
        if (s->dtype == TELA_KV_DTYPE_F16)
            tela_cuda_launch(ex, norm_rope_store_kernel<__half>, blocks, 128, 0, norms->src, norms->src_stride,
                norms->src_head, norms->q_w, norms->k_w, norms->eps, q, q_stride, n_head, k, k_stride, v, v_stride,
                (__half *)kv->k + layer * kl, (__half *)kv->v + layer * vl, s->n_ctx, s->n_kv_head, s->k_dim, s->v_dim,
                pos, n_tok, cs, n_rot, adj);
        else
            tela_cuda_launch(ex, norm_rope_store_kernel<float>, blocks, 128, 0, norms->src, norms->src_stride,
                norms->src_head, norms->q_w, norms->k_w, norms->eps, q, q_stride, n_head, k, k_stride, v, v_stride,
                (float *)kv->k + layer * kl, (float *)kv->v + layer * vl, s->n_ctx, s->n_kv_head, s->k_dim, s->v_dim,
                pos, n_tok, cs, n_rot, adj);
        tela_cuda_launched(ex, "head norms, rope and store");
        return;
    }
    if (norms) {
        head_norms(ex, q, q_stride, norms->src, norms->src_stride, norms->src_head, norms->q_w, n_head, s->k_dim, n_tok,
                   norms->eps);
        head_norms(ex, k, k_stride, k, k_stride, s->k_dim, norms->k_w, s->n_kv_head, s->k_dim, n_tok, norms->eps);
    }
    const int64_t n = (int64_t)n_tok * (n_head * (n_rot / 2) + s->n_kv_head * (s->k_dim + s->v_dim));
    const unsigned blocks = (unsigned)((n + 255) / 256);
    const int adj = mode == TELA_ROPE_ADJACENT;
    if (s->dtype == TELA_KV_DTYPE_F16)
        tela_cuda_launch(ex, rope_store_kernel<__half>, blocks, 256, 0,
            q, q_stride, n_head, k, k_stride, v, v_stride, (__half *)kv->k + layer * kl, (__half *)kv->v + layer * vl,
            s->n_ctx, s->n_kv_head, s->k_dim, s->v_dim, pos, n_tok, cs, n_rot, adj);
    else
        tela_cuda_launch(ex, rope_store_kernel<float>, blocks, 256, 0,
            q, q_stride, n_head, k, k_stride, v, v_stride, (float *)kv->k + layer * kl, (float *)kv->v + layer * vl,
            s->n_ctx, s->n_kv_head, s->k_dim, s->v_dim, pos, n_tok, cs, n_rot, adj);
    tela_cuda_launched(ex, "rope and store");
}
