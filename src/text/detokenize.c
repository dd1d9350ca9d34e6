/* Token ids back to bytes (see tokenizer.h): the piece of one token, a
 * whole sequence, and the streaming detokenizer that holds back the bytes
 * of an unfinished UTF-8 character.
 *
 * A piece is the token's text turned back into what the model means by it:
 *   BYTE (<0xNN>)        the byte NN
 *   NORMAL, SPM          "▁" -> space
 *   NORMAL, BPE          GPT-2's mapped characters -> their bytes
 *   NORMAL, BPE over     "▁" -> space (Gemma 4)
 *   characters
 *   NORMAL, WPM          "▁word" -> " word" (or, in "##" vocabs, "##ing" ->
 *                        "ing" and "word" -> " word")
 *   USER_DEFINED         the text as is ("▁" -> space for SPM/WPM)
 *   CONTROL, UNKNOWN,    the text as is when `special` is asked for,
 *   UNUSED               else nothing */
#include "text/tokenizer.h"

#include "text/vocab_internal.h"

#include <stdlib.h>
#include <string.h>

/* Room a piece may need: WPM's "##" convention adds a space. */
#define PIECE_ROOM(v) ((v)->max_token_len + 1)

static size_t unescape_spaces(const char *s, size_t n, char *dst)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (n - i >= 3 && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
            dst[k++] = ' ';
            i += 3;
        } else {
            dst[k++] = s[i++];
        }
    }
    return k;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* GPT-2's byte map undone; a character outside the map is kept as UTF-8. */
static size_t unmap_bytes(const vocab *v, const char *s, size_t n, char *dst)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t cl = tok_utf8_decode(p + i, n - i, &cp);
        if (cl > 0 && cp < 324 && v->unmap[cp] >= 0) {
            dst[k++] = (char)v->unmap[cp];
            i += cl;
        } else {
            if (cl == 0) cl = 1;
            memcpy(dst + k, s + i, cl);
            k += cl;
            i += cl;
        }
    }
    return k;
}

/* Writes the piece of id (valid) into dst (PIECE_ROOM bytes); returns its
 * length. */
static size_t piece_into(const vocab *v, int32_t id, bool special, char *dst)
{
    const vocab_token *t = &v->tokens[id];
    const char *s = vocab_text_of(v, id);
    switch (t->type) {
    case VOCAB_TOKEN_CONTROL:
    case VOCAB_TOKEN_UNKNOWN:
    case VOCAB_TOKEN_UNUSED:
        if (!special) return 0;
        memcpy(dst, s, t->len);
        return t->len;
    case VOCAB_TOKEN_BYTE:
        if (t->len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && hex_digit(s[3]) >= 0 &&
            hex_digit(s[4]) >= 0) {
            dst[0] = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
            return 1;
        }
        memcpy(dst, s, t->len);
        return t->len;
    case VOCAB_TOKEN_USER_DEFINED:
        if (v->kind == VOCAB_KIND_BPE && !v->bpe_chars) {
            memcpy(dst, s, t->len);
            return t->len;
        }
        return unescape_spaces(s, t->len, dst);
    default: break;
    }
    switch (v->kind) {
    case VOCAB_KIND_BPE:
        if (v->bpe_chars) return unescape_spaces(s, t->len, dst);
        return unmap_bytes(v, s, t->len, dst);
    case VOCAB_KIND_WPM:
        if (!v->wpm_phantom) {
            if (t->len >= 2 && s[0] == '#' && s[1] == '#') {
                memcpy(dst, s + 2, t->len - 2);
                return t->len - 2;
            }
            dst[0] = ' ';
            memcpy(dst + 1, s, t->len);
            return t->len + 1;
        }
        return unescape_spaces(s, t->len, dst);
    case VOCAB_KIND_SPM: return unescape_spaces(s, t->len, dst);
    default:
        memcpy(dst, s, t->len);
        return t->len;
    }
}

static int check_id(const vocab *v, int32_t id, strata_err *err)
{
    if (id < 0 || id >= v->n_tokens) {
        return strata_err_set(err, STRATA_EINVAL, "token id %d is not in the vocab (0..%d)", (int)id,
                              (int)v->n_tokens - 1);
    }
    return 0;
}

int tok_token_to_piece(const vocab *v, int32_t id, bool special, char *buf, size_t cap, size_t *n_out,
                       strata_err *err)
{
    *n_out = 0;
    int rc = check_id(v, id, err);
    if (rc != 0) return rc;
    char *tmp = malloc(PIECE_ROOM(v));
    if (tmp == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    size_t n = piece_into(v, id, special, tmp);
    *n_out = n;
    if (cap > 0 && n > 0) memcpy(buf, tmp, n < cap ? n : cap);
    free(tmp);
    if (n > cap) return strata_err_set(err, STRATA_ERANGE, "piece of %zu bytes does not fit in %zu", n, cap);
    return 0;
}

/* --- the rules that depend on position ------------------------------------ */

static bool strips_space(const vocab *v, unsigned flags)
{
    if (!(flags & TOK_DETOK_STRIP_LEADING_SPACE)) return false;
    return (v->kind == VOCAB_KIND_SPM && v->add_space_prefix) || v->kind == VOCAB_KIND_WPM;
}

/* A token that carries text, as opposed to a control token: the first of
 * these is the one whose leading space the prefix rule put there. */
static bool is_text_token(const vocab *v, int32_t id)
{
    uint8_t t = v->tokens[id].type;
    return t != VOCAB_TOKEN_CONTROL && t != VOCAB_TOKEN_UNKNOWN && t != VOCAB_TOKEN_UNUSED;
}

static int32_t first_special(const vocab *v)
{
    if (!v->add_bos) return -1;
    return v->kind == VOCAB_KIND_WPM ? v->sp.cls : v->sp.bos;
}

static int32_t last_special(const vocab *v)
{
    if (!v->add_eos) return -1;
    return v->kind == VOCAB_KIND_WPM ? v->sp.sep : v->sp.eos;
}

int tok_detokenize(const vocab *v, const int32_t *ids, size_t n_ids, unsigned flags, char *buf, size_t cap,
                   size_t *n_out, strata_err *err)
{
    *n_out = 0;
    for (size_t i = 0; i < n_ids; i++) {
        int rc = check_id(v, ids[i], err);
        if (rc != 0) return rc;
    }
    if (flags & TOK_DETOK_REMOVE_SPECIAL) {
        if (n_ids > 0 && first_special(v) >= 0 && ids[0] == first_special(v)) {
            ids++;
            n_ids--;
        }
        if (n_ids > 0 && last_special(v) >= 0 && ids[n_ids - 1] == last_special(v)) n_ids--;
    }
    char *tmp = malloc(PIECE_ROOM(v));
    if (tmp == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    bool strip = strips_space(v, flags);
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        size_t n = piece_into(v, ids[i], (flags & TOK_DETOK_SPECIAL) != 0, tmp);
        const char *p = tmp;
        if (strip && is_text_token(v, ids[i])) {
            strip = false;
            if (n > 0 && p[0] == ' ') {
                p++;
                n--;
            }
        }
        if (total < cap) memcpy(buf + total, p, cap - total < n ? cap - total : n);
        total += n;
    }
    free(tmp);
    *n_out = total;
    if (total > cap) {
        return strata_err_set(err, STRATA_ERANGE, "text of %zu bytes does not fit in %zu", total, cap);
    }
    return 0;
}

int tok_detokenize_alloc(const vocab *v, const int32_t *ids, size_t n_ids, unsigned flags, char **out,
                         size_t *n_out, strata_err *err)
{
    *out = NULL;
    size_t n = 0;
    int rc = tok_detokenize(v, ids, n_ids, flags, NULL, 0, &n, err);
    if (rc != 0 && rc != STRATA_ERANGE) return rc;
    char *buf = malloc(n + 1);
    if (buf == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    rc = tok_detokenize(v, ids, n_ids, flags, buf, n, n_out, err);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

/* --- streaming ------------------------------------------------------------ */

/* Whether b[0..n) (n >= 1) is the start of a valid UTF-8 character that
 * needs more bytes: a lead byte followed only by continuation bytes that
 * the lead allows (no overlong forms, surrogates or values past U+10FFFF). */
static bool is_incomplete_char(const uint8_t *b, size_t n)
{
    uint8_t c = b[0];
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3;
    else if (c >= 0xF0 && c <= 0xF4) need = 4;
    else return false;
    if (n >= need) return false;
    for (size_t i = 1; i < n; i++) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (i == 1) {
            if (c == 0xE0) lo = 0xA0;
            else if (c == 0xED) hi = 0x9F;
            else if (c == 0xF0) lo = 0x90;
            else if (c == 0xF4) hi = 0x8F;
        }
        if (b[i] < lo || b[i] > hi) return false;
    }
    return true;
}

void tok_stream_init(tok_stream *s, const vocab *v, unsigned flags)
{
    memset(s, 0, sizeof(*s));
    s->v = v;
    s->flags = flags;
    s->held_eos = -1;
}

void tok_stream_keep(tok_stream *s, const int32_t *ids, size_t n)
{
    s->keep = ids;
    s->n_keep = ids != NULL ? n : 0;
}

static bool kept(const tok_stream *s, int32_t id)
{
    for (size_t i = 0; i < s->n_keep; i++) {
        if (s->keep[i] == id) return true;
    }
    return false;
}

void tok_stream_free(tok_stream *s)
{
    free(s->buf);
    s->buf = NULL;
    s->buf_cap = 0;
}

static int stream_reserve(tok_stream *s, size_t n)
{
    if (n <= s->buf_cap) return 0;
    size_t cap = s->buf_cap ? s->buf_cap : 256;
    while (cap < n) cap *= 2;
    char *b = realloc(s->buf, cap);
    if (b == NULL) return -1;
    s->buf = b;
    s->buf_cap = cap;
    return 0;
}

/* Appends token id's piece to s->buf[*n..], moving any unfinished
 * character at the end into s->pending. */
static int stream_emit(tok_stream *s, int32_t id, size_t *n)
{
    const vocab *v = s->v;
    size_t room = *n + s->n_pending + PIECE_ROOM(v);
    if (stream_reserve(s, room) != 0) return -1;
    char *out = s->buf + *n;
    memcpy(out, s->pending, s->n_pending);
    size_t k = s->n_pending;
    size_t piece = piece_into(v, id, (s->flags & TOK_DETOK_SPECIAL) != 0 || kept(s, id), out + k);
    if (strips_space(v, s->flags) && !s->seen_text && is_text_token(v, id)) {
        s->seen_text = true;
        if (piece > 0 && out[k] == ' ') {
            memmove(out + k, out + k + 1, piece - 1);
            piece--;
        }
    }
    k += piece;
    s->n_pending = 0;
    /* An unfinished character can only be in the last 3 bytes. */
    for (size_t back = 1; back <= 3 && back <= k; back++) {
        const uint8_t *b = (const uint8_t *)out + k - back;
        if (is_incomplete_char(b, back)) {
            memcpy(s->pending, b, back);
            s->n_pending = back;
            k -= back;
            break;
        }
    }
    *n += k;
    return 0;
}

int tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *n_text, strata_err *err)
{
    *text = "";
    *n_text = 0;
    int rc = check_id(s->v, id, err);
    if (rc != 0) return rc;
    size_t n = 0;
    if (s->flags & TOK_DETOK_REMOVE_SPECIAL) {
        bool first = !s->seen_first;
        s->seen_first = true;
        if (first && first_special(s->v) >= 0 && id == first_special(s->v)) return 0;
        /* A held EOS was not the last token after all. */
        if (s->held_eos >= 0) {
            int32_t eos = s->held_eos;
            s->held_eos = -1;
            if (stream_emit(s, eos, &n) != 0) goto oom;
        }
        if (last_special(s->v) >= 0 && id == last_special(s->v)) {
            s->held_eos = id;
            goto out;
        }
    }
    if (stream_emit(s, id, &n) != 0) goto oom;
out:
    *text = n > 0 ? s->buf : "";
    *n_text = n;
    return 0;
oom:
    return strata_err_set(err, STRATA_ENOMEM, "out of memory");
}

int tok_stream_finish(tok_stream *s, const char **text, size_t *n_text, size_t *n_incomplete,
                      strata_err *err)
{
    *text = "";
    *n_text = 0;
    *n_incomplete = s->n_pending;
    if (s->n_pending > 0) {
        if (stream_reserve(s, s->n_pending) != 0) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
        memcpy(s->buf, s->pending, s->n_pending);
        *text = s->buf;
        *n_text = s->n_pending;
    }
    /* Ready for a new sequence; the buffer is kept. */
    s->n_pending = 0;
    s->seen_text = false;
    s->seen_first = false;
    s->held_eos = -1;
    return 0;
}
