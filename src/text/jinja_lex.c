/* The Jinja lexer: template source to tokens.
 *
 * It owns the whitespace rules, which are all decided here so the parser
 * only sees trimmed text:
 * - the source's newlines are normalized to \n and one trailing newline is
 *   dropped (Jinja2's keep_trailing_newline=False);
 * - `{%-`, `{{-`, `{#-` strip all whitespace before the tag, `-%}`, `-}}`,
 *   `-#}` all whitespace after it;
 * - trim_blocks: the first newline after a block tag or comment is removed
 *   (`+%}` keeps it);
 * - lstrip_blocks: spaces and tabs from the start of a line up to a block
 *   tag or comment are removed (`{%+` keeps them);
 * - `{% raw %}...{% endraw %}` becomes one text token; comments vanish.
 * Inside tags it produces names, numbers, decoded string literals and
 * operators; a `}}` inside open brackets is two braces, as in Jinja2. */
#include "text/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    strata_arena *arena;
    const char *src; /* normalized source */
    size_t len;
    size_t pos;
    /* position cursor for line:col, moved forward only */
    size_t pc_off;
    uint32_t pc_line, pc_col;
    jtok *toks;
    size_t n, cap;
    strata_err *err;
} lexer;

enum strip_mode { STRIP_NONE, STRIP_ALL, STRIP_NEWLINE };

static void lex_pos(lexer *lx, size_t off, uint32_t *line, uint32_t *col)
{
    if (off < lx->pc_off) { /* never expected; restart the scan */
        lx->pc_off = 0;
        lx->pc_line = 1;
        lx->pc_col = 1;
    }
    while (lx->pc_off < off && lx->pc_off < lx->len) {
        unsigned char c = (unsigned char)lx->src[lx->pc_off++];
        if (c == '\n') {
            lx->pc_line++;
            lx->pc_col = 1;
        } else if ((c & 0xC0) != 0x80) {
            lx->pc_col++;
        }
    }
    *line = lx->pc_line;
    *col = lx->pc_col;
}

static int lex_fail(lexer *lx, size_t off, const char *msg, const char *detail)
{
    uint32_t line, col;
    lex_pos(lx, off, &line, &col);
    return strata_err_set(lx->err, STRATA_EFORMAT, "template %u:%u: %s%s", line, col, msg,
                          detail ? detail : "");
}

static jtok *lex_push(lexer *lx, int type, size_t off)
{
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        jtok *t = realloc(lx->toks, cap * sizeof(*t));
        if (t == NULL) return NULL;
        lx->toks = t;
        lx->cap = cap;
    }
    jtok *t = &lx->toks[lx->n++];
    memset(t, 0, sizeof(*t));
    t->type = (uint8_t)type;
    lex_pos(lx, off, &t->line, &t->col);
    return t;
}

static int lex_oom(lexer *lx)
{
    return strata_err_set(lx->err, STRATA_ENOMEM, "template: out of memory while lexing");
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static bool is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_name_char(char c)
{
    return is_name_start(c) || (c >= '0' && c <= '9');
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Length of the whitespace code point ending at s[end-1], 0 if none. */
static size_t space_before(const char *s, size_t start, size_t end)
{
    if (end <= start) return 0;
    size_t i = end - 1;
    while (i > start && ((unsigned char)s[i] & 0xC0) == 0x80 && end - i < 4) i--;
    size_t n;
    if (jstr_is_space_at(s, end, i, &n) && i + n == end) return n;
    return 0;
}

/* Emits src[start:end) as text after the whitespace rules: `left` is how the
 * previous tag ends, `right` how the next one begins (lstrip: the next tag is
 * a block or comment without `+`). */
static int lex_text(lexer *lx, size_t start, size_t end, int left, int right_strip_all,
                    bool right_lstrip)
{
    size_t s = start, e = end;
    if (left == STRIP_ALL) {
        size_t n;
        while (s < e && jstr_is_space_at(lx->src, e, s, &n)) s += n;
    } else if (left == STRIP_NEWLINE) {
        if (s < e && lx->src[s] == '\n') s++;
    }
    if (right_strip_all) {
        size_t n;
        while (e > s && (n = space_before(lx->src, s, e)) > 0) e -= n;
    } else if (right_lstrip) {
        /* only spaces and tabs back to the start of a line */
        size_t k = end;
        while (k > start && (lx->src[k - 1] == ' ' || lx->src[k - 1] == '\t')) k--;
        bool line_start = (k > start) ? lx->src[k - 1] == '\n'
                                      : (start == 0 || lx->src[start - 1] == '\n');
        if (line_start) e = k > s ? k : s;
    }
    if (e <= s) return 0;
    jtok *t = lex_push(lx, JT_TEXT, s);
    if (t == NULL) return lex_oom(lx);
    t->s = lx->src + s;
    t->len = e - s;
    return 0;
}

/* Appends code point cp as UTF-8 (surrogates and out-of-range values become
 * U+FFFD so strings stay valid UTF-8). */
static size_t put_utf8(char *o, uint32_t cp)
{
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = 0xFFFD;
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A quoted string at lx->pos, decoded with Python's escapes. */
static int lex_string(lexer *lx)
{
    size_t start = lx->pos;
    char q = lx->src[start];
    size_t i = start + 1;
    while (i < lx->len && lx->src[i] != q) {
        if (lx->src[i] == '\\') i++;
        i++;
    }
    if (i >= lx->len) return lex_fail(lx, start, "unterminated string literal", NULL);
    size_t end = i; /* the closing quote */
    /* decoding never grows the text: every escape is at least as long as
     * its UTF-8 */
    char *o = strata_arena_alloc(lx->arena, end - start + 1);
    if (o == NULL) return lex_oom(lx);
    size_t n = 0;
    for (i = start + 1; i < end; i++) {
        char c = lx->src[i];
        if (c != '\\') {
            o[n++] = c;
            continue;
        }
        char e = lx->src[++i];
        switch (e) {
        case '\n': break; /* line continuation */
        case '\\': o[n++] = '\\'; break;
        case '\'': o[n++] = '\''; break;
        case '"': o[n++] = '"'; break;
        case 'n': o[n++] = '\n'; break;
        case 't': o[n++] = '\t'; break;
        case 'r': o[n++] = '\r'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'v': o[n++] = '\v'; break;
        case 'a': o[n++] = '\a'; break;
        case 'x': case 'u': case 'U': {
            int want = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            int k;
            for (k = 0; k < want && i + 1 + (size_t)k < end; k++) {
                int h = hexval(lx->src[i + 1 + (size_t)k]);
                if (h < 0) break;
                cp = cp * 16 + (uint32_t)h;
            }
            if (k != want) return lex_fail(lx, i - 1, "bad escape in string literal", NULL);
            i += (size_t)want;
            n += put_utf8(o + n, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                int k = 1;
                while (k < 3 && i + 1 < end && lx->src[i + 1] >= '0' && lx->src[i + 1] <= '7') {
                    cp = cp * 8 + (uint32_t)(lx->src[++i] - '0');
                    k++;
                }
                n += put_utf8(o + n, cp);
            } else { /* unknown escapes stay as written, as in Python */
                o[n++] = '\\';
                o[n++] = e;
            }
        }
    }
    o[n] = '\0';
    jtok *t = lex_push(lx, JT_STRING, start);
    if (t == NULL) return lex_oom(lx);
    t->s = o;
    t->len = n;
    lx->pos = end + 1;
    return 0;
}

/* Digits with single underscores between them; returns the end. */
static size_t scan_digits(const char *s, size_t i, size_t len, int base)
{
    size_t start = i;
    while (i < len) {
        char c = s[i];
        bool ok = base == 16 ? hexval(c) >= 0 : base == 8 ? (c >= '0' && c <= '7')
                : base == 2 ? (c == '0' || c == '1') : is_digit(c);
        if (ok) {
            i++;
        } else if (c == '_' && i > start && i + 1 < len && s[i - 1] != '_') {
            i++;
        } else {
            break;
        }
    }
    while (i > start && s[i - 1] == '_') i--;
    return i;
}

static int lex_number(lexer *lx)
{
    size_t start = lx->pos, i = start;
    const char *s = lx->src;
    bool after_dot = start > 0 && s[start - 1] == '.';
    if (s[i] == '0' && i + 1 < lx->len && strchr("xXoObB", s[i + 1]) != NULL) {
        int base = (s[i + 1] == 'x' || s[i + 1] == 'X') ? 16 : (s[i + 1] == 'o' || s[i + 1] == 'O') ? 8 : 2;
        size_t e = scan_digits(s, i + 2, lx->len, base);
        if (e == i + 2) return lex_fail(lx, start, "bad number literal", NULL);
        uint64_t v = 0;
        for (size_t k = i + 2; k < e; k++) {
            if (s[k] == '_') continue;
            uint64_t d = (uint64_t)hexval(s[k]);
            if (v > (UINT64_MAX - d) / (uint64_t)base || v * (uint64_t)base + d > (uint64_t)INT64_MAX)
                return lex_fail(lx, start, "integer literal too large", NULL);
            v = v * (uint64_t)base + d;
        }
        jtok *t = lex_push(lx, JT_INT, start);
        if (t == NULL) return lex_oom(lx);
        t->i = (int64_t)v;
        lx->pos = e;
        return 0;
    }
    size_t e = scan_digits(s, i, lx->len, 10);
    bool is_float = false;
    if (!after_dot) {
        size_t f = e;
        if (f + 1 < lx->len && s[f] == '.' && is_digit(s[f + 1])) {
            f = scan_digits(s, f + 1, lx->len, 10);
            is_float = true;
        }
        if (f < lx->len && (s[f] == 'e' || s[f] == 'E')) {
            size_t g = f + 1;
            if (g < lx->len && (s[g] == '+' || s[g] == '-')) g++;
            if (g < lx->len && is_digit(s[g])) {
                f = scan_digits(s, g, lx->len, 10);
                is_float = true;
            }
        }
        if (is_float) e = f;
    }
    char buf[128];
    size_t nb = 0;
    for (size_t k = start; k < e; k++) {
        if (s[k] == '_') continue;
        if (nb + 1 >= sizeof(buf)) return lex_fail(lx, start, "number literal too long", NULL);
        buf[nb++] = s[k];
    }
    buf[nb] = '\0';
    jtok *t = lex_push(lx, is_float ? JT_FLOAT : JT_INT, start);
    if (t == NULL) return lex_oom(lx);
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        uint64_t v = 0;
        for (size_t k = 0; k < nb; k++) {
            uint64_t d = (uint64_t)(buf[k] - '0');
            if (v > ((uint64_t)INT64_MAX - d) / 10)
                return lex_fail(lx, start, "integer literal too large", NULL);
            v = v * 10 + d;
        }
        t->i = (int64_t)v;
    }
    lx->pos = e;
    return 0;
}

#define LEX_MAX_BRACKETS 256

/* Open brackets of the current tag, to match closers as Jinja2 does. */
typedef struct brackets {
    char open[LEX_MAX_BRACKETS];
    int depth;
} brackets;

static int lex_op(lexer *lx, brackets *br)
{
    const char *s = lx->src + lx->pos;
    size_t left = lx->len - lx->pos;
    static const struct { const char *text; uint8_t op; } ops[] = {
        {"//", JOP_FLOORDIV}, {"**", JOP_POW}, {"==", JOP_EQ}, {"!=", JOP_NE},
        {"<=", JOP_LE}, {">=", JOP_GE}, {"+", JOP_ADD}, {"-", JOP_SUB}, {"*", JOP_MUL},
        {"/", JOP_DIV}, {"%", JOP_MOD}, {"~", JOP_TILDE}, {"(", JOP_LPAREN},
        {")", JOP_RPAREN}, {"[", JOP_LBRACKET}, {"]", JOP_RBRACKET}, {"{", JOP_LBRACE},
        {"}", JOP_RBRACE}, {",", JOP_COMMA}, {".", JOP_DOT}, {":", JOP_COLON},
        {"|", JOP_PIPE}, {"=", JOP_ASSIGN}, {"<", JOP_LT}, {">", JOP_GT},
    };
    for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
        size_t n = strlen(ops[k].text);
        if (n <= left && memcmp(s, ops[k].text, n) == 0) {
            uint8_t op = ops[k].op;
            char c = *s;
            if (op == JOP_LPAREN || op == JOP_LBRACKET || op == JOP_LBRACE) {
                if (br->depth >= LEX_MAX_BRACKETS)
                    return lex_fail(lx, lx->pos, "brackets nest too deeply", NULL);
                br->open[br->depth++] = c;
            } else if (op == JOP_RPAREN || op == JOP_RBRACKET || op == JOP_RBRACE) {
                char want = br->depth > 0 ? br->open[br->depth - 1] : 0;
                char match = c == ')' ? '(' : c == ']' ? '[' : '{';
                if (want != match) {
                    char what[40];
                    if (want) snprintf(what, sizeof(what), "'%c', expected '%c'", c,
                                       want == '(' ? ')' : want == '[' ? ']' : '}');
                    else snprintf(what, sizeof(what), "'%c'", c);
                    return lex_fail(lx, lx->pos, "unexpected ", what);
                }
                br->depth--;
            }
            jtok *t = lex_push(lx, JT_OP, lx->pos);
            if (t == NULL) return lex_oom(lx);
            t->op = op;
            lx->pos += n;
            return 0;
        }
    }
    char what[8];
    size_t n = 0;
    what[n++] = '\'';
    what[n++] = *s;
    what[n++] = '\'';
    what[n] = '\0';
    return lex_fail(lx, lx->pos, "unexpected character ", what);
}

/* Does a tag end at lx->pos? Sets *n_bytes and *mod ('-', '+' or 0). */
static bool at_tag_end(const lexer *lx, bool block, int depth, size_t *n_bytes, char *mod)
{
    const char *s = lx->src + lx->pos;
    size_t left = lx->len - lx->pos;
    const char *close = block ? "%}" : "}}";
    if (!block && depth > 0) return false;
    if (left >= 3 && (s[0] == '-' || (block && s[0] == '+')) && memcmp(s + 1, close, 2) == 0) {
        *n_bytes = 3;
        *mod = s[0];
        return true;
    }
    if (left >= 2 && memcmp(s, close, 2) == 0) {
        *n_bytes = 2;
        *mod = 0;
        return true;
    }
    return false;
}

/* Tokens of one {{ }} or {% %} tag from lx->pos (just after the opener and
 * its modifier) to its end; returns how the next text is stripped. */
static int lex_tag(lexer *lx, bool block, size_t open_off, int *strip_next)
{
    brackets br = {.depth = 0};
    for (;;) {
        while (lx->pos < lx->len && is_ws(lx->src[lx->pos])) lx->pos++;
        if (lx->pos >= lx->len) {
            return lex_fail(lx, open_off, block ? "unclosed block tag '{%'" : "unclosed variable tag '{{'",
                            NULL);
        }
        size_t nb;
        char mod;
        if (at_tag_end(lx, block, br.depth, &nb, &mod)) {
            jtok *t = lex_push(lx, block ? JT_BLOCK_END : JT_VAR_END, lx->pos);
            if (t == NULL) return lex_oom(lx);
            lx->pos += nb;
            *strip_next = mod == '-' ? STRIP_ALL : (block && mod != '+') ? STRIP_NEWLINE : STRIP_NONE;
            return 0;
        }
        char c = lx->src[lx->pos];
        int rc;
        if (c == '\'' || c == '"') {
            rc = lex_string(lx);
        } else if (is_digit(c)) {
            rc = lex_number(lx);
        } else if (is_name_start(c)) {
            size_t s = lx->pos;
            while (lx->pos < lx->len && is_name_char(lx->src[lx->pos])) lx->pos++;
            jtok *t = lex_push(lx, JT_NAME, s);
            if (t == NULL) return lex_oom(lx);
            char *name = strata_arena_alloc(lx->arena, lx->pos - s + 1);
            if (name == NULL) return lex_oom(lx);
            memcpy(name, lx->src + s, lx->pos - s);
            t->s = name;
            t->len = lx->pos - s;
            rc = 0;
        } else {
            rc = lex_op(lx, &br);
        }
        if (rc != 0) return rc;
    }
}

/* At src[off] = "{%": is it `{% raw %}` (or `endraw`)? On a match sets the
 * end of the tag, its opening and closing modifiers. */
static bool match_word_tag(const lexer *lx, size_t off, const char *word, size_t *end,
                           char *open_mod, char *close_mod)
{
    const char *s = lx->src;
    size_t i = off + 2, n = lx->len, wl = strlen(word);
    *open_mod = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *open_mod = s[i++];
    while (i < n && is_ws(s[i])) i++;
    if (i + wl > n || memcmp(s + i, word, wl) != 0) return false;
    i += wl;
    if (i < n && is_name_char(s[i])) return false;
    while (i < n && is_ws(s[i])) i++;
    *close_mod = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *close_mod = s[i++];
    if (i + 2 > n || s[i] != '%' || s[i + 1] != '}') return false;
    *end = i + 2;
    return true;
}

/* Finds the next "{{", "{%" or "{#" at or after from. */
static size_t next_tag(const lexer *lx, size_t from)
{
    for (size_t i = from; i + 1 < lx->len; i++) {
        if (lx->src[i] == '{') {
            char c = lx->src[i + 1];
            if (c == '{' || c == '%' || c == '#') return i;
        }
    }
    return lx->len;
}

static int lex_run(lexer *lx)
{
    int strip = STRIP_NONE;
    while (lx->pos < lx->len) {
        size_t t = next_tag(lx, lx->pos);
        if (t >= lx->len) {
            return lex_text(lx, lx->pos, lx->len, strip, 0, false);
        }
        char kind = lx->src[t + 1];
        char mod = t + 2 < lx->len ? lx->src[t + 2] : 0;
        if (mod != '-' && mod != '+') mod = 0;
        if (kind == '{' && mod == '+') mod = 0; /* `{{+` is not a modifier */
        bool lstrip = kind != '{' && mod != '+';
        int rc = lex_text(lx, lx->pos, t, strip, mod == '-', lstrip);
        if (rc != 0) return rc;

        if (kind == '#') {
            size_t i = t + 2;
            while (i + 1 < lx->len && !(lx->src[i] == '#' && lx->src[i + 1] == '}')) i++;
            if (i + 1 >= lx->len) return lex_fail(lx, t, "unclosed comment '{#'", NULL);
            strip = (i > t + 2 && lx->src[i - 1] == '-') ? STRIP_ALL : STRIP_NEWLINE;
            lx->pos = i + 2;
            continue;
        }
        size_t raw_end;
        char om, cm;
        if (kind == '%' && match_word_tag(lx, t, "raw", &raw_end, &om, &cm)) {
            /* the body runs to the first {% endraw %} */
            size_t k = raw_end, end_start = lx->len, end_end = 0;
            char eom = 0, ecm = 0;
            while ((k = next_tag(lx, k)) < lx->len) {
                if (lx->src[k + 1] == '%' && match_word_tag(lx, k, "endraw", &end_end, &eom, &ecm)) {
                    end_start = k;
                    break;
                }
                k++;
            }
            if (end_start >= lx->len) return lex_fail(lx, t, "unclosed raw block", NULL);
            int left = cm == '-' ? STRIP_ALL : STRIP_NONE;
            rc = lex_text(lx, raw_end, end_start, left, eom == '-', false);
            if (rc != 0) return rc;
            strip = ecm == '-' ? STRIP_ALL : ecm == '+' ? STRIP_NONE : STRIP_NEWLINE;
            lx->pos = end_end;
            continue;
        }
        jtok *tok = lex_push(lx, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, t);
        if (tok == NULL) return lex_oom(lx);
        lx->pos = t + 2 + (mod ? 1 : 0);
        rc = lex_tag(lx, kind == '%', t, &strip);
        if (rc != 0) return rc;
    }
    return 0;
}

int jinja_lex(strata_arena *arena, const char *src, size_t len, jtok **out, size_t *n_out,
              strata_err *err)
{
    /* normalize newlines; drop one trailing newline */
    char *norm = strata_arena_alloc(arena, len + 1);
    if (norm == NULL) return strata_err_set(err, STRATA_ENOMEM, "template: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            norm[n++] = src[i];
        }
    }
    if (n > 0 && norm[n - 1] == '\n') n--;
    norm[n] = '\0';

    lexer lx = {.arena = arena, .src = norm, .len = n, .pc_line = 1, .pc_col = 1, .err = err};
    int rc = lex_run(&lx);
    if (rc == 0) {
        jtok *t = lex_push(&lx, JT_EOF, lx.len);
        if (t == NULL) rc = lex_oom(&lx);
    }
    if (rc == 0) {
        *out = strata_arena_calloc(arena, lx.n, sizeof(jtok));
        if (*out == NULL) {
            rc = lex_oom(&lx);
        } else {
            memcpy(*out, lx.toks, lx.n * sizeof(jtok));
            *n_out = lx.n;
        }
    }
    free(lx.toks);
    return rc;
}
