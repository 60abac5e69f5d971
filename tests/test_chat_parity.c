/* test_chat_parity.c: tela's chat-template rendering against Hugging Face
 * transformers. tests/fixtures/chat/expected_<template>.json hold what
 * transformers' render_jinja_template (the renderer behind
 * apply_chat_template(..., tokenize=False)) produced for the conversations of
 * tests/fixtures/chat/conversations.json (tools/reference/chat_cases.py makes
 * them). Every rendered string must match byte for byte, and every case where
 * transformers raised an error must fail in tela too (with the template's own
 * message when it came from raise_exception()). Skips when no expected file is
 * present. TELA_CHAT_EXPECTED_DIR overrides where the expected files are read
 * from (to check a fresh reference run before committing it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "test.h"
#include "tela/tela.h"
#include "tokenizer/chat.h"
#include "util/mapped_file.h"

static cJSON *load_json(const char *path) {
    char *text;
    size_t n;
    if (tela_read_file(path, &text, &n) != TELA_OK) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, n);
    free(text);
    return j;
}

static const cJSON *find_case(const cJSON *conv, const char *name) {
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(conv, "cases")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return c;
    }
    return NULL;
}

/* Prints where two strings first differ, with some context. */
static void show_diff(const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "    first difference at byte %zu\n    want: ...", i);
    for (size_t k = from; want[k] && k < i + 40; k++) fputc(want[k] == '\n' ? '|' : want[k], stderr);
    fprintf(stderr, "\n    got:  ...");
    for (size_t k = from; got[k] && k < i + 40; k++) fputc(got[k] == '\n' ? '|' : got[k], stderr);
    fputc('\n', stderr);
}

static const char *str_or_null(const cJSON *j) { return cJSON_IsString(j) ? j->valuestring : NULL; }

/* Runs the cases of one expected file; returns the number of cases run. */
static int run_template(const cJSON *conv, const char *name, const cJSON *exp) {
    const char *tmpl = str_or_null(cJSON_GetObjectItemCaseSensitive(exp, "template"));
    const char *generator = str_or_null(cJSON_GetObjectItemCaseSensitive(exp, "generator"));
    CHECK_MSG(tmpl != NULL, "expected_%s.json has no template", name);
    if (!tmpl) return 0;
    if (!generator || strncmp(generator, "transformers", 12))
        printf("note: expected_%s.json was not made by transformers (%s)\n", name, generator ? generator : "?");
    const cJSON *tvars = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(conv, "template_vars"), name);
    int n = 0;
    const cJSON *ec;
    cJSON_ArrayForEach(ec, cJSON_GetObjectItemCaseSensitive(exp, "cases")) {
        const char *cname = str_or_null(cJSON_GetObjectItemCaseSensitive(ec, "name"));
        const cJSON *c = cname ? find_case(conv, cname) : NULL;
        CHECK_MSG(c != NULL, "%s: case '%s' is not in conversations.json", name, cname ? cname : "?");
        if (!c) continue;
        /* extra variables: the template's defaults, then the case's own */
        cJSON *extra = cJSON_CreateObject();
        const cJSON *sources[2] = {tvars, cJSON_GetObjectItemCaseSensitive(c, "extra")};
        for (int s = 0; s < 2; s++) {
            const cJSON *v;
            cJSON_ArrayForEach(v, sources[s]) {
                cJSON_DeleteItemFromObjectCaseSensitive(extra, v->string);
                cJSON_AddItemToObject(extra, v->string, cJSON_Duplicate(v, true));
            }
        }
        tela_chat_params p = {0};
        p.messages = cJSON_GetObjectItemCaseSensitive(c, "messages");
        p.tools = cJSON_GetObjectItemCaseSensitive(c, "tools");
        p.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt"));
        p.extra = extra;
        p.bos_token = str_or_null(cJSON_GetObjectItemCaseSensitive(exp, "bos_token"));
        p.eos_token = str_or_null(cJSON_GetObjectItemCaseSensitive(exp, "eos_token"));
        char *out = NULL;
        tela_status st = tela_chat_render_json(tmpl, &p, &out);
        const char *want = str_or_null(cJSON_GetObjectItemCaseSensitive(ec, "rendered"));
        const char *want_err = str_or_null(cJSON_GetObjectItemCaseSensitive(ec, "error"));
        if (want) {
            CHECK_MSG(st == TELA_OK, "%s/%s: tela failed: %s", name, cname, tela_last_error());
            if (st == TELA_OK) {
                bool same = !strcmp(want, out);
                CHECK_MSG(same, "%s/%s: rendering differs from transformers", name, cname);
                if (!same) show_diff(want, out);
            }
        } else if (want_err) {
            CHECK_MSG(st != TELA_OK, "%s/%s: transformers raised \"%s\" but tela rendered it", name, cname, want_err);
            if (st != TELA_OK && !strncmp(want_err, "TemplateError: ", 15)) {
                /* raise_exception(): tela must report the template's message */
                CHECK_MSG(st == TELA_ERR_ARG && strstr(tela_last_error(), want_err + 15),
                          "%s/%s: want \"%s\", tela said: %s", name, cname, want_err + 15, tela_last_error());
            }
        } else {
            CHECK_MSG(0, "%s/%s: the expected case has neither 'rendered' nor 'error'", name, cname);
        }
        free(out);
        cJSON_Delete(extra);
        n++;
    }
    return n;
}

int main(void) {
    char buf[4096], path[8192];
    const char *dir = getenv("TELA_CHAT_EXPECTED_DIR");
    const char *fix = test_path(buf, sizeof buf, "TELA_SOURCE_DIR", "tests/fixtures/chat");
    if (!fix) test_skip("TELA_SOURCE_DIR is not set");
    if (!dir) dir = fix;
    snprintf(path, sizeof path, "%s/conversations.json", fix);
    cJSON *conv = load_json(path);
    CHECK_MSG(conv != NULL, "cannot read %s", path);
    if (!conv) return test_finish();

    int files = 0, cases = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(conv, "templates")) {
        snprintf(path, sizeof path, "%s/expected_%s.json", dir, t->string);
        cJSON *exp = load_json(path);
        if (!exp) {
            printf("no %s\n", path);
            continue;
        }
        files++;
        int n = run_template(conv, t->string, exp);
        printf("%s: %d cases\n", t->string, n);
        cases += n;
        cJSON_Delete(exp);
    }
    cJSON_Delete(conv);
    if (!files) test_skip("no expected_<template>.json files (run tools/reference/chat_cases.py)");
    CHECK(cases > 0);
    return test_finish();
}
