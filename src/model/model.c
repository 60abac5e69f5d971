/* model.c: loading a model: detects the source format (GGUF file,
 * .safetensors file, Hugging Face checkpoint directory), picks the
 * architecture, loads the tokenizer, and offers the architectures helpers to
 * read checked weights and hyperparameters. Also the public
 * tela_model_* functions. */
#include "model/model.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/fp16.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Every architecture tela knows. */
static const tela_arch *const tela_archs[] = {
    &tela_arch_llama,
    &tela_arch_qwen35,
};

#define N_ARCHS (sizeof tela_archs / sizeof tela_archs[0])

tela_model_params tela_model_default_params(void) {
    tela_model_params p;
    memset(&p, 0, sizeof p);
    return p;
}

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

tela_status tela_model_const(tela_model *m, const void *host, size_t bytes, const void **out) {
    tela_status s = tela_backend_const(m->be, host, bytes, out);
    return s == TELA_OK ? s : tela_error_prefix(s, "%s: ", m->path);
}

tela_status tela_model_prepare_mats(tela_model *m, tela_mat *const *mats, const tela_mat_use *uses, size_t n) {
    tela_status s = tela_backend_prepare_mats(m->be, mats, uses, n, m->verbose);
    return s == TELA_OK ? s : tela_error_prefix(s, "%s: ", m->path);
}

/* ------------------------------------------------- forward-pass helpers */

tela_status tela_model_io_init(tela_model_io *io, tela_exec *ex, int n_vocab, int n_batch) {
    memset(io, 0, sizeof *io);
    io->ex = ex;
    io->n_vocab = n_vocab;
    io->n_batch = n_batch;
    tela_backend *be = tela_exec_backend(ex);
    TELA_TRY(tela_backend_alloc(be, (size_t)n_batch * sizeof(int32_t), "token ids", (void **)&io->tok));
    TELA_TRY(tela_backend_alloc(be, (size_t)n_batch * sizeof(int32_t), "positions", (void **)&io->pos));
    TELA_TRY(tela_backend_alloc(be, (size_t)n_vocab * sizeof(float), "logits", (void **)&io->logits1));
    TELA_TRY(tela_backend_alloc(be, sizeof(int32_t), "the greedy pick", (void **)&io->pick));
    return TELA_OK;
}

void tela_model_io_free(tela_model_io *io) {
    if (!io->ex) return;
    tela_backend *be = tela_exec_backend(io->ex);
    tela_backend_free_mem(be, io->tok);
    tela_backend_free_mem(be, io->pos);
    tela_backend_free_mem(be, io->logits1);
    tela_backend_free_mem(be, io->logits);
    tela_backend_free_mem(be, io->pick);
    memset(io, 0, sizeof *io);
}

/* Backend memory for `rows` rows of logits: the fixed one-row buffer, or
 * the all-logits buffer grown to size (never while a graph is captured:
 * only decode steps are, and they have one row). */
static tela_status io_logits(tela_model_io *io, int rows, float **out) {
    if (rows <= 1) {
        *out = io->logits1;
        return TELA_OK;
    }
    if (rows > io->logit_rows) {
        tela_backend *be = tela_exec_backend(io->ex);
        TELA_TRY(tela_exec_sync(io->ex));
        tela_backend_free_mem(be, io->logits);
        io->logits = NULL;
        io->logit_rows = 0;
        TELA_TRY(tela_backend_alloc(be, (size_t)rows * (size_t)io->n_vocab * sizeof(float), "logits",
                                    (void **)&io->logits));
        io->logit_rows = rows;
    }
    *out = io->logits;
    return TELA_OK;
}

tela_status tela_model_run_steps(const tela_model *m, void *state, tela_model_step_fn fn, tela_model_io *io,
                                 const int32_t *tokens, int32_t n, int32_t n_past, const tela_forward_out *out) {
    tela_exec *ex = io->ex;
    const bool host = tela_exec_host_visible(ex);
    const size_t row_bytes = (size_t)io->n_vocab * sizeof(float);
    for (int32_t done = 0; done < n;) {
        const int nt = n - done < io->n_batch ? n - done : io->n_batch;
        const bool last = done + nt == n;
        tela_model_step step = {nt, 0, NULL, last && out->greedy != NULL};
        if (out->logits && out->all_logits) step.rows = nt;
        else if (last && (out->logits || out->greedy)) step.rows = 1;
        float *host_dst = out->logits ? out->logits + (out->all_logits ? (size_t)done * io->n_vocab : 0) : NULL;
        if (step.rows && host && host_dst) step.logits = host_dst; /* the CPU writes straight to the caller */
        else if (step.rows) TELA_TRY(io_logits(io, step.rows, &step.logits));
        TELA_TRY(tela_exec_set_batch(ex, &io->batch, io->tok, io->pos, tokens + done, nt, n_past + done));
        if (nt == 1) {
            /* decode steps repeat: the same work at every position of a length bucket */
            uint64_t key = 1u | (uint64_t)step.rows << 8 | (uint64_t)step.pick << 16 |
                           (uint64_t)tela_exec_length_bucket(ex, n_past + done + 1) << 32;
            if (tela_exec_graph_begin(ex, key)) fn(m, state, &step);
            TELA_TRY(tela_exec_graph_end(ex));
        } else {
            fn(m, state, &step);
        }
        if (step.rows && host_dst && step.logits != host_dst)
            TELA_TRY(tela_exec_download(ex, host_dst, step.logits, (size_t)step.rows * row_bytes));
        if (step.pick) TELA_TRY(tela_exec_download(ex, out->greedy, io->pick, sizeof(int32_t)));
        done += nt;
    }
    return tela_exec_sync(ex);
}

void tela_model_output_head(tela_exec *ex, const tela_mat *output, const float *norm, float eps, const float *x,
                            float *xb, int n_embd, const tela_model_step *step, tela_model_io *io) {
    if (step->rows == 0) return;
    const float *first = x + (size_t)(step->n_tok - step->rows) * n_embd;
    const tela_norm_in nrm = {norm, eps, xb};
    const tela_matmul_target t = {output, step->logits, io->n_vocab};
    tela_exec_norm_matmul_many(ex, &nrm, &t, 1, first, n_embd, step->rows);
    if (step->pick)
        tela_exec_argmax(ex, step->logits + (size_t)(step->rows - 1) * io->n_vocab, io->n_vocab, io->pick);
}

void tela_model_ffn_swiglu(tela_exec *ex, const tela_model_ffn *f, float *x, float *xb, float *gate, int n_embd,
                           int n_tok, float eps) {
    const int64_t n_ff = f->w_gate.n_rows;
    const tela_norm_in norm = {f->norm, eps, xb};
    tela_exec_norm_matmul_swiglu(ex, &norm, &f->w_gate, &f->w_up, x, n_embd, gate, n_ff, n_tok);
    tela_exec_matmul(ex, &f->w_down, gate, n_ff, x, n_embd, n_tok, true);
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

/* ------------------------------------------------------------- loading */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const tela_arch *arch_by_name(const char *name) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (!strcmp(tela_archs[i]->name, name)) return tela_archs[i];
    return NULL;
}

static const tela_arch *arch_by_hf_type(const char *model_type) {
    for (size_t i = 0; i < N_ARCHS; i++)
        for (const char *const *t = tela_archs[i]->hf_model_types; t && *t; t++)
            if (!strcmp(*t, model_type)) return tela_archs[i];
    return NULL;
}

static tela_status open_gguf(tela_model *m) {
    TELA_TRY(tela_gguf_open(m->path, &m->gguf));
    tela_gguf_str arch;
    tela_status s = tela_gguf_get_str(m->gguf, "general.architecture", &arch);
    if (s != TELA_OK) return tela_error_prefix(s, "%s: ", m->path);
    if (arch.len >= sizeof m->arch_name)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: architecture name of %llu bytes is too long", m->path,
                           (unsigned long long)arch.len);
    memcpy(m->arch_name, arch.ptr, (size_t)arch.len);
    m->arch_name[arch.len] = '\0';
    m->arch = arch_by_name(m->arch_name);
    if (!m->arch)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported", m->path, m->arch_name);
    tela_gguf_str name;
    if (tela_gguf_find(m->gguf, "general.name") && tela_gguf_get_str(m->gguf, "general.name", &name) == TELA_OK) {
        size_t n = name.len < sizeof m->name_buf - 1 ? (size_t)name.len : sizeof m->name_buf - 1;
        memcpy(m->name_buf, name.ptr, n);
        m->name_buf[n] = '\0';
    }
    return TELA_OK;
}

static tela_status open_checkpoint(tela_model *m) {
    TELA_TRY(tela_checkpoint_open(m->path, &m->ckpt));
    m->hf_config = tela_checkpoint_config(m->ckpt);
    if (!m->hf_config)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: no config.json beside the weights, so the architecture is unknown",
                           m->path);
    const cJSON *mt = json_member(m->hf_config, "model_type");
    if (!mt || !cJSON_IsString(mt))
        return tela_errorf(TELA_ERR_FORMAT, "%s: config.json has no string 'model_type'", m->path);
    m->arch = arch_by_hf_type(mt->valuestring);
    if (!m->arch)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: model_type '%s' is not supported", m->path, mt->valuestring);
    snprintf(m->arch_name, sizeof m->arch_name, "%s", m->arch->name);
    const cJSON *nm = json_member(m->hf_config, "_name_or_path");
    if (nm && cJSON_IsString(nm)) snprintf(m->name_buf, sizeof m->name_buf, "%s", nm->valuestring);
    return TELA_OK;
}

/* The tokenizer is optional: a model without one (or with one tela cannot
 * read) still runs on token ids; the reason is kept for error messages. */
static tela_status load_vocab(tela_model *m) {
    tela_status s;
    if (m->gguf) {
        s = tela_vocab_load_gguf(m->gguf, &m->vocab);
    } else {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizer.json", tela_checkpoint_dir(m->ckpt));
        if (access(path, R_OK) != 0) {
            s = tela_errorf(TELA_ERR_NOT_FOUND, "no tokenizer.json in %s", tela_checkpoint_dir(m->ckpt));
        } else {
            s = tela_vocab_load_hf(tela_checkpoint_dir(m->ckpt), &m->vocab);
        }
    }
    if (s == TELA_OK) return TELA_OK;
    m->vocab = NULL;
    if (s == TELA_ERR_NOMEM) return s;
    m->no_vocab_reason = strdup(tela_last_error());
    if (m->verbose && s != TELA_ERR_NOT_FOUND)
        fprintf(stderr, "tela: warning: %s: tokenizer not loaded: %s\n", m->path, tela_last_error());
    return TELA_OK;
}

static void tensor_stats(tela_model *m) {
    size_t n = m->gguf ? (size_t)m->gguf->n_tensors : tela_checkpoint_n_tensors(m->ckpt);
    uint64_t bytes_by_type[TELA_TYPE_COUNT] = {0};
    for (size_t i = 0; i < n; i++) {
        const tela_tensor *t = m->gguf ? &m->gguf->tensors[i].t : tela_checkpoint_tensor(m->ckpt, i);
        m->info.n_params += tela_tensor_nelements(t);
        m->info.n_bytes += t->nbytes;
        if (t->n_dims >= 2 && (unsigned)t->type < TELA_TYPE_COUNT) bytes_by_type[t->type] += t->nbytes;
    }
    int best = -1;
    for (int i = 0; i < TELA_TYPE_COUNT; i++)
        if (bytes_by_type[i] && (best < 0 || bytes_by_type[i] > bytes_by_type[best])) best = i;
    const tela_type_traits *tr = best >= 0 ? tela_type_get_traits((tela_type)best) : NULL;
    m->info.file_type = tr ? tr->name : "unknown";
}

/* The backend the user asked for (params.device, else $TELA_DEVICE, else
 * the default: a GPU when there is one and the architecture runs there). */
static tela_status choose_backend(tela_model *m) {
    const char *dev = m->device_req && m->device_req[0] ? m->device_req : getenv("TELA_DEVICE");
    bool automatic = !dev || !dev[0] || !strcmp(dev, "auto");
    tela_status s;
    if (automatic) {
        bool gpu = tela_backend_cuda_device_count() > 0 && (m->arch->backends & (1u << TELA_BACKEND_CUDA));
        s = tela_backend_create(gpu ? "cuda" : "cpu", m->n_threads, &m->be);
    } else {
        s = tela_backend_create(dev, m->n_threads, &m->be);
    }
    if (s != TELA_OK) return tela_error_prefix(s, "%s: ", m->path);
    tela_backend_kind kind = tela_backend_get_kind(m->be);
    if (!(m->arch->backends & (1u << kind)))
        return tela_errorf(TELA_ERR_UNSUPPORTED,
                           "%s: %s models do not run on %s yet in this version of tela; use --device cpu", m->path,
                           m->arch->name, tela_backend_description(m->be));
    snprintf(m->device_buf, sizeof m->device_buf, "%s", tela_backend_description(m->be));
    m->info.device = m->device_buf;
    if (m->verbose) fprintf(stderr, "tela: device: %s\n", m->device_buf);
    return TELA_OK;
}

static tela_status model_load(tela_model *m) {
    struct stat st;
    if (stat(m->path, &st) != 0) return tela_errorf(TELA_ERR_IO, "%s: no such file or directory", m->path);
    if (S_ISDIR(st.st_mode)) {
        TELA_TRY(open_checkpoint(m));
    } else {
        unsigned char magic[4] = {0};
        FILE *f = fopen(m->path, "rb");
        if (!f) return tela_errorf(TELA_ERR_IO, "%s: cannot open", m->path);
        size_t got = fread(magic, 1, 4, f);
        fclose(f);
        size_t len = strlen(m->path);
        if (got == 4 && !memcmp(magic, "GGUF", 4)) {
            TELA_TRY(open_gguf(m));
        } else if (len > 12 && !strcmp(m->path + len - 12, ".safetensors")) {
            TELA_TRY(open_checkpoint(m));
        } else {
            return tela_errorf(TELA_ERR_FORMAT,
                               "%s: not a GGUF file (no 'GGUF' magic), a .safetensors file or a checkpoint directory",
                               m->path);
        }
    }
    TELA_TRY(choose_backend(m));
    TELA_TRY(m->arch->load(m));
    TELA_TRY(load_vocab(m));
    m->info.arch = m->arch_name;
    m->info.name = m->name_buf;
    m->info.bos_token = -1;
    m->info.eos_token = -1;
    if (m->vocab) {
        m->info.has_tokenizer = 1;
        m->info.bos_token = tela_vocab_bos(m->vocab);
        m->info.eos_token = tela_vocab_eos(m->vocab);
        m->info.has_chat_template = tela_vocab_chat_template(m->vocab) != NULL;
        if (tela_vocab_n_tokens(m->vocab) > m->info.n_vocab)
            return tela_errorf(TELA_ERR_FORMAT, "%s: the tokenizer has %d tokens but the model only %d logits", m->path,
                               tela_vocab_n_tokens(m->vocab), m->info.n_vocab);
    } else if (m->hf_config) {
        int64_t v = -1;
        if (tela_model_json_int(m, m->hf_config, "bos_token_id", true, &v) == TELA_OK && v >= 0 &&
            v < m->info.n_vocab)
            m->info.bos_token = (int32_t)v;
        v = -1;
        if (tela_model_json_int(m, m->hf_config, "eos_token_id", true, &v) == TELA_OK && v >= 0 &&
            v < m->info.n_vocab)
            m->info.eos_token = (int32_t)v;
    }
    tensor_stats(m);
    return TELA_OK;
}

tela_status tela_model_load(const char *path, const tela_model_params *params, tela_model **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "tela_model_load: out is NULL");
    *out = NULL;
    if (!path) return tela_errorf(TELA_ERR_ARG, "tela_model_load: path is NULL");
    tela_model_params p = params ? *params : tela_model_default_params();
    double t0 = now_seconds();
    tela_model *m = calloc(1, sizeof *m);
    if (!m) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    m->path = strdup(path);
    if (!m->path) {
        free(m);
        return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    }
    m->n_threads = p.n_threads > 0 ? p.n_threads : 0; /* 0: the backend's default */
    m->verbose = p.verbose;
    m->load_mtp = p.load_mtp;
    m->device_req = p.device;
    tela_status s = model_load(m);
    if (s != TELA_OK) {
        tela_model_free(m);
        return s;
    }
    if (m->verbose) {
        const tela_model_info *i = &m->info;
        fprintf(stderr,
                "tela: loaded %s model%s%s%s from %s: %d layers, n_embd %d, vocab %d, %.2fM params, %s, %.1f MiB, "
                "tokenizer: %s (%.2f s)\n",
                i->arch, i->name[0] ? " '" : "", i->name, i->name[0] ? "'" : "", path, i->n_layer, i->n_embd,
                i->n_vocab, (double)i->n_params / 1e6, i->file_type, (double)i->n_bytes / (1024.0 * 1024.0),
                m->vocab ? "yes" : "no", now_seconds() - t0);
    }
    *out = m;
    return TELA_OK;
}

void tela_model_free(tela_model *model) {
    if (!model) return;
    if (model->impl && model->arch && model->arch->free) model->arch->free(model);
    if (model->vocab) tela_vocab_free(model->vocab);
    if (model->gguf) tela_gguf_close(model->gguf);
    if (model->ckpt) tela_checkpoint_close(model->ckpt);
    tela_backend_free(model->be);
    for (size_t i = 0; i < model->n_allocs; i++) free(model->allocs[i]);
    free(model->allocs);
    free(model->no_vocab_reason);
    free(model->path);
    free(model);
}

const tela_model_info *tela_model_get_info(const tela_model *model) { return model ? &model->info : NULL; }

