/* Grammar-constrained decoding: GBNF grammars, a recognizer over output
 * bytes, and the mask of the tokens that may come next.
 *
 * The dialect is llama.cpp's GBNF: rules `name ::= ...` (names of letters,
 * digits, `_` and `-`; the start rule is `root`), alternatives `|`,
 * sequences, groups `( )`, the repetitions `*` `+` `?` `{m}` `{m,}`
 * `{m,n}`, string literals with the escapes `\n \r \t \\ \" \xHH \uHHHH
 * \UHHHHHHHH` (and `\[ \] \- \/ \'`), character classes `[a-z0-9_]` and
 * negated ones `[^"\\]`, `.` (any character), and `#` comments to the end of
 * the line. A rule may continue over several lines; a new rule starts where
 * a name is followed by `::=`. Terminals are Unicode code points, matched on
 * their UTF-8 bytes, so a token may end in the middle of a character.
 *
 * Refused with STRATA_EFORMAT and a message "line L, column C: ...":
 * syntax errors, a rule defined twice, an undefined rule, no `root`, left
 * recursion (a rule that can reach itself before consuming a character,
 * which includes a repetition of something that can match nothing), a
 * repetition bound over GRAMMAR_MAX_REPEAT, and grammars larger than
 * GRAMMAR_MAX_ELEMS elements once repetitions are expanded.
 *
 * Recognition is a pushdown automaton over code points whose state is a set
 * of stacks (one per way the output so far can be parsed), deduplicated.
 * An ambiguous grammar can make that set grow: a continuation that would
 * need more than GRAMMAR_MAX_STACKS stacks, or nest rules deeper than
 * GRAMMAR_MAX_DEPTH, is refused like an invalid one, and
 * grammar_state_overflowed says that it happened.
 *
 * Ownership and threads: a grammar is immutable once parsed and may be used
 * by any number of states in any threads. A grammar_state belongs to one
 * request (one thread at a time) and keeps a pointer to its grammar, which
 * must outlive it. A grammar_vocab is immutable and shareable like the
 * grammar. */
#ifndef STRATA_SAMPLE_GRAMMAR_H
#define STRATA_SAMPLE_GRAMMAR_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRAMMAR_MAX_TEXT_BYTES (1u << 20) /* longest GBNF text accepted */
#define GRAMMAR_MAX_ELEMS (1u << 20)      /* elements after expanding repetitions */
#define GRAMMAR_MAX_REPEAT 10000u         /* largest m or n of {m,n} */
#define GRAMMAR_MAX_STACKS 1024u          /* parses alive at once */
#define GRAMMAR_MAX_DEPTH 4096u           /* nesting of rules on one stack */

typedef struct grammar grammar; /* compiled, immutable, shareable across threads */

/* Parses and compiles gbnf[0..len) (need not be NUL-terminated). Returns 0
 * and *out (free with grammar_free), or STRATA_EFORMAT with the position
 * and reason in err, or STRATA_ENOMEM. */
int grammar_parse(grammar **out, const char *gbnf, size_t len, strata_err *err);
void grammar_free(grammar *g);

typedef struct grammar_state grammar_state; /* one request's position in it */

/* A state at the start of the output. Free with grammar_state_free. */
int grammar_state_new(grammar_state **out, const grammar *g, strata_err *err);
void grammar_state_free(grammar_state *s);

/* Advances over bytes; false (state unchanged) when they cannot continue a
 * valid output. n == 0 is accepted. */
bool grammar_state_accept_bytes(grammar_state *s, const uint8_t *bytes, size_t n);

/* Whether accept_bytes would return true, without advancing. */
bool grammar_state_can_accept(grammar_state *s, const uint8_t *bytes, size_t n);

/* A complete output may end here (no character is half-written). */
bool grammar_state_can_end(const grammar_state *s);

/* Whether some continuation was refused for GRAMMAR_MAX_STACKS or
 * GRAMMAR_MAX_DEPTH, or memory ran out (after which nothing is accepted). */
bool grammar_state_overflowed(const grammar_state *s);

/* --- token masks --- */

typedef struct grammar_vocab grammar_vocab;

/* An index of a vocabulary for masks: token i has bytes[i][0..lens[i]).
 * Tokens of length 0 (control tokens, EOS) are never in a mask; the caller
 * decides about end-of-generation tokens with grammar_state_can_end. The
 * bytes are copied. Free with grammar_vocab_free. */
int grammar_vocab_new(grammar_vocab **out, int32_t n_tokens, const uint8_t *const *bytes,
                      const size_t *lens, strata_err *err);
void grammar_vocab_free(grammar_vocab *v);
int32_t grammar_vocab_n_tokens(const grammar_vocab *v);

/* Words of a mask over v: (n_tokens + 31) / 32. */
size_t grammar_mask_words(const grammar_vocab *v);

/* Fills allowed[grammar_mask_words(v)]: bit t (word t / 32, bit t % 32) is
 * set when token t's bytes can continue a valid output from s. Exactly the
 * tokens for which grammar_state_accept_bytes would return true (bar those
 * of length 0). The state is not advanced (its caches grow). Returns the
 * number of allowed tokens, or -1 when memory ran out (mask all clear). */
int64_t grammar_state_mask(grammar_state *s, const grammar_vocab *v, uint32_t *allowed);

#endif
