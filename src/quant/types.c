/* types.c: the table of tensor element types (names, block sizes, bytes per
 * block) and the size arithmetic built on it, checked against overflow. */
#include "quant/quant.h"

#include <limits.h>

#include "util/error.h"

/* The block structs must match ggml's layouts byte for byte: a GGUF file's
 * tensor data is read through them. */
_Static_assert(sizeof(tela_block_q4_0) == 18, "q4_0 block is 18 bytes");
_Static_assert(sizeof(tela_block_q4_1) == 20, "q4_1 block is 20 bytes");
_Static_assert(sizeof(tela_block_q5_0) == 22, "q5_0 block is 22 bytes");
_Static_assert(sizeof(tela_block_q5_1) == 24, "q5_1 block is 24 bytes");
_Static_assert(sizeof(tela_block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(tela_block_q8_1) == 36, "q8_1 block is 36 bytes");
_Static_assert(sizeof(tela_block_q2_K) == 84, "q2_K block is 84 bytes");
_Static_assert(sizeof(tela_block_q3_K) == 110, "q3_K block is 110 bytes");
_Static_assert(sizeof(tela_block_q4_K) == 144, "q4_K block is 144 bytes");
_Static_assert(sizeof(tela_block_q5_K) == 176, "q5_K block is 176 bytes");
_Static_assert(sizeof(tela_block_q6_K) == 210, "q6_K block is 210 bytes");
_Static_assert(sizeof(tela_block_q8_K) == 292, "q8_K block is 292 bytes");
_Static_assert(sizeof(tela_block_iq4_nl) == 18, "iq4_nl block is 18 bytes");
_Static_assert(sizeof(tela_block_iq4_xs) == 136, "iq4_xs block is 136 bytes");

/* Indexed by type id; ids with no name (4, 5, 16..19, 21, 22, 29, 31..) are
 * types ggml removed or tela does not know. */
#define PLAIN(nm, bytes, quant) { nm, 1, bytes, false, true, quant }
#define BLOCK(nm, qk, blk, quant) { nm, qk, sizeof(blk), true, true, quant }

static const tela_type_traits g_traits[TELA_TYPE_COUNT] = {
    [TELA_TYPE_F32] = PLAIN("f32", 4, true),
    [TELA_TYPE_F16] = PLAIN("f16", 2, true),
    [TELA_TYPE_BF16] = PLAIN("bf16", 2, true),
    [TELA_TYPE_F64] = PLAIN("f64", 8, true),
    [TELA_TYPE_I8] = PLAIN("i8", 1, false),
    [TELA_TYPE_I16] = PLAIN("i16", 2, false),
    [TELA_TYPE_I32] = PLAIN("i32", 4, false),
    [TELA_TYPE_I64] = PLAIN("i64", 8, false),
    [TELA_TYPE_Q4_0] = BLOCK("q4_0", TELA_QK4_0, tela_block_q4_0, true),
    [TELA_TYPE_Q4_1] = BLOCK("q4_1", TELA_QK4_1, tela_block_q4_1, true),
    [TELA_TYPE_Q5_0] = BLOCK("q5_0", TELA_QK5_0, tela_block_q5_0, true),
    [TELA_TYPE_Q5_1] = BLOCK("q5_1", TELA_QK5_1, tela_block_q5_1, true),
    [TELA_TYPE_Q8_0] = BLOCK("q8_0", TELA_QK8_0, tela_block_q8_0, true),
    [TELA_TYPE_Q8_1] = BLOCK("q8_1", TELA_QK8_1, tela_block_q8_1, true),
    [TELA_TYPE_Q2_K] = BLOCK("q2_K", TELA_QK_K, tela_block_q2_K, true),
    [TELA_TYPE_Q3_K] = BLOCK("q3_K", TELA_QK_K, tela_block_q3_K, true),
    [TELA_TYPE_Q4_K] = BLOCK("q4_K", TELA_QK_K, tela_block_q4_K, true),
    [TELA_TYPE_Q5_K] = BLOCK("q5_K", TELA_QK_K, tela_block_q5_K, true),
    [TELA_TYPE_Q6_K] = BLOCK("q6_K", TELA_QK_K, tela_block_q6_K, true),
    [TELA_TYPE_Q8_K] = BLOCK("q8_K", TELA_QK_K, tela_block_q8_K, true),
    [TELA_TYPE_IQ4_NL] = BLOCK("iq4_nl", TELA_QK4_NL, tela_block_iq4_nl, false),
    [TELA_TYPE_IQ4_XS] = BLOCK("iq4_xs", TELA_QK_K, tela_block_iq4_xs, false),
};

const tela_type_traits *tela_type_get_traits(tela_type type) {
    /* The enum may be given any int (a GGUF type field is read straight into
     * it), so range-check as unsigned before indexing. */
    unsigned id = (unsigned)type;
    if (id >= TELA_TYPE_COUNT || g_traits[id].name == NULL) return NULL;
    return &g_traits[id];
}

const char *tela_type_name(tela_type type) {
    const tela_type_traits *t = tela_type_get_traits(type);
    return t ? t->name : NULL;
}

/* Row size with every failure explained; shared by the two size functions. */
static tela_status row_bytes(tela_type type, int64_t n, size_t *out) {
    const tela_type_traits *t = tela_type_get_traits(type);
    if (!t) return tela_errorf(TELA_ERR_UNSUPPORTED, "unknown tensor type id %d", (int)type);
    if (n < 0) return tela_errorf(TELA_ERR_ARG, "type %s: negative element count %lld", t->name, (long long)n);
    if (n % t->block_size != 0)
        return tela_errorf(TELA_ERR_FORMAT, "type %s: row of %lld elements is not a multiple of the block size %lld",
                           t->name, (long long)n, (long long)t->block_size);
    uint64_t blocks = (uint64_t)(n / t->block_size);
    if (blocks > SIZE_MAX / t->block_bytes)
        return tela_errorf(TELA_ERR_FORMAT, "type %s: row of %lld elements is too large", t->name, (long long)n);
    *out = (size_t)blocks * t->block_bytes;
    return TELA_OK;
}

size_t tela_type_row_bytes(tela_type type, int64_t n) {
    size_t bytes = 0;
    if (row_bytes(type, n, &bytes) != TELA_OK) return 0;
    return bytes;
}

tela_status tela_type_tensor_bytes(tela_type type, const int64_t *ne, int n_dims, size_t *out) {
    if (!out) return tela_errorf(TELA_ERR_ARG, "tensor size: no output");
    *out = 0;
    if (n_dims < 0 || n_dims > 4) return tela_errorf(TELA_ERR_ARG, "tensor size: %d dimensions (at most 4)", n_dims);
    if (n_dims > 0 && !ne) return tela_errorf(TELA_ERR_ARG, "tensor size: no dimensions given");
    for (int i = 0; i < n_dims; i++)
        if (ne[i] < 0) return tela_errorf(TELA_ERR_FORMAT, "tensor size: dimension %d is negative (%lld)", i, (long long)ne[i]);

    /* n_dims == 0 is a scalar: one row of one element. */
    size_t bytes;
    TELA_TRY(row_bytes(type, n_dims > 0 ? ne[0] : 1, &bytes));

    /* The element count must fit int64 (the type of every count in tela) and
     * the byte count size_t; an empty dimension makes both zero. */
    int64_t nelem = n_dims > 0 ? ne[0] : 1;
    for (int i = 1; i < n_dims; i++) {
        if (ne[i] == 0 || nelem == 0) { nelem = 0; bytes = 0; continue; }
        if (nelem > INT64_MAX / ne[i] || bytes > SIZE_MAX / (uint64_t)ne[i])
            return tela_errorf(TELA_ERR_FORMAT, "tensor size: %s tensor of shape [%lld, %lld, %lld, %lld] overflows",
                               tela_type_name(type), (long long)ne[0], (long long)(n_dims > 1 ? ne[1] : 1),
                               (long long)(n_dims > 2 ? ne[2] : 1), (long long)(n_dims > 3 ? ne[3] : 1));
        nelem *= ne[i];
        bytes *= (size_t)ne[i];
    }
    *out = bytes;
    return TELA_OK;
}
