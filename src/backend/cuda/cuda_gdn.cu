/* cuda_gdn.cu: the kernels of Qwen3.5's Gated DeltaNet layers and of its
 * gated attention on the GPU: the attention output gate, the causal
 * depthwise conv1d with its rolling state (fused with SiLU), the gates
 * (L2 norm of q and k, sigmoid of beta, the decay g), the delta rule and
 * the gated RMSNorm of its output. The math is backend/cpu/gdn.h's; every
 * kernel works in f32, with the recurrent state in f32 device memory.
 *
 * The delta rule as a scan. Per value head the state S is dk x dv, and
 * column j of S evolves on its own: with k, q (dk) and the scalars g,
 * beta, v_j of a token,
 *     kS    = exp(g) (k . S_j)
 *     S_j  <- exp(g) S_j + k (beta (v_j - kS))
 *     o_j   = q_scale (q . S_j)
 * so the columns are spread over the GPU: a warp holds 32/G columns, G
 * lanes per column each keeping dk/G of its rows in registers, and the
 * two dots per token are sums over those G lanes (log2 G shuffles). The
 * tokens then run in order inside the warp, with the next token's k, q
 * loaded while the current one computes. A step of n tokens costs about n
 * times a few hundred cycles per warp, whatever the length; the chunked
 * (WY) form that the CPU uses for prefill would move that work onto tensor
 * cores (docs/PERF-NOTES.md says where the scan stands against it). */
#include "backend/cuda/cuda_act.cuh"

static __device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
static __device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
/* torch.nn.functional.softplus (beta 1, threshold 20), as the CPU's */
static __device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Blocks of a grid-stride loop over n items, `per_block` a block. */
static unsigned blocks_for(int64_t n, int per_block) {
    const int64_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b > 65535 ? 65535 : (b < 1 ? 1 : b));
}

/* ------------------------------------------------------ output gate */

static __global__ void sigmoid_gate_kernel(float *out, int64_t os, const float *gate, int64_t gs, int n_rows, int n) {
    TELA_PDL_ENTRY();
    const int64_t total = (int64_t)n_rows * n;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / n, c = i % n;
        out[r * os + c] *= sigmoid_f(gate[r * gs + c]);
    }
}

/* The same for one token's heads (rows of n, n % 32 == 0, stored one
 * after another), a head a block, eight elements a thread, and the gated
 * heads quantized for the product after it (cuda_act.cuh). */
static __global__ void sigmoid_gate_q_kernel(float *out, const float *gate, int64_t gs, int n, const preq_out pq) {
    TELA_PDL_ENTRY();
    const int r = blockIdx.x, c8 = threadIdx.x;
    const bool ok = c8 < n / 8;
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (ok) {
        float *o = out + (int64_t)r * n + 8 * c8;
        const float *g = gate + (int64_t)r * gs + 8 * c8;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            v[i] = o[i] * sigmoid_f(g[i]);
            o[i] = v[i];
        }
    }
    quantize8(v, ok, r * (n / 8) + c8, pq.lt, pq.xq, pq.xd, pq.xs);
}

void tela_cuda_sigmoid_gate(cuda_exec *ex, float *out, int64_t out_stride, const float *gate, int64_t gate_stride,
                            int n_rows, int n) {
    if (n_rows <= 0 || n <= 0) return;
    preq_out pq;
    if (out_stride == n && n % 32 == 0 && n <= 8 * 1024 && tela_cuda_preq_begin(ex, 2, (int64_t)n_rows * n, &pq)) {
        tela_cuda_launch(ex, sigmoid_gate_q_kernel, (unsigned)n_rows, (unsigned)((n / 8 + 31) / 32 * 32), 0, out, gate,
                         gate_stride, n, pq);
        if (tela_cuda_launched(ex, "attention output gate")) tela_cuda_preq_done(ex, out, &pq);
        return;
    }
    tela_cuda_launch(ex, sigmoid_gate_kernel, blocks_for((int64_t)n_rows * n, 256), 256, 0, out, out_stride, gate,
                                                                                      gate_stride, n_rows, n);
    tela_cuda_launched(ex, "attention output gate");
}

/* ----------------------------------------------------------- conv1d */

/* Input row s of a channel: from x, or for s < 0 from the state (whose
 * row hist + s is the input s steps back). */
static __device__ __forceinline__ float conv_in(const float *x, int64_t xs, const float *state, int channels, int hist,
                                                int64_t s, int c) {
    return s < 0 ? state[(s + hist) * channels + c] : x[s * xs + c];
}

/* Output (t, c): the taps summed in the CPU's order (newest first, then
 * oldest to newest), then SiLU. Reads the state, never writes it. */
static __global__ void conv1d_kernel(const float *x, int64_t xs, int n_tok, int channels, int kernel, const float *w,
                                     const float *state, float *out, int64_t os) {
    TELA_PDL_ENTRY();
    const int hist = kernel - 1;
    const int64_t total = (int64_t)n_tok * channels;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / channels;
        const int c = (int)(i % channels);
        const float *wc = w + (size_t)c * kernel;
        float acc = wc[hist] * x[t * xs + c];
        for (int k = 0; k < hist; k++) acc += wc[k] * conv_in(x, xs, state, channels, hist, t - hist + k, c);
        out[t * os + c] = silu_f(acc);
    }
}

/* The state keeps the last hist inputs; rows only move towards the front,
 * so one thread per channel, ascending, reads each old row before it is
 * overwritten. */
static __global__ void conv1d_state_kernel(const float *x, int64_t xs, int n_tok, int channels, int kernel,
                                           float *state) {
    TELA_PDL_ENTRY();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    const int hist = kernel - 1;
    for (int r = 0; r < hist; r++)
        state[(size_t)r * channels + c] = conv_in(x, xs, state, channels, hist, (int64_t)n_tok - hist + r, c);
}

/* Decode steps (a few tokens): outputs and state in one kernel, one thread
 * per channel. */
static __global__ void conv1d_step_kernel(const float *x, int64_t xs, int n_tok, int channels, int kernel,
                                          const float *w, float *state, float *out, int64_t os) {
    TELA_PDL_ENTRY();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    const int hist = kernel - 1;
    const float *wc = w + (size_t)c * kernel;
    for (int t = 0; t < n_tok; t++) {
        float acc = wc[hist] * x[(int64_t)t * xs + c];
        for (int k = 0; k < hist; k++) acc += wc[k] * conv_in(x, xs, state, channels, hist, t - hist + k, c);
        out[(int64_t)t * os + c] = silu_f(acc);
    }
    for (int r = 0; r < hist; r++)
        state[(size_t)r * channels + c] = conv_in(x, xs, state, channels, hist, (int64_t)n_tok - hist + r, c);
}

/* The same for K taps (2-4: Qwen3.5 has 4) with the channel's taps and
 * inputs in registers, so that no load waits behind a store it might
 * alias (the loop above reads each state row after writing the one
 * before). ordered: the kernel queued before this one is ordered
 * (tela_cuda_after_ordered), so the taps and the state are read before
 * this kernel's wait, and this kernel is ordered in turn (it lets the
 * next launch only after its wait), for the delta rule's step to read
 * its own state early. */
#define CONV_STEP_MAX_TOK 8
template <int K>
static __global__ void conv1d_step_k_kernel(const float *__restrict__ x, int64_t xs, int n_tok, int channels,
                                            const float *__restrict__ w, float *__restrict__ state,
                                            float *__restrict__ out, int64_t os, int ordered) {
    constexpr int H = K - 1, T = CONV_STEP_MAX_TOK;
    if (!ordered) TELA_PDL_ENTRY();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const bool ok = c < channels;
    /* win[i]: the input i - H steps from the step's first token */
    float wk[K], win[H + T];
#pragma unroll
    for (int k = 0; k < K; k++) wk[k] = ok ? w[(size_t)c * K + k] : 0.0f;
#pragma unroll
    for (int r = 0; r < H; r++) win[r] = ok ? state[(size_t)r * channels + c] : 0.0f;
    if (ordered) TELA_PDL_WAIT_THEN_LAUNCH();
    if (!ok) return;
#pragma unroll
    for (int t = 0; t < T; t++) win[H + t] = t < n_tok ? x[(int64_t)t * xs + c] : 0.0f;
#pragma unroll
    for (int t = 0; t < T; t++) {
        if (t >= n_tok) break;
        float acc = wk[H] * win[H + t]; /* the CPU's order: the newest first, then oldest to newest */
#pragma unroll
        for (int k = 0; k < H; k++) acc += wk[k] * win[t + k];
        out[(int64_t)t * os + c] = silu_f(acc);
    }
    /* the last H inputs: win[n_tok + r], picked without a dynamic index */
#pragma unroll
    for (int r = 0; r < H; r++) {
        float v = win[r];
#pragma unroll
        for (int t = 1; t <= T; t++)
            if (t == n_tok) v = win[t + r];
        state[(size_t)r * channels + c] = v;
    }
}

void tela_cuda_conv1d_silu(cuda_exec *ex, const float *x, int64_t x_stride, int n_tok, int channels, int kernel,
                           const float *w, float *state, float *out, int64_t out_stride) {
    if (n_tok <= 0 || channels <= 0 || kernel < 1) return;
    const unsigned per_channel = (unsigned)((channels + 127) / 128);
    void (*step_k)(const float *, int64_t, int, int, const float *, float *, float *, int64_t, int) =
        kernel == 4 ? conv1d_step_k_kernel<4> : kernel == 3 ? conv1d_step_k_kernel<3> :
        kernel == 2 ? conv1d_step_k_kernel<2> : NULL;
    if (n_tok <= CONV_STEP_MAX_TOK && step_k) {
        const bool ordered = tela_cuda_after_ordered(ex);
        tela_cuda_launch(ex, step_k, per_channel, 128, 0, x, x_stride, n_tok, channels, w, state, out, out_stride,
                         ordered ? 1 : 0);
        if (ordered) tela_cuda_mark_ordered(ex);
    } else if (n_tok <= 8) {
        tela_cuda_launch(ex, conv1d_step_kernel, per_channel, 128, 0, x, x_stride, n_tok, channels, kernel, w, state, out,
                                                                 out_stride);
    } else {
        tela_cuda_launch(ex, conv1d_kernel, blocks_for((int64_t)n_tok * channels, 256), 256, 0,
            x, x_stride, n_tok, channels, kernel, w, state, out, out_stride);
        if (kernel > 1)
            tela_cuda_launch(ex, conv1d_state_kernel, per_channel, 128, 0, x, x_stride, n_tok, channels, kernel, state);
    }
    tela_cuda_launched(ex, "conv1d");
}

/* ------------------------------------------------------------- gates */

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One block per token: each warp L2-normalizes heads of dk floats; then
 * beta and g per value head. */
static __global__ void gdn_gates_kernel(float *qkv, int64_t qs, int n_qk_heads, int dk, float *beta, float *g, int nv,
                                        const float *a, const float *dt_bias, float eps) {
    TELA_PDL_ENTRY();
    const int t = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x & 31, n_warps = blockDim.x / 32;
    float *row = qkv + (int64_t)t * qs;
    for (int h = warp; h < n_qk_heads; h += n_warps) {
        float *v = row + (size_t)h * dk;
        float ss = 0.0f;
        for (int i = lane; i < dk; i += 32) ss += v[i] * v[i];
        const float inv = 1.0f / sqrtf(warp_sum(ss) + eps);
        for (int i = lane; i < dk; i += 32) v[i] *= inv;
    }
    for (int h = threadIdx.x; h < nv; h += blockDim.x) {
        float *b = beta + (int64_t)t * nv + h, *gg = g + (int64_t)t * nv + h;
        *b = sigmoid_f(*b);
        *gg = a[h] * softplus_f(*gg + dt_bias[h]);
    }
}

void tela_cuda_gdn_gates(cuda_exec *ex, float *qkv, int64_t qkv_stride, int n_qk_heads, int dk, float *beta, float *g,
                         int nv, int n_tok, const float *a, const float *dt_bias, float eps) {
    if (n_tok <= 0) return;
    tela_cuda_launch(ex, gdn_gates_kernel, (unsigned)n_tok, 256, 0, qkv, qkv_stride, n_qk_heads, dk, beta, g, nv, a, dt_bias,
                                                              eps);
    tela_cuda_launched(ex, "Gated DeltaNet gates");
}

/* -------------------------------------------------------- delta rule */

#define GDN_WARPS 4 /* warps per block of the scan */

/* The state after token t into the t-th of the kept states (a speculative
 * step's rollback, tela_gdn_args.states): this lane's rows r of its column,
 * at offset off (its first row's) within a state. */
template <int R>
static __device__ __forceinline__ void keep_state(float *states, int t, int nv, int dk, int dv, ptrdiff_t off,
                                                  const float (&s)[R]) {
    float *dst = states + (size_t)t * nv * dk * dv + off;
#pragma unroll
    for (int r = 0; r < R; r++) dst[(size_t)r * dv] = s[r];
}

/* The scan (see the top of the file). DK: the key head dim; G: lanes per
 * column; a warp covers 32/G consecutive columns of one value head
 * (blockIdx.y), lane = grp * (32/G) + col, so each row's loads and stores
 * of the state are whole 32/G-float runs. The next token's inputs are
 * loaded while the current one computes: the tokens are a chain of
 * dependent steps, so the warp would otherwise wait for memory at each. */
template <int DK, int G>
static __global__ void __launch_bounds__(GDN_WARPS * 32)
gdn_scan_kernel(const float *qkv, int64_t qs, int nk, int nv, int dv, int v_tiled, float q_scale, const float *beta,
                const float *g, float *state, float *out, int64_t os, int n_tok, float *states) {
    TELA_PDL_ENTRY();
    constexpr int C = 32 / G, R = DK / G; /* columns a warp, rows a lane */
    const int lane = threadIdx.x & 31, col = lane % C, grp = lane / C;
    const int h = blockIdx.y;
    const int j = (blockIdx.x * GDN_WARPS + threadIdx.x / 32) * C + col;
    if (j - col >= dv) return; /* a whole warp past the head's columns */
    const int kh = v_tiled ? h % nk : h / (nv / nk);
    const float *qp = qkv + (size_t)kh * DK + grp * R, *kp = qkv + (size_t)(nk + kh) * DK + grp * R;
    const float *vp = qkv + (size_t)2 * nk * DK + (size_t)h * dv + j;
    float *S = state + (size_t)h * DK * dv + (size_t)grp * R * dv + j;
    float s[R];
#pragma unroll
    for (int r = 0; r < R; r++) s[r] = S[(size_t)r * dv];

    struct step_in {
        float k[R], q[R], g, b, v;
    };
    auto load = [&](int t, step_in &in) {
        const float4 *k4 = reinterpret_cast<const float4 *>(kp + (int64_t)t * qs);
        const float4 *q4 = reinterpret_cast<const float4 *>(qp + (int64_t)t * qs);
#pragma unroll
        for (int r = 0; r < R / 4; r++) {
            const float4 a = k4[r], b = q4[r];
            in.k[4 * r] = a.x, in.k[4 * r + 1] = a.y, in.k[4 * r + 2] = a.z, in.k[4 * r + 3] = a.w;
            in.q[4 * r] = b.x, in.q[4 * r + 1] = b.y, in.q[4 * r + 2] = b.z, in.q[4 * r + 3] = b.w;
        }
        in.g = g[(int64_t)t * nv + h];
        in.b = beta[(int64_t)t * nv + h];
        in.v = vp[(int64_t)t * qs];
    };
    step_in cur, nxt;
    load(0, cur);
    for (int t = 0; t < n_tok; t++) {
        if (t + 1 < n_tok) load(t + 1, nxt);
        const float eg = expf(cur.g);
        /* k . S_j over this lane's rows, four partial sums for the latency */
        float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < R; r++) p[r & 3] = fmaf(cur.k[r], s[r], p[r & 3]);
        float ks = (p[0] + p[1]) + (p[2] + p[3]);
#pragma unroll
        for (int o = C; o < 32; o <<= 1) ks += __shfl_xor_sync(0xffffffffu, ks, o);
        const float delta = cur.b * (cur.v - eg * ks);
#pragma unroll
        for (int r = 0; r < R; r++) s[r] = fmaf(cur.k[r], delta, s[r] * eg);
        float o4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < R; r++) o4[r & 3] = fmaf(cur.q[r], s[r], o4[r & 3]);
        float o = (o4[0] + o4[1]) + (o4[2] + o4[3]);
#pragma unroll
        for (int off = C; off < 32; off <<= 1) o += __shfl_xor_sync(0xffffffffu, o, off);
        if (grp == 0) out[(int64_t)t * os + (size_t)h * dv + j] = o * q_scale;
        if (states) keep_state(states, t, nv, DK, dv, S - state, s);
        if (t + 1 < n_tok) cur = nxt;
    }
#pragma unroll
    for (int r = 0; r < R; r++) S[(size_t)r * dv] = s[r];
}

/* The scan for key dims 64 and 128, its inputs staged through shared
 * memory: the block's four warps share a value head (so its k, q, g,
 * beta), and chunks of GDN_CHUNK_T tokens are loaded by all 128 threads
 * at once, the next chunk's global loads in flight while the current one
 * computes from shared memory (one barrier a chunk). The register
 * version above waits for L2 once a token, which with a chain of
 * dependent tokens is most of its time. Same arithmetic, same order. */
#define GDN_CHUNK_T 16
template <int DK, int G>
static __global__ void __launch_bounds__(GDN_WARPS * 32)
gdn_scan_smem_kernel(const float *qkv, int64_t qs, int nk, int nv, int dv, int v_tiled, float q_scale,
                     const float *beta, const float *g, float *state, float *out, int64_t os, int n_tok,
                     float *states) {
    TELA_PDL_ENTRY();
    constexpr int C = 32 / G, R = DK / G, CB = GDN_WARPS * C, T = GDN_CHUNK_T;
    constexpr int KQ4 = T * 2 * DK / 4;                          /* float4s of k and q a chunk */
    constexpr int KQ_PER = KQ4 / (GDN_WARPS * 32);               /* a thread */
    static_assert(KQ4 % (GDN_WARPS * 32) == 0, "chunk loads must split evenly");
    struct chunk {
        float4 kq[T][2][DK / 4]; /* [t][0]: k, [t][1]: q */
        float v[T][CB];
        float g[T], b[T];
    };
    __shared__ chunk buf[2];
    const int lane = threadIdx.x & 31, col = lane % C, grp = lane / C, tid = threadIdx.x;
    const int h = blockIdx.y;
    const int jb = blockIdx.x * CB, j = jb + (threadIdx.x / 32) * C + col;
    const bool active = j - col < dv; /* whole warps past the head's columns only help load */
    const int kh = v_tiled ? h % nk : h / (nv / nk);
    const float *kbase = qkv + (size_t)(nk + kh) * DK, *qbase = qkv + (size_t)kh * DK;
    const float *vbase = qkv + (size_t)2 * nk * DK + (size_t)h * dv;
    float *S = state + (size_t)h * DK * dv + (size_t)grp * R * dv + j;
    float s[R];
#pragma unroll
    for (int r = 0; r < R; r++) s[r] = active ? S[(size_t)r * dv] : 0.0f;

    /* a chunk's loads into registers, then into shared memory */
    float4 rkq[KQ_PER];
    float rv[(T * CB + GDN_WARPS * 32 - 1) / (GDN_WARPS * 32)], rg = 0.0f;
    auto fetch = [&](int t0) {
#pragma unroll
        for (int i = 0; i < KQ_PER; i++) {
            const int e = tid + i * GDN_WARPS * 32, t = e / (2 * DK / 4), w = (e / (DK / 4)) & 1, c = e % (DK / 4);
            rkq[i] = t0 + t < n_tok ? reinterpret_cast<const float4 *>((w ? qbase : kbase) + (int64_t)(t0 + t) * qs)[c]
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int i = 0; i < (int)(sizeof rv / sizeof rv[0]); i++) {
            const int e = tid + i * GDN_WARPS * 32, t = e / CB, c = e % CB;
            rv[i] = e < T * CB && t0 + t < n_tok && jb + c < dv ? vbase[(int64_t)(t0 + t) * qs + jb + c] : 0.0f;
        }
        if (tid < 2 * T) {
            const int t = tid % T;
            rg = t0 + t < n_tok ? (tid < T ? g : beta)[(int64_t)(t0 + t) * nv + h] : 0.0f;
        }
    };
    auto stash = [&](chunk &b) {
#pragma unroll
        for (int i = 0; i < KQ_PER; i++) {
            const int e = tid + i * GDN_WARPS * 32, t = e / (2 * DK / 4), w = (e / (DK / 4)) & 1, c = e % (DK / 4);
            b.kq[t][w][c] = rkq[i];
        }
#pragma unroll
        for (int i = 0; i < (int)(sizeof rv / sizeof rv[0]); i++) {
            const int e = tid + i * GDN_WARPS * 32;
            if (e < T * CB) b.v[e / CB][e % CB] = rv[i];
        }
        if (tid < 2 * T) (tid < T ? b.g : b.b)[tid % T] = rg;
    };
    fetch(0);
    stash(buf[0]);
    __syncthreads();
    for (int t0 = 0, c = 0; t0 < n_tok; t0 += T, c ^= 1) {
        const bool more = t0 + T < n_tok;
        if (more) fetch(t0 + T);
        const chunk &b = buf[c];
        const int nt = n_tok - t0 < T ? n_tok - t0 : T;
        if (active)
            for (int t = 0; t < nt; t++) {
                float k[R], q[R];
#pragma unroll
                for (int r = 0; r < R / 4; r++) {
                    const float4 a = b.kq[t][0][grp * (R / 4) + r], e = b.kq[t][1][grp * (R / 4) + r];
                    k[4 * r] = a.x, k[4 * r + 1] = a.y, k[4 * r + 2] = a.z, k[4 * r + 3] = a.w;
                    q[4 * r] = e.x, q[4 * r + 1] = e.y, q[4 * r + 2] = e.z, q[4 * r + 3] = e.w;
                }
                const float eg = expf(b.g[t]);
                float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int r = 0; r < R; r++) p[r & 3] = fmaf(k[r], s[r], p[r & 3]);
                float ks = (p[0] + p[1]) + (p[2] + p[3]);
#pragma unroll
                for (int o = C; o < 32; o <<= 1) ks += __shfl_xor_sync(0xffffffffu, ks, o);
                const float delta = b.b[t] * (b.v[t][j - jb] - eg * ks);
#pragma unroll
                for (int r = 0; r < R; r++) s[r] = fmaf(k[r], delta, s[r] * eg);
                float o4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int r = 0; r < R; r++) o4[r & 3] = fmaf(q[r], s[r], o4[r & 3]);
                float o = (o4[0] + o4[1]) + (o4[2] + o4[3]);
#pragma unroll
                for (int off = C; off < 32; off <<= 1) o += __shfl_xor_sync(0xffffffffu, o, off);
                if (grp == 0) out[(int64_t)(t0 + t) * os + (size_t)h * dv + j] = o * q_scale;
                if (states) keep_state(states, t0 + t, nv, DK, dv, S - state, s);
            }
        if (more) stash(buf[c ^ 1]); /* its last readers finished before the previous barrier */
        __syncthreads();
    }
    if (active)
#pragma unroll
        for (int r = 0; r < R; r++) S[(size_t)r * dv] = s[r];
}

/* A decode step (n_tok <= GDN_STEP_MAX_TOK tokens, in order) of one value
 * head per block, everything of the op in one kernel: the gates (the q and
 * k heads L2-normalized into shared memory, not written back, since the
 * blocks of the value heads sharing a key head read them at once; beta,
 * g), the rule (4 lanes a column, dv / 8 warps), and the gated output norm
 * over the head, summed across the block. ordered: the kernel before (the
 * conv) is ordered (tela_cuda_after_ordered), so the state, which only
 * this kernel writes, is read before the wait. */
#define GDN_STEP_MAX_TOK 4
template <int DK>
static __global__ void __launch_bounds__(512)
gdn_step_kernel(const float *qkv, int64_t qs, int nk, int nv, int dv, int v_tiled, float q_scale, const float *beta,
                const float *g, const float *a_gate, const float *dt_bias, float l2_eps, const float *z,
                const float *norm_w, float eps, float *state, float *out, int64_t os, int n_tok, float *states,
                const preq_out pq, int ordered) {
    if (ordered) TELA_PDL_LAUNCH();
    else TELA_PDL_ENTRY();
    constexpr int G = 4, C = 8, R = DK / G;
    __shared__ float4 qk4[2 * DK / 4]; /* q, then k */
    __shared__ float red[2][16];
    __shared__ float sc[2];           /* exp(g), beta */
    __shared__ float4 ob4[128 / 4];   /* one token's outputs, for the quantizer (dv <= 128) */
    float *qk = reinterpret_cast<float *>(qk4);
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, col = lane % C, grp = lane / C;
    const int n_warps = blockDim.x / 32;
    const int h = blockIdx.x, j = warp * C + col;
    const int kh = v_tiled ? h % nk : h / (nv / nk);
    float *S = state + (size_t)h * DK * dv + (size_t)grp * R * dv + j;
    float s[R];
#pragma unroll
    for (int r = 0; r < R; r++) s[r] = S[(size_t)r * dv];
    if (ordered) TELA_PDL_WAIT();
    for (int t = 0; t < n_tok; t++) {
        const float *row = qkv + (int64_t)t * qs;
        /* this column's value and gate input, asked for before the barriers
         * that they would otherwise wait behind */
        const float vj = row[(size_t)2 * nk * DK + (size_t)h * dv + j];
        const float zj = grp == 0 ? z[(int64_t)t * os + (size_t)h * dv + j] : 0.0f;
        if (warp < 2) { /* warp 0: q, warp 1: k */
            const float *x = row + (size_t)(warp * nk + kh) * DK;
            float v[DK / 32 > 0 ? DK / 32 : 1];
            float ss = 0.0f;
#pragma unroll
            for (int i = 0; i < DK / 32; i++) v[i] = x[lane + 32 * i], ss += v[i] * v[i];
            if (DK < 32) v[0] = lane < DK ? x[lane] : 0.0f, ss = v[0] * v[0];
            const float inv = a_gate ? 1.0f / sqrtf(warp_sum(ss) + l2_eps) : 1.0f;
#pragma unroll
            for (int i = 0; i < (DK / 32 > 0 ? DK / 32 : 1); i++)
                if (lane + 32 * i < DK) qk[warp * DK + lane + 32 * i] = v[i] * inv;
        } else if (warp == 2 && lane == 0) {
            float b = beta[(int64_t)t * nv + h], gg = g[(int64_t)t * nv + h];
            if (a_gate) b = sigmoid_f(b), gg = a_gate[h] * softplus_f(gg + dt_bias[h]);
            sc[0] = expf(gg), sc[1] = b;
        }
        if (n_warps < 3 && threadIdx.x == 0) { /* fewer than three warps (dv < 24): thread 0 does the scalars */
            float b = beta[(int64_t)t * nv + h], gg = g[(int64_t)t * nv + h];
            if (a_gate) b = sigmoid_f(b), gg = a_gate[h] * softplus_f(gg + dt_bias[h]);
            sc[0] = expf(gg), sc[1] = b;
        }
        __syncthreads();
        const float eg = sc[0], b = sc[1];
        const float *qs_ = qk + grp * R, *ks_ = qk + DK + grp * R;
        float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < R; r++) p[r & 3] = fmaf(ks_[r], s[r], p[r & 3]);
        float ks = (p[0] + p[1]) + (p[2] + p[3]);
        ks += __shfl_xor_sync(0xffffffffu, ks, 8);
        ks += __shfl_xor_sync(0xffffffffu, ks, 16);
        const float delta = b * (vj - eg * ks);
#pragma unroll
        for (int r = 0; r < R; r++) s[r] = fmaf(ks_[r], delta, s[r] * eg);
        if (states) keep_state(states, t, nv, DK, dv, S - state, s);
        float o4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < R; r++) o4[r & 3] = fmaf(qs_[r], s[r], o4[r & 3]);
        float o = (o4[0] + o4[1]) + (o4[2] + o4[3]);
        o += __shfl_xor_sync(0xffffffffu, o, 8);
        o += __shfl_xor_sync(0xffffffffu, o, 16);
        o *= q_scale;
        /* the norm over the head's dv outputs: each column once (grp 0) */
        float sq = grp == 0 ? o * o : 0.0f;
        sq = warp_sum(sq);
        if (lane == 0) red[t & 1][warp] = sq;
        __syncthreads();
        float tot = 0.0f;
        for (int w = 0; w < n_warps; w++) tot += red[t & 1][w];
        if (grp == 0) {
            const float inv = 1.0f / sqrtf(tot / (float)dv + eps);
            const float y = (norm_w[j] * (o * inv)) * silu_f(zj);
            out[(int64_t)t * os + (size_t)h * dv + j] = y;
            reinterpret_cast<float *>(ob4)[j] = y;
        }
        /* qk and sc are rewritten by the next token: everyone is past them
         * (red alternates, so the sums of this token stay until read) */
    }
#pragma unroll
    for (int r = 0; r < R; r++) S[(size_t)r * dv] = s[r];
    if (pq.xq) { /* one token: the head's outputs quantized for the product after it */
        __syncthreads();
        preq_block(pq, reinterpret_cast<const float *>(ob4), h * dv, dv, threadIdx.x, blockDim.x);
    }
}

/* out = rmsnorm(o) * norm_w * silu(z) per (token, value head): a warp each. */
static __global__ void gdn_out_norm_kernel(float *out, int64_t os, const float *z, int64_t zs, const float *w, int nv,
                                           int dv, int n_tok, float eps) {
    TELA_PDL_ENTRY();
    const int lane = threadIdx.x & 31, per_block = blockDim.x / 32;
    for (int64_t item = (int64_t)blockIdx.x * per_block + threadIdx.x / 32; item < (int64_t)n_tok * nv;
         item += (int64_t)gridDim.x * per_block) {
        const int64_t t = item / nv;
        const int h = (int)(item % nv);
        float *o = out + t * os + (size_t)h * dv;
        const float *zz = z + t * zs + (size_t)h * dv;
        float ss = 0.0f;
        for (int i = lane; i < dv; i += 32) ss += o[i] * o[i];
        const float inv = 1.0f / sqrtf(warp_sum(ss) / (float)dv + eps);
        for (int i = lane; i < dv; i += 32) o[i] = (w[i] * (o[i] * inv)) * silu_f(zz[i]);
    }
}

typedef void (*gdn_scan_fn)(const float *, int64_t, int, int, int, int, float, const float *, const float *, float *,
                            float *, int64_t, int, float *);
typedef void (*gdn_step_fn)(const float *, int64_t, int, int, int, int, float, const float *, const float *,
                            const float *, const float *, float, const float *, const float *, float, float *, float *,
                            int64_t, int, float *, const preq_out, int);

/* Lanes per column of the scan: 8 for the key dims of 64 and up (more,
 * shorter chains per token: a prefill's steps are latency-bound), 4 for
 * the small ones; TELA_CUDA_GDN_LANES=4|8 chooses for dk 64 and 128 (256
 * takes 8: its rows would not fit in registers at 4). */
static int lanes_for(const cuda_exec *ex, int dk) {
    if (dk == 256) return 8;
    if (dk < 64) return 4;
    return ex->gdn_lanes ? ex->gdn_lanes : 8;
}

/* The scan instance for a key head dim and lanes a column (NULL: none):
 * staged through shared memory for dk 64 and 128. */
static gdn_scan_fn scan_for(int dk, int lanes) {
    switch (dk * 16 + lanes) {
    case 16 * 16 + 4: return gdn_scan_kernel<16, 4>;
    case 32 * 16 + 4: return gdn_scan_kernel<32, 4>;
    case 64 * 16 + 4: return gdn_scan_smem_kernel<64, 4>;
    case 64 * 16 + 8: return gdn_scan_smem_kernel<64, 8>;
    case 128 * 16 + 4: return gdn_scan_smem_kernel<128, 4>;
    case 128 * 16 + 8: return gdn_scan_smem_kernel<128, 8>;
    case 256 * 16 + 8: return gdn_scan_kernel<256, 8>;
    default: return NULL;
    }
}

static gdn_step_fn step_for(int dk) {
    switch (dk) {
    case 16: return gdn_step_kernel<16>;
    case 32: return gdn_step_kernel<32>;
    case 64: return gdn_step_kernel<64>;
    case 128: return gdn_step_kernel<128>;
    default: return NULL; /* 256: its rows would spill; decode steps take the scan */
    }
}

void tela_cuda_gdn_delta(cuda_exec *ex, const tela_gdn_args *a) {
    if (a->n_tok <= 0) return;
    const int lanes = lanes_for(ex, a->dk);
    gdn_scan_fn fn = scan_for(a->dk, lanes);
    /* whole warps of columns (at most 16 a block in the step kernel); k and
     * q read as float4 */
    if (!fn || a->dv <= 0 || a->dv % 8 != 0 || a->dv > 128 || a->qkv_stride % 4 != 0 ||
        ((uintptr_t)a->qkv & 15) != 0 || a->nk <= 0 || a->nv % a->nk != 0) {
        tela_cuda_check(ex, cudaErrorNotSupported,
                        "Gated DeltaNet heads of this shape (key dim 16, 32, 64, 128 or 256; value dim a multiple "
                        "of 8 up to 128) have no CUDA kernel");
        return;
    }
    const int64_t vd = (int64_t)a->nv * a->dv;
    const tela_gdn_gates_in *gt = a->gates;
    gdn_step_fn step = ex->gdn_step && a->n_tok <= GDN_STEP_MAX_TOK ? step_for(a->dk) : NULL;
    if (step) {
        preq_out pq;
        pq.xq = NULL;
        if (a->n_tok == 1 && a->dv % 32 == 0) tela_cuda_preq_begin(ex, 2, vd, &pq);
        const bool ordered = tela_cuda_after_ordered(ex);
        tela_cuda_launch(ex, step, (unsigned)a->nv, (unsigned)(a->dv / 8 * 32), 0,
            a->qkv, a->qkv_stride, a->nk, a->nv, a->dv, a->v_tiled ? 1 : 0, a->q_scale, a->beta, a->g,
            gt ? gt->a : NULL, gt ? gt->dt_bias : NULL, gt ? gt->eps : 0.0f, a->z, a->norm_w, a->eps, a->state,
            a->out, vd, a->n_tok, a->states, pq, ordered ? 1 : 0);
        if (tela_cuda_launched(ex, "Gated DeltaNet decode step")) tela_cuda_preq_done(ex, a->out, &pq);
        return;
    }
    if (gt)
        tela_cuda_gdn_gates(ex, a->qkv, a->qkv_stride, 2 * a->nk, a->dk, a->beta, a->g, a->nv, a->n_tok, gt->a,
                            gt->dt_bias, gt->eps);
    const int cols_per_block = GDN_WARPS * (32 / lanes);
    const dim3 grid((unsigned)((a->dv + cols_per_block - 1) / cols_per_block), (unsigned)a->nv);
    tela_cuda_launch(ex, fn, grid, GDN_WARPS * 32, 0, a->qkv, a->qkv_stride, a->nk, a->nv, a->dv, a->v_tiled ? 1 : 0,
                                                a->q_scale, a->beta, a->g, a->state, a->out, vd, a->n_tok, a->states);
    tela_cuda_launched(ex, "Gated DeltaNet delta rule");
    const int64_t items = (int64_t)a->n_tok * a->nv;
    tela_cuda_launch(ex, gdn_out_norm_kernel, blocks_for(items, 4), 128, 0, a->out, vd, a->z, vd, a->norm_w, a->nv, a->dv,
                                                                      a->n_tok, a->eps);
    tela_cuda_launched(ex, "Gated DeltaNet output norm");
}
