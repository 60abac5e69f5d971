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

#include <stdbool.h>
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

/* ------------------------------------------------------------------------
 * Packed weights (optional per type and ISA): a weight matrix rearranged
 * once, at load, into groups of pack_rows consecutive rows interleaved so
 * that one SIMD register holds the same k-elements of every row of a group
 * (e.g. 16 rows x 4 int8 levels for AVX-512 VNNI, 16 rows x 1 f32). The
 * packed gemm then broadcasts each activation element against a whole
 * register of rows: no horizontal sums, no per-tile unpacking of scales,
 * and the activation operand comes straight from memory.
 *
 * Group g (rows g*pack_rows .. g*pack_rows + pack_rows - 1; rows past
 * n_rows are zero) occupies pack_group_bytes(n) bytes at
 * packed + g * pack_group_bytes(n). Packed buffers must be 64-byte aligned.
 *
 * Results: for the K-quants the packed gemm is bit-identical to vec_dot
 * (every step before the per-super-block float step is exact integer
 * arithmetic). For the other types the packed kernels have their own fixed
 * order of float operations, documented next to them, and tests check them
 * bitwise against a scalar model of that order: Q8_0/Q4_0 accumulate
 * acc = fmaf((float)isum_b, d_w * d_x, acc) block after block; F16/BF16/F32
 * accumulate acc = fmaf(w_i, x_i, acc) element after element. In every case
 * out[c][r] does not depend on n_cols, on the group range a call covers or
 * on where (r, c) falls in a tile, so packed results do not depend on the
 * thread count or on how tokens are batched. */

/* Bytes of one packed group of pack_rows rows of n elements. */
typedef size_t (*tela_qdot_pack_group_bytes_fn)(int64_t n);

/* Packs groups [g0, g1) of a matrix of n_rows rows (row r at w + r *
 * w_stride, n elements each) into packed (the start of the whole packed
 * matrix, not of group g0). */
typedef void (*tela_qdot_pack_fn)(const void *w, size_t w_stride, int64_t n_rows, int64_t n, int64_t g0, int64_t g1,
                                  void *packed);

/* out[c * out_stride + r] for every row r of groups [g0, g1) with r <
 * n_rows and every c < n_cols: the dot product of row r with activation
 * row c (x + c * x_stride, in the vec_dot type, as for gemm). */
typedef void (*tela_qdot_gemm_packed_fn)(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x,
                                         size_t x_stride, int64_t n_cols, int64_t n, float *out, int64_t out_stride);

typedef struct tela_qdot_packing {
    int pack_rows;                          /* 0: no packed layout */
    tela_qdot_pack_group_bytes_fn group_bytes;
    tela_qdot_pack_fn pack;
    tela_qdot_gemm_packed_fn gemm;
} tela_qdot_packing;

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
    tela_qdot_packing packing; /* the packed layout of this ISA, if any */
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
/* The kernels in use, for a person: the best set's name, "+amx" where the
 * AMX tiles take prefill ("avx512+amx"). */
const char *tela_qdot_kernels_label(void);

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
    tela_qdot_packing packing[TELA_TYPE_COUNT];
} tela_qdot_isa_table;

void tela_qdot_fill_avx512(tela_qdot_isa_table *t);
/* The packed AVX-512 kernels, one file per family: K-quants, Q8_0/Q4_0,
 * float weights. Each fills t->packing[type] for its types. */
void tela_qdot_fill_packed_k_avx512(tela_qdot_isa_table *t);
void tela_qdot_fill_packed_q8_avx512(tela_qdot_isa_table *t);
void tela_qdot_fill_packed_f_avx512(tela_qdot_isa_table *t);
/* AMX int8 tiles for the packed Q4_K/Q6_K/Q8_0/Q4_0 gemms of many columns (prefill;
 * qdot_pack_amx.c): the packed gemm's results bit for bit. Each returns
 * false, having done nothing, where it does not apply (fewer than
 * TELA_AMX_MIN_COLS columns, no usable AMX, AMX turned off, or no memory
 * for its scratch); the caller then runs the VNNI tiles. */
#define TELA_AMX_MIN_COLS 16
bool tela_qdot_amx_gemm_q4_K(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                             int64_t n_cols, int64_t n, float *out, int64_t os);
bool tela_qdot_amx_gemm_q6_K(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                             int64_t n_cols, int64_t n, float *out, int64_t os);
bool tela_qdot_amx_gemm_q8_0(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                             int64_t n_cols, int64_t n, float *out, int64_t os);
bool tela_qdot_amx_gemm_q4_0(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                             int64_t n_cols, int64_t n, float *out, int64_t os);
/* F16/BF16 weights on the AMX bf16 tiles, opt-in (TELA_AMX_FLOAT=1, or
 * tela_qdot_amx_float_allow for tests): weights split exactly into bf16 hi
 * + lo, activations into hi + lo, three products (qdot_pack_amx.c). Near
 * f32 products but not the packed float contract's bits. */
bool tela_qdot_amx_gemm_f16(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                            int64_t n_cols, int64_t n, float *out, int64_t os);
bool tela_qdot_amx_gemm_bf16(const void *packed, int64_t n_rows, int64_t g0, int64_t g1, const void *x, size_t xs,
                             int64_t n_cols, int64_t n, float *out, int64_t os);
bool tela_qdot_amx_float_active(void);
void tela_qdot_amx_float_allow(bool on);
/* Whether the AMX tiles run for the K-quants (the CPU and OS allow them:
 * tela_cpu_features' amx_int8, after the TELA_CPU cap; TELA_AMX=0 turns
 * them off), and for Q8_0/Q4_0 (only with TELA_AMX=1: not faster there);
 * and a switch for tests and benchmarks to put every type on them or none,
 * to compare them with the VNNI tiles in one process. */
bool tela_qdot_amx_active(void);
bool tela_qdot_amx_q8_active(void);
void tela_qdot_amx_allow(bool allow);
void tela_qdot_fill_avx2(tela_qdot_isa_table *t);
void tela_qdot_fill_neon(tela_qdot_isa_table *t);

/* Runs a gemm as column panels (~384 KB of activations, kept in L2 while
 * every row tile passes over them) of row tiles x column tiles, calling
 * kernels for full tiles (tr x tc) and edges (tr x 1, 1 x tc, 1 x 1), each
 * of the form k(w, w_stride, x, x_stride, n, out, out_stride) for a fixed
 * shape. The SIMD files share it so their gemms tile alike (qdot_tiles.c). */
typedef void (*tela_qdot_tile_fn)(const uint8_t *w, size_t w_stride, const uint8_t *x, size_t x_stride, int64_t n,
                                  float *out, int64_t out_stride);
void tela_qdot_run_tiles(const void *w, size_t w_stride, int64_t n_rows, const void *x, size_t x_stride,
                         int64_t n_cols, int64_t n, float *out, int64_t out_stride, int tr, int tc,
                         tela_qdot_tile_fn full, tela_qdot_tile_fn rows_only, tela_qdot_tile_fn cols_only,
                         tela_qdot_tile_fn single);

#endif
