/* Hostile GGUF bytes: the parser must answer every malformed input with an
 * error code and a message saying where and what, and never crash, read
 * outside the buffer, allocate without bound or leak (this suite also runs
 * under ASan, UBSan and LeakSanitizer).
 *
 * (a) every truncation point of real files, each parsed from an exactly
 *     sized heap copy so that a read one byte too far is caught;
 * (b) seeded random byte flips and hostile u64/u32 values written into the
 *     length, count, type and offset fields of the header, metadata and
 *     tensor table;
 * (c) hand-built files, one per rule of the format, each checked for its
 *     error code and the words of its message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "testdata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- parsing a byte range from an exact-size heap copy --- */

static int parse_copy(const uint8_t *bytes, size_t n, strata_err *err, gguf **out)
{
    uint8_t *copy = malloc(n > 0 ? n : 1);
    assert_non_null(copy);
    if (n > 0) memcpy(copy, bytes, n);
    gguf *g = NULL;
    strata_err_clear(err);
    int rc = gguf_open_buffer(&g, copy, n, "hostile.gguf", err);
    if (rc == 0 && out != NULL) {
        *out = g; /* the caller closes g and frees the copy via g's bytes */
        return 0;
    }
    if (rc == 0) gguf_close(g);
    else assert_null(g);
    free(copy);
    return rc;
}

static void close_copy(gguf *g)
{
    void *bytes = (void *)g->shards[0].bytes;
    gguf_close(g);
    free(bytes);
}

/* A failed parse: the code, the name given for the buffer, and the words. */
static void expect_error(const uint8_t *bytes, size_t n, int code, const char *w1, const char *w2)
{
    strata_err err;
    int rc = parse_copy(bytes, n, &err, NULL);
    if (rc != code) fail_msg("want code %d, got %d: %s", code, rc, err.msg);
    assert_int_equal(err.code, code);
    assert_non_null(strstr(err.msg, "hostile.gguf"));
    if (w1 != NULL && strstr(err.msg, w1) == NULL) fail_msg("'%s' not in: %s", w1, err.msg);
    if (w2 != NULL && strstr(err.msg, w2) == NULL) fail_msg("'%s' not in: %s", w2, err.msg);
}

static volatile unsigned g_sink; /* keeps the touching reads below */

/* Every tensor of a parsed buffer lies inside it; every string and array
 * handed out points inside it too (touching them lets ASan check). */
static void check_inside(const gguf *g)
{
    const gguf_shard *s = &g->shards[0];
    const uint8_t *lo = s->bytes, *hi = s->bytes + s->size;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const uint8_t *p = t->data;
        assert_true(p >= lo && p <= hi && t->n_bytes <= (size_t)(hi - p));
        if (t->n_bytes > 0) g_sink += p[0] + p[t->n_bytes - 1];
        assert_ptr_equal(gguf_find_tensor(g, t->name), t);
    }
    for (uint64_t i = 0; i < s->n_kv; i++) {
        const gguf_value *v = &s->kvs[i].value;
        if (v->type == GGUF_VTYPE_STRING) {
            const uint8_t *p = (const uint8_t *)v->v.str.ptr;
            assert_true(p >= lo && v->v.str.len <= (uint64_t)(hi - p));
        } else if (v->type == GGUF_VTYPE_ARRAY && v->v.arr.raw != NULL && v->v.arr.n > 0) {
            const uint8_t *p = v->v.arr.raw;
            size_t n_bytes = (size_t)v->v.arr.n * gguf_vtype_size(v->v.arr.elem_type);
            assert_true(p >= lo && n_bytes <= (size_t)(hi - p));
            g_sink += p[n_bytes - 1];
        }
    }
}

/* --- (a) truncation --- */

/* Parses every prefix in [from, to) stepping by stride; each must fail. */
static void truncations_fail(const uint8_t *file, size_t from, size_t to, size_t stride)
{
    for (size_t n = from; n < to; n += stride) {
        strata_err err;
        int rc = parse_copy(file, n, &err, NULL);
        if (rc != STRATA_EFORMAT) fail_msg("prefix of %zu bytes: rc %d: %s", n, rc, err.msg);
        if (strstr(err.msg, "at byte") == NULL) fail_msg("no locator: %s", err.msg);
    }
}

static uint8_t *load(const char *rel, size_t *size)
{
    char path[4096];
    if (testdata_path(path, sizeof(path), rel) == NULL) return NULL;
    uint8_t *bytes = testdata_read_file(path, size);
    assert_non_null(bytes);
    return bytes;
}

static void test_every_truncation_of_stories260k(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "models/stories260K.gguf");
    size_t size = 0;
    uint8_t *file = load("models/stories260K.gguf", &size);
    gguf *g = NULL;
    strata_err err;
    assert_int_equal(parse_copy(file, size, &err, &g), 0);
    uint64_t data_offset = g->shards[0].data_offset;
    assert_int_equal(data_offset, 14176);

    /* Every byte of the header, metadata, tensor table, padding and the
     * start of the data section. */
    truncations_fail(file, 0, (size_t)data_offset + 64, 1);
    /* The data section: a stride, plus each tensor's end and one either side. */
    truncations_fail(file, (size_t)data_offset + 64, size, 331);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        size_t end = (size_t)(data_offset + g->tensors[i].offset + g->tensors[i].n_bytes);
        truncations_fail(file, end - 1, end + 2 < size ? end + 2 : size, 1);
    }
    truncations_fail(file, size - 1, size, 1);
    close_copy(g);
    free(file);
}

/* A vocab-only file ends with its last metadata value, so every proper
 * prefix is malformed. bert-bge is 627 KB: one parse plus its exact-size
 * copy costs about 0.1 ms under ASan, so all 627 K prefixes would take over
 * a minute there. The header and first keys, and the whole of the last
 * keys (small scalars, where an off-by-one at the end of the file would
 * show), are covered byte by byte; the long token arrays between them,
 * where every element goes through the same string read, with a prime
 * stride; and each key's start and value start, one byte either side. */
static void test_truncations_of_vocab_only_file(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-bert-bge.gguf");
    size_t size = 0;
    uint8_t *file = load("tokenizer/ggml-vocab-bert-bge.gguf", &size);
    gguf *g = NULL;
    strata_err err;
    assert_int_equal(parse_copy(file, size, &err, &g), 0);
    assert_int_equal(g->n_tensors, 0);
    const gguf_shard *s = &g->shards[0];
    size_t head = 8192, tail = size - (size_t)s->kvs[s->n_kv - 4].file_offset;
    assert_true(tail < 512);
    truncations_fail(file, 0, head, 1);
    truncations_fail(file, head, size - tail, 257);
    truncations_fail(file, size - tail, size, 1);
    for (uint64_t i = 0; i < s->n_kv; i++) {
        size_t at = (size_t)s->kvs[i].file_offset;
        truncations_fail(file, at - 1, at + 2, 1);
        size_t val = at + 8 + s->kvs[i].key_len + 4; /* after key and type */
        truncations_fail(file, val - 1, val + 9 < size ? val + 9 : size, 1);
    }
    close_copy(g);
    free(file);
}

/* --- (b) random mutation --- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rng_next(void)
{
    uint64_t x = g_rng; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    g_rng = x;
    return x * 2685821657736338717ULL;
}

/* Offsets of the u64 and u32 fields of a parsed file: counts, lengths,
 * dimensions, type tags and tensor offsets. */
typedef struct fields {
    size_t u64[4096];
    size_t n_u64;
    size_t u32[4096];
    size_t n_u32;
} fields;

static void add_field(size_t *arr, size_t *n, size_t at)
{
    if (*n < 4096) arr[(*n)++] = at;
}

static void collect_value_fields(fields *f, const gguf_shard *s, const gguf_value *v, size_t at)
{
    /* at: where the value's payload starts. */
    if (v->type == GGUF_VTYPE_STRING) {
        add_field(f->u64, &f->n_u64, at);
    } else if (v->type == GGUF_VTYPE_ARRAY) {
        add_field(f->u32, &f->n_u32, at);
        add_field(f->u64, &f->n_u64, at + 4);
        if (v->v.arr.elem_type == GGUF_VTYPE_STRING) {
            for (uint64_t i = 0; i < v->v.arr.n && i < 8; i++) {
                add_field(f->u64, &f->n_u64,
                          (size_t)((const uint8_t *)v->v.arr.strs[i].ptr - s->bytes) - 8);
            }
        }
    }
}

static void collect_fields(fields *f, const gguf *g)
{
    const gguf_shard *s = &g->shards[0];
    f->n_u64 = f->n_u32 = 0;
    add_field(f->u32, &f->n_u32, 4);
    add_field(f->u64, &f->n_u64, 8);
    add_field(f->u64, &f->n_u64, 16);
    for (uint64_t i = 0; i < s->n_kv; i++) {
        size_t at = (size_t)s->kvs[i].file_offset;
        add_field(f->u64, &f->n_u64, at);
        add_field(f->u32, &f->n_u32, at + 8 + s->kvs[i].key_len);
        collect_value_fields(f, s, &s->kvs[i].value, at + 12 + s->kvs[i].key_len);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        size_t at = (size_t)t->info_offset;
        add_field(f->u64, &f->n_u64, at);
        size_t dims_at = at + 8 + t->name_len;
        add_field(f->u32, &f->n_u32, dims_at);
        for (uint32_t d = 0; d < t->n_dims; d++) add_field(f->u64, &f->n_u64, dims_at + 4 + 8 * d);
        size_t type_at = dims_at + 4 + 8 * t->n_dims;
        add_field(f->u32, &f->n_u32, type_at);
        add_field(f->u64, &f->n_u64, type_at + 4);
    }
}

static uint64_t hostile_u64(size_t size)
{
    static const uint64_t picks[] = {
        0, 1, 2, 7, 8, 31, 32, 33, 255, 4096, 0x7fffffff, 0x80000000, 0xffffffff,
        0x100000000ULL, 0x7fffffffffffffffULL, 0x8000000000000000ULL, 0xffffffffffffffffULL,
        0xfffffffffffffff8ULL, 0xffffffffffffffe0ULL,
    };
    uint64_t r = rng_next();
    switch (r % 4) {
    case 0: return picks[(r >> 8) % (sizeof(picks) / sizeof(picks[0]))];
    case 1: return (uint64_t)size + ((r >> 8) % 64) - 32; /* around the file size */
    case 2: return (r >> 8) % 65536;
    default: return rng_next();
    }
}

/* Mutates buf (size bytes, exactly allocated) inside [0, region) n_iter
 * times, restoring it after each parse. */
static void mutate_and_parse(uint8_t *buf, size_t size, size_t region, const fields *f,
                             int n_iter, int *n_ok)
{
    uint8_t *saved = malloc(region);
    assert_non_null(saved);
    memcpy(saved, buf, region);
    for (int it = 0; it < n_iter; it++) {
        uint64_t kind = rng_next() % 3;
        if (kind == 0) { /* 1 to 4 random bytes */
            int n = 1 + (int)(rng_next() % 4);
            for (int k = 0; k < n; k++) buf[rng_next() % region] = (uint8_t)rng_next();
        } else if (kind == 1 && f->n_u64 > 0) {
            uint64_t v = hostile_u64(size);
            size_t at = f->u64[rng_next() % f->n_u64];
            if (at + 8 <= region) memcpy(buf + at, &v, 8);
        } else if (f->n_u32 > 0) {
            uint32_t v = (uint32_t)(rng_next() % 3 == 0 ? rng_next() : rng_next() % 48);
            size_t at = f->u32[rng_next() % f->n_u32];
            if (at + 4 <= region) memcpy(buf + at, &v, 4);
        }
        gguf *g = NULL;
        strata_err err = {0};
        int rc = gguf_open_buffer(&g, buf, size, "mutant.gguf", &err);
        if (rc == 0) {
            check_inside(g);
            gguf_close(g);
            (*n_ok)++;
        } else {
            assert_null(g);
            if (rc != STRATA_EFORMAT && rc != STRATA_EUNSUPPORTED) {
                fail_msg("iteration %d: code %d: %s", it, rc, err.msg);
            }
            assert_true(err.msg[0] != '\0');
        }
        memcpy(buf, saved, region);
    }
    free(saved);
}

static void test_random_mutations_of_stories260k(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "models/stories260K.gguf");
    size_t size = 0;
    uint8_t *file = load("models/stories260K.gguf", &size);
    gguf *g = NULL;
    strata_err err;
    assert_int_equal(parse_copy(file, size, &err, &g), 0);
    static fields f;
    collect_fields(&f, g);
    size_t region = (size_t)g->shards[0].data_offset;
    close_copy(g);

    g_rng = 0x5eed0001;
    int n_ok = 0;
    mutate_and_parse(file, size, region, &f, 4000, &n_ok);
    print_message("%d of 4000 mutants of stories260K parsed\n", n_ok);
    /* Some mutations (a flipped byte inside a string) leave a valid file;
     * if none did, the mutations never reached past the header. */
    assert_true(n_ok > 0 && n_ok < 4000);
    free(file);
}

/* --- (c) hand-built files --- */

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void bb_u32(bb *b, uint32_t x) { bb_put(b, &x, 4); }
static void bb_u64(bb *b, uint64_t x) { bb_put(b, &x, 8); }

static void bb_str(bb *b, const char *s)
{
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}

static void bb_pad(bb *b, size_t alignment)
{
    while (b->n % alignment != 0) bb_put(b, "", 1);
}

static void bb_header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    b->n = 0;
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}

static void bb_kv_u32(bb *b, const char *key, uint32_t x)
{
    bb_str(b, key);
    bb_u32(b, GGUF_VTYPE_UINT32);
    bb_u32(b, x);
}

/* A tensor record with n_dims dims from ne (at most 5 are written, so a
 * hostile count does not run the builder off ne). */
static void bb_tensor(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                      uint32_t type, uint64_t offset)
{
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims && d < 5; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, offset);
}

static void test_header_errors(void **state)
{
    (void)state;
    bb b = {0};
    expect_error((const uint8_t *)"", 0, STRATA_EFORMAT, "not a GGUF", "at byte 0");
    gguf *none = NULL;
    assert_int_equal(gguf_open_buffer(&none, NULL, 0, "null", NULL), STRATA_EFORMAT);
    assert_null(none);
    expect_error((const uint8_t *)"GGU", 3, STRATA_EFORMAT, "not a GGUF", NULL);
    bb_header(&b, 3, 0, 0);
    memcpy(b.p, "GGUX", 4);
    expect_error(b.p, b.n, STRATA_EFORMAT, "not a GGUF", "'GGUX'");
    bb_header(&b, 1, 0, 0);
    expect_error(b.p, b.n, STRATA_EUNSUPPORTED, "version 1", "at byte 4");
    bb_header(&b, 0x03000000, 0, 0);
    expect_error(b.p, b.n, STRATA_EUNSUPPORTED, "big-endian", "0x03000000");
    bb_header(&b, 4, 0, 0);
    expect_error(b.p, b.n, STRATA_EUNSUPPORTED, "version 4", NULL);
    bb_header(&b, 0, 0, 0);
    expect_error(b.p, b.n, STRATA_EUNSUPPORTED, "version 0", NULL);
    bb_header(&b, 3, 0, 1ULL << 63);
    expect_error(b.p, b.n, STRATA_EFORMAT, "metadata count 9223372036854775808", "cannot fit");
    bb_header(&b, 3, 1ULL << 63, 0);
    expect_error(b.p, b.n, STRATA_EFORMAT, "tensor count", "cannot fit");
    bb_header(&b, 3, UINT64_MAX, UINT64_MAX);
    expect_error(b.p, b.n, STRATA_EFORMAT, "cannot fit", NULL);

    /* The smallest valid files: v3 and v2 with nothing in them. */
    strata_err err;
    gguf *g = NULL;
    bb_header(&b, 3, 0, 0);
    assert_int_equal(parse_copy(b.p, b.n, &err, &g), 0);
    assert_int_equal(g->n_tensors, 0);
    assert_int_equal(g->shards[0].n_kv, 0);
    close_copy(g);
    bb_header(&b, 2, 0, 0);
    assert_int_equal(parse_copy(b.p, b.n, &err, &g), 0);
    close_copy(g);
    free(b.p);
}

static void test_metadata_errors(void **state)
{
    (void)state;
    bb b = {0};
    /* String lengths beyond the file, in a key and in a value. */
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, UINT64_MAX);
    bb_put(&b, "general.name", 12);
    expect_error(b.p, b.n, STRATA_EFORMAT, "length 18446744073709551615", "at byte 24");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "general.name");
    bb_u32(&b, GGUF_VTYPE_STRING);
    bb_u64(&b, UINT64_MAX - 7);
    bb_put(&b, "xxxxxxxxxxxxxxxx", 16);
    expect_error(b.p, b.n, STRATA_EFORMAT, "string value", "only 16 bytes remain");
    /* Keys of length 0 and keys with a NUL. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "");
    bb_u32(&b, GGUF_VTYPE_UINT32);
    bb_u32(&b, 1);
    expect_error(b.p, b.n, STRATA_EFORMAT, "has length 0", NULL);
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 3);
    bb_put(&b, "a\0b", 3);
    bb_u32(&b, GGUF_VTYPE_UINT8);
    bb_put(&b, "\x01", 1);
    expect_error(b.p, b.n, STRATA_EFORMAT, "NUL byte", NULL);
    /* Unknown value types: scalar and array element. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, 13);
    bb_u64(&b, 0);
    expect_error(b.p, b.n, STRATA_EFORMAT, "value type 13", "at byte 33");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, 0xffffffffu);
    bb_u64(&b, 0);
    expect_error(b.p, b.n, STRATA_EFORMAT, "element type 4294967295", NULL);
    /* Array counts beyond the file, for scalars, strings and arrays. */
    static const uint32_t elem_types[] = {GGUF_VTYPE_UINT8, GGUF_VTYPE_UINT64,
                                          GGUF_VTYPE_STRING, GGUF_VTYPE_ARRAY};
    for (int i = 0; i < 4; i++) {
        bb_header(&b, 3, 0, 1);
        bb_str(&b, "tokenizer.ggml.tokens");
        bb_u32(&b, GGUF_VTYPE_ARRAY);
        bb_u32(&b, elem_types[i]);
        bb_u64(&b, i % 2 ? UINT64_MAX : 1ULL << 62);
        bb_put(&b, "0123456789abcdef", 16);
        expect_error(b.p, b.n, STRATA_EFORMAT, "tokenizer.ggml.tokens", "cannot fit");
    }
    /* Duplicate key: the message points at the second. */
    bb_header(&b, 3, 0, 2);
    bb_kv_u32(&b, "llama.block_count", 1);
    size_t second = b.n;
    bb_kv_u32(&b, "llama.block_count", 2);
    char at[64];
    snprintf(at, sizeof(at), "at byte %zu", second);
    expect_error(b.p, b.n, STRATA_EFORMAT, "duplicate", at);
    free(b.p);
}

/* value = array nested `levels` deep, the innermost holding one u8. */
static void bb_nested(bb *b, int levels)
{
    bb_header(b, 3, 0, 1);
    bb_str(b, "deep");
    bb_u32(b, GGUF_VTYPE_ARRAY);
    for (int i = 0; i < levels - 1; i++) {
        bb_u32(b, GGUF_VTYPE_ARRAY);
        bb_u64(b, 1);
    }
    bb_u32(b, GGUF_VTYPE_UINT8);
    bb_u64(b, 1);
    bb_put(b, "\x2a", 1);
}

static void test_nested_arrays(void **state)
{
    (void)state;
    bb b = {0};
    bb_nested(&b, GGUF_MAX_ARRAY_DEPTH);
    strata_err err;
    gguf *g = NULL;
    assert_int_equal(parse_copy(b.p, b.n, &err, &g), 0);
    const gguf_value *v = &g->shards[0].kvs[0].value;
    for (int i = 0; i < GGUF_MAX_ARRAY_DEPTH - 1; i++) {
        assert_int_equal(v->type, GGUF_VTYPE_ARRAY);
        assert_int_equal(v->v.arr.elem_type, GGUF_VTYPE_ARRAY);
        assert_int_equal(v->v.arr.n, 1);
        v = &v->v.arr.vals[0];
    }
    assert_int_equal(v->v.arr.elem_type, GGUF_VTYPE_UINT8);
    assert_int_equal(gguf_arr_int(v, 0), 42);
    close_copy(g);

    bb_nested(&b, GGUF_MAX_ARRAY_DEPTH + 1);
    expect_error(b.p, b.n, STRATA_EFORMAT, "'deep'", "nested deeper than 8");
    /* Far deeper than any stack could recurse: stopped at the limit. */
    bb_nested(&b, 200000);
    expect_error(b.p, b.n, STRATA_EFORMAT, "nested deeper than 8", NULL);
    free(b.p);
}

static void test_alignment_errors(void **state)
{
    (void)state;
    bb b = {0};
    static const uint32_t bad[] = {0, 3, 48};
    for (int i = 0; i < 3; i++) {
        bb_header(&b, 3, 0, 1);
        bb_kv_u32(&b, "general.alignment", bad[i]);
        expect_error(b.p, b.n, STRATA_EFORMAT, "general.alignment", "power of two");
    }
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, GGUF_VTYPE_STRING);
    bb_str(&b, "32");
    expect_error(b.p, b.n, STRATA_EFORMAT, "general.alignment has type string", NULL);
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, GGUF_VTYPE_UINT64);
    bb_u64(&b, 32);
    expect_error(b.p, b.n, STRATA_EFORMAT, "uint64", NULL);

    /* Alignment 64: an offset of 32 is misaligned; 64 is fine. */
    static const uint64_t ne[1] = {8};
    for (uint64_t off = 32; off <= 64; off += 32) {
        bb_header(&b, 3, 2, 1);
        bb_kv_u32(&b, "general.alignment", 64);
        bb_tensor(&b, "a", 1, ne, 0, 0);
        bb_tensor(&b, "b", 1, ne, 0, off);
        bb_pad(&b, 64);
        for (int k = 0; k < 128; k++) bb_put(&b, "\0", 1);
        if (off == 32) {
            expect_error(b.p, b.n, STRATA_EFORMAT, "tensor 'b' has offset 32",
                         "alignment 64");
        } else {
            strata_err err;
            gguf *g = NULL;
            assert_int_equal(parse_copy(b.p, b.n, &err, &g), 0);
            assert_int_equal(g->shards[0].alignment, 64);
            assert_int_equal(g->shards[0].data_offset % 64, 0);
            close_copy(g);
        }
    }
    free(b.p);
}

/* One tensor record (and data for it) in an otherwise empty file. */
static void bb_one_tensor(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                          uint32_t type, uint64_t offset, size_t n_data)
{
    bb_header(b, 3, 1, 0);
    bb_tensor(b, name, n_dims, ne, type, offset);
    bb_pad(b, 32);
    for (size_t k = 0; k < n_data; k++) bb_put(b, "\x11", 1);
}

static void test_tensor_record_errors(void **state)
{
    (void)state;
    bb b = {0};
    const uint64_t ne[5] = {32, 2, 1, 1, 1};
    bb_one_tensor(&b, "w", 2, ne, 200, 0, 256);
    expect_error(b.p, b.n, STRATA_EFORMAT, "type id 200", "not a known tensor type");
    bb_one_tensor(&b, "w", 2, ne, 40, 0, 256);
    expect_error(b.p, b.n, STRATA_EFORMAT, "type id 40", NULL);
    bb_one_tensor(&b, "w", 2, ne, 4, 0, 256);
    expect_error(b.p, b.n, STRATA_EUNSUPPORTED, "Q4_2", "retired");
    bb_one_tensor(&b, "w", 2, ne, 31, 0, 256);
    expect_error(b.p, b.n, STRATA_EUNSUPPORTED, "Q4_0_4_4", "retired");
    bb_one_tensor(&b, "w", 5, ne, 0, 0, 256);
    expect_error(b.p, b.n, STRATA_EFORMAT, "5 dimensions", "at most 4");
    bb_one_tensor(&b, "w", UINT32_MAX, ne, 0, 0, 256);
    expect_error(b.p, b.n, STRATA_EFORMAT, "4294967295 dimensions", NULL);

    const uint64_t huge[4] = {1ULL << 32, 1ULL << 32, 1, 1};
    bb_one_tensor(&b, "w", 2, huge, 0, 0, 64);
    expect_error(b.p, b.n, STRATA_EFORMAT, "overflow", NULL);
    const uint64_t neg[1] = {1ULL << 63};
    bb_one_tensor(&b, "w", 1, neg, 0, 0, 64);
    expect_error(b.p, b.n, STRATA_EFORMAT, "overflow", NULL);
    const uint64_t big[2] = {1ULL << 31, 1ULL << 31}; /* 2^62 F64: 2^65 bytes */
    bb_one_tensor(&b, "w", 2, big, 28 /* F64 */, 0, 64);
    expect_error(b.p, b.n, STRATA_EFORMAT, "too large", NULL);
    /* Huge but representable: it simply does not fit in the file. */
    const uint64_t wide[2] = {1ULL << 20, 1ULL << 20};
    bb_one_tensor(&b, "w", 2, wide, 0, 0, 64);
    expect_error(b.p, b.n, STRATA_EFORMAT, "past the end", NULL);

    const uint64_t odd[1] = {33};
    bb_one_tensor(&b, "w", 1, odd, 2 /* Q4_0 */, 0, 64);
    expect_error(b.p, b.n, STRATA_EFORMAT, "whole number", "Q4_0");

    char name[66];
    memset(name, 'n', 65);
    name[65] = '\0';
    bb_one_tensor(&b, name, 1, ne, 0, 0, 128);
    expect_error(b.p, b.n, STRATA_EFORMAT, "name of 65 bytes", NULL);
    name[64] = '\0'; /* 64 bytes is allowed */
    strata_err err;
    gguf *g = NULL;
    bb_one_tensor(&b, name, 1, ne, 0, 0, 128);
    assert_int_equal(parse_copy(b.p, b.n, &err, &g), 0);
    assert_int_equal(strlen(g->tensors[0].name), 64);
    close_copy(g);
    bb_one_tensor(&b, "", 1, ne, 0, 0, 128);
    expect_error(b.p, b.n, STRATA_EFORMAT, "name of 0 bytes", NULL);
    free(b.p);
}

static void test_tensor_layout_errors(void **state)
{
    (void)state;
    bb b = {0};
    const uint64_t ne[1] = {16}; /* F32: 64 bytes */
    char at[64];

    bb_header(&b, 3, 2, 0);
    bb_tensor(&b, "a", 1, ne, 0, 0);
    size_t second = b.n;
    bb_tensor(&b, "a", 1, ne, 0, 64);
    bb_pad(&b, 32);
    for (int k = 0; k < 128; k++) bb_put(&b, "\0", 1);
    snprintf(at, sizeof(at), "at byte %zu", second);
    expect_error(b.p, b.n, STRATA_EFORMAT, "duplicate tensor name 'a'", at);

    bb_header(&b, 3, 2, 0);
    bb_tensor(&b, "a", 1, ne, 0, 0);
    bb_tensor(&b, "b", 1, ne, 0, 32);
    bb_pad(&b, 32);
    for (int k = 0; k < 128; k++) bb_put(&b, "\0", 1);
    expect_error(b.p, b.n, STRATA_EFORMAT, "overlap", "'a'");

    /* Ending one byte past the file, then at its last byte (valid). */
    for (int extra = 0; extra <= 1; extra++) {
        bb_one_tensor(&b, "w", 1, ne, 0, 32, 95 + (size_t)extra);
        if (extra == 0) {
            expect_error(b.p, b.n, STRATA_EFORMAT, "'w'", "past the end");
        } else {
            strata_err err;
            gguf *g = NULL;
            assert_int_equal(parse_copy(b.p, b.n, &err, &g), 0);
            close_copy(g);
        }
    }
    bb_one_tensor(&b, "w", 1, ne, 0, UINT64_MAX - 31, 64);
    expect_error(b.p, b.n, STRATA_EFORMAT, "past the end", NULL);
    bb_one_tensor(&b, "w", 1, ne, 0, 4, 128);
    expect_error(b.p, b.n, STRATA_EFORMAT, "not a multiple of the alignment 32", NULL);
    bb_one_tensor(&b, "w", 1, ne, 0, 0, 0);
    expect_error(b.p, b.n, STRATA_EFORMAT, "past the end", NULL);

    /* Zero-sized tensors may share an offset with each other and with a
     * tensor that has data, whichever is listed first; two tensors with
     * data at one offset overlap. */
    const uint64_t zero[2] = {0, 4};
    bb_header(&b, 3, 4, 0);
    bb_tensor(&b, "e1", 2, zero, 0, 0);
    bb_tensor(&b, "full", 1, ne, 0, 0);
    bb_tensor(&b, "e2", 2, zero, 0, 0);
    bb_tensor(&b, "e3", 2, zero, 0, 64);
    bb_pad(&b, 32);
    for (int k = 0; k < 64; k++) bb_put(&b, "\0", 1);
    strata_err err;
    gguf *g = NULL;
    assert_int_equal(parse_copy(b.p, b.n, &err, &g), 0);
    assert_int_equal(g->tensors[2].n_bytes, 0);
    assert_int_equal(g->tensors[1].n_bytes, 64);
    close_copy(g);
    bb_header(&b, 3, 3, 0);
    bb_tensor(&b, "e1", 2, zero, 0, 0);
    bb_tensor(&b, "a", 1, ne, 0, 0);
    bb_tensor(&b, "b", 1, ne, 0, 0);
    bb_pad(&b, 32);
    for (int k = 0; k < 64; k++) bb_put(&b, "\0", 1);
    expect_error(b.p, b.n, STRATA_EFORMAT, "overlap", NULL);
    free(b.p);
}

static void test_split_keys_in_a_buffer(void **state)
{
    (void)state;
    bb b = {0};
    bb_header(&b, 3, 0, 1);
    bb_kv_u32(&b, "split.count", 3);
    expect_error(b.p, b.n, STRATA_EFORMAT, "split.no", NULL);
    bb_header(&b, 3, 0, 2);
    bb_kv_u32(&b, "split.count", 3);
    bb_kv_u32(&b, "split.no", 3);
    expect_error(b.p, b.n, STRATA_EFORMAT, "split.no", "0..2");
    free(b.p);
}

/* Random mutation of a small hand-built file whose few fields are hit far
 * more often than in a real model: every value type, nested arrays and
 * tensors of several types. */
static void test_random_mutations_of_small_file(void **state)
{
    (void)state;
    bb b = {0};
    bb_header(&b, 3, 3, 5);
    bb_kv_u32(&b, "general.alignment", 16);
    bb_str(&b, "s");
    bb_u32(&b, GGUF_VTYPE_STRING);
    bb_str(&b, "hello");
    bb_str(&b, "strs");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, GGUF_VTYPE_STRING);
    bb_u64(&b, 3);
    bb_str(&b, "a");
    bb_str(&b, "");
    bb_str(&b, "ccc");
    bb_str(&b, "nested");
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u32(&b, GGUF_VTYPE_ARRAY);
    bb_u64(&b, 2);
    bb_u32(&b, GGUF_VTYPE_INT16);
    bb_u64(&b, 2);
    bb_put(&b, "\x01\x00\xff\xff", 4);
    bb_u32(&b, GGUF_VTYPE_FLOAT64);
    bb_u64(&b, 1);
    bb_u64(&b, 0x3ff0000000000000ULL);
    bb_str(&b, "f");
    bb_u32(&b, GGUF_VTYPE_FLOAT32);
    bb_u32(&b, 0x3f800000);
    const uint64_t ne_a[2] = {4, 2}, ne_b[1] = {32}, ne_c[3] = {2, 2, 2};
    bb_tensor(&b, "a", 2, ne_a, 0, 0);       /* F32, 32 bytes */
    bb_tensor(&b, "b", 1, ne_b, 8, 32);      /* Q8_0, 34 bytes */
    bb_tensor(&b, "c", 3, ne_c, 1, 80);      /* F16, 16 bytes */
    bb_pad(&b, 16);
    size_t region = b.n;
    for (int k = 0; k < 96; k++) bb_put(&b, "\x3c", 1);

    uint8_t *buf = malloc(b.n);
    assert_non_null(buf);
    memcpy(buf, b.p, b.n);
    strata_err err;
    gguf *g = NULL;
    assert_int_equal(parse_copy(buf, b.n, &err, &g), 0);
    assert_int_equal(g->n_tensors, 3);
    static fields f;
    collect_fields(&f, g);
    close_copy(g);

    g_rng = 0x5eed0002;
    int n_ok = 0;
    mutate_and_parse(buf, b.n, region, &f, 20000, &n_ok);
    print_message("%d of 20000 mutants parsed\n", n_ok);
    assert_true(n_ok > 0 && n_ok < 20000);
    free(buf);
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_metadata_errors),
        cmocka_unit_test(test_nested_arrays),
        cmocka_unit_test(test_alignment_errors),
        cmocka_unit_test(test_tensor_record_errors),
        cmocka_unit_test(test_tensor_layout_errors),
        cmocka_unit_test(test_split_keys_in_a_buffer),
        cmocka_unit_test(test_every_truncation_of_stories260k),
        cmocka_unit_test(test_truncations_of_vocab_only_file),
        cmocka_unit_test(test_random_mutations_of_stories260k),
        cmocka_unit_test(test_random_mutations_of_small_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
