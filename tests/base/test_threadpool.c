/* Tests of the thread pool and the range split (src/base/threadpool.h).
 *
 * Pools of 1 to 8 threads run on whatever CPUs the machine has (2 on the
 * development machine), so the larger pools are oversubscribed and take the
 * sleeping path; calls spaced out by sleeps take it on the small pools too.
 * Threads write results with plain stores: that the caller sees them after
 * strata_pool_run returns is what is being tested (and what
 * ThreadSanitizer checks when the tests are built with it). An alarm turns a
 * deadlock into a failure instead of a hang. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/threadpool.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_T = 8 };

static long n_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

/* How many calls to make on a pool of n threads: `fitting` when the pool
 * fits the machine's CPUs (its threads spin between calls, ~0.1 us a
 * call), a tenth when it is oversubscribed: then every call puts threads
 * to sleep and wakes them, a context switch each, which on a loaded
 * machine can take a millisecond. */
static uint64_t calls_for(int n, uint64_t fitting)
{
    return n <= n_cpus() ? fitting : fitting / 10;
}

/* --- every thread, once per call --- */

typedef struct call_record {
    uint64_t call;                 /* the call number the owner is on */
    uint64_t runs[MAX_T];          /* how many times thread i ran, all calls */
    uint64_t last_call[MAX_T];     /* the call thread i last ran in */
    int n_seen[MAX_T];             /* n_threads as thread i was told */
    pthread_t self[MAX_T];
} call_record;

static void record_fn(void *ctx, int i_thread, int n_threads)
{
    call_record *r = ctx;
    r->runs[i_thread]++;
    r->last_call[i_thread] = r->call;
    r->n_seen[i_thread] = n_threads;
    r->self[i_thread] = pthread_self();
}

static void run_and_check_calls(strata_pool *p, int n, uint64_t n_calls, call_record *r)
{
    for (uint64_t c = 1; c <= n_calls; c++) {
        r->call = c;
        strata_pool_run(p, record_fn, r);
        for (int i = 0; i < n; i++) {
            if (r->last_call[i] != c || r->runs[i] != c)
                fail_msg("pool of %d, call %llu: thread %d ran %llu times, last in call %llu", n,
                         (unsigned long long)c, i, (unsigned long long)r->runs[i],
                         (unsigned long long)r->last_call[i]);
            assert_int_equal(r->n_seen[i], n);
        }
    }
}

static void test_every_thread_runs_once_per_call(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_T; n++) {
        strata_pool *p = strata_pool_new(n);
        assert_non_null(p);
        assert_int_equal(strata_pool_n_threads(p), n);
        call_record r;
        memset(&r, 0, sizeof r);
        run_and_check_calls(p, n, calls_for(n, 3000), &r);
        /* The caller is thread 0; every thread index is a different thread. */
        assert_true(pthread_equal(r.self[0], pthread_self()));
        for (int i = 0; i < n; i++)
            for (int j = 0; j < i; j++) assert_false(pthread_equal(r.self[i], r.self[j]));
        /* Nothing ran outside the pool's range of indices. */
        for (int i = n; i < MAX_T; i++) assert_int_equal(r.runs[i], 0);
        strata_pool_free(p);
    }
}

/* --- many tiny calls in a row --- */

typedef struct stamp_ctx {
    uint64_t call;
    uint64_t stamp[MAX_T * 16]; /* thread i writes stamp[16 i], its own line */
} stamp_ctx;

static void stamp_fn(void *ctx, int i_thread, int n_threads)
{
    (void)n_threads;
    stamp_ctx *s = ctx;
    s->stamp[16 * i_thread] = s->call;
}

static void tiny_calls(int n, uint64_t n_calls)
{
    strata_pool *p = strata_pool_new(n);
    assert_non_null(p);
    static stamp_ctx s;
    memset(&s, 0, sizeof s);
    for (uint64_t c = 1; c <= n_calls; c++) {
        s.call = c;
        strata_pool_run(p, stamp_fn, &s);
        for (int i = 0; i < n; i++)
            if (s.stamp[16 * i] != c)
                fail_msg("pool of %d, call %llu: thread %d left stamp %llu", n, (unsigned long long)c, i,
                         (unsigned long long)s.stamp[16 * i]);
    }
    strata_pool_free(p);
}

static void test_100000_tiny_calls_in_a_row(void **state)
{
    (void)state;
    /* 100000 calls for the one and two thread pools; fewer for the larger
     * ones, which share the CPUs with other tests under `ctest -j` or are
     * oversubscribed (see calls_for). */
    for (int n = 1; n <= MAX_T; n++) tiny_calls(n, n <= 2 ? calls_for(n, 100000) : calls_for(n, 20000));
}

/* --- results written by the threads are the caller's after return --- */

typedef struct sum_ctx {
    const uint32_t *data;
    int64_t n;
    uint64_t partial[MAX_T];
    uint32_t *copy; /* each thread copies its range here */
} sum_ctx;

static void sum_fn(void *ctx, int i_thread, int n_threads)
{
    sum_ctx *s = ctx;
    int64_t b, e;
    strata_split_range(s->n, i_thread, n_threads, &b, &e);
    uint64_t acc = 0;
    for (int64_t i = b; i < e; i++) {
        acc += s->data[i];
        s->copy[i] = s->data[i] * 3u + 1u;
    }
    s->partial[i_thread] = acc;
}

static void test_results_written_by_threads_are_visible(void **state)
{
    (void)state;
    enum { N = 100003 };
    uint32_t *data = malloc(N * sizeof(uint32_t)), *copy = malloc(N * sizeof(uint32_t));
    assert_non_null(data);
    assert_non_null(copy);
    uint64_t want = 0;
    for (int64_t i = 0; i < N; i++) {
        data[i] = (uint32_t)(i * 2654435761u);
        want += data[i];
    }
    for (int n = 1; n <= MAX_T; n++) {
        strata_pool *p = strata_pool_new(n);
        assert_non_null(p);
        for (int rep = 0; rep < 20; rep++) {
            sum_ctx s = {.data = data, .n = N - rep, .copy = copy};
            memset(copy, 0, N * sizeof(uint32_t));
            strata_pool_run(p, sum_fn, &s);
            uint64_t got = 0;
            for (int i = 0; i < n; i++) got += s.partial[i];
            uint64_t expect = want;
            for (int64_t i = N - rep; i < N; i++) expect -= data[i];
            assert_int_equal(got, expect);
            for (int64_t i = 0; i < N - rep; i++)
                if (copy[i] != data[i] * 3u + 1u) fail_msg("pool of %d: copy[%lld] not written", n, (long long)i);
            for (int64_t i = N - rep; i < N; i++) assert_int_equal(copy[i], 0);
        }
        strata_pool_free(p);
    }
    free(data);
    free(copy);
}

/* --- workers that have gone to sleep wake for the next call --- */

static void test_calls_after_idle_gaps_wake_sleeping_workers(void **state)
{
    (void)state;
    /* Gaps of 3 ms are far past the spin (0.2 ms), so every call finds its
     * workers asleep. */
    const struct timespec gap = {0, 3 * 1000 * 1000};
    for (int n = 2; n <= 4; n++) {
        strata_pool *p = strata_pool_new(n);
        assert_non_null(p);
        call_record r;
        memset(&r, 0, sizeof r);
        for (uint64_t c = 1; c <= 25; c++) {
            nanosleep(&gap, NULL);
            r.call = c;
            strata_pool_run(p, record_fn, &r);
            for (int i = 0; i < n; i++) assert_int_equal(r.last_call[i], c);
        }
        strata_pool_free(p);
    }
}

/* The owner's own share takes long, so it is the workers that finish first
 * and then the owner that finds them done; and the other way round. */
typedef struct slow_ctx {
    int slow_thread;
    volatile uint64_t sink[MAX_T * 16];
    int done[MAX_T];
} slow_ctx;

static void slow_fn(void *ctx, int i_thread, int n_threads)
{
    (void)n_threads;
    slow_ctx *s = ctx;
    uint64_t rounds = i_thread == s->slow_thread ? 2000000 : 10;
    for (uint64_t k = 0; k < rounds; k++) s->sink[16 * i_thread] += k;
    s->done[i_thread] = 1;
}

static void test_uneven_work_owner_or_worker_last(void **state)
{
    (void)state;
    for (int n = 2; n <= 4; n++) {
        strata_pool *p = strata_pool_new(n);
        assert_non_null(p);
        for (int slow = 0; slow < n; slow++) {
            slow_ctx s;
            memset(&s, 0, sizeof s);
            s.slow_thread = slow;
            strata_pool_run(p, slow_fn, &s);
            for (int i = 0; i < n; i++) assert_int_equal(s.done[i], 1);
        }
        strata_pool_free(p);
    }
}

/* --- signals go to the process's own threads, faults to their handlers --- */

typedef struct mask_ctx {
    int term_blocked[MAX_T];
    int int_blocked[MAX_T];
    int segv_blocked[MAX_T];
} mask_ctx;

static void mask_fn(void *ctx, int i_thread, int n_threads)
{
    (void)n_threads;
    mask_ctx *m = ctx;
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    m->term_blocked[i_thread] = sigismember(&cur, SIGTERM);
    m->int_blocked[i_thread] = sigismember(&cur, SIGINT);
    m->segv_blocked[i_thread] = sigismember(&cur, SIGSEGV);
}

static void test_workers_block_async_signals_only(void **state)
{
    (void)state;
    strata_pool *p = strata_pool_new(3);
    assert_non_null(p);
    mask_ctx m;
    memset(&m, 0, sizeof m);
    strata_pool_run(p, mask_fn, &m);
    /* The owner's mask is its own and was left as it was. */
    assert_int_equal(m.term_blocked[0], 0);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(m.term_blocked[i], 1);
        assert_int_equal(m.int_blocked[i], 1);
        assert_int_equal(m.segv_blocked[i], 0);
    }
    strata_pool_free(p);
}

/* --- making and freeing --- */

static void count_fn(void *ctx, int i_thread, int n_threads)
{
    (void)i_thread;
    (void)n_threads;
    int *flags = ctx;
    flags[i_thread] = 1;
}

static void test_new_free_cycles_and_bad_sizes(void **state)
{
    (void)state;
    assert_null(strata_pool_new(0));
    assert_null(strata_pool_new(-3));
    assert_null(strata_pool_new(STRATA_POOL_MAX_THREADS + 1));
    strata_pool_free(NULL);
    assert_int_equal(strata_pool_n_threads(NULL), 1);
    int flags[MAX_T] = {0};
    strata_pool_run(NULL, count_fn, flags);
    assert_int_equal(flags[0], 1);

    /* Free right after making (workers may not have reached their wait
     * yet), after one call, and after workers fell asleep. */
    for (int rep = 0; rep < 100; rep++) {
        int n = 1 + rep % MAX_T;
        strata_pool *p = strata_pool_new(n);
        assert_non_null(p);
        if (rep % 3 >= 1) {
            memset(flags, 0, sizeof flags);
            strata_pool_run(p, count_fn, flags);
            for (int i = 0; i < n; i++) assert_int_equal(flags[i], 1);
        }
        if (rep % 3 == 2 && rep < 12) {
            const struct timespec gap = {0, 2 * 1000 * 1000};
            nanosleep(&gap, NULL);
        }
        strata_pool_free(p);
    }
}

/* --- the split --- */

static void check_split(int64_t n, int n_threads)
{
    int64_t expect_begin = 0;
    int64_t lo = INT64_MAX, hi = 0;
    for (int i = 0; i < n_threads; i++) {
        int64_t b, e, b2, e2;
        strata_split_range(n, i, n_threads, &b, &e);
        strata_split_range(n, i, n_threads, &b2, &e2);
        assert_true(b == b2 && e == e2);
        /* Contiguous, in thread order, from 0. */
        if (b != expect_begin || e < b)
            fail_msg("n=%lld threads=%d: thread %d got [%lld, %lld), expected to start at %lld",
                     (long long)n, n_threads, i, (long long)b, (long long)e, (long long)expect_begin);
        expect_begin = e;
        lo = e - b < lo ? e - b : lo;
        hi = e - b > hi ? e - b : hi;
    }
    /* Covers [0, n) exactly, and balanced to one item. */
    assert_int_equal(expect_begin, n > 0 ? n : 0);
    assert_true(hi - lo <= 1);
}

static void test_split_range_covers_each_index_once(void **state)
{
    (void)state;
    for (int t = 1; t <= 17; t++) {
        for (int64_t n = -2; n <= 300; n++) check_split(n, t);
        check_split(1000003, t);
        check_split((int64_t)1 << 40, t);
        check_split(INT64_MAX, t);
    }
    check_split(5, STRATA_POOL_MAX_THREADS);

    /* Every index exactly once, counted. */
    static uint8_t hits[1009];
    for (int t = 1; t <= 12; t++) {
        memset(hits, 0, sizeof hits);
        for (int i = 0; i < t; i++) {
            int64_t b, e;
            strata_split_range(1009, i, t, &b, &e);
            for (int64_t k = b; k < e; k++) hits[k]++;
        }
        for (int k = 0; k < 1009; k++) assert_int_equal(hits[k], 1);
    }

    /* The first n % t threads take the extra item. */
    int64_t b, e;
    strata_split_range(10, 0, 4, &b, &e);
    assert_true(b == 0 && e == 3);
    strata_split_range(10, 1, 4, &b, &e);
    assert_true(b == 3 && e == 6);
    strata_split_range(10, 2, 4, &b, &e);
    assert_true(b == 6 && e == 8);
    strata_split_range(10, 3, 4, &b, &e);
    assert_true(b == 8 && e == 10);
}

int main(void)
{
    /* A deadlock fails the test (SIGALRM ends the process) rather than
     * hanging until CTest's timeout. Generous: sanitizer builds are slow. */
    alarm(300);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_thread_runs_once_per_call),
        cmocka_unit_test(test_100000_tiny_calls_in_a_row),
        cmocka_unit_test(test_results_written_by_threads_are_visible),
        cmocka_unit_test(test_calls_after_idle_gaps_wake_sleeping_workers),
        cmocka_unit_test(test_uneven_work_owner_or_worker_last),
        cmocka_unit_test(test_workers_block_async_signals_only),
        cmocka_unit_test(test_new_free_cycles_and_bad_sizes),
        cmocka_unit_test(test_split_range_covers_each_index_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
