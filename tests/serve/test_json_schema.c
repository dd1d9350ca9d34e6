/* The JSON Schema compiler (serve/json_schema.h): each feature's grammar,
 * parsed by the engine's GBNF parser, accepts the documents the schema
 * allows and rejects the others (run through the byte recognizer); errors
 * name the keyword and its path; output is deterministic and bounded.
 * Also vLLM's guided_regex (a raw regular expression) and guided_choice. */
#include "sample/grammar.h"
#include "serve/json_schema.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static char *compile_ok(const char *schema)
{
    json_error_t je;
    json_t *s = json_loads(schema, JSON_DECODE_ANY, &je);
    if (s == NULL) fail_msg("bad test schema: %s", schema);
    char *g = NULL;
    strata_err err = {0};
    int rc = json_schema_to_gbnf(s, &g, &err);
    json_decref(s);
    if (rc != 0) fail_msg("schema %s: %s", schema, err.msg);
    return g;
}

static bool accepts(const grammar *g, const char *doc)
{
    grammar_state *st = NULL;
    strata_err err;
    assert_int_equal(grammar_state_new(&st, g, &err), 0);
    bool ok = grammar_state_accept_bytes(st, (const uint8_t *)doc, strlen(doc)) &&
              grammar_state_can_end(st);
    grammar_state_free(st);
    return ok;
}

/* schema; then documents, each prefixed with '+' (must accept) or '-'
 * (must reject); NULL ends. */
static void check(const char *schema, ...)
{
    char *text = compile_ok(schema);
    grammar *g = NULL;
    strata_err err = {0};
    if (grammar_parse(&g, text, strlen(text), &err) != 0) {
        fail_msg("schema %s\ncompiled to a grammar the parser refuses: %s\n%s", schema, err.msg, text);
    }
    va_list ap;
    va_start(ap, schema);
    const char *d;
    while ((d = va_arg(ap, const char *)) != NULL) {
        bool want = d[0] == '+';
        if (accepts(g, d + 1) != want) {
            fail_msg("schema %s\n%s `%s`\ngrammar:\n%s", schema, want ? "rejects" : "accepts", d + 1, text);
        }
    }
    va_end(ap);
    grammar_free(g);
    free(text);
}

static void test_types(void **state)
{
    (void)state;
    check("{\"type\":\"integer\"}", "+0", "+-12", "+1234567890", "-01", "--", "-1.5", "-", "-\"1\"", NULL);
    check("{\"type\":\"number\"}", "+0", "+-0.5", "+1e10", "+2.5E-3", "-01", "-.5", "-1.", "-+1", NULL);
    check("{\"type\":\"string\"}", "+\"\"", "+\"a b\\\"c\\\\\\n\\u00e9\"", "-\"a", "-\"\\x\"", "-'a'",
          "-\"a\nb\"", NULL);
    check("{\"type\":\"boolean\"}", "+true", "+false", "-True", "-1", NULL);
    check("{\"type\":\"null\"}", "+null", "-nul", "-\"null\"", NULL);
    check("{\"type\":[\"string\",\"null\"]}", "+null", "+\"x\"", "-1", NULL);
    check("{}", "+{\"a\":[1,2.5,\"x\",null,true,{}]}", "+1", "-{\"a\" :1}", "-[1, 2]", "-{a:1}", NULL);
    check("true", "+[]", "+\"s\"", NULL);
}

static void test_objects(void **state)
{
    (void)state;
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                    "\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}";
    check(s, "+{\"b\":\"x\"}", "+{\"a\":1,\"b\":\"x\"}", "+{\"b\":\"x\",\"c\":true}",
          "+{\"a\":1,\"b\":\"x\",\"c\":false}", "-{}", "-{\"a\":1}", "-{\"b\":\"x\",\"a\":1}",
          "-{\"b\":\"x\",}", "-{\"b\":\"x\",\"d\":1}", "-{\"b\": \"x\"}", "-{\"b\":1}", NULL);
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "+{}", "+{\"a\":5}",
          "-{\"a\":5,\"b\":1}", "-{,}", NULL);
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":true}",
          "+{}", "+{\"a\":5,\"z\":[1]}", "+{\"z\":null,\"y\":2}", "-{\"a\":5,\"z\"}", NULL);
    check("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "+{}",
          "+{\"x\":1,\"y\":2}", "-{\"x\":\"1\"}", NULL);
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false,"
          "\"required\":[\"a\"]}", "+{\"a\":1}", "-{}", "-{\"a\":1,\"b\":2}", NULL);
    check("{\"type\":\"object\"}", "+{}", "+{\"k\":{\"n\":[]}}", "-[]", NULL);
    check("{\"properties\":{\"a~/\\\"q\":{\"const\":1}},\"required\":[\"a~/\\\"q\"]}",
          "+{\"a~/\\\"q\":1}", "-{\"a~/\\\"q\":2}", NULL);
}

static void test_enum_const(void **state)
{
    (void)state;
    check("{\"enum\":[\"red\",\"green\",1,null,{\"a\":[true]}]}", "+\"red\"", "+\"green\"", "+1", "+null",
          "+{\"a\":[true]}", "-\"blue\"", "-\"re\"", "-2", NULL);
    check("{\"const\":\"caf\\u00e9\"}", "+\"caf\xc3\xa9\"", "-\"cafe\"", "-\"caf\xc3\"", NULL);
    check("{\"type\":\"string\",\"enum\":[\"a\\\"b\"]}", "+\"a\\\"b\"", "-\"ab\"", NULL);
}

static void test_arrays(void **state)
{
    (void)state;
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", "+[]", "+[1]", "+[1,2,3]", "-[1,]",
          "-[\"a\"]", "-[1 ,2]", NULL);
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "-[]", "-[1]",
          "+[1,2]", "+[1,2,3]", "-[1,2,3,4]", NULL);
    check("{\"type\":\"array\",\"maxItems\":0}", "+[]", "-[1]", NULL);
    check("{\"type\":\"array\",\"minItems\":1}", "-[]", "+[null]", "+[1,\"a\"]", NULL);
    check("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}",
          "+[\"a\",1]", "-[\"a\"]", "-[1,\"a\"]", "-[\"a\",1,2]", NULL);
    check("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"boolean\"},"
          "\"maxItems\":3}", "+[\"a\"]", "+[\"a\",true]", "+[\"a\",true,false]", "-[\"a\",true,false,true]",
          "-[\"a\",1]", NULL);
}

static void test_strings(void **state)
{
    (void)state;
    check("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "-\"a\"", "+\"ab\"", "+\"a\\nc\"",
          "-\"abcd\"", NULL);
    check("{\"type\":\"string\",\"maxLength\":0}", "+\"\"", "-\"a\"", NULL);
    /* only days that exist: February 29th in leap years alone */
    check("{\"type\":\"string\",\"format\":\"date\"}", "+\"2024-02-29\"", "-\"2024-13-01\"",
          "-\"2024-1-01\"", "-\"2024-01-32\"", "+\"2023-12-31\"", "+\"2023-04-30\"",
          "-\"2023-04-31\"", "-\"2023-02-30\"", "+\"2023-02-28\"", "-\"2023-02-29\"",
          "-\"1900-02-29\"", "+\"2000-02-29\"", "+\"0000-02-29\"", "-\"2100-02-29\"",
          "+\"1996-02-29\"", "-\"2023-00-10\"", "-\"2023-06-00\"", NULL);
    /* no leap second: a validator takes :60 only at 23:59 UTC, which a
     * grammar over the offset cannot say, and no reply needs one */
    check("{\"type\":\"string\",\"format\":\"time\"}", "+\"23:59:59Z\"", "+\"12:00:00.123+02:00\"",
          "-\"23:59:60Z\"", "-\"24:00:00Z\"", "-\"12:00:00\"", NULL);
    check("{\"type\":\"string\",\"format\":\"date-time\"}", "+\"2024-05-06T07:08:09Z\"",
          "-\"2024-05-06 07:08:09Z\"", NULL);
    check("{\"type\":\"string\",\"format\":\"uuid\"}", "+\"123e4567-e89b-12d3-a456-426614174000\"",
          "-\"123e4567e89b12d3a456426614174000\"", "-\"123e4567-e89b-12d3-a456-42661417400g\"", NULL);
    check("{\"type\":\"string\",\"format\":\"email\"}", "+\"a.b+c@example.co.uk\"", "-\"a@b\"",
          "-\"@example.com\"", "-\"a b@example.com\"", "-\".a@example.com\"", "-\"a..b@example.com\"",
          "-\"a.@example.com\"", "-\"a@-example.com\"", "-\"a@example-.com\"", "-\"a@example..com\"",
          "+\"x-1@a-b.c9\"", NULL);
}

static void test_patterns(void **state)
{
    (void)state;
    check("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3,4}$\"}", "+\"AB-123\"", "+\"XY-1234\"",
          "-\"AB-12\"", "-\"ab-123\"", "-\"AB-12345\"", NULL);
    check("{\"pattern\":\"^(cat|dog)s?$\"}", "+\"cat\"", "+\"dogs\"", "-\"cow\"", "-\"catss\"", NULL);
    check("{\"pattern\":\"^a.c$\"}", "+\"abc\"", "+\"a\\\"c\"", "-\"ac\"", NULL);
    check("{\"pattern\":\"^[^0-9]+$\"}", "+\"abc\"", "-\"a1\"", "-\"\"", NULL);
    check("{\"pattern\":\"^\\\\w+@(?:x|y)\\\\.com$\"}", "+\"ab_1@x.com\"", "-\"ab@z.com\"", "-\"ab@xxcom\"", NULL);
    check("{\"pattern\":\"^a\\\"b$\"}", "+\"a\\\"b\"", "-\"ab\"", NULL);
}

/* grammar text (compiled) against documents, '+' accept / '-' reject. */
static void check_gbnf(const char *what, char *text, const char *const *docs)
{
    grammar *g = NULL;
    strata_err err = {0};
    if (grammar_parse(&g, text, strlen(text), &err) != 0) {
        fail_msg("%s compiled to a grammar the parser refuses: %s\n%s", what, err.msg, text);
    }
    for (const char *const *d = docs; *d != NULL; d++) {
        bool want = (*d)[0] == '+';
        if (accepts(g, *d + 1) != want) {
            fail_msg("%s\n%s `%s`\ngrammar:\n%s", what, want ? "rejects" : "accepts", *d + 1, text);
        }
    }
    grammar_free(g);
    free(text);
}

static void check_regex(const char *re, ...)
{
    char *text = NULL;
    strata_err err = {0};
    if (json_schema_regex_to_gbnf(re, strlen(re), "guided_regex", &text, &err) != 0) {
        fail_msg("regex %s: %s", re, err.msg);
    }
    const char *docs[32];
    size_t n = 0;
    va_list ap;
    va_start(ap, re);
    const char *d;
    while ((d = va_arg(ap, const char *)) != NULL && n < 31) docs[n++] = d;
    va_end(ap);
    docs[n] = NULL;
    check_gbnf(re, text, docs);
}

static void regex_error(const char *re, size_t n, const char *needle)
{
    char *text = NULL;
    strata_err err = {0};
    assert_int_equal(json_schema_regex_to_gbnf(re, n, "guided_regex", &text, &err), STRATA_EINVAL);
    assert_null(text);
    if (strstr(err.msg, needle) == NULL || strstr(err.msg, "`guided_regex`") == NULL) {
        fail_msg("regex %s: \"%s\" lacks \"%s\"", re, err.msg, needle);
    }
}

/* vLLM's guided_regex: the whole output matches; raw characters (quotes,
 * backslashes, newlines) are themselves, `.` stops at a newline */
static void test_raw_regex(void **state)
{
    (void)state;
    check_regex("[A-Z]{2}-\\d{3,4}", "+AB-123", "+XY-1234", "-AB-12", "-ab-123", "-AB-12345", "-\"AB-123\"", NULL);
    check_regex("^(yes|no)$", "+yes", "+no", "-maybe", "-yesno", "-", NULL);
    check_regex("a.c", "+abc", "+a\"c", "+a\\c", "-a\nc", "-ac", NULL);
    check_regex("say \"hi\"\\n", "+say \"hi\"\n", "-say hi\n", NULL);
    check_regex("\\\\+", "+\\", "+\\\\\\", "-", NULL);
    check_regex("[\"\\\\]+", "+\"\\\"", "-a", NULL);
    check_regex("\\s+\\S\\D\\W", "+ \t\n\r\x0b\x0cx?!", "-  1!", "-  x1!", "-  xa_", NULL);
    check_regex("[^a]\\d*", "+\"12", "+\n", "-a1", NULL);
    check_regex("(?:ab)+c?", "+ab", "+ababc", "-abc c", "-a", NULL);
    check_regex("x\\$", "+x$", "-x", NULL);       /* an escaped $ is a literal */
    check_regex("x\\\\$", "+x\\", "-x\\$", NULL); /* a backslash, then the anchor */
    check_regex("\xc3\xa9t\xc3\xa9", "+\xc3\xa9t\xc3\xa9", "-ete", NULL);
    regex_error("(?=a)b", 6, "lookarounds");
    regex_error("(ab", 3, "unclosed (");
    regex_error("ab)", 3, "unmatched )");
    regex_error("^$", 2, "empty expression");
    regex_error("a\\bc", 4, "\\b");
    regex_error("a*?", 3, "lazy");
    regex_error("[\xc3\xa9]", 4, "non-ASCII");
    regex_error("a\0b", 3, "NUL");
}

static void test_choice(void **state)
{
    (void)state;
    json_t *c = json_loads("[\"red\", \"green\", \"say \\\"x\\\"\\n\", \"r\"]", 0, NULL);
    char *text = NULL;
    strata_err err = {0};
    assert_int_equal(json_schema_choice_to_gbnf(c, "guided_choice", &text, &err), 0);
    const char *docs[] = {"+red", "+green", "+say \"x\"\n", "+r", "-re", "-redgreen", "-", "-blue", NULL};
    check_gbnf("choice", text, docs);
    json_decref(c);
    static const char *const bad[] = {"[]", "[\"a\", 1]", "[\"a\", \"\"]", "{\"a\":1}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        c = json_loads(bad[i], 0, NULL);
        text = NULL;
        assert_int_equal(json_schema_choice_to_gbnf(c, "guided_choice", &text, &err), STRATA_EINVAL);
        assert_null(text);
        assert_non_null(strstr(err.msg, "`guided_choice"));
        json_decref(c);
    }
}

static void test_integer_ranges(void **state)
{
    (void)state;
    check("{\"type\":\"integer\",\"minimum\":18,\"maximum\":130}", "+18", "+99", "+100", "+130", "-17",
          "-131", "-018", "-1000", NULL);
    check("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5}", "+-5", "+0", "+5", "-6", "--6", "--0", NULL);
    check("{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10}", "-0", "+1", "+9", "-10", NULL);
    check("{\"type\":\"integer\",\"minimum\":-120,\"maximum\":-7}", "+-7", "+-120", "+-99", "--6", "--121",
          "-7", NULL);
    check("{\"type\":\"integer\",\"minimum\":0}", "+0", "+9999999999999999", "--1", "-01", NULL);
    check("{\"type\":\"integer\",\"maximum\":3}", "+3", "+-123456", "-4", "-10", NULL);
    check("{\"type\":\"integer\",\"minimum\":5,\"exclusiveMinimum\":true,\"maximum\":7}", "-5", "+6", "+7", NULL);
    check("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", "-1", "+2", "+3", "-4", NULL);
}

static void test_combinators(void **state)
{
    (void)state;
    check("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", "+1", "+\"a\"",
          "-\"ab\"", "-null", NULL);
    check("{\"oneOf\":[{\"const\":\"x\"},{\"type\":\"boolean\"}]}", "+\"x\"", "+true", "-\"y\"", NULL);
    check("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
          "{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}", "+{\"a\":1,\"b\":\"x\"}",
          "-{\"a\":1}", "-{\"b\":\"x\"}", NULL);
    check("{\"type\":\"string\",\"nullable\":true}", "+null", "+\"a\"", "-1", NULL);
    check("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
          "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
          "\"$ref\":\"#/$defs/node\"}", "+{\"v\":1}", "+{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]}]}",
          "-{\"v\":1,\"kids\":[{}]}", NULL);
    check("{\"definitions\":{\"p\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},"
          "\"required\":[\"x\"]}},\"allOf\":[{\"$ref\":\"#/definitions/p\"},{\"properties\":{\"y\":"
          "{\"type\":\"integer\"}}}]}", "+{\"x\":1}", "+{\"x\":1,\"y\":2}", "-{\"y\":2}", NULL);
    check("{\"type\":\"object\",\"properties\":{\"l\":{\"$ref\":\"#\"}},\"description\":\"d\",\"title\":\"t\","
          "\"$schema\":\"x\",\"examples\":[1],\"default\":{}}", "+{}", "+{\"l\":{\"l\":{}}}", "-{\"l\":1}", NULL);
}

static void expect_error(const char *schema, const char *needle)
{
    json_error_t je;
    json_t *s = json_loads(schema, JSON_DECODE_ANY, &je);
    assert_non_null(s);
    char *g = NULL;
    strata_err err = {0};
    int rc = json_schema_to_gbnf(s, &g, &err);
    json_decref(s);
    if (rc == 0) fail_msg("schema %s compiled; expected an error with `%s`", schema, needle);
    assert_null(g);
    if (strstr(err.msg, needle) == NULL) fail_msg("schema %s: `%s` lacks `%s`", schema, err.msg, needle);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"multipleOf\":2}}}",
                 "`multipleOf` at /properties/age/multipleOf");
    expect_error("{\"not\":{}}", "`not` at /not");
    expect_error("{\"type\":\"number\",\"minimum\":0}", "/minimum");
    expect_error("{\"type\":\"string\",\"format\":\"hostname\"}", "/format");
    expect_error("{\"type\":\"string\",\"pattern\":\"abc\"}", "anchored");
    expect_error("{\"type\":\"string\",\"pattern\":\"^a(?=b)$\"}", "lookaround");
    expect_error("{\"type\":\"string\",\"pattern\":\"^a+?$\"}", "lazy");
    expect_error("{\"type\":\"string\",\"pattern\":\"^\\\\bx$\"}", "\\b");
    expect_error("{\"$ref\":\"#/$defs/missing\"}", "does not exist");
    expect_error("{\"$ref\":\"http://x/s.json\"}", "local");
    expect_error("{\"type\":\"strin\"}", "/type");
    expect_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer");
    expect_error("{\"type\":\"array\",\"minItems\":100000}", "/minItems");
    expect_error("{\"anyOf\":[{\"type\":\"integer\"},{\"uniqueItems\":true}]}", "/anyOf/1/uniqueItems");
    expect_error("{\"items\":{\"type\":\"string\",\"minLength\":1,\"pattern\":\"^a$\"}}", "/items/pattern");
    expect_error("{\"allOf\":[{\"type\":\"string\"}]}", "/allOf/0/type");
    expect_error("false", "must be an object");
    expect_error("{\"type\":\"string\",\"enum\":[\"ab\"],\"maxLength\":1}", "`maxLength` at /maxLength next to `enum`");
    expect_error("{\"type\":\"string\",\"minimum\":1}", "`minimum` at /minimum applies to no type");
    /* nesting past the bound */
    char deep[4096] = "";
    for (int i = 0; i < 80; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 80; i++) strcat(deep, "}");
    expect_error(deep, "deeper than");
}

static void test_size_bound(void **state)
{
    (void)state;
    /* 200 properties x an enum of 60 long strings: over the bound */
    json_t *props = json_object();
    for (int i = 0; i < 200; i++) {
        json_t *en = json_array();
        for (int j = 0; j < 60; j++) {
            char v[64];
            snprintf(v, sizeof(v), "value-number-%d-of-property-%d-padding", j, i);
            json_array_append_new(en, json_string(v));
        }
        char k[16];
        snprintf(k, sizeof(k), "p%d", i);
        json_t *p = json_object();
        json_object_set_new(p, "enum", en);
        json_object_set_new(props, k, p);
    }
    json_t *s = json_object();
    json_object_set_new(s, "properties", props);
    char *g = NULL;
    strata_err err = {0};
    assert_int_not_equal(json_schema_to_gbnf(s, &g, &err), 0);
    assert_null(g);
    assert_non_null(strstr(err.msg, "over"));
    json_decref(s);
}

static void test_deterministic(void **state)
{
    (void)state;
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":3},"
                    "{\"$ref\":\"#\"}]},\"b\":{\"format\":\"uuid\",\"type\":\"string\"}}}";
    char *a = compile_ok(s), *b = compile_ok(s);
    assert_string_equal(a, b);
    assert_true(strncmp(a, "root ::= ", 9) == 0);
    free(a);
    free(b);
}

static void test_any_object(void **state)
{
    (void)state;
    char *text = json_schema_any_object_gbnf();
    assert_non_null(text);
    grammar *g = NULL;
    strata_err err = {0};
    assert_int_equal(grammar_parse(&g, text, strlen(text), &err), 0);
    assert_true(accepts(g, "{}"));
    assert_true(accepts(g, "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}"));
    assert_false(accepts(g, "[]"));
    assert_false(accepts(g, "\"x\""));
    assert_false(accepts(g, "{\"a\":1"));
    grammar_free(g);
    free(text);
}

/* Mutated schemas (bytes flipped, dropped, duplicated; a fixed seed): the
 * compiler never crashes, and whatever it accepts is a grammar the engine's
 * parser accepts too. */
static void test_mutations(void **state)
{
    (void)state;
    static const char *const seeds[] = {
        ("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-20,\"maximum\":300},"
        "\"b\":{\"type\":\"array\",\"items\":{\"enum\":[\"x\",1,null]},\"minItems\":1,\"maxItems\":4}},"
        "\"required\":[\"a\"],\"additionalProperties\":{\"type\":\"string\",\"maxLength\":3}}"),
        ("{\"$defs\":{\"n\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"object\",\"properties\":{\"v\":"
        "{\"type\":\"string\",\"pattern\":\"^[a-c]{1,3}(x|y)*\\\\d?$\"},\"next\":{\"$ref\":\"#/$defs/n\"}}}]}},"
        "\"$ref\":\"#/$defs/n\"}"),
        ("{\"allOf\":[{\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date-time\"}}},"
        "{\"properties\":{\"u\":{\"format\":\"uuid\"},\"t\":{\"type\":[\"number\",\"boolean\"],"
        "\"nullable\":true}},\"required\":[\"u\"]}]}"),
        ("{\"type\":\"array\",\"prefixItems\":[{\"const\":{\"k\":[1,2]}},{\"type\":\"integer\","
        "\"exclusiveMinimum\":0}],\"items\":{\"type\":\"boolean\"},\"maxItems\":5}"),
    };
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int compiled = 0;
    for (int it = 0; it < 3000; it++) {
        const char *seed = seeds[it % 4];
        size_t n = strlen(seed);
        char buf[1024];
        memcpy(buf, seed, n + 1);
        int edits = it % 4; /* 0: the seed itself */
        for (int k = 0; k < edits; k++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            size_t at = (size_t)(rng % n);
            int op = (int)((rng >> 32) % 3);
            if (op == 0) buf[at] = "{}[]\",:0123456789-axtrue"[(rng >> 40) % 25];
            else if (op == 1 && n > 2) memmove(buf + at, buf + at + 1, n - at), n--;
            else if (n + 1 < sizeof(buf)) memmove(buf + at + 1, buf + at, n - at + 1), n++;
        }
        json_t *s = json_loadb(buf, n, JSON_DECODE_ANY, NULL);
        if (s == NULL) continue;
        char *g = NULL;
        strata_err err = {0};
        if (json_schema_to_gbnf(s, &g, &err) == 0) {
            grammar *gr = NULL;
            if (grammar_parse(&gr, g, strlen(g), &err) != 0) {
                fail_msg("schema %.*s compiled to a grammar the parser refuses: %s\n%s", (int)n, buf, err.msg, g);
            }
            grammar_free(gr);
            free(g);
            compiled++;
        } else {
            assert_null(g);
            assert_true(err.msg[0] != '\0');
        }
        json_decref(s);
    }
    print_message("%d of 3000 compiled\n", compiled);
    assert_true(compiled > 750); /* the seeds, and mutations that stay valid */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),        cmocka_unit_test(test_objects),
        cmocka_unit_test(test_enum_const),   cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_strings),      cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_integer_ranges), cmocka_unit_test(test_combinators),
        cmocka_unit_test(test_errors),       cmocka_unit_test(test_size_bound),
        cmocka_unit_test(test_deterministic), cmocka_unit_test(test_any_object),
        cmocka_unit_test(test_mutations),    cmocka_unit_test(test_raw_regex),
        cmocka_unit_test(test_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
