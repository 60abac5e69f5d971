/* qdot.h: dot products between weight rows in their stored type (F32, F16,
 * BF16, Q4_0, Q8_0, the K-quants, ...) and activation rows, and small
 * matrix products built on them: the inner loops of every matmul.
 *
 * The split is ggml's: activations are first converted once per token to
 * the weight type's "vec_dot type" (f32 -> Q8_0 blocks for the 32-element
 * types, f32 -> Q8_K blocks for the K-quants, left as f32 for the float
 * types), then each weight row is dotted with that row in integer
 * arithmetic (int8 x int4..int8 products, VNNI where the CPU has it) and
 * scaled per block in float.
 *
 *   const tela_qdot_traits *q = tela_qdot_get(w_type);
 *   q->from_float(x, xq, n);                        // once per token
 *   q->gemm(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tok, n, y, y_stride);
 *
 * gemm computes a block of outputs at once (tile_rows weight rows against
 * tile_cols activation rows share their loads: 4 x 4 with AVX-512, 4 x 1
 * with AVX2 and NEON), walking the activations in cache-sized panels; with
 * n_cols == 1 it is the matrix-vector product of decoding (prefetching the
 * weight rows ahead). With several columns the AVX-512 gemm prepares each
 * 4-row tile once per panel (block scales converted, K-quant levels and
 * scale vectors unpacked, Q8_0/Q4_0 levels with their -128 * sum
 * corrections) and each 4-column tile once per panel (Q8_0 levels made
 * unsigned, K-quant block sums and scales permuted into tile lanes) into
 * a heap buffer (~2.7 KB per K-quant super-block of a row tile, plus about
 * the panel's activation size; it falls back to the direct kernels if
 * that allocation fails). A caller splitting rows among threads should give
 * each thread a multiple of tile_rows rows and all the columns.
 *
 * Determinism: every function is a pure function of its inputs. For a given
 * ISA, gemm's out[c][r] is bit-identical to vec_dot(row r, column c)
 * whatever n_rows, n_cols and the position of (r, c) in the tiles, so no
 * result depends on how rows are split among threads or tokens batched.
 * Moreover every ISA follows the float steps of the scalar kernels (see
 * qdot.c), so all ISAs give bit-identical results too (tests/test_qdot.c
 * checks both), and for finite input the activation quantizers give
 * exactly the bytes of the quant layer's reference quantizers.
 *
 * Rows may sit at any address (a tensor in a mapped GGUF file is only 32-byte
 * aligned): the kernels use unaligned loads; F32 rows (weights or
 * activations) must be 4-byte aligned. n must be a multiple of block_size;
 * the functions do not check (callers validate shapes once). Activation
 * rows are expected to come from from_float: the AVX2 kernels rely on its
 * levels lying in [-127, 127]. */
#ifndef TELA_BACKEND_CPU_QDOT_H
#define TELA_BACKEND_CPU_QDOT_H

#include <stddef.h>
#include <stdint.h>
#include "tela/tela.h"

/* Instruction sets a kernel table can be built for. */
typedef enum tela_isa {
    TELA_ISA_SCALAR = 0,
    TELA_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C */
    TELA_ISA_AVX512 = 2,  /* AVX-512 F/BW/VL/DQ + VNNI (Zen 4/5, Ice Lake and later) */
    TELA_ISA_NEON = 3,    /* AArch64 Advanced SIMD */
    TELA_ISA_COUNT
} tela_isa;

/* n f32 values (n a multiple of the vec_dot type's block) -> a row of the
 * vec_dot type. */
typedef void (*tela_qdot_from_float_fn)(const float *x, void *y, int64_t n);

/* A weight row w (n elements of the weight type) dotted with an activation
 * row x (n elements of the vec_dot type). */
typedef float (*tela_qdot_vec_dot_fn)(const void *w, const void *x, int64_t n);

/* out[c * out_stride + r] = vec_dot(w + r * w_stride, x + c * x_stride, n)
 * for r < n_rows, c < n_cols (strides in bytes for w and x, in floats for
 * out: rows of out are tokens, as in ops.c's y[t][o]). */
typedef void (*tela_qdot_gemm_fn)(const void *w, size_t w_stride, int64_t n_rows, const void *x, size_t x_stride,
                                  int64_t n_cols, int64_t n, float *out, int64_t out_stride);

typedef struct tela_qdot_traits {
    tela_type type;            /* the weight type */
    tela_type vec_dot_type;    /* the activation row type (F32, Q8_0, Q8_K) */
    int64_t block_size;        /* n must be a multiple of this */
    tela_qdot_from_float_fn from_float; /* f32 -> vec_dot_type (a copy for F32) */
    tela_qdot_vec_dot_fn vec_dot;
    tela_qdot_gemm_fn gemm;
    int tile_rows;             /* the micro-kernel's shape */
    int tile_cols;
    tela_isa isa;              /* the instruction set vec_dot and gemm use */
} tela_qdot_traits;

/* The fastest kernels this CPU runs for weights of the given type, or NULL
 * if there are none (an unknown type, I8, F64, ...). Chosen once by CPU
 * features (see util/cpu_features.h; TELA_CPU=avx2 or scalar caps them). */
const tela_qdot_traits *tela_qdot_get(tela_type type);

/* The kernels of one instruction set, for tests and benchmarks: NULL if
 * that set was not compiled in or this CPU lacks it. Types the set has no
 * SIMD kernel for fall back to the scalar functions (isa says which). */
const tela_qdot_traits *tela_qdot_get_isa(tela_type type, tela_isa isa);

/* The instruction set tela_qdot_get uses, and its name ("avx512"). */
tela_isa tela_qdot_best_isa(void);
const char *tela_isa_name(tela_isa isa);

/* ------------------------------------------------------------------------
 * Internal: how the per-ISA files hand their kernels to the dispatcher.
 * Each fills the entries it implements in a table indexed by type id and
 * leaves the others alone (they keep the scalar kernels). */
typedef struct tela_qdot_fns {
    tela_qdot_vec_dot_fn vec_dot;
    tela_qdot_gemm_fn gemm;
    int tile_rows, tile_cols;
} tela_qdot_fns;

/* The activation quantizers are per activation type (Q8_0, Q8_K), so each
 * file also reports those; NULL leaves the scalar one. */
typedef struct tela_qdot_isa_table {
    tela_qdot_fns fns[TELA_TYPE_COUNT];
    tela_qdot_from_float_fn q8_0_from_float;
    tela_qdot_from_float_fn q8_K_from_float;
    tela_qdot_from_float_fn f32_from_float;
} tela_qdot_isa_table;

void tela_qdot_fill_avx512(tela_qdot_isa_table *t);
void tela_qdot_fill_avx2(tela_qdot_isa_table *t);
void tela_qdot_fill_neon(tela_qdot_isa_table *t);

/* Runs a gemm as column panels (~384 KB of activations, kept in L2 while
 * every row tile passes over them) of row tiles x column tiles, calling
 * kernels for full tiles (tr x tc) and edges (tr x 1, 1 x tc, 1 x 1), each
 * of the form k(w, w_stride, x, x_stride, n, out, out_stride) for a fixed
 * shape. The SIMD files share it so their gemms tile alike. */
typedef void (*tela_qdot_tile_fn)(const uint8_t *w, size_t w_stride, const uint8_t *x, size_t x_stride, int64_t n,
                                  float *out, int64_t out_stride);
void tela_qdot_run_tiles(const void *w, size_t w_stride, int64_t n_rows, const void *x, size_t x_stride,
                         int64_t n_cols, int64_t n, float *out, int64_t out_stride, int tr, int tc,
                         tela_qdot_tile_fn full, tela_qdot_tile_fn rows_only, tela_qdot_tile_fn cols_only,
                         tela_qdot_tile_fn single);

#endif
