/* Token bytes for grammar masks (see engine_grammar.h). */
#define _GNU_SOURCE /* memmem */
#include "engine/engine_grammar.h"

#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

int engine_grammar_tables(grammar_vocab **gv_out, engine_tok_bytes *tb_out, const vocab *v,
                          strata_err *err)
{
    *gv_out = NULL;
    memset(tb_out, 0, sizeof(*tb_out));
    int32_t n = vocab_n_tokens(v);
    size_t cap = 1u << 16, used = 0;
    uint8_t *all = malloc(cap);
    size_t *off = calloc((size_t)n + 1, sizeof(*off));
    const uint8_t **ptrs = calloc((size_t)n + 1, sizeof(*ptrs));
    size_t *lens = calloc((size_t)n + 1, sizeof(*lens));
    char *buf = malloc(TOK_MAX_PIECE_BYTES);
    int rc = 0;
    if (!all || !off || !ptrs || !lens || !buf) rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
    for (int32_t t = 0; t < n && rc == 0; t++) {
        off[t] = used;
        if (vocab_is_control(v, t) || vocab_is_eog(v, t) ||
            vocab_token_type(v, t) == VOCAB_TOKEN_UNUSED) {
            continue;
        }
        size_t len = 0;
        rc = tok_token_to_piece(v, t, false, buf, TOK_MAX_PIECE_BYTES, &len, err);
        if (rc != 0 || len == 0) continue;
        if (used + len > cap) {
            while (used + len > cap) cap *= 2;
            uint8_t *grown = realloc(all, cap);
            if (grown == NULL) {
                rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
                break;
            }
            all = grown;
        }
        memcpy(all + used, buf, len);
        used += len;
    }
    if (rc == 0) {
        off[n] = used;
        for (int32_t t = 0; t < n; t++) {
            ptrs[t] = all + off[t];
            lens[t] = off[t + 1] - off[t];
        }
        rc = grammar_vocab_new(gv_out, n, ptrs, lens, err);
    }
    free(ptrs), free(lens), free(buf);
    if (rc != 0) {
        free(all), free(off);
        return rc;
    }
    tb_out->bytes = all;
    tb_out->off = off;
    tb_out->n = n;
    return 0;
}

void engine_tok_bytes_free(engine_tok_bytes *tb)
{
    free(tb->bytes);
    free(tb->off);
    memset(tb, 0, sizeof(*tb));
}

int engine_grammar_vocab(grammar_vocab **out, const vocab *v, strata_err *err)
{
    engine_tok_bytes tb;
    int rc = engine_grammar_tables(out, &tb, v, err);
    if (rc == 0) engine_tok_bytes_free(&tb);
    return rc;
}

#define DRY_MAX_BREAKER_BYTES 40

static int add_breaker(sample_dry_breaker **v, size_t *n, size_t *cap, const sample_dry_breaker *b)
{
    for (size_t i = *n; i-- > 0 && (*v)[i].head == b->head;) { /* no duplicate for one head */
        if ((*v)[i].n_tail == b->n_tail && memcmp((*v)[i].tail, b->tail, (size_t)b->n_tail * sizeof(int32_t)) == 0) {
            return 0;
        }
    }
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        sample_dry_breaker *nv = realloc(*v, c * sizeof(*nv));
        if (nv == NULL) return -1;
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = *b;
    return 0;
}

int engine_dry_breakers(const vocab *v, const char *const *strs, size_t n, sample_dry_breaker **out,
                        size_t *n_out, strata_err *err)
{
    *out = NULL;
    *n_out = 0;
    size_t cap = 0, nb = 0;
    sample_dry_breaker *res = NULL;
    char *word = malloc(TOK_MAX_PIECE_BYTES);
    if (word == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    int rc = 0;
    bool strip = vocab_adds_space_prefix(v);
    /* token by token, so that one head's sequences stay together */
    for (int32_t t = 0; t < vocab_n_tokens(v) && rc == 0; t++) {
        size_t wl = 0;
        if (tok_token_to_piece(v, t, true, word, TOK_MAX_PIECE_BYTES, &wl, NULL) != 0) continue;
        /* a token detokenized alone loses the space its vocabulary prefixes */
        char *w = word;
        if (strip && wl > 0 && w[0] == ' ') {
            w++;
            wl--;
        }
        for (size_t k = 0; k < n && rc == 0; k++) {
            size_t sl = strlen(strs[k]);
            if (sl > DRY_MAX_BREAKER_BYTES) sl = DRY_MAX_BREAKER_BYTES;
            if (sl == 0) continue;
            sample_dry_breaker b = {.head = t};
            if (wl >= sl && memmem(w, wl, strs[k], sl) != NULL) {
                if (add_breaker(&res, &nb, &cap, &b) != 0) rc = -1;
                continue;
            }
            /* the word's end is the string's start: the rest follows it */
            for (size_t pos = 0; pos < wl && rc == 0; pos++) {
                if (w[pos] != strs[k][0]) continue;
                size_t i = 1;
                while (i < sl && pos + i < wl && w[pos + i] == strs[k][i]) i++;
                if (pos + i < wl && i < sl) continue; /* a mismatch inside the word */
                int32_t *ids = NULL;
                size_t n_ids = 0;
                if (tok_tokenize_alloc(v, strs[k] + i, sl - i, false, false, &ids, &n_ids, NULL) != 0) {
                    continue;
                }
                b.n_tail = (int32_t)(n_ids < SAMPLE_DRY_MAX_TAIL ? n_ids : SAMPLE_DRY_MAX_TAIL);
                memcpy(b.tail, ids, (size_t)b.n_tail * sizeof(int32_t));
                free(ids);
                if (add_breaker(&res, &nb, &cap, &b) != 0) rc = -1;
            }
        }
    }
    free(word);
    if (rc != 0) {
        free(res);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    *out = res;
    *n_out = nb;
    return 0;
}
