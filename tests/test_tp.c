/* test_tp.c: tensor parallelism (issue 16) on the Llama fixtures of
 * tests/fixtures/llama and the Qwen3.5 fixtures of tests/fixtures/qwen35,
 * on the CPU, the ranks taking turns on one exec unless said:
 *   - each rank's slices of the layers, of the token embedding and of the
 *     head (both by vocabulary), and its own KV cache (and, for
 *     Qwen3.5, its DeltaNet heads' conv and recurrent states) give the
 *     logits of transformers' float64 reference (the fixture JSON) within
 *     the tolerance of test_llama_fixtures and test_qwen35 (1e-4 of each
 *     row's range for F32, 1e-3 for F16), at every position of prompts of
 *     1 to 260 tokens, for 2 ranks (llama-gqa: 2 KV heads, 4 query heads,
 *     FFN 96), 4 ranks of llama-gqa (each KV head copied to two ranks),
 *     2 and 4 ranks (llama-tied: 4 heads), and 2 ranks of qwen35-sym (2 key
 *     / 2 value heads; its one KV head copied), qwen35-asym (2 key / 4
 *     value heads in llama.cpp's tiled order, so a rank's value heads are
 *     two runs of rows) and qwen35-wide (4 key / 8 value heads: two key
 *     heads a rank, where the tiled order matters inside the rank);
 *   - greedy decoding gives the reference tokens up to the first step
 *     whose reference margin is < 0.01;
 *   - a snapshot (every rank's cache) restored into a new session goes on
 *     with the logits of the session it was taken from;
 *   - batched steps over a paged cache (test_batch.h: prompt chunks and
 *     decodes of several sequences, forks that copy KV rows and state
 *     slots, a speculative verification rewound through kept states)
 *     give each sequence a session's logits bit for bit, every rank's
 *     cache taking the same block table;
 *   - a shape the fixtures lack (tela-mkmodel's qwen3.5-tiny with 4 key / 8
 *     value heads: 2 key heads a rank) against the model whole;
 *   - a rank per exec ("cpu,cpu": each rank its own exec, activations,
 *     KV cache and states, the sums all-reduced through copies): the
 *     fixtures against transformers (Llama at 2 and 4 ranks, Qwen3.5 at
 *     2), the bits of the ranks taking turns on one exec (prompts and
 *     decode steps), snapshots, and test_batch.h's batched steps with
 *     kept states and rewinds;
 *   - the refusals: ranks that do not divide the KV heads, a column split
 *     inside a Q8_0 block (wo of llama-gqa: 48 columns a rank), a device
 *     list of another length than --tensor-parallel or with an empty
 *     entry, and the naive oracle.
 *     (Qwen3.5's MTP block split: test_mtp.c.)
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
static const char *tp_device = "cpu"; /* "cpu,cpu": a rank per exec */

static tela_status load(const char *gguf, int world, tela_model **m) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, gguf);
    tela_model_params mp = tela_model_default_params();
    mp.device = tp_device;
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

/* Every position of a 100-token prompt (past a 64-token DeltaNet chunk)
 * and 12 decode steps of the model at path split over `world` ranks
 * against the same model whole (whose path test_qwen35 checks against
 * transformers): within 1e-4 of each row's range (the ranks' partial sums
 * add in another order) and the same greedy tokens. For a shape the
 * fixtures lack: several key heads a rank, whose value heads in the GGUF's
 * tiled order are runs of rows, each using key head j % (its key heads). */
static void check_against_whole(const char *path, int world) {
    tela_model *whole = NULL, *split = NULL;
    tela_model_params mp = tela_model_default_params();
    mp.device = "cpu";
    CHECK_OK(tela_model_load(path, &mp, &whole));
    mp.tensor_parallel = world;
    CHECK_OK(tela_model_load(path, &mp, &split));
    if (!whole || !split) goto done;
    const int V = tela_model_get_info(whole)->n_vocab, n = 100, steps = 12;
    int32_t ids[100];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(test_rnd() % (uint64_t)V);
    tela_session *a = NULL, *b = NULL;
    CHECK_OK(tela_session_create(whole, NULL, &a));
    CHECK_OK(tela_session_create(split, NULL, &b));
    float *la = malloc(sizeof(float) * (size_t)n * V), *lb = malloc(sizeof(float) * (size_t)n * V);
    if (a && b) {
        CHECK_OK(tela_session_eval(a, ids, n, la, 1));
        CHECK_OK(tela_session_eval(b, ids, n, lb, 1));
        const double worst = test_rows_err(lb, la, n, V);
        CHECK_MSG(worst <= 1e-4, "%s, %d ranks: prompt logits off by %g of the range", path, world, worst);
        int32_t ta = 0, tb = 0;
        for (int i = 0; i < V; i++) ta = la[(size_t)(n - 1) * V + i] > la[(size_t)(n - 1) * V + ta] ? i : ta;
        tb = ta;
        for (int k = 0; k < steps; k++) { /* the whole model's greedy tokens, fed to both */
            CHECK_OK(tela_session_eval(a, &ta, 1, la, 0));
            CHECK_OK(tela_session_eval(b, &tb, 1, lb, 0));
            const double e = test_row_err(lb, la, V);
            CHECK_MSG(e <= 1e-4, "%s, %d ranks: decode step %d off by %g of the range", path, world, k, e);
            int32_t pa = 0, pb = 0;
            for (int i = 0; i < V; i++) {
                pa = la[i] > la[pa] ? i : pa;
                pb = lb[i] > lb[pb] ? i : pb;
            }
            CHECK_MSG(pa == pb, "%s, %d ranks: decode step %d picks %d, whole %d", path, world, k, pb, pa);
            ta = tb = pa;
        }
    }
    free(la);
    free(lb);
    tela_session_free(a);
    tela_session_free(b);
done:
    tela_model_free(whole);
    tela_model_free(split);
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
    test_fixture_dir(dir, sizeof dir, "tests/fixtures/llama", "llama-gqa.json");
    const char *src = getenv("TELA_SOURCE_DIR");
    char probe[1200];

    fixture_device = "cpu";
    const struct {
        const char *gguf, *ref;
        int world;
        double tol;
    } runs[] = {{"llama-gqa-f32.gguf", "llama-gqa", 2, 1e-4},   {"llama-gqa-f16.gguf", "llama-gqa", 2, 1e-3},
                {"llama-tied-f32.gguf", "llama-tied", 2, 1e-4}, {"llama-tied-f32.gguf", "llama-tied", 4, 1e-4},
                {"llama-tied-f16.gguf", "llama-tied", 4, 1e-3}, {"llama-gqa-f32.gguf", "llama-gqa", 4, 1e-4}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) { /* (llama-gqa at 4: each KV head on two ranks) */
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

    /* a rank per exec: the fixtures against transformers, the bits of the
     * ranks on one exec, snapshots and batched steps */
    fixture_device = "cpu,cpu";
    fixture_tp = 2;
    check_fixture(dir, "llama-gqa-f32.gguf", "llama-gqa", 1e-4, 0);
    check_fixture(dir, "llama-tied-f16.gguf", "llama-tied", 1e-3, 0);
    fixture_device = "cpu,cpu,cpu,cpu";
    fixture_tp = 4;
    check_fixture(dir, "llama-gqa-f32.gguf", "llama-gqa", 1e-4, 0);
    fixture_device = "cpu";
    fixture_tp = 0;
    check_rank_execs(dir, "llama-gqa-f32.gguf", 2, "cpu", "cpu,cpu");
    check_rank_execs(dir, "llama-tied-f16.gguf", 4, "cpu", "cpu,cpu,cpu,cpu");
    check_rank_execs(dir, "llama-tied-f32.gguf", 2, "cpu", "cpu,cpu");
    tp_device = "cpu,cpu";
    check_snapshot("llama-gqa-f32.gguf", 2);
    tp_device = "cpu";
    batch_device = "cpu,cpu";
    kv_f16 = 0;
    check_model(path);
    batch_device = NULL;

    tp_device = "cpu,cpu";
    check_refused("llama-gqa-f32.gguf", 4, "names 2 devices");
    tp_device = "cpu,,cpu";
    check_refused("llama-gqa-f32.gguf", 0, "must name each device");
    tp_device = "cpu";
    check_refused("llama-gqa-f32.gguf", 3, "KV heads");
    check_refused("llama-gqa-f32.gguf", 8, "4 query heads");
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
    snprintf(probe, sizeof probe, "%s/qwen35-asym.json", dir);
    if (access(probe, R_OK) == 0) {
        const struct {
            const char *gguf, *ref;
            double tol;
        } q[] = {{"qwen35-sym-f32.gguf", "qwen35-sym", 1e-4}, {"qwen35-sym-f16.gguf", "qwen35-sym", 1e-3},
                 {"qwen35-asym-f32.gguf", "qwen35-asym", 1e-4}, {"qwen35-asym-f16.gguf", "qwen35-asym", 1e-3},
                 /* 4 key / 8 value heads: two key heads a rank, the tiled
                  * value order inside each rank, against transformers */
                 {"qwen35-wide-f32.gguf", "qwen35-wide", 1e-4}};
        fixture_tp = 2;
        for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) check_fixture(dir, q[i].gguf, q[i].ref, q[i].tol, 0);
        fixture_tp = 0;
        check_snapshot("qwen35-asym-f32.gguf", 2);
        check_snapshot("qwen35-sym-f16.gguf", 2);
        snprintf(path, sizeof path, "%s/qwen35-asym-f32.gguf", dir);
        for (kv_f16 = 0; kv_f16 < 2; kv_f16++) check_model(path);
        check_refused("qwen35-sym-f32.gguf", 4, "KV heads");
        /* a rank per exec: the fixtures against transformers, the bits of
         * the ranks on one exec, snapshots, batched steps with kept states */
        fixture_device = "cpu,cpu";
        fixture_tp = 2;
        check_fixture(dir, "qwen35-asym-f32.gguf", "qwen35-asym", 1e-4, 0);
        check_fixture(dir, "qwen35-wide-f32.gguf", "qwen35-wide", 1e-4, 0);
        check_fixture(dir, "qwen35-sym-f16.gguf", "qwen35-sym", 1e-3, 0);
        fixture_device = "cpu";
        fixture_tp = 0;
        check_rank_execs(dir, "qwen35-asym-f32.gguf", 2, "cpu", "cpu,cpu");
        check_rank_execs(dir, "qwen35-wide-f32.gguf", 2, "cpu", "cpu,cpu");
        tp_device = "cpu,cpu";
        check_snapshot("qwen35-asym-f32.gguf", 2);
        tp_device = "cpu";
        batch_device = "cpu,cpu";
        kv_f16 = 0;
        check_model(path);
        batch_device = NULL;
    }
    batch_tp = 0;
    /* several key heads a rank: qwen3.5-tiny with 4 key / 8 value heads
     * (tela-mkmodel, beside the tela binary), 2 ranks */
    char tmp[] = "/tmp/tela-tp-XXXXXX", mk[1200], cmd[3000];
    if (test_tool_path(mk, sizeof mk, "tela-mkmodel") && mkdtemp(tmp)) {
        snprintf(path, sizeof path, "%s/q48.gguf", tmp);
        snprintf(cmd, sizeof cmd, "'%s' qwen3.5-tiny --gdn-heads 4,8 --type f32 -o '%s' -q", mk, path);
        CHECK_MSG(system(cmd) == 0, "failed: %s", cmd);
        check_against_whole(path, 2);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        CHECK(system(cmd) == 0);
    } else {
        printf("note: no TELA_BIN: the 4-key-head split skipped\n");
    }
    /* (the MTP block split, on one exec and an exec a rank: test_mtp.c) */
    return test_finish();
}
