/* Split models: a model written as PREFIX-0000k-of-00003.gguf shards the way
 * llama.cpp's gguf-split writes them (split.no u16, 0-based; split.count
 * u16; split.tensors.count i32; the model's metadata in shard 1) opens
 * whole from any shard, with every tensor found in its shard. Missing
 * shards, shards that disagree about their place or the tensor count, and
 * tensor names repeated across shards are refused with messages naming the
 * file. Also the shard-name helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "gguf/types.h"
#include "testdata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N_SHARDS 3
#define N_TENSORS 7

static void assert_contains(const char *hay, const char *needle)
{
    if (strstr(hay, needle) == NULL) fail_msg("expected '%s' in: %s", needle, hay);
}

/* How to write the model; the defaults give a well-formed split. */
typedef struct split_cfg {
    const char *names[N_TENSORS];
    int shard_of[N_TENSORS];         /* 0-based shard of each tensor */
    uint16_t split_no[N_SHARDS];     /* written as split.no */
    uint16_t split_count[N_SHARDS];  /* written as split.count */
    int32_t tensors_count;           /* written as split.tensors.count */
    int omit[N_SHARDS];              /* do not write this shard */
} split_cfg;

static split_cfg default_cfg(void)
{
    split_cfg c = {
        .names = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
                  "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "output_norm.weight",
                  "output.weight"},
        .shard_of = {0, 0, 0, 1, 1, 2, 2},
        .split_no = {0, 1, 2},
        .split_count = {N_SHARDS, N_SHARDS, N_SHARDS},
        .tensors_count = N_TENSORS,
    };
    return c;
}

static const int64_t k_ne[N_TENSORS][2] = {
    {64, 16}, {64, 64}, {64, 32}, {64, 96}, {96, 64}, {64, 1}, {64, 16},
};

/* The data of tensor i: F32 values that differ per tensor. */
static float *tensor_data(int i)
{
    size_t n = (size_t)(k_ne[i][0] * k_ne[i][1]);
    float *p = malloc(n * sizeof(float));
    assert_non_null(p);
    for (size_t k = 0; k < n; k++) p[k] = (float)i * 1000.0f + (float)k;
    return p;
}

static void add_u16(gguf_writer *w, const char *key, uint16_t x)
{
    gguf_value v = {.type = GGUF_VTYPE_UINT16, .v.u64 = x};
    strata_err err;
    assert_int_equal(gguf_writer_add(w, key, &v, &err), 0);
}

/* Makes a fresh folder under the scratch dir and writes prefix into out. */
static void make_prefix(char *out, size_t out_size, const char *scenario)
{
    const char *scratch = testdata_scratch_dir();
    assert_non_null(scratch);
    char dir[2048];
    snprintf(dir, sizeof(dir), "%s/%s", scratch, scenario);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(out, out_size, "%s/model", dir);
}

static void write_split(const char *prefix, const split_cfg *c)
{
    float *data[N_TENSORS];
    for (int i = 0; i < N_TENSORS; i++) data[i] = tensor_data(i);
    for (int s = 0; s < N_SHARDS; s++) {
        if (c->omit[s]) continue;
        gguf_writer *w = gguf_writer_new();
        strata_err err = {0};
        if (s == 0) {
            assert_int_equal(gguf_writer_add_str(w, "general.architecture", "llama", &err), 0);
            assert_int_equal(gguf_writer_add_str(w, "general.name", "split test", &err), 0);
            assert_int_equal(gguf_writer_add_u32(w, "llama.block_count", 1, &err), 0);
        }
        add_u16(w, "split.no", c->split_no[s]);
        add_u16(w, "split.count", c->split_count[s]);
        assert_int_equal(gguf_writer_add_i32(w, "split.tensors.count", c->tensors_count, &err), 0);
        for (int i = 0; i < N_TENSORS; i++) {
            if (c->shard_of[i] != s) continue;
            if (gguf_writer_add_tensor(w, c->names[i], STRATA_TYPE_F32, 2, k_ne[i], data[i],
                                       &err) != 0) {
                fail_msg("%s", err.msg);
            }
        }
        char path[4200];
        gguf_split_path(path, sizeof(path), prefix, (uint32_t)s + 1, N_SHARDS);
        if (gguf_writer_write_file(w, path, &err) != 0) fail_msg("%s", err.msg);
        gguf_writer_free(w);
    }
    for (int i = 0; i < N_TENSORS; i++) free(data[i]);
}

static int open_shard_no(const char *prefix, uint32_t no, gguf **g, strata_err *err)
{
    char path[4200];
    gguf_split_path(path, sizeof(path), prefix, no, N_SHARDS);
    *g = NULL;
    strata_err_clear(err);
    return gguf_open(g, path, err);
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

/* The opened model holds every tensor of c, from the right shard, with the
 * data that was written, and shard 1's metadata. */
static void check_whole_model(const gguf *g, const char *prefix, const split_cfg *c)
{
    assert_int_equal(g->n_shards, N_SHARDS);
    assert_int_equal(g->n_tensors, N_TENSORS);
    uint64_t total = 0;
    for (uint32_t s = 0; s < N_SHARDS; s++) {
        char path[4200];
        gguf_split_path(path, sizeof(path), prefix, s + 1, N_SHARDS);
        assert_string_equal(g->shards[s].path, path);
        assert_int_equal(g->shards[s].size, file_size(path));
        total += g->shards[s].size;
    }
    assert_int_equal(g->total_size, total);

    gguf_str arch;
    assert_int_equal(gguf_get_str(g, "general.architecture", &arch, NULL), 0);
    assert_int_equal(arch.len, 5);
    assert_memory_equal(arch.ptr, "llama", 5);
    int64_t n;
    assert_int_equal(gguf_get_int(g, "split.no", &n, NULL), 0);
    assert_int_equal(n, 0); /* the first shard's keys, whichever shard was opened */

    for (int i = 0; i < N_TENSORS; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, c->names[i]);
        if (t == NULL) fail_msg("tensor %s not found", c->names[i]);
        assert_int_equal(t->shard, (uint32_t)c->shard_of[i]);
        const gguf_shard *s = &g->shards[t->shard];
        const uint8_t *p = t->data;
        assert_true(p >= s->bytes + s->data_offset && p + t->n_bytes <= s->bytes + s->size);
        assert_int_equal(t->ne[0], k_ne[i][0]);
        assert_int_equal(t->ne[1], k_ne[i][1]);
        float *want = tensor_data(i);
        assert_int_equal(t->n_bytes, (size_t)(k_ne[i][0] * k_ne[i][1]) * sizeof(float));
        assert_memory_equal(t->data, want, t->n_bytes);
        free(want);
    }
    assert_null(gguf_find_tensor(g, "blk.1.attn_q.weight"));
}

static void test_open_from_each_shard(void **state)
{
    (void)state;
    char prefix[4096];
    make_prefix(prefix, sizeof(prefix), "good");
    split_cfg c = default_cfg();
    write_split(prefix, &c);
    for (uint32_t no = 1; no <= N_SHARDS; no++) {
        gguf *g;
        strata_err err;
        if (open_shard_no(prefix, no, &g, &err) != 0) fail_msg("shard %u: %s", no, err.msg);
        check_whole_model(g, prefix, &c);
        gguf_close(g);
    }
}

/* gguf-split --no-tensor-first-split: shard 1 holds only metadata. */
static void test_first_shard_without_tensors(void **state)
{
    (void)state;
    char prefix[4096];
    make_prefix(prefix, sizeof(prefix), "meta-first");
    split_cfg c = default_cfg();
    for (int i = 0; i < N_TENSORS; i++) c.shard_of[i] = 1 + (i >= 4);
    write_split(prefix, &c);
    gguf *g;
    strata_err err;
    if (open_shard_no(prefix, 1, &g, &err) != 0) fail_msg("%s", err.msg);
    check_whole_model(g, prefix, &c);
    assert_int_equal(g->shards[0].n_tensors, 0);
    gguf_close(g);
}

/* One shard's bytes on their own: parsed, split keys checked, siblings not
 * loaded. */
static void test_one_shard_as_buffer(void **state)
{
    (void)state;
    char prefix[4096], path[4200];
    make_prefix(prefix, sizeof(prefix), "buffer");
    split_cfg c = default_cfg();
    write_split(prefix, &c);
    gguf_split_path(path, sizeof(path), prefix, 2, N_SHARDS);
    size_t size = 0;
    void *bytes = testdata_read_file(path, &size);
    assert_non_null(bytes);
    gguf *g = NULL;
    strata_err err = {0};
    assert_int_equal(gguf_open_buffer(&g, bytes, size, path, &err), 0);
    assert_int_equal(g->n_shards, 1);
    assert_int_equal(g->n_tensors, 2);
    assert_non_null(gguf_find_tensor(g, c.names[3]));
    assert_null(gguf_find_tensor(g, c.names[0]));
    assert_null(gguf_find_kv(g, "general.architecture"));
    gguf_close(g);
    free(bytes);
}

static void test_missing_shard(void **state)
{
    (void)state;
    for (int missing = 0; missing < N_SHARDS; missing++) {
        char prefix[4096], scenario[32], path[4200];
        snprintf(scenario, sizeof(scenario), "missing%d", missing + 1);
        make_prefix(prefix, sizeof(prefix), scenario);
        split_cfg c = default_cfg();
        c.omit[missing] = 1;
        write_split(prefix, &c);
        gguf_split_path(path, sizeof(path), prefix, (uint32_t)missing + 1, N_SHARDS);
        char where[64];
        snprintf(where, sizeof(where), "shard %d of 3", missing + 1);
        for (uint32_t no = 1; no <= N_SHARDS; no++) {
            if ((int)no == missing + 1) continue;
            gguf *g;
            strata_err err;
            assert_int_equal(open_shard_no(prefix, no, &g, &err), STRATA_ENOTFOUND);
            assert_null(g);
            assert_contains(err.msg, path);
            assert_contains(err.msg, where);
        }
    }
}

/* Each broken configuration fails to open from shard 1 with the code, the
 * words w, and the paths of the shards numbered in named[] (0 ends it). */
static void expect_split_error(const char *scenario, const split_cfg *c, int code,
                               const char *w, const int *named)
{
    char prefix[4096];
    make_prefix(prefix, sizeof(prefix), scenario);
    write_split(prefix, c);
    gguf *g;
    strata_err err;
    int rc = open_shard_no(prefix, 1, &g, &err);
    if (rc != code) fail_msg("%s: want %d, got %d: %s", scenario, code, rc, err.msg);
    assert_null(g);
    assert_contains(err.msg, w);
    for (int i = 0; named[i] != 0; i++) {
        char path[4200];
        gguf_split_path(path, sizeof(path), prefix, (uint32_t)named[i], N_SHARDS);
        assert_contains(err.msg, path);
    }
}

static void test_inconsistent_shards(void **state)
{
    (void)state;
    static const int shard1[] = {1, 0}, shard2[] = {2, 0}, shard3[] = {3, 0};
    static const int shards3and1[] = {3, 1, 0};
    split_cfg c = default_cfg();
    c.split_no[1] = 2; /* shard 2 says it is shard 3 */
    expect_split_error("wrong-no", &c, STRATA_EFORMAT, "split.no", shard2);

    c = default_cfg();
    c.split_no[2] = 0;
    expect_split_error("wrong-no-last", &c, STRATA_EFORMAT, "shard 1 of 3", shard3);

    c = default_cfg();
    c.split_count[2] = 4; /* shard 3 thinks there are four */
    expect_split_error("count-disagrees", &c, STRATA_EFORMAT, "split.count", shard3);

    c = default_cfg();
    c.split_count[0] = 2; /* the first shard's count disagrees with its name */
    expect_split_error("count-vs-name", &c, STRATA_EFORMAT, "the name says 3", shard1);

    c = default_cfg();
    c.tensors_count = N_TENSORS + 1;
    expect_split_error("tensors-count", &c, STRATA_EFORMAT, "split.tensors.count is 8", shard1);

    /* Shard 3 repeats a tensor name of shard 1: both places are named. */
    c = default_cfg();
    c.names[5] = c.names[1];
    expect_split_error("duplicate", &c, STRATA_EFORMAT, "duplicate tensor name 'blk.0.attn_q",
                       shards3and1);
}

/* split.count > 1 in a file whose name does not say which shard it is; and
 * split.count = 1, which is simply a whole model. */
static void test_split_keys_in_unsplit_names(void **state)
{
    (void)state;
    const char *scratch = testdata_scratch_dir();
    assert_non_null(scratch);
    char path[4096];
    for (uint16_t count = 1; count <= 2; count++) {
        snprintf(path, sizeof(path), "%s/plain-%u.gguf", scratch, count);
        gguf_writer *w = gguf_writer_new();
        add_u16(w, "split.no", 0);
        add_u16(w, "split.count", count);
        float x[4] = {1, 2, 3, 4};
        const int64_t ne[1] = {4};
        strata_err err;
        assert_int_equal(gguf_writer_add_tensor(w, "x", STRATA_TYPE_F32, 1, ne, x, &err), 0);
        assert_int_equal(gguf_writer_write_file(w, path, &err), 0);
        gguf_writer_free(w);
        gguf *g = NULL;
        int rc = gguf_open(&g, path, &err);
        if (count == 1) {
            assert_int_equal(rc, 0);
            assert_int_equal(g->n_shards, 1);
            assert_non_null(gguf_find_tensor(g, "x"));
            gguf_close(g);
        } else {
            assert_int_equal(rc, STRATA_EFORMAT);
            assert_contains(err.msg, "-NNNNN-of-NNNNN.gguf");
            assert_contains(err.msg, path);
        }
    }
}

static void test_split_path_helpers(void **state)
{
    (void)state;
    char prefix[64], out[128];
    uint32_t no = 0, count = 0;
    assert_int_equal(gguf_split_parse_path("dir/model-00002-of-00003.gguf", prefix,
                                           sizeof(prefix), &no, &count), 1);
    assert_string_equal(prefix, "dir/model");
    assert_int_equal(no, 2);
    assert_int_equal(count, 3);
    assert_int_equal(gguf_split_parse_path("x-09999-of-09999.gguf", NULL, 0, &no, &count), 1);
    assert_int_equal(no, 9999);
    assert_int_equal(count, 9999);

    /* A short buffer gets a truncated, terminated prefix. */
    assert_int_equal(gguf_split_parse_path("abcdef-00001-of-00002.gguf", prefix, 4, &no,
                                           &count), 1);
    assert_string_equal(prefix, "abc");

    static const char *const not_split[] = {
        "model.gguf", "", "model-00000-of-00003.gguf", "model-00004-of-00003.gguf",
        "model-00001-of-00000.gguf", "model-0000a-of-00003.gguf", "model-00001-of-0000x.gguf",
        "model-00001-of-00003.bin", "model-00001-of-00003.gguf.part", "model_00001-of-00003.gguf",
        "model-00001_of_00003.gguf", "model-1-of-3.gguf",
    };
    for (size_t i = 0; i < sizeof(not_split) / sizeof(not_split[0]); i++) {
        no = count = 77;
        if (gguf_split_parse_path(not_split[i], prefix, sizeof(prefix), &no, &count) != 0) {
            fail_msg("'%s' parsed as a shard name", not_split[i]);
        }
        assert_int_equal(no, 77);
    }

    gguf_split_path(out, sizeof(out), "a/b", 2, 3);
    assert_string_equal(out, "a/b-00002-of-00003.gguf");
    gguf_split_path(out, sizeof(out), "m", 12, 345);
    assert_string_equal(out, "m-00012-of-00345.gguf");
    /* Round trip for each shard of a large split. */
    for (uint32_t k = 1; k <= 9999; k += 1111) {
        gguf_split_path(out, sizeof(out), "/x/y z", k, 9999);
        assert_int_equal(gguf_split_parse_path(out, prefix, sizeof(prefix), &no, &count), 1);
        assert_string_equal(prefix, "/x/y z");
        assert_int_equal(no, k);
        assert_int_equal(count, 9999);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_from_each_shard),
        cmocka_unit_test(test_first_shard_without_tensors),
        cmocka_unit_test(test_one_shard_as_buffer),
        cmocka_unit_test(test_missing_shard),
        cmocka_unit_test(test_inconsistent_shards),
        cmocka_unit_test(test_split_keys_in_unsplit_names),
        cmocka_unit_test(test_split_path_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
