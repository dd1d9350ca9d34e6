/* The value model of the Jinja engine: allocation and reference counting
 * of heap values, strings, lists, insertion-ordered dicts, string
 * builders, and Python's semantics for truth, equality, ordering, len(),
 * iteration, str() and repr().
 *
 * Every heap object is linked into its render's heap and charged to it, so
 * the render can cap the bytes alive at once and free everything at the
 * end, even objects kept alive by a reference cycle. Freeing never
 * recurses: an object whose count drops to zero goes on a work list, so
 * a list nested a million deep is freed in constant stack. */
#include "text/jinja_internal.h"

#include "base/strmap.h"

#include <inttypes.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define JV_MAX_NEST 512 /* nesting that repr/equality/ordering will walk */

/* ------------------------------------------------------------------ */
/* heap                                                                */

static int heap_charge(jrt *rt, size_t n)
{
    jinja_heap *h = &rt->heap;
    if (n > h->max_bytes || h->n_bytes > h->max_bytes - n) {
        return jrt_fail(rt, STRATA_ERANGE, "template uses more than %zu bytes of memory",
                        h->max_bytes);
    }
    h->n_bytes += n;
    return 0;
}

static void heap_link(jinja_heap *h, jv_obj *o)
{
    o->heap = h;
    o->prev = NULL;
    o->next = h->live;
    if (h->live != NULL) h->live->prev = o;
    h->live = o;
}

static void heap_unlink(jv_obj *o)
{
    jinja_heap *h = o->heap;
    if (o->prev != NULL) o->prev->next = o->next;
    else h->live = o->next;
    if (o->next != NULL) o->next->prev = o->prev;
    h->n_bytes -= o->n_bytes;
}

static void *obj_new(jrt *rt, size_t size, int kind)
{
    if (heap_charge(rt, size) != 0) return NULL;
    jv_obj *o = calloc(1, size);
    if (o == NULL) {
        rt->heap.n_bytes -= size;
        jrt_fail(rt, STRATA_ENOMEM, "out of memory");
        return NULL;
    }
    o->rc = 1;
    o->kind = (uint8_t)kind;
    o->n_bytes = size;
    heap_link(&rt->heap, o);
    return o;
}

/* Resizes an array owned by o from old_n to new_n elements of size sz. */
static int obj_resize(jrt *rt, jv_obj *o, void **arr, size_t old_n, size_t new_n, size_t sz)
{
    if (new_n > SIZE_MAX / sz) return jrt_fail(rt, STRATA_ERANGE, "value too large");
    size_t add = (new_n - old_n) * sz;
    if (heap_charge(rt, add) != 0) return rt->code;
    void *p = realloc(*arr, new_n * sz);
    if (p == NULL) {
        rt->heap.n_bytes -= add;
        return jrt_fail(rt, STRATA_ENOMEM, "out of memory");
    }
    memset((char *)p + old_n * sz, 0, add);
    *arr = p;
    o->n_bytes += add;
    return 0;
}

/* Frees o's own memory (not its children). */
static void obj_release(jv_obj *o)
{
    switch (o->kind) {
    case JV_LIST: free(((jv_list *)o)->items); break;
    case JV_DICT:
    case JV_NAMESPACE: {
        jv_dict *d = (jv_dict *)o;
        free(d->keys);
        free(d->vals);
        free(d->slots);
        break;
    }
    default: break;
    }
    free(o);
}

void jv_incref(jv v)
{
    if (jv_is_obj(v) && v.u.o->rc != JV_RC_IMMORTAL) v.u.o->rc++;
}

/* Drops one reference from v; objects that reach zero are pushed on *stack
 * (linked through `next` once out of the live list). */
static void decref_push(jv v, jv_obj **stack)
{
    if (!jv_is_obj(v)) return;
    jv_obj *o = v.u.o;
    if (o->rc == JV_RC_IMMORTAL) return;
    if (--o->rc > 0) return;
    heap_unlink(o);
    o->next = *stack;
    *stack = o;
}

void jv_decref(jv v)
{
    jv_obj *stack = NULL;
    decref_push(v, &stack);
    while (stack != NULL) {
        jv_obj *o = stack;
        stack = o->next;
        switch (o->kind) {
        case JV_LIST: {
            jv_list *l = (jv_list *)o;
            for (size_t i = 0; i < l->n; i++) decref_push(l->items[i], &stack);
            break;
        }
        case JV_DICT:
        case JV_NAMESPACE: {
            jv_dict *d = (jv_dict *)o;
            for (size_t i = 0; i < d->n; i++) {
                decref_push(d->keys[i], &stack);
                decref_push(d->vals[i], &stack);
            }
            break;
        }
        case JV_CALLABLE: decref_push(((jv_callable *)o)->self, &stack); break;
        case JV_LOOP: decref_push(((jv_loop *)o)->items, &stack); break;
        default: break;
        }
        obj_release(o);
    }
}

void jinja_heap_release_all(jinja_heap *h)
{
    jv_obj *o = h->live;
    while (o != NULL) {
        jv_obj *next = o->next;
        obj_release(o);
        o = next;
    }
    h->live = NULL;
    h->n_bytes = 0;
}

/* ------------------------------------------------------------------ */
/* constructors                                                        */

int jv_new_str(jrt *rt, const char *s, size_t len, jv *out)
{
    *out = jv_none();
    if (len > SIZE_MAX - sizeof(jv_str) - 1) return jrt_fail(rt, STRATA_ERANGE, "string too long");
    jv_str *o = obj_new(rt, sizeof(jv_str) + len + 1, JV_STRING);
    if (o == NULL) return rt->code;
    if (len > 0 && s != NULL) memcpy(o->s, s, len);
    o->s[len] = '\0';
    o->len = len;
    out->kind = JV_STRING;
    out->u.o = &o->h;
    return 0;
}

jv_str *jv_const_str(strata_arena *arena, const char *s, size_t len)
{
    jv_str *o = strata_arena_alloc(arena, sizeof(jv_str) + len + 1);
    if (o == NULL) return NULL;
    o->h.rc = JV_RC_IMMORTAL;
    o->h.kind = JV_STRING;
    if (len > 0) memcpy(o->s, s, len);
    o->s[len] = '\0';
    o->len = len;
    return o;
}

int jv_new_list(jrt *rt, size_t cap, jv *out)
{
    *out = jv_none();
    jv_list *l = obj_new(rt, sizeof(jv_list), JV_LIST);
    if (l == NULL) return rt->code;
    out->kind = JV_LIST;
    out->u.o = &l->h;
    if (cap > 0) {
        int rc = obj_resize(rt, &l->h, (void **)&l->items, 0, cap, sizeof(jv));
        if (rc != 0) {
            jv_decref(*out);
            *out = jv_none();
            return rc;
        }
        l->cap = cap;
    }
    return 0;
}

int jv_list_push(jrt *rt, jv list, jv v)
{
    jv_list *l = JV_LIST_(list);
    int rs = jrt_step(rt);
    if (rs != 0) {
        jv_decref(v);
        return rs;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        int rc = obj_resize(rt, &l->h, (void **)&l->items, l->cap, cap, sizeof(jv));
        if (rc != 0) {
            jv_decref(v);
            return rc;
        }
        l->cap = cap;
    }
    l->items[l->n++] = v;
    return 0;
}

int jv_new_dict(jrt *rt, size_t cap, int kind, jv *out)
{
    *out = jv_none();
    jv_dict *d = obj_new(rt, sizeof(jv_dict), kind);
    if (d == NULL) return rt->code;
    out->kind = (uint8_t)kind;
    out->u.o = &d->h;
    (void)cap;
    return 0;
}

int jv_new_callable(jrt *rt, int call_kind, jv *out)
{
    *out = jv_none();
    jv_callable *c = obj_new(rt, sizeof(jv_callable), JV_CALLABLE);
    if (c == NULL) return rt->code;
    c->call_kind = (uint8_t)call_kind;
    out->kind = JV_CALLABLE;
    out->u.o = &c->h;
    return 0;
}

int jv_new_loop(jrt *rt, jv items, jv *out)
{
    *out = jv_none();
    jv_loop *l = obj_new(rt, sizeof(jv_loop), JV_LOOP);
    if (l == NULL) return rt->code;
    l->items = jv_dup(items);
    out->kind = JV_LOOP;
    out->u.o = &l->h;
    return 0;
}

/* ------------------------------------------------------------------ */
/* dicts                                                               */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    return strata_hash_bytes(s, n);
}

/* Equal keys hash alike: 1, 1.0 and True are one key, as in Python. */
static uint64_t jv_hash(jv k, int depth)
{
    switch (k.kind) {
    case JV_STRING: return hash_bytes(JV_STR(k)->s, JV_STR(k)->len);
    case JV_BOOL: return mix64((uint64_t)k.u.b);
    case JV_INT: return mix64((uint64_t)k.u.i);
    case JV_FLOAT:
        if (k.u.f == floor(k.u.f) && fabs(k.u.f) < 9.2e18) return mix64((uint64_t)(int64_t)k.u.f);
        {
            uint64_t bits;
            memcpy(&bits, &k.u.f, sizeof(bits));
            return mix64(bits);
        }
    case JV_LIST: {
        uint64_t h = 7;
        if (depth > JV_MAX_NEST) return h;
        jv_list *l = JV_LIST_(k);
        for (size_t i = 0; i < l->n; i++) h = mix64(h ^ jv_hash(l->items[i], depth + 1));
        return h;
    }
    case JV_NONE: return 0x9e3779b97f4a7c15ULL;
    default: return mix64((uint64_t)(uintptr_t)(jv_is_obj(k) ? (void *)k.u.o : NULL) + k.kind);
    }
}

static int dict_reindex(jrt *rt, jv_dict *d, size_t n_slots)
{
    uint32_t *slots = NULL;
    if (n_slots > 0) {
        if (heap_charge(rt, n_slots * sizeof(uint32_t)) != 0) return rt->code;
        slots = calloc(n_slots, sizeof(uint32_t));
        if (slots == NULL) {
            rt->heap.n_bytes -= n_slots * sizeof(uint32_t);
            return jrt_fail(rt, STRATA_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < d->n; i++) {
            size_t s = (size_t)jv_hash(d->keys[i], 0) & (n_slots - 1);
            while (slots[s] != 0) s = (s + 1) & (n_slots - 1);
            slots[s] = (uint32_t)(i + 1);
        }
    }
    rt->heap.n_bytes -= d->n_slots * sizeof(uint32_t);
    d->h.n_bytes -= d->n_slots * sizeof(uint32_t);
    free(d->slots);
    d->slots = slots;
    d->n_slots = n_slots;
    d->h.n_bytes += n_slots * sizeof(uint32_t);
    return 0;
}

/* Index of key in d, or -1. Small dicts are searched linearly. */
static int64_t dict_find(const jv_dict *d, jv key)
{
    if (d->n_slots == 0) {
        for (size_t i = 0; i < d->n; i++) {
            if (jv_equal(d->keys[i], key)) return (int64_t)i;
        }
        return -1;
    }
    size_t s = (size_t)jv_hash(key, 0) & (d->n_slots - 1);
    while (d->slots[s] != 0) {
        size_t i = d->slots[s] - 1;
        if (jv_equal(d->keys[i], key)) return (int64_t)i;
        s = (s + 1) & (d->n_slots - 1);
    }
    return -1;
}

#define DICT_LINEAR_MAX 8

int jv_dict_set(jrt *rt, jv dict, jv key, jv val)
{
    jv_dict *d = JV_DICT_(dict);
    if (key.kind == JV_DICT || key.kind == JV_NAMESPACE ||
        (key.kind == JV_LIST && !JV_LIST_(key)->is_tuple)) {
        jv_decref(key);
        jv_decref(val);
        return jrt_fail(rt, STRATA_EINVAL, "unhashable type: '%s'", jv_type_name(key));
    }
    int64_t i = dict_find(d, key);
    if (i >= 0) {
        jv_decref(d->vals[i]);
        d->vals[i] = val;
        jv_decref(key);
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        if (cap > UINT32_MAX / 4) {
            jv_decref(key);
            jv_decref(val);
            return jrt_fail(rt, STRATA_ERANGE, "dict too large");
        }
        int rc = obj_resize(rt, &d->h, (void **)&d->keys, d->cap, cap, sizeof(jv));
        if (rc == 0) rc = obj_resize(rt, &d->h, (void **)&d->vals, d->cap, cap, sizeof(jv));
        if (rc != 0) {
            jv_decref(key);
            jv_decref(val);
            return rc;
        }
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    if (d->n > DICT_LINEAR_MAX) {
        if (d->n_slots < 2 * d->cap) return dict_reindex(rt, d, 4 * d->cap);
        size_t s = (size_t)jv_hash(key, 0) & (d->n_slots - 1);
        while (d->slots[s] != 0) s = (s + 1) & (d->n_slots - 1);
        d->slots[s] = (uint32_t)d->n;
    }
    return 0;
}

jv *jv_dict_get(jv dict, jv key)
{
    jv_dict *d = JV_DICT_(dict);
    int64_t i = dict_find(d, key);
    return i >= 0 ? &d->vals[i] : NULL;
}

jv *jv_dict_get_str(jv dict, const char *key, size_t len)
{
    jv_dict *d = JV_DICT_(dict);
    for (size_t i = 0; i < d->n && d->n_slots == 0; i++) {
        jv k = d->keys[i];
        if (k.kind == JV_STRING && JV_STR(k)->len == len && memcmp(JV_STR(k)->s, key, len) == 0)
            return &d->vals[i];
    }
    if (d->n_slots == 0) return NULL;
    /* a temporary immortal string is enough for hashing and comparing */
    _Alignas(max_align_t) char tmp[sizeof(jv_str) + 64];
    if (len >= 64) {
        for (size_t i = 0; i < d->n; i++) {
            jv k = d->keys[i];
            if (k.kind == JV_STRING && JV_STR(k)->len == len &&
                memcmp(JV_STR(k)->s, key, len) == 0)
                return &d->vals[i];
        }
        return NULL;
    }
    jv_str *ks = (jv_str *)tmp;
    memset(ks, 0, sizeof(*ks));
    ks->h.rc = JV_RC_IMMORTAL;
    ks->h.kind = JV_STRING;
    ks->len = len;
    memcpy(ks->s, key, len);
    ks->s[len] = '\0';
    jv k = {.kind = JV_STRING};
    k.u.o = &ks->h;
    return jv_dict_get(dict, k);
}

bool jv_dict_remove(jv dict, jv key, jv *out)
{
    jv_dict *d = JV_DICT_(dict);
    int64_t i = dict_find(d, key);
    if (i < 0) return false;
    jv_decref(d->keys[i]);
    *out = d->vals[i];
    memmove(&d->keys[i], &d->keys[i + 1], (d->n - (size_t)i - 1) * sizeof(jv));
    memmove(&d->vals[i], &d->vals[i + 1], (d->n - (size_t)i - 1) * sizeof(jv));
    d->n--;
    if (d->n_slots > 0) {
        /* rebuild in place: the slot table keeps its size */
        memset(d->slots, 0, d->n_slots * sizeof(uint32_t));
        for (size_t k = 0; k < d->n; k++) {
            size_t s = (size_t)jv_hash(d->keys[k], 0) & (d->n_slots - 1);
            while (d->slots[s] != 0) s = (s + 1) & (d->n_slots - 1);
            d->slots[s] = (uint32_t)(k + 1);
        }
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* string builders                                                     */

int jbuf_put(jrt *rt, jbuf *b, const char *s, size_t n)
{
    if (n == 0) return 0;
    /* copying costs time: a step per 256 bytes on top of the caller's */
    if (n >= 256) {
        rt->steps += n >> 8;
        int rc = jrt_step(rt);
        if (rc != 0) return rc;
    }
    if (b->len + n + 1 > b->cap) {
        if (n > SIZE_MAX / 4 - b->len) return jrt_fail(rt, STRATA_ERANGE, "string too long");
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        if (heap_charge(rt, cap - b->cap) != 0) return rt->code;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            rt->heap.n_bytes -= cap - b->cap;
            return jrt_fail(rt, STRATA_ENOMEM, "out of memory");
        }
        b->heap = &rt->heap;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

void jbuf_free(jbuf *b)
{
    if (b->heap != NULL) b->heap->n_bytes -= b->cap;
    free(b->p);
    memset(b, 0, sizeof(*b));
}

int jbuf_to_value(jrt *rt, jbuf *b, jv *out)
{
    int rc = jv_new_str(rt, b->p ? b->p : "", b->len, out);
    jbuf_free(b);
    return rc;
}

static int put_cstr(jrt *rt, jbuf *b, const char *s) { return jbuf_put(rt, b, s, strlen(s)); }

/* ------------------------------------------------------------------ */
/* semantics                                                           */

const char *jv_type_name(jv v)
{
    switch (v.kind) {
    case JV_UNDEFINED: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STRING: return "str";
    case JV_LIST: return JV_LIST_(v)->is_tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NAMESPACE: return "Namespace";
    case JV_CALLABLE: return "function";
    case JV_LOOP: return "LoopContext";
    default: return "object";
    }
}

bool jv_truthy(jv v)
{
    switch (v.kind) {
    case JV_UNDEFINED:
    case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STRING: return JV_STR(v)->len > 0;
    case JV_LIST: return JV_LIST_(v)->n > 0;
    case JV_DICT: return JV_DICT_(v)->n > 0;
    default: return true;
    }
}

static int64_t num_as_int(jv v) { return v.kind == JV_BOOL ? (int64_t)v.u.b : v.u.i; }

/* Exact comparison of an integer with a double, as Python does it. */
static int cmp_int_double(int64_t i, double f)
{
    if (isnan(f)) return 2; /* unordered */
    if (f >= 9223372036854775808.0) return -1;
    if (f < -9223372036854775808.0) return 1;
    double fl = floor(f);
    int64_t fi = (int64_t)fl;
    if (i < fi) return -1;
    if (i > fi) return 1;
    return fl < f ? -1 : 0;
}

static int num_cmp(jv a, jv b)
{
    if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
        int64_t x = num_as_int(a), y = num_as_int(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.kind == JV_FLOAT && b.kind == JV_FLOAT) {
        if (isnan(a.u.f) || isnan(b.u.f)) return 2;
        return a.u.f < b.u.f ? -1 : a.u.f > b.u.f ? 1 : 0;
    }
    if (a.kind == JV_FLOAT) {
        int c = cmp_int_double(num_as_int(b), a.u.f);
        return c == 2 ? 2 : -c;
    }
    return cmp_int_double(num_as_int(a), b.u.f);
}

static bool equal_depth(jv a, jv b, int depth)
{
    if (depth > JV_MAX_NEST) return false;
    if (jv_is_number(a) && jv_is_number(b)) return num_cmp(a, b) == 0;
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case JV_UNDEFINED:
    case JV_NONE: return true;
    case JV_STRING:
        return JV_STR(a)->len == JV_STR(b)->len &&
               memcmp(JV_STR(a)->s, JV_STR(b)->s, JV_STR(a)->len) == 0;
    case JV_LIST: {
        jv_list *x = JV_LIST_(a), *y = JV_LIST_(b);
        if (x->is_tuple != y->is_tuple || x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++) {
            if (!equal_depth(x->items[i], y->items[i], depth + 1)) return false;
        }
        return true;
    }
    case JV_DICT: {
        jv_dict *x = JV_DICT_(a), *y = JV_DICT_(b);
        if (x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++) {
            jv *o = jv_dict_get(b, x->keys[i]);
            if (o == NULL || !equal_depth(x->vals[i], *o, depth + 1)) return false;
        }
        return true;
    }
    default: return a.u.o == b.u.o;
    }
}

bool jv_equal(jv a, jv b) { return equal_depth(a, b, 0); }

/* Compares UTF-8 strings by code point, optionally through lower case. */
static int str_cmp(const jv_str *a, const jv_str *b, bool casefold)
{
    if (!casefold) {
        size_t n = a->len < b->len ? a->len : b->len;
        int c = memcmp(a->s, b->s, n);
        if (c != 0) return c < 0 ? -1 : 1;
        return a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
    }
    size_t i = 0, j = 0;
    while (i < a->len && j < b->len) {
        utf8proc_int32_t x, y;
        utf8proc_ssize_t kx = utf8proc_iterate((const utf8proc_uint8_t *)a->s + i,
                                               (utf8proc_ssize_t)(a->len - i), &x);
        utf8proc_ssize_t ky = utf8proc_iterate((const utf8proc_uint8_t *)b->s + j,
                                               (utf8proc_ssize_t)(b->len - j), &y);
        if (kx <= 0) { x = (unsigned char)a->s[i]; kx = 1; } else x = utf8proc_tolower(x);
        if (ky <= 0) { y = (unsigned char)b->s[j]; ky = 1; } else y = utf8proc_tolower(y);
        if (x != y) return x < y ? -1 : 1;
        i += (size_t)kx;
        j += (size_t)ky;
    }
    return (i < a->len) ? 1 : (j < b->len) ? -1 : 0;
}

static int compare_depth(jrt *rt, jv a, jv b, bool casefold, int *cmp, int depth)
{
    if (depth > JV_MAX_NEST) return jrt_fail(rt, STRATA_ERANGE, "values nested too deeply");
    if (jv_is_number(a) && jv_is_number(b)) {
        int c = num_cmp(a, b);
        *cmp = c == 2 ? 0 : c;
        return 0;
    }
    if (a.kind == JV_STRING && b.kind == JV_STRING) {
        *cmp = str_cmp(JV_STR(a), JV_STR(b), casefold);
        return 0;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST &&
        JV_LIST_(a)->is_tuple == JV_LIST_(b)->is_tuple) {
        jv_list *x = JV_LIST_(a), *y = JV_LIST_(b);
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (equal_depth(x->items[i], y->items[i], depth + 1)) continue;
            return compare_depth(rt, x->items[i], y->items[i], casefold, cmp, depth + 1);
        }
        *cmp = x->n < y->n ? -1 : x->n > y->n ? 1 : 0;
        return 0;
    }
    return jrt_fail(rt, STRATA_EINVAL, "'<' not supported between instances of '%s' and '%s'",
                    jv_type_name(a), jv_type_name(b));
}

int jv_compare(jrt *rt, jv a, jv b, bool casefold, int *cmp)
{
    return compare_depth(rt, a, b, casefold, cmp, 0);
}

int jv_length(jrt *rt, jv v, int64_t *n)
{
    switch (v.kind) {
    case JV_UNDEFINED: *n = 0; return 0;
    case JV_STRING: *n = (int64_t)jstr_n_chars(JV_STR(v)->s, JV_STR(v)->len); return 0;
    case JV_LIST: *n = (int64_t)JV_LIST_(v)->n; return 0;
    case JV_DICT:
    case JV_NAMESPACE: *n = (int64_t)JV_DICT_(v)->n; return 0;
    default:
        return jrt_fail(rt, STRATA_EINVAL, "object of type '%s' has no len()", jv_type_name(v));
    }
}

int jv_iterate(jrt *rt, jv v, jv *items)
{
    int rc;
    switch (v.kind) {
    case JV_UNDEFINED: return jv_new_list(rt, 0, items);
    case JV_LIST: {
        jv_list *l = JV_LIST_(v);
        rc = jv_new_list(rt, l->n, items);
        for (size_t i = 0; rc == 0 && i < l->n; i++) rc = jv_list_push(rt, *items, jv_dup(l->items[i]));
        break;
    }
    case JV_DICT: {
        jv_dict *d = JV_DICT_(v);
        rc = jv_new_list(rt, d->n, items);
        for (size_t i = 0; rc == 0 && i < d->n; i++) rc = jv_list_push(rt, *items, jv_dup(d->keys[i]));
        break;
    }
    case JV_STRING: {
        jv_str *s = JV_STR(v);
        rc = jv_new_list(rt, 0, items);
        for (size_t i = 0; rc == 0 && i < s->len;) {
            size_t k = jstr_char_offset(s->s + i, s->len - i, 1);
            jv c;
            rc = jv_new_str(rt, s->s + i, k, &c);
            if (rc == 0) rc = jv_list_push(rt, *items, c);
            i += k;
        }
        break;
    }
    default:
        return jrt_fail(rt, STRATA_EINVAL, "'%s' object is not iterable", jv_type_name(v));
    }
    if (rc != 0 && items->kind == JV_LIST) {
        jv_decref(*items);
        items->kind = JV_NONE;
    }
    return rc;
}

/* ------------------------------------------------------------------ */
/* str() and repr()                                                    */

void jv_format_float(double f, char *buf, size_t n)
{
    if (isnan(f)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, n, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0.0) {
        snprintf(buf, n, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    /* the shortest digits that read back as f */
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    bool neg = tmp[0] == '-';
    const char *p = tmp + (neg ? 1 : 0);
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++) {
        if (*p >= '0' && *p <= '9' && nd < sizeof(digits) - 1) digits[nd++] = *p;
    }
    int exp = (*p == 'e') ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) out[o++] = (size_t)i < nd ? digits[i] : '0';
            out[o++] = '.';
            if ((size_t)exp + 1 < nd) {
                for (size_t i = (size_t)exp + 1; i < nd; i++) out[o++] = digits[i];
            } else {
                out[o++] = '0';
            }
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (size_t i = 0; i < nd; i++) out[o++] = digits[i];
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (size_t i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof(out) - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(buf, n, "%s", out);
}

static bool py_printable(int32_t cp)
{
    if (cp == ' ') return true;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
    }
}

static int write_str_repr(jrt *rt, jbuf *b, const char *s, size_t len)
{
    bool has_sq = memchr(s, '\'', len) != NULL, has_dq = memchr(s, '"', len) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    int rc = jbuf_put(rt, b, &q, 1);
    size_t from = 0;
    for (size_t i = 0; rc == 0 && i < len;) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        esc[0] = '\0';
        size_t k = 1;
        if (c == (unsigned char)q || c == '\\') {
            snprintf(esc, sizeof(esc), "\\%c", c);
        } else if (c == '\n') {
            snprintf(esc, sizeof(esc), "\\n");
        } else if (c == '\r') {
            snprintf(esc, sizeof(esc), "\\r");
        } else if (c == '\t') {
            snprintf(esc, sizeof(esc), "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", c);
        } else if (c >= 0x80) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                                  (utf8proc_ssize_t)(len - i), &cp);
            if (n > 0) {
                k = (size_t)n;
                if (!py_printable(cp)) {
                    if (cp < 0x100) snprintf(esc, sizeof(esc), "\\x%02x", (unsigned)cp);
                    else if (cp < 0x10000) snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)cp);
                    else snprintf(esc, sizeof(esc), "\\U%08x", (unsigned)cp);
                }
            }
        }
        if (esc[0] != '\0') {
            rc = jbuf_put(rt, b, s + from, i - from);
            if (rc == 0) rc = put_cstr(rt, b, esc);
            from = i + k;
        }
        i += k;
    }
    if (rc == 0) rc = jbuf_put(rt, b, s + from, len - from);
    if (rc == 0) rc = jbuf_put(rt, b, &q, 1);
    return rc;
}

static int write_dict_body(jrt *rt, jbuf *b, jv v, int depth)
{
    jv_dict *d = JV_DICT_(v);
    int rc = put_cstr(rt, b, "{");
    for (size_t i = 0; rc == 0 && i < d->n; i++) {
        if (i > 0) rc = put_cstr(rt, b, ", ");
        if (rc == 0) rc = jv_write_repr(rt, b, d->keys[i], depth + 1);
        if (rc == 0) rc = put_cstr(rt, b, ": ");
        if (rc == 0) rc = jv_write_repr(rt, b, d->vals[i], depth + 1);
    }
    if (rc == 0) rc = put_cstr(rt, b, "}");
    return rc;
}

int jv_write_repr(jrt *rt, jbuf *b, jv v, int depth)
{
    if (depth > JV_MAX_NEST) return jrt_fail(rt, STRATA_ERANGE, "values nested too deeply");
    if ((depth & 15) == 0) {
        int rc = jrt_step(rt);
        if (rc != 0) return rc;
    }
    switch (v.kind) {
    case JV_UNDEFINED: return put_cstr(rt, b, "Undefined");
    case JV_STRING: return write_str_repr(rt, b, JV_STR(v)->s, JV_STR(v)->len);
    case JV_LIST: {
        jv_list *l = JV_LIST_(v);
        int rc = put_cstr(rt, b, l->is_tuple ? "(" : "[");
        for (size_t i = 0; rc == 0 && i < l->n; i++) {
            if (i > 0) rc = put_cstr(rt, b, ", ");
            if (rc == 0) rc = jv_write_repr(rt, b, l->items[i], depth + 1);
        }
        if (rc == 0 && l->is_tuple && l->n == 1) rc = put_cstr(rt, b, ",");
        if (rc == 0) rc = put_cstr(rt, b, l->is_tuple ? ")" : "]");
        return rc;
    }
    case JV_DICT: return write_dict_body(rt, b, v, depth);
    case JV_NAMESPACE: {
        int rc = put_cstr(rt, b, "<Namespace ");
        if (rc == 0) rc = write_dict_body(rt, b, v, depth);
        if (rc == 0) rc = put_cstr(rt, b, ">");
        return rc;
    }
    default: return jv_write_str(rt, b, v);
    }
}

int jv_write_str(jrt *rt, jbuf *b, jv v)
{
    char tmp[64];
    switch (v.kind) {
    case JV_UNDEFINED: return 0;
    case JV_NONE: return put_cstr(rt, b, "None");
    case JV_BOOL: return put_cstr(rt, b, v.u.b ? "True" : "False");
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%" PRId64, v.u.i);
        return put_cstr(rt, b, tmp);
    case JV_FLOAT:
        jv_format_float(v.u.f, tmp, sizeof(tmp));
        return put_cstr(rt, b, tmp);
    case JV_STRING: return jbuf_put(rt, b, JV_STR(v)->s, JV_STR(v)->len);
    case JV_CALLABLE: {
        const jv_callable *c = (const jv_callable *)v.u.o;
        if (c->call_kind == JCALL_MACRO && c->node != NULL) {
            int rc = put_cstr(rt, b, "<Macro '");
            if (rc == 0) rc = put_cstr(rt, b, c->node->name);
            if (rc == 0) rc = put_cstr(rt, b, "'>");
            return rc;
        }
        if (c->call_kind == JCALL_BUILTIN) {
            int rc = put_cstr(rt, b, "<built-in function ");
            if (rc == 0) rc = put_cstr(rt, b, jm_global_name(c->builtin));
            if (rc == 0) rc = put_cstr(rt, b, ">");
            return rc;
        }
        return put_cstr(rt, b, "<function>");
    }
    case JV_LOOP: {
        const jv_loop *l = (const jv_loop *)v.u.o;
        snprintf(tmp, sizeof(tmp), "<LoopContext %zu/%zu>", l->index0 + 1,
                 JV_LIST_(l->items)->n);
        return put_cstr(rt, b, tmp);
    }
    default: return jv_write_repr(rt, b, v, 0);
    }
}

int jv_to_str(jrt *rt, jv v, jv *out)
{
    if (v.kind == JV_STRING) {
        *out = jv_dup(v);
        return 0;
    }
    jbuf b = {0};
    int rc = jv_write_str(rt, &b, v);
    if (rc != 0) {
        jbuf_free(&b);
        return rc;
    }
    return jbuf_to_value(rt, &b, out);
}
