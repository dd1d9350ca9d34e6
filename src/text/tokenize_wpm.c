/* WordPiece (tokenizer.ggml.model = "bert").
 *
 * BERT's normalizer and pre-tokenizer, then greedy longest-match, with the
 * rules of llama.cpp's WPM tokenizer (whose ids are the reference), applied
 * to each character in turn:
 *   1. With accent stripping, the character becomes the first character of
 *      its canonical decomposition (NFD): "é" -> "e", "Å" (U+212B) -> "A".
 *      It is one character for one, so a Hangul syllable becomes its
 *      leading consonant jamo alone: "안" (U+C548 = U+110B U+1161 U+11AB)
 *      -> U+110B. (Hugging Face's BertNormalizer keeps the whole
 *      decomposition, vowel and final jamo included; llama.cpp does not.)
 *   2. White_Space characters (the 25 of Unicode's property: tab to CR,
 *      space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
 *      U+202F, U+205F, U+3000) end the current word.
 *   3. U+0000, U+FFFD (and bytes that are not valid UTF-8) and the other
 *      characters of category C* (controls, format characters such as
 *      U+200B or the soft hyphen, unassigned) are dropped without ending a
 *      word.
 *   4. With accent stripping, marks (category M: Mn, Mc and Me) are
 *      dropped, so "e\u0301" also gives "e" (and Devanagari's vowel signs,
 *      Mc, go too, as in llama.cpp).
 *   5. With lowercasing, the simple lowercase mapping.
 *   6. Punctuation (category P*), ASCII symbols ($ + < = > ^ ` | ~) and
 *      CJK ideographs are words of one character; anything else extends
 *      the current word.
 *   7. Each word is matched greedily from the left with the longest token;
 *      pieces after the first are continuations. In llama.cpp's converted
 *      vocabs a word's first piece carries a leading "▁" and continuations
 *      are bare; in original BERT vocabs continuations carry "##". A word
 *      with any part that matches nothing is one UNK token. (Hugging
 *      Face's WordPiece also makes a word of more than 100 characters UNK;
 *      llama.cpp does not, and neither does this.)
 * Lowercasing and accent stripping follow tokenizer.ggml.normalizer.
 * lowercase / .strip_accents (the latter defaulting to the former, as in
 * BertNormalizer); without the keys, a vocab none of whose ordinary tokens
 * has an ASCII capital is taken to be uncased (both on), any other cased
 * (both off), which is what its model was trained with.
 * Unicode data (categories, decompositions, case) comes from utf8proc. */
#include "text/vocab_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Unicode's White_Space property (PropList.txt), all 25 of them. */
static bool is_wpm_whitespace(uint32_t cp)
{
    if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680) return true;
    if (cp >= 0x2000 && cp <= 0x200A) return true;
    return cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Category C*; called after the whitespace test, which takes tab to CR and
 * U+0085 first. */
static bool is_wpm_control(uint32_t cp)
{
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

static bool is_wpm_mark(uint32_t cp)
{
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: return true;
    default: return false;
    }
}

/* BERT's "Chinese character" blocks: the CJK Unified Ideographs and their
 * extensions and compatibility blocks (not kana or hangul). The range after
 * Extension D starts at U+2B920, not U+2B820 where Extension E starts: so
 * in llama.cpp and in Hugging Face's Rust tokenizers, and the ids depend on
 * it (U+2B820..U+2B91F stay inside words). */
static bool is_cjk(uint32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* The first character of cp's full canonical decomposition (cp itself when
 * it has none). */
static uint32_t nfd_first(uint32_t cp)
{
    utf8proc_int32_t dec[32];
    int last_boundclass = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)cp, dec, 32, UTF8PROC_DECOMPOSE,
                                                 &last_boundclass);
    return n >= 1 && n <= 32 ? (uint32_t)dec[0] : cp;
}

typedef struct wpm_state {
    const vocab *v;
    tok_ivec *out;
    char *word; /* the current word in UTF-8, after room for a prefix */
    size_t n_word, cap_word;
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
    if (s->v->wpm_phantom) {
        memcpy(s->word, "\xe2\x96\x81", WPM_PREFIX);
        rc = match_word(s, s->word, WPM_PREFIX + s->n_word);
    } else {
        rc = match_word(s, s->word + WPM_PREFIX, s->n_word);
    }
    s->n_word = 0;
    return rc;
}

/* One input character through rules 1-6 (see the top of the file). */
static int feed(wpm_state *s, uint32_t cp)
{
    const vocab *v = s->v;
    if (v->wpm_strip_accents) cp = nfd_first(cp);
    if (is_wpm_whitespace(cp)) return end_word(s);
    if (cp == 0 || cp == 0xFFFD || is_wpm_control(cp)) return 0;
    if (v->wpm_strip_accents && is_wpm_mark(cp)) return 0;
    uint32_t out = v->wpm_lowercase ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp) : cp;
    if (is_wpm_punct(cp) || is_cjk(cp)) {
        if (end_word(s) != 0 || word_append(s, out) != 0) return -1;
        return end_word(s);
    }
    return word_append(s, out);
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
        if (feed(&s, cp) != 0) goto oom;
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
