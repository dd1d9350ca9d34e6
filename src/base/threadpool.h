/* A persistent pool of threads that run one function on every thread.
 *
 * The forward pass splits each op (a matmul, a norm over rows) across the
 * pool, hundreds of times per decoded token, so a call must cost a few
 * microseconds: threads are made once in strata_pool_new and wait between
 * calls: they spin for up to 0.2 ms, then sleep (a pool with more threads
 * than the CPUs the process may use sleeps at once, since spinning would
 * only take CPU time from the threads with work). Work is split statically,
 * by the thread's index, which is what keeps results independent of
 * timing.
 *
 * One thread owns a pool: it makes it, calls strata_pool_run (from one
 * thread at a time, never from inside fn) and frees it. */
#ifndef STRATA_BASE_THREADPOOL_H
#define STRATA_BASE_THREADPOOL_H

#include <stdint.h>

typedef struct strata_pool strata_pool;

/* The work of one call: runs once on each thread with i_thread in
 * [0, n_threads). ctx is the pointer given to strata_pool_run. */
typedef void (*strata_pool_fn)(void *ctx, int i_thread, int n_threads);

/* The most threads one pool may have. */
#define STRATA_POOL_MAX_THREADS 512

/* A pool of n_threads threads in all: the caller of strata_pool_run is
 * thread 0 and n_threads - 1 workers are started here (none for 1).
 * Returns NULL when n_threads is outside [1, STRATA_POOL_MAX_THREADS] or
 * memory or threads cannot be had (nothing is left running then). The
 * caller frees the pool with strata_pool_free. */
strata_pool *strata_pool_new(int n_threads);

/* Runs fn(ctx, i, n) on every thread i of the pool (the calling thread is
 * i = 0) and returns when all have returned. Everything written before the
 * call is visible to fn on every thread, and everything fn wrote on any
 * thread is visible to the caller after the return. fn must not call
 * strata_pool_run on the same pool. A NULL pool runs fn(ctx, 0, 1). */
void strata_pool_run(strata_pool *p, strata_pool_fn fn, void *ctx);

/* Total threads, counting the caller (1 for a NULL pool). */
int strata_pool_n_threads(const strata_pool *p);

/* Stops and joins the workers and frees the pool. NULL is allowed. */
void strata_pool_free(strata_pool *p);

/* The share [*begin, *end) of [0, n) for thread i_thread of n_threads:
 * contiguous chunks in thread order, the first n % n_threads one item
 * longer. Depends only on (n, i_thread, n_threads), so the same split is
 * made on every call; n <= 0 gives every thread an empty range. */
void strata_split_range(int64_t n, int i_thread, int n_threads, int64_t *begin, int64_t *end);

#endif
