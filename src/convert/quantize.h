/* quantize.h: GGUF -> GGUF with smaller weight types ("tela quantize"),
 * following llama.cpp's llama-quantize: the same file types (ftypes), the
 * same per-tensor type mixture for the _S/_M/_L variants, the same fallbacks
 * for rows that are not a whole number of blocks, the same tensor order and
 * metadata, so the output matches llama-quantize's file byte for byte when
 * the quantizers do (tela's reference quantizers are ggml's, imatrix-free).
 * The convert layer sits above format/quant and below cli. */
#ifndef TELA_CONVERT_QUANTIZE_H
#define TELA_CONVERT_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "tela/tela.h"

/* llama.cpp's llama_ftype numbers: what general.file_type holds. */
typedef enum tela_ftype {
    TELA_FTYPE_ALL_F32 = 0,
    TELA_FTYPE_MOSTLY_F16 = 1,
    TELA_FTYPE_MOSTLY_Q4_0 = 2,
    TELA_FTYPE_MOSTLY_Q4_1 = 3,
    TELA_FTYPE_MOSTLY_Q8_0 = 7,
    TELA_FTYPE_MOSTLY_Q5_0 = 8,
    TELA_FTYPE_MOSTLY_Q5_1 = 9,
    TELA_FTYPE_MOSTLY_Q2_K = 10,
    TELA_FTYPE_MOSTLY_Q3_K_S = 11,
    TELA_FTYPE_MOSTLY_Q3_K_M = 12,
    TELA_FTYPE_MOSTLY_Q3_K_L = 13,
    TELA_FTYPE_MOSTLY_Q4_K_S = 14,
    TELA_FTYPE_MOSTLY_Q4_K_M = 15,
    TELA_FTYPE_MOSTLY_Q5_K_S = 16,
    TELA_FTYPE_MOSTLY_Q5_K_M = 17,
    TELA_FTYPE_MOSTLY_Q6_K = 18,
    TELA_FTYPE_MOSTLY_BF16 = 32
} tela_ftype;

/* Parses a file type the way llama-quantize names them ("Q4_K_M", "q8_0",
 * "F16"; "Q4_K" = Q4_K_M, "Q5_K" = Q5_K_M, "Q3_K" = Q3_K_M) or its number
 * ("15"). TELA_ERR_ARG with a message listing the names otherwise. */
tela_status tela_ftype_parse(const char *s, tela_ftype *out);
/* "Q4_K_M", or NULL for a file type tela cannot produce. */
const char *tela_ftype_name(tela_ftype ftype);
/* The base tensor type of a file type (Q4_K for Q4_K_M), or TELA_TYPE_COUNT. */
tela_type tela_ftype_base_type(tela_ftype ftype);

/* What happens to one tensor. */
typedef struct tela_quantize_item {
    const tela_gguf_tensor *src;  /* in the input file */
    tela_type type;               /* output type */
    int convert;                  /* 1: data is converted; 0: copied as is */
    int fallback;                 /* 1: the mixture's type (wanted) did not fit the row length */
    tela_type wanted;
    size_t nbytes;                /* output bytes */
} tela_quantize_item;

/* The plan for a whole file: items in output order (llama.cpp's: tensors
 * outside blocks first, then by block number, by name within each). */
typedef struct tela_quantize_plan {
    tela_quantize_item *items;
    size_t n_items;
    uint64_t bytes_in, bytes_out;  /* tensor data, without padding */
    uint64_t n_elements;
    int n_fallback;
    int n_requantized;             /* already-quantized tensors converted again */
} tela_quantize_plan;

/* Decides every tensor's output type for ftype (llama.cpp's
 * llama_tensor_get_type and the mixture rules). Fails, naming the tensor,
 * where llama-quantize would: a row length no fallback type fits, a source
 * type it cannot convert, an already-quantized tensor without
 * allow_requantize. Free with tela_quantize_plan_free. */
tela_status tela_quantize_make_plan(const tela_gguf *in, tela_ftype ftype, int allow_requantize,
                                    tela_quantize_plan *out);
void tela_quantize_plan_free(tela_quantize_plan *plan);

/* Called after each tensor is written to the scratch file (or skipped, when
 * copied). With measure_error, sq_err is the sum over its elements of
 * (dequantized output - source)^2 and sq_src the sum of source^2 (summed in
 * row order, so the same for any thread count); both 0 otherwise and for
 * copied tensors. */
typedef void (*tela_quantize_tensor_cb)(void *user, const tela_quantize_item *item, double sq_err, double sq_src);

typedef struct tela_quantize_params {
    tela_ftype ftype;
    int n_threads;          /* 0: all online CPUs. The output is the same for any count */
    int allow_requantize;   /* convert tensors that are already quantized (lossy) instead of failing */
    int progress;           /* a live "[ 12/147] name type" line on stderr (callers pass isatty(2)) */
    int verbose;            /* warnings (fallbacks, requantization) on stderr */
    int measure_error;      /* compute each converted tensor's squared error for on_tensor */
    tela_quantize_tensor_cb on_tensor;  /* may be NULL */
    void *user;
} tela_quantize_params;

tela_quantize_params tela_quantize_default_params(void);

typedef struct tela_quantize_stats {
    size_t n_tensors, n_converted;
    int n_fallback, n_requantized;
    uint64_t bytes_in, bytes_out;  /* tensor data */
    uint64_t n_elements;
    uint64_t file_bytes;           /* size of the written file */
    int n_threads;                 /* threads used */
    double seconds;
} tela_quantize_stats;

/* Quantizes the GGUF file in_path into out_path. Metadata is copied (split
 * keys dropped), then general.quantization_version = 2 and
 * general.file_type = ftype are set (last, as llama.cpp does). Tensors are
 * converted one at a time, rows spread over threads, into a scratch file
 * beside the output; the output is written to a temporary name and renamed,
 * so a failure (bad input, disk full) leaves no partial file. stats may be
 * NULL. */
tela_status tela_quantize_gguf(const char *in_path, const char *out_path, const tela_quantize_params *params,
                               tela_quantize_stats *stats);

#endif
