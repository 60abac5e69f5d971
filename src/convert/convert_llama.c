/* convert_llama.c: LlamaForCausalLM -> GGUF "llama", as llama.cpp's
 * LlamaModel converter does it:
 *  - names: model.embed_tokens -> token_embd, model.layers.N.input_layernorm
 *    -> blk.N.attn_norm, self_attn.{q,k,v,o}_proj -> attn_{q,k,v,output},
 *    post_attention_layernorm -> ffn_norm, mlp.{gate,up,down}_proj ->
 *    ffn_{gate,up,down}, model.norm -> output_norm, lm_head -> output (absent
 *    when the checkpoint ties it to the embeddings);
 *  - Q and K rows permuted so each head's rotary pairs are adjacent (ggml's
 *    normal RoPE) instead of HF's two halves (rotate_half);
 *  - Llama-3 rope scaling stored as the rope_freqs.weight tensor of per-
 *    frequency divisors, first in the file;
 *  - keys: TextModel's, then llama.vocab_size and llama.rope.dimension_count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "convert/convert_internal.h"
#include "util/error.h"

typedef struct llama_dims {
    int64_t n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
} llama_dims;

static tela_status llama_dims_get(conv_ctx *c, llama_dims *d) {
    TELA_TRY(conv_cfg_int(c, "hidden_size", &d->n_embd));
    TELA_TRY(conv_cfg_int(c, "num_attention_heads", &d->n_head));
    if (conv_cfg_int(c, "num_key_value_heads", &d->n_head_kv) != TELA_OK) d->n_head_kv = d->n_head;
    if (d->n_head <= 0 || d->n_head_kv <= 0 || d->n_head % d->n_head_kv)
        return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: %lld attention heads is not a multiple of %lld KV heads",
                           c->hf_path, (long long)d->n_head, (long long)d->n_head_kv);
    if (conv_cfg_int(c, "head_dim", &d->head_dim) != TELA_OK) d->head_dim = d->n_embd / d->n_head;
    if (d->head_dim <= 0 || d->head_dim % 2)
        return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: head_dim %lld must be even and positive", c->hf_path,
                           (long long)d->head_dim);
    TELA_TRY(conv_cfg_int(c, "intermediate_size", &d->n_ff));
    TELA_TRY(conv_cfg_int(c, "vocab_size", &d->n_vocab));
    return TELA_OK;
}

/* HF's LlamaModel.permute: rows [head][half][i] -> [head][i][half], i.e.
 * output row h*hd + 2i + j comes from input row h*hd + j*hd/2 + i. */
static int64_t *permute_map(int64_t n_rows, int64_t n_head) {
    int64_t hd = n_rows / n_head;
    int64_t *m = malloc((size_t)n_rows * sizeof *m);
    if (!m) return NULL;
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t h = r / hd, k = r % hd;
        m[r] = h * hd + (k % 2) * (hd / 2) + k / 2;
    }
    return m;
}

/* Llama-3 frequency divisors as llama.cpp's generate_extra_tensors computes
 * them (float32 throughout, as its torch code does):
 * wavelen = 2*pi/freq; < high_freq_wavelen: 1; > low_freq_wavelen: factor;
 * else 1 / ((1 - smooth)/factor + smooth), smooth = (orig/wavelen - low)/(high - low). */
static tela_status llama3_rope_freqs(conv_ctx *c, const cJSON *rope, int64_t head_dim) {
    double theta = 10000.0;
    conv_rope_theta(c, &theta);
    const cJSON *v;
    float factor = 8.0f, low = 1.0f, high = 4.0f, orig = 8192.0f;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(rope, "factor"))) factor = (float)v->valuedouble;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(rope, "low_freq_factor"))) low = (float)v->valuedouble;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(rope, "high_freq_factor"))) high = (float)v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(rope, "original_max_position_embeddings");
    if (!cJSON_IsNumber(v)) v = conv_cfg(c, "original_max_position_embeddings");
    if (cJSON_IsNumber(v)) orig = (float)v->valuedouble;
    int64_t n = head_dim / 2;
    float *f = malloc((size_t)n * sizeof *f);
    if (!f) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    float low_wl = orig / low, high_wl = orig / high;
    for (int64_t i = 0; i < n; i++) {
        float e = (float)(2 * i) / (float)head_dim;
        float freq = 1.0f / powf((float)theta, e);
        float wl = (float)(2.0 * M_PI) / freq;
        if (wl < high_wl) f[i] = 1.0f;
        else if (wl > low_wl) f[i] = factor;
        else {
            float smooth = (orig / wl - low) / (high - low);
            f[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
    conv_tensor *t = conv_add_generated(c, "rope_freqs.weight", f, n);
    free(f);
    return t ? TELA_OK : TELA_ERR_NOMEM;
}

static const struct { const char *hf, *gguf; } LAYER_NAMES[] = {
    {"input_layernorm", "attn_norm"},     {"self_attn.q_proj", "attn_q"},   {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},       {"self_attn.o_proj", "attn_output"},
    {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
};

/* Splits "x.weight" / "x.bias" into the stem length and the suffix. */
static const char *param_suffix(const char *rest, size_t *stem) {
    const char *dot = strrchr(rest, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias"))) return NULL;
    *stem = (size_t)(dot - rest);
    return dot;
}

static tela_status llama_plan(conv_ctx *c) {
    llama_dims d;
    TELA_TRY(llama_dims_get(c, &d));
    const cJSON *rope = conv_rope_params(c);
    const cJSON *rt = rope ? cJSON_GetObjectItemCaseSensitive(rope, "rope_type") : NULL;
    if (!cJSON_IsString(rt) && rope) rt = cJSON_GetObjectItemCaseSensitive(rope, "type");
    if (cJSON_IsString(rt) && !strcasecmp(rt->valuestring, "llama3")) TELA_TRY(llama3_rope_freqs(c, rope, d.head_dim));

    bool *seen = calloc((size_t)c->n_layer * 9 + 3, 1);
    if (!seen) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    tela_status st = TELA_OK;
    size_t n = tela_checkpoint_n_tensors(c->ck);
    for (size_t i = 0; i < n && st == TELA_OK; i++) {
        const tela_tensor *src = tela_checkpoint_tensor(c->ck, i);
        const char *name = src->name;
        int64_t bid;
        const char *rest;
        if (conv_ends_with(name, ".rotary_emb.inv_freq") || conv_ends_with(name, ".attention.masked_bias") ||
            conv_ends_with(name, ".attention.bias"))
            continue;
        if (!strcmp(name, "model.embed_tokens.weight")) {
            int64_t want[2] = {d.n_vocab, d.n_embd};
            if ((st = conv_expect_shape(src, 2, want)) == TELA_OK) st = conv_add(c, src, "token_embd.weight") ? TELA_OK : TELA_ERR_NOMEM;
            seen[0] = true;
        } else if (!strcmp(name, "model.norm.weight")) {
            int64_t want[1] = {d.n_embd};
            if ((st = conv_expect_shape(src, 1, want)) == TELA_OK) st = conv_add(c, src, "output_norm.weight") ? TELA_OK : TELA_ERR_NOMEM;
            seen[1] = true;
        } else if (!strcmp(name, "lm_head.weight")) {
            int64_t want[2] = {d.n_vocab, d.n_embd};
            if ((st = conv_expect_shape(src, 2, want)) == TELA_OK) st = conv_add(c, src, "output.weight") ? TELA_OK : TELA_ERR_NOMEM;
        } else if (conv_layer_part(name, "model.layers.", &bid, &rest) && bid < c->n_layer) {
            size_t stem;
            const char *suffix = param_suffix(rest, &stem);
            size_t k = 0;
            for (; suffix && k < sizeof LAYER_NAMES / sizeof LAYER_NAMES[0]; k++)
                if (strlen(LAYER_NAMES[k].hf) == stem && !strncmp(rest, LAYER_NAMES[k].hf, stem)) break;
            if (!suffix || k == sizeof LAYER_NAMES / sizeof LAYER_NAMES[0]) {
                st = tela_errorf(TELA_ERR_UNSUPPORTED, "%s: cannot map tensor %s to GGUF", c->hf_path, name);
                break;
            }
            bool is_bias = !strcmp(suffix, ".bias");
            /* expected HF shapes: [out, in] for weights, [out] for biases and norms */
            int64_t out_dim, in_dim;
            switch (k) {
            case 0: case 5: out_dim = d.n_embd; in_dim = 0; break;
            case 1: out_dim = d.n_head * d.head_dim; in_dim = d.n_embd; break;
            case 2: case 3: out_dim = d.n_head_kv * d.head_dim; in_dim = d.n_embd; break;
            case 4: out_dim = d.n_embd; in_dim = d.n_head * d.head_dim; break;
            case 8: out_dim = d.n_embd; in_dim = d.n_ff; break;
            default: out_dim = d.n_ff; in_dim = d.n_embd; break;
            }
            int64_t want[2] = {out_dim, in_dim};
            st = conv_expect_shape(src, in_dim && !is_bias ? 2 : 1, want);
            if (st != TELA_OK) break;
            conv_tensor *t = conv_add(c, src, "blk.%lld.%s%s", (long long)bid, LAYER_NAMES[k].gguf, suffix);
            if (!t) { st = TELA_ERR_NOMEM; break; }
            if (k == 1 || k == 2) {
                /* llama.cpp: permute(q, n_head, n_head), permute(k, n_head, n_head_kv) */
                int64_t heads = k == 1 ? d.n_head : d.n_head_kv;
                int64_t *m = permute_map(out_dim, heads);
                if (!m) { st = tela_errorf(TELA_ERR_NOMEM, "out of memory"); break; }
                if (is_bias) t->col_map = m;
                else t->row_map = m;
            }
            if (!is_bias) seen[3 + bid * 9 + k] = true;
        } else {
            st = tela_errorf(TELA_ERR_UNSUPPORTED, "%s: cannot map tensor %s to GGUF", c->hf_path, name);
        }
    }
    if (st == TELA_OK) {
        if (!seen[0]) st = tela_errorf(TELA_ERR_NOT_FOUND, "%s: missing tensor model.embed_tokens.weight", c->hf_path);
        else if (!seen[1]) st = tela_errorf(TELA_ERR_NOT_FOUND, "%s: missing tensor model.norm.weight", c->hf_path);
        for (int64_t b = 0; st == TELA_OK && b < c->n_layer; b++)
            for (size_t k = 0; k < 9; k++)
                if (!seen[3 + b * 9 + k]) {
                    st = tela_errorf(TELA_ERR_NOT_FOUND, "%s: missing tensor model.layers.%lld.%s.weight", c->hf_path,
                                     (long long)b, LAYER_NAMES[k].hf);
                    break;
                }
    }
    free(seen);
    return st;
}

static tela_status llama_params(conv_ctx *c) {
    llama_dims d;
    TELA_TRY(llama_dims_get(c, &d));
    TELA_TRY(conv_text_model_params(c));
    TELA_TRY(tela_gguf_writer_add_u32(c->w, conv_key(c, "vocab_size"), (uint32_t)d.n_vocab));
    return tela_gguf_writer_add_u32(c->w, conv_key(c, "rope.dimension_count"), (uint32_t)d.head_dim);
}

const conv_arch tela_conv_llama = {"LlamaForCausalLM", "llama", llama_plan, llama_params};
