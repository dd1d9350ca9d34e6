/* The process loop of engine_loop.h: the reader thread, the scheduler (the
 * caller's thread) and the writer thread, with the inbox and the outbox
 * between them, and the set of live request ids that lets the reader answer
 * broken lines itself.
 *
 * Locks: `inbox_lock` protects the inbox list; `out_lock` protects the
 * outbox buffer and the writer's flags; `live_lock` protects the live-id
 * set; the engine's own progress lock is taken by engine_get_progress. The
 * one nesting is out_lock, then live_lock (the scheduler, handing a step to
 * the writer); no other thread holds two.
 *
 * Live ids. The reader adds the id of every gen/embed it decodes before it
 * queues it; the scheduler takes an id out in the same critical section
 * (under out_lock) that hands the line ending it (`done`, or `err` naming
 * it: engine_set_end_hook) to the writer. So when the reader looks at a broken line, an id it finds in the
 * set belongs to a request the engine has taken (in the order the lines
 * arrived) and has not ended on the wire, and the `err` must not name it;
 * an id not in the set can be named, and that `err` can only follow the
 * request's own terminal line. The set holds only the requests in flight.
 *
 * Idle: the scheduler waits on inbox_cond, with a deadline while the KV
 * pool has a step whose hold time runs (engine_next_trim_ms), and then gives
 * it back (engine_trim), so an idle engine's memory falls too.
 *
 * Back-pressure: when the server reads slower than the engine produces,
 * the outbox grows to OUTBOX_HIGH bytes and the scheduler then waits for
 * the writer before its next step, so memory stays bounded. */
#define _GNU_SOURCE
#include "engine/engine_loop.h"

#include "base/log.h"
#include "engine/idset.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OUTBOX_HIGH ((size_t)8 << 20)

typedef enum item_kind {
    ITEM_MSG,      /* a decoded message */
    ITEM_BAD,      /* a line that could not be decoded */
    ITEM_EOF,      /* end of input (or a read error) */
} item_kind;

typedef struct inbox_item {
    item_kind kind;
    proto_msg msg;            /* ITEM_MSG */
    const char *code;         /* ITEM_BAD: a PROTO_ERR_* constant */
    bool has_id;
    int64_t id;
    char *message;            /* ITEM_BAD, malloc'd */
    struct inbox_item *next;
} inbox_item;

typedef struct loop {
    engine *e;
    int in_fd, out_fd;
    size_t max_line;
    int wake[2];              /* the scheduler writes a byte to stop the reader */
    inbox_item *eof_item;     /* allocated up front: end of input is always delivered */

    pthread_mutex_t inbox_lock;
    pthread_cond_t inbox_cond;
    inbox_item *head, *tail;

    pthread_mutex_t out_lock;
    pthread_cond_t out_ready;  /* the writer waits for lines or closing */
    pthread_cond_t out_space;  /* the scheduler waits for the outbox to drain */
    proto_buf outbox;
    bool closing;
    bool broken;

    pthread_mutex_t live_lock;
    idset live;               /* see "Live ids" above */
    /* the scheduler's alone: ids ended in the step being written */
    int64_t *ended;
    size_t n_ended, cap_ended;
    bool ended_oom;           /* an id could not be kept: the set is cleared instead */
} loop;

/* ---- the reader ---- */

static void inbox_push(loop *l, inbox_item *first, inbox_item *last)
{
    if (first == NULL) return;
    pthread_mutex_lock(&l->inbox_lock);
    if (l->tail != NULL) l->tail->next = first;
    else l->head = first;
    l->tail = last;
    pthread_cond_signal(&l->inbox_cond);
    pthread_mutex_unlock(&l->inbox_lock);
}

static inbox_item *bad_item(const char *code, bool has_id, int64_t id, const char *message)
{
    inbox_item *it = calloc(1, sizeof(*it));
    if (it == NULL) return NULL;
    it->kind = ITEM_BAD;
    it->code = code;
    it->has_id = has_id;
    it->id = id;
    it->message = strdup(message);
    if (it->message == NULL) {
        free(it);
        return NULL;
    }
    return it;
}

/* One line (or an oversized line's head) into an inbox item. */
static inbox_item *make_item(loop *l, int kind, const char *line, size_t len)
{
    if (kind == PROTO_READ_TOO_LONG) {
        int64_t id = 0;
        bool has_id = proto_peek_id(line, len, &id);
        char msg[128];
        snprintf(msg, sizeof(msg), "the line is longer than %zu bytes; it was skipped",
                 l->max_line);
        return bad_item(PROTO_ERR_LINE_TOO_LONG, has_id, id, msg);
    }
    proto_error pe;
    inbox_item *it = calloc(1, sizeof(*it));
    if (it == NULL) return NULL;
    if (proto_decode(line, len, PROTO_DIR_TO_ENGINE, &it->msg, &pe) == 0) {
        it->kind = ITEM_MSG;
        return it;
    }
    free(it);
    return bad_item(pe.code, pe.has_id, pe.id, pe.message);
}

static bool answer_now(loop *l, inbox_item *it);

static void *reader_main(void *arg)
{
    loop *l = arg;
    proto_reader r;
    proto_reader_init(&r, l->max_line);
    bool done = false;
    while (!done) {
        struct pollfd fds[2] = {{.fd = l->in_fd, .events = POLLIN},
                                {.fd = l->wake[0], .events = POLLIN}};
        int n = poll(fds, 2, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            LOG_ERROR("engine: poll: %s", strerror(errno));
            proto_reader_set_eof(&r);
        } else if (fds[1].revents != 0) {
            break; /* the scheduler is done */
        } else if (fds[0].revents != 0) {
            strata_err err;
            if (proto_reader_fill(&r, l->in_fd, &err) < 0) {
                LOG_ERROR("engine: reading the protocol: %s", err.msg);
                proto_reader_set_eof(&r);
            }
        }
        inbox_item *first = NULL, *last = NULL;
        for (;;) {
            const char *line;
            size_t len;
            int k = proto_reader_next(&r, &line, &len);
            if (k == PROTO_READ_NEED_MORE) break;
            inbox_item *it;
            if (k == PROTO_READ_EOF) {
                it = l->eof_item;
                l->eof_item = NULL;
                done = true;
            } else {
                it = make_item(l, k, line, len);
            }
            if (it == NULL) {
                LOG_ERROR("engine: out of memory reading a line; it is dropped");
                continue;
            }
            if (answer_now(l, it)) continue;
            if (last != NULL) last->next = it;
            else first = it;
            last = it;
            if (done) break;
        }
        inbox_push(l, first, last);
    }
    proto_reader_free(&r);
    return NULL;
}

static void item_free(inbox_item *it)
{
    proto_msg_free(&it->msg);
    free(it->message);
    free(it);
}

static void outbox_append_now(loop *l, const proto_buf *b);

/* Pings and broken lines are answered here, by the reader, not by the
 * scheduler, in the order they arrived: a pong must not wait for a long
 * step (a big prefill on a slow CPU takes many seconds, and a server would
 * take the engine for hung), and it carries the scheduler's progress
 * instead, from which the server tells a long step from a wedged one; a
 * broken line's `err` comes before the pong of a ping sent after it. A
 * gen/embed joins the live ids here, before anything after it is read.
 * Returns true when `it` was answered (and is freed). */
static bool answer_now(loop *l, inbox_item *it)
{
    if (it->kind == ITEM_MSG && (it->msg.op == PROTO_OP_GEN || it->msg.op == PROTO_OP_EMBED)) {
        pthread_mutex_lock(&l->live_lock);
        int rc = idset_add(&l->live, it->msg.id);
        pthread_mutex_unlock(&l->live_lock);
        if (rc != 0) LOG_ERROR("engine: out of memory noting id %" PRId64, it->msg.id);
        return false;
    }
    proto_buf b = {0};
    strata_err err;
    int rc;
    if (it->kind == ITEM_MSG && it->msg.op == PROTO_OP_PING) {
        proto_msg pong = {.op = PROTO_OP_PONG, .has_id = true, .id = it->msg.id};
        engine_get_progress(l->e, &pong.u.pong);
        rc = proto_encode(&pong, &b, &err);
    } else if (it->kind == ITEM_BAD) {
        LOG_WARN("engine: bad line: %s: %s", it->code, it->message);
        pthread_mutex_lock(&l->live_lock);
        bool live = it->has_id && idset_has(&l->live, it->id);
        pthread_mutex_unlock(&l->live_lock);
        if (live) {
            char msg[PROTO_ERROR_MSG_MAX + 64];
            snprintf(msg, sizeof(msg), "a line naming id %" PRId64 " (in flight, left running): %s",
                     it->id, it->message);
            rc = proto_encode_err(&b, -1, it->code, msg, &err);
        } else {
            rc = proto_encode_err(&b, it->has_id ? it->id : -1, it->code, it->message, &err);
        }
    } else {
        return false;
    }
    if (rc == 0) outbox_append_now(l, &b);
    else LOG_ERROR("engine: %s", err.msg);
    proto_buf_free(&b);
    item_free(it);
    return true;
}

/* ---- live ids, the scheduler's side ---- */

/* engine_end_fn: id's terminal line is in the step's buffer. */
static void note_ended(void *ctx, int64_t id)
{
    loop *l = ctx;
    if (l->n_ended == l->cap_ended) {
        size_t cap = l->cap_ended ? l->cap_ended * 2 : 16;
        int64_t *v = realloc(l->ended, cap * sizeof(*v));
        if (v == NULL) {
            l->ended_oom = true;
            return;
        }
        l->ended = v;
        l->cap_ended = cap;
    }
    l->ended[l->n_ended++] = id;
}

/* The step's lines are in the outbox (out_lock held): the ids they ended are
 * no longer live. If one could not be noted (out of memory), every id is
 * dropped: a broken line may then name a live id, which is better than
 * never naming one. */
static void forget_ended_locked(loop *l)
{
    if (l->n_ended == 0 && !l->ended_oom) return;
    pthread_mutex_lock(&l->live_lock);
    if (l->ended_oom) {
        idset_free(&l->live);
    } else {
        for (size_t i = 0; i < l->n_ended; i++) idset_del(&l->live, l->ended[i]);
    }
    pthread_mutex_unlock(&l->live_lock);
    l->n_ended = 0;
    l->ended_oom = false;
}

/* ---- the writer ---- */

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            LOG_ERROR("engine: writing the protocol: %s", strerror(errno));
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void *writer_main(void *arg)
{
    loop *l = arg;
    proto_buf mine = {0};
    for (;;) {
        pthread_mutex_lock(&l->out_lock);
        while (l->outbox.len == 0 && !l->closing) pthread_cond_wait(&l->out_ready, &l->out_lock);
        if (l->outbox.len == 0) { /* closing, and everything is written */
            pthread_mutex_unlock(&l->out_lock);
            break;
        }
        proto_buf tmp = l->outbox;
        l->outbox = mine;
        l->outbox.len = 0;
        mine = tmp;
        pthread_cond_broadcast(&l->out_space);
        pthread_mutex_unlock(&l->out_lock);
        if (!write_all(l->out_fd, mine.data, mine.len)) {
            pthread_mutex_lock(&l->out_lock);
            l->broken = true;
            pthread_cond_broadcast(&l->out_space);
            pthread_mutex_unlock(&l->out_lock);
            break;
        }
        mine.len = 0;
    }
    proto_buf_free(&mine);
    return NULL;
}

/* Hands the step's lines to the writer; waits while the outbox is full.
 * Returns false once the output is broken. */
static bool outbox_put(loop *l, proto_buf *step)
{
    pthread_mutex_lock(&l->out_lock);
    while (l->outbox.len > OUTBOX_HIGH && !l->broken) pthread_cond_wait(&l->out_space, &l->out_lock);
    bool ok = !l->broken;
    if (ok && step->len > 0) {
        if (l->outbox.len == 0 && l->outbox.cap < step->cap) {
            proto_buf tmp = l->outbox; /* swap instead of copying */
            l->outbox = *step;
            *step = tmp;
        } else {
            size_t need = l->outbox.len + step->len;
            if (need > l->outbox.cap) {
                char *p = realloc(l->outbox.data, need);
                if (p == NULL) {
                    LOG_ERROR("engine: out of memory for %zu bytes of output", need);
                    ok = false;
                    l->broken = true;
                } else {
                    l->outbox.data = p;
                    l->outbox.cap = need;
                }
            }
            if (ok) {
                memcpy(l->outbox.data + l->outbox.len, step->data, step->len);
                l->outbox.len = need;
            }
        }
        pthread_cond_signal(&l->out_ready);
    }
    if (ok) forget_ended_locked(l);
    pthread_mutex_unlock(&l->out_lock);
    step->len = 0;
    return ok;
}

/* Appends b to the outbox without waiting for space (a pong is a few
 * bytes; the reader must never block on the writer). */
static void outbox_append_now(loop *l, const proto_buf *b)
{
    pthread_mutex_lock(&l->out_lock);
    if (!l->broken && b->len > 0) {
        size_t need = l->outbox.len + b->len;
        char *p = need > l->outbox.cap ? realloc(l->outbox.data, need) : l->outbox.data;
        if (p == NULL) {
            LOG_ERROR("engine: out of memory for %zu bytes of output", need);
        } else {
            if (need > l->outbox.cap) l->outbox.cap = need;
            l->outbox.data = p;
            memcpy(l->outbox.data + l->outbox.len, b->data, b->len);
            l->outbox.len = need;
            pthread_cond_signal(&l->out_ready);
        }
    }
    pthread_mutex_unlock(&l->out_lock);
}

/* ---- the scheduler ---- */

int engine_serve(engine *e, int in_fd, int out_fd, size_t max_line, strata_err *err)
{
    loop l = {.e = e, .in_fd = in_fd, .out_fd = out_fd,
              .max_line = max_line ? max_line : PROTOCOL_MAX_LINE};
    l.eof_item = calloc(1, sizeof(inbox_item));
    if (l.eof_item == NULL) return strata_err_set(err, STRATA_ENOMEM, "engine: out of memory");
    l.eof_item->kind = ITEM_EOF;
    if (pipe2(l.wake, O_CLOEXEC) != 0) {
        free(l.eof_item);
        return strata_err_set(err, STRATA_EIO, "engine: pipe: %s", strerror(errno));
    }
    pthread_mutex_init(&l.inbox_lock, NULL);
    pthread_cond_init(&l.inbox_cond, NULL);
    pthread_mutex_init(&l.out_lock, NULL);
    pthread_cond_init(&l.out_ready, NULL);
    pthread_cond_init(&l.out_space, NULL);
    pthread_mutex_init(&l.live_lock, NULL);
    engine_set_end_hook(e, note_ended, &l);

    proto_buf step = {0};
    proto_msg ready;
    engine_ready(e, &ready);
    int rc = proto_encode(&ready, &step, err);
    pthread_t reader, writer;
    bool have_writer = false, have_reader = false;
    if (rc == 0) {
        have_writer = pthread_create(&writer, NULL, writer_main, &l) == 0;
        have_reader = have_writer && pthread_create(&reader, NULL, reader_main, &l) == 0;
        if (!have_reader) rc = strata_err_set(err, STRATA_ENOMEM, "engine: cannot start threads");
    }
    if (rc == 0 && !outbox_put(&l, &step)) rc = strata_err_set(err, STRATA_EIO, "engine: output closed");

    bool closing = false; /* shutdown or end of input seen */
    while (rc == 0) {
        pthread_mutex_lock(&l.inbox_lock);
        /* (closing implies busy here: the loop ends once both hold) */
        while (l.head == NULL && !engine_busy(e)) {
            /* idle: wake when the KV pool has a step to give back */
            double ms = engine_next_trim_ms(e);
            if (ms < 0) {
                pthread_cond_wait(&l.inbox_cond, &l.inbox_lock);
                continue;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t ns = (int64_t)ts.tv_nsec + (int64_t)(ms * 1e6) + 1000000;
            ts.tv_sec += (time_t)(ns / 1000000000);
            ts.tv_nsec = (long)(ns % 1000000000);
            if (pthread_cond_timedwait(&l.inbox_cond, &l.inbox_lock, &ts) == ETIMEDOUT) {
                engine_trim(e);
            }
        }
        inbox_item *items = l.head;
        l.head = l.tail = NULL;
        pthread_mutex_unlock(&l.inbox_lock);

        for (inbox_item *it = items; it != NULL;) {
            inbox_item *next = it->next;
            if (it->kind == ITEM_MSG) {
                if (it->msg.op == PROTO_OP_SHUTDOWN && !closing) {
                    LOG_INFO("engine: shutdown: finishing %d running and %" PRId64 " queued",
                             engine_n_running(e), engine_n_queued(e));
                    closing = true;
                }
                engine_handle(e, &it->msg, &step);
            } else {
                if (!closing) {
                    LOG_INFO("engine: end of input: finishing %d running and %" PRId64
                             " queued",
                             engine_n_running(e), engine_n_queued(e));
                }
                closing = true;
                engine_stop_accepting(e);
            }
            item_free(it);
            it = next;
        }
        if (engine_busy(e)) engine_step(e, &step);
        if (!outbox_put(&l, &step)) {
            rc = strata_err_set(err, STRATA_EIO, "engine: the output is closed (server gone?)");
            break;
        }
        if (closing && !engine_busy(e)) break;
    }

    /* Let the writer finish what is queued, then stop the reader. */
    if (have_writer) {
        pthread_mutex_lock(&l.out_lock);
        l.closing = true;
        pthread_cond_signal(&l.out_ready);
        pthread_mutex_unlock(&l.out_lock);
        pthread_join(writer, NULL);
        if (rc == 0 && l.broken) rc = strata_err_set(err, STRATA_EIO, "engine: the output broke");
    }
    if (have_reader) {
        char c = 1;
        while (write(l.wake[1], &c, 1) < 0 && errno == EINTR) {
        }
        pthread_join(reader, NULL);
    }
    for (inbox_item *it = l.head; it != NULL;) {
        inbox_item *next = it->next;
        item_free(it);
        it = next;
    }
    free(l.eof_item); /* NULL once the reader delivered it */
    proto_buf_free(&step);
    proto_buf_free(&l.outbox);
    close(l.wake[0]);
    close(l.wake[1]);
    pthread_mutex_destroy(&l.inbox_lock);
    pthread_cond_destroy(&l.inbox_cond);
    pthread_mutex_destroy(&l.out_lock);
    pthread_cond_destroy(&l.out_ready);
    pthread_cond_destroy(&l.out_space);
    engine_set_end_hook(e, NULL, NULL);
    pthread_mutex_destroy(&l.live_lock);
    idset_free(&l.live);
    free(l.ended);
    return rc;
}
