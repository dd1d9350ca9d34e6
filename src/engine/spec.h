/* Speculative decoding's draft source: n-gram (prompt lookup) drafts.
 *
 * A decoding sequence's tokens so far (prompt, then what it generated, the
 * pending token last) often repeat: names, phrases, code and text a request
 * asks to rewrite. The longest recent suffix of SPEC_NGRAM_MAX down to
 * SPEC_NGRAM_MIN tokens that occurred earlier in the sequence proposes the
 * token that followed it there; that token is appended and the lookup runs
 * again, up to draft_max tokens. A token is proposed only while its draft
 * probability, the share of the suffix's earlier occurrences that it
 * followed (the most frequent follower; ties go to the most recent), is at
 * least p_min; fewer than draft_min proposed tokens propose none.
 *
 * The scheduler (engine.h "Speculative decoding") verifies the drafts in
 * the batch of the normal step. The source is deterministic: it depends
 * on the sequence's own tokens only, so speculation keeps a request's
 * output independent of what else runs. It allocates nothing. */
#ifndef STRATA_ENGINE_SPEC_H
#define STRATA_ENGINE_SPEC_H

#include "model/kv_cache.h"

#include <stdbool.h>
#include <stdint.h>

#define SPEC_NGRAM_MAX 4
#define SPEC_NGRAM_MIN 2
/* The most draft tokens one sequence may propose per step (--draft-max). */
#define SPEC_DRAFT_MAX_LIMIT 16
#define SPEC_DEFAULT_DRAFT_MAX 4
#define SPEC_DEFAULT_P_MIN 0.5f

/* Throttle: a sequence whose drafts keep failing pauses drafting, so
 * that low acceptance costs little (engine.h "Speculative decoding"). A
 * round is a step in which the sequence drafted (or, with a draft model,
 * ran the draft for nothing); it fails when no draft is accepted. After
 * SPEC_THROTTLE_FAILS failed rounds in a row each further failed round
 * starts a pause of `pause` steps without drafts, doubling from
 * SPEC_THROTTLE_MIN to SPEC_THROTTLE_MAX, and every failed round halves
 * the drafts of the next (spec_throttle_cap); an accepted draft resets it. A
 * zeroed struct is the initial state. It depends only on the rounds of
 * its own sequence. */
#define SPEC_THROTTLE_FAILS 2
#define SPEC_THROTTLE_MIN 1
#define SPEC_THROTTLE_MAX 64

typedef struct spec_throttle {
    int fails;  /* failed rounds in a row */
    int skip;   /* steps of the current pause still to go */
    int pause;  /* the next pause's steps; 0: SPEC_THROTTLE_MIN */
} spec_throttle;

/* Called once per step in which the sequence could draft: true when it is
 * paused (the step then drafts nothing and counts towards the pause). */
bool spec_throttle_skip(spec_throttle *t);

/* The most drafts a round may propose, from the cap it would have: halved
 * for each failed round in a row (so 4, then 2, then 1: a failing round
 * costs one draft token), never below min_draft. */
int64_t spec_throttle_cap(const spec_throttle *t, int64_t cap, int min_draft);

/* The outcome of a round: accepted_any false for a failed one. */
void spec_throttle_round(spec_throttle *t, bool accepted_any);

/* Cost gate (engine.h "Speculative decoding"). Verifying k drafts makes
 * the step's forward pass one of n + k tokens instead of n, and a draft
 * model's proposals cost a draft forward per token. Where a step streams
 * the weights from memory the k extra tokens cost little; where it is
 * bound by arithmetic (a small model whose weights stay in cache, an F16
 * model's tiles) or the draft model is nearly as costly as the target,
 * drafts that are often rejected make decoding slower. The gate measures
 * both and picks, per sequence and step, the drafts k (none, or draft_min
 * up to the cap) that maximise the step's expected tokens per
 * millisecond:
 *
 *     (n_out + p + p^2 + ... + p^k) / (T(n0 + k) + k * D)
 *
 * n0 being the step's tokens so far, n_out the tokens it sends without
 * these drafts, T(n) the measured time of a step of n tokens, D that of a
 * draft forward (0 for n-gram drafts) and p the sequence's acceptance
 * estimate (draft j is kept with probability p once draft j - 1 was).
 *
 * T comes from timing every decoding step (no prompt chunk in it: those
 * cost more per token) of up to SPEC_COST_NMAX tokens, forward pass and
 * sampling, the median of the last SPEC_COST_RING times per token count
 * (a shared machine's stray slow steps do not move it); a count's time is
 * fresh for SPEC_COST_FRESH steps after it was last measured, and T(n)
 * is that time where fresh, else the least-squares line through the
 * fresh ones near n0 (within the cap either side: a prefill chunk's time
 * says little about a few more tokens in a decoding step). With fewer
 * than two fresh counts there (at start, or after a long time without
 * drafts on a lone sequence) nothing is known and the gate lets the whole
 * cap through, which measures the costs again. p counts
 * the sequence's own rounds (accepted drafts against rejections, decayed
 * so that recent rounds weigh most), starting from the engine's average
 * over all sequences, and drifts back towards that average while the
 * sequence does not draft, so that a sequence gated off tries again. The
 * gate changes how many tokens a step sends, never which. */
#define SPEC_COST_NMAX 64
#define SPEC_COST_FRESH 1024
#define SPEC_COST_RING 5

typedef struct spec_cost {
    double ms[SPEC_COST_NMAX + 1]; /* step time by token count: the median of ring */
    double ring[SPEC_COST_NMAX + 1][SPEC_COST_RING]; /* the last times */
    int n_ring[SPEC_COST_NMAX + 1], i_ring[SPEC_COST_NMAX + 1];
    int64_t at[SPEC_COST_NMAX + 1]; /* the step it was last measured at; 0: never */
    int64_t steps;                  /* steps timed or counted so far */
    double d_ms;                    /* a draft forward's time (of at most SPEC_COST_D_NMAX
                                       tokens), a moving average; 0: not measured */
    double acc, rej;                /* all sequences' accepted drafts and rejections, decayed */
} spec_cost;

/* A sequence's acceptance counts (decayed); zeroed: no rounds yet. */
typedef struct spec_accept {
    double acc, rej;
} spec_accept;

/* Draft forwards of more tokens are not timed (they carry prompt chunks). */
#define SPEC_COST_D_NMAX 8

/* A decoding step of n tokens took ms (forward and sampling); counts a
 * step (n = 0: a step that is not timed). */
void spec_cost_step(spec_cost *c, int64_t n, double ms);

/* A draft forward of n tokens took ms. */
void spec_cost_draft(spec_cost *c, int64_t n, double ms);

/* A round of the sequence: accepted of drafted drafts kept. */
void spec_accept_round(spec_cost *c, spec_accept *a, int drafted, int accepted);

/* A step in which the sequence could have drafted but did not. */
void spec_accept_idle(spec_accept *a);

/* The sequence's acceptance estimate, in (0, 1). */
double spec_accept_p(const spec_cost *c, const spec_accept *a);

/* The estimated time of a step of n tokens into *ms: the count's own
 * where fresh, else the least-squares line through the fresh counts in
 * [lo, hi]; false when there are fewer than two. */
bool spec_cost_time(const spec_cost *c, int64_t n, int64_t lo, int64_t hi, double *ms);

/* The drafts to propose (above): 0 or min_draft..cap; cap itself when the
 * costs are not known. draft_ms: D, the time of a draft forward (< 0: the
 * measured one; 0 for a source that costs nothing). */
int spec_cost_pick(const spec_cost *c, int64_t n0, int64_t n_out, double p, double draft_ms,
                   int cap, int min_draft);

/* Proposes up to max_draft tokens to follow toks[0, n) into draft[] and
 * returns how many (0 when fewer than min_draft, or nothing matches).
 * max_draft <= SPEC_DRAFT_MAX_LIMIT. */
int spec_ngram_draft(const int32_t *toks, int64_t n, int32_t *draft, int max_draft, int min_draft,
                     float p_min);

/* The most of n_draft drafts that sequence slot, holding len positions
 * after this step's pending token, can add with at most avail more blocks
 * from the pool; *extra_blocks gets the blocks they take. */
int spec_fit_blocks(const kv_cache *kv, int32_t slot, int64_t len, int n_draft, int64_t avail,
                    int64_t *extra_blocks);

#endif
