/* JSON in and out of Jinja values: the render's variables arrive as
 * jansson values and become Jinja values (objects keep their key order);
 * the tojson filter writes values back exactly as Python's json.dumps does
 * with the arguments Hugging Face uses (ensure_ascii=False unless asked,
 * separators ", " and ": ", or "," and ": " with an indent, keys in
 * insertion order unless sort_keys). */
#include "text/jinja_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define JSON_MAX_NEST 256

int jv_from_json(jrt *rt, const json_t *j, jv *out, int depth)
{
    if (depth > JSON_MAX_NEST) return jrt_fail(rt, STRATA_ERANGE, "JSON input nested too deeply");
    int rc = jrt_step(rt);
    if (rc != 0) return rc;
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jv_none(); return 0;
    case JSON_TRUE: *out = jv_bool(true); return 0;
    case JSON_FALSE: *out = jv_bool(false); return 0;
    case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return 0;
    case JSON_STRING: return jv_new_str(rt, json_string_value(j), json_string_length(j), out);
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        rc = jv_new_list(rt, n, out);
        for (size_t i = 0; rc == 0 && i < n; i++) {
            jv item;
            rc = jv_from_json(rt, json_array_get(j, i), &item, depth + 1);
            if (rc == 0) rc = jv_list_push(rt, *out, item);
        }
        break;
    }
    case JSON_OBJECT: {
        rc = jv_new_dict(rt, json_object_size(j), JV_DICT, out);
        const char *key;
        json_t *val;
        void *it = json_object_iter((json_t *)j);
        while (rc == 0 && it != NULL) {
            key = json_object_iter_key(it);
            val = json_object_iter_value(it);
            size_t klen = json_object_iter_key_len(it);
            jv k, v;
            rc = jv_new_str(rt, key, klen, &k);
            if (rc == 0) {
                rc = jv_from_json(rt, val, &v, depth + 1);
                if (rc == 0) rc = jv_dict_set(rt, *out, k, v);
                else jv_decref(k);
            }
            it = json_object_iter_next((json_t *)j, it);
        }
        break;
    }
    default: return jrt_fail(rt, STRATA_EINVAL, "unknown JSON value");
    }
    if (rc != 0 && jv_is_obj(*out)) {
        jv_decref(*out);
        *out = jv_none();
    }
    return rc;
}

static int put(jrt *rt, jbuf *b, const char *s) { return jbuf_put(rt, b, s, strlen(s)); }

static int write_json_string(jrt *rt, jbuf *b, const char *s, size_t len, bool ascii)
{
    int rc = put(rt, b, "\"");
    size_t from = 0;
    for (size_t i = 0; rc == 0 && i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        esc[0] = '\0';
        switch (c) {
        case '"': snprintf(esc, sizeof(esc), "\\\""); break;
        case '\\': snprintf(esc, sizeof(esc), "\\\\"); break;
        case '\n': snprintf(esc, sizeof(esc), "\\n"); break;
        case '\r': snprintf(esc, sizeof(esc), "\\r"); break;
        case '\t': snprintf(esc, sizeof(esc), "\\t"); break;
        case '\b': snprintf(esc, sizeof(esc), "\\b"); break;
        case '\f': snprintf(esc, sizeof(esc), "\\f"); break;
        default:
            if (c < 0x20) snprintf(esc, sizeof(esc), "\\u%04x", c);
            break;
        }
        size_t k = 1;
        char big[16];
        big[0] = '\0';
        if (ascii && c >= 0x80) {
            /* \uXXXX, with a surrogate pair above the BMP */
            utf8proc_int32_t cp;
            utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                                  (utf8proc_ssize_t)(len - i), &cp);
            if (n <= 0) cp = 0xFFFD, n = 1;
            k = (size_t)n;
            if (cp >= 0x10000) {
                unsigned v = (unsigned)cp - 0x10000;
                snprintf(big, sizeof(big), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                snprintf(big, sizeof(big), "\\u%04x", (unsigned)cp);
            }
        }
        if (esc[0] != '\0' || big[0] != '\0') {
            rc = jbuf_put(rt, b, s + from, i - from);
            if (rc == 0) rc = put(rt, b, big[0] ? big : esc);
            from = i + k;
            i += k - 1;
        }
    }
    if (rc == 0) rc = jbuf_put(rt, b, s + from, len - from);
    if (rc == 0) rc = put(rt, b, "\"");
    return rc;
}

static int write_json_float(jrt *rt, jbuf *b, double f)
{
    char tmp[64];
    if (isnan(f)) return put(rt, b, "NaN");
    if (isinf(f)) return put(rt, b, f < 0 ? "-Infinity" : "Infinity");
    jv_format_float(f, tmp, sizeof(tmp));
    return put(rt, b, tmp);
}

/* A dict key as json.dumps writes it: strings as they are, numbers, bools
 * and None converted to their JSON text. */
static int key_text(jrt *rt, jv k, jv *out)
{
    char tmp[64];
    switch (k.kind) {
    case JV_STRING: *out = jv_dup(k); return 0;
    case JV_NONE: return jv_new_str(rt, "null", 4, out);
    case JV_BOOL: return k.u.b ? jv_new_str(rt, "true", 4, out) : jv_new_str(rt, "false", 5, out);
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%" PRId64, k.u.i);
        return jv_new_str(rt, tmp, strlen(tmp), out);
    case JV_FLOAT:
        if (isnan(k.u.f)) snprintf(tmp, sizeof(tmp), "NaN");
        else if (isinf(k.u.f)) snprintf(tmp, sizeof(tmp), k.u.f < 0 ? "-Infinity" : "Infinity");
        else jv_format_float(k.u.f, tmp, sizeof(tmp));
        return jv_new_str(rt, tmp, strlen(tmp), out);
    default:
        return jrt_fail(rt, STRATA_EINVAL, "keys must be str, int, float, bool or None, not %s",
                        jv_type_name(k));
    }
}

static int newline_indent(jrt *rt, jbuf *b, const char *indent, int level)
{
    int rc = put(rt, b, "\n");
    for (int i = 0; rc == 0 && i < level; i++) rc = put(rt, b, indent);
    return rc;
}

/* Stable insertion order of indexes by key text (sort_keys). */
static void sort_idx(size_t *idx, const jv *texts, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        size_t cur = idx[i];
        size_t j = i;
        while (j > 0) {
            const jv_str *a = JV_STR(texts[idx[j - 1]]), *c = JV_STR(texts[cur]);
            size_t m = a->len < c->len ? a->len : c->len;
            int r = memcmp(a->s, c->s, m);
            if (r < 0 || (r == 0 && a->len <= c->len)) break;
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = cur;
    }
}

static int write_dict(jrt *rt, jbuf *b, jv v, const char *indent, bool sort_keys,
                      bool ascii, const char *item_sep, const char *key_sep, int depth)
{
    jv_dict *d = JV_DICT_(v);
    if (d->n == 0) return put(rt, b, "{}");
    jv texts;
    int rc = jv_new_list(rt, d->n, &texts);
    for (size_t i = 0; rc == 0 && i < d->n; i++) {
        jv t;
        rc = key_text(rt, d->keys[i], &t);
        if (rc == 0) rc = jv_list_push(rt, texts, t);
    }
    size_t *idx = NULL;
    if (rc == 0) {
        idx = malloc(d->n * sizeof(size_t));
        if (idx == NULL) rc = jrt_fail(rt, STRATA_ENOMEM, "out of memory");
    }
    if (rc == 0) {
        for (size_t i = 0; i < d->n; i++) idx[i] = i;
        if (sort_keys) sort_idx(idx, JV_LIST_(texts)->items, d->n);
        rc = put(rt, b, "{");
    }
    size_t n = d->n;
    for (size_t k = 0; rc == 0 && k < n; k++) {
        size_t i = idx[k];
        if (i >= d->n) break; /* never: the dict is not changed while written */
        if (k > 0) rc = put(rt, b, item_sep);
        if (rc == 0 && indent != NULL) rc = newline_indent(rt, b, indent, depth + 1);
        jv t = JV_LIST_(texts)->items[i];
        if (rc == 0) rc = write_json_string(rt, b, JV_STR(t)->s, JV_STR(t)->len, ascii);
        if (rc == 0) rc = put(rt, b, key_sep);
        if (rc == 0)
            rc = jv_write_json(rt, b, d->vals[i], indent, sort_keys, ascii, item_sep, key_sep,
                               depth + 1);
    }
    if (rc == 0 && indent != NULL) rc = newline_indent(rt, b, indent, depth);
    if (rc == 0) rc = put(rt, b, "}");
    free(idx);
    if (texts.kind == JV_LIST) jv_decref(texts);
    return rc;
}

int jv_write_json(jrt *rt, jbuf *b, jv v, const char *indent, bool sort_keys,
                  bool ascii, const char *item_sep, const char *key_sep, int depth)
{
    if (depth > JSON_MAX_NEST) return jrt_fail(rt, STRATA_ERANGE, "value nested too deeply for tojson");
    int rc = jrt_step(rt);
    if (rc != 0) return rc;
    char tmp[32];
    switch (v.kind) {
    case JV_NONE: return put(rt, b, "null");
    case JV_BOOL: return put(rt, b, v.u.b ? "true" : "false");
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%" PRId64, v.u.i);
        return put(rt, b, tmp);
    case JV_FLOAT: return write_json_float(rt, b, v.u.f);
    case JV_STRING: return write_json_string(rt, b, JV_STR(v)->s, JV_STR(v)->len, ascii);
    case JV_LIST: {
        jv_list *l = JV_LIST_(v);
        if (l->n == 0) return put(rt, b, "[]");
        rc = put(rt, b, "[");
        for (size_t i = 0; rc == 0 && i < l->n; i++) {
            if (i > 0) rc = put(rt, b, item_sep);
            if (rc == 0 && indent != NULL) rc = newline_indent(rt, b, indent, depth + 1);
            if (rc == 0)
                rc = jv_write_json(rt, b, l->items[i], indent, sort_keys, ascii, item_sep, key_sep,
                                   depth + 1);
        }
        if (rc == 0 && indent != NULL) rc = newline_indent(rt, b, indent, depth);
        if (rc == 0) rc = put(rt, b, "]");
        return rc;
    }
    case JV_DICT: return write_dict(rt, b, v, indent, sort_keys, ascii, item_sep, key_sep, depth);
    default:
        return jrt_fail(rt, STRATA_EINVAL, "Object of type %s is not JSON serializable",
                        jv_type_name(v));
    }
}
