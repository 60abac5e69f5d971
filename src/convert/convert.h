/* convert.h: Hugging Face checkpoint -> GGUF conversion ("tela convert"),
 * following the conventions of llama.cpp's convert_hf_to_gguf.py exactly
 * (metadata keys, tensor names, layouts, per-tensor types), so llama.cpp and
 * tela load the result alike. Architectures: LlamaForCausalLM,
 * Qwen3_5ForCausalLM and the text part of Qwen3_5ForConditionalGeneration.
 * The convert layer sits above format/quant/tokenizer and below cli. */
#ifndef TELA_CONVERT_CONVERT_H
#define TELA_CONVERT_CONVERT_H

#include "tela/tela.h"

typedef struct tela_convert_params {
    /* Type of the weight matrices: F32, F16, BF16 or Q8_0 (llama.cpp's
     * --outtype). 1-D tensors and norms are always F32; Q8_0 falls back to
     * F16 for rows that are not a multiple of 32. */
    tela_type type;
    const char *name;   /* general.name; NULL: derived like llama.cpp (directory name) */
    int no_vocab;       /* 1: no tokenizer.* keys even when tokenizer.json is present */
    int no_mtp;         /* 1: leave out multi-token-prediction (mtp.*) blocks (llama.cpp's --no-mtp) */
    int progress;       /* 1: a progress line on stderr (callers pass isatty(2)) */
} tela_convert_params;

tela_convert_params tela_convert_default_params(void);

/* Converts the checkpoint at hf_path (a directory with config.json and
 * model.safetensors or an index + shards) into out_path. Tensors are
 * converted one at a time (peak memory: a few rows); the output is written
 * to a temporary name and renamed at the end, so a failure leaves no partial
 * file. Errors name the file, tensor or config key at fault. */
tela_status tela_convert_hf(const char *hf_path, const char *out_path, const tela_convert_params *params);

/* llama.cpp's general.file_type value for a weight type (ALL_F32 = 0,
 * MOSTLY_F16 = 1, MOSTLY_Q8_0 = 7, MOSTLY_BF16 = 32), or -1. */
int tela_convert_file_type(tela_type type);

#endif
