/* LongRoPE (Phi-3 128k, Phi-3.5-mini, Phi-4-mini): the two sets of rope
 * factors, chosen by the context a model runs with, and the cos/sin
 * attention factor, against llama.cpp's logits.
 *
 * The files are the golden phi3-F32 model with LongRoPE added the way
 * llama.cpp's converter writes it for a 128k Phi-3: context_length 131072,
 * rope.scaling.original_context_length 4096, rope.scaling.attn_factor
 * sqrt(1 + ln(32) / ln(4096)), and rope_factors_long/short.weight of n_rot/2
 * F32 each; a second file rotates only half of each head (Phi-4-mini's
 * partial rotary), with factors to match. The references in
 * tests/model/data/ are llama.cpp's logits (libllama of node-llama-cpp
 * 3.21.1, one batch of golden seq1 at positions 0..31, llama_get_logits_ith
 * for every position, flash attention off and F16 KV, the settings that
 * give the golden phi3-F32 reference bit for bit) with a context of 512 (the
 * short factors) and 8192 (the long ones). To make the files again for a new reference:
 *     build/tests/test_model_longrope --write DIR
 * writes DIR/phi3-longrope.gguf and DIR/phi3-longrope-partial.gguf. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/gguf_write.h"
#include "model_testutil.h"

#define N_POS 32
#define N_VOCAB 512

/* Llama.cpp's F32 noise floor on these models is ~1e-3 of the largest
 * logit (the golden test's F32 bound). */
#define TOL 1e-3

static const char *const ROPE_KEYS[] = {"phi3.context_length",
                                        "phi3.rope.scaling.original_context_length",
                                        "phi3.rope.scaling.attn_factor",
                                        "phi3.rope.dimension_count"};

/* Writes golden phi3-F32 with LongRoPE to out; n_rot 0 keeps the file's. */
static int write_longrope(const char *src, const char *out, int n_rot)
{
    gguf *g = NULL;
    strata_err err;
    if (gguf_open(&g, src, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    gguf_writer *w = gguf_writer_new();
    const gguf_shard *s = &g->shards[0];
    int rc = 0;
    for (uint64_t i = 0; rc == 0 && i < s->n_kv; i++) {
        bool replaced = false;
        for (size_t k = 0; k < sizeof(ROPE_KEYS) / sizeof(ROPE_KEYS[0]); k++)
            replaced |= strcmp(s->kvs[i].key, ROPE_KEYS[k]) == 0;
        if (!replaced) rc = gguf_writer_add(w, s->kvs[i].key, &s->kvs[i].value, &err);
    }
    const int64_t head_dim = 64; /* the golden file's: 256 wide, 4 heads */
    if (n_rot == 0) n_rot = (int)head_dim;
    /* as the converter computes it for 131072 / 4096 */
    const float attn_factor = (float)sqrt(1.0 + log(32.0) / log(4096.0));
    if (rc == 0) rc = gguf_writer_add_u32(w, "phi3.context_length", 131072, &err);
    if (rc == 0) rc = gguf_writer_add_u32(w, "phi3.rope.scaling.original_context_length", 4096, &err);
    if (rc == 0) rc = gguf_writer_add_f32(w, "phi3.rope.scaling.attn_factor", attn_factor, &err);
    if (rc == 0) rc = gguf_writer_add_u32(w, "phi3.rope.dimension_count", (uint32_t)n_rot, &err);
    for (uint64_t i = 0; rc == 0 && i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &err);
    }
    /* factors in the ranges real files have: the long set grows to tens
     * over the low frequencies, the short one stays near 1 */
    float f_long[64], f_short[64];
    for (int k = 0; k < n_rot / 2; k++) {
        f_long[k] = 1.0f + 0.75f * (float)k;
        f_short[k] = 1.0f + 0.05f * (float)k;
    }
    int64_t ne[1] = {n_rot / 2};
    if (rc == 0)
        rc = gguf_writer_add_tensor(w, "rope_factors_long.weight", STRATA_TYPE_F32, 1, ne, f_long,
                                    &err);
    if (rc == 0)
        rc = gguf_writer_add_tensor(w, "rope_factors_short.weight", STRATA_TYPE_F32, 1, ne,
                                    f_short, &err);
    if (rc == 0) rc = gguf_writer_write_file(w, out, &err);
    if (rc != 0) fprintf(stderr, "%s\n", err.msg);
    gguf_writer_free(w);
    gguf_close(g);
    return rc;
}

/* The path of the LongRoPE copy (static storage), made once per variant. */
static const char *longrope_file(bool partial)
{
    static char paths[2][4200];
    char *out = paths[partial];
    if (out[0] != '\0') return out;
    char src[4096];
    if (testdata_path(src, sizeof(src), "golden/models/phi3-F32.gguf") == NULL) return NULL;
    snprintf(out, 4200, "%s/phi3-longrope%s.gguf", testdata_scratch_dir(),
             partial ? "-partial" : "");
    if (write_longrope(src, out, partial ? 32 : 0) != 0) fail_msg("writing %s", out);
    return out;
}

/* Strata's logits of seq1 on file with a context of n_ctx (n_ctx_seq as
 * model_ctx_params takes it; 0: n_ctx). */
static float *run_seq1(const char *file, int64_t n_ctx, int64_t n_ctx_seq)
{
    model *m = NULL;
    strata_err err;
    if (model_open(&m, file, &err) != 0) fail_msg("loading %s: %s", file, err.msg);
    char path[4096];
    if (testdata_path(path, sizeof(path), "golden/seq1.txt") == NULL) fail_msg("no golden/seq1.txt");
    int64_t n = 0;
    int32_t *ids = mt_read_ids(path, &n);
    assert_non_null(ids);
    assert_int_equal(n, N_POS);
    model_ctx_params p = {.n_ctx = n_ctx, .n_seq_max = 1, .n_ctx_seq = n_ctx_seq, .n_threads = 2};
    model_ctx *ctx = NULL;
    if (model_ctx_init(&ctx, m, &p, &err) != 0) fail_msg("model_ctx_init: %s", err.msg);
    assert_int_equal(kv_seq_add(model_ctx_kv(ctx), 0, &err), 0);
    int32_t seq_ids[N_POS] = {0}, pos[N_POS];
    for (int i = 0; i < N_POS; i++) pos[i] = i;
    model_batch b = {.n_tokens = N_POS, .tokens = ids, .seq_ids = seq_ids, .pos = pos};
    float *logits = malloc((size_t)N_POS * N_VOCAB * sizeof(float));
    assert_non_null(logits);
    if (model_forward(ctx, &b, logits, &err) != 0) fail_msg("forward: %s", err.msg);
    model_ctx_free(ctx);
    model_close(m);
    free(ids);
    return logits;
}

static float *read_ref(const char *name)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/tests/model/data/%s", testdata_source_dir(), name);
    int64_t n = 0;
    float *ref = mt_read_f32(path, &n);
    if (ref == NULL) fail_msg("missing %s", path);
    assert_int_equal(n, N_POS * N_VOCAB);
    return ref;
}

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const float *b)
{
    double d = 0, mx = 0;
    for (int64_t i = 0; i < N_POS * N_VOCAB; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        mx = fmax(mx, fabs((double)b[i]));
    }
    return d / mx;
}

static void expect_close(const char *what, const float *ours, const float *ref)
{
    double d = rel_diff(ours, ref);
    print_message("%s: max |diff| / max |logit| = %.2e (tolerance %.0e)\n", what, d, TOL);
    if (!(d <= TOL)) fail_msg("%s: %.3e over the tolerance %.0e", what, d, TOL);
}

/* Runs seq1 as run_seq1 does and compares with ref. */
static void expect_run(const char *what, const char *file, int64_t n_ctx, int64_t n_ctx_seq,
                       const float *ref)
{
    float *ours = run_seq1(file, n_ctx, n_ctx_seq);
    expect_close(what, ours, ref);
    free(ours);
}

#define REQUIRE_FILE(var, partial)                                                 \
    do {                                                                           \
        TESTDATA_REQUIRE();                                                        \
        (var) = longrope_file(partial);                                            \
        if ((var) == NULL) {                                                       \
            print_message("skipped: golden/models/phi3-F32.gguf is missing\n");    \
            skip();                                                                \
        }                                                                          \
    } while (0)

/* A context within the original 4096 positions takes the short factors. */
static void test_short_factors(void **state)
{
    (void)state;
    const char *file;
    REQUIRE_FILE(file, false);
    float *ref = read_ref("phi3-longrope-short.seq1.logits.f32");
    expect_run("short factors, context 512", file, 512, 0, ref);
    /* the pool may be large; what counts is the longest sequence */
    expect_run("short factors, pool 8192, context 512 per sequence", file, 8192, 512, ref);
    free(ref);
}

/* Past it, the long ones; the two sets give clearly different logits, so
 * a wrong choice cannot pass. */
static void test_long_factors(void **state)
{
    (void)state;
    const char *file;
    REQUIRE_FILE(file, false);
    float *ref = read_ref("phi3-longrope-long.seq1.logits.f32");
    float *ref_short = read_ref("phi3-longrope-short.seq1.logits.f32");
    double apart = rel_diff(ref_short, ref);
    print_message("llama.cpp's short and long logits differ by %.2e\n", apart);
    assert_true(apart > 20 * TOL);
    float *ours = run_seq1(file, 8192, 0);
    expect_close("long factors, context 8192", ours, ref);
    assert_true(rel_diff(ours, ref_short) > 10 * TOL);
    free(ours);
    expect_run("long factors, context 4097", file, 4097, 0, ref);
    free(ref_short);
    free(ref);
}

/* Rope over half of each head (Phi-4-mini rotates 96 of 128 dims). */
static void test_partial_rotary(void **state)
{
    (void)state;
    const char *file;
    REQUIRE_FILE(file, true);
    float *ref = read_ref("phi3-longrope-partial.seq1.logits.f32");
    expect_run("long factors over 32 of 64 dims", file, 8192, 0, ref);
    free(ref);
}

/* The factors and the attention factor as the model and `strata info`
 * see them. */
static void test_load_and_describe(void **state)
{
    (void)state;
    const char *file;
    REQUIRE_FILE(file, false);
    model *m = NULL;
    strata_err err;
    if (model_open(&m, file, &err) != 0) fail_msg("%s", err.msg);
    assert_non_null(m->rope_long);
    assert_non_null(m->rope_short);
    assert_null(m->rope_freqs);
    assert_int_equal(m->hp.n_ctx_orig_factors, 4096);
    assert_int_equal(m->hp.n_ctx_train, 131072);
    assert_true(fabsf(m->hp.rope_attn_factor - 1.1902381f) < 1e-6f);
    assert_true(m->rope_long[3] == 1.0f + 0.75f * 3.0f);
    char desc[512];
    model_hparams_describe(&m->hp, desc, sizeof(desc));
    print_message("graph: %s\n", desc);
    assert_non_null(strstr(desc, "LongRoPE factors (the long set past 4096 positions)"));
    assert_non_null(strstr(desc, "cos/sin x1.19024"));
    model_close(m);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write") == 0) {
        char src[4096], out[4200];
        if (testdata_path(src, sizeof(src), "golden/models/phi3-F32.gguf") == NULL) {
            fprintf(stderr, "golden/models/phi3-F32.gguf not found\n");
            return 1;
        }
        snprintf(out, sizeof(out), "%s/phi3-longrope.gguf", argv[2]);
        int rc = write_longrope(src, out, 0);
        snprintf(out, sizeof(out), "%s/phi3-longrope-partial.gguf", argv[2]);
        if (rc == 0) rc = write_longrope(src, out, 32);
        return rc == 0 ? 0 : 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_and_describe),
        cmocka_unit_test(test_short_factors),
        cmocka_unit_test(test_long_factors),
        cmocka_unit_test(test_partial_rotary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
