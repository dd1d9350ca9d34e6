/* Engine processes: starting them, reading them, noticing their death and
 * starting them again (pool_internal.h has the structures and lock order).
 *
 * Threads:
 *   - one reader thread per started engine process: the ONLY code that reads
 *     that engine's stdout. It decodes each line and hands the message to the
 *     request object whose id it names (found in the replica's in-flight
 *     table under sched_lock). It also judges each `pong`'s progress figures
 *     (the watchdog of pool.h "Liveness"). On EOF, a protocol fault or a
 *     wedged engine it kills and reaps the process, fails every in-flight
 *     request of that engine with a 503, marks the replica DOWN and exits.
 *   - one supervisor thread per pool (pool_supervise): starts DOWN replicas
 *     when their backoff has passed (joining the previous reader first),
 *     pings READY ones, kills an engine that answers no pings or never gets
 *     ready, and fails queued requests that may wait no longer for a ready
 *     replica (pool.h). It never reads a pipe. */
#define _GNU_SOURCE
#include "serve/pool_internal.h"

#include "base/clock.h"
#include "base/log.h"
#include "serve/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct reader_arg {
    replica *rep;
    int fd_out;
    pid_t pid;
    uint64_t conn_gen;
} reader_arg;

static void close_noeintr(int fd)
{
    if (fd >= 0) close(fd); /* close is not retried on EINTR (Linux frees the fd anyway) */
}

int replica_write(replica *rep, uint64_t conn_gen, const char *line)
{
    size_t n = strlen(line), off = 0;
    int rc = 0;
    pthread_mutex_lock(&rep->write_lock);
    if (rep->fd_in < 0 || rep->fd_gen != conn_gen) {
        rc = -1;
    }
    while (rc == 0 && off < n) {
        ssize_t k = write(rep->fd_in, line + off, n - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            rc = -1; /* EPIPE: the reader will see EOF and fail the requests */
            break;
        }
        off += (size_t)k;
    }
    pthread_mutex_unlock(&rep->write_lock);
    return rc;
}

/* Finds the in-flight request with engine id `id` (sched_lock held). */
static int find_slot_locked(replica *rep, uint64_t id)
{
    for (int i = 0; i < rep->p->cfg.n_slots; i++) {
        if (rep->slots[i] != NULL && rep->slots[i]->engine_id == id) return i;
    }
    return -1;
}

/* Whether `tok` with n more ids would give r more ids than the engine may
 * send: its max_tokens, or the context when it has none (sched_lock held).
 * This is what bounds the ids a request buffers for a client that reads
 * slowly. */
static bool tok_overruns_locked(const replica *rep, sreq *r, size_t n)
{
    if (r->embed) return true; /* an embed gets no `tok` at all */
    int64_t limit = r->gen.max_tokens >= 0 ? r->gen.max_tokens : rep->n_ctx > 0 ? rep->n_ctx : -1;
    if (limit < 0) return false;
    pthread_mutex_lock(&r->result_lock);
    bool over = n > (size_t)limit || r->n_toks > (size_t)limit - n;
    pthread_mutex_unlock(&r->result_lock);
    return over;
}

/* What a request of a killed engine is told. */
static const char k_msg_died[] = "the engine serving this request died";
static const char k_msg_wedged[] =
    "the engine serving this request stopped making progress and was restarted";

bool pool_wedged(const pool_config *c, const proto_pong *pg, double stalled_ms, double *bound_ms)
{
    double floor_ms = (double)c->wedge_floor_ms;
    *bound_ms = floor_ms;
    if (c->wedge_floor_ms < 0 || !pg->has_progress) return false;
    if (!pg->running) return stalled_ms > floor_ms;
    double per_token = c->wedge_per_token_ms;
    if (!(per_token > 0)) {
        per_token = pg->ms_per_token > 0 ? POOL_WEDGE_FACTOR * pg->ms_per_token
                                         : POOL_WEDGE_PRIOR_PER_TOKEN_MS;
        if (!(per_token >= POOL_WEDGE_MIN_PER_TOKEN_MS)) per_token = POOL_WEDGE_MIN_PER_TOKEN_MS;
    }
    *bound_ms = floor_ms + per_token * (double)pg->step_tokens;
    /* false when the bound is +inf (an engine that calls itself infinitely
     * slow is left to the ping timeout) or a figure is NaN */
    return pg->step_ms > *bound_ms;
}

/* The watchdog on one pong of a ready replica with work in flight
 * (sched_lock held): true, with the reason in why, when it is wedged. */
static bool wedged_locked(const replica *rep, const proto_pong *pg, int64_t now_ns, char *why,
                          size_t why_cap)
{
    int64_t since = rep->pg_steps_ns > rep->busy_since_ns ? rep->pg_steps_ns : rep->busy_since_ns;
    double stalled_ms = (double)(now_ns - since) / 1e6, bound_ms;
    if (!pool_wedged(&rep->p->cfg, pg, stalled_ms, &bound_ms)) return false;
    if (pg->running) {
        snprintf(why, why_cap,
                 "wedged: a step of %" PRId64 " tokens has run %.0f ms, over its bound of %.0f ms "
                 "(%d requests in flight)",
                 pg->step_tokens, pg->step_ms, bound_ms, rep->n_busy);
    } else {
        snprintf(why, why_cap,
                 "wedged: no step completed for %.0f ms and none is running, with %d requests in "
                 "flight (bound %.0f ms)",
                 stalled_ms, rep->n_busy, bound_ms);
    }
    return true;
}

#define HANDLE_FAULT (-1)  /* the engine broke the protocol */
#define HANDLE_WEDGED (-2) /* the engine is wedged */

/* Handles one decoded message. Returns 0, HANDLE_FAULT or HANDLE_WEDGED
 * (why says what). */
static int handle_msg(replica *rep, uint64_t conn_gen, wire_msg *m, char *why, size_t why_cap)
{
    pool *p = rep->p;
    pool_sends sends = {0};
    sreq *r = NULL;
    int rc = 0;
    pthread_mutex_lock(&p->sched_lock);
    if (m->op == WIRE_READY) {
        if (rep->state != REPLICA_STARTING || rep->conn_gen != conn_gen) {
            snprintf(why, why_cap, "a second `ready`");
            rc = HANDLE_FAULT;
        } else {
            rep->state = REPLICA_READY;
            rep->pg_known = false;
            rep->kv_known = false; /* a new engine: its figures start again */
            rep->n_usable = m->slots < p->cfg.n_slots ? (int)m->slots : p->cfg.n_slots;
            rep->n_ctx = m->n_ctx;
            const proto_ready *rd = &m->pm.u.ready;
            rep->block_tokens = rd->kv_prefix_cache ? rd->kv_block_tokens : 0;
            rep->prefix_min_tokens = rd->kv_cache_min_tokens;
            rep->last_pong_ns = rep->last_ping_ns = strata_clock_ns();
            rep->backoff_ms = 0;
            rep->failed_starts = 0;
            LOG_INFO("replica %d: ready (pid %d, %d slots, n_ctx %lld)", rep->index,
                     (int)rep->pid, rep->n_usable, (long long)rep->n_ctx);
            pool_dispatch_locked(p, &sends);
        }
    } else if (m->op == WIRE_PONG) {
        int64_t now = strata_clock_ns();
        rep->last_pong_ns = now;
        const proto_pong *pg = m->pong;
        if (pg != NULL && pg->has_kv && rep->conn_gen == conn_gen) {
            rep->kv_known = true;
            rep->kv = (pool_kv_figures){.blocks = pg->kv_blocks, .used = pg->kv_used,
                                        .cached = pg->kv_cached, .bytes = pg->kv_bytes,
                                        .committed_bytes = pg->kv_committed_bytes,
                                        .lookup_tokens = pg->kv_lookup_tokens,
                                        .hit_tokens = pg->kv_hit_tokens,
                                        .preemptions = pg->kv_preemptions};
        }
        if (pg != NULL && pg->has_progress && rep->conn_gen == conn_gen) {
            if (!rep->pg_known || pg->steps != rep->pg_steps) {
                rep->pg_known = true;
                rep->pg_steps = pg->steps;
                rep->pg_steps_ns = now;
            }
            if (rep->state == REPLICA_READY && rep->n_busy > 0 &&
                wedged_locked(rep, pg, now, why, why_cap)) {
                rc = HANDLE_WEDGED;
            }
        }
    } else if (m->op == WIRE_ERR && !m->has_id) {
        LOG_WARN("replica %d: engine error without an id: %s: %s", rep->index, m->code,
                 m->message);
    } else {
        int i = find_slot_locked(rep, m->id);
        if (i < 0) {
            snprintf(why, why_cap, "a message for id %llu, which is not in flight",
                     (unsigned long long)m->id);
            rc = HANDLE_FAULT;
        } else if (m->op == WIRE_TOK && tok_overruns_locked(rep, rep->slots[i], m->n_tokens)) {
            snprintf(why, why_cap, "more tokens for id %llu than it may have",
                     (unsigned long long)m->id);
            rc = HANDLE_FAULT;
        } else if (m->op == WIRE_PLP &&
                   !sreq_plp_fits(rep->slots[i], m->from, m->logprobs, m->n_tokens)) {
            snprintf(why, why_cap, "prompt logprobs for id %llu that do not fit its prompt",
                     (unsigned long long)m->id);
            rc = HANDLE_FAULT;
        } else {
            r = rep->slots[i];
            if (m->op == WIRE_DONE || m->op == WIRE_ERR) {
                rep->slots[i] = NULL; /* the pool's reference moves to us */
                rep->n_busy--;
                r->replica = -1;
                pool_dispatch_locked(p, &sends);
            } else {
                sreq_retain(r);
            }
        }
    }
    pthread_cond_broadcast(&p->sched_cond);
    pthread_mutex_unlock(&p->sched_lock);
    if (r != NULL) {
        switch (m->op) {
        case WIRE_TOK: sreq_push_tokens_lp(r, m->tokens, m->logprobs, m->n_tokens); break;
        case WIRE_PLP: sreq_push_prompt_lp(r, m->from, m->logprobs, m->n_tokens); break;
        case WIRE_PROG: sreq_set_progress(r, m->prog); break;
        case WIRE_EMB: sreq_set_vector(r, m->vec, m->n_vec); break;
        case WIRE_DONE:
            pthread_mutex_lock(&r->result_lock);
            r->served_by = rep->index;
            pthread_mutex_unlock(&r->result_lock);
            sreq_finish_with(r, m->finish, &m->stats, 0, NULL, NULL);
            break;
        case WIRE_ERR:
            pthread_mutex_lock(&r->result_lock);
            r->served_by = rep->index;
            pthread_mutex_unlock(&r->result_lock);
            sreq_finish_with(r, SREQ_FINISH_ERROR, NULL, 500, m->code, m->message);
            break;
        default: break;
        }
        sreq_release(r);
    }
    pool_flush_sends(p, &sends);
    return rc;
}

/* Waits for pid, killing it when it does not exit by itself within ~1 s. */
static int reap(pid_t pid)
{
    int status = 0;
    for (int i = 0; i < 20; i++) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) return status;
        if (w < 0 && errno != EINTR) return -1;
        usleep(50 * 1000);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    return status;
}

/* The engine is gone (EOF, or we killed it for a fault or a wedge): reap
 * it, fail its requests with a 503 saying client_msg, and leave the replica
 * DOWN for the supervisor. */
static void replica_died(replica *rep, pid_t pid, int fd_out, const char *why,
                         const char *client_msg)
{
    pool *p = rep->p;
    close_noeintr(fd_out);
    pthread_mutex_lock(&rep->write_lock);
    close_noeintr(rep->fd_in);
    rep->fd_in = -1;
    pthread_mutex_unlock(&rep->write_lock);
    int status = reap(pid);
    if (status >= 0 && WIFEXITED(status)) {
        LOG_WARN("replica %d: engine pid %d exited with status %d (%s)", rep->index, (int)pid,
                 WEXITSTATUS(status), why);
    } else if (status >= 0 && WIFSIGNALED(status)) {
        LOG_WARN("replica %d: engine pid %d killed by signal %d (%s)", rep->index, (int)pid,
                 WTERMSIG(status), why);
    }
    int n = p->cfg.n_slots;
    sreq **failed = calloc((size_t)n, sizeof(*failed));
    int n_failed = 0;
    pthread_mutex_lock(&p->sched_lock);
    for (int i = 0; i < n; i++) {
        sreq *r = rep->slots[i];
        if (r == NULL) continue;
        rep->slots[i] = NULL;
        r->replica = -1;
        if (failed != NULL) failed[n_failed++] = r;
        else { /* cannot allocate: finish them here, under the lock (no pipe I/O) */
            sreq_finish_with(r, SREQ_FINISH_ERROR, NULL, 503, "engine_died", client_msg);
            sreq_release(r);
        }
    }
    rep->n_busy = 0;
    if (rep->state == REPLICA_STARTING) rep->failed_starts++;
    rep->state = REPLICA_DOWN;
    rep->pid = 0;
    int64_t now = strata_clock_ns();
    int lo = p->cfg.backoff_min_ms, hi = p->cfg.backoff_max_ms;
    rep->backoff_ms = rep->backoff_ms == 0 ? lo : (rep->backoff_ms * 2 > hi ? hi : rep->backoff_ms * 2);
    rep->restart_at_ns = now + (int64_t)rep->backoff_ms * 1000000;
    rep->reader_done = true;
    /* requests queued for this replica go elsewhere (or wait for any) */
    pool_sends sends = {0};
    pool_dispatch_locked(p, &sends);
    pthread_cond_broadcast(&p->sched_cond);
    pthread_mutex_unlock(&p->sched_lock);
    pool_flush_sends(p, &sends);
    for (int i = 0; i < n_failed; i++) {
        pthread_mutex_lock(&failed[i]->result_lock);
        failed[i]->served_by = rep->index;
        pthread_mutex_unlock(&failed[i]->result_lock);
        sreq_finish_with(failed[i], SREQ_FINISH_ERROR, NULL, 503, "engine_died", client_msg);
        sreq_release(failed[i]);
    }
    free(failed);
}

static void *reader_main(void *arg)
{
    reader_arg a = *(reader_arg *)arg;
    free(arg);
    replica *rep = a.rep;
    proto_reader rd;
    proto_reader_init(&rd, 0);
    char why[600] = "EOF on the engine's stdout";
    bool fault = false, eof = false, wedged = false;
    while (!fault && !eof) {
        const char *line;
        size_t len;
        int k = proto_reader_next(&rd, &line, &len);
        if (k == PROTO_READ_NEED_MORE) {
            strata_err err;
            long got = proto_reader_fill(&rd, a.fd_out, &err);
            if (got < 0) {
                snprintf(why, sizeof(why), "reading the engine: %s", err.msg);
                break;
            }
            continue;
        }
        if (k == PROTO_READ_EOF) {
            eof = true;
        } else if (k == PROTO_READ_TOO_LONG) {
            snprintf(why, sizeof(why), "protocol fault: a line over %zu bytes", rd.max_line);
            fault = true;
        } else {
            wire_msg m;
            strata_err err;
            if (wire_decode(line, len, &m, &err) != 0) {
                snprintf(why, sizeof(why), "protocol fault: %s", err.msg);
                fault = true;
            } else {
                int hr = handle_msg(rep, a.conn_gen, &m, why, sizeof(why));
                fault = hr != 0;
                wedged = hr == HANDLE_WEDGED;
            }
            wire_msg_free(&m);
        }
    }
    proto_reader_free(&rd);
    if (fault) {
        LOG_ERROR("replica %d: %s; killing engine pid %d", rep->index, why, (int)a.pid);
        kill(a.pid, SIGKILL);
    }
    replica_died(rep, a.pid, a.fd_out, why, wedged ? k_msg_wedged : k_msg_died);
    return NULL;
}

/* A start that failed before a process ran counts as a failed start. */
static void note_failed_start(replica *rep)
{
    pool *p = rep->p;
    pthread_mutex_lock(&p->sched_lock);
    rep->failed_starts++;
    pthread_cond_broadcast(&p->sched_cond);
    pthread_mutex_unlock(&p->sched_lock);
}

/* Starts the engine process and its reader (supervisor thread, no lock
 * held; the replica is DOWN with no live reader). A failure counts as a
 * failed start (replica.failed_starts). */
int replica_spawn(replica *rep, strata_err *err)
{
    pool *p = rep->p;
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
        int e = errno;
        close_noeintr(in[0]);
        close_noeintr(in[1]);
        note_failed_start(rep);
        return strata_err_set(err, STRATA_EIO, "pipe: %s", strerror(e));
    }
    size_t n_args = 0;
    while (p->cfg.engine_args[n_args] != NULL) n_args++;
    char **argv = calloc(n_args + 2, sizeof(char *));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    /* dup2 onto 0/1 clears O_CLOEXEC there; every other fd of ours is CLOEXEC */
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, dflt;
    sigemptyset(&none);
    sigemptyset(&dflt);
    sigaddset(&dflt, SIGPIPE);
    sigaddset(&dflt, SIGTERM);
    sigaddset(&dflt, SIGINT);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &dflt);
    /* Its own process group: a terminal's Ctrl-C reaches the server, which
     * drains and then stops the engines, not the engines mid-request. */
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETPGROUP);
    pid_t pid = 0;
    int rc = ENOMEM;
    if (argv != NULL) {
        argv[0] = (char *)p->cfg.engine_path;
        for (size_t i = 0; i < n_args; i++) argv[i + 1] = (char *)p->cfg.engine_args[i];
        rc = posix_spawn(&pid, p->cfg.engine_path, &fa, &attr, argv, environ);
    }
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    free(argv);
    close_noeintr(in[0]);
    close_noeintr(out[1]);
    if (rc != 0) {
        close_noeintr(in[1]);
        close_noeintr(out[0]);
        note_failed_start(rep);
        return strata_err_set(err, STRATA_EIO, "cannot start %s: %s", p->cfg.engine_path,
                              strerror(rc));
    }
    reader_arg *ra = malloc(sizeof(*ra));
    pthread_mutex_lock(&p->sched_lock);
    rep->conn_gen++;
    rep->next_id = 1;
    /* a new engine holds none of what was sent to the old one */
    route_index_clear(&rep->sent);
    rep->block_tokens = 0;
    rep->pid = pid;
    rep->state = REPLICA_STARTING;
    rep->started_ns = strata_clock_ns();
    rep->reader_done = false;
    rep->n_usable = 0;
    uint64_t gen = rep->conn_gen;
    pthread_mutex_lock(&rep->write_lock);
    rep->fd_in = in[1];
    rep->fd_gen = gen;
    pthread_mutex_unlock(&rep->write_lock);
    pthread_mutex_unlock(&p->sched_lock);
    LOG_INFO("replica %d: started engine pid %d", rep->index, (int)pid);
    if (ra == NULL) {
        kill(pid, SIGKILL);
        replica_died(rep, pid, out[0], "out of memory", k_msg_died);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    *ra = (reader_arg){.rep = rep, .fd_out = out[0], .pid = pid, .conn_gen = gen};
    /* The reader is created with the signal mask of this (supervisor) thread,
     * which blocks SIGTERM/SIGINT for the main thread's sigwait. */
    int e = pthread_create(&rep->reader, NULL, reader_main, ra);
    if (e != 0) {
        free(ra);
        kill(pid, SIGKILL);
        replica_died(rep, pid, out[0], "no reader thread", k_msg_died);
        return strata_err_set(err, STRATA_EIO, "pthread_create: %s", strerror(e));
    }
    pthread_mutex_lock(&p->sched_lock);
    rep->reader_live = true;
    pthread_mutex_unlock(&p->sched_lock);
    return 0;
}

/* Fails the queued requests that may wait no longer for a ready replica
 * (pool.h); drops sched_lock around each, which no pipe I/O needs. */
static void fail_stranded_locked(pool *p)
{
    sreq *r;
    while (!p->stopping && (r = pool_take_stranded_locked(p, strata_clock_ns())) != NULL) {
        char msg[160];
        if (pool_engines_failing_locked(p)) {
            snprintf(msg, sizeof(msg), "no engine is ready: every replica failed %d starts in a row",
                     p->cfg.max_failed_starts);
        } else {
            snprintf(msg, sizeof(msg), "no engine became ready within %d ms", p->cfg.no_engine_wait_ms);
        }
        pthread_mutex_unlock(&p->sched_lock);
        LOG_WARN("request %llu: %s", (unsigned long long)r->serial, msg);
        sreq_finish_with(r, SREQ_FINISH_ERROR, NULL, 503, "no_engine", msg);
        sreq_release(r); /* the queue's reference */
        pthread_mutex_lock(&p->sched_lock);
    }
}

/* What the supervisor decided for one replica under sched_lock, done after. */
enum sup_action { SUP_NONE, SUP_START, SUP_PING, SUP_KILL };

void *pool_supervise(void *arg)
{
    pool *p = arg;
    pthread_mutex_lock(&p->sched_lock);
    while (!p->stopping) {
        int64_t now = strata_clock_ns();
        for (int i = 0; i < p->cfg.n_replicas && !p->stopping; i++) {
            replica *rep = &p->reps[i];
            enum sup_action act = SUP_NONE;
            pid_t pid = rep->pid;
            uint64_t gen = rep->conn_gen, ping_id = 0;
            if (rep->state == REPLICA_DOWN && now >= rep->restart_at_ns) {
                act = SUP_START;
            } else if (rep->state == REPLICA_STARTING &&
                       now - rep->started_ns > (int64_t)p->cfg.ready_timeout_ms * 1000000) {
                act = SUP_KILL;
                LOG_ERROR("replica %d: no `ready` in %d ms; killing it", i,
                          p->cfg.ready_timeout_ms);
            } else if (rep->state == REPLICA_READY) {
                if (now - rep->last_pong_ns > (int64_t)p->cfg.ping_timeout_ms * 1000000) {
                    act = SUP_KILL;
                    LOG_ERROR("replica %d: no `pong` in %d ms; killing it", i,
                              p->cfg.ping_timeout_ms);
                } else if (now - rep->last_ping_ns >= (int64_t)p->cfg.ping_interval_ms * 1000000) {
                    act = SUP_PING;
                    rep->last_ping_ns = now;
                    ping_id = rep->next_id++;
                }
            }
            if (act == SUP_NONE) continue;
            bool join = act == SUP_START && rep->reader_live;
            if (act == SUP_START && rep->reader_live && !rep->reader_done) continue;
            if (join) rep->reader_live = false;
            if (act == SUP_START && rep->conn_gen > 0) rep->restarts++;
            pthread_mutex_unlock(&p->sched_lock);
            if (join) pthread_join(rep->reader, NULL);
            if (act == SUP_START) {
                strata_err err;
                if (replica_spawn(rep, &err) != 0) {
                    LOG_ERROR("replica %d: %s", i, err.msg);
                    pthread_mutex_lock(&p->sched_lock);
                    rep->restart_at_ns = strata_clock_ns() + (int64_t)p->cfg.backoff_max_ms * 1000000;
                    pthread_mutex_unlock(&p->sched_lock);
                }
            } else if (act == SUP_KILL) {
                kill(pid, SIGKILL); /* the reader sees EOF; it reaps and fails requests */
            } else if (act == SUP_PING) {
                char *line = wire_encode_ping(ping_id);
                if (line != NULL) replica_write(rep, gen, line);
                free(line);
            }
            pthread_mutex_lock(&p->sched_lock);
        }
        fail_stranded_locked(p);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        if (!p->stopping) pthread_cond_timedwait(&p->sched_cond, &p->sched_lock, &ts);
    }
    pthread_mutex_unlock(&p->sched_lock);
    return NULL;
}
