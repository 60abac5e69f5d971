/* test_llama_ref_hf.c: parity with Hugging Face transformers on the
 * shared reference model llama-d1 as a float32 HF checkpoint
 * (llama-d1-hf.tgz, extracted to a temporary directory); the checks are
 * listed in test_llama_ref.h. Here RoPE rotates halves (HF's layout). */
#include "tela/tela.h"
#include "test.h"
#include "test_llama_ref.h"

int main(void) {
    const cJSON *prompts = load_refs();
    char tgz[1200];
    snprintf(tgz, sizeof tgz, "%s/llama-d1-hf.tgz", fixtures);
    if (access(tgz, R_OK) != 0) test_skip("no llama-d1-hf.tgz beside refs-d1.json");
    char dir[] = "/tmp/tela_llama_ref_XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "tar xzf '%s/llama-d1-hf.tgz' -C '%s'", fixtures, dir);
    CHECK_EQ_INT(system(cmd), 0);
    tela_model *m = NULL;
    CHECK_OK(tela_model_load(dir, NULL, &m));
    if (m) {
        const tela_model_info *info = tela_model_get_info(m);
        CHECK(!strcmp(info->file_type, "f32"));
        CHECK(!strcmp(info->arch, "llama"));
        CHECK_EQ_INT(info->n_ctx_train, 4096);
        for (int i = 0; i < cJSON_GetArraySize(prompts); i++)
            check_prompt(m, cJSON_GetArrayItem(prompts, i), i, "hf");
        tela_model_free(m);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ_INT(system(cmd), 0);
    cJSON_Delete(refs_json);
    return test_finish();
}
