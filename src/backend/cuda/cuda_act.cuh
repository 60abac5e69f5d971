/* cuda_act.cuh: the quantized activations of the decode products: their
 * layout in memory, and the quantizer of eight elements that
 * quantize_act_kernel (cuda_matvec.cu) and the kernels that quantize their
 * own outputs for the product after them share, so that both give the
 * same bytes. Included by the .cu files whose kernels write them. */
#ifndef TELA_BACKEND_CUDA_ACT_CUH
#define TELA_BACKEND_CUDA_ACT_CUH

#include "backend/cuda/cuda_common.cuh"

/* The quantized activations' layout (LT: the weight type that reads
 * them, 0 for the plain order of the elements). A decode product's lane
 * takes a unit of a row (64 elements of a K-quant row, 32 of Q8_0/Q4_0)
 * and reads its activations as 16-byte pieces; in the plain order one
 * load instruction of a warp touches 32 pieces 32-64 bytes apart (16
 * cache lines), so L1 worked 4x per byte of activations (and they are
 * more bytes than the weights: int8 against 4.5 bits). In a type's order,
 * units are taken 32 at a time (a warp's round) and piece i of unit u
 * lies at ((u / 32) * P + i) * 32 + u % 32 (in pieces of 16 bytes, P
 * pieces a unit): a warp's load is 512 contiguous bytes. A token's pieces
 * are padded to whole rounds. */
static __host__ __device__ __forceinline__ int act_unit_pieces(int lt) {
    return lt == TELA_TYPE_Q8_0 || lt == TELA_TYPE_Q4_0 ? 2 : 4;
}

static __host__ __device__ __forceinline__ int act_tok_bytes(int lt, int K) {
    if (lt == 0) return K;
    const int unit = 16 * act_unit_pieces(lt), units = K / unit;
    return (units + 31) / 32 * 32 * unit;
}

/* The index (in 8-byte halves of pieces) of elements 8g..8g+7. */
static __device__ __forceinline__ int act_pos8(int lt, int g) {
    if (lt == 0) return g;
    const int e = 8 * g;
    int u, i;
    if (lt == TELA_TYPE_Q8_0 || lt == TELA_TYPE_Q4_0) {
        u = e >> 5, i = (e >> 4) & 1;
    } else if (lt == TELA_TYPE_Q6_K) {
        /* unit 4b + 2h + part: 32 elements at 128h + 32part, then 32 at +64 */
        const int r = e & 127, sub = r >> 5;
        u = 4 * (e >> 8) + 2 * ((e >> 7) & 1) + (sub & 1), i = 2 * (sub >> 1) + ((r >> 4) & 1);
    } else {
        u = e >> 6, i = (e >> 4) & 3;
    }
    return 2 * (((u >> 5) * act_unit_pieces(lt) + i) * 32 + (u & 31)) + (g & 1);
}


/* Elements 8g..8g+7 of a token's activations (v; zeros where !ok) to int8
 * per 32: four consecutive lanes hold a 32-block (every lane of the warp
 * calls it: the maximum and the sum go through shuffles); xq the token's
 * quants in the layout of type lt, xd its scales, xs its scales times the
 * blocks' sums of quants. */
static __device__ __forceinline__ void quantize8(const float *v, bool ok, int g, int lt, int8_t *xq, float *xd,
                                                 float *xs) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[i]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int q[8], sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        q[i] = __float2int_rn(v[i] * id);
        sum += q[i];
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (ok) {
        uint2 packed;
        packed.x = (uint32_t)(q[0] & 0xff) | (uint32_t)(q[1] & 0xff) << 8 | (uint32_t)(q[2] & 0xff) << 16 |
                   (uint32_t)(q[3] & 0xff) << 24;
        packed.y = (uint32_t)(q[4] & 0xff) | (uint32_t)(q[5] & 0xff) << 8 | (uint32_t)(q[6] & 0xff) << 16 |
                   (uint32_t)(q[7] & 0xff) << 24;
        ((uint2 *)xq)[act_pos8(lt, g)] = packed;
        if ((g & 3) == 0) {
            xd[g / 4] = d;
            xs[g / 4] = d * (float)sum;
        }
    }
}

/* A block's own outputs quantized for the product after it: elements
 * [e0, e0 + n) of the token's activations, read from src[0, n) (global
 * or shared memory; e0 and n multiples of 32, written by this block
 * before a __syncthreads that every thread has passed), as
 * quantize_act_kernel quantizes them. Every thread of the block calls it
 * (n_threads a multiple of 32). */
static __device__ void preq_block(const preq_out &o, const float *src, int e0, int n, int tid, int n_threads) {
    const int n8 = n / 8, g0 = e0 / 8;
    for (int base = 0; base < n8; base += n_threads) {
        const int g = base + tid;
        const bool ok = g < n8;
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (ok) {
            const float4 a = *(const float4 *)(src + 8 * g), b = *(const float4 *)(src + 8 * g + 4);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        }
        quantize8(v, ok, g0 + g, o.lt, o.xq, o.xd, o.xs);
    }
}

#endif
