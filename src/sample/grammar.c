/* The GBNF parser and compiler (see grammar.h for the dialect and
 * grammar_internal.h for the compiled form).
 *
 * One pass over the text builds each rule's element list; a group or a
 * repetition becomes a new, unnamed rule on the spot. Then the checks that
 * need the whole grammar: every referenced rule defined, a `root`, and no
 * left recursion (found from which rules can match nothing, then a search
 * for cycles among the rules each alternative may start with). The input is
 * untrusted: every step is bounded by the text length or by the element
 * limit, and recursion in the parser is bounded by the group nesting. */
#include "sample/grammar_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUP_NESTING 256

typedef struct rule_build {
    const char *name; /* into the text; NULL for a rule made from a group or repetition */
    size_t name_len;
    uint32_t origin;  /* named rule it was made inside (itself when named) */
    grammar_elem *e;
    size_t n, cap;
    bool defined;
    size_t first_ref; /* offset of the first reference, for "undefined" */
    size_t def_pos;   /* offset of the definition */
} rule_build;

typedef struct parser {
    const char *src;
    size_t len, pos;
    rule_build *rules;
    size_t n_rules, cap_rules;
    uint32_t *ranges; /* pairs */
    size_t n_ranges, cap_ranges;
    size_t n_elems_total;
    int depth;
    strata_err *err;
    int rc;
} parser;

/* --- errors --- */

static int fail_at(parser *p, size_t at, const char *fmt, const char *arg)
{
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->src[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char what[256];
    snprintf(what, sizeof(what), fmt, arg ? arg : "");
    p->rc = strata_err_set(p->err, STRATA_EFORMAT, "grammar: line %zu, column %zu: %s", line, col,
                           what);
    return p->rc;
}

static int fail_mem(parser *p)
{
    p->rc = strata_err_set(p->err, STRATA_ENOMEM, "grammar: out of memory");
    return p->rc;
}

/* --- building --- */

static int grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *nb = realloc(*buf, c * elem);
    if (nb == NULL) return -1;
    *buf = nb;
    *cap = c;
    return 0;
}

static int new_rule(parser *p, const char *name, size_t name_len, uint32_t origin, uint32_t *id)
{
    if (grow((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof(rule_build))) return fail_mem(p);
    rule_build *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof(*r));
    r->name = name;
    r->name_len = name_len;
    r->origin = name ? (uint32_t)p->n_rules : origin;
    *id = (uint32_t)p->n_rules++;
    return 0;
}

static int emit(parser *p, uint32_t rule, grammar_elem e)
{
    if (p->n_elems_total >= GRAMMAR_MAX_ELEMS) {
        return fail_at(p, p->pos, "grammar too large (over %s elements once repetitions are expanded)",
                       "1048576");
    }
    rule_build *r = &p->rules[rule];
    if (grow((void **)&r->e, &r->cap, r->n + 1, sizeof(grammar_elem))) return fail_mem(p);
    r->e[r->n++] = e;
    p->n_elems_total++;
    return 0;
}

static int emit_run(parser *p, uint32_t rule, const grammar_elem *run, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (emit(p, rule, run[i])) return p->rc;
    }
    return 0;
}

static uint32_t find_rule(const parser *p, const char *name, size_t len)
{
    for (size_t i = 0; i < p->n_rules; i++) {
        const rule_build *r = &p->rules[i];
        if (r->name && r->name_len == len && memcmp(r->name, name, len) == 0) return (uint32_t)i;
    }
    return UINT32_MAX;
}

/* Adds a character set from ranges (unsorted, possibly overlapping),
 * complemented when negate; returns the element. */
static int cmp_range(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

static int make_set(parser *p, uint32_t *r, size_t n, bool negate, grammar_elem *out)
{
    /* `[]` has no ranges (r may then be NULL): a set that matches nothing */
    if (n > 1) qsort(r, n, 2 * sizeof(uint32_t), cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i];
            r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    size_t first = p->n_ranges;
    if (grow((void **)&p->ranges, &p->cap_ranges, 2 * (p->n_ranges + m + 1), sizeof(uint32_t))) {
        return fail_mem(p);
    }
    if (!negate) {
        if (m > 0) memcpy(p->ranges + 2 * first, r, 2 * m * sizeof(uint32_t));
        p->n_ranges += m;
    } else {
        uint32_t next = 0;
        for (size_t i = 0; i < m; i++) {
            if (r[2 * i] > next) {
                p->ranges[2 * p->n_ranges] = next;
                p->ranges[2 * p->n_ranges + 1] = r[2 * i] - 1;
                p->n_ranges++;
            }
            next = r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) {
            p->ranges[2 * p->n_ranges] = next;
            p->ranges[2 * p->n_ranges + 1] = 0x10FFFF;
            p->n_ranges++;
        }
    }
    *out = (grammar_elem){GE_CHAR, (uint32_t)first, (uint32_t)(p->n_ranges - first)};
    return 0;
}

/* --- lexing --- */

static bool at_end(const parser *p) { return p->pos >= p->len; }
static char cur(const parser *p) { return at_end(p) ? '\0' : p->src[p->pos]; }

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

/* Spaces, tabs, newlines and comments. */
static void skip_space(parser *p)
{
    while (!at_end(p)) {
        char c = cur(p);
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            p->pos++;
        } else if (c == '#') {
            while (!at_end(p) && cur(p) != '\n') p->pos++;
        } else {
            break;
        }
    }
}

/* Whether a rule definition (`name ::=`) starts at pos. */
static bool rule_starts_at(const parser *p, size_t pos)
{
    size_t i = pos;
    while (i < p->len && is_name_char(p->src[i])) i++;
    if (i == pos) return false;
    while (i < p->len && (p->src[i] == ' ' || p->src[i] == '\t')) i++;
    return i + 3 <= p->len && memcmp(p->src + i, "::=", 3) == 0;
}

/* One UTF-8 character of the text into *cp; false when it is not valid. */
static bool read_utf8(parser *p, uint32_t *cp)
{
    const uint8_t *s = (const uint8_t *)p->src + p->pos;
    size_t left = p->len - p->pos;
    uint8_t b = s[0];
    size_t n;
    uint32_t v, min;
    if (b < 0x80) {
        *cp = b;
        p->pos++;
        return true;
    } else if (b >= 0xC2 && b <= 0xDF) {
        n = 2, v = b & 0x1F, min = 0x80;
    } else if (b >= 0xE0 && b <= 0xEF) {
        n = 3, v = b & 0x0F, min = 0x800;
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4, v = b & 0x07, min = 0x10000;
    } else {
        return false;
    }
    if (left < n) return false;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return false;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
    *cp = v;
    p->pos += n;
    return true;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class, escapes included. */
static int read_char(parser *p, uint32_t *cp)
{
    size_t at = p->pos;
    if (at_end(p)) return fail_at(p, at, "unterminated literal or class%s", NULL);
    if (cur(p) != '\\') {
        if (!read_utf8(p, cp)) return fail_at(p, at, "invalid UTF-8%s", NULL);
        return 0;
    }
    p->pos++;
    if (at_end(p)) return fail_at(p, at, "unterminated escape%s", NULL);
    char c = p->src[p->pos++];
    int digits = 0;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case '\\': case '"': case '[': case ']': case '-': case '/': case '\'': case '^':
        *cp = (uint8_t)c;
        return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: {
        char s[2] = {c, 0};
        return fail_at(p, at, "unknown escape \\%s", s);
    }
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int h = at_end(p) ? -1 : hex_value(cur(p));
        if (h < 0) return fail_at(p, at, "escape needs %s hex digits", digits == 2 ? "2" : digits == 4 ? "4" : "8");
        v = (v << 4) | (uint32_t)h;
        p->pos++;
    }
    if (v > 0x10FFFF) return fail_at(p, at, "escape beyond U+10FFFF%s", NULL);
    *cp = v;
    return 0;
}

/* --- grammar --- */

static int parse_alternatives(parser *p, uint32_t rule);

static int parse_literal(parser *p, uint32_t rule)
{
    size_t at = p->pos;
    p->pos++; /* the quote */
    for (;;) {
        if (at_end(p)) return fail_at(p, at, "unterminated string literal%s", NULL);
        if (cur(p) == '"') {
            p->pos++;
            return 0;
        }
        if (cur(p) == '\n') return fail_at(p, at, "newline in a string literal%s", NULL);
        uint32_t cp;
        if (read_char(p, &cp)) return p->rc;
        uint32_t r[2] = {cp, cp};
        grammar_elem e;
        if (make_set(p, r, 1, false, &e) || emit(p, rule, e)) return p->rc;
    }
}

static int parse_class(parser *p, uint32_t rule)
{
    size_t at = p->pos;
    p->pos++; /* [ */
    bool negate = false;
    if (cur(p) == '^') {
        negate = true;
        p->pos++;
    }
    uint32_t *r = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (at_end(p)) {
            free(r);
            return fail_at(p, at, "unterminated character class%s", NULL);
        }
        if (cur(p) == ']') {
            p->pos++;
            break;
        }
        uint32_t lo, hi;
        if (read_char(p, &lo)) {
            free(r);
            return p->rc;
        }
        hi = lo;
        if (cur(p) == '-' && p->pos + 1 < p->len && p->src[p->pos + 1] != ']') {
            size_t at_range = p->pos;
            p->pos++;
            if (read_char(p, &hi)) {
                free(r);
                return p->rc;
            }
            if (hi < lo) {
                free(r);
                return fail_at(p, at_range, "range whose end comes before its start%s", NULL);
            }
        }
        if (grow((void **)&r, &cap, 2 * (n + 1), sizeof(uint32_t))) {
            free(r);
            return fail_mem(p);
        }
        r[2 * n] = lo;
        r[2 * n + 1] = hi;
        n++;
    }
    grammar_elem e;
    int rc = make_set(p, r, n, negate, &e);
    free(r);
    if (rc) return rc;
    return emit(p, rule, e);
}

static int parse_number(parser *p, uint32_t *out)
{
    size_t at = p->pos;
    uint64_t v = 0;
    if (!(cur(p) >= '0' && cur(p) <= '9')) return fail_at(p, at, "expected a number%s", NULL);
    while (cur(p) >= '0' && cur(p) <= '9') {
        v = v * 10 + (uint64_t)(cur(p) - '0');
        if (v > GRAMMAR_MAX_REPEAT) return fail_at(p, at, "repetition bound over %s", "10000");
        p->pos++;
    }
    *out = (uint32_t)v;
    return 0;
}

/* An unnamed rule: run alt_a END [alt_b END] */
static int make_rule2(parser *p, uint32_t origin, const grammar_elem *a, size_t na,
                      const grammar_elem *b, size_t nb, bool second, uint32_t *id)
{
    if (new_rule(p, NULL, 0, origin, id)) return p->rc;
    grammar_elem end = {GE_END, 0, 0};
    if (emit_run(p, *id, a, na) || emit(p, *id, end)) return p->rc;
    if (second && (emit_run(p, *id, b, nb) || emit(p, *id, end))) return p->rc;
    return 0;
}

/* x* as a rule R ::= x R | "" ; returns R. */
static int make_star(parser *p, uint32_t origin, const grammar_elem *x, size_t n, uint32_t *id)
{
    if (new_rule(p, NULL, 0, origin, id)) return p->rc;
    grammar_elem end = {GE_END, 0, 0}, self = {GE_REF, *id, 0};
    if (emit_run(p, *id, x, n) || emit(p, *id, self) || emit(p, *id, end) || emit(p, *id, end)) {
        return p->rc;
    }
    return 0;
}

/* Applies a repetition operator at p->pos to rule's elements [start, n). */
static int parse_postfix(parser *p, uint32_t rule, size_t start)
{
    size_t at = p->pos;
    char op = cur(p);
    p->pos++;
    uint32_t min = 0, max = UINT32_MAX; /* UINT32_MAX: unbounded */
    if (op == '*') {
        min = 0;
    } else if (op == '+') {
        min = 1;
    } else if (op == '?') {
        max = 1;
    } else { /* { */
        skip_space(p);
        if (parse_number(p, &min)) return p->rc;
        skip_space(p);
        if (cur(p) == '}') {
            max = min;
        } else if (cur(p) == ',') {
            p->pos++;
            skip_space(p);
            if (cur(p) != '}') {
                if (parse_number(p, &max)) return p->rc;
                if (max < min) return fail_at(p, at, "repetition {m,n} with n < m%s", NULL);
            }
            skip_space(p);
        }
        if (cur(p) != '}') return fail_at(p, p->pos, "expected '}'%s", NULL);
        p->pos++;
    }
    rule_build *r = &p->rules[rule];
    size_t n = r->n - start;
    grammar_elem *x = malloc((n ? n : 1) * sizeof(grammar_elem));
    if (x == NULL) return fail_mem(p);
    if (n > 0) memcpy(x, r->e + start, n * sizeof(grammar_elem));
    r->n = start;
    p->n_elems_total -= n;
    uint32_t origin = p->rules[rule].origin;
    int rc = 0;
    for (uint32_t i = 0; i < min && rc == 0; i++) rc = emit_run(p, rule, x, n);
    if (rc == 0 && max == UINT32_MAX) {
        uint32_t star;
        rc = make_star(p, origin, x, n, &star);
        if (rc == 0) rc = emit(p, rule, (grammar_elem){GE_REF, star, 0});
    } else if (rc == 0 && max > min) {
        /* O(1) ::= x | "" ; O(k) ::= x O(k-1) | "" */
        uint32_t prev = 0;
        for (uint32_t k = 1; k <= max - min && rc == 0; k++) {
            uint32_t id;
            if (k == 1) {
                rc = make_rule2(p, origin, x, n, NULL, 0, true, &id);
            } else {
                rc = new_rule(p, NULL, 0, origin, &id);
                grammar_elem end = {GE_END, 0, 0}, ref = {GE_REF, prev, 0};
                if (rc == 0) {
                    rc = emit_run(p, id, x, n);
                    if (rc == 0) rc = emit(p, id, ref);
                    if (rc == 0) rc = emit(p, id, end);
                    if (rc == 0) rc = emit(p, id, end);
                }
            }
            prev = id;
        }
        if (rc == 0) rc = emit(p, rule, (grammar_elem){GE_REF, prev, 0});
    }
    free(x);
    return rc;
}

static int parse_sequence(parser *p, uint32_t rule)
{
    size_t atom = SIZE_MAX; /* where the last atom's elements start */
    for (;;) {
        skip_space(p);
        if (at_end(p)) return 0;
        char c = cur(p);
        if (c == '|' || c == ')') return 0;
        size_t here = p->rules[rule].n;
        if (c == '"') {
            if (parse_literal(p, rule)) return p->rc;
            atom = here;
        } else if (c == '[') {
            if (parse_class(p, rule)) return p->rc;
            atom = here;
        } else if (c == '.') {
            p->pos++;
            uint32_t r[2] = {0, 0x10FFFF};
            grammar_elem e;
            if (make_set(p, r, 1, false, &e) || emit(p, rule, e)) return p->rc;
            atom = here;
        } else if (c == '(') {
            size_t at = p->pos;
            if (p->depth >= MAX_GROUP_NESTING) return fail_at(p, at, "groups nested too deep%s", NULL);
            p->pos++;
            uint32_t g;
            if (new_rule(p, NULL, 0, p->rules[rule].origin, &g)) return p->rc;
            p->depth++;
            if (parse_alternatives(p, g)) return p->rc;
            p->depth--;
            skip_space(p);
            if (cur(p) != ')') return fail_at(p, at, "group '(' without its ')'%s", NULL);
            p->pos++;
            if (emit(p, rule, (grammar_elem){GE_REF, g, 0})) return p->rc;
            atom = here;
        } else if (is_name_char(c)) {
            if (rule_starts_at(p, p->pos)) return 0; /* the next rule */
            size_t at = p->pos;
            while (!at_end(p) && is_name_char(cur(p))) p->pos++;
            uint32_t ref = find_rule(p, p->src + at, p->pos - at);
            if (ref == UINT32_MAX) {
                if (new_rule(p, p->src + at, p->pos - at, 0, &ref)) return p->rc;
                p->rules[ref].first_ref = at;
            }
            if (emit(p, rule, (grammar_elem){GE_REF, ref, 0})) return p->rc;
            atom = here;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (atom == SIZE_MAX) {
                char s[2] = {c, 0};
                return fail_at(p, p->pos, "'%s' with nothing before it to repeat", s);
            }
            if (parse_postfix(p, rule, atom)) return p->rc;
        } else if (c == ':' && p->pos + 2 < p->len && memcmp(p->src + p->pos, "::=", 3) == 0) {
            return fail_at(p, p->pos, "'::=' without a rule name before it%s", NULL);
        } else {
            char s[2] = {c, 0};
            return fail_at(p, p->pos, "unexpected character '%s'", (unsigned char)c >= 0x20 ? s : "?");
        }
    }
}

static int parse_alternatives(parser *p, uint32_t rule)
{
    for (;;) {
        if (parse_sequence(p, rule)) return p->rc;
        if (emit(p, rule, (grammar_elem){GE_END, 0, 0})) return p->rc;
        skip_space(p);
        if (cur(p) != '|') return 0;
        p->pos++;
    }
}

static int parse_rules(parser *p)
{
    for (;;) {
        skip_space(p);
        if (at_end(p)) return 0;
        size_t at = p->pos;
        if (!is_name_char(cur(p))) {
            char s[2] = {cur(p), 0};
            return fail_at(p, at, "expected a rule name, found '%s'",
                           (unsigned char)s[0] >= 0x20 ? s : "?");
        }
        while (!at_end(p) && is_name_char(cur(p))) p->pos++;
        size_t name_len = p->pos - at;
        while (!at_end(p) && (cur(p) == ' ' || cur(p) == '\t')) p->pos++;
        if (p->pos + 3 > p->len || memcmp(p->src + p->pos, "::=", 3) != 0) {
            return fail_at(p, p->pos, "expected '::=' after the rule name%s", NULL);
        }
        p->pos += 3;
        uint32_t id = find_rule(p, p->src + at, name_len);
        if (id == UINT32_MAX) {
            if (new_rule(p, p->src + at, name_len, 0, &id)) return p->rc;
        } else if (p->rules[id].defined) {
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)(name_len < 60 ? name_len : 60), p->src + at);
            return fail_at(p, at, "rule '%s' defined twice", name);
        }
        p->rules[id].defined = true;
        p->rules[id].def_pos = at;
        if (parse_alternatives(p, id)) return p->rc;
        skip_space(p);
        if (cur(p) == ')') return fail_at(p, p->pos, "')' without its '('%s", NULL);
    }
}

/* --- whole-grammar checks --- */

static void rule_label(const parser *p, uint32_t id, char *buf, size_t cap)
{
    const rule_build *r = &p->rules[p->rules[id].origin];
    snprintf(buf, cap, "%.*s", (int)(r->name_len < 60 ? r->name_len : 60), r->name ? r->name : "?");
}

/* Nullable rules by fixpoint, then left edges (a rule an alternative may
 * start with, after a nullable prefix) searched for a cycle. */
static int check_left_recursion(parser *p)
{
    size_t n = p->n_rules;
    bool *nullable = calloc(n, sizeof(bool));
    uint8_t *color = calloc(n, 1);
    uint32_t *stack = malloc(n * sizeof(uint32_t));
    size_t *iter = malloc(n * sizeof(size_t));
    if (!nullable || !color || !stack || !iter) {
        free(nullable), free(color), free(stack), free(iter);
        return fail_mem(p);
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            const rule_build *rb = &p->rules[r];
            bool alt_ok = true;
            for (size_t i = 0; i < rb->n; i++) {
                const grammar_elem *e = &rb->e[i];
                if (e->type == GE_END) {
                    if (alt_ok) {
                        nullable[r] = true;
                        changed = true;
                        break;
                    }
                    alt_ok = true;
                } else if (e->type == GE_CHAR || !nullable[e->a]) {
                    alt_ok = false;
                }
            }
        }
    }
    /* Iterative DFS; iter[r] is the element index the search of r resumes at
     * and a flag in the top bit means "the current alternative is still in
     * its nullable prefix" is not needed: each step rescans from the start of
     * the alternative it is in. */
    int rc = 0;
    for (size_t s = 0; s < n && rc == 0; s++) {
        if (color[s]) continue;
        size_t sp = 0;
        stack[sp++] = (uint32_t)s;
        iter[s] = 0;
        color[s] = 1;
        while (sp > 0 && rc == 0) {
            uint32_t r = stack[sp - 1];
            const rule_build *rb = &p->rules[r];
            uint32_t next = UINT32_MAX;
            while (iter[r] < rb->n) {
                size_t i = iter[r]++;
                const grammar_elem *e = &rb->e[i];
                /* is e at the left edge: every element since the alternative's start nullable? */
                bool left = true;
                for (size_t j = i; j-- > 0;) {
                    const grammar_elem *f = &rb->e[j];
                    if (f->type == GE_END) break;
                    if (f->type == GE_CHAR || !nullable[f->a]) {
                        left = false;
                        break;
                    }
                }
                if (!left || e->type != GE_REF) continue;
                if (color[e->a] == 1) {
                    char name[64];
                    rule_label(p, e->a, name, sizeof(name));
                    size_t at = p->rules[p->rules[e->a].origin].def_pos;
                    rc = fail_at(p, at, "rule '%s' is left-recursive (it can reach itself before "
                                 "matching a character; a repetition of something that can match "
                                 "nothing does this too)", name);
                    break;
                }
                if (color[e->a] == 0) {
                    next = e->a;
                    break;
                }
            }
            if (rc) break;
            if (next != UINT32_MAX) {
                color[next] = 1;
                iter[next] = 0;
                stack[sp++] = next;
            } else if (iter[r] >= rb->n) {
                color[r] = 2;
                sp--;
            }
        }
    }
    free(nullable), free(color), free(stack), free(iter);
    return rc;
}

static void free_parser(parser *p)
{
    for (size_t i = 0; i < p->n_rules; i++) free(p->rules[i].e);
    free(p->rules);
    free(p->ranges);
}

int grammar_parse(grammar **out, const char *gbnf, size_t len, strata_err *err)
{
    *out = NULL;
    if (gbnf == NULL && len > 0) return strata_err_set(err, STRATA_EINVAL, "grammar: no text");
    if (len > GRAMMAR_MAX_TEXT_BYTES) {
        return strata_err_set(err, STRATA_EFORMAT, "grammar: %zu bytes of text, over the limit of %u",
                              len, GRAMMAR_MAX_TEXT_BYTES);
    }
    parser p = {.src = gbnf, .len = len, .err = err};
    int rc = parse_rules(&p);
    if (rc == 0) {
        for (size_t i = 0; i < p.n_rules; i++) {
            if (p.rules[i].name && !p.rules[i].defined) {
                char name[64];
                rule_label(&p, (uint32_t)i, name, sizeof(name));
                rc = fail_at(&p, p.rules[i].first_ref, "undefined rule '%s'", name);
                break;
            }
        }
    }
    uint32_t root = UINT32_MAX;
    if (rc == 0) {
        root = find_rule(&p, "root", 4);
        if (root == UINT32_MAX) rc = strata_err_set(err, STRATA_EFORMAT, "grammar: no rule named 'root'");
    }
    if (rc == 0) rc = check_left_recursion(&p);
    if (rc != 0) {
        free_parser(&p);
        return rc;
    }

    grammar *g = calloc(1, sizeof(*g));
    size_t n_alts = 0;
    for (size_t i = 0; i < p.n_rules; i++) {
        for (size_t j = 0; j < p.rules[i].n; j++) n_alts += p.rules[i].e[j].type == GE_END;
    }
    if (g) {
        g->n_elems = (uint32_t)p.n_elems_total + 1; /* + a GE_END guard at the end */
        g->elems = malloc(g->n_elems * sizeof(grammar_elem));
        g->alts = malloc((n_alts ? n_alts : 1) * sizeof(uint32_t));
        g->rule_alt0 = malloc(p.n_rules * sizeof(uint32_t));
        g->rule_n_alts = malloc(p.n_rules * sizeof(uint32_t));
    }
    if (!g || !g->elems || !g->alts || !g->rule_alt0 || !g->rule_n_alts) {
        grammar_free(g);
        free_parser(&p);
        return strata_err_set(err, STRATA_ENOMEM, "grammar: out of memory");
    }
    uint32_t ne = 0, na = 0;
    for (size_t i = 0; i < p.n_rules; i++) {
        const rule_build *rb = &p.rules[i];
        g->rule_alt0[i] = na;
        bool alt_start = true;
        for (size_t j = 0; j < rb->n; j++) {
            if (alt_start) g->alts[na++] = ne;
            g->elems[ne++] = rb->e[j];
            alt_start = rb->e[j].type == GE_END;
        }
        g->rule_n_alts[i] = na - g->rule_alt0[i];
    }
    g->elems[ne] = (grammar_elem){GE_END, 0, 0};
    g->n_alts = na;
    g->n_rules = (uint32_t)p.n_rules;
    g->root = root;
    g->ranges = p.ranges;
    g->n_ranges = (uint32_t)p.n_ranges;
    p.ranges = NULL;
    free_parser(&p);
    *out = g;
    return 0;
}

void grammar_free(grammar *g)
{
    if (g == NULL) return;
    free(g->elems);
    free(g->ranges);
    free(g->alts);
    free(g->rule_alt0);
    free(g->rule_n_alts);
    free(g);
}
