/* test_llama_ref.c: parity with Hugging Face transformers on the shared
 * reference model llama-d1 as an F16 GGUF made by llama.cpp's converter (the
 * checks are listed in test_llama_ref.h). With the GGUF's tokenizer also:
 * the prompt texts tokenize to the reference ids, an end-of-generation
 * token stops generation, a stop string cuts the streamed text, and the
 * GGUF's chat template (Llama 3's) renders a conversation as Jinja
 * evaluates it (expected string written out by hand from the template). */
#include "tela/tela.h"
#include "test.h"
#include "test_llama_ref.h"

/* The template (Llama 3 Instruct's first one) trims only the content ('|'
 * binds tighter than '+'), puts bos_token before the first message, and
 * always ends with the assistant header, add_generation_prompt or not. */
static void check_chat(tela_model *m) {
    CHECK(tela_model_get_info(m)->has_chat_template);
    const char *roles[] = {"system", "user"};
    const char *contents[] = {"You are terse.", " Hi there \n"};
    char *out = NULL;
    CHECK_OK(tela_chat_render(m, roles, contents, 2, 1, &out));
    const char *expect = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                         "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                         "<|start_header_id|>assistant<|end_header_id|>\n\n";
    CHECK_MSG(out && !strcmp(out, expect), "rendered: %s", out ? out : "(null)");
    free(out);
    out = NULL;
    CHECK_OK(tela_chat_render(m, roles + 1, contents + 1, 1, 0, &out));
    CHECK(out && !strcmp(out, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    free(out);
}

int main(void) {
    const cJSON *prompts = load_refs();
    char path[1200];
    snprintf(path, sizeof path, "%s/llama-d1.gguf", fixtures);
    if (access(path, R_OK) != 0) test_skip("no llama-d1.gguf beside refs-d1.json");
    tela_model *m = NULL;
    CHECK_OK(tela_model_load(path, NULL, &m));
    if (m) {
        CHECK(!strcmp(tela_model_get_info(m)->file_type, "f16"));
        for (int i = 0; i < cJSON_GetArraySize(prompts); i++)
            check_prompt(m, cJSON_GetArrayItem(prompts, i), i, "gguf");
        if (tela_model_get_info(m)->has_tokenizer) {
            check_stops(m, cJSON_GetArrayItem(prompts, 0));
            check_chat(m);
        }
        tela_model_free(m);
    }
    cJSON_Delete(refs_json);
    return test_finish();
}
