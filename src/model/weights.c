/* weights.c: the helpers an architecture's load() uses: tensors by name
 * with their shapes checked, matrices and vectors, metadata from GGUF keys
 * and config.json, RoPE frequencies, memory owned by the model, and the
 * backend's copies (tela_model_const, tela_model_prepare_mats). */
#include "model/model.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/fp16.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

void *tela_model_alloc(tela_model *m, size_t bytes) {
    if (m->n_allocs == m->cap_allocs) {
        size_t cap = m->cap_allocs ? m->cap_allocs * 2 : 16;
        void **na = realloc(m->allocs, cap * sizeof *na);
        if (!na) {
            tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", m->path);
            return NULL;
        }
        m->allocs = na;
        m->cap_allocs = cap;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        tela_errorf(TELA_ERR_NOMEM, "%s: out of memory allocating %zu bytes", m->path, bytes);
        return NULL;
    }
    m->allocs[m->n_allocs++] = p;
    return p;
}

const tela_tensor *tela_model_find_tensor(const tela_model *m, const char *name) {
    if (m->gguf) {
        const tela_gguf_tensor *t = tela_gguf_find_tensor(m->gguf, name);
        return t ? &t->t : NULL;
    }
    if (m->ckpt) return tela_checkpoint_find(m->ckpt, name);
    return NULL;
}

static void shape_str(char *buf, size_t cap, const tela_tensor *t) {
    int n = snprintf(buf, cap, "[");
    for (int i = 0; i < t->n_dims && i < TELA_MAX_DIMS && n > 0 && (size_t)n < cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%lld", i ? ", " : "", (long long)t->ne[i]);
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]");
}

tela_status tela_model_get_mat(const tela_model *m, const char *name, int64_t n_rows, int64_t n_cols, bool optional,
                               tela_mat *out) {
    memset(out, 0, sizeof *out);
    const tela_tensor *t = tela_model_find_tensor(m, name);
    if (!t) {
        if (optional) return TELA_OK;
        return tela_errorf(TELA_ERR_NOT_FOUND, "%s: tensor '%s' (shape [%lld, %lld]) is missing", m->path, name,
                           (long long)n_cols, (long long)n_rows);
    }
    if (t->n_dims != 2 || t->ne[0] != n_cols || t->ne[1] != n_rows) {
        char found[96];
        shape_str(found, sizeof found, t);
        return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected [%lld, %lld] (ggml order)",
                           m->path, name, found, (long long)n_cols, (long long)n_rows);
    }
    tela_status s = tela_mat_from_tensor(t, out);
    if (s != TELA_OK) return tela_error_prefix(s, "%s: ", m->path);
    return TELA_OK;
}

tela_status tela_model_get_mat_shard(tela_model *m, const char *name, int64_t n_rows, int64_t n_cols,
                                     const tela_shard *shard, tela_mat *out) {
    TELA_TRY(tela_model_get_mat(m, name, n_rows, n_cols, false, out));
    if (shard->axis == TELA_SHARD_WHOLE) return TELA_OK;
    tela_status s = tela_shard_check_type(shard, out->type, name);
    if (s != TELA_OK) return tela_error_prefix(s, "%s: ", m->path);
    if (shard->axis == TELA_SHARD_ROWS && shard->n_ranges == 1) { /* contiguous rows: a view of the mapped file */
        if (shard->begin[0] < 0 || shard->count[0] < 0 || shard->begin[0] + shard->count[0] > n_rows)
            return tela_errorf(TELA_ERR_ARG, "%s: tensor '%s': rows [%lld, +%lld) outside %lld", m->path, name,
                               (long long)shard->begin[0], (long long)shard->count[0], (long long)n_rows);
        out->data = (const unsigned char *)out->data + (size_t)shard->begin[0] * out->row_bytes;
        out->n_rows = shard->count[0];
        return TELA_OK;
    }
    const size_t bytes = tela_shard_bytes(shard, out->type, n_rows, n_cols);
    void *part = tela_model_alloc(m, bytes);
    if (!part) return TELA_ERR_NOMEM;
    s = tela_shard_extract(shard, out->type, n_rows, n_cols, out->data, part);
    if (s != TELA_OK) return tela_error_prefix(s, "%s: tensor '%s': ", m->path, name);
    int64_t n = 0;
    for (int i = 0; i < shard->n_ranges; i++) n += shard->count[i];
    out->data = part;
    if (shard->axis == TELA_SHARD_ROWS) {
        out->n_rows = n;
    } else {
        out->n_cols = n;
        out->row_bytes = tela_type_row_bytes(out->type, n);
    }
    return TELA_OK;
}

tela_status tela_model_get_vocab_parts(tela_model *m, const char *name, int64_t n_vocab, int64_t n_embd,
                                       tela_mat **out) {
    const int world = m->tp_world > 1 ? m->tp_world : 1;
    *out = tela_model_alloc(m, (size_t)world * sizeof **out);
    if (!*out) return TELA_ERR_NOMEM;
    const tela_shard_dims d = {.n_vocab = n_vocab};
    for (int r = 0; r < world; r++) {
        tela_shard sh;
        tela_shard_of(&d, TELA_ROLE_OUTPUT, r, world, &sh);
        TELA_TRY(tela_model_get_mat_shard(m, name, n_vocab, n_embd, &sh, &(*out)[r]));
    }
    return TELA_OK;
}

tela_status tela_model_const(tela_model *m, const void *host, size_t bytes, const void **out) {
    tela_status s = tela_backend_const(m->be, host, bytes, out);
    return s == TELA_OK ? s : tela_error_prefix(s, "%s: ", m->path);
}

tela_status tela_model_prepare_mats(tela_model *m, tela_mat *const *mats, const tela_mat_use *uses, size_t n) {
    tela_status s = tela_backend_prepare_mats(m->be, mats, uses, n, m->verbose);
    return s == TELA_OK ? s : tela_error_prefix(s, "%s: ", m->path);
}

tela_backend *tela_model_rank_backend(const tela_model *m, int rank) {
    return m->n_dev > 1 ? m->devs[rank] : m->be;
}

tela_status tela_model_const_rank(tela_model *m, int rank, const void *host, size_t bytes, const void **out) {
    tela_status s = tela_backend_const(tela_model_rank_backend(m, rank), host, bytes, out);
    return s == TELA_OK ? s : tela_error_prefix(s, "%s: rank %d: ", m->path, rank);
}

tela_status tela_model_const_ranks(tela_model *m, const void *host, size_t bytes, const void ***out) {
    const int world = m->tp_world > 1 ? m->tp_world : 1, n_dev = m->n_dev > 1 ? world : 1;
    const void **copies = tela_model_alloc(m, (size_t)world * sizeof *copies);
    if (!copies) return TELA_ERR_NOMEM;
    for (int r = 0; r < world; r++) {
        if (r < n_dev) TELA_TRY(tela_model_const_rank(m, r, host, bytes, &copies[r]));
        else copies[r] = copies[0]; /* one device: one copy for every rank */
    }
    *out = copies;
    return TELA_OK;
}

tela_status tela_model_prepare_mats_rank(tela_model *m, int rank, tela_mat *const *mats, const tela_mat_use *uses,
                                         size_t n) {
    if (m->verbose && m->n_dev > 1)
        fprintf(stderr, "tela: rank %d on %s\n", rank, tela_backend_description(tela_model_rank_backend(m, rank)));
    tela_status s = tela_backend_prepare_mats(tela_model_rank_backend(m, rank), mats, uses, n, m->verbose);
    return s == TELA_OK ? s : tela_error_prefix(s, "%s: rank %d: ", m->path, rank);
}

tela_status tela_model_mat_lists(const tela_model *m, size_t cap, tela_mat ***list, tela_mat_use **uses) {
    *list = malloc(cap * sizeof **list);
    *uses = malloc(cap * sizeof **uses);
    if (*list && *uses) return TELA_OK;
    free(*list);
    free(*uses);
    *list = NULL;
    *uses = NULL;
    return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", m->path);
}

tela_status tela_model_get_vec(tela_model *m, const char *name, int64_t n, bool optional, float **out) {
    *out = NULL;
    const tela_tensor *t = tela_model_find_tensor(m, name);
    if (!t) {
        if (optional) return TELA_OK;
        return tela_errorf(TELA_ERR_NOT_FOUND, "%s: tensor '%s' (shape [%lld]) is missing", m->path, name,
                           (long long)n);
    }
    if (tela_tensor_nelements(t) != n || t->ne[0] != n) {
        char found[96];
        shape_str(found, sizeof found, t);
        return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected [%lld]", m->path, name, found,
                           (long long)n);
    }
    size_t esz = t->type == TELA_TYPE_F32 ? 4 : (t->type == TELA_TYPE_F16 || t->type == TELA_TYPE_BF16) ? 2 : 0;
    if (!esz) {
        const tela_type_traits *tr = tela_type_get_traits(t->type);
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, expected f32, f16 or bf16", m->path,
                           name, tr ? tr->name : "unknown");
    }
    if (t->nbytes != (size_t)n * esz || !t->data)
        return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s': %zu bytes of data for %lld elements", m->path, name,
                           t->nbytes, (long long)n);
    float *v = tela_model_alloc(m, (size_t)n * sizeof(float));
    if (!v) return TELA_ERR_NOMEM;
    const unsigned char *src = t->data;
    for (int64_t i = 0; i < n; i++) {
        if (t->type == TELA_TYPE_F32) {
            memcpy(&v[i], src + i * 4, 4);
        } else {
            uint16_t h;
            memcpy(&h, src + i * 2, 2);
            v[i] = t->type == TELA_TYPE_F16 ? tela_f16_to_f32(h) : tela_bf16_to_f32(h);
        }
    }
    *out = v;
    return TELA_OK;
}

tela_status tela_model_gguf_u32(const tela_model *m, const char *suffix, bool optional, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    if (!tela_gguf_find(m->gguf, key)) {
        if (optional) return TELA_OK;
        return tela_errorf(TELA_ERR_NOT_FOUND, "%s: metadata key '%s' is missing", m->path, key);
    }
    return tela_gguf_get_u32(m->gguf, key, out);
}

tela_status tela_model_gguf_f32(const tela_model *m, const char *suffix, bool optional, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    if (!tela_gguf_find(m->gguf, key)) {
        if (optional) return TELA_OK;
        return tela_errorf(TELA_ERR_NOT_FOUND, "%s: metadata key '%s' is missing", m->path, key);
    }
    return tela_gguf_get_f32(m->gguf, key, out);
}

static const cJSON *json_member(const void *obj, const char *key) {
    const cJSON *o = obj;
    if (!o || !cJSON_IsObject(o)) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return NULL;
    return v;
}

tela_status tela_model_skip_mask(tela_model *m, int n_layer, const bool **out) {
    *out = NULL;
    if (m->n_skip_req == 0) return TELA_OK;
    bool *mask = tela_model_alloc(m, (size_t)n_layer);
    if (!mask) return TELA_ERR_NOMEM;
    for (size_t i = 0; i < m->n_skip_req; i++) {
        const int32_t l = m->skip_req[i];
        if (l < 0 || l >= n_layer)
            return tela_errorf(TELA_ERR_ARG, "%s: cannot skip layer %d: the model has %d layers (0 to %d)", m->path, l,
                               n_layer, n_layer - 1);
        mask[l] = true;
    }
    m->skip = mask;
    *out = mask;
    return TELA_OK;
}

const char *tela_model_json_str(const void *obj, const char *key) {
    const cJSON *v = json_member(obj, key);
    return v && cJSON_IsString(v) ? v->valuestring : NULL;
}

const void *tela_model_json_object(const void *obj, const char *key) {
    const cJSON *v = json_member(obj, key);
    return v && cJSON_IsObject(v) ? v : NULL;
}

tela_status tela_model_json_int(const tela_model *m, const void *obj, const char *key, bool optional, int64_t *out) {
    const cJSON *v = json_member(obj, key);
    if (!v) {
        if (optional) return TELA_OK;
        return tela_errorf(TELA_ERR_NOT_FOUND, "%s: config.json has no '%s'", m->path, key);
    }
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || d != floor(d) || fabs(d) > 9.0e15)
        return tela_errorf(TELA_ERR_FORMAT, "%s: config.json '%s' is not an integer", m->path, key);
    *out = (int64_t)d;
    return TELA_OK;
}

tela_status tela_model_json_float(const tela_model *m, const void *obj, const char *key, bool optional,
                                  double *out) {
    const cJSON *v = json_member(obj, key);
    if (!v) {
        if (optional) return TELA_OK;
        return tela_errorf(TELA_ERR_NOT_FOUND, "%s: config.json has no '%s'", m->path, key);
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return tela_errorf(TELA_ERR_FORMAT, "%s: config.json '%s' is not a number", m->path, key);
    *out = v->valuedouble;
    return TELA_OK;
}

tela_status tela_model_json_bool(const tela_model *m, const void *obj, const char *key, bool optional, bool *out) {
    const cJSON *v = json_member(obj, key);
    if (!v) {
        if (optional) return TELA_OK;
        return tela_errorf(TELA_ERR_NOT_FOUND, "%s: config.json has no '%s'", m->path, key);
    }
    if (!cJSON_IsBool(v)) return tela_errorf(TELA_ERR_FORMAT, "%s: config.json '%s' is not true/false", m->path, key);
    *out = cJSON_IsTrue(v);
    return TELA_OK;
}

void tela_rope_inv_freq(double *inv_freq, int n_rot, double base, const float *factors) {
    for (int i = 0; i < n_rot / 2; i++) {
        inv_freq[i] = pow(base, -2.0 * i / n_rot);
        if (factors) inv_freq[i] /= factors[i];
    }
}

/* Llama 3.1's scheme: wavelengths shorter than original_max_pos /
 * high_freq_factor keep their frequency, those longer than original_max_pos
 * / low_freq_factor are divided by `factor`, and the band between is a
 * linear blend (in 1/wavelength) of the two. */
void tela_rope_llama3_factors(float *factors, int n_rot, double base, double factor, double low_freq_factor,
                              double high_freq_factor, double original_max_pos) {
    const double pi = 3.14159265358979323846;
    double low_wavelen = original_max_pos / low_freq_factor;
    double high_wavelen = original_max_pos / high_freq_factor;
    for (int i = 0; i < n_rot / 2; i++) {
        double inv = pow(base, -2.0 * i / n_rot);
        double wavelen = 2.0 * pi / inv;
        double scaled;
        if (wavelen < high_wavelen) {
            scaled = inv;
        } else if (wavelen > low_wavelen) {
            scaled = inv / factor;
        } else {
            double smooth = (original_max_pos / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            scaled = (1.0 - smooth) * inv / factor + smooth * inv;
        }
        factors[i] = (float)(inv / scaled);
    }
}

