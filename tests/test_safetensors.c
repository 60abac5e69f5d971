/* test_safetensors.c: safetensors files built in the test from JSON text and
 * bytes (dtype mapping, shapes reversed into ggml order, data positions,
 * __metadata__, each kind of malformed header), checkpoint directories
 * (single file, sharded index, the errors of a bad index, unsupported dtypes)
 * and the real HF checkpoint from ../shared checked against its config. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "format/safetensors.h"
#include "test.h"

static char g_dir[] = "/tmp/tela_test_st_XXXXXX";

/* Element i of an f32 tensor. Safetensors data has no alignment guarantee
 * (the header length is arbitrary), so it is read with memcpy. */
static float f32_at(const tela_tensor *t, size_t i) {
    float v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}

/* header length (8 bytes LE) + header + data */
static unsigned char *make_st(const char *json, const void *data, size_t data_len, size_t *n) {
    size_t h = strlen(json);
    unsigned char *p = malloc(8 + h + data_len + 1);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(p + 8, json, h);
    if (data_len) memcpy(p + 8 + h, data, data_len);
    *n = 8 + h + data_len;
    return p;
}

static void write_file(const char *name, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) fprintf(stderr, "cannot write %s\n", path);
    if (f) fclose(f);
}

static void write_st(const char *name, const char *json, const void *data, size_t data_len) {
    size_t n;
    unsigned char *p = make_st(json, data, data_len, &n);
    write_file(name, p, n);
    free(p);
}

static void expect_error(const char *json, size_t data_len, tela_status want, const char *frag, int line) {
    unsigned char data[256] = {0};
    size_t n;
    unsigned char *p = make_st(json, data, data_len, &n);
    tela_st_file *f = NULL;
    tela_status s = tela_st_parse(p, n, "bad.safetensors", &f);
    CHECK_MSG(s == want, "line %d: status %d, want %d (%s)", line, s, want, s ? tela_last_error() : "ok");
    if (s) {
        CHECK_MSG(strstr(tela_last_error(), "bad.safetensors") != NULL, "line %d: %s", line, tela_last_error());
        if (frag) CHECK_MSG(strstr(tela_last_error(), frag) != NULL, "line %d: '%s' not in: %s", line, frag, tela_last_error());
    }
    tela_st_close(f);
    free(p);
}
#define EXPECT_ERROR(json, len, want, frag) expect_error(json, len, want, frag, __LINE__)

static void test_parse(void) {
    /* a: F32 [2, 3] at 0..24, b: BF16 [4] at 24..32, c: I64 [] (a scalar) at
     * 32..40, d: U8 [1, 2, 1] at 40..42; header padded with spaces */
    const char *json =
        "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
        "\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]},"
        "\"d\":{\"dtype\":\"U8\",\"shape\":[1,2,1],\"data_offsets\":[40,42]}}    ";
    unsigned char data[42];
    for (int i = 0; i < 42; i++) data[i] = (unsigned char)i;
    size_t n;
    unsigned char *p = make_st(json, data, sizeof data, &n);
    tela_st_file *f = NULL;
    CHECK_OK(tela_st_parse(p, n, "t.safetensors", &f));
    if (f) {
        size_t hdr = 8 + strlen(json);
        CHECK_EQ_INT(tela_st_data_offset(f), hdr);
        CHECK_EQ_INT(tela_st_n_tensors(f), 4);
        CHECK_EQ_INT(tela_st_n_metadata(f), 2);
        const char *k, *v;
        tela_st_metadata(f, 0, &k, &v);
        CHECK(k && v && !strcmp(k, "format") && !strcmp(v, "pt"));
        for (size_t i = 0; i < tela_st_n_tensors(f); i++) {
            const tela_tensor *t = tela_st_tensor(f, i);
            const char *dt = tela_st_tensor_dtype(f, i);
            if (!strcmp(t->name, "a")) {
                /* HF shape [2, 3] (2 rows of 3) is ggml ne = [3, 2] */
                CHECK(t->type == TELA_TYPE_F32 && !strcmp(dt, "F32"));
                CHECK(t->n_dims == 2 && t->ne[0] == 3 && t->ne[1] == 2 && t->ne[2] == 1 && t->ne[3] == 1);
                CHECK(t->nbytes == 24 && (const unsigned char *)t->data == p + hdr);
            } else if (!strcmp(t->name, "b")) {
                CHECK(t->type == TELA_TYPE_BF16 && t->n_dims == 1 && t->ne[0] == 4 && t->nbytes == 8);
                CHECK((const unsigned char *)t->data == p + hdr + 24);
            } else if (!strcmp(t->name, "c")) {
                CHECK(t->type == TELA_TYPE_I64 && t->n_dims == 0 && tela_tensor_nelements(t) == 1 && t->nbytes == 8);
            } else if (!strcmp(t->name, "d")) {
                /* U8 has no tela type: listed, sized, marked unsupported */
                CHECK(t->type == TELA_ST_TYPE_UNSUPPORTED && !strcmp(dt, "U8"));
                CHECK(t->n_dims == 3 && t->ne[0] == 1 && t->ne[1] == 2 && t->ne[2] == 1 && t->nbytes == 2);
                CHECK(((const unsigned char *)t->data)[1] == 41);
            } else {
                CHECK_MSG(0, "unexpected tensor %s", t->name);
            }
        }
    }
    tela_st_close(f);
    free(p);

    /* an empty header is a valid file without tensors */
    p = make_st("{}", NULL, 0, &n);
    f = NULL;
    CHECK_OK(tela_st_parse(p, n, "empty.safetensors", &f));
    if (f) CHECK(tela_st_n_tensors(f) == 0 && tela_st_n_metadata(f) == 0);
    tela_st_close(f);
    free(p);

    /* every dtype and its element size: F64 8, F16 2, I32 4, I16 2, I8 1,
     * BOOL 1, U16 2, U32 4, U64 8, F8_E4M3 1, F8_E5M2 1 */
    static const struct { const char *dtype; int size; tela_type type; } dts[] = {
        {"F64", 8, TELA_TYPE_F64}, {"F16", 2, TELA_TYPE_F16}, {"I32", 4, TELA_TYPE_I32},
        {"I16", 2, TELA_TYPE_I16}, {"I8", 1, TELA_TYPE_I8}, {"BOOL", 1, TELA_ST_TYPE_UNSUPPORTED},
        {"U16", 2, TELA_ST_TYPE_UNSUPPORTED}, {"U32", 4, TELA_ST_TYPE_UNSUPPORTED},
        {"U64", 8, TELA_ST_TYPE_UNSUPPORTED}, {"F8_E4M3", 1, TELA_ST_TYPE_UNSUPPORTED},
        {"F8_E5M2", 1, TELA_ST_TYPE_UNSUPPORTED}};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        char j[200];
        snprintf(j, sizeof j, "{\"x\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%d]}}", dts[i].dtype,
                 3 * dts[i].size);
        unsigned char zeros[24] = {0};
        p = make_st(j, zeros, (size_t)(3 * dts[i].size), &n);
        f = NULL;
        CHECK_OK(tela_st_parse(p, n, dts[i].dtype, &f));
        if (f) CHECK_MSG(tela_st_tensor(f, 0)->type == dts[i].type && tela_st_tensor(f, 0)->nbytes == (size_t)(3 * dts[i].size),
                         "%s", dts[i].dtype);
        tela_st_close(f);
        free(p);
    }
}

static void test_errors(void) {
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    EXPECT_ERROR(ok, 8, TELA_OK, NULL);
    EXPECT_ERROR(ok, 7, TELA_ERR_FORMAT, "data_offsets [0, 8)");   /* data section too short */
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, TELA_ERR_FORMAT, "needs 12 bytes");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, TELA_ERR_FORMAT, "not within");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, TELA_ERR_FORMAT, "data_offsets");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.5]}}", 8, TELA_ERR_FORMAT, "'a'");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, TELA_ERR_FORMAT, "shape");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, TELA_ERR_FORMAT, "shape");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}", 8, TELA_ERR_FORMAT, "shape");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
                 TELA_ERR_FORMAT, "overflow");
    /* HF shape [0, 2^40, 2^40] is ne [2^40, 2^40, 0]: zero elements, but
     * ne[0] * ne[1] overflows int64 the way tela_tensor_nelements multiplies */
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[0,1099511627776,1099511627776],\"data_offsets\":[0,0]}}", 0,
                 TELA_ERR_FORMAT, "overflow");
    /* while HF [2^40, 2^40, 0] is ne [0, 2^40, 2^40]: the zero comes first */
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776,0],\"data_offsets\":[0,0]}}", 0,
                 TELA_OK, NULL);
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[0,0]}}", 0, TELA_OK, NULL);
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, TELA_ERR_UNSUPPORTED,
                 "5 dimensions");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, TELA_ERR_UNSUPPORTED, "Q4");
    EXPECT_ERROR("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, TELA_ERR_FORMAT, "dtype");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, TELA_ERR_FORMAT, "shape");
    EXPECT_ERROR("{\"a\":[1,2]}", 8, TELA_ERR_FORMAT, "'a'");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, TELA_ERR_FORMAT, "duplicate");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16, TELA_ERR_FORMAT, "overlap");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, TELA_ERR_FORMAT, "invalid JSON");
    EXPECT_ERROR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}xyz", 8, TELA_ERR_FORMAT, "after the JSON");
    EXPECT_ERROR("[1,2,3]", 0, TELA_ERR_FORMAT, "not a JSON object");
    EXPECT_ERROR("{\"__metadata__\":{\"k\":1}}", 0, TELA_ERR_FORMAT, "__metadata__");
    /* a second __metadata__ must not be merged into the first one's table */
    EXPECT_ERROR("{\"__metadata__\":{\"k\":\"v\"},\"__metadata__\":{\"a\":\"1\",\"b\":\"2\",\"c\":\"3\"}}", 0,
                 TELA_ERR_FORMAT, "twice");
    EXPECT_ERROR("{\"__metadata__\":{},\"__metadata__\":{\"a\":\"1\"}}", 0, TELA_ERR_FORMAT, "twice");
    EXPECT_ERROR("{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, TELA_ERR_FORMAT, "empty name");

    /* the header length itself */
    unsigned char buf[32] = {0};
    tela_st_file *f = NULL;
    CHECK_EQ_INT(tela_st_parse(buf, 5, "short", &f), TELA_ERR_FORMAT);
    memset(buf, 0xff, 8);
    CHECK_EQ_INT(tela_st_parse(buf, 32, "huge", &f), TELA_ERR_FORMAT);
    CHECK(strstr(tela_last_error(), "header length") != NULL);
    buf[0] = 24; memset(buf + 1, 0, 7);
    CHECK_EQ_INT(tela_st_parse(buf, 32, "zeros", &f), TELA_ERR_FORMAT);
    CHECK(f == NULL);
}

static char *path_in(const char *sub) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, sub);
    return p;
}

static void test_checkpoints(void) {
    float a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
    char json[512];
    CHECK(mkdir(path_in("one"), 0755) == 0);
    write_st("one/model.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", a, 16);
    write_file("one/config.json", "{\"model_type\":\"llama\",\"hidden_size\":2}", 39);
    tela_checkpoint *ck = NULL;
    CHECK_OK(tela_checkpoint_open(path_in("one"), &ck));
    if (ck) {
        CHECK_EQ_INT(tela_checkpoint_n_tensors(ck), 1);
        const cJSON *cfg = tela_checkpoint_config(ck);
        CHECK(cfg && cJSON_GetObjectItem(cfg, "hidden_size") && cJSON_GetObjectItem(cfg, "hidden_size")->valueint == 2);
        const tela_tensor *t = tela_checkpoint_find(ck, "w");
        CHECK(t && t->ne[0] == 2 && t->ne[1] == 2 && f32_at(t, 3) == 4.0f);
        CHECK(!strcmp(tela_checkpoint_tensor_shard(ck, 0), "model.safetensors"));
        CHECK(strstr(tela_checkpoint_dir(ck), "one") != NULL);
        CHECK(tela_checkpoint_find(ck, "nope") == NULL);
        const tela_tensor *got;
        CHECK_EQ_INT(tela_checkpoint_get(ck, "nope", &got), TELA_ERR_NOT_FOUND);
        CHECK(strstr(tela_last_error(), "nope") != NULL);
    }
    tela_checkpoint_close(ck);
    /* the file alone, with config.json found beside it */
    CHECK_OK(tela_checkpoint_open(path_in("one/model.safetensors"), &ck));
    if (ck) CHECK(tela_checkpoint_n_tensors(ck) == 1 && tela_checkpoint_config(ck) != NULL);
    tela_checkpoint_close(ck);

    /* two shards and an index; a U8 tensor is listed but cannot be used */
    unsigned char m1data[18] = {0};
    memcpy(m1data, a, 16);
    m1data[16] = 7;
    m1data[17] = 8;
    CHECK(mkdir(path_in("sh"), 0755) == 0);
    write_st("sh/m-1.safetensors",
             "{\"x.a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"x.m\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[16,18]}}", m1data, 18);
    const char *m2 = "{\"x.b\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]}}";
    write_st("sh/m-2.safetensors", m2, b, 8);
    snprintf(json, sizeof json,
             "{\"metadata\":{\"total_size\":26},\"weight_map\":{\"x.a\":\"m-1.safetensors\","
             "\"x.b\":\"m-2.safetensors\",\"x.m\":\"m-1.safetensors\"}}");
    write_file("sh/model.safetensors.index.json", json, strlen(json));
    CHECK_OK(tela_checkpoint_open(path_in("sh"), &ck));
    if (ck) {
        CHECK_EQ_INT(tela_checkpoint_n_tensors(ck), 3);
        CHECK_EQ_INT(tela_checkpoint_n_files(ck), 2);
        CHECK(tela_checkpoint_config(ck) == NULL);
        const tela_tensor *t = tela_checkpoint_find(ck, "x.b");
        CHECK(t && t->n_dims == 2 && t->ne[0] == 2 && t->ne[1] == 1 && f32_at(t, 1) == 6.0f);
        for (size_t i = 0; i < tela_checkpoint_n_tensors(ck); i++)
            if (!strcmp(tela_checkpoint_tensor(ck, i)->name, "x.b")) {
                CHECK(!strcmp(tela_checkpoint_tensor_shard(ck, i), "m-2.safetensors"));
                CHECK_EQ_INT(tela_checkpoint_tensor_offset(ck, i), 8 + strlen(m2)); /* length, header, data */
            }
        const tela_tensor *got = NULL;
        CHECK_OK(tela_checkpoint_get(ck, "x.a", &got));
        CHECK(got && f32_at(got, 0) == 1.0f);
        CHECK_EQ_INT(tela_checkpoint_get(ck, "x.m", &got), TELA_ERR_UNSUPPORTED);
        CHECK(strstr(tela_last_error(), "x.m") && strstr(tela_last_error(), "U8"));
    }
    tela_checkpoint_close(ck);
    /* the index file itself may be given */
    CHECK_OK(tela_checkpoint_open(path_in("sh/model.safetensors.index.json"), &ck));
    if (ck) CHECK_EQ_INT(tela_checkpoint_n_tensors(ck), 3);
    tela_checkpoint_close(ck);

    /* bad indexes */
    static const struct { const char *index; const char *frag; } bad[] = {
        {"{\"weight_map\":{\"x.a\":\"m-2.safetensors\"}}", "x.a"},            /* wrong shard */
        {"{\"weight_map\":{\"x.z\":\"m-1.safetensors\"}}", "x.z"},            /* not there */
        {"{\"weight_map\":{\"x.a\":\"../one/model.safetensors\"}}", "shard"}, /* outside the directory */
        {"{\"weight_map\":{\"x.a\":\"missing.safetensors\"}}", "missing"},    /* no such shard */
        {"{\"weight_map\":{}}", "empty"},
        {"{\"weight_map\":[1]}", "weight_map"},
        {"{\"weight_map\":{\"x.a\":7}}", "x.a"},
        {"{\"weight_map\":", "JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file("sh/model.safetensors.index.json", bad[i].index, strlen(bad[i].index));
        ck = NULL;
        tela_status s = tela_checkpoint_open(path_in("sh"), &ck);
        CHECK_MSG(s != TELA_OK && ck == NULL, "bad index %zu accepted", i);
        CHECK_MSG(strstr(tela_last_error(), bad[i].frag) != NULL, "index %zu: '%s' not in: %s", i, bad[i].frag,
                  tela_last_error());
    }
    /* the same tensor in two shards */
    write_st("sh/m-2.safetensors", "{\"x.a\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]}}", b, 8);
    snprintf(json, sizeof json, "{\"weight_map\":{\"x.a\":\"m-1.safetensors\",\"y\":\"m-2.safetensors\"}}");
    write_file("sh/model.safetensors.index.json", json, strlen(json));
    CHECK(tela_checkpoint_open(path_in("sh"), &ck) == TELA_ERR_FORMAT);
    CHECK(strstr(tela_last_error(), "x.a") && strstr(tela_last_error(), "m-2.safetensors"));

    /* a directory without weights, a malformed config.json */
    CHECK(mkdir(path_in("none"), 0755) == 0);
    CHECK_EQ_INT(tela_checkpoint_open(path_in("none"), &ck), TELA_ERR_NOT_FOUND);
    write_file("one/config.json", "{\"model_type\":", 14);
    CHECK_EQ_INT(tela_checkpoint_open(path_in("one"), &ck), TELA_ERR_FORMAT);
    CHECK(strstr(tela_last_error(), "config.json") != NULL);
    CHECK(tela_checkpoint_open(path_in("does-not-exist"), &ck) != TELA_OK);
}

/* The HF checkpoint in ../shared: names, shapes and sizes against the
 * config in refs-d1.json (hidden 32, intermediate 64, 2 layers, 2 heads of
 * dim 16 and 1 KV head, vocab 128256, tied embeddings: no lm_head). */
static void test_shared(const char *shared) {
    char tgz[1024], cmd[2048];
    snprintf(tgz, sizeof tgz, "%s/reference/fixtures/llama-d1-hf.tgz", shared);
    if (access(tgz, R_OK) != 0) return;
    CHECK(mkdir(path_in("hf"), 0755) == 0);
    snprintf(cmd, sizeof cmd, "tar xzf '%s' -C '%s' 2>/dev/null", tgz, path_in("hf"));
    if (system(cmd) != 0) {
        printf("note: cannot extract %s\n", tgz);
        return;
    }
    tela_checkpoint *ck = NULL;
    CHECK_OK(tela_checkpoint_open(path_in("hf"), &ck));
    if (!ck) return;
    const cJSON *cfg = tela_checkpoint_config(ck);
    CHECK(cfg && cJSON_GetObjectItem(cfg, "vocab_size")->valueint == 128256);
    /* 9 tensors per layer (4 attention, 3 MLP, 2 norms) + embeddings + final norm */
    CHECK_EQ_INT(tela_checkpoint_n_tensors(ck), 2 * 9 + 2);
    const tela_tensor *t = tela_checkpoint_find(ck, "model.embed_tokens.weight");
    CHECK(t && t->type == TELA_TYPE_F32 && t->ne[0] == 32 && t->ne[1] == 128256 && t->nbytes == 128256u * 32 * 4);
    t = tela_checkpoint_find(ck, "model.layers.1.self_attn.q_proj.weight");
    CHECK(t && t->ne[0] == 32 && t->ne[1] == 2 * 16);
    t = tela_checkpoint_find(ck, "model.layers.0.self_attn.k_proj.weight");
    CHECK(t && t->ne[0] == 32 && t->ne[1] == 1 * 16);
    t = tela_checkpoint_find(ck, "model.layers.0.mlp.down_proj.weight");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 32);
    CHECK(tela_checkpoint_find(ck, "lm_head.weight") == NULL);
    tela_checkpoint_close(ck);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_parse();
    test_errors();
    test_checkpoints();
    const char *shared = getenv("TELA_SHARED_DIR");
    if (shared) test_shared(shared);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return test_finish();
}
