/* test_llama_load.c: loading Llama models: clean errors (naming the tensor
 * or key) for wrong shapes, missing tensors, bad hyperparameters, unknown
 * architectures, truncated and foreign files; the Llama-3 rope factors we
 * compute from config.json equal the rope_freqs.weight llama.cpp's
 * converter stored in llama-d1.gguf; the same HF checkpoint gives the same
 * logits with a transformers-4 style config (rope_theta + rope_scaling) as
 * with the transformers-5 one (rope_parameters). The ../shared parts skip
 * themselves when it is absent. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "model/model.h"
#include "tela/tela.h"
#include "test.h"
#include "test_llama_tiny.h"

static char path[512];

static tela_status try_load(const tiny_cfg *c, tela_model **m) {
    *m = NULL;
    if (tiny_write(path, c, 3) != TELA_OK) return TELA_ERR_INTERNAL;
    return tela_model_load(path, NULL, m);
}

static void expect_fail(const tiny_cfg *c, tela_status want, const char *needle) {
    tela_model *m;
    tela_status s = try_load(c, &m);
    CHECK_MSG(s == want, "status %d (%s), expected %d", (int)s, tela_last_error(), (int)want);
    CHECK_MSG(strstr(tela_last_error(), needle) != NULL, "message '%s' lacks '%s'", tela_last_error(), needle);
    CHECK(m == NULL);
    tela_model_free(m);
}

static void test_gguf_errors(void) {
    tiny_cfg c = tiny_default();
    tela_model *m;
    CHECK_OK(try_load(&c, &m));
    tela_model_free(m);

    c.bad_tensor = "blk.1.attn_k.weight";
    expect_fail(&c, TELA_ERR_FORMAT, "blk.1.attn_k.weight");
    CHECK(strstr(tela_last_error(), "expected [48, 32]") != NULL);
    c.bad_tensor = "blk.0.ffn_norm.weight";
    expect_fail(&c, TELA_ERR_FORMAT, "blk.0.ffn_norm.weight");
    c.bad_tensor = "rope_freqs.weight";
    expect_fail(&c, TELA_ERR_FORMAT, "rope_freqs.weight");
    c.bad_tensor = NULL;

    c.omit_tensor = "blk.1.ffn_down.weight";
    expect_fail(&c, TELA_ERR_NOT_FOUND, "blk.1.ffn_down.weight");
    c.omit_tensor = "output_norm.weight";
    expect_fail(&c, TELA_ERR_NOT_FOUND, "output_norm.weight");
    c.omit_tensor = NULL;

    c.n_kv_head = 3; /* 4 heads are not a multiple of 3 KV heads */
    expect_fail(&c, TELA_ERR_FORMAT, "KV heads");
    c.n_kv_head = 2;

    c.arch = "gpt-neo-x";
    expect_fail(&c, TELA_ERR_UNSUPPORTED, "gpt-neo-x");
    c.arch = "llama";

    /* truncated at many points: an error every time, never a crash */
    CHECK_OK(tiny_write(path, &c, 3));
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size);
    CHECK(fread(buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    char cut[600];
    snprintf(cut, sizeof cut, "%s.cut", path);
    int failures = 0, tries = 0;
    for (long n = 0; n < size; n += size / 23 + 1, tries++) {
        f = fopen(cut, "wb");
        fwrite(buf, 1, (size_t)n, f);
        fclose(f);
        tela_model *mm = NULL;
        if (tela_model_load(cut, NULL, &mm) != TELA_OK) failures++;
        tela_model_free(mm);
    }
    CHECK(tries > 20);
    CHECK_EQ_INT(failures, tries);
    /* not a model at all */
    f = fopen(cut, "wb");
    fputs("hello, I am not a model", f);
    fclose(f);
    tela_model *mm = NULL;
    CHECK(tela_model_load(cut, NULL, &mm) == TELA_ERR_FORMAT);
    CHECK(strstr(tela_last_error(), "not a GGUF") != NULL);
    unlink(cut);
    free(buf);
    char missing[600];
    snprintf(missing, sizeof missing, "%s.missing", path);
    CHECK(tela_model_load(missing, NULL, &mm) == TELA_ERR_IO);
    CHECK(tela_model_load(NULL, NULL, &mm) == TELA_ERR_ARG);
}

/* ---- ../shared parts ---- */

static char *read_text(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    b[n] = '\0';
    fclose(f);
    return b;
}

static void write_text(const char *p, const char *s) {
    FILE *f = fopen(p, "wb");
    fputs(s, f);
    fclose(f);
}

static void last_logits(const char *model_path, const int32_t *ids, int n, float *out) {
    tela_model *m = NULL;
    CHECK_OK(tela_model_load(model_path, NULL, &m));
    if (!m) return;
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = 64;
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    if (s) CHECK_OK(tela_session_eval(s, ids, n, out, 0));
    tela_session_free(s);
    tela_model_free(m);
}

static void test_shared(void) {
    const char *shared = getenv("TELA_SHARED_DIR");
    char p[1024];
    if (!shared) return;
    snprintf(p, sizeof p, "%s/reference/fixtures/llama-d1.gguf", shared);
    if (access(p, R_OK) != 0) {
        printf("note: no ../shared fixtures, skipping those checks\n");
        return;
    }
    /* rope factors: llama.cpp's converter vs our config.json computation
     * (factor 32, low 1, high 4, original context 1024, theta 500000, d 16) */
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_open(p, &g));
    const tela_gguf_tensor *rf = g ? tela_gguf_find_tensor(g, "rope_freqs.weight") : NULL;
    CHECK(rf && rf->t.type == TELA_TYPE_F32 && rf->t.ne[0] == 8);
    if (rf) {
        float ours[8];
        tela_rope_llama3_factors(ours, 16, 500000.0, 32.0, 1.0, 4.0, 1024.0);
        for (int i = 0; i < 8; i++) {
            float theirs;
            memcpy(&theirs, (const char *)rf->t.data + 4 * i, 4);
            CHECK_NEAR(ours[i], theirs, 1e-5 * theirs);
        }
    }
    tela_gguf_close(g);

    /* transformers-4 style config.json == transformers-5 style */
    snprintf(p, sizeof p, "%s/reference/fixtures/llama-d1-hf.tgz", shared);
    if (access(p, R_OK) != 0) { /* (a partial copy of ../shared: a GPU machine's gets the GGUF fixtures only) */
        printf("note: no %s, config.json styles not compared\n", p);
        return;
    }
    char dir[] = "/tmp/tela_llama_load_XXXXXX";
    if (!mkdtemp(dir)) return;
    char cmd[2400], cfg[1200];
    snprintf(cmd, sizeof cmd, "tar xzf '%s' -C '%s'", p, dir);
    CHECK_EQ_INT(system(cmd), 0);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    char *text = read_text(cfg);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(j != NULL);
    const int32_t ids[6] = {791, 6460, 374, 264, 1296, 13};
    float *a = calloc(128256, sizeof(float)), *b = calloc(128256, sizeof(float));
    last_logits(dir, ids, 6, a);
    if (j) {
        cJSON *rp = cJSON_DetachItemFromObject(j, "rope_parameters");
        cJSON *theta = cJSON_DetachItemFromObject(rp, "rope_theta");
        cJSON_AddItemToObject(j, "rope_theta", theta);
        cJSON_AddItemToObject(j, "rope_scaling", rp);
        char *s = cJSON_Print(j);
        write_text(cfg, s);
        free(s);
        last_logits(dir, ids, 6, b);
        CHECK(!memcmp(a, b, 128256 * sizeof(float)));

        /* unsupported rope type, missing key: clean errors */
        cJSON_ReplaceItemInObject(rp, "rope_type", cJSON_CreateString("yarn"));
        s = cJSON_Print(j);
        write_text(cfg, s);
        free(s);
        tela_model *m = NULL;
        CHECK(tela_model_load(dir, NULL, &m) == TELA_ERR_UNSUPPORTED);
        CHECK(strstr(tela_last_error(), "yarn") != NULL);
        cJSON_ReplaceItemInObject(rp, "rope_type", cJSON_CreateString("llama3"));
        cJSON_DeleteItemFromObject(j, "hidden_size");
        s = cJSON_Print(j);
        write_text(cfg, s);
        free(s);
        CHECK(tela_model_load(dir, NULL, &m) == TELA_ERR_NOT_FOUND);
        CHECK(strstr(tela_last_error(), "hidden_size") != NULL);
        cJSON_Delete(j);
    }
    free(a);
    free(b);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ_INT(system(cmd), 0);
}

int main(void) {
    const char *dir = tiny_tmpdir();
    if (!dir) return 1;
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    test_gguf_errors();
    unlink(path);
    rmdir(dir);
    test_shared();
    return test_finish();
}
