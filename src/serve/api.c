/* OpenAI request parsing and response shapes (api.h). Pure functions over
 * jansson values; called from HTTP handler threads with no lock held. The
 * table of known but unimplemented fields is here (k_unsupported). */
#include "serve/api.h"
#include "serve/json_schema.h"

#include "text/chat_template.h"
#include "text/tokenizer.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The template for models that carry none (what llama-server falls back to). */
static const char k_chatml[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* The sequence a UTF-8 lead byte c starts: its length *n and the allowed
 * range of its second byte; false for a byte no multi-byte sequence
 * starts with (ASCII included). */
static bool utf8_lead(unsigned c, size_t *n, unsigned *lo, unsigned *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        *n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        *n = 3;
        if (c == 0xE0) *lo = 0xA0; /* no overlong forms */
        if (c == 0xED) *hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        *n = 4;
        if (c == 0xF0) *lo = 0x90;
        if (c == 0xF4) *hi = 0x8F; /* nothing past U+10FFFF */
    } else {
        return false;
    }
    return true;
}

/* Length of the valid UTF-8 sequence at s, of which avail bytes may be
 * read (avail >= 1), or 0 when the bytes there are not one (a stray
 * continuation, a truncated or overlong sequence, a surrogate, past
 * U+10FFFF). */
static size_t utf8_seq_len(const unsigned char *s, size_t avail)
{
    size_t n;
    unsigned lo, hi;
    if (s[0] < 0x80) return 1;
    if (!utf8_lead(s[0], &n, &lo, &hi) || n > avail || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++) {
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    }
    return n;
}

/* Where no valid sequence starts at s (utf8_seq_len 0): the length of its
 * maximal subpart, the longest start of a valid sequence there (1 for a
 * byte no sequence starts with): Unicode's "maximal subpart" practice,
 * which Python's and Hugging Face's decode(errors="replace") and
 * llama-server's JSON writer follow. */
static size_t utf8_bad_len(const unsigned char *s, size_t avail)
{
    size_t n;
    unsigned lo, hi;
    if (!utf8_lead(s[0], &n, &lo, &hi) || avail < 2 || s[1] < lo || s[1] > hi) return 1;
    size_t k = 2;
    while (k < n && k < avail && s[k] >= 0x80 && s[k] <= 0xBF) k++;
    return k;
}

json_t *api_text_json(const char *s, size_t n)
{
    json_t *j = json_stringn(s != NULL ? s : "", s != NULL ? n : 0);
    if (j != NULL || s == NULL) return j;
    /* not UTF-8: each maximal subpart that is no whole valid sequence
     * becomes one U+FFFD (3 bytes), so the copy is at most 3n */
    char *buf = malloc(3 * n + 1);
    if (buf == NULL) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq_len((const unsigned char *)s + i, n - i);
        if (len == 0) {
            memcpy(buf + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i += utf8_bad_len((const unsigned char *)s + i, n - i);
        } else {
            memcpy(buf + k, s + i, len);
            k += len;
            i += len;
        }
    }
    j = json_stringn(buf, k);
    free(buf);
    return j;
}

/* An error message quotes what the client sent (a field's name, the JSON
 * parser's view of the bad spot) and is cut to the buffer, so it can hold
 * bytes that are not UTF-8, which JSON cannot carry: each such byte becomes
 * '?', so that every error still has a body. */
static void utf8_sanitize(char *s)
{
    const unsigned char *end = (unsigned char *)s + strlen(s);
    for (unsigned char *p = (unsigned char *)s; p < end;) {
        size_t n = utf8_seq_len(p, (size_t)(end - p));
        if (n == 0) {
            *p++ = '?';
        } else {
            p += n;
        }
    }
}

int api_fail(api_error *e, int status, const char *code, const char *fmt, ...)
{
    e->status = status;
    e->type = status == 401   ? "authentication_error"
              : status == 404 ? "not_found_error"
              : status == 429 ? "rate_limit_error"
              : status >= 500 ? "server_error"
                              : "invalid_request_error";
    snprintf(e->code, sizeof(e->code), "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    utf8_sanitize(e->message);
    utf8_sanitize(e->code);
    return -1;
}

char *api_error_body(const api_error *e)
{
    json_t *j = json_pack("{s:{s:s,s:s,s:s}}", "error", "message", e->message, "type",
                          e->type ? e->type : "server_error", "code", e->code);
    char *s = api_dumps(j);
    json_decref(j);
    return s;
}

char *api_dumps(const json_t *j)
{
    return j ? json_dumps(j, API_JSON_FLAGS) : NULL;
}

void api_gen_free(api_gen *g)
{
    for (size_t i = 0; i < g->n_stops; i++) free(g->stops[i]);
    free(g->prompt);
    for (size_t i = 0; g->more != NULL && i + 1 < g->n_prompts; i++) free(g->more[i].ids);
    free(g->more);
    for (size_t i = 0; i < g->n_inputs; i++) free(g->inputs[i].ids);
    free(g->inputs);
    free(g->sampling.logit_bias);
    free(g->allowed);
    free(g->bad_ids);
    free(g->bad_len);
    free(g->grammar);
    free(g->rendered);
    free(g->model);
    json_decref(g->tools);
    memset(g, 0, sizeof(*g));
}

/* The engine's prompt_logprobs for g: for an echo with logprobs and for
 * vLLM's prompt_logprobs, with the larger of their alternatives. */
static void set_prompt_logprobs(const api_gen *g, proto_gen *pg)
{
    int32_t top = -1;
    if (g->echo && g->logprobs >= 0) top = g->logprobs;
    if (g->prompt_logprobs > top) top = g->prompt_logprobs;
    pg->prompt_logprobs = top >= 0;
    pg->prompt_top = top > 0 ? top : 0;
}

void api_gen_move_to(api_gen *g, sreq *r)
{
    if (r->embed) {
        if (g->n_inputs > 0) {
            r->emb.tokens = g->inputs[0].ids;
            r->emb.n_tokens = g->inputs[0].n;
            g->inputs[0].ids = NULL;
            g->inputs[0].n = 0;
        }
        r->emb.pooling = PROTO_POOLING_DEFAULT;
        r->emb.no_cache = g->no_cache;
    } else {
        r->gen.no_cache = g->no_cache;
        r->gen.no_speculative = g->no_speculative;
        r->gen.has_draft_max = g->has_draft_max;
        r->gen.draft_max = g->draft_max;
        r->gen.tokens = g->prompt;
        r->gen.n_tokens = g->n_prompt;
        r->gen.max_tokens = g->max_tokens;
        r->gen.min_tokens = g->min_tokens;
        r->gen.allowed_tokens = g->allowed;
        r->gen.n_allowed_tokens = g->n_allowed;
        g->allowed = NULL;
        g->n_allowed = 0;
        r->gen.bad_ids = g->bad_ids;
        r->gen.bad_len = g->bad_len;
        r->gen.n_bad = g->n_bad;
        g->bad_ids = NULL;
        g->bad_len = NULL;
        g->n_bad = 0;
        r->gen.logprobs = g->logprobs;
        set_prompt_logprobs(g, &r->gen);
        r->gen.sampling = g->sampling;
        r->gen.grammar = g->grammar;
        g->grammar = NULL;
        g->sampling.logit_bias = NULL;
        g->sampling.n_logit_bias = 0;
    }
    g->prompt = NULL;
    g->n_prompt = 0;
}

static int32_t *copy_ids(const int32_t *ids, size_t n)
{
    int32_t *c = malloc((n ? n : 1) * sizeof(*c));
    if (c != NULL && n > 0) memcpy(c, ids, n * sizeof(*c));
    return c;
}

size_t api_gen_n_requests(const api_gen *g)
{
    return g->kind == API_EMBEDDING ? g->n_inputs : g->n_prompts * g->n_choices;
}

const int32_t *api_gen_prompt(const api_gen *g, size_t p, size_t *n)
{
    if (p == 0 || g->more == NULL) {
        *n = g->n_prompt;
        return g->prompt;
    }
    *n = g->more[p - 1].n;
    return g->more[p - 1].ids;
}

int api_gen_copy_to(const api_gen *g, size_t i, sreq *r)
{
    if (r->embed) {
        if (i >= g->n_inputs) return STRATA_EINVAL;
        r->emb.tokens = copy_ids(g->inputs[i].ids, g->inputs[i].n);
        if (r->emb.tokens == NULL) return STRATA_ENOMEM;
        r->emb.n_tokens = g->inputs[i].n;
        r->emb.pooling = PROTO_POOLING_DEFAULT;
        r->emb.no_cache = g->no_cache;
        return 0;
    }
    r->gen.no_cache = g->no_cache;
    r->gen.no_speculative = g->no_speculative;
    r->gen.has_draft_max = g->has_draft_max;
    r->gen.draft_max = g->draft_max;
    r->gen.progress = g->progress && g->stream;
    size_t n_choices = g->n_choices > 0 ? g->n_choices : 1, n_prompt;
    const int32_t *prompt = api_gen_prompt(g, i / n_choices, &n_prompt);
    r->gen.tokens = copy_ids(prompt, n_prompt);
    if (r->gen.tokens == NULL) return STRATA_ENOMEM;
    r->gen.n_tokens = n_prompt;
    r->gen.max_tokens = g->max_tokens;
    /* vLLM's stop_token_ids are banned until min_tokens, as vLLM bans them */
    if (g->min_tokens > 0 && g->n_stop_ids > 0) {
        r->gen.min_bans = copy_ids(g->stop_ids, g->n_stop_ids);
        if (r->gen.min_bans == NULL) return STRATA_ENOMEM;
        r->gen.n_min_bans = g->n_stop_ids;
    }
    /* never past the context: the answer then ends with `length` */
    int64_t room = g->n_ctx - (int64_t)n_prompt;
    if (g->n_ctx > 0 && (r->gen.max_tokens < 0 || r->gen.max_tokens > room)) r->gen.max_tokens = room;
    r->gen.min_tokens = g->min_tokens;
    if (g->n_allowed > 0) {
        r->gen.allowed_tokens = copy_ids(g->allowed, g->n_allowed);
        if (r->gen.allowed_tokens == NULL) return STRATA_ENOMEM;
        r->gen.n_allowed_tokens = g->n_allowed;
    }
    if (g->n_bad > 0) {
        size_t total = 0;
        for (size_t k = 0; k < g->n_bad; k++) total += (size_t)g->bad_len[k];
        r->gen.bad_ids = copy_ids(g->bad_ids, total);
        r->gen.bad_len = copy_ids(g->bad_len, g->n_bad);
        if (r->gen.bad_ids == NULL || r->gen.bad_len == NULL) return STRATA_ENOMEM;
        r->gen.n_bad = g->n_bad;
    }
    r->gen.logprobs = g->logprobs;
    set_prompt_logprobs(g, &r->gen);
    r->gen.sampling = g->sampling;
    r->gen.sampling.logit_bias = NULL;
    r->gen.sampling.n_logit_bias = 0;
    if (g->grammar != NULL && (r->gen.grammar = strdup(g->grammar)) == NULL) return STRATA_ENOMEM;
    if (g->sampling.n_logit_bias > 0) {
        size_t nb = g->sampling.n_logit_bias * sizeof(proto_bias);
        r->gen.sampling.logit_bias = malloc(nb);
        if (r->gen.sampling.logit_bias == NULL) return STRATA_ENOMEM;
        memcpy(r->gen.sampling.logit_bias, g->sampling.logit_bias, nb);
        r->gen.sampling.n_logit_bias = g->sampling.n_logit_bias;
    }
    /* The protocol's seeds are in [0, 2^63): seed + i wraps within it. */
    if (g->sampling.has_seed) {
        r->gen.sampling.seed = (g->sampling.seed + i % n_choices) & (uint64_t)INT64_MAX;
    }
    return 0;
}

/* --- parameters --- */

/* A number field in [lo, hi]; absent or null leaves *out. */
static int get_num(json_t *o, const char *key, double lo, double hi, float *out, api_error *e)
{
    json_t *v = json_object_get(o, key);
    if (v == NULL || json_is_null(v)) return 0;
    if (!json_is_number(v)) return api_fail(e, 400, "invalid_type", "`%s` must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) {
        return api_fail(e, 400, "invalid_value", "`%s` must be in [%g, %g]; got %g", key, lo, hi, d);
    }
    *out = (float)d;
    return 0;
}

static int get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *had,
                   api_error *e)
{
    json_t *v = json_object_get(o, key);
    if (v == NULL || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return api_fail(e, 400, "invalid_type", "`%s` must be an integer", key);
    int64_t x = (int64_t)json_integer_value(v);
    if (x < lo || x > hi) {
        return api_fail(e, 400, "invalid_value", "`%s` must be in [%lld, %lld]; got %lld", key,
                        (long long)lo, (long long)hi, (long long)x);
    }
    *out = x;
    if (had) *had = true;
    return 0;
}

static int get_bool(json_t *o, const char *key, bool *out, api_error *e)
{
    json_t *v = json_object_get(o, key);
    if (v == NULL || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return api_fail(e, 400, "invalid_type", "`%s` must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static int parse_stops(json_t *o, api_gen *g, api_error *e)
{
    json_t *v = json_object_get(o, "stop");
    if (v == NULL || json_is_null(v)) return 0;
    json_t *one[1] = {v};
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : (size_t)-1;
    if (n == (size_t)-1) return api_fail(e, 400, "invalid_type", "`stop` must be a string or an array of strings");
    if (n > TEXTGEN_MAX_STOPS) {
        return api_fail(e, 400, "invalid_value", "`stop` has %zu strings; at most %d", n,
                        TEXTGEN_MAX_STOPS);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? one[0] : json_array_get(v, i);
        if (!json_is_string(s)) return api_fail(e, 400, "invalid_type", "`stop[%zu]` must be a string", i);
        if (json_string_length(s) == 0) continue;
        char *c = strdup(json_string_value(s));
        if (c == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
        g->stops[g->n_stops++] = c;
    }
    return 0;
}

/* The token ids of the JSON array a (its size already checked) into
 * out[], each an id of the vocabulary; a 400 naming what[i] otherwise. */
static int read_ids(const json_t *a, const char *what, const vocab *voc, int32_t *out, api_error *e)
{
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *t = json_array_get(a, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= vocab_n_tokens(voc)) {
            return api_fail(e, 400, "invalid_value", "`%s[%zu]` is not a token id of this model (0..%d)", what, i,
                            vocab_n_tokens(voc) - 1);
        }
        out[i] = (int32_t)json_integer_value(t);
    }
    return 0;
}

/* vLLM's `stop_token_ids` (ids of the vocabulary: the reply ends after
 * the first of them, whose text it keeps, as vLLM does for all but
 * special tokens) and `include_stop_str_in_output` (a matched stop string
 * is returned). */
static int parse_stop_ids(json_t *o, const vocab *voc, api_gen *g, api_error *e)
{
    if (get_bool(o, "include_stop_str_in_output", &g->include_stop, e) != 0) return -1;
    json_t *v = json_object_get(o, "stop_token_ids");
    if (v == NULL || json_is_null(v)) return 0;
    if (!json_is_array(v)) return api_fail(e, 400, "invalid_type", "`stop_token_ids` must be an array of token ids");
    if (json_array_size(v) > API_MAX_STOP_IDS) {
        return api_fail(e, 400, "invalid_value", "`stop_token_ids` has %zu ids; at most %d", json_array_size(v),
                        API_MAX_STOP_IDS);
    }
    if (read_ids(v, "stop_token_ids", voc, g->stop_ids, e) != 0) return -1;
    g->n_stop_ids = json_array_size(v);
    return 0;
}

/* vLLM's allowed_token_ids: a non-empty array of ids of the vocabulary;
 * only those may be sampled. */
static int parse_allowed(json_t *o, const vocab *voc, api_gen *g, api_error *e)
{
    json_t *v = json_object_get(o, "allowed_token_ids");
    if (v == NULL || json_is_null(v)) return 0;
    if (!json_is_array(v) || json_array_size(v) == 0) {
        return api_fail(e, 400, "invalid_value", "`allowed_token_ids` must be a non-empty array of token ids");
    }
    g->allowed = malloc(json_array_size(v) * sizeof(int32_t));
    if (g->allowed == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
    if (read_ids(v, "allowed_token_ids", voc, g->allowed, e) != 0) return -1;
    g->n_allowed = json_array_size(v);
    return 0;
}

/* One bad word's token sequence appended to g's. */
static int add_bad_sequence(api_gen *g, const int32_t *ids, size_t n, api_error *e)
{
    size_t total = 0;
    for (size_t k = 0; k < g->n_bad; k++) total += (size_t)g->bad_len[k];
    int32_t *ni = realloc(g->bad_ids, (total + n + 1) * sizeof(int32_t));
    if (ni == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
    g->bad_ids = ni;
    int32_t *nl = realloc(g->bad_len, (g->n_bad + 1) * sizeof(int32_t));
    if (nl == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
    g->bad_len = nl;
    memcpy(g->bad_ids + total, ids, n * sizeof(int32_t));
    g->bad_len[g->n_bad++] = (int32_t)n;
    return 0;
}

/* vLLM's bad_words: each word (its leading blanks dropped) tokenized as
 * is and after a space, the second kept when it is another token sequence
 * of the same length (vLLM's rule); the engine bans a sequence's last
 * token where the rest of it ends the output. */
static int parse_bad_words(json_t *o, const vocab *voc, api_gen *g, api_error *e)
{
    json_t *v = json_object_get(o, "bad_words");
    if (v == NULL || json_is_null(v)) return 0;
    if (!json_is_array(v) || json_array_size(v) > PROTO_MAX_BAD_WORDS / 2) {
        return api_fail(e, 400, "invalid_value", "`bad_words` must be an array of at most %d strings",
                        PROTO_MAX_BAD_WORDS / 2);
    }
    size_t i;
    json_t *w;
    json_array_foreach(v, i, w) {
        const char *word = json_string_value(w);
        if (word == NULL || strlen(word) != json_string_length(w)) {
            return api_fail(e, 400, "invalid_value", "`bad_words[%zu]` must be a string", i);
        }
        while (*word == ' ' || *word == '\t' || *word == '\n' || *word == '\r') word++;
        if (*word == '\0') continue;
        int32_t *plain = NULL, *spaced = NULL;
        size_t n_plain = 0, n_spaced = 0;
        strata_err err;
        char *sp = malloc(strlen(word) + 2);
        if (sp == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
        sp[0] = ' ';
        strcpy(sp + 1, word);
        int rc = tok_tokenize_alloc(voc, word, strlen(word), false, false, &plain, &n_plain, &err);
        if (rc == 0) rc = tok_tokenize_alloc(voc, sp, strlen(sp), false, false, &spaced, &n_spaced, &err);
        free(sp);
        if (rc == 0 && (n_plain > PROTO_MAX_BAD_WORD_TOKENS || n_plain == 0)) {
            rc = api_fail(e, 400, "invalid_value", "`bad_words[%zu]` is %zu tokens; at most %d", i, n_plain,
                          PROTO_MAX_BAD_WORD_TOKENS);
        } else if (rc != 0) {
            rc = api_fail(e, 400, "invalid_value", "cannot tokenize `bad_words[%zu]`: %s", i, err.msg);
        } else {
            rc = add_bad_sequence(g, plain, n_plain, e);
            if (rc == 0 && n_spaced == n_plain && spaced[0] != plain[0]) rc = add_bad_sequence(g, spaced, n_spaced, e);
        }
        free(plain);
        free(spaced);
        if (rc != 0) return rc;
    }
    return 0;
}

/* Appends a bias for token id (bias -INFINITY: banned). */
static int add_bias(api_gen *g, int32_t id, float bias, api_error *e)
{
    proto_sampling *s = &g->sampling;
    proto_bias *nb = realloc(s->logit_bias, (s->n_logit_bias + 1) * sizeof(*nb));
    if (nb == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
    s->logit_bias = nb;
    nb[s->n_logit_bias++] = (proto_bias){.token = id, .bias = bias};
    return 0;
}

/* `logit_bias`: OpenAI's {"token id": bias in [-100, 100]}, or
 * llama-server's [[token, bias], ...] whose token is an id or a text (each
 * token of its tokenization gets the bias) and whose bias is a number in
 * [-100, 100] or false (the token is never produced). */
static int parse_logit_bias(json_t *o, const vocab *voc, api_gen *g, api_error *e)
{
    json_t *v = json_object_get(o, "logit_bias");
    if (v == NULL || json_is_null(v)) return 0;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *pair = json_array_get(v, i), *t = json_array_get(pair, 0), *b = json_array_get(pair, 1);
            bool ok_bias = json_is_false(b) || (json_is_number(b) && isfinite(json_number_value(b)) &&
                                                fabs(json_number_value(b)) <= 100);
            if (!json_is_array(pair) || json_array_size(pair) != 2 || !ok_bias ||
                !(json_is_integer(t) || json_is_string(t))) {
                return api_fail(e, 400, "invalid_value",
                                "`logit_bias[%zu]` must be [token id or text, a number in [-100, 100] or false]", i);
            }
            float bias = json_is_false(b) ? -INFINITY : (float)json_number_value(b);
            if (json_is_integer(t)) {
                if (json_integer_value(t) < 0 || json_integer_value(t) >= vocab_n_tokens(voc)) {
                    return api_fail(e, 400, "invalid_value", "`logit_bias[%zu][0]` is not a token id of this model", i);
                }
                if (add_bias(g, (int32_t)json_integer_value(t), bias, e) != 0) return -1;
                continue;
            }
            int32_t *ids = NULL;
            size_t n = 0;
            strata_err err;
            if (tok_tokenize_alloc(voc, json_string_value(t), json_string_length(t), false, true, &ids, &n, &err) != 0) {
                return api_fail(e, 400, "invalid_value", "cannot tokenize `logit_bias[%zu][0]`: %s", i, err.msg);
            }
            for (size_t k = 0; k < n; k++) {
                if (add_bias(g, ids[k], bias, e) != 0) {
                    free(ids);
                    return -1;
                }
            }
            free(ids);
        }
        return 0;
    }
    if (!json_is_object(v)) {
        return api_fail(e, 400, "invalid_type", "`logit_bias` must be an object or an array of [token, bias] pairs");
    }
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        char *end;
        long id = strtol(key, &end, 10);
        if (*key == '\0' || *end != '\0' || id < 0 || id >= vocab_n_tokens(voc)) {
            return api_fail(e, 400, "invalid_value", "`logit_bias` key \"%.40s\" is not a token id of this model", key);
        }
        if (!json_is_number(val) || !isfinite(json_number_value(val)) ||
            fabs(json_number_value(val)) > 100) {
            return api_fail(e, 400, "invalid_value", "`logit_bias[%s]` must be a number in [-100, 100]", key);
        }
        if (add_bias(g, (int32_t)id, (float)json_number_value(val), e) != 0) return -1;
    }
    return 0;
}

/* llama.cpp's sampler chain, in its default order: the stages `samplers`
 * may name. */
enum { ST_PENALTIES, ST_DRY, ST_TOP_N_SIGMA, ST_TOP_K, ST_TYP_P, ST_TOP_P, ST_MIN_P, ST_XTC, ST_TEMP,
       ST_N, ST_INFILL = 100, ST_ADAPTIVE_P, ST_UNKNOWN = -1 };

/* A sampler name as llama.cpp reads it (case aside: canonical, kebab-case,
 * without the underscore, and its few aliases); ST_UNKNOWN otherwise. */
static int sampler_of_name(const char *name)
{
    static const struct {
        const char *name;
        int stage;
    } names[] = {{"penalties", ST_PENALTIES}, {"dry", ST_DRY}, {"top_n_sigma", ST_TOP_N_SIGMA},
                 {"top_k", ST_TOP_K}, {"typ_p", ST_TYP_P}, {"top_p", ST_TOP_P}, {"min_p", ST_MIN_P},
                 {"xtc", ST_XTC}, {"temperature", ST_TEMP}, {"infill", ST_INFILL},
                 {"adaptive_p", ST_ADAPTIVE_P}, {"nucleus", ST_TOP_P}, {"temp", ST_TEMP}, {"typ", ST_TYP_P}};
    char low[32];
    size_t n = strlen(name);
    if (n >= sizeof(low)) return ST_UNKNOWN;
    for (size_t i = 0; i <= n; i++) low[i] = (char)tolower((unsigned char)name[i]);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *c = names[i].name;
        if (strcmp(low, c) == 0) return names[i].stage;
        if (strchr(c, '_') == NULL) continue;
        char kebab[32], bare[32];
        size_t k = 0;
        for (size_t j = 0; c[j]; j++) {
            kebab[j] = c[j] == '_' ? '-' : c[j];
            if (c[j] != '_') bare[k++] = c[j];
        }
        kebab[strlen(c)] = '\0';
        bare[k] = '\0';
        if (strcmp(low, kebab) == 0 || strcmp(low, bare) == 0) return names[i].stage;
    }
    return ST_UNKNOWN;
}

/* llama-server's `samplers`: the stages of the chain to run, as names
 * (["top_k", "temperature"]) or llama.cpp's letters ("kt": e d s k y p m x
 * t); names and letters it does not know are skipped, as llama.cpp skips
 * them. A stage left out does not run (without "temperature" the draw is
 * at temperature 1, greedy no more, as in llama.cpp). The stages run in
 * llama.cpp's default order, so a list in another order (or naming a
 * stage twice) is refused, as are infill and adaptive_p; with Mirostat
 * the list does not matter (llama.cpp's chain is then Mirostat's). */
static int parse_samplers(json_t *o, proto_sampling *s, api_error *e)
{
    json_t *v = json_object_get(o, "samplers");
    if (v == NULL || json_is_null(v)) return 0;
    if (!json_is_array(v) && !json_is_string(v)) {
        return api_fail(e, 400, "invalid_type", "`samplers` must be an array of sampler names or a string of letters");
    }
    bool on[ST_N] = {false};
    int last = -1;
    size_t n = json_is_array(v) ? json_array_size(v) : json_string_length(v);
    for (size_t i = 0; i < n; i++) {
        int st = ST_UNKNOWN;
        if (json_is_array(v)) {
            json_t *name = json_array_get(v, i);
            if (!json_is_string(name)) return api_fail(e, 400, "invalid_type", "`samplers[%zu]` must be a string", i);
            st = sampler_of_name(json_string_value(name));
        } else {
            const char *letters = "edskypmxt", *c = strchr(letters, json_string_value(v)[i]);
            char ch = json_string_value(v)[i];
            st = ch == 'i' ? ST_INFILL : ch == 'a' ? ST_ADAPTIVE_P : c != NULL && ch != '\0' ? (int)(c - letters) : ST_UNKNOWN;
        }
        if (st == ST_UNKNOWN) continue;
        if (st >= ST_N) {
            return api_fail(e, 400, "unsupported_value", "`samplers`: %s is not implemented",
                            st == ST_INFILL ? "infill" : "adaptive_p");
        }
        if (st <= last) {
            return api_fail(e, 400, "unsupported_value",
                            "`samplers`: only llama.cpp's default order is implemented (penalties, dry, "
                            "top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature; any of them left out)");
        }
        on[st] = true;
        last = st;
    }
    if (s->mirostat != 0) return 0;
    if (!on[ST_PENALTIES]) {
        s->repeat_penalty = 1.0f;
        s->presence_penalty = 0.0f;
        s->frequency_penalty = 0.0f;
    }
    if (!on[ST_DRY]) s->dry_multiplier = 0.0f;
    if (!on[ST_TOP_N_SIGMA]) s->top_n_sigma = -1.0f;
    if (!on[ST_TOP_K]) s->top_k = 0;
    if (!on[ST_TYP_P]) s->typical_p = 1.0f;
    if (!on[ST_TOP_P]) s->top_p = 1.0f;
    if (!on[ST_MIN_P]) s->min_p = 0.0f;
    if (!on[ST_XTC]) s->xtc_probability = 0.0f;
    if (!on[ST_TEMP]) {
        s->temperature = 1.0f;
        s->dynatemp_range = 0.0f;
    }
    return 0;
}

/* llama-server's DRY fields: dry_multiplier (0 off), dry_base,
 * dry_allowed_length, dry_penalty_last_n (-1: the context) and
 * dry_sequence_breakers (strings; each cut to PROTO_DRY_BREAKER_BYTES). */
static int parse_dry(json_t *o, const api_env *env, proto_sampling *s, api_error *e)
{
    if (get_num(o, "dry_multiplier", 0, 1e6, &s->dry_multiplier, e) != 0 ||
        get_num(o, "dry_base", 0, 1e6, &s->dry_base, e) != 0) {
        return -1;
    }
    int64_t v = 0;
    bool had = false;
    if (get_int(o, "dry_allowed_length", 0, PROTO_MAX_PENALTY_LAST_N, &v, &had, e) != 0) return -1;
    if (had) s->dry_allowed_length = (int32_t)v;
    had = false;
    if (get_int(o, "dry_penalty_last_n", -1, PROTO_MAX_PENALTY_LAST_N, &v, &had, e) != 0) return -1;
    if (had) {
        if (v < 0) v = env->n_ctx > 0 && env->n_ctx < PROTO_MAX_PENALTY_LAST_N ? env->n_ctx : PROTO_MAX_PENALTY_LAST_N;
        s->dry_penalty_last_n = (int32_t)v;
    }
    json_t *br = json_object_get(o, "dry_sequence_breakers");
    if (br == NULL || json_is_null(br)) return 0;
    if (!json_is_array(br) || json_array_size(br) > PROTO_MAX_DRY_BREAKERS) {
        return api_fail(e, 400, "invalid_value", "`dry_sequence_breakers` must be an array of at most %d strings",
                        PROTO_MAX_DRY_BREAKERS);
    }
    s->n_dry_breakers = 0;
    size_t i;
    json_t *b;
    json_array_foreach(br, i, b) {
        size_t len = json_string_length(b);
        const char *str = json_string_value(b);
        if (str == NULL || len == 0 || strlen(str) != len) {
            return api_fail(e, 400, "invalid_value", "`dry_sequence_breakers[%zu]` must be a non-empty string", i);
        }
        if (len > PROTO_DRY_BREAKER_BYTES) { /* as llama.cpp: cut (at a character's start) */
            len = PROTO_DRY_BREAKER_BYTES;
            while (len > 0 && ((unsigned char)str[len] & 0xC0) == 0x80) len--;
        }
        memcpy(s->dry_breakers[s->n_dry_breakers], str, len);
        s->dry_breakers[s->n_dry_breakers++][len] = '\0';
    }
    return 0;
}

/* `ignore_eos` (llama-server's and vLLM's): true bans the model's
 * end-of-generation tokens for the request (a -infinity bias, as
 * llama-server does), so it ends by `max_tokens`, a stop string, the
 * context or a complete grammar. A bias the request gives such a token is
 * overridden. */
static int parse_ignore_eos(json_t *o, const vocab *voc, api_gen *g, api_error *e)
{
    bool ignore = false;
    if (get_bool(o, "ignore_eos", &ignore, e) != 0) return -1;
    if (!ignore) return 0;
    proto_sampling *s = &g->sampling;
    for (int32_t t = 0; t < vocab_n_tokens(voc); t++) {
        if (!vocab_is_eog(voc, t)) continue;
        size_t i = 0;
        while (i < s->n_logit_bias && s->logit_bias[i].token != t) i++;
        if (i == s->n_logit_bias) {
            proto_bias *nb = realloc(s->logit_bias, (s->n_logit_bias + 1) * sizeof(*nb));
            if (nb == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
            s->logit_bias = nb;
            s->n_logit_bias++;
        }
        s->logit_bias[i] = (proto_bias){.token = t, .bias = -INFINITY};
    }
    return 0;
}

/* /v1/completions: `logprobs` N in [0, 5], the chosen token's and the top N
 * (false or null: none). /v1/chat/completions: `logprobs` true, and
 * `top_logprobs` N in [0, 20], which needs it. */
static int parse_logprobs(json_t *o, enum api_kind kind, api_gen *g, api_error *e)
{
    if (api_is_native(kind)) {
        /* llama-server's n_probs: each token's logprob and the top N */
        int64_t n = 0;
        if (get_int(o, "n_probs", 0, API_MAX_TOP_LOGPROBS_CHAT, &n, NULL, e) != 0) return -1;
        if (n > 0) g->logprobs = (int32_t)n;
        return 0;
    }
    json_t *lp = json_object_get(o, "logprobs");
    if (kind == API_COMPLETION) {
        if (lp == NULL || json_is_null(lp) || json_is_false(lp)) return 0;
        int64_t n = -1;
        if (!json_is_integer(lp)) {
            return api_fail(e, 400, "invalid_type", "`logprobs` must be an integer in [0, %d]",
                            API_MAX_LOGPROBS_COMPLETION);
        }
        if (get_int(o, "logprobs", 0, API_MAX_LOGPROBS_COMPLETION, &n, NULL, e) != 0) return -1;
        g->logprobs = (int32_t)n;
        return 0;
    }
    bool want = false;
    int64_t top = 0;
    bool had_top = false;
    if (get_bool(o, "logprobs", &want, e) != 0) return -1;
    if (get_int(o, "top_logprobs", 0, API_MAX_TOP_LOGPROBS_CHAT, &top, &had_top, e) != 0) return -1;
    if (had_top && !want) {
        return api_fail(e, 400, "invalid_value", "`top_logprobs` requires `logprobs` to be true");
    }
    if (want) g->logprobs = (int32_t)top;
    return 0;
}

/* --- fields Strata knows but does not implement --- */

/* Each predicate says whether a present, non-null value is the one that
 * changes nothing (null always does: it means "absent"). */
static bool inert_false(json_t *v, json_t *o)
{
    (void)o;
    return json_is_false(v);
}

static bool inert_empty(json_t *v, json_t *o)
{
    (void)o;
    return (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0);
}

static bool inert_empty_string(json_t *v, json_t *o)
{
    (void)o;
    return json_is_string(v) && json_string_length(v) == 0;
}

static bool inert_zero(json_t *v, json_t *o)
{
    (void)o;
    return json_is_number(v) && json_number_value(v) == 0;
}

static bool inert_one(json_t *v, json_t *o)
{
    (void)o;
    return json_is_number(v) && json_number_value(v) == 1;
}

static bool inert_two(json_t *v, json_t *o)
{
    (void)o;
    return json_is_integer(v) && json_integer_value(v) == 2;
}

static bool inert_text_only(json_t *v, json_t *o)
{
    (void)o;
    const char *t = json_string_value(json_array_get(v, 0));
    return json_is_array(v) && json_array_size(v) == 1 && t != NULL && strcmp(t, "text") == 0;
}

/* "none", or "auto" with nothing to call (then it cannot call anything). */
static bool inert_choice_of(json_t *v, json_t *o, const char *list)
{
    const char *t = json_string_value(v);
    if (t == NULL) return false;
    if (strcmp(t, "none") == 0) return true;
    json_t *l = json_object_get(o, list);
    return strcmp(t, "auto") == 0 && (l == NULL || json_is_null(l) || json_array_size(l) == 0);
}

static bool inert_tool_choice(json_t *v, json_t *o)
{
    return inert_choice_of(v, o, "tools");
}

static bool inert_function_call(json_t *v, json_t *o)
{
    return inert_choice_of(v, o, "functions");
}

/* best_of == n returns the same n choices (1 without `n`). */
static bool inert_best_of(json_t *v, json_t *o)
{
    json_t *n = json_object_get(o, "n");
    json_int_t want = json_is_integer(n) ? json_integer_value(n) : 1;
    return json_is_integer(v) && json_integer_value(v) == want;
}

/* A penalty window changes nothing while no penalty is on. */
static bool inert_penalty_window(json_t *v, json_t *o)
{
    (void)v;
    static const char *const keys[] = {"repeat_penalty", "presence_penalty", "frequency_penalty"};
    for (size_t i = 0; i < 3; i++) {
        json_t *p = json_object_get(o, keys[i]);
        if (json_is_number(p) && json_number_value(p) != (i == 0 ? 1.0 : 0.0)) return false;
    }
    return true;
}

/* K_CMPL: the OpenAI completions endpoint and llama-server's /completion;
 * K_OAI: the OpenAI endpoints that generate (what /completion implements
 * of llama-server's own fields is refused there only). */
enum { K_CMPL = (1 << API_COMPLETION) | (1 << API_NATIVE) | (1 << API_INFILL), K_CHAT = 1 << API_CHAT,
       K_EMB = 1 << API_EMBEDDING, K_GEN = K_CMPL | K_CHAT,
       K_OAI = (1 << API_COMPLETION) | (1 << API_CHAT), K_NAT = (1 << API_NATIVE) | (1 << API_INFILL) };

typedef struct unsupported_field {
    const char *name;
    unsigned kinds; /* K_* where the field exists */
    bool (*inert)(json_t *v, json_t *o); /* NULL: only null */
    const char *accepted; /* the inert values, for the message; NULL: none */
} unsupported_field;

/* OpenAI's create-completion, create-chat-completion and create-embedding
 * fields that Strata does not implement, then llama-server's and vLLM's
 * common extras that change the result. The README lists them. */
static const unsupported_field k_unsupported[] = {
    {"tools", K_CMPL, inert_empty, "[]"},
    {"tool_choice", K_CMPL, inert_tool_choice, "\"none\", or \"auto\" without tools"},
    {"functions", K_CHAT, inert_empty, "[]"},
    {"function_call", K_CHAT, inert_function_call, "\"none\", or \"auto\" without functions"},
    {"audio", K_CHAT, NULL, NULL},
    {"modalities", K_CHAT, inert_text_only, "[\"text\"]"},
    {"prediction", K_CHAT, NULL, NULL},
    {"web_search_options", K_CHAT, NULL, NULL},
    {"reasoning_effort", K_CMPL, NULL, NULL},
    {"verbosity", K_CHAT, NULL, NULL},
    {"suffix", K_CMPL, inert_empty_string, "\"\""},
    {"echo", K_CHAT, inert_false, "false"},
    {"best_of", K_CMPL, inert_best_of, "`n`"},
    {"dimensions", K_EMB, NULL, NULL},
    /* llama-server */
    {"n_probs", K_OAI, inert_zero, "0 (/completion takes it)"},
    {"penalty_last_n", K_GEN, inert_penalty_window, "any, while no penalty is set (the window is `repeat_last_n`)"},
    {"lora", K_GEN, inert_empty, "[]"},
    {"t_max_predict_ms", K_GEN, inert_zero, "0"},
    {"post_sampling_probs", K_GEN, inert_false, "false"},
    {"return_tokens", K_OAI, inert_false, "false (/completion takes it)"},
    {"embd_normalize", K_EMB, inert_two, "2 (Euclidean, what the engine does)"},
    {"n_indent", K_NAT, inert_zero, "0"},
    {"response_fields", K_NAT, inert_empty, "[]"},
    /* vLLM */
    {"guided_whitespace_pattern", K_GEN, NULL, NULL},
    {"use_beam_search", K_GEN, inert_false, "false"},
    {"length_penalty", K_GEN, inert_one, "1"},
    {"chat_template", K_CHAT, NULL, NULL},
    {"logits_processors", K_GEN, inert_empty, "[]"},
};

/* 400 `unsupported_parameter` naming the first field of the table that the
 * body sets to a value that would change the answer. */
static int check_unsupported(json_t *o, enum api_kind kind, api_error *e)
{
    for (size_t i = 0; i < sizeof(k_unsupported) / sizeof(k_unsupported[0]); i++) {
        const unsupported_field *f = &k_unsupported[i];
        if ((f->kinds & (1u << kind)) == 0) continue;
        json_t *v = json_object_get(o, f->name);
        if (v == NULL || json_is_null(v) || (f->inert != NULL && f->inert(v, o))) continue;
        if (f->accepted != NULL) {
            return api_fail(e, 400, "unsupported_parameter",
                            "unsupported parameter `%s`: Strata does not implement it (accepted: "
                            "null or %s)",
                            f->name, f->accepted);
        }
        return api_fail(e, 400, "unsupported_parameter",
                        "unsupported parameter `%s`: Strata does not implement it (accepted: null)",
                        f->name);
    }
    return 0;
}

/* JSON Schema s (from `where`) compiled into g->grammar. */
static int compile_schema(const json_t *s, const char *where, api_gen *g, api_error *e)
{
    if (!json_is_object(s) && !json_is_boolean(s)) {
        return api_fail(e, 400, "invalid_type", "`%s` must be a JSON Schema object", where);
    }
    strata_err err = {0};
    int rc = json_schema_to_gbnf(s, &g->grammar, &err);
    if (rc == STRATA_ENOMEM) return api_fail(e, 500, "out_of_memory", "out of memory");
    if (rc != 0) return api_fail(e, 400, "invalid_schema", "`%s`: %s", where, err.msg);
    return 0;
}

/* A JSON Schema given as an object or as JSON text (vLLM's guided_json
 * takes both), compiled into g->grammar. */
static int compile_schema_or_text(const json_t *s, const char *where, api_gen *g, api_error *e)
{
    if (!json_is_string(s)) return compile_schema(s, where, g, e);
    json_error_t je;
    json_t *parsed = json_loadb(json_string_value(s), json_string_length(s), 0, &je);
    if (parsed == NULL) {
        return api_fail(e, 400, "invalid_value", "`%s` is a string but not JSON: %s", where, je.text);
    }
    int rc = compile_schema(parsed, where, g, e);
    json_decref(parsed);
    return rc;
}

/* A grammar from json_schema.h's other compilers (regex, choice), or its
 * error as a 400. */
static int take_compiled(int rc, char *gbnf, const strata_err *err, api_gen *g, api_error *e)
{
    if (rc == STRATA_ENOMEM) return api_fail(e, 500, "out_of_memory", "out of memory");
    if (rc != 0) return api_fail(e, 400, "invalid_value", "%s", err->msg);
    g->grammar = gbnf;
    return 0;
}

/* GBNF given as text: llama-server's `grammar` (it then holds the whole
 * output) or vLLM's guided_grammar. */
static int take_gbnf(const json_t *gr, const char *where, api_gen *g, api_error *e)
{
    if (!json_is_string(gr)) return api_fail(e, 400, "invalid_type", "`%s` must be a string (GBNF)", where);
    if (json_string_length(gr) > API_MAX_GRAMMAR_BYTES || strlen(json_string_value(gr)) != json_string_length(gr)) {
        return api_fail(e, 400, "invalid_value", "`%s` must be GBNF text of at most %d bytes", where,
                        API_MAX_GRAMMAR_BYTES);
    }
    g->grammar = strdup(json_string_value(gr));
    if (g->grammar == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
    return 0;
}

/* vLLM's structured output in one of its forms (`guided_regex`,
 * `structured_outputs.regex`, ...): kind is "json", "regex", "choice" or
 * "grammar", v its value, where its name for errors. */
static int take_vllm(const char *kind, const json_t *v, const char *where, api_gen *g, api_error *e)
{
    strata_err err = {0};
    char *gbnf = NULL;
    if (strcmp(kind, "json") == 0) return compile_schema_or_text(v, where, g, e);
    if (strcmp(kind, "grammar") == 0) return take_gbnf(v, where, g, e);
    int rc;
    if (strcmp(kind, "choice") == 0) {
        rc = json_schema_choice_to_gbnf(v, where, &gbnf, &err);
    } else if (!json_is_string(v)) {
        return api_fail(e, 400, "invalid_type", "`%s` must be a string", where);
    } else {
        rc = json_schema_regex_to_gbnf(json_string_value(v), json_string_length(v), where, &gbnf, &err);
    }
    return take_compiled(rc, gbnf, &err, g, e);
}

/* `response_format`, `grammar` and `json_schema` (and vLLM's guided_* and
 * structured_outputs) into g->grammar (api.h). */
static int parse_structured(json_t *o, api_gen *g, api_error *e)
{
    json_t *gr = json_object_get(o, "grammar"), *js = json_object_get(o, "json_schema"),
           *rf = json_object_get(o, "response_format"), *so = json_object_get(o, "structured_outputs");
    const char *type = NULL;
    if (rf != NULL && !json_is_null(rf)) {
        if (!json_is_object(rf)) return api_fail(e, 400, "invalid_type", "`response_format` must be an object");
        type = json_string_value(json_object_get(rf, "type"));
        if (type == NULL) {
            return api_fail(e, 400, "invalid_value", "`response_format.type` must be \"text\", "
                                                       "\"json_object\" or \"json_schema\"");
        }
        if (strcmp(type, "text") == 0) type = NULL;
        else if (strcmp(type, "json_object") != 0 && strcmp(type, "json_schema") != 0) {
            return api_fail(e, 400, "invalid_value", "`response_format.type` must be \"text\", "
                                                       "\"json_object\" or \"json_schema\"; got \"%.40s\"",
                            type);
        }
    }
    /* vLLM's forms: guided_KIND, or structured_outputs.KIND (one of them) */
    static const char *const kinds[] = {"json", "regex", "choice", "grammar"};
    const char *vkind = NULL;
    const json_t *vval = NULL;
    char vwhere[48] = "";
    size_t n_vllm = 0;
    for (size_t k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof(name), "guided_%s", kinds[k]);
        json_t *v = json_object_get(o, name);
        if (v == NULL || json_is_null(v)) continue;
        if (n_vllm++ == 0) {
            vkind = kinds[k];
            vval = v;
            snprintf(vwhere, sizeof(vwhere), "%s", name);
        }
    }
    bool so_json_object = false;
    if (so != NULL && !json_is_null(so)) {
        if (!json_is_object(so)) return api_fail(e, 400, "invalid_type", "`structured_outputs` must be an object");
        json_t *tag = json_object_get(so, "structural_tag"), *ws = json_object_get(so, "whitespace_pattern");
        if (tag != NULL && !json_is_null(tag)) {
            return api_fail(e, 400, "unsupported_parameter",
                            "unsupported parameter `structured_outputs.structural_tag`: Strata does not "
                            "implement it (accepted: null)");
        }
        if (ws != NULL && !json_is_null(ws)) {
            return api_fail(e, 400, "unsupported_parameter",
                            "unsupported parameter `structured_outputs.whitespace_pattern`: JSON output is "
                            "compact, without whitespace (accepted: null)");
        }
        json_t *jo = json_object_get(so, "json_object");
        if (jo != NULL && !json_is_null(jo) && !json_is_boolean(jo)) {
            return api_fail(e, 400, "invalid_type", "`structured_outputs.json_object` must be a boolean");
        }
        if (json_is_true(jo)) {
            n_vllm++;
            so_json_object = true;
        }
        for (size_t k = 0; k < 4; k++) {
            json_t *v = json_object_get(so, kinds[k]);
            if (v == NULL || json_is_null(v)) continue;
            if (n_vllm++ == 0) {
                vkind = kinds[k];
                vval = v;
                snprintf(vwhere, sizeof(vwhere), "structured_outputs.%s", kinds[k]);
            }
        }
    }
    bool has_gr = gr != NULL && !json_is_null(gr) && !(json_is_string(gr) && json_string_length(gr) == 0);
    bool has_js = js != NULL && !json_is_null(js);
    if (n_vllm > 1) {
        return api_fail(e, 400, "invalid_value",
                        "more than one of vLLM's `guided_json`, `guided_regex`, `guided_choice`, "
                        "`guided_grammar` and `structured_outputs` forms is set; send one");
    }
    const char *set[4];
    size_t n_set = 0;
    if (has_gr) set[n_set++] = "grammar";
    if (has_js) set[n_set++] = "json_schema";
    if (type != NULL) set[n_set++] = "response_format";
    if (n_vllm > 0) set[n_set++] = so_json_object ? "structured_outputs" : vwhere;
    if (n_set > 1) {
        return api_fail(e, 400, "invalid_value", "`%s` and `%s` cannot both be set; send one", set[0], set[1]);
    }
    if (has_gr) {
        if (take_gbnf(gr, "grammar", g, e) != 0) return -1;
        g->grammar_given = true;
        return 0;
    }
    if (has_js) return compile_schema(js, "json_schema", g, e);
    if (so_json_object) {
        g->grammar = json_schema_any_object_gbnf();
        return g->grammar == NULL ? api_fail(e, 500, "out_of_memory", "out of memory") : 0;
    }
    if (vkind != NULL) return take_vllm(vkind, vval, vwhere, g, e);
    if (type == NULL) return 0;
    if (strcmp(type, "json_object") == 0) {
        /* llama-server's form may carry a schema */
        json_t *sch = json_object_get(rf, "schema");
        if (sch != NULL && !json_is_null(sch)) return compile_schema(sch, "response_format.schema", g, e);
        g->grammar = json_schema_any_object_gbnf();
        if (g->grammar == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
        return 0;
    }
    json_t *jo = json_object_get(rf, "json_schema");
    if (!json_is_object(jo)) {
        return api_fail(e, 400, "invalid_value",
                        "`response_format.json_schema` must be an object with `name` and `schema`");
    }
    json_t *name = json_object_get(jo, "name"), *strict = json_object_get(jo, "strict");
    if (name != NULL && !json_is_string(name)) {
        return api_fail(e, 400, "invalid_type", "`response_format.json_schema.name` must be a string");
    }
    if (strict != NULL && !json_is_null(strict) && !json_is_boolean(strict)) {
        return api_fail(e, 400, "invalid_type", "`response_format.json_schema.strict` must be a boolean");
    }
    json_t *sch = json_object_get(jo, "schema");
    if (sch == NULL || json_is_null(sch)) {
        return api_fail(e, 400, "invalid_value", "`response_format.json_schema.schema` is required");
    }
    return compile_schema(sch, "response_format.json_schema.schema", g, e);
}

/* --- tools --- */

static bool tool_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-')) {
            return false;
        }
    }
    return true;
}

/* `tools`, `tool_choice` and `parallel_tool_calls` (api.h): *tools_out is
 * the array to render (borrowed from o; NULL: none), g->tool_calls and
 * g->grammar set as the choice says. */
static int parse_tools(const api_env *env, json_t *o, api_gen *g, json_t **tools_out, api_error *e)
{
    *tools_out = NULL;
    json_t *tools = json_object_get(o, "tools"), *choice = json_object_get(o, "tool_choice");
    bool parallel = true;
    if (get_bool(o, "parallel_tool_calls", &parallel, e) != 0) return -1;
    size_t n = 0;
    if (tools != NULL && !json_is_null(tools)) {
        if (!json_is_array(tools)) return api_fail(e, 400, "invalid_type", "`tools` must be an array");
        n = json_array_size(tools);
        if (n > API_MAX_TOOLS) {
            return api_fail(e, 400, "invalid_value", "`tools` has %zu tools; at most %d", n, API_MAX_TOOLS);
        }
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tools, i);
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || type == NULL || strcmp(type, "function") != 0) {
            return api_fail(e, 400, "invalid_value", "`tools[%zu].type` must be \"function\"", i);
        }
        json_t *f = json_object_get(t, "function");
        if (!json_is_object(f)) return api_fail(e, 400, "invalid_value", "`tools[%zu].function` must be an object", i);
        json_t *name = json_object_get(f, "name"), *desc = json_object_get(f, "description"),
               *params = json_object_get(f, "parameters");
        if (!json_is_string(name) || !tool_name_ok(json_string_value(name), json_string_length(name))) {
            return api_fail(e, 400, "invalid_value",
                            "`tools[%zu].function.name` must be 1 to 64 letters, digits, '_' or '-'", i);
        }
        if (desc != NULL && !json_is_null(desc) && !json_is_string(desc)) {
            return api_fail(e, 400, "invalid_type", "`tools[%zu].function.description` must be a string", i);
        }
        if (params != NULL && !json_is_null(params) && !json_is_object(params)) {
            return api_fail(e, 400, "invalid_type",
                            "`tools[%zu].function.parameters` must be a JSON Schema object", i);
        }
        for (size_t k = 0; k < i; k++) {
            json_t *other = json_object_get(json_object_get(json_array_get(tools, k), "function"), "name");
            if (json_equal(other, name)) {
                return api_fail(e, 400, "invalid_value", "`tools[%zu].function.name` \"%s\" is declared twice",
                                i, json_string_value(name));
            }
        }
    }
    /* tool_choice: the named tool's index, or -1 for any */
    const char *mode = n > 0 ? "auto" : "none";
    long named = -1;
    if (choice != NULL && !json_is_null(choice)) {
        if (json_is_string(choice)) {
            mode = json_string_value(choice);
            if (strcmp(mode, "auto") != 0 && strcmp(mode, "none") != 0 && strcmp(mode, "required") != 0) {
                return api_fail(e, 400, "invalid_value", "`tool_choice` must be \"auto\", \"none\", \"required\" "
                                                           "or {\"type\":\"function\",\"function\":{\"name\":...}}");
            }
        } else {
            const char *type = json_string_value(json_object_get(choice, "type"));
            json_t *nm = json_object_get(json_object_get(choice, "function"), "name");
            if (!json_is_object(choice) || type == NULL || strcmp(type, "function") != 0 || !json_is_string(nm)) {
                return api_fail(e, 400, "invalid_value", "`tool_choice` must be \"auto\", \"none\", \"required\" "
                                                           "or {\"type\":\"function\",\"function\":{\"name\":...}}");
            }
            for (size_t i = 0; i < n && named < 0; i++) {
                if (json_equal(json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"), nm)) {
                    named = (long)i;
                }
            }
            if (named < 0) {
                return api_fail(e, 400, "invalid_value", "`tool_choice` names the function \"%.64s\", which `tools` does not declare",
                                json_string_value(nm));
            }
            mode = "required";
        }
    }
    if (n == 0) {
        if (strcmp(mode, "required") == 0) {
            return api_fail(e, 400, "invalid_value", "`tool_choice` \"required\" needs `tools`");
        }
        return 0;
    }
    *tools_out = tools;
    if (strcmp(mode, "none") == 0) return 0; /* the model sees the tools; no call is parsed */
    const char *family = NULL;
    g->tool_fmt = tool_format_detect(env->chat_template, &family);
    if (g->tool_fmt == TOOL_FORMAT_UNSUPPORTED) {
        return api_fail(e, 400, "unsupported_parameter",
                        "unsupported parameter `tools`: this model's template writes tool calls in the "
                        "`%s` syntax, which Strata does not parse (accepted: `tool_choice` \"none\")",
                        family);
    }
    g->tools = json_incref(tools); /* the calls' parameter types */
    if (strcmp(mode, "required") != 0) {
        /* auto: free text or a call, parsed; but a reply held to a
         * `response_format` is that format's, never a call */
        g->tool_calls = g->grammar == NULL;
        return 0;
    }
    g->tool_calls = true;
    if (g->grammar != NULL) {
        return api_fail(e, 400, "invalid_value",
                        "`tool_choice` that forces a call and a `response_format`, `grammar` or "
                        "`json_schema` cannot both be set; send one");
    }
    tool_decl decl[API_MAX_TOOLS];
    size_t n_decl = 0;
    for (size_t i = 0; i < n; i++) {
        if (named >= 0 && (long)i != named) continue;
        json_t *f = json_object_get(json_array_get(tools, i), "function");
        json_t *params = json_object_get(f, "parameters");
        decl[n_decl++] = (tool_decl){json_string_value(json_object_get(f, "name")),
                                     json_is_null(params) ? NULL : params};
    }
    strata_err err = {0};
    int rc = tool_calls_grammar(g->tool_fmt, decl, n_decl, parallel && named < 0, &g->grammar, &err);
    if (rc == STRATA_ENOMEM) return api_fail(e, 500, "out_of_memory", "out of memory");
    if (rc != 0) return api_fail(e, 400, "invalid_schema", "`tools`: %s", err.msg);
    return 0;
}

/* `reasoning_format` (llama-server's field): "auto" or "deepseek" split the
 * reply's reasoning (reasoning.h) into `reasoning_content`, "none" leaves
 * it in `content`; absent, the server's --reasoning-format decides. A THINK
 * reply under the server's grammar (a JSON Schema's, a forced call's) may
 * reason first: the grammar gets the block in front once the prompt is
 * rendered (reasoning_grammar). A reply held to a `grammar` as given, or
 * to any grammar in the other formats, has no reasoning; a
 * harmony or functionary v3.2 reply parsed for calls is always split (its
 * calls are messages), and functionary v3.2's framing is split whatever
 * reasoning_format says. Runs after parse_tools. */
static int parse_reasoning(const api_env *env, json_t *o, api_gen *g, api_error *e)
{
    bool on = !env->reasoning_off;
    json_t *f = json_object_get(o, "reasoning_format");
    if (f != NULL && !json_is_null(f)) {
        const char *v = json_string_value(f);
        if (v == NULL || (strcmp(v, "none") != 0 && strcmp(v, "auto") != 0 && strcmp(v, "deepseek") != 0)) {
            return api_fail(e, 400, "invalid_value", "`reasoning_format` must be \"auto\", \"deepseek\" or \"none\"");
        }
        on = strcmp(v, "none") != 0;
    }
    reasoning_format detected = reasoning_detect(env->chat_template);
    /* functionary v3.2's framing is split whatever the request says */
    g->reasoning = on || detected == REASONING_RECIPIENTS ? detected : REASONING_NONE;
    if (g->grammar != NULL && (g->grammar_given || g->reasoning != REASONING_THINK)) {
        g->reasoning = REASONING_NONE;
    }
    if (g->tool_calls && g->tool_fmt == TOOL_FORMAT_HARMONY) g->reasoning = REASONING_HARMONY;
    if (g->tool_calls && g->tool_fmt == TOOL_FORMAT_RECIPIENTS) g->reasoning = REASONING_RECIPIENTS;
    return 0;
}

/* An assistant message's `tool_calls` in the copy c of messages[i]:
 * each `function.arguments` given as a JSON string becomes the object it
 * holds. */
static int parse_msg_tool_calls(json_t *c, size_t i, api_error *e)
{
    json_t *tcs = json_object_get(c, "tool_calls");
    if (tcs == NULL || json_is_null(tcs)) {
        json_object_del(c, "tool_calls");
        return 0;
    }
    if (!json_is_array(tcs)) return api_fail(e, 400, "invalid_type", "`messages[%zu].tool_calls` must be an array", i);
    size_t k;
    json_t *tc;
    json_array_foreach(tcs, k, tc) {
        json_t *f = json_object_get(tc, "function");
        if (!json_is_object(tc) || !json_is_object(f) || !json_is_string(json_object_get(f, "name"))) {
            return api_fail(e, 400, "invalid_value",
                            "`messages[%zu].tool_calls[%zu]` must have `function` with a `name`", i, k);
        }
        json_t *args = json_object_get(f, "arguments");
        if (json_is_string(args)) {
            json_t *v = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL);
            if (v == NULL) {
                return api_fail(e, 400, "invalid_value",
                                "`messages[%zu].tool_calls[%zu].function.arguments` is not JSON", i, k);
            }
            json_object_set_new(f, "arguments", v);
        } else if (args == NULL || json_is_null(args)) {
            json_object_set_new(f, "arguments", json_object());
        } else if (!json_is_object(args)) {
            return api_fail(e, 400, "invalid_type",
                            "`messages[%zu].tool_calls[%zu].function.arguments` must be a JSON string", i, k);
        }
    }
    return 0;
}

static int tokenize(const vocab *voc, const char *text, size_t len, bool add_special, api_gen *g,
                    api_error *e)
{
    strata_err err;
    if (tok_tokenize_alloc(voc, text, len, add_special, true, &g->prompt, &g->n_prompt, &err) != 0) {
        return api_fail(e, 400, "invalid_prompt", "cannot tokenize the prompt: %s", err.msg);
    }
    return 0;
}

/* One prompt: a string (tokenized with BOS), an array of token ids, or for
 * llama-server's /completion (native) an array of ids and strings, whose
 * strings are tokenized without BOS but for a first one, as llama-server
 * does. */
static int read_prompt(const api_env *env, json_t *v, const char *what, bool native, api_input *out,
                       api_error *e)
{
    memset(out, 0, sizeof(*out));
    strata_err err;
    if (json_is_string(v)) {
        if (tok_tokenize_alloc(env->voc, json_string_value(v), json_string_length(v), true, true, &out->ids,
                               &out->n, &err) != 0) {
            return api_fail(e, 400, "invalid_prompt", "cannot tokenize `%s`: %s", what, err.msg);
        }
        return 0;
    }
    size_t k = json_array_size(v);
    if (k == 0) return api_fail(e, 400, "invalid_value", "`%s` is an empty array", what);
    bool mixed = false;
    for (size_t i = 0; i < k; i++) mixed = mixed || !json_is_integer(json_array_get(v, i));
    if (!mixed || !native) {
        out->ids = malloc(k * sizeof(int32_t));
        if (out->ids == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
        out->n = k;
        return read_ids(v, what, env->voc, out->ids, e);
    }
    size_t cap = 0;
    for (size_t i = 0; i < k; i++) {
        json_t *t = json_array_get(v, i);
        int32_t one, *ids = &one;
        size_t n = 1;
        if (json_is_string(t)) {
            if (tok_tokenize_alloc(env->voc, json_string_value(t), json_string_length(t), i == 0, true, &ids, &n,
                                   &err) != 0) {
                return api_fail(e, 400, "invalid_prompt", "cannot tokenize `%s[%zu]`: %s", what, i, err.msg);
            }
        } else if (!json_is_integer(t) || json_integer_value(t) < 0 ||
                   json_integer_value(t) >= vocab_n_tokens(env->voc)) {
            return api_fail(e, 400, "invalid_value", "`%s[%zu]` is neither a token id of this model (0..%d) nor a string",
                            what, i, vocab_n_tokens(env->voc) - 1);
        } else {
            one = (int32_t)json_integer_value(t);
        }
        if (out->n + n > cap) {
            size_t nc = cap ? cap : 64;
            while (nc < out->n + n) nc *= 2;
            int32_t *g2 = realloc(out->ids, nc * sizeof(int32_t));
            if (g2 == NULL) {
                if (ids != &one) free(ids);
                return api_fail(e, 500, "out_of_memory", "out of memory");
            }
            out->ids = g2;
            cap = nc;
        }
        if (n > 0) memcpy(out->ids + out->n, ids, n * sizeof(int32_t));
        out->n += n;
        if (ids != &one) free(ids);
    }
    return 0;
}

/* `prompt`: a string, an array of token ids (for /completion also mixed
 * with strings), or several prompts, an array of strings or of such arrays
 * (OpenAI's forms, one kind per request on /v1/completions; llama-server's
 * take both kinds at once): the first into g->prompt, the rest into
 * g->more. */
static int parse_prompt(const api_env *env, json_t *o, const char *key, api_gen *g, api_error *e)
{
    json_t *p = json_object_get(o, key);
    bool native = api_is_native(g->kind);
    g->n_prompts = 1;
    if (p == NULL) return api_fail(e, 400, "missing_field", "`%s` is required", key);
    const char *forms = native ? "a string, an array of token ids and strings, or an array of those"
                               : "a string, an array of token ids, an array of strings or an array of "
                                 "arrays of token ids";
    json_t *first = json_array_get(p, 0);
    api_input in;
    if (json_is_string(p) || (json_is_array(p) && json_is_integer(first))) {
        if (read_prompt(env, p, key, native, &in, e) != 0) {
            free(in.ids);
            return -1;
        }
        g->prompt = in.ids;
        g->n_prompt = in.n;
        return 0;
    }
    size_t k = json_array_size(p);
    if (k == 0 || (!json_is_string(first) && !json_is_array(first))) {
        return api_fail(e, 400, "invalid_type", "`%s` must be %s", key, forms);
    }
    if (k * g->n_choices > API_MAX_PROMPT_CHOICES) {
        return api_fail(e, 400, "invalid_value", "`%s` has %zu prompts of %zu choices each; at most %d in all",
                        key, k, g->n_choices, API_MAX_PROMPT_CHOICES);
    }
    if (k > 1 && (g->more = calloc(k - 1, sizeof(*g->more))) == NULL) {
        return api_fail(e, 500, "out_of_memory", "out of memory");
    }
    g->n_prompts = k;
    for (size_t i = 0; i < k; i++) {
        json_t *v = json_array_get(p, i);
        char what[48];
        snprintf(what, sizeof(what), "%s[%zu]", key, i);
        bool same = json_is_string(first) ? json_is_string(v) : json_is_array(v);
        if (!(json_is_string(v) || json_is_array(v)) || (!native && !same)) {
            return api_fail(e, 400, "invalid_type", "`%s` must be %s", key, forms);
        }
        if (read_prompt(env, v, what, native, &in, e) != 0) {
            free(in.ids);
            return -1;
        }
        if (i == 0) {
            g->prompt = in.ids;
            g->n_prompt = in.n;
        } else {
            g->more[i - 1] = in;
        }
    }
    return 0;
}

/* Appends ids[0..n) to *a (of *n_a, capacity *cap). -1: out of memory. */
static int ids_append(int32_t **a, size_t *n_a, size_t *cap, const int32_t *ids, size_t n)
{
    if (*n_a + n > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *n_a + n) c *= 2;
        int32_t *p = realloc(*a, c * sizeof(int32_t));
        if (p == NULL) return -1;
        *a = p;
        *cap = c;
    }
    if (n > 0) memcpy(*a + *n_a, ids, n * sizeof(int32_t));
    *n_a += n;
    return 0;
}

int api_infill_tokens(const vocab *v, const int32_t *extra, size_t n_extra, const int32_t *prefix,
                      size_t n_prefix, const int32_t *suffix, size_t n_suffix, const int32_t *prompt,
                      size_t n_prompt, int64_t n_ctx, int64_t n_predict, int32_t **out, size_t *n)
{
    const vocab_special *sp = vocab_specials(v);
    const int64_t n_batch = 2048; /* llama-server's default batch: its budgets' unit */
    size_t pre_take = n_prefix < (size_t)(3 * (n_batch / 4)) ? n_prefix : (size_t)(3 * (n_batch / 4));
    int64_t suf_room = n_batch / 4 - (2 + (int64_t)n_prompt);
    size_t suf_take = suf_room <= 0 ? 0 : n_suffix < (size_t)suf_room ? n_suffix : (size_t)suf_room;
    int64_t extra_room = n_ctx - n_batch - 2 * n_predict;
    size_t extra_take = extra_room <= 0 ? 0 : n_extra < (size_t)extra_room ? n_extra : (size_t)extra_room;
    int32_t *a = NULL;
    size_t n_a = 0, cap = 0;
    int32_t bos = sp->bos, pre = sp->fim_pre, suf = sp->fim_suf, mid = sp->fim_mid;
    /* (no arithmetic on a NULL part: an absent one takes nothing) */
    int rc = extra_take > 0 ? ids_append(&a, &n_a, &cap, extra + (n_extra - extra_take), extra_take) : 0;
    if (rc == 0 && vocab_adds_bos(v) && bos >= 0) rc = ids_append(&a, &n_a, &cap, &bos, 1);
    if (rc == 0) rc = ids_append(&a, &n_a, &cap, &pre, 1);
    if (rc == 0 && pre_take > 0) rc = ids_append(&a, &n_a, &cap, prefix + (n_prefix - pre_take), pre_take);
    if (rc == 0) rc = ids_append(&a, &n_a, &cap, prompt, n_prompt);
    if (rc == 0) rc = ids_append(&a, &n_a, &cap, &suf, 1);
    if (rc == 0) rc = ids_append(&a, &n_a, &cap, suffix, suf_take);
    if (rc == 0) rc = ids_append(&a, &n_a, &cap, &mid, 1);
    if (rc != 0) {
        free(a);
        return -1;
    }
    *out = a;
    *n = n_a;
    return 0;
}

/* Text tokenized as llama-server tokenizes /infill's parts: no BOS, and
 * special-token texts as plain text; appended to *a. */
static int tokenize_part(const vocab *v, const char *text, size_t len, int32_t **a, size_t *n_a,
                         size_t *cap, const char *what, api_error *e)
{
    int32_t *ids = NULL;
    size_t n = 0;
    strata_err err;
    if (tok_tokenize_alloc(v, text, len, false, false, &ids, &n, &err) != 0) {
        return api_fail(e, 400, "invalid_prompt", "cannot tokenize %s: %s", what, err.msg);
    }
    int rc = ids_append(a, n_a, cap, ids, n);
    free(ids);
    return rc == 0 ? 0 : api_fail(e, 500, "out_of_memory", "out of memory");
}

/* llama-server's /infill: input_prefix, input_suffix (strings), input_extra
 * ([{"filename", "text"}]) and prompt (text after the prefix, or ids)
 * into g->prompt by api_infill_tokens. 501 for a model without
 * fill-in-the-middle tokens. */
static int parse_infill(const api_env *env, json_t *o, api_gen *g, api_error *e)
{
    const vocab *v = env->voc;
    const vocab_special *sp = vocab_specials(v);
    g->n_prompts = 1;
    if (sp->fim_pre < 0 || sp->fim_suf < 0 || sp->fim_mid < 0) {
        return api_fail(e, 501, "not_supported",
                        "this model has no fill-in-the-middle tokens (prefix, suffix and middle): /infill needs a "
                        "code model that has them");
    }
    const char *keys[2] = {"input_prefix", "input_suffix"};
    int32_t *parts[2] = {NULL, NULL}, *extra = NULL, *prompt = NULL;
    size_t n_parts[2] = {0, 0}, caps[2] = {0, 0}, n_extra = 0, cap_extra = 0, n_prompt = 0;
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        json_t *t = json_object_get(o, keys[i]);
        if (t == NULL || json_is_null(t)) continue;
        if (!json_is_string(t)) {
            rc = api_fail(e, 400, "invalid_type", "`%s` must be a string", keys[i]);
            break;
        }
        char what[32];
        snprintf(what, sizeof(what), "`%s`", keys[i]);
        rc = tokenize_part(v, json_string_value(t), json_string_length(t), &parts[i], &n_parts[i], &caps[i],
                           what, e);
    }
    json_t *x = json_object_get(o, "input_extra");
    if (rc == 0 && x != NULL && !json_is_null(x) && !json_is_array(x)) {
        rc = api_fail(e, 400, "invalid_type", "`input_extra` must be an array of {\"filename\", \"text\"}");
    }
    if (rc == 0 && sp->fim_rep >= 0) {
        rc = ids_append(&extra, &n_extra, &cap_extra, &sp->fim_rep, 1) == 0
                 ? tokenize_part(v, "myproject\n", 10, &extra, &n_extra, &cap_extra, "the repository", e)
                 : api_fail(e, 500, "out_of_memory", "out of memory");
    }
    for (size_t i = 0; rc == 0 && i < json_array_size(x); i++) {
        json_t *c = json_array_get(x, i), *text = json_object_get(c, "text"), *file = json_object_get(c, "filename");
        if (!json_is_object(c) || !(text == NULL || json_is_string(text)) || !(file == NULL || json_is_string(file))) {
            rc = api_fail(e, 400, "invalid_type", "`input_extra[%zu]` must be {\"filename\": string, \"text\": string}",
                          i);
            break;
        }
        char what[48];
        snprintf(what, sizeof(what), "`input_extra[%zu]`", i);
        if (sp->fim_sep >= 0) {
            const char *name = file ? json_string_value(file) : "tmp";
            size_t len = file ? json_string_length(file) : 3;
            char *line = malloc(len + 2);
            if (line == NULL || ids_append(&extra, &n_extra, &cap_extra, &sp->fim_sep, 1) != 0) {
                free(line);
                rc = api_fail(e, 500, "out_of_memory", "out of memory");
                break;
            }
            memcpy(line, name, len);
            line[len] = '\n';
            rc = tokenize_part(v, line, len + 1, &extra, &n_extra, &cap_extra, what, e);
            free(line);
        } else {
            rc = tokenize_part(v, "\n\n--- snippet ---\n\n", 19, &extra, &n_extra, &cap_extra, what, e);
        }
        if (rc == 0 && text != NULL) {
            rc = tokenize_part(v, json_string_value(text), json_string_length(text), &extra, &n_extra, &cap_extra,
                               what, e);
        }
    }
    if (rc == 0 && sp->fim_sep >= 0) {
        rc = ids_append(&extra, &n_extra, &cap_extra, &sp->fim_sep, 1) == 0
                 ? tokenize_part(v, "filename\n", 9, &extra, &n_extra, &cap_extra, "the file name", e)
                 : api_fail(e, 500, "out_of_memory", "out of memory");
    }
    /* the prompt: text (special tokens parsed, no BOS) or ids */
    json_t *p = json_object_get(o, "prompt");
    if (rc == 0 && json_is_string(p)) {
        strata_err err;
        if (tok_tokenize_alloc(v, json_string_value(p), json_string_length(p), false, true, &prompt, &n_prompt,
                               &err) != 0) {
            rc = api_fail(e, 400, "invalid_prompt", "cannot tokenize `prompt`: %s", err.msg);
        }
    } else if (rc == 0 && json_is_array(p) && json_array_size(p) > 0) {
        n_prompt = json_array_size(p);
        prompt = malloc(n_prompt * sizeof(int32_t));
        rc = prompt == NULL ? api_fail(e, 500, "out_of_memory", "out of memory") : read_ids(p, "prompt", v, prompt, e);
    } else if (rc == 0 && p != NULL && !json_is_null(p) && !(json_is_array(p) && json_array_size(p) == 0)) {
        rc = api_fail(e, 400, "invalid_type", "`prompt` must be a string or an array of token ids");
    }
    if (rc == 0 && api_infill_tokens(v, extra, n_extra, parts[0], n_parts[0], parts[1], n_parts[1], prompt,
                                     n_prompt, env->n_ctx, g->max_tokens, &g->prompt, &g->n_prompt) != 0) {
        rc = api_fail(e, 500, "out_of_memory", "out of memory");
    }
    free(parts[0]);
    free(parts[1]);
    free(extra);
    free(prompt);
    return rc;
}

/* One embeddings input: what[] are its token ids (a JSON array of integers,
 * checked against the vocab) or its text (tokenized with BOS); neither may
 * be empty, nor longer than the context. */
/* vLLM's truncate_prompt_tokens: only the last `keep` ids stay (0: all). */
static void keep_last(int32_t *ids, size_t *n, size_t keep)
{
    if (keep == 0 || *n <= keep) return;
    memmove(ids, ids + (*n - keep), keep * sizeof(int32_t));
    *n = keep;
}

static int parse_input(const api_env *env, json_t *v, const char *what, api_input *in, size_t keep,
                       api_error *e)
{
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return api_fail(e, 400, "invalid_value", "`%s` is an empty string", what);
        strata_err err;
        if (tok_tokenize_alloc(env->voc, json_string_value(v), json_string_length(v), true, true,
                               &in->ids, &in->n, &err) != 0) {
            return api_fail(e, 400, "invalid_prompt", "cannot tokenize `%s`: %s", what, err.msg);
        }
    } else {
        size_t n = json_array_size(v);
        if (n == 0) return api_fail(e, 400, "invalid_value", "`%s` is an empty array", what);
        in->ids = malloc(n * sizeof(*in->ids));
        if (in->ids == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
        if (read_ids(v, what, env->voc, in->ids, e) != 0) return -1;
        in->n = n;
    }
    if (in->n == 0) return api_fail(e, 400, "invalid_prompt", "`%s` has no tokens", what);
    keep_last(in->ids, &in->n, keep);
    if (env->n_ctx > 0 && (int64_t)in->n > env->n_ctx) {
        return api_fail(e, 400, "context_length_exceeded", "`%s` has %zu tokens; the context holds %lld",
                        what, in->n, (long long)env->n_ctx);
    }
    return 0;
}

/* /v1/embeddings `input`: a string, an array of strings, an array of token
 * ids, or an array of arrays of token ids (what OpenAI takes); one kind per
 * request, at most API_MAX_EMBED_INPUTS items. */
static int parse_inputs(const api_env *env, json_t *o, api_gen *g, api_error *e)
{
    json_t *in = json_object_get(o, "input");
    if (in == NULL || json_is_null(in)) return api_fail(e, 400, "missing_field", "`input` is required");
    const char *forms = "a string, an array of strings, an array of token ids or an array of "
                        "arrays of token ids";
    if (!json_is_string(in) && !json_is_array(in)) {
        return api_fail(e, 400, "invalid_type", "`input` must be %s", forms);
    }
    if (json_is_array(in) && json_array_size(in) == 0) {
        return api_fail(e, 400, "invalid_value", "`input` is an empty array");
    }
    json_t *first = json_is_array(in) ? json_array_get(in, 0) : NULL;
    /* one input: a string, or token ids */
    bool single = json_is_string(in) || json_is_integer(first);
    size_t n = single ? 1 : json_array_size(in);
    if (!single && !json_is_string(first) && !json_is_array(first)) {
        return api_fail(e, 400, "invalid_type", "`input` must be %s; `input[0]` is neither", forms);
    }
    if (n > API_MAX_EMBED_INPUTS) {
        return api_fail(e, 400, "invalid_value", "`input` has %zu items; at most %d", n,
                        API_MAX_EMBED_INPUTS);
    }
    g->inputs = calloc(n, sizeof(*g->inputs));
    if (g->inputs == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
    g->n_inputs = n;
    if (single) return parse_input(env, in, "input", &g->inputs[0], g->truncate, e);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(in, i);
        char what[48];
        snprintf(what, sizeof(what), "input[%zu]", i);
        if (json_is_string(first) ? !json_is_string(v) : !json_is_array(v)) {
            return api_fail(e, 400, "invalid_type", "`%s` must be %s, as `input[0]` is", what,
                            json_is_string(first) ? "a string" : "an array of token ids");
        }
        if (parse_input(env, v, what, &g->inputs[i], g->truncate, e) != 0) return -1;
    }
    return 0;
}

/* firefunction v2's template reads the tools as `functions` (their JSON,
 * indented; "" without tools) and the time as `datetime`, not `tools`:
 * both are set in extra (a new object when NULL) unless the request's
 * chat_template_kwargs set them. 0, or -1 out of memory. */
static int firefunction_vars(const json_t *tools, json_t **extra)
{
    if (*extra == NULL && (*extra = json_object()) == NULL) return -1;
    if (json_object_get(*extra, "functions") == NULL) {
        char *fs = tools != NULL ? json_dumps(tools, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        json_t *v = json_string(fs != NULL ? fs : "");
        free(fs);
        if (v == NULL || json_object_set_new(*extra, "functions", v) != 0) return -1;
    }
    if (json_object_get(*extra, "datetime") == NULL) {
        char buf[64];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(buf, sizeof(buf), "%b %d %Y %H:%M:%S GMT", &tm);
        if (json_object_set_new(*extra, "datetime", json_string(buf)) != 0) return -1;
    }
    return 0;
}

/* The template's extra variables: `chat_template_kwargs` (an object of
 * variables, llama-server's and vLLM's field: {"enable_thinking": false}
 * for Qwen3) and `reasoning_effort` (as the variable of that name, for
 * templates that read it, such as gpt-oss's; refused by name for the
 * others, where it would change nothing); firefunction's variables
 * (firefunction_vars). *out: a new object, or NULL. */
static int template_extra(const char *tmpl, json_t *o, const json_t *tools, json_t **out,
                          api_error *e)
{
    *out = NULL;
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    json_t *effort = json_object_get(o, "reasoning_effort");
    if (kw != NULL && !json_is_null(kw) && !json_is_object(kw)) {
        return api_fail(e, 400, "invalid_type", "`chat_template_kwargs` must be an object");
    }
    if (effort != NULL && !json_is_null(effort)) {
        const char *v = json_string_value(effort);
        if (v == NULL || (strcmp(v, "low") != 0 && strcmp(v, "medium") != 0 && strcmp(v, "high") != 0)) {
            return api_fail(e, 400, "invalid_value", "`reasoning_effort` must be \"low\", \"medium\" or \"high\"");
        }
        if (strstr(tmpl, "reasoning_effort") == NULL) {
            return api_fail(e, 400, "unsupported_parameter",
                            "unsupported parameter `reasoning_effort`: this model's chat template does not "
                            "read it (`chat_template_kwargs` passes variables a template does read)");
        }
    } else {
        effort = NULL;
    }
    bool fire = tool_format_detect(tmpl, NULL) == TOOL_FORMAT_FIREFUNCTION;
    if (!json_is_object(kw) && effort == NULL && !fire) return 0;
    *out = json_is_object(kw) ? json_deep_copy(kw) : json_object();
    if (*out == NULL) return api_fail(e, 500, "out_of_memory", "out of memory");
    if (effort != NULL) json_object_set(*out, "reasoning_effort", effort);
    if (fire && firefunction_vars(tools, out) != 0) {
        json_decref(*out);
        *out = NULL;
        return api_fail(e, 500, "out_of_memory", "out of memory");
    }
    return 0;
}

const char *api_chat_template(const char *tmpl)
{
    return tmpl != NULL ? tmpl : k_chatml;
}

bool api_template_takes_system(const char *tmpl, const char *bos, const char *eos)
{
    static const char needle[] = "<strata system probe 7f3a>";
    if (tmpl == NULL) tmpl = k_chatml;
    chat_template_opts opts = {.add_generation_prompt = true, .bos_token = bos, .eos_token = eos};
    const chat_template_opts *o = &opts;
    json_t *probe = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", needle, "role",
                              "user", "content", "Hello");
    if (probe == NULL) return true;
    char *out = NULL;
    size_t n = 0;
    strata_err err;
    bool ok = chat_template_render(tmpl, strlen(tmpl), probe, o, &out, &n, &err) == 0 &&
              strstr(out, needle) != NULL;
    free(out);
    json_decref(probe);
    return ok;
}

/* For a template that does not take system messages (api_env.merge_system,
 * from api_template_takes_system), what llama-server does: system texts
 * join (by "\n") the next user message's content ahead of it
 * ("SYSTEM\nUSER"); one followed by another role, or by nothing, becomes a
 * user message of its own. msgs is changed in place. 0, or -1 out of
 * memory. */
static int merge_system_messages(json_t *msgs)
{
    json_t *out = json_array();
    sbuf pending = {0};
    int rc = out != NULL ? 0 : -1;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (rc != 0) break;
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *c = json_object_get(m, "content");
        if (role != NULL && strcmp(role, "system") == 0 && json_is_string(c)) {
            if (pending.len > 0 && sbuf_append(&pending, "\n", 1) != 0) rc = -1;
            if (rc == 0 && sbuf_append(&pending, json_string_value(c), json_string_length(c)) != 0) rc = -1;
            continue;
        }
        if (pending.len > 0 && role != NULL && strcmp(role, "user") == 0 && json_is_string(c)) {
            if (json_string_length(c) > 0 &&
                (sbuf_append(&pending, "\n", 1) != 0 ||
                 sbuf_append(&pending, json_string_value(c), json_string_length(c)) != 0)) {
                rc = -1;
            }
            json_t *u = json_deep_copy(m);
            if (rc == 0 && (u == NULL || json_object_set_new(u, "content", json_stringn(pending.data, pending.len)) != 0 ||
                            json_array_append_new(out, u) != 0)) {
                rc = -1;
            }
            pending.len = 0;
            continue;
        }
        if (pending.len > 0) {
            json_t *u = json_pack("{s:s, s:s%}", "role", "user", "content", pending.data, pending.len);
            if (u == NULL || json_array_append_new(out, u) != 0) rc = -1;
            pending.len = 0;
        }
        if (rc == 0 && json_array_append(out, m) != 0) rc = -1;
    }
    if (rc == 0 && pending.len > 0) {
        json_t *u = json_pack("{s:s, s:s%}", "role", "user", "content", pending.data, pending.len);
        if (u == NULL || json_array_append_new(out, u) != 0) rc = -1;
    }
    if (rc == 0 && json_array_clear(msgs) == 0) rc = json_array_extend(msgs, out);
    sbuf_free(&pending);
    json_decref(out);
    return rc == 0 ? 0 : -1;
}

/* messages → a prompt with the model's template. Contents given as parts
 * ([{"type":"text","text":...}]) are joined into one string first. */
static bool py_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* continue_final_message: the rendered prompt[0..*n) cut just after the
 * final message's text, so that the model continues it. As Hugging Face's
 * apply_chat_template does it: the last occurrence of the text without
 * its surrounding whitespace; the cut keeps the text's trailing whitespace
 * where the template kept it. False when the text is not there. */
static bool continue_final_cut(char *prompt, size_t *n, const char *final)
{
    size_t fl = strlen(final), a = 0, b = fl;
    while (a < fl && py_space(final[a])) a++;
    while (b > a && py_space(final[b - 1])) b--;
    const char *stripped = final + a;
    size_t sl = b - a, ll = fl - a; /* stripped, lstripped lengths */
    size_t loc = SIZE_MAX;
    for (size_t i = *n + 1; i-- > 0;) {
        if (i + sl <= *n && memcmp(prompt + i, stripped, sl) == 0) {
            loc = i;
            break;
        }
    }
    if (loc == SIZE_MAX) return false;
    bool kept = loc + ll <= *n && ll == fl && memcmp(prompt + loc, final, fl) == 0;
    *n = loc + (kept ? ll : sl);
    prompt[*n] = '\0';
    return true;
}

static int parse_messages(const api_env *env, json_t *o, const json_t *tools, api_gen *g,
                          api_error *e)
{
    json_t *msgs = json_object_get(o, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        return api_fail(e, 400, "invalid_value", "`messages` must be a non-empty array");
    }
    json_t *norm = json_array();
    size_t i;
    json_t *m;
    int rc = 0;
    json_array_foreach(msgs, i, m) {
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_object(m) || !json_is_string(role)) {
            rc = api_fail(e, 400, "invalid_value", "`messages[%zu].role` must be a string", i);
            break;
        }
        json_t *c = json_deep_copy(m);
        if (json_is_array(content)) {
            sbuf text = {0};
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part) {
                json_t *t = json_object_get(part, "text");
                const char *type = json_string_value(json_object_get(part, "type"));
                if (type != NULL && strcmp(type, "text") != 0) {
                    rc = api_fail(e, 400, "unsupported_parameter",
                                  "unsupported content part `messages[%zu].content[%zu]` of type "
                                  "\"%.40s\": Strata takes text parts only", i, k, type);
                    break;
                }
                if (!json_is_string(t)) {
                    rc = api_fail(e, 400, "invalid_value", "`messages[%zu].content[%zu]` must be a text part", i, k);
                    break;
                }
                sbuf_append(&text, json_string_value(t), json_string_length(t));
            }
            json_object_set_new(c, "content", json_stringn(text.data ? text.data : "", text.len));
            sbuf_free(&text);
        } else if (!json_is_string(content) && !json_is_null(content) && content != NULL) {
            rc = api_fail(e, 400, "invalid_type", "`messages[%zu].content` must be a string or an array of parts", i);
        }
        if (content == NULL || json_is_null(content)) json_object_set_new(c, "content", json_string(""));
        json_array_append_new(norm, c);
        if (rc == 0) rc = parse_msg_tool_calls(c, i, e);
        /* an earlier reply's reasoning, as a client sends it back: templates
         * that keep it under another name (gpt-oss's `thinking`) get it there */
        json_t *rsn = json_object_get(c, "reasoning_content");
        if (rc == 0 && json_is_string(rsn) && json_object_get(c, "thinking") == NULL &&
            env->chat_template != NULL && strstr(env->chat_template, "message.thinking") != NULL) {
            json_object_set(c, "thinking", rsn);
        }
        if (rc != 0) break;
    }
    if (rc != 0) {
        json_decref(norm);
        return rc;
    }
    /* vLLM's add_generation_prompt (default true) and continue_final_message
     * (default false; the reply continues the final message: "prefill") */
    bool gen_prompt = true, cont = false;
    if ((rc = get_bool(o, "add_generation_prompt", &gen_prompt, e)) != 0 ||
        (rc = get_bool(o, "continue_final_message", &cont, e)) != 0) {
        json_decref(norm);
        return rc;
    }
    if (gen_prompt && cont && json_object_get(o, "add_generation_prompt") != NULL &&
        !json_is_null(json_object_get(o, "add_generation_prompt"))) {
        json_decref(norm);
        return api_fail(e, 400, "invalid_value",
                        "`continue_final_message` and `add_generation_prompt` cannot both be true");
    }
    if (cont) gen_prompt = false;
    char *final = NULL; /* the final message's text, for continue_final_message */
    if (cont) {
        json_t *fc = json_object_get(json_array_get(norm, json_array_size(norm) - 1), "content");
        final = strndup(json_string_value(fc), json_string_length(fc));
        if (final == NULL) {
            json_decref(norm);
            return api_fail(e, 500, "out_of_memory", "out of memory");
        }
    }
    const char *tmpl = env->chat_template ? env->chat_template : k_chatml;
    json_t *extra = NULL;
    if ((rc = template_extra(tmpl, o, tools, &extra, e)) != 0) {
        json_decref(norm);
        free(final);
        return rc;
    }
    chat_template_opts opts = {.add_generation_prompt = gen_prompt, .bos_token = env->bos,
                               .eos_token = env->eos, .tools = tools, .extra = extra};
    if (env->merge_system && merge_system_messages(norm) != 0) {
        json_decref(norm);
        json_decref(extra);
        free(final);
        return api_fail(e, 500, "out_of_memory", "out of memory");
    }
    char *prompt = NULL;
    size_t prompt_len = 0;
    strata_err err;
    rc = chat_template_render(tmpl, strlen(tmpl), norm, &opts, &prompt, &prompt_len, &err);
    json_decref(norm);
    json_decref(extra);
    if (rc != 0) {
        free(final);
        return api_fail(e, 400, "template_error", "cannot render the chat template: %s", err.msg);
    }
    if (final != NULL) {
        bool found = continue_final_cut(prompt, &prompt_len, final);
        free(final);
        if (!found) {
            free(prompt);
            return api_fail(e, 400, "invalid_value",
                            "`continue_final_message`: the final message does not appear in the "
                            "rendered prompt (the chat template changes it)");
        }
    }
    g->reasoning_open = g->reasoning == REASONING_THINK && reasoning_prompt_open(prompt, prompt_len);
    if (g->grammar != NULL && g->reasoning == REASONING_THINK && !reasoning_prompt_closed(prompt, prompt_len)) {
        /* the answer's grammar after the reasoning block (unless the
         * template closed it, turning reasoning off) */
        char *wrapped = NULL;
        if (reasoning_grammar(g->grammar, g->reasoning_open, &wrapped) != 0) {
            free(prompt);
            return api_fail(e, 500, "out_of_memory", "out of memory");
        }
        free(g->grammar);
        g->grammar = wrapped;
    }
    /* The rendered prompt carries its own BOS when the template writes one. */
    bool add_special = env->bos == NULL || env->bos[0] == '\0' ||
                       strncmp(prompt, env->bos, strlen(env->bos)) != 0;
    rc = tokenize(env->voc, prompt, prompt_len, add_special, g, e);
    free(g->rendered);
    g->rendered = prompt; /* for /apply-template */
    g->n_rendered = prompt_len;
    return rc;
}

int api_parse_gen(const api_env *env, enum api_kind kind, const char *body, size_t len,
                  api_gen *g, api_error *e)
{
    memset(g, 0, sizeof(*g));
    g->kind = kind;
    g->n_choices = 1;
    g->max_tokens = -1;
    g->logprobs = -1;
    g->prompt_logprobs = -1;
    g->sampling = proto_sampling_default();
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (o == NULL) return api_fail(e, 400, "invalid_json", "the body is not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = 0;
    if (!json_is_object(o)) {
        rc = api_fail(e, 400, "invalid_json", "the body must be a JSON object");
        goto out;
    }
    json_t *model = json_object_get(o, "model");
    if (model != NULL && !json_is_null(model)) {
        if (!json_is_string(model)) {
            rc = api_fail(e, 400, "invalid_type", "`model` must be a string");
            goto out;
        }
        bool known = strcmp(json_string_value(model), env->model_name) == 0;
        for (size_t i = 0; i < env->n_model_aliases && !known; i++) {
            known = strcmp(json_string_value(model), env->model_aliases[i]) == 0;
        }
        if (!known) {
            rc = api_fail(e, 404, "model_not_found", "the model `%.100s` does not exist; this server has `%.100s`",
                          json_string_value(model), env->model_name);
            goto out;
        }
        if ((g->model = strdup(json_string_value(model))) == NULL) {
            rc = api_fail(e, 500, "out_of_memory", "out of memory");
            goto out;
        }
    }
    if ((rc = check_unsupported(o, kind, e)) != 0) goto out;
    /* vLLM's truncate_prompt_tokens: the prompt's (or each input's) last k
     * tokens; -1: as many as the context takes (with room for one more
     * token when generating) */
    int64_t trunc = 0;
    bool had_trunc = false;
    if ((rc = get_int(o, "truncate_prompt_tokens", -1, INT32_MAX, &trunc, &had_trunc, e)) != 0) goto out;
    if (had_trunc && trunc == 0) {
        rc = api_fail(e, 400, "invalid_value", "`truncate_prompt_tokens` must be at least 1, or -1");
        goto out;
    }
    if (trunc < 0) trunc = env->n_ctx > 0 ? env->n_ctx - (kind == API_EMBEDDING ? 0 : 1) : 0;
    g->truncate = (size_t)trunc;
    /* llama-server's switch for its prompt cache: false opts this request
     * out of the engine's prefix cache (the answer is the same either way) */
    bool cache_prompt = true;
    if ((rc = get_bool(o, "cache_prompt", &cache_prompt, e)) != 0) goto out;
    g->no_cache = !cache_prompt;
    /* Speculative decoding (llama-server's names): `speculative` false turns
     * it off for this request, `speculative.n_max` caps its drafted tokens
     * per step (0: none); the output is the same either way. */
    bool speculative = true;
    if ((rc = get_bool(o, "speculative", &speculative, e)) != 0) goto out;
    g->no_speculative = !speculative;
    int64_t n_max = 0;
    if ((rc = get_int(o, "speculative.n_max", 0, 16, &n_max, &g->has_draft_max, e)) != 0) goto out;
    g->draft_max = (int32_t)n_max;
    if (kind == API_EMBEDDING) {
        json_t *fmt = json_object_get(o, "encoding_format");
        if (fmt != NULL && !json_is_null(fmt)) {
            const char *f = json_string_value(fmt);
            if (f == NULL || (strcmp(f, "float") != 0 && strcmp(f, "base64") != 0)) {
                rc = api_fail(e, 400, "invalid_value", "`encoding_format` must be \"float\" or \"base64\"");
                goto out;
            }
            g->base64 = strcmp(f, "base64") == 0;
        }
        rc = parse_inputs(env, o, g, e);
        goto out;
    } else {
        int64_t n = 1, seed = -1, top_k = 0, n_predict = -1;
        bool had_seed = false, had_top_k = false;
        if ((rc = get_int(o, "n", 1, API_MAX_CHOICES, &n, NULL, e)) != 0) goto out;
        /* llama-server's name for it */
        if (api_is_native(kind) && (rc = get_int(o, "n_cmpl", 1, API_MAX_CHOICES, &n, NULL, e)) != 0) goto out;
        g->n_choices = (size_t)n;
        if (api_is_native(kind) && (rc = get_bool(o, "return_tokens", &g->return_tokens, e)) != 0) goto out;
        if ((rc = parse_logprobs(o, kind, g, e)) != 0) goto out;
        /* llama-server's name for max_tokens; -1: no limit */
        if ((rc = get_int(o, "n_predict", -1, INT32_MAX, &n_predict, NULL, e)) != 0) goto out;
        g->max_tokens = n_predict;
        if ((rc = get_int(o, "max_tokens", 0, INT32_MAX, &g->max_tokens, NULL, e)) != 0) goto out;
        if ((rc = get_int(o, "max_completion_tokens", 0, INT32_MAX, &g->max_tokens, NULL, e)) != 0) goto out;
        /* vLLM's min_tokens: no end of generation, stop token id or stop
         * string before that many tokens */
        if ((rc = get_int(o, "min_tokens", 0, INT32_MAX, &g->min_tokens, NULL, e)) != 0) goto out;
        if (g->max_tokens >= 0 && g->min_tokens > g->max_tokens) {
            rc = api_fail(e, 400, "invalid_value", "`min_tokens` (%lld) is more than `max_tokens` (%lld)",
                          (long long)g->min_tokens, (long long)g->max_tokens);
            goto out;
        }
        proto_sampling *s = &g->sampling;
        if ((rc = get_num(o, "temperature", 0, 100, &s->temperature, e)) != 0) goto out;
        if ((rc = get_num(o, "top_p", 0, 1, &s->top_p, e)) != 0) goto out;
        if ((rc = get_num(o, "min_p", 0, 1, &s->min_p, e)) != 0) goto out;
        if ((rc = get_num(o, "typical_p", 0, 1, &s->typical_p, e)) != 0) goto out;
        if ((rc = get_num(o, "presence_penalty", -2, 2, &s->presence_penalty, e)) != 0) goto out;
        if ((rc = get_num(o, "frequency_penalty", -2, 2, &s->frequency_penalty, e)) != 0) goto out;
        if ((rc = get_num(o, "repeat_penalty", 1e-6, 100, &s->repeat_penalty, e)) != 0) goto out;
        /* llama-server's further samplers (llama.cpp's order: sampler.h) */
        if ((rc = get_num(o, "top_n_sigma", -1e6, 1e6, &s->top_n_sigma, e)) != 0) goto out;
        if ((rc = get_num(o, "xtc_probability", 0, 1, &s->xtc_probability, e)) != 0) goto out;
        if ((rc = get_num(o, "xtc_threshold", 0, 1, &s->xtc_threshold, e)) != 0) goto out;
        if ((rc = get_num(o, "dynatemp_range", 0, 100, &s->dynatemp_range, e)) != 0) goto out;
        if ((rc = get_num(o, "dynatemp_exponent", 0, 1e6, &s->dynatemp_exponent, e)) != 0) goto out;
        int64_t miro = 0;
        if ((rc = get_int(o, "mirostat", 0, 2, &miro, NULL, e)) != 0) goto out;
        s->mirostat = (int32_t)miro;
        if ((rc = get_num(o, "mirostat_tau", 0, 1e6, &s->mirostat_tau, e)) != 0) goto out;
        if ((rc = get_num(o, "mirostat_eta", 0, 1e6, &s->mirostat_eta, e)) != 0) goto out;
        if ((rc = parse_dry(o, env, s, e)) != 0) goto out;
        /* llama-server's window of the penalties, repeat_last_n: the last N
         * tokens of prompt and reply; 0 none, -1 the context (as llama.cpp
         * once took it) */
        int64_t last_n = 0;
        bool had_last_n = false;
        if ((rc = get_int(o, "repeat_last_n", -1, PROTO_MAX_PENALTY_LAST_N, &last_n, &had_last_n, e)) != 0) goto out;
        if (had_last_n) {
            if (last_n < 0) last_n = env->n_ctx > 0 ? env->n_ctx : PROTO_MAX_PENALTY_LAST_N;
            if (last_n > PROTO_MAX_PENALTY_LAST_N) last_n = PROTO_MAX_PENALTY_LAST_N;
            s->penalty_last_n = (int32_t)last_n;
        }
        /* vLLM's repetition_penalty: llama.cpp's repeat penalty (the same
         * formula) over every token of prompt and reply */
        float rep = 1.0f;
        if ((rc = get_num(o, "repetition_penalty", 1e-6, 100, &rep, e)) != 0) goto out;
        if (rep != 1.0f) {
            if (s->repeat_penalty != 1.0f) {
                rc = api_fail(e, 400, "invalid_value", "`repetition_penalty` and `repeat_penalty` cannot both be set; send one");
                goto out;
            }
            s->repeat_penalty = rep;
            if (!had_last_n) {
                int64_t all = env->n_ctx > 0 ? env->n_ctx : PROTO_MAX_PENALTY_LAST_N;
                s->penalty_last_n = (int32_t)(all < PROTO_MAX_PENALTY_LAST_N ? all : PROTO_MAX_PENALTY_LAST_N);
            }
        }
        if ((rc = get_int(o, "top_k", -1, INT32_MAX, &top_k, &had_top_k, e)) != 0) goto out;
        if (had_top_k) s->top_k = (int32_t)top_k;
        if ((rc = get_int(o, "seed", -1, INT64_MAX, &seed, &had_seed, e)) != 0) goto out;
        if (had_seed && seed >= 0) {
            s->has_seed = true;
            s->seed = (uint64_t)seed;
        }
        if ((rc = get_bool(o, "stream", &g->stream, e)) != 0) goto out;
        if ((rc = get_bool(o, "return_progress", &g->progress, e)) != 0) goto out;
        json_t *so = json_object_get(o, "stream_options");
        if (so != NULL && !json_is_null(so)) {
            if (!json_is_object(so)) {
                rc = api_fail(e, 400, "invalid_type", "`stream_options` must be an object");
                goto out;
            }
            if ((rc = get_bool(so, "include_usage", &g->include_usage, e)) != 0) goto out;
        }
        /* OpenAI's echo (completions; chat refuses it above): the prompt's
         * text before the reply's, and with logprobs its tokens' before the
         * reply's; vLLM's prompt_logprobs: each prompt token's logprob and
         * its N most likely alternatives, not streamed (as vLLM) */
        if (kind == API_COMPLETION && (rc = get_bool(o, "echo", &g->echo, e)) != 0) goto out;
        int64_t plp = -1;
        bool had_plp = false;
        if ((rc = get_int(o, "prompt_logprobs", 0, API_MAX_TOP_LOGPROBS_CHAT, &plp, &had_plp, e)) != 0) {
            goto out;
        }
        if (had_plp && g->stream) {
            rc = api_fail(e, 400, "invalid_value", "`prompt_logprobs` is not available with `stream`");
            goto out;
        }
        g->prompt_logprobs = had_plp ? (int32_t)plp : -1;
        if ((rc = parse_samplers(o, s, e)) != 0) goto out;
        if ((rc = parse_stops(o, g, e)) != 0) goto out;
        if ((rc = parse_stop_ids(o, env->voc, g, e)) != 0) goto out;
        if ((rc = parse_allowed(o, env->voc, g, e)) != 0) goto out;
        if ((rc = parse_bad_words(o, env->voc, g, e)) != 0) goto out;
        bool skip_special = true;
        if ((rc = get_bool(o, "skip_special_tokens", &skip_special, e)) != 0) goto out;
        g->keep_special = !skip_special;
        if ((rc = parse_logit_bias(o, env->voc, g, e)) != 0) goto out;
        if ((rc = parse_ignore_eos(o, env->voc, g, e)) != 0) goto out;
        if ((rc = parse_structured(o, g, e)) != 0) goto out;
        json_t *tools = NULL;
        if (kind == API_CHAT && (rc = parse_tools(env, o, g, &tools, e)) != 0) goto out;
        if (kind == API_CHAT && (rc = parse_reasoning(env, o, g, e)) != 0) goto out;
        rc = kind == API_CHAT     ? parse_messages(env, o, tools, g, e)
             : kind == API_INFILL ? parse_infill(env, o, g, e)
                                  : parse_prompt(env, o, "prompt", g, e);
    }
    if (rc != 0) goto out;
    if (g->n_prompts == 0) g->n_prompts = 1;
    g->n_ctx = env->n_ctx;
    size_t shortest = SIZE_MAX;
    for (size_t p = 0; p < g->n_prompts; p++) {
        int32_t *ids = p == 0 ? g->prompt : g->more[p - 1].ids;
        size_t *n = p == 0 ? &g->n_prompt : &g->more[p - 1].n;
        char which[32] = "the prompt";
        if (g->n_prompts > 1) snprintf(which, sizeof(which), "prompt %zu", p);
        if (*n == 0) {
            rc = api_fail(e, 400, "invalid_prompt", "%s has no tokens", which);
            goto out;
        }
        keep_last(ids, n, g->truncate);
        if (env->n_ctx > 0 && (int64_t)*n >= env->n_ctx) {
            rc = api_fail(e, 400, "context_length_exceeded", "%s is %zu tokens; the context holds %lld",
                          which, *n, (long long)env->n_ctx);
            goto out;
        }
        if (*n < shortest) shortest = *n;
    }
    /* Never ask past the context: the answer then ends with `length`
     * (each prompt's engine request is cut to its own room). */
    if (env->n_ctx > 0) {
        int64_t room = env->n_ctx - (int64_t)shortest;
        if (g->max_tokens < 0 || g->max_tokens > room) g->max_tokens = room;
    }
out:
    json_decref(o);
    if (rc != 0) api_gen_free(g);
    return rc;
}

/* --- responses --- */

void api_result_sum(const api_result *rs, size_t n, size_t per_prompt, api_result *out)
{
    *out = rs[0];
    for (size_t i = 1; i < n; i++) {
        const api_result *r = &rs[i];
        if (per_prompt <= 1 || i % per_prompt == 0) {
            out->prompt_tokens += r->prompt_tokens;
            out->cached_tokens += r->cached_tokens;
        }
        out->completion_tokens += r->completion_tokens;
        out->route_cached_n += r->route_cached_n;
        sreq_stats *s = &out->stats;
        s->prompt_n += r->stats.prompt_n;
        s->cached_n += r->stats.cached_n;
        s->predicted_n += r->stats.predicted_n;
        s->draft_n += r->stats.draft_n;
        s->draft_accepted_n += r->stats.draft_accepted_n;
        s->prompt_ms += r->stats.prompt_ms;
        s->predicted_ms += r->stats.predicted_ms;
        if (r->queue_ms > out->queue_ms) out->queue_ms = r->queue_ms;
        if (r->ttft_ms > 0 && (out->ttft_ms <= 0 || r->ttft_ms < out->ttft_ms)) out->ttft_ms = r->ttft_ms;
        if (r->replica != out->replica) out->replica = -1;
    }
}

/* x rounded to 3 decimals: API_JSON_FLAGS then prints it short. */
static double round3(double x)
{
    return isfinite(x) ? round(x * 1000.0) / 1000.0 : 0.0;
}

json_t *api_timings(const api_result *r)
{
    const sreq_stats *s = &r->stats;
    double pps = s->predicted_ms > 0 ? (double)s->predicted_n * 1000.0 / s->predicted_ms : 0.0;
    return json_pack("{s:f,s:I,s:I,s:f,s:f,s:I,s:f,s:f,s:i,s:I,s:I,s:I}", "queue_ms",
                     round3(r->queue_ms), "prompt_n", (json_int_t)s->prompt_n, "cached_n",
                     (json_int_t)s->cached_n, "prompt_ms", round3(s->prompt_ms), "ttft_ms",
                     round3(r->ttft_ms), "predicted_n", (json_int_t)s->predicted_n,
                     "predicted_ms", round3(s->predicted_ms), "predicted_per_second",
                     round3(pps), "replica", r->replica, "route_cached_n",
                     (json_int_t)r->route_cached_n, "draft_n", (json_int_t)s->draft_n,
                     "draft_n_accepted", (json_int_t)s->draft_accepted_n);
}

json_t *api_usage(const api_result *r)
{
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)r->prompt_tokens,
                     "completion_tokens", (json_int_t)r->completion_tokens, "total_tokens",
                     (json_int_t)(r->prompt_tokens + r->completion_tokens),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)r->cached_tokens);
}

static json_t *envelope(const api_env *env, enum api_kind kind, uint64_t serial, bool chunk)
{
    char id[48];
    snprintf(id, sizeof(id), "%s-%llu", kind == API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)serial);
    const char *object = kind == API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                          : "text_completion";
    return json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", object, "created",
                     (json_int_t)time(NULL), "model", env->model_name);
}

/* A token's text as a JSON string: its bytes when they are UTF-8, else
 * "bytes:" and each byte as \xNN. */
static json_t *token_string(const char *b, size_t n)
{
    json_t *j = json_stringn(b, n);
    if (j != NULL) return j;
    char *hex = malloc(6 + 4 * n + 1);
    if (hex == NULL) return NULL;
    size_t k = (size_t)sprintf(hex, "bytes:");
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(hex + k, "\\x%02x", (unsigned char)b[i]);
    j = json_stringn(hex, k);
    free(hex);
    return j;
}

static json_t *byte_array(const char *b, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++) json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

/* A number, or null for an unknown logprob. */
static json_t *lp_number(float x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

/* The bytes shown for token id: its own text, special tokens' included. */
static const char *own_piece(const vocab *voc, int32_t id, char *buf, size_t cap, size_t *n)
{
    if (tok_token_to_piece(voc, id, true, buf, cap, n, NULL) != 0) *n = 0;
    return buf;
}

json_t *api_logprobs(const api_env *env, enum api_kind kind, const api_lp_token *toks, size_t n,
                     size_t n_top)
{
    size_t cap = TOK_MAX_PIECE_BYTES;
    char *buf = malloc(cap);
    json_t *out = NULL;
    if (buf == NULL) return NULL;
    if (kind == API_CHAT) {
        json_t *content = json_array();
        for (size_t i = 0; i < n; i++) {
            const api_lp_token *t = &toks[i];
            size_t nb = t->n_bytes;
            const char *b = nb > 0 ? t->bytes : own_piece(env->voc, t->id, buf, cap, &nb);
            /* b may point into buf: the entry is built before buf is reused */
            json_t *entry = json_pack("{s:o,s:o,s:o}", "token", token_string(b, nb), "logprob",
                                      lp_number(t->logprob), "bytes", byte_array(b, nb));
            json_t *alts = json_array();
            for (size_t k = 0; k < t->n_top && k < n_top; k++) {
                size_t na;
                const char *a = own_piece(env->voc, t->top[k].token, buf, cap, &na);
                json_array_append_new(alts, json_pack("{s:o,s:o,s:o}", "token", token_string(a, na),
                                                      "logprob", lp_number(t->top[k].logprob),
                                                      "bytes", byte_array(a, na)));
            }
            json_object_set_new(entry, "top_logprobs", alts);
            json_array_append_new(content, entry);
        }
        out = json_pack("{s:o}", "content", content);
    } else {
        json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(),
               *offsets = json_array();
        for (size_t i = 0; i < n; i++) {
            const api_lp_token *t = &toks[i];
            size_t nb = t->n_bytes;
            const char *b = nb > 0 ? t->bytes : own_piece(env->voc, t->id, buf, cap, &nb);
            json_array_append_new(tokens, token_string(b, nb));
            json_array_append_new(lps, lp_number(t->logprob));
            json_array_append_new(offsets, json_integer((json_int_t)t->text_offset));
            if (t->null_top) {
                json_array_append_new(tops, json_null());
                continue;
            }
            json_t *alts = json_object();
            for (size_t k = 0; k < t->n_top && k < n_top; k++) {
                size_t na;
                const char *a = own_piece(env->voc, t->top[k].token, buf, cap, &na);
                json_t *key = token_string(a, na);
                /* two ids with the same text: the more likely one (first) stays */
                if (key != NULL && json_object_get(alts, json_string_value(key)) == NULL) {
                    json_object_set_new(alts, json_string_value(key), lp_number(t->top[k].logprob));
                }
                json_decref(key);
            }
            json_array_append_new(tops, alts);
        }
        out = json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps,
                        "top_logprobs", tops, "text_offset", offsets);
    }
    free(buf);
    return out;
}

/* {id, token, bytes, logprob} of one token of llama-server's probabilities. */
static json_t *native_prob(int32_t id, const char *b, size_t nb, float logprob)
{
    return json_pack("{s:i,s:o,s:o,s:o}", "id", (int)id, "token", token_string(b, nb), "bytes",
                     byte_array(b, nb), "logprob", lp_number(logprob));
}

json_t *api_native_probs(const api_env *env, const api_lp_token *toks, size_t n, size_t n_top)
{
    char *buf = malloc(TOK_MAX_PIECE_BYTES);
    json_t *out = json_array();
    if (buf == NULL || out == NULL) {
        free(buf);
        json_decref(out);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const api_lp_token *t = &toks[i];
        size_t nb = t->n_bytes;
        const char *b = nb > 0 ? t->bytes : own_piece(env->voc, t->id, buf, TOK_MAX_PIECE_BYTES, &nb);
        json_t *entry = native_prob(t->id, b, nb, t->logprob); /* built before buf is reused */
        json_t *alts = json_array();
        for (size_t k = 0; k < t->n_top && k < n_top; k++) {
            size_t na;
            const char *a = own_piece(env->voc, t->top[k].token, buf, TOK_MAX_PIECE_BYTES, &na);
            json_array_append_new(alts, native_prob(t->top[k].token, a, na, t->top[k].logprob));
        }
        json_object_set_new(entry, "top_logprobs", alts);
        json_array_append_new(out, entry);
    }
    free(buf);
    return out;
}

static json_t *id_array(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

json_t *api_native_chunk(size_t index, const char *text, size_t n_text, const int32_t *ids,
                         size_t n_ids, int64_t predicted, int64_t evaluated, json_t *probs)
{
    json_t *j = json_pack("{s:I,s:o,s:o,s:b,s:i,s:I,s:I}", "index", (json_int_t)index, "content",
                          api_text_json(text, n_text), "tokens", id_array(ids, n_ids), "stop", 0,
                          "id_slot", -1, "tokens_predicted", (json_int_t)predicted,
                          "tokens_evaluated", (json_int_t)evaluated);
    if (probs != NULL) json_object_set_new(j, "completion_probabilities", probs);
    return j;
}

/* The request's settings, as llama-server's generation_settings names them. */
static json_t *native_settings(const api_env *env, const api_gen *g)
{
    const proto_sampling *p = &g->sampling;
    json_t *stops = json_array();
    for (size_t i = 0; i < g->n_stops; i++) json_array_append_new(stops, json_string(g->stops[i]));
    json_t *breakers = json_array();
    for (size_t i = 0; i < p->n_dry_breakers; i++) json_array_append_new(breakers, json_string(p->dry_breakers[i]));
    json_t *j = json_pack("{s:I,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:i,s:f,s:f,s:f}",
                          "n_ctx", (json_int_t)env->n_ctx, "temperature", (double)p->temperature,
                          "dynatemp_range", (double)p->dynatemp_range, "dynatemp_exponent",
                          (double)p->dynatemp_exponent, "top_k", p->top_k, "top_p", (double)p->top_p,
                          "min_p", (double)p->min_p, "top_n_sigma", (double)p->top_n_sigma,
                          "xtc_probability", (double)p->xtc_probability, "xtc_threshold",
                          (double)p->xtc_threshold, "typical_p", (double)p->typical_p,
                          "repeat_last_n", p->penalty_last_n, "repeat_penalty", (double)p->repeat_penalty,
                          "presence_penalty", (double)p->presence_penalty, "frequency_penalty",
                          (double)p->frequency_penalty);
    json_t *k = json_pack("{s:f,s:f,s:i,s:i,s:o,s:i,s:f,s:f,s:o,s:I,s:I,s:b,s:i,s:s}", "dry_multiplier",
                          (double)p->dry_multiplier, "dry_base", (double)p->dry_base, "dry_allowed_length",
                          p->dry_allowed_length, "dry_penalty_last_n", p->dry_penalty_last_n,
                          "dry_sequence_breakers", breakers, "mirostat", p->mirostat, "mirostat_tau",
                          (double)p->mirostat_tau, "mirostat_eta", (double)p->mirostat_eta, "stop", stops,
                          "max_tokens", (json_int_t)g->max_tokens, "n_predict", (json_int_t)g->max_tokens,
                          "stream", g->stream, "n_probs", g->logprobs > 0 ? g->logprobs : 0, "grammar",
                          g->grammar ? g->grammar : "");
    json_object_update(j, k);
    json_decref(k);
    json_object_set_new(j, "seed", p->has_seed ? json_integer((json_int_t)p->seed) : json_integer(-1));
    return j;
}

json_t *api_native_body(const api_env *env, const api_gen *g, size_t index, api_native_choice *c)
{
    const api_result *r = c->res;
    const sreq_stats *st = &r->stats;
    char *prompt = NULL;
    size_t n_prompt = 0;
    if (tok_detokenize_alloc(env->voc, c->prompt, c->n_prompt, TOK_DETOK_SPECIAL, &prompt, &n_prompt, NULL) != 0) {
        prompt = NULL;
        n_prompt = 0;
    }
    int64_t evaluated = st->prompt_n - st->cached_n;
    double ppt = evaluated > 0 ? st->prompt_ms / (double)evaluated : 0.0;
    double pps = st->prompt_ms > 0 ? (double)evaluated * 1000.0 / st->prompt_ms : 0.0;
    double gpt = st->predicted_n > 0 ? st->predicted_ms / (double)st->predicted_n : 0.0;
    double gps = st->predicted_ms > 0 ? (double)st->predicted_n * 1000.0 / st->predicted_ms : 0.0;
    json_t *timings = json_pack("{s:I,s:I,s:f,s:f,s:f,s:I,s:f,s:f,s:f}", "cache_n", (json_int_t)st->cached_n,
                                "prompt_n", (json_int_t)evaluated, "prompt_ms", round3(st->prompt_ms),
                                "prompt_per_token_ms", round3(ppt), "prompt_per_second", round3(pps),
                                "predicted_n", (json_int_t)st->predicted_n, "predicted_ms",
                                round3(st->predicted_ms), "predicted_per_token_ms", round3(gpt),
                                "predicted_per_second", round3(gps));
    /* Strata's own figures after llama-server's */
    json_t *own = api_timings(r);
    json_object_del(own, "prompt_n");
    json_object_del(own, "prompt_ms");
    json_object_del(own, "predicted_n");
    json_object_del(own, "predicted_ms");
    json_object_del(own, "predicted_per_second");
    json_object_update(timings, own);
    json_decref(own);
    const char *text = c->text ? c->text : "";
    json_t *j = json_pack("{s:I,s:o,s:o,s:i,s:b,s:s,s:I,s:I,s:o,s:o,s:b,s:b,s:s,s:s,s:I,s:o}", "index",
                          (json_int_t)index, "content", api_text_json(text, c->n_text), "tokens",
                          id_array(c->ids, c->n_ids), "id_slot", -1, "stop", 1, "model", env->model_name,
                          "tokens_predicted", (json_int_t)r->completion_tokens, "tokens_evaluated",
                          (json_int_t)r->prompt_tokens, "generation_settings", native_settings(env, g),
                          "prompt", api_text_json(prompt, n_prompt), "has_new_line",
                          memchr(text, '\n', c->n_text) != NULL, "truncated", 0, "stop_type",
                          c->stop_type, "stopping_word", c->stopping_word ? c->stopping_word : "",
                          "tokens_cached", (json_int_t)st->cached_n, "timings", timings);
    free(prompt);
    if (c->probs != NULL) json_object_set_new(j, "completion_probabilities", c->probs);
    c->probs = NULL;
    return j;
}

json_t *api_load_object(const char *body, size_t len, api_error *e)
{
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        api_fail(e, 400, "invalid_json", "the body must be a JSON object");
        return NULL;
    }
    return o;
}

int api_dump_chat(json_t *chat, bool stream, char **out, api_error *e)
{
    if (stream) json_object_set_new(chat, "stream_options", json_pack("{s:b}", "include_usage", 1));
    *out = json_dumps(chat, JSON_COMPACT);
    return *out != NULL ? 0 : api_fail(e, 500, "out_of_memory", "out of memory");
}

json_t *api_text_parts(json_t *content, const char *const *types, const char *where, api_error *e)
{
    if (json_is_string(content)) return json_incref(content);
    if (!json_is_array(content)) {
        api_fail(e, 400, "invalid_type", "`%s` must be a string or an array of text blocks", where);
        return NULL;
    }
    sbuf text = {0};
    for (size_t i = 0; i < json_array_size(content); i++) {
        json_t *b = json_array_get(content, i);
        const char *type = json_string_value(json_object_get(b, "type"));
        json_t *t = json_object_get(b, "text");
        bool known = false;
        for (size_t k = 0; type != NULL && types[k] != NULL; k++) known = known || strcmp(type, types[k]) == 0;
        if (!known || !json_is_string(t)) {
            sbuf_free(&text);
            api_fail(e, 400, "unsupported_value", "`%s[%zu]`: only text blocks are taken here (got %s)", where, i,
                     type ? type : "no type");
            return NULL;
        }
        sbuf_append(&text, json_string_value(t), json_string_length(t));
    }
    json_t *j = json_stringn(text.data ? text.data : "", text.len);
    sbuf_free(&text);
    if (j == NULL) api_fail(e, 500, "out_of_memory", "out of memory");
    return j;
}

int api_echo_make(const vocab *voc, const int32_t *ids, size_t n, bool keep_special, api_echo *out)
{
    memset(out, 0, sizeof(*out));
    out->start = malloc((n + 1) * sizeof(size_t));
    out->chars = malloc((n ? n : 1) * sizeof(size_t));
    sbuf text = {0};
    if (out->start == NULL || out->chars == NULL || sbuf_append(&text, "", 0) != 0) goto fail;
    /* as textgen renders a reply: the same flags, one token at a time; a
     * token's bytes start after every byte of the ones before it, those
     * the stream holds back (a character not yet complete) included */
    tok_stream st;
    tok_stream_init(&st, voc, TOK_DETOK_REMOVE_SPECIAL | TOK_DETOK_STRIP_LEADING_SPACE |
                                  (keep_special ? TOK_DETOK_SPECIAL : 0u));
    for (size_t i = 0; i < n; i++) {
        out->start[i] = text.len + st.n_pending;
        const char *piece;
        size_t n_piece;
        if (tok_stream_push(&st, ids[i], &piece, &n_piece, NULL) != 0 ||
            sbuf_append(&text, piece, n_piece) != 0) {
            tok_stream_free(&st);
            goto fail;
        }
    }
    const char *rest;
    size_t n_rest, n_incomplete;
    if (tok_stream_finish(&st, &rest, &n_rest, &n_incomplete, NULL) != 0 ||
        sbuf_append(&text, rest, n_rest) != 0) {
        tok_stream_free(&st);
        goto fail;
    }
    tok_stream_free(&st);
    out->start[n] = text.len;
    /* characters: the bytes that do not continue one (each stray byte is
     * one U+FFFD in the JSON text) */
    size_t chars = 0, at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t s = out->start[i] < text.len ? out->start[i] : text.len;
        for (; at < s; at++) chars += ((unsigned char)text.data[at] & 0xC0) != 0x80;
        out->chars[i] = chars;
    }
    for (; at < text.len; at++) chars += ((unsigned char)text.data[at] & 0xC0) != 0x80;
    out->n_chars = chars;
    out->text = text.data;
    out->n_text = text.len;
    out->n = n;
    return 0;
fail:
    sbuf_free(&text);
    api_echo_free(out);
    return -1;
}

void api_echo_free(api_echo *e)
{
    free(e->text);
    free(e->start);
    free(e->chars);
    memset(e, 0, sizeof(*e));
}

json_t *api_prompt_logprobs(const api_env *env, const int32_t *ids, size_t n,
                            const proto_logprob *plps, size_t n_top)
{
    char *buf = malloc(TOK_MAX_PIECE_BYTES);
    json_t *out = json_array();
    if (buf == NULL || out == NULL) {
        free(buf);
        json_decref(out);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const proto_logprob *lp = plps != NULL && i > 0 ? &plps[i] : NULL;
        if (lp == NULL || !isfinite(lp->logprob)) {
            json_array_append_new(out, json_null());
            continue;
        }
        json_t *entry = json_object();
        char key[16];
        size_t nb;
        const char *b = own_piece(env->voc, ids[i], buf, TOK_MAX_PIECE_BYTES, &nb);
        snprintf(key, sizeof(key), "%d", ids[i]);
        json_object_set_new(entry, key, json_pack("{s:o,s:I,s:o}", "logprob", lp_number(lp->logprob),
                                                  "rank", (json_int_t)lp->rank, "decoded_token",
                                                  token_string(b, nb)));
        for (size_t k = 0; k < lp->n_top && k < n_top; k++) {
            snprintf(key, sizeof(key), "%d", lp->top[k].token);
            if (json_object_get(entry, key) != NULL) continue; /* the prompt's own token */
            b = own_piece(env->voc, lp->top[k].token, buf, TOK_MAX_PIECE_BYTES, &nb);
            json_object_set_new(entry, key, json_pack("{s:o,s:I,s:o}", "logprob",
                                                      lp_number(lp->top[k].logprob), "rank",
                                                      (json_int_t)(k + 1), "decoded_token",
                                                      token_string(b, nb)));
        }
        json_array_append_new(out, entry);
    }
    free(buf);
    return out;
}

json_t *api_completion_body_n(const api_env *env, enum api_kind kind, uint64_t serial,
                              api_choice *ch, size_t n, const api_result *total)
{
    json_t *j = envelope(env, kind, serial, false);
    json_t *choices = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *choice;
        json_t *lp = ch[i].logprobs ? ch[i].logprobs : json_null();
        ch[i].logprobs = NULL;
        const char *text = ch[i].text ? ch[i].text : "";
        const tool_parsed *tp = ch[i].tools;
        if (kind == API_CHAT && tp != NULL && tp->n_calls > 0) {
            json_t *calls = json_array();
            for (size_t k = 0; k < tp->n_calls; k++) {
                char id[10];
                api_tool_call_id(id, serial, i, k);
                json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                                       "function", "name", tp->calls[k].name,
                                                       "arguments", tp->calls[k].arguments));
            }
            json_t *content = api_blank(tp->content, tp->n_content)
                                  ? json_null()
                                  : api_text_json(tp->content, tp->n_content);
            choice = json_pack("{s:I,s:{s:s,s:o,s:o},s:o,s:s}", "index", (json_int_t)i, "message",
                               "role", "assistant", "content", content, "tool_calls", calls,
                               "logprobs", lp, "finish_reason", "tool_calls");
        } else if (kind == API_CHAT) {
            choice = json_pack("{s:I,s:{s:s,s:o},s:o,s:s}", "index", (json_int_t)i, "message",
                               "role", "assistant", "content", api_text_json(text, ch[i].n_text),
                               "logprobs", lp, "finish_reason", ch[i].res->finish_reason);
        } else {
            choice = json_pack("{s:I,s:o,s:o,s:s}", "index", (json_int_t)i, "text",
                               api_text_json(text, ch[i].n_text), "logprobs", lp,
                               "finish_reason", ch[i].res->finish_reason);
        }
        if (kind == API_CHAT && ch[i].n_reasoning > 0) {
            json_object_set_new(json_object_get(choice, "message"), "reasoning_content",
                                api_text_json(ch[i].reasoning, ch[i].n_reasoning));
        }
        if (ch[i].prompt_logprobs != NULL) {
            if (kind == API_CHAT && i == 0) json_object_set_new(j, "prompt_logprobs", ch[i].prompt_logprobs);
            else if (kind == API_CHAT) json_decref(ch[i].prompt_logprobs);
            else json_object_set_new(choice, "prompt_logprobs", ch[i].prompt_logprobs);
            ch[i].prompt_logprobs = NULL;
        }
        if (n > 1) json_object_set_new(choice, "timings", api_timings(ch[i].res));
        json_array_append_new(choices, choice);
    }
    json_object_set_new(j, "choices", choices);
    json_object_set_new(j, "usage", api_usage(total));
    json_object_set_new(j, "timings", api_timings(total));
    return j;
}

json_t *api_completion_body(const api_env *env, enum api_kind kind, const api_result *res,
                            const char *text, size_t n_text, json_t *logprobs)
{
    api_choice ch = {.text = text, .n_text = n_text, .logprobs = logprobs, .res = res};
    return api_completion_body_n(env, kind, res->serial, &ch, 1, res);
}

json_t *api_stream_chunk(const api_env *env, enum api_kind kind, uint64_t serial, size_t index,
                         const char *text, size_t n_text, const char *finish_reason, bool first,
                         json_t *logprobs)
{
    json_t *j = envelope(env, kind, serial, true);
    json_t *choice;
    json_t *fin = finish_reason ? json_string(finish_reason) : json_null();
    json_t *lp = logprobs ? logprobs : json_null();
    if (kind == API_CHAT) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (n_text > 0 || finish_reason == NULL) {
            json_object_set_new(delta, "content", api_text_json(text, n_text));
        }
        choice = json_pack("{s:I,s:o,s:o,s:o}", "index", (json_int_t)index, "delta", delta,
                           "logprobs", lp, "finish_reason", fin);
    } else {
        choice = json_pack("{s:I,s:o,s:o,s:o}", "index", (json_int_t)index, "text",
                           api_text_json(text, n_text), "logprobs", lp, "finish_reason", fin);
    }
    json_object_set_new(j, "choices", json_pack("[o]", choice));
    return j;
}

bool api_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r') return false;
    }
    return true;
}

void api_tool_call_id(char out[10], uint64_t serial, size_t index, size_t k)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    /* splitmix64 of the three: distinct calls get unrelated ids */
    uint64_t x = serial * 0x9E3779B97F4A7C15ull ^ ((uint64_t)index << 32) ^ (uint64_t)k;
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    for (int i = 0; i < 9; i++) {
        out[i] = digits[x % 62];
        x /= 62; /* 62^9 < 2^64: one value holds the nine digits */
    }
    out[9] = '\0';
}

json_t *api_stream_reasoning(const api_env *env, uint64_t serial, size_t index, const char *text,
                             size_t n_text, bool first)
{
    json_t *j = envelope(env, API_CHAT, serial, true);
    json_t *delta = json_object();
    if (first) json_object_set_new(delta, "role", json_string("assistant"));
    json_object_set_new(delta, "reasoning_content", api_text_json(text, n_text));
    json_t *choice = json_pack("{s:I,s:o,s:n,s:n}", "index", (json_int_t)index, "delta", delta,
                               "logprobs", "finish_reason");
    json_object_set_new(j, "choices", json_pack("[o]", choice));
    return j;
}

json_t *api_stream_tool_delta(const api_env *env, uint64_t serial, size_t index, size_t k,
                              const char *name, const char *arguments)
{
    json_t *call;
    if (name != NULL) {
        char id[10];
        api_tool_call_id(id, serial, index, k);
        call = json_pack("{s:I,s:s,s:s,s:{s:s,s:s}}", "index", (json_int_t)k, "id", id, "type",
                         "function", "function", "name", name, "arguments", "");
    } else {
        call = json_pack("{s:I,s:{s:s}}", "index", (json_int_t)k, "function", "arguments",
                         arguments ? arguments : "");
    }
    json_t *j = envelope(env, API_CHAT, serial, true);
    json_t *choice = json_pack("{s:I,s:{s:[o]},s:n,s:n}", "index", (json_int_t)index, "delta",
                               "tool_calls", call, "logprobs", "finish_reason");
    json_object_set_new(j, "choices", json_pack("[o]", choice));
    return j;
}

static json_t *base64_floats(const float *v, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n_bytes = n * 4;
    char *out = malloc((n_bytes + 2) / 3 * 4 + 1);
    unsigned char *in = malloc(n_bytes ? n_bytes : 1);
    json_t *j = NULL;
    if (out != NULL && in != NULL) {
        for (size_t i = 0; i < n; i++) { /* little-endian whatever the host */
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int b = 0; b < 4; b++) in[4 * i + (size_t)b] = (unsigned char)(u >> (8 * b));
        }
        size_t k = 0;
        for (size_t i = 0; i < n_bytes; i += 3) {
            uint32_t w = (uint32_t)in[i] << 16;
            if (i + 1 < n_bytes) w |= (uint32_t)in[i + 1] << 8;
            if (i + 2 < n_bytes) w |= in[i + 2];
            out[k++] = tab[(w >> 18) & 63];
            out[k++] = tab[(w >> 12) & 63];
            out[k++] = i + 1 < n_bytes ? tab[(w >> 6) & 63] : '=';
            out[k++] = i + 2 < n_bytes ? tab[w & 63] : '=';
        }
        j = json_stringn(out, k);
    }
    free(out);
    free(in);
    return j;
}

json_t *api_embedding_body(const api_env *env, const api_result *total, const api_vec *vecs,
                           size_t n, bool base64)
{
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *e;
        if (base64) {
            e = base64_floats(vecs[i].v, vecs[i].n);
        } else {
            e = json_array();
            for (size_t k = 0; k < vecs[i].n; k++) json_array_append_new(e, json_real(vecs[i].v[k]));
        }
        json_array_append_new(data, json_pack("{s:s,s:I,s:o}", "object", "embedding", "index",
                                              (json_int_t)i, "embedding", e));
    }
    return json_pack("{s:s,s:o,s:s,s:{s:I,s:I},s:o}", "object", "list", "data", data, "model",
                     env->model_name, "usage", "prompt_tokens", (json_int_t)total->prompt_tokens,
                     "total_tokens", (json_int_t)total->prompt_tokens, "timings",
                     api_timings(total));
}

int api_sse_event(sbuf *out, json_t *j)
{
    char *s = api_dumps(j);
    json_decref(j);
    if (s == NULL) return STRATA_ENOMEM;
    int rc = sbuf_append(out, "data: ", 6);
    if (rc == 0) rc = sbuf_append(out, s, strlen(s));
    if (rc == 0) rc = sbuf_append(out, "\n\n", 2);
    free(s);
    return rc;
}

size_t api_keep_markers(const vocab *v, const api_gen *g, int32_t *ids, size_t cap)
{
    size_t n_ids = 0;
    if (v == NULL) return 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t n = 0;
        const char *const *m = NULL;
        if (pass == 0 && g->reasoning != REASONING_NONE) m = reasoning_markers(g->reasoning, &n);
        if (pass == 1 && g->tool_calls) m = tool_calls_markers(g->tool_fmt, &n);
        for (size_t i = 0; i < n && n_ids < cap; i++) {
            int32_t id = vocab_find(v, m[i], strlen(m[i]));
            if (id < 0 || !vocab_is_control(v, id)) continue;
            bool dup = false;
            for (size_t k = 0; k < n_ids; k++) dup = dup || ids[k] == id;
            if (!dup) ids[n_ids++] = id;
        }
    }
    return n_ids;
}
