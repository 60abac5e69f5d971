/* test_llama_tiny.h: writes small random-weight Llama GGUF files for the
 * session and loader tests (no ../shared needed): GQA, a head_dim that is
 * not n_embd / n_head, optional rope_freqs factors, tied or untied output,
 * F32 / F16 / Q8_0 matrices. */
#ifndef TELA_TESTS_LLAMA_TINY_H
#define TELA_TESTS_LLAMA_TINY_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "quant/quant.h"
#include "util/fp16.h"

typedef struct tiny_cfg {
    int n_vocab, n_embd, n_layer, n_ff, n_head, n_kv_head, head_dim, n_ctx_train;
    tela_type type;        /* of the 2-D weights */
    bool tied;
    bool rope_freqs;
    float rope_base;
    /* for the loader tests: a tensor written with a wrong shape, one left
     * out, another architecture name */
    const char *bad_tensor;
    const char *omit_tensor;
    const char *arch;
} tiny_cfg;

static inline tiny_cfg tiny_default(void) {
    tiny_cfg c = {97, 48, 2, 80, 4, 2, 16, 512, TELA_TYPE_F32, false, true, 10000.0f, NULL, NULL, "llama"};
    return c;
}

static uint64_t tiny_rng;

static inline double tiny_rnd(void) {
    tiny_rng ^= tiny_rng << 13;
    tiny_rng ^= tiny_rng >> 7;
    tiny_rng ^= tiny_rng << 17;
    return (double)(tiny_rng >> 11) / 4503599627370496.0 - 1.0;
}

/* Keeps the tensors' bytes alive until the writer has written them. */
typedef struct {
    void *bufs[64];
    int n;
} tiny_bufs;

static inline tela_status tiny_add(tela_gguf_writer *w, tiny_bufs *keep, const tiny_cfg *c, const char *name,
                                   int64_t cols, int64_t rows, double scale, double offset, bool is_vec) {
    if (c->bad_tensor && !strcmp(c->bad_tensor, name)) cols += 32; /* wrong shape on purpose */
    if (c->omit_tensor && !strcmp(c->omit_tensor, name)) return TELA_OK;
    size_t n = (size_t)(cols * rows);
    float *f = malloc(n * sizeof(float));
    if (!f) return TELA_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) f[i] = (float)(offset + scale * tiny_rnd());
    tela_type type = is_vec ? TELA_TYPE_F32 : c->type;
    size_t nbytes = 0;
    void *data = f;
    if (type == TELA_TYPE_F32) {
        nbytes = n * 4;
    } else if (type == TELA_TYPE_F16) {
        uint16_t *h = malloc(n * 2);
        if (!h) return TELA_ERR_NOMEM;
        for (size_t i = 0; i < n; i++) h[i] = tela_f32_to_f16(f[i]);
        free(f);
        data = h;
        nbytes = n * 2;
    } else {
        size_t rb = tela_type_row_bytes(type, cols);
        unsigned char *q = malloc(rb * (size_t)rows);
        if (!q) return TELA_ERR_NOMEM;
        for (int64_t r = 0; r < rows; r++) {
            tela_status s = tela_quantize_row(type, f + r * cols, q + rb * (size_t)r, cols);
            if (s != TELA_OK) return s;
        }
        free(f);
        data = q;
        nbytes = rb * (size_t)rows;
    }
    keep->bufs[keep->n++] = data;
    int64_t ne[2] = {cols, rows};
    return tela_gguf_writer_add_tensor(w, name, type, ne, is_vec ? 1 : 2, data, nbytes);
}

static inline tela_status tiny_write(const char *path, const tiny_cfg *c, uint64_t seed) {
    tiny_rng = seed * 2654435761ULL + 88172645463325252ULL;
    tela_gguf_writer *w = tela_gguf_writer_create();
    if (!w) return TELA_ERR_NOMEM;
    tiny_bufs keep = {{0}, 0};
    tela_status s = TELA_OK;
#define TRY_(e) do { if (s == TELA_OK) s = (e); } while (0)
    TRY_(tela_gguf_writer_add_str(w, "general.architecture", c->arch));
    TRY_(tela_gguf_writer_add_str(w, "general.name", "tiny test llama"));
    TRY_(tela_gguf_writer_add_u32(w, "llama.context_length", (uint32_t)c->n_ctx_train));
    TRY_(tela_gguf_writer_add_u32(w, "llama.embedding_length", (uint32_t)c->n_embd));
    TRY_(tela_gguf_writer_add_u32(w, "llama.block_count", (uint32_t)c->n_layer));
    TRY_(tela_gguf_writer_add_u32(w, "llama.feed_forward_length", (uint32_t)c->n_ff));
    TRY_(tela_gguf_writer_add_u32(w, "llama.attention.head_count", (uint32_t)c->n_head));
    TRY_(tela_gguf_writer_add_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_head));
    TRY_(tela_gguf_writer_add_u32(w, "llama.attention.key_length", (uint32_t)c->head_dim));
    TRY_(tela_gguf_writer_add_u32(w, "llama.attention.value_length", (uint32_t)c->head_dim));
    TRY_(tela_gguf_writer_add_u32(w, "llama.rope.dimension_count", (uint32_t)c->head_dim));
    TRY_(tela_gguf_writer_add_f32(w, "llama.rope.freq_base", c->rope_base));
    TRY_(tela_gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
    const int E = c->n_embd, F = c->n_ff, QD = c->n_head * c->head_dim, KD = c->n_kv_head * c->head_dim;
    if (c->rope_freqs) TRY_(tiny_add(w, &keep, c, "rope_freqs.weight", c->head_dim / 2, 1, 3.0, 4.0, true));
    TRY_(tiny_add(w, &keep, c, "token_embd.weight", E, c->n_vocab, 1.0, 0.0, false));
    TRY_(tiny_add(w, &keep, c, "output_norm.weight", E, 1, 0.2, 1.0, true));
    if (!c->tied) TRY_(tiny_add(w, &keep, c, "output.weight", E, c->n_vocab, 2.0 / sqrt(E), 0.0, false));
    char name[64];
    for (int l = 0; l < c->n_layer && s == TELA_OK; l++) {
#define T_(suffix, cols, rows, scale, off, vec) \
    snprintf(name, sizeof name, "blk.%d." suffix, l); \
    TRY_(tiny_add(w, &keep, c, name, cols, rows, scale, off, vec))
        T_("attn_norm.weight", E, 1, 0.2, 1.0, true);
        T_("attn_q.weight", E, QD, 2.0 / sqrt(E), 0.0, false);
        T_("attn_k.weight", E, KD, 2.0 / sqrt(E), 0.0, false);
        T_("attn_v.weight", E, KD, 1.5 / sqrt(E), 0.0, false);
        T_("attn_output.weight", QD, E, 1.5 / sqrt(QD), 0.0, false);
        T_("ffn_norm.weight", E, 1, 0.2, 1.0, true);
        T_("ffn_gate.weight", E, F, 1.5 / sqrt(E), 0.0, false);
        T_("ffn_up.weight", E, F, 1.5 / sqrt(E), 0.0, false);
        T_("ffn_down.weight", F, E, 1.5 / sqrt(F), 0.0, false);
#undef T_
    }
    TRY_(tela_gguf_writer_write(w, path));
#undef TRY_
    tela_gguf_writer_free(w);
    for (int i = 0; i < keep.n; i++) free(keep.bufs[i]);
    return s;
}

/* A fresh temporary directory (static buffer). */
static inline const char *tiny_tmpdir(void) {
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/tela_test_XXXXXX");
    return mkdtemp(dir);
}

#endif
