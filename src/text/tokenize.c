/* tok_tokenize: the part every algorithm shares (see tokenizer.h) — cutting
 * special-token text out of the input, SentencePiece's space prefix and
 * escaping, BOS/EOS, and handing the ids to the caller's buffer.
 *
 * Special tokens are cut exactly as by trying them one at a time, longest
 * first (then lowest id), each taking its occurrences left to right from
 * the text not already taken. One pass over the text with the vocab's trie
 * finds which special texts occur at all (usually none or a few, out of up
 * to thousands), and only those are then cut, in that order, with memmem
 * over the fragments still plain. Memory stays proportional to the number
 * of fragments, never to the number of overlapping occurrences (a run of
 * spaces holds ~23 of MPT's whitespace tokens at every byte).
 *
 * A token with a strip attribute (vocab_internal.h: Phi-3's specials, some
 * <mask> tokens) also takes the whitespace right after (or before) each of
 * its occurrences out of the neighbouring plain text. */
#define _GNU_SOURCE /* memmem */
#include "text/tokenizer.h"

#include "text/vocab_internal.h"

#include <stdlib.h>
#include <string.h>

/* A stretch of the input: plain text (id -1) or one special token. */
typedef struct fragment {
    size_t pos, len;
    int32_t id;
} fragment;

typedef struct frag_vec {
    fragment *f;
    size_t n, cap;
} frag_vec;

static int frag_push(frag_vec *v, size_t pos, size_t len, int32_t id)
{
    if (len == 0) return 0;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        fragment *f = realloc(v->f, cap * sizeof(*f));
        if (f == NULL) return -1;
        v->f = f;
        v->cap = cap;
    }
    v->f[v->n++] = (fragment){pos, len, id};
    return 0;
}

static bool matchable(const vocab *v, int32_t id, bool parse_special)
{
    return parse_special || v->tokens[id].type == VOCAB_TOKEN_USER_DEFINED;
}

typedef struct rank_id {
    int32_t rank, id;
} rank_id;

static int cmp_rank(const void *pa, const void *pb)
{
    const rank_id *a = pa, *b = pb;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

/* The special tokens whose text occurs in text, in cutting order. */
static int occurring_specials(const vocab *v, const uint8_t *text, size_t len, bool parse_special,
                              rank_id **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    uint8_t *seen = NULL;
    rank_id *list = NULL;
    size_t n = 0, cap = 0;
    for (size_t pos = 0; pos < len; pos++) {
        int32_t node = v->trie_root[text[pos]];
        for (size_t i = pos; node >= 0;) {
            const tok_trie_node *t = &v->trie[node];
            if (t->token >= 0 && matchable(v, t->token, parse_special)) {
                if (seen == NULL && (seen = calloc(((size_t)v->n_tokens + 7) / 8, 1)) == NULL) goto oom;
                if (!(seen[t->token / 8] & (1u << (t->token % 8)))) {
                    seen[t->token / 8] |= (uint8_t)(1u << (t->token % 8));
                    if (n == cap) {
                        cap = cap ? 2 * cap : 16;
                        rank_id *l = realloc(list, cap * sizeof(*l));
                        if (l == NULL) goto oom;
                        list = l;
                    }
                    list[n++] = (rank_id){v->special_rank[t->token], t->token};
                }
            }
            if (++i >= len) break;
            for (node = t->first_child; node >= 0 && v->trie[node].byte != text[i];) {
                node = v->trie[node].next_sibling;
            }
        }
    }
    free(seen);
    if (n > 1) qsort(list, n, sizeof(*list), cmp_rank);
    *out = list;
    *n_out = n;
    return 0;
oom:
    free(seen);
    free(list);
    return -1;
}

/* C's isspace in the "C" locale, which is what llama.cpp strips. */
static bool is_c_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Cuts text into plain and special fragments (*frags, in text order). */
static int cut_specials(const vocab *v, const char *text, size_t len, bool parse_special, frag_vec *frags,
                        strata_err *err)
{
    rank_id *order;
    size_t n_order;
    frags->n = 0;
    if (frag_push(frags, 0, len, -1) != 0) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    if (v->trie == NULL) return 0;
    if (occurring_specials(v, (const uint8_t *)text, len, parse_special, &order, &n_order) != 0) {
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    frag_vec next = {0};
    int rc = 0;
    for (size_t k = 0; k < n_order; k++) {
        int32_t id = order[k].id;
        const char *needle = vocab_text_of(v, id);
        size_t n_needle = v->tokens[id].len;
        next.n = 0;
        for (size_t i = 0; i < frags->n; i++) {
            fragment f = frags->f[i];
            if (f.id >= 0) {
                if (frag_push(&next, f.pos, f.len, f.id) != 0) goto oom;
                continue;
            }
            size_t pos = f.pos, end = f.pos + f.len;
            uint8_t strip = v->tokens[id].strip;
            for (;;) {
                const char *hit = memmem(text + pos, end - pos, needle, n_needle);
                if (hit == NULL) break;
                size_t at = (size_t)(hit - text), left_end = at;
                /* The whitespace a token swallows is that of the plain text
                 * it was cut from, on its side, as far as that text goes. */
                if (strip & TOK_STRIP_LEFT) {
                    while (left_end > pos && is_c_space(text[left_end - 1])) left_end--;
                }
                if (frag_push(&next, pos, left_end - pos, -1) != 0 || frag_push(&next, at, n_needle, id) != 0) goto oom;
                pos = at + n_needle;
                if (strip & TOK_STRIP_RIGHT) {
                    while (pos < end && is_c_space(text[pos])) pos++;
                }
            }
            if (frag_push(&next, pos, end - pos, -1) != 0) goto oom;
        }
        frag_vec t = *frags;
        *frags = next;
        next = t;
    }
    goto done;
oom:
    rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
done:
    free(next.f);
    free(order);
    return rc;
}

/* SentencePiece sees spaces as "▁" and, with the prefix rule, one more in
 * front of the stretch. */
static int spm_stretch(const vocab *v, const char *text, size_t len, bool prefix, tok_ivec *out,
                       strata_err *err)
{
    size_t n_spaces = 0;
    for (size_t i = 0; i < len; i++) n_spaces += text[i] == ' ';
    size_t n = len + 2 * n_spaces + (prefix ? 3 : 0); /* each ' ' (1 byte) becomes 3 */
    char *esc = malloc(n ? n : 1);
    if (esc == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    size_t k = 0;
    if (prefix) {
        memcpy(esc, "\xe2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            esc[k++] = text[i];
        }
    }
    int rc = tok_spm_encode(v, esc, k, out, err);
    free(esc);
    return rc;
}

static int encode_stretch(const vocab *v, const char *text, size_t len, bool after_special,
                          tok_ivec *out, strata_err *err)
{
    switch (v->kind) {
    case VOCAB_KIND_SPM: return spm_stretch(v, text, len, after_special && v->add_space_prefix, out, err);
    case VOCAB_KIND_BPE: return tok_bpe_encode(v, text, len, out, err);
    case VOCAB_KIND_WPM: return tok_wpm_encode(v, text, len, out, err);
    default: return strata_err_set(err, STRATA_EUNSUPPORTED, "this vocab has no tokenizer");
    }
}

static int tokenize_vec(const vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                        tok_ivec *out, strata_err *err)
{
    if (v->kind == VOCAB_KIND_NONE || v->n_tokens == 0) {
        return strata_err_set(err, STRATA_EUNSUPPORTED, "the model has no tokenizer (tokenizer.ggml.model none)");
    }
    if (len > TOK_MAX_INPUT_BYTES) {
        return strata_err_set(err, STRATA_ERANGE, "input of %zu bytes is over the limit of %zu", len,
                              TOK_MAX_INPUT_BYTES);
    }
    if (text == NULL && len > 0) return strata_err_set(err, STRATA_EINVAL, "no text");
    frag_vec frags = {0};
    int rc = 0;
    if (add_special && v->add_bos) {
        int32_t first = v->kind == VOCAB_KIND_WPM ? v->sp.cls : v->sp.bos;
        if (tok_ivec_push(out, first) != 0) goto oom;
    }
    if (len > 0 && (rc = cut_specials(v, text, len, parse_special, &frags, err)) != 0) goto done;
    /* The prefix rule treats the start of the text like a special token. */
    bool after_special = true;
    for (size_t k = 0; k < frags.n; k++) {
        const fragment *f = &frags.f[k];
        if (f->id >= 0) {
            if (tok_ivec_push(out, f->id) != 0) goto oom;
            after_special = true;
            continue;
        }
        rc = encode_stretch(v, text + f->pos, f->len, after_special, out, err);
        if (rc != 0) goto done;
        after_special = false;
    }
    if (add_special && v->add_eos) {
        int32_t last = v->kind == VOCAB_KIND_WPM ? v->sp.sep : v->sp.eos;
        if (tok_ivec_push(out, last) != 0) goto oom;
    }
    goto done;
oom:
    rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
done:
    free(frags.f);
    return rc;
}

int tok_tokenize(const vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                 int32_t *out, size_t cap, size_t *n_out, strata_err *err)
{
    tok_ivec ids = {0};
    *n_out = 0;
    int rc = tokenize_vec(v, text, len, add_special, parse_special, &ids, err);
    if (rc == 0) {
        *n_out = ids.n;
        size_t n_copy = ids.n < cap ? ids.n : cap;
        if (n_copy > 0) memcpy(out, ids.ids, n_copy * sizeof(*out));
        if (ids.n > cap) {
            rc = strata_err_set(err, STRATA_ERANGE, "%zu token ids do not fit in room for %zu", ids.n, cap);
        }
    }
    tok_ivec_free(&ids);
    return rc;
}

int tok_tokenize_alloc(const vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                       int32_t **out, size_t *n_out, strata_err *err)
{
    tok_ivec ids = {0};
    *out = NULL;
    *n_out = 0;
    int rc = tokenize_vec(v, text, len, add_special, parse_special, &ids, err);
    if (rc == 0 && ids.ids == NULL) {
        ids.ids = malloc(sizeof(*ids.ids));
        if (ids.ids == NULL) rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    if (rc != 0) {
        tok_ivec_free(&ids);
        return rc;
    }
    *out = ids.ids;
    *n_out = ids.n;
    return 0;
}
