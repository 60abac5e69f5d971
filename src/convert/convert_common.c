/* convert_common.c: what the converter's architecture parts
 * (convert_llama.c, convert_qwen35.c, convert_vocab.c) and its driver
 * (convert.c) share: config.json lookups, tensor-name helpers, the plan of
 * output tensors and the metadata every text model gets. It calls none of
 * them, so the files stand in one order: convert.c drives the
 * architectures' plans and the vocabulary, and all of them use this file. */
#include "convert/convert_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

int tela_convert_file_type(tela_type type) {
    switch (type) {
    case TELA_TYPE_F32: return 0;
    case TELA_TYPE_F16: return 1;
    case TELA_TYPE_Q8_0: return 7;
    case TELA_TYPE_BF16: return 32;
    default: return -1;
    }
}

/* ------------------------------------------------------------ config */

const cJSON *conv_cfg(const conv_ctx *c, const char *key) {
    if (c->text_cfg) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->text_cfg, key);
        if (v && !cJSON_IsNull(v)) return v;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->cfg, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

bool conv_cfg_has(const conv_ctx *c, const char *key) { return conv_cfg(c, key) != NULL; }

tela_status conv_cfg_num(const conv_ctx *c, const char *key, double *out) {
    const cJSON *v = conv_cfg(c, key);
    if (!v) return tela_errorf(TELA_ERR_NOT_FOUND, "%s/config.json: no \"%s\"", c->hf_path, key);
    if (!cJSON_IsNumber(v))
        return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: \"%s\" is not a number", c->hf_path, key);
    *out = v->valuedouble;
    return TELA_OK;
}

tela_status conv_cfg_int(const conv_ctx *c, const char *key, int64_t *out) {
    double d;
    TELA_TRY(conv_cfg_num(c, key, &d));
    if (d != floor(d) || d < 0 || d > 1e15)
        return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: \"%s\" = %g is not a valid count", c->hf_path,
                           key, d);
    *out = (int64_t)d;
    return TELA_OK;
}

const cJSON *conv_rope_params(const conv_ctx *c) {
    const cJSON *r = conv_cfg(c, "rope_parameters");
    if (!r || !cJSON_IsObject(r)) r = conv_cfg(c, "rope_scaling");
    if (!r || !cJSON_IsObject(r)) return NULL;
    const cJSON *full = cJSON_GetObjectItemCaseSensitive(r, "full_attention");
    return full && cJSON_IsObject(full) ? full : r;
}

bool conv_rope_theta(const conv_ctx *c, double *out) {
    const cJSON *r = conv_rope_params(c);
    const cJSON *v = r ? cJSON_GetObjectItemCaseSensitive(r, "rope_theta") : NULL;
    if (!v || !cJSON_IsNumber(v)) v = conv_cfg(c, "rope_theta");
    if (!v || !cJSON_IsNumber(v)) return false;
    *out = v->valuedouble;
    return true;
}

const char *conv_key(const conv_ctx *c, const char *suffix) {
    static _Thread_local char buf[256];
    snprintf(buf, sizeof buf, "%s.%s", c->arch, suffix);
    return buf;
}

/* -------------------------------------------------------------- names */

bool conv_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !memcmp(s + n - m, suffix, m);
}

int64_t conv_block_id(const char *name) {
    const char *p = name;
    while (*p) {
        const char *end = strchr(p, '.');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        bool digits = len > 0 && len < 10;
        for (size_t i = 0; i < len && digits; i++) digits = p[i] >= '0' && p[i] <= '9';
        if (digits) return strtoll(p, NULL, 10);
        if (!end) break;
        p = end + 1;
    }
    return -1;
}

bool conv_layer_part(const char *name, const char *prefix, int64_t *bid, const char **rest) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n)) return false;
    const char *p = name + n;
    if (*p < '0' || *p > '9') return false;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (*end != '.' || v < 0) return false;
    *bid = v;
    *rest = end + 1;
    return true;
}

tela_status conv_expect_shape(const tela_tensor *t, int n_dims, const int64_t *hf_shape) {
    bool ok = t->n_dims == n_dims;
    for (int i = 0; ok && i < n_dims; i++) ok = t->ne[n_dims - 1 - i] == hf_shape[i];
    if (ok) return TELA_OK;
    char want[96] = "", got[96] = "";
    size_t a = 0, b = 0;
    for (int i = 0; i < n_dims && a < sizeof want; i++)
        a += (size_t)snprintf(want + a, sizeof want - a, "%s%lld", i ? ", " : "", (long long)hf_shape[i]);
    for (int i = 0; i < t->n_dims && b < sizeof got; i++)
        b += (size_t)snprintf(got + b, sizeof got - b, "%s%lld", i ? ", " : "",
                              (long long)t->ne[t->n_dims - 1 - i]);
    return tela_errorf(TELA_ERR_FORMAT, "tensor %s has shape [%s], expected [%s] from config.json", t->name, got,
                       want);
}

/* --------------------------------------------------------------- plan */

static conv_tensor *plan_push(conv_ctx *c) {
    if (c->n_t == c->cap_t) {
        size_t cap = c->cap_t ? c->cap_t * 2 : 64;
        conv_tensor *t = realloc(c->t, cap * sizeof *t);
        if (!t) {
            tela_errorf(TELA_ERR_NOMEM, "out of memory planning the conversion");
            return NULL;
        }
        c->t = t;
        c->cap_t = cap;
    }
    conv_tensor *t = &c->t[c->n_t++];
    memset(t, 0, sizeof *t);
    for (int i = 0; i < TELA_MAX_DIMS; i++) t->ne[i] = 1;
    return t;
}

conv_tensor *conv_add(conv_ctx *c, const tela_tensor *src, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    conv_tensor *t = plan_push(c);
    if (!t) return NULL;
    t->name = strdup(name);
    if (!t->name) {
        c->n_t--;
        tela_errorf(TELA_ERR_NOMEM, "out of memory planning the conversion");
        return NULL;
    }
    t->src = src;
    t->n_dims = src->n_dims;
    for (int i = 0; i < TELA_MAX_DIMS; i++) t->ne[i] = src->ne[i];
    return t;
}

conv_tensor *conv_add_generated(conv_ctx *c, const char *name, const float *data, int64_t n) {
    conv_tensor *t = plan_push(c);
    if (!t) return NULL;
    t->name = strdup(name);
    t->gen = malloc((size_t)n * sizeof(float));
    if (!t->name || !t->gen) {
        free(t->name);
        free(t->gen);
        c->n_t--;
        tela_errorf(TELA_ERR_NOMEM, "out of memory planning the conversion");
        return NULL;
    }
    memcpy(t->gen, data, (size_t)n * sizeof(float));
    t->n_dims = 1;
    t->ne[0] = n;
    return t;
}

int64_t conv_rows(const conv_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

void conv_plan_free(conv_ctx *c) {
    for (size_t i = 0; i < c->n_t; i++) {
        free(c->t[i].name);
        free(c->t[i].gen);
        free(c->t[i].row_map);
        free(c->t[i].col_map);
    }
    free(c->t);
    c->t = NULL;
    c->n_t = c->cap_t = 0;
}

/* ----------------------------------------------------------- metadata */

tela_status conv_text_model_params(conv_ctx *c) {
    tela_gguf_writer *w = c->w;
    int64_t v;
    double d;
    TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "block_count"), (uint32_t)(c->n_layer + c->n_nextn)));
    if (conv_cfg_int(c, "max_position_embeddings", &v) == TELA_OK)
        TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "context_length"), (uint32_t)v));
    TELA_TRY(conv_cfg_int(c, "hidden_size", &v));
    TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "embedding_length"), (uint32_t)v));
    if (conv_cfg_int(c, "intermediate_size", &v) == TELA_OK)
        TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "feed_forward_length"), (uint32_t)v));
    TELA_TRY(conv_cfg_int(c, "num_attention_heads", &v));
    TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "attention.head_count"), (uint32_t)v));
    if (conv_cfg_int(c, "num_key_value_heads", &v) == TELA_OK)
        TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "attention.head_count_kv"), (uint32_t)v));

    const cJSON *rope = conv_rope_params(c);
    const cJSON *rtype = rope ? cJSON_GetObjectItemCaseSensitive(rope, "rope_type") : NULL;
    if (!cJSON_IsString(rtype) && rope) rtype = cJSON_GetObjectItemCaseSensitive(rope, "type");
    if (cJSON_IsString(rtype)) {
        const char *rt = rtype->valuestring;
        const cJSON *factor = cJSON_GetObjectItemCaseSensitive(rope, "factor");
        if (!strcmp(rt, "linear") && cJSON_IsNumber(factor)) {
            TELA_TRY(tela_gguf_writer_add_str(w, conv_key(c, "rope.scaling.type"), "linear"));
            TELA_TRY(tela_gguf_writer_add_f32(w, conv_key(c, "rope.scaling.factor"), (float)factor->valuedouble));
        } else if (!strcmp(rt, "yarn") && cJSON_IsNumber(factor)) {
            const cJSON *orig = cJSON_GetObjectItemCaseSensitive(rope, "original_max_position_embeddings");
            if (!cJSON_IsNumber(orig))
                return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: yarn rope scaling without "
                                   "original_max_position_embeddings", c->hf_path);
            TELA_TRY(tela_gguf_writer_add_str(w, conv_key(c, "rope.scaling.type"), "yarn"));
            TELA_TRY(tela_gguf_writer_add_f32(w, conv_key(c, "rope.scaling.factor"), (float)factor->valuedouble));
            TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "rope.scaling.original_context_length"),
                                              (uint32_t)orig->valuedouble));
            static const char *const yk[][2] = {{"extrapolation_factor", "rope.scaling.yarn_ext_factor"},
                                                {"attention_factor", "rope.scaling.yarn_attn_factor"},
                                                {"beta_fast", "rope.scaling.yarn_beta_fast"},
                                                {"beta_slow", "rope.scaling.yarn_beta_slow"}};
            for (size_t i = 0; i < sizeof yk / sizeof yk[0]; i++) {
                const cJSON *y = cJSON_GetObjectItemCaseSensitive(rope, yk[i][0]);
                if (!y && i == 1) y = cJSON_GetObjectItemCaseSensitive(rope, "attn_factor");
                if (cJSON_IsNumber(y)) TELA_TRY(tela_gguf_writer_add_f32(w, conv_key(c, yk[i][1]), (float)y->valuedouble));
            }
        } else if (!strcmp(rt, "su") || !strcmp(rt, "longrope")) {
            TELA_TRY(tela_gguf_writer_add_str(w, conv_key(c, "rope.scaling.type"), "longrope"));
        }
        /* "default": nothing; "llama3": the rope_freqs.weight tensor */
    }
    /* mrope sections from the rope parameters object itself (not its
     * full_attention entry), padded to 4 */
    const cJSON *rp = conv_cfg(c, "rope_parameters");
    if (!rp || !cJSON_IsObject(rp)) rp = conv_cfg(c, "rope_scaling");
    const cJSON *ms = rp && cJSON_IsObject(rp) ? cJSON_GetObjectItemCaseSensitive(rp, "mrope_section") : NULL;
    if (cJSON_IsArray(ms)) {
        int32_t sec[4] = {0, 0, 0, 0};
        int n = cJSON_GetArraySize(ms);
        for (int i = 0; i < n && i < 4; i++) {
            const cJSON *e = cJSON_GetArrayItem(ms, i);
            if (!cJSON_IsNumber(e))
                return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: mrope_section[%d] is not a number", c->hf_path, i);
            sec[i] = (int32_t)e->valuedouble;
        }
        TELA_TRY(tela_gguf_writer_add_arr(w, conv_key(c, "rope.dimension_sections"), TELA_GGUF_INT32, sec, 4));
    }
    if (conv_rope_theta(c, &d)) TELA_TRY(tela_gguf_writer_add_f32(w, conv_key(c, "rope.freq_base"), (float)d));
    if (conv_cfg_num(c, "rms_norm_eps", &d) == TELA_OK)
        TELA_TRY(tela_gguf_writer_add_f32(w, conv_key(c, "attention.layer_norm_rms_epsilon"), (float)d));
    if (conv_cfg_int(c, "head_dim", &v) == TELA_OK) {
        TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "attention.key_length"), (uint32_t)v));
        TELA_TRY(tela_gguf_writer_add_u32(w, conv_key(c, "attention.value_length"), (uint32_t)v));
    }
    return tela_gguf_writer_add_u32(w, "general.file_type", (uint32_t)tela_convert_file_type(c->params->type));
}
