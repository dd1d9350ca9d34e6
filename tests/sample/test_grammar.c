/* GBNF grammars: what they accept and reject (literals, classes, bounded
 * repetitions, recursion, UTF-8, characters split across tokens), parse
 * errors with their positions, and masks against a brute-force check on a
 * small vocabulary. The real-vocabulary check is tests/engine/test_grammar_mask.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sample/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static grammar *compile(const char *gbnf)
{
    grammar *g = NULL;
    strata_err err;
    if (grammar_parse(&g, gbnf, strlen(gbnf), &err) != 0) fail_msg("%s\n%s", gbnf, err.msg);
    return g;
}

/* Whether the whole of text is a complete output of g. */
static bool matches(const grammar *g, const char *text, size_t n)
{
    grammar_state *s = NULL;
    strata_err err;
    if (grammar_state_new(&s, g, &err) != 0) fail_msg("%s", err.msg);
    bool ok = grammar_state_accept_bytes(s, (const uint8_t *)text, n) && grammar_state_can_end(s);
    grammar_state_free(s);
    return ok;
}

/* Whether text can begin an output (not necessarily complete). */
static bool prefix_ok(const grammar *g, const char *text)
{
    grammar_state *s = NULL;
    strata_err err;
    if (grammar_state_new(&s, g, &err) != 0) fail_msg("%s", err.msg);
    bool ok = grammar_state_accept_bytes(s, (const uint8_t *)text, strlen(text));
    grammar_state_free(s);
    return ok;
}

typedef struct row {
    const char *text;
    bool ok;
} row;

static void check_table(const char *gbnf, const row *rows, size_t n)
{
    grammar *g = compile(gbnf);
    for (size_t i = 0; i < n; i++) {
        bool got = matches(g, rows[i].text, strlen(rows[i].text));
        if (got != rows[i].ok) {
            fail_msg("grammar:\n%s\ninput \"%s\": got %s, want %s", gbnf, rows[i].text,
                     got ? "accept" : "reject", rows[i].ok ? "accept" : "reject");
        }
    }
    grammar_free(g);
}

#define TABLE(gbnf, ...)                                                   \
    do {                                                                   \
        static const row rows_[] = {__VA_ARGS__};                          \
        check_table(gbnf, rows_, sizeof(rows_) / sizeof(rows_[0]));        \
    } while (0)

static void test_literals_and_classes(void **state)
{
    (void)state;
    TABLE("root ::= \"yes\" | \"no\"", {"yes", true}, {"no", true}, {"ye", false}, {"yess", false},
          {"", false}, {"No", false});
    TABLE("root ::= [a-c0-9_] [^\"\\\\]", {"a!", true}, {"9x", true}, {"_\"", false},
          {"d1", false}, {"b\\", false}, {"b", false});
    TABLE("root ::= \"\\n\\t\\\"\\\\\\x41\\u00e9\"", {"\n\t\"\\A\xc3\xa9", true}, {"\n\t\"\\A", false});
    TABLE("root ::= . .", {"ab", true}, {"\xe2\x82\xac\xf0\x9f\x98\x80", true}, {"a", false});
    TABLE("root ::= [\\]\\-] | [-a]", {"]", true}, {"-", true}, {"a", true}, {"b", false});
    /* comments and rules over several lines, names with '-' */
    TABLE("# a comment\nroot ::= first-part # trailing\n   second\nfirst-part ::= \"a\"\n"
          "second ::= (\n  \"b\" |\n  \"c\"\n)\n",
          {"ab", true}, {"ac", true}, {"a", false}, {"abc", false});
}

static void test_repetitions(void **state)
{
    (void)state;
    TABLE("root ::= \"a\"*", {"", true}, {"a", true}, {"aaaa", true}, {"ab", false});
    TABLE("root ::= \"ab\"+", {"", false}, {"ab", true}, {"ababab", true}, {"aba", false});
    TABLE("root ::= \"x\" \"y\"? \"z\"", {"xz", true}, {"xyz", true}, {"xyyz", false});
    TABLE("root ::= [0-9]{3}", {"12", false}, {"123", true}, {"1234", false});
    TABLE("root ::= [0-9]{2,}", {"1", false}, {"12", true}, {"123456789", true});
    TABLE("root ::= [0-9]{1,3} \"!\"", {"!", false}, {"1!", true}, {"123!", true}, {"1234!", false});
    TABLE("root ::= (\"a\" | \"b\"){0,2}", {"", true}, {"ab", true}, {"ba", true}, {"aba", false});
    TABLE("root ::= \"a\"{0}", {"", true}, {"a", false});
    /* empty groups and classes (fuzz findings): `()` matches nothing, `[]` no character */
    {
        const char *src = "root ::= ()* \"x\" ()+"; /* a repetition of nothing: refused */
        grammar *g = NULL;
        strata_err err;
        assert_int_equal(grammar_parse(&g, src, strlen(src), &err), STRATA_EFORMAT);
        assert_null(g);
        assert_non_null(strstr(err.msg, "left-recursive"));
    }
    TABLE("root ::= \"x\" () ()", {"x", true}, {"", false}, {"xx", false});
    TABLE("root ::= \"a\" []{0,2} | []", {"a", true}, {"", false}, {"b", false});
    /* ambiguity: both alternatives stay alive until the end decides */
    TABLE("root ::= \"a\"* \"a\" \"b\" | \"a\"+ \"c\"", {"ab", true}, {"aaab", true}, {"aac", true},
          {"aa", false}, {"b", false});
}

static const char *json_gbnf =
    "root   ::= value\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( member ( \",\" ws member )* )? \"}\" ws\n"
    "member ::= string \":\" ws value\n"
    "array  ::= \"[\" ws ( value ( \",\" ws value )* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\" ws\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ws\n"
    "ws     ::= [ \\t\\n]{0,8}\n";

static void test_recursion_json(void **state)
{
    (void)state;
    TABLE(json_gbnf, {"[]", true}, {"[[[]]]", true}, {"[[1,[2,[3]]],{\"a\":[]}]", true},
          {"{\"k\": \"v\\u00e9\\n\", \"n\": -1.5e+3}", true}, {"\"caf\xc3\xa9\"", true},
          {"[[]", false}, {"[1,]", false}, {"{\"a\"}", false}, {"01", false}, {"\"\x01\"", false},
          {"tru", false}, {"nulll", false});
    /* deep nesting is fine well below the limit */
    char deep[2001];
    memset(deep, '[', 1000);
    memset(deep + 1000, ']', 1000);
    deep[2000] = 0;
    grammar *g = compile(json_gbnf);
    assert_true(matches(g, deep, 2000));
    assert_false(matches(g, deep, 1999));
    grammar_free(g);
}

static void test_utf8(void **state)
{
    (void)state;
    /* multi-byte classes and ranges */
    TABLE("root ::= [\xc3\xa0-\xc3\xbf\xe4\xb8\x80-\xe9\xbf\xbf]+",
          {"\xc3\xa9\xe4\xb8\xad", true}, {"a", false}, {"\xc3\x9f", false});
    TABLE("root ::= [^a]", {"\xf0\x9f\x98\x80", true}, {"a", false}, {"\xc3\xa9", true});
    /* invalid UTF-8 in the output is never accepted */
    TABLE("root ::= .*", {"\xc3", false}, {"\xc0\x80", false}, {"\xed\xa0\x80", false},
          {"\xf8\x88\x80\x80\x80", false}, {"\x80", false}, {"ok \xe2\x82\xac", true});

    /* a character split across tokens: the state keeps the partial bytes */
    grammar *g = compile("root ::= \"\xe2\x82\xac\" \"!\"");
    grammar_state *s = NULL;
    strata_err err;
    assert_int_equal(grammar_state_new(&s, g, &err), 0);
    assert_true(grammar_state_accept_bytes(s, (const uint8_t *)"\xe2", 1));
    assert_false(grammar_state_can_end(s));
    assert_false(grammar_state_accept_bytes(s, (const uint8_t *)"\x83", 1)); /* U+20C0.. not € */
    assert_true(grammar_state_accept_bytes(s, (const uint8_t *)"\x82", 1));
    assert_false(grammar_state_accept_bytes(s, (const uint8_t *)"!", 1));     /* still half */
    assert_true(grammar_state_accept_bytes(s, (const uint8_t *)"\xac!", 2));
    assert_true(grammar_state_can_end(s));
    grammar_state_free(s);
    /* a lead byte whose characters are all outside the class is refused at once */
    assert_false(prefix_ok(g, "\xc3"));
    grammar_free(g);

    /* Every half character the recognizer accepts has a byte that carries
     * it on, so a token mask never leads into a state no token can leave:
     * ED A0..BF can only become surrogates, E0 80..9F and F0 80..8F only
     * overlong forms, F4 90..BF only code points above U+10FFFF, so those
     * pairs are refused at their second byte. Exhaustive over the first
     * two bytes, and over the third after a 4-byte lead. */
    g = compile("root ::= [^\"]*");
    assert_int_equal(grammar_state_new(&s, g, &err), 0);
    assert_false(grammar_state_can_accept(s, (const uint8_t *)"\xed\xa6", 2));
    assert_true(grammar_state_can_accept(s, (const uint8_t *)"\xed\x9f\xbf", 3));
    assert_true(grammar_state_can_accept(s, (const uint8_t *)"\xee\x80\x80", 3));
    int stuck = 0;
    for (int b1 = 0xC0; b1 < 256; b1++) {
        uint8_t buf[4] = {(uint8_t)b1};
        if (!grammar_state_can_accept(s, buf, 1)) continue;
        bool any2 = false;
        for (int b2 = 0; b2 < 256; b2++) {
            buf[1] = (uint8_t)b2;
            if (!grammar_state_can_accept(s, buf, 2)) continue;
            any2 = true;
            if (b1 < 0xE0) continue;
            bool any3 = false;
            for (int b3 = 0; b3 < 256 && !any3; b3++) {
                buf[2] = (uint8_t)b3;
                if (!grammar_state_can_accept(s, buf, 3)) continue;
                if (b1 < 0xF0) any3 = true;
                for (int b4 = 0; b4 < 256 && !any3; b4++) {
                    buf[3] = (uint8_t)b4;
                    any3 = grammar_state_can_accept(s, buf, 4);
                }
            }
            if (!any3) stuck++;
        }
        if (!any2) stuck++;
    }
    assert_int_equal(stuck, 0);
    grammar_state_free(s);
    grammar_free(g);
}

static void expect_error(const char *gbnf, const char *where, const char *what)
{
    grammar *g = NULL;
    strata_err err;
    int rc = grammar_parse(&g, gbnf, strlen(gbnf), &err);
    if (rc == 0) fail_msg("accepted: %s", gbnf);
    assert_int_equal(rc, STRATA_EFORMAT);
    assert_null(g);
    if ((where && !strstr(err.msg, where)) || !strstr(err.msg, what)) {
        fail_msg("grammar %s\nmessage \"%s\" lacks \"%s\" / \"%s\"", gbnf, err.msg, where ? where : "",
                 what);
    }
}

static void test_parse_errors(void **state)
{
    (void)state;
    expect_error("root ::= \"abc", "line 1, column 10", "unterminated string");
    expect_error("root ::= [a-", "line 1, column 10", "unterminated character class");
    expect_error("root ::= x\n", "line 1, column 10", "undefined rule 'x'");
    expect_error("a ::= \"x\"", NULL, "no rule named 'root'");
    expect_error("root ::= root \"a\" | \"b\"", "line 1, column 1", "left-recursive");
    expect_error("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", "line 2, column 1", "'a' is left-recursive");
    expect_error("root ::= (\"\")*", NULL, "left-recursive");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1", "defined twice");
    expect_error("root ::= \"a\" )", "line 1, column 14", "')' without its '('");
    expect_error("root ::= ( \"a\"", "line 1, column 10", "without its ')'");
    expect_error("root ::= * \"a\"", "line 1, column 10", "nothing before it");
    expect_error("root ::= \"a\"{3,2}", NULL, "n < m");
    expect_error("root ::= \"a\"{20000}", NULL, "over 10000");
    expect_error("root ::= \"\\q\"", "line 1, column 11", "unknown escape \\q");
    expect_error("root ::= \"\\x4\"", NULL, "2 hex digits");
    expect_error("root ::= [z-a]", NULL, "end comes before its start");
    expect_error("root ::= \"\xff\"", NULL, "invalid UTF-8");
    expect_error("root = \"a\"", "line 1, column 6", "expected '::='");
    expect_error("root ::= \"a\" @", "line 1, column 14", "unexpected character '@'");
    /* the expansion limit: 10 x 10000 x 11 elements */
    expect_error("root ::= \"abcdefghij\"{10000}{11}", NULL, "grammar too large");
    /* nesting of groups is bounded */
    char deep[700];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof(deep), "root ::= ");
    for (int i = 0; i < 300; i++) deep[n++] = '(';
    deep[n] = 0;
    expect_error(deep, NULL, "nested too deep");
}

/* An ambiguous grammar cannot blow up: continuations past the stack limit
 * are refused and the state says so. */
static void test_ambiguity_bounded(void **state)
{
    (void)state;
    grammar *g = compile("root ::= x*\nx ::= \"a\" | \"a\" \"a\" | \"a\" \"a\" \"a\" | y\n"
                         "y ::= \"a\"+");
    grammar_state *s = NULL;
    strata_err err;
    assert_int_equal(grammar_state_new(&s, g, &err), 0);
    bool all = true;
    for (int i = 0; i < 200 && all; i++) all = grammar_state_accept_bytes(s, (const uint8_t *)"a", 1);
    /* either it kept up (deduplicated stacks) or it says it hit the limit */
    assert_true(all || grammar_state_overflowed(s));
    grammar_state_free(s);
    grammar_free(g);
}

/* --- masks against brute force on a small vocabulary --- */

static void check_mask(grammar_state *s, const grammar_vocab *v, const uint8_t *const *toks,
                       const size_t *lens, int32_t n_tok)
{
    uint32_t mask[8];
    int64_t count = grammar_state_mask(s, v, mask);
    int64_t want = 0;
    for (int32_t t = 0; t < n_tok; t++) {
        bool bit = (mask[t / 32] >> (t % 32)) & 1u;
        bool ok = false;
        if (lens[t] > 0) {
            ok = grammar_state_can_accept(s, toks[t], lens[t]); /* the recognizer, byte by byte */
        }
        if (bit != ok) fail_msg("token %d (%.*s): mask %d, brute force %d", t, (int)lens[t], toks[t], bit, ok);
        want += ok;
    }
    assert_int_equal(count, want);
}

static void test_mask_small_vocab(void **state)
{
    (void)state;
    static const char *words[] = {"{", "}", "[", "]", "\"", ",", ":", " ", "\n", "tr", "true", "ue",
                                  "null", "nu", "fal", "se", "0", "1", "12", "-", ".5", "e", "E+",
                                  "\"a", "a\"", "\":", "\\", "\\u", "00e9", "\xc3", "\xa9", "\xc3\xa9",
                                  "\xe2\x82", "\xac", "[{", "}]", "\",\"", "", "\x01", "abc"};
    int32_t n = (int32_t)(sizeof(words) / sizeof(words[0]));
    const uint8_t *toks[64];
    size_t lens[64];
    for (int32_t i = 0; i < n; i++) toks[i] = (const uint8_t *)words[i], lens[i] = strlen(words[i]);
    grammar_vocab *v = NULL;
    strata_err err;
    assert_int_equal(grammar_vocab_new(&v, n, toks, lens, &err), 0);
    assert_int_equal(grammar_mask_words(v), 2);
    grammar *g = compile(json_gbnf);
    grammar_state *s = NULL;
    assert_int_equal(grammar_state_new(&s, g, &err), 0);
    /* walk an output token by token, checking the mask at every step */
    static const int32_t path[] = {0, 23, 25, 7, 2, 16, 5, 18, 5, 19, 17, 20, 21, 17, 5, 10, 3,
                                   5, 4, 29, 30, 31, 32, 33, 26, 27, 28, 4, 6, 12, 1};
    for (size_t i = 0; i < sizeof(path) / sizeof(path[0]); i++) {
        check_mask(s, v, toks, lens, n);
        check_mask(s, v, toks, lens, n); /* again, from the cache */
        if (!grammar_state_accept_bytes(s, toks[path[i]], lens[path[i]])) {
            fail_msg("step %zu: token %d refused", i, path[i]);
        }
    }
    assert_true(grammar_state_can_end(s));
    grammar_state_free(s);
    grammar_free(g);
    grammar_vocab_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals_and_classes),
        cmocka_unit_test(test_repetitions),
        cmocka_unit_test(test_recursion_json),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_ambiguity_bounded),
        cmocka_unit_test(test_mask_small_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
