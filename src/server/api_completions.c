/* api_completions.c: POST /v1/completions: the request parsed
 * (api_parse.c), text prompts tokenized as tela run does (BOS/EOS as the
 * model's metadata says, special tokens parsed), token prompts taken as
 * they are, then generated (api_output.c). */
#include <stdlib.h>
#include <string.h>

#include "server/api_output.h"
#include "server/app.h"

void api_completions(void *ap, http_request *req) {
    app *a = ap;
    size_t len;
    const char *body = http_body(req, &len);
    api_completion_request r;
    api_error err;
    if (api_parse_completion(body, len, a->n_vocab, &r, &err)) {
        http_reply_error(req, &err);
        return;
    }
    api_tokens *prompts = calloc(r.n_prompts, sizeof *prompts);
    int ok = prompts != NULL;
    if (!ok) api_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; ok && i < r.n_prompts; i++) {
        const api_prompt *p = &r.prompts[i];
        if (p->text) {
            if (api_tokenize_text(a, p->text, strlen(p->text), 1, 1, &prompts[i].ids, &prompts[i].n) != TELA_OK) {
                api_fail(&err, 500, "server_error", NULL, NULL, "cannot tokenize the prompt: %s", tela_last_error());
                ok = 0;
            }
        } else {
            /* the ids were checked against the vocabulary by the parser */
            prompts[i].ids = p->tokens;
            prompts[i].n = p->n_tokens;
        }
    }
    if (ok) api_generate(a, req, API_KIND_COMPLETION, &r.gen, prompts, r.n_prompts, "prompt", NULL);
    else http_reply_error(req, &err);
    for (size_t i = 0; prompts && i < r.n_prompts; i++)
        if (r.prompts[i].text) free(prompts[i].ids);
    free(prompts);
    api_completion_request_free(&r);
}
