/* test_corrupt.c: thousands of corrupted GGUF and safetensors files, made in
 * memory from valid ones (a small file built with the writer, the real
 * converter-made GGUFs and the HF checkpoint from ../shared when present):
 * truncations, bit flips and byte changes in the header, metadata and tensor
 * infos, huge counts and string lengths, bad offsets, alignments, types and
 * JSON. Each must parse cleanly or fail with an error naming the input,
 * never crash or read out of bounds (run it under ASan/UBSan). Parses that
 * succeed are walked completely and checked for consistency. Inputs that
 * once broke a parser are kept at the end as regression cases. */
#include <stdint.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "quant/quant.h"
#include "test.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static long g_ok, g_err;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static volatile unsigned g_sink;

/* Checks that a range lies inside the buffer and reads its first and last
 * bytes (so ASan also sees any overread; the range is contiguous, so its
 * ends are enough). */
static int touch(const unsigned char *buf, size_t size, const void *p, uint64_t len) {
    const unsigned char *q = p;
    if (len == 0) return 1;
    if (!q || q < buf || (uint64_t)(buf + size - q) < len) return 0;
    g_sink += q[0] + q[len - 1];
    return 1;
}

static size_t vsize(tela_gguf_vtype t) {
    switch (t) {
    case TELA_GGUF_UINT8: case TELA_GGUF_INT8: case TELA_GGUF_BOOL: return 1;
    case TELA_GGUF_UINT16: case TELA_GGUF_INT16: return 2;
    case TELA_GGUF_UINT32: case TELA_GGUF_INT32: case TELA_GGUF_FLOAT32: return 4;
    case TELA_GGUF_UINT64: case TELA_GGUF_INT64: case TELA_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static int walk_value(const unsigned char *buf, size_t size, const tela_gguf_value *v, int depth) {
    if (depth > 8) return 0;
    if (vsize(v->type)) return 1;
    if (v->type == TELA_GGUF_STRING) return touch(buf, size, v->v.str.ptr, v->v.str.len);
    if (v->type != TELA_GGUF_ARRAY) return 0;
    uint64_t n = v->v.arr.n;
    size_t es = vsize(v->v.arr.elem_type);
    if (es) {
        if (!touch(buf, size, v->v.arr.raw, n * es)) return 0;
        if (n) g_sink += (unsigned)tela_gguf_arr_i64(v, n - 1) + (tela_gguf_arr_f64(v, 0) > 0.0);
        return 1;
    }
    if (v->v.arr.elem_type == TELA_GGUF_STRING) {
        for (uint64_t i = 0; i < n; i++)
            if (!touch(buf, size, v->v.arr.strs[i].ptr, v->v.arr.strs[i].len)) return 0;
        return 1;
    }
    if (v->v.arr.elem_type != TELA_GGUF_ARRAY) return 0;
    for (uint64_t i = 0; i < n; i++)
        if (v->v.arr.items[i].type != TELA_GGUF_ARRAY || !walk_value(buf, size, &v->v.arr.items[i], depth + 1)) return 0;
    return 1;
}

/* Parses p[0..n) and checks the result. p must be a heap block of exactly n
 * bytes, so that reading past the end is caught. */
static void check_gguf(const unsigned char *p, size_t n, const char *what) {
    tela_gguf *g = NULL;
    tela_status s = tela_gguf_parse(p, n, "corrupt.gguf", &g);
    if (s != TELA_OK) {
        g_err++;
        if (getenv("TELA_CORRUPT_VERBOSE")) printf("%s: %s\n", what, tela_last_error());
        CHECK_MSG(g == NULL, "%s: handle set on failure", what);
        CHECK_MSG(strstr(tela_last_error(), "corrupt.gguf") != NULL, "%s: message without the name: %s", what,
                  tela_last_error());
        return;
    }
    g_ok++;
    int ok = g->alignment && !(g->alignment & (g->alignment - 1)) && g->data_offset <= n;
    for (uint64_t i = 0; i < g->n_kv && ok; i++) {
        ok = g->kv[i].key && *g->kv[i].key && walk_value(p, n, &g->kv[i].value, 0);
        ok = ok && tela_gguf_find(g, g->kv[i].key) == &g->kv[i];
    }
    for (uint64_t i = 0; i < g->n_tensors && ok; i++) {
        const tela_gguf_tensor *t = &g->tensors[i];
        size_t want = 0;
        ok = t->t.n_dims >= 0 && t->t.n_dims <= 4 && t->offset % g->alignment == 0 &&
             tela_type_tensor_bytes(t->t.type, t->t.ne, t->t.n_dims, &want) == TELA_OK && want == t->t.nbytes &&
             (const unsigned char *)t->t.data == p + g->data_offset + t->offset && touch(p, n, t->t.data, t->t.nbytes);
        for (int d = 0; d < 4 && ok; d++) ok = t->t.ne[d] >= 0;
        ok = ok && tela_gguf_find_tensor(g, t->t.name) == t;
        if (ok) g_sink += (unsigned)tela_tensor_nelements(&t->t);
    }
    CHECK_MSG(ok, "%s: parsed, but the result is inconsistent", what);
    tela_gguf_close(g);
}

/* The first n bytes of src, copied to a block of exactly n bytes. */
static void try_gguf(const unsigned char *src, size_t n, const char *what) {
    unsigned char *p = malloc(n ? n : 1);
    if (n) memcpy(p, src, n);
    check_gguf(p, n, what);
    free(p);
}

/* Field positions worth corrupting, found from a parse of the intact file:
 * length and count fields just before strings and arrays, plus the header. */
static size_t collect_fields(const unsigned char *buf, size_t n, size_t *pos, size_t cap) {
    size_t k = 0;
    for (size_t i = 4; i < 24 && k < cap; i += 4) pos[k++] = i;
    tela_gguf *g = NULL;
    if (tela_gguf_parse(buf, n, "intact", &g) != TELA_OK) return k;
    for (uint64_t i = 0; i < g->n_kv && k + 8 < cap; i++) {
        const tela_gguf_value *v = &g->kv[i].value;
        if (v->type == TELA_GGUF_STRING) {
            pos[k++] = (size_t)((const unsigned char *)v->v.str.ptr - buf) - 8;      /* its length */
            pos[k++] = (size_t)((const unsigned char *)v->v.str.ptr - buf) - 12;     /* its type */
        } else if (v->type == TELA_GGUF_ARRAY && v->v.arr.elem_type == TELA_GGUF_STRING && v->v.arr.n > 2) {
            size_t s0 = (size_t)((const unsigned char *)v->v.arr.strs[0].ptr - buf);
            pos[k++] = s0 - 8;    /* length of string 0 */
            pos[k++] = s0 - 16;   /* element count */
            pos[k++] = s0 - 20;   /* element type */
            pos[k++] = (size_t)((const unsigned char *)v->v.arr.strs[1].ptr - buf) - 8;
            pos[k++] = (size_t)((const unsigned char *)v->v.arr.strs[v->v.arr.n - 1].ptr - buf) - 8;
        } else if (v->type == TELA_GGUF_ARRAY && v->v.arr.raw) {
            pos[k++] = (size_t)((const unsigned char *)v->v.arr.raw - buf) - 8;
            pos[k++] = (size_t)((const unsigned char *)v->v.arr.raw - buf) - 12;
        }
    }
    tela_gguf_close(g);
    return k;
}

static void put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Runs every kind of corruption on one valid GGUF image. budget scales the
 * number of random variants (the real files are large, so they get fewer). */
static void corrupt_gguf(const unsigned char *orig, size_t n, int budget, const char *label) {
    char what[128];
    unsigned char *buf = malloc(n);
    memcpy(buf, orig, n);
    long before = g_ok + g_err;
    double t0 = now();

    /* the intact file must parse */
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_parse(orig, n, label, &g));
    size_t data_offset = g ? (size_t)g->data_offset : n;
    tela_gguf_close(g);

    /* truncation: every length in the first 256 bytes and around the data
     * section start, and random lengths elsewhere */
    for (size_t len = 0; len < n && len < 256; len++) {
        snprintf(what, sizeof what, "%s truncated to %zu", label, len);
        try_gguf(buf, len, what);
    }
    size_t around = n > (1u << 20) ? 4 : 16;
    for (size_t len = data_offset > around ? data_offset - around : 0; len < data_offset + around && len < n; len++) {
        snprintf(what, sizeof what, "%s truncated to %zu", label, len);
        try_gguf(buf, len, what);
    }
    for (int i = 0; i < budget; i++) {
        size_t len = (size_t)(rnd() % n);
        snprintf(what, sizeof what, "%s truncated to %zu", label, len);
        try_gguf(buf, len, what);
    }

    /* the region holding the header, metadata and tensor infos: the first
     * 4 KiB and the 8 KiB before the data section */
    size_t lo_end = data_offset < 4096 ? data_offset : 4096;
    size_t hi_start = data_offset > 8192 ? data_offset - 8192 : 0;
    for (int i = 0; i < budget * 3; i++) {
        size_t at = (i & 1) ? hi_start + (size_t)(rnd() % (data_offset - hi_start + 1))
                            : (size_t)(rnd() % (lo_end + 1));
        if (at >= n) continue;
        unsigned char saved = buf[at];
        int kind = (int)(rnd() % 3);
        if (kind == 0) buf[at] ^= (unsigned char)(1u << (rnd() % 8));
        else if (kind == 1) buf[at] = (unsigned char)rnd();
        else buf[at] = (rnd() & 1) ? 0xff : 0x00;
        snprintf(what, sizeof what, "%s byte %zu changed from %02x to %02x", label, at, saved, buf[at]);
        check_gguf(buf, n, what);
        buf[at] = saved;
    }

    /* huge and off-by-one values in counts, lengths and types */
    size_t fields[256];
    size_t nf = collect_fields(orig, n, fields, 256);
    static const uint64_t vals[] = {0, 1, 2, 7, 8, 9, 12, 13, 255, 0xffffffffull, 0x100000000ull,
                                    0x7fffffffffffffffull, 0x8000000000000000ull, 0xffffffffffffffffull};
    for (size_t f = 0; f < nf; f++) {
        size_t at = fields[f];
        if (at + 8 > n) continue;
        unsigned char saved[8];
        memcpy(saved, buf + at, 8);
        for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
            if (n > (1u << 20) && (f + v) % 6) continue; /* keep the count down on big files */
            put_le(buf + at, vals[v], 8);
            snprintf(what, sizeof what, "%s field at %zu set to %llu", label, at, (unsigned long long)vals[v]);
            check_gguf(buf, n, what);
            memcpy(buf + at, saved, 8);
            put_le(buf + at, vals[v], 4);
            check_gguf(buf, n, what);
            memcpy(buf + at, saved, 8);
        }
        /* the original length plus a little: the string runs into the next field */
        uint64_t orig_v = 0;
        for (int i = 7; i >= 0; i--) orig_v = orig_v << 8 | buf[at + i];
        for (uint64_t d = 1; d <= (n > (1u << 20) ? 1u : 3u); d++) {
            put_le(buf + at, orig_v + d, 8);
            snprintf(what, sizeof what, "%s field at %zu increased by %llu", label, at, (unsigned long long)d);
            check_gguf(buf, n, what);
            memcpy(buf + at, saved, 8);
        }
    }
    printf("%s: %ld variants, %.1f s\n", label, g_ok + g_err - before, now() - t0);
    free(buf);
}

/* A small file with every value type, a nested array and tensors of several
 * types, written with the writer. */
static unsigned char *small_gguf(const char *dir, size_t *n, uint32_t alignment) {
    char path[512];
    snprintf(path, sizeof path, "%s/small.gguf", dir);
    tela_gguf_writer *w = tela_gguf_writer_create();
    if (alignment) tela_gguf_writer_set_alignment(w, alignment);
    tela_gguf_writer_add_str(w, "general.architecture", "llama");
    tela_gguf_writer_add_u32(w, "llama.block_count", 2);
    tela_gguf_writer_add_i32(w, "k.i32", -5);
    tela_gguf_writer_add_u64(w, "k.u64", 1ull << 40);
    tela_gguf_writer_add_f32(w, "k.f32", 1.5f);
    tela_gguf_writer_add_bool(w, "k.bool", true);
    int8_t i8s[5] = {1, -2, 3, -4, 5};
    tela_gguf_writer_add_arr(w, "k.i8s", TELA_GGUF_INT8, i8s, 5);
    double f64s[2] = {0.5, -0.25};
    tela_gguf_writer_add_arr(w, "k.f64s", TELA_GGUF_FLOAT64, f64s, 2);
    const char *toks[6] = {"a", "bc", "", "<s>", "\xc4\xa0x", "zz"};
    tela_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", toks, 6);
    /* [[1, 2], ["q"]] */
    uint16_t nums[2] = {1, 2};
    tela_gguf_str qs[1] = {{"q", 1}};
    tela_gguf_value items[2];
    memset(items, 0, sizeof items);
    items[0].type = TELA_GGUF_ARRAY;
    items[0].v.arr.elem_type = TELA_GGUF_UINT16;
    items[0].v.arr.n = 2;
    items[0].v.arr.raw = nums;
    items[1].type = TELA_GGUF_ARRAY;
    items[1].v.arr.elem_type = TELA_GGUF_STRING;
    items[1].v.arr.n = 1;
    items[1].v.arr.strs = qs;
    tela_gguf_kv nested;
    memset(&nested, 0, sizeof nested);
    nested.key = "k.nested";
    nested.value.type = TELA_GGUF_ARRAY;
    nested.value.v.arr.elem_type = TELA_GGUF_ARRAY;
    nested.value.v.arr.n = 2;
    nested.value.v.arr.items = items;
    tela_gguf_writer_copy_kv(w, &nested);
    static unsigned char data[4096];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7);
    int64_t ne_a[2] = {8, 3}, ne_b[1] = {64}, ne_c[1] = {256}, ne_d[3] = {2, 2, 2};
    tela_gguf_writer_add_tensor(w, "a.f32", TELA_TYPE_F32, ne_a, 2, data, 96);
    tela_gguf_writer_add_tensor(w, "b.q8_0", TELA_TYPE_Q8_0, ne_b, 1, data, 68);
    tela_gguf_writer_add_tensor(w, "c.q6_K", TELA_TYPE_Q6_K, ne_c, 1, data, 210);
    tela_gguf_writer_add_tensor(w, "d.f16", TELA_TYPE_F16, ne_d, 3, data, 16);
    tela_status s = tela_gguf_writer_write(w, path);
    tela_gguf_writer_free(w);
    CHECK_OK(s);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static unsigned char out[16384];
    *n = fread(out, 1, sizeof out, f);
    fclose(f);
    unlink(path);
    return out;
}

/* Every byte of the small file set to a few values, one at a time. */
static void exhaustive_small(const unsigned char *orig, size_t n) {
    unsigned char *buf = malloc(n);
    memcpy(buf, orig, n);
    char what[96];
    size_t limit = n < 1024 ? n : 1024;
    for (size_t at = 0; at < limit; at++) {
        static const unsigned char vals[] = {0x00, 0xff, 0x01, 0x80, 0x7f, 0x20};
        unsigned char saved = buf[at];
        for (size_t v = 0; v < sizeof vals; v++) {
            if (vals[v] == saved) continue;
            buf[at] = vals[v];
            snprintf(what, sizeof what, "small byte %zu = %02x", at, vals[v]);
            check_gguf(buf, n, what);
        }
        buf[at] = saved;
    }
    free(buf);
}

static unsigned char *load(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)len + 1);
    if (fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* ---- safetensors */

/* Like check_gguf: p is a heap block of exactly n bytes. */
static void check_st(const unsigned char *p, size_t n, const char *what) {
    tela_st_file *f = NULL;
    tela_status s = tela_st_parse(p, n, "corrupt.safetensors", &f);
    if (s != TELA_OK) {
        g_err++;
        if (getenv("TELA_CORRUPT_VERBOSE")) printf("%s: %s\n", what, tela_last_error());
        CHECK_MSG(f == NULL, "%s: handle set on failure", what);
        CHECK_MSG(strstr(tela_last_error(), "corrupt.safetensors") != NULL, "%s: %s", what, tela_last_error());
        return;
    }
    g_ok++;
    int ok = tela_st_data_offset(f) <= n;
    for (size_t i = 0; i < tela_st_n_tensors(f) && ok; i++) {
        const tela_tensor *t = tela_st_tensor(f, i);
        ok = t->name && t->n_dims >= 0 && t->n_dims <= 4 && touch(p, n, t->data, t->nbytes) &&
             (const unsigned char *)t->data >= p + tela_st_data_offset(f) && tela_st_tensor_dtype(f, i);
        for (int d = 0; d < 4 && ok; d++) ok = t->ne[d] >= 0;
        if (ok) g_sink += (unsigned)tela_tensor_nelements(t); /* UBSan: must not overflow */
    }
    for (size_t i = 0; i < tela_st_n_metadata(f) && ok; i++) {
        const char *k, *v;
        tela_st_metadata(f, i, &k, &v);
        ok = k && v;
    }
    CHECK_MSG(ok, "%s: parsed, but the result is inconsistent", what);
    tela_st_close(f);
}

static void try_st(const unsigned char *src, size_t n, const char *what) {
    unsigned char *p = malloc(n ? n : 1);
    if (n) memcpy(p, src, n);
    check_st(p, n, what);
    free(p);
}

static unsigned char *st_image(const char *json, size_t data_len, size_t *n) {
    size_t h = strlen(json);
    unsigned char *p = malloc(8 + h + data_len);
    put_le(p, h, 8);
    memcpy(p + 8, json, h);
    for (size_t i = 0; i < data_len; i++) p[8 + h + i] = (unsigned char)i;
    *n = 8 + h + data_len;
    return p;
}

static void corrupt_st(const unsigned char *orig, size_t n, int budget, const char *label) {
    unsigned char *buf = malloc(n);
    memcpy(buf, orig, n);
    char what[128];
    long before = g_ok + g_err;
    double t0 = now();
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | orig[i];
    size_t hend = 8 + (size_t)hlen;
    for (size_t len = 0; len < n && len < 64; len++) try_st(buf, len, "truncated");
    for (int i = 0; i < budget; i++) {
        size_t len = (size_t)(rnd() % n);
        snprintf(what, sizeof what, "%s truncated to %zu", label, len);
        try_st(buf, len, what);
    }
    /* the header length */
    static const uint64_t lens[] = {0, 1, 2, 7, 0xffffffffull, 0xffffffffffffffffull, 0x8000000000000000ull};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        put_le(buf, lens[i], 8);
        check_st(buf, n, "header length");
    }
    for (uint64_t d = 1; d < 4; d++) {
        put_le(buf, hlen - d, 8);
        check_st(buf, n, "header length - d");
        put_le(buf, hlen + d, 8);
        check_st(buf, n, "header length + d");
    }
    memcpy(buf, orig, 8);
    /* JSON bytes: structural characters and digits replaced */
    static const char repl[] = "{}[]\",:0123456789-e.aZ \\\x01\xff";
    for (int i = 0; i < budget * 4; i++) {
        size_t at = 8 + (size_t)(rnd() % (hend - 8));
        unsigned char saved = buf[at];
        buf[at] = (unsigned char)repl[rnd() % (sizeof repl - 1)];
        snprintf(what, sizeof what, "%s byte %zu changed from %02x to %02x", label, at, saved, buf[at]);
        check_st(buf, n, what);
        buf[at] = saved;
    }
    /* digits runs replaced by huge or odd numbers (same length kept by
     * overwriting in place, padding with spaces) */
    static const char *nums[] = {"99999999999999999999", "-1", "1e308", "0.5", "18446744073709551615", "0"};
    for (size_t at = 8; at < hend; at++) {
        if (buf[at] < '0' || buf[at] > '9' || (buf[at - 1] >= '0' && buf[at - 1] <= '9')) continue;
        size_t end = at;
        while (end < hend && buf[end] >= '0' && buf[end] <= '9') end++;
        if (rnd() % (n > (1u << 20) ? 24 : 4)) continue; /* big files: each variant is a full copy */
        for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
            size_t len = strlen(nums[k]);
            size_t room = end - at;
            /* shift the rest of the header to make room; the header length grows */
            size_t m = n + len;
            unsigned char *v = malloc(m - room);
            memcpy(v, orig, at);
            memcpy(v + at, nums[k], len);
            memcpy(v + at + len, orig + end, n - end);
            put_le(v, hlen + len - room, 8);
            snprintf(what, sizeof what, "%s number at %zu replaced by %s", label, at, nums[k]);
            check_st(v, m - room, what);
            free(v);
        }
    }
    printf("%s: %ld variants, %.1f s\n", label, g_ok + g_err - before, now() - t0);
    free(buf);
}

/* ---- edge cases kept as regressions: inputs that once broke (or would
 * break) a parser, each run under the same checks */

static void regressions(void) {
    /* a string array whose count fits the bytes left only at 8 bytes per
     * element, with the first string's length running past the end */
    static const unsigned char r1[] = {
        'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
        1, 0, 0, 0, 0, 0, 0, 0, 'k', 9, 0, 0, 0, 8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
        0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    try_gguf(r1, sizeof r1, "regression r1");
    /* arrays nested 13 deep, each of one element: refused at depth 8 */
    unsigned char r2[256];
    size_t n = 0;
    memcpy(r2, "GGUF\3\0\0\0", 8);
    n = 8;
    put_le(r2 + n, 0, 8); n += 8;
    put_le(r2 + n, 1, 8); n += 8;
    put_le(r2 + n, 1, 8); n += 8;
    r2[n++] = 'd';
    put_le(r2 + n, 9, 4); n += 4;
    for (int i = 0; i < 12; i++) { put_le(r2 + n, 9, 4); n += 4; put_le(r2 + n, 1, 8); n += 8; }
    try_gguf(r2, n, "regression r2");
    /* found in review: a second __metadata__ object used to be appended to
     * the table allocated for the first one (a heap overflow) */
    size_t m;
    unsigned char *r3 = st_image("{\"__metadata__\":{\"k\":\"v\"},"
                                 "\"__metadata__\":{\"a\":\"1\",\"b\":\"2\",\"c\":\"3\",\"d\":\"4\"}}", 0, &m);
    try_st(r3, m, "regression r3");
    free(r3);
    /* found in review: HF shape [0, 2^40, 2^40] has zero elements, but its
     * ggml ne[0] * ne[1] overflows int64 in tela_tensor_nelements() */
    unsigned char *r4 = st_image("{\"a\":{\"dtype\":\"F32\",\"shape\":[0,1099511627776,1099511627776],"
                                 "\"data_offsets\":[0,0]}}", 0, &m);
    try_st(r4, m, "regression r4");
    free(r4);
}

int main(void) {
    char dir[] = "/tmp/tela_test_corrupt_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    size_t n;
    unsigned char *small = small_gguf(dir, &n, 0);
    if (small) {
        corrupt_gguf(small, n, 300, "small.gguf");
        exhaustive_small(small, n);
    }
    small = small_gguf(dir, &n, 64);
    if (small) corrupt_gguf(small, n, 100, "small-align64.gguf");
    regressions();

    /* safetensors built here */
    const char *json =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
        "\"c\":{\"dtype\":\"U8\",\"shape\":[1,2,1,1],\"data_offsets\":[32,34]}}";
    unsigned char *st = st_image(json, 34, &n);
    corrupt_st(st, n, 300, "small.safetensors");
    free(st);

    const char *shared = getenv("TELA_SHARED_DIR");
    char path[1024];
    if (shared) {
        static const char *files[] = {"llama-d1.gguf", "qwen35-d1.gguf"};
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/reference/fixtures/%s", shared, files[i]);
            unsigned char *p = load(path, &n);
            if (!p) continue;
            corrupt_gguf(p, n, 25, files[i]);
            free(p);
        }
        snprintf(path, sizeof path, "%s/reference/fixtures/llama-d1-hf.tgz", shared);
        if (access(path, R_OK) == 0) {
            char cmd[2048];
            snprintf(cmd, sizeof cmd, "tar xzf '%s' -C '%s' model.safetensors 2>/dev/null", path, dir);
            snprintf(path, sizeof path, "%s/model.safetensors", dir);
            unsigned char *p = system(cmd) == 0 ? load(path, &n) : NULL;
            if (p) corrupt_st(p, n, 20, "llama-d1-hf model.safetensors");
            free(p);
            unlink(path);
        }
    }
    rmdir(dir);
    printf("%ld corrupted inputs parsed cleanly, %ld rejected\n", g_ok, g_err);
    CHECK(g_err > 1000);
    return test_finish();
}
