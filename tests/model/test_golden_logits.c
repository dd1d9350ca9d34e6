/* Logits against llama.cpp's (golden/logits, golden/long): every synthetic
 * model of every type and architecture, every golden sequence, every
 * position, evaluated as one batch exactly as llama.cpp did.
 *
 * The measure is max |ours - llama.cpp| over a sequence's [n_pos][n_vocab]
 * logits divided by max |llama.cpp's logit| of that sequence. Tolerances
 * are per weight type and were set from measurements (worst over the three
 * sequences and the architectures, printed by this test) with headroom:
 *
 *   F32   1e-3   measured 3.8e-4 .. 6.6e-4. llama.cpp itself is ~8e-4 off
 *                an exact forward pass: its attention rounds q and the
 *                softmax weights to F16, ours keeps them in float32.
 *   F16   2e-3   measured 9.3e-4 .. 1.2e-3: llama.cpp also rounds the
 *                activations to F16 before F16 matrix products; we keep
 *                float32 activations (closer to F32: 9.4e-4 vs its 1.5e-3).
 *   BF16  1.5e-2 measured 6.3e-3: likewise, activations rounded to BF16.
 *   quantized: Q4_0 3e-2; Q8_0 Q4_1 Q5_0 Q5_1 Q2_K IQ4_NL IQ4_XS 4e-2;
 *                Q3_K Q4_K Q5_K 4.5e-2; Q6_K and the Q4_K_M mixes 5e-2
 *                (about 1.5x the measured 2.0e-2 .. 3.4e-2; this test
 *                prints each model's figure). Both sides quantize activations to
 *                8 bits; on these random-weight models a perturbation of
 *                4e-4 in the float path (e.g. rounding attention to F16 as
 *                llama.cpp does) flips enough activation codes to move our
 *                own logits by 1.9e-2, so this is the floor, not an error of
 *                the kernels; llama.cpp's own repacked paths move its
 *                logits by up to 0.09 (~3 %).
 *   TQ1_0 TQ2_0 MXFP4 4e-2 (measured 2.5e-2 .. 2.6e-2 and 2.2e-2 at each
 *                SIMD level;
 *                max |diff| 0.092 and 0.065, inside the 0.07-0.12 by which
 *                a float computation with these exact weights differs from
 *                llama.cpp's 8-bit-activation logits).
 *   IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S IQ1_S IQ1_M 5e-2 (measured 2.5e-2
 *                .. 3.3e-2, max |diff| 0.084 .. 0.110: the same 0.07-0.12
 *                band; llama.cpp's own batch splits move these by 0.07).
 *
 * The second set of architectures (gemma3, gemma2, phi3, smollm3, mistral3;
 * F32, Q8_0 and Q4_K_M each) is held to the same per-type bounds: measured
 * F32 2.6e-4 .. 5.9e-4 (gemma2's logits are capped at 2, so its absolute
 * 1.2e-3 is llama.cpp's own F32 noise floor of 1.1e-3), Q8_0 1.1e-2 ..
 * 2.9e-2, Q4_K_M 1.0e-2 .. 3.4e-2.
 * Argmax: must agree at every position whose top-2 margin (in llama.cpp's
 * logits) exceeds twice the absolute tolerance. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model_testutil.h"

#include <inttypes.h>

typedef struct golden_type {
    const char *suffix; /* after "arch-" */
    double tol;
} golden_type;

static const golden_type g_types[] = {
    {"F32", 1e-3},     {"F16", 2e-3},     {"BF16", 1.5e-2},  {"Q8_0", 4e-2},
    {"Q4_0", 3e-2},    {"Q4_1", 4e-2},    {"Q5_0", 4e-2},    {"Q5_1", 4e-2},
    {"Q2_K", 4e-2},    {"Q3_K", 4.5e-2},  {"Q4_K", 4.5e-2},  {"Q5_K", 4.5e-2},
    {"Q6_K", 5e-2},    {"IQ4_NL", 4e-2},  {"IQ4_XS", 4e-2},  {"Q4_K_M", 5e-2},
    {"TQ1_0", 4e-2},   {"TQ2_0", 4e-2},   {"MXFP4", 4e-2},
    {"IQ2_XXS", 5e-2}, {"IQ2_XS", 5e-2},  {"IQ2_S", 5e-2},   {"IQ3_XXS", 5e-2},
    {"IQ3_S", 5e-2},   {"IQ1_S", 5e-2},   {"IQ1_M", 5e-2},
};

static const char *const g_models[] = {
    "llama-F32",    "llama-F16",    "llama-BF16",   "llama-Q8_0",  "llama-Q4_0",
    "llama-Q4_1",   "llama-Q5_0",   "llama-Q5_1",   "llama-Q2_K",  "llama-Q3_K",
    "llama-Q4_K",   "llama-Q5_K",   "llama-Q6_K",   "llama-IQ4_NL", "llama-IQ4_XS",
    "llama-Q4_K_M", "qwen2-F32",    "qwen2-F16",    "qwen2-Q8_0",  "qwen2-Q4_K",
    "qwen2-Q4_K_M", "qwen3-F32",    "qwen3-F16",    "qwen3-Q8_0",  "qwen3-Q4_K",
    "qwen3-Q4_K_M",
    "llama-TQ1_0",  "llama-TQ2_0",  "llama-MXFP4",
    "llama-IQ2_XXS", "llama-IQ2_XS", "llama-IQ2_S", "llama-IQ3_XXS", "llama-IQ3_S",
    "llama-IQ1_S",   "llama-IQ1_M",
    /* the architectures of the second set of golden files */
    "gemma3-F32",   "gemma3-Q8_0",  "gemma3-Q4_K_M",
    "gemma2-F32", "gemma2-Q8_0", "gemma2-Q4_K_M",
    "phi3-F32", "phi3-Q8_0", "phi3-Q4_K_M",
    "smollm3-F32", "smollm3-Q8_0", "smollm3-Q4_K_M",
    "mistral3-F32", "mistral3-Q8_0", "mistral3-Q4_K_M",
    "qwen3moe-F32", "qwen3moe-Q8_0", "qwen3moe-Q4_K_M",
    "llama-moe-F32", "llama-moe-Q8_0", "llama-moe-Q4_K_M",
    "gpt-oss-F32", "gpt-oss-Q8_0", "gpt-oss-Q4_K_M",
};

/* Mixture-of-experts files whose routing near-ties let rounding pick
 * another expert (the data README: 2nd and 3rd router logits within ~1e-3
 * of each other): positions allowed to exceed the tolerance, over seq1..3
 * (or over the 1000-token sequence), set from measurements. Every other
 * position must still be within it. */
typedef struct golden_flips {
    const char *name;
    int64_t n_pos; /* over seq1..3 */
    int64_t n_pos_long;
} golden_flips;

static const golden_flips g_flips[] = {
    /* measured 4 of 96 (Q8_0, Q4_K_M) and 24 of 1000 (Q8_0), each at a
     * position whose 2nd and 3rd router probabilities in our run are
     * within 1e-3 (up to 0.63, and 1.46 over 1000 tokens); F32 has none,
     * also over the 1000 tokens */
    {"qwen3moe-Q8_0", 6, 40},
    {"qwen3moe-Q4_K_M", 8, 0},
    /* measured 1 of 96 (0.31, router probabilities 1.6e-3 apart) */
    {"llama-moe-Q4_K_M", 2, 0},
};

static int64_t flips_of(const char *name, bool is_long)
{
    for (size_t i = 0; i < sizeof(g_flips) / sizeof(g_flips[0]); i++) {
        if (strcmp(name, g_flips[i].name) == 0)
            return is_long ? g_flips[i].n_pos_long : g_flips[i].n_pos;
    }
    return 0;
}

static double tol_of(const char *name)
{
    const char *dash = strrchr(name, '-');
    assert_non_null(dash);
    for (size_t i = 0; i < sizeof(g_types) / sizeof(g_types[0]); i++) {
        if (strcmp(dash + 1, g_types[i].suffix) == 0) return g_types[i].tol;
    }
    fail_msg("no tolerance for %s", name);
    return 0;
}

typedef struct cmp_result {
    double max_diff;      /* max |ours - golden| over the positions within pos_tol */
    double max_diff_all;  /* ... over every position */
    int64_t n_over;       /* positions with some |ours - golden| above pos_tol */
    double max_ref;       /* max |golden| */
    int64_t n_checked;    /* positions whose argmax was compared */
    int64_t n_argmax_bad; /* of those, how many differ */
} cmp_result;

/* Compares n_pos rows; argmax is checked where golden's margin > margin.
 * Positions with a difference above pos_tol are counted in n_over and left
 * out of max_diff and of the argmax check (they fail the test unless the
 * model is allowed routing flips). */
static void compare(const float *ours, const float *gold, int64_t n_pos, int64_t n_vocab,
                    double margin, double pos_tol, cmp_result *r)
{
    memset(r, 0, sizeof(*r));
    for (int64_t i = 0; i < n_pos * n_vocab; i++) {
        if (fabs((double)gold[i]) > r->max_ref) r->max_ref = fabs((double)gold[i]);
    }
    for (int64_t p = 0; p < n_pos; p++) {
        const float *g = gold + p * n_vocab, *o = ours + p * n_vocab;
        double row = 0;
        for (int64_t i = 0; i < n_vocab; i++) {
            double d = fabs((double)o[i] - (double)g[i]);
            if (!(d <= row)) row = d; /* NaN propagates */
        }
        if (!(row <= r->max_diff_all)) r->max_diff_all = row;
        if (!(row <= pos_tol)) {
            r->n_over++;
            continue;
        }
        if (row > r->max_diff) r->max_diff = row;
        if (mt_top2_margin(g, n_vocab) <= margin) continue;
        r->n_checked++;
        if (mt_argmax(o, n_vocab) != mt_argmax(g, n_vocab)) r->n_argmax_bad++;
    }
}

/* Evaluates one golden model on seq1..3 and checks it. */
static void check_model(const char *name, int n_threads)
{
    char rel[256], path[4096];
    snprintf(rel, sizeof(rel), "golden/models/%s.gguf", name);
    model *m = NULL;
    MT_OPEN(m, rel);
    const int64_t n_vocab = m->hp.n_vocab;
    const double tol = tol_of(name);
    model_ctx *ctx = mt_ctx(m, 64, 1, n_threads, 0);
    double worst_rel = 0, worst_abs = 0, worst_all = 0;
    int64_t checked = 0, bad = 0, n_over = 0;
    for (int k = 1; k <= 3; k++) {
        snprintf(rel, sizeof(rel), "golden/seq%d.txt", k);
        TESTDATA_FILE(path, rel);
        int64_t n_pos = 0;
        int32_t *ids = mt_read_ids(path, &n_pos);
        assert_non_null(ids);
        assert_int_equal(n_pos, 32);
        snprintf(rel, sizeof(rel), "golden/logits/%s.seq%d.logits.f32", name, k);
        TESTDATA_FILE(path, rel);
        int64_t n_gold = 0;
        float *gold = mt_read_f32(path, &n_gold);
        assert_non_null(gold);
        assert_int_equal(n_gold, n_pos * n_vocab);
        float *ours = malloc((size_t)n_gold * sizeof(float));
        mt_eval(ctx, 0, ids, n_pos, ours);

        double max_ref = 0;
        for (int64_t i = 0; i < n_gold; i++) max_ref = fmax(max_ref, fabs((double)gold[i]));
        cmp_result r;
        compare(ours, gold, n_pos, n_vocab, 2 * tol * max_ref, tol * max_ref, &r);
        double rel_diff = r.max_diff / r.max_ref;
        n_over += r.n_over;
        worst_all = fmax(worst_all, r.max_diff_all);
        if (!(rel_diff <= worst_rel)) worst_rel = rel_diff;
        worst_abs = fmax(worst_abs, r.max_diff);
        checked += r.n_checked;
        bad += r.n_argmax_bad;
        if (!(rel_diff <= tol)) {
            fail_msg("%s seq%d: max |diff| %.4g is %.3g of max |logit| %.4g, above %.3g", name, k,
                     r.max_diff, rel_diff, r.max_ref, tol);
        }
        if (r.n_argmax_bad != 0) {
            fail_msg("%s seq%d: argmax differs at %" PRId64 " of %" PRId64
                     " positions with a clear margin",
                     name, k, r.n_argmax_bad, r.n_checked);
        }
        free(ours);
        free(gold);
        free(ids);
    }
    print_message("%-14s max|diff| %.4f  rel %.2e  (tol %.1e)  argmax same at %" PRId64
                  "/%" PRId64 " clear positions\n",
                  name, worst_abs, worst_rel, tol, checked - bad, checked);
    if (n_over > 0)
        print_message("%-14s %" PRId64 " of 96 positions over the tolerance (allowed %" PRId64
                      ", routing flips), max |diff| there %.4f\n",
                      name, n_over, flips_of(name, false), worst_all);
    if (n_over > flips_of(name, false)) {
        fail_msg("%s: %" PRId64 " positions differ by more than %.3g of max |logit| (max %.4g)",
                 name, n_over, tol, worst_all);
    }
    model_ctx_free(ctx);
    model_close(m);
}

static void test_all_models_three_sequences(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    size_t n = sizeof(g_models) / sizeof(g_models[0]);
    for (size_t i = 0; i < n; i++) {
        /* Alternate 1 and 2 threads: the results may not depend on it. */
        check_model(g_models[i], 1 + (int)(i % 2));
    }
}

/* The 1000-token sequence: positions past 512 (rope and attention at
 * depth, many KV blocks) and prefill in chunks of n_batch. */
static void check_long(const char *name, int64_t n_batch)
{
    char rel[256], path[4096];
    snprintf(rel, sizeof(rel), "golden/models/%s.gguf", name);
    model *m = NULL;
    MT_OPEN(m, rel);
    const int64_t n_vocab = m->hp.n_vocab;
    const double tol = tol_of(name);
    TESTDATA_FILE(path, "golden/long/seqlong.txt");
    int64_t n_pos = 0;
    int32_t *ids = mt_read_ids(path, &n_pos);
    assert_non_null(ids);
    assert_int_equal(n_pos, 1000);
    snprintf(rel, sizeof(rel), "golden/long/%s.seqlong.logits.f32", name);
    TESTDATA_FILE(path, rel);
    int64_t n_gold = 0;
    float *gold = mt_read_f32(path, &n_gold);
    assert_non_null(gold);
    assert_int_equal(n_gold, n_pos * n_vocab);
    float *ours = malloc((size_t)(n_pos * n_vocab) * sizeof(float));
    model_ctx *ctx = mt_ctx(m, n_pos, 1, 2, n_batch);
    mt_eval(ctx, 0, ids, n_pos, ours);
    double max_ref = 0;
    for (int64_t i = 0; i < n_pos * n_vocab; i++) max_ref = fmax(max_ref, fabs((double)gold[i]));
    cmp_result r, deep;
    compare(ours, gold, n_pos, n_vocab, 2 * tol * max_ref, tol * max_ref, &r);
    compare(ours + 512 * n_vocab, gold + 512 * n_vocab, n_pos - 512, n_vocab,
            2 * tol * max_ref, tol * max_ref, &deep);
    double rel_diff = r.max_diff / r.max_ref;
    print_message("%-14s long (%" PRId64 " positions, chunks of %" PRId64
                  "): max|diff| %.4f  rel %.2e (past 512: %.2e)  argmax same at %" PRId64
                  "/%" PRId64 "\n",
                  name, n_pos, n_batch, r.max_diff, rel_diff, deep.max_diff / r.max_ref,
                  r.n_checked - r.n_argmax_bad, r.n_checked);
    if (!(rel_diff <= tol)) {
        fail_msg("%s long: max |diff| %.4g is %.3g of max |logit|, above %.3g", name, r.max_diff,
                 rel_diff, tol);
    }
    assert_int_equal(r.n_argmax_bad, 0);
    if (r.n_over > 0)
        print_message("%-14s long: %" PRId64 " of 1000 positions over the tolerance (allowed %" PRId64
                      ", routing flips), max |diff| there %.4f\n",
                      name, r.n_over, flips_of(name, true), r.max_diff_all);
    if (r.n_over > flips_of(name, true)) {
        fail_msg("%s long: %" PRId64 " positions differ by more than %.3g of max |logit| (max %.4g)",
                 name, r.n_over, tol, r.max_diff_all);
    }
    model_ctx_free(ctx);
    model_close(m);
    free(ours);
    free(gold);
    free(ids);
}

static void test_long_llama_q8_0(void **state)
{
    (void)state;
    check_long("llama-Q8_0", 512);
}

static void test_long_qwen2_f16(void **state)
{
    (void)state;
    check_long("qwen2-F16", 384);
}

/* gemma3: the window of 8 in layer 0 across chunk boundaries, from one
 * batch of 1000 down to single-token steps (the decode path). */
static void test_long_gemma3_f32(void **state)
{
    (void)state;
    const int64_t chunks[] = {1000, 384, 7, 1};
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++)
        check_long("gemma3-F32", chunks[i]);
}

static void test_long_gemma3_q8_0(void **state)
{
    (void)state;
    const int64_t chunks[] = {512, 5};
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++)
        check_long("gemma3-Q8_0", chunks[i]);
}

static void test_long_qwen3moe(void **state)
{
    (void)state;
    check_long("qwen3moe-F32", 512);
    check_long("qwen3moe-F32", 7);
    check_long("qwen3moe-Q8_0", 384);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_models_three_sequences),
        cmocka_unit_test(test_long_llama_q8_0),
        cmocka_unit_test(test_long_qwen2_f16),
        cmocka_unit_test(test_long_gemma3_f32),
        cmocka_unit_test(test_long_gemma3_q8_0),
        cmocka_unit_test(test_long_qwen3moe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
