/* quant.h: the tensor element types of GGUF files (ggml block layouts), their
 * sizes, and the reference (scalar, exact) dequantization and quantization.
 * Fast SIMD kernels live in the compute backends; these are their oracle. */
#ifndef TELA_QUANT_QUANT_H
#define TELA_QUANT_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tela/tela.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TELA_QK4_0 32
#define TELA_QK4_1 32
#define TELA_QK5_0 32
#define TELA_QK5_1 32
#define TELA_QK8_0 32
#define TELA_QK8_1 32
#define TELA_QK_K 256
#define TELA_K_SCALE_SIZE 12
#define TELA_QK4_NL 32

/* Block structs, byte-for-byte as ggml stores them (fp16 fields as uint16_t). */
typedef struct { uint16_t d; uint8_t qs[TELA_QK4_0 / 2]; } tela_block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[TELA_QK4_1 / 2]; } tela_block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[TELA_QK5_0 / 2]; } tela_block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[TELA_QK5_1 / 2]; } tela_block_q5_1;
typedef struct { uint16_t d; int8_t qs[TELA_QK8_0]; } tela_block_q8_0;
typedef struct { uint16_t d, s; int8_t qs[TELA_QK8_1]; } tela_block_q8_1;
typedef struct { uint8_t scales[TELA_QK_K / 16]; uint8_t qs[TELA_QK_K / 4]; uint16_t d, dmin; } tela_block_q2_K;
typedef struct { uint8_t hmask[TELA_QK_K / 8]; uint8_t qs[TELA_QK_K / 4]; uint8_t scales[12]; uint16_t d; } tela_block_q3_K;
typedef struct { uint16_t d, dmin; uint8_t scales[TELA_K_SCALE_SIZE]; uint8_t qs[TELA_QK_K / 2]; } tela_block_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[TELA_K_SCALE_SIZE]; uint8_t qh[TELA_QK_K / 8]; uint8_t qs[TELA_QK_K / 2]; } tela_block_q5_K;
typedef struct { uint8_t ql[TELA_QK_K / 2]; uint8_t qh[TELA_QK_K / 4]; int8_t scales[TELA_QK_K / 16]; uint16_t d; } tela_block_q6_K;
typedef struct { float d; int8_t qs[TELA_QK_K]; int16_t bsums[TELA_QK_K / 16]; } tela_block_q8_K;
typedef struct { uint16_t d; uint8_t qs[TELA_QK4_NL / 2]; } tela_block_iq4_nl;
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[TELA_QK_K / 64]; uint8_t qs[TELA_QK_K / 2]; } tela_block_iq4_xs;

typedef struct tela_type_traits {
    const char *name;      /* "q4_K" */
    int64_t block_size;    /* elements per block (1 for plain types) */
    size_t block_bytes;    /* bytes per block */
    bool is_quantized;
    bool can_dequantize;   /* has a reference dequantizer to f32 */
    bool can_quantize;     /* has a reference quantizer from f32 */
} tela_type_traits;

/* NULL for an id that is not a known type. */
const tela_type_traits *tela_type_get_traits(tela_type type);

/* Bytes of a row of n elements; 0 (with an error message) if n is not a
 * multiple of the block size or the type is unknown. */
size_t tela_type_row_bytes(tela_type type, int64_t n);

/* Bytes of ne[0]*ne[1]*ne[2]*ne[3] elements laid out in rows of ne[0]; sets
 * *out and returns TELA_OK, or an error naming the problem (unknown type,
 * ne[0] not a multiple of the block, overflow of size_t, negative dims). */
tela_status tela_type_tensor_bytes(tela_type type, const int64_t *ne, int n_dims, size_t *out);

/* Reference dequantization of n elements (n a multiple of the block size). */
tela_status tela_dequantize_row(tela_type type, const void *src, float *dst, int64_t n);

/* Reference quantization of n elements (n a multiple of the block size). The
 * result is deterministic and matches ggml's reference quantizers' layout;
 * imatrix-free. */
tela_status tela_quantize_row(tela_type type, const float *src, void *dst, int64_t n);

/* Added by the quant layer for the backends' kernels: */

/* The 16 levels of the IQ4_NL / IQ4_XS non-linear grid. */
extern const int8_t tela_iq4nl_values[16];

/* Scale and min j (0..7) of a Q4_K/Q5_K block from its 12 packed bytes. */
void tela_k4_unpack_scale_min(const uint8_t packed[12], int j, uint8_t *scale, uint8_t *min);

#ifdef __cplusplus
}
#endif
#endif
