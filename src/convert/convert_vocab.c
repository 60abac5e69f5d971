/* convert_vocab.c: tokenizer metadata (tokenizer.ggml.*) from a Hugging Face
 * tokenizer.json, the way llama.cpp's converter writes it. */
#include <stdio.h>
#include <sys/stat.h>

#include "convert/convert_internal.h"
#include "util/error.h"

tela_status conv_vocab(conv_ctx *c, const char *dir, int64_t n_vocab) {
    (void)n_vocab;
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (stat(path, &sb) != 0) return TELA_ERR_NOT_FOUND;
    (void)c;
    return TELA_ERR_NOT_FOUND;
}
