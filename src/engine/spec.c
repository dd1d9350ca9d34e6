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
