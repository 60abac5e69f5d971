/* api_chat.c: POST /v1/chat/completions: the request parsed
 * (api_parse.c), the conversation rendered with the model's chat template
 * and tokenized the way tela chat does (runtime/chat_session.c: special
 * tokens parsed, no BOS/EOS added by the tokenizer, then BOS put in front
 * when the model's tokenizer adds one and the template did not write it;
 * earlier replies this server generated keep their tokens: replies.h),
 * then generated (api_output.c). */
#include <stdlib.h>
#include <string.h>

#include "server/api_output.h"
#include "server/app.h"

/* The rendered conversation's tokens: as tela_chat_tokenize_rendered in
 * runtime/chat_session.c, through the public API; where the text starts
 * with a remembered prompt and reply (replies.h), their tokens, and only
 * the rest tokenized. */
static tela_status chat_tokens(const app *a, const char *text, api_tokens *out) {
    const size_t len = strlen(text);
    int32_t *known = NULL;
    size_t n_known = 0;
    const size_t covered = reply_memory_match(a->replies, text, len, 0, &known, &n_known);
    if (covered > 0) {
        int32_t *rest;
        size_t n_rest;
        tela_status st = api_tokenize_text(a, text + covered, len - covered, 0, 1, &rest, &n_rest);
        if (st == TELA_OK) {
            int32_t *all = realloc(known, (n_known + n_rest + 1) * sizeof *all);
            if (all) {
                memcpy(all + n_known, rest, n_rest * sizeof *rest);
                free(rest);
                out->ids = all;
                out->n = n_known + n_rest;
                return TELA_OK;
            }
            free(rest);
        }
        /* no memory for the splice: tokenize it all */
    }
    free(known);
    int32_t *buf;
    size_t n;
    tela_status st = api_tokenize_text(a, text, len, 0, 1, &buf, &n);
    if (st != TELA_OK) return st;
    int32_t bos = a->info->bos_token;
    if (a->adds_bos && bos >= 0 && (n == 0 || buf[0] != bos)) {
        memmove(buf + 1, buf, n * sizeof *buf); /* api_tokenize_text leaves room for one more */
        buf[0] = bos;
        n++;
    }
    out->ids = buf;
    out->n = n;
    return TELA_OK;
}

void api_chat_completions(void *ap, http_request *req) {
    app *a = ap;
    size_t len;
    const char *body = http_body(req, &len);
    api_chat_request r;
    api_error err;
    if (api_parse_chat(body, len, a->n_vocab, &r, &err)) {
        http_reply_error(req, &err);
        return;
    }
    static const char *const role_names[] = {"system", "user", "assistant"};
    const char **roles = malloc(r.n_messages * sizeof *roles);
    const char **contents = malloc(r.n_messages * sizeof *contents);
    char *text = NULL;
    api_tokens prompt = {0};
    if (!roles || !contents) {
        api_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < r.n_messages; i++) {
        roles[i] = role_names[r.messages[i].role];
        contents[i] = r.messages[i].content;
    }
    if (tela_chat_render(a->model, roles, contents, r.n_messages, 1, &text) != TELA_OK) {
        api_fail(&err, 400, NULL, "invalid_value", "messages", "the chat template failed on these messages: %s",
                 tela_last_error());
        goto fail;
    }
    if (chat_tokens(a, text, &prompt) != TELA_OK) {
        api_fail(&err, 500, "server_error", NULL, NULL, "cannot tokenize the conversation: %s", tela_last_error());
        goto fail;
    }
    api_generate(a, req, API_KIND_CHAT, &r.gen, &prompt, 1, "messages", text);
    goto done;
fail:
    http_reply_error(req, &err);
done:
    free(prompt.ids);
    free(text);
    free(roles);
    free(contents);
    api_chat_request_free(&r);
}
