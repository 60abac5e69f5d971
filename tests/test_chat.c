/* test_chat.c: the chat-template API (src/tokenizer/chat.h). Expected strings
 * are worked out by hand from the templates' text (ChatML, Llama 3, Llama
 * 3.1, Qwen3) and from the variables Hugging Face's apply_chat_template
 * passes; the transformers comparison itself is test_chat_parity. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "test.h"
#include "tela/tela.h"
#include "tokenizer/chat.h"
#include "util/mapped_file.h"

static const char CHATML[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* The original Llama 3 Instruct template (always ends with the assistant
 * header; trims the contents). */
static const char LLAMA3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}";

/* out is passed by address: it is read after the call that fills it */
static void check_str(const char *what, tela_status st, char **out, const char *want) {
    CHECK_MSG(st == TELA_OK, "%s: %s", what, tela_last_error());
    if (st == TELA_OK) CHECK_MSG(!strcmp(*out, want), "%s:\n    want \"%s\"\n    got  \"%s\"", what, want, *out);
    free(*out);
    *out = NULL;
}

static void test_plain_messages(void) {
    const char *roles[] = {"system", "user", "assistant", "user"};
    const char *contents[] = {"You are terse.", " Hi \n", "Hello.", "Bye"};
    char *out;
    tela_status st = tela_chat_template_render(CHATML, NULL, "<|im_end|>", roles, contents, 2, true, &out);
    check_str("chatml", st, &out,
              "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n<|im_start|>assistant\n");
    st = tela_chat_template_render(CHATML, NULL, NULL, roles, contents, 3, false, &out);
    check_str("chatml, no generation prompt", st, &out,
              "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n"
              "<|im_start|>assistant\nHello.<|im_end|>\n");
    st = tela_chat_template_render(LLAMA3, "<|begin_of_text|>", "<|end_of_text|>", roles + 1, contents + 1, 3, false,
                                   &out);
    check_str("llama3", st, &out,
              "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* errors */
    CHECK(tela_chat_template_render(CHATML, NULL, NULL, roles, contents, 0, true, &out) == TELA_ERR_ARG);
    CHECK(out == NULL);
    CHECK(strstr(tela_last_error(), "empty conversation") != NULL);
    const char *bad_roles[] = {"user", NULL};
    CHECK(tela_chat_template_render(CHATML, NULL, NULL, bad_roles, contents, 2, true, &out) == TELA_ERR_ARG);
    CHECK(tela_chat_template_render("{% if %}", NULL, NULL, roles, contents, 1, true, &out) == TELA_ERR_FORMAT);
    CHECK(strncmp(tela_last_error(), "chat template: line 1", 21) == 0);
    CHECK(tela_chat_template_render("{{ raise_exception('only user turns, please') }}", NULL, NULL, roles, contents, 1,
                                    true, &out) == TELA_ERR_ARG);
    CHECK(strstr(tela_last_error(), "only user turns, please") != NULL);
}

/* The variables the template sees, as apply_chat_template passes them. */
static void test_variables(void) {
    const char *probe =
        "{{ messages|length }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|"
        "{{ bos_token is defined }}|{{ eos_token }}|{{ enable_thinking is defined }}";
    cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"x\"}]");
    tela_chat_params p = {0};
    p.messages = msgs;
    p.eos_token = "</s>";
    char *out;
    check_str("defaults", tela_chat_render_json(probe, &p, &out), &out, "1|True|True|False|False|</s>|False");
    /* extra variables are added and override the special tokens */
    cJSON *extra = cJSON_Parse("{\"eos_token\": \"<eot>\", \"enable_thinking\": false}");
    cJSON *tools = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
    p.extra = extra;
    p.tools = tools;
    p.add_generation_prompt = true;
    check_str("extra", tela_chat_render_json(probe, &p, &out), &out, "1|False|True|True|False|<eot>|True");
    check_str("tools", tela_chat_render_json("{{ tools|tojson }}", &p, &out), &out,
              "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
    /* the caller's JSON is not modified */
    char *again = cJSON_PrintUnformatted(extra);
    CHECK(!strcmp(again, "{\"eos_token\":\"<eot>\",\"enable_thinking\":false}"));
    free(again);
    /* names that would clash with apply_chat_template's own arguments */
    cJSON *clash = cJSON_Parse("{\"messages\": []}");
    p.extra = clash;
    CHECK(tela_chat_render_json(probe, &p, &out) == TELA_ERR_ARG);
    p.extra = msgs; /* not an object */
    CHECK(tela_chat_render_json(probe, &p, &out) == TELA_ERR_ARG);
    p.extra = NULL;
    p.tools = msgs->child; /* not an array */
    CHECK(tela_chat_render_json(probe, &p, &out) == TELA_ERR_ARG);
    p.tools = NULL;
    p.messages = extra; /* not an array */
    CHECK(tela_chat_render_json(probe, &p, &out) == TELA_ERR_ARG);
    CHECK(tela_chat_render_json(probe, NULL, &out) == TELA_ERR_ARG);
    cJSON_Delete(clash);
    cJSON_Delete(tools);
    cJSON_Delete(extra);
    cJSON_Delete(msgs);
}

static char *read_fixture(const char *name) {
    char buf[4096];
    if (!test_path(buf, sizeof buf, "TELA_SOURCE_DIR", "tests/fixtures/chat")) return NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", buf, name);
    char *text;
    size_t n;
    if (tela_read_file(path, &text, &n) != TELA_OK) return NULL;
    return text;
}

/* Real templates on a one-message conversation, expected text derived by
 * following each template by hand. */
static void test_real_templates(void) {
    char *llama31 = read_fixture("llama3_1.jinja"), *qwen3 = read_fixture("qwen3.jinja");
    if (!llama31 || !qwen3) {
        printf("fixtures not found (TELA_SOURCE_DIR unset?): real-template checks skipped\n");
        free(llama31);
        free(qwen3);
        return;
    }
    const char *roles[] = {"user"}, *contents[] = {"Hi"};
    char *out;
    /* no tools, so no "Environment" line; date_string defaults to 26 Jul 2024 */
    check_str("llama 3.1",
              tela_chat_template_render(llama31, "<|begin_of_text|>", "<|eot_id|>", roles, contents, 1, true, &out), &out,
              "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
              "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_str("qwen3", tela_chat_template_render(qwen3, NULL, "<|im_end|>", roles, contents, 1, true, &out), &out,
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* enable_thinking=false adds an empty think block after the header; an
     * earlier assistant turn loses its reasoning, the last one keeps it */
    cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"Q1\"},"
                              " {\"role\": \"assistant\", \"content\": \"<think>\\nr1\\n</think>\\n\\nA1\"},"
                              " {\"role\": \"user\", \"content\": \"Q2\"}]");
    cJSON *extra = cJSON_Parse("{\"enable_thinking\": false}");
    tela_chat_params p = {0};
    p.messages = msgs;
    p.extra = extra;
    p.add_generation_prompt = true;
    check_str("qwen3 no thinking", tela_chat_render_json(qwen3, &p, &out), &out,
              "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
              "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    cJSON_DeleteItemFromArray(msgs, 2);
    p.extra = NULL;
    p.add_generation_prompt = false;
    check_str("qwen3 last turn thinking", tela_chat_render_json(qwen3, &p, &out), &out,
              "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\nr1\n</think>\n\nA1<|im_end|>\n");
    cJSON_Delete(extra);
    cJSON_Delete(msgs);
    free(llama31);
    free(qwen3);
}

int main(void) {
    test_plain_messages();
    test_variables();
    test_real_templates();
    return test_finish();
}
