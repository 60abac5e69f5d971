/* qwen35.c: the Qwen3.5 hybrid architecture (dense text models; GGUF
 * "qwen35", Hugging Face Qwen3_5ForCausalLM and the text part of
 * Qwen3_5ForConditionalGeneration): loading, the session state (a KV cache
 * for the attention layers, a conv state and a recurrent state for the Gated
 * DeltaNet layers) and the forward pass.
 *
 * What is computed (transformers' modeling_qwen3_5.py, checked against
 * llama.cpp's converter output), per token x (n_embd floats):
 *
 *   layers follow layer_types (HF) or full_attention_interval (GGUF,
 *   default 4): layer l is full attention when (l + 1) % interval == 0,
 *   else Gated DeltaNet ("linear attention"). Each layer is
 *       x = x + mixer(rmsnorm(x) * attn_norm)
 *       x = x + Wdown (silu(Wgate h) * Wup h),   h = rmsnorm(x) * post_attention_norm
 *   and logits = Woutput (rmsnorm(x) * output_norm), Woutput = the token
 *   embedding when tied (the small models).
 *
 *   RMSNorm: x / sqrt(mean(x^2) + eps) * w. HF stores the norm weights as
 *   (w - 1) and multiplies by (1 + w): we add 1 when loading HF tensors;
 *   llama.cpp's converter has already added it. This holds for the layer
 *   norms, the final norm and the attention q/k norms, NOT for the GDN output
 *   norm (linear_attn.norm / ssm_norm), a plain weight in both sources.
 *
 * Gated DeltaNet layer (nk key heads and nv value heads, dims dk and dv,
 * conv kernel K = 4), for a run of tokens:
 *   1. qkv = W_qkv h  (rows: q (nk*dk) | k (nk*dk) | v (nv*dv));
 *      z = W_z h (nv*dv); b = W_beta h (nv); a = W_alpha h (nv).
 *   2. qkv = silu(causal depthwise conv1d(qkv)) per channel, kernel K, using
 *      the K-1 previous inputs of the channel (the conv state; zeros at the
 *      start of the sequence).
 *   3. q and k heads L2-normalized: x / sqrt(sum(x^2) + 1e-6).
 *   4. beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias) per value
 *      head (GGUF stores ssm_a = -exp(A_log) and ssm_dt.bias = dt_bias).
 *   5. per value head v_h with its key head (q_kh, k_kh), state S (dk x dv):
 *          S = exp(g) S;  delta = beta (v - S^T k);  S = S + k delta^T;
 *          o = S^T q / sqrt(dk)
 *      computed in chunks of 64 tokens for a prefill and step by step for a
 *      decode (backend/cpu/gdn.c; both forms give the same result).
 *   6. o = rmsnorm(o) * ssm_norm * silu(z) per value head (eps = rms eps);
 *      out = W_out o.
 *   Key heads fewer than value heads: in HF each key head serves nv/nk
 *   consecutive value heads (value head j uses key head j / (nv/nk)).
 *   llama.cpp's converter reorders the value heads (rows of the v part of
 *   W_qkv, of W_z, W_beta, W_alpha, A, dt_bias, the v channels of the conv,
 *   columns of W_out) into a tiled order, so in a GGUF value head j uses key
 *   head j % nk. Both orders compute the same function; we keep the weights
 *   as stored and pick the mapping per source.
 *
 * Gated full-attention layer (n_head query heads, n_kv_head KV heads,
 * head_dim hd, GQA: query head j reads KV head j / (n_head / n_kv_head)):
 *   1. W_q h gives, per head, hd query values then hd gate values
 *      ([q_0 | g_0 | q_1 | g_1 ...]); k = W_k h, v = W_v h.
 *   2. q and k: RMSNorm per head (q_norm, k_norm weights, +1 convention).
 *   3. RoPE on the first n_rot = partial_rotary_factor * hd dims (0.25) in
 *      rotate-half ("neox") pairs (x[i], x[i + n_rot/2]), angle
 *      p * base^(-2i/n_rot). The model's multi-section RoPE (mrope_section,
 *      interleaved) gives each section its own position (temporal, height,
 *      width); for text all three are the token's position, so it reduces to
 *      this plain RoPE. The remaining hd - n_rot dims pass unrotated.
 *   4. a = softmax(q k^T / sqrt(hd), causal) v; a = a * sigmoid(gate);
 *      out = W_o a.
 *
 * Multi-token prediction ("nextn", "mtp.*" in HF): an extra full-attention
 * block for speculative decoding, loaded when params.load_mtp is set (else
 * ignored); GGUF counts it in block_count and says how many in
 * nextn_predict_layers. As vLLM runs Qwen3.5's MTP: for position i, from
 * the final hidden state h_i (after the output norm) and the token x_{i+1}
 *     u = W_eh [rmsnorm(embed(x_{i+1})) * enorm ; rmsnorm(h_i) * hnorm]
 *     u = the block's decoder layer (gated attention with its own KV cache,
 *         RoPE position i; SwiGLU MLP)
 *     g_i = rmsnorm(u) * shared_head_norm,  logits = W_output g_i
 * guess x_{i+2}. A state with MTP runs the block over every position as
 * the forward passes go, one position behind (the token after the last
 * position is not known yet), so its KV cache is always filled; a draft
 * step (mtp_draft) then runs it at the last position with the pending
 * token, and chained steps from its own output g with the drafted token at
 * the positions after.
 *
 * Tensor parallelism (tela_model_params.tensor_parallel = N, issue 16,
 * docs/MULTI-GPU.md), as in llama.c: each layer split over N ranks by
 * model/shard.c's plan. Rank r holds its query heads with their gates and
 * its KV heads (a copy of one with more ranks than KV heads) and the
 * columns of wo they feed; 1/N of the FFN; nk/N of the DeltaNet's key
 * heads with the value heads that use them (rows of the q, k and v parts
 * of W_qkv and of the conv, of W_z, W_beta, W_alpha, A and dt_bias;
 * columns of W_out); the output head's rows of the vocabulary. Each rank
 * runs its heads' conv and delta rule on its own part of the layer's conv
 * and recurrent states, which lie rank after rank in the layer's state
 * (and so in a slot's image); the products through wo, W_out and down give
 * partial sums, added up (the all-reduce) before the residual add. The
 * token embedding is split by vocabulary like the head; norms are whole.
 * The MTP block's layer is split the same way (a KV cache a rank; eh_proj
 * whole), and its drafts use the head's parts.
 *
 * Session state: per attention layer f32 K and V rows for every position;
 * per GDN layer the conv state ((K-1) x conv_dim floats) and the recurrent
 * state (nv x dk x dv floats). A snapshot is the K/V rows [0, n_past) plus
 * all conv and recurrent states: its size does not grow with the GDN layers'
 * history, which is what makes hybrid models cheap to snapshot. */
#include "backend/cpu/gdn.h" /* TELA_GDN_CHUNK */
#include "model/model.h"
#include "model/shard.h"
#include "util/error.h"
#include "util/fp16.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QWEN35_L2_EPS 1e-6f

typedef struct qwen35_attn {
    tela_mat wq, wk, wv, wo;     /* wq: n_head * 2 * head_dim rows (query and gate per head) */
    float *q_norm, *k_norm;      /* [head_dim] */
    const float *q_norm_b, *k_norm_b;
} qwen35_attn;

typedef struct qwen35_gdn {
    tela_mat w_qkv, w_z, w_beta, w_alpha, w_out;
    float *conv_w;               /* [conv_dim][conv_k] */
    float *ssm_a;                /* [nv]: -exp(A_log) */
    float *dt_bias;              /* [nv] */
    float *norm;                 /* [dv] */
    const float *conv_w_b, *ssm_a_b, *dt_bias_b, *norm_b;
} qwen35_gdn;

typedef struct qwen35_layer {
    bool is_attn;
    int slot;                    /* index among the attention (or among the GDN) layers */
    float *attn_norm, *post_norm;
    const float *attn_norm_b;
    tela_model_ffn ffn;          /* ffn.norm: the backend's copy of post_norm */
    qwen35_attn attn;
    qwen35_gdn gdn;
} qwen35_layer;

/* A multi-token-prediction block: a full-attention layer fed with
 * eh_proj [rmsnorm(embedding) * enorm ; rmsnorm(hidden) * hnorm]. */
typedef struct qwen35_mtp {
    qwen35_layer *layers;        /* [world]: the block's layer as each rank holds it (slot: its layer in the
                                  * MTP KV cache) */
    tela_mat eh_proj;            /* n_embd rows of 2 * n_embd */
    tela_mat *eh_projs;          /* each exec's: [world] copies with a rank per device, else &eh_proj */
    float *enorm, *hnorm, *out_norm;
    const float **enorm_b, **hnorm_b, **out_norm_b; /* [world], as the model's output_norm_b */
} qwen35_mtp;

typedef struct qwen35_model {
    int n_vocab, n_embd, n_layer, n_ff;
    int n_head, n_kv_head, head_dim, n_rot;
    float eps;
    double *inv_freq;            /* [n_rot / 2] */
    const double **inv_freq_b;   /* [world]: each rank's copy (one copy for all at one device) */
    int conv_k, nk, nv, dk, dv;  /* Gated DeltaNet shapes */
    bool v_tiled;                /* value head j uses key head j % nk (GGUF) instead of j / (nv / nk) */
    int n_attn, n_gdn;           /* layers of each kind */
    tela_mat tok_embd, output;
    tela_mat *heads;             /* the output head as the ranks hold it: world row ranges of the vocabulary
                                  * (&output without tensor parallelism) */
    tela_mat *embd;              /* the token embedding the same way (&tok_embd without) */
    float *output_norm;
    const float **output_norm_b; /* [world], as inv_freq_b */
    qwen35_layer *layers;        /* rank 0's (the whole layers without tensor parallelism) */
    int world;                   /* ranks each layer is split across (1: none) */
    qwen35_layer **rank_layers;  /* [world]: rank r's parts of the layers; [0] == layers */
    int r_head, r_kv_head, r_ff, r_nk, r_nv; /* a rank's query, KV, key and value heads, FFN width */
    const bool *skip;            /* [n_layer] layers bypassed, or NULL */
    int n_mtp;                   /* MTP blocks in the source */
    qwen35_mtp *mtp;             /* loaded ones (NULL unless load_mtp) */
    /* the head the MTP block drafts with, as the ranks hold it: the output
     * head (heads), or the first mtp_vocab rows of the vocabulary
     * (params.mtp_draft_vocab; drafts never fall outside): of each rank's
     * part the rows among them (none for a part past them) */
    tela_mat *mtp_heads;
    int32_t mtp_vocab;
} qwen35_model;

_Static_assert(TELA_MODEL_STEP_ALIGN % TELA_GDN_CHUNK == 0, "batched steps must cut prompts at GDN chunk borders");

static const char *const qwen35_hf_types[] = {"qwen3_5_text", "qwen3_5", NULL};

static int64_t conv_dim(const qwen35_model *Q) { return 2 * (int64_t)Q->nk * Q->dk + (int64_t)Q->nv * Q->dv; }
static int64_t value_dim(const qwen35_model *Q) { return (int64_t)Q->nv * Q->dv; }
static int64_t kv_dim(const qwen35_model *Q) { return (int64_t)Q->n_kv_head * Q->head_dim; }
/* the same for one rank's part of a layer (the whole layer at one rank) */
static int64_t r_conv_dim(const qwen35_model *Q) { return 2 * (int64_t)Q->r_nk * Q->dk + (int64_t)Q->r_nv * Q->dv; }
static int64_t r_value_dim(const qwen35_model *Q) { return (int64_t)Q->r_nv * Q->dv; }
static int64_t r_kv_dim(const qwen35_model *Q) { return (int64_t)Q->r_kv_head * Q->head_dim; }

/* --------------------------------------------------------------- names */

/* Tensor naming of the two sources. Layer tensors are "<layer prefix><suffix>"
 * where the prefix is "blk.N." (GGUF) or "<model prefix>layers.N." (HF). */
typedef struct qwen35_names {
    bool hf;
    const char *prefix;          /* HF: "model." or "model.language_model." */
    const char *tok_embd, *output_norm, *output;
    const char *attn_norm, *post_norm, *w_gate, *w_up, *w_down;
    const char *wq, *wk, *wv, *wo, *q_norm, *k_norm;
    const char *w_qkv, *w_z, *w_beta, *w_alpha, *w_out, *conv, *ssm_a, *dt_bias, *ssm_norm;
} qwen35_names;

static const qwen35_names gguf_names = {
    false, "",
    "token_embd.weight", "output_norm.weight", "output.weight",
    "attn_norm.weight", "post_attention_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
    "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "attn_q_norm.weight",
    "attn_k_norm.weight",
    "attn_qkv.weight", "attn_gate.weight", "ssm_beta.weight", "ssm_alpha.weight", "ssm_out.weight",
    "ssm_conv1d.weight", "ssm_a", "ssm_dt.bias", "ssm_norm.weight",
};

static const qwen35_names hf_names = {
    true, "model.",
    "embed_tokens.weight", "norm.weight", "lm_head.weight",
    "input_layernorm.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight", "linear_attn.in_proj_b.weight",
    "linear_attn.in_proj_a.weight", "linear_attn.out_proj.weight", "linear_attn.conv1d.weight",
    "linear_attn.A_log", "linear_attn.dt_bias", "linear_attn.norm.weight",
};

/* Where a layer's tensors live: "blk.N." or "model.layers.N." or, for the HF
 * MTP block, "mtp.layers.N.". */
typedef struct layer_loc {
    const qwen35_names *nm;
    char prefix[96];
} layer_loc;

static void loc_layer(layer_loc *loc, const qwen35_names *nm, int l) {
    loc->nm = nm;
    if (nm->hf)
        snprintf(loc->prefix, sizeof loc->prefix, "%slayers.%d.", nm->prefix, l);
    else
        snprintf(loc->prefix, sizeof loc->prefix, "blk.%d.", l);
}

static const char *loc_name(const layer_loc *loc, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s", loc->prefix, suffix);
    return buf;
}

/* ---------------------------------------------------------------- load */

static tela_shard_dims shard_dims(const qwen35_model *Q) {
    const bool gdn = Q->n_gdn > 0;
    return (tela_shard_dims){.n_embd = Q->n_embd, .n_ff = Q->n_ff, .n_vocab = Q->n_vocab, .n_head = Q->n_head,
                             .n_kv_head = Q->n_kv_head, .head_dim = Q->head_dim, .q_gate = 1,
                             .gdn_nk = gdn ? Q->nk : 0, .gdn_nv = gdn ? Q->nv : 0, .gdn_dk = gdn ? Q->dk : 0,
                             .gdn_dv = gdn ? Q->dv : 0, .gdn_tiled = Q->v_tiled};
}

/* Rank r's part of a matrix of this role (the whole matrix, as stored, at
 * one rank; TELA_ROLE_REPLICATED: whole on every rank). */
static tela_status get_mat(tela_model *m, const qwen35_model *Q, const layer_loc *loc, const char *suffix,
                           tela_shard_role role, int r, int64_t rows, int64_t cols, tela_mat *out) {
    char name[160];
    const tela_shard_dims d = shard_dims(Q);
    tela_shard sh;
    tela_shard_of(&d, role, r, Q->world, &sh);
    return tela_model_get_mat_shard(m, loc_name(loc, suffix, name, sizeof name), rows, cols, &sh, out);
}

/* Rank r's rows of a float table of n rows of `width` (the table itself
 * at one rank). */
static tela_status rank_rows(tela_model *m, const qwen35_model *Q, tela_shard_role role, int r, float *whole, int64_t n,
                             int64_t width, float **out) {
    const tela_shard_dims d = shard_dims(Q);
    tela_shard sh;
    tela_shard_of(&d, role, r, Q->world, &sh);
    *out = whole;
    if (sh.axis == TELA_SHARD_WHOLE) return TELA_OK;
    float *part = tela_model_alloc(m, tela_shard_bytes(&sh, TELA_TYPE_F32, n, width));
    if (!part) return TELA_ERR_NOMEM;
    TELA_TRY(tela_shard_extract(&sh, TELA_TYPE_F32, n, width, whole, part));
    *out = part;
    return TELA_OK;
}

/* A norm weight as f32; HF's are stored as (w - 1). */
static tela_status get_norm(tela_model *m, const layer_loc *loc, const char *suffix, int64_t n, bool plus_one,
                            float **out) {
    char name[160];
    TELA_TRY(tela_model_get_vec(m, loc_name(loc, suffix, name, sizeof name), n, false, out));
    if (plus_one)
        for (int64_t i = 0; i < n; i++) (*out)[i] += 1.0f;
    return TELA_OK;
}

/* The conv1d weight as f32 [channels][kernel]: GGUF ssm_conv1d has
 * ne = {K, C}; HF conv1d.weight [C, 1, K] reads as ne = {K, 1, C}. */
static tela_status get_conv(tela_model *m, const layer_loc *loc, const qwen35_model *Q, float **out) {
    char name[160];
    loc_name(loc, loc->nm->conv, name, sizeof name);
    const tela_tensor *t = tela_model_find_tensor(m, name);
    const int64_t C = conv_dim(Q), K = Q->conv_k;
    if (!t) return tela_errorf(TELA_ERR_NOT_FOUND, "%s: tensor '%s' (shape [%lld, %lld]) is missing", m->path, name,
                               (long long)K, (long long)C);
    bool ok = t->ne[0] == K && tela_tensor_nelements(t) == C * K &&
              ((t->n_dims == 2 && t->ne[1] == C) || (t->n_dims == 3 && t->ne[1] == 1 && t->ne[2] == C));
    if (!ok)
        return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld]",
                           m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                           (long long)K, (long long)C);
    size_t esz = t->type == TELA_TYPE_F32 ? 4 : (t->type == TELA_TYPE_F16 || t->type == TELA_TYPE_BF16) ? 2 : 0;
    if (!esz)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, expected f32, f16 or bf16", m->path,
                           name, tela_type_name(t->type) ? tela_type_name(t->type) : "unknown");
    if (!t->data || t->nbytes != (size_t)(C * K) * esz)
        return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s': %zu bytes of data for %lld elements", m->path, name,
                           t->nbytes, (long long)(C * K));
    float *w = tela_model_alloc(m, (size_t)(C * K) * sizeof(float));
    if (!w) return TELA_ERR_NOMEM;
    const unsigned char *src = t->data;
    for (int64_t i = 0; i < C * K; i++) {
        if (t->type == TELA_TYPE_F32) {
            memcpy(&w[i], src + i * 4, 4);
        } else {
            uint16_t h;
            memcpy(&h, src + i * 2, 2);
            w[i] = t->type == TELA_TYPE_F16 ? tela_f16_to_f32(h) : tela_bf16_to_f32(h);
        }
    }
    *out = w;
    return TELA_OK;
}

/* Rank r's part of a gated attention block (the whole block at one rank). */
static tela_status load_attn(tela_model *m, const qwen35_model *Q, const layer_loc *loc, int r, qwen35_attn *a) {
    const qwen35_names *nm = loc->nm;
    const int64_t E = Q->n_embd, hd = Q->head_dim;
    TELA_TRY(get_mat(m, Q, loc, nm->wq, TELA_ROLE_WQ, r, (int64_t)Q->n_head * hd * 2, E, &a->wq));
    TELA_TRY(get_mat(m, Q, loc, nm->wk, TELA_ROLE_WK, r, kv_dim(Q), E, &a->wk));
    TELA_TRY(get_mat(m, Q, loc, nm->wv, TELA_ROLE_WV, r, kv_dim(Q), E, &a->wv));
    TELA_TRY(get_mat(m, Q, loc, nm->wo, TELA_ROLE_WO, r, E, (int64_t)Q->n_head * hd, &a->wo));
    TELA_TRY(get_norm(m, loc, nm->q_norm, hd, nm->hf, &a->q_norm));
    TELA_TRY(get_norm(m, loc, nm->k_norm, hd, nm->hf, &a->k_norm));
    return TELA_OK;
}

/* Rank r's part of a Gated DeltaNet block (the whole block at one rank):
 * its key heads' rows and the value heads that use them. */
static tela_status load_gdn(tela_model *m, const qwen35_model *Q, const layer_loc *loc, int r, qwen35_gdn *g) {
    const qwen35_names *nm = loc->nm;
    const int64_t E = Q->n_embd;
    TELA_TRY(get_mat(m, Q, loc, nm->w_qkv, TELA_ROLE_GDN_QKV, r, conv_dim(Q), E, &g->w_qkv));
    TELA_TRY(get_mat(m, Q, loc, nm->w_z, TELA_ROLE_GDN_Z, r, value_dim(Q), E, &g->w_z));
    TELA_TRY(get_mat(m, Q, loc, nm->w_beta, TELA_ROLE_GDN_HEAD, r, Q->nv, E, &g->w_beta));
    TELA_TRY(get_mat(m, Q, loc, nm->w_alpha, TELA_ROLE_GDN_HEAD, r, Q->nv, E, &g->w_alpha));
    TELA_TRY(get_mat(m, Q, loc, nm->w_out, TELA_ROLE_GDN_OUT, r, E, value_dim(Q), &g->w_out));
    float *conv_w = NULL, *ssm_a = NULL, *dt_bias = NULL;
    TELA_TRY(get_conv(m, loc, Q, &conv_w));
    TELA_TRY(get_norm(m, loc, nm->ssm_a, Q->nv, false, &ssm_a));
    TELA_TRY(get_norm(m, loc, nm->dt_bias, Q->nv, false, &dt_bias));
    TELA_TRY(get_norm(m, loc, nm->ssm_norm, Q->dv, false, &g->norm));
    char name[160];
    for (int h = 0; h < Q->nv; h++) {
        if (nm->hf) ssm_a[h] = -expf(ssm_a[h]); /* A_log -> A */
        if (!isfinite(ssm_a[h]) || ssm_a[h] > 0.0f)
            return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s': decay rate %g of value head %d is not <= 0",
                               m->path, loc_name(loc, nm->ssm_a, name, sizeof name), (double)ssm_a[h], h);
    }
    TELA_TRY(rank_rows(m, Q, TELA_ROLE_GDN_CONV, r, conv_w, conv_dim(Q), Q->conv_k, &g->conv_w));
    TELA_TRY(rank_rows(m, Q, TELA_ROLE_GDN_HEAD, r, ssm_a, Q->nv, 1, &g->ssm_a));
    return rank_rows(m, Q, TELA_ROLE_GDN_HEAD, r, dt_bias, Q->nv, 1, &g->dt_bias);
}

/* The layer norms, the mixer and the MLP of a decoder layer: rank r's
 * part (the whole layer at one rank; norms are whole on every rank). */
static tela_status load_layer(tela_model *m, const qwen35_model *Q, const layer_loc *loc, int r, qwen35_layer *ly) {
    const qwen35_names *nm = loc->nm;
    TELA_TRY(get_norm(m, loc, nm->attn_norm, Q->n_embd, nm->hf, &ly->attn_norm));
    TELA_TRY(get_norm(m, loc, nm->post_norm, Q->n_embd, nm->hf, &ly->post_norm));
    TELA_TRY(get_mat(m, Q, loc, nm->w_gate, TELA_ROLE_FFN_GATE, r, Q->n_ff, Q->n_embd, &ly->ffn.w_gate));
    TELA_TRY(get_mat(m, Q, loc, nm->w_up, TELA_ROLE_FFN_UP, r, Q->n_ff, Q->n_embd, &ly->ffn.w_up));
    TELA_TRY(get_mat(m, Q, loc, nm->w_down, TELA_ROLE_FFN_DOWN, r, Q->n_embd, Q->n_ff, &ly->ffn.w_down));
    TELA_TRY(tela_model_const(m, ly->post_norm, (size_t)Q->n_embd * sizeof(float), (const void **)&ly->ffn.norm));
    if (ly->is_attn) return load_attn(m, Q, loc, r, &ly->attn);
    return load_gdn(m, Q, loc, r, &ly->gdn);
}

static tela_status check_hparams(const tela_model *m, const qwen35_model *Q) {
    const int big = 1 << 20;
    if (Q->n_embd <= 0 || Q->n_embd > big || Q->n_layer <= 0 || Q->n_layer > 4096 || Q->n_ff <= 0 ||
        Q->n_ff > big || Q->n_head <= 0 || Q->n_head > 4096 || Q->n_kv_head <= 0 || Q->head_dim <= 0 ||
        Q->head_dim > 65536 || Q->n_vocab <= 0 || Q->n_vocab > (1 << 28))
        return tela_errorf(TELA_ERR_FORMAT,
                           "%s: implausible hyperparameters (n_embd %d, n_layer %d, n_ff %d, n_head %d, n_kv_head %d, "
                           "head_dim %d, n_vocab %d)",
                           m->path, Q->n_embd, Q->n_layer, Q->n_ff, Q->n_head, Q->n_kv_head, Q->head_dim,
                           Q->n_vocab);
    if (Q->n_head % Q->n_kv_head != 0)
        return tela_errorf(TELA_ERR_FORMAT, "%s: %d attention heads is not a multiple of %d KV heads", m->path,
                           Q->n_head, Q->n_kv_head);
    if (Q->n_rot <= 0 || Q->n_rot > Q->head_dim || Q->n_rot % 2)
        return tela_errorf(TELA_ERR_FORMAT, "%s: rotary dimension %d must be even and at most head_dim %d", m->path,
                           Q->n_rot, Q->head_dim);
    if (!(Q->eps > 0.0f) || !(Q->eps < 1.0f))
        return tela_errorf(TELA_ERR_FORMAT, "%s: RMSNorm epsilon %g is out of range", m->path, (double)Q->eps);
    if (Q->n_gdn > 0) {
        if (Q->conv_k < 1 || Q->conv_k > 64 || Q->nk <= 0 || Q->nk > 4096 || Q->nv <= 0 || Q->nv > 4096 ||
            Q->dk <= 0 || Q->dk > 4096 || Q->dv <= 0 || Q->dv > 4096)
            return tela_errorf(TELA_ERR_FORMAT,
                               "%s: implausible Gated DeltaNet shapes (conv kernel %d, %d key heads of %d, %d value "
                               "heads of %d)",
                               m->path, Q->conv_k, Q->nk, Q->dk, Q->nv, Q->dv);
        if (Q->nv % Q->nk != 0)
            return tela_errorf(TELA_ERR_FORMAT, "%s: %d value heads is not a multiple of %d key heads", m->path, Q->nv,
                               Q->nk);
    }
    return TELA_OK;
}

static tela_status load_weights_unpacked(tela_model *m, qwen35_model *Q, const qwen35_names *nm, bool tied);

/* Adds a layer's matrices (those of its kind) to a list for packing. */
static size_t layer_mats(qwen35_layer *ly, tela_mat **list) {
    size_t n = 0;
    tela_mat *common[] = {&ly->ffn.w_gate, &ly->ffn.w_up, &ly->ffn.w_down};
    tela_mat *attn[] = {&ly->attn.wq, &ly->attn.wk, &ly->attn.wv, &ly->attn.wo};
    tela_mat *gdn[] = {&ly->gdn.w_qkv, &ly->gdn.w_z, &ly->gdn.w_beta, &ly->gdn.w_alpha, &ly->gdn.w_out};
    for (size_t i = 0; i < 3; i++) list[n++] = common[i];
    if (ly->is_attn)
        for (size_t i = 0; i < 4; i++) list[n++] = attn[i];
    else
        for (size_t i = 0; i < 5; i++) list[n++] = gdn[i];
    return n;
}

/* The backend's copies of the vectors the forward pass reads. */
static tela_status backend_consts(tela_model *m, qwen35_model *Q) {
    const size_t E = (size_t)Q->n_embd * sizeof(float);
    TELA_TRY(tela_model_const_ranks(m, Q->inv_freq, (size_t)(Q->n_rot / 2) * sizeof(double),
                                    (const void ***)&Q->inv_freq_b));
    TELA_TRY(tela_model_const_ranks(m, Q->output_norm, E, (const void ***)&Q->output_norm_b));
    for (int i = 0; Q->mtp && i < Q->n_mtp; i++) {
        qwen35_mtp *b = &Q->mtp[i];
        TELA_TRY(tela_model_const_ranks(m, b->enorm, E, (const void ***)&b->enorm_b));
        TELA_TRY(tela_model_const_ranks(m, b->hnorm, E, (const void ***)&b->hnorm_b));
        TELA_TRY(tela_model_const_ranks(m, b->out_norm, E, (const void ***)&b->out_norm_b));
    }
    const int n_mtp = Q->mtp ? Q->n_mtp : 0;
    for (int i = 0; i < Q->world * (Q->n_layer + n_mtp); i++) { /* every rank's layers, then the MTP blocks' */
        const int r = i % Q->world, l = i / Q->world, rk = m->n_dev > 1 ? r : 0;
        qwen35_layer *ly = l < Q->n_layer ? &Q->rank_layers[r][l] : &Q->mtp[l - Q->n_layer].layers[r];
        if (ly->slot < 0) continue; /* skipped */
        TELA_TRY(tela_model_const_rank(m, rk, ly->attn_norm, E, (const void **)&ly->attn_norm_b));
        if (ly->is_attn) {
            const size_t hd = (size_t)Q->head_dim * sizeof(float);
            TELA_TRY(tela_model_const_rank(m, rk, ly->attn.q_norm, hd, (const void **)&ly->attn.q_norm_b));
            TELA_TRY(tela_model_const_rank(m, rk, ly->attn.k_norm, hd, (const void **)&ly->attn.k_norm_b));
        } else {
            qwen35_gdn *g = &ly->gdn;
            const size_t nv = (size_t)Q->r_nv * sizeof(float);
            TELA_TRY(tela_model_const_rank(m, rk, g->conv_w, (size_t)r_conv_dim(Q) * Q->conv_k * sizeof(float),
                                      (const void **)&g->conv_w_b));
            TELA_TRY(tela_model_const_rank(m, rk, g->ssm_a, nv, (const void **)&g->ssm_a_b));
            TELA_TRY(tela_model_const_rank(m, rk, g->dt_bias, nv, (const void **)&g->dt_bias_b));
            TELA_TRY(tela_model_const_rank(m, rk, g->norm, (size_t)Q->dv * sizeof(float), (const void **)&g->norm_b));
        }
    }
    return TELA_OK;
}

/* Prepares every matrix the forward pass multiplies by (and the embedding
 * table, read by rows) for the backend (tela_model_prepare_mats). */
static tela_status pack_weights(tela_model *m, qwen35_model *Q) {
    TELA_TRY(backend_consts(m, Q));
    const int n_dev = m->n_dev > 1 ? Q->world : 1; /* backends, each with its own list of matrices */
    for (int i = 0; Q->mtp && i < Q->n_mtp; i++) { /* eh_proj is whole: a copy for each device */
        qwen35_mtp *b = &Q->mtp[i];
        b->eh_projs = &b->eh_proj;
        if (n_dev <= 1) continue;
        b->eh_projs = tela_model_alloc(m, (size_t)Q->world * sizeof *b->eh_projs);
        if (!b->eh_projs) return TELA_ERR_NOMEM;
        for (int r = 0; r < Q->world; r++) b->eh_projs[r] = b->eh_proj;
    }
    /* a draft vocabulary: the head's first rows, of each rank's part a
     * matrix of their own (the stored rows are contiguous; the backends'
     * layouts need not be), copied before the parts are prepared */
    const bool cut = Q->mtp && m->mtp_draft_vocab > 0 && m->mtp_draft_vocab < Q->n_vocab;
    Q->mtp_vocab = cut ? m->mtp_draft_vocab : Q->n_vocab;
    Q->mtp_heads = Q->heads;
    if (cut) {
        Q->mtp_heads = tela_model_alloc(m, (size_t)Q->world * sizeof *Q->mtp_heads);
        if (!Q->mtp_heads) return TELA_ERR_NOMEM;
        int64_t row0 = 0;
        for (int r = 0; r < Q->world; row0 += Q->heads[r].n_rows, r++) {
            const int64_t k = Q->mtp_vocab - row0;
            Q->mtp_heads[r] = Q->heads[r];
            Q->mtp_heads[r].n_rows = k < 0 ? 0 : k < Q->heads[r].n_rows ? k : Q->heads[r].n_rows;
            Q->mtp_heads[r].name = "the MTP draft head (the output head's first rows)";
        }
    }
    size_t cap = 2 + 3 * (size_t)Q->world + (size_t)Q->world * (size_t)(Q->n_layer + Q->n_mtp) * 9 +
                 (size_t)Q->n_mtp * (size_t)Q->world, n = 0;
    tela_mat **list;
    tela_mat_use *uses;
    TELA_TRY(tela_model_mat_lists(m, cap, &list, &uses));
    tela_status st = TELA_OK;
    for (int r = 0; r < Q->world && st == TELA_OK; r++) { /* rank r's matrices (at one device, all in one list) */
        if (r < n_dev) n = 0;
        uses[n] = TELA_MAT_ROWS; /* (&Q->tok_embd and &Q->output at one rank) */
        list[n++] = &Q->embd[r];
        const size_t first = n;
        list[n++] = &Q->heads[r];
        for (int l = 0; l < Q->n_layer; l++)
            if (Q->layers[l].slot >= 0) n += layer_mats(&Q->rank_layers[r][l], list + n);
        for (int i = 0; Q->mtp && i < Q->n_mtp; i++) {
            n += layer_mats(&Q->mtp[i].layers[r], list + n);
            if (r < n_dev) list[n++] = &Q->mtp[i].eh_projs[r];
        }
        if (cut && Q->mtp_heads[r].n_rows > 0) list[n++] = &Q->mtp_heads[r];
        for (size_t k = first; k < n; k++) uses[k] = TELA_MAT_MATMUL;
        if (n_dev > 1 || r == Q->world - 1) st = tela_model_prepare_mats_rank(m, n_dev > 1 ? r : 0, list, uses, n);
    }
    free(list);
    free(uses);
    return st;
}

/* Loads every decoder layer (types already set) and the MTP blocks, then
 * packs the matrices. */
static tela_status load_weights(tela_model *m, qwen35_model *Q, const qwen35_names *nm, bool tied) {
    TELA_TRY(load_weights_unpacked(m, Q, nm, tied));
    return pack_weights(m, Q);
}

/* The split of the layers over Q->world ranks: the plan's checks, the
 * sizes of a rank's part, and room for the ranks' layers. */
static tela_status plan_ranks(tela_model *m, qwen35_model *Q) {
    Q->world = m->tp_world > 1 ? m->tp_world : 1;
    const tela_shard_dims d = shard_dims(Q);
    if (Q->world > 1) {
        tela_status s = tela_shard_plan_check(&d, Q->world);
        if (s != TELA_OK) return tela_error_prefix(s, "%s: ", m->path);
    }
    Q->r_head = Q->n_head / Q->world;
    Q->r_kv_head = tela_shard_kv_heads(&d, Q->world);
    Q->r_ff = Q->n_ff / Q->world;
    Q->r_nk = Q->nk / Q->world;
    Q->r_nv = Q->nv / Q->world;
    Q->rank_layers = tela_model_alloc(m, (size_t)Q->world * sizeof *Q->rank_layers);
    if (!Q->rank_layers) return TELA_ERR_NOMEM;
    Q->rank_layers[0] = Q->layers;
    for (int r = 1; r < Q->world; r++) {
        Q->rank_layers[r] = tela_model_alloc(m, (size_t)Q->n_layer * sizeof *Q->layers);
        if (!Q->rank_layers[r]) return TELA_ERR_NOMEM;
    }
    return TELA_OK;
}

static tela_status load_weights_unpacked(tela_model *m, qwen35_model *Q, const qwen35_names *nm, bool tied) {
    char name[160];
    TELA_TRY(plan_ranks(m, Q));
    snprintf(name, sizeof name, "%s%s", nm->hf ? nm->prefix : "", nm->tok_embd);
    TELA_TRY(tela_model_get_mat(m, name, Q->n_vocab, Q->n_embd, false, &Q->tok_embd));
    snprintf(name, sizeof name, "%s%s", nm->hf ? nm->prefix : "", nm->output_norm);
    TELA_TRY(tela_model_get_vec(m, name, Q->n_embd, false, &Q->output_norm));
    if (nm->hf)
        for (int i = 0; i < Q->n_embd; i++) Q->output_norm[i] += 1.0f;
    if (tied) {
        Q->output = Q->tok_embd;
    } else {
        TELA_TRY(tela_model_get_mat(m, nm->output, Q->n_vocab, Q->n_embd, false, &Q->output));
    }
    Q->heads = &Q->output;
    Q->embd = &Q->tok_embd;
    if (Q->world > 1) { /* the head and the embedding by vocabulary: rank r's rows */
        snprintf(name, sizeof name, "%s%s", nm->hf ? nm->prefix : "", nm->tok_embd);
        TELA_TRY(tela_model_get_vocab_parts(m, name, Q->n_vocab, Q->n_embd, &Q->embd));
        TELA_TRY(tela_model_get_vocab_parts(m, tied ? name : nm->output, Q->n_vocab, Q->n_embd, &Q->heads));
        /* the whole tables are not prepared for any backend: nothing may
         * read them (an empty matrix, so a use fails on every backend) */
        Q->tok_embd = Q->output = (tela_mat){.name = "the token embedding (split by rank)"};
    }
    for (int l = 0; l < Q->n_layer; l++) {
        layer_loc loc;
        loc_layer(&loc, nm, l);
        for (int r = 0; r < Q->world; r++) {
            qwen35_layer *ly = &Q->rank_layers[r][l];
            ly->is_attn = Q->layers[l].is_attn;
            ly->slot = Q->layers[l].slot;
            TELA_TRY(load_layer(m, Q, &loc, r, ly));
        }
    }
    if (!m->load_mtp || Q->n_mtp == 0) return TELA_OK;

    Q->mtp = tela_model_alloc(m, (size_t)Q->n_mtp * sizeof *Q->mtp);
    if (!Q->mtp) return TELA_ERR_NOMEM;
    for (int i = 0; i < Q->n_mtp; i++) {
        qwen35_mtp *b = &Q->mtp[i];
        layer_loc loc;
        b->layers = tela_model_alloc(m, (size_t)Q->world * sizeof *b->layers);
        if (!b->layers) return TELA_ERR_NOMEM;
        for (int r = 0; r < Q->world; r++) {
            b->layers[r].is_attn = true;
            b->layers[r].slot = i;
        }
        if (nm->hf) {
            /* mtp.layers.i.* plus mtp.fc / mtp.pre_fc_norm_* / mtp.norm */
            static const qwen35_names mtp_hf = {
                true, "mtp.",
                NULL, NULL, NULL,
                "input_layernorm.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight",
                "mlp.up_proj.weight", "mlp.down_proj.weight",
                "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
            };
            loc_layer(&loc, &mtp_hf, i);
            for (int r = 0; r < Q->world; r++) TELA_TRY(load_layer(m, Q, &loc, r, &b->layers[r]));
            layer_loc top = {&mtp_hf, "mtp."};
            TELA_TRY(get_mat(m, Q, &top, "fc.weight", TELA_ROLE_REPLICATED, 0, Q->n_embd, 2 * (int64_t)Q->n_embd,
                             &b->eh_proj));
            TELA_TRY(get_norm(m, &top, "pre_fc_norm_embedding.weight", Q->n_embd, true, &b->enorm));
            TELA_TRY(get_norm(m, &top, "pre_fc_norm_hidden.weight", Q->n_embd, true, &b->hnorm));
            TELA_TRY(get_norm(m, &top, "norm.weight", Q->n_embd, true, &b->out_norm));
        } else {
            loc_layer(&loc, nm, Q->n_layer + i);
            for (int r = 0; r < Q->world; r++) TELA_TRY(load_layer(m, Q, &loc, r, &b->layers[r]));
            TELA_TRY(get_mat(m, Q, &loc, "nextn.eh_proj.weight", TELA_ROLE_REPLICATED, 0, Q->n_embd,
                             2 * (int64_t)Q->n_embd, &b->eh_proj));
            TELA_TRY(get_norm(m, &loc, "nextn.enorm.weight", Q->n_embd, false, &b->enorm));
            TELA_TRY(get_norm(m, &loc, "nextn.hnorm.weight", Q->n_embd, false, &b->hnorm));
            TELA_TRY(tela_model_get_vec(m, loc_name(&loc, "nextn.shared_head_norm.weight", name, sizeof name),
                                        Q->n_embd, true, &b->out_norm));
            if (!b->out_norm) b->out_norm = Q->output_norm;
        }
    }
    return TELA_OK;
}

/* Sets layer types from the full-attention interval and counts them. */
static void set_layer_types_interval(qwen35_model *Q, int interval) {
    for (int l = 0; l < Q->n_layer; l++) Q->layers[l].is_attn = (l + 1) % interval == 0;
}

/* Each layer's index among the attention (or the GDN) layers; skipped
 * layers (params.skip_layers) get none and no state. */
static tela_status number_layers(tela_model *m, qwen35_model *Q) {
    TELA_TRY(tela_model_skip_mask(m, Q->n_layer, &Q->skip));
    Q->n_attn = Q->n_gdn = 0;
    for (int l = 0; l < Q->n_layer; l++) {
        qwen35_layer *ly = &Q->layers[l];
        ly->slot = Q->skip && Q->skip[l] ? -1 : ly->is_attn ? Q->n_attn++ : Q->n_gdn++;
    }
    return TELA_OK;
}

static tela_status u32_to_int(const tela_model *m, const char *key, uint32_t v, int *out) {
    if (v > (uint32_t)INT32_MAX)
        return tela_errorf(TELA_ERR_FORMAT, "%s: %s.%s = %u is too large", m->path, m->arch_name, key, v);
    *out = (int)v;
    return TELA_OK;
}

static tela_status alloc_layers(tela_model *m, qwen35_model *Q) {
    if (Q->n_layer <= 0 || Q->n_layer > 4096)
        return tela_errorf(TELA_ERR_FORMAT, "%s: %d layers is implausible", m->path, Q->n_layer);
    Q->layers = tela_model_alloc(m, (size_t)Q->n_layer * sizeof *Q->layers);
    return Q->layers ? TELA_OK : TELA_ERR_NOMEM;
}

static tela_status load_gguf(tela_model *m, qwen35_model *Q) {
    uint32_t n_embd = 0, n_block = 0, n_ff = 0, n_head = 0, n_kv_head = 0, head_dim = 0, v_len = 0;
    uint32_t n_rot = 0, n_ctx_train = 0, n_vocab = 0, n_mtp = 0, interval = 4;
    uint32_t conv_k = 0, d_state = 0, n_group = 0, dt_rank = 0, d_inner = 0;
    float base = 10000000.0f, eps = 1e-6f;
    TELA_TRY(tela_model_gguf_u32(m, "embedding_length", false, &n_embd));
    TELA_TRY(tela_model_gguf_u32(m, "block_count", false, &n_block));
    TELA_TRY(tela_model_gguf_u32(m, "feed_forward_length", false, &n_ff));
    TELA_TRY(tela_model_gguf_u32(m, "attention.head_count", false, &n_head));
    n_kv_head = n_head;
    TELA_TRY(tela_model_gguf_u32(m, "attention.head_count_kv", true, &n_kv_head));
    head_dim = n_head ? n_embd / n_head : 0;
    TELA_TRY(tela_model_gguf_u32(m, "attention.key_length", true, &head_dim));
    v_len = head_dim;
    TELA_TRY(tela_model_gguf_u32(m, "attention.value_length", true, &v_len));
    n_rot = head_dim / 4;
    TELA_TRY(tela_model_gguf_u32(m, "rope.dimension_count", true, &n_rot));
    TELA_TRY(tela_model_gguf_u32(m, "context_length", true, &n_ctx_train));
    TELA_TRY(tela_model_gguf_f32(m, "rope.freq_base", true, &base));
    TELA_TRY(tela_model_gguf_f32(m, "attention.layer_norm_rms_epsilon", true, &eps));
    TELA_TRY(tela_model_gguf_u32(m, "full_attention_interval", true, &interval));
    TELA_TRY(tela_model_gguf_u32(m, "nextn_predict_layers", true, &n_mtp));
    TELA_TRY(tela_model_gguf_u32(m, "ssm.conv_kernel", false, &conv_k));
    TELA_TRY(tela_model_gguf_u32(m, "ssm.state_size", false, &d_state));
    TELA_TRY(tela_model_gguf_u32(m, "ssm.group_count", false, &n_group));
    TELA_TRY(tela_model_gguf_u32(m, "ssm.time_step_rank", false, &dt_rank));
    TELA_TRY(tela_model_gguf_u32(m, "ssm.inner_size", false, &d_inner));
    const tela_tensor *te = tela_model_find_tensor(m, gguf_names.tok_embd);
    if (!te) return tela_errorf(TELA_ERR_NOT_FOUND, "%s: tensor '%s' is missing", m->path, gguf_names.tok_embd);
    n_vocab = te->ne[1] > 0 && te->ne[1] <= INT32_MAX ? (uint32_t)te->ne[1] : 0;

    TELA_TRY(u32_to_int(m, "embedding_length", n_embd, &Q->n_embd));
    TELA_TRY(u32_to_int(m, "feed_forward_length", n_ff, &Q->n_ff));
    TELA_TRY(u32_to_int(m, "attention.head_count", n_head, &Q->n_head));
    TELA_TRY(u32_to_int(m, "attention.head_count_kv", n_kv_head, &Q->n_kv_head));
    TELA_TRY(u32_to_int(m, "attention.key_length", head_dim, &Q->head_dim));
    TELA_TRY(u32_to_int(m, "rope.dimension_count", n_rot, &Q->n_rot));
    TELA_TRY(u32_to_int(m, "ssm.conv_kernel", conv_k, &Q->conv_k));
    TELA_TRY(u32_to_int(m, "ssm.state_size", d_state, &Q->dk));
    TELA_TRY(u32_to_int(m, "ssm.group_count", n_group, &Q->nk));
    TELA_TRY(u32_to_int(m, "ssm.time_step_rank", dt_rank, &Q->nv));
    Q->n_vocab = (int)n_vocab;
    Q->eps = eps;
    if (v_len != head_dim)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: attention value_length %u differs from key_length %u", m->path,
                           v_len, head_dim);
    if (n_mtp >= n_block)
        return tela_errorf(TELA_ERR_FORMAT, "%s: %s.nextn_predict_layers = %u leaves no layers of block_count %u",
                           m->path, m->arch_name, n_mtp, n_block);
    Q->n_layer = (int)(n_block - n_mtp);
    Q->n_mtp = (int)n_mtp;
    if (Q->nv <= 0 || d_inner % (uint32_t)Q->nv != 0 || d_inner / (uint32_t)Q->nv > 65536)
        return tela_errorf(TELA_ERR_FORMAT, "%s: %s.ssm.inner_size = %u is not a multiple of %d value heads", m->path,
                           m->arch_name, d_inner, Q->nv);
    Q->dv = (int)(d_inner / (uint32_t)Q->nv);
    if (interval == 0 || interval > 4096)
        return tela_errorf(TELA_ERR_FORMAT, "%s: %s.full_attention_interval = %u", m->path, m->arch_name, interval);
    m->info.n_ctx_train = n_ctx_train <= INT32_MAX ? (int32_t)n_ctx_train : INT32_MAX;
    if (!(base > 0.0f) || !isfinite(base))
        return tela_errorf(TELA_ERR_FORMAT, "%s: %s.rope.freq_base = %g is not a positive number", m->path,
                           m->arch_name, (double)base);
    TELA_TRY(alloc_layers(m, Q));
    set_layer_types_interval(Q, (int)interval);
    TELA_TRY(number_layers(m, Q));
    TELA_TRY(check_hparams(m, Q));
    Q->v_tiled = true;
    Q->inv_freq = tela_model_alloc(m, (size_t)(Q->n_rot / 2) * sizeof(double));
    if (!Q->inv_freq) return TELA_ERR_NOMEM;
    tela_rope_inv_freq(Q->inv_freq, Q->n_rot, base, NULL);
    bool tied = tela_model_find_tensor(m, gguf_names.output) == NULL;
    return load_weights(m, Q, &gguf_names, tied);
}

/* An integer of the text config; default kept when absent. */
static tela_status cfg_int(const tela_model *m, const void *cfg, const char *key, bool optional, int *out) {
    int64_t v = *out;
    TELA_TRY(tela_model_json_int(m, cfg, key, optional, &v));
    if (v < INT32_MIN || v > INT32_MAX)
        return tela_errorf(TELA_ERR_FORMAT, "%s: config.json '%s' = %lld is out of range", m->path, key,
                           (long long)v);
    *out = (int)v;
    return TELA_OK;
}

static tela_status load_hf(tela_model *m, qwen35_model *Q) {
    /* Qwen3_5ForConditionalGeneration nests the language model's settings in
     * text_config and its tensors under model.language_model. */
    const void *top = m->hf_config;
    const void *cfg = tela_model_json_object(top, "text_config");
    qwen35_names nm = hf_names;
    if (!cfg) cfg = top;
    if (tela_model_find_tensor(m, "model.language_model.embed_tokens.weight")) nm.prefix = "model.language_model.";
    bool flag = false;
    TELA_TRY(tela_model_json_bool(m, cfg, "attention_bias", true, &flag));
    if (flag) return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: attention_bias = true is not supported", m->path);

    /* Defaults are those of transformers' Qwen3_5TextConfig. */
    Q->n_vocab = 248320;
    Q->n_embd = 4096;
    Q->n_ff = 12288;
    Q->n_layer = 32;
    Q->n_head = 16;
    Q->n_kv_head = 4;
    Q->head_dim = 256;
    Q->conv_k = 4;
    Q->dk = 128;
    Q->dv = 128;
    Q->nk = 16;
    Q->nv = 32;
    TELA_TRY(cfg_int(m, cfg, "vocab_size", true, &Q->n_vocab));
    TELA_TRY(cfg_int(m, cfg, "hidden_size", true, &Q->n_embd));
    TELA_TRY(cfg_int(m, cfg, "intermediate_size", true, &Q->n_ff));
    TELA_TRY(cfg_int(m, cfg, "num_hidden_layers", true, &Q->n_layer));
    TELA_TRY(cfg_int(m, cfg, "num_attention_heads", true, &Q->n_head));
    TELA_TRY(cfg_int(m, cfg, "num_key_value_heads", true, &Q->n_kv_head));
    TELA_TRY(cfg_int(m, cfg, "head_dim", true, &Q->head_dim));
    TELA_TRY(cfg_int(m, cfg, "linear_conv_kernel_dim", true, &Q->conv_k));
    TELA_TRY(cfg_int(m, cfg, "linear_key_head_dim", true, &Q->dk));
    TELA_TRY(cfg_int(m, cfg, "linear_value_head_dim", true, &Q->dv));
    TELA_TRY(cfg_int(m, cfg, "linear_num_key_heads", true, &Q->nk));
    TELA_TRY(cfg_int(m, cfg, "linear_num_value_heads", true, &Q->nv));
    TELA_TRY(cfg_int(m, cfg, "mtp_num_hidden_layers", true, &Q->n_mtp));
    int n_ctx_train = 32768;
    TELA_TRY(cfg_int(m, cfg, "max_position_embeddings", true, &n_ctx_train));
    m->info.n_ctx_train = n_ctx_train;
    double eps = 1e-6;
    TELA_TRY(tela_model_json_float(m, cfg, "rms_norm_eps", true, &eps));
    Q->eps = (float)eps;
    if (Q->n_mtp < 0 || Q->n_mtp > 64)
        return tela_errorf(TELA_ERR_FORMAT, "%s: mtp_num_hidden_layers = %d", m->path, Q->n_mtp);

    /* Rope: transformers 5 keeps rope_theta and partial_rotary_factor in
     * rope_parameters; older configs have them at the top. */
    double base = 10000.0, partial = 0.25;
    TELA_TRY(tela_model_json_float(m, cfg, "rope_theta", true, &base));
    TELA_TRY(tela_model_json_float(m, cfg, "partial_rotary_factor", true, &partial));
    const void *rope = tela_model_json_object(cfg, "rope_parameters");
    if (!rope) rope = tela_model_json_object(cfg, "rope_scaling");
    if (rope) {
        TELA_TRY(tela_model_json_float(m, rope, "rope_theta", true, &base));
        TELA_TRY(tela_model_json_float(m, rope, "partial_rotary_factor", true, &partial));
        const cJSON *type = cJSON_GetObjectItemCaseSensitive((const cJSON *)rope, "rope_type");
        if (!type) type = cJSON_GetObjectItemCaseSensitive((const cJSON *)rope, "type");
        if (type && cJSON_IsString(type) && strcmp(type->valuestring, "default") != 0)
            return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: rope_type '%s' is not supported (only 'default')", m->path,
                               type->valuestring);
    }
    if (!(base > 0.0)) return tela_errorf(TELA_ERR_FORMAT, "%s: rope_theta %g is not positive", m->path, base);
    if (!(partial > 0.0 && partial <= 1.0))
        return tela_errorf(TELA_ERR_FORMAT, "%s: partial_rotary_factor %g is out of range", m->path, partial);
    Q->n_rot = (int)(Q->head_dim * partial);

    TELA_TRY(alloc_layers(m, Q));
    const cJSON *types = cJSON_GetObjectItemCaseSensitive((const cJSON *)cfg, "layer_types");
    if (types && !cJSON_IsNull(types)) {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) < Q->n_layer)
            return tela_errorf(TELA_ERR_FORMAT, "%s: config.json 'layer_types' is not a list of %d layer types",
                               m->path, Q->n_layer);
        for (int l = 0; l < Q->n_layer; l++) {
            const cJSON *t = cJSON_GetArrayItem(types, l);
            const char *s = t && cJSON_IsString(t) ? t->valuestring : "";
            if (!strcmp(s, "full_attention") || !strcmp(s, "attention")) {
                Q->layers[l].is_attn = true;
            } else if (!strcmp(s, "linear_attention")) {
                Q->layers[l].is_attn = false;
            } else {
                return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: config.json layer_types[%d] = '%s' is not supported",
                                   m->path, l, s);
            }
        }
    } else {
        int interval = 4;
        TELA_TRY(cfg_int(m, cfg, "full_attention_interval", true, &interval));
        if (interval <= 0)
            return tela_errorf(TELA_ERR_FORMAT, "%s: full_attention_interval = %d", m->path, interval);
        set_layer_types_interval(Q, interval);
    }
    TELA_TRY(number_layers(m, Q));
    TELA_TRY(check_hparams(m, Q));
    Q->v_tiled = false;
    Q->inv_freq = tela_model_alloc(m, (size_t)(Q->n_rot / 2) * sizeof(double));
    if (!Q->inv_freq) return TELA_ERR_NOMEM;
    tela_rope_inv_freq(Q->inv_freq, Q->n_rot, base, NULL);

    /* Tied embeddings: the flag sits in text_config and/or at the top. */
    bool tied = false;
    TELA_TRY(tela_model_json_bool(m, top, "tie_word_embeddings", true, &tied));
    if (cfg != top) TELA_TRY(tela_model_json_bool(m, cfg, "tie_word_embeddings", true, &tied));
    return load_weights(m, Q, &nm, tied);
}

static tela_status qwen35_load(tela_model *m) {
    qwen35_model *Q = tela_model_alloc(m, sizeof *Q);
    if (!Q) return TELA_ERR_NOMEM;
    m->impl = Q;
    TELA_TRY(m->gguf ? load_gguf(m, Q) : load_hf(m, Q));
    m->info.n_vocab = Q->n_vocab;
    m->info.n_embd = Q->n_embd;
    m->info.n_layer = Q->n_layer;
    return TELA_OK;
}

/* Everything lives in the model's allocations. */
static void qwen35_free(tela_model *m) { m->impl = NULL; }

/* --------------------------------------------------------------- state */

/* The activations of one step on one exec (a rank's, with a rank per
 * device; else every rank's in turn). */
typedef struct qwen35_acts {
    float *x, *xb, *q, *qg, *k, *v, *att, *gate, *cs;
    float *part;                 /* with tensor parallelism: the ranks' partial sums of a residual update */
    float *qkv_in, *qkv, *z, *beta, *g, *core;
} qwen35_acts;

/* What the MTP block computes on, on one exec (qwen35_state's comment). */
typedef struct qwen35_mtp_acts {
    float *h, *x, *cat, *g, *hin;
    int32_t *in, *tokd, *posd;
} qwen35_mtp_acts;

/* A session: the KV cache of the attention layers, the conv and recurrent
 * states of the GDN layers, and the activations of one step of up to
 * n_batch tokens, all in backend memory. */
typedef struct qwen35_state {
    tela_exec *ex;
    int32_t n_ctx;
    int n_batch;
    int n_seq;                   /* state slots: 1 for a session */
    tela_kv_cache **kv;          /* [n_kv]: each rank's KV heads, n_attn layers (none without attention layers) */
    int n_kv;
    size_t conv_floats;          /* per GDN layer: (conv_k - 1) * conv_dim */
    size_t rec_floats;           /* per GDN layer: nv * dk * dv */
    tela_model_ranks ranks;      /* the execs: one, or a rank's each (ranks.n) */
    /* [ranks.n]: each exec's conv and recurrent states, [n_seq][n_gdn][its
     * ranks][a rank's part]: at one exec a layer's states rank after rank */
    float **conv, **rec;
    qwen35_acts *acts;           /* [ranks.n] */
    tela_model_io io;
    /* What a forward pass with keep_states keeps (a session's, or a
     * batched run's: a speculative verification), for slot_rewind: per slot
     * and GDN layer, the recurrent state after each of its tokens
     * ([n_seq][n_gdn][keep_cap][rec_floats]) and the conv inputs, the
     * kernel-1 before the pass then the pass's ([n_seq][n_gdn]
     * [kernel-1+keep_cap][conv_dim]), whose last kernel-1 rows up to a
     * token are the conv state after it. Host arrays per slot: */
    float **keep_rec, **keep_conv; /* [ranks.n]: each exec's, laid out as conv and rec */
    int keep_cap;
    int32_t *keep_idx;           /* host: 0, 1, 2, ... (row lists of tela_exec_copy_rows) */
    tela_copy_span *rewind_spans; /* host: a rewind's copies, two a GDN layer (slot_rewind) */
    int32_t *keep_pos0;          /* [n_seq] the position of the pass's first token */
    int32_t *keep_n;             /* [n_seq] tokens of the slot's last pass, when it kept them; 0: nothing kept */
    bool *keeping;               /* [n_seq] during such a pass */
    /* Multi-token prediction (a session of a model with its MTP block
     * loaded): the block's KV cache, and mtp_h: rows 0..n_seq-1 each slot's
     * final hidden state (output-normed) of the last position evaluated,
     * rows n_seq.. those of the last step's tokens; mtp_x the block's
     * residual stream, mtp_cat its input [embedding ; hidden] (rows of 2
     * n_embd), mtp_g each slot's last draft step's output (the next chained
     * step's hidden state), mtp_in a session's draft step's token and
     * position. The engine's state (paged) also has the block's batches
     * (mtp_tokd/mtp_posd, the host mtp_seqs, mtp_tok, mtp_idx), their
     * gathered hidden states (mtp_hin) and keep_tok0, each kept run's first
     * row in the step (slot_rewind). */
    tela_kv_cache **mtp_kv;      /* [n_mtp_kv]: the MTP block's KV cache, each rank's KV heads (NULL: no block) */
    int n_mtp_kv;
    qwen35_mtp_acts *md;         /* [ranks.n] each exec's mtp_h (h), mtp_x (x), ...: NULL without the block */
    float *mtp_logits;           /* rank 0's */
    int32_t *mtp_pick;
    tela_batch_seq *mtp_seqs;
    int32_t *mtp_tok, *mtp_idx, *keep_tok0;
} qwen35_state;

static void qwen35_state_free(void *p) {
    qwen35_state *s = p;
    if (!s) return;
    tela_backend *be = tela_exec_backend(s->ex);
    for (int r = 0; r < s->n_kv && s->kv; r++) tela_kv_free(s->kv[r]);
    free(s->kv);
    for (int r = 0; r < s->n_mtp_kv && s->mtp_kv; r++) tela_kv_free(s->mtp_kv[r]);
    free(s->mtp_kv);
    for (int e = 0; e < s->ranks.n; e++) {
        tela_backend *bee = tela_exec_backend(s->ranks.rk[e].ex);
        if (s->acts) {
            const qwen35_acts *a = &s->acts[e];
            float *bufs[] = {a->x, a->xb, a->q, a->qg, a->k, a->v, a->att, a->gate, a->cs, a->part, a->qkv_in, a->qkv,
                             a->z, a->beta, a->g, a->core};
            for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tela_backend_free_mem(bee, bufs[i]);
        }
        if (s->conv) tela_backend_free_mem(bee, s->conv[e]);
        if (s->rec) tela_backend_free_mem(bee, s->rec[e]);
        if (s->keep_rec) tela_backend_free_mem(bee, s->keep_rec[e]);
        if (s->keep_conv) tela_backend_free_mem(bee, s->keep_conv[e]);
    }
    free(s->acts);
    free(s->conv);
    free(s->rec);
    free(s->keep_rec);
    free(s->keep_conv);
    for (int e = 0; e < s->ranks.n && s->md; e++) {
        tela_backend *bee = tela_exec_backend(s->ranks.rk[e].ex);
        const qwen35_mtp_acts *d = &s->md[e];
        void *mb[] = {d->h, d->x, d->cat, d->g, d->hin, d->in, d->tokd, d->posd};
        for (size_t i = 0; i < sizeof mb / sizeof mb[0]; i++) tela_backend_free_mem(bee, mb[i]);
    }
    free(s->md);
    float *bufs[] = {s->mtp_logits};
    tela_backend_free_mem(be, s->mtp_pick);
    free(s->mtp_seqs);
    free(s->mtp_tok);
    free(s->mtp_idx);
    free(s->keep_tok0);
    free(s->keep_idx);
    free(s->rewind_spans);
    free(s->keep_pos0);
    free(s->keep_n);
    free(s->keeping);
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tela_backend_free_mem(be, bufs[i]);
    tela_model_io_free(&s->io);
    tela_model_ranks_free(&s->ranks);
    free(s);
}

/* The exec that rank r's work runs on (its index among the state's), and
 * the ranks an exec runs (all at one exec, else one). */
static int rank_exec_of(const qwen35_state *s, int r) { return s->ranks.n > 1 ? r : 0; }
static tela_exec *rank_ex(const qwen35_state *s, int r) { return s->ranks.rk[rank_exec_of(s, r)].ex; }
static int ranks_per_exec(const qwen35_model *Q, const qwen35_state *s) { return Q->world / s->ranks.n; }

/* What a session, or the engine's slots, need for the MTP block (one
 * block: the first; the checkpoints have one); the engine's KV cache of
 * the block is paged as the model's, in the same blocks. */
static tela_status mtp_state_create(const tela_model *m, const qwen35_model *Q, qwen35_state *s,
                                    const tela_state_params *p) {
    const bool paged = p->kv_block_size > 0;
    const tela_kv_shape shape = {1,          paged ? p->kv_rows : s->n_ctx, Q->r_kv_head, Q->head_dim, Q->head_dim,
                                 p->kv_dtype, paged ? p->kv_block_size : 0, s->n_ctx};
    s->mtp_kv = calloc((size_t)Q->world, sizeof *s->mtp_kv); /* a cache a rank, as for the model's layers */
    s->md = calloc((size_t)s->ranks.n, sizeof *s->md);
    if (!s->mtp_kv || !s->md) return tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    for (; s->n_mtp_kv < Q->world; s->n_mtp_kv++)
        TELA_TRY(tela_kv_create(rank_ex(s, s->n_mtp_kv), &shape, &s->mtp_kv[s->n_mtp_kv]));
    const size_t nb = (size_t)s->n_batch, E = (size_t)Q->n_embd, ns = (size_t)s->n_seq;
    for (int e = 0; e < s->ranks.n; e++) { /* each exec computes the block's whole parts itself */
        tela_exec *ex = s->ranks.rk[e].ex;
        tela_backend *be = tela_exec_backend(ex);
        qwen35_mtp_acts *d = &s->md[e];
        TELA_TRY(tela_backend_alloc(be, (nb + ns) * E * sizeof(float), "MTP hidden states", (void **)&d->h));
        TELA_TRY(tela_backend_alloc(be, nb * E * sizeof(float), "MTP activations", (void **)&d->x));
        TELA_TRY(tela_backend_alloc(be, nb * 2 * E * sizeof(float), "MTP inputs", (void **)&d->cat));
        TELA_TRY(tela_backend_alloc(be, ns * E * sizeof(float), "MTP outputs", (void **)&d->g));
        TELA_TRY(tela_backend_alloc(be, 2 * sizeof(int32_t), "MTP inputs", (void **)&d->in));
        tela_exec_zero(ex, d->h, ns * E * sizeof(float));
        if (!paged) continue;
        TELA_TRY(tela_backend_alloc(be, nb * E * sizeof(float), "MTP hidden states", (void **)&d->hin));
        TELA_TRY(tela_backend_alloc(be, nb * sizeof(int32_t), "MTP token ids", (void **)&d->tokd));
        TELA_TRY(tela_backend_alloc(be, nb * sizeof(int32_t), "MTP positions", (void **)&d->posd));
    }
    tela_backend *be = tela_exec_backend(s->ex);
    TELA_TRY(tela_backend_alloc(be, ns * (size_t)Q->n_vocab * sizeof(float), "MTP logits", (void **)&s->mtp_logits));
    if (Q->mtp_vocab < Q->n_vocab) { /* the ids past the draft vocabulary: never drafted */
        const size_t tail = (size_t)(Q->n_vocab - Q->mtp_vocab);
        float *ninf = malloc(tail * sizeof *ninf);
        if (!ninf) return tela_errorf(TELA_ERR_NOMEM, "out of memory for the MTP logits");
        for (size_t i = 0; i < tail; i++) ninf[i] = -INFINITY;
        tela_status st = TELA_OK;
        for (size_t r = 0; r < ns && st == TELA_OK; r++)
            st = tela_exec_upload(s->ex, s->mtp_logits + r * (size_t)Q->n_vocab + Q->mtp_vocab, ninf,
                                  tail * sizeof *ninf);
        if (st == TELA_OK) st = tela_exec_sync(s->ex);
        free(ninf);
        TELA_TRY(st);
    }
    TELA_TRY(tela_backend_alloc(be, sizeof(int32_t), "MTP greedy pick", (void **)&s->mtp_pick));
    for (int e = 1; e < s->ranks.n; e++) TELA_TRY(tela_exec_sync(s->ranks.rk[e].ex));
    if (!paged) {
        TELA_TRY(tela_model_io_prev_positions(&s->io));
        return tela_model_ranks_prev_positions(m, &s->ranks, s->n_batch);
    }
    const size_t rows = nb > ns ? nb : ns;
    s->mtp_seqs = malloc(rows * sizeof *s->mtp_seqs);
    s->mtp_tok = malloc(rows * sizeof *s->mtp_tok);
    s->mtp_idx = malloc(rows * sizeof *s->mtp_idx);
    s->keep_tok0 = calloc(ns, sizeof *s->keep_tok0);
    if (!s->mtp_seqs || !s->mtp_tok || !s->mtp_idx || !s->keep_tok0)
        return tela_errorf(TELA_ERR_NOMEM, "engine: out of memory for the MTP block");
    return TELA_OK;
}

static tela_status qwen35_state_create(const tela_model *m, tela_exec *ex, const tela_state_params *p, void **out) {
    const qwen35_model *Q = m->impl;
    const int32_t n_ctx = p->n_ctx;
    *out = NULL;
    qwen35_state *s = calloc(1, sizeof *s);
    if (!s) return tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    s->ex = ex;
    s->n_ctx = n_ctx;
    s->n_seq = p->n_seq > 0 ? p->n_seq : 1;
    const bool paged = p->kv_block_size > 0;
    const int pref = p->n_batch > 0 ? p->n_batch : tela_exec_preferred_batch(ex) / TELA_GDN_CHUNK * TELA_GDN_CHUNK;
    s->n_batch = paged || n_ctx > pref ? pref : n_ctx;
    if (Q->n_gdn > 0) { /* the GDN shapes are only checked when there are GDN layers */
        s->conv_floats = (size_t)(Q->conv_k - 1) * (size_t)conv_dim(Q);
        s->rec_floats = (size_t)Q->nv * (size_t)Q->dk * (size_t)Q->dv;
    }
    tela_status st = tela_model_ranks_init(m, &s->ranks, ex, s->n_batch, (int64_t)s->n_batch * Q->n_embd, Q->heads);
    if (st == TELA_OK) {
        const size_t ne = (size_t)s->ranks.n;
        s->acts = calloc(ne, sizeof *s->acts);
        s->conv = calloc(ne, sizeof *s->conv);
        s->rec = calloc(ne, sizeof *s->rec);
        s->keep_rec = calloc(ne, sizeof *s->keep_rec);
        s->keep_conv = calloc(ne, sizeof *s->keep_conv);
        if (!s->acts || !s->conv || !s->rec || !s->keep_rec || !s->keep_conv)
            st = tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    }
    if (st == TELA_OK && Q->n_attn > 0) { /* one cache a rank, of its KV heads */
        const tela_kv_shape shape = {Q->n_attn,         paged ? p->kv_rows : n_ctx, Q->r_kv_head, Q->head_dim,
                                     Q->head_dim,       p->kv_dtype, paged ? p->kv_block_size : 0, n_ctx};
        s->kv = calloc((size_t)Q->world, sizeof *s->kv);
        if (!s->kv) st = tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
        for (int r = 0; r < Q->world && st == TELA_OK; r++, s->n_kv++)
            st = tela_kv_create(rank_ex(s, r), &shape, &s->kv[r]);
    }
    /* each exec's activations (of a rank's part of a layer: at one exec
     * the ranks take turns) and its ranks' states */
    const size_t nb = (size_t)s->n_batch, qd = (size_t)Q->r_head * Q->head_dim, kd = (size_t)r_kv_dim(Q);
    const size_t cd = Q->n_gdn > 0 ? (size_t)r_conv_dim(Q) : 1, vd = Q->n_gdn > 0 ? (size_t)r_value_dim(Q) : 1;
    const size_t nv = Q->n_gdn > 0 ? (size_t)Q->r_nv : 1;
    for (int e = 0; e < s->ranks.n && st == TELA_OK; e++) {
        qwen35_acts *a = &s->acts[e];
        const size_t per = (size_t)ranks_per_exec(Q, s);
        const struct {
            float **buf;
            size_t floats;
            const char *what;
        } bufs[] = {
            {&s->conv[e], (size_t)s->n_seq * Q->n_gdn * (s->conv_floats / (size_t)Q->world) * per, "the conv states"},
            {&s->rec[e], (size_t)s->n_seq * Q->n_gdn * (s->rec_floats / (size_t)Q->world) * per,
             "the recurrent states"},
            {&a->x, nb * Q->n_embd, "activations"}, {&a->xb, nb * Q->n_embd, "activations"},
            {&a->q, nb * qd, "queries"}, {&a->qg, nb * qd * 2, "queries and gates"},
            {&a->k, nb * kd, "keys"}, {&a->v, nb * kd, "values"}, {&a->att, nb * qd, "attention outputs"},
            {&a->gate, nb * Q->r_ff, "feed-forward activations"}, {&a->cs, nb * Q->n_rot, "RoPE table"},
            {&a->qkv_in, nb * cd, "GDN inputs"}, {&a->qkv, nb * cd, "GDN inputs"}, {&a->z, nb * vd, "GDN gates"},
            {&a->core, nb * vd, "GDN outputs"}, {&a->beta, nb * nv, "GDN gates"}, {&a->g, nb * nv, "GDN gates"},
            {&a->part, Q->world > 1 ? nb * Q->n_embd : 0, "partial sums"},
        };
        tela_backend *be = tela_exec_backend(s->ranks.rk[e].ex);
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && st == TELA_OK; i++)
            if (bufs[i].floats)
                st = tela_backend_alloc(be, bufs[i].floats * sizeof(float), bufs[i].what, (void **)bufs[i].buf);
    }
    if (st == TELA_OK) st = tela_model_io_init(&s->io, ex, Q->n_vocab, Q->n_embd, s->n_batch);
    if (st == TELA_OK) {
        s->keep_pos0 = calloc((size_t)s->n_seq, sizeof *s->keep_pos0);
        s->keep_n = calloc((size_t)s->n_seq, sizeof *s->keep_n);
        s->keeping = calloc((size_t)s->n_seq, sizeof *s->keeping);
        if (!s->keep_pos0 || !s->keep_n || !s->keeping) st = tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    }
    if (st == TELA_OK && Q->mtp && (paged || s->n_seq == 1)) st = mtp_state_create(m, Q, s, p);
    if (st != TELA_OK) {
        qwen35_state_free(s);
        return st;
    }
    *out = s;
    return TELA_OK;
}

static uint64_t qwen35_state_bytes(const tela_model *m, const tela_state_params *p, int n_batch) {
    const qwen35_model *Q = m->impl;
    const bool paged = p->kv_block_size > 0;
    if (p->n_batch > 0) n_batch = p->n_batch;
    const uint64_t nb = (uint64_t)(!paged && p->n_ctx < n_batch ? p->n_ctx : n_batch);
    const uint64_t n_seq = (uint64_t)(p->n_seq > 0 ? p->n_seq : 1);
    /* every rank's KV cache (with a rank per device, what one device
     * holds: its rank's); one rank's activations at a time */
    const uint64_t on_dev = m->n_dev > 1 ? 1 : (uint64_t)Q->world;
    const uint64_t kv = tela_kv_dtype_bytes(p->kv_dtype, (uint64_t)Q->n_attn * (uint64_t)(paged ? p->kv_rows : p->n_ctx) *
                                                          on_dev * (uint64_t)r_kv_dim(Q) * 2);
    uint64_t rec = 0, row = (Q->world > 1 ? 3ull : 2ull) * Q->n_embd + 4ull * Q->r_head * Q->head_dim +
                            2ull * r_kv_dim(Q) + 2ull * Q->r_ff + (uint64_t)Q->n_rot;
    if (Q->n_gdn > 0) {
        rec = n_seq * (uint64_t)Q->n_gdn *
              ((uint64_t)(Q->conv_k - 1) * conv_dim(Q) + (uint64_t)Q->nv * Q->dk * Q->dv) * 4 / ((uint64_t)Q->world / on_dev);
        row += 2ull * r_conv_dim(Q) + 2ull * r_value_dim(Q) + 2ull * Q->r_nv;
    }
    uint64_t mtp = 0; /* the MTP block: its KV cache and buffers */
    if (Q->mtp && (paged || n_seq == 1))
        mtp = tela_kv_dtype_bytes(p->kv_dtype, (uint64_t)(paged ? p->kv_rows : p->n_ctx) * (uint64_t)Q->world *
                                                   (uint64_t)r_kv_dim(Q) * 2) +
              (5 * nb + 2 * n_seq) * (uint64_t)Q->n_embd * sizeof(float) +
              n_seq * (uint64_t)Q->n_vocab * sizeof(float);
    return kv + rec + mtp + nb * row * sizeof(float) + (uint64_t)Q->n_vocab * sizeof(float);
}

/* The KV rows past n_past are never read before they are written, but the
 * conv and recurrent states are read at once: they start at zero. */
static void qwen35_state_reset(const tela_model *m, void *state) {
    const qwen35_model *Q = m->impl;
    qwen35_state *s = state;
    for (int r = 0; r < s->n_kv; r++) tela_kv_clear(rank_ex(s, r), s->kv[r]);
    for (int r = 0; r < s->n_mtp_kv && s->mtp_kv; r++) tela_kv_clear(rank_ex(s, r), s->mtp_kv[r]);
    memset(s->keep_n, 0, (size_t)s->n_seq * sizeof *s->keep_n);
    const size_t per = (size_t)ranks_per_exec(Q, s), w = (size_t)Q->world;
    for (int e = 0; e < s->ranks.n; e++) {
        tela_exec *ex = s->ranks.rk[e].ex;
        tela_exec_zero(ex, s->conv[e], (size_t)s->n_seq * Q->n_gdn * (s->conv_floats / w) * per * sizeof(float));
        tela_exec_zero(ex, s->rec[e], (size_t)s->n_seq * Q->n_gdn * (s->rec_floats / w) * per * sizeof(float));
    }
}

/* Exec e's part of a slot's conv and recurrent states (the state of one
 * sequence: all of it at one exec), and its bytes. */
static float *slot_conv(const qwen35_model *Q, const qwen35_state *s, int slot, int e) {
    return s->conv[e] + (size_t)slot * Q->n_gdn * (s->conv_floats / (size_t)s->ranks.n);
}
static float *slot_rec(const qwen35_model *Q, const qwen35_state *s, int slot, int e) {
    return s->rec[e] + (size_t)slot * Q->n_gdn * (s->rec_floats / (size_t)s->ranks.n);
}
static size_t slot_conv_bytes(const qwen35_model *Q, const qwen35_state *s) {
    return (size_t)Q->n_gdn * (s->conv_floats / (size_t)s->ranks.n) * sizeof(float);
}
static size_t slot_rec_bytes(const qwen35_model *Q, const qwen35_state *s) {
    return (size_t)Q->n_gdn * (s->rec_floats / (size_t)s->ranks.n) * sizeof(float);
}

/* With the MTP block loaded, a slot's image also holds the last
 * position's hidden state (what the block continues from; zeros in states
 * that run no MTP). */
static size_t mtp_slot_bytes(const qwen35_model *Q) { return Q->mtp ? (size_t)Q->n_embd * sizeof(float) : 0; }

static size_t qwen35_slot_bytes(const tela_model *m) {
    const qwen35_model *Q = m->impl;
    if (Q->n_gdn == 0) return mtp_slot_bytes(Q);
    return (size_t)Q->n_gdn *
               ((size_t)(Q->conv_k - 1) * (size_t)conv_dim(Q) + (size_t)Q->nv * (size_t)Q->dk * (size_t)Q->dv) *
               sizeof(float) +
           mtp_slot_bytes(Q);
}

static void qwen35_slot_reset(const tela_model *m, void *state, int slot) {
    const qwen35_model *Q = m->impl;
    qwen35_state *s = state;
    s->keep_n[slot] = 0;
    for (int e = 0; e < s->ranks.n && s->md; e++)
        tela_exec_zero(s->ranks.rk[e].ex, s->md[e].h + (size_t)slot * Q->n_embd, (size_t)Q->n_embd * sizeof(float));
    for (int e = 0; e < s->ranks.n; e++) {
        tela_exec_zero(s->ranks.rk[e].ex, slot_conv(Q, s, slot, e), slot_conv_bytes(Q, s));
        tela_exec_zero(s->ranks.rk[e].ex, slot_rec(Q, s, slot, e), slot_rec_bytes(Q, s));
    }
}

/* The image: the slot's conv states, then its recurrent states (each exec's
 * part in turn: with a rank per device, the ranks' one after another),
 * then the MTP hidden state. */
static tela_status qwen35_slot_save(const tela_model *m, void *state, int slot, void *dst) {
    const qwen35_model *Q = m->impl;
    qwen35_state *s = state;
    const size_t cb = slot_conv_bytes(Q, s), rb = slot_rec_bytes(Q, s), ne = (size_t)s->ranks.n;
    unsigned char *p = dst;
    for (int e = 0; e < s->ranks.n; e++) {
        TELA_TRY(tela_exec_download(s->ranks.rk[e].ex, p + e * cb, slot_conv(Q, s, slot, e), cb));
        TELA_TRY(tela_exec_download(s->ranks.rk[e].ex, p + ne * cb + e * rb, slot_rec(Q, s, slot, e), rb));
    }
    p += ne * (cb + rb);
    if (!mtp_slot_bytes(Q)) return TELA_OK;
    if (s->md) return tela_exec_download(s->ex, p, s->md[0].h + (size_t)slot * Q->n_embd, mtp_slot_bytes(Q));
    memset(p, 0, mtp_slot_bytes(Q));
    return TELA_OK;
}

static tela_status qwen35_slot_load(const tela_model *m, void *state, int slot, const void *src) {
    const qwen35_model *Q = m->impl;
    qwen35_state *s = state;
    const size_t cb = slot_conv_bytes(Q, s), rb = slot_rec_bytes(Q, s), ne = (size_t)s->ranks.n;
    const unsigned char *p = src;
    s->keep_n[slot] = 0;
    for (int e = 0; e < s->ranks.n; e++) {
        TELA_TRY(tela_exec_upload(s->ranks.rk[e].ex, slot_conv(Q, s, slot, e), p + e * cb, cb));
        TELA_TRY(tela_exec_upload(s->ranks.rk[e].ex, slot_rec(Q, s, slot, e), p + ne * cb + e * rb, rb));
    }
    for (int e = 0; e < s->ranks.n && s->md; e++) /* (every exec's copy) */
        TELA_TRY(tela_exec_upload(s->ranks.rk[e].ex, s->md[e].h + (size_t)slot * Q->n_embd, p + ne * (cb + rb),
                                  mtp_slot_bytes(Q)));
    for (int e = 0; e < s->ranks.n; e++) TELA_TRY(tela_exec_sync(s->ranks.rk[e].ex));
    return TELA_OK;
}

static tela_status qwen35_kv_copy_rows(const tela_model *m, void *state, int32_t dst, int32_t src, int32_t n) {
    (void)m;
    qwen35_state *s = state;
    for (int r = 0; r < s->n_mtp_kv && s->mtp_kv; r++)
        TELA_TRY(tela_kv_copy_rows(rank_ex(s, r), s->mtp_kv[r], dst, src, n));
    for (int r = 0; r < s->n_kv; r++) TELA_TRY(tela_kv_copy_rows(rank_ex(s, r), s->kv[r], dst, src, n));
    return TELA_OK;
}

static size_t recurrent_bytes(const qwen35_model *Q, const qwen35_state *s) {
    return (size_t)Q->n_gdn * (s->conv_floats + s->rec_floats) * sizeof(float);
}

/* The MTP block's part of a session image: its KV rows and the last
 * position's hidden state. */
static size_t mtp_image_bytes(const qwen35_model *Q, const qwen35_state *s, int32_t n_past) {
    size_t n = 0;
    for (int r = 0; r < s->n_mtp_kv && s->mtp_kv; r++) n += tela_kv_image_bytes(s->mtp_kv[r], n_past);
    return s->mtp_kv ? n + (size_t)Q->n_embd * sizeof(float) : 0;
}

static size_t qwen35_state_size(const tela_model *m, const void *state, int32_t n_past) {
    const qwen35_state *s = state;
    size_t kv = 0;
    for (int r = 0; r < s->n_kv; r++) kv += tela_kv_image_bytes(s->kv[r], n_past);
    return kv + recurrent_bytes(m->impl, s) +
           mtp_image_bytes(m->impl, s, n_past);
}

/* The image: the KV caches' images of positions [0, n_past) (one a rank, in
 * order), then every GDN layer's conv state, then every recurrent state
 * (each exec's in turn), then the MTP block's KV image and hidden state. */
static tela_status qwen35_state_save(const tela_model *m, const void *state, int32_t n_past, void *dst) {
    const qwen35_model *Q = m->impl;
    const qwen35_state *s = state;
    unsigned char *p = dst;
    for (int r = 0; r < s->n_kv; p += tela_kv_image_bytes(s->kv[r], n_past), r++) /* the ranks' images in order */
        TELA_TRY(tela_kv_save(rank_ex(s, r), s->kv[r], n_past, p));
    const size_t cb = slot_conv_bytes(Q, s), rb = slot_rec_bytes(Q, s); /* (slot 0: a session's) */
    const size_t ne = (size_t)s->ranks.n;
    for (int e = 0; e < s->ranks.n; e++) {
        TELA_TRY(tela_exec_download(s->ranks.rk[e].ex, p + e * cb, s->conv[e], cb));
        TELA_TRY(tela_exec_download(s->ranks.rk[e].ex, p + ne * cb + e * rb, s->rec[e], rb));
    }
    if (!s->mtp_kv) return TELA_OK;
    p += ne * (cb + rb);
    for (int r = 0; r < s->n_mtp_kv; p += tela_kv_image_bytes(s->mtp_kv[r], n_past), r++)
        TELA_TRY(tela_kv_save(rank_ex(s, r), s->mtp_kv[r], n_past, p));
    return tela_exec_download(s->ex, p, s->md[0].h, (size_t)Q->n_embd * sizeof(float));
}

static tela_status qwen35_state_load(const tela_model *m, void *state, int32_t n_past, const void *src) {
    const qwen35_model *Q = m->impl;
    qwen35_state *s = state;
    const unsigned char *p = src;
    s->keep_n[0] = 0;
    for (int r = 0; r < s->n_kv; p += tela_kv_image_bytes(s->kv[r], n_past), r++)
        TELA_TRY(tela_kv_load(rank_ex(s, r), s->kv[r], n_past, p));
    const size_t cb = slot_conv_bytes(Q, s), rb = slot_rec_bytes(Q, s); /* (slot 0: a session's) */
    const size_t ne = (size_t)s->ranks.n;
    for (int e = 0; e < s->ranks.n; e++) {
        TELA_TRY(tela_exec_upload(s->ranks.rk[e].ex, s->conv[e], p + e * cb, cb));
        TELA_TRY(tela_exec_upload(s->ranks.rk[e].ex, s->rec[e], p + ne * cb + e * rb, rb));
    }
    if (s->mtp_kv) {
        p += ne * (cb + rb);
        for (int r = 0; r < s->n_mtp_kv; p += tela_kv_image_bytes(s->mtp_kv[r], n_past), r++)
            TELA_TRY(tela_kv_load(rank_ex(s, r), s->mtp_kv[r], n_past, p));
        for (int e = 0; e < s->ranks.n; e++)
            TELA_TRY(tela_exec_upload(s->ranks.rk[e].ex, s->md[e].h, p, (size_t)Q->n_embd * sizeof(float)));
    }
    for (int e = 0; e < s->ranks.n; e++) TELA_TRY(tela_exec_sync(s->ranks.rk[e].ex));
    return TELA_OK;
}

/* ------------------------------------------------------------- forward */

/* Kept states (slot_rewind): on both backends (their delta rules write
 * tela_gdn_args.states), for a session and for the engine's slots. */
static bool qwen35_keeps_states(const tela_model *m, const void *state) {
    const qwen35_model *Q = m->impl;
    (void)state;
    return Q->n_gdn > 0;
}

/* Room to keep the states of an n-token pass (a speculative step's
 * verification) in every slot; when it moves, the captured passes that
 * held its addresses are dropped, and what was kept is gone. */
static tela_status keep_reserve(const tela_model *m, qwen35_state *s, int n) {
    const qwen35_model *Q = m->impl;
    if (n <= s->keep_cap) return TELA_OK;
    tela_exec_graphs_drop(s->ex);
    memset(s->keep_n, 0, (size_t)s->n_seq * sizeof *s->keep_n);
    for (int e = 0; e < s->ranks.n; e++) {
        tela_backend *be = tela_exec_backend(s->ranks.rk[e].ex);
        tela_exec_sync(s->ranks.rk[e].ex);
        tela_backend_free_mem(be, s->keep_rec[e]);
        tela_backend_free_mem(be, s->keep_conv[e]);
        s->keep_rec[e] = s->keep_conv[e] = NULL;
    }
    free(s->keep_idx);
    free(s->rewind_spans);
    s->rewind_spans = NULL;
    s->keep_cap = 0;
    const int hist = Q->conv_k - 1;
    const size_t ne = (size_t)s->ranks.n, cd = (size_t)conv_dim(Q) / ne, ng = (size_t)Q->n_gdn * (size_t)s->n_seq;
    s->keep_idx = malloc((size_t)(n > hist ? n : hist) * sizeof *s->keep_idx);
    s->rewind_spans = malloc((size_t)(2 * Q->n_gdn * Q->world + 1) * sizeof *s->rewind_spans);
    if (!s->keep_idx || !s->rewind_spans) return tela_errorf(TELA_ERR_NOMEM, "qwen35: out of memory");
    for (int i = 0; i < (n > hist ? n : hist); i++) s->keep_idx[i] = i;
    for (int e = 0; e < s->ranks.n; e++) { /* each exec's ranks' room */
        tela_backend *be = tela_exec_backend(s->ranks.rk[e].ex);
        TELA_TRY(tela_backend_alloc(be, ng * (size_t)n * (s->rec_floats / ne) * sizeof(float), "kept recurrent states",
                                    (void **)&s->keep_rec[e]));
        TELA_TRY(tela_backend_alloc(be, ng * (size_t)(hist + n) * cd * sizeof(float), "kept conv inputs",
                                    (void **)&s->keep_conv[e]));
    }
    s->keep_cap = n;
    return TELA_OK;
}

static const int32_t ROW0[1] = {0}; /* a row list of one: row 0 */

/* A slot's kept states of GDN layer g (its index among the GDN layers),
 * rank r's part: the layer's room on the rank's exec holds its ranks' one
 * after another (all of them at one exec), each laid out as the whole
 * layer's are at one rank ([keep_cap][its recurrent state],
 * [kernel-1+keep_cap][its conv channels]). */
static size_t rank_slot_index(const qwen35_model *Q, const qwen35_state *s, int slot, int g, int r) {
    const int per = ranks_per_exec(Q, s);
    return ((size_t)slot * Q->n_gdn + (size_t)g) * (size_t)per + (size_t)(r % per);
}
static float *keep_rec_at(const qwen35_model *Q, const qwen35_state *s, int slot, int g, int r) {
    return s->keep_rec[rank_exec_of(s, r)] +
           rank_slot_index(Q, s, slot, g, r) * (size_t)s->keep_cap * (s->rec_floats / (size_t)Q->world);
}
static float *keep_conv_at(const qwen35_model *Q, const qwen35_state *s, int slot, int g, int r) {
    const size_t rows = (size_t)(Q->conv_k - 1 + s->keep_cap);
    return s->keep_conv[rank_exec_of(s, r)] + rank_slot_index(Q, s, slot, g, r) * rows * (size_t)r_conv_dim(Q);
}

/* Rank r's part of a slot's conv and recurrent states of GDN layer g. */
static float *conv_state_at(const qwen35_model *Q, const qwen35_state *s, int slot, int g, int r) {
    return s->conv[rank_exec_of(s, r)] + rank_slot_index(Q, s, slot, g, r) * (s->conv_floats / (size_t)Q->world);
}
static float *rec_state_at(const qwen35_model *Q, const qwen35_state *s, int slot, int g, int r) {
    return s->rec[rank_exec_of(s, r)] + rank_slot_index(Q, s, slot, g, r) * (s->rec_floats / (size_t)Q->world);
}

/* Gated full attention over the batch, on exec e with its activations:
 * out (+)= W_o (attention(q, k, v) * sigmoid(gate)), the projections of
 * rmsnorm(x) * attn_norm; keys and values in layer ly->slot of kv. A
 * rank's heads of a split layer (all of them at one rank): out is then
 * the rank's (or at one exec the ranks') partial sum, else x itself. */
static void attn_layer(const qwen35_model *Q, qwen35_state *s, int e, const qwen35_layer *ly, tela_kv_cache *kv,
                       float *x, const tela_batch *b, float *out, bool accumulate) {
    tela_exec *ex = s->ranks.rk[e].ex;
    const qwen35_acts *a = &s->acts[e];
    const qwen35_attn *A = &ly->attn;
    const int E = Q->n_embd, hd = Q->head_dim, H = Q->r_head, nt = b->n_tok;
    const int64_t q_dim = (int64_t)H * hd, k_dim = r_kv_dim(Q);
    const tela_norm_in norm = {ly->attn_norm_b, Q->eps, a->xb};
    const tela_matmul_target qkv[3] = {{&A->wq, a->qg, 2 * q_dim}, {&A->wk, a->k, k_dim}, {&A->wv, a->v, k_dim}};
    tela_exec_norm_matmul_many(ex, &norm, qkv, 3, x, E, nt);
    /* q: the first half of each head's 2*hd block of qg, normalized per
     * head into a->q; k normalized per head; then RoPE and the store */
    const tela_head_norms norms = {a->qg, 2 * q_dim, 2 * hd, A->q_norm_b, A->k_norm_b, Q->eps};
    tela_exec_norm_rope_store(ex, &norms, kv, ly->slot, a->q, q_dim, H, a->k, k_dim, a->v, k_dim, b, a->cs, Q->n_rot,
                              TELA_ROPE_HALVES);
    tela_exec_attention(ex, kv, ly->slot, a->q, q_dim, a->att, q_dim, b, H, (float)(1.0 / sqrt((double)hd)));
    /* the output gate: the second half of each head's block (and a hint:
     * the gate may prepare wo's input) */
    tela_exec_next_input_of(ex, &A->wo);
    tela_exec_sigmoid_gate(ex, a->att, hd, a->qg + hd, 2 * hd, nt * H, hd);
    tela_exec_matmul(ex, &A->wo, a->att, q_dim, out, E, nt, accumulate);
}

/* Gated DeltaNet over the batch on exec e: out (+)= W_out gdn(rmsnorm(x) *
 * attn_norm), rank r's heads of it (all at one rank; out as attn_layer's).
 * The products take every token of the step; the conv and the delta rule
 * run per sequence, on rank r's part of its slot's state. */
static void gdn_layer(const qwen35_model *Q, qwen35_state *s, int e, const qwen35_layer *ly, int r, float *x,
                      const tela_batch *b, float *out, bool accumulate) {
    tela_exec *ex = s->ranks.rk[e].ex;
    const qwen35_acts *a = &s->acts[e];
    const qwen35_gdn *G = &ly->gdn;
    const int E = Q->n_embd, nv = Q->r_nv, nt = b->n_tok;
    const int64_t cd = r_conv_dim(Q), vd = r_value_dim(Q);
    const tela_norm_in norm = {ly->attn_norm_b, Q->eps, a->xb};
    const tela_matmul_target in[4] = {
        {&G->w_qkv, a->qkv_in, cd}, {&G->w_z, a->z, vd}, {&G->w_beta, a->beta, nv}, {&G->w_alpha, a->g, nv}};
    tela_exec_norm_matmul_many(ex, &norm, in, 4, x, E, nt);
    const tela_batch_seq one = {0, nt, b->pos0, 0, NULL};
    const tela_batch_seq *seqs = b->seqs ? b->seqs : &one;
    const int hist = Q->conv_k - 1;
    for (int i = 0; i < b->n_seq; i++) {
        const tela_batch_seq *q = &seqs[i];
        float *conv_state = conv_state_at(Q, s, q->slot, ly->slot, r);
        if (s->keeping[q->slot]) { /* the conv inputs: the state before the pass, then the tokens */
            const int kt0 = q->pos0 - s->keep_pos0[q->slot]; /* this step's first token in the kept pass */
            float *kconv = keep_conv_at(Q, s, q->slot, ly->slot, r);
            if (kt0 == 0) tela_exec_copy_rows(ex, kconv, cd, conv_state, cd, s->keep_idx, hist, cd);
            tela_exec_copy_rows(ex, kconv + (size_t)(hist + kt0) * cd, cd, a->qkv_in + (size_t)q->tok0 * cd, cd,
                                s->keep_idx, q->n_tok, cd);
        }
        tela_exec_conv1d_silu(ex, a->qkv_in + (size_t)q->tok0 * cd, cd, q->n_tok, (int)cd, Q->conv_k, G->conv_w_b,
                              conv_state, a->qkv + (size_t)q->tok0 * cd, cd);
    }
    const tela_gdn_gates_in gates = {G->ssm_a_b, G->dt_bias_b, QWEN35_L2_EPS};
    for (int i = 0; i < b->n_seq; i++) {
        const tela_batch_seq *q = &seqs[i];
        const size_t t0 = (size_t)q->tok0;
        const tela_gdn_args ga = {
            .qkv = a->qkv + t0 * cd, .qkv_stride = cd, .nk = Q->r_nk, .nv = nv, .dk = Q->dk, .dv = Q->dv,
            .v_tiled = Q->v_tiled, .q_scale = (float)(1.0 / sqrt((double)Q->dk)), .beta = a->beta + t0 * nv,
            .g = a->g + t0 * nv, .z = a->z + t0 * vd, .norm_w = G->norm_b, .eps = Q->eps,
            .state = rec_state_at(Q, s, q->slot, ly->slot, r), .out = a->core + t0 * vd,
            .n_tok = q->n_tok, .gates = &gates,
            .states = s->keeping[q->slot] ? keep_rec_at(Q, s, q->slot, ly->slot, r) +
                                                (size_t)(q->pos0 - s->keep_pos0[q->slot]) * (s->rec_floats / Q->world)
                                          : NULL,
        };
        if (i == b->n_seq - 1) tela_exec_next_input_of(ex, &G->w_out); /* (a hint, as in attn_layer) */
        tela_exec_gdn_delta(ex, &ga);
    }
    tela_exec_matmul(ex, &G->w_out, a->core, vd, out, E, nt, accumulate);
}

/* A decoder layer over the residual stream: the mixer, then the MLP, each
 * adding its output to it. parts[r] is rank r's part of the layer and
 * kv[r] its KV cache (of the layer's kind); x[e] is exec e's copy of the
 * residual stream and b[e] its view of the step. Split over ranks (tensor
 * parallelism), each rank adds its part of the product through W_o /
 * W_out (its heads) into its exec's partial sum (at one exec the ranks
 * take turns and add into one), the sums are all-reduced and added to the
 * residual, and the same for the MLP's down product; with one rank the
 * products add into x. */
static void layer_parts(const qwen35_model *Q, qwen35_state *s, const tela_batch *const *b,
                        const qwen35_layer *const *parts, tela_kv_cache *const *kv, float *const *x) {
    const int E = Q->n_embd, nt = b[0]->n_tok;
    const bool split = Q->world > 1, shared = s->ranks.n == 1;
    float *sums[TELA_MODEL_MAX_RANKS];
    for (int e = 0; e < s->ranks.n; e++) sums[e] = s->acts[e].part;
    for (int r = 0; r < Q->world; r++) {
        const int e = rank_exec_of(s, r);
        float *out = split ? s->acts[e].part : x[e];
        const bool acc = !split || (shared && r > 0);
        if (parts[r]->is_attn)
            attn_layer(Q, s, e, parts[r], kv[r], x[e], b[e], out, acc);
        else
            gdn_layer(Q, s, e, parts[r], r, x[e], b[e], out, acc);
    }
    if (split) {
        tela_model_ranks_sum(&s->ranks, sums, (int64_t)nt * E);
        for (int e = 0; e < s->ranks.n; e++) tela_exec_add(s->ranks.rk[e].ex, x[e], s->acts[e].part, (int64_t)nt * E);
    }
    for (int r = 0; r < Q->world; r++) {
        const int e = rank_exec_of(s, r);
        const qwen35_acts *a = &s->acts[e];
        tela_model_ffn_swiglu(s->ranks.rk[e].ex, &parts[r]->ffn, x[e], a->xb, a->gate, split ? a->part : x[e],
                              !split || (shared && r > 0), E, nt, Q->eps);
    }
    if (split) {
        tela_model_ranks_sum(&s->ranks, sums, (int64_t)nt * E);
        for (int e = 0; e < s->ranks.n; e++) tela_exec_add(s->ranks.rk[e].ex, x[e], s->acts[e].part, (int64_t)nt * E);
    }
}

/* Decoder layer l of the model (not skipped), on each exec's x. */
static void layer(const qwen35_model *Q, qwen35_state *s, int l) {
    const qwen35_layer *parts[TELA_MODEL_MAX_RANKS];
    const tela_batch *b[TELA_MODEL_MAX_RANKS];
    float *x[TELA_MODEL_MAX_RANKS];
    for (int r = 0; r < Q->world; r++) parts[r] = &Q->rank_layers[r][l];
    for (int e = 0; e < s->ranks.n; e++) {
        b[e] = &s->ranks.rk[e].batch;
        x[e] = s->acts[e].x;
    }
    layer_parts(Q, s, b, parts, s->kv, x);
}

/* One step over the batch's tokens (at most n_batch); leaves the final
 * hidden states (before the output norm) in each exec's x. */
static void forward_step(const qwen35_model *Q, qwen35_state *s, const tela_batch *b) {
    const int E = Q->n_embd, nt = b->n_tok;
    float *x[TELA_MODEL_MAX_RANKS], *cs[TELA_MODEL_MAX_RANKS];
    for (int e = 0; e < s->ranks.n; e++) x[e] = s->acts[e].x, cs[e] = s->acts[e].cs;
    tela_model_ranks_step_begin(&s->ranks, b, s->io.pos_prev, Q->embd, Q->world, Q->inv_freq_b, Q->n_rot, cs, x, E);
    tela_model_probe(&s->io, -1, x[0], nt, E);
    for (int l = 0; l < Q->n_layer; l++) {
        if (Q->layers[l].slot >= 0) layer(Q, s, l); /* else skipped: the residual stream passes unchanged */
        tela_model_probe(&s->io, l, x[0], nt, E);
    }
}

/* The MTP block over b[e]'s rows on each exec e (its own KV cache at the
 * rows' positions), from the hidden states h[e] (rows of n_embd) and the
 * embeddings of the rows' tokens; leaves the block's residual stream in
 * each exec's md[e].x. Each exec computes the block's whole parts (the
 * norms, eh_proj) itself; its layer is split as the model's. */
static void mtp_block(const qwen35_model *Q, qwen35_state *s, const qwen35_mtp *B, const float *const *h,
                      const tela_batch *const *b) {
    const int E = Q->n_embd, nr = b[0]->n_tok;
    float *xs[TELA_MODEL_MAX_RANKS];
    for (int e = 0; e < s->ranks.n; e++) {
        xs[e] = s->md[e].x;
        tela_exec_profile_phase(s->ranks.rk[e].ex, "MTP");
    }
    if (s->ranks.n > 1) {
        const int32_t *ids[TELA_MODEL_MAX_RANKS];
        for (int e = 0; e < s->ranks.n; e++) ids[e] = b[e]->tokens;
        tela_model_embed_ranks(&s->ranks, Q->embd, ids, nr, xs, E);
    } else {
        tela_model_embed(s->ex, Q->embd, Q->world, b[0]->tokens, nr, xs[0], E);
    }
    for (int e = 0; e < s->ranks.n; e++) {
        tela_exec *ex = s->ranks.rk[e].ex;
        qwen35_mtp_acts *d = &s->md[e];
        tela_exec_rmsnorm(ex, d->cat, 2 * E, d->x, E, B->enorm_b[e], E, nr, Q->eps);
        tela_exec_rmsnorm(ex, d->cat + E, 2 * E, h[e], E, B->hnorm_b[e], E, nr, Q->eps);
        tela_exec_matmul(ex, &B->eh_projs[e], d->cat, 2 * E, d->x, E, nr, false);
        tela_exec_rope_table(ex, s->acts[e].cs, b[e], Q->inv_freq_b[e], Q->n_rot);
    }
    const qwen35_layer *parts[TELA_MODEL_MAX_RANKS];
    for (int r = 0; r < Q->world; r++) parts[r] = &B->layers[r];
    layer_parts(Q, s, b, parts, s->mtp_kv, xs);
    for (int e = 0; e < s->ranks.n; e++) tela_exec_profile_phase(s->ranks.rk[e].ex, NULL);
}

/* After a session's step (final hidden states in each exec's x): the MTP
 * block over the step's positions one behind, the token at position p with
 * the hidden state of p - 1 (the first from h row 0, the previous step's
 * last), at MTP position p - 1; then row 0 becomes this step's last hidden
 * state. */
static void mtp_catch_up(const qwen35_model *Q, qwen35_state *s, const tela_batch *b) {
    const int E = Q->n_embd, nt = b->n_tok, first = b->pos0 == 0; /* position 0 follows nothing */
    for (int e = 0; e < s->ranks.n; e++)
        tela_exec_rmsnorm(s->ranks.rk[e].ex, s->md[e].h + E, E, s->acts[e].x, E, Q->output_norm_b[e], E, nt, Q->eps);
    if (nt > first) {
        /* (pos0: the step's own, so that the block's attention is sized by
         * the same length bucket as the step: a captured step replays it at
         * every length of the bucket) */
        tela_batch mb[TELA_MODEL_MAX_RANKS];
        const tela_batch *mbp[TELA_MODEL_MAX_RANKS];
        const float *h[TELA_MODEL_MAX_RANKS];
        for (int e = 0; e < s->ranks.n; e++) {
            const int32_t *prev = e == 0 ? s->io.pos_prev : s->ranks.rk[e].pos_prev;
            mb[e] = (tela_batch){nt - first, b->pos0 + first, s->ranks.rk[e].batch.tokens + first, prev + first, 1,
                                 NULL, 0};
            mbp[e] = &mb[e];
            h[e] = s->md[e].h + (size_t)first * E;
        }
        mtp_block(Q, s, &Q->mtp[0], h, mbp);
    }
    for (int e = 0; e < s->ranks.n; e++)
        tela_exec_rmsnorm(s->ranks.rk[e].ex, s->md[e].h, E, s->acts[e].x + (size_t)(nt - 1) * E, E,
                          Q->output_norm_b[e], E, 1, Q->eps);
}

/* mtp_catch_up for a batched step: each sequence's tokens but one at
 * position 0, with the hidden states one behind (its slot's row for its
 * first token, the step's rows after), as one batch of the block; then
 * each slot's row becomes its last token's hidden state. */
static void mtp_catch_up_batch(const qwen35_model *Q, qwen35_state *s, const tela_batch *b) {
    const int E = Q->n_embd, ns = s->n_seq;
    for (int e = 0; e < s->ranks.n; e++)
        tela_exec_rmsnorm(s->ranks.rk[e].ex, s->md[e].h + (size_t)ns * E, E, s->acts[e].x, E, Q->output_norm_b[e], E,
                          b->n_tok, Q->eps);
    const int32_t *tok = s->io.run_tok; /* the step's token ids, host */
    int n = 0, nq = 0;
    for (int i = 0; i < b->n_seq; i++) {
        const tela_batch_seq *q = &b->seqs[i];
        const int first = q->pos0 == 0; /* position 0 follows nothing */
        if (q->n_tok <= first) continue;
        s->mtp_seqs[nq++] = (tela_batch_seq){n, q->n_tok - first, q->pos0 + first - 1, q->slot, q->blocks};
        for (int j = first; j < q->n_tok; j++) {
            s->mtp_tok[n] = tok[q->tok0 + j];
            s->mtp_idx[n++] = j == 0 ? q->slot : ns + q->tok0 + j - 1;
        }
    }
    if (n > 0) {
        tela_batch mb[TELA_MODEL_MAX_RANKS];
        const tela_batch *mbp[TELA_MODEL_MAX_RANKS];
        const float *h[TELA_MODEL_MAX_RANKS];
        bool ok = true;
        for (int e = 0; e < s->ranks.n && ok; e++) { /* (batched steps run eagerly: each exec takes its upload) */
            tela_exec *ex = s->ranks.rk[e].ex;
            tela_exec_copy_rows(ex, s->md[e].hin, E, s->md[e].h, E, s->mtp_idx, n, E);
            ok = tela_exec_set_batch_seqs(ex, &mb[e], s->md[e].tokd, s->md[e].posd, s->mtp_tok, s->mtp_seqs, nq) ==
                 TELA_OK;
            mbp[e] = &mb[e];
            h[e] = s->md[e].hin;
        }
        if (ok) mtp_block(Q, s, &Q->mtp[0], h, mbp);
    }
    for (int i = 0; i < b->n_seq; i++) {
        const tela_batch_seq *q = &b->seqs[i];
        for (int e = 0; e < s->ranks.n; e++)
            tela_exec_copy_rows(s->ranks.rk[e].ex, s->md[e].h + (size_t)q->slot * E, E,
                                s->md[e].h + (size_t)ns * E + (size_t)(q->tok0 + q->n_tok - 1) * E, E, ROW0, 1, E);
    }
}

static void forward_output(const tela_model *m, void *state, const tela_model_step *step) {
    const qwen35_model *Q = m->impl;
    qwen35_state *s = state;
    forward_step(Q, s, &s->io.batch);
    float *x[TELA_MODEL_MAX_RANKS], *xb[TELA_MODEL_MAX_RANKS];
    for (int e = 0; e < s->ranks.n; e++) x[e] = s->acts[e].x, xb[e] = s->acts[e].xb;
    tela_model_ranks_output_head(&s->ranks, Q->heads, Q->world, Q->output_norm_b, Q->eps, x, xb, Q->n_embd, step,
                                 &s->io);
    if (s->mtp_kv && !s->io.batch.seqs) mtp_catch_up(Q, s, &s->io.batch);
    else if (s->mtp_kv) mtp_catch_up_batch(Q, s, &s->io.batch);
    tela_model_ranks_end(&s->ranks);
}

/* The draft logits of n rows g[e] (output-normed, rows of n_embd, each
 * exec's copy) into s->mtp_logits (rank 0's): each rank's part of the
 * draft head filling its columns (the columns past a draft vocabulary
 * stay -inf). */
static void mtp_head_logits(const qwen35_model *Q, qwen35_state *s, const float *const *g, int n) {
    if (s->ranks.n > 1) {
        tela_model_head_ranks(&s->ranks, Q->mtp_heads, NULL, g, n, Q->n_embd, s->mtp_logits, Q->n_vocab);
        return;
    }
    int64_t col = 0;
    for (int r = 0; r < Q->world; col += Q->heads[r].n_rows, r++)
        if (Q->mtp_heads[r].n_rows > 0)
            tela_exec_matmul(s->ex, &Q->mtp_heads[r], g[0], Q->n_embd, s->mtp_logits + col, Q->n_vocab, n, false);
}

static int qwen35_mtp_layers(const tela_model *m) {
    const qwen35_model *Q = m->impl;
    return Q->mtp ? Q->n_mtp : 0;
}

/* One draft step of the MTP block at position pos (see tela_arch.mtp_draft),
 * a captured graph on a GPU like a decode step. */
static tela_status qwen35_mtp_draft(const tela_model *m, void *state, int32_t tok, int32_t pos, bool chain,
                                    float *logits, int32_t *pick) {
    const qwen35_model *Q = m->impl;
    qwen35_state *s = state;
    if (!s->mtp_kv)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: %s", m->path,
                           Q->n_mtp == 0 ? "the model has no MTP (nextn) block"
                           : Q->mtp     ? "MTP drafting needs a session (this state serves batched sequences)"
                                        : "the MTP block was not loaded (load the model with load_mtp)");
    if (pos < 0 || pos >= s->n_ctx || tok < 0 || tok >= Q->n_vocab)
        return tela_errorf(TELA_ERR_ARG, "MTP draft: token %d at position %d is out of range (vocabulary %d, context %d)",
                           tok, pos, Q->n_vocab, s->n_ctx);
    const int32_t in[2] = {tok, pos};
    TELA_TRY(tela_exec_upload(s->ex, s->md[0].in, in, sizeof in)); /* (rank 0's; the others copy it in the step) */
    tela_batch mb[TELA_MODEL_MAX_RANKS];
    const tela_batch *mbp[TELA_MODEL_MAX_RANKS];
    const float *h[TELA_MODEL_MAX_RANKS], *g[TELA_MODEL_MAX_RANKS];
    for (int e = 0; e < s->ranks.n; e++) {
        mb[e] = (tela_batch){1, pos, s->md[e].in, s->md[e].in + 1, 1, NULL, 0};
        mbp[e] = &mb[e];
        h[e] = chain ? s->md[e].g : s->md[e].h;
        g[e] = s->md[e].g;
    }
    const int E = Q->n_embd;
    const uint64_t key = 2u | (uint64_t)chain << 8 | (uint64_t)tela_exec_length_bucket(s->ex, pos + 1) << 32;
    if (tela_exec_graph_begin(s->ex, key)) {
        tela_model_ranks_fork(&s->ranks);
        for (int e = 1; e < s->ranks.n; e++)
            tela_exec_copy_from(s->ranks.rk[e].ex, s->md[e].in, sizeof in, s->ex, s->md[0].in, sizeof in, sizeof in, 1);
        mtp_block(Q, s, &Q->mtp[0], h, mbp);
        for (int e = 0; e < s->ranks.n; e++)
            tela_exec_rmsnorm(s->ranks.rk[e].ex, s->md[e].g, E, s->md[e].x, E, Q->mtp[0].out_norm_b[e], E, 1, Q->eps);
        mtp_head_logits(Q, s, g, 1);
        tela_exec_argmax(s->ex, s->mtp_logits, Q->mtp_vocab, s->mtp_pick);
        tela_model_ranks_end(&s->ranks);
    }
    TELA_TRY(tela_exec_graph_end(s->ex));
    if (logits) TELA_TRY(tela_exec_download(s->ex, logits, s->mtp_logits, (size_t)Q->n_vocab * sizeof(float)));
    if (pick) TELA_TRY(tela_exec_download(s->ex, pick, s->mtp_pick, sizeof *pick));
    TELA_TRY(tela_exec_sync(s->ex));
    return tela_model_ranks_sync(&s->ranks);
}

/* One draft step of the MTP block for several of the engine's sequences
 * (see tela_arch.mtp_draft_batch): their tokens as one batch of the block,
 * the hidden states gathered by slot (the last position's, or the slot's
 * previous draft output with chain), each output normed back into its
 * slot's mtp_g row, and the logits rows downloaded. */
static tela_status qwen35_mtp_draft_batch(const tela_model *m, void *state, const tela_mtp_query *qs, int n, bool chain,
                                          float *logits, int32_t *picks) {
    const qwen35_model *Q = m->impl;
    qwen35_state *s = state;
    if (!s->mtp_kv || !s->md || !s->md[0].hin)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: batched MTP drafting needs the engine's state with the MTP block",
                           m->path);
    if (n <= 0 || n > s->n_seq)
        return tela_errorf(TELA_ERR_ARG, "MTP draft: %d sequences (the state has %d slots)", n, s->n_seq);
    tela_exec *ex = s->ex;
    const int E = Q->n_embd;
    for (int i = 0; i < n; i++) {
        if (qs[i].slot < 0 || qs[i].slot >= s->n_seq || qs[i].pos < 0 || qs[i].pos >= s->n_ctx || qs[i].tok < 0 ||
            qs[i].tok >= Q->n_vocab)
            return tela_errorf(TELA_ERR_ARG, "MTP draft: token %d at position %d of slot %d is out of range", qs[i].tok,
                               qs[i].pos, qs[i].slot);
        s->mtp_seqs[i] = (tela_batch_seq){i, 1, qs[i].pos, qs[i].slot, qs[i].blocks};
        s->mtp_tok[i] = qs[i].tok;
        s->mtp_idx[i] = qs[i].slot;
    }
    tela_batch mb[TELA_MODEL_MAX_RANKS];
    const tela_batch *mbp[TELA_MODEL_MAX_RANKS];
    const float *h[TELA_MODEL_MAX_RANKS];
    for (int e = 0; e < s->ranks.n; e++) { /* (eager: each exec takes its own upload) */
        tela_exec *exe = s->ranks.rk[e].ex;
        qwen35_mtp_acts *d = &s->md[e];
        TELA_TRY(tela_exec_set_batch_seqs(exe, &mb[e], d->tokd, d->posd, s->mtp_tok, s->mtp_seqs, n));
        tela_exec_copy_rows(exe, d->hin, E, chain ? d->g : d->h, E, s->mtp_idx, n, E);
        mbp[e] = &mb[e];
        h[e] = d->hin;
    }
    mtp_block(Q, s, &Q->mtp[0], h, mbp);
    for (int e = 0; e < s->ranks.n; e++) {
        tela_exec *exe = s->ranks.rk[e].ex;
        qwen35_mtp_acts *d = &s->md[e];
        tela_exec_rmsnorm(exe, d->hin, E, d->x, E, Q->mtp[0].out_norm_b[e], E, n, Q->eps);
        for (int i = 0; i < n; i++)
            tela_exec_copy_rows(exe, d->g + (size_t)qs[i].slot * E, E, d->hin + (size_t)i * E, E, ROW0, 1, E);
    }
    mtp_head_logits(Q, s, h, n);
    if (picks) {
        if (!s->io.picks)
            TELA_TRY(tela_backend_alloc(tela_exec_backend(ex), (size_t)s->n_batch * sizeof(int32_t), "greedy picks",
                                        (void **)&s->io.picks));
        tela_exec_argmax_rows(ex, s->mtp_logits, Q->n_vocab, n, s->io.picks);
        TELA_TRY(tela_exec_download(ex, picks, s->io.picks, (size_t)n * sizeof(int32_t)));
    }
    if (logits) TELA_TRY(tela_exec_download(ex, logits, s->mtp_logits, (size_t)n * (size_t)Q->n_vocab * sizeof(float)));
    TELA_TRY(tela_exec_sync(ex));
    return tela_model_ranks_sync(&s->ranks);
}

static tela_status qwen35_forward(const tela_model *m, void *state, const int32_t *tokens, int32_t n, int32_t n_past,
                                  const tela_forward_out *out) {
    qwen35_state *s = state;
    if (n <= 0 || n_past < 0 || n_past > s->n_ctx - n)
        return tela_errorf(TELA_ERR_INTERNAL, "qwen35 forward: %d tokens at position %d do not fit %d", n, n_past,
                           s->n_ctx);
    s->keep_n[0] = 0;
    if (out->keep_states && qwen35_keeps_states(m, s)) {
        TELA_TRY(keep_reserve(m, s, n));
        s->keeping[0] = true;
        s->keep_pos0[0] = n_past;
    }
    tela_status st = tela_model_run_steps(m, state, forward_output, &s->io, tokens, n, n_past, out);
    if (st == TELA_OK) st = tela_model_ranks_sync(&s->ranks);
    if (st == TELA_OK && s->keeping[0]) s->keep_n[0] = n;
    s->keeping[0] = false;
    return st;
}

/* A slot's recurrent state after the first n_keep tokens of its last
 * pass: each GDN layer's kept state of that token, and its conv state (the
 * last kernel-1 conv inputs up to it). */
static tela_status qwen35_slot_rewind(const tela_model *m, void *state, int slot, int32_t n_keep) {
    const qwen35_model *Q = m->impl;
    qwen35_state *s = state;
    if (slot < 0 || slot >= s->n_seq || s->keep_n[slot] <= 0 || n_keep < 1 || n_keep > s->keep_n[slot])
        return tela_errorf(TELA_ERR_ARG, "qwen35: cannot rewind slot %d to %d tokens of a pass that kept %d states",
                           slot, n_keep, slot >= 0 && slot < s->n_seq ? s->keep_n[slot] : 0);
    const int hist = Q->conv_k - 1;
    const int64_t cd = r_conv_dim(Q), rec = (int64_t)(s->rec_floats / (size_t)Q->world);
    /* each GDN layer's recurrent state and conv window (each rank's part),
     * one launch (the spans' room was made with the kept states) */
    for (int e = 0; e < s->ranks.n; e++) { /* each exec its ranks' spans */
        tela_copy_span *sp = s->rewind_spans;
        int n_sp = 0;
        for (int l = 0; l < Q->n_layer; l++) {
            const qwen35_layer *ly = &Q->layers[l];
            if (ly->is_attn || ly->slot < 0) continue;
            for (int r = 0; r < Q->world; r++) {
                if (rank_exec_of(s, r) != e) continue;
                sp[n_sp++] = (tela_copy_span){rec_state_at(Q, s, slot, ly->slot, r),
                                              keep_rec_at(Q, s, slot, ly->slot, r) + (size_t)(n_keep - 1) * rec, rec};
                sp[n_sp++] = (tela_copy_span){conv_state_at(Q, s, slot, ly->slot, r),
                                              keep_conv_at(Q, s, slot, ly->slot, r) + (size_t)n_keep * cd, hist * cd};
            }
        }
        tela_exec_copy_spans(s->ranks.rk[e].ex, sp, n_sp);
        if (s->ranks.n > 1) TELA_TRY(tela_exec_sync(s->ranks.rk[e].ex)); /* (the spans' room is reused) */
    }
    /* the MTP block continues from the hidden state of the last token kept:
     * mtp_h holds the pass's last step's (a verification pass is one step;
     * a token of an earlier step leaves the block a stale start, which
     * only costs drafts) */
    const int last0 = (s->keep_n[slot] - 1) / s->n_batch * s->n_batch; /* the last step's first token */
    const int tok0 = s->keep_tok0 ? s->keep_tok0[slot] : 0;           /* the run's first row in that step */
    for (int e = 0; e < s->ranks.n && s->md && n_keep - 1 >= last0; e++)
        tela_exec_copy_rows(s->ranks.rk[e].ex, s->md[e].h + (size_t)slot * Q->n_embd, Q->n_embd,
                            s->md[e].h + (size_t)(s->n_seq + tok0 + n_keep - 1 - last0) * Q->n_embd, Q->n_embd, ROW0,
                            1, Q->n_embd);
    for (int e = 1; e < s->ranks.n; e++) TELA_TRY(tela_exec_sync(s->ranks.rk[e].ex));
    s->keep_n[slot] = 0;
    return tela_exec_sync(s->ex);
}

/* Runs with keep_states keep their slot's states (the room for the
 * longest of them reserved first); every run's slot forgets what it kept
 * before. */
static tela_status qwen35_forward_batch(const tela_model *m, void *state, const tela_seq_run *runs, int n_runs,
                                        float *logits, int32_t *picks) {
    qwen35_state *s = state;
    const bool keeps = qwen35_keeps_states(m, s);
    int keep_max = 0;
    for (int i = 0; i < n_runs; i++) {
        s->keep_n[runs[i].slot] = 0;
        if (keeps && runs[i].keep_states && runs[i].n > keep_max) keep_max = runs[i].n;
    }
    if (keep_max > 0) TELA_TRY(keep_reserve(m, s, keep_max));
    for (int i = 0, t = 0; i < n_runs; t += runs[i++].n)
        if (keep_max > 0 && runs[i].keep_states) {
            s->keeping[runs[i].slot] = true;
            s->keep_pos0[runs[i].slot] = runs[i].n_past;
            if (s->keep_tok0) s->keep_tok0[runs[i].slot] = t;
        }
    tela_status st = tela_model_run_batch(m, state, forward_output, &s->io, runs, n_runs, logits, picks);
    if (st == TELA_OK) st = tela_model_ranks_sync(&s->ranks);
    for (int i = 0; keep_max > 0 && i < n_runs; i++)
        if (runs[i].keep_states) {
            s->keeping[runs[i].slot] = false;
            if (st == TELA_OK) s->keep_n[runs[i].slot] = runs[i].n;
        }
    return st;
}

static int qwen35_layer_kind(const tela_model *m, int layer) {
    const qwen35_model *Q = m->impl;
    return Q->layers[layer].is_attn ? TELA_LAYER_ATTENTION : TELA_LAYER_DELTANET;
}

const tela_arch tela_arch_qwen35 = {
    .name = "qwen35",
    .backends = 1u << TELA_BACKEND_CPU | 1u << TELA_BACKEND_CUDA,
    .hf_model_types = qwen35_hf_types,
    .load = qwen35_load,
    .free = qwen35_free,
    .state_create = qwen35_state_create,
    .state_free = qwen35_state_free,
    .state_bytes = qwen35_state_bytes,
    .state_reset = qwen35_state_reset,
    .state_size = qwen35_state_size,
    .state_save = qwen35_state_save,
    .state_load = qwen35_state_load,
    .forward = qwen35_forward,
    .forward_batch = qwen35_forward_batch,
    .slot_bytes = qwen35_slot_bytes,
    .slot_reset = qwen35_slot_reset,
    .slot_save = qwen35_slot_save,
    .slot_load = qwen35_slot_load,
    .kv_copy_rows = qwen35_kv_copy_rows,
    .keeps_states = qwen35_keeps_states,
    .slot_rewind = qwen35_slot_rewind,
    .mtp_layers = qwen35_mtp_layers,
    .mtp_draft = qwen35_mtp_draft,
    .mtp_draft_batch = qwen35_mtp_draft_batch,
    .layer_kind = qwen35_layer_kind,
    .forward_naive = NULL,
    .tensor_parallel = true,
    .rank_devices = true,
};
