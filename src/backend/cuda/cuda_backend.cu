/* cuda_backend.cu: the CUDA backend behind backend.h: the device, its
 * memory (weights uploaded once in the GPU layouts, with a check that
 * they fit), execs (a stream, a cuBLAS handle, scratch, and the captured
 * decode graphs), KV caches in device memory, and the operations, each
 * handed to the kernels of cuda_matvec.cu, cuda_elementwise.cu,
 * cuda_attention.cu and cuda_gdn.cu. Errors of the asynchronous operations
 * are kept on the exec and reported by the next sync, download or
 * graph_end. */
#include "backend/cuda/cuda_common.cuh"
#include "quant/quant.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const tela_backend_ops tela_cuda_ops_table;
#define cuda_ops_table tela_cuda_ops_table

static cuda_backend *as_be(tela_backend *be) { return (cuda_backend *)be; }
static cuda_exec *as_ex(tela_exec *ex) { return (cuda_exec *)ex; }

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

int tela_backend_cuda_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

/* ------------------------------------------------------------ backend */

#ifdef TELA_CUDA_TIMELINE
extern "C" void tela_cuda_timeline_dump(void);
#endif

static void cuda_destroy(tela_backend *be) {
    cuda_backend *b = as_be(be);
    cudaSetDevice(b->device);
#ifdef TELA_CUDA_TIMELINE
    tela_cuda_timeline_dump();
#endif
    for (size_t i = 0; i < b->n_allocs; i++) cudaFree(b->allocs[i]);
    free(b->allocs);
    free(b);
}

static tela_status cuda_mem_info(tela_backend *be, size_t *free_bytes, size_t *total_bytes) {
    cuda_backend *b = as_be(be);
    cudaSetDevice(b->device);
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess)
        return tela_errorf(TELA_ERR_INTERNAL, "cuda:%d: cannot read the free memory: %s", b->device,
                           cudaGetErrorString(e));
    return TELA_OK;
}

static bool cuda_type_supported(const tela_backend *be, tela_type type) {
    (void)be;
    return tela_cuda_type_ok(type);
}

/* Device memory owned by the backend until it is destroyed. */
static tela_status be_track(cuda_backend *b, void *p) {
    if (b->n_allocs == b->cap_allocs) {
        size_t cap = b->cap_allocs ? 2 * b->cap_allocs : 64;
        void **na = (void **)realloc(b->allocs, cap * sizeof *na);
        if (!na) {
            cudaFree(p);
            return tela_errorf(TELA_ERR_NOMEM, "out of memory");
        }
        b->allocs = na;
        b->cap_allocs = cap;
    }
    b->allocs[b->n_allocs++] = p;
    return TELA_OK;
}

static tela_status dev_alloc(cuda_backend *b, size_t bytes, const char *what, void **out) {
    *out = NULL;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return tela_errorf(TELA_ERR_NOMEM, "cuda:%d: %s needs %.1f MiB of GPU memory but only %.1f MiB of %.1f MiB are free",
                           b->device, what, mib(bytes), mib(fr), mib(tot));
    }
    /* cudaMemset runs on the legacy default stream, which the execs'
     * non-blocking streams do not wait for: unless it has finished here, it
     * may clear the buffer after an exec's first upload into it (the
     * intermittent test_cuda_gdn failure: a state read as zeros) */
    e = cudaMemset(p, 0, bytes ? bytes : 1);
    if (e == cudaSuccess) e = cudaStreamSynchronize(0);
    if (e != cudaSuccess) {
        cudaFree(p);
        return tela_errorf(TELA_ERR_INTERNAL, "cuda:%d: clearing %s: %s", b->device, what, cudaGetErrorString(e));
    }
    *out = p;
    return TELA_OK;
}

/* The index of an earlier matrix with the same stored data (a tied output
 * head is the embedding table), or -1. */
static long same_data(tela_mat *const *mats, size_t i) {
    for (size_t j = 0; j < i; j++)
        if (mats[j]->data == mats[i]->data && mats[j]->type == mats[i]->type && mats[j]->n_rows == mats[i]->n_rows &&
            mats[j]->n_cols == mats[i]->n_cols)
            return (long)j;
    return -1;
}

static size_t cuda_mats_bytes(const tela_backend *be, tela_mat *const *mats, size_t n) {
    (void)be;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (same_data(mats, i) < 0) total += tela_cuda_align(tela_cuda_layout_bytes(mats[i]->type, mats[i]->n_rows, mats[i]->n_cols));
    return total;
}

static tela_status upload_mat(cuda_backend *b, const tela_mat *w, unsigned char *dst, size_t *done, size_t total,
                              int verbose, int *last_pct) {
    const size_t bytes = tela_cuda_layout_bytes(w->type, w->n_rows, w->n_cols);
    const bool split = w->type == TELA_TYPE_Q8_0 || w->type == TELA_TYPE_Q4_0 || w->type == TELA_TYPE_Q6_K;
    void *host = NULL;
    const unsigned char *src = (const unsigned char *)w->data;
    if (split) {
        host = malloc(bytes);
        if (!host) return tela_errorf(TELA_ERR_NOMEM, "out of memory rearranging '%s' for the GPU", w->name);
        tela_cuda_layout_rows(w->type, w->n_rows, w->n_cols, w->data, w->row_bytes, 0, w->n_rows, host);
        src = (const unsigned char *)host;
    }
    const size_t chunk = (size_t)256 << 20;
    for (size_t off = 0; off < bytes; off += chunk) {
        const size_t nb = bytes - off < chunk ? bytes - off : chunk;
        cudaError_t e = cudaMemcpy(dst + off, src + off, nb, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            free(host);
            return tela_errorf(TELA_ERR_INTERNAL, "cuda:%d: uploading '%s': %s", b->device, w->name,
                               cudaGetErrorString(e));
        }
        *done += nb;
        int pct = total ? (int)(100.0 * (double)*done / (double)total) : 100;
        if (verbose && total > ((size_t)256 << 20) && pct / 5 != *last_pct / 5) {
            fprintf(stderr, "\rtela: uploading weights to cuda:%d: %3d%% (%.2f of %.2f GiB)", b->device, pct,
                    (double)*done / (1 << 30), (double)total / (1 << 30));
            *last_pct = pct;
        }
    }
    free(host);
    return TELA_OK;
}

static tela_status cuda_prepare_mats(tela_backend *be, tela_mat *const *mats, const tela_mat_use *uses, size_t n,
                                     int verbose) {
    (void)uses; /* every matrix is read on the GPU, by rows or by products */
    cuda_backend *b = as_be(be);
    cudaSetDevice(b->device);
    for (size_t i = 0; i < n; i++) {
        const tela_mat *w = mats[i];
        if (!tela_cuda_type_ok(w->type)) {
            const tela_type_traits *tr = tela_type_get_traits(w->type);
            return tela_errorf(TELA_ERR_UNSUPPORTED,
                               "tensor '%s' has type %s, which the CUDA backend does not compute on (it takes f32, "
                               "f16, bf16, q8_0, q4_0, q4_K, q5_K and q6_K: requantize with 'tela quantize', or use "
                               "--device cpu)",
                               w->name ? w->name : "?", tr ? tr->name : "unknown");
        }
    }
    const size_t total = cuda_mats_bytes(be, mats, n);
    if (total == 0) return TELA_OK;
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    const size_t reserve = (size_t)256 << 20; /* the CUDA context's own needs, cuBLAS, a session */
    if (total + reserve > fr)
        return tela_errorf(TELA_ERR_NOMEM,
                           "cuda:%d: the weights need %.1f MiB of GPU memory (plus %.0f MiB for work buffers) but only "
                           "%.1f MiB of %.1f MiB are free: use a smaller quantization (tela quantize) or --device cpu",
                           b->device, mib(total), mib(reserve), mib(fr), mib(tot));
    void *block = NULL;
    TELA_TRY(dev_alloc(b, total, "the weights", &block));
    TELA_TRY(be_track(b, block));
    unsigned char *dst = (unsigned char *)block;
    size_t done = 0;
    int last_pct = -5;
    for (size_t i = 0; i < n; i++) {
        long j = same_data(mats, i);
        if (j >= 0) {
            mats[i]->dev = mats[j]->dev;
            continue;
        }
        TELA_TRY(upload_mat(b, mats[i], dst, &done, total, verbose, &last_pct));
        mats[i]->dev = dst;
        dst += tela_cuda_align(tela_cuda_layout_bytes(mats[i]->type, mats[i]->n_rows, mats[i]->n_cols));
    }
    if (verbose && total > ((size_t)256 << 20)) fprintf(stderr, "\n");
    /* a copy from pageable memory may return before its data lands (dev_alloc) */
    cudaError_t e = cudaStreamSynchronize(0);
    if (e != cudaSuccess)
        return tela_errorf(TELA_ERR_INTERNAL, "cuda:%d: uploading the weights: %s", b->device, cudaGetErrorString(e));
    b->weight_bytes += total;
    return TELA_OK;
}

static tela_status cuda_alloc(tela_backend *be, size_t bytes, const char *what, void **out) {
    cuda_backend *b = as_be(be);
    cudaSetDevice(b->device);
    return dev_alloc(b, bytes, what, out);
}

static void cuda_free_mem(tela_backend *be, void *p) {
    cudaSetDevice(as_be(be)->device);
    cudaFree(p);
}

/* Page-locked host memory: cuda_download copies into it directly. */
static void *cuda_host_alloc(tela_backend *be, size_t bytes) {
    cudaSetDevice(as_be(be)->device);
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void cuda_host_free(tela_backend *be, void *p) {
    (void)be;
    cudaFreeHost(p);
}

static tela_status cuda_make_const(tela_backend *be, const void *host, size_t bytes, const void **out) {
    cuda_backend *b = as_be(be);
    cudaSetDevice(b->device);
    void *p = NULL;
    TELA_TRY(dev_alloc(b, bytes, "model constants", &p));
    TELA_TRY(be_track(b, p));
    cudaError_t e = cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaStreamSynchronize(0); /* landed before any exec's stream reads it (dev_alloc) */
    if (e != cudaSuccess)
        return tela_errorf(TELA_ERR_INTERNAL, "cuda:%d: uploading constants: %s", b->device, cudaGetErrorString(e));
    *out = p;
    return TELA_OK;
}

/* --------------------------------------------------------------- exec */

static tela_status take_failure(cuda_exec *ex) {
    tela_status s = ex->failed;
    ex->failed = TELA_OK;
    return s;
}

static void cuda_exec_free(tela_exec *e) {
    cuda_exec *ex = as_ex(e);
    cudaSetDevice(ex->be->device);
    if (ex->stream) cudaStreamSynchronize(ex->stream);
    tela_cuda_drop_graphs(ex);
    if (ex->cublas) cublasDestroy(ex->cublas);
    cudaFree(ex->cublas_ws);
    cudaFree(ex->scratch);
    cudaFree(ex->aux);
    cudaFree(ex->act);
    cudaFreeHost(ex->pinned);
    cudaFreeHost(ex->ring);
    cudaFree(ex->pg_dev);
    free(ex->pg_host);
    free(ex->pg_seq_tbl);
    for (int i = 0; i < ex->cap_ev; i++) cudaEventDestroy(ex->ev[i]);
    if (ex->join_ev) cudaEventDestroy(ex->join_ev);
    free(ex->ev);
    if (ex->stream) cudaStreamDestroy(ex->stream);
    free(ex);
}

#define CUBLAS_WS_BYTES ((size_t)32 << 20)

static tela_status cuda_exec_create(tela_backend *be, int n_threads, tela_exec **out) {
    (void)n_threads;
    *out = NULL;
    cuda_backend *b = as_be(be);
    cudaSetDevice(b->device);
    cuda_exec *ex = (cuda_exec *)calloc(1, sizeof *ex);
    if (!ex) return tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    ex->head.ops = &cuda_ops_table;
    ex->head.be = be;
    ex->be = b;
    ex->cur = -1;
    const char *g = getenv("TELA_CUDA_GRAPHS");
    ex->graphs = !(g && !strcmp(g, "0"));
    const char *gv = getenv("TELA_CUDA_GEMV");
    ex->gemv_v2 = !(gv && !strcmp(gv, "1")); /* TELA_CUDA_GEMV=1: the first variant */
    const char *av = getenv("TELA_CUDA_ATTN");
    ex->attn_variant = av && (!strcmp(av, "1") || !strcmp(av, "2")) ? atoi(av) : 3; /* TELA_CUDA_ATTN=1|2: earlier variants */
    const char *as = getenv("TELA_CUDA_ATTN_SHORT");
    ex->attn_short = as && as[0] >= '0' && as[0] <= '9' ? atoi(as) : 256; /* measured: docs/PERF-NOTES.md */
    const char *gq = getenv("TELA_CUDA_GEMV_QROWS");
    ex->gemv_q_rows = gq && (!strcmp(gq, "1") || !strcmp(gq, "2") || !strcmp(gq, "4")) ? atoi(gq) : -1;
    const char *gr = getenv("TELA_CUDA_GEMV_ROWS");
    ex->gemv_f_rows = gr && (!strcmp(gr, "0") || !strcmp(gr, "1") || !strcmp(gr, "2") || !strcmp(gr, "4")) ? atoi(gr) : -1;
    const char *ge = getenv("TELA_CUDA_GEMV_EARLY");
    ex->gemv_early = !(ge && !strcmp(ge, "0"));
    const char *gn = getenv("TELA_CUDA_GEMV_EARLY_NT");
    ex->gemv_early_nt = ex->gemv_early && !(gn && !strcmp(gn, "0"));
    const char *gss = getenv("TELA_CUDA_GEMV_SPLIT_SW");
    ex->gemv_split_sw = gss && !strcmp(gss, "1");
    const char *gsw = getenv("TELA_CUDA_GEMV_SPLIT_WAVES");
    ex->gemv_split_waves = gsw && !strcmp(gsw, "1");
    const char *gpe = getenv("TELA_CUDA_GEMV_PERSIST");
    ex->gemv_persist = gpe && !strcmp(gpe, "1");
    const char *go = getenv("TELA_CUDA_GEMV_ORDER");
    ex->gemv_order = go && (!strcmp(go, "0") || !strcmp(go, "2")) ? atoi(go) : 1;
    const char *gw = getenv("TELA_CUDA_GEMV_WPR");
    ex->gemv_wpr = gw && (!strcmp(gw, "1") || !strcmp(gw, "2") || !strcmp(gw, "4")) ? atoi(gw) : 0;
    const char *gx = getenv("TELA_CUDA_GEMV_FX");
    if (gx && !strcmp(gx, "0")) ex->gemv_fx_nw = -1;
    else if (gx && (sscanf(gx, "%d:%d:%d", &ex->gemv_fx_nw, &ex->gemv_fx_wpr, &ex->gemv_fx_u) != 3 ||
                    !((ex->gemv_fx_nw == 8 || ex->gemv_fx_nw == 16) && (ex->gemv_fx_wpr == 1 || ex->gemv_fx_wpr == 2 || ex->gemv_fx_wpr == 4) &&
                      (ex->gemv_fx_u == 4 || ex->gemv_fx_u == 8))))
        ex->gemv_fx_nw = ex->gemv_fx_wpr = ex->gemv_fx_u = 0;
    const char *gd = getenv("TELA_CUDA_GEMV_DEPTH");
    ex->gemv_depth = gd && (!strcmp(gd, "1") || !strcmp(gd, "2")) ? atoi(gd) : 0;
    const char *g4 = getenv("TELA_CUDA_GEMV_D4");
    ex->gemv_d4 = g4 && (!strcmp(g4, "0") || !strcmp(g4, "2")) ? atoi(g4) : 1;
    const char *gsp = getenv("TELA_CUDA_GEMV_SPLIT");
    ex->gemv_split = gsp && (!strcmp(gsp, "1") || !strcmp(gsp, "2")) ? atoi(gsp) : 0;
    const char *fm = getenv("TELA_CUDA_GEMV_FM");
    ex->gemv_fm = b->cc_major >= 8 && !(fm && !strcmp(fm, "0"));
    const char *fs = getenv("TELA_CUDA_FM_SLICES");
    ex->fm_slices = fs && (!strcmp(fs, "1") || !strcmp(fs, "2") || !strcmp(fs, "4") || !strcmp(fs, "8")) ? atoi(fs) : 0;
    ex->gemv_fm_one = fm && !strcmp(fm, "1");
    const char *fn = getenv("TELA_CUDA_GEMV_FRN");
    ex->gemv_frn = !(fn && !strcmp(fn, "0"));
    const char *fr = getenv("TELA_CUDA_FM_RB");
    ex->fm_rb = fr && (!strcmp(fr, "1") || !strcmp(fr, "2") || !strcmp(fr, "4")) ? atoi(fr) : 0;
    const char *gl = getenv("TELA_CUDA_GDN_LANES");
    ex->gdn_lanes = gl && (!strcmp(gl, "4") || !strcmp(gl, "8")) ? atoi(gl) : 0;
    const char *gs = getenv("TELA_CUDA_GDN_STEP");
    ex->gdn_step = !(gs && !strcmp(gs, "0"));
    const char *nr = getenv("TELA_CUDA_NORM_ROPE");
    ex->norm_rope = !(nr && !strcmp(nr, "0"));
    const char *es = getenv("TELA_CUDA_EARLY_STATE");
    ex->early_state = !(es && !strcmp(es, "0"));
    const char *pq = getenv("TELA_CUDA_PREQ");
    ex->preq = pq && (!strcmp(pq, "0") || !strcmp(pq, "1") || !strcmp(pq, "2")) ? atoi(pq) : 2;
    const char *fg = getenv("TELA_CUDA_FLOAT_GEMM");
    ex->float_gemm_min = fg && fg[0] >= '2' && fg[0] <= '9' && !fg[1] ? fg[0] - '0' : 3;
    const char *fb = getenv("TELA_CUDA_FLOAT_GEMM_BYTES");
    ex->float_gemm_bytes = fb && fb[0] >= '0' && fb[0] <= '9' ? atoll(fb) : (int64_t)4 << 20;
    const char *pd = getenv("TELA_CUDA_PDL");
    ex->pdl = b->cc_major >= 9 && !(pd && !strcmp(pd, "0"));
    const char *dbg = getenv("TELA_CUDA_DEBUG");
    ex->debug = dbg && dbg[0] && strcmp(dbg, "0") != 0;
    cudaError_t e = cudaStreamCreateWithFlags(&ex->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(&ex->cublas_ws, CUBLAS_WS_BYTES);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ex->join_ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cuda_exec_free(&ex->head);
        return tela_errorf(TELA_ERR_NOMEM, "cuda:%d: cannot create a stream and work space: %s", b->device,
                           cudaGetErrorString(e));
    }
    if (cublasCreate(&ex->cublas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(ex->cublas, ex->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(ex->cublas, ex->cublas_ws, CUBLAS_WS_BYTES) != CUBLAS_STATUS_SUCCESS) {
        cuda_exec_free(&ex->head);
        return tela_errorf(TELA_ERR_INTERNAL, "cuda:%d: cannot initialize cuBLAS", b->device);
    }
    cublasSetMathMode(ex->cublas, CUBLAS_DEFAULT_MATH);
    *out = &ex->head;
    return TELA_OK;
}

/* Prefill steps this long keep the tensor cores' tiles full while the
 * activations of an 8B model stay within a few hundred MiB. */
static int cuda_preferred_batch(const tela_exec *ex) {
    (void)ex;
    return 4096;
}

static tela_status cuda_sync(tela_exec *e) {
    cuda_exec *ex = as_ex(e);
    tela_cuda_check(ex, cudaStreamSynchronize(ex->stream), "synchronize");
    ex->ring_used = 0;
    return take_failure(ex);
}

/* Small uploads go through a pinned ring (truly asynchronous copies; the
 * ring is reused once the stream has passed them: after a sync or a
 * download), large ones straight from the caller's memory. */
#define UPLOAD_RING_BYTES (64 * 1024)

static tela_status cuda_upload(tela_exec *e, void *dst, const void *src, size_t bytes) {
    cuda_exec *ex = as_ex(e);
    ex->after_copy = true;
    if (!ex->ring && cudaMallocHost(&ex->ring, UPLOAD_RING_BYTES) != cudaSuccess) {
        cudaGetLastError();
        ex->ring = NULL;
    }
    const size_t need = (bytes + 15) & ~(size_t)15;
    if (ex->ring && need <= UPLOAD_RING_BYTES) {
        if (ex->ring_used + need > UPLOAD_RING_BYTES) {
            tela_cuda_check(ex, cudaStreamSynchronize(ex->stream), "upload");
            ex->ring_used = 0;
        }
        unsigned char *stage = (unsigned char *)ex->ring + ex->ring_used;
        memcpy(stage, src, bytes);
        ex->ring_used += need;
        tela_cuda_check(ex, cudaMemcpyAsync(dst, stage, bytes, cudaMemcpyHostToDevice, ex->stream), "upload");
        if (ex->failed != TELA_OK) return take_failure(ex);
        return TELA_OK;
    }
    tela_cuda_check(ex, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ex->stream), "upload");
    if (ex->failed != TELA_OK) return take_failure(ex);
    return TELA_OK;
}

/* Device -> host. Into page-locked memory (tela_backend_host_alloc's: a
 * session's logits) the copy goes straight there; into pageable memory
 * through the exec's pinned staging buffer and a memcpy, which at a
 * vocabulary's row (0.5-1 MB) costs about as much as the copy over the
 * bus. Small copies (a greedy pick) always go through the staging buffer:
 * their memcpy costs less than asking the driver what dst is. */
#define DOWNLOAD_DIRECT_MIN_BYTES 4096

static void *download_landing(cuda_exec *ex, void *dst, size_t bytes) {
    if (bytes >= DOWNLOAD_DIRECT_MIN_BYTES) {
        cudaPointerAttributes at;
        if (cudaPointerGetAttributes(&at, dst) == cudaSuccess && at.type == cudaMemoryTypeHost) return dst;
        cudaGetLastError(); /* (older drivers fail on pointers they do not know: not an error here) */
    }
    if (bytes > ex->pinned_bytes) {
        cudaStreamSynchronize(ex->stream);
        cudaFreeHost(ex->pinned);
        ex->pinned = NULL;
        ex->pinned_bytes = 0;
        if (!tela_cuda_check(ex, cudaMallocHost(&ex->pinned, bytes), "pinned host memory")) return NULL;
        ex->pinned_bytes = bytes;
    }
    return ex->pinned;
}

static tela_status cuda_download(tela_exec *e, void *dst, const void *src, size_t bytes) {
    cuda_exec *ex = as_ex(e);
    ex->after_copy = true;
    void *land = download_landing(ex, dst, bytes);
    if (land) {
        tela_cuda_check(ex, cudaMemcpyAsync(land, src, bytes, cudaMemcpyDeviceToHost, ex->stream), "download");
        tela_cuda_check(ex, cudaStreamSynchronize(ex->stream), "download");
        ex->ring_used = 0;
        if (land != dst && ex->failed == TELA_OK) memcpy(dst, land, bytes);
    }
    return take_failure(ex);
}

static bool cuda_graph_begin(tela_exec *e, uint64_t key) {
    cuda_exec *ex = as_ex(e);
    ex->cur = -1;
    ex->mode = 0;
    if (!ex->graphs || ex->failed != TELA_OK) return true;
    int slot = -1;
    for (int i = 0; i < ex->n_slots; i++)
        if (ex->slots[i].key == key) slot = i;
    if (slot < 0) {
        if (ex->n_slots == TELA_CUDA_MAX_GRAPHS) return true;
        slot = ex->n_slots++;
        ex->slots[slot].key = key;
        ex->slots[slot].seen = 0;
        ex->slots[slot].exec = NULL;
    }
    cuda_graph_slot *s = &ex->slots[slot];
    ex->cur = slot;
    if (s->exec) {
        ex->mode = 2;
        return false;
    }
    if (s->seen < 0 || s->seen == 0) {
        /* first time: eager, which also sizes the scratch the step needs */
        if (s->seen == 0) s->seen = 1;
        return true;
    }
    if (cudaStreamBeginCapture(ex->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        s->seen = -1; /* never again */
        return true;
    }
    ex->mode = 1;
    return true;
}

static tela_status cuda_graph_end(tela_exec *e) {
    cuda_exec *ex = as_ex(e);
    const int slot = ex->cur, mode = ex->mode;
    ex->cur = -1;
    ex->mode = 0;
    if (slot < 0) return ex->failed != TELA_OK ? take_failure(ex) : TELA_OK;
    cuda_graph_slot *s = &ex->slots[slot];
    if (mode == 1) {
        cudaGraph_t graph = NULL;
        cudaError_t ce = cudaStreamEndCapture(ex->stream, &graph);
        if (ce == cudaSuccess && ex->failed == TELA_OK) {
            ce = cudaGraphInstantiate(&s->exec, graph, 0);
            if (ce != cudaSuccess) s->exec = NULL;
        }
        if (ex->debug && graph) {
            size_t nodes = 0;
            cudaGraphGetNodes(graph, NULL, &nodes);
            fprintf(stderr, "tela: cuda: captured a graph of %zu nodes for step key %#llx\n", nodes,
                    (unsigned long long)s->key);
        }
        if (graph) cudaGraphDestroy(graph);
        if (ce != cudaSuccess || ex->failed != TELA_OK || !s->exec) {
            /* the capture failed: run the step eagerly from now on (the
             * caller sees this step's failure, if it was one) */
            cudaGetLastError();
            s->seen = -1;
            if (ex->failed != TELA_OK) return take_failure(ex);
            return tela_errorf(TELA_ERR_INTERNAL, "cuda:%d: capturing a decode step failed: %s", ex->be->device,
                               cudaGetErrorString(ce));
        }
    }
    if (s->exec) tela_cuda_check(ex, cudaGraphLaunch(s->exec, ex->stream), "graph launch");
    if (ex->failed != TELA_OK) return take_failure(ex);
    return TELA_OK;
}

static void cuda_graphs_drop(tela_exec *e) {
    cuda_exec *ex = as_ex(e);
    tela_cuda_check(ex, cudaStreamSynchronize(ex->stream), "synchronize");
    tela_cuda_drop_graphs(ex);
}

static uint32_t cuda_length_bucket(const tela_exec *ex, int32_t n_kv) {
    (void)ex;
    return tela_cuda_length_bucket(n_kv);
}

/* --------------------------------------------------------- operations */

static void cuda_get_rows(tela_exec *e, const tela_mat *w, int64_t row0, bool accumulate, const int32_t *ids, int n,
                          float *out, int64_t out_stride) {
    tela_cuda_get_rows(as_ex(e), w, row0, accumulate, ids, n, out, out_stride);
}

static void cuda_rmsnorm(tela_exec *e, float *out, int64_t out_stride, const float *x, int64_t x_stride, const float *w,
                         int64_t n, int n_rows, float eps) {
    tela_cuda_rmsnorm(as_ex(e), out, out_stride, x, x_stride, w, n, n_rows, eps);
}

/* The most tokens a product of w takes through the decode kernels. They
 * read the weights once for all tokens, but the activations again for
 * every row: quantized weights (int8 activations, from shared memory) up to
 * TELA_CUDA_GEMV_MAX_TOK; large float matrices up to two tokens, more go
 * to cuBLAS (f16/bf16 activations, the prefill's precision). Measured on
 * the H200 (docs/PERF-NOTES.md), Qwen3.5-2B F16, a pass of n tokens against
 * one: decode kernels 1.85 / 2.64 / 3.28 for n = 2 / 3 / 4, cuBLAS 2.16 /
 * 2.14 / 2.19; on the 8M-parameter demo (matrices under 1 MB) cuBLAS was
 * the slower at every n. F16/BF16 products of 2-8 tokens now take the
 * tensor-core kernel (gemv_fm_kernel, cuda_matvec.cu) unless
 * TELA_CUDA_GEMV_FM=0. */
static int gemv_max_tok(const cuda_exec *ex, const tela_mat *w) {
    const bool flt = w->type == TELA_TYPE_F16 || w->type == TELA_TYPE_BF16 || w->type == TELA_TYPE_F32;
    if (ex->gemv_fm && (w->type == TELA_TYPE_F16 || w->type == TELA_TYPE_BF16) && w->n_cols % 32 == 0)
        return TELA_CUDA_GEMV_MAX_TOK; /* the tensor-core kernel: 2-8 tokens for about one token's cost */
    const int64_t bytes = w->n_rows * w->n_cols * (w->type == TELA_TYPE_F32 ? 4 : 2);
    return flt && bytes >= ex->float_gemm_bytes ? ex->float_gemm_min - 1 : TELA_CUDA_GEMV_MAX_TOK;
}

static void matmul_one(cuda_exec *ex, const tela_mat *w, const float *x, int64_t x_stride, float *y, int64_t y_stride,
                       int n_tok, bool accumulate) {
    if (tela_ops_exact_matmul() || !tela_cuda_gemv_ok(ex, w, n_tok))
        tela_cuda_matmul_exact(ex, w, x, x_stride, y, y_stride, n_tok, accumulate);
    else if (n_tok <= gemv_max_tok(ex, w))
        tela_cuda_gemv(ex, &w, &y, &y_stride, 1, NULL, x, x_stride, n_tok, accumulate, NULL, 0.0f);
    else
        tela_cuda_matmul_gemm(ex, w, x, x_stride, y, y_stride, n_tok, accumulate, NULL);
}

/* The class of a weight type's prefill gemm input: f32, bf16 or f16. */
static int gemm_class(tela_type t) { return t == TELA_TYPE_F32 ? 0 : t == TELA_TYPE_BF16 ? 1 : 2; }

/* Prefill products of several matrices of one input: the input converted
 * once when the classes agree. */
static void gemm_many(cuda_exec *ex, const tela_mat *const *w, float *const *y, const int64_t *ys, int n,
                      const float *x, int64_t x_stride, int n_tok, bool accumulate) {
    bool same = n > 1;
    for (int i = 1; i < n; i++) same = same && gemm_class(w[i]->type) == gemm_class(w[0]->type);
    const void *xh = same ? tela_cuda_gemm_input(ex, w, n, x, x_stride, n_tok) : NULL;
    if (same && !xh) return;
    for (int i = 0; i < n; i++) tela_cuda_matmul_gemm(ex, w[i], x, x_stride, y[i], ys[i], n_tok, accumulate, xh);
}

/* Whether the decode kernels take these products with the norm folded in. */
static bool fused_decode(cuda_exec *ex, const tela_mat *w, int n_tok) {
    return !tela_ops_exact_matmul() && n_tok <= gemv_max_tok(ex, w) && tela_cuda_gemv_ok(ex, w, n_tok);
}

/* Decode steps: the matrices grouped by type, each group in one launch,
 * the RMSNorm folded into each block. Otherwise the norm is written to
 * norm->xn and each product reads it. */
static void cuda_matmul_many(tela_exec *e, const tela_norm_in *norm, const tela_matmul_target *t, int n,
                             const float *x, int64_t x_stride, int n_tok, bool accumulate) {
    cuda_exec *ex = as_ex(e);
    bool fused = true;
    for (int i = 0; i < n; i++) fused = fused && fused_decode(ex, t[i].w, n_tok);
    if (fused) {
        bool done[8] = {false};
        for (int i = 0; i < n && i < 8; i++) {
            if (done[i]) continue;
            const tela_mat *ws[TELA_CUDA_GEMV_MAX_W];
            float *ys[TELA_CUDA_GEMV_MAX_W];
            int64_t ss[TELA_CUDA_GEMV_MAX_W];
            int k = 0;
            for (int j = i; j < n && j < 8 && k < TELA_CUDA_GEMV_MAX_W; j++)
                if (!done[j] && t[j].w->type == t[i].w->type && t[j].w->n_cols == t[i].w->n_cols) {
                    ws[k] = t[j].w;
                    ys[k] = t[j].y;
                    ss[k] = t[j].y_stride;
                    done[j] = true;
                    k++;
                }
            tela_cuda_gemv(ex, ws, ys, ss, k, NULL, x, x_stride, n_tok, accumulate, norm ? norm->w : NULL,
                           norm ? norm->eps : 0.0f);
        }
        for (int i = 8; i < n; i++) /* more than eight targets: one at a time */
            tela_cuda_gemv(ex, &t[i].w, &t[i].y, &t[i].y_stride, 1, NULL, x, x_stride, n_tok, accumulate,
                           norm ? norm->w : NULL, norm ? norm->eps : 0.0f);
        return;
    }
    if (norm) {
        tela_cuda_rmsnorm(ex, norm->xn, x_stride, x, x_stride, norm->w, t[0].w->n_cols, n_tok, norm->eps);
        x = norm->xn;
    }
    bool gemm = !tela_ops_exact_matmul() && n <= 8;
    for (int i = 0; i < n; i++) gemm = gemm && n_tok > gemv_max_tok(ex, t[i].w) && tela_cuda_gemv_ok(ex, t[i].w, 1);
    if (gemm) {
        const tela_mat *ws[8];
        float *ys[8];
        int64_t ss[8];
        for (int i = 0; i < n; i++) ws[i] = t[i].w, ys[i] = t[i].y, ss[i] = t[i].y_stride;
        gemm_many(ex, ws, ys, ss, n, x, x_stride, n_tok, accumulate);
        return;
    }
    for (int i = 0; i < n; i++) matmul_one(ex, t[i].w, x, x_stride, t[i].y, t[i].y_stride, n_tok, accumulate);
}

static void cuda_matmul_swiglu(tela_exec *e, const tela_norm_in *norm, const tela_mat *w_gate, const tela_mat *w_up,
                               const float *x, int64_t x_stride, float *out, int64_t out_stride, int n_tok) {
    cuda_exec *ex = as_ex(e);
    const int64_t n_ff = w_gate->n_rows;
    if (fused_decode(ex, w_gate, n_tok) && w_gate->type == w_up->type) {
        tela_cuda_gemv(ex, &w_gate, &out, &out_stride, 1, w_up, x, x_stride, n_tok, false, norm ? norm->w : NULL,
                       norm ? norm->eps : 0.0f);
        return;
    }
    if (norm) {
        tela_cuda_rmsnorm(ex, norm->xn, x_stride, x, x_stride, norm->w, w_gate->n_cols, n_tok, norm->eps);
        x = norm->xn;
    }
    /* the up half in a buffer of its own (the products use the scratch) */
    float *up = (float *)tela_cuda_aux(ex, (size_t)n_tok * (size_t)n_ff * sizeof(float));
    if (!up) return;
    if (!tela_ops_exact_matmul() && n_tok > gemv_max_tok(ex, w_gate) && n_tok > gemv_max_tok(ex, w_up) &&
        tela_cuda_gemv_ok(ex, w_gate, 1) && tela_cuda_gemv_ok(ex, w_up, 1)) {
        const tela_mat *ws[2] = {w_gate, w_up};
        float *ys[2] = {out, up};
        const int64_t ss[2] = {out_stride, n_ff};
        gemm_many(ex, ws, ys, ss, 2, x, x_stride, n_tok, false);
    } else {
        matmul_one(ex, w_gate, x, x_stride, out, out_stride, n_tok, false);
        matmul_one(ex, w_up, x, x_stride, up, n_ff, n_tok, false);
    }
    tela_cuda_swiglu(ex, out, out_stride, up, n_ff, n_ff, n_tok);
}

static void cuda_add(tela_exec *e, float *y, const float *x, int64_t n) { tela_cuda_add(as_ex(e), y, x, n); }

static void cuda_rope_table(tela_exec *e, float *cs, const tela_batch *b, const double *inv_freq, int n_rot) {
    tela_cuda_rope_table(as_ex(e), cs, b->pos, b->n_tok, inv_freq, n_rot);
}

static void cuda_rope(tela_exec *e, float *x, int64_t x_stride, int n_tok, int n_heads, int head_dim, int n_rot,
                      const float *cs, tela_rope_mode mode) {
    tela_cuda_rope(as_ex(e), x, x_stride, n_tok, n_heads, head_dim, n_rot, cs, mode);
}

static void cuda_argmax(tela_exec *e, const float *x, int64_t n, int n_rows, int32_t *out) {
    tela_cuda_argmax(as_ex(e), x, n, n_rows, out);
}

/* The rows of a batched step that need logits (host row list): one
 * device-to-device copy each. */
static void cuda_copy_rows(tela_exec *e, float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                           const int32_t *rows, int n, int64_t width) {
    cuda_exec *ex = as_ex(e);
    ex->after_copy = true;
    for (int i = 0; i < n; i++)
        tela_cuda_check(ex, cudaMemcpyAsync(dst + (size_t)i * dst_stride, src + (size_t)rows[i] * src_stride,
                                            (size_t)width * sizeof(float), cudaMemcpyDeviceToDevice, ex->stream),
                        "row copy");
}

static void cuda_copy_spans(tela_exec *e, const tela_copy_span *spans, int n) {
    tela_cuda_copy_spans(as_ex(e), spans, n);
}

/* ----------------------------------------------------------- KV cache */

/* The paging of batch b for a paged cache of blocks of 1 << shift
 * positions (built and uploaded when b is a new step), NULL after a
 * failure (kept on ex). Batched steps are never captured. */
static const cuda_paging *paging(cuda_exec *ex, const tela_batch *b, int block) {
    int shift = 0;
    while ((1 << shift) < block) shift++;
    if (ex->pg_serial == b->serial && b->serial != 0 && ex->pg.shift == shift) return &ex->pg;
    if (!b->seqs) {
        tela_cuda_check(ex, cudaErrorInvalidValue, "a paged KV cache takes batched steps only");
        return NULL;
    }
    size_t n_flat = 0;
    for (int i = 0; i < b->n_seq; i++)
        n_flat += b->seqs[i].n_tok > 0 ? (size_t)((b->seqs[i].pos0 + b->seqs[i].n_tok - 1) >> shift) + 1 : 0;
    const size_t need = 2 * (size_t)b->n_tok + n_flat;
    if (need > ex->pg_host_cap) {
        int32_t *h = (int32_t *)realloc(ex->pg_host, need * sizeof *h);
        if (!h) {
            tela_cuda_check(ex, cudaErrorMemoryAllocation, "the paging tables (host)");
            return NULL;
        }
        ex->pg_host = h;
        ex->pg_host_cap = need;
    }
    if (b->n_seq > ex->pg_seq_cap) {
        int32_t *t = (int32_t *)realloc(ex->pg_seq_tbl, (size_t)b->n_seq * sizeof *t);
        if (!t) {
            tela_cuda_check(ex, cudaErrorMemoryAllocation, "the paging tables (host)");
            return NULL;
        }
        ex->pg_seq_tbl = t;
        ex->pg_seq_cap = b->n_seq;
    }
    if (need > ex->pg_dev_cap) {
        cudaFree(ex->pg_dev);
        ex->pg_dev = NULL;
        ex->pg_dev_cap = 0;
        const size_t cap = need + need / 2 + 64;
        if (!tela_cuda_check(ex, cudaMalloc(&ex->pg_dev, cap * sizeof(int32_t)), "the paging tables")) return NULL;
        ex->pg_dev_cap = cap;
    }
    int32_t *rows = ex->pg_host, *tok_tbl = rows + b->n_tok, *flat = tok_tbl + b->n_tok;
    const int32_t mask = (1 << shift) - 1;
    size_t f = 0;
    for (int i = 0; i < b->n_seq; i++) {
        const tela_batch_seq *q = &b->seqs[i];
        ex->pg_seq_tbl[i] = (int32_t)f;
        if (q->n_tok <= 0) continue;
        const int32_t nb = ((q->pos0 + q->n_tok - 1) >> shift) + 1;
        for (int32_t k = 0; k < nb; k++) flat[f + (size_t)k] = q->blocks[k];
        for (int j = 0; j < q->n_tok; j++) {
            const int32_t p = q->pos0 + j;
            rows[q->tok0 + j] = (q->blocks[p >> shift] << shift) | (p & mask);
            tok_tbl[q->tok0 + j] = (int32_t)f;
        }
        f += (size_t)nb;
    }
    if (cuda_upload(&ex->head, ex->pg_dev, ex->pg_host, need * sizeof(int32_t)) != TELA_OK) return NULL;
    ex->pg.rows = ex->pg_dev;
    ex->pg.tok_tbl = ex->pg_dev + b->n_tok;
    ex->pg.flat = ex->pg_dev + 2 * (size_t)b->n_tok;
    ex->pg.shift = shift;
    ex->pg.n_seq = b->n_seq;
    ex->pg.seqs = b->seqs;
    ex->pg.seq_tbl = ex->pg_seq_tbl;
    ex->pg_serial = b->serial;
    return &ex->pg;
}

static void cuda_kv_free(tela_kv_cache *kv) {
    cuda_kv *c = (cuda_kv *)kv;
    cudaFree(c->k);
    cudaFree(c->v);
    free(c);
}

static tela_status cuda_kv_create(tela_exec *e, const tela_kv_shape *shape, tela_kv_cache **out) {
    cuda_exec *ex = as_ex(e);
    *out = NULL;
    if (shape->dtype == TELA_KV_DTYPE_Q8_0)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "session: the CUDA backend has no q8_0 KV cache; use --kv-type f16");
    cudaSetDevice(ex->be->device);
    cuda_kv *c = (cuda_kv *)calloc(1, sizeof *c);
    if (!c) return tela_errorf(TELA_ERR_NOMEM, "session: out of memory");
    c->head.ops = &cuda_ops_table;
    c->head.shape = *shape;
    c->elt = shape->dtype == TELA_KV_DTYPE_F16 ? 2 : 4;
    const size_t per = (size_t)shape->n_layer * shape->n_kv_head * (size_t)shape->n_ctx;
    const size_t kb = per * shape->k_dim * c->elt, vb = per * shape->v_dim * c->elt;
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    if (kb + vb + ((size_t)64 << 20) > fr) {
        const size_t elt = c->elt;
        free(c);
        return tela_errorf(TELA_ERR_NOMEM,
                           "session: a KV cache of %d tokens (%s) needs %.1f MiB of GPU memory but only %.1f MiB are "
                           "free: lower the context (-c)%s",
                           shape->n_ctx, elt == 2 ? "f16" : "f32", mib(kb + vb), mib(fr),
                           elt == 4 ? " or use an f16 KV cache (--kv-type f16)" : "");
    }
    tela_status s = dev_alloc(ex->be, kb, "the KV cache (keys)", &c->k);
    if (s == TELA_OK) s = dev_alloc(ex->be, vb, "the KV cache (values)", &c->v);
    if (s != TELA_OK) {
        cuda_kv_free(&c->head);
        return s;
    }
    *out = &c->head;
    return TELA_OK;
}

static void cuda_kv_clear(tela_exec *e, tela_kv_cache *kv) {
    (void)e;
    (void)kv;
}

/* Rows [src, src + n) to [dst, dst + n) of every layer and head (a
 * paged cache's block copies). */
static tela_status cuda_kv_copy_rows(tela_exec *e, tela_kv_cache *kv, int32_t dst, int32_t src, int32_t n) {
    cuda_exec *ex = as_ex(e);
    ex->after_copy = true;
    const cuda_kv *c = (const cuda_kv *)kv;
    const tela_kv_shape *s = &kv->shape;
    for (int l = 0; l < s->n_layer; l++)
        for (int which = 0; which < 2; which++) {
            const size_t dim = (size_t)(which ? s->v_dim : s->k_dim), pitch = (size_t)s->n_ctx * dim * c->elt;
            unsigned char *base = (unsigned char *)(which ? c->v : c->k) + (size_t)l * s->n_kv_head * pitch;
            tela_cuda_check(ex, cudaMemcpy2DAsync(base + (size_t)dst * dim * c->elt, pitch, base + (size_t)src * dim * c->elt,
                                                  pitch, (size_t)n * dim * c->elt, s->n_kv_head, cudaMemcpyDeviceToDevice,
                                                  ex->stream),
                            "KV row copy");
        }
    return take_failure(ex);
}

static size_t cuda_kv_image_bytes(const tela_kv_cache *kv, int32_t n_past) {
    const cuda_kv *c = (const cuda_kv *)kv;
    const tela_kv_shape *s = &kv->shape;
    return (size_t)s->n_layer * s->n_kv_head * (size_t)n_past * (size_t)(s->k_dim + s->v_dim) * c->elt;
}

/* The image: per layer, the keys [n_kv_head][n_past][k_dim], then the
 * values, in the cache's precision. */
static tela_status kv_copy(cuda_exec *ex, const cuda_kv *c, int32_t n_past, unsigned char *host, bool save) {
    ex->after_copy = true;
    const tela_kv_shape *s = &c->head.shape;
    if (n_past == 0) return TELA_OK;
    for (int l = 0; l < s->n_layer; l++)
        for (int kv = 0; kv < 2; kv++) {
            const size_t dim = (size_t)(kv ? s->v_dim : s->k_dim);
            const size_t pitch = (size_t)s->n_ctx * dim * c->elt, width = (size_t)n_past * dim * c->elt;
            unsigned char *dev = (unsigned char *)(kv ? c->v : c->k) + (size_t)l * s->n_kv_head * pitch;
            cudaError_t e = save ? cudaMemcpy2DAsync(host, width, dev, pitch, width, s->n_kv_head,
                                                     cudaMemcpyDeviceToHost, ex->stream)
                                 : cudaMemcpy2DAsync(dev, pitch, host, width, width, s->n_kv_head,
                                                     cudaMemcpyHostToDevice, ex->stream);
            if (!tela_cuda_check(ex, e, save ? "saving the KV cache" : "restoring the KV cache")) return take_failure(ex);
            host += width * s->n_kv_head;
        }
    tela_cuda_check(ex, cudaStreamSynchronize(ex->stream), "KV cache copy");
    return take_failure(ex);
}

static tela_status cuda_kv_save(tela_exec *e, const tela_kv_cache *kv, int32_t n_past, void *dst) {
    if (kv->shape.block_size > 0)
        return tela_errorf(TELA_ERR_INTERNAL, "a paged KV cache has no snapshot image (its slots are checkpointed)");
    return kv_copy(as_ex(e), (const cuda_kv *)kv, n_past, (unsigned char *)dst, true);
}

static tela_status cuda_kv_load(tela_exec *e, tela_kv_cache *kv, int32_t n_past, const void *src) {
    if (kv->shape.block_size > 0)
        return tela_errorf(TELA_ERR_INTERNAL, "a paged KV cache has no snapshot image (its slots are checkpointed)");
    return kv_copy(as_ex(e), (const cuda_kv *)kv, n_past, (unsigned char *)(uintptr_t)src, false);
}

/* The rows the stores write: the positions, or a paged cache's rows. */
static const int32_t *store_rows(cuda_exec *ex, const tela_kv_cache *kv, const tela_batch *b) {
    if (kv->shape.block_size <= 0) return b->pos;
    const cuda_paging *pg = paging(ex, b, kv->shape.block_size);
    return pg ? pg->rows : NULL;
}

static void cuda_kv_store(tela_exec *e, tela_kv_cache *kv, int layer, const float *k, int64_t k_stride, const float *v,
                          int64_t v_stride, const tela_batch *b) {
    const int32_t *rows = store_rows(as_ex(e), kv, b);
    if (rows) tela_cuda_kv_store(as_ex(e), (cuda_kv *)kv, layer, k, k_stride, v, v_stride, rows, b->n_tok);
}

static void cuda_rope_store(tela_exec *e, tela_kv_cache *kv, int layer, float *q, int64_t q_stride, int n_head,
                            float *k, int64_t k_stride, const float *v, int64_t v_stride, const tela_batch *b,
                            const float *cs, int n_rot, tela_rope_mode mode, const tela_head_norms *norms) {
    const int32_t *rows = store_rows(as_ex(e), kv, b);
    if (rows)
        tela_cuda_rope_store(as_ex(e), (cuda_kv *)kv, layer, q, q_stride, n_head, k, k_stride, v, v_stride, rows,
                             b->n_tok, cs, n_rot, mode, norms);
}

static void cuda_attention(tela_exec *e, const tela_kv_cache *kv, int layer, const float *q, int64_t q_stride,
                           float *out, int64_t out_stride, const tela_batch *b, int n_head, float scale) {
    cuda_exec *ex = as_ex(e);
    const cuda_paging *pg = NULL;
    if (kv->shape.block_size > 0 && !(pg = paging(ex, b, kv->shape.block_size))) return;
    const int32_t bucket_len = tela_cuda_bucket_len(tela_cuda_length_bucket(b->pos0 + b->n_tok));
    tela_cuda_attention(ex, (const cuda_kv *)kv, layer, q, q_stride, out, out_stride, b->pos, b->n_tok, b->pos0,
                        n_head, scale, bucket_len, pg);
}

/* ------------------------------------------------ Gated DeltaNet layers */

static void cuda_zero(tela_exec *e, void *p, size_t bytes) {
    cuda_exec *ex = as_ex(e);
    ex->after_copy = true;
    tela_cuda_check(ex, cudaMemsetAsync(p, 0, bytes, ex->stream), "clearing state");
}

static void cuda_sigmoid_gate(tela_exec *e, float *out, int64_t os, const float *gate, int64_t gs, int n_rows, int n) {
    tela_cuda_sigmoid_gate(as_ex(e), out, os, gate, gs, n_rows, n);
}

static void cuda_conv1d_silu(tela_exec *e, const float *x, int64_t xs, int n_tok, int channels, int kernel,
                             const float *w, float *state, float *out, int64_t os) {
    tela_cuda_conv1d_silu(as_ex(e), x, xs, n_tok, channels, kernel, w, state, out, os);
}

static void cuda_gdn_gates(tela_exec *e, float *qkv, int64_t qs, int n_qk_heads, int dk, float *beta, float *g, int nv,
                           int n_tok, const float *a, const float *dt_bias, float eps) {
    tela_cuda_gdn_gates(as_ex(e), qkv, qs, n_qk_heads, dk, beta, g, nv, n_tok, a, dt_bias, eps);
}

static void cuda_gdn_delta(tela_exec *e, const tela_gdn_args *a) { tela_cuda_gdn_delta(as_ex(e), a); }

/* Remembered for the next launch (cuda_act.cuh; cleared by every launch). */
static void cuda_next_input_of(tela_exec *e, const tela_mat *w) { as_ex(e)->preq_hint = w; }

static uint64_t cuda_kernel_launches(const tela_exec *e) { return ((const cuda_exec *)e)->launches; }

/* ------------------------------------------------------------ profiling */

/* Marks are CUDA events recorded on the exec's stream, so each operation is
 * timed on the device, not by host clocks around asynchronous launches. */
static int cuda_prof_mark(tela_exec *e) {
    cuda_exec *ex = as_ex(e);
    if (ex->n_ev == ex->cap_ev) {
        int cap = ex->cap_ev ? 2 * ex->cap_ev : 1024;
        cudaEvent_t *ev = (cudaEvent_t *)realloc(ex->ev, (size_t)cap * sizeof *ev);
        if (!ev) return -1;
        ex->ev = ev;
        for (int i = ex->cap_ev; i < cap; i++)
            if (cudaEventCreate(&ex->ev[i]) != cudaSuccess) {
                cudaGetLastError();
                ex->cap_ev = i;
                return -1;
            }
        ex->cap_ev = cap;
    }
    if (cudaEventRecord(ex->ev[ex->n_ev], ex->stream) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return ex->n_ev++;
}

static double cuda_prof_seconds(tela_exec *e, int a, int b) {
    cuda_exec *ex = as_ex(e);
    float ms = 0.0f;
    if (a < 0 || b < 0 || a >= ex->n_ev || b >= ex->n_ev) return 0.0;
    if (cudaEventElapsedTime(&ms, ex->ev[a], ex->ev[b]) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    return ms * 1e-3;
}

static void cuda_prof_clear(tela_exec *e) { as_ex(e)->n_ev = 0; }

/* While profiling, decode steps are launched eagerly (each operation
 * bracketed by its events) instead of replayed as graphs. */
static void cuda_prof_mode(tela_exec *e, bool on) {
    cuda_exec *ex = as_ex(e);
    if (on) {
        ex->graphs_before = ex->graphs;
        ex->graphs = false;
    } else {
        ex->graphs = ex->graphs_before;
    }
}

const tela_backend_ops tela_cuda_ops_table = {
    cuda_destroy,
    cuda_mem_info,
    cuda_type_supported,
    cuda_prepare_mats,
    cuda_mats_bytes,
    cuda_alloc,
    cuda_free_mem,
    cuda_make_const,
    cuda_host_alloc,
    cuda_host_free,
    cuda_exec_create,
    cuda_exec_free,
    cuda_preferred_batch,
    cuda_sync,
    cuda_upload,
    cuda_download,
    cuda_graph_begin,
    cuda_graph_end,
    cuda_length_bucket,
    cuda_graphs_drop,
    cuda_get_rows,
    cuda_rmsnorm,
    cuda_matmul_many,
    cuda_matmul_swiglu,
    cuda_add,
    cuda_rope_table,
    cuda_rope,
    cuda_argmax,
    cuda_copy_rows,
    cuda_copy_spans,
    cuda_kv_create,
    cuda_kv_free,
    cuda_kv_clear,
    cuda_kv_image_bytes,
    cuda_kv_save,
    cuda_kv_load,
    cuda_kv_copy_rows,
    cuda_kv_store,
    cuda_rope_store,
    cuda_attention,
    cuda_zero,
    cuda_sigmoid_gate,
    cuda_conv1d_silu,
    cuda_gdn_gates,
    cuda_gdn_delta,
    cuda_prof_mark,
    cuda_prof_seconds,
    cuda_prof_clear,
    cuda_prof_mode,
    tela_cuda_activate,
    tela_cuda_wait_for,
    tela_cuda_copy_from,
    tela_cuda_comm_create,
    tela_cuda_comm_free,
    tela_cuda_comm_allreduce,
    cuda_next_input_of,
    cuda_kernel_launches,
};

tela_status tela_backend_cuda_create(int device, int n_threads, tela_backend **out) {
    *out = NULL;
    cudaError_t e = cudaSetDevice(device);
    cudaDeviceProp prop;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return tela_errorf(TELA_ERR_UNSUPPORTED, "cuda:%d: cannot use the GPU: %s", device, cudaGetErrorString(e));
    }
    if (prop.major < 8)
        return tela_errorf(TELA_ERR_UNSUPPORTED, "cuda:%d: %s has compute capability %d.%d; tela needs 8.0 or newer",
                           device, prop.name, prop.major, prop.minor);
    cuda_backend *b = (cuda_backend *)calloc(1, sizeof *b);
    if (!b) return tela_errorf(TELA_ERR_NOMEM, "out of memory");
    b->head.ops = &cuda_ops_table;
    b->head.kind = TELA_BACKEND_CUDA;
    b->head.host_visible = false;
    b->head.preferred_batch = 4096;
    b->head.n_threads = n_threads;
    b->device = device;
    b->sm_count = prop.multiProcessorCount;
    b->cc_major = prop.major;
    b->cc_minor = prop.minor;
    b->smem_optin = prop.sharedMemPerBlockOptin;
    snprintf(b->head.description, sizeof b->head.description, "cuda:%d (%.64s, %.1f GiB, sm_%d%d, %d SMs)", device,
             prop.name, (double)prop.totalGlobalMem / (1 << 30), prop.major, prop.minor, prop.multiProcessorCount);
    *out = &b->head;
    return TELA_OK;
}
