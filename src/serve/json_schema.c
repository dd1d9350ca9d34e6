/* JSON Schema -> GBNF (json_schema.h). Every subschema becomes one rule;
 * $ref targets get a rule each, named before their body is compiled, so
 * recursive schemas become recursive rules. */
#include "serve/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a growing string ---- */

typedef struct sb {
    char *p;
    size_t n, cap;
    bool oom, big;
} sb;

static void sb_put(sb *b, const char *s, size_t n)
{
    if (b->oom || b->big) return;
    if (b->n + n > 2 * (size_t)JSON_SCHEMA_MAX_GBNF) {
        b->big = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(sb *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_printf(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n <= 0) return;
    if ((size_t)n < sizeof(tmp)) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    /* longer than the stack buffer: format again into one that fits
     * (never cut a rule short) */
    char *big = malloc((size_t)n + 1);
    if (big == NULL) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)n);
    free(big);
}

/* A GBNF string literal of the bytes s[0..n): quote, backslash and control
 * bytes escaped; bytes >= 0x80 (UTF-8) copied. */
static void sb_lit(sb *b, const char *s, size_t n)
{
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') sb_put(b, "\\\"", 2);
        else if (c == '\\') sb_put(b, "\\\\", 2);
        else if (c == '\n') sb_put(b, "\\n", 2);
        else if (c == '\r') sb_put(b, "\\r", 2);
        else if (c == '\t') sb_put(b, "\\t", 2);
        else if (c < 0x20 || c == 0x7f) sb_printf(b, "\\x%02X", c);
        else sb_put(b, (const char *)&c, 1);
    }
    sb_put(b, "\"", 1);
}

/* ---- the compiler's state ---- */

enum {
    P_VALUE = 1 << 0, P_OBJECT = 1 << 1, P_ARRAY = 1 << 2, P_STRING = 1 << 3, P_CHAR = 1 << 4,
    P_NUMBER = 1 << 5, P_INTEGER = 1 << 6, P_BOOLEAN = 1 << 7, P_NULL = 1 << 8,
    P_DATE = 1 << 9, P_TIME = 1 << 10, P_DATETIME = 1 << 11, P_UUID = 1 << 12, P_EMAIL = 1 << 13,
};

typedef struct prim {
    unsigned bit, deps;
    const char *name, *body;
} prim;

static const prim k_prims[] = {
    {P_VALUE, P_OBJECT | P_ARRAY | P_STRING | P_NUMBER | P_BOOLEAN | P_NULL, "value",
     "object | array | string | number | boolean | null"},
    {P_OBJECT, P_STRING | P_VALUE, "object",
     "\"{\" ( string \":\" value ( \",\" string \":\" value )* )? \"}\""},
    {P_ARRAY, P_VALUE, "array", "\"[\" ( value ( \",\" value )* )? \"]\""},
    {P_STRING, P_CHAR, "string", "\"\\\"\" char* \"\\\"\""},
    {P_CHAR, 0, "char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )"},
    {P_NUMBER, 0, "number",
     "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?"},
    {P_INTEGER, 0, "integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )"},
    {P_BOOLEAN, 0, "boolean", "\"true\" | \"false\""},
    {P_NULL, 0, "null", "\"null\""},
    /* days that exist: 31 in months 01 03 05 07 08 10 12, 30 in 04 06 09
     * 11, 28 in 02 and the 29th of February only in leap years (divisible
     * by 4, and by 400 when by 100) */
    {P_DATE, 0, "date",
     "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) "
     "| ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) "
     "| \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) "
     "| ( [0-9]{2} ( \"0\" [48] | [2468] [048] | [13579] [26] ) "
     "| ( \"0\" [048] | [2468] [048] | [13579] [26] ) \"00\" ) \"-02-29\""},
    {P_TIME, 0, "time",
     "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? "
     "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
    {P_DATETIME, P_DATE | P_TIME, "date-time", "date \"T\" time"},
    {P_UUID, 0, "uuid",
     "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
     "[0-9a-fA-F]{12}"},
    {P_EMAIL, 0, "email",
     "[a-zA-Z0-9_%+-]{1,16} ( \".\" [a-zA-Z0-9_%+-]{1,16} ){0,2} \"@\" "
     "[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,30} [a-zA-Z0-9] )? ( \".\" [a-zA-Z0-9] ( [a-zA-Z0-9-]{0,30} [a-zA-Z0-9] )? ){1,4}"},
};

typedef struct ref_entry {
    const json_t *target;
    char name[24];
} ref_entry;

#define NAME_MAX_LEN 24
#define PATH_MAX_LEN 400

typedef struct cc {
    const json_t *root;
    sb rules;
    unsigned prims;
    int next_id;
    int depth;
    ref_entry *refs;
    size_t n_refs, cap_refs;
    strata_err *err;
    int rc;
} cc;

static int fail(cc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(cc *c, const char *fmt, ...)
{
    if (c->rc != 0) return -1;
    char msg[STRATA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->rc = STRATA_EINVAL;
    strata_err_set(c->err, STRATA_EINVAL, "%s", msg);
    return -1;
}

static int oom(cc *c)
{
    if (c->rc == 0) {
        c->rc = STRATA_ENOMEM;
        strata_err_set(c->err, STRATA_ENOMEM, "out of memory compiling the schema");
    }
    return -1;
}

static void use_prim(cc *c, unsigned bits)
{
    for (size_t i = 0; i < sizeof(k_prims) / sizeof(k_prims[0]); i++) {
        if ((bits & k_prims[i].bit) && !(c->prims & k_prims[i].bit)) {
            c->prims |= k_prims[i].bit;
            use_prim(c, k_prims[i].deps);
        }
    }
}

static void new_name(cc *c, char out[NAME_MAX_LEN])
{
    snprintf(out, NAME_MAX_LEN, "r%d", c->next_id++);
}

/* path + "/" + key, with JSON pointer escapes (~0, ~1). */
static void path_join(char out[PATH_MAX_LEN], const char *path, const char *key)
{
    size_t n = (size_t)snprintf(out, PATH_MAX_LEN, "%s/", path);
    for (const char *k = key; *k && n + 3 < PATH_MAX_LEN; k++) {
        if (*k == '~') { out[n++] = '~'; out[n++] = '0'; }
        else if (*k == '/') { out[n++] = '~'; out[n++] = '1'; }
        else out[n++] = *k;
    }
    if (n >= PATH_MAX_LEN) n = PATH_MAX_LEN - 1;
    out[n] = '\0';
}

static void path_index(char out[PATH_MAX_LEN], const char *path, const char *key, size_t i)
{
    snprintf(out, PATH_MAX_LEN, "%s/%s/%zu", path, key, i);
}

/* The GBNF literal of v as compact JSON (UTF-8 as is). */
static int json_lit(cc *c, sb *b, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
    if (s == NULL) return oom(c);
    sb_lit(b, s, strlen(s));
    free(s);
    return 0;
}

/* ---- keywords ---- */

enum fam { F_ANY, F_OBJ, F_ARR, F_STR, F_INT, F_NOTE, F_BAD };

typedef struct keyword {
    const char *name;
    enum fam fam;
} keyword;

static const keyword k_keywords[] = {
    {"type", F_ANY}, {"enum", F_ANY}, {"const", F_ANY}, {"anyOf", F_ANY}, {"oneOf", F_ANY},
    {"allOf", F_ANY}, {"$ref", F_ANY}, {"$defs", F_NOTE}, {"definitions", F_NOTE},
    {"nullable", F_ANY},
    {"properties", F_OBJ}, {"required", F_OBJ}, {"additionalProperties", F_OBJ},
    {"items", F_ARR}, {"prefixItems", F_ARR}, {"minItems", F_ARR}, {"maxItems", F_ARR},
    {"minLength", F_STR}, {"maxLength", F_STR}, {"pattern", F_STR}, {"format", F_STR},
    {"minimum", F_INT}, {"maximum", F_INT}, {"exclusiveMinimum", F_INT},
    {"exclusiveMaximum", F_INT},
    {"description", F_NOTE}, {"title", F_NOTE}, {"$schema", F_NOTE}, {"examples", F_NOTE},
    {"default", F_NOTE}, {"$id", F_NOTE}, {"$comment", F_NOTE}, {"deprecated", F_NOTE},
    {"readOnly", F_NOTE}, {"writeOnly", F_NOTE},
};

static enum fam kw_fam(const char *k)
{
    for (size_t i = 0; i < sizeof(k_keywords) / sizeof(k_keywords[0]); i++) {
        if (strcmp(k_keywords[i].name, k) == 0) return k_keywords[i].fam;
    }
    return F_BAD;
}

enum {
    T_NULL = 1 << 0, T_BOOLEAN = 1 << 1, T_OBJECT = 1 << 2, T_ARRAY = 1 << 3, T_NUMBER = 1 << 4,
    T_STRING = 1 << 5, T_INTEGER = 1 << 6,
};

static const char *const k_type_names[] = {"null", "boolean", "object", "array",
                                           "number", "string", "integer"};

static int type_bit(const char *t)
{
    for (int i = 0; i < 7; i++) {
        if (strcmp(t, k_type_names[i]) == 0) return 1 << i;
    }
    return 0;
}

/* ---- forward ---- */

static int compile(cc *c, const json_t *s, const char *path, char name[NAME_MAX_LEN]);

static void add_rule(cc *c, const char *name, const sb *body)
{
    sb_puts(&c->rules, name);
    sb_puts(&c->rules, " ::= ");
    if (body->p != NULL) sb_put(&c->rules, body->p, body->n);
    sb_puts(&c->rules, "\n");
}

/* ---- integers in a range ---- */

#define INT_LIMIT 9999999999999999LL /* 16 digits, as the `integer` rule */

/* lo..hi, digit strings of the same length n, lo <= hi. */
static void range_same(sb *b, const char *lo, const char *hi, size_t n)
{
    size_t k = 0;
    while (k < n && lo[k] == hi[k]) k++;
    if (k == n) {
        sb_lit(b, lo, n);
        return;
    }
    if (k > 0) {
        sb_lit(b, lo, k);
        sb_puts(b, " ");
    }
    lo += k;
    hi += k;
    n -= k;
    if (n == 1) {
        sb_printf(b, "[%c-%c]", lo[0], hi[0]);
        return;
    }
    bool lo_zero = true, hi_nine = true;
    for (size_t i = 1; i < n; i++) {
        if (lo[i] != '0') lo_zero = false;
        if (hi[i] != '9') hi_nine = false;
    }
    int a = lo[0] - '0', z = hi[0] - '0';
    int ma = lo_zero ? a : a + 1, mz = hi_nine ? z : z - 1;
    char nines[20], zeros[20];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    bool first = true;
    sb_puts(b, "( ");
    if (!lo_zero) {
        sb_printf(b, "\"%c\" ", lo[0]);
        range_same(b, lo + 1, nines, n - 1);
        first = false;
    }
    if (ma <= mz) {
        if (!first) sb_puts(b, " | ");
        if (ma == mz) sb_printf(b, "\"%c\"", '0' + ma);
        else sb_printf(b, "[%c-%c]", '0' + ma, '0' + mz);
        if (n - 1 == 1) sb_puts(b, " [0-9]");
        else sb_printf(b, " [0-9]{%zu}", n - 1);
        first = false;
    }
    if (!hi_nine) {
        if (!first) sb_puts(b, " | ");
        sb_printf(b, "\"%c\" ", hi[0]);
        range_same(b, zeros, hi + 1, n - 1);
    }
    sb_puts(b, " )");
}

/* 0 <= lo <= hi: their decimal forms, without leading zeros. */
static void range_nonneg(sb *b, long long lo, long long hi)
{
    char ls[24], hs[24];
    int dl = snprintf(ls, sizeof(ls), "%lld", lo), dh = snprintf(hs, sizeof(hs), "%lld", hi);
    sb_puts(b, "( ");
    for (int len = dl; len <= dh; len++) {
        char l[24], h[24];
        if (len == dl) memcpy(l, ls, (size_t)len);
        else {
            l[0] = len == 1 ? '0' : '1';
            memset(l + 1, '0', (size_t)len - 1);
        }
        if (len == dh) memcpy(h, hs, (size_t)len);
        else memset(h, '9', (size_t)len);
        if (len > dl) sb_puts(b, " | ");
        range_same(b, l, h, (size_t)len);
    }
    sb_puts(b, " )");
}

static void range_int(sb *b, long long lo, long long hi)
{
    sb_puts(b, "( ");
    bool any = false;
    if (hi >= 0) {
        range_nonneg(b, lo > 0 ? lo : 0, hi);
        any = true;
    }
    if (lo < 0) {
        if (any) sb_puts(b, " | ");
        sb_puts(b, "\"-\" ");
        range_nonneg(b, hi < 0 ? -hi : 1, -lo);
    }
    sb_puts(b, " )");
}

/* A bound of minimum/maximum/exclusive*: into *v (rounded towards the
 * inside for integers). */
static int int_bound(cc *c, const json_t *s, const char *path, bool lower, long long *v)
{
    const char *key = lower ? "minimum" : "maximum";
    const char *xkey = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    const json_t *m = json_object_get(s, key), *x = json_object_get(s, xkey);
    double best = lower ? -(double)INT_LIMIT : (double)INT_LIMIT;
    bool strict = false;
    if (m != NULL) {
        if (!json_is_number(m)) return fail(c, "`%s` at %s/%s must be a number", key, path, key);
        best = json_number_value(m);
    }
    if (x != NULL) {
        if (json_is_boolean(x)) { /* draft 4: modifies minimum/maximum */
            strict = json_is_true(x) && m != NULL;
        } else if (json_is_number(x)) {
            double xv = json_number_value(x);
            if (lower ? xv >= best : xv <= best) {
                best = xv;
                strict = true;
            }
        } else {
            return fail(c, "`%s` at %s/%s must be a number", xkey, path, xkey);
        }
    }
    double r = lower ? ceil(best) : floor(best);
    if (strict && r == best) r += lower ? 1 : -1;
    if (r < -(double)INT_LIMIT) r = -(double)INT_LIMIT;
    if (r > (double)INT_LIMIT) r = (double)INT_LIMIT;
    *v = (long long)r;
    return 0;
}

/* ---- counts ---- */

static int get_count(cc *c, const json_t *s, const char *key, const char *path, long long dflt,
                     long long *out)
{
    const json_t *v = json_object_get(s, key);
    *out = dflt;
    if (v == NULL) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > JSON_SCHEMA_MAX_COUNT) {
        return fail(c, "`%s` at %s/%s must be an integer in [0, %d]", key, path, key,
                    JSON_SCHEMA_MAX_COUNT);
    }
    *out = json_integer_value(v);
    return 0;
}

/* `{lo,hi}` after an atom (hi < 0: no bound), the shortest spelling. */
static void sb_repeat(sb *b, long long lo, long long hi)
{
    if (lo == 0 && hi < 0) sb_puts(b, "*");
    else if (lo == 1 && hi < 0) sb_puts(b, "+");
    else if (lo == 0 && hi == 1) sb_puts(b, "?");
    else if (hi < 0) sb_printf(b, "{%lld,}", lo);
    else if (lo == hi) sb_printf(b, "{%lld}", lo);
    else sb_printf(b, "{%lld,%lld}", lo, hi);
}

/* ---- pattern: a regular-expression subset ---- */

/* Two modes: a JSON Schema `pattern`, written as the content of a JSON
 * string (quotes, backslashes and control characters never appear raw:
 * `.` is a JSON string character, classes exclude them, literals are
 * escaped), and a raw regular expression that the whole output must match
 * (vLLM's guided_regex: `.` is any character but a newline, classes and
 * literals are the characters themselves). */
typedef struct rx {
    cc *c;
    const char *p, *end;
    const char *where; /* "`pattern` at /a/pattern", "`guided_regex`" */
    bool raw;
    int depth;
} rx;

static int rx_fail(rx *r, const char *what)
{
    return fail(r->c, "%s: %s (supported: %sliterals, escapes, [classes], ., \\d \\w \\s%s, groups, |, "
                      "* + ? {m,n})",
                r->where, what, r->raw ? "" : "^...$ anchored; ", r->raw ? " \\D \\W \\S" : "");
}

/* One class member's byte as a GBNF class item. */
static void class_char(sb *b, unsigned char ch)
{
    if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
        sb_put(b, (const char *)&ch, 1);
    } else {
        sb_printf(b, "\\x%02X", ch);
    }
}

/* An escape \x after the backslash, inside a class or not: into b as class
 * items when in_class, else as an expression. */
static int rx_escape(rx *r, sb *b, bool in_class)
{
    if (r->p >= r->end) return rx_fail(r, "a trailing backslash");
    char e = *r->p++;
    const char *cls = NULL;
    bool neg = false;
    if (r->raw && (e == 'D' || e == 'W' || e == 'S') && !in_class) {
        neg = true;
        e = (char)(e - 'A' + 'a');
    }
    if (e == 'd') cls = "0-9";
    else if (e == 'w') cls = "a-zA-Z0-9_";
    else if (e == 's') cls = r->raw ? "\\x09-\\x0D\\x20" : "\\x20"; /* raw: Python's ASCII \s */
    if (cls != NULL) {
        if (in_class) sb_puts(b, cls);
        else sb_printf(b, "[%s%s]", neg ? "^" : "", cls);
        return 0;
    }
    char lit;
    if (e == 'n') lit = '\n';
    else if (e == 't') lit = '\t';
    else if (e == 'r') lit = '\r';
    else if (r->raw && e == 'f') lit = '\f';
    else if (r->raw && e == 'v') lit = '\v';
    else if (r->raw && e == '"') lit = '"';
    else if (strchr(".^$|?*+()[]{}\\/-", e) != NULL && e != '\0') lit = e;
    else {
        char what[48];
        snprintf(what, sizeof(what), "the escape \\%c is not supported", e);
        return rx_fail(r, what);
    }
    if (in_class) {
        if (!r->raw && (lit == '"' || lit == '\\' || (unsigned char)lit < 0x20)) {
            return rx_fail(r, "a class with a quote, backslash or control character");
        }
        class_char(b, (unsigned char)lit);
        return 0;
    }
    if (r->raw) {
        sb_lit(b, &lit, 1);
        return 0;
    }
    /* as JSON string content */
    if (lit == '\n') sb_lit(b, "\\n", 2);
    else if (lit == '\t') sb_lit(b, "\\t", 2);
    else if (lit == '\r') sb_lit(b, "\\r", 2);
    else if (lit == '\\') sb_lit(b, "\\\\", 2);
    else sb_lit(b, &lit, 1);
    return 0;
}

static int rx_class(rx *r, sb *b)
{
    bool neg = r->p < r->end && *r->p == '^';
    if (neg) r->p++;
    sb_puts(b, neg ? "[^" : "[");
    bool first = true;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = false;
        unsigned char ch = (unsigned char)*r->p;
        if (ch == '\\') {
            r->p++;
            const char *before = r->p;
            if (rx_escape(r, b, true) != 0) return -1;
            /* a range from an escaped literal: \.-x is rare; refuse it */
            if (r->p < r->end && *r->p == '-' && r->p + 1 < r->end && r->p[1] != ']' &&
                strchr("dws", *before) == NULL) {
                return rx_fail(r, "a class range from an escape");
            }
            continue;
        }
        if (ch >= 0x80 || (!r->raw && (ch == '"' || ch < 0x20))) {
            return rx_fail(r, r->raw ? "a class with a non-ASCII character"
                                     : "a class with a quote, control or non-ASCII character");
        }
        r->p++;
        class_char(b, ch);
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            unsigned char hi = (unsigned char)r->p[1];
            if (hi == '\\' || hi >= 0x80 || hi < ch || (!r->raw && (hi == '"' || hi < 0x20))) {
                return rx_fail(r, "a bad class range");
            }
            sb_puts(b, "-");
            class_char(b, hi);
            r->p += 2;
        }
    }
    if (r->p >= r->end) return rx_fail(r, "an unclosed [");
    r->p++;
    if (neg && !r->raw) sb_puts(b, "\"\\\\\\x00-\\x1F");
    sb_puts(b, "]");
    return 0;
}

static int rx_alt(rx *r, sb *b);

static int rx_number(rx *r, long long *v)
{
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') return -1;
    long long n = 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        n = n * 10 + (*r->p++ - '0');
        if (n > JSON_SCHEMA_MAX_COUNT) return -2;
    }
    *v = n;
    return 0;
}

static int rx_seq(rx *r, sb *b)
{
    bool any = false;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (any) sb_puts(b, " ");
        any = true;
        unsigned char ch = (unsigned char)*r->p;
        if (ch == '(') {
            r->p++;
            if (r->p + 1 < r->end && r->p[0] == '?') {
                if (r->p[1] != ':') return rx_fail(r, "lookarounds and named groups are not supported");
                r->p += 2;
            }
            if (++r->depth > 32) return rx_fail(r, "groups nested too deep");
            sb_puts(b, "( ");
            if (rx_alt(r, b) != 0) return -1;
            r->depth--;
            if (r->p >= r->end || *r->p != ')') return rx_fail(r, "an unclosed (");
            r->p++;
            sb_puts(b, " )");
        } else if (ch == '[') {
            r->p++;
            if (rx_class(r, b) != 0) return -1;
        } else if (ch == '.') {
            r->p++;
            if (r->raw) {
                sb_puts(b, "[^\\n]");
            } else {
                use_prim(r->c, P_CHAR);
                sb_puts(b, "char");
            }
        } else if (ch == '\\') {
            r->p++;
            if (rx_escape(r, b, false) != 0) return -1;
        } else if (ch == '^' || ch == '$') {
            return rx_fail(r, "an anchor inside the pattern");
        } else if (strchr("*+?{", ch) != NULL) {
            return rx_fail(r, "a quantifier with nothing before it");
        } else if (ch < 0x20 && !r->raw) {
            return rx_fail(r, "a control character");
        } else {
            size_t n = 1;
            if (ch >= 0x80) {
                while (r->p + n < r->end && ((unsigned char)r->p[n] & 0xC0) == 0x80) n++;
            }
            if (ch == '"' && !r->raw) sb_lit(b, "\\\"", 2);
            else sb_lit(b, r->p, n);
            r->p += n;
        }
        if (r->p < r->end && strchr("*+?{", *r->p) != NULL) {
            long long lo = 0, hi = -1;
            char q = *r->p++;
            if (q == '+') lo = 1;
            else if (q == '?') hi = 1;
            else if (q == '{') {
                int rc = rx_number(r, &lo);
                if (rc == -2) return rx_fail(r, "a count over the limit");
                if (rc != 0) return rx_fail(r, "a bad {m,n}");
                hi = lo;
                if (r->p < r->end && *r->p == ',') {
                    r->p++;
                    hi = -1;
                    if (r->p < r->end && *r->p != '}') {
                        rc = rx_number(r, &hi);
                        if (rc == -2) return rx_fail(r, "a count over the limit");
                        if (rc != 0 || hi < lo) return rx_fail(r, "a bad {m,n}");
                    }
                }
                if (r->p >= r->end || *r->p != '}') return rx_fail(r, "a bad {m,n}");
                r->p++;
            }
            if (r->p < r->end && (*r->p == '?' || *r->p == '+')) {
                return rx_fail(r, "lazy and possessive quantifiers are not supported");
            }
            if (hi == 0) return rx_fail(r, "a {0} repeat");
            sb_repeat(b, lo, hi);
        }
    }
    if (!any) return rx_fail(r, "an empty alternative");
    return 0;
}

static int rx_alt(rx *r, sb *b)
{
    if (rx_seq(r, b) != 0) return -1;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        sb_puts(b, " | ");
        if (rx_seq(r, b) != 0) return -1;
    }
    return 0;
}

static int compile_pattern(cc *c, sb *b, const json_t *pat, const char *path)
{
    if (!json_is_string(pat)) return fail(c, "`pattern` at %s/pattern must be a string", path);
    const char *s = json_string_value(pat);
    size_t n = json_string_length(pat);
    char where[PATH_MAX_LEN + 32];
    snprintf(where, sizeof(where), "`pattern` at %s/pattern", path);
    rx r = {.c = c, .p = s, .end = s + n, .where = where};
    if (n < 2 || s[0] != '^' || s[n - 1] != '$' || (n >= 3 && s[n - 2] == '\\')) {
        return rx_fail(&r, "it must be anchored: ^...$");
    }
    r.p = s + 1;
    r.end = s + n - 1;
    sb_puts(b, "\"\\\"\" ( ");
    if (rx_alt(&r, b) != 0) return -1;
    if (r.p != r.end) return rx_fail(&r, "an unmatched )");
    sb_puts(b, " ) \"\\\"\"");
    return 0;
}

/* ---- objects ---- */

typedef struct prop {
    const char *key;
    const json_t *schema; /* NULL: any value */
    char path[PATH_MAX_LEN];
    bool required;
} prop;

typedef struct props {
    prop *v;
    size_t n, cap;
    const json_t *additional; /* NULL: none; else a schema (true: any) */
    char add_path[PATH_MAX_LEN];
    bool any_object;          /* no properties and no additionalProperties */
} props;

static int props_add(cc *c, props *ps, const char *key, const json_t *schema, const char *path)
{
    for (size_t i = 0; i < ps->n; i++) {
        if (strcmp(ps->v[i].key, key) == 0) {
            if (schema != NULL && ps->v[i].schema != NULL && ps->v[i].schema != schema) {
                return fail(c, "`allOf` at %s: the property `%s` is defined twice", path, key);
            }
            if (schema != NULL) {
                ps->v[i].schema = schema;
                snprintf(ps->v[i].path, PATH_MAX_LEN, "%s", path);
            }
            return 0;
        }
    }
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 8;
        prop *v = realloc(ps->v, cap * sizeof(*v));
        if (v == NULL) return oom(c);
        ps->v = v;
        ps->cap = cap;
    }
    prop *p = &ps->v[ps->n++];
    p->key = key;
    p->schema = schema;
    snprintf(p->path, PATH_MAX_LEN, "%s", path);
    p->required = false;
    return 0;
}

/* properties, required and additionalProperties of one object schema. */
static int props_collect(cc *c, props *ps, const json_t *s, const char *path)
{
    const json_t *pr = json_object_get(s, "properties");
    char p2[PATH_MAX_LEN], p3[PATH_MAX_LEN];
    if (pr != NULL) {
        path_join(p2, path, "properties");
        if (!json_is_object(pr)) return fail(c, "`properties` at %s must be an object", p2);
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)pr, key, v) {
            path_join(p3, p2, key);
            if (props_add(c, ps, key, v, p3) != 0) return -1;
        }
    }
    const json_t *req = json_object_get(s, "required");
    if (req != NULL) {
        path_join(p2, path, "required");
        if (!json_is_array(req)) return fail(c, "`required` at %s must be an array", p2);
        for (size_t i = 0; i < json_array_size(req); i++) {
            const json_t *k = json_array_get(req, i);
            if (!json_is_string(k)) return fail(c, "`required` at %s/%zu must be a string", p2, i);
            if (props_add(c, ps, json_string_value(k), NULL, p2) != 0) return -1;
            for (size_t j = 0; j < ps->n; j++) {
                if (strcmp(ps->v[j].key, json_string_value(k)) == 0) ps->v[j].required = true;
            }
        }
    }
    const json_t *ap = json_object_get(s, "additionalProperties");
    if (ap != NULL) {
        path_join(p2, path, "additionalProperties");
        if (json_is_false(ap)) ps->additional = NULL;
        else if (json_is_true(ap) || json_is_object(ap)) {
            ps->additional = ap;
            snprintf(ps->add_path, PATH_MAX_LEN, "%s", p2);
        } else {
            return fail(c, "`additionalProperties` at %s must be a boolean or a schema", p2);
        }
    }
    return 0;
}



static int compile_object(cc *c, sb *b, props *ps)
{
    size_t n = ps->n;
    char kvx[NAME_MAX_LEN] = "";
    if (ps->any_object) {
        use_prim(c, P_OBJECT);
        sb_puts(b, "object");
        return 0;
    }
    if (ps->additional != NULL) {
        char vn[NAME_MAX_LEN];
        if (compile(c, ps->additional, ps->add_path, vn) != 0) return -1;
        use_prim(c, P_STRING);
        new_name(c, kvx);
        sb body = {0};
        sb_printf(&body, "string \":\" %s", vn);
        add_rule(c, kvx, &body);
        free(body.p);
    }
    /* kv[i]: the key and its value */
    char (*vn)[NAME_MAX_LEN] = calloc(n ? n : 1, sizeof(*vn));
    char (*an)[NAME_MAX_LEN] = calloc(n + 1, sizeof(*an)); /* "" : matches nothing more */
    char (*bn)[NAME_MAX_LEN] = calloc(n + 1, sizeof(*bn));
    int rc = 0;
    if (vn == NULL || an == NULL || bn == NULL) {
        rc = oom(c);
        goto out;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (ps->v[i].schema == NULL) {
            use_prim(c, P_VALUE);
            snprintf(vn[i], NAME_MAX_LEN, "value");
        } else {
            rc = compile(c, ps->v[i].schema, ps->v[i].path, vn[i]);
        }
    }
    if (rc != 0) goto out;
    /* B[i]: properties i.. after one was written (each with its comma);
     * A[i]: properties i.. with none written yet. "" for nothing. */
    if (kvx[0]) {
        sb body = {0};
        new_name(c, bn[n]);
        sb_printf(&body, "( \",\" %s )*", kvx);
        add_rule(c, bn[n], &body);
        body.n = 0;
        new_name(c, an[n]);
        sb_printf(&body, "( %s ( \",\" %s )* )?", kvx, kvx);
        add_rule(c, an[n], &body);
        free(body.p);
    }
    for (size_t k = n; k-- > 0 && rc == 0;) {
        sb kv = {0}, body = {0};
        json_t *key = json_string(ps->v[k].key);
        if (key == NULL) {
            rc = oom(c);
            break;
        }
        rc = json_lit(c, &kv, key);
        json_decref(key);
        sb_printf(&kv, " \":\" %s", vn[k]);
        const char *kvs = kv.p ? kv.p : "";
        const char *bnext = bn[k + 1], *anext = an[k + 1];
        const char *sp = bnext[0] ? " " : "";
        if (ps->v[k].required) sb_printf(&body, "\",\" %s%s%s", kvs, sp, bnext);
        else sb_printf(&body, "( \",\" %s )?%s%s", kvs, sp, bnext);
        new_name(c, bn[k]);
        add_rule(c, bn[k], &body);
        body.n = 0;
        if (ps->v[k].required) sb_printf(&body, "%s%s%s", kvs, sp, bnext);
        else if (anext[0]) sb_printf(&body, "%s%s%s | %s", kvs, sp, bnext, anext);
        else sb_printf(&body, "( %s%s%s )?", kvs, sp, bnext);
        new_name(c, an[k]);
        add_rule(c, an[k], &body);
        free(body.p);
        free(kv.p);
    }
    if (rc == 0) {
        if (an[0][0]) sb_printf(b, "\"{\" %s \"}\"", an[0]);
        else sb_puts(b, "\"{\" \"}\"");
    }
out:
    free(vn);
    free(an);
    free(bn);
    return rc;
}

/* ---- arrays ---- */

static int compile_array(cc *c, sb *b, const json_t *s, const char *path)
{
    long long lo, hi;
    if (get_count(c, s, "minItems", path, 0, &lo) != 0) return -1;
    if (get_count(c, s, "maxItems", path, -1, &hi) != 0) return -1;
    if (hi >= 0 && hi < lo) return fail(c, "`maxItems` at %s/maxItems is under minItems", path);
    const json_t *pre = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    char p2[PATH_MAX_LEN], name[NAME_MAX_LEN];
    size_t np = 0;
    sb_puts(b, "\"[\"");
    if (pre != NULL) {
        path_join(p2, path, "prefixItems");
        if (!json_is_array(pre)) return fail(c, "`prefixItems` at %s must be an array", p2);
        np = json_array_size(pre);
        if (hi >= 0 && (long long)np > hi) {
            return fail(c, "`maxItems` at %s/maxItems is under the number of prefixItems", path);
        }
        for (size_t i = 0; i < np; i++) {
            path_index(p2, path, "prefixItems", i);
            if (compile(c, json_array_get(pre, i), p2, name) != 0) return -1;
            sb_printf(b, "%s %s", i ? " \",\"" : "", name);
        }
    }
    /* items: the schema of the rest; absent: any value without prefixItems,
     * none after them; false: none */
    bool more = items == NULL ? np == 0 : !json_is_false(items);
    long long rlo = lo > (long long)np ? lo - (long long)np : 0;
    long long rhi = hi < 0 ? -1 : hi - (long long)np;
    if (!more || rhi == 0) {
        if (rlo > 0) return fail(c, "`minItems` at %s/minItems asks for more items than allowed", path);
        sb_puts(b, " \"]\"");
        return 0;
    }
    if (items == NULL) {
        use_prim(c, P_VALUE);
        snprintf(name, sizeof(name), "value");
    } else {
        path_join(p2, path, "items");
        if (!json_is_object(items) && !json_is_true(items)) {
            return fail(c, "`items` at %s must be a schema", p2);
        }
        if (compile(c, items, p2, name) != 0) return -1;
    }
    if (np > 0) {
        sb_printf(b, " ( \",\" %s )", name);
        sb_repeat(b, rlo, rhi);
    } else {
        sb_printf(b, " %s( %s ( \",\" %s )", rlo == 0 ? "( " : "", name, name);
        sb_repeat(b, rlo > 0 ? rlo - 1 : 0, rhi < 0 ? -1 : rhi - 1);
        sb_puts(b, rlo == 0 ? " ) )?" : " )");
    }
    sb_puts(b, " \"]\"");
    return 0;
}

/* ---- strings ---- */

static int compile_string(cc *c, sb *b, const json_t *s, const char *path)
{
    const json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    bool has_len = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if (fmt != NULL) {
        if (pat != NULL || has_len) {
            return fail(c, "`format` at %s/format with `pattern` or a length is not supported", path);
        }
        static const struct { const char *name; unsigned bit; } k_formats[] = {
            {"date", P_DATE}, {"time", P_TIME}, {"date-time", P_DATETIME},
            {"uuid", P_UUID}, {"email", P_EMAIL},
        };
        const char *f = json_string_value(fmt);
        for (size_t i = 0; f != NULL && i < sizeof(k_formats) / sizeof(k_formats[0]); i++) {
            if (strcmp(f, k_formats[i].name) == 0) {
                use_prim(c, k_formats[i].bit);
                sb_printf(b, "\"\\\"\" %s \"\\\"\"", k_formats[i].name);
                return 0;
            }
        }
        return fail(c, "unsupported `format` at %s/format: %.64s (supported: date, time, "
                       "date-time, uuid, email)",
                    path, f ? f : "(not a string)");
    }
    if (pat != NULL) {
        if (has_len) return fail(c, "`pattern` at %s/pattern with a length is not supported", path);
        return compile_pattern(c, b, pat, path);
    }
    long long lo, hi;
    if (get_count(c, s, "minLength", path, 0, &lo) != 0) return -1;
    if (get_count(c, s, "maxLength", path, -1, &hi) != 0) return -1;
    if (hi >= 0 && hi < lo) return fail(c, "`maxLength` at %s/maxLength is under minLength", path);
    if (lo == 0 && hi < 0) {
        use_prim(c, P_STRING);
        sb_puts(b, "string");
        return 0;
    }
    use_prim(c, P_CHAR);
    if (hi == 0) {
        sb_puts(b, "\"\\\"\\\"\"");
        return 0;
    }
    sb_puts(b, "\"\\\"\" char");
    sb_repeat(b, lo, hi);
    sb_puts(b, " \"\\\"\"");
    return 0;
}

/* ---- $ref ---- */

/* The rule of a $ref ("#", "#/$defs/x", "#/definitions/x", or any JSON
 * pointer into the root): compiled once, so recursion is a rule that names
 * itself. */
static int compile_ref(cc *c, const json_t *ref, const char *path, char name[NAME_MAX_LEN])
{
    char rp[PATH_MAX_LEN];
    path_join(rp, path, "$ref");
    const char *r = json_string_value(ref);
    if (r == NULL || r[0] != '#' || (r[1] != '\0' && r[1] != '/')) {
        return fail(c, "`$ref` at %s must be a local reference (#/$defs/...)", rp);
    }
    const json_t *t = c->root;
    char tpath[PATH_MAX_LEN] = "";
    const char *p = r + 1;
    while (*p == '/' && t != NULL) {
        p++;
        char tok[128];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof(tok)) {
            if (p[0] == '~' && p[1] == '0') { tok[n++] = '~'; p += 2; }
            else if (p[0] == '~' && p[1] == '1') { tok[n++] = '/'; p += 2; }
            else tok[n++] = *p++;
        }
        tok[n] = '\0';
        char np[PATH_MAX_LEN];
        path_join(np, tpath, tok);
        memcpy(tpath, np, sizeof(tpath));
        if (json_is_object(t)) t = json_object_get(t, tok);
        else if (json_is_array(t)) {
            char *end;
            unsigned long i = strtoul(tok, &end, 10);
            t = (*end == '\0' && tok[0] != '\0') ? json_array_get(t, i) : NULL;
        } else t = NULL;
    }
    if (t == NULL || *p != '\0') return fail(c, "`$ref` at %s: `%.100s` does not exist", rp, r);
    for (size_t i = 0; i < c->n_refs; i++) {
        if (c->refs[i].target == t) {
            snprintf(name, NAME_MAX_LEN, "%s", c->refs[i].name);
            return 0;
        }
    }
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? c->cap_refs * 2 : 8;
        ref_entry *v = realloc(c->refs, cap * sizeof(*v));
        if (v == NULL) return oom(c);
        c->refs = v;
        c->cap_refs = cap;
    }
    ref_entry *e = &c->refs[c->n_refs++];
    e->target = t;
    snprintf(e->name, sizeof(e->name), "ref%zu", c->n_refs - 1);
    snprintf(name, NAME_MAX_LEN, "%s", e->name);
    char own[NAME_MAX_LEN];
    snprintf(own, sizeof(own), "%s", e->name); /* c->refs may move */
    int saved = c->depth;
    c->depth = 0; /* a new chain: recursion goes through the rule */
    int rc;
    if (json_is_true(t)) {
        use_prim(c, P_VALUE);
        sb body = {0};
        sb_puts(&body, "value");
        add_rule(c, own, &body);
        free(body.p);
        rc = 0;
    } else {
        char inner[NAME_MAX_LEN];
        rc = compile(c, t, tpath, inner);
        if (rc == 0) {
            sb body = {0};
            sb_puts(&body, inner);
            add_rule(c, own, &body);
            free(body.p);
        }
    }
    c->depth = saved;
    return rc;
}

/* ---- one schema ---- */

static const json_t *deref(cc *c, const json_t *s)
{
    for (int i = 0; i < 32 && json_is_object(s); i++) {
        const json_t *r = json_object_get(s, "$ref");
        if (!json_is_string(r)) return s;
        const char *p = json_string_value(r);
        if (strncmp(p, "#/$defs/", 8) == 0) s = json_object_get(json_object_get(c->root, "$defs"), p + 8);
        else if (strncmp(p, "#/definitions/", 14) == 0) s = json_object_get(json_object_get(c->root, "definitions"), p + 14);
        else return NULL;
    }
    return s;
}

static int compile_body(cc *c, sb *b, const json_t *s, const char *path)
{
    char p2[PATH_MAX_LEN], name[NAME_MAX_LEN];
    const char *key;
    json_t *v;
    bool constrains = false;
    json_object_foreach((json_t *)s, key, v) {
        enum fam f = kw_fam(key);
        path_join(p2, path, key);
        if (f == F_BAD) return fail(c, "unsupported JSON Schema keyword `%.64s` at %s", key, p2);
        if (f != F_NOTE && strcmp(key, "nullable") != 0) constrains = true;
    }
    const json_t *nullable = json_object_get(s, "nullable");
    if (nullable != NULL && !json_is_boolean(nullable)) {
        return fail(c, "`nullable` at %s/nullable must be a boolean", path);
    }
    bool or_null = json_is_true(nullable);
    if (or_null) {
        use_prim(c, P_NULL);
        sb_puts(b, "( ");
    }
    const json_t *ref = json_object_get(s, "$ref"), *en = json_object_get(s, "enum"),
                 *cn = json_object_get(s, "const"), *any = json_object_get(s, "anyOf"),
                 *one = json_object_get(s, "oneOf"), *all = json_object_get(s, "allOf");
    const char *combo = ref ? "$ref" : any ? "anyOf" : one ? "oneOf" : en ? "enum" : cn ? "const" : NULL;
    if (combo != NULL) {
        json_object_foreach((json_t *)s, key, v) {
            enum fam f = kw_fam(key);
            if (f == F_NOTE || strcmp(key, combo) == 0 || strcmp(key, "nullable") == 0) continue;
            if ((en || cn) && (strcmp(key, "enum") == 0 || strcmp(key, "const") == 0)) continue;
            if (strcmp(combo, "$ref") != 0 && strcmp(key, "type") == 0) continue;
            path_join(p2, path, key);
            return fail(c, "`%.64s` at %s next to `%s` is not supported", key, p2, combo);
        }
    }
    if (ref != NULL) {
        if (compile_ref(c, ref, path, name) != 0) return -1;
        sb_puts(b, name);
    } else if (any != NULL || one != NULL) {
        const json_t *alts = any ? any : one;
        if (!json_is_array(alts) || json_array_size(alts) == 0) {
            return fail(c, "`%s` at %s/%s must be a non-empty array", combo, path, combo);
        }
        for (size_t i = 0; i < json_array_size(alts); i++) {
            path_index(p2, path, combo, i);
            if (compile(c, json_array_get(alts, i), p2, name) != 0) return -1;
            sb_printf(b, "%s%s", i ? " | " : "", name);
        }
    } else if (en != NULL || cn != NULL) {
        if (en != NULL && cn != NULL) return fail(c, "`enum` and `const` at %s together are not supported", path);
        if (en != NULL && (!json_is_array(en) || json_array_size(en) == 0)) {
            return fail(c, "`enum` at %s/enum must be a non-empty array", path);
        }
        size_t n = en ? json_array_size(en) : 1;
        for (size_t i = 0; i < n; i++) {
            if (i) sb_puts(b, " | ");
            if (json_lit(c, b, en ? json_array_get(en, i) : cn) != 0) return -1;
        }
    } else if (all != NULL) {
        if (!json_is_array(all) || json_array_size(all) == 0) {
            return fail(c, "`allOf` at %s/allOf must be a non-empty array", path);
        }
        props ps = {0};
        int rc = props_collect(c, &ps, s, path);
        for (size_t i = 0; i < json_array_size(all) && rc == 0; i++) {
            path_index(p2, path, "allOf", i);
            const json_t *sub = deref(c, json_array_get(all, i));
            if (!json_is_object(sub)) {
                rc = fail(c, "`allOf` at %s: only object schemas (or $refs to them) are supported", p2);
                break;
            }
            json_object_foreach((json_t *)sub, key, v) {
                enum fam f = kw_fam(key);
                if (f == F_NOTE || f == F_OBJ) continue;
                if (strcmp(key, "type") == 0 && json_is_string(v) &&
                    strcmp(json_string_value(v), "object") == 0) continue;
                char p3[PATH_MAX_LEN];
                path_join(p3, p2, key);
                rc = fail(c, "`%.64s` at %s: only object schemas are supported in `allOf`", key, p3);
                break;
            }
            if (rc == 0) rc = props_collect(c, &ps, sub, p2);
        }
        ps.any_object = false;
        if (rc == 0) rc = compile_object(c, b, &ps);
        free(ps.v);
        if (rc != 0) return -1;
    } else {
        /* by type */
        int types = 0;
        const json_t *t = json_object_get(s, "type");
        if (t != NULL) {
            if (json_is_string(t)) types = type_bit(json_string_value(t));
            else if (json_is_array(t)) {
                for (size_t i = 0; i < json_array_size(t); i++) {
                    const char *tn = json_string_value(json_array_get(t, i));
                    int bit = tn ? type_bit(tn) : 0;
                    if (bit == 0) { types = 0; break; }
                    types |= bit;
                }
            }
            if (types == 0) {
                return fail(c, "`type` at %s/type must be one of null, boolean, object, array, "
                               "number, string, integer, or a list of them", path);
            }
        } else if (!constrains) {
            types = 0x7f & ~T_INTEGER; /* any value */
        } else {
            json_object_foreach((json_t *)s, key, v) {
                enum fam f = kw_fam(key);
                types |= f == F_OBJ ? T_OBJECT : f == F_ARR ? T_ARRAY : f == F_STR ? T_STRING
                       : f == F_INT ? T_INTEGER : 0;
            }
        }
        if (types & T_NUMBER) types &= ~T_INTEGER;
        json_object_foreach((json_t *)s, key, v) {
            enum fam f = kw_fam(key);
            int need = f == F_OBJ ? T_OBJECT : f == F_ARR ? T_ARRAY : f == F_STR ? T_STRING
                     : f == F_INT ? T_INTEGER : 0;
            if (need != 0 && !(types & need)) {
                path_join(p2, path, key);
                return fail(c, "`%.64s` at %s applies to no type of this schema%s", key, p2,
                            f == F_INT ? " (minimum/maximum are supported for integers only)" : "");
            }
        }
        bool first = true;
        for (int i = 0; i < 7; i++) {
            int bit = 1 << i;
            if (!(types & bit)) continue;
            if (!first) sb_puts(b, " | ");
            first = false;
            int rc = 0;
            switch (bit) {
            case T_NULL: use_prim(c, P_NULL); sb_puts(b, "null"); break;
            case T_BOOLEAN: use_prim(c, P_BOOLEAN); sb_puts(b, "boolean"); break;
            case T_NUMBER: use_prim(c, P_NUMBER); sb_puts(b, "number"); break;
            case T_STRING: rc = compile_string(c, b, s, path); break;
            case T_ARRAY: rc = compile_array(c, b, s, path); break;
            case T_OBJECT: {
                props ps = {0};
                rc = props_collect(c, &ps, s, path);
                ps.any_object = !json_object_get(s, "properties") &&
                                !json_object_get(s, "additionalProperties") &&
                                !json_object_get(s, "required");
                if (rc == 0) rc = compile_object(c, b, &ps);
                free(ps.v);
                break;
            }
            case T_INTEGER: {
                bool bounded = false;
                json_object_foreach((json_t *)s, key, v) {
                    if (kw_fam(key) == F_INT) bounded = true;
                }
                if (!bounded) {
                    use_prim(c, P_INTEGER);
                    sb_puts(b, "integer");
                    break;
                }
                long long lo, hi;
                if (int_bound(c, s, path, true, &lo) != 0 || int_bound(c, s, path, false, &hi) != 0) {
                    return -1;
                }
                if (lo > hi) return fail(c, "`minimum`/`maximum` at %s leave no integer", path);
                range_int(b, lo, hi);
                break;
            }
            }
            if (rc != 0) return -1;
        }
    }
    if (or_null) sb_puts(b, " | null )");
    return 0;
}

static int compile(cc *c, const json_t *s, const char *path, char name[NAME_MAX_LEN])
{
    if (c->rc != 0) return -1;
    if (json_is_true(s)) {
        use_prim(c, P_VALUE);
        snprintf(name, NAME_MAX_LEN, "value");
        return 0;
    }
    if (!json_is_object(s)) {
        return fail(c, "the schema at %s must be an object or true", path[0] ? path : "/");
    }
    if (++c->depth > JSON_SCHEMA_MAX_DEPTH) {
        return fail(c, "the schema at %s is nested deeper than %d", path, JSON_SCHEMA_MAX_DEPTH);
    }
    sb body = {0};
    int rc = compile_body(c, &body, s, path);
    c->depth--;
    if (rc == 0 && body.oom) rc = oom(c);
    if (rc == 0 && body.big) rc = fail(c, "the schema compiles to a grammar over %d bytes", JSON_SCHEMA_MAX_GBNF);
    if (rc == 0) {
        new_name(c, name);
        add_rule(c, name, &body);
    }
    free(body.p);
    return rc;
}

static char *finish(cc *c, const char *root, strata_err *err)
{
    sb out = {0};
    sb_printf(&out, "root ::= %s\n", root);
    if (c->rules.p != NULL) sb_put(&out, c->rules.p, c->rules.n);
    for (size_t i = 0; i < sizeof(k_prims) / sizeof(k_prims[0]); i++) {
        if (c->prims & k_prims[i].bit) sb_printf(&out, "%s ::= %s\n", k_prims[i].name, k_prims[i].body);
    }
    if (out.oom || c->rules.oom) {
        free(out.p);
        strata_err_set(err, STRATA_ENOMEM, "out of memory compiling the schema");
        return NULL;
    }
    if (out.big || c->rules.big || out.n > JSON_SCHEMA_MAX_GBNF) {
        free(out.p);
        strata_err_set(err, STRATA_EINVAL, "the schema compiles to a grammar over %d bytes",
                       JSON_SCHEMA_MAX_GBNF);
        return NULL;
    }
    return out.p;
}

int json_schema_to_gbnf(const json_t *schema, char **out, strata_err *err)
{
    *out = NULL;
    cc c = {.root = schema, .err = err};
    char name[NAME_MAX_LEN];
    int rc = compile(&c, schema, "", name);
    if (rc == 0 && c.rc == 0) {
        *out = finish(&c, name, err);
        rc = *out ? 0 : (err ? err->code : STRATA_EINVAL);
    } else {
        rc = c.rc ? c.rc : STRATA_EINVAL;
    }
    free(c.rules.p);
    free(c.refs);
    return rc;
}

char *json_schema_any_object_gbnf(void)
{
    cc c = {0};
    use_prim(&c, P_OBJECT);
    return finish(&c, "object", NULL);
}

/* Whether the '$' at s[i] is escaped (an odd number of backslashes before
 * it). */
static bool escaped_at(const char *s, size_t i)
{
    size_t k = 0;
    while (k < i && s[i - 1 - k] == '\\') k++;
    return k % 2 == 1;
}

int json_schema_regex_to_gbnf(const char *re, size_t n, const char *field, char **out,
                              strata_err *err)
{
    *out = NULL;
    cc c = {.err = err};
    char where[96];
    snprintf(where, sizeof(where), "`%.64s`", field);
    rx r = {.c = &c, .p = re, .end = re + n, .where = where, .raw = true};
    /* the whole output matches: anchors at the ends change nothing */
    if (r.p < r.end && *r.p == '^') r.p++;
    if (r.end > r.p && r.end[-1] == '$' && !escaped_at(re, (size_t)(r.end - 1 - re))) r.end--;
    if (memchr(re, '\0', n) != NULL) {
        fail(&c, "%s: a NUL byte", where);
    } else if (r.p == r.end) {
        rx_fail(&r, "an empty expression");
    } else {
        sb_puts(&c.rules, "rx ::= ");
        if (rx_alt(&r, &c.rules) == 0 && r.p != r.end) rx_fail(&r, "an unmatched )");
        sb_puts(&c.rules, "\n");
    }
    int rc = c.rc;
    if (rc == 0) {
        *out = finish(&c, "rx", err);
        if (*out == NULL) rc = err ? err->code : STRATA_EINVAL;
    }
    free(c.rules.p);
    return rc;
}

int json_schema_choice_to_gbnf(const json_t *choices, const char *field, char **out,
                               strata_err *err)
{
    *out = NULL;
    if (!json_is_array(choices) || json_array_size(choices) == 0) {
        return strata_err_set(err, STRATA_EINVAL, "`%.64s` must be a non-empty array of strings", field);
    }
    cc c = {.err = err};
    sb_puts(&c.rules, "choice ::=");
    size_t i;
    const json_t *v;
    json_array_foreach(choices, i, v) {
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            strlen(json_string_value(v)) != json_string_length(v)) {
            free(c.rules.p);
            return strata_err_set(err, STRATA_EINVAL, "`%.64s[%zu]` must be a non-empty string (no NUL)",
                                  field, i);
        }
        sb_puts(&c.rules, i ? " | " : " ");
        sb_lit(&c.rules, json_string_value(v), json_string_length(v));
    }
    sb_puts(&c.rules, "\n");
    *out = finish(&c, "choice", err);
    free(c.rules.p);
    return *out ? 0 : (err ? err->code : STRATA_EINVAL);
}
