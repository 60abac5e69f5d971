/* cmd_inspect.c: 'tela inspect', which prints what a model file holds: for a
 * GGUF file its version, alignment, metadata (long arrays and strings
 * summarized) and tensor table; for a Hugging Face checkpoint (directory,
 * index or .safetensors file) a config.json summary and the tensors of every
 * shard. --json prints the same as one JSON document. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "tela/tela.h"

#define INSPECT_STR_MAX 60     /* bytes of a string shown before "..." */
#define INSPECT_ARR_TEXT 3     /* array elements shown in text output */
#define INSPECT_ARR_JSON 16    /* array elements in JSON output */

typedef struct inspect_opts {
    int json;
    int no_tensors;
    int full;
} inspect_opts;

static void inspect_usage(FILE *f) {
    fprintf(f, "usage: tela inspect FILE|DIR [--json] [--no-tensors] [--full]\n\n"
               "Prints the metadata and tensors of a GGUF file, a .safetensors file or a\n"
               "Hugging Face checkpoint directory (config.json + model.safetensors or\n"
               "model.safetensors.index.json and its shards).\n\n"
               "options:\n"
               "  --json        print one JSON document instead of text\n"
               "  --no-tensors  leave out the tensor table (totals are still printed)\n"
               "  --full        print long strings and arrays completely\n"
               "  -h, --help    show this help\n");
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* Prints a string in double quotes with C-style escapes for control bytes and
 * invalid UTF-8, cut after max bytes (0 = no limit). */
static void print_quoted(FILE *f, const char *s, uint64_t len, size_t max) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = (size_t)len, shown = n;
    if (max && n > max) shown = max;
    fputc('"', f);
    size_t i = 0;
    while (i < shown) {
        unsigned c = p[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c), i++;
        else if (c == '\n') fputs("\\n", f), i++;
        else if (c == '\t') fputs("\\t", f), i++;
        else if (c == '\r') fputs("\\r", f), i++;
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c), i++;
        else {
            size_t k = utf8_len(p + i, n - i);
            if (k == 0) fprintf(f, "\\x%02x", c), i++;
            else fwrite(p + i, 1, k, f), i += k;
        }
    }
    fputc('"', f);
    if (shown < n) fprintf(f, "... (%zu bytes)", n);
}

/* A copy that is valid UTF-8 without NUL bytes (bad bytes become U+FFFD),
 * so the JSON output always parses. */
static char *utf8_clean(const char *s, uint64_t len) {
    size_t n = (size_t)len;
    char *out = malloc(n * 3 + 1);
    if (!out) return NULL;
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = p[i] ? utf8_len(p + i, n - i) : 0;
        if (k == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, p + i, k);
            o += k;
            i += k;
        }
    }
    out[o] = '\0';
    return out;
}

static cJSON *json_str(const char *s, uint64_t len) {
    char *c = utf8_clean(s, len);
    cJSON *j = cJSON_CreateString(c ? c : "");
    free(c);
    return j;
}

/* Integers are written as raw JSON numbers so 64-bit values stay exact. */
static cJSON *json_u64(uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return cJSON_CreateRaw(buf);
}

static cJSON *json_i64(int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return cJSON_CreateRaw(buf);
}

/* Sums that cannot overflow: a hostile file may declare many overlapping
 * tensors, so totals saturate instead of wrapping. */
static void add_sat(uint64_t *sum, uint64_t v) {
    if (__builtin_add_overflow(*sum, v, sum)) *sum = UINT64_MAX;
}

/* Prints a key or tensor name padded to width, with control bytes shown as
 * '?' so a file cannot send escape sequences to the terminal. */
static void print_name(const char *s, int width) {
    int n = 0;
    for (; s[n]; n++) putchar((unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n]);
    for (; n < width; n++) putchar(' ');
}

/* ---- GGUF */

static size_t scalar_bytes(tela_gguf_vtype t) {
    switch (t) {
    case TELA_GGUF_UINT8: case TELA_GGUF_INT8: case TELA_GGUF_BOOL: return 1;
    case TELA_GGUF_UINT16: case TELA_GGUF_INT16: return 2;
    case TELA_GGUF_UINT32: case TELA_GGUF_INT32: case TELA_GGUF_FLOAT32: return 4;
    case TELA_GGUF_UINT64: case TELA_GGUF_INT64: case TELA_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static int vtype_is_signed(tela_gguf_vtype t) {
    return t == TELA_GGUF_INT8 || t == TELA_GGUF_INT16 || t == TELA_GGUF_INT32 || t == TELA_GGUF_INT64;
}

static void print_scalar(FILE *f, const tela_gguf_value *v) {
    if (v->type == TELA_GGUF_BOOL) fputs(v->v.u64 ? "true" : "false", f);
    else if (v->type == TELA_GGUF_FLOAT32) fprintf(f, "%.9g", v->v.f64);
    else if (v->type == TELA_GGUF_FLOAT64) fprintf(f, "%.17g", v->v.f64);
    else if (vtype_is_signed(v->type)) fprintf(f, "%" PRId64, v->v.i64);
    else fprintf(f, "%" PRIu64, v->v.u64);
}

/* Element i of a numeric array as a value of its element type. */
static tela_gguf_value arr_elem(const tela_gguf_value *a, uint64_t i) {
    tela_gguf_value e = {.type = a->v.arr.elem_type};
    if (e.type == TELA_GGUF_FLOAT32 || e.type == TELA_GGUF_FLOAT64) e.v.f64 = tela_gguf_arr_f64(a, i);
    else if (vtype_is_signed(e.type)) e.v.i64 = tela_gguf_arr_i64(a, i);
    else e.v.u64 = (uint64_t)tela_gguf_arr_i64(a, i);
    return e;
}

static void print_value(FILE *f, const tela_gguf_value *v, const inspect_opts *o) {
    if (scalar_bytes(v->type)) {
        print_scalar(f, v);
        return;
    }
    if (v->type == TELA_GGUF_STRING) {
        print_quoted(f, v->v.str.ptr, v->v.str.len, o->full ? 0 : INSPECT_STR_MAX);
        return;
    }
    uint64_t n = v->v.arr.n;
    tela_gguf_vtype et = v->v.arr.elem_type;
    uint64_t shown = o->full || n <= 2 * INSPECT_ARR_TEXT ? n : INSPECT_ARR_TEXT;
    if (et == TELA_GGUF_STRING || et == TELA_GGUF_ARRAY)
        fprintf(f, "[%" PRIu64 " %s%s", n, tela_gguf_vtype_name(et), n == 1 ? "" : "s");
    else
        fprintf(f, "[%" PRIu64 " %s", n, tela_gguf_vtype_name(et));
    if (n) fputs(": ", f);
    for (uint64_t i = 0; i < shown; i++) {
        if (i) fputs(", ", f);
        if (et == TELA_GGUF_STRING) {
            print_quoted(f, v->v.arr.strs[i].ptr, v->v.arr.strs[i].len, o->full ? 0 : INSPECT_STR_MAX);
        } else if (et == TELA_GGUF_ARRAY) {
            print_value(f, &v->v.arr.items[i], o);
        } else {
            tela_gguf_value e = arr_elem(v, i);
            print_scalar(f, &e);
        }
    }
    fputs(shown < n ? ", ... ]" : "]", f);
}

static cJSON *json_value(const tela_gguf_value *v, const inspect_opts *o);

static cJSON *json_scalar(const tela_gguf_value *v) {
    if (v->type == TELA_GGUF_BOOL) return cJSON_CreateBool(v->v.u64 != 0);
    if (v->type == TELA_GGUF_FLOAT32 || v->type == TELA_GGUF_FLOAT64) return cJSON_CreateNumber(v->v.f64);
    if (vtype_is_signed(v->type)) return json_i64(v->v.i64);
    return json_u64(v->v.u64);
}

/* The bare value: scalars and strings as JSON values, arrays as JSON arrays
 * (cut to INSPECT_ARR_JSON elements unless --full). */
static cJSON *json_value(const tela_gguf_value *v, const inspect_opts *o) {
    if (scalar_bytes(v->type)) return json_scalar(v);
    if (v->type == TELA_GGUF_STRING) return json_str(v->v.str.ptr, v->v.str.len);
    cJSON *a = cJSON_CreateArray();
    uint64_t n = v->v.arr.n, shown = o->full || n <= INSPECT_ARR_JSON ? n : INSPECT_ARR_JSON;
    for (uint64_t i = 0; i < shown; i++) {
        cJSON *e;
        if (v->v.arr.elem_type == TELA_GGUF_STRING) e = json_str(v->v.arr.strs[i].ptr, v->v.arr.strs[i].len);
        else if (v->v.arr.elem_type == TELA_GGUF_ARRAY) e = json_value(&v->v.arr.items[i], o);
        else {
            tela_gguf_value x = arr_elem(v, i);
            e = json_scalar(&x);
        }
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

static void print_shape(FILE *f, const int64_t *ne, int n, int reverse) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", ne[reverse ? n - 1 - i : i]);
    fputc(']', f);
}

static int shape_width(const int64_t *ne, int n) {
    char buf[128];
    int w = 2;
    for (int i = 0; i < n; i++) w += snprintf(buf, sizeof buf, "%s%" PRId64, i ? ", " : "", ne[i]);
    return w;
}

static int inspect_gguf(const char *path, const inspect_opts *o) {
    tela_gguf *g;
    if (tela_gguf_open(path, &g) != TELA_OK) {
        fprintf(stderr, "tela inspect: %s\n", tela_last_error());
        return 1;
    }
    uint64_t n_params = 0, n_bytes = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        add_sat(&n_params, (uint64_t)tela_tensor_nelements(&g->tensors[i].t));
        add_sat(&n_bytes, g->tensors[i].t.nbytes);
    }
    if (o->json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "path", path);
        cJSON_AddStringToObject(root, "format", "gguf");
        cJSON_AddItemToObject(root, "version", json_u64(g->version));
        cJSON_AddItemToObject(root, "file_size", json_u64(g->size));
        cJSON_AddItemToObject(root, "alignment", json_u64(g->alignment));
        cJSON_AddItemToObject(root, "data_offset", json_u64(g->data_offset));
        cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const tela_gguf_value *v = &g->kv[i].value;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "type", tela_gguf_vtype_name(v->type));
            if (v->type == TELA_GGUF_ARRAY) {
                cJSON_AddStringToObject(e, "elem_type", tela_gguf_vtype_name(v->v.arr.elem_type));
                cJSON_AddItemToObject(e, "n", json_u64(v->v.arr.n));
                if (!o->full && v->v.arr.n > INSPECT_ARR_JSON) cJSON_AddTrueToObject(e, "truncated");
            }
            cJSON_AddItemToObject(e, "value", json_value(v, o));
            char *key = utf8_clean(g->kv[i].key, strlen(g->kv[i].key));
            cJSON_AddItemToObject(meta, key ? key : "", e);
            free(key);
        }
        if (!o->no_tensors) {
            cJSON *ts = cJSON_AddArrayToObject(root, "tensors");
            for (uint64_t i = 0; i < g->n_tensors; i++) {
                const tela_tensor *t = &g->tensors[i].t;
                cJSON *e = cJSON_CreateObject();
                cJSON_AddItemToObject(e, "name", json_str(t->name, strlen(t->name)));
                const char *tn = tela_type_name(t->type);
                cJSON_AddStringToObject(e, "type", tn ? tn : "?");
                cJSON *ne = cJSON_AddArrayToObject(e, "ne");
                for (int d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(ne, json_i64(t->ne[d]));
                cJSON_AddItemToObject(e, "offset", json_u64(g->data_offset + g->tensors[i].offset));
                cJSON_AddItemToObject(e, "bytes", json_u64(t->nbytes));
                cJSON_AddItemToArray(ts, e);
            }
        }
        cJSON_AddItemToObject(root, "n_tensors", json_u64(g->n_tensors));
        cJSON_AddItemToObject(root, "n_params", json_u64(n_params));
        cJSON_AddItemToObject(root, "n_bytes", json_u64(n_bytes));
        char *text = cJSON_Print(root);
        if (text) printf("%s\n", text);
        free(text);
        cJSON_Delete(root);
        tela_gguf_close(g);
        return text ? 0 : 1;
    }

    printf("file:        %s\n", path);
    printf("format:      GGUF version %u\n", g->version);
    printf("file size:   %zu bytes\n", g->size);
    printf("alignment:   %" PRIu64 "\n", g->alignment);
    printf("data offset: %" PRIu64 "\n", g->data_offset);
    printf("\nmetadata: %" PRIu64 " keys\n", g->n_kv);
    int kw = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        int l = (int)strlen(g->kv[i].key);
        if (l > kw) kw = l;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const tela_gguf_value *v = &g->kv[i].value;
        fputs("  ", stdout);
        print_name(g->kv[i].key, kw);
        printf("  %-8s = ", tela_gguf_vtype_name(v->type));
        print_value(stdout, v, o);
        putchar('\n');
    }
    if (!o->no_tensors) {
        printf("\ntensors: %" PRIu64 "\n", g->n_tensors);
        int nw = 4, sw = 5;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const tela_tensor *t = &g->tensors[i].t;
            int l = (int)strlen(t->name);
            if (l > nw) nw = l;
            l = shape_width(t->ne, t->n_dims);
            if (l > sw) sw = l;
        }
        printf("  %-*s  %-7s  %-*s  %12s  %12s\n", nw, "name", "type", sw, "shape", "offset", "bytes");
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const tela_tensor *t = &g->tensors[i].t;
            const char *tn = tela_type_name(t->type);
            fputs("  ", stdout);
            print_name(t->name, nw);
            printf("  %-7s  ", tn ? tn : "?");
            print_shape(stdout, t->ne, t->n_dims, 0);
            printf("%*s  %12" PRIu64 "  %12zu\n", sw - shape_width(t->ne, t->n_dims), "",
                   g->data_offset + g->tensors[i].offset, t->nbytes);
        }
    }
    printf("\ntotals: %" PRIu64 " tensors, %" PRIu64 " parameters, %" PRIu64 " bytes\n", g->n_tensors, n_params,
           n_bytes);
    tela_gguf_close(g);
    return 0;
}

/* ---- safetensors checkpoints */

static int inspect_checkpoint(const char *path, const inspect_opts *o) {
    tela_checkpoint *ck;
    if (tela_checkpoint_open(path, &ck) != TELA_OK) {
        fprintf(stderr, "tela inspect: %s\n", tela_last_error());
        return 1;
    }
    size_t n = tela_checkpoint_n_tensors(ck), nf = tela_checkpoint_n_files(ck);
    uint64_t n_params = 0, n_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const tela_tensor *t = tela_checkpoint_tensor(ck, i);
        add_sat(&n_params, (uint64_t)tela_tensor_nelements(t));
        add_sat(&n_bytes, t->nbytes);
    }
    const cJSON *config = tela_checkpoint_config(ck);
    if (o->json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "path", path);
        cJSON_AddStringToObject(root, "format", "safetensors");
        cJSON_AddStringToObject(root, "directory", tela_checkpoint_dir(ck));
        cJSON_AddItemToObject(root, "config", config ? cJSON_Duplicate(config, 1) : cJSON_CreateNull());
        cJSON *files = cJSON_AddArrayToObject(root, "files");
        for (size_t i = 0; i < nf; i++) {
            const tela_st_file *f = tela_checkpoint_file(ck, i);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", tela_checkpoint_file_name(ck, i));
            cJSON_AddItemToObject(e, "n_tensors", json_u64(tela_st_n_tensors(f)));
            cJSON_AddItemToObject(e, "data_offset", json_u64(tela_st_data_offset(f)));
            cJSON *m = cJSON_AddObjectToObject(e, "metadata");
            for (size_t k = 0; k < tela_st_n_metadata(f); k++) {
                const char *key, *val;
                tela_st_metadata(f, k, &key, &val);
                cJSON_AddStringToObject(m, key, val);
            }
            cJSON_AddItemToArray(files, e);
        }
        if (!o->no_tensors) {
            cJSON *ts = cJSON_AddArrayToObject(root, "tensors");
            for (size_t i = 0; i < n; i++) {
                const tela_tensor *t = tela_checkpoint_tensor(ck, i);
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "name", t->name);
                cJSON_AddStringToObject(e, "dtype", tela_checkpoint_tensor_dtype(ck, i));
                cJSON *shape = cJSON_AddArrayToObject(e, "shape");
                for (int d = t->n_dims - 1; d >= 0; d--) cJSON_AddItemToArray(shape, json_i64(t->ne[d]));
                cJSON *ne = cJSON_AddArrayToObject(e, "ne");
                for (int d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(ne, json_i64(t->ne[d]));
                cJSON_AddStringToObject(e, "shard", tela_checkpoint_tensor_shard(ck, i));
                cJSON_AddItemToObject(e, "offset", json_u64(tela_checkpoint_tensor_offset(ck, i)));
                cJSON_AddItemToObject(e, "bytes", json_u64(t->nbytes));
                cJSON_AddItemToArray(ts, e);
            }
        }
        cJSON_AddItemToObject(root, "n_tensors", json_u64(n));
        cJSON_AddItemToObject(root, "n_params", json_u64(n_params));
        cJSON_AddItemToObject(root, "n_bytes", json_u64(n_bytes));
        char *text = cJSON_Print(root);
        if (text) printf("%s\n", text);
        free(text);
        cJSON_Delete(root);
        tela_checkpoint_close(ck);
        return text ? 0 : 1;
    }

    printf("path:        %s\n", path);
    printf("format:      safetensors checkpoint, %zu file%s\n", nf, nf == 1 ? "" : "s");
    printf("directory:   %s\n", tela_checkpoint_dir(ck));
    if (config) {
        printf("\nconfig.json:\n");
        int kw = 0;
        for (const cJSON *x = config->child; x; x = x->next)
            if (x->string && (int)strlen(x->string) > kw) kw = (int)strlen(x->string);
        for (const cJSON *x = config->child; x; x = x->next) {
            char *v = cJSON_PrintUnformatted(x);
            fputs("  ", stdout);
            print_name(x->string ? x->string : "", kw);
            fputs("  ", stdout);
            if (v) {
                size_t len = strlen(v);
                if (!o->full && len > INSPECT_STR_MAX) printf("%.*s...", INSPECT_STR_MAX, v);
                else fputs(v, stdout);
            }
            putchar('\n');
            free(v);
        }
    } else {
        printf("\nconfig.json: none\n");
    }
    printf("\nfiles:\n");
    for (size_t i = 0; i < nf; i++) {
        const tela_st_file *f = tela_checkpoint_file(ck, i);
        printf("  %s: %zu tensors, data at byte offset %zu", tela_checkpoint_file_name(ck, i), tela_st_n_tensors(f),
               tela_st_data_offset(f));
        for (size_t k = 0; k < tela_st_n_metadata(f); k++) {
            const char *key, *val;
            tela_st_metadata(f, k, &key, &val);
            printf("%s%s=", k ? ", " : "; metadata: ", key);
            print_quoted(stdout, val, strlen(val), o->full ? 0 : INSPECT_STR_MAX);
        }
        putchar('\n');
    }
    if (!o->no_tensors) {
        printf("\ntensors: %zu (shape as stored: outermost dimension first)\n", n);
        int nw = 4, sw = 5, fw = 5;
        for (size_t i = 0; i < n; i++) {
            const tela_tensor *t = tela_checkpoint_tensor(ck, i);
            int l = (int)strlen(t->name);
            if (l > nw) nw = l;
            l = shape_width(t->ne, t->n_dims);
            if (l > sw) sw = l;
            l = (int)strlen(tela_checkpoint_tensor_shard(ck, i));
            if (l > fw) fw = l;
        }
        printf("  %-*s  %-7s  %-*s  %-*s  %12s\n", nw, "name", "dtype", sw, "shape", fw, "shard", "bytes");
        for (size_t i = 0; i < n; i++) {
            const tela_tensor *t = tela_checkpoint_tensor(ck, i);
            fputs("  ", stdout);
            print_name(t->name, nw);
            printf("  %-7s  ", tela_checkpoint_tensor_dtype(ck, i));
            print_shape(stdout, t->ne, t->n_dims, 1);
            printf("%*s  %-*s  %12zu\n", sw - shape_width(t->ne, t->n_dims), "", fw, tela_checkpoint_tensor_shard(ck, i),
                   t->nbytes);
        }
    }
    printf("\ntotals: %zu tensors, %" PRIu64 " parameters, %" PRIu64 " bytes\n", n, n_params, n_bytes);
    tela_checkpoint_close(ck);
    return 0;
}

/* GGUF files are recognized by their magic or a .gguf name (so a damaged
 * one gets the GGUF reader's message); anything else is tried as a
 * safetensors file, index or checkpoint directory. */
static int is_gguf(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    size_t len = strlen(path);
    if (len >= 5 && strcmp(path + len - 5, ".gguf") == 0) return 1;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char magic[4];
    int yes = fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    fclose(f);
    return yes;
}

int tela_cmd_inspect(int argc, char **argv) {
    inspect_opts o = {0};
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            inspect_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            o.json = 1;
        } else if (!strcmp(a, "--no-tensors")) {
            o.no_tensors = 1;
        } else if (!strcmp(a, "--full")) {
            o.full = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tela inspect: unknown option '%s'\n", a);
            inspect_usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "tela inspect: more than one path given ('%s' and '%s')\n", path, a);
            return 2;
        } else {
            path = a;
        }
    }
    if (!path) {
        fprintf(stderr, "tela inspect: no file or directory given\n");
        inspect_usage(stderr);
        return 2;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "tela inspect: %s: cannot open: %s\n", path, strerror(errno));
        return 1;
    }
    return is_gguf(path) ? inspect_gguf(path, &o) : inspect_checkpoint(path, &o);
}
