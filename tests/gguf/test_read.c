/* Reading real GGUF files: every file of the reference data parses; the
 * header, metadata and tensor table of two models match the facts that
 * gguf-py recorded beside them (.info.json); the golden models carry the
 * tensor types models.json lists; v1 is refused and v2 loads; typed getters,
 * tensor lookup, and tensor data placement (inside the mapping, aligned,
 * really the file's bytes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf/types.h"
#include "testdata.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- helpers --- */

static void assert_contains(const char *hay, const char *needle)
{
    if (strstr(hay, needle) == NULL) fail_msg("expected '%s' in: %s", needle, hay);
}

static gguf *open_ok(const char *path)
{
    gguf *g = NULL;
    strata_err err = {0};
    int rc = gguf_open(&g, path, &err);
    if (rc != 0) fail_msg("%s: gguf_open failed (%d): %s", path, rc, err.msg);
    assert_non_null(g);
    return g;
}

static bool str_eq(gguf_str s, const char *z)
{
    return s.len == strlen(z) && memcmp(s.ptr, z, (size_t)s.len) == 0;
}

/* Facts every well-formed single-file model satisfies: tensor data lies in
 * the mapping, after the data offset, aligned relative to it, and the
 * records agree with the type table. */
static void check_tensor_placement(const gguf *g)
{
    const gguf_shard *s = &g->shards[0];
    assert_int_equal(s->data_offset % s->alignment, 0);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const uint8_t *p = t->data;
        assert_true(strata_type_usable(t->type));
        assert_true(p >= s->bytes + s->data_offset);
        assert_true(p + t->n_bytes <= s->bytes + s->size);
        assert_int_equal((uint64_t)(p - s->bytes) - s->data_offset, t->offset);
        assert_int_equal(t->offset % s->alignment, 0);
        int64_t n = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) n *= t->ne[d];
        assert_int_equal(n, t->n_elems);
        size_t row = strata_type_row_bytes(t->type, t->ne[0]);
        assert_int_equal(t->n_bytes, row * (size_t)(t->n_elems / t->ne[0]));
        assert_ptr_equal(gguf_find_tensor(g, t->name), t);
    }
}

/* Calls fn(path) for each file in data folder `rel` whose name ends in suffix. */
static int for_each_file(const char *rel, const char *suffix, void (*fn)(const char *path))
{
    char dir_path[4096];
    if (testdata_path(dir_path, sizeof(dir_path), rel) == NULL) return 0;
    DIR *d = opendir(dir_path);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name), sl = strlen(suffix);
        if (len < sl || strcmp(e->d_name + len - sl, suffix) != 0) continue;
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", dir_path, e->d_name);
        fn(path);
        n++;
    }
    closedir(d);
    return n;
}

static void check_model_file(const char *path)
{
    gguf *g = open_ok(path);
    assert_int_equal(g->n_shards, 1);
    assert_true(g->shards[0].version == 2 || g->shards[0].version == 3);
    assert_true(g->n_tensors > 0);
    assert_true(gguf_arch(g).len > 0);
    check_tensor_placement(g);
    gguf_close(g);
}

/* Vocab-only: no tensors, and the metadata runs to the end of the file, so
 * the data section (the next aligned offset after it) starts within one
 * alignment past the end. */
static void check_vocab_file(const char *path)
{
    gguf *g = open_ok(path);
    const gguf_shard *s = &g->shards[0];
    assert_int_equal(g->n_tensors, 0);
    assert_true(s->data_offset >= s->size);
    assert_true(s->data_offset < s->size + s->alignment);
    const gguf_value *tokens = NULL;
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens, NULL), 0);
    assert_int_equal(tokens->v.arr.elem_type, GGUF_VTYPE_STRING);
    assert_true(tokens->v.arr.n > 100);
    gguf_str model;
    assert_int_equal(gguf_get_str(g, "tokenizer.ggml.model", &model, NULL), 0);
    assert_true(model.len > 0);
    gguf_close(g);
}

/* --- every file parses --- */

static void test_every_model_parses(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    assert_true(for_each_file("models", ".gguf", check_model_file) >= 2);
    assert_true(for_each_file("golden/models", ".gguf", check_model_file) >= 26);
}

static void test_every_vocab_file_parses(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    assert_true(for_each_file("tokenizer", ".gguf", check_vocab_file) >= 12);
}

static void test_legacy_v2_loads(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/legacy/ggml-vocab-falcon.gguf-v2");
    gguf *g = open_ok(path);
    assert_int_equal(g->shards[0].version, 2);
    gguf_close(g);
    check_vocab_file(path);
}

static void test_legacy_v1_refused(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/legacy/ggml-vocab-llama.gguf-v1");
    gguf *g = (gguf *)1;
    strata_err err = {0};
    assert_int_equal(gguf_open(&g, path, &err), STRATA_EUNSUPPORTED);
    assert_null(g);
    assert_int_equal(err.code, STRATA_EUNSUPPORTED);
    assert_contains(err.msg, "version 1");
    assert_contains(err.msg, "ggml-vocab-llama.gguf-v1");
}

/* Files that cannot be models: missing, a folder, empty. */
static void test_unopenable_files(void **state)
{
    (void)state;
    gguf *g = NULL;
    strata_err err = {0};
    assert_int_equal(gguf_open(&g, "/nonexistent/dir/model.gguf", &err), STRATA_ENOTFOUND);
    assert_null(g);
    assert_contains(err.msg, "/nonexistent/dir/model.gguf");

    const char *dir = testdata_scratch_dir();
    assert_non_null(dir);
    assert_int_equal(gguf_open(&g, dir, &err), STRATA_EIO);
    assert_null(g);
    assert_contains(err.msg, dir);

    char path[4200];
    snprintf(path, sizeof(path), "%s/empty.gguf", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(gguf_open(&g, path, &err), STRATA_EFORMAT);
    assert_null(g);
    assert_contains(err.msg, "empty.gguf");
    assert_contains(err.msg, "empty");
}

/* --- against .info.json --- */

/* Parses the Python list repr after "first=[" into up to max items; string
 * items are unquoted into strs (malloc'd), numbers into nums. Returns count. */
static int parse_first_list(const char *p, char **strs, double *nums, int max)
{
    int n = 0;
    while (*p != '\0' && *p != ']' && n < max) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ']') break;
        if (*p == '\'' || *p == '"') {
            char q = *p++;
            char buf[256];
            size_t k = 0;
            while (*p != q) {
                assert_true(*p != '\0');
                char ch = *p++;
                if (ch == '\\') {
                    ch = *p++;
                    if (ch == 'n') ch = '\n';
                    else if (ch == 't') ch = '\t';
                    else if (ch != '\\' && ch != '\'' && ch != '"') fail_msg("escape \\%c", ch);
                }
                assert_true(k + 1 < sizeof(buf));
                buf[k++] = ch;
            }
            p++;
            buf[k] = '\0';
            strs[n] = strdup(buf);
            nums[n] = 0;
        } else {
            char *end;
            nums[n] = strtod(p, &end);
            assert_true(end != p);
            strs[n] = NULL;
            p = end;
        }
        n++;
    }
    return n;
}

static void check_array_summary(const gguf *g, const char *key, const char *desc)
{
    const gguf_value *arr = NULL;
    strata_err err = {0};
    if (gguf_get_arr(g, key, &arr, &err) != 0) fail_msg("%s", err.msg);
    unsigned elem_type = 0;
    unsigned long long len = 0;
    int used = 0;
    int n_read = sscanf(desc, "array[type=%u, len=%llu] first=[%n", &elem_type, &len, &used);
    assert_int_equal(n_read, 2);
    assert_true(used > 0);
    assert_int_equal(arr->v.arr.elem_type, elem_type);
    assert_int_equal(arr->v.arr.n, len);
    char *strs[8];
    double nums[8];
    int n = parse_first_list(desc + used, strs, nums, 8);
    assert_true(n > 0 && (uint64_t)n <= arr->v.arr.n);
    for (int i = 0; i < n; i++) {
        if (elem_type == GGUF_VTYPE_STRING) {
            assert_non_null(strs[i]);
            if (!str_eq(gguf_arr_str(arr, (uint64_t)i), strs[i])) {
                fail_msg("%s[%d] != '%s'", key, i, strs[i]);
            }
            free(strs[i]);
        } else if (elem_type == GGUF_VTYPE_FLOAT32 || elem_type == GGUF_VTYPE_FLOAT64) {
            assert_float_equal(gguf_arr_float(arr, (uint64_t)i), nums[i], 1e-6);
        } else {
            assert_true(gguf_vtype_is_int(elem_type));
            assert_int_equal(gguf_arr_int(arr, (uint64_t)i), (int64_t)nums[i]);
        }
    }
}

static void check_metadata_value(const gguf *g, const char *key, json_t *want)
{
    strata_err err = {0};
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (kv == NULL) fail_msg("key '%s' missing", key);
    if (json_is_string(want)) {
        const char *s = json_string_value(want);
        if (strncmp(s, "array[type=", 11) == 0) {
            check_array_summary(g, key, s);
            return;
        }
        gguf_str got;
        if (gguf_get_str(g, key, &got, &err) != 0) fail_msg("%s", err.msg);
        if (!str_eq(got, s)) fail_msg("%s = '%.*s', want '%s'", key, (int)got.len, got.ptr, s);
    } else if (json_is_integer(want)) {
        int64_t got;
        if (gguf_get_int(g, key, &got, &err) != 0) fail_msg("%s", err.msg);
        assert_int_equal(got, json_integer_value(want));
    } else if (json_is_real(want)) {
        double got, w = json_real_value(want);
        assert_true(kv->value.type == GGUF_VTYPE_FLOAT32 || kv->value.type == GGUF_VTYPE_FLOAT64);
        if (gguf_get_float(g, key, &got, &err) != 0) fail_msg("%s", err.msg);
        assert_float_equal(got, w, fabs(w) * 1e-6 + 1e-12);
    } else if (json_is_boolean(want)) {
        bool got;
        if (gguf_get_bool(g, key, &got, &err) != 0) fail_msg("%s", err.msg);
        assert_int_equal(got, json_is_true(want));
    } else {
        fail_msg("unexpected JSON type for %s", key);
    }
}

static void check_info_json(const char *rel)
{
    char path[4096], json_path[4200];
    TESTDATA_FILE(path, rel);
    snprintf(json_path, sizeof(json_path), "%s.info.json", path);
    json_error_t jerr;
    json_t *info = json_load_file(json_path, 0, &jerr);
    if (info == NULL) fail_msg("%s: %s", json_path, jerr.text);

    gguf *g = open_ok(path);
    const gguf_shard *s = &g->shards[0];
    assert_int_equal(s->version, json_integer_value(json_object_get(info, "gguf_version")));
    assert_int_equal(g->n_tensors, json_integer_value(json_object_get(info, "n_tensors")));
    assert_int_equal(s->n_kv, json_integer_value(json_object_get(info, "n_kv")));
    assert_int_equal(s->data_offset, json_integer_value(json_object_get(info, "data_offset")));
    assert_int_equal(s->size, json_integer_value(json_object_get(info, "size")));
    assert_int_equal(g->total_size, s->size);

    json_t *meta = json_object_get(info, "metadata");
    assert_int_equal(json_object_size(meta), s->n_kv);
    const char *key;
    json_t *want;
    json_object_foreach(meta, key, want) check_metadata_value(g, key, want);

    json_t *tensors = json_object_get(info, "tensors");
    assert_int_equal(json_array_size(tensors), g->n_tensors);
    int64_t n_params = 0;
    for (size_t i = 0; i < json_array_size(tensors); i++) {
        json_t *jt = json_array_get(tensors, i);
        const gguf_tensor *t = &g->tensors[i];
        assert_string_equal(t->name, json_string_value(json_array_get(jt, 0)));
        json_t *shape = json_array_get(jt, 1);
        assert_int_equal(t->n_dims, json_array_size(shape));
        for (size_t d = 0; d < json_array_size(shape); d++) {
            assert_int_equal(t->ne[d], json_integer_value(json_array_get(shape, d)));
        }
        assert_string_equal(strata_type_name(t->type), json_string_value(json_array_get(jt, 2)));
        n_params += t->n_elems;
    }
    assert_int_equal(n_params, json_integer_value(json_object_get(info, "n_params")));

    json_t *counts = json_object_get(info, "tensor_types");
    json_t *count;
    const char *type_name;
    json_object_foreach(counts, type_name, count) {
        int64_t n = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            n += strcmp(strata_type_name(g->tensors[i].type), type_name) == 0;
        }
        assert_int_equal(n, json_integer_value(count));
    }
    check_tensor_placement(g);
    gguf_close(g);
    json_decref(info);
}

static void test_stories260k_matches_info_json(void **state)
{
    (void)state;
    check_info_json("models/stories260K.gguf");
}

static void test_llama2_tiny_matches_info_json(void **state)
{
    (void)state;
    check_info_json("models/llama-2-tiny-random.gguf");
}

static void test_golden_models_match_models_json(void **state)
{
    (void)state;
    char json_path[4096];
    TESTDATA_FILE(json_path, "golden/models/models.json");
    json_error_t jerr;
    json_t *models = json_load_file(json_path, 0, &jerr);
    if (models == NULL) fail_msg("%s: %s", json_path, jerr.text);
    assert_true(json_object_size(models) >= 26);

    const char *file;
    json_t *m;
    json_object_foreach(models, file, m) {
        char rel[512], path[4096];
        snprintf(rel, sizeof(rel), "golden/models/%s", file);
        if (testdata_path(path, sizeof(path), rel) == NULL) fail_msg("%s is missing", rel);
        gguf *g = open_ok(path);
        assert_int_equal(g->shards[0].size, json_integer_value(json_object_get(m, "size_bytes")));
        json_t *types = json_object_get(m, "tensor_types");
        assert_int_equal(json_object_size(types), g->n_tensors);
        const char *name;
        json_t *type;
        json_object_foreach(types, name, type) {
            const gguf_tensor *t = gguf_find_tensor(g, name);
            if (t == NULL) fail_msg("%s: tensor %s missing", file, name);
            if (strcmp(strata_type_name(t->type), json_string_value(type)) != 0) {
                fail_msg("%s: %s is %s, want %s", file, name, strata_type_name(t->type),
                         json_string_value(type));
            }
        }
        int64_t file_type;
        assert_int_equal(gguf_get_int(g, "general.file_type", &file_type, NULL), 0);
        assert_int_equal(file_type, json_integer_value(json_object_get(m, "file_type")));
        gguf_close(g);
    }
    json_decref(models);
}

/* --- getters and lookups --- */

static void test_typed_getters(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "models/stories260K.gguf");
    gguf *g = open_ok(path);
    strata_err err = {0};
    int64_t i;
    double f;
    bool b;
    gguf_str s;
    const gguf_value *arr;

    assert_int_equal(gguf_get_int(g, "llama.block_count", &i, &err), 0);
    assert_int_equal(i, 5);
    /* A u32 "none" id above INT32_MAX still fits an int64. */
    assert_int_equal(gguf_get_int(g, "tokenizer.ggml.padding_token_id", &i, &err), 0);
    assert_int_equal(i, 4294967295LL);

    assert_int_equal(gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &f, &err), 0);
    assert_float_equal(f, 1e-5, 1e-12);
    assert_int_equal(gguf_get_float(g, "llama.context_length", &f, &err), 0); /* ints widen */
    assert_float_equal(f, 2048.0, 0.0);

    assert_int_equal(gguf_get_str(g, "general.architecture", &s, &err), 0);
    assert_true(str_eq(s, "llama"));
    assert_true(str_eq(gguf_arch(g), "llama"));

    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", &arr, &err), 0);
    assert_int_equal(arr->v.arr.n, 512);
    assert_true(str_eq(gguf_arr_str(arr, 1), "<s>"));

    /* Wrong types name the key and both types. */
    strata_err_clear(&err);
    assert_int_equal(gguf_get_int(g, "general.architecture", &i, &err), STRATA_EFORMAT);
    assert_int_equal(err.code, STRATA_EFORMAT);
    assert_contains(err.msg, "general.architecture");
    assert_contains(err.msg, "string");
    assert_int_equal(gguf_get_float(g, "general.name", &f, &err), STRATA_EFORMAT);
    assert_int_equal(gguf_get_bool(g, "llama.block_count", &b, &err), STRATA_EFORMAT);
    assert_contains(err.msg, "uint32");
    assert_int_equal(gguf_get_str(g, "tokenizer.ggml.tokens", &s, &err), STRATA_EFORMAT);
    assert_contains(err.msg, "array");
    assert_int_equal(gguf_get_arr(g, "llama.block_count", &arr, &err), STRATA_EFORMAT);
    assert_int_equal(gguf_get_int(g, "tokenizer.ggml.scores", &i, NULL), STRATA_EFORMAT);

    /* Missing keys; err may be NULL. */
    assert_int_equal(gguf_get_int(g, "llama.rope.freq_base", &i, &err), STRATA_ENOTFOUND);
    assert_int_equal(err.code, STRATA_ENOTFOUND);
    assert_contains(err.msg, "llama.rope.freq_base");
    assert_int_equal(gguf_get_float(g, "nope", &f, NULL), STRATA_ENOTFOUND);
    assert_int_equal(gguf_get_bool(g, "nope", &b, NULL), STRATA_ENOTFOUND);
    assert_int_equal(gguf_get_str(g, "nope", &s, NULL), STRATA_ENOTFOUND);
    assert_int_equal(gguf_get_arr(g, "nope", &arr, NULL), STRATA_ENOTFOUND);
    assert_null(gguf_find_kv(g, "general"));
    assert_null(gguf_find_kv(g, ""));
    const gguf_kv *kv = gguf_find_kv(g, "general.name");
    assert_non_null(kv);
    assert_string_equal(kv->key, "general.name");
    gguf_close(g);
}

static void test_find_tensor(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "models/stories260K.gguf");
    gguf *g = open_ok(path);
    const gguf_tensor *t = gguf_find_tensor(g, "blk.4.ffn_down.weight");
    assert_non_null(t);
    assert_string_equal(t->name, "blk.4.ffn_down.weight");
    assert_int_equal(t->ne[0], 172);
    assert_int_equal(t->ne[1], 64);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->n_bytes, 172 * 64 * 4);
    assert_ptr_equal(gguf_find_tensor(g, "token_embd.weight"), &g->tensors[0]);
    assert_null(gguf_find_tensor(g, "token_embd"));
    assert_null(gguf_find_tensor(g, "blk.5.ffn_down.weight"));
    assert_null(gguf_find_tensor(g, ""));
    gguf_close(g);
}

/* The data pointers are the file's own bytes (mapped, not invented): they
 * equal what a plain read of the file finds at data_offset + offset, and the
 * F32 embedding holds finite, non-trivial values. */
static void test_tensor_data_is_the_files_bytes(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "models/stories260K.gguf");
    size_t size = 0;
    uint8_t *file = testdata_read_file(path, &size);
    assert_non_null(file);
    gguf *g = open_ok(path);
    const gguf_shard *s = &g->shards[0];
    assert_int_equal(s->size, size);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        assert_memory_equal(t->data, file + s->data_offset + t->offset, t->n_bytes);
    }

    const gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(emb);
    assert_int_equal(emb->type, STRATA_TYPE_F32);
    assert_int_equal(emb->n_elems, 64 * 512);
    double sum_sq = 0;
    for (int64_t k = 0; k < emb->n_elems; k++) {
        float x;
        memcpy(&x, (const uint8_t *)emb->data + k * 4, 4);
        assert_true(isfinite(x));
        assert_true(fabsf(x) < 100.0f);
        sum_sq += (double)x * x;
    }
    assert_true(sum_sq / (double)emb->n_elems > 1e-4); /* trained weights, not zeros */

    /* Tensors tile the data section in order, the last one ending the file. */
    uint64_t end = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (t->offset + t->n_bytes > end) end = t->offset + t->n_bytes;
    }
    assert_int_equal(s->data_offset + end, size);
    gguf_close(g);
    free(file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_model_parses),
        cmocka_unit_test(test_every_vocab_file_parses),
        cmocka_unit_test(test_legacy_v2_loads),
        cmocka_unit_test(test_legacy_v1_refused),
        cmocka_unit_test(test_unopenable_files),
        cmocka_unit_test(test_stories260k_matches_info_json),
        cmocka_unit_test(test_llama2_tiny_matches_info_json),
        cmocka_unit_test(test_golden_models_match_models_json),
        cmocka_unit_test(test_typed_getters),
        cmocka_unit_test(test_find_tensor),
        cmocka_unit_test(test_tensor_data_is_the_files_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
