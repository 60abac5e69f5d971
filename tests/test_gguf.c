/* test_gguf.c: the GGUF reader on files built byte by byte in the test (every
 * value type, nested arrays, v2 and v3, each kind of malformed input with the
 * error it must give), and on the converter-made fixtures in ../shared,
 * checked against the model configs in refs-d1.json and the HF checkpoint. */
#include <stdint.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "test.h"
#include "util/fp16.h"

/* ---- a byte builder, independent of tela's writer */

typedef struct bb {
    unsigned char d[8192];
    size_t n;
} bb;

static void bb_raw(bb *b, const void *p, size_t n) {
    memcpy(b->d + b->n, p, n);
    b->n += n;
}
static void bb_u8(bb *b, unsigned v) { b->d[b->n++] = (unsigned char)v; }
static void bb_u16(bb *b, unsigned v) { bb_u8(b, v & 0xff); bb_u8(b, (v >> 8) & 0xff); }
static void bb_u32(bb *b, uint32_t v) { for (int i = 0; i < 4; i++) bb_u8(b, (v >> (8 * i)) & 0xff); }
static void bb_u64(bb *b, uint64_t v) { for (int i = 0; i < 8; i++) bb_u8(b, (unsigned)(v >> (8 * i)) & 0xff); }
static void bb_str(bb *b, const char *s) { bb_u64(b, strlen(s)); bb_raw(b, s, strlen(s)); }
static void bb_f32(bb *b, float f) { uint32_t u; memcpy(&u, &f, 4); bb_u32(b, u); }
static void bb_f64(bb *b, double f) { uint64_t u; memcpy(&u, &f, 8); bb_u64(b, u); }
static void bb_pad(bb *b, size_t a) { while (b->n % a) bb_u8(b, 0); }
static void bb_header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    bb_raw(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}

static tela_status parse(const bb *b, tela_gguf **g) { return tela_gguf_parse(b->d, b->n, "test.gguf", g); }

/* Parses b expecting failure with the given status and a message that
 * contains each of the given fragments. */
static void expect_error(const bb *b, tela_status want, const char *frag1, const char *frag2, int line) {
    tela_gguf *g = NULL;
    tela_status s = parse(b, &g);
    const char *msg = tela_last_error();
    CHECK_MSG(s == want, "line %d: status %d, want %d (%s)", line, s, want, s ? msg : "ok");
    CHECK_MSG(g == NULL, "line %d: handle set on failure", line);
    if (s != TELA_OK) {
        CHECK_MSG(strstr(msg, "test.gguf") != NULL, "line %d: message does not name the file: %s", line, msg);
        if (frag1) CHECK_MSG(strstr(msg, frag1) != NULL, "line %d: '%s' not in: %s", line, frag1, msg);
        if (frag2) CHECK_MSG(strstr(msg, frag2) != NULL, "line %d: '%s' not in: %s", line, frag2, msg);
    }
    tela_gguf_close(g);
}
#define EXPECT_ERROR(b, want, f1, f2) expect_error(b, want, f1, f2, __LINE__)

/* A file with one key of each type, a string array, a nested array and two
 * tensors (f32 [3] at data offset 0 and f16 [2, 2] at offset 32). */
static void build_all_types(bb *b, uint32_t version) {
    bb_header(b, version, 2, 16);
    bb_str(b, "t.u8"); bb_u32(b, TELA_GGUF_UINT8); bb_u8(b, 200);
    bb_str(b, "t.i8"); bb_u32(b, TELA_GGUF_INT8); bb_u8(b, 0x80);              /* -128 */
    bb_str(b, "t.u16"); bb_u32(b, TELA_GGUF_UINT16); bb_u16(b, 65535);
    bb_str(b, "t.i16"); bb_u32(b, TELA_GGUF_INT16); bb_u16(b, 0xfffe);         /* -2 */
    bb_str(b, "t.u32"); bb_u32(b, TELA_GGUF_UINT32); bb_u32(b, 4000000000u);
    bb_str(b, "t.i32"); bb_u32(b, TELA_GGUF_INT32); bb_u32(b, 0xffffff85u);    /* -123 */
    bb_str(b, "t.f32"); bb_u32(b, TELA_GGUF_FLOAT32); bb_f32(b, 0.15625f);
    bb_str(b, "t.bool"); bb_u32(b, TELA_GGUF_BOOL); bb_u8(b, 1);
    bb_str(b, "t.str"); bb_u32(b, TELA_GGUF_STRING); bb_str(b, "h\xc3\xa9llo");
    bb_str(b, "t.u64"); bb_u32(b, TELA_GGUF_UINT64); bb_u64(b, 0xfedcba9876543210ull);
    bb_str(b, "t.i64"); bb_u32(b, TELA_GGUF_INT64); bb_u64(b, (uint64_t)-5000000000ll);
    bb_str(b, "t.f64"); bb_u32(b, TELA_GGUF_FLOAT64); bb_f64(b, -2.5e-300);
    bb_str(b, "t.arr_i16"); bb_u32(b, TELA_GGUF_ARRAY); bb_u32(b, TELA_GGUF_INT16); bb_u64(b, 3);
    bb_u16(b, 1); bb_u16(b, 0xffff); bb_u16(b, 300);
    bb_str(b, "t.arr_str"); bb_u32(b, TELA_GGUF_ARRAY); bb_u32(b, TELA_GGUF_STRING); bb_u64(b, 3);
    bb_str(b, "a"); bb_str(b, ""); bb_str(b, "ccc");
    /* [[1.5, 2.5], [], [["x"]]] : an array of arrays of mixed element types */
    bb_str(b, "t.nested"); bb_u32(b, TELA_GGUF_ARRAY); bb_u32(b, TELA_GGUF_ARRAY); bb_u64(b, 3);
    bb_u32(b, TELA_GGUF_FLOAT32); bb_u64(b, 2); bb_f32(b, 1.5f); bb_f32(b, 2.5f);
    bb_u32(b, TELA_GGUF_UINT8); bb_u64(b, 0);
    bb_u32(b, TELA_GGUF_ARRAY); bb_u64(b, 1); bb_u32(b, TELA_GGUF_STRING); bb_u64(b, 1); bb_str(b, "x");
    bb_str(b, "t.arr_bool"); bb_u32(b, TELA_GGUF_ARRAY); bb_u32(b, TELA_GGUF_BOOL); bb_u64(b, 2); bb_u8(b, 0); bb_u8(b, 1);
    /* tensors */
    bb_str(b, "w.f32"); bb_u32(b, 1); bb_u64(b, 3); bb_u32(b, TELA_TYPE_F32); bb_u64(b, 0);
    bb_str(b, "w.f16"); bb_u32(b, 2); bb_u64(b, 2); bb_u64(b, 2); bb_u32(b, TELA_TYPE_F16); bb_u64(b, 32);
    bb_pad(b, 32);
    bb_f32(b, 1.0f); bb_f32(b, -2.0f); bb_f32(b, 0.5f);
    bb_pad(b, 32);
    bb_u16(b, 0x3c00); bb_u16(b, 0x4000); bb_u16(b, 0xc200); bb_u16(b, 0x3800); /* 1, 2, -3, 0.5 */
}

static void test_all_types(uint32_t version) {
    bb b;
    build_all_types(&b, version);
    tela_gguf *g = NULL;
    CHECK_OK(parse(&b, &g));
    if (!g) return;
    CHECK_EQ_INT(g->version, version);
    CHECK_EQ_INT(g->n_kv, 16);
    CHECK_EQ_INT(g->n_tensors, 2);
    CHECK_EQ_INT(g->alignment, 32);
    const tela_gguf_kv *kv;
    kv = tela_gguf_find(g, "t.u8");
    CHECK(kv && kv->value.type == TELA_GGUF_UINT8 && kv->value.v.u64 == 200);
    kv = tela_gguf_find(g, "t.i8");
    CHECK(kv && kv->value.type == TELA_GGUF_INT8 && kv->value.v.i64 == -128);
    kv = tela_gguf_find(g, "t.u16");
    CHECK(kv && kv->value.v.u64 == 65535);
    kv = tela_gguf_find(g, "t.i16");
    CHECK(kv && kv->value.v.i64 == -2);
    kv = tela_gguf_find(g, "t.u32");
    CHECK(kv && kv->value.v.u64 == 4000000000u);
    kv = tela_gguf_find(g, "t.i32");
    CHECK(kv && kv->value.v.i64 == -123);
    kv = tela_gguf_find(g, "t.f32");
    CHECK(kv && kv->value.type == TELA_GGUF_FLOAT32 && kv->value.v.f64 == 0.15625);
    kv = tela_gguf_find(g, "t.u64");
    CHECK(kv && kv->value.v.u64 == 0xfedcba9876543210ull);
    kv = tela_gguf_find(g, "t.i64");
    CHECK(kv && kv->value.v.i64 == -5000000000ll);
    kv = tela_gguf_find(g, "t.f64");
    CHECK(kv && kv->value.type == TELA_GGUF_FLOAT64 && kv->value.v.f64 == -2.5e-300);
    CHECK(tela_gguf_find(g, "t.nope") == NULL);
    CHECK(tela_gguf_find(g, "t.u") == NULL);

    /* typed getters, with width conversions where the value fits */
    int64_t i64;
    uint32_t u32;
    float f32;
    bool bl;
    tela_gguf_str str;
    CHECK_OK(tela_gguf_get_i64(g, "t.u32", &i64));
    CHECK_EQ_INT(i64, 4000000000ll);
    CHECK_OK(tela_gguf_get_i64(g, "t.i8", &i64));
    CHECK_EQ_INT(i64, -128);
    CHECK_EQ_INT(tela_gguf_get_i64(g, "t.u64", &i64), TELA_ERR_FORMAT); /* > INT64_MAX */
    CHECK(strstr(tela_last_error(), "t.u64") != NULL);
    CHECK_OK(tela_gguf_get_u32(g, "t.u16", &u32));
    CHECK_EQ_INT(u32, 65535);
    CHECK_EQ_INT(tela_gguf_get_u32(g, "t.i32", &u32), TELA_ERR_FORMAT); /* negative */
    CHECK_EQ_INT(tela_gguf_get_u32(g, "t.str", &u32), TELA_ERR_FORMAT);
    CHECK(strstr(tela_last_error(), "t.str") && strstr(tela_last_error(), "string"));
    CHECK_EQ_INT(tela_gguf_get_u32(g, "missing.key", &u32), TELA_ERR_NOT_FOUND);
    CHECK(strstr(tela_last_error(), "missing.key") != NULL);
    CHECK_OK(tela_gguf_get_f32(g, "t.f32", &f32));
    CHECK(f32 == 0.15625f);
    CHECK_OK(tela_gguf_get_f32(g, "t.i32", &f32));
    CHECK(f32 == -123.0f);
    CHECK_OK(tela_gguf_get_bool(g, "t.bool", &bl));
    CHECK(bl == true);
    CHECK_EQ_INT(tela_gguf_get_bool(g, "t.u8", &bl), TELA_ERR_FORMAT);
    CHECK_OK(tela_gguf_get_str(g, "t.str", &str));
    CHECK(str.len == 6 && memcmp(str.ptr, "h\xc3\xa9llo", 6) == 0);

    const tela_gguf_value *arr;
    CHECK_OK(tela_gguf_get_arr(g, "t.arr_i16", &arr));
    CHECK(arr->v.arr.elem_type == TELA_GGUF_INT16 && arr->v.arr.n == 3);
    CHECK_EQ_INT(tela_gguf_arr_i64(arr, 0), 1);
    CHECK_EQ_INT(tela_gguf_arr_i64(arr, 1), -1);
    CHECK_EQ_INT(tela_gguf_arr_i64(arr, 2), 300);
    CHECK_NEAR(tela_gguf_arr_f64(arr, 2), 300.0, 0);
    CHECK_EQ_INT(tela_gguf_get_arr(g, "t.u8", &arr), TELA_ERR_FORMAT);
    CHECK_OK(tela_gguf_get_arr(g, "t.arr_str", &arr));
    CHECK(arr->v.arr.n == 3 && arr->v.arr.strs);
    CHECK(arr->v.arr.strs[0].len == 1 && arr->v.arr.strs[0].ptr[0] == 'a');
    CHECK(arr->v.arr.strs[1].len == 0);
    CHECK(arr->v.arr.strs[2].len == 3 && memcmp(arr->v.arr.strs[2].ptr, "ccc", 3) == 0);
    CHECK_OK(tela_gguf_get_arr(g, "t.arr_bool", &arr));
    CHECK(arr->v.arr.n == 2 && tela_gguf_arr_i64(arr, 0) == 0 && tela_gguf_arr_i64(arr, 1) == 1);
    CHECK_OK(tela_gguf_get_arr(g, "t.nested", &arr));
    CHECK(arr->v.arr.elem_type == TELA_GGUF_ARRAY && arr->v.arr.n == 3 && arr->v.arr.items);
    if (arr->v.arr.items) {
        const tela_gguf_value *a0 = &arr->v.arr.items[0], *a1 = &arr->v.arr.items[1], *a2 = &arr->v.arr.items[2];
        CHECK(a0->type == TELA_GGUF_ARRAY && a0->v.arr.elem_type == TELA_GGUF_FLOAT32 && a0->v.arr.n == 2);
        CHECK_NEAR(tela_gguf_arr_f64(a0, 0), 1.5, 0);
        CHECK_NEAR(tela_gguf_arr_f64(a0, 1), 2.5, 0);
        CHECK(a1->v.arr.n == 0 && a1->v.arr.elem_type == TELA_GGUF_UINT8);
        CHECK(a2->v.arr.elem_type == TELA_GGUF_ARRAY && a2->v.arr.n == 1);
        const tela_gguf_value *x = &a2->v.arr.items[0];
        CHECK(x->v.arr.elem_type == TELA_GGUF_STRING && x->v.arr.n == 1 && x->v.arr.strs[0].len == 1 &&
              x->v.arr.strs[0].ptr[0] == 'x');
    }

    /* tensors: the data section starts at the first multiple of 32 after the
     * infos; the f16 tensor is 32 bytes further */
    size_t infos_end = b.n - 32 - 8;  /* data: 12 bytes padded to 32, then 8 */
    CHECK_EQ_INT(g->data_offset, infos_end);
    CHECK_EQ_INT(g->data_offset % 32, 0);
    const tela_gguf_tensor *t = tela_gguf_find_tensor(g, "w.f32");
    CHECK(t != NULL);
    if (t) {
        CHECK(t->t.type == TELA_TYPE_F32 && t->t.n_dims == 1 && t->t.ne[0] == 3 && t->t.ne[1] == 1 && t->t.ne[3] == 1);
        CHECK_EQ_INT(t->t.nbytes, 12);
        CHECK((const unsigned char *)t->t.data == b.d + g->data_offset);
        float v[3];
        memcpy(v, t->t.data, 12);
        CHECK(v[0] == 1.0f && v[1] == -2.0f && v[2] == 0.5f);
    }
    t = tela_gguf_find_tensor(g, "w.f16");
    CHECK(t != NULL);
    if (t) {
        CHECK(t->t.type == TELA_TYPE_F16 && t->t.n_dims == 2 && t->t.ne[0] == 2 && t->t.ne[1] == 2);
        CHECK_EQ_INT(t->offset, 32);
        CHECK_EQ_INT(t->t.nbytes, 8);
        CHECK_EQ_INT(tela_tensor_nelements(&t->t), 4);
        uint16_t h[4];
        memcpy(h, t->t.data, 8);
        CHECK(tela_f16_to_f32(h[2]) == -3.0f);
    }
    CHECK(tela_gguf_find_tensor(g, "w.f") == NULL);
    tela_gguf_close(g);
}

/* A file whose only tensor is described by the given fields. */
static void build_tensor_file(bb *b, const char *align_key_type, uint64_t alignment, uint32_t n_dims,
                              const uint64_t *ne, uint32_t type, uint64_t offset, size_t data_bytes) {
    bb_header(b, 3, 1, align_key_type ? 1 : 0);
    if (align_key_type) {
        bb_str(b, "general.alignment");
        if (!strcmp(align_key_type, "u32")) { bb_u32(b, TELA_GGUF_UINT32); bb_u32(b, (uint32_t)alignment); }
        else if (!strcmp(align_key_type, "u64")) { bb_u32(b, TELA_GGUF_UINT64); bb_u64(b, alignment); }
        else { bb_u32(b, TELA_GGUF_STRING); bb_str(b, "32"); }
    }
    bb_str(b, "w");
    bb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) bb_u64(b, ne[i]);
    bb_u32(b, type);
    bb_u64(b, offset);
    bb_pad(b, alignment && alignment <= 256 && !(alignment & (alignment - 1)) ? (size_t)alignment : 32);
    for (size_t i = 0; i < data_bytes; i++) bb_u8(b, (unsigned)i);
}

static void test_errors(void) {
    bb b;
    uint64_t ne4[1] = {4};

    /* header */
    b.n = 0;
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "not a GGUF file", NULL);
    bb_header(&b, 3, 0, 0);
    b.d[0] = 'G'; b.d[1] = 'G'; b.d[2] = 'U'; b.d[3] = 'X';
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "magic", NULL);
    bb_header(&b, 1, 0, 0);
    EXPECT_ERROR(&b, TELA_ERR_UNSUPPORTED, "version 1", NULL);
    bb_header(&b, 4, 0, 0);
    EXPECT_ERROR(&b, TELA_ERR_UNSUPPORTED, "version 4", NULL);
    bb_header(&b, 0x03000000u, 0, 0);
    EXPECT_ERROR(&b, TELA_ERR_UNSUPPORTED, "big-endian", NULL);
    bb_header(&b, 3, 0, 0);
    b.n = 20;
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "truncated", "offset 16");

    /* a file with no keys and no tensors is valid and may end after the header */
    bb_header(&b, 3, 0, 0);
    tela_gguf *g = NULL;
    CHECK_OK(parse(&b, &g));
    CHECK(g && g->n_kv == 0 && g->n_tensors == 0);
    tela_gguf_close(g);

    /* counts that cannot fit in the bytes left are refused before allocating */
    bb_header(&b, 3, 0, UINT64_MAX);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "key/value count", NULL);
    bb_header(&b, 3, 1ull << 60, 0);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "tensor count", NULL);
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k"); bb_u32(&b, TELA_GGUF_ARRAY); bb_u32(&b, TELA_GGUF_UINT32); bb_u64(&b, 1ull << 62);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "cannot fit", "'k'");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k"); bb_u32(&b, TELA_GGUF_ARRAY); bb_u32(&b, TELA_GGUF_STRING); bb_u64(&b, UINT64_MAX);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "cannot fit", NULL);

    /* strings */
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 1000); bb_raw(&b, "abcdefghijklmnop", 16);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "length 1000", "offset 24");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k"); bb_u32(&b, TELA_GGUF_STRING); bb_u64(&b, UINT64_MAX);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "past the end", "offset 37");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, ""); bb_u32(&b, TELA_GGUF_UINT8); bb_u8(&b, 0); bb_u8(&b, 0);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "empty", NULL);
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 3); bb_raw(&b, "a\0b", 3); bb_u32(&b, TELA_GGUF_UINT8); bb_u8(&b, 0);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "NUL", NULL);

    /* value types */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k"); bb_u32(&b, 13); bb_u32(&b, 0);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "unknown value type 13", "'k'");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k"); bb_u32(&b, TELA_GGUF_ARRAY); bb_u32(&b, 99); bb_u64(&b, 0);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "unknown element type 99", NULL);
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k"); bb_u32(&b, TELA_GGUF_BOOL); bb_u8(&b, 2);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "not 0 or 1", "offset 37");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k"); bb_u32(&b, TELA_GGUF_UINT64); bb_u32(&b, 0);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "truncated", "'k'");

    /* nesting: 8 levels of arrays are fine, 9 are not */
    for (int depth = 8; depth <= 9; depth++) {
        bb_header(&b, 3, 0, 1);
        bb_str(&b, "deep");
        bb_u32(&b, TELA_GGUF_ARRAY);
        for (int i = 0; i < depth - 1; i++) { bb_u32(&b, TELA_GGUF_ARRAY); bb_u64(&b, 1); }
        bb_u32(&b, TELA_GGUF_UINT8); bb_u64(&b, 1); bb_u8(&b, 7);
        if (depth == 8) {
            g = NULL;
            CHECK_OK(parse(&b, &g));
            tela_gguf_close(g);
        } else {
            EXPECT_ERROR(&b, TELA_ERR_FORMAT, "nested", NULL);
        }
    }

    /* duplicate keys and tensor names */
    bb_header(&b, 3, 0, 2);
    bb_str(&b, "k"); bb_u32(&b, TELA_GGUF_UINT8); bb_u8(&b, 1);
    bb_str(&b, "k"); bb_u32(&b, TELA_GGUF_UINT8); bb_u8(&b, 2);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "duplicate", "'k'");
    bb_header(&b, 3, 2, 0);
    for (int i = 0; i < 2; i++) { bb_str(&b, "w"); bb_u32(&b, 1); bb_u64(&b, 4); bb_u32(&b, 0); bb_u64(&b, 0); }
    bb_pad(&b, 32);
    for (int i = 0; i < 16; i++) bb_u8(&b, 0);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "duplicate", "'w'");

    /* alignment */
    build_tensor_file(&b, "u32", 64, 1, ne4, TELA_TYPE_F32, 0, 16);
    g = NULL;
    CHECK_OK(parse(&b, &g));
    if (g) {
        CHECK_EQ_INT(g->alignment, 64);
        CHECK_EQ_INT(g->data_offset % 64, 0);
        CHECK_EQ_INT(g->data_offset, b.n - 16);
    }
    tela_gguf_close(g);
    build_tensor_file(&b, "u32", 0, 1, ne4, TELA_TYPE_F32, 0, 16);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "general.alignment", "power of two");
    build_tensor_file(&b, "u32", 48, 1, ne4, TELA_TYPE_F32, 0, 16);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "general.alignment", "power of two");
    build_tensor_file(&b, "str", 32, 1, ne4, TELA_TYPE_F32, 0, 16);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "general.alignment", "not an integer");
    build_tensor_file(&b, "u64", 1ull << 40, 1, ne4, TELA_TYPE_F32, 0, 16);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "past the end", NULL);

    /* tensor infos */
    build_tensor_file(&b, NULL, 32, 1, ne4, TELA_TYPE_F32, 0, 16);
    g = NULL;
    CHECK_OK(parse(&b, &g));
    tela_gguf_close(g);
    build_tensor_file(&b, NULL, 32, 1, ne4, TELA_TYPE_F32, 16, 48);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "not a multiple of the alignment", "'w'");
    build_tensor_file(&b, NULL, 32, 1, ne4, TELA_TYPE_F32, 32, 40);   /* needs 48 bytes, 40 there */
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "past the end", "'w'");
    build_tensor_file(&b, NULL, 32, 1, ne4, TELA_TYPE_F32, UINT64_MAX - 31, 16);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "past the end", "'w'");
    build_tensor_file(&b, NULL, 32, 1, ne4, TELA_TYPE_F32, 0, 15);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "past the end", NULL);
    uint64_t ne5[5] = {1, 1, 1, 1, 1};
    build_tensor_file(&b, NULL, 32, 5, ne5, TELA_TYPE_F32, 0, 16);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "5 dimensions", "'w'");
    uint64_t neg[2] = {4, (uint64_t)-1};
    build_tensor_file(&b, NULL, 32, 2, neg, TELA_TYPE_F32, 0, 16);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "negative", "'w'");
    uint64_t huge[4] = {1ull << 32, 1ull << 32, 1, 1};
    build_tensor_file(&b, NULL, 32, 4, huge, TELA_TYPE_F32, 0, 16);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "overflow", "'w'");
    uint64_t big[2] = {1ull << 40, 1ull << 20};
    build_tensor_file(&b, NULL, 32, 2, big, TELA_TYPE_F32, 0, 16);   /* 2^62 bytes */
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, NULL, "'w'");
    build_tensor_file(&b, NULL, 32, 1, ne4, 99, 0, 16);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "unknown type 99", "'w'");
    build_tensor_file(&b, NULL, 32, 1, ne4, 16, 0, 16);             /* iq2_xxs */
    EXPECT_ERROR(&b, TELA_ERR_UNSUPPORTED, "iq2_xxs", "'w'");
    uint64_t q8[1] = {33};                                           /* not a multiple of 32 */
    build_tensor_file(&b, NULL, 32, 1, q8, TELA_TYPE_Q8_0, 0, 68);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, NULL, "'w'");
    q8[0] = 64;                                                       /* 2 blocks of 34 bytes */
    build_tensor_file(&b, NULL, 32, 1, q8, TELA_TYPE_Q8_0, 0, 68);
    g = NULL;
    CHECK_OK(parse(&b, &g));
    if (g) CHECK_EQ_INT(g->tensors[0].t.nbytes, 68);
    tela_gguf_close(g);
    /* zero-sized dimensions are allowed: an empty tensor */
    uint64_t zero[2] = {4, 0};
    build_tensor_file(&b, NULL, 32, 2, zero, TELA_TYPE_F32, 0, 0);
    g = NULL;
    CHECK_OK(parse(&b, &g));
    if (g) CHECK(g->tensors[0].t.nbytes == 0 && tela_tensor_nelements(&g->tensors[0].t) == 0);
    tela_gguf_close(g);
    /* a zero dimension does not excuse an overflowing product before it */
    uint64_t zero_late[3] = {1ull << 40, 1ull << 40, 0};
    build_tensor_file(&b, NULL, 32, 3, zero_late, TELA_TYPE_F32, 0, 0);
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "overflow", NULL);
    /* truncated inside the tensor infos */
    build_tensor_file(&b, NULL, 32, 1, ne4, TELA_TYPE_F32, 0, 16);
    b.n = 52;   /* name at 24, n_dims at 33, ne at 37, type at 45, offset at 49 */
    EXPECT_ERROR(&b, TELA_ERR_FORMAT, "truncated", "'w'");
    CHECK(strstr(tela_last_error(), "offset 49") != NULL);
}

/* The real converter-made files: values checked against the HF configs in
 * refs-d1.json (written by transformers) and the file layout described in
 * ../shared/README.md. */
static void test_shared_llama(const char *shared) {
    char path[1024];
    snprintf(path, sizeof path, "%s/reference/fixtures/llama-d1.gguf", shared);
    if (access(path, R_OK) != 0) {
        printf("note: %s absent, skipping the fixture checks\n", path);
        return;
    }
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_open(path, &g));
    if (!g) return;
    tela_gguf_str s;
    CHECK_OK(tela_gguf_get_str(g, "general.architecture", &s));
    CHECK(s.len == 5 && memcmp(s.ptr, "llama", 5) == 0);
    uint32_t u;
    /* refs-d1.json configs.llama-d1: num_hidden_layers 2, hidden_size 32,
     * intermediate_size 64, heads 2/1, head_dim 16, vocab 128256 */
    CHECK_OK(tela_gguf_get_u32(g, "llama.block_count", &u)); CHECK_EQ_INT(u, 2);
    CHECK_OK(tela_gguf_get_u32(g, "llama.embedding_length", &u)); CHECK_EQ_INT(u, 32);
    CHECK_OK(tela_gguf_get_u32(g, "llama.feed_forward_length", &u)); CHECK_EQ_INT(u, 64);
    CHECK_OK(tela_gguf_get_u32(g, "llama.attention.head_count", &u)); CHECK_EQ_INT(u, 2);
    CHECK_OK(tela_gguf_get_u32(g, "llama.attention.head_count_kv", &u)); CHECK_EQ_INT(u, 1);
    CHECK_OK(tela_gguf_get_u32(g, "llama.attention.key_length", &u)); CHECK_EQ_INT(u, 16);
    CHECK_OK(tela_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u)); CHECK_EQ_INT(u, 128000);
    float f;
    CHECK_OK(tela_gguf_get_f32(g, "llama.rope.freq_base", &f)); CHECK(f == 500000.0f);
    CHECK_OK(tela_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f)); CHECK(f == 1e-5f);
    const tela_gguf_value *arr;
    CHECK_OK(tela_gguf_get_arr(g, "tokenizer.ggml.tokens", &arr));
    CHECK(arr->v.arr.elem_type == TELA_GGUF_STRING && arr->v.arr.n == 128256);
    /* Llama 3's byte-level BPE vocabulary starts with the printable ASCII
     * characters, and id 128000 is <|begin_of_text|> */
    CHECK(arr->v.arr.strs[0].len == 1 && arr->v.arr.strs[0].ptr[0] == '!');
    CHECK(arr->v.arr.strs[128000].len == 17 && memcmp(arr->v.arr.strs[128000].ptr, "<|begin_of_text|>", 17) == 0);
    CHECK_EQ_INT(g->n_tensors, 21);  /* 9 per layer * 2 + token_embd + output_norm + rope_freqs */
    const tela_gguf_tensor *t = tela_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->t.type == TELA_TYPE_F16 && t->t.ne[0] == 32 && t->t.ne[1] == 128256 && t->t.nbytes == 32 * 128256 * 2);
    t = tela_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    CHECK(t && t->t.ne[0] == 64 && t->t.ne[1] == 32);
    t = tela_gguf_find_tensor(g, "rope_freqs.weight");
    /* Llama 3 rope scaling: head_dim/2 = 8 factors, f32; the highest
     * frequencies are not scaled (factor 1) and the lowest by factor 32 */
    CHECK(t && t->t.type == TELA_TYPE_F32 && t->t.ne[0] == 8);
    if (t) {
        float rf[8];
        memcpy(rf, t->t.data, sizeof rf);
        CHECK_NEAR(rf[0], 1.0, 1e-6);
        CHECK_NEAR(rf[7], 32.0, 1e-4);
    }
    CHECK_EQ_INT(g->data_offset % g->alignment, 0);
    for (uint64_t i = 0; i < g->n_tensors; i++) CHECK_EQ_INT(g->tensors[i].offset % 32, 0);

    /* the GGUF's f16 weights are the HF checkpoint's f32 weights (exactly
     * representable in f16): compare the tensors the converter does not
     * permute, if the checkpoint can be extracted */
    char dir[] = "/tmp/tela_test_gguf_XXXXXX";
    if (mkdtemp(dir)) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "tar xzf '%s/reference/fixtures/llama-d1-hf.tgz' -C '%s' 2>/dev/null", shared, dir);
        tela_checkpoint *ck = NULL;
        if (system(cmd) == 0 && tela_checkpoint_open(dir, &ck) == TELA_OK) {
            static const char *pairs[][2] = {
                {"token_embd.weight", "model.embed_tokens.weight"},
                {"blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight"},
                {"blk.1.attn_output.weight", "model.layers.1.self_attn.o_proj.weight"},
                {"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"},
                {"blk.1.ffn_gate.weight", "model.layers.1.mlp.gate_proj.weight"},
                {"blk.1.attn_norm.weight", "model.layers.1.input_layernorm.weight"},
                {"output_norm.weight", "model.norm.weight"},
            };
            for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
                const tela_gguf_tensor *gt = tela_gguf_find_tensor(g, pairs[p][0]);
                const tela_tensor *ht = tela_checkpoint_find(ck, pairs[p][1]);
                CHECK_MSG(gt && ht, "%s / %s", pairs[p][0], pairs[p][1]);
                if (!gt || !ht) continue;
                CHECK(ht->type == TELA_TYPE_F32);
                CHECK(gt->t.ne[0] == ht->ne[0] && gt->t.ne[1] == ht->ne[1]);
                int64_t n = tela_tensor_nelements(ht), bad = 0;
                for (int64_t i = 0; i < n; i++) {
                    float hv, gv;
                    memcpy(&hv, (const char *)ht->data + 4 * i, 4);
                    if (gt->t.type == TELA_TYPE_F16) {
                        uint16_t h;
                        memcpy(&h, (const char *)gt->t.data + 2 * i, 2);
                        gv = tela_f16_to_f32(h);
                    } else {
                        memcpy(&gv, (const char *)gt->t.data + 4 * i, 4);
                    }
                    if (gv != hv) bad++;
                }
                CHECK_MSG(bad == 0, "%s: %lld of %lld values differ", pairs[p][0], (long long)bad, (long long)n);
            }
        } else {
            printf("note: could not extract llama-d1-hf.tgz, skipping the cross-format check\n");
        }
        tela_checkpoint_close(ck);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    }
    tela_gguf_close(g);
}

static void test_shared_qwen(const char *shared) {
    char path[1024];
    snprintf(path, sizeof path, "%s/reference/fixtures/qwen35-d1.gguf", shared);
    if (access(path, R_OK) != 0) return;
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_open(path, &g));
    if (!g) return;
    tela_gguf_str s;
    CHECK_OK(tela_gguf_get_str(g, "general.architecture", &s));
    CHECK(s.len == 6 && memcmp(s.ptr, "qwen35", 6) == 0);
    uint32_t u;
    /* refs-d1.json configs.qwen35-d1: 4 layers, hidden 32, ffn 80, conv kernel 4,
     * vocab 151936, eos 151645 */
    CHECK_OK(tela_gguf_get_u32(g, "qwen35.block_count", &u)); CHECK_EQ_INT(u, 4);
    CHECK_OK(tela_gguf_get_u32(g, "qwen35.feed_forward_length", &u)); CHECK_EQ_INT(u, 80);
    CHECK_OK(tela_gguf_get_u32(g, "qwen35.ssm.conv_kernel", &u)); CHECK_EQ_INT(u, 4);
    CHECK_OK(tela_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u)); CHECK_EQ_INT(u, 151645);
    bool bl = true;
    CHECK_OK(tela_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &bl));
    CHECK(bl == false);
    const tela_gguf_value *arr;
    /* mrope_section [2, 1, 1], padded to 4 by the converter */
    CHECK_OK(tela_gguf_get_arr(g, "qwen35.rope.dimension_sections", &arr));
    CHECK(arr->v.arr.n >= 3 && tela_gguf_arr_i64(arr, 0) == 2 && tela_gguf_arr_i64(arr, 1) == 1 &&
          tela_gguf_arr_i64(arr, 2) == 1);
    CHECK_OK(tela_gguf_get_arr(g, "tokenizer.ggml.tokens", &arr));
    CHECK(arr->v.arr.n == 151936);
    const tela_gguf_tensor *t = tela_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->t.ne[0] == 32 && t->t.ne[1] == 151936);
    t = tela_gguf_find_tensor(g, "blk.3.attn_q.weight");  /* 2 heads * 32 * 2 (q and gate) = 128 */
    CHECK(t && t->t.ne[0] == 32 && t->t.ne[1] == 128);
    tela_gguf_close(g);
}

int main(void) {
    test_all_types(3);
    test_all_types(2);
    test_errors();
    const char *shared = getenv("TELA_SHARED_DIR");
    if (shared) {
        test_shared_llama(shared);
        test_shared_qwen(shared);
    }
    return test_finish();
}
