/* The GGUF writer, checked by reading back what it wrote: metadata of every
 * value type (extremes, empty and non-ASCII strings, empty and nested
 * arrays) comes back equal and in order; tensors of several types and
 * alignments come back with identical bytes at aligned offsets; the fill
 * callback path, vocab-only files, the writer's refusals, failed writes
 * leaving no file, and a real model copied kv by kv and tensor by tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "gguf/types.h"
#include "testdata.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- helpers --- */

static void assert_contains(const char *hay, const char *needle)
{
    if (strstr(hay, needle) == NULL) fail_msg("expected '%s' in: %s", needle, hay);
}

static void scratch_path(char *out, size_t out_size, const char *name)
{
    const char *dir = testdata_scratch_dir();
    assert_non_null(dir);
    snprintf(out, out_size, "%s/%s", dir, name);
}

/* Writes w to a scratch file called name and opens the result. */
static gguf *write_and_open(gguf_writer *w, const char *name)
{
    char path[4096];
    scratch_path(path, sizeof(path), name);
    strata_err err = {0};
    int rc = gguf_writer_write_file(w, path, &err);
    if (rc != 0) fail_msg("write %s: %d: %s", name, rc, err.msg);
    gguf *g = NULL;
    rc = gguf_open(&g, path, &err);
    if (rc != 0) fail_msg("read back %s: %d: %s", name, rc, err.msg);
    return g;
}

static void add_ok(gguf_writer *w, const char *key, const gguf_value *v)
{
    strata_err err = {0};
    if (gguf_writer_add(w, key, v, &err) != 0) fail_msg("add %s: %s", key, err.msg);
}

/* Deep equality of two values, bit for bit for floats. */
static bool value_equal(const gguf_value *a, const gguf_value *b)
{
    if (a->type != b->type) return false;
    switch (a->type) {
    case GGUF_VTYPE_UINT8: case GGUF_VTYPE_UINT16: case GGUF_VTYPE_UINT32:
    case GGUF_VTYPE_UINT64:
        return a->v.u64 == b->v.u64;
    case GGUF_VTYPE_INT8: case GGUF_VTYPE_INT16: case GGUF_VTYPE_INT32: case GGUF_VTYPE_INT64:
        return a->v.i64 == b->v.i64;
    case GGUF_VTYPE_FLOAT32: case GGUF_VTYPE_FLOAT64:
        return memcmp(&a->v.f64, &b->v.f64, sizeof(double)) == 0;
    case GGUF_VTYPE_BOOL:
        return a->v.b == b->v.b;
    case GGUF_VTYPE_STRING:
        return a->v.str.len == b->v.str.len &&
               memcmp(a->v.str.ptr, b->v.str.ptr, (size_t)a->v.str.len) == 0;
    case GGUF_VTYPE_ARRAY: break;
    default: return false;
    }
    uint32_t et = a->v.arr.elem_type;
    uint64_t n = a->v.arr.n;
    if (et != b->v.arr.elem_type || n != b->v.arr.n) return false;
    if (et == GGUF_VTYPE_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            gguf_value x = {.type = GGUF_VTYPE_STRING, .v.str = a->v.arr.strs[i]};
            gguf_value y = {.type = GGUF_VTYPE_STRING, .v.str = b->v.arr.strs[i]};
            if (!value_equal(&x, &y)) return false;
        }
        return true;
    }
    if (et == GGUF_VTYPE_ARRAY) {
        for (uint64_t i = 0; i < n; i++) {
            if (!value_equal(&a->v.arr.vals[i], &b->v.arr.vals[i])) return false;
        }
        return true;
    }
    return n == 0 || memcmp(a->v.arr.raw, b->v.arr.raw, (size_t)n * gguf_vtype_size(et)) == 0;
}

static gguf_value scalar(enum gguf_vtype t)
{
    gguf_value v = {.type = t};
    return v;
}

static gguf_value array_of(enum gguf_vtype et, uint64_t n, const void *elems)
{
    gguf_value v = {.type = GGUF_VTYPE_ARRAY};
    v.v.arr.elem_type = et;
    v.v.arr.n = n;
    if (et == GGUF_VTYPE_STRING) v.v.arr.strs = elems;
    else if (et == GGUF_VTYPE_ARRAY) v.v.arr.vals = elems;
    else v.v.arr.raw = elems;
    return v;
}

/* --- metadata --- */

static const uint8_t k_u8[] = {0, 255, 7};
static const int8_t k_i8[] = {-128, 127, 0};
static const uint16_t k_u16[] = {0, 65535};
static const int16_t k_i16[] = {-32768, 32767};
static const uint32_t k_u32[] = {0, 4294967295u, 12345};
static const int32_t k_i32[] = {INT32_MIN, INT32_MAX, -1};
static const uint64_t k_u64[] = {0, INT64_MAX, 1ULL << 40};
static const int64_t k_i64[] = {INT64_MIN, INT64_MAX};
static const float k_f32[] = {1.5f, -2.25f, 1e-8f, -0.0f};
static const double k_f64[] = {0.1, -1e300, 5e-324};
static const uint8_t k_bool[] = {1, 0, 1};
static const char k_bytes[] = "caf\xc3\xa9 \xff\x80\x00 after NUL"; /* with a NUL inside */

static void test_metadata_round_trip(void **state)
{
    (void)state;
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    strata_err err = {0};

    /* Scalars: one of each type, at their extremes. */
    gguf_value v;
    v = scalar(GGUF_VTYPE_UINT8); v.v.u64 = 200; add_ok(w, "t.u8", &v);
    v = scalar(GGUF_VTYPE_INT8); v.v.i64 = -100; add_ok(w, "t.i8", &v);
    v = scalar(GGUF_VTYPE_UINT16); v.v.u64 = 65535; add_ok(w, "t.u16", &v);
    v = scalar(GGUF_VTYPE_INT16); v.v.i64 = -32768; add_ok(w, "t.i16", &v);
    assert_int_equal(gguf_writer_add_u32(w, "t.u32", 4000000000u, &err), 0);
    assert_int_equal(gguf_writer_add_i32(w, "t.i32", INT32_MIN, &err), 0);
    assert_int_equal(gguf_writer_add_f32(w, "t.f32", -1.5e-3f, &err), 0);
    assert_int_equal(gguf_writer_add_bool(w, "t.true", true, &err), 0);
    assert_int_equal(gguf_writer_add_bool(w, "t.false", false, &err), 0);
    assert_int_equal(gguf_writer_add_str(w, "t.empty", "", &err), 0);
    v = scalar(GGUF_VTYPE_STRING);
    v.v.str = (gguf_str){k_bytes, sizeof(k_bytes) - 1};
    add_ok(w, "t.bytes", &v);
    assert_int_equal(gguf_writer_add_u64(w, "t.u64", UINT64_MAX, &err), 0);
    v = scalar(GGUF_VTYPE_INT64); v.v.i64 = INT64_MIN; add_ok(w, "t.i64", &v);
    v = scalar(GGUF_VTYPE_FLOAT64); v.v.f64 = -1e300; add_ok(w, "t.f64", &v);

    /* Arrays of each scalar type. */
    assert_int_equal(gguf_writer_add_arr(w, "a.u8", GGUF_VTYPE_UINT8, 3, k_u8, &err), 0);
    assert_int_equal(gguf_writer_add_arr(w, "a.i8", GGUF_VTYPE_INT8, 3, k_i8, &err), 0);
    assert_int_equal(gguf_writer_add_arr(w, "a.u16", GGUF_VTYPE_UINT16, 2, k_u16, &err), 0);
    assert_int_equal(gguf_writer_add_arr(w, "a.i16", GGUF_VTYPE_INT16, 2, k_i16, &err), 0);
    assert_int_equal(gguf_writer_add_arr(w, "a.u32", GGUF_VTYPE_UINT32, 3, k_u32, &err), 0);
    assert_int_equal(gguf_writer_add_arr(w, "a.i32", GGUF_VTYPE_INT32, 3, k_i32, &err), 0);
    assert_int_equal(gguf_writer_add_arr(w, "a.u64", GGUF_VTYPE_UINT64, 3, k_u64, &err), 0);
    assert_int_equal(gguf_writer_add_arr(w, "a.i64", GGUF_VTYPE_INT64, 2, k_i64, &err), 0);
    assert_int_equal(gguf_writer_add_arr(w, "a.f32", GGUF_VTYPE_FLOAT32, 4, k_f32, &err), 0);
    assert_int_equal(gguf_writer_add_arr(w, "a.f64", GGUF_VTYPE_FLOAT64, 3, k_f64, &err), 0);
    assert_int_equal(gguf_writer_add_arr(w, "a.bool", GGUF_VTYPE_BOOL, 3, k_bool, &err), 0);
    const char *const strs[] = {"", "a", "\xe2\x96\x81the", "\xff\x80"};
    assert_int_equal(gguf_writer_add_str_arr(w, "a.str", 4, strs, &err), 0);

    /* Empty strings given as {NULL, 0}, as a zero-initialised value has. */
    v = scalar(GGUF_VTYPE_STRING);
    add_ok(w, "t.null_str", &v);
    const gguf_str null_strs[2] = {{NULL, 0}, {"z", 1}};
    v = array_of(GGUF_VTYPE_STRING, 2, null_strs);
    add_ok(w, "a.null_strs", &v);

    /* Empty arrays, and [[[1, 2], [3]], [[]], [], [["x", "yy"]]]. */
    assert_int_equal(gguf_writer_add_arr(w, "e.u8", GGUF_VTYPE_UINT8, 0, NULL, &err), 0);
    assert_int_equal(gguf_writer_add_str_arr(w, "e.str", 0, NULL, &err), 0);
    v = array_of(GGUF_VTYPE_ARRAY, 0, NULL);
    add_ok(w, "e.arr", &v);
    static const int32_t one_two[] = {1, 2}, three[] = {3};
    const gguf_value leaves0[2] = {array_of(GGUF_VTYPE_INT32, 2, one_two),
                                   array_of(GGUF_VTYPE_INT32, 1, three)};
    const gguf_value leaves1[1] = {array_of(GGUF_VTYPE_INT32, 0, NULL)};
    const gguf_str xy[2] = {{"x", 1}, {"yy", 2}};
    const gguf_value leaves3[1] = {array_of(GGUF_VTYPE_STRING, 2, xy)};
    const gguf_value mid[4] = {array_of(GGUF_VTYPE_ARRAY, 2, leaves0),
                               array_of(GGUF_VTYPE_ARRAY, 1, leaves1),
                               array_of(GGUF_VTYPE_ARRAY, 0, NULL),
                               array_of(GGUF_VTYPE_ARRAY, 1, leaves3)};
    const gguf_value nested = array_of(GGUF_VTYPE_ARRAY, 4, mid);
    add_ok(w, "n.nested", &nested);

    gguf *g = write_and_open(w, "meta.gguf");
    gguf_writer_free(w); /* the reader's values must not depend on the writer */

    /* Keys come back in the order they were added. */
    static const char *const order[] = {
        "t.u8", "t.i8", "t.u16", "t.i16", "t.u32", "t.i32", "t.f32", "t.true", "t.false",
        "t.empty", "t.bytes", "t.u64", "t.i64", "t.f64", "a.u8", "a.i8", "a.u16", "a.i16",
        "a.u32", "a.i32", "a.u64", "a.i64", "a.f32", "a.f64", "a.bool", "a.str", "t.null_str",
        "a.null_strs", "e.u8", "e.str", "e.arr", "n.nested",
    };
    assert_int_equal(g->shards[0].n_kv, sizeof(order) / sizeof(order[0]));
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        assert_string_equal(g->shards[0].kvs[i].key, order[i]);
    }

    int64_t i64;
    double f64;
    bool b;
    gguf_str s;
    assert_int_equal(gguf_get_int(g, "t.u8", &i64, &err), 0); assert_int_equal(i64, 200);
    assert_int_equal(gguf_get_int(g, "t.i8", &i64, &err), 0); assert_int_equal(i64, -100);
    assert_int_equal(gguf_get_int(g, "t.u16", &i64, &err), 0); assert_int_equal(i64, 65535);
    assert_int_equal(gguf_get_int(g, "t.i16", &i64, &err), 0); assert_int_equal(i64, -32768);
    assert_int_equal(gguf_get_int(g, "t.u32", &i64, &err), 0); assert_int_equal(i64, 4000000000LL);
    assert_int_equal(gguf_get_int(g, "t.i32", &i64, &err), 0); assert_int_equal(i64, INT32_MIN);
    assert_int_equal(gguf_get_int(g, "t.i64", &i64, &err), 0); assert_true(i64 == INT64_MIN);
    assert_int_equal(gguf_get_float(g, "t.f32", &f64, &err), 0);
    assert_true(f64 == (double)-1.5e-3f);
    assert_int_equal(gguf_get_float(g, "t.f64", &f64, &err), 0);
    assert_true(f64 == -1e300);
    assert_int_equal(gguf_get_bool(g, "t.true", &b, &err), 0); assert_true(b);
    assert_int_equal(gguf_get_bool(g, "t.false", &b, &err), 0); assert_false(b);
    assert_int_equal(gguf_get_str(g, "t.empty", &s, &err), 0); assert_int_equal(s.len, 0);
    assert_int_equal(gguf_get_str(g, "t.bytes", &s, &err), 0);
    assert_int_equal(s.len, sizeof(k_bytes) - 1);
    assert_memory_equal(s.ptr, k_bytes, sizeof(k_bytes) - 1);
    /* UINT64_MAX does not fit the int64 getter; the raw value is intact. */
    assert_int_equal(gguf_get_int(g, "t.u64", &i64, &err), STRATA_ERANGE);
    assert_contains(err.msg, "t.u64");
    assert_true(gguf_find_kv(g, "t.u64")->value.v.u64 == UINT64_MAX);
    assert_int_equal(gguf_find_kv(g, "t.u64")->value.type, GGUF_VTYPE_UINT64);

    const gguf_value *a;
#define CHECK_INT_ARR(key, et, src)                                              \
    do {                                                                         \
        assert_int_equal(gguf_get_arr(g, key, &a, &err), 0);                     \
        assert_int_equal(a->v.arr.elem_type, et);                                \
        assert_int_equal(a->v.arr.n, sizeof(src) / sizeof(src[0]));              \
        for (size_t k = 0; k < sizeof(src) / sizeof(src[0]); k++) {              \
            assert_true(gguf_arr_int(a, k) == (int64_t)src[k]);                  \
        }                                                                        \
    } while (0)
    CHECK_INT_ARR("a.u8", GGUF_VTYPE_UINT8, k_u8);
    CHECK_INT_ARR("a.i8", GGUF_VTYPE_INT8, k_i8);
    CHECK_INT_ARR("a.u16", GGUF_VTYPE_UINT16, k_u16);
    CHECK_INT_ARR("a.i16", GGUF_VTYPE_INT16, k_i16);
    CHECK_INT_ARR("a.u32", GGUF_VTYPE_UINT32, k_u32);
    CHECK_INT_ARR("a.i32", GGUF_VTYPE_INT32, k_i32);
    CHECK_INT_ARR("a.u64", GGUF_VTYPE_UINT64, k_u64);
    CHECK_INT_ARR("a.i64", GGUF_VTYPE_INT64, k_i64);
    CHECK_INT_ARR("a.bool", GGUF_VTYPE_BOOL, k_bool);
#undef CHECK_INT_ARR
    assert_int_equal(gguf_get_arr(g, "a.f32", &a, &err), 0);
    assert_int_equal(a->v.arr.elem_type, GGUF_VTYPE_FLOAT32);
    for (uint64_t k = 0; k < 4; k++) assert_true(gguf_arr_float(a, k) == (double)k_f32[k]);
    assert_true(signbit(gguf_arr_float(a, 3)));
    assert_int_equal(gguf_get_arr(g, "a.f64", &a, &err), 0);
    for (uint64_t k = 0; k < 3; k++) assert_true(gguf_arr_float(a, k) == k_f64[k]);
    assert_int_equal(gguf_get_arr(g, "a.str", &a, &err), 0);
    assert_int_equal(a->v.arr.elem_type, GGUF_VTYPE_STRING);
    assert_int_equal(a->v.arr.n, 4);
    for (uint64_t k = 0; k < 4; k++) {
        s = gguf_arr_str(a, k);
        assert_int_equal(s.len, strlen(strs[k]));
        if (s.len > 0) assert_memory_equal(s.ptr, strs[k], s.len);
    }

    assert_int_equal(gguf_get_str(g, "t.null_str", &s, &err), 0);
    assert_int_equal(s.len, 0);
    assert_int_equal(gguf_get_arr(g, "a.null_strs", &a, &err), 0);
    assert_int_equal(gguf_arr_str(a, 0).len, 0);
    assert_int_equal(gguf_arr_str(a, 1).len, 1);

    static const char *const empties[] = {"e.u8", "e.str", "e.arr"};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(gguf_get_arr(g, empties[k], &a, &err), 0);
        assert_int_equal(a->v.arr.n, 0);
    }
    assert_int_equal(gguf_get_arr(g, "e.str", &a, &err), 0);
    assert_int_equal(a->v.arr.elem_type, GGUF_VTYPE_STRING);

    assert_int_equal(gguf_get_arr(g, "n.nested", &a, &err), 0);
    assert_true(value_equal(a, &nested));
    assert_int_equal(a->v.arr.n, 4);
    const gguf_value *leaf = &a->v.arr.vals[0].v.arr.vals[0];
    assert_int_equal(leaf->v.arr.elem_type, GGUF_VTYPE_INT32);
    assert_int_equal(gguf_arr_int(leaf, 1), 2);
    assert_int_equal(a->v.arr.vals[1].v.arr.vals[0].v.arr.n, 0);
    assert_true(gguf_arr_str(&a->v.arr.vals[3].v.arr.vals[0], 1).len == 2);
    gguf_close(g);
}

/* --- tensors --- */

typedef struct tensor_spec {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[4];
} tensor_spec;

static const tensor_spec k_specs[] = {
    {"f32", STRATA_TYPE_F32, 2, {7, 3}},
    {"empty", STRATA_TYPE_F32, 2, {0, 4}},
    {"f16", STRATA_TYPE_F16, 1, {5}},
    {"bf16", STRATA_TYPE_BF16, 3, {3, 2, 2}},
    {"q8_0", STRATA_TYPE_Q8_0, 2, {64, 2}},
    {"q4_0", STRATA_TYPE_Q4_0, 2, {32, 3}},
    {"q4_k", STRATA_TYPE_Q4_K, 1, {256}},
    {"q6_k", STRATA_TYPE_Q6_K, 2, {256, 2}},
    {"iq4_xs", STRATA_TYPE_IQ4_XS, 2, {256, 3}},
    {"scalar", STRATA_TYPE_F32, 0, {0}},
    {"blk.0.four_dims.weight", STRATA_TYPE_F16, 4, {2, 3, 1, 2}},
};
#define N_SPECS (sizeof(k_specs) / sizeof(k_specs[0]))

static size_t spec_bytes(const tensor_spec *t)
{
    int64_t rows = 1;
    for (uint32_t d = 1; d < t->n_dims; d++) rows *= t->ne[d];
    int64_t ne0 = t->n_dims > 0 ? t->ne[0] : 1;
    return strata_type_row_bytes(t->type, ne0) * (size_t)rows;
}

static uint8_t *random_bytes(size_t n, uint32_t seed)
{
    uint8_t *p = malloc(n > 0 ? n : 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
    return p;
}

static uint64_t round_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

static void test_tensors_round_trip_at_each_alignment(void **state)
{
    (void)state;
    static const uint32_t alignments[] = {1, 8, 32, 64, 4096};
    for (size_t ai = 0; ai < sizeof(alignments) / sizeof(alignments[0]); ai++) {
        uint32_t alignment = alignments[ai];
        gguf_writer *w = gguf_writer_new();
        strata_err err = {0};
        assert_int_equal(gguf_writer_add_str(w, "general.architecture", "test", &err), 0);
        assert_int_equal(gguf_writer_set_alignment(w, alignment, &err), 0);
        uint8_t *data[N_SPECS];
        for (size_t i = 0; i < N_SPECS; i++) {
            const tensor_spec *t = &k_specs[i];
            data[i] = random_bytes(spec_bytes(t), (uint32_t)(i + 100 * ai));
            if (gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, data[i], &err) != 0) {
                fail_msg("add %s: %s", t->name, err.msg);
            }
        }
        assert_int_equal(gguf_writer_n_tensors(w), N_SPECS);
        char name[64];
        snprintf(name, sizeof(name), "align%u.gguf", alignment);
        gguf *g = write_and_open(w, name);
        gguf_writer_free(w);

        const gguf_shard *s = &g->shards[0];
        assert_int_equal(s->alignment, alignment);
        assert_int_equal(s->data_offset % alignment, 0);
        int64_t recorded;
        int rc = gguf_get_int(g, "general.alignment", &recorded, NULL);
        if (alignment == GGUF_DEFAULT_ALIGNMENT) {
            assert_int_equal(rc, STRATA_ENOTFOUND);
        } else {
            assert_int_equal(rc, 0);
            assert_int_equal(recorded, alignment);
            assert_int_equal(gguf_find_kv(g, "general.alignment")->value.type, GGUF_VTYPE_UINT32);
        }
        assert_int_equal(g->n_tensors, N_SPECS);
        uint64_t expect_offset = 0;
        for (size_t i = 0; i < N_SPECS; i++) {
            const tensor_spec *spec = &k_specs[i];
            const gguf_tensor *t = &g->tensors[i];
            assert_string_equal(t->name, spec->name);
            assert_ptr_equal(gguf_find_tensor(g, spec->name), t);
            assert_int_equal(t->type, spec->type);
            assert_int_equal(t->n_dims, spec->n_dims);
            for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
                assert_int_equal(t->ne[d], d < spec->n_dims ? spec->ne[d] : 1);
            }
            assert_int_equal(t->n_bytes, spec_bytes(spec));
            /* Packed in order, each padded to the alignment. */
            assert_int_equal(t->offset, expect_offset);
            assert_int_equal(t->offset % alignment, 0);
            assert_ptr_equal(t->data, s->bytes + s->data_offset + t->offset);
            if (t->n_bytes > 0) assert_memory_equal(t->data, data[i], t->n_bytes);
            expect_offset += round_up(t->n_bytes, alignment);
            free(data[i]);
        }
        /* The last tensor is padded too. */
        assert_int_equal(s->size, s->data_offset + expect_offset);
        gguf_close(g);
    }
}

typedef struct fill_log {
    int n_calls;
    uint64_t indices[8];
    int fail_at; /* index to fail, or -1 */
} fill_log;

static int fill_pattern(void *ctx, uint64_t i, void *dst, size_t n_bytes)
{
    fill_log *log = ctx;
    if (log->n_calls < 8) log->indices[log->n_calls] = i;
    log->n_calls++;
    if (log->fail_at >= 0 && (uint64_t)log->fail_at == i) return STRATA_EIO;
    for (size_t k = 0; k < n_bytes; k++) ((uint8_t *)dst)[k] = (uint8_t)(i * 31 + k);
    return 0;
}

static void test_fill_callback(void **state)
{
    (void)state;
    fill_log log = {.fail_at = -1};
    gguf_writer *w = gguf_writer_new();
    strata_err err = {0};
    const int64_t ne_a[2] = {256, 2}, ne_b[1] = {64}, ne_c[2] = {32, 5};
    uint8_t *ref = random_bytes(64 * 4, 7);
    assert_int_equal(gguf_writer_add_tensor_fill(w, "a", STRATA_TYPE_Q4_K, 2, ne_a, fill_pattern,
                                                 &log, &err), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "b", STRATA_TYPE_F32, 1, ne_b, ref, &err), 0);
    assert_int_equal(gguf_writer_add_tensor_fill(w, "c", STRATA_TYPE_Q8_0, 2, ne_c, fill_pattern,
                                                 &log, &err), 0);
    gguf *g = write_and_open(w, "fill.gguf");
    assert_int_equal(log.n_calls, 2);
    assert_int_equal(log.indices[0], 0);
    assert_int_equal(log.indices[1], 2);
    static const char *const names[] = {"a", "c"};
    static const uint64_t idx[] = {0, 2};
    for (int k = 0; k < 2; k++) {
        const gguf_tensor *t = gguf_find_tensor(g, names[k]);
        assert_non_null(t);
        assert_true(t->n_bytes > 0);
        for (size_t j = 0; j < t->n_bytes; j++) {
            assert_int_equal(((const uint8_t *)t->data)[j], (uint8_t)(idx[k] * 31 + j));
        }
    }
    assert_memory_equal(gguf_find_tensor(g, "b")->data, ref, 64 * 4);
    gguf_close(g);

    /* A failing callback aborts the write with its code, and leaves neither
     * the file nor a temporary beside it. */
    log = (fill_log){.fail_at = 2};
    char path[4096];
    scratch_path(path, sizeof(path), "fill-fails.gguf");
    assert_int_equal(gguf_writer_write_file(w, path, &err), STRATA_EIO);
    assert_contains(err.msg, "'c'");
    assert_int_equal(access(path, F_OK), -1);
    DIR *d = opendir(testdata_scratch_dir());
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strstr(e->d_name, "fill-fails") != NULL) fail_msg("left behind: %s", e->d_name);
    }
    closedir(d);
    gguf_writer_free(w);
    free(ref);
}

static void test_vocab_only_file(void **state)
{
    (void)state;
    gguf_writer *w = gguf_writer_new();
    strata_err err = {0};
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", &err), 0);
    gguf *g = write_and_open(w, "vocab.gguf");
    gguf_writer_free(w);
    /* header 24 + key (8 + 20) + type 4 + value (8 + 5): no padding after. */
    assert_int_equal(g->shards[0].size, 24 + 8 + 20 + 4 + 8 + 5);
    assert_int_equal(g->n_tensors, 0);
    gguf_str s;
    assert_int_equal(gguf_get_str(g, "tokenizer.ggml.model", &s, &err), 0);
    assert_int_equal(s.len, 5);
    gguf_close(g);
}

static void test_writer_refusals(void **state)
{
    (void)state;
    gguf_writer *w = gguf_writer_new();
    strata_err err = {0};
    const int64_t ne[2] = {32, 2};
    static const float zeros[64];
    assert_int_equal(gguf_writer_add_u32(w, "k", 1, &err), 0);
    assert_int_equal(gguf_writer_add_u32(w, "k", 2, &err), STRATA_EINVAL);
    assert_contains(err.msg, "'k'");
    assert_contains(err.msg, "twice");
    assert_int_equal(gguf_writer_add_str(w, "k", "x", &err), STRATA_EINVAL);
    assert_int_equal(gguf_writer_add_u32(w, "", 1, &err), STRATA_EINVAL);

    assert_int_equal(gguf_writer_add_tensor(w, "t", STRATA_TYPE_F32, 2, ne, zeros, &err), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "t", STRATA_TYPE_F32, 2, ne, zeros, &err),
                     STRATA_EINVAL);
    assert_contains(err.msg, "'t' added twice");

    static const uint32_t bad_align[] = {0, 3, 48, 0x80000001u};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(gguf_writer_set_alignment(w, bad_align[i], &err), STRATA_EINVAL);
        assert_contains(err.msg, "power of two");
    }

    const int64_t odd[1] = {33};
    assert_int_equal(gguf_writer_add_tensor(w, "q", STRATA_TYPE_Q4_0, 1, odd, zeros, &err),
                     STRATA_EINVAL);
    assert_contains(err.msg, "Q4_0 blocks of 32");
    const int64_t k_odd[2] = {128, 2};
    assert_int_equal(gguf_writer_add_tensor(w, "k4", STRATA_TYPE_Q4_K, 2, k_odd, zeros, &err),
                     STRATA_EINVAL);
    assert_int_equal(gguf_writer_add_tensor(w, "r", STRATA_TYPE_Q4_2, 2, ne, zeros, &err),
                     STRATA_EINVAL);
    assert_int_equal(gguf_writer_add_tensor(w, "u", 200, 2, ne, zeros, &err), STRATA_EINVAL);
    assert_int_equal(gguf_writer_add_tensor(w, "d", STRATA_TYPE_F32, 5, ne, zeros, &err),
                     STRATA_EINVAL);
    const int64_t negative[2] = {32, -1};
    assert_int_equal(gguf_writer_add_tensor(w, "n", STRATA_TYPE_F32, 2, negative, zeros, &err),
                     STRATA_EINVAL);
    char long_name[66];
    memset(long_name, 'x', 65);
    long_name[65] = '\0';
    assert_int_equal(gguf_writer_add_tensor(w, long_name, STRATA_TYPE_F32, 2, ne, zeros, &err),
                     STRATA_EINVAL);

    /* Values the format cannot hold: unknown types, arrays nested too deep. */
    gguf_value bad = {.type = GGUF_VTYPE_COUNT};
    assert_int_equal(gguf_writer_add(w, "bad", &bad, &err), STRATA_EINVAL);
    static const uint8_t one[1] = {1};
    gguf_value levels[GGUF_MAX_ARRAY_DEPTH + 1];
    levels[0] = array_of(GGUF_VTYPE_UINT8, 1, one);
    for (int i = 1; i <= GGUF_MAX_ARRAY_DEPTH; i++) {
        levels[i] = array_of(GGUF_VTYPE_ARRAY, 1, &levels[i - 1]);
    }
    assert_int_equal(gguf_writer_add(w, "deep8", &levels[GGUF_MAX_ARRAY_DEPTH - 1], &err), 0);
    assert_int_equal(gguf_writer_add(w, "deep9", &levels[GGUF_MAX_ARRAY_DEPTH], &err),
                     STRATA_EINVAL);
    assert_contains(err.msg, "deep9");

    /* The refusals left the writer as it was. */
    gguf *g = write_and_open(w, "refusals.gguf");
    assert_int_equal(g->shards[0].n_kv, 2);
    assert_int_equal(g->n_tensors, 1);
    int64_t k;
    assert_int_equal(gguf_get_int(g, "k", &k, &err), 0);
    assert_int_equal(k, 1);
    const gguf_value *deep;
    assert_int_equal(gguf_get_arr(g, "deep8", &deep, &err), 0);
    assert_true(value_equal(deep, &levels[GGUF_MAX_ARRAY_DEPTH - 1]));
    gguf_close(g);

    /* I/O failures: a folder that does not exist, a full device. */
    assert_int_equal(gguf_writer_write_file(w, "/nonexistent/dir/x.gguf", &err), STRATA_EIO);
    assert_contains(err.msg, "/nonexistent/dir/x.gguf");
    FILE *full = fopen("/dev/full", "wb");
    if (full != NULL) {
        assert_int_equal(gguf_writer_write(w, full, "/dev/full", &err), STRATA_EIO);
        assert_contains(err.msg, "write failed");
        fclose(full);
    }
    gguf_writer_free(w);
}

/* Copying a real model kv by kv and tensor by tensor reproduces its
 * metadata and tensors; since llama.cpp also packs tensors in order at the
 * default alignment, the copy is byte-identical to the original. */
static void test_copy_of_real_model(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "models/stories260K.gguf");
    strata_err err = {0};
    gguf *src = NULL;
    assert_int_equal(gguf_open(&src, path, &err), 0);
    gguf_writer *w = gguf_writer_new();
    const gguf_shard *ss = &src->shards[0];
    for (uint64_t i = 0; i < ss->n_kv; i++) add_ok(w, ss->kvs[i].key, &ss->kvs[i].value);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        assert_int_equal(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                                &err), 0);
    }
    gguf *g = write_and_open(w, "copy.gguf");
    gguf_writer_free(w);

    const gguf_shard *cs = &g->shards[0];
    assert_int_equal(cs->n_kv, ss->n_kv);
    for (uint64_t i = 0; i < ss->n_kv; i++) {
        assert_string_equal(cs->kvs[i].key, ss->kvs[i].key);
        if (!value_equal(&cs->kvs[i].value, &ss->kvs[i].value)) {
            fail_msg("value of %s differs", ss->kvs[i].key);
        }
    }
    assert_int_equal(g->n_tensors, src->n_tensors);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *a = &src->tensors[i], *b = &g->tensors[i];
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->type, b->type);
        assert_int_equal(a->n_dims, b->n_dims);
        assert_memory_equal(a->ne, b->ne, sizeof(a->ne));
        assert_int_equal(a->offset, b->offset);
        assert_memory_equal(a->data, b->data, a->n_bytes);
    }
    assert_int_equal(cs->size, ss->size);
    assert_memory_equal(cs->bytes, ss->bytes, ss->size);
    gguf_close(g);
    gguf_close(src);
}

/* general.alignment added as an ordinary key (as when copying a model's
 * metadata) moves the tensors to that alignment, and a value the reader
 * would refuse is refused by the writer too. */
static void test_alignment_given_as_key(void **state)
{
    (void)state;
    static const float a[5] = {1, 2, 3, 4, 5};
    static const float b[8] = {6, 7, 8, 9, 10, 11, 12, 13};
    strata_err err;
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(gguf_writer_add_u32(w, "general.alignment", 64, &err), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "a", STRATA_TYPE_F32, 1, (int64_t[]){5}, a, &err), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "b", STRATA_TYPE_F32, 1, (int64_t[]){8}, b, &err), 0);
    gguf *g = write_and_open(w, "align-key.gguf");
    assert_int_equal(g->shards[0].alignment, 64);
    const gguf_tensor *tb = gguf_find_tensor(g, "b");
    assert_non_null(tb);
    assert_int_equal(tb->offset, 64);
    assert_memory_equal(tb->data, b, sizeof(b));
    gguf_close(g);
    gguf_writer_free(w);

    w = gguf_writer_new();
    assert_int_equal(gguf_writer_add_u32(w, "general.alignment", 48, &err), STRATA_EINVAL);
    assert_int_equal(gguf_writer_add_str(w, "general.alignment", "64", &err), STRATA_EINVAL);
    assert_int_equal(gguf_writer_add_u32(w, "general.alignment", 0, &err), STRATA_EINVAL);
    assert_contains(err.msg, "power of two");
    gguf_writer_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metadata_round_trip),
        cmocka_unit_test(test_tensors_round_trip_at_each_alignment),
        cmocka_unit_test(test_fill_callback),
        cmocka_unit_test(test_vocab_only_file),
        cmocka_unit_test(test_writer_refusals),
        cmocka_unit_test(test_copy_of_real_model),
        cmocka_unit_test(test_alignment_given_as_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
