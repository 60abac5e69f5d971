/* fuzz_gguf.c: libFuzzer harness for the GGUF reader. Parses the input with
 * tela_gguf_parse and, when that succeeds, walks every key/value (strings,
 * arrays, nested arrays) and every tensor's data, so that any pointer or
 * length the parser let through is dereferenced under ASan. Also runs the
 * typed getters on every key and copies every key/value into a writer. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "quant/quant.h"

static volatile unsigned sink;

static void touch(const void *p, uint64_t n) {
    const unsigned char *q = p;
    unsigned s = 0;
    for (uint64_t i = 0; i < n; i++) s += q[i];
    sink += s;
}

static size_t elem_size(tela_gguf_vtype t) {
    switch (t) {
    case TELA_GGUF_UINT8: case TELA_GGUF_INT8: case TELA_GGUF_BOOL: return 1;
    case TELA_GGUF_UINT16: case TELA_GGUF_INT16: return 2;
    case TELA_GGUF_UINT32: case TELA_GGUF_INT32: case TELA_GGUF_FLOAT32: return 4;
    case TELA_GGUF_UINT64: case TELA_GGUF_INT64: case TELA_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static void walk(const tela_gguf_value *v, int depth) {
    if (depth > 8) abort(); /* the parser promises a depth limit */
    if (v->type == TELA_GGUF_STRING) {
        touch(v->v.str.ptr, v->v.str.len);
    } else if (v->type == TELA_GGUF_ARRAY) {
        size_t es = elem_size(v->v.arr.elem_type);
        if (es) {
            touch(v->v.arr.raw, v->v.arr.n * es);
            for (uint64_t i = 0; i < v->v.arr.n && i < 4; i++)
                sink += (unsigned)tela_gguf_arr_i64(v, i) + (tela_gguf_arr_f64(v, i) > 0.0);
        } else if (v->v.arr.elem_type == TELA_GGUF_STRING) {
            for (uint64_t i = 0; i < v->v.arr.n; i++) touch(v->v.arr.strs[i].ptr, v->v.arr.strs[i].len);
        } else if (v->v.arr.elem_type == TELA_GGUF_ARRAY) {
            for (uint64_t i = 0; i < v->v.arr.n; i++) walk(&v->v.arr.items[i], depth + 1);
        } else {
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tela_gguf *g = NULL;
    if (tela_gguf_parse(data, size, "fuzz.gguf", &g) != TELA_OK) {
        if (g) abort();
        return 0;
    }
    tela_gguf_writer *w = tela_gguf_writer_create();
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const tela_gguf_kv *kv = &g->kv[i];
        walk(&kv->value, 0);
        if (tela_gguf_find(g, kv->key) != kv) abort();
        int64_t i64;
        uint32_t u32;
        float f;
        bool b;
        tela_gguf_str s;
        const tela_gguf_value *a;
        if (tela_gguf_get_i64(g, kv->key, &i64) == TELA_OK) sink += (unsigned)i64;
        if (tela_gguf_get_u32(g, kv->key, &u32) == TELA_OK) sink += u32;
        if (tela_gguf_get_f32(g, kv->key, &f) == TELA_OK) sink += (unsigned)(f == f);
        if (tela_gguf_get_bool(g, kv->key, &b) == TELA_OK) sink += b;
        if (tela_gguf_get_str(g, kv->key, &s) == TELA_OK) touch(s.ptr, s.len);
        if (tela_gguf_get_arr(g, kv->key, &a) == TELA_OK) sink += (unsigned)a->v.arr.n;
        if (w && strcmp(kv->key, "general.alignment") != 0) tela_gguf_writer_copy_kv(w, kv);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const tela_gguf_tensor *t = &g->tensors[i];
        const unsigned char *d = t->t.data;
        if (d < data + g->data_offset || t->t.nbytes > size || (size_t)(d - data) > size - t->t.nbytes) abort();
        if (t->t.nbytes) sink += d[0] + d[t->t.nbytes - 1];
        size_t want;
        if (tela_type_tensor_bytes(t->t.type, t->t.ne, t->t.n_dims, &want) != TELA_OK || want != t->t.nbytes) abort();
        sink += (unsigned)tela_tensor_nelements(&t->t);
        if (tela_gguf_find_tensor(g, t->t.name) != t) abort();
    }
    tela_gguf_writer_free(w);
    tela_gguf_close(g);
    return 0;
}
