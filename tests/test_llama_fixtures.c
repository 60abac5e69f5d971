/* test_llama_fixtures.c: parity with transformers (float64 reference
 * forward) on the small random Llama models in tests/fixtures/llama (see
 * the README there): llama-gqa (GQA, head_dim 24 != hidden/heads, Llama-3
 * rope scaling via rope_freqs.weight, untied output) as F32, F16 and Q8_0
 * GGUF, and llama-tied (MHA, tied embeddings) as F32 and F16. Prompts of
 * 1, 7, 33 and 260 tokens.
 *   - logits at every position within 1e-4 (F32, and Q8_0 against its own
 *     dequantized reference) or 1e-3 (F16) of that row's reference range;
 *   - 24 greedy tokens identical up to the first step whose reference
 *     margin is < 0.01.
 * Q8_0 runs twice: in the exact matmul mode (dequantized weights, f32
 * activations) at 1e-4 as above, and in the fast mode, where activations
 * are rounded to Q8_0 (8 bits per 32-value block) before every quantized
 * matmul. That rounding moves each activation by up to 1/254 of its
 * block's largest value, about 0.4% relative noise per matmul, compounding
 * over 7 matmuls a layer; measured logit errors are 0.7-1.4% of the row's
 * range, so the fast mode allows 2e-2 of the range, and greedy tokens must
 * match up to the first step whose reference margin is below twice that
 * error (2 * 2e-2 * the largest reference row range of the prompt).
 * Skipped (77) if the fixtures are absent. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "tela/tela.h"
#include "test.h"

static char dir[1024];

static char *slurp(const char *name, size_t *len) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return test_read_file(path, len);
}

static int32_t *ints(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++) v[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return v;
}

static void check_model(const char *gguf, const char *ref_name, double tol, int fast_q8) {
    char path[1200], name[256];
    snprintf(name, sizeof name, "%s.json", ref_name);
    char *json = slurp(name, NULL);
    CHECK_MSG(json != NULL, "missing %s", name);
    if (!json) return;
    cJSON *ref = cJSON_Parse(json);
    free(json);
    size_t logits_len = 0;
    float *ref_logits = (float *)slurp(cJSON_GetObjectItem(ref, "logits_file")->valuestring, &logits_len);
    CHECK(ref_logits != NULL);
    int V = (int)cJSON_GetObjectItem(ref, "n_vocab")->valuedouble;

    snprintf(path, sizeof path, "%s/%s", dir, gguf);
    tela_model *m = NULL;
    CHECK_OK(tela_model_load(path, NULL, &m));
    if (!m || !ref_logits) goto done;
    CHECK_EQ_INT(tela_model_get_info(m)->n_vocab, V);

    const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
    for (int pi = 0; pi < cJSON_GetArraySize(prompts); pi++) {
        const cJSON *p = cJSON_GetArrayItem(prompts, pi);
        int n_ids, n_greedy;
        int32_t *ids = ints(cJSON_GetObjectItem(p, "ids"), &n_ids);
        int32_t *greedy = ints(cJSON_GetObjectItem(p, "greedy"), &n_greedy);
        const cJSON *gm = cJSON_GetObjectItem(p, "greedy_margin");
        size_t off = (size_t)cJSON_GetObjectItem(p, "logits_offset_bytes")->valuedouble;
        int rows = (int)cJSON_GetObjectItem(p, "logits_positions")->valuedouble;
        CHECK(rows == n_ids && off + (size_t)rows * V * 4 <= logits_len);
        if (rows != n_ids || off + (size_t)rows * V * 4 > logits_len) continue;
        const float *r = ref_logits + off / 4;

        tela_session_params sp = tela_session_default_params();
        sp.n_ctx = 512;
        sp.n_threads = 1; /* thread counts are tested in test_session */
        tela_session *s = NULL;
        CHECK_OK(tela_session_create(m, &sp, &s));
        float *got = malloc(sizeof(float) * (size_t)n_ids * V);
        CHECK_OK(tela_session_eval(s, ids, n_ids, got, 1));
        double worst = 0, max_range = 0;
        int worst_row = -1;
        for (int t = 0; t < n_ids; t++) {
            double mx = -INFINITY, mn = INFINITY, d = 0;
            for (int i = 0; i < V; i++) {
                double x = r[(size_t)t * V + i];
                if (x > mx) mx = x;
                if (x < mn) mn = x;
                double e = fabs(got[(size_t)t * V + i] - x);
                if (!(e <= d)) d = e;
            }
            if (mx - mn > max_range) max_range = mx - mn;
            if (!(d / (mx - mn) <= worst)) {
                worst = d / (mx - mn);
                worst_row = t;
            }
        }
        CHECK_MSG(worst <= tol, "%s prompt %d: logits at position %d off by %g of the range (tolerance %g)", gguf, pi,
                  worst_row, worst, tol);

        /* the last position again as a decode step whose logits stay in the
         * session (tela_session_eval_view), against the reference */
        tela_session_reset(s);
        CHECK_OK(tela_session_eval(s, ids, n_ids - 1, NULL, 0));
        const float *view = NULL, *held = NULL;
        CHECK_OK(tela_session_eval_view(s, ids + n_ids - 1, 1, &view));
        CHECK_OK(tela_session_eval_view(s, NULL, 0, &held));
        CHECK_MSG(view && held == view, "%s prompt %d: eval_view gave %p, then %p", gguf, pi, (const void *)view,
                  (const void *)held);
        if (view) {
            const double e = test_row_err(view, r + (size_t)(n_ids - 1) * V, V);
            CHECK_MSG(e <= tol, "%s prompt %d: the decode step's logits through eval_view off by %g of the range", gguf,
                      pi, e);
        }
        CHECK_EQ_INT(tela_session_eval_view(s, NULL, 0, NULL), TELA_ERR_ARG);

        tela_generate_params gp = tela_generate_default_params();
        gp.sampler.temperature = 0.0f;
        gp.max_tokens = n_greedy;
        gp.ignore_eos = 1;
        int32_t out[64];
        tela_generate_result res;
        tela_session_reset(s);
        CHECK_OK(tela_generate(s, ids, n_ids, &gp, out, 64, &res));
        int mismatch = -1;
        for (int i = 0; i < n_greedy && i < res.n_generated; i++) {
            if (out[i] != greedy[i]) {
                mismatch = i;
                break;
            }
            double min_margin = fast_q8 ? 2 * tol * max_range : 0.01;
            if (cJSON_GetArrayItem(gm, i)->valuedouble < min_margin) break;
        }
        CHECK_MSG(mismatch < 0, "%s prompt %d: greedy step %d gives %d, reference %d", gguf, pi, mismatch,
                  mismatch >= 0 ? out[mismatch] : 0, mismatch >= 0 ? greedy[mismatch] : 0);
        tela_session_free(s);
        free(got);
        free(ids);
        free(greedy);
    }
done:
    tela_model_free(m);
    free(ref_logits);
    cJSON_Delete(ref);
}

int main(void) {
    test_fixture_dir(dir, sizeof dir, "tests/fixtures/llama", "llama-gqa.json");
    check_model("llama-gqa-f32.gguf", "llama-gqa", 1e-4, 0);
    check_model("llama-gqa-f16.gguf", "llama-gqa", 1e-3, 0);
    check_model("llama-gqa-q8_0.gguf", "llama-gqa-q8_0", 2e-2, 1);
    tela_ops_set_exact_matmul(true);
    check_model("llama-gqa-q8_0.gguf", "llama-gqa-q8_0", 1e-4, 0);
    tela_ops_set_exact_matmul(false);
    check_model("llama-tied-f32.gguf", "llama-tied", 1e-4, 0);
    check_model("llama-tied-f16.gguf", "llama-tied", 1e-3, 0);
    return test_finish();
}
