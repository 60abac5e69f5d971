/* threadpool.h: a persistent pool of worker threads (the CPU backend's
 * operations, the engine's host sampling).
 *
 * The calling thread is worker 0 and the pool owns workers 1..n-1, created
 * once and parked between jobs (a short spin, then a condition variable), so
 * running an op costs no thread creation. A job is a number of chunks; every
 * worker claims chunks from a shared counter until none are left, and the
 * job ends when all chunks are done. A worker that is not scheduled in time
 * (a loaded machine) simply claims nothing: the others, the caller
 * included, do its share, and nobody waits for it. Which thread runs which
 * chunk varies from run to run, so a chunk's result must depend only on the
 * chunk index. Each worker also has a scratch buffer of floats, sized by
 * tela_threadpool_reserve() before the jobs that need it, and the pool has
 * one shared buffer for data a whole job reads (quantized activations).
 *
 * A pool is used by one thread at a time (a session owns its pool). */
#ifndef TELA_UTIL_THREADPOOL_H
#define TELA_UTIL_THREADPOOL_H

#include <stddef.h>
#include "tela/tela.h"

typedef struct tela_threadpool tela_threadpool;

typedef void (*tela_task_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0 means one per online CPU. */
tela_status tela_threadpool_create(int n_threads, tela_threadpool **out);
void tela_threadpool_free(tela_threadpool *pool);
int tela_threadpool_n_threads(const tela_threadpool *pool);

/* How long a worker busy-waits for the next job before it sleeps (in
 * pause instructions; default 20000, a few hundred microseconds to a few
 * milliseconds). 0: workers sleep at once, for pools whose jobs come far
 * apart and whose spinning would take cores from other work (the engine's
 * sampling beside a CPU forward pass). */
void tela_threadpool_set_spin(tela_threadpool *pool, int iters);

/* Calls fn(ctx, ith, nth) for ith = 0..nth-1 (nth = the thread count) and
 * returns when all have finished. Each call is a chunk: it may run on any
 * thread, but calls with different ith never run at once on the same
 * thread, so fn may use tela_threadpool_scratch(pool, ith). */
void tela_threadpool_run(tela_threadpool *pool, tela_task_fn fn, void *ctx);

/* Calls fn(ctx, chunk, ith) for chunk = 0..n_chunks-1, each once, on
 * whichever thread claims it first (ith: that thread, for its scratch), and
 * returns when all chunks are done. */
typedef void (*tela_chunk_fn)(void *ctx, int chunk, int ith);
void tela_threadpool_run_chunks(tela_threadpool *pool, tela_chunk_fn fn, void *ctx, int n_chunks);

/* A buffer of at least `bytes` bytes (64-byte aligned) shared by the jobs'
 * workers; grown as needed, so a previous pointer is invalidated. NULL if
 * it cannot be allocated. Call between jobs, from the pool's user. */
void *tela_threadpool_shared(tela_threadpool *pool, size_t bytes);

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
