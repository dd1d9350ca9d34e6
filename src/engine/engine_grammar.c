/* Token bytes for grammar masks (see engine_grammar.h). */
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
