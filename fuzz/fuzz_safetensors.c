/* fuzz_safetensors.c: libFuzzer harness for the safetensors reader. Parses
 * the input with tela_st_parse and, when that succeeds, reads every tensor's
 * bytes and every __metadata__ entry, so that any offset the parser let
 * through is dereferenced under ASan. An input that starts with '{' is also
 * parsed as a bare JSON header (given its length prefix and a data section
 * here), so mutations of the JSON need not keep the length field right. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/safetensors.h"

static volatile unsigned sink;

#define DATA_SECTION 512

static void check(const uint8_t *data, size_t size) {
    tela_st_file *f = NULL;
    if (tela_st_parse(data, size, "fuzz.safetensors", &f) != TELA_OK) {
        if (f) abort();
        return;
    }
    size_t start = tela_st_data_offset(f);
    if (start > size) abort();
    for (size_t i = 0; i < tela_st_n_tensors(f); i++) {
        const tela_tensor *t = tela_st_tensor(f, i);
        const unsigned char *d = t->data;
        if (d < data + start || t->nbytes > size || (size_t)(d - data) > size - t->nbytes) abort();
        unsigned s = 0;
        for (size_t k = 0; k < t->nbytes; k++) s += d[k];
        sink += s + (unsigned)strlen(t->name) + (unsigned)strlen(tela_st_tensor_dtype(f, i));
        for (int k = 0; k < TELA_MAX_DIMS; k++)
            if (t->ne[k] < 0) abort();
        sink += (unsigned)tela_tensor_nelements(t);
    }
    for (size_t i = 0; i < tela_st_n_metadata(f); i++) {
        const char *k, *v;
        tela_st_metadata(f, i, &k, &v);
        sink += (unsigned)(strlen(k) + strlen(v));
    }
    tela_st_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check(data, size);
    if (size > 0 && data[0] == '{') {
        size_t n = 8 + size + DATA_SECTION;
        uint8_t *buf = malloc(n);
        if (!buf) return 0;
        for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)size >> (8 * i));
        memcpy(buf + 8, data, size);
        for (size_t i = 0; i < DATA_SECTION; i++) buf[8 + size + i] = (uint8_t)i;
        check(buf, n);
        free(buf);
    }
    return 0;
}
