/* Quantization against files made by another tool: the golden models of
 * ../shared/data/golden/models, made from llama-F32.gguf (and qwen2/qwen3)
 * by llama.cpp's quantizer.
 *
 *  - Decoding: every 2-D weight matrix of every quantized file, decoded
 *    with its own type, matches the same matrix of the F32 file within a
 *    per-type error. A wrong bit layout gives an error near 100%, so the
 *    bounds are tight: each is the measured worst tensor times ~1.2.
 *  - Encoding: our quantizer on the F32 matrices is no worse than
 *    llama.cpp's file (error ratio per matrix <= 1.1), and for the types
 *    llama.cpp encodes with a max-abs rule our search is clearly better.
 *  - Canonical codes: re-encoding the decoded data of llama.cpp's F16,
 *    BF16, Q8_0, Q4_0 and IQ4_NL files reproduces their bytes exactly (an
 *    exactly representable block has one best encoding). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "quant_testutil.h"
#include "tensor/quant.h"
#include "testdata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- helpers --- */

static gguf *open_model(const char *rel)
{
    char path[4096];
    if (testdata_path(path, sizeof path, rel) == NULL)
        return NULL;
    gguf *g = NULL;
    strata_err err = {0};
    int rc = gguf_open(&g, path, &err);
    if (rc != 0)
        fail_msg("%s: gguf_open failed (%d): %s", rel, rc, err.msg);
    return g;
}

static int is_matrix(const gguf_tensor *t)
{
    return t->n_dims == 2 && t->ne[1] > 1;
}

/* The decoded contents of t, malloc'd. */
static float *decode_tensor(const gguf_tensor *t)
{
    float *y = malloc((size_t)t->n_elems * sizeof(float));
    assert_non_null(y);
    int rc = tensor_dequantize_row(t->type, t->data, y, t->n_elems);
    if (rc != 0)
        fail_msg("%s: cannot decode type %s (%d)", t->name, strata_type_name(t->type), rc);
    return y;
}

/* Pairs of (quantized file, its F32 source). */
static const struct {
    const char *file, *ref;
} k_files[] = {
    {"golden/models/llama-F16.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-BF16.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-Q8_0.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-Q4_0.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-Q4_1.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-Q5_0.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-Q5_1.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-Q2_K.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-Q3_K.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-Q4_K.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-Q5_K.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-Q6_K.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-IQ4_NL.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-IQ4_XS.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-Q4_K_M.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-TQ1_0.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-TQ2_0.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-MXFP4.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-IQ2_XXS.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-IQ2_XS.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-IQ2_S.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-IQ3_XXS.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-IQ3_S.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-IQ1_S.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/llama-IQ1_M.gguf", "golden/models/llama-F32.gguf"},
    {"golden/models/qwen2-F16.gguf", "golden/models/qwen2-F32.gguf"},
    {"golden/models/qwen2-Q8_0.gguf", "golden/models/qwen2-F32.gguf"},
    {"golden/models/qwen2-Q4_K.gguf", "golden/models/qwen2-F32.gguf"},
    {"golden/models/qwen2-Q4_K_M.gguf", "golden/models/qwen2-F32.gguf"},
    {"golden/models/qwen3-F16.gguf", "golden/models/qwen3-F32.gguf"},
    {"golden/models/qwen3-Q8_0.gguf", "golden/models/qwen3-F32.gguf"},
    {"golden/models/qwen3-Q4_K.gguf", "golden/models/qwen3-F32.gguf"},
    {"golden/models/qwen3-Q4_K_M.gguf", "golden/models/qwen3-F32.gguf"},
};
#define N_FILES (sizeof k_files / sizeof k_files[0])

/* Per-type bounds on the decoded matrices' error against F32: RMS error
 * relative to the matrix's RMS, and the largest error relative to the
 * matrix's largest magnitude. Each bound is the worst matrix measured over
 * all files (in the comment: rms / max) times ~1.2; a wrong bit layout
 * decodes to noise with a relative RMS error near 1 or above. */
static const struct {
    uint32_t type;
    double rms, max;
} k_bounds[] = {
    {STRATA_TYPE_F16, 0.00025, 0.00038},  /* 0.000208 / 0.000310 */
    {STRATA_TYPE_BF16, 0.0020, 0.0030},   /* 0.001662 / 0.002477 */
    {STRATA_TYPE_Q8_0, 0.0065, 0.0048},   /* 0.005414 / 0.003974 */
    {STRATA_TYPE_Q4_0, 0.104, 0.114},     /* 0.086318 / 0.094528 */
    {STRATA_TYPE_Q4_1, 0.094, 0.072},     /* 0.078384 / 0.059598 */
    {STRATA_TYPE_Q5_0, 0.052, 0.054},     /* 0.042923 / 0.044743 */
    {STRATA_TYPE_Q5_1, 0.046, 0.033},     /* 0.038039 / 0.027210 */
    {STRATA_TYPE_Q2_K, 0.36, 0.39},       /* 0.298373 / 0.324305 */
    {STRATA_TYPE_Q3_K, 0.182, 0.187},     /* 0.151679 / 0.155605 */
    {STRATA_TYPE_Q4_K, 0.087, 0.079},     /* 0.071974 / 0.065686 */
    {STRATA_TYPE_Q5_K, 0.044, 0.039},     /* 0.036279 / 0.031999 */
    {STRATA_TYPE_Q6_K, 0.0214, 0.0194},   /* 0.017818 / 0.016122 */
    {STRATA_TYPE_IQ4_NL, 0.092, 0.079},   /* 0.076438 / 0.065496 */
    {STRATA_TYPE_IQ4_XS, 0.093, 0.089},   /* 0.077004 / 0.073520 */
    /* Ternary: llama.cpp scales each block by its largest magnitude, so
     * most Gaussian weights round to 0 (an RMS error near 0.8 is the
     * format's, not a decoding error) and no error exceeds half the scale.
     * A wrong layout exceeds both bounds. */
    {STRATA_TYPE_TQ1_0, 0.90, 0.55},      /* 0.816434 / 0.499376 */
    {STRATA_TYPE_TQ2_0, 0.90, 0.55},      /* 0.816434 / 0.499376 */
    {STRATA_TYPE_MXFP4, 0.142, 0.246},    /* 0.118546 / 0.205009 */
    {STRATA_TYPE_IQ2_XXS, 0.414, 0.601}, /* 0.345034 / 0.501140 */
    {STRATA_TYPE_IQ2_XS, 0.361, 0.533}, /* 0.300610 / 0.444006 */
    {STRATA_TYPE_IQ2_S, 0.299, 0.447}, /* 0.249429 / 0.372545 */
    {STRATA_TYPE_IQ3_XXS, 0.219, 0.369}, /* 0.182473 / 0.307480 */
    {STRATA_TYPE_IQ3_S, 0.165, 0.213}, /* 0.137269 / 0.177180 */
    {STRATA_TYPE_IQ1_S, 0.584, 0.668}, /* 0.486536 / 0.556390 */
    {STRATA_TYPE_IQ1_M, 0.543, 0.76}, /* 0.452468 / 0.633310 */
};

static int bound_index(uint32_t type)
{
    for (size_t i = 0; i < sizeof k_bounds / sizeof k_bounds[0]; i++)
        if (k_bounds[i].type == type)
            return (int)i;
    return -1;
}

/* --- decoding real files --- */

/* llama.cpp's TQ1_0 and TQ2_0 files hold the same ternary values in two
 * layouts (same scales, same digits): decoded, every matrix must be
 * bit-identical, which checks each layout's element order against the
 * other's far more tightly than an error bound can. */
static void test_ternary_layouts_agree(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    gguf *a = open_model("golden/models/llama-TQ1_0.gguf");
    gguf *b = open_model("golden/models/llama-TQ2_0.gguf");
    if (a == NULL || b == NULL) {
        print_message("note: ternary golden files missing, not checked\n");
        if (a != NULL) gguf_close(a);
        if (b != NULL) gguf_close(b);
        return;
    }
    int n = 0;
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const gguf_tensor *ta = &a->tensors[i];
        if (!is_matrix(ta)) continue;
        const gguf_tensor *tb = gguf_find_tensor(b, ta->name);
        assert_non_null(tb);
        assert_int_equal(ta->type, STRATA_TYPE_TQ1_0);
        assert_int_equal(tb->type, STRATA_TYPE_TQ2_0);
        float *ya = decode_tensor(ta), *yb = decode_tensor(tb);
        if (memcmp(ya, yb, (size_t)ta->n_elems * sizeof(float)) != 0)
            fail_msg("%s: TQ1_0 and TQ2_0 decode differently", ta->name);
        free(ya);
        free(yb);
        n++;
    }
    assert_true(n > 0);
    gguf_close(a);
    gguf_close(b);
}

static void test_decode_golden_files(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    double worst_rms[STRATA_TYPE_COUNT] = {0}, worst_max[STRATA_TYPE_COUNT] = {0};
    int n_checked[STRATA_TYPE_COUNT] = {0};
    int n_files = 0;

    for (size_t f = 0; f < N_FILES; f++) {
        gguf *g = open_model(k_files[f].file);
        if (g == NULL) {
            print_message("note: %s missing, not checked\n", k_files[f].file);
            continue;
        }
        gguf *ref = open_model(k_files[f].ref);
        assert_non_null(ref);
        n_files++;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *t = &g->tensors[i];
            if (!is_matrix(t))
                continue;
            const gguf_tensor *rt = gguf_find_tensor(ref, t->name);
            assert_non_null(rt);
            assert_int_equal(rt->type, STRATA_TYPE_F32);
            assert_int_equal(rt->n_elems, t->n_elems);
            int bi = bound_index(t->type);
            if (bi < 0)
                fail_msg("%s: %s has unexpected type %s", k_files[f].file, t->name,
                         strata_type_name(t->type));
            float *y = decode_tensor(t);
            qt_err e = {0};
            qt_err_add(&e, rt->data, y, t->n_elems);
            free(y);
            assert_int_equal(e.n_nonfinite, 0);
            double rms = qt_rel_rms(&e), mx = qt_rel_max(&e);
            if (rms > worst_rms[t->type])
                worst_rms[t->type] = rms;
            if (mx > worst_max[t->type])
                worst_max[t->type] = mx;
            n_checked[t->type]++;
            if (rms > k_bounds[bi].rms || mx > k_bounds[bi].max)
                fail_msg("%s: %s (%s): relative RMS error %.6f (bound %.6f), max %.6f (bound "
                         "%.6f)",
                         k_files[f].file, t->name, strata_type_name(t->type), rms,
                         k_bounds[bi].rms, mx, k_bounds[bi].max);
        }
        gguf_close(ref);
        gguf_close(g);
    }
    for (uint32_t ty = 0; ty < STRATA_TYPE_COUNT; ty++)
        if (n_checked[ty] > 0)
            print_message("decode %-7s %3d matrices: worst relative RMS error %.6f, max %.6f\n",
                          strata_type_name(ty), n_checked[ty], worst_rms[ty], worst_max[ty]);
    assert_true(n_files > 0);
}

/* --- our encoder against llama.cpp's --- */

/* The pure single-type files, with their F32 source. */
static const struct {
    const char *file, *ref;
    uint32_t type;
    double ratio_bound; /* our error / llama.cpp's, worst matrix */
} k_pure[] = {
#define LLAMA(t) "golden/models/llama-" t ".gguf", "golden/models/llama-F32.gguf"
    {LLAMA("F16"), STRATA_TYPE_F16, 1.0},
    {LLAMA("BF16"), STRATA_TYPE_BF16, 1.0},
    {LLAMA("Q8_0"), STRATA_TYPE_Q8_0, 1.1},
    {LLAMA("Q4_0"), STRATA_TYPE_Q4_0, 1.1},
    {LLAMA("Q4_1"), STRATA_TYPE_Q4_1, 1.1},
    {LLAMA("Q5_0"), STRATA_TYPE_Q5_0, 1.1},
    {LLAMA("Q5_1"), STRATA_TYPE_Q5_1, 1.1},
    {LLAMA("Q2_K"), STRATA_TYPE_Q2_K, 1.1},
    {LLAMA("Q3_K"), STRATA_TYPE_Q3_K, 1.1},
    {LLAMA("Q4_K"), STRATA_TYPE_Q4_K, 1.1},
    {LLAMA("Q5_K"), STRATA_TYPE_Q5_K, 1.1},
    {LLAMA("Q6_K"), STRATA_TYPE_Q6_K, 1.1},
    {LLAMA("IQ4_NL"), STRATA_TYPE_IQ4_NL, 1.1},
    {LLAMA("IQ4_XS"), STRATA_TYPE_IQ4_XS, 1.1},
    {LLAMA("MXFP4"), STRATA_TYPE_MXFP4, 1.0}, /* 0.956: the second exponent tried */
#undef LLAMA
    {"golden/models/qwen2-Q8_0.gguf", "golden/models/qwen2-F32.gguf", STRATA_TYPE_Q8_0, 1.1},
    {"golden/models/qwen2-Q4_K.gguf", "golden/models/qwen2-F32.gguf", STRATA_TYPE_Q4_K, 1.1},
    {"golden/models/qwen3-Q8_0.gguf", "golden/models/qwen3-F32.gguf", STRATA_TYPE_Q8_0, 1.1},
    {"golden/models/qwen3-Q4_K.gguf", "golden/models/qwen3-F32.gguf", STRATA_TYPE_Q4_K, 1.1},
};

static void test_encode_vs_llama_cpp(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    int n_files = 0;
    for (size_t f = 0; f < sizeof k_pure / sizeof k_pure[0]; f++) {
        gguf *g = open_model(k_pure[f].file);
        if (g == NULL)
            continue;
        gguf *ref = open_model(k_pure[f].ref);
        assert_non_null(ref);
        n_files++;
        uint32_t type = k_pure[f].type;
        qt_err ours_all = {0}, theirs_all = {0};
        double worst_ratio = 0;
        const char *worst_name = "";
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *t = &g->tensors[i];
            if (!is_matrix(t))
                continue;
            assert_int_equal(t->type, type);
            const gguf_tensor *rt = gguf_find_tensor(ref, t->name);
            assert_non_null(rt);
            const float *x = rt->data;
            int64_t ncols = t->ne[0], nrows = t->ne[1];
            /* Under sanitizers encode every 4th row (and compare the same rows). */
            int64_t row_step = TEST_SANITIZED ? 4 : 1;
            size_t row_bytes = qt_row_bytes(type, ncols);
            void *q = malloc(row_bytes);
            float *ours = malloc((size_t)ncols * sizeof(float));
            float *theirs = malloc((size_t)ncols * sizeof(float));
            assert_true(q && ours && theirs);
            qt_err eo = {0}, et = {0};
            for (int64_t r = 0; r < nrows; r += row_step) {
                const float *xr = x + r * ncols;
                assert_int_equal(tensor_quantize_row(type, xr, q, ncols), 0);
                assert_int_equal(tensor_dequantize_row(type, q, ours, ncols), 0);
                assert_int_equal(tensor_dequantize_row(type, (const uint8_t *)t->data + r * row_bytes,
                                                       theirs, ncols),
                                 0);
                qt_err_add(&eo, xr, ours, ncols);
                qt_err_add(&et, xr, theirs, ncols);
            }
            free(q);
            free(ours);
            free(theirs);
            assert_int_equal(eo.n_nonfinite, 0);
            double ratio = et.sum_sq_err > 0 ? qt_rel_rms(&eo) / qt_rel_rms(&et)
                                             : (eo.sum_sq_err > 0 ? INFINITY : 1.0);
            if (ratio > worst_ratio) {
                worst_ratio = ratio;
                worst_name = t->name;
            }
            ours_all.sum_sq_err += eo.sum_sq_err;
            ours_all.sum_sq_ref += eo.sum_sq_ref;
            theirs_all.sum_sq_err += et.sum_sq_err;
            theirs_all.sum_sq_ref += et.sum_sq_ref;
            if (ratio > k_pure[f].ratio_bound)
                fail_msg("%s: %s: our relative RMS error %.6f vs llama.cpp's %.6f (ratio %.4f > "
                         "%.2f)",
                         strata_type_name(type), t->name, qt_rel_rms(&eo), qt_rel_rms(&et), ratio,
                         k_pure[f].ratio_bound);
        }
        print_message("encode %-22s ours %.6f  llama.cpp %.6f  ratio %.4f (worst matrix %.4f, %s)\n",
                      k_pure[f].file + strlen("golden/models/"), qt_rel_rms(&ours_all),
                      qt_rel_rms(&theirs_all), qt_rel_rms(&ours_all) / qt_rel_rms(&theirs_all),
                      worst_ratio, worst_name);
        gguf_close(ref);
        gguf_close(g);
    }
    assert_true(n_files > 0);
}

/* --- canonical codes --- */

static void test_reencode_reproduces_file(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    /* Fraction of blocks that must come back byte-identical / decoding to
     * the same values (measured in the comment). Single-scale types and
     * Q2_K, IQ4_XS: every block, bytes and all. Q3_K and Q6_K choose the
     * opposite sign convention for some scales (same values, other bytes).
     * Q3_K, Q4_K and Q5_K miss a few blocks whose stored min or scale is
     * not the one the first-level search lands on (errors ~0.5%). */
    static const struct {
        const char *file;
        double min_same_bytes, min_same_values;
    } files[] = {
        {"golden/models/llama-F16.gguf", 1, 1},
        {"golden/models/llama-BF16.gguf", 1, 1},
        {"golden/models/llama-Q8_0.gguf", 1, 1},
        {"golden/models/llama-Q4_0.gguf", 1, 1},
        {"golden/models/llama-Q4_1.gguf", 1, 1},
        {"golden/models/llama-Q5_0.gguf", 1, 1},
        {"golden/models/llama-Q5_1.gguf", 1, 1},
        {"golden/models/llama-IQ4_NL.gguf", 1, 1},
        {"golden/models/llama-Q2_K.gguf", 1, 1},
        {"golden/models/llama-IQ4_XS.gguf", 1, 1},
        {"golden/models/llama-MXFP4.gguf", 1, 1},
        {"golden/models/llama-Q6_K.gguf", 0, 1},     /* bytes 4542/5632, values all */
        {"golden/models/llama-Q3_K.gguf", 0, 0.99},  /* values 5590/5632 */
        {"golden/models/llama-Q4_K.gguf", 0, 0.999}, /* values 5629/5632 */
        {"golden/models/llama-Q5_K.gguf", 0, 0.98},  /* values 5533/5632 */
    };
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        gguf *g = open_model(files[f].file);
        if (g == NULL)
            continue;
        int64_t n_blocks = 0, n_same = 0, n_same_values = 0;
        uint32_t type = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *t = &g->tensors[i];
            if (!is_matrix(t))
                continue;
            type = t->type;
            const strata_type_info *ti = strata_type_get(type);
            float *y = decode_tensor(t);
            uint8_t *q = malloc(t->n_bytes);
            assert_non_null(q);
            assert_int_equal(tensor_quantize_row(type, y, q, t->n_elems), 0);
            const uint8_t *orig = t->data;
            float *y2 = malloc((size_t)t->n_elems * sizeof(float));
            assert_non_null(y2);
            assert_int_equal(tensor_dequantize_row(type, q, y2, t->n_elems), 0);
            for (size_t b = 0, e0 = 0; b < t->n_bytes; b += ti->block_bytes, e0 += ti->block_elems) {
                n_blocks++;
                n_same += memcmp(q + b, orig + b, ti->block_bytes) == 0;
                int same = 1; /* by value: -0 and +0 are the same weight */
                for (size_t k = 0; k < ti->block_elems; k++)
                    same &= y2[e0 + k] == y[e0 + k];
                n_same_values += same;
            }
            free(y2);
            free(q);
            free(y);
        }
        print_message("re-encode %-7s %lld of %lld blocks identical, %lld decode the same\n",
                      strata_type_name(type), (long long)n_same, (long long)n_blocks,
                      (long long)n_same_values);
        assert_true(n_blocks > 0);
        if (files[f].min_same_bytes >= 1.0)
            assert_int_equal(n_same, n_blocks);
        if (files[f].min_same_values >= 1.0)
            assert_int_equal(n_same_values, n_blocks);
        if ((double)n_same_values < files[f].min_same_values * (double)n_blocks)
            fail_msg("%s: only %lld of %lld re-encoded blocks decode to the same values",
                     strata_type_name(type), (long long)n_same_values, (long long)n_blocks);
        gguf_close(g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_golden_files),
        cmocka_unit_test(test_ternary_layouts_agree),
        cmocka_unit_test(test_encode_vs_llama_cpp),
        cmocka_unit_test(test_reencode_reproduces_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
