/* mkmodel.c: tela-mkmodel, which writes a random-weight GGUF model at the
 * shape of a real one (Llama 3.2 1B, Llama 3.1 8B, Qwen3.5 2B, ...) for
 * speed work, with the tensor names, shapes and metadata keys of llama.cpp's
 * converter, so tela and llama.cpp both load it, and optionally the
 * tokenizer metadata of another GGUF file (padded with [PADn] tokens when the
 * model's vocabulary is larger).
 *
 * Weights are N(0, 0.02)-like (a sum of four uniforms), norms about 1, from a
 * counter-based generator seeded per tensor, so the file depends only on the
 * preset, type and seed, not on the thread count. Tensors are generated one
 * at a time into an unlinked scratch file beside the output (a 1B model in
 * F16 is 2.5 GB), which the GGUF writer then copies into the output. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/gguf.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/fp16.h"

/* ---------------------------------------------------------------- shapes */

typedef struct preset {
    const char *name, *arch, *title, *what;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    bool tied;
    double rope_theta, rms_eps;
    /* Llama-3 rope scaling (rope_freqs.weight); factor 0 = none */
    double rope_factor, rope_low, rope_high, rope_orig_ctx;
    /* qwen35: Gated DeltaNet every layer but each interval-th */
    int ssm_k_heads, ssm_v_heads, ssm_k_dim, ssm_v_dim, conv_kernel, interval;
    double partial_rotary;
    int mrope[4];
    int n_mtp;   /* qwen35: multi-token-prediction (nextn) blocks after the layers (--mtp) */
} preset;

static const preset PRESETS[] = {
    {"llama-3.2-1b", "llama", "Llama 3.2 1B Random", "Llama-3.2-1B shape (1.24B parameters, tied embeddings)",
     16, 2048, 32, 8, 64, 8192, 128256, 131072, true, 500000.0, 1e-5, 32.0, 1.0, 4.0, 8192.0,
     0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}, 0},
    {"llama-3.1-8b", "llama", "Llama 3.1 8B Random", "Llama-3.1-8B shape (8.03B parameters, untied output)",
     32, 4096, 32, 8, 128, 14336, 128256, 131072, false, 500000.0, 1e-5, 8.0, 1.0, 4.0, 8192.0,
     0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}, 0},
    {"qwen3.5-2b", "qwen35", "Qwen3.5 2B Random",
     "Qwen3.5-2B shape (24 layers: 18 Gated DeltaNet + 6 gated attention, tied embeddings)",
     24, 2048, 8, 2, 256, 6144, 248320, 262144, true, 10000000.0, 1e-6, 0, 0, 0, 0,
     16, 16, 128, 128, 4, 4, 0.25, {11, 11, 10, 0}, 0},
    {"qwen3.5-27b", "qwen35", "Qwen3.5 27B Random",
     "Qwen3.5-27B shape (64 layers: 48 Gated DeltaNet + 16 gated attention, GDN 16 key / 48 value heads, untied)",
     64, 5120, 24, 4, 256, 17408, 248320, 262144, false, 10000000.0, 1e-6, 0, 0, 0, 0,
     16, 48, 128, 128, 4, 4, 0.25, {11, 11, 10, 0}, 0},
    {"llama-tiny", "llama", "Llama Tiny Random", "a small Llama for tests (hidden 256, 4 layers, vocab 512)",
     4, 256, 4, 2, 64, 512, 512, 4096, false, 500000.0, 1e-5, 8.0, 1.0, 4.0, 64.0,
     0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}, 0},
    {"qwen3.5-tiny", "qwen35", "Qwen3.5 Tiny Random",
     "a small Qwen3.5 hybrid for tests (hidden 256, 4 layers: 3 GDN + 1 attention, vocab 512)",
     4, 256, 2, 1, 64, 512, 512, 4096, true, 10000000.0, 1e-6, 0, 0, 0, 0,
     2, 4, 32, 32, 4, 4, 0.25, {11, 11, 10, 0}, 0},
};
#define N_PRESETS (sizeof PRESETS / sizeof PRESETS[0])

/* How a tensor's values are drawn. */
typedef enum init_kind {
    INIT_WEIGHT,   /* N(0, 0.02)-like */
    INIT_NORM,     /* 1 + N(0, 0.02)-like */
    INIT_SSM_A,    /* -exp(A_log), A_log = log(U(1, 16)): in [-16, -1] */
    INIT_ONES,     /* dt_bias */
    INIT_ROPE      /* the Llama-3 frequency factors */
} init_kind;

typedef struct mk_tensor {
    char name[64];
    tela_type type;
    int n_dims;
    int64_t ne[4];
    init_kind init;
    size_t nbytes;
    uint64_t offset;   /* in the scratch file */
} mk_tensor;

typedef struct mk_plan {
    mk_tensor *t;
    size_t n, cap;
    const preset *p;
    tela_type wtype;   /* type of the weight matrices */
    uint64_t seed;
    float *rope;       /* rope factors (n_rot / 2), when the preset has them */
} mk_plan;

static tela_status plan_add(mk_plan *pl, init_kind init, int n_dims, int64_t ne0, int64_t ne1, const char *fmt, int layer) {
    if (pl->n == pl->cap) {
        size_t cap = pl->cap ? pl->cap * 2 : 256;
        mk_tensor *t = realloc(pl->t, cap * sizeof *t);
        if (!t) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
        pl->t = t;
        pl->cap = cap;
    }
    mk_tensor *t = &pl->t[pl->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims > 1 ? ne1 : 1;
    t->ne[2] = t->ne[3] = 1;
    t->init = init;
    /* 1-D tensors and conv kernels are F32, as llama.cpp's converter keeps them */
    bool f32 = n_dims == 1 || strstr(t->name, "ssm_conv1d") != NULL;
    t->type = f32 ? TELA_TYPE_F32 : pl->wtype;
    return tela_type_tensor_bytes(t->type, t->ne, t->n_dims, &t->nbytes);
}

/* Llama-3 rope scaling: per frequency pair a divisor for the wavelength, as
 * llama.cpp's converter stores it in rope_freqs.weight: 1 for short
 * wavelengths, the factor for long ones, a smooth blend between. */
static tela_status llama3_factors(mk_plan *pl) {
    const preset *p = pl->p;
    int n = p->head_dim / 2;
    pl->rope = malloc((size_t)n * sizeof *pl->rope);
    if (!pl->rope) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    double low_wl = p->rope_orig_ctx / p->rope_low, high_wl = p->rope_orig_ctx / p->rope_high;
    for (int i = 0; i < n; i++) {
        double freq = 1.0 / pow(p->rope_theta, (double)(2 * i) / p->head_dim);
        double wl = 2.0 * M_PI / freq;
        if (wl < high_wl) pl->rope[i] = 1.0f;
        else if (wl > low_wl) pl->rope[i] = (float)p->rope_factor;
        else {
            double smooth = (p->rope_orig_ctx / wl - p->rope_low) / (p->rope_high - p->rope_low);
            pl->rope[i] = (float)(1.0 / ((1.0 - smooth) / p->rope_factor + smooth));
        }
    }
    return plan_add(pl, INIT_ROPE, 1, n, 1, "rope_freqs.weight", 0);
}

/* Tensors in the order llama.cpp's converter writes them. */
static tela_status plan_llama(mk_plan *pl) {
    const preset *p = pl->p;
    int64_t q = (int64_t)p->n_head * p->head_dim, kv = (int64_t)p->n_head_kv * p->head_dim;
    if (p->rope_factor > 0) TELA_TRY(llama3_factors(pl));
    TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->n_vocab, "token_embd.weight", 0));
    if (!p->tied) TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->n_vocab, "output.weight", 0));
    for (int l = 0; l < p->n_layer; l++) {
        TELA_TRY(plan_add(pl, INIT_NORM, 1, p->n_embd, 1, "blk.%d.attn_norm.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_ff, p->n_embd, "blk.%d.ffn_down.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->n_ff, "blk.%d.ffn_gate.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->n_ff, "blk.%d.ffn_up.weight", l));
        TELA_TRY(plan_add(pl, INIT_NORM, 1, p->n_embd, 1, "blk.%d.ffn_norm.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, kv, "blk.%d.attn_k.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, q, p->n_embd, "blk.%d.attn_output.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, q, "blk.%d.attn_q.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, kv, "blk.%d.attn_v.weight", l));
    }
    return plan_add(pl, INIT_NORM, 1, p->n_embd, 1, "output_norm.weight", 0);
}

/* Qwen3.5 as llama.cpp's converter (and tela convert) lays it out: Gated
 * DeltaNet layers with attn_qkv (q, k, v rows), attn_gate (z), ssm_alpha /
 * ssm_beta (a, b), ssm_out, ssm_conv1d ({kernel, channels}), ssm_a, ssm_dt
 * and ssm_norm; every interval-th layer gated full attention, attn_q holding
 * query and gate rows per head. Norms are stored with their +1. */
static tela_status plan_qwen35(mk_plan *pl) {
    const preset *p = pl->p;
    int64_t key_dim = (int64_t)p->ssm_k_heads * p->ssm_k_dim, value_dim = (int64_t)p->ssm_v_heads * p->ssm_v_dim;
    int64_t conv_dim = 2 * key_dim + value_dim;
    int64_t q = (int64_t)p->n_head * p->head_dim, kv = (int64_t)p->n_head_kv * p->head_dim;
    TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->n_vocab, "token_embd.weight", 0));
    if (!p->tied) TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->n_vocab, "output.weight", 0));
    for (int l = 0; l < p->n_layer; l++) {
        bool full = (l + 1) % p->interval == 0;
        TELA_TRY(plan_add(pl, INIT_NORM, 1, p->n_embd, 1, "blk.%d.attn_norm.weight", l));
        if (!full) {
            TELA_TRY(plan_add(pl, INIT_SSM_A, 1, p->ssm_v_heads, 1, "blk.%d.ssm_a", l));
            TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->conv_kernel, conv_dim, "blk.%d.ssm_conv1d.weight", l));
            TELA_TRY(plan_add(pl, INIT_ONES, 1, p->ssm_v_heads, 1, "blk.%d.ssm_dt.bias", l));
            TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->ssm_v_heads, "blk.%d.ssm_alpha.weight", l));
            TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->ssm_v_heads, "blk.%d.ssm_beta.weight", l));
            TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, conv_dim, "blk.%d.attn_qkv.weight", l));
            TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, value_dim, "blk.%d.attn_gate.weight", l));
            TELA_TRY(plan_add(pl, INIT_NORM, 1, p->ssm_v_dim, 1, "blk.%d.ssm_norm.weight", l));
            TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, value_dim, p->n_embd, "blk.%d.ssm_out.weight", l));
        }
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_ff, p->n_embd, "blk.%d.ffn_down.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->n_ff, "blk.%d.ffn_gate.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->n_ff, "blk.%d.ffn_up.weight", l));
        TELA_TRY(plan_add(pl, INIT_NORM, 1, p->n_embd, 1, "blk.%d.post_attention_norm.weight", l));
        if (full) {
            TELA_TRY(plan_add(pl, INIT_NORM, 1, p->head_dim, 1, "blk.%d.attn_k_norm.weight", l));
            TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, kv, "blk.%d.attn_k.weight", l));
            TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, q, p->n_embd, "blk.%d.attn_output.weight", l));
            TELA_TRY(plan_add(pl, INIT_NORM, 1, p->head_dim, 1, "blk.%d.attn_q_norm.weight", l));
            TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, 2 * q, "blk.%d.attn_q.weight", l));
            TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, kv, "blk.%d.attn_v.weight", l));
        }
    }
    /* the MTP block as llama.cpp's converter writes it: a full-attention
     * layer numbered after the others, plus its nextn.* tensors */
    for (int l = p->n_layer; l < p->n_layer + p->n_mtp; l++) {
        TELA_TRY(plan_add(pl, INIT_NORM, 1, p->n_embd, 1, "blk.%d.attn_norm.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_ff, p->n_embd, "blk.%d.ffn_down.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->n_ff, "blk.%d.ffn_gate.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, p->n_ff, "blk.%d.ffn_up.weight", l));
        TELA_TRY(plan_add(pl, INIT_NORM, 1, p->n_embd, 1, "blk.%d.post_attention_norm.weight", l));
        TELA_TRY(plan_add(pl, INIT_NORM, 1, p->head_dim, 1, "blk.%d.attn_k_norm.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, kv, "blk.%d.attn_k.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, q, p->n_embd, "blk.%d.attn_output.weight", l));
        TELA_TRY(plan_add(pl, INIT_NORM, 1, p->head_dim, 1, "blk.%d.attn_q_norm.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, 2 * q, "blk.%d.attn_q.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, p->n_embd, kv, "blk.%d.attn_v.weight", l));
        TELA_TRY(plan_add(pl, INIT_WEIGHT, 2, 2 * (int64_t)p->n_embd, p->n_embd, "blk.%d.nextn.eh_proj.weight", l));
        TELA_TRY(plan_add(pl, INIT_NORM, 1, p->n_embd, 1, "blk.%d.nextn.enorm.weight", l));
        TELA_TRY(plan_add(pl, INIT_NORM, 1, p->n_embd, 1, "blk.%d.nextn.hnorm.weight", l));
        TELA_TRY(plan_add(pl, INIT_NORM, 1, p->n_embd, 1, "blk.%d.nextn.shared_head_norm.weight", l));
    }
    return plan_add(pl, INIT_NORM, 1, p->n_embd, 1, "output_norm.weight", 0);
}

/* ------------------------------------------------------------- metadata */

static const char *akey(const preset *p, const char *suffix) {
    static char buf[128];
    snprintf(buf, sizeof buf, "%s.%s", p->arch, suffix);
    return buf;
}

/* llama.cpp's general.file_type: ALL_F32, MOSTLY_F16, MOSTLY_Q8_0, MOSTLY_BF16 */
static int file_type_of(tela_type t) {
    return t == TELA_TYPE_F32 ? 0 : t == TELA_TYPE_F16 ? 1 : t == TELA_TYPE_Q8_0 ? 7 : 32;
}

/* The keys of llama.cpp's converter, in its order. */
static tela_status add_model_keys(tela_gguf_writer *w, const mk_plan *pl) {
    const preset *p = pl->p;
    bool qwen = !strcmp(p->arch, "qwen35");
    TELA_TRY(tela_gguf_writer_add_str(w, "general.architecture", p->arch));
    TELA_TRY(tela_gguf_writer_add_str(w, "general.type", "model"));
    TELA_TRY(tela_gguf_writer_add_str(w, "general.name", p->title));
    TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "block_count"), (uint32_t)(p->n_layer + p->n_mtp)));
    TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "context_length"), (uint32_t)p->n_ctx));
    TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "embedding_length"), (uint32_t)p->n_embd));
    TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "feed_forward_length"), (uint32_t)p->n_ff));
    TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "attention.head_count"), (uint32_t)p->n_head));
    TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "attention.head_count_kv"), (uint32_t)p->n_head_kv));
    if (qwen)
        TELA_TRY(tela_gguf_writer_add_arr(w, akey(p, "rope.dimension_sections"), TELA_GGUF_INT32, p->mrope, 4));
    TELA_TRY(tela_gguf_writer_add_f32(w, akey(p, "rope.freq_base"), (float)p->rope_theta));
    TELA_TRY(tela_gguf_writer_add_f32(w, akey(p, "attention.layer_norm_rms_epsilon"), (float)p->rms_eps));
    TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "attention.key_length"), (uint32_t)p->head_dim));
    TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "attention.value_length"), (uint32_t)p->head_dim));
    TELA_TRY(tela_gguf_writer_add_u32(w, "general.file_type", (uint32_t)file_type_of(pl->wtype)));
    if (qwen) {
        TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "ssm.conv_kernel"), (uint32_t)p->conv_kernel));
        TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "ssm.state_size"), (uint32_t)p->ssm_k_dim));
        TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "ssm.group_count"), (uint32_t)p->ssm_k_heads));
        TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "ssm.time_step_rank"), (uint32_t)p->ssm_v_heads));
        TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "ssm.inner_size"), (uint32_t)(p->ssm_v_heads * p->ssm_v_dim)));
        TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "full_attention_interval"), (uint32_t)p->interval));
        if (p->n_mtp) TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "nextn_predict_layers"), (uint32_t)p->n_mtp));
        TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "rope.dimension_count"),
                                          (uint32_t)(p->head_dim * p->partial_rotary)));
    } else {
        TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "vocab_size"), (uint32_t)p->n_vocab));
        TELA_TRY(tela_gguf_writer_add_u32(w, akey(p, "rope.dimension_count"), (uint32_t)p->head_dim));
    }
    return tela_gguf_writer_add_u32(w, "general.quantization_version", 2);
}

/* Copies the tokenizer.* keys of src. Token lists shorter than the model's
 * vocabulary are padded as llama.cpp's converter pads them: "[PADn]"
 * tokens of type 5 (unused), score 0. */
typedef struct vocab_pad {
    tela_gguf_str *strs;
    char *names;
    void *raw;
} vocab_pad;

static tela_status copy_vocab(tela_gguf_writer *w, const tela_gguf *src, int64_t n_vocab, vocab_pad *pad) {
    const tela_gguf_value *toks;
    if (tela_gguf_get_arr(src, "tokenizer.ggml.tokens", &toks) != TELA_OK || toks->v.arr.elem_type != TELA_GGUF_STRING)
        return tela_errorf(TELA_ERR_FORMAT, "%s: no tokenizer.ggml.tokens string array to copy", src->path);
    uint64_t n = toks->v.arr.n;
    if (n > (uint64_t)n_vocab)
        return tela_errorf(TELA_ERR_ARG, "%s has %llu tokens, more than the model's vocabulary of %lld", src->path,
                           (unsigned long long)n, (long long)n_vocab);
    size_t extra = (size_t)((uint64_t)n_vocab - n);
    pad->strs = calloc((size_t)n_vocab, sizeof *pad->strs);
    pad->names = malloc(extra * 16 + 1);
    pad->raw = calloc((size_t)n_vocab, 4);
    if (!pad->strs || !pad->names || !pad->raw) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    memcpy(pad->strs, toks->v.arr.strs, (size_t)n * sizeof *pad->strs);
    char *q = pad->names;
    for (size_t i = 0; i < extra; i++) {
        int len = snprintf(q, 16, "[PAD%llu]", (unsigned long long)(n + i));
        pad->strs[n + i].ptr = q;
        pad->strs[n + i].len = (uint64_t)len;
        q += len;
    }
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const tela_gguf_kv *kv = &src->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10)) continue;
        bool per_token = kv->value.type == TELA_GGUF_ARRAY && kv->value.v.arr.n == n &&
                         (!strcmp(kv->key, "tokenizer.ggml.tokens") || !strcmp(kv->key, "tokenizer.ggml.token_type") ||
                          !strcmp(kv->key, "tokenizer.ggml.scores"));
        if (!per_token || extra == 0) {
            TELA_TRY(tela_gguf_writer_copy_kv(w, kv));
            continue;
        }
        tela_gguf_kv padded = *kv;
        padded.value.v.arr.n = (uint64_t)n_vocab;
        if (!strcmp(kv->key, "tokenizer.ggml.tokens")) {
            padded.value.v.arr.strs = pad->strs;
        } else {
            tela_gguf_vtype et = kv->value.v.arr.elem_type;
            if (et != TELA_GGUF_INT32 && et != TELA_GGUF_FLOAT32)
                return tela_errorf(TELA_ERR_FORMAT, "%s: %s has an unexpected element type", src->path, kv->key);
            memcpy(pad->raw, kv->value.v.arr.raw, (size_t)n * 4);
            for (size_t k = 0; k < extra; k++) {
                if (et == TELA_GGUF_INT32) {
                    int32_t unused = 5;
                    memcpy((char *)pad->raw + (n + k) * 4, &unused, 4);
                } else {
                    float zero = 0.0f;
                    memcpy((char *)pad->raw + (n + k) * 4, &zero, 4);
                }
            }
            padded.value.v.arr.raw = pad->raw;
        }
        TELA_TRY(tela_gguf_writer_copy_kv(w, &padded));
    }
    return TELA_OK;
}

/* ---------------------------------------------------------- generating */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Value i of tensor key: a standard-normal-like number from one 64-bit hash
 * (four 16-bit uniforms summed: mean 2, variance 1/3, rescaled). */
static inline float normalish(uint64_t key, uint64_t i) {
    uint64_t h = mix64(key + i * 0x9e3779b97f4a7c15ull);
    double s = (double)(h & 0xffff) + (double)((h >> 16) & 0xffff) + (double)((h >> 32) & 0xffff) + (double)(h >> 48);
    return (float)((s / 65536.0 - 2.0) * 1.7320508075688772);
}

static inline float uniform01(uint64_t key, uint64_t i) {
    return (float)((double)(mix64(key + i * 0x9e3779b97f4a7c15ull) >> 11) / 9007199254740992.0);
}

static uint64_t name_key(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull ^ mix64(seed);
    for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return mix64(h);
}

static float value_at(const mk_plan *pl, const mk_tensor *t, uint64_t key, int64_t i) {
    switch (t->init) {
    case INIT_NORM: return 1.0f + 0.02f * normalish(key, (uint64_t)i);
    case INIT_SSM_A: return -(1.0f + 15.0f * uniform01(key, (uint64_t)i));
    case INIT_ONES: return 1.0f;
    case INIT_ROPE: return pl->rope[i];
    default: return 0.02f * normalish(key, (uint64_t)i);
    }
}

typedef struct gen_job {
    const mk_plan *pl;
    const mk_tensor *t;
    int fd;
    const char *scratch;
    int64_t rows, rows_per_chunk, n_chunks;
    int64_t next;    /* atomic chunk counter */
    int failed;      /* atomic */
    char message[256];
} gen_job;

static void *gen_worker(void *arg) {
    gen_job *j = arg;
    const mk_tensor *t = j->t;
    uint64_t key = name_key(j->pl->seed, t->name);
    int64_t ne0 = t->ne[0];
    size_t rb = tela_type_row_bytes(t->type, ne0);
    float *x = malloc((size_t)ne0 * sizeof *x);
    unsigned char *buf = malloc((size_t)j->rows_per_chunk * rb);
    if (!x || !buf) {
        snprintf(j->message, sizeof j->message, "out of memory");
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    }
    while (x && buf && !__atomic_load_n(&j->failed, __ATOMIC_RELAXED)) {
        int64_t c = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (c >= j->n_chunks) break;
        int64_t r0 = c * j->rows_per_chunk, nr = j->rows - r0 < j->rows_per_chunk ? j->rows - r0 : j->rows_per_chunk;
        for (int64_t r = 0; r < nr; r++) {
            for (int64_t k = 0; k < ne0; k++) x[k] = value_at(j->pl, t, key, (r0 + r) * ne0 + k);
            tela_quantize_row(t->type, x, buf + (size_t)r * rb, ne0);
        }
        size_t n = (size_t)nr * rb, done = 0;
        while (done < n) {
            ssize_t k = pwrite(j->fd, buf + done, n - done, (off_t)(t->offset + (uint64_t)r0 * rb + done));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) {
                snprintf(j->message, sizeof j->message, "%s: write failed: %s", j->scratch,
                         k < 0 ? strerror(errno) : "no space");
                __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
                break;
            }
            done += (size_t)k;
        }
    }
    free(x);
    free(buf);
    return NULL;
}

static tela_status generate(const mk_plan *pl, const mk_tensor *t, int fd, const char *scratch, int n_threads) {
    gen_job j;
    memset(&j, 0, sizeof j);
    j.pl = pl;
    j.t = t;
    j.fd = fd;
    j.scratch = scratch;
    j.rows = t->ne[1] * t->ne[2] * t->ne[3];
    j.rows_per_chunk = t->ne[0] >= 65536 ? 1 : 65536 / t->ne[0];
    j.n_chunks = (j.rows + j.rows_per_chunk - 1) / j.rows_per_chunk;
    int n = n_threads < (int)j.n_chunks ? n_threads : (int)j.n_chunks;
    pthread_t th[256];
    int started = 0;
    for (int i = 0; i < n - 1 && i < 256; i++)
        if (pthread_create(&th[i], NULL, gen_worker, &j) == 0) started++;
    gen_worker(&j);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (j.failed) return tela_errorf(TELA_ERR_IO, "tensor %s: %s", t->name, j.message);
    return TELA_OK;
}

/* ---------------------------------------------------------------- main */

static void usage(FILE *f) {
    fprintf(f, "usage: tela-mkmodel PRESET -o OUT.gguf [--type f16|f32|bf16|q8_0] [--vocab-from FILE.gguf]\n"
               "                    [--seed N] [--layers N] [--mtp] [--gdn-heads K,V]\n"
               "                    [--threads N] [-q]\n\n"
               "Writes a GGUF model with random weights at the shape of a real one, for\n"
               "benchmarks: llama.cpp's tensor names, shapes and keys, weights N(0, 0.02)-like,\n"
               "norms about 1, deterministic for a seed. Quantize it with 'tela quantize'.\n\n"
               "presets:\n");
    for (size_t i = 0; i < N_PRESETS; i++) fprintf(f, "  %-14s %s\n", PRESETS[i].name, PRESETS[i].what);
    fprintf(f, "\noptions:\n"
               "  -o FILE             the GGUF file to write\n"
               "  --type T            type of the weight matrices: f16 (default), f32, bf16 or q8_0\n"
               "                      (q8_0: a 27B shape in half the disk of f16; requantize it\n"
               "                      with tela quantize --allow-requantize)\n"
               "  --vocab-from FILE   copy the tokenizer.* metadata of this GGUF file (padded\n"
               "                      with [PADn] tokens up to the model's vocabulary)\n"
               "  --seed N            random seed (default 1)\n"
               "  --layers N          override the number of layers\n"
               "  --mtp               Qwen3.5 presets: add one multi-token-prediction (nextn) block,\n"
               "                      for measuring speculative decoding with --spec mtp\n"
               "  --gdn-heads K,V     Qwen3.5 presets: K Gated DeltaNet key heads and V value heads\n"
               "                      (a multiple of K) instead of the preset's\n"
               "  --threads N         threads (default: all cores)\n"
               "  -q                  no progress line\n");
}

static double mib(uint64_t n) { return (double)n / (1024.0 * 1024.0); }

static int run(const preset *p, const char *out, tela_type wtype, const char *vocab_from, uint64_t seed,
               int n_threads, int quiet) {
    mk_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.p = p;
    pl.wtype = wtype;
    pl.seed = seed;
    vocab_pad pad = {0};
    tela_gguf *voc = NULL;
    tela_gguf_writer *w = tela_gguf_writer_create();
    int fd = -1;
    unsigned char *map = NULL;
    uint64_t total = 0;
    char scratch[4096];
    snprintf(scratch, sizeof scratch, "%s.mkmodel-scratch.%ld", out, (long)getpid());
    tela_status st = w ? TELA_OK : tela_errorf(TELA_ERR_NOMEM, "out of memory");
    if (st == TELA_OK) st = !strcmp(p->arch, "qwen35") ? plan_qwen35(&pl) : plan_llama(&pl);
    if (st == TELA_OK) st = add_model_keys(w, &pl);
    if (st == TELA_OK && vocab_from) {
        st = tela_gguf_open(vocab_from, &voc);
        if (st == TELA_OK) st = copy_vocab(w, voc, p->n_vocab, &pad);
    }
    for (size_t i = 0; st == TELA_OK && i < pl.n; i++) {
        pl.t[i].offset = total;
        total += ((uint64_t)pl.t[i].nbytes + 63) & ~(uint64_t)63;
    }
    if (st == TELA_OK) {
        fd = open(scratch, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) st = tela_errorf(TELA_ERR_IO, "%s: cannot create: %s", scratch, strerror(errno));
        else unlink(scratch);
    }
    if (st == TELA_OK) {
        int e = posix_fallocate(fd, 0, (off_t)total);
        if (e) st = tela_errorf(TELA_ERR_IO, "%s: cannot reserve %.1f MiB: %s", scratch, mib(total), strerror(e));
    }
    bool tty = !quiet && isatty(2);
    for (size_t i = 0; st == TELA_OK && i < pl.n; i++) {
        if (tty) {
            fprintf(stderr, "\r\033[K[%4zu/%4zu] %-36s %s", i + 1, pl.n, pl.t[i].name, tela_type_name(pl.t[i].type));
            fflush(stderr);
        }
        st = generate(&pl, &pl.t[i], fd, scratch, n_threads);
    }
    if (tty) fputc('\n', stderr);
    if (st == TELA_OK) {
        map = mmap(NULL, (size_t)total, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            st = tela_errorf(TELA_ERR_IO, "%s: mmap failed: %s", scratch, strerror(errno));
        }
    }
    uint64_t n_params = 0;
    for (size_t i = 0; st == TELA_OK && i < pl.n; i++) {
        const mk_tensor *t = &pl.t[i];
        st = tela_gguf_writer_add_tensor(w, t->name, t->type, t->ne, t->n_dims, map + t->offset, t->nbytes);
        n_params += (uint64_t)(t->ne[0] * t->ne[1]);
    }
    if (st == TELA_OK) st = tela_gguf_writer_write(w, out);
    if (st != TELA_OK) fprintf(stderr, "tela-mkmodel: %s\n", tela_last_error());
    else if (!quiet)
        fprintf(stderr, "tela-mkmodel: wrote %s: %s, %d layers, %.3f B parameters, %s weights, %.1f MiB of tensors\n",
                out, p->name, p->n_layer, (double)n_params * 1e-9, tela_type_name(wtype), mib(total));
    if (map) munmap(map, (size_t)total);
    if (fd >= 0) close(fd);
    tela_gguf_writer_free(w);
    tela_gguf_close(voc);
    free(pad.strs);
    free(pad.names);
    free(pad.raw);
    free(pl.t);
    free(pl.rope);
    return st == TELA_OK ? 0 : 1;
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "tela-mkmodel: %s needs an integer in [%ld, %ld]\n", opt, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    const char *name = NULL, *out = NULL, *vocab = NULL;
    tela_type wtype = TELA_TYPE_F16;
    long seed = 1, layers = 0, threads = sysconf(_SC_NPROCESSORS_ONLN), gdn_k = 0, gdn_v = 0;
    int quiet = 0, mtp = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!v) { fprintf(stderr, "tela-mkmodel: -o needs a file name\n"); return 2; }
            out = v, i++;
        } else if (!strcmp(a, "--type")) {
            if (v && !strcasecmp(v, "f16")) wtype = TELA_TYPE_F16;
            else if (v && !strcasecmp(v, "f32")) wtype = TELA_TYPE_F32;
            else if (v && !strcasecmp(v, "bf16")) wtype = TELA_TYPE_BF16;
            else if (v && !strcasecmp(v, "q8_0")) wtype = TELA_TYPE_Q8_0;
            else { fprintf(stderr, "tela-mkmodel: --type must be f16, f32, bf16 or q8_0\n"); return 2; }
            i++;
        } else if (!strcmp(a, "--vocab-from")) {
            if (!v) { fprintf(stderr, "tela-mkmodel: --vocab-from needs a GGUF file\n"); return 2; }
            vocab = v, i++;
        } else if (!strcmp(a, "--seed")) {
            if (parse_long(a, v, 0, 0x7fffffffL, &seed)) return 2;
            i++;
        } else if (!strcmp(a, "--layers")) {
            if (parse_long(a, v, 1, 1024, &layers)) return 2;
            i++;
        } else if (!strcmp(a, "--gdn-heads")) {
            char *end = NULL;
            gdn_k = v ? strtol(v, &end, 10) : 0;
            if (end && *end == ',') gdn_v = strtol(end + 1, &end, 10);
            if (!v || !end || *end || gdn_k < 1 || gdn_v < gdn_k || gdn_k > 256 || gdn_v > 1024 || gdn_v % gdn_k) {
                fprintf(stderr, "tela-mkmodel: --gdn-heads needs K,V: key heads and a multiple of them as value "
                                "heads (e.g. 4,8)\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (parse_long(a, v, 1, 256, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "--mtp")) {
            mtp = 1;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "tela-mkmodel: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        } else if (!name) {
            name = a;
        } else {
            fprintf(stderr, "tela-mkmodel: more than one preset ('%s' and '%s')\n", name, a);
            return 2;
        }
    }
    if (!name || !out) {
        fprintf(stderr, "tela-mkmodel: %s\n\n", !name ? "no preset given" : "no output file given (-o OUT.gguf)");
        usage(stderr);
        return 2;
    }
    const preset *p = NULL;
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcasecmp(name, PRESETS[i].name)) p = &PRESETS[i];
    if (!p) {
        fprintf(stderr, "tela-mkmodel: unknown preset '%s'\n\n", name);
        usage(stderr);
        return 2;
    }
    preset custom = *p;
    if (layers) custom.n_layer = (int)layers;
    if (mtp) {
        if (strcmp(custom.arch, "qwen35")) {
            fprintf(stderr, "tela-mkmodel: --mtp needs a Qwen3.5 preset ('%s' has no MTP block)\n", custom.name);
            return 2;
        }
        custom.n_mtp = 1;
    }
    if (gdn_k) {
        if (strcmp(custom.arch, "qwen35")) {
            fprintf(stderr, "tela-mkmodel: --gdn-heads needs a Qwen3.5 preset ('%s' has no Gated DeltaNet)\n",
                    custom.name);
            return 2;
        }
        custom.ssm_k_heads = (int)gdn_k;
        custom.ssm_v_heads = (int)gdn_v;
    }
    if (threads < 1) threads = 1;
    return run(&custom, out, wtype, vocab, (uint64_t)seed, (int)threads, quiet);
}
