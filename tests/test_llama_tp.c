/* test_llama_tp.c: tensor parallelism (issue 16) on the Llama fixtures of
 * tests/fixtures/llama, the ranks run one after another on the CPU:
 *   - each rank's slices of the layers and its own KV cache give the
 *     logits of transformers' float64 reference (the fixture JSON) within
 *     the tolerance of test_llama_fixtures (1e-4 of each row's range for
 *     F32, 1e-3 for F16), at every position of prompts of 1 to 260 tokens,
 *     for 2 ranks (llama-gqa: 2 KV heads, 4 query heads, FFN 96) and 2 and
 *     4 ranks (llama-tied: 4 heads);
 *   - greedy decoding gives the reference tokens up to the first step
 *     whose reference margin is < 0.01;
 *   - a snapshot (every rank's cache) restored into a new session goes on
 *     with the logits of the session it was taken from;
 *   - batched steps over a paged cache (test_batch.h: prompt chunks and
 *     decodes of several sequences, forks that copy KV rows, a rewind)
 *     give each sequence a session's logits bit for bit, every rank's
 *     cache taking the same block table;
 *   - the refusals: ranks that do not divide the KV heads, a column split
 *     inside a Q8_0 block (wo of llama-gqa: 48 columns a rank), an
 *     architecture without it (Qwen3.5), and the naive oracle.
 * Skipped (77) if the fixtures are absent. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h" /* the naive oracle */
#include "tela/tela.h"
#include "test.h"
#include "test_batch.h"

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

static tela_status load(const char *gguf, int world, tela_model **m) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, gguf);
    tela_model_params mp = tela_model_default_params();
    mp.device = "cpu";
    mp.tensor_parallel = world;
    return tela_model_load(path, &mp, m);
}

/* The largest |got - ref| over a row, as a fraction of the row's range,
 * worst over n rows of V. */
static double worst_error(const float *got, const float *ref, int n, int V, double *max_range) {
    double worst = 0;
    for (int t = 0; t < n; t++) {
        double mx = -INFINITY, mn = INFINITY, d = 0;
        for (int i = 0; i < V; i++) {
            const double x = ref[(size_t)t * V + i];
            if (x > mx) mx = x;
            if (x < mn) mn = x;
            const double e = fabs(got[(size_t)t * V + i] - x);
            if (!(e <= d)) d = e;
        }
        if (max_range && mx - mn > *max_range) *max_range = mx - mn;
        if (!(d / (mx - mn) <= worst)) worst = d / (mx - mn);
    }
    return worst;
}

static void check_reference(const char *gguf, const char *ref_name, int world, double tol) {
    char name[256];
    snprintf(name, sizeof name, "%s.json", ref_name);
    char *json = slurp(name, NULL);
    CHECK_MSG(json != NULL, "missing %s", name);
    if (!json) return;
    cJSON *ref = cJSON_Parse(json);
    free(json);
    size_t logits_len = 0;
    float *ref_logits = (float *)slurp(cJSON_GetObjectItem(ref, "logits_file")->valuestring, &logits_len);
    CHECK(ref_logits != NULL);
    const int V = (int)cJSON_GetObjectItem(ref, "n_vocab")->valuedouble;
    tela_model *m = NULL;
    CHECK_OK(load(gguf, world, &m));
    if (!m || !ref_logits) goto done;

    const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
    for (int pi = 0; pi < cJSON_GetArraySize(prompts); pi++) {
        const cJSON *p = cJSON_GetArrayItem(prompts, pi);
        int n_ids, n_greedy;
        int32_t *ids = ints(cJSON_GetObjectItem(p, "ids"), &n_ids);
        int32_t *greedy = ints(cJSON_GetObjectItem(p, "greedy"), &n_greedy);
        const cJSON *gm = cJSON_GetObjectItem(p, "greedy_margin");
        const size_t off = (size_t)cJSON_GetObjectItem(p, "logits_offset_bytes")->valuedouble;
        const float *r = ref_logits + off / 4;
        CHECK(off + (size_t)n_ids * V * 4 <= logits_len);

        tela_session_params sp = tela_session_default_params();
        sp.n_ctx = 512;
        sp.n_threads = 1;
        tela_session *s = NULL;
        CHECK_OK(tela_session_create(m, &sp, &s));
        if (!s) break;
        float *got = malloc(sizeof(float) * (size_t)n_ids * V);
        CHECK_OK(tela_session_eval(s, ids, n_ids, got, 1));
        const double worst = worst_error(got, r, n_ids, V, NULL);
        CHECK_MSG(worst <= tol, "%s, %d ranks, prompt %d: logits off by %g of the range (tolerance %g)", gguf, world,
                  pi, worst, tol);

        /* a snapshot of the prompt's cache, restored into a new session,
         * gives the next token the logits this session gives it */
        if (n_ids >= 2) {
            tela_session *s2 = NULL;
            tela_snapshot *snap = NULL;
            float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
            tela_session_reset(s);
            CHECK_OK(tela_session_eval(s, ids, n_ids - 1, NULL, 0));
            CHECK_OK(tela_session_snapshot(s, &snap));
            CHECK_OK(tela_session_create(m, &sp, &s2));
            if (snap && s2) {
                CHECK_OK(tela_session_restore(s2, snap));
                CHECK_OK(tela_session_eval(s, ids + n_ids - 1, 1, a, 0));
                CHECK_OK(tela_session_eval(s2, ids + n_ids - 1, 1, b, 0));
                CHECK_MSG(!memcmp(a, b, sizeof(float) * V), "%s, %d ranks, prompt %d: restored session differs",
                          gguf, world, pi);
                /* and both are the reference's last row */
                CHECK(worst_error(b, r + (size_t)(n_ids - 1) * V, 1, V, NULL) <= tol);
            }
            tela_snapshot_free(snap);
            tela_session_free(s2);
            free(a);
            free(b);
        }

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
            if (cJSON_GetArrayItem(gm, i)->valuedouble < 0.01) break;
        }
        CHECK_MSG(mismatch < 0, "%s, %d ranks, prompt %d: greedy step %d gives %d, reference %d", gguf, world, pi,
                  mismatch, mismatch >= 0 ? out[mismatch] : 0, mismatch >= 0 ? greedy[mismatch] : 0);
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

/* Loading fails, with a message that contains `what`. */
static void check_refused(const char *gguf, int world, const char *what) {
    tela_model *m = NULL;
    const tela_status st = load(gguf, world, &m);
    CHECK_MSG(st != TELA_OK && !m, "%s with %d ranks loaded", gguf, world);
    CHECK_MSG(strstr(tela_last_error(), what) != NULL, "%s with %d ranks: '%s' does not mention '%s'", gguf, world,
              tela_last_error(), what);
    tela_model_free(m);
}

int main(void) {
    const char *src = getenv("TELA_SOURCE_DIR");
    if (!src) test_skip("TELA_SOURCE_DIR is not set");
    snprintf(dir, sizeof dir, "%s/tests/fixtures/llama", src);
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/llama-gqa.json", dir);
    FILE *f = fopen(probe, "rb");
    if (!f) test_skip("no tests/fixtures/llama");
    fclose(f);

    check_reference("llama-gqa-f32.gguf", "llama-gqa", 2, 1e-4);
    check_reference("llama-gqa-f16.gguf", "llama-gqa", 2, 1e-3);
    check_reference("llama-tied-f32.gguf", "llama-tied", 2, 1e-4);
    check_reference("llama-tied-f32.gguf", "llama-tied", 4, 1e-4);
    check_reference("llama-tied-f16.gguf", "llama-tied", 4, 1e-3);

    char path[1200];
    snprintf(path, sizeof path, "%s/llama-gqa-f32.gguf", dir);
    batch_tp = 2;
    test_rng_seed(20261206);
    for (kv_f16 = 0; kv_f16 < 2; kv_f16++) check_model(path);

    check_refused("llama-gqa-f32.gguf", 3, "KV heads");
    check_refused("llama-gqa-q8_0.gguf", 2, "attn_output");
    tela_model *m = NULL;
    CHECK_OK(load("llama-gqa-f32.gguf", 2, &m));
    if (m) {
        const int32_t ids[3] = {1, 2, 3};
        float *logits = malloc(sizeof(float) * 3 * 512);
        CHECK(m->arch->forward_naive(m, ids, 3, logits) != TELA_OK);
        CHECK(strstr(tela_last_error(), "tensor parallelism") != NULL);
        free(logits);
        tela_model_free(m);
    }
    snprintf(dir, sizeof dir, "%s/tests/fixtures/qwen35", src);
    check_refused("qwen35-sym-f32.gguf", 2, "not built for qwen35");
    return test_finish();
}
