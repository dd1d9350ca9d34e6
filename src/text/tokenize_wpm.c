/* WordPiece (tokenizer.ggml.model = "bert").
 *
 * BERT's normalizer and pre-tokenizer, then greedy longest-match:
 *   1. Clean: U+0000, U+FFFD (and bytes that are not valid UTF-8) and
 *      control characters (category C*, except tab, newline and carriage
 *      return) are dropped; whitespace (those three, space, category Zs)
 *      separates words.
 *   2. For an uncased vocab (vocab.wpm_lowercase): NFD, nonspacing marks
 *      (Mn) removed, lowercase. A cased vocab keeps the text as it is.
 *   3. Punctuation (ASCII symbols and punctuation, category P*) and CJK
 *      ideographs are words of one character.
 *   4. Each word is matched greedily from the left with the longest token;
 *      pieces after the first are continuations. In llama.cpp's converted
 *      vocabs a word's first piece carries a leading "▁" and continuations
 *      are bare; in original BERT vocabs continuations carry "##". A word
 *      with any part that matches nothing, or with more than 100
 *      characters, is one UNK token.
 * Unicode data (categories, decompositions, case) comes from utf8proc. */
#include "text/vocab_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define WPM_MAX_WORD_CHARS 100

static bool is_wpm_whitespace(uint32_t cp)
{
    if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return true;
    return utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_ZS;
}

static bool is_wpm_control(uint32_t cp)
{
    if (cp == '\t' || cp == '\n' || cp == '\r') return false;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: return true;
    default: return false;
    }
}

static bool is_wpm_punct(uint32_t cp)
{
    if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
        (cp >= 123 && cp <= 126)) {
        return true;
    }
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return true;
    default: return false;
    }
}

/* BERT's "Chinese character" blocks: the CJK Unified Ideographs and their
 * extensions and compatibility blocks (not kana or hangul). */
static bool is_cjk(uint32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

typedef struct wpm_state {
    const vocab *v;
    tok_ivec *out;
    char *word; /* the current word in UTF-8, after room for a prefix */
    size_t n_word, cap_word, n_chars;
    char *piece; /* "##" + candidate, for vocabs of that convention */
} wpm_state;

#define WPM_PREFIX 3 /* room for "▁" in front of the word */

static int word_append(wpm_state *s, uint32_t cp)
{
    if (s->n_word + 4 > s->cap_word) {
        size_t cap = s->cap_word ? s->cap_word * 2 : 256;
        char *w = realloc(s->word, WPM_PREFIX + cap);
        if (w == NULL) return -1;
        s->word = w;
        s->cap_word = cap;
    }
    s->n_word += tok_utf8_encode(cp, s->word + WPM_PREFIX + s->n_word);
    s->n_chars++;
    return 0;
}

static bool at_char_boundary(const char *w, size_t n, size_t i)
{
    return i == n || ((uint8_t)w[i] & 0xC0) != 0x80;
}

/* Greedy longest match of w[0..n); pieces after the first are
 * continuations ("##" added when the vocab uses that convention). */
static int match_word(wpm_state *s, const char *w, size_t n)
{
    const vocab *v = s->v;
    size_t mark = s->out->n;
    for (size_t pos = 0; pos < n;) {
        size_t end = n - pos > v->max_token_len ? pos + v->max_token_len : n;
        int32_t id = -1;
        for (; end > pos; end--) {
            if (!at_char_boundary(w, n, end)) continue;
            if (pos > 0 && !v->wpm_phantom) {
                if (end - pos + 2 > v->max_token_len) continue;
                memcpy(s->piece + 2, w + pos, end - pos);
                id = vocab_find(v, s->piece, end - pos + 2);
            } else {
                id = vocab_find(v, w + pos, end - pos);
            }
            if (id >= 0) break;
        }
        if (id < 0) {
            s->out->n = mark;
            return v->sp.unk >= 0 ? tok_ivec_push(s->out, v->sp.unk) : 0;
        }
        if (tok_ivec_push(s->out, id) != 0) return -1;
        pos = end;
    }
    return 0;
}

static int end_word(wpm_state *s)
{
    if (s->n_word == 0) return 0;
    int rc;
    if (s->n_chars > WPM_MAX_WORD_CHARS) {
        rc = s->v->sp.unk >= 0 ? tok_ivec_push(s->out, s->v->sp.unk) : 0;
    } else if (s->v->wpm_phantom) {
        memcpy(s->word, "\xe2\x96\x81", WPM_PREFIX);
        rc = match_word(s, s->word, WPM_PREFIX + s->n_word);
    } else {
        rc = match_word(s, s->word + WPM_PREFIX, s->n_word);
    }
    s->n_word = 0;
    s->n_chars = 0;
    return rc;
}

/* One normalized character into the word being built. */
static int feed(wpm_state *s, uint32_t cp)
{
    if (is_wpm_whitespace(cp)) return end_word(s);
    if (is_wpm_punct(cp) || is_cjk(cp)) {
        if (end_word(s) != 0 || word_append(s, cp) != 0) return -1;
        return end_word(s);
    }
    return word_append(s, cp);
}

int tok_wpm_encode(const vocab *v, const char *text, size_t len, tok_ivec *out, strata_err *err)
{
    wpm_state s = {.v = v, .out = out};
    s.piece = malloc(v->max_token_len + 2);
    int rc = 0;
    if (s.piece == NULL) goto oom;
    memcpy(s.piece, "##", 2);
    const uint8_t *p = (const uint8_t *)text;
    for (size_t off = 0; off < len;) {
        uint32_t cp;
        size_t n = tok_utf8_decode(p + off, len - off, &cp);
        if (n == 0) {
            /* Not UTF-8: as U+FFFD, which BERT's cleaning drops. */
            off++;
            continue;
        }
        off += n;
        if (cp == 0 || cp == 0xFFFD || is_wpm_control(cp)) continue;
        if (!v->wpm_lowercase) {
            if (feed(&s, cp) != 0) goto oom;
            continue;
        }
        utf8proc_int32_t dec[32];
        int last_boundclass = 0;
        utf8proc_ssize_t n_dec = utf8proc_decompose_char((utf8proc_int32_t)cp, dec, 32,
                                                         UTF8PROC_DECOMPOSE, &last_boundclass);
        if (n_dec < 0 || n_dec > 32) {
            dec[0] = (utf8proc_int32_t)cp;
            n_dec = 1;
        }
        for (utf8proc_ssize_t k = 0; k < n_dec; k++) {
            if (utf8proc_category(dec[k]) == UTF8PROC_CATEGORY_MN) continue;
            if (feed(&s, (uint32_t)utf8proc_tolower(dec[k])) != 0) goto oom;
        }
    }
    if (end_word(&s) != 0) goto oom;
    goto done;
oom:
    rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
done:
    free(s.word);
    free(s.piece);
    return rc;
}
