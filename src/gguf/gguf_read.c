/* Parsing and validating one GGUF file held in memory.
 *
 * The layout (all little-endian):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv × (string key | u32 value type | value)
 *   n_tensors × (string name | u32 n_dims | n_dims × u64 ne | u32 type | u64 offset)
 *   padding to general.alignment (default 32) | data section
 * where a string is u64 length + bytes and an array is u32 element type +
 * u64 count + elements. Version 2 and 3 share this layout; version 1 used
 * 32-bit counts and lengths and is refused.
 *
 * Every read goes through a cursor that knows how many bytes remain; every
 * count is checked against the least number of bytes its items could take
 * before anything is allocated for them, so allocations stay proportional to
 * the file's size. */
#include "gguf_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fewest bytes a metadata entry or a tensor record can take: a key of
 * one byte (length 8 + 1) + type 4 + a one-byte value; a name of one byte +
 * n_dims 4 + type 4 + offset 8. Used to bound counts before allocating. */
#define GGUF_MIN_KV_BYTES 14
#define GGUF_MIN_TENSOR_BYTES 25

typedef struct cursor {
    const uint8_t *bytes;
    size_t size;
    size_t off;
    const char *name;
    strata_err *err;
    strata_arena *arena;
} cursor;

static int cursor_fail(cursor *c, size_t at, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int cursor_fail(cursor *c, size_t at, int code, const char *fmt, ...)
{
    char what[STRATA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return strata_err_set(c->err, code, "%s: at byte %zu: %s", c->name, at, what);
}

static size_t cursor_left(const cursor *c)
{
    return c->size - c->off;
}

static int cursor_read(cursor *c, void *dst, size_t n, const char *what)
{
    if (cursor_left(c) < n) {
        return cursor_fail(c, c->off, STRATA_EFORMAT,
                           "file ends inside %s (%zu bytes needed, %zu remain)", what, n,
                           cursor_left(c));
    }
    memcpy(dst, c->bytes + c->off, n);
    c->off += n;
    return 0;
}

static int read_u32(cursor *c, uint32_t *v, const char *what)
{
    return cursor_read(c, v, 4, what);
}

static int read_u64(cursor *c, uint64_t *v, const char *what)
{
    return cursor_read(c, v, 8, what);
}

/* A string: u64 length then that many bytes, which must remain. */
static int read_str(cursor *c, gguf_str *s, const char *what)
{
    size_t at = c->off;
    uint64_t len = 0;
    int rc = read_u64(c, &len, what);
    if (rc != 0) return rc;
    if (len > cursor_left(c)) {
        return cursor_fail(c, at, STRATA_EFORMAT,
                           "%s has length %" PRIu64 " but only %zu bytes remain", what, len,
                           cursor_left(c));
    }
    s->ptr = (const char *)c->bytes + c->off;
    s->len = len;
    c->off += (size_t)len;
    return 0;
}

/* Copies s into the arena with a terminating NUL; refuses embedded NULs
 * since keys and names are handed out as C strings. */
static int str_to_cstr(cursor *c, size_t at, gguf_str s, const char *what, const char **out)
{
    if (memchr(s.ptr, '\0', (size_t)s.len) != NULL) {
        return cursor_fail(c, at, STRATA_EFORMAT, "%s contains a NUL byte", what);
    }
    char *z = strata_arena_alloc(c->arena, (size_t)s.len + 1);
    if (z == NULL) return strata_err_set(c->err, STRATA_ENOMEM, "%s: out of memory", c->name);
    memcpy(z, s.ptr, (size_t)s.len);
    z[s.len] = '\0';
    *out = z;
    return 0;
}

/* --- value types --- */

static const char *const g_vtype_names[GGUF_VTYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool",  "string", "array", "uint64", "int64", "float64",
};

static const uint8_t g_vtype_sizes[GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_vtype_name(uint32_t t)
{
    return t < GGUF_VTYPE_COUNT ? g_vtype_names[t] : "?";
}

size_t gguf_vtype_size(uint32_t t)
{
    return t < GGUF_VTYPE_COUNT ? g_vtype_sizes[t] : 0;
}

bool gguf_vtype_is_int(uint32_t t)
{
    switch (t) {
    case GGUF_VTYPE_UINT8: case GGUF_VTYPE_INT8: case GGUF_VTYPE_UINT16:
    case GGUF_VTYPE_INT16: case GGUF_VTYPE_UINT32: case GGUF_VTYPE_INT32:
    case GGUF_VTYPE_UINT64: case GGUF_VTYPE_INT64:
        return true;
    default:
        return false;
    }
}

/* Decodes one little-endian scalar of type t at p into v (p has room). */
static void scalar_decode(gguf_value *v, uint32_t t, const uint8_t *p)
{
    v->type = (enum gguf_vtype)t;
    switch (t) {
    case GGUF_VTYPE_UINT8: v->v.u64 = p[0]; break;
    case GGUF_VTYPE_INT8: v->v.i64 = (int8_t)p[0]; break;
    case GGUF_VTYPE_BOOL: v->v.b = p[0] != 0; break;
    case GGUF_VTYPE_UINT16: { uint16_t x; memcpy(&x, p, 2); v->v.u64 = x; break; }
    case GGUF_VTYPE_INT16: { int16_t x; memcpy(&x, p, 2); v->v.i64 = x; break; }
    case GGUF_VTYPE_UINT32: { uint32_t x; memcpy(&x, p, 4); v->v.u64 = x; break; }
    case GGUF_VTYPE_INT32: { int32_t x; memcpy(&x, p, 4); v->v.i64 = x; break; }
    case GGUF_VTYPE_FLOAT32: { float x; memcpy(&x, p, 4); v->v.f64 = x; break; }
    case GGUF_VTYPE_UINT64: { uint64_t x; memcpy(&x, p, 8); v->v.u64 = x; break; }
    case GGUF_VTYPE_INT64: { int64_t x; memcpy(&x, p, 8); v->v.i64 = x; break; }
    case GGUF_VTYPE_FLOAT64: { double x; memcpy(&x, p, 8); v->v.f64 = x; break; }
    default: break;
    }
}

static int read_value(cursor *c, uint32_t type, gguf_value *v, int depth, const char *key);

static int read_array(cursor *c, gguf_value *v, int depth, const char *key)
{
    size_t at = c->off;
    uint32_t elem_type = 0;
    uint64_t n = 0;
    int rc = read_u32(c, &elem_type, "an array's element type");
    if (rc == 0) rc = read_u64(c, &n, "an array's length");
    if (rc != 0) return rc;
    if (elem_type >= GGUF_VTYPE_COUNT) {
        return cursor_fail(c, at, STRATA_EFORMAT, "key '%s': array element type %" PRIu32
                           " is not a GGUF value type", key, elem_type);
    }
    if (depth + 1 > GGUF_MAX_ARRAY_DEPTH) {
        return cursor_fail(c, at, STRATA_EFORMAT,
                           "key '%s': arrays nested deeper than %d levels", key,
                           GGUF_MAX_ARRAY_DEPTH);
    }
    v->type = GGUF_VTYPE_ARRAY;
    v->v.arr.elem_type = (enum gguf_vtype)elem_type;
    v->v.arr.n = n;

    /* Each element takes at least min_bytes of the file; check the count
     * against what remains before allocating anything for it. */
    size_t min_bytes = gguf_vtype_size(elem_type);
    if (elem_type == GGUF_VTYPE_STRING) min_bytes = 8;
    if (elem_type == GGUF_VTYPE_ARRAY) min_bytes = 12;
    if (n > cursor_left(c) / min_bytes) {
        return cursor_fail(c, at, STRATA_EFORMAT,
                           "key '%s': array of %" PRIu64 " %s values cannot fit in the %zu "
                           "bytes that remain", key, n, gguf_vtype_name(elem_type),
                           cursor_left(c));
    }

    if (elem_type == GGUF_VTYPE_STRING) {
        gguf_str *strs = strata_arena_calloc(c->arena, (size_t)n, sizeof(*strs));
        if (strs == NULL) return strata_err_set(c->err, STRATA_ENOMEM, "%s: out of memory", c->name);
        for (uint64_t i = 0; i < n; i++) {
            rc = read_str(c, &strs[i], "a string in an array");
            if (rc != 0) return rc;
        }
        v->v.arr.strs = strs;
    } else if (elem_type == GGUF_VTYPE_ARRAY) {
        gguf_value *vals = strata_arena_calloc(c->arena, (size_t)n, sizeof(*vals));
        if (vals == NULL) return strata_err_set(c->err, STRATA_ENOMEM, "%s: out of memory", c->name);
        for (uint64_t i = 0; i < n; i++) {
            rc = read_array(c, &vals[i], depth + 1, key);
            if (rc != 0) return rc;
        }
        v->v.arr.vals = vals;
    } else {
        v->v.arr.raw = c->bytes + c->off;
        c->off += (size_t)n * min_bytes; /* checked above */
    }
    return 0;
}

static int read_value(cursor *c, uint32_t type, gguf_value *v, int depth, const char *key)
{
    if (type == GGUF_VTYPE_STRING) {
        v->type = GGUF_VTYPE_STRING;
        return read_str(c, &v->v.str, "a string value");
    }
    if (type == GGUF_VTYPE_ARRAY) return read_array(c, v, depth, key);
    uint8_t buf[8];
    int rc = cursor_read(c, buf, gguf_vtype_size(type), "a metadata value");
    if (rc != 0) return rc;
    scalar_decode(v, type, buf);
    return 0;
}

/* --- array element access --- */

int64_t gguf_arr_int(const gguf_value *arr, uint64_t i)
{
    gguf_value v = {0};
    uint32_t t = arr->v.arr.elem_type;
    scalar_decode(&v, t, (const uint8_t *)arr->v.arr.raw + i * gguf_vtype_size(t));
    switch (t) {
    case GGUF_VTYPE_UINT8: case GGUF_VTYPE_UINT16: case GGUF_VTYPE_UINT32:
    case GGUF_VTYPE_UINT64:
        return (int64_t)v.v.u64;
    case GGUF_VTYPE_BOOL: return v.v.b;
    case GGUF_VTYPE_FLOAT32: case GGUF_VTYPE_FLOAT64: return (int64_t)v.v.f64;
    default: return v.v.i64;
    }
}

double gguf_arr_float(const gguf_value *arr, uint64_t i)
{
    uint32_t t = arr->v.arr.elem_type;
    if (t == GGUF_VTYPE_FLOAT32 || t == GGUF_VTYPE_FLOAT64) {
        gguf_value v = {0};
        scalar_decode(&v, t, (const uint8_t *)arr->v.arr.raw + i * gguf_vtype_size(t));
        return v.v.f64;
    }
    return (double)gguf_arr_int(arr, i);
}

gguf_str gguf_arr_str(const gguf_value *arr, uint64_t i)
{
    return arr->v.arr.strs[i];
}

/* --- the header, metadata and tensor table --- */

static int parse_header(cursor *c, gguf_shard *s, uint64_t *n_tensors, uint64_t *n_kv)
{
    if (c->size < 4 || memcmp(c->bytes, GGUF_MAGIC, 4) != 0) {
        char shown[5] = {0};
        size_t n = c->size < 4 ? c->size : 4;
        for (size_t i = 0; i < n; i++) {
            unsigned char ch = c->bytes[i];
            shown[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '.';
        }
        return cursor_fail(c, 0, STRATA_EFORMAT,
                           "not a GGUF file (the first bytes are '%s', not 'GGUF')", shown);
    }
    c->off = 4;
    int rc = read_u32(c, &s->version, "the version");
    if (rc != 0) return rc;
    if (s->version == 1) {
        return cursor_fail(c, 4, STRATA_EUNSUPPORTED,
                           "GGUF version 1 is not supported (it used 32-bit counts and was "
                           "replaced by version 2 in 2023); convert the file with a current "
                           "tool");
    }
    if ((s->version & 0xffff) == 0 && (s->version >> 16) != 0) {
        return cursor_fail(c, 4, STRATA_EUNSUPPORTED,
                           "big-endian GGUF files are not supported (version field reads "
                           "0x%08" PRIx32 ")", s->version);
    }
    if (s->version != 2 && s->version != 3) {
        return cursor_fail(c, 4, STRATA_EUNSUPPORTED,
                           "GGUF version %" PRIu32 " is not supported (versions 2 and 3 are)",
                           s->version);
    }
    rc = read_u64(c, n_tensors, "the tensor count");
    if (rc == 0) rc = read_u64(c, n_kv, "the metadata count");
    return rc;
}

static int parse_kvs(cursor *c, gguf_shard *s, uint64_t n_kv, strata_strmap *index)
{
    if (n_kv > cursor_left(c) / GGUF_MIN_KV_BYTES) {
        return cursor_fail(c, 16, STRATA_EFORMAT,
                           "metadata count %" PRIu64 " cannot fit in the %zu bytes that remain",
                           n_kv, cursor_left(c));
    }
    s->n_kv = n_kv;
    s->kvs = strata_arena_calloc(c->arena, (size_t)n_kv, sizeof(*s->kvs));
    if (s->kvs == NULL || strata_strmap_init(index, (size_t)n_kv) != 0) {
        return strata_err_set(c->err, STRATA_ENOMEM, "%s: out of memory", c->name);
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &s->kvs[i];
        size_t at = c->off;
        gguf_str key;
        int rc = read_str(c, &key, "a metadata key");
        if (rc != 0) return rc;
        if (key.len == 0 || key.len > GGUF_MAX_KEY) {
            return cursor_fail(c, at, STRATA_EFORMAT,
                               "metadata key %" PRIu64 " has length %" PRIu64
                               " (1 to %d bytes allowed)", i, key.len, GGUF_MAX_KEY);
        }
        rc = str_to_cstr(c, at, key, "a metadata key", &kv->key);
        if (rc != 0) return rc;
        kv->key_len = (size_t)key.len;
        kv->file_offset = at;
        if (strata_strmap_put(index, kv->key, kv->key_len, (int64_t)i, NULL) != 0) {
            return cursor_fail(c, at, STRATA_EFORMAT, "duplicate metadata key '%s'", kv->key);
        }
        size_t type_at = c->off;
        uint32_t type = 0;
        rc = read_u32(c, &type, "a metadata value type");
        if (rc != 0) return rc;
        if (type >= GGUF_VTYPE_COUNT) {
            return cursor_fail(c, type_at, STRATA_EFORMAT,
                               "key '%s' has value type %" PRIu32
                               ", which is not a GGUF value type", kv->key, type);
        }
        rc = read_value(c, type, &kv->value, 0, kv->key);
        if (rc != 0) return rc;

        if (strcmp(kv->key, "general.alignment") == 0) {
            if (type != GGUF_VTYPE_UINT32) {
                return cursor_fail(c, at, STRATA_EFORMAT,
                                   "general.alignment has type %s (uint32 expected)",
                                   gguf_vtype_name(type));
            }
            uint64_t a = kv->value.v.u64;
            if (a == 0 || (a & (a - 1)) != 0) {
                return cursor_fail(c, at, STRATA_EFORMAT,
                                   "general.alignment is %" PRIu64 " (a power of two expected)",
                                   a);
            }
            s->alignment = (uint32_t)a;
        }
    }
    return 0;
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a;
    const gguf_tensor *y = *(const gguf_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return (x->n_bytes > y->n_bytes) - (x->n_bytes < y->n_bytes); /* empty ones first */
}

/* Parses n tensor records into out[0..n), then places them in the data
 * section and checks that each lies inside it and that none overlap. */
static int parse_tensors(cursor *c, gguf_shard *s, uint32_t shard_no, uint64_t n,
                         gguf_tensor *out)
{
    for (uint64_t i = 0; i < n; i++) {
        gguf_tensor *t = &out[i];
        size_t at = c->off;
        gguf_str name;
        int rc = read_str(c, &name, "a tensor name");
        if (rc != 0) return rc;
        if (name.len == 0 || name.len > GGUF_MAX_TENSOR_NAME) {
            return cursor_fail(c, at, STRATA_EFORMAT,
                               "tensor %" PRIu64 " has a name of %" PRIu64
                               " bytes (1 to %d allowed)", i, name.len, GGUF_MAX_TENSOR_NAME);
        }
        rc = str_to_cstr(c, at, name, "a tensor name", &t->name);
        if (rc != 0) return rc;
        t->name_len = (size_t)name.len;
        t->shard = shard_no;
        t->info_offset = at;

        rc = read_u32(c, &t->n_dims, "a tensor's dimension count");
        if (rc != 0) return rc;
        if (t->n_dims > GGUF_MAX_DIMS) {
            return cursor_fail(c, at, STRATA_EFORMAT, "tensor '%s' has %" PRIu32
                               " dimensions (at most %d)", t->name, t->n_dims, GGUF_MAX_DIMS);
        }
        int64_t n_elems = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne = 0;
            rc = read_u64(c, &ne, "a tensor dimension");
            if (rc != 0) return rc;
            if (ne > (uint64_t)INT64_MAX || (ne != 0 && n_elems > INT64_MAX / (int64_t)ne)) {
                return cursor_fail(c, at, STRATA_EFORMAT,
                                   "tensor '%s': dimensions overflow a 64-bit element count",
                                   t->name);
            }
            t->ne[d] = (int64_t)ne;
            n_elems *= (int64_t)ne;
        }
        t->n_elems = n_elems;

        size_t type_at = c->off;
        rc = read_u32(c, &t->type, "a tensor type");
        if (rc == 0) rc = read_u64(c, &t->offset, "a tensor offset");
        if (rc != 0) return rc;
        const strata_type_info *ti = strata_type_get(t->type);
        if (ti == NULL) {
            return cursor_fail(c, type_at, STRATA_EFORMAT,
                               "tensor '%s' has type id %" PRIu32 ", which is not a known "
                               "tensor type", t->name, t->type);
        }
        if (ti->block_elems == 0) {
            return cursor_fail(c, type_at, STRATA_EUNSUPPORTED,
                               "tensor '%s' has type %s, which was retired from the format",
                               t->name, ti->name);
        }
        if (t->ne[0] % ti->block_elems != 0) {
            return cursor_fail(c, at, STRATA_EFORMAT,
                               "tensor '%s': rows of %" PRId64 " elements are not a whole "
                               "number of %s blocks of %" PRIu32, t->name, t->ne[0], ti->name,
                               ti->block_elems);
        }
        uint64_t n_blocks = (uint64_t)n_elems / ti->block_elems;
        if (n_blocks > (uint64_t)SIZE_MAX / ti->block_bytes) {
            return cursor_fail(c, at, STRATA_EFORMAT, "tensor '%s' is too large", t->name);
        }
        t->n_bytes = (size_t)(n_blocks * ti->block_bytes);
        if (t->offset % s->alignment != 0) {
            return cursor_fail(c, type_at + 4, STRATA_EFORMAT,
                               "tensor '%s' has offset %" PRIu64 ", not a multiple of the "
                               "alignment %" PRIu32, t->name, t->offset, s->alignment);
        }
    }

    /* The data section starts at the next multiple of the alignment. */
    uint64_t end = c->off;
    uint64_t a = s->alignment;
    s->data_offset = (end + a - 1) / a * a;
    if (n == 0) return 0; /* vocab-only files may end before the padding */

    if (s->data_offset > c->size) {
        return cursor_fail(c, c->off, STRATA_EFORMAT,
                           "file ends before its data section (which starts at byte %" PRIu64
                           ")", s->data_offset);
    }
    uint64_t data_size = c->size - s->data_offset;
    for (uint64_t i = 0; i < n; i++) {
        gguf_tensor *t = &out[i];
        if (t->offset > data_size || t->n_bytes > data_size - t->offset) {
            return cursor_fail(c, (size_t)(s->data_offset + (t->offset < data_size ? t->offset : data_size)),
                               STRATA_EFORMAT,
                               "tensor '%s' (%zu bytes at data offset %" PRIu64
                               ") runs past the end of the file (%" PRIu64 " data bytes)",
                               t->name, t->n_bytes, t->offset, data_size);
        }
        t->data = c->bytes + s->data_offset + t->offset;
    }

    /* Overlap check: sort by offset, then each must end before the next. */
    gguf_tensor **order = malloc((size_t)n * sizeof(*order));
    if (order == NULL) return strata_err_set(c->err, STRATA_ENOMEM, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < n; i++) order[i] = &out[i];
    qsort(order, (size_t)n, sizeof(*order), cmp_tensor_offset);
    int rc = 0;
    for (uint64_t i = 0; i + 1 < n; i++) {
        const gguf_tensor *x = order[i];
        const gguf_tensor *y = order[i + 1];
        if (x->offset + x->n_bytes > y->offset) {
            rc = cursor_fail(c, (size_t)(s->data_offset + y->offset), STRATA_EFORMAT,
                             "tensors '%s' (data offset %" PRIu64 ", %zu bytes) and '%s' "
                             "(data offset %" PRIu64 ") overlap", x->name, x->offset,
                             x->n_bytes, y->name, y->offset);
            break;
        }
    }
    free(order);
    return rc;
}

int gguf_parse_shard(gguf *g, gguf_shard *s, uint32_t shard_no, const char *name,
                     strata_err *err)
{
    cursor c = {
        .bytes = s->bytes, .size = s->size, .off = 0, .name = name, .err = err,
        .arena = &g->arena,
    };
    uint64_t n_tensors = 0, n_kv = 0;
    int rc = parse_header(&c, s, &n_tensors, &n_kv);
    if (rc != 0) return rc;

    s->alignment = GGUF_DEFAULT_ALIGNMENT;
    strata_strmap kv_index = {0};
    rc = parse_kvs(&c, s, n_kv, &kv_index);
    if (rc == 0 && shard_no == 0) {
        g->kv_index = kv_index; /* the model's metadata is the first shard's */
    } else {
        strata_strmap_free(&kv_index);
    }
    if (rc != 0) return rc;

    if (n_tensors > cursor_left(&c) / GGUF_MIN_TENSOR_BYTES) {
        return cursor_fail(&c, 8, STRATA_EFORMAT,
                           "tensor count %" PRIu64 " cannot fit in the %zu bytes that remain",
                           n_tensors, cursor_left(&c));
    }
    /* g->tensors grows by this shard's count; the records of earlier shards
     * move with it, which is fine while the gguf is still being opened. */
    if (n_tensors > 0) {
        gguf_tensor *grown = realloc(g->tensors, (size_t)(g->n_tensors + n_tensors) * sizeof(*grown));
        if (grown == NULL) return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", name);
        g->tensors = grown;
        memset(&grown[g->n_tensors], 0, (size_t)n_tensors * sizeof(*grown));
    }
    rc = parse_tensors(&c, s, shard_no, n_tensors,
                       n_tensors > 0 ? g->tensors + g->n_tensors : NULL); /* NULL + 0 is UB */
    if (rc != 0) return rc;
    s->n_tensors = n_tensors;
    s->first_tensor = g->n_tensors;
    g->n_tensors += n_tensors;
    return 0;
}
