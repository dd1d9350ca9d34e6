/* The Jinja evaluator: one render of a parsed template.
 *
 * Statements write to the current output buffer; expressions produce
 * values (jinja_internal.h). Scoping follows Jinja2: each iteration of a
 * for loop, each macro call and each with block gets a fresh scope whose
 * assignments vanish when it ends (namespaces are how templates carry state
 * out of a loop); if blocks share their enclosing scope; a macro sees its
 * arguments and the template's top level, not its caller's locals.
 *
 * Undefined values behave as Jinja2's default Undefined: they print as
 * nothing, are false, iterate as empty and have length 0, but using one in
 * arithmetic, calling it or taking its attribute is an error naming it.
 *
 * Every statement and expression costs a step of the budget, and every
 * recursive evaluation counts against the depth cap, so hostile templates
 * end with an error instead of hanging or overflowing the stack. */
#include "text/jinja_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CALL_ARGS 34 /* the parser's 32, plus `caller` */

static int exec_body(jrt *rt, jnode *const *kids, size_t n);

/* ------------------------------------------------------------------ */
/* errors, budget                                                      */

int jrt_fail(jrt *rt, int code, const char *fmt, ...)
{
    if (rt->failed) return rt->code;
    char msg[STRATA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (rt->at != NULL) {
        strata_err_set(rt->err, code, "template %u:%u: %s", rt->at->line, rt->at->col, msg);
    } else {
        strata_err_set(rt->err, code, "template: %s", msg);
    }
    rt->failed = true;
    rt->code = code;
    return code;
}

int jrt_step(jrt *rt)
{
    if (++rt->steps > rt->max_steps) {
        return jrt_fail(rt, STRATA_ERANGE, "template exceeded its budget of %" PRIu64 " steps",
                        rt->max_steps);
    }
    return 0;
}

static int enter(jrt *rt, const jnode *n)
{
    rt->at = n;
    if (++rt->depth > rt->max_depth) {
        return jrt_fail(rt, STRATA_ERANGE, "template nests or recurses deeper than %d levels",
                        rt->max_depth);
    }
    return jrt_step(rt);
}

int jrt_undefined(jrt *rt, jv v)
{
    if (v.u.name != NULL) return jrt_fail(rt, STRATA_EINVAL, "'%s' is undefined", v.u.name);
    return jrt_fail(rt, STRATA_EINVAL, "a value is undefined");
}

/* ------------------------------------------------------------------ */
/* scopes                                                              */

static jv *scope_find_local(jscope *s, const char *name)
{
    for (size_t i = s->n; i-- > 0;) {
        if (strcmp(s->names[i], name) == 0) return &s->vals[i];
    }
    return NULL;
}

static jv *scope_find(jrt *rt, const char *name)
{
    for (jscope *s = rt->scope; s != NULL; s = s->parent) {
        jv *v = scope_find_local(s, name);
        if (v != NULL) return v;
    }
    return NULL;
}

/* Binds name to v in s, taking the reference. */
static int scope_set(jrt *rt, jscope *s, const char *name, jv v)
{
    jv *old = scope_find_local(s, name);
    if (old != NULL) {
        jv_decref(*old);
        *old = v;
        return 0;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        const char **names = realloc(s->names, cap * sizeof(*names));
        if (names != NULL) s->names = names;
        jv *vals = names ? realloc(s->vals, cap * sizeof(*vals)) : NULL;
        if (vals != NULL) s->vals = vals;
        if (names == NULL || vals == NULL) {
            jv_decref(v);
            return jrt_fail(rt, STRATA_ENOMEM, "out of memory");
        }
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
    return 0;
}

static void scope_free(jscope *s)
{
    for (size_t i = 0; i < s->n; i++) jv_decref(s->vals[i]);
    free(s->names);
    free(s->vals);
    s->names = NULL;
    s->vals = NULL;
    s->n = s->cap = 0;
}

/* ------------------------------------------------------------------ */
/* output                                                              */

static int out_check(jrt *rt, size_t before)
{
    size_t added = rt->out->len - before;
    rt->out_total += added;
    if (rt->out_total > rt->max_output) {
        return jrt_fail(rt, STRATA_ERANGE, "template output exceeds %zu bytes", rt->max_output);
    }
    return 0;
}

static int out_text(jrt *rt, const char *s, size_t n)
{
    size_t before = rt->out->len;
    int rc = jbuf_put(rt, rt->out, s, n);
    return rc != 0 ? rc : out_check(rt, before);
}

static int out_value(jrt *rt, jv v)
{
    size_t before = rt->out->len;
    int rc = jv_write_str(rt, rt->out, v);
    return rc != 0 ? rc : out_check(rt, before);
}

/* Runs body in a scope of its own (Jinja2's inner frame of set blocks,
 * filter blocks and generation blocks): what it assigns stays inside. */
static int exec_inner(jrt *rt, jnode *const *kids, size_t n)
{
    jscope s = {.parent = rt->scope}, *saved = rt->scope;
    rt->scope = &s;
    int rc = exec_body(rt, kids, n);
    rt->scope = saved;
    scope_free(&s);
    return rc;
}

/* As exec_inner, with output into a fresh buffer; *out becomes the string. */
static int capture_inner(jrt *rt, jnode *const *kids, size_t n, jv *out)
{
    jbuf buf = {0}, *saved = rt->out;
    rt->out = &buf;
    int rc = exec_inner(rt, kids, n);
    rt->out = saved;
    if (rc != 0) {
        jbuf_free(&buf);
        return rc;
    }
    return jbuf_to_value(rt, &buf, out);
}

/* Runs body with output into a fresh buffer; *out becomes the string. */
static int capture(jrt *rt, jnode *const *kids, size_t n, jv *out)
{
    jbuf buf = {0}, *saved = rt->out;
    rt->out = &buf;
    int rc = exec_body(rt, kids, n);
    rt->out = saved;
    if (rc != 0) {
        jbuf_free(&buf);
        return rc;
    }
    return jbuf_to_value(rt, &buf, out);
}

/* ------------------------------------------------------------------ */
/* attribute and item access                                           */

static int loop_attr(jrt *rt, jv lv, const char *name, jv *out)
{
    jv_loop *l = (jv_loop *)lv.u.o;
    jv_list *items = JV_LIST_(l->items);
    size_t n = items->n, i = l->index0;
    if (!strcmp(name, "index")) *out = jv_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = jv_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = jv_int((int64_t)(n - i));
    else if (!strcmp(name, "revindex0")) *out = jv_int((int64_t)(n - i - 1));
    else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = jv_bool(i + 1 == n);
    else if (!strcmp(name, "length")) *out = jv_int((int64_t)n);
    else if (!strcmp(name, "depth")) *out = jv_int(l->depth0 + 1);
    else if (!strcmp(name, "depth0")) *out = jv_int(l->depth0);
    else if (!strcmp(name, "previtem")) *out = i > 0 ? jv_dup(items->items[i - 1]) : jv_undefined("previtem");
    else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? jv_dup(items->items[i + 1]) : jv_undefined("nextitem");
    else if (!strcmp(name, "cycle")) {
        int rc = jv_new_callable(rt, JCALL_CYCLE, out);
        if (rc != 0) return rc;
        ((jv_callable *)out->u.o)->self = jv_dup(lv);
    } else {
        *out = jv_undefined(name);
    }
    return 0;
}

static int bound_method(jrt *rt, jv obj, const char *mname, jv *out)
{
    int rc = jv_new_callable(rt, JCALL_METHOD, out);
    if (rc != 0) return rc;
    jv_callable *c = (jv_callable *)out->u.o;
    c->self = jv_dup(obj);
    c->method = mname;
    return 0;
}

int jx_getattr(jrt *rt, jv obj, const char *name, size_t len, jv *out)
{
    const char *m;
    switch (obj.kind) {
    case JV_UNDEFINED: return jrt_undefined(rt, obj);
    case JV_DICT:
        /* Jinja2 looks up attributes before items: d.items is the method */
        m = jm_method_name(obj, name, len);
        if (m != NULL) return bound_method(rt, obj, m, out);
        /* fall through */
    case JV_NAMESPACE: {
        jv *v = jv_dict_get_str(obj, name, len);
        *out = v ? jv_dup(*v) : jv_undefined(name);
        return 0;
    }
    case JV_LOOP: return loop_attr(rt, obj, name, out);
    case JV_STRING:
    case JV_LIST:
        m = jm_method_name(obj, name, len);
        if (m != NULL) return bound_method(rt, obj, m, out);
        *out = jv_undefined(name);
        return 0;
    default: *out = jv_undefined(name); return 0;
    }
}

int jx_getattr_runtime(jrt *rt, jv obj, const jv_str *name, jv *out)
{
    int rc = jx_getattr(rt, obj, name->s, name->len, out);
    if (rc == 0 && out->kind == JV_UNDEFINED) out->u.name = NULL;
    return rc;
}

/* Python's index normalization: -1 is the last; false when out of range. */
static bool norm_index(int64_t i, size_t n, size_t *out)
{
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

int jx_getitem(jrt *rt, jv obj, jv key, jv *out)
{
    if (obj.kind == JV_UNDEFINED) return jrt_undefined(rt, obj);
    bool int_key = key.kind == JV_INT || key.kind == JV_BOOL;
    int64_t k = key.kind == JV_BOOL ? key.u.b : key.u.i;
    size_t i;
    switch (obj.kind) {
    case JV_LIST:
        if (int_key) {
            jv_list *l = JV_LIST_(obj);
            *out = norm_index(k, l->n, &i) ? jv_dup(l->items[i]) : jv_undefined(NULL);
            return 0;
        }
        break;
    case JV_STRING:
        if (int_key) {
            jv_str *s = JV_STR(obj);
            size_t n = jstr_n_chars(s->s, s->len);
            if (!norm_index(k, n, &i)) {
                *out = jv_undefined(NULL);
                return 0;
            }
            size_t a = jstr_char_offset(s->s, s->len, i);
            size_t b = a + jstr_char_offset(s->s + a, s->len - a, 1);
            return jv_new_str(rt, s->s + a, b - a, out);
        }
        break;
    case JV_DICT:
    case JV_NAMESPACE: {
        if (key.kind == JV_DICT || key.kind == JV_NAMESPACE ||
            (key.kind == JV_LIST && !JV_LIST_(key)->is_tuple))
            return jrt_fail(rt, STRATA_EINVAL, "unhashable type: '%s'", jv_type_name(key));
        jv *v = jv_dict_get(obj, key);
        if (v != NULL) {
            *out = jv_dup(*v);
            return 0;
        }
        break;
    }
    default: break;
    }
    if (key.kind == JV_STRING) {
        /* obj['name'] falls back to the attribute, as in Jinja2 */
        if (obj.kind == JV_NAMESPACE) {
            *out = jv_undefined(NULL);
            return 0;
        }
        return jx_getattr_runtime(rt, obj, JV_STR(key), out);
    }
    *out = jv_undefined(NULL);
    return 0;
}

/* ------------------------------------------------------------------ */
/* calls                                                               */

static int bind_params(jrt *rt, const jnode *def, jscope *scope, const char *what,
                       const jv *args, size_t n_args, const char **kwnames, const jv *kw,
                       size_t n_kw)
{
    if (n_args > def->n_kw) {
        return jrt_fail(rt, STRATA_EINVAL, "%s '%s' takes not more than %zu argument(s)", what,
                        def->name, def->n_kw);
    }
    for (size_t k = 0; k < n_kw; k++) {
        bool known = false;
        for (size_t p = 0; p < def->n_kw && !known; p++) known = strcmp(def->kwnames[p], kwnames[k]) == 0;
        if (!known && strcmp(kwnames[k], "caller") != 0) {
            return jrt_fail(rt, STRATA_EINVAL, "%s '%s' has no argument named '%s'", what,
                            def->name, kwnames[k]);
        }
    }
    for (size_t p = 0; p < def->n_kw; p++) {
        const char *pname = def->kwnames[p];
        jv v = jv_undefined(pname);
        bool set = false;
        if (p < n_args) {
            v = jv_dup(args[p]);
            set = true;
        }
        for (size_t k = 0; k < n_kw; k++) {
            if (strcmp(kwnames[k], pname) == 0) {
                if (set) {
                    jv_decref(v);
                    return jrt_fail(rt, STRATA_EINVAL, "%s '%s' got multiple values for '%s'",
                                    what, def->name, pname);
                }
                v = jv_dup(kw[k]);
                set = true;
            }
        }
        if (!set && def->kw[p] != NULL) {
            /* defaults are evaluated at call time, seeing earlier parameters */
            jscope *saved = rt->scope;
            rt->scope = scope;
            int rc = jx_eval(rt, def->kw[p], &v);
            rt->scope = saved;
            if (rc != 0) return rc;
        }
        int rc = scope_set(rt, scope, pname, v);
        if (rc != 0) return rc;
    }
    for (size_t k = 0; k < n_kw; k++) {
        if (strcmp(kwnames[k], "caller") == 0) {
            int rc = scope_set(rt, scope, "caller", jv_dup(kw[k]));
            if (rc != 0) return rc;
        }
    }
    return 0;
}

static int call_body(jrt *rt, const jnode *def, jscope *parent, const char *what,
                     const jv *args, size_t n_args, const char **kwnames, const jv *kw,
                     size_t n_kw, jv *out)
{
    jscope scope = {.parent = parent};
    int rc = bind_params(rt, def, &scope, what, args, n_args, kwnames, kw, n_kw);
    if (rc == 0) {
        jscope *saved = rt->scope;
        rt->scope = &scope;
        rc = capture(rt, def->kids, def->n_kids, out);
        rt->scope = saved;
    }
    scope_free(&scope);
    return rc;
}

int jx_call_value(jrt *rt, jv fn, const jv *args, size_t n_args, const char **kwnames,
                  const jv *kw, size_t n_kw, jv *out)
{
    if (fn.kind == JV_UNDEFINED) return jrt_undefined(rt, fn);
    if (fn.kind != JV_CALLABLE)
        return jrt_fail(rt, STRATA_EINVAL, "'%s' object is not callable", jv_type_name(fn));
    jv_callable *c = (jv_callable *)fn.u.o;
    jargs a = {.pos = args, .n_pos = n_args, .kwnames = kwnames, .kw = kw, .n_kw = n_kw};
    switch (c->call_kind) {
    case JCALL_MACRO:
        return call_body(rt, c->node, rt->root, "macro", args, n_args, kwnames, kw, n_kw, out);
    case JCALL_CALLER:
        if (c->scope == NULL)
            return jrt_fail(rt, STRATA_EINVAL, "caller() used after its call block ended");
        return call_body(rt, c->node, c->scope, "caller", args, n_args, kwnames, kw, n_kw, out);
    case JCALL_BUILTIN: return jm_call_global(rt, c->builtin, &a, out);
    case JCALL_CYCLE: return jm_loop_cycle(rt, c->self, &a, out);
    case JCALL_METHOD: {
        int rc = jm_call_method(rt, c->self, c->method, &a, out);
        if (rc == 1) return jrt_fail(rt, STRATA_EINVAL, "no method '%s'", c->method);
        return rc;
    }
    default: return jrt_fail(rt, STRATA_EINVAL, "object is not callable");
    }
}

static void release_args(jv *args, size_t n)
{
    for (size_t i = 0; i < n; i++) jv_decref(args[i]);
}

/* Evaluates n's arguments into pos[] and kw[]. */
static int eval_args(jrt *rt, const jnode *n, jv *pos, jv *kw)
{
    for (size_t i = 0; i < n->n_kids; i++) {
        int rc = jx_eval(rt, n->kids[i], &pos[i]);
        if (rc != 0) {
            release_args(pos, i);
            return rc;
        }
    }
    for (size_t i = 0; i < n->n_kw; i++) {
        int rc = jx_eval(rt, n->kw[i], &kw[i]);
        if (rc != 0) {
            release_args(pos, n->n_kids);
            release_args(kw, i);
            return rc;
        }
    }
    return 0;
}

/* A call expression; extra_kw (may be NULL) is passed as `caller`. */
static int eval_call(jrt *rt, const jnode *n, const jv *extra_kw, jv *out)
{
    jv pos[MAX_CALL_ARGS], kw[MAX_CALL_ARGS];
    const char *kwnames[MAX_CALL_ARGS];
    if (n->n_kids > 32 || n->n_kw > 32) return jrt_fail(rt, STRATA_EINVAL, "too many arguments");
    const jnode *callee = n->a;
    jv obj = jv_none(), fn = jv_none();
    int rc;
    if (callee->kind == JN_ATTR) {
        rc = jx_eval(rt, callee->a, &obj);
        if (rc != 0) return rc;
        rt->at = callee;
        if (obj.kind == JV_UNDEFINED) {
            rc = jrt_undefined(rt, obj);
            jv_decref(obj);
            return rc;
        }
    } else {
        rc = jx_eval(rt, callee, &fn);
        if (rc != 0) return rc;
    }
    rc = eval_args(rt, n, pos, kw);
    if (rc != 0) {
        jv_decref(obj);
        jv_decref(fn);
        return rc;
    }
    size_t n_kw = n->n_kw;
    for (size_t i = 0; i < n_kw; i++) kwnames[i] = n->kwnames[i];
    if (extra_kw != NULL) {
        kwnames[n_kw] = "caller";
        kw[n_kw++] = jv_dup(*extra_kw);
    }
    rt->at = n;
    if (callee->kind == JN_ATTR) {
        jargs a = {.pos = pos, .n_pos = n->n_kids, .kwnames = kwnames, .kw = kw, .n_kw = n_kw};
        rc = jm_call_method(rt, obj, callee->name, &a, out);
        if (rc == 1) { /* not a method: an attribute holding a callable */
            rc = jx_getattr(rt, obj, callee->name, callee->len, &fn);
            if (rc == 0 && fn.kind == JV_UNDEFINED) {
                rc = jrt_fail(rt, STRATA_EINVAL, "'%s' object has no attribute '%s'",
                              jv_type_name(obj), callee->name);
            } else if (rc == 0) {
                rc = jx_call_value(rt, fn, pos, n->n_kids, kwnames, kw, n_kw, out);
            }
        }
    } else {
        rc = jx_call_value(rt, fn, pos, n->n_kids, kwnames, kw, n_kw, out);
    }
    release_args(pos, n->n_kids);
    release_args(kw, n_kw);
    jv_decref(obj);
    jv_decref(fn);
    return rc;
}

/* Applies a filter chain (innermost input NULL) to input. */
static int apply_filters(jrt *rt, const jnode *chain, jv input, jv *out)
{
    int rc = enter(rt, chain);
    jv x = jv_none();
    if (rc == 0) {
        if (chain->a == NULL) x = jv_dup(input);
        else rc = apply_filters(rt, chain->a, input, &x);
    }
    if (rc == 0) {
        jv pos[MAX_CALL_ARGS], kw[MAX_CALL_ARGS];
        rc = eval_args(rt, chain, pos, kw);
        if (rc == 0) {
            rt->at = chain;
            jargs a = {.pos = pos, .n_pos = chain->n_kids, .kwnames = chain->kwnames, .kw = kw,
                       .n_kw = chain->n_kw};
            rc = jf_filter(rt, chain->name, x, &a, out);
            release_args(pos, chain->n_kids);
            release_args(kw, chain->n_kw);
        }
    }
    jv_decref(x);
    rt->depth--;
    return rc;
}

/* ------------------------------------------------------------------ */
/* expressions                                                         */

static int eval_filter_or_test(jrt *rt, const jnode *n, jv *out)
{
    jv x;
    int rc = jx_eval(rt, n->a, &x);
    if (rc != 0) return rc;
    jv pos[MAX_CALL_ARGS], kw[MAX_CALL_ARGS];
    rc = eval_args(rt, n, pos, kw);
    if (rc != 0) {
        jv_decref(x);
        return rc;
    }
    rt->at = n;
    jargs a = {.pos = pos, .n_pos = n->n_kids, .kwnames = n->kwnames, .kw = kw, .n_kw = n->n_kw};
    if (n->kind == JN_FILTER) {
        rc = jf_filter(rt, n->name, x, &a, out);
    } else {
        bool r = false;
        rc = jf_test(rt, n->name, x, &a, &r);
        if (rc == 0) *out = jv_bool(n->op ? !r : r);
    }
    release_args(pos, n->n_kids);
    release_args(kw, n->n_kw);
    jv_decref(x);
    return rc;
}

static int eval_seq(jrt *rt, const jnode *n, jv *out)
{
    int rc;
    if (n->kind == JN_DICT) {
        rc = jv_new_dict(rt, n->n_kids / 2, JV_DICT, out);
        for (size_t i = 0; rc == 0 && i + 1 < n->n_kids; i += 2) {
            jv k, v;
            rc = jx_eval(rt, n->kids[i], &k);
            if (rc != 0) break;
            rc = jx_eval(rt, n->kids[i + 1], &v);
            if (rc != 0) {
                jv_decref(k);
                break;
            }
            rt->at = n;
            rc = jv_dict_set(rt, *out, k, v);
        }
    } else {
        rc = jv_new_list(rt, n->n_kids, out);
        if (rc == 0) JV_LIST_(*out)->is_tuple = n->kind == JN_TUPLE;
        for (size_t i = 0; rc == 0 && i < n->n_kids; i++) {
            jv v;
            rc = jx_eval(rt, n->kids[i], &v);
            if (rc == 0) rc = jv_list_push(rt, *out, v);
        }
    }
    if (rc != 0 && jv_is_obj(*out)) {
        jv_decref(*out);
        *out = jv_none();
    }
    return rc;
}

static int eval_name(jrt *rt, const jnode *n, jv *out)
{
    jv *v = scope_find(rt, n->name);
    if (v != NULL) {
        *out = jv_dup(*v);
        return 0;
    }
    int id = jm_global_lookup(n->name);
    if (id >= 0) {
        int rc = jv_new_callable(rt, JCALL_BUILTIN, out);
        if (rc == 0) ((jv_callable *)out->u.o)->builtin = id;
        return rc;
    }
    *out = jv_undefined(n->name);
    return 0;
}

static int eval_inner(jrt *rt, const jnode *n, jv *out)
{
    jv a = jv_none(), b = jv_none(), c = jv_none();
    int rc = 0;
    switch (n->kind) {
    case JN_LITERAL: *out = jv_dup(n->lit); return 0;
    case JN_NAME: return eval_name(rt, n, out);
    case JN_ATTR:
        rc = jx_eval(rt, n->a, &a);
        if (rc != 0) return rc;
        rt->at = n;
        rc = jx_getattr(rt, a, n->name, n->len, out);
        jv_decref(a);
        return rc;
    case JN_ITEM:
        rc = jx_eval(rt, n->a, &a);
        if (rc == 0) rc = jx_eval(rt, n->b, &b);
        rt->at = n;
        if (rc == 0) rc = jx_getitem(rt, a, b, out);
        break;
    case JN_SLICE: {
        jv step = jv_none();
        rc = jx_eval(rt, n->a, &a);
        if (rc == 0 && n->b) rc = jx_eval(rt, n->b, &b);
        if (rc == 0 && n->c) rc = jx_eval(rt, n->c, &c);
        if (rc == 0 && n->n_kids) rc = jx_eval(rt, n->kids[0], &step);
        rt->at = n;
        if (rc == 0) rc = jx_slice(rt, a, b, c, step, out);
        jv_decref(step);
        break;
    }
    case JN_CALL: return eval_call(rt, n, NULL, out);
    case JN_FILTER:
    case JN_TEST: return eval_filter_or_test(rt, n, out);
    case JN_UNARY:
        rc = jx_eval(rt, n->a, &a);
        if (rc != 0) return rc;
        rt->at = n;
        if (a.kind == JV_FLOAT) {
            *out = jv_float(n->op == JOP_NEG ? -a.u.f : a.u.f);
        } else if (a.kind == JV_INT || a.kind == JV_BOOL) {
            int64_t x = a.kind == JV_BOOL ? (int64_t)a.u.b : a.u.i;
            if (n->op == JOP_NEG && x == INT64_MIN) rc = jrt_fail(rt, STRATA_ERANGE, "integer overflow");
            else *out = jv_int(n->op == JOP_NEG ? -x : x);
        } else if (a.kind == JV_UNDEFINED) {
            rc = jrt_undefined(rt, a);
        } else {
            rc = jrt_fail(rt, STRATA_EINVAL, "bad operand type for unary %s: '%s'",
                          n->op == JOP_NEG ? "-" : "+", jv_type_name(a));
        }
        break;
    case JN_NOT:
        rc = jx_eval(rt, n->a, &a);
        if (rc == 0) *out = jv_bool(!jv_truthy(a));
        break;
    case JN_AND:
    case JN_OR:
        rc = jx_eval(rt, n->a, &a);
        if (rc != 0) return rc;
        if (jv_truthy(a) == (n->kind == JN_OR)) {
            *out = a;
            return 0;
        }
        jv_decref(a);
        return jx_eval(rt, n->b, out);
    case JN_BINARY:
        rc = jx_eval(rt, n->a, &a);
        if (rc == 0) rc = jx_eval(rt, n->b, &b);
        rt->at = n;
        if (rc == 0) rc = jx_arith(rt, n->op, a, b, out);
        break;
    case JN_COMPARE: {
        rc = jx_eval(rt, n->a, &a);
        bool r = true;
        for (size_t i = 0; rc == 0 && i < n->n_kids && r; i++) {
            rc = jx_eval(rt, n->kids[i], &b);
            if (rc != 0) break;
            rt->at = n;
            rc = jx_compare(rt, n->ops[i], a, b, &r);
            jv_decref(a);
            a = b;
            b = jv_none();
        }
        if (rc == 0) *out = jv_bool(r);
        break;
    }
    case JN_COND:
        rc = jx_eval(rt, n->a, &a);
        if (rc != 0) return rc;
        if (jv_truthy(a)) rc = jx_eval(rt, n->b, out);
        else if (n->c != NULL) rc = jx_eval(rt, n->c, out);
        else *out = jv_undefined(NULL);
        break;
    case JN_LIST:
    case JN_TUPLE:
    case JN_DICT: return eval_seq(rt, n, out);
    default:
        return jrt_fail(rt, STRATA_EINVAL, "internal error: node %d is not an expression", n->kind);
    }
    jv_decref(a);
    jv_decref(b);
    jv_decref(c);
    return rc;
}

int jx_eval(jrt *rt, const jnode *n, jv *out)
{
    *out = jv_none();
    int rc = enter(rt, n);
    if (rc == 0) rc = eval_inner(rt, n, out);
    rt->depth--;
    if (rc != 0 && jv_is_obj(*out)) {
        jv_decref(*out);
        *out = jv_none();
    }
    return rc;
}

/* ------------------------------------------------------------------ */
/* statements                                                          */

/* Binds target (a name or a tuple of names) to v, taking v's reference. */
static int assign(jrt *rt, const jnode *target, jv v)
{
    if (target->kind == JN_NAME) return scope_set(rt, rt->scope, target->name, v);
    if (target->kind == JN_ATTR) {
        jv *ns = scope_find(rt, target->a->name);
        if (ns == NULL || ns->kind != JV_NAMESPACE) {
            jv_decref(v);
            rt->at = target;
            return jrt_fail(rt, STRATA_EINVAL, "can only set attributes of a namespace ('%s' is %s)",
                            target->a->name, ns ? jv_type_name(*ns) : "undefined");
        }
        jv key;
        int rc = jv_new_str(rt, target->name, target->len, &key);
        if (rc != 0) {
            jv_decref(v);
            return rc;
        }
        return jv_dict_set(rt, *ns, key, v);
    }
    /* tuple unpacking */
    rt->at = target;
    if (v.kind != JV_LIST) {
        jv items;
        int rc = jv_iterate(rt, v, &items);
        jv_decref(v);
        if (rc != 0) return rc;
        v = items;
    }
    jv_list *l = JV_LIST_(v);
    if (l->n != target->n_kids) {
        size_t got = l->n;
        jv_decref(v);
        return jrt_fail(rt, STRATA_EINVAL, "%s values to unpack (expected %zu, got %zu)",
                        got > target->n_kids ? "too many" : "not enough", target->n_kids, got);
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < l->n; i++) rc = assign(rt, target->kids[i], jv_dup(l->items[i]));
    jv_decref(v);
    return rc;
}

static int exec_for(jrt *rt, const jnode *n)
{
    jv it, items, loop = jv_none();
    int rc = jx_eval(rt, n->a, &it);
    if (rc != 0) return rc;
    rt->at = n;
    rc = jv_iterate(rt, it, &items);
    jv_decref(it);
    if (rc != 0) return rc;
    jscope *saved = rt->scope;
    if (n->c != NULL) { /* `for x in xs if cond`: filter first, loop.* count what is kept */
        jv kept;
        rc = jv_new_list(rt, 0, &kept);
        jv_list *l = JV_LIST_(items);
        for (size_t i = 0; rc == 0 && i < l->n; i++) {
            jscope s = {.parent = saved};
            rt->scope = &s;
            jv cond;
            rc = assign(rt, n->b, jv_dup(l->items[i]));
            if (rc == 0) rc = jx_eval(rt, n->c, &cond);
            if (rc == 0) {
                if (jv_truthy(cond)) rc = jv_list_push(rt, kept, jv_dup(l->items[i]));
                jv_decref(cond);
            }
            rt->scope = saved;
            scope_free(&s);
        }
        jv_decref(items);
        if (rc != 0) {
            if (kept.kind == JV_LIST) jv_decref(kept);
            return rc;
        }
        items = kept;
    }
    jv_list *l = JV_LIST_(items);
    if (l->n == 0) {
        jv_decref(items);
        return exec_body(rt, n->kids2, n->n_kids2);
    }
    /* loop.depth stays 1: it counts recursive loops, which are not supported */
    rc = jv_new_loop(rt, items, &loop);
    for (size_t i = 0; rc == 0 && i < l->n; i++) {
        rt->at = n;
        rc = jrt_step(rt);
        if (rc != 0) break;
        ((jv_loop *)loop.u.o)->index0 = i;
        jscope s = {.parent = saved};
        rt->scope = &s;
        rc = assign(rt, n->b, jv_dup(l->items[i]));
        if (rc == 0) rc = scope_set(rt, &s, "loop", jv_dup(loop));
        if (rc == 0) rc = exec_body(rt, n->kids, n->n_kids);
        rt->scope = saved;
        scope_free(&s);
        if (rt->loop_ctl == JRT_BREAK) {
            rt->loop_ctl = 0;
            break;
        }
        rt->loop_ctl = 0;
    }
    jv_decref(loop);
    jv_decref(items);
    return rc;
}

static int exec_callblock(jrt *rt, const jnode *n)
{
    jv caller, result = jv_none();
    int rc = jv_new_callable(rt, JCALL_CALLER, &caller);
    if (rc != 0) return rc;
    jv_callable *c = (jv_callable *)caller.u.o;
    c->node = n;
    c->scope = rt->scope;
    rc = eval_call(rt, n->a, &caller, &result);
    c->scope = NULL; /* the scope ends with this statement */
    jv_decref(caller);
    if (rc == 0) rc = out_value(rt, result);
    jv_decref(result);
    return rc;
}

static int exec_stmt(jrt *rt, const jnode *n)
{
    jv v = jv_none(), w = jv_none();
    int rc = 0;
    switch (n->kind) {
    case JN_TEXT: return out_text(rt, n->name, n->len);
    case JN_OUTPUT:
        rc = jx_eval(rt, n->a, &v);
        if (rc == 0) rc = out_value(rt, v);
        break;
    case JN_IF:
        rc = jx_eval(rt, n->a, &v);
        if (rc != 0) return rc;
        if (jv_truthy(v)) rc = exec_body(rt, n->kids, n->n_kids);
        else rc = exec_body(rt, n->kids2, n->n_kids2);
        break;
    case JN_FOR: return exec_for(rt, n);
    case JN_SET:
        rc = jx_eval(rt, n->a, &v);
        if (rc != 0) return rc;
        return assign(rt, n->b, v);
    case JN_SETBLOCK:
        rc = capture_inner(rt, n->kids, n->n_kids, &v);
        if (rc == 0 && n->c != NULL) {
            rc = apply_filters(rt, n->c, v, &w);
            jv_decref(v);
            v = w;
            w = jv_none();
        }
        if (rc != 0) break;
        return assign(rt, n->b, v);
    case JN_MACRO:
        rc = jv_new_callable(rt, JCALL_MACRO, &v);
        if (rc != 0) return rc;
        ((jv_callable *)v.u.o)->node = n;
        return scope_set(rt, rt->scope, n->name, v);
    case JN_CALLBLOCK: return exec_callblock(rt, n);
    case JN_FILTERBLOCK:
        rc = capture_inner(rt, n->kids, n->n_kids, &v);
        if (rc == 0) rc = apply_filters(rt, n->c, v, &w);
        if (rc == 0) rc = out_value(rt, w);
        break;
    case JN_WITH: {
        jscope s = {.parent = rt->scope};
        for (size_t i = 0; rc == 0 && i < n->n_kw; i++) {
            /* values see the enclosing scope, not each other */
            rc = jx_eval(rt, n->kw[i], &v);
            if (rc == 0) rc = scope_set(rt, &s, n->kwnames[i], v);
            v = jv_none();
        }
        if (rc == 0) {
            jscope *saved = rt->scope;
            rt->scope = &s;
            rc = exec_body(rt, n->kids, n->n_kids);
            rt->scope = saved;
        }
        scope_free(&s);
        return rc;
    }
    case JN_BREAK: rt->loop_ctl = JRT_BREAK; return 0;
    case JN_CONTINUE: rt->loop_ctl = JRT_CONTINUE; return 0;
    case JN_BODY: return exec_inner(rt, n->kids, n->n_kids);
    default:
        return jrt_fail(rt, STRATA_EINVAL, "internal error: node %d is not a statement", n->kind);
    }
    jv_decref(v);
    jv_decref(w);
    return rc;
}

static int exec_body(jrt *rt, jnode *const *kids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int rc = enter(rt, kids[i]);
        if (rc == 0) rc = exec_stmt(rt, kids[i]);
        rt->depth--;
        if (rc != 0) return rc;
        if (rt->loop_ctl != 0) return 0;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* rendering                                                           */

static void today(int *y, int *m, int *d)
{
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm) == NULL) {
        *y = 1970;
        *m = 1;
        *d = 1;
        return;
    }
    *y = tm.tm_year + 1900;
    *m = tm.tm_mon + 1;
    *d = tm.tm_mday;
}

int jinja_render(const jinja_template *t, const jinja_render_opts *o, char **out,
                 size_t *out_len, strata_err *err)
{
    *out = NULL;
    *out_len = 0;
    if (t == NULL) return strata_err_set(err, STRATA_EINVAL, "template: no template");
    jinja_render_opts defaults = {0};
    if (o == NULL) o = &defaults;
    if (o->vars != NULL && !json_is_object(o->vars))
        return strata_err_set(err, STRATA_EINVAL, "template: variables must be a JSON object");

    jrt rt = {0};
    rt.err = err;
    rt.max_steps = o->limits.max_steps ? o->limits.max_steps : JINJA_DEFAULT_MAX_STEPS;
    rt.max_output = o->limits.max_output_bytes ? o->limits.max_output_bytes : JINJA_DEFAULT_MAX_OUTPUT;
    rt.heap.max_bytes = o->limits.max_memory_bytes ? o->limits.max_memory_bytes : JINJA_DEFAULT_MAX_MEMORY;
    rt.max_depth = o->limits.max_depth > 0 ? o->limits.max_depth : JINJA_DEFAULT_MAX_DEPTH;
    if (o->year != 0 && (o->year < 1 || o->year > 9999 || o->month < 1 || o->month > 12 ||
                         o->day < 1 || o->day > 31))
        return strata_err_set(err, STRATA_EINVAL, "template: bad date %d-%d-%d", o->year, o->month, o->day);
    if (o->year > 0) {
        rt.year = o->year;
        rt.month = o->month;
        rt.day = o->day;
    } else {
        today(&rt.year, &rt.month, &rt.day);
    }
    jscope root = {0};
    rt.root = &root;
    rt.scope = &root;
    jbuf buf = {0};
    rt.out = &buf;

    int rc = 0;
    if (o->vars != NULL) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)o->vars, key, val) {
            jv v;
            rc = jv_from_json(&rt, val, &v, 0);
            if (rc == 0) rc = scope_set(&rt, &root, key, v);
            if (rc != 0) break;
        }
    }
    if (rc == 0) rc = exec_body(&rt, t->root->kids, t->root->n_kids);
    if (rc == 0) {
        /* hand the buffer over: it leaves the heap's accounting */
        if (buf.p == NULL) {
            buf.p = malloc(1);
            if (buf.p == NULL) rc = strata_err_set(err, STRATA_ENOMEM, "template: out of memory");
            else buf.p[0] = '\0';
        }
        if (rc == 0) {
            *out = buf.p;
            *out_len = buf.len;
            buf.p = NULL;
        }
    }
    if (buf.p != NULL) free(buf.p);
    rt.scope = NULL;
    scope_free(&root);
    jinja_heap_release_all(&rt.heap);
    return rc;
}

int jinja_template_parse(jinja_template **out, const char *src, size_t len, strata_err *err)
{
    *out = NULL;
    if (src == NULL && len > 0) return strata_err_set(err, STRATA_EINVAL, "template: no source");
    if (len > JINJA_MAX_SOURCE)
        return strata_err_set(err, STRATA_ERANGE, "template: source of %zu bytes is over the %u limit",
                              len, (unsigned)JINJA_MAX_SOURCE);
    jinja_template *t = calloc(1, sizeof(*t));
    if (t == NULL) return strata_err_set(err, STRATA_ENOMEM, "template: out of memory");
    strata_arena_init(&t->arena);
    jtok *toks = NULL;
    size_t n_toks = 0;
    int rc = jinja_lex(&t->arena, src ? src : "", len, &toks, &n_toks, err);
    if (rc == 0) rc = jinja_parse_tokens(&t->arena, toks, n_toks, &t->root, err);
    if (rc != 0) {
        jinja_template_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void jinja_template_free(jinja_template *t)
{
    if (t == NULL) return;
    strata_arena_free(&t->arena);
    free(t);
}
