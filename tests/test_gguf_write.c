/* test_gguf_write.c: the GGUF writer. Files are written, then their bytes are
 * checked by hand against the GGUF layout (header, each key/value, tensor
 * infos, zero padding, data positions) without tela's reader, and read back
 * with the reader; plus argument errors and write failures (missing
 * directory, a full disk simulated with RLIMIT_FSIZE) that must leave no
 * file behind. */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf.h"
#include "quant/quant.h"
#include "test.h"

static char g_dir[] = "/tmp/tela_test_gguf_write_XXXXXX";

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)len + 1);
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* little-endian field readers for the hand checks */
static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* Checks that at *pos there is the string s (u64 length + bytes) and moves past it. */
static int at_str(const unsigned char *d, size_t *pos, const char *s) {
    size_t n = strlen(s);
    int ok = rd64(d + *pos) == n && memcmp(d + *pos + 8, s, n) == 0;
    *pos += 8 + n;
    return ok;
}

static int count_dir_entries(void) {
    DIR *dir = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (dir && (e = readdir(dir)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (dir) closedir(dir);
    return n;
}

static void test_layout(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/a.gguf", g_dir);
    tela_gguf_writer *w = tela_gguf_writer_create();
    CHECK(w != NULL);
    if (!w) return;

    CHECK_OK(tela_gguf_writer_add_str(w, "general.architecture", "llama"));
    CHECK_OK(tela_gguf_writer_add_u32(w, "a.u32", 0xdeadbeefu));
    CHECK_OK(tela_gguf_writer_add_i32(w, "a.i32", -7));
    CHECK_OK(tela_gguf_writer_add_u64(w, "a.u64", 0x0123456789abcdefull));
    CHECK_OK(tela_gguf_writer_add_f32(w, "a.f32", 0.25f));
    CHECK_OK(tela_gguf_writer_add_bool(w, "a.bool", true));
    int16_t i16[3] = {-1, 2, -300};
    CHECK_OK(tela_gguf_writer_add_arr(w, "a.i16", TELA_GGUF_INT16, i16, 3));
    double f64[2] = {1.0 / 3.0, -1e300};
    CHECK_OK(tela_gguf_writer_add_arr(w, "a.f64", TELA_GGUF_FLOAT64, f64, 2));
    uint8_t bools[3] = {1, 0, 1};
    CHECK_OK(tela_gguf_writer_add_arr(w, "a.bools", TELA_GGUF_BOOL, bools, 3));
    CHECK_OK(tela_gguf_writer_add_arr(w, "a.empty", TELA_GGUF_UINT32, NULL, 0));
    const char *strs[3] = {"x", "", "yz"};
    CHECK_OK(tela_gguf_writer_add_str_arr(w, "a.strs", strs, 3));

    /* tensors of several types; sizes chosen so padding is needed:
     * f32 [3] = 12 bytes, f16 [4, 2] = 16, q8_0 [64] = 2 blocks * 34 = 68,
     * q4_K [256, 2] = 2 * 144 = 288, i8 [5] = 5 */
    float t0[3] = {1.0f, 2.0f, 3.0f};
    uint16_t t1[8] = {0x3c00, 0x4000, 0x4200, 0x4400, 0xbc00, 0xc000, 0xc200, 0xc400};
    unsigned char t2[68], t3[288], t4[5];
    for (int i = 0; i < 68; i++) t2[i] = (unsigned char)(i * 3 + 1);
    for (int i = 0; i < 288; i++) t3[i] = (unsigned char)(255 - i);
    for (int i = 0; i < 5; i++) t4[i] = (unsigned char)(0x80 + i);
    int64_t ne0[1] = {3}, ne1[2] = {4, 2}, ne2[1] = {64}, ne3[2] = {256, 2}, ne4[1] = {5};
    CHECK_OK(tela_gguf_writer_add_tensor(w, "t.f32", TELA_TYPE_F32, ne0, 1, t0, 12));
    CHECK_OK(tela_gguf_writer_add_tensor(w, "t.f16", TELA_TYPE_F16, ne1, 2, t1, 16));
    CHECK_OK(tela_gguf_writer_add_tensor(w, "t.q8_0", TELA_TYPE_Q8_0, ne2, 1, t2, 68));
    CHECK_OK(tela_gguf_writer_add_tensor(w, "t.q4_K", TELA_TYPE_Q4_K, ne3, 2, t3, 288));
    CHECK_OK(tela_gguf_writer_add_tensor(w, "t.i8", TELA_TYPE_I8, ne4, 1, t4, 5));
    CHECK_OK(tela_gguf_writer_write(w, path));
    tela_gguf_writer_free(w);
    CHECK_EQ_INT(count_dir_entries(), 1); /* no temporary file left */

    size_t n;
    unsigned char *d = slurp(path, &n);
    CHECK(d != NULL);
    if (!d) return;
    /* header: magic, version 3, 5 tensors, 11 key/values */
    CHECK(memcmp(d, "GGUF", 4) == 0);
    CHECK_EQ_INT(rd32(d + 4), 3);
    CHECK_EQ_INT(rd64(d + 8), 5);
    CHECK_EQ_INT(rd64(d + 16), 11);
    size_t p = 24;
    CHECK(at_str(d, &p, "general.architecture"));
    CHECK_EQ_INT(p, 24 + 8 + 20);
    CHECK_EQ_INT(rd32(d + p), 8); p += 4;                 /* string */
    CHECK(at_str(d, &p, "llama"));
    CHECK(at_str(d, &p, "a.u32"));
    CHECK_EQ_INT(rd32(d + p), 4); p += 4;
    CHECK_EQ_INT(rd32(d + p), 0xdeadbeefu); p += 4;
    CHECK(at_str(d, &p, "a.i32"));
    CHECK_EQ_INT(rd32(d + p), 5); p += 4;
    CHECK_EQ_INT(rd32(d + p), 0xfffffff9u); p += 4;      /* -7 two's complement */
    CHECK(at_str(d, &p, "a.u64"));
    CHECK_EQ_INT(rd32(d + p), 10); p += 4;
    CHECK(rd64(d + p) == 0x0123456789abcdefull); p += 8;
    CHECK(at_str(d, &p, "a.f32"));
    CHECK_EQ_INT(rd32(d + p), 6); p += 4;
    CHECK_EQ_INT(rd32(d + p), 0x3e800000u); p += 4;      /* 0.25f = 2^-2: exponent 125 << 23 */
    CHECK(at_str(d, &p, "a.bool"));
    CHECK_EQ_INT(rd32(d + p), 7); p += 4;
    CHECK_EQ_INT(d[p], 1); p += 1;
    CHECK(at_str(d, &p, "a.i16"));
    CHECK_EQ_INT(rd32(d + p), 9); p += 4;                 /* array */
    CHECK_EQ_INT(rd32(d + p), 3); p += 4;                 /* of int16 */
    CHECK_EQ_INT(rd64(d + p), 3); p += 8;
    CHECK(d[p] == 0xff && d[p + 1] == 0xff && d[p + 2] == 2 && d[p + 3] == 0 && d[p + 4] == 0xd4 && d[p + 5] == 0xfe);
    p += 6;                                               /* -300 = 0xfed4 */
    CHECK(at_str(d, &p, "a.f64"));
    CHECK_EQ_INT(rd32(d + p), 9); p += 4;
    CHECK_EQ_INT(rd32(d + p), 12); p += 4;
    CHECK_EQ_INT(rd64(d + p), 2); p += 8;
    CHECK(rd64(d + p) == 0x3fd5555555555555ull); p += 16; /* 1/3 as a double */
    CHECK(at_str(d, &p, "a.bools"));
    CHECK_EQ_INT(rd32(d + p), 9); p += 4;
    CHECK_EQ_INT(rd32(d + p), 7); p += 4;
    CHECK_EQ_INT(rd64(d + p), 3); p += 8;
    CHECK(d[p] == 1 && d[p + 1] == 0 && d[p + 2] == 1); p += 3;
    CHECK(at_str(d, &p, "a.empty"));
    CHECK_EQ_INT(rd32(d + p), 9); p += 4;
    CHECK_EQ_INT(rd32(d + p), 4); p += 4;
    CHECK_EQ_INT(rd64(d + p), 0); p += 8;
    CHECK(at_str(d, &p, "a.strs"));
    CHECK_EQ_INT(rd32(d + p), 9); p += 4;
    CHECK_EQ_INT(rd32(d + p), 8); p += 4;
    CHECK_EQ_INT(rd64(d + p), 3); p += 8;
    CHECK(at_str(d, &p, "x"));
    CHECK(at_str(d, &p, ""));
    CHECK(at_str(d, &p, "yz"));
    /* tensor infos: name, n_dims, ne..., type, offset. Data offsets are
     * aligned to 32: 0, 32 (after 12), 64 (after 32+16), 160 (after 64+68 =
     * 132), 448 (after 160+288) */
    static const struct { const char *name; uint32_t n_dims; uint64_t ne[2]; uint32_t type; uint64_t off; } ti[5] = {
        {"t.f32", 1, {3, 0}, 0, 0}, {"t.f16", 2, {4, 2}, 1, 32}, {"t.q8_0", 1, {64, 0}, 8, 64},
        {"t.q4_K", 2, {256, 2}, 12, 160}, {"t.i8", 1, {5, 0}, 24, 448}};
    for (int i = 0; i < 5; i++) {
        CHECK(at_str(d, &p, ti[i].name));
        CHECK_EQ_INT(rd32(d + p), ti[i].n_dims); p += 4;
        for (uint32_t k = 0; k < ti[i].n_dims; k++, p += 8) CHECK_EQ_INT(rd64(d + p), ti[i].ne[k]);
        CHECK_EQ_INT(rd32(d + p), ti[i].type); p += 4;
        CHECK_EQ_INT(rd64(d + p), ti[i].off); p += 8;
    }
    size_t data = (p + 31) / 32 * 32;
    for (size_t i = p; i < data; i++) CHECK_EQ_INT(d[i], 0);  /* zero padding */
    CHECK(memcmp(d + data + 0, t0, 12) == 0);
    CHECK(memcmp(d + data + 32, t1, 16) == 0);
    CHECK(memcmp(d + data + 64, t2, 68) == 0);
    CHECK(memcmp(d + data + 160, t3, 288) == 0);
    CHECK(memcmp(d + data + 448, t4, 5) == 0);
    int zero = 1;
    for (size_t i = 12; i < 32; i++) zero &= d[data + i] == 0;
    for (size_t i = 132; i < 160; i++) zero &= d[data + i] == 0;
    CHECK(zero);
    CHECK_EQ_INT(n, data + 480);  /* the last tensor (5 bytes at 448) is padded to 32 too */
    free(d);

    /* read back with tela's reader */
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_open(path, &g));
    if (!g) return;
    CHECK_EQ_INT(g->data_offset, data);
    uint32_t u;
    int64_t i64;
    float f;
    bool bl;
    tela_gguf_str s;
    CHECK_OK(tela_gguf_get_u32(g, "a.u32", &u)); CHECK(u == 0xdeadbeefu);
    CHECK_OK(tela_gguf_get_i64(g, "a.i32", &i64)); CHECK_EQ_INT(i64, -7);
    CHECK(tela_gguf_find(g, "a.u64")->value.v.u64 == 0x0123456789abcdefull);
    CHECK_OK(tela_gguf_get_f32(g, "a.f32", &f)); CHECK(f == 0.25f);
    CHECK_OK(tela_gguf_get_bool(g, "a.bool", &bl)); CHECK(bl);
    CHECK_OK(tela_gguf_get_str(g, "general.architecture", &s)); CHECK(s.len == 5 && !memcmp(s.ptr, "llama", 5));
    const tela_gguf_value *a;
    CHECK_OK(tela_gguf_get_arr(g, "a.i16", &a));
    CHECK(a->v.arr.n == 3 && tela_gguf_arr_i64(a, 2) == -300);
    CHECK_OK(tela_gguf_get_arr(g, "a.f64", &a));
    CHECK(tela_gguf_arr_f64(a, 0) == 1.0 / 3.0 && tela_gguf_arr_f64(a, 1) == -1e300);
    CHECK_OK(tela_gguf_get_arr(g, "a.strs", &a));
    CHECK(a->v.arr.n == 3 && a->v.arr.strs[2].len == 2 && !memcmp(a->v.arr.strs[2].ptr, "yz", 2));
    const tela_gguf_tensor *t = tela_gguf_find_tensor(g, "t.q4_K");
    CHECK(t && t->t.type == TELA_TYPE_Q4_K && t->t.ne[0] == 256 && t->t.ne[1] == 2 && t->t.nbytes == 288 &&
          memcmp(t->t.data, t3, 288) == 0);

    /* copy_kv: every key of the file into a new writer, nested arrays too,
     * gives the same bytes for the metadata section */
    char path2[256];
    snprintf(path2, sizeof path2, "%s/b.gguf", g_dir);
    tela_gguf_writer *w2 = tela_gguf_writer_create();
    for (uint64_t i = 0; i < g->n_kv; i++) CHECK_OK(tela_gguf_writer_copy_kv(w2, &g->kv[i]));
    CHECK_OK(tela_gguf_writer_write(w2, path2));
    tela_gguf_writer_free(w2);
    size_t n2;
    unsigned char *d2 = slurp(path2, &n2);
    unsigned char *d1 = slurp(path, &n);
    /* same key/values; the header differs only in the tensor count, and
     * without tensors the file ends right after the key/values */
    tela_gguf *g2 = NULL;
    CHECK_OK(tela_gguf_open(path2, &g2));
    if (g2) CHECK(g2->n_kv == 11 && g2->n_tensors == 0);
    tela_gguf_close(g2);
    CHECK(d1 && d2 && n2 < n && rd64(d2 + 8) == 0 && memcmp(d1 + 16, d2 + 16, n2 - 16) == 0);
    free(d1);
    free(d2);
    tela_gguf_close(g);
}

/* Nested arrays only come from copy_kv; build one by hand and copy it. */
static void test_nested_copy(void) {
    tela_gguf_value inner[2];
    memset(inner, 0, sizeof inner);
    uint32_t nums[2] = {5, 6};
    tela_gguf_str ss[1] = {{"hi", 2}};
    inner[0].type = TELA_GGUF_ARRAY;
    inner[0].v.arr.elem_type = TELA_GGUF_UINT32;
    inner[0].v.arr.n = 2;
    inner[0].v.arr.raw = nums;
    inner[1].type = TELA_GGUF_ARRAY;
    inner[1].v.arr.elem_type = TELA_GGUF_STRING;
    inner[1].v.arr.n = 1;
    inner[1].v.arr.strs = ss;
    tela_gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.key = "n.nested";
    kv.value.type = TELA_GGUF_ARRAY;
    kv.value.v.arr.elem_type = TELA_GGUF_ARRAY;
    kv.value.v.arr.n = 2;
    kv.value.v.arr.items = inner;
    char path[256];
    snprintf(path, sizeof path, "%s/n.gguf", g_dir);
    tela_gguf_writer *w = tela_gguf_writer_create();
    CHECK_OK(tela_gguf_writer_copy_kv(w, &kv));
    CHECK_OK(tela_gguf_writer_write(w, path));
    tela_gguf_writer_free(w);
    size_t n;
    unsigned char *d = slurp(path, &n);
    if (!d) {
        CHECK(0);
        return;
    }
    /* 24 header + (8 + 8 key) + 4 type + 4 elem type + 8 count
     * + [4 + 8 + 2*4] + [4 + 8 + (8 + 2)] = 24 + 16 + 16 + 20 + 22 = 98 */
    CHECK_EQ_INT(n, 98);
    size_t p = 24;
    CHECK(at_str(d, &p, "n.nested"));
    CHECK(rd32(d + p) == 9 && rd32(d + p + 4) == 9 && rd64(d + p + 8) == 2);
    p += 16;
    CHECK(rd32(d + p) == 4 && rd64(d + p + 4) == 2 && rd32(d + p + 12) == 5 && rd32(d + p + 16) == 6);
    p += 20;
    CHECK(rd32(d + p) == 8 && rd64(d + p + 4) == 1);
    p += 12;
    CHECK(at_str(d, &p, "hi"));
    CHECK_EQ_INT(p, n);
    free(d);
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_open(path, &g));
    if (g) {
        const tela_gguf_value *a;
        CHECK_OK(tela_gguf_get_arr(g, "n.nested", &a));
        CHECK(a->v.arr.n == 2 && tela_gguf_arr_i64(&a->v.arr.items[0], 1) == 6);
        CHECK(a->v.arr.items[1].v.arr.strs[0].len == 2);
    }
    tela_gguf_close(g);
}

static void test_alignment(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/al.gguf", g_dir);
    tela_gguf_writer *w = tela_gguf_writer_create();
    tela_gguf_writer_set_alignment(w, 64);
    float a[5] = {1, 2, 3, 4, 5}, b[1] = {6};
    int64_t ne5[1] = {5}, ne1[1] = {1};
    CHECK_OK(tela_gguf_writer_add_tensor(w, "a", TELA_TYPE_F32, ne5, 1, a, 20));
    CHECK_OK(tela_gguf_writer_add_tensor(w, "b", TELA_TYPE_F32, ne1, 1, b, 4));
    CHECK_OK(tela_gguf_writer_write(w, path));
    tela_gguf_writer_free(w);
    size_t n;
    unsigned char *d = slurp(path, &n);
    if (!d) {
        CHECK(0);
        return;
    }
    /* the writer records the alignment as general.alignment (u32) */
    size_t p = 24;
    CHECK_EQ_INT(rd64(d + 16), 1);
    CHECK(at_str(d, &p, "general.alignment"));
    CHECK_EQ_INT(rd32(d + p), 4);
    CHECK_EQ_INT(rd32(d + p + 4), 64);
    p += 8;
    CHECK(at_str(d, &p, "a"));
    p += 4 + 8 + 4;
    CHECK_EQ_INT(rd64(d + p), 0);
    p += 8;
    CHECK(at_str(d, &p, "b"));
    p += 4 + 8 + 4;
    CHECK_EQ_INT(rd64(d + p), 64);  /* 20 bytes rounded up to 64 */
    p += 8;
    size_t data = (p + 63) / 64 * 64;
    CHECK_EQ_INT(n, data + 128);
    float v;
    memcpy(&v, d + data + 64, 4);
    CHECK(v == 6.0f);
    free(d);
    tela_gguf *g = NULL;
    CHECK_OK(tela_gguf_open(path, &g));
    if (g) CHECK(g->alignment == 64 && g->data_offset == data);
    tela_gguf_close(g);

    /* invalid alignments are reported at write time, and no file appears */
    snprintf(path, sizeof path, "%s/bad_align.gguf", g_dir);
    w = tela_gguf_writer_create();
    tela_gguf_writer_set_alignment(w, 48);
    CHECK_EQ_INT(tela_gguf_writer_write(w, path), TELA_ERR_ARG);
    CHECK(strstr(tela_last_error(), "48") != NULL);
    CHECK(access(path, F_OK) != 0);
    CHECK_EQ_INT(tela_gguf_writer_add_u32(w, "general.alignment", 3), TELA_ERR_ARG);
    CHECK_EQ_INT(tela_gguf_writer_add_str(w, "general.alignment", "32"), TELA_ERR_ARG);
    tela_gguf_writer_free(w);
}

static void test_arg_errors(void) {
    tela_gguf_writer *w = tela_gguf_writer_create();
    float x[4] = {0};
    int64_t ne[2] = {4, 1};
    CHECK_OK(tela_gguf_writer_add_u32(w, "k", 1));
    CHECK_EQ_INT(tela_gguf_writer_add_u32(w, "k", 2), TELA_ERR_ARG);      /* duplicate key */
    CHECK(strstr(tela_last_error(), "duplicate") != NULL);
    CHECK_EQ_INT(tela_gguf_writer_add_u32(w, "", 2), TELA_ERR_ARG);
    CHECK_EQ_INT(tela_gguf_writer_add_arr(w, "s", TELA_GGUF_STRING, x, 1), TELA_ERR_ARG);
    uint8_t bad_bool = 2;
    CHECK_EQ_INT(tela_gguf_writer_add_arr(w, "b", TELA_GGUF_BOOL, &bad_bool, 1), TELA_ERR_ARG);
    CHECK_OK(tela_gguf_writer_add_tensor(w, "t", TELA_TYPE_F32, ne, 2, x, 16));
    CHECK_EQ_INT(tela_gguf_writer_add_tensor(w, "t", TELA_TYPE_F32, ne, 2, x, 16), TELA_ERR_ARG);
    CHECK_EQ_INT(tela_gguf_writer_add_tensor(w, "u", TELA_TYPE_F32, ne, 2, x, 12), TELA_ERR_ARG); /* wrong size */
    CHECK_EQ_INT(tela_gguf_writer_add_tensor(w, "u", TELA_TYPE_Q8_0, ne, 2, x, 16), TELA_ERR_ARG); /* 4 % 32 */
    CHECK_EQ_INT(tela_gguf_writer_add_tensor(w, "u", TELA_TYPE_F32, ne, 5, x, 16), TELA_ERR_ARG);
    CHECK_EQ_INT(tela_gguf_writer_add_tensor(w, "u", (tela_type)99, ne, 2, x, 16), TELA_ERR_ARG);
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = '\0';
    CHECK_EQ_INT(tela_gguf_writer_add_tensor(w, longname, TELA_TYPE_F32, ne, 2, x, 16), TELA_ERR_ARG);
    longname[63] = '\0';
    CHECK_OK(tela_gguf_writer_add_tensor(w, longname, TELA_TYPE_F32, ne, 2, x, 16));
    tela_gguf_writer_free(w);
}

static void test_write_failures(void) {
    float big[16384];
    memset(big, 0, sizeof big);
    int64_t ne[1] = {16384};
    int before = count_dir_entries();

    /* a directory that does not exist */
    char path[256];
    snprintf(path, sizeof path, "%s/missing/x.gguf", g_dir);
    tela_gguf_writer *w = tela_gguf_writer_create();
    CHECK_OK(tela_gguf_writer_add_tensor(w, "big", TELA_TYPE_F32, ne, 1, big, sizeof big));
    CHECK_EQ_INT(tela_gguf_writer_write(w, path), TELA_ERR_IO);
    CHECK(strstr(tela_last_error(), "missing/x.gguf") != NULL);

    /* the target is a directory: the rename fails, the temp file goes away */
    snprintf(path, sizeof path, "%s/adir", g_dir);
    CHECK(mkdir(path, 0755) == 0);
    CHECK_EQ_INT(tela_gguf_writer_write(w, path), TELA_ERR_IO);
    CHECK_EQ_INT(count_dir_entries(), before + 1);
    rmdir(path);

    /* a full disk: the file size limit makes write() fail with EFBIG after
     * 4 KiB, like ENOSPC would; the error is reported and nothing is left */
    snprintf(path, sizeof path, "%s/full.gguf", g_dir);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        tela_status s = tela_gguf_writer_write(w, path);
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK_EQ_INT(s, TELA_ERR_IO);
        CHECK(strstr(tela_last_error(), "write failed") != NULL);
        CHECK(access(path, F_OK) != 0);
        CHECK_EQ_INT(count_dir_entries(), before);
    } else {
        printf("note: cannot lower RLIMIT_FSIZE, skipping the full-disk case\n");
    }
    signal(SIGXFSZ, prev);
    CHECK_OK(tela_gguf_writer_write(w, path)); /* and works again without the limit */
    tela_gguf_writer_free(w);
}

static void cleanup(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_layout();
    test_nested_copy();
    test_alignment();
    test_arg_errors();
    test_write_failures();
    cleanup();
    return test_finish();
}
