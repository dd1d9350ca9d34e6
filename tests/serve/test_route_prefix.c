/* Prefix-aware routing as pure functions (serve/route_prefix.h): the index
 * (membership, LRU aging bounded in memory, clearing on restart), the
 * prompt's chain hashes (the engine's definition), the expected cached
 * prefix, and the choice with its balance threshold, ties and unusable
 * replicas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "base/chainhash.h"
#include "serve/route_prefix.h"

static void test_hashes_are_the_engines(void **state)
{
    (void)state;
    int32_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = i * 7 + 1;
    uint64_t h[8];
    size_t n = route_prompt_hashes(toks, 100, 32, h, 8);
    assert_int_equal(n, 3); /* only full blocks: 96 of 100 tokens */
    uint64_t want = CHAINHASH_ROOT;
    for (size_t b = 0; b < 3; b++) {
        want = chainhash_block(want, toks + 32 * b, 32);
        assert_true(h[b] == want);
    }
    assert_int_equal(route_prompt_hashes(toks, 31, 32, h, 8), 0);
    assert_int_equal(route_prompt_hashes(toks, 100, 0, h, 8), 0);
    assert_int_equal(route_prompt_hashes(toks, 100, 32, h, 2), 2);
}

static void test_expected_prefix(void **state)
{
    (void)state;
    route_index ix;
    assert_int_equal(route_index_init(&ix, 64), 0);
    int32_t a[128], b[128];
    for (int i = 0; i < 128; i++) a[i] = b[i] = i + 3;
    b[70] = 9999; /* b shares a's first two blocks only */
    uint64_t ha[4], hb[4];
    assert_int_equal(route_prompt_hashes(a, 128, 32, ha, 4), 4);
    assert_int_equal(route_prompt_hashes(b, 128, 32, hb, 4), 4);
    assert_int_equal(route_expected_cached(&ix, ha, 4, 32, 128), 0);
    for (int k = 0; k < 4; k++) route_index_touch(&ix, ha[k], 1);
    /* the whole prompt known: the last token is always computed */
    assert_int_equal(route_expected_cached(&ix, ha, 4, 32, 128), 127);
    assert_int_equal(route_expected_cached(&ix, hb, 4, 32, 128), 64);
    /* a later block alone does not count: a hash names its whole prefix */
    route_index_clear(&ix);
    route_index_touch(&ix, ha[1], 2);
    assert_int_equal(route_expected_cached(&ix, ha, 4, 32, 128), 0);
    route_index_free(&ix);
}

static void test_lru_bound_and_aging(void **state)
{
    (void)state;
    route_index ix;
    assert_int_equal(route_index_init(&ix, 100), 0);
    for (uint64_t k = 1; k <= 100; k++) route_index_touch(&ix, k * 0x9e3779b97f4a7c15ULL, k);
    assert_int_equal(ix.n, 100);
    /* refresh an old one: it survives the aging */
    route_index_touch(&ix, 3 * 0x9e3779b97f4a7c15ULL, 101);
    route_index_touch(&ix, 1000 * 0x9e3779b97f4a7c15ULL, 102); /* full: the older half goes */
    assert_true(ix.n <= 100);
    assert_true(ix.n >= 50);
    assert_true(route_index_has(&ix, 3 * 0x9e3779b97f4a7c15ULL));
    assert_true(route_index_has(&ix, 1000 * 0x9e3779b97f4a7c15ULL));
    assert_true(route_index_has(&ix, 100 * 0x9e3779b97f4a7c15ULL));
    assert_false(route_index_has(&ix, 1 * 0x9e3779b97f4a7c15ULL));
    assert_false(route_index_has(&ix, 10 * 0x9e3779b97f4a7c15ULL));
    /* never above the bound, however many go in */
    for (uint64_t k = 2000; k < 12000; k++) {
        route_index_touch(&ix, k * 0x9e3779b97f4a7c15ULL, k);
        assert_true(ix.n <= 100);
    }
    assert_true(route_index_has(&ix, 11999 * 0x9e3779b97f4a7c15ULL));
    /* hash 0 is a key like any other */
    route_index_touch(&ix, 0, 20000);
    assert_true(route_index_has(&ix, 0));
    route_index_clear(&ix); /* an engine restart */
    assert_int_equal(ix.n, 0);
    assert_false(route_index_has(&ix, 11999 * 0x9e3779b97f4a7c15ULL));
    route_index_free(&ix);
    /* an index never initialised (load routing) knows nothing and takes nothing */
    route_index none = {0};
    route_index_touch(&none, 5, 1);
    assert_false(route_index_has(&none, 5));
    route_index_clear(&none);
}

/* route_cand: {ready, load, free, expected} */
static void test_choice(void **state)
{
    (void)state;
    enum route_reason why;
    /* the longest prefix wins when within the balance */
    route_cand c[3] = {{true, 0, 2, 0}, {true, 1, 1, 96}, {true, 1, 1, 64}};
    assert_int_equal(route_choose(c, 3, 2, 0, true, &why), 1);
    assert_int_equal(why, ROUTE_PREFIX);
    /* too loaded beyond the balance: the least loaded instead */
    c[1].load = 3;
    c[2].load = 3;
    assert_int_equal(route_choose(c, 3, 2, 0, true, &why), 0);
    assert_int_equal(why, ROUTE_BALANCE);
    /* exactly at the balance is still allowed */
    assert_int_equal(route_choose(c, 3, 3, 0, true, &why), 1);
    /* with balance 0 only the least loaded may take the prefix */
    route_cand d[2] = {{true, 1, 1, 32}, {true, 0, 2, 0}};
    assert_int_equal(route_choose(d, 2, 0, 0, true, &why), 1);
    assert_int_equal(why, ROUTE_BALANCE);
    /* equal prefixes: the lighter one */
    route_cand e[3] = {{true, 2, 0, 64}, {true, 1, 1, 64}, {true, 1, 1, 64}};
    assert_int_equal(route_choose(e, 3, 4, 0, true, &why), 1);
    /* no prefix anywhere: least loaded, then most free, then lowest index */
    route_cand f[3] = {{true, 1, 1, 0}, {true, 1, 3, 0}, {true, 1, 3, 0}};
    assert_int_equal(route_choose(f, 3, 2, 0, true, &why), 1);
    assert_int_equal(why, ROUTE_LOAD);
    assert_int_equal(route_choose(f, 3, 2, 2, true, &why), 2); /* ties go round from start */
    route_cand idle[3] = {{true, 0, 2, 0}, {true, 0, 2, 0}, {true, 0, 2, 0}};
    for (int s = 0; s < 3; s++) assert_int_equal(route_choose(idle, 3, 2, s, true, &why), s);
    assert_int_equal(route_choose(idle, 3, 2, 7, true, &why), 0); /* out of range: from 0 */
    /* replicas that are not ready are never chosen, whatever they hold */
    route_cand g[2] = {{false, 0, 0, 500}, {true, 3, 1, 0}};
    assert_int_equal(route_choose(g, 2, 0, 0, true, &why), 1);
    route_cand h[2] = {{false, 0, 0, 500}, {false, 0, 0, 0}};
    assert_int_equal(route_choose(h, 2, 2, 0, true, &why), -1);
    assert_int_equal(route_choose(h, 0, 2, 0, true, &why), -1);
}

/* A prefix replica with no free slot is worth waiting for while its load
 * (running plus waiting) is within the balance. */
static void test_choice_waits_for_a_full_prefix_replica(void **state)
{
    (void)state;
    enum route_reason why;
    /* replica 1 holds the prefix and is full (2 running); replica 0 is idle:
     * 2 - 0 <= 2, so the request waits for 1 rather than missing on 0 */
    route_cand c[3] = {{true, 0, 2, 0}, {true, 2, 0, 128}, {true, 1, 1, 0}};
    int k = route_choose(c, 3, 2, 0, true, &why);
    assert_int_equal(k, 1);
    assert_int_equal(why, ROUTE_PREFIX);
    assert_int_equal(c[k].free, 0); /* the caller queues it for replica 1 */
    /* one more already waiting for replica 1 makes its load 3: beyond the
     * balance, so the least loaded replica with a free slot takes it */
    c[1].load = 3;
    assert_int_equal(route_choose(c, 3, 2, 0, true, &why), 0);
    assert_int_equal(why, ROUTE_BALANCE);
    /* the balance's reference is the least loaded ready replica, full or not */
    route_cand d[2] = {{true, 4, 0, 64}, {true, 2, 0, 0}};
    assert_int_equal(route_choose(d, 2, 2, 0, true, &why), 0);
    assert_int_equal(why, ROUTE_PREFIX);
    d[0].load = 5;
    /* beyond it, and no free slot anywhere: wait for whichever frees first */
    assert_int_equal(route_choose(d, 2, 2, 0, true, &why), -1);
    assert_int_equal(why, ROUTE_BALANCE);
    /* a longer prefix on a full replica beats a shorter one with a free slot */
    route_cand e[2] = {{true, 1, 1, 32}, {true, 2, 0, 96}};
    assert_int_equal(route_choose(e, 2, 2, 0, true, &why), 1);
    /* equal prefixes: the one with a free slot (lighter) */
    e[0].expected = 96;
    assert_int_equal(route_choose(e, 2, 2, 0, true, &why), 0);
}

static void test_choice_that_may_not_wait(void **state)
{
    (void)state;
    enum route_reason why;
    /* no room to wait (the queue is full): only replicas with a free slot */
    route_cand c[3] = {{true, 1, 1, 0}, {true, 2, 0, 128}, {true, 1, 1, 32}};
    assert_int_equal(route_choose(c, 3, 2, 0, true, &why), 1);
    assert_int_equal(route_choose(c, 3, 2, 0, false, &why), 2); /* the shorter prefix, free */
    assert_int_equal(why, ROUTE_PREFIX);
    c[2].expected = 0;
    assert_int_equal(route_choose(c, 3, 2, 0, false, &why), 0);
    assert_int_equal(why, ROUTE_BALANCE);
    /* nothing free: no choice */
    route_cand d[2] = {{true, 2, 0, 64}, {true, 2, 0, 0}};
    assert_int_equal(route_choose(d, 2, 2, 0, false, &why), -1);
    /* no prefix and every replica full: wait for any, not for one */
    d[0].expected = 0;
    assert_int_equal(route_choose(d, 2, 2, 0, true, &why), -1);
    assert_int_equal(why, ROUTE_LOAD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hashes_are_the_engines),
        cmocka_unit_test(test_expected_prefix),
        cmocka_unit_test(test_lru_bound_and_aging),
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_choice_waits_for_a_full_prefix_replica),
        cmocka_unit_test(test_choice_that_may_not_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
