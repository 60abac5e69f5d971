/* quantize.c: "tela quantize": a GGUF file to a GGUF file with smaller weight
 * types, with the rules of llama.cpp's llama-quantize (src/llama-quant.cpp),
 * re-implemented from reading them:
 *  - which tensors may change type at all (2-D and larger "...weight"
 *    tensors, minus norms, conv1d kernels and a list of small special ones);
 *  - the per-ftype mixture: output.weight (and token_embd.weight when the
 *    embeddings are tied) in Q6_K, more bits for attn_v-like and ffn_down
 *    tensors in some layers (the use_more_bits rule), ...;
 *  - fallbacks for rows that are not a whole number of blocks;
 *  - the output order (by block number, then name) and metadata order.
 * The data is converted row by row with the quant layer's reference
 * quantizers (ggml's, without an importance matrix), rows spread over
 * threads; every row depends only on its own input, so the file is the same
 * for any thread count. */
#include "convert/quantize.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "quant/quant.h"
#include "util/error.h"

/* ------------------------------------------------------------ file types */

static const struct {
    const char *name;
    tela_ftype ftype;
    tela_type base;
} FTYPES[] = {
    {"Q4_0", TELA_FTYPE_MOSTLY_Q4_0, TELA_TYPE_Q4_0},
    {"Q4_1", TELA_FTYPE_MOSTLY_Q4_1, TELA_TYPE_Q4_1},
    {"Q5_0", TELA_FTYPE_MOSTLY_Q5_0, TELA_TYPE_Q5_0},
    {"Q5_1", TELA_FTYPE_MOSTLY_Q5_1, TELA_TYPE_Q5_1},
    {"Q2_K", TELA_FTYPE_MOSTLY_Q2_K, TELA_TYPE_Q2_K},
    {"Q3_K_S", TELA_FTYPE_MOSTLY_Q3_K_S, TELA_TYPE_Q3_K},
    {"Q3_K_M", TELA_FTYPE_MOSTLY_Q3_K_M, TELA_TYPE_Q3_K},
    {"Q3_K_L", TELA_FTYPE_MOSTLY_Q3_K_L, TELA_TYPE_Q3_K},
    {"Q4_K_S", TELA_FTYPE_MOSTLY_Q4_K_S, TELA_TYPE_Q4_K},
    {"Q4_K_M", TELA_FTYPE_MOSTLY_Q4_K_M, TELA_TYPE_Q4_K},
    {"Q5_K_S", TELA_FTYPE_MOSTLY_Q5_K_S, TELA_TYPE_Q5_K},
    {"Q5_K_M", TELA_FTYPE_MOSTLY_Q5_K_M, TELA_TYPE_Q5_K},
    {"Q6_K", TELA_FTYPE_MOSTLY_Q6_K, TELA_TYPE_Q6_K},
    {"Q8_0", TELA_FTYPE_MOSTLY_Q8_0, TELA_TYPE_Q8_0},
    {"F16", TELA_FTYPE_MOSTLY_F16, TELA_TYPE_F16},
    {"BF16", TELA_FTYPE_MOSTLY_BF16, TELA_TYPE_BF16},
    {"F32", TELA_FTYPE_ALL_F32, TELA_TYPE_F32},
};
#define N_FTYPES (sizeof FTYPES / sizeof FTYPES[0])

/* llama-quantize's short aliases for the recommended mixtures. */
static const struct { const char *alias, *name; } FTYPE_ALIASES[] = {
    {"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};

tela_status tela_ftype_parse(const char *s, tela_ftype *out) {
    if (!s) return tela_errorf(TELA_ERR_ARG, "no quantization type given");
    for (size_t i = 0; i < sizeof FTYPE_ALIASES / sizeof FTYPE_ALIASES[0]; i++)
        if (!strcasecmp(s, FTYPE_ALIASES[i].alias)) s = FTYPE_ALIASES[i].name;
    char *end;
    errno = 0;
    long num = strtol(s, &end, 10);
    bool numeric = *s && !*end && !errno;
    for (size_t i = 0; i < N_FTYPES; i++)
        if ((numeric && num == (long)FTYPES[i].ftype) || (!numeric && !strcasecmp(s, FTYPES[i].name))) {
            *out = FTYPES[i].ftype;
            return TELA_OK;
        }
    char list[256];
    size_t n = 0;
    for (size_t i = 0; i < N_FTYPES && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", FTYPES[i].name);
    return tela_errorf(TELA_ERR_ARG, "unknown quantization type '%s' (known: %s)", s, list);
}

const char *tela_ftype_name(tela_ftype ftype) {
    for (size_t i = 0; i < N_FTYPES; i++)
        if (FTYPES[i].ftype == ftype) return FTYPES[i].name;
    return NULL;
}

tela_type tela_ftype_base_type(tela_ftype ftype) {
    for (size_t i = 0; i < N_FTYPES; i++)
        if (FTYPES[i].ftype == ftype) return FTYPES[i].base;
    return TELA_TYPE_COUNT;
}

/* ------------------------------------------------- tensor classification */

/* Broad roles that the mixture rules talk about (llama.cpp's
 * tensor_category), found from the name alone so any architecture works. */
typedef enum qcat {
    CAT_TOKEN_EMBD, CAT_ATTN_Q, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_QKV, CAT_ATTN_KV_B,
    CAT_ATTN_OUTPUT, CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN, CAT_OUTPUT, CAT_OTHER
} qcat;

/* The checks run in this order, so e.g. "attn_qkv.weight" is never taken
 * for something else. */
static qcat category(const char *name) {
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight")) return CAT_TOKEN_EMBD;
    static const struct { const char *part; qcat cat; } subs[] = {
        {"attn_qkv.weight", CAT_ATTN_QKV}, {"attn_kv_b.weight", CAT_ATTN_KV_B}, {"attn_v.weight", CAT_ATTN_V},
        {"attn_k.weight", CAT_ATTN_K},     {"attn_q.weight", CAT_ATTN_Q},       {"attn_output.weight", CAT_ATTN_OUTPUT},
        {"ffn_up", CAT_FFN_UP},            {"ffn_gate", CAT_FFN_GATE},          {"ffn_down", CAT_FFN_DOWN}};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strstr(name, subs[i].part)) return subs[i].cat;
    return CAT_OTHER;
}

/* Tensors holding values (or a fused QKV) are the most sensitive to
 * quantization; they share one counter for the use_more_bits rule. In a
 * Qwen3.5 file that counts the Gated DeltaNet layers' attn_qkv together with
 * the attention layers' attn_v, in layer order. */
static bool cat_is_attn_v(qcat c) { return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B; }

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !memcmp(s + n - m, suffix, m);
}

/* Dimensions that count (ggml_n_dims): trailing dimensions of size 1 do not,
 * so a [2048, 1] tensor is 1-D here. */
static int effective_dims(const tela_tensor *t) {
    int n = TELA_MAX_DIMS;
    while (n > 1 && t->ne[n - 1] == 1) n--;
    return n;
}

/* Name parts of tensors that llama-quantize never quantizes: small 2-D
 * tensors of various architectures (conv1d kernels of Mamba-style and
 * Gated DeltaNet layers, MoE routers, RWKV mixing weights, multimodal
 * embeddings, ...). */
static const char *const KEEP_PARTS[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
    "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
    "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
    "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
    "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
    "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd"};

/* May this tensor change type? 1-D tensors (norms, biases, rope factors,
 * ssm_a) and anything not named "...weight" keep theirs. */
static bool allows_quantization(const tela_tensor *t) {
    if (effective_dims(t) < 2) return false;
    if (!ends_with(t->name, "weight")) return false;
    if (!strcmp(t->name, "position_embd.weight") || !strcmp(t->name, "token_types.weight")) return false;
    for (size_t i = 0; i < sizeof KEEP_PARTS / sizeof KEEP_PARTS[0]; i++)
        if (strstr(t->name, KEEP_PARTS[i])) return false;
    return true;
}

/* ------------------------------------------------------- mixture rules */

/* What the rules need to know about the model and where they are. */
typedef struct qstate {
    tela_ftype ftype;
    bool falcon;      /* llama.cpp treats Falcon's layers differently */
    bool is_70b;      /* Llama-2/3 70B: attn_v gets more bits */
    int64_t n_layer;  /* <arch>.block_count */
    int64_t n_head, n_head_kv, n_expert;
    bool tied;        /* no output.weight: token_embd is also the output */
    int n_attention_wv, i_attention_wv;
    int i_ffn_down, i_ffn_gate, i_ffn_up;
} qstate;

/* The layers that get more bits in the _M mixtures: the first and last
 * eighth, and every third layer in between. */
static bool use_more_bits(int64_t i_layer, int64_t n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

/* Query heads per KV head (of layer 0), 0 when unknown. */
static int64_t n_gqa(const qstate *q) { return q->n_head_kv ? q->n_head / q->n_head_kv : 0; }

/* The layer of a feed-forward tensor: the running count of such tensors, or
 * for mixture-of-experts models (whose expert tensors need not come in
 * layer order) the number in its "blk.N." name. */
static tela_status layer_of(const qstate *q, int counter, const char *name, int64_t *layer) {
    *layer = counter;
    if (q->n_expert <= 1) return TELA_OK;
    char *end = NULL;
    long v = strncmp(name, "blk.", 4) ? -1 : strtol(name + 4, &end, 10);
    if (v < 0 || end == name + 4 || *end != '.')
        return tela_errorf(TELA_ERR_FORMAT, "tensor %s: cannot find its layer number", name);
    if (v >= q->n_layer)
        return tela_errorf(TELA_ERR_FORMAT, "tensor %s: layer %ld is not below block_count %lld", name, v,
                           (long long)q->n_layer);
    *layer = v;
    return TELA_OK;
}

/* The type the ftype's mixture gives a quantizable tensor, before the
 * row-length fallback (llama.cpp's llama_tensor_get_type_impl, for the
 * ftypes tela produces; the imatrix-only IQ types are left out). */
static tela_status mixture_type(qstate *q, const tela_tensor *t, qcat cat, tela_type *type) {
    const tela_ftype f = q->ftype;
    tela_type nt = *type;
    if (cat == CAT_OUTPUT || (q->tied && cat == CAT_TOKEN_EMBD)) {
        /* the output projection (or the tied embedding that serves as one) */
        const tela_type_traits *tr = tela_type_get_traits(nt);
        if (q->falcon || t->ne[0] % tr->block_size != 0) nt = TELA_TYPE_Q8_0;
        else if (nt != TELA_TYPE_Q8_0) nt = TELA_TYPE_Q6_K;
    } else if (cat == CAT_TOKEN_EMBD) {
        /* untied embeddings keep the base type for these ftypes */
    } else if (cat_is_attn_v(cat)) {
        if (f == TELA_FTYPE_MOSTLY_Q2_K) nt = n_gqa(q) >= 4 ? TELA_TYPE_Q4_K : TELA_TYPE_Q3_K;
        else if (f == TELA_FTYPE_MOSTLY_Q3_K_M) nt = q->i_attention_wv < 2 ? TELA_TYPE_Q5_K : TELA_TYPE_Q4_K;
        else if (f == TELA_FTYPE_MOSTLY_Q3_K_L) nt = TELA_TYPE_Q5_K;
        else if ((f == TELA_FTYPE_MOSTLY_Q4_K_M || f == TELA_FTYPE_MOSTLY_Q5_K_M) &&
                 use_more_bits(q->i_attention_wv, q->n_attention_wv))
            nt = TELA_TYPE_Q6_K;
        else if (f == TELA_FTYPE_MOSTLY_Q4_K_S && q->i_attention_wv < 4) nt = TELA_TYPE_Q5_K;
        /* 70B: 8 query heads share each V head, so attn_v is 8x smaller
         * than attn_q and more bits cost little */
        if (q->is_70b && (nt == TELA_TYPE_Q3_K || nt == TELA_TYPE_Q4_K)) nt = TELA_TYPE_Q5_K;
        if (q->n_expert == 8) nt = TELA_TYPE_Q8_0;
        q->i_attention_wv++;
    } else if (cat == CAT_ATTN_K) {
        if (q->n_expert == 8) nt = TELA_TYPE_Q8_0;
    } else if (cat == CAT_ATTN_Q) {
        /* only the IQ3 ftypes change attn_q */
    } else if (cat == CAT_FFN_DOWN) {
        int64_t i, n = q->n_layer;
        TELA_TRY(layer_of(q, q->i_ffn_down, t->name, &i));
        if (f == TELA_FTYPE_MOSTLY_Q2_K) {
            nt = TELA_TYPE_Q3_K;
        } else if (f == TELA_FTYPE_MOSTLY_Q3_K_M) {
            nt = i < n / 16 ? TELA_TYPE_Q5_K
                 : !q->falcon || use_more_bits(i, n) ? TELA_TYPE_Q4_K
                                                     : TELA_TYPE_Q3_K;
        } else if (f == TELA_FTYPE_MOSTLY_Q3_K_L) {
            nt = q->falcon ? TELA_TYPE_Q4_K : TELA_TYPE_Q5_K;
        } else if (f == TELA_FTYPE_MOSTLY_Q4_K_M) {
            if (q->falcon)
                nt = i < n / 16 ? TELA_TYPE_Q6_K : use_more_bits(i, n) ? TELA_TYPE_Q5_K : TELA_TYPE_Q4_K;
            else if (use_more_bits(i, n))
                nt = TELA_TYPE_Q6_K;
        } else if (f == TELA_FTYPE_MOSTLY_Q5_K_M && use_more_bits(i, n)) {
            nt = TELA_TYPE_Q6_K;
        } else if (f == TELA_FTYPE_MOSTLY_Q4_K_S && !q->falcon && i < n / 8) {
            nt = TELA_TYPE_Q5_K;
        }
        q->i_ffn_down++;
    } else if (cat == CAT_ATTN_OUTPUT) {
        if (!q->falcon) {
            if (q->n_expert == 8) {
                if (f == TELA_FTYPE_MOSTLY_Q2_K || f == TELA_FTYPE_MOSTLY_Q3_K_S || f == TELA_FTYPE_MOSTLY_Q3_K_M ||
                    f == TELA_FTYPE_MOSTLY_Q4_K_S || f == TELA_FTYPE_MOSTLY_Q4_K_M)
                    nt = TELA_TYPE_Q5_K;
            } else {
                if (f == TELA_FTYPE_MOSTLY_Q2_K) nt = TELA_TYPE_Q3_K;
                else if (f == TELA_FTYPE_MOSTLY_Q3_K_M) nt = TELA_TYPE_Q4_K;
                else if (f == TELA_FTYPE_MOSTLY_Q3_K_L) nt = TELA_TYPE_Q5_K;
            }
        } else if (f == TELA_FTYPE_MOSTLY_Q3_K_L) {
            nt = TELA_TYPE_Q4_K;
        }
    } else if (cat == CAT_FFN_GATE) {
        q->i_ffn_gate++;   /* counted as llama.cpp does; only IQ3_XS uses it */
    } else if (cat == CAT_FFN_UP) {
        q->i_ffn_up++;
    }
    *type = nt;
    return TELA_OK;
}

/* A row length that is not a whole number of the chosen type's blocks gets
 * the nearest 32-element type, and F16 when even that does not fit.
 * Like llama-quantize, there is no fallback for the 32-element types. */
static tela_status fallback_type(const tela_tensor *t, tela_type want, tela_type *out, bool *fell_back) {
    const tela_type_traits *tr = tela_type_get_traits(want);
    *out = want;
    *fell_back = false;
    if (t->ne[0] % tr->block_size == 0) return TELA_OK;
    tela_type fb;
    switch (want) {
    case TELA_TYPE_Q2_K: case TELA_TYPE_Q3_K: fb = TELA_TYPE_Q4_0; break;
    case TELA_TYPE_Q4_K: fb = TELA_TYPE_Q5_0; break;
    case TELA_TYPE_Q5_K: fb = TELA_TYPE_Q5_1; break;
    case TELA_TYPE_Q6_K: fb = TELA_TYPE_Q8_0; break;
    default:
        return tela_errorf(TELA_ERR_UNSUPPORTED,
                           "tensor %s: rows of %lld elements are not a multiple of %s's block of %lld, and "
                           "llama-quantize defines no fallback type for %s",
                           t->name, (long long)t->ne[0], tr->name, (long long)tr->block_size, tr->name);
    }
    if (t->ne[0] % tela_type_get_traits(fb)->block_size != 0) fb = TELA_TYPE_F16;
    *out = fb;
    *fell_back = true;
    return TELA_OK;
}

/* ---------------------------------------------------------------- plan */

/* A tensor's block number as llama.cpp's loader reads it ("blk.%d."), or -1. */
static long block_number(const char *name) {
    if (strncmp(name, "blk.", 4)) return -1;
    char *end;
    errno = 0;
    long v = strtol(name + 4, &end, 10);
    if (end == name + 4) return -1;
    if (errno == ERANGE || v > INT_MAX) return INT_MAX;
    if (v < INT_MIN) return INT_MIN;
    return v;
}

/* llama.cpp keeps the weights in a map ordered by block number, then name;
 * it visits (and writes) them in that order, and the use_more_bits counters
 * follow it. */
static int cmp_items(const void *a, const void *b) {
    const tela_gguf_tensor *x = ((const tela_quantize_item *)a)->src, *y = ((const tela_quantize_item *)b)->src;
    long lx = block_number(x->t.name), ly = block_number(y->t.name);
    if (lx != ly) return lx < ly ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

/* "<arch>.<suffix>" as an integer (scalar, or element 0 of an array), or def. */
static tela_status arch_int(const tela_gguf *g, const char *arch, const char *suffix, int64_t def, int64_t *out) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const tela_gguf_kv *kv = tela_gguf_find(g, key);
    *out = def;
    if (!kv) return TELA_OK;
    if (kv->value.type == TELA_GGUF_ARRAY) {
        const tela_gguf_value *v = &kv->value;
        bool numeric = v->v.arr.elem_type != TELA_GGUF_STRING && v->v.arr.elem_type != TELA_GGUF_ARRAY &&
                       v->v.arr.elem_type != TELA_GGUF_FLOAT32 && v->v.arr.elem_type != TELA_GGUF_FLOAT64;
        if (!numeric) return tela_errorf(TELA_ERR_FORMAT, "%s: key %s is not an integer array", g->path ? g->path : "", key);
        if (v->v.arr.n > 0) *out = tela_gguf_arr_i64(v, 0);
        return TELA_OK;
    }
    return tela_gguf_get_i64(g, key, out);
}

static tela_status read_model_info(const tela_gguf *g, qstate *q) {
    const char *path = g->path ? g->path : "input";
    tela_gguf_str s;
    if (tela_gguf_get_str(g, "general.architecture", &s) != TELA_OK)
        return tela_errorf(TELA_ERR_FORMAT, "%s: no general.architecture key: not a model file llama-quantize "
                           "could read", path);
    char arch[128];
    if (s.len == 0 || s.len >= sizeof arch) return tela_errorf(TELA_ERR_FORMAT, "%s: bad general.architecture", path);
    memcpy(arch, s.ptr, (size_t)s.len);
    arch[s.len] = '\0';
    q->falcon = !strcmp(arch, "falcon");
    int64_t n_layer;
    TELA_TRY(arch_int(g, arch, "block_count", -1, &n_layer));
    if (n_layer < 0) return tela_errorf(TELA_ERR_FORMAT, "%s: no %s.block_count key", path, arch);
    if (n_layer > INT_MAX) return tela_errorf(TELA_ERR_FORMAT, "%s: %s.block_count %lld is absurd", path, arch,
                                              (long long)n_layer);
    q->n_layer = n_layer;
    TELA_TRY(arch_int(g, arch, "attention.head_count", 0, &q->n_head));
    TELA_TRY(arch_int(g, arch, "attention.head_count_kv", q->n_head, &q->n_head_kv));
    TELA_TRY(arch_int(g, arch, "expert_count", 0, &q->n_expert));
    /* llama.cpp's model type 70B: an 80-layer Llama with grouped-query attention */
    q->is_70b = !strcmp(arch, "llama") && n_layer == 80 && q->n_head != q->n_head_kv;
    return TELA_OK;
}

void tela_quantize_plan_free(tela_quantize_plan *plan) {
    if (!plan) return;
    free(plan->items);
    memset(plan, 0, sizeof *plan);
}

/* The output type of one tensor: the source's when it may not change,
 * the ftype's base type for the float ftypes, else the mixture's with the
 * row-length fallback. */
static tela_status tensor_type(qstate *q, const tela_tensor *t, tela_type base, tela_quantize_item *it) {
    it->type = t->type;
    if (!allows_quantization(t)) return TELA_OK;
    const tela_type_traits *bt = tela_type_get_traits(base);
    tela_type want = base;
    if (bt->is_quantized) {
        TELA_TRY(mixture_type(q, t, category(t->name), &want));
        it->wanted = want;
        bool fb;
        TELA_TRY(fallback_type(t, want, &it->type, &fb));
        it->fallback = fb;
    } else {
        it->type = want;
    }
    return TELA_OK;
}

tela_status tela_quantize_make_plan(const tela_gguf *in, tela_ftype ftype, int allow_requantize,
                                    tela_quantize_plan *out) {
    memset(out, 0, sizeof *out);
    const char *path = in->path ? in->path : "input";
    tela_type base = tela_ftype_base_type(ftype);
    if (base == TELA_TYPE_COUNT) return tela_errorf(TELA_ERR_ARG, "file type %d is not one tela quantize makes", (int)ftype);
    qstate q;
    memset(&q, 0, sizeof q);
    q.ftype = ftype;
    TELA_TRY(read_model_info(in, &q));
    if (in->n_tensors == 0) return tela_errorf(TELA_ERR_FORMAT, "%s: no tensors to quantize", path);

    tela_quantize_plan p;
    memset(&p, 0, sizeof p);
    p.items = calloc((size_t)in->n_tensors, sizeof *p.items);
    if (!p.items) return tela_errorf(TELA_ERR_NOMEM, "out of memory planning %llu tensors", (unsigned long long)in->n_tensors);
    p.n_items = (size_t)in->n_tensors;
    q.tied = true;
    for (size_t i = 0; i < p.n_items; i++) {
        p.items[i].src = &in->tensors[i];
        qcat c = category(in->tensors[i].t.name);
        if (cat_is_attn_v(c)) q.n_attention_wv++;
        if (c == CAT_OUTPUT) q.tied = false;
    }
    qsort(p.items, p.n_items, sizeof *p.items, cmp_items);

    tela_status st = TELA_OK;
    for (size_t i = 0; i < p.n_items && st == TELA_OK; i++) {
        tela_quantize_item *it = &p.items[i];
        const tela_tensor *t = &it->src->t;
        st = tensor_type(&q, t, base, it);
        if (st != TELA_OK) {
            tela_error_prefix(st, "%s: ", path);
            break;
        }
        it->convert = it->type != t->type;
        const tela_type_traits *src = tela_type_get_traits(t->type);
        if (it->convert) {
            if (src->is_quantized && !allow_requantize) {
                st = tela_errorf(TELA_ERR_UNSUPPORTED, "%s: tensor %s is already %s; requantizing it to %s loses "
                                 "accuracy (quantize from the F16/BF16/F32 file, or allow it with --allow-requantize)",
                                 path, t->name, src->name, tela_type_name(it->type));
                break;
            }
            bool readable = t->type == TELA_TYPE_F32 || t->type == TELA_TYPE_F16 || t->type == TELA_TYPE_BF16 ||
                            (src->is_quantized && src->can_dequantize);
            if (!readable) {
                st = tela_errorf(TELA_ERR_UNSUPPORTED, "%s: tensor %s has type %s, which cannot be converted to %s",
                                 path, t->name, src->name, tela_type_name(it->type));
                break;
            }
            if (src->is_quantized) p.n_requantized++;
        }
        st = tela_type_tensor_bytes(it->type, t->ne, t->n_dims, &it->nbytes);
        if (st != TELA_OK) {
            tela_error_prefix(st, "%s: tensor %s: ", path, t->name);
            break;
        }
        p.bytes_in += t->nbytes;
        p.bytes_out += it->nbytes;
        p.n_elements += (uint64_t)tela_tensor_nelements(t);
        p.n_fallback += it->fallback;
    }
    if (st != TELA_OK) {
        tela_quantize_plan_free(&p);
        return st;
    }
    *out = p;
    return TELA_OK;
}

/* ------------------------------------------------------------ converting */

/* Rows are handed to threads in chunks of about this many elements (as
 * llama-quantize does). */
#define QUANT_CHUNK_ELEMS 16384

typedef struct qjob {
    const tela_quantize_item *it;
    int64_t ne0, rows, rows_per_chunk, n_chunks;
    size_t src_row_bytes, dst_row_bytes;
    int fd;
    uint64_t offset;          /* of the tensor in the scratch file */
    const char *scratch_path;
    double *chunk_err, *chunk_src;  /* per chunk, when measuring the error */
    int64_t next_chunk;       /* atomic */
    int failed;               /* atomic */
    pthread_mutex_t lock;
    tela_status status;       /* the first failure, under lock */
    char message[512];
} qjob;

static tela_status write_all(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return tela_errorf(TELA_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        if (k == 0) return tela_errorf(TELA_ERR_IO, "%s: write failed: no space written", path);
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return TELA_OK;
}

/* Error messages are per thread: a worker's is copied for the caller. */
static void job_fail(qjob *j, tela_status st) {
    pthread_mutex_lock(&j->lock);
    if (j->status == TELA_OK) {
        j->status = st;
        snprintf(j->message, sizeof j->message, "%s", tela_last_error());
    }
    pthread_mutex_unlock(&j->lock);
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}

static void *job_worker(void *arg) {
    qjob *j = arg;
    const tela_tensor *t = &j->it->src->t;
    float *row = malloc((size_t)j->ne0 * sizeof *row + 1);
    float *back = j->chunk_err ? malloc((size_t)j->ne0 * sizeof *back + 1) : NULL;
    unsigned char *out = malloc((size_t)j->rows_per_chunk * j->dst_row_bytes + 1);
    if (!row || !out || (j->chunk_err && !back)) {
        job_fail(j, tela_errorf(TELA_ERR_NOMEM, "out of memory converting tensor %s", t->name));
        goto done;
    }
    for (;;) {
        if (__atomic_load_n(&j->failed, __ATOMIC_RELAXED)) break;
        int64_t c = __atomic_fetch_add(&j->next_chunk, 1, __ATOMIC_RELAXED);
        if (c >= j->n_chunks) break;
        int64_t r0 = c * j->rows_per_chunk;
        int64_t nr = j->rows - r0 < j->rows_per_chunk ? j->rows - r0 : j->rows_per_chunk;
        const unsigned char *src = (const unsigned char *)t->data + (size_t)r0 * j->src_row_bytes;
        tela_status st = TELA_OK;
        for (int64_t r = 0; r < nr && st == TELA_OK; r++) {
            st = tela_dequantize_row(t->type, src + (size_t)r * j->src_row_bytes, row, j->ne0);
            if (st == TELA_OK) st = tela_quantize_row(j->it->type, row, out + (size_t)r * j->dst_row_bytes, j->ne0);
            if (st == TELA_OK && back) {
                st = tela_dequantize_row(j->it->type, out + (size_t)r * j->dst_row_bytes, back, j->ne0);
                for (int64_t k = 0; k < j->ne0; k++) {
                    double d = (double)back[k] - (double)row[k];
                    j->chunk_err[c] += d * d;
                    j->chunk_src[c] += (double)row[k] * (double)row[k];
                }
            }
            if (st != TELA_OK) tela_error_prefix(st, "tensor %s, row %lld: ", t->name, (long long)(r0 + r));
        }
        if (st == TELA_OK)
            st = write_all(j->fd, out, (size_t)nr * j->dst_row_bytes, j->offset + (uint64_t)r0 * j->dst_row_bytes,
                           j->scratch_path);
        if (st != TELA_OK) {
            job_fail(j, st);
            break;
        }
    }
done:
    free(row);
    free(back);
    free(out);
    return NULL;
}

/* Converts one tensor into the scratch file at offset with up to n_threads
 * threads (the caller's among them); with err non-NULL, also its squared
 * error and the source's squared sum (in chunk order: deterministic). */
static tela_status convert_tensor(const tela_quantize_item *it, int fd, uint64_t offset, const char *scratch_path,
                                  int n_threads, double *err, double *src_sq) {
    const tela_tensor *t = &it->src->t;
    qjob j;
    memset(&j, 0, sizeof j);
    j.it = it;
    j.ne0 = t->ne[0];
    j.rows = t->ne[0] ? tela_tensor_nelements(t) / t->ne[0] : 0;
    if (j.rows == 0) return TELA_OK;
    j.src_row_bytes = tela_type_row_bytes(t->type, j.ne0);
    j.dst_row_bytes = tela_type_row_bytes(it->type, j.ne0);
    if (!j.src_row_bytes || !j.dst_row_bytes) return tela_error_prefix(TELA_ERR_INTERNAL, "tensor %s: ", t->name);
    j.rows_per_chunk = j.ne0 >= QUANT_CHUNK_ELEMS ? 1 : QUANT_CHUNK_ELEMS / j.ne0;
    j.n_chunks = (j.rows + j.rows_per_chunk - 1) / j.rows_per_chunk;
    j.fd = fd;
    j.offset = offset;
    j.scratch_path = scratch_path;
    if (err) {
        j.chunk_err = calloc((size_t)j.n_chunks, sizeof *j.chunk_err);
        j.chunk_src = calloc((size_t)j.n_chunks, sizeof *j.chunk_src);
        if (!j.chunk_err || !j.chunk_src) {
            free(j.chunk_err);
            free(j.chunk_src);
            return tela_errorf(TELA_ERR_NOMEM, "out of memory converting tensor %s", t->name);
        }
    }
    pthread_mutex_init(&j.lock, NULL);
    int n = n_threads < 1 ? 1 : n_threads;
    if (n > j.n_chunks) n = (int)j.n_chunks;
    pthread_t *th = n > 1 ? calloc((size_t)n - 1, sizeof *th) : NULL;
    int started = 0;
    for (int i = 0; th && i < n - 1; i++) {
        if (pthread_create(&th[i], NULL, job_worker, &j) != 0) break;
        started++;
    }
    job_worker(&j);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    pthread_mutex_destroy(&j.lock);
    if (err) {
        *err = *src_sq = 0;
        for (int64_t c = 0; c < j.n_chunks; c++) {
            *err += j.chunk_err[c];
            *src_sq += j.chunk_src[c];
        }
        free(j.chunk_err);
        free(j.chunk_src);
    }
    if (j.status != TELA_OK) return tela_errorf(j.status, "%s", j.message);
    return TELA_OK;
}

/* ---------------------------------------------------------------- driver */

tela_quantize_params tela_quantize_default_params(void) {
    tela_quantize_params p;
    memset(&p, 0, sizeof p);
    p.ftype = TELA_FTYPE_MOSTLY_Q4_K_M;
    return p;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool skip_key(const char *key) {
    static const char *const keys[] = {"general.quantization_version", "general.file_type", "split.no", "split.count",
                                       "split.tensors.count"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(key, keys[i])) return true;
    return false;
}

static void progress(const tela_quantize_params *p, size_t i, size_t n, const tela_quantize_item *it) {
    if (!p->progress) return;
    const tela_tensor *t = &it->src->t;
    fprintf(stderr, "\r\033[K[%4zu/%4zu] %-36s %-6s -> %-6s %9.2f MiB", i + 1, n, t->name, tela_type_name(t->type),
            tela_type_name(it->type), (double)it->nbytes / (1024.0 * 1024.0));
    if (i + 1 == n) fputc('\n', stderr);
    fflush(stderr);
}

static void warn_plan(const tela_quantize_params *p, const tela_quantize_plan *plan) {
    if (!p->verbose) return;
    int shown = 0;
    for (size_t i = 0; i < plan->n_items; i++) {
        const tela_quantize_item *it = &plan->items[i];
        if (!it->fallback || shown++ >= 6) continue;
        fprintf(stderr, "tela quantize: warning: %s: rows of %lld elements are not a multiple of %s's block of %lld: "
                "using %s\n", it->src->t.name, (long long)it->src->t.ne[0], tela_type_name(it->wanted),
                (long long)tela_type_get_traits(it->wanted)->block_size, tela_type_name(it->type));
    }
    if (shown > 6) fprintf(stderr, "tela quantize: warning: ... and %d more fallbacks\n", shown - 6);
    if (plan->n_requantized)
        fprintf(stderr, "tela quantize: warning: %d tensors were already quantized and are requantized: the "
                "result is worse than quantizing the F16/BF16/F32 model\n", plan->n_requantized);
}

static tela_status quantize_open(const char *in_path, const char *out_path, const tela_quantize_params *p,
                                 tela_gguf *g, tela_quantize_stats *stats) {
    const tela_gguf_kv *split = tela_gguf_find(g, "split.count");
    if (split && split->value.type != TELA_GGUF_ARRAY && split->value.v.u64 > 1)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: a split GGUF (split.count = %llu): merge the parts first",
                           in_path, (unsigned long long)split->value.v.u64);
    tela_quantize_plan plan;
    TELA_TRY(tela_quantize_make_plan(g, p->ftype, p->allow_requantize, &plan));
    warn_plan(p, &plan);

    tela_status st = TELA_OK;
    tela_gguf_writer *w = tela_gguf_writer_create();
    int fd = -1, n_threads = 1;
    unsigned char *map = NULL;
    uint64_t total = 0;
    uint64_t *offsets = calloc(plan.n_items + 1, sizeof *offsets);
    char *scratch = malloc(strlen(out_path) + 64);
    if (!w || !offsets || !scratch) {
        st = tela_errorf(TELA_ERR_NOMEM, "out of memory");
        goto out;
    }
    /* metadata: all of it, then the two keys llama-quantize sets (last) */
    for (uint64_t i = 0; i < g->n_kv && st == TELA_OK; i++)
        if (!skip_key(g->kv[i].key)) st = tela_gguf_writer_copy_kv(w, &g->kv[i]);
    if (st == TELA_OK) st = tela_gguf_writer_add_u32(w, "general.quantization_version", 2);
    if (st == TELA_OK) st = tela_gguf_writer_add_u32(w, "general.file_type", (uint32_t)p->ftype);
    if (st != TELA_OK) goto out;

    /* converted data goes to an unlinked scratch file beside the output (the
     * writer references tensor data until it writes), so memory stays small
     * for any model; copied tensors are taken from the input's mapping */
    for (size_t i = 0; i < plan.n_items; i++) {
        offsets[i] = total;
        if (plan.items[i].convert) total += ((uint64_t)plan.items[i].nbytes + 63) & ~(uint64_t)63;
    }
    if (total > 0) {
        snprintf(scratch, strlen(out_path) + 64, "%s.quantize-scratch.%ld", out_path, (long)getpid());
        fd = open(scratch, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            st = tela_errorf(TELA_ERR_IO, "%s: cannot create a scratch file: %s", scratch, strerror(errno));
            goto out;
        }
        unlink(scratch);
        int e = posix_fallocate(fd, 0, (off_t)total);
        if (e) {
            st = tela_errorf(TELA_ERR_IO, "%s: cannot reserve %llu bytes for the converted tensors: %s", out_path,
                             (unsigned long long)total, strerror(e));
            goto out;
        }
    }
    n_threads = p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    for (size_t i = 0; i < plan.n_items; i++) {
        progress(p, i, plan.n_items, &plan.items[i]);
        double err = 0, src_sq = 0;
        if (plan.items[i].convert) {
            st = convert_tensor(&plan.items[i], fd, offsets[i], scratch, n_threads, p->measure_error ? &err : NULL,
                                &src_sq);
            if (st != TELA_OK) {
                if (p->progress) fputc('\n', stderr);
                goto out;
            }
        }
        if (p->on_tensor) p->on_tensor(p->user, &plan.items[i], err, src_sq);
    }
    if (total > 0) {
        map = mmap(NULL, (size_t)total, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            st = tela_errorf(TELA_ERR_IO, "%s: mmap of the scratch file failed: %s", out_path, strerror(errno));
            goto out;
        }
    }
    for (size_t i = 0; i < plan.n_items && st == TELA_OK; i++) {
        const tela_quantize_item *it = &plan.items[i];
        const tela_tensor *t = &it->src->t;
        const void *data = it->convert ? (const void *)(map + offsets[i]) : t->data;
        /* a 0-dimensional (scalar) tensor is written with one dimension, as
         * ggml writes every tensor */
        st = tela_gguf_writer_add_tensor(w, t->name, it->type, t->ne, t->n_dims < 1 ? 1 : t->n_dims, data,
                                         it->nbytes);
    }
    if (st == TELA_OK) st = tela_gguf_writer_write(w, out_path);
    if (st == TELA_OK && stats) {
        stats->n_tensors = plan.n_items;
        for (size_t i = 0; i < plan.n_items; i++) stats->n_converted += (size_t)plan.items[i].convert;
        stats->n_fallback = plan.n_fallback;
        stats->n_requantized = plan.n_requantized;
        stats->bytes_in = plan.bytes_in;
        stats->bytes_out = plan.bytes_out;
        stats->n_elements = plan.n_elements;
        stats->n_threads = n_threads;
        struct stat sb;
        if (stat(out_path, &sb) == 0) stats->file_bytes = (uint64_t)sb.st_size;
    }
out:
    if (map) munmap(map, (size_t)total);
    if (fd >= 0) close(fd);
    free(scratch);
    free(offsets);
    tela_gguf_writer_free(w);
    tela_quantize_plan_free(&plan);
    return st;
}

tela_status tela_quantize_gguf(const char *in_path, const char *out_path, const tela_quantize_params *params,
                               tela_quantize_stats *stats) {
    if (!in_path || !out_path || !params) return tela_errorf(TELA_ERR_ARG, "tela_quantize_gguf: NULL argument");
    if (stats) memset(stats, 0, sizeof *stats);
    if (!tela_ftype_name(params->ftype))
        return tela_errorf(TELA_ERR_ARG, "file type %d is not one tela quantize makes", (int)params->ftype);
    double t0 = now_seconds();
    tela_gguf *g;
    TELA_TRY(tela_gguf_open(in_path, &g));
    tela_status st = quantize_open(in_path, out_path, params, g, stats);
    tela_gguf_close(g);
    if (st == TELA_OK && stats) stats->seconds = now_seconds() - t0;
    return st;
}
