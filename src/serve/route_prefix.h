/* Prefix-aware routing (pool.h "Routing"): what the router remembers of the
 * prompts it sent to each replica, and its choice. Pure functions, no
 * locks: the pool calls them under its sched_lock.
 *
 * A replica's index holds the chain hashes (base/chainhash.h, the engine's
 * own definition, over the engine's block size) of the full prompt blocks
 * sent there, at most ROUTE_INDEX_MAX per replica; when full, the least
 * recently sent half is forgotten at once (LRU aging in bulk, so an insert
 * costs O(1) amortized). A hash names its whole prefix, so the expected
 * cached prefix of a prompt on a replica is the leading run of its block
 * hashes present there. This is an estimate: the engine may have evicted
 * blocks since, and the engine's answer (cached_n) is what counts. */
#ifndef STRATA_SERVE_ROUTE_PREFIX_H
#define STRATA_SERVE_ROUTE_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ROUTE_INDEX_MAX 16384 /* block hashes remembered per replica (16384 x 32 tokens = 512k) */

typedef struct route_index {
    uint64_t *keys;   /* open addressing, 0 = empty; (cap) */
    uint64_t *ticks;  /* last time each key was sent; (cap) */
    size_t cap;       /* a power of two, 2 x max at least */
    size_t n, max;
} route_index;

/* max entries (>= 2). Returns 0, or -1 when out of memory. */
int route_index_init(route_index *ix, size_t max);
void route_index_free(route_index *ix);
/* Forgets everything (an engine restart). */
void route_index_clear(route_index *ix);
/* Adds h, or refreshes it, as sent at tick; forgets the older half first
 * when full. */
void route_index_touch(route_index *ix, uint64_t h, uint64_t tick);
bool route_index_has(const route_index *ix, uint64_t h);

/* The chain hashes of the full blocks of toks[0..n) with block_tokens per
 * block, into out (at most max of them); returns how many. */
size_t route_prompt_hashes(const int32_t *toks, size_t n, int64_t block_tokens, uint64_t *out,
                           size_t max);

/* Prompt tokens the replica is expected to have cached: the leading run of
 * hashes in ix times block_tokens, never more than n_prompt - 1 (the engine
 * always computes the last prompt token). */
int64_t route_expected_cached(const route_index *ix, const uint64_t *hashes, size_t n_hashes,
                              int64_t block_tokens, int64_t n_prompt);

/* One replica as the choice sees it. */
typedef struct route_cand {
    bool ready;         /* routable: ready, with usable slots and sane counts */
    int load;           /* requests it runs plus those waiting for it */
    int free;           /* free slots */
    int64_t expected;   /* expected cached prompt tokens */
} route_cand;

enum route_reason {
    ROUTE_PREFIX = 0,  /* the replica with the longest expected prefix */
    ROUTE_LOAD = 1,    /* no replica holds any of the prompt: the least loaded */
    ROUTE_BALANCE = 2, /* the prefix replicas were too loaded: the least loaded */
    ROUTE_N_REASONS = 3,
};

/* The replica for a request. Among ready replicas, the longest expected
 * prefix whose load is at most balance above the least loaded ready
 * replica's (ties by load, then most free slots); that replica is returned
 * even when it has no free slot (the request then waits for it: its cache
 * is worth a wait while the load stays within the balance), unless
 * may_wait is false (then only replicas with a free slot count). Without
 * such a prefix replica: the least loaded replica with a free slot (load,
 * then most free slots), or -1 when no ready replica has one (the request
 * waits for whichever frees first). Ties go to the first from index start
 * on, cyclically (the pool rotates start so that idle replicas share new
 * conversations). *why says which rule decided. */
int route_choose(const route_cand *c, int n, int balance, int start, bool may_wait,
                 enum route_reason *why);

#endif
