/* A model's vocabulary, loaded from GGUF metadata alone.
 *
 * A vocab is what the tokenizers (tokenizer.h) and detokenizers need: every
 * token's text, score and type, the merges of a byte-level BPE, the special
 * ids (BOS, EOS, ...), whether BOS/EOS are added, and the pre-tokenizer of
 * the model family. It is read from the `tokenizer.ggml.*` keys, so a
 * vocab-only GGUF (no tensors) is enough, and the server never needs the
 * weights to tokenize.
 *
 * Every array and id from the file is checked (element types, equal lengths,
 * ids in range, merges that name real tokens); a bad file gives
 * STRATA_EFORMAT with the key and the reason.
 *
 * Ownership: vocab_load copies what it keeps, so the gguf may be closed right
 * after. A loaded vocab is immutable and may be shared by any number of
 * threads tokenizing at once; free it with vocab_free when none uses it.
 *
 * Defaults when a key is absent follow llama.cpp's documented behaviour:
 * SentencePiece (`llama`) adds BOS and not EOS, prefixes a space and uses
 * BOS 1 / EOS 2 / UNK 0; byte-level BPE (`gpt2`) adds BOS only for the
 * families that do (llama3, tekken, ...); Gemma 4 (`gemma4`) always adds
 * BOS; WordPiece (`bert`) wraps the text
 * in [CLS] ... [SEP]. `tokenizer.ggml.add_bos_token` / `add_eos_token` /
 * `add_sep_token` / `add_space_prefix` override those. */
#ifndef STRATA_TEXT_VOCAB_H
#define STRATA_TEXT_VOCAB_H

#include "base/err.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum vocab_kind {
    VOCAB_KIND_NONE = 0, /* "none": ids only, nothing to tokenize with */
    VOCAB_KIND_SPM = 1,  /* "llama": SentencePiece BPE by score, byte fallback */
    VOCAB_KIND_BPE = 2,  /* "gpt2": byte-level BPE with merges; "gemma4": BPE
                            with merges over UTF-8 characters (spaces as
                            "▁", <0xNN> byte fallback) */
    VOCAB_KIND_WPM = 3,  /* "bert": WordPiece */
};

/* The values of tokenizer.ggml.token_type (llama.cpp's enumeration). */
enum vocab_token_type {
    VOCAB_TOKEN_UNDEFINED = 0,
    VOCAB_TOKEN_NORMAL = 1,
    VOCAB_TOKEN_UNKNOWN = 2,
    VOCAB_TOKEN_CONTROL = 3,
    VOCAB_TOKEN_USER_DEFINED = 4,
    VOCAB_TOKEN_UNUSED = 5,
    VOCAB_TOKEN_BYTE = 6,
};

/* Special ids; -1 where the vocab has none. */
typedef struct vocab_special {
    int32_t bos, eos, eot, eom, unk, sep, pad, cls, mask;
    /* fill-in-the-middle: prefix, suffix, middle, pad, repository name and
     * file separator (tokenizer.ggml.fim_*_token_id, else found by their
     * usual texts: "<|fim_prefix|>", "<fim_prefix>", "<PRE>", ...) */
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
} vocab_special;

typedef struct vocab vocab;

/* Longer token texts are refused at load (no real vocab comes near). */
#define VOCAB_MAX_TOKEN_BYTES 65536

/* Builds a vocab from g's tokenizer metadata. Errors: STRATA_ENOTFOUND when
 * the file has no tokenizer.ggml.model, STRATA_EUNSUPPORTED for a tokenizer
 * model this build does not implement (t5/ugm, rwkv, ...), STRATA_EFORMAT
 * for malformed or inconsistent metadata, STRATA_ENOMEM. */
int vocab_load(vocab **out, const gguf *g, strata_err *err);

/* gguf_open + vocab_load + gguf_close. */
int vocab_open(vocab **out, const char *path, strata_err *err);

void vocab_free(vocab *v);

enum vocab_kind vocab_get_kind(const vocab *v);
const char *vocab_kind_name(enum vocab_kind kind); /* "llama", "gpt2", "bert", "none" */
int32_t vocab_n_tokens(const vocab *v);

/* The tokenizer.ggml.pre value ("" when absent) and the pre-tokenizer that
 * is really used for it ("gpt-2", "llama3", ...; "" for SPM and WPM). */
const char *vocab_pre_name(const vocab *v);
const char *vocab_pretok_name(const vocab *v);

/* The token's text as stored (SentencePiece's "▁", the byte-level BPE's
 * mapped characters); not NUL-terminated in general, *len bytes. Valid
 * until vocab_free. id must be in [0, vocab_n_tokens). */
const char *vocab_token_text(const vocab *v, int32_t id, size_t *len);
float vocab_token_score(const vocab *v, int32_t id);
enum vocab_token_type vocab_token_type(const vocab *v, int32_t id);

/* The id of the token whose stored text is exactly text[0..len), or -1. */
int32_t vocab_find(const vocab *v, const char *text, size_t len);

const vocab_special *vocab_specials(const vocab *v);

/* Whether tokenizing with add_special adds BOS (for WPM: [CLS]) in front and
 * EOS (for WPM: [SEP]) at the end. */
bool vocab_adds_bos(const vocab *v);
bool vocab_adds_eos(const vocab *v);

/* SentencePiece's leading-space rule: a space is put in front of the text
 * (and after each special token) before tokenizing. */
bool vocab_adds_space_prefix(const vocab *v);

/* End of generation: EOS, EOT, EOM and the end-of-turn tokens named by
 * their text (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, ...). */
bool vocab_is_eog(const vocab *v, int32_t id);

/* CONTROL or UNKNOWN type: text that is not part of the output unless the
 * caller asks to render special tokens. */
bool vocab_is_control(const vocab *v, int32_t id);

#endif
