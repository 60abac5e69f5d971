/* cuda_ranks.cu: several execs of the CUDA backend working as the ranks of
 * a tensor-parallel model (backend.h "Several execs"): making an exec's
 * GPU current, one stream waiting for another through an event (which,
 * while the waiting stream captures a decode step, forks the other into
 * the capture), copies between the ranks' memory, and the all-reduce
 * through NCCL where the ranks are on distinct GPUs. */
#include "backend/cuda/cuda_common.cuh"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TELA_HAVE_NCCL
#include <nccl.h>
#endif

static cuda_exec *as_ex(tela_exec *ex) { return (cuda_exec *)ex; }

void tela_cuda_activate(tela_exec *e) { cudaSetDevice(as_ex(e)->be->device); }

void tela_cuda_wait_for(tela_exec *e, tela_exec *o) {
    cuda_exec *ex = as_ex(e), *other = as_ex(o);
    cudaSetDevice(other->be->device);
    if (tela_cuda_check(other, cudaEventRecord(other->join_ev, other->stream), "event record")) {
        cudaSetDevice(ex->be->device);
        tela_cuda_check(ex, cudaStreamWaitEvent(ex->stream, other->join_ev, 0), "stream wait");
    } else {
        cudaSetDevice(ex->be->device);
        ex->failed = other->failed;
    }
    ex->after_copy = true; /* the next kernel waits for all of this, not only the kernel before it */
}

void tela_cuda_copy_from(tela_exec *e, void *dst, size_t dst_pitch, tela_exec *o, const void *src, size_t src_pitch,
                         size_t width, size_t rows) {
    cuda_exec *ex = as_ex(e);
    (void)o;
    /* unified addressing: the runtime finds each pointer's device */
    tela_cuda_check(ex, cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault, ex->stream),
                    "copy between ranks");
    ex->after_copy = true;
}

#ifdef TELA_HAVE_NCCL
typedef struct cuda_comm {
    ncclComm_t *comms;
} cuda_comm;

tela_status tela_cuda_comm_create(tela_exec *const *execs, int n, void **out, const char **transport) {
    *out = NULL;
    int *devs = (int *)malloc((size_t)n * sizeof *devs);
    if (!devs) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    for (int r = 0; r < n; r++) {
        devs[r] = as_ex(execs[r])->be->device;
        for (int q = 0; q < r; q++)
            if (devs[q] == devs[r]) { /* NCCL takes one rank a GPU: these ranks add through copies */
                free(devs);
                return TELA_OK;
            }
    }
    /* NVLink multicast (NVLS) stays off on these machines (docs/MULTI-GPU.md) */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    cuda_comm *c = (cuda_comm *)calloc(1, sizeof *c);
    if (c) c->comms = (ncclComm_t *)calloc((size_t)n, sizeof *c->comms);
    if (!c || !c->comms) {
        free(c);
        free(devs);
        return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    }
    ncclResult_t r = ncclCommInitAll(c->comms, n, devs);
    free(devs);
    if (r != ncclSuccess) {
        free(c->comms);
        free(c);
        return tela_errorf(TELA_ERR_UNSUPPORTED, "tensor parallelism: NCCL could not connect the %d GPUs: %s", n,
                           ncclGetErrorString(r));
    }
    *out = c;
    *transport = "NCCL";
    return TELA_OK;
}

void tela_cuda_comm_free(void *comm, int n) {
    cuda_comm *c = (cuda_comm *)comm;
    if (!c) return;
    for (int r = 0; r < n; r++)
        if (c->comms[r]) ncclCommDestroy(c->comms[r]);
    free(c->comms);
    free(c);
}

/* One ncclAllReduce a rank on its stream, in one group from this thread
 * (inside a capture too: each rank's stream has joined rank 0's). */
void tela_cuda_comm_allreduce(void *comm, tela_exec *const *execs, float *const *bufs, int64_t n) {
    cuda_comm *c = (cuda_comm *)comm;
    cuda_exec *ex0 = as_ex(execs[0]);
    int ranks = 0;
    ncclCommCount(c->comms[0], &ranks);
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < ranks && r == ncclSuccess; i++) {
        cuda_exec *ex = as_ex(execs[i]);
        cudaSetDevice(ex->be->device);
        r = ncclAllReduce(bufs[i], bufs[i], (size_t)n, ncclFloat32, ncclSum, c->comms[i], ex->stream);
        ex->after_copy = true;
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (r == ncclSuccess) r = r2;
    cudaSetDevice(ex0->be->device);
    if (r != ncclSuccess && ex0->failed == TELA_OK)
        ex0->failed = tela_errorf(TELA_ERR_INTERNAL, "tensor parallelism: NCCL all-reduce of %lld floats: %s",
                                  (long long)n, ncclGetErrorString(r));
}
#else
tela_status tela_cuda_comm_create(tela_exec *const *execs, int n, void **out, const char **transport) {
    (void)execs;
    (void)n;
    (void)transport;
    *out = NULL; /* built without NCCL: the ranks add through copies */
    return TELA_OK;
}

void tela_cuda_comm_free(void *comm, int n) {
    (void)comm;
    (void)n;
}

void tela_cuda_comm_allreduce(void *comm, tela_exec *const *execs, float *const *bufs, int64_t n) {
    (void)comm;
    (void)execs;
    (void)bufs;
    (void)n;
}
#endif
