/* Tests of the engine loop's set of live request ids (src/engine/idset.h)
 * against a plain array, over random adds and deletes that force many
 * collisions and every wrap of a probe run around the end of the table
 * (ids that are multiples of a power of two share their low bits, and the
 * table is small), then over ids spread as a server hands them out. A
 * deletion that left a hole in a probe run would make a member vanish; one
 * that moved a member wrongly would make it unfindable: either shows here
 * as a disagreement with the reference. */
#include "engine/idset.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"

#define REF_MAX 4096

typedef struct ref {
    int64_t v[REF_MAX];
    size_t n;
} ref;

static bool ref_has(const ref *r, int64_t id)
{
    for (size_t i = 0; i < r->n; i++) {
        if (r->v[i] == id) return true;
    }
    return false;
}

static void ref_add(ref *r, int64_t id)
{
    if (!ref_has(r, id)) r->v[r->n++] = id;
}

static void ref_del(ref *r, int64_t id)
{
    for (size_t i = 0; i < r->n; i++) {
        if (r->v[i] != id) continue;
        r->v[i] = r->v[--r->n];
        return;
    }
}

/* Every id of the universe is a member of both or of neither. */
static void check_same(const idset *s, const ref *r, const int64_t *universe, size_t n_universe)
{
    assert_int_equal(s->n, r->n);
    for (size_t i = 0; i < n_universe; i++) {
        if (idset_has(s, universe[i]) != ref_has(r, universe[i])) {
            fail_msg("id %lld: set says %d, reference %d", (long long)universe[i],
                     idset_has(s, universe[i]), ref_has(r, universe[i]));
        }
    }
}

static void run_random(const int64_t *universe, size_t n_universe, int steps, uint64_t seed,
                       int add_percent)
{
    idset s = {0};
    ref *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    uint64_t st = seed;
    for (int i = 0; i < steps; i++) {
        int64_t id = universe[strata_splitmix64(&st) % n_universe];
        if ((int)(strata_splitmix64(&st) % 100) < add_percent && r->n < REF_MAX) {
            assert_int_equal(idset_add(&s, id), 0);
            ref_add(r, id);
        } else {
            idset_del(&s, id);
            ref_del(r, id);
        }
        if (i % 97 == 0) check_same(&s, r, universe, n_universe);
    }
    check_same(&s, r, universe, n_universe);
    /* empty it again, one by one */
    for (size_t i = 0; i < n_universe; i++) {
        idset_del(&s, universe[i]);
        ref_del(r, universe[i]);
    }
    check_same(&s, r, universe, n_universe);
    assert_int_equal(s.n, 0);
    idset_free(&s);
    free(r);
}

static void test_collisions_and_wraps(void **state)
{
    (void)state;
    /* ids k << 32: the hash's top bits differ only by multiples of the
     * golden ratio's low bits, which gives long runs in a 64-cell table */
    int64_t u[200];
    for (size_t i = 0; i < 200; i++) u[i] = (int64_t)i << 32;
    run_random(u, 30, 20000, 1, 60);   /* small: the table stays at 64 cells */
    run_random(u, 200, 50000, 2, 55);  /* grows, shrinks back by deletion */
    for (size_t i = 0; i < 200; i++) u[i] = (int64_t)i * 64;
    run_random(u, 200, 50000, 3, 70);
}

static void test_server_like_ids(void **state)
{
    (void)state;
    /* a window of consecutive ids, as a server's next_id gives them */
    idset s = {0};
    ref *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    int64_t u[512];
    for (int64_t base = 0; base < 100000; base += 509) {
        for (size_t i = 0; i < 512; i++) u[i] = base + (int64_t)i;
        for (size_t i = 0; i < 512; i += 3) {
            assert_int_equal(idset_add(&s, u[i]), 0);
            ref_add(r, u[i]);
        }
        check_same(&s, r, u, 512);
        for (size_t i = 0; i < 512; i++) {
            idset_del(&s, u[i]);
            ref_del(r, u[i]);
        }
        check_same(&s, r, u, 512);
    }
    /* a member added twice is one member; deleting a non-member is nothing */
    assert_int_equal(idset_add(&s, 7), 0);
    assert_int_equal(idset_add(&s, 7), 0);
    assert_int_equal(s.n, 1);
    idset_del(&s, 8);
    assert_true(idset_has(&s, 7));
    idset_del(&s, 7);
    assert_false(idset_has(&s, 7));
    assert_int_equal(s.n, 0);
    idset_free(&s);
    idset empty = {0};
    assert_false(idset_has(&empty, 0));
    idset_del(&empty, 0);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collisions_and_wraps),
        cmocka_unit_test(test_server_like_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
