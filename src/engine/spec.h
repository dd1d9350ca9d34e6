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
