/* Grammar masks on real vocabularies (llama-bpe, 128k tokens; qwen2,
 * 151k) against brute force: at every state of random walks through a JSON
 * grammar, the mask must hold exactly the tokens whose bytes the
 * recognizer accepts one by one; control and end-of-generation tokens are
 * never in it. The walks pick allowed tokens at random, so they pass
 * through strings, escapes, numbers, nesting and split UTF-8 characters.
 * Also DRY's restart sequences made from breaker strings on the same kind
 * of vocabularies (engine_dry_breakers). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "engine/engine_grammar.h"
#include "json_gbnf.h"
#include "testdata.h"
#include "text/tokenizer.h"

static void check_vocab(const char *rel)
{
    char path[4096];
    TESTDATA_FILE(path, rel);
    vocab *v = NULL;
    strata_err err;
    if (vocab_open(&v, path, &err) != 0) fail_msg("%s", err.msg);
    grammar_vocab *gv = NULL;
    if (engine_grammar_vocab(&gv, v, &err) != 0) fail_msg("%s", err.msg);
    int32_t n = vocab_n_tokens(v);
    uint8_t **bytes = calloc((size_t)n, sizeof(*bytes));
    size_t *lens = calloc((size_t)n, sizeof(*lens));
    char *buf = malloc(TOK_MAX_PIECE_BYTES);
    for (int32_t t = 0; t < n; t++) {
        size_t len = 0;
        assert_int_equal(tok_token_to_piece(v, t, false, buf, TOK_MAX_PIECE_BYTES, &len, &err), 0);
        bytes[t] = malloc(len + 1);
        memcpy(bytes[t], buf, len);
        lens[t] = len;
    }
    grammar *g = NULL;
    if (grammar_parse(&g, json_gbnf, strlen(json_gbnf), &err) != 0) fail_msg("%s", err.msg);
    size_t words = grammar_mask_words(gv);
    uint32_t *mask = malloc(words * sizeof(uint32_t));
    strata_rng rng;
    strata_rng_seed(&rng, 1234);
    int states = 0;
    for (int walk = 0; walk < 6; walk++) {
        grammar_state *s = NULL;
        assert_int_equal(grammar_state_new(&s, g, &err), 0);
        for (int step = 0; step < 12; step++) {
            int64_t count = grammar_state_mask(s, gv, mask);
            int64_t want = 0;
            for (int32_t t = 0; t < n; t++) {
                bool bit = (mask[t / 32] >> (t % 32)) & 1u;
                bool special = vocab_is_control(v, t) || vocab_is_eog(v, t) ||
                               vocab_token_type(v, t) == VOCAB_TOKEN_UNUSED;
                bool ok = !special && lens[t] > 0 && grammar_state_can_accept(s, bytes[t], lens[t]);
                if (bit != ok) {
                    fail_msg("%s walk %d step %d token %d (%.*s): mask %d, brute force %d", rel, walk,
                             step, t, (int)lens[t], (const char *)bytes[t], bit, ok);
                }
                want += ok;
            }
            assert_int_equal(count, want);
            states++;
            if (count == 0) break;
            /* pick an allowed token: often a long one, to get into strings */
            int64_t k = (int64_t)(strata_rng_uniform(&rng) * (double)count);
            int32_t pick = -1;
            for (int32_t t = 0; t < n; t++) {
                if ((mask[t / 32] >> (t % 32)) & 1u) {
                    if (k-- == 0) {
                        pick = t;
                        break;
                    }
                }
            }
            assert_true(pick >= 0);
            assert_true(grammar_state_accept_bytes(s, bytes[pick], lens[pick]));
        }
        grammar_state_free(s);
    }
    print_message("%s: %d states checked over %d tokens\n", rel, states, n);
    free(mask);
    grammar_free(g);
    for (int32_t t = 0; t < n; t++) free(bytes[t]);
    free(bytes), free(lens), free(buf);
    grammar_vocab_free(gv);
    vocab_free(v);
}

static void test_llama_bpe(void **state)
{
    (void)state;
    check_vocab("tokenizer/ggml-vocab-llama-bpe.gguf");
}

static void test_qwen2(void **state)
{
    (void)state;
    check_vocab("tokenizer/ggml-vocab-qwen2.gguf");
}

/* A token's text as DRY reads it: detokenized alone (special tokens as
 * text, a SentencePiece vocabulary's prefixed space dropped). */
static size_t dry_text(const vocab *v, int32_t t, char *buf)
{
    size_t len = 0;
    strata_err err;
    assert_int_equal(tok_token_to_piece(v, t, true, buf, TOK_MAX_PIECE_BYTES, &len, &err), 0);
    if (vocab_adds_space_prefix(v) && len > 0 && buf[0] == ' ') {
        memmove(buf, buf + 1, --len);
    }
    return len;
}

/* DRY's restart sequences from breaker strings: a one-character breaker
 * makes exactly the tokens holding it restart sequences of their own; a
 * longer one also gives a token that ends with its start the rest,
 * tokenized, as its tail; strings are cut to 40 bytes. */
static int g_dry_tails; /* vocabularies where "play" + " with" was checked */

static void check_dry(const char *rel)
{
    char path[4096];
    TESTDATA_FILE(path, rel);
    vocab *v = NULL;
    strata_err err;
    if (vocab_open(&v, path, &err) != 0) fail_msg("%s", err.msg);
    char *buf = malloc(TOK_MAX_PIECE_BYTES);
    const char *nl[1] = {"\n"};
    sample_dry_breaker *br = NULL;
    size_t n = 0;
    assert_int_equal(engine_dry_breakers(v, nl, 1, &br, &n, &err), 0);
    size_t want = 0;
    for (int32_t t = 0; t < vocab_n_tokens(v); t++) {
        size_t len = dry_text(v, t, buf);
        want += memchr(buf, '\n', len) != NULL;
    }
    assert_true(want > 0);
    assert_int_equal(n, want);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(br[i].n_tail, 0);
        if (i > 0) assert_true(br[i].head > br[i - 1].head);
        size_t len = dry_text(v, br[i].head, buf);
        assert_non_null(memchr(buf, '\n', len));
    }
    free(br);
    /* "play with": the token of "play" ends with its start, " with" follows */
    const char *pw[1] = {"play with"};
    assert_int_equal(engine_dry_breakers(v, pw, 1, &br, &n, &err), 0);
    int32_t play[4], with[4];
    size_t n_play = 0, n_with = 0;
    assert_int_equal(tok_tokenize(v, "play", 4, false, false, play, 4, &n_play, &err), 0);
    assert_int_equal(tok_tokenize(v, " with", 5, false, false, with, 4, &n_with, &err), 0);
    bool found = false;
    for (size_t i = 0; i < n && n_play == 1; i++) {
        if (br[i].head == play[0] && br[i].n_tail == (int32_t)n_with &&
            memcmp(br[i].tail, with, n_with * sizeof(int32_t)) == 0) {
            found = true;
        }
    }
    if (n_play == 1 && !found) fail_msg("%s: no breaker \"play\" + \" with\"", rel);
    g_dry_tails += found;
    free(br);
    /* cut to 40 bytes */
    const char *long1[1] = {"0123456789012345678901234567890123456789::::"};
    const char *cut1[1] = {"0123456789012345678901234567890123456789"};
    sample_dry_breaker *b2 = NULL;
    size_t n2 = 0;
    assert_int_equal(engine_dry_breakers(v, long1, 1, &br, &n, &err), 0);
    assert_int_equal(engine_dry_breakers(v, cut1, 1, &b2, &n2, &err), 0);
    assert_int_equal(n, n2);
    if (n > 0) assert_memory_equal(br, b2, n * sizeof(*br));
    free(br);
    free(b2);
    free(buf);
    vocab_free(v);
}

static void test_dry_breakers(void **state)
{
    (void)state;
    check_dry("tokenizer/ggml-vocab-llama-spm.gguf");
    check_dry("tokenizer/ggml-vocab-llama-bpe.gguf");
    assert_true(g_dry_tails >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_bpe),
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_dry_breakers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
