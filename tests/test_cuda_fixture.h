/* test_cuda_fixture.h: what the CUDA end-to-end tests (test_cuda_llama.c,
 * test_cuda_qwen35.c) share: loading a model on a device, the error of a
 * logits row relative to the range of the reference row, and the parity
 * checks against the transformers references of tests/fixtures (every
 * position, then greedy tokens picked on the GPU) and of ../shared's d1
 * models (last positions). Static functions: included by one test each. */
#ifndef TELA_TEST_CUDA_FIXTURE_H
#define TELA_TEST_CUDA_FIXTURE_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tela/tela.h"
#include "test.h"

static int32_t *ints(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++) v[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return v;
}

static tela_model *load_on(const char *path, const char *device) {
    tela_model_params mp = tela_model_default_params();
    mp.device = device;
    tela_model *m = NULL;
    tela_status s = tela_model_load(path, &mp, &m);
    CHECK_MSG(s == TELA_OK, "loading %s on %s: %s", path, device, tela_last_error());
    return m;
}

/* The largest |a - b| over a row relative to the range of b. */
static double row_err(const float *a, const float *b, int n) {
    double mx = -INFINITY, mn = INFINITY, d = 0;
    for (int i = 0; i < n; i++) {
        if (b[i] > mx) mx = b[i];
        if (b[i] < mn) mn = b[i];
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = isfinite(e) ? e : INFINITY;
    }
    return d / (mx - mn > 0 ? mx - mn : 1);
}

static void check_fixture(const char *dir, const char *gguf, const char *ref_name, double tol, int fast) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.json", dir, ref_name);
    char *json = test_read_file(path, NULL);
    CHECK_MSG(json != NULL, "missing %s", path);
    if (!json) return;
    cJSON *ref = cJSON_Parse(json);
    free(json);
    size_t logits_len = 0;
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetObjectItem(ref, "logits_file")->valuestring);
    float *ref_logits = (float *)test_read_file(path, &logits_len);
    int V = (int)cJSON_GetObjectItem(ref, "n_vocab")->valuedouble;
    snprintf(path, sizeof path, "%s/%s", dir, gguf);
    tela_model *m = load_on(path, "cuda");
    if (!m || !ref_logits) goto done;
    const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
    for (int pi = 0; pi < cJSON_GetArraySize(prompts); pi++) {
        const cJSON *p = cJSON_GetArrayItem(prompts, pi);
        int n_ids, n_greedy;
        int32_t *ids = ints(cJSON_GetObjectItem(p, "ids"), &n_ids);
        int32_t *greedy = ints(cJSON_GetObjectItem(p, "greedy"), &n_greedy);
        const cJSON *gm = cJSON_GetObjectItem(p, "greedy_margin");
        size_t off = (size_t)cJSON_GetObjectItem(p, "logits_offset_bytes")->valuedouble;
        const float *r = ref_logits + off / 4;
        tela_session_params sp = tela_session_default_params();
        sp.n_ctx = 512;
        tela_session *s = NULL;
        CHECK_OK(tela_session_create(m, &sp, &s));
        if (!s) continue;
        float *got = malloc(sizeof(float) * (size_t)n_ids * V);
        CHECK_OK(tela_session_eval(s, ids, n_ids, got, 1));
        double worst = 0, max_range = 0;
        int worst_row = -1;
        for (int t = 0; t < n_ids; t++) {
            double e = row_err(got + (size_t)t * V, r + (size_t)t * V, V);
            double mx = -INFINITY, mn = INFINITY;
            for (int i = 0; i < V; i++) {
                if (r[(size_t)t * V + i] > mx) mx = r[(size_t)t * V + i];
                if (r[(size_t)t * V + i] < mn) mn = r[(size_t)t * V + i];
            }
            if (mx - mn > max_range) max_range = mx - mn;
            if (!(e <= worst)) worst = e, worst_row = t;
        }
        CHECK_MSG(worst <= tol, "cuda %s (%s) prompt %d: logits at position %d off by %g of the range (bound %g)", gguf,
                  fast ? "fast" : "exact", pi, worst_row, worst, tol);
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
            if (cJSON_GetArrayItem(gm, i)->valuedouble < (fast ? 2 * tol * max_range : 0.01)) break;
        }
        CHECK_MSG(mismatch < 0, "cuda %s prompt %d: greedy step %d gives %d, reference %d", gguf, pi, mismatch,
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

/* A d1 model from ../shared (name: "llama-d1", "qwen35-d1"): the
 * last-position logits of each prompt of refs-d1.json[name]. */
static void check_shared(const char *name, double tol) {
    const char *sh = getenv("TELA_SHARED_DIR");
    if (!sh) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/reference/fixtures/refs-d1.json", sh);
    char *json = test_read_file(path, NULL);
    if (!json) return;
    cJSON *refs = cJSON_Parse(json);
    free(json);
    snprintf(path, sizeof path, "%s/reference/fixtures/%s.logits.f32", sh, name);
    size_t len = 0;
    float *all = (float *)test_read_file(path, &len);
    snprintf(path, sizeof path, "%s/reference/fixtures/%s.gguf", sh, name);
    tela_model *m = load_on(path, "cuda");
    const cJSON *prompts = cJSON_GetObjectItem(cJSON_GetObjectItem(refs, name), "prompts");
    for (int pi = 0; m && all && pi < cJSON_GetArraySize(prompts); pi++) {
        const cJSON *p = cJSON_GetArrayItem(prompts, pi);
        int n_ids;
        int32_t *ids = ints(cJSON_GetObjectItem(p, "ids"), &n_ids);
        const int V = (int)cJSON_GetObjectItem(p, "vocab")->valuedouble;
        const size_t off = (size_t)cJSON_GetObjectItem(p, "last_logits_offset_bytes")->valuedouble;
        tela_session *s = NULL;
        CHECK_OK(tela_session_create(m, NULL, &s));
        float *got = malloc(sizeof(float) * (size_t)V);
        CHECK_OK(tela_session_eval(s, ids, n_ids, got, 0));
        if (off + (size_t)V * 4 <= len) {
            double e = row_err(got, all + off / 4, V);
            CHECK_MSG(e <= tol, "cuda %s prompt %d (%d tokens): last logits off by %g of the range (bound %g)", name,
                      pi, n_ids, e, tol);
        }
        tela_session_free(s);
        free(got);
        free(ids);
    }
    tela_model_free(m);
    free(all);
    cJSON_Delete(refs);
}

#endif
