/* api.c: the tokenizer half of the public API (tokenize, detokenize,
 * end-of-generation test, chat rendering) as thin calls into the model's
 * vocabulary. */
#include "model/model.h"
#include "tokenizer/chat.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>

static tela_status need_vocab(const tela_model *m, const char *what) {
    if (!m) return tela_errorf(TELA_ERR_ARG, "%s: model is NULL", what);
    if (m->vocab) return TELA_OK;
    return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: the model %s has no usable tokenizer%s%s", what, m->path,
                       m->no_vocab_reason ? ": " : "", m->no_vocab_reason ? m->no_vocab_reason : "");
}

tela_status tela_tokenize(const tela_model *model, const char *text, size_t len, int add_special, int parse_special,
                          int32_t *out, size_t cap, size_t *n_out) {
    TELA_TRY(need_vocab(model, "tokenize"));
    if ((!text && len) || !n_out || (!out && cap)) return tela_errorf(TELA_ERR_ARG, "tokenize: bad arguments");
    return tela_vocab_tokenize(model->vocab, text ? text : "", len, add_special != 0, parse_special != 0, out, cap,
                               n_out);
}

tela_status tela_detokenize(const tela_model *model, const int32_t *tokens, size_t n, int skip_special, char **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "detokenize: out is NULL");
    *out = NULL;
    TELA_TRY(need_vocab(model, "detokenize"));
    if (n && !tokens) return tela_errorf(TELA_ERR_ARG, "detokenize: tokens is NULL");
    return tela_vocab_detokenize(model->vocab, tokens, n, skip_special != 0, out, NULL);
}

int tela_token_is_eog(const tela_model *model, int32_t token) {
    if (!model) return 0;
    if (model->vocab) return tela_vocab_is_eog(model->vocab, token);
    return token >= 0 && token == model->info.eos_token;
}

/* The text of a special token such as BOS ("<|begin_of_text|>"), malloc'd,
 * or NULL when there is none. */
static char *token_text(const tela_vocab *v, int32_t token) {
    if (token < 0) return NULL;
    size_t n = tela_vocab_token_bytes(v, token, false, NULL, 0);
    char *buf = malloc(n + 1);
    if (!buf) return NULL;
    size_t got = tela_vocab_token_bytes(v, token, false, buf, n);
    buf[got < n ? got : n] = '\0';
    return buf;
}

tela_status tela_chat_render(const tela_model *model, const char *const *roles, const char *const *contents,
                             size_t n_messages, int add_generation_prompt, char **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "chat_render: out is NULL");
    *out = NULL;
    TELA_TRY(need_vocab(model, "chat_render"));
    if (n_messages && (!roles || !contents)) return tela_errorf(TELA_ERR_ARG, "chat_render: NULL messages");
    const char *tmpl = tela_vocab_chat_template(model->vocab);
    if (!tmpl) return tela_errorf(TELA_ERR_NOT_FOUND, "chat_render: the model %s has no chat template", model->path);
    char *bos = token_text(model->vocab, tela_vocab_bos(model->vocab));
    char *eos = token_text(model->vocab, tela_vocab_eos(model->vocab));
    tela_status s = tela_chat_template_render(tmpl, bos, eos, roles, contents, n_messages, add_generation_prompt != 0,
                                              out);
    free(bos);
    free(eos);
    return s;
}

/* One line per device, from each backend's own description. */
char *tela_devices(void) {
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = '\0';
    tela_backend *be = NULL;
    if (tela_backend_create("cpu", 0, &be) == TELA_OK) {
        len += (size_t)snprintf(out + len, cap - len, "  %s\n", tela_backend_description(be));
        tela_backend_free(be);
    }
    if (!tela_backend_cuda_built()) {
        snprintf(out + len, cap - len, "  cuda: not built (configure with -DTELA_CUDA=ON where nvcc is)\n");
        return out;
    }
    const int n = tela_backend_cuda_device_count();
    if (n == 0) snprintf(out + len, cap - len, "  cuda: built, but no GPU is available (no driver or no device)\n");
    for (int i = 0; i < n && len + 256 < cap; i++) {
        char name[16];
        snprintf(name, sizeof name, "cuda:%d", i);
        if (tela_backend_create(name, 0, &be) == TELA_OK) {
            len += (size_t)snprintf(out + len, cap - len, "  %s\n", tela_backend_description(be));
            tela_backend_free(be);
        } else {
            len += (size_t)snprintf(out + len, cap - len, "  %s: %s\n", name, tela_last_error());
        }
    }
    return out;
}
