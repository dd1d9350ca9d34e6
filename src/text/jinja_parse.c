/* The Jinja parser: tokens to a syntax tree (jinja_internal.h's jnode).
 *
 * Recursive descent with Jinja2's precedence, lowest first:
 *   a if c else b  <  or  <  and  <  not  <  comparisons, in, not in
 *   <  + -  <  ~  <  * / // %  <  **  <  unary - +  <  postfix (.x [i] (args))
 *   then filters (| f) and tests (is [not] t) on the result.
 * So `not x is defined` is `not (x is defined)` and `a + b | trim` is
 * `a + (b | trim)`, as Jinja2 reads them. Statements are the tags of
 * jinja.h. Nesting is capped (JINJA_PARSE_MAX_DEPTH) so no source can
 * exhaust the stack; every node is allocated in the template's arena. */
#include "text/jinja_internal.h"

#include <stdio.h>
#include <string.h>

#define JINJA_PARSE_MAX_DEPTH 200
#define JINJA_MAX_ARGS 32

typedef struct parser {
    strata_arena *arena;
    const jtok *t;
    size_t n, i;
    strata_err *err;
    int depth;
    int loop_depth;
    bool failed;
    int code; /* of the first error */
} parser;

/* a growable array of pointers in the arena (old blocks are abandoned) */
typedef struct pvec {
    void **p;
    size_t n, cap;
} pvec;

static const jtok *cur(const parser *ps) { return &ps->t[ps->i]; }
static const jtok *peek(const parser *ps, size_t k)
{
    size_t j = ps->i + k;
    return &ps->t[j < ps->n ? j : ps->n - 1];
}
static void advance(parser *ps)
{
    if (ps->i + 1 < ps->n) ps->i++;
}

static bool tok_is_op(const jtok *t, int op) { return t->type == JT_OP && t->op == op; }
static bool tok_is_name(const jtok *t, const char *name)
{
    return t->type == JT_NAME && strcmp(t->s, name) == 0;
}

static void describe(const jtok *t, char *buf, size_t n)
{
    static const char *ops[] = {
        [JOP_ADD] = "+", [JOP_SUB] = "-", [JOP_MUL] = "*", [JOP_DIV] = "/",
        [JOP_FLOORDIV] = "//", [JOP_MOD] = "%", [JOP_POW] = "**", [JOP_TILDE] = "~",
        [JOP_LPAREN] = "(", [JOP_RPAREN] = ")", [JOP_LBRACKET] = "[", [JOP_RBRACKET] = "]",
        [JOP_LBRACE] = "{", [JOP_RBRACE] = "}", [JOP_COMMA] = ",", [JOP_DOT] = ".",
        [JOP_COLON] = ":", [JOP_PIPE] = "|", [JOP_ASSIGN] = "=", [JOP_EQ] = "==",
        [JOP_NE] = "!=", [JOP_LT] = "<", [JOP_LE] = "<=", [JOP_GT] = ">", [JOP_GE] = ">=",
    };
    switch (t->type) {
    case JT_EOF: snprintf(buf, n, "end of template"); break;
    case JT_TEXT: snprintf(buf, n, "template text"); break;
    case JT_VAR_BEGIN: snprintf(buf, n, "'{{'"); break;
    case JT_VAR_END: snprintf(buf, n, "'}}'"); break;
    case JT_BLOCK_BEGIN: snprintf(buf, n, "'{%%'"); break;
    case JT_BLOCK_END: snprintf(buf, n, "'%%}'"); break;
    case JT_NAME: snprintf(buf, n, "'%.40s'", t->s); break;
    case JT_STRING: snprintf(buf, n, "a string"); break;
    case JT_INT: snprintf(buf, n, "an integer"); break;
    case JT_FLOAT: snprintf(buf, n, "a number"); break;
    case JT_OP:
        snprintf(buf, n, "'%s'", t->op < sizeof(ops) / sizeof(ops[0]) && ops[t->op] ? ops[t->op] : "?");
        break;
    default: snprintf(buf, n, "a token"); break;
    }
}

static void *perr_at(parser *ps, const jtok *t, int code, const char *fmt, const char *a,
                     const char *b)
{
    if (!ps->failed) {
        char msg[300];
        snprintf(msg, sizeof(msg), fmt, a ? a : "", b ? b : "");
        strata_err_set(ps->err, code, "template %u:%u: %s", t->line, t->col, msg);
        ps->failed = true;
        ps->code = code;
    }
    return NULL;
}

static void *perr(parser *ps, const char *fmt, const char *a, const char *b)
{
    return perr_at(ps, cur(ps), STRATA_EFORMAT, fmt, a, b);
}

static void *unexpected(parser *ps, const char *wanted)
{
    char got[64];
    describe(cur(ps), got, sizeof(got));
    if (wanted) return perr(ps, "expected %s, got %s", wanted, got);
    return perr(ps, "unexpected %s%s", got, NULL);
}

static void *oom(parser *ps)
{
    return perr_at(ps, cur(ps), STRATA_ENOMEM, "out of memory%s%s", NULL, NULL);
}

static bool push(parser *ps, pvec *v, void *x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        void **p = strata_arena_calloc(ps->arena, cap, sizeof(void *));
        if (p == NULL) {
            oom(ps);
            return false;
        }
        if (v->n) memcpy(p, v->p, v->n * sizeof(void *));
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = x;
    return true;
}

static jnode *new_node(parser *ps, int kind, const jtok *at)
{
    jnode *n = strata_arena_alloc(ps->arena, sizeof(jnode));
    if (n == NULL) return oom(ps);
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static bool expect_op(parser *ps, int op, const char *what)
{
    if (!tok_is_op(cur(ps), op)) {
        unexpected(ps, what);
        return false;
    }
    advance(ps);
    return true;
}

static bool expect_block_end(parser *ps)
{
    if (cur(ps)->type != JT_BLOCK_END) {
        unexpected(ps, "end of tag '%}'");
        return false;
    }
    advance(ps);
    return true;
}

static bool enter(parser *ps)
{
    if (++ps->depth > JINJA_PARSE_MAX_DEPTH) {
        perr(ps, "template nests too deeply (more than %s levels)", "200", NULL);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* expressions                                                         */

static jnode *parse_expression(parser *ps, bool with_cond);
static jnode *parse_unary(parser *ps, bool with_filter);

static bool starts_expression(const jtok *t)
{
    switch (t->type) {
    case JT_NAME: case JT_STRING: case JT_INT: case JT_FLOAT: return true;
    case JT_OP:
        return t->op == JOP_LPAREN || t->op == JOP_LBRACKET || t->op == JOP_LBRACE ||
               t->op == JOP_SUB || t->op == JOP_ADD;
    default: return false;
    }
}

/* Arguments of a call, filter or test after '(' up to ')'. */
static bool parse_args(parser *ps, jnode *n)
{
    pvec pos = {0}, kwn = {0}, kwv = {0};
    if (!expect_op(ps, JOP_LPAREN, "'('")) return false;
    while (!tok_is_op(cur(ps), JOP_RPAREN)) {
        if (pos.n + kwv.n > 0 && !expect_op(ps, JOP_COMMA, "',' or ')'")) return false;
        if (tok_is_op(cur(ps), JOP_RPAREN)) break; /* trailing comma */
        if (tok_is_op(cur(ps), JOP_MUL) || tok_is_op(cur(ps), JOP_POW)) {
            perr_at(ps, cur(ps), STRATA_EUNSUPPORTED, "*args and **kwargs in calls are not supported%s%s",
                    NULL, NULL);
            return false;
        }
        if (pos.n + kwv.n >= JINJA_MAX_ARGS) {
            perr(ps, "too many arguments (at most %s)", "32", NULL);
            return false;
        }
        if (cur(ps)->type == JT_NAME && tok_is_op(peek(ps, 1), JOP_ASSIGN)) {
            const char *name = cur(ps)->s;
            advance(ps);
            advance(ps);
            jnode *v = parse_expression(ps, true);
            if (v == NULL || !push(ps, &kwn, (void *)name) || !push(ps, &kwv, v)) return false;
        } else {
            if (kwv.n > 0) {
                perr(ps, "positional argument follows keyword argument%s%s", NULL, NULL);
                return false;
            }
            jnode *v = parse_expression(ps, true);
            if (v == NULL || !push(ps, &pos, v)) return false;
        }
    }
    advance(ps);
    n->kids = (jnode **)pos.p;
    n->n_kids = pos.n;
    n->kwnames = (const char **)kwn.p;
    n->kw = (jnode **)kwv.p;
    n->n_kw = kwv.n;
    return true;
}

static jnode *parse_list_or_dict(parser *ps)
{
    const jtok *at = cur(ps);
    bool is_dict = tok_is_op(at, JOP_LBRACE);
    int close = is_dict ? JOP_RBRACE : JOP_RBRACKET;
    jnode *n = new_node(ps, is_dict ? JN_DICT : JN_LIST, at);
    if (n == NULL) return NULL;
    advance(ps);
    pvec items = {0};
    size_t count = 0;
    while (!tok_is_op(cur(ps), close)) {
        if (count > 0 && !expect_op(ps, JOP_COMMA, is_dict ? "',' or '}'" : "',' or ']'")) return NULL;
        if (tok_is_op(cur(ps), close)) break;
        jnode *k = parse_expression(ps, true);
        if (k == NULL || !push(ps, &items, k)) return NULL;
        if (is_dict) {
            if (!expect_op(ps, JOP_COLON, "':'")) return NULL;
            jnode *v = parse_expression(ps, true);
            if (v == NULL || !push(ps, &items, v)) return NULL;
        }
        count++;
    }
    advance(ps);
    n->kids = (jnode **)items.p;
    n->n_kids = items.n;
    return n;
}

static jnode *parse_primary(parser *ps)
{
    const jtok *t = cur(ps);
    jnode *n;
    switch (t->type) {
    case JT_NAME:
        n = new_node(ps, JN_LITERAL, t);
        if (n == NULL) return NULL;
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) {
            n->lit = jv_bool(true);
        } else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            n->lit = jv_bool(false);
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            n->lit = jv_none();
        } else {
            n->kind = JN_NAME;
            n->name = t->s;
            n->len = t->len;
        }
        advance(ps);
        return n;
    case JT_STRING: {
        /* adjacent literals join: "a" "b" is "ab" */
        size_t total = 0, k = ps->i;
        while (k < ps->n && ps->t[k].type == JT_STRING) total += ps->t[k++].len;
        char *s = strata_arena_alloc(ps->arena, total + 1);
        if (s == NULL) return oom(ps);
        size_t off = 0;
        while (cur(ps)->type == JT_STRING) {
            memcpy(s + off, cur(ps)->s, cur(ps)->len);
            off += cur(ps)->len;
            advance(ps);
        }
        n = new_node(ps, JN_LITERAL, t);
        if (n == NULL) return NULL;
        jv_str *str = jv_const_str(ps->arena, s, total);
        if (str == NULL) return oom(ps);
        n->lit.kind = JV_STRING;
        n->lit.u.o = &str->h;
        return n;
    }
    case JT_INT:
    case JT_FLOAT:
        n = new_node(ps, JN_LITERAL, t);
        if (n == NULL) return NULL;
        n->lit = t->type == JT_INT ? jv_int(t->i) : jv_float(t->f);
        advance(ps);
        return n;
    case JT_OP:
        if (t->op == JOP_LPAREN) {
            advance(ps);
            if (tok_is_op(cur(ps), JOP_RPAREN)) { /* () is the empty tuple */
                advance(ps);
                return new_node(ps, JN_TUPLE, t);
            }
            jnode *e = parse_expression(ps, true);
            if (e == NULL) return NULL;
            if (tok_is_op(cur(ps), JOP_COMMA)) {
                jnode *tup = new_node(ps, JN_TUPLE, t);
                pvec items = {0};
                if (tup == NULL || !push(ps, &items, e)) return NULL;
                while (tok_is_op(cur(ps), JOP_COMMA)) {
                    advance(ps);
                    if (tok_is_op(cur(ps), JOP_RPAREN)) break;
                    jnode *x = parse_expression(ps, true);
                    if (x == NULL || !push(ps, &items, x)) return NULL;
                }
                tup->kids = (jnode **)items.p;
                tup->n_kids = items.n;
                e = tup;
            }
            if (!expect_op(ps, JOP_RPAREN, "')'")) return NULL;
            return e;
        }
        if (t->op == JOP_LBRACKET || t->op == JOP_LBRACE) return parse_list_or_dict(ps);
        return unexpected(ps, NULL);
    default: return unexpected(ps, "an expression");
    }
}

static jnode *parse_subscript(parser *ps, jnode *obj)
{
    const jtok *at = cur(ps);
    advance(ps); /* [ */
    jnode *parts[3] = {NULL, NULL, NULL};
    bool slice = false;
    if (!tok_is_op(cur(ps), JOP_COLON)) {
        parts[0] = parse_expression(ps, true);
        if (parts[0] == NULL) return NULL;
    }
    if (tok_is_op(cur(ps), JOP_COLON)) {
        slice = true;
        advance(ps);
        if (!tok_is_op(cur(ps), JOP_RBRACKET) && !tok_is_op(cur(ps), JOP_COLON)) {
            parts[1] = parse_expression(ps, true);
            if (parts[1] == NULL) return NULL;
        }
        if (tok_is_op(cur(ps), JOP_COLON)) {
            advance(ps);
            if (!tok_is_op(cur(ps), JOP_RBRACKET)) {
                parts[2] = parse_expression(ps, true);
                if (parts[2] == NULL) return NULL;
            }
        }
    }
    if (!expect_op(ps, JOP_RBRACKET, "']'")) return NULL;
    jnode *n = new_node(ps, slice ? JN_SLICE : JN_ITEM, at);
    if (n == NULL) return NULL;
    n->a = obj;
    n->b = parts[0];
    n->c = slice ? parts[1] : NULL;
    if (slice) {
        /* the step goes in kids[0] */
        if (parts[2] != NULL) {
            n->kids = strata_arena_calloc(ps->arena, 1, sizeof(jnode *));
            if (n->kids == NULL) return oom(ps);
            n->kids[0] = parts[2];
            n->n_kids = 1;
        }
    }
    return n;
}

static jnode *parse_postfix(parser *ps, jnode *n)
{
    for (;;) {
        const jtok *t = cur(ps);
        if (tok_is_op(t, JOP_DOT)) {
            advance(ps);
            const jtok *a = cur(ps);
            if (a->type == JT_NAME) {
                jnode *x = new_node(ps, JN_ATTR, t);
                if (x == NULL) return NULL;
                x->a = n;
                x->name = a->s;
                x->len = a->len;
                advance(ps);
                n = x;
            } else if (a->type == JT_INT) {
                jnode *x = new_node(ps, JN_ITEM, t), *k = new_node(ps, JN_LITERAL, a);
                if (x == NULL || k == NULL) return NULL;
                k->lit = jv_int(a->i);
                x->a = n;
                x->b = k;
                advance(ps);
                n = x;
            } else {
                return unexpected(ps, "an attribute name");
            }
        } else if (tok_is_op(t, JOP_LBRACKET)) {
            n = parse_subscript(ps, n);
            if (n == NULL) return NULL;
        } else if (tok_is_op(t, JOP_LPAREN)) {
            jnode *x = new_node(ps, JN_CALL, t);
            if (x == NULL) return NULL;
            x->a = n;
            x->line = n->line; /* errors of a call point at what is called */
            x->col = n->col;
            if (!parse_args(ps, x)) return NULL;
            n = x;
        } else {
            return n;
        }
    }
}

/* `| name(args)` applied to input (NULL inside filter blocks) */
static jnode *parse_filter(parser *ps, jnode *input)
{
    const jtok *at = cur(ps);
    if (at->type != JT_NAME) return unexpected(ps, "a filter name");
    jnode *f = new_node(ps, JN_FILTER, at);
    if (f == NULL) return NULL;
    f->a = input;
    f->name = at->s;
    f->len = at->len;
    advance(ps);
    if (tok_is_op(cur(ps), JOP_LPAREN) && !parse_args(ps, f)) return NULL;
    return f;
}

static bool is_test_arg_start(const jtok *t)
{
    if (t->type == JT_NAME) {
        static const char *stop[] = {"else", "or", "and", "if", "is", "in", "not"};
        for (size_t i = 0; i < sizeof(stop) / sizeof(stop[0]); i++) {
            if (strcmp(t->s, stop[i]) == 0) return false;
        }
        return true;
    }
    return t->type == JT_STRING || t->type == JT_INT || t->type == JT_FLOAT ||
           tok_is_op(t, JOP_LBRACKET) || tok_is_op(t, JOP_LBRACE) || tok_is_op(t, JOP_SUB);
}

static jnode *parse_filter_expr(parser *ps, jnode *n)
{
    for (;;) {
        const jtok *t = cur(ps);
        if (tok_is_op(t, JOP_PIPE)) {
            advance(ps);
            n = parse_filter(ps, n);
            if (n == NULL) return NULL;
        } else if (tok_is_name(t, "is")) {
            advance(ps);
            jnode *x = new_node(ps, JN_TEST, t);
            if (x == NULL) return NULL;
            if (tok_is_name(cur(ps), "not")) {
                x->op = 1;
                advance(ps);
            }
            if (cur(ps)->type != JT_NAME) return unexpected(ps, "a test name");
            x->a = n;
            x->name = cur(ps)->s;
            x->len = cur(ps)->len;
            advance(ps);
            if (tok_is_op(cur(ps), JOP_LPAREN)) {
                if (!parse_args(ps, x)) return NULL;
            } else if (is_test_arg_start(cur(ps))) {
                jnode *arg = parse_unary(ps, false);
                if (arg == NULL) return NULL;
                x->kids = strata_arena_calloc(ps->arena, 1, sizeof(jnode *));
                if (x->kids == NULL) return oom(ps);
                x->kids[0] = arg;
                x->n_kids = 1;
            }
            n = x;
        } else if (tok_is_op(t, JOP_LPAREN)) {
            jnode *x = new_node(ps, JN_CALL, t);
            if (x == NULL) return NULL;
            x->a = n;
            if (!parse_args(ps, x)) return NULL;
            n = x;
        } else {
            return n;
        }
    }
}

static jnode *parse_unary(parser *ps, bool with_filter)
{
    if (!enter(ps)) return NULL;
    const jtok *t = cur(ps);
    jnode *n;
    if (tok_is_op(t, JOP_SUB) || tok_is_op(t, JOP_ADD)) {
        advance(ps);
        jnode *a = parse_unary(ps, false);
        if (a == NULL) return NULL;
        n = new_node(ps, JN_UNARY, t);
        if (n == NULL) return NULL;
        n->op = t->op == JOP_SUB ? JOP_NEG : JOP_POS;
        n->a = a;
    } else {
        n = parse_primary(ps);
    }
    if (n != NULL) n = parse_postfix(ps, n);
    if (n != NULL && with_filter) n = parse_filter_expr(ps, n);
    ps->depth--;
    return n;
}

static jnode *binary(parser *ps, int kind, int op, const jtok *at, jnode *a, jnode *b)
{
    if (a == NULL || b == NULL) return NULL;
    jnode *n = new_node(ps, kind, at);
    if (n == NULL) return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *ps)
{
    jnode *n = parse_unary(ps, true);
    while (n != NULL && tok_is_op(cur(ps), JOP_POW)) {
        const jtok *t = cur(ps);
        advance(ps);
        n = binary(ps, JN_BINARY, JOP_POW, t, n, parse_unary(ps, true));
    }
    return n;
}

static jnode *parse_math2(parser *ps)
{
    jnode *n = parse_pow(ps);
    while (n != NULL) {
        const jtok *t = cur(ps);
        if (!(tok_is_op(t, JOP_MUL) || tok_is_op(t, JOP_DIV) || tok_is_op(t, JOP_FLOORDIV) ||
              tok_is_op(t, JOP_MOD)))
            break;
        advance(ps);
        n = binary(ps, JN_BINARY, t->op, t, n, parse_pow(ps));
    }
    return n;
}

static jnode *parse_concat(parser *ps)
{
    jnode *n = parse_math2(ps);
    while (n != NULL && tok_is_op(cur(ps), JOP_TILDE)) {
        const jtok *t = cur(ps);
        advance(ps);
        n = binary(ps, JN_BINARY, JOP_TILDE, t, n, parse_math2(ps));
    }
    return n;
}

static jnode *parse_math1(parser *ps)
{
    jnode *n = parse_concat(ps);
    while (n != NULL && (tok_is_op(cur(ps), JOP_ADD) || tok_is_op(cur(ps), JOP_SUB))) {
        const jtok *t = cur(ps);
        advance(ps);
        n = binary(ps, JN_BINARY, t->op, t, n, parse_concat(ps));
    }
    return n;
}

static jnode *parse_compare(parser *ps)
{
    const jtok *at = cur(ps);
    jnode *first = parse_math1(ps);
    if (first == NULL) return NULL;
    pvec kids = {0}, ops = {0};
    for (;;) {
        const jtok *t = cur(ps);
        int op;
        if (t->type == JT_OP && (t->op == JOP_EQ || t->op == JOP_NE || t->op == JOP_LT ||
                                 t->op == JOP_LE || t->op == JOP_GT || t->op == JOP_GE)) {
            op = t->op;
            advance(ps);
        } else if (tok_is_name(t, "in")) {
            op = JOP_IN;
            advance(ps);
        } else if (tok_is_name(t, "not") && tok_is_name(peek(ps, 1), "in")) {
            op = JOP_NOTIN;
            advance(ps);
            advance(ps);
        } else {
            break;
        }
        jnode *x = parse_math1(ps);
        if (x == NULL || !push(ps, &kids, x) || !push(ps, &ops, (void *)(uintptr_t)op)) return NULL;
    }
    if (kids.n == 0) return first;
    jnode *n = new_node(ps, JN_COMPARE, at);
    if (n == NULL) return NULL;
    n->a = first;
    n->kids = (jnode **)kids.p;
    n->n_kids = kids.n;
    n->ops = strata_arena_alloc(ps->arena, kids.n);
    if (n->ops == NULL) return oom(ps);
    for (size_t i = 0; i < kids.n; i++) n->ops[i] = (uint8_t)(uintptr_t)ops.p[i];
    return n;
}

static jnode *parse_not(parser *ps)
{
    if (tok_is_name(cur(ps), "not")) {
        const jtok *t = cur(ps);
        advance(ps);
        if (!enter(ps)) return NULL;
        jnode *a = parse_not(ps);
        ps->depth--;
        if (a == NULL) return NULL;
        jnode *n = new_node(ps, JN_NOT, t);
        if (n == NULL) return NULL;
        n->a = a;
        return n;
    }
    return parse_compare(ps);
}

static jnode *parse_and(parser *ps)
{
    jnode *n = parse_not(ps);
    while (n != NULL && tok_is_name(cur(ps), "and")) {
        const jtok *t = cur(ps);
        advance(ps);
        n = binary(ps, JN_AND, 0, t, n, parse_not(ps));
    }
    return n;
}

static jnode *parse_or(parser *ps)
{
    jnode *n = parse_and(ps);
    while (n != NULL && tok_is_name(cur(ps), "or")) {
        const jtok *t = cur(ps);
        advance(ps);
        n = binary(ps, JN_OR, 0, t, n, parse_and(ps));
    }
    return n;
}

static jnode *parse_expression(parser *ps, bool with_cond)
{
    if (!enter(ps)) return NULL;
    jnode *n = parse_or(ps);
    while (with_cond && n != NULL && tok_is_name(cur(ps), "if")) {
        const jtok *t = cur(ps);
        advance(ps);
        jnode *cond = parse_or(ps);
        if (cond == NULL) return NULL;
        jnode *x = new_node(ps, JN_COND, t);
        if (x == NULL) return NULL;
        x->a = cond;
        x->b = n;
        if (tok_is_name(cur(ps), "else")) {
            advance(ps);
            x->c = parse_expression(ps, true);
            if (x->c == NULL) return NULL;
        }
        n = x;
    }
    ps->depth--;
    return n;
}

/* An expression, or a tuple when commas follow (`a, b`). */
static jnode *parse_tuple(parser *ps, bool with_cond)
{
    const jtok *at = cur(ps);
    jnode *n = parse_expression(ps, with_cond);
    if (n == NULL || !tok_is_op(cur(ps), JOP_COMMA)) return n;
    jnode *tup = new_node(ps, JN_TUPLE, at);
    pvec items = {0};
    if (tup == NULL || !push(ps, &items, n)) return NULL;
    while (tok_is_op(cur(ps), JOP_COMMA)) {
        advance(ps);
        if (!starts_expression(cur(ps))) break;
        jnode *x = parse_expression(ps, with_cond);
        if (x == NULL || !push(ps, &items, x)) return NULL;
    }
    tup->kids = (jnode **)items.p;
    tup->n_kids = items.n;
    return tup;
}

/* ------------------------------------------------------------------ */
/* statements                                                          */

static bool parse_stmts(parser *ps, const char *const *stops, pvec *out);

/* `name` or `a, b` or `(a, b)`; with allow_attr also `ns.attr`. */
static jnode *parse_target(parser *ps, bool allow_attr)
{
    const jtok *at = cur(ps);
    bool paren = tok_is_op(at, JOP_LPAREN);
    if (paren) advance(ps);
    pvec names = {0};
    for (;;) {
        const jtok *t = cur(ps);
        if (t->type != JT_NAME) return unexpected(ps, "a variable name");
        jnode *n = new_node(ps, JN_NAME, t);
        if (n == NULL) return NULL;
        n->name = t->s;
        n->len = t->len;
        advance(ps);
        if (allow_attr && names.n == 0 && !paren && tok_is_op(cur(ps), JOP_DOT)) {
            advance(ps);
            if (cur(ps)->type != JT_NAME) return unexpected(ps, "an attribute name");
            jnode *x = new_node(ps, JN_ATTR, t);
            if (x == NULL) return NULL;
            x->a = n;
            x->name = cur(ps)->s;
            x->len = cur(ps)->len;
            advance(ps);
            return x;
        }
        if (!push(ps, &names, n)) return NULL;
        if (!tok_is_op(cur(ps), JOP_COMMA)) break;
        advance(ps);
        if (paren && tok_is_op(cur(ps), JOP_RPAREN)) break;
    }
    if (paren && !expect_op(ps, JOP_RPAREN, "')'")) return NULL;
    if (names.n == 1 && !paren) return names.p[0];
    jnode *tup = new_node(ps, JN_TUPLE, at);
    if (tup == NULL) return NULL;
    tup->kids = (jnode **)names.p;
    tup->n_kids = names.n;
    return tup;
}

/* Parses a body up to one of `ends` (a NULL-terminated list of tag
 * names), consumes that tag's name and returns which one in *which. */
static bool parse_block_body(parser *ps, const jtok *opener, const char *tag,
                             const char *const *ends, pvec *body, const char **which)
{
    if (!parse_stmts(ps, ends, body)) return false;
    if (cur(ps)->type == JT_EOF) {
        char at[48];
        snprintf(at, sizeof(at), "%u:%u", opener->line, opener->col);
        perr(ps, "unclosed '%s' block (opened at %s)", tag, at);
        return false;
    }
    *which = cur(ps)->s; /* parse_stmts stopped on the name of an end tag */
    advance(ps);
    return true;
}

static bool parse_macro_params(parser *ps, jnode *m)
{
    pvec names = {0}, defs = {0};
    if (!expect_op(ps, JOP_LPAREN, "'('")) return false;
    bool seen_default = false;
    while (!tok_is_op(cur(ps), JOP_RPAREN)) {
        if (names.n > 0 && !expect_op(ps, JOP_COMMA, "',' or ')'")) return false;
        if (tok_is_op(cur(ps), JOP_RPAREN)) break;
        if (cur(ps)->type != JT_NAME) {
            unexpected(ps, "a parameter name");
            return false;
        }
        if (names.n >= JINJA_MAX_ARGS) {
            perr(ps, "too many parameters (at most %s)", "32", NULL);
            return false;
        }
        const char *name = cur(ps)->s;
        advance(ps);
        jnode *def = NULL;
        if (tok_is_op(cur(ps), JOP_ASSIGN)) {
            advance(ps);
            def = parse_expression(ps, true);
            if (def == NULL) return false;
            seen_default = true;
        } else if (seen_default) {
            perr(ps, "parameter without a default follows one with a default%s%s", NULL, NULL);
            return false;
        }
        if (!push(ps, &names, (void *)name) || !push(ps, &defs, def)) return false;
    }
    advance(ps);
    m->kwnames = (const char **)names.p;
    m->kw = (jnode **)defs.p;
    m->n_kw = names.n;
    return true;
}

static void set_body(jnode *n, pvec *body)
{
    n->kids = (jnode **)body->p;
    n->n_kids = body->n;
}

static jnode *parse_if(parser *ps, const jtok *opener)
{
    jnode *n = new_node(ps, JN_IF, opener);
    if (n == NULL) return NULL;
    n->a = parse_tuple(ps, false);
    if (n->a == NULL || !expect_block_end(ps)) return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    pvec body = {0};
    const char *which;
    if (!parse_block_body(ps, opener, "if", ends, &body, &which)) return NULL;
    set_body(n, &body);
    if (strcmp(which, "elif") == 0) {
        /* elif is an if in the else branch */
        jnode *inner = parse_if(ps, opener);
        if (inner == NULL) return NULL;
        n->kids2 = strata_arena_calloc(ps->arena, 1, sizeof(jnode *));
        if (n->kids2 == NULL) return oom(ps);
        n->kids2[0] = inner;
        n->n_kids2 = 1;
        return n;
    }
    if (strcmp(which, "else") == 0) {
        if (!expect_block_end(ps)) return NULL;
        static const char *const ends2[] = {"endif", NULL};
        pvec els = {0};
        if (!parse_block_body(ps, opener, "if", ends2, &els, &which)) return NULL;
        n->kids2 = (jnode **)els.p;
        n->n_kids2 = els.n;
    }
    if (!expect_block_end(ps)) return NULL;
    return n;
}

static jnode *parse_for(parser *ps, const jtok *opener)
{
    jnode *n = new_node(ps, JN_FOR, opener);
    if (n == NULL) return NULL;
    n->b = parse_target(ps, false);
    if (n->b == NULL) return NULL;
    if (!tok_is_name(cur(ps), "in")) return unexpected(ps, "'in'");
    advance(ps);
    n->a = parse_tuple(ps, false);
    if (n->a == NULL) return NULL;
    if (tok_is_name(cur(ps), "if")) {
        advance(ps);
        n->c = parse_expression(ps, true);
        if (n->c == NULL) return NULL;
    }
    if (tok_is_name(cur(ps), "recursive")) {
        return perr_at(ps, cur(ps), STRATA_EUNSUPPORTED, "recursive loops are not supported%s%s",
                       NULL, NULL);
    }
    if (!expect_block_end(ps)) return NULL;
    static const char *const ends[] = {"else", "endfor", NULL};
    pvec body = {0};
    const char *which;
    ps->loop_depth++;
    bool ok = parse_block_body(ps, opener, "for", ends, &body, &which);
    ps->loop_depth--;
    if (!ok) return NULL;
    set_body(n, &body);
    if (strcmp(which, "else") == 0) {
        if (!expect_block_end(ps)) return NULL;
        static const char *const ends2[] = {"endfor", NULL};
        pvec els = {0};
        if (!parse_block_body(ps, opener, "for", ends2, &els, &which)) return NULL;
        n->kids2 = (jnode **)els.p;
        n->n_kids2 = els.n;
    }
    if (!expect_block_end(ps)) return NULL;
    return n;
}

static jnode *parse_set(parser *ps, const jtok *opener)
{
    jnode *target = parse_target(ps, true);
    if (target == NULL) return NULL;
    if (tok_is_op(cur(ps), JOP_ASSIGN)) {
        advance(ps);
        jnode *n = new_node(ps, JN_SET, opener);
        if (n == NULL) return NULL;
        n->b = target;
        n->a = parse_tuple(ps, true);
        if (n->a == NULL || !expect_block_end(ps)) return NULL;
        return n;
    }
    if (target->kind != JN_NAME) return unexpected(ps, "'='");
    jnode *n = new_node(ps, JN_SETBLOCK, opener);
    if (n == NULL) return NULL;
    n->b = target;
    while (tok_is_op(cur(ps), JOP_PIPE)) {
        advance(ps);
        n->c = parse_filter(ps, n->c);
        if (n->c == NULL) return NULL;
    }
    if (!expect_block_end(ps)) return NULL;
    static const char *const ends[] = {"endset", NULL};
    pvec body = {0};
    const char *which;
    if (!parse_block_body(ps, opener, "set", ends, &body, &which)) return NULL;
    set_body(n, &body);
    if (!expect_block_end(ps)) return NULL;
    return n;
}

static jnode *parse_macro(parser *ps, const jtok *opener)
{
    if (cur(ps)->type != JT_NAME) return unexpected(ps, "a macro name");
    jnode *n = new_node(ps, JN_MACRO, opener);
    if (n == NULL) return NULL;
    n->name = cur(ps)->s;
    n->len = cur(ps)->len;
    advance(ps);
    if (!parse_macro_params(ps, n) || !expect_block_end(ps)) return NULL;
    static const char *const ends[] = {"endmacro", NULL};
    pvec body = {0};
    const char *which;
    int saved = ps->loop_depth;
    ps->loop_depth = 0;
    bool ok = parse_block_body(ps, opener, "macro", ends, &body, &which);
    ps->loop_depth = saved;
    if (!ok) return NULL;
    set_body(n, &body);
    if (cur(ps)->type == JT_NAME) advance(ps); /* {% endmacro name %} */
    if (!expect_block_end(ps)) return NULL;
    return n;
}

static jnode *parse_call_block(parser *ps, const jtok *opener)
{
    jnode *n = new_node(ps, JN_CALLBLOCK, opener);
    if (n == NULL) return NULL;
    n->name = "caller";
    n->len = 6;
    if (tok_is_op(cur(ps), JOP_LPAREN) && !parse_macro_params(ps, n)) return NULL;
    n->a = parse_expression(ps, true);
    if (n->a == NULL) return NULL;
    if (n->a->kind != JN_CALL) {
        return perr_at(ps, opener, STRATA_EFORMAT, "'call' needs a macro call%s%s", NULL, NULL);
    }
    if (!expect_block_end(ps)) return NULL;
    static const char *const ends[] = {"endcall", NULL};
    pvec body = {0};
    const char *which;
    int saved = ps->loop_depth;
    ps->loop_depth = 0;
    bool ok = parse_block_body(ps, opener, "call", ends, &body, &which);
    ps->loop_depth = saved;
    if (!ok) return NULL;
    set_body(n, &body);
    if (!expect_block_end(ps)) return NULL;
    return n;
}

static jnode *parse_filter_block(parser *ps, const jtok *opener)
{
    jnode *n = new_node(ps, JN_FILTERBLOCK, opener);
    if (n == NULL) return NULL;
    n->c = parse_filter(ps, NULL);
    while (n->c != NULL && tok_is_op(cur(ps), JOP_PIPE)) {
        advance(ps);
        n->c = parse_filter(ps, n->c);
    }
    if (n->c == NULL || !expect_block_end(ps)) return NULL;
    static const char *const ends[] = {"endfilter", NULL};
    pvec body = {0};
    const char *which;
    if (!parse_block_body(ps, opener, "filter", ends, &body, &which)) return NULL;
    set_body(n, &body);
    if (!expect_block_end(ps)) return NULL;
    return n;
}

static jnode *parse_with(parser *ps, const jtok *opener)
{
    jnode *n = new_node(ps, JN_WITH, opener);
    if (n == NULL) return NULL;
    pvec names = {0}, vals = {0};
    while (cur(ps)->type != JT_BLOCK_END) {
        if (names.n > 0 && !expect_op(ps, JOP_COMMA, "',' or '%}'")) return NULL;
        if (cur(ps)->type != JT_NAME) return unexpected(ps, "a variable name");
        const char *name = cur(ps)->s;
        advance(ps);
        if (!expect_op(ps, JOP_ASSIGN, "'='")) return NULL;
        jnode *v = parse_expression(ps, true);
        if (v == NULL || !push(ps, &names, (void *)name) || !push(ps, &vals, v)) return NULL;
    }
    advance(ps);
    n->kwnames = (const char **)names.p;
    n->kw = (jnode **)vals.p;
    n->n_kw = names.n;
    static const char *const ends[] = {"endwith", NULL};
    pvec body = {0};
    const char *which;
    if (!parse_block_body(ps, opener, "with", ends, &body, &which)) return NULL;
    set_body(n, &body);
    if (!expect_block_end(ps)) return NULL;
    return n;
}

static jnode *parse_generation(parser *ps, const jtok *opener)
{
    jnode *n = new_node(ps, JN_BODY, opener);
    if (n == NULL || !expect_block_end(ps)) return NULL;
    static const char *const ends[] = {"endgeneration", NULL};
    pvec body = {0};
    const char *which;
    if (!parse_block_body(ps, opener, "generation", ends, &body, &which)) return NULL;
    set_body(n, &body);
    if (!expect_block_end(ps)) return NULL;
    return n;
}

static jnode *parse_tag(parser *ps)
{
    const jtok *opener = cur(ps); /* {% */
    advance(ps);
    const jtok *t = cur(ps);
    if (t->type != JT_NAME) return unexpected(ps, "a tag name");
    const char *name = t->s;
    advance(ps);
    if (!strcmp(name, "if")) return parse_if(ps, opener);
    if (!strcmp(name, "for")) return parse_for(ps, opener);
    if (!strcmp(name, "set")) return parse_set(ps, opener);
    if (!strcmp(name, "macro")) return parse_macro(ps, opener);
    if (!strcmp(name, "call")) return parse_call_block(ps, opener);
    if (!strcmp(name, "filter")) return parse_filter_block(ps, opener);
    if (!strcmp(name, "with")) return parse_with(ps, opener);
    if (!strcmp(name, "generation")) return parse_generation(ps, opener);
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (ps->loop_depth == 0) return perr_at(ps, t, STRATA_EFORMAT, "'%s' outside a loop%s", name, NULL);
        jnode *n = new_node(ps, name[0] == 'b' ? JN_BREAK : JN_CONTINUE, opener);
        if (n == NULL || !expect_block_end(ps)) return NULL;
        return n;
    }
    static const char *const unsupported[] = {"extends", "block", "include", "import", "from",
                                              "do", "autoescape", "trans", NULL};
    for (size_t i = 0; unsupported[i]; i++) {
        if (!strcmp(name, unsupported[i]))
            return perr_at(ps, t, STRATA_EUNSUPPORTED, "the '%s' tag is not supported%s", name, NULL);
    }
    return perr_at(ps, t, STRATA_EFORMAT, "unknown tag '%s'%s", name, NULL);
}

/* Statements until EOF or a `{%` whose name is in stops (that `{%` is
 * consumed and the name is left current). */
static bool parse_stmts(parser *ps, const char *const *stops, pvec *out)
{
    if (!enter(ps)) return false;
    for (;;) {
        const jtok *t = cur(ps);
        if (t->type == JT_EOF) break;
        if (t->type == JT_TEXT) {
            jnode *n = new_node(ps, JN_TEXT, t);
            if (n == NULL) return false;
            n->name = t->s;
            n->len = t->len;
            if (!push(ps, out, n)) return false;
            advance(ps);
            continue;
        }
        if (t->type == JT_VAR_BEGIN) {
            advance(ps);
            jnode *n = new_node(ps, JN_OUTPUT, t);
            if (n == NULL) return false;
            n->a = parse_tuple(ps, true);
            if (n->a == NULL) return false;
            if (cur(ps)->type != JT_VAR_END) {
                unexpected(ps, "end of print statement '}}'");
                return false;
            }
            advance(ps);
            if (!push(ps, out, n)) return false;
            continue;
        }
        if (t->type == JT_BLOCK_BEGIN) {
            const jtok *name = peek(ps, 1);
            if (name->type == JT_NAME) {
                for (size_t i = 0; stops != NULL && stops[i] != NULL; i++) {
                    if (strcmp(name->s, stops[i]) == 0) {
                        advance(ps); /* leave the name current */
                        ps->depth--;
                        return true;
                    }
                }
                if (!strncmp(name->s, "end", 3) || !strcmp(name->s, "else") ||
                    !strcmp(name->s, "elif")) {
                    perr_at(ps, name, STRATA_EFORMAT, "unexpected '%s'%s", name->s,
                            stops ? "" : " (no block is open)");
                    return false;
                }
            }
            jnode *n = parse_tag(ps);
            if (n == NULL || !push(ps, out, n)) return false;
            continue;
        }
        unexpected(ps, NULL);
        return false;
    }
    ps->depth--;
    return true;
}

int jinja_parse_tokens(strata_arena *arena, const jtok *toks, size_t n_toks, jnode **root,
                       strata_err *err)
{
    parser ps = {.arena = arena, .t = toks, .n = n_toks, .err = err};
    pvec body = {0};
    if (n_toks == 0) return strata_err_set(err, STRATA_EINVAL, "template: no tokens");
    jnode *r = new_node(&ps, JN_BODY, &toks[0]);
    if (r == NULL || !parse_stmts(&ps, NULL, &body)) {
        return ps.failed ? ps.code : STRATA_EFORMAT;
    }
    set_body(r, &body);
    *root = r;
    return 0;
}
