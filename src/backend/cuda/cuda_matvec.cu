/* cuda_matvec.cu: products with weight matrices on the GPU, in their
 * stored type (the GPU layouts of cuda_common.cuh):
 *  - gemv: decode steps (1..8 tokens). One warp per weight row, 16 rows
 *    per block. Quantized weights: the block first quantizes the
 *    activations to int8 per 32 (with the scale and the scaled sum of each
 *    32), as the CPU kernels do, into shared memory; each lane then takes
 *    units of the row (a quarter of a 256-block for the K-quants, a
 *    32-block for Q8_0/Q4_0) and forms the integer sums with dp4a. Float
 *    weights: 16-byte loads converted to f32 and fused multiply-adds with
 *    f32 activations. A warp reduction gives each row's result. For one
 *    token (every decode step) the defaults are the early-load kernels
 *    (gemv_fx_kernel, gemv3_q_kernel): their first weight loads are issued
 *    before the PDL wait; the float one then stages the activations (the
 *    norm applied) in shared memory; the quantized ones read activations quantized
 *    by quantize_act_kernel, stored in the order their lanes read them
 *    (act_pos8), and take the rows of some matrices with two warps each
 *    (gemv3_split).
 *  - gemm: prefill. Quantized weights are dequantized to f16 in panels of
 *    rows into scratch, the activations converted to f16 (bf16 for BF16
 *    weights), and cuBLAS multiplies them with f32 accumulation.
 *  - exact: f32 activations and accumulation, one weight element at a
 *    time through tela_cuda_weight (the parity tests' mode, and an
 *    independent check of the fast kernels' unpacking).
 *  - get_rows: embedding rows through the same element function. */
#include "backend/cuda/cuda_act.cuh"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- layouts */

static int64_t n_blocks(tela_type type, int64_t n_cols) {
    return type == TELA_TYPE_Q8_0 || type == TELA_TYPE_Q4_0 ? n_cols / 32 : n_cols / 256;
}

bool tela_cuda_type_ok(tela_type type) {
    switch (type) {
    case TELA_TYPE_F32: case TELA_TYPE_F16: case TELA_TYPE_BF16: case TELA_TYPE_Q8_0: case TELA_TYPE_Q4_0:
    case TELA_TYPE_Q4_K: case TELA_TYPE_Q5_K: case TELA_TYPE_Q6_K: return true;
    default: return false;
    }
}

size_t tela_cuda_layout_bytes(tela_type type, int64_t n_rows, int64_t n_cols) {
    const size_t R = (size_t)n_rows, nb = (size_t)n_blocks(type, n_cols);
    switch (type) {
    case TELA_TYPE_F32: return R * (size_t)n_cols * 4;
    case TELA_TYPE_F16: case TELA_TYPE_BF16: return R * (size_t)n_cols * 2;
    case TELA_TYPE_Q4_K: return R * nb * 144;
    case TELA_TYPE_Q5_K: return R * nb * 176;
    case TELA_TYPE_Q8_0: return tela_cuda_align(R * (size_t)n_cols) + R * nb * 2;
    case TELA_TYPE_Q4_0: return tela_cuda_align(R * (size_t)n_cols / 2) + R * nb * 2;
    case TELA_TYPE_Q6_K: return tela_cuda_align(R * nb * 192) + tela_cuda_align(R * nb * 16) + R * nb * 2;
    default: return 0;
    }
}

void tela_cuda_layout_rows(tela_type type, int64_t n_rows, int64_t n_cols, const void *src, size_t row_bytes,
                           int64_t r0, int64_t nr, void *dst) {
    const unsigned char *s = (const unsigned char *)src;
    unsigned char *d = (unsigned char *)dst;
    const size_t R = (size_t)n_rows, nb = (size_t)n_blocks(type, n_cols);
    switch (type) {
    case TELA_TYPE_Q8_0: {
        unsigned char *qs = d, *sc = d + tela_cuda_align(R * (size_t)n_cols);
        for (int64_t r = r0; r < r0 + nr; r++)
            for (size_t b = 0; b < nb; b++) {
                const unsigned char *blk = s + (size_t)r * row_bytes + b * 34;
                memcpy(sc + ((size_t)r * nb + b) * 2, blk, 2);
                memcpy(qs + (size_t)r * (size_t)n_cols + b * 32, blk + 2, 32);
            }
        return;
    }
    case TELA_TYPE_Q4_0: {
        unsigned char *qs = d, *sc = d + tela_cuda_align(R * (size_t)n_cols / 2);
        for (int64_t r = r0; r < r0 + nr; r++)
            for (size_t b = 0; b < nb; b++) {
                const unsigned char *blk = s + (size_t)r * row_bytes + b * 18;
                memcpy(sc + ((size_t)r * nb + b) * 2, blk, 2);
                memcpy(qs + (size_t)r * (size_t)n_cols / 2 + b * 16, blk + 2, 16);
            }
        return;
    }
    case TELA_TYPE_Q6_K: {
        unsigned char *q = d, *sc = d + tela_cuda_align(R * nb * 192);
        unsigned char *dd = sc + tela_cuda_align(R * nb * 16);
        for (int64_t r = r0; r < r0 + nr; r++)
            for (size_t b = 0; b < nb; b++) {
                const unsigned char *blk = s + (size_t)r * row_bytes + b * 210;
                const size_t i = (size_t)r * nb + b;
                memcpy(q + i * 192, blk, 192);          /* ql[128], qh[64] */
                memcpy(sc + i * 16, blk + 192, 16);     /* scales */
                memcpy(dd + i * 2, blk + 208, 2);       /* d */
            }
        return;
    }
    default:
        memcpy(d + (size_t)r0 * row_bytes, s + (size_t)r0 * row_bytes, (size_t)nr * row_bytes);
        return;
    }
}

/* ------------------------------------------------------- element access */

struct wview {
    const uint8_t *p;
    int64_t n_rows, n_cols;
};

static __device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
static __device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
static __device__ __forceinline__ uint16_t ld16(const uint8_t *p) { return *(const uint16_t *)p; }

/* Scale and min j of a Q4_K/Q5_K block's 12 packed bytes (as dequant.c). */
static __device__ __forceinline__ void k4_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* One weight element W[row][col] of a type known at compile time,
 * dequantized as quant/dequant.c does. */
template <int TYPE>
static __device__ __forceinline__ float weight_at(const wview w, int64_t row, int64_t col) {
    const int64_t K = w.n_cols;
    switch (TYPE) {
    case TELA_TYPE_F32: return ((const float *)w.p)[row * K + col];
    case TELA_TYPE_F16: return h2f(((const uint16_t *)w.p)[row * K + col]);
    case TELA_TYPE_BF16: return bf2f(((const uint16_t *)w.p)[row * K + col]);
    case TELA_TYPE_Q8_0: {
        const int64_t nb = K / 32, R = w.n_rows;
        const float d = h2f(ld16(w.p + tela_cuda_align((size_t)(R * K)) + 2 * (row * nb + col / 32)));
        return d * (float)((const int8_t *)w.p)[row * K + col];
    }
    case TELA_TYPE_Q4_0: {
        const int64_t nb = K / 32, R = w.n_rows;
        const float d = h2f(ld16(w.p + tela_cuda_align((size_t)(R * K / 2)) + 2 * (row * nb + col / 32)));
        const int j = (int)(col % 32);
        const uint8_t q = w.p[row * (K / 2) + (col / 32) * 16 + (j & 15)];
        return d * (float)((j < 16 ? (q & 0xF) : (q >> 4)) - 8);
    }
    case TELA_TYPE_Q4_K: case TELA_TYPE_Q5_K: {
        const int64_t nb = K / 256;
        const bool five = TYPE == TELA_TYPE_Q5_K;
        const uint8_t *blk = w.p + (row * nb + col / 256) * (five ? 176 : 144);
        const int e = (int)(col % 256), c = e / 64, l = e % 32, hi = (e / 32) & 1;
        int sc, m;
        k4_scale_min(blk + 4, 2 * c + hi, &sc, &m);
        const uint8_t qb = blk[(five ? 48 : 16) + 32 * c + l];
        int q = hi ? qb >> 4 : qb & 0xF;
        if (five) q |= ((blk[16 + l] >> (2 * c + hi)) & 1) << 4;
        return h2f(ld16(blk)) * (float)sc * (float)q - h2f(ld16(blk + 2)) * (float)m;
    }
    case TELA_TYPE_Q6_K: {
        const int64_t nb = K / 256, R = w.n_rows, i = row * nb + col / 256;
        const uint8_t *q = w.p + i * 192;
        const int8_t *scales = (const int8_t *)(w.p + tela_cuda_align((size_t)(R * nb * 192))) + i * 16;
        const uint8_t *dp = w.p + tela_cuda_align((size_t)(R * nb * 192)) + tela_cuda_align((size_t)(R * nb * 16)) + i * 2;
        const int e = (int)(col % 256), h = e / 128, g = (e % 128) / 32, l = e % 32;
        const uint8_t *ql = q + 64 * h, *qh = q + 128 + 32 * h;
        const int lo = (g & 1) ? ql[l + 32] : ql[l];
        const int nib = g >= 2 ? lo >> 4 : lo & 0xF;
        const int v = (nib | ((qh[l] >> (2 * g)) & 3) << 4) - 32;
        return h2f(ld16(dp)) * (float)scales[8 * h + 2 * g + l / 16] * (float)v;
    }
    default: return 0.0f;
    }
}

/* The same for a type known at run time (the exact mode, get_rows). */
static __device__ float tela_cuda_weight(tela_type type, const wview w, int64_t row, int64_t col) {
    switch (type) {
    case TELA_TYPE_F32: return weight_at<TELA_TYPE_F32>(w, row, col);
    case TELA_TYPE_F16: return weight_at<TELA_TYPE_F16>(w, row, col);
    case TELA_TYPE_BF16: return weight_at<TELA_TYPE_BF16>(w, row, col);
    case TELA_TYPE_Q8_0: return weight_at<TELA_TYPE_Q8_0>(w, row, col);
    case TELA_TYPE_Q4_0: return weight_at<TELA_TYPE_Q4_0>(w, row, col);
    case TELA_TYPE_Q4_K: return weight_at<TELA_TYPE_Q4_K>(w, row, col);
    case TELA_TYPE_Q5_K: return weight_at<TELA_TYPE_Q5_K>(w, row, col);
    case TELA_TYPE_Q6_K: return weight_at<TELA_TYPE_Q6_K>(w, row, col);
    default: return 0.0f;
    }
}

/* -------------------------------------------------------- warp helpers */

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ------------------------------------------------------- decode: gemv */

/* Quantized weights: 8 warps a block, two rows a warp (their loads in
 * flight together), so one block's quantization of the activations serves
 * 16 rows. Float weights: 4 warps a block, one row a warp, eight 16-byte
 * loads in flight per lane. */
#define GEMV_Q_WARPS 8
#define GEMV_Q_ROWS 16
#define GEMV_F_WARPS 4

/* Piece i of unit u of a token's activations (xt), at plain element
 * offset e in the plain order. */
template <int LT>
static __device__ __forceinline__ int4 act_piece(const int8_t *xt, int u, int i, int e) {
    if (LT == 0) return *(const int4 *)(xt + e);
    return ((const int4 *)xt)[((u >> 5) * act_unit_pieces(LT) + i) * 32 + (u & 31)];
}

/* The activations of n_tok tokens quantized to int8 per 32 into shared
 * memory: xq [NT][K], xd [NT][K/32] (scales), xs [NT][K/32] (scale times
 * the sum of the 32 quants). Four threads per 32-block, eight elements
 * each. With an RMSNorm in front (nw), the values quantized are x * nw:
 * quantization per block is scale-invariant, so the norm's 1/rms factor is
 * applied to the products' results instead (gemv_write), and each thread
 * adds the squares of the x it reads to ss[t] (its own partial sum). */
template <int NT, int LT = 0>
static __device__ void quantize_x(const float *x, int64_t x_stride, int K, int n_tok, const float *nw, int8_t *xq,
                                  float *xd, float *xs, float *ss, int tid, int n_threads) {
    const int xq_tok = act_tok_bytes(LT, K);
    const int n8 = K / 8;
    const bool vec = x_stride % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)nw & 15) == 0;
    for (int t = 0; t < NT; t++) {
        if (t >= n_tok) break;
        const float *xt = x + (size_t)t * x_stride;
        float sq = 0.0f;
#pragma unroll 2
        for (int base = 0; base < n8; base += n_threads) {
            const int g = base + tid;
            const bool ok = g < n8;
            float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
            if (ok) {
                if (vec) {
                    const float4 *x4 = (const float4 *)(xt + 8 * g);
                    const float4 a = __ldg(x4), b = __ldg(x4 + 1);
                    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
                } else {
#pragma unroll
                    for (int i = 0; i < 8; i++) v[i] = xt[8 * g + i];
                }
                if (nw) {
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        sq += v[i] * v[i];
                        v[i] *= nw[8 * g + i];
                    }
                }
            }
            quantize8(v, ok, g, LT, xq + (size_t)t * xq_tok, xd + t * (K / 32), xs + t * (K / 32));
        }
        ss[t] = sq;
    }
}

static __device__ __forceinline__ int byte_of3(uint32_t w0, uint32_t w1, uint32_t w2, int k) {
    const uint32_t w = k < 4 ? w0 : (k < 8 ? w1 : w2);
    return (int)((w >> (8 * (k & 3))) & 0xff);
}

static __device__ __forceinline__ void k4_scale_min_w(uint32_t s0, uint32_t s1, uint32_t s2, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = byte_of3(s0, s1, s2, j) & 63;
        *m = byte_of3(s0, s1, s2, j + 4) & 63;
    } else {
        *sc = (byte_of3(s0, s1, s2, j + 4) & 0xF) | ((byte_of3(s0, s1, s2, j - 4) >> 6) << 4);
        *m = (byte_of3(s0, s1, s2, j + 4) >> 4) | ((byte_of3(s0, s1, s2, j) >> 6) << 4);
    }
}

/* The units of a row and each unit's contribution to the dot products of
 * NT tokens (acc[t] += unit . x[t]). */
template <int TYPE>
struct qunits;

template <>
struct qunits<TELA_TYPE_Q4_K> {
    static __device__ __forceinline__ int count(int K) { return K / 64; }
    template <int NT, int LT = 0>
    static __device__ __forceinline__ void dot(const wview w, int64_t row, int u, const int8_t *xq, const float *xd,
                                               const float *xs, int K, int n_tok, float *acc) {
        dot_raw<NT, LT>(load(w, row, u), u, xq, xd, xs, K, n_tok, acc);
    }
    struct raw { uint4 hdr, qa, qb; };
    static __device__ __forceinline__ raw load(const wview w, int64_t row, int u) {
        const int64_t nb = w.n_cols / 256;
        const int b = u >> 2, q = u & 3;
        const uint8_t *blk = w.p + (row * nb + b) * 144;
        return {*(const uint4 *)blk, *(const uint4 *)(blk + 16 + 32 * q), *(const uint4 *)(blk + 32 + 32 * q)};
    }
    template <int NT, int LT = 0>
    static __device__ __forceinline__ void dot_raw(const raw r, int u, const int8_t *xq, const float *xd,
                                                   const float *xs, int K, int n_tok, float *acc) {
        const int b = u >> 2, q = u & 3;
        const uint4 hdr = r.hdr, qa = r.qa, qb = r.qb;
        const float d = h2f((uint16_t)(hdr.x & 0xffff)), dmin = h2f((uint16_t)(hdr.x >> 16));
        int sc0, m0, sc1, m1;
        k4_scale_min_w(hdr.y, hdr.z, hdr.w, 2 * q, &sc0, &m0);
        k4_scale_min_w(hdr.y, hdr.z, hdr.w, 2 * q + 1, &sc1, &m1);
        const uint32_t v[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
        const int a0 = b * 8 + 2 * q, nab = K / 32;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= n_tok) break;
            const int8_t *xt = xq + (size_t)t * act_tok_bytes(LT, K);
            const int4 xa0 = act_piece<LT>(xt, u, 0, a0 * 32), xa1 = act_piece<LT>(xt, u, 1, a0 * 32 + 16);
            const int4 xb0 = act_piece<LT>(xt, u, 2, a0 * 32 + 32), xb1 = act_piece<LT>(xt, u, 3, a0 * 32 + 48);
            const int xa[8] = {xa0.x, xa0.y, xa0.z, xa0.w, xa1.x, xa1.y, xa1.z, xa1.w};
            const int xb[8] = {xb0.x, xb0.y, xb0.z, xb0.w, xb1.x, xb1.y, xb1.z, xb1.w};
            int s0 = 0, s1 = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                s0 = __dp4a((int)(v[i] & 0x0F0F0F0Fu), xa[i], s0);
                s1 = __dp4a((int)((v[i] >> 4) & 0x0F0F0F0Fu), xb[i], s1);
            }
            const float *dt = xd + t * nab, *st = xs + t * nab;
            acc[t] += d * ((float)sc0 * dt[a0] * (float)s0 + (float)sc1 * dt[a0 + 1] * (float)s1) -
                      dmin * ((float)m0 * st[a0] + (float)m1 * st[a0 + 1]);
        }
    }
};

template <>
struct qunits<TELA_TYPE_Q5_K> {
    static __device__ __forceinline__ int count(int K) { return K / 64; }
    template <int NT, int LT = 0>
    static __device__ __forceinline__ void dot(const wview w, int64_t row, int u, const int8_t *xq, const float *xd,
                                               const float *xs, int K, int n_tok, float *acc) {
        dot_raw<NT, LT>(load(w, row, u), u, xq, xd, xs, K, n_tok, acc);
    }
    struct raw { uint4 hdr, h0, h1, qa, qb; };
    static __device__ __forceinline__ raw load(const wview w, int64_t row, int u) {
        const int64_t nb = w.n_cols / 256;
        const int b = u >> 2, q = u & 3;
        const uint8_t *blk = w.p + (row * nb + b) * 176;
        return {*(const uint4 *)blk, *(const uint4 *)(blk + 16), *(const uint4 *)(blk + 32),
                *(const uint4 *)(blk + 48 + 32 * q), *(const uint4 *)(blk + 64 + 32 * q)};
    }
    template <int NT, int LT = 0>
    static __device__ __forceinline__ void dot_raw(const raw r, int u, const int8_t *xq, const float *xd,
                                                   const float *xs, int K, int n_tok, float *acc) {
        const int b = u >> 2, q = u & 3;
        const uint4 hdr = r.hdr, h0 = r.h0, h1 = r.h1, qa = r.qa, qb = r.qb;
        const float d = h2f((uint16_t)(hdr.x & 0xffff)), dmin = h2f((uint16_t)(hdr.x >> 16));
        int sc0, m0, sc1, m1;
        k4_scale_min_w(hdr.y, hdr.z, hdr.w, 2 * q, &sc0, &m0);
        k4_scale_min_w(hdr.y, hdr.z, hdr.w, 2 * q + 1, &sc1, &m1);
        const uint32_t v[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
        const uint32_t hv[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
        uint32_t lo[8], hi[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            lo[i] = (v[i] & 0x0F0F0F0Fu) | (((hv[i] >> (2 * q)) & 0x01010101u) << 4);
            hi[i] = ((v[i] >> 4) & 0x0F0F0F0Fu) | (((hv[i] >> (2 * q + 1)) & 0x01010101u) << 4);
        }
        const int a0 = b * 8 + 2 * q, nab = K / 32;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= n_tok) break;
            const int8_t *xt = xq + (size_t)t * act_tok_bytes(LT, K);
            const int4 xa0 = act_piece<LT>(xt, u, 0, a0 * 32), xa1 = act_piece<LT>(xt, u, 1, a0 * 32 + 16);
            const int4 xb0 = act_piece<LT>(xt, u, 2, a0 * 32 + 32), xb1 = act_piece<LT>(xt, u, 3, a0 * 32 + 48);
            const int xa[8] = {xa0.x, xa0.y, xa0.z, xa0.w, xa1.x, xa1.y, xa1.z, xa1.w};
            const int xb[8] = {xb0.x, xb0.y, xb0.z, xb0.w, xb1.x, xb1.y, xb1.z, xb1.w};
            int s0 = 0, s1 = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                s0 = __dp4a((int)lo[i], xa[i], s0);
                s1 = __dp4a((int)hi[i], xb[i], s1);
            }
            const float *dt = xd + t * nab, *st = xs + t * nab;
            acc[t] += d * ((float)sc0 * dt[a0] * (float)s0 + (float)sc1 * dt[a0 + 1] * (float)s1) -
                      dmin * ((float)m0 * st[a0] + (float)m1 * st[a0 + 1]);
        }
    }
};

static __device__ __forceinline__ int sbyte4(uint4 s, int k) {
    const uint32_t w = k < 4 ? s.x : (k < 8 ? s.y : (k < 12 ? s.z : s.w));
    return (int)(int8_t)((w >> (8 * (k & 3))) & 0xff);
}

template <>
struct qunits<TELA_TYPE_Q6_K> {
    static __device__ __forceinline__ int count(int K) { return K / 64; }
    template <int NT, int LT = 0>
    static __device__ __forceinline__ void dot(const wview w, int64_t row, int u, const int8_t *xq, const float *xd,
                                               const float *xs, int K, int n_tok, float *acc) {
        dot_raw<NT, LT>(load(w, row, u), u, xq, xd, xs, K, n_tok, acc);
    }
    struct raw { uint4 l0, l1, h0, h1, sc; uint16_t d; };
    static __device__ __forceinline__ raw load(const wview w, int64_t row, int u) {
        const int64_t nb = w.n_cols / 256, R = w.n_rows;
        const int b = u >> 2, q = u & 3, h = q >> 1, part = q & 1;
        const int64_t i = row * nb + b;
        const uint8_t *blk = w.p + i * 192;
        const uint8_t *scp = w.p + tela_cuda_align((size_t)(R * nb * 192));
        return {*(const uint4 *)(blk + 64 * h + 32 * part), *(const uint4 *)(blk + 64 * h + 32 * part + 16),
                *(const uint4 *)(blk + 128 + 32 * h), *(const uint4 *)(blk + 144 + 32 * h),
                *(const uint4 *)(scp + i * 16), ld16(scp + tela_cuda_align((size_t)(R * nb * 16)) + i * 2)};
    }
    template <int NT, int LT = 0>
    static __device__ __forceinline__ void dot_raw(const raw r, int u, const int8_t *xq, const float *xd,
                                                   const float *xs, int K, int n_tok, float *acc) {
        const int b = u >> 2, q = u & 3, h = q >> 1, part = q & 1;
        const uint4 l0 = r.l0, l1 = r.l1, h0 = r.h0, h1 = r.h1, sc = r.sc;
        const float d = h2f(r.d);
        const int scA0 = sbyte4(sc, 8 * h + 2 * part), scA1 = sbyte4(sc, 8 * h + 2 * part + 1);
        const int scB0 = sbyte4(sc, 8 * h + 4 + 2 * part), scB1 = sbyte4(sc, 8 * h + 5 + 2 * part);
        const uint32_t lv[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
        const uint32_t hv[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
        int A[8], B[8];
        const int shA = 2 * part, shB = 4 + 2 * part;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t a = (lv[k] & 0x0F0F0F0Fu) | (((hv[k] >> shA) & 0x03030303u) << 4);
            const uint32_t bb = ((lv[k] >> 4) & 0x0F0F0F0Fu) | (((hv[k] >> shB) & 0x03030303u) << 4);
            A[k] = (int)__vsub4(a, 0x20202020u);
            B[k] = (int)__vsub4(bb, 0x20202020u);
        }
        const int aA = b * 8 + 4 * h + part, aB = aA + 2, nab = K / 32;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= n_tok) break;
            const int8_t *xt = xq + (size_t)t * act_tok_bytes(LT, K);
            const int4 a0 = act_piece<LT>(xt, u, 0, aA * 32), a1 = act_piece<LT>(xt, u, 1, aA * 32 + 16);
            const int4 b0 = act_piece<LT>(xt, u, 2, aB * 32), b1 = act_piece<LT>(xt, u, 3, aB * 32 + 16);
            const int xa[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const int xb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
            int sA0 = 0, sA1 = 0, sB0 = 0, sB1 = 0;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                sA0 = __dp4a(A[k], xa[k], sA0);
                sA1 = __dp4a(A[k + 4], xa[k + 4], sA1);
                sB0 = __dp4a(B[k], xb[k], sB0);
                sB1 = __dp4a(B[k + 4], xb[k + 4], sB1);
            }
            const float *dt = xd + t * nab;
            acc[t] += d * (dt[aA] * (float)(scA0 * sA0 + scA1 * sA1) + dt[aB] * (float)(scB0 * sB0 + scB1 * sB1));
        }
        (void)xs;
    }
};

template <>
struct qunits<TELA_TYPE_Q8_0> {
    static __device__ __forceinline__ int count(int K) { return K / 32; }
    template <int NT, int LT = 0>
    static __device__ __forceinline__ void dot(const wview w, int64_t row, int u, const int8_t *xq, const float *xd,
                                               const float *xs, int K, int n_tok, float *acc) {
        dot_raw<NT, LT>(load(w, row, u), u, xq, xd, xs, K, n_tok, acc);
    }
    struct raw { uint4 qa, qb; uint16_t d; };
    static __device__ __forceinline__ raw load(const wview w, int64_t row, int u) {
        const int64_t K = w.n_cols, nb = K / 32, R = w.n_rows;
        const uint8_t *qs = w.p + row * K + 32 * u;
        return {*(const uint4 *)qs, *(const uint4 *)(qs + 16), ld16(w.p + tela_cuda_align((size_t)(R * K)) + 2 * (row * nb + u))};
    }
    template <int NT, int LT = 0>
    static __device__ __forceinline__ void dot_raw(const raw r, int u, const int8_t *xq, const float *xd,
                                                   const float *xs, int K, int n_tok, float *acc) {
        const int nb = K / 32;
        const uint4 qa = r.qa, qb = r.qb;
        const float d = h2f(r.d);
        const int v[8] = {(int)qa.x, (int)qa.y, (int)qa.z, (int)qa.w, (int)qb.x, (int)qb.y, (int)qb.z, (int)qb.w};
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= n_tok) break;
            const int8_t *xt = xq + (size_t)t * act_tok_bytes(LT, K);
            const int4 a0 = act_piece<LT>(xt, u, 0, u * 32), a1 = act_piece<LT>(xt, u, 1, u * 32 + 16);
            const int xa[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            int s = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) s = __dp4a(v[i], xa[i], s);
            acc[t] += d * xd[t * nb + u] * (float)s;
        }
        (void)xs;
    }
};

template <>
struct qunits<TELA_TYPE_Q4_0> {
    static __device__ __forceinline__ int count(int K) { return K / 32; }
    template <int NT, int LT = 0>
    static __device__ __forceinline__ void dot(const wview w, int64_t row, int u, const int8_t *xq, const float *xd,
                                               const float *xs, int K, int n_tok, float *acc) {
        dot_raw<NT, LT>(load(w, row, u), u, xq, xd, xs, K, n_tok, acc);
    }
    struct raw { uint4 qa; uint16_t d; };
    static __device__ __forceinline__ raw load(const wview w, int64_t row, int u) {
        const int64_t K = w.n_cols, nb = K / 32, R = w.n_rows;
        return {*(const uint4 *)(w.p + row * (K / 2) + 16 * u), ld16(w.p + tela_cuda_align((size_t)(R * K / 2)) + 2 * (row * nb + u))};
    }
    template <int NT, int LT = 0>
    static __device__ __forceinline__ void dot_raw(const raw r, int u, const int8_t *xq, const float *xd,
                                                   const float *xs, int K, int n_tok, float *acc) {
        const int nb = K / 32;
        const uint4 qa = r.qa;
        const float d = h2f(r.d);
        const uint32_t v[4] = {qa.x, qa.y, qa.z, qa.w};
        int lo[4], hi[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = (int)__vsub4(v[i] & 0x0F0F0F0Fu, 0x08080808u);
            hi[i] = (int)__vsub4((v[i] >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= n_tok) break;
            const int8_t *xt = xq + (size_t)t * act_tok_bytes(LT, K);
            const int4 a0 = act_piece<LT>(xt, u, 0, u * 32), a1 = act_piece<LT>(xt, u, 1, u * 32 + 16);
            int s = 0;
            s = __dp4a(lo[0], a0.x, s);
            s = __dp4a(lo[1], a0.y, s);
            s = __dp4a(lo[2], a0.z, s);
            s = __dp4a(lo[3], a0.w, s);
            s = __dp4a(hi[0], a1.x, s);
            s = __dp4a(hi[1], a1.y, s);
            s = __dp4a(hi[2], a1.z, s);
            s = __dp4a(hi[3], a1.w, s);
            acc[t] += d * xd[t * nb + u] * (float)s;
        }
        (void)xs;
    }
};

#define GEMV_MAX_TARGETS TELA_CUDA_GEMV_MAX_W

/* Up to three matrices of one type and width with the same input, one
 * launch: target i takes the blocks from block0[i] on. */
struct gemv_target {
    wview w;
    float *y;
    int64_t y_stride;
};

struct gemv_params {
    gemv_target t[GEMV_MAX_TARGETS];
    unsigned block0[GEMV_MAX_TARGETS];
    int n_targets;
    wview w_up;                 /* w_up.p != NULL: the SwiGLU pair (one target) */
    const float *x;
    int64_t x_stride;
    int n_tok;
    int accumulate;
    const float *norm_w;        /* != NULL: the products take rmsnorm(x) * norm_w */
    float eps;
    int order;                  /* early loads against the PDL wait: 0 after it, 1 before it (the next launch
                                   after it), 2 before it (the next launch before them) */
};

/* The two halves of a decode product's entry around its early loads. */
static __device__ __forceinline__ void early_begin(const gemv_params &p) {
    if (p.order == 0) TELA_PDL_ENTRY();
    else if (p.order == 2) TELA_PDL_LAUNCH();
}

static __device__ __forceinline__ void early_end(const gemv_params &p) {
    if (p.order == 1) TELA_PDL_WAIT_THEN_LAUNCH();
    else if (p.order == 2) TELA_PDL_WAIT();
}

/* Host side of the early loads: checks the launch just made, and records
 * that a product of order 1 (next kernel launched only after its own wait)
 * was the last operation queued, so the kernel after it may read state
 * before its wait (tela_cuda_after_ordered, cuda_common.cuh). */
static void gemv_launched_early(cuda_exec *ex, const gemv_params &p, const char *what) {
    if (p.order == 1) tela_cuda_mark_ordered(ex);
    tela_cuda_launched(ex, what);
}

/* The target of this block and the row of this warp in it. */
static __device__ __forceinline__ int gemv_target_of(const gemv_params &p) {
    int ti = 0;
#pragma unroll
    for (int i = 1; i < GEMV_MAX_TARGETS; i++)
        if (i < p.n_targets && blockIdx.x >= p.block0[i]) ti = i;
    return ti;
}

/* The RMSNorm factors 1/sqrt(mean(x^2) + eps) per token from each warp's
 * partial sums of squares (part[warp][t]), for every thread. */
template <int NT>
static __device__ __forceinline__ void norm_factors(const float (*part)[NT], int n_warps, int n_tok, int K, float eps,
                                                    float *scale) {
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float tot = 0.0f;
        for (int w = 0; w < n_warps; w++) tot += part[w][t];
        scale[t] = t < n_tok ? rsqrtf(tot / (float)K + eps) : 1.0f;
    }
}

static __device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

template <int NT>
static __device__ __forceinline__ void gemv_write(const gemv_params &p, const gemv_target &tg, int64_t row, float *acc,
                                                  float *acc_up, bool swiglu, const float *scale) {
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t >= p.n_tok) break;
        float v = warp_sum(acc[t]) * scale[t];
        if (swiglu) v = silu(v) * (warp_sum(acc_up[t]) * scale[t]);
        if ((threadIdx.x & 31) == 0) {
            float *yp = tg.y + (size_t)t * tg.y_stride + row;
            *yp = p.accumulate ? *yp + v : v;
        }
    }
}

template <int TYPE, int NT>
static __global__ void __launch_bounds__(GEMV_Q_WARPS * 32) gemv_q_kernel(const gemv_params p) {
    TELA_PDL_ENTRY();
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float part[GEMV_Q_WARPS][NT];
    const int ti = gemv_target_of(p);
    const gemv_target &tg = p.t[ti];
    const int K = (int)tg.w.n_cols;
    int8_t *xq = (int8_t *)smem;
    float *xd = (float *)(smem + (size_t)NT * K);
    float *xs = xd + NT * (K / 32);
    float ss[NT];
    quantize_x<NT>(p.x, p.x_stride, K, p.n_tok, p.norm_w, xq, xd, xs, ss, threadIdx.x, blockDim.x);
    if (p.norm_w) {
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float w = warp_sum(t < p.n_tok ? ss[t] : 0.0f);
            if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32][t] = w;
        }
    }
    __syncthreads();
    float scale[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) scale[t] = 1.0f;
    if (p.norm_w) norm_factors<NT>(part, GEMV_Q_WARPS, p.n_tok, K, p.eps, scale);
    const int64_t row0 = (int64_t)(blockIdx.x - p.block0[ti]) * GEMV_Q_ROWS + 2 * (threadIdx.x / 32);
    if (row0 >= tg.w.n_rows) return;
    const bool two = row0 + 1 < tg.w.n_rows;
    const int64_t row1 = two ? row0 + 1 : row0;
    const int lane = threadIdx.x & 31, n_units = qunits<TYPE>::count(K);
    const bool swiglu = p.w_up.p != NULL;
    float a0[NT], a1[NT], u0[NT], u1[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) a0[t] = a1[t] = u0[t] = u1[t] = 0.0f;
#pragma unroll 2
    for (int u = lane; u < n_units; u += 32) {
        qunits<TYPE>::template dot<NT>(tg.w, row0, u, xq, xd, xs, K, p.n_tok, a0);
        qunits<TYPE>::template dot<NT>(tg.w, row1, u, xq, xd, xs, K, p.n_tok, a1);
        if (swiglu) {
            qunits<TYPE>::template dot<NT>(p.w_up, row0, u, xq, xd, xs, K, p.n_tok, u0);
            qunits<TYPE>::template dot<NT>(p.w_up, row1, u, xq, xd, xs, K, p.n_tok, u1);
        }
    }
    gemv_write<NT>(p, tg, row0, a0, u0, swiglu, scale);
    if (two) gemv_write<NT>(p, tg, row1, a1, u1, swiglu, scale);
}

/* Float weights: 8 elements (16 bytes of F16/BF16, two loads of F32) per
 * lane step; x read through the cache. VEC: K % 8 == 0 and 16-byte
 * aligned rows of x, else one element per step. */
template <int TYPE>
static __device__ __forceinline__ void load8(const uint8_t *rowp, int64_t c8, float *f) {
    if (TYPE == TELA_TYPE_F32) {
        const float4 a = ((const float4 *)rowp)[2 * c8], b = ((const float4 *)rowp)[2 * c8 + 1];
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
        const uint4 v = ((const uint4 *)rowp)[c8];
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (TYPE == TELA_TYPE_F16) {
                const float2 h = __half22float2(*(const __half2 *)&u[i]);
                f[2 * i] = h.x, f[2 * i + 1] = h.y;
            } else {
                f[2 * i] = __uint_as_float(u[i] << 16), f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
            }
        }
    }
}

template <int TYPE>
static __device__ __forceinline__ float load1(const uint8_t *rowp, int64_t c) {
    if (TYPE == TELA_TYPE_F32) return ((const float *)rowp)[c];
    if (TYPE == TELA_TYPE_F16) return h2f(((const uint16_t *)rowp)[c]);
    return bf2f(((const uint16_t *)rowp)[c]);
}

/* Four inputs of token t from column c, times the norm weights when the
 * products have an RMSNorm in front; their squares are added to *ss when
 * ss is not NULL (the norm's 1/rms factor is applied to the results). */
static __device__ __forceinline__ float4 x4(const gemv_params &p, int t, int c, float *ss) {
    float4 a = __ldg((const float4 *)(p.x + (size_t)t * p.x_stride + c));
    if (p.norm_w) {
        if (ss) *ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
        const float4 w = __ldg((const float4 *)(p.norm_w + c));
        a.x *= w.x, a.y *= w.y, a.z *= w.z, a.w *= w.w;
    }
    return a;
}

static __device__ __forceinline__ float x1(const gemv_params &p, int t, int c, float *ss) {
    const float a = p.x[(size_t)t * p.x_stride + c];
    if (!p.norm_w) return a;
    if (ss) *ss += a * a;
    return a * p.norm_w[c];
}

#define GEMV_F_UNROLL 4

template <int TYPE, int NT, bool VEC>
static __device__ __forceinline__ void float_row_dot(const wview w, int64_t row, const gemv_params &p, float *acc,
                                                     float *ss) {
    const int K = (int)w.n_cols, lane = threadIdx.x & 31;
    const uint8_t *rowp = w.p + (size_t)row * K * (TYPE == TELA_TYPE_F32 ? 4 : 2);
    if (VEC) {
        const int n8 = K / 8;
        /* GEMV_F_UNROLL 16-byte loads in flight per lane */
        for (int c0 = lane; c0 < n8; c0 += 32 * GEMV_F_UNROLL) {
            float f[GEMV_F_UNROLL][8];
#pragma unroll
            for (int j = 0; j < GEMV_F_UNROLL; j++)
                if (c0 + 32 * j < n8) load8<TYPE>(rowp, c0 + 32 * j, f[j]);
#pragma unroll
            for (int j = 0; j < GEMV_F_UNROLL; j++) {
                const int c8 = c0 + 32 * j;
                if (c8 >= n8) break;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t >= p.n_tok) break;
                    const float4 a = x4(p, t, 8 * c8, ss ? ss + t : NULL), b = x4(p, t, 8 * c8 + 4, ss ? ss + t : NULL);
                    float s = acc[t];
                    s = fmaf(f[j][0], a.x, s);
                    s = fmaf(f[j][1], a.y, s);
                    s = fmaf(f[j][2], a.z, s);
                    s = fmaf(f[j][3], a.w, s);
                    s = fmaf(f[j][4], b.x, s);
                    s = fmaf(f[j][5], b.y, s);
                    s = fmaf(f[j][6], b.z, s);
                    s = fmaf(f[j][7], b.w, s);
                    acc[t] = s;
                }
            }
        }
    } else {
        for (int c = lane; c < K; c += 32) {
            const float f = load1<TYPE>(rowp, c);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= p.n_tok) break;
                acc[t] = fmaf(f, x1(p, t, c, ss ? ss + t : NULL), acc[t]);
            }
        }
    }
}

template <int TYPE, int NT, bool VEC>
static __global__ void __launch_bounds__(GEMV_F_WARPS * 32, NT == 1 ? 8 : 4) gemv_f_kernel(const gemv_params p) {
    TELA_PDL_ENTRY();
    const int ti = gemv_target_of(p);
    const gemv_target &tg = p.t[ti];
    const int64_t row = (int64_t)(blockIdx.x - p.block0[ti]) * GEMV_F_WARPS + threadIdx.x / 32;
    if (row >= tg.w.n_rows) return;
    const bool swiglu = p.w_up.p != NULL;
    float acc[NT], acc_up[NT], ss[NT], scale[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = acc_up[t] = ss[t] = 0.0f, scale[t] = 1.0f;
    /* every warp reads all of x: it sums the squares for the norm itself */
    float_row_dot<TYPE, NT, VEC>(tg.w, row, p, acc, ss);
    if (swiglu) float_row_dot<TYPE, NT, VEC>(p.w_up, row, p, acc_up, NULL);
    if (p.norm_w) {
#pragma unroll
        for (int t = 0; t < NT; t++) scale[t] = rsqrtf(warp_sum(ss[t]) / (float)tg.w.n_cols + p.eps);
    }
    gemv_write<NT>(p, tg, row, acc, acc_up, swiglu, scale);
}

typedef void (*gemv_kernel_fn)(const gemv_params);

/* Float weights, one token, R rows a warp (F16/BF16, K % 8 == 0): each
 * lane's eight inputs are read once per step and used for all R rows, where
 * the kernel above reads them again for every row (2 to 4 bytes of x and
 * norm weights from L1 per byte of weights). The weights are read around
 * L1 (ld.global.nc.L1::no_allocate), which then holds x alone. Rows past
 * the end are skipped. */
static __device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* The eight weights of one 16-byte load as f32, lo and hi of each pair
 * (exact conversions). */
template <int TYPE>
static __device__ __forceinline__ void unpack8(const uint4 v, float *w) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if (TYPE == TELA_TYPE_F16) {
            const float2 h = __half22float2(*(const __half2 *)&u[i]);
            w[2 * i] = h.x, w[2 * i + 1] = h.y;
        } else {
            w[2 * i] = __uint_as_float(u[i] << 16), w[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        }
    }
}

/* s + w . x as a chain of eight fused multiply-adds in column order: the
 * one order every float decode kernel sums a load's eight weights in (a
 * several-token kernel that converts the weights once and calls this gets
 * a one-token kernel's bits). */
static __device__ __forceinline__ float dot8f(const float *w, const float *x, float s) {
#pragma unroll
    for (int i = 0; i < 8; i++) s = fmaf(w[i], x[i], s);
    return s;
}

template <int TYPE>
static __device__ __forceinline__ float dot8(const uint4 v, const float *x, float s) {
    float w[8];
    unpack8<TYPE>(v, w);
    return dot8f(w, x, s);
}

template <int TYPE, int R>
static __global__ void __launch_bounds__(GEMV_F_WARPS * 32, 6) gemv_fr_kernel(const gemv_params p) {
    TELA_PDL_ENTRY();
    constexpr int U = R >= 4 ? 1 : 4 / R; /* steps in flight: R * U (x2 for SwiGLU) loads a lane */
    const int ti = gemv_target_of(p);
    const gemv_target &tg = p.t[ti];
    const int64_t row0 = ((int64_t)(blockIdx.x - p.block0[ti]) * GEMV_F_WARPS + threadIdx.x / 32) * R;
    if (row0 >= tg.w.n_rows) return;
    const bool swiglu = p.w_up.p != NULL;
    const int K = (int)tg.w.n_cols, lane = threadIdx.x & 31, n8 = K / 8, nm = swiglu ? 2 : 1;
    const int rv = tg.w.n_rows - row0 < R ? (int)(tg.w.n_rows - row0) : R; /* rows this warp has */
    const uint4 *wb[2] = {(const uint4 *)tg.w.p + (size_t)row0 * n8,
                          (const uint4 *)(swiglu ? p.w_up.p : tg.w.p) + (size_t)row0 * n8};
    float acc[2][R], ss = 0.0f;
#pragma unroll
    for (int r = 0; r < R; r++) acc[0][r] = acc[1][r] = 0.0f;
    for (int c0 = lane; c0 < n8; c0 += 32 * U) {
        uint4 v[U][2][R];
#pragma unroll
        for (int j = 0; j < U; j++)
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (c0 + 32 * j < n8 && m < nm && r < rv) v[j][m][r] = ld_stream(wb[m] + (size_t)r * n8 + c0 + 32 * j);
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int c8 = c0 + 32 * j;
            if (c8 >= n8) break;
            const float4 a = x4(p, 0, 8 * c8, &ss), b = x4(p, 0, 8 * c8 + 4, &ss);
            const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (m < nm && r < rv) acc[m][r] = dot8<TYPE>(v[j][m][r], xs, acc[m][r]);
        }
    }
    float scale = 1.0f;
    if (p.norm_w) scale = rsqrtf(warp_sum(ss) / (float)K + p.eps);
#pragma unroll
    for (int r = 0; r < R; r++)
        if (r < rv) gemv_write<1>(p, tg, row0 + r, &acc[0][r], &acc[1][r], swiglu, &scale);
}

/* Products of 2-8 tokens with a matrix that one token takes through the
 * kernel above with R = 4 (the output heads: tens of thousands of rows),
 * as in a verification pass. Each token's sums are formed exactly as that
 * kernel forms one token's: the same lanes and columns, the same chain of
 * fused multiply-adds, the same norm factor and reduction; so each token
 * gets the bits of its decode step, and the weights are read and
 * converted once for all the tokens. The tensor-core kernel below
 * (gemv_fm_kernel), which took these before, moved the 1B's head at 1.82
 * TB/s where the one-token form of this kernel moves 3.96 (H200,
 * docs/PERF-NOTES.md); x and the norm weights are read again for each
 * token, from L1. No SwiGLU pair (no such matrix is this large). */
template <int TYPE, int NT>
static __global__ void __launch_bounds__(GEMV_F_WARPS * 32, 4) gemv_frn_kernel(const gemv_params p) {
    TELA_PDL_ENTRY();
    constexpr int R = 4;
    const int ti = gemv_target_of(p);
    const gemv_target &tg = p.t[ti];
    const int64_t row0 = ((int64_t)(blockIdx.x - p.block0[ti]) * GEMV_F_WARPS + threadIdx.x / 32) * R;
    if (row0 >= tg.w.n_rows) return;
    const int K = (int)tg.w.n_cols, lane = threadIdx.x & 31, n8 = K / 8;
    const int rv = tg.w.n_rows - row0 < R ? (int)(tg.w.n_rows - row0) : R; /* rows this warp has */
    const uint4 *wb = (const uint4 *)tg.w.p + (size_t)row0 * n8;
    float acc[NT][R], ss[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        ss[t] = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) acc[t][r] = 0.0f;
    }
    for (int c0 = lane; c0 < n8; c0 += 32) {
        uint4 v[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < rv) v[r] = ld_stream(wb + (size_t)r * n8 + c0);
        float wf[R][8];
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < rv) unpack8<TYPE>(v[r], wf[r]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= p.n_tok) break;
            const float4 a = x4(p, t, 8 * c0, &ss[t]), b = x4(p, t, 8 * c0 + 4, &ss[t]);
            const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r < rv) acc[t][r] = dot8f(wf[r], xs, acc[t][r]);
        }
    }
    float scale[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) scale[t] = p.norm_w ? rsqrtf(warp_sum(ss[t]) / (float)K + p.eps) : 1.0f;
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (r >= rv) break;
        float a_r[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) a_r[t] = acc[t][r];
        gemv_write<NT>(p, tg, row0 + r, a_r, a_r, false, scale);
    }
}

template <int TYPE>
static gemv_kernel_fn gemv_frn_pick_t(int n_tok) {
    return n_tok <= 2 ? gemv_frn_kernel<TYPE, 2> : n_tok <= 4 ? gemv_frn_kernel<TYPE, 4> : gemv_frn_kernel<TYPE, 8>;
}

static gemv_kernel_fn gemv_fr_pick(tela_type type, int R) {
    if (type == TELA_TYPE_F16) return R == 4 ? gemv_fr_kernel<TELA_TYPE_F16, 4> : R == 2 ? gemv_fr_kernel<TELA_TYPE_F16, 2> : gemv_fr_kernel<TELA_TYPE_F16, 1>;
    if (type == TELA_TYPE_BF16) return R == 4 ? gemv_fr_kernel<TELA_TYPE_BF16, 4> : R == 2 ? gemv_fr_kernel<TELA_TYPE_BF16, 2> : gemv_fr_kernel<TELA_TYPE_BF16, 1>;
    return NULL;
}

/* Float weights, one token, with early loads (cuda_common.cuh): WPR warps
 * share a row (a block of four warps holds 4 / WPR rows), each taking
 * every WPR-th run of 32 16-byte loads; U loads a lane in flight a round
 * (U = 4 of each matrix for the SwiGLU pair), the first round issued
 * before the PDL wait. Each row is one round of loads when WPR x 32 x U x
 * 8 >= K, so a 2048-wide row has all its bytes asked for at once, and an
 * 8192-wide one is split over four warps (Nsight Compute on the H200: the
 * one-row kernel above moves 1.2-1.6 TB/s on the 1B's 2-8 MB matrices,
 * with 15 warps an SM and up to four rounds of loads each). The warps'
 * sums meet in shared memory. */
template <int U, bool SW>
static __device__ __forceinline__ void fs_load(const uint4 *wg, const uint4 *wu, int c, int step, int n8, bool live,
                                               uint4 (&v)[U], uint4 (&vu)[U]) {
#pragma unroll
    for (int j = 0; j < U; j++) {
        const int i = c + step * j;
        if (live && i < n8) {
            v[j] = ld_stream(wg + i);
            if (SW) vu[j] = ld_stream(wu + i);
        }
    }
}

template <int TYPE, bool SW, int WPR, int D>
static __global__ void __launch_bounds__(128, 8) gemv_fs_kernel(const gemv_params p) {
    /* D = 2 (rows of several rounds, not the pair): two rounds of four
     * loads a lane, the next issued as each is used */
    constexpr int U = SW || D == 2 ? 4 : 8, RPB = 4 / WPR;
    const int ti = gemv_target_of(p);
    const gemv_target &tg = p.t[ti];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, slice = warp % WPR;
    const int64_t row = (int64_t)(blockIdx.x - p.block0[ti]) * RPB + warp / WPR;
    const bool live = row < tg.w.n_rows;
    const int K = (int)tg.w.n_cols, n8 = K / 8, step = 32 * WPR;
    const uint4 *wg = (const uint4 *)tg.w.p + (size_t)(live ? row : 0) * n8;
    const uint4 *wu = SW ? (const uint4 *)p.w_up.p + (size_t)(live ? row : 0) * n8 : wg;
    uint4 v[D][U], vu[D][U];
    const int c0 = lane + 32 * slice;
    early_begin(p);
#pragma unroll
    for (int s = 0; s < D; s++) fs_load<U, SW>(wg, wu, c0 + step * U * s, step, n8, live, v[s], vu[s]);
    early_end(p);
    float acc = 0.0f, accu = 0.0f, ss = 0.0f;
    for (int c = c0; c < n8; c += step * U * D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            const int cs = c + step * U * s;
            if (cs >= n8) break;
#pragma unroll
            for (int j = 0; j < U; j++) {
                const int c8 = cs + step * j;
                if (c8 >= n8) break;
                const float4 a = x4(p, 0, 8 * c8, &ss), b = x4(p, 0, 8 * c8 + 4, &ss);
                const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
                acc = dot8<TYPE>(v[s][j], xs, acc);
                if (SW) accu = dot8<TYPE>(vu[s][j], xs, accu);
            }
            if (cs + step * U * D < n8) fs_load<U, SW>(wg, wu, cs + step * U * D, step, n8, live, v[s], vu[s]);
        }
    }
    acc = warp_sum(acc);
    if (SW) accu = warp_sum(accu);
    if (p.norm_w) ss = warp_sum(ss);
    if (WPR > 1) {
        __shared__ float part[4][3];
        if (lane == 0) part[warp][0] = acc, part[warp][1] = accu, part[warp][2] = ss;
        __syncthreads();
        if (slice != 0) return;
        acc = accu = ss = 0.0f;
#pragma unroll
        for (int i = 0; i < WPR; i++) acc += part[warp + i][0], accu += part[warp + i][1], ss += part[warp + i][2];
    }
    if (!live || lane != 0) return;
    const float scale = p.norm_w ? rsqrtf(ss / (float)K + p.eps) : 1.0f;
    float val = acc * scale;
    if (SW) val = silu(val) * (accu * scale);
    float *yp = tg.y + row;
    *yp = p.accumulate ? *yp + val : val;
}

static gemv_kernel_fn gemv_fs_pick(tela_type type, bool sw, int wpr, int D) {
#define FS_PICK(T)                                                                                        \
    if (type == T) {                                                                                      \
        if (sw) return wpr == 4 ? gemv_fs_kernel<T, true, 4, 1> : wpr == 2 ? gemv_fs_kernel<T, true, 2, 1> : gemv_fs_kernel<T, true, 1, 1>; \
        if (D == 2) return wpr == 4 ? gemv_fs_kernel<T, false, 4, 2> : wpr == 2 ? gemv_fs_kernel<T, false, 2, 2> : gemv_fs_kernel<T, false, 1, 2>; \
        return wpr == 4 ? gemv_fs_kernel<T, false, 4, 1> : wpr == 2 ? gemv_fs_kernel<T, false, 2, 1> : gemv_fs_kernel<T, false, 1, 1>;   \
    }
    FS_PICK(TELA_TYPE_F16)
    FS_PICK(TELA_TYPE_BF16)
#undef FS_PICK
    return NULL;
}

/* Rounds in flight for the kernel above: two when a row (not the pair's)
 * takes more than one round of eight loads a lane (the 8B's down
 * product: 14,336 inputs over two warps; TELA_CUDA_GEMV_DEPTH=1|2). */
static int gemv_fs_depth(const cuda_exec *ex, int64_t K, int wpr, bool sw) {
    if (sw) return 1;
    if (ex->gemv_depth > 0) return ex->gemv_depth;
    return K / 8 > 32 * wpr * 8 ? 2 : 1;
}

/* Warps a row for the kernel above: two (measured on the H200 against one
 * for the 1B's and the 2B's 2048-wide rows: +4% and +9% tg128), doubled
 * while a row is more than one round of loads and the grid has fewer warps
 * than the GPU holds (32 an SM at this kernel's registers). */
static int gemv_fs_wpr(const cuda_exec *ex, int64_t rows, int64_t K, bool sw) {
    if (ex->gemv_wpr > 0) return ex->gemv_wpr;
    const int64_t U = sw ? 4 : 8, n8 = K / 8, cap = (int64_t)ex->be->sm_count * 32;
    int w = 2;
    while (w < 4 && n8 > 32 * w * U && rows * w < cap) w *= 2;
    return w;
}

/* Float weights, one token, the input staged in shared memory once a
 * block (the default for one-token F16/BF16 products other than the
 * heads; TELA_CUDA_GEMV_FX=0 takes the kernel above): NW warps, WPR of
 * them a row, U loads a lane a round (of each matrix of the SwiGLU pair),
 * the first round issued before the PDL wait; then the block copies x
 * (times the norm weights, their squares summed over the block) into two
 * planes, the first and the second four of each eight inputs, so that a
 * lane's two 16-byte reads of its eight inputs are each 512 contiguous
 * bytes over the warp. What made it faster (H100, docs/PERF-NOTES.md GPU
 * round 14) was mostly the larger blocks: 16 warps, 8 rows a block, where
 * the kernel above has 2 rows a block of 4 warps; staged with 8 warps it
 * was no faster. Larger blocks also share one staging of x (from L2)
 * among more rows. tela bench tg128: 1B F16 848 -> 958, 8B F16 170 ->
 * 187, Qwen3.5-2B F16 498 -> 543. */
template <int TYPE, bool SW, int NW, int WPR, int U>
static __global__ void __launch_bounds__(NW * 32) gemv_fx_kernel(const gemv_params p) {
    extern __shared__ float4 fx_x[];       /* [2][K / 8] */
    __shared__ float fx_red[NW][3];
    constexpr int RPB = NW / WPR;
    const int ti = gemv_target_of(p);
    const gemv_target &tg = p.t[ti];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, slice = warp % WPR;
    const int64_t row = (int64_t)(blockIdx.x - p.block0[ti]) * RPB + warp / WPR;
    const bool live = row < tg.w.n_rows;
    const int K = (int)tg.w.n_cols, n8 = K / 8, step = 32 * WPR;
    const uint4 *wg = (const uint4 *)tg.w.p + (size_t)(live ? row : 0) * n8;
    const uint4 *wu = SW ? (const uint4 *)p.w_up.p + (size_t)(live ? row : 0) * n8 : wg;
    uint4 v[U], vu[U];
    const int c0 = lane + 32 * slice;
    early_begin(p);
    fs_load<U, SW>(wg, wu, c0, step, n8, live, v, vu);
    early_end(p);
    float ss = 0.0f;
    for (int c = threadIdx.x; c < n8; c += NW * 32) {
        float4 a = __ldg((const float4 *)(p.x + 8 * c)), b = __ldg((const float4 *)(p.x + 8 * c + 4));
        if (p.norm_w) {
            ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
            ss += b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
            const float4 na = __ldg((const float4 *)(p.norm_w + 8 * c)), nb = __ldg((const float4 *)(p.norm_w + 8 * c + 4));
            a.x *= na.x, a.y *= na.y, a.z *= na.z, a.w *= na.w;
            b.x *= nb.x, b.y *= nb.y, b.z *= nb.z, b.w *= nb.w;
        }
        fx_x[c] = a, fx_x[n8 + c] = b;
    }
    if (p.norm_w) {
        ss = warp_sum(ss);
        if (lane == 0) fx_red[warp][2] = ss;
    }
    __syncthreads();
    float acc = 0.0f, accu = 0.0f;
    for (int c = c0; c < n8; c += step * U) {
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int c8 = c + step * j;
            if (c8 >= n8) break;
            const float4 a = fx_x[c8], b = fx_x[n8 + c8];
            const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            acc = dot8<TYPE>(v[j], xs, acc);
            if (SW) accu = dot8<TYPE>(vu[j], xs, accu);
        }
        if (c + step * U < n8) fs_load<U, SW>(wg, wu, c + step * U, step, n8, live, v, vu);
    }
    acc = warp_sum(acc);
    if (SW) accu = warp_sum(accu);
    float scale = 1.0f;
    if (p.norm_w) {
        float t = 0.0f;
#pragma unroll
        for (int i = 0; i < NW; i++) t += fx_red[i][2];
        scale = rsqrtf(t / (float)K + p.eps);
    }
    if (WPR > 1) {
        if (lane == 0) fx_red[warp][0] = acc, fx_red[warp][1] = accu;
        __syncthreads();
        if (slice != 0) return;
        acc = accu = 0.0f;
#pragma unroll
        for (int i = 0; i < WPR; i++) acc += fx_red[warp + i][0], accu += fx_red[warp + i][1];
    }
    if (!live || lane != 0) return;
    float val = acc * scale;
    if (SW) val = silu(val) * (accu * scale);
    float *yp = tg.y + row;
    *yp = p.accumulate ? *yp + val : val;
}

template <int TYPE, bool SW, int U>
static gemv_kernel_fn gemv_fx_pick_u(int nw, int wpr) {
    if (nw == 16) return wpr == 4 ? gemv_fx_kernel<TYPE, SW, 16, 4, U> : wpr == 2 ? gemv_fx_kernel<TYPE, SW, 16, 2, U> : gemv_fx_kernel<TYPE, SW, 16, 1, U>;
    return wpr == 4 ? gemv_fx_kernel<TYPE, SW, 8, 4, U> : wpr == 2 ? gemv_fx_kernel<TYPE, SW, 8, 2, U> : gemv_fx_kernel<TYPE, SW, 8, 1, U>;
}

template <int TYPE>
static gemv_kernel_fn gemv_fx_pick_t(bool sw, int nw, int wpr, int u) {
    if (sw) return gemv_fx_pick_u<TYPE, true, 4>(nw, wpr);
    return u == 8 ? gemv_fx_pick_u<TYPE, false, 8>(nw, wpr) : gemv_fx_pick_u<TYPE, false, 4>(nw, wpr);
}

static gemv_kernel_fn gemv_fx_pick(tela_type type, bool sw, int nw, int wpr, int u) {
    if (type == TELA_TYPE_F16) return gemv_fx_pick_t<TELA_TYPE_F16>(sw, nw, wpr, u);
    if (type == TELA_TYPE_BF16) return gemv_fx_pick_t<TELA_TYPE_BF16>(sw, nw, wpr, u);
    return NULL;
}

/* The kernel above's shape: NW warps a block, WPR a row, U loads a lane a
 * round; 16:2:4 measured best or level on every shape tried against 8 and
 * 16 warps, 1, 2 and 4 a row, 4 and 8 loads (TELA_CUDA_GEMV_FX=NW:WPR:U
 * sets it). */
static void gemv_fx_shape(const cuda_exec *ex, int64_t K, bool sw, int *nw, int *wpr, int *u) {
    if (ex->gemv_fx_nw > 0) {
        *nw = ex->gemv_fx_nw, *wpr = ex->gemv_fx_wpr, *u = ex->gemv_fx_u;
        return;
    }
    (void)K, (void)sw;
    *nw = 16, *wpr = 2, *u = 4;
}

/* Float weights (F16/BF16), 1 to 8 tokens, on the tensor cores
 * (mma.sync m16n8k16, f32 accumulation): the products' B operand is 8
 * weight rows (RB such fragments a warp), A the tokens (rows 0-7 of its
 * 16; 8-15 are zero). Lane 4n + c loads 16 bytes of row n at column
 * k0 + 8c, one load a step, and its token n's 8 inputs at the same
 * columns: the columns' order inside an MMA is a permutation shared by A
 * and B, so no shuffle is needed. Each output (token, row) is a chain of
 * MMAs that reads only that token's inputs and that row's weights, in an
 * order fixed by the matrix shape: a product of n tokens gives each token
 * the bits of this kernel's product of that token alone (test_cuda_ops
 * checks it), and costs about as much. The inputs keep f32's precision in
 * two parts, x = hi + lo (f16: lo scaled by 2^11, in its own accumulator;
 * bf16: lo in bf16), ~2^-21 relative. Used for 2-8 tokens (verification
 * passes, batched decode); for one token the early-load kernels above
 * are faster (H200, 1B F16 tg128: 1,008 against 641 tok/s with this
 * kernel; docs/PERF-NOTES.md), so a decode step and a verification pass
 * round differently unless TELA_CUDA_GEMV_FM=1 sends one token here too.
 * Blocks of 8 warps: S warps (slices of the row's 32-column steps, step s
 * to the warp s mod S) for each group of 8 RB rows, 8 / S groups a block;
 * the slices meet in shared memory in slice order. U steps' loads in
 * flight a lane, the first U issued before the PDL wait. */
#define FM_WARPS 8

/* d += A B, one m16n8k16 MMA with f32 accumulation: A's fragment a[0..3]
 * (rows g and g + 8, columns 2c..2c+1 and 2c+8..2c+9 of the 16, as PTX
 * orders them) and B's b0, b1 (this lane's weight row, columns 2c..2c+1
 * and 2c+8..2c+9). Not volatile: a pure function of its operands, which
 * the compiler may schedule. */
template <int TYPE>
static __device__ __forceinline__ void fm_mma4(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    if (TYPE == TELA_TYPE_F16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The same with A's rows 8-15 zero (a0, a2: this lane's token). */
template <int TYPE>
static __device__ __forceinline__ void fm_mma(float *d, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
    const uint32_t a[4] = {a0, 0u, a2, 0u};
    fm_mma4<TYPE>(d, a, b0, b1);
}

/* Two inputs as the hi and lo parts of the MMA's A operand (the scale of
 * lo: 2^11 for f16, whose exponent range is narrow; 1 for bf16). */
template <int TYPE>
static __device__ __forceinline__ void fm_split(float x0, float x1, uint32_t *hi, uint32_t *lo) {
    if (TYPE == TELA_TYPE_F16) {
        const __half2 h = __floats2half2_rn(x0, x1);
        const float2 hf = __half22float2(h);
        const __half2 l = __floats2half2_rn((x0 - hf.x) * 2048.0f, (x1 - hf.y) * 2048.0f);
        *hi = *(const uint32_t *)&h;
        *lo = *(const uint32_t *)&l;
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
        const float2 hf = __bfloat1622float2(h);
        const __nv_bfloat162 l = __floats2bfloat162_rn(x0 - hf.x, x1 - hf.y);
        *hi = *(const uint32_t *)&h;
        *lo = *(const uint32_t *)&l;
    }
}

template <int TYPE, bool SW, int S, int RB, int U>
static __global__ void __launch_bounds__(FM_WARPS * 32, 3) gemv_fm_kernel(const gemv_params p) {
    constexpr int G = FM_WARPS / S, RW = 8 * RB; /* row groups a block, rows a group */
    const int ti = gemv_target_of(p);
    const gemv_target &tg = p.t[ti];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, slice = warp % S, grp = warp / S;
    const int n = lane >> 2, c = lane & 3;
    const int64_t row0 = ((int64_t)(blockIdx.x - p.block0[ti]) * G + grp) * RW;
    const int K = (int)tg.w.n_cols, n8 = K / 8, ns = K / 32;
    const int nj = slice < ns ? (ns - slice + S - 1) / S : 0; /* this warp's steps */
    const uint4 *wg[RB], *wu[RB];
    bool live[RB];
#pragma unroll
    for (int b = 0; b < RB; b++) {
        const int64_t row = row0 + n + 8 * b;
        live[b] = row < tg.w.n_rows;
        wg[b] = (const uint4 *)tg.w.p + (size_t)(live[b] ? row : 0) * n8 + c;
        wu[b] = SW ? (const uint4 *)p.w_up.p + (size_t)(live[b] ? row : 0) * n8 + c : wg[b];
    }
    uint4 v[U][RB], vu[U][SW ? RB : 1];
    early_begin(p);
#pragma unroll
    for (int j = 0; j < U; j++)
#pragma unroll
        for (int b = 0; b < RB; b++) {
            v[j][b] = make_uint4(0, 0, 0, 0);
            if (SW) vu[j][SW ? b : 0] = make_uint4(0, 0, 0, 0);
            if (live[b] && j < nj) {
                v[j][b] = ld_stream(wg[b] + 4 * (slice + S * j));
                if (SW) vu[j][SW ? b : 0] = ld_stream(wu[b] + 4 * (slice + S * j));
            }
        }
    early_end(p);
    const bool tok = n < p.n_tok; /* this lane's A row is token n */
    const float *xr = p.x + (size_t)(tok ? n : 0) * p.x_stride + 8 * c;
    float dh[RB][4], dl[RB][4], uh[SW ? RB : 1][4], ul[SW ? RB : 1][4], ss = 0.0f;
#pragma unroll
    for (int b = 0; b < RB; b++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            dh[b][i] = dl[b][i] = 0.0f;
            if (SW) uh[SW ? b : 0][i] = ul[SW ? b : 0][i] = 0.0f;
        }
    for (int j0 = 0; j0 < nj; j0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = j0 + u;
            if (j >= nj) break;
            const int k0 = 32 * (slice + S * j);
            uint32_t hi[4] = {0, 0, 0, 0}, lo[4] = {0, 0, 0, 0};
            if (tok) {
                float4 a = __ldg((const float4 *)(xr + k0)), e = __ldg((const float4 *)(xr + k0 + 4));
                if (p.norm_w) {
                    ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
                    ss += e.x * e.x + e.y * e.y + e.z * e.z + e.w * e.w;
                    const float4 wa = __ldg((const float4 *)(p.norm_w + k0 + 8 * c)),
                                 wb = __ldg((const float4 *)(p.norm_w + k0 + 8 * c + 4));
                    a.x *= wa.x, a.y *= wa.y, a.z *= wa.z, a.w *= wa.w;
                    e.x *= wb.x, e.y *= wb.y, e.z *= wb.z, e.w *= wb.w;
                }
                fm_split<TYPE>(a.x, a.y, &hi[0], &lo[0]);
                fm_split<TYPE>(a.z, a.w, &hi[1], &lo[1]);
                fm_split<TYPE>(e.x, e.y, &hi[2], &lo[2]);
                fm_split<TYPE>(e.z, e.w, &hi[3], &lo[3]);
            }
            /* columns k0 + 8c + 0..3 are the first MMA's, + 4..7 the second's */
#pragma unroll
            for (int b = 0; b < RB; b++) {
                fm_mma<TYPE>(dh[b], hi[0], hi[1], v[u][b].x, v[u][b].y);
                fm_mma<TYPE>(dl[b], lo[0], lo[1], v[u][b].x, v[u][b].y);
                fm_mma<TYPE>(dh[b], hi[2], hi[3], v[u][b].z, v[u][b].w);
                fm_mma<TYPE>(dl[b], lo[2], lo[3], v[u][b].z, v[u][b].w);
                if (SW) {
                    const uint4 w2 = vu[u][SW ? b : 0];
                    fm_mma<TYPE>(uh[SW ? b : 0], hi[0], hi[1], w2.x, w2.y);
                    fm_mma<TYPE>(ul[SW ? b : 0], lo[0], lo[1], w2.x, w2.y);
                    fm_mma<TYPE>(uh[SW ? b : 0], hi[2], hi[3], w2.z, w2.w);
                    fm_mma<TYPE>(ul[SW ? b : 0], lo[2], lo[3], w2.z, w2.w);
                }
                if (live[b] && j + U < nj) {
                    v[u][b] = ld_stream(wg[b] + 4 * (slice + S * (j + U)));
                    if (SW) vu[u][SW ? b : 0] = ld_stream(wu[b] + 4 * (slice + S * (j + U)));
                }
            }
        }
    }
    /* lane (n, c) holds token n's sums for rows 8b + 2c and 8b + 2c + 1 of the group */
    const float ls = TYPE == TELA_TYPE_F16 ? 1.0f / 2048.0f : 1.0f;
    __shared__ float part[FM_WARPS][SW ? 2 : 1][8][RW], pss[FM_WARPS][8];
#pragma unroll
    for (int b = 0; b < RB; b++) {
        part[warp][0][n][8 * b + 2 * c] = dh[b][0] + dl[b][0] * ls;
        part[warp][0][n][8 * b + 2 * c + 1] = dh[b][1] + dl[b][1] * ls;
        if (SW) {
            part[warp][SW ? 1 : 0][n][8 * b + 2 * c] = uh[SW ? b : 0][0] + ul[SW ? b : 0][0] * ls;
            part[warp][SW ? 1 : 0][n][8 * b + 2 * c + 1] = uh[SW ? b : 0][1] + ul[SW ? b : 0][1] * ls;
        }
    }
    ss += __shfl_xor_sync(0xffffffffu, ss, 1);
    ss += __shfl_xor_sync(0xffffffffu, ss, 2);
    if (c == 0) pss[warp][n] = ss;
    __syncthreads();
    /* the outputs of the block's groups, 8 tokens x RW rows each */
    for (int o = threadIdx.x; o < G * 8 * RW; o += FM_WARPS * 32) {
        const int g = o / (8 * RW), t = (o / RW) % 8, r = o % RW;
        const int64_t row = ((int64_t)(blockIdx.x - p.block0[ti]) * G + g) * RW + r;
        if (t >= p.n_tok || row >= tg.w.n_rows) continue;
        float acc = 0.0f, up = 0.0f, sq = 0.0f;
#pragma unroll
        for (int s = 0; s < S; s++) {
            acc += part[g * S + s][0][t][r];
            if (SW) up += part[g * S + s][SW ? 1 : 0][t][r];
            sq += pss[g * S + s][t];
        }
        const float scale = p.norm_w ? rsqrtf(sq / (float)K + p.eps) : 1.0f;
        float val = acc * scale;
        if (SW) val = silu(val) * (up * scale);
        float *yp = tg.y + (size_t)t * tg.y_stride + row;
        *yp = p.accumulate ? *yp + val : val;
    }
}

template <int TYPE, bool SW, int RB>
static gemv_kernel_fn gemv_fm_pick_s(int S) {
    constexpr int U = SW || RB >= 2 ? 2 : 8;
    return S == 8 ? gemv_fm_kernel<TYPE, SW, 8, RB, U> : S == 4 ? gemv_fm_kernel<TYPE, SW, 4, RB, U>
         : S == 2 ? gemv_fm_kernel<TYPE, SW, 2, RB, U> : gemv_fm_kernel<TYPE, SW, 1, RB, U>;
}

template <int TYPE>
static gemv_kernel_fn gemv_fm_pick_t(bool sw, int S, int RB) {
    if (sw) return RB >= 2 ? gemv_fm_pick_s<TYPE, true, 2>(S) : gemv_fm_pick_s<TYPE, true, 1>(S);
    return RB >= 4 ? gemv_fm_pick_s<TYPE, false, 4>(S) : RB == 2 ? gemv_fm_pick_s<TYPE, false, 2>(S)
                   : gemv_fm_pick_s<TYPE, false, 1>(S);
}

static gemv_kernel_fn gemv_fm_pick(tela_type type, bool sw, int S, int RB) {
    if (type == TELA_TYPE_F16) return gemv_fm_pick_t<TELA_TYPE_F16>(sw, S, RB);
    if (type == TELA_TYPE_BF16) return gemv_fm_pick_t<TELA_TYPE_BF16>(sw, S, RB);
    return NULL;
}

/* The shape of the kernel above, from the matrix alone (so that every
 * token count gets the same sums): the most row fragments a warp (RB: 4,
 * 2 for the SwiGLU pair; each step's inputs then serve more rows) and the
 * fewest slices (S, up to 8 and the row's steps) that still give the grid
 * about 24 warps an SM (TELA_CUDA_FM_SLICES=1|2|4|8, TELA_CUDA_FM_RB=1|2|4
 * set them). */
static void gemv_fm_shape(const cuda_exec *ex, int64_t rows, int64_t K, bool sw, int *S, int *RB) {
    const int64_t want = (int64_t)ex->be->sm_count * 24;
    const int rb_max = sw ? 2 : 4, rb_hi = ex->fm_rb > 0 && ex->fm_rb < rb_max ? ex->fm_rb : rb_max;
    const int rb_lo = ex->fm_rb > 0 ? rb_hi : 1;
    for (int rb = rb_hi; rb >= rb_lo; rb /= 2)
        for (int s = 1; s <= 8 && s <= K / 32; s *= 2) {
            if (ex->fm_slices > 0 && s != ex->fm_slices) continue;
            *S = s, *RB = rb;
            if ((rows + 8 * rb - 1) / (8 * rb) * s >= want) return;
        }
}

static unsigned gemv_fill(gemv_params *p, const tela_mat *const *w, float *const *y, const int64_t *y_stride, int n_w,
                          const tela_mat *w_up, const float *x, int64_t x_stride, int n_tok, bool accumulate,
                          int rows_per_block);

/* The float products of 1-8 tokens by gemv_fm_kernel: false when it does
 * not take them (type, K % 32, alignment of x). */
static bool gemv_fm(cuda_exec *ex, const tela_mat *const *w, float *const *y, const int64_t *y_stride, int n_w,
                    const tela_mat *w_up, const float *x, int64_t x_stride, int n_tok, bool accumulate,
                    const float *norm_w, float eps) {
    const tela_type type = w[0]->type;
    const int64_t K = w[0]->n_cols;
    if ((type != TELA_TYPE_F16 && type != TELA_TYPE_BF16) || K % 32 != 0 || n_tok < 1 || n_tok > 8 ||
        n_w > GEMV_MAX_TARGETS || x_stride % 4 != 0 || ((uintptr_t)x & 15) != 0 || ((uintptr_t)norm_w & 15) != 0)
        return false;
    int64_t rows = 0;
    for (int i = 0; i < n_w; i++) rows += w[i]->n_rows;
    int S = 8, RB = 1;
    gemv_fm_shape(ex, rows, K, w_up != NULL, &S, &RB);
    gemv_params p;
    const unsigned nb = gemv_fill(&p, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, 8 * RB * (FM_WARPS / S));
    p.norm_w = norm_w;
    p.eps = eps;
    p.order = ex->gemv_order;
    tela_cuda_launch(ex, gemv_fm_pick(type, w_up != NULL, S, RB), nb, FM_WARPS * 32, 0, p);
    gemv_launched_early(ex, p, "gemv (float, tensor cores)");
    return true;
}

/* Rows a warp for the float products of one token, as measured on the
 * H200 (docs/PERF-NOTES.md): four for the output head (tens of thousands
 * of rows), two for rows of 4096 or more inputs where that keeps three
 * blocks an SM, one for the rest (the 1B's matrices of 2048 inputs: the
 * loop is short and more warps per row pay better);
 * TELA_CUDA_GEMV_ROWS=1|2|4 sets it (0: the one-row kernel above). */
static int gemv_fr_rows(const cuda_exec *ex, int64_t rows, int64_t K) {
    if (ex->gemv_f_rows >= 0) return ex->gemv_f_rows;
    const int64_t sms = ex->be->sm_count;
    if (rows / (4 * GEMV_F_WARPS) >= 24 * sms) return 4;
    if (K >= 4096 && rows / (2 * GEMV_F_WARPS) >= 3 * sms) return 2;
    return 1;
}

static size_t gemv_smem(tela_type type, int nt_tile, int64_t K) {
    if (type == TELA_TYPE_F32 || type == TELA_TYPE_F16 || type == TELA_TYPE_BF16) return 0;
    return (size_t)nt_tile * (size_t)K + 2 * (size_t)nt_tile * (size_t)(K / 32) * sizeof(float);
}

template <int NT>
static gemv_kernel_fn gemv_pick_nt(tela_type type, bool vec) {
    switch (type) {
    case TELA_TYPE_Q4_K: return gemv_q_kernel<TELA_TYPE_Q4_K, NT>;
    case TELA_TYPE_Q5_K: return gemv_q_kernel<TELA_TYPE_Q5_K, NT>;
    case TELA_TYPE_Q6_K: return gemv_q_kernel<TELA_TYPE_Q6_K, NT>;
    case TELA_TYPE_Q8_0: return gemv_q_kernel<TELA_TYPE_Q8_0, NT>;
    case TELA_TYPE_Q4_0: return gemv_q_kernel<TELA_TYPE_Q4_0, NT>;
    case TELA_TYPE_F32: return vec ? gemv_f_kernel<TELA_TYPE_F32, NT, true> : gemv_f_kernel<TELA_TYPE_F32, NT, false>;
    case TELA_TYPE_F16: return vec ? gemv_f_kernel<TELA_TYPE_F16, NT, true> : gemv_f_kernel<TELA_TYPE_F16, NT, false>;
    case TELA_TYPE_BF16:
        return vec ? gemv_f_kernel<TELA_TYPE_BF16, NT, true> : gemv_f_kernel<TELA_TYPE_BF16, NT, false>;
    default: return NULL;
    }
}

static gemv_kernel_fn gemv_pick(tela_type type, int nt_tile, bool vec) {
    switch (nt_tile) {
    case 1: return gemv_pick_nt<1>(type, vec);
    case 2: return gemv_pick_nt<2>(type, vec);
    case 4: return gemv_pick_nt<4>(type, vec);
    default: return gemv_pick_nt<8>(type, vec);
    }
}

bool tela_cuda_gemv_ok(cuda_exec *ex, const tela_mat *w, int n_tok) {
    const int nt_tile = n_tok <= 1 ? 1 : n_tok <= 2 ? 2 : n_tok <= 4 ? 4 : 8;
    return gemv_pick(w->type, nt_tile, false) && gemv_smem(w->type, nt_tile, w->n_cols) <= ex->be->smem_optin;
}

/* The parameters of a gemv launch over n_w matrices, rows_per_block rows a
 * block; the blocks of the grid. */
static unsigned gemv_fill(gemv_params *p, const tela_mat *const *w, float *const *y, const int64_t *y_stride, int n_w,
                          const tela_mat *w_up, const float *x, int64_t x_stride, int n_tok, bool accumulate,
                          int rows_per_block) {
    memset(p, 0, sizeof *p);
    unsigned blocks = 0;
    for (int i = 0; i < n_w; i++) {
        p->t[i].w = {(const uint8_t *)w[i]->dev, w[i]->n_rows, w[i]->n_cols};
        p->t[i].y = y[i];
        p->t[i].y_stride = y_stride[i];
        p->block0[i] = blocks;
        blocks += (unsigned)((w[i]->n_rows + rows_per_block - 1) / rows_per_block);
    }
    p->n_targets = n_w;
    p->w_up = {w_up ? (const uint8_t *)w_up->dev : NULL, w[0]->n_rows, w[0]->n_cols};
    p->x = x;
    p->x_stride = x_stride;
    p->n_tok = n_tok;
    p->accumulate = accumulate;
    return blocks;
}

static bool gemv2(cuda_exec *ex, const tela_mat *const *w, float *const *y, const int64_t *y_stride, int n_w,
                  const tela_mat *w_up, const float *x, int64_t x_stride, int n_tok, bool accumulate,
                  const float *norm_w, float eps);

/* The products of 2-8 tokens that gemv_frn_kernel takes: float weights
 * whose one-token products take gemv_fr_kernel with 4 rows a warp (the
 * same rule, so that the bits match), no SwiGLU pair, and not when
 * TELA_CUDA_GEMV_FM=1 sends every float product to the tensor cores
 * (TELA_CUDA_GEMV_FRN=0: the tensor-core kernel takes them too). */
static bool gemv_frn(cuda_exec *ex, const tela_mat *const *w, float *const *y, const int64_t *y_stride, int n_w,
                     const tela_mat *w_up, const float *x, int64_t x_stride, int n_tok, bool accumulate,
                     const float *norm_w, float eps) {
    const tela_type type = w[0]->type;
    const int64_t K = w[0]->n_cols;
    if (!ex->gemv_frn || (type != TELA_TYPE_F16 && type != TELA_TYPE_BF16) || w_up || ex->gemv_fm_one || n_tok < 2 || n_tok > 8 ||
        n_w > GEMV_MAX_TARGETS || K % 8 != 0 || x_stride % 4 != 0 || ((uintptr_t)x & 15) != 0 ||
        ((uintptr_t)norm_w & 15) != 0)
        return false;
    int64_t rows = 0;
    for (int i = 0; i < n_w; i++) rows += w[i]->n_rows;
    if (gemv_fr_rows(ex, rows, K) != 4) return false;
    gemv_params p;
    const unsigned nb = gemv_fill(&p, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, GEMV_F_WARPS * 4);
    p.norm_w = norm_w;
    p.eps = eps;
    tela_cuda_launch(ex, type == TELA_TYPE_F16 ? gemv_frn_pick_t<TELA_TYPE_F16>(n_tok) : gemv_frn_pick_t<TELA_TYPE_BF16>(n_tok),
                     nb, 32 * GEMV_F_WARPS, 0, p);
    tela_cuda_launched(ex, "gemv (float, several tokens, 4 rows a warp)");
    return true;
}

void tela_cuda_gemv(cuda_exec *ex, const tela_mat *const *w, float *const *y, const int64_t *y_stride, int n_w,
                    const tela_mat *w_up, const float *x, int64_t x_stride, int n_tok, bool accumulate,
                    const float *norm_w, float eps) {
    if (gemv_frn(ex, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, norm_w, eps)) return;
    if (ex->gemv_fm && (n_tok > 1 || ex->gemv_fm_one) &&
        gemv_fm(ex, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, norm_w, eps))
        return;
    if (ex->gemv_v2 && gemv2(ex, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, norm_w, eps)) return;
    const int nt_tile = n_tok <= 1 ? 1 : n_tok <= 2 ? 2 : n_tok <= 4 ? 4 : 8;
    const int64_t K = w[0]->n_cols;
    const bool vec = K % 8 == 0 && x_stride % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)norm_w & 15) == 0;
    gemv_kernel_fn fn = gemv_pick(w[0]->type, nt_tile, vec);
    const size_t smem = gemv_smem(w[0]->type, nt_tile, K);
    if (!fn || smem > ex->be->smem_optin || n_w > GEMV_MAX_TARGETS) {
        tela_cuda_check(ex, cudaErrorNotSupported, "gemv: no kernel for this shape");
        return;
    }
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (!tela_cuda_check(ex, e, "gemv: shared memory")) return;
    }
    gemv_params p;
    const bool quant = smem > 0;
    if (!quant && vec && n_tok == 1 && (w[0]->type == TELA_TYPE_F16 || w[0]->type == TELA_TYPE_BF16)) {
        int64_t rows = 0;
        for (int i = 0; i < n_w; i++) rows += w[i]->n_rows;
        const int R = gemv_fr_rows(ex, rows, K);
        if (ex->gemv_early && ex->gemv_f_rows < 0 && R != 4 && ex->gemv_fx_nw >= 0) {
            int nw, wpr, u;
            gemv_fx_shape(ex, K, w_up != NULL, &nw, &wpr, &u);
            const size_t smem = (size_t)K * 4;
            gemv_kernel_fn fx = gemv_fx_pick(w[0]->type, w_up != NULL, nw, wpr, u);
            if (smem <= ex->be->smem_optin) {
                if (smem > 48 * 1024) {
                    cudaError_t e = cudaFuncSetAttribute((const void *)fx, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
                    if (!tela_cuda_check(ex, e, "gemv: shared memory")) return;
                }
                const unsigned nb = gemv_fill(&p, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, nw / wpr);
                p.norm_w = norm_w;
                p.eps = eps;
                p.order = ex->gemv_order;
                tela_cuda_launch(ex, fx, nb, 32 * nw, smem, p);
                gemv_launched_early(ex, p, "gemv (float, x staged)");
                return;
            }
        }
        if (ex->gemv_early && ex->gemv_f_rows < 0 && R != 4) {
            const int wpr = gemv_fs_wpr(ex, rows, K, w_up != NULL);
            const unsigned nb = gemv_fill(&p, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, 4 / wpr);
            p.norm_w = norm_w;
            p.eps = eps;
            p.order = ex->gemv_order;
            const int D = gemv_fs_depth(ex, K, wpr, w_up != NULL);
            tela_cuda_launch(ex, gemv_fs_pick(w[0]->type, w_up != NULL, wpr, D), nb, 128, 0, p);
            gemv_launched_early(ex, p, "gemv (float, early loads)");
            return;
        }
        if (R > 0) {
            const unsigned nb = gemv_fill(&p, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, GEMV_F_WARPS * R);
            p.norm_w = norm_w;
            p.eps = eps;
            tela_cuda_launch(ex, gemv_fr_pick(w[0]->type, R), nb, 32 * GEMV_F_WARPS, 0, p);
            tela_cuda_launched(ex, "gemv (float rows)");
            return;
        }
    }
    const int threads = 32 * (quant ? GEMV_Q_WARPS : GEMV_F_WARPS);
    const unsigned blocks = gemv_fill(&p, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate,
                                      quant ? GEMV_Q_ROWS : GEMV_F_WARPS);
    p.norm_w = norm_w;
    p.eps = eps;
    tela_cuda_launch(ex, fn, blocks, threads, smem, p);
    tela_cuda_launched(ex, "gemv");
}

/* -------------------------------------------- decode, variant 2 (opt-in) */

/* TELA_CUDA_GEMV=2 (an experiment, measured against the kernels above on a
 * GPU before it becomes the default): the activations are quantized once
 * per product input by a kernel of their own into device memory (with the
 * RMSNorm's factor, when there is one, kept aside per token), and the
 * products run as lean blocks of four warps, one row a warp, at most 85
 * registers (six blocks an SM), reading the quantized activations through
 * the cache: no prologue per block and several times the warps in flight
 * of the variant above (whose blocks, by Nsight Compute, reach 12-25%
 * occupancy). */

/* One block per token: the squares summed for the norm, then x * nw (or x)
 * quantized to int8 per 32 with the scale and the scaled sum of each 32. */
template <int LT>
static __global__ void __launch_bounds__(512) quantize_act_kernel(const float *x, int64_t x_stride, int K,
                                                                  const float *nw, float eps, int8_t *xq, float *xd,
                                                                  float *xs, float *nscale) {
    TELA_PDL_ENTRY();
    const int t = blockIdx.x;
    float ss[1];
    quantize_x<1, LT>(x + (size_t)t * x_stride, x_stride, K, 1, nw, xq + (size_t)t * act_tok_bytes(LT, K),
                      xd + (size_t)t * (K / 32), xs + (size_t)t * (K / 32), ss, threadIdx.x, blockDim.x);
    if (!nw) return;
    __shared__ float part[16];
    const float w = warp_sum(ss[0]);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = w;
    __syncthreads();
    if (threadIdx.x == 0) {
        float tot = 0.0f;
        for (int i = 0; i < (int)(blockDim.x / 32); i++) tot += part[i];
        nscale[t] = rsqrtf(tot / (float)K + eps);
    }
}

/* R rows a warp (R = 2 for one token on request): the second row's units
 * read the same activations, which the compiler loads once for both. Two
 * units a lane in flight for one token. */
template <int TYPE, int NT, int R>
static __global__ void __launch_bounds__(128, 6) gemv2_q_kernel(const gemv_params p, const int8_t *xq, const float *xd,
                                                                  const float *xs, const float *nscale) {
    TELA_PDL_ENTRY();
    const int ti = gemv_target_of(p);
    const gemv_target &tg = p.t[ti];
    const int K = (int)tg.w.n_cols;
    const int64_t row0 = ((int64_t)(blockIdx.x - p.block0[ti]) * 4 + threadIdx.x / 32) * R;
    if (row0 >= tg.w.n_rows) return;
    const int rv = tg.w.n_rows - row0 < R ? (int)(tg.w.n_rows - row0) : R;
    const int lane = threadIdx.x & 31, n_units = qunits<TYPE>::count(K);
    const bool swiglu = p.w_up.p != NULL;
    float acc[R][NT], up[R][NT], scale[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) scale[t] = nscale && t < p.n_tok ? nscale[t] : 1.0f;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = up[r][t] = 0.0f;
    constexpr int UNITS = NT == 1 ? 2 : 1; /* units in flight a lane */
#pragma unroll UNITS
    for (int u = lane; u < n_units; u += 32) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int64_t row = r < rv ? row0 + r : row0;
            qunits<TYPE>::template dot<NT, TYPE>(tg.w, row, u, xq, xd, xs, K, p.n_tok, acc[r]);
            if (swiglu) qunits<TYPE>::template dot<NT, TYPE>(p.w_up, row, u, xq, xd, xs, K, p.n_tok, up[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
        if (r < rv) gemv_write<NT>(p, tg, row0 + r, acc[r], up[r], swiglu, scale);
}

/* The result of a row taken by S warps of a block (consecutive warps, part
 * 0 first): each part's sums meet in shared memory and part 0 adds them in
 * part order, the same order for every token count; for the SwiGLU pair
 * (SW) the up matrix's sums likewise, then silu(gate) * up as gemv_write
 * does. Every thread of the block calls it. */
template <int NT, int S, bool SW>
static __device__ __forceinline__ void gemv_split_write(const gemv_params &p, const gemv_target &tg, int64_t row,
                                                        bool live, const float *acc, const float *acc_up,
                                                        const float *scale, int n_tok) {
    __shared__ float part_sum[4][NT], part_up[SW ? 4 : 1][NT];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float v = warp_sum(acc[t]);
        if (lane == 0) part_sum[warp][t] = v;
        if constexpr (SW) {
            const float u = warp_sum(acc_up[t]);
            if (lane == 0) part_up[warp][t] = u;
        }
    }
    __syncthreads();
    if (warp % S != 0 || !live || lane != 0) return;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t >= n_tok) break;
        float v = part_sum[warp][t];
#pragma unroll
        for (int i = 1; i < S; i++) v += part_sum[warp + i][t];
        v *= scale[t];
        if constexpr (SW) {
            float u = part_up[warp][t];
#pragma unroll
            for (int i = 1; i < S; i++) u += part_up[warp + i][t];
            v = silu(v) * (u * scale[t]);
        }
        float *yp = tg.y + (size_t)t * tg.y_stride + row;
        *yp = p.accumulate ? *yp + v : v;
    }
}

/* NT tokens (1, or 2, 4, 8 with one row a warp: verification passes and
 * batches of sequences, 128 registers a thread so that the K-quant
 * kernels do not spill) with early loads (cuda_common.cuh): R rows a warp, each
 * lane's units of all R rows (and of W_up's) loaded into registers before
 * the arithmetic, the first round before the PDL wait, which is here the
 * wait for the activations' quantization (quantize_act_kernel): the fetch
 * overlaps it. (Quantizing the activations in each block instead, behind
 * the fetch, measured 18-26% slower on the H200: docs/PERF-NOTES.md.)
 * D rounds of units a lane in flight: with D = 2 the next round's loads
 * are issued as soon as a round's registers are used, so a row of several
 * rounds (K > 32 units: the 8B's products, every down product) keeps its
 * lane's loads in flight through the arithmetic, where with D = 1 each
 * round waits the whole DRAM latency after the last. */
#ifdef TELA_CUDA_TIMELINE
/* A diagnostic build only (-DTELA_CUDA_TIMELINE, scripts/timeline-gpu.sh):
 * each warp of the one-token products whose rows are TL_K inputs long (the
 * 8B's down product unless -DTELA_CUDA_TIMELINE_K says otherwise) stamps
 * the global timer at entry, after its PDL wait, after its last round and
 * after its write; the last launch of each of Q4_K (slot 0) and Q6_K (slot
 * 1) stays in tl_buf, which tela_cuda_timeline_dump writes out at the
 * backend's end. Nsight Compute times kernels alone, without the launch
 * overlap of the captured step; these stamps are taken inside it. */
#ifdef TELA_CUDA_TIMELINE_K
#define TL_K TELA_CUDA_TIMELINE_K
#else
#define TL_K 14336
#endif
#define TL_WARPS 16384
__device__ unsigned long long tl_buf[2][TL_WARPS][6];
static __device__ __forceinline__ unsigned long long tl_now(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define TL_STAMP(v) const unsigned long long v = tl_now()
/* Lane 0 of a warp of a stamped launch (rows TL_K long, Q4_K or Q6_K)
 * writes its four stamps, its SM and tag (the kernel's shape) to tl_buf. */
template <int TYPE>
static __device__ void tl_record(int K, int warp, unsigned long long entry, unsigned long long waited,
                                 unsigned long long mid, unsigned long long written, unsigned long long tag) {
    const int64_t gw = (int64_t)blockIdx.x * 4 + warp;
    if (K != TL_K || (threadIdx.x & 31) != 0 || gw >= TL_WARPS || (TYPE != TELA_TYPE_Q4_K && TYPE != TELA_TYPE_Q6_K))
        return;
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    unsigned long long *o = tl_buf[TYPE == TELA_TYPE_Q6_K][gw];
    o[0] = entry;
    o[1] = waited;
    o[2] = mid;
    o[3] = written;
    o[4] = smid;
    o[5] = tag | blockIdx.x;
}
#else
#define TL_STAMP(v) ((void)0)
#endif

template <int TYPE, int R, bool SW, int D, int NT, int S = 1>
static __global__ void __launch_bounds__(128, NT == 1 && D < 4 ? 6 : 4)
    gemv3_q_kernel(const gemv_params p, const int8_t *xq, const float *xd, const float *xs, const float *nscale) {
    typedef typename qunits<TYPE>::raw raw;
    static_assert(S == 1 || R == 1, "split rows: one row a warp");
    const int ti = gemv_target_of(p);
    const gemv_target &tg = p.t[ti];
    const int K = (int)tg.w.n_cols;
    const int warp = threadIdx.x / 32, part = warp % S;
    const int64_t row0 = ((int64_t)(blockIdx.x - p.block0[ti]) * (4 / S) + warp / S) * R;
    const bool live = row0 < tg.w.n_rows;
    const int rv = !live ? 1 : tg.w.n_rows - row0 < R ? (int)(tg.w.n_rows - row0) : R;
    const int lane = threadIdx.x & 31, n_units = qunits<TYPE>::count(K);
    /* a lane's units: lane + 32 * (part + S * k), k = 0, 1, ... */
    const int u_first = lane + 32 * part, u_step = 32 * S;
    TL_STAMP(tl_entry);
    raw a[D][R], b[D][SW ? R : 1];
    auto load_all = [&](int s, int u) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int64_t row = live ? row0 + (r < rv ? r : 0) : 0;
            a[s][r] = qunits<TYPE>::load(tg.w, row, u);
            if (SW) b[s][SW ? r : 0] = qunits<TYPE>::load(p.w_up, row, u);
        }
    };
    early_begin(p);
#pragma unroll
    for (int s = 0; s < D; s++)
        if (u_first + u_step * s < n_units) load_all(s, u_first + u_step * s);
    early_end(p);
    TL_STAMP(tl_waited);
    const int n_tok = NT == 1 ? 1 : p.n_tok;
    float scale[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) scale[t] = nscale && t < n_tok ? nscale[t] : 1.0f;
    if (S == 1 && !live) return;
    float acc[R][NT], up[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = up[r][t] = 0.0f;
    for (int u0 = u_first; u0 < n_units; u0 += u_step * D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            const int u = u0 + u_step * s;
            if (u >= n_units) break;
#pragma unroll
            for (int r = 0; r < R; r++) {
                qunits<TYPE>::template dot_raw<NT, TYPE>(a[s][r], u, xq, xd, xs, K, n_tok, acc[r]);
                if (SW) qunits<TYPE>::template dot_raw<NT, TYPE>(b[s][SW ? r : 0], u, xq, xd, xs, K, n_tok, up[r]);
            }
            if (u + u_step * D < n_units) load_all(s, u + u_step * D);
        }
    }
    TL_STAMP(tl_rounds);
    if (S == 1) {
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < rv) gemv_write<NT>(p, tg, row0 + r, acc[r], up[r], SW, scale);
    } else {
        gemv_split_write<NT, S, SW>(p, tg, row0, live, acc[0], up[0], scale, n_tok);
    }
#ifdef TELA_CUDA_TIMELINE
    TL_STAMP(tl_written);
    if (NT == 1 && !SW)
        tl_record<TYPE>(K, warp, tl_entry, tl_waited, tl_rounds, tl_written,
                        ((unsigned long long)D << 48) | ((unsigned long long)S << 40));
#endif
}

/* One token, one matrix of more rows than a wave of warps holds (the 8B's
 * down and wo products; TELA_CUDA_GEMV_PERSIST=1, an experiment): the grid
 * is one wave of resident warps, and each group of S warps (a row's
 * parts, as in gemv3_q_kernel) takes rows slot, slot + n_slots, ... in
 * turns, with the next row's first D rounds of loads issued before the
 * current row's sums are merged and written. gemv3_q_kernel's blocks exit
 * after one row, and a timeline of the 8B's down (docs/PERF-NOTES.md,
 * round 26) showed the loads stopping for 1-1.5 us between its waves and a
 * last wave 59% full; here no block exits between rows, and the host
 * picks the number of slots so that every slot has the same number of
 * rows (or one fewer). Each row is summed exactly as gemv3_q_kernel does
 * (a lane's units in order, the warp's sum, then the parts in order, then
 * the norm's factor), so the bits are a decode step's of any token count.
 * The S warps of a slot meet at a named barrier of their own, not the
 * block's; their sums go through two shared buffers used in turn, so one
 * barrier a row suffices (the partner cannot write a buffer again before
 * both have passed the next row's barrier, after part 0 has read it). */
template <int TYPE, int D, int S>
static __global__ void __launch_bounds__(128, 6)
    gemv3p_q_kernel(const gemv_params p, const int8_t *xq, const float *xd, const float *xs, const float *nscale) {
    typedef typename qunits<TYPE>::raw raw;
    static_assert(S == 1 || S == 2, "one or two warps a row");
    const gemv_target &tg = p.t[0];
    const int K = (int)tg.w.n_cols;
    const int warp = threadIdx.x / 32, part = warp % S, lane = threadIdx.x & 31;
    const int64_t n_slots = (int64_t)gridDim.x * (4 / S);
    const int64_t slot = (int64_t)blockIdx.x * (4 / S) + warp / S;
    const int64_t n_rows = tg.w.n_rows;
    const int n_units = qunits<TYPE>::count(K);
    const int u_first = lane + 32 * part, u_step = 32 * S;
    /* rounds of a row for this warp's part (the same for all its lanes) */
    const int rpr = (n_units - 32 * part + u_step - 1) / u_step;
    const int n_mine = slot < n_rows ? (int)((n_rows - 1 - slot) / n_slots + 1) : 0;
    const int J = rpr > 0 ? n_mine * rpr : 0; /* this warp's rounds over all its rows */
    TL_STAMP(tl_entry);
    raw a[D];
    auto load_j = [&](int s, int j) {
        const int64_t row = slot + (int64_t)(j / rpr) * n_slots;
        const int u = u_first + u_step * (j % rpr);
        if (u < n_units) a[s] = qunits<TYPE>::load(tg.w, row, u);
    };
    early_begin(p);
#pragma unroll
    for (int s = 0; s < D; s++)
        if (s < J) load_j(s, s);
    early_end(p);
    TL_STAMP(tl_waited);
#ifdef TELA_CUDA_TIMELINE
    unsigned long long tl_first = 0;
#endif
    const float scale = nscale ? nscale[0] : 1.0f;
    __shared__ float part_sum[2][4];
    float acc[1] = {0.0f};
    int buf = 0;
    for (int j0 = 0; j0 < J; j0 += D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            const int j = j0 + s;
            if (j >= J) break;
            const int k = j % rpr, u = u_first + u_step * k;
            if (u < n_units) qunits<TYPE>::template dot_raw<1, TYPE>(a[s], u, xq, xd, xs, K, 1, acc);
            if (j + D < J) load_j(s, j + D);
            if (k == rpr - 1) { /* the row's last round: its sums merged and written */
                const int64_t row = slot + (int64_t)(j / rpr) * n_slots;
                const float v = warp_sum(acc[0]);
                acc[0] = 0.0f;
                if (S == 1) {
                    if (lane == 0) {
                        float *yp = tg.y + row;
                        const float o = v * scale;
                        *yp = p.accumulate ? *yp + o : o;
                    }
                } else {
                    if (lane == 0) part_sum[buf][warp] = v;
                    __syncwarp();
                    /* barrier ids as immediates: with an id in a register
                     * the compiler reserves all 16 of the block's barriers,
                     * and that capped the residency at 4 blocks an SM */
                    if (warp < 2) asm volatile("bar.sync 1, 64;" ::: "memory");
                    else asm volatile("bar.sync 2, 64;" ::: "memory");
                    if (part == 0 && lane == 0) {
                        float o = part_sum[buf][warp];
#pragma unroll
                        for (int i = 1; i < S; i++) o += part_sum[buf][warp + i];
                        o *= scale;
                        float *yp = tg.y + row;
                        *yp = p.accumulate ? *yp + o : o;
                    }
                    buf ^= 1;
                }
#ifdef TELA_CUDA_TIMELINE
                if (!tl_first) tl_first = tl_now();
#endif
            }
        }
    }
#ifdef TELA_CUDA_TIMELINE
    /* the stamps of gemv3_q_kernel's timeline, with "last round" read as
     * "first row written" and bit 56 of the last word set */
    TL_STAMP(tl_written);
    if (J > 0)
        tl_record<TYPE>(K, warp, tl_entry, tl_waited, tl_first, tl_written,
                        (1ull << 56) | ((unsigned long long)D << 48) | ((unsigned long long)S << 40));
#endif
}

typedef void (*gemv3p_kernel_fn)(const gemv_params, const int8_t *, const float *, const float *, const float *);

/* The kernel above for rows split over two warps (the split rule's choice
 * wherever a one-matrix product takes more than a wave; S = 1 is left to
 * gemv3_q_kernel), D = 1 or 2 rounds in flight; NULL for other shapes. */
template <int TYPE>
static gemv3p_kernel_fn gemv3p_pick_type(int D) {
    return D == 2 ? gemv3p_q_kernel<TYPE, 2, 2> : gemv3p_q_kernel<TYPE, 1, 2>;
}

static gemv3p_kernel_fn gemv3p_pick(tela_type type, int D, int S) {
    if (D > 2 || S != 2) return NULL;
    switch (type) {
    case TELA_TYPE_Q4_K: return gemv3p_pick_type<TELA_TYPE_Q4_K>(D);
    case TELA_TYPE_Q5_K: return gemv3p_pick_type<TELA_TYPE_Q5_K>(D);
    case TELA_TYPE_Q6_K: return gemv3p_pick_type<TELA_TYPE_Q6_K>(D);
    case TELA_TYPE_Q8_0: return gemv3p_pick_type<TELA_TYPE_Q8_0>(D);
    case TELA_TYPE_Q4_0: return gemv3p_pick_type<TELA_TYPE_Q4_0>(D);
    default: return NULL;
    }
}

typedef void (*gemv3_kernel_fn)(const gemv_params, const int8_t *, const float *, const float *, const float *);

#ifdef TELA_CUDA_TIMELINE
/* Writes tl_buf to the file TELA_CUDA_TIMELINE names (a diagnostic build). */
extern "C" void tela_cuda_timeline_dump(void) {
    const char *path = getenv("TELA_CUDA_TIMELINE");
    if (!path) return;
    static unsigned long long h[2][TL_WARPS][6];
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(h, tl_buf, sizeof h) != cudaSuccess) return;
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(h, sizeof h, 1, f);
    fclose(f);
}
#endif

/* Rows a warp that fit the registers without spilling (ptxas at 85 a
 * thread): the 4- and 8-bit units are 20-48 bytes, the 5- and 6-bit ones
 * 80 (one row); with two rounds in flight (D = 2) half as many. */
static int gemv3_rows_max(tela_type type, bool sw, int D) {
    int r;
    switch (type) {
    case TELA_TYPE_Q4_0: case TELA_TYPE_Q8_0: r = sw ? 2 : 4; break;
    case TELA_TYPE_Q4_K: r = sw ? 1 : 2; break;
    default: r = 1;
    }
    return D >= 2 && r > 1 ? (D == 2 ? r / 2 : 1) : r;
}

template <int TYPE, int RMAX, int RMAX_SW, int D>
static gemv3_kernel_fn gemv3_pick_type(int R, bool sw, int S) {
    if (S == 2) return sw ? gemv3_q_kernel<TYPE, 1, true, 1, 1, 2> : gemv3_q_kernel<TYPE, 1, false, D, 1, 2>;
    if (sw) return RMAX_SW >= 2 && R == 2 ? gemv3_q_kernel<TYPE, RMAX_SW >= 2 ? 2 : 1, true, 1, 1> : gemv3_q_kernel<TYPE, 1, true, 1, 1>;
    if (RMAX >= 4 && R == 4) return gemv3_q_kernel<TYPE, RMAX >= 4 ? 4 : 1, false, D, 1>;
    if (RMAX >= 2 && R == 2) return gemv3_q_kernel<TYPE, RMAX >= 2 ? 2 : 1, false, D, 1>;
    return gemv3_q_kernel<TYPE, 1, false, D, 1>;
}

/* Four rounds in flight (gemv3_depth): one row a warp, not the pair. */
template <int TYPE>
static gemv3_kernel_fn gemv3_pick_d4_of(int S) {
    return S == 2 ? gemv3_q_kernel<TYPE, 1, false, 4, 1, 2> : gemv3_q_kernel<TYPE, 1, false, 4, 1>;
}

/* The four-round kernel of a type, NULL for the types that have none (the
 * 5- and 6-bit units, whose registers it would exceed): the one list of
 * them, which gemv3_depth asks too. */
static gemv3_kernel_fn gemv3_pick_d4(tela_type type, int S) {
    switch (type) {
    case TELA_TYPE_Q4_K: return gemv3_pick_d4_of<TELA_TYPE_Q4_K>(S);
    case TELA_TYPE_Q8_0: return gemv3_pick_d4_of<TELA_TYPE_Q8_0>(S);
    case TELA_TYPE_Q4_0: return gemv3_pick_d4_of<TELA_TYPE_Q4_0>(S);
    default: return NULL;
    }
}

/* D = 4 comes only from gemv3_depth, for a type gemv3_pick_d4 has and
 * never for the pair; gemv3_rows_max gives one row a warp at it. */
static gemv3_kernel_fn gemv3_pick(tela_type type, int R, bool sw, int D, int S) {
    if (D == 4) return gemv3_pick_d4(type, S);
    if (D == 2) {
        switch (type) {
        case TELA_TYPE_Q4_K: return gemv3_pick_type<TELA_TYPE_Q4_K, 1, 1, 2>(R, sw, S);
        case TELA_TYPE_Q5_K: return gemv3_pick_type<TELA_TYPE_Q5_K, 1, 1, 2>(R, sw, S);
        case TELA_TYPE_Q6_K: return gemv3_pick_type<TELA_TYPE_Q6_K, 1, 1, 2>(R, sw, S);
        case TELA_TYPE_Q8_0: return gemv3_pick_type<TELA_TYPE_Q8_0, 2, 1, 2>(R, sw, S);
        case TELA_TYPE_Q4_0: return gemv3_pick_type<TELA_TYPE_Q4_0, 2, 1, 2>(R, sw, S);
        default: return NULL;
        }
    }
    switch (type) {
    case TELA_TYPE_Q4_K: return gemv3_pick_type<TELA_TYPE_Q4_K, 2, 1, 1>(R, sw, S);
    case TELA_TYPE_Q5_K: return gemv3_pick_type<TELA_TYPE_Q5_K, 1, 1, 1>(R, sw, S);
    case TELA_TYPE_Q6_K: return gemv3_pick_type<TELA_TYPE_Q6_K, 1, 1, 1>(R, sw, S);
    case TELA_TYPE_Q8_0: return gemv3_pick_type<TELA_TYPE_Q8_0, 4, 2, 1>(R, sw, S);
    case TELA_TYPE_Q4_0: return gemv3_pick_type<TELA_TYPE_Q4_0, 4, 2, 1>(R, sw, S);
    default: return NULL;
    }
}

/* The kernel above for NT = 2, 4 or 8 tokens: one row a warp. */
template <int TYPE, int NT>
static gemv3_kernel_fn gemv3_pick_nt_type(bool sw, int D, int S) {
    if (sw) return S == 2 ? gemv3_q_kernel<TYPE, 1, true, 1, NT, 2> : gemv3_q_kernel<TYPE, 1, true, 1, NT>;
    if (S == 2) return D == 2 ? gemv3_q_kernel<TYPE, 1, false, 2, NT, 2> : gemv3_q_kernel<TYPE, 1, false, 1, NT, 2>;
    return D == 2 ? gemv3_q_kernel<TYPE, 1, false, 2, NT> : gemv3_q_kernel<TYPE, 1, false, 1, NT>;
}

template <int NT>
static gemv3_kernel_fn gemv3_pick_nt_of(tela_type type, bool sw, int D, int S) {
    switch (type) {
    case TELA_TYPE_Q4_K: return gemv3_pick_nt_type<TELA_TYPE_Q4_K, NT>(sw, D, S);
    case TELA_TYPE_Q5_K: return gemv3_pick_nt_type<TELA_TYPE_Q5_K, NT>(sw, D, S);
    case TELA_TYPE_Q6_K: return gemv3_pick_nt_type<TELA_TYPE_Q6_K, NT>(sw, D, S);
    case TELA_TYPE_Q8_0: return gemv3_pick_nt_type<TELA_TYPE_Q8_0, NT>(sw, D, S);
    case TELA_TYPE_Q4_0: return gemv3_pick_nt_type<TELA_TYPE_Q4_0, NT>(sw, D, S);
    default: return NULL;
    }
}

static gemv3_kernel_fn gemv3_pick_nt(tela_type type, int nt_tile, bool sw, int D, int S) {
    switch (nt_tile) {
    case 2: return gemv3_pick_nt_of<2>(type, sw, D, S);
    case 4: return gemv3_pick_nt_of<4>(type, sw, D, S);
    case 8: return gemv3_pick_nt_of<8>(type, sw, D, S);
    default: return NULL;
    }
}

/* Rounds of units a lane in flight: two for rows of more than one round
 * (TELA_CUDA_GEMV_DEPTH=1|2 sets it), one for the SwiGLU pair (its two
 * matrices' units are already two in flight; with two rounds of them the
 * K-quant kernels spill 200-600 bytes a thread); four for 4- and 8-bit
 * units where a warp's row takes three or more rounds and the grid fits
 * one wave at the four blocks an SM that Q4_K's registers allow then
 * (the 1B's and 2B's down products: the second pair of rounds no longer
 * waits for the first; +0.7-1.9% on their Q8_0 files, +0.3-0.9% Q4_K_M, H100,
 * docs/PERF-NOTES.md round 24). Every lane adds its units in the same
 * order whatever the depth, so the bits do not change. */
static int64_t gemv3_units(tela_type type, int64_t K) {
    return type == TELA_TYPE_Q8_0 || type == TELA_TYPE_Q4_0 ? K / 32 : K / 64;
}

static int gemv3_depth(const cuda_exec *ex, tela_type type, int64_t K, bool sw, int S, int64_t rows) {
    if (sw) return 1;
    if (ex->gemv_depth > 0) return ex->gemv_depth;
    const int64_t rounds = (gemv3_units(type, K) / S + 31) / 32;
    /* four rounds in flight (TELA_CUDA_GEMV_D4=1: where the grid fits one
     * wave at the four blocks an SM that its registers allow; =2: wherever
     * a row takes three or more rounds): for the 4- and 8-bit units */
    if (ex->gemv_d4 && rounds >= 3 && gemv3_pick_d4(type, S) &&
        (ex->gemv_d4 == 2 || rows * S <= (int64_t)ex->be->sm_count * 16))
        return 4;
    return gemv3_units(type, K) / S > 32 ? 2 : 1;
}

/* Warps a row (S): two where each half of a row keeps a whole round of
 * units a lane, unless the grid of whole rows fits one wave of warps and
 * that of half rows would not. Splitting a grid of more than one wave
 * takes the rounds of a row at once and fills the last, partial wave with
 * shorter warps: the 8B's wo and down products, whose 1.3 waves spent up to
 * half their time on the last one (docs/PERF-NOTES.md, GPU round 9), +7-10%
 * on the H200; its q+k+v (exactly two waves whole, four halved; left whole
 * until round 18) +2% more on an H100. Splitting rows of a grid that fits
 * one wave (the 1B's and 2B's down) did not pay (-1 to -3%). The choice
 * depends on the matrix alone, so a product of any token count adds each
 * row's parts in the same order (the bits of a verification pass are a
 * decode step's). TELA_CUDA_GEMV_SPLIT=1|2 sets it (and
 * TELA_CUDA_GEMV_SPLIT_WAVES=1 brings back round 11's count of waves,
 * which left the q+k+v whole, to measure against); not with several rows
 * a warp (TELA_CUDA_GEMV_QROWS) or where one token or several take other
 * kernels (TELA_CUDA_GEMV_EARLY=0, TELA_CUDA_GEMV_EARLY_NT=0). The SwiGLU
 * pair is left whole: splitting it wherever each half keeps a round
 * (TELA_CUDA_GEMV_SPLIT_SW=1: the 8B's and 27B's; the Q8_0 pairs of the 1B
 * and 2B) measured +0.4% on the 8B Q4_K_M in one session and nothing in
 * the next, -1.3% on the 1B and 2B Q8_0 files (H100, PERF-NOTES round 20). */
static int gemv3_split(const cuda_exec *ex, tela_type type, int64_t K, int64_t rows, bool sw) {
    if (ex->gemv_q_rows > 1 || !ex->gemv_early || !ex->gemv_early_nt) return 1;
    if (sw && !ex->gemv_split_sw) return 1;
    if (ex->gemv_split > 0) return ex->gemv_split;
    if (gemv3_units(type, K) / 2 < 32) return 1;
    /* the SwiGLU pair keeps one round of units a lane in flight (two would
     * spill), so a row of two or more rounds waits a whole DRAM latency a
     * round after the first: two warps a row take the rounds at once */
    if (sw) return 2;
    /* a wave: six blocks of four one-row warps an SM, as the registers allow */
    const int64_t wave = (int64_t)ex->be->sm_count * 24;
    if (ex->gemv_split_waves) { /* round 11's rule: split where half rows take fewer waves' worth of time */
        const int64_t w1 = (rows + wave - 1) / wave, w2 = (2 * rows + wave - 1) / wave;
        return w2 < 2 * w1 ? 2 : 1;
    }
    return rows <= wave && 2 * rows > wave ? 1 : 2;
}

/* Rows a warp for the kernel above: one while the grid would have fewer
 * warps than the GPU holds (24 an SM at its registers), more (up to what
 * the registers hold) for the largest matrices; the SwiGLU pair counts
 * double. */
static int gemv3_rows(const cuda_exec *ex, tela_type type, int64_t rows, bool sw, int D) {
    const int rmax = gemv3_rows_max(type, sw, D);
    if (ex->gemv_q_rows > 0) return ex->gemv_q_rows < rmax ? ex->gemv_q_rows : rmax;
    const int64_t cap = (int64_t)ex->be->sm_count * 24 / (sw ? 2 : 1);
    int R = 1;
    while (R < rmax && rows / (2 * R) >= cap) R *= 2;
    return R;
}

typedef void (*quantize_act_fn)(const float *, int64_t, int, const float *, float, int8_t *, float *, float *, float *);

/* quantize_act_kernel writing the order the products of this type read. */
static quantize_act_fn quantize_act_for(tela_type type) {
    switch (type) {
    case TELA_TYPE_Q4_K: return quantize_act_kernel<TELA_TYPE_Q4_K>;
    case TELA_TYPE_Q5_K: return quantize_act_kernel<TELA_TYPE_Q5_K>;
    case TELA_TYPE_Q6_K: return quantize_act_kernel<TELA_TYPE_Q6_K>;
    case TELA_TYPE_Q8_0: return quantize_act_kernel<TELA_TYPE_Q8_0>;
    default: return quantize_act_kernel<TELA_TYPE_Q4_0>;
    }
}

typedef void (*gemv2_kernel_fn)(const gemv_params, const int8_t *, const float *, const float *, const float *);

template <int NT, int R>
static gemv2_kernel_fn gemv2_pick_nt(tela_type type) {
    switch (type) {
    case TELA_TYPE_Q4_K: return gemv2_q_kernel<TELA_TYPE_Q4_K, NT, R>;
    case TELA_TYPE_Q5_K: return gemv2_q_kernel<TELA_TYPE_Q5_K, NT, R>;
    case TELA_TYPE_Q6_K: return gemv2_q_kernel<TELA_TYPE_Q6_K, NT, R>;
    case TELA_TYPE_Q8_0: return gemv2_q_kernel<TELA_TYPE_Q8_0, NT, R>;
    case TELA_TYPE_Q4_0: return gemv2_q_kernel<TELA_TYPE_Q4_0, NT, R>;
    default: return NULL;
    }
}

static gemv2_kernel_fn gemv2_pick(tela_type type, int nt_tile, int R) {
    switch (nt_tile) {
    case 1: return R == 2 ? gemv2_pick_nt<1, 2>(type) : gemv2_pick_nt<1, 1>(type);
    case 2: return gemv2_pick_nt<2, 1>(type);
    case 4: return gemv2_pick_nt<4, 1>(type);
    default: return gemv2_pick_nt<8, 1>(type);
    }
}

/* The exec's buffers of n_tok tokens' activations quantized for products
 * of type `type` and width K (false after recording a failure). */
static bool act_buffers(cuda_exec *ex, tela_type type, int64_t K, int n_tok, int8_t **xq, float **xd, float **xs,
                        float **ns) {
    const size_t qb = tela_cuda_align((size_t)n_tok * (size_t)act_tok_bytes(type, (int)K));
    const size_t sb = tela_cuda_align((size_t)n_tok * (size_t)(K / 32) * 4);
    unsigned char *buf = (unsigned char *)tela_cuda_act(ex, qb + 2 * sb + tela_cuda_align((size_t)n_tok * 4));
    if (!buf) return false;
    *xq = (int8_t *)buf;
    *xd = (float *)(buf + qb), *xs = (float *)(buf + qb + sb), *ns = (float *)(buf + qb + 2 * sb);
    return true;
}

/* A kernel that writes the input of a one-token quantized product may
 * quantize it too, as quantize_act_kernel would (cuda_act.cuh), where
 * the model says which product reads it (tela_exec_next_input_of) and the
 * kernel owns whole 32-blocks of it: the attention and Gated DeltaNet
 * outputs, a head a block. The product then skips its quantize_act
 * launch. */
bool tela_cuda_preq_begin(cuda_exec *ex, int level, int64_t K, preq_out *o) {
    o->xq = NULL;
    const tela_mat *w = ex->preq_hint;
    if (ex->preq < level || !w || w->n_cols != K || K % 32 != 0 || tela_ops_exact_matmul() || !ex->gemv_v2 ||
        !tela_cuda_gemv_ok(ex, w, 1))
        return false;
    switch (w->type) {
    case TELA_TYPE_Q4_K: case TELA_TYPE_Q5_K: case TELA_TYPE_Q6_K: case TELA_TYPE_Q8_0: case TELA_TYPE_Q4_0: break;
    default: return false;
    }
    float *ns;
    if (!act_buffers(ex, w->type, K, 1, &o->xq, &o->xd, &o->xs, &ns)) {
        o->xq = NULL;
        return false;
    }
    o->lt = (int)w->type;
    o->K = (int)K;
    return true;
}

void tela_cuda_preq_done(cuda_exec *ex, const float *x, const preq_out *o) {
    if (!o->xq) return;
    ex->preq_x = x;
    ex->preq_k = o->K;
    ex->preq_type = o->lt;
}

/* Variant 2 of tela_cuda_gemv for quantized weights: false when it does
 * not take this type (the caller then uses variant 1). */
static bool gemv2(cuda_exec *ex, const tela_mat *const *w, float *const *y, const int64_t *y_stride, int n_w,
                  const tela_mat *w_up, const float *x, int64_t x_stride, int n_tok, bool accumulate,
                  const float *norm_w, float eps) {
    const int nt_tile = n_tok <= 1 ? 1 : n_tok <= 2 ? 2 : n_tok <= 4 ? 4 : 8;
    /* one row a warp: two (TELA_CUDA_GEMV_QROWS=2) measured slower on the
     * H200 for Q8_0 and Q4_K_M, 1B and 8B (docs/PERF-NOTES.md) */
    const int R = nt_tile == 1 && ex->gemv_q_rows == 2 ? 2 : 1;
    gemv2_kernel_fn fn = gemv2_pick(w[0]->type, nt_tile, R);
    if (!fn || n_w > GEMV_MAX_TARGETS) return false;
    int64_t rows = 0;
    for (int i = 0; i < n_w; i++) rows += w[i]->n_rows;
    const int64_t K = w[0]->n_cols;
    const int S3 = gemv3_split(ex, w[0]->type, K, rows, w_up != NULL);
    const int D3 = gemv3_depth(ex, w[0]->type, K, w_up != NULL, S3, rows);
    const int R3 = n_tok == 1 && ex->gemv_early ? (S3 > 1 ? 1 : gemv3_rows(ex, w[0]->type, rows, w_up != NULL, D3)) : 0;
    gemv_params p;
    int8_t *xq;
    float *xd, *xs, *ns;
    /* quantized already by the kernel that wrote x (cuda_act.cuh)? */
    const bool pre = n_tok == 1 && !norm_w && x == ex->preq_x && K == ex->preq_k && w[0]->type == ex->preq_type &&
                     !ex->after_copy;
    if (!act_buffers(ex, w[0]->type, K, n_tok, &xq, &xd, &xs, &ns)) return true; /* the failure is recorded */
    if (!pre) {
        tela_cuda_launch(ex, quantize_act_for(w[0]->type), (unsigned)n_tok, 512, 0, x, x_stride, (int)K, norm_w, eps,
                         xq, xd, xs, ns);
        if (!tela_cuda_launched(ex, "quantize activations")) return true;
    }
    if (R3 == 1 && ex->gemv_persist && n_w == 1 && !w_up && n_tok == 1) {
        /* rows in turns (gemv3p_q_kernel) where they take more than one
         * wave of 24 warps an SM: the fewest slots that give every slot
         * the same number of turns */
        const int64_t wave_slots = (int64_t)ex->be->sm_count * 24 / S3, n_rows = w[0]->n_rows;
        const int64_t turns = (n_rows + wave_slots - 1) / wave_slots;
        gemv3p_kernel_fn pk = gemv3p_pick(w[0]->type, D3, S3);
        /* both warps of a pair need a round a row (they meet at a barrier
         * each row): not so for rows of 32 units or fewer, which only
         * TELA_CUDA_GEMV_SPLIT=2 splits */
        if (turns > 1 && pk && gemv3_units(w[0]->type, K) > 32) {
            const int64_t slots = (n_rows + turns - 1) / turns;
            const int64_t per_block = 4 / S3;
            gemv_fill(&p, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, 4 / S3);
            p.order = ex->gemv_order;
            tela_cuda_launch(ex, pk, (unsigned)((slots + per_block - 1) / per_block), 128, 0, p, xq, xd, xs,
                             norm_w ? ns : NULL);
            gemv_launched_early(ex, p, "gemv (quantized, rows in turns)");
            return true;
        }
    }
    if (R3 > 0) {
        const unsigned blocks = gemv_fill(&p, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, 4 * R3 / S3);
        p.order = ex->gemv_order;
        tela_cuda_launch(ex, gemv3_pick(w[0]->type, R3, w_up != NULL, D3, S3), blocks, 128, 0, p, xq, xd, xs,
                         norm_w ? ns : NULL);
        gemv_launched_early(ex, p, "gemv (quantized, early loads)");
        return true;
    }
    if (n_tok > 1 && ex->gemv_early_nt) {
        /* several tokens, with early loads: one row a warp */
        const unsigned blocks = gemv_fill(&p, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, 4 / S3);
        p.order = ex->gemv_order;
        tela_cuda_launch(ex, gemv3_pick_nt(w[0]->type, nt_tile, w_up != NULL, D3 > 2 ? 2 : D3, S3), blocks, 128, 0, p, xq, xd, xs,
                         norm_w ? ns : NULL);
        gemv_launched_early(ex, p, "gemv (quantized, several tokens, early loads)");
        return true;
    }
    const unsigned blocks = gemv_fill(&p, w, y, y_stride, n_w, w_up, x, x_stride, n_tok, accumulate, 4 * R);
    tela_cuda_launch(ex, fn, blocks, 128, 0, p, xq, xd, xs, norm_w ? ns : NULL);
    tela_cuda_launched(ex, "gemv (variant 2)");
    return true;
}

/* --------------------------------------------------------- exact path */

static __global__ void matmul_exact_kernel(tela_type type, const wview w, const float *x, int64_t x_stride, float *y,
                                           int64_t y_stride, int n_tok, int accumulate) {
    TELA_PDL_ENTRY();
    const int64_t row = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= w.n_rows) return;
    const int lane = threadIdx.x & 31;
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (size_t)t * x_stride;
        float acc = 0.0f;
        for (int64_t c = lane; c < w.n_cols; c += 32) acc = fmaf(tela_cuda_weight(type, w, row, c), xt[c], acc);
        acc = warp_sum(acc);
        if (lane == 0) {
            float *yp = y + (size_t)t * y_stride + row;
            *yp = accumulate ? *yp + acc : acc;
        }
    }
}

void tela_cuda_matmul_exact(cuda_exec *ex, const tela_mat *w, const float *x, int64_t x_stride, float *y,
                            int64_t y_stride, int n_tok, bool accumulate) {
    const wview v = {(const uint8_t *)w->dev, w->n_rows, w->n_cols};
    const unsigned blocks = (unsigned)((w->n_rows + 7) / 8);
    tela_cuda_launch(ex, matmul_exact_kernel, blocks, 256, 0, w->type, v, x, x_stride, y, y_stride, n_tok, accumulate);
    tela_cuda_launched(ex, "matmul (exact)");
}

/* ---------------------------------------------------------- gemm path */

/* Eight consecutive elements W[row][c0..c0+7] (c0 a multiple of 8) of a
 * quantized type, dequantized as weight_at does (the same products in the
 * same order), their block's scale decoded once and their bytes read with
 * one 8-byte load per array. */
template <int TYPE>
static __device__ __forceinline__ void dequant8(const wview w, int64_t row, int c0, float *v) {
    const int64_t K = w.n_cols;
    switch (TYPE) {
    case TELA_TYPE_Q8_0: {
        const int64_t R = w.n_rows;
        const float d = h2f(ld16(w.p + tela_cuda_align((size_t)(R * K)) + 2 * (row * (K / 32) + c0 / 32)));
        const uint2 q = *(const uint2 *)(w.p + row * K + c0);
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = d * (float)(int8_t)(((j < 4 ? q.x : q.y) >> (8 * (j & 3))) & 0xFF);
        break;
    }
    case TELA_TYPE_Q4_0: {
        const int64_t R = w.n_rows;
        const float d = h2f(ld16(w.p + tela_cuda_align((size_t)(R * K / 2)) + 2 * (row * (K / 32) + c0 / 32)));
        const int j0 = c0 % 32;
        const uint2 q = *(const uint2 *)(w.p + row * (K / 2) + (c0 / 32) * 16 + (j0 & 15));
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int b = (int)(((j < 4 ? q.x : q.y) >> (8 * (j & 3))) & 0xFF);
            v[j] = d * (float)((j0 < 16 ? (b & 0xF) : (b >> 4)) - 8);
        }
        break;
    }
    case TELA_TYPE_Q4_K: case TELA_TYPE_Q5_K: {
        const bool five = TYPE == TELA_TYPE_Q5_K;
        const uint8_t *blk = w.p + (row * (K / 256) + c0 / 256) * (five ? 176 : 144);
        const int e = c0 % 256, c = e / 64, l = e % 32, hi = (e / 32) & 1;
        int sc, m;
        k4_scale_min(blk + 4, 2 * c + hi, &sc, &m);
        const float d = h2f(ld16(blk)) * (float)sc, mn = h2f(ld16(blk + 2)) * (float)m;
        const uint2 q = *(const uint2 *)(blk + (five ? 48 : 16) + 32 * c + l);
        const uint2 qh = five ? *(const uint2 *)(blk + 16 + l) : make_uint2(0, 0);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int b = (int)(((j < 4 ? q.x : q.y) >> (8 * (j & 3))) & 0xFF);
            int qv = hi ? b >> 4 : b & 0xF;
            if (five) qv |= (int)((((j < 4 ? qh.x : qh.y) >> (8 * (j & 3))) >> (2 * c + hi)) & 1) << 4;
            v[j] = d * (float)qv - mn;
        }
        break;
    }
    case TELA_TYPE_Q6_K: {
        const int64_t nb = K / 256, R = w.n_rows, i = row * nb + c0 / 256;
        const uint8_t *q = w.p + i * 192;
        const int8_t *scales = (const int8_t *)(w.p + tela_cuda_align((size_t)(R * nb * 192))) + i * 16;
        const uint8_t *dp = w.p + tela_cuda_align((size_t)(R * nb * 192)) + tela_cuda_align((size_t)(R * nb * 16)) + i * 2;
        const int e = c0 % 256, h = e / 128, g = (e % 128) / 32, l = e % 32;
        const uint2 lo = *(const uint2 *)(q + 64 * h + l + 32 * (g & 1));
        const uint2 qh = *(const uint2 *)(q + 128 + 32 * h + l);
        const float ds = h2f(ld16(dp)) * (float)scales[8 * h + 2 * g + l / 16];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int b = (int)(((j < 4 ? lo.x : lo.y) >> (8 * (j & 3))) & 0xFF);
            const int hb = (int)(((j < 4 ? qh.x : qh.y) >> (8 * (j & 3))) & 0xFF);
            const int nib = g >= 2 ? b >> 4 : b & 0xF;
            v[j] = ds * (float)((nib | ((hb >> (2 * g)) & 3) << 4) - 32);
        }
        break;
    }
    default:
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = weight_at<TYPE>(w, row, c0 + j);
    }
}

/* rows [r0, r0 + nr) of W dequantized to f16, [nr][K]: 8 consecutive
 * elements a thread, consecutive threads on consecutive 16-byte stores.
 * (The earlier kernels, one element at a time through weight_at or 32 a
 * thread with 2-byte stores, ran at ~0.1 T elements/s on the H200: a
 * fixed ~68 ms a prefill pass of the 8B Q4_K_M, whatever its length.) */
template <int TYPE>
static __global__ void dequant_rows_kernel(const wview w, int64_t r0, int64_t nr, __half *out) {
    TELA_PDL_ENTRY();
    const unsigned k8 = (unsigned)(w.n_cols / 8), n = (unsigned)nr * k8;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const unsigned r = i / k8, c0 = (i % k8) * 8;
        float v[8];
        dequant8<TYPE>(w, r0 + r, (int)c0, v);
        __align__(16) __half2 h[4];
#pragma unroll
        for (int j = 0; j < 4; j++) h[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
        *reinterpret_cast<uint4 *>(out + (size_t)r * w.n_cols + c0) = *reinterpret_cast<const uint4 *>(h);
    }
}

typedef void (*dequant_fn)(const wview, int64_t, int64_t, __half *);

static dequant_fn dequant_for(tela_type type) {
    switch (type) {
    case TELA_TYPE_Q8_0: return dequant_rows_kernel<TELA_TYPE_Q8_0>;
    case TELA_TYPE_Q4_0: return dequant_rows_kernel<TELA_TYPE_Q4_0>;
    case TELA_TYPE_Q4_K: return dequant_rows_kernel<TELA_TYPE_Q4_K>;
    case TELA_TYPE_Q5_K: return dequant_rows_kernel<TELA_TYPE_Q5_K>;
    case TELA_TYPE_Q6_K: return dequant_rows_kernel<TELA_TYPE_Q6_K>;
    default: return NULL;
    }
}

/* The activations to f16/bf16, [n_tok][K]: 8 elements a thread (K a
 * multiple of 8, rows 16-byte aligned), one 16-byte store. */
template <typename T>
static __global__ void convert_x8_kernel(const float *x, int64_t x_stride, int64_t K, int n_tok, T *out) {
    TELA_PDL_ENTRY();
    const unsigned k8 = (unsigned)(K / 8), n = (unsigned)n_tok * k8;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const unsigned t = i / k8, c0 = (i % k8) * 8;
        const float4 a = *(const float4 *)(x + (size_t)t * x_stride + c0), b = *(const float4 *)(x + (size_t)t * x_stride + c0 + 4);
        const float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        __align__(16) T o[8];
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = (T)f[j];
        *reinterpret_cast<uint4 *>(out + (size_t)t * K + c0) = *reinterpret_cast<const uint4 *>(o);
    }
}

template <typename T>
static __global__ void convert_x_kernel(const float *x, int64_t x_stride, int64_t K, int n_tok, T *out) {
    TELA_PDL_ENTRY();
    const int64_t n = (int64_t)n_tok * K;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / K, c = i % K;
        out[i] = (T)x[t * x_stride + c];
    }
}

static unsigned grid_for(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : (b < 1 ? 1 : b));
}

/* Rows of weights dequantized per panel: at most 32M weights a panel. */
static int64_t gemm_panel(const tela_mat *w) {
    if (w->type == TELA_TYPE_F16 || w->type == TELA_TYPE_BF16 || w->type == TELA_TYPE_F32) return w->n_rows;
    int64_t panel = (int64_t)((size_t)32 << 20) / w->n_cols;
    if (panel < 64) panel = 64;
    return panel > w->n_rows ? w->n_rows : panel;
}

static size_t gemm_panel_bytes(const tela_mat *w) {
    const bool direct = w->type == TELA_TYPE_F16 || w->type == TELA_TYPE_BF16 || w->type == TELA_TYPE_F32;
    return direct ? 0 : (size_t)gemm_panel(w) * (size_t)w->n_cols * 2;
}

const void *tela_cuda_gemm_input(cuda_exec *ex, const tela_mat *const *w, int n_w, const float *x, int64_t x_stride,
                                 int n_tok) {
    const int64_t K = w[0]->n_cols;
    if (w[0]->type == TELA_TYPE_F32) return x;
    const bool bf = w[0]->type == TELA_TYPE_BF16;
    size_t panel = 0;
    for (int i = 0; i < n_w; i++) panel = gemm_panel_bytes(w[i]) > panel ? gemm_panel_bytes(w[i]) : panel;
    const size_t xbytes = tela_cuda_align((size_t)n_tok * (size_t)K * 2);
    unsigned char *scr = (unsigned char *)tela_cuda_scratch(ex, xbytes + panel);
    if (!scr) return NULL;
    const bool vec8 = K % 8 == 0 && x_stride % 4 == 0 && ((uintptr_t)x & 15) == 0 && (int64_t)n_tok * K / 8 < ((int64_t)1 << 31);
    if (vec8 && bf)
        tela_cuda_launch(ex, convert_x8_kernel<__nv_bfloat16>, grid_for((int64_t)n_tok * K / 8, 256), 256, 0,
            x, x_stride, K, n_tok, (__nv_bfloat16 *)scr);
    else if (vec8)
        tela_cuda_launch(ex, convert_x8_kernel<__half>, grid_for((int64_t)n_tok * K / 8, 256), 256, 0, x, x_stride, K,
            n_tok, (__half *)scr);
    else if (bf)
        tela_cuda_launch(ex, convert_x_kernel<__nv_bfloat16>, grid_for((int64_t)n_tok * K, 256), 256, 0,
            x, x_stride, K, n_tok, (__nv_bfloat16 *)scr);
    else
        tela_cuda_launch(ex, convert_x_kernel<__half>, grid_for((int64_t)n_tok * K, 256), 256, 0, x, x_stride, K, n_tok,
                                                                                             (__half *)scr);
    if (!tela_cuda_launched(ex, "convert activations")) return NULL;
    return scr;
}

void tela_cuda_matmul_gemm(cuda_exec *ex, const tela_mat *w, const float *x, int64_t x_stride, float *y,
                           int64_t y_stride, int n_tok, bool accumulate, const void *xh) {
    const int64_t K = w->n_cols, R = w->n_rows;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const wview v = {(const uint8_t *)w->dev, R, K};
    cublasStatus_t cs;
    if (w->type == TELA_TYPE_F32) {
        cs = cublasGemmEx(ex->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)R, n_tok, (int)K, &alpha, w->dev, CUDA_R_32F,
                          (int)K, x, CUDA_R_32F, (int)x_stride, &beta, y, CUDA_R_32F, (int)y_stride, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
        ex->ordered_at = 0; /* a kernel queued outside tela_cuda_launch */
        if (cs != CUBLAS_STATUS_SUCCESS) tela_cuda_check(ex, cudaErrorUnknown, "cuBLAS gemm (f32)");
        return;
    }
    if (!xh) xh = tela_cuda_gemm_input(ex, &w, 1, x, x_stride, n_tok);
    if (!xh) return;
    const bool bf = w->type == TELA_TYPE_BF16;
    const cudaDataType dt = bf ? CUDA_R_16BF : CUDA_R_16F;
    const bool direct = w->type == TELA_TYPE_F16 || bf;
    const int64_t panel = gemm_panel(w);
    __half *wp = (__half *)((unsigned char *)ex->scratch + tela_cuda_align((size_t)n_tok * (size_t)K * 2));
    for (int64_t r0 = 0; r0 < R; r0 += panel) {
        const int64_t nr = R - r0 < panel ? R - r0 : panel;
        const void *a;
        if (direct) {
            a = (const uint8_t *)w->dev + (size_t)r0 * (size_t)K * 2;
        } else {
            if (dequant_for(w->type))
                tela_cuda_launch(ex, dequant_for(w->type), grid_for(nr * K / 8, 256), 256, 0, v, r0, nr, wp);
            else
                tela_cuda_check(ex, cudaErrorNotSupported, "dequantizing a weight type without a kernel");
            if (!tela_cuda_launched(ex, "dequantize weights")) return;
            a = wp;
        }
        cs = cublasGemmEx(ex->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, n_tok, (int)K, &alpha, a, dt, (int)K, xh, dt,
                          (int)K, &beta, y + r0, CUDA_R_32F, (int)y_stride, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        ex->ordered_at = 0;
        if (cs != CUBLAS_STATUS_SUCCESS) {
            tela_cuda_check(ex, cudaErrorUnknown, "cuBLAS gemm");
            return;
        }
    }
}

/* ------------------------------------------------------------ get_rows */

/* Rows ids[t] - row0 of w (a rank's part of an embedding split by
 * vocabulary; row0 0 otherwise); ids outside it give zeros, or with
 * accumulate leave out[t] as it is. */
template <int TYPE>
static __global__ void get_rows_kernel(const wview w, int64_t row0, bool accumulate, const int32_t *ids, int n,
                                       float *out, int64_t out_stride) {
    TELA_PDL_ENTRY();
    const int t = blockIdx.y;
    if (t >= n) return;
    const int64_t row = (int64_t)ids[t] - row0;
    const bool mine = row >= 0 && row < w.n_rows;
    if (accumulate && !mine) return;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < w.n_cols; c += (int64_t)gridDim.x * blockDim.x) {
        const float v = mine ? weight_at<TYPE>(w, row, c) : 0.0f;
        float *o = out + (size_t)t * out_stride + c;
        *o = accumulate ? *o + v : v;
    }
}

typedef void (*get_rows_fn)(const wview, int64_t, bool, const int32_t *, int, float *, int64_t);

static get_rows_fn get_rows_for(tela_type type) {
    switch (type) {
    case TELA_TYPE_F32: return get_rows_kernel<TELA_TYPE_F32>;
    case TELA_TYPE_F16: return get_rows_kernel<TELA_TYPE_F16>;
    case TELA_TYPE_BF16: return get_rows_kernel<TELA_TYPE_BF16>;
    case TELA_TYPE_Q8_0: return get_rows_kernel<TELA_TYPE_Q8_0>;
    case TELA_TYPE_Q4_0: return get_rows_kernel<TELA_TYPE_Q4_0>;
    case TELA_TYPE_Q4_K: return get_rows_kernel<TELA_TYPE_Q4_K>;
    case TELA_TYPE_Q5_K: return get_rows_kernel<TELA_TYPE_Q5_K>;
    case TELA_TYPE_Q6_K: return get_rows_kernel<TELA_TYPE_Q6_K>;
    default: return NULL;
    }
}

void tela_cuda_get_rows(cuda_exec *ex, const tela_mat *w, int64_t row0, bool accumulate, const int32_t *ids, int n,
                        float *out, int64_t out_stride) {
    const wview v = {(const uint8_t *)w->dev, w->n_rows, w->n_cols};
    dim3 grid((unsigned)((w->n_cols + 255) / 256), (unsigned)n);
    get_rows_fn fn = get_rows_for(w->type);
    if (!fn) {
        tela_cuda_check(ex, cudaErrorNotSupported, "embedding rows of a weight type without a kernel");
        return;
    }
    tela_cuda_launch(ex, fn, grid, 256, 0, v, row0, accumulate, ids, n, out, out_stride);
    tela_cuda_launched(ex, "get_rows");
}
