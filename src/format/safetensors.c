/* safetensors.c: Hugging Face safetensors files (an 8-byte little-endian
 * header length, a JSON header, then the raw tensor bytes) and checkpoint
 * directories (config.json plus model.safetensors, or shards listed in
 * model.safetensors.index.json). Files are mmapped and tensors point into the
 * mapping. The header is untrusted: dtypes, shapes and data offsets are all
 * checked, and every error names the file and the tensor. */
#include "format/safetensors.h"
#include "util/error.h"
#include "util/name_index.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* JSON numbers are doubles: integers above 2^53 cannot be represented exactly. */
#define ST_MAX_JSON_INT 9007199254740992.0

typedef struct st_dtype {
    const char *name;
    tela_type type;   /* TELA_ST_TYPE_UNSUPPORTED when tela has no such type */
    size_t size;
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"F64", TELA_TYPE_F64, 8},  {"F32", TELA_TYPE_F32, 4},   {"F16", TELA_TYPE_F16, 2},
    {"BF16", TELA_TYPE_BF16, 2}, {"I64", TELA_TYPE_I64, 8},  {"I32", TELA_TYPE_I32, 4},
    {"I16", TELA_TYPE_I16, 2},  {"I8", TELA_TYPE_I8, 1},
    {"U64", TELA_ST_TYPE_UNSUPPORTED, 8}, {"U32", TELA_ST_TYPE_UNSUPPORTED, 4},
    {"U16", TELA_ST_TYPE_UNSUPPORTED, 2}, {"U8", TELA_ST_TYPE_UNSUPPORTED, 1},
    {"BOOL", TELA_ST_TYPE_UNSUPPORTED, 1}, {"F8_E4M3", TELA_ST_TYPE_UNSUPPORTED, 1},
    {"F8_E5M2", TELA_ST_TYPE_UNSUPPORTED, 1},
};

struct tela_st_file {
    char *path;
    tela_mapped_file map;       /* empty when parsed from a caller's buffer */
    const unsigned char *base;  /* start of the file's bytes */
    size_t data_offset;         /* 8 + header length */
    size_t n;
    tela_tensor *tensors;       /* names are owned */
    const char **dtypes;        /* static strings from st_dtypes */
    size_t n_meta;
    char **meta_keys, **meta_values;
};

struct tela_checkpoint {
    char *dir;
    cJSON *config;
    size_t n_files;
    tela_st_file **files;
    char **file_names;
    size_t n;
    const tela_tensor **tensors;  /* into the files */
    size_t *file_of;
    const char **dtypes;
    tela_name_ref *index;         /* sorted by name (tela_name_index_*) */
};

void tela_st_close(tela_st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    free(f->tensors);
    free(f->dtypes);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->meta_keys);
    free(f->meta_values);
    tela_unmap_file(&f->map);
    free(f->path);
    free(f);
}

/* A JSON number that is an exact non-negative integer (shape entries and
 * offsets). */
static int st_json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0.0 && d <= ST_MAX_JSON_INT) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* Reads one tensor entry of the header: dtype, shape (reversed into ggml
 * order) and data_offsets, checked against the data section. */
static tela_status st_read_entry(const char *path, const cJSON *e, size_t data_size, tela_tensor *t,
                                 const char **dtype_out, uint64_t *begin_out) {
    const char *name = t->name;
    if (!cJSON_IsObject(e)) return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", path, name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd)) return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    if (!cJSON_IsArray(js)) return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s': missing or non-array \"shape\"", path, name);
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" must be an array of two integers", path, name);

    const st_dtype *dt = NULL;
    for (size_t k = 0; k < sizeof st_dtypes / sizeof st_dtypes[0]; k++)
        if (strcmp(jd->valuestring, st_dtypes[k].name) == 0) dt = &st_dtypes[k];
    if (!dt)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype \"%.32s\", which tela does not know", path,
                           name, jd->valuestring);
    t->type = dt->type;
    *dtype_out = dt->name;

    int n_dims = cJSON_GetArraySize(js);
    if (n_dims > TELA_MAX_DIMS)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dimensions; tela supports at most %d", path, name,
                           n_dims, TELA_MAX_DIMS);
    t->n_dims = n_dims;
    for (int d = 0; d < TELA_MAX_DIMS; d++) t->ne[d] = 1;
    int d = 0;
    for (const cJSON *x = js->child; x; x = x->next, d++) {
        uint64_t v;
        if (!st_json_uint(x, &v))
            return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s': shape entry %d is not a non-negative integer", path,
                               name, d);
        t->ne[n_dims - 1 - d] = (int64_t)v;
    }
    /* in ggml order, as tela_tensor_nelements() multiplies: no partial
     * product may overflow either (a later zero does not excuse it) */
    int64_t nel = 1;
    for (d = 0; d < TELA_MAX_DIMS; d++)
        if (__builtin_mul_overflow(nel, t->ne[d], &nel))
            return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s': element count overflows", path, name);
    uint64_t begin, end;
    if (!st_json_uint(jo->child, &begin) || !st_json_uint(jo->child->next, &end))
        return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers", path, name);
    if (begin > end || end > data_size)
        return tela_errorf(TELA_ERR_FORMAT,
                           "%s: tensor '%s': data_offsets [%llu, %llu) are not within the %zu-byte data section", path,
                           name, (unsigned long long)begin, (unsigned long long)end, data_size);
    uint64_t nbytes;
    if (__builtin_mul_overflow((uint64_t)nel, (uint64_t)dt->size, &nbytes) || nbytes != end - begin)
        return tela_errorf(TELA_ERR_FORMAT,
                           "%s: tensor '%s': data_offsets [%llu, %llu) hold %llu bytes, but %s with %llu elements "
                           "needs %llu bytes",
                           path, name, (unsigned long long)begin, (unsigned long long)end,
                           (unsigned long long)(end - begin), dt->name, (unsigned long long)nel,
                           (unsigned long long)nel * dt->size);
    t->nbytes = (size_t)nbytes;
    *begin_out = begin;
    return TELA_OK;
}

/* __metadata__: a map of string to string. */
static tela_status st_read_metadata(const char *path, const cJSON *m, tela_st_file *f) {
    if (!cJSON_IsObject(m)) return tela_errorf(TELA_ERR_FORMAT, "%s: __metadata__ is not an object", path);
    size_t n = (size_t)cJSON_GetArraySize(m);
    if (n == 0) return TELA_OK;
    f->meta_keys = calloc(n, sizeof *f->meta_keys);
    f->meta_values = calloc(n, sizeof *f->meta_values);
    if (!f->meta_keys || !f->meta_values) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    for (const cJSON *x = m->child; x; x = x->next) {
        if (!cJSON_IsString(x))
            return tela_errorf(TELA_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a string", path,
                               x->string ? x->string : "");
        size_t i = f->n_meta++;
        f->meta_keys[i] = strdup(x->string ? x->string : "");
        f->meta_values[i] = strdup(x->valuestring);
        if (!f->meta_keys[i] || !f->meta_values[i]) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    }
    return TELA_OK;
}

typedef struct st_span {
    uint64_t begin, end;
    size_t index;
} st_span;

static int st_span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The header's tensors, sorted by offset, must not overlap; names must be
 * unique. (Gaps are tolerated.) */
static tela_status st_check_layout(const char *path, tela_st_file *f, const uint64_t *begins) {
    if (f->n == 0) return TELA_OK;
    st_span *sp = malloc(f->n * sizeof *sp);
    tela_name_ref *names = malloc(f->n * sizeof *names);
    tela_status s = TELA_OK;
    if (!sp || !names) {
        s = tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (size_t i = 0; i < f->n; i++) {
        sp[i] = (st_span){begins[i], begins[i] + f->tensors[i].nbytes, i};
        names[i] = (tela_name_ref){f->tensors[i].name, i};
    }
    size_t dup = tela_name_index_sort(names, f->n);
    if (dup) s = tela_errorf(TELA_ERR_FORMAT, "%s: duplicate tensor name '%s' in the header", path, names[dup].name);
    qsort(sp, f->n, sizeof *sp, st_span_cmp);
    for (size_t i = 1; i < f->n && !s; i++)
        if (sp[i].begin < sp[i - 1].end)
            s = tela_errorf(TELA_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap (data_offsets %llu..%llu and %llu..%llu)",
                            path, f->tensors[sp[i - 1].index].name, f->tensors[sp[i].index].name,
                            (unsigned long long)sp[i - 1].begin, (unsigned long long)sp[i - 1].end,
                            (unsigned long long)sp[i].begin, (unsigned long long)sp[i].end);
done:
    free(sp);
    free(names);
    return s;
}

static tela_status st_parse_header(const unsigned char *data, size_t size, tela_st_file *f) {
    const char *path = f->path;
    if (size < 8)
        return tela_errorf(TELA_ERR_FORMAT, "%s: not a safetensors file: %zu bytes, shorter than the 8-byte header length",
                           path, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | data[i];
    if (hlen > size - 8)
        return tela_errorf(TELA_ERR_FORMAT,
                           "%s: header length %llu (at byte offset 0) is larger than the %zu bytes that follow",
                           path, (unsigned long long)hlen, size - 8);
    if (hlen < 2 || data[8] != '{')
        return tela_errorf(TELA_ERR_FORMAT, "%s: not a safetensors file: the header at byte offset 8 is not a JSON object",
                           path);
    f->data_offset = 8 + (size_t)hlen;
    size_t data_size = size - f->data_offset;

    /* cJSON wants a NUL-terminated string */
    char *text = malloc((size_t)hlen + 1);
    if (!text) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory for a %llu-byte header", path, (unsigned long long)hlen);
    memcpy(text, data + 8, (size_t)hlen);
    text[hlen] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &end, 0);
    tela_status s = TELA_OK;
    uint64_t *begins = NULL;
    if (!root) {
        size_t at = end && end >= text && end <= text + hlen ? (size_t)(end - text) : 0;
        s = tela_errorf(TELA_ERR_FORMAT, "%s: invalid JSON in the header near byte offset %zu", path, 8 + at);
        goto done;
    }
    for (const char *p = end; p && p < text + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            s = tela_errorf(TELA_ERR_FORMAT, "%s: unexpected bytes after the JSON header at byte offset %zu", path,
                            (size_t)(8 + (p - text)));
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        s = tela_errorf(TELA_ERR_FORMAT, "%s: the header is not a JSON object", path);
        goto done;
    }
    size_t n = 0;
    for (const cJSON *x = root->child; x; x = x->next)
        if (!x->string || strcmp(x->string, "__metadata__") != 0) n++;
    if (n) {
        f->tensors = calloc(n, sizeof *f->tensors);
        f->dtypes = calloc(n, sizeof *f->dtypes);
        begins = calloc(n, sizeof *begins);
        if (!f->tensors || !f->dtypes || !begins) {
            s = tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
    }
    int seen_metadata = 0;
    for (const cJSON *x = root->child; x && !s; x = x->next) {
        if (x->string && strcmp(x->string, "__metadata__") == 0) {
            if (seen_metadata++)
                s = tela_errorf(TELA_ERR_FORMAT, "%s: __metadata__ appears twice in the header", path);
            else
                s = st_read_metadata(path, x, f);
            continue;
        }
        size_t i = f->n++;
        tela_tensor *t = &f->tensors[i];
        t->name = strdup(x->string ? x->string : "");
        if (!t->name) {
            s = tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        if (!*t->name) {
            s = tela_errorf(TELA_ERR_FORMAT, "%s: a tensor in the header has an empty name", path);
            break;
        }
        s = st_read_entry(path, x, data_size, t, &f->dtypes[i], &begins[i]);
        if (!s) t->data = data + f->data_offset + begins[i];
    }
    if (!s) s = st_check_layout(path, f, begins);
done:
    free(begins);
    cJSON_Delete(root);
    free(text);
    return s;
}

/* The format's tela_parse_fn: a tela_st_file over data (*out), keeping map. */
static tela_status st_parse(const void *data, size_t size, const char *name, const tela_mapped_file *map, void *out) {
    tela_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name))) {
        free(f);
        return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", name);
    }
    f->base = data;
    tela_status s = st_parse_header(data, size, f);
    if (!s) {
        f->map = *map;
        *(tela_st_file **)out = f;
    } else {
        tela_st_close(f);
    }
    return s;
}

tela_status tela_st_parse(const void *data, size_t size, const char *name, tela_st_file **out) {
    *out = NULL;
    return tela_parse_buffer(data, size, name, st_parse, out);
}

tela_status tela_st_open(const char *path, tela_st_file **out) {
    *out = NULL;
    return tela_parse_file(path, st_parse, out);
}

size_t tela_st_n_tensors(const tela_st_file *f) { return f->n; }
const tela_tensor *tela_st_tensor(const tela_st_file *f, size_t i) { return i < f->n ? &f->tensors[i] : NULL; }
const char *tela_st_tensor_dtype(const tela_st_file *f, size_t i) { return i < f->n ? f->dtypes[i] : NULL; }
size_t tela_st_data_offset(const tela_st_file *f) { return f->data_offset; }
size_t tela_st_n_metadata(const tela_st_file *f) { return f->n_meta; }

void tela_st_metadata(const tela_st_file *f, size_t i, const char **key, const char **value) {
    *key = i < f->n_meta ? f->meta_keys[i] : NULL;
    *value = i < f->n_meta ? f->meta_values[i] : NULL;
}

/* ---- checkpoints */

void tela_checkpoint_close(tela_checkpoint *ck) {
    if (!ck) return;
    for (size_t i = 0; i < ck->n_files; i++) {
        tela_st_close(ck->files[i]);
        free(ck->file_names[i]);
    }
    free(ck->files);
    free(ck->file_names);
    free(ck->tensors);
    free(ck->file_of);
    free(ck->dtypes);
    free(ck->index);
    cJSON_Delete(ck->config);
    free(ck->dir);
    free(ck);
}

static char *st_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int st_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Reads a whole JSON file; *out stays NULL for a missing file when optional. */
static tela_status st_read_json(const char *path, int optional, cJSON **out) {
    *out = NULL;
    if (optional && !st_exists(path)) return TELA_OK;
    char *text;
    size_t len;
    TELA_TRY(tela_read_file(path, &text, &len));
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        free(text);
        return tela_errorf(TELA_ERR_FORMAT, "%s: invalid JSON near byte offset %zu", path, at);
    }
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return tela_errorf(TELA_ERR_FORMAT, "%s: not a JSON object", path);
    }
    *out = j;
    return TELA_OK;
}

static tela_status st_add_file(tela_checkpoint *ck, const char *name) {
    char *path = st_join(ck->dir, name);
    char *copy = strdup(name);
    tela_st_file **nf = realloc(ck->files, (ck->n_files + 1) * sizeof *nf);
    if (nf) ck->files = nf;
    char **nn = realloc(ck->file_names, (ck->n_files + 1) * sizeof *nn);
    if (nn) ck->file_names = nn;
    if (!path || !copy || !nf || !nn) {
        free(path);
        free(copy);
        return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", ck->dir);
    }
    tela_st_file *f;
    tela_status s = tela_st_open(path, &f);
    free(path);
    if (s) {
        free(copy);
        return s;
    }
    ck->files[ck->n_files] = f;
    ck->file_names[ck->n_files] = copy;
    ck->n_files++;
    return TELA_OK;
}

static int st_str_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Shards named in an index's weight_map: plain file names in the checkpoint
 * directory (no paths, so an index cannot point outside it). */
static tela_status st_open_shards(tela_checkpoint *ck, const char *index_path, const cJSON *wm) {
    size_t n = (size_t)cJSON_GetArraySize(wm);
    if (n == 0) return tela_errorf(TELA_ERR_FORMAT, "%s: weight_map is empty", index_path);
    const char **names = malloc(n * sizeof *names);
    if (!names) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", index_path);
    size_t k = 0;
    tela_status s = TELA_OK;
    for (const cJSON *x = wm->child; x; x = x->next) {
        const char *shard = cJSON_IsString(x) ? x->valuestring : NULL;
        if (!shard || !*shard || strchr(shard, '/') || !strcmp(shard, ".") || !strcmp(shard, "..")) {
            s = tela_errorf(TELA_ERR_FORMAT, "%s: weight_map entry for '%s' is not a shard file name", index_path,
                            x->string ? x->string : "");
            break;
        }
        names[k++] = shard;
    }
    if (!s) {
        qsort(names, k, sizeof *names, st_str_cmp);
        for (size_t i = 0; i < k && !s; i++)
            if (i == 0 || strcmp(names[i], names[i - 1]) != 0) s = st_add_file(ck, names[i]);
    }
    free(names);
    return s;
}

/* Gathers the tensors of all files into one sorted lookup table. */
static tela_status st_build_table(tela_checkpoint *ck) {
    size_t n = 0;
    for (size_t i = 0; i < ck->n_files; i++) n += ck->files[i]->n;
    ck->n = n;
    if (n == 0) return TELA_OK;
    ck->tensors = malloc(n * sizeof *ck->tensors);
    ck->file_of = malloc(n * sizeof *ck->file_of);
    ck->dtypes = malloc(n * sizeof *ck->dtypes);
    ck->index = malloc(n * sizeof *ck->index);
    if (!ck->tensors || !ck->file_of || !ck->dtypes || !ck->index)
        return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", ck->dir);
    size_t k = 0;
    for (size_t i = 0; i < ck->n_files; i++) {
        for (size_t j = 0; j < ck->files[i]->n; j++, k++) {
            ck->tensors[k] = &ck->files[i]->tensors[j];
            ck->file_of[k] = i;
            ck->dtypes[k] = ck->files[i]->dtypes[j];
            ck->index[k] = (tela_name_ref){ck->tensors[k]->name, k};
        }
    }
    size_t dup = tela_name_index_sort(ck->index, n);
    if (dup)
        return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s' appears in both %s and %s", ck->dir, ck->index[dup].name,
                           ck->file_names[ck->file_of[ck->index[dup - 1].index]],
                           ck->file_names[ck->file_of[ck->index[dup].index]]);
    return TELA_OK;
}

/* Every tensor the index names must be in the shard it names. */
static tela_status st_check_weight_map(const tela_checkpoint *ck, const char *index_path, const cJSON *wm) {
    for (const cJSON *x = wm->child; x; x = x->next) {
        const char *name = x->string ? x->string : "";
        const tela_name_ref *ref = tela_name_index_find(ck->index, ck->n, name);
        if (!ref)
            return tela_errorf(TELA_ERR_FORMAT, "%s: tensor '%s' is listed in weight_map but is not in %s", index_path,
                               name, x->valuestring);
        const char *in = ck->file_names[ck->file_of[ref->index]];
        if (strcmp(in, x->valuestring) != 0)
            return tela_errorf(TELA_ERR_FORMAT, "%s: weight_map puts tensor '%s' in %s, but it is in %s", index_path, name,
                               x->valuestring, in);
    }
    return TELA_OK;
}

static tela_status st_open_index(tela_checkpoint *ck, const char *index_path) {
    cJSON *idx;
    TELA_TRY(st_read_json(index_path, 0, &idx));
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
    tela_status s = TELA_OK;
    if (!cJSON_IsObject(wm)) s = tela_errorf(TELA_ERR_FORMAT, "%s: no \"weight_map\" object", index_path);
    if (!s) s = st_open_shards(ck, index_path, wm);
    if (!s) s = st_build_table(ck);
    if (!s) s = st_check_weight_map(ck, index_path, wm);
    cJSON_Delete(idx);
    return s;
}

static char *st_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static int st_ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static tela_status st_checkpoint_load(tela_checkpoint *ck, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return tela_errorf(TELA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    int is_dir = S_ISDIR(st.st_mode);
    ck->dir = is_dir ? strdup(path) : st_dirname(path);
    if (!ck->dir) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    char *config = st_join(ck->dir, "config.json");
    if (!config) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    tela_status s = st_read_json(config, 1, &ck->config);
    free(config);
    TELA_TRY(s);

    if (!is_dir) {
        if (st_ends_with(path, ".json")) return st_open_index(ck, path);
        const char *base = strrchr(path, '/');
        TELA_TRY(st_add_file(ck, base ? base + 1 : path));
        return st_build_table(ck);
    }
    char *index = st_join(ck->dir, "model.safetensors.index.json");
    if (!index) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    if (st_exists(index)) {
        s = st_open_index(ck, index);
        free(index);
        return s;
    }
    free(index);
    char *single = st_join(ck->dir, "model.safetensors");
    if (!single) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    int have = st_exists(single);
    free(single);
    if (!have)
        return tela_errorf(TELA_ERR_NOT_FOUND, "%s: no model.safetensors or model.safetensors.index.json in this directory",
                           path);
    TELA_TRY(st_add_file(ck, "model.safetensors"));
    return st_build_table(ck);
}

tela_status tela_checkpoint_open(const char *path, tela_checkpoint **out) {
    *out = NULL;
    tela_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck) return tela_errorf(TELA_ERR_NOMEM, "%s: out of memory", path);
    tela_status s = st_checkpoint_load(ck, path);
    if (s) {
        tela_checkpoint_close(ck);
        return s;
    }
    *out = ck;
    return TELA_OK;
}

size_t tela_checkpoint_n_tensors(const tela_checkpoint *ck) { return ck->n; }
const tela_tensor *tela_checkpoint_tensor(const tela_checkpoint *ck, size_t i) {
    return i < ck->n ? ck->tensors[i] : NULL;
}
const char *tela_checkpoint_tensor_dtype(const tela_checkpoint *ck, size_t i) { return i < ck->n ? ck->dtypes[i] : NULL; }
const char *tela_checkpoint_tensor_shard(const tela_checkpoint *ck, size_t i) {
    return i < ck->n ? ck->file_names[ck->file_of[i]] : NULL;
}
uint64_t tela_checkpoint_tensor_offset(const tela_checkpoint *ck, size_t i) {
    if (i >= ck->n) return 0;
    return (uint64_t)((const unsigned char *)ck->tensors[i]->data - ck->files[ck->file_of[i]]->base);
}
size_t tela_checkpoint_n_files(const tela_checkpoint *ck) { return ck->n_files; }
const tela_st_file *tela_checkpoint_file(const tela_checkpoint *ck, size_t i) {
    return i < ck->n_files ? ck->files[i] : NULL;
}
const char *tela_checkpoint_file_name(const tela_checkpoint *ck, size_t i) {
    return i < ck->n_files ? ck->file_names[i] : NULL;
}
const void *tela_checkpoint_config(const tela_checkpoint *ck) { return ck->config; }
const char *tela_checkpoint_dir(const tela_checkpoint *ck) { return ck->dir; }

const tela_tensor *tela_checkpoint_find(const tela_checkpoint *ck, const char *name) {
    const tela_name_ref *ref = tela_name_index_find(ck->index, ck->n, name);
    return ref ? ck->tensors[ref->index] : NULL;
}

tela_status tela_checkpoint_get(const tela_checkpoint *ck, const char *name, const tela_tensor **out) {
    *out = NULL;
    const tela_name_ref *ref = tela_name_index_find(ck->index, ck->n, name);
    if (!ref) return tela_errorf(TELA_ERR_NOT_FOUND, "%s: tensor '%s' not found in the checkpoint", ck->dir, name ? name : "");
    const tela_tensor *t = ck->tensors[ref->index];
    if (t->type == TELA_ST_TYPE_UNSUPPORTED)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, which tela cannot use", ck->dir, name,
                           ck->dtypes[ref->index]);
    *out = t;
    return TELA_OK;
}
