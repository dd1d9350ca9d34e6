/* The vocabulary index that grammar masks need (sample/grammar.h), built
 * from a model's tokenizer metadata.
 *
 * A token's bytes are what detokenizing it alone gives (SentencePiece's "▁"
 * as a space, byte-level BPE unmapped, <0xNN> byte tokens as their byte).
 * Control, unknown and unused tokens get no bytes, so a grammar never
 * allows them; end-of-generation tokens are the caller's to allow where
 * grammar_state_can_end says so. */
#ifndef STRATA_ENGINE_ENGINE_GRAMMAR_H
#define STRATA_ENGINE_ENGINE_GRAMMAR_H

#include "sample/grammar.h"
#include "sample/sampler.h"
#include "text/vocab.h"

#include <stddef.h>
#include <stdint.h>

/* Each token's bytes, as the mask index has them: token t is
 * bytes[off[t] .. off[t + 1]) (empty for the tokens a grammar never allows). */
typedef struct engine_tok_bytes {
    uint8_t *bytes;
    size_t *off; /* (n + 1) */
    int32_t n;
} engine_tok_bytes;

/* The mask index and the token bytes it was built from (what the engine
 * advances a request's grammar state with). Free with grammar_vocab_free and
 * engine_tok_bytes_free; v may be freed right after. */
int engine_grammar_tables(grammar_vocab **gv_out, engine_tok_bytes *tb_out, const vocab *v,
                          strata_err *err);
void engine_tok_bytes_free(engine_tok_bytes *tb);

/* The mask index alone; *out is freed with grammar_vocab_free. */
int engine_grammar_vocab(grammar_vocab **out, const vocab *v, strata_err *err);

/* DRY's restart sequences from its sequence-breaker strings strs[0..n) (each
 * cut to 40 bytes), as llama.cpp makes them: every token whose text (control
 * tokens' included) holds the string is a restart sequence by itself; a
 * token whose text ends with the start of the string begins one, the rest
 * of the string tokenized (at most SAMPLE_DRY_MAX_TAIL tokens) as its tail.
 * *out malloc'd (possibly NULL with *n_out 0). 0, or STRATA_ENOMEM. */
int engine_dry_breakers(const vocab *v, const char *const *strs, size_t n, sample_dry_breaker **out,
                        size_t *n_out, strata_err *err);

#endif
