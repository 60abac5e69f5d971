/* fuzz_jinja.c: libFuzzer harness for the chat-template engine
 * (src/tokenizer/jinja/). A model file's chat template is untrusted input
 * that tela parses and runs; every input is parsed as a template and, when
 * that succeeds, rendered with chat messages, tools and the usual globals.
 * A refusal must carry one of the documented statuses and a message; a
 * result must be as long as it says and NUL-terminated. The engine's
 * limits (nesting, steps, output, memory) must turn runaway templates
 * into errors, not hangs: run with -timeout=10.
 *   cmake -S . -B build-fuzz -G Ninja -DTELA_FUZZ=ON -DCMAKE_C_COMPILER=clang
 *   ninja -C build-fuzz fuzz/fuzz_jinja
 *   build-fuzz/fuzz/fuzz_jinja -dict=fuzz/jinja.dict -timeout=10 fuzz/corpus/jinja */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "tela/tela.h"
#include "tokenizer/jinja.h"

static const char VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \" u \"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nr\\n</think>\\n\\na\", \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5, null, true], \"y\": \"z\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"ok\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"t\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": false}";

static cJSON *vars;

static void must(int cond) {
    if (!cond) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!vars) must((vars = cJSON_Parse(VARS)) != NULL);
    tela_jinja *t = NULL;
    tela_status st = tela_jinja_parse((const char *)data, size, "fuzz", NULL, &t);
    if (st != TELA_OK) {
        must(st == TELA_ERR_FORMAT || st == TELA_ERR_UNSUPPORTED || st == TELA_ERR_NOMEM);
        must(tela_last_error()[0] != 0);
        must(t == NULL);
        return 0;
    }
    tela_jinja_render_params rp = {0};
    rp.now = 1721995200;
    rp.max_output = 1 << 20;
    rp.max_memory = 64u << 20;
    char *out = NULL;
    size_t n = 0;
    st = tela_jinja_render(t, vars, &rp, &out, &n);
    if (st == TELA_OK) {
        must(out != NULL && strlen(out) <= n && out[n] == 0);
        must(n <= rp.max_output);
        free(out);
    } else {
        must(st == TELA_ERR_FORMAT || st == TELA_ERR_ARG || st == TELA_ERR_UNSUPPORTED || st == TELA_ERR_NOMEM);
        must(tela_last_error()[0] != 0);
    }
    tela_jinja_free(t);
    return 0;
}
