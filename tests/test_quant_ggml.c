/* test_quant_ggml.c: tela's reference quantizers and dequantizers against
 * peer test vectors made by ggml's own (tests/fixtures/quant/ggml_ref.bin,
 * written by gen_ggml_ref.c there from llama.cpp's ggml, Aug 2026).
 * Quantized bytes and dequantized floats must be bit-identical: that is what
 * lets tela's quantize tool produce the same files as llama-quantize. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "test.h"

static int read_u32(FILE *f, uint32_t *v) { return fread(v, 4, 1, f) == 1; }

int main(void) {
    char path[4096];
    if (!test_path(path, sizeof path, "TELA_SOURCE_DIR", "tests/fixtures/quant/ggml_ref.bin")) test_skip("TELA_SOURCE_DIR not set");
    FILE *f = fopen(path, "rb");
    if (!f) test_skip("fixture ggml_ref.bin missing");

    char magic[8];
    uint32_t n = 0;
    CHECK(fread(magic, 1, 8, f) == 8 && memcmp(magic, "TQGGML1", 8) == 0);
    CHECK(read_u32(f, &n) && n > 0 && n % 256 == 0);
    float *x = malloc(n * sizeof(float));
    CHECK(fread(x, sizeof(float), n, f) == n);

    int n_quant = 0, n_dequant = 0;
    uint32_t kind, type, nbytes;
    while (read_u32(f, &kind)) {
        CHECK(read_u32(f, &type) && read_u32(f, &nbytes) && nbytes < (1u << 20));
        const char *name = tela_type_name((tela_type)type);
        CHECK_MSG(name != NULL, "type id %u", type);
        uint8_t *want = malloc(nbytes);
        CHECK(fread(want, 1, nbytes, f) == nbytes);
        if (kind == 1) {
            /* ggml quantized all n inputs: same bytes from tela? */
            CHECK_EQ_INT(tela_type_row_bytes((tela_type)type, n), nbytes);
            uint8_t *got = calloc(1, nbytes);
            CHECK_OK(tela_quantize_row((tela_type)type, x, got, n));
            size_t bad = 0, first = nbytes;
            for (size_t i = 0; i < nbytes; i++)
                if (got[i] != want[i]) { bad++; if (first == nbytes) first = i; }
            size_t bb = tela_type_get_traits((tela_type)type)->block_bytes;
            CHECK_MSG(bad == 0, "quantize %s: %zu of %u bytes differ from ggml, first at byte %zu (block %zu, offset %zu): "
                      "%02x vs ggml %02x", name, bad, nbytes, first, first / bb, first % bb,
                      first < nbytes ? got[first] : 0, first < nbytes ? want[first] : 0);
            free(got);
            n_quant++;
        } else if (kind == 2) {
            uint32_t m = 0;
            CHECK(read_u32(f, &m) && m < (1u << 20));
            float *ref = malloc(m * sizeof(float)), *got = malloc(m * sizeof(float));
            CHECK(fread(ref, sizeof(float), m, f) == m);
            CHECK_EQ_INT(tela_type_row_bytes((tela_type)type, m), nbytes);
            CHECK_OK(tela_dequantize_row((tela_type)type, want, got, m));
            uint32_t bad = 0, first = m;
            for (uint32_t i = 0; i < m; i++)
                if (memcmp(&got[i], &ref[i], sizeof(float)) != 0) { bad++; if (first == m) first = i; }
            CHECK_MSG(bad == 0, "dequantize %s: %u of %u values differ from ggml, first at %u: %.9g vs ggml %.9g", name,
                      bad, m, first, first < m ? got[first] : 0.0, first < m ? ref[first] : 0.0);
            free(ref);
            free(got);
            n_dequant++;
        } else {
            CHECK_MSG(0, "unknown record kind %u", kind);
            free(want);
            break;
        }
        free(want);
    }
    /* Every quantizable block type and every dequantizable one with a ggml
     * reference dequantizer is in the file. */
    CHECK_EQ_INT(n_quant, 12);
    CHECK_EQ_INT(n_dequant, 13);
    fclose(f);
    free(x);
    return test_finish();
}
