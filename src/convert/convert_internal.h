/* convert_internal.h: what the architecture-specific parts of the converter
 * (convert_llama.c, convert_qwen35.c, convert_vocab.c) share with the driver
 * (convert.c): the plan of output tensors, config.json lookups, and the
 * metadata every text model gets (all in convert_common.c), and the entry
 * points of the architectures and the vocabulary, which only the driver
 * calls. */
#ifndef TELA_CONVERT_INTERNAL_H
#define TELA_CONVERT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "convert/convert.h"
#include "format/gguf.h"
#include "format/safetensors.h"

/* Elementwise operation applied after the row/column gather. */
typedef enum conv_op {
    CONV_OP_COPY = 0,
    CONV_OP_ADD_ONE,   /* x + 1 (Qwen3.5's (1 + w) RMSNorm weights) */
    CONV_OP_NEG_EXP    /* -exp(x) (Qwen3.5's A_log -> ssm_a) */
} conv_op;

/* One output tensor: out[r][c] = op(src[row_map[r]][col_map[c]]), rows of
 * ne[0] elements; maps are NULL for the identity. A generated tensor (e.g.
 * rope_freqs) has src NULL and its float32 values in gen. */
typedef struct conv_tensor {
    char *name;                 /* GGUF name (owned) */
    const tela_tensor *src;
    float *gen;                 /* owned */
    int n_dims;
    int64_t ne[TELA_MAX_DIMS];  /* output shape, ggml order */
    tela_type type;             /* output type, set by the driver's type rule */
    conv_op op;
    int64_t *row_map;           /* owned, length = number of rows */
    int64_t *col_map;           /* owned, length = ne[0] */
    size_t nbytes;
    uint64_t offset;            /* in the scratch data file */
} conv_tensor;

typedef struct conv_ctx {
    const char *hf_path;
    const tela_convert_params *params;
    tela_checkpoint *ck;
    const cJSON *cfg;           /* config.json */
    const cJSON *text_cfg;      /* its "text_config", or NULL */
    const char *hf_arch;        /* architectures[0] */
    const char *arch;           /* GGUF general.architecture */
    tela_gguf_writer *w;
    conv_tensor *t;
    size_t n_t, cap_t;
    int64_t n_layer;
    int64_t n_nextn;            /* MTP blocks appended after the trunk (set by the plan);
                                 * block_count = n_layer + n_nextn */
} conv_ctx;

/* ---- config.json lookups. Like llama.cpp, a text_config's keys override
 * the top level (multimodal checkpoints). */
const cJSON *conv_cfg(const conv_ctx *c, const char *key);
bool conv_cfg_has(const conv_ctx *c, const char *key);
/* Integer value; TELA_ERR_NOT_FOUND / TELA_ERR_FORMAT with a message naming
 * config.json and the key. */
tela_status conv_cfg_int(const conv_ctx *c, const char *key, int64_t *out);
tela_status conv_cfg_num(const conv_ctx *c, const char *key, double *out);
/* The rope parameters object: "rope_parameters" (transformers 5) or
 * "rope_scaling" (older), its "full_attention" entry if it has one; NULL if
 * none. */
const cJSON *conv_rope_params(const conv_ctx *c);
/* rope_theta from the rope parameters, else the top level. */
bool conv_rope_theta(const conv_ctx *c, double *out);

/* ---- plan */
/* Appends an output tensor for src named name (printf format) with the
 * source's shape; returns it (NULL on allocation failure, message set). */
conv_tensor *conv_add(conv_ctx *c, const tela_tensor *src, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends a generated float32 tensor of n values (copied). */
conv_tensor *conv_add_generated(conv_ctx *c, const char *name, const float *data, int64_t n);
/* Number of rows of an output tensor (product of ne[1..]). */
int64_t conv_rows(const conv_tensor *t);
/* Frees the plan's tensors (names, generated data, maps). */
void conv_plan_free(conv_ctx *c);

/* The first number-like part of an HF tensor name ("model.layers.12.x"
 * -> 12), or -1: llama.cpp's block id. */
int64_t conv_block_id(const char *name);
bool conv_ends_with(const char *s, const char *suffix);
/* Splits "model.layers.N.rest" into N and rest; false if name is not a
 * layer tensor. */
bool conv_layer_part(const char *name, const char *prefix, int64_t *bid, const char **rest);

/* A shape check with an error naming the tensor, the expected and the
 * found HF shape (outermost first, as config.json users think of it). */
tela_status conv_expect_shape(const tela_tensor *t, int n_dims, const int64_t *hf_shape);

/* ---- metadata */
/* The keys TextModel.set_gguf_parameters writes in llama.cpp, in its order
 * (block_count ... key/value_length, general.file_type). */
tela_status conv_text_model_params(conv_ctx *c);
/* "<arch>.<suffix>" */
const char *conv_key(const conv_ctx *c, const char *suffix);

/* ---- architectures */
typedef struct conv_arch {
    const char *hf_arch;    /* config.json architectures[0] */
    const char *gguf_arch;
    tela_status (*plan)(conv_ctx *c);
    tela_status (*params)(conv_ctx *c);  /* after conv_text_model_params is NOT implied */
} conv_arch;

extern const conv_arch tela_conv_llama;
extern const conv_arch tela_conv_qwen35;
extern const conv_arch tela_conv_qwen35_mm;

/* Tokenizer metadata from tokenizer.json (+ tokenizer_config.json) in dir;
 * TELA_ERR_NOT_FOUND when there is no tokenizer.json. n_vocab: the model's
 * vocab size (tokens past the tokenizer's are padded as [PADn]). */
tela_status conv_vocab(conv_ctx *c, const char *dir, int64_t n_vocab);

#endif
