/* gguf_write.c: the GGUF v3 writer. Key/values are serialized as they are
 * added; tensors are referenced until tela_gguf_writer_write(), which lays
 * out header, metadata, tensor infos and aligned tensor data, writes them to
 * a temporary file beside the target and renames it into place, so a failed
 * write (disk full, bad path) never leaves a partial file behind. */
#include "format/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GGUF_WRITE_VERSION 3
#define GGUF_WRITE_DEFAULT_ALIGNMENT 32
/* ggml keeps tensor names in 64-byte buffers (63 characters + NUL); longer
 * names would make files other readers reject. */
#define GGUF_WRITE_MAX_NAME 63

typedef struct gguf_buf {
    unsigned char *p;
    size_t len, cap;
    int oom;
} gguf_buf;

typedef struct gguf_wkv {
    char *key;
    gguf_buf val;   /* value type (u32) followed by the encoded value */
} gguf_wkv;

typedef struct gguf_wtensor {
    char *name;
    tela_type type;
    int n_dims;
    int64_t ne[TELA_MAX_DIMS];
    const void *data;
    size_t nbytes;
} gguf_wtensor;

struct tela_gguf_writer {
    uint64_t alignment;
    uint64_t bad_alignment;  /* nonzero: an invalid value given to set_alignment */
    gguf_wkv *kv;
    size_t n_kv, cap_kv;
    gguf_wtensor *tensors;
    size_t n_tensors, cap_tensors;
};

static void buf_put(gguf_buf *b, const void *p, size_t n) {
    if (b->oom || n == 0) return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = 1;
                return;
            }
            cap *= 2;
        }
        unsigned char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void buf_u32(gguf_buf *b, uint32_t v) {
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    buf_put(b, x, 4);
}

static void buf_u64(gguf_buf *b, uint64_t v) {
    buf_u32(b, (uint32_t)v);
    buf_u32(b, (uint32_t)(v >> 32));
}

static void buf_str(gguf_buf *b, const char *s, uint64_t len) {
    buf_u64(b, len);
    buf_put(b, s, (size_t)len);
}

static size_t scalar_size(tela_gguf_vtype t) {
    switch (t) {
    case TELA_GGUF_UINT8: case TELA_GGUF_INT8: case TELA_GGUF_BOOL: return 1;
    case TELA_GGUF_UINT16: case TELA_GGUF_INT16: return 2;
    case TELA_GGUF_UINT32: case TELA_GGUF_INT32: case TELA_GGUF_FLOAT32: return 4;
    case TELA_GGUF_UINT64: case TELA_GGUF_INT64: case TELA_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

tela_gguf_writer *tela_gguf_writer_create(void) {
    tela_gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = GGUF_WRITE_DEFAULT_ALIGNMENT;
    return w;
}

void tela_gguf_writer_free(tela_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    free(w->kv);
    for (size_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    free(w);
}

void tela_gguf_writer_set_alignment(tela_gguf_writer *w, uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1))) {
        w->bad_alignment = alignment ? alignment : UINT64_MAX;
        return;
    }
    w->bad_alignment = 0;
    w->alignment = alignment;
}

static gguf_wkv *find_kv(tela_gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) return &w->kv[i];
    return NULL;
}

bool tela_gguf_writer_has_key(tela_gguf_writer *w, const char *key) { return w && key && find_kv(w, key) != NULL; }

/* Starts a new key/value: checks the key and appends an entry whose value
 * buffer begins with the type. */
static tela_status kv_begin(tela_gguf_writer *w, const char *key, tela_gguf_vtype type, gguf_wkv **out) {
    if (!w || !key || !*key) return tela_errorf(TELA_ERR_ARG, "gguf writer: empty metadata key");
    if (find_kv(w, key)) return tela_errorf(TELA_ERR_ARG, "gguf writer: duplicate metadata key '%s'", key);
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
        gguf_wkv *nk = realloc(w->kv, cap * sizeof *nk);
        if (!nk) return tela_errorf(TELA_ERR_NOMEM, "gguf writer: out of memory adding key '%s'", key);
        w->kv = nk;
        w->cap_kv = cap;
    }
    gguf_wkv *kv = &w->kv[w->n_kv];
    memset(kv, 0, sizeof *kv);
    kv->key = strdup(key);
    if (!kv->key) return tela_errorf(TELA_ERR_NOMEM, "gguf writer: out of memory adding key '%s'", key);
    buf_u32(&kv->val, (uint32_t)type);
    w->n_kv++;
    *out = kv;
    return TELA_OK;
}

/* Finishes the entry begun last: drops it again on allocation failure. */
static tela_status kv_end(tela_gguf_writer *w, gguf_wkv *kv) {
    if (kv->val.oom) {
        tela_status s = tela_errorf(TELA_ERR_NOMEM, "gguf writer: out of memory adding key '%s'", kv->key);
        free(kv->key);
        free(kv->val.p);
        w->n_kv--;
        return s;
    }
    return TELA_OK;
}

/* general.alignment decides the layout, so it must be a u32 power of two;
 * once added, it sets the writer's alignment (see apply_alignment_key). */
static tela_status check_alignment_key(const char *key, tela_gguf_vtype type, uint64_t v) {
    if (!key || strcmp(key, "general.alignment") != 0) return TELA_OK;
    if (type != TELA_GGUF_UINT32)
        return tela_errorf(TELA_ERR_ARG, "gguf writer: general.alignment must be a uint32, not %s",
                           tela_gguf_vtype_name(type));
    if (v == 0 || (v & (v - 1)))
        return tela_errorf(TELA_ERR_ARG, "gguf writer: general.alignment %llu is not a power of two",
                           (unsigned long long)v);
    return TELA_OK;
}

static void apply_alignment_key(tela_gguf_writer *w, const char *key, uint64_t v) {
    if (strcmp(key, "general.alignment") != 0) return;
    w->alignment = v;
    w->bad_alignment = 0;
}

static tela_status add_scalar(tela_gguf_writer *w, const char *key, tela_gguf_vtype type, const void *le, size_t n) {
    uint64_t v = 0;
    if (type == TELA_GGUF_UINT32) {
        uint32_t u;
        memcpy(&u, le, 4);
        v = u;
    }
    TELA_TRY(check_alignment_key(key, type, v));
    gguf_wkv *kv;
    TELA_TRY(kv_begin(w, key, type, &kv));
    buf_put(&kv->val, le, n);
    TELA_TRY(kv_end(w, kv));
    apply_alignment_key(w, key, v);
    return TELA_OK;
}

/* Values are passed in host order; GGUF is little-endian, as are all the
 * machines tela runs on (checked at compile time below). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the GGUF writer assumes a little-endian host");

tela_status tela_gguf_writer_add_u32(tela_gguf_writer *w, const char *key, uint32_t v) {
    return add_scalar(w, key, TELA_GGUF_UINT32, &v, 4);
}
tela_status tela_gguf_writer_add_i32(tela_gguf_writer *w, const char *key, int32_t v) {
    return add_scalar(w, key, TELA_GGUF_INT32, &v, 4);
}
tela_status tela_gguf_writer_add_u64(tela_gguf_writer *w, const char *key, uint64_t v) {
    return add_scalar(w, key, TELA_GGUF_UINT64, &v, 8);
}
tela_status tela_gguf_writer_add_f32(tela_gguf_writer *w, const char *key, float v) {
    return add_scalar(w, key, TELA_GGUF_FLOAT32, &v, 4);
}
tela_status tela_gguf_writer_add_bool(tela_gguf_writer *w, const char *key, bool v) {
    unsigned char b = v ? 1 : 0;
    return add_scalar(w, key, TELA_GGUF_BOOL, &b, 1);
}

tela_status tela_gguf_writer_add_str(tela_gguf_writer *w, const char *key, const char *v) {
    if (!v) return tela_errorf(TELA_ERR_ARG, "gguf writer: NULL string for key '%s'", key ? key : "");
    TELA_TRY(check_alignment_key(key, TELA_GGUF_STRING, 0));
    gguf_wkv *kv;
    TELA_TRY(kv_begin(w, key, TELA_GGUF_STRING, &kv));
    buf_str(&kv->val, v, strlen(v));
    return kv_end(w, kv);
}

tela_status tela_gguf_writer_add_arr(tela_gguf_writer *w, const char *key, tela_gguf_vtype elem_type,
                                     const void *data, uint64_t n) {
    size_t sz = scalar_size(elem_type);
    if (!sz)
        return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': %s is not a numeric element type", key ? key : "",
                           tela_gguf_vtype_name(elem_type));
    if (n && !data) return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': NULL array data", key ? key : "");
    if (n > SIZE_MAX / sz) return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': array too long", key ? key : "");
    if (elem_type == TELA_GGUF_BOOL) {
        const unsigned char *b = data;
        for (uint64_t i = 0; i < n; i++)
            if (b[i] > 1)
                return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': bool element %llu is %u, not 0 or 1", key,
                                   (unsigned long long)i, b[i]);
    }
    TELA_TRY(check_alignment_key(key, TELA_GGUF_ARRAY, 0));
    gguf_wkv *kv;
    TELA_TRY(kv_begin(w, key, TELA_GGUF_ARRAY, &kv));
    buf_u32(&kv->val, (uint32_t)elem_type);
    buf_u64(&kv->val, n);
    buf_put(&kv->val, data, (size_t)n * sz);
    return kv_end(w, kv);
}

tela_status tela_gguf_writer_add_str_arr(tela_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    if (n && !strs) return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': NULL string array", key ? key : "");
    for (uint64_t i = 0; i < n; i++)
        if (!strs[i])
            return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': string %llu is NULL", key ? key : "",
                               (unsigned long long)i);
    TELA_TRY(check_alignment_key(key, TELA_GGUF_ARRAY, 0));
    gguf_wkv *kv;
    TELA_TRY(kv_begin(w, key, TELA_GGUF_ARRAY, &kv));
    buf_u32(&kv->val, TELA_GGUF_STRING);
    buf_u64(&kv->val, n);
    for (uint64_t i = 0; i < n; i++) buf_str(&kv->val, strs[i], strlen(strs[i]));
    return kv_end(w, kv);
}

/* Encodes a parsed value (without its type word), recursing into nested
 * arrays; the reader already bounded their depth. */
static tela_status encode_value(gguf_buf *b, const tela_gguf_value *v, const char *key) {
    size_t sz = scalar_size(v->type);
    if (sz) {
        unsigned char x[8];
        uint64_t u = v->type == TELA_GGUF_INT8 || v->type == TELA_GGUF_INT16 || v->type == TELA_GGUF_INT32 ||
                             v->type == TELA_GGUF_INT64
                         ? (uint64_t)v->v.i64
                         : v->v.u64;
        if (v->type == TELA_GGUF_FLOAT32) {
            float f = (float)v->v.f64;
            uint32_t fu;
            memcpy(&fu, &f, 4);
            u = fu;
        } else if (v->type == TELA_GGUF_FLOAT64) {
            memcpy(&u, &v->v.f64, 8);
        }
        for (size_t i = 0; i < sz; i++) x[i] = (unsigned char)(u >> (8 * i));
        buf_put(b, x, sz);
        return TELA_OK;
    }
    if (v->type == TELA_GGUF_STRING) {
        buf_str(b, v->v.str.ptr, v->v.str.len);
        return TELA_OK;
    }
    if (v->type != TELA_GGUF_ARRAY)
        return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s' has unknown value type %u", key, (unsigned)v->type);
    tela_gguf_vtype et = v->v.arr.elem_type;
    uint64_t n = v->v.arr.n;
    buf_u32(b, (uint32_t)et);
    buf_u64(b, n);
    size_t esz = scalar_size(et);
    if (esz) {
        if (n && !v->v.arr.raw) return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': array without data", key);
        if (n > SIZE_MAX / esz) return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': array too long", key);
        buf_put(b, v->v.arr.raw, (size_t)n * esz);
    } else if (et == TELA_GGUF_STRING) {
        if (n && !v->v.arr.strs) return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': array without data", key);
        for (uint64_t i = 0; i < n; i++) buf_str(b, v->v.arr.strs[i].ptr, v->v.arr.strs[i].len);
    } else if (et == TELA_GGUF_ARRAY) {
        if (n && !v->v.arr.items) return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': array without data", key);
        for (uint64_t i = 0; i < n; i++) {
            if (v->v.arr.items[i].type != TELA_GGUF_ARRAY)
                return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': nested array element is not an array", key);
            TELA_TRY(encode_value(b, &v->v.arr.items[i], key));
        }
    } else {
        return tela_errorf(TELA_ERR_ARG, "gguf writer: key '%s': unknown array element type %u", key, (unsigned)et);
    }
    return TELA_OK;
}

tela_status tela_gguf_writer_copy_kv(tela_gguf_writer *w, const tela_gguf_kv *src) {
    if (!src || !src->key) return tela_errorf(TELA_ERR_ARG, "gguf writer: NULL key/value to copy");
    uint64_t v = src->value.type == TELA_GGUF_UINT32 ? src->value.v.u64 : 0;
    TELA_TRY(check_alignment_key(src->key, src->value.type, v));
    gguf_wkv *kv;
    TELA_TRY(kv_begin(w, src->key, src->value.type, &kv));
    tela_status s = encode_value(&kv->val, &src->value, src->key);
    if (s) {
        free(kv->key);
        free(kv->val.p);
        w->n_kv--;
        return s;
    }
    TELA_TRY(kv_end(w, kv));
    apply_alignment_key(w, src->key, v);
    return TELA_OK;
}

tela_status tela_gguf_writer_add_tensor(tela_gguf_writer *w, const char *name, tela_type type, const int64_t *ne,
                                        int n_dims, const void *data, size_t nbytes) {
    if (!w || !name || !*name) return tela_errorf(TELA_ERR_ARG, "gguf writer: empty tensor name");
    if (strlen(name) > GGUF_WRITE_MAX_NAME)
        return tela_errorf(TELA_ERR_ARG, "gguf writer: tensor name '%s' is longer than %d bytes", name,
                           GGUF_WRITE_MAX_NAME);
    if (n_dims < 1 || n_dims > TELA_MAX_DIMS || !ne)
        return tela_errorf(TELA_ERR_ARG, "gguf writer: tensor '%s' has %d dimensions (1 to %d allowed)", name, n_dims,
                           TELA_MAX_DIMS);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return tela_errorf(TELA_ERR_ARG, "gguf writer: duplicate tensor name '%s'", name);
    int64_t full[TELA_MAX_DIMS] = {1, 1, 1, 1};
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return tela_errorf(TELA_ERR_ARG, "gguf writer: tensor '%s': negative dimension", name);
        full[d] = ne[d];
    }
    size_t want;
    tela_status s = tela_type_tensor_bytes(type, full, n_dims, &want);
    if (s) return tela_error_prefix(TELA_ERR_ARG, "gguf writer: tensor '%s': ", name);
    if (want != nbytes)
        return tela_errorf(TELA_ERR_ARG, "gguf writer: tensor '%s': %zu bytes given, its shape and type need %zu", name,
                           nbytes, want);
    if (nbytes && !data) return tela_errorf(TELA_ERR_ARG, "gguf writer: tensor '%s': NULL data", name);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 16;
        gguf_wtensor *nt = realloc(w->tensors, cap * sizeof *nt);
        if (!nt) return tela_errorf(TELA_ERR_NOMEM, "gguf writer: out of memory adding tensor '%s'", name);
        w->tensors = nt;
        w->cap_tensors = cap;
    }
    gguf_wtensor *t = &w->tensors[w->n_tensors];
    t->name = strdup(name);
    if (!t->name) return tela_errorf(TELA_ERR_NOMEM, "gguf writer: out of memory adding tensor '%s'", name);
    t->type = type;
    t->n_dims = n_dims;
    memcpy(t->ne, full, sizeof full);
    t->data = data;
    t->nbytes = nbytes;
    w->n_tensors++;
    return TELA_OK;
}

/* ---- writing */

typedef struct gguf_out {
    FILE *f;
    int err;        /* first errno seen */
    uint64_t pos;
} gguf_out;

static void out_put(gguf_out *o, const void *p, size_t n) {
    if (o->err || n == 0) return;
    errno = 0;
    if (fwrite(p, 1, n, o->f) != n) o->err = errno ? errno : EIO;
    o->pos += n;
}

static void out_pad(gguf_out *o, uint64_t alignment) {
    static const unsigned char zeros[64];
    uint64_t r = o->pos % alignment;
    if (r == 0) return;
    uint64_t n = alignment - r;
    while (n > 0 && !o->err) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        out_put(o, zeros, k);
        n -= k;
    }
}

/* Opens a new, not yet existing temporary file beside path (so rename() is
 * atomic); the umask applies as for any new file. */
static tela_status open_temp(const char *path, char **tmp_out, FILE **f_out) {
    static unsigned counter;
    size_t cap = strlen(path) + 48;
    char *tmp = malloc(cap);
    if (!tmp) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned c = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        snprintf(tmp, cap, "%s.tmp.%ld.%u", path, (long)getpid(), c);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) {
            if (errno == EEXIST) continue;
            int e = errno;
            free(tmp);
            return tela_errorf(TELA_ERR_IO, "%s: cannot create a temporary file to write: %s", path, strerror(e));
        }
        FILE *f = fdopen(fd, "wb");
        if (!f) {
            int e = errno;
            close(fd);
            unlink(tmp);
            free(tmp);
            return tela_errorf(TELA_ERR_IO, "%s: %s", path, strerror(e));
        }
        *tmp_out = tmp;
        *f_out = f;
        return TELA_OK;
    }
    free(tmp);
    return tela_errorf(TELA_ERR_IO, "%s: cannot find a free temporary file name", path);
}

tela_status tela_gguf_writer_write(tela_gguf_writer *w, const char *path) {
    if (!w || !path || !*path) return tela_errorf(TELA_ERR_ARG, "gguf writer: no output path");
    if (w->bad_alignment)
        return tela_errorf(TELA_ERR_ARG, "%s: alignment %llu is not a nonzero power of two", path,
                           (unsigned long long)(w->bad_alignment == UINT64_MAX ? 0 : w->bad_alignment));
    uint64_t align = w->alignment;
    /* The alignment is recorded in the file unless it is the default. */
    gguf_wkv *akv = find_kv(w, "general.alignment");
    if (akv) {
        uint32_t a = (uint32_t)align;
        unsigned char x[4] = {(unsigned char)a, (unsigned char)(a >> 8), (unsigned char)(a >> 16), (unsigned char)(a >> 24)};
        memcpy(akv->val.p + 4, x, 4);
    } else if (align != GGUF_WRITE_DEFAULT_ALIGNMENT) {
        TELA_TRY(tela_gguf_writer_add_u32(w, "general.alignment", (uint32_t)align));
    }

    /* data offsets, relative to the data section */
    uint64_t *offsets = NULL;
    if (w->n_tensors) {
        offsets = malloc(w->n_tensors * sizeof *offsets);
        if (!offsets) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    }
    uint64_t cur = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        uint64_t r = cur % align;
        if (r) cur += align - r;
        offsets[i] = cur;
        cur += w->tensors[i].nbytes;
    }

    char *tmp = NULL;
    FILE *f = NULL;
    tela_status s = open_temp(path, &tmp, &f);
    if (s) {
        free(offsets);
        return s;
    }
    gguf_out o = {f, 0, 0};
    gguf_buf hb = {0};
    buf_put(&hb, "GGUF", 4);
    buf_u32(&hb, GGUF_WRITE_VERSION);
    buf_u64(&hb, w->n_tensors);
    buf_u64(&hb, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        buf_str(&hb, w->kv[i].key, strlen(w->kv[i].key));
        buf_put(&hb, w->kv[i].val.p, w->kv[i].val.len);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        const gguf_wtensor *t = &w->tensors[i];
        buf_str(&hb, t->name, strlen(t->name));
        buf_u32(&hb, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) buf_u64(&hb, (uint64_t)t->ne[d]);
        buf_u32(&hb, (uint32_t)t->type);
        buf_u64(&hb, offsets[i]);
    }
    if (hb.oom) {
        s = tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    } else {
        out_put(&o, hb.p, hb.len);
        if (w->n_tensors) out_pad(&o, align);
        uint64_t data_start = o.pos;
        for (size_t i = 0; i < w->n_tensors && !o.err; i++) {
            while (o.pos - data_start < offsets[i] && !o.err) out_pad(&o, align);
            out_put(&o, w->tensors[i].data, w->tensors[i].nbytes);
        }
        /* the last tensor is padded too, so the file ends aligned */
        if (w->n_tensors) out_pad(&o, align);
    }
    free(hb.p);
    free(offsets);
    if (fflush(f) != 0 && !o.err) o.err = errno ? errno : EIO;
    if (ferror(f) && !o.err) o.err = EIO;
    if (fclose(f) != 0 && !o.err) o.err = errno ? errno : EIO;
    if (!s && o.err) s = tela_errorf(TELA_ERR_IO, "%s: write failed: %s", path, strerror(o.err));
    if (!s && rename(tmp, path) != 0)
        s = tela_errorf(TELA_ERR_IO, "%s: cannot rename the temporary file into place: %s", path, strerror(errno));
    if (s) unlink(tmp);
    free(tmp);
    return s;
}
