/* template.c: the public API (tokenizer/jinja.h): a template is parsed
 * into its own arena; a render evaluates it with the variables into a
 * render arena, freed when it ends; errors longjmp back here. */
#include "tokenizer/jinja/jinja_internal.h"

#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

struct tela_jinja {
    jarena arena;
    jerr err;          /* the arena's error target while parsing */
    nlist body;
    char *name;
};

tela_jinja_options tela_jinja_hf_options(void) {
    tela_jinja_options o = {true, true, false};
    return o;
}

/* Normalizes \r\n and \r to \n and drops one trailing newline (unless
 * keep_trailing_newline), as jinja2's lexer does before tokenizing. */
static char *normalize_source(jarena *a, const char *src, size_t len, bool keep_trailing, size_t *out_len) {
    char *s = jinja_alloc(a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (!keep_trailing && n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;
    *out_len = n;
    return s;
}

tela_status tela_jinja_parse(const char *source, size_t len, const char *name, const tela_jinja_options *opt,
                             tela_jinja **out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "tela_jinja_parse: out is NULL");
    *out = NULL;
    if (!source && len) return tela_errorf(TELA_ERR_ARG, "tela_jinja_parse: source is NULL");
    if (!name) name = "template";
    if (len > J_MAX_SOURCE) return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: template of %zu bytes is too large", name, len);
    tela_jinja *t = calloc(1, sizeof *t);
    if (!t) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", name);
    t->name = strdup(name);
    if (!t->name) {
        free(t);
        return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", name);
    }
    t->err.name = t->name;
    t->arena.err = &t->err;
    t->arena.limit = J_DEFAULT_MAX_MEMORY;
    tela_jinja_options o = opt ? *opt : tela_jinja_hf_options();
    if (setjmp(t->err.jb)) {
        tela_status code = t->err.code;
        tela_errorf(code, "%s", t->err.msg);
        tela_jinja_free(t);
        return code;
    }
    size_t n, ntoks;
    const char *src = normalize_source(&t->arena, source ? source : "", len, o.keep_trailing_newline, &n);
    token *toks;
    jinja_lex(&t->arena, &t->err, src, n, &o, &toks, &ntoks);
    t->body = jinja_parse(&t->arena, &t->err, toks, ntoks);
    *out = t;
    return TELA_OK;
}

void tela_jinja_free(tela_jinja *tmpl) {
    if (!tmpl) return;
    jinja_arena_free(&tmpl->arena);
    free(tmpl->name);
    free(tmpl);
}

/* cJSON -> value. Strings point into the cJSON tree, which outlives the
 * render. */
static jv from_json(render *R, const cJSON *j, int depth) {
    if (depth > 2000) jinja_rfail(R, NULL, "variables nested too deeply");
    if (!j || cJSON_IsNull(j)) return J_NONE;
    if (cJSON_IsTrue(j)) return jv_bool(true);
    if (cJSON_IsFalse(j)) return jv_bool(false);
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) <= 9007199254740992.0) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j)) return j->valuestring ? jv_cstr(j->valuestring) : jv_strn("", 0);
    if (cJSON_IsRaw(j)) return j->valuestring ? jv_cstr(j->valuestring) : jv_strn("", 0);
    if (cJSON_IsArray(j)) {
        jlist *l = jinja_list_new(R->a, 0);
        for (const cJSON *c = j->child; c; c = c->next) jinja_list_push(R->a, l, from_json(R, c, depth + 1));
        return jv_list(l);
    }
    if (cJSON_IsObject(j)) {
        jdict *d = jinja_dict_new(R->a);
        for (const cJSON *c = j->child; c; c = c->next)
            jinja_dict_set(R->a, d, c->string ? jv_cstr(c->string) : jv_strn("", 0), from_json(R, c, depth + 1));
        return jv_dict(d);
    }
    return J_NONE;
}

tela_status tela_jinja_render(const tela_jinja *tmpl, const cJSON *vars, const tela_jinja_render_params *params,
                              char **out, size_t *out_len) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "tela_jinja_render: out is NULL");
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!tmpl) return tela_errorf(TELA_ERR_ARG, "tela_jinja_render: template is NULL");
    if (vars && !cJSON_IsObject(vars))
        return tela_errorf(TELA_ERR_ARG, "%s: the template variables must be a JSON object", tmpl->name);
    /* everything the longjmp error path touches lives on the heap, so no local
     * changes between setjmp and longjmp */
    struct rctx {
        jerr err;
        jarena arena;
        render R;
        sbuf out;
    } *c = calloc(1, sizeof *c);
    if (!c) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", tmpl->name);
    c->err.name = tmpl->name;
    c->arena.err = &c->err;
    c->arena.limit = params && params->max_memory ? params->max_memory : J_DEFAULT_MAX_MEMORY;
    c->R.a = &c->arena;
    c->R.err = &c->err;
    c->R.now = params ? params->now : 0;
    c->R.max_output = params && params->max_output ? params->max_output : J_DEFAULT_MAX_OUTPUT;
    if (setjmp(c->err.jb)) {
        tela_status code = tela_errorf(c->err.code, "%s", c->err.msg);
        jinja_arena_free(&c->arena);
        free(c);
        return code;
    }
    scope *globals = jinja_new_scope(&c->R, NULL);
    if (vars)
        for (const cJSON *v = vars->child; v; v = v->next)
            if (v->string)
                jinja_scope_set(&c->R, globals, jinja_strndup(&c->arena, v->string, strlen(v->string)), from_json(&c->R, v, 0));
    scope *root = jinja_new_scope(&c->R, globals);
    sb_init(&c->out, &c->arena, c->R.max_output);
    c->R.out = &c->out;
    jinja_exec_body(&c->R, tmpl->body, root);
    char *res = malloc(c->out.n + 1);
    tela_status st = TELA_OK;
    if (res) {
        if (c->out.n) memcpy(res, c->out.p, c->out.n);
        res[c->out.n] = 0;
        if (out_len) *out_len = c->out.n;
        *out = res;
    } else {
        st = tela_errorf(TELA_ERR_NOMEM, "%s: out of memory for the rendered text", tmpl->name);
    }
    jinja_arena_free(&c->arena);
    free(c);
    return st;
}
