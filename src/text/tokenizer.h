/* Text to token ids and back, for any vocab (vocab.h).
 *
 * Tokenizing:
 *   1. Special tokens. The input is first cut on the text of special tokens,
 *      longest token first (for equal lengths the lower id first), and each
 *      occurrence becomes its id. USER_DEFINED tokens (a vocab's "added
 *      tokens") are always cut out, as Hugging Face tokenizers do; CONTROL
 *      and UNKNOWN tokens ("<s>", "<|im_end|>", "[CLS]") only when
 *      parse_special is true. Otherwise their text is plain text. Types
 *      follow llama.cpp's overrides by text (end-of-turn and FIM names are
 *      CONTROL, gpt-oss's channel markers USER_DEFINED), and some models'
 *      special tokens take the whitespace next to them (Phi-3's the
 *      whitespace after; see vocab.c).
 *   2. Each stretch of plain text goes to the vocab's algorithm:
 *      SPM  — spaces become "▁", a "▁" is put in front of the first stretch
 *             and of each stretch after a special token (when the vocab adds
 *             a space prefix); then pieces are merged pairwise by highest
 *             score (leftmost first on ties) while the merged text is a
 *             token; characters that are no token become their UTF-8 bytes
 *             as <0xNN> tokens (or UNK when the vocab has none).
 *      BPE  — the family's pre-tokenizer regexes split the text into words;
 *             each word's bytes are mapped to GPT-2's printable characters
 *             and merged by lowest merge rank (leftmost first on ties).
 *             Gemma 4's BPE merges UTF-8 characters instead, spaces as "▁",
 *             lines and newline runs as words, <0xNN> for a character that
 *             is no token (tokenize_bpe.c).
 *      WPM  — BERT's normalizer as llama.cpp applies it (control characters
 *             dropped; for an uncased vocab each character cut to the first
 *             of its NFD, marks dropped, lowercased), words split on
 *             whitespace, punctuation and CJK characters, then greedy
 *             longest-match with continuation pieces; a word that cannot be
 *             matched is UNK (tokenize_wpm.c).
 *   3. With add_special, BOS / EOS (WPM: [CLS] / [SEP]) as the vocab says.
 * Bytes that are not valid UTF-8 are tokenized too (SPM and BPE keep them
 * losslessly; WPM drops them as BERT drops U+FFFD).
 *
 * Detokenizing a token gives its bytes: SPM's "▁" becomes a space, <0xNN>
 * becomes the byte, byte-level BPE characters map back to their bytes, and
 * control/unknown tokens give their text only when asked (`special`).
 *
 * Everything here is thread-safe for a shared const vocab. */
#ifndef STRATA_TEXT_TOKENIZER_H
#define STRATA_TEXT_TOKENIZER_H

#include "base/err.h"
#include "text/vocab.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Inputs longer than this are refused with STRATA_ERANGE. */
#define TOK_MAX_INPUT_BYTES ((size_t)1 << 30)

/* Tokenizes text[0..len) into out[0..cap). On success returns 0 and sets
 * *n_out to the number of ids. When cap is too small, out holds the first
 * cap ids, *n_out the number needed, and STRATA_ERANGE is returned (call
 * with out = NULL, cap = 0 to count). Errors: STRATA_EUNSUPPORTED for a vocab
 * of kind NONE, STRATA_ERANGE for an input over TOK_MAX_INPUT_BYTES,
 * STRATA_ENOMEM. */
int tok_tokenize(const vocab *v, const char *text, size_t len, bool add_special,
                 bool parse_special, int32_t *out, size_t cap, size_t *n_out, strata_err *err);

/* The same into a malloc'd array (*out, caller frees; non-NULL on success
 * even for zero ids). */
int tok_tokenize_alloc(const vocab *v, const char *text, size_t len, bool add_special,
                       bool parse_special, int32_t **out, size_t *n_out, strata_err *err);

/* The bytes of one token into buf[0..cap): *n_out is set to the piece's
 * length; STRATA_ERANGE when cap is smaller (buf then holds a prefix).
 * special: render CONTROL/UNKNOWN/UNUSED tokens as their text (otherwise
 * they give nothing). STRATA_EINVAL for an id out of range. Pieces are never
 * longer than TOK_MAX_PIECE_BYTES. */
#define TOK_MAX_PIECE_BYTES (VOCAB_MAX_TOKEN_BYTES + 1)
int tok_token_to_piece(const vocab *v, int32_t id, bool special, char *buf, size_t cap,
                       size_t *n_out, strata_err *err);

enum tok_detok_flags {
    /* Render control/unknown tokens' text ("<s>", "<|im_end|>"). */
    TOK_DETOK_SPECIAL = 1u << 0,
    /* Drop a BOS at the start and an EOS at the end when the vocab adds
     * them (what add_special put there). */
    TOK_DETOK_REMOVE_SPECIAL = 1u << 1,
    /* Drop the one space that SPM's prefix rule (or WPM's word joining) puts
     * in front of the first text token, as llama.cpp does when asked. With
     * it, detokenize(tokenize(s)) == s for SPM. No effect for BPE. */
    TOK_DETOK_STRIP_LEADING_SPACE = 1u << 2,
};

/* Detokenizes ids[0..n_ids) into buf[0..cap) (not NUL-terminated): *n_out is
 * the length; STRATA_ERANGE when cap is smaller (buf holds a prefix). Pieces
 * are concatenated byte for byte; the result may hold incomplete UTF-8 when
 * the ids end inside a character. STRATA_EINVAL for an id out of range. */
int tok_detokenize(const vocab *v, const int32_t *ids, size_t n_ids, unsigned flags, char *buf,
                   size_t cap, size_t *n_out, strata_err *err);

/* The same into a malloc'd, NUL-terminated buffer (caller frees). */
int tok_detokenize_alloc(const vocab *v, const int32_t *ids, size_t n_ids, unsigned flags,
                         char **out, size_t *n_out, strata_err *err);

/* Streaming detokenizer: fed one token at a time, it hands out only whole
 * UTF-8 characters, holding back the bytes of a character that is not yet
 * complete (at most 3). Bytes that can never be part of a valid character
 * (a stray continuation byte, 0xC0, 0xF5..0xFF, a lead byte followed by a
 * non-continuation) are passed through as they come, so the concatenation
 * of everything it hands out, plus the leftover of tok_stream_finish, is
 * exactly tok_detokenize of the same ids with the same flags.
 *
 * One stream serves one sequence; it is not shared between threads. */
typedef struct tok_stream {
    const vocab *v;
    unsigned flags;
    bool seen_text;     /* a text token has been seen (leading-space rule) */
    bool seen_first;    /* any token has been seen (BOS removal) */
    int32_t held_eos;   /* an EOS held back under REMOVE_SPECIAL, or -1 */
    uint8_t pending[4]; /* the start of an incomplete character */
    size_t n_pending;
    char *buf; /* what the last call handed out; owned by the stream */
    size_t buf_cap;
    const int32_t *keep; /* tok_stream_keep: ids rendered as text anyway; borrowed */
    size_t n_keep;
} tok_stream;

void tok_stream_init(tok_stream *s, const vocab *v, unsigned flags);

/* Control tokens ids[0..n) (borrowed: they must outlive the stream) are
 * rendered as their text even without TOK_DETOK_SPECIAL: the markers a
 * reply format needs to see (gpt-oss's <|channel|>, Mistral's
 * [TOOL_CALLS]), kept while other control tokens still give nothing. */
void tok_stream_keep(tok_stream *s, const int32_t *ids, size_t n);

/* Feeds one id. On success *text and *n_text are the bytes ready now (possibly
 * none), valid until the next call on s. STRATA_EINVAL for a bad id,
 * STRATA_ENOMEM. */
int tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *n_text,
                    strata_err *err);

/* Ends the sequence: *text and *n_text are the bytes still held (an EOS piece
 * that turned out not to be last is never held here). *n_incomplete is the
 * number of trailing bytes that began a UTF-8 character that never
 * completed (0 when the output ended cleanly); the caller decides whether
 * to drop them or write U+FFFD. The stream can then be reused from the
 * start. */
int tok_stream_finish(tok_stream *s, const char **text, size_t *n_text, size_t *n_incomplete,
                      strata_err *err);

void tok_stream_free(tok_stream *s);

#endif
