/* threadpool.c: persistent worker threads that run one job at a time.
 *
 * Protocol: the caller publishes (fn, ctx), sets the count of workers still
 * running and bumps a generation counter. Workers spin briefly watching the
 * generation, then sleep on a condition variable; the caller only signals
 * when someone sleeps. The caller runs share 0 itself, then waits for the
 * count to reach zero (spinning briefly, then sleeping on a second condition
 * variable that the last worker signals). */
#include "backend/cpu/threadpool.h"
#include "util/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
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

    tela_task_fn fn;       /* the current job; published by `generation` */
    void *ctx;
    atomic_uint generation;
    atomic_int pending;    /* workers (excluding the caller) still running */
    atomic_int n_sleeping;
    atomic_bool stop;

    float **scratch;       /* [n_threads] */
    size_t scratch_floats;
};

int tela_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void *worker_main(void *arg) {
    tela_worker *w = arg;
    tela_threadpool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen = atomic_load(&pool->generation);
        for (int i = 0; i < TELA_SPIN_ITERS && gen == seen && !atomic_load(&pool->stop); i++) {
            TELA_CPU_RELAX();
            gen = atomic_load(&pool->generation);
        }
        if (gen == seen) {
            pthread_mutex_lock(&pool->mutex);
            atomic_fetch_add(&pool->n_sleeping, 1);
            while ((gen = atomic_load(&pool->generation)) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->wake, &pool->mutex);
            atomic_fetch_sub(&pool->n_sleeping, 1);
            pthread_mutex_unlock(&pool->mutex);
        }
        if (atomic_load(&pool->stop)) break;
        seen = gen;
        pool->fn(pool->ctx, w->ith, pool->n_threads);
        if (atomic_fetch_sub(&pool->pending, 1) == 1) {
            pthread_mutex_lock(&pool->mutex);
            pthread_cond_broadcast(&pool->done);
            pthread_mutex_unlock(&pool->mutex);
        }
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
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->n_sleeping, 0);
    atomic_init(&pool->stop, false);
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
    free(pool->workers);
    free(pool);
}

int tela_threadpool_n_threads(const tela_threadpool *pool) { return pool ? pool->n_threads : 1; }

void tela_threadpool_run(tela_threadpool *pool, tela_task_fn fn, void *ctx) {
    if (pool->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store(&pool->pending, pool->n_threads - 1);
    atomic_fetch_add(&pool->generation, 1);
    /* A worker counts itself as sleeping before re-reading the generation
     * under the mutex, so either it sees the new generation or we see it. */
    if (atomic_load(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mutex);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mutex);
    }
    fn(ctx, 0, pool->n_threads);
    for (int i = 0; i < TELA_SPIN_ITERS && atomic_load(&pool->pending) != 0; i++) TELA_CPU_RELAX();
    if (atomic_load(&pool->pending) != 0) {
        pthread_mutex_lock(&pool->mutex);
        while (atomic_load(&pool->pending) != 0) pthread_cond_wait(&pool->done, &pool->mutex);
        pthread_mutex_unlock(&pool->mutex);
    }
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
