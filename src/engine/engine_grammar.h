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
#include "text/vocab.h"

/* *out is freed with grammar_vocab_free; v may be freed right after. */
int engine_grammar_vocab(grammar_vocab **out, const vocab *v, strata_err *err);

#endif
