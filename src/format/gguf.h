/* gguf.h: reading (mmap, zero-copy) and writing GGUF files, versions 2 and 3.
 * The parser treats the file as untrusted: every count, length and offset is
 * checked before use, and errors name the file, the key or tensor, and the
 * byte offset. */
#ifndef TELA_FORMAT_GGUF_H
#define TELA_FORMAT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "format/tensor.h"
#include "util/mapped_file.h"

typedef enum tela_gguf_vtype {
    TELA_GGUF_UINT8 = 0, TELA_GGUF_INT8 = 1, TELA_GGUF_UINT16 = 2, TELA_GGUF_INT16 = 3,
    TELA_GGUF_UINT32 = 4, TELA_GGUF_INT32 = 5, TELA_GGUF_FLOAT32 = 6, TELA_GGUF_BOOL = 7,
    TELA_GGUF_STRING = 8, TELA_GGUF_ARRAY = 9, TELA_GGUF_UINT64 = 10, TELA_GGUF_INT64 = 11,
    TELA_GGUF_FLOAT64 = 12
} tela_gguf_vtype;

/* A string inside the file: not NUL-terminated, points into the mapping. */
typedef struct tela_gguf_str { const char *ptr; uint64_t len; } tela_gguf_str;

typedef struct tela_gguf_value tela_gguf_value;
struct tela_gguf_value {
    tela_gguf_vtype type;
    union {
        uint64_t u64;   /* UINT8..UINT64, BOOL */
        int64_t i64;    /* INT8..INT64 */
        double f64;     /* FLOAT32, FLOAT64 */
        tela_gguf_str str;
        struct {
            tela_gguf_vtype elem_type;
            uint64_t n;
            /* numeric/bool arrays: raw little-endian elements in the file */
            const void *raw;
            /* string arrays: n strings; nested arrays: n values */
            tela_gguf_str *strs;
            tela_gguf_value *items;
        } arr;
    } v;
};

typedef struct tela_gguf_kv {
    char *key;          /* NUL-terminated copy */
    tela_gguf_value value;
} tela_gguf_kv;

typedef struct tela_gguf_tensor {
    tela_tensor t;      /* t.name is a NUL-terminated copy; t.data points into the mapping */
    uint64_t offset;    /* relative to the start of the data section */
} tela_gguf_tensor;

typedef struct tela_gguf {
    char *path;
    tela_mapped_file map;   /* empty when parsed from a caller's buffer */
    const unsigned char *data;
    size_t size;
    uint32_t version;
    uint64_t n_kv;
    tela_gguf_kv *kv;
    uint64_t n_tensors;
    tela_gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;   /* file offset of the tensor data section */
} tela_gguf;

/* Maps and parses a GGUF file. Tensors have 0 to 4 dimensions (unused ne are
 * 1) and ne >= 0 (a zero dimension is an empty tensor); their data is
 * aligned and inside the file. The handle must come from open/parse (the
 * lookups use private indexes kept beside the struct). docs/FORMATS.md lists
 * every check. */
tela_status tela_gguf_open(const char *path, tela_gguf **out);
/* Parses a buffer the caller keeps alive (fuzzing, tests); name is used in
 * error messages. */
tela_status tela_gguf_parse(const void *data, size_t size, const char *name, tela_gguf **out);
void tela_gguf_close(tela_gguf *gguf);

const tela_gguf_kv *tela_gguf_find(const tela_gguf *gguf, const char *key);
const tela_gguf_tensor *tela_gguf_find_tensor(const tela_gguf *gguf, const char *name);

/* Typed getters. They convert between integer widths when the value fits,
 * and fail with a message naming the key and the stored type otherwise.
 * TELA_ERR_NOT_FOUND when the key is absent (the message says so too). */
tela_status tela_gguf_get_i64(const tela_gguf *gguf, const char *key, int64_t *out);
tela_status tela_gguf_get_u32(const tela_gguf *gguf, const char *key, uint32_t *out);
tela_status tela_gguf_get_f32(const tela_gguf *gguf, const char *key, float *out);
tela_status tela_gguf_get_bool(const tela_gguf *gguf, const char *key, bool *out);
tela_status tela_gguf_get_str(const tela_gguf *gguf, const char *key, tela_gguf_str *out);
/* An array value (any element type). */
tela_status tela_gguf_get_arr(const tela_gguf *gguf, const char *key, const tela_gguf_value **out);
/* Element i of a numeric array as int64 / double (no bounds check beyond n). */
int64_t tela_gguf_arr_i64(const tela_gguf_value *arr, uint64_t i);
double tela_gguf_arr_f64(const tela_gguf_value *arr, uint64_t i);

const char *tela_gguf_vtype_name(tela_gguf_vtype type);

/* ---- writer: builds a GGUF v3 file in memory order, writes to a temporary
 * name and renames at the end, so a failure leaves no partial file. */
typedef struct tela_gguf_writer tela_gguf_writer;

tela_gguf_writer *tela_gguf_writer_create(void);
void tela_gguf_writer_free(tela_gguf_writer *w);
void tela_gguf_writer_set_alignment(tela_gguf_writer *w, uint32_t alignment);
tela_status tela_gguf_writer_add_u32(tela_gguf_writer *w, const char *key, uint32_t v);
tela_status tela_gguf_writer_add_i32(tela_gguf_writer *w, const char *key, int32_t v);
tela_status tela_gguf_writer_add_u64(tela_gguf_writer *w, const char *key, uint64_t v);
tela_status tela_gguf_writer_add_f32(tela_gguf_writer *w, const char *key, float v);
tela_status tela_gguf_writer_add_bool(tela_gguf_writer *w, const char *key, bool v);
tela_status tela_gguf_writer_add_str(tela_gguf_writer *w, const char *key, const char *v);
/* Numeric array: elem_type is a scalar vtype, data holds n little-endian values. */
tela_status tela_gguf_writer_add_arr(tela_gguf_writer *w, const char *key, tela_gguf_vtype elem_type,
                                     const void *data, uint64_t n);
tela_status tela_gguf_writer_add_str_arr(tela_gguf_writer *w, const char *key, const char *const *strs,
                                         uint64_t n);
/* True when the key has already been added. */
bool tela_gguf_writer_has_key(tela_gguf_writer *w, const char *key);
/* Copies a key/value from a parsed file (any type, nested arrays too). */
tela_status tela_gguf_writer_copy_kv(tela_gguf_writer *w, const tela_gguf_kv *kv);
/* Adds a tensor; data is referenced, not copied, until write returns.
 * ne follows ggml order (ne[0] innermost). */
tela_status tela_gguf_writer_add_tensor(tela_gguf_writer *w, const char *name, tela_type type,
                                        const int64_t *ne, int n_dims, const void *data, size_t nbytes);
tela_status tela_gguf_writer_write(tela_gguf_writer *w, const char *path);

#endif
