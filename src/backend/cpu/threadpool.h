/* threadpool.h: a persistent pool of worker threads for the CPU backend.
 *
 * The calling thread is worker 0 and the pool owns workers 1..n-1, created
 * once and parked between jobs (a short spin, then a condition variable), so
 * running an op costs no thread creation. A job is one function called on
 * every worker with (ith, nth); the function splits its work by ith. Each
 * worker also has a scratch buffer of floats, sized by
 * tela_threadpool_reserve() before the jobs that need it.
 *
 * A pool is used by one thread at a time (a session owns its pool). */
#ifndef TELA_BACKEND_CPU_THREADPOOL_H
#define TELA_BACKEND_CPU_THREADPOOL_H

#include <stddef.h>
#include "tela/tela.h"

typedef struct tela_threadpool tela_threadpool;

typedef void (*tela_task_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0 means one per online CPU. */
tela_status tela_threadpool_create(int n_threads, tela_threadpool **out);
void tela_threadpool_free(tela_threadpool *pool);
int tela_threadpool_n_threads(const tela_threadpool *pool);

/* Calls fn(ctx, ith, nth) for ith = 0..nth-1, one call per worker, and
 * returns when all have finished. */
void tela_threadpool_run(tela_threadpool *pool, tela_task_fn fn, void *ctx);

/* Makes every worker's scratch hold at least n_floats floats (64-byte
 * aligned). Never shrinks. */
tela_status tela_threadpool_reserve(tela_threadpool *pool, size_t n_floats);
float *tela_threadpool_scratch(tela_threadpool *pool, int ith);
size_t tela_threadpool_scratch_size(const tela_threadpool *pool);

/* The number of online CPUs (at least 1). */
int tela_cpu_count(void);

/* Splits n items into nth nearly equal contiguous ranges; sets [*begin, *end)
 * for worker ith. */
static inline void tela_split_range(long long n, int ith, int nth, long long *begin, long long *end) {
    *begin = n * ith / nth;
    *end = n * (ith + 1) / nth;
}

#endif
