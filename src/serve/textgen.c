/* Generated ids to client text (textgen.h). No threads, no locks. */
#define _GNU_SOURCE /* memmem */
#include "serve/textgen.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sbuf_append(sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (d == NULL) return STRATA_ENOMEM;
        b->data = d;
        b->cap = cap;
    }
    if (n > 0) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int sbuf_printf(sbuf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) return STRATA_EINVAL;
    if ((size_t)n < sizeof(small)) return sbuf_append(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (big == NULL) return STRATA_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = sbuf_append(b, big, (size_t)n);
    free(big);
    return rc;
}

void sbuf_free(sbuf *b)
{
    free(b->data);
    *b = (sbuf){0};
}

static bool is_continuation(char c)
{
    return ((unsigned char)c & 0xC0) == 0x80;
}

/* The index, in characters, of the one that holds byte `at` of gen (at >=
 * chars_at; at == gen.len: the next one): a token that starts inside a
 * character is placed at that character. */
static size_t char_index(textgen *tg, size_t at)
{
    for (size_t i = tg->chars_at; i < at; i++) tg->n_chars += !is_continuation(tg->gen.data[i]);
    tg->chars_at = at;
    bool inside = at < tg->gen.len && is_continuation(tg->gen.data[at]) && tg->n_chars > 0;
    return tg->n_chars - inside;
}

static int record_tok(textgen *tg, size_t start, size_t end, bool eog)
{
    if (tg->n_toks == tg->cap_toks) {
        size_t cap = tg->cap_toks ? tg->cap_toks * 2 : 64;
        textgen_tok *t = realloc(tg->toks, cap * sizeof(*t));
        if (t == NULL) return STRATA_ENOMEM;
        tg->toks = t;
        tg->cap_toks = cap;
    }
    tg->toks[tg->n_toks++] = (textgen_tok){.start = start, .end = end,
                                           .char_start = char_index(tg, start), .eog = eog};
    return 0;
}

/* gen = everything the stream handed out, then its pending bytes. */
static int gen_update(textgen *tg, size_t committed, const char *text, size_t n_text,
                      const uint8_t *pending, size_t n_pending)
{
    tg->gen.len = committed;
    if (sbuf_append(&tg->gen, text, n_text) != 0) return STRATA_ENOMEM;
    if (sbuf_append(&tg->gen, (const char *)pending, n_pending) != 0) return STRATA_ENOMEM;
    return 0;
}

static void update_visible(textgen *tg)
{
    while (tg->n_visible < tg->n_toks) {
        const textgen_tok *t = &tg->toks[tg->n_visible];
        if (t->eog) break;
        if (!(t->start < tg->released || (tg->finished && !tg->hit_stop))) break;
        tg->n_visible++;
    }
}

const char *textgen_token_bytes(const textgen *tg, size_t i, size_t *n)
{
    const textgen_tok *t = &tg->toks[i];
    *n = t->end - t->start;
    return tg->gen.data ? tg->gen.data + t->start : "";
}

int textgen_init(textgen *tg, const vocab *v, const int32_t *prompt, size_t n_prompt,
                 const char *const *stops, size_t n_stops, strata_err *err)
{
    memset(tg, 0, sizeof(*tg));
    tg->stop_hit = -1;
    tg->v = v;
    for (size_t i = 0; i < n_stops && tg->n_stops < TEXTGEN_MAX_STOPS; i++) {
        if (stops[i] != NULL && stops[i][0] != '\0') tg->stops[tg->n_stops++] = stops[i];
    }
    tok_stream_init(&tg->st, v, TOK_DETOK_REMOVE_SPECIAL | TOK_DETOK_STRIP_LEADING_SPACE);
    for (size_t i = 0; i < n_prompt; i++) {
        const char *text;
        size_t n_text;
        int rc = tok_stream_push(&tg->st, prompt[i], &text, &n_text, err);
        if (rc != 0) return rc;
    }
    /* A prompt that ends inside a character: its first bytes come out with
     * the generated text, ahead of the first token's own. */
    if (gen_update(tg, 0, "", 0, tg->st.pending, tg->st.n_pending) != 0) {
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    return 0;
}

/* Moves what can no longer be part of a stop string from held to out; on a
 * full match releases the text before it and ends. */
static int release(textgen *tg, sbuf *out, bool final)
{
    const char *h = tg->held.data ? tg->held.data : "";
    size_t n = tg->held.len;
    size_t cut = n;  /* earliest full match */
    int which = -1;
    bool may_stop = tg->n_consumed >= tg->min_tokens;
    for (size_t i = 0; i < tg->n_stops && may_stop; i++) {
        const char *m = n ? memmem(h, n, tg->stops[i], strlen(tg->stops[i])) : NULL;
        if (m != NULL && (size_t)(m - h) < cut) {
            cut = (size_t)(m - h);
            which = (int)i;
        }
    }
    if (cut < n) {
        if (tg->include_stop) { /* the matched stop string too (the earliest-ending one at cut) */
            size_t longest = 0;
            for (size_t i = 0; i < tg->n_stops; i++) {
                size_t sl = strlen(tg->stops[i]);
                if (cut + sl <= n && memcmp(h + cut, tg->stops[i], sl) == 0 && (longest == 0 || sl < longest)) {
                    longest = sl;
                }
            }
            cut += longest;
        }
        tg->ended = tg->hit_stop = true;
        tg->stop_hit = which;
        int rc = sbuf_append(out, h, cut);
        tg->released += cut;
        tg->held.len = 0;
        return rc;
    }
    size_t keep = 0; /* longest suffix of held that is a proper prefix of a stop */
    if (!final) {
        for (size_t i = 0; i < tg->n_stops; i++) {
            size_t sl = strlen(tg->stops[i]);
            for (size_t k = (sl - 1 < n ? sl - 1 : n); k > keep; k--) {
                if (memcmp(h + n - k, tg->stops[i], k) == 0) {
                    keep = k;
                    break;
                }
            }
        }
    }
    int rc = sbuf_append(out, h, n - keep);
    tg->released += n - keep;
    if (keep > 0) memmove(tg->held.data, h + n - keep, keep);
    tg->held.len = keep;
    return rc;
}

void textgen_keep(textgen *tg, const int32_t *ids, size_t n)
{
    tok_stream_keep(&tg->st, ids, n);
}

void textgen_render_special(textgen *tg)
{
    tg->st.flags |= TOK_DETOK_SPECIAL;
}

void textgen_stop_on(textgen *tg, const int32_t *ids, size_t n, bool include_stop, size_t min_tokens)
{
    tg->stop_ids = ids;
    tg->n_stop_ids = n;
    tg->include_stop = include_stop;
    tg->min_tokens = min_tokens;
}

int textgen_push(textgen *tg, int32_t id, sbuf *out, strata_err *err)
{
    if (tg->ended) return 0;
    tg->n_consumed++;
    size_t committed = tg->gen.len - tg->st.n_pending; /* bytes the stream handed out */
    size_t start = tg->gen.len;
    if (vocab_is_eog(tg->v, id)) {
        tg->ended = true;
        return record_tok(tg, start, start, true);
    }
    const char *text;
    size_t n_text;
    int rc = tok_stream_push(&tg->st, id, &text, &n_text, err);
    if (rc != 0) return rc;
    if (sbuf_append(&tg->held, text, n_text) != 0 ||
        gen_update(tg, committed, text, n_text, tg->st.pending, tg->st.n_pending) != 0 ||
        record_tok(tg, start, tg->gen.len, false) != 0) {
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    rc = release(tg, out, false);
    bool stop_id = false;
    for (size_t i = 0; i < tg->n_stop_ids && !tg->ended && tg->n_consumed >= tg->min_tokens; i++) {
        stop_id = stop_id || tg->stop_ids[i] == id;
    }
    if (rc == 0 && stop_id) {
        /* the text so far, this token's included (a character it left
         * incomplete as U+FFFD), then the end */
        const char *text2;
        size_t n2, n_incomplete;
        committed = tg->gen.len - tg->st.n_pending;
        rc = tok_stream_finish(&tg->st, &text2, &n2, &n_incomplete, err);
        if (rc != 0) return rc;
        if (gen_update(tg, committed, text2, n2, NULL, 0) != 0 ||
            sbuf_append(&tg->held, text2, n2 - n_incomplete) != 0 ||
            (n_incomplete > 0 && sbuf_append(&tg->held, "\xef\xbf\xbd", 3) != 0)) {
            return strata_err_set(err, STRATA_ENOMEM, "out of memory");
        }
        rc = release(tg, out, true);
        if (!tg->hit_stop) { /* no stop string matched in it: all released */
            tg->ended = tg->hit_stop = true;
        }
    }
    update_visible(tg);
    return rc;
}

int textgen_finish(textgen *tg, sbuf *out, strata_err *err)
{
    if (!tg->hit_stop) {
        const char *text;
        size_t n_text, n_incomplete;
        size_t committed = tg->gen.len - tg->st.n_pending;
        int rc = tok_stream_finish(&tg->st, &text, &n_text, &n_incomplete, err);
        if (rc != 0) return rc;
        if (gen_update(tg, committed, text, n_text, NULL, 0) != 0) return STRATA_ENOMEM;
        if (sbuf_append(&tg->held, text, n_text - n_incomplete) != 0) return STRATA_ENOMEM;
        if (n_incomplete > 0 && sbuf_append(&tg->held, "\xef\xbf\xbd", 3) != 0) {
            return STRATA_ENOMEM;
        }
    }
    int rc = release(tg, out, true);
    tg->ended = true;
    tg->finished = true;
    update_visible(tg);
    return rc;
}

void textgen_free(textgen *tg)
{
    tok_stream_free(&tg->st);
    sbuf_free(&tg->held);
    sbuf_free(&tg->gen);
    free(tg->toks);
    tg->toks = NULL;
}
