/* test_mtp_ref.h: the check of Qwen3.5's MTP block against the PyTorch
 * model the hybrid demo was trained as (tests/fixtures/demo/
 * qwen35-mtp-reference.*, written by tools/train/train.py from the same f16
 * weights), shared by test_mtp.c (CPU) and test_cuda_spec.c (GPU): at
 * several positions of a KJV excerpt, the main logits, the MTP step-1
 * logits (from the position's hidden state and the next token, the block's
 * cache filled by the evaluation) and the chained step-2 logits (from step
 * 1's output and the token after), within tol of the logit range, with the
 * reference's greedy picks (also when picked where the logits are), with a
 * KV cache of kv_type (the attention layers' and the block's). */
#ifndef TELA_TESTS_TEST_MTP_REF_H
#define TELA_TESTS_TEST_MTP_REF_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/session.h"
#include "tela/tela.h"
#include "test.h"

/* max |a - b| over n, and the range of b */
static double max_diff(const float *a, const float *b, int n, double *range) {
    double d = 0, lo = b[0], hi = b[0];
    for (int i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        lo = fmin(lo, b[i]);
        hi = fmax(hi, b[i]);
    }
    *range = hi - lo;
    return d;
}

static void check_mtp_reference(tela_model *m, const char *source_dir, double tol, tela_kv_type kv_type) {
    char path[1400];
    snprintf(path, sizeof path, "%s/tests/fixtures/demo/qwen35-mtp-reference.json", source_dir);
    char *json = test_read_file(path, NULL);
    snprintf(path, sizeof path, "%s/tests/fixtures/demo/qwen35-mtp-reference.f32", source_dir);
    size_t blob_len = 0;
    float *blob = (float *)test_read_file(path, &blob_len);
    CHECK(json && blob);
    if (!json || !blob) return;
    cJSON *root = cJSON_Parse(json);
    const cJSON *jt = cJSON_GetObjectItem(root, "tokens"), *jr = cJSON_GetObjectItem(root, "rows");
    const int V = tela_model_get_info(m)->n_vocab, n = cJSON_GetArraySize(jt), nr = cJSON_GetArraySize(jr);
    CHECK_EQ_INT(cJSON_GetObjectItem(root, "n_vocab")->valueint, V);
    CHECK_EQ_INT(blob_len, (size_t)3 * nr * V * sizeof(float));
    int32_t *tok = malloc(sizeof *tok * (size_t)n);
    for (int i = 0; i < n; i++) tok[i] = cJSON_GetArrayItem(jt, i)->valueint;
    float *got = malloc(sizeof *got * (size_t)V);
    double worst[3] = {0, 0, 0};
    for (int j = 0; j < nr; j++) {
        const int r = cJSON_GetArrayItem(jr, j)->valueint;
        CHECK(r + 2 < n);
        /* evaluated through row r: the block's cache holds rows 0 .. r-1 */
        tela_session_params ssp = tela_session_default_params();
        ssp.n_ctx = 128;
        ssp.kv_type = kv_type;
        tela_session *s = NULL;
        CHECK_OK(tela_session_create(m, &ssp, &s));
        if (!s) break;
        CHECK_OK(tela_session_eval(s, tok, r + 1, got, 0));
        const float *ref[3] = {blob + (size_t)j * V, blob + (size_t)(nr + j) * V, blob + (size_t)(2 * nr + j) * V};
        for (int step = 0; step < 3; step++) {
            int32_t pick = -1;
            if (step == 1) CHECK_OK(tela_session_mtp_draft(s, tok[r + 1], r, false, got, &pick));
            if (step == 2) CHECK_OK(tela_session_mtp_draft(s, tok[r + 2], r + 1, true, got, &pick));
            double range;
            const double d = max_diff(got, ref[step], V, &range);
            worst[step] = fmax(worst[step], d / range);
            const char *what = step == 0 ? "main" : step == 1 ? "MTP step 1" : "MTP step 2";
            CHECK_MSG(d <= tol * range, "%s logits at row %d: max |diff| %.3g of a range of %.3g", what, r, d, range);
            /* the greedy pick: the reference's (unless its top two are closer
             * than twice the bound: a tie at this precision), and the one
             * made where the logits are */
            int best = 0, ref_best = 0;
            for (int i = 1; i < V; i++) {
                if (got[i] > got[best]) best = i;
                if (ref[step][i] > ref[step][ref_best]) ref_best = i;
            }
            double second = -INFINITY;
            for (int i = 0; i < V; i++)
                if (i != ref_best) second = fmax(second, ref[step][i]);
            CHECK_MSG(best == ref_best || ref[step][ref_best] - second < 2 * tol * range,
                      "%s at row %d: greedy pick %d, the reference's %d", what, r, best, ref_best);
            if (step) CHECK_EQ_INT(pick, best);
        }
        tela_session_free(s);
    }
    printf("reference (PyTorch, %d rows): max |diff| / range: main %.2g, MTP step 1 %.2g, step 2 %.2g\n", nr,
           worst[0], worst[1], worst[2]);
    cJSON_Delete(root);
    free(tok);
    free(got);
    free(json);
    free(blob);
}

#endif
