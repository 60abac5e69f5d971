/* test_jinja_fuzz.c: hostile templates must give a clean error or a result,
 * never a crash, hang or out-of-bounds access (meaningful under the
 * sanitizer build). Mutates the real chat templates of tests/fixtures/chat
 * (or a built-in sample when TELA_SOURCE_DIR is unset) with a fixed-seed
 * generator and renders every mutant that parses. TELA_JINJA_FUZZ_ROUNDS and
 * TELA_JINJA_FUZZ_SEED make longer or different runs (by hand). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "test.h"
#include "tela/tela.h"
#include "tokenizer/jinja.h"
#include "util/mapped_file.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static const char *const snippets[] = {
    "{%", "%}", "{{", "}}", "{#", "#}", "-", "+", "(", ")", "[", "]", "{", "}", "'", "\"", "\\", "|", ".", ",", ":",
    " if ", " else ", " for x in ", " endfor ", " endif ", " set ", " macro m(a) ", " endmacro ", " not ", " is ",
    " defined ", " in ", "loop.index", "messages", "[::-1]", "|tojson", "|length", "|items", "ns.x", "**", "//",
    "~", "\n", "\xc3", "\xff", "0", "1e309", "9223372036854775807", "{% raw %}", "{% endraw %}", "caller()",
    "{% call m() %}", "{% endcall %}", "{% break %}", "namespace(", "range(", "raise_exception(", "\t",
};

static const char SAMPLE[] =
    "{%- set ns = namespace(n=0) %}{%- macro r(c) %}{{ c|trim }}{% endmacro %}"
    "{%- for m in messages %}{% if m.role == 'user' %}{{ '<u>' + r(m.content) }}{% elif m.tool_calls %}"
    "{% for t in m.tool_calls %}{{ t.function.arguments|tojson }}{% endfor %}{% else %}{{ m.content }}{% endif %}"
    "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}{% if add_generation_prompt %}<a>{% endif %}";

static const char VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \" u \"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nr\\n</think>\\n\\na\", \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5, null, true], \"y\": \"z\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"ok\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"enable_thinking\": false}";

static int n_ok, n_parse_err, n_render_err;

static void try_template(const char *src, size_t len, const cJSON *vars) {
    tela_jinja *t;
    tela_status st = tela_jinja_parse(src, len, "fuzz", NULL, &t);
    if (st != TELA_OK) {
        CHECK_MSG(st == TELA_ERR_FORMAT || st == TELA_ERR_UNSUPPORTED, "parse status %d", st);
        CHECK(tela_last_error()[0] != 0);
        n_parse_err++;
        return;
    }
    tela_jinja_render_params rp = {0};
    rp.now = 1721995200;
    rp.max_output = 1 << 20;
    rp.max_memory = 64 << 20;
    char *out = NULL;
    size_t n = 0;
    st = tela_jinja_render(t, vars, &rp, &out, &n);
    if (st == TELA_OK) {
        CHECK(out != NULL && out[n] == 0);
        n_ok++;
    } else {
        CHECK_MSG(st == TELA_ERR_FORMAT || st == TELA_ERR_ARG || st == TELA_ERR_UNSUPPORTED, "render status %d", st);
        CHECK(out == NULL);
        n_render_err++;
    }
    free(out);
    tela_jinja_free(t);
}

static void mutate_and_run(const char *base, size_t len, const cJSON *vars, int rounds) {
    size_t cap = len * 2 + 1024;
    char *buf = malloc(cap);
    for (int r = 0; r < rounds; r++) {
        memcpy(buf, base, len);
        size_t n = len;
        int edits = 1 + (int)rnd(4);
        for (int e = 0; e < edits; e++) {
            size_t at = n ? rnd((uint32_t)n + 1) : 0;
            switch (rnd(4)) {
            case 0: { /* delete a span */
                size_t k = rnd(16) + 1;
                if (at + k > n) k = n - at;
                memmove(buf + at, buf + at + k, n - at - k);
                n -= k;
                break;
            }
            case 1: { /* insert a snippet */
                const char *s = snippets[rnd(sizeof snippets / sizeof snippets[0])];
                size_t k = strlen(s);
                if (n + k >= cap) break;
                memmove(buf + at + k, buf + at, n - at);
                memcpy(buf + at, s, k);
                n += k;
                break;
            }
            case 2: /* overwrite a byte */
                if (at < n) buf[at] = (char)rnd(256);
                break;
            default: { /* duplicate a span */
                size_t k = rnd(64) + 1;
                if (at + k > n) k = n - at;
                if (n + k >= cap) break;
                memmove(buf + at + k, buf + at, n - at);
                n += k;
                break;
            }
            }
        }
        try_template(buf, n, vars);
    }
    free(buf);
}

int main(void) {
    int rounds = getenv("TELA_JINJA_FUZZ_ROUNDS") ? atoi(getenv("TELA_JINJA_FUZZ_ROUNDS")) : 600;
    if (getenv("TELA_JINJA_FUZZ_SEED")) rng ^= strtoull(getenv("TELA_JINJA_FUZZ_SEED"), NULL, 10) * 0x2545f4914f6cdd1dull;
    if (!rng) rng = 1;
    cJSON *vars = cJSON_Parse(VARS);
    CHECK(vars != NULL);
    const char *names[] = {"llama3_1.jinja", "llama3_2.jinja", "qwen3.jinja", "qwen3_5.jinja"};
    char dir[4096];
    bool have_fixtures = test_path(dir, sizeof dir, "TELA_SOURCE_DIR", "tests/fixtures/chat") != NULL;
    int used = 0;
    for (size_t i = 0; have_fixtures && i < sizeof names / sizeof names[0]; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        char *text;
        size_t n;
        if (tela_read_file(path, &text, &n) != TELA_OK) continue;
        try_template(text, n, vars); /* the unmutated template renders */
        mutate_and_run(text, n, vars, rounds);
        free(text);
        used++;
    }
    mutate_and_run(SAMPLE, strlen(SAMPLE), vars, used ? rounds : 5 * rounds);
    /* pure noise */
    for (int r = 0; r < 500; r++) {
        char noise[256];
        size_t n = rnd(sizeof noise);
        for (size_t i = 0; i < n; i++) noise[i] = (char)(rnd(4) ? "{}%#-+ ()[]'\"|.a1\n"[rnd(19)] : (char)rnd(256));
        try_template(noise, n, vars);
    }
    printf("%d rendered, %d parse errors, %d render errors\n", n_ok, n_parse_err, n_render_err);
    CHECK(n_ok > 0 && n_parse_err > 0 && n_render_err > 0);
    cJSON_Delete(vars);
    return test_finish();
}
