/* What the files of the tokenizer share and callers do not see: the layout
 * of a vocab, the growable id vector, the UTF-8 helpers and the entry
 * points of each algorithm (tokenize_spm.c, tokenize_bpe.c, tokenize_wpm.c)
 * and of the pre-tokenizer (pretokenize.c). */
#ifndef STRATA_TEXT_VOCAB_INTERNAL_H
#define STRATA_TEXT_VOCAB_INTERNAL_H

#include "base/err.h"
#include "base/strmap.h"
#include "text/vocab.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --- ids out ------------------------------------------------------------ */

typedef struct tok_ivec {
    int32_t *ids;
    size_t n, cap;
} tok_ivec;

/* 0, or -1 when memory runs out. */
int tok_ivec_push(tok_ivec *v, int32_t id);
void tok_ivec_free(tok_ivec *v);

/* --- UTF-8 ---------------------------------------------------------------- */

/* The length of the UTF-8 sequence that lead byte c announces: 1 for ASCII
 * and for bytes that cannot start a sequence (continuations, 0xF8..0xFF),
 * so that any byte string is cut into 1..4-byte units. */
static inline size_t tok_utf8_len(uint8_t c)
{
    if (c < 0xC0) return 1;
    if (c < 0xE0) return 2;
    if (c < 0xF0) return 3;
    if (c < 0xF8) return 4;
    return 1;
}

/* Decodes one well-formed character at s[0..n) (n > 0). Returns its length
 * and sets *cp, or returns 0 when the bytes there are not a valid, complete
 * UTF-8 character (overlong forms, surrogates and values past U+10FFFF
 * included). */
size_t tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Encodes cp (<= U+10FFFF) into out (4 bytes of room); returns the length. */
size_t tok_utf8_encode(uint32_t cp, char *out);

/* --- the vocab ------------------------------------------------------------ */

typedef struct vocab_token {
    uint32_t off; /* into vocab.text */
    uint32_t len;
    float score;
    uint8_t type; /* enum vocab_token_type */
    uint8_t strip; /* TOK_STRIP_*: whitespace a matched special token takes */
} vocab_token;

/* A special token that swallows the whitespace before it (LSTRIP) or after
 * it (RSTRIP) when it is cut out of the text (llama.cpp's token
 * attributes, set by model name; see vocab.c). */
#define TOK_STRIP_LEFT 1u
#define TOK_STRIP_RIGHT 2u

/* A node of the byte trie over the texts of special tokens. */
typedef struct tok_trie_node {
    int32_t first_child;  /* -1: none */
    int32_t next_sibling; /* -1: none */
    int32_t token;        /* the token ending here, or -1 */
    uint8_t byte;
} tok_trie_node;

/* A pair of adjacent BPE symbols that merges: rank (lower merges first) and
 * the id of the merged token. */
typedef struct tok_merge_slot {
    uint64_t key; /* (left id + 1) << 32 | (right id + 1); 0: empty */
    uint32_t rank;
    int32_t merged;
} tok_merge_slot;

typedef struct tok_pretok tok_pretok;

struct vocab {
    enum vocab_kind kind;
    int32_t n_tokens;
    vocab_token *tokens;
    char *text;           /* every token's text, each followed by a NUL */
    size_t max_token_len; /* bytes of the longest token */
    strata_strmap by_text; /* text -> id (the first id for duplicate texts) */

    vocab_special sp;
    bool add_bos, add_eos, add_space_prefix;
    bool ignore_merges;   /* BPE: a word that is a token is taken whole */
    bool bpe_chars;       /* BPE over UTF-8 characters, not GPT-2's byte map
                             (tokenizer.ggml.model "gemma4"): spaces are "▁",
                             a character that is no token becomes its bytes'
                             <0xNN> tokens (see tokenize_bpe.c) */
    bool spm_word_cuts;   /* SPM: no merge target holds "▁" after another
                             character, so words can be merged apart */
    bool *eog;            /* n_tokens flags: ends generation */
    char pre[64];         /* tokenizer.ggml.pre, truncated */

    /* Special-token matching: a trie whose root has a direct table. */
    int32_t trie_root[256];
    tok_trie_node *trie;
    size_t n_trie;
    int32_t *special_rank; /* n_tokens: priority of a special token (0 first), -1 if none */

    /* SPM and character BPE: the <0xNN> tokens; byte-level BPE: the token
     * of each byte's mapped char. */
    int32_t byte_token[256];
    /* BPE: code point (< 324) of GPT-2's byte map -> byte, or -1. */
    int16_t unmap[324];

    /* BPE merges: open addressing on key, capacity a power of two. */
    tok_merge_slot *merges;
    size_t merges_cap;
    tok_pretok *pretok;

    /* WPM conventions of this vocab. */
    bool wpm_lowercase;  /* lowercase (uncased vocabs) */
    bool wpm_strip_accents; /* first character of the NFD, marks dropped */
    bool wpm_phantom;    /* word starts carry "▁" (llama.cpp's conversion)
                            rather than continuations carrying "##" */
};

static inline const char *vocab_text_of(const vocab *v, int32_t id)
{
    return v->text + v->tokens[id].off;
}

/* The merge of (left, right), or NULL. */
const tok_merge_slot *vocab_merge_find(const vocab *v, int32_t left, int32_t right);

/* --- the algorithms -------------------------------------------------------
 * Each tokenizes one stretch of plain text (no special-token handling) and
 * appends the ids to out. They return 0, STRATA_ENOMEM or another code with
 * err filled. */

/* text is already escaped (spaces as "▁", the prefix added). */
int tok_spm_encode(const vocab *v, const char *text, size_t len, tok_ivec *out, strata_err *err);
int tok_bpe_encode(const vocab *v, const char *text, size_t len, tok_ivec *out, strata_err *err);
int tok_wpm_encode(const vocab *v, const char *text, size_t len, tok_ivec *out, strata_err *err);

/* --- the pre-tokenizer (pretokenize.c) ----------------------------------- */

typedef struct tok_span {
    size_t off, len;
} tok_span;

typedef struct tok_spanvec {
    tok_span *s;
    size_t n, cap;
} tok_spanvec;

/* Compiles the regexes of the family named `pre` (tokenizer.ggml.pre). An
 * unknown or empty name gives the GPT-2 pattern, with a warning logged for
 * an unknown one. *ignore_merges and *add_bos receive the family's
 * defaults. */
int tok_pretok_compile(tok_pretok **out, const char *pre, bool *ignore_merges, bool *add_bos,
                       strata_err *err);
void tok_pretok_free(tok_pretok *p);
const char *tok_pretok_name(const tok_pretok *p);

/* Splits text[0..len) into words: each regex in turn cuts every piece from
 * the previous one into its matches and the gaps between them (both kept,
 * in order; Hugging Face's "Isolated" split). Spans are relative to text and
 * cover it exactly. */
int tok_pretok_split(const tok_pretok *p, const char *text, size_t len, tok_spanvec *out,
                     strata_err *err);
void tok_spanvec_free(tok_spanvec *v);

#endif
