/* Helpers of the tests of the APIs translated into chat bodies
 * (test_anthropic.c, test_responses.c; header-only: each test program is
 * one .c file): a translator's chat body of a request, its 400 naming a
 * field, and JSON compared with an expected text. Include after
 * <cmocka.h>. */
#ifndef STRATA_TESTS_SERVE_TRANSLATE_TESTUTIL_H
#define STRATA_TESTS_SERVE_TRANSLATE_TESTUTIL_H

#include "serve/api.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A translation: body[0..len) into a malloc'd chat body, or -1 with e. */
typedef int (*tt_translate)(const char *body, size_t len, char **out, api_error *e);

/* The chat body (parsed) that fn makes of body; fails the test on a refusal. */
static inline json_t *tt_chat_of(tt_translate fn, const char *body)
{
    char *out = NULL;
    api_error e;
    if (fn(body, strlen(body), &out, &e) != 0) fail_msg("%s: %s", body, e.message);
    json_t *j = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(j);
    return j;
}

/* fn refuses body with a 400 whose message holds needle, and makes nothing. */
static inline void tt_refused(tt_translate fn, const char *body, const char *needle)
{
    char *out = NULL;
    api_error e;
    assert_int_equal(fn(body, strlen(body), &out, &e), -1);
    assert_null(out);
    assert_int_equal(e.status, 400);
    if (strstr(e.message, needle) == NULL) fail_msg("%s: \"%s\" lacks %s", body, e.message, needle);
}

/* got equals the JSON of want_text. */
static inline void tt_assert_json(const json_t *got, const char *want_text)
{
    json_t *want = json_loads(want_text, 0, NULL);
    assert_non_null(want);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_SORT_KEYS);
        fail_msg("got %s\nwant %s", g ? g : "?", want_text);
    }
    json_decref(want);
}

#endif
