/* Jinja's operators on values, with Python's semantics: arithmetic (int
 * arithmetic is checked for overflow, / is true division, // and % floor
 * like Python's), `~` concatenation, comparisons and membership, slicing
 * with negative indexes and steps, `str % args`, and markupsafe's rule
 * that adding a plain string to a Markup one escapes it. */
#include "text/jinja_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Python's slice.indices(): start, stop, step for a sequence of n. */
static int slice_indices(jrt *rt, jv a, jv b, jv c, size_t n, int64_t *start, int64_t *stop,
                         int64_t *step)
{
    const jv parts[3] = {a, b, c};
    for (int k = 0; k < 3; k++) {
        jv p = parts[k];
        if (p.kind != JV_NONE && p.kind != JV_UNDEFINED && p.kind != JV_INT && p.kind != JV_BOOL)
            return jrt_fail(rt, STRATA_EINVAL, "slice indices must be integers or None");
    }
    int64_t len = (int64_t)n;
    *step = (c.kind == JV_INT) ? c.u.i : (c.kind == JV_BOOL) ? c.u.b : 1;
    if (*step == 0) return jrt_fail(rt, STRATA_EINVAL, "slice step cannot be zero");
    if (*step == INT64_MIN) *step = -INT64_MAX;
    int64_t lo = *step < 0 ? -1 : 0, hi = *step < 0 ? len - 1 : len;
    int64_t v[2];
    for (int k = 0; k < 2; k++) {
        jv p = parts[k];
        if (p.kind == JV_INT || p.kind == JV_BOOL) {
            int64_t x = p.kind == JV_BOOL ? p.u.b : p.u.i;
            if (x < 0) {
                x = x < -len ? lo : x + len;
                if (x < lo) x = lo;
            } else if (x > hi) {
                x = hi;
            }
            v[k] = x;
        } else {
            v[k] = k == 0 ? (*step < 0 ? hi : lo) : (*step < 0 ? lo : hi);
        }
    }
    *start = v[0];
    *stop = v[1];
    return 0;
}

int jx_slice(jrt *rt, jv obj, jv a, jv b, jv c, jv *out)
{
    if (obj.kind == JV_UNDEFINED) return jrt_undefined(rt, obj);
    int64_t start, stop, step;
    if (obj.kind == JV_LIST) {
        jv_list *l = JV_LIST_(obj);
        int rc = slice_indices(rt, a, b, c, l->n, &start, &stop, &step);
        if (rc == 0) rc = jv_new_list(rt, 0, out);
        if (rc != 0) return rc;
        JV_LIST_(*out)->is_tuple = l->is_tuple;
        for (int64_t i = start; rc == 0 && (step > 0 ? i < stop : i > stop); i += step) {
            rc = jv_list_push(rt, *out, jv_dup(l->items[i]));
            if (step > 0 ? i > INT64_MAX - step : i < INT64_MIN - step) break;
        }
        return rc;
    }
    if (obj.kind == JV_STRING) {
        jv_str *s = JV_STR(obj);
        size_t n = jstr_n_chars(s->s, s->len);
        int rc = slice_indices(rt, a, b, c, n, &start, &stop, &step);
        if (rc != 0) return rc;
        if (n == s->len) { /* ASCII: bytes are characters */
            if (step == 1) return jv_new_str(rt, s->s + start, stop > start ? (size_t)(stop - start) : 0, out);
            jbuf buf = {0};
            for (int64_t i = start; rc == 0 && (step > 0 ? i < stop : i > stop); i += step) {
                rc = jbuf_put(rt, &buf, s->s + i, 1);
                if (step > 0 ? i > INT64_MAX - step : i < INT64_MIN - step) break;
            }
            if (rc != 0) {
                jbuf_free(&buf);
                return rc;
            }
            return jbuf_to_value(rt, &buf, out);
        }
        /* offsets of every character, then pick */
        size_t *offs = malloc((n + 1) * sizeof(size_t));
        if (offs == NULL) return jrt_fail(rt, STRATA_ENOMEM, "out of memory");
        for (size_t i = 0, off = 0; i <= n; i++) {
            offs[i] = off;
            if (i < n) off += jstr_char_offset(s->s + off, s->len - off, 1);
        }
        jbuf buf = {0};
        for (int64_t i = start; rc == 0 && (step > 0 ? i < stop : i > stop); i += step) {
            rc = jbuf_put(rt, &buf, s->s + offs[i], offs[i + 1] - offs[i]);
            if (step > 0 ? i > INT64_MAX - step : i < INT64_MIN - step) break;
        }
        free(offs);
        if (rc != 0) {
            jbuf_free(&buf);
            return rc;
        }
        return jbuf_to_value(rt, &buf, out);
    }
    return jrt_fail(rt, STRATA_EINVAL, "'%s' object is not subscriptable", jv_type_name(obj));
}

/* ------------------------------------------------------------------ */
/* operators                                                           */

static int type_error(jrt *rt, const char *op, jv a, jv b)
{
    return jrt_fail(rt, STRATA_EINVAL, "unsupported operand type(s) for %s: '%s' and '%s'", op,
                    jv_type_name(a), jv_type_name(b));
}

static int64_t as_int(jv v) { return v.kind == JV_BOOL ? (int64_t)v.u.b : v.u.i; }
static double as_double(jv v)
{
    return v.kind == JV_FLOAT ? v.u.f : (double)as_int(v);
}

static int repeat_seq(jrt *rt, jv seq, int64_t times, jv *out)
{
    if (seq.kind == JV_STRING) {
        jv_str *s = JV_STR(seq);
        if (times <= 0 || s->len == 0) return jv_new_str(rt, "", 0, out);
        if ((uint64_t)times > rt->heap.max_bytes / s->len)
            return jrt_fail(rt, STRATA_ERANGE, "template uses more than %zu bytes of memory",
                            rt->heap.max_bytes);
        size_t total = s->len * (size_t)times;
        rt->steps += total >> 8;
        int rc = jrt_step(rt);
        if (rc == 0) rc = jv_new_str(rt, NULL, total, out);
        if (rc != 0) return rc;
        JV_STR(*out)->markup = s->markup;
        /* fill by doubling what is already there */
        char *d = JV_STR(*out)->s;
        memcpy(d, s->s, s->len);
        for (size_t have = s->len; have < total;) {
            size_t k = have < total - have ? have : total - have;
            memcpy(d + have, d, k);
            have += k;
        }
        return 0;
    }
    jv_list *l = JV_LIST_(seq);
    int rc = jv_new_list(rt, 0, out);
    if (rc != 0) return rc;
    JV_LIST_(*out)->is_tuple = l->is_tuple;
    /* every push is a step, so the budget bounds this loop (l->n > 0) */
    for (int64_t t = 0; rc == 0 && l->n > 0 && t < times; t++) {
        for (size_t i = 0; rc == 0 && i < l->n; i++) rc = jv_list_push(rt, *out, jv_dup(l->items[i]));
    }
    return rc;
}

/* printf-style str % args for the conversions templates use. */
int jx_percent_format(jrt *rt, jv fmt, jv args, jv *out)
{
    const jv_str *f = JV_STR(fmt);
    const jv *argv = &args;
    size_t argc = 1, next = 0;
    if (args.kind == JV_LIST && JV_LIST_(args)->is_tuple) {
        argv = JV_LIST_(args)->items;
        argc = JV_LIST_(args)->n;
    }
    jbuf buf = {0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < f->len; i++) {
        if (f->s[i] != '%') {
            rc = jbuf_put(rt, &buf, f->s + i, 1);
            continue;
        }
        if (++i >= f->len) {
            rc = jrt_fail(rt, STRATA_EINVAL, "incomplete format");
            break;
        }
        char c = f->s[i];
        if (c == '%') {
            rc = jbuf_put(rt, &buf, "%", 1);
            continue;
        }
        if (next >= argc) {
            rc = jrt_fail(rt, STRATA_EINVAL, "not enough arguments for format string");
            break;
        }
        jv a = argv[next++];
        char tmp[64];
        switch (c) {
        case 's': rc = jv_write_str(rt, &buf, a); break;
        case 'r': rc = jv_write_repr(rt, &buf, a, 0); break;
        case 'd':
        case 'i':
            if (!jv_is_number(a)) {
                rc = jrt_fail(rt, STRATA_EINVAL, "%%d format: a number is required, not %s", jv_type_name(a));
                break;
            }
            if (a.kind == JV_FLOAT && !(fabs(a.u.f) < 9.2e18)) {
                rc = jrt_fail(rt, STRATA_ERANGE, "%%d format: number out of range");
                break;
            }
            snprintf(tmp, sizeof(tmp), "%" PRId64,
                     a.kind == JV_FLOAT ? (int64_t)trunc(a.u.f) : as_int(a));
            rc = jbuf_put(rt, &buf, tmp, strlen(tmp));
            break;
        case 'f':
            if (!jv_is_number(a)) {
                rc = jrt_fail(rt, STRATA_EINVAL, "%%f format: a number is required, not %s", jv_type_name(a));
                break;
            }
            snprintf(tmp, sizeof(tmp), "%f", as_double(a));
            rc = jbuf_put(rt, &buf, tmp, strlen(tmp));
            break;
        default:
            rc = jrt_fail(rt, STRATA_EUNSUPPORTED, "unsupported format character '%c'", c);
        }
    }
    /* Python lets a mapping or any other subscriptable non-string through */
    if (rc == 0 && next < argc && !jv_is_dict(args) &&
        !(args.kind == JV_LIST && !JV_LIST_(args)->is_tuple))
        rc = jrt_fail(rt, STRATA_EINVAL, "not all arguments converted during string formatting");
    if (rc != 0) {
        jbuf_free(&buf);
        return rc;
    }
    return jbuf_to_value(rt, &buf, out);
}

int jx_arith(jrt *rt, int op, jv a, jv b, jv *out)
{
    static const char *names[] = {[JOP_ADD] = "+", [JOP_SUB] = "-", [JOP_MUL] = "*",
                                  [JOP_DIV] = "/", [JOP_FLOORDIV] = "//", [JOP_MOD] = "%",
                                  [JOP_POW] = "**", [JOP_TILDE] = "~"};
    if (op == JOP_TILDE) {
        jbuf buf = {0};
        int rc = jv_write_str(rt, &buf, a);
        if (rc == 0) rc = jv_write_str(rt, &buf, b);
        if (rc != 0) {
            jbuf_free(&buf);
            return rc;
        }
        return jbuf_to_value(rt, &buf, out);
    }
    if (a.kind == JV_UNDEFINED) return jrt_undefined(rt, a);
    if (b.kind == JV_UNDEFINED) return jrt_undefined(rt, b);
    bool nums = jv_is_number(a) && jv_is_number(b);
    bool ints = nums && a.kind != JV_FLOAT && b.kind != JV_FLOAT;
    int64_t x = ints ? as_int(a) : 0, y = ints ? as_int(b) : 0, r;
    switch (op) {
    case JOP_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &r)) return jrt_fail(rt, STRATA_ERANGE, "integer overflow");
            *out = jv_int(r);
            return 0;
        }
        if (nums) {
            *out = jv_float(as_double(a) + as_double(b));
            return 0;
        }
        if (a.kind == JV_STRING && b.kind == JV_STRING) {
            /* Markup + str escapes the str (Python's markupsafe); the result is Markup */
            bool ma = JV_STR(a)->markup, mb = JV_STR(b)->markup;
            jbuf buf = {0};
            int rc = (mb && !ma) ? jstr_escape_html(rt, &buf, JV_STR(a)->s, JV_STR(a)->len)
                                 : jbuf_put(rt, &buf, JV_STR(a)->s, JV_STR(a)->len);
            if (rc == 0)
                rc = (ma && !mb) ? jstr_escape_html(rt, &buf, JV_STR(b)->s, JV_STR(b)->len)
                                 : jbuf_put(rt, &buf, JV_STR(b)->s, JV_STR(b)->len);
            if (rc != 0) {
                jbuf_free(&buf);
                return rc;
            }
            rc = jbuf_to_value(rt, &buf, out);
            if (rc == 0) JV_STR(*out)->markup = ma || mb;
            return rc;
        }
        if (a.kind == JV_LIST && b.kind == JV_LIST &&
            JV_LIST_(a)->is_tuple == JV_LIST_(b)->is_tuple) {
            int rc = jv_new_list(rt, 0, out);
            if (rc != 0) return rc;
            JV_LIST_(*out)->is_tuple = JV_LIST_(a)->is_tuple;
            for (size_t i = 0; rc == 0 && i < JV_LIST_(a)->n; i++)
                rc = jv_list_push(rt, *out, jv_dup(JV_LIST_(a)->items[i]));
            for (size_t i = 0; rc == 0 && i < JV_LIST_(b)->n; i++)
                rc = jv_list_push(rt, *out, jv_dup(JV_LIST_(b)->items[i]));
            return rc;
        }
        if (a.kind == JV_STRING)
            return jrt_fail(rt, STRATA_EINVAL, "can only concatenate str (not \"%s\") to str",
                            jv_type_name(b));
        break;
    case JOP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &r)) return jrt_fail(rt, STRATA_ERANGE, "integer overflow");
            *out = jv_int(r);
            return 0;
        }
        if (nums) {
            *out = jv_float(as_double(a) - as_double(b));
            return 0;
        }
        break;
    case JOP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &r)) return jrt_fail(rt, STRATA_ERANGE, "integer overflow");
            *out = jv_int(r);
            return 0;
        }
        if (nums) {
            *out = jv_float(as_double(a) * as_double(b));
            return 0;
        }
        if ((a.kind == JV_STRING || a.kind == JV_LIST) && (b.kind == JV_INT || b.kind == JV_BOOL))
            return repeat_seq(rt, a, as_int(b), out);
        if ((b.kind == JV_STRING || b.kind == JV_LIST) && (a.kind == JV_INT || a.kind == JV_BOOL))
            return repeat_seq(rt, b, as_int(a), out);
        break;
    case JOP_DIV:
        if (nums) {
            if (as_double(b) == 0.0) return jrt_fail(rt, STRATA_EINVAL, "division by zero");
            *out = jv_float(as_double(a) / as_double(b));
            return 0;
        }
        break;
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (ints) {
            if (y == 0) return jrt_fail(rt, STRATA_EINVAL, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == JOP_MOD) {
                    *out = jv_int(0);
                    return 0;
                }
                return jrt_fail(rt, STRATA_ERANGE, "integer overflow");
            }
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q -= 1;
                m += y;
            }
            *out = jv_int(op == JOP_FLOORDIV ? q : m);
            return 0;
        }
        if (nums) {
            double p = as_double(a), d = as_double(b);
            if (d == 0.0) return jrt_fail(rt, STRATA_EINVAL, "float division or modulo by zero");
            if (op == JOP_FLOORDIV) {
                *out = jv_float(floor(p / d));
            } else {
                double m = fmod(p, d);
                if (m != 0.0 && ((m < 0) != (d < 0))) m += d;
                *out = jv_float(m);
            }
            return 0;
        }
        if (op == JOP_MOD && a.kind == JV_STRING) return jx_percent_format(rt, a, b, out);
        break;
    case JOP_POW:
        if (ints && y >= 0) {
            int64_t acc = 1, base = x, e = y;
            while (e > 0) {
                if (e & 1) {
                    if (__builtin_mul_overflow(acc, base, &acc))
                        return jrt_fail(rt, STRATA_ERANGE, "integer overflow");
                }
                e >>= 1;
                if (e > 0 && __builtin_mul_overflow(base, base, &base))
                    return jrt_fail(rt, STRATA_ERANGE, "integer overflow");
            }
            *out = jv_int(acc);
            return 0;
        }
        if (nums) {
            double p = as_double(a), d = as_double(b);
            if (p == 0.0 && d < 0) return jrt_fail(rt, STRATA_EINVAL, "0.0 cannot be raised to a negative power");
            *out = jv_float(pow(p, d));
            return 0;
        }
        break;
    default: break;
    }
    return type_error(rt, op < (int)(sizeof(names) / sizeof(names[0])) && names[op] ? names[op] : "?", a, b);
}

/* `needle in hay` */
static int contains(jrt *rt, jv hay, jv needle, bool *out)
{
    switch (hay.kind) {
    case JV_UNDEFINED: *out = false; return 0;
    case JV_STRING:
        if (needle.kind != JV_STRING)
            return jrt_fail(rt, STRATA_EINVAL, "'in <string>' requires string as left operand, not %s",
                            jv_type_name(needle));
        if (JV_STR(needle)->len == 0) {
            *out = true;
            return 0;
        }
        *out = jstr_find(JV_STR(hay)->s, JV_STR(hay)->len, JV_STR(needle)->s, JV_STR(needle)->len) != NULL;
        return 0;
    case JV_LIST: {
        jv_list *l = JV_LIST_(hay);
        *out = false;
        for (size_t i = 0; i < l->n && !*out; i++) *out = jv_equal(l->items[i], needle);
        return 0;
    }
    case JV_DICT:
    case JV_NAMESPACE:
        if (needle.kind == JV_DICT || needle.kind == JV_NAMESPACE ||
            (needle.kind == JV_LIST && !JV_LIST_(needle)->is_tuple))
            return jrt_fail(rt, STRATA_EINVAL, "unhashable type: '%s'", jv_type_name(needle));
        *out = jv_dict_get(hay, needle) != NULL;
        return 0;
    default:
        return jrt_fail(rt, STRATA_EINVAL, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

int jx_compare(jrt *rt, int op, jv a, jv b, bool *out)
{
    switch (op) {
    case JOP_EQ: *out = jv_equal(a, b); return 0;
    case JOP_NE: *out = !jv_equal(a, b); return 0;
    case JOP_IN: return contains(rt, b, a, out);
    case JOP_NOTIN: {
        int rc = contains(rt, b, a, out);
        *out = !*out;
        return rc;
    }
    default: break;
    }
    if (a.kind == JV_UNDEFINED) return jrt_undefined(rt, a);
    if (b.kind == JV_UNDEFINED) return jrt_undefined(rt, b);
    if ((jv_is_number(a) && a.kind == JV_FLOAT && isnan(a.u.f)) ||
        (jv_is_number(b) && b.kind == JV_FLOAT && isnan(b.u.f))) {
        *out = false;
        return 0;
    }
    int c;
    int rc = jv_compare(rt, a, b, false, &c);
    if (rc != 0) return rc;
    switch (op) {
    case JOP_LT: *out = c < 0; break;
    case JOP_LE: *out = c <= 0; break;
    case JOP_GT: *out = c > 0; break;
    default: *out = c >= 0; break;
    }
    return 0;
}
