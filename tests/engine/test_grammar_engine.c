/* Grammars in the engine (protocol.h gen `grammar`), in-process on
 * stories260K: a constrained output only ever holds bytes the grammar
 * accepts, ends (finish "stop") only where the grammar is complete, and a
 * complete one parses as JSON; with a seed it is reproducible and
 * batch-invariant (the same alone and beside other requests, with another
 * chunk size); a grammar that does not parse is refused with `bad_grammar`
 * at once. */
#include "engine/engine.h"
#include "engine/protocol.h"
#include "model/model.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine_testutil.h"
#include "json_gbnf.h"
#include "sample/grammar.h"
#include "text/tokenizer.h"

#define MODEL "models/stories260K.gguf"

static model *g_model;
static vocab *g_vocab;

typedef et_fixture fixture;

static void fx_open(fixture *f, int slots, int64_t n_batch)
{
    engine_params p = {.n_slots = slots, .n_ctx = 512, .n_batch = n_batch, .n_threads = 1};
    et_open(f, g_model, &p);
}

static void fx_close(fixture *f)
{
    et_close(f);
}

/* The grammar as a JSON string for the gen line's "grammar" field. */
static char *grammar_field(const char *gbnf)
{
    json_t *s = json_string(gbnf);
    char *enc = json_dumps(s, JSON_ENCODE_ANY);
    json_decref(s);
    size_t n = strlen(enc) + 16;
    char *out = malloc(n);
    snprintf(out, n, "\"grammar\":%s", enc);
    free(enc);
    return out;
}

static const int32_t prompt[] = {1, 403, 407, 261, 378};

static void send_gen(fixture *f, int64_t id, int64_t max_tokens, double temp, int64_t seed,
                     const char *extra)
{
    char line[16384];
    et_gen_line(line, sizeof(line), id, prompt, sizeof(prompt) / sizeof(prompt[0]), max_tokens,
                temp, seed, extra);
    et_send(f->e, &f->out, f->c, line);
}

/* The bytes of the tokens generated for id. */
static size_t output_bytes(const et_rec *r, char *buf, size_t cap)
{
    size_t n = 0;
    char piece[TOK_MAX_PIECE_BYTES];
    strata_err err;
    for (size_t i = 0; i < r->n_tok; i++) {
        size_t len = 0;
        assert_int_equal(tok_token_to_piece(g_vocab, r->toks[i], false, piece, sizeof(piece), &len,
                                            &err), 0);
        assert_true(n + len < cap);
        memcpy(buf + n, piece, len);
        n += len;
    }
    buf[n] = '\0';
    return n;
}

/* Whether the bytes are a valid output of gbnf so far, and complete. */
static bool check_output(const char *gbnf, const char *bytes, size_t n, bool *complete)
{
    grammar *g = NULL;
    grammar_state *s = NULL;
    strata_err err;
    assert_int_equal(grammar_parse(&g, gbnf, strlen(gbnf), &err), 0);
    assert_int_equal(grammar_state_new(&s, g, &err), 0);
    bool ok = grammar_state_accept_bytes(s, (const uint8_t *)bytes, n);
    *complete = ok && grammar_state_can_end(s);
    grammar_state_free(s);
    grammar_free(g);
    return ok;
}

static const char *small_gbnf =
    "root ::= \"{\\\"n\\\":\" [0-9]{1,3} \",\\\"ok\\\":\" (\"true\" | \"false\") \",\\\"w\\\":\\\"\" [a-z ]{0,12} \"\\\"}\"";

/* Sampled at temperature 1 over many seeds: every output follows the grammar,
 * ends where it is complete, and parses as the JSON object it promises. */
static void test_outputs_follow_grammar(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 4, 64);
    char *field = grammar_field(small_gbnf);
    char *json_field = grammar_field(json_gbnf);
    const int n = 16;
    for (int i = 0; i < n; i++) {
        /* half with the small grammar (always complete within 64 tokens),
         * half with any JSON object (may run out of tokens) */
        send_gen(&f, i, 64, 1.0, 100 + i, i % 2 ? json_field : field);
    }
    et_run(f.e, &f.out, f.c);
    int complete_json = 0;
    for (int i = 0; i < n; i++) {
        const et_rec *r = &f.c->recs[i];
        assert_true(r->done);
        char buf[8192];
        size_t len = output_bytes(r, buf, sizeof(buf));
        bool complete = false;
        const char *gbnf = i % 2 ? json_gbnf : small_gbnf;
        if (!check_output(gbnf, buf, len, &complete)) fail_msg("request %d: \"%s\" breaks its grammar", i, buf);
        if (r->finish == PROTO_FINISH_STOP) {
            if (!complete) fail_msg("request %d stopped incomplete: \"%s\"", i, buf);
            json_error_t jerr;
            json_t *j = json_loadb(buf, len, 0, &jerr);
            if (j == NULL) fail_msg("request %d: \"%s\" is not JSON: %s", i, buf, jerr.text);
            assert_true(json_is_object(j));
            if (i % 2 == 0) {
                assert_true(json_is_integer(json_object_get(j, "n")));
                assert_true(json_is_boolean(json_object_get(j, "ok")));
                assert_true(json_is_string(json_object_get(j, "w")));
            }
            json_decref(j);
            complete_json++;
        } else {
            assert_int_equal(r->finish, PROTO_FINISH_LENGTH);
            assert_int_equal(r->n_tok, 64);
            assert_true(i % 2 == 1); /* the small grammar always fits */
        }
    }
    assert_true(complete_json >= n / 2);
    free(field);
    free(json_field);
    fx_close(&f);
}

/* A seeded constrained request gives the same tokens alone, and beside other
 * requests (constrained and not) with another chunk size. */
static void test_batch_invariant(void **state)
{
    (void)state;
    char *field = grammar_field(json_gbnf);
    fixture alone, mixed;
    fx_open(&alone, 1, 64);
    send_gen(&alone, 1, 48, 0.9, 7, field);
    et_run(alone.e, &alone.out, alone.c);
    fx_open(&mixed, 3, 5);
    send_gen(&mixed, 2, 40, 0.8, 11, NULL);
    send_gen(&mixed, 1, 48, 0.9, 7, field);
    send_gen(&mixed, 3, 30, 1.0, 12, field);
    et_run(mixed.e, &mixed.out, mixed.c);
    const et_rec *a = &alone.c->recs[1], *b = &mixed.c->recs[1];
    assert_true(a->done && b->done);
    assert_int_equal(a->finish, b->finish);
    assert_int_equal(a->n_tok, b->n_tok);
    assert_memory_equal(a->toks, b->toks, a->n_tok * sizeof(int32_t));
    assert_true(a->n_tok > 0);
    free(field);
    fx_close(&alone);
    fx_close(&mixed);
}

/* Bad grammars: refused at once, naming what is wrong; other requests run. */
static void test_bad_grammar(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 2, 64);
    char *undefined = grammar_field("root ::= value");
    char *syntax = grammar_field("root ::= \"a");
    send_gen(&f, 1, 8, 0.0, -1, undefined);
    send_gen(&f, 2, 8, 0.0, -1, syntax);
    send_gen(&f, 3, 8, 0.0, -1, "\"grammar\":5");
    send_gen(&f, 4, 8, 0.0, -1, NULL);
    et_assert_err(f.c, 1, PROTO_ERR_BAD_GRAMMAR);
    assert_non_null(strstr(f.c->recs[1].err_msg, "value"));
    et_assert_err(f.c, 2, PROTO_ERR_BAD_GRAMMAR);
    assert_non_null(strstr(f.c->recs[2].err_msg, "line 1"));
    et_assert_err(f.c, 3, PROTO_ERR_BAD_REQUEST);
    et_run(f.e, &f.out, f.c);
    et_assert_done(f.c, 4, PROTO_FINISH_LENGTH);
    free(undefined);
    free(syntax);
    fx_close(&f);
}

static int setup(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, MODEL);
    strata_err err;
    if (model_open(&g_model, path, &err) != 0 || vocab_open(&g_vocab, path, &err) != 0) {
        print_error("%s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    vocab_free(g_vocab);
    model_close(g_model);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outputs_follow_grammar),
        cmocka_unit_test(test_batch_invariant),
        cmocka_unit_test(test_bad_grammar),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
