/* test_prune.c: layer skipping and layer importance.
 *   - --skip-layers (tela_model_params.skip_layers) against a model file
 *     with those layers removed by hand (the tensors of the later layers
 *     renumbered, block_count lowered): identical logits at every position,
 *     for a Llama fixture (one middle layer) and a random 8-layer Qwen3.5
 *     (its first four layers, so the attention pattern of the rest holds);
 *     a skipped layer gets no KV cache or state (the same state size as the
 *     file without it);
 *   - tela_layer_cosines against a float64 computation in this file from the
 *     hidden states the probe hands out; a layer whose output projections
 *     are zeroed (an identity) has cosine 1 and is the plan's first pick;
 *   - tela_prune_plan keeps a hybrid's balance (one attention layer in four);
 *   - a layer that does not exist is an error naming it.
 * Skipped (77) without the fixtures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "runtime/session.h" /* the snapshot's state size */
#include "tela/tela.h"
#include "test.h"

static char tmpdir[] = "/tmp/tela-prune-XXXXXX";

/* Writes src without the layers in [first, first + count), the tensors of
 * later layers renumbered. Data is referenced from the open source file. */
static int write_without_layers(const char *src, const char *dst, int first, int count) {
    tela_gguf *g = NULL;
    if (tela_gguf_open(src, &g) != TELA_OK) return -1;
    tela_gguf_writer *w = tela_gguf_writer_create();
    char arch[64] = "";
    tela_gguf_str a;
    if (tela_gguf_get_str(g, "general.architecture", &a) == TELA_OK)
        snprintf(arch, sizeof arch, "%.*s", (int)a.len, a.ptr);
    char bc[96];
    snprintf(bc, sizeof bc, "%s.block_count", arch);
    uint32_t n_layer = 0;
    tela_gguf_get_u32(g, bc, &n_layer);
    int rc = 0;
    for (uint64_t i = 0; i < g->n_kv && rc == 0; i++) {
        if (!strcmp(g->kv[i].key, bc)) rc = tela_gguf_writer_add_u32(w, bc, n_layer - (uint32_t)count) != TELA_OK;
        else rc = tela_gguf_writer_copy_kv(w, &g->kv[i]) != TELA_OK;
    }
    static char names[4096][96];
    int nn = 0;
    for (uint64_t i = 0; i < g->n_tensors && rc == 0; i++) {
        const tela_tensor *t = &g->tensors[i].t;
        int l = -1, off = 0;
        const char *name = t->name;
        if (sscanf(t->name, "blk.%d.%n", &l, &off) == 1 && off > 0) {
            if (l >= first && l < first + count) continue;
            if (l >= first + count) {
                snprintf(names[nn], sizeof names[0], "blk.%d.%s", l - count, t->name + off);
                name = names[nn++];
            }
        }
        rc = tela_gguf_writer_add_tensor(w, name, t->type, t->ne, t->n_dims, t->data, t->nbytes) != TELA_OK;
    }
    if (rc == 0) rc = tela_gguf_writer_write(w, dst) != TELA_OK;
    if (rc) fprintf(stderr, "write_without_layers: %s\n", tela_last_error());
    tela_gguf_writer_free(w);
    tela_gguf_close(g);
    return rc;
}

static tela_model *load(const char *path, const int32_t *skip, size_t n_skip) {
    tela_model_params mp = tela_model_default_params();
    mp.device = "cpu";
    mp.skip_layers = skip;
    mp.n_skip_layers = n_skip;
    tela_model *m = NULL;
    tela_status s = tela_model_load(path, &mp, &m);
    CHECK_MSG(s == TELA_OK, "loading %s: %s", path, tela_last_error());
    return m;
}

/* Logits at every position of n tokens, and the snapshot size after them. */
static float *all_logits(tela_model *m, const int32_t *ids, int n, size_t *snap_bytes) {
    const int V = tela_model_get_info(m)->n_vocab;
    float *v = malloc(sizeof(float) * (size_t)n * V);
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = 512;
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, &sp, &s));
    if (s) CHECK_OK(tela_session_eval(s, ids, n, v, 1));
    tela_snapshot *snap = NULL;
    if (s) CHECK_OK(tela_session_snapshot(s, &snap));
    *snap_bytes = snap ? snap->state_bytes : 0;
    tela_snapshot_free(snap);
    tela_session_free(s);
    return v;
}

static void check_skip_equals_removed(const char *src, int first, int count, const char *label) {
    char dst[256];
    snprintf(dst, sizeof dst, "%s/removed-%s.gguf", tmpdir, label);
    CHECK_MSG(write_without_layers(src, dst, first, count) == 0, "%s: writing the file without layers", label);
    int32_t skip[16];
    for (int i = 0; i < count; i++) skip[i] = first + i;
    tela_model *a = load(src, skip, (size_t)count), *b = load(dst, NULL, 0);
    if (!a || !b) {
        tela_model_free(a);
        tela_model_free(b);
        return;
    }
    for (int i = 0; i < count; i++) CHECK_EQ_INT(tela_model_layer_skipped(a, first + i), 1);
    CHECK_EQ_INT(tela_model_get_info(a)->n_layer, tela_model_get_info(b)->n_layer + count);
    int32_t ids[300];
    const int V = tela_model_get_info(a)->n_vocab, n = 300;
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 131 + 7) % V);
    size_t sa = 0, sb = 0;
    float *la = all_logits(a, ids, n, &sa), *lb = all_logits(b, ids, n, &sb);
    CHECK_MSG(!memcmp(la, lb, sizeof(float) * (size_t)n * V),
              "%s: logits with --skip-layers differ from the file without those layers", label);
    CHECK_MSG(sa == sb && sa > 0, "%s: the state with skipped layers is %zu bytes, without them %zu", label, sa, sb);
    free(la);
    free(lb);
    tela_model_free(a);
    tela_model_free(b);
}

/* ---- cosines against float64 ---- */

typedef struct probe_log {
    int n_layer, n_embd;
    double *sum;                 /* [n_layer] */
    float *prev;
    int have_prev, calls;
} probe_log;

/* Cosine as the angle between unit vectors, a different way than the
 * library's (which divides the dot product by the norms). */
static double cos64(const float *a, const float *b, int n) {
    double na = 0, nb = 0;
    for (int i = 0; i < n; i++) {
        na += (double)a[i] * a[i];
        nb += (double)b[i] * b[i];
    }
    na = sqrt(na);
    nb = sqrt(nb);
    double d = 0;
    for (int i = 0; i < n; i++) d += ((double)a[i] / na) * ((double)b[i] / nb);
    return d;
}

static void on_probe(void *user, int32_t layer, const float *h, int32_t n) {
    probe_log *p = user;
    p->calls++;
    if (layer >= 0 && p->have_prev) p->sum[layer] += cos64(p->prev, h, n);
    memcpy(p->prev, h, sizeof(float) * (size_t)n);
    p->have_prev = 1;
}

static void check_cosines(const char *path) {
    tela_model *m = load(path, NULL, 0);
    if (!m) return;
    const tela_model_info *info = tela_model_get_info(m);
    const int L = info->n_layer, P = 5;
    int32_t *prompts[5], lens[5];
    for (int p = 0; p < P; p++) {
        lens[p] = 3 + 17 * p;
        prompts[p] = malloc(sizeof(int32_t) * (size_t)lens[p]);
        for (int i = 0; i < lens[p]; i++) prompts[p][i] = (int32_t)((p * 97 + i * 31 + 1) % info->n_vocab);
    }
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, NULL, &s));
    double *lib = calloc((size_t)L, sizeof(double));
    CHECK_OK(tela_layer_cosines(s, (const int32_t *const *)prompts, lens, P, lib));
    probe_log pl = {L, info->n_embd, calloc((size_t)L, sizeof(double)), malloc(sizeof(float) * (size_t)info->n_embd),
                    0, 0};
    for (int p = 0; p < P; p++) {
        tela_session_reset(s);
        pl.have_prev = 0;
        CHECK_OK(tela_session_eval_probe(s, prompts[p], lens[p], on_probe, &pl));
    }
    CHECK_EQ_INT(pl.calls, P * (L + 1));
    double worst = 0;
    for (int l = 0; l < L; l++) {
        double d = fabs(lib[l] - pl.sum[l] / P);
        if (!(d <= worst)) worst = d;
        CHECK_MSG(lib[l] > -1.0 - 1e-12 && lib[l] < 1.0 + 1e-12, "cosine %g of layer %d out of range", lib[l], l);
    }
    CHECK_MSG(worst <= 1e-12, "%s: tela_layer_cosines differs from the float64 computation by %g", path, worst);
    for (int p = 0; p < P; p++) free(prompts[p]);
    free(lib);
    free(pl.sum);
    free(pl.prev);
    tela_session_free(s);
    tela_model_free(m);
}

/* A copy of a Llama file with layer `id`'s attention output and FFN down
 * projections zeroed: that layer adds nothing to the residual stream. */
static int write_identity_layer(const char *src, const char *dst, int id, void **keep) {
    tela_gguf *g = NULL;
    if (tela_gguf_open(src, &g) != TELA_OK) return -1;
    tela_gguf_writer *w = tela_gguf_writer_create();
    int rc = 0;
    for (uint64_t i = 0; i < g->n_kv && rc == 0; i++) rc = tela_gguf_writer_copy_kv(w, &g->kv[i]) != TELA_OK;
    char o[64], d[64];
    snprintf(o, sizeof o, "blk.%d.attn_output.weight", id);
    snprintf(d, sizeof d, "blk.%d.ffn_down.weight", id);
    int k = 0;
    for (uint64_t i = 0; i < g->n_tensors && rc == 0; i++) {
        const tela_tensor *t = &g->tensors[i].t;
        const void *data = t->data;
        if (!strcmp(t->name, o) || !strcmp(t->name, d)) data = keep[k++] = calloc(1, t->nbytes);
        rc = tela_gguf_writer_add_tensor(w, t->name, t->type, t->ne, t->n_dims, data, t->nbytes) != TELA_OK;
    }
    if (rc == 0) rc = tela_gguf_writer_write(w, dst) != TELA_OK;
    tela_gguf_writer_free(w);
    tela_gguf_close(g);
    return rc;
}

static void check_identity_layer(const char *src) {
    char dst[256];
    snprintf(dst, sizeof dst, "%s/identity.gguf", tmpdir);
    void *keep[2] = {NULL, NULL};
    CHECK(write_identity_layer(src, dst, 1, keep) == 0);
    free(keep[0]);
    free(keep[1]);
    tela_model *m = load(dst, NULL, 0);
    if (!m) return;
    const int L = tela_model_get_info(m)->n_layer;
    int32_t ids[20], len = 20;
    for (int i = 0; i < 20; i++) ids[i] = 5 + i * 3;
    const int32_t *prompts[1] = {ids};
    tela_session *s = NULL;
    CHECK_OK(tela_session_create(m, NULL, &s));
    double *cos = calloc((size_t)L, sizeof(double));
    CHECK_OK(tela_layer_cosines(s, prompts, &len, 1, cos));
    CHECK_MSG(fabs(cos[1] - 1.0) <= 1e-12, "an identity layer has cosine %.15f", cos[1]);
    for (int l = 0; l < L; l++)
        if (l != 1) CHECK_MSG(cos[l] < 1.0 - 1e-6, "layer %d has cosine %.15f", l, cos[l]);
    int32_t plan[1] = {-1};
    CHECK_OK(tela_prune_plan(m, cos, 1, plan, NULL));
    CHECK_EQ_INT(plan[0], 1);
    free(cos);
    tela_session_free(s);
    tela_model_free(m);
}

static void check_plan_balance(const char *qwen8) {
    tela_model *m = load(qwen8, NULL, 0);
    if (!m) return;
    const int L = tela_model_get_info(m)->n_layer;
    int n_attn = 0;
    for (int l = 0; l < L; l++) n_attn += tela_model_layer_kind(m, l) == TELA_LAYER_ATTENTION;
    CHECK_EQ_INT(L, 8);
    CHECK_EQ_INT(n_attn, 2);
    double cos[8];
    /* make the attention layers look the most removable: the plan must still keep the balance */
    for (int l = 0; l < L; l++) cos[l] = tela_model_layer_kind(m, l) == TELA_LAYER_ATTENTION ? 0.99 : 0.5 + 0.01 * l;
    int32_t plan[8], na = -1;
    CHECK_OK(tela_prune_plan(m, cos, 4, plan, &na));
    CHECK_EQ_INT(na, 1);
    int kinds[2] = {0, 0};
    for (int i = 0; i < 4; i++) kinds[tela_model_layer_kind(m, plan[i])]++;
    CHECK_EQ_INT(kinds[TELA_LAYER_ATTENTION], 1);
    CHECK_EQ_INT(kinds[TELA_LAYER_DELTANET], 3);
    for (int i = 1; i < 4; i++) CHECK(plan[i - 1] < plan[i]);
    CHECK_OK(tela_prune_plan(m, cos, 1, plan, &na));
    CHECK_EQ_INT(na, 0);
    CHECK_EQ_INT(tela_model_layer_kind(m, plan[0]), TELA_LAYER_DELTANET);
    CHECK_EQ_INT(plan[0], 6); /* the DeltaNet layer with the highest cosine */
    tela_model_free(m);
}

int main(void) {
    const char *src = getenv("TELA_SOURCE_DIR"), *bin = getenv("TELA_BIN");
    if (!src) test_skip("TELA_SOURCE_DIR is not set");
    char llama[1200];
    snprintf(llama, sizeof llama, "%s/tests/fixtures/llama/llama-gqa-f32.gguf", src);
    if (access(llama, R_OK) != 0) test_skip("no tests/fixtures/llama");
    if (!mkdtemp(tmpdir)) test_skip("no temporary directory");

    check_skip_equals_removed(llama, 1, 1, "llama");
    check_cosines(llama);
    check_identity_layer(llama);

    /* a random 8-layer Qwen3.5 (6 Gated DeltaNet + 2 attention layers) */
    char qwen[256] = "";
    if (bin) {
        char mk[1200], cmd[2600];
        if (test_tool_path(mk, sizeof mk, "tela-mkmodel")) {
            snprintf(qwen, sizeof qwen, "%s/qwen8.gguf", tmpdir);
            snprintf(cmd, sizeof cmd, "'%s' qwen3.5-tiny --layers 8 -o '%s' -q", mk, qwen);
            if (system(cmd) != 0) qwen[0] = '\0';
        }
    }
    if (qwen[0]) {
        check_skip_equals_removed(qwen, 0, 4, "qwen35");
        check_cosines(qwen);
        check_plan_balance(qwen);
    } else {
        printf("note: no tela-mkmodel beside TELA_BIN; the Qwen3.5 parts did not run\n");
    }

    /* a layer that does not exist */
    int32_t bad = 3;
    tela_model_params mp = tela_model_default_params();
    mp.skip_layers = &bad;
    mp.n_skip_layers = 1;
    tela_model *m = NULL;
    CHECK(tela_model_load(llama, &mp, &m) == TELA_ERR_ARG);
    CHECK_MSG(strstr(tela_last_error(), "layer 3") && strstr(tela_last_error(), "3 layers"), "message: %s",
              tela_last_error());
    CHECK(m == NULL);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_finish();
}
