/* convert.c: the driver of HF -> GGUF conversion: opens the checkpoint, picks
 * the architecture, builds the plan of output tensors, decides each tensor's
 * type the way llama.cpp's converter does, converts tensor by tensor into a
 * scratch file and hands the result to the GGUF writer. */
#include "convert/convert_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "quant/quant.h"
#include "util/error.h"
#include "util/fp16.h"

tela_convert_params tela_convert_default_params(void) {
    tela_convert_params p;
    memset(&p, 0, sizeof p);
    p.type = TELA_TYPE_F16; /* llama.cpp's default --outtype */
    return p;
}

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

static void plan_free(conv_ctx *c) {
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

/* llama.cpp's per-tensor type rule (ModelBase.prepare_tensors): 1-D tensors,
 * "*_norm.weight", conv1d kernels and anything not ending in ".weight" stay
 * F32; the rest get the requested type; Q8_0 rows that are not a multiple of
 * 32 fall back to F16. */
static tela_type choose_type(const conv_tensor *t, tela_type want) {
    if (t->n_dims <= 1 || conv_ends_with(t->name, "_norm.weight")) return TELA_TYPE_F32;
    if (conv_ends_with(t->name, "ssm_conv1d.weight")) return TELA_TYPE_F32;
    if (!conv_ends_with(t->name, ".weight")) return TELA_TYPE_F32;
    if (want == TELA_TYPE_Q8_0 && t->ne[0] % TELA_QK8_0 != 0) return TELA_TYPE_F16;
    return want;
}

/* ---------------------------------------------------------- converting */

/* Element i of a source tensor row as float32. */
static float src_elem(const tela_tensor *src, const unsigned char *p, int64_t i) {
    switch (src->type) {
    case TELA_TYPE_F32: {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
    }
    case TELA_TYPE_F16: {
        uint16_t h;
        memcpy(&h, p + i * 2, 2);
        return tela_f16_to_f32(h);
    }
    default: { /* BF16, checked before */
        uint16_t h;
        memcpy(&h, p + i * 2, 2);
        return tela_bf16_to_f32(h);
    }
    }
}

static size_t src_elem_size(tela_type type) { return type == TELA_TYPE_F32 ? 4 : 2; }

/* torch keeps f16 tensors in f16 through llama.cpp's modify_tensors (bf16
 * goes to f32 first), so an op on an f16 source rounds its result to f16. */
static float apply_op(conv_op op, float x, tela_type src_type) {
    float y = x;
    if (op == CONV_OP_ADD_ONE) y = x + 1.0f;
    else if (op == CONV_OP_NEG_EXP) y = -expf(x);
    if (op != CONV_OP_COPY && src_type == TELA_TYPE_F16) y = tela_f16_to_f32(tela_f32_to_f16(y));
    return y;
}

static tela_status encode_row(tela_type type, const float *x, int64_t n, unsigned char *dst) {
    switch (type) {
    case TELA_TYPE_F32:
        memcpy(dst, x, (size_t)n * 4);
        return TELA_OK;
    case TELA_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = tela_f32_to_f16(x[i]);
            memcpy(dst + i * 2, &h, 2);
        }
        return TELA_OK;
    case TELA_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = tela_f32_to_bf16(x[i]);
            memcpy(dst + i * 2, &h, 2);
        }
        return TELA_OK;
    default:
        return tela_quantize_row(type, x, dst, n);
    }
}

static tela_status write_all(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return tela_errorf(TELA_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return TELA_OK;
}

/* Converts one planned tensor row by row into the scratch file. */
static tela_status convert_tensor(const conv_tensor *t, int fd, const char *scratch_path) {
    int64_t ne0 = t->ne[0], rows = conv_rows(t);
    size_t row_bytes = tela_type_row_bytes(t->type, ne0);
    if (!row_bytes) return tela_error_prefix(TELA_ERR_INTERNAL, "tensor %s: ", t->name);
    /* a batch of rows per write keeps syscalls few for small rows */
    int64_t batch = (int64_t)((1u << 20) / row_bytes);
    if (batch < 1) batch = 1;
    if (batch > rows) batch = rows;
    float *in = malloc((size_t)ne0 * sizeof(float));
    float *out = malloc((size_t)ne0 * sizeof(float));
    unsigned char *buf = malloc((size_t)batch * row_bytes);
    tela_status st = TELA_OK;
    if (!in || !out || !buf) {
        st = tela_errorf(TELA_ERR_NOMEM, "out of memory converting %s", t->name);
        goto done;
    }
    size_t esz = t->src ? src_elem_size(t->src->type) : 4;
    int64_t in_batch = 0;
    uint64_t off = t->offset;
    for (int64_t r = 0; r < rows; r++) {
        int64_t sr = t->row_map ? t->row_map[r] : r;
        if (t->src) {
            const unsigned char *p = (const unsigned char *)t->src->data + (size_t)sr * (size_t)ne0 * esz;
            for (int64_t i = 0; i < ne0; i++) in[i] = src_elem(t->src, p, i);
        } else {
            memcpy(in, t->gen + sr * ne0, (size_t)ne0 * sizeof(float));
        }
        tela_type st_type = t->src ? t->src->type : TELA_TYPE_F32;
        for (int64_t i = 0; i < ne0; i++) out[i] = apply_op(t->op, in[t->col_map ? t->col_map[i] : i], st_type);
        st = encode_row(t->type, out, ne0, buf + (size_t)in_batch * row_bytes);
        if (st != TELA_OK) {
            tela_error_prefix(st, "tensor %s: ", t->name);
            goto done;
        }
        if (++in_batch == batch || r == rows - 1) {
            st = write_all(fd, buf, (size_t)in_batch * row_bytes, off, scratch_path);
            if (st != TELA_OK) goto done;
            off += (uint64_t)in_batch * row_bytes;
            in_batch = 0;
        }
    }
done:
    free(in);
    free(out);
    free(buf);
    return st;
}

/* ----------------------------------------------------------- metadata */

/* llama.cpp's model_weight_count_rounded_notation(min_digits=2). */
static void size_label(uint64_t n, char *out, size_t cap) {
    double x = (double)n, scaled;
    const char *suffix;
    if (x > 1e12) scaled = x * 1e-12, suffix = "T";
    else if (x > 1e9) scaled = x * 1e-9, suffix = "B";
    else if (x > 1e6) scaled = x * 1e-6, suffix = "M";
    else scaled = x * 1e-3, suffix = "K";
    /* digits of round(scaled) without leading zeros (Python rounds half to even) */
    char digits[64];
    snprintf(digits, sizeof digits, "%.0f", nearbyint(scaled));
    const char *d = digits;
    while (*d == '0') d++;
    int fix = 2 - (int)strlen(d);
    if (fix < 0) fix = 0;
    snprintf(out, cap, "%.*f%s", fix, scaled, suffix);
}

/* llama.cpp's Metadata.id_to_title on a directory name: '-' -> ' ', and
 * all-lowercase words that are not versions/numbers get Title Case. */
static void id_to_title(const char *id, char *out, size_t cap) {
    size_t o = 0;
    const char *p = id;
    while (*p && o + 1 < cap) {
        while (*p == '-' || *p == ' ') p++;
        if (!*p) break;
        const char *s = p;
        while (*p && *p != '-' && *p != ' ') p++;
        size_t len = (size_t)(p - s);
        bool has_cased = false, has_upper = false;
        for (size_t i = 0; i < len; i++) {
            unsigned char ch = (unsigned char)s[i];
            if (ch >= 'a' && ch <= 'z') has_cased = true;
            if (ch >= 'A' && ch <= 'Z') has_cased = has_upper = true;
        }
        bool version = (s[0] == 'v' && len > 1 && s[1] >= '0' && s[1] <= '9') || (s[0] >= '0' && s[0] <= '9');
        bool title = has_cased && !has_upper && !version;
        if (o && o + 1 < cap) out[o++] = ' ';
        /* Python's str.title(): a letter after a non-letter is upper case */
        bool prev_letter = false;
        for (size_t i = 0; i < len && o + 1 < cap; i++) {
            char ch = s[i];
            bool letter = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
            if (title && letter) ch = prev_letter ? ch : (char)(ch - (ch >= 'a' && ch <= 'z' ? 32 : 0));
            prev_letter = letter;
            out[o++] = ch;
        }
    }
    out[o] = '\0';
}

static void default_name(const conv_ctx *c, char *out, size_t cap) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", c->hf_path);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = '\0';
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    /* a "org/model" _name_or_path names the model better than a directory */
    const cJSON *nop = cJSON_GetObjectItemCaseSensitive(c->cfg, "_name_or_path");
    if (cJSON_IsString(nop) && nop->valuestring[0] && nop->valuestring[0] != '/' && nop->valuestring[0] != '.') {
        const char *s = nop->valuestring;
        int slashes = 0;
        for (const char *q = s; *q; q++) slashes += *q == '/';
        if (slashes <= 1) base = strrchr(s, '/') ? strrchr(s, '/') + 1 : s;
    }
    id_to_title(base, out, cap);
}

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

/* ------------------------------------------------------------ driver */

static const conv_arch *const ARCHS[] = {&tela_conv_llama, &tela_conv_qwen35, &tela_conv_qwen35_mm};

static tela_status open_config(conv_ctx *c, const conv_arch **arch) {
    const cJSON *cfg = tela_checkpoint_config(c->ck);
    if (!cfg) return tela_errorf(TELA_ERR_NOT_FOUND, "%s: no config.json (tela convert needs an HF checkpoint directory)",
                                 c->hf_path);
    c->cfg = cfg;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
    c->text_cfg = cJSON_IsObject(tc) ? tc : NULL;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    if (!cJSON_IsString(a0))
        return tela_errorf(TELA_ERR_FORMAT, "%s/config.json: no \"architectures\" list naming the model class",
                           c->hf_path);
    c->hf_arch = a0->valuestring;
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(ARCHS[i]->hf_arch, c->hf_arch)) {
            *arch = ARCHS[i];
            c->arch = ARCHS[i]->gguf_arch;
            return conv_cfg_int(c, "num_hidden_layers", &c->n_layer);
        }
    return tela_errorf(TELA_ERR_UNSUPPORTED,
                       "%s: architecture %s is not supported by tela convert (supported: LlamaForCausalLM, "
                       "Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration)", c->hf_path, c->hf_arch);
}

static void progress(const conv_ctx *c, size_t i, const conv_tensor *t) {
    if (!c->params->progress) return;
    fprintf(stderr, "\r\033[K[%zu/%zu] %s %s", i + 1, c->n_t, t->name, tela_type_name(t->type));
    if (i + 1 == c->n_t) fputc('\n', stderr);
    fflush(stderr);
}

static tela_status convert(conv_ctx *c, const char *out_path) {
    const conv_arch *arch = NULL;
    TELA_TRY(open_config(c, &arch));
    TELA_TRY(arch->plan(c));
    if (c->n_t == 0) return tela_errorf(TELA_ERR_FORMAT, "%s: no tensors to convert", c->hf_path);

    /* types, sizes and places in the scratch file */
    uint64_t total = 0, n_params = 0;
    for (size_t i = 0; i < c->n_t; i++) {
        conv_tensor *t = &c->t[i];
        t->type = choose_type(t, c->params->type);
        TELA_TRY(tela_type_tensor_bytes(t->type, t->ne, t->n_dims, &t->nbytes));
        t->offset = total;
        total += (t->nbytes + 31) & ~(uint64_t)31;
        n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        if (t->src && t->src->type != TELA_TYPE_F32 && t->src->type != TELA_TYPE_F16 &&
            t->src->type != TELA_TYPE_BF16)
            return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: tensor %s has type %s; tela convert reads F32, F16 and BF16",
                               c->hf_path, t->src->name, tela_type_name(t->src->type));
    }

    /* metadata, in llama.cpp's order */
    char name[512], label[32];
    if (c->params->name) snprintf(name, sizeof name, "%s", c->params->name);
    else default_name(c, name, sizeof name);
    size_label(n_params, label, sizeof label);
    TELA_TRY(tela_gguf_writer_add_str(c->w, "general.architecture", c->arch));
    TELA_TRY(tela_gguf_writer_add_str(c->w, "general.type", "model"));
    TELA_TRY(tela_gguf_writer_add_str(c->w, "general.name", name));
    TELA_TRY(tela_gguf_writer_add_str(c->w, "general.size_label", label));
    TELA_TRY(arch->params(c));
    TELA_TRY(tela_gguf_writer_add_u32(c->w, "general.quantization_version", 2));
    tela_status vs = TELA_ERR_NOT_FOUND;
    if (!c->params->no_vocab) {
        int64_t n_vocab = 0;
        if (conv_cfg_int(c, "vocab_size", &n_vocab) != TELA_OK) n_vocab = 0;
        vs = conv_vocab(c, tela_checkpoint_dir(c->ck), n_vocab);
        if (vs != TELA_OK && vs != TELA_ERR_NOT_FOUND) return vs;
    }
    /* Without a tokenizer, say so the way llama.cpp's converter does
     * (_set_vocab_none): llama.cpp refuses a file with no tokenizer.ggml.model
     * at all, and loads "none" as a token-ids-only model. */
    if (vs == TELA_ERR_NOT_FOUND) {
        TELA_TRY(tela_gguf_writer_add_str(c->w, "tokenizer.ggml.model", "none"));
        /* ...and takes the vocabulary size from <arch>.vocab_size then */
        int64_t n_vocab = 0;
        if (!tela_gguf_writer_has_key(c->w, conv_key(c, "vocab_size")) &&
            conv_cfg_int(c, "vocab_size", &n_vocab) == TELA_OK && n_vocab > 0 && n_vocab <= UINT32_MAX)
            TELA_TRY(tela_gguf_writer_add_u32(c->w, conv_key(c, "vocab_size"), (uint32_t)n_vocab));
    }

    /* tensor data: converted one tensor at a time into an unlinked scratch
     * file beside the output, then mapped for the writer (which references
     * tensor data until it writes), so memory stays small for any model */
    char scratch[4096];
    snprintf(scratch, sizeof scratch, "%s.convert-scratch", out_path);
    int fd = open(scratch, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return tela_errorf(TELA_ERR_IO, "%s: cannot create: %s", scratch, strerror(errno));
    unlink(scratch);
    tela_status st = TELA_OK;
    unsigned char *map = NULL;
    if (total > 0) {
        int e = posix_fallocate(fd, 0, (off_t)total);
        if (e) {
            st = tela_errorf(TELA_ERR_IO, "%s: cannot reserve %llu bytes: %s", scratch, (unsigned long long)total,
                             strerror(e));
            goto out;
        }
    }
    for (size_t i = 0; i < c->n_t; i++) {
        progress(c, i, &c->t[i]);
        st = convert_tensor(&c->t[i], fd, scratch);
        if (st != TELA_OK) goto out;
    }
    if (total > 0) {
        map = mmap(NULL, total, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            st = tela_errorf(TELA_ERR_IO, "%s: mmap failed: %s", scratch, strerror(errno));
            goto out;
        }
    }
    for (size_t i = 0; i < c->n_t; i++) {
        const conv_tensor *t = &c->t[i];
        st = tela_gguf_writer_add_tensor(c->w, t->name, t->type, t->ne, t->n_dims, map + t->offset, t->nbytes);
        if (st != TELA_OK) goto out;
    }
    st = tela_gguf_writer_write(c->w, out_path);
out:
    if (map) munmap(map, total);
    close(fd);
    return st;
}

tela_status tela_convert_hf(const char *hf_path, const char *out_path, const tela_convert_params *params) {
    if (!hf_path || !out_path || !params) return tela_errorf(TELA_ERR_ARG, "tela_convert_hf: NULL argument");
    if (tela_convert_file_type(params->type) < 0)
        return tela_errorf(TELA_ERR_ARG, "tela convert: output type %s is not one of f32, f16, bf16, q8_0",
                           tela_type_name(params->type) ? tela_type_name(params->type) : "?");
    conv_ctx c;
    memset(&c, 0, sizeof c);
    c.hf_path = hf_path;
    c.params = params;
    tela_status st = tela_checkpoint_open(hf_path, &c.ck);
    if (st != TELA_OK) return st;
    c.w = tela_gguf_writer_create();
    if (!c.w) {
        tela_checkpoint_close(c.ck);
        return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    }
    st = convert(&c, out_path);
    tela_gguf_writer_free(c.w);
    plan_free(&c);
    tela_checkpoint_close(c.ck);
    return st;
}
