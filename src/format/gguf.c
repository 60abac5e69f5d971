/* gguf.c: the GGUF reader (versions 2 and 3). The file is mmapped and used in
 * place: strings, numeric arrays and tensor data point into the mapping. The
 * input is untrusted: every count and length is checked against the bytes
 * that remain before anything is allocated, sizes are computed with overflow
 * checks, nested arrays are limited in depth, and every error names the file,
 * the key or tensor and the byte offset where the bad field was read. */
#include "format/gguf.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/name_index.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ARRAY_DEPTH 8
/* Smallest possible encodings, used to reject counts that cannot fit in the
 * remaining bytes before allocating for them. */
#define GGUF_MIN_KV_BYTES 14      /* key length (8) + 1 key byte + type (4) + 1 value byte */
#define GGUF_MIN_TENSOR_BYTES 25  /* name length (8) + 1 name byte + n_dims (4) + type (4) + offset (8) */

/* The public struct plus the private lookup indexes (keys and tensor names,
 * sorted by name: tela_name_index_*). A tela_gguf handed out by this file
 * is always the first member of one of these. */
typedef struct gguf_impl {
    tela_gguf pub;
    tela_name_ref *kv_index;
    tela_name_ref *tensor_index;
} gguf_impl;

typedef struct gguf_reader {
    const unsigned char *data;
    size_t size;
    size_t pos;
    const char *name;
    char ctx[96];   /* "key 'x': " or "tensor 'y': " while reading one, for messages */
} gguf_reader;

/* Names the key or tensor being read in later error messages. */
static void gguf_set_ctx(gguf_reader *r, const char *kind, const char *item) {
    if (!item) r->ctx[0] = '\0';
    else snprintf(r->ctx, sizeof r->ctx, "%s '%.64s%s': ", kind, item, strlen(item) > 64 ? "..." : "");
}

const char *tela_gguf_vtype_name(tela_gguf_vtype type) {
    switch (type) {
    case TELA_GGUF_UINT8: return "uint8";
    case TELA_GGUF_INT8: return "int8";
    case TELA_GGUF_UINT16: return "uint16";
    case TELA_GGUF_INT16: return "int16";
    case TELA_GGUF_UINT32: return "uint32";
    case TELA_GGUF_INT32: return "int32";
    case TELA_GGUF_FLOAT32: return "float32";
    case TELA_GGUF_BOOL: return "bool";
    case TELA_GGUF_STRING: return "string";
    case TELA_GGUF_ARRAY: return "array";
    case TELA_GGUF_UINT64: return "uint64";
    case TELA_GGUF_INT64: return "int64";
    case TELA_GGUF_FLOAT64: return "float64";
    }
    return "unknown";
}

/* Bytes of one element of a scalar value type; 0 for string, array and
 * unknown types. */
static size_t gguf_scalar_size(uint32_t type) {
    switch (type) {
    case TELA_GGUF_UINT8: case TELA_GGUF_INT8: case TELA_GGUF_BOOL: return 1;
    case TELA_GGUF_UINT16: case TELA_GGUF_INT16: return 2;
    case TELA_GGUF_UINT32: case TELA_GGUF_INT32: case TELA_GGUF_FLOAT32: return 4;
    case TELA_GGUF_UINT64: case TELA_GGUF_INT64: case TELA_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* ggml type ids that exist but that tela does not implement, so the error
 * can say what the tensor is instead of "unknown". */
static const char *gguf_ggml_type_name(uint32_t type) {
    switch (type) {
    case 16: return "iq2_xxs";
    case 17: return "iq2_xs";
    case 18: return "iq3_xxs";
    case 19: return "iq1_s";
    case 21: return "iq3_s";
    case 22: return "iq2_s";
    case 29: return "iq1_m";
    case 34: return "tq1_0";
    case 35: return "tq2_0";
    case 39: return "mxfp4";
    default: return NULL;
    }
}

static uint16_t gguf_le16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t gguf_le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t gguf_le64(const unsigned char *p) { return gguf_le32(p) | ((uint64_t)gguf_le32(p + 4) << 32); }

static size_t gguf_left(const gguf_reader *r) { return r->size - r->pos; }

static tela_status gguf_need(gguf_reader *r, size_t n, const char *what) {
    if (gguf_left(r) < n)
        return tela_errorf(TELA_ERR_FORMAT, "%s: %struncated: %s at byte offset %zu needs %zu bytes, %zu left",
                           r->name, r->ctx, what, r->pos, n, gguf_left(r));
    return TELA_OK;
}

static tela_status gguf_read_u32(gguf_reader *r, const char *what, uint32_t *out) {
    TELA_TRY(gguf_need(r, 4, what));
    *out = gguf_le32(r->data + r->pos);
    r->pos += 4;
    return TELA_OK;
}

static tela_status gguf_read_u64(gguf_reader *r, const char *what, uint64_t *out) {
    TELA_TRY(gguf_need(r, 8, what));
    *out = gguf_le64(r->data + r->pos);
    r->pos += 8;
    return TELA_OK;
}

/* A length-prefixed string, left in place. index numbers the elements of
 * string arrays in messages (UINT64_MAX: not an element). */
static tela_status gguf_read_str(gguf_reader *r, const char *what, uint64_t index, tela_gguf_str *out) {
    size_t at = r->pos;
    char num[32] = "";
    if (gguf_left(r) < 8) {
        if (index != UINT64_MAX) snprintf(num, sizeof num, " %llu", (unsigned long long)index);
        return tela_errorf(TELA_ERR_FORMAT, "%s: %struncated: length of %s%s at byte offset %zu needs 8 bytes, %zu left",
                           r->name, r->ctx, what, num, at, gguf_left(r));
    }
    uint64_t len = gguf_le64(r->data + at);
    r->pos += 8;
    if (len > gguf_left(r)) {
        if (index != UINT64_MAX) snprintf(num, sizeof num, " %llu", (unsigned long long)index);
        return tela_errorf(TELA_ERR_FORMAT,
                           "%s: %s%s%s at byte offset %zu has length %llu, past the end of the file (%zu bytes left)",
                           r->name, r->ctx, what, num, at, (unsigned long long)len, gguf_left(r));
    }
    out->ptr = (const char *)r->data + r->pos;
    out->len = len;
    r->pos += (size_t)len;
    return TELA_OK;
}

/* Keys and tensor names become C strings, so they must be non-empty and
 * free of NUL bytes. */
static tela_status gguf_read_name(gguf_reader *r, const char *what, char **out) {
    size_t at = r->pos;
    tela_gguf_str s;
    *out = NULL;
    TELA_TRY(gguf_read_str(r, what, UINT64_MAX, &s));
    if (s.len == 0) return tela_errorf(TELA_ERR_FORMAT, "%s: empty %s at byte offset %zu", r->name, what, at);
    if (memchr(s.ptr, '\0', (size_t)s.len))
        return tela_errorf(TELA_ERR_FORMAT, "%s: %s at byte offset %zu contains a NUL byte", r->name, what, at);
    char *c = malloc((size_t)s.len + 1);
    if (!c) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory reading %s", r->name, what);
    memcpy(c, s.ptr, (size_t)s.len);
    c[s.len] = '\0';
    *out = c;
    return TELA_OK;
}

static void gguf_free_value(tela_gguf_value *v) {
    if (v->type != TELA_GGUF_ARRAY) return;
    free(v->v.arr.strs);
    if (v->v.arr.items) {
        for (uint64_t i = 0; i < v->v.arr.n; i++) gguf_free_value(&v->v.arr.items[i]);
        free(v->v.arr.items);
    }
    v->v.arr.strs = NULL;
    v->v.arr.items = NULL;
}

/* Decodes one scalar at p (bounds already checked). */
static void gguf_decode_scalar(tela_gguf_vtype type, const unsigned char *p, tela_gguf_value *v) {
    v->type = type;
    switch (type) {
    case TELA_GGUF_UINT8: case TELA_GGUF_BOOL: v->v.u64 = p[0]; break;
    case TELA_GGUF_INT8: v->v.i64 = (int8_t)p[0]; break;
    case TELA_GGUF_UINT16: v->v.u64 = gguf_le16(p); break;
    case TELA_GGUF_INT16: v->v.i64 = (int16_t)gguf_le16(p); break;
    case TELA_GGUF_UINT32: v->v.u64 = gguf_le32(p); break;
    case TELA_GGUF_INT32: v->v.i64 = (int32_t)gguf_le32(p); break;
    case TELA_GGUF_UINT64: v->v.u64 = gguf_le64(p); break;
    case TELA_GGUF_INT64: v->v.i64 = (int64_t)gguf_le64(p); break;
    case TELA_GGUF_FLOAT32: {
        uint32_t u = gguf_le32(p);
        float f;
        memcpy(&f, &u, 4);
        v->v.f64 = f;
        break;
    }
    case TELA_GGUF_FLOAT64: {
        uint64_t u = gguf_le64(p);
        memcpy(&v->v.f64, &u, 8);
        break;
    }
    default: break;
    }
}

/* Reads a value of the given type. Arrays recurse at most
 * GGUF_MAX_ARRAY_DEPTH levels; every element count is checked against the
 * bytes left (at the smallest possible element size) before allocating. */
static tela_status gguf_read_value(gguf_reader *r, uint32_t type, int depth, const char *key,
                                   tela_gguf_value *v) {
    memset(v, 0, sizeof *v);
    v->type = (tela_gguf_vtype)type;
    size_t at = r->pos;
    size_t sz = gguf_scalar_size(type);
    if (sz) {
        if (gguf_left(r) < sz)
            return tela_errorf(TELA_ERR_FORMAT,
                               "%s: truncated: value of key '%s' (%s) at byte offset %zu needs %zu bytes, %zu left",
                               r->name, key, tela_gguf_vtype_name(type), at, sz, gguf_left(r));
        if (type == TELA_GGUF_BOOL && r->data[at] > 1)
            return tela_errorf(TELA_ERR_FORMAT, "%s: key '%s': bool at byte offset %zu is %u, not 0 or 1",
                               r->name, key, at, r->data[at]);
        gguf_decode_scalar((tela_gguf_vtype)type, r->data + at, v);
        r->pos += sz;
        return TELA_OK;
    }
    if (type == TELA_GGUF_STRING) {
        return gguf_read_str(r, "string value", UINT64_MAX, &v->v.str);
    }
    if (type != TELA_GGUF_ARRAY)
        return tela_errorf(TELA_ERR_FORMAT, "%s: key '%s' has unknown value type %u (read at byte offset %zu)",
                           r->name, key, type, at - 4);

    uint32_t et;
    uint64_t n;
    TELA_TRY(gguf_read_u32(r, "array element type", &et));
    TELA_TRY(gguf_read_u64(r, "array length", &n));
    v->v.arr.elem_type = (tela_gguf_vtype)et;
    size_t esz = gguf_scalar_size(et);
    size_t min_elem = esz ? esz : et == TELA_GGUF_STRING ? 8 : et == TELA_GGUF_ARRAY ? 12 : 0;
    if (min_elem == 0)
        return tela_errorf(TELA_ERR_FORMAT, "%s: key '%s': array at byte offset %zu has unknown element type %u",
                           r->name, key, at, et);
    if (et == TELA_GGUF_ARRAY && depth + 1 >= GGUF_MAX_ARRAY_DEPTH)
        return tela_errorf(TELA_ERR_FORMAT, "%s: key '%s': arrays nested more than %d deep at byte offset %zu",
                           r->name, key, GGUF_MAX_ARRAY_DEPTH, at);
    if (n > gguf_left(r) / min_elem)
        return tela_errorf(TELA_ERR_FORMAT,
                           "%s: key '%s': array of %llu %s elements at byte offset %zu cannot fit in the %zu bytes "
                           "left (truncated or corrupt file)",
                           r->name, key, (unsigned long long)n, tela_gguf_vtype_name(et), at, gguf_left(r));
    v->v.arr.n = n;
    if (esz) {
        const unsigned char *p = r->data + r->pos;
        if (et == TELA_GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (p[i] > 1)
                    return tela_errorf(TELA_ERR_FORMAT,
                                       "%s: key '%s': bool array element %llu at byte offset %zu is %u, not 0 or 1",
                                       r->name, key, (unsigned long long)i, r->pos + (size_t)i, p[i]);
        }
        v->v.arr.raw = p;
        r->pos += (size_t)n * esz;
        return TELA_OK;
    }
    if (n == 0) return TELA_OK;
    if (et == TELA_GGUF_STRING) {
        v->v.arr.strs = malloc((size_t)n * sizeof *v->v.arr.strs);
        if (!v->v.arr.strs) return tela_errorf(TELA_ERR_NOMEM, "%s: key '%s': out of memory", r->name, key);
        for (uint64_t i = 0; i < n; i++) TELA_TRY(gguf_read_str(r, "array string", i, &v->v.arr.strs[i]));
        return TELA_OK;
    }
    /* nested arrays: each element is itself an array (type, count, data) */
    v->v.arr.items = calloc((size_t)n, sizeof *v->v.arr.items);
    if (!v->v.arr.items) return tela_errorf(TELA_ERR_NOMEM, "%s: key '%s': out of memory", r->name, key);
    for (uint64_t i = 0; i < n; i++) {
        /* items that were never reached must not be freed as arrays */
        v->v.arr.items[i].type = TELA_GGUF_UINT8;
    }
    for (uint64_t i = 0; i < n; i++) {
        TELA_TRY(gguf_read_value(r, TELA_GGUF_ARRAY, depth + 1, key, &v->v.arr.items[i]));
    }
    return TELA_OK;
}

void tela_gguf_close(tela_gguf *gguf) {
    if (!gguf) return;
    gguf_impl *g = (gguf_impl *)gguf;
    if (gguf->kv) {
        for (uint64_t i = 0; i < gguf->n_kv; i++) {
            free(gguf->kv[i].key);
            gguf_free_value(&gguf->kv[i].value);
        }
        free(gguf->kv);
    }
    if (gguf->tensors) {
        for (uint64_t i = 0; i < gguf->n_tensors; i++) free((char *)gguf->tensors[i].t.name);
        free(gguf->tensors);
    }
    free(g->kv_index);
    free(g->tensor_index);
    tela_unmap_file(&gguf->map);
    free(gguf->path);
    free(g);
}

/* Rounds x up to a multiple of the power of two a; fails on overflow. */
static int gguf_align_up(uint64_t x, uint64_t a, uint64_t *out) {
    uint64_t r = x & (a - 1);
    if (r == 0) {
        *out = x;
        return 1;
    }
    if (x > UINT64_MAX - (a - r)) return 0;
    *out = x + (a - r);
    return 1;
}

/* Sorts the names and rejects the first duplicate. */
static tela_status gguf_build_index(gguf_reader *r, tela_name_ref **out, size_t n, const char *(*name_of)(const tela_gguf *, size_t),
                                    const tela_gguf *g, const char *what) {
    *out = NULL;
    if (n == 0) return TELA_OK;
    tela_name_ref *idx = malloc(n * sizeof *idx);
    if (!idx) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", r->name);
    for (size_t i = 0; i < n; i++) {
        idx[i].name = name_of(g, i);
        idx[i].index = i;
    }
    size_t dup = tela_name_index_sort(idx, n);
    if (dup) {
        tela_status s = tela_errorf(TELA_ERR_FORMAT, "%s: duplicate %s '%s'", r->name, what, idx[dup].name);
        free(idx);
        return s;
    }
    *out = idx;
    return TELA_OK;
}

static const char *gguf_kv_name(const tela_gguf *g, size_t i) { return g->kv[i].key; }
static const char *gguf_tensor_name(const tela_gguf *g, size_t i) { return g->tensors[i].t.name; }

/* general.alignment, when present, must be an integer power of two. */
static tela_status gguf_read_alignment(gguf_reader *r, tela_gguf *g) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const tela_gguf_kv *kv = tela_gguf_find(g, "general.alignment");
    if (!kv) return TELA_OK;
    uint64_t a;
    switch (kv->value.type) {
    case TELA_GGUF_UINT8: case TELA_GGUF_UINT16: case TELA_GGUF_UINT32: case TELA_GGUF_UINT64:
        a = kv->value.v.u64;
        break;
    case TELA_GGUF_INT8: case TELA_GGUF_INT16: case TELA_GGUF_INT32: case TELA_GGUF_INT64:
        if (kv->value.v.i64 <= 0)
            return tela_errorf(TELA_ERR_FORMAT, "%s: general.alignment is %lld, not a positive power of two",
                               r->name, (long long)kv->value.v.i64);
        a = (uint64_t)kv->value.v.i64;
        break;
    default:
        return tela_errorf(TELA_ERR_FORMAT, "%s: general.alignment is a %s, not an integer", r->name,
                           tela_gguf_vtype_name(kv->value.type));
    }
    if (a == 0 || (a & (a - 1)) != 0)
        return tela_errorf(TELA_ERR_FORMAT, "%s: general.alignment is %llu, not a nonzero power of two", r->name,
                           (unsigned long long)a);
    g->alignment = a;
    return TELA_OK;
}

/* Reads one tensor info (name, dims, type, offset); sizes are checked later,
 * once the alignment and the data section are known. */
static tela_status gguf_read_tensor_info(gguf_reader *r, uint64_t i, tela_gguf_tensor *t, size_t *info_at) {
    char what[64];
    *info_at = r->pos;
    snprintf(what, sizeof what, "name of tensor %llu", (unsigned long long)i);
    char *name;
    TELA_TRY(gguf_read_name(r, what, &name));
    t->t.name = name;
    gguf_set_ctx(r, "tensor", name);
    size_t at = r->pos;
    uint32_t n_dims;
    TELA_TRY(gguf_read_u32(r, "n_dims", &n_dims));
    if (n_dims > TELA_MAX_DIMS)
        return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (at byte offset %zu); at most %d allowed",
                           r->name, name, n_dims, at, TELA_MAX_DIMS);
    t->t.n_dims = (int)n_dims;
    for (int d = 0; d < TELA_MAX_DIMS; d++) t->t.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        at = r->pos;
        uint64_t ne;
        TELA_TRY(gguf_read_u64(r, "dimension", &ne));
        if (ne > (uint64_t)INT64_MAX)
            return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s': dimension %u at byte offset %zu is negative (%lld)",
                               r->name, name, d, at, (long long)(int64_t)ne);
        t->t.ne[d] = (int64_t)ne;
    }
    at = r->pos;
    uint32_t type;
    TELA_TRY(gguf_read_u32(r, "tensor type", &type));
    if (type >= TELA_TYPE_COUNT || !tela_type_get_traits((tela_type)type)) {
        const char *known = gguf_ggml_type_name(type);
        if (known)
            return tela_errorf(TELA_ERR_UNSUPPORTED,
                               "%s: tensor '%s' has type %u (%s, at byte offset %zu), which tela does not support",
                               r->name, name, type, known, at);
        return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s' has unknown type %u (at byte offset %zu)", r->name, name,
                           type, at);
    }
    t->t.type = (tela_type)type;
    TELA_TRY(gguf_read_u64(r, "tensor data offset", &t->offset));
    gguf_set_ctx(r, NULL, NULL);
    return TELA_OK;
}

/* Checks a tensor's size, alignment and extent and points it into the data. */
static tela_status gguf_place_tensor(gguf_reader *r, tela_gguf *g, tela_gguf_tensor *t, size_t info_at) {
    const char *name = t->t.name;
    int64_t nel = 1;
    for (int d = 0; d < TELA_MAX_DIMS; d++) {
        if (__builtin_mul_overflow(nel, t->t.ne[d], &nel))
            return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s' (info at byte offset %zu): element count overflows",
                               r->name, name, info_at);
    }
    size_t nbytes;
    tela_status s = tela_type_tensor_bytes(t->t.type, t->t.ne, t->t.n_dims, &nbytes);
    if (s) return tela_error_prefix(s == TELA_ERR_ARG ? TELA_ERR_FORMAT : s, "%s: tensor '%s' (info at byte offset %zu): ",
                                    r->name, name, info_at);
    if (t->offset % g->alignment)
        return tela_errorf(TELA_ERR_FORMAT,
                           "%s: tensor '%s' (info at byte offset %zu): data offset %llu is not a multiple of the alignment %llu",
                           r->name, name, info_at, (unsigned long long)t->offset, (unsigned long long)g->alignment);
    uint64_t avail = r->size - g->data_offset;
    if (t->offset > avail || nbytes > avail - t->offset)
        return tela_errorf(TELA_ERR_FORMAT,
                           "%s: tensor '%s' (info at byte offset %zu): data [%llu, +%zu) runs past the end of the file "
                           "(data section starts at %llu, file is %zu bytes)",
                           r->name, name, info_at, (unsigned long long)t->offset, nbytes,
                           (unsigned long long)g->data_offset, r->size);
    t->t.nbytes = nbytes;
    t->t.data = r->data + g->data_offset + t->offset;
    return TELA_OK;
}

static tela_status gguf_parse_all(gguf_reader *r, gguf_impl *impl) {
    tela_gguf *g = &impl->pub;
    if (r->size < 4 || memcmp(r->data, "GGUF", 4) != 0) {
        if (r->size < 4)
            return tela_errorf(TELA_ERR_FORMAT, "%s: not a GGUF file: only %zu bytes long", r->name, r->size);
        return tela_errorf(TELA_ERR_FORMAT, "%s: not a GGUF file: magic at byte offset 0 is %02x %02x %02x %02x, not 'GGUF'",
                           r->name, r->data[0], r->data[1], r->data[2], r->data[3]);
    }
    r->pos = 4;
    TELA_TRY(gguf_read_u32(r, "version", &g->version));
    if (g->version == 1)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: GGUF version 1 is not supported (only versions 2 and 3)", r->name);
    if (g->version != 2 && g->version != 3) {
        uint32_t swapped = __builtin_bswap32(g->version);
        if (swapped == 2 || swapped == 3)
            return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: big-endian GGUF files are not supported", r->name);
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: unsupported GGUF version %u at byte offset 4 (only 2 and 3)",
                           r->name, g->version);
    }
    uint64_t n_tensors, n_kv;
    TELA_TRY(gguf_read_u64(r, "tensor count", &n_tensors));
    TELA_TRY(gguf_read_u64(r, "metadata key/value count", &n_kv));
    if (n_kv > gguf_left(r) / GGUF_MIN_KV_BYTES)
        return tela_errorf(TELA_ERR_FORMAT, "%s: key/value count %llu at byte offset 16 cannot fit in the %zu bytes left",
                           r->name, (unsigned long long)n_kv, gguf_left(r));
    if (n_tensors > gguf_left(r) / GGUF_MIN_TENSOR_BYTES ||
        n_kv * GGUF_MIN_KV_BYTES + n_tensors * GGUF_MIN_TENSOR_BYTES > gguf_left(r))
        return tela_errorf(TELA_ERR_FORMAT, "%s: tensor count %llu at byte offset 8 cannot fit in the %zu bytes left",
                           r->name, (unsigned long long)n_tensors, gguf_left(r));

    if (n_kv) {
        g->kv = calloc((size_t)n_kv, sizeof *g->kv);
        if (!g->kv) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", r->name);
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        tela_gguf_kv *kv = &g->kv[i];
        char what[64];
        snprintf(what, sizeof what, "key of metadata entry %llu", (unsigned long long)i);
        /* counted before reading so close() frees a half-read entry */
        g->n_kv = i + 1;
        kv->value.type = TELA_GGUF_UINT8;
        TELA_TRY(gguf_read_name(r, what, &kv->key));
        gguf_set_ctx(r, "key", kv->key);
        uint32_t type;
        TELA_TRY(gguf_read_u32(r, "value type", &type));
        TELA_TRY(gguf_read_value(r, type, 0, kv->key, &kv->value));
        gguf_set_ctx(r, NULL, NULL);
    }
    TELA_TRY(gguf_build_index(r, &impl->kv_index, (size_t)n_kv, gguf_kv_name, g, "metadata key"));
    TELA_TRY(gguf_read_alignment(r, g));

    size_t *info_at = NULL;
    if (n_tensors) {
        g->tensors = calloc((size_t)n_tensors, sizeof *g->tensors);
        info_at = malloc((size_t)n_tensors * sizeof *info_at);
        if (!g->tensors || !info_at) {
            free(info_at);
            return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", r->name);
        }
    }
    tela_status s = TELA_OK;
    for (uint64_t i = 0; i < n_tensors && !s; i++) {
        g->n_tensors = i + 1;
        s = gguf_read_tensor_info(r, i, &g->tensors[i], &info_at[i]);
    }
    if (!s) s = gguf_build_index(r, &impl->tensor_index, (size_t)n_tensors, gguf_tensor_name, g, "tensor name");
    if (!s) {
        uint64_t start;
        if (!gguf_align_up(r->pos, g->alignment, &start) || (start > r->size && n_tensors > 0)) {
            s = tela_errorf(TELA_ERR_FORMAT,
                            "%s: the tensor data section (after the tensor infos ending at byte offset %zu, aligned to "
                            "%llu) starts past the end of the file (%zu bytes)",
                            r->name, r->pos, (unsigned long long)g->alignment, r->size);
        } else {
            /* a file without tensors (a vocabulary) may end right after the infos */
            g->data_offset = start > r->size ? r->size : start;
        }
    }
    for (uint64_t i = 0; i < n_tensors && !s; i++) s = gguf_place_tensor(r, g, &g->tensors[i], info_at[i]);
    free(info_at);
    return s;
}

/* The format's tela_parse_fn: a tela_gguf over data (*out), keeping map. */
static tela_status gguf_parse(const void *data, size_t size, const char *name, const tela_mapped_file *map,
                              void *out) {
    gguf_impl *impl = calloc(1, sizeof *impl);
    if (!impl) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", name);
    tela_gguf *g = &impl->pub;
    g->path = strdup(name);
    if (!g->path) {
        free(impl);
        return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", name);
    }
    g->data = data;
    g->size = size;
    gguf_reader r = {.data = data, .size = size, .pos = 0, .name = g->path, .ctx = ""};
    static const unsigned char empty[1];
    if (!r.data) r.data = empty;
    tela_status s = gguf_parse_all(&r, impl);
    if (s) {
        tela_gguf_close(g);
        return s;
    }
    g->map = *map;
    *(tela_gguf **)out = g;
    return TELA_OK;
}

tela_status tela_gguf_parse(const void *data, size_t size, const char *name, tela_gguf **out) {
    *out = NULL;
    return tela_parse_buffer(data, size, name, gguf_parse, out);
}

tela_status tela_gguf_open(const char *path, tela_gguf **out) {
    *out = NULL;
    return tela_parse_file(path, gguf_parse, out);
}

const tela_gguf_kv *tela_gguf_find(const tela_gguf *gguf, const char *key) {
    const gguf_impl *g = (const gguf_impl *)gguf;
    const tela_name_ref *ref = tela_name_index_find(g->kv_index, (size_t)gguf->n_kv, key);
    return ref ? &gguf->kv[ref->index] : NULL;
}

const tela_gguf_tensor *tela_gguf_find_tensor(const tela_gguf *gguf, const char *name) {
    const gguf_impl *g = (const gguf_impl *)gguf;
    const tela_name_ref *ref = tela_name_index_find(g->tensor_index, (size_t)gguf->n_tensors, name);
    return ref ? &gguf->tensors[ref->index] : NULL;
}

/* ---- typed getters */

static tela_status gguf_get(const tela_gguf *gguf, const char *key, const tela_gguf_kv **out) {
    *out = tela_gguf_find(gguf, key);
    if (!*out) return tela_errorf(TELA_ERR_NOT_FOUND, "%s: metadata key '%s' not found", gguf->path, key);
    return TELA_OK;
}

static tela_status gguf_wrong_type(const tela_gguf *gguf, const tela_gguf_kv *kv, const char *want) {
    return tela_errorf(TELA_ERR_FORMAT, "%s: metadata key '%s' is stored as %s, not %s", gguf->path, kv->key,
                       tela_gguf_vtype_name(kv->value.type), want);
}

static int gguf_is_unsigned(tela_gguf_vtype t) {
    return t == TELA_GGUF_UINT8 || t == TELA_GGUF_UINT16 || t == TELA_GGUF_UINT32 || t == TELA_GGUF_UINT64;
}
static int gguf_is_signed(tela_gguf_vtype t) {
    return t == TELA_GGUF_INT8 || t == TELA_GGUF_INT16 || t == TELA_GGUF_INT32 || t == TELA_GGUF_INT64;
}

tela_status tela_gguf_get_i64(const tela_gguf *gguf, const char *key, int64_t *out) {
    const tela_gguf_kv *kv;
    TELA_TRY(gguf_get(gguf, key, &kv));
    if (gguf_is_signed(kv->value.type)) {
        *out = kv->value.v.i64;
        return TELA_OK;
    }
    if (gguf_is_unsigned(kv->value.type)) {
        if (kv->value.v.u64 > (uint64_t)INT64_MAX)
            return tela_errorf(TELA_ERR_FORMAT, "%s: metadata key '%s' = %llu does not fit in int64", gguf->path, key,
                               (unsigned long long)kv->value.v.u64);
        *out = (int64_t)kv->value.v.u64;
        return TELA_OK;
    }
    return gguf_wrong_type(gguf, kv, "an integer");
}

tela_status tela_gguf_get_u32(const tela_gguf *gguf, const char *key, uint32_t *out) {
    const tela_gguf_kv *kv;
    TELA_TRY(gguf_get(gguf, key, &kv));
    if (gguf_is_unsigned(kv->value.type)) {
        if (kv->value.v.u64 > UINT32_MAX)
            return tela_errorf(TELA_ERR_FORMAT, "%s: metadata key '%s' = %llu does not fit in uint32", gguf->path, key,
                               (unsigned long long)kv->value.v.u64);
        *out = (uint32_t)kv->value.v.u64;
        return TELA_OK;
    }
    if (gguf_is_signed(kv->value.type)) {
        if (kv->value.v.i64 < 0 || kv->value.v.i64 > (int64_t)UINT32_MAX)
            return tela_errorf(TELA_ERR_FORMAT, "%s: metadata key '%s' = %lld does not fit in uint32", gguf->path, key,
                               (long long)kv->value.v.i64);
        *out = (uint32_t)kv->value.v.i64;
        return TELA_OK;
    }
    return gguf_wrong_type(gguf, kv, "an integer");
}

tela_status tela_gguf_get_f32(const tela_gguf *gguf, const char *key, float *out) {
    const tela_gguf_kv *kv;
    TELA_TRY(gguf_get(gguf, key, &kv));
    tela_gguf_vtype t = kv->value.type;
    if (t == TELA_GGUF_FLOAT32 || t == TELA_GGUF_FLOAT64) *out = (float)kv->value.v.f64;
    else if (gguf_is_signed(t)) *out = (float)kv->value.v.i64;
    else if (gguf_is_unsigned(t)) *out = (float)kv->value.v.u64;
    else return gguf_wrong_type(gguf, kv, "a number");
    return TELA_OK;
}

tela_status tela_gguf_get_bool(const tela_gguf *gguf, const char *key, bool *out) {
    const tela_gguf_kv *kv;
    TELA_TRY(gguf_get(gguf, key, &kv));
    if (kv->value.type != TELA_GGUF_BOOL) return gguf_wrong_type(gguf, kv, "a bool");
    *out = kv->value.v.u64 != 0;
    return TELA_OK;
}

tela_status tela_gguf_get_str(const tela_gguf *gguf, const char *key, tela_gguf_str *out) {
    const tela_gguf_kv *kv;
    TELA_TRY(gguf_get(gguf, key, &kv));
    if (kv->value.type != TELA_GGUF_STRING) return gguf_wrong_type(gguf, kv, "a string");
    *out = kv->value.v.str;
    return TELA_OK;
}

tela_status tela_gguf_get_arr(const tela_gguf *gguf, const char *key, const tela_gguf_value **out) {
    const tela_gguf_kv *kv;
    TELA_TRY(gguf_get(gguf, key, &kv));
    if (kv->value.type != TELA_GGUF_ARRAY) return gguf_wrong_type(gguf, kv, "an array");
    *out = &kv->value;
    return TELA_OK;
}

/* Array elements are read with memcpy-style loads: the raw pointer into the
 * file has no alignment guarantee. */
static int gguf_arr_elem(const tela_gguf_value *arr, uint64_t i, tela_gguf_value *out) {
    if (!arr || arr->type != TELA_GGUF_ARRAY || i >= arr->v.arr.n) return 0;
    size_t sz = gguf_scalar_size(arr->v.arr.elem_type);
    if (!sz || !arr->v.arr.raw) return 0;
    gguf_decode_scalar(arr->v.arr.elem_type, (const unsigned char *)arr->v.arr.raw + (size_t)i * sz, out);
    return 1;
}

int64_t tela_gguf_arr_i64(const tela_gguf_value *arr, uint64_t i) {
    tela_gguf_value v;
    if (!gguf_arr_elem(arr, i, &v)) return 0;
    if (gguf_is_signed(v.type)) return v.v.i64;
    if (v.type == TELA_GGUF_FLOAT32 || v.type == TELA_GGUF_FLOAT64) {
        double d = v.v.f64;
        if (!(d >= -9.2233720368547758e18 && d < 9.2233720368547758e18)) return 0;
        return (int64_t)d;
    }
    return (int64_t)v.v.u64;
}

double tela_gguf_arr_f64(const tela_gguf_value *arr, uint64_t i) {
    tela_gguf_value v;
    if (!gguf_arr_elem(arr, i, &v)) return 0.0;
    if (v.type == TELA_GGUF_FLOAT32 || v.type == TELA_GGUF_FLOAT64) return v.v.f64;
    if (gguf_is_signed(v.type)) return (double)v.v.i64;
    return (double)v.v.u64;
}
