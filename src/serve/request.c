/* Server request objects: reference counting and result storage (request.h).
 * No thread of its own; written by replica reader threads, read by HTTP
 * handler threads, both under result_lock. */
#include "serve/request.h"

#include "base/clock.h"

#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

sreq *sreq_new(uint64_t serial, bool embed)
{
    sreq *r = calloc(1, sizeof(*r));
    if (r == NULL) return NULL;
    atomic_init(&r->refs, 1);
    r->serial = serial;
    r->embed = embed;
    r->gen.sampling = proto_sampling_default();
    r->gen.max_tokens = -1;
    r->gen.logprobs = -1;
    r->replica = -1;
    r->wait_for = -1;
    r->served_by = -1;
    pthread_mutex_init(&r->result_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->result_cond, &ca);
    pthread_condattr_destroy(&ca);
    r->t_submit_ns = strata_clock_ns();
    return r;
}

sreq_waker *sreq_waker_new(void)
{
    sreq_waker *w = calloc(1, sizeof(*w));
    if (w == NULL) return NULL;
    atomic_init(&w->refs, 1);
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    return w;
}

void sreq_waker_release(sreq_waker *w)
{
    if (w == NULL || atomic_fetch_sub(&w->refs, 1) != 1) return;
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w);
}

/* After a result was stored (result_lock released: the waker's lock is
 * never taken inside it, nor the other way round). */
static void waker_signal(sreq_waker *w)
{
    if (w == NULL) return;
    pthread_mutex_lock(&w->lock);
    w->events++;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

void sreq_waker_wait(sreq_waker *w, uint64_t *seen, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->lock);
    while (w->events == *seen) {
        if (pthread_cond_timedwait(&w->cond, &w->lock, &ts) != 0) break; /* timed out */
    }
    *seen = w->events;
    pthread_mutex_unlock(&w->lock);
}

void sreq_set_waker(sreq *r, sreq_waker *w)
{
    atomic_fetch_add(&w->refs, 1);
    sreq_waker_release(r->waker);
    r->waker = w;
}

void sreq_retain(sreq *r)
{
    atomic_fetch_add(&r->refs, 1);
}

void sreq_release(sreq *r)
{
    if (r == NULL) return;
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    pthread_mutex_destroy(&r->result_lock);
    pthread_cond_destroy(&r->result_cond);
    free(r->gen.tokens);
    free(r->gen.stop_tokens);
    free(r->gen.min_bans);
    free(r->gen.allowed_tokens);
    free(r->gen.bad_ids);
    free(r->gen.bad_len);
    free(r->gen.grammar);
    free(r->gen.sampling.logit_bias);
    free(r->emb.tokens);
    for (size_t i = 0; r->lps != NULL && i < r->n_toks; i++) free(r->lps[i].top);
    free(r->lps);
    for (size_t i = 0; r->plps != NULL && i < r->gen.n_tokens; i++) free(r->plps[i].top);
    free(r->plps);
    free(r->toks);
    free(r->vec);
    free(r->route_h);
    sreq_waker_release(r->waker);
    free(r);
}

int sreq_push_tokens(sreq *r, const int32_t *ids, size_t n)
{
    return sreq_push_tokens_lp(r, ids, NULL, n);
}

void sreq_set_progress(sreq *r, const proto_prog *p)
{
    pthread_mutex_lock(&r->result_lock);
    if (r->finish == SREQ_FINISH_NONE) {
        r->prog = *p;
        r->n_prog++;
    }
    pthread_mutex_unlock(&r->result_lock);
    waker_signal(r->waker);
}

bool sreq_plp_fits(const sreq *r, int64_t from, const proto_logprob *lps, size_t n)
{
    if (r->embed || !r->gen.prompt_logprobs || from < 1 || n == 0 ||
        (uint64_t)from + n > r->gen.n_tokens) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (lps[i].token != r->gen.tokens[(size_t)from + i]) return false;
    }
    return true;
}

int sreq_push_prompt_lp(sreq *r, int64_t from, const proto_logprob *lps, size_t n)
{
    int rc = 0;
    pthread_mutex_lock(&r->result_lock);
    if (r->finish == SREQ_FINISH_NONE) {
        if (r->plps == NULL) {
            r->plps = calloc(r->gen.n_tokens, sizeof(*r->plps));
            if (r->plps == NULL) {
                rc = -1;
                goto out;
            }
            for (size_t i = 0; i < r->gen.n_tokens; i++) {
                r->plps[i] = (proto_logprob){.token = r->gen.tokens[i], .logprob = NAN};
            }
        }
        for (size_t i = 0; i < n; i++) {
            proto_logprob *d = &r->plps[(size_t)from + i];
            free(d->top);
            *d = lps[i];
            d->top = lps[i].n_top ? malloc(lps[i].n_top * sizeof(proto_top)) : NULL;
            if (d->top != NULL) memcpy(d->top, lps[i].top, lps[i].n_top * sizeof(proto_top));
            else d->n_top = 0;
        }
    }
out:
    pthread_mutex_unlock(&r->result_lock);
    waker_signal(r->waker);
    return rc;
}

int sreq_push_tokens_lp(sreq *r, const int32_t *ids, const proto_logprob *lps, size_t n)
{
    int rc = 0;
    bool want_lp = !r->embed && r->gen.logprobs >= 0;
    pthread_mutex_lock(&r->result_lock);
    if (r->finish == SREQ_FINISH_NONE) {
        if (r->n_toks + n > r->cap_toks || (want_lp && r->lps == NULL)) {
            size_t cap = r->cap_toks ? r->cap_toks : 64;
            while (cap < r->n_toks + n) cap *= 2;
            int32_t *t = realloc(r->toks, cap * sizeof(*t));
            if (t == NULL) {
                rc = -1;
                goto out;
            }
            r->toks = t;
            if (want_lp) {
                proto_logprob *l = realloc(r->lps, cap * sizeof(*l));
                if (l == NULL) {
                    rc = -1;
                    goto out;
                }
                r->lps = l;
            }
            r->cap_toks = cap;
        }
        for (size_t i = 0; want_lp && i < n; i++) {
            proto_logprob *d = &r->lps[r->n_toks + i];
            *d = (proto_logprob){.token = ids[i], .logprob = NAN};
            if (lps == NULL) continue;
            d->logprob = lps[i].logprob;
            d->top = lps[i].n_top ? malloc(lps[i].n_top * sizeof(proto_top)) : NULL;
            if (d->top != NULL) {
                memcpy(d->top, lps[i].top, lps[i].n_top * sizeof(proto_top));
                d->n_top = lps[i].n_top;
            }
        }
        if (r->n_toks == 0 && n > 0) r->t_first_ns = strata_clock_ns();
        memcpy(r->toks + r->n_toks, ids, n * sizeof(*ids));
        r->n_toks += n;
        pthread_cond_broadcast(&r->result_cond);
    }
out:
    pthread_mutex_unlock(&r->result_lock);
    waker_signal(r->waker);
    return rc;
}

void sreq_finish_with(sreq *r, enum sreq_finish finish, const sreq_stats *stats, int status,
                      const char *code, const char *msg)
{
    pthread_mutex_lock(&r->result_lock);
    if (r->finish == SREQ_FINISH_NONE) {
        r->finish = finish;
        if (stats != NULL) r->stats = *stats;
        r->err_status = status;
        snprintf(r->err_code, sizeof(r->err_code), "%s", code ? code : "");
        snprintf(r->err_msg, sizeof(r->err_msg), "%s", msg ? msg : "");
        r->t_end_ns = strata_clock_ns();
        pthread_cond_broadcast(&r->result_cond);
    }
    pthread_mutex_unlock(&r->result_lock);
    waker_signal(r->waker);
}

int sreq_set_vector(sreq *r, const float *v, size_t n)
{
    float *copy = malloc((n ? n : 1) * sizeof(float));
    if (copy == NULL) return -1;
    memcpy(copy, v, n * sizeof(float));
    pthread_mutex_lock(&r->result_lock);
    free(r->vec);
    r->vec = copy;
    r->n_vec = n;
    pthread_mutex_unlock(&r->result_lock);
    return 0;
}
