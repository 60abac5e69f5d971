/* test_batch.h: batched forward passes over several sequences (what the
 * engine runs) against each sequence run alone in a session, on a device
 * (test_batch.c: the CPU, bit for bit; test_cuda_batch.c: the GPU's paged
 * KV cache, within a tolerance).
 *
 * Three sequences with prompts of different lengths are stepped together
 * through a paged KV cache whose blocks are handed out in a shuffled order:
 * prompt chunks (cut at multiples of 64 tokens, as the engine cuts them)
 * and decode tokens mixed in the same steps, each sequence in its own state
 * slot. Every logits row a sequence gets must be bit-identical to what a
 * session computes when fed the same runs of tokens. Then a
 * fork: a sequence's state slot is saved and loaded into another slot, its
 * KV rows copied into new blocks, and both continue with the same tokens in
 * one step: identical logits, equal to the session's. Then a speculative
 * verification: the source takes 4 tokens with every row's logits (equal
 * to a session's all-logits pass) and its states kept, the fork the first
 * 2 of them (its row equal to the source's second); the source is rewound
 * to those 2 (slot_rewind, for recurrent state; Llama's stale KV rows are
 * just overwritten) and both take one more token: identical logits. Run
 * for Llama (F32, Q8_0: the packed kernels) and Qwen3.5 (Gated DeltaNet
 * slots). */
#ifndef TELA_TEST_BATCH_H
#define TELA_TEST_BATCH_H

#include "backend/backend.h"
#include "model/model.h"
#include "tela/tela.h"
#include "test.h"

#include <math.h>
#include <stdbool.h>
#include <unistd.h>

#define BS 16        /* positions per KV block */
#define N_CTX 192    /* per sequence */
#define N_SEQ 4      /* state slots */
#define POOL (N_SEQ * N_CTX / BS + 3)

typedef struct {
    int32_t tokens[N_CTX];
    int n_prompt, n_total;   /* prompt, then decode tokens given in advance */
    int n_done;              /* positions computed */
    int32_t blocks[N_CTX / BS];
    int slot;
    tela_session *ref;       /* the same sequence alone */
} seq;

static int kv_f16; /* the pass with f16 KV caches (sessions and the batched state alike) */
static const char *batch_device; /* NULL: the default (the CPU in test_batch.c) */
static int batch_tp;             /* the model's tensor_parallel (test_tp.c) */
static double batch_tol;         /* 0: rows bit-identical; else the largest difference relative to the range */
static double batch_worst;       /* the largest difference seen */

/* Whether two logits rows agree: bit for bit, or within batch_tol of b's range. */
static bool same_row(const float *a, const float *b, int n) {
    if (batch_tol <= 0) return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
    const double d = test_row_err(a, b, n);
    if (d > batch_worst) batch_worst = d;
    return d <= batch_tol;
}

/* A session for one sequence, fed the same runs (so cut the same way). */
static tela_session *new_session(tela_model *m) {
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = N_CTX;
    sp.kv_type = kv_f16 ? TELA_KV_F16 : TELA_KV_F32;
    sp.n_threads = 2;
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    return s;
}

static void check_model(const char *path) {
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = 2;
    mp.device = batch_device;
    mp.tensor_parallel = batch_tp;
    tela_model *m = NULL;
    if (tela_model_load(path, &mp, &m) != TELA_OK) {
        CHECK_MSG(0, "%s: %s", path, tela_last_error());
        return;
    }
    const int V = m->info.n_vocab;
    tela_exec *ex = NULL;
    CHECK_OK(tela_exec_create(m->be, 2, &ex));
    const tela_state_params p = {N_CTX, kv_f16 ? TELA_KV_DTYPE_F16 : TELA_KV_DTYPE_F32, N_SEQ, BS, POOL * BS, 160};
    void *state = NULL;
    CHECK_OK(m->arch->state_create(m, ex, &p, &state));
    if (!state) return;
    for (int i = 0; i < N_SEQ; i++) m->arch->slot_reset(m, state, i);

    /* blocks handed out in a shuffled order */
    int32_t pool[POOL];
    for (int i = 0; i < POOL; i++) pool[i] = i;
    for (int i = POOL - 1; i > 0; i--) {
        int j = (int)(test_rnd() % (uint64_t)(i + 1));
        int32_t t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
    }
    int next_block = 0;
    seq sq[3];
    const int prompts[3] = {70, 5, 130}, totals[3] = {80, 20, 140};
    for (int i = 0; i < 3; i++) {
        sq[i].n_prompt = prompts[i];
        sq[i].n_total = totals[i];
        sq[i].n_done = 0;
        sq[i].slot = 2 - i; /* not the order of the runs */
        for (int t = 0; t < totals[i]; t++) sq[i].tokens[t] = (int32_t)(test_rnd() % (uint64_t)V);
        for (int b = 0; b < (totals[i] + 40 + BS - 1) / BS; b++) sq[i].blocks[b] = pool[next_block++];
        sq[i].ref = new_session(m);
        if (!sq[i].ref) return;
    }
    float *logits = malloc(sizeof(float) * (size_t)V * 3), *ref = malloc(sizeof(float) * (size_t)V);
    int compared = 0, differ = 0;
    /* Steps: each sequence takes a prompt chunk of at most 64 tokens (a
     * multiple of 64 unless it ends the prompt), or one decode token. */
    for (int step = 0; step < 40; step++) {
        tela_seq_run runs[3];
        int idx[3], n_runs = 0;
        for (int i = 0; i < 3; i++) {
            seq *q = &sq[i];
            if (q->n_done >= q->n_total) continue;
            int n = 1;
            if (q->n_done < q->n_prompt) {
                n = q->n_prompt - q->n_done;
                if (n > 64) n = 64;
            }
            runs[n_runs] = (tela_seq_run){q->slot, q->tokens + q->n_done, n, q->n_done, q->blocks,
                                          q->n_done + n >= q->n_prompt, false, false, false};
            idx[n_runs++] = i;
        }
        if (n_runs == 0) break;
        int32_t picks[3];
        CHECK_OK(m->arch->forward_batch(m, state, runs, n_runs, logits, picks));
        int row = 0;
        for (int r = 0; r < n_runs; r++) {
            seq *q = &sq[idx[r]];
            CHECK_OK(tela_session_eval(q->ref, runs[r].tokens, runs[r].n, runs[r].logits ? ref : NULL, 0));
            q->n_done += runs[r].n;
            if (!runs[r].logits) continue;
            compared++;
            const float *lr = logits + (size_t)row * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (lr[v] > lr[best]) best = v;
            CHECK_MSG(picks[row] == best, "%s: the greedy pick of row %d is %d, its argmax %d", path, row, picks[row],
                      best);
            if (!same_row(logits + (size_t)row * V, ref, V)) {
                differ++;
                fprintf(stderr, "%s: sequence %d after %d tokens: batched logits differ from a session's\n", path,
                        idx[r], q->n_done);
            }
            row++;
        }
    }
    CHECK_MSG(differ == 0, "%s: %d of %d logits rows differ", path, differ, compared);
    CHECK_EQ_INT(compared, 11 + 16 + 11); /* a row per prompt end and decode token */

    /* A fork: sequence 0 (80 tokens done) copied into slot 3 with new
     * blocks (its KV rows copied), both fed the same 3 tokens. */
    seq *a = &sq[0];
    seq b = *a;
    b.slot = 3;
    const int full = a->n_done / BS - 1; /* the last full block is copied too, so that copied rows are read */
    for (int i = 0; i < (a->n_done + 3 + 5 + BS - 1) / BS; i++) {
        if (i < full) continue; /* full blocks are shared */
        b.blocks[i] = pool[next_block++];
        CHECK_OK(m->arch->kv_copy_rows(m, state, b.blocks[i] * BS, a->blocks[i] * BS, BS));
    }
    const size_t sb = m->arch->slot_bytes(m);
    void *img = malloc(sb ? sb : 1);
    CHECK_OK(m->arch->slot_save(m, state, a->slot, img));
    CHECK_OK(m->arch->slot_load(m, state, b.slot, img));
    int32_t more[3];
    for (int i = 0; i < 3; i++) more[i] = (int32_t)(test_rnd() % (uint64_t)V);
    memcpy(a->tokens + a->n_done, more, sizeof more);
    memcpy(b.tokens + b.n_done, more, sizeof more);
    const tela_seq_run two[2] = {{a->slot, more, 3, a->n_done, a->blocks, true, false, false, false},
                                 {b.slot, more, 3, b.n_done, b.blocks, true, false, false, false}};
    CHECK_OK(m->arch->forward_batch(m, state, two, 2, logits, NULL));
    CHECK_OK(tela_session_eval(a->ref, more, 3, ref, 0));
    CHECK_MSG(same_row(logits, ref, V), "%s: the forked sequence's source differs", path);
    CHECK_MSG(same_row(logits + V, ref, V), "%s: the fork differs from its source", path);
    a->n_done += 3;
    b.n_done += 3;

    /* a verification of 4 tokens on the source, 2 of them on the fork */
    int32_t ver[5];
    for (int i = 0; i < 5; i++) ver[i] = (int32_t)(test_rnd() % (uint64_t)V);
    float *rows = malloc(sizeof(float) * (size_t)V * 5), *ref4 = malloc(sizeof(float) * (size_t)V * 4);
    const bool keeps = m->arch->keeps_states && m->arch->keeps_states(m, state);
    const tela_seq_run vr[2] = {{a->slot, ver, 4, a->n_done, a->blocks, true, true, keeps, false},
                                {b.slot, ver, 2, b.n_done, b.blocks, true, false, false, true}};
    /* the fork's run wants only its pick: its row of rows stays as it was */
    for (int i = 0; i < V; i++) rows[(size_t)4 * V + i] = -1.0f;
    int32_t vpicks[5];
    CHECK_OK(m->arch->forward_batch(m, state, vr, 2, rows, vpicks));
    int untouched = 1;
    for (int i = 0; i < V; i++) untouched &= rows[(size_t)4 * V + i] == -1.0f;
    CHECK_MSG(untouched || tela_exec_host_visible(ex), "%s: a pick-only run's logits row came back", path);
    int best1 = 0;
    for (int v = 1; v < V; v++)
        if (rows[(size_t)V + v] > rows[(size_t)V + best1]) best1 = v;
    CHECK_MSG(vpicks[4] == best1, "%s: the pick-only run picked %d, the argmax of its row is %d", path, vpicks[4], best1);
    CHECK_OK(tela_session_eval(a->ref, ver, 4, ref4, 1));
    for (int i = 0; i < 4; i++)
        CHECK_MSG(same_row(rows + (size_t)i * V, ref4 + (size_t)i * V, V),
                  "%s: verification row %d differs from a session's all-logits pass", path, i);
    CHECK_MSG(!tela_exec_host_visible(ex) || same_row(rows + (size_t)4 * V, rows + V, V),
              "%s: a 2-token run's last row differs from the second row of a 4-token one", path);
    if (keeps) {
        CHECK_OK(m->arch->slot_rewind(m, state, a->slot, 2));
        CHECK_MSG(m->arch->slot_rewind(m, state, a->slot, 2) != TELA_OK, "%s: a second rewind of one pass succeeded",
                  path);
    }
    const tela_seq_run next[2] = {{a->slot, ver + 4, 1, a->n_done + 2, a->blocks, true, false, false, false},
                                  {b.slot, ver + 4, 1, b.n_done + 2, b.blocks, true, false, false, false}};
    CHECK_OK(m->arch->forward_batch(m, state, next, 2, rows, NULL));
    CHECK_MSG(same_row(rows, rows + V, V),
              "%s: after the rollback to 2 of 4 tokens, the next token's logits differ from a sequence that took 2",
              path);
    free(rows);
    free(ref4);
    free(img);
    for (int i = 0; i < 3; i++) tela_session_free(sq[i].ref);
    free(logits);
    free(ref);
    m->arch->state_free(state);
    tela_exec_free(ex);
    tela_model_free(m);
}

/* The models: Llama (F32, and the demo's Q8_0: the packed kernels) and
 * Qwen3.5 (Gated DeltaNet slots, asymmetric and symmetric heads), with f32
 * and f16 KV caches (kv_types: 2, or 1 for f16 only). */
static inline int check_models(int kv_types) {
    const char *src = getenv("TELA_SOURCE_DIR");
    char path[1024];
    const char *models[] = {"tests/fixtures/llama/llama-gqa-f32.gguf", "models/tela-kjv-q8_0.gguf",
                            "tests/fixtures/qwen35/qwen35-asym-f32.gguf", "tests/fixtures/qwen35/qwen35-sym-f16.gguf"};
    int ran = 0;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", src ? src : ".", models[i]);
        if (access(path, R_OK) != 0) {
            printf("note: %s not found\n", path);
            continue;
        }
        for (kv_f16 = kv_types == 1; kv_f16 < 2; kv_f16++) {
            printf("checking %s, %s KV cache\n", models[i], kv_f16 ? "f16" : "f32");
            check_model(path);
        }
        ran++;
    }
    return ran;
}

#endif
