/* chat.c: chat templates applied the way Hugging Face's apply_chat_template
 * applies them: builds the template variables from a conversation and renders
 * them with the Jinja engine. */
#include "tokenizer/chat.h"

#include <string.h>

#include "tokenizer/jinja.h"
#include "util/error.h"

static const char *const reserved_vars[] = {"messages", "tools", "documents", "add_generation_prompt"};

/* Adds the variables in HF's order: the render arguments, the special tokens,
 * then the extra variables (which may override the tokens). */
static tela_status build_vars(const tela_chat_params *p, cJSON **out) {
    cJSON *vars = cJSON_CreateObject();
    if (!vars) return tela_errorf(TELA_ERR_NOMEM, "chat template: out of memory");
    bool ok = cJSON_AddItemReferenceToObject(vars, "messages", (cJSON *)p->messages);
    if (p->tools) ok = ok && cJSON_AddItemReferenceToObject(vars, "tools", (cJSON *)p->tools);
    else ok = ok && cJSON_AddNullToObject(vars, "tools");
    ok = ok && cJSON_AddNullToObject(vars, "documents");
    ok = ok && cJSON_AddBoolToObject(vars, "add_generation_prompt", p->add_generation_prompt);
    if (p->bos_token) ok = ok && cJSON_AddStringToObject(vars, "bos_token", p->bos_token);
    if (p->eos_token) ok = ok && cJSON_AddStringToObject(vars, "eos_token", p->eos_token);
    if (!ok) {
        cJSON_Delete(vars);
        return tela_errorf(TELA_ERR_NOMEM, "chat template: out of memory");
    }
    if (p->extra) {
        for (const cJSON *e = p->extra->child; e; e = e->next) {
            if (!e->string) continue;
            for (size_t i = 0; i < sizeof reserved_vars / sizeof reserved_vars[0]; i++)
                if (!strcmp(e->string, reserved_vars[i])) {
                    cJSON_Delete(vars);
                    return tela_errorf(TELA_ERR_ARG, "chat template: the extra variable '%s' clashes with a built-in one",
                                       e->string);
                }
            cJSON_DeleteItemFromObjectCaseSensitive(vars, e->string);
            if (!cJSON_AddItemReferenceToObject(vars, e->string, (cJSON *)e)) {
                cJSON_Delete(vars);
                return tela_errorf(TELA_ERR_NOMEM, "chat template: out of memory");
            }
        }
    }
    *out = vars;
    return TELA_OK;
}

tela_status tela_chat_render_json(const char *tmpl, const tela_chat_params *params, char **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "tela_chat_render_json: out is NULL");
    *out = NULL;
    if (!tmpl || !params) return tela_errorf(TELA_ERR_ARG, "tela_chat_render_json: template or params is NULL");
    if (!cJSON_IsArray(params->messages))
        return tela_errorf(TELA_ERR_ARG, "chat template: the messages must be a JSON array");
    if (cJSON_GetArraySize(params->messages) == 0)
        return tela_errorf(TELA_ERR_ARG, "chat template: cannot apply a chat template to an empty conversation");
    if (params->tools && !cJSON_IsArray(params->tools) && !cJSON_IsNull(params->tools))
        return tela_errorf(TELA_ERR_ARG, "chat template: the tools must be a JSON array");
    if (params->extra && !cJSON_IsObject(params->extra))
        return tela_errorf(TELA_ERR_ARG, "chat template: the extra variables must be a JSON object");

    tela_jinja *t;
    TELA_TRY(tela_jinja_parse(tmpl, strlen(tmpl), "chat template", NULL, &t));
    cJSON *vars = NULL;
    tela_status st = build_vars(params, &vars);
    if (st == TELA_OK) {
        tela_jinja_render_params rp = {0};
        rp.now = params->now;
        st = tela_jinja_render(t, vars, &rp, out, NULL);
        cJSON_Delete(vars);
    }
    tela_jinja_free(t);
    return st;
}

tela_status tela_chat_template_render(const char *tmpl, const char *bos_token, const char *eos_token,
                                      const char *const *roles, const char *const *contents,
                                      size_t n_messages, bool add_generation_prompt, char **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "tela_chat_template_render: out is NULL");
    *out = NULL;
    if (n_messages && (!roles || !contents))
        return tela_errorf(TELA_ERR_ARG, "tela_chat_template_render: roles or contents is NULL");
    cJSON *msgs = cJSON_CreateArray();
    if (!msgs) return tela_errorf(TELA_ERR_NOMEM, "chat template: out of memory");
    for (size_t i = 0; i < n_messages; i++) {
        if (!roles[i] || !contents[i]) {
            cJSON_Delete(msgs);
            return tela_errorf(TELA_ERR_ARG, "tela_chat_template_render: message %zu has no role or content", i);
        }
        cJSON *m = cJSON_CreateObject();
        if (m && !cJSON_AddItemToArray(msgs, m)) {
            cJSON_Delete(m);
            m = NULL;
        }
        /* from here on msgs owns m */
        if (!m || !cJSON_AddStringToObject(m, "role", roles[i]) || !cJSON_AddStringToObject(m, "content", contents[i])) {
            cJSON_Delete(msgs);
            return tela_errorf(TELA_ERR_NOMEM, "chat template: out of memory");
        }
    }
    tela_chat_params p = {0};
    p.messages = msgs;
    p.add_generation_prompt = add_generation_prompt;
    p.bos_token = bos_token;
    p.eos_token = eos_token;
    tela_status st = tela_chat_render_json(tmpl, &p, out);
    cJSON_Delete(msgs);
    return st;
}
