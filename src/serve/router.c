/* The pool's routing: its lifetime, the bounded FIFO admission queue shared
 * by all replicas (including its wait for a restart while no replica is
 * ready), scoring and choosing a replica, and cancellation (pool.h). Runs on
 * the calling threads (HTTP handlers, replica readers, the supervisor); no
 * thread of its own besides the supervisor it starts (replica.c). */
#define _GNU_SOURCE
#include "serve/pool_internal.h"

#include "base/clock.h"
#include "base/log.h"
#include "serve/wire.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

double pool_replica_score(enum replica_state state, int n_usable, int n_busy)
{
    if (state != REPLICA_READY) return NAN;
    if (n_usable < 0 || n_busy < 0 || n_busy >= n_usable) return NAN;
    return (double)(n_usable - n_busy);
}

int pool_choose_replica(const double *scores, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!isfinite(scores[i]) || !(scores[i] > 0)) continue;
        if (best < 0 || scores[i] > scores[best]) best = i;
    }
    return best;
}

_Static_assert(ROUTE_N_REASONS == 3, "pool_info.route_decisions has 3 entries");

/* r's prompt chain hashes for block size block, kept on r (a queued
 * request is looked at again on every dispatch pass) and computed again
 * only for another block size. */
static void hashes_for(sreq *r, int64_t block)
{
    if (r->route_block == block) return;
    const int32_t *toks = r->embed ? r->emb.tokens : r->gen.tokens;
    size_t n_toks = r->embed ? r->emb.n_tokens : r->gen.n_tokens;
    free(r->route_h);
    size_t max = n_toks / (size_t)block + 1;
    r->route_block = block;
    r->route_h = malloc(max * sizeof(*r->route_h));
    r->route_n = r->route_h != NULL ? route_prompt_hashes(toks, n_toks, block, r->route_h, max) : 0;
}

/* What the router decided for one queued request. */
typedef struct route_pick {
    int replica;      /* where it goes, or the replica it waits for; -1: waits for any */
    bool now;         /* that replica has a free slot: send it now */
    enum route_reason why;
    int64_t expected; /* prompt tokens expected cached there */
} route_pick;

/* The choice for r under sched_lock (pool.h "Routing"). waiting[i]: the
 * requests ahead of r in the queue that wait for replica i (part of its
 * load). may_wait: r may wait for a busy prefix replica (false when the
 * queue has no room left for it). Records nothing. */
static route_pick pick_replica_locked(pool *p, sreq *r, const int *waiting, bool may_wait)
{
    int n = p->cfg.n_replicas;
    route_pick k = {.replica = -1, .why = ROUTE_LOAD};
    if (p->cfg.route_load_only) {
        double scores[POOL_MAX_REPLICAS];
        for (int i = 0; i < n; i++) {
            const replica *rep = &p->reps[i];
            scores[i] = pool_replica_score(rep->state, rep->n_usable, rep->n_busy);
        }
        k.replica = pool_choose_replica(scores, n);
        k.now = k.replica >= 0;
        return k;
    }
    size_t n_toks = r->embed ? r->emb.n_tokens : r->gen.n_tokens;
    bool opted_out = r->embed ? r->emb.no_cache : r->gen.no_cache;
    route_cand c[POOL_MAX_REPLICAS];
    for (int i = 0; i < n; i++) {
        replica *rep = &p->reps[i];
        bool ready = rep->state == REPLICA_READY && rep->n_usable > 0 && rep->n_busy >= 0 &&
                     rep->n_busy <= rep->n_usable;
        c[i] = (route_cand){.ready = ready, .load = rep->n_busy + waiting[i],
                            .free = ready ? rep->n_usable - rep->n_busy : 0};
        int64_t bt = rep->block_tokens;
        if (!ready || bt <= 0 || opted_out || n_toks < (size_t)bt) continue;
        hashes_for(r, bt);
        int64_t e = route_expected_cached(&rep->sent, r->route_h, r->route_n, bt, (int64_t)n_toks);
        c[i].expected = e >= rep->prefix_min_tokens ? e : 0;
    }
    int balance = p->cfg.route_balance > 0 ? p->cfg.route_balance
                  : p->cfg.route_balance == 0 ? POOL_ROUTE_BALANCE : 0;
    int start = n > 0 ? (int)(p->route_tick % (uint64_t)n) : 0;
    k.replica = route_choose(c, n, balance, start, may_wait, &k.why);
    if (k.replica >= 0) {
        k.now = c[k.replica].free > 0;
        k.expected = c[k.replica].expected;
    }
    return k;
}

/* r goes to replica k.replica now (sched_lock held): the decision is
 * counted and, for prefix routing, what r's prompt leaves there is
 * remembered. */
static void record_route_locked(pool *p, sreq *r, const route_pick *k)
{
    p->route_decisions[k->why]++;
    r->route_cached_n = k->expected;
    if (p->cfg.route_load_only) return;
    replica *rep = &p->reps[k->replica];
    int64_t bt = rep->block_tokens;
    size_t n_toks = r->embed ? r->emb.n_tokens : r->gen.n_tokens;
    bool opted_out = r->embed ? r->emb.no_cache : r->gen.no_cache;
    if (opted_out || bt <= 0 || n_toks < (size_t)bt) return;
    hashes_for(r, bt);
    uint64_t tick = ++p->route_tick;
    for (size_t j = 0; j < r->route_n; j++) route_index_touch(&rep->sent, r->route_h[j], tick);
}

static void sends_push(pool_sends *s, replica *rep, sreq *r)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        pool_send *v = realloc(s->v, (size_t)cap * sizeof(*v));
        if (v == NULL) return; /* cannot happen in practice; the request then waits for its slot's death */
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (pool_send){rep, r};
}

/* One pass over the queue, first come first served: each request goes to
 * the replica the router picks when that one has a free slot; one that
 * waits for a busy prefix replica keeps its place and counts in that
 * replica's load for the requests behind it, which may pass it to other
 * replicas (so a replica's own waiting requests still go in order). The
 * pass ends at the first request that no free slot fits: nothing behind it
 * can move either. */
void pool_dispatch_locked(pool *p, pool_sends *out)
{
    int waiting[POOL_MAX_REPLICAS] = {0};
    int i = 0; /* requests before i stay queued */
    while (i < p->n_queue && !p->stopping) {
        sreq *r = p->queue[i];
        route_pick k = pick_replica_locked(p, r, waiting, i < p->cfg.max_queue);
        if (!k.now) {
            r->wait_for = k.replica;
            if (k.replica < 0) return;
            waiting[k.replica]++;
            i++;
            continue;
        }
        int best = k.replica;
        replica *rep = &p->reps[best];
        record_route_locked(p, r, &k);
        memmove(p->queue + i, p->queue + i + 1, (size_t)(p->n_queue - i - 1) * sizeof(*p->queue));
        p->n_queue--;
        r->wait_for = -1;
        int slot = 0;
        while (rep->slots[slot] != NULL) slot++;
        rep->slots[slot] = r; /* the queue's reference moves to the slot */
        if (rep->n_busy == 0) rep->busy_since_ns = strata_clock_ns(); /* the watchdog's clock */
        rep->n_busy++;
        r->replica = best;
        r->engine_id = rep->next_id++;
        r->conn_gen = rep->conn_gen;
        pthread_mutex_lock(&r->result_lock);
        r->t_start_ns = strata_clock_ns();
        pthread_mutex_unlock(&r->result_lock);
        sends_push(out, rep, r);
    }
}

bool pool_unslot_locked(pool *p, sreq *r)
{
    if (r->replica < 0) return false;
    replica *rep = &p->reps[r->replica];
    for (int i = 0; i < p->cfg.n_slots; i++) {
        if (rep->slots[i] == r) {
            rep->slots[i] = NULL;
            rep->n_busy--;
            r->replica = -1;
            return true;
        }
    }
    return false;
}

/* Writes one gen, unless the request was cancelled before it went out: then
 * the engine never hears of it and the slot is freed here. */
static void send_one(pool *p, replica *rep, sreq *r, pool_sends *more)
{
    pthread_mutex_lock(&rep->write_lock);
    pthread_mutex_lock(&r->result_lock);
    bool cancelled = r->cancel_requested;
    pthread_mutex_unlock(&r->result_lock);
    bool drop = cancelled;
    if (!cancelled && rep->fd_in >= 0 && rep->fd_gen == r->conn_gen) {
        char *line = wire_encode_request(r, r->engine_id);
        if (line == NULL) {
            drop = true;
        } else {
            r->gen_sent = true;
            size_t n = strlen(line), off = 0;
            while (off < n) {
                ssize_t k = write(rep->fd_in, line + off, n - off);
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) break; /* the reader sees EOF and fails the request */
                off += (size_t)k;
            }
            free(line);
        }
    }
    pthread_mutex_unlock(&rep->write_lock);
    if (!drop) return;
    pthread_mutex_lock(&p->sched_lock);
    bool was_slotted = r->conn_gen == rep->conn_gen && pool_unslot_locked(p, r);
    if (was_slotted) pool_dispatch_locked(p, more);
    pthread_mutex_unlock(&p->sched_lock);
    if (was_slotted) {
        sreq_finish_with(r, cancelled ? SREQ_FINISH_CANCELLED : SREQ_FINISH_ERROR, NULL, 500,
                         "internal_error", "out of memory");
        sreq_release(r);
    }
}

void pool_flush_sends(pool *p, pool_sends *s)
{
    for (int i = 0; i < s->n; i++) send_one(p, s->v[i].rep, s->v[i].req, s);
    free(s->v);
    *s = (pool_sends){0};
}

bool pool_engines_failing_locked(const pool *p)
{
    for (int i = 0; i < p->cfg.n_replicas; i++) {
        const replica *rep = &p->reps[i];
        if (rep->state == REPLICA_READY || rep->failed_starts < p->cfg.max_failed_starts) return false;
    }
    return true;
}

sreq *pool_take_stranded_locked(pool *p, int64_t now_ns)
{
    bool any_ready = false;
    for (int i = 0; i < p->cfg.n_replicas && !any_ready; i++) {
        any_ready = p->reps[i].state == REPLICA_READY;
    }
    if (any_ready) {
        p->no_ready_since_ns = 0;
        return NULL;
    }
    if (p->no_ready_since_ns == 0) p->no_ready_since_ns = now_ns;
    if (p->n_queue == 0) return NULL;
    bool failing = pool_engines_failing_locked(p);
    int64_t limit_ns = (int64_t)p->cfg.no_engine_wait_ms * 1000000;
    for (int i = 0; i < p->n_queue; i++) {
        sreq *r = p->queue[i];
        /* Waiting behind busy replicas does not count: only the time since
         * the pool last had a ready replica. */
        int64_t since = r->t_submit_ns > p->no_ready_since_ns ? r->t_submit_ns : p->no_ready_since_ns;
        if (!failing && now_ns - since < limit_ns) continue;
        memmove(p->queue + i, p->queue + i + 1, (size_t)(p->n_queue - i - 1) * sizeof(*p->queue));
        p->n_queue--;
        return r;
    }
    return NULL;
}

enum pool_submit_result pool_submit(pool *p, sreq *r)
{
    pool_sends sends = {0};
    enum pool_submit_result res = POOL_SUBMITTED;
    pthread_mutex_lock(&p->sched_lock);
    int n_ready = 0, n_free = 0;
    for (int i = 0; i < p->cfg.n_replicas; i++) {
        if (p->reps[i].state != REPLICA_READY) continue;
        n_ready++;
        n_free += p->reps[i].n_usable - p->reps[i].n_busy;
    }
    if (p->stopping) {
        res = POOL_STOPPING;
    } else if (n_ready == 0 && (p->n_queue >= p->cfg.max_queue || pool_engines_failing_locked(p))) {
        /* Nothing can serve it now, and it may not wait for a restart. */
        res = POOL_NO_ENGINE;
    } else if (n_free == 0 && p->n_queue >= p->cfg.max_queue) {
        res = POOL_QUEUE_FULL;
    } else {
        /* With no replica ready it waits here for one (pool.h); the
         * supervisor fails it if none comes in time. */
        sreq_retain(r);
        p->queue[p->n_queue++] = r;
        pool_dispatch_locked(p, &sends);
        if (p->n_queue > p->cfg.max_queue && p->queue[p->n_queue - 1] == r) {
            /* no room for it to wait (dispatch sends a request that may not
             * wait to any free slot, so this takes a full pool) */
            p->n_queue--;
            r->wait_for = -1;
            sreq_release(r); /* ours; the caller still holds its own */
            res = POOL_QUEUE_FULL;
        }
        if (n_ready == 0) pthread_cond_broadcast(&p->sched_cond);
    }
    pthread_mutex_unlock(&p->sched_lock);
    pool_flush_sends(p, &sends);
    return res;
}

/* Sets r's cancel flag; true when this call set it on an open request. */
static bool cancel_mark(sreq *r)
{
    pthread_mutex_lock(&r->result_lock);
    bool already = r->cancel_requested || r->finish != SREQ_FINISH_NONE;
    r->cancel_requested = true;
    pthread_mutex_unlock(&r->result_lock);
    return !already;
}

/* The rest of a cancel after cancel_mark: out of the queue, or `stop`. A
 * request the dispatcher slots meanwhile is dropped by send_one, which
 * sees the flag. */
static void cancel_act(pool *p, sreq *r)
{
    bool dropped = false;
    replica *rep = NULL;
    uint64_t id = 0, gen = 0;
    pthread_mutex_lock(&p->sched_lock);
    for (int i = 0; i < p->n_queue; i++) {
        if (p->queue[i] != r) continue;
        memmove(p->queue + i, p->queue + i + 1, (size_t)(p->n_queue - i - 1) * sizeof(*p->queue));
        p->n_queue--;
        dropped = true;
        break;
    }
    if (!dropped && r->replica >= 0) {
        rep = &p->reps[r->replica];
        id = r->engine_id;
        gen = r->conn_gen;
    }
    pthread_mutex_unlock(&p->sched_lock);
    if (dropped) {
        LOG_DEBUG("request %llu: cancelled while queued", (unsigned long long)r->serial);
        sreq_finish_with(r, SREQ_FINISH_CANCELLED, NULL, 0, NULL, NULL);
        sreq_release(r); /* the queue's reference */
        return;
    }
    if (rep == NULL) return; /* already terminal: nothing holds it */
    /* gen_sent is guarded by write_lock: either the sender saw our flag and
     * never sent, or we see gen_sent and send `stop` after it. */
    pthread_mutex_lock(&rep->write_lock);
    if (r->gen_sent && rep->fd_in >= 0 && rep->fd_gen == gen) {
        char *line = wire_encode_stop(id);
        size_t n = line ? strlen(line) : 0, off = 0;
        while (off < n) {
            ssize_t k = write(rep->fd_in, line + off, n - off);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            off += (size_t)k;
        }
        free(line);
    }
    pthread_mutex_unlock(&rep->write_lock);
}

void pool_cancel(pool *p, sreq *r)
{
    if (cancel_mark(r)) cancel_act(p, r);
}

void pool_cancel_all(pool *p, sreq *const *rs, size_t n)
{
    bool *marked = calloc(n > 0 ? n : 1, sizeof(*marked));
    if (marked == NULL) { /* one by one: a queued one may start before its turn */
        for (size_t i = 0; i < n; i++)
            if (rs[i] != NULL) pool_cancel(p, rs[i]);
        return;
    }
    for (size_t i = 0; i < n; i++)
        marked[i] = rs[i] != NULL && cancel_mark(rs[i]);
    for (size_t i = 0; i < n; i++)
        if (marked[i]) cancel_act(p, rs[i]);
    free(marked);
}

int pool_start(pool **out, const pool_config *c, strata_err *err)
{
    if (c->n_replicas < 1 || c->n_replicas > POOL_MAX_REPLICAS || c->n_slots < 1 ||
        c->max_queue < 0) {
        return strata_err_set(err, STRATA_EINVAL, "bad pool configuration");
    }
    pool *p = calloc(1, sizeof(*p));
    if (p == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    p->cfg = *c;
    if (p->cfg.ping_interval_ms <= 0) p->cfg.ping_interval_ms = 1000;
    if (p->cfg.ping_timeout_ms <= 0) p->cfg.ping_timeout_ms = 10000;
    if (p->cfg.ready_timeout_ms <= 0) p->cfg.ready_timeout_ms = 600000;
    if (p->cfg.backoff_min_ms <= 0) p->cfg.backoff_min_ms = 100;
    if (p->cfg.backoff_max_ms <= 0) p->cfg.backoff_max_ms = 5000;
    if (p->cfg.no_engine_wait_ms <= 0) p->cfg.no_engine_wait_ms = 60000;
    if (p->cfg.max_failed_starts <= 0) p->cfg.max_failed_starts = 3;
    if (p->cfg.wedge_floor_ms == 0) p->cfg.wedge_floor_ms = POOL_WEDGE_FLOOR_MS;
    if (!(p->cfg.wedge_per_token_ms > 0)) p->cfg.wedge_per_token_ms = 0; /* learned (NaN too) */
    pthread_mutex_init(&p->sched_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->sched_cond, &ca);
    pthread_condattr_destroy(&ca);
    p->queue = calloc((size_t)c->max_queue + 1, sizeof(*p->queue));
    p->reps = calloc((size_t)c->n_replicas, sizeof(*p->reps));
    p->no_ready_since_ns = strata_clock_ns(); /* nothing is ready before the first `ready` */
    bool ok = p->queue != NULL && p->reps != NULL;
    for (int i = 0; ok && i < c->n_replicas; i++) {
        replica *rep = &p->reps[i];
        rep->p = p;
        rep->index = i;
        rep->fd_in = -1;
        rep->state = REPLICA_DOWN;
        pthread_mutex_init(&rep->write_lock, NULL);
        rep->slots = calloc((size_t)c->n_slots, sizeof(*rep->slots));
        if (rep->slots == NULL) ok = false;
        if (!c->route_load_only && route_index_init(&rep->sent, ROUTE_INDEX_MAX) != 0) ok = false;
    }
    signal(SIGPIPE, SIG_IGN); /* a dead engine's pipe gives EPIPE, not death */
    if (ok && pthread_create(&p->supervisor, NULL, pool_supervise, p) != 0) ok = false;
    if (!ok) {
        for (int i = 0; p->reps != NULL && i < c->n_replicas; i++) {
            free(p->reps[i].slots);
            route_index_free(&p->reps[i].sent);
        }
        free(p->reps);
        free(p->queue);
        free(p);
        return strata_err_set(err, STRATA_ENOMEM, "cannot start the pool");
    }
    *out = p;
    return 0;
}

void pool_stop(pool *p, int grace_ms)
{
    if (p == NULL) return;
    pthread_mutex_lock(&p->sched_lock);
    p->stopping = true;
    int n_q = p->n_queue;
    sreq **q = malloc((size_t)(n_q ? n_q : 1) * sizeof(*q));
    if (q != NULL) memcpy(q, p->queue, (size_t)n_q * sizeof(*q));
    else n_q = 0;
    p->n_queue = 0;
    pthread_cond_broadcast(&p->sched_cond);
    pthread_mutex_unlock(&p->sched_lock);
    pthread_join(p->supervisor, NULL); /* nothing restarts from here on */
    for (int i = 0; i < n_q; i++) {
        sreq_finish_with(q[i], SREQ_FINISH_ERROR, NULL, 503, "shutting_down",
                         "the server is shutting down");
        sreq_release(q[i]);
    }
    free(q);
    char *bye = wire_encode_shutdown();
    for (int i = 0; i < p->cfg.n_replicas; i++) {
        replica *rep = &p->reps[i];
        pthread_mutex_lock(&rep->write_lock);
        uint64_t gen = rep->fd_gen;
        pthread_mutex_unlock(&rep->write_lock);
        if (bye != NULL) replica_write(rep, gen, bye);
    }
    free(bye);
    int64_t deadline = strata_clock_ns() + (int64_t)grace_ms * 1000000;
    for (int i = 0; i < p->cfg.n_replicas; i++) {
        replica *rep = &p->reps[i];
        pthread_mutex_lock(&p->sched_lock);
        while (rep->reader_live && !rep->reader_done && strata_clock_ns() < deadline) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += 20 * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&p->sched_cond, &p->sched_lock, &ts);
        }
        pid_t pid = rep->reader_live && !rep->reader_done ? rep->pid : 0;
        bool join = rep->reader_live;
        rep->reader_live = false;
        pthread_mutex_unlock(&p->sched_lock);
        if (pid > 0) kill(pid, SIGKILL); /* the reader reaps it */
        if (join) pthread_join(rep->reader, NULL);
    }
    for (int i = 0; i < p->cfg.n_replicas; i++) {
        pthread_mutex_destroy(&p->reps[i].write_lock);
        free(p->reps[i].slots);
        route_index_free(&p->reps[i].sent);
    }
    pthread_mutex_destroy(&p->sched_lock);
    pthread_cond_destroy(&p->sched_cond);
    free(p->reps);
    free(p->queue);
    free(p);
}

void pool_get_info(pool *p, pool_info *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&p->sched_lock);
    out->n_replicas = p->cfg.n_replicas;
    out->queue_depth = p->n_queue;
    for (int k = 0; k < ROUTE_N_REASONS; k++) out->route_decisions[k] = p->route_decisions[k];
    for (int k = 0; k < p->n_queue; k++) {
        int w = p->queue[k]->wait_for;
        if (w >= 0 && w < p->cfg.n_replicas) out->rep[w].waiting++;
    }
    for (int i = 0; i < p->cfg.n_replicas; i++) {
        replica *rep = &p->reps[i];
        pool_replica_info *ri = &out->rep[i];
        ri->ready = rep->state == REPLICA_READY;
        ri->in_flight = rep->n_busy;
        ri->slots = rep->n_usable;
        ri->restarts = rep->restarts;
        ri->n_ctx = rep->n_ctx;
        ri->embeddings = 1;
        ri->kv_known = rep->kv_known && rep->state == REPLICA_READY;
        ri->kv = rep->kv;
        if (ri->ready) {
            out->n_ready++;
            if (out->n_ctx == 0 || rep->n_ctx < out->n_ctx) out->n_ctx = rep->n_ctx;
        }
    }
    /* None ready: the context the replicas had when last ready, so that a
     * request can still be checked and wait in the queue for a restart. */
    for (int i = 0; out->n_ready == 0 && i < p->cfg.n_replicas; i++) {
        int64_t c = p->reps[i].n_ctx;
        if (c > 0 && (out->n_ctx == 0 || c < out->n_ctx)) out->n_ctx = c;
    }
    pthread_mutex_unlock(&p->sched_lock);
}

/* Before the first `ready` nothing is known of the context, so a handler
 * cannot parse a request yet; it waits here in short steps (checking its
 * client between them) under the same bounds as a queued request. */
int pool_wait_ever_ready(pool *p, int64_t since_ns, int step_ms)
{
    int64_t deadline = strata_clock_ns() + (int64_t)step_ms * 1000000;
    int rc = -1;
    pthread_mutex_lock(&p->sched_lock);
    for (;;) {
        bool known = false;
        for (int i = 0; i < p->cfg.n_replicas && !known; i++) known = p->reps[i].n_ctx > 0;
        int64_t now = strata_clock_ns();
        if (p->stopping) rc = POOL_STOPPING;
        else if (known) rc = POOL_SUBMITTED;
        else if (pool_engines_failing_locked(p)) rc = POOL_NO_ENGINE;
        else if (now - since_ns >= (int64_t)p->cfg.no_engine_wait_ms * 1000000) rc = -2;
        if (rc != -1 || now >= deadline) break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t left = deadline - now;
        ts.tv_sec += (time_t)(left / 1000000000);
        ts.tv_nsec += (long)(left % 1000000000);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&p->sched_cond, &p->sched_lock, &ts);
    }
    pthread_mutex_unlock(&p->sched_lock);
    return rc;
}
