/* The n-gram draft source and the throttle of spec.h. */
#include "engine/spec.h"

#include <stdbool.h>

/* Followers of one suffix, counted over its earlier occurrences; only the
 * first SPEC_FOLLOWERS distinct ones are tracked (the others still count in
 * the total, so the draft probability is never overstated). */
#define SPEC_FOLLOWERS 8

/* The token at i of toks[0, n) followed by draft[0, n_draft). */
static inline int32_t seq_at(const int32_t *toks, int64_t n, const int32_t *draft, int64_t i)
{
    return i < n ? toks[i] : draft[i - n];
}

/* The most frequent follower of the last ng tokens of the sequence among
 * their earlier occurrences inside toks[0, n): false when there is none;
 * else *tok and its share *p. */
static bool lookup(const int32_t *toks, int64_t n, const int32_t *draft, int n_draft, int ng,
                   int32_t *tok, float *p)
{
    const int64_t len = n + n_draft;
    if (len < ng + 1 || n < ng + 1) return false;
    const int64_t s0 = len - ng; /* the suffix: [s0, len) */
    int32_t fol[SPEC_FOLLOWERS];
    int64_t cnt[SPEC_FOLLOWERS];
    int n_fol = 0;
    int64_t total = 0;
    /* occurrences at i < s0 (not the suffix itself; they may overlap it)
     * with their follower at i + ng < n, most recent first */
    int64_t last = n - 1 - ng < s0 - 1 ? n - 1 - ng : s0 - 1;
    for (int64_t i = last; i >= 0; i--) {
        bool match = true;
        for (int k = ng - 1; k >= 0 && match; k--) {
            match = toks[i + k] == seq_at(toks, n, draft, s0 + k);
        }
        if (!match) continue;
        int32_t f = toks[i + ng];
        total++;
        int j = 0;
        while (j < n_fol && fol[j] != f) j++;
        if (j < n_fol) {
            cnt[j]++;
        } else if (n_fol < SPEC_FOLLOWERS) {
            fol[n_fol] = f;
            cnt[n_fol++] = 1;
        }
    }
    if (total == 0) return false;
    int best = 0; /* the first seen is the most recent: it wins ties */
    for (int j = 1; j < n_fol; j++) {
        if (cnt[j] > cnt[best]) best = j;
    }
    *tok = fol[best];
    *p = (float)((double)cnt[best] / (double)total);
    return true;
}

int spec_ngram_draft(const int32_t *toks, int64_t n, int32_t *draft, int max_draft, int min_draft,
                     float p_min)
{
    if (max_draft > SPEC_DRAFT_MAX_LIMIT) max_draft = SPEC_DRAFT_MAX_LIMIT;
    int n_draft = 0;
    while (n_draft < max_draft) {
        int32_t tok = 0;
        float p = 0.0f;
        bool found = false;
        for (int ng = SPEC_NGRAM_MAX; ng >= SPEC_NGRAM_MIN && !found; ng--) {
            found = lookup(toks, n, draft, n_draft, ng, &tok, &p);
        }
        /* the longest suffix that matches decides; a weak follower ends the
         * draft rather than falling back to a shorter, weaker suffix */
        if (!found || p < p_min) break;
        draft[n_draft++] = tok;
    }
    return n_draft >= min_draft ? n_draft : 0;
}

int spec_fit_blocks(const kv_cache *kv, int32_t slot, int64_t len, int n_draft, int64_t avail,
                    int64_t *extra_blocks)
{
    const int64_t base = kv_seq_blocks_needed(kv, slot, len);
    *extra_blocks = 0;
    for (; n_draft > 0; n_draft--) {
        int64_t extra = kv_seq_blocks_needed(kv, slot, len + n_draft) - base;
        if (extra <= avail) {
            *extra_blocks = extra;
            break;
        }
    }
    return n_draft;
}

bool spec_throttle_skip(spec_throttle *t)
{
    if (t->skip <= 0) return false;
    t->skip--;
    return true;
}

int64_t spec_throttle_cap(const spec_throttle *t, int64_t cap, int min_draft)
{
    int shift = t->fails < 8 ? t->fails : 8;
    int64_t c = cap >> shift;
    if (c < 1) c = 1;
    if (c < min_draft) c = min_draft;
    return c < cap ? c : cap;
}

void spec_throttle_round(spec_throttle *t, bool accepted_any)
{
    if (accepted_any) {
        t->fails = 0;
        t->pause = 0;
        t->skip = 0;
        return;
    }
    if (++t->fails < SPEC_THROTTLE_FAILS) return;
    int pause = t->pause > 0 ? t->pause : SPEC_THROTTLE_MIN;
    t->skip = pause;
    t->pause = pause * 2 < SPEC_THROTTLE_MAX ? pause * 2 : SPEC_THROTTLE_MAX;
}

/* ---- the cost gate ---- */

/* Moving averages: a new time weighs this much. */
#define COST_NEW 0.25
/* A sequence's counts shrink by this per round, and per idle step; the
 * engine's per round of any sequence. */
#define ACCEPT_DECAY 0.9
#define ACCEPT_IDLE_DECAY 0.98
#define ACCEPT_ENGINE_DECAY 0.98

static bool fresh(const spec_cost *c, int64_t n)
{
    return c->at[n] > 0 && c->steps - c->at[n] < SPEC_COST_FRESH;
}

void spec_cost_step(spec_cost *c, int64_t n, double ms)
{
    c->steps++;
    if (n < 1 || n > SPEC_COST_NMAX || !(ms >= 0.0)) return;
    if (!fresh(c, n)) c->n_ring[n] = c->i_ring[n] = 0; /* stale times are dropped */
    c->ring[n][c->i_ring[n]] = ms;
    c->i_ring[n] = (c->i_ring[n] + 1) % SPEC_COST_RING;
    if (c->n_ring[n] < SPEC_COST_RING) c->n_ring[n]++;
    double v[SPEC_COST_RING];
    int m = c->n_ring[n];
    for (int i = 0; i < m; i++) { /* insertion sort of at most SPEC_COST_RING */
        double x = c->ring[n][i];
        int j = i;
        for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
        v[j] = x;
    }
    c->ms[n] = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
    c->at[n] = c->steps;
}

void spec_cost_draft(spec_cost *c, int64_t n, double ms)
{
    if (n < 1 || n > SPEC_COST_D_NMAX || !(ms >= 0.0)) return;
    c->d_ms = c->d_ms > 0.0 ? (1.0 - COST_NEW) * c->d_ms + COST_NEW * ms : ms;
}

void spec_accept_round(spec_cost *c, spec_accept *a, int drafted, int accepted)
{
    if (drafted <= 0) return; /* proposed nothing: says nothing of p */
    double rej = accepted < drafted ? 1.0 : 0.0;
    a->acc = a->acc * ACCEPT_DECAY + accepted;
    a->rej = a->rej * ACCEPT_DECAY + rej;
    c->acc = c->acc * ACCEPT_ENGINE_DECAY + accepted;
    c->rej = c->rej * ACCEPT_ENGINE_DECAY + rej;
}

void spec_accept_idle(spec_accept *a)
{
    a->acc *= ACCEPT_IDLE_DECAY;
    a->rej *= ACCEPT_IDLE_DECAY;
}

double spec_accept_p(const spec_cost *c, const spec_accept *a)
{
    /* accepted drafts over accepted drafts and rejections: the estimate of
     * a geometric run's p; the engine's, with one of each added, is the
     * prior, weighing as two rounds */
    double p0 = (c->acc + 1.0) / (c->acc + c->rej + 2.0);
    return (a->acc + 2.0 * p0) / (a->acc + a->rej + 2.0);
}

bool spec_cost_time(const spec_cost *c, int64_t n, int64_t lo, int64_t hi, double *ms)
{
    if (n >= 1 && n <= SPEC_COST_NMAX && fresh(c, n)) {
        *ms = c->ms[n];
        return true;
    }
    if (lo < 1) lo = 1;
    if (hi > SPEC_COST_NMAX) hi = SPEC_COST_NMAX;
    double m = 0.0, sx = 0.0, sy = 0.0, sxx = 0.0, sxy = 0.0;
    for (int64_t i = lo; i <= hi; i++) {
        if (!fresh(c, i)) continue;
        double x = (double)i, y = c->ms[i];
        m += 1.0;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    if (m < 2.0) return false;
    double den = m * sxx - sx * sx; /* > 0: at least two distinct counts */
    double b = (m * sxy - sx * sy) / den;
    if (b < 0.0) b = 0.0; /* noise; more tokens never cost less */
    double a = (sy - b * sx) / m;
    double t = a + b * (double)n;
    *ms = t > 1e-6 ? t : 1e-6;
    return true;
}

int spec_cost_pick(const spec_cost *c, int64_t n0, int64_t n_out, double p, double draft_ms,
                   int cap, int min_draft)
{
    if (min_draft < 1) min_draft = 1;
    if (cap < min_draft || n0 < 0 || n0 + cap > SPEC_COST_NMAX) return cap;
    double d = draft_ms < 0.0 ? c->d_ms : draft_ms;
    if (draft_ms < 0.0 && !(d > 0.0)) return cap; /* the draft's cost not measured yet */
    /* the line through the counts near the step's: a prefill chunk's time
     * says little of a few more tokens in a decoding step */
    const int64_t lo = n0 - cap, hi = n0 + cap;
    double t0;
    if (!spec_cost_time(c, n0 > 0 ? n0 : 1, lo, hi, &t0)) return cap;
    double out = n_out > 0 ? (double)n_out : 1.0;
    double best = out / t0, gain = 0.0, pk = 1.0;
    int best_k = 0;
    for (int k = 1; k <= cap; k++) {
        pk *= p;
        gain += pk;
        if (k < min_draft) continue;
        double tk;
        if (!spec_cost_time(c, n0 + k, lo, hi, &tk)) return cap;
        double rate = (out + gain) / (tk + (double)k * d);
        if (rate > best) {
            best = rate;
            best_k = k;
        }
    }
    return best_k;
}
