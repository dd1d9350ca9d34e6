/* The persistent thread pool (see threadpool.h).
 *
 * Threads and their roles
 *
 *   owner (thread 0)  The thread that calls strata_pool_run: it publishes a
 *                     call (fn, ctx) by bumping `generation`, runs share 0
 *                     itself, then waits until `n_pending` reaches 0. It is
 *                     the only writer of generation, fn, ctx and stop, and
 *                     the only thread that makes and frees the pool.
 *   workers (1..n-1)  Started by strata_pool_new, joined by strata_pool_free.
 *                     Each waits for `generation` to change, runs its share,
 *                     then decrements `n_pending`. They hold no state between
 *                     calls except the last generation they saw, and block
 *                     asynchronous signals (those are for the process's own
 *                     threads to handle; faults are not blocked).
 *
 * Waiting: a waiter first spins on the atomic it waits for, with a pause
 * instruction, for up to POOL_SPIN_NS (decode calls the pool again within
 * microseconds, and waking a sleeping thread costs tens of microseconds),
 * yielding the CPU now and then after the first POOL_SPIN_PURE_NS in case
 * the thread it waits for shares its CPU; then it sleeps on a futex on that
 * same word (a mutex and condition
 * variable where there is no futex). A pool with more threads than the
 * CPUs this process may run on does not spin at all: a spinning thread
 * would only take the CPU from one that has work to do.
 *
 * Memory ordering (C11 atomics)
 *
 *   1. Publishing a call. The owner writes fn, ctx and n_pending with plain
 *      or relaxed stores, then increments `generation` with a seq_cst (so
 *      also release) read-modify-write. A worker loads `generation` with
 *      acquire (or seq_cst) and acts only on a value different from the one
 *      it last saw; that load reads from the owner's increment, so the
 *      increment synchronizes with it and every write the owner made before
 *      the call (fn, ctx, the caller's own data) happens before the worker's
 *      fn.
 *   2. Completing a call. Each worker decrements `n_pending` with a seq_cst
 *      (so also release) RMW after its fn returns. The owner returns only
 *      after an acquire load reads 0. The decrements are RMWs on one
 *      object, so each worker's decrement heads a release sequence that
 *      contains every later decrement, up to the one that wrote 0: the
 *      owner's load synchronizes with every worker, and all their writes
 *      happen before strata_pool_run returns. This is also why the owner
 *      may overwrite fn and ctx for the next call: each worker read them
 *      before its decrement.
 *   3. No lost wake-up. A worker about to sleep increments `n_sleeping` and
 *      then re-reads `generation` (both seq_cst); the owner increments
 *      `generation` and then reads `n_sleeping` (both seq_cst). In the single
 *      total order of seq_cst operations, either the worker sees the new
 *      generation (and does not sleep) or the owner sees n_sleeping > 0 (and
 *      wakes). A wake that lands before the worker is inside futex_wait is
 *      not lost either: FUTEX_WAIT sleeps only while the word still holds
 *      the value the worker saw, checked atomically in the kernel. The owner
 *      sleeping on `n_pending` uses the same pattern with `owner_sleeping`
 *      and the last worker's decrement.
 *   4. Generations never skip: the owner waits for every worker before it
 *      publishes again, so each worker sees each generation, and 32-bit
 *      wrap-around is harmless (only equality is tested).
 *
 * The owner, the workers' `generation` spin and the completion counter sit
 * on separate cache lines, so spinning readers do not slow the writer. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "threadpool.h"

#include "clock.h"

#include <assert.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__linux__) && !defined(STRATA_POOL_NO_FUTEX)
#include <linux/futex.h>
#include <sys/syscall.h>
#define POOL_FUTEX 1
#else
#define POOL_FUTEX 0
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define pool_pause() _mm_pause()
#elif defined(__aarch64__)
#define pool_pause() __asm__ volatile("yield" ::: "memory")
#else
#define pool_pause() ((void)0)
#endif

/* How long a waiter spins before it sleeps. Long enough to bridge the gap
 * between two ops of one decode step (the owner's serial work between them
 * is microseconds); short enough that an idle server stops burning CPU
 * almost at once. */
#define POOL_SPIN_NS 200000

/* Bigger than a cache line on the machines we know of, so that the spatial
 * prefetcher (which pulls pairs of 64-byte lines) does not couple the
 * fields either. */
#define POOL_LINE 128

_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t),
               "futex words are the atomics themselves");

typedef struct pool_worker {
    struct strata_pool *pool;
    int i_thread;
} pool_worker;

struct strata_pool {
    /* Written by the owner once per call; read by the workers (rule 1). */
    alignas(POOL_LINE) _Atomic uint32_t generation;
    atomic_bool stop;
    strata_pool_fn fn;
    void *ctx;

    /* Written by the workers at the end of a call (rule 2). */
    alignas(POOL_LINE) _Atomic uint32_t n_pending;

    /* The sleeping flags of rule 3. */
    alignas(POOL_LINE) atomic_int n_sleeping;
    atomic_int owner_sleeping;

    /* Read-only after strata_pool_new. */
    alignas(POOL_LINE) int n_threads;
    int n_started; /* workers running (n_threads - 1 once made) */
    int64_t spin_ns;
    pthread_t *threads;  /* (n_threads - 1) */
    pool_worker *workers; /* (n_threads - 1) */
#if !POOL_FUTEX
    pthread_mutex_t wait_lock; /* guards nothing but the sleep/wake hand-off */
    pthread_cond_t wait_cond;
#endif
};

/* --- sleeping and waking on a 32-bit word --- */

#if POOL_FUTEX
static void pool_sleep(strata_pool *p, _Atomic uint32_t *word, uint32_t seen)
{
    (void)p;
    /* Returns at once (EAGAIN) if *word != seen; EINTR and spurious wake-ups
     * are handled by the callers' loops, which re-read the word. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void pool_wake(strata_pool *p, _Atomic uint32_t *word)
{
    (void)p;
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
static void pool_sleep(strata_pool *p, _Atomic uint32_t *word, uint32_t seen)
{
    pthread_mutex_lock(&p->wait_lock);
    while (atomic_load_explicit(word, memory_order_seq_cst) == seen)
        pthread_cond_wait(&p->wait_cond, &p->wait_lock);
    pthread_mutex_unlock(&p->wait_lock);
}

static void pool_wake(strata_pool *p, _Atomic uint32_t *word)
{
    (void)word;
    /* The waker changed the word before calling this. Taking the lock
     * means a waiter is either before its check (and will see the change)
     * or inside pthread_cond_wait (and gets the broadcast). */
    pthread_mutex_lock(&p->wait_lock);
    pthread_mutex_unlock(&p->wait_lock);
    pthread_cond_broadcast(&p->wait_cond);
}
#endif

/* A spinning waiter looks at the clock every POOL_SPIN_CHECK pauses (a
 * pause takes from ~10 ns to over 100 ns, more in a VM that traps it), and
 * once it has spun POOL_SPIN_PURE_NS it also yields the CPU at each look:
 * when the thread it waits for was put on the same CPU (the machine is busy
 * with other work), yielding lets that thread run now rather than after the
 * whole spin. On an otherwise idle CPU sched_yield returns at once, so an
 * uncontended wait loses almost nothing. */
#define POOL_SPIN_CHECK 16u
#define POOL_SPIN_PURE_NS 20000

/* Spins while done(word, arg) is false, for at most spin_ns. True when it
 * became true. */
static bool pool_spin(_Atomic uint32_t *word, uint32_t arg, bool (*done)(uint32_t value, uint32_t arg),
                      int64_t spin_ns)
{
    if (done(atomic_load_explicit(word, memory_order_acquire), arg)) return true;
    if (spin_ns <= 0) return false;
    int64_t start = strata_clock_ns();
    for (uint32_t i = 1;; i++) {
        if (done(atomic_load_explicit(word, memory_order_acquire), arg)) return true;
        pool_pause();
        if (i % POOL_SPIN_CHECK == 0) {
            int64_t spun = strata_clock_ns() - start;
            if (spun >= spin_ns) return false;
            if (spun >= POOL_SPIN_PURE_NS) sched_yield();
        }
    }
}

static inline bool pool_changed(uint32_t value, uint32_t seen)
{
    return value != seen;
}

static inline bool pool_is_zero(uint32_t value, uint32_t unused)
{
    (void)unused;
    return value == 0;
}

/* --- workers --- */

/* Waits until generation differs from seen and returns the new value. */
static uint32_t pool_wait_generation(strata_pool *p, uint32_t seen)
{
    if (!pool_spin(&p->generation, seen, pool_changed, p->spin_ns)) {
        for (;;) {
            atomic_fetch_add_explicit(&p->n_sleeping, 1, memory_order_seq_cst);
            if (atomic_load_explicit(&p->generation, memory_order_seq_cst) == seen)
                pool_sleep(p, &p->generation, seen);
            atomic_fetch_sub_explicit(&p->n_sleeping, 1, memory_order_relaxed);
            if (atomic_load_explicit(&p->generation, memory_order_acquire) != seen) break;
        }
    }
    return atomic_load_explicit(&p->generation, memory_order_acquire);
}

static void *pool_worker_main(void *arg)
{
    pool_worker *w = arg;
    strata_pool *p = w->pool;
    uint32_t seen = 0; /* generation starts at 0, before any worker exists */
    for (;;) {
        seen = pool_wait_generation(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) break;
        p->fn(p->ctx, w->i_thread, p->n_threads);
        if (atomic_fetch_sub_explicit(&p->n_pending, 1, memory_order_seq_cst) == 1 &&
            atomic_load_explicit(&p->owner_sleeping, memory_order_seq_cst))
            pool_wake(p, &p->n_pending);
    }
    return NULL;
}

/* --- the owner's side --- */

static int pool_n_cpus(void)
{
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n < INT_MAX ? (int)n : 1;
}

/* Wakes and joins the first n_started workers. */
static void pool_stop_workers(strata_pool *p)
{
    if (p->n_started == 0) return;
    atomic_store_explicit(&p->stop, true, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_seq_cst);
    pool_wake(p, &p->generation);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

static void pool_release(strata_pool *p)
{
#if !POOL_FUTEX
    pthread_cond_destroy(&p->wait_cond);
    pthread_mutex_destroy(&p->wait_lock);
#endif
    free(p->threads);
    free(p->workers);
    free(p);
}

strata_pool *strata_pool_new(int n_threads)
{
    if (n_threads < 1 || n_threads > STRATA_POOL_MAX_THREADS) return NULL;

    size_t nbytes = (sizeof(strata_pool) + POOL_LINE - 1) / POOL_LINE * POOL_LINE;
    strata_pool *p = aligned_alloc(POOL_LINE, nbytes);
    if (p == NULL) return NULL;
    memset(p, 0, nbytes);
    atomic_init(&p->generation, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->n_pending, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->owner_sleeping, 0);
    p->n_threads = n_threads;
    p->spin_ns = n_threads <= pool_n_cpus() ? POOL_SPIN_NS : 0;
#if !POOL_FUTEX
    pthread_mutex_init(&p->wait_lock, NULL);
    pthread_cond_init(&p->wait_cond, NULL);
#endif
    if (n_threads == 1) return p;

    p->threads = calloc((size_t)n_threads - 1, sizeof(*p->threads));
    p->workers = calloc((size_t)n_threads - 1, sizeof(*p->workers));
    if (p->threads == NULL || p->workers == NULL) {
        pool_release(p);
        return NULL;
    }

    /* Workers start with the asynchronous signals blocked (they inherit the
     * mask), so SIGINT, SIGTERM, SIGCHLD... reach the process's own threads.
     * Faults stay unblocked: a fault in fn must still reach its handler (a
     * sanitizer's report, a core dump). */
    sigset_t all, old;
    sigfillset(&all);
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) sigdelset(&all, faults[i]);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0;
    for (int i = 1; i < n_threads && rc == 0; i++) {
        p->workers[i - 1] = (pool_worker){.pool = p, .i_thread = i};
        rc = pthread_create(&p->threads[i - 1], NULL, pool_worker_main, &p->workers[i - 1]);
        if (rc == 0) p->n_started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pool_stop_workers(p);
        pool_release(p);
        return NULL;
    }
    return p;
}

void strata_pool_run(strata_pool *p, strata_pool_fn fn, void *ctx)
{
    if (p == NULL || p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    assert(atomic_load_explicit(&p->n_pending, memory_order_relaxed) == 0 &&
           "strata_pool_run called again before the previous call returned");

    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->n_pending, (uint32_t)(p->n_threads - 1), memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_seq_cst); /* rule 1 */
    if (atomic_load_explicit(&p->n_sleeping, memory_order_seq_cst) > 0) /* rule 3 */
        pool_wake(p, &p->generation);

    fn(ctx, 0, p->n_threads);

    if (!pool_spin(&p->n_pending, 0, pool_is_zero, p->spin_ns)) {
        for (;;) {
            atomic_store_explicit(&p->owner_sleeping, 1, memory_order_seq_cst);
            uint32_t left = atomic_load_explicit(&p->n_pending, memory_order_seq_cst);
            if (left == 0) break; /* rule 2: this seq_cst load is also acquire */
            pool_sleep(p, &p->n_pending, left);
        }
        atomic_store_explicit(&p->owner_sleeping, 0, memory_order_relaxed);
    }
}

int strata_pool_n_threads(const strata_pool *p)
{
    return p == NULL ? 1 : p->n_threads;
}

void strata_pool_free(strata_pool *p)
{
    if (p == NULL) return;
    pool_stop_workers(p);
    pool_release(p);
}

void strata_split_range(int64_t n, int i_thread, int n_threads, int64_t *begin, int64_t *end)
{
    assert(n_threads >= 1 && i_thread >= 0 && i_thread < n_threads);
    if (n <= 0 || n_threads < 1 || i_thread < 0 || i_thread >= n_threads) {
        *begin = *end = 0;
        return;
    }
    /* The first n % n_threads threads take one item more than the rest. */
    int64_t base = n / n_threads, rem = n % n_threads;
    int64_t b = base * i_thread + (i_thread < rem ? i_thread : rem);
    *begin = b;
    *end = b + base + (i_thread < rem ? 1 : 0);
}
