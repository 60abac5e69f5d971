/* model.c: loading a model: detects the source format (GGUF file,
 * .safetensors file, Hugging Face checkpoint directory), picks the
 * architecture and the backend, loads the tokenizer; the public
 * tela_model_* functions. The helpers the architectures use are in
 * weights.c and forward.c, below the architectures; this file is above
 * them (it holds their table). */
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
    const char *mt = tela_model_json_str(m->hf_config, "model_type");
    if (!mt) return tela_errorf(TELA_ERR_FORMAT, "%s: config.json has no string 'model_type'", m->path);
    m->arch = arch_by_hf_type(mt);
    if (!m->arch) return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: model_type '%s' is not supported", m->path, mt);
    snprintf(m->arch_name, sizeof m->arch_name, "%s", m->arch->name);
    const char *nm = tela_model_json_str(m->hf_config, "_name_or_path");
    if (nm) snprintf(m->name_buf, sizeof m->name_buf, "%s", nm);
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
/* The backends of a rank per device: a device list ("cuda:0,cuda:1",
 * "cpu,cpu") puts rank r on its r-th entry; --tensor-parallel N on the
 * automatic choice or "cuda" with at least N GPUs puts rank r on cuda:r.
 * Otherwise every rank runs on the one backend, one after another. */
static tela_status choose_rank_devices(tela_model *m, const char *dev, bool automatic) {
    int listed = 1;
    for (const char *p = dev; p && *p; p++) listed += *p == ',';
    if (listed > 1) {
        if (m->tp_world > 1 && m->tp_world != listed)
            return tela_errorf(TELA_ERR_ARG, "%s: the device list '%s' names %d devices but --tensor-parallel is %d",
                               m->path, dev, listed, m->tp_world);
        if (listed > TELA_MODEL_MAX_RANKS)
            return tela_errorf(TELA_ERR_ARG, "%s: the device list '%s' names more than %d devices", m->path, dev,
                               TELA_MODEL_MAX_RANKS);
        m->tp_world = listed;
    } else if (m->tp_world > 1 && (automatic || !strcmp(dev, "cuda")) &&
               m->arch->rank_devices && (m->arch->backends & (1u << TELA_BACKEND_CUDA)) &&
               tela_backend_cuda_device_count() >= m->tp_world) {
        listed = m->tp_world; /* a GPU a rank: cuda:0 .. cuda:N-1 */
    } else {
        return TELA_OK;
    }
    m->devs = tela_model_alloc(m, (size_t)listed * sizeof *m->devs);
    if (!m->devs) return TELA_ERR_NOMEM;
    m->n_dev = listed;
    const char *p = dev;
    for (int r = 0; r < listed; r++) {
        char name[64];
        if (listed > 1 && dev && strchr(dev, ',')) {
            size_t len = strcspn(p, ",");
            snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
            p += len + (p[len] == ',');
        } else {
            snprintf(name, sizeof name, "cuda:%d", r);
        }
        if (!name[0] || !strcmp(name, "auto"))
            return tela_errorf(TELA_ERR_ARG, "%s: the device list '%s' must name each device (cpu, cuda:N)", m->path,
                               dev);
        tela_status s = tela_backend_create(name, m->n_threads, &m->devs[r]);
        if (s != TELA_OK) return tela_error_prefix(s, "%s: rank %d: ", m->path, r);
        if (r > 0 && tela_backend_get_kind(m->devs[r]) != tela_backend_get_kind(m->devs[0]))
            return tela_errorf(TELA_ERR_ARG, "%s: the device list '%s' mixes the CPU and GPUs (the ranks must be "
                               "devices of one kind)", m->path, dev);
    }
    m->be = m->devs[0];
    return TELA_OK;
}

static tela_status choose_backend(tela_model *m) {
    const char *dev = m->device_req && m->device_req[0] ? m->device_req : getenv("TELA_DEVICE");
    bool automatic = !dev || !dev[0] || !strcmp(dev, "auto");
    tela_status s = TELA_OK;
    TELA_TRY(choose_rank_devices(m, dev, automatic));
    if (m->be) {
        /* chosen by the ranks */
    } else if (automatic) {
        bool gpu = tela_backend_cuda_device_count() > 0 && (m->arch->backends & (1u << TELA_BACKEND_CUDA));
        s = tela_backend_create(gpu ? "cuda" : "cpu", m->n_threads, &m->be);
    } else {
        s = tela_backend_create(dev, m->n_threads, &m->be);
    }
    if (s != TELA_OK) return tela_error_prefix(s, "%s: ", m->path);
    if (!m->devs) {
        m->devs = tela_model_alloc(m, sizeof *m->devs);
        if (!m->devs) return TELA_ERR_NOMEM;
        m->devs[0] = m->be;
        m->n_dev = 1;
    }
    tela_backend_kind kind = tela_backend_get_kind(m->be);
    if (!(m->arch->backends & (1u << kind)))
        return tela_errorf(TELA_ERR_UNSUPPORTED,
                           "%s: %s models do not run on %s yet in this version of tela; use --device cpu", m->path,
                           m->arch->name, tela_backend_description(m->be));
    if (m->n_dev > 1 && !m->arch->rank_devices)
        return tela_errorf(TELA_ERR_UNSUPPORTED,
                           "%s: %s models do not spread their ranks over several devices yet (Llama and Qwen3.5 do); give one "
                           "device, on which the ranks run one after another", m->path, m->arch->name);
    if (m->n_dev > 1)
        snprintf(m->device_buf, sizeof m->device_buf, "%d ranks: %s, ... %s", m->n_dev,
                 tela_backend_description(m->devs[0]), tela_backend_description(m->devs[m->n_dev - 1]));
    else
        snprintf(m->device_buf, sizeof m->device_buf, "%s", tela_backend_description(m->be));
    m->info.device = m->device_buf;
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
    if (m->tp_world > 1 && !m->arch->tensor_parallel)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: tensor parallelism is not built for %s models yet (Llama only)",
                           m->path, m->arch->name);
    TELA_TRY(m->arch->load(m));
    if (m->arch->mtp_layers) m->info.n_mtp_layers = m->arch->mtp_layers(m);
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
    m->mtp_draft_vocab = p.mtp_draft_vocab;
    m->device_req = p.device;
    if (p.tensor_parallel < 0 || p.tensor_parallel > TELA_MODEL_MAX_RANKS) {
        tela_model_free(m);
        return tela_errorf(TELA_ERR_ARG, "tela_model_load: tensor_parallel %d is not between 1 and %d",
                           p.tensor_parallel, TELA_MODEL_MAX_RANKS);
    }
    m->tp_world = p.tensor_parallel > 1 ? p.tensor_parallel : 1;
    if (p.n_skip_layers > 0) {
        if (!p.skip_layers) {
            tela_model_free(m);
            return tela_errorf(TELA_ERR_ARG, "tela_model_load: n_skip_layers is %zu but skip_layers is NULL",
                               p.n_skip_layers);
        }
        m->skip_req = malloc(p.n_skip_layers * sizeof *m->skip_req);
        if (!m->skip_req) {
            tela_model_free(m);
            return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
        }
        memcpy(m->skip_req, p.skip_layers, p.n_skip_layers * sizeof *m->skip_req);
        m->n_skip_req = p.n_skip_layers;
    }
    tela_status s = model_load(m);
    if (s != TELA_OK) {
        tela_model_free(m);
        return s;
    }
    if (m->verbose) {
        const tela_model_info *i = &m->info;
        fprintf(stderr,
                "tela: loaded %s model%s%s%s from %s: %d layers, n_embd %d, vocab %d, %.2fM params, %s, %.1f MiB, "
                "tokenizer: %s, on %s (%.2f s)\n",
                i->arch, i->name[0] ? " '" : "", i->name, i->name[0] ? "'" : "", path, i->n_layer, i->n_embd,
                i->n_vocab, (double)i->n_params / 1e6, i->file_type, (double)i->n_bytes / (1024.0 * 1024.0),
                m->vocab ? "yes" : "no", i->device, now_seconds() - t0);
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
    if (model->n_dev > 1)
        for (int r = 0; r < model->n_dev; r++) tela_backend_free(model->devs[r]);
    else
        tela_backend_free(model->be);
    for (size_t i = 0; i < model->n_allocs; i++) free(model->allocs[i]);
    free(model->allocs);
    free(model->no_vocab_reason);
    free(model->skip_req);
    free(model->path);
    free(model);
}

const tela_model_info *tela_model_get_info(const tela_model *model) { return model ? &model->info : NULL; }

tela_status tela_model_device_memory(const tela_model *model, uint64_t *free_bytes, uint64_t *total_bytes) {
    if (!model || !free_bytes || !total_bytes) return tela_errorf(TELA_ERR_ARG, "tela_model_device_memory: NULL argument");
    /* with a rank per device, the device with the least free memory: each
     * holds a rank's share of a session (state_bytes counts one share) */
    uint64_t fmin = UINT64_MAX, tmin = UINT64_MAX;
    for (int r = 0; r < (model->n_dev > 1 ? model->n_dev : 1); r++) {
        size_t f = 0, t = 0;
        TELA_TRY(tela_backend_mem_info(model->n_dev > 1 ? model->devs[r] : model->be, &f, &t));
        if ((uint64_t)f < fmin) fmin = f, tmin = t;
    }
    *free_bytes = fmin;
    *total_bytes = tmin;
    return TELA_OK;
}

int tela_model_layer_kind(const tela_model *model, int32_t layer) {
    if (!model || layer < 0 || layer >= model->info.n_layer) return -1;
    return model->arch->layer_kind(model, layer);
}

int tela_model_layer_skipped(const tela_model *model, int32_t layer) {
    if (!model || layer < 0 || layer >= model->info.n_layer) return -1;
    return model->skip ? model->skip[layer] : 0;
}

