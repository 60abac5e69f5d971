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
#include "test_cuda_fixture.h" /* check_fixture, on the CPU here */

static char dir[1024];

static tela_status load(const char *gguf, int world, tela_model **m) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, gguf);
    tela_model_params mp = tela_model_default_params();
    mp.device = "cpu";
    mp.tensor_parallel = world;
    return tela_model_load(path, &mp, m);
}

/* A snapshot of a prompt's cache (every rank's), restored into a new
 * session, gives the next token the logits the first session gives it. */
static void check_snapshot(const char *gguf, int world) {
    tela_model *m = NULL;
    CHECK_OK(load(gguf, world, &m));
    if (!m) return;
    const int V = tela_model_get_info(m)->n_vocab, n = 37;
    int32_t ids[37];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(test_rnd() % (uint64_t)V);
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = 64;
    tela_session *s = NULL, *s2 = NULL;
    tela_snapshot *snap = NULL;
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    CHECK_OK(tela_session_create(m, &sp, &s));
    CHECK_OK(tela_session_create(m, &sp, &s2));
    if (s && s2) {
        CHECK_OK(tela_session_eval(s, ids, n - 1, NULL, 0));
        CHECK_OK(tela_session_snapshot(s, &snap));
        if (snap) CHECK_OK(tela_session_restore(s2, snap));
        CHECK_OK(tela_session_eval(s, ids + n - 1, 1, a, 0));
        CHECK_OK(tela_session_eval(s2, ids + n - 1, 1, b, 0));
        CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)V), "%s, %d ranks: the restored session's logits differ", gguf,
                  world);
    }
    tela_snapshot_free(snap);
    tela_session_free(s);
    tela_session_free(s2);
    free(a);
    free(b);
    tela_model_free(m);
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

    fixture_device = "cpu";
    const struct {
        const char *gguf, *ref;
        int world;
        double tol;
    } runs[] = {{"llama-gqa-f32.gguf", "llama-gqa", 2, 1e-4},   {"llama-gqa-f16.gguf", "llama-gqa", 2, 1e-3},
                {"llama-tied-f32.gguf", "llama-tied", 2, 1e-4}, {"llama-tied-f32.gguf", "llama-tied", 4, 1e-4},
                {"llama-tied-f16.gguf", "llama-tied", 4, 1e-3}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        fixture_tp = runs[i].world;
        check_fixture(dir, runs[i].gguf, runs[i].ref, runs[i].tol, 0);
    }
    fixture_tp = 0;
    test_rng_seed(20261206);
    check_snapshot("llama-gqa-f32.gguf", 2);
    check_snapshot("llama-tied-f16.gguf", 4);

    char path[1200];
    snprintf(path, sizeof path, "%s/llama-gqa-f32.gguf", dir);
    batch_tp = 2;
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
