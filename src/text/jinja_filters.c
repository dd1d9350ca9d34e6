/* Jinja's filters (`x | name(args)`) and tests (`x is name args`), with
 * Jinja2's argument names and defaults and Python's semantics underneath.
 * Filters that return generators in Jinja2 (map, select, unique, batch...)
 * return lists here; templates only iterate, join or `| list` them.
 * An unknown filter or test is an error naming it, raised when the
 * template reaches it (as Jinja2 does for filters under a false branch). */
#include "text/jinja_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------------ */
/* arguments                                                           */

bool jargs_get(const jargs *a, size_t i, const char *name, jv *out)
{
    if (i < a->n_pos) {
        *out = a->pos[i];
        return true;
    }
    for (size_t k = 0; name != NULL && k < a->n_kw; k++) {
        if (strcmp(a->kwnames[k], name) == 0) {
            *out = a->kw[k];
            return true;
        }
    }
    return false;
}

int jargs_check(jrt *rt, const jargs *a, const char *what, size_t max_pos,
                const char *const *names)
{
    if (a->n_pos > max_pos)
        return jrt_fail(rt, STRATA_EINVAL, "%s takes at most %zu positional argument(s), got %zu",
                        what, max_pos, a->n_pos);
    for (size_t k = 0; k < a->n_kw; k++) {
        bool ok = false;
        for (size_t i = 0; names != NULL && names[i] != NULL && !ok; i++) ok = !strcmp(names[i], a->kwnames[k]);
        if (!ok) return jrt_fail(rt, STRATA_EINVAL, "%s got an unexpected keyword argument '%s'", what, a->kwnames[k]);
    }
    return 0;
}

static bool arg_bool(const jargs *a, size_t i, const char *name, bool dflt)
{
    jv v;
    return jargs_get(a, i, name, &v) ? jv_truthy(v) : dflt;
}

static int arg_int(jrt *rt, const jargs *a, size_t i, const char *name, int64_t dflt, int64_t *out)
{
    jv v;
    *out = dflt;
    if (!jargs_get(a, i, name, &v) || v.kind == JV_NONE) {
        *out = dflt;
        return 0;
    }
    if (v.kind == JV_INT || v.kind == JV_BOOL) {
        *out = v.kind == JV_BOOL ? v.u.b : v.u.i;
        return 0;
    }
    return jrt_fail(rt, STRATA_EINVAL, "argument '%s' must be an integer, not %s", name, jv_type_name(v));
}

/* A string argument or NULL when absent/None; fails for other types. */
static int arg_str(jrt *rt, const jargs *a, size_t i, const char *name, const jv_str **out)
{
    jv v;
    *out = NULL;
    if (!jargs_get(a, i, name, &v) || v.kind == JV_NONE || v.kind == JV_UNDEFINED) return 0;
    if (v.kind != JV_STRING)
        return jrt_fail(rt, STRATA_EINVAL, "argument '%s' must be a string, not %s", name, jv_type_name(v));
    *out = JV_STR(v);
    return 0;
}

static int need_str(jrt *rt, jv v, const char *what, jv *out)
{
    if (v.kind == JV_UNDEFINED) return jv_new_str(rt, "", 0, out);
    (void)what;
    return jv_to_str(rt, v, out);
}

/* ------------------------------------------------------------------ */
/* attribute paths: "a.b.0"                                            */

static int attr_path(jrt *rt, jv item, const jv_str *path, jv *out)
{
    jv cur = jv_dup(item);
    size_t i = 0;
    while (i <= path->len) {
        size_t j = i;
        while (j < path->len && path->s[j] != '.') j++;
        jv key;
        bool digits = j > i;
        for (size_t k = i; k < j && digits; k++) digits = path->s[k] >= '0' && path->s[k] <= '9';
        int rc;
        if (digits && j - i < 18) {
            key = jv_int(strtoll(path->s + i, NULL, 10));
            rc = 0;
        } else {
            rc = jv_new_str(rt, path->s + i, j - i, &key);
        }
        jv next = jv_none();
        if (rc == 0) {
            if (cur.kind == JV_UNDEFINED) next = cur, cur = jv_none();
            else rc = jx_getitem(rt, cur, key, &next);
            jv_decref(key);
        }
        jv_decref(cur);
        if (rc != 0) return rc;
        cur = next;
        i = j + 1;
    }
    *out = cur;
    return 0;
}

/* ------------------------------------------------------------------ */
/* sorting (stable merge sort on a list value, in place)               */

typedef struct sort_ctx {
    jrt *rt;
    bool casefold;
    int rc;
} sort_ctx;

static int sort_cmp(sort_ctx *c, jv a, jv b)
{
    if (c->rc != 0) return 0;
    int r = 0;
    c->rc = jv_compare(c->rt, a, b, c->casefold, &r);
    return r;
}

/* Sorts keys[] (with vals[] alongside) stably. */
static int merge_sort(sort_ctx *c, jv *keys, jv *vals, size_t n)
{
    if (n < 2) return 0;
    jv *tk = malloc(n * sizeof(jv)), *tv = malloc(n * sizeof(jv));
    if (tk == NULL || tv == NULL) {
        free(tk);
        free(tv);
        return jrt_fail(c->rt, STRATA_ENOMEM, "out of memory");
    }
    for (size_t width = 1; width < n && c->rc == 0; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                if (sort_cmp(c, keys[j], keys[i]) < 0) {
                    tk[k] = keys[j];
                    tv[k++] = vals[j++];
                } else {
                    tk[k] = keys[i];
                    tv[k++] = vals[i++];
                }
            }
            while (i < mid) { tk[k] = keys[i]; tv[k++] = vals[i++]; }
            while (j < hi) { tk[k] = keys[j]; tv[k++] = vals[j++]; }
        }
        memcpy(keys, tk, n * sizeof(jv));
        memcpy(vals, tv, n * sizeof(jv));
        c->rt->steps += n;
        if (c->rc == 0) c->rc = jrt_step(c->rt);
    }
    free(tk);
    free(tv);
    return c->rc;
}

static void reverse_pairs(jv *keys, jv *vals, size_t n)
{
    for (size_t i = 0; i < n / 2; i++) {
        jv t = keys[i]; keys[i] = keys[n - 1 - i]; keys[n - 1 - i] = t;
        t = vals[i]; vals[i] = vals[n - 1 - i]; vals[n - 1 - i] = t;
    }
}

/* Sorts keys[0..n) with vals alongside, stably; descending when reverse
 * (reverse, sort ascending, reverse back, so equal keys keep their order,
 * as Python's sort(reverse=True) does). */
static int sort_pairs(sort_ctx *c, jv *keys, jv *vals, size_t n, bool reverse)
{
    if (reverse) reverse_pairs(keys, vals, n);
    int rc = merge_sort(c, keys, vals, n);
    if (reverse) reverse_pairs(keys, vals, n);
    return rc;
}

/* Sorts the items of list `items` (owned) by key_of(item) into *out. */
static int sort_items(jrt *rt, jv items, const jv_str *attribute, bool casefold, bool reverse,
                      jv *out)
{
    jv_list *l = JV_LIST_(items);
    size_t n = l->n;
    jv keys_list;
    int rc = jv_new_list(rt, n, &keys_list);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        jv k;
        rc = attribute ? attr_path(rt, l->items[i], attribute, &k) : (k = jv_dup(l->items[i]), 0);
        if (rc == 0) rc = jv_list_push(rt, keys_list, k);
    }
    jv vals_list = jv_none();
    if (rc == 0) rc = jv_iterate(rt, items, &vals_list);
    if (rc == 0) {
        sort_ctx c = {.rt = rt, .casefold = casefold};
        jv *keys = JV_LIST_(keys_list)->items, *vals = JV_LIST_(vals_list)->items;
        rc = sort_pairs(&c, keys, vals, n, reverse);
    }
    if (keys_list.kind == JV_LIST) jv_decref(keys_list);
    if (rc == 0) *out = vals_list;
    else if (vals_list.kind == JV_LIST) jv_decref(vals_list);
    return rc;
}

/* ------------------------------------------------------------------ */
/* tests                                                               */

static int test_cmp(jrt *rt, const char *name, jv x, const jargs *a, bool *out)
{
    jv other;
    if (!jargs_get(a, 0, "b", &other))
        return jrt_fail(rt, STRATA_EINVAL, "test '%s' needs an argument", name);
    if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) {
        *out = jv_equal(x, other);
        return 0;
    }
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) {
        *out = !jv_equal(x, other);
        return 0;
    }
    if (!strcmp(name, "sameas")) {
        *out = x.kind == other.kind &&
               (jv_is_obj(x) ? x.u.o == other.u.o : jv_equal(x, other));
        return 0;
    }
    if (!strcmp(name, "in")) {
        if (other.kind == JV_STRING && x.kind == JV_STRING) {
            *out = JV_STR(x)->len == 0 ||
                   jstr_find(JV_STR(other)->s, JV_STR(other)->len, JV_STR(x)->s, JV_STR(x)->len) != NULL;
            return 0;
        }
        if (other.kind == JV_LIST) {
            *out = false;
            for (size_t i = 0; i < JV_LIST_(other)->n && !*out; i++) *out = jv_equal(JV_LIST_(other)->items[i], x);
            return 0;
        }
        if (jv_is_dict(other)) {
            *out = jv_dict_get(other, x) != NULL;
            return 0;
        }
        return jrt_fail(rt, STRATA_EINVAL, "argument of type '%s' is not iterable", jv_type_name(other));
    }
    int c;
    int rc = jv_compare(rt, x, other, false, &c);
    if (rc != 0) return rc;
    if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<")) *out = c < 0;
    else if (!strcmp(name, "le") || !strcmp(name, "<=")) *out = c <= 0;
    else if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">")) *out = c > 0;
    else *out = c >= 0;
    return 0;
}

static bool str_all_case(jv x, bool upper)
{
    if (x.kind != JV_STRING) return false;
    const jv_str *s = JV_STR(x);
    bool cased = false;
    for (size_t i = 0; i < s->len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s->s + i,
                                              (utf8proc_ssize_t)(s->len - i), &cp);
        if (k <= 0) { i++; continue; }
        i += (size_t)k;
        utf8proc_category_t c = utf8proc_category(cp);
        if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) {
            if (!upper) return false;
            cased = true;
        } else if (c == UTF8PROC_CATEGORY_LL) {
            if (upper) return false;
            cased = true;
        }
    }
    return cased;
}

int jf_test(jrt *rt, const char *name, jv x, const jargs *a, bool *out)
{
    bool num = jv_is_number(x);
    if (!strcmp(name, "defined")) *out = x.kind != JV_UNDEFINED;
    else if (!strcmp(name, "undefined")) *out = x.kind == JV_UNDEFINED;
    else if (!strcmp(name, "none")) *out = x.kind == JV_NONE;
    else if (!strcmp(name, "string")) *out = x.kind == JV_STRING;
    else if (!strcmp(name, "number")) *out = num;
    else if (!strcmp(name, "integer")) *out = x.kind == JV_INT;
    else if (!strcmp(name, "float")) *out = x.kind == JV_FLOAT;
    else if (!strcmp(name, "boolean")) *out = x.kind == JV_BOOL;
    else if (!strcmp(name, "true")) *out = x.kind == JV_BOOL && x.u.b;
    else if (!strcmp(name, "false")) *out = x.kind == JV_BOOL && !x.u.b;
    else if (!strcmp(name, "mapping")) *out = x.kind == JV_DICT;
    else if (!strcmp(name, "sequence")) *out = x.kind == JV_STRING || x.kind == JV_LIST || x.kind == JV_DICT;
    else if (!strcmp(name, "iterable"))
        *out = x.kind == JV_STRING || x.kind == JV_LIST || x.kind == JV_DICT || x.kind == JV_UNDEFINED;
    else if (!strcmp(name, "callable")) *out = x.kind == JV_CALLABLE;
    else if (!strcmp(name, "escaped")) *out = x.kind == JV_STRING && JV_STR(x)->markup;
    else if (!strcmp(name, "lower")) *out = str_all_case(x, false);
    else if (!strcmp(name, "upper")) *out = str_all_case(x, true);
    else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        /* Jinja2: value % 2 == 1, value % 2 == 0, value % num == 0 */
        jv d = jv_int(2), m;
        if (name[0] == 'd' && !jargs_get(a, 0, "num", &d))
            return jrt_fail(rt, STRATA_EINVAL, "test 'divisibleby' needs a number");
        if (!jv_is_number(x) || !jv_is_number(d))
            return jrt_fail(rt, STRATA_EINVAL, "test '%s' needs numbers, not %s", name, jv_type_name(x));
        int rc = jx_arith(rt, JOP_MOD, x, d, &m);
        if (rc != 0) return rc;
        *out = jv_equal(m, jv_int(name[0] == 'o' ? 1 : 0));
    } else if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==") ||
               !strcmp(name, "ne") || !strcmp(name, "!=") || !strcmp(name, "lt") ||
               !strcmp(name, "lessthan") || !strcmp(name, "<") || !strcmp(name, "le") ||
               !strcmp(name, "<=") || !strcmp(name, "gt") || !strcmp(name, "greaterthan") ||
               !strcmp(name, ">") || !strcmp(name, "ge") || !strcmp(name, ">=") ||
               !strcmp(name, "sameas") || !strcmp(name, "in")) {
        return test_cmp(rt, name, x, a, out);
    } else {
        return jrt_fail(rt, STRATA_EINVAL, "no test named '%s'", name);
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* filters                                                             */

static int f_default(jrt *rt, jv x, const jargs *a, jv *out)
{
    jv d;
    bool boolean = arg_bool(a, 1, "boolean", false);
    bool use = x.kind == JV_UNDEFINED || (boolean && !jv_truthy(x));
    if (!use) {
        *out = jv_dup(x);
        return 0;
    }
    if (jargs_get(a, 0, "default_value", &d)) *out = jv_dup(d);
    else return jv_new_str(rt, "", 0, out);
    return 0;
}

static int f_join(jrt *rt, jv x, const jargs *a, jv *out)
{
    const jv_str *sep, *attr;
    int rc = arg_str(rt, a, 0, "d", &sep);
    if (rc == 0) rc = arg_str(rt, a, 1, "attribute", &attr);
    jv items;
    if (rc == 0) rc = jv_iterate(rt, x, &items);
    if (rc != 0) return rc;
    jbuf b = {0};
    jv_list *l = JV_LIST_(items);
    for (size_t i = 0; rc == 0 && i < l->n; i++) {
        if (i > 0 && sep) rc = jbuf_put(rt, &b, sep->s, sep->len);
        if (rc != 0) break;
        if (attr) {
            jv v;
            rc = attr_path(rt, l->items[i], attr, &v);
            if (rc == 0) rc = jv_write_str(rt, &b, v);
            jv_decref(v);
        } else {
            rc = jv_write_str(rt, &b, l->items[i]);
        }
    }
    jv_decref(items);
    if (rc != 0) {
        jbuf_free(&b);
        return rc;
    }
    return jbuf_to_value(rt, &b, out);
}

/* Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False): json.dumps with those arguments, in that order. */
static int f_tojson(jrt *rt, jv x, const jargs *a, jv *out)
{
    static const char *const names[] = {"indent", "ensure_ascii", "separators", "sort_keys", NULL};
    int rc = jargs_check(rt, a, "tojson", 4, names);
    if (rc != 0) return rc;
    char indent_buf[64];
    const char *indent = NULL;
    jv v;
    if (jargs_get(a, 1, "indent", &v) && v.kind != JV_NONE) {
        if (v.kind == JV_INT) {
            int64_t n = v.u.i < 0 ? 0 : v.u.i > 32 ? 32 : v.u.i;
            memset(indent_buf, ' ', (size_t)n);
            indent_buf[n] = '\0';
            indent = indent_buf;
        } else if (v.kind == JV_STRING && JV_STR(v)->len < sizeof(indent_buf)) {
            memcpy(indent_buf, JV_STR(v)->s, JV_STR(v)->len + 1);
            indent = indent_buf;
        } else {
            return jrt_fail(rt, STRATA_EINVAL, "tojson: indent must be an integer or a short string");
        }
    }
    bool ascii = arg_bool(a, 0, "ensure_ascii", false);
    const char *item_sep = indent ? "," : ", ", *key_sep = ": ";
    char seps[2][32];
    if (jargs_get(a, 2, "separators", &v) && v.kind != JV_NONE) {
        if (v.kind != JV_LIST || JV_LIST_(v)->n != 2 || JV_LIST_(v)->items[0].kind != JV_STRING ||
            JV_LIST_(v)->items[1].kind != JV_STRING || JV_STR(JV_LIST_(v)->items[0])->len >= 32 ||
            JV_STR(JV_LIST_(v)->items[1])->len >= 32)
            return jrt_fail(rt, STRATA_EINVAL, "tojson: separators must be two short strings");
        memcpy(seps[0], JV_STR(JV_LIST_(v)->items[0])->s, JV_STR(JV_LIST_(v)->items[0])->len + 1);
        memcpy(seps[1], JV_STR(JV_LIST_(v)->items[1])->s, JV_STR(JV_LIST_(v)->items[1])->len + 1);
        item_sep = seps[0];
        key_sep = seps[1];
    }
    bool sort_keys = arg_bool(a, 3, "sort_keys", false);
    jbuf b = {0};
    rc = jv_write_json(rt, &b, x, indent, sort_keys, ascii, item_sep, key_sep, 0);
    if (rc != 0) {
        jbuf_free(&b);
        return rc;
    }
    return jbuf_to_value(rt, &b, out);
}

static int f_trim(jrt *rt, jv x, const jargs *a, jv *out)
{
    const jv_str *chars;
    jv s;
    int rc = arg_str(rt, a, 0, "chars", &chars);
    if (rc == 0) rc = need_str(rt, x, "trim", &s);
    if (rc != 0) return rc;
    size_t b, e;
    jstr_strip(JV_STR(s)->s, JV_STR(s)->len, chars ? chars->s : NULL, chars ? chars->len : 0, 'b', &b, &e);
    rc = jv_new_str(rt, JV_STR(s)->s + b, e - b, out);
    if (rc == 0) JV_STR(*out)->markup = JV_STR(s)->markup;
    jv_decref(s);
    return rc;
}

static int f_case(jrt *rt, jv x, char mode, jv *out)
{
    jv s;
    int rc = need_str(rt, x, "case", &s);
    if (rc != 0) return rc;
    jbuf b = {0};
    bool markup = JV_STR(s)->markup;
    rc = jstr_case(rt, &b, JV_STR(s)->s, JV_STR(s)->len, mode);
    jv_decref(s);
    if (rc != 0) {
        jbuf_free(&b);
        return rc;
    }
    rc = jbuf_to_value(rt, &b, out);
    if (rc == 0) JV_STR(*out)->markup = markup;
    return rc;
}

static int f_replace(jrt *rt, jv x, const jargs *a, jv *out)
{
    jv s, oldv, newv;
    if (!jargs_get(a, 0, "old", &oldv) || !jargs_get(a, 1, "new", &newv))
        return jrt_fail(rt, STRATA_EINVAL, "replace needs two arguments");
    int64_t count;
    int rc = arg_int(rt, a, 2, "count", -1, &count);
    if (rc != 0) return rc;
    rc = need_str(rt, x, "replace", &s);
    if (rc != 0) return rc;
    jv o, n;
    rc = jv_to_str(rt, oldv, &o);
    if (rc == 0) {
        rc = jv_to_str(rt, newv, &n);
        if (rc == 0) {
            jv_str *ss = JV_STR(s), *os = JV_STR(o), *ns = JV_STR(n);
            jbuf b = {0};
            size_t i = 0, done = 0;
            while (rc == 0 && i <= ss->len && (count < 0 || (int64_t)done < count)) {
                const char *hit;
                if (os->len == 0) {
                    /* Python inserts `new` between characters and at both ends */
                    rc = jbuf_put(rt, &b, ns->s, ns->len);
                    if (i == ss->len) { i++; done++; break; }
                    size_t k = jstr_char_offset(ss->s + i, ss->len - i, 1);
                    if (rc == 0) rc = jbuf_put(rt, &b, ss->s + i, k);
                    i += k;
                    done++;
                    continue;
                }
                hit = jstr_find(ss->s + i, ss->len - i, os->s, os->len);
                if (hit == NULL) break;
                size_t at = (size_t)(hit - ss->s);
                rc = jbuf_put(rt, &b, ss->s + i, at - i);
                if (rc == 0) rc = jbuf_put(rt, &b, ns->s, ns->len);
                i = at + os->len;
                done++;
            }
            if (rc == 0 && i < ss->len) rc = jbuf_put(rt, &b, ss->s + i, ss->len - i);
            if (rc == 0) rc = jbuf_to_value(rt, &b, out);
            else jbuf_free(&b);
            jv_decref(n);
        }
        jv_decref(o);
    }
    jv_decref(s);
    return rc;
}

/* Python's str.splitlines() boundaries (without keepends): returns the
 * length of the line break at s[i], 0 if none. */
static size_t line_break_at(const char *s, size_t len, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    if (c == '\r') return (i + 1 < len && s[i + 1] == '\n') ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) return 1;
    if (c == 0xC2 && i + 1 < len && (unsigned char)s[i + 1] == 0x85) return 2;
    if (c == 0xE2 && i + 2 < len && (unsigned char)s[i + 1] == 0x80 &&
        ((unsigned char)s[i + 2] == 0xA8 || (unsigned char)s[i + 2] == 0xA9))
        return 3;
    return 0;
}

static int f_indent(jrt *rt, jv x, const jargs *a, jv *out)
{
    jv w, s;
    char ind[256];
    size_t ind_len = 4;
    memset(ind, ' ', 4);
    if (jargs_get(a, 0, "width", &w)) {
        if (w.kind == JV_STRING && JV_STR(w)->len < sizeof(ind)) {
            ind_len = JV_STR(w)->len;
            memcpy(ind, JV_STR(w)->s, ind_len);
        } else if (w.kind == JV_INT) {
            ind_len = w.u.i < 0 ? 0 : w.u.i > 255 ? 255 : (size_t)w.u.i;
            memset(ind, ' ', ind_len);
        } else {
            return jrt_fail(rt, STRATA_EINVAL, "indent: width must be an integer or a string");
        }
    }
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    /* Jinja2 appends "\n" to the value first: only strings take that */
    if (x.kind != JV_STRING)
        return jrt_fail(rt, STRATA_EINVAL, "indent needs a string, not %s", jv_type_name(x));
    int rc = need_str(rt, x, "indent", &s);
    if (rc != 0) return rc;
    const char *p = JV_STR(s)->s;
    size_t len = JV_STR(s)->len;
    jbuf b = {0};
    if (first) rc = jbuf_put(rt, &b, ind, ind_len);
    /* lines of s + "\n", the last (empty) one dropped, joined by "\n" */
    size_t start = 0, line = 0;
    while (rc == 0 && start <= len) {
        size_t e = start, br = 0;
        while (e < len && (br = line_break_at(p, len, e)) == 0) e++;
        if (e >= len && start == len && line > 0) break; /* the empty piece after the last break */
        if (e >= len && start == len && line == 0 && len == 0) {
            break; /* "" -> "" (plus the first indent) */
        }
        if (line > 0) {
            rc = jbuf_put(rt, &b, "\n", 1);
            if (rc == 0 && (blank || e > start)) rc = jbuf_put(rt, &b, ind, ind_len);
        }
        if (rc == 0) rc = jbuf_put(rt, &b, p + start, e - start);
        line++;
        if (e >= len) break;
        start = e + br;
    }
    jv_decref(s);
    if (rc != 0) {
        jbuf_free(&b);
        return rc;
    }
    return jbuf_to_value(rt, &b, out);
}

static int f_first_last(jrt *rt, jv x, bool last, jv *out)
{
    if (x.kind == JV_LIST) {
        jv_list *l = JV_LIST_(x);
        *out = l->n ? jv_dup(l->items[last ? l->n - 1 : 0]) : jv_undefined(NULL);
        return 0;
    }
    jv items;
    int rc = jv_iterate(rt, x, &items);
    if (rc != 0) return rc;
    jv_list *l = JV_LIST_(items);
    *out = l->n ? jv_dup(l->items[last ? l->n - 1 : 0]) : jv_undefined(NULL);
    jv_decref(items);
    return 0;
}

static int f_select(jrt *rt, jv x, const jargs *a, bool by_attr, bool keep, jv *out)
{
    jv items;
    if (!jv_truthy(x)) return jv_new_list(rt, 0, out); /* Jinja2: `if value:` first */
    int rc = jv_iterate(rt, x, &items);
    if (rc != 0) return rc;
    size_t first_test_arg = 0;
    const jv_str *attr = NULL;
    if (by_attr) {
        jv v;
        if (a->n_pos < 1 || !jargs_get(a, 0, NULL, &v) || v.kind != JV_STRING) {
            jv_decref(items);
            return jrt_fail(rt, STRATA_EINVAL, "%s needs an attribute name", keep ? "selectattr" : "rejectattr");
        }
        attr = JV_STR(v);
        first_test_arg = 1;
    }
    const char *test = NULL;
    if (a->n_pos > first_test_arg) {
        jv t = a->pos[first_test_arg];
        if (t.kind != JV_STRING) {
            jv_decref(items);
            return jrt_fail(rt, STRATA_EINVAL, "the test name must be a string");
        }
        test = JV_STR(t)->s;
    }
    jargs targs = {.pos = a->pos + (a->n_pos > first_test_arg ? first_test_arg + 1 : a->n_pos),
                   .n_pos = a->n_pos > first_test_arg ? a->n_pos - first_test_arg - 1 : 0,
                   .kwnames = a->kwnames, .kw = a->kw, .n_kw = a->n_kw};
    rc = jv_new_list(rt, 0, out);
    jv_list *l = JV_LIST_(items);
    for (size_t i = 0; rc == 0 && i < l->n; i++) {
        jv v;
        if (attr) rc = attr_path(rt, l->items[i], attr, &v);
        else v = jv_dup(l->items[i]);
        if (rc != 0) break;
        bool r;
        if (test) rc = jf_test(rt, test, v, &targs, &r);
        else r = jv_truthy(v);
        jv_decref(v);
        if (rc == 0 && r == keep) rc = jv_list_push(rt, *out, jv_dup(l->items[i]));
    }
    jv_decref(items);
    return rc;
}

static int f_map(jrt *rt, jv x, const jargs *a, jv *out)
{
    jv items;
    if (!jv_truthy(x)) return jv_new_list(rt, 0, out); /* Jinja2: `if value:` first */
    int rc = jv_iterate(rt, x, &items);
    if (rc != 0) return rc;
    jv attrv, dflt;
    bool has_attr = a->n_pos == 0 && jargs_get(a, 99, "attribute", &attrv);
    bool has_dflt = jargs_get(a, 99, "default", &dflt);
    const char *filter = NULL;
    if (!has_attr) {
        if (a->n_pos == 0 || a->pos[0].kind != JV_STRING) {
            jv_decref(items);
            return jrt_fail(rt, STRATA_EINVAL, "map needs a filter name or attribute=");
        }
        filter = JV_STR(a->pos[0])->s;
    } else if (attrv.kind != JV_STRING) {
        jv_decref(items);
        return jrt_fail(rt, STRATA_EINVAL, "map: attribute must be a string");
    }
    jargs fargs = {.pos = a->pos + (a->n_pos ? 1 : 0), .n_pos = a->n_pos ? a->n_pos - 1 : 0,
                   .kwnames = a->kwnames, .kw = a->kw, .n_kw = a->n_kw};
    rc = jv_new_list(rt, 0, out);
    jv_list *l = JV_LIST_(items);
    for (size_t i = 0; rc == 0 && i < l->n; i++) {
        jv v;
        if (has_attr) {
            rc = attr_path(rt, l->items[i], JV_STR(attrv), &v);
            if (rc == 0 && v.kind == JV_UNDEFINED && has_dflt) v = jv_dup(dflt);
        } else {
            rc = jf_filter(rt, filter, l->items[i], &fargs, &v);
        }
        if (rc == 0) rc = jv_list_push(rt, *out, v);
    }
    jv_decref(items);
    return rc;
}

static int f_sort(jrt *rt, jv x, const jargs *a, jv *out)
{
    bool reverse = arg_bool(a, 0, "reverse", false), cs = arg_bool(a, 1, "case_sensitive", false);
    const jv_str *attr;
    int rc = arg_str(rt, a, 2, "attribute", &attr);
    jv items;
    if (rc == 0) rc = jv_iterate(rt, x, &items);
    if (rc != 0) return rc;
    rc = sort_items(rt, items, attr, !cs, reverse, out);
    jv_decref(items);
    return rc;
}

static int f_dictsort(jrt *rt, jv x, const jargs *a, jv *out)
{
    if (!jv_is_dict(x)) return jrt_fail(rt, STRATA_EINVAL, "dictsort needs a dict, not %s", jv_type_name(x));
    bool cs = arg_bool(a, 0, "case_sensitive", false), reverse = arg_bool(a, 2, "reverse", false);
    const jv_str *by;
    int rc = arg_str(rt, a, 1, "by", &by);
    if (rc != 0) return rc;
    bool by_value = by != NULL && strcmp(by->s, "value") == 0;
    if (by != NULL && !by_value && strcmp(by->s, "key") != 0)
        return jrt_fail(rt, STRATA_EINVAL, "dictsort: 'by' must be 'key' or 'value'");
    jv_dict *d = JV_DICT_(x);
    jv pairs, keys;
    rc = jv_new_list(rt, d->n, &pairs);
    if (rc == 0) rc = jv_new_list(rt, d->n, &keys);
    for (size_t i = 0; rc == 0 && i < d->n; i++) {
        jv p;
        rc = jv_new_list(rt, 2, &p);
        if (rc != 0) break;
        JV_LIST_(p)->is_tuple = true;
        rc = jv_list_push(rt, p, jv_dup(d->keys[i]));
        if (rc == 0) rc = jv_list_push(rt, p, jv_dup(d->vals[i]));
        if (rc == 0) rc = jv_list_push(rt, pairs, p);
        else jv_decref(p);
        if (rc == 0) rc = jv_list_push(rt, keys, jv_dup(by_value ? d->vals[i] : d->keys[i]));
    }
    if (rc == 0) {
        sort_ctx c = {.rt = rt, .casefold = !cs};
        jv *k = JV_LIST_(keys)->items, *v = JV_LIST_(pairs)->items;
        size_t n = JV_LIST_(keys)->n;
        rc = sort_pairs(&c, k, v, n, reverse);
    }
    if (keys.kind == JV_LIST) jv_decref(keys);
    if (rc == 0) *out = pairs;
    else if (pairs.kind == JV_LIST) jv_decref(pairs);
    return rc;
}

static int f_unique(jrt *rt, jv x, const jargs *a, jv *out)
{
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    const jv_str *attr;
    int rc = arg_str(rt, a, 1, "attribute", &attr);
    jv items, seen;
    if (rc == 0) rc = jv_iterate(rt, x, &items);
    if (rc != 0) return rc;
    rc = jv_new_list(rt, 0, out);
    if (rc == 0) rc = jv_new_list(rt, 0, &seen);
    jv_list *l = JV_LIST_(items);
    for (size_t i = 0; rc == 0 && i < l->n; i++) {
        jv key;
        if (attr) rc = attr_path(rt, l->items[i], attr, &key);
        else key = jv_dup(l->items[i]);
        if (rc == 0 && !cs && key.kind == JV_STRING) {
            jv low;
            rc = f_case(rt, key, 'l', &low);
            jv_decref(key);
            key = low;
        }
        if (rc == 0 && (key.kind == JV_DICT || key.kind == JV_NAMESPACE ||
                        (key.kind == JV_LIST && !JV_LIST_(key)->is_tuple))) {
            rc = jrt_fail(rt, STRATA_EINVAL, "unhashable type: '%s'", jv_type_name(key));
            jv_decref(key);
        }
        if (rc != 0) break;
        bool dup = false;
        for (size_t k = 0; k < JV_LIST_(seen)->n && !dup; k++) dup = jv_equal(JV_LIST_(seen)->items[k], key);
        rt->steps += JV_LIST_(seen)->n >> 4;
        if (dup) {
            jv_decref(key);
            continue;
        }
        rc = jv_list_push(rt, seen, key);
        if (rc == 0) rc = jv_list_push(rt, *out, jv_dup(l->items[i]));
    }
    if (seen.kind == JV_LIST) jv_decref(seen);
    jv_decref(items);
    return rc;
}

static int f_reverse(jrt *rt, jv x, jv *out)
{
    jv items;
    int rc = jv_iterate(rt, x, &items);
    if (rc != 0) return rc;
    jv_list *l = JV_LIST_(items);
    for (size_t i = 0; i < l->n / 2; i++) {
        jv t = l->items[i];
        l->items[i] = l->items[l->n - 1 - i];
        l->items[l->n - 1 - i] = t;
    }
    if (x.kind != JV_STRING) {
        *out = items;
        return 0;
    }
    jbuf b = {0};
    for (size_t i = 0; rc == 0 && i < l->n; i++) rc = jbuf_put(rt, &b, JV_STR(l->items[i])->s, JV_STR(l->items[i])->len);
    jv_decref(items);
    if (rc != 0) {
        jbuf_free(&b);
        return rc;
    }
    return jbuf_to_value(rt, &b, out);
}

/* Python's int(str): optional sign, digits, surrounding whitespace. */
static bool parse_int(const char *s, size_t len, int64_t base, int64_t *out)
{
    size_t b, e;
    jstr_strip(s, len, NULL, 0, 'b', &b, &e);
    if (b == e) return false;
    bool neg = false;
    if (s[b] == '+' || s[b] == '-') neg = s[b++] == '-';
    if (b == e) return false;
    if (base == 16 && e - b > 2 && s[b] == '0' && (s[b + 1] == 'x' || s[b + 1] == 'X')) b += 2;
    uint64_t v = 0;
    for (size_t i = b; i < e; i++) {
        char c = s[i];
        if (c == '_' && i > b && i + 1 < e) continue;
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10
              : (c >= 'A' && c <= 'Z') ? c - 'A' + 10 : 99;
        if (d >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
        if (v > (uint64_t)INT64_MAX + (neg ? 1u : 0u)) return false;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static bool parse_float(const char *s, size_t len, double *out)
{
    size_t b, e;
    jstr_strip(s, len, NULL, 0, 'b', &b, &e);
    if (b == e || e - b > 300) return false;
    char buf[320];
    size_t n = 0;
    for (size_t i = b; i < e; i++) {
        if (s[i] == '_') continue;
        buf[n++] = s[i];
    }
    buf[n] = '\0';
    char *end;
    double v = strtod(buf, &end);
    if (end != buf + n) return false;
    /* strtod also takes hex floats and "infinity"; Python takes the latter */
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == 'x' || buf[i] == 'X') return false;
    }
    *out = v;
    return true;
}

static int f_int(jrt *rt, jv x, const jargs *a, jv *out)
{
    int64_t dflt, base;
    int rc = arg_int(rt, a, 0, "default", 0, &dflt);
    if (rc == 0) rc = arg_int(rt, a, 1, "base", 10, &base);
    if (rc != 0) return rc;
    if (base < 2 || base > 36) base = 10;
    int64_t v;
    double f;
    switch (x.kind) {
    case JV_INT: *out = x; return 0;
    case JV_BOOL: *out = jv_int(x.u.b); return 0;
    case JV_FLOAT:
        if (isfinite(x.u.f) && fabs(x.u.f) < 9.2e18) *out = jv_int((int64_t)x.u.f);
        else *out = jv_int(dflt);
        return 0;
    case JV_STRING:
        if (parse_int(JV_STR(x)->s, JV_STR(x)->len, base, &v)) *out = jv_int(v);
        else if (parse_float(JV_STR(x)->s, JV_STR(x)->len, &f) && isfinite(f) && fabs(f) < 9.2e18)
            *out = jv_int((int64_t)f);
        else *out = jv_int(dflt);
        return 0;
    default: *out = jv_int(dflt); return 0;
    }
}

static int f_float(jrt *rt, jv x, const jargs *a, jv *out)
{
    jv d;
    double f;
    switch (x.kind) {
    case JV_FLOAT: *out = x; return 0;
    case JV_INT: *out = jv_float((double)x.u.i); return 0;
    case JV_BOOL: *out = jv_float(x.u.b); return 0;
    case JV_STRING:
        if (parse_float(JV_STR(x)->s, JV_STR(x)->len, &f)) {
            *out = jv_float(f);
            return 0;
        }
        break;
    default: break;
    }
    if (jargs_get(a, 0, "default", &d)) *out = jv_dup(d);
    else *out = jv_float(0.0);
    (void)rt;
    return 0;
}

static int f_round(jrt *rt, jv x, const jargs *a, jv *out)
{
    int64_t prec;
    const jv_str *method;
    int rc = arg_int(rt, a, 0, "precision", 0, &prec);
    if (rc == 0) rc = arg_str(rt, a, 1, "method", &method);
    if (rc != 0) return rc;
    if (!jv_is_number(x)) return jrt_fail(rt, STRATA_EINVAL, "round needs a number, not %s", jv_type_name(x));
    double v = x.kind == JV_FLOAT ? x.u.f : (double)(x.kind == JV_BOOL ? x.u.b : x.u.i);
    const char *m0 = method ? method->s : "common";
    if (x.kind != JV_FLOAT && !strcmp(m0, "common") && prec >= 0) {
        /* Python's round() of an int is that int */
        *out = jv_int(x.kind == JV_BOOL ? x.u.b : x.u.i);
        return 0;
    }
    if (prec < -300) prec = -300;
    if (prec > 300) prec = 300;
    const char *m = method ? method->s : "common";
    if (!isfinite(v)) {
        *out = jv_float(v);
        return 0;
    }
    if (!strcmp(m, "common")) {
        if (prec >= 0 && prec <= 17) {
            /* printf rounds the exact binary value half-to-even, as Python */
            char buf[400];
            snprintf(buf, sizeof(buf), "%.*f", (int)prec, v);
            *out = jv_float(strtod(buf, NULL));
        } else {
            double p = pow(10.0, (double)prec);
            *out = jv_float(rint(v * p) / p);
        }
    } else if (!strcmp(m, "floor") || !strcmp(m, "ceil")) {
        double p = pow(10.0, (double)prec);
        *out = jv_float((m[0] == 'f' ? floor(v * p) : ceil(v * p)) / p);
    } else {
        return jrt_fail(rt, STRATA_EINVAL, "round: method must be 'common', 'ceil' or 'floor'");
    }
    return 0;
}

static int f_items(jrt *rt, jv x, jv *out)
{
    if (x.kind == JV_UNDEFINED) return jv_new_list(rt, 0, out);
    if (!jv_is_dict(x)) return jrt_fail(rt, STRATA_EINVAL, "can only get item pairs from a mapping, not %s", jv_type_name(x));
    jv_dict *d = JV_DICT_(x);
    int rc = jv_new_list(rt, d->n, out);
    for (size_t i = 0; rc == 0 && i < d->n; i++) {
        jv p;
        rc = jv_new_list(rt, 2, &p);
        if (rc != 0) break;
        JV_LIST_(p)->is_tuple = true;
        rc = jv_list_push(rt, p, jv_dup(d->keys[i]));
        if (rc == 0) rc = jv_list_push(rt, p, jv_dup(d->vals[i]));
        if (rc == 0) rc = jv_list_push(rt, *out, p);
        else jv_decref(p);
    }
    return rc;
}

static int f_batch(jrt *rt, jv x, const jargs *a, jv *out)
{
    int64_t n;
    jv fill;
    int rc = arg_int(rt, a, 0, "linecount", 0, &n);
    if (rc != 0) return rc;
    if (n <= 0) return jrt_fail(rt, STRATA_EINVAL, "batch: linecount must be positive");
    bool has_fill = jargs_get(a, 1, "fill_with", &fill) && fill.kind != JV_NONE;
    jv items, row = jv_none();
    rc = jv_iterate(rt, x, &items);
    if (rc == 0) rc = jv_new_list(rt, 0, out);
    jv_list *l = JV_LIST_(items);
    for (size_t i = 0; rc == 0 && i < l->n; i++) {
        if (row.kind != JV_LIST) rc = jv_new_list(rt, 0, &row);
        if (rc == 0) rc = jv_list_push(rt, row, jv_dup(l->items[i]));
        if (rc == 0 && (int64_t)JV_LIST_(row)->n == n) {
            rc = jv_list_push(rt, *out, row);
            row = jv_none();
        }
    }
    if (rc == 0 && row.kind == JV_LIST) {
        while (rc == 0 && has_fill && (int64_t)JV_LIST_(row)->n < n) rc = jv_list_push(rt, row, jv_dup(fill));
        if (rc == 0) rc = jv_list_push(rt, *out, row);
        row = jv_none();
    }
    jv_decref(row);
    if (items.kind == JV_LIST) jv_decref(items);
    return rc;
}

static int f_sum(jrt *rt, jv x, const jargs *a, jv *out)
{
    const jv_str *attr;
    jv start = jv_int(0), items;
    int rc = arg_str(rt, a, 0, "attribute", &attr);
    if (rc != 0) return rc;
    jargs_get(a, 1, "start", &start);
    rc = jv_iterate(rt, x, &items);
    if (rc != 0) return rc;
    jv acc = jv_dup(start);
    jv_list *l = JV_LIST_(items);
    for (size_t i = 0; rc == 0 && i < l->n; i++) {
        jv v, r;
        if (attr) rc = attr_path(rt, l->items[i], attr, &v);
        else v = jv_dup(l->items[i]);
        if (rc != 0) break;
        if (!(jv_is_number(acc) && jv_is_number(v))) {
            rc = jrt_fail(rt, STRATA_EINVAL, "sum: unsupported operand types '%s' and '%s'",
                          jv_type_name(acc), jv_type_name(v));
        } else if (acc.kind != JV_FLOAT && v.kind != JV_FLOAT) {
            int64_t s, p = acc.kind == JV_BOOL ? acc.u.b : acc.u.i, q = v.kind == JV_BOOL ? v.u.b : v.u.i;
            if (__builtin_add_overflow(p, q, &s)) rc = jrt_fail(rt, STRATA_ERANGE, "integer overflow");
            else r = jv_int(s), acc = r;
        } else {
            double p = acc.kind == JV_FLOAT ? acc.u.f : (double)(acc.kind == JV_BOOL ? acc.u.b : acc.u.i);
            double q = v.kind == JV_FLOAT ? v.u.f : (double)(v.kind == JV_BOOL ? v.u.b : v.u.i);
            acc = jv_float(p + q);
        }
        jv_decref(v);
    }
    jv_decref(items);
    if (rc != 0) {
        jv_decref(acc);
        return rc;
    }
    *out = acc;
    return 0;
}

static int f_minmax(jrt *rt, jv x, const jargs *a, bool want_max, jv *out)
{
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    const jv_str *attr;
    jv items;
    int rc = arg_str(rt, a, 1, "attribute", &attr);
    if (rc == 0) rc = jv_iterate(rt, x, &items);
    if (rc != 0) return rc;
    jv_list *l = JV_LIST_(items);
    *out = jv_undefined(NULL);
    jv best_key = jv_none();
    for (size_t i = 0; rc == 0 && i < l->n; i++) {
        jv k;
        if (attr) rc = attr_path(rt, l->items[i], attr, &k);
        else k = jv_dup(l->items[i]);
        if (rc != 0) break;
        int c = 0;
        if (i > 0) rc = jv_compare(rt, k, best_key, !cs, &c);
        if (rc == 0 && (i == 0 || (want_max ? c > 0 : c < 0))) {
            jv_decref(best_key);
            best_key = k;
            jv_decref(*out);
            *out = jv_dup(l->items[i]);
        } else {
            jv_decref(k);
        }
    }
    jv_decref(best_key);
    jv_decref(items);
    if (rc != 0) {
        jv_decref(*out);
        *out = jv_none();
    }
    return rc;
}

static int f_wordcount(jrt *rt, jv x, jv *out)
{
    jv s;
    int rc = need_str(rt, x, "wordcount", &s);
    if (rc != 0) return rc;
    const jv_str *p = JV_STR(s);
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < p->len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p->s + i,
                                              (utf8proc_ssize_t)(p->len - i), &cp);
        if (k <= 0) { cp = -1; k = 1; }
        bool w = false;
        if (cp == '_') w = true;
        else if (cp >= 0) {
            utf8proc_category_t c = utf8proc_category(cp);
            w = (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
                (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
        }
        if (w && !in_word) n++;
        in_word = w;
        i += (size_t)k;
    }
    jv_decref(s);
    *out = jv_int(n);
    return 0;
}

/* Markup(str(x)) for safe, escape(str(x)) for escape: both mark the result
 * so that `+` escapes what is added to it, as markupsafe does. */
static int to_markup(jrt *rt, jv x, bool escape, jv *out)
{
    jv s;
    int rc = need_str(rt, x, "escape", &s);
    if (rc != 0) return rc;
    jbuf b = {0};
    if (escape) rc = jstr_escape_html(rt, &b, JV_STR(s)->s, JV_STR(s)->len);
    else rc = jbuf_put(rt, &b, JV_STR(s)->s, JV_STR(s)->len);
    jv_decref(s);
    if (rc == 0) rc = jbuf_to_value(rt, &b, out);
    else jbuf_free(&b);
    if (rc == 0) JV_STR(*out)->markup = true;
    return rc;
}

static int f_center(jrt *rt, jv x, const jargs *a, jv *out)
{
    int64_t width;
    jv s;
    int rc = arg_int(rt, a, 0, "width", 80, &width);
    if (rc == 0) rc = need_str(rt, x, "center", &s);
    if (rc != 0) return rc;
    int64_t n = (int64_t)jstr_n_chars(JV_STR(s)->s, JV_STR(s)->len);
    if (width <= n || width > (1 << 20)) {
        *out = s;
        return 0;
    }
    /* Python: left = pad // 2 + (pad & width & 1) */
    int64_t pad = width - n, left = pad / 2 + (pad & width & 1), right = pad - left;
    jbuf b = {0};
    for (int64_t i = 0; rc == 0 && i < left; i++) rc = jbuf_put(rt, &b, " ", 1);
    if (rc == 0) rc = jbuf_put(rt, &b, JV_STR(s)->s, JV_STR(s)->len);
    for (int64_t i = 0; rc == 0 && i < right; i++) rc = jbuf_put(rt, &b, " ", 1);
    jv_decref(s);
    if (rc != 0) {
        jbuf_free(&b);
        return rc;
    }
    return jbuf_to_value(rt, &b, out);
}

static const char *const g_filters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "first", "float", "forceescape", "format", "indent", "int", "items", "join",
    "last", "length", "list", "lower", "map", "max", "min", "pprint", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum",
    "title", "tojson", "trim", "unique", "upper", "wordcount", NULL,
};

bool jf_has_filter(const char *name)
{
    for (size_t i = 0; g_filters[i]; i++) {
        if (!strcmp(g_filters[i], name)) return true;
    }
    return false;
}

int jf_filter(jrt *rt, const char *name, jv x, const jargs *a, jv *out)
{
    *out = jv_none();
    int rc = jrt_step(rt);
    if (rc != 0) return rc;
    if (!strcmp(name, "default") || !strcmp(name, "d")) return f_default(rt, x, a, out);
    if (!strcmp(name, "safe")) {
        if (x.kind == JV_STRING && JV_STR(x)->markup) {
            *out = jv_dup(x);
            return 0;
        }
        return to_markup(rt, x, false, out);
    }
    /* every other filter fails on an undefined value, except those that
     * treat it as empty (as Jinja2's Undefined is an empty string/iterable) */
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        int64_t n;
        rc = jv_length(rt, x, &n);
        if (rc == 0) *out = jv_int(n);
        return rc;
    }
    if (!strcmp(name, "tojson")) {
        if (x.kind == JV_UNDEFINED)
            return jrt_fail(rt, STRATA_EINVAL, "Object of type Undefined is not JSON serializable");
        return f_tojson(rt, x, a, out);
    }
    if (!strcmp(name, "trim")) return f_trim(rt, x, a, out);
    if (!strcmp(name, "upper")) return f_case(rt, x, 'u', out);
    if (!strcmp(name, "lower")) return f_case(rt, x, 'l', out);
    if (!strcmp(name, "title")) return f_case(rt, x, 'T', out);
    if (!strcmp(name, "capitalize")) return f_case(rt, x, 'c', out);
    if (!strcmp(name, "string")) return need_str(rt, x, "string", out);
    if (!strcmp(name, "items")) return f_items(rt, x, out);
    if (!strcmp(name, "join")) return f_join(rt, x, a, out);
    if (!strcmp(name, "replace")) return f_replace(rt, x, a, out);
    if (!strcmp(name, "first")) return f_first_last(rt, x, false, out);
    if (!strcmp(name, "last")) return f_first_last(rt, x, true, out);
    if (!strcmp(name, "list")) return jv_iterate(rt, x, out);
    if (!strcmp(name, "selectattr")) return f_select(rt, x, a, true, true, out);
    if (!strcmp(name, "rejectattr")) return f_select(rt, x, a, true, false, out);
    if (!strcmp(name, "select")) return f_select(rt, x, a, false, true, out);
    if (!strcmp(name, "reject")) return f_select(rt, x, a, false, false, out);
    if (!strcmp(name, "map")) return f_map(rt, x, a, out);
    if (!strcmp(name, "sort")) return f_sort(rt, x, a, out);
    if (!strcmp(name, "dictsort")) return f_dictsort(rt, x, a, out);
    if (!strcmp(name, "unique")) return f_unique(rt, x, a, out);
    if (!strcmp(name, "reverse")) return f_reverse(rt, x, out);
    if (!strcmp(name, "indent")) return f_indent(rt, x, a, out);
    if (!strcmp(name, "wordcount")) return f_wordcount(rt, x, out);
    if (!strcmp(name, "e") || !strcmp(name, "escape") || !strcmp(name, "forceescape")) {
        if (name[0] != 'f' && x.kind == JV_STRING && JV_STR(x)->markup) {
            *out = jv_dup(x);
            return 0;
        }
        return to_markup(rt, x, true, out);
    }
    if (!strcmp(name, "batch")) return f_batch(rt, x, a, out);
    if (!strcmp(name, "sum")) return f_sum(rt, x, a, out);
    if (!strcmp(name, "min")) return f_minmax(rt, x, a, false, out);
    if (!strcmp(name, "max")) return f_minmax(rt, x, a, true, out);
    if (!strcmp(name, "center")) return f_center(rt, x, a, out);
    if (x.kind == JV_UNDEFINED) {
        if (!jf_has_filter(name)) return jrt_fail(rt, STRATA_EINVAL, "no filter named '%s'", name);
        return jrt_fail(rt, STRATA_EINVAL, "'%s' is undefined", x.u.name ? x.u.name : "value");
    }
    if (!strcmp(name, "int")) return f_int(rt, x, a, out);
    if (!strcmp(name, "float")) return f_float(rt, x, a, out);
    if (!strcmp(name, "round")) return f_round(rt, x, a, out);
    if (!strcmp(name, "abs")) {
        if (x.kind == JV_FLOAT) *out = jv_float(fabs(x.u.f));
        else if (x.kind == JV_INT && x.u.i != INT64_MIN) *out = jv_int(x.u.i < 0 ? -x.u.i : x.u.i);
        else if (x.kind == JV_BOOL) *out = jv_int(x.u.b);
        else return jrt_fail(rt, STRATA_EINVAL, "bad operand type for abs(): '%s'", jv_type_name(x));
        return 0;
    }
    if (!strcmp(name, "format")) {
        if (x.kind != JV_STRING) return jrt_fail(rt, STRATA_EINVAL, "format needs a string");
        jv tup;
        rc = jv_new_list(rt, a->n_pos, &tup);
        if (rc != 0) return rc;
        JV_LIST_(tup)->is_tuple = true;
        for (size_t i = 0; rc == 0 && i < a->n_pos; i++) rc = jv_list_push(rt, tup, jv_dup(a->pos[i]));
        if (rc == 0) rc = jx_percent_format(rt, x, tup, out);
        jv_decref(tup);
        return rc;
    }
    if (!strcmp(name, "pprint")) {
        jbuf b = {0};
        rc = jv_write_repr(rt, &b, x, 0);
        if (rc != 0) {
            jbuf_free(&b);
            return rc;
        }
        return jbuf_to_value(rt, &b, out);
    }
    if (!strcmp(name, "attr")) {
        const jv_str *n;
        rc = arg_str(rt, a, 0, "name", &n);
        if (rc != 0) return rc;
        if (n == NULL) return jrt_fail(rt, STRATA_EINVAL, "attr needs a name");
        return jx_getattr_runtime(rt, x, n, out);
    }
    return jrt_fail(rt, STRATA_EINVAL, "no filter named '%s'", name);
}
