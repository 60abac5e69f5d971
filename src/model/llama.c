/* llama.c: the Llama architecture (Llama 2/3.x and look-alikes): loading
 * from GGUF ("llama") or a Hugging Face LlamaForCausalLM checkpoint, the
 * session state (an f32 KV cache), and the forward pass.
 *
 * The computation, per token x (n_embd floats), for each layer:
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = Wq h, Wk h, Wv h          (n_head / n_kv_head heads of head_dim)
 *     q, k = rope(q, pos), rope(k, pos)
 *     a = softmax(q k^T / sqrt(head_dim), causal) v   (query head j reads KV
 *                                          head j / (n_head / n_kv_head))
 *     x = x + Wo a
 *     h = rmsnorm(x) * ffn_norm
 *     x = x + Wdown (silu(Wgate h) * Wup h)
 * then logits = Woutput (rmsnorm(x) * output_norm), Woutput = the token
 * embedding when tied.
 *
 * RoPE and the two sources: Hugging Face rotates the pairs (x[i], x[i+d/2])
 * of each head ("rotate_half"). llama.cpp's converter permutes the rows of Wq
 * and Wk so that the same rotation acts on adjacent pairs (x[2i], x[2i+1]).
 * The attention scores q.k are unchanged by a permutation applied to both q
 * and k, so we keep the weights as stored and rotate adjacent pairs for GGUF
 * and halves for HF checkpoints.
 *
 * The rotation angle of pair i at position p is p * base^(-2i/n_rot) /
 * factor[i]; the factors come from the GGUF tensor rope_freqs.weight, or
 * from config.json's Llama-3 rope scaling (computed as transformers does),
 * or are all 1.
 *
 * Tensor parallelism (tela_model_params.tensor_parallel = N, issue 16,
 * docs/MULTI-GPU.md): each layer is split over N ranks by model/shard.c's
 * plan: rank r holds the query heads of its KV heads (rows of wq, wk, wv;
 * columns of wo; with more ranks than KV heads, a copy of the KV head its
 * query heads read) and 1/N of the FFN (rows of gate and up; columns of
 * down), and its own KV cache of its KV heads. The products through wo and
 * down then give partial sums of the residual update, which are added up
 * (the all-reduce) before the residual add. The output head is split by
 * vocabulary, each rank filling its columns of the logits, and so is the
 * token embedding (each rank's rows, zeros for the other ids, summed:
 * tela_model_embed). The ranks run one after another on the model's one
 * device for now. */
#include "backend/cpu/ops.h" /* the naive oracle runs on the host */
#include "model/model.h"
#include "util/error.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fields ending in _b are the backend's copies (backend memory) of the
 * host arrays of the same name, which the naive oracle reads. */
typedef struct llama_layer {
    float *attn_norm, *ffn_norm;
    const float *attn_norm_b, *ffn_norm_b;
    tela_mat wq, wk, wv, wo;
    tela_model_ffn ffn;
} llama_layer;

typedef struct llama_model {
    int n_vocab, n_embd, n_layer, n_ff;
    int n_head, n_kv_head, head_dim, v_dim, n_rot;
    float eps;
    double *inv_freq;        /* [n_rot/2] */
    const double **inv_freq_b; /* [world]: each rank's copy (one copy for all at one device) */
    tela_rope_mode rope_mode;
    tela_mat tok_embd, output;
    tela_mat *embd;          /* the token embedding as the ranks hold it: world row ranges (&tok_embd at one) */
    tela_mat *heads;         /* the output head as the ranks hold it: world row ranges of the vocabulary
                                in order (&output at world 1) */
    float *output_norm;
    const float **output_norm_b; /* [world], as inv_freq_b */
    llama_layer *layers;     /* rank 0's (the whole layers without tensor parallelism) */
    int world;               /* ranks each layer is split across (1: none) */
    llama_layer **rank_layers; /* [world]: rank r's parts of the layers; [0] == layers */
    int r_head, r_kv_head, r_ff; /* a rank's query heads, KV heads and FFN width */
    const bool *skip;        /* [n_layer] layers bypassed, or NULL */
    int *kv_slot;            /* [n_layer] the layer's index in the KV cache (-1: skipped) */
    int n_kv_layers;
} llama_model;

/* The activations of one step on one exec (a rank's, with a rank per
 * device; else every rank's in turn). */
typedef struct llama_acts {
    float *x, *xb, *q, *k, *v, *att, *gate, *cs;
    float *part;             /* with tensor parallelism: the ranks' partial sums of a residual update */
} llama_acts;

/* A session: the KV cache and the activations of one step of up to
 * n_batch tokens, all in backend memory. */
typedef struct llama_state {
    tela_exec *ex;
    int32_t n_ctx;
    int n_batch;
    tela_kv_cache **kv;      /* [world]: each rank's KV heads (on its exec) */
    int n_kv;
    tela_model_ranks ranks;  /* the execs: one, or a rank's each (ranks.n) */
    llama_acts *acts;        /* [ranks.n] */
    tela_model_io io;        /* the step's tokens and positions, logits, greedy pick (rank 0's) */
} llama_state;

/* The exec and activations that rank r's work runs on. */
static tela_exec *rank_ex(const llama_state *s, int r) { return s->ranks.rk[s->ranks.n > 1 ? r : 0].ex; }
static llama_acts *rank_acts(const llama_state *s, int r) { return &s->acts[s->ranks.n > 1 ? r : 0]; }

static const char *const llama_hf_types[] = {"llama", NULL};

/* --------------------------------------------------------------- load */

static tela_status check_hparams(const tela_model *m, const llama_model *L) {
    const int big = 1 << 20;
    if (L->n_embd <= 0 || L->n_embd > big || L->n_layer <= 0 || L->n_layer > 4096 || L->n_ff <= 0 ||
        L->n_ff > big || L->n_head <= 0 || L->n_head > 4096 || L->n_kv_head <= 0 || L->head_dim <= 0 ||
        L->head_dim > 65536 || L->v_dim <= 0 || L->v_dim > 65536 || L->n_vocab <= 0 || L->n_vocab > (1 << 28))
        return tela_errorf(TELA_ERR_FORMAT,
                           "%s: implausible hyperparameters (n_embd %d, n_layer %d, n_ff %d, n_head %d, n_kv_head %d, "
                           "head_dim %d, v_dim %d, n_vocab %d)",
                           m->path, L->n_embd, L->n_layer, L->n_ff, L->n_head, L->n_kv_head, L->head_dim, L->v_dim,
                           L->n_vocab);
    if (L->n_head % L->n_kv_head != 0)
        return tela_errorf(TELA_ERR_FORMAT, "%s: %d attention heads is not a multiple of %d KV heads", m->path,
                           L->n_head, L->n_kv_head);
    if (L->n_rot <= 0 || L->n_rot > L->head_dim || L->n_rot % 2)
        return tela_errorf(TELA_ERR_FORMAT, "%s: rotary dimension %d must be even and at most head_dim %d", m->path,
                           L->n_rot, L->head_dim);
    if (!(L->eps > 0.0f) || !(L->eps < 1.0f))
        return tela_errorf(TELA_ERR_FORMAT, "%s: RMSNorm epsilon %g is out of range", m->path, (double)L->eps);
    return TELA_OK;
}

/* Layer tensor names of the two sources. */
typedef struct llama_names {
    const char *tok_embd, *output_norm, *output;
    const char *attn_norm, *ffn_norm, *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down; /* printf patterns (%d) */
} llama_names;

static const llama_names gguf_names = {
    "token_embd.weight", "output_norm.weight", "output.weight",
    "blk.%d.attn_norm.weight", "blk.%d.ffn_norm.weight", "blk.%d.attn_q.weight", "blk.%d.attn_k.weight",
    "blk.%d.attn_v.weight", "blk.%d.attn_output.weight", "blk.%d.ffn_gate.weight", "blk.%d.ffn_up.weight",
    "blk.%d.ffn_down.weight",
};

static const llama_names hf_names = {
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
    "model.layers.%d.input_layernorm.weight", "model.layers.%d.post_attention_layernorm.weight",
    "model.layers.%d.self_attn.q_proj.weight", "model.layers.%d.self_attn.k_proj.weight",
    "model.layers.%d.self_attn.v_proj.weight", "model.layers.%d.self_attn.o_proj.weight",
    "model.layers.%d.mlp.gate_proj.weight", "model.layers.%d.mlp.up_proj.weight",
    "model.layers.%d.mlp.down_proj.weight",
};

static tela_status load_layer_vec(tela_model *m, const char *pattern, int l, int64_t n, float **out) {
    char name[128];
    snprintf(name, sizeof name, pattern, l);
    return tela_model_get_vec(m, name, n, false, out);
}

static tela_shard_dims shard_dims(const llama_model *L) {
    return (tela_shard_dims){.n_embd = L->n_embd, .n_ff = L->n_ff, .n_vocab = L->n_vocab, .n_head = L->n_head,
                             .n_kv_head = L->n_kv_head, .head_dim = L->head_dim};
}

/* Rank r's part of a layer matrix (the whole matrix, as stored, at world 1). */
static tela_status load_layer_shard(tela_model *m, const llama_model *L, const char *pattern, int l, int r,
                                    tela_shard_role role, int64_t rows, int64_t cols, tela_mat *out) {
    char name[128];
    snprintf(name, sizeof name, pattern, l);
    const tela_shard_dims d = shard_dims(L);
    tela_shard sh;
    tela_shard_of(&d, role, r, L->world, &sh);
    return tela_model_get_mat_shard(m, name, rows, cols, &sh, out);
}

/* The split of the layers over L->world ranks: the plan's checks, and
 * the sizes of a rank's part. */
static tela_status plan_ranks(tela_model *m, llama_model *L) {
    L->world = m->tp_world > 1 ? m->tp_world : 1;
    if (L->world > 1) {
        if (L->v_dim != L->head_dim)
            return tela_errorf(TELA_ERR_UNSUPPORTED,
                               "%s: tensor parallelism needs value heads as wide as key heads (%d, %d)", m->path,
                               L->v_dim, L->head_dim);
        const tela_shard_dims d = shard_dims(L);
        tela_status s = tela_shard_plan_check(&d, L->world);
        if (s != TELA_OK) return tela_error_prefix(s, "%s: ", m->path);
    }
    L->r_head = L->n_head / L->world;
    const tela_shard_dims d = shard_dims(L);
    L->r_kv_head = tela_shard_kv_heads(&d, L->world); /* with more ranks than KV heads, copies */
    L->r_ff = L->n_ff / L->world;
    return TELA_OK;
}

static tela_status load_weights(tela_model *m, llama_model *L, const llama_names *nm, bool tied) {
    TELA_TRY(plan_ranks(m, L));
    TELA_TRY(tela_model_get_mat(m, nm->tok_embd, L->n_vocab, L->n_embd, false, &L->tok_embd));
    TELA_TRY(tela_model_get_vec(m, nm->output_norm, L->n_embd, false, &L->output_norm));
    if (tied) {
        L->output = L->tok_embd;
    } else {
        TELA_TRY(tela_model_get_mat(m, nm->output, L->n_vocab, L->n_embd, false, &L->output));
    }
    L->heads = &L->output;
    L->embd = &L->tok_embd;
    if (L->world > 1) { /* the head and the embedding by vocabulary: rank r's rows */
        TELA_TRY(tela_model_get_vocab_parts(m, tied ? nm->tok_embd : nm->output, L->n_vocab, L->n_embd, &L->heads));
        TELA_TRY(tela_model_get_vocab_parts(m, nm->tok_embd, L->n_vocab, L->n_embd, &L->embd));
        /* the whole tables are not prepared for any backend: nothing may
         * read them (an empty matrix, so a use fails on every backend) */
        L->tok_embd = L->output = (tela_mat){.name = "the token embedding (split by rank)"};
    }
    L->rank_layers = tela_model_alloc(m, (size_t)L->world * sizeof *L->rank_layers);
    if (!L->rank_layers) return TELA_ERR_NOMEM;
    for (int r = 0; r < L->world; r++) {
        L->rank_layers[r] = tela_model_alloc(m, (size_t)L->n_layer * sizeof *L->layers);
        if (!L->rank_layers[r]) return TELA_ERR_NOMEM;
    }
    L->layers = L->rank_layers[0];
    int64_t q_dim = (int64_t)L->n_head * L->head_dim, k_dim = (int64_t)L->n_kv_head * L->head_dim;
    int64_t v_dim = (int64_t)L->n_kv_head * L->v_dim, o_in = (int64_t)L->n_head * L->v_dim;
    for (int l = 0; l < L->n_layer; l++) {
        llama_layer *ly0 = &L->layers[l];
        TELA_TRY(load_layer_vec(m, nm->attn_norm, l, L->n_embd, &ly0->attn_norm));
        TELA_TRY(load_layer_vec(m, nm->ffn_norm, l, L->n_embd, &ly0->ffn_norm));
        for (int r = 0; r < L->world; r++) { /* the norms are whole on every rank */
            llama_layer *ly = &L->rank_layers[r][l];
            ly->attn_norm = ly0->attn_norm;
            ly->ffn_norm = ly0->ffn_norm;
            TELA_TRY(load_layer_shard(m, L, nm->wq, l, r, TELA_ROLE_WQ, q_dim, L->n_embd, &ly->wq));
            TELA_TRY(load_layer_shard(m, L, nm->wk, l, r, TELA_ROLE_WK, k_dim, L->n_embd, &ly->wk));
            TELA_TRY(load_layer_shard(m, L, nm->wv, l, r, TELA_ROLE_WV, v_dim, L->n_embd, &ly->wv));
            TELA_TRY(load_layer_shard(m, L, nm->wo, l, r, TELA_ROLE_WO, L->n_embd, o_in, &ly->wo));
            TELA_TRY(load_layer_shard(m, L, nm->w_gate, l, r, TELA_ROLE_FFN_GATE, L->n_ff, L->n_embd, &ly->ffn.w_gate));
            TELA_TRY(load_layer_shard(m, L, nm->w_up, l, r, TELA_ROLE_FFN_UP, L->n_ff, L->n_embd, &ly->ffn.w_up));
            TELA_TRY(load_layer_shard(m, L, nm->w_down, l, r, TELA_ROLE_FFN_DOWN, L->n_embd, L->n_ff, &ly->ffn.w_down));
        }
    }
    return TELA_OK;
}

/* Gives the backend its copies: norm weights and RoPE frequencies, and
 * every matrix (the embedding table is only read by rows); with a rank per
 * device, each rank's to its own. */
static tela_status prepare_backend(tela_model *m, llama_model *L) {
    const int n_dev = m->n_dev > 1 ? L->world : 1; /* backends that take copies */
    TELA_TRY(tela_model_const_ranks(m, L->inv_freq, (size_t)(L->n_rot / 2) * sizeof(double),
                                    (const void ***)&L->inv_freq_b));
    TELA_TRY(tela_model_const_ranks(m, L->output_norm, (size_t)L->n_embd * sizeof(float),
                                    (const void ***)&L->output_norm_b));
    const size_t cap = (size_t)L->world * (2 + (size_t)L->n_layer * 7);
    tela_mat **list;
    tela_mat_use *uses;
    TELA_TRY(tela_model_mat_lists(m, cap, &list, &uses));
    size_t n = 0;
    tela_status s = TELA_OK;
    for (int r = 0; r < L->world && s == TELA_OK; r++) {
        if (r < n_dev) n = 0; /* a list a backend */
        uses[n] = TELA_MAT_ROWS; /* (&L->tok_embd and &L->output at one rank) */
        list[n++] = &L->embd[r];
        uses[n] = TELA_MAT_MATMUL;
        list[n++] = &L->heads[r];
        for (int l = 0; l < L->n_layer && s == TELA_OK; l++) {
            if (L->skip && L->skip[l]) continue; /* a skipped layer's weights stay in the file */
            llama_layer *ly = &L->rank_layers[r][l], *ly0 = &L->rank_layers[0][l];
            const size_t nb = (size_t)L->n_embd * sizeof(float);
            if (r < n_dev) { /* the norms are whole on every rank */
                s = tela_model_const_rank(m, r, ly0->attn_norm, nb, (const void **)&ly->attn_norm_b);
                if (s == TELA_OK) s = tela_model_const_rank(m, r, ly0->ffn_norm, nb, (const void **)&ly->ffn.norm);
            } else {
                ly->attn_norm_b = ly0->attn_norm_b;
                ly->ffn.norm = ly0->ffn.norm;
            }
            ly->ffn_norm_b = ly->ffn.norm;
            tela_mat *mats[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->ffn.w_gate, &ly->ffn.w_up, &ly->ffn.w_down};
            for (size_t i = 0; i < 7; i++) {
                uses[n] = TELA_MAT_MATMUL;
                list[n++] = mats[i];
            }
        }
        if (s == TELA_OK && (n_dev > 1 || r == L->world - 1))
            s = tela_model_prepare_mats_rank(m, n_dev > 1 ? r : 0, list, uses, n);
    }
    free(list);
    free(uses);
    return s;
}

static tela_status u32_to_int(const tela_model *m, const char *key, uint32_t v, int *out) {
    if (v > (uint32_t)INT32_MAX) return tela_errorf(TELA_ERR_FORMAT, "%s: %s.%s = %u is too large", m->path,
                                                    m->arch_name, key, v);
    *out = (int)v;
    return TELA_OK;
}

static tela_status load_gguf(tela_model *m, llama_model *L) {
    uint32_t n_embd = 0, n_layer = 0, n_ff = 0, n_head = 0, n_kv_head = 0, head_dim = 0, v_dim = 0;
    uint32_t n_rot = 0, n_ctx_train = 0, n_vocab = 0;
    float base = 10000.0f, eps = 1e-5f;
    TELA_TRY(tela_model_gguf_u32(m, "embedding_length", false, &n_embd));
    TELA_TRY(tela_model_gguf_u32(m, "block_count", false, &n_layer));
    TELA_TRY(tela_model_gguf_u32(m, "feed_forward_length", false, &n_ff));
    TELA_TRY(tela_model_gguf_u32(m, "attention.head_count", false, &n_head));
    n_kv_head = n_head;
    TELA_TRY(tela_model_gguf_u32(m, "attention.head_count_kv", true, &n_kv_head));
    head_dim = n_head ? n_embd / n_head : 0;
    TELA_TRY(tela_model_gguf_u32(m, "attention.key_length", true, &head_dim));
    v_dim = head_dim;
    TELA_TRY(tela_model_gguf_u32(m, "attention.value_length", true, &v_dim));
    n_rot = head_dim;
    TELA_TRY(tela_model_gguf_u32(m, "rope.dimension_count", true, &n_rot));
    TELA_TRY(tela_model_gguf_u32(m, "context_length", true, &n_ctx_train));
    TELA_TRY(tela_model_gguf_f32(m, "rope.freq_base", true, &base));
    TELA_TRY(tela_model_gguf_f32(m, "attention.layer_norm_rms_epsilon", true, &eps));
    const tela_tensor *te = tela_model_find_tensor(m, gguf_names.tok_embd);
    if (!te) return tela_errorf(TELA_ERR_NOT_FOUND, "%s: tensor '%s' is missing", m->path, gguf_names.tok_embd);
    n_vocab = te->ne[1] > 0 && te->ne[1] <= INT32_MAX ? (uint32_t)te->ne[1] : 0;
    TELA_TRY(tela_model_gguf_u32(m, "vocab_size", true, &n_vocab));

    TELA_TRY(u32_to_int(m, "embedding_length", n_embd, &L->n_embd));
    TELA_TRY(u32_to_int(m, "block_count", n_layer, &L->n_layer));
    TELA_TRY(u32_to_int(m, "feed_forward_length", n_ff, &L->n_ff));
    TELA_TRY(u32_to_int(m, "attention.head_count", n_head, &L->n_head));
    TELA_TRY(u32_to_int(m, "attention.head_count_kv", n_kv_head, &L->n_kv_head));
    TELA_TRY(u32_to_int(m, "attention.key_length", head_dim, &L->head_dim));
    TELA_TRY(u32_to_int(m, "attention.value_length", v_dim, &L->v_dim));
    TELA_TRY(u32_to_int(m, "rope.dimension_count", n_rot, &L->n_rot));
    TELA_TRY(u32_to_int(m, "vocab_size", n_vocab, &L->n_vocab));
    L->eps = eps;
    m->info.n_ctx_train = n_ctx_train <= INT32_MAX ? (int32_t)n_ctx_train : INT32_MAX;
    TELA_TRY(check_hparams(m, L));
    if (!(base > 0.0f) || !isfinite(base))
        return tela_errorf(TELA_ERR_FORMAT, "%s: %s.rope.freq_base = %g is not a positive number", m->path,
                           m->arch_name, (double)base);

    /* Rope scaling: per-frequency factors (Llama 3), or a linear factor. */
    float *factors = NULL;
    TELA_TRY(tela_model_get_vec(m, "rope_freqs.weight", L->n_rot / 2, true, &factors));
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    if (tela_gguf_find(m->gguf, key)) {
        tela_gguf_str type;
        TELA_TRY(tela_gguf_get_str(m->gguf, key, &type));
        bool is_none = type.len == 4 && !memcmp(type.ptr, "none", 4);
        bool is_linear = type.len == 6 && !memcmp(type.ptr, "linear", 6);
        if (!is_none && !is_linear)
            return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: rope scaling type '%.*s' is not supported", m->path,
                               (int)(type.len > 64 ? 64 : type.len), type.ptr);
        float factor = 1.0f;
        TELA_TRY(tela_model_gguf_f32(m, "rope.scaling.factor", true, &factor));
        if (is_linear && factor != 1.0f) {
            if (!(factor > 0.0f)) return tela_errorf(TELA_ERR_FORMAT, "%s: rope scaling factor %g", m->path,
                                                     (double)factor);
            if (!factors) {
                factors = tela_model_alloc(m, (size_t)(L->n_rot / 2) * sizeof(float));
                if (!factors) return TELA_ERR_NOMEM;
                for (int i = 0; i < L->n_rot / 2; i++) factors[i] = 1.0f;
            }
            for (int i = 0; i < L->n_rot / 2; i++) factors[i] *= factor;
        }
    }
    if (factors)
        for (int i = 0; i < L->n_rot / 2; i++)
            if (!(factors[i] > 0.0f) || !isfinite(factors[i]))
                return tela_errorf(TELA_ERR_FORMAT, "%s: rope_freqs.weight[%d] = %g is not a positive number",
                                   m->path, i, (double)factors[i]);
    L->inv_freq = tela_model_alloc(m, (size_t)(L->n_rot / 2) * sizeof(double));
    if (!L->inv_freq) return TELA_ERR_NOMEM;
    tela_rope_inv_freq(L->inv_freq, L->n_rot, base, factors);
    L->rope_mode = TELA_ROPE_ADJACENT;

    bool tied = tela_model_find_tensor(m, gguf_names.output) == NULL;
    return load_weights(m, L, &gguf_names, tied);
}

static tela_status hf_int(const tela_model *m, const char *key, bool optional, int *out) {
    int64_t v = *out;
    TELA_TRY(tela_model_json_int(m, m->hf_config, key, optional, &v));
    if (v < INT32_MIN || v > INT32_MAX)
        return tela_errorf(TELA_ERR_FORMAT, "%s: config.json '%s' = %lld is out of range", m->path, key,
                           (long long)v);
    *out = (int)v;
    return TELA_OK;
}

static tela_status load_hf(tela_model *m, llama_model *L) {
    const void *cfg = m->hf_config;
    bool flag = false;
    TELA_TRY(tela_model_json_bool(m, cfg, "attention_bias", true, &flag));
    if (flag) return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: attention_bias = true is not supported", m->path);
    TELA_TRY(tela_model_json_bool(m, cfg, "mlp_bias", true, &flag));
    if (flag) return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: mlp_bias = true is not supported", m->path);

    TELA_TRY(hf_int(m, "hidden_size", false, &L->n_embd));
    TELA_TRY(hf_int(m, "num_hidden_layers", false, &L->n_layer));
    TELA_TRY(hf_int(m, "intermediate_size", false, &L->n_ff));
    TELA_TRY(hf_int(m, "num_attention_heads", false, &L->n_head));
    TELA_TRY(hf_int(m, "vocab_size", false, &L->n_vocab));
    L->n_kv_head = L->n_head;
    TELA_TRY(hf_int(m, "num_key_value_heads", true, &L->n_kv_head));
    L->head_dim = L->n_head > 0 ? L->n_embd / L->n_head : 0;
    TELA_TRY(hf_int(m, "head_dim", true, &L->head_dim));
    L->v_dim = L->head_dim;
    L->n_rot = L->head_dim;
    int n_ctx_train = 2048;
    TELA_TRY(hf_int(m, "max_position_embeddings", true, &n_ctx_train));
    m->info.n_ctx_train = n_ctx_train;
    double eps = 1e-6;
    TELA_TRY(tela_model_json_float(m, cfg, "rms_norm_eps", true, &eps));
    L->eps = (float)eps;
    TELA_TRY(check_hparams(m, L));

    /* Rope: transformers 4 keeps rope_theta at the top and the scaling in
     * rope_scaling; transformers 5 puts both in rope_parameters. */
    double base = 10000.0;
    TELA_TRY(tela_model_json_float(m, cfg, "rope_theta", true, &base));
    const void *rope = tela_model_json_object(cfg, "rope_parameters");
    if (!rope) rope = tela_model_json_object(cfg, "rope_scaling");
    float *factors = NULL;
    if (rope) {
        TELA_TRY(tela_model_json_float(m, rope, "rope_theta", true, &base));
        const cJSON *type = cJSON_GetObjectItemCaseSensitive((const cJSON *)rope, "rope_type");
        if (!type) type = cJSON_GetObjectItemCaseSensitive((const cJSON *)rope, "type");
        const char *ts = type && cJSON_IsString(type) ? type->valuestring : "default";
        if (!strcmp(ts, "llama3") || !strcmp(ts, "linear")) {
            double factor = 1.0, low = 1.0, high = 4.0, orig = 8192.0;
            TELA_TRY(tela_model_json_float(m, rope, "factor", false, &factor));
            if (!(factor > 0.0)) return tela_errorf(TELA_ERR_FORMAT, "%s: rope factor %g", m->path, factor);
            factors = tela_model_alloc(m, (size_t)(L->n_rot / 2) * sizeof(float));
            if (!factors) return TELA_ERR_NOMEM;
            if (!strcmp(ts, "llama3")) {
                TELA_TRY(tela_model_json_float(m, rope, "low_freq_factor", false, &low));
                TELA_TRY(tela_model_json_float(m, rope, "high_freq_factor", false, &high));
                TELA_TRY(tela_model_json_float(m, rope, "original_max_position_embeddings", false, &orig));
                if (!(high > low) || !(low > 0.0) || !(orig > 0.0))
                    return tela_errorf(TELA_ERR_FORMAT, "%s: llama3 rope scaling needs high_freq_factor > "
                                       "low_freq_factor > 0 and original_max_position_embeddings > 0", m->path);
                tela_rope_llama3_factors(factors, L->n_rot, base, factor, low, high, orig);
            } else {
                for (int i = 0; i < L->n_rot / 2; i++) factors[i] = (float)factor;
            }
        } else if (strcmp(ts, "default") != 0) {
            return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: rope type '%s' is not supported", m->path, ts);
        }
    }
    if (!(base > 0.0)) return tela_errorf(TELA_ERR_FORMAT, "%s: rope_theta %g is not positive", m->path, base);
    L->inv_freq = tela_model_alloc(m, (size_t)(L->n_rot / 2) * sizeof(double));
    if (!L->inv_freq) return TELA_ERR_NOMEM;
    tela_rope_inv_freq(L->inv_freq, L->n_rot, base, factors);
    L->rope_mode = TELA_ROPE_HALVES;

    bool tied = false;
    TELA_TRY(tela_model_json_bool(m, cfg, "tie_word_embeddings", true, &tied));
    return load_weights(m, L, &hf_names, tied);
}

static tela_status llama_load(tela_model *m) {
    llama_model *L = tela_model_alloc(m, sizeof *L);
    if (!L) return TELA_ERR_NOMEM;
    m->impl = L;
    TELA_TRY(m->gguf ? load_gguf(m, L) : load_hf(m, L));
    TELA_TRY(tela_model_skip_mask(m, L->n_layer, &L->skip));
    L->kv_slot = tela_model_alloc(m, (size_t)L->n_layer * sizeof *L->kv_slot);
    if (!L->kv_slot) return TELA_ERR_NOMEM;
    for (int l = 0; l < L->n_layer; l++) L->kv_slot[l] = L->skip && L->skip[l] ? -1 : L->n_kv_layers++;
    TELA_TRY(prepare_backend(m, L));
    m->info.n_vocab = L->n_vocab;
    m->info.n_embd = L->n_embd;
    m->info.n_layer = L->n_layer;
    return TELA_OK;
}

/* Everything lives in the model's allocations. */
static void llama_free(tela_model *m) { m->impl = NULL; }

/* -------------------------------------------------------------- state */

static void llama_state_free(void *p) {
    llama_state *s = p;
    if (!s) return;
    for (int r = 0; r < s->n_kv && s->kv; r++) tela_kv_free(s->kv[r]);
    free(s->kv);
    for (int e = 0; e < s->ranks.n && s->acts; e++) {
        tela_backend *be = tela_exec_backend(s->ranks.rk[e].ex);
        const llama_acts *a = &s->acts[e];
        float *bufs[] = {a->x, a->xb, a->q, a->k, a->v, a->att, a->gate, a->cs, a->part};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tela_backend_free_mem(be, bufs[i]);
    }
    free(s->acts);
    tela_model_io_free(&s->io);
    tela_model_ranks_free(&s->ranks);
    free(s);
}

static tela_status llama_state_create(const tela_model *m, tela_exec *ex, const tela_state_params *p, void **out) {
    const llama_model *L = m->impl;
    *out = NULL;
    llama_state *s = calloc(1, sizeof *s);
    if (!s) return tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    s->ex = ex;
    s->n_ctx = p->n_ctx;
    const int pref = p->n_batch > 0 ? p->n_batch : tela_exec_preferred_batch(ex);
    s->n_batch = p->kv_block_size > 0 || p->n_ctx > pref ? pref : p->n_ctx;
    const bool paged = p->kv_block_size > 0;
    const tela_kv_shape shape = {L->n_kv_layers, paged ? p->kv_rows : p->n_ctx, L->r_kv_head, L->head_dim,
                                 L->v_dim, p->kv_dtype, paged ? p->kv_block_size : 0, p->n_ctx};
    const size_t nb = (size_t)s->n_batch;
    tela_status st = tela_model_ranks_init(m, &s->ranks, ex, s->n_batch, (int64_t)nb * L->n_embd, L->heads);
    if (st == TELA_OK) {
        s->kv = calloc((size_t)L->world, sizeof *s->kv);
        s->acts = calloc((size_t)s->ranks.n, sizeof *s->acts);
        if (!s->kv || !s->acts) st = tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    }
    for (int r = 0; r < L->world && st == TELA_OK; r++, s->n_kv++)
        st = tela_kv_create(rank_ex(s, r), &shape, &s->kv[r]);
    const size_t q_dim = (size_t)L->r_head * L->head_dim, k_dim = (size_t)L->r_kv_head * L->head_dim;
    const size_t v_dim = (size_t)L->r_kv_head * L->v_dim, att_dim = (size_t)L->r_head * L->v_dim;
    for (int e = 0; e < s->ranks.n && st == TELA_OK; e++) {
        llama_acts *a = &s->acts[e];
        const struct {
            float **buf;
            size_t floats;
            const char *what;
        } acts[] = {
            {&a->x, nb * L->n_embd, "activations"}, {&a->xb, nb * L->n_embd, "activations"},
            {&a->q, nb * q_dim, "queries"},         {&a->k, nb * k_dim, "keys"},
            {&a->v, nb * v_dim, "values"},          {&a->att, nb * att_dim, "attention outputs"},
            {&a->gate, nb * L->r_ff, "feed-forward activations"}, {&a->cs, nb * L->n_rot, "RoPE table"},
            {&a->part, L->world > 1 ? nb * L->n_embd : 0, "partial sums"},
        };
        tela_backend *be = tela_exec_backend(s->ranks.rk[e].ex);
        for (size_t i = 0; i < sizeof acts / sizeof acts[0] && st == TELA_OK; i++)
            if (acts[i].floats)
                st = tela_backend_alloc(be, acts[i].floats * sizeof(float), acts[i].what, (void **)acts[i].buf);
    }
    if (st == TELA_OK) st = tela_model_io_init(&s->io, ex, L->n_vocab, L->n_embd, s->n_batch);
    if (st != TELA_OK) {
        llama_state_free(s);
        return st;
    }
    *out = s;
    return TELA_OK;
}

static uint64_t llama_state_bytes(const tela_model *m, const tela_state_params *p, int n_batch) {
    const llama_model *L = m->impl;
    const bool paged = p->kv_block_size > 0;
    if (p->n_batch > 0) n_batch = p->n_batch;
    const uint64_t nb = (uint64_t)(!paged && p->n_ctx < n_batch ? p->n_ctx : n_batch);
    const uint64_t rows = (uint64_t)(paged ? p->kv_rows : p->n_ctx);
    /* with a rank per device, what one device holds: its rank's KV heads */
    const uint64_t kv_ranks = m->n_dev > 1 ? 1 : (uint64_t)L->world;
    const uint64_t kv = tela_kv_dtype_bytes(p->kv_dtype, (uint64_t)L->n_kv_layers * rows * kv_ranks *
                                                          (uint64_t)L->r_kv_head * (uint64_t)(L->head_dim + L->v_dim));
    const uint64_t row = (L->world > 1 ? 3ull : 2ull) * L->n_embd + (uint64_t)L->r_head * (L->head_dim + L->v_dim) +
                         (uint64_t)L->r_kv_head * (L->head_dim + L->v_dim) + 2ull * L->r_ff + (uint64_t)L->n_rot;
    return kv + nb * row * sizeof(float) + (uint64_t)L->n_vocab * sizeof(float);
}

static void llama_state_reset(const tela_model *m, void *state) {
    (void)m;
    llama_state *s = state;
    for (int r = 0; r < s->n_kv; r++) tela_kv_clear(rank_ex(s, r), s->kv[r]);
}

static size_t llama_state_size(const tela_model *m, const void *state, int32_t n_past) {
    (void)m;
    const llama_state *s = state;
    size_t n = 0;
    for (int r = 0; r < s->n_kv; r++) n += tela_kv_image_bytes(s->kv[r], n_past);
    return n;
}

static tela_status llama_state_save(const tela_model *m, const void *state, int32_t n_past, void *dst) {
    (void)m;
    const llama_state *s = state;
    unsigned char *p = dst;
    for (int r = 0; r < s->n_kv; p += tela_kv_image_bytes(s->kv[r], n_past), r++) /* the ranks' images in order */
        TELA_TRY(tela_kv_save(rank_ex(s, r), s->kv[r], n_past, p));
    return TELA_OK;
}

static tela_status llama_state_load(const tela_model *m, void *state, int32_t n_past, const void *src) {
    (void)m;
    llama_state *s = state;
    const unsigned char *p = src;
    for (int r = 0; r < s->n_kv; p += tela_kv_image_bytes(s->kv[r], n_past), r++)
        TELA_TRY(tela_kv_load(rank_ex(s, r), s->kv[r], n_past, p));
    return TELA_OK;
}

/* ------------------------------------------------------------ forward */

/* Decoder layer l: attention, then the feed-forward block, each adding
 * its output to the residual stream x. Split over ranks (tensor
 * parallelism), each rank adds its part of wo's product (its heads) into
 * its partial sum `part`, the ranks' sums are added up (the all-reduce)
 * and then to the residual; the same for the FFN's down product (its part
 * of the inner dimension). On one exec the ranks take turns and add into
 * one partial sum (the first writes, the others add); with one rank the
 * products add into x directly. */
static void layer(const llama_model *L, llama_state *s, int l, int kl) {
    const int nt = s->io.batch.n_tok, E = L->n_embd;
    const int64_t q_dim = (int64_t)L->r_head * L->head_dim, k_dim = (int64_t)L->r_kv_head * L->head_dim;
    const int64_t v_dim = (int64_t)L->r_kv_head * L->v_dim, att_dim = (int64_t)L->r_head * L->v_dim;
    const float scale = (float)(1.0 / sqrt((double)L->head_dim));
    const bool split = L->world > 1, shared = s->ranks.n == 1;
    float *parts[TELA_MODEL_MAX_RANKS];
    for (int e = 0; e < s->ranks.n; e++) parts[e] = s->acts[e].part;
    /* attention */
    for (int r = 0; r < L->world; r++) {
        const llama_layer *ly = &L->rank_layers[r][l];
        tela_exec *ex = rank_ex(s, r);
        const llama_acts *a = rank_acts(s, r);
        const tela_batch *b = &s->ranks.rk[shared ? 0 : r].batch;
        const tela_norm_in norm = {ly->attn_norm_b, L->eps, a->xb};
        const tela_matmul_target qkv[3] = {{&ly->wq, a->q, q_dim}, {&ly->wk, a->k, k_dim}, {&ly->wv, a->v, v_dim}};
        tela_exec_norm_matmul_many(ex, &norm, qkv, 3, a->x, E, nt);
        tela_exec_rope_store(ex, s->kv[r], kl, a->q, q_dim, L->r_head, a->k, k_dim, a->v, v_dim, b, a->cs, L->n_rot,
                             L->rope_mode);
        tela_exec_next_input_of(ex, &ly->wo); /* (a hint: the attention may prepare wo's input) */
        tela_exec_attention(ex, s->kv[r], kl, a->q, q_dim, a->att, att_dim, b, L->r_head, scale);
        tela_exec_matmul(ex, &ly->wo, a->att, att_dim, split ? a->part : a->x, E, nt, !split || (shared && r > 0));
    }
    if (split) {
        tela_model_ranks_sum(&s->ranks, parts, (int64_t)nt * E);
        for (int e = 0; e < s->ranks.n; e++)
            tela_exec_add(s->ranks.rk[e].ex, s->acts[e].x, s->acts[e].part, (int64_t)nt * E);
    }
    /* feed-forward */
    for (int r = 0; r < L->world; r++) {
        const llama_acts *a = rank_acts(s, r);
        tela_model_ffn_swiglu(rank_ex(s, r), &L->rank_layers[r][l].ffn, a->x, a->xb, a->gate, split ? a->part : a->x,
                              !split || (shared && r > 0), E, nt, L->eps);
    }
    if (split) {
        tela_model_ranks_sum(&s->ranks, parts, (int64_t)nt * E);
        for (int e = 0; e < s->ranks.n; e++)
            tela_exec_add(s->ranks.rk[e].ex, s->acts[e].x, s->acts[e].part, (int64_t)nt * E);
    }
}

/* One step over the batch's tokens (at most n_batch; the cache already
 * holds the positions before them), then the output head as step asks. */
static void forward_output(const tela_model *m, void *state, const tela_model_step *step) {
    const llama_model *L = m->impl;
    llama_state *s = state;
    const tela_batch *b = &s->io.batch;
    const int nt = b->n_tok, E = L->n_embd;
    float *x[TELA_MODEL_MAX_RANKS], *xb[TELA_MODEL_MAX_RANKS], *cs[TELA_MODEL_MAX_RANKS];
    for (int e = 0; e < s->ranks.n; e++) x[e] = s->acts[e].x, xb[e] = s->acts[e].xb, cs[e] = s->acts[e].cs;
    tela_model_ranks_step_begin(&s->ranks, b, s->io.pos_prev, L->embd, L->world, L->inv_freq_b, L->n_rot, cs, x, E);
    tela_model_probe(&s->io, -1, x[0], nt, E);
    for (int l = 0; l < L->n_layer; l++) {
        const int kl = L->kv_slot[l];
        if (kl >= 0) layer(L, s, l, kl); /* else skipped: the residual stream passes unchanged */
        tela_model_probe(&s->io, l, x[0], nt, E);
    }
    tela_model_ranks_output_head(&s->ranks, L->heads, L->world, L->output_norm_b, L->eps, x, xb, E, step, &s->io);
    tela_model_ranks_end(&s->ranks);
}

static tela_status llama_forward_batch(const tela_model *m, void *state, const tela_seq_run *runs, int n_runs,
                                       float *logits, int32_t *picks) {
    llama_state *s = state;
    TELA_TRY(tela_model_run_batch(m, state, forward_output, &s->io, runs, n_runs, logits, picks));
    return tela_model_ranks_sync(&s->ranks);
}

/* No recurrent state: a slot is only a KV block table, which the engine keeps. */
static size_t llama_slot_bytes(const tela_model *m) {
    (void)m;
    return 0;
}

static void llama_slot_reset(const tela_model *m, void *state, int slot) {
    (void)m;
    (void)state;
    (void)slot;
}

static tela_status llama_slot_save(const tela_model *m, void *state, int slot, void *dst) {
    (void)m;
    (void)state;
    (void)slot;
    (void)dst;
    return TELA_OK;
}

static tela_status llama_slot_load(const tela_model *m, void *state, int slot, const void *src) {
    (void)m;
    (void)state;
    (void)slot;
    (void)src;
    return TELA_OK;
}

static tela_status llama_kv_copy_rows(const tela_model *m, void *state, int32_t dst, int32_t src, int32_t n) {
    (void)m;
    llama_state *s = state;
    for (int r = 0; r < s->n_kv; r++) TELA_TRY(tela_kv_copy_rows(rank_ex(s, r), s->kv[r], dst, src, n));
    return TELA_OK;
}

static tela_status llama_forward(const tela_model *m, void *state, const int32_t *tokens, int32_t n, int32_t n_past,
                                 const tela_forward_out *out) {
    llama_state *s = state;
    if (n <= 0 || n_past < 0 || n_past > s->n_ctx - n)
        return tela_errorf(TELA_ERR_INTERNAL, "llama forward: %d tokens at position %d do not fit %d", n, n_past,
                           s->n_ctx);
    TELA_TRY(tela_model_run_steps(m, state, forward_output, &s->io, tokens, n, n_past, out));
    return tela_model_ranks_sync(&s->ranks);
}

/* ------------------------------------------------------- naive oracle */

static float *alloc_floats(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

/* Y[t] = W X[t] for n vectors, accumulating in double; each row of W is
 * dequantized once into `row`. */
static void naive_matmul(const tela_mat *w, const float *x, float *y, int32_t n, float *row) {
    for (int64_t r = 0; r < w->n_rows; r++) {
        int32_t id = (int32_t)r;
        tela_op_get_rows(w, &id, 1, row, w->n_cols);
        for (int32_t t = 0; t < n; t++) {
            const float *xt = x + (size_t)t * w->n_cols;
            double acc = 0.0;
            for (int64_t i = 0; i < w->n_cols; i++) acc += (double)row[i] * xt[i];
            y[(size_t)t * w->n_rows + r] = (float)acc;
        }
    }
}

static void naive_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double scale = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = (float)(x[i] * scale * w[i]);
}

static void naive_rope(float *v, int n_heads, int head_dim, const llama_model *L, int32_t pos) {
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * head_dim;
        for (int i = 0; i < L->n_rot / 2; i++) {
            double th = pos * L->inv_freq[i];
            int i0 = L->rope_mode == TELA_ROPE_ADJACENT ? 2 * i : i;
            int i1 = L->rope_mode == TELA_ROPE_ADJACENT ? 2 * i + 1 : i + L->n_rot / 2;
            double x0 = x[i0], x1 = x[i1];
            x[i0] = (float)(x0 * cos(th) - x1 * sin(th));
            x[i1] = (float)(x0 * sin(th) + x1 * cos(th));
        }
    }
}

/* Recomputes the whole sequence layer by layer, keeping every position's
 * K and V in plain arrays: no cache, no batching, no threads, double
 * accumulation. */
static tela_status llama_forward_naive(const tela_model *m, const int32_t *tokens, int32_t n, float *logits) {
    const llama_model *L = m->impl;
    if (L->world > 1)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: the naive forward pass needs the whole layers (no tensor "
                           "parallelism)", m->path);
    const int E = L->n_embd, F = L->n_ff;
    const int QD = L->n_head * L->head_dim, KD = L->n_kv_head * L->head_dim, VD = L->n_kv_head * L->v_dim;
    const int AD = L->n_head * L->v_dim;
    int64_t widest = E;
    if (F > widest) widest = F;
    if (AD > widest) widest = AD;
    size_t N = (size_t)n;
    float *x = alloc_floats(N * E), *h = alloc_floats(N * E), *q = alloc_floats(N * QD), *k = alloc_floats(N * KD);
    float *v = alloc_floats(N * VD), *att = alloc_floats(N * AD), *g = alloc_floats(N * F), *u = alloc_floats(N * F);
    float *row = alloc_floats((size_t)widest);
    double *sc = calloc(N, sizeof(double));
    tela_status st = TELA_OK;
    if (!x || !h || !q || !k || !v || !att || !g || !u || !row || !sc) {
        st = tela_errorf(TELA_ERR_NOMEM, "llama naive forward: out of memory");
        goto done;
    }
    for (int32_t t = 0; t < n; t++) tela_op_get_rows(&L->tok_embd, &tokens[t], 1, x + (size_t)t * E, E);
    for (int l = 0; l < L->n_layer; l++) {
        const llama_layer *ly = &L->layers[l];
        for (int32_t t = 0; t < n; t++) naive_rmsnorm(h + (size_t)t * E, x + (size_t)t * E, ly->attn_norm, E, L->eps);
        naive_matmul(&ly->wq, h, q, n, row);
        naive_matmul(&ly->wk, h, k, n, row);
        naive_matmul(&ly->wv, h, v, n, row);
        for (int32_t t = 0; t < n; t++) {
            naive_rope(q + (size_t)t * QD, L->n_head, L->head_dim, L, t);
            naive_rope(k + (size_t)t * KD, L->n_kv_head, L->head_dim, L, t);
        }
        for (int32_t t = 0; t < n; t++) {
            for (int hd = 0; hd < L->n_head; hd++) {
                int kvh = hd / (L->n_head / L->n_kv_head);
                const float *qh = q + (size_t)t * QD + (size_t)hd * L->head_dim;
                double mx = -INFINITY, sum = 0.0;
                for (int32_t p = 0; p <= t; p++) {
                    const float *kp = k + (size_t)p * KD + (size_t)kvh * L->head_dim;
                    double d = 0.0;
                    for (int i = 0; i < L->head_dim; i++) d += (double)qh[i] * kp[i];
                    sc[p] = d / sqrt((double)L->head_dim);
                    if (sc[p] > mx) mx = sc[p];
                }
                for (int32_t p = 0; p <= t; p++) sum += (sc[p] = exp(sc[p] - mx));
                for (int i = 0; i < L->v_dim; i++) {
                    double acc = 0.0;
                    for (int32_t p = 0; p <= t; p++)
                        acc += sc[p] / sum * v[(size_t)p * VD + (size_t)kvh * L->v_dim + i];
                    att[(size_t)t * AD + (size_t)hd * L->v_dim + i] = (float)acc;
                }
            }
        }
        naive_matmul(&ly->wo, att, h, n, row);
        for (size_t i = 0; i < N * E; i++) x[i] += h[i];
        for (int32_t t = 0; t < n; t++) naive_rmsnorm(h + (size_t)t * E, x + (size_t)t * E, ly->ffn_norm, E, L->eps);
        naive_matmul(&ly->ffn.w_gate, h, g, n, row);
        naive_matmul(&ly->ffn.w_up, h, u, n, row);
        for (size_t i = 0; i < N * F; i++) g[i] = (float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
        naive_matmul(&ly->ffn.w_down, g, h, n, row);
        for (size_t i = 0; i < N * E; i++) x[i] += h[i];
    }
    for (int32_t t = 0; t < n; t++) naive_rmsnorm(h + (size_t)t * E, x + (size_t)t * E, L->output_norm, E, L->eps);
    naive_matmul(&L->output, h, logits, n, row);
done:
    free(x);
    free(h);
    free(q);
    free(k);
    free(v);
    free(att);
    free(g);
    free(u);
    free(row);
    free(sc);
    return st;
}

static int llama_layer_kind(const tela_model *m, int layer) {
    (void)m;
    (void)layer;
    return TELA_LAYER_ATTENTION;
}

const tela_arch tela_arch_llama = {
    .name = "llama",
    .backends = 1u << TELA_BACKEND_CPU | 1u << TELA_BACKEND_CUDA,
    .tensor_parallel = true,
    .rank_devices = true,
    .hf_model_types = llama_hf_types,
    .load = llama_load,
    .free = llama_free,
    .state_create = llama_state_create,
    .state_free = llama_state_free,
    .state_bytes = llama_state_bytes,
    .state_reset = llama_state_reset,
    .state_size = llama_state_size,
    .state_save = llama_state_save,
    .state_load = llama_state_load,
    .forward = llama_forward,
    .forward_batch = llama_forward_batch,
    .slot_bytes = llama_slot_bytes,
    .slot_reset = llama_slot_reset,
    .slot_save = llama_slot_save,
    .slot_load = llama_slot_load,
    .kv_copy_rows = llama_kv_copy_rows,
    .layer_kind = llama_layer_kind,
    .forward_naive = llama_forward_naive,
};
