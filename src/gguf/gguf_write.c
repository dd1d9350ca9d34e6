/* The GGUF v3 writer (see gguf_write.h). */
#include "gguf_write.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct writer_kv {
    const char *key;
    gguf_value value;
} writer_kv;

typedef struct writer_tensor {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    size_t n_bytes;
    uint64_t offset;
    const void *data;
    gguf_tensor_fill_fn fill;
    void *fill_ctx;
} writer_tensor;

struct gguf_writer {
    strata_arena arena; /* copies of keys, values and names */
    writer_kv *kvs;
    size_t n_kv, cap_kv;
    writer_tensor *tensors;
    size_t n_tensors, cap_tensors;
    uint32_t alignment;
};

gguf_writer *gguf_writer_new(void)
{
    gguf_writer *w = calloc(1, sizeof(*w));
    if (w == NULL) return NULL;
    strata_arena_init(&w->arena);
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w)
{
    if (w == NULL) return;
    strata_arena_free(&w->arena);
    free(w->kvs);
    free(w->tensors);
    free(w);
}

uint64_t gguf_writer_n_tensors(const gguf_writer *w)
{
    return w->n_tensors;
}

static const char *arena_strndup(strata_arena *a, const char *s, size_t n)
{
    char *z = strata_arena_alloc(a, n + 1);
    if (z != NULL) {
        memcpy(z, s, n);
        z[n] = '\0';
    }
    return z;
}

static int find_kv(const gguf_writer *w, const char *key)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) return (int)i;
    }
    return -1;
}

/* Deep-copies v into dst inside the writer's arena. */
static int copy_value(gguf_writer *w, gguf_value *dst, const gguf_value *v, int depth)
{
    *dst = *v;
    if (v->type == GGUF_VTYPE_STRING) {
        char *p = strata_arena_alloc(&w->arena, (size_t)v->v.str.len);
        if (p == NULL) return STRATA_ENOMEM;
        if (v->v.str.len > 0) memcpy(p, v->v.str.ptr, (size_t)v->v.str.len); /* ptr may be NULL */
        dst->v.str.ptr = p;
        return 0;
    }
    if (v->type != GGUF_VTYPE_ARRAY) return v->type < GGUF_VTYPE_COUNT ? 0 : STRATA_EINVAL;
    if (depth >= GGUF_MAX_ARRAY_DEPTH) return STRATA_EINVAL;
    uint64_t n = v->v.arr.n;
    uint32_t et = v->v.arr.elem_type;
    if (et >= GGUF_VTYPE_COUNT || n > SIZE_MAX / sizeof(gguf_value)) return STRATA_EINVAL;
    if (et == GGUF_VTYPE_STRING) {
        gguf_str *strs = strata_arena_calloc(&w->arena, (size_t)n, sizeof(*strs));
        if (strs == NULL) return STRATA_ENOMEM;
        for (uint64_t i = 0; i < n; i++) {
            char *p = strata_arena_alloc(&w->arena, (size_t)v->v.arr.strs[i].len);
            if (p == NULL) return STRATA_ENOMEM;
            if (v->v.arr.strs[i].len > 0)
                memcpy(p, v->v.arr.strs[i].ptr, (size_t)v->v.arr.strs[i].len);
            strs[i] = (gguf_str){p, v->v.arr.strs[i].len};
        }
        dst->v.arr.strs = strs;
    } else if (et == GGUF_VTYPE_ARRAY) {
        gguf_value *vals = strata_arena_calloc(&w->arena, (size_t)n, sizeof(*vals));
        if (vals == NULL) return STRATA_ENOMEM;
        for (uint64_t i = 0; i < n; i++) {
            if (v->v.arr.vals[i].type != GGUF_VTYPE_ARRAY) return STRATA_EINVAL;
            int rc = copy_value(w, &vals[i], &v->v.arr.vals[i], depth + 1);
            if (rc != 0) return rc;
        }
        dst->v.arr.vals = vals;
    } else {
        size_t n_bytes = (size_t)n * gguf_vtype_size(et);
        void *p = strata_arena_alloc(&w->arena, n_bytes);
        if (p == NULL) return STRATA_ENOMEM;
        if (n_bytes > 0) memcpy(p, v->v.arr.raw, n_bytes);
        dst->v.arr.raw = p;
    }
    return 0;
}

int gguf_writer_add(gguf_writer *w, const char *key, const gguf_value *v, strata_err *err)
{
    size_t key_len = strlen(key);
    if (key_len == 0 || key_len > GGUF_MAX_KEY) {
        return strata_err_set(err, STRATA_EINVAL, "metadata key of %zu bytes (1 to %d allowed)",
                              key_len, GGUF_MAX_KEY);
    }
    if (find_kv(w, key) >= 0) {
        return strata_err_set(err, STRATA_EINVAL, "metadata key '%s' added twice", key);
    }
    /* The alignment key decides where tensors go, so it must be one the
     * reader accepts, and the writer places tensors by it. */
    bool is_alignment = strcmp(key, "general.alignment") == 0;
    if (is_alignment && (v->type != GGUF_VTYPE_UINT32 || v->v.u64 == 0 ||
                         (v->v.u64 & (v->v.u64 - 1)) != 0)) {
        return strata_err_set(err, STRATA_EINVAL,
                              "general.alignment must be a uint32 power of two");
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        writer_kv *kvs = realloc(w->kvs, cap * sizeof(*kvs));
        if (kvs == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
        w->kvs = kvs;
        w->cap_kv = cap;
    }
    writer_kv *kv = &w->kvs[w->n_kv];
    kv->key = arena_strndup(&w->arena, key, key_len);
    if (kv->key == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    int rc = copy_value(w, &kv->value, v, 0);
    if (rc == STRATA_ENOMEM) return strata_err_set(err, rc, "out of memory");
    if (rc != 0) {
        return strata_err_set(err, rc, "metadata key '%s': malformed value (unknown type, "
                              "or arrays nested deeper than %d)", key, GGUF_MAX_ARRAY_DEPTH);
    }
    w->n_kv++;
    if (is_alignment) w->alignment = (uint32_t)v->v.u64;
    return 0;
}

int gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment, strata_err *err)
{
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        return strata_err_set(err, STRATA_EINVAL, "alignment %" PRIu32 " is not a power of two",
                              alignment);
    }
    w->alignment = alignment;
    int i = find_kv(w, "general.alignment");
    if (i >= 0) {
        w->kvs[i].value.v.u64 = alignment;
        return 0;
    }
    if (alignment == GGUF_DEFAULT_ALIGNMENT) return 0;
    return gguf_writer_add_u32(w, "general.alignment", alignment, err);
}

int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t x, strata_err *err)
{
    gguf_value v = {.type = GGUF_VTYPE_UINT32, .v.u64 = x};
    return gguf_writer_add(w, key, &v, err);
}

int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t x, strata_err *err)
{
    gguf_value v = {.type = GGUF_VTYPE_INT32, .v.i64 = x};
    return gguf_writer_add(w, key, &v, err);
}

int gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t x, strata_err *err)
{
    gguf_value v = {.type = GGUF_VTYPE_UINT64, .v.u64 = x};
    return gguf_writer_add(w, key, &v, err);
}

int gguf_writer_add_f32(gguf_writer *w, const char *key, float x, strata_err *err)
{
    gguf_value v = {.type = GGUF_VTYPE_FLOAT32, .v.f64 = x};
    return gguf_writer_add(w, key, &v, err);
}

int gguf_writer_add_bool(gguf_writer *w, const char *key, bool x, strata_err *err)
{
    gguf_value v = {.type = GGUF_VTYPE_BOOL, .v.b = x};
    return gguf_writer_add(w, key, &v, err);
}

int gguf_writer_add_str(gguf_writer *w, const char *key, const char *s, strata_err *err)
{
    gguf_value v = {.type = GGUF_VTYPE_STRING, .v.str = {s, strlen(s)}};
    return gguf_writer_add(w, key, &v, err);
}

int gguf_writer_add_arr(gguf_writer *w, const char *key, enum gguf_vtype elem_type, uint64_t n,
                        const void *elems, strata_err *err)
{
    if (gguf_vtype_size(elem_type) == 0) {
        return strata_err_set(err, STRATA_EINVAL, "metadata key '%s': %s is not a scalar type",
                              key, gguf_vtype_name(elem_type));
    }
    gguf_value v = {.type = GGUF_VTYPE_ARRAY};
    v.v.arr.elem_type = elem_type;
    v.v.arr.n = n;
    v.v.arr.raw = elems;
    return gguf_writer_add(w, key, &v, err);
}

int gguf_writer_add_str_arr(gguf_writer *w, const char *key, uint64_t n,
                            const char *const *strs, strata_err *err)
{
    if (n > SIZE_MAX / sizeof(gguf_str)) return strata_err_set(err, STRATA_EINVAL, "array too long");
    gguf_str *tmp = malloc((size_t)(n ? n : 1) * sizeof(*tmp));
    if (tmp == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++) tmp[i] = (gguf_str){strs[i], strlen(strs[i])};
    gguf_value v = {.type = GGUF_VTYPE_ARRAY};
    v.v.arr.elem_type = GGUF_VTYPE_STRING;
    v.v.arr.n = n;
    v.v.arr.strs = tmp;
    int rc = gguf_writer_add(w, key, &v, err);
    free(tmp);
    return rc;
}

static int add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                      const int64_t *ne, const void *data, gguf_tensor_fill_fn fill, void *ctx,
                      strata_err *err)
{
    size_t name_len = strlen(name);
    if (name_len == 0 || name_len > GGUF_MAX_TENSOR_NAME) {
        return strata_err_set(err, STRATA_EINVAL, "tensor name '%s' has %zu bytes (1 to %d)",
                              name, name_len, GGUF_MAX_TENSOR_NAME);
    }
    if (!strata_type_usable(type)) {
        return strata_err_set(err, STRATA_EINVAL, "tensor '%s': type %" PRIu32 " cannot be stored",
                              name, type);
    }
    if (n_dims > GGUF_MAX_DIMS) {
        return strata_err_set(err, STRATA_EINVAL, "tensor '%s': %" PRIu32 " dimensions", name,
                              n_dims);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        if (strcmp(w->tensors[i].name, name) == 0) {
            return strata_err_set(err, STRATA_EINVAL, "tensor '%s' added twice", name);
        }
    }
    writer_tensor t = {.type = type, .n_dims = n_dims, .data = data, .fill = fill, .fill_ctx = ctx};
    int64_t n_elems = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 0 || (t.ne[d] != 0 && n_elems > INT64_MAX / t.ne[d])) {
            return strata_err_set(err, STRATA_EINVAL, "tensor '%s': bad dimensions", name);
        }
        n_elems *= t.ne[d];
    }
    const strata_type_info *ti = strata_type_get(type);
    if (t.ne[0] % ti->block_elems != 0) {
        return strata_err_set(err, STRATA_EINVAL,
                              "tensor '%s': rows of %" PRId64 " are not whole %s blocks of %" PRIu32,
                              name, t.ne[0], ti->name, ti->block_elems);
    }
    t.n_bytes = (size_t)(n_elems / ti->block_elems) * ti->block_bytes;
    t.name = arena_strndup(&w->arena, name, name_len);
    if (t.name == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        writer_tensor *ts = realloc(w->tensors, cap * sizeof(*ts));
        if (ts == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
        w->tensors = ts;
        w->cap_tensors = cap;
    }
    w->tensors[w->n_tensors++] = t;
    return 0;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, const void *data, strata_err *err)
{
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL, err);
}

int gguf_writer_add_tensor_fill(gguf_writer *w, const char *name, uint32_t type,
                                uint32_t n_dims, const int64_t *ne, gguf_tensor_fill_fn fill,
                                void *ctx, strata_err *err)
{
    return add_tensor(w, name, type, n_dims, ne, NULL, fill, ctx, err);
}

/* --- serialisation --- */

typedef struct out {
    FILE *f;
    uint64_t pos;
    int failed;
} out;

static void put(out *o, const void *p, size_t n)
{
    if (o->failed || n == 0) return;
    if (fwrite(p, 1, n, o->f) != n) o->failed = errno ? errno : EIO;
    o->pos += n;
}

static void put_u32(out *o, uint32_t x) { put(o, &x, 4); }
static void put_u64(out *o, uint64_t x) { put(o, &x, 8); }

static void put_str(out *o, const char *p, uint64_t n)
{
    put_u64(o, n);
    put(o, p, (size_t)n);
}

static void put_pad(out *o, uint32_t alignment)
{
    static const uint8_t zeros[256];
    uint64_t pad = (alignment - o->pos % alignment) % alignment;
    while (pad > 0) {
        size_t n = pad < sizeof(zeros) ? (size_t)pad : sizeof(zeros);
        put(o, zeros, n);
        pad -= n;
    }
}

static void put_scalar(out *o, const gguf_value *v)
{
    uint8_t b[8];
    switch (v->type) {
    case GGUF_VTYPE_UINT8: b[0] = (uint8_t)v->v.u64; break;
    case GGUF_VTYPE_INT8: b[0] = (uint8_t)(int8_t)v->v.i64; break;
    case GGUF_VTYPE_BOOL: b[0] = v->v.b ? 1 : 0; break;
    case GGUF_VTYPE_UINT16: { uint16_t x = (uint16_t)v->v.u64; memcpy(b, &x, 2); break; }
    case GGUF_VTYPE_INT16: { int16_t x = (int16_t)v->v.i64; memcpy(b, &x, 2); break; }
    case GGUF_VTYPE_UINT32: { uint32_t x = (uint32_t)v->v.u64; memcpy(b, &x, 4); break; }
    case GGUF_VTYPE_INT32: { int32_t x = (int32_t)v->v.i64; memcpy(b, &x, 4); break; }
    case GGUF_VTYPE_FLOAT32: { float x = (float)v->v.f64; memcpy(b, &x, 4); break; }
    case GGUF_VTYPE_UINT64: memcpy(b, &v->v.u64, 8); break;
    case GGUF_VTYPE_INT64: memcpy(b, &v->v.i64, 8); break;
    case GGUF_VTYPE_FLOAT64: memcpy(b, &v->v.f64, 8); break;
    default: return;
    }
    put(o, b, gguf_vtype_size(v->type));
}

/* Writes a value's payload (its type tag is written by the caller). */
static void put_value(out *o, const gguf_value *v)
{
    if (v->type == GGUF_VTYPE_STRING) {
        put_str(o, v->v.str.ptr, v->v.str.len);
    } else if (v->type == GGUF_VTYPE_ARRAY) {
        uint32_t et = v->v.arr.elem_type;
        put_u32(o, et);
        put_u64(o, v->v.arr.n);
        for (uint64_t i = 0; i < v->v.arr.n && et == GGUF_VTYPE_STRING; i++) {
            put_str(o, v->v.arr.strs[i].ptr, v->v.arr.strs[i].len);
        }
        for (uint64_t i = 0; i < v->v.arr.n && et == GGUF_VTYPE_ARRAY; i++) {
            put_value(o, &v->v.arr.vals[i]);
        }
        if (et != GGUF_VTYPE_STRING && et != GGUF_VTYPE_ARRAY) {
            put(o, v->v.arr.raw, (size_t)v->v.arr.n * gguf_vtype_size(et));
        }
    } else {
        put_scalar(o, v);
    }
}

int gguf_writer_write(gguf_writer *w, FILE *f, const char *name, strata_err *err)
{
    out o = {.f = f};
    put(&o, GGUF_MAGIC, 4);
    put_u32(&o, 3);
    put_u64(&o, w->n_tensors);
    put_u64(&o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(&o, w->kvs[i].key, strlen(w->kvs[i].key));
        put_u32(&o, w->kvs[i].value.type);
        put_value(&o, &w->kvs[i].value);
    }
    /* Place tensors one after another, each at a multiple of the alignment. */
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        writer_tensor *t = &w->tensors[i];
        t->offset = offset;
        offset += (t->n_bytes + w->alignment - 1) / w->alignment * w->alignment;
        put_str(&o, t->name, strlen(t->name));
        put_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&o, (uint64_t)t->ne[d]);
        put_u32(&o, t->type);
        put_u64(&o, t->offset);
    }
    if (w->n_tensors > 0) put_pad(&o, w->alignment);

    void *buf = NULL;
    size_t buf_size = 0;
    int rc = 0;
    for (size_t i = 0; i < w->n_tensors && rc == 0 && !o.failed; i++) {
        writer_tensor *t = &w->tensors[i];
        const void *data = t->data;
        if (t->fill != NULL) {
            if (t->n_bytes > buf_size) {
                free(buf);
                buf = malloc(t->n_bytes);
                buf_size = buf ? t->n_bytes : 0;
                if (buf == NULL) {
                    rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory for tensor '%s' "
                                        "(%zu bytes)", name, t->name, t->n_bytes);
                    break;
                }
            }
            rc = t->fill(t->fill_ctx, i, buf, t->n_bytes);
            if (rc != 0) {
                rc = strata_err_set(err, rc, "%s: producing tensor '%s' failed", name, t->name);
                break;
            }
            data = buf;
        }
        put(&o, data, t->n_bytes);
        put_pad(&o, w->alignment);
    }
    free(buf);
    if (rc != 0) return rc;
    if (!o.failed && fflush(f) != 0) o.failed = errno ? errno : EIO;
    if (o.failed) {
        return strata_err_set(err, STRATA_EIO, "%s: write failed: %s", name, strerror(o.failed));
    }
    return 0;
}

int gguf_writer_write_file(gguf_writer *w, const char *path, strata_err *err)
{
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (tmp == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wbe");
    if (f == NULL) {
        int rc = strata_err_set(err, STRATA_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    int rc = gguf_writer_write(w, f, path, err);
    if (fclose(f) != 0 && rc == 0) {
        rc = strata_err_set(err, STRATA_EIO, "%s: write failed: %s", path, strerror(errno));
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = strata_err_set(err, STRATA_EIO, "%s: cannot rename into place: %s", path,
                            strerror(errno));
    }
    if (rc != 0) unlink(tmp);
    free(tmp);
    return rc;
}
