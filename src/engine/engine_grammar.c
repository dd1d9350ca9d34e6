/* Token bytes for grammar masks (see engine_grammar.h). */
#include "engine/engine_grammar.h"

#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

int engine_grammar_vocab(grammar_vocab **out, const vocab *v, strata_err *err)
{
    *out = NULL;
    int32_t n = vocab_n_tokens(v);
    const uint8_t **bytes = calloc((size_t)n + 1, sizeof(*bytes));
    size_t *lens = calloc((size_t)n + 1, sizeof(*lens));
    char *buf = malloc(TOK_MAX_PIECE_BYTES);
    int rc = 0;
    if (!bytes || !lens || !buf) rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
    for (int32_t t = 0; t < n && rc == 0; t++) {
        if (vocab_is_control(v, t) || vocab_is_eog(v, t) ||
            vocab_token_type(v, t) == VOCAB_TOKEN_UNUSED) {
            continue;
        }
        size_t len = 0;
        rc = tok_token_to_piece(v, t, false, buf, TOK_MAX_PIECE_BYTES, &len, err);
        if (rc == 0 && len > 0) {
            uint8_t *copy = malloc(len);
            if (copy == NULL) {
                rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
                break;
            }
            memcpy(copy, buf, len);
            bytes[t] = copy;
            lens[t] = len;
        }
    }
    if (rc == 0) rc = grammar_vocab_new(out, n, bytes, lens, err);
    for (int32_t t = 0; bytes && t < n; t++) free((void *)bytes[t]);
    free(bytes), free(lens), free(buf);
    return rc;
}
