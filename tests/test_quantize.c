/* test_quantize.c: tela quantize (GGUF -> GGUF, llama-quantize's rules).
 * Small GGUF files are written here with the GGUF writer, with the tensor
 * names of llama and qwen35 files and row lengths chosen to reach every rule:
 *  (a) each tensor's output type equals a table worked out by hand from
 *      llama.cpp's llama_tensor_get_type (src/llama-quant.cpp): the tied /
 *      untied output rule, use_more_bits layers for attn_v-like (attn_v and
 *      Qwen3.5's attn_qkv share one counter) and ffn_down, the _S rules, the
 *      GQA rule of Q2_K, the row-length fallbacks (Q4_K->Q5_0, Q5_K->Q5_1,
 *      Q6_K->Q8_0, Q3_K->Q4_0, then F16), tensors that never change (1-D,
 *      norms, ssm_conv1d); and the output order (block number, then name);
 *  (b) converted data equals tela_quantize_row of the source row, row by
 *      row, copied data equals the source, and the dequantized result is
 *      within the type's expected error of the source;
 *  (c) --threads 1 and 3 give byte-identical files (and the same error
 *      sums when measuring the quantization error);
 *  (d) metadata is carried in order, split keys dropped, then
 *      general.quantization_version = 2 and general.file_type = llama.cpp's
 *      ftype number;
 *  (e) errors: unknown type names, input that is not GGUF or is truncated,
 *      a row length with no fallback (Q8_0 of 80-element rows), a NaN weight,
 *      requantization without permission, an output directory that does not
 *      exist and a full disk (RLIMIT_FSIZE) fail cleanly and leave no file. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/quantize.h"
#include "format/gguf.h"
#include "quant/quant.h"
#include "test.h"
#include "util/fp16.h"

static char g_dir[256];

static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Number of directory entries (other than . and ..) whose name starts with
 * prefix: temporary and scratch files are named after the output. */
static int count_files(const char *prefix) {
    DIR *d = opendir(g_dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    closedir(d);
    return n;
}

/* ------------------------------------------------------ model builder */

#define MAX_T 256

typedef struct model_def {
    int n;
    char name[MAX_T][64];
    tela_type type[MAX_T];
    int n_dims[MAX_T];
    int64_t ne[MAX_T][4];
    void *data[MAX_T];
    size_t nbytes[MAX_T];
} model_def;

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static float rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Adds a tensor of random values (weights ~0.03, with a few larger ones so
 * blocks differ in scale; 1-D tensors around 1 like norms). */
static void add_t(model_def *m, tela_type type, int n_dims, int64_t ne0, int64_t ne1, const char *fmt, int layer) {
    int i = m->n++;
    snprintf(m->name[i], sizeof m->name[i], fmt, layer);
    m->type[i] = type;
    m->n_dims[i] = n_dims;
    m->ne[i][0] = ne0;
    m->ne[i][1] = n_dims > 1 ? ne1 : 1;
    m->ne[i][2] = m->ne[i][3] = 1;
    int64_t n = ne0 * m->ne[i][1];
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t k = 0; k < n; k++) {
        float v = rnd() * 0.03f;
        if (k % 97 == 5) v *= 8.0f;
        x[k] = n_dims == 1 ? 1.0f + v : v;
    }
    size_t rb = tela_type_row_bytes(type, ne0);
    m->nbytes[i] = rb * (size_t)m->ne[i][1];
    m->data[i] = malloc(m->nbytes[i]);
    for (int64_t r = 0; r < m->ne[i][1]; r++)
        tela_quantize_row(type, x + r * ne0, (unsigned char *)m->data[i] + (size_t)r * rb, ne0);
    free(x);
}

static void free_model(model_def *m) {
    for (int i = 0; i < m->n; i++) free(m->data[i]);
    m->n = 0;
}

static void write_model(const model_def *m, tela_gguf_writer *w, const char *path) {
    for (int i = 0; i < m->n; i++)
        CHECK_OK(tela_gguf_writer_add_tensor(w, m->name[i], m->type[i], m->ne[i], m->n_dims[i], m->data[i],
                                             m->nbytes[i]));
    CHECK_OK(tela_gguf_writer_write(w, path));
    tela_gguf_writer_free(w);
}

/* A u16 key (the writer has no add_u16; copy_kv takes any value). */
static void add_u16(tela_gguf_writer *w, const char *key, uint16_t v) {
    tela_gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.key = (char *)key;
    kv.value.type = TELA_GGUF_UINT16;
    kv.value.v.u64 = v;
    CHECK_OK(tela_gguf_writer_copy_kv(w, &kv));
}

/* Llama, 8 layers: hidden 256, 4 query heads of 16 (attn_output rows of 64),
 * 1 KV head (GQA 4), ff 32 (ffn_down rows of 32), vocab 32, untied output.
 * Tensors in llama.cpp's converter order (not the sorted order). */
#define LL_LAYERS 8
static void build_llama(const char *path) {
    static model_def m;
    m.n = 0;
    tela_gguf_writer *w = tela_gguf_writer_create();
    CHECK_OK(tela_gguf_writer_add_str(w, "general.architecture", "llama"));
    CHECK_OK(tela_gguf_writer_add_str(w, "general.name", "Quantize Test Llama"));
    CHECK_OK(tela_gguf_writer_add_u32(w, "llama.block_count", LL_LAYERS));
    CHECK_OK(tela_gguf_writer_add_u32(w, "llama.embedding_length", 256));
    CHECK_OK(tela_gguf_writer_add_u32(w, "llama.feed_forward_length", 32));
    CHECK_OK(tela_gguf_writer_add_u32(w, "llama.attention.head_count", 4));
    CHECK_OK(tela_gguf_writer_add_u32(w, "llama.attention.head_count_kv", 1));
    CHECK_OK(tela_gguf_writer_add_f32(w, "llama.rope.freq_base", 500000.0f));
    CHECK_OK(tela_gguf_writer_add_u32(w, "general.file_type", 1));
    add_u16(w, "split.no", 0);
    add_u16(w, "split.count", 1);
    CHECK_OK(tela_gguf_writer_add_u32(w, "general.quantization_version", 2));
    static const char *const toks[] = {"a", "b", "c"};
    CHECK_OK(tela_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, 3));
    static const int32_t tt[] = {1, 1, 3};
    CHECK_OK(tela_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", TELA_GGUF_INT32, tt, 3));
    CHECK_OK(tela_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true));

    add_t(&m, TELA_TYPE_F32, 1, 8, 1, "rope_freqs.weight", 0);
    add_t(&m, TELA_TYPE_F16, 2, 256, 32, "token_embd.weight", 0);
    for (int l = 0; l < LL_LAYERS; l++) {
        add_t(&m, TELA_TYPE_F32, 1, 256, 1, "blk.%d.attn_norm.weight", l);
        add_t(&m, TELA_TYPE_F16, 2, 32, 256, "blk.%d.ffn_down.weight", l);
        add_t(&m, TELA_TYPE_F16, 2, 256, 32, "blk.%d.ffn_gate.weight", l);
        add_t(&m, TELA_TYPE_F16, 2, 256, 32, "blk.%d.ffn_up.weight", l);
        add_t(&m, TELA_TYPE_F32, 1, 256, 1, "blk.%d.ffn_norm.weight", l);
        add_t(&m, TELA_TYPE_F16, 2, 256, 16, "blk.%d.attn_k.weight", l);
        add_t(&m, TELA_TYPE_F16, 2, 64, 256, "blk.%d.attn_output.weight", l);
        add_t(&m, TELA_TYPE_F16, 2, 256, 64, "blk.%d.attn_q.weight", l);
        add_t(&m, TELA_TYPE_F16, 2, 256, 16, "blk.%d.attn_v.weight", l);
    }
    add_t(&m, TELA_TYPE_F32, 1, 256, 1, "output_norm.weight", 0);
    add_t(&m, TELA_TYPE_F32, 2, 256, 32, "output.weight", 0);
    write_model(&m, w, path);
    free_model(&m);
}

/* Qwen3.5 hybrid, 8 layers (full attention every 4th: layers 3 and 7):
 * hidden 256; Gated DeltaNet with 2 key heads of 32 and 4 value heads of 24
 * (attn_qkv rows 2*64+96 = 224, ssm_out rows of 96); attention 2 heads of 64
 * (attn_q with its gate: 256 rows; attn_output rows of 128), 1 KV head;
 * ff 32 (ffn_down rows of 32); vocab 32, tied embeddings. Tensors in
 * llama.cpp's converter order. */
#define QW_LAYERS 8
static void build_qwen(const char *path) {
    static model_def m;
    m.n = 0;
    tela_gguf_writer *w = tela_gguf_writer_create();
    CHECK_OK(tela_gguf_writer_add_str(w, "general.architecture", "qwen35"));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.block_count", QW_LAYERS));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.embedding_length", 256));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.attention.head_count", 2));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.attention.head_count_kv", 1));
    static const int32_t sec[4] = {11, 11, 10, 0};
    CHECK_OK(tela_gguf_writer_add_arr(w, "qwen35.rope.dimension_sections", TELA_GGUF_INT32, sec, 4));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.ssm.conv_kernel", 4));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.ssm.group_count", 2));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.ssm.time_step_rank", 4));
    CHECK_OK(tela_gguf_writer_add_u32(w, "qwen35.full_attention_interval", 4));
    add_t(&m, TELA_TYPE_F16, 2, 256, 32, "token_embd.weight", 0);
    for (int l = 0; l < QW_LAYERS; l++) {
        bool full = (l + 1) % 4 == 0;
        add_t(&m, TELA_TYPE_F32, 1, 256, 1, "blk.%d.attn_norm.weight", l);
        if (!full) {
            add_t(&m, TELA_TYPE_F32, 1, 4, 1, "blk.%d.ssm_a", l);
            add_t(&m, TELA_TYPE_F32, 2, 4, 224, "blk.%d.ssm_conv1d.weight", l);
            add_t(&m, TELA_TYPE_F32, 1, 4, 1, "blk.%d.ssm_dt.bias", l);
            add_t(&m, TELA_TYPE_F16, 2, 256, 4, "blk.%d.ssm_alpha.weight", l);
            add_t(&m, TELA_TYPE_F16, 2, 256, 4, "blk.%d.ssm_beta.weight", l);
            add_t(&m, TELA_TYPE_F16, 2, 256, 224, "blk.%d.attn_qkv.weight", l);
            add_t(&m, TELA_TYPE_F16, 2, 256, 96, "blk.%d.attn_gate.weight", l);
            add_t(&m, TELA_TYPE_F32, 1, 24, 1, "blk.%d.ssm_norm.weight", l);
            add_t(&m, TELA_TYPE_F16, 2, 96, 256, "blk.%d.ssm_out.weight", l);
        }
        add_t(&m, TELA_TYPE_F16, 2, 32, 256, "blk.%d.ffn_down.weight", l);
        add_t(&m, TELA_TYPE_F16, 2, 256, 32, "blk.%d.ffn_gate.weight", l);
        add_t(&m, TELA_TYPE_F16, 2, 256, 32, "blk.%d.ffn_up.weight", l);
        add_t(&m, TELA_TYPE_F32, 1, 256, 1, "blk.%d.post_attention_norm.weight", l);
        if (full) {
            add_t(&m, TELA_TYPE_F32, 1, 64, 1, "blk.%d.attn_k_norm.weight", l);
            add_t(&m, TELA_TYPE_F16, 2, 256, 64, "blk.%d.attn_k.weight", l);
            add_t(&m, TELA_TYPE_F16, 2, 128, 256, "blk.%d.attn_output.weight", l);
            add_t(&m, TELA_TYPE_F32, 1, 64, 1, "blk.%d.attn_q_norm.weight", l);
            add_t(&m, TELA_TYPE_F16, 2, 256, 256, "blk.%d.attn_q.weight", l);
            add_t(&m, TELA_TYPE_F16, 2, 256, 64, "blk.%d.attn_v.weight", l);
        }
    }
    add_t(&m, TELA_TYPE_F32, 1, 256, 1, "output_norm.weight", 0);
    write_model(&m, w, path);
    free_model(&m);
}

/* 12 layers of small tensors: block numbers past 9 (sorted as numbers, not
 * text) and use_more_bits with n = 12 (layers 0, 3, 6, 9, 10, 11), for
 * attn_v with rows of 32 and ffn_down with rows of 256. */
static void build_deep(const char *path) {
    static model_def m;
    m.n = 0;
    tela_gguf_writer *w = tela_gguf_writer_create();
    CHECK_OK(tela_gguf_writer_add_str(w, "general.architecture", "llama"));
    CHECK_OK(tela_gguf_writer_add_u32(w, "llama.block_count", 12));
    CHECK_OK(tela_gguf_writer_add_u32(w, "llama.attention.head_count", 2));
    CHECK_OK(tela_gguf_writer_add_u32(w, "llama.attention.head_count_kv", 2));
    add_t(&m, TELA_TYPE_F16, 2, 32, 8, "token_embd.weight", 0);
    for (int l = 0; l < 12; l++) {
        add_t(&m, TELA_TYPE_F16, 2, 32, 8, "blk.%d.attn_v.weight", l);
        add_t(&m, TELA_TYPE_F16, 2, 256, 4, "blk.%d.ffn_down.weight", l);
    }
    write_model(&m, w, path);
    free_model(&m);
}

/* ------------------------------------------- expected types, by hand */

/* From llama_tensor_get_type for these shapes. attn_v[l] is layer l's
 * attn_v-like tensor (attn_qkv in a Gated DeltaNet layer). "keep" marks
 * tensors whose type never changes. */
typedef struct expect {
    const char *ftype;
    const char *output, *token_embd, *attn_q, *attn_k, *attn_output, *ffn_gate, *ffn_up;
    const char *attn_v[8], *ffn_down[8];
    const char *attn_gate, *ssm_alpha, *ssm_beta, *ssm_out;  /* qwen35 only */
} expect;

/* llama: hidden 256, attn_output rows of 64, ffn_down rows of 32, GQA 4,
 * 8 layers: use_more_bits layers are 0, 3, 6, 7 (n/8 = 1, 7n/8 = 7). */
static const expect LLAMA_EXPECT[] = {
    {"Q4_K_M", "q6_K", "q4_K", "q4_K", "q4_K", "q5_0", "q4_K", "q4_K",
     {"q6_K", "q4_K", "q4_K", "q6_K", "q4_K", "q4_K", "q6_K", "q6_K"},
     {"q8_0", "q5_0", "q5_0", "q8_0", "q5_0", "q5_0", "q8_0", "q8_0"}, 0, 0, 0, 0},
    {"Q4_K_S", "q6_K", "q4_K", "q4_K", "q4_K", "q5_0", "q4_K", "q4_K",
     {"q5_K", "q5_K", "q5_K", "q5_K", "q4_K", "q4_K", "q4_K", "q4_K"},
     {"q5_1", "q5_0", "q5_0", "q5_0", "q5_0", "q5_0", "q5_0", "q5_0"}, 0, 0, 0, 0},
    {"Q5_K_M", "q6_K", "q5_K", "q5_K", "q5_K", "q5_1", "q5_K", "q5_K",
     {"q6_K", "q5_K", "q5_K", "q6_K", "q5_K", "q5_K", "q6_K", "q6_K"},
     {"q8_0", "q5_1", "q5_1", "q8_0", "q5_1", "q5_1", "q8_0", "q8_0"}, 0, 0, 0, 0},
    {"Q5_K_S", "q6_K", "q5_K", "q5_K", "q5_K", "q5_1", "q5_K", "q5_K",
     {"q5_K", "q5_K", "q5_K", "q5_K", "q5_K", "q5_K", "q5_K", "q5_K"},
     {"q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1"}, 0, 0, 0, 0},
    {"Q6_K", "q6_K", "q6_K", "q6_K", "q6_K", "q8_0", "q6_K", "q6_K",
     {"q6_K", "q6_K", "q6_K", "q6_K", "q6_K", "q6_K", "q6_K", "q6_K"},
     {"q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0"}, 0, 0, 0, 0},
    {"Q3_K_L", "q6_K", "q3_K", "q3_K", "q3_K", "q5_1", "q3_K", "q3_K",
     {"q5_K", "q5_K", "q5_K", "q5_K", "q5_K", "q5_K", "q5_K", "q5_K"},
     {"q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1"}, 0, 0, 0, 0},
    {"Q3_K_M", "q6_K", "q3_K", "q3_K", "q3_K", "q5_0", "q3_K", "q3_K",
     {"q5_K", "q5_K", "q4_K", "q4_K", "q4_K", "q4_K", "q4_K", "q4_K"},
     {"q5_0", "q5_0", "q5_0", "q5_0", "q5_0", "q5_0", "q5_0", "q5_0"}, 0, 0, 0, 0},
    {"Q3_K_S", "q6_K", "q3_K", "q3_K", "q3_K", "q4_0", "q3_K", "q3_K",
     {"q3_K", "q3_K", "q3_K", "q3_K", "q3_K", "q3_K", "q3_K", "q3_K"},
     {"q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0"}, 0, 0, 0, 0},
    {"Q2_K", "q6_K", "q2_K", "q2_K", "q2_K", "q4_0", "q2_K", "q2_K",
     {"q4_K", "q4_K", "q4_K", "q4_K", "q4_K", "q4_K", "q4_K", "q4_K"},
     {"q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0"}, 0, 0, 0, 0},
    {"Q4_0", "q6_K", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0",
     {"q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0"},
     {"q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0"}, 0, 0, 0, 0},
    {"Q5_1", "q6_K", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1",
     {"q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1"},
     {"q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1", "q5_1"}, 0, 0, 0, 0},
    {"Q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0",
     {"q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0"},
     {"q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0"}, 0, 0, 0, 0},
    {"F16", "f16", "f16", "f16", "f16", "f16", "f16", "f16",
     {"f16", "f16", "f16", "f16", "f16", "f16", "f16", "f16"},
     {"f16", "f16", "f16", "f16", "f16", "f16", "f16", "f16"}, 0, 0, 0, 0},
    {"BF16", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16",
     {"bf16", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16"},
     {"bf16", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16"}, 0, 0, 0, 0},
};

/* qwen35: tied embeddings (token_embd is the output: Q6_K), ffn_down rows
 * of 32, ssm_out rows of 96, attn_output rows of 128. The attn_v-like
 * counter runs over blk0..2 attn_qkv, blk3 attn_v, blk4..6 attn_qkv, blk7
 * attn_v = indices 0..7, so use_more_bits picks blk 0, 3, 6, 7. */
static const expect QWEN_EXPECT[] = {
    {"Q4_K_M", NULL, "q6_K", "q4_K", "q4_K", "q5_0", "q4_K", "q4_K",
     {"q6_K", "q4_K", "q4_K", "q6_K", "q4_K", "q4_K", "q6_K", "q6_K"},
     {"q8_0", "q5_0", "q5_0", "q8_0", "q5_0", "q5_0", "q8_0", "q8_0"}, "q4_K", "q4_K", "q4_K", "q5_0"},
    {"Q4_K_S", NULL, "q6_K", "q4_K", "q4_K", "q5_0", "q4_K", "q4_K",
     {"q5_K", "q5_K", "q5_K", "q5_K", "q4_K", "q4_K", "q4_K", "q4_K"},
     {"q5_1", "q5_0", "q5_0", "q5_0", "q5_0", "q5_0", "q5_0", "q5_0"}, "q4_K", "q4_K", "q4_K", "q5_0"},
    {"Q5_K_M", NULL, "q6_K", "q5_K", "q5_K", "q5_1", "q5_K", "q5_K",
     {"q6_K", "q5_K", "q5_K", "q6_K", "q5_K", "q5_K", "q6_K", "q6_K"},
     {"q8_0", "q5_1", "q5_1", "q8_0", "q5_1", "q5_1", "q8_0", "q8_0"}, "q5_K", "q5_K", "q5_K", "q5_1"},
    {"Q4_0", NULL, "q6_K", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0",
     {"q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0"},
     {"q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0", "q4_0"}, "q4_0", "q4_0", "q4_0", "q4_0"},
    {"Q8_0", NULL, "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0",
     {"q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0"},
     {"q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0"}, "q8_0", "q8_0", "q8_0", "q8_0"},
};

/* The output order, written out by hand: tensors outside blocks, then block
 * by block, names in byte order within each. */
static const char *const LLAMA_TOP[] = {"output.weight", "output_norm.weight", "rope_freqs.weight", "token_embd.weight"};
static const char *const LLAMA_BLK[] = {"attn_k.weight", "attn_norm.weight", "attn_output.weight", "attn_q.weight",
                                        "attn_v.weight", "ffn_down.weight",  "ffn_gate.weight",    "ffn_norm.weight",
                                        "ffn_up.weight"};
static const char *const QWEN_TOP[] = {"output_norm.weight", "token_embd.weight"};
static const char *const QWEN_GDN[] = {"attn_gate.weight", "attn_norm.weight", "attn_qkv.weight", "ffn_down.weight",
                                       "ffn_gate.weight", "ffn_up.weight", "post_attention_norm.weight", "ssm_a",
                                       "ssm_alpha.weight", "ssm_beta.weight", "ssm_conv1d.weight", "ssm_dt.bias",
                                       "ssm_norm.weight", "ssm_out.weight"};
static const char *const QWEN_ATT[] = {"attn_k.weight", "attn_k_norm.weight", "attn_norm.weight",
                                       "attn_output.weight", "attn_q.weight", "attn_q_norm.weight", "attn_v.weight",
                                       "ffn_down.weight", "ffn_gate.weight", "ffn_up.weight",
                                       "post_attention_norm.weight"};

typedef struct name_list {
    int n;
    char names[MAX_T][64];
} name_list;

static void expected_order(bool qwen, name_list *o) {
    o->n = 0;
    const char *const *top = qwen ? QWEN_TOP : LLAMA_TOP;
    int n_top = qwen ? 2 : 4, n_layers = qwen ? QW_LAYERS : LL_LAYERS;
    for (int i = 0; i < n_top; i++) snprintf(o->names[o->n++], 64, "%s", top[i]);
    for (int l = 0; l < n_layers; l++) {
        bool full = qwen && (l + 1) % 4 == 0;
        const char *const *blk = !qwen ? LLAMA_BLK : full ? QWEN_ATT : QWEN_GDN;
        int nb = !qwen ? 9 : full ? 11 : 14;
        for (int i = 0; i < nb; i++) snprintf(o->names[o->n++], 64, "blk.%d.%s", l, blk[i]);
    }
}

/* The expected type of a tensor, or "keep" for one that keeps its type. */
static const char *expected_type(const expect *e, const char *name) {
    int layer = -1;
    const char *part = name;
    if (!strncmp(name, "blk.", 4)) {
        layer = atoi(name + 4);
        part = strchr(name + 4, '.') + 1;
    }
    if (!strcmp(name, "output.weight")) return e->output;
    if (!strcmp(name, "token_embd.weight")) return e->token_embd;
    if (!strcmp(part, "attn_q.weight")) return e->attn_q;
    if (!strcmp(part, "attn_k.weight")) return e->attn_k;
    if (!strcmp(part, "attn_output.weight")) return e->attn_output;
    if (!strcmp(part, "ffn_gate.weight")) return e->ffn_gate;
    if (!strcmp(part, "ffn_up.weight")) return e->ffn_up;
    if (!strcmp(part, "attn_v.weight") || !strcmp(part, "attn_qkv.weight")) return e->attn_v[layer];
    if (!strcmp(part, "ffn_down.weight")) return e->ffn_down[layer];
    if (!strcmp(part, "attn_gate.weight")) return e->attn_gate;
    if (!strcmp(part, "ssm_alpha.weight")) return e->ssm_alpha;
    if (!strcmp(part, "ssm_beta.weight")) return e->ssm_beta;
    if (!strcmp(part, "ssm_out.weight")) return e->ssm_out;
    return "keep";
}

/* --------------------------------------------------------------- checks */

static tela_status quantize(const char *in, const char *out, const char *type, int threads) {
    tela_quantize_params p = tela_quantize_default_params();
    tela_status st = tela_ftype_parse(type, &p.ftype);
    if (st != TELA_OK) return st;
    p.n_threads = threads;
    return tela_quantize_gguf(in, out, &p, NULL);
}

/* (a): names in the expected order, types as the table says. */
static void check_types(const tela_gguf *in, const tela_gguf *out, const expect *e, const name_list *order) {
    CHECK_EQ_INT(out->n_tensors, order->n);
    for (uint64_t i = 0; i < out->n_tensors && i < (uint64_t)order->n; i++) {
        const tela_tensor *t = &out->tensors[i].t;
        CHECK_MSG(!strcmp(t->name, order->names[i]), "%s: tensor %llu is %s, expected %s", e->ftype,
                  (unsigned long long)i, t->name, order->names[i]);
        const tela_gguf_tensor *src = tela_gguf_find_tensor(in, t->name);
        if (!src) continue;
        const char *want = expected_type(e, t->name);
        if (!strcmp(want, "keep")) want = tela_type_name(src->t.type);
        CHECK_MSG(!strcmp(tela_type_name(t->type), want), "%s: %s is %s, expected %s", e->ftype, t->name,
                  tela_type_name(t->type), want);
        for (int d = 0; d < 4; d++) CHECK_EQ_INT(t->ne[d], src->t.ne[d]);
        CHECK_EQ_INT(t->n_dims, src->t.n_dims);
    }
}

/* Largest relative RMSE (RMSE / RMS of the source) a type may show on these
 * weights: a few times what the format's bits give, far below what a wrong
 * layout or a mixed-up row would produce. */
static double max_rel_rmse(tela_type t) {
    switch (t) {
    case TELA_TYPE_F16: return 1e-3;
    case TELA_TYPE_BF16: return 8e-3;
    case TELA_TYPE_Q8_0: return 0.012;
    case TELA_TYPE_Q6_K: return 0.04;
    case TELA_TYPE_Q5_0: case TELA_TYPE_Q5_1: case TELA_TYPE_Q5_K: return 0.08;
    case TELA_TYPE_Q4_0: case TELA_TYPE_Q4_1: case TELA_TYPE_Q4_K: return 0.16;
    case TELA_TYPE_Q3_K: return 0.3;
    default: return 0.6;
    }
}

/* (b): every converted row equals tela_quantize_row of the source row (and
 * so dequantizes to the same values); copied tensors are the same bytes. */
static void check_data(const tela_gguf *in, const tela_gguf *out, const char *what) {
    for (uint64_t i = 0; i < out->n_tensors; i++) {
        const tela_tensor *t = &out->tensors[i].t;
        const tela_gguf_tensor *src = tela_gguf_find_tensor(in, t->name);
        if (!src) continue;
        if (t->type == src->t.type) {
            CHECK_MSG(t->nbytes == src->t.nbytes && !memcmp(t->data, src->t.data, t->nbytes), "%s: %s not copied",
                      what, t->name);
            continue;
        }
        int64_t ne0 = t->ne[0], rows = tela_tensor_nelements(t) / ne0;
        size_t srb = tela_type_row_bytes(src->t.type, ne0), drb = tela_type_row_bytes(t->type, ne0);
        float *x = malloc((size_t)ne0 * sizeof *x), *y = malloc((size_t)ne0 * sizeof *y),
              *z = malloc((size_t)ne0 * sizeof *z);
        unsigned char *q = malloc(drb);
        int bad_rows = 0;
        double err = 0, ref = 0, dq_diff = 0;
        for (int64_t r = 0; r < rows; r++) {
            const unsigned char *out_row = (const unsigned char *)t->data + (size_t)r * drb;
            tela_dequantize_row(src->t.type, (const unsigned char *)src->t.data + (size_t)r * srb, x, ne0);
            tela_quantize_row(t->type, x, q, ne0);
            if (memcmp(q, out_row, drb)) bad_rows++;
            tela_dequantize_row(t->type, out_row, y, ne0);
            tela_dequantize_row(t->type, q, z, ne0);
            for (int64_t k = 0; k < ne0; k++) {
                err += ((double)y[k] - x[k]) * ((double)y[k] - x[k]);
                ref += (double)x[k] * x[k];
                dq_diff += fabs((double)y[k] - z[k]);
            }
        }
        CHECK_MSG(bad_rows == 0, "%s: %s: %d of %lld rows differ from tela_quantize_row", what, t->name, bad_rows,
                  (long long)rows);
        CHECK_MSG(dq_diff == 0, "%s: %s dequantizes differently", what, t->name);
        double rel = sqrt(err / (ref > 0 ? ref : 1));
        CHECK_MSG(rel <= max_rel_rmse(t->type), "%s: %s (%s) relative RMSE %.4f > %.4f", what, t->name,
                  tela_type_name(t->type), rel, max_rel_rmse(t->type));
        free(x);
        free(y);
        free(z);
        free(q);
    }
}

static bool same_value(const tela_gguf_value *a, const tela_gguf_value *b) {
    if (a->type != b->type) return false;
    switch (a->type) {
    case TELA_GGUF_STRING:
        return a->v.str.len == b->v.str.len && !memcmp(a->v.str.ptr, b->v.str.ptr, (size_t)a->v.str.len);
    case TELA_GGUF_ARRAY:
        if (a->v.arr.elem_type != b->v.arr.elem_type || a->v.arr.n != b->v.arr.n) return false;
        if (a->v.arr.elem_type == TELA_GGUF_STRING) {
            for (uint64_t i = 0; i < a->v.arr.n; i++)
                if (a->v.arr.strs[i].len != b->v.arr.strs[i].len ||
                    memcmp(a->v.arr.strs[i].ptr, b->v.arr.strs[i].ptr, (size_t)a->v.arr.strs[i].len))
                    return false;
            return true;
        }
        return !memcmp(a->v.arr.raw, b->v.arr.raw, (size_t)a->v.arr.n * 4); /* int32 arrays here */
    case TELA_GGUF_INT8: case TELA_GGUF_INT16: case TELA_GGUF_INT32: case TELA_GGUF_INT64:
        return a->v.i64 == b->v.i64;
    case TELA_GGUF_FLOAT32: case TELA_GGUF_FLOAT64:
        return a->v.f64 == b->v.f64;
    default:
        return a->v.u64 == b->v.u64;
    }
}

/* (d): the input's keys in order, without split.* and the two keys that go
 * last: general.quantization_version = 2, general.file_type = ftype. */
static void check_metadata(const tela_gguf *in, const tela_gguf *out, uint32_t ftype) {
    uint64_t j = 0;
    for (uint64_t i = 0; i < in->n_kv; i++) {
        const char *k = in->kv[i].key;
        if (!strncmp(k, "split.", 6) || !strcmp(k, "general.file_type") || !strcmp(k, "general.quantization_version"))
            continue;
        CHECK_MSG(j < out->n_kv && !strcmp(out->kv[j].key, k), "key %llu: expected %s", (unsigned long long)j, k);
        if (j < out->n_kv) CHECK_MSG(same_value(&in->kv[i].value, &out->kv[j].value), "value of %s", k);
        j++;
    }
    CHECK_EQ_INT(out->n_kv, j + 2);
    if (out->n_kv == j + 2) {
        CHECK(!strcmp(out->kv[j].key, "general.quantization_version"));
        CHECK_EQ_INT(out->kv[j].value.type, TELA_GGUF_UINT32);
        CHECK_EQ_INT(out->kv[j].value.v.u64, 2);
        CHECK(!strcmp(out->kv[j + 1].key, "general.file_type"));
        CHECK_EQ_INT(out->kv[j + 1].value.type, TELA_GGUF_UINT32);
        CHECK_EQ_INT(out->kv[j + 1].value.v.u64, ftype);
    }
    CHECK(tela_gguf_find(out, "split.count") == NULL);
    CHECK(tela_gguf_find(out, "split.no") == NULL);
}

static bool files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = false;
        if (ca == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

/* Quantizes in to every type of the table and checks types, order and
 * metadata; data for the types named in full_data. */
static void run_table(const char *in_path, const expect *tab, size_t n, bool qwen, const char *full_data) {
    tela_gguf *in;
    CHECK_OK(tela_gguf_open(in_path, &in));
    if (!in) return;
    name_list *order = malloc(sizeof *order);
    expected_order(qwen, order);
    CHECK_EQ_INT(in->n_tensors, order->n);
    for (size_t i = 0; i < n; i++) {
        char out_path[512];
        path_in(out_path, sizeof out_path, "out.gguf");
        tela_status st = quantize(in_path, out_path, tab[i].ftype, 2);
        CHECK_MSG(st == TELA_OK, "%s %s: %s", qwen ? "qwen35" : "llama", tab[i].ftype, tela_last_error());
        tela_gguf *out = NULL;
        if (st == TELA_OK) CHECK_OK(tela_gguf_open(out_path, &out));
        if (!out) continue;
        check_types(in, out, &tab[i], order);
        tela_ftype ft;
        tela_ftype_parse(tab[i].ftype, &ft);
        check_metadata(in, out, (uint32_t)ft);
        char tag[64];
        snprintf(tag, sizeof tag, ",%s,", tab[i].ftype);
        if (strstr(full_data, tag)) {
            char what[64];
            snprintf(what, sizeof what, "%s %s", qwen ? "qwen35" : "llama", tab[i].ftype);
            check_data(in, out, what);
        }
        tela_gguf_close(out);
        unlink(out_path);
    }
    free(order);
    tela_gguf_close(in);
}

/* (a) on a 12-layer model: numeric block order and use_more_bits with n = 12;
 * attn_v's 32-element rows make Q6_K fall back to Q8_0 and Q4_K to Q5_0. */
static void test_deep(void) {
    char in_path[512], out_path[512];
    path_in(in_path, sizeof in_path, "deep.gguf");
    path_in(out_path, sizeof out_path, "deep-q4km.gguf");
    build_deep(in_path);
    CHECK_OK(quantize(in_path, out_path, "Q4_K_M", 1));
    tela_gguf *out = NULL;
    CHECK_OK(tela_gguf_open(out_path, &out));
    if (!out) return;
    /* token_embd: with no output.weight the embeddings are tied, so the
     * output rule applies, and rows of 32 are not a multiple of Q4_K's 256:
     * Q8_0 directly */
    static const char *const want[25][2] = {
        {"token_embd.weight", "q8_0"},
        {"blk.0.attn_v.weight", "q8_0"},  {"blk.0.ffn_down.weight", "q6_K"},
        {"blk.1.attn_v.weight", "q5_0"},  {"blk.1.ffn_down.weight", "q4_K"},
        {"blk.2.attn_v.weight", "q5_0"},  {"blk.2.ffn_down.weight", "q4_K"},
        {"blk.3.attn_v.weight", "q8_0"},  {"blk.3.ffn_down.weight", "q6_K"},
        {"blk.4.attn_v.weight", "q5_0"},  {"blk.4.ffn_down.weight", "q4_K"},
        {"blk.5.attn_v.weight", "q5_0"},  {"blk.5.ffn_down.weight", "q4_K"},
        {"blk.6.attn_v.weight", "q8_0"},  {"blk.6.ffn_down.weight", "q6_K"},
        {"blk.7.attn_v.weight", "q5_0"},  {"blk.7.ffn_down.weight", "q4_K"},
        {"blk.8.attn_v.weight", "q5_0"},  {"blk.8.ffn_down.weight", "q4_K"},
        {"blk.9.attn_v.weight", "q8_0"},  {"blk.9.ffn_down.weight", "q6_K"},
        {"blk.10.attn_v.weight", "q8_0"}, {"blk.10.ffn_down.weight", "q6_K"},
        {"blk.11.attn_v.weight", "q8_0"}, {"blk.11.ffn_down.weight", "q6_K"}};
    CHECK_EQ_INT(out->n_tensors, 25);
    for (uint64_t i = 0; i < out->n_tensors && i < 25; i++) {
        CHECK_MSG(!strcmp(out->tensors[i].t.name, want[i][0]), "deep: tensor %llu is %s, expected %s",
                  (unsigned long long)i, out->tensors[i].t.name, want[i][0]);
        CHECK_MSG(!strcmp(tela_type_name(out->tensors[i].t.type), want[i][1]), "deep: %s is %s, expected %s",
                  out->tensors[i].t.name, tela_type_name(out->tensors[i].t.type), want[i][1]);
    }
    tela_gguf_close(out);
    unlink(out_path);
    unlink(in_path);
}

/* (c): the same file for 1 and 3 threads, and for a second run. */
static void test_determinism(const char *in_path, const char *type) {
    char a[512], b[512], c[512];
    path_in(a, sizeof a, "det-1.gguf");
    path_in(b, sizeof b, "det-3.gguf");
    path_in(c, sizeof c, "det-3b.gguf");
    CHECK_OK(quantize(in_path, a, type, 1));
    CHECK_OK(quantize(in_path, b, type, 3));
    CHECK_OK(quantize(in_path, c, type, 3));
    CHECK_MSG(files_equal(a, b), "%s: --threads 1 and 3 differ", type);
    CHECK_MSG(files_equal(b, c), "%s: two runs differ", type);
    unlink(a);
    unlink(b);
    unlink(c);
}

/* measure_error: the callback sees every tensor once, in output order, with
 * the squared error of the dequantized output against the source as this
 * test computes it from the two files; the same sums for 1 and 3 threads. */
typedef struct err_rec {
    int n;
    char name[MAX_T][64];
    double err[MAX_T], src[MAX_T];
} err_rec;

static void record_err(void *user, const tela_quantize_item *it, double sq_err, double sq_src) {
    err_rec *r = user;
    if (r->n >= MAX_T) return;
    snprintf(r->name[r->n], 64, "%s", it->src->t.name);
    r->err[r->n] = sq_err;
    r->src[r->n] = sq_src;
    r->n++;
}

static void test_measure_error(const char *in_path) {
    char out[512];
    path_in(out, sizeof out, "err.gguf");
    static err_rec r1, r3;
    tela_quantize_params p = tela_quantize_default_params();
    p.measure_error = 1;
    p.on_tensor = record_err;
    p.n_threads = 3;
    p.user = &r3;
    r3.n = 0;
    CHECK_OK(tela_quantize_gguf(in_path, out, &p, NULL));
    p.n_threads = 1;
    p.user = &r1;
    r1.n = 0;
    CHECK_OK(tela_quantize_gguf(in_path, out, &p, NULL));
    tela_gguf *in = NULL, *o = NULL;
    CHECK_OK(tela_gguf_open(in_path, &in));
    CHECK_OK(tela_gguf_open(out, &o));
    if (!in || !o) return;
    CHECK_EQ_INT(r1.n, o->n_tensors);
    CHECK_EQ_INT(r3.n, o->n_tensors);
    for (int i = 0; i < r1.n && (uint64_t)i < o->n_tensors; i++) {
        const tela_tensor *t = &o->tensors[i].t;
        CHECK(!strcmp(r1.name[i], t->name));
        CHECK_MSG(r1.err[i] == r3.err[i] && r1.src[i] == r3.src[i], "%s: sums differ with 3 threads", t->name);
        const tela_gguf_tensor *s = tela_gguf_find_tensor(in, t->name);
        if (!s) continue;
        double err = 0, src = 0;
        if (s->t.type != t->type) {
            int64_t ne0 = t->ne[0], rows = tela_tensor_nelements(t) / ne0;
            float *x = malloc((size_t)ne0 * sizeof *x), *y = malloc((size_t)ne0 * sizeof *y);
            for (int64_t row = 0; row < rows; row++) {
                tela_dequantize_row(s->t.type, (const char *)s->t.data + row * tela_type_row_bytes(s->t.type, ne0), x, ne0);
                tela_dequantize_row(t->type, (const char *)t->data + row * tela_type_row_bytes(t->type, ne0), y, ne0);
                for (int64_t k = 0; k < ne0; k++) {
                    err += ((double)y[k] - x[k]) * ((double)y[k] - x[k]);
                    src += (double)x[k] * x[k];
                }
            }
            free(x);
            free(y);
            CHECK_MSG(err > 0, "%s: no error measured", t->name);
        }
        CHECK_NEAR(r1.err[i], err, 1e-9 * (err + 1e-30));
        CHECK_NEAR(r1.src[i], src, 1e-9 * (src + 1e-30));
    }
    tela_gguf_close(in);
    tela_gguf_close(o);
    unlink(out);
}

/* ----------------------------------------------------------------- errors */

static void test_names(void) {
    static const struct { const char *s; int ftype; } ok[] = {
        {"Q4_K_M", 15}, {"q4_k_m", 15}, {"Q4_K", 15}, {"Q4_K_S", 14}, {"Q5_K_M", 17}, {"Q5_K", 17}, {"Q5_K_S", 16},
        {"Q6_K", 18},   {"Q8_0", 7},    {"Q4_0", 2},  {"Q4_1", 3},    {"Q5_0", 8},    {"Q5_1", 9},  {"Q2_K", 10},
        {"Q3_K_S", 11}, {"Q3_K_M", 12}, {"Q3_K", 12}, {"Q3_K_L", 13}, {"F16", 1},     {"BF16", 32}, {"F32", 0},
        {"15", 15},     {"7", 7}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        tela_ftype f = (tela_ftype)-1;
        CHECK_OK(tela_ftype_parse(ok[i].s, &f));
        CHECK_MSG((int)f == ok[i].ftype, "%s -> %d, expected %d", ok[i].s, (int)f, ok[i].ftype);
    }
    static const char *const bad[] = {"Q4_K_X", "", "q4", "4", "IQ2_XXS", "Q4_K_M ", "-1", "99"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tela_ftype f;
        tela_status st = tela_ftype_parse(bad[i], &f);
        CHECK_MSG(st == TELA_ERR_ARG, "'%s' accepted", bad[i]);
        if (st != TELA_OK && bad[i][0]) CHECK(strstr(tela_last_error(), bad[i]) != NULL);
    }
    CHECK(!strcmp(tela_ftype_name(TELA_FTYPE_MOSTLY_Q4_K_M), "Q4_K_M"));
    CHECK(tela_ftype_base_type(TELA_FTYPE_MOSTLY_Q5_K_S) == TELA_TYPE_Q5_K);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

static void expect_fail(const char *in, const char *out, const char *type, const char *msg_part, const char *what) {
    tela_status st = quantize(in, out, type, 2);
    CHECK_MSG(st != TELA_OK, "%s: succeeded", what);
    if (st != TELA_OK && msg_part)
        CHECK_MSG(strstr(tela_last_error(), msg_part) != NULL, "%s: message '%s' lacks '%s'", what, tela_last_error(),
                  msg_part);
    CHECK_MSG(!file_exists(out), "%s: left %s", what, out);
    CHECK_MSG(count_files("bad-out") == 0, "%s: left temporary files", what);
}

static void test_errors(const char *good_path) {
    char out[512], in[512];
    path_in(out, sizeof out, "bad-out.gguf");

    path_in(in, sizeof in, "not-gguf.gguf");
    write_bytes(in, "hello, this is not a GGUF file at all\n", 38);
    expect_fail(in, out, "Q4_K_M", "not-gguf.gguf", "text input");
    expect_fail("/nonexistent/model.gguf", out, "Q8_0", "/nonexistent/model.gguf", "missing input");

    /* the first 3000 bytes of a real file: the tensor data is cut off */
    FILE *f = fopen(good_path, "rb");
    unsigned char buf[3000];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    path_in(in, sizeof in, "truncated.gguf");
    write_bytes(in, buf, n);
    expect_fail(in, out, "Q4_K_M", "truncated.gguf", "truncated input");

    char bad_dir[512];
    path_in(bad_dir, sizeof bad_dir, "no-such-dir/out.gguf");
    tela_status st = quantize(good_path, bad_dir, "Q8_0", 1);
    CHECK(st != TELA_OK);
    CHECK(st != TELA_OK && strstr(tela_last_error(), "no-such-dir") != NULL);

    /* no general.architecture: not a model llama-quantize would load */
    tela_gguf_writer *w = tela_gguf_writer_create();
    float v[32] = {0};
    int64_t ne[2] = {32, 1};
    tela_gguf_writer_add_tensor(w, "x.weight", TELA_TYPE_F32, ne, 2, v, sizeof v);
    path_in(in, sizeof in, "noarch.gguf");
    CHECK_OK(tela_gguf_writer_write(w, in));
    tela_gguf_writer_free(w);
    expect_fail(in, out, "Q8_0", "general.architecture", "no architecture");

    /* rows of 80 (not a multiple of 32): Q4_K (token_embd, untied) and
     * Q6_K (ffn_down of the only layer, a use_more_bits layer) fall back to
     * F16; Q8_0 has no fallback in llama-quantize: an error */
    static model_def m;
    m.n = 0;
    w = tela_gguf_writer_create();
    tela_gguf_writer_add_str(w, "general.architecture", "llama");
    tela_gguf_writer_add_u32(w, "llama.block_count", 1);
    add_t(&m, TELA_TYPE_F16, 2, 80, 8, "token_embd.weight", 0);
    add_t(&m, TELA_TYPE_F32, 2, 80, 8, "blk.0.ffn_down.weight", 0);
    add_t(&m, TELA_TYPE_F16, 2, 256, 8, "output.weight", 0);
    path_in(in, sizeof in, "rows80.gguf");
    write_model(&m, w, in);
    free_model(&m);
    expect_fail(in, out, "Q8_0", "token_embd.weight", "Q8_0 of 80-element rows");
    CHECK_OK(quantize(in, out, "Q4_K_M", 1));
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_open(out, &g));
    if (g) {
        static const char *const want[3][2] = {
            {"output.weight", "q6_K"}, {"token_embd.weight", "f16"}, {"blk.0.ffn_down.weight", "f16"}};
        CHECK_EQ_INT(g->n_tensors, 3);
        for (uint64_t i = 0; i < g->n_tensors && i < 3; i++) {
            CHECK(!strcmp(g->tensors[i].t.name, want[i][0]));
            CHECK_MSG(!strcmp(tela_type_name(g->tensors[i].t.type), want[i][1]), "rows80: %s is %s, expected %s",
                      g->tensors[i].t.name, tela_type_name(g->tensors[i].t.type), want[i][1]);
        }
        tela_gguf *gi = NULL;
        tela_gguf_open(in, &gi);
        if (gi) check_data(gi, g, "rows80 Q4_K_M");
        tela_gguf_close(gi);
        tela_gguf_close(g);
    }
    unlink(out);
    /* the output projection with rows of 80: Q8_0 by the output rule, and
     * no fallback from there, so Q4_K_M fails too (as in llama-quantize) */
    m.n = 0;
    w = tela_gguf_writer_create();
    tela_gguf_writer_add_str(w, "general.architecture", "llama");
    tela_gguf_writer_add_u32(w, "llama.block_count", 1);
    add_t(&m, TELA_TYPE_F16, 2, 80, 8, "output.weight", 0);
    path_in(in, sizeof in, "out80.gguf");
    write_model(&m, w, in);
    free_model(&m);
    expect_fail(in, out, "Q4_K_M", "output.weight", "Q4_K_M of an 80-column output");

    /* a NaN in the weights: a clean error naming the tensor and row */
    m.n = 0;
    w = tela_gguf_writer_create();
    tela_gguf_writer_add_str(w, "general.architecture", "llama");
    tela_gguf_writer_add_u32(w, "llama.block_count", 1);
    add_t(&m, TELA_TYPE_F32, 2, 256, 4, "blk.0.ffn_up.weight", 0);
    ((float *)m.data[0])[2 * 256 + 7] = NAN;
    path_in(in, sizeof in, "nan.gguf");
    write_model(&m, w, in);
    free_model(&m);
    expect_fail(in, out, "Q4_K_M", "blk.0.ffn_up.weight, row 2", "NaN weight");

    /* an already-quantized tensor: refused, unless allowed */
    m.n = 0;
    w = tela_gguf_writer_create();
    tela_gguf_writer_add_str(w, "general.architecture", "llama");
    tela_gguf_writer_add_u32(w, "llama.block_count", 1);
    add_t(&m, TELA_TYPE_Q8_0, 2, 256, 4, "blk.0.ffn_up.weight", 0);
    add_t(&m, TELA_TYPE_Q8_0, 2, 256, 4, "output.weight", 0);
    add_t(&m, TELA_TYPE_F32, 1, 256, 1, "output_norm.weight", 0);
    path_in(in, sizeof in, "q8.gguf");
    write_model(&m, w, in);
    free_model(&m);
    expect_fail(in, out, "Q4_K_M", "requantiz", "requantize without permission");
    tela_quantize_params p = tela_quantize_default_params();
    p.allow_requantize = 1;
    tela_quantize_stats stats;
    CHECK_OK(tela_quantize_gguf(in, out, &p, &stats));
    CHECK_EQ_INT(stats.n_requantized, 2);
    CHECK_OK(tela_gguf_open(out, &g));
    if (g) {
        tela_gguf *gi = NULL;
        tela_gguf_open(in, &gi);
        const tela_gguf_tensor *t = tela_gguf_find_tensor(g, "blk.0.ffn_up.weight");
        CHECK(t && t->t.type == TELA_TYPE_Q4_K);
        t = tela_gguf_find_tensor(g, "output.weight");
        CHECK(t && t->t.type == TELA_TYPE_Q6_K);
        if (gi) check_data(gi, g, "requantized");
        tela_gguf_close(gi);
        tela_gguf_close(g);
    }
    unlink(out);
    /* Q8_0 to Q8_0 needs no requantization: copied as is */
    CHECK_OK(quantize(in, out, "Q8_0", 1));
    unlink(out);
}

/* A full disk, simulated with RLIMIT_FSIZE (writes past it fail with EFBIG):
 * first below the size of the scratch file, then between that and the
 * output's size (the metadata holds a large string, so the output is
 * bigger). Neither leaves a file behind. */
static void test_disk_full(void) {
    char in[512], out[512];
    path_in(in, sizeof in, "big-meta.gguf");
    path_in(out, sizeof out, "bad-out.gguf");
    static model_def m;
    m.n = 0;
    tela_gguf_writer *w = tela_gguf_writer_create();
    tela_gguf_writer_add_str(w, "general.architecture", "llama");
    tela_gguf_writer_add_u32(w, "llama.block_count", 1);
    char *big = malloc(200001);
    memset(big, 'x', 200000);
    big[200000] = '\0';
    tela_gguf_writer_add_str(w, "general.description", big);
    free(big);
    add_t(&m, TELA_TYPE_F16, 2, 256, 256, "blk.0.ffn_up.weight", 0); /* Q4_K: 36864 bytes */
    write_model(&m, w, in);
    free_model(&m);

    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    static const rlim_t limits[] = {16384, 100000};
    for (int i = 0; i < 2; i++) {
        struct rlimit lim = old;
        lim.rlim_cur = limits[i];
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
            printf("note: cannot set RLIMIT_FSIZE; disk-full case skipped\n");
            break;
        }
        tela_status st = quantize(in, out, "Q4_K_M", 2);
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK_MSG(st == TELA_ERR_IO, "file size limit %llu: status %d (%s)", (unsigned long long)limits[i], (int)st,
                  tela_last_error());
        CHECK(!file_exists(out));
        CHECK_MSG(count_files("bad-out") == 0, "limit %llu: temporary files left", (unsigned long long)limits[i]);
    }
    signal(SIGXFSZ, prev);
    CHECK_OK(quantize(in, out, "Q4_K_M", 2));
    CHECK(file_exists(out));
    unlink(out);
    unlink(in);
}

static void cleanup_dir(void) {
    DIR *d = opendir(g_dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(g_dir);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/tela-test-quantize-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    char llama[512], qwen[512];
    path_in(llama, sizeof llama, "llama.gguf");
    path_in(qwen, sizeof qwen, "qwen35.gguf");
    build_llama(llama);
    build_qwen(qwen);

    test_names();
    run_table(llama, LLAMA_EXPECT, sizeof LLAMA_EXPECT / sizeof LLAMA_EXPECT[0], false,
              ",Q4_K_M,Q4_K_S,Q2_K,Q3_K_M,Q6_K,Q8_0,Q4_0,BF16,F16,");
    run_table(qwen, QWEN_EXPECT, sizeof QWEN_EXPECT / sizeof QWEN_EXPECT[0], true, ",Q4_K_M,Q8_0,");
    test_deep();
    test_determinism(llama, "Q4_K_M");
    test_determinism(qwen, "Q5_K_M");
    test_measure_error(llama);
    test_errors(llama);
    test_disk_full();

    cleanup_dir();
    return test_finish();
}
