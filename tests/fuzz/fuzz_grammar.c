/* libFuzzer target for the GBNF parser and recognizer (src/sample/grammar.c,
 * grammar_state.c): the input up to its first NUL byte is a grammar, the
 * rest an output fed to it in pieces whose sizes come from the input. A
 * refused grammar must carry STRATA_EFORMAT (or ENOMEM) and a message; an
 * accepted one must agree with itself: can_accept says what accept_bytes
 * then does, and the mask over a small vocabulary holds exactly the tokens
 * can_accept accepts. A crash, a sanitizer report, a hang or a trap is a
 * finding. */
#include "sample/grammar.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(int ok)
{
    if (!ok) __builtin_trap();
}

static const char *words[] = {"{", "}", "\"", "a", "ab", "0", "12", " ", "\\", "\xc3", "\xa9",
                              "\xc3\xa9", "\xe2\x82\xac", "[", "]", ",", ":", "true", "x", "-"};
#define N_WORDS (int32_t)(sizeof(words) / sizeof(words[0]))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *out = nul ? nul + 1 : data + size;
    size_t out_len = (size_t)(data + size - out);

    grammar *g = NULL;
    strata_err err;
    int rc = grammar_parse(&g, (const char *)data, glen, &err);
    if (rc != 0) {
        check(g == NULL && (rc == STRATA_EFORMAT || rc == STRATA_ENOMEM) && err.msg[0] != '\0');
        return 0;
    }
    grammar_state *s = NULL;
    if (grammar_state_new(&s, g, &err) != 0) {
        grammar_free(g);
        return 0;
    }
    const uint8_t *toks[N_WORDS];
    size_t lens[N_WORDS];
    for (int32_t i = 0; i < N_WORDS; i++) toks[i] = (const uint8_t *)words[i], lens[i] = strlen(words[i]);
    grammar_vocab *v = NULL;
    check(grammar_vocab_new(&v, N_WORDS, toks, lens, &err) == 0);
    uint32_t mask[1];
    size_t pos = 0;
    for (int round = 0; round < 64 && pos <= out_len; round++) {
        int64_t count = grammar_state_mask(s, v, mask);
        int64_t want = 0;
        for (int32_t t = 0; t < N_WORDS; t++) {
            bool ok = grammar_state_can_accept(s, toks[t], lens[t]);
            check(ok == (((mask[0] >> t) & 1u) != 0));
            want += ok;
        }
        check(count == want);
        if (pos == out_len) break;
        size_t piece = 1 + out[pos] % 4;
        if (piece > out_len - pos) piece = out_len - pos;
        bool can = grammar_state_can_accept(s, out + pos, piece);
        bool did = grammar_state_accept_bytes(s, out + pos, piece);
        check(can == did);
        if (!did) break;
        pos += piece;
        (void)grammar_state_can_end(s);
    }
    grammar_vocab_free(v);
    grammar_state_free(s);
    grammar_free(g);
    return 0;
}
