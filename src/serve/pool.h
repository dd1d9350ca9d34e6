/* The replicas of a server and the admission queue in front of them.
 *
 * A pool starts N engine processes (replica.c), restarts them with backoff
 * when they die, and routes requests (router.c): a request goes to the ready
 * replica with the most free slots, or waits in one bounded FIFO queue shared
 * by all replicas until a slot frees (or, with prefix routing, until the
 * replica holding its prompt's prefix has one: see "Routing").
 *
 * While no replica is ready (every engine died, or is still restarting), a
 * request still waits in that queue, within its bound, for a replica to
 * become ready; requests are then dispatched first come first served. The
 * wait is bounded: a queued request fails with a 503 (`no_engine`) once it
 * has waited no_engine_wait_ms with no replica ready, or at once when every
 * replica has failed max_failed_starts starts in a row (exited or was killed
 * before its `ready`): a pool whose engines cannot start answers quickly
 * instead of holding clients. New requests then get POOL_NO_ENGINE until a
 * replica is ready again; the supervisor keeps restarting with backoff.
 *
 * Liveness. The supervisor pings every ready engine each ping_interval_ms
 * and kills one that answers no ping for ping_timeout_ms. A pong proves only
 * that the engine reads its input (its reader answers at once, even during
 * a long step); the progress figures it carries (engine/protocol.h) are what
 * prove that generation moves. While a replica has work in flight (a
 * request sent to it and not ended), each pong with figures is judged, and
 * the engine is *wedged* when
 *   - a step is running and has run for longer than
 *         floor + per_token * (the step's tokens),
 *     per_token being wedge_per_token_ms when set, else learned from the
 *     engine's own recent steps: POOL_WEDGE_FACTOR times the slowest ms per
 *     token of its last 32 steps, at least POOL_WEDGE_MIN_PER_TOKEN_MS, and
 *     POOL_WEDGE_PRIOR_PER_TOKEN_MS before its first step; or
 *   - no step is running and the engine's step count has not moved for
 *     longer than floor, counted from when the count was first seen at its
 *     value or the replica's work began, whichever is later (a scheduler
 *     stuck outside a step: a deadlock, a lost wake-up).
 * floor is wedge_floor_ms (POOL_WEDGE_FLOOR_MS by default). An idle replica
 * is never wedged, nor is an engine whose pongs carry no figures. Every
 * figure is taken as the pong reports it, never extrapolated, so a stale
 * pong cannot make a healthy engine look wedged; detection therefore comes
 * within the bound plus one ping interval. A wedged engine is killed and
 * restarted exactly like a dead one: its in-flight requests end with a 503
 * `engine_died` whose message says it stopped making progress, and other
 * replicas are untouched.
 *
 * Ownership (DESIGN.md): while a request is queued or holds an engine slot,
 * the pool holds a reference to it; it lets go after the request's terminal
 * message, after the engine serving it died (the request then carries a 503
 * error), or when it is dropped from the queue. A cancelled request keeps its
 * slot until its terminal message. */
#ifndef STRATA_SERVE_POOL_H
#define STRATA_SERVE_POOL_H

#include "base/err.h"
#include "serve/request.h"

#include <stdbool.h>
#include <stdint.h>

/* The watchdog's defaults (see "Liveness" above). */
#define POOL_WEDGE_FLOOR_MS 30000
#define POOL_WEDGE_FACTOR 10.0
#define POOL_WEDGE_MIN_PER_TOKEN_MS 1.0
#define POOL_WEDGE_PRIOR_PER_TOKEN_MS 1000.0

typedef struct pool_config {
    const char *engine_path;        /* the executable to start */
    const char *const *engine_args; /* its arguments after argv[0], NULL-terminated */
    int n_replicas;                 /* >= 1 */
    int n_slots;                    /* slots the server uses per replica (>= 1) */
    int max_queue;                  /* requests that may wait; 0: none */
    int ping_interval_ms;           /* 0: 1000 */
    int ping_timeout_ms;            /* an engine silent this long is killed; 0: 10000 */
    int ready_timeout_ms;           /* from start to `ready`; 0: 600000 */
    int backoff_min_ms, backoff_max_ms; /* restart delays; 0: 100 and 5000 */
    int no_engine_wait_ms;          /* a queued request's longest wait while no
                                       replica is ready; 0: 60000 */
    int max_failed_starts;          /* failed starts in a row, on every replica,
                                       that fail the queue at once; 0: 3 */
    int wedge_floor_ms;             /* the watchdog's floor; 0: POOL_WEDGE_FLOOR_MS;
                                       < 0: no wedge check (pings still are) */
    double wedge_per_token_ms;      /* a fixed per-token allowance; 0: learned */
    int route_load_only;            /* 1: route by load alone (--route load) */
    int route_balance;              /* the balance threshold of prefix routing, in
                                       requests running + waiting (see "Routing");
                                       0: POOL_ROUTE_BALANCE; < 0: none (0) */
} pool_config;

/* Routing. By default (prefix routing) a request goes to the ready
 * replica expected to hold the longest prefix of its prompt in its prefix
 * cache: the router remembers, per replica, the chain hashes of the full
 * prompt blocks it sent there (route_prefix.h; bounded, least recently sent
 * forgotten first, all of it when that engine restarts), with the engine's
 * block size and minimum reuse from its `ready`. A replica's load is the
 * requests it runs plus the queued requests waiting for it. The prefix
 * replica is passed over when its load exceeds the least loaded ready
 * replica's by more than route_balance; then, and when no replica holds any
 * of the prompt, the request takes the least loaded replica with a free
 * slot (fewest requests, then most free slots, ties rotating), or waits in
 * the queue for whichever slot frees first.
 *
 * When the prefix replica has no free slot but is within the balance, the
 * request waits in the queue for that replica rather than missing the cache
 * elsewhere; requests behind it that go to other replicas pass it, so the
 * queue is first come first served per replica. The choice is made again
 * on every dispatch (a slot freed, a request queued, an engine ready or
 * dead): a request waiting for a replica whose engine dies is routed again
 * at once and is not failed with that engine's requests. One that finds the
 * queue full (max_queue others waiting) may not wait for a busy replica and
 * takes a free slot elsewhere. With route_load_only, the ready replica with
 * the most free slots, first come first served over all replicas. */
#define POOL_ROUTE_BALANCE 2

typedef struct pool pool;

/* Starts the engines (returns without waiting for their `ready`). The
 * configuration's strings must outlive the pool. */
int pool_start(pool **out, const pool_config *c, strata_err *err);

/* Stops routing, fails queued requests, asks each engine to shut down, waits
 * up to grace_ms for them to exit, kills the rest, reaps them and frees the
 * pool. Requests still in flight get a terminal error. */
void pool_stop(pool *p, int grace_ms);

enum pool_submit_result {
    POOL_SUBMITTED = 0,
    POOL_QUEUE_FULL = 1, /* 429: replicas are ready, all slots busy, queue full */
    POOL_NO_ENGINE = 2,  /* 503: no replica is ready and r cannot wait (queue
                            full, or every replica keeps failing to start) */
    POOL_STOPPING = 3,   /* 503: shutting down */
};

/* Hands r to a replica or to the queue (the pool takes its own reference).
 * A request queued while no replica is ready ends, if none becomes ready in
 * time, as FINISH_ERROR with status 503 and code "no_engine". */
enum pool_submit_result pool_submit(pool *p, sreq *r);

/* Cancels r: dropped (and finished as cancelled) while queued, sent `stop`
 * when running. Idempotent; r stays valid for the caller. */
void pool_cancel(pool *p, sreq *r);

/* Cancels the n requests of rs (NULLs skipped) together: all are marked
 * before any is acted on, so that a slot freed by one's `stop` never goes
 * to another still waiting in the queue (the choices of one request a
 * client left). */
void pool_cancel_all(pool *p, sreq *const *rs, size_t n);

/* The KV figures of an engine's latest pong (engine/protocol.h `pong.kv`),
 * as it sent them: blocks in all, in use by running requests, listed in the
 * prefix cache; the pool's bytes, and the bytes of it committed (memory the
 * pool holds now; 0 when the engine did not say, as a resident pool does
 * not); prompt tokens looked up in and reused from the prefix cache, and
 * requests preempted, since that engine started. */
typedef struct pool_kv_figures {
    int64_t blocks, used, cached, bytes, committed_bytes;
    int64_t lookup_tokens, hit_tokens, preemptions;
} pool_kv_figures;

typedef struct pool_replica_info {
    int ready;       /* 1 when routable */
    int in_flight;   /* slots held, cancelled requests included */
    int waiting;     /* queued requests waiting for this replica (prefix routing) */
    int slots;       /* usable slots */
    int64_t restarts;
    int64_t n_ctx;
    int embeddings;  /* the engine said it can embed (unknown: 1) */
    /* kv_known: a pong with kv came from the engine now running (false
     * before its first one, and from each restart until its next). */
    bool kv_known;
    pool_kv_figures kv;
} pool_replica_info;

#define POOL_MAX_REPLICAS 64

typedef struct pool_info {
    int n_replicas, n_ready, queue_depth;
    int64_t route_decisions[3]; /* by enum route_reason: prefix, load, balance */
    /* The smallest n_ctx of the ready replicas; while none is ready, the
     * smallest a replica reported when it last was (a restarted engine runs
     * with the same arguments); 0 before any replica was ever ready. */
    int64_t n_ctx;
    pool_replica_info rep[POOL_MAX_REPLICAS];
} pool_info;

void pool_get_info(pool *p, pool_info *out);

/* Waits up to step_ms until some replica has been ready at least once (its
 * context size is then known), bounded as a queued request's wait is.
 * Returns POOL_SUBMITTED once one has; POOL_NO_ENGINE while every replica
 * keeps failing to start; POOL_STOPPING; -2 when the caller has waited
 * (since since_ns, a strata_clock_ns time) no_engine_wait_ms; or -1 when
 * step_ms passed without any of these (call again). */
int pool_wait_ever_ready(pool *p, int64_t since_ns, int step_ms);

#endif
