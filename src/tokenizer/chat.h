/* chat.h: rendering a conversation with a model's chat template, giving the
 * string Hugging Face transformers' tokenizer.apply_chat_template(messages,
 * tools=..., add_generation_prompt=..., tokenize=False, **extra) gives for
 * the same template (see jinja.h for the template engine).
 *
 * The template sees the variables apply_chat_template passes: messages,
 * tools (none when not given), documents (none), add_generation_prompt,
 * bos_token and eos_token (when given; HF passes the tokenizer's special
 * tokens this way), then the extra variables, which override the tokens.
 * strftime_now() and raise_exception() are available as in HF. */
#ifndef TELA_TOKENIZER_CHAT_H
#define TELA_TOKENIZER_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "tela/tela.h"

typedef struct tela_chat_params {
    /* JSON array of message objects: "role", "content" (a string, a list of
     * content parts, or null), and whatever else the template reads:
     * "tool_calls", "reasoning_content", "tool_call_id", "name", ... */
    const cJSON *messages;
    const cJSON *tools;          /* JSON array of tool schemas, or NULL */
    bool add_generation_prompt;  /* end with the header of an assistant turn */
    /* JSON object of extra template variables (enable_thinking,
     * date_string, ...), or NULL. Names messages, tools, documents and
     * add_generation_prompt are refused, as Python would refuse them. */
    const cJSON *extra;
    const char *bos_token;       /* NULL: bos_token is undefined in the template */
    const char *eos_token;       /* NULL: eos_token is undefined in the template */
    int64_t now;                 /* what strftime_now() formats (seconds since the epoch); 0: now */
} tela_chat_params;

/* Renders with the chat template source tmpl. On success *out is a
 * NUL-terminated malloc'd string (caller frees). Errors (TELA_ERR_FORMAT for
 * a bad template or one failing at runtime, TELA_ERR_ARG when the template
 * rejects the conversation via raise_exception() or the arguments are bad)
 * name the template line and column. An empty conversation is refused, as
 * apply_chat_template refuses it. */
tela_status tela_chat_render_json(const char *tmpl, const tela_chat_params *params, char **out);

/* The same for plain messages: roles[i]/contents[i] (NUL-terminated) make
 * message i; no tools or extra variables. bos_token/eos_token may be NULL.
 * This is what tela_chat_render() in tela.h is built on: the runtime passes
 * the model's template (tela_vocab_chat_template()) and its BOS/EOS token
 * texts. */
tela_status tela_chat_template_render(const char *tmpl, const char *bos_token, const char *eos_token,
                                      const char *const *roles, const char *const *contents,
                                      size_t n_messages, bool add_generation_prompt, char **out);

#endif
