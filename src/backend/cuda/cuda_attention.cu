/* cuda_attention.cu: causal attention over a session's KV cache on the GPU.
 *
 *  - decode (and any step the flash kernel does not take): one block per
 *    (KV head, split of the keys, query token), serving up to eight query
 *    heads of the group, so each key and value is read once per group.
 *    Each lane scores one key of a 32-key tile against the group's queries
 *    (held in shared memory), an online softmax per warp keeps the running
 *    maximum and sum, and the values are accumulated with each lane owning
 *    dimensions. With several splits (long contexts: flash-decoding) the
 *    blocks write partial results that a second kernel combines. The split
 *    count depends only on the length bucket, so one captured decode graph
 *    serves every position in its bucket; the actual length is read from
 *    the positions in device memory. Keys and values are f16 or f32.
 *    For f16 caches of head_dim 64 and 128 (Llama 3.x) the default is a
 *    third kernel on the tensor cores (attn_decode3_kernel: 16 keys a warp
 *    step, the group's heads as the products' N side); variant 2 (lanes
 *    share a key, 16-byte loads) serves head_dim 256 (Qwen3.5).
 *  - prefill (f16 cache, head_dim 64, 128 or 256): a flash-attention kernel
 *    on the tensor cores (mma.sync m16n8k16, f16 inputs, f32 accumulation):
 *    64 query rows per block, 16 per warp, key tiles of 64 in shared memory
 *    (values transposed), the scores' online softmax in registers, and the
 *    probabilities reused in registers as the A operand of P V.
 * Scores are kept in base 2: queries are scaled by scale * log2(e). */
#include "backend/cuda/cuda_act.cuh"

#define LOG2E 1.4426950408889634f
#define DEC_WARPS 4
#define DEC_HEADS 8

uint32_t tela_cuda_length_bucket(int32_t n_kv) {
    uint32_t b = 0;
    while ((int64_t)256 << b < (int64_t)n_kv && b < 24) b++;
    return b;
}

int32_t tela_cuda_bucket_len(uint32_t bucket) { return (int32_t)((int64_t)256 << bucket); }

/* ---------------------------------------------------------------- decode */

/* Tensor-core helpers (the flash kernel and decode variant 3). */
static __device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *(const uint32_t *)&h;
}

struct dec_params {
    const float *q;
    int64_t q_stride;
    const void *k, *v;           /* the layer's cache: [n_kv_head][n_ctx][dim] */
    int n_ctx, kd, vd;
    int n_head, n_kv_head, group, hpb, n_sub;
    const int32_t *pos;
    const int32_t *tbl;          /* NULL, or a paged cache's block tables: token t's at tbl + tok_tbl[t] */
    const int32_t *tok_tbl;
    int shift;                   /* log2 of the block size */
    float qscale;                /* scale * log2(e) */
    int n_split, chunk;
    float *part;                 /* [n_tok][n_head][n_split][vd + 2] when n_split > 1 */
    float *out;
    int64_t out_stride;
    preq_out pq;                 /* variants 2 and 3, one token, no splits: the output quantized for the product after
                                    it (cuda_act.cuh), else pq.xq NULL */
};

/* The cache row of position j: j itself, or through the sequence's block
 * table t (a paged cache). */
static __device__ __forceinline__ int kv_row(const int32_t *t, int j, int shift) {
    return t ? (t[j >> shift] << shift) | (j & ((1 << shift) - 1)) : j;
}

template <typename KT>
static __device__ __forceinline__ float ldkv(const KT *p) {
    return (float)*p;
}

template <>
__device__ __forceinline__ float ldkv<__half>(const __half *p) {
    return __half2float(*p);
}

/* Eight keys' elements as floats (16 bytes of f16, 32 of f32). */
static __device__ __forceinline__ void ld8(const __half *p, float *f) {
    const uint4 v = *(const uint4 *)p;
    const __half2 *h = (const __half2 *)&v;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 x = __half22float2(h[i]);
        f[2 * i] = x.x, f[2 * i + 1] = x.y;
    }
}

static __device__ __forceinline__ void ld8(const float *p, float *f) {
    const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

/* The end of a decode block: each warp has left, for each of the block's
 * nh heads, its running maximum wm, sum wl and unnormalized output wo over
 * its share of the keys; merged here (the split's output, or its partial
 * for attn_combine_kernel with its maximum and sum). VD: the value size,
 * the kernel's template DT where it has one (a constant once inlined: the
 * PTX of variants 2 and 3 is unchanged by this function), else p.vd. */
template <int NH, int DW>
static __device__ __forceinline__ void dec_merge_warps(const dec_params &p, const float (&wm)[DEC_WARPS][NH],
                                                       const float (&wl)[DEC_WARPS][NH],
                                                       const float (&wo)[DEC_WARPS][NH][DW], const int VD, int nh,
                                                       int h0, int t, int split) {
    __syncthreads();
    for (int i = threadIdx.x; i < nh * VD; i += blockDim.x) {
        const int hh = i / VD, d = i % VD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, wm[w][hh]);
        float O = 0.0f, L = 0.0f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) {
                if (wm[w][hh] == -INFINITY) continue;
                const float f = exp2f(wm[w][hh] - M);
                O += wo[w][hh][d] * f;
                L += wl[w][hh] * f;
            }
        }
        const int h = h0 + hh;
        if (p.n_split == 1) {
            p.out[(size_t)t * p.out_stride + (size_t)h * VD + d] = O / L;
        } else {
            float *pp = p.part + (((size_t)t * p.n_head + h) * p.n_split + split) * (size_t)(VD + 2);
            pp[d] = O;
            if (d == 0) {
                pp[VD] = M;
                pp[VD + 1] = L;
            }
        }
    }
}

template <int DT, typename KT, bool VEC>
static __global__ void __launch_bounds__(DEC_WARPS * 32) attn_decode_kernel(const dec_params p) {
    TELA_PDL_ENTRY();
    __shared__ __align__(16) float sq[DEC_HEADS][DT];
    __shared__ float wm[DEC_WARPS][DEC_HEADS], wl[DEC_WARPS][DEC_HEADS];
    __shared__ float wo[DEC_WARPS][DEC_HEADS][DT];
    const int g = blockIdx.x / p.n_sub, sub = blockIdx.x % p.n_sub;
    const int split = blockIdx.y, t = blockIdx.z;
    const int h0 = g * p.group + sub * p.hpb;
    const int nh = min(p.hpb, p.group - sub * p.hpb);
    const int n_kv = p.pos[t] + 1;
    const int k0 = split * p.chunk, k1 = min(k0 + p.chunk, n_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int32_t *tt = p.tbl ? p.tbl + p.tok_tbl[t] : NULL;

    for (int i = threadIdx.x; i < DEC_HEADS * DT; i += blockDim.x) {
        const int hh = i / DT, d = i % DT;
        sq[hh][d] = hh < nh && d < p.kd ? p.q[(size_t)t * p.q_stride + (size_t)(h0 + hh) * p.kd + d] * p.qscale : 0.0f;
    }
    __syncthreads();

    const KT *kc = (const KT *)p.k + (size_t)g * p.n_ctx * p.kd;
    const KT *vc = (const KT *)p.v + (size_t)g * p.n_ctx * p.vd;
    float m[DEC_HEADS], l[DEC_HEADS], o[DEC_HEADS][DT / 32];
#pragma unroll
    for (int hh = 0; hh < DEC_HEADS; hh++) {
        m[hh] = -INFINITY;
        l[hh] = 0.0f;
#pragma unroll
        for (int j = 0; j < DT / 32; j++) o[hh][j] = 0.0f;
    }
    for (int kt = k0 + warp * 32; kt < k1; kt += DEC_WARPS * 32) {
        const int key = kt + lane;
        const bool valid = key < k1;
        float s[DEC_HEADS];
#pragma unroll
        for (int hh = 0; hh < DEC_HEADS; hh++) s[hh] = 0.0f;
        if (valid) {
            const KT *kr = kc + (size_t)kv_row(tt, key, p.shift) * p.kd;
            if (VEC) {
#pragma unroll 4
                for (int d = 0; d < DT; d += 8) {
                    if (d >= p.kd) break;
                    float f[8];
                    ld8(kr + d, f);
#pragma unroll
                    for (int hh = 0; hh < DEC_HEADS; hh++) {
                        if (hh >= nh) break;
                        const float4 qa = *(const float4 *)&sq[hh][d], qb = *(const float4 *)&sq[hh][d + 4];
                        s[hh] += qa.x * f[0] + qa.y * f[1] + qa.z * f[2] + qa.w * f[3] + qb.x * f[4] + qb.y * f[5] +
                                 qb.z * f[6] + qb.w * f[7];
                    }
                }
            } else {
                for (int d = 0; d < p.kd; d++) {
                    const float f = ldkv<KT>(kr + d);
#pragma unroll
                    for (int hh = 0; hh < DEC_HEADS; hh++)
                        if (hh < nh) s[hh] += sq[hh][d] * f;
                }
            }
        }
        float pr[DEC_HEADS];
#pragma unroll
        for (int hh = 0; hh < DEC_HEADS; hh++) {
            if (hh >= nh) break;
            const float sv = valid ? s[hh] : -INFINITY;
            float tmax = sv;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, off));
            const float mnew = fmaxf(m[hh], tmax); /* finite: lane 0's key is valid */
            const float corr = exp2f(m[hh] - mnew);
            pr[hh] = valid ? exp2f(sv - mnew) : 0.0f;
            l[hh] = l[hh] * corr + pr[hh];
#pragma unroll
            for (int j = 0; j < DT / 32; j++) o[hh][j] *= corr;
            m[hh] = mnew;
        }
        /* P V, eight keys' values loaded before they are used */
        const int nk = min(32, k1 - kt);
        constexpr int PB = DT <= 64 ? 32 : DT <= 128 ? 16 : 8; /* keys whose values are loaded at once */
        for (int kb = 0; kb < nk; kb += PB) {
            float vv[PB][DT / 32];
#pragma unroll
            for (int u = 0; u < PB; u++) {
                const KT *vr = vc + (size_t)kv_row(tt, min(kt + kb + u, n_kv - 1), p.shift) * p.vd;
#pragma unroll
                for (int j = 0; j < DT / 32; j++) {
                    const int d = lane + 32 * j;
                    vv[u][j] = kb + u < nk && d < p.vd ? ldkv<KT>(vr + d) : 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < PB; u++) {
                if (kb + u >= nk) break;
#pragma unroll
                for (int hh = 0; hh < DEC_HEADS; hh++) {
                    if (hh >= nh) break;
                    const float pk = __shfl_sync(0xffffffffu, pr[hh], kb + u);
#pragma unroll
                    for (int j = 0; j < DT / 32; j++) o[hh][j] = fmaf(pk, vv[u][j], o[hh][j]);
                }
            }
        }
    }
    /* combine the warps */
#pragma unroll
    for (int hh = 0; hh < DEC_HEADS; hh++) {
        if (hh >= nh) break;
        float lt = l[hh];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) lt += __shfl_xor_sync(0xffffffffu, lt, off);
        if (lane == 0) {
            wm[warp][hh] = m[hh];
            wl[warp][hh] = lt;
        }
#pragma unroll
        for (int j = 0; j < DT / 32; j++) wo[warp][hh][lane + 32 * j] = o[hh][j];
    }
    dec_merge_warps(p, wm, wl, wo, p.vd, nh, h0, t, split);
}

static __global__ void attn_combine_kernel(const float *part, int n_head, int n_split, int vd, float *out,
                                           int64_t out_stride) {
    TELA_PDL_ENTRY();
    const int h = blockIdx.x, t = blockIdx.y;
    const float *pp = part + ((size_t)t * n_head + h) * n_split * (size_t)(vd + 2);
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, pp[(size_t)s * (vd + 2) + vd]);
    for (int d = threadIdx.x; d < vd; d += blockDim.x) {
        float O = 0.0f, L = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float *ps = pp + (size_t)s * (vd + 2);
            if (ps[vd] == -INFINITY) continue;
            const float f = exp2f(ps[vd] - M);
            O += ps[d] * f;
            L += ps[vd + 1] * f;
        }
        out[(size_t)t * out_stride + (size_t)h * vd + d] = O / L;
    }
}

/* Decode, variant 2 (f16 cache, k_dim == v_dim == DT of 64, 128 or 256;
 * the default, measured faster; TELA_CUDA_ATTN=1 the first): G = DT / 8 lanes a key, each lane
 * holding eight dimensions of the key, of the value and of every query
 * head of the group, so a warp reads 32 / G whole key and value rows per
 * step with 16-byte loads (the first variant: a lane a key, a serial loop
 * over the dimensions). Scores are summed within each group of lanes; the
 * running maximum is shared by the warp, each group keeps its own sums
 * and outputs, added up at the end. U steps' loads are issued before
 * they are used. Same splits and combine as the first variant. */
template <int DT, int NH>
static __global__ void __launch_bounds__(DEC_WARPS * 32) attn_decode2_kernel(const dec_params p) {
    TELA_PDL_ENTRY();
    constexpr int G = DT / 8, KPW = 32 / G, U = 4;
    __shared__ float wm[DEC_WARPS][NH], wl[DEC_WARPS][NH];
    __shared__ float wo[DEC_WARPS][NH][DT];
    const int g = blockIdx.x / p.n_sub, sub = blockIdx.x % p.n_sub;
    const int split = blockIdx.y, t = blockIdx.z;
    const int h0 = g * p.group + sub * p.hpb;
    const int nh = min(p.hpb, p.group - sub * p.hpb);
    const int n_kv = p.pos[t] + 1;
    const int k0 = split * p.chunk, k1 = min(k0 + p.chunk, n_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int kg = lane / G, d0 = (lane % G) * 8; /* this lane's key in the step, its dimensions */
    const int32_t *tt = p.tbl ? p.tbl + p.tok_tbl[t] : NULL;

    float q[NH][8];
#pragma unroll
    for (int hh = 0; hh < NH; hh++) {
        const float *qp = p.q + (size_t)t * p.q_stride + (size_t)(h0 + (hh < nh ? hh : 0)) * DT + d0;
        const float4 a = *(const float4 *)qp, b = *(const float4 *)(qp + 4);
        const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 8; i++) q[hh][i] = v[i] * p.qscale;
    }
    const __half *kc = (const __half *)p.k + (size_t)g * p.n_ctx * DT;
    const __half *vc = (const __half *)p.v + (size_t)g * p.n_ctx * DT;
    float m[NH], l[NH], o[NH][8];
#pragma unroll
    for (int hh = 0; hh < NH; hh++) {
        m[hh] = -INFINITY;
        l[hh] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) o[hh][i] = 0.0f;
    }
    /* warp w takes steps w, w + DEC_WARPS, ... of KPW keys each, U at a time */
    for (int base = k0 + warp * KPW; base < k1; base += DEC_WARPS * KPW * U) {
        uint4 kr[U], vr[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int key = kv_row(tt, min(base + u * DEC_WARPS * KPW + kg, k1 - 1), p.shift);
            kr[u] = *(const uint4 *)(kc + (size_t)key * DT + d0);
            vr[u] = *(const uint4 *)(vc + (size_t)key * DT + d0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int step = base + u * DEC_WARPS * KPW;
            if (step >= k1) break;
            const bool valid = step + kg < k1;
            float kf[8], vf[8];
            ld8((const __half *)&kr[u], kf);
            ld8((const __half *)&vr[u], vf);
#pragma unroll
            for (int hh = 0; hh < NH; hh++) {
                if (hh >= nh) break;
                float sc = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++) sc = fmaf(q[hh][i], kf[i], sc);
#pragma unroll
                for (int off = G / 2; off > 0; off >>= 1) sc += __shfl_xor_sync(0xffffffffu, sc, off);
                sc = valid ? sc : -INFINITY;
                float smax = sc;
#pragma unroll
                for (int off = 16; off >= G; off >>= 1) smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, off));
                const float mnew = fmaxf(m[hh], smax); /* finite: the step's first key is valid */
                const float corr = exp2f(m[hh] - mnew), pr = valid ? exp2f(sc - mnew) : 0.0f;
                m[hh] = mnew;
                l[hh] = l[hh] * corr + pr;
#pragma unroll
                for (int i = 0; i < 8; i++) o[hh][i] = fmaf(pr, vf[i], o[hh][i] * corr);
            }
        }
    }
    /* the groups' sums and outputs added up (m is the warp's), then the warps combined */
#pragma unroll
    for (int hh = 0; hh < NH; hh++) {
        if (hh >= nh) break;
        float lt = l[hh];
#pragma unroll
        for (int off = 16; off >= G; off >>= 1) lt += __shfl_xor_sync(0xffffffffu, lt, off);
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int off = 16; off >= G; off >>= 1) o[hh][i] += __shfl_xor_sync(0xffffffffu, o[hh][i], off);
        if (lane == 0) {
            wm[warp][hh] = m[hh];
            wl[warp][hh] = lt;
        }
        if (kg == 0)
#pragma unroll
            for (int i = 0; i < 8; i++) wo[warp][hh][d0 + i] = o[hh][i];
    }
    dec_merge_warps(p, wm, wl, wo, DT, nh, h0, t, split);
    if (p.pq.xq) { /* the block's heads, whole 32-blocks of the product's input */
        __syncthreads();
        preq_block(p.pq, p.out + h0 * DT, h0 * DT, nh * DT, threadIdx.x, blockDim.x);
    }
}

/* Decode, variant 3 (the default for f16 caches of head dimension 64 or
 * 128): the group's query heads (up to 8) as the N side of m16n8k16
 * tensor-core products, so a warp takes 16 keys a step with no per-key
 * shuffles: S^T (16 keys x 8 heads) = K (16 x DT) Q^T, then O^T (DT x 8)
 * += V^T (DT x 16) P^T. A dot product does not care about the order of
 * its terms, so each lane's share of the contraction is chosen to be
 * contiguous in memory: in S^T, lane (gid, tq) supplies keys gid and
 * gid + 8 over the dimensions [tq DT/4, (tq+1) DT/4) (16-byte loads, the
 * query heads' fragments in the same order); in O^T the output dimensions
 * are permuted (row r of m-tile mt is dimension r DT/16 + mt), so each
 * lane's value fragments are two runs of DT/16 contiguous halves of four
 * keys, paired across keys with a byte permute. P^T goes through 768
 * bytes of shared memory a warp (the S^T layout holds heads by lane
 * quarter, P^T's by lane group). The online softmax runs per head
 * column; splits, partials and the combine are those of variant 2. */
static __device__ __forceinline__ uint32_t pair_lo(uint32_t a, uint32_t b, int hi) {
    return __byte_perm(a, b, hi ? 0x7632 : 0x5410);
}

template <int DT>
static __global__ void __launch_bounds__(DEC_WARPS * 32, 3) attn_decode3_kernel(const dec_params p) {
    TELA_PDL_ENTRY();
    constexpr int QW = DT / 4;  /* halves of a key row a lane supplies */
    constexpr int NS = DT / 16; /* 16-wide slabs of the contraction (S^T), m-tiles (O^T) */
    constexpr int VR = DT / 16; /* halves in each of a lane's two runs of a value row */
    constexpr int PS = 24;      /* P^T row stride in halves */
    __shared__ float wm[DEC_WARPS][8], wl[DEC_WARPS][8];
    __shared__ float wo[DEC_WARPS][8][DT];
    __shared__ __align__(16) __half pt[DEC_WARPS][8 * PS];
    const int g = blockIdx.x / p.n_sub, sub = blockIdx.x % p.n_sub;
    const int split = blockIdx.y, t = blockIdx.z;
    const int h0 = g * p.group + sub * p.hpb;
    const int nh = min(p.hpb, p.group - sub * p.hpb);
    const int n_kv = p.pos[t] + 1;
    const int k0 = split * p.chunk, k1 = min(k0 + p.chunk, n_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, gid = lane >> 2, tq = lane & 3;
    const int32_t *tt = p.tbl ? p.tbl + p.tok_tbl[t] : NULL;

    /* Q^T fragments: head gid, dimensions tq QW + 4 ks + {0,1} and {2,3} */
    uint32_t qf[NS][2];
    {
        const bool ok = gid < nh;
        const float *qp = p.q + (size_t)t * p.q_stride + (size_t)(h0 + (ok ? gid : 0)) * DT + tq * QW;
#pragma unroll
        for (int ks = 0; ks < NS; ks++) {
            const float4 v = *(const float4 *)(qp + 4 * ks);
            qf[ks][0] = ok ? pack_half2(v.x * p.qscale, v.y * p.qscale) : 0u;
            qf[ks][1] = ok ? pack_half2(v.z * p.qscale, v.w * p.qscale) : 0u;
        }
    }
    const __half *kc = (const __half *)p.k + (size_t)g * p.n_ctx * DT;
    const __half *vc = (const __half *)p.v + (size_t)g * p.n_ctx * DT;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* heads 2 tq and 2 tq + 1 */
    float o[NS][4];
#pragma unroll
    for (int i = 0; i < NS; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    __half *pw = pt[warp];

    for (int base = k0 + 16 * warp; base < k1; base += 16 * DEC_WARPS) {
        /* keys base + gid and base + 8 + gid: this lane's quarter of each */
        uint32_t ka[QW / 2], kb[QW / 2];
        {
            const int ja = kv_row(tt, min(base + gid, k1 - 1), p.shift);
            const int jb = kv_row(tt, min(base + 8 + gid, k1 - 1), p.shift);
            const uint4 *pa = (const uint4 *)(kc + (size_t)ja * DT + tq * QW);
            const uint4 *pb = (const uint4 *)(kc + (size_t)jb * DT + tq * QW);
#pragma unroll
            for (int i = 0; i < QW / 8; i++) {
                const uint4 x = pa[i], y = pb[i];
                ka[4 * i] = x.x, ka[4 * i + 1] = x.y, ka[4 * i + 2] = x.z, ka[4 * i + 3] = x.w;
                kb[4 * i] = y.x, kb[4 * i + 1] = y.y, kb[4 * i + 2] = y.z, kb[4 * i + 3] = y.w;
            }
        }
        /* keys base + {2tq, 2tq+1, 8+2tq, 9+2tq}: dimensions gid VR.. and (gid + 8) VR.. */
        uint32_t vr[4][2][VR / 2];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int key = base + (j >> 1) * 8 + 2 * tq + (j & 1);
            const __half *vp = vc + (size_t)kv_row(tt, min(key, k1 - 1), p.shift) * DT;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const __half *rp = vp + (gid + 8 * r) * VR;
                if (VR == 8) {
                    const uint4 x = *(const uint4 *)rp;
                    vr[j][r][0] = x.x, vr[j][r][1] = x.y, vr[j][r][VR / 2 > 2 ? 2 : 0] = x.z, vr[j][r][VR / 2 > 3 ? 3 : 0] = x.w;
                } else {
                    const uint2 x = *(const uint2 *)rp;
                    vr[j][r][0] = x.x, vr[j][r][VR / 2 > 1 ? 1 : 0] = x.y;
                }
            }
        }
        /* S^T = K Q^T: c0, c1 key gid (heads 2tq, 2tq+1); c2, c3 key gid + 8 */
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int ks = 0; ks < NS; ks++) {
            const uint32_t a[4] = {ka[2 * ks], kb[2 * ks], ka[2 * ks + 1], kb[2 * ks + 1]};
            mma16816(sc, a, qf[ks][0], qf[ks][1]);
        }
        if (base + gid >= k1) sc[0] = sc[1] = -INFINITY;
        if (base + 8 + gid >= k1) sc[2] = sc[3] = -INFINITY;
        float x0 = fmaxf(sc[0], sc[2]), x1 = fmaxf(sc[1], sc[3]);
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) {
            x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, off));
            x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, off));
        }
        const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1); /* finite: key base is valid */
        const float c0 = exp2f(m0 - n0), c1 = exp2f(m1 - n1);
        m0 = n0, m1 = n1;
        const float p0 = exp2f(sc[0] - n0), p1 = exp2f(sc[1] - n1), p2 = exp2f(sc[2] - n0), p3 = exp2f(sc[3] - n1);
        l0 = l0 * c0 + p0 + p2;
        l1 = l1 * c1 + p1 + p3;
#pragma unroll
        for (int i = 0; i < NS; i++) o[i][0] *= c0, o[i][1] *= c1, o[i][2] *= c0, o[i][3] *= c1;
        /* P^T to the lanes that hold it as the B operand: head gid, keys 2tq.. and 8 + 2tq.. */
        __syncwarp();
        pw[(2 * tq) * PS + gid] = __float2half(p0);
        pw[(2 * tq + 1) * PS + gid] = __float2half(p1);
        pw[(2 * tq) * PS + gid + 8] = __float2half(p2);
        pw[(2 * tq + 1) * PS + gid + 8] = __float2half(p3);
        __syncwarp();
        const uint32_t pb0 = *(const uint32_t *)(pw + gid * PS + 2 * tq), pb1 = *(const uint32_t *)(pw + gid * PS + 8 + 2 * tq);
        /* O^T += V^T P^T: m-tile mt, rows gid and gid + 8 (dimensions gid VR + mt, (gid + 8) VR + mt) */
#pragma unroll
        for (int mt = 0; mt < NS; mt++) {
            const int w = mt / 2, hi = mt & 1;
            const uint32_t a[4] = {pair_lo(vr[0][0][w], vr[1][0][w], hi), pair_lo(vr[0][1][w], vr[1][1][w], hi),
                                   pair_lo(vr[2][0][w], vr[3][0][w], hi), pair_lo(vr[2][1][w], vr[3][1][w], hi)};
            mma16816(o[mt], a, pb0, pb1);
        }
    }
    /* the lanes' sums over their keys, then the warps combined as in variant 2 */
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    if (gid == 0) {
        wm[warp][2 * tq] = m0, wm[warp][2 * tq + 1] = m1;
        wl[warp][2 * tq] = l0, wl[warp][2 * tq + 1] = l1;
    }
#pragma unroll
    for (int mt = 0; mt < NS; mt++) {
        wo[warp][2 * tq][gid * VR + mt] = o[mt][0];
        wo[warp][2 * tq + 1][gid * VR + mt] = o[mt][1];
        wo[warp][2 * tq][(gid + 8) * VR + mt] = o[mt][2];
        wo[warp][2 * tq + 1][(gid + 8) * VR + mt] = o[mt][3];
    }
    dec_merge_warps(p, wm, wl, wo, DT, nh, h0, t, split);
    if (p.pq.xq) { /* the block's heads, whole 32-blocks of the product's input */
        __syncthreads();
        preq_block(p.pq, p.out + h0 * DT, h0 * DT, nh * DT, threadIdx.x, blockDim.x);
    }
}

typedef void (*dec_kernel_fn)(const dec_params);

template <typename KT>
static dec_kernel_fn dec_pick(int dmax, bool vec) {
    if (dmax <= 32) return vec ? attn_decode_kernel<32, KT, true> : attn_decode_kernel<32, KT, false>;
    if (dmax <= 64) return vec ? attn_decode_kernel<64, KT, true> : attn_decode_kernel<64, KT, false>;
    if (dmax <= 128) return vec ? attn_decode_kernel<128, KT, true> : attn_decode_kernel<128, KT, false>;
    if (dmax <= 256) return vec ? attn_decode_kernel<256, KT, true> : attn_decode_kernel<256, KT, false>;
    return NULL;
}

static void attention_decode(cuda_exec *ex, const cuda_kv *kv, int layer, const float *q, int64_t q_stride,
                             float *out, int64_t out_stride, const int32_t *pos, int n_tok, int n_head, float scale,
                             int32_t max_len, const int32_t *tbl, const int32_t *tok_tbl, int shift) {
    const tela_kv_shape *s = &kv->head.shape;
    dec_params p;
    p.q = q;
    p.q_stride = q_stride;
    p.k = (const unsigned char *)kv->k + (size_t)layer * s->n_kv_head * s->n_ctx * s->k_dim * kv->elt;
    p.v = (const unsigned char *)kv->v + (size_t)layer * s->n_kv_head * s->n_ctx * s->v_dim * kv->elt;
    p.n_ctx = s->n_ctx;
    p.kd = s->k_dim;
    p.vd = s->v_dim;
    p.n_head = n_head;
    p.n_kv_head = s->n_kv_head;
    p.group = n_head / s->n_kv_head;
    p.hpb = p.group < DEC_HEADS ? p.group : DEC_HEADS;
    p.n_sub = (p.group + p.hpb - 1) / p.hpb;
    p.pos = pos;
    p.tbl = tbl;
    p.tok_tbl = tok_tbl;
    p.shift = shift;
    p.qscale = scale * LOG2E;
    const int dmax = s->k_dim > s->v_dim ? s->k_dim : s->v_dim;
    const bool vec = s->k_dim % 8 == 0;
    /* variant 1 for f32 caches, other head dimensions and groups over 8 */
    dec_kernel_fn fn = kv->elt == 2 ? dec_pick<__half>(dmax, vec) : dec_pick<float>(dmax, vec);
    bool quantizes = false; /* a kernel that can quantize its output (p.pq) */
    int per_sm = 8; /* blocks an SM that the splits aim at */
    if (ex->attn_variant >= 2 && kv->elt == 2 && s->k_dim == s->v_dim && p.hpb <= 8 && q_stride % 4 == 0 &&
        ((uintptr_t)q & 15) == 0) {
        const int nh4 = p.hpb <= 4;
        if (s->k_dim == 64) fn = nh4 ? attn_decode2_kernel<64, 4> : attn_decode2_kernel<64, 8>;
        else if (s->k_dim == 128) fn = nh4 ? attn_decode2_kernel<128, 4> : attn_decode2_kernel<128, 8>;
        else if (s->k_dim == 256) fn = nh4 ? attn_decode2_kernel<256, 4> : attn_decode2_kernel<256, 8>;
        quantizes = s->k_dim == 64 || s->k_dim == 128 || s->k_dim == 256;
        if (ex->attn_variant == 3 && (s->k_dim == 64 || s->k_dim == 128)) {
            fn = s->k_dim == 64 ? attn_decode3_kernel<64> : attn_decode3_kernel<128>;
            per_sm = s->k_dim == 64 ? 5 : 3; /* 88 and 144 registers a thread */
        }
    }
    if (!fn) {
        tela_cuda_check(ex, cudaErrorNotSupported, "attention: head dimensions above 256");
        return;
    }
    /* splits: eight blocks of four warps per multiprocessor (variant 3:
     * three, what its registers let reside), at least 64 keys a split; none for lengths up to
     * ex->attn_short keys (no partials, no combine kernel: at short contexts
     * the launches and their chain of dependent loads cost more than the
     * keys) */
    const int64_t blocks = (int64_t)s->n_kv_head * p.n_sub * n_tok;
    int64_t n_split = max_len <= ex->attn_short ? 1 : (per_sm * ex->be->sm_count + blocks - 1) / blocks;
    const int64_t most = (max_len + 63) / 64;
    if (n_split > most) n_split = most;
    if (n_split < 1) n_split = 1;
    p.n_split = (int)n_split;
    p.chunk = (int)((max_len + n_split - 1) / n_split);
    p.part = NULL;
    if (n_split > 1) {
        p.part = (float *)tela_cuda_scratch(ex, (size_t)n_tok * n_head * n_split * (size_t)(s->v_dim + 2) * 4);
        if (!p.part) return;
    }
    p.out = out;
    p.out_stride = out_stride;
    p.pq.xq = NULL;
    if (quantizes && n_tok == 1 && n_split == 1) tela_cuda_preq_begin(ex, 1, (int64_t)n_head * s->v_dim, &p.pq);
    dim3 grid((unsigned)(s->n_kv_head * p.n_sub), (unsigned)n_split, (unsigned)n_tok);
    tela_cuda_launch(ex, fn, grid, DEC_WARPS * 32, 0, p);
    if (!tela_cuda_launched(ex, "attention (decode)")) return;
    tela_cuda_preq_done(ex, out, &p.pq);
    if (n_split > 1) {
        tela_cuda_launch(ex, attn_combine_kernel, dim3((unsigned)n_head, (unsigned)n_tok), 128, 0,
            p.part, n_head, (int)n_split, s->v_dim, out, out_stride);
        tela_cuda_launched(ex, "attention (combine)");
    }
}

/* ------------------------------------------------------- prefill (flash) */

struct fa_params {
    const float *q;
    int64_t q_stride;
    const __half *k, *v;         /* the layer's cache */
    int n_ctx, n_tok, group;
    const int32_t *pos;
    const int32_t *tbl;          /* NULL, or the (one) sequence's block table of a paged cache */
    int shift;
    float qscale;
    float *out;
    int64_t out_stride;
};

#define FA_ROWS 64
#define FA_KEYS 64

template <int D>
static __global__ void __launch_bounds__(128) attn_flash_kernel(const fa_params p) {
    TELA_PDL_ENTRY();
    extern __shared__ __align__(16) unsigned char fa_smem[];
    const int QS = D + 8, VS = FA_KEYS + 8;
    __half *Qs = (__half *)fa_smem;
    __half *Ks = Qs + FA_ROWS * QS;
    __half *Vt = Ks + FA_KEYS * QS;
    const int h = blockIdx.y, g = h / p.group;
    const int r0 = blockIdx.x * FA_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, gid = lane >> 2, tq = lane & 3;
    const int last_row = min(r0 + FA_ROWS, p.n_tok) - 1;
    const int n_keys = p.pos[last_row] + 1;

    for (int i = threadIdx.x; i < FA_ROWS * D; i += blockDim.x) {
        const int r = i / D, d = i % D;
        const float v = r0 + r < p.n_tok ? p.q[(size_t)(r0 + r) * p.q_stride + (size_t)h * D + d] * p.qscale : 0.0f;
        Qs[r * QS + d] = __float2half(v);
    }
    const int ra = r0 + 16 * warp + gid, rb = ra + 8;
    const int qpa = ra < p.n_tok ? p.pos[ra] : -1, qpb = rb < p.n_tok ? p.pos[rb] : -1;

    float oacc[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) oacc[j][0] = oacc[j][1] = oacc[j][2] = oacc[j][3] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;
    const __half *kc = p.k + (size_t)g * p.n_ctx * D, *vc = p.v + (size_t)g * p.n_ctx * D;

    for (int kt = 0; kt < n_keys; kt += FA_KEYS) {
        __syncthreads(); /* the previous tile is no longer read (and Qs is written, the first time) */
        for (int i = threadIdx.x; i < FA_KEYS * D / 8; i += blockDim.x) {
            const int r = i / (D / 8), c = (i % (D / 8)) * 8;
            uint4 kv4 = make_uint4(0, 0, 0, 0), vv4 = make_uint4(0, 0, 0, 0);
            if (kt + r < n_keys) {
                const size_t row = (size_t)kv_row(p.tbl, kt + r, p.shift);
                kv4 = *(const uint4 *)(kc + row * D + c);
                vv4 = *(const uint4 *)(vc + row * D + c);
            }
            *(uint4 *)(Ks + r * QS + c) = kv4;
            const __half *vh = (const __half *)&vv4;
#pragma unroll
            for (int j = 0; j < 8; j++) Vt[(c + j) * VS + r] = vh[j];
        }
        __syncthreads();
        /* S = Q K^T for this warp's 16 rows and 64 keys */
        float sacc[FA_KEYS / 8][4];
#pragma unroll
        for (int n = 0; n < FA_KEYS / 8; n++) sacc[n][0] = sacc[n][1] = sacc[n][2] = sacc[n][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            const __half *qa = Qs + (16 * warp + gid) * QS + 16 * ks + 2 * tq;
            uint32_t a[4];
            a[0] = *(const uint32_t *)qa;
            a[1] = *(const uint32_t *)(qa + 8 * QS);
            a[2] = *(const uint32_t *)(qa + 8);
            a[3] = *(const uint32_t *)(qa + 8 * QS + 8);
#pragma unroll
            for (int n = 0; n < FA_KEYS / 8; n++) {
                const __half *kb = Ks + (8 * n + gid) * QS + 16 * ks + 2 * tq;
                mma16816(sacc[n], a, *(const uint32_t *)kb, *(const uint32_t *)(kb + 8));
            }
        }
        /* causal mask and online softmax (rows ra: regs 0,1; rb: regs 2,3) */
        float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
        for (int n = 0; n < FA_KEYS / 8; n++) {
            const int key = kt + 8 * n + 2 * tq;
            if (key > qpa) sacc[n][0] = -INFINITY;
            if (key + 1 > qpa) sacc[n][1] = -INFINITY;
            if (key > qpb) sacc[n][2] = -INFINITY;
            if (key + 1 > qpb) sacc[n][3] = -INFINITY;
            mxa = fmaxf(mxa, fmaxf(sacc[n][0], sacc[n][1]));
            mxb = fmaxf(mxb, fmaxf(sacc[n][2], sacc[n][3]));
        }
        mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 1));
        mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 2));
        mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 1));
        mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 2));
        const float na = fmaxf(ma, mxa), nb = fmaxf(mb, mxb);
        const float ba = na == -INFINITY ? 0.0f : na, bb = nb == -INFINITY ? 0.0f : nb;
        const float ca = exp2f(ma - ba), cb = exp2f(mb - bb);
        ma = na;
        mb = nb;
        float sa = 0.0f, sb = 0.0f;
#pragma unroll
        for (int n = 0; n < FA_KEYS / 8; n++) {
            sacc[n][0] = exp2f(sacc[n][0] - ba);
            sacc[n][1] = exp2f(sacc[n][1] - ba);
            sacc[n][2] = exp2f(sacc[n][2] - bb);
            sacc[n][3] = exp2f(sacc[n][3] - bb);
            sa += sacc[n][0] + sacc[n][1];
            sb += sacc[n][2] + sacc[n][3];
        }
        la = la * ca + sa;
        lb = lb * cb + sb;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            oacc[j][0] *= ca;
            oacc[j][1] *= ca;
            oacc[j][2] *= cb;
            oacc[j][3] *= cb;
        }
        /* O += P V */
#pragma unroll
        for (int kk = 0; kk < FA_KEYS / 16; kk++) {
            uint32_t a[4];
            a[0] = pack_half2(sacc[2 * kk][0], sacc[2 * kk][1]);
            a[1] = pack_half2(sacc[2 * kk][2], sacc[2 * kk][3]);
            a[2] = pack_half2(sacc[2 * kk + 1][0], sacc[2 * kk + 1][1]);
            a[3] = pack_half2(sacc[2 * kk + 1][2], sacc[2 * kk + 1][3]);
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                const __half *vb = Vt + (8 * j + gid) * VS + 16 * kk + 2 * tq;
                mma16816(oacc[j], a, *(const uint32_t *)vb, *(const uint32_t *)(vb + 8));
            }
        }
    }
    la += __shfl_xor_sync(0xffffffffu, la, 1);
    la += __shfl_xor_sync(0xffffffffu, la, 2);
    lb += __shfl_xor_sync(0xffffffffu, lb, 1);
    lb += __shfl_xor_sync(0xffffffffu, lb, 2);
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        const int d = 8 * j + 2 * tq;
        if (ra < p.n_tok) {
            float *o = p.out + (size_t)ra * p.out_stride + (size_t)h * D + d;
            o[0] = oacc[j][0] / la;
            o[1] = oacc[j][1] / la;
        }
        if (rb < p.n_tok) {
            float *o = p.out + (size_t)rb * p.out_stride + (size_t)h * D + d;
            o[0] = oacc[j][2] / lb;
            o[1] = oacc[j][3] / lb;
        }
    }
}

static size_t fa_smem_bytes(int D) { return (size_t)(2 * FA_ROWS * (D + 8) + D * (FA_KEYS + 8)) * sizeof(__half); }

template <int D>
static void launch_flash(cuda_exec *ex, const fa_params &p, int n_head) {
    const size_t smem = fa_smem_bytes(D);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute((const void *)attn_flash_kernel<D>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (!tela_cuda_check(ex, e, "attention (flash): shared memory")) return;
    }
    dim3 grid((unsigned)((p.n_tok + FA_ROWS - 1) / FA_ROWS), (unsigned)n_head);
    tela_cuda_launch(ex, attn_flash_kernel<D>, grid, 128, smem, p);
    tela_cuda_launched(ex, "attention (flash)");
}

static bool use_flash(const cuda_exec *ex, const cuda_kv *kv, int n_tok) {
    const tela_kv_shape *s = &kv->head.shape;
    const int D = s->k_dim;
    return n_tok > TELA_CUDA_GEMV_MAX_TOK && kv->elt == 2 && s->k_dim == s->v_dim && (D == 64 || D == 128 || D == 256) &&
           fa_smem_bytes(D) <= ex->be->smem_optin;
}

static void attention_flash(cuda_exec *ex, const cuda_kv *kv, int layer, const float *q, int64_t q_stride, float *out,
                            int64_t out_stride, const int32_t *pos, int n_tok, int n_head, float scale,
                            const int32_t *tbl, int shift) {
    const tela_kv_shape *s = &kv->head.shape;
    const int D = s->k_dim;
    fa_params p;
    p.q = q;
    p.q_stride = q_stride;
    p.k = (const __half *)kv->k + (size_t)layer * s->n_kv_head * s->n_ctx * D;
    p.v = (const __half *)kv->v + (size_t)layer * s->n_kv_head * s->n_ctx * D;
    p.n_ctx = s->n_ctx;
    p.n_tok = n_tok;
    p.group = n_head / s->n_kv_head;
    p.pos = pos;
    p.tbl = tbl;
    p.shift = shift;
    p.qscale = scale * LOG2E;
    p.out = out;
    p.out_stride = out_stride;
    if (D == 64) launch_flash<64>(ex, p, n_head);
    else if (D == 128) launch_flash<128>(ex, p, n_head);
    else launch_flash<256>(ex, p, n_head);
}

/* A batched step over a paged cache: flash attention for each sequence
 * with more than a few tokens (its rows read one block table), the decode
 * kernels for each run of the others (a table per token). */
static void attention_paged(cuda_exec *ex, const cuda_kv *kv, int layer, const float *q, int64_t q_stride, float *out,
                            int64_t out_stride, const int32_t *pos, int n_head, float scale, const cuda_paging *pg) {
    for (int i = 0; i < pg->n_seq;) {
        const tela_batch_seq *sq = &pg->seqs[i];
        const size_t t0 = (size_t)sq->tok0;
        if (sq->n_tok <= 0) {
            i++;
            continue;
        }
        if (use_flash(ex, kv, sq->n_tok)) {
            attention_flash(ex, kv, layer, q + t0 * q_stride, q_stride, out + t0 * out_stride, out_stride, pos + t0,
                            sq->n_tok, n_head, scale, pg->flat + pg->seq_tbl[i], pg->shift);
            i++;
            continue;
        }
        int j = i, n = 0;
        int32_t longest = 0;
        for (; j < pg->n_seq && !use_flash(ex, kv, pg->seqs[j].n_tok); j++) {
            n += pg->seqs[j].n_tok;
            if (pg->seqs[j].pos0 + pg->seqs[j].n_tok > longest) longest = pg->seqs[j].pos0 + pg->seqs[j].n_tok;
        }
        if (n > 0)
            attention_decode(ex, kv, layer, q + t0 * q_stride, q_stride, out + t0 * out_stride, out_stride, pos + t0, n,
                             n_head, scale, longest, pg->flat, pg->tok_tbl + t0, pg->shift);
        i = j;
    }
}

void tela_cuda_attention(cuda_exec *ex, const cuda_kv *kv, int layer, const float *q, int64_t q_stride, float *out,
                         int64_t out_stride, const int32_t *pos, int n_tok, int32_t pos0, int n_head, float scale,
                         int32_t bucket_len, const cuda_paging *pg) {
    if (pg) {
        attention_paged(ex, kv, layer, q, q_stride, out, out_stride, pos, n_head, scale, pg);
        return;
    }
    if (!use_flash(ex, kv, n_tok)) {
        /* steps that may be captured (TELA_GRAPH_MAX_TOK) are sized by their
         * length bucket, so the graph serves the whole bucket */
        attention_decode(ex, kv, layer, q, q_stride, out, out_stride, pos, n_tok, n_head, scale,
                         n_tok <= TELA_GRAPH_MAX_TOK ? bucket_len : pos0 + n_tok, NULL, NULL, 0);
        return;
    }
    attention_flash(ex, kv, layer, q, q_stride, out, out_stride, pos, n_tok, n_head, scale, NULL, 0);
}
