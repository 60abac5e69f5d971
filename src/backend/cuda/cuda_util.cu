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

void *tela_cuda_scratch(cuda_exec *ex, size_t bytes) {
    bytes = tela_cuda_align(bytes ? bytes : 1);
    if (bytes <= ex->scratch_bytes) return ex->scratch;
    if (ex->cur >= 0 && ex->mode == 1) {
        /* capturing: memory cannot be allocated now; this step stays eager */
        tela_cuda_check(ex, cudaErrorStreamCaptureUnsupported, "scratch grown during graph capture");
        return NULL;
    }
    if (!tela_cuda_check(ex, cudaStreamSynchronize(ex->stream), "synchronize")) return NULL;
    tela_cuda_drop_graphs(ex);
    cudaFree(ex->scratch);
    ex->scratch = NULL;
    ex->scratch_bytes = 0;
    void *p = NULL;
    if (!tela_cuda_check(ex, cudaMalloc(&p, bytes), "scratch memory")) return NULL;
    ex->scratch = p;
    ex->scratch_bytes = bytes;
    return p;
}

/* A second scratch buffer, for results that must outlive the operations
 * using tela_cuda_scratch; the same growth rules. */
void *tela_cuda_aux(cuda_exec *ex, size_t bytes) {
    bytes = tela_cuda_align(bytes ? bytes : 1);
    if (bytes <= ex->aux_bytes) return ex->aux;
    if (ex->cur >= 0 && ex->mode == 1) {
        tela_cuda_check(ex, cudaErrorStreamCaptureUnsupported, "scratch grown during graph capture");
        return NULL;
    }
    if (!tela_cuda_check(ex, cudaStreamSynchronize(ex->stream), "synchronize")) return NULL;
    tela_cuda_drop_graphs(ex);
    cudaFree(ex->aux);
    ex->aux = NULL;
    ex->aux_bytes = 0;
    void *p = NULL;
    if (!tela_cuda_check(ex, cudaMalloc(&p, bytes), "scratch memory")) return NULL;
    ex->aux = p;
    ex->aux_bytes = bytes;
    return p;
}

