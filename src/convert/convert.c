/* convert.c: the driver of HF -> GGUF conversion: opens the checkpoint, picks
 * the architecture, builds the plan of output tensors, decides each tensor's
 * type the way llama.cpp's converter does, converts tensor by tensor into a
 * scratch file and hands the result to the GGUF writer. It stands above the
 * architecture files (convert_<arch>.c) and convert_vocab.c, which it calls;
 * what they all use is convert_common.c. */
#include "convert/convert_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
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
    conv_plan_free(&c);
    tela_checkpoint_close(c.ck);
    return st;
}
