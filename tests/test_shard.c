/* test_shard.c: the tensor-parallel shard plan (model/shard.h) at the real
 * Llama-3.x and Qwen3.5 shapes, checked against what the plan must mean,
 * computed here independently of it:
 *   - every sharded tensor's ranges over the ranks cover its rows or
 *     columns exactly once (a partition; wk and wv rows world / n_kv_head
 *     times with more ranks than KV heads), for 1 to 16 ranks;
 *   - each rank's heads agree across tensors: the query heads of its wq
 *     rows read only KV heads of its wk/wv rows and are its wo columns;
 *     the value heads of its DeltaNet tensors (z, v part of qkv, conv,
 *     beta/alpha/A/dt, out_proj columns) use only key heads of its q/k
 *     rows, in both value-head orders (HF, and llama.cpp's tiled GGUF);
 *   - a few ranges worked out by hand for the 8B and the 27B;
 *   - more ranks than KV heads: each KV head copied to world / n_kv_head
 *     ranks (those taking its query heads), worked out by hand for the 2B;
 *   - the refusals (KV heads or key heads that do not divide) and the
 *     block-boundary check of quantized column shards;
 *   - the plan's lengths against real files (the demo models, the test
 *     fixtures): every tensor it splits has, in the file, the rows or
 *     columns the plan divides (names and layouts as llama.cpp writes them);
 *   - extraction: a rank's rows or columns cut from a stored tensor of
 *     each weight type dequantize to exactly those rows and columns of the
 *     whole tensor dequantized (quant/dequant.c, the reference). */
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "model/shard.h"
#include "quant/quant.h"
#include "test.h"

static const tela_shard_dims llama_8b = {4096, 14336, 128256, 32, 8, 128, 0, 0, 0, 0, 0, 0};
static const tela_shard_dims llama_1b = {2048, 8192, 128256, 32, 8, 64, 0, 0, 0, 0, 0, 0};
static const tela_shard_dims qwen_2b = {2048, 6144, 248320, 8, 2, 256, 1, 16, 16, 128, 128, 1};
static const tela_shard_dims qwen_27b = {5120, 17408, 248320, 24, 4, 256, 1, 16, 48, 128, 128, 1};

/* The length of a role's split axis, from the dims. */
static int64_t axis_len(const tela_shard_dims *d, tela_shard_role role) {
    switch (role) {
    case TELA_ROLE_TOKEN_EMBD: case TELA_ROLE_OUTPUT: return d->n_vocab;
    case TELA_ROLE_WQ: return (int64_t)d->n_head * d->head_dim * (d->q_gate ? 2 : 1);
    case TELA_ROLE_WK: case TELA_ROLE_WV: return (int64_t)d->n_kv_head * d->head_dim;
    case TELA_ROLE_WO: return (int64_t)d->n_head * d->head_dim;
    case TELA_ROLE_FFN_GATE: case TELA_ROLE_FFN_UP: case TELA_ROLE_FFN_DOWN: return d->n_ff;
    case TELA_ROLE_GDN_QKV: case TELA_ROLE_GDN_CONV:
        return 2 * (int64_t)d->gdn_nk * d->gdn_dk + (int64_t)d->gdn_nv * d->gdn_dv;
    case TELA_ROLE_GDN_Z: case TELA_ROLE_GDN_OUT: return (int64_t)d->gdn_nv * d->gdn_dv;
    case TELA_ROLE_GDN_HEAD: return d->gdn_nv;
    default: return 0;
    }
}

static bool is_gdn(tela_shard_role r) { return r >= TELA_ROLE_GDN_QKV && r <= TELA_ROLE_GDN_OUT; }

/* mark[i] = how many ranks hold unit i of the axis: one each, except the
 * rows of wk and wv with more ranks than KV heads, which world / n_kv_head
 * ranks hold copies of */
static void test_partition(const char *what, const tela_shard_dims *d, int world) {
    for (int role = TELA_ROLE_TOKEN_EMBD; role < TELA_ROLE_COUNT; role++) {
        if (is_gdn(role) && !d->gdn_nk) continue;
        const int64_t n = axis_len(d, role);
        const bool kv = role == TELA_ROLE_WK || role == TELA_ROLE_WV;
        const int copies = kv && world > d->n_kv_head ? world / d->n_kv_head : 1;
        int *mark = calloc((size_t)n, sizeof(int));
        bool ok = true;
        const tela_shard_axis want = role == TELA_ROLE_WO || role == TELA_ROLE_FFN_DOWN || role == TELA_ROLE_GDN_OUT
                                         ? TELA_SHARD_COLS
                                         : TELA_SHARD_ROWS;
        for (int r = 0; r < world; r++) {
            tela_shard s;
            tela_shard_of(d, role, r, world, &s);
            if (world == 1) {
                ok = ok && s.axis == TELA_SHARD_WHOLE && s.n_ranges == 0;
                continue;
            }
            ok = ok && s.axis == want && s.n_ranges >= 1;
            for (int k = 0; k < s.n_ranges; k++) {
                ok = ok && s.begin[k] >= 0 && s.count[k] > 0 && s.begin[k] + s.count[k] <= n;
                if (k > 0) ok = ok && s.begin[k] > s.begin[k - 1] + s.count[k - 1]; /* ordered, not adjacent */
                for (int64_t i = s.begin[k]; ok && i < s.begin[k] + s.count[k]; i++) mark[i]++;
            }
            if (kv) ok = ok && s.n_ranges == 1 && s.count[0] == (int64_t)tela_shard_kv_heads(d, world) * d->head_dim;
        }
        if (world > 1)
            for (int64_t i = 0; i < n; i++) ok = ok && mark[i] == copies;
        CHECK_MSG(ok, "%s, %d ranks: role %d is not a partition of its %lld units (each held by %d)", what, world,
                  role, (long long)n, copies);
        free(mark);
    }
}

/* Whether unit u of a shard's axis belongs to it. */
static bool holds(const tela_shard *s, int64_t u) {
    for (int k = 0; k < s->n_ranges; k++)
        if (u >= s->begin[k] && u < s->begin[k] + s->count[k]) return true;
    return false;
}

static void test_heads(const char *what, const tela_shard_dims *d, int world) {
    for (int r = 0; r < world; r++) {
        tela_shard q, k, v, o;
        tela_shard_of(d, TELA_ROLE_WQ, r, world, &q);
        tela_shard_of(d, TELA_ROLE_WK, r, world, &k);
        tela_shard_of(d, TELA_ROLE_WV, r, world, &v);
        tela_shard_of(d, TELA_ROLE_WO, r, world, &o);
        const int qrows = d->head_dim * (d->q_gate ? 2 : 1), group = d->n_head / d->n_kv_head;
        bool ok = true;
        int n_q = 0;
        for (int h = 0; h < d->n_head; h++) {
            const bool mine = holds(&q, (int64_t)h * qrows);
            n_q += mine;
            /* the whole head: its rows, its wo columns, its KV head's rows */
            for (int i = 0; i < qrows; i++) ok = ok && holds(&q, (int64_t)h * qrows + i) == mine;
            for (int i = 0; i < d->head_dim; i++) ok = ok && holds(&o, (int64_t)h * d->head_dim + i) == mine;
            if (mine) ok = ok && holds(&k, (int64_t)(h / group) * d->head_dim) && holds(&v, (int64_t)(h / group) * d->head_dim);
        }
        ok = ok && n_q == d->n_head / world;
        CHECK_MSG(ok, "%s, rank %d of %d: attention heads disagree across wq, wk, wv, wo", what, r, world);
        if (!d->gdn_nk) continue;
        tela_shard qkv, conv, z, hd, out;
        tela_shard_of(d, TELA_ROLE_GDN_QKV, r, world, &qkv);
        tela_shard_of(d, TELA_ROLE_GDN_CONV, r, world, &conv);
        tela_shard_of(d, TELA_ROLE_GDN_Z, r, world, &z);
        tela_shard_of(d, TELA_ROLE_GDN_HEAD, r, world, &hd);
        tela_shard_of(d, TELA_ROLE_GDN_OUT, r, world, &out);
        const int64_t nk = d->gdn_nk, dk = d->gdn_dk, dv = d->gdn_dv, g = d->gdn_nv / d->gdn_nk;
        ok = qkv.n_ranges == conv.n_ranges;
        for (int i = 0; ok && i < qkv.n_ranges; i++) ok = qkv.begin[i] == conv.begin[i] && qkv.count[i] == conv.count[i];
        int n_k = 0, n_v = 0;
        for (int64_t kh = 0; kh < nk; kh++) {
            const bool mine = holds(&qkv, kh * dk);
            n_k += mine;
            ok = ok && holds(&qkv, nk * dk + kh * dk) == mine && holds(&qkv, nk * dk + kh * dk + dk - 1) == mine;
        }
        for (int64_t vh = 0; vh < d->gdn_nv; vh++) {
            const bool mine = holds(&hd, vh);
            n_v += mine;
            const int64_t kh = d->gdn_tiled ? vh % nk : vh / g; /* the key head this value head uses */
            ok = ok && (!mine || holds(&qkv, kh * dk));
            ok = ok && holds(&z, vh * dv) == mine && holds(&z, vh * dv + dv - 1) == mine;
            ok = ok && holds(&out, vh * dv) == mine && holds(&qkv, 2 * nk * dk + vh * dv + dv - 1) == mine;
        }
        ok = ok && n_k == nk / world && n_v == d->gdn_nv / world;
        CHECK_MSG(ok, "%s (%s value heads), rank %d of %d: DeltaNet heads disagree across its tensors", what,
                  d->gdn_tiled ? "tiled" : "HF", r, world);
    }
}

static void expect_range(const tela_shard_dims *d, tela_shard_role role, int rank, int world, int k, int64_t begin,
                         int64_t count) {
    tela_shard s;
    tela_shard_of(d, role, rank, world, &s);
    CHECK_MSG(k < s.n_ranges && s.begin[k] == begin && s.count[k] == count,
              "role %d rank %d of %d: range %d is [%lld, +%lld), expected [%lld, +%lld)", role, rank, world, k,
              k < s.n_ranges ? (long long)s.begin[k] : -1LL, k < s.n_ranges ? (long long)s.count[k] : -1LL,
              (long long)begin, (long long)count);
}

/* A shard cut from a random R x K tensor of `type` against the whole
 * tensor, both dequantized. */
static void test_extract_one(tela_type type, const tela_shard *s, int64_t R, int64_t K) {
    const size_t row = tela_type_row_bytes(type, K);
    float *x = malloc(sizeof(float) * (size_t)(R * K)), *full = malloc(sizeof(float) * (size_t)(R * K));
    unsigned char *w = malloc((size_t)R * row);
    for (int64_t i = 0; i < R * K; i++) x[i] = (float)((double)(test_rnd() >> 11) / 9007199254740992.0 - 0.5);
    for (int64_t r = 0; r < R; r++) {
        CHECK_OK(tela_quantize_row(type, x + r * K, w + (size_t)r * row, K));
        CHECK_OK(tela_dequantize_row(type, w + (size_t)r * row, full + r * K, K));
    }
    int64_t n = 0;
    for (int i = 0; i < s->n_ranges; i++) n += s->count[i];
    const int64_t out_rows = s->axis == TELA_SHARD_ROWS ? n : R, out_cols = s->axis == TELA_SHARD_COLS ? n : K;
    const size_t bytes = tela_shard_bytes(s, type, R, K);
    CHECK(bytes == (size_t)out_rows * tela_type_row_bytes(type, out_cols));
    unsigned char *part = malloc(bytes);
    CHECK_OK(tela_shard_extract(s, type, R, K, w, part));
    float *got = malloc(sizeof(float) * (size_t)out_cols);
    bool same = true;
    const size_t part_row = tela_type_row_bytes(type, out_cols);
    for (int64_t r = 0; r < out_rows; r++) {
        CHECK_OK(tela_dequantize_row(type, part + (size_t)r * part_row, got, out_cols));
        /* the whole tensor's row and columns this output row holds */
        int64_t src_row = r, c = 0;
        if (s->axis == TELA_SHARD_ROWS)
            for (int i = 0, left = (int)r; i < s->n_ranges; i++) {
                if (left < s->count[i]) { src_row = s->begin[i] + left; break; }
                left -= (int)s->count[i];
            }
        for (int i = 0; i < (s->axis == TELA_SHARD_COLS ? s->n_ranges : 1); i++) {
            const int64_t c0 = s->axis == TELA_SHARD_COLS ? s->begin[i] : 0, nc = s->axis == TELA_SHARD_COLS ? s->count[i] : K;
            for (int64_t j = 0; j < nc; j++, c++) same = same && got[c] == full[src_row * K + c0 + j];
        }
    }
    CHECK_MSG(same, "extract %s: axis %d, %d ranges: values differ from the whole tensor's", tela_type_get_traits(type)->name,
              (int)s->axis, s->n_ranges);
    free(x), free(full), free(w), free(part), free(got);
}

static void test_extract(void) {
    const tela_type types[] = {TELA_TYPE_F32, TELA_TYPE_F16, TELA_TYPE_BF16, TELA_TYPE_Q8_0, TELA_TYPE_Q4_K, TELA_TYPE_Q6_K};
    /* a small Qwen3.5-like shape: 2 key heads, 4 tiled value heads of 256 */
    const tela_shard_dims d = {1024, 1024, 40, 4, 2, 256, 1, 2, 4, 256, 256, 1};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        tela_shard s;
        tela_shard_of(&d, TELA_ROLE_GDN_Z, 1, 2, &s);    /* rows: value heads 1 and 3 (two ranges) */
        CHECK(s.n_ranges == 2);
        test_extract_one(types[t], &s, 1024, 512);
        tela_shard_of(&d, TELA_ROLE_GDN_OUT, 0, 2, &s);  /* columns: value heads 0 and 2 */
        CHECK(s.n_ranges == 2);
        test_extract_one(types[t], &s, 24, 1024);
        tela_shard_of(&d, TELA_ROLE_OUTPUT, 2, 4, &s);   /* vocabulary rows [20, 30) */
        test_extract_one(types[t], &s, 40, 256);
        tela_shard_of(&d, TELA_ROLE_FFN_DOWN, 3, 4, &s); /* columns [768, 1024) */
        test_extract_one(types[t], &s, 8, 1024);
        tela_shard_of(&d, TELA_ROLE_FFN_DOWN, 0, 1, &s); /* world 1: whole */
        test_extract_one(types[t], &s, 8, 1024);
    }
    /* a range outside the tensor, a column range that splits a block */
    tela_shard bad = {TELA_SHARD_ROWS, 1, {30}, {20}};
    unsigned char buf[64];
    CHECK(tela_shard_extract(&bad, TELA_TYPE_F32, 40, 1, buf, buf) == TELA_ERR_ARG);
    tela_shard split = {TELA_SHARD_COLS, 1, {128}, {128}};
    CHECK(tela_shard_bytes(&split, TELA_TYPE_Q4_K, 1, 256) == 0);
    unsigned char q4[144];
    memset(q4, 0, sizeof q4);
    CHECK(tela_shard_extract(&split, TELA_TYPE_Q4_K, 1, 256, q4, buf) == TELA_ERR_UNSUPPORTED);
}

static uint32_t meta_u32(const tela_gguf *g, const char *arch, const char *key, uint32_t dflt) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    uint32_t v;
    return tela_gguf_get_u32(g, k, &v) == TELA_OK ? v : dflt;
}

/* Every tensor of a GGUF file that the plan splits has the length the plan
 * divides, along the axis it divides. */
static void test_file(const char *rel) {
    const char *src = getenv("TELA_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    if (access(path, R_OK) != 0) {
        printf("note: %s not found\n", path);
        return;
    }
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_open(path, &g));
    if (!g) return;
    tela_gguf_str arch_s;
    CHECK_OK(tela_gguf_get_str(g, "general.architecture", &arch_s));
    char arch[32];
    snprintf(arch, sizeof arch, "%.*s", (int)arch_s.len, arch_s.ptr);
    const bool qwen = !strcmp(arch, "qwen35");
    tela_shard_dims d = {0};
    d.n_embd = meta_u32(g, arch, "embedding_length", 0);
    d.n_ff = meta_u32(g, arch, "feed_forward_length", 0);
    d.n_head = (int)meta_u32(g, arch, "attention.head_count", 0);
    d.n_kv_head = (int)meta_u32(g, arch, "attention.head_count_kv", (uint32_t)d.n_head);
    d.head_dim = (int)meta_u32(g, arch, "attention.key_length", d.n_head ? (uint32_t)(d.n_embd / d.n_head) : 0);
    const tela_gguf_tensor *te = tela_gguf_find_tensor(g, "token_embd.weight");
    d.n_vocab = te ? te->t.ne[1] : 0;
    if (qwen) {
        d.q_gate = 1, d.gdn_tiled = 1;
        d.gdn_nk = (int)meta_u32(g, arch, "ssm.group_count", 0);
        d.gdn_nv = (int)meta_u32(g, arch, "ssm.time_step_rank", 0);
        d.gdn_dk = (int)meta_u32(g, arch, "ssm.state_size", 0);
        d.gdn_dv = d.gdn_nv ? (int)(meta_u32(g, arch, "ssm.inner_size", 0) / (uint32_t)d.gdn_nv) : 0;
    }
    int checked = 0, gdn = 0;
    bool ok = true;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const tela_tensor *t = &g->tensors[i].t;
        const char *name = t->name;
        if (!strncmp(name, "blk.", 4)) { /* "blk.N." */
            const char *dot = strchr(name + 4, '.');
            if (dot) name = dot + 1;
        }
        const tela_shard_role role = tela_shard_role_of(name);
        if (role == TELA_ROLE_REPLICATED) continue;
        const bool cols = role == TELA_ROLE_WO || role == TELA_ROLE_FFN_DOWN || role == TELA_ROLE_GDN_OUT;
        const int64_t have = cols || t->n_dims == 1 ? t->ne[0] : t->ne[1];
        if (have != axis_len(&d, role)) {
            ok = false;
            printf("%s: %s has %lld along the split axis, the plan divides %lld\n", rel, t->name, (long long)have,
                   (long long)axis_len(&d, role));
        }
        checked++;
        gdn += is_gdn(role);
    }
    CHECK_MSG(ok, "%s: tensors disagree with the plan's lengths", rel);
    CHECK_MSG(checked > 0 && (!qwen || gdn > 0), "%s: %d tensors split (%d of the DeltaNet)", rel, checked, gdn);
    tela_gguf_close(g);
}

int main(void) {
    test_file("models/tela-kjv-f16.gguf");
    test_file("models/tela-kjv-qwen35-f16.gguf");
    test_file("tests/fixtures/llama/llama-gqa-f32.gguf");
    test_file("tests/fixtures/qwen35/qwen35-asym-f32.gguf");
    test_file("tests/fixtures/qwen35/qwen35-sym-f16.gguf");
    test_rng_seed(16);
    test_extract();
    const tela_shard_dims *shapes[] = {&llama_8b, &llama_1b, &qwen_2b, &qwen_27b};
    const char *names[] = {"Llama-3.1-8B", "Llama-3.2-1B", "Qwen3.5-2B", "Qwen3.5-27B"};
    for (int i = 0; i < 4; i++)
        for (int world = 1; world <= 16; world *= 2) {
            if (tela_shard_plan_check(shapes[i], world) != TELA_OK) continue;
            test_partition(names[i], shapes[i], world); /* world 1: every tensor whole */
            if (world == 1) continue;
            test_heads(names[i], shapes[i], world);
            if (shapes[i]->gdn_nk) { /* the other value-head order */
                tela_shard_dims hf = *shapes[i];
                hf.gdn_tiled = 0;
                test_partition(names[i], &hf, world);
                test_heads(names[i], &hf, world);
            }
        }

    /* by hand: the 8B over 2 and 4 GPUs */
    expect_range(&llama_8b, TELA_ROLE_WQ, 1, 2, 0, 2048, 2048);
    expect_range(&llama_8b, TELA_ROLE_WK, 1, 2, 0, 512, 512);
    expect_range(&llama_8b, TELA_ROLE_WO, 0, 2, 0, 0, 2048);
    expect_range(&llama_8b, TELA_ROLE_FFN_DOWN, 1, 2, 0, 7168, 7168);
    expect_range(&llama_8b, TELA_ROLE_OUTPUT, 3, 4, 0, 96192, 32064);
    /* the 27B's tiled value heads over 2: rank 0 has key heads 0-7 and value
     * heads 0-7, 16-23, 32-39 */
    expect_range(&qwen_27b, TELA_ROLE_GDN_Z, 0, 2, 0, 0, 1024);
    expect_range(&qwen_27b, TELA_ROLE_GDN_Z, 0, 2, 1, 2048, 1024);
    expect_range(&qwen_27b, TELA_ROLE_GDN_Z, 0, 2, 2, 4096, 1024);
    expect_range(&qwen_27b, TELA_ROLE_GDN_QKV, 1, 2, 0, 1024, 1024);       /* q of key heads 8-15 */
    expect_range(&qwen_27b, TELA_ROLE_GDN_QKV, 1, 2, 1, 3072, 1024);       /* their k */
    expect_range(&qwen_27b, TELA_ROLE_GDN_QKV, 1, 2, 2, 4096 + 1024, 1024); /* value heads 8-15 */
    expect_range(&qwen_27b, TELA_ROLE_GDN_HEAD, 1, 2, 2, 40, 8);
    expect_range(&qwen_27b, TELA_ROLE_WQ, 1, 4, 0, 6 * 512, 6 * 512);      /* query and gate rows of heads 6-11 */

    /* more ranks than KV heads: the 2B's 2 KV heads over 4 ranks, each
     * copied to two ranks, which take 2 of its 4 query heads each */
    expect_range(&qwen_2b, TELA_ROLE_WK, 1, 4, 0, 0, 256);
    expect_range(&qwen_2b, TELA_ROLE_WV, 2, 4, 0, 256, 256);
    expect_range(&qwen_2b, TELA_ROLE_WQ, 2, 4, 0, 4 * 2 * 256, 2 * 2 * 256); /* heads 4 and 5: query and gate rows */
    CHECK(tela_shard_kv_heads(&qwen_2b, 4) == 1 && tela_shard_kv_heads(&llama_8b, 4) == 2 &&
          tela_shard_kv_heads(&llama_8b, 1) == 8);

    /* refusals */
    CHECK(tela_shard_plan_check(&qwen_2b, 2) == TELA_OK);
    CHECK(tela_shard_plan_check(&qwen_2b, 8) == TELA_OK);
    CHECK(tela_shard_plan_check(&qwen_2b, 3) == TELA_ERR_UNSUPPORTED);
    CHECK(strstr(tela_last_error(), "2 KV heads") != NULL);
    CHECK(tela_shard_plan_check(&qwen_2b, 16) == TELA_ERR_UNSUPPORTED); /* 8 query heads */
    CHECK(strstr(tela_last_error(), "8 query heads") != NULL);
    CHECK(tela_shard_plan_check(&llama_8b, 3) == TELA_ERR_UNSUPPORTED);
    CHECK(tela_shard_plan_check(&llama_8b, 8) == TELA_OK);
    CHECK(tela_shard_plan_check(&llama_8b, 16) == TELA_OK);
    CHECK(tela_shard_plan_check(&llama_8b, 64) == TELA_ERR_UNSUPPORTED);
    tela_shard_dims six = llama_8b; /* 8 KV heads do not copy evenly to 12 ranks */
    six.n_head = 48, six.n_ff = 12 * 1024;
    CHECK(tela_shard_plan_check(&six, 12) == TELA_ERR_UNSUPPORTED);
    tela_shard_dims odd = qwen_27b;
    odd.n_kv_head = 8, odd.n_head = 32, odd.gdn_nk = 12, odd.gdn_nv = 36;
    CHECK(tela_shard_plan_check(&odd, 8) == TELA_ERR_UNSUPPORTED);
    CHECK(strstr(tela_last_error(), "12 Gated DeltaNet key heads") != NULL);
    CHECK(tela_shard_plan_check(&llama_8b, 0) == TELA_ERR_ARG);

    /* quantized column shards on block boundaries */
    tela_shard s;
    tela_shard_of(&llama_8b, TELA_ROLE_FFN_DOWN, 1, 2, &s);
    CHECK(tela_shard_check_type(&s, TELA_TYPE_Q4_K, "blk.0.ffn_down.weight") == TELA_OK);
    tela_shard_dims narrow = llama_1b;
    narrow.n_ff = 8192 + 64; /* 8256 / 2 = 4128 columns: not a multiple of 256 */
    tela_shard_of(&narrow, TELA_ROLE_FFN_DOWN, 1, 2, &s);
    CHECK(tela_shard_check_type(&s, TELA_TYPE_Q4_K, "blk.0.ffn_down.weight") == TELA_ERR_UNSUPPORTED);
    CHECK(strstr(tela_last_error(), "blk.0.ffn_down.weight") && strstr(tela_last_error(), "4128"));
    CHECK(tela_shard_check_type(&s, TELA_TYPE_Q8_0, "blk.0.ffn_down.weight") == TELA_OK);
    tela_shard_of(&narrow, TELA_ROLE_FFN_UP, 1, 2, &s); /* whole rows: any type */
    CHECK(tela_shard_check_type(&s, TELA_TYPE_Q4_K, "blk.0.ffn_up.weight") == TELA_OK);

    /* names */
    CHECK(tela_shard_role_of("attn_q.weight") == TELA_ROLE_WQ);
    CHECK(tela_shard_role_of("ssm_out.weight") == TELA_ROLE_GDN_OUT);
    CHECK(tela_shard_role_of("ssm_dt.bias") == TELA_ROLE_GDN_HEAD);
    CHECK(tela_shard_role_of("attn_norm.weight") == TELA_ROLE_REPLICATED);
    CHECK(tela_shard_role_of("attn_q_norm.weight") == TELA_ROLE_REPLICATED);
    return test_finish();
}
