/* Python methods that chat templates call on values (str.strip, str.split,
 * dict.get, list.append...) and the global functions of the Hugging Face
 * environment: range, dict, namespace, raise_exception, strftime_now.
 *
 * Unlike Hugging Face's ImmutableSandboxedEnvironment, list.append/pop and
 * dict.update/pop are allowed: some templates use them to keep state and
 * other engines (llama.cpp's) accept them too. */
#include "text/jinja_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

static const char *const g_str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper",
    "lower", "title", "capitalize", "replace", "find", "rfind", "index", "rindex", "count",
    "join", "splitlines", "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower",
    "format", "removeprefix", "removesuffix", NULL,
};
static const char *const g_list_methods[] = {
    "append", "pop", "insert", "extend", "index", "count", "remove", "reverse", "copy", NULL,
};
static const char *const g_dict_methods[] = {
    "get", "items", "keys", "values", "pop", "update", "copy", "setdefault", NULL,
};

static const char *find_name(const char *const *names, const char *name, size_t len)
{
    for (size_t i = 0; names[i]; i++) {
        if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0) return names[i];
    }
    return NULL;
}

const char *jm_method_name(jv obj, const char *name, size_t len)
{
    switch (obj.kind) {
    case JV_STRING: return find_name(g_str_methods, name, len);
    case JV_LIST: return JV_LIST_(obj)->is_tuple ? NULL : find_name(g_list_methods, name, len);
    case JV_DICT: return find_name(g_dict_methods, name, len);
    default: return NULL;
    }
}

static int need_args(jrt *rt, const jargs *a, const char *what, size_t lo, size_t hi)
{
    if (a->n_pos < lo || a->n_pos > hi || a->n_kw > 0) {
        if (lo == hi) return jrt_fail(rt, STRATA_EINVAL, "%s() takes %zu argument(s)", what, lo);
        return jrt_fail(rt, STRATA_EINVAL, "%s() takes %zu to %zu arguments", what, lo, hi);
    }
    return 0;
}

static int str_arg(jrt *rt, jv v, const char *what)
{
    if (v.kind != JV_STRING)
        return jrt_fail(rt, STRATA_EINVAL, "%s() argument must be str, not %s", what, jv_type_name(v));
    return 0;
}

/* ------------------------------------------------------------------ */
/* str                                                                 */

static int str_split(jrt *rt, const jv_str *s, const jargs *a, bool from_right, jv *out)
{
    jv sepv = jv_none(), maxv = jv_int(-1);
    jargs_get(a, 0, "sep", &sepv);
    jargs_get(a, 1, "maxsplit", &maxv);
    if (sepv.kind != JV_NONE && sepv.kind != JV_STRING)
        return jrt_fail(rt, STRATA_EINVAL, "split: sep must be a string or None");
    if (maxv.kind != JV_INT) return jrt_fail(rt, STRATA_EINVAL, "split: maxsplit must be an integer");
    int64_t maxsplit = maxv.u.i;
    int rc = jv_new_list(rt, 0, out);
    if (rc != 0) return rc;
    if (sepv.kind == JV_STRING) {
        const jv_str *sep = JV_STR(sepv);
        if (sep->len == 0) return jrt_fail(rt, STRATA_EINVAL, "empty separator");
        /* positions of the separators used, left to right */
        size_t n_hits = 0, cap = 16;
        size_t *hits = malloc(cap * sizeof(size_t));
        if (hits == NULL) return jrt_fail(rt, STRATA_ENOMEM, "out of memory");
        for (size_t i = 0; i + sep->len <= s->len;) {
            const char *h = jstr_find(s->s + i, s->len - i, sep->s, sep->len);
            if (h == NULL) break;
            if (n_hits == cap) {
                cap *= 2;
                size_t *nh = realloc(hits, cap * sizeof(size_t));
                if (nh == NULL) {
                    free(hits);
                    return jrt_fail(rt, STRATA_ENOMEM, "out of memory");
                }
                hits = nh;
            }
            hits[n_hits++] = (size_t)(h - s->s);
            i = (size_t)(h - s->s) + sep->len;
        }
        size_t first = 0, used = n_hits;
        if (maxsplit >= 0 && (uint64_t)maxsplit < n_hits) {
            used = (size_t)maxsplit;
            if (from_right) first = n_hits - used;
        }
        size_t start = 0;
        for (size_t k = first; rc == 0 && k < first + used; k++) {
            jv piece;
            size_t from = (k == first) ? (from_right ? 0 : start) : start;
            rc = jv_new_str(rt, s->s + from, hits[k] - from, &piece);
            if (rc == 0) rc = jv_list_push(rt, *out, piece);
            start = hits[k] + sep->len;
        }
        if (rc == 0) {
            jv piece;
            rc = jv_new_str(rt, s->s + start, s->len - start, &piece);
            if (rc == 0) rc = jv_list_push(rt, *out, piece);
        }
        free(hits);
        return rc;
    }
    /* runs of whitespace; ends ignored */
    if (!from_right) {
        size_t i = 0, n = 0;
        while (rc == 0) {
            size_t k;
            while (i < s->len && jstr_is_space_at(s->s, s->len, i, &k)) i += k;
            if (i >= s->len) break;
            size_t start = i;
            if (maxsplit >= 0 && (int64_t)n >= maxsplit) {
                /* the rest, as it is (Python keeps its trailing whitespace) */
                jv piece;
                rc = jv_new_str(rt, s->s + start, s->len - start, &piece);
                if (rc == 0) rc = jv_list_push(rt, *out, piece);
                break;
            }
            while (i < s->len && !jstr_is_space_at(s->s, s->len, i, &k)) i += k;
            jv piece;
            rc = jv_new_str(rt, s->s + start, i - start, &piece);
            if (rc == 0) rc = jv_list_push(rt, *out, piece);
            n++;
        }
        return rc;
    }
    /* rsplit on whitespace: split fully, then rejoin the head if limited */
    jargs all = {0};
    jv parts;
    rc = str_split(rt, s, &all, false, &parts);
    if (rc != 0) return rc;
    jv_list *l = JV_LIST_(parts);
    if (maxsplit < 0 || (uint64_t)maxsplit + 1 >= l->n) {
        jv_decref(*out);
        *out = parts;
        return 0;
    }
    /* the head is the text up to the start of the last maxsplit words */
    size_t keep = (size_t)maxsplit, head_end = s->len;
    size_t count = 0, i = s->len;
    while (i > 0 && count < keep) {
        size_t k;
        while (i > 0 && jstr_is_space_at(s->s, s->len, i - 1, &k)) i--;
        while (i > 0 && !jstr_is_space_at(s->s, s->len, i - 1, &k)) i--;
        count++;
    }
    head_end = i;
    size_t b, e;
    jstr_strip(s->s, head_end, NULL, 0, 'b', &b, &e);
    jv head;
    rc = jv_new_str(rt, s->s + b, e - b, &head);
    if (rc == 0) rc = jv_list_push(rt, *out, head);
    for (size_t k = l->n - keep; rc == 0 && k < l->n; k++) rc = jv_list_push(rt, *out, jv_dup(l->items[k]));
    jv_decref(parts);
    return rc;
}

static bool affix_match(const jv_str *s, const jv_str *p, bool suffix)
{
    if (p->len > s->len) return false;
    return memcmp(s->s + (suffix ? s->len - p->len : 0), p->s, p->len) == 0;
}

static int str_affix(jrt *rt, const jv_str *s, const jargs *a, bool suffix, const char *what, jv *out)
{
    int rc = need_args(rt, a, what, 1, 1);
    if (rc != 0) return rc;
    jv p = a->pos[0];
    if (p.kind == JV_STRING) {
        *out = jv_bool(affix_match(s, JV_STR(p), suffix));
        return 0;
    }
    if (p.kind == JV_LIST && JV_LIST_(p)->is_tuple) {
        bool r = false;
        for (size_t i = 0; i < JV_LIST_(p)->n && !r; i++) {
            jv x = JV_LIST_(p)->items[i];
            if (x.kind != JV_STRING) return str_arg(rt, x, what);
            r = affix_match(s, JV_STR(x), suffix);
        }
        *out = jv_bool(r);
        return 0;
    }
    return jrt_fail(rt, STRATA_EINVAL, "%s first arg must be str or a tuple of str, not %s", what,
                    jv_type_name(p));
}

/* Byte offset of the first (or last) occurrence of sub at or after start,
 * -1 if none. start/end are character positions (Python's semantics). */
static int64_t str_find(const jv_str *s, const jv_str *sub, bool last)
{
    if (sub->len > s->len) return -1;
    if (!last) {
        const char *h = sub->len ? jstr_find(s->s, s->len, sub->s, sub->len) : s->s;
        return h ? (int64_t)(h - s->s) : -1;
    }
    for (size_t i = s->len - sub->len + 1; i-- > 0;) {
        if (memcmp(s->s + i, sub->s, sub->len) == 0) return (int64_t)i;
    }
    return -1;
}

static int str_format_method(jrt *rt, const jv_str *f, const jargs *a, jv *out)
{
    jbuf b = {0};
    int rc = 0;
    size_t auto_idx = 0;
    for (size_t i = 0; rc == 0 && i < f->len; i++) {
        char c = f->s[i];
        if (c == '}' && i + 1 < f->len && f->s[i + 1] == '}') {
            rc = jbuf_put(rt, &b, "}", 1);
            i++;
            continue;
        }
        if (c != '{') {
            rc = jbuf_put(rt, &b, &c, 1);
            continue;
        }
        if (i + 1 < f->len && f->s[i + 1] == '{') {
            rc = jbuf_put(rt, &b, "{", 1);
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < f->len && f->s[j] != '}') j++;
        if (j >= f->len) {
            rc = jrt_fail(rt, STRATA_EINVAL, "format: single '{' encountered");
            break;
        }
        const char *field = f->s + i + 1;
        size_t flen = j - i - 1;
        if (memchr(field, ':', flen) || memchr(field, '!', flen)) {
            rc = jrt_fail(rt, STRATA_EUNSUPPORTED, "format: conversions and format specs are not supported");
            break;
        }
        jv v;
        bool found;
        if (flen == 0) {
            found = auto_idx < a->n_pos;
            if (found) v = a->pos[auto_idx++];
        } else if (field[0] >= '0' && field[0] <= '9') {
            size_t idx = (size_t)strtoul(field, NULL, 10);
            found = idx < a->n_pos;
            if (found) v = a->pos[idx];
        } else {
            found = false;
            for (size_t k = 0; k < a->n_kw && !found; k++) {
                if (strlen(a->kwnames[k]) == flen && !memcmp(a->kwnames[k], field, flen)) {
                    v = a->kw[k];
                    found = true;
                }
            }
        }
        if (!found) {
            rc = jrt_fail(rt, STRATA_EINVAL, "format: no value for field '%.*s'", (int)flen, field);
            break;
        }
        rc = jv_write_str(rt, &b, v);
        i = j;
    }
    if (rc != 0) {
        jbuf_free(&b);
        return rc;
    }
    return jbuf_to_value(rt, &b, out);
}

static bool str_all(const jv_str *s, int kind)
{
    if (s->len == 0) return false;
    for (size_t i = 0; i < s->len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s->s + i,
                                              (utf8proc_ssize_t)(s->len - i), &cp);
        if (k <= 0) return false;
        utf8proc_category_t c = utf8proc_category(cp);
        bool alpha = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
        bool digit = c == UTF8PROC_CATEGORY_ND;
        size_t n;
        bool ok = kind == 'd' ? digit : kind == 'a' ? alpha : kind == 'n' ? (alpha || digit)
                : jstr_is_space_at(s->s, s->len, i, &n);
        if (!ok) return false;
        i += (size_t)k;
    }
    return true;
}

static int call_str(jrt *rt, jv obj, const char *name, const jargs *a, jv *out)
{
    const jv_str *s = JV_STR(obj);
    int rc;
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        rc = need_args(rt, a, name, 0, 1);
        if (rc != 0) return rc;
        const jv_str *chars = NULL;
        if (a->n_pos == 1 && a->pos[0].kind != JV_NONE) {
            if ((rc = str_arg(rt, a->pos[0], name)) != 0) return rc;
            chars = JV_STR(a->pos[0]);
        }
        size_t b, e;
        jstr_strip(s->s, s->len, chars ? chars->s : NULL, chars ? chars->len : 0,
                   name[0] == 's' ? 'b' : name[0], &b, &e);
        return jv_new_str(rt, s->s + b, e - b, out);
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) return str_split(rt, s, a, name[0] == 'r', out);
    if (!strcmp(name, "startswith")) return str_affix(rt, s, a, false, name, out);
    if (!strcmp(name, "endswith")) return str_affix(rt, s, a, true, name, out);
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") ||
        !strcmp(name, "capitalize")) {
        if ((rc = need_args(rt, a, name, 0, 0)) != 0) return rc;
        jbuf b = {0};
        rc = jstr_case(rt, &b, s->s, s->len, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 't' ? 't' : 'c');
        if (rc != 0) {
            jbuf_free(&b);
            return rc;
        }
        return jbuf_to_value(rt, &b, out);
    }
    if (!strcmp(name, "replace")) {
        if ((rc = need_args(rt, a, name, 2, 3)) != 0) return rc;
        if ((rc = str_arg(rt, a->pos[0], name)) != 0 || (rc = str_arg(rt, a->pos[1], name)) != 0) return rc;
        if (a->n_pos == 3 && a->pos[2].kind != JV_INT)
            return jrt_fail(rt, STRATA_EINVAL, "replace() count must be an integer");
        return jf_filter(rt, "replace", obj, a, out);
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") ||
        !strcmp(name, "rindex") || !strcmp(name, "count")) {
        if ((rc = need_args(rt, a, name, 1, 1)) != 0) return rc;
        if ((rc = str_arg(rt, a->pos[0], name)) != 0) return rc;
        const jv_str *sub = JV_STR(a->pos[0]);
        if (!strcmp(name, "count")) {
            int64_t n = 0;
            if (sub->len == 0) {
                n = (int64_t)jstr_n_chars(s->s, s->len) + 1;
            } else {
                for (size_t i = 0; i + sub->len <= s->len;) {
                    const char *h = jstr_find(s->s + i, s->len - i, sub->s, sub->len);
                    if (h == NULL) break;
                    n++;
                    i = (size_t)(h - s->s) + sub->len;
                }
            }
            *out = jv_int(n);
            return 0;
        }
        int64_t at = str_find(s, sub, name[0] == 'r');
        if (at < 0 && (!strcmp(name, "index") || !strcmp(name, "rindex")))
            return jrt_fail(rt, STRATA_EINVAL, "substring not found");
        /* byte offset to character index */
        *out = jv_int(at < 0 ? -1 : (int64_t)jstr_n_chars(s->s, (size_t)at));
        return 0;
    }
    if (!strcmp(name, "join")) {
        if ((rc = need_args(rt, a, name, 1, 1)) != 0) return rc;
        jv items;
        rc = jv_iterate(rt, a->pos[0], &items);
        if (rc != 0) return rc;
        jbuf b = {0};
        jv_list *l = JV_LIST_(items);
        for (size_t i = 0; rc == 0 && i < l->n; i++) {
            if (l->items[i].kind != JV_STRING) {
                rc = jrt_fail(rt, STRATA_EINVAL, "sequence item %zu: expected str instance, %s found", i,
                              jv_type_name(l->items[i]));
                break;
            }
            if (i > 0) rc = jbuf_put(rt, &b, s->s, s->len);
            if (rc == 0) rc = jbuf_put(rt, &b, JV_STR(l->items[i])->s, JV_STR(l->items[i])->len);
        }
        jv_decref(items);
        if (rc != 0) {
            jbuf_free(&b);
            return rc;
        }
        return jbuf_to_value(rt, &b, out);
    }
    if (!strcmp(name, "splitlines")) {
        if ((rc = need_args(rt, a, name, 0, 0)) != 0) return rc;
        rc = jv_new_list(rt, 0, out);
        size_t start = 0;
        for (size_t i = 0; rc == 0 && i < s->len;) {
            size_t br = 0;
            char c = s->s[i];
            if (c == '\r') br = (i + 1 < s->len && s->s[i + 1] == '\n') ? 2 : 1;
            else if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) br = 1;
            if (br == 0) {
                i++;
                continue;
            }
            jv piece;
            rc = jv_new_str(rt, s->s + start, i - start, &piece);
            if (rc == 0) rc = jv_list_push(rt, *out, piece);
            i += br;
            start = i;
        }
        if (rc == 0 && start < s->len) {
            jv piece;
            rc = jv_new_str(rt, s->s + start, s->len - start, &piece);
            if (rc == 0) rc = jv_list_push(rt, *out, piece);
        }
        return rc;
    }
    if (!strcmp(name, "isdigit") || !strcmp(name, "isalpha") || !strcmp(name, "isalnum") ||
        !strcmp(name, "isspace")) {
        if ((rc = need_args(rt, a, name, 0, 0)) != 0) return rc;
        int kind = name[2] == 'd' ? 'd' : name[2] == 's' ? 's' : name[4] == 'n' ? 'n' : 'a';
        *out = jv_bool(str_all(s, kind));
        return 0;
    }
    if (!strcmp(name, "isupper") || !strcmp(name, "islower")) {
        if ((rc = need_args(rt, a, name, 0, 0)) != 0) return rc;
        bool r;
        jargs none = {0};
        rc = jf_test(rt, name[2] == 'u' ? "upper" : "lower", obj, &none, &r);
        if (rc == 0) *out = jv_bool(r);
        return rc;
    }
    if (!strcmp(name, "format")) return str_format_method(rt, s, a, out);
    if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
        if ((rc = need_args(rt, a, name, 1, 1)) != 0) return rc;
        if ((rc = str_arg(rt, a->pos[0], name)) != 0) return rc;
        const jv_str *p = JV_STR(a->pos[0]);
        bool suffix = name[6] == 's';
        if (!affix_match(s, p, suffix)) {
            *out = jv_dup(obj);
            return 0;
        }
        return jv_new_str(rt, s->s + (suffix ? 0 : p->len), s->len - p->len, out);
    }
    return 1;
}

/* ------------------------------------------------------------------ */
/* list, dict                                                          */

static int call_list(jrt *rt, jv obj, const char *name, const jargs *a, jv *out)
{
    jv_list *l = JV_LIST_(obj);
    int rc;
    if (!strcmp(name, "append")) {
        if ((rc = need_args(rt, a, name, 1, 1)) != 0) return rc;
        *out = jv_none();
        return jv_list_push(rt, obj, jv_dup(a->pos[0]));
    }
    if (!strcmp(name, "pop")) {
        if ((rc = need_args(rt, a, name, 0, 1)) != 0) return rc;
        int64_t i = -1;
        if (a->n_pos == 1) {
            if (a->pos[0].kind != JV_INT) return jrt_fail(rt, STRATA_EINVAL, "pop() index must be an integer");
            i = a->pos[0].u.i;
        }
        if (l->n == 0) return jrt_fail(rt, STRATA_EINVAL, "pop from empty list");
        if (i < 0) i += (int64_t)l->n;
        if (i < 0 || (uint64_t)i >= l->n) return jrt_fail(rt, STRATA_EINVAL, "pop index out of range");
        *out = l->items[i];
        memmove(&l->items[i], &l->items[i + 1], (l->n - (size_t)i - 1) * sizeof(jv));
        l->n--;
        return 0;
    }
    if (!strcmp(name, "insert")) {
        if ((rc = need_args(rt, a, name, 2, 2)) != 0) return rc;
        if (a->pos[0].kind != JV_INT) return jrt_fail(rt, STRATA_EINVAL, "insert() index must be an integer");
        int64_t i = a->pos[0].u.i;
        if (i < 0) i += (int64_t)l->n;
        if (i < 0) i = 0;
        if ((uint64_t)i > l->n) i = (int64_t)l->n;
        rc = jv_list_push(rt, obj, jv_dup(a->pos[1]));
        if (rc != 0) return rc;
        jv v = l->items[l->n - 1];
        memmove(&l->items[i + 1], &l->items[i], (l->n - 1 - (size_t)i) * sizeof(jv));
        l->items[i] = v;
        *out = jv_none();
        return 0;
    }
    if (!strcmp(name, "extend")) {
        if ((rc = need_args(rt, a, name, 1, 1)) != 0) return rc;
        jv items;
        rc = jv_iterate(rt, a->pos[0], &items);
        for (size_t i = 0; rc == 0 && i < JV_LIST_(items)->n; i++)
            rc = jv_list_push(rt, obj, jv_dup(JV_LIST_(items)->items[i]));
        if (items.kind == JV_LIST) jv_decref(items);
        *out = jv_none();
        return rc;
    }
    if (!strcmp(name, "index") || !strcmp(name, "count") || !strcmp(name, "remove")) {
        if ((rc = need_args(rt, a, name, 1, 1)) != 0) return rc;
        int64_t n = 0, first = -1;
        for (size_t i = 0; i < l->n; i++) {
            if (jv_equal(l->items[i], a->pos[0])) {
                if (first < 0) first = (int64_t)i;
                n++;
            }
        }
        if (name[0] == 'c') {
            *out = jv_int(n);
            return 0;
        }
        if (first < 0) return jrt_fail(rt, STRATA_EINVAL, "list.%s(x): x not in list", name);
        if (name[0] == 'i') {
            *out = jv_int(first);
            return 0;
        }
        jv_decref(l->items[first]);
        memmove(&l->items[first], &l->items[first + 1], (l->n - (size_t)first - 1) * sizeof(jv));
        l->n--;
        *out = jv_none();
        return 0;
    }
    if (!strcmp(name, "reverse")) {
        if ((rc = need_args(rt, a, name, 0, 0)) != 0) return rc;
        for (size_t i = 0; i < l->n / 2; i++) {
            jv t = l->items[i];
            l->items[i] = l->items[l->n - 1 - i];
            l->items[l->n - 1 - i] = t;
        }
        *out = jv_none();
        return 0;
    }
    if (!strcmp(name, "copy")) {
        if ((rc = need_args(rt, a, name, 0, 0)) != 0) return rc;
        return jv_iterate(rt, obj, out);
    }
    return 1;
}

static int dict_items_list(jrt *rt, jv obj, int what, jv *out)
{
    jv_dict *d = JV_DICT_(obj);
    int rc = jv_new_list(rt, d->n, out);
    for (size_t i = 0; rc == 0 && i < d->n; i++) {
        jv v;
        if (what == 'k') {
            v = jv_dup(d->keys[i]);
        } else if (what == 'v') {
            v = jv_dup(d->vals[i]);
        } else {
            rc = jv_new_list(rt, 2, &v);
            if (rc != 0) break;
            JV_LIST_(v)->is_tuple = true;
            rc = jv_list_push(rt, v, jv_dup(d->keys[i]));
            if (rc == 0) rc = jv_list_push(rt, v, jv_dup(d->vals[i]));
            if (rc != 0) {
                jv_decref(v);
                break;
            }
        }
        rc = jv_list_push(rt, *out, v);
    }
    return rc;
}

static int dict_update(jrt *rt, jv obj, jv src)
{
    if (!jv_is_dict(src))
        return jrt_fail(rt, STRATA_EINVAL, "update() needs a mapping, not %s", jv_type_name(src));
    jv_dict *d = JV_DICT_(src);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < d->n; i++) rc = jv_dict_set(rt, obj, jv_dup(d->keys[i]), jv_dup(d->vals[i]));
    return rc;
}

static int call_dict(jrt *rt, jv obj, const char *name, const jargs *a, jv *out)
{
    int rc;
    if (!strcmp(name, "get") || !strcmp(name, "setdefault")) {
        if ((rc = need_args(rt, a, name, 1, 2)) != 0) return rc;
        jv *v = jv_dict_get(obj, a->pos[0]);
        if (v != NULL) {
            *out = jv_dup(*v);
            return 0;
        }
        jv d = a->n_pos == 2 ? a->pos[1] : jv_none();
        if (name[0] == 's') {
            rc = jv_dict_set(rt, obj, jv_dup(a->pos[0]), jv_dup(d));
            if (rc != 0) return rc;
        }
        *out = jv_dup(d);
        return 0;
    }
    if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
        if ((rc = need_args(rt, a, name, 0, 0)) != 0) return rc;
        return dict_items_list(rt, obj, name[0] == 'k' ? 'k' : name[0] == 'v' ? 'v' : 'i', out);
    }
    if (!strcmp(name, "pop")) {
        if ((rc = need_args(rt, a, name, 1, 2)) != 0) return rc;
        if (jv_dict_remove(obj, a->pos[0], out)) return 0;
        if (a->n_pos == 2) {
            *out = jv_dup(a->pos[1]);
            return 0;
        }
        return jrt_fail(rt, STRATA_EINVAL, "pop(): key not found");
    }
    if (!strcmp(name, "update")) {
        if (a->n_pos > 1) return jrt_fail(rt, STRATA_EINVAL, "update() takes at most 1 argument");
        rc = a->n_pos == 1 ? dict_update(rt, obj, a->pos[0]) : 0;
        for (size_t k = 0; rc == 0 && k < a->n_kw; k++) {
            jv key;
            rc = jv_new_str(rt, a->kwnames[k], strlen(a->kwnames[k]), &key);
            if (rc == 0) rc = jv_dict_set(rt, obj, key, jv_dup(a->kw[k]));
        }
        *out = jv_none();
        return rc;
    }
    if (!strcmp(name, "copy")) {
        if ((rc = need_args(rt, a, name, 0, 0)) != 0) return rc;
        rc = jv_new_dict(rt, 0, JV_DICT, out);
        if (rc == 0) rc = dict_update(rt, *out, obj);
        return rc;
    }
    return 1;
}

int jm_call_method(jrt *rt, jv obj, const char *name, const jargs *args, jv *out)
{
    *out = jv_none();
    const char *known = jm_method_name(obj, name, strlen(name));
    if (known == NULL) return 1;
    switch (obj.kind) {
    case JV_STRING: return call_str(rt, obj, known, args, out);
    case JV_LIST: return call_list(rt, obj, known, args, out);
    case JV_DICT: return call_dict(rt, obj, known, args, out);
    default: return 1;
    }
}

/* ------------------------------------------------------------------ */
/* globals                                                             */

enum { G_RANGE, G_DICT, G_NAMESPACE, G_RAISE, G_STRFTIME, G_COUNT };
static const char *const g_globals[G_COUNT] = {"range", "dict", "namespace", "raise_exception",
                                               "strftime_now"};

int jm_global_lookup(const char *name)
{
    for (int i = 0; i < G_COUNT; i++) {
        if (!strcmp(g_globals[i], name)) return i;
    }
    return -1;
}

const char *jm_global_name(int id) { return id >= 0 && id < G_COUNT ? g_globals[id] : "?"; }

static int g_range(jrt *rt, const jargs *a, jv *out)
{
    if (a->n_kw > 0 || a->n_pos < 1 || a->n_pos > 3)
        return jrt_fail(rt, STRATA_EINVAL, "range() takes 1 to 3 integer arguments");
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < a->n_pos; i++) {
        jv x = a->pos[i];
        if (x.kind != JV_INT && x.kind != JV_BOOL)
            return jrt_fail(rt, STRATA_EINVAL, "range() arguments must be integers, not %s", jv_type_name(x));
        v[i] = x.kind == JV_BOOL ? x.u.b : x.u.i;
    }
    int64_t start = a->n_pos == 1 ? 0 : v[0], stop = a->n_pos == 1 ? v[0] : v[1];
    int64_t step = a->n_pos == 3 ? v[2] : 1;
    if (step == 0) return jrt_fail(rt, STRATA_EINVAL, "range() arg 3 must not be zero");
    uint64_t n = 0;
    if (step > 0 && start < stop) n = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
    if (step < 0 && start > stop) n = ((uint64_t)start - (uint64_t)stop - 1) / ((uint64_t)0 - (uint64_t)step) + 1;
    /* the list is built now; refuse at once what the budget cannot pay */
    if (n > rt->max_steps - (rt->steps < rt->max_steps ? rt->steps : rt->max_steps))
        return jrt_fail(rt, STRATA_ERANGE, "template exceeded its budget of %" PRIu64 " steps (range of %" PRIu64 ")",
                        rt->max_steps, n);
    int rc = jv_new_list(rt, (size_t)n, out);
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        /* start + i*step is in range for every i < n; wrap-free in uint64 */
        rc = jv_list_push(rt, *out, jv_int((int64_t)((uint64_t)start + i * (uint64_t)step)));
    }
    return rc;
}

static int g_dict(jrt *rt, const jargs *a, int kind, jv *out)
{
    if (a->n_pos > 1) return jrt_fail(rt, STRATA_EINVAL, "%s() takes at most 1 positional argument",
                                      kind == JV_DICT ? "dict" : "namespace");
    int rc = jv_new_dict(rt, 0, kind, out);
    if (rc == 0 && a->n_pos == 1) {
        jv src = a->pos[0];
        if (jv_is_dict(src)) {
            jv_dict *d = JV_DICT_(src);
            for (size_t i = 0; rc == 0 && i < d->n; i++) rc = jv_dict_set(rt, *out, jv_dup(d->keys[i]), jv_dup(d->vals[i]));
        } else if (src.kind == JV_LIST) {
            jv_list *l = JV_LIST_(src);
            for (size_t i = 0; rc == 0 && i < l->n; i++) {
                jv p = l->items[i];
                if (p.kind != JV_LIST || JV_LIST_(p)->n != 2) {
                    rc = jrt_fail(rt, STRATA_EINVAL, "dictionary update sequence element #%zu has the wrong length", i);
                    break;
                }
                rc = jv_dict_set(rt, *out, jv_dup(JV_LIST_(p)->items[0]), jv_dup(JV_LIST_(p)->items[1]));
            }
        } else if (src.kind != JV_UNDEFINED && src.kind != JV_NONE) {
            rc = jrt_fail(rt, STRATA_EINVAL, "cannot build a dict from %s", jv_type_name(src));
        }
    }
    for (size_t k = 0; rc == 0 && k < a->n_kw; k++) {
        jv key;
        rc = jv_new_str(rt, a->kwnames[k], strlen(a->kwnames[k]), &key);
        if (rc == 0) rc = jv_dict_set(rt, *out, key, jv_dup(a->kw[k]));
    }
    return rc;
}

/* days since 1970-01-01 of a proleptic Gregorian date */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int g_strftime(jrt *rt, const jargs *a, jv *out)
{
    if (a->n_pos != 1 || a->n_kw > 0 || a->pos[0].kind != JV_STRING)
        return jrt_fail(rt, STRATA_EINVAL, "strftime_now() takes one format string");
    const jv_str *f = JV_STR(a->pos[0]);
    if (f->len > 512 || memchr(f->s, '\0', f->len) != NULL)
        return jrt_fail(rt, STRATA_EINVAL, "strftime_now(): format too long or holds a NUL byte");
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = rt->year - 1900;
    tm.tm_mon = rt->month - 1;
    tm.tm_mday = rt->day;
    int64_t days = days_from_civil(rt->year, rt->month, rt->day);
    tm.tm_wday = (int)(((days % 7) + 11) % 7); /* 1970-01-01 was a Thursday */
    tm.tm_yday = (int)(days - days_from_civil(rt->year, 1, 1));
    tm.tm_isdst = 0;
    if (f->len == 0) return jv_new_str(rt, "", 0, out);
    char buf[8192];
    size_t n = strftime(buf, sizeof(buf), f->s, &tm);
    if (n == 0) return jrt_fail(rt, STRATA_EINVAL, "strftime_now(): the result is empty or too long");
    return jv_new_str(rt, buf, n, out);
}

int jm_call_global(jrt *rt, int id, const jargs *a, jv *out)
{
    *out = jv_none();
    switch (id) {
    case G_RANGE: return g_range(rt, a, out);
    case G_DICT: return g_dict(rt, a, JV_DICT, out);
    case G_NAMESPACE: return g_dict(rt, a, JV_NAMESPACE, out);
    case G_RAISE: {
        jv msg = jv_none();
        if (a->n_pos >= 1) msg = a->pos[0];
        jbuf b = {0};
        int rc = jv_write_str(rt, &b, msg);
        if (rc == 0) rc = jrt_fail(rt, STRATA_EINVAL, "%s", b.p ? b.p : "");
        jbuf_free(&b);
        return rc;
    }
    case G_STRFTIME: return g_strftime(rt, a, out);
    default: return jrt_fail(rt, STRATA_EINVAL, "unknown function");
    }
}

int jm_loop_cycle(jrt *rt, jv loop, const jargs *a, jv *out)
{
    if (a->n_pos == 0) return jrt_fail(rt, STRATA_EINVAL, "no items for cycling given");
    const jv_loop *l = (const jv_loop *)loop.u.o;
    *out = jv_dup(a->pos[l->index0 % a->n_pos]);
    return 0;
}
