/* threadpool.c: persistent worker threads that run one job at a time,
 * handing out its chunks dynamically.
 *
 * Protocol: one 64-bit atomic word holds the job: generation (32 bits),
 * number of chunks and next chunk to claim (16 bits each), so a claim sees
 * the chunk count of the same job. The caller publishes (fn, ctx), zeroes
 * the done count and stores the word with a new generation. Workers spin briefly watching the
 * generation, then sleep on a condition variable (the caller only signals
 * when someone sleeps). Everyone, the caller included, claims chunks by a
 * compare-and-swap on the word that also checks the generation, so a worker
 * waking late finds either the job's remaining chunks or a job that has
 * moved on, and never touches a finished job's context. The caller returns
 * when the done count reaches n_chunks (spinning briefly, then sleeping on
 * a second condition variable that the worker finishing the last chunk
 * signals); it never waits for a worker that has claimed nothing. */
#include "util/threadpool.h"
#include "util/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TELA_CPU_RELAX() _mm_pause()
#else
#define TELA_CPU_RELAX() ((void)0)
#endif

/* Iterations of busy-waiting before sleeping: long enough to bridge the gap
 * between consecutive ops of a forward pass, short enough not to burn a
 * shared machine's cores while idle. */
#define TELA_SPIN_ITERS 20000

typedef struct tela_worker {
    tela_threadpool *pool;
    int ith;
    pthread_t thread;
} tela_worker;

struct tela_threadpool {
    int n_threads;
    tela_worker *workers;  /* [n_threads]; entry 0 is the caller, no thread */
    int n_started;

    pthread_mutex_t mutex;
    pthread_cond_t wake;   /* workers sleep here between jobs */
    pthread_cond_t done;   /* the caller sleeps here until a job ends */

    tela_chunk_fn fn;      /* the current job; published by `state` */
    void *ctx;
    atomic_uint_least64_t state; /* generation << 32 | n_chunks << 16 | next */
    atomic_int n_done;     /* chunks of the current job finished */
    atomic_int n_sleeping;
    atomic_bool caller_waiting;
    atomic_bool stop;
    atomic_int spin_iters; /* a worker's busy-wait after a job (tela_threadpool_set_spin) */
    uint32_t generation;   /* the caller's copy */

    float **scratch;       /* [n_threads] */
    size_t scratch_floats;
    void *shared;
    size_t shared_bytes;
};

int tela_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Claims and runs chunks of job `gen` until none are left or the job is
 * over. fn and ctx are read only after a successful claim: the job cannot
 * end while a claimed chunk is unfinished, so they are still this job's. */
static void work(tela_threadpool *pool, uint32_t gen, int ith) {
    for (;;) {
        uint_least64_t s = atomic_load(&pool->state);
        if ((uint32_t)(s >> 32) != gen) return;
        int n = (int)((s >> 16) & 0xffff);
        int c = (int)(s & 0xffff);
        if (c >= n) return;
        if (!atomic_compare_exchange_weak(&pool->state, &s, s + 1)) continue;
        pool->fn(pool->ctx, c, ith);
        if (atomic_fetch_add(&pool->n_done, 1) + 1 == n && ith != 0 && atomic_load(&pool->caller_waiting)) {
            pthread_mutex_lock(&pool->mutex);
            pthread_cond_broadcast(&pool->done);
            pthread_mutex_unlock(&pool->mutex);
        }
    }
}

static void *worker_main(void *arg) {
    tela_worker *w = arg;
    tela_threadpool *pool = w->pool;
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen = (uint32_t)(atomic_load(&pool->state) >> 32);
        const int spin = atomic_load_explicit(&pool->spin_iters, memory_order_relaxed);
        for (int i = 0; i < spin && gen == seen && !atomic_load(&pool->stop); i++) {
            TELA_CPU_RELAX();
            gen = (uint32_t)(atomic_load(&pool->state) >> 32);
        }
        if (gen == seen) {
            pthread_mutex_lock(&pool->mutex);
            atomic_fetch_add(&pool->n_sleeping, 1);
            while ((gen = (uint32_t)(atomic_load(&pool->state) >> 32)) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->wake, &pool->mutex);
            atomic_fetch_sub(&pool->n_sleeping, 1);
            pthread_mutex_unlock(&pool->mutex);
        }
        if (atomic_load(&pool->stop)) break;
        seen = gen;
        work(pool, gen, w->ith);
    }
    return NULL;
}

tela_status tela_threadpool_create(int n_threads, tela_threadpool **out) {
    *out = NULL;
    if (n_threads <= 0) n_threads = tela_cpu_count();
    if (n_threads > 1024) return tela_errorf(TELA_ERR_ARG, "thread pool: %d threads is too many (at most 1024)", n_threads);
    tela_threadpool *pool = calloc(1, sizeof *pool);
    if (!pool) return tela_errorf(TELA_ERR_NOMEM, "thread pool: out of memory");
    pool->n_threads = n_threads;
    pool->workers = calloc((size_t)n_threads, sizeof *pool->workers);
    pool->scratch = calloc((size_t)n_threads, sizeof *pool->scratch);
    if (!pool->workers || !pool->scratch) {
        free(pool->workers);
        free(pool->scratch);
        free(pool);
        return tela_errorf(TELA_ERR_NOMEM, "thread pool: out of memory");
    }
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    atomic_init(&pool->state, 0);
    atomic_init(&pool->n_done, 0);
    atomic_init(&pool->n_sleeping, 0);
    atomic_init(&pool->caller_waiting, false);
    atomic_init(&pool->stop, false);
    atomic_init(&pool->spin_iters, TELA_SPIN_ITERS);
    pool->n_started = 1;
    for (int i = 1; i < n_threads; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].ith = i;
        int rc = pthread_create(&pool->workers[i].thread, NULL, worker_main, &pool->workers[i]);
        if (rc != 0) {
            tela_threadpool_free(pool);
            return tela_errorf(TELA_ERR_NOMEM, "thread pool: cannot start thread %d of %d: %s", i, n_threads,
                               strerror(rc));
        }
        pool->n_started = i + 1;
    }
    *out = pool;
    return TELA_OK;
}

void tela_threadpool_free(tela_threadpool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mutex);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (int i = 1; i < pool->n_started; i++) pthread_join(pool->workers[i].thread, NULL);
    pthread_mutex_destroy(&pool->mutex);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    for (int i = 0; i < pool->n_threads; i++) free(pool->scratch[i]);
    free(pool->scratch);
    free(pool->shared);
    free(pool->workers);
    free(pool);
}

int tela_threadpool_n_threads(const tela_threadpool *pool) { return pool ? pool->n_threads : 1; }

void tela_threadpool_set_spin(tela_threadpool *pool, int iters) {
    atomic_store_explicit(&pool->spin_iters, iters > 0 ? iters : 0, memory_order_relaxed);
}

/* More chunks than the state word can count run as groups of chunks. */
#define TELA_MAX_CHUNKS 0xffff

typedef struct {
    tela_chunk_fn fn;
    void *ctx;
    int n_chunks, group;
} group_job;

static void group_chunk(void *arg, int chunk, int ith) {
    const group_job *job = arg;
    int c0 = chunk * job->group;
    for (int c = c0; c < c0 + job->group && c < job->n_chunks; c++) job->fn(job->ctx, c, ith);
}

void tela_threadpool_run_chunks(tela_threadpool *pool, tela_chunk_fn fn, void *ctx, int n_chunks) {
    if (n_chunks <= 0) return;
    if (pool->n_threads == 1 || n_chunks == 1) {
        for (int c = 0; c < n_chunks; c++) fn(ctx, c, 0);
        return;
    }
    if (n_chunks > TELA_MAX_CHUNKS) {
        group_job g = {fn, ctx, n_chunks, (n_chunks + TELA_MAX_CHUNKS - 1) / TELA_MAX_CHUNKS};
        tela_threadpool_run_chunks(pool, group_chunk, &g, (n_chunks + g.group - 1) / g.group);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store(&pool->n_done, 0);
    uint32_t gen = ++pool->generation;
    if (gen == 0) gen = ++pool->generation; /* 0 is the workers' initial "seen" */
    atomic_store(&pool->state, (uint_least64_t)gen << 32 | (uint_least64_t)n_chunks << 16);
    /* A worker counts itself as sleeping before re-reading the generation
     * under the mutex, so either it sees the new generation or we see it. */
    if (atomic_load(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mutex);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mutex);
    }
    work(pool, gen, 0);
    for (int i = 0; i < TELA_SPIN_ITERS && atomic_load(&pool->n_done) != n_chunks; i++) TELA_CPU_RELAX();
    if (atomic_load(&pool->n_done) != n_chunks) {
        pthread_mutex_lock(&pool->mutex);
        atomic_store(&pool->caller_waiting, true);
        while (atomic_load(&pool->n_done) != n_chunks) pthread_cond_wait(&pool->done, &pool->mutex);
        atomic_store(&pool->caller_waiting, false);
        pthread_mutex_unlock(&pool->mutex);
    }
}

typedef struct {
    tela_task_fn fn;
    void *ctx;
    int nth;
} share_job;

static void share_chunk(void *arg, int chunk, int ith) {
    const share_job *job = arg;
    (void)ith;
    job->fn(job->ctx, chunk, job->nth);
}

void tela_threadpool_run(tela_threadpool *pool, tela_task_fn fn, void *ctx) {
    share_job job = {fn, ctx, pool->n_threads};
    tela_threadpool_run_chunks(pool, share_chunk, &job, pool->n_threads);
}

void *tela_threadpool_shared(tela_threadpool *pool, size_t bytes) {
    if (bytes <= pool->shared_bytes) return pool->shared;
    if (bytes > ((size_t)1 << 40)) return NULL;
    size_t cap = (bytes + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, cap) != 0) return NULL;
    free(pool->shared);
    pool->shared = p;
    pool->shared_bytes = cap;
    return p;
}

tela_status tela_threadpool_reserve(tela_threadpool *pool, size_t n_floats) {
    if (n_floats <= pool->scratch_floats) return TELA_OK;
    if (n_floats > ((size_t)1 << 40) / sizeof(float))
        return tela_errorf(TELA_ERR_NOMEM, "thread pool: scratch of %zu floats is too large", n_floats);
    size_t bytes = (n_floats * sizeof(float) + 63) & ~(size_t)63;
    for (int i = 0; i < pool->n_threads; i++) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes) != 0)
            return tela_errorf(TELA_ERR_NOMEM, "thread pool: cannot allocate %zu bytes of scratch", bytes);
        memset(p, 0, bytes);
        free(pool->scratch[i]);
        pool->scratch[i] = p;
    }
    pool->scratch_floats = n_floats;
    return TELA_OK;
}

float *tela_threadpool_scratch(tela_threadpool *pool, int ith) { return pool->scratch[ith]; }

size_t tela_threadpool_scratch_size(const tela_threadpool *pool) { return pool->scratch_floats; }
