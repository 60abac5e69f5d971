/* convert_qwen35.c: Qwen3_5ForCausalLM (and the text model inside
 * Qwen3_5ForConditionalGeneration) -> GGUF "qwen35", as llama.cpp's
 * Qwen3_5TextModel converter (Qwen3NextModel + value-head reordering) does it.
 *
 * What transformers' modeling_qwen3_5.py computes, and what the GGUF holds:
 *  - Qwen3_5RMSNorm multiplies by (1 + weight): input_layernorm,
 *    post_attention_layernorm, model.norm, self_attn.q_norm and k_norm are
 *    stored with the 1 added (llama.cpp adds 1 to every "*norm.weight" except
 *    linear_attn.norm.weight). Qwen3_5RMSNormGated (linear_attn.norm) uses its
 *    weight as is.
 *  - Gated DeltaNet decay g = -exp(A_log) * softplus(a + dt_bias): A_log is
 *    stored as ssm_a = -exp(A_log); dt_bias is renamed ssm_dt.bias.
 *  - conv1d.weight [channels, 1, kernel] is squeezed to [channels, kernel]
 *    (ggml ne = {kernel, channels}) and kept F32.
 *  - in_proj_qkv -> attn_qkv, in_proj_z -> attn_gate, in_proj_a ->
 *    ssm_alpha, in_proj_b -> ssm_beta, out_proj -> ssm_out,
 *    linear_attn.norm -> ssm_norm.
 *  - Full attention: q_proj holds per head [query | output gate] and is
 *    stored unchanged (no RoPE permutation for this architecture);
 *    k/v/o_proj -> attn_k/v/output, q_norm/k_norm -> attn_q_norm/attn_k_norm.
 *  - With fewer key heads than value heads, HF groups value heads by key head
 *    (value head h uses key head h / (n_v/n_k)); llama.cpp reorders them to
 *    a tiled order (GGUF value head j*n_k + g = HF value head g*(n_v/n_k) + j,
 *    so GGUF value head i uses key head i % n_k) in every tensor indexed by
 *    value head: the V rows of attn_qkv, attn_gate rows, ssm_alpha/ssm_beta
 *    rows, ssm_a, ssm_dt.bias, the V channels of ssm_conv1d and the columns
 *    of ssm_out.
 *  - post_attention_layernorm -> post_attention_norm (not ffn_norm), MLP as
 *    Llama.
 *  - Multi-token prediction (_QwenMtpMixin), unless params.no_mtp: the
 *    mtp.* (or model.mtp.*) tensors become n_mtp extra blocks after the
 *    trunk's n_layer. mtp.layers.i.X is renamed model.layers.(n_layer+i).X
 *    and then mapped like any full-attention layer (attn_norm,
 *    post_attention_norm, attn_q/k/v/output, attn_q_norm/attn_k_norm, ffn_*;
 *    every *norm.weight gets the +1). The block-level tensors go to block
 *    n_layer: mtp.fc -> blk.N.nextn.eh_proj.weight (HF [H, 2H], a weight
 *    matrix), mtp.pre_fc_norm_embedding -> nextn.enorm, pre_fc_norm_hidden
 *    -> nextn.hnorm, mtp.norm -> nextn.shared_head_norm (all three are
 *    "...norm.weight" after the rename, so they get the +1 too).
 *    n_mtp = config mtp_num_hidden_layers, else counted from the tensors;
 *    block_count = n_layer + n_mtp and <arch>.nextn_predict_layers = n_mtp
 *    (right after TextModel's keys). A checkpoint with no mtp.* tensors gets
 *    no MTP blocks (llama.cpp would still count config's
 *    mtp_num_hidden_layers and write a file its loader rejects).
 * Keys: TextModel's (with rope.dimension_sections from mrope_section), then
 * nextn_predict_layers when there are MTP blocks, ssm.conv_kernel, ssm.state_size (key head dim), ssm.group_count (key
 * heads), ssm.time_step_rank (value heads), ssm.inner_size (value heads *
 * value head dim), full_attention_interval, rope.dimension_count
 * (head_dim * partial_rotary_factor). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert_internal.h"
#include "util/error.h"

typedef struct qwen_dims {
    int64_t n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int64_t n_k_heads, n_v_heads, k_dim, v_dim, conv_kernel;
    int64_t interval;   /* full_attention_interval */
    bool *is_full;      /* per layer (owned) */
} qwen_dims;

/* The layer pattern: layer_types, else full_attention_interval (default 4,
 * transformers' default). GGUF can only say "every interval-th layer is full
 * attention", so other patterns are refused. */
static tela_status qwen_layers(conv_ctx *c, qwen_dims *d) {
    d->is_full = calloc((size_t)c->n_layer + 1, sizeof(bool));
    if (!d->is_full) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    const cJSON *lt = conv_cfg(c, "layer_types");
    int64_t interval = 4;
    conv_cfg_int(c, "full_attention_interval", &interval);
    if (cJSON_IsArray(lt)) {
        if (cJSON_GetArraySize(lt) < c->n_layer)
            return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: layer_types has %d entries for %lld layers", c->hf_path,
                               cJSON_GetArraySize(lt), (long long)c->n_layer);
        int64_t first = -1;
        for (int64_t i = 0; i < c->n_layer; i++) {
            const cJSON *e = cJSON_GetArrayItem(lt, (int)i);
            if (!cJSON_IsString(e) || (strcmp(e->valuestring, "full_attention") && strcmp(e->valuestring, "linear_attention")))
                return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: layer_types[%lld] is not \"linear_attention\" or "
                                   "\"full_attention\"", c->hf_path, (long long)i);
            d->is_full[i] = !strcmp(e->valuestring, "full_attention");
            if (d->is_full[i] && first < 0) first = i;
        }
        if (first >= 0) interval = first + 1;
        for (int64_t i = 0; i < c->n_layer; i++)
            if (d->is_full[i] != ((i + 1) % interval == 0))
                return tela_errorf(TELA_ERR_UNSUPPORTED, "%s/config.json: layer_types is not \"every %lld-th layer is "
                                   "full attention\", which is all GGUF's qwen35.full_attention_interval can express",
                                   c->hf_path, (long long)interval);
    } else {
        if (interval <= 0) return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: bad full_attention_interval", c->hf_path);
        for (int64_t i = 0; i < c->n_layer; i++) d->is_full[i] = (i + 1) % interval == 0;
    }
    d->interval = interval;
    return TELA_OK;
}

static tela_status qwen_dims_get(conv_ctx *c, qwen_dims *d) {
    memset(d, 0, sizeof *d);
    TELA_TRY(conv_cfg_int(c, "hidden_size", &d->n_embd));
    TELA_TRY(conv_cfg_int(c, "num_attention_heads", &d->n_head));
    TELA_TRY(conv_cfg_int(c, "num_key_value_heads", &d->n_head_kv));
    if (conv_cfg_int(c, "head_dim", &d->head_dim) != TELA_OK && d->n_head) d->head_dim = d->n_embd / d->n_head;
    TELA_TRY(conv_cfg_int(c, "intermediate_size", &d->n_ff));
    TELA_TRY(conv_cfg_int(c, "vocab_size", &d->n_vocab));
    int64_t kd, vd;
    TELA_TRY(conv_cfg_int(c, "linear_num_key_heads", &d->n_k_heads));
    TELA_TRY(conv_cfg_int(c, "linear_num_value_heads", &d->n_v_heads));
    TELA_TRY(conv_cfg_int(c, "linear_key_head_dim", &kd));
    TELA_TRY(conv_cfg_int(c, "linear_value_head_dim", &vd));
    TELA_TRY(conv_cfg_int(c, "linear_conv_kernel_dim", &d->conv_kernel));
    if (d->n_k_heads <= 0 || d->n_v_heads % d->n_k_heads)
        return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: %lld value heads is not a multiple of %lld key heads",
                           c->hf_path, (long long)d->n_v_heads, (long long)d->n_k_heads);
    d->k_dim = kd;   /* per head */
    d->v_dim = vd;
    return qwen_layers(c, d);
}

/* Index map reordering value heads from HF's grouped order to llama.cpp's
 * tiled order (_reorder_v_heads): n entries; the first `offset` are the
 * identity, then n_k * per_k heads of head_size elements. */
static int64_t *v_reorder_map(int64_t n, int64_t offset, int64_t n_k, int64_t per_k, int64_t head_size) {
    int64_t *m = malloc((size_t)n * sizeof *m);
    if (!m) return NULL;
    for (int64_t i = 0; i < offset; i++) m[i] = i;
    for (int64_t i = offset; i < n; i++) {
        int64_t r = i - offset, head = r / head_size, e = r % head_size;
        int64_t j = head / n_k, g = head % n_k;     /* tiled position (j, g) */
        m[i] = offset + (g * per_k + j) * head_size + e;
    }
    return m;
}

enum { Q_ROWS, Q_COLS };

static tela_status attach_reorder(conv_tensor *t, int where, int64_t offset, const qwen_dims *d, int64_t head_size) {
    int64_t n = where == Q_ROWS ? conv_rows(t) : t->ne[0];
    int64_t *m = v_reorder_map(n, offset, d->n_k_heads, d->n_v_heads / d->n_k_heads, head_size);
    if (!m) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    if (where == Q_ROWS) t->row_map = m;
    else t->col_map = m;
    return TELA_OK;
}

/* Per-layer tensors: HF suffix, GGUF name, layer kind (0 any, 1 linear, 2 full). */
static const struct { const char *hf, *gguf; int kind; } QWEN_LAYER[] = {
    {"input_layernorm.weight", "attn_norm.weight", 0},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", 0},
    {"mlp.gate_proj.weight", "ffn_gate.weight", 0},
    {"mlp.up_proj.weight", "ffn_up.weight", 0},
    {"mlp.down_proj.weight", "ffn_down.weight", 0},
    {"linear_attn.A_log", "ssm_a", 1},
    {"linear_attn.dt_bias", "ssm_dt.bias", 1},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight", 1},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", 1},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight", 1},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", 1},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight", 1},
    {"linear_attn.norm.weight", "ssm_norm.weight", 1},
    {"linear_attn.out_proj.weight", "ssm_out.weight", 1},
    {"self_attn.q_proj.weight", "attn_q.weight", 2},
    {"self_attn.k_proj.weight", "attn_k.weight", 2},
    {"self_attn.v_proj.weight", "attn_v.weight", 2},
    {"self_attn.o_proj.weight", "attn_output.weight", 2},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", 2},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", 2},
};
#define N_QWEN_LAYER (sizeof QWEN_LAYER / sizeof QWEN_LAYER[0])

/* Expected HF shape of per-layer tensor k (outermost first). */
static int expected_shape(const qwen_dims *d, size_t k, int64_t *s) {
    int64_t key_dim = d->n_k_heads * d->k_dim, value_dim = d->n_v_heads * d->v_dim;
    int64_t conv_dim = 2 * key_dim + value_dim;
    switch (k) {
    case 0: case 1: s[0] = d->n_embd; return 1;
    case 2: case 3: s[0] = d->n_ff; s[1] = d->n_embd; return 2;
    case 4: s[0] = d->n_embd; s[1] = d->n_ff; return 2;
    case 5: case 6: s[0] = d->n_v_heads; return 1;
    case 7: s[0] = conv_dim; s[1] = 1; s[2] = d->conv_kernel; return 3;
    case 8: s[0] = conv_dim; s[1] = d->n_embd; return 2;
    case 9: s[0] = value_dim; s[1] = d->n_embd; return 2;
    case 10: case 11: s[0] = d->n_v_heads; s[1] = d->n_embd; return 2;
    case 12: s[0] = d->v_dim; return 1;
    case 13: s[0] = d->n_embd; s[1] = value_dim; return 2;
    case 14: s[0] = d->n_head * d->head_dim * 2; s[1] = d->n_embd; return 2;
    case 15: case 16: s[0] = d->n_head_kv * d->head_dim; s[1] = d->n_embd; return 2;
    case 17: s[0] = d->n_embd; s[1] = d->n_head * d->head_dim; return 2;
    default: s[0] = d->head_dim; return 1;
    }
}

static tela_status layer_tensor(conv_ctx *c, const qwen_dims *d, const tela_tensor *src, int64_t bid, size_t k) {
    int64_t shape[3];
    int nd = expected_shape(d, k, shape);
    TELA_TRY(conv_expect_shape(src, nd, shape));
    conv_tensor *t = conv_add(c, src, "blk.%lld.%s", (long long)bid, QWEN_LAYER[k].gguf);
    if (!t) return TELA_ERR_NOMEM;
    const char *hf = QWEN_LAYER[k].hf;
    /* Qwen3NextModel.modify_tensors */
    if (k == 5) t->op = CONV_OP_NEG_EXP;
    if (conv_ends_with(hf, "norm.weight") && strcmp(hf, "linear_attn.norm.weight")) t->op = CONV_OP_ADD_ONE;
    if (k == 7) { /* squeeze [C, 1, K] -> ne {K, C} */
        t->n_dims = 2;
        t->ne[1] = shape[0];
        t->ne[2] = 1;
    }
    if (d->n_k_heads == d->n_v_heads) return TELA_OK;
    /* _LinearAttentionVReorderBase.modify_tensors */
    int64_t key_dim = d->n_k_heads * d->k_dim;
    switch (k) {
    case 8: return attach_reorder(t, Q_ROWS, 2 * key_dim, d, d->v_dim);   /* V rows of qkv */
    case 9: return attach_reorder(t, Q_ROWS, 0, d, d->v_dim);             /* z */
    case 10: case 11: return attach_reorder(t, Q_ROWS, 0, d, 1);          /* a, b */
    case 5: case 6: return attach_reorder(t, Q_COLS, 0, d, 1);            /* A_log, dt_bias */
    case 7: return attach_reorder(t, Q_ROWS, 2 * key_dim, d, d->v_dim);   /* V channels of conv1d */
    case 13: return attach_reorder(t, Q_COLS, 0, d, d->v_dim);            /* out_proj columns */
    default: return TELA_OK;
    }
}

/* The HF name without the multimodal wrapper's prefix ("model.mtp." becomes
 * "mtp."), or NULL for tensors that are not part of the text model (vision
 * tower). */
static const char *text_name(const char *name, char *buf, size_t cap) {
    static const char *const skip[] = {"model.visual.", "visual."};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (!strncmp(name, skip[i], strlen(skip[i]))) return NULL;
    if (!strncmp(name, "model.mtp.", 10)) return name + 6;
    const char *lm = "model.language_model.";
    if (!strncmp(name, lm, strlen(lm))) {
        snprintf(buf, cap, "model.%s", name + strlen(lm));
        return buf;
    }
    return name;
}

/* Block-level MTP tensors: HF name, GGUF suffix (in block n_layer), whether
 * llama.cpp's loader requires it. */
static const struct { const char *hf, *gguf; bool required; } QWEN_MTP_TOP[] = {
    {"mtp.fc.weight", "nextn.eh_proj.weight", true},
    {"mtp.pre_fc_norm_embedding.weight", "nextn.enorm.weight", true},
    {"mtp.pre_fc_norm_hidden.weight", "nextn.hnorm.weight", true},
    {"mtp.norm.weight", "nextn.shared_head_norm.weight", false},
};
#define N_QWEN_MTP_TOP (sizeof QWEN_MTP_TOP / sizeof QWEN_MTP_TOP[0])

/* The number of MTP blocks to write: 0 with no_mtp or without mtp.*
 * tensors, else config's mtp_num_hidden_layers, else one more than the
 * highest mtp.layers.N (llama.cpp's opt_num_mtp_layers), at least 1. */
static tela_status qwen_count_mtp(conv_ctx *c, int64_t *n_mtp) {
    *n_mtp = 0;
    if (c->params->no_mtp) return TELA_OK;
    bool any = false;
    int64_t counted = 0;
    size_t n = tela_checkpoint_n_tensors(c->ck);
    for (size_t i = 0; i < n; i++) {
        char buf[512];
        const char *name = text_name(tela_checkpoint_tensor(c->ck, i)->name, buf, sizeof buf);
        int64_t bid;
        const char *rest;
        if (!name || strncmp(name, "mtp.", 4)) continue;
        any = true;
        if (conv_layer_part(name, "mtp.layers.", &bid, &rest) && bid + 1 > counted) counted = bid + 1;
    }
    if (!any) return TELA_OK;
    int64_t cfg_n = 0;
    if (conv_cfg_int(c, "mtp_num_hidden_layers", &cfg_n) != TELA_OK) cfg_n = 0;
    if (cfg_n < 0 || cfg_n > 64)
        return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: mtp_num_hidden_layers = %lld is out of range",
                           c->hf_path, (long long)cfg_n);
    if (counted > 64) return tela_errorf(TELA_ERR_FORMAT, "%s: mtp.layers.%lld is out of range", c->hf_path,
                                         (long long)(counted - 1));
    *n_mtp = cfg_n > 0 ? cfg_n : counted > 0 ? counted : 1;
    return TELA_OK;
}

/* An mtp.* tensor: mtp.layers.i.X as full-attention block n_layer + i, the
 * block-level ones as nextn.* of block n_layer. seen_layer / seen_top
 * record what was found. */
static tela_status qwen_mtp_tensor(conv_ctx *c, const qwen_dims *d, const tela_tensor *src, const char *name,
                                   int64_t n_mtp, bool *seen_layer, bool *seen_top) {
    int64_t bid;
    const char *rest;
    if (conv_layer_part(name, "mtp.layers.", &bid, &rest)) {
        size_t k = 0;
        while (k < N_QWEN_LAYER && strcmp(rest, QWEN_LAYER[k].hf)) k++;
        if (bid >= n_mtp || k == N_QWEN_LAYER || QWEN_LAYER[k].kind == 1)
            return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: cannot map tensor %s to GGUF (%lld MTP blocks of full "
                               "attention)", c->hf_path, src->name, (long long)n_mtp);
        seen_layer[bid * (int64_t)N_QWEN_LAYER + (int64_t)k] = true;
        return layer_tensor(c, d, src, c->n_layer + bid, k);
    }
    for (size_t k = 0; k < N_QWEN_MTP_TOP; k++) {
        if (strcmp(name, QWEN_MTP_TOP[k].hf)) continue;
        int64_t want[2] = {d->n_embd, 2 * d->n_embd};
        TELA_TRY(conv_expect_shape(src, k == 0 ? 2 : 1, want));
        conv_tensor *t = conv_add(c, src, "blk.%lld.%s", (long long)c->n_layer, QWEN_MTP_TOP[k].gguf);
        if (!t) return TELA_ERR_NOMEM;
        if (k > 0) t->op = CONV_OP_ADD_ONE;
        seen_top[k] = true;
        return TELA_OK;
    }
    return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: cannot map tensor %s to GGUF", c->hf_path, src->name);
}

static tela_status qwen_plan_dims(conv_ctx *c, qwen_dims *d) {
    int64_t n_mtp;
    TELA_TRY(qwen_count_mtp(c, &n_mtp));
    tela_status st = TELA_OK;
    size_t n = tela_checkpoint_n_tensors(c->ck);
    bool *seen = calloc((size_t)(c->n_layer + n_mtp) * N_QWEN_LAYER + 2 + N_QWEN_MTP_TOP, 1);
    if (!seen) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    bool *seen_mtp = seen + 2 + c->n_layer * (int64_t)N_QWEN_LAYER;
    bool *seen_top = seen_mtp + n_mtp * (int64_t)N_QWEN_LAYER;
    for (size_t i = 0; i < n && st == TELA_OK; i++) {
        const tela_tensor *src = tela_checkpoint_tensor(c->ck, i);
        char buf[512];
        const char *name = text_name(src->name, buf, sizeof buf);
        int64_t bid;
        const char *rest;
        if (!name || conv_ends_with(name, ".rotary_emb.inv_freq")) continue;
        if (!strncmp(name, "mtp.", 4)) {
            if (n_mtp > 0) st = qwen_mtp_tensor(c, d, src, name, n_mtp, seen_mtp, seen_top);
        } else if (!strcmp(name, "model.embed_tokens.weight")) {
            int64_t want[2] = {d->n_vocab, d->n_embd};
            if ((st = conv_expect_shape(src, 2, want)) == TELA_OK)
                st = conv_add(c, src, "token_embd.weight") ? TELA_OK : TELA_ERR_NOMEM;
            seen[0] = true;
        } else if (!strcmp(name, "model.norm.weight")) {
            int64_t want[1] = {d->n_embd};
            conv_tensor *t = NULL;
            if ((st = conv_expect_shape(src, 1, want)) == TELA_OK && !(t = conv_add(c, src, "output_norm.weight")))
                st = TELA_ERR_NOMEM;
            if (t) t->op = CONV_OP_ADD_ONE;
            seen[1] = true;
        } else if (!strcmp(name, "lm_head.weight")) {
            int64_t want[2] = {d->n_vocab, d->n_embd};
            if ((st = conv_expect_shape(src, 2, want)) == TELA_OK)
                st = conv_add(c, src, "output.weight") ? TELA_OK : TELA_ERR_NOMEM;
        } else if (conv_layer_part(name, "model.layers.", &bid, &rest) && bid < c->n_layer) {
            size_t k = 0;
            while (k < N_QWEN_LAYER && strcmp(rest, QWEN_LAYER[k].hf)) k++;
            int want_kind = d->is_full[bid] ? 2 : 1;
            if (k == N_QWEN_LAYER || (QWEN_LAYER[k].kind && QWEN_LAYER[k].kind != want_kind)) {
                st = tela_errorf(TELA_ERR_UNSUPPORTED, "%s: cannot map tensor %s to GGUF (layer %lld is %s)", c->hf_path,
                                 src->name, (long long)bid, d->is_full[bid] ? "full attention" : "linear attention");
                break;
            }
            st = layer_tensor(c, d, src, bid, k);
            seen[2 + bid * N_QWEN_LAYER + k] = true;
        } else {
            st = tela_errorf(TELA_ERR_UNSUPPORTED, "%s: cannot map tensor %s to GGUF", c->hf_path, src->name);
        }
    }
    if (st == TELA_OK && !seen[0])
        st = tela_errorf(TELA_ERR_NOT_FOUND, "%s: missing tensor model.embed_tokens.weight", c->hf_path);
    if (st == TELA_OK && !seen[1]) st = tela_errorf(TELA_ERR_NOT_FOUND, "%s: missing tensor model.norm.weight", c->hf_path);
    for (int64_t b = 0; st == TELA_OK && b < c->n_layer; b++) {
        int want_kind = d->is_full[b] ? 2 : 1;
        for (size_t k = 0; k < N_QWEN_LAYER; k++)
            if ((!QWEN_LAYER[k].kind || QWEN_LAYER[k].kind == want_kind) && !seen[2 + b * N_QWEN_LAYER + k]) {
                st = tela_errorf(TELA_ERR_NOT_FOUND, "%s: missing tensor model.layers.%lld.%s", c->hf_path,
                                 (long long)b, QWEN_LAYER[k].hf);
                break;
            }
    }
    for (int64_t b = 0; st == TELA_OK && b < n_mtp; b++)
        for (size_t k = 0; k < N_QWEN_LAYER; k++)
            if (QWEN_LAYER[k].kind != 1 && !seen_mtp[b * (int64_t)N_QWEN_LAYER + (int64_t)k]) {
                st = tela_errorf(TELA_ERR_NOT_FOUND, "%s: missing tensor mtp.layers.%lld.%s (use --no-mtp to leave "
                                 "out the MTP blocks)", c->hf_path, (long long)b, QWEN_LAYER[k].hf);
                break;
            }
    for (size_t k = 0; st == TELA_OK && n_mtp > 0 && k < N_QWEN_MTP_TOP; k++)
        if (QWEN_MTP_TOP[k].required && !seen_top[k])
            st = tela_errorf(TELA_ERR_NOT_FOUND, "%s: missing tensor %s (use --no-mtp to leave out the MTP blocks)",
                             c->hf_path, QWEN_MTP_TOP[k].hf);
    free(seen);
    c->n_nextn = st == TELA_OK ? n_mtp : 0;
    return st;
}

static tela_status qwen_plan(conv_ctx *c) {
    qwen_dims d;
    tela_status st = qwen_dims_get(c, &d);
    if (st == TELA_OK) st = qwen_plan_dims(c, &d);
    free(d.is_full);
    return st;
}

static tela_status qwen_params(conv_ctx *c) {
    qwen_dims d;
    tela_status st = qwen_dims_get(c, &d);
    free(d.is_full);
    TELA_TRY(st);
    TELA_TRY(conv_text_model_params(c));
    tela_gguf_writer *w = c->w;
    if (c->n_nextn > 0) /* _QwenMtpMixin.set_gguf_parameters */
        TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "nextn_predict_layers"), (uint32_t)c->n_nextn));
    TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "ssm.conv_kernel"), (uint32_t)d.conv_kernel));
    TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "ssm.state_size"), (uint32_t)d.k_dim));
    TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "ssm.group_count"), (uint32_t)d.n_k_heads));
    TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "ssm.time_step_rank"), (uint32_t)d.n_v_heads));
    TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "ssm.inner_size"), (uint32_t)(d.v_dim * d.n_v_heads)));
    TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "full_attention_interval"), (uint32_t)d.interval));
    /* partial_rotary_factor: top level (transformers 5 also mirrors it in
     * rope_parameters), default 0.25 */
    double prf = 0.25;
    if (conv_cfg_num(c, "partial_rotary_factor", &prf) != TELA_OK) {
        const cJSON *rp = conv_rope_params(c);
        const cJSON *v = rp ? cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor") : NULL;
        prf = cJSON_IsNumber(v) ? v->valuedouble : 0.25;
    }
    TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "rope.dimension_count"), (uint32_t)(int64_t)((double)d.head_dim * prf)));
    /* _Qwen35MRopeMixin: llama.cpp's loader requires the sections */
    const cJSON *rp = conv_cfg(c, "rope_parameters");
    if (!rp || !cJSON_IsObject(rp)) rp = conv_cfg(c, "rope_scaling");
    if (!rp || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(rp, "mrope_section"))) {
        static const int32_t def[4] = {11, 11, 10, 0};
        TELA_TRY(tela_gguf_writer_add_arr(w, conv_key(c, "rope.dimension_sections"), TELA_GGUF_INT32, def, 4));
    }
    return TELA_OK;
}

const conv_arch tela_conv_qwen35 = {"Qwen3_5ForCausalLM", "qwen35", qwen_plan, qwen_params};
const conv_arch tela_conv_qwen35_mm = {"Qwen3_5ForConditionalGeneration", "qwen35", qwen_plan, qwen_params};
