/* test_qwen35_shape.c: a Qwen3.5 model at a real size loads and runs. Writes
 * a random-weight GGUF of the Qwen3.5-2B shape (hidden 2048, 24 layers = 18
 * Gated DeltaNet + 6 gated attention, GDN 16 key / 16 value heads of 128,
 * attention 8 heads / 2 KV heads of 256, partial rotary 64 dims, ff 6144,
 * vocab 248320, tied embeddings; Q4_0 weights, about 1.1 GB), then loads it,
 * prefills a prompt over several chunks, decodes, and checks that the logits
 * are finite and spread, that decode agrees with the prefill and that the
 * session snapshot has the expected size. Prints load and token speeds.
 *
 * Slow and disk-hungry, so it runs only when TELA_BIG_TESTS is set (else it
 * is skipped). The file goes to $TELA_BIG_DIR (default /tmp) and is removed
 * unless TELA_KEEP_BIG is set, so `tela run` can be tried on it:
 *   TELA_BIG_TESTS=1 TELA_KEEP_BIG=1 build/tests/test_qwen35_shape
 *   build/bin/tela run -m /tmp/tela-qwen35-2b-shape-q4_0.gguf --tokens 1,2,3 -n 16 --temp 0 */
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "format/gguf.h"
#include "quant/quant.h"
#include "tela/tela.h"
#include "test.h"
#include "util/fp16.h"

enum {
    E = 2048, N_LAYER = 24, INTERVAL = 4, N_FF = 6144, N_VOCAB = 248320,
    N_HEAD = 8, N_KV = 2, HD = 256, N_ROT = 64,
    NK = 16, NV = 16, DK = 128, DV = 128, CONV_K = 4,
    CONV_DIM = 2 * NK * DK + NV * DV,
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float rndf(void) { return (float)(rnd32() >> 8) / 16777216.0f; } /* [0, 1) */

int main(void) {
    if (!getenv("TELA_BIG_TESTS")) test_skip("set TELA_BIG_TESTS=1 to write and run a 1.1 GB Qwen3.5-2B-shaped model");
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *dir = getenv("TELA_BIG_DIR") ? getenv("TELA_BIG_DIR") : "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/tela-qwen35-2b-shape-q4_0.gguf", dir);

    /* One random Q4_0 buffer, large enough for the largest matrix, shared
     * by every weight: the file has the full size, the memory does not.
     * Scale: weights of std ~ 1/sqrt(n_in) keep activations of order 1. */
    const size_t max_elems = (size_t)N_VOCAB * E;
    const size_t n_blocks = max_elems / TELA_QK4_0;
    tela_block_q4_0 *blocks = malloc(n_blocks * sizeof *blocks);
    CHECK(blocks != NULL);
    if (!blocks) return test_finish();
    for (size_t b = 0; b < n_blocks; b++) {
        blocks[b].d = tela_f32_to_f16((0.6f + 0.8f * rndf()) * 0.0045f);
        for (int i = 0; i < TELA_QK4_0 / 2; i++) blocks[b].qs[i] = (uint8_t)rnd32();
    }
    static float ones[N_FF], conv[CONV_K * CONV_DIM], ssm_a[NV], dt[NV];
    for (int i = 0; i < N_FF; i++) ones[i] = 1.0f;
    for (int i = 0; i < CONV_K * CONV_DIM; i++) conv[i] = (rndf() - 0.5f) * 0.5f;
    for (int i = 0; i < NV; i++) {
        ssm_a[i] = -(0.05f + 2.0f * rndf());
        dt[i] = rndf() - 0.5f;
    }

    tela_gguf_writer *w = tela_gguf_writer_create();
    CHECK(w != NULL);
    if (!w) return test_finish();
    CHECK_OK(tela_gguf_writer_add_str(w, "general.architecture", "qwen35"));
    CHECK_OK(tela_gguf_writer_add_str(w, "general.name", "Qwen3.5-2B shape (random)"));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.block_count", N_LAYER));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.context_length", 262144));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.embedding_length", E));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.feed_forward_length", N_FF));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.attention.head_count", N_HEAD));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.attention.head_count_kv", N_KV));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.attention.key_length", HD));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.attention.value_length", HD));
    CHECK_OK(tela_gguf_writer_add_f32(w, "qwen35.attention.layer_norm_rms_epsilon", 1e-6f));
    CHECK_OK(tela_gguf_writer_add_f32(w, "qwen35.rope.freq_base", 10000000.0f));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.rope.dimension_count", N_ROT));
    const int32_t sections[4] = {11, 11, 10, 0};
    CHECK_OK(tela_gguf_writer_add_arr(w, "qwen35.rope.dimension_sections", TELA_GGUF_INT32, sections, 4));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.ssm.conv_kernel", CONV_K));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.ssm.state_size", DK));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.ssm.group_count", NK));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.ssm.time_step_rank", NV));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.ssm.inner_size", NV * DV));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.full_attention_interval", INTERVAL));
    CHECK_OK(tela_gguf_writer_add_u32(w, "general.file_type", 2));

    static char names[N_LAYER * 20][64];
    int n_names = 0;
#define NAME(...) (snprintf(names[n_names], sizeof names[0], __VA_ARGS__), names[n_names++])
#define MAT(name, rows, cols)                                                                                      \
    do {                                                                                                           \
        int64_t ne_[2] = {(cols), (rows)};                                                                         \
        CHECK_OK(tela_gguf_writer_add_tensor(w, (name), TELA_TYPE_Q4_0, ne_, 2, blocks,                          \
                                             (size_t)(rows) * (cols) / TELA_QK4_0 * sizeof(tela_block_q4_0)));  \
    } while (0)
#define VEC(name, data, n)                                                                                         \
    do {                                                                                                           \
        int64_t ne_[1] = {(n)};                                                                                    \
        CHECK_OK(tela_gguf_writer_add_tensor(w, (name), TELA_TYPE_F32, ne_, 1, (data), sizeof(float) * (size_t)(n))); \
    } while (0)
    MAT("token_embd.weight", N_VOCAB, E);
    VEC("output_norm.weight", ones, E);
    for (int l = 0; l < N_LAYER; l++) {
        VEC(NAME("blk.%d.attn_norm.weight", l), ones, E);
        VEC(NAME("blk.%d.post_attention_norm.weight", l), ones, E);
        MAT(NAME("blk.%d.ffn_gate.weight", l), N_FF, E);
        MAT(NAME("blk.%d.ffn_up.weight", l), N_FF, E);
        MAT(NAME("blk.%d.ffn_down.weight", l), E, N_FF);
        if ((l + 1) % INTERVAL == 0) {
            MAT(NAME("blk.%d.attn_q.weight", l), N_HEAD * HD * 2, E);
            MAT(NAME("blk.%d.attn_k.weight", l), N_KV * HD, E);
            MAT(NAME("blk.%d.attn_v.weight", l), N_KV * HD, E);
            MAT(NAME("blk.%d.attn_output.weight", l), E, N_HEAD * HD);
            VEC(NAME("blk.%d.attn_q_norm.weight", l), ones, HD);
            VEC(NAME("blk.%d.attn_k_norm.weight", l), ones, HD);
        } else {
            MAT(NAME("blk.%d.attn_qkv.weight", l), CONV_DIM, E);
            MAT(NAME("blk.%d.attn_gate.weight", l), NV * DV, E);
            MAT(NAME("blk.%d.ssm_beta.weight", l), NV, E);
            MAT(NAME("blk.%d.ssm_alpha.weight", l), NV, E);
            MAT(NAME("blk.%d.ssm_out.weight", l), E, NV * DV);
            int64_t ne_c[2] = {CONV_K, CONV_DIM};
            CHECK_OK(tela_gguf_writer_add_tensor(w, NAME("blk.%d.ssm_conv1d.weight", l), TELA_TYPE_F32, ne_c, 2, conv,
                                                 sizeof conv));
            VEC(NAME("blk.%d.ssm_a", l), ssm_a, NV);
            VEC(NAME("blk.%d.ssm_dt.bias", l), dt, NV);
            VEC(NAME("blk.%d.ssm_norm.weight", l), ones, DV);
        }
    }
    double t0 = now();
    CHECK_OK(tela_gguf_writer_write(w, path));
    tela_gguf_writer_free(w);
    free(blocks);
    printf("wrote %s in %.1f s\n", path, now() - t0);

    t0 = now();
    tela_model_params mp = tela_model_default_params();
    tela_model *m = NULL;
    CHECK_OK(tela_model_load(path, &mp, &m));
    if (m) {
        const tela_model_info *info = tela_model_get_info(m);
        printf("loaded in %.2f s: %d layers, n_embd %d, vocab %d, %.2f B params, %.2f GiB, %s\n", now() - t0,
               info->n_layer, info->n_embd, info->n_vocab, (double)info->n_params / 1e9,
               (double)info->n_bytes / (1 << 30), info->file_type);
        CHECK_EQ_INT(info->n_layer, N_LAYER);
        CHECK_EQ_INT(info->n_vocab, N_VOCAB);

        enum { N_PROMPT = 150, N_DEC = 4 };
        tela_session_params sp = tela_session_default_params();
        sp.n_ctx = 512;
        tela_session *s = NULL;
        CHECK_OK(tela_session_create(m, &sp, &s));
        int32_t ids[N_PROMPT + N_DEC];
        for (int i = 0; i < N_PROMPT + N_DEC; i++) ids[i] = (int32_t)(rnd32() % N_VOCAB);
        float *a = malloc(sizeof(float) * N_VOCAB), *b = malloc(sizeof(float) * N_VOCAB);
        if (s && a && b) {
            t0 = now();
            CHECK_OK(tela_session_eval(s, ids, N_PROMPT, a, 0));
            double tp = now() - t0;
            int finite = 1;
            float lo = a[0], hi = a[0];
            for (int i = 0; i < N_VOCAB; i++) {
                if (!isfinite(a[i])) finite = 0;
                if (a[i] < lo) lo = a[i];
                if (a[i] > hi) hi = a[i];
            }
            CHECK_MSG(finite, "non-finite logits after the prefill");
            CHECK_MSG(hi - lo > 1e-3f, "logits do not vary (range %g)", (double)(hi - lo));
            tela_snapshot *snap = NULL;
            CHECK_OK(tela_session_snapshot(s, &snap));
            t0 = now();
            for (int i = 0; i < N_DEC; i++) CHECK_OK(tela_session_eval(s, ids + N_PROMPT + i, 1, a, 0));
            double td = now() - t0;
            /* decode of the same tokens after a restore gives the same logits;
             * a prefill of them gives them within tolerance */
            CHECK_OK(tela_session_restore(s, snap));
            for (int i = 0; i < N_DEC; i++) CHECK_OK(tela_session_eval(s, ids + N_PROMPT + i, 1, b, 0));
            CHECK(!memcmp(a, b, sizeof(float) * N_VOCAB));
            CHECK_OK(tela_session_restore(s, snap));
            CHECK_OK(tela_session_eval(s, ids + N_PROMPT, N_DEC, b, 0));
            double md = 0;
            for (int i = 0; i < N_VOCAB; i++) md = fmax(md, fabs((double)a[i] - b[i]));
            CHECK_MSG(md <= 1e-4 * (hi - lo) + 1e-5, "decode vs prefill: %g (range %g)", md, (double)(hi - lo));
            tela_snapshot_free(snap);
            printf("prefill: %d tokens in %.2f s (%.1f tok/s) | decode: %d tokens in %.2f s (%.2f tok/s)\n", N_PROMPT,
                   tp, N_PROMPT / tp, N_DEC, td, N_DEC / td);
            printf("state snapshot at %d tokens: recurrent+conv %.1f MiB + KV %.1f KiB per token\n", N_PROMPT,
                   18.0 * (NV * DK * DV + (CONV_K - 1) * CONV_DIM) * 4 / (1 << 20), 6.0 * 2 * N_KV * HD * 4 / 1024);
        }
        free(a);
        free(b);
        tela_session_free(s);
        tela_model_free(m);
    }
    if (!getenv("TELA_KEEP_BIG")) unlink(path);
    return test_finish();
}
