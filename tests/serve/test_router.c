/* Tests of the router's decisions (src/serve/router.c, pool_internal.h),
 * without processes: scoring a replica, choosing among scores (a score that
 * is not finite is ignored, never trusted), dispatching the queue over
 * replica states built here (prefix routing's wait for the replica that
 * holds a prompt's prefix among them), which queued requests may wait no longer
 * while no replica is ready, and the watchdog's verdict on a pong. The same code runs in `strata serve`; the
 * contract tests (tests/contracts/test_serve.c) drive it over real pipes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "serve/pool_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- choosing among scores --- */

static void test_choose_picks_the_highest_finite(void **state)
{
    (void)state;
    const double s[] = {1.0, 3.0, 2.0};
    assert_int_equal(pool_choose_replica(s, 3), 1);
    const double one[] = {0.5};
    assert_int_equal(pool_choose_replica(one, 1), 0);
    assert_int_equal(pool_choose_replica(NULL, 0), -1);
}

static void test_choose_ties_go_to_the_lowest_index(void **state)
{
    (void)state;
    const double s[] = {1.0, 2.0, 2.0, 2.0};
    assert_int_equal(pool_choose_replica(s, 4), 1);
}

static void test_choose_ignores_nan(void **state)
{
    (void)state;
    /* NaN compares false with everything: first, middle and last place */
    const double a[] = {NAN, 1.0, 2.0};
    assert_int_equal(pool_choose_replica(a, 3), 2);
    const double b[] = {2.0, NAN, 1.0};
    assert_int_equal(pool_choose_replica(b, 3), 0);
    const double c[] = {1.0, 2.0, NAN};
    assert_int_equal(pool_choose_replica(c, 3), 1);
    const double d[] = {-NAN, 1.0};
    assert_int_equal(pool_choose_replica(d, 2), 1);
}

static void test_choose_ignores_infinities(void **state)
{
    (void)state;
    /* +Inf would win every comparison; it must not be trusted */
    const double a[] = {1.0, INFINITY, 2.0};
    assert_int_equal(pool_choose_replica(a, 3), 2);
    const double b[] = {INFINITY, 0.25};
    assert_int_equal(pool_choose_replica(b, 2), 1);
    const double c[] = {-INFINITY, 1.0, -INFINITY};
    assert_int_equal(pool_choose_replica(c, 3), 1);
    /* the largest finite double is still a score */
    const double d[] = {INFINITY, 1e300, NAN};
    assert_int_equal(pool_choose_replica(d, 3), 1);
}

static void test_choose_all_non_finite_is_no_choice(void **state)
{
    (void)state;
    const double a[] = {NAN, INFINITY, -INFINITY, NAN};
    assert_int_equal(pool_choose_replica(a, 4), -1);
    const double b[] = {INFINITY};
    assert_int_equal(pool_choose_replica(b, 1), -1);
    const double c[] = {NAN};
    assert_int_equal(pool_choose_replica(c, 1), -1);
}

static void test_choose_ignores_zero_and_negative(void **state)
{
    (void)state;
    const double a[] = {0.0, -0.0, -1.0};
    assert_int_equal(pool_choose_replica(a, 3), -1);
    const double b[] = {-5.0, 0.0, 1e-300};
    assert_int_equal(pool_choose_replica(b, 3), 2);
}

/* --- scoring a replica --- */

static void test_score_is_free_slots_of_a_ready_replica(void **state)
{
    (void)state;
    assert_true(pool_replica_score(REPLICA_READY, 4, 1) == 3.0);
    assert_true(pool_replica_score(REPLICA_READY, 1, 0) == 1.0);
    /* not routable: the score is not finite, so the chooser skips it */
    assert_false(isfinite(pool_replica_score(REPLICA_READY, 2, 2)));
    assert_false(isfinite(pool_replica_score(REPLICA_DOWN, 4, 0)));
    assert_false(isfinite(pool_replica_score(REPLICA_STARTING, 4, 0)));
    /* counts that cannot be: never a score */
    assert_false(isfinite(pool_replica_score(REPLICA_READY, 2, 3)));
    assert_false(isfinite(pool_replica_score(REPLICA_READY, -1, -3)));
    assert_false(isfinite(pool_replica_score(REPLICA_READY, 0, 0)));
}

/* --- dispatching over replica states built here --- */

typedef struct fixture {
    pool p;
    replica reps[4];
    sreq *slots[4][2];
    sreq *queue[8];
} fixture;

static void fixture_init(fixture *f, int n_replicas, int max_queue)
{
    memset(f, 0, sizeof(*f));
    f->p.cfg.n_replicas = n_replicas;
    f->p.cfg.n_slots = 2;
    f->p.cfg.max_queue = max_queue;
    f->p.cfg.no_engine_wait_ms = 1000;
    f->p.cfg.max_failed_starts = 3;
    f->p.reps = f->reps;
    f->p.queue = f->queue;
    for (int i = 0; i < n_replicas; i++) {
        f->reps[i] = (replica){.p = &f->p, .index = i, .slots = f->slots[i], .next_id = 1,
                               .conn_gen = 1};
    }
}

static void fixture_queue(fixture *f, sreq *r)
{
    f->p.queue[f->p.n_queue++] = r;
}

/* Frees what dispatch moved into slots (the tests own every reference). */
static void fixture_free(fixture *f)
{
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 2; j++) sreq_release(f->slots[i][j]);
    }
    for (int i = 0; i < f->p.n_queue; i++) sreq_release(f->p.queue[i]);
}

static void test_dispatch_skips_unroutable_replicas(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, 4, 4);
    f.reps[0].state = REPLICA_DOWN;
    f.reps[1] = (replica){.p = &f.p, .index = 1, .slots = f.slots[1], .state = REPLICA_READY,
                          .n_usable = 1, .n_busy = 1, .conn_gen = 1, .next_id = 1};
    f.slots[1][0] = sreq_new(100, false); /* the busy slot */
    f.reps[2].state = REPLICA_STARTING;
    f.reps[3].state = REPLICA_READY;
    f.reps[3].n_usable = 2;
    sreq *a = sreq_new(1, false), *b = sreq_new(2, false), *c = sreq_new(3, false);
    fixture_queue(&f, a);
    fixture_queue(&f, b);
    fixture_queue(&f, c);
    pool_sends sends = {0};
    pool_dispatch_locked(&f.p, &sends);
    /* first come first served onto the only replica with free slots */
    assert_int_equal(sends.n, 2);
    assert_ptr_equal(sends.v[0].req, a);
    assert_ptr_equal(sends.v[1].req, b);
    assert_ptr_equal(sends.v[0].rep, &f.reps[3]);
    assert_int_equal(a->replica, 3);
    assert_int_equal(b->replica, 3);
    assert_true(a->engine_id != b->engine_id);
    assert_int_equal(f.reps[3].n_busy, 2);
    assert_int_equal(f.p.n_queue, 1);
    assert_ptr_equal(f.p.queue[0], c);
    assert_int_equal(c->replica, -1);
    free(sends.v);
    fixture_free(&f);
}

static void test_dispatch_with_no_routable_replica_keeps_the_queue(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, 2, 4);
    f.reps[0].state = REPLICA_DOWN;
    f.reps[1].state = REPLICA_STARTING;
    f.reps[1].n_usable = 2;
    sreq *a = sreq_new(1, false);
    fixture_queue(&f, a);
    pool_sends sends = {0};
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 0);
    assert_int_equal(f.p.n_queue, 1);
    /* the replica becomes ready: the waiting request goes to it */
    f.reps[1].state = REPLICA_READY;
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 1);
    assert_ptr_equal(sends.v[0].rep, &f.reps[1]);
    assert_int_equal(f.p.n_queue, 0);
    free(sends.v);
    fixture_free(&f);
}

/* --- prefix routing: waiting for the replica that holds the prefix --- */

/* A request whose prompt is the n tokens base[0..n). */
static sreq *prompt_req(uint64_t serial, const int32_t *base, size_t n)
{
    sreq *r = sreq_new(serial, false);
    assert_non_null(r);
    r->gen.tokens = malloc(n * sizeof(int32_t));
    assert_non_null(r->gen.tokens);
    memcpy(r->gen.tokens, base, n * sizeof(int32_t));
    r->gen.n_tokens = n;
    return r;
}

/* n ready replicas of 2 slots with a prefix cache of 32-token blocks. */
static void prefix_fixture(fixture *f, int n, int max_queue)
{
    fixture_init(f, n, max_queue);
    for (int i = 0; i < n; i++) {
        f->reps[i].state = REPLICA_READY;
        f->reps[i].n_usable = 2;
        f->reps[i].block_tokens = 32;
        assert_int_equal(route_index_init(&f->reps[i].sent, 256), 0);
    }
}

static void prefix_fixture_free(fixture *f, int n)
{
    fixture_free(f);
    for (int i = 0; i < n; i++) route_index_free(&f->reps[i].sent);
}

/* Replica i remembers the full blocks of toks[0..n) as sent there. */
static void remember(fixture *f, int i, const int32_t *toks, size_t n)
{
    uint64_t h[16];
    size_t k = route_prompt_hashes(toks, n, 32, h, 16);
    for (size_t j = 0; j < k; j++) route_index_touch(&f->reps[i].sent, h[j], 1);
}

/* Fills replica i's free slots with placeholder requests. */
static void fill(fixture *f, int i)
{
    for (int j = 0; j < 2; j++) {
        if (f->slots[i][j] != NULL) continue;
        f->slots[i][j] = sreq_new(900 + (uint64_t)(i * 2 + j), false);
        f->slots[i][j]->replica = i;
        f->reps[i].n_busy++;
    }
}

/* A slot of replica i ends (its `done`), as the reader does it. */
static void finish_one(fixture *f, int i)
{
    for (int j = 0; j < 2; j++) {
        sreq *r = f->slots[i][j];
        if (r == NULL) continue;
        assert_true(pool_unslot_locked(&f->p, r));
        sreq_release(r);
        return;
    }
    fail_msg("replica %d has nothing to finish", i);
}

static void test_dispatch_waits_for_a_full_prefix_replica(void **state)
{
    (void)state;
    int32_t conv[128], other[40];
    for (int i = 0; i < 128; i++) conv[i] = 3 + (i * 37) % 250;
    for (int i = 0; i < 40; i++) other[i] = 5 + (i * 11) % 200;
    fixture f;
    prefix_fixture(&f, 3, 6);
    remember(&f, 1, conv, 96); /* the conversation's last turn went to replica 1 */
    fill(&f, 1);               /* which is full now */
    pool_sends sends = {0};

    /* its next turn waits for replica 1 although 0 and 2 are idle: load 2
     * against 0 is within the default balance of 2 */
    sreq *w = prompt_req(1, conv, 128);
    fixture_queue(&f, w);
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 0);
    assert_int_equal(f.p.n_queue, 1);
    assert_int_equal(w->replica, -1);
    assert_int_equal(w->wait_for, 1);

    /* a later request with no prefix anywhere passes the waiting head */
    sreq *x = prompt_req(2, other, 40);
    fixture_queue(&f, x);
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 1);
    assert_ptr_equal(sends.v[0].req, x);
    assert_true(x->replica == 0 || x->replica == 2);
    assert_int_equal(f.p.n_queue, 1);
    assert_ptr_equal(f.p.queue[0], w);
    assert_int_equal(f.p.route_decisions[ROUTE_LOAD], 1);

    /* another turn of the conversation: replica 1's load is now 2 running
     * + 1 waiting = 3, over the idle replica's 0 by more than 2: the least
     * loaded replica takes it */
    sreq *y = prompt_req(3, conv, 70); /* leaves 2 blocks of it where it goes */
    fixture_queue(&f, y);
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 2);
    assert_ptr_equal(sends.v[1].req, y);
    assert_int_equal(y->replica, x->replica == 0 ? 2 : 0);
    assert_int_equal(f.p.route_decisions[ROUTE_BALANCE], 1);
    assert_int_equal(w->wait_for, 1);

    /* replica 1 frees a slot: the waiting turn goes there, expecting its
     * 3 remembered blocks */
    finish_one(&f, 1);
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 3);
    assert_ptr_equal(sends.v[2].req, w);
    assert_int_equal(w->replica, 1);
    assert_int_equal(w->route_cached_n, 96);
    assert_int_equal(w->wait_for, -1);
    assert_int_equal(f.p.route_decisions[ROUTE_PREFIX], 1);
    assert_int_equal(f.p.n_queue, 0);
    free(sends.v);
    prefix_fixture_free(&f, 3);
}

static void test_dispatch_keeps_order_within_a_replica(void **state)
{
    (void)state;
    int32_t conv[128];
    for (int i = 0; i < 128; i++) conv[i] = 3 + (i * 53) % 250;
    fixture f;
    prefix_fixture(&f, 2, 6);
    f.p.cfg.route_balance = 4;
    remember(&f, 0, conv, 64);
    fill(&f, 0);
    sreq *a = prompt_req(1, conv, 70), *b = prompt_req(2, conv, 80), *c = prompt_req(3, conv, 90);
    fixture_queue(&f, a);
    fixture_queue(&f, b);
    fixture_queue(&f, c);
    pool_sends sends = {0};
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 0);
    assert_int_equal(f.p.n_queue, 3);
    /* each slot that frees takes the first of them that waits for it */
    finish_one(&f, 0);
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 1);
    assert_ptr_equal(sends.v[0].req, a);
    finish_one(&f, 0);
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 2);
    assert_ptr_equal(sends.v[1].req, b);
    assert_int_equal(f.p.n_queue, 1);
    assert_ptr_equal(f.p.queue[0], c);
    assert_int_equal(c->wait_for, 0);
    free(sends.v);
    prefix_fixture_free(&f, 2);
}

static void test_dispatch_reroutes_when_the_awaited_replica_dies(void **state)
{
    (void)state;
    int32_t conv[128];
    for (int i = 0; i < 128; i++) conv[i] = 7 + (i * 29) % 240;
    fixture f;
    prefix_fixture(&f, 2, 6);
    remember(&f, 1, conv, 96);
    fill(&f, 1);
    sreq *w = prompt_req(1, conv, 128);
    fixture_queue(&f, w);
    pool_sends sends = {0};
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 0);
    assert_int_equal(w->wait_for, 1);
    /* replica 1 dies (replica.c: its requests fail, it is DOWN) and the
     * dispatch that follows sends the waiting request to replica 0 */
    finish_one(&f, 1);
    finish_one(&f, 1);
    f.reps[1].state = REPLICA_DOWN;
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 1);
    assert_ptr_equal(sends.v[0].req, w);
    assert_int_equal(w->replica, 0);
    assert_int_equal(w->route_cached_n, 0);
    free(sends.v);
    prefix_fixture_free(&f, 2);
}

static void test_dispatch_without_room_to_wait_takes_a_free_slot(void **state)
{
    (void)state;
    int32_t conv[128];
    for (int i = 0; i < 128; i++) conv[i] = 3 + (i * 41) % 250;
    fixture f;
    prefix_fixture(&f, 2, 1); /* --max-queue 1 */
    remember(&f, 1, conv, 96);
    fill(&f, 1);
    sreq *a = prompt_req(1, conv, 100), *b = prompt_req(2, conv, 110);
    fixture_queue(&f, a);
    pool_sends sends = {0};
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 0);
    /* b comes while a takes the queue's one place: b may not wait too, so
     * it goes to the replica with a free slot */
    fixture_queue(&f, b);
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 1);
    assert_ptr_equal(sends.v[0].req, b);
    assert_int_equal(b->replica, 0);
    assert_int_equal(f.p.n_queue, 1);
    assert_ptr_equal(f.p.queue[0], a);
    free(sends.v);
    prefix_fixture_free(&f, 2);
}

static void test_dispatch_load_only_never_waits_for_one(void **state)
{
    (void)state;
    int32_t conv[128];
    for (int i = 0; i < 128; i++) conv[i] = 3 + (i * 41) % 250;
    fixture f;
    prefix_fixture(&f, 2, 4);
    f.p.cfg.route_load_only = 1;
    fill(&f, 1);
    sreq *a = prompt_req(1, conv, 100);
    fixture_queue(&f, a);
    pool_sends sends = {0};
    pool_dispatch_locked(&f.p, &sends);
    assert_int_equal(sends.n, 1);
    assert_int_equal(a->replica, 0);
    assert_int_equal(a->route_cached_n, 0);
    assert_int_equal(f.p.route_decisions[ROUTE_LOAD], 1);
    free(sends.v);
    prefix_fixture_free(&f, 2);
}

/* --- the wait for a restart while no replica is ready --- */

#define MS (INT64_C(1000000))

static void test_stranded_after_the_wait_bound(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, 2, 4);
    int64_t t0 = 1000 * MS;
    sreq *a = sreq_new(1, false), *b = sreq_new(2, false);
    a->t_submit_ns = t0;
    b->t_submit_ns = t0 + 500 * MS;
    fixture_queue(&f, a);
    fixture_queue(&f, b);
    /* a replica is ready: nothing is stranded, however long they waited */
    f.reps[0].state = REPLICA_READY;
    f.reps[0].n_usable = 2;
    f.reps[0].n_busy = 2;
    assert_null(pool_take_stranded_locked(&f.p, t0 + 100000 * MS));
    assert_int_equal(f.p.no_ready_since_ns, 0);
    /* it dies at t0 + 2 s: the wait counts from then, not from submission */
    f.reps[0].state = REPLICA_DOWN;
    f.reps[0].n_busy = 0;
    int64_t dead = t0 + 2000 * MS;
    assert_null(pool_take_stranded_locked(&f.p, dead));
    assert_int_equal(f.p.no_ready_since_ns, dead);
    assert_null(pool_take_stranded_locked(&f.p, dead + 999 * MS));
    assert_ptr_equal(pool_take_stranded_locked(&f.p, dead + 1000 * MS), a);
    assert_ptr_equal(pool_take_stranded_locked(&f.p, dead + 1000 * MS), b);
    assert_null(pool_take_stranded_locked(&f.p, dead + 1000 * MS));
    assert_int_equal(f.p.n_queue, 0);
    sreq_release(a);
    sreq_release(b);
    fixture_free(&f);
}

static void test_stranded_counts_from_submission_when_later(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, 1, 4);
    f.p.no_ready_since_ns = 100 * MS;
    sreq *a = sreq_new(1, false), *b = sreq_new(2, false);
    a->t_submit_ns = 200 * MS;
    b->t_submit_ns = 900 * MS;
    fixture_queue(&f, a);
    fixture_queue(&f, b);
    assert_ptr_equal(pool_take_stranded_locked(&f.p, 1200 * MS), a);
    assert_null(pool_take_stranded_locked(&f.p, 1899 * MS));
    assert_int_equal(f.p.n_queue, 1);
    /* a replica gets ready: b waits for its slot, not for the bound */
    f.reps[0].state = REPLICA_READY;
    assert_null(pool_take_stranded_locked(&f.p, 5000 * MS));
    assert_int_equal(f.p.n_queue, 1);
    sreq_release(a);
    fixture_free(&f);
}

static void test_stranded_at_once_when_every_replica_keeps_failing(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, 2, 4);
    f.p.no_ready_since_ns = 1000 * MS;
    sreq *a = sreq_new(1, false);
    a->t_submit_ns = 1000 * MS;
    fixture_queue(&f, a);
    f.reps[0].failed_starts = 3;
    f.reps[1].failed_starts = 2; /* one replica may still come up: wait */
    assert_false(pool_engines_failing_locked(&f.p));
    assert_null(pool_take_stranded_locked(&f.p, 1001 * MS));
    f.reps[1].failed_starts = 3;
    assert_true(pool_engines_failing_locked(&f.p));
    assert_ptr_equal(pool_take_stranded_locked(&f.p, 1001 * MS), a);
    /* a ready replica ends the failing state whatever the counts say */
    f.reps[1].state = REPLICA_READY;
    assert_false(pool_engines_failing_locked(&f.p));
    sreq_release(a);
    fixture_free(&f);
}

/* --- the watchdog's verdict (pool.h "Liveness") --- */

static proto_pong running_pong(int64_t tokens, double step_ms, double ms_per_token)
{
    return (proto_pong){.has_progress = true, .steps = 7, .running = true, .step_ms = step_ms,
                        .step_tokens = tokens, .ms_per_token = ms_per_token};
}

static void test_wedge_bound_scales_with_the_step(void **state)
{
    (void)state;
    pool_config c = {.wedge_floor_ms = 1000};
    double bound = 0;
    /* learned: 10 x 0.5 ms per token over 100 tokens on top of the floor */
    proto_pong pg = running_pong(100, 1499.0, 0.5);
    assert_false(pool_wedged(&c, &pg, 0, &bound));
    assert_true(bound == 1500.0);
    pg.step_ms = 1501.0;
    assert_true(pool_wedged(&c, &pg, 0, &bound));
    /* a long step of many tokens is not a wedge where a short one is */
    pg = running_pong(10000, 20000.0, 0.5);
    assert_false(pool_wedged(&c, &pg, 0, &bound));
    pg.step_tokens = 10;
    assert_true(pool_wedged(&c, &pg, 0, &bound));
    /* the learned allowance is at least 1 ms per token */
    pg = running_pong(100, 1099.0, 0.01);
    assert_false(pool_wedged(&c, &pg, 0, &bound));
    assert_true(bound == 1100.0);
    /* before any step: 1000 ms per token */
    pg = running_pong(3, 3999.0, 0.0);
    assert_false(pool_wedged(&c, &pg, 0, &bound));
    assert_true(bound == 4000.0);
    /* a fixed allowance replaces the learned one */
    c.wedge_per_token_ms = 0.1;
    pg = running_pong(100, 1011.0, 0.5);
    assert_true(pool_wedged(&c, &pg, 0, &bound));
    assert_true(bound == 1010.0);
    /* how long the count stood still does not matter while a step runs */
    pg.step_ms = 5.0;
    assert_false(pool_wedged(&c, &pg, 1e9, &bound));
}

static void test_wedge_outside_a_step_is_the_floor(void **state)
{
    (void)state;
    pool_config c = {.wedge_floor_ms = 1000};
    proto_pong pg = {.has_progress = true, .steps = 3, .ms_per_token = 0.5};
    double bound = 0;
    assert_false(pool_wedged(&c, &pg, 999.0, &bound));
    assert_true(bound == 1000.0);
    assert_true(pool_wedged(&c, &pg, 1001.0, &bound));
}

static void test_wedge_never_without_figures_or_when_off(void **state)
{
    (void)state;
    pool_config c = {.wedge_floor_ms = 1000};
    double bound;
    proto_pong bare = {0}; /* a pong with no figures */
    assert_false(pool_wedged(&c, &bare, 1e12, &bound));
    c.wedge_floor_ms = -1;
    proto_pong pg = running_pong(1, 1e12, 0.5);
    assert_false(pool_wedged(&c, &pg, 1e12, &bound));
    pg.running = false;
    assert_false(pool_wedged(&c, &pg, 1e12, &bound));
}

static void test_wedge_hostile_figures_never_condemn(void **state)
{
    (void)state;
    pool_config c = {.wedge_floor_ms = 1000};
    double bound;
    /* an engine that calls itself infinitely slow gets an infinite bound */
    proto_pong pg = running_pong(1, 1e300, INFINITY);
    assert_false(pool_wedged(&c, &pg, 0, &bound));
    pg = running_pong(1, NAN, 0.5);
    assert_false(pool_wedged(&c, &pg, 0, &bound));
    pg = running_pong(INT64_MAX, 1e18, 0.5);
    assert_false(pool_wedged(&c, &pg, 0, &bound));
    /* a NaN cost falls back to the prior, not to no bound */
    pg = running_pong(1, 2001.0, NAN);
    assert_true(pool_wedged(&c, &pg, 0, &bound));
    assert_true(bound == 2000.0);
    proto_pong idle = {.has_progress = true};
    assert_false(pool_wedged(&c, &idle, NAN, &bound));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choose_picks_the_highest_finite),
        cmocka_unit_test(test_choose_ties_go_to_the_lowest_index),
        cmocka_unit_test(test_choose_ignores_nan),
        cmocka_unit_test(test_choose_ignores_infinities),
        cmocka_unit_test(test_choose_all_non_finite_is_no_choice),
        cmocka_unit_test(test_choose_ignores_zero_and_negative),
        cmocka_unit_test(test_score_is_free_slots_of_a_ready_replica),
        cmocka_unit_test(test_dispatch_skips_unroutable_replicas),
        cmocka_unit_test(test_dispatch_with_no_routable_replica_keeps_the_queue),
        cmocka_unit_test(test_dispatch_waits_for_a_full_prefix_replica),
        cmocka_unit_test(test_dispatch_keeps_order_within_a_replica),
        cmocka_unit_test(test_dispatch_reroutes_when_the_awaited_replica_dies),
        cmocka_unit_test(test_dispatch_without_room_to_wait_takes_a_free_slot),
        cmocka_unit_test(test_dispatch_load_only_never_waits_for_one),
        cmocka_unit_test(test_stranded_after_the_wait_bound),
        cmocka_unit_test(test_stranded_counts_from_submission_when_later),
        cmocka_unit_test(test_stranded_at_once_when_every_replica_keeps_failing),
        cmocka_unit_test(test_wedge_bound_scales_with_the_step),
        cmocka_unit_test(test_wedge_outside_a_step_is_the_floor),
        cmocka_unit_test(test_wedge_never_without_figures_or_when_off),
        cmocka_unit_test(test_wedge_hostile_figures_never_condemn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
