/* gdn.c: Gated DeltaNet kernels (see gdn.h for the math and the layouts).
 *
 * The chunked form follows transformers' torch_chunk_gated_delta_rule: within
 * a chunk of L tokens, with c_i the running sum of the log decays g,
 *     A[i][j] = beta_i (k_i . k_j) exp(c_i - c_j)            (j < i)
 *     P[i][j] = (q_i . k_j) exp(c_i - c_j)                   (j <= i)
 *     (I + A) [U | W] = [beta_i v_i | beta_i exp(c_i) k_i]   (forward substitution)
 *     V' = U - W S                       (the part the old state does not predict)
 *     o_i = exp(c_i) q_i S + sum_j P[i][j] V'_j
 *     S  <- exp(c_L) S + sum_i exp(c_L - c_i) k_i V'_i^T
 * Every step is a small matrix product over rows of dk or dv floats; the
 * loops are written so the innermost one runs along a contiguous row, ready
 * for vectorization. */
#include "backend/cpu/gdn.h"

#include <math.h>
#include <string.h>

static inline float gdn_silu(float x) { return x / (1.0f + expf(-x)); }

/* The vector helpers work in blocks of GDN_VEC floats with a fixed-length
 * inner loop, which compilers turn into SIMD instructions at -O2 (a loop of
 * unknown length is not vectorized by gcc's default cost model there), plus
 * a scalar tail. Each element is computed the same way in both parts (no
 * reassociation), so results do not depend on the machine's vector width. */
#define GDN_VEC 16

/* y += a * x over n floats */
static inline void gdn_axpy(float *restrict y, float a, const float *restrict x, int n) {
    int i = 0;
    for (; i + GDN_VEC <= n; i += GDN_VEC)
        for (int k = 0; k < GDN_VEC; k++) y[i + k] += a * x[i + k];
    for (; i < n; i++) y[i] += a * x[i];
}

/* y *= a over n floats */
static inline void gdn_scale(float *restrict y, float a, int n) {
    int i = 0;
    for (; i + GDN_VEC <= n; i += GDN_VEC)
        for (int k = 0; k < GDN_VEC; k++) y[i + k] *= a;
    for (; i < n; i++) y[i] *= a;
}

/* Columns j of S evolve independently (each reads k, q, g, beta and its own
 * column), so the value dimension is processed in blocks that keep the
 * temporary S^T k on the stack whatever dv is. */
#define GDN_COL_BLOCK 128

void tela_gdn_recurrent(const tela_gdn_io *io, int64_t n, float *state) {
    const int dk = io->dk, dv = io->dv;
    float delta[GDN_COL_BLOCK];
    for (int64_t t = 0; t < n; t++) {
        const float *q = io->q + t * io->qk_stride;
        const float *k = io->k + t * io->qk_stride;
        const float *v = io->v + t * io->v_stride;
        const float decay = expf(io->g[t * io->gb_stride]);
        const float beta = io->beta[t * io->gb_stride];
        float *out = io->out + t * io->out_stride;

        for (int j0 = 0; j0 < dv; j0 += GDN_COL_BLOCK) {
            const int nb = dv - j0 < GDN_COL_BLOCK ? dv - j0 : GDN_COL_BLOCK;
            /* decay the state and read what it predicts for k: S^T k */
            memset(delta, 0, sizeof delta);
            for (int i = 0; i < dk; i++) {
                float *row = state + (size_t)i * dv + j0;
                gdn_scale(row, decay, nb);
                gdn_axpy(delta, k[i], row, nb);
            }
            /* delta = beta (v - S^T k) */
            for (int j = 0; j < nb; j++) delta[j] = beta * (v[j0 + j] - delta[j]);
            /* S += k delta^T, then o = S^T (q * q_scale) */
            float *o = out + j0;
            memset(o, 0, (size_t)nb * sizeof *o);
            for (int i = 0; i < dk; i++) {
                float *row = state + (size_t)i * dv + j0;
                gdn_axpy(row, k[i], delta, nb);
                gdn_axpy(o, q[i] * io->q_scale, row, nb);
            }
        }
    }
}

size_t tela_gdn_chunked_work_floats(int dk, int dv) {
    const size_t c = TELA_GDN_CHUNK;
    return c + 2 * c * c + c * (4 * (size_t)dk + 2 * (size_t)dv);
}

#if TELA_GDN_CHUNK % GDN_VEC != 0
#error "TELA_GDN_CHUNK must be a multiple of GDN_VEC"
#endif

/* One chunk of L <= TELA_GDN_CHUNK tokens starting at token t0. */
static void gdn_chunk(const tela_gdn_io *io, int64_t t0, int L, float *S, float *work) {
    const int dk = io->dk, dv = io->dv, dx = dv + dk;
    const int C = TELA_GDN_CHUNK;
    float *cum = work;                       /* C */
    float *A = cum + C;                      /* C x C, strictly lower */
    float *P = A + (size_t)C * C;            /* C x C, lower with diagonal */
    float *Q = P + (size_t)C * C;            /* C x dk, q * q_scale */
    float *K = Q + (size_t)C * dk;           /* C x dk */
    float *X = K + (size_t)C * dk;           /* C x (dv + dk): [U | W] */
    float *VN = X + (size_t)C * dx;          /* C x dv: V' */
    float *Kt = VN + (size_t)C * dv;         /* dk x C: K transposed */

    float acc = 0.0f;
    for (int i = 0; i < L; i++) {
        const int64_t t = t0 + i;
        const float *q = io->q + t * io->qk_stride;
        const float *k = io->k + t * io->qk_stride;
        const float *v = io->v + t * io->v_stride;
        const float beta = io->beta[t * io->gb_stride];
        acc += io->g[t * io->gb_stride];
        cum[i] = acc;
        for (int r = 0; r < dk; r++) Q[(size_t)i * dk + r] = q[r] * io->q_scale;
        memcpy(K + (size_t)i * dk, k, (size_t)dk * sizeof *K);
        float *x = X + (size_t)i * dx;
        for (int c = 0; c < dv; c++) x[c] = beta * v[c];
        const float kscale = beta * expf(cum[i]);
        for (int r = 0; r < dk; r++) x[dv + r] = kscale * k[r];
    }

    /* A = beta K K^T and P = Q K^T, both weighted by the pairwise decays.
     * Row i needs columns j <= i: it is built as sum_r K[i][r] Kt[r][:] over
     * the columns rounded up to a whole vector block (the extra columns are
     * ignored; Kt's columns past L are zero so every value read is set). */
    for (int r = 0; r < dk; r++) {
        float *kt = Kt + (size_t)r * C;
        for (int j = 0; j < L; j++) kt[j] = K[(size_t)j * dk + r];
        for (int j = L; j < C; j++) kt[j] = 0.0f;
    }
    for (int i = 0; i < L; i++) {
        const float beta = io->beta[(t0 + i) * io->gb_stride];
        const float *ki = K + (size_t)i * dk, *qi = Q + (size_t)i * dk;
        float *a = A + (size_t)i * C, *p = P + (size_t)i * C;
        const int len = (i + GDN_VEC) / GDN_VEC * GDN_VEC;
        memset(a, 0, (size_t)len * sizeof *a);
        memset(p, 0, (size_t)len * sizeof *p);
        for (int r = 0; r < dk; r++) {
            gdn_axpy(a, ki[r], Kt + (size_t)r * C, len);
            gdn_axpy(p, qi[r], Kt + (size_t)r * C, len);
        }
        for (int j = 0; j <= i; j++) {
            const float d = expf(cum[i] - cum[j]);
            a[j] *= beta * d;
            p[j] *= d;
        }
    }

    /* solve (I + A) X = B in place, row by row (unit lower triangular) */
    for (int i = 1; i < L; i++) {
        float *xi = X + (size_t)i * dx;
        for (int j = 0; j < i; j++) gdn_axpy(xi, -A[(size_t)i * C + j], X + (size_t)j * dx, dx);
    }

    /* V' = U - W S */
    for (int i = 0; i < L; i++) {
        const float *x = X + (size_t)i * dx;
        float *vn = VN + (size_t)i * dv;
        memcpy(vn, x, (size_t)dv * sizeof *vn);
        for (int r = 0; r < dk; r++) gdn_axpy(vn, -x[dv + r], S + (size_t)r * dv, dv);
    }

    /* o_i = exp(c_i) q_i S + sum_{j<=i} P[i][j] V'_j */
    for (int i = 0; i < L; i++) {
        float *out = io->out + (t0 + i) * io->out_stride;
        const float *qi = Q + (size_t)i * dk;
        memset(out, 0, (size_t)dv * sizeof *out);
        for (int r = 0; r < dk; r++) gdn_axpy(out, qi[r], S + (size_t)r * dv, dv);
        gdn_scale(out, expf(cum[i]), dv);
        for (int j = 0; j <= i; j++) gdn_axpy(out, P[(size_t)i * C + j], VN + (size_t)j * dv, dv);
    }

    /* S <- exp(c_L) S + sum_i exp(c_L - c_i) k_i V'_i^T */
    const float last = cum[L - 1];
    const float e = expf(last);
    for (int r = 0; r < dk; r++) gdn_scale(S + (size_t)r * dv, e, dv);
    for (int i = 0; i < L; i++) {
        const float d = expf(last - cum[i]);
        const float *ki = K + (size_t)i * dk, *vn = VN + (size_t)i * dv;
        for (int r = 0; r < dk; r++) gdn_axpy(S + (size_t)r * dv, ki[r] * d, vn, dv);
    }
}

void tela_gdn_chunked(const tela_gdn_io *io, int64_t n, float *state, float *work) {
    for (int64_t t0 = 0; t0 < n; t0 += TELA_GDN_CHUNK) {
        const int64_t left = n - t0;
        gdn_chunk(io, t0, left < TELA_GDN_CHUNK ? (int)left : TELA_GDN_CHUNK, state, work);
    }
}

void tela_gdn_conv1d_silu(const float *x, int64_t x_stride, int64_t n, int channels, int kernel,
                          const float *w, float *state, float *out, int64_t out_stride) {
    const int hist = kernel - 1;
    for (int64_t t = 0; t < n; t++) {
        float *o = out + t * out_stride;
        const float *xt = x + t * x_stride;
        for (int c = 0; c < channels; c++) o[c] = w[(size_t)c * kernel + hist] * xt[c];
        for (int k = 0; k < hist; k++) {
            /* tap k reads the input kernel-1-k steps back */
            const int64_t s = t - hist + k;
            const float *src = s < 0 ? state + (size_t)(s + hist) * channels : x + s * x_stride;
            for (int c = 0; c < channels; c++) o[c] += w[(size_t)c * kernel + k] * src[c];
        }
        for (int c = 0; c < channels; c++) o[c] = gdn_silu(o[c]);
    }
    /* keep the last kernel-1 inputs; rows move towards the front only, so the
     * ascending loop reads each old row before it is overwritten */
    for (int r = 0; r < hist; r++) {
        const int64_t s = n - hist + r;
        const float *src = s < 0 ? state + (size_t)(s + hist) * channels : x + s * x_stride;
        float *dst = state + (size_t)r * channels;
        if (src != dst) memmove(dst, src, (size_t)channels * sizeof *dst);
    }
}

void tela_gdn_l2_norm(float *x, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const float inv = 1.0f / sqrtf(ss + eps);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void tela_gdn_gated_rms_norm(float *x, const float *z, const float *w, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) x[i] = (w[i] * (x[i] * inv)) * gdn_silu(z[i]);
}
