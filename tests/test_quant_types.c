/* test_quant_types.c: the type table (names and block layouts as ggml defines
 * them in ggml.c's type_traits and ggml-common.h) and the size arithmetic,
 * including overflow and malformed shapes. */
#include <stdint.h>

#include "quant/quant.h"
#include "test.h"

struct expect { tela_type type; const char *name; int64_t block; size_t bytes; int quantized; };

/* Block sizes and bytes from the format definition: e.g. q4_K is 2 fp16 +
 * 12 scale bytes + 256/2 nibble bytes = 144; q8_K is f32 + 256 + 16*2 = 292. */
static const struct expect table[] = {
    {TELA_TYPE_F32, "f32", 1, 4, 0},       {TELA_TYPE_F16, "f16", 1, 2, 0},
    {TELA_TYPE_BF16, "bf16", 1, 2, 0},     {TELA_TYPE_F64, "f64", 1, 8, 0},
    {TELA_TYPE_I8, "i8", 1, 1, 0},         {TELA_TYPE_I16, "i16", 1, 2, 0},
    {TELA_TYPE_I32, "i32", 1, 4, 0},       {TELA_TYPE_I64, "i64", 1, 8, 0},
    {TELA_TYPE_Q4_0, "q4_0", 32, 2 + 16, 1},       {TELA_TYPE_Q4_1, "q4_1", 32, 4 + 16, 1},
    {TELA_TYPE_Q5_0, "q5_0", 32, 2 + 4 + 16, 1},   {TELA_TYPE_Q5_1, "q5_1", 32, 4 + 4 + 16, 1},
    {TELA_TYPE_Q8_0, "q8_0", 32, 2 + 32, 1},       {TELA_TYPE_Q8_1, "q8_1", 32, 4 + 32, 1},
    {TELA_TYPE_Q2_K, "q2_K", 256, 16 + 64 + 4, 1}, {TELA_TYPE_Q3_K, "q3_K", 256, 32 + 64 + 12 + 2, 1},
    {TELA_TYPE_Q4_K, "q4_K", 256, 4 + 12 + 128, 1}, {TELA_TYPE_Q5_K, "q5_K", 256, 4 + 12 + 32 + 128, 1},
    {TELA_TYPE_Q6_K, "q6_K", 256, 128 + 64 + 16 + 2, 1}, {TELA_TYPE_Q8_K, "q8_K", 256, 4 + 256 + 32, 1},
    {TELA_TYPE_IQ4_NL, "iq4_nl", 32, 2 + 16, 1},  {TELA_TYPE_IQ4_XS, "iq4_xs", 256, 2 + 2 + 4 + 128, 1},
};

int main(void) {
    int known = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const struct expect *e = &table[i];
        const tela_type_traits *t = tela_type_get_traits(e->type);
        CHECK_MSG(t != NULL, "type %d", (int)e->type);
        if (!t) continue;
        CHECK_MSG(strcmp(t->name, e->name) == 0, "%s vs %s", t->name, e->name);
        CHECK_MSG(tela_type_name(e->type) && strcmp(tela_type_name(e->type), e->name) == 0, "%s", e->name);
        CHECK_EQ_INT(t->block_size, e->block);
        CHECK_EQ_INT(t->block_bytes, e->bytes);
        CHECK_EQ_INT(t->is_quantized, e->quantized);
        CHECK_MSG(t->can_dequantize, "%s dequantizes", e->name);
    }
    /* Exactly these ids are known: every other id in [-5, 300) is not. */
    for (int id = -5; id < 300; id++) {
        int in_table = 0;
        for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) in_table |= (int)table[i].type == id;
        const tela_type_traits *t = tela_type_get_traits((tela_type)id);
        CHECK_MSG((t != NULL) == in_table, "id %d", id);
        CHECK_MSG((tela_type_name((tela_type)id) != NULL) == in_table, "id %d", id);
        known += t != NULL;
    }
    CHECK_EQ_INT(known, 22);
    /* ids ggml retired (q4_2 = 4, q4_3 = 5) and iq2..iq3 (16..19) are unknown */
    CHECK(tela_type_get_traits((tela_type)4) == NULL);
    CHECK(tela_type_get_traits((tela_type)5) == NULL);
    for (int id = 16; id <= 19; id++) CHECK(tela_type_name((tela_type)id) == NULL);

    /* The quantizers the tools need. */
    const tela_type must_quantize[] = {TELA_TYPE_F32, TELA_TYPE_F16, TELA_TYPE_BF16, TELA_TYPE_Q4_0, TELA_TYPE_Q8_0,
                                       TELA_TYPE_Q4_K, TELA_TYPE_Q5_K, TELA_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof must_quantize / sizeof must_quantize[0]; i++)
        CHECK_MSG(tela_type_get_traits(must_quantize[i])->can_quantize, "%s", tela_type_name(must_quantize[i]));

    /* Row sizes: 4096 q4_K values = 16 blocks * 144 bytes. */
    CHECK_EQ_INT(tela_type_row_bytes(TELA_TYPE_Q4_K, 4096), 16 * 144);
    CHECK_EQ_INT(tela_type_row_bytes(TELA_TYPE_Q8_0, 64), 2 * 34);
    CHECK_EQ_INT(tela_type_row_bytes(TELA_TYPE_F16, 7), 14);
    CHECK_EQ_INT(tela_type_row_bytes(TELA_TYPE_Q6_K, 0), 0);
    CHECK_EQ_INT(tela_type_row_bytes(TELA_TYPE_Q4_K, 100), 0);  /* not a multiple of 256 */
    CHECK(strstr(tela_last_error(), "q4_K") && strstr(tela_last_error(), "100"));
    CHECK_EQ_INT(tela_type_row_bytes(TELA_TYPE_F32, -1), 0);
    CHECK_EQ_INT(tela_type_row_bytes((tela_type)4, 32), 0);
    /* 2^62 f32 values need 2^64 bytes: overflow */
    CHECK_EQ_INT(tela_type_row_bytes(TELA_TYPE_F32, (int64_t)1 << 62), 0);
    /* 2^61 f32 values = 2^63 bytes still fits a 64-bit size_t */
    CHECK_EQ_INT(tela_type_row_bytes(TELA_TYPE_F32, (int64_t)1 << 61), (size_t)1 << 63);

    /* Tensor sizes. */
    size_t bytes = 1;
    const int64_t ne1[4] = {4096, 11008, 1, 1};
    CHECK_OK(tela_type_tensor_bytes(TELA_TYPE_Q4_K, ne1, 2, &bytes));
    CHECK_EQ_INT(bytes, (size_t)16 * 144 * 11008);
    CHECK_OK(tela_type_tensor_bytes(TELA_TYPE_Q8_0, ne1, 4, &bytes));
    CHECK_EQ_INT(bytes, (size_t)128 * 34 * 11008);
    const int64_t ne3[3] = {32, 3, 5};
    CHECK_OK(tela_type_tensor_bytes(TELA_TYPE_BF16, ne3, 3, &bytes));
    CHECK_EQ_INT(bytes, 32 * 3 * 5 * 2);
    CHECK_OK(tela_type_tensor_bytes(TELA_TYPE_F32, NULL, 0, &bytes));  /* scalar */
    CHECK_EQ_INT(bytes, 4);
    const int64_t empty[2] = {256, 0};
    CHECK_OK(tela_type_tensor_bytes(TELA_TYPE_Q6_K, empty, 2, &bytes));
    CHECK_EQ_INT(bytes, 0);

    /* Errors: each gives a status and a message, never a wrong size. */
    const int64_t bad_row[2] = {100, 2};
    CHECK(tela_type_tensor_bytes(TELA_TYPE_Q4_0, bad_row, 2, &bytes) != TELA_OK);
    CHECK(strstr(tela_last_error(), "q4_0") != NULL);
    const int64_t neg[2] = {32, -1};
    CHECK(tela_type_tensor_bytes(TELA_TYPE_F32, neg, 2, &bytes) != TELA_OK);
    const int64_t big[4] = {(int64_t)1 << 32, (int64_t)1 << 32, 1, 1};  /* 2^64 elements */
    CHECK(tela_type_tensor_bytes(TELA_TYPE_I8, big, 4, &bytes) != TELA_OK);
    CHECK(strstr(tela_last_error(), "overflow") != NULL);
    const int64_t huge[4] = {INT64_MAX - 31, 1, 1, 1};  /* ~2^63 f32 values: bytes overflow */
    CHECK(tela_type_tensor_bytes(TELA_TYPE_F32, huge, 1, &bytes) != TELA_OK);
    const int64_t huge2[4] = {(int64_t)1 << 40, (int64_t)1 << 22, (int64_t)1 << 1, 1};  /* 2^63 elements */
    CHECK(tela_type_tensor_bytes(TELA_TYPE_Q4_0, huge2, 3, &bytes) != TELA_OK);
    const int64_t fits[4] = {(int64_t)1 << 40, (int64_t)1 << 20, 1, 1};  /* 2^60 q4_0 values = 2^55 * 18 bytes */
    CHECK_OK(tela_type_tensor_bytes(TELA_TYPE_Q4_0, fits, 2, &bytes));
    CHECK_EQ_INT(bytes, ((size_t)1 << 55) * 18);
    const int64_t maxdims[4] = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
    CHECK(tela_type_tensor_bytes(TELA_TYPE_I8, maxdims, 4, &bytes) != TELA_OK);
    CHECK(tela_type_tensor_bytes(TELA_TYPE_F32, ne1, 5, &bytes) != TELA_OK);
    CHECK(tela_type_tensor_bytes(TELA_TYPE_F32, ne1, -1, &bytes) != TELA_OK);
    CHECK(tela_type_tensor_bytes((tela_type)17, ne1, 2, &bytes) != TELA_OK);
    CHECK(tela_type_tensor_bytes((tela_type)1000, ne1, 2, &bytes) != TELA_OK);
    CHECK(tela_type_tensor_bytes((tela_type)-3, ne1, 2, &bytes) != TELA_OK);
    return test_finish();
}
