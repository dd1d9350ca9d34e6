/* Shared by replica.c (processes, reader threads, supervision) and router.c
 * (queue and dispatch). Not for other files.
 *
 * Locks, always taken in this order and never the other way round:
 *   pool.sched_lock    — the queue, every replica's state/slots/ids/timers
 *   replica.write_lock — the replica's stdin fd and each sreq.gen_sent
 *   sreq.result_lock   — a request's results
 * A pipe write never happens under sched_lock (an engine that does not read
 * would stall routing). */
#ifndef STRATA_SERVE_POOL_INTERNAL_H
#define STRATA_SERVE_POOL_INTERNAL_H

#include "engine/protocol.h"
#include "serve/pool.h"
#include "serve/route_prefix.h"

#include <pthread.h>
#include <sys/types.h>

enum replica_state {
    REPLICA_DOWN = 0,  /* no process; restarts at restart_at_ns */
    REPLICA_STARTING,  /* process started, no `ready` yet */
    REPLICA_READY,
};

typedef struct replica {
    struct pool *p;
    int index;
    /* sched_lock: */
    enum replica_state state;
    pid_t pid;
    uint64_t conn_gen;     /* bumped at every start */
    uint64_t next_id;      /* never reused on one connection */
    sreq **slots;          /* n_slots entries, NULL when free */
    int n_usable, n_busy;
    int64_t n_ctx;
    /* prefix routing (route_prefix.h): the engine's block size and prefix
     * rules from its `ready` (0: no prefix cache there), and what was sent */
    int64_t block_tokens, prefix_min_tokens;
    route_index sent;
    int64_t started_ns, restart_at_ns, last_pong_ns, last_ping_ns;
    /* the watchdog (pool.h "Liveness"): */
    int64_t busy_since_ns; /* when n_busy last went from 0 to 1 */
    bool pg_known;         /* a pong with figures came on this connection */
    int64_t pg_steps;      /* its step count */
    int64_t pg_steps_ns;   /* when a pong first showed that count */
    bool kv_known;         /* a pong with kv came on this connection */
    pool_kv_figures kv;    /* the latest one's figures (for /metrics) */
    int backoff_ms;
    int failed_starts;     /* starts in a row that ended before `ready` */
    int64_t restarts;
    bool reader_live;      /* a reader thread exists and is not joined */
    bool reader_done;      /* it finished the death path; join it */
    pthread_t reader;
    /* write_lock: */
    pthread_mutex_t write_lock;
    int fd_in;
    uint64_t fd_gen;       /* the conn_gen fd_in belongs to */
} replica;

struct pool {
    pool_config cfg;
    pthread_mutex_t sched_lock;
    pthread_cond_t sched_cond; /* replica state changes, for the supervisor */
    replica *reps;
    /* sched_lock: */
    sreq **queue;             /* FIFO, queue[0] first */
    int n_queue;
    bool stopping;
    int64_t no_ready_since_ns; /* when the pool last had no ready replica; 0 while one is */
    uint64_t route_tick;       /* requests routed, the LRU clock of the indexes */
    int64_t route_decisions[ROUTE_N_REASONS];
    pthread_t supervisor;
};

/* A request assigned to a replica under sched_lock whose `gen` must still be
 * written (after sched_lock is released). */
typedef struct pool_send {
    replica *rep;
    sreq *req;
} pool_send;

typedef struct pool_sends {
    pool_send *v;
    int n, cap;
} pool_sends;

/* router.c: a replica's score for the next request, from its state and
 * slots (prefix-cache affinity joins here when the engine reports it).
 * Higher is better; NAN for a replica that must not be chosen (not ready, no
 * free slot, or inconsistent counts). Pure: no lock needed. */
double pool_replica_score(enum replica_state state, int n_usable, int n_busy);
/* router.c: the index of the best of n scores, or -1 when none qualifies.
 * Only finite positive scores are considered: NaN, +Inf and -Inf are ignored,
 * never trusted (an affinity ratio can be 0/0 or x/0). Ties go to the lowest
 * index. Pure: no lock needed. */
int pool_choose_replica(const double *scores, int n);

/* router.c: under sched_lock, moves queued requests to free slots. */
void pool_dispatch_locked(pool *p, pool_sends *out);
/* router.c: writes the collected gens (no lock held) and frees the list. */
void pool_flush_sends(pool *p, pool_sends *s);
/* router.c: under sched_lock, removes r from its slot (if still there). */
bool pool_unslot_locked(pool *p, sreq *r);
/* router.c: under sched_lock, updates no_ready_since_ns and removes from the
 * queue one request that may wait no longer for a replica to become ready
 * (pool.h); returns it with the queue's reference, for the caller to finish
 * with a 503 and release after dropping the lock. NULL when there is none. */
sreq *pool_take_stranded_locked(pool *p, int64_t now_ns);
/* router.c: under sched_lock, whether no replica is ready and every replica
 * has failed max_failed_starts starts in a row. */
bool pool_engines_failing_locked(const pool *p);

/* replica.c: the watchdog's verdict (pool.h "Liveness") on one pong of a
 * replica with work in flight, from c's wedge settings (as pool_start
 * normalised them) and the pong's figures. stalled_ms: how long the step
 * count has stood still (since a pong first showed its value, or since the
 * work began if later). True when wedged; *bound_ms is the bound that
 * applies (the floor, or the floor plus the step's per-token allowance).
 * Never true for a pong without figures, with the check off, or when a
 * figure is NaN or the bound infinite. Pure: no lock needed. */
bool pool_wedged(const pool_config *c, const proto_pong *pg, double stalled_ms, double *bound_ms);

/* replica.c */
int replica_spawn(replica *rep, strata_err *err);
int replica_write(replica *rep, uint64_t conn_gen, const char *line);
void *pool_supervise(void *arg);

#endif
