/* cuda_util.cu: what every file of the CUDA backend uses on an exec: the
 * record of the first failure of an asynchronous operation, and the
 * scratch buffers, which grow outside graph capture (dropping the captured
 * graphs, which hold their addresses). The lowest file of backend/cuda. */
#include "backend/cuda/cuda_common.cuh"
#include "util/error.h"

bool tela_cuda_check(cuda_exec *ex, cudaError_t err, const char *what) {
    if (err == cudaSuccess) return true;
    if (ex->failed == TELA_OK)
        ex->failed = tela_errorf(err == cudaErrorMemoryAllocation ? TELA_ERR_NOMEM : TELA_ERR_INTERNAL,
                                 "cuda:%d: %s: %s", ex->be->device, what, cudaGetErrorString(err));
    return false;
}

bool tela_cuda_launched(cuda_exec *ex, const char *what) { return tela_cuda_check(ex, cudaGetLastError(), what); }

/* Captured graphs hold the addresses of the scratch buffers: when a buffer
 * moves, they are dropped (and captured again on their next uses). */
void tela_cuda_drop_graphs(cuda_exec *ex) {
    for (int i = 0; i < ex->n_slots; i++)
        if (ex->slots[i].exec) cudaGraphExecDestroy(ex->slots[i].exec);
    ex->n_slots = 0;
}

/* Grows one of the exec's buffers to at least `bytes` (256-byte aligned),
 * never while a graph is captured. */
static void *grow(cuda_exec *ex, void **buf, size_t *have, size_t bytes) {
    bytes = tela_cuda_align(bytes ? bytes : 1);
    if (bytes <= *have) return *buf;
    if (ex->cur >= 0 && ex->mode == 1) {
        /* capturing: memory cannot be allocated now; this step stays eager */
        tela_cuda_check(ex, cudaErrorStreamCaptureUnsupported, "scratch grown during graph capture");
        return NULL;
    }
    if (!tela_cuda_check(ex, cudaStreamSynchronize(ex->stream), "synchronize")) return NULL;
    tela_cuda_drop_graphs(ex);
    cudaFree(*buf);
    *buf = NULL;
    *have = 0;
    void *p = NULL;
    if (!tela_cuda_check(ex, cudaMalloc(&p, bytes), "scratch memory")) return NULL;
    *buf = p;
    *have = bytes;
    return p;
}

void *tela_cuda_scratch(cuda_exec *ex, size_t bytes) { return grow(ex, &ex->scratch, &ex->scratch_bytes, bytes); }

/* A second buffer, for results that must outlive the operations using the
 * scratch, and a third, for the quantized activations of the decode
 * products' second variant: the same growth rules. */
void *tela_cuda_aux(cuda_exec *ex, size_t bytes) { return grow(ex, &ex->aux, &ex->aux_bytes, bytes); }

void *tela_cuda_act(cuda_exec *ex, size_t bytes) { return grow(ex, &ex->act, &ex->act_bytes, bytes); }

