/* api.c: the tokenizer half of the public API (tokenize, detokenize,
 * end-of-generation test, chat rendering) as thin calls into the model's
 * vocabulary. */
#include "model/model.h"
#include "util/error.h"


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

tela_status tela_chat_render(const tela_model *model, const char *const *roles, const char *const *contents,
                             size_t n_messages, int add_generation_prompt, char **out) {
    (void)roles;
    (void)contents;
    (void)n_messages;
    (void)add_generation_prompt;
    if (out) *out = NULL;
    TELA_TRY(need_vocab(model, "chat_render"));
    return tela_errorf(TELA_ERR_UNSUPPORTED, "chat_render: chat templates are not implemented yet");
}
