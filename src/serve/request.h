/* A server request: the one object that an HTTP handler and the replica
 * serving it share (DESIGN.md, "Ownership in the server").
 *
 * Ownership: reference-counted. sreq_new returns one reference (the HTTP
 * side's); the pool takes its own while the request is queued or holds an
 * engine slot, and drops it after the terminal message (or the engine's
 * death). The object is freed when the last reference goes, so a `done` that
 * arrives after the client left still lands in this request's own object and
 * never in another's.
 *
 * Everything a request's engine produces (tokens, embedding, stats, the
 * error) is stored here, by the engine's single reader thread, under
 * `result_lock`; the handler waits on `result_cond`, or, when one HTTP
 * request is served by several engine requests (`n` choices, embeddings
 * inputs), on a waker they share, which each of them signals after storing
 * a result. Nothing about a result is kept on the replica. */
#ifndef STRATA_SERVE_REQUEST_H
#define STRATA_SERVE_REQUEST_H

#include "engine/protocol.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The engine's statistics for one request (the `stats` of its `done`). */
typedef struct sreq_stats {
    int64_t prompt_n, cached_n, predicted_n, draft_n, draft_accepted_n;
    double prompt_ms, predicted_ms;
} sreq_stats;

enum sreq_finish {
    SREQ_FINISH_NONE = 0,  /* not terminal yet */
    SREQ_FINISH_STOP,      /* end of generation token */
    SREQ_FINISH_LENGTH,    /* max_tokens or the context */
    SREQ_FINISH_CANCELLED, /* the server sent `stop` (or dropped it while queued) */
    SREQ_FINISH_ERROR,     /* `err`, or the engine died; see status/err_msg */
};

/* A wake-up shared by the engine requests of one HTTP request: `events`
 * counts results stored (always after they are stored, under `lock`), so a
 * waiter that read it before looking at the requests never misses one.
 * Reference-counted: its creator holds one, each sreq given it another. */
typedef struct sreq_waker {
    atomic_int refs;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t events;
} sreq_waker;

/* A new waker with one reference; NULL on ENOMEM. */
sreq_waker *sreq_waker_new(void);
void sreq_waker_release(sreq_waker *w);
/* Waits up to ms for events beyond *seen, then sets *seen to the count. */
void sreq_waker_wait(sreq_waker *w, uint64_t *seen, int ms);

typedef struct sreq {
    atomic_int refs;
    uint64_t serial;   /* server-wide number, in logs and response ids */
    bool embed;        /* `embed` rather than `gen` */
    proto_gen gen;     /* for gen: its fields (arrays malloc'd, owned, freed with the request) */
    proto_embed emb;   /* for embed: likewise */
    sreq_waker *waker; /* set before submission, then fixed; may be NULL */

    /* --- set by the pool under its sched_lock --- */
    int replica;       /* index of the replica holding it, -1 while queued */
    uint64_t engine_id; /* the id on that engine connection */
    uint64_t conn_gen; /* which start of that replica it was sent to */
    bool gen_sent;     /* written to the engine; guarded by the replica's write_lock */
    int64_t route_cached_n; /* prompt tokens the router expected cached where it sent it */
    int wait_for;      /* while queued: the replica it waits for (prefix routing), -1: any */
    uint64_t *route_h; /* its prompt's chain hashes for block size route_block (0: none yet); */
    size_t route_n;    /* route_n of them (0 when out of memory); freed with the request */
    int64_t route_block;

    /* --- results: result_lock protects everything below --- */
    pthread_mutex_t result_lock;
    pthread_cond_t result_cond;
    int32_t *toks;     /* every generated id so far, in order */
    size_t n_toks, cap_toks;
    proto_logprob *lps; /* gen.logprobs >= 0: one per id of toks (each `top` malloc'd); else NULL */
    proto_prog prog;   /* gen.progress: the engine's last `prog` */
    uint64_t n_prog;   /* `prog` lines taken (0: none yet) */
    proto_logprob *plps; /* gen.prompt_logprobs: (gen.n_tokens), plps[i] prompt token i's
                            (logprob NAN until it came; [0] never does; `top` malloc'd);
                            NULL before the first `plp` */
    float *vec;        /* the embedding */
    size_t n_vec;
    enum sreq_finish finish;
    sreq_stats stats;
    int err_status;    /* HTTP status for FINISH_ERROR (503 engine died, 500 engine err) */
    char err_code[48];
    char err_msg[256];
    bool cancel_requested;
    int served_by;     /* replica that produced the result, -1 if none */
    int64_t t_submit_ns, t_start_ns, t_first_ns, t_end_ns;
} sreq;

/* A new request with one reference and a zeroed gen/emb for the caller to
 * fill with malloc'd arrays before submitting. NULL on ENOMEM. */
sreq *sreq_new(uint64_t serial, bool embed);
void sreq_retain(sreq *r);
void sreq_release(sreq *r);
/* Makes r signal w too (r takes a reference to w, dropped when r is freed).
 * Before r is submitted. */
void sreq_set_waker(sreq *r, sreq_waker *w);

/* --- called by the replica side (the reader thread) --- */
/* Appends generated ids; wakes the waiter. */
int sreq_push_tokens(sreq *r, const int32_t *ids, size_t n);
/* The same with the engine's logprobs for those ids (lps may be NULL); they
 * are copied when the request asked for logprobs (gen.logprobs >= 0), and
 * an id that came without one gets logprob NAN. */
int sreq_push_tokens_lp(sreq *r, const int32_t *ids, const proto_logprob *lps, size_t n);
/* Stores the prompt's progress (a `prog`) and wakes the waiter. */
void sreq_set_progress(sreq *r, const proto_prog *p);
/* Stores prompt logprobs lps[0..n) of prompt positions from .. from+n-1
 * (copied). The caller checked that r asked for them and that they name
 * its prompt's tokens (sreq_plp_fits). */
int sreq_push_prompt_lp(sreq *r, int64_t from, const proto_logprob *lps, size_t n);
/* Whether a `plp` of n entries from prompt position `from` fits r: a gen
 * that asked for prompt logprobs, positions 1 .. n_tokens-1, each entry
 * naming the prompt's token there. */
bool sreq_plp_fits(const sreq *r, int64_t from, const proto_logprob *lps, size_t n);
/* Records the terminal outcome (once; later calls are ignored) and wakes the
 * waiter. stats may be NULL. For FINISH_ERROR, status/code/msg say why. */
void sreq_finish_with(sreq *r, enum sreq_finish finish, const sreq_stats *stats, int status,
                      const char *code, const char *msg);
/* Stores an embedding (copied). */
int sreq_set_vector(sreq *r, const float *v, size_t n);

#endif
