/* test_llama_ref.c: parity with Hugging Face transformers on the shared
 * reference model llama-d1 as an F16 GGUF made by llama.cpp's converter (the
 * checks are listed in test_llama_ref.h). With the GGUF's tokenizer also:
 * the prompt texts tokenize to the reference ids, an end-of-generation
 * token stops generation, and a stop string cuts the streamed text. */
#include "tela/tela.h"
#include "test.h"
#include "test_llama_ref.h"

int main(void) {
    const cJSON *prompts = load_refs();
    char path[1200];
    snprintf(path, sizeof path, "%s/llama-d1.gguf", fixtures);
    tela_model *m = NULL;
    CHECK_OK(tela_model_load(path, NULL, &m));
    if (m) {
        CHECK(!strcmp(tela_model_get_info(m)->file_type, "f16"));
        for (int i = 0; i < cJSON_GetArraySize(prompts); i++)
            check_prompt(m, cJSON_GetArrayItem(prompts, i), i, "gguf");
        if (tela_model_get_info(m)->has_tokenizer) check_stops(m, cJSON_GetArrayItem(prompts, 0));
        tela_model_free(m);
    }
    cJSON_Delete(refs_json);
    return test_finish();
}
