/* test_cuda_fixture.h: what the CUDA end-to-end tests (test_cuda_llama.c,
 * test_cuda_qwen35.c) and test_tp.c (on the CPU) share: loading a model on a device, the error of a
 * logits row relative to the range of the reference row, and the parity
 * checks against the transformers references of tests/fixtures (every
 * position, then greedy tokens picked on the GPU) and of ../shared's d1
 * models (last positions); random-weight files made by tela-mkmodel and
 * tela quantize; cached decode against prefill, graphs against eager
 * launches, snapshots. Static inline functions (a test uses some of
 * them): included by one test each. */
#ifndef TELA_TEST_CUDA_FIXTURE_H
#define TELA_TEST_CUDA_FIXTURE_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tela/tela.h"
#include "test.h"

static inline int32_t *ints(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++) v[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return v;
}

static int fixture_tp;                        /* the models' tensor_parallel (0: none) */
static const char *fixture_device = "cuda";   /* where check_fixture runs them */

static inline tela_model *load_on(const char *path, const char *device) {
    tela_model_params mp = tela_model_default_params();
    mp.device = device;
    mp.tensor_parallel = fixture_tp;
    tela_model *m = NULL;
    tela_status s = tela_model_load(path, &mp, &m);
    CHECK_MSG(s == TELA_OK, "loading %s on %s: %s", path, device, tela_last_error());
    return m;
}


/* Tensor parallelism with an exec a rank (the device list `many`, e.g.
 * "cuda:0,cuda:0" or "cpu,cpu": each rank its own exec, activations, KV
 * cache and states, the sums all-reduced through copies and adds on rank
 * 0) against the same world of ranks taking turns on one exec of `one`:
 * a 40-token prompt's logits at every position and 8 decode steps (on a
 * GPU captured and replayed as graphs from the third), bit for bit: the
 * all-reduce adds the ranks' sums in rank order, as the turns accumulate
 * them. */
static inline void check_rank_execs(const char *dir, const char *gguf, int world, const char *one, const char *many) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, gguf);
    tela_model *m1 = NULL, *mn = NULL;
    tela_model_params mp = tela_model_default_params();
    mp.device = one;
    mp.tensor_parallel = world;
    CHECK_OK(tela_model_load(path, &mp, &m1));
    mp.device = many;
    CHECK_OK(tela_model_load(path, &mp, &mn));
    tela_session *a = NULL, *b = NULL;
    float *la = NULL, *lb = NULL;
    if (!m1 || !mn) goto done;
    CHECK_MSG(strstr(tela_model_get_info(mn)->device, "ranks") != NULL, "%s on %s: device '%s'", gguf, many,
              tela_model_get_info(mn)->device);
    const int V = tela_model_get_info(m1)->n_vocab, n = 40;
    int32_t ids[40];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919 + 13) % V);
    CHECK_OK(tela_session_create(m1, NULL, &a));
    CHECK_OK(tela_session_create(mn, NULL, &b));
    la = malloc(sizeof(float) * (size_t)n * V);
    lb = malloc(sizeof(float) * (size_t)n * V);
    if (!a || !b || !la || !lb) goto done;
    CHECK_OK(tela_session_eval(a, ids, n, la, 1));
    CHECK_OK(tela_session_eval(b, ids, n, lb, 1));
    const double worst = test_rows_err(lb, la, n, V);
    CHECK_MSG(!memcmp(la, lb, sizeof(float) * (size_t)n * V),
              "%s on %s: prompt logits differ from the ranks on one exec (by %g of the range)", gguf, many, worst);
    for (int k = 0; k < 8; k++) {
        CHECK_OK(tela_session_eval(a, ids + k, 1, la, 0));
        CHECK_OK(tela_session_eval(b, ids + k, 1, lb, 0));
        CHECK_MSG(!memcmp(la, lb, sizeof(float) * (size_t)V),
                  "%s on %s: decode step %d differs from the ranks on one exec (by %g of the range)", gguf, many, k,
                  test_row_err(lb, la, V));
    }
done:
    free(la);
    free(lb);
    tela_session_free(a);
    tela_session_free(b);
    tela_model_free(m1);
    tela_model_free(mn);
}

static inline void check_fixture(const char *dir, const char *gguf, const char *ref_name, double tol, int fast) {
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
    tela_model *m = load_on(path, fixture_device);
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
            double e = test_row_err(got + (size_t)t * V, r + (size_t)t * V, V);
            double mx = -INFINITY, mn = INFINITY;
            for (int i = 0; i < V; i++) {
                if (r[(size_t)t * V + i] > mx) mx = r[(size_t)t * V + i];
                if (r[(size_t)t * V + i] < mn) mn = r[(size_t)t * V + i];
            }
            if (mx - mn > max_range) max_range = mx - mn;
            if (!(e <= worst)) worst = e, worst_row = t;
        }
        CHECK_MSG(worst <= tol, "%s %s (%s, %d ranks) prompt %d: logits at position %d off by %g of the range (bound %g)",
                  fixture_device, gguf, fast ? "fast" : "exact", fixture_tp, pi, worst_row, worst, tol);
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
        CHECK_MSG(mismatch < 0, "%s %s (%d ranks) prompt %d: greedy step %d gives %d, reference %d", fixture_device, gguf,
                  fixture_tp, pi, mismatch, mismatch >= 0 ? out[mismatch] : 0, mismatch >= 0 ? greedy[mismatch] : 0);
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
static inline void check_shared(const char *name, double tol) {
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
    if (access(path, R_OK) != 0) { /* a copy of ../shared with part of it (a device run's carry) */
        printf("note: no %s.gguf beside refs-d1.json: its checks skipped\n", name);
        cJSON_Delete(refs);
        free(all);
        return;
    }
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
            double e = test_row_err(got, all + off / 4, V);
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


/* Logits of every position of a prompt evaluated in one call. */
static inline float *eval_all(tela_model *m, const int32_t *ids, int n) {
    const int V = tela_model_get_info(m)->n_vocab;
    float *v = malloc(sizeof(float) * (size_t)n * V);
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, NULL, &s));
    if (s) CHECK_OK(tela_session_eval(s, ids, n, v, 1));
    tela_session_free(s);
    return v;
}

static inline int run(const char *cmd) {
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "command failed (%d): %s", rc, cmd);
    return rc;
}

/* A random-weight model file of a tela-mkmodel preset in a weight type
 * (f32, f16, bf16 from tela-mkmodel; the rest by 'tela quantize' of the
 * f32 file), made once in dir as STEM-TYPE.gguf; its path into path.
 * Returns 0 when it is there; nonzero without TELA_BIN or on a failure. */
static inline int typed_model(const char *dir, const char *preset, const char *stem, const char *type, char *path,
                       size_t cap) {
    const char *bin = getenv("TELA_BIN");
    char mk[1200], cmd[4096], base[1300];
    if (!test_tool_path(mk, sizeof mk, "tela-mkmodel")) return 1;
    const bool plain = type[0] == 'f' || type[0] == 'b';
    snprintf(base, sizeof base, "%s/%s-%s.gguf", dir, stem, plain ? type : "f32");
    if (access(base, R_OK) != 0) {
        snprintf(cmd, sizeof cmd, "'%s' %s -o '%s' --type %s -q", mk, preset, base, plain ? type : "f32");
        if (run(cmd)) return 1;
    }
    snprintf(path, cap, "%s/%s-%s.gguf", dir, stem, type);
    if (plain || access(path, R_OK) == 0) return 0;
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' %s > /dev/null 2>&1", bin, base, path, type);
    return run(cmd);
}

/* Token-by-token decode of ids[0..n) on m against full (the logits of one
 * prefill of them): every step within tol of the range; a session with
 * graphs and one without (TELA_CUDA_GRAPHS=0) give the same bits; a
 * snapshot after step snap_at, five more steps, a restore and the same
 * five steps again give the same bits. */
static inline void check_decode_steps(tela_model *m, const int32_t *ids, int n, const float *full, int snap_at, double tol,
                               const char *label) {
    const int V = tela_model_get_info(m)->n_vocab;
    tela_session *a = NULL, *b = NULL;
    CHECK_OK(tela_session_create(m, NULL, &a));
    setenv("TELA_CUDA_GRAPHS", "0", 1);
    CHECK_OK(tela_session_create(m, NULL, &b));
    unsetenv("TELA_CUDA_GRAPHS");
    float *one = malloc(sizeof(float) * (size_t)V), *eager = malloc(sizeof(float) * (size_t)V);
    float *after_snap = malloc(sizeof(float) * (size_t)V * 5);
    double worst = 0;
    int graph_diff = 0;
    tela_snapshot *snap = NULL;
    for (int t = 0; a && b && t < n; t++) {
        CHECK_OK(tela_session_eval(a, ids + t, 1, one, 0));
        CHECK_OK(tela_session_eval(b, ids + t, 1, eager, 0));
        const double e = test_row_err(one, full + (size_t)t * V, V);
        if (!(e <= worst)) worst = e;
        graph_diff += memcmp(one, eager, sizeof(float) * (size_t)V) != 0;
        if (t == snap_at) CHECK_OK(tela_session_snapshot(a, &snap));
        if (t > snap_at && t <= snap_at + 5)
            memcpy(after_snap + (size_t)(t - snap_at - 1) * V, one, sizeof(float) * (size_t)V);
    }
    printf("%s: decode vs prefill %.2e of the range\n", label, worst);
    CHECK_MSG(worst <= tol, "%s: token-by-token decode vs one prefill: %g of the range", label, worst);
    CHECK_MSG(graph_diff == 0, "%s: %d decode steps differ between graph replay and eager launches", label,
              graph_diff);
    if (snap) {
        CHECK_OK(tela_session_restore(a, snap));
        int diff = 0;
        for (int t = snap_at + 1; t <= snap_at + 5 && t < n; t++) {
            CHECK_OK(tela_session_eval(a, ids + t, 1, one, 0));
            diff += memcmp(one, after_snap + (size_t)(t - snap_at - 1) * V, sizeof(float) * (size_t)V) != 0;
        }
        CHECK_MSG(diff == 0, "%s: %d steps after a restored snapshot differ", label, diff);
        tela_snapshot_free(snap);
    }
    free(after_snap);
    free(one);
    free(eager);
    tela_session_free(a);
    tela_session_free(b);
}

#endif
